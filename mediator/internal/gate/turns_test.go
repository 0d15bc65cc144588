package gate

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/internal/channel"
	"github.com/sluice-gpu/sluice/mediator/internal/sched"
)

// world is a small simulated GPU for the turn tests: real channels and
// budgets, one FIFO queue of commands run one at a time (a driver that
// does not time-slice), virtual time, and guests that keep a depth of
// THROTTLE kernels in their rings. Its checker counts every submission
// made while another VM had commands on the GPU.
type world struct {
	t      *testing.T
	now    int64
	seq    int
	events []event
	g      *Gate
	s      *sched.Scheduler
	vms    map[uint32]*tvm
	queue  []job // submitted, not completed; the head runs
	// launching are submitted and not queued yet (launch).
	launching []job
	// handoff is the turns' hand-off threshold (0: off) and launch how long
	// after its Submit a command reaches the queue (a worker's latency).
	handoff, launch int64
	// deliver, when set, is how long after the GPU finishes a command its
	// completion reaches the channel (a completer's latency; 0 inside it).
	deliver func() int64
	// violations counts submissions while another VM had work on the GPU
	// (with a hand-off: more than the threshold of it, or two VMs' work).
	violations int
	// handoffs counts submissions behind another VM's work within the
	// threshold; maxLeft is the most of that work there was at one.
	handoffs int
	maxLeft  int64
}

type event struct {
	at  int64
	seq int
	fn  func()
}

type job struct {
	vm    uint32
	op    abi.Opcode
	tag   uint64
	dur   int64
	start int64
}

// tvm is a test VM: one channel, a guest that keeps depth kernels of
// kernelNs in its ring until stop.
type tvm struct {
	w        *world
	id       uint32
	region   *shm.Region
	layout   abi.Layout
	ch       *channel.Channel
	put      uint32
	kernelNs int64
	depth    int
	stop     int64 // no new kernel from then on
	refill   int64 // how long after a completion its guest writes the next kernel (0: inside it)
	// thinks, when set, is the refill after each completion instead
	// (called once per completion).
	thinks func() int64
	// runPct, when set, is how long its kernels run on the GPU, in percent
	// of their length (the budget's cost): below 100 its costs overestimate.
	runPct int64
	// busyPct, when set, is the busy time its completions report, in
	// percent of their run: below 100 its commands hold the GPU for what
	// the backend does not count as busy (a worker's host-side work).
	busyPct int64
	// op is what its guest writes: THROTTLE (0) of kernelNs, or an ALLOC
	// or MEMSET that the GPU runs for kernelNs.
	op     abi.Opcode
	busy   int64
	starts []int64 // when each of its commands started on the GPU
	ends   []int64
}

func newWorld(t *testing.T, a Arbitration, quantum time.Duration) *world {
	t.Helper()
	s, err := sched.New(sched.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, g: New(), s: s, vms: map[uint32]*tvm{}}
	if err := w.g.SetTurns(a, TurnConfig{QuantumNs: int64(quantum), Picker: s, Clock: w.clock()}); err != nil {
		t.Fatal(err)
	}
	return w
}

// newHandoffWorld is newWorld under turns with a hand-off threshold.
func newHandoffWorld(t *testing.T, quantum, handoff time.Duration, preempts bool) *world {
	t.Helper()
	w := newWorld(t, ArbitrationTurns, quantum)
	w.handoff = int64(handoff)
	cfg := TurnConfig{QuantumNs: int64(quantum), Picker: w.s, Clock: w.clock(), Preempts: preempts, HandoffNs: int64(handoff)}
	if err := w.g.SetTurns(ArbitrationTurns, cfg); err != nil {
		t.Fatal(err)
	}
	return w
}

// forHandoff runs a turns test without a hand-off and with the default
// one: the quantum, overrun and anticipation logic holds either way.
func forHandoff(t *testing.T, test func(t *testing.T, handoff time.Duration)) {
	for _, h := range []time.Duration{0, DefaultHandoff} {
		t.Run(fmt.Sprintf("handoff=%v", h), func(t *testing.T) { test(t, h) })
	}
}

func (w *world) clock() Clock {
	return Clock{Now: func() int64 { return w.now }, After: func(d int64, fn func()) { w.at(w.now+d, fn) }}
}

func (w *world) at(t int64, fn func()) {
	w.seq++
	w.events = append(w.events, event{t, w.seq, fn})
}

// run runs the events up to until.
func (w *world) run(until int64) {
	for {
		sort.Slice(w.events, func(i, j int) bool {
			a, b := w.events[i], w.events[j]
			return a.at < b.at || (a.at == b.at && a.seq < b.seq)
		})
		if len(w.events) == 0 || w.events[0].at > until {
			w.now = until
			return
		}
		e := w.events[0]
		w.events = w.events[1:]
		w.now = e.at
		e.fn()
	}
}

// addVM adds a VM of weight weight whose guest starts at start.
func (w *world) addVM(id, weight uint32, kernel time.Duration, depth int, start, stop time.Duration) *tvm {
	w.t.Helper()
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: 1 << 20, Channels: 1, RingEntries: 64, SyscallSlots: 64})
	if err != nil {
		w.t.Fatal(err)
	}
	v := &tvm{w: w, id: id, region: shm.New(make([]byte, l.RegionSize)), layout: l, kernelNs: int64(kernel),
		depth: depth, stop: int64(stop)}
	v.ch = channel.New(0, v.region, l, abi.DefaultLimits(), v)
	v.ch.SetBudget(channel.NewBudget(0))
	if err := w.s.AddVM(id, weight, 0); err != nil {
		w.t.Fatal(err)
	}
	w.g.Add(id, []Channel{v.ch})
	w.vms[id] = v
	w.at(int64(start), func() { v.ring(depth) })
	return v
}

