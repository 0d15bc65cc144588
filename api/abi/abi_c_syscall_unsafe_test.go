//go:build linux

package abi

import (
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// TestCSyscallProtocol runs include/sluice_syscall.h's CPU side against a
// host written here from the ABI's description (syscall.go): a C program
// (testdata/syscall_guest.c) whose threads make calls on shared slots of a
// file both map, while the test scans the slots, takes READY ones by
// compare-and-swap, answers the blocking ones out of order and frees the
// non-blocking ones. Every call must reach the host once, with its own
// arguments, and every blocking call must get its own answer; each slot's
// sequence number must advance by one per call, across the 24-bit wrap.
func TestCSyscallProtocol(t *testing.T) {
	inc, err := filepath.Abs("include")
	if err != nil {
		t.Fatal(err)
	}
	src, err := filepath.Abs("testdata/syscall_guest.c")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		compiler string
		args     []string
	}{
		{"gcc", append([]string{"-std=c99"}, strictC...)},
		{"gcc", append([]string{"-std=c11"}, strictC...)},
		{"g++", []string{"-std=c++17", "-Wall", "-Wextra", "-Werror", "-x", "c++"}},
		{"clang", append([]string{"-std=c11"}, strictC...)},
	} {
		t.Run(tc.compiler+tc.args[0], func(t *testing.T) {
			cc := requireTool(t, tc.compiler)
			bin := filepath.Join(t.TempDir(), "syscall_guest")
			compile(t, cc, append(tc.args, "-O2", "-pthread", "-I", inc, "-o", bin, src)...)
			runSyscallGuest(t, bin, 8, 200, 4, guestShared)
			runSyscallGuest(t, bin, 4, 200, 4, guestOwned)
			runSyscallGuest(t, bin, 4, 200, 4, guestRing)
		})
	}
}

// How the guest's threads call: sharing slots, each owning one, or each
// owning one and calling through the request ring.
const (
	guestShared = iota
	guestOwned
	guestRing
)

// guestSlots is the syscall area a guest program maps: the ready map page,
// then the slots (and with ring, the request ring of total entries); the
// guest uses the first used of them, the rest must stay untouched.
type guestSlots struct {
	mem     []byte
	used    int
	total   int        // the area's slots (the ring's length)
	ring    bool       // the guest calls through the request ring
	head    uint64     // the ring's next position
	seen    []hostCall // every call the host took
	initSeq []uint32
	nextSeq []uint32 // the sequence number each slot's next call must carry
	calls   []int    // calls per slot
}

func (g *guestSlots) state(i int) *uint32 {
	return (*uint32)(unsafe.Pointer(&g.mem[SlotOff(uint32(i))+SysState]))
}

// call is what the host saw of one call.
type hostCall struct {
	slot int
	s    Slot
}

