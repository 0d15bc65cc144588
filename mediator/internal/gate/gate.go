// Package gate applies the scheduler's decisions to VMs: a held VM's
// doorbells are latched (its channels stop forwarding; its commands wait in
// its rings, nothing is lost), and a released VM's channels are polled at
// once so that what arrived meanwhile is forwarded. Lock order: Gate.mu, then
// a channel's locks.
package gate

import (
	"slices"
	"sync"
)

// Channel is what the gate needs of a channel (channel.Channel).
type Channel interface {
	SetHeld(held bool)
	Poll()
	Pending() bool
}

// Gate latches and releases VMs.
type Gate struct {
	mu   sync.Mutex
	vms  map[uint32][]Channel
	held map[uint32]bool
}

// New returns an empty gate.
func New() *Gate {
	return &Gate{vms: map[uint32][]Channel{}, held: map[uint32]bool{}}
}

// Add registers a VM's channels, released.
func (g *Gate) Add(vm uint32, chans []Channel) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.vms[vm] = slices.Clone(chans)
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
