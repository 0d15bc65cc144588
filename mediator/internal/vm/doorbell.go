package vm

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/spin"
	"github.com/sluice-gpu/sluice/vmm-plugin/ivshmem"
)

// bellState is the doorbell goroutine's: the busy-poll window over the
// VM's rings and the storm log. Only that goroutine touches it, but for
// doneAt, which completions store.
type bellState struct {
	epoch    time.Time
	win      *spin.Window
	seen     []uint32 // by channel: the put the host last looked at
	doneAt   atomic.Int64
	doneSeen int64
	// limitLogged is when a storm was last logged (mono), limitsUnlogged
	// the mutes since that were not.
	limitLogged    int64
	limitsUnlogged uint64
	// polling: the header's HdrPolling is set (abi.FeaturePolling), so
	// guests may leave out their doorbells while this goroutine spins.
	polling bool
	trace   *spinTrace // SpinTraceEnv's; nil: none
}

// spinLooks is how many looks at the rings a spin takes between the
// doorbell goroutine's polls of its eventfds (a system call each).
const spinLooks = 16

// limitLogEvery bounds the storm log to a line a second per VM.
const limitLogEvery = int64(time.Second)

func (v *VM) initBell() {
	v.bell.epoch = time.Now()
	v.bell.win = spin.NewWindow(v.cfg.SpinWindow, v.cfg.SpinBudget)
	v.bell.seen = make([]uint32, len(v.channels))
	v.bell.trace = newSpinTrace(v.cfg.Name)
	for i, c := range v.channels {
		v.bell.seen[i] = c.Put()
	}
}

// mono is monotonic ns since the VM was created, never 0.
func (v *VM) mono() int64 { return int64(time.Since(v.bell.epoch)) + 1 }

// doorbell runs on the server's epoll goroutine.
func (v *VM) doorbell(vector int, _ uint64) {
	v.doorbells.Add(1)
	if vector >= 0 && vector < len(v.channels) {
		c := v.channels[vector]
		// Put before the poll: the poll forwards at least up to it, so a
		// spin that sees put move past it has found new records. Only a
		// doorbell that brought records starts a spin: one a spin beat
		// to its records, or a storm's, does not.
		p := c.Put()
		moved := p != v.bell.seen[vector]
		v.bell.seen[vector] = p
		c.Poll()
		if moved {
			v.startSpin(v.mono())
		}
		return
	}
	if vector == abi.SyscallVector(len(v.channels)) && v.sys != nil {
		v.sys.Kick()
		return
	}
	// The control vector is served by a later ABI feature; a vector out of
	// range is the guest's garbage and is only counted.
	v.other.Add(1)
}

// idleHook is the server's OnIdle: spinOnce, or nil where the VM never
// spins.
func (v *VM) idleHook() func() bool {
	if v.cfg.SpinWindow <= 0 || v.cfg.SpinBudget == nil {
		return nil
	}
	return v.spinOnce
}

// spinOnce looks at the rings a few times, forwards what the guests put
// there since, and says whether the window keeps the doorbell goroutine
// spinning.
func (v *VM) spinOnce() bool {
	b := &v.bell
	for look := range spinLooks {
		found := false
		for i, c := range v.channels {
			if p := c.Put(); p != b.seen[i] {
				b.seen[i] = p
				found = c.Found() || found
			}
		}
		now := v.mono()
		if b.trace != nil {
			b.trace.looked(now, look == 0, found)
		}
		if found {
			// Look again at once, not after a poll of the eventfds: a
			// guest's next command follows its completion closely.
			b.win.Found(now)
			continue
		}
		if d := b.doneAt.Load(); d != b.doneSeen {
			b.doneSeen = d
			b.win.Extend(now)
		}
		if !b.win.Spin(now) {
			return v.stopSpin()
		}
	}
	return true
}

// startSpin starts or renews a spin (spin.Window.Start) and, once the
// window spins, tells the guests they may leave out their doorbells
// (abi.FeaturePolling).
func (v *VM) startSpin(now int64) {
	b := &v.bell
	was := b.win.Spinning()
	b.win.Start(now)
	if b.trace != nil && !was && b.win.Spinning() {
		b.trace.spins++
	}
	if !b.polling && b.win.Spinning() {
		v.region.Store32(abi.HdrPolling, 1)
		b.polling = true
	}
}

// stopSpin ends a spin whose window ran out: it clears HdrPolling and then
// looks at every channel's put once more, both sequentially consistent, so
// a record whose guest saw the word still set and left out its doorbell is
// forwarded here. Records found so start the spin again (the window gave
// up too soon); it reports whether the goroutine spins on.
func (v *VM) stopSpin() bool {
	b := &v.bell
	if b.trace != nil {
		b.trace.stopped()
	}
	if !b.polling {
		return false
	}
	v.region.Store32(abi.HdrPolling, 0)
	b.polling = false
	found := false
	for i, c := range v.channels {
		if p := c.Put(); p != b.seen[i] {
			b.seen[i] = p
			found = c.Found() || found
		}
	}
	if !found {
		return false
	}
	v.startSpin(v.mono())
	return b.win.Spinning()
}

// noteCompletion tells a spin in progress that a record completed (from
// the backend's goroutine).
func (v *VM) noteCompletion() {
	if v.cfg.SpinWindow > 0 {
		v.bell.doneAt.Store(v.mono())
	}
}

// limited is the server's OnLimit: a guest rang vector over the limit and
// it is muted for a while. Logged at most once a second.
func (v *VM) limited(vector int) {
	b := &v.bell
	now := v.mono()
	if b.limitLogged != 0 && now-b.limitLogged < limitLogEvery {
		b.limitsUnlogged++
		return
	}
	slog.Warn("doorbell storm: vector muted", "vm", v.cfg.Name, "vector", vector,
		"limit_per_second", v.cfg.DoorbellLimit, "mute", ivshmem.MuteFor, "mutes_not_logged", b.limitsUnlogged)
	b.limitLogged, b.limitsUnlogged = now, 0
}
