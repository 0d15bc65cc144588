package bench

import (
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/bench/spec"
	"github.com/sluice-gpu/sluice/mediator/internal/channel"
	"golang.org/x/sys/unix"
)

// minRing is the ring size of a VM whose depth does not need more.
const minRing = 64

// host is one VM on the host side: its region (a memfd mapping laid out as
// a real one), the host half of its channels, and its context on the sim.
type host struct {
	id     uint32
	vm     spec.VM
	region *shm.Region
	layout abi.Layout
	chans  []*channel.Channel
	gpu    backend.VM
	guest  *guest

	// onCompletion is the accounting controller's hook (NEON); nil if none.
	onCompletion func(id uint32, c backend.Completion)

	mu     sync.Mutex // billed is read by the snapshot, maybe from another goroutine
	billed int64

	// outstanding counts the commands submitted to the backend and not
	// completed; occ the VMs with some (shared by the run's hosts).
	outstanding atomic.Int64
	occ         *occupancy
}

// occupancy counts the VMs with commands on the backend and the most at
// one instant.
type occupancy struct {
	now, max atomic.Int64
}

func (o *occupancy) enter() {
	n := o.now.Add(1)
	for {
		m := o.max.Load()
		if n <= m || o.max.CompareAndSwap(m, n) {
			return
		}
	}
}

func (o *occupancy) leave() { o.now.Add(-1) }

// counted is a host's backend VM as its channels see it: it counts what
// they submit.
type counted struct{ h *host }

func (c counted) Submit(ch int, cmd abi.Command, tag uint64) error {
	if c.h.outstanding.Add(1) == 1 {
		c.h.occ.enter()
	}
	err := c.h.gpu.Submit(ch, cmd, tag)
	if err != nil {
		c.h.done()
	}
	return err
}

// done counts one command no longer on the backend.
func (h *host) done() {
	if h.outstanding.Add(-1) == 0 {
		h.occ.leave()
	}
}

// ringEntries is the smallest power of two ≥ depth, at least minRing.
func ringEntries(depth int) int {
	if depth <= minRing {
		return minRing
	}
	return 1 << bits.Len(uint(depth-1))
}

// newHost lays out vm's region, attaches it to s and creates its channels.
func newHost(s gpu, id uint32, vm spec.VM, window uint32, occ *occupancy) (*host, error) {
	layout, err := abi.NewLayout(abi.LayoutConfig{
		RegionSize:  regionSize(vm.Channels, ringEntries(vm.Workload.InFlight())),
		Channels:    vm.Channels,
		RingEntries: ringEntries(vm.Workload.InFlight()),
	})
	if err != nil {
		return nil, fmt.Errorf("laying out vm %q: %w", vm.Name, err)
	}
	// A memfd mapping, as the daemon's regions are: the cuda backend maps
	// the heap into the VM's GPU worker process from it. The mapping lives
	// until the process ends (a guest goroutine may read it late).
	memfd, err := shm.NewMemfd("sluice-bench-"+vm.Name, int64(layout.RegionSize))
	if err != nil {
		return nil, fmt.Errorf("creating the region of vm %q: %w", vm.Name, err)
	}
	defer unix.Close(memfd) // the mapping and the backend's own copy outlive it
	mem, err := shm.Map(memfd, int(layout.RegionSize))
	if err != nil {
		return nil, fmt.Errorf("mapping the region of vm %q: %w", vm.Name, err)
	}
	h := &host{id: id, vm: vm, layout: layout, region: shm.New(mem), occ: occ}
	heap := h.region.Bytes(layout.HeapOff, layout.HeapSize)
	h.gpu, err = s.Attach(backend.VMSpec{
		ID: id, Name: vm.Name, Channels: vm.Channels, Heap: heap,
		HeapFile:    &backend.FileRange{FD: memfd, Offset: int64(layout.HeapOff)},
		MaxInFlight: int(layout.RingEntries),
		Complete:    s.serial(h.complete),
	})
	if err != nil {
		return nil, fmt.Errorf("attaching vm %q: %w", vm.Name, err)
	}
	budget := channel.NewBudget(0) // the engine's gate sizes it
	for c := range vm.Channels {
		ch := channel.New(c, h.region, layout, abi.DefaultLimits(), counted{h})
		ch.SetWindow(window)
		ch.SetBudget(budget)
		h.chans = append(h.chans, ch)
	}
	return h, nil
}

// regionSize is the smallest power-of-two region that holds the rings and a
// heap page.
func regionSize(channels, entries int) uint64 {
	need := uint64(abi.PageSize)*3 + uint64(channels)*(abi.ChannelDescSize+uint64(entries)*abi.RecordSize)
	size := uint64(abi.MinRegionSize)
	for size < need {
		size *= 2
	}
	return size
}

// complete is the sim's Complete callback: bill the command, publish it in
// the channel's host line, then ring the guest's completion vector.
func (h *host) complete(c backend.Completion) {
	h.done()
	if c.Code == abi.OK {
		h.mu.Lock()
		h.billed += c.Busy()
		h.mu.Unlock()
	}
	if h.onCompletion != nil {
		h.onCompletion(h.id, c)
	}
	if c.Channel < 0 || c.Channel >= len(h.chans) {
		return
	}
	h.chans[c.Channel].Complete(channel.Completion{Index: uint32(c.Tag), Op: c.Op, Code: c.Code, BusyNs: c.Busy()})
	if h.guest != nil {
		h.guest.interrupt(c.Channel)
	}
}

func (h *host) billedNs() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.billed
}

// pollQueue defers the polls a gate makes when it releases VMs, so that the
// runner can forward their latched work in VM order: the gate releases in
// map order, which would make the sim's round robin, and so the whole run,
// differ from one run to the next.
//
// Under arbitration turns the gate releases a VM at completions and timers
// too, one at a time (in VM order when several), so polls go at once
// (direct).
type pollQueue struct {
	mu     sync.Mutex
	list   []*gated
	direct bool
}

// gated is a channel as the gate sees it.
type gated struct {
	*channel.Channel
	vm uint32
	q  *pollQueue
}

func (g *gated) Poll() {
	if g.q.direct {
		g.Channel.Poll()
		return
	}
	g.q.mu.Lock()
	g.q.list = append(g.q.list, g)
	g.q.mu.Unlock()
}

// flush polls the deferred channels in (VM, channel) order.
func (q *pollQueue) flush() {
	q.mu.Lock()
	list := q.list
	q.list = nil
	q.mu.Unlock()
	slices.SortStableFunc(list, func(a, b *gated) int {
		if a.vm != b.vm {
			return int(int64(a.vm) - int64(b.vm))
		}
		return a.Index() - b.Index()
	})
	for _, g := range list {
		g.Channel.Poll()
	}
}
