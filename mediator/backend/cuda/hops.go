package cuda

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// HopsEnv names the hop diagnostic: with SLUICE_CUDA_HOPS=FILE the backend
// timestamps every command at each hop of its path (Submit, the worker's
// ring read and launch, the kernel's start and end on %globaltimer, the
// completer's sight of the end marker, the deliverer's callback, the
// channel's next Submit) and writes each hop's quantiles as JSON to FILE
// when it closes; the native baseline (RunNative) writes its own to
// FILE.native.json. For measuring, not for production: unset, the hot path
// pays one nil check a hop.
const HopsEnv = "SLUICE_CUDA_HOPS"

// maxHopSamples bounds each hop's samples (a 10 s run of 5 µs kernels
// stays under it).
const maxHopSamples = 4 << 20

// hopSet is a set of named hops, each a list of samples (ns, signed: a hop
// between the host's clock and the GPU's is as good as the clocks'
// relation, which can make it slightly negative).
type hopSet struct {
	mu      sync.Mutex
	names   []string
	what    []string
	samples [][]int64
}

func newHopSet(hops [][2]string) *hopSet {
	h := &hopSet{samples: make([][]int64, len(hops))}
	for _, n := range hops {
		h.names, h.what = append(h.names, n[0]), append(h.what, n[1])
	}
	return h
}

// add records one sample of hop i.
func (h *hopSet) add(i int, ns int64) {
	h.mu.Lock()
	if len(h.samples[i]) < maxHopSamples {
		h.samples[i] = append(h.samples[i], ns)
	}
	h.mu.Unlock()
}

// HopStat is one hop's figures in a hop report.
type HopStat struct {
	Hop  string `json:"hop"`
	What string `json:"what"`
	N    int    `json:"n"`
	P10  int64  `json:"p10_ns"`
	P50  int64  `json:"p50_ns"`
	P90  int64  `json:"p90_ns"`
	P99  int64  `json:"p99_ns"`
	// Mean: what a signed hop (a bill's error) adds up to per sample, the
	// 0.1% at each end left out.
	Mean int64 `json:"mean_ns"`
}

// GPUClock is how a process related the GPU's %globaltimer to the host's
// CLOCK_MONOTONIC: gpu = host + OffsetNs, within ±UncertaintyNs (half the
// fastest of Rounds host → GPU → host round trips). OK false: not
// related, and the hops that need it are left out.
type GPUClock struct {
	OK            bool   `json:"ok"`
	OffsetNs      int64  `json:"offset_ns"`
	UncertaintyNs int64  `json:"uncertainty_ns"`
	Rounds        int    `json:"rounds"`
	Error         string `json:"error,omitempty"`
}

// HopReport is what the hop diagnostic writes.
type HopReport struct {
	Path     string    `json:"path"`
	Note     string    `json:"note"`
	GPUClock *GPUClock `json:"gpu_clock,omitempty"`
	Hops     []HopStat `json:"hops"`
	// Counters: the mediator's completions (delivered) and those the
	// completer delivered itself (inlined, see Backend.inline).
	Counters map[string]int64 `json:"counters,omitempty"`
}

// report is the set's quantiles.
func (h *hopSet) report() []HopStat {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]HopStat, 0, len(h.names))
	for i, name := range h.names {
		s := slices.Clone(h.samples[i])
		slices.Sort(s)
		st := HopStat{Hop: name, What: h.what[i], N: len(s)}
		if len(s) > 0 {
			q := func(f float64) int64 { return s[min(len(s)-1, int(f*float64(len(s))))] }
			st.P10, st.P50, st.P90, st.P99 = q(0.10), q(0.50), q(0.90), q(0.99)
			// The mean leaves out the 0.1% at each end: one kernel whose
			// %globaltimer jumped (about 125 ms on an H100, once a run)
			// must not stand for a bias of every kernel.
			trim := len(s) / 1000
			var sum float64
			for _, x := range s[trim : len(s)-trim] {
				sum += float64(x)
			}
			st.Mean = int64(math.Round(sum / float64(len(s)-2*trim)))
		}
		out = append(out, st)
	}
	return out
}

// writeHopReport writes r as JSON to path.
func writeHopReport(path string, r HopReport) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the hop report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the hop report: %w", err)
	}
	return nil
}

// monoClock relates this process's time.Time readings to CLOCK_MONOTONIC,
// which every process on the host reads alike (Go's monotonic readings are
// it, offset by a per-process origin that Go does not expose).
type monoClock struct {
	base time.Time
	mono int64 // CLOCK_MONOTONIC at base
}

// newMonoClock measures the relation: the reading bracketed most tightly
// by two time.Now calls of a few tries.
func newMonoClock() monoClock {
	var best monoClock
	bestGap := int64(-1)
	for range 16 {
		var ts unix.Timespec
		a := time.Now()
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			continue
		}
		b := time.Now()
		if gap := int64(b.Sub(a)); bestGap < 0 || gap < bestGap {
			bestGap = gap
			best = monoClock{base: a.Add(b.Sub(a) / 2), mono: ts.Nano()}
		}
	}
	return best
}

