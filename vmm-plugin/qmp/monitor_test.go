package qmp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/vmm-plugin/qmp"
	"github.com/sluice-gpu/sluice/vmm-plugin/qmp/qmptest"
)

func TestHandshakeEventIsKept(t *testing.T) {
	srv := qmptest.New(t, qmptest.Script{
		"query-status": {Return: map[string]any{"status": "running", "running": true}},
	}.Handle, qmptest.WithHandshakeEvents(
		qmptest.Event{Name: "RESUME"},
		qmptest.Event{Name: "NIC_RX_FILTER_CHANGED", Data: map[string]string{"path": "/x"}},
	))
	m := mustDial(t, srv.Path())

	got := m.HandshakeEvents()
	if len(got) != 2 || got[0].Name != "RESUME" || got[1].Name != "NIC_RX_FILTER_CHANGED" ||
		string(got[1].Data) != `{"path":"/x"}` || got[0].Timestamp.IsZero() {
		t.Fatalf("HandshakeEvents() = %+v", got)
	}
	// The events were not taken for qmp_capabilities' reply, so replies
	// still line up.
	st, err := m.Status(testCtx(t))
	if err != nil || st != (qmp.StatusInfo{Status: "running", Running: true}) {
		t.Fatalf("Status() = %+v, %v", st, err)
	}
	if v := m.Greeting().Version; v != (qmp.Version{Major: 7, Minor: 2}) {
		t.Fatalf("greeting version %v", v)
	}
}

func TestBigReply(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 200<<10/16) // 200 KiB, over bufio.Scanner's 64 KiB
	srv := qmptest.New(t, qmptest.Script{"query-big": {Return: big}}.Handle)
	m := mustDial(t, srv.Path())
	var got string
	if err := m.Execute(testCtx(t), "query-big", nil, &got); err != nil {
		t.Fatal(err)
	}
	if got != big {
		t.Fatalf("got %d bytes, want %d", len(got), len(big))
	}
}

func TestConcurrentExecute(t *testing.T) {
	// The fake echoes each command's arguments.
	srv := qmptest.New(t, func(c qmptest.Command) qmptest.Reply { return qmptest.Reply{Return: c.Args} })
	m := mustDial(t, srv.Path())
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				type arg struct{ G, I int }
				var got arg
				if err := m.Execute(ctx, "echo", arg{g, i}, &got); err != nil {
					t.Error(err)
					return
				}
				if got != (arg{g, i}) {
					t.Errorf("goroutine %d call %d got %+v", g, i, got)
				}
			}
		})
	}
	wg.Wait()
}

func TestRepliesMatchedByID(t *testing.T) {
	path := qmptest.SocketPath(t, "qmp.sock")
	const n = 8
	oldest := make(chan [2]int, 1) // the n of the first two commands received
	rawServer(t, path, func(c net.Conn) {
		dec := rawHandshake(t, c)
		reqs := make([]rawRequest, n)
		for i := range reqs {
			reqs[i] = rawRead(t, dec)
		}
		var first [2]int
		for i := range first {
			var a struct{ N int }
			json.Unmarshal(reqs[i].Arguments, &a)
			first[i] = a.N
		}
		oldest <- first
		// Answer in reverse, with events in between, then the two oldest
		// without an id (QEMU's answer to input it could not parse).
		for i := n - 1; i >= 2; i-- {
			rawSend(t, c, fmt.Sprintf(`{"return":%s,"id":%s}`, reqs[i].Arguments, reqs[i].ID))
			rawSend(t, c, `{"event":"X","timestamp":{"seconds":1,"microseconds":2}}`)
		}
		rawSend(t, c, `{"return":{},"id":"someone else's"}`)
		rawSend(t, c, `{"error":{"class":"GenericError","desc":"JSON parse error 0"}}`)
		rawSend(t, c, `{"error":{"class":"GenericError","desc":"JSON parse error 1"}}`)
		io.Copy(io.Discard, c)
	})
	m := mustDial(t, path)
	ctx := testCtx(t)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var got struct{ N int }
			errs[i] = m.Execute(ctx, "c", map[string]int{"n": i}, &got)
			if errs[i] == nil && got.N != i {
				errs[i] = fmt.Errorf("got reply %+v", got)
			}
		})
	}
	wg.Wait()
	first := <-oldest
	for i, err := range errs {
		var qe *qmp.Error
		switch i {
		case first[0], first[1]:
			want := "JSON parse error 0"
			if i == first[1] {
				want = "JSON parse error 1"
			}
			if !errors.As(err, &qe) || qe.Desc != want {
				t.Errorf("call %d: %v, want %q", i, err, want)
			}
		default:
			if err != nil {
				t.Errorf("call %d: %v", i, err)
			}
		}
	}
}

