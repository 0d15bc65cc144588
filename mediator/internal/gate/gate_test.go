package gate

import (
	"slices"
	"testing"

	"github.com/sluice-gpu/sluice/mediator/internal/channel"
)

type fakeChannel struct {
	held    bool
	polls   int
	pending bool
}

func (f *fakeChannel) SetHeld(h bool) { f.held = h }
func (f *fakeChannel) Poll()          { f.polls++ }
func (f *fakeChannel) Pending() bool  { return f.pending }

func TestApply(t *testing.T) {
	g := New()
	a := []*fakeChannel{{}, {}}
	b := []*fakeChannel{{pending: true}}
	g.Add(1, []Channel{a[0], a[1]})
	g.Add(2, []Channel{b[0]})

	g.Apply([]uint32{1, 99})
	if !a[0].held || !a[1].held || b[0].held || !g.Held(1) || g.Held(2) {
		t.Fatalf("after hold 1: a %v %v b %v", a[0].held, a[1].held, b[0].held)
	}
	if w := g.Waiting(); len(w) != 0 {
		t.Fatalf("waiting %v: vm 1 has nothing pending", w)
	}
	g.Apply([]uint32{2})
	if a[0].held || a[0].polls != 1 || a[1].polls != 1 || !b[0].held {
		t.Fatalf("after switch: a held %v polls %d, b held %v", a[0].held, a[0].polls, b[0].held)
	}
	if w := g.Waiting(); !slices.Equal(w, []uint32{2}) {
		t.Fatalf("waiting %v, want [2]", w)
	}
	g.Apply([]uint32{2}) // unchanged: no extra polls or toggles
	if a[0].polls != 1 || !b[0].held {
		t.Fatal("re-applying the same decision changed something")
	}
	g.Remove(2)
	if b[0].held || g.Held(2) {
		t.Fatal("removed vm still held")
	}
	g.Apply(nil)
	if a[0].held || b[0].polls != 0 {
		t.Fatalf("final: a held %v, b polled %d", a[0].held, b[0].polls)
	}
}

// budgetedChannel is a channel of a VM with an in-flight budget.
type budgetedChannel struct {
	fakeChannel
	b *channel.Budget
}

func (c *budgetedChannel) Budget() *channel.Budget { return c.b }

func TestSetBudget(t *testing.T) {
	g := New()
	b := channel.NewBudget(0)
	g.SetBudget(5_000_000)
	g.Add(1, []Channel{&budgetedChannel{b: b}})
	g.Add(2, []Channel{&fakeChannel{}})
	if b.Limit() != 5_000_000 {
		t.Fatalf("a VM added after SetBudget has limit %d", b.Limit())
	}
	g.SetBudget(7_000_000)
	if st, ok := g.Budget(1); !ok || st.LimitNs != 7_000_000 || b.Limit() != 7_000_000 {
		t.Fatalf("budget of vm 1: %+v %v", st, ok)
	}
	if _, ok := g.Budget(2); ok {
		t.Fatal("vm 2's channels have no budget, yet the gate reports one")
	}
	g.SetBudget(-1)
	if b.Limit() != 0 {
		t.Fatalf("a negative budget left limit %d, want none", b.Limit())
	}
	g.Remove(1)
	if _, ok := g.Budget(1); ok {
		t.Fatal("removed vm's budget still reported")
	}
}

// stallChannel is a channel that says how long it waited for room, and
// logs its polls.
type stallChannel struct {
	fakeChannel
	id, ticket int
	log        *[]int
}

func (s *stallChannel) Poll()           { *s.log = append(*s.log, s.id) }
func (s *stallChannel) Stalled() uint64 { return uint64(s.ticket) }

// TestReleaseServesTheLongestWaitingFirst: a released VM's channels that
// waited for room in its budget are polled first, the longest waiting
// first, then the others in their order.
func TestReleaseServesTheLongestWaitingFirst(t *testing.T) {
	var log []int
	chans := []Channel{
		&stallChannel{id: 0, log: &log}, &stallChannel{id: 1, ticket: 9, log: &log},
		&stallChannel{id: 2, log: &log}, &stallChannel{id: 3, ticket: 4, log: &log},
	}
	g := New()
	g.Add(1, chans)
	g.Apply([]uint32{1})
	log = nil
	g.Apply(nil)
	if want := []int{3, 1, 0, 2}; !slices.Equal(log, want) {
		t.Fatalf("released channels polled in order %v, want %v", log, want)
	}
}
