package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrMediatorGone means the mediator went away: its side of the
// transport's connection closed, or its heartbeat stood still too long.
// Work waiting for the host would otherwise wait forever.
var ErrMediatorGone = errors.New("the mediator went away")

// Departure is implemented by a Transport that learns when the host's side
// of its connection goes away: transport/process, whose ivshmem server
// connection reads EOF when sluiced exits or is killed. A hand-over
// (SIGHUP) or a restart through systemd's fd store keeps the connection
// open, and so reports nothing.
type Departure interface {
	// Departed is closed when the connection to the host ended, for
	// whatever reason (also when the transport was closed).
	Departed() <-chan struct{}
	// DepartErr says why; it is nil while Departed is open, and wraps
	// ErrClosedHere when the transport itself was closed.
	DepartErr() error
}

// ErrClosedHere is a Departure's reason when this side closed the
// transport: nobody went away.
var ErrClosedHere = errors.New("transport closed")

// heartbeatChecks is how many times per stall the watch looks at the
// heartbeat.
const heartbeatChecks = 8

// Watch returns a context derived from ctx that is cancelled, with a cause
// that wraps ErrMediatorGone, when the mediator goes away: when the
// transport reports its connection gone (Departure), or when the header's
// heartbeat, once seen to move, does not move for stall (0: the heartbeat
// is not watched). sluiced publishes its heartbeat every second, also
// right after a hand-over or a restart. The pause of either is mostly well
// under a second, and bounded by sluiced's own waits: a hand-over by its
// --handover-wait plus, for a cuda VM whose GPU work does not settle, 10 s
// to keep its GPU worker and 5 s to adopt it; a restart after a crash by
// the service manager's restart delay plus the same 5 s (VMs are adopted
// in parallel). A stall shorter than that may judge a mediator gone that
// is only pausing. A host that never moves it (a test's host) is never
// judged by it. The context ends between stall and stall plus an eighth
// of it (at most a second) after the heartbeat's last move, and at once
// when the connection closed; context.Cause tells why (see Gone). stop
// ends the watch and cancels the context; closing the device stops it too
// (and a watch of a closed device is cancelled at once).
func (d *Device) Watch(ctx context.Context, stall time.Duration) (watched context.Context, stop context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		cancel(nil)
		return ctx, func() {}
	}
	var departed <-chan struct{}
	dep, _ := d.t.(Departure)
	if dep != nil {
		departed = dep.Departed()
	}
	var tick <-chan time.Time
	if stall > 0 {
		t := time.NewTicker(min(max(stall/heartbeatChecks, time.Millisecond), time.Second))
		context.AfterFunc(ctx, t.Stop)
		tick = t.C
	}
	if departed == nil && tick == nil {
		return ctx, func() { cancel(nil) }
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		last, moved, since := d.Heartbeat(), false, time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-departed:
				if err := dep.DepartErr(); !errors.Is(err, ErrClosedHere) {
					cancel(fmt.Errorf("%w: %w", ErrMediatorGone, err))
				}
				return
			case <-tick:
				// The clock after the load, not the tick's: a tick read
				// late would date a beat seen now too early.
				hb, now := d.Heartbeat(), time.Now()
				switch {
				case hb != last:
					last, moved, since = hb, true, now
				case moved && now.Sub(since) >= stall:
					cancel(fmt.Errorf("%w: its heartbeat stood still for %v", ErrMediatorGone, now.Sub(since).Round(time.Millisecond)))
					return
				}
			}
		}
	}()
	if d.watches == nil {
		d.watches = map[uint64]func(){}
	}
	id := d.nextWatch
	d.nextWatch++
	stopped := sync.OnceFunc(func() {
		cancel(nil)
		<-done
	})
	d.watches[id] = stopped
	return ctx, func() {
		stopped()
		d.mu.Lock()
		delete(d.watches, id)
		d.mu.Unlock()
	}
}

// Gone returns the cause of ctx's end if the mediator went away (ctx from
// Watch) and err is not nil: the error of work it cut short is that, and
// err otherwise.
func Gone(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); errors.Is(cause, ErrMediatorGone) {
		if errors.Is(err, context.Canceled) {
			return cause
		}
		return fmt.Errorf("%w (%w)", cause, err)
	}
	return err
}