func TestErrorReply(t *testing.T) {
	srv := qmptest.New(t, qmptest.Script{
		"device_add": {ErrorClass: "GenericError", ErrorDesc: "Duplicate ID 'gpu0' for device"},
	}.Handle)
	m := mustDial(t, srv.Path())
	ctx := testCtx(t)

	err := m.DeviceAdd(ctx, "ivshmem-doorbell", "gpu0", nil)
	var qe *qmp.Error
	if !errors.As(err, &qe) || qe.Class != qmp.ClassGenericError || qe.Command != "device_add" {
		t.Fatalf("DeviceAdd() = %#v", err)
	}
	if want := "qmp device_add: GenericError: Duplicate ID 'gpu0' for device"; err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	err = m.Execute(ctx, "nope", nil, nil)
	if !errors.As(err, &qe) || qe.Class != qmp.ClassCommandNotFound {
		t.Fatalf("unknown command: %v", err)
	}
	// An error reply leaves the connection usable.
	if err := m.DeviceDel(ctx, "gpu0"); !errors.As(err, &qe) || qe.Command != "device_del" {
		t.Fatalf("DeviceDel() = %v", err)
	}
}

func TestQuit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply qmptest.Reply
	}{
		{"reply then EOF", qmptest.Reply{Exit: true}},
		{"EOF without reply", qmptest.Reply{NoReply: true, Exit: true}},
		{"reply and event then EOF", qmptest.Reply{
			Events: []qmptest.Event{{Name: "SHUTDOWN", Data: map[string]any{"guest": false, "reason": "host-qmp-quit"}}},
			Exit:   true,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := qmptest.New(t, qmptest.Script{"quit": tc.reply}.Handle)
			m := mustDial(t, srv.Path())
			if err := m.Quit(testCtx(t)); err != nil {
				t.Fatalf("Quit() = %v", err)
			}
			select {
			case <-m.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("connection still open after quit")
			}
			if err := m.Quit(testCtx(t)); !errors.Is(err, qmp.ErrClosed) {
				t.Fatalf("second Quit() = %v, want ErrClosed", err)
			}
		})
	}
}

func TestConnectionLoss(t *testing.T) {
	srv := qmptest.New(t, qmptest.Script{
		"hang":    {NoReply: true},
		"die":     {NoReply: true, Exit: true},
		"release": {},
	}.Handle)
	m := mustDial(t, srv.Path())
	ctx := testCtx(t)
	events, _ := m.Subscribe()

	pending := make(chan error, 2)
	go func() { pending <- m.Execute(ctx, "hang", nil, nil) }()
	for len(srv.Commands()) == 0 {
		time.Sleep(time.Millisecond)
	}
	go func() { pending <- m.Execute(ctx, "die", nil, nil) }() // not quit: no success
	for range 2 {
		select {
		case err := <-pending:
			if !errors.Is(err, qmp.ErrClosed) || !errors.Is(err, io.EOF) {
				t.Fatalf("pending call: %v, want ErrClosed wrapping EOF", err)
			}
		case <-ctx.Done():
			t.Fatal("pending call never failed")
		}
	}
	if _, err := m.Status(ctx); !errors.Is(err, qmp.ErrClosed) {
		t.Fatalf("later call: %v", err)
	}
	if _, ok := <-events; ok {
		t.Fatal("subscription not closed")
	}
	if ch, _ := m.Subscribe(); ch != nil {
		if _, ok := <-ch; ok {
			t.Fatal("subscription after loss not closed")
		}
	}
	if err := m.Err(); !errors.Is(err, qmp.ErrClosed) {
		t.Fatalf("Err() = %v", err)
	}
	m.Close()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestClose(t *testing.T) {
	srv := qmptest.New(t, qmptest.Script{"hang": {NoReply: true}}.Handle)
	m := mustDial(t, srv.Path())
	ctx := testCtx(t)
	done := make(chan error, 1)
	go func() { done <- m.Execute(ctx, "hang", nil, nil) }()
	for len(srv.Commands()) == 0 {
		time.Sleep(time.Millisecond)
	}
	m.Close()
	if err := <-done; !errors.Is(err, qmp.ErrClosed) {
		t.Fatalf("pending call after Close: %v", err)
	}
	if err := m.Err(); !errors.Is(err, qmp.ErrClosed) || err.Error() != qmp.ErrClosed.Error() {
		t.Fatalf("Err() after Close = %v, want plain ErrClosed", err)
	}
}

func TestContextCancel(t *testing.T) {
	srv := qmptest.New(t, func(c qmptest.Command) qmptest.Reply {
		if c.Name == "slow" {
			time.Sleep(100 * time.Millisecond)
			return qmptest.Reply{Return: "slow"}
		}
		return qmptest.Reply{Return: "fast"}
	})
	m := mustDial(t, srv.Path())

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	var got string
	if err := m.Execute(ctx, "slow", nil, &got); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Execute(slow) = %v, want DeadlineExceeded", err)
	}
	// slow's late reply must not be taken for fast's.
	if err := m.Execute(testCtx(t), "fast", nil, &got); err != nil || got != "fast" {
		t.Fatalf("Execute(fast) = %q, %v", got, err)
	}
	done, cancel2 := context.WithCancel(t.Context())
	cancel2()
	if err := m.Execute(done, "fast", nil, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Execute with a cancelled context = %v", err)
	}
	if n := len(srv.Commands()); n != 2 {
		t.Fatalf("server got %d commands, want 2 (none for a cancelled context)", n)
	}
}

