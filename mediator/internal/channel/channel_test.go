package channel

import (
	"sync"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
)

// fakeGPU queues what it is given; the test completes commands explicitly.
type fakeGPU struct {
	mu     sync.Mutex
	queue  []submitted
	refuse error
}

type submitted struct {
	ch  int
	cmd abi.Command
	tag uint64
}

func (f *fakeGPU) Submit(ch int, cmd abi.Command, tag uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse != nil {
		return f.refuse
	}
	f.queue = append(f.queue, submitted{ch, cmd, tag})
	return nil
}

func (f *fakeGPU) take() []submitted {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queue
	f.queue = nil
	return q
}

type rig struct {
	t      *testing.T
	region *shm.Region
	layout abi.Layout
	gpu    *fakeGPU
	ch     *Channel
	put    uint32
}

func newRig(t *testing.T) *rig {
	t.Helper()
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: 1 << 20, Channels: 2, RingEntries: 8, SyscallSlots: 64})
	if err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, l.RegionSize+8)
	r := &rig{t: t, region: shm.New(mem[:l.RegionSize]), layout: l, gpu: &fakeGPU{}}
	r.ch = New(1, r.region, l, abi.DefaultLimits(), r.gpu)
	return r
}

func (r *rig) write(cmds ...abi.Command) {
	for _, c := range cmds {
		rec := abi.EncodeCommand(c)
		r.writeRaw(rec)
	}
}

func (r *rig) writeRaw(rec abi.Record) {
	r.region.CopyIn(r.layout.RecordOff(1, r.put), rec[:])
	r.put++
	r.region.Store32(r.layout.ChannelOff(1)+abi.ChPut, r.put)
}

func (r *rig) completeAll(code abi.ErrorCode) {
	for _, s := range r.gpu.take() {
		r.ch.Complete(Completion{Index: uint32(s.tag), Op: s.cmd.Op, Code: code, BusyNs: int64(s.cmd.DurationNs)})
	}
}

func (r *rig) host32(field uint64) uint32 { return r.region.Load32(r.layout.ChannelOff(1) + field) }

func throttle(ns uint64) abi.Command { return abi.Command{Op: abi.OpThrottle, DurationNs: ns} }

func TestForwardAndComplete(t *testing.T) {
	r := newRig(t)
	r.write(throttle(100), throttle(200), abi.Command{Op: abi.OpFence, Value: 42})
	r.ch.Poll()
	got := r.gpu.take()
	if len(got) != 3 || got[0].cmd.DurationNs != 100 || got[1].tag != 1 || got[2].cmd.Op != abi.OpFence || got[0].ch != 1 {
		t.Fatalf("forwarded %+v", got)
	}
	if r.host32(abi.ChGet) != 0 || abi.ChannelState(r.host32(abi.ChState)) != abi.ChannelBusy {
		t.Fatalf("get %d state %d before completion", r.host32(abi.ChGet), r.host32(abi.ChState))
	}
	for _, s := range got {
		r.ch.Complete(Completion{Index: uint32(s.tag), Op: s.cmd.Op, BusyNs: int64(s.cmd.DurationNs)})
	}
	if g := r.host32(abi.ChGet); g != 3 {
		t.Fatalf("get = %d, want 3", g)
	}
	if f := r.region.Load64(r.layout.ChannelOff(1) + abi.ChFence); f != 42 {
		t.Fatalf("fence = %d, want 42", f)
	}
	s := r.ch.Snapshot()
	if s.Kernels != 2 || s.Commands != 3 || s.BusyNs != 300 || s.Errors != 0 || s.State != abi.ChannelIdle {
		t.Fatalf("snapshot %+v", s)
	}
	// A second doorbell with nothing new forwards nothing.
	r.ch.Poll()
	if q := r.gpu.take(); len(q) != 0 {
		t.Fatalf("re-forwarded %v", q)
	}
}