// ring writes n kernels (while before stop) and rings the doorbell.
func (v *tvm) ring(n int) {
	wrote := false
	for range n {
		if v.w.now >= v.stop {
			break
		}
		cmd := abi.Command{Op: abi.OpThrottle, DurationNs: uint64(v.kernelNs)}
		switch v.op {
		case abi.OpAlloc:
			cmd = abi.Command{Op: abi.OpAlloc, Handle: 1, Size: 4096}
		case abi.OpMemset:
			cmd = abi.Command{Op: abi.OpMemset, Handle: 1, Length: 4096}
		}
		rec := abi.EncodeCommand(cmd)
		v.region.CopyIn(v.layout.RecordOff(0, v.put), rec[:])
		v.put++
		wrote = true
	}
	if wrote {
		v.region.Store32(v.layout.ChannelOff(0)+abi.ChPut, v.put)
		v.ch.Poll()
	}
}

// Submit is the GPU: the checker, then the FIFO queue (launch later).
func (v *tvm) Submit(_ int, cmd abi.Command, tag uint64) error {
	w := v.w
	w.check(v.id)
	j := job{vm: v.id, op: cmd.Op, tag: tag, dur: int64(cmd.DurationNs)}
	if cmd.Op != abi.OpThrottle {
		j.dur = v.kernelNs
	}
	if v.runPct > 0 {
		j.dur = j.dur * v.runPct / 100
	}
	if w.launch == 0 {
		w.enqueue(j)
		return nil
	}
	w.launching = append(w.launching, j)
	w.at(w.now+w.launch, func() {
		w.launching = slices.DeleteFunc(w.launching, func(l job) bool { return l == j })
		w.enqueue(j)
	})
	return nil
}

// check judges a submission of vm against the other VMs' work on the GPU
// (queued or launching): none, or with a hand-off one VM's, within the
// threshold and a launch (a command forwarded onto nothing in flight
// starts a launch after it was forwarded, later than the gate counts it).
func (w *world) check(vm uint32) {
	others := map[uint32]bool{}
	var left int64
	for i, j := range w.queue {
		if j.vm == vm {
			continue
		}
		others[j.vm] = true
		if i == 0 {
			left += j.start + j.dur - w.now
		} else {
			left += j.dur
		}
	}
	for _, e := range w.launching {
		if e.vm != vm {
			others[e.vm] = true
			left += e.dur
		}
	}
	if len(others) == 0 {
		return
	}
	if w.handoff == 0 || len(others) > 1 || left > w.handoff+w.launch {
		w.violations++
		return
	}
	w.handoffs++
	w.maxLeft = max(w.maxLeft, left)
}

func (w *world) enqueue(j job) {
	w.queue = append(w.queue, j)
	if len(w.queue) == 1 {
		w.startHead()
	}
}

func (w *world) startHead() {
	j := &w.queue[0]
	j.start = w.now
	w.vms[j.vm].starts = append(w.vms[j.vm].starts, w.now)
	w.at(w.now+j.dur, w.completeHead)
}

// completeHead completes the running command; the guest refills its ring
// at once (inside the completion, as an interrupt handler would).
func (w *world) completeHead() {
	j := w.queue[0]
	w.queue = w.queue[1:]
	if len(w.queue) > 0 {
		w.startHead()
	}
	v := w.vms[j.vm]
	v.busy += j.dur
	v.ends = append(v.ends, w.now)
	if w.deliver != nil {
		if d := w.deliver(); d > 0 {
			w.at(w.now+d, func() { v.deliverDone(j) })
			return
		}
	}
	v.deliverDone(j)
}

// deliverDone hands a finished command's completion to its channel.
func (v *tvm) deliverDone(j job) {
	w := v.w
	busy := j.dur
	if v.busyPct > 0 {
		busy = j.dur * v.busyPct / 100
	}
	v.ch.Complete(channel.Completion{Index: uint32(j.tag), Op: j.op, Code: abi.OK, BusyNs: busy})
	refill := v.refill
	if v.thinks != nil {
		refill = v.thinks()
	}
	if refill > 0 {
		w.at(w.now+refill, func() { v.ring(1) })
		return
	}
	v.ring(1)
}

func ms(d float64) int64 { return int64(d * 1e6) }

// checkBusyAndShares: the GPU never idled (a turn switch did not idle it)
// and the VMs of equal weights got equal shares, within tol. The command
// running at the end counts as busy for what it ran.
func (w *world) checkBusyAndShares(vs []*tvm, tol float64) {
	w.t.Helper()
	var total int64
	for _, v := range vs {
		total += v.busy
	}
	running := int64(0)
	if len(w.queue) > 0 {
		running = w.now - w.queue[0].start
	}
	if float64(total+running) < 0.999*float64(w.now) {
		w.t.Errorf("GPU busy %v of %v: a turn switch idled it", time.Duration(total+running), time.Duration(w.now))
	}
	want := 1 / float64(len(vs))
	for _, v := range vs {
		if share := float64(v.busy) / float64(total); math.Abs(share-want) > tol {
			w.t.Errorf("vm %d (kernels %v): share %.3f, want %.3f ± %v", v.id, time.Duration(v.kernelNs), share, want, tol)
		}
	}
}

// TestTurnsOneVMAtATime: saturating VMs of different kernel lengths and
// depths never have work on the GPU together under turns, share it evenly
// by the picker alone (no scheduling period in this test), and the GPU
// never idles; under arbitration driver the checker does see overlap (it
// can fail).
func TestTurnsOneVMAtATime(t *testing.T) {
	for _, a := range []Arbitration{ArbitrationTurns, ArbitrationDriver} {
		t.Run(string(a), func(t *testing.T) {
			w := newWorld(t, a, 0)
			vs := []*tvm{
				w.addVM(1, 1, 100*time.Microsecond, 8, 0, time.Hour),
				w.addVM(2, 1, time.Millisecond, 4, 0, time.Hour),
				w.addVM(3, 1, 10*time.Millisecond, 2, 0, time.Hour),
			}
			w.run(ms(3000))
			if a == ArbitrationDriver {
				if w.violations == 0 {
					t.Fatal("the checker saw no overlap under arbitration driver: it checks nothing")
				}
				return
			}
			if w.violations != 0 {
				t.Fatalf("%d submissions while another VM had work on the GPU", w.violations)
			}
			w.checkBusyAndShares(vs, 0.01)
		})
	}
}

// TestTurnsDrainedHolderPassesAtOnce: a holder with nothing left passes
// the turn on its last completion, not at the quantum's end.
func TestTurnsDrainedHolderPassesAtOnce(t *testing.T) {
	forHandoff(t, testTurnsDrainedHolderPassesAtOnce)
}

