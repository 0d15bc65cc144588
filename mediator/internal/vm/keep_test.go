package vm

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/backend/sim"
	"golang.org/x/sys/unix"
)

// A buffer a guest allocated and filled before a hand-over reads back the
// same after it, through the successor's backend (another sim, as a
// successor process opens its own), and its handle is still in use.
func TestExportKeepsDeviceState(t *testing.T) {
	cfg := oneChannel(t, "k", nil)
	cfg.Epoch = 3
	old := newSim(t)
	v, err := New(cfg, old)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	data := make([]byte, 100<<10) // a whole page and a part of one
	for i := range data {
		data[i] = byte(i*31 + 7)
	}
	run, readBack := filledBuffer(t, v, data)
	n := uint64(len(data))
	h, err := v.Export(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if h.Device == nil || h.Device.Backend != "sim" || len(h.Device.FDs) != 2 {
		t.Fatalf("kept device state %+v, want the sim's", h.Device)
	}
	succBE := newSim(t)
	cfg.Adopt = &h
	succ, err := New(cfg, succBE)
	if err != nil {
		t.Fatalf("adopting: %v", err)
	}
	defer succ.Close()
	if _, used := succ.Memory(); used != n {
		t.Errorf("the successor's vm uses %d bytes, want %d", used, n)
	}
	if !bytes.Equal(readBack("after the hand-over"), data) {
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

// storingBackend stores a device state of its own (an eventfd) through
// the VM's store as it attaches, as the cuda backend stores its running
// GPU worker, and remembers the state it was asked to adopt.
type storingBackend struct {
	backendOf
	adopted *backend.Kept
}

func (b *storingBackend) Attach(spec backend.VMSpec) (backend.VM, error) {
	if spec.Store == nil {
		return nil, errors.New("no store")
	}
	b.adopted = spec.Adopt
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := spec.Store.StoreKept(backend.Kept{Backend: "live", FDs: []int{fd}}); err != nil {
		return nil, err
	}
	return b.backendOf.Attach(spec)
}

// A backend given the VM's store stores its live state under
// vm/NAME/device/BACKEND/I; a successor after a crash gets it back as a
// kept state without data, and the backend that adopts it stores it again
// under the same names: one copy stays stored.
func TestBackendStoresItsDeviceState(t *testing.T) {
	store := &memStore{fds: map[string][]int{}}
	cfg := oneChannel(t, "d", store)
	v, err := New(cfg, &storingBackend{backendOf: backendOf{&instantGPU{}}})
	if err != nil {
		t.Fatal(err)
	}
	if fds := store.passed()["vm/d/device/live/0"]; len(fds) != 1 {
		t.Fatalf("the backend's state stored %d times, want once", len(fds))
	}
	h, err := FromStore("d", abi.Vectors(1), crash(t, v, store))
	if err != nil {
		t.Fatal(err)
	}
	if h.Device == nil || h.Device.Backend != "live" || len(h.Device.FDs) != 1 || len(h.Device.Data) != 0 {
		t.Fatalf("the device state from the store: %+v", h.Device)
	}
	cfg.Adopt = &h
	succBE := &storingBackend{backendOf: backendOf{&instantGPU{}}}
	succ, err := New(cfg, succBE)
	if err != nil {
		t.Fatal(err)
	}
	defer succ.Close()
	if succBE.adopted == nil || succBE.adopted.Backend != "live" {
		t.Fatalf("the successor's backend adopted %+v", succBE.adopted)
	}
	if fds := store.passed()["vm/d/device/live/0"]; len(fds) != 1 {
		t.Fatalf("after the adoption the state is stored %d times, want once", len(fds))
	}
}

// The backend's StoreKept stores a device state in place of the one it
// stored before (the store itself adds a descriptor to a name it has: a
// successor would find the old one first), and a VM deleted takes its
// device state out of the store.
func TestStoreKeptReplaces(t *testing.T) {
	store := &memStore{fds: map[string][]int{}}
	cfg := oneChannel(t, "r", store)
	v, err := New(cfg, &storingBackend{backendOf: backendOf{&instantGPU{}}})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC) // a worker started again
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := (deviceStore{v}).StoreKept(backend.Kept{Backend: "live", FDs: []int{fd}}); err != nil {
		t.Fatal(err)
	}
	fds := store.passed()["vm/r/device/live/0"]
	if len(fds) != 1 || !sameFile(t, fds[0], fd) {
		t.Fatalf("stored again: %d descriptors under the name, want the new one alone", len(fds))
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	for name := range store.passed() {
		if strings.HasPrefix(name, "vm/r/device/") {
			t.Errorf("%s stays stored after the vm is deleted", name)
		}
	}
}

func sameFile(t *testing.T, a, b int) bool {
	t.Helper()
	var sa, sb unix.Stat_t
	if err := unix.Fstat(a, &sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fstat(b, &sb); err != nil {
		t.Fatal(err)
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// crash leaves v as a crash of the mediator does (nothing closed; its
// doorbell server stops serving) and returns what the store passes the
// successor: its own copies, as LISTEN_FDS passes them.
func crash(t *testing.T, v *VM, store *memStore) map[string][]int {
	t.Helper()
	v.mu.Lock()
	srv := v.server
	v.server = nil
	v.mu.Unlock()
	if _, err := srv.Export(); err != nil {
		t.Fatal(err)
	}
	if v.sys != nil {
		v.sys.Close()
	}
	stored := store.passed()
	for name, fds := range stored {
		for i, fd := range fds {
			var err error
			if stored[name][i], err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3); err != nil {
				t.Fatal(err)
			}
		}
	}
	return stored
}

// A VM on a backend that keeps its device state in files from its attach
// on (the sim) stores them in the fd store when it is created, before any
// quiesce; a successor rebuilt from the store adopts them and goes on in
// them (they stay stored, under the same names), and deleting the VM
// takes them out.
func TestStoreLiveDeviceState(t *testing.T) {
	store := &memStore{fds: map[string][]int{}}
	cfg := oneChannel(t, "d", store)
	old := newSim(t)
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
	data := bytes.Repeat([]byte("0123456789abcdef"), 5000)
	_, readBack := filledBuffer(t, v, data)
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
	succBE := newSim(t)
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
	if !bytes.Equal(readBack("after the take-over"), data) {
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

// filledBuffer joins v as a guest, writes data into its heap and copies it
// into device buffer 4. run submits commands on the guest's channel and
// waits for them; readBack copies buffer 4 back past data in the heap and
// returns what it held (when says when, for a failure).
func filledBuffer(t *testing.T, v *VM, data []byte) (run func(...abi.Command) error, readBack func(when string) []byte) {
	t.Helper()
	dev, ch, ctx := guestChannel(t, v)
	if err := dev.WriteHeap(0, data); err != nil {
		t.Fatal(err)
	}
	run = func(cmds ...abi.Command) error {
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
	readBack = func(when string) []byte {
		t.Helper()
		if err := run(abi.Command{Op: abi.OpCopy, Handle: 4, Dir: abi.CopyDeviceToHost, HeapOff: n, Length: n}); err != nil {
			t.Fatalf("reading the buffer back %s: %v", when, err)
		}
		got := make([]byte, n)
		if err := dev.ReadHeap(n, got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	return run, readBack
}

// gapStore is a memStore that looks, after every change, whether each of
// names is stored (once watch is set), and notes every change that left
// one out: a crash then would leave a successor without it.
type gapStore struct {
	*memStore
	names []string
	watch atomic.Bool
	gaps  []string // guarded by memStore.mu
}

func (s *gapStore) Store(name string, fds ...int) error {
	err := s.memStore.Store(name, fds...)
	s.check("store " + name)
	return err
}

func (s *gapStore) Remove(name string) error {
	err := s.memStore.Remove(name)
	s.check("remove " + name)
	return err
}

func (s *gapStore) check(op string) {
	if !s.watch.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.names {
		if len(s.fds[n]) != 1 {
			s.gaps = append(s.gaps, fmt.Sprintf("after %s: %s has %d descriptors", op, n, len(s.fds[n])))
		}
	}
}

// The sim's device files stay stored, whole, at every instant of a
// hand-over and of a successor's adoption, whether it adopts them from
// the hand-over or from the store after a crash: the VM goes on in the
// very files stored, and nothing removes them to store them again (a
// crash in between would leave the next successor without them).
func TestDeviceStoredThroughAdoption(t *testing.T) {
	for _, how := range []string{"hand-over", "crash"} {
		t.Run(how, func(t *testing.T) {
			names := []string{"vm/g/device/sim/0", "vm/g/device/sim/1"}
			store := &gapStore{memStore: &memStore{fds: map[string][]int{}}, names: names}
			cfg := oneChannel(t, "g", store)
			old := newSim(t)
			v, err := New(cfg, old)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			data := bytes.Repeat([]byte("stored through "), 3000)
			_, readBack := filledBuffer(t, v, data)
			store.watch.Store(true)
			h, err := v.Export(0)
			if err != nil {
				t.Fatal(err)
			}
			if how == "crash" { // the successor has what the store passes it
				if h, err = FromStore("g", abi.Vectors(1), store.passed()); err != nil {
					t.Fatal(err)
				}
			}
			if h.Device == nil || !h.DeviceStored {
				t.Fatalf("the device state handed over: %+v, stored %v", h.Device, h.DeviceStored)
			}
			succBE := newSim(t)
			cfg.Adopt = &h
			succ, err := New(cfg, succBE)
			if err != nil {
				t.Fatalf("adopting: %v", err)
			}
			defer succ.Close()
			store.watch.Store(false)
			if !bytes.Equal(readBack("after the adoption"), data) {
				t.Error("the buffer read back after the adoption differs")
			}
			store.mu.Lock()
			gaps := store.gaps
			store.mu.Unlock()
			for _, g := range gaps {
				t.Errorf("a crash here loses the device state: %s", g)
			}
		})
	}
}

// A VM created afresh that fails to start after its backend attached it
// (its socket cannot be made) leaves no device files in the store.
func TestFailedStartUnstoresDeviceState(t *testing.T) {
	store := &memStore{fds: map[string][]int{}}
	cfg := oneChannel(t, "f", store)
	cfg.Socket = t.TempDir() + "/no/such/dir/f.sock"
	be := newSim(t)
	if _, err := New(cfg, be); err == nil {
		t.Fatal("a vm whose socket cannot be made started")
	}
	for name := range store.passed() {
		if strings.HasPrefix(name, "vm/f/device/") {
			t.Errorf("%s stays stored after the vm failed to start", name)
		}
	}
}

// oneChannel is the configuration of VM name, of one channel, with its
// socket in a directory of the test's, storing its descriptors in store
// (nil: none).
func oneChannel(t *testing.T, name string, store FDStore) Config {
	t.Helper()
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: 1 << 20, Channels: 1, RingEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	return Config{Name: name, ID: 1, Weight: 1, Layout: l, Limits: abi.DefaultLimits(), Socket: t.TempDir() + "/" + name + ".sock", Store: store}
}

// newSim is a sim backend, closed when the test ends.
func newSim(t *testing.T) backend.Backend {
	t.Helper()
	be, err := sim.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	return be
}
