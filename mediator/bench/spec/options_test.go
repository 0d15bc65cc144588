package spec

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseOptionalKeys(t *testing.T) {
	s, err := Load("testdata/bursty-tuned.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wantTuning := Tuning{PollRatio: -1, IdleFactor: 2, NeonWindow: 3 * time.Millisecond, NeonFreerunRatio: 2.5, Window: 4, InflightBudget: -time.Second}
	if s.Tuning != wantTuning {
		t.Errorf("tuning %+v, want %+v", s.Tuning, wantTuning)
	}
	hog, late, bursty := s.VMs[0].Workload, s.VMs[1].Workload, s.VMs[2].Workload
	if hog.Depth != 64 || hog.InFlight() != 64 || late.InFlight() != 1 || late.Depth != 0 {
		t.Errorf("depth: hog %+v late %+v", hog, late)
	}
	if late.Start != 500*time.Millisecond || hog.Start != 0 {
		t.Errorf("start: %+v", late)
	}
	if bursty.On != 200*time.Millisecond || bursty.Off != 300*time.Millisecond || hog.On != 0 {
		t.Errorf("on/off: %+v", bursty)
	}
	// Keys left out stay zero (their defaults), so existing specs marshal as before.
	plain, err := Parse([]byte(oneVM("duration: 1s\n", "", throttle)))
	if err != nil {
		t.Fatal(err)
	}
	if plain.Tuning != (Tuning{}) || plain.VMs[0].Workload.Depth != 0 {
		t.Errorf("defaults: %+v", plain)
	}
	out, err := Marshal(plain)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"tuning:", "depth:", "start:", " on:", " off:"} {
		if strings.Contains(string(out), key) {
			t.Errorf("canonical form of a spec without %s mentions it:\n%s", key, out)
		}
	}
}

func TestOptionalKeyErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"depth zero", oneVM("duration: 1s\n", "", throttle+", depth: 0"), "vms[0].workload.depth: must be an integer from 1 to 4096, got 0"},
		{"depth too big", oneVM("duration: 1s\n", "", throttle+", depth: 4097"), "vms[0].workload.depth: must be an integer from 1 to 4096"},
		{"depth float", oneVM("duration: 1s\n", "", throttle+", depth: 1.5"), "vms[0].workload.depth: must be an integer"},
		{"start negative", oneVM("duration: 1s\n", "", throttle+", start: -1s"), "vms[0].workload.start: must be from 0"},
		{"start bare", oneVM("duration: 1s\n", "", throttle+", start: 5"), "(a bare number has no unit)"},
		{"on without off", oneVM("duration: 1s\n", "", throttle+", on: 1s"), "vms[0].workload.off: required with on"},
		{"off without on", oneVM("duration: 1s\n", "", throttle+", off: 1s"), "vms[0].workload.on: required with off"},
		{"on zero", oneVM("duration: 1s\n", "", throttle+", on: 0s, off: 1s"), "vms[0].workload.on: must be positive"},
		{"poll ratio zero", oneVM("duration: 1s\ntuning: {poll_ratio: 0}\n", "", throttle), "tuning.poll_ratio: must be -1 (poll all the time) or a number in (0, 10000], got 0"},
		{"poll ratio negative", oneVM("duration: 1s\ntuning: {poll_ratio: -2}\n", "", throttle), "tuning.poll_ratio: must be -1"},
		{"poll ratio string", oneVM("duration: 1s\ntuning: {poll_ratio: many}\n", "", throttle), `tuning.poll_ratio: must be -1 or a number in (0, 10000], got "many"`},
		{"idle factor below 1", oneVM("duration: 1s\ntuning: {idle_factor: 0.5}\n", "", throttle), "tuning.idle_factor: must be a number in [1, 10000], got 0.5"},
		{"window too long", oneVM("duration: 1s\ntuning: {neon_window: 2s}\n", "", throttle), "tuning.neon_window: must be positive and at most 1s"},
		{"freerun ratio", oneVM("duration: 1s\ntuning: {neon_freerun_ratio: -1}\n", "", throttle), "tuning.neon_freerun_ratio: must be a number in (0, 10000]"},
		{"window zero", oneVM("duration: 1s\ntuning: {window: 0}\n", "", throttle), "tuning.window: must be -1 (no bound) or an integer from 1 to 1048576, got 0"},
		{"window negative", oneVM("duration: 1s\ntuning: {window: -2}\n", "", throttle), "tuning.window: must be -1 (no bound) or an integer from 1"},
		{"tuning unknown key", oneVM("duration: 1s\ntuning: {ratio: 1}\n", "", throttle), "tuning.ratio: unknown key, expected one of poll_ratio, idle_factor, neon_window, window, inflight_budget, neon_freerun_ratio"},
		{"budget zero", oneVM("duration: 1s\ntuning: {inflight_budget: 0s}\n", "", throttle), "tuning.inflight_budget: must be negative (no bound) or a duration in (0, 1h0m0s], got 0s"},
		{"budget too long", oneVM("duration: 1s\ntuning: {inflight_budget: 2h}\n", "", throttle), "tuning.inflight_budget: must be negative (no bound) or a duration in (0, 1h0m0s]"},
		{"budget bare number", oneVM("duration: 1s\ntuning: {inflight_budget: 4}\n", "", throttle), "tuning.inflight_budget: must be a duration with a unit"},
		{"tuning not a mapping", oneVM("duration: 1s\ntuning: 3\n", "", throttle), "tuning: must be a mapping"},
		{"sim timeslice zero", oneVM("duration: 1s\ntuning: {sim_timeslice: 0s}\n", "", throttle), "tuning.sim_timeslice: must be positive and at most 1s, got 0s"},
		{"sim timeslice too long", oneVM("duration: 1s\ntuning: {sim_timeslice: 2s}\n", "", throttle), "tuning.sim_timeslice: must be positive and at most 1s"},
		{"sim timeslice on cuda", oneVM("duration: 1s\nbackend: cuda\nclock: wall\ntuning: {sim_timeslice: 2ms}\n", "", throttle), "tuning.sim_timeslice: needs backend sim"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v\ndoes not contain %q", err, tt.want)
			}
		})
	}
}

func TestOptionalKeysRoundTrip(t *testing.T) {
	s := Spec{Duration: time.Second, Tuning: Tuning{PollRatio: 0.1, IdleFactor: 1, NeonWindow: time.Microsecond, SimTimeslice: 2 * time.Millisecond}, VMs: []VM{{
		Name: "a", Workload: Workload{Kind: KindThrottle, KernelUS: 5, Depth: MaxDepth, Start: time.Nanosecond,
			On: MaxDuration, Off: time.Millisecond},
	}}}
	out, err := Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if want := s.WithDefaults(); !reflect.DeepEqual(back, want) {
		t.Fatalf("round trip\n%s\ngot  %+v\nwant %+v", out, back, want)
	}
	bad := s
	bad.VMs = []VM{{Name: "a", Workload: Workload{Kind: KindThrottle, KernelUS: 5, Depth: -1}}}
	if err := bad.WithDefaults().Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "depth") {
		t.Errorf("Validate of depth -1: %v", err)
	}
}
