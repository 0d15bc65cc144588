package cuda

import (
	"math/rand/v2"
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
)

// gpuModel is a synthetic GPU for the completer: one VM's THROTTLE kernels
// on its channels, back to back on each channel's stream, with their markers
// and records landing in host memory when the model says, on a timeline
// the completer's clock reads (Backend.clock). A sweep costs what the model
// says, so the test chooses the sweep periods the bills are judged under.
type gpuModel struct {
	b     *Backend
	v     *cudaVM
	t     int64 // the timeline, ns
	rng   *rand.Rand
	kern  int64 // a kernel's time
	gap   func() int64
	depth int

	// landEnd, landStart, landRecord: how long after the GPU wrote it a
	// marker or record shows in host memory.
	landStart, landEnd, landRecord int64

	chans []*modelChan
	truth int64 // the delivered kernels' own time
	kerns int64
}

type modelChan struct {
	ch      *channel
	next    uint64 // the next seq to queue
	kernels []modelKernel
}

type modelKernel struct {
	seq        uint64
	start, end int64 // on the GPU
}

func newGPUModel(channels, depth int, kern int64, gap func() int64, seed uint64) *gpuModel {
	m := &gpuModel{kern: kern, gap: gap, depth: depth, rng: rand.New(rand.NewPCG(seed, 1))}
	b := &Backend{}
	b.clock = func() int64 { return m.t }
	l := newBlockLayout(channels, depth, false)
	v := &cudaVM{b: b, id: 1, blk: newBlock(l, make([]byte, l.size))}
	m.b, m.v = b, v
	var list []*channel
	w := &workerConn{}
	for c := range channels {
		ch := &channel{vm: v, idx: c, base: v.blk.chanBase(c)}
		v.chans = append(v.chans, ch)
		list = append(list, ch)
		mc := &modelChan{ch: ch, next: 1}
		m.chans = append(m.chans, mc)
		// The stream: kernels back to back from t = 1 µs, each after the
		// one before and a launch gap.
		at := int64(1000)
		for range depth {
			mc.queue(m, w, &at)
		}
	}
	b.chans.Store(&list)
	b.lastSweep = b.now()
	return m
}

// queue submits the channel's next kernel, which starts a launch gap after
// at (its previous kernel's end) and runs for kern.
func (mc *modelChan) queue(m *gpuModel, w *workerConn, at *int64) {
	seq := mc.next
	mc.next++
	l := m.v.blk.l
	m.v.blk.store(l.codeOff(mc.ch.idx, seq)+codeStamp, seq)
	m.v.blk.store(l.codeOff(mc.ch.idx, seq)+codeValue, 0)
	mc.ch.mu.Lock()
	mc.ch.q = append(mc.ch.q, item{seq: seq, tag: seq, w: w, op: abi.OpThrottle, submitAt: m.t})
	mc.ch.mu.Unlock()
	start := *at + m.gap()
	mc.kernels = append(mc.kernels, modelKernel{seq: seq, start: start, end: start + m.kern})
	*at = start + m.kern
}

// land writes what the GPU wrote that shows in host memory by now.
func (m *gpuModel) land() {
	for _, mc := range m.chans {
		base, blk := mc.ch.base, m.v.blk
		for _, k := range mc.kernels {
			if k.start+m.landStart <= m.t && blk.load(base+offStart) < k.seq {
				blk.store(base+offStart, k.seq)
			}
			if k.end+m.landEnd <= m.t && blk.load(base+offEnd) < k.seq {
				blk.store(base+offEnd, k.seq)
			}
			if off := base + blk.l.slotOff(k.seq); k.end+m.landRecord <= m.t && blk.load(off+24) != k.seq {
				blk.store(off, uint64(k.end-k.start))
				blk.store(off+8, uint64(k.start))
				blk.store(off+16, uint64(k.end))
				blk.store(off+24, k.seq)
			}
		}
	}
}

// run sweeps until the timeline reaches until, each sweep costing cost(n)
// (n: the completions it found), keeping depth kernels queued on each
// channel (a completion's replacement is queued at once), and returns the
// bill of the delivered kernels.
func (m *gpuModel) run(until int64, cost func(n int) int64) (bill int64) {
	w := &workerConn{}
	for m.t < until {
		m.land()
		out := m.b.sweep(nil)
		for _, d := range out {
			mc := m.chans[d.c.Channel]
			k := mc.kernels[0]
			mc.kernels = mc.kernels[1:]
			if d.c.Tag != k.seq || d.c.Code != abi.OK {
				panic("model: delivery out of order")
			}
			bill += d.c.Busy()
			m.truth += k.end - k.start
			m.kerns++
			at := mc.kernels[len(mc.kernels)-1].end
			mc.queue(m, w, &at)
		}
		m.t += cost(len(out))
	}
	return bill
}

// TestAloneDepthBilledItsKernels: a VM alone whose channel runs kernels
// back to back (depth 32) with launch gaps between them is billed its
// kernels' time, not the gaps, whatever the completer's sweeps cost: also
// when some sweeps come late (the completer descheduled, a collection),
// which made an interval holding a command that started and ended unseen
// bill all of it, launch gaps included (0.1% of sweeps 50 µs late: 10 µs
// kernels +2.9%, 5 µs +5.8%; 1%: +12%), and when sweeps are as long as a
// kernel (12 µs: +14%). A sweep that delivers costing more than a gap
// missed a third of the next kernel's start (3 µs: -13%).
func TestAloneDepthBilledItsKernels(t *testing.T) {
	for _, tc := range []struct {
		name             string
		kern, gap, sweep int64
		deliver          int64   // what a sweep that found completions costs more
		late             float64 // the fraction of sweeps 50 µs late
		landEnd          int64
		landRecord       int64
	}{
		{name: "10us steady sweeps", kern: 10_000, gap: 2_000, sweep: 300},
		{name: "5us steady sweeps", kern: 5_000, gap: 2_000, sweep: 300},
		{name: "10us deliveries cost 1us", kern: 10_000, gap: 2_000, sweep: 300, deliver: 1_000},
		{name: "10us deliveries cost 3us", kern: 10_000, gap: 2_000, sweep: 300, deliver: 3_000},
		{name: "10us record lands late", kern: 10_000, gap: 2_000, sweep: 300, landRecord: 500},
		{name: "10us 0.1% of sweeps late", kern: 10_000, gap: 2_000, sweep: 300, late: 0.001},
		{name: "5us 0.1% of sweeps late", kern: 5_000, gap: 2_000, sweep: 300, late: 0.001},
		{name: "10us 1% of sweeps late", kern: 10_000, gap: 2_000, sweep: 300, late: 0.01},
		{name: "10us sweeps of 12us", kern: 10_000, gap: 2_000, sweep: 12_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newGPUModel(1, 32, tc.kern, func() int64 { return tc.gap }, 1)
			m.landEnd, m.landRecord = tc.landEnd, tc.landEnd+tc.landRecord
			bill := m.run(100_000_000, func(n int) int64 {
				c := tc.sweep/2 + m.rng.Int64N(tc.sweep+1)
				if n > 0 {
					c += tc.deliver
				}
				if tc.late > 0 && m.rng.Float64() < tc.late {
					c += 50_000
				}
				return c
			})
			e := float64(bill)/float64(m.truth) - 1
			t.Logf("%d kernels: bill %d truth %d: %+.2f%%", m.kerns, bill, m.truth, 100*e)
			if e > 0.025 || e < -0.025 {
				t.Errorf("bill %d against the kernels' %d: %+.2f%%", bill, m.truth, 100*e)
			}
		})
	}
}
