package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/guest-agent/workload"
	"github.com/sluice-gpu/sluice/mediator/internal/usage"
)

// crashCopy copies the regular files of a running daemon's state dir: what
// a kill -9 at this moment would leave on disk (written data survives a
// killed process, synced or not). A crash leaves the files as they are at
// one instant, while a copy takes time: the daemon's journal is paused
// between two of its changes to them while the copy is taken (a rotation
// flushes the ledger, then resets a segment, while a file-by-file copy
// could read the segment after the reset and the ledger before the flush,
// or miss a ledger created since it listed the directory). The copy may
// fall between any two changes, a rotation's flush and reset included.
func crashCopy(t *testing.T, d *Daemon) string {
	t.Helper()
	if d.journal != nil {
		d.journal.disk.Lock()
		defer d.journal.disk.Unlock()
	}
	return copyFiles(t, d.cfg.StateDir)
}

// copyFiles copies the regular files of dir into a new temporary
// directory.
func copyFiles(t *testing.T, state string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(state)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(state, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // a ledger's temporary file, renamed meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// committed waits until the journal holds everything the VM's channels
// counted.
func committed(t *testing.T, d *Daemon, name string) {
	t.Helper()
	waitFor(t, func() bool {
		d.mu.Lock()
		e := d.vms[name]
		d.mu.Unlock()
		d.journal.mu.Lock()
		defer d.journal.mu.Unlock()
		return e.journaled == e.counted()
	})
}

func usageOf(t *testing.T, d *Daemon, name string) hostapi.Usage {
	t.Helper()
	u, err := d.Usage(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// A daemon killed after its journal's commit bills everything on the next
// start, and once only through any number of starts and stops.
func TestJournalSurvivesACrash(t *testing.T) {
	state := t.TempDir()
	d := newDaemon(t, "virtual", state)
	d.journal.mu.Lock()
	d.journal.rotate = time.Hour // the run stays in the journal
	d.journal.mu.Unlock()
	ch := channel(t, guest(t, createVM(t, d, "a")), 0)
	if _, err := workload.Throttle(context.Background(), ch, workload.ThrottleConfig{Kernel: 100 * time.Microsecond, Kernels: 50}); err != nil {
		t.Fatal(err)
	}
	committed(t, d, "a")
	live := usageOf(t, d, "a")
	if live.Kernels != 50 || live.GPUNs != 50*100_000 {
		t.Fatalf("live usage %+v", live)
	}
	if c, err := d.CommittedUsage(context.Background(), "a"); err != nil || c != live {
		t.Fatalf("committed usage %+v, %v; want %+v", c, err, live)
	}
	crashed := crashCopy(t, d)
	if l, err := usage.Open(filepath.Join(crashed, ledgerFile)); err != nil || l.Seq() != 0 {
		t.Fatalf("the ledger on disk holds journal records (seq %d, %v): the test would prove nothing", l.Seq(), err)
	}
	d.Close()

	for i := range 3 { // a start after the crash, then clean stops and starts
		d2 := newDaemon(t, "virtual", crashed)
		if got := usageOf(t, d2, "a"); got != live {
			t.Fatalf("start %d after the crash: %+v, want %+v", i, got, live)
		}
		if err := d2.Close(); err != nil {
			t.Fatal(err)
		}
		for _, p := range usage.SegmentPaths(filepath.Join(crashed, journalBase)) {
			j, err := os.ReadFile(p)
			if err != nil || string(j) != usage.JournalMagic {
				t.Fatalf("after a clean stop %s is %q, %v; want it empty", p, j, err)
			}
		}
	}
}

// Deleting a VM commits its last usage before its name can be used again.
func TestJournalDeleteThenCreate(t *testing.T) {
	state := t.TempDir()
	d := newDaemon(t, "virtual", state)
	ctx := context.Background()
	ch := channel(t, guest(t, createVM(t, d, "a")), 0)
	if _, err := workload.Throttle(ctx, ch, workload.ThrottleConfig{Kernel: 100 * time.Microsecond, Kernels: 20}); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteVM(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	ch = channel(t, guest(t, createVM(t, d, "a")), 0)
	if _, err := workload.Throttle(ctx, ch, workload.ThrottleConfig{Kernel: 100 * time.Microsecond, Kernels: 5}); err != nil {
		t.Fatal(err)
	}
	committed(t, d, "a")
	d2 := newDaemon(t, "virtual", crashCopy(t, d))
	if u := usageOf(t, d2, "a"); u.Kernels != 25 || u.GPUNs != 25*100_000 {
		t.Fatalf("after delete, create and a crash: %+v", u)
	}
}

// With the journal off, one left by an earlier run is folded in and
// removed, and the ledger is flushed by Heartbeat as before.
func TestJournalOff(t *testing.T) {
	state := t.TempDir()
	d := newDaemon(t, "virtual", state)
	ch := channel(t, guest(t, createVM(t, d, "a")), 0)
	if _, err := workload.Throttle(context.Background(), ch, workload.ThrottleConfig{Kernel: 100 * time.Microsecond, Kernels: 10}); err != nil {
		t.Fatal(err)
	}
	committed(t, d, "a")
	crashed := crashCopy(t, d)

	cfg := DefaultConfig()
	cfg.Socket = filepath.Join(t.TempDir(), "sluiced.sock")
	cfg.StateDir = crashed
	cfg.Clock = "virtual"
	cfg.Proxy.Binary = "off"
	cfg.JournalInterval = 0
	d2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if u := usageOf(t, d2, "a"); u.Kernels != 10 {
		t.Fatalf("journal of the last run not folded: %+v", u)
	}
	for _, p := range usage.SegmentPaths(filepath.Join(crashed, journalBase)) {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("journal %s still there with the journal off: %v", p, err)
		}
	}
	ch2 := channel(t, guest(t, mustGetVM(t, d2, "a")), 0)
	if _, err := workload.Throttle(context.Background(), ch2, workload.ThrottleConfig{Kernel: 100 * time.Microsecond, Kernels: 3}); err != nil {
		t.Fatal(err)
	}
	if err := d2.Heartbeat(); err != nil {
		t.Fatal(err)
	}
	l, err := usage.Open(filepath.Join(crashed, ledgerFile))
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := l.Get("a"); r.Kernels != 13 {
		t.Fatalf("ledger after a heartbeat: %+v", r)
	}
}

func mustGetVM(t *testing.T, d *Daemon, name string) hostapi.VM {
	t.Helper()
	v, err := d.GetVM(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestJournalIntervalValidated(t *testing.T) {
	for _, iv := range []time.Duration{-time.Millisecond, 2 * time.Second} {
		cfg := DefaultConfig()
		cfg.Proxy.Binary = "off"
		cfg.JournalInterval = iv
		if err := cfg.Validate(); err == nil {
			t.Fatalf("journal interval %v accepted", iv)
		}
	}
}

// Rotations at every commit while a guest runs: a crash at any moment
// finds on disk whole kernels, never more than were counted, and after the
// last commit exactly the count.
func TestJournalRotatingUnderLoad(t *testing.T) {
	state := t.TempDir()
	d := newDaemon(t, "wall", state)
	d.journal.mu.Lock()
	d.journal.rotate = 0
	d.journal.mu.Unlock()
	ch := channel(t, guest(t, createVM(t, d, "a")), 0)
	const kernel = 50 * time.Microsecond
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := workload.Throttle(ctx, ch, workload.ThrottleConfig{Kernel: kernel, Kernels: 4000, Depth: 1})
		done <- err
	})
	t.Cleanup(func() { cancel(); wg.Wait() }) // before the guest's region goes
	recovered := func() usage.Record {
		dir := crashCopy(t, d)
		l, _, err := usage.Recover(filepath.Join(dir, ledgerFile), filepath.Join(dir, journalBase))
		if err != nil {
			t.Fatal(err)
		}
		r, _ := l.Get("a")
		return r
	}
	copies := 0
	for running := true; running; copies++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		default:
		}
		committed, err := d.CommittedUsage(context.Background(), "a")
		if err != nil {
			t.Fatal(err)
		}
		r := recovered()
		live := usageOf(t, d, "a")
		if r.Kernels < committed.Kernels {
			t.Fatalf("copy %d: on disk %+v, committed before %+v", copies, r, committed)
		}
		if r.GPUNs != r.Kernels*uint64(kernel) || r.Kernels > live.Kernels {
			t.Fatalf("copy %d: on disk %+v, counted %+v", copies, r, live)
		}
		time.Sleep(time.Millisecond)
	}
	committed(t, d, "a")
	if r, live := recovered(), usageOf(t, d, "a"); r.Kernels != live.Kernels || live.Kernels != 4000 {
		t.Fatalf("after the last commit: on disk %+v, counted %+v", r, live)
	}
	t.Logf("%d crash copies", copies)
}

// A journal torn or overwritten with garbage does not keep the daemon from
// starting: its valid records count, the rest is dropped.
func TestJournalGarbageNotFatal(t *testing.T) {
	state := t.TempDir()
	d := newDaemon(t, "virtual", state)
	d.journal.mu.Lock()
	d.journal.rotate = time.Hour
	d.journal.mu.Unlock()
	ch := channel(t, guest(t, createVM(t, d, "a")), 0)
	if _, err := workload.Throttle(context.Background(), ch, workload.ThrottleConfig{Kernel: 100 * time.Microsecond, Kernels: 7}); err != nil {
		t.Fatal(err)
	}
	committed(t, d, "a")
	crashed := crashCopy(t, d)
	seg := usage.SegmentPaths(filepath.Join(crashed, journalBase))
	f, err := os.OpenFile(seg[0], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("\xde\xad\xbe\xef garbage after the records"))
	f.Close()
	if err := os.WriteFile(seg[1], []byte("not a journal"), 0o600); err != nil {
		t.Fatal(err)
	}
	d2 := newDaemon(t, "virtual", crashed)
	if u := usageOf(t, d2, "a"); u.Kernels != 7 {
		t.Fatalf("after a garbage tail: %+v", u)
	}
}

// An idle daemon's journal stops ticking and sleeps, and the next
// completion wakes it: that completion is committed within an interval or
// so, as a tick would have.
func TestJournalSleepsWhenIdle(t *testing.T) {
	d := newDaemon(t, "wall", t.TempDir())
	ch := channel(t, guest(t, createVM(t, d, "a")), 0)
	waitFor(t, func() bool { return d.journal.sleeping.Load() })
	start := time.Now()
	if _, err := workload.Throttle(context.Background(), ch, workload.ThrottleConfig{Kernel: 100 * time.Microsecond, Kernels: 1}); err != nil {
		t.Fatal(err)
	}
	committed(t, d, "a")
	if d.journal.sleeping.Load() {
		t.Fatal("the journal slept through a completion")
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the completion took %v to reach the journal", took)
	}
	// Idle again: back to sleep.
	waitFor(t, func() bool { return d.journal.sleeping.Load() })
}
