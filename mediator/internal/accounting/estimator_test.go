package accounting

import (
	"errors"
	"maps"
	"testing"

	"github.com/sluice-gpu/sluice/mediator/backend"
)

const us = int64(1000)

// cmd is a command on a hand-built timeline: it runs on engine during
// [start, end).
type cmd struct {
	vm         uint32
	ch, engine int
	start, end int64
}

// statusAt is the status of the timeline cmds at t: running commands (the
// first per engine) and, as active, the running channels plus queued ones.
func statusAt(cmds []cmd, t int64, queued ...backend.ChannelRef) backend.Status {
	st := backend.Status{Time: t}
	for _, c := range cmds {
		if c.start <= t && t < c.end {
			ref := backend.ChannelRef{VM: c.vm, Channel: c.ch}
			st.Running = append(st.Running, backend.Running{ChannelRef: ref, Engine: c.engine, Since: c.start})
			st.Active = append(st.Active, ref)
		}
	}
	st.Active = append(st.Active, queued...)
	return st
}

// sampled runs estimator m over [start, end], sampling the timeline every
// step and at end.
func sampled(t *testing.T, m Method, start, end, step int64, cmds []cmd) Phase {
	t.Helper()
	e, err := NewEstimator(m)
	if err != nil {
		t.Fatal(err)
	}
	e.Begin(start)
	for at := start; at < end; at += step {
		st := statusAt(cmds, at)
		e.Observe(&st)
	}
	st := statusAt(cmds, end)
	e.Observe(&st)
	return e.End(end)
}

func wantBusy(t *testing.T, got Phase, want map[uint32]int64) {
	t.Helper()
	if !maps.Equal(got.Busy, want) {
		t.Errorf("busy = %v, want %v", got.Busy, want)
	}
	if total, span := got.Total(), got.End-got.Start; total > span {
		t.Errorf("charged %d in a phase of %d", total, span)
	}
}

func TestLogaCharges(t *testing.T) {
	tests := []struct {
		name       string
		start, end int64
		step       int64
		cmds       []cmd
		want       map[uint32]int64
	}{{
		// Back to back: each switch is charged exactly at the new Since.
		name: "back to back from Since", start: 0, end: 20 * us, step: 2 * us,
		cmds: []cmd{{1, 0, 0, -5 * us, 7 * us}, {2, 0, 0, 7 * us, 13 * us}, {1, 0, 0, 13 * us, 40 * us}},
		want: map[uint32]int64{1: 14 * us, 2: 6 * us},
	}, {
		// A ends at 5.3 µs between samples at 4 and 6: charged to 5.
		name: "end at the midpoint", start: 0, end: 20 * us, step: 2 * us,
		cmds: []cmd{{1, 0, 0, 0, 5300}},
		want: map[uint32]int64{1: 5 * us},
	}, {
		// Starts after idle at its exact Since, ends at a midpoint.
		name: "start after idle from Since", start: 0, end: 20 * us, step: 2 * us,
		cmds: []cmd{{1, 0, 0, 3300, 9100}},
		want: map[uint32]int64{1: 5700},
	}, {
		name: "command spanning the phase", start: 100 * us, end: 600 * us, step: 2 * us,
		cmds: []cmd{{1, 0, 0, 0, 10_000 * us}},
		want: map[uint32]int64{1: 500 * us},
	}, {
		// Engines 0 and 1 both busy over [10, 20]: each gets half.
		name: "two engines split", start: 0, end: 20 * us, step: 2 * us,
		cmds: []cmd{{1, 0, 0, 0, 30 * us}, {2, 0, 1, 10 * us, 30 * us}},
		want: map[uint32]int64{1: 15 * us, 2: 5 * us},
	}, {
		name: "three engines, one VM, charged once", start: 0, end: 12 * us, step: 2 * us,
		cmds: []cmd{{1, 0, 0, 0, 30 * us}, {1, 1, 1, 0, 30 * us}, {1, 2, 2, 0, 30 * us}},
		want: map[uint32]int64{1: 12 * us},
	}, {
		name: "idle charged to nobody", start: 0, end: 20 * us, step: 2 * us,
		want: map[uint32]int64{},
	}, {
		// B appears at 8 and is gone by 12; A runs again from 12.5.
		name: "VM appears and disappears", start: 0, end: 20 * us, step: 2 * us,
		cmds: []cmd{{1, 0, 0, 0, 6 * us}, {2, 3, 0, 8 * us, 11 * us}, {1, 0, 0, 12500, 16500}},
		want: map[uint32]int64{1: 5*us + 4500, 2: 3 * us},
	}, {
		// The documented bias: B ends at 11, the engine idles, A starts
		// at 12; both seen between samples at 10 and 12, B is charged up
		// to A's Since.
		name: "idle gap before a switch goes to the previous VM", start: 0, end: 20 * us, step: 2 * us,
		cmds: []cmd{{2, 0, 0, 8 * us, 11 * us}, {1, 0, 0, 12 * us, 15 * us}},
		want: map[uint32]int64{1: 3 * us, 2: 4 * us},
	}, {
		// Two commands of one channel back to back: one VM, exact.
		name: "same channel, next command", start: 0, end: 10 * us, step: 2 * us,
		cmds: []cmd{{1, 0, 0, 0, 5 * us}, {1, 0, 0, 5 * us, 50 * us}},
		want: map[uint32]int64{1: 10 * us},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantBusy(t, sampled(t, MethodLoga, tc.start, tc.end, tc.step, tc.cmds), tc.want)
		})
	}
}

