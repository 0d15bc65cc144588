// Package gate applies the scheduler's decisions to VMs: a held VM's
// doorbells are latched (its channels stop forwarding; its commands wait in
// its rings, nothing is lost), and a released VM's channels are polled at
// once so that what arrived meanwhile is forwarded.
//
// A hold alone stops only new work: what a VM forwarded before it still
// runs. The gate therefore also sets each VM's in-flight budget
// (channel.Budget, shared by the VM's channels): the estimated GPU time the
// VM may keep forwarded and not completed, at least one command. With it a
// held VM's GPU use ends within a budget of the hold, and a co-runner's
// command waits behind at most a budget of the VM's work (and one command).
// The engine sizes it from the scheduler's period (SetBudget).
//
// Lock order: Gate.mu, then a channel's locks.
package gate

import (
	"slices"
	"sync"

	"github.com/sluice-gpu/sluice/mediator/internal/channel"
)

// Channel is what the gate needs of a channel (channel.Channel).
type Channel interface {
	SetHeld(held bool)
	Poll()
	Pending() bool
}

// Budgeted is a channel that shares its VM's in-flight budget
// (channel.Channel). The gate finds a VM's budget through its channels; a
// VM whose channels have none is not bounded.
type Budgeted interface {
	Budget() *channel.Budget
}

// Gate latches and releases VMs.
type Gate struct {
	mu      sync.Mutex
	vms     map[uint32][]Channel
	held    map[uint32]bool
	budgets map[uint32]*channel.Budget
	limit   int64 // every VM's budget, ns; 0: none
}

// New returns an empty gate; VMs' budgets are unbounded until SetBudget.
func New() *Gate {
	return &Gate{vms: map[uint32][]Channel{}, held: map[uint32]bool{}, budgets: map[uint32]*channel.Budget{}}
}

// Add registers a VM's channels, released, under the gate's budget.
func (g *Gate) Add(vm uint32, chans []Channel) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.vms[vm] = slices.Clone(chans)
	for _, c := range chans {
		if bc, ok := c.(Budgeted); ok && bc.Budget() != nil {
			g.budgets[vm] = bc.Budget()
			g.budgets[vm].SetLimit(g.limit)
			break
		}
	}
}

// SetBudget sets every VM's in-flight budget to ns (0: none) and starts a
// new period for the budgets' estimates (channel.Budget.Roll). The engine
// calls it at every period's end.
func (g *Gate) SetBudget(ns int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.limit = max(ns, 0)
	for _, b := range g.budgets {
		b.Roll()
		b.SetLimit(g.limit)
	}
}

// Budget returns a VM's budget state; false if it has none.
func (g *Gate) Budget(vm uint32) (channel.BudgetStats, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, ok := g.budgets[vm]
	if !ok {
		return channel.BudgetStats{}, false
	}
	return b.Stats(), true
}

// Remove forgets a VM, releasing it first.
func (g *Gate) Remove(vm uint32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held[vm] {
		for _, c := range g.vms[vm] {
			c.SetHeld(false)
		}
	}
	delete(g.vms, vm)
	delete(g.held, vm)
	delete(g.budgets, vm)
}

// Apply holds exactly the VMs in hold and releases every other VM that was
// held, forwarding its latched work. Unknown ids are ignored.
func (g *Gate) Apply(hold []uint32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	want := make(map[uint32]bool, len(hold))
	for _, id := range hold {
		if _, ok := g.vms[id]; ok {
			want[id] = true
		}
	}
	for id := range g.held {
		if !want[id] {
			for _, c := range g.vms[id] {
				c.SetHeld(false)
				c.Poll()
			}
			delete(g.held, id)
		}
	}
	for id := range want {
		if !g.held[id] {
			for _, c := range g.vms[id] {
				c.SetHeld(true)
			}
			g.held[id] = true
		}
	}
}

// Held reports whether a VM is held now.
func (g *Gate) Held(vm uint32) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held[vm]
}

// Waiting lists the held VMs that have latched work, sorted: the scheduler
// must count them active, or they would never be released.
func (g *Gate) Waiting() []uint32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []uint32
	for id := range g.held {
		for _, c := range g.vms[id] {
			if c.Pending() {
				out = append(out, id)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}
