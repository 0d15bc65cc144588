package sched

import (
	"encoding/binary"
	"slices"
	"testing"
)

// FuzzEndPeriod drives a scheduler with arbitrary operations and periods and
// checks its invariants after each period.
func FuzzEndPeriod(f *testing.F) {
	f.Add([]byte{0, 1, 1, 0, 2, 3, 5, 10, 1, 200, 2, 3})
	f.Add([]byte{3, 2, 1, 7, 0, 9, 255, 255, 255, 255, 255, 255, 255, 127, 4, 1, 2, 3, 5, 1})
	f.Add([]byte{6, 3, 0, 1, 1, 5, 0, 0, 0, 0, 0, 0, 0, 128, 5, 2, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := New(Config{})
		if err != nil {
			t.Fatal(err)
		}
		var now int64
		var prevTSys int64
		for len(data) >= 2 {
			op, id := data[0]%8, uint32(data[1]%4)
			data = data[2:]
			switch op {
			case 0:
				_ = s.AddVM(id, uint32(id)+1, 0)
			case 1:
				s.RemoveVM(id)
			case 2:
				_ = s.SetWeight(id, uint32(id)*1000+1)
			case 3:
				_ = s.SetCap(id, float64(id)/4)
			case 4:
				_ = s.SetPolicy([]Policy{PolicyNone, PolicyDFQ, PolicyCap, PolicyTimeslice}[id])
			default:
				var cs []Charge
				for len(data) >= 9 && data[0]&0x80 == 0 {
					cs = append(cs, Charge{VM: uint32(data[0] % 5), Active: data[0]&0x40 != 0,
						BusyNs: int64(binary.LittleEndian.Uint64(data[1:9]))})
					data = data[9:]
				}
				length := int64(op-5) * periodNs
				d := s.EndPeriod(Period{Start: now, End: now + length, PollNs: pollNs, NonPollNs: nonPollNs, Charges: cs})
				now += length
				checkInvariants(t, s, d, prevTSys)
				prevTSys = d.TSys
			}
		}
	})
}

func checkInvariants(t *testing.T, s *Scheduler, d Decision, prevTSys int64) {
	t.Helper()
	if !slices.IsSorted(d.Hold) || len(slices.Compact(slices.Clone(d.Hold))) != len(d.Hold) {
		t.Fatalf("hold %v not sorted and unique", d.Hold)
	}
	if d.TSys < prevTSys {
		t.Fatalf("t_sys went back: %d < %d", d.TSys, prevTSys)
	}
	runner, active := false, false
	for _, v := range d.VMs {
		if v.Lag < 0 || v.Lag > maxLag || v.VTime < d.TSys {
			t.Fatalf("VM %+v, t_sys %d", v, d.TSys)
		}
		if v.Held != slices.Contains(d.Hold, v.ID) {
			t.Fatalf("VM %+v vs hold %v", v, d.Hold)
		}
		active = active || v.Active
		runner = runner || (v.Active && !v.Held)
	}
	if len(d.Hold) > len(d.VMs) {
		t.Fatalf("hold %v of %d VMs", d.Hold, len(d.VMs))
	}
	switch d.Policy {
	case PolicyNone:
		if len(d.Hold) != 0 {
			t.Fatalf("none held %v", d.Hold)
		}
	case PolicyDFQ:
		if active && !runner {
			t.Fatalf("dfq holds every active VM: %+v", d)
		}
	case PolicyTimeslice:
		if len(d.VMs) > 0 && len(d.Hold) != len(d.VMs)-1 {
			t.Fatalf("timeslice: %d of %d held", len(d.Hold), len(d.VMs))
		}
	}
	if got := s.Snapshot(); !slices.Equal(got, d.VMs) {
		t.Fatalf("snapshot differs from decision")
	}
}
