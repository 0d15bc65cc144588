package sim

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// smallBuffers is n ALLOCs of size bytes, each written (a host-to-device
// COPY of its first byte, which backs its one page).
func smallBuffers(first uint32, n int, size uint64) []abi.Command {
	var cmds []abi.Command
	for h := first; h < first+uint32(n); h++ {
		cmds = append(cmds, abi.Command{Op: abi.OpAlloc, Handle: h, Size: size},
			abi.Command{Op: abi.OpCopy, Handle: h, Dir: abi.CopyHostToDevice, Length: 1})
	}
	return cmds
}

// TestManySmallBuffersStayInFiles: buffers much smaller than a page, each
// written (one slot each), as many as the memory holds up to the buffer
// cap, stay in the VM's device files (the arena's reserve counts a slot
// for each buffer's last page): the files are never given up, Keep hands
// them over, and a successor reads the same buffers back.
func TestManySmallBuffersStayInFiles(t *testing.T) {
	s := manual(t, "memory", "64Mi")
	heap := make([]byte, 4096)
	heap[0] = 1
	vm, r := attach(t, s, 1, 1, heap)
	v := vm.(*simVM)
	runAll(t, s, v, r, smallBuffers(1, 2200, 4096)) // 2200 slots for 13% of the memory
	if v.dev.broken {
		t.Fatalf("the device files were given up with %d bytes of %d in buffers", v.memUsed, s.p.Memory)
	}
	want := imageOf(v)
	k, err := v.Keep()
	if err != nil {
		t.Fatalf("keeping %d buffers of 4 KiB in 64 MiB: %v", 2200, err)
	}
	closeKept(t, k)
	if got, _ := adoptImage(t, k, heap); !got.equal(want) {
		t.Errorf("adopted %v, want %v", got, want)
	}
}

// TestBufferCap: a VM holds at most maxBuffers buffers (an ALLOC past
// them fails with ErrNoMemory, as one past the memory does); with every
// one of them written, and a command writing the largest buffer anew,
// the arena's reserve still holds them all: the files are never given up.
func TestBufferCap(t *testing.T) {
	defer func(old int) { maxBuffers = old }(maxBuffers)
	maxBuffers = 300
	s := manual(t, "memory", "1Mi") // 16 pages
	heap := make([]byte, pageSize)
	for i := range heap {
		heap[i] = byte(i%13 + 1)
	}
	vm, r := attach(t, s, 1, 1, heap)
	v := vm.(*simVM)
	cmds := smallBuffers(1, maxBuffers-1, 1)
	big := uint64(1<<20 - (maxBuffers - 1)) // the rest of the memory
	cmds = append(cmds, abi.Command{Op: abi.OpAlloc, Handle: 1000, Size: big})
	for off := uint64(0); off < big; off += pageSize {
		cmds = append(cmds, abi.Command{Op: abi.OpCopy, Handle: 1000, Dir: abi.CopyHostToDevice, Offset: off, Length: min(pageSize, big-off)})
	}
	runAll(t, s, v, r, cmds)
	// Every page of the big buffer written anew (an unaligned overlapping
	// COPY): its old pages are held until the commit.
	runAll(t, s, v, r, []abi.Command{{Op: abi.OpCopy, Handle: 1000, SrcHandle: 1000, Dir: abi.CopyDeviceToDevice, Offset: 1, Length: big - 1}})
	runAll(t, s, v, r, []abi.Command{{Op: abi.OpAlloc, Handle: 2000, Size: 1}}, abi.ErrNoMemory)
	if v.dev.broken {
		t.Fatalf("the device files were given up with %d buffers of at most %d", len(v.bufs), maxBuffers)
	}
	runAll(t, s, v, r, []abi.Command{{Op: abi.OpFree, Handle: 1}, {Op: abi.OpAlloc, Handle: 2000, Size: 1}})
	want := imageOf(v)
	k, err := v.Keep()
	if err != nil {
		t.Fatal(err)
	}
	closeKept(t, k)
	if got, _ := adoptImage(t, k, heap); !got.equal(want) {
		t.Errorf("adopted %v, want %v", got, want)
	}
}

