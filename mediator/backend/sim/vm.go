package sim

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/slotcall"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// simVM is one attached VM. Fields without a comment are guarded by Sim.mu.
type simVM struct {
	s        *Sim
	id       uint32
	heap     []byte
	complete func(backend.Completion)
	chans    []*channel
	bufs     map[uint32]*buffer
	mods     map[uint32]struct{} // loaded modules (abi.ModuleSim)
	area     *slotcall.Area      // the syscall area, nil without one
	ringCtr  *atomic.Uint64      // the request ring's claim counter (the sim's "device memory": in dev)
	dev      *devFile            // the device state's files (devfile.go); nil without: the mover's, then Close's
	stats    *vmStats
	closed   bool
	quota    uint64       // device memory the VM may hold, 0: no quota
	memUsed  uint64       // device memory its buffers hold
	maxCmd   int64        // the longest a command may run, ns; 0: no limit
	timeouts atomic.Int64 // commands ended for running past maxCmd

	progs sync.WaitGroup // the VM's program goroutines

	fx     ring[*effect]  // data movements not done yet, in start order
	moving bool           // its mover goroutine runs
	movers sync.WaitGroup // the mover goroutine

	closing     atomic.Bool  // set by Close, read by the deliverer
	undelivered atomic.Int64 // commands submitted whose completion has not returned yet
	drained     chan struct{}
}

// channel is one command submission channel.
type channel struct {
	vm       *simVM
	idx      int
	q        ring[queued] // the head is the running or next command
	running  bool         // the head runs on an engine
	parked   *effect      // the head timed out, the loss of its VM's buffers not recorded yet
	inReady  bool         // in an engine's ready FIFO
	dead     bool         // its VM closed
	lastEnd  int64        // when its previous command ended
	activeAt int          // index in Sim.active, -1 when inactive
	// A preempted head (Params.TimesliceNs): what it has left to run
	// (0: none), when it first started, what it ran, its completion code.
	resume, resumeAt, resumeRan int64
	resumeCode                  abi.ErrorCode
}

type queued struct {
	cmd abi.Command
	tag uint64
}

var (
	_ backend.VM           = (*simVM)(nil)
	_ backend.MemoryQuota  = (*simVM)(nil)
	_ backend.CommandLimit = (*simVM)(nil)
)

// SetMaxCommand sets the longest a command of the VM may run, in ns (0: no
// limit), for the commands that start after it.
func (v *simVM) SetMaxCommand(ns int64) {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	v.maxCmd = max(ns, 0)
}

// Timeouts is how many of the VM's commands ran past its limit.
func (v *simVM) Timeouts() int64 { return v.timeouts.Load() }

// timedOutLocked ends the VM's work after the command at ch's head ran
// past its limit, as a GPU's watchdog ends its context: its buffers and modules are
// gone (later commands naming them fail with ErrBadHandle). Its other
// commands go on. The loss is the command's effect, which its completion
// waits for (nil: the VM is closed).
func (s *Sim) timedOutLocked(ch *channel) *effect {
	v := ch.vm
	v.timeouts.Add(1)
	if v.closed {
		return nil
	}
	slog.Warn("sim: a VM's command ran past its limit; dropping its buffers and modules",
		"vm", v.id, "channel", ch.idx, "op", ch.q.front().cmd.Op, "limit", time.Duration(v.maxCmd))
	s.memUsed -= v.memUsed
	v.memUsed = 0
	bufs, d := v.bufs, v.dev
	v.bufs = map[uint32]*buffer{}
	v.mods = map[uint32]struct{}{}
	return s.queueEffectLocked(v, ch, func() { d.reset(bufs) })
}

// SetMemoryQuota bounds the device memory the VM's buffers may hold (0:
// only the backend's capacity). It applies to the ALLOCs that start after
// it; a quota below what the VM holds frees nothing.
func (v *simVM) SetMemoryQuota(bytes uint64) {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	v.quota = bytes
}

// MemoryUsed is the device memory the VM's buffers hold.
func (v *simVM) MemoryUsed() uint64 {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	return v.memUsed
}

