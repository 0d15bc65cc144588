package sim

import (
	"sync"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

const us = int64(1000)

// newSim opens a sim and closes it when the test ends.
func newSim(t testing.TB, clock string, params map[string]string) *Sim {
	t.Helper()
	s, err := New(backend.Options{Clock: clock, Params: params})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// manual is a virtual, manually driven sim with the given extra params.
func manual(t testing.TB, kv ...string) *Sim {
	t.Helper()
	p := map[string]string{"drive": "manual"}
	for i := 0; i+1 < len(kv); i += 2 {
		p[kv[i]] = kv[i+1]
	}
	return newSim(t, "virtual", p)
}

// recorder collects one VM's completions.
type recorder struct {
	mu   sync.Mutex
	got  []backend.Completion
	next func(backend.Completion) // optional hook, called after recording
	note chan struct{}
}

func newRecorder() *recorder { return &recorder{note: make(chan struct{}, 1)} }

func (r *recorder) complete(c backend.Completion) {
	r.mu.Lock()
	r.got = append(r.got, c)
	r.mu.Unlock()
	select {
	case r.note <- struct{}{}:
	default:
	}
	if r.next != nil {
		r.next(c)
	}
}

func (r *recorder) all() []backend.Completion {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]backend.Completion(nil), r.got...)
}

// wait blocks until n completions arrived (a deadlock guard, not a timing
// assertion).
func (r *recorder) wait(t testing.TB, n int) []backend.Completion {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if got := r.all(); len(got) >= n {
			return got
		}
		select {
		case <-r.note:
		case <-deadline:
			t.Fatalf("waited for %d completions, have %d", n, len(r.all()))
		}
	}
}

func attach(t testing.TB, s *Sim, id uint32, channels int, heap []byte) (backend.VM, *recorder) {
	t.Helper()
	r := newRecorder()
	v, err := s.Attach(backend.VMSpec{ID: id, Channels: channels, Heap: heap, Complete: r.complete})
	if err != nil {
		t.Fatal(err)
	}
	return v, r
}

func submit(t testing.TB, v backend.VM, ch int, cmd abi.Command, tag uint64) {
	t.Helper()
	if err := v.Submit(ch, cmd, tag); err != nil {
		t.Fatal(err)
	}
}

func throttle(ns int64) abi.Command { return abi.Command{Op: abi.OpThrottle, DurationNs: uint64(ns)} }

func run(t testing.TB, s *Sim) {
	t.Helper()
	if err := s.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
}

// tspan is a completion's place on the timeline.
type tspan struct {
	tag        uint64
	start, end int64
}

func spans(cs []backend.Completion) []tspan {
	out := make([]tspan, len(cs))
	for i, c := range cs {
		out[i] = tspan{c.Tag, c.Start, c.End}
	}
	return out
}
