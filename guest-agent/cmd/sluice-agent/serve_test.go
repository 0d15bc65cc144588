package main

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/guest-agent/control"
	"github.com/sluice-gpu/sluice/guest-agent/sdk/sdktest"
)

// TestServe drives serve as the host would: hello, a workload request that
// inherits serve's global flags, a failing request, noise, and EOF.
func TestServe(t *testing.T) {
	sock := endpoint(t, sdktest.Config{})
	hostR, guestW := io.Pipe()
	guestR, hostW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- serve(t.Context(), guestR, guestW, []string{"--endpoint=" + sock})
		guestW.Close()
	}()
	msgs := control.NewReader(hostR)
	next := func() control.Message {
		t.Helper()
		m, err := msgs.Next()
		if err != nil {
			t.Fatalf("reading from serve: %v", err)
		}
		return m
	}
	send := func(m control.Message) {
		t.Helper()
		b, err := control.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := hostW.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if m := next(); m.Kind != control.KindHello || !strings.HasPrefix(m.Agent, "sluice-agent ") {
		t.Fatalf("first message %+v, want a hello", m)
	}

	hostW.Write([]byte("line noise\n"))
	send(control.Message{Kind: control.KindRequest, ID: 1, Args: []string{"run", "latency", "--count", "20", "--warmup", "1", "--json"}})
	resp := next()
	if resp.Kind != control.KindResponse || resp.ID != 1 || resp.Exit != 0 {
		t.Fatalf("latency response %+v", resp)
	}
	var lat struct {
		Count int `json:"count"`
	}
	if err := json.Unmarshal([]byte(resp.Stdout), &lat); err != nil || lat.Count != 20 {
		t.Fatalf("latency result %q: %v", resp.Stdout, err)
	}

	send(control.Message{Kind: control.KindRequest, ID: 2, Args: []string{"run", "throttle", "--kernel", "-5us"}})
	if resp := next(); resp.ID != 2 || resp.Exit != 1 || !strings.Contains(resp.Stderr, "sluice-agent: ") {
		t.Fatalf("bad request's response %+v", resp)
	}
	send(control.Message{Kind: control.KindRequest, ID: 3, Args: []string{"serve"}})
	if resp := next(); resp.ID != 3 || resp.Exit != 2 {
		t.Fatalf("nested serve's response %+v", resp)
	}
	send(control.Message{Kind: control.KindHello})
	if m := next(); m.Kind != control.KindHello {
		t.Fatalf("hello answered with %+v", m)
	}

	hostW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve after EOF: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after EOF")
	}
}

func TestGlobalArgs(t *testing.T) {
	root := newRootCmd(io.Discard)
	var got []string
	serveCmd, _, err := root.Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	serveCmd.RunE = func(cmd *cobra.Command, _ []string) error {
		got = globalArgs(cmd.Root().PersistentFlags())
		return nil
	}
	root.SetArgs([]string{"--device", "--spin", "1s", "serve", "--control", "/dev/null"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if want := "--device=auto --spin=1s"; strings.Join(got, " ") != want {
		t.Errorf("globalArgs = %q, want %q", got, want)
	}
}
