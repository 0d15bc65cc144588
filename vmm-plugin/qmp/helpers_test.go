package qmp_test

import (
	"context"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/vmm-plugin/qmp"
)

// testCtx is the test's context, bounded so a hang fails rather than stalls.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustDial(t *testing.T, path string) *qmp.Monitor {
	t.Helper()
	m, err := qmp.Dial(testCtx(t), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// rawServer listens on path and runs fn on the first connection, for
// misbehaviour qmptest does not script. It stops when the test ends.
func rawServer(t *testing.T, path string, fn func(c net.Conn)) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conn net.Conn
	wg.Go(func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		mu.Lock()
		conn = c
		mu.Unlock()
		defer c.Close()
		fn(c)
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		if conn != nil {
			conn.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

type rawRequest struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments"`
	ID        json.RawMessage `json:"id"`
}

// rawHandshake greets and answers qmp_capabilities on c.
func rawHandshake(t *testing.T, c net.Conn) *json.Decoder {
	rawSend(t, c, `{"QMP":{"version":{"qemu":{"micro":0,"minor":2,"major":7},"package":""},"capabilities":["oob"]}}`)
	dec := json.NewDecoder(c)
	req := rawRead(t, dec)
	if req.Execute != "qmp_capabilities" {
		t.Errorf("first command %q, want qmp_capabilities", req.Execute)
	}
	rawSend(t, c, `{"return":{},"id":`+string(req.ID)+`}`)
	return dec
}

func rawRead(t *testing.T, dec *json.Decoder) rawRequest {
	var req rawRequest
	if err := dec.Decode(&req); err != nil {
		t.Errorf("reading command: %v", err)
	}
	return req
}

func rawSend(t *testing.T, c net.Conn, msg string) {
	if _, err := c.Write([]byte(msg + "\r\n")); err != nil {
		t.Errorf("sending %s: %v", msg, err)
	}
}