func testTurnsDrainedHolderPassesAtOnce(t *testing.T, handoff time.Duration) {
	w := newHandoffWorld(t, 20*time.Millisecond, handoff, false)
	a := w.addVM(1, 1, time.Millisecond, 2, 0, time.Microsecond) // 2 kernels, then nothing
	b := w.addVM(2, 1, time.Millisecond, 1, 500*time.Microsecond, 600*time.Microsecond)
	w.run(ms(50))
	if len(a.ends) != 2 || len(b.starts) != 1 {
		t.Fatalf("a completed %d kernels, b started %d; want 2 and 1", len(a.ends), len(b.starts))
	}
	if b.starts[0] != a.ends[1] {
		t.Fatalf("b started at %v, a's last completion at %v: the drained holder did not pass at once",
			time.Duration(b.starts[0]), time.Duration(a.ends[1]))
	}
	if w.violations != 0 {
		t.Fatalf("%d overlapping submissions", w.violations)
	}
}

// TestTurnsQuantumEndsAtCommandBoundary: a saturating holder is latched
// when the quantum ends and the waiter starts exactly when the holder's
// last command completes; the holder's budget keeps it from queuing far
// past the quantum.
func TestTurnsQuantumEndsAtCommandBoundary(t *testing.T) {
	forHandoff(t, testTurnsQuantumEndsAtCommandBoundary)
}

func testTurnsQuantumEndsAtCommandBoundary(t *testing.T, handoff time.Duration) {
	w := newHandoffWorld(t, 5*time.Millisecond, handoff, false)
	a := w.addVM(1, 1, 3*time.Millisecond, 4, 0, time.Hour)
	b := w.addVM(2, 1, time.Millisecond, 4, time.Millisecond, time.Hour)
	w.g.SetBudget(ms(7)) // two of a's kernels fit (a THROTTLE costs its length)
	w.run(ms(40))
	if len(b.starts) == 0 {
		t.Fatal("b never ran")
	}
	// b waits from 1 ms; the quantum ends at 6 ms. At 3 ms a's budget
	// had room for a third kernel, but not the quantum's 3 ms left: b
	// starts at 6 ms, at a's second command's completion (9 ms without the
	// deadline).
	first := b.starts[0]
	if first != ms(6) {
		t.Errorf("b's first command started at %v, want 6ms (the quantum's end, a's command boundary)", time.Duration(first))
	}
	for _, e := range a.ends {
		if e > first && e < first+ms(5) {
			t.Errorf("a completed a command at %v, inside b's turn from %v", time.Duration(e), time.Duration(first))
		}
	}
	if !containsTime(a.ends, first) {
		t.Errorf("b started at %v, not at one of a's completions %v", time.Duration(first), a.ends)
	}
	if w.violations != 0 {
		t.Fatalf("%d overlapping submissions", w.violations)
	}
}

func containsTime(ts []int64, t int64) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

// TestTurnsIdleGPUFirstRinger: on an idle GPU the first doorbell gets the
// turn at once, and a VM alone keeps it without a quantum: one turn, its
// channel never latched.
func TestTurnsIdleGPUFirstRinger(t *testing.T) {
	w := newWorld(t, ArbitrationTurns, time.Millisecond)
	w.addVM(1, 1, time.Millisecond, 4, 10*time.Millisecond, time.Hour)
	b := w.addVM(2, 1, 100*time.Microsecond, 4, 2*time.Millisecond, 5*time.Millisecond)
	w.run(ms(1.9))
	if _, turn := w.g.Arbitration(); turn.Held {
		t.Fatalf("a turn is held before anyone rang: %+v", turn)
	}
	w.run(ms(9))
	if len(b.starts) == 0 || b.starts[0] != ms(2) {
		t.Fatalf("b rang at 2ms on an idle GPU; its first command started at %v", b.starts)
	}
	if _, turn := w.g.Arbitration(); !turn.Held || turn.Holder != 2 || turn.Contended || turn.Turns != 1 {
		t.Fatalf("b alone: turn %+v, want b's only turn, no quantum running", turn)
	}
	if w.g.latched[2] {
		t.Fatal("b, alone with the turn, is latched")
	}
	w.run(ms(100))
	if w.violations != 0 {
		t.Fatalf("%d overlapping submissions", w.violations)
	}
}

// TestTurnsWeights: weights 1:3 give 1/4 and 3/4 of the GPU.
func TestTurnsWeights(t *testing.T) {
	forHandoff(t, testTurnsWeights)
}

func testTurnsWeights(t *testing.T, handoff time.Duration) {
	w := newHandoffWorld(t, 0, handoff, false)
	a := w.addVM(1, 1, time.Millisecond, 4, 0, time.Hour)
	b := w.addVM(2, 3, 300*time.Microsecond, 8, 0, time.Hour)
	w.run(ms(2000))
	share := float64(b.busy) / float64(a.busy+b.busy)
	if math.Abs(share-0.75) > 0.01 {
		t.Fatalf("weight 3's share %.3f, want 0.75 ± 0.01", share)
	}
	if w.violations != 0 {
		t.Fatalf("%d overlapping submissions", w.violations)
	}
}

// TestTurnsSchedulerHold: a VM the scheduler holds gets no turn; released,
// it does.
func TestTurnsSchedulerHold(t *testing.T) {
	forHandoff(t, testTurnsSchedulerHold)
}

func testTurnsSchedulerHold(t *testing.T, handoff time.Duration) {
	w := newHandoffWorld(t, time.Millisecond, handoff, false)
	a := w.addVM(1, 1, time.Millisecond, 2, 0, time.Hour)
	b := w.addVM(2, 1, time.Millisecond, 2, 0, time.Hour)
	w.g.Apply([]uint32{2})
	w.run(ms(20))
	if len(b.starts) != 0 || len(a.starts) == 0 {
		t.Fatalf("b held by the scheduler ran %d commands (a %d)", len(b.starts), len(a.starts))
	}
	w.g.Apply(nil)
	w.run(ms(40))
	if len(b.starts) == 0 {
		t.Fatal("b released by the scheduler never got a turn")
	}
	if w.violations != 0 {
		t.Fatalf("%d overlapping submissions", w.violations)
	}
}