func TestMalformedRecords(t *testing.T) {
	bad := func(mutate func(*abi.Record)) abi.Record {
		rec := abi.EncodeCommand(throttle(1))
		mutate(&rec)
		return rec
	}
	tests := []struct {
		name string
		rec  abi.Record
		want abi.ErrorCode
	}{
		{"zero record", abi.Record{}, abi.ErrBadOpcode},
		{"unknown opcode", bad(func(r *abi.Record) { r[0] = 0xee }), abi.ErrBadOpcode},
		{"reserved byte", bad(func(r *abi.Record) { r[63] = 1 }), abi.ErrBadRecord},
		{"throttle too long", abi.EncodeCommand(throttle(1 << 62)), abi.ErrTooLong},
		{"copy past heap", abi.EncodeCommand(abi.Command{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyHostToDevice, HeapOff: 1 << 40, Length: 8}), abi.ErrHeapRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			r.write(throttle(10))
			r.writeRaw(tt.rec)
			r.write(throttle(20)) // after the bad record: never forwarded
			r.ch.Poll()
			q := r.gpu.take()
			if len(q) != 1 || q[0].cmd.DurationNs != 10 {
				t.Fatalf("forwarded %+v, want only the record before the bad one", q)
			}
			if code := abi.ErrorCode(r.host32(abi.ChError)); code != tt.want {
				t.Fatalf("error %v, want %v", code, tt.want)
			}
			if idx := r.host32(abi.ChErrorIndex); idx != 1 {
				t.Fatalf("error index %d, want 1", idx)
			}
			// get steps over the bad record once the good one completes.
			r.ch.Complete(Completion{Index: 0, Op: abi.OpThrottle, BusyNs: 10})
			if g := r.host32(abi.ChGet); g != 2 {
				t.Fatalf("get %d, want 2", g)
			}
			if s := r.ch.Snapshot(); s.State != abi.ChannelFailed || s.Errors != 1 || s.Kernels != 1 {
				t.Fatalf("snapshot %+v", s)
			}
			// Reset: drop the unforwarded record, clear the error, go on.
			r.region.Store32(r.layout.ChannelOff(1)+abi.ChReset, 1)
			r.ch.Poll()
			if r.host32(abi.ChResetAck) != 1 || r.host32(abi.ChError) != 0 || r.host32(abi.ChGet) != 3 {
				t.Fatalf("after reset: ack %d error %d get %d", r.host32(abi.ChResetAck), r.host32(abi.ChError), r.host32(abi.ChGet))
			}
			r.write(throttle(30))
			r.ch.Poll()
			if q := r.gpu.take(); len(q) != 1 || q[0].cmd.DurationNs != 30 || q[0].tag != 3 {
				t.Fatalf("after reset forwarded %+v", q)
			}
		})
	}
}

func TestPutOutOfRange(t *testing.T) {
	for _, put := range []uint32{9, 1 << 31, ^uint32(0)} {
		r := newRig(t)
		r.region.Store32(r.layout.ChannelOff(1)+abi.ChPut, put)
		r.ch.Poll()
		if q := r.gpu.take(); len(q) != 0 {
			t.Fatalf("put %d: forwarded %d records", put, len(q))
		}
		if code := abi.ErrorCode(r.host32(abi.ChError)); code != abi.ErrRingOverflow {
			t.Fatalf("put %d: error %v", put, code)
		}
		if g := r.host32(abi.ChGet); g != 0 {
			t.Fatalf("put %d: get moved to %d", put, g)
		}
	}
}

func TestRingWrapsAndBackendErrors(t *testing.T) {
	r := newRig(t)
	for round := range 5 { // 5 rounds of 6 records on an 8-entry ring wrap it
		for range 6 {
			r.write(throttle(uint64(round + 1)))
		}
		r.ch.Poll()
		r.completeAll(abi.OK)
	}
	if g := r.host32(abi.ChGet); g != 30 {
		t.Fatalf("get %d, want 30", g)
	}
	r.write(throttle(1), throttle(2))
	r.ch.Poll()
	q := r.gpu.take()
	r.ch.Complete(Completion{Index: uint32(q[0].tag), Op: abi.OpThrottle, Code: abi.ErrDevice})
	r.ch.Complete(Completion{Index: uint32(q[1].tag), Op: abi.OpThrottle, BusyNs: 2})
	if code, idx := abi.ErrorCode(r.host32(abi.ChError)), r.host32(abi.ChErrorIndex); code != abi.ErrDevice || idx != 30 {
		t.Fatalf("error %v at %d", code, idx)
	}
	if g := r.host32(abi.ChGet); g != 32 {
		t.Fatalf("get %d, want 32: in-flight records still complete", g)
	}
}

