package sim

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/slotcall"
	"github.com/sluice-gpu/sluice/internal/slotcall/slotcalltest"
)

var grans = []struct {
	name        string
	gran, order uint8
}{
	{"work-item", abi.ProgWorkItem, abi.ProgStrong},
	{"work-group strong", abi.ProgWorkGroup, abi.ProgStrong},
	{"work-group relaxed", abi.ProgWorkGroup, abi.ProgRelaxed},
	{"kernel", abi.ProgKernel, abi.ProgRelaxed},
	{"work-group strong, own slots", abi.ProgWorkGroup, abi.ProgStrong | abi.ProgOwnSlots},
	{"work-item, own slots", abi.ProgWorkItem, abi.ProgStrong | abi.ProgOwnSlots},
}

func TestLoadModule(t *testing.T) {
	e := newProgEnv(t, manual(t), 64, nil, slotcalltest.Options{})
	copy(e.heap[100:], "sluice-sim\x00sluice-sin")
	for _, tc := range []struct {
		name string
		cmd  abi.Command
		want abi.ErrorCode
	}{
		{"with NUL", abi.Command{Handle: 2, Format: abi.ModuleSim, HeapOff: 100, Length: 11}, abi.OK},
		{"handle in use", abi.Command{Handle: 2, Format: abi.ModuleSim, HeapOff: 100, Length: 10}, abi.ErrBadHandle},
		{"other image", abi.Command{Handle: 3, Format: abi.ModuleSim, HeapOff: 111, Length: 10}, abi.ErrBadRecord},
		{"prefix", abi.Command{Handle: 3, Format: abi.ModuleSim, HeapOff: 100, Length: 5}, abi.ErrBadRecord},
		{"ptx", abi.Command{Handle: 3, Format: abi.ModulePTX, HeapOff: 100, Length: 10}, abi.ErrUnsupported},
		{"cubin", abi.Command{Handle: 3, Format: abi.ModuleCubin, HeapOff: 100, Length: 10}, abi.ErrUnsupported},
		{"past heap", abi.Command{Handle: 3, Format: abi.ModuleSim, HeapOff: hSize - 4, Length: 10}, abi.ErrHeapRange},
	} {
		tc.cmd.Op = abi.OpLoadModule
		if c := e.do(tc.cmd); c.Code != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, c.Code, tc.want)
		}
	}
}

