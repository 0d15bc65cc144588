package sched

import (
	"math"
	"testing"
	"time"
)

// TestNextTurn: the least-charged candidate by weight gets the turn, ties
// go round robin, unknown and absent VMs are left out, and a VM back from
// idle is owed at most TurnBank.
func TestNextTurn(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for id, w := range map[uint32]uint32{1: 1, 2: 3, 3: 1} {
		if err := s.AddVM(id, w, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := s.NextTurn([]uint32{9}); ok {
		t.Fatal("a turn for an unknown VM")
	}
	// Ties: round robin after the last holder.
	var order []uint32
	for range 3 {
		id, _ := s.NextTurn([]uint32{1, 2})
		order = append(order, id)
	}
	if order[0] == order[1] || order[1] == order[2] {
		t.Fatalf("equal lags did not alternate: %v", order)
	}
	// Weights 1:3: charged the same time per turn, VM 2 gets three turns
	// to VM 1's one.
	turns := map[uint32]int{}
	for range 400 {
		id, _ := s.NextTurn([]uint32{1, 2})
		turns[id]++
		s.ChargeTurn(id, 1_000_000)
	}
	if turns[1] != 100 || turns[2] != 300 {
		t.Fatalf("turns %v, want 100 and 300", turns)
	}
	// VM 3 sat out the 400 ms: it comes back owed TurnBank, not 400 ms.
	id, _ := s.NextTurn([]uint32{1, 2, 3})
	if id != 3 {
		t.Fatalf("the idle VM did not get the next turn (got %d)", id)
	}
	// Lags are relative to the holder: VM 1 is now ahead of VM 3 by what
	// VM 3 was owed.
	if lag, _ := s.TurnLag(1); lag < int64(TurnBank)-1_000_000 || lag > int64(TurnBank)+1_000_000 {
		t.Fatalf("VM 1 %v ahead of VM 3 back from idle, want about %v (the bank)", time.Duration(lag), TurnBank)
	}
	owed := 0
	for {
		s.ChargeTurn(3, 5_000_000)
		if id, _ := s.NextTurn([]uint32{1, 3}); id != 3 {
			break
		}
		owed++
	}
	if owed < 9 || owed > 11 {
		t.Fatalf("VM 3 got %d more 5 ms turns before VM 1's, want 10 (50 ms owed)", owed)
	}
}

// TestBehind: Behind tells whether a VM would get the turn before every
// other one, and changes nothing (NextTurn afterwards picks as before).
func TestBehind(t *testing.T) {
	s := newTurnSched(t, 3)
	s.ChargeTurn(2, 5_000_000)
	s.ChargeTurn(3, 1_000_000)
	switch {
	case !s.Behind(1, []uint32{2, 3}):
		t.Fatal("the uncharged VM is not behind the charged ones")
	case s.Behind(3, []uint32{1, 2}):
		t.Fatal("VM 3 behind VM 1, which was charged less")
	case s.Behind(3, []uint32{3, 1}) || s.Behind(9, []uint32{1}):
		t.Fatal("behind itself, or an unknown VM behind")
	case !s.Behind(3, []uint32{2, 9}):
		t.Fatal("an unknown other counts")
	}
	for range 3 {
		s.Behind(1, []uint32{2, 3})
	}
	if id, _ := s.NextTurn([]uint32{2, 3}); id != 3 {
		t.Fatalf("NextTurn after Behind picked %d, want 3", id)
	}
	if lag, _ := s.TurnLag(2); lag <= 0 {
		t.Fatalf("VM 2's lag %d after VM 3's turn, want above 0", lag)
	}
}

// TestChargeTurnNegative: a negative charge (the gate netting an estimate
// charged ahead that exceeded the time used) lowers the turn lag, so that
// the charges of a turn add up to its busy time; the lag stops at its floor
// (TurnBank below the holder's), and extreme values neither overflow nor
// raise it.
func TestChargeTurnNegative(t *testing.T) {
	s := newTurnSched(t, 2)
	s.ChargeTurn(1, 10_000_000)
	s.ChargeTurn(1, -4_000_000)
	if lag, _ := s.TurnLag(1); lag != 6_000_000 {
		t.Fatalf("charged 10 ms and -4 ms: lag %v, want 6ms", time.Duration(lag))
	}
	// 6 ms charged to VM 1 against VM 2's 5 ms: VM 2 is next.
	s.ChargeTurn(2, 5_000_000)
	if id, _ := s.NextTurn([]uint32{1, 2}); id != 2 {
		t.Fatalf("VM 1 netted to 6 ms, VM 2 at 5 ms: NextTurn picked %d, want 2", id)
	}
	for _, c := range []int64{-int64(time.Hour), math.MinInt64} {
		s.ChargeTurn(1, c)
		if lag, _ := s.TurnLag(1); lag != -int64(TurnBank) {
			t.Fatalf("after a charge of %d: lag %v, want the floor -%v", c, time.Duration(lag), TurnBank)
		}
	}
	s.ChargeTurn(1, math.MaxInt64)
	if lag, _ := s.TurnLag(1); lag <= 0 {
		t.Fatalf("after a charge of MaxInt64: lag %d", lag)
	}
}

// newTurnSched returns a scheduler of n VMs, ids 1 to n, of weight 1.
func newTurnSched(t *testing.T, n uint32) *Scheduler {
	t.Helper()
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for id := uint32(1); id <= n; id++ {
		if err := s.AddVM(id, 1, 0); err != nil {
			t.Fatal(err)
		}
	}
	return s
}
