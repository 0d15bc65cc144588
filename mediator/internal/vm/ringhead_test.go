package vm

import (
	"errors"
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/internal/syscalls"
)

// refusingBackend stands in for the cuda backend weighing a GPU worker
// kept through a crash: while it does, the worker's kernels make a system
// call (they claim the ring's next position and publish it), and then it
// refuses the worker; the VM's fresh attach starts a claim counter at
// RingHead.
type refusingBackend struct {
	backendOf
	claimed, fresh uint64
}

func (b *refusingBackend) Attach(spec backend.VMSpec) (backend.VM, error) {
	if spec.Adopt == nil {
		b.fresh = spec.RingHead()
		return b.backendOf.Attach(spec)
	}
	area := shm.New(spec.Syscalls)
	n := int(testSyscallSlots)
	b.claimed = syscalls.ReadyEnd(area, n, 0)
	abi.EncodeRingEntry(spec.Syscalls[abi.RingEntryOff(n, b.claimed):], abi.RingEntry{Tag: uint32(b.claimed + 1), Slot: 0,
		Call: abi.Slot{State: abi.SlotProcessing, Seq: 1, Number: abi.SysClose, Flags: abi.SysFlagBlocking}})
	return nil, backend.ErrBadKept
}

const testSyscallSlots = 64

// A GPU worker kept through a crash that the backend refuses may have
// made system calls while it was weighed: the fresh worker's claim
// counter starts past them, never on a position a call of before holds.
func TestRingHeadPastCallsOfARefusedWorker(t *testing.T) {
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: 1 << 20, Channels: 1, RingEntries: 16, SyscallSlots: testSyscallSlots})
	if err != nil {
		t.Fatal(err)
	}
	store := &memStore{fds: map[string][]int{}}
	noProxy := func(int, int64, uint64) (syscalls.Proxy, error) { return nil, errors.New("no proxy in this test") }
	cfg := Config{Name: "h", ID: 1, Weight: 1, Layout: l, Limits: abi.DefaultLimits(), Socket: t.TempDir() + "/h.sock",
		Store: store, StartProxy: noProxy, Syscalls: syscalls.DefaultConfig()}
	v, err := New(cfg, &storingBackend{backendOf: backendOf{&instantGPU{}}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := FromStore("h", abi.Vectors(1), crash(t, v, store))
	if err != nil {
		t.Fatal(err)
	}
	if h.Device == nil {
		t.Fatal("no device state in the store")
	}
	cfg.Adopt = &h
	be := &refusingBackend{backendOf: backendOf{&instantGPU{}}}
	succ, err := New(cfg, be)
	if err != nil {
		t.Fatal(err)
	}
	defer succ.Close()
	if be.fresh <= be.claimed {
		t.Fatalf("the fresh worker's claim counter starts at %d, on the call the refused one made at %d", be.fresh, be.claimed)
	}
}