func TestLaunchValidation(t *testing.T) {
	e := newProgEnv(t, manual(t), 64, nil, slotcalltest.Options{})
	null := prog{slots: 4, iterations: 1}.blob(abi.NullBlobSize)
	with := func(b []byte, off int, v ...byte) []byte {
		b = append([]byte(nil), b...)
		copy(b[off:], v)
		return b
	}
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	std := stdRelocs()
	for _, tc := range []struct {
		name   string
		kernel string
		block  uint32
		blob   []byte
		relocs [][2]uint32
		want   abi.ErrorCode
	}{
		{"valid", abi.KernelSysNull, 1, null, std, abi.OK},
		{"unknown kernel", "sluice_nothing", 1, null, std, abi.ErrUnsupported},
		{"short blob", abi.KernelSysNull, 1, null[:24], [][2]uint32{{0, abi.RelocSyscall}}, abi.ErrBadRecord},
		{"no syscall reloc", abi.KernelSysNull, 1, null, std[1:], abi.ErrBadRecord},
		{"no out reloc", abi.KernelSysNull, 1, null, std[:1], abi.ErrBadRecord},
		{"sys not zero", abi.KernelSysNull, 1, with(null, abi.ProgSys, 1), std, abi.ErrBadRecord},
		{"buffer reloc", abi.KernelSysNull, 1, null, append(std, [2]uint32{16, abi.RelocBuffer}), abi.ErrUnsupported},
		{"unknown reloc", abi.KernelSysNull, 1, null, append(std, [2]uint32{16, 9}), abi.ErrBadRecord},
		{"ring length not the area's", abi.KernelSysNull, 1, with(null, abi.NullRingSlots, u32(63)...), append(std, [2]uint32{abi.NullRing, abi.RelocSyscallRing}), abi.ErrBadRecord},
		{"ring counter not zero", abi.KernelSysNull, 1, with(with(null, abi.NullRingSlots, u32(64)...), abi.NullRing, 1), append(std, [2]uint32{abi.NullRing, abi.RelocSyscallRing}), abi.ErrBadRecord},
		{"ring", abi.KernelSysNull, 1, with(with(null, abi.NullRingSlots, u32(64)...), abi.ProgFirstSlot, u32(10)...), append(std, [2]uint32{abi.NullRing, abi.RelocSyscallRing}), abi.OK}, // slots no case used (nothing serves them)
		{"reloc past args", abi.KernelSysNull, 1, null, append(std, [2]uint32{uint32(len(null)) - 4, abi.RelocHeap}), abi.ErrBadRecord},
		{"slots past area", abi.KernelSysNull, 1, with(null, abi.ProgFirstSlot, u32(61)...), std, abi.ErrBadRecord},
		{"granularity", abi.KernelSysNull, 1, with(null, abi.ProgGranularity, 3), std, abi.ErrBadRecord},
		{"ordering", abi.KernelSysNull, 1, with(null, abi.ProgOrdering, 2), std, abi.ErrBadRecord},
		{"ordering option", abi.KernelSysNull, 1, with(null, abi.ProgOrdering, 0x40), std, abi.ErrBadRecord},
		{"flags", abi.KernelSysNull, 1, with(null, abi.ProgFlags, 4), std, abi.ErrBadRecord},
		{"fastcall null", abi.KernelSysNull, 1, with(null, abi.ProgFlags, abi.SysFlagFastcall), std, abi.ErrBadRecord},
		{"iterations", abi.KernelSysNull, 1, with(null, abi.ProgIterations, u32(maxIterations+1)...), std, abi.ErrBadRecord},
		{"out past heap", abi.KernelSysNull, 1024, with(null, abi.ProgIterations, u32(1000)...), std, abi.ErrHeapRange},
		{"block over resident", abi.KernelSysNull, 1025, null, std, abi.ErrBadRecord},
		{"sys_one number", abi.KernelSysOne, 1, with(prog{slots: 1}.blob(abi.SysOneBlobSize), abi.SysOneNumber, 0, 0, 1), std, abi.ErrBadRecord},
		{"sweep heap field", abi.KernelPreadSwp, 1, prog{slots: 1}.blob(abi.SweepBlobSize), std, abi.ErrBadRecord},
		{"sweep chunk 0", abi.KernelPreadSwp, 1, with(prog{slots: 1}.blob(abi.SweepBlobSize), abi.SweepFileSize, 1), stdRelocs(abi.SweepHeap), abi.ErrBadRecord},
		{"wordcount chunk 0", abi.KernelWordCount, 1, prog{slots: 1}.blob(abi.WCBlobSize), stdRelocs(abi.WCHeap), abi.ErrBadRecord},
	} {
		if c := e.launch(tc.kernel, 1, tc.block, tc.blob, tc.relocs); c.Code != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, c.Code, tc.want)
		}
	}
	cmd := e.launchCmd(abi.KernelSysNull, 1, 1, null, std)
	cmd.Handle = 99
	if c := e.do(cmd); c.Code != abi.ErrBadHandle {
		t.Errorf("no module: %v", c.Code)
	}
	// A VM without a syscall area.
	v, r := attach(t, e.s, 2, 1, e.heap)
	submit(t, v, 0, abi.Command{Op: abi.OpLoadModule, Handle: 1, Format: abi.ModuleSim, Length: 10}, 0)
	cmd.Handle = 1
	submit(t, v, 0, cmd, 1)
	run(t, e.s)
	if got := r.all(); len(got) != 2 || got[0].Code != abi.OK || got[1].Code != abi.ErrUnsupported {
		t.Errorf("VM without syscalls: %+v", got)
	}
}

