package sim

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// devImage is a VM's device state as a guest sees it: each buffer's bytes
// and the modules loaded.
type devImage struct {
	bufs map[uint32][]byte
	mods []uint32
}

// imageOf reads v's device state (its commands have all completed).
func imageOf(v *simVM) devImage {
	img := devImage{bufs: map[uint32][]byte{}, mods: slices.Sorted(maps.Keys(v.mods))}
	for h, b := range v.bufs {
		img.bufs[h] = make([]byte, b.size)
		b.read(0, img.bufs[h])
	}
	return img
}

func (a devImage) equal(b devImage) bool {
	return slices.Equal(a.mods, b.mods) && maps.EqualFunc(a.bufs, b.bufs, bytes.Equal)
}

func (a devImage) String() string {
	s := fmt.Sprintf("mods %v", a.mods)
	for _, h := range slices.Sorted(maps.Keys(a.bufs)) {
		s += fmt.Sprintf(", buffer %d: %d bytes", h, len(a.bufs[h]))
	}
	return s
}

// crashCommands changes a VM's state with every kind of command, in
// ways that touch every kind of page: data, fill and zero pages, a
// short last page, pages shared by a device-to-device COPY and written
// after, FREEs and handles used again, a module; and fails some.
func crashCommands(rounds int) []abi.Command {
	var cmds []abi.Command
	for r := range uint64(rounds) {
		v := r%200 + 1
		cmds = append(cmds,
			abi.Command{Op: abi.OpAlloc, Handle: 1, Size: 3*pageSize + 100 + r},
			abi.Command{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyHostToDevice, Offset: 10 + r, HeapOff: r, Length: pageSize + 1000},
			abi.Command{Op: abi.OpMemset, Handle: 1, Offset: 2 * pageSize, Length: pageSize, Value: v},
			abi.Command{Op: abi.OpMemset, Handle: 1, Offset: 3 * pageSize, Length: 50, Value: v + 1},
			abi.Command{Op: abi.OpAlloc, Handle: 2, Size: 4 * pageSize},
			abi.Command{Op: abi.OpCopy, Handle: 2, SrcHandle: 1, Dir: abi.CopyDeviceToDevice, Length: 3 * pageSize},
			abi.Command{Op: abi.OpCopy, Handle: 2, Dir: abi.CopyHostToDevice, Offset: pageSize - 7, HeapOff: 3, Length: 20},
			abi.Command{Op: abi.OpCopy, Handle: 1, SrcHandle: 1, Dir: abi.CopyDeviceToDevice, Offset: 5, HeapOff: 0, Length: 2 * pageSize}, // overlapping
			abi.Command{Op: abi.OpMemset, Handle: 2, Length: pageSize, Value: 0},
			abi.Command{Op: abi.OpLoadModule, Handle: uint32(r + 3), Format: abi.ModuleSim, HeapOff: 8192, Length: uint64(len(abi.SimModuleImage))},
			abi.Command{Op: abi.OpAlloc, Handle: 2, Size: 1}, // in use: fails
			abi.Command{Op: abi.OpFree, Handle: 1},
			abi.Command{Op: abi.OpFree, Handle: 1}, // fails
		)
		if r%2 == 1 {
			cmds = append(cmds, abi.Command{Op: abi.OpFree, Handle: 2})
		}
	}
	return cmds
}

// crashHeap is a heap for crashCommands.
func crashHeap() []byte {
	heap := make([]byte, 3*pageSize)
	for i := range heap {
		heap[i] = byte(i*7 + i>>8 + 1)
	}
	copy(heap[8192:], abi.SimModuleImage)
	return heap
}

// snapshot copies d's files as they are now, as a kill -9 of the process
// would leave them.
func snapshot(t *testing.T, d *devFile) backend.Kept {
	return backend.Kept{Backend: "sim", FDs: []int{memfdOf(t, d.mm[:d.metaSize]), memfdOf(t, d.am[:d.arenaSize])}}
}

// adoptImage attaches a kept state to a fresh sim and reads it back.
func adoptImage(t *testing.T, k backend.Kept, heap []byte) (devImage, *simVM) {
	t.Helper()
	s := manual(t, "memory", "64Mi")
	v, err := s.Attach(backend.VMSpec{ID: 1, Channels: 1, Heap: heap, Complete: func(backend.Completion) {}, Adopt: &k})
	if err != nil {
		t.Fatalf("adopting: %v", err)
	}
	sv := v.(*simVM)
	img := imageOf(sv)
	var sum uint64
	for _, b := range img.bufs {
		sum += uint64(len(b))
	}
	if sv.MemoryUsed() != sum {
		t.Errorf("adopted memory use %d, buffers %d", sv.MemoryUsed(), sum)
	}
	return img, sv
}