// TestTurnsAheadHoldsDoNotBind: a hold for running ahead (dfq's) does not
// bind under turns: the VM held so still gets its turns, and the two share
// the GPU by the picker's charges; a hold for a limit (cap's) does bind.
// Under the driver's arbitration the hold for running ahead binds again.
func TestTurnsAheadHoldsDoNotBind(t *testing.T) {
	w := newHandoffWorld(t, time.Millisecond, 0, false)
	a := w.addVM(1, 1, time.Millisecond, 2, 0, time.Hour)
	b := w.addVM(2, 1, time.Millisecond, 2, 0, time.Hour)
	w.g.ApplyAhead([]uint32{2}, []uint32{2})
	w.run(ms(100))
	if w.g.Held(2) {
		t.Fatal("a hold that does not bind is reported as held")
	}
	if len(b.starts) < 40 || len(a.starts) < 40 || w.violations != 0 {
		t.Fatalf("b held for running ahead ran %d commands, a %d, %d overlapping submissions; want about 50 each, none",
			len(b.starts), len(a.starts), w.violations)
	}
	w.g.ApplyAhead([]uint32{2}, nil) // the same VM held for a limit
	if !w.g.Held(2) {
		t.Fatal("a hold for a limit is not reported")
	}
	n := len(b.starts)
	w.run(ms(200))
	if len(b.starts) > n+2 { // what it had in flight or its turn's last
		t.Fatalf("b held for a limit ran %d more commands", len(b.starts)-n)
	}
	// The switch itself latches and releases by what binds under the
	// arbitration it puts in force.
	w.g.ApplyAhead([]uint32{2}, []uint32{2})
	w.run(ms(250))
	if err := w.g.SetTurns(ArbitrationDriver, TurnConfig{}); err != nil {
		t.Fatal(err)
	}
	n = len(b.starts)
	w.run(ms(350))
	if len(b.starts) > n+2 || !w.g.Held(2) {
		t.Fatalf("under the driver's arbitration b held for running ahead ran %d more commands (held %v)", len(b.starts)-n, w.g.Held(2))
	}
	if err := w.g.SetTurns(ArbitrationTurns, TurnConfig{QuantumNs: ms(1), Picker: w.s, Clock: w.clock()}); err != nil {
		t.Fatal(err)
	}
	n = len(b.starts)
	w.run(ms(450))
	if len(b.starts) < n+20 || w.g.Held(2) {
		t.Fatalf("back under turns b held for running ahead ran %d more commands (held %v)", len(b.starts)-n, w.g.Held(2))
	}
}

// TestSwitchArbitration: back to driver, every VM is released and forwards.
func TestSwitchArbitration(t *testing.T) {
	w := newWorld(t, ArbitrationTurns, time.Millisecond)
	a := w.addVM(1, 1, time.Millisecond, 2, 0, time.Hour)
	b := w.addVM(2, 1, time.Millisecond, 2, 0, time.Hour)
	w.run(ms(10))
	if err := w.g.SetTurns(ArbitrationDriver, TurnConfig{}); err != nil {
		t.Fatal(err)
	}
	if w.g.latched[1] || w.g.latched[2] {
		t.Fatal("a VM stayed latched after switching to driver")
	}
	na, nb := len(a.starts), len(b.starts)
	w.run(ms(30))
	if len(a.starts) == na || len(b.starts) == nb {
		t.Fatal("a VM stopped running after switching to driver")
	}
	if err := w.g.SetTurns("round-robin", TurnConfig{}); err == nil {
		t.Fatal("an unknown arbitration was accepted")
	}
}

// TestTurnsAnticipation: a VM whose guest refills its ring 20 µs after each
// completion (depth 1: it drains every time) beside one of 100 ms kernels.
// Passing the turn at every drain would hand the GPU to a 100 ms command
// after each 1 ms one; the drained holder, behind, keeps the idle turn a
// moment and gets its half. Beside a VM of 1 ms kernels the holder is
// anticipated for its think time (anticipate.go): the GPU idles for that
// think time, which is the VM's own (charged to it), at most once per
// command of it and a window more, and it gets its half less that think
// time, not one command per turn of the other's.
func TestTurnsAnticipation(t *testing.T) {
	forHandoff(t, testTurnsAnticipation)
}

func testTurnsAnticipation(t *testing.T, handoff time.Duration) {
	t.Run("long", func(t *testing.T) {
		w := newHandoffWorld(t, 5*time.Millisecond, handoff, false)
		a := w.addVM(1, 1, time.Millisecond, 1, 0, time.Hour)
		a.refill = 20_000
		b := w.addVM(2, 1, 100*time.Millisecond, 4, 0, time.Hour)
		w.g.SetBudget(ms(13)) // the daemon's default before its first period
		w.run(ms(4000))
		share := float64(a.busy) / float64(a.busy+b.busy)
		if share < 0.45 || share > 0.55 {
			t.Fatalf("the 1 ms VM's share %.3f beside 100 ms kernels, want 0.5 ± 0.05", share)
		}
		if w.violations != 0 {
			t.Fatalf("%d overlapping submissions", w.violations)
		}
	})
	t.Run("short", func(t *testing.T) {
		w := newHandoffWorld(t, 5*time.Millisecond, handoff, false)
		a := w.addVM(1, 1, time.Millisecond, 1, 0, time.Hour)
		a.refill = 20_000
		b := w.addVM(2, 1, time.Millisecond, 4, 0, time.Hour)
		w.g.SetBudget(ms(13))
		w.run(ms(1000))
		idle := w.now - a.busy - b.busy
		t.Logf("idle %v, %d commands of the depth-1 VM", time.Duration(idle), len(a.ends))
		if bound := a.refill*int64(len(a.ends)) + int64(5*time.Millisecond)/AnticipationDiv; idle > bound {
			t.Fatalf("the GPU idled %v beside short kernels, want at most the depth-1 VM's think time "+
				"times its %d commands and a window (%v)", time.Duration(idle), len(a.ends), time.Duration(bound))
		}
		k := float64(a.kernelNs) / float64(a.kernelNs+a.refill)
		if share, want := float64(a.busy)/float64(a.busy+b.busy), k/(1+k); math.Abs(share-want) > 0.02 {
			t.Fatalf("the depth-1 VM's share %.3f, want %.3f ± 0.02 (its half less its think time)", share, want)
		}
		if w.violations != 0 {
			t.Fatalf("%d overlapping submissions", w.violations)
		}
	})
}

