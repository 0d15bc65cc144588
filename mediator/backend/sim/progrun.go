package sim

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/slotcall"
)

// exec is a launch's running state.
type exec struct {
	stop   chan struct{} // closed to end the program: abort or fault
	once   sync.Once
	code   atomic.Uint32 // abi.ErrorCode the command completes with
	res    residency
	inCall atomic.Int64 // callers in a call now
	peak   atomic.Int64 // the most callers in a call at once
	calls  atomic.Int64 // calls made
}

// end stops the program with code (the first code wins).
func (e *exec) end(code abi.ErrorCode) {
	e.once.Do(func() {
		e.code.Store(uint32(code))
		close(e.stop)
	})
}

// run runs the program to its end: work-groups become resident in grid
// order as the residency allows (waves), each in a goroutine of its own.
func (l *launch) run() abi.ErrorCode {
	l.res.free = l.resident
	l.res.wake = make(chan struct{}, 1)
	l.area = l.area.WithStop(l.stop)
	var wg sync.WaitGroup
	for g := 0; g < l.groups && l.a.slots > 0; g++ {
		if !l.res.acquire(l.items, l.stop) {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.runGroup(g)
		}()
	}
	wg.Wait()
	l.end(abi.OK)
	return abi.ErrorCode(l.code.Load())
}

// runGroup runs work-group g and gives its residency back as its work-items
// end. Callers by granularity (abi/kernels.go): every work-item, in a
// goroutine each; the group's first work-item; the kernel's first. With
// strong ordering at work-group granularity the group's other work-items
// wait at the barriers around the call, staying resident; otherwise they
// have nothing to do and leave at once, making room for other groups.
func (l *launch) runGroup(g int) {
	switch {
	case l.prog.group != nil && l.strong():
		l.fail(l.prog.group(l, g))
		l.res.release(l.items)
	case l.prog.group != nil: // relaxed: the caller works alone
		l.res.release(l.items - 1)
		l.fail(l.prog.group(l, g))
		l.res.release(1)
	case l.a.gran == abi.ProgWorkItem:
		var wg sync.WaitGroup
		for i := range l.items {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.fail(l.prog.call(l, g*l.items+i))
				l.res.release(1)
			}()
		}
		wg.Wait()
	case l.a.gran == abi.ProgWorkGroup && l.strong():
		l.fail(l.prog.call(l, g))
		l.res.release(l.items)
	case l.a.gran == abi.ProgWorkGroup || g == 0:
		l.res.release(l.items - 1)
		l.fail(l.prog.call(l, g))
		l.res.release(1)
	default: // kernel granularity: groups other than 0 make no call
		l.res.release(l.items)
	}
}

// strong reports whether the group's work-items wait at barriers around the
// calls: strong ordering, except at kernel granularity (always relaxed).
func (l *launch) strong() bool {
	return l.a.order == abi.ProgStrong && l.a.gran != abi.ProgKernel
}

// fail ends the program on a caller's error: an abort is the aborter's code
// already; anything else (a slot lost to a scribbler or a broken host) is a
// fault of the kernel, ErrDevice.
func (l *launch) fail(err error) {
	if err != nil && !errors.Is(err, slotcall.ErrAborted) {
		l.end(abi.ErrDevice)
	}
}

// call makes one call from caller c, counting concurrent callers.
func (l *launch) call(c int, req slotcall.Request) (slotcall.Result, error) {
	n := l.inCall.Add(1)
	for p := l.peak.Load(); n > p && !l.peak.CompareAndSwap(p, n); p = l.peak.Load() {
	}
	defer l.inCall.Add(-1)
	l.calls.Add(1)
	req.Context = l.a.context
	if l.useRing {
		return l.area.RingCall(l.slot(c), l.ringCtr, req)
	}
	return l.area.Call(l.slot(c), req)
}

// residency bounds the work-items resident at once. Only the program's own
// goroutine acquires, so one waiter at most.
type residency struct {
	mu   sync.Mutex
	free int
	wake chan struct{}
}

func (r *residency) acquire(n int, stop <-chan struct{}) bool {
	for {
		r.mu.Lock()
		if r.free >= n {
			r.free -= n
			r.mu.Unlock()
			return true
		}
		r.mu.Unlock()
		select {
		case <-r.wake:
		case <-stop:
			return false
		}
	}
}

func (r *residency) release(n int) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	r.free += n
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}
