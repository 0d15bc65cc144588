package control_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/guest-agent/control"
)

// fakeGuest listens like QEMU's chardev and answers like the agent: it
// leaves a stale response first, then echoes each request's arguments.
// With echo it first echoes the line it gets, as a tty does while the agent
// has opened it but not yet set it to raw mode.
func fakeGuest(t *testing.T, answer bool, echo ...bool) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "control.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		if !answer {
			time.Sleep(10 * time.Second)
			return
		}
		r := control.NewReader(conn)
		stale, _ := control.Encode(control.Message{Kind: control.KindResponse, ID: 99, Stdout: "stale"})
		conn.Write(append([]byte("half a line from before"), stale...))
		for {
			m, err := r.Next()
			if control.Skippable(err) {
				continue
			}
			if err != nil {
				return
			}
			if len(echo) > 0 && echo[0] {
				b, _ := control.Encode(m)
				conn.Write(b)
				echo = nil
			}
			var out control.Message
			switch m.Kind {
			case control.KindHello:
				out = control.Message{Kind: control.KindHello, Agent: "fake"}
			case control.KindRequest:
				out = control.Message{Kind: control.KindResponse, ID: m.ID, Stdout: strings.Join(m.Args, " ")}
			}
			b, _ := control.Encode(out)
			conn.Write(b)
		}
	}()
	return path
}

func TestClientExec(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := control.Dial(ctx, fakeGuest(t, true))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Agent() != "fake" {
		t.Errorf("agent %q", c.Agent())
	}
	for _, args := range [][]string{{"info"}, {"run", "latency", "--json"}} {
		m, err := c.Exec(ctx, args...)
		if err != nil {
			t.Fatal(err)
		}
		if m.Stdout != strings.Join(args, " ") {
			t.Errorf("exec %q: stdout %q", args, m.Stdout)
		}
	}
}

// TestDialSkipsEcho: the host's own hello, echoed back by a guest tty not
// yet in raw mode, is not the agent's (the e2e boot spec once saw agent "").
func TestDialSkipsEcho(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := control.Dial(ctx, fakeGuest(t, true, true))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Agent() != "fake" {
		t.Errorf("agent %q, want the fake's hello, not the echo of the host's", c.Agent())
	}
}

func TestDialNoAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	_, err := control.Dial(ctx, fakeGuest(t, false))
	if !errors.Is(err, control.ErrNoAgent) {
		t.Fatalf("dial with a silent guest: %v, want ErrNoAgent", err)
	}
	_, err = control.Dial(ctx, "/nonexistent/control.sock")
	if !errors.Is(err, control.ErrNoAgent) {
		t.Fatalf("dial without a socket: %v, want ErrNoAgent", err)
	}
}
