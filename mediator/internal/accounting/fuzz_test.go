package accounting

import (
	"maps"
	"testing"

	"github.com/sluice-gpu/sluice/mediator/backend"
)

// decodeSamples turns fuzz bytes into a status sequence, times mostly
// increasing (a zero or high-bit step goes back or stays), Since anywhere
// around the sample, engines and VMs few so that they collide.
func decodeSamples(data []byte) []backend.Status {
	var out []backend.Status
	t := int64(0)
	for len(data) >= 2 {
		step, n := int8(data[0]), int(data[1]%4)
		data = data[2:]
		t += int64(step) * 100
		st := backend.Status{Time: t}
		for ; n > 0 && len(data) >= 3; n-- {
			ref := backend.ChannelRef{VM: uint32(data[0] % 4), Channel: int(data[0]>>2) % 2}
			r := backend.Running{ChannelRef: ref, Engine: int(data[1]%4) - 1, Since: t + int64(int8(data[2]))*100}
			st.Running = append(st.Running, r)
			if data[1]&0x80 != 0 {
				st.Active = append(st.Active, backend.ChannelRef{VM: ref.VM + 10, Channel: ref.Channel})
			}
			data = data[3:]
		}
		out = append(out, st)
	}
	return out
}

func runEstimator(t *testing.T, m Method, start, end int64, samples []backend.Status) Phase {
	e, err := NewEstimator(m)
	if err != nil {
		t.Fatal(err)
	}
	e.Begin(start)
	for i := range samples {
		e.Observe(&samples[i])
	}
	return e.End(end)
}

func FuzzEstimators(f *testing.F) {
	f.Add([]byte{10, 1, 1, 0, 0xf0, 10, 1, 1, 0, 0xf0, 20, 0, 5, 2, 2, 1, 0, 3, 0x81, 0})
	f.Add([]byte{0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0xff, 3, 1, 1, 1, 2, 2, 2, 3, 3, 3})
	f.Add([]byte{50, 3, 0, 0, 0x80, 1, 1, 0x7f, 2, 2, 0x10, 50, 2, 0, 0, 0, 1, 1, 1, 50, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		samples := decodeSamples(data)
		start, end := int64(-1000), int64(0)
		seen := map[uint32]bool{}
		for _, st := range samples {
			end = max(end, st.Time+500)
			for _, r := range st.Running {
				seen[r.VM] = true
			}
		}
		for _, m := range []Method{MethodLoga, MethodSegmentAverage, MethodOff} {
			ph := runEstimator(t, m, start, end, samples)
			if ph.Start != start || ph.End < ph.Start {
				t.Fatalf("%s: phase [%d, %d]", m, ph.Start, ph.End)
			}
			if tot := ph.Total(); tot > ph.End-ph.Start {
				t.Fatalf("%s: charged %d in a phase of %d", m, tot, ph.End-ph.Start)
			}
			for vm, b := range ph.Busy {
				if b <= 0 || !seen[vm] {
					t.Fatalf("%s: VM %d charged %d (seen running: %v)", m, vm, b, seen[vm])
				}
			}
			if again := runEstimator(t, m, start, end, samples); !maps.Equal(again.Busy, ph.Busy) {
				t.Fatalf("%s: not deterministic: %v then %v", m, ph.Busy, again.Busy)
			}
		}
	})
}