// TestTurnsOverrun: a holder latched at its quantum's end whose command
// runs on for more than OverrunQuanta quanta loses the turn beside it when
// the GPU time-slices between VMs (Preempts), so that a VM waiting behind
// a 100 ms kernel gets the GPU within a time slice of the grace, not after
// the kernel; without Preempts the turn waits for the drain (on a GPU that
// does not preempt, passing it would gain nothing).
func TestTurnsOverrun(t *testing.T) {
	forHandoff(t, testTurnsOverrun)
}

func testTurnsOverrun(t *testing.T, handoff time.Duration) {
	for _, preempts := range []bool{false, true} {
		t.Run(fmt.Sprintf("preempts=%v", preempts), func(t *testing.T) {
			w := newHandoffWorld(t, 5*time.Millisecond, handoff, preempts)
			w.addVM(1, 1, 100*time.Millisecond, 1, 0, time.Hour)
			w.addVM(2, 1, time.Millisecond, 1, time.Millisecond, time.Hour)
			// VM 2 knocks at 1 ms: the quantum ends at 6 ms, the grace
			// at 21 ms, VM 1's kernel at 100 ms.
			w.run(ms(20))
			if _, turn := w.g.Arbitration(); turn.Holder != 1 || turn.Overruns != 0 {
				t.Fatalf("at 20 ms: %+v, want VM 1 still holding, no overrun", turn)
			}
			w.run(ms(22))
			_, turn := w.g.Arbitration()
			if !preempts {
				if turn.Holder != 1 || turn.Overruns != 0 || w.violations != 0 {
					t.Fatalf("at 22 ms: %+v, %d overlapping submissions: the turn passed beside a running command on a GPU that does not preempt", turn, w.violations)
				}
				return
			}
			if turn.Holder != 2 || turn.Overruns != 1 || w.violations == 0 {
				t.Fatalf("at 22 ms: %+v, %d overlapping submissions: want VM 2 holding beside VM 1's kernel", turn, w.violations)
			}
		})
	}
}

// TestHandoffHidesTheSwitch: with a launch latency (a command reaches the
// GPU 30 µs after its Submit), passing the turn at the holder's drain
// idles the GPU for a launch at every turn switch; handing it off when
// the holder's last work ends within 50 µs queues the next holder's first
// command behind it, and the GPU never idles. The hand-offs come with no
// more than the threshold and a launch of the holder's work left, and the
// shares stay even.
func TestHandoffHidesTheSwitch(t *testing.T) {
	const launch = 30_000
	for _, handoff := range []time.Duration{0, 50 * time.Microsecond} {
		t.Run(fmt.Sprintf("handoff=%v", handoff), func(t *testing.T) {
			w := newHandoffWorld(t, 5*time.Millisecond, handoff, true)
			w.launch = launch
			a := w.addVM(1, 1, time.Millisecond, 4, 0, time.Hour)
			b := w.addVM(2, 1, 700*time.Microsecond, 4, 0, time.Hour)
			w.run(ms(1000))
			_, turn := w.g.Arbitration()
			idle := w.now - a.busy - b.busy
			if w.violations != 0 {
				t.Fatalf("%d submissions beside another VM's work beyond the hand-off (%d hand-offs)", w.violations, w.handoffs)
			}
			if turn.Turns < 150 {
				t.Fatalf("%d turns in 1 s of 5 ms quanta", turn.Turns)
			}
			if handoff == 0 {
				// Every switch costs a launch.
				if min := int64(turn.Turns-1) * launch * 9 / 10; idle < min || turn.Handoffs != 0 {
					t.Fatalf("without hand-off: GPU idle %v over %d turns (want at least %v), %d hand-offs",
						time.Duration(idle), turn.Turns, time.Duration(min), turn.Handoffs)
				}
				return
			}
			if idle > ms(0.5) {
				t.Errorf("GPU idle %v over %d turns, %d hand-offs: a switch idled it", time.Duration(idle), turn.Turns, turn.Handoffs)
			}
			if turn.Handoffs < turn.Turns*9/10 || w.handoffs == 0 || turn.Overruns != 0 {
				t.Errorf("%d hand-offs (%d submissions behind the holder's work), %d overruns of %d turns",
					turn.Handoffs, w.handoffs, turn.Overruns, turn.Turns)
			}
			if w.maxLeft > int64(handoff)+launch {
				t.Errorf("a hand-off came with %v of the holder's work left", time.Duration(w.maxLeft))
			}
			if share := float64(a.busy) / float64(a.busy+b.busy); math.Abs(share-0.5) > 0.01 {
				t.Errorf("share %.3f, want 0.5 ± 0.01", share)
			}
		})
	}
}

// TestHandoffBounded: VMs of kernels from 30 µs to 10 ms, with short
// quanta and a threshold near a quantum, so that a new holder's turn can
// end while the last hand-off's work still runs: no submission ever comes
// beside more than the threshold of another VM's work or beside two VMs'
// (the checker), the GPU never idles and the shares stay even.
func TestHandoffBounded(t *testing.T) {
	for _, c := range []struct{ quantum, handoff time.Duration }{
		{5 * time.Millisecond, 50 * time.Microsecond},
		{5 * time.Millisecond, 500 * time.Microsecond},
		{300 * time.Microsecond, 250 * time.Microsecond},
	} {
		t.Run(fmt.Sprintf("quantum=%v,handoff=%v", c.quantum, c.handoff), func(t *testing.T) {
			w := newHandoffWorld(t, c.quantum, c.handoff, false)
			vs := []*tvm{
				w.addVM(1, 1, 30*time.Microsecond, 2, 0, time.Hour),
				w.addVM(2, 1, 100*time.Microsecond, 8, 0, time.Hour),
				w.addVM(3, 1, 200*time.Microsecond, 1, 0, time.Hour),
				w.addVM(4, 1, time.Millisecond, 4, 0, time.Hour),
			}
			if c.quantum > time.Millisecond {
				vs = append(vs, w.addVM(5, 1, 10*time.Millisecond, 2, 0, time.Hour))
			}
			w.run(ms(3000))
			_, turn := w.g.Arbitration()
			if w.violations != 0 {
				t.Fatalf("%d submissions beside more than the threshold of another VM's work or beside two VMs'", w.violations)
			}
			if turn.Handoffs == 0 || w.handoffs == 0 {
				t.Fatalf("no hand-off in %d turns", turn.Turns)
			}
			w.checkBusyAndShares(vs, 0.02)
		})
	}
}