// of is t on CLOCK_MONOTONIC.
func (c monoClock) of(t time.Time) int64 { return c.mono + int64(t.Sub(c.base)) }

// now is CLOCK_MONOTONIC now.
func (c monoClock) now() int64 { return c.of(time.Now()) }

// The mediator's hops, in a command's order.
const (
	hopSubmitRead = iota
	hopReadLaunched
	hopLaunchedStart
	hopKernel
	hopEndSeen
	hopLaunchedSeenLessKernel
	hopSeenCallback
	hopCallback
	hopCallbackSubmit
	hopSubmitSubmit
	hopSubmitSeen
	hopSweep
	hopStartSeen
	hopBillLessKernel
	hopSeenLessKernel
	hopKernelGap
	hopAfterDelivery
	hopDeliveringSweep
	hopHandOff
)

var mediatorHops = [][2]string{
	hopSubmitRead:             {"submit_to_worker_read", "cuda Submit (mediator) to the GPU worker reading the command from the shared ring"},
	hopReadLaunched:           {"worker_read_to_launched", "the worker's decode, code slot and launch call (cuLaunchKernel, or the stream memops and the work) until it returned"},
	hopLaunchedStart:          {"launched_to_kernel_start", "the launch call's return to the kernel's first %globaltimer read (needs gpu_clock)"},
	hopKernel:                 {"kernel", "the THROTTLE kernel's first to last %globaltimer read"},
	hopEndSeen:                {"kernel_end_to_end_seen", "the kernel's last %globaltimer read to the completer seeing its end marker (needs gpu_clock)"},
	hopLaunchedSeenLessKernel: {"launched_to_end_seen_less_kernel", "the launch call's return to the end marker seen, less the kernel: GPU launch latency plus the end's trip to the host (no clock relation needed)"},
	hopSeenCallback:           {"end_seen_to_callback", "the completer seeing the end to the VM's Complete callback starting (the hand-off to the deliverer, if any, and its taking of the THROTTLE record and this diagnostic's bookkeeping)"},
	hopCallback:               {"callback", "the VM's Complete callback (in the bench: the channel's completion record, the guest's interrupt and its next submit)"},
	hopCallbackSubmit:         {"callback_to_next_submit", "a callback's start to the channel's next cuda Submit"},
	hopSubmitSubmit:           {"submit_to_submit", "a channel's cuda Submit to its next: the period of a depth-1 loop"},
	hopSubmitSeen:             {"submit_to_end_seen", "cuda Submit to the completer seeing the command's end marker"},
	hopSweep:                  {"completer_sweep", "the completer's time between two sweeps while work is out (every 64th)"},
	hopStartSeen:              {"kernel_start_to_start_seen", "the kernel's first %globaltimer read to the completer seeing its start marker, for kernels seen running (needs gpu_clock)"},
	hopBillLessKernel:         {"bill_less_kernel", "the THROTTLE's credited GPU time less its kernel's own (signed; a carried count lands on a later command than the one it was counted in, so mean_ns, the bill's error per kernel, is the figure to read)"},
	hopKernelGap:              {"kernel_gap", "a THROTTLE's first %globaltimer read less the last of the one before it on its channel (the GPU's launch gap between two kernels, where the second was queued behind the first)"},
	hopDeliveringSweep:        {"delivering_sweep", "a sweep that found completions, from its clock read to its return (its credit and its channels' collection of the completions)"},
	hopHandOff:                {"hand_off", "the completer's hand-off of a sweep's completions to the deliverer (handoff.go: the entries, the count, a wakeup where the deliverer parked)"},
	hopAfterDelivery:          {"sweep_after_delivery", "the completer's time from a sweep that found completions to the next sweep (the interval in which the next command's start falls)"},
	hopSeenLessKernel:         {"seen_span_less_kernel", "the completer's sight of the end less its sight of the start, less the kernel's own span, for kernels seen running (signed: how much later an end is seen than a start, with the sweeps' spacing; no clock relation needed)"},
}

// backendHops is the mediator's side of the hop diagnostic.
type backendHops struct {
	path string
	set  *hopSet
	mono int64 // CLOCK_MONOTONIC at the backend's epoch
	mu   sync.Mutex
	// The VMs' GPU clocks as their workers related them (the last worker's).
	clocks map[uint32]GPUClock
	sweeps int
	parks  atomic.Int64 // the completer's parks (it slept until a Submit woke it)
}

// newBackendHops is the diagnostic writing to path, for a backend whose
// clock started at epoch.
func newBackendHops(path string, epoch time.Time) *backendHops {
	mc := newMonoClock()
	return &backendHops{path: path, set: newHopSet(mediatorHops), mono: mc.of(epoch), clocks: map[uint32]GPUClock{}}
}

