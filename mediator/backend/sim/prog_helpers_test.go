package sim

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/slotcall"
	"github.com/sluice-gpu/sluice/internal/slotcall/slotcalltest"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// Heap layout of the program tests.
const (
	hImage = 0     // the module image
	hName  = 64    // the kernel name
	hBlob  = 256   // the argument blob, then relocations
	hOut   = 4096  // out
	hData  = 65536 // paths, buffers
	hSize  = 1 << 20
	module = 7
)

// progEnv is a VM with a heap and a syscall area, and a fake host serving it.
type progEnv struct {
	t    testing.TB
	s    *Sim
	v    backend.VM
	r    *recorder
	heap []byte
	area []byte
	host *slotcalltest.Host
	tag  uint64
}

func newProgEnv(t testing.TB, s *Sim, slots int, serve slotcalltest.ServeFunc, o slotcalltest.Options) *progEnv {
	t.Helper()
	e := &progEnv{t: t, s: s, heap: make([]byte, hSize), area: make([]byte, abi.SyscallAreaSize(slots)), r: newRecorder()}
	v, err := s.Attach(backend.VMSpec{ID: 1, Channels: 2, Heap: e.heap, Syscalls: e.area, Complete: e.r.complete})
	if err != nil {
		t.Fatal(err)
	}
	e.v = v
	if serve != nil {
		e.host = slotcalltest.Start(e.area, serve, o)
		t.Cleanup(e.host.Stop)
	}
	t.Cleanup(func() { v.Close() })
	copy(e.heap[hImage:], abi.SimModuleImage)
	if c := e.do(abi.Command{Op: abi.OpLoadModule, Handle: module, Format: abi.ModuleSim, HeapOff: hImage, Length: uint64(len(abi.SimModuleImage))}); c.Code != abi.OK {
		t.Fatalf("load module: %v", c.Code)
	}
	return e
}

// do submits cmd on channel 0 and waits for its completion.
func (e *progEnv) do(cmd abi.Command) backend.Completion {
	e.t.Helper()
	e.tag++
	n := len(e.r.all())
	submit(e.t, e.v, 0, cmd, e.tag)
	if e.s.manual {
		run(e.t, e.s)
	}
	return e.r.wait(e.t, n+1)[n]
}

// launchCmd writes name, blob and relocs into the heap and returns the
// LAUNCH.
func (e *progEnv) launchCmd(name string, grid, block uint32, blob []byte, relocs [][2]uint32) abi.Command {
	copy(e.heap[hName:], name)
	copy(e.heap[hBlob:], blob)
	r := hBlob + (len(blob)+7)&^7
	for i, rl := range relocs {
		binary.LittleEndian.PutUint32(e.heap[r+8*i:], rl[0])
		binary.LittleEndian.PutUint32(e.heap[r+8*i+4:], rl[1])
	}
	return abi.Command{Op: abi.OpLaunch, Handle: module, Grid: [3]uint32{grid, 1, 1}, Block: [3]uint32{block, 1, 1},
		NameOff: hName, NameLen: uint32(len(name)), ArgsOff: hBlob, ArgsLen: uint32(len(blob)), Relocs: uint32(len(relocs))}
}

func (e *progEnv) launch(name string, grid, block uint32, blob []byte, relocs [][2]uint32) backend.Completion {
	e.t.Helper()
	return e.do(e.launchCmd(name, grid, block, blob, relocs))
}

// prog is the common head of a blob.
type prog struct {
	slots, first       uint32
	gran, order, flags uint8
	ctx                uint8
	iterations         uint32
}

func (p prog) blob(size int) []byte {
	b := make([]byte, size)
	le := binary.LittleEndian
	le.PutUint64(b[abi.ProgOut:], hOut)
	le.PutUint32(b[abi.ProgFirstSlot:], p.first)
	le.PutUint32(b[abi.ProgSlots:], p.slots)
	b[abi.ProgGranularity], b[abi.ProgOrdering], b[abi.ProgContext], b[abi.ProgFlags] = p.gran, p.order, p.ctx, p.flags
	le.PutUint32(b[abi.ProgIterations:], p.iterations)
	return b
}

// stdRelocs are sys and out, plus heap fields.
func stdRelocs(heapFields ...int) [][2]uint32 {
	r := [][2]uint32{{abi.ProgSys, abi.RelocSyscall}, {abi.ProgOut, abi.RelocHeap}}
	for _, f := range heapFields {
		r = append(r, [2]uint32{uint32(f), abi.RelocHeap})
	}
	return r
}

func (e *progEnv) out64(i int) uint64 { return binary.LittleEndian.Uint64(e.heap[hOut+8*i:]) }

// fakeFS serves openat, pread64 and close over in-memory files, and null.
type fakeFS struct {
	heap  []byte
	mu    sync.Mutex
	files map[string][]byte
	fds   map[uint64][]byte
	next  uint64
	ctxs  map[uint8]int
}

func newFakeFS(heap []byte, files map[string][]byte) *fakeFS {
	return &fakeFS{heap: heap, files: files, fds: map[uint64][]byte{}, next: 3, ctxs: map[uint8]int{}}
}

func (f *fakeFS) serve(_ uint32, s abi.Slot) slotcall.Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctxs[s.Context]++
	switch s.Number {
	case abi.SysNull:
		return slotcall.Result{}
	case abi.SysOpenat:
		if int64(s.Args[0]) != -100 || s.Args[1] >= uint64(len(f.heap)) {
			return slotcall.Result{Ret: -1, Errno: abi.ErrnoINVAL}
		}
		p := f.heap[s.Args[1]:]
		data, ok := f.files[string(p[:bytes.IndexByte(p, 0)])]
		if !ok {
			return slotcall.Result{Ret: -1, Errno: abi.ErrnoNOENT}
		}
		f.next++
		f.fds[f.next] = data
		return slotcall.Result{Ret: int64(f.next)}
	case abi.SysPread64:
		data, ok := f.fds[s.Args[0]]
		if !ok {
			return slotcall.Result{Ret: -1, Errno: abi.ErrnoBADF}
		}
		buf, ok := span(f.heap, s.Args[1], s.Args[2])
		if !ok {
			return slotcall.Result{Ret: -1, Errno: abi.ErrnoFAULT}
		}
		if s.Args[3] >= uint64(len(data)) {
			return slotcall.Result{}
		}
		return slotcall.Result{Ret: int64(copy(buf, data[s.Args[3]:]))}
	case abi.SysClose:
		if _, ok := f.fds[s.Args[0]]; !ok {
			return slotcall.Result{Ret: -1, Errno: abi.ErrnoBADF}
		}
		delete(f.fds, s.Args[0])
		return slotcall.Result{}
	}
	return slotcall.Result{Ret: -1, Errno: abi.ErrnoNOSYS}
}

// waitRunning waits until channel 0 of VM 1 runs on the compute engine.
func waitRunning(t testing.TB, s *Sim) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ref, busy := s.EngineStatus(Compute); busy && ref == (backend.ChannelRef{VM: 1}) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the program never ran")
		}
		time.Sleep(time.Millisecond)
	}
}

// waitFor polls cond (a deadlock guard, not a timing assertion).
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(time.Millisecond)
	}
}
