package vm

import (
	"bytes"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/backend/sim"
)

// A buffer a guest allocated and filled before a hand-over reads back the
// same after it, through the successor's backend (another sim, as a
// successor process opens its own), and its handle is still in use.
func TestExportKeepsDeviceState(t *testing.T) {
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: 1 << 20, Channels: 1, RingEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Name: "k", ID: 1, Weight: 1, Layout: l, Limits: abi.DefaultLimits(), Socket: t.TempDir() + "/k.sock", Epoch: 3}
	old, err := sim.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	v, err := New(cfg, old)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	dev, ch, ctx := guestChannel(t, v)
	data := make([]byte, 100<<10) // a whole page and a part of one
	for i := range data {
		data[i] = byte(i*31 + 7)
	}
	if err := dev.WriteHeap(0, data); err != nil {
		t.Fatal(err)
	}
	run := func(cmds ...abi.Command) error {
		idx, err := ch.Submit(ctx, cmds...)
		if err != nil {
			return err
		}
		return ch.Wait(ctx, idx)
	}
	n := uint64(len(data))
	if err := run(abi.Command{Op: abi.OpAlloc, Handle: 4, Size: n},
		abi.Command{Op: abi.OpCopy, Handle: 4, Dir: abi.CopyHostToDevice, HeapOff: 0, Length: n}); err != nil {
		t.Fatal(err)
	}
	h, err := v.Export(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if h.Device == nil || h.Device.Backend != "sim" || len(h.Device.FDs) != 2 {
		t.Fatalf("kept device state %+v, want the sim's", h.Device)
	}
	succBE, err := sim.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer succBE.Close()
	cfg.Adopt = &h
	succ, err := New(cfg, succBE)
	if err != nil {
		t.Fatalf("adopting: %v", err)
	}
	defer succ.Close()
	if _, used := succ.Memory(); used != n {
		t.Errorf("the successor's vm uses %d bytes, want %d", used, n)
	}
	if err := run(abi.Command{Op: abi.OpCopy, Handle: 4, Dir: abi.CopyDeviceToHost, HeapOff: n, Length: n}); err != nil {
		t.Fatalf("reading the buffer back after the hand-over: %v", err)
	}
	got := make([]byte, n)
	if err := dev.ReadHeap(n, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Error("the buffer read back after the hand-over differs from what was written before it")
	}
	if err := run(abi.Command{Op: abi.OpAlloc, Handle: 4, Size: 1}); err == nil {
		t.Error("handle 4 was free after the hand-over")
	}
}

// A kept device state comes back from the fd store whole, under its
// backend's name, or not at all.
func TestDeviceFromStore(t *testing.T) {
	stored := map[string][]int{"vm/a/device/sim/0": {9040, 9041}, "vm/a/memfd": {9042}, "vm/b/device/sim/0": {9043}}
	k := deviceFromStore("a", stored)
	if k == nil || k.Backend != "sim" || len(k.FDs) != 1 || k.FDs[0] != 9040 {
		t.Fatalf("vm a's kept state %+v, want the sim's in fd 9040", k)
	}
	if _, left := stored["vm/a/device/sim/0"]; left || len(stored) != 2 {
		t.Errorf("stored after taking it: %v", stored)
	}
	if k := deviceFromStore("c", stored); k != nil {
		t.Errorf("vm c has none, got %+v", k)
	}
	holed := map[string][]int{"vm/a/device/sim/1": {9044}}
	if k := deviceFromStore("a", holed); k != nil || len(holed) != 1 {
		t.Errorf("a state without its descriptor 0: %+v, left %v", k, holed)
	}
}

// A VM on a backend that keeps its device state in files from its attach
// on (the sim) stores them in the fd store when it is created, before any
// quiesce; a successor rebuilt from the store adopts them and goes on in
// them (they stay stored, under the same names), and deleting the VM
// takes them out.
func TestStoreLiveDeviceState(t *testing.T) {
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: 1 << 20, Channels: 1, RingEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	store := &memStore{fds: map[string][]int{}}
	cfg := Config{Name: "d", ID: 1, Weight: 1, Layout: l, Limits: abi.DefaultLimits(), Socket: t.TempDir() + "/d.sock", Store: store}
	old, err := sim.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	v, err := New(cfg, old)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	names := []string{"vm/d/device/sim/0", "vm/d/device/sim/1"}
	for _, n := range names {
		if len(store.passed()[n]) != 1 {
			t.Fatalf("%s is not stored when the vm is created: %v", n, store.passed())
		}
	}
	dev, ch, ctx := guestChannel(t, v)
	data := bytes.Repeat([]byte("0123456789abcdef"), 5000)
	if err := dev.WriteHeap(0, data); err != nil {
		t.Fatal(err)
	}
	run := func(cmds ...abi.Command) error {
		idx, err := ch.Submit(ctx, cmds...)
		if err != nil {
			return err
		}
		return ch.Wait(ctx, idx)
	}
	n := uint64(len(data))
	if err := run(abi.Command{Op: abi.OpAlloc, Handle: 4, Size: n},
		abi.Command{Op: abi.OpCopy, Handle: 4, Dir: abi.CopyHostToDevice, HeapOff: 0, Length: n}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Export(0); err != nil { // the predecessor stops serving
		t.Fatal(err)
	}
	h, err := FromStore("d", abi.Vectors(1), store.passed())
	if err != nil {
		t.Fatal(err)
	}
	if h.Device == nil || len(h.Device.FDs) != 2 {
		t.Fatalf("the device state from the store: %+v", h.Device)
	}
	succBE, err := sim.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer succBE.Close()
	cfg.Adopt = &h
	succ, err := New(cfg, succBE)
	if err != nil {
		t.Fatalf("adopting: %v", err)
	}
	for _, n := range names {
		if len(store.passed()[n]) == 0 {
			t.Errorf("%s is no longer stored after the successor adopted it", n)
		}
	}
	if err := run(abi.Command{Op: abi.OpCopy, Handle: 4, Dir: abi.CopyDeviceToHost, HeapOff: n, Length: n}); err != nil {
		t.Fatalf("reading the buffer back: %v", err)
	}
	got := make([]byte, n)
	if err := dev.ReadHeap(n, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Error("the buffer read back after the take-over differs")
	}
	if err := succ.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if len(store.passed()[n]) != 0 {
			t.Errorf("%s stays stored after the vm is deleted", n)
		}
	}
}
