package sim

import (
	"bytes"
	"encoding/binary"
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
// backend's, one more than the sim's free memory, an unsealed file.
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
	fd, err := unix.MemfdCreate("unsealed", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, keptHeader); err != nil {
		t.Fatal(err)
	}
	if err := attachWith(manual(t), &backend.Kept{Backend: "sim", FDs: []int{fd}}); !errors.Is(err, backend.ErrBadKept) {
		t.Errorf("an unsealed memfd: %v", err)
	}
}

// keptBytes is the encoding of the state keepState keeps.
func keptBytes(t testing.TB, k backend.Kept) []byte {
	var st unix.Stat_t
	if err := unix.Fstat(k.FDs[0], &st); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, st.Size)
	if _, err := unix.Pread(k.FDs[0], b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

// Every single-byte change of a kept state's tables that decodeKept
// accepts still describes buffers inside their sizes and data inside the
// file (decodeKept is also fuzzed: FuzzDecodeKept).
func TestKeptCorruptTables(t *testing.T) {
	k, _ := keepState(t)
	b := keptBytes(t, k)
	if _, err := decodeKept(b); err != nil {
		t.Fatalf("the kept state does not decode: %v", err)
	}
	for _, cut := range []int{0, 7, keptHeader - 1, keptHeader, len(b) - 1} {
		if _, err := decodeKept(b[:cut]); err == nil {
			t.Errorf("a state cut at %d of %d decodes", cut, len(b))
		}
	}
	tables := keptHeader + 8 + 3*keptBufLen + 6*keptPgLen
	refused := 0
	for i := 8; i < tables && i < len(b); i++ {
		c := bytes.Clone(b)
		c[i] ^= 0xff
		if _, err := decodeKept(c); err != nil {
			refused++
		}
	}
	if refused == 0 {
		t.Error("no corrupted table byte was refused")
	}
}

func FuzzDecodeKept(f *testing.F) {
	var seed bytes.Buffer
	seed.WriteString(keptMagic)
	f.Add(append(seed.Bytes(), make([]byte, keptHeader-8)...))
	buf := newBuffer(2*pageSize + 3)
	buf.write(5, []byte("data"))
	buf.memset(pageSize, pageSize, 9)
	buf.write(2*pageSize, []byte{1, 2, 3})
	k := kept{mods: map[uint32]struct{}{4: {}}, bufs: map[uint32]*buffer{1: buf, 2: newBuffer(10)}}
	enc := make([]byte, keptHeader+8+2*keptBufLen+3*keptPgLen+pageSize+3)
	k.encode(enc, 3, pageSize+3)
	if _, err := decodeKept(enc); err != nil {
		f.Fatalf("the seed does not decode: %v", err)
	}
	f.Add(enc)
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := decodeKept(b)
		if err != nil {
			return
		}
		var used uint64
		for h, buf := range k.bufs {
			if h == 0 || buf.size == 0 {
				t.Fatalf("buffer %d of %d bytes accepted", h, buf.size)
			}
			used += buf.size
			for i, p := range buf.pages {
				if uint64(len(p.b)) != buf.pageLen(i) {
					t.Fatalf("buffer %d page %d: %d bytes, want %d", h, i, len(p.b), buf.pageLen(i))
				}
			}
		}
		if used != k.used {
			t.Fatalf("used %d, buffers %d", k.used, used)
		}
	})
}

// TestKeptClaimCounterBounded: a kept claim counter more than a ring past
// the mediator's head is refused (new calls would land where the mediator
// never looks), not adopted.
func TestKeptClaimCounterBounded(t *testing.T) {
	k, heap := keepState(t)
	b := keptBytes(t, k)
	binary.LittleEndian.PutUint64(b[8:], 1000) // the claim counter, 64 slots past head 0 and more
	fd, err := unix.MemfdCreate("kept", unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.Pwrite(fd, b, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, keptSeals); err != nil {
		t.Fatal(err)
	}
	area := make([]byte, abi.SyscallAreaSize(64))
	_, err = manual(t).Attach(backend.VMSpec{ID: 1, Channels: 1, Heap: heap, Syscalls: area, Complete: func(backend.Completion) {},
		RingHead: func() uint64 { return 0 }, Adopt: &backend.Kept{Backend: "sim", FDs: []int{fd}}})
	if !errors.Is(err, backend.ErrBadKept) {
		t.Errorf("a claim counter 1000 past a head of 0 with 64 slots: %v, want ErrBadKept", err)
	}
}