// TestHandoffLateCompletions: completions that reach the channel late
// (alternately 1 ns and 10 µs after the command ended) move EndBound later
// than the hand-off timer armed for it: the timer must be armed again for
// the later bound, or the turn passes only at the drain. Every turn switch
// between two saturating VMs is a hand-off, at a quantum's end and at a
// scheduler's hold alike.
func TestHandoffLateCompletions(t *testing.T) {
	for _, holds := range []bool{false, true} {
		t.Run(fmt.Sprintf("holds=%v", holds), func(t *testing.T) {
			w := newHandoffWorld(t, 5*time.Millisecond, DefaultHandoff, false)
			n := 0
			w.deliver = func() int64 {
				n++
				if n%2 == 0 {
					return 10_000
				}
				return 1
			}
			a := w.addVM(1, 1, time.Millisecond, 4, 0, time.Hour)
			b := w.addVM(2, 1, 700*time.Microsecond, 4, 0, time.Hour)
			if holds {
				// The scheduler holds the holder 2 ms into each 8 ms.
				for i := int64(0); i < 40; i++ {
					at := ms(8)*i + ms(2)
					w.at(at, func() {
						_, turn := w.g.Arbitration()
						if turn.Held {
							w.g.Apply([]uint32{turn.Holder})
						}
					})
					w.at(at+ms(1), func() { w.g.Apply(nil) })
				}
			}
			w.run(ms(320))
			_, turn := w.g.Arbitration()
			t.Logf("%d hand-offs of %d turns", turn.Handoffs, turn.Turns)
			if w.violations != 0 {
				t.Fatalf("%d submissions beside another VM's work beyond the hand-off", w.violations)
			}
			if turn.Turns < 40 || turn.Handoffs < turn.Turns-1 {
				t.Fatalf("%d hand-offs of %d turns: a later bound was not waited for", turn.Handoffs, turn.Turns)
			}
			if a.busy == 0 || b.busy == 0 {
				t.Fatalf("busy %v and %v", a.busy, b.busy)
			}
		})
	}
}

// TestTurnsOverestimateNetted: a VM whose kernels run 40% of their cost
// beside one whose costs are exact. Its work in flight is charged ahead at
// each quantum's end by its cost, and the netting at the drain is negative:
// taken back, the charges add up to the busy time and the shares are even;
// dropped, the VM was overcharged most of a command a turn.
func TestTurnsOverestimateNetted(t *testing.T) {
	forHandoff(t, func(t *testing.T, handoff time.Duration) {
		w := newHandoffWorld(t, 5*time.Millisecond, handoff, false)
		a := w.addVM(1, 1, time.Millisecond, 4, 0, time.Hour)
		a.runPct = 40
		b := w.addVM(2, 1, 700*time.Microsecond, 4, 0, time.Hour)
		w.run(ms(2000))
		if w.violations != 0 {
			t.Fatalf("%d overlapping submissions", w.violations)
		}
		w.checkBusyAndShares([]*tvm{a, b}, 0.01)
	})
}

// chargeLog is a Picker that sums the charges the gate makes, per VM.
type chargeLog struct {
	Picker
	charged map[uint32]int64
}

// newChargedWorld is newHandoffWorld whose turns' picker logs the charges.
func newChargedWorld(t *testing.T, quantum, handoff time.Duration, preempts bool) (*world, *chargeLog) {
	t.Helper()
	w := newHandoffWorld(t, quantum, handoff, preempts)
	log := &chargeLog{Picker: w.s, charged: map[uint32]int64{}}
	cfg := TurnConfig{QuantumNs: int64(quantum), Picker: log, Clock: w.clock(), Preempts: preempts, HandoffNs: int64(handoff)}
	if err := w.g.SetTurns(ArbitrationTurns, cfg); err != nil {
		t.Fatal(err)
	}
	return w, log
}

func (c *chargeLog) ChargeTurn(id uint32, busyNs int64) {
	c.charged[id] += busyNs
	c.Picker.ChargeTurn(id, busyNs)
}

// TestHandoffTailGraceNetted: a VM whose kernels run five times their cost
// (1 ms charged, 5 ms run) beside a VM of exact 500 µs kernels, quanta of
// 1 ms, on a GPU that preempts: its hand-offs' tails run past their grace
// (three quanta), and the turns stop waiting for them. The tail's busy time
// is netted all the same, and once only: each VM's charges add up to its
// busy time (both always wait, so every turn is contended), within the work
// in flight at the end. At depth 1 the tail VM has nothing pending while
// its tail runs and is netted when it drains; at depth 2 it waits with its
// next kernel and gets the turn back while its tail still runs (netted at
// the grant, the rest charged in its turn). Neither loses its turns to the
// other's tails. Without hand-offs the late work passes the turn as an
// overrun (overrunLocked) and is netted and left out the same way.
func TestHandoffTailGraceNetted(t *testing.T) {
	for _, c := range []struct {
		depth   int
		handoff time.Duration
	}{{1, DefaultHandoff}, {2, DefaultHandoff}, {1, 0}, {2, 0}} {
		depth := c.depth
		t.Run(fmt.Sprintf("depth=%d/handoff=%v", depth, c.handoff), func(t *testing.T) {
			w, log := newChargedWorld(t, time.Millisecond, c.handoff, true)
			a := w.addVM(1, 1, time.Millisecond, depth, 0, time.Hour)
			a.runPct = 500
			b := w.addVM(2, 1, 500*time.Microsecond, 4, 0, time.Hour)
			w.run(ms(2000))
			_, turn := w.g.Arbitration()
			t.Logf("%d turns, %d hand-offs, %d overruns; charged %v of a's %v busy, %v of b's %v",
				turn.Turns, turn.Handoffs, turn.Overruns, time.Duration(log.charged[1]), time.Duration(a.busy),
				time.Duration(log.charged[2]), time.Duration(b.busy))
			if turn.Overruns < 10 {
				t.Fatalf("%d overruns: the tails did not outrun their grace", turn.Overruns)
			}
			for _, v := range []*tvm{a, b} {
				// What it can have in flight: its depth of commands, each
				// running runPct of its kernel.
				run := v.kernelNs
				if v.runPct > 0 {
					run = run * v.runPct / 100
				}
				if d, lim := log.charged[v.id]-v.busy, int64(v.depth)*run; d < -lim || d > lim {
					t.Errorf("vm %d: charged %v for %v busy, want within %v", v.id, time.Duration(log.charged[v.id]),
						time.Duration(v.busy), time.Duration(lim))
				}
			}
			// Both always wait, with equal weights: each gets about half.
			// A holder judged on the time the other's tail ran beside its
			// work lost its turns for not using them (usedLocked): 83%
			// against 17%.
			if lo, hi := min(a.busy, b.busy), max(a.busy, b.busy); 10*lo < 9*hi {
				t.Errorf("busy %v and %v: want within a tenth of each other", time.Duration(a.busy), time.Duration(b.busy))
			}
		})
	}
}

