// Package spin is how Sluice's spinning loops (the syscall poller, the
// proxy's receive loop, a VM's doorbell goroutine while it busy-polls the
// rings, a guest's wait for a completion) give their processor back to the
// Go scheduler.
//
// runtime.Gosched puts the goroutine on the scheduler's global run queue,
// under its lock: on a host of many processors it costs microseconds, so a
// loop that yields every few looks spends most of its time there, and a
// request that lands meanwhile waits for it (measured on a 16-processor GPU
// host: a third of a spinning poller's profile in the scheduler, and a
// microsecond or more on a round trip). With 4 processors or more a
// spinning goroutine has one to itself and need not yield for others; it
// still yields every Period, so a host with more spinners than processors
// makes progress without waiting for the runtime's 10 ms preemption. Below
// 4 processors the loop yields on every look: a spinner that does not keeps
// its peers off the only other processor (measured on 2: round trips of 1.5
// µs became 18 µs).
package spin

import (
	"runtime"
	"time"
)

// Period is the longest a spinning goroutine runs between yields on a host
// of 4 processors or more.
const Period = 100 * time.Microsecond

// clockEvery is how many idle looks go by between clock reads.
const clockEvery = 32

// Yielder yields for one spinning loop; the zero value is not ready, use
// New. It is not safe for concurrent use.
type Yielder struct {
	always bool
	period time.Duration // between yields on 4 processors or more; 0: Period
	looks  uint
	start  time.Time
	last   time.Duration // since start, at the last yield
}

// New returns a Yielder for a host of runtime.GOMAXPROCS processors.
func New() *Yielder { return NewEvery(Period) }

// NewEvery is New with a period of its own between yields on a host of 4
// processors or more, for a loop whose every yield is paid by the work it
// waits for (a doorbell goroutine's: the round trip whose record comes
// while it yields).
func NewEvery(period time.Duration) *Yielder {
	return &Yielder{always: runtime.GOMAXPROCS(0) < 4, period: period, start: time.Now()}
}

// Restart begins a new spin at now: the next yield is due a Period from
// it (on 4 processors or more). It keeps New's reading of the processors,
// so a loop that spins many times over (a wait per command) pays for that
// once.
func (y *Yielder) Restart(now time.Time) {
	y.looks, y.start, y.last = 0, now, 0
}

// Idle is called on every look that found nothing to do; it yields when
// one is due, and reports whether it did.
func (y *Yielder) Idle() bool {
	if y.always {
		runtime.Gosched()
		return true
	}
	if y.looks++; y.looks%clockEvery != 0 {
		return false
	}
	period := y.period
	if period == 0 {
		period = Period
	}
	if now := time.Since(y.start); now-y.last >= period {
		y.last = now
		runtime.Gosched()
		return true
	}
	return false
}