// TestCrashAtEveryCommitPoint runs commands one at a time and copies the
// VM's device files at every point of every commit where a crash would
// leave them (the command's pages and records written, the commit word
// not yet; the commit word written; in a compaction too, which a small
// segment makes frequent): each copy, adopted by another sim, is exactly
// the state before the command or after it, never between.
func TestCrashAtEveryCommitPoint(t *testing.T) {
	defer func(old uint64) { segMin = old }(segMin)
	segMin = 8 * recLen
	heap := crashHeap()
	s := manual(t, "memory", "64Mi")
	r := newRecorder()
	vm, err := s.Attach(backend.VMSpec{ID: 1, Channels: 1, Heap: heap, Complete: r.complete})
	if err != nil {
		t.Fatal(err)
	}
	v := vm.(*simVM)
	type point struct {
		cmd       int
		committed bool
		k         backend.Kept
	}
	var points []point
	cmd := 0
	v.dev.hook = func(committed bool) { points = append(points, point{cmd, committed, snapshot(t, v.dev)}) }
	cmds := crashCommands(4)
	images := []devImage{imageOf(v)} // images[i]: after i commands
	for i, c := range cmds {
		cmd = i + 1
		submit(t, v, 0, c, uint64(i))
		run(t, s)
		images = append(images, imageOf(v))
	}
	compactions := 0
	for _, p := range points {
		want := images[p.cmd-1]
		if p.committed {
			want = images[p.cmd]
		}
		got, _ := adoptImage(t, p.k, heap)
		if !got.equal(want) {
			t.Fatalf("a crash in command %d (%v), committed %v: adopted %v, want %v", p.cmd, cmds[p.cmd-1].Op, p.committed, got, want)
		}
		if p.committed && p.k.FDs != nil && le.Uint64(fileBytes(t, p.k.FDs[0])[hdrCommit:])>>63 != 0 {
			compactions++
		}
	}
	if len(points) < 2*len(cmds) || compactions == 0 {
		t.Errorf("%d crash points for %d commands, %d in the second segment: the test missed what it is for", len(points), len(cmds), compactions)
	}
}

// TestCrashMidCommand: the process dies while a command is under way (a
// MEMSET's data written into the arena, its records not committed; or
// before its data moved), the backend never closed: another sim adopts
// the files (the very descriptors the VM stores) with the state of the
// commands that completed, and goes on with them: the command that was
// in flight runs again and its data reads back.
func TestCrashMidCommand(t *testing.T) {
	for _, at := range []string{"before the data moves", "data moved, not committed"} {
		t.Run(at, func(t *testing.T) {
			heap := crashHeap()
			s := newSim(t, "wall", nil)
			r := newRecorder()
			vm, err := s.Attach(backend.VMSpec{ID: 1, Channels: 2, Heap: heap, Complete: r.complete})
			if err != nil {
				t.Fatal(err)
			}
			v := vm.(*simVM)
			done := crashCommands(1)[:8]
			for i, c := range done {
				submit(t, v, i%2, c, uint64(i))
				r.wait(t, i+1)
			}
			want := imageOf(v)
			v.ringCtr.Store(12)
			stored := v.Stored()
			dead := make(chan struct{}) // the process "dies" where the mover waits on it
			t.Cleanup(func() { close(dead) })
			if at == "before the data moves" {
				s.mu.Lock()
				s.beforeMove = func() { <-dead }
				s.mu.Unlock()
			} else {
				v.dev.hook = func(committed bool) {
					if !committed {
						<-dead
					}
				}
			}
			memset := abi.Command{Op: abi.OpMemset, Handle: 1, Offset: 7, Length: 2*pageSize + 9, Value: 0x5a}
			submit(t, v, 0, memset, 100)
			submit(t, v, 1, abi.Command{Op: abi.OpAlloc, Handle: 9, Size: 1}, 101) // behind it in the mover
			got, nv := adoptImage(t, stored, heap)
			if !got.equal(want) {
				t.Fatalf("adopted %v, want the state of the commands completed: %v", got, want)
			}
			if c := nv.ringCtr.Load(); c != 12 {
				t.Errorf("claim counter %d, want 12", c)
			}
			runAll(t, nv.s, nv, newRecorder(), []abi.Command{memset, {Op: abi.OpAlloc, Handle: 9, Size: 1}})
			img := imageOf(nv)
			wantBuf := bytes.Clone(want.bufs[1])
			fill(wantBuf[7:7+2*pageSize+9], 0x5a)
			if !bytes.Equal(img.bufs[1], wantBuf) || len(img.bufs[9]) != 1 {
				t.Errorf("the commands run again in the successor: %v", img)
			}
		})
	}
}

// TestFreeGivesMemoryBack: the arena's host memory of a large buffer
// written and freed goes back to the host (its slots stay for reuse).
func TestFreeGivesMemoryBack(t *testing.T) {
	const size = 4 << 20
	heap := make([]byte, size)
	for i := range heap {
		heap[i] = byte(i%251 + 1)
	}
	s := manual(t, "memory", "64Mi")
	vm, r := attach(t, s, 1, 1, heap)
	v := vm.(*simVM)
	backed := func() int64 {
		var st unix.Stat_t
		if err := unix.Fstat(v.dev.arena, &st); err != nil {
			t.Fatal(err)
		}
		return st.Blocks * 512
	}
	runAll(t, s, v, r, []abi.Command{
		{Op: abi.OpAlloc, Handle: 1, Size: size},
		{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyHostToDevice, Length: size},
	})
	if b := backed(); b < size {
		t.Fatalf("the arena backs %d bytes of a %d-byte buffer written", b, size)
	}
	runAll(t, s, v, r, []abi.Command{{Op: abi.OpFree, Handle: 1}})
	if b := backed(); b > size/8 {
		t.Errorf("the arena still backs %d bytes after the FREE", b)
	}
}
