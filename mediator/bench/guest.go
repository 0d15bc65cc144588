package bench

import (
	"fmt"
	"sync/atomic"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/bench/spec"
	"github.com/sluice-gpu/sluice/mediator/internal/lathist"
)

// guest is a VM's workload, a state machine on the sim's timeline. It deals
// with the host only as a real guest does: it writes records into its rings,
// stores put and rings the doorbell (channel.Poll), and learns of completions
// by reading get when its completion vector fires (interrupt).
type guest struct {
	h        *host
	after    func(delay int64, fn func())
	now      func() int64
	finished func()       // called once when an app's last kernel completes
	closing  *atomic.Bool // the run is over: ignore completions
	// overrun: the measured stretch ended at the duration; a throttle keeps
	// its pace after it, until the run closes, so that the accounting
	// period straddling the end samples the same workload it charges.
	overrun *atomic.Bool

	app             bool
	depth           int
	kernelNs        int64
	sleepNs         int64
	startAt, stopAt int64 // a throttle submits in [startAt, stopAt] (see overrun)
	on, off         int64 // bursty: on and off stretches from startAt; 0: always on
	left            int64 // app: kernels not submitted yet

	chans        []guestChan
	done         int64 // kernels completed, as seen through get
	firstSubmit  int64 // -1 until the first kernel
	lastComplete int64
	complete     bool  // app: every kernel completed
	err          error // the channel reported an error
	lat          lathist.Hist
}

type guestChan struct {
	put  uint32  // next record to write
	get  uint32  // last get read
	sent []int64 // when each record in flight was submitted, by ring slot
}

func newGuest(h *host, after func(int64, func()), now func() int64, duration int64, finished func()) *guest {
	w := h.vm.Workload
	g := &guest{
		h: h, after: after, now: now, finished: finished,
		app:      w.Kind == spec.KindApp,
		depth:    w.InFlight(),
		kernelNs: w.KernelUS * 1000,
		sleepNs:  w.SleepUS * 1000,
		startAt:  int64(w.Start),
		stopAt:   duration,
		on:       int64(w.On),
		off:      int64(w.Off),
		left:     w.Kernels,
		chans:    make([]guestChan, len(h.chans)),

		firstSubmit: -1,
	}
	for c := range g.chans {
		g.chans[c].sent = make([]int64, h.layout.RingEntries)
	}
	h.guest = g
	return g
}

// start schedules the first kernels.
func (g *guest) start() {
	g.after(g.startAt, func() {
		for c := range g.chans {
			g.submit(c, g.depth, g.now())
		}
	})
}

// submit writes up to n kernels on channel c and rings its doorbell once; in
// an off stretch it waits for the next on stretch. now is the run's time,
// just read.
func (g *guest) submit(c, n int, now int64) {
	if g.err != nil || (!g.app && now > g.stopAt && !g.overrun.Load()) {
		return
	}
	if d := g.offDelay(now); d > 0 {
		g.after(d, func() { g.submit(c, n, g.now()) })
		return
	}
	gc := &g.chans[c]
	l, r := g.h.layout, g.h.region
	rec := abi.EncodeCommand(abi.Command{Op: abi.OpThrottle, DurationNs: uint64(g.kernelNs)})
	k := 0
	for ; k < n && (!g.app || g.left > 0); k++ {
		r.CopyIn(l.RecordOff(uint32(c), gc.put), rec[:])
		gc.sent[gc.put&(l.RingEntries-1)] = now
		gc.put++
		if g.app {
			g.left--
		}
	}
	if k == 0 {
		return
	}
	if g.firstSubmit < 0 {
		g.firstSubmit = now
	}
	r.Store32(l.ChannelOff(uint32(c))+abi.ChPut, gc.put)
	g.h.chans[c].Poll() // the doorbell
}

// offDelay is how long until the next on stretch, 0 inside one.
func (g *guest) offDelay(now int64) int64 {
	if g.on <= 0 {
		return 0
	}
	cycle := g.on + g.off
	if phase := (now - g.startAt) % cycle; phase >= g.on {
		return cycle - phase
	}
	return 0
}

// interrupt is the channel's completion vector: read get, count what
// completed, and submit the kernels that replace them.
func (g *guest) interrupt(c int) {
	if g.err != nil || (g.closing != nil && g.closing.Load()) {
		return
	}
	gc := &g.chans[c]
	off := g.h.layout.ChannelOff(uint32(c))
	get := g.h.region.Load32(off + abi.ChGet)
	if code := abi.ErrorCode(g.h.region.Load32(off + abi.ChError)); code != abi.OK {
		g.err = fmt.Errorf("vm %q channel %d failed at record %d: %v", g.h.vm.Name, c,
			g.h.region.Load32(off+abi.ChErrorIndex), code)
		return
	}
	n := int(get - gc.get)
	if n <= 0 {
		return
	}
	now := g.now()
	for i := gc.get; i != get; i++ {
		g.lat.Add(now - gc.sent[i&(g.h.layout.RingEntries-1)])
	}
	gc.get = get
	g.done += int64(n)
	g.lastComplete = now
	if g.app && g.left == 0 && g.allCompleted() && !g.complete {
		g.complete = true
		g.finished()
		return
	}
	if g.sleepNs == 0 {
		g.submit(c, n, now) // at once: the clock read above is the submission's
		return
	}
	g.after(g.sleepNs, func() { g.submit(c, n, g.now()) })
}

// oldestWait is how long the oldest kernel not completed has waited since
// its doorbell, over the guest's channels; 0 if none. Now is the guest's
// own clock, the run's time its doorbells were stamped on (a snapshot's
// instant is on the backend's clock, which on a real GPU is ahead of it by
// the setup's time: the wait read against it was that much too long).
func (g *guest) oldestWait() int64 {
	now := g.now()
	var w int64
	for _, gc := range g.chans {
		if gc.get != gc.put {
			w = max(w, now-gc.sent[gc.get&(g.h.layout.RingEntries-1)])
		}
	}
	return w
}

func (g *guest) allCompleted() bool {
	for _, gc := range g.chans {
		if gc.get != gc.put {
			return false
		}
	}
	return true
}

// turnaround is first submit to last completion of an app that completed.
func (g *guest) turnaround() int64 {
	if !g.complete || g.firstSubmit < 0 {
		return 0
	}
	return g.lastComplete - g.firstSubmit
}

// demand is the GPU share the workload would use alone.
func demand(w spec.Workload, channels int) float64 {
	k, s := float64(w.KernelUS), float64(w.SleepUS)
	d := min(k/(k+s)*float64(w.InFlight()*channels), 1)
	if w.On > 0 {
		d *= float64(w.On) / float64(w.On+w.Off)
	}
	return d
}
