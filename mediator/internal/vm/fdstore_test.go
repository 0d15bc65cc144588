package vm

import (
	"sync"
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
	"golang.org/x/sys/unix"
)

// memStore is an fd store in the process: dups by name.
type memStore struct {
	mu  sync.Mutex
	fds map[string][]int
}

func (s *memStore) Store(name string, fds ...int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, fd := range fds {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			return err
		}
		s.fds[name] = append(s.fds[name], d)
	}
	return nil
}

func (s *memStore) Remove(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, fd := range s.fds[name] {
		unix.Close(fd)
	}
	delete(s.fds, name)
	return nil
}

// passed is what the store would pass a successor: duplicates of its
// descriptors, by name.
func (s *memStore) passed() map[string][]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]int{}
	for k, v := range s.fds {
		for _, fd := range v {
			d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
			if err != nil {
				panic(err)
			}
			out[k] = append(out[k], d)
		}
	}
	return out
}

// A VM keeps its descriptors in the store, a guest's while it is there;
// a successor rebuilt from the store (after a crash: positions from the
// region) takes the guest over, which goes on.
func TestFromStore(t *testing.T) {
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: 1 << 20, Channels: 1, RingEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	store := &memStore{fds: map[string][]int{}}
	cfg := Config{Name: "s", ID: 1, Weight: 1, Layout: l, Limits: abi.DefaultLimits(), Socket: t.TempDir() + "/s.sock", Store: store}
	v, err := New(cfg, backendOf{&instantGPU{}})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	leaving := dial(t, v)
	eventually(t, "the first guest is stored", func() bool { return len(store.passed()["vm/s/peer/1/conn"]) == 1 })
	leaving.Close()
	eventually(t, "the guest that left is removed", func() bool { return len(store.passed()["vm/s/peer/1/conn"]) == 0 })
	_, ch, ctx := guestChannel(t, v)
	k := kernel1us
	idx, err := ch.Submit(ctx, k, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Wait(ctx, idx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the second guest is stored", func() bool { return len(store.passed()["vm/s/peer/2/2"]) == 1 })

	// The crash: the predecessor stops serving (its copies stay open, as
	// a dead process's would be closed: the store's keep everything).
	if _, err := v.Export(0); err != nil {
		t.Fatal(err)
	}
	stored := store.passed()
	if got := StoredVMs(stored); len(got) != 1 || got[0] != "s" {
		t.Fatalf("stored vms %v, want [s]", got)
	}
	h, err := FromStore("s", abi.Vectors(1), stored)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 0 || len(h.Server.Peers) != 1 || h.Server.Peers[0].ID != 2 || h.Channels != nil {
		t.Fatalf("left %v, hand-over %+v: want everything taken, guest 2, positions from the region", stored, h)
	}
	cfg.Adopt, cfg.Store = &h, nil
	succ, err := New(cfg, backendOf{&instantGPU{}})
	if err != nil {
		t.Fatalf("taking over from the store: %v", err)
	}
	defer succ.Close()
	if idx, err = ch.Submit(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := ch.Wait(ctx, idx); err != nil {
		t.Fatalf("the guest after the take-over: %v", err)
	}
	if got := succ.Stats().Total.Kernels; got != 1 {
		t.Fatalf("the successor ran %d kernels, want the 1 submitted after the crash", got)
	}
	if c := ch.Completed(); c != 3 {
		t.Fatalf("completed %d, want 3 (the count goes on from the region)", c)
	}
}

// A store missing a VM's listener gives no hand-over.
func TestFromStoreIncomplete(t *testing.T) {
	if _, err := FromStore("x", 2, map[string][]int{"vm/x/memfd": {100}}); err == nil {
		t.Fatal("an incomplete store gave a hand-over")
	}
}
