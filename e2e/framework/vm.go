package framework

import (
	"context"
	"strconv"

	"github.com/sluice-gpu/sluice/api/hostapi"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
)

// VMSpec describes a VM to create with `sluicectl vm create`. Fields left
// zero take the daemon's defaults.
type VMSpec struct {
	Name        string
	Weight      uint32
	Channels    int
	RingEntries int
	RegionSize  string // as sluicectl takes it: bytes or with a KiB/MiB/GiB suffix
	Volume      string // host directory, the VM's system-call root and its guest's /volume
	Memory      string // device memory quota, as sluicectl takes it (e.g. "256MiB")
	MaxCommand  string // longest command, a duration as sluicectl takes it (e.g. "50ms")
	Owner       string // who may open the endpoint, as sluicectl takes it (e.g. "nobody:nogroup")
}

// VMOption sets one property of a VMSpec.
type VMOption func(*VMSpec)

// NewVM builds a VMSpec named name from options.
func NewVM(name string, opts ...VMOption) VMSpec {
	s := VMSpec{Name: name}
	for _, o := range opts {
		o(&s)
	}
	return s
}

// WithWeight sets the VM's share of the GPU.
func WithWeight(w uint32) VMOption { return func(s *VMSpec) { s.Weight = w } }

// WithChannels sets the number of command channels.
func WithChannels(n int) VMOption { return func(s *VMSpec) { s.Channels = n } }

// WithRingEntries sets the entries per channel ring.
func WithRingEntries(n int) VMOption { return func(s *VMSpec) { s.RingEntries = n } }

// WithRegionSize sets the shared-memory region size, e.g. "8MiB".
func WithRegionSize(size string) VMOption { return func(s *VMSpec) { s.RegionSize = size } }

// WithVolume sets the VM's volume: the host directory its GPU system calls
// see as their root and its QEMU guest mounts at /volume (GuestVolumeDir).
func WithVolume(dir string) VMOption { return func(s *VMSpec) { s.Volume = dir } }

// WithMemory sets the VM's device memory quota, e.g. "256MiB".
func WithMemory(size string) VMOption { return func(s *VMSpec) { s.Memory = size } }

// WithMaxCommand sets the VM's longest command, e.g. "50ms".
func WithMaxCommand(d string) VMOption { return func(s *VMSpec) { s.MaxCommand = d } }

// WithOwner sets the user who may open the VM's endpoint (vm create --owner).
func WithOwner(owner string) VMOption { return func(s *VMSpec) { s.Owner = owner } }

// CreateArgs is the sluicectl command line that creates the VM (printing it
// as JSON).
func (s VMSpec) CreateArgs() []string {
	args := []string{"vm", "create", s.Name, "--json"}
	if s.Weight != 0 {
		args = append(args, "--weight", strconv.FormatUint(uint64(s.Weight), 10))
	}
	if s.Channels != 0 {
		args = append(args, "--channels", strconv.Itoa(s.Channels))
	}
	if s.RingEntries != 0 {
		args = append(args, "--ring-entries", strconv.Itoa(s.RingEntries))
	}
	if s.RegionSize != "" {
		args = append(args, "--region-size", s.RegionSize)
	}
	if s.Volume != "" {
		args = append(args, "--volume", s.Volume)
	}
	if s.Memory != "" {
		args = append(args, "--memory", s.Memory)
	}
	if s.MaxCommand != "" {
		args = append(args, "--max-command", s.MaxCommand)
	}
	if s.Owner != "" {
		args = append(args, "--owner", s.Owner)
	}
	return args
}

// CreateVM creates the VM and returns it as the daemon reports it, after
// checking that it matches the spec and that its endpoint socket exists.
func (d *Daemon) CreateVM(s VMSpec) hostapi.VM {
	ginkgo.GinkgoHelper()
	var vm hostapi.VM
	d.CtlJSON(&vm, s.CreateArgs()...)
	gomega.Expect(vm.Name).To(gomega.Equal(s.Name))
	if s.Weight != 0 {
		gomega.Expect(vm.Weight).To(gomega.Equal(s.Weight))
	}
	if s.Channels != 0 {
		gomega.Expect(vm.Channels).To(gomega.Equal(s.Channels))
	}
	if s.Volume != "" {
		gomega.Expect(vm.Volume).To(gomega.Equal(s.Volume), "the daemon should report the volume vm %q was created with (hostapi.VM.Volume)", vm.Name)
	}
	gomega.Expect(IsSocket(vm.Endpoint)).To(gomega.BeTrue(), "endpoint %q of vm %q should be a socket", vm.Endpoint, vm.Name)
	return vm
}

// GetVM returns `sluicectl vm get NAME --json`.
func (d *Daemon) GetVM(name string) hostapi.VM {
	ginkgo.GinkgoHelper()
	var vm hostapi.VM
	d.CtlJSON(&vm, "vm", "get", name, "--json")
	return vm
}

// ListVMs returns `sluicectl vm list --json`.
func (d *Daemon) ListVMs() []hostapi.VM {
	ginkgo.GinkgoHelper()
	var vms []hostapi.VM
	d.CtlJSON(&vms, "vm", "list", "--json")
	return vms
}

// Stats returns the daemon's live stats (GET /v1/stats, what `sluicectl
// top` samples), through the host API client.
func (d *Daemon) Stats() hostapi.Stats {
	ginkgo.GinkgoHelper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	st, err := hostapi.NewClient(d.Socket).Stats(ctx)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "GET /v1/stats")
	return st
}

// Usage returns `sluicectl vm usage NAME --json`.
func (d *Daemon) Usage(name string) hostapi.Usage {
	ginkgo.GinkgoHelper()
	var u hostapi.Usage
	d.CtlJSON(&u, "vm", "usage", name, "--json")
	return u
}