// TestKeepAfterGivingUp: a VM whose files were given up (no room) keeps
// its state in the heap; Keep, the VM quiescent, writes it into fresh
// files, which a successor adopts whole. So does a VM whose files could
// not be made at its Attach.
func TestKeepAfterGivingUp(t *testing.T) {
	for _, how := range []string{"given up", "never made"} {
		t.Run(how, func(t *testing.T) {
			if how == "never made" {
				defer func(old func(uint64) (*devFile, error)) { makeDevFile = old }(makeDevFile)
				makeDevFile = func(m uint64) (*devFile, error) { // fails at the Attach, not at the Keep
					makeDevFile = newDevFile
					return nil, errors.New("no memfd for the test")
				}
			}
			heap := crashHeap()
			s := manual(t, "memory", "64Mi")
			vm, _ := attach(t, s, 1, 1, heap)
			v := vm.(*simVM)
			if how == "given up" {
				runCmds(t, s, v, crashCommands(2))
				v.dev.giveUp(errors.New("the test gives them up"))
				if k := v.Stored(); len(k.FDs) != 0 {
					t.Fatalf("files given up are still stored: %v", k.FDs)
				}
			} else if k := v.Stored(); len(k.FDs) != 0 {
				t.Fatalf("a VM without files stores %v", k.FDs)
			}
			runCmds(t, s, v, crashCommands(3)[len(crashCommands(2)):])
			v.ringCtr.Store(31)
			want := imageOf(v)
			if len(want.bufs) == 0 || len(want.mods) == 0 {
				t.Fatalf("the test left no state to keep: %v", want)
			}
			k, err := v.Keep()
			if err != nil {
				t.Fatalf("keeping: %v", err)
			}
			closeKept(t, k)
			got, nv := adoptImage(t, k, heap)
			if !got.equal(want) {
				t.Errorf("adopted %v, want %v", got, want)
			}
			if c := nv.ringCtr.Load(); c != 31 {
				t.Errorf("claim counter %d, want 31", c)
			}
			for h, b := range want.bufs {
				if !bytes.Equal(got.bufs[h], b) {
					t.Errorf("buffer %d differs", h)
				}
			}
		})
	}
}

// TestCompactionToEmptyState: a compaction whose state is empty (every
// buffer freed) commits it in the second segment, which a successor
// adopts (a segment never placed must be placed, even for no records).
func TestCompactionToEmptyState(t *testing.T) {
	defer func(old uint64) { segMin = old }(segMin)
	segMin = 8 * recLen
	s := manual(t, "memory", "64Mi")
	vm, r := attach(t, s, 1, 1, make([]byte, 4096))
	v := vm.(*simVM)
	cmds := []abi.Command{{Op: abi.OpAlloc, Handle: 1, Size: 100}, {Op: abi.OpMemset, Handle: 1, Length: 10, Value: 3}, {Op: abi.OpFree, Handle: 1}}
	runAll(t, s, v, r, cmds)
	compacted := false
	for i := 0; i < 100 && !compacted; i++ {
		runAll(t, s, v, r, []abi.Command{{Op: abi.OpAlloc, Handle: 1, Size: 100}, {Op: abi.OpFree, Handle: 1}})
		compacted = v.dev.active == 1
	}
	if !compacted {
		t.Fatal("no compaction into the second segment")
	}
	v.ringCtr.Store(77)
	k := snapshot(t, v.dev)
	got, nv := adoptImage(t, k, make([]byte, 4096))
	if len(got.bufs) != 0 || len(got.mods) != 0 {
		t.Errorf("adopted %v, want nothing", got)
	}
	if c := nv.ringCtr.Load(); c != 77 {
		t.Errorf("claim counter %d, want 77", c)
	}
}

// runCmds submits cmds on channel 0 one at a time, each run to its end,
// whatever their codes.
func runCmds(t *testing.T, s *Sim, v backend.VM, cmds []abi.Command) {
	t.Helper()
	for i, c := range cmds {
		submit(t, v, 0, c, uint64(i))
		run(t, s)
	}
}

// closeKept closes k's descriptors when the test ends.
func closeKept(t *testing.T, k backend.Kept) {
	t.Cleanup(func() {
		for _, fd := range k.FDs {
			unix.Close(fd)
		}
	})
}
