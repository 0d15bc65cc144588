package sim

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// runAll submits cmds on channel 0 one at a time, each run to its end,
// and fails the test unless each completes with its code.
func runAll(t *testing.T, s *Sim, v backend.VM, r *recorder, cmds []abi.Command, codes ...abi.ErrorCode) {
	t.Helper()
	n := len(r.all())
	for i, c := range cmds {
		submit(t, v, 0, c, uint64(n+i))
		run(t, s)
	}
	got := r.all()[n:]
	for i, c := range got {
		want := abi.OK
		if i < len(codes) {
			want = codes[i]
		}
		if c.Code != want {
			t.Errorf("command %d (%v): %v, want %v", i, c.Op, c.Code, want)
		}
	}
}

// keepState fills a VM with a buffer of every kind of page, a module and
// ring claims, keeps it and returns the kept state and the heap.
func keepState(t *testing.T) (backend.Kept, []byte) {
	t.Helper()
	s := manual(t, "memory", "16Mi")
	heap := make([]byte, 4<<10)
	for i := range 1000 {
		heap[i] = byte(i*7 + 1)
	}
	img := copy(heap[2048:], abi.SimModuleImage)
	v, r := attach(t, s, 1, 1, heap)
	runAll(t, s, v, r, []abi.Command{
		{Op: abi.OpAlloc, Handle: 5, Size: 3*pageSize + 100},                                         // data, fill, zeros and a short last page
		{Op: abi.OpCopy, Handle: 5, Dir: abi.CopyHostToDevice, Offset: 10, HeapOff: 0, Length: 1000}, // page 0: data
		{Op: abi.OpMemset, Handle: 5, Offset: pageSize, Length: pageSize, Value: 0xab},               // page 1: a fill page
		{Op: abi.OpCopy, Handle: 5, Dir: abi.CopyHostToDevice, Offset: 3 * pageSize, HeapOff: 0, Length: 100},
		{Op: abi.OpAlloc, Handle: 6, Size: 2 * pageSize},
		{Op: abi.OpCopy, Handle: 6, SrcHandle: 5, Dir: abi.CopyDeviceToDevice, Offset: 0, HeapOff: 0, Length: 2 * pageSize}, // shared pages
		{Op: abi.OpAlloc, Handle: 7, Size: 1},                                                                               // never written
		{Op: abi.OpLoadModule, Handle: 3, Format: abi.ModuleSim, HeapOff: 2048, Length: uint64(img)},
	})
	v.(*simVM).ringCtr.Store(77)
	k, err := v.(backend.Keeper).Keep()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, fd := range k.FDs {
			unix.Close(fd)
		}
	})
	if s.Stats().MemoryUsed != 0 {
		t.Errorf("the keeping sim still counts %d bytes", s.Stats().MemoryUsed)
	}
	return k, heap
}