func runSyscallGuest(t *testing.T, bin string, threads, calls, slots, mode int) {
	const spare = 2 // slots past the guest's, which must stay zero
	f, err := os.Create(filepath.Join(t.TempDir(), "syscall-area"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size := int(SyscallAreaSize(slots + spare))
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)
	g := &guestSlots{mem: mem, used: slots, total: slots + spare, ring: mode == guestRing, initSeq: make([]uint32, slots), nextSeq: make([]uint32, slots), calls: make([]int, slots)}
	for i := range slots {
		// Slot 1 wraps its 24-bit sequence number during the run.
		g.initSeq[i] = uint32(100 * i)
		if i == 1 {
			g.initSeq[i] = SlotSeqMask - 7
		}
		g.nextSeq[i] = g.initSeq[i]
		atomic.StoreUint32(g.state(i), SlotWord(SlotFree, g.initSeq[i]))
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	args := []string{f.Name(), itoa(uint64(threads)), itoa(uint64(calls)), itoa(uint64(slots))}
	switch mode {
	case guestOwned:
		args = append(args, "1")
	case guestRing:
		args = append(args, "2", itoa(uint64(slots+spare)))
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	seen, waitErr := g.serve(t, exited)
	if waitErr != nil || strings.TrimSpace(out.String()) != "0 bad" {
		t.Fatalf("guest: %v\n%s", waitErr, out.String())
	}

	// Every call once, with its own arguments; a quarter non-blocking.
	if want := threads*calls + 1; len(seen) != want {
		t.Errorf("host saw %d calls, want %d", len(seen), want)
	}
	type key struct{ thread, call uint64 }
	got := make(map[key]bool)
	nonBlocking := 0
	for _, c := range seen {
		th, i := c.s.Args[0], c.s.Args[1]
		if th == 999 { // the guest's last call, on slot 0
			if c.slot != 0 || !c.s.Blocking() {
				t.Errorf("last call: %v on slot %d", c.s, c.slot)
			}
			continue
		}
		k := key{th, i}
		if got[k] {
			t.Errorf("thread %d call %d reached the host twice", th, i)
		}
		got[k] = true
		switch {
		case c.slot != int(th)%slots:
			t.Errorf("thread %d call %d on slot %d, want %d", th, i, c.slot, int(th)%slots)
		case c.s.Blocking() != (i%4 != 3):
			t.Errorf("thread %d call %d: blocking %v", th, i, c.s.Blocking())
		case c.s.Context != uint8(th%3) || (mode != guestRing && c.s.Cookie != th<<32|i) || c.s.Args[5] != 0xa5a5a5a5a5a5a5a5:
			t.Errorf("thread %d call %d: %v cookie %#x args %x", th, i, c.s, c.s.Cookie, c.s.Args)
		}
		if !c.s.Blocking() {
			nonBlocking++
		}
	}
	if want := threads * (calls / 4); nonBlocking != want {
		t.Errorf("%d non-blocking calls, want %d", nonBlocking, want)
	}
	// Owned callers set their slots' ready hints (this host never clears
	// them); nothing else does (ring callers need none).
	if mode == guestRing && g.head != uint64(threads*calls) {
		t.Errorf("%d calls through the ring, want %d", g.head, threads*calls)
	}
	for i := range slots + spare {
		if set := mem[SyscallReadyMapOff+i] != 0; set != (mode == guestOwned && i < threads) {
			t.Errorf("ready hint of slot %d: %v", i, set)
		}
	}
	// Each slot ends FREE, its sequence advanced once per call.
	for i := range slots + spare {
		w := atomic.LoadUint32(g.state(i))
		if i >= slots {
			if w != 0 {
				t.Errorf("slot %d (not the guest's) has state word %#x", i, w)
			}
			continue
		}
		want := SlotWord(SlotFree, (g.initSeq[i]+uint32(g.calls[i]))&SlotSeqMask)
		if w != want {
			st, seq := SplitSlotWord(w)
			t.Errorf("slot %d ends %v seq %d after %d calls from seq %d", i, st, seq, g.calls[i], g.initSeq[i])
		}
	}
}

// serve plays the host until the guest has exited and no slot is READY,
// and returns the calls it took and the guest's exit.
func (g *guestSlots) serve(t *testing.T, exited <-chan error) ([]hostCall, error) {
	t.Helper()
	var (
		waitErr error
		done    bool
	)
	le := binary.LittleEndian
	for {
		taken := g.drainRing(t)
		for i := range g.used {
			w := atomic.LoadUint32(g.state(i))
			if st, _ := SplitSlotWord(w); st != SlotReady {
				continue
			}
			// Copy, validate, then take: what the guest writes later is
			// not the call.
			var b [SyscallSlotSize]byte
			copy(b[:], g.mem[SlotOff(uint32(i)):])
			s, errno := DecodeSlot(b[:])
			if errno != 0 || s.Number != SysNull || SlotWord(SlotReady, s.Seq) != w {
				t.Fatalf("slot %d: %v (errno %d, word %#x)", i, s, errno, w)
			}
			if s.Seq != g.nextSeq[i] {
				t.Fatalf("slot %d: call with seq %d, want %d", i, s.Seq, g.nextSeq[i])
			}
			g.nextSeq[i] = NextSeq(s.Seq)
			g.calls[i]++
			g.seen = append(g.seen, hostCall{i, s})
			next := SlotWord(SlotProcessing, s.Seq)
			if !s.Blocking() {
				next = SlotWord(SlotFree, NextSeq(s.Seq))
			}
			if !atomic.CompareAndSwapUint32(g.state(i), w, next) {
				t.Fatalf("slot %d changed under the host after READY", i)
			}
			if s.Blocking() {
				taken = append(taken, hostCall{i, s})
			}
		}
		// Answer the scan's calls last first: results must not depend on
		// the order calls end in.
		for j := len(taken) - 1; j >= 0; j-- {
			c := taken[j]
			off := SlotOff(uint32(c.slot))
			le.PutUint64(g.mem[off+SysRet:], c.s.Args[0]*1000000+c.s.Args[1])
			le.PutUint64(g.mem[off+SysErrno:], c.s.Args[2])
			// FINISHED|s and the errno (SysFinErrno) in one store.
			w := g.word64(c.slot)
			if uint32(w) != SlotWord(SlotProcessing, c.s.Seq) ||
				!atomic.CompareAndSwapUint64(g.word64p(c.slot), w, uint64(SlotWord(SlotFinished, c.s.Seq))|c.s.Args[2]<<32) {
				t.Fatalf("slot %d changed under the host while PROCESSING", c.slot)
			}
		}
		if len(taken) > 0 {
			continue
		}
		if done && !g.anyReady() {
			return g.seen, waitErr
		}
		select {
		case waitErr = <-exited:
			done = true
		default:
			runtime.Gosched()
		}
	}
}

// word64p points at slot i's bytes 0..7: the state word and SysFinErrno.
func (g *guestSlots) word64p(i int) *uint64 {
	return (*uint64)(unsafe.Pointer(&g.mem[SlotOff(uint32(i))+SysState]))
}

func (g *guestSlots) word64(i int) uint64 { return atomic.LoadUint64(g.word64p(i)) }

// drainRing takes the request ring's entries from the head, in order, as
// the host does (copy, validate, serve as taken from the slot each names),
// and returns the blocking ones to answer; a non-blocking call's slot is
// freed at once.
func (g *guestSlots) drainRing(t *testing.T) []hostCall {
	t.Helper()
	var taken []hostCall
	for g.ring {
		off := RingEntryOff(g.total, g.head)
		if atomic.LoadUint32((*uint32)(unsafe.Pointer(&g.mem[off]))) != uint32(g.head+1) {
			return taken
		}
		var b [SyscallRingEntrySize]byte
		copy(b[:], g.mem[off:])
		e, errno := DecodeRingEntry(b[:], uint32(g.total))
		i := int(e.Slot)
		if errno != 0 || e.Tag != uint32(g.head+1) || i >= g.used || e.Call.Number != SysNull {
			t.Fatalf("ring position %d: %+v (errno %d)", g.head, e, errno)
		}
		g.head++
		s := e.Call
		if s.Seq != g.nextSeq[i] {
			t.Fatalf("slot %d: ring call with seq %d, want %d", i, s.Seq, g.nextSeq[i])
		}
		if w := g.word64(i); w != uint64(SlotWord(SlotProcessing, s.Seq))|uint64(CallWord(&s))<<32 {
			t.Fatalf("slot %d of a ring call: %#x, want PROCESSING|%d and the call word", i, w, s.Seq)
		}
		g.nextSeq[i] = NextSeq(s.Seq)
		g.calls[i]++
		g.seen = append(g.seen, hostCall{i, s})
		if s.Blocking() {
			taken = append(taken, hostCall{i, s})
		} else if !atomic.CompareAndSwapUint32(g.state(i), SlotWord(SlotProcessing, s.Seq), SlotWord(SlotFree, NextSeq(s.Seq))) {
			t.Fatalf("slot %d changed under the host while its ring call was read", i)
		}
	}
	return taken
}

func (g *guestSlots) anyReady() bool {
	if g.ring && atomic.LoadUint32((*uint32)(unsafe.Pointer(&g.mem[RingEntryOff(g.total, g.head)]))) == uint32(g.head+1) {
		return true
	}
	for i := range g.used {
		if st, _ := SplitSlotWord(atomic.LoadUint32(g.state(i))); st == SlotReady {
			return true
		}
	}
	return false
}