func TestRefusedSubmit(t *testing.T) {
	r := newRig(t)
	r.gpu.refuse = abi.ErrShutdown
	r.write(throttle(1), throttle(2))
	r.ch.Poll()
	if code := abi.ErrorCode(r.host32(abi.ChError)); code != abi.ErrShutdown {
		t.Fatalf("error %v", code)
	}
	if g := r.host32(abi.ChGet); g != 1 {
		t.Fatalf("get %d, want 1 (stepped over the refused record)", g)
	}
}

func TestHeldChannelForwardsNothing(t *testing.T) {
	r := newRig(t)
	r.ch.SetHeld(true)
	r.write(throttle(1))
	r.ch.Poll()
	if q := r.gpu.take(); len(q) != 0 {
		t.Fatalf("held channel forwarded %v", q)
	}
	if abi.ChannelState(r.host32(abi.ChState)) != abi.ChannelHeld {
		t.Fatal("state not held")
	}
	if !r.ch.Pending() {
		t.Fatal("latched record not pending")
	}
	r.ch.SetHeld(false)
	r.ch.Poll()
	if q := r.gpu.take(); len(q) != 1 {
		t.Fatalf("released channel forwarded %d records, want 1", len(q))
	}
	if r.ch.Pending() {
		t.Fatal("forwarded record still pending")
	}
}

// refuseNth refuses the nth Submit (0-based) and queues the others.
type refuseNth struct {
	fakeGPU
	n, calls int
}

func (f *refuseNth) Submit(ch int, cmd abi.Command, tag uint64) error {
	f.calls++
	if f.calls-1 == f.n {
		return abi.ErrShutdown
	}
	return f.fakeGPU.Submit(ch, cmd, tag)
}

// A record refused by the backend before a record that failed validation
// in the same batch is the channel's failure, and get still reaches it.
func TestRefusedBeforeInvalidRecord(t *testing.T) {
	r := newRig(t)
	gpu := &refuseNth{n: 1}
	r.ch = New(1, r.region, r.layout, abi.DefaultLimits(), gpu)
	r.write(throttle(1), throttle(2), throttle(3))
	r.writeRaw(abi.Record{})
	r.ch.Poll()
	if code, idx := abi.ErrorCode(r.host32(abi.ChError)), r.host32(abi.ChErrorIndex); code != abi.ErrShutdown || idx != 1 {
		t.Fatalf("error %v at %d, want shutdown at 1", code, idx)
	}
	q := gpu.take()
	if len(q) != 1 {
		t.Fatalf("forwarded %d, want 1", len(q))
	}
	r.ch.Complete(Completion{Index: 0, Op: abi.OpThrottle, BusyNs: 1})
	if g := r.host32(abi.ChGet); g != 2 {
		t.Fatalf("get %d, want 2 (past the refused record)", g)
	}
}

// A reset requested while the channel is held is acknowledged at once.
func TestResetWhileHeld(t *testing.T) {
	r := newRig(t)
	r.writeRaw(abi.Record{})
	r.ch.Poll()
	r.ch.SetHeld(true)
	r.region.Store32(r.layout.ChannelOff(1)+abi.ChReset, 1)
	r.ch.Poll()
	if r.host32(abi.ChResetAck) != 1 || r.host32(abi.ChError) != 0 {
		t.Fatalf("ack %d error %d", r.host32(abi.ChResetAck), r.host32(abi.ChError))
	}
}

// A ring larger than one batch is forwarded completely by one doorbell.
func TestLargeRingForwardedInBatches(t *testing.T) {
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: 1 << 20, Channels: 2, RingEntries: 1024, SyscallSlots: 64})
	if err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, l.RegionSize)
	r := &rig{t: t, region: shm.New(mem), layout: l, gpu: &fakeGPU{}}
	r.ch = New(1, r.region, l, abi.DefaultLimits(), r.gpu)
	for i := range 1000 {
		r.write(throttle(uint64(i + 1)))
	}
	r.ch.Poll()
	q := r.gpu.take()
	if len(q) != 1000 || q[999].tag != 999 || q[999].cmd.DurationNs != 1000 {
		t.Fatalf("forwarded %d records", len(q))
	}
}

