package sim

import (
	"slices"
	"testing"
)

const ms = 1000 * us

// TestTimesliceBetweenVMs: with timeslice_ns a long command of one VM is
// preempted every slice while another VM's command waits, so the other VM's
// short commands run between its slices; the long command's completion
// spans its preemptions and reports its own run time (GPUNs), and busy time
// is exact per VM. Without it (the default) the short command waits for the
// long one, as on the LoGA paper's GPU.
func TestTimesliceBetweenVMs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		params []string
		want1  []tspan // VM 1's completions
		want2  []tspan // VM 2's
	}{
		{name: "not preemptible", want1: []tspan{{1, 0, 100 * ms}},
			want2: []tspan{{2, 100 * ms, 101 * ms}, {3, 101 * ms, 102 * ms}}},
		{name: "2ms slices", params: []string{"timeslice_ns", "2000000"},
			// VM 1 runs 2 ms, VM 2's first runs, VM 1 2 ms more, VM 2's
			// second, then VM 1 alone for its remaining 96 ms.
			want1: []tspan{{1, 0, 102 * ms}},
			want2: []tspan{{2, 2 * ms, 3 * ms}, {3, 5 * ms, 6 * ms}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := manual(t, tc.params...)
			v1, r1 := attach(t, s, 1, 1, nil)
			v2, r2 := attach(t, s, 2, 1, nil)
			submit(t, v1, 0, throttle(100*ms), 1)
			submit(t, v2, 0, throttle(1*ms), 2)
			submit(t, v2, 0, throttle(1*ms), 3)
			run(t, s)
			if got := spans(r1.all()); !slices.Equal(got, tc.want1) {
				t.Errorf("VM 1: got %v, want %v", got, tc.want1)
			}
			if got := spans(r2.all()); !slices.Equal(got, tc.want2) {
				t.Errorf("VM 2: got %v, want %v", got, tc.want2)
			}
			if c := r1.all()[0]; c.Busy() != 100*ms {
				t.Errorf("VM 1's command: busy %d, want %d (%+v)", c.Busy(), 100*ms, c)
			}
			if b1, b2 := s.VMBusy(1), s.VMBusy(2); b1 != 100*ms || b2 != 2*ms {
				t.Errorf("VMBusy %d, %d: want %d, %d", b1, b2, 100*ms, 2*ms)
			}
		})
	}
}

// TestTimesliceNotWithinAVM: one VM's channels never preempt each other,
// and a long command alone runs its slices back to back.
func TestTimesliceNotWithinAVM(t *testing.T) {
	s := manual(t, "timeslice_ns", "2000000")
	v, r := attach(t, s, 1, 2, nil)
	submit(t, v, 0, throttle(10*ms), 1)
	submit(t, v, 1, throttle(1*ms), 2)
	run(t, s)
	want := []tspan{{1, 0, 10 * ms}, {2, 10 * ms, 11 * ms}}
	if got := spans(r.all()); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if c := r.all()[0]; c.GPUNs != 0 || c.Busy() != 10*ms {
		t.Errorf("a command never preempted: %+v", c)
	}
}