func TestLogaActiveAndSamples(t *testing.T) {
	e, _ := NewEstimator(MethodLoga)
	e.Begin(0)
	queued := backend.ChannelRef{VM: 7, Channel: 2}
	cmds := []cmd{{1, 0, 0, 0, 5 * us}}
	for _, at := range []int64{0, 2 * us, 4 * us, 4 * us, 3 * us, 6 * us} { // two stale samples
		st := statusAt(cmds, at, queued)
		e.Observe(&st)
	}
	ph := e.End(6 * us)
	if want := map[uint32]bool{1: true, 7: true}; !maps.Equal(ph.Active, want) {
		t.Errorf("active = %v, want %v", ph.Active, want)
	}
	if ph.Channels != 2 || ph.Samples != 4 {
		t.Errorf("channels %d samples %d, want 2 and 4", ph.Channels, ph.Samples)
	}
	if _, charged := ph.Busy[7]; charged {
		t.Errorf("queued-only VM charged %d", ph.Busy[7])
	}
	wantBusy(t, ph, map[uint32]int64{1: 5 * us})
}

func TestEstimatorEdges(t *testing.T) {
	for _, m := range []Method{MethodLoga, MethodSegmentAverage, MethodOff} {
		t.Run(string(m), func(t *testing.T) {
			e, err := NewEstimator(m)
			if err != nil {
				t.Fatal(err)
			}
			st := statusAt([]cmd{{1, 0, 0, 0, 100 * us}}, 5*us)
			e.Observe(&st) // before any Begin: ignored
			e.Begin(10 * us)
			if ph := e.End(20 * us); len(ph.Busy) != 0 || ph.Start != 10*us || ph.End != 20*us {
				t.Errorf("no samples: %+v", ph)
			}
			e.Begin(10 * us)
			st.Time = 5 * us // before the phase: ignored
			e.Observe(&st)
			st.Time = 12 * us
			e.Observe(&st)
			ph := e.End(11 * us) // before the last sample: ends there
			if m != MethodOff && ph.End != 12*us {
				t.Errorf("End = %d, want the last sample's 12 µs", ph.End)
			}
			if m != MethodOff && ph.Busy[1] != 2*us {
				t.Errorf("busy = %v, want 2 µs for VM 1", ph.Busy)
			}
			// A duplicate engine entry counts once.
			e.Begin(0)
			dup := statusAt([]cmd{{1, 0, 0, 0, 100 * us}, {2, 0, 0, 0, 100 * us}}, 0)
			e.Observe(&dup)
			dup.Time = 10 * us
			e.Observe(&dup)
			if ph := e.End(10 * us); m != MethodOff && !maps.Equal(ph.Busy, map[uint32]int64{1: 10 * us}) {
				t.Errorf("duplicate engine: busy = %v", ph.Busy)
			}
		})
	}
}

// manyShort: VM 1 runs 10 µs kernels with 5 µs gaps (each one its own
// segment), VM 2 one 100 µs kernel in every 1000 µs. Ends are off the sample
// grid by half a step so the midpoint rule is exact.
func manyShort(span int64) []cmd {
	var long, cmds []cmd
	for c := int64(0); c < span; c += 1000 * us {
		long = append(long, cmd{2, 0, 0, c + 500*us + 500, c + 600*us + 500})
	}
next:
	for t := int64(0); t < span; t += 15 * us {
		a, b := t+500, t+10*us+500
		for _, l := range long {
			if a < l.end && l.start < b {
				continue next // the engine is VM 2's
			}
		}
		cmds = append(cmds, cmd{1, 0, 0, a, b})
	}
	return append(cmds, long...)
}

func truth(cmds []cmd, start, end int64) map[uint32]int64 {
	out := map[uint32]int64{}
	for _, c := range cmds {
		if d := min(c.end, end) - max(c.start, start); d > 0 {
			out[c.vm] += d
		}
	}
	return out
}