// FuzzChannel feeds arbitrary ring contents and put values to a channel: it
// must never panic, never forward an invalid command, and keep its published
// indices consistent.
func FuzzChannel(f *testing.F) {
	good := abi.EncodeCommand(throttle(5))
	f.Add(good[:], uint32(1), uint8(1))
	f.Add(make([]byte, 64*3), uint32(3), uint8(0))
	f.Add(good[:], uint32(1<<31), uint8(2))
	f.Fuzz(func(t *testing.T, ring []byte, put uint32, rounds uint8) {
		r := newRig(t)
		off := r.layout.RingOff(1)
		n := min(len(ring), int(r.layout.RingEntries)*abi.RecordSize)
		r.region.CopyIn(off, ring[:n])
		r.region.Store32(r.layout.ChannelOff(1)+abi.ChPut, put)
		for range int(rounds%4) + 1 {
			r.ch.Poll()
			for _, s := range r.gpu.take() {
				if !s.cmd.Op.Valid() {
					t.Fatalf("forwarded invalid op %v", s.cmd.Op)
				}
				r.ch.Complete(Completion{Index: uint32(s.tag), Op: s.cmd.Op})
			}
		}
		s := r.ch.Snapshot()
		if s.InFlight > r.layout.RingEntries {
			t.Fatalf("in flight %d > ring", s.InFlight)
		}
	})
}

func TestWindowBoundsForwardedRecords(t *testing.T) {
	r := newRig(t)
	r.ch.SetWindow(2)
	r.write(throttle(1), throttle(2), throttle(3), throttle(4), throttle(5))
	r.ch.Poll()
	got := r.gpu.take()
	if len(got) != 2 || got[0].tag != 0 || got[1].tag != 1 {
		t.Fatalf("forwarded %+v with a window of 2", got)
	}
	if s := r.ch.Snapshot(); s.InFlight != 2 || !r.ch.Pending() {
		t.Fatalf("in flight %d, pending %v", s.InFlight, r.ch.Pending())
	}
	// A completion makes room: the next record goes at once, from Complete.
	r.ch.Complete(Completion{Index: 0, Op: abi.OpThrottle, BusyNs: 1})
	if q := r.gpu.take(); len(q) != 1 || q[0].tag != 2 {
		t.Fatalf("after one completion forwarded %+v, want record 2", q)
	}
	// Held: completions make room but nothing goes until released.
	r.ch.SetHeld(true)
	r.ch.Complete(Completion{Index: 1, Op: abi.OpThrottle, BusyNs: 2})
	r.ch.Complete(Completion{Index: 2, Op: abi.OpThrottle, BusyNs: 3})
	if q := r.gpu.take(); len(q) != 0 {
		t.Fatalf("held channel forwarded %+v", q)
	}
	r.ch.SetHeld(false)
	r.ch.Poll()
	if q := r.gpu.take(); len(q) != 2 || q[0].tag != 3 || q[1].tag != 4 {
		t.Fatalf("after release forwarded %+v, want records 3 and 4", q)
	}
	// No bound again: everything new goes.
	r.ch.SetWindow(0)
	r.write(throttle(6), throttle(7), throttle(8))
	r.ch.Poll()
	if q := r.gpu.take(); len(q) != 3 {
		t.Fatalf("without a window forwarded %d of 3", len(q))
	}
}

// TestConcurrentDoorbellsLoseNothing: doorbells and completions from
// several goroutines while one of them forwards; every record is forwarded
// exactly once, in order.
func TestConcurrentDoorbellsLoseNothing(t *testing.T) {
	r := newRig(t)
	r.ch.SetWindow(3)
	const total = 2000
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() { // the "backend": completes whatever was forwarded
		defer wg.Done()
		next := uint64(0)
		for next < total {
			for _, s := range r.gpu.take() {
				if s.tag != next {
					t.Errorf("forwarded record %d, want %d", s.tag, next)
				}
				next++
				r.ch.Complete(Completion{Index: uint32(s.tag), Op: s.cmd.Op, BusyNs: 1})
			}
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	for sent := 0; sent < total; {
		// The guest writes as far as the ring has room.
		for r.put-r.host32(abi.ChGet) < r.layout.RingEntries && sent < total {
			r.write(throttle(1))
			sent++
		}
		var ring sync.WaitGroup
		for range 3 {
			ring.Add(1)
			go func() { defer ring.Done(); r.ch.Poll() }()
		}
		ring.Wait()
	}
	waitFor(t, func() bool { return r.host32(abi.ChGet) == total })
	close(done)
	wg.Wait()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(100 * time.Microsecond)
	}
}