// A VM kept and adopted by another sim has its buffers, with their
// contents, its module, its memory use and its ring's claim counter: its
// handles work and are in use, and its data reads back the same.
func TestKeepAdopt(t *testing.T) {
	k, heap := keepState(t)
	s := manual(t, "memory", "16Mi")
	r := newRecorder()
	v, err := s.Attach(backend.VMSpec{ID: 9, Channels: 1, Heap: heap, Complete: r.complete, Adopt: &k, RingHead: func() uint64 { return 50 }})
	if err != nil {
		t.Fatal(err)
	}
	want := uint64(3*pageSize + 100 + 2*pageSize + 1)
	if u := v.(backend.MemoryQuota).MemoryUsed(); u != want || s.Stats().MemoryUsed != want {
		t.Errorf("memory used %d (sim %d), want %d", u, s.Stats().MemoryUsed, want)
	}
	if c := v.(*simVM).ringCtr.Load(); c != 77 {
		t.Errorf("claim counter %d, want 77 (the kept one, beyond the head)", c)
	}
	out := make([]byte, len(heap))
	copy(out, heap)
	runAll(t, s, v, r, []abi.Command{
		{Op: abi.OpCopy, Handle: 5, Dir: abi.CopyDeviceToHost, Offset: 0, HeapOff: 1024, Length: 1024},
		{Op: abi.OpAlloc, Handle: 5, Size: 1},
		{Op: abi.OpLoadModule, Handle: 3, Format: abi.ModuleSim, HeapOff: 2048, Length: uint64(len(abi.SimModuleImage))},
		{Op: abi.OpFree, Handle: 7},
	}, abi.OK, abi.ErrBadHandle, abi.ErrBadHandle, abi.OK)
	wantHead := make([]byte, 1024)
	copy(wantHead[10:], out[:1000])
	if !bytes.Equal(heap[1024:2048], wantHead) {
		t.Errorf("buffer 5's first KiB after adoption differs")
	}
	check := func(h uint32, off uint64, want []byte) {
		t.Helper()
		got := make([]byte, len(want))
		v.(*simVM).bufs[h].read(off, got)
		if !bytes.Equal(got, want) {
			t.Errorf("buffer %d at %d: %x..., want %x...", h, off, got[:8], want[:8])
		}
	}
	check(5, pageSize, bytes.Repeat([]byte{0xab}, pageSize))
	check(5, 2*pageSize, make([]byte, pageSize))
	check(5, 3*pageSize, out[:100])
	check(6, pageSize, bytes.Repeat([]byte{0xab}, pageSize))
	check(6, 10, out[:1000])
	if u := v.(backend.MemoryQuota).MemoryUsed(); u != want-1 {
		t.Errorf("after a FREE: %d bytes used, want %d", u, want-1)
	}
}

// A kept state is refused, whole, where it does not fit: another
// backend's, one more than the sim's free memory, files that are not a
// device state, one descriptor.
func TestKeepRefused(t *testing.T) {
	k, heap := keepState(t)
	attachWith := func(s *Sim, a *backend.Kept) error {
		_, err := s.Attach(backend.VMSpec{ID: 1, Channels: 1, Heap: heap, Complete: func(backend.Completion) {}, Adopt: a})
		return err
	}
	other := k
	other.Backend = "cuda"
	if err := attachWith(manual(t), &other); !errors.Is(err, backend.ErrBadKept) {
		t.Errorf("another backend's state: %v", err)
	}
	small := manual(t, "memory", "64Ki")
	if err := attachWith(small, &k); !errors.Is(err, backend.ErrBadKept) {
		t.Errorf("more than the sim's memory: %v", err)
	}
	if small.Stats().MemoryUsed != 0 {
		t.Errorf("a refused state left %d bytes counted", small.Stats().MemoryUsed)
	}
	zeros := memfdOf(t, make([]byte, devHeader+segMin))
	if err := attachWith(manual(t), &backend.Kept{Backend: "sim", FDs: []int{zeros, k.FDs[1]}}); !errors.Is(err, backend.ErrBadKept) {
		t.Errorf("a meta file of zeros: %v", err)
	}
	if err := attachWith(manual(t), &backend.Kept{Backend: "sim", FDs: k.FDs[:1]}); !errors.Is(err, backend.ErrBadKept) {
		t.Errorf("one descriptor: %v", err)
	}
	if err := attachWith(manual(t), &k); err != nil {
		t.Errorf("the state refused elsewhere does not attach as it is: %v", err)
	}
}

// memfdOf is a memfd holding b.
func memfdOf(t testing.TB, b []byte) int {
	t.Helper()
	fd, err := unix.MemfdCreate("test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.Pwrite(fd, b, 0); err != nil {
		t.Fatal(err)
	}
	return fd
}

// fileBytes is fd's contents.
func fileBytes(t testing.TB, fd int) []byte {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, st.Size)
	if _, err := unix.Pread(fd, b, 0); err != nil && st.Size > 0 {
		t.Fatal(err)
	}
	return b
}