// TestHandoffUnmeasured: with no in-flight limit a work command forwarded
// before any was measured costs ControlCostNs, which says nothing of its
// length: a hand-off behind it would queue the next VM's work behind work
// of any length. A VM of 1 ms ALLOCs (never measured) beside one of
// THROTTLEs never hands off, and no submission comes beside its work; a VM
// of 1 ms MEMSETs is measured by its first completion and hands off from
// then on.
func TestHandoffUnmeasured(t *testing.T) {
	for _, op := range []abi.Opcode{abi.OpAlloc, abi.OpMemset} {
		t.Run(op.String(), func(t *testing.T) {
			w := newHandoffWorld(t, 5*time.Millisecond, DefaultHandoff, false)
			a := w.addVM(1, 1, time.Millisecond, 2, 0, time.Hour)
			a.op = op
			w.addVM(2, 1, 700*time.Microsecond, 4, 0, time.Hour)
			w.run(ms(500))
			_, turn := w.g.Arbitration()
			if w.violations != 0 {
				t.Fatalf("%d submissions beside more than the threshold of another VM's work (%d hand-offs of %d turns)",
					w.violations, turn.Handoffs, turn.Turns)
			}
			if turn.Turns < 50 {
				t.Fatalf("%d turns in 500 ms of 5 ms quanta", turn.Turns)
			}
			// VM 2's turns hand off either way (its THROTTLEs' costs are
			// their lengths); VM 1's only once measured.
			if turn.Handoffs < turn.Turns*4/10 || op == abi.OpMemset && turn.Handoffs < turn.Turns*9/10 {
				t.Fatalf("%d hand-offs of %d turns", turn.Handoffs, turn.Turns)
			}
			if op == abi.OpAlloc && turn.Handoffs > turn.Turns*6/10 {
				t.Fatalf("%d hand-offs of %d turns: VM 1 handed off behind ALLOCs of unknown length", turn.Handoffs, turn.Turns)
			}
		})
	}
}

// TestTurnsHolderIdleInFlight: a VM whose commands hold the GPU while the
// backend counts next to none of it as busy (1%: a GPU worker's host-side
// work, as a LOAD_MODULE's compile; a sim whose host moves data slower
// than its model did that) is charged next to nothing for its turns, so
// the picker keeps finding it behind. It does not keep the turn past its
// quantum for that: the VM beside it waits a quantum and a command at
// most, and gets about half of the GPU's time; before, it waited for the
// whole run. A VM that uses its turns keeps them as before (weights,
// catching up).
func TestTurnsHolderIdleInFlight(t *testing.T) {
	forHandoff(t, func(t *testing.T, handoff time.Duration) {
		w := newHandoffWorld(t, 5*time.Millisecond, handoff, false)
		idle := w.addVM(1, 1, time.Millisecond, 4, 0, time.Hour)
		idle.busyPct = 1
		normal := w.addVM(2, 1, time.Millisecond, 4, 10*time.Millisecond, time.Hour)
		w.run(ms(1000))
		if len(normal.starts) == 0 {
			t.Fatal("the normal VM never ran")
		}
		var worst int64
		last := int64(10 * time.Millisecond) // it knocked then
		for _, s := range normal.starts {
			worst = max(worst, s-last)
			last = s
		}
		worst = max(worst, w.now-last)
		t.Logf("the normal VM: worst wait %v, %.2f of the time", time.Duration(worst), float64(normal.busy)/float64(w.now-ms(10)))
		if limit := ms(5) + 2*ms(1) + 4*ms(1); worst > limit {
			t.Errorf("the normal VM waited %v for the GPU at worst, want a quantum and the holder's commands in flight at most (%v)",
				time.Duration(worst), time.Duration(limit))
		}
		if share := float64(normal.busy) / float64(w.now-ms(10)); share < 0.4 {
			t.Errorf("the normal VM ran %.2f of the time since it knocked, want about half", share)
		}
		if w.violations != 0 {
			t.Errorf("%d overlapping submissions", w.violations)
		}
	})
}

