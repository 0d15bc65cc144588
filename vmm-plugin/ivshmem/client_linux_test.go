package ivshmem

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// step is one thing a scripted server sends: 8 bytes of val, cut into
// parts at split (if non-zero), with nfds fresh eventfds on the first part.
type step struct {
	val   int64
	nfds  int
	split int
	cut   bool // send only the first part
}

// scriptServer listens at a fresh path and, to the first connection, sends
// script then keeps the connection open until stop or the test's end (or
// closes it at once if hangup). It returns the path and stop, which waits
// for the server goroutine and closes everything it holds.
func scriptServer(t *testing.T, script []step, hangup bool) (string, func()) {
	t.Helper()
	path := sockPath(t)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	conns := make(chan *net.UnixConn, 1)
	go func() {
		defer close(done)
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		conns <- c
		for _, s := range script {
			if err := sendStep(c, s); err != nil {
				return
			}
		}
		if hangup {
			c.Close()
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			ln.Close()
			select {
			case c := <-conns:
				c.Close()
			case <-done:
			}
			<-done
			select {
			case c := <-conns:
				c.Close()
			default:
			}
		})
	}
	t.Cleanup(stop)
	return path, stop
}

func sendStep(c *net.UnixConn, s step) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(s.val))
	fds, err := newEventfds(s.nfds)
	if err != nil {
		return err
	}
	defer closeFDs(fds)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	cut := s.split
	if cut <= 0 || cut >= 8 {
		cut = 8
	}
	if _, _, err := c.WriteMsgUnix(b[:cut], oob, nil); err != nil {
		return err
	}
	if cut < 8 && !s.cut {
		// Make it likely the reader sees the first part on its own.
		time.Sleep(time.Millisecond)
		if _, err := c.Write(b[cut:]); err != nil {
			return err
		}
	}
	return nil
}

// handshakeScript is a valid handshake for own with 2 vectors after the
// given peers.
func handshakeScript(own int64, peers ...int64) []step {
	s := []step{{val: 0}, {val: own}, {val: -1, nfds: 1}}
	for _, p := range append(peers, own) {
		s = append(s, step{val: p, nfds: 1}, step{val: p, nfds: 1})
	}
	return s
}

func TestDialHandshakeErrors(t *testing.T) {
	scriptServer(t, nil, true) // open the runtime's lazily created poller fds before counting
	valid := handshakeScript(5, 0)
	with := func(i int, s step) []step {
		out := slices.Clone(valid)
		out[i] = s
		return out
	}
	for _, tc := range []struct {
		name   string
		script []step
		proto  bool // want ErrProtocol (otherwise any error)
	}{
		{"wrong version", with(0, step{val: 1}), true},
		{"version with fd", with(0, step{val: 0, nfds: 1}), true},
		{"id out of range", with(1, step{val: 65536}), true},
		{"negative id", with(1, step{val: -1}), true},
		{"id with fd", with(1, step{val: 5, nfds: 1}), true},
		{"no shm fd", with(2, step{val: -1}), true},
		{"shm not -1", with(2, step{val: 3, nfds: 1}), true},
		{"two fds in one message", with(3, step{val: 0, nfds: 2}), true},
		{"peer id below -1", with(3, step{val: -2, nfds: 1}), true},
		{"second shm", with(3, step{val: -1, nfds: 1}), true},
		{"unknown peer disconnect", with(3, step{val: 9}), true},
		{"own disconnect", with(5, step{val: 5}), true},
		{"too many fds for a peer", append(valid[:5:5], step{val: 0, nfds: 1}), true},
		{"EOF mid handshake", valid[:4], false},
		{"EOF mid message", append(valid[:4:4], step{val: 0, nfds: 1, split: 3, cut: true}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := openFDs(t)
			path, stop := scriptServer(t, tc.script, true)
			c, err := dialTest(t, path, 2)
			if err == nil {
				t.Fatalf("Dial succeeded with id %d", c.ID())
			}
			if tc.proto && !errors.Is(err, ErrProtocol) {
				t.Fatalf("Dial error %v, want ErrProtocol", err)
			}
			stop()
			if after := openFDs(t); after != before {
				t.Fatalf("fds: %d before, %d after a failed Dial", before, after)
			}
		})
	}
}

func TestDialSplitMessages(t *testing.T) {
	script := handshakeScript(7, 0, 3)
	for i := range script {
		script[i].split = 1 + i%7
	}
	script = append(script, step{val: 4, nfds: 1, split: 5}, step{val: 3, split: 2})
	path, _ := scriptServer(t, script, false)
	c := mustDial(t, path, 2)
	if c.ID() != 7 || c.ShmFD() < 0 || c.VectorFD(1) < 0 {
		t.Fatalf("id %d shm %d vector fd %d", c.ID(), c.ShmFD(), c.VectorFD(1))
	}
	eventually(t, "peer 4 connected and peer 3 gone", func() bool {
		return slices.Equal(c.Peers(), []uint16{0, 4})
	})
	if err := c.Notify(4, 0); err != nil {
		t.Fatalf("Notify to a peer with one of two vectors: %v", err)
	}
	if err := c.Notify(4, 1); !errors.Is(err, ErrBadVector) {
		t.Fatalf("Notify to a vector not yet received: %v", err)
	}
}

func TestClientProtocolErrorAfterHandshake(t *testing.T) {
	script := append(handshakeScript(1, 0), step{val: 70000})
	path, _ := scriptServer(t, script, false)
	c := mustDial(t, path, 2)
	select {
	case <-c.Done():
	case <-timeAfterGuard():
		t.Fatal("client kept going after a bad message")
	}
	if err := c.Err(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("Err() = %v, want ErrProtocol", err)
	}
}

func TestDialContextCancel(t *testing.T) {
	path, _ := scriptServer(t, handshakeScript(1)[:2], false) // stalls after the id
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		c, err := Dial(ctx, path, 2)
		if err == nil {
			c.Close()
		}
		errc <- err
	}()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Dial error %v, want context.Canceled", err)
		}
	case <-timeAfterGuard():
		t.Fatal("Dial ignored cancellation")
	}
}