// Submit queues cmd behind the channel's earlier commands.
func (v *simVM) Submit(channel int, cmd abi.Command, tag uint64) error {
	if channel < 0 || channel >= len(v.chans) {
		return fmt.Errorf("submitting to channel %d of VM %d: %w: it has %d", channel, v.id, backend.ErrInvalid, len(v.chans))
	}
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if v.closed {
		return fmt.Errorf("submitting to VM %d: %w", v.id, backend.ErrClosed)
	}
	if s.wall {
		s.advanceLocked(s.wallNow())
	}
	ch := v.chans[channel]
	ch.q.push(queued{cmd: cmd, tag: tag})
	v.undelivered.Add(1)
	if ch.q.len() == 1 {
		s.activateLocked(ch)
		s.makeReadyLocked(ch)
		s.dispatchLocked()
		s.notifyLocked()
	}
	return nil
}

// Close completes the VM's queued commands with abi.ErrShutdown and frees
// its device memory. Commands running keep their engine until they end, as
// they cannot be preempted: with the wall clock Close waits for them; with
// the virtual clock it reports them finished at once (with the Start and End
// they have on the timeline). Close returns once every completion of the VM
// has been delivered, except with drive=manual when called from inside a
// callback: then they are delivered when that callback returns.
func (v *simVM) Close() error { return v.close(nil) }

// close is Close; keep, when not nil, is called once the VM's programs
// and mover have ended, before its device files are closed (Keep takes
// them).
func (v *simVM) close(keep func()) error {
	s := v.s
	s.mu.Lock()
	if v.closed {
		s.mu.Unlock()
		return fmt.Errorf("closing VM %d: %w", v.id, backend.ErrClosed)
	}
	s.closeVMLocked(v)
	s.notifyLocked()
	s.mu.Unlock()
	v.progs.Wait()  // aborted: they end promptly, and must not outlive the heap
	v.movers.Wait() // the movement under way ends; the rest are dropped
	if keep != nil {
		keep()
	}
	if v.dev != nil {
		v.dev.close()
		v.dev = nil
	}
	if s.manual {
		s.deliverManual()
		return nil
	}
	for v.undelivered.Load() != 0 {
		<-v.drained
	}
	return nil
}

func (s *Sim) closeVMLocked(v *simVM) {
	v.closed = true
	v.closing.Store(true)
	for _, ch := range v.chans {
		ch.dead = true
		if fx := ch.parked; fx != nil {
			s.finishParkedLocked(fx) // it ran; flushes the rest: ch is dead
			continue
		}
		if !ch.running {
			s.flushLocked(ch)
			continue
		}
		en := &s.engines[EngineOf(ch.q.front().cmd.Op)]
		if en.prog != nil {
			en.prog.end(abi.ErrShutdown)
		}
		if !s.wall {
			en.orphan = true
			ch.running = false
			if en.prog != nil { // its end is not known yet: it ends now
				s.finishHeadLocked(ch, abi.ErrShutdown, en.start, max(s.now, en.start), 0)
			} else {
				s.finishHeadLocked(ch, en.code, en.start, en.end, 0) // flushes the rest: ch is dead
			}
		}
		// With the wall clock, engineDone completes the head and flushes.
	}
	s.memUsed -= v.memUsed
	v.memUsed = 0
	v.bufs = nil
	v.mods = nil
	delete(s.vms, v.id)
}

// flushLocked completes every command queued on ch, none running, with
// abi.ErrShutdown.
func (s *Sim) flushLocked(ch *channel) {
	for ch.q.len() > 0 {
		q := ch.q.popFront()
		s.pending = append(s.pending, delivery{vm: ch.vm, c: backend.Completion{Channel: ch.idx, Tag: q.tag, Op: q.cmd.Op, Code: abi.ErrShutdown}})
	}
	s.deactivateLocked(ch)
}

func (s *Sim) activateLocked(ch *channel) {
	if ch.activeAt < 0 {
		ch.activeAt = len(s.active)
		s.active = append(s.active, ch)
	}
}

func (s *Sim) deactivateLocked(ch *channel) {
	i := ch.activeAt
	if i < 0 {
		return
	}
	last := len(s.active) - 1
	s.active[i] = s.active[last]
	s.active[i].activeAt = i
	s.active[last] = nil
	s.active = s.active[:last]
	ch.activeAt = -1
}