// TestSwitchNetsWhatTurnsChargedAhead: turns charge work in flight ahead,
// by its estimate, and net it when it drains; a switch to the driver's
// arbitration (auto's, at a period's end) ends them with some of it still
// in flight: the holder's last work, and an overrun's late kernel no longer
// waited for. The switch nets both as they stand, so that each VM's charges
// are its busy time when it came (the work in flight then runs under the
// driver, which charges nothing); dropped, they stayed charged at their
// estimates, and a VM whose kernels ran past them kept a charge for time it
// had not run when turns came back.
func TestSwitchNetsWhatTurnsChargedAhead(t *testing.T) {
	w, log := newChargedWorld(t, time.Millisecond, 0, true)
	a := w.addVM(1, 1, time.Millisecond, 1, 0, time.Hour)
	a.runPct = 2000 // 20 ms a kernel: each overruns its turn
	b := w.addVM(2, 1, 500*time.Microsecond, 4, 0, time.Hour)
	w.run(ms(95)) // a's fifth kernel in flight, past its turn
	if _, turn := w.g.Arbitration(); turn.Overruns == 0 {
		t.Fatal("no overrun: nothing charged ahead is in flight")
	}
	busyA, busyB := a.busy, b.busy
	if err := w.g.SetTurns(ArbitrationDriver, TurnConfig{}); err != nil {
		t.Fatal(err)
	}
	w.run(ms(200))
	for _, c := range []struct {
		v    *tvm
		busy int64
	}{{a, busyA}, {b, busyB}} {
		if got := log.charged[c.v.id]; got != c.busy {
			t.Errorf("vm %d: charged %v, want its busy time at the switch, %v", c.v.id, time.Duration(got), time.Duration(c.busy))
		}
	}

	// The holder's contended turn and a hand-off's tail: switches every
	// 250 µs across a few turns of kernels that run longer or shorter
	// than their estimates find both, and net them as well.
	seen := map[string]bool{}
	for _, handoff := range []time.Duration{0, 50 * time.Microsecond} {
		for at := int64(0); at < ms(4); at += int64(250 * time.Microsecond) {
			w, log := newChargedWorld(t, time.Millisecond, handoff, false)
			a := w.addVM(1, 1, time.Millisecond, 3, 0, time.Hour)
			a.runPct = 170
			b := w.addVM(2, 1, 700*time.Microsecond, 3, 0, time.Hour)
			b.runPct = 60
			w.run(ms(50) + at)
			tt := w.g.turns
			seen["holder"] = seen["holder"] || tt.has && tt.contended && tt.pre > 0
			seen["tail"] = seen["tail"] || tt.tailed
			busyA, busyB := a.busy, b.busy
			if err := w.g.SetTurns(ArbitrationDriver, TurnConfig{}); err != nil {
				t.Fatal(err)
			}
			w.run(ms(200))
			if log.charged[1] != busyA || log.charged[2] != busyB {
				t.Errorf("hand-off %v, switch at 50 ms + %v: a charged %v for %v busy, b %v for %v", handoff, time.Duration(at),
					time.Duration(log.charged[1]), time.Duration(busyA), time.Duration(log.charged[2]), time.Duration(busyB))
			}
		}
	}
	if !seen["holder"] || !seen["tail"] {
		t.Fatalf("the switches found a holder's work charged ahead %v, a tail %v: want both", seen["holder"], seen["tail"])
	}
}

// TestTurnsUncontendChargesOnce: a holder's turn that stops being
// contended (the only VM waiting is held for a limit, or a guest moved its
// put back after it rang) and is contended again before the holder's work
// in flight completes charges that work once: uncontending took back what
// the quantum's end had charged ahead of it. And a VM that only seemed to
// wait banks TurnBank at most: uncontending re-bases the lags on the
// holder. Before, each flip charged the holder's work in flight twice and
// never re-based: a guest that rang and retracted its put around each of
// the holder's completions had it charged 792 ms for 500 ms busy, then
// took 895 ms of the next second while the holder waited 806 ms.
func TestTurnsUncontendChargesOnce(t *testing.T) {
	t.Run("hold flips", func(t *testing.T) {
		w, log := newChargedWorld(t, 5*time.Millisecond, 0, false)
		a := w.addVM(1, 1, time.Millisecond, 8, 0, time.Hour)
		b := w.addVM(2, 1, time.Millisecond, 8, 0, time.Hour)
		for range 20 {
			w.run(w.now + int64(2300*time.Microsecond))
			w.g.ApplyAhead([]uint32{2}, nil) // b held for a limit: a's turn uncontended
			w.run(w.now + int64(100*time.Microsecond))
			w.g.ApplyAhead(nil, nil) // released: contended again
		}
		w.g.ApplyAhead([]uint32{1, 2}, nil)
		w.run(w.now + ms(100)) // everything drains
		for _, v := range []*tvm{a, b} {
			if d, lim := log.charged[v.id]-v.busy, int64(v.depth)*v.kernelNs; d < -lim || d > lim {
				t.Errorf("vm %d: charged %v for %v busy, want within %v", v.id, time.Duration(log.charged[v.id]),
					time.Duration(v.busy), time.Duration(lim))
			}
		}
	})
	t.Run("put retracted", func(t *testing.T) {
		w, log := newChargedWorld(t, 5*time.Millisecond, 0, false)
		h := w.addVM(1, 1, time.Millisecond, 8, 0, time.Hour)
		o := w.addVM(2, 1, time.Millisecond, 8, 500*time.Millisecond, time.Hour)
		var step func()
		step = func() {
			if w.now >= ms(495) {
				return
			}
			cmd := abi.EncodeCommand(abi.Command{Op: abi.OpThrottle, DurationNs: uint64(time.Millisecond)})
			o.region.CopyIn(o.layout.RecordOff(0, o.put), cmd[:])
			o.region.Store32(o.layout.ChannelOff(0)+abi.ChPut, o.put+1)
			o.ch.Poll() // rings: it waits
			w.at(w.now+int64(300*time.Microsecond), func() {
				o.region.Store32(o.layout.ChannelOff(0)+abi.ChPut, o.put) // and takes it back
			})
			w.at(w.now+ms(1), step)
		}
		w.at(int64(150*time.Microsecond), step)
		w.run(ms(500))
		if lim := int64(h.depth) * h.kernelNs; log.charged[1] > h.busy+lim {
			t.Errorf("the holder was charged %v for %v busy", time.Duration(log.charged[1]), time.Duration(h.busy))
		}
		w.run(ms(1500)) // o saturates from 500 ms
		var wait, last int64 = 0, ms(500)
		for _, s := range h.starts {
			if s > ms(500) {
				wait, last = max(wait, s-last), s
			}
		}
		if limit := int64(sched.TurnBank) + ms(15); wait > limit {
			t.Errorf("the holder waited %v at once beside the VM that seemed to wait, want at most %v", time.Duration(wait), time.Duration(limit))
		}
	})
}
