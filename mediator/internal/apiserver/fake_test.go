package apiserver

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// fakeService is a small in-memory Service: VMs by name, usage that
// outlives them, canned Version and Stats. fail, when set, is what every
// method returns instead.
type fakeService struct {
	mu      sync.Mutex
	fail    error
	version hostapi.Version
	stats   hostapi.Stats
	vms     map[string]hostapi.VM
	usage   map[string]hostapi.Usage
	policy  hostapi.PolicyState
	calls   []string
	// block, when set, holds Version until it is closed; entered is closed
	// when Version starts waiting.
	block, entered chan struct{}
}

var created = time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)

func newFake() *fakeService {
	return &fakeService{
		version: hostapi.Version{Version: "test", ABIMajor: 1, ABIMinor: 2, Backend: "sim", Clock: "virtual", Epoch: 1<<63 | 5},
		vms:     map[string]hostapi.VM{},
		usage:   map[string]hostapi.Usage{},
		policy:  hostapi.PolicyState{Policy: hostapi.PolicyDFQ, Accounting: "loga"},
	}
}

func (f *fakeService) record(format string, a ...any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, a...))
	return f.fail
}

func (f *fakeService) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeService) Version(context.Context) (hostapi.Version, error) {
	if err := f.record("Version"); err != nil {
		return hostapi.Version{}, err
	}
	if f.block != nil {
		close(f.entered)
		<-f.block
	}
	return f.version, nil
}