func TestSubscribe(t *testing.T) {
	srv := qmptest.New(t, qmptest.Script{
		"system_powerdown": {Events: []qmptest.Event{
			{Name: "POWERDOWN"},
			{Name: "SHUTDOWN", Data: map[string]any{"guest": true, "reason": "guest-shutdown"}},
		}},
	}.Handle)
	m := mustDial(t, srv.Path())
	shutdown, cancelShutdown := m.Subscribe("SHUTDOWN")
	all, cancelAll := m.Subscribe()
	defer cancelAll()

	if err := m.SystemPowerdown(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	e := recv(t, shutdown)
	if e.Name != "SHUTDOWN" || string(e.Data) != `{"guest":true,"reason":"guest-shutdown"}` ||
		time.Since(e.Timestamp) > time.Minute {
		t.Fatalf("got %+v", e)
	}
	if e := recv(t, all); e.Name != "POWERDOWN" || e.Data != nil {
		t.Fatalf("got %+v, want POWERDOWN without data", e)
	}
	if e := recv(t, all); e.Name != "SHUTDOWN" {
		t.Fatalf("got %+v, want SHUTDOWN", e)
	}

	cancelShutdown()
	cancelShutdown()
	if _, ok := <-shutdown; ok {
		t.Fatal("cancelled subscription still open")
	}
	if err := srv.Emit("SHUTDOWN", nil); err != nil {
		t.Fatal(err)
	}
	if e := recv(t, all); e.Name != "SHUTDOWN" {
		t.Fatalf("got %+v", e)
	}
}

func TestSlowSubscriberDoesNotBlock(t *testing.T) {
	srv := qmptest.New(t, nil)
	m := mustDial(t, srv.Path())
	ch, cancel := m.Subscribe("X")
	defer cancel()
	const extra = 10
	for range qmp.SubscriberBuffer + extra {
		if err := srv.Emit("X", nil); err != nil {
			t.Fatal(err)
		}
	}
	// The events were sent before this reply, so the reader has handled
	// them once it returns; it returning at all shows it was not blocked.
	if err := m.Execute(testCtx(t), "sync", nil, nil); err != nil {
		t.Fatal(err)
	}
	if n := m.DroppedEvents(); n != extra {
		t.Fatalf("DroppedEvents() = %d, want %d", n, extra)
	}
	if n := len(ch); n != qmp.SubscriberBuffer {
		t.Fatalf("%d events buffered, want %d", n, qmp.SubscriberBuffer)
	}
}

func recv(t *testing.T, ch <-chan qmp.Event) qmp.Event {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatal("subscription closed")
		}
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	return qmp.Event{}
}