// workerClock notes the GPU clock of VM id's new worker.
func (h *backendHops) workerClock(id uint32, c *GPUClock) {
	if c == nil {
		return
	}
	h.mu.Lock()
	h.clocks[id] = *c
	h.mu.Unlock()
}

// submitted notes a command submitted on ch at (the backend's clock).
func (h *backendHops) submitted(ch *channel, at int64) {
	h.mu.Lock()
	cb, last := ch.hopCallback, ch.hopSubmit
	ch.hopCallback, ch.hopSubmit = 0, at
	h.mu.Unlock()
	if cb != 0 {
		h.set.add(hopCallbackSubmit, at-cb)
	}
	if last != 0 {
		h.set.add(hopSubmitSubmit, at-last)
	}
}

// completed records the hops of command it of ch (a copy), whose end the
// completer saw (it.endAt); gpu: the THROTTLE record in its slot is
// complete. The deliverer calls it before it (Backend.deliver).
func (h *backendHops) completed(ch *channel, it *item, gpu bool) {
	blk := ch.vm.blk
	h.set.add(hopSubmitSeen, it.endAt-it.submitAt)
	var first, last int64
	if gpu {
		soff := ch.base + blk.l.slotOff(it.seq)
		first, last = int64(blk.load(soff+8)), int64(blk.load(soff+16))
		h.set.add(hopKernel, last-first)
		if ch.hopLastSeq == it.seq-1 && ch.hopLastKernel != 0 && it.submitAt <= ch.hopLastEndAt {
			h.set.add(hopKernelGap, first-ch.hopLastKernel)
		}
		ch.hopLastSeq, ch.hopLastKernel, ch.hopLastEndAt = it.seq, last, it.endAt
		h.set.add(hopBillLessKernel, int64(math.Round(it.gpu))-(last-first))
		if it.startAt != 0 {
			h.set.add(hopSeenLessKernel, it.endAt-it.startAt-(last-first))
		}
	}
	toff := blk.l.traceSlot(ch.idx, it.seq)
	if blk.l.traceOff == 0 || blk.load(toff+traceStamp) != it.seq {
		return
	}
	read, launched := int64(blk.load(toff+traceRead)), int64(blk.load(toff+traceLaunch))
	h.set.add(hopSubmitRead, read-(h.mono+it.submitAt))
	if launched == 0 || !gpu {
		// The end came before the worker noted its launch's return (a
		// command of markers alone can), or there is no kernel to time.
		if launched != 0 {
			h.set.add(hopReadLaunched, launched-read)
		}
		return
	}
	seen := h.mono + it.endAt
	h.set.add(hopReadLaunched, launched-read)
	h.set.add(hopLaunchedSeenLessKernel, seen-launched-(last-first))
	h.mu.Lock()
	c, ok := h.clocks[ch.vm.id]
	h.mu.Unlock()
	if ok && c.OK {
		h.set.add(hopLaunchedStart, first-c.OffsetNs-launched)
		h.set.add(hopEndSeen, seen-(last-c.OffsetNs))
		if it.startAt != 0 {
			h.set.add(hopStartSeen, h.mono+it.startAt-(first-c.OffsetNs))
		}
	}
}

// callback notes a callback of ch starting at start, for a completion the
// completer saw at seen (0: not seen running).
func (h *backendHops) callback(ch *channel, seen, start int64) {
	h.mu.Lock()
	ch.hopCallback = start
	h.mu.Unlock()
	if seen != 0 {
		h.set.add(hopSeenCallback, start-seen)
	}
}

// swept records the time between two sweeps (every 64th, and every one
// after a sweep that found completions: delivered).
func (h *backendHops) swept(dt int64, delivered bool) {
	if delivered {
		h.set.add(hopAfterDelivery, dt)
	}
	if h.sweeps++; h.sweeps%64 == 0 {
		h.set.add(hopSweep, dt)
	}
}

// write writes the report; inlined is Backend.inlined.
func (h *backendHops) write(inlined int64) error {
	r := HopReport{
		Path: "sluice",
		Note: "per-command hop times of the cuda backend (ns). Host times are CLOCK_MONOTONIC in each process; GPU times are %globaltimer " +
			"moved onto it by gpu_clock (its uncertainty bounds the hops that need it). For a depth-1 loop the per-kernel " +
			"time is submit_to_submit; its parts are submit_to_worker_read + worker_read_to_launched + launched_to_end_seen_less_kernel + " +
			"kernel + end_seen_to_callback + callback_to_next_submit.",
		Hops: h.set.report(),
	}
	r.Counters = map[string]int64{"inlined": inlined, "delivered": int64(r.Hops[hopCallback].N), "completer_parks": h.parks.Load()}
	h.mu.Lock()
	for _, c := range h.clocks {
		r.GPUClock = &c // one VM in a diagnostic run; the last if several
	}
	h.mu.Unlock()
	return writeHopReport(h.path, r)
}
