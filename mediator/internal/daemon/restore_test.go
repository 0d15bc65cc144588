package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/backend/sim"
)

// nameStore stands in for the fd store where only the names matter: it
// holds the names stored, not the descriptors.
type nameStore struct {
	mu    sync.Mutex
	names map[string]int // descriptors stored under each
}

func (s *nameStore) Store(name string, fds ...int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names[name] += len(fds)
	return nil
}

func (s *nameStore) Remove(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.names, name)
	return nil
}

func (s *nameStore) has(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.names[name] > 0
}

func (s *nameStore) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for name := range s.names {
		out = append(out, name)
	}
	return out
}

// dropFromList rewrites the state dir's vm list without name, as an
// older vms.json left by a failed save would be.
func dropFromList(t *testing.T, stateDir, name string) {
	t.Helper()
	path := filepath.Join(stateDir, "vms.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f vmsFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	kept := f.VMs[:0]
	for _, req := range f.VMs {
		if req.Name != name {
			kept = append(kept, req)
		}
	}
	f.VMs = kept
	if b, err = json.Marshal(f); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A VM handed over that the successor's vm list lacks is closed and taken
// out of the fd store whole, its device state with it: nothing of it is
// there for a VM created anew under its name, or a successor after a
// crash, to take.
func TestRestoreUnstoresAVMNotListed(t *testing.T) {
	cfg := DefaultConfig()
	dir := t.TempDir()
	cfg.Socket, cfg.StateDir, cfg.Proxy.Binary = filepath.Join(dir, "sluiced.sock"), filepath.Join(dir, "state"), "off"
	store := &nameStore{names: map[string]int{}}
	cfg.FDStore = store
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	createVM(t, d, "a")
	createVM(t, d, "b")
	m, err := d.Handover(0)
	if err != nil {
		t.Fatal(err)
	}
	if !store.has("vm/b/device/sim/0") || !store.has("vm/b/listener") {
		t.Fatalf("vm b's device state and listener are not stored before: %v", store.list())
	}
	dropFromList(t, cfg.StateDir, "b")
	d2, err := Adopt(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	for _, name := range store.list() {
		if strings.HasPrefix(name, "vm/b/") {
			t.Errorf("%s stays stored for a vm that is gone", name)
		}
	}
	if !store.has("vm/a/memfd") {
		t.Errorf("vm a, adopted, is not stored: %v", store.list())
	}
}

// barrierBackend is the sim whose Attach of a VM with kept device state
// waits until want of them wait together (or a long while, then fails):
// an adoption that takes long, as the cuda backend's of a GPU worker
// that does not settle does.
type barrierBackend struct {
	*sim.Sim
}

var adoptBarrier struct {
	sync.Mutex
	want, arrived int
	all           chan struct{}
}

func init() {
	backend.Register("test-adopt-barrier", func(o backend.Options) (backend.Backend, error) {
		s, err := sim.New(o)
		if err != nil {
			return nil, err
		}
		return barrierBackend{s}, nil
	})
}

func (b barrierBackend) Attach(spec backend.VMSpec) (backend.VM, error) {
	if spec.Adopt != nil {
		adoptBarrier.Lock()
		adoptBarrier.arrived++
		if adoptBarrier.arrived == adoptBarrier.want {
			close(adoptBarrier.all)
		}
		all := adoptBarrier.all
		adoptBarrier.Unlock()
		select {
		case <-all:
		case <-time.After(20 * time.Second):
			return nil, errors.New("the other adoptions did not run meanwhile")
		}
	}
	return b.Sim.Attach(spec)
}

// The VMs a successor takes over are adopted in parallel: one whose
// device state takes long to adopt does not hold the others.
func TestRestoreAdoptsInParallel(t *testing.T) {
	cfg := DefaultConfig()
	dir := t.TempDir()
	cfg.Socket, cfg.StateDir, cfg.Proxy.Binary = filepath.Join(dir, "sluiced.sock"), filepath.Join(dir, "state"), "off"
	cfg.Backend = "test-adopt-barrier"
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"a", "b", "c"}
	for _, name := range names {
		createVM(t, d, name)
	}
	m, err := d.Handover(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range m.VMs {
		if h.VM.Device == nil {
			t.Fatalf("vm %s handed over without its device state", h.Name)
		}
	}
	adoptBarrier.Lock()
	adoptBarrier.want, adoptBarrier.arrived, adoptBarrier.all = len(names), 0, make(chan struct{})
	adoptBarrier.Unlock()
	d2, err := Adopt(cfg, m)
	if err != nil {
		t.Fatalf("adopting vms whose device states are adopted together: %v", err)
	}
	defer d2.Close()
	vms, err := d2.ListVMs(context.Background())
	if err != nil || len(vms) != len(names) {
		t.Fatalf("after the adoption: %v, %v; want %v", vms, err, names)
	}
	for i, v := range vms {
		if v.Name != names[i] || v.ID != m.VMs[i].ID {
			t.Errorf("vm %d: %s, id %d; want %s, id %d (the list's order and the hand-over's ids)", i, v.Name, v.ID, names[i], m.VMs[i].ID)
		}
	}
}
