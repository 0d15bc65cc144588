package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

func TestRoundRobinAtCommandGranularity(t *testing.T) {
	s := manual(t)
	v, r := attach(t, s, 1, 2, nil)
	for i := range 3 {
		submit(t, v, 0, throttle(100*us), uint64(10+i)) // channel 0: long
		submit(t, v, 1, throttle(30*us), uint64(20+i))  // channel 1: short
	}
	run(t, s)
	got := spans(r.all())
	// The engine alternates between the channels whatever their lengths, so
	// channel 0 gets most of the GPU (LoGA's Figure 2).
	want := []tspan{
		{10, 0, 100 * us}, {20, 100 * us, 130 * us},
		{11, 130 * us, 230 * us}, {21, 230 * us, 260 * us},
		{12, 260 * us, 360 * us}, {22, 360 * us, 390 * us},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
	if b0, b1 := s.VMBusy(1), s.EngineBusy(Compute); b0 != 390*us || b1 != 390*us {
		t.Errorf("VMBusy %d EngineBusy %d, want %d", b0, b1, 390*us)
	}
}

func TestEnginesOverlapAcrossChannelsNotWithin(t *testing.T) {
	// copy_bw 1G: a 100000-byte COPY takes copy_ns + 100 µs.
	s := manual(t, "copy_ns", "0", "copy_bw", "1G")
	heap := make([]byte, 1<<20)
	v, r := attach(t, s, 1, 3, heap)
	alloc := abi.Command{Op: abi.OpAlloc, Handle: 1, Size: 1 << 20}
	cp := abi.Command{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyHostToDevice, Length: 100000}
	submit(t, v, 0, alloc, 1)
	run(t, s)
	t0 := s.Clock().Now()
	submit(t, v, 0, cp, 2)              // copy engine
	submit(t, v, 1, throttle(50*us), 3) // compute engine: overlaps the copy
	submit(t, v, 2, cp, 4)              // copy engine: waits for the first copy
	submit(t, v, 0, throttle(10*us), 5) // same channel as the copy: waits for it
	run(t, s)
	got := map[uint64]tspan{}
	for _, c := range r.all()[1:] {
		if c.Code != abi.OK {
			t.Fatalf("%+v", c)
		}
		got[c.Tag] = tspan{c.Tag, c.Start - t0, c.End - t0}
	}
	want := map[uint64]tspan{
		2: {2, 0, 100 * us},
		3: {3, 0, 50 * us},
		4: {4, 100 * us, 200 * us},
		5: {5, 100 * us, 110 * us},
	}
	for tag, w := range want {
		if got[tag] != w {
			t.Errorf("tag %d: got %v, want %v", tag, got[tag], w)
		}
	}
	if cb := s.EngineBusy(Copy); cb != 200*us {
		t.Errorf("copy engine busy %d, want %d", cb, 200*us)
	}
}

func TestExactVirtualTimings(t *testing.T) {
	s := manual(t) // cmd_ns defaults to 1000
	v, r := attach(t, s, 7, 1, nil)
	for i := range 3 {
		submit(t, v, 0, throttle(100*us), uint64(i))
	}
	submit(t, v, 0, abi.Command{Op: abi.OpNop}, 3)
	submit(t, v, 0, abi.Command{Op: abi.OpFence, Value: 9}, 4)
	run(t, s)
	want := []tspan{{0, 0, 100 * us}, {1, 100 * us, 200 * us}, {2, 200 * us, 300 * us}, {3, 300 * us, 301 * us}, {4, 301 * us, 302 * us}}
	if got := spans(r.all()); !slices.Equal(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
	if now := s.Clock().Now(); now != 302*us {
		t.Errorf("Now %d after the last event, want %d", now, 302*us)
	}
	// Idle: time does not move on its own, and Run moves it explicitly.
	run(t, s)
	if now := s.Clock().Now(); now != 302*us {
		t.Errorf("idle Now %d", now)
	}
	if err := s.Run(time1ms); err != nil || s.Clock().Now() != time1ms {
		t.Errorf("Run(1ms): %v, Now %d", err, s.Clock().Now())
	}
	submit(t, v, 0, abi.Command{Op: abi.OpNop}, 5)
	run(t, s)
	if c := r.all()[5]; c.Start != time1ms || c.End != time1ms+us {
		t.Errorf("after idle: %+v", c)
	}
}

const time1ms = 1000 * us

func TestZeroCostAndParams(t *testing.T) {
	s := manual(t, "cmd_ns", "0", "memset_ns", "500", "memset_bw", "1G")
	v, r := attach(t, s, 1, 1, nil)
	submit(t, v, 0, abi.Command{Op: abi.OpNop}, 0)
	submit(t, v, 0, abi.Command{Op: abi.OpAlloc, Handle: 3, Size: 4096}, 1)
	submit(t, v, 0, abi.Command{Op: abi.OpMemset, Handle: 3, Length: 1001, Value: 1}, 2)
	run(t, s)
	// 1001 bytes at 1 GB/s is 1001 ns.
	want := []tspan{{0, 0, 0}, {1, 0, 0}, {2, 0, 1501}}
	if got := spans(r.all()); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// closedLoop attaches n VMs, each running throttle(kernel), sleep(sleep) in a
// loop on one channel until the timeline passes stop, and returns every
// completion in delivery order.
func closedLoop(t testing.TB, s *Sim, n int, kernel, sleep, stop int64) *[]string {
	log := &[]string{}
	for i := range n {
		var v backend.VM
		var again func()
		r := newRecorder()
		r.next = func(c backend.Completion) {
			*log = append(*log, fmt.Sprintf("vm%d %d %d-%d %v", i, c.Tag, c.Start, c.End, c.Code.String()))
			if c.End < stop {
				s.After(sleep, again)
			}
		}
		var err error
		v, err = s.Attach(backend.VMSpec{ID: uint32(i), Channels: 1, Complete: r.complete})
		if err != nil {
			t.Fatal(err)
		}
		tag := uint64(0)
		again = func() {
			tag++
			if err := v.Submit(0, throttle(kernel), tag); err != nil {
				t.Error(err)
			}
		}
		again()
	}
	return log
}

func TestClosedLoopIsExact(t *testing.T) {
	s := manual(t)
	log := closedLoop(t, s, 1, 100*us, 100*us, 1000*us)
	if err := s.Run(2000 * us); err != nil {
		t.Fatal(err)
	}
	// Kernels start every 200 µs; the one ending at 1100 µs is the first
	// not followed by another.
	if len(*log) != 6 {
		t.Fatalf("%d kernels: %v", len(*log), *log)
	}
	for i, l := range *log {
		want := fmt.Sprintf("vm0 %d %d-%d ok", i+1, int64(i)*200*us, int64(i)*200*us+100*us)
		if l != want {
			t.Errorf("kernel %d: %q, want %q", i, l, want)
		}
	}
}

func TestDeterminism(t *testing.T) {
	once := func() []string {
		s := manual(t)
		log := closedLoop(t, s, 5, 70*us, 30*us, 5000*us)
		// A second workload of random commands on two channels of one VM.
		rng := rand.New(rand.NewPCG(1, 2))
		v, r := attach(t, s, 100, 2, make([]byte, 4096))
		submit(t, v, 0, abi.Command{Op: abi.OpAlloc, Handle: 1, Size: 4096}, 0)
		for i := range 200 {
			cmd := throttle(int64(rng.IntN(50)) * us)
			if rng.IntN(3) == 0 {
				cmd = abi.Command{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyHostToDevice, Length: uint64(rng.IntN(4096))}
			}
			submit(t, v, rng.IntN(2), cmd, uint64(i+1))
		}
		if err := s.Run(10000 * us); err != nil {
			t.Fatal(err)
		}
		out := slices.Clone(*log)
		for _, c := range r.all() {
			out = append(out, fmt.Sprintf("rnd %d %d-%d %v", c.Tag, c.Start, c.End, c.Code.String()))
		}
		return out
	}
	a, b := once(), once()
	if len(a) < 200 || !slices.Equal(a, b) {
		t.Errorf("runs differ or are too short: %d and %d lines", len(a), len(b))
	}
}

func TestCompletionOrderPerChannel(t *testing.T) {
	s := manual(t)
	v, r := attach(t, s, 1, 4, nil)
	for i := range 400 {
		ch := i % 4
		cmd := throttle(int64(i%7) * us)
		if i%5 == 0 {
			cmd = abi.Command{Op: abi.OpFree, Handle: 9} // fails: no such buffer
		}
		submit(t, v, ch, cmd, uint64(i))
	}
	run(t, s)
	got := r.all()
	if len(got) != 400 {
		t.Fatalf("%d completions", len(got))
	}
	lastTag := map[int]uint64{}
	lastEnd := map[int]int64{}
	for _, c := range got {
		if tag, ok := lastTag[c.Channel]; ok && c.Tag <= tag {
			t.Fatalf("channel %d: tag %d after %d", c.Channel, c.Tag, tag)
		}
		lastTag[c.Channel] = c.Tag
		if c.Code != abi.OK {
			if c.Code != abi.ErrBadHandle || c.Start != 0 || c.End != 0 {
				t.Fatalf("%+v", c)
			}
			continue
		}
		if c.Start < lastEnd[c.Channel] {
			t.Fatalf("channel %d: %+v starts before %d", c.Channel, c, lastEnd[c.Channel])
		}
		lastEnd[c.Channel] = c.End
	}
}

func TestStatus(t *testing.T) {
	s := manual(t, "copy_ns", "100000", "cmd_ns", "0")
	v1, _ := attach(t, s, 1, 2, make([]byte, 64))
	v2, _ := attach(t, s, 2, 1, nil)
	var st backend.Status
	s.ReadStatus(&st)
	if len(st.Running) != 0 || len(st.Active) != 0 {
		t.Fatalf("idle: %+v", st)
	}
	submit(t, v1, 0, abi.Command{Op: abi.OpAlloc, Handle: 1, Size: 64}, 0)
	run(t, s)
	submit(t, v1, 0, throttle(100*us), 1)
	submit(t, v1, 0, throttle(100*us), 2)
	submit(t, v2, 0, throttle(100*us), 3)
	submit(t, v1, 1, abi.Command{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyDeviceToHost, Length: 64}, 4)
	type probe struct {
		at      int64
		running []backend.ChannelRef
		active  []backend.ChannelRef
	}
	refs := func(r ...int) []backend.ChannelRef {
		var out []backend.ChannelRef
		for i := 0; i < len(r); i += 2 {
			out = append(out, backend.ChannelRef{VM: uint32(r[i]), Channel: r[i+1]})
		}
		return out
	}
	probes := []probe{
		{50 * us, refs(1, 0, 1, 1), refs(1, 0, 1, 1, 2, 0)}, // compute: VM1/0; copy: VM1/1
		{150 * us, refs(2, 0), refs(1, 0, 2, 0)},            // round robin: VM2 before VM1's second
		{250 * us, refs(1, 0), refs(1, 0)},
		{350 * us, nil, nil},
	}
	for _, pr := range probes {
		if err := s.Run(pr.at); err != nil {
			t.Fatal(err)
		}
		st.Running = make([]backend.Running, 0, 4)
		st.Active = make([]backend.ChannelRef, 0, 4)
		allocs := testing.AllocsPerRun(10, func() { s.ReadStatus(&st) })
		if allocs != 0 {
			t.Errorf("ReadStatus allocates %v times", allocs)
		}
		sortRefs(st.Active)
		running := make([]backend.ChannelRef, 0, len(st.Running))
		for _, r := range st.Running {
			running = append(running, r.ChannelRef)
			if r.Engine < 0 || r.Engine > 1 || r.Since > st.Time {
				t.Errorf("at %d: running entry %+v", pr.at, r)
			}
		}
		if st.Time != pr.at || !slices.Equal(running, pr.running) || !slices.Equal(st.Active, pr.active) {
			t.Errorf("at %d: got %+v, want running %v active %v", pr.at, st, pr.running, pr.active)
		}
		for _, e := range []Engine{Compute, Copy} {
			ref, busy := s.EngineStatus(e)
			want := e == Compute && len(pr.running) > 0 || e == Copy && len(pr.running) == 2
			if busy != want || busy && ref != pr.running[e] {
				t.Errorf("at %d: %v engine %v %v", pr.at, e, ref, busy)
			}
		}
	}
}

func sortRefs(r []backend.ChannelRef) {
	sort.Slice(r, func(i, j int) bool {
		return r[i].VM < r[j].VM || r[i].VM == r[j].VM && r[i].Channel < r[j].Channel
	})
}

func TestStatusFromCallbackOnTimeline(t *testing.T) {
	s := manual(t)
	v, _ := attach(t, s, 4, 1, nil)
	submit(t, v, 0, throttle(100*us), 0)
	var st backend.Status
	s.After(99*us, func() { s.ReadStatus(&st) })
	run(t, s)
	if st.Time != 99*us || len(st.Running) != 1 || st.Running[0].ChannelRef != (backend.ChannelRef{VM: 4}) {
		t.Errorf("%+v", st)
	}
}

func TestRegistryAndOptions(t *testing.T) {
	b, err := backend.Open("sim", backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !b.(*Sim).wall {
		t.Error("default clock is not wall")
	}
	b.Close()
	bad := []backend.Options{
		{Clock: "sundial"},
		{Clock: "wall", Params: map[string]string{"drive": "manual"}},
		{Params: map[string]string{"nope": "1"}},
		{Params: map[string]string{"copy_bw": "0"}},
		{Params: map[string]string{"cmd_ns": "-1"}},
		{Params: map[string]string{"memory": "lots"}},
		{Params: map[string]string{"drive": "auto"}},
	}
	for _, o := range bad {
		_, err := backend.Open("sim", o)
		if !errors.Is(err, backend.ErrInvalid) {
			t.Errorf("%+v: %v", o, err)
			continue
		}
		for k := range o.Params {
			if !strings.Contains(err.Error(), k) {
				t.Errorf("%+v: error %q does not name %q", o, err, k)
			}
		}
	}
}

func TestParseParams(t *testing.T) {
	tests := []struct {
		in   map[string]string
		want func(*Params)
	}{
		{nil, func(*Params) {}},
		{map[string]string{"memory": "2Gi"}, func(p *Params) { p.Memory = 2 << 30 }},
		{map[string]string{"copy_bw": "12.5G"}, func(p *Params) { p.CopyBW = 12.5e9 }},
		{map[string]string{"memset_bw": "3e12"}, func(p *Params) { p.MemsetBW = 3e12 }},
		{map[string]string{"cmd_ns": "0", "copy_ns": "1k"}, func(p *Params) { p.CmdNs, p.CopyNs = 0, 1000 }},
		{map[string]string{"spin_ns": "20000", "drive": "manual"}, func(p *Params) { p.SpinNs, p.Drive = 20000, DriveManual }},
		{map[string]string{"timeslice_ns": "2M"}, func(p *Params) { p.TimesliceNs = 2e6 }},
	}
	for _, tc := range tests {
		got, err := ParseParams(tc.in)
		if err != nil {
			t.Errorf("%v: %v", tc.in, err)
			continue
		}
		want := DefaultParams()
		tc.want(&want)
		if got != want {
			t.Errorf("%v: got %+v, want %+v", tc.in, got, want)
		}
	}
	for _, v := range []string{"", "x", "-1", "1.5", "NaN", "1e30", "Inf", "9223372036854775808"} {
		if _, err := ParseParams(map[string]string{"memory": v}); !errors.Is(err, backend.ErrInvalid) {
			t.Errorf("memory=%q: %v", v, err)
		}
	}
}

func FuzzParseParams(f *testing.F) {
	for _, s := range []string{"1", "0", "1Gi", "2.5G", "1e9", "-3", "x", "1e400", "0.1k"} {
		f.Add("memory", s)
		f.Add("copy_bw", s)
	}
	f.Fuzz(func(t *testing.T, k, v string) {
		p, err := ParseParams(map[string]string{k: v})
		if err != nil {
			if !errors.Is(err, backend.ErrInvalid) {
				t.Fatalf("%v not ErrInvalid", err)
			}
			return
		}
		if p.CopyBW == 0 || p.MemsetBW == 0 || p.CmdNs < 0 || p.CopyNs < 0 || p.MemsetNs < 0 || p.SpinNs < 0 || p.TimesliceNs < 0 {
			t.Fatalf("accepted %q=%q as %+v", k, v, p)
		}
	})
}

func TestCost(t *testing.T) {
	p := DefaultParams()
	tests := []struct {
		cmd  abi.Command
		want int64
	}{
		{throttle(123456), 123456},
		{throttle(0), 0},
		{abi.Command{Op: abi.OpThrottle, DurationNs: 1 << 63}, maxCost},
		{abi.Command{Op: abi.OpNop}, 1000},
		{abi.Command{Op: abi.OpCopy, Length: 25000}, 3000},
		{abi.Command{Op: abi.OpCopy, Length: 1}, 2001},                        // rounded up
		{abi.Command{Op: abi.OpCopy, Length: 1 << 63}, 2000 + (1<<63)/25 + 1}, // rounded up
		{abi.Command{Op: abi.OpMemset, Length: 1e6}, 2000},
	}
	if got := transferNs(1<<63, 1); got != maxCost {
		t.Errorf("huge transfer: %d", got)
	}
	for _, tc := range tests {
		if got := p.Cost(&tc.cmd); got != tc.want {
			t.Errorf("%v len %d: %d, want %d", tc.cmd.Op, tc.cmd.Length, got, tc.want)
		}
	}
}

func TestExecTableCoversOpcodes(t *testing.T) {
	for _, op := range abi.Opcodes() {
		if int(op) >= len(execTable) || execTable[op] == nil {
			t.Errorf("%v has no handler", op)
		}
	}
	if EngineOf(abi.OpCopy) != Copy || EngineOf(abi.OpThrottle) != Compute || EngineOf(abi.OpMemset) != Compute {
		t.Error("engine mapping")
	}
}
