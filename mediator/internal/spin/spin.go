// Package spin decides how long the mediator busy-polls a VM's rings after
// a doorbell or a completion, instead of sleeping until the next doorbell:
// a Window per VM, adaptive (it grows while its spins find work or a
// doorbell follows a spin that gave up too soon, and halves when doorbells
// come further apart than the longest window), and one Budget for all of them that caps the CPU spent
// spinning. Nothing spins without a doorbell or a completion first, so an
// idle VM costs nothing.
//
// A Window belongs to one goroutine (the VM's doorbell goroutine); a
// Budget is shared and locks.
package spin

import (
	"fmt"
	"sync"
	"time"
)

// Config is the spinning of every VM.
type Config struct {
	// Window is the longest a VM's doorbell goroutine busy-polls its rings
	// after a doorbell, a completion or work it found (the window adapts
	// between MinWindow and it); 0 turns spinning off.
	Window time.Duration
	// Cores caps the CPU all VMs together spend spinning, in cores (1: up
	// to one core's time a second, over any number of VMs); a VM whose
	// spin finds the cap spent blocks until its next doorbell.
	Cores float64
}

// Defaults: a window that covers a guest's turnaround between a completion
// and its next command (a few µs when it is tight) with room, and at most
// one core, on a host of any size, for all the VMs' spinning together.
const (
	DefaultWindow = 50 * time.Microsecond
	DefaultCores  = 1.0
	// MinWindow is where a window starts and how far it shrinks.
	MinWindow = 2 * time.Microsecond
)

// DefaultConfig returns the defaults.
func DefaultConfig() Config { return Config{Window: DefaultWindow, Cores: DefaultCores} }

// Validate rejects a window that is negative or over a millisecond (past
// that, sleeping until the doorbell costs less than spinning for it) and a
// cap that is negative.
func (c Config) Validate() error {
	if c.Window < 0 || c.Window > time.Millisecond {
		return fmt.Errorf("doorbell spin window %v: want 0 (off) to 1ms", c.Window)
	}
	if c.Cores < 0 {
		return fmt.Errorf("doorbell spin cap %v cores: must not be negative", c.Cores)
	}
	return nil
}

// Budget is the CPU time all windows may spin: a token bucket of ns,
// refilled at cores ns a ns, holding at most 10 ms of it.
type Budget struct {
	mu     sync.Mutex
	perNs  float64
	burst  float64
	tokens float64
	last   int64
	spent  int64 // ns spun, all windows
}

// budgetBurst is how much spinning the bucket holds.
const budgetBurst = 10 * time.Millisecond

// NewBudget caps spinning at cores (0: no spinning at all).
func NewBudget(cores float64) *Budget {
	b := float64(budgetBurst) * min(cores, 1)
	return &Budget{perNs: cores, burst: b, tokens: b}
}

// take charges ns of spinning at now; false: the cap is spent.
func (b *Budget) take(now, ns int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now > b.last {
		b.tokens = min(b.burst, b.tokens+float64(now-b.last)*b.perNs)
		b.last = now
	}
	if b.tokens < float64(ns) || b.perNs == 0 {
		return false
	}
	b.tokens -= float64(ns)
	b.spent += ns
	return true
}

// Spent is the CPU time spun so far, all windows.
func (b *Budget) Spent() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Duration(b.spent)
}

// chargeEvery is how much spinning a window pays the budget for at once,
// in advance: a lock taken every few µs, not every poll.
const chargeEvery = int64(4 * time.Microsecond)

// preempted is the gap between two looks of a spin that means the
// spinning thread was preempted (a look takes well under a µs).
const preempted = int64(20 * time.Microsecond)

// Window is one VM's busy-poll window. Times are monotonic ns.
type Window struct {
	budget   *Budget
	max      int64
	cur      int64 // the window now, MinWindow..max
	deadline int64 // spinning until; 0: not spinning
	ended    int64 // when the last spin ended; 0: never
	paid     int64 // the spin is paid for up to here
	looked   int64 // the last Spin call of the spin in progress
}

// NewWindow is a window of at most max (0: never spins) charged to b.
func NewWindow(max time.Duration, b *Budget) *Window {
	return &Window{budget: b, max: int64(max), cur: min(int64(MinWindow), int64(max))}
}

// Start begins or renews a spin at now (a doorbell that brought work). As
// KVM's halt polling does: a doorbell that comes within the longest window
// of the last spin's end means that spin gave up too soon, and the window
// doubles; one that comes later means no spin would have caught it, and
// the window halves.
func (w *Window) Start(now int64) {
	if w.max == 0 || w.budget == nil {
		return
	}
	if w.deadline == 0 {
		if !w.budget.take(now, chargeEvery) {
			return // the cap is spent: no spin
		}
		switch {
		case w.ended == 0:
		case now-w.ended <= w.max: // a longer spin would have caught it
			w.cur = min(2*w.cur, w.max)
		default: // no spin would have: the VM idles between doorbells
			w.cur = max(w.cur/2, min(int64(MinWindow), w.max))
		}
		w.paid, w.looked = now+chargeEvery, now
	}
	w.deadline = max(w.deadline, now+w.cur)
}

// Found notes work the spin found at now: the window doubles and the spin
// goes on for it.
func (w *Window) Found(now int64) {
	if w.deadline == 0 {
		return
	}
	w.cur = min(2*w.cur, w.max)
	w.deadline = max(w.deadline, now+w.cur)
	w.looked = now
}

// Extend keeps a spin in progress going for the window from now (a
// completion: the guest's next command is likely to follow); it starts
// none.
func (w *Window) Extend(now int64) {
	if w.deadline != 0 {
		w.deadline = max(w.deadline, now+w.cur)
	}
}

// Spin reports whether to go on spinning at now, paying the budget for the
// time it will spin. A spin whose looks are far apart (the thread was
// preempted: more threads want the CPUs than there are) stops and halves
// the window, as KVM's halt polling stops on a busy host.
func (w *Window) Spin(now int64) bool {
	if w.deadline == 0 {
		return false
	}
	if now-w.looked > preempted {
		// The spinner was off the CPU: the CPUs are oversubscribed, and
		// spinning takes CPU from the guest it waits for. Stop, shrink,
		// and do not count the gap as a spin that gave up too soon.
		w.cur = max(w.cur/2, min(int64(MinWindow), w.max))
		w.deadline, w.ended = 0, 0
		return false
	}
	w.looked = now
	if now < w.deadline {
		if now < w.paid {
			return true
		}
		if w.budget.take(now, chargeEvery) {
			w.paid = now + chargeEvery
			return true
		}
	}
	w.deadline, w.ended = 0, now
	return false
}

// Spinning reports whether a spin is in progress (Start began one and
// Spin has not ended it).
func (w *Window) Spinning() bool { return w.deadline != 0 }

// Current is the window now.
func (w *Window) Current() time.Duration { return time.Duration(w.cur) }
