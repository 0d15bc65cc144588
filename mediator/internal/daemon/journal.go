package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/mediator/internal/usage"
)

// Files of the usage ledger and its journal in the state directory.
const (
	ledgerFile  = "usage.json"
	journalBase = "usage.journal" // segments usage.journal.0 and .1
)

// journalRotate is how often the journal is folded into a flushed ledger
// and emptied: it bounds the journal's size and the work of a start.
const journalRotate = time.Second

// journaler commits what every VM used to the journal each interval: one
// record per VM whose counters moved, one write for all, which survives a
// killed daemon at once; a syncer goroutine fdatasyncs behind it, each
// sync covering every write before it, so that a slow disk delays the
// records' safety against a power loss and never the next write.
type journaler struct {
	interval time.Duration
	list     func(seen uint64) ([]*entry, uint64, bool) // the VMs to commit, if their set moved since seen and the daemon's lock is free
	last     []*entry                                   // the last list (run's own)
	lastGen  uint64                                     // its generation (Daemon.vmsGen)
	ledger   *usage.Ledger

	mu      sync.Mutex // serializes writes; guards j's writes and switches, every entry's journaled, rotate, rotated
	j       *usage.Journal
	rotate  time.Duration // journalRotate
	rotated time.Time

	// disk is read-held across each change the journal makes to the
	// usage files (a commit's write, a rotation's ledger flush, a
	// segment's reset), never across two: whoever holds it for writing
	// sees the files as a crash between two changes would leave them
	// (the tests' crash copies). Changes do not exclude one another.
	disk sync.RWMutex

	kick chan struct{} // wakes the syncer

	// Idle: after journalIdleTicks commits that found nothing to write,
	// run stops ticking (an idle daemon does not wake every interval) and
	// sleeps until a completion pokes it.
	sleeping atomic.Bool
	wake     chan struct{}

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// openLedger folds the journal left by the last run into the ledger and
// reports in the log what it found.
func openLedger(stateDir string) (*usage.Ledger, error) {
	l, rec, err := usage.Recover(filepath.Join(stateDir, ledgerFile), filepath.Join(stateDir, journalBase))
	if err != nil {
		return nil, err
	}
	if rec.Folded > 0 || rec.CutErr != nil {
		slog.Info("usage journal folded into the ledger", "records", rec.Folded, "skipped", rec.Skipped, "seq", l.Seq())
	}
	if rec.CutErr != nil {
		slog.Warn("usage journal: a torn or corrupt tail dropped", "bytes", rec.Cut, "err", rec.CutErr)
	}
	return l, nil
}

// startJournal starts a new journal after the ledger's last record, and
// its goroutines; with interval 0 it removes the journal (openLedger folded
// it) and returns nil: the ledger is flushed by Heartbeat alone.
func startJournal(stateDir string, interval time.Duration, ledger *usage.Ledger, list func(seen uint64) ([]*entry, uint64, bool)) (*journaler, error) {
	base := filepath.Join(stateDir, journalBase)
	if interval == 0 {
		var errs []error
		for _, p := range usage.SegmentPaths(base) {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		return nil, errors.Join(errs...)
	}
	j, err := usage.CreateJournal(base, ledger.Seq()+1)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	jr := &journaler{interval: interval, list: list, ledger: ledger, j: j, rotate: journalRotate,
		rotated: time.Now(), kick: make(chan struct{}, 1), wake: make(chan struct{}, 1), stop: cancel}
	jr.wg.Add(2)
	go jr.run(ctx)
	go jr.syncer(ctx)
	return jr, nil
}

func (jr *journaler) run(ctx context.Context) {
	defer jr.wg.Done()
	tick := time.NewTicker(jr.interval)
	defer tick.Stop()
	var failing bool
	idle := 0
	for {
		if idle >= journalIdleTicks {
			// Announce the sleep, then look once more: a completion
			// counted before the announcement was seen is written now,
			// one after it pokes.
			jr.sleeping.Store(true)
			if wrote, err := jr.pass(&failing); err != nil || wrote {
				jr.sleeping.Store(false)
				idle = 0
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-jr.wake:
			}
			idle = 0
			tick.Reset(jr.interval)
			// The poke came with a completion: commit it at once, as
			// a tick would have within an interval.
		} else {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		if wrote, _ := jr.pass(&failing); wrote {
			idle = 0
		} else {
			idle++
		}
	}
}

// journalIdleTicks is how many commits in a row that find nothing to write
// put the journal to sleep until the next completion (100 ms at 5 ms).
const journalIdleTicks = 20

// poke wakes a sleeping journal; every completion calls it (through the
// channels' usage notify), so it is an atomic load when the journal is
// awake.
func (jr *journaler) poke() {
	if jr.sleeping.Load() && jr.sleeping.CompareAndSwap(true, false) {
		select {
		case jr.wake <- struct{}{}:
		default:
		}
	}
}

// pass is one interval's work: the VM list if it moved, a commit and a
// rotation when due; wrote says whether the commit wrote records.
func (jr *journaler) pass(failing *bool) (wrote bool, err error) {
	// The daemon's lock may be held across a disk write (vms.json, as
	// a VM is created): the commit does not wait for it, the last list
	// serves (a VM created meanwhile has no guest yet).
	if es, gen, ok := jr.list(jr.lastGen); ok {
		jr.last, jr.lastGen = es, gen
	}
	n, cerr := jr.commit(jr.last, false)
	err = errors.Join(cerr, jr.maybeRotate())
	switch {
	case err != nil && !*failing:
		slog.Error("usage journal: commit failed; retrying every interval", "err", err)
	case err == nil && *failing:
		slog.Info("usage journal: commits succeed again")
	}
	*failing = err != nil
	return n > 0, err
}

// syncer puts the journal's writes on stable storage, one fdatasync for
// all the writes since the last.
func (jr *journaler) syncer(ctx context.Context) {
	defer jr.wg.Done()
	var failing bool
	for {
		select {
		case <-ctx.Done():
			return
		case <-jr.kick:
		}
		err := jr.j.Sync()
		if err != nil && !failing {
			slog.Error("usage journal: fdatasync failed; what it wrote survives a crash of sluiced, maybe not of the host", "err", err)
		}
		failing = err != nil
	}
}

// commit writes what es used since their last commit to the journal and
// applies it to the ledger; durable waits for its fdatasync, otherwise the
// syncer does it.
func (jr *journaler) commit(es []*entry, durable bool) (int, error) {
	jr.mu.Lock()
	ds := make([]usage.Delta, 0, len(es))
	moved := make([]*entry, 0, len(es))
	gens := make([]uint64, 0, len(es))
	for _, e := range es {
		// An idle VM costs an atomic load a channel, not a read of its
		// counters (the journal commits every few milliseconds).
		g := e.vm.UsageGen()
		if g == e.jgen {
			continue
		}
		d, ok := since(e.counted(), e.journaled)
		if !ok {
			e.jgen = g
			continue
		}
		gens = append(gens, g)
		ds = append(ds, usage.Delta{Name: e.req.Name, Since: e.base.Since, Usage: d})
		moved = append(moved, e)
	}
	jr.disk.RLock()
	err := jr.j.Write(ds)
	jr.disk.RUnlock()
	if err == nil {
		for i, e := range moved {
			e.journaled, e.jgen = e.journaled.Add(ds[i].Usage), gens[i]
			jr.ledger.Apply(ds[i])
		}
	}
	jr.mu.Unlock()
	switch {
	case err != nil || len(ds) == 0:
		return 0, err
	case durable:
		return len(ds), jr.j.Sync()
	}
	select {
	case jr.kick <- struct{}{}:
	default: // a sync is due already and covers this write
	}
	return len(ds), nil
}

// maybeRotate folds the journal into the ledger when due: it switches the
// journal's segment, flushes a snapshot of the ledger (which holds every
// record of the segment left) and then empties that segment. Writes go on
// into the other segment meanwhile. Called by run alone.
func (jr *journaler) maybeRotate() error {
	jr.mu.Lock()
	if time.Since(jr.rotated) < jr.rotate || jr.j.ActiveEmpty() {
		jr.mu.Unlock()
		return nil
	}
	old := jr.j.Switch()
	snap := jr.ledger.Snapshot()
	jr.rotated = time.Now()
	jr.mu.Unlock()
	if err := jr.change(snap.Write); err != nil {
		return err // the segment keeps its records, which the next start skips or folds
	}
	return jr.change(old.Reset)
}

// change makes one change to the usage files under disk.
func (jr *journaler) change(f func() error) error {
	jr.disk.RLock()
	defer jr.disk.RUnlock()
	return f()
}

// close stops the goroutines; the last commits are Close's.
func (jr *journaler) close() {
	jr.stop()
	jr.wg.Wait()
}

// finish settles the ledger on es's final counts and flushes it, then
// empties the journal: a clean stop leaves the ledger whole, also when the
// journal had failed.
func (jr *journaler) finish(es []*entry) error {
	jr.mu.Lock()
	defer jr.mu.Unlock()
	for _, e := range es {
		jr.ledger.Settle(e.req.Name, e.usage(), jr.j.Next()-1)
	}
	err := jr.change(jr.ledger.Flush)
	if err == nil {
		err = errors.Join(jr.change(jr.j.Switch().Reset), jr.change(jr.j.Switch().Reset))
	}
	return errors.Join(err, jr.j.Close())
}

// counted is what this endpoint's channels counted (the ledger's base
// excluded).
func (e *entry) counted() usage.Record {
	t := e.vm.Stats().Total
	return usage.Record{GPUNs: t.BusyNs, Kernels: t.Kernels, Commands: t.Commands, Errors: t.Errors}
}

// since is c minus the counts already journaled, and whether any moved.
// Counters only grow; one that went back would be a bug in the channels,
// and journals nothing rather than wrapping around.
func since(c, journaled usage.Record) (usage.Record, bool) {
	sub := func(a, b uint64) uint64 {
		if a < b {
			return 0
		}
		return a - b
	}
	d := usage.Record{GPUNs: sub(c.GPUNs, journaled.GPUNs), Kernels: sub(c.Kernels, journaled.Kernels),
		Commands: sub(c.Commands, journaled.Commands), Errors: sub(c.Errors, journaled.Errors)}
	return d, d != usage.Record{}
}

// CommittedUsage is a VM's usage as far as a crash cannot take it back:
// what the journal holds (without a journal, the ledger as last flushed).
// Usage counts completions up to now, and a kill -9 may lose the last
// interval of them; a reader that passes usage on and must never see it
// go back (the fleet agent) reads this.
func (d *Daemon) CommittedUsage(_ context.Context, name string) (hostapi.Usage, error) {
	r, ok := d.ledger.Get(name)
	if !ok {
		return hostapi.Usage{}, fmt.Errorf("vm %q: %w", name, hostapi.ErrNotFound)
	}
	return toUsage(name, r), nil
}

// tryEntries lists the VMs unless the daemon's lock is taken; seen is the
// VM set's generation the caller's list is of, and ok false when that list
// serves (the set has not moved, or the lock is taken).
func (d *Daemon) tryEntries(seen uint64) (es []*entry, gen uint64, ok bool) {
	gen = d.vmsGen.Load()
	if gen == seen && gen != 0 || !d.mu.TryLock() {
		return nil, seen, false
	}
	defer d.mu.Unlock()
	gen = d.vmsGen.Load() // under the lock: the list is of this one
	return d.sortedLocked(), gen, true
}
