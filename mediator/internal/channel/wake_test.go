package channel

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
)

// fakeWaker is a guest peer's eventfds: a signal sets a pending flag per
// (peer, vector), as an eventfd's counter does, and wakes a sleeper.
type fakeWaker struct {
	mu      sync.Mutex
	signals []signalled
	fd      chan struct{} // capacity 1: signals coalesce like an eventfd's
}

type signalled struct {
	peer   uint16
	vector int
}

func newFakeWaker() *fakeWaker { return &fakeWaker{fd: make(chan struct{}, 1)} }

func (f *fakeWaker) Notify(peer uint16, vector int) error {
	f.mu.Lock()
	f.signals = append(f.signals, signalled{peer, vector})
	f.mu.Unlock()
	select {
	case f.fd <- struct{}{}:
	default:
	}
	return nil
}

func (f *fakeWaker) take() []signalled {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.signals
	f.signals = nil
	return s
}

// newWakeRig is a rig whose channel signals w.
func newWakeRig(t *testing.T) (*rig, *fakeWaker) {
	r := newRig(t)
	w := newFakeWaker()
	r.ch.SetWaker(w)
	return r, w
}

func (r *rig) wakeWord() uint64 { return r.region.Load64(r.layout.ChannelOff(1) + abi.ChWake) }

func (r *rig) arm(peer uint16, index uint32) {
	r.region.Store64(r.layout.ChannelOff(1)+abi.ChWake, abi.WakeWord(peer, index))
}

func TestWakeNotWhilePolling(t *testing.T) {
	r, w := newWakeRig(t)
	r.write(throttle(1), throttle(2), throttle(3))
	r.ch.Poll()
	r.completeAll(abi.OK)
	if s := w.take(); len(s) != 0 {
		t.Fatalf("a guest that polls was signalled: %v", s)
	}
}

func TestWakeWhenTheRecordCompletes(t *testing.T) {
	r, w := newWakeRig(t)
	r.write(throttle(1), throttle(2), throttle(3))
	r.ch.Poll()
	r.gpu.take() // the test completes them by index
	r.arm(9, 1)  // sleeps until record 1 completes
	r.ch.Complete(Completion{Index: 0, Op: abi.OpThrottle})
	if s := w.take(); len(s) != 0 {
		t.Fatalf("signalled before record 1 completed: %v", s)
	}
	r.ch.Complete(Completion{Index: 1, Op: abi.OpThrottle})
	if s := w.take(); len(s) != 1 || s[0] != (signalled{9, 1}) {
		t.Fatalf("signals %v, want one to peer 9 vector 1", s)
	}
	if ww := r.wakeWord(); ww&abi.WakeArmed != 0 || ww != abi.WakeWord(9, 1)&^abi.WakeArmed {
		t.Fatalf("wake word after the signal %#x: the host must clear only the armed bit", ww)
	}
	r.ch.Complete(Completion{Index: 2, Op: abi.OpThrottle})
	if s := w.take(); len(s) != 0 {
		t.Fatalf("signalled again without a new sleep: %v", s)
	}
	if n := r.ch.Snapshot().Wakes; n != 1 {
		t.Fatalf("Wakes = %d, want 1", n)
	}
}

func TestWakeOnFailure(t *testing.T) {
	r, w := newWakeRig(t)
	r.write(throttle(1))
	r.ch.Poll()
	r.arm(3, 5)              // waits for a record far ahead
	r.writeRaw(abi.Record{}) // invalid: fails the channel at record 1
	r.ch.Poll()
	if s := w.take(); len(s) != 1 || s[0] != (signalled{3, 1}) {
		t.Fatalf("signals %v after a validation failure, want one to peer 3", s)
	}
	r.arm(3, 5)
	r.completeAll(abi.OK)
	if s := w.take(); len(s) != 1 {
		t.Fatalf("signals %v: a failed channel's progress wakes the guest", s)
	}
}

func TestWakeAfterReset(t *testing.T) {
	r, w := newWakeRig(t)
	r.writeRaw(abi.Record{})
	r.ch.Poll()
	w.take()
	// The guest asks for a reset and sleeps until any progress: the index
	// before the get it saw.
	get := r.host32(abi.ChGet)
	r.arm(4, get-1)
	r.region.Store32(r.layout.ChannelOff(1)+abi.ChReset, 1)
	r.ch.Poll()
	if s := w.take(); len(s) != 1 || r.host32(abi.ChResetAck) != 1 {
		t.Fatalf("signals %v, reset_ack %d after a reset", s, r.host32(abi.ChResetAck))
	}
}

// TestWakeNoLostWakeup runs the guest's side of the protocol against
// completions on another goroutine, many times, under the race detector in
// `go test -race`: a guest that arms, looks at get once more and only then
// sleeps is always woken (a completion published just before it armed is
// seen by its second look; one published after by the host's load of the
// word).
func TestWakeNoLostWakeup(t *testing.T) {
	r, w := newWakeRig(t)
	const rounds = 20000
	const peer = 2
	off := r.layout.ChannelOff(1)
	done := make(chan struct{})
	var completed atomic.Uint32
	go func() { // the GPU: completes whatever was forwarded, at once
		defer close(done)
		for completed.Load() < rounds {
			for _, s := range r.gpu.take() {
				r.ch.Complete(Completion{Index: uint32(s.tag), Op: s.cmd.Op})
				completed.Add(1)
			}
		}
	}()
	var slept, woken int
	for i := range uint32(rounds) {
		r.write(abi.Command{Op: abi.OpNop})
		r.ch.Poll()
		finished := func() bool { return int32(r.region.Load32(off+abi.ChGet)-i) > 0 }
		for !finished() {
			// Drop a stale signal (from a sleep that found the record done
			// on its second look), arm, look again, sleep.
			select {
			case <-w.fd:
			default:
			}
			r.region.Store64(off+abi.ChWake, abi.WakeWord(peer, i))
			if finished() {
				r.region.Store64(off+abi.ChWake, 0)
				break
			}
			slept++
			select {
			case <-w.fd:
				woken++
			case <-time.After(10 * time.Second):
				t.Fatalf("record %d: lost wakeup (get %d, wake word %#x)", i, r.region.Load32(off+abi.ChGet), r.region.Load64(off+abi.ChWake))
			}
			r.region.Store64(off+abi.ChWake, 0)
		}
	}
	<-done
	for _, s := range w.take() {
		if s != (signalled{peer, 1}) {
			t.Fatalf("signal %v, want peer %d vector 1", s, peer)
		}
	}
	t.Logf("%d rounds: slept %d times, woken by a signal %d times", rounds, slept, woken)
}