func (f *fakeService) CreateVM(_ context.Context, req hostapi.CreateVMRequest) (hostapi.VM, error) {
	if err := f.record("CreateVM %+v", req); err != nil {
		return hostapi.VM{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.Name == "" {
		return hostapi.VM{}, fmt.Errorf("vm name %q: %w", req.Name, hostapi.ErrInvalid)
	}
	if _, ok := f.vms[req.Name]; ok {
		return hostapi.VM{}, fmt.Errorf("vm %q: %w", req.Name, hostapi.ErrExists)
	}
	vm := hostapi.VM{
		Name: req.Name, ID: uint32(len(f.vms) + 1), Weight: max(req.Weight, 1), Cap: req.Cap, Memory: req.Memory, MaxCommandNs: req.MaxCommandNs, Channels: 4, RingEntries: 256,
		RegionSize: 4 << 20, HeapSize: 3 << 20, Endpoint: "/run/sluice/vms/" + req.Name + ".sock",
		Vectors: 6, State: hostapi.StateWaiting, Created: created,
	}
	f.vms[req.Name] = vm
	if _, ok := f.usage[req.Name]; !ok {
		f.usage[req.Name] = hostapi.Usage{Name: req.Name, Since: created}
	}
	return vm, nil
}

func (f *fakeService) DeleteVM(_ context.Context, name string) error {
	if err := f.record("DeleteVM %s", name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.vms[name]; !ok {
		return fmt.Errorf("vm %q: %w", name, hostapi.ErrNotFound)
	}
	delete(f.vms, name)
	return nil
}

func (f *fakeService) GetVM(_ context.Context, name string) (hostapi.VM, error) {
	if err := f.record("GetVM %s", name); err != nil {
		return hostapi.VM{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	vm, ok := f.vms[name]
	if !ok {
		return hostapi.VM{}, fmt.Errorf("vm %q: %w", name, hostapi.ErrNotFound)
	}
	return vm, nil
}

// ListVMs returns nil, not an empty slice, when there are none, as a
// careless service might.
func (f *fakeService) ListVMs(context.Context) ([]hostapi.VM, error) {
	if err := f.record("ListVMs"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []hostapi.VM
	for _, name := range slices.Sorted(maps.Keys(f.vms)) {
		out = append(out, f.vms[name])
	}
	return out, nil
}

func (f *fakeService) Usage(_ context.Context, name string) (hostapi.Usage, error) {
	if err := f.record("Usage %s", name); err != nil {
		return hostapi.Usage{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.usage[name]
	if !ok {
		return hostapi.Usage{}, fmt.Errorf("vm %q: %w", name, hostapi.ErrNotFound)
	}
	return u, nil
}

func (f *fakeService) Stats(context.Context) (hostapi.Stats, error) {
	if err := f.record("Stats"); err != nil {
		return hostapi.Stats{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats, nil
}

// updateString renders an UpdateVMRequest for the call log, "-" for an
// absent field.
func updateString(req hostapi.UpdateVMRequest) string {
	w, c := "-", "-"
	if req.Weight != nil {
		w = fmt.Sprint(*req.Weight)
	}
	if req.Cap != nil {
		c = fmt.Sprint(*req.Cap)
	}
	s := "weight=" + w + " cap=" + c
	if req.Memory != nil {
		s += fmt.Sprint(" memory=", *req.Memory)
	}
	if req.MaxCommandNs != nil {
		s += fmt.Sprint(" max_command_ns=", *req.MaxCommandNs)
	}
	return s
}

func (f *fakeService) UpdateVM(_ context.Context, name string, req hostapi.UpdateVMRequest) (hostapi.VM, error) {
	if err := f.record("UpdateVM %s %s", name, updateString(req)); err != nil {
		return hostapi.VM{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	vm, ok := f.vms[name]
	if !ok {
		return hostapi.VM{}, fmt.Errorf("vm %q: %w", name, hostapi.ErrNotFound)
	}
	if req.Weight != nil {
		vm.Weight = *req.Weight
	}
	if req.Cap != nil {
		vm.Cap = *req.Cap
	}
	if req.Memory != nil {
		vm.Memory = *req.Memory
	}
	if req.MaxCommandNs != nil {
		vm.MaxCommandNs = *req.MaxCommandNs
	}
	f.vms[name] = vm
	return vm, nil
}

func (f *fakeService) Policy(context.Context) (hostapi.PolicyState, error) {
	if err := f.record("Policy"); err != nil {
		return hostapi.PolicyState{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.policy, nil
}

// SetPolicy refuses an accounting method other than its own, as the
// contract says a service does.
func (f *fakeService) SetPolicy(_ context.Context, st hostapi.PolicyState) (hostapi.PolicyState, error) {
	if err := f.record("SetPolicy %+v", st); err != nil {
		return hostapi.PolicyState{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if st.Accounting != "" && st.Accounting != f.policy.Accounting {
		return hostapi.PolicyState{}, fmt.Errorf("accounting is set at start: %w", hostapi.ErrInvalid)
	}
	f.policy.Policy = st.Policy
	return f.policy, nil
}

// sampleStats is a Stats with one busy VM and one idle one.
func sampleStats() hostapi.Stats {
	busy := hostapi.VMStats{
		AccountedNs: 1_400_000_000, Share: 0.625, Held: true, HeldNs: 2_500_000_001, LagNs: -3,
		VM: hostapi.VM{Name: "busy", ID: 1, Weight: 2, Cap: 0.5, Channels: 2, RingEntries: 64, RegionSize: 1 << 20,
			HeapSize: 1 << 19, Endpoint: "/run/sluice/vms/busy.sock", Vectors: 4, State: hostapi.StateConnected,
			Peers: 1, Created: created, Timeouts: 2,
			InflightBudgetNs: 3_250_000, InflightNs: 2_000_001, EstimateNs: 100_000, BudgetStalls: 17},
		Usage:     hostapi.Usage{Name: "busy", GPUNs: 1_500_000_000, Kernels: 3, Commands: 10, Errors: 1, Since: created},
		Doorbells: 42,
		ChannelStats: []hostapi.ChannelStats{
			{Index: 0, State: "busy", InFlight: 3},
			{Index: 1, State: "failed", Error: "ERR_RING_OVERFLOW", ErrorCode: 7},
		},
	}
	return hostapi.Stats{Backend: "sim", Clock: "virtual", Policy: hostapi.PolicyDFQ, Accounting: "loga",
		PollerCPUNs: 12_345_678_901, Periods: 77, Now: 123456789, GPUBusyNs: 1_500_000_000, VMs: []hostapi.VMStats{busy}}
}