// TestKeptClaimCounterBounded: a kept claim counter more than a ring past
// the mediator's head is refused (new calls would land where the mediator
// never looks), not adopted.
func TestKeptClaimCounterBounded(t *testing.T) {
	k, heap := keepState(t)
	b := fileBytes(t, k.FDs[0])
	le.PutUint64(b[hdrRingCtr:], 1000) // 64 slots past head 0 and more
	area := make([]byte, abi.SyscallAreaSize(64))
	_, err := manual(t).Attach(backend.VMSpec{ID: 1, Channels: 1, Heap: heap, Syscalls: area, Complete: func(backend.Completion) {},
		RingHead: func() uint64 { return 0 }, Adopt: &backend.Kept{Backend: "sim", FDs: []int{memfdOf(t, b), k.FDs[1]}}})
	if !errors.Is(err, backend.ErrBadKept) {
		t.Errorf("a claim counter 1000 past a head of 0 with 64 slots: %v, want ErrBadKept", err)
	}
}

// checkDevState fails unless st, which decodeDev accepted, is within its
// bounds: handles non-zero, pages inside their buffers, slots inside the
// arena, fills whole pages, the use the buffers' sizes, within memory, at
// most maxBuffers buffers.
func checkDevState(t *testing.T, st *devState, slots, memory uint64) {
	t.Helper()
	if st.used > memory || len(st.bufs) > maxBuffers {
		t.Fatalf("%d bytes in %d buffers accepted, for %d bytes and %d buffers", st.used, len(st.bufs), memory, maxBuffers)
	}
	var used uint64
	for h, b := range st.bufs {
		if h == 0 || b.size == 0 {
			t.Fatalf("buffer %d of %d bytes accepted", h, b.size)
		}
		used += b.size
		for i, ref := range b.pages {
			v := ref &^ refTag
			switch {
			case i >= (b.size+pageSize-1)/pageSize:
				t.Fatalf("buffer %d: page %d beyond its %d bytes", h, i, b.size)
			case ref&refTag == refSlot && v >= slots:
				t.Fatalf("buffer %d page %d: slot %d of %d", h, i, v, slots)
			case ref&refTag == refFill && (v == 0 || v > 0xff || b.size-i*pageSize < pageSize):
				t.Fatalf("buffer %d page %d: fill %d", h, i, v)
			case ref&refTag != refSlot && ref&refTag != refFill:
				t.Fatalf("buffer %d page %d: ref %#x", h, i, ref)
			}
		}
	}
	if used != st.used {
		t.Fatalf("used %d, buffers %d", st.used, used)
	}
	for h := range st.mods {
		if h == 0 {
			t.Fatal("module 0 accepted")
		}
	}
	if len(st.mods) > maxModules {
		t.Fatalf("%d modules", len(st.mods))
	}
}

