package spin

import (
	"testing"
	"time"
)

const us = int64(time.Microsecond)

// spinUntilDone steps w from now in 1 µs steps until it stops, and returns
// when it stopped.
func spinUntilDone(w *Window, now int64) int64 {
	for w.Spin(now) {
		now += us
	}
	return now
}

func TestWindowAdapts(t *testing.T) {
	b := NewBudget(1)
	w := NewWindow(50*time.Microsecond, b)
	if w.Current() != MinWindow {
		t.Fatalf("starts at %v, want %v", w.Current(), MinWindow)
	}
	if w.Spin(1) {
		t.Fatal("spins with no doorbell")
	}
	now := int64(1000 * us)
	w.Start(now)
	end := spinUntilDone(w, now)
	if got := end - now; got != int64(MinWindow) {
		t.Fatalf("a spin that found nothing lasted %v, want the window %v", time.Duration(got), MinWindow)
	}
	// A doorbell right after the spin gave up: the window doubles.
	w.Start(end + us)
	if w.Current() != 2*MinWindow {
		t.Fatalf("after a doorbell just past the spin: %v, want %v", w.Current(), 2*MinWindow)
	}
	// Work found keeps doubling it up to the longest, and the spin goes on.
	for range 10 {
		now += 2 * us
		if !w.Spin(now) {
			t.Fatal("stopped while finding work")
		}
		w.Found(now)
	}
	if w.Current() != 50*time.Microsecond {
		t.Fatalf("after work found: %v, want the longest, 50µs", w.Current())
	}
	end = spinUntilDone(w, now)
	// A spin that found nothing halves it; doorbells long after the spin
	// ended do not grow it.
	for range 10 {
		end += int64(time.Millisecond)
		w.Start(end)
		end = spinUntilDone(w, end)
	}
	if w.Current() != MinWindow {
		t.Fatalf("after idle spins: %v, want %v", w.Current(), MinWindow)
	}
}

// A spin whose thread was preempted stops at once and shrinks its window,
// and the doorbell after it does not count the gap as a spin that gave up
// too soon.
func TestWindowStopsWhenPreempted(t *testing.T) {
	w := NewWindow(50*time.Microsecond, NewBudget(1))
	now := int64(us)
	for range 4 { // grow to 32 µs
		w.Start(now)
		w.Found(now)
		now += us
	}
	before := w.Current()
	if !w.Spin(now) {
		t.Fatal("not spinning")
	}
	now += 25 * us // off the CPU
	if w.Spin(now) {
		t.Fatal("went on spinning after a 25 µs gap between looks")
	}
	if w.Current() != before/2 {
		t.Fatalf("window %v after a preempted spin, want %v", w.Current(), before/2)
	}
	w.Start(now + us)
	if w.Current() != before/2 {
		t.Fatalf("window %v after the doorbell that followed, want %v (no growth)", w.Current(), before/2)
	}
}

func TestWindowOff(t *testing.T) {
	for _, w := range []*Window{NewWindow(0, NewBudget(1)), NewWindow(DefaultWindow, nil)} {
		w.Start(1)
		w.Found(1)
		w.Extend(1)
		if w.Spin(1) {
			t.Fatal("a window of 0 or without a budget spins")
		}
	}
}

func TestExtendStartsNothing(t *testing.T) {
	w := NewWindow(DefaultWindow, NewBudget(1))
	w.Extend(1)
	if w.Spin(2) {
		t.Fatal("a completion started a spin")
	}
	w.Start(10 * us)
	w.Extend(11 * us) // past the 2 µs window from 10
	if !w.Spin(12*us) || w.Spin(13*us+1) {
		t.Fatal("a completion did not extend the spin by the window, or extended it further")
	}
}

// The budget caps the spinning of all windows: two windows spinning
// without end get the cap's share of the time between them.
func TestBudgetCaps(t *testing.T) {
	b := NewBudget(0.5)
	ws := []*Window{NewWindow(time.Millisecond, b), NewWindow(time.Millisecond, b)}
	var spun int64
	const second = int64(time.Second)
	for now := int64(1); now < second; now += us {
		for _, w := range ws {
			w.Start(now) // a doorbell every µs: they would spin all the time
			w.Found(now)
			if w.Spin(now) {
				spun += us
			}
		}
	}
	// Up to half a core over a second, plus the bucket's start.
	if max := second/2 + int64(budgetBurst); spun > max+int64(len(ws))*chargeEvery || spun < second/2-int64(budgetBurst) {
		t.Fatalf("spun %v in a second at a cap of half a core", time.Duration(spun))
	}
	if b.Spent() > time.Duration(second/2+int64(budgetBurst)) {
		t.Fatalf("budget counts %v spent", b.Spent())
	}
	if NewBudget(0).take(1, 1) {
		t.Fatal("a budget of 0 cores lets a window spin")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		c  Config
		ok bool
	}{
		{DefaultConfig(), true},
		{Config{}, true},
		{Config{Window: time.Millisecond, Cores: 16}, true},
		{Config{Window: -1}, false},
		{Config{Window: 2 * time.Millisecond}, false},
		{Config{Window: time.Microsecond, Cores: -1}, false},
	} {
		if err := tc.c.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v, want ok %v", tc.c, err, tc.ok)
		}
	}
}