func TestSysOne(t *testing.T) {
	for _, g := range grans {
		t.Run(g.name, func(t *testing.T) {
			e := newProgEnv(t, newSim(t, "wall", nil), 64, func(_ uint32, s abi.Slot) slotcall.Result {
				return slotcall.Result{Ret: int64(s.Args[0] + s.Args[5] + uint64(s.Number)), Errno: abi.Errno(s.Context)}
			}, slotcalltest.Options{})
			b := prog{slots: 3, first: 10, gran: g.gran, order: g.order, ctx: 9}.blob(abi.SysOneBlobSize)
			binary.LittleEndian.PutUint32(b[abi.SysOneNumber:], uint32(abi.SysGetrusage))
			binary.LittleEndian.PutUint64(b[abi.SysOneArgs:], 1000)
			binary.LittleEndian.PutUint64(b[abi.SysOneArgs+40:], 5)
			if c := e.launch(abi.KernelSysOne, 3, 4, b, stdRelocs()); c.Code != abi.OK || c.End < c.Start {
				t.Fatalf("%+v", c)
			}
			if ret, errno := e.out64(0), e.out64(1); ret != 1005+uint64(abi.SysGetrusage) || errno != 9 {
				t.Errorf("out %d %d", ret, errno)
			}
			if n := e.host.Served(); n != 1 {
				t.Errorf("%d calls", n)
			}
			if st, seq := slotState(e.area, 10); st != abi.SlotFree || seq != 1 {
				t.Errorf("slot 10: %v seq %d", st, seq)
			}
		})
	}
}

func slotState(area []byte, i uint32) (abi.SlotState, uint32) {
	return abi.SplitSlotWord(binary.LittleEndian.Uint32(area[abi.SlotOff(i):]))
}

func TestNull(t *testing.T) {
	for _, g := range grans {
		for _, flags := range []uint8{abi.SysFlagBlocking, 0} {
			for _, ring := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s flags %d ring %v", g.name, flags, ring), func(t *testing.T) {
					testNull(t, g.gran, g.order, flags, ring)
				})
			}
		}
	}
}

// testNull runs the null program through the slots or the request ring.
func testNull(t *testing.T, gran, order, flags uint8, ring bool) {
	e := newProgEnv(t, newSim(t, "wall", nil), 64, newFakeFS(nil, nil).serve, slotcalltest.Options{})
	const grid, block, iters, slots = 4, 8, 3, 5 // slots shared: callers take turns
	callers := map[uint8]int{abi.ProgWorkItem: grid * block, abi.ProgWorkGroup: grid, abi.ProgKernel: 1}[gran]
	b := prog{slots: slots, gran: gran, order: order, flags: flags, iterations: iters}.blob(abi.NullBlobSize)
	relocs := stdRelocs()
	if ring {
		binary.LittleEndian.PutUint32(b[abi.NullRingSlots:], 64)
		relocs = append(relocs, [2]uint32{abi.NullRing, abi.RelocSyscallRing})
	}
	if c := e.launch(abi.KernelSysNull, grid, block, b, relocs); c.Code != abi.OK {
		t.Fatalf("%+v", c)
	}
	for i := range callers * iters {
		if ns := binary.LittleEndian.Uint32(e.heap[hOut+4*i:]); ns == 0 {
			t.Errorf("call %d: no round trip", i)
		}
	}
	if ns := binary.LittleEndian.Uint32(e.heap[hOut+4*callers*iters:]); ns != 0 {
		t.Errorf("wrote past its out: %d", ns)
	}
	if flags == 0 { // the host frees the last ones after the program ended, maybe
		waitFor(t, func() bool { return e.host.NonBlocking() == int64(callers*iters) })
	}
	total := uint32(0)
	for i := range uint32(slots) {
		_, seq := slotState(e.area, i)
		total += seq
	}
	if total != uint32(callers*iters) || e.host.Served() != int64(callers*iters) {
		t.Errorf("%d calls, slots advanced by %d, %d served", callers*iters, total, e.host.Served())
	}
	if want := map[bool]int64{true: int64(callers * iters)}[ring]; e.host.Ring() != want {
		t.Errorf("%d calls through the ring, want %d", e.host.Ring(), want)
	}
}

func TestResidentParam(t *testing.T) {
	for _, v := range []string{"0", "2Gi", "x"} {
		if _, err := ParseParams(map[string]string{"resident": v}); err == nil {
			t.Errorf("resident=%s accepted", v)
		}
	}
	if p, err := ParseParams(map[string]string{"resident": "4Ki"}); err != nil || p.Resident != 4096 {
		t.Errorf("%+v %v", p, err)
	}
}