// Every single-byte change of a kept state's committed records that
// decodeDev accepts still describes buffers inside their sizes and pages
// inside the arena (decodeDev is also fuzzed: FuzzDecodeDev).
func TestKeptCorruptRecords(t *testing.T) {
	k, _ := keepState(t)
	m, a := fileBytes(t, k.FDs[0]), fileBytes(t, k.FDs[1])
	slots := uint64(len(a)) / pageSize
	recs, _, _, _, err := committedRecords(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeDev(recs, slots, 16<<20); err != nil {
		t.Fatalf("the kept records do not decode: %v", err)
	}
	refused := 0
	for i := range recs {
		c := bytes.Clone(recs)
		c[i] ^= 0xff
		st, err := decodeDev(c, slots, 16<<20)
		if err != nil {
			refused++
			continue
		}
		checkDevState(t, st, slots, 16<<20)
	}
	if refused == 0 {
		t.Error("no corrupted record byte was refused")
	}
	for _, cut := range []int{0, 7, devHeader - 1} {
		if _, _, _, _, err := committedRecords(m[:cut]); err == nil {
			t.Errorf("a meta file cut at %d decodes", cut)
		}
	}
	c := bytes.Clone(m)
	le.PutUint64(c[hdrCommit:], le.Uint64(c[hdrCommit:])+uint64(len(m))) // committed past the file
	if _, _, _, _, err := committedRecords(c); err == nil {
		t.Error("a commit word past the file decodes")
	}
}

// TestDecodeDevBoundsWhileReplaying: a log that goes past the memory or
// past maxBuffers buffers at any record is refused there, even where
// what follows frees it (a successor's memory for the replay stays
// bounded by what a run of the sim can hold).
func TestDecodeDevBoundsWhileReplaying(t *testing.T) {
	defer func(old int) { maxBuffers = old }(maxBuffers)
	maxBuffers = 4
	recs := func(rs ...devRecord) []byte {
		var out []byte
		for _, r := range rs {
			out = r.append(out)
		}
		return out
	}
	const memory = 1 << 20
	over := recs(devRecord{kind: recAlloc, handle: 1, a: memory}, devRecord{kind: recAlloc, handle: 2, a: 1},
		devRecord{kind: recFree, handle: 1}, devRecord{kind: recFree, handle: 2})
	if _, err := decodeDev(over, 8, memory); err == nil {
		t.Error("a log past the memory, then freed, decodes")
	}
	if _, err := decodeDev(over[:recLen], 8, memory); err != nil {
		t.Errorf("a buffer of the whole memory: %v", err)
	}
	var many []devRecord
	for h := uint32(1); h <= 5; h++ {
		many = append(many, devRecord{kind: recAlloc, handle: h, a: 1})
	}
	if _, err := decodeDev(recs(many...), 8, memory); err == nil {
		t.Error("5 buffers decode, with at most 4")
	}
	if _, err := decodeDev(recs(many[:4]...), 8, memory); err != nil {
		t.Errorf("4 buffers: %v", err)
	}
}

// FuzzDecodeDev decodes a meta file made of a header (the fuzzer's,
// padded to its size) and records, for an arena of 8 slots.
func FuzzDecodeDev(f *testing.F) {
	hdr := make([]byte, hdrSegs+32)
	copy(hdr, devMagic)
	le.PutUint64(hdr[hdrVersion:], devVersion)
	le.PutUint64(hdr[hdrSegs:], devHeader)
	le.PutUint64(hdr[hdrSegs+8:], 1<<20)
	var recs []byte
	for _, r := range []devRecord{
		{kind: recModule, handle: 4},
		{kind: recAlloc, handle: 1, a: 2*pageSize + 3},
		{kind: recPage, handle: 1, a: 0, b: refSlot | 2},
		{kind: recPage, handle: 1, a: 1, b: refFill | 9},
		{kind: recPage, handle: 1, a: 2, b: refSlot | 2},
		{kind: recAlloc, handle: 2, a: 10},
		{kind: recFree, handle: 1},
		{kind: recReset},
		{kind: recAlloc, handle: 1, a: pageSize},
	} {
		recs = r.append(recs)
	}
	h := bytes.Clone(hdr)
	le.PutUint64(h[hdrCommit:], uint64(len(recs)))
	f.Add(h, recs)
	f.Add(hdr, recs[:recLen])
	f.Fuzz(func(t *testing.T, hdr, recs []byte) {
		m := make([]byte, devHeader, devHeader+len(recs))
		copy(m, hdr)
		m = append(m, recs...)
		got, _, _, _, err := committedRecords(m)
		if err != nil {
			return
		}
		if len(got) > len(recs) {
			t.Fatalf("%d bytes of records out of %d", len(got), len(recs))
		}
		st, err := decodeDev(got, 8, 1<<20)
		if err != nil {
			return
		}
		checkDevState(t, st, 8, 1<<20)
	})
}
