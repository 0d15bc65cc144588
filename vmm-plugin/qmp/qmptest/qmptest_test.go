package qmptest_test

import (
	"bufio"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/vmm-plugin/qmp/qmptest"
)

// TestServer checks the fake's wire behaviour with a raw client.
func TestServer(t *testing.T) {
	srv := qmptest.New(t, qmptest.Script{
		"query-status": {Return: map[string]any{"status": "running", "running": true}},
		"quit":         {Events: []qmptest.Event{{Name: "SHUTDOWN"}}, Exit: true},
	}.Handle, qmptest.WithHandshakeEvents(qmptest.Event{Name: "RESUME"}))
	if err := srv.Emit("X", nil); err == nil {
		t.Fatal("Emit without a client succeeded")
	}
	c, err := net.Dial("unix", srv.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	step := func(send string, want ...string) {
		t.Helper()
		if send != "" {
			if _, err := c.Write([]byte(send)); err != nil {
				t.Fatal(err)
			}
		}
		for _, w := range want {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("after %s: %v", send, err)
			}
			if !strings.HasSuffix(line, "\r\n") {
				t.Fatalf("line %q does not end in CRLF", line)
			}
			var got, exp map[string]any
			json.Unmarshal([]byte(line), &got)
			delete(got, "timestamp")
			if err := json.Unmarshal([]byte(w), &exp); err != nil {
				t.Fatal(err)
			}
			if gj, _ := json.Marshal(got); string(gj) != mustJSON(exp) {
				t.Fatalf("after %s: got %s, want %s", send, line, w)
			}
		}
	}
	step("", `{"QMP":{"version":{"qemu":{"major":7,"minor":2,"micro":0},"package":"qmptest"},"capabilities":["oob"]}}`)
	step(`{"execute":"query-status","id":1}`,
		`{"error":{"class":"CommandNotFound","desc":"Expecting capabilities negotiation with 'qmp_capabilities'"},"id":1}`)
	step(`{"execute":"qmp_capabilities","id":"a"}`, `{"event":"RESUME"}`, `{"return":{},"id":"a"}`)
	step(`{"execute":"qmp_capabilities"}`,
		`{"error":{"class":"CommandNotFound","desc":"Capabilities negotiation is already complete, command ignored"}}`)
	step(`[1]`, `{"error":{"class":"GenericError","desc":"QMP input must be a JSON object with 'execute'"}}`)
	step(`{"execute":"query-status","arguments":{"x":1},"id":2}`, `{"return":{"status":"running","running":true},"id":2}`)
	step(`{"execute":"nope","id":3}`, `{"error":{"class":"CommandNotFound","desc":"The command nope has not been found"},"id":3}`)
	if err := srv.Emit("Y", map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	step("", `{"event":"Y","data":{"n":1}}`)
	step(`{"execute":"quit","id":4}`, `{"return":{},"id":4}`, `{"event":"SHUTDOWN"}`)
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("connection open after quit")
	}
	if _, err := net.Dial("unix", srv.Path()); err == nil {
		t.Fatal("still listening after quit")
	}
	cmds := srv.Commands()
	if len(cmds) != 3 || cmds[0].Name != "query-status" || string(cmds[0].Args) != `{"x":1}` || cmds[2].Name != "quit" {
		t.Fatalf("Commands() = %+v", cmds)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestCloseWithIdleClient checks Close does not wait for a client that
// never speaks.
func TestCloseWithIdleClient(t *testing.T) {
	srv := qmptest.New(t, nil)
	c, err := net.Dial("unix", srv.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Read(make([]byte, 1)) // the greeting has started: the server serves c
	done := make(chan struct{})
	go func() { srv.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung")
	}
}

func TestSocketPath(t *testing.T) {
	long := strings.Repeat("x", 120)
	t.Run(long, func(t *testing.T) {
		if p := qmptest.SocketPath(t, "s.sock"); len(p) >= 108 {
			t.Fatalf("path %q too long for sun_path", p)
		}
	})
}