func TestSegmentAverageUnderChargesManyShortKernels(t *testing.T) {
	const span = 10_000 * us
	cmds := manyShort(span)
	want := truth(cmds, 0, span)
	loga := sampled(t, MethodLoga, 0, span, us, cmds)
	seg := sampled(t, MethodSegmentAverage, 0, span, us, cmds)
	for _, vm := range []uint32{1, 2} {
		if e := relErr(loga.Busy[vm], want[vm]); e > 0.01 {
			t.Errorf("loga: VM %d charged %d, true %d (error %.2f%%)", vm, loga.Busy[vm], want[vm], 100*e)
		}
	}
	if seg.Total() > loga.Total() || loga.Total()-seg.Total() > 2 {
		t.Errorf("segment average distributes %d, loga measured %d busy", seg.Total(), loga.Total())
	}
	if seg.Busy[1] > want[1]/2 || seg.Busy[2] < 2*want[2] {
		t.Errorf("segment average: VM 1 (many short) %d of true %d, VM 2 (few long) %d of true %d: want under- and over-charged",
			seg.Busy[1], want[1], seg.Busy[2], want[2])
	}
	t.Logf("true %v; loga %v; segment-average %v", want, loga.Busy, seg.Busy)
}

func TestSegmentAverageAgreesWhenAlternating(t *testing.T) {
	const span = 10_000 * us
	var cmds []cmd
	for t, i := int64(500), 0; t < span; i++ { // 10 µs and 100 µs kernels alternate
		d := 10 * us
		vm := uint32(1)
		if i%2 == 1 {
			d, vm = 100*us, 2
		}
		cmds = append(cmds, cmd{vm, 0, 0, t, t + d})
		t += d
	}
	want := truth(cmds, 0, span)
	loga := sampled(t, MethodLoga, 0, span, us, cmds)
	seg := sampled(t, MethodSegmentAverage, 0, span, us, cmds)
	for _, vm := range []uint32{1, 2} {
		if e := relErr(loga.Busy[vm], want[vm]); e > 0.01 {
			t.Errorf("loga: VM %d charged %d, true %d", vm, loga.Busy[vm], want[vm])
		}
		if e := relErr(seg.Busy[vm], want[vm]); e > 0.02 {
			t.Errorf("segment average: VM %d charged %d, true %d", vm, seg.Busy[vm], want[vm])
		}
	}
}

func TestParseMethod(t *testing.T) {
	for _, s := range []string{"loga", "loga-segment-average", "off", "neon-sampling"} {
		if m, err := ParseMethod(s); err != nil || string(m) != s {
			t.Errorf("ParseMethod(%q) = %q, %v", s, m, err)
		}
	}
	for _, s := range []string{"", "LOGA", "neon"} {
		if _, err := ParseMethod(s); !errors.Is(err, ErrUnknownMethod) {
			t.Errorf("ParseMethod(%q): %v, want ErrUnknownMethod", s, err)
		}
	}
	if _, err := NewEstimator(MethodNeonSampling); !errors.Is(err, ErrNotEstimator) {
		t.Errorf("NewEstimator(neon-sampling): %v, want ErrNotEstimator", err)
	}
	if _, err := NewEstimator("x"); !errors.Is(err, ErrUnknownMethod) {
		t.Errorf("NewEstimator(x): %v, want ErrUnknownMethod", err)
	}
}

func relErr(got, want int64) float64 {
	if want == 0 {
		if got == 0 {
			return 0
		}
		return 1
	}
	d := float64(got - want)
	if d < 0 {
		d = -d
	}
	return d / float64(want)
}

// BenchmarkObserve is the estimator's cost per status sample with ten VMs,
// one running and three more queued.
func BenchmarkObserve(b *testing.B) {
	for _, m := range []Method{MethodLoga, MethodSegmentAverage} {
		b.Run(string(m), func(b *testing.B) {
			var cmds []cmd
			for i := range 1000 {
				cmds = append(cmds, cmd{uint32(i % 10), 0, 0, int64(i) * 10 * us, int64(i+1) * 10 * us})
			}
			queued := []backend.ChannelRef{{VM: 11}, {VM: 12}, {VM: 13}}
			sts := make([]backend.Status, 0, 5000)
			for at := int64(0); at < 10_000*us; at += 2 * us {
				sts = append(sts, statusAt(cmds, at, queued...))
			}
			e, _ := NewEstimator(m)
			n := 0
			for b.Loop() {
				e.Begin(0)
				for j := range sts {
					e.Observe(&sts[j])
				}
				e.End(10_000 * us)
				n += len(sts)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/sample")
		})
	}
}