func TestDial(t *testing.T) {
	t.Run("no socket", func(t *testing.T) {
		_, err := qmp.Dial(testCtx(t), qmptest.SocketPath(t, "none.sock"))
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Dial() = %v, want ErrNotExist", err)
		}
	})
	t.Run("retry until the socket appears", func(t *testing.T) {
		path := qmptest.SocketPath(t, "late.sock")
		go func() {
			time.Sleep(100 * time.Millisecond)
			rawServer(t, path, func(c net.Conn) {
				rawHandshake(t, c)
				io.Copy(io.Discard, c)
			})
		}()
		m, err := qmp.DialRetry(testCtx(t), path)
		if err != nil {
			t.Fatal(err)
		}
		m.Close()
	})
	t.Run("retry until the deadline", func(t *testing.T) {
		// Long enough that an attempt ends before it on a loaded host (at
		// 100 ms one make test saw the first attempt start past it).
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := qmp.DialRetry(ctx, qmptest.SocketPath(t, "none.sock"))
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("DialRetry() = %v", err)
		}
	})
	t.Run("the dial's deadline before the context's", func(t *testing.T) {
		// On a loaded host the dial's timer can fire before the
		// context's, whose Err is nil still: the deadline is the cause
		// all the same, and what kept failing is the attempt before.
		ctx := lateCtx{Context: t.Context(), deadline: time.Now().Add(100 * time.Millisecond)}
		_, err := qmp.DialRetry(ctx, qmptest.SocketPath(t, "none.sock"))
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("DialRetry() = %v", err)
		}
	})
	t.Run("no greeting", func(t *testing.T) {
		path := qmptest.SocketPath(t, "mute.sock")
		rawServer(t, path, func(c net.Conn) { io.Copy(io.Discard, c) })
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		if _, err := qmp.Dial(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Dial() = %v", err)
		}
	})
	t.Run("not QMP", func(t *testing.T) {
		path := qmptest.SocketPath(t, "http.sock")
		rawServer(t, path, func(c net.Conn) {
			rawSend(t, c, `{"return":{}}`)
			io.Copy(io.Discard, c)
		})
		if _, err := qmp.Dial(testCtx(t), path); !errors.Is(err, qmp.ErrClosed) ||
			!strings.Contains(err.Error(), "greeting") {
			t.Fatalf("Dial() = %v", err)
		}
	})
	t.Run("capabilities refused", func(t *testing.T) {
		path := qmptest.SocketPath(t, "refuse.sock")
		rawServer(t, path, func(c net.Conn) {
			rawSend(t, c, `{"QMP":{"version":{"qemu":{"micro":0,"minor":2,"major":7},"package":""},"capabilities":[]}}`)
			req := rawRead(t, json.NewDecoder(c))
			rawSend(t, c, `{"error":{"class":"GenericError","desc":"no"},"id":`+string(req.ID)+`}`)
			io.Copy(io.Discard, c)
		})
		var qe *qmp.Error
		if _, err := qmp.Dial(testCtx(t), path); !errors.As(err, &qe) || qe.Command != "qmp_capabilities" {
			t.Fatalf("Dial() = %v", err)
		}
	})
}

func TestArguments(t *testing.T) {
	srv := qmptest.New(t, nil)
	m := mustDial(t, srv.Path())
	ctx := testCtx(t)
	var nilMap map[string]any
	for _, args := range []any{nil, nilMap, map[string]int{"a": 1}} {
		if err := m.Execute(ctx, "cmd", args, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Execute(ctx, "cmd", 5, nil); err == nil {
		t.Fatal("non-object arguments accepted")
	}
	if err := m.Execute(ctx, "cmd", func() {}, nil); err == nil {
		t.Fatal("unmarshallable arguments accepted")
	}
	cmds := srv.Commands()
	if len(cmds) != 3 || cmds[0].Args != nil || cmds[1].Args != nil || string(cmds[2].Args) != `{"a":1}` {
		t.Fatalf("server got %+v", cmds)
	}
	var bad struct{ X int }
	if err := m.Execute(ctx, "cmd", nil, &bad); err != nil {
		t.Fatalf("decoding {} into a struct: %v", err)
	}
	if err := m.Execute(ctx, "cmd", nil, new(string)); err == nil || !strings.Contains(err.Error(), "decoding cmd reply") {
		t.Fatalf("decoding {} into a string: %v", err)
	}
}

// lateCtx is a context with a deadline whose timer never fires: its Err
// stays nil past the deadline, as a real one's does for a while on a
// loaded host.
type lateCtx struct {
	context.Context
	deadline time.Time
}

func (c lateCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c lateCtx) Done() <-chan struct{}       { return nil }
func (c lateCtx) Err() error                  { return nil }
