package sdk_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/internal/shm"
	"golang.org/x/sys/unix"
)

// departing is a region whose connection to the host can end.
type departing struct {
	memTransport
	gone chan struct{}
	why  error
}

func (p *departing) Departed() <-chan struct{} { return p.gone }

func (p *departing) DepartErr() error {
	select {
	case <-p.gone:
		return p.why
	default:
		return nil
	}
}

func (p *departing) depart(why error) {
	p.why = why
	close(p.gone)
}

func openDeparting(t *testing.T) (*sdk.Device, *departing, *shm.Region) {
	t.Helper()
	mem, _ := validRegion(t)
	tr := &departing{memTransport: memTransport{mem: mem}, gone: make(chan struct{})}
	d, err := sdk.Open(tr)
	if err != nil {
		t.Fatal(err)
	}
	return d, tr, shm.New(mem)
}

func waitDone(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(deadlockGuard):
		t.Fatal("the watch did not end the context")
	}
}

// stillAlive asserts that ctx is not done for a while.
func stillAlive(t *testing.T, ctx context.Context, d time.Duration) {
	t.Helper()
	select {
	case <-ctx.Done():
		t.Fatalf("the watch ended the context: %v", context.Cause(ctx))
	case <-time.After(d):
	}
}

func TestWatchConnectionClosed(t *testing.T) {
	d, tr, _ := openDeparting(t)
	ctx, stop := d.Watch(t.Context(), 0)
	defer stop()
	stillAlive(t, ctx, 20*time.Millisecond)
	why := errors.New("server closed the connection")
	tr.depart(why)
	waitDone(t, ctx)
	cause := context.Cause(ctx)
	if !errors.Is(cause, sdk.ErrMediatorGone) || !errors.Is(cause, why) {
		t.Fatalf("cause %v, want ErrMediatorGone and the transport's reason", cause)
	}
	if got := sdk.Gone(ctx, ctx.Err()); got != cause {
		t.Errorf("Gone of the work's context error: %v, want the cause", got)
	}
	other := errors.New("doorbell failed")
	if got := sdk.Gone(ctx, other); !errors.Is(got, sdk.ErrMediatorGone) || !errors.Is(got, other) {
		t.Errorf("Gone of another error: %v, want both", got)
	}
	if got := sdk.Gone(ctx, nil); got != nil {
		t.Errorf("Gone of work that succeeded: %v", got)
	}
}

// A transport closed on this side is no mediator going away.
func TestWatchClosedHere(t *testing.T) {
	d, tr, _ := openDeparting(t)
	ctx, stop := d.Watch(t.Context(), 0)
	tr.depart(sdk.ErrClosedHere)
	stillAlive(t, ctx, 50*time.Millisecond)
	stop()
	if cause := context.Cause(ctx); !errors.Is(cause, context.Canceled) || errors.Is(cause, sdk.ErrMediatorGone) {
		t.Fatalf("cause after stop: %v, want context.Canceled", cause)
	}
	err := errors.New("x")
	if got := sdk.Gone(ctx, err); got != err {
		t.Errorf("Gone after a stop: %v, want the work's error", got)
	}
}

func TestWatchHeartbeat(t *testing.T) {
	const stall = time.Second
	d, _, r := openDeparting(t)
	ctx, stop := d.Watch(t.Context(), stall)
	defer stop()
	// A beating host: far more often than the stall.
	var last time.Time
	for i := range 60 {
		last = time.Now()
		r.Store64(abi.HdrHeartbeat, uint64(i+1))
		time.Sleep(5 * time.Millisecond)
	}
	if ctx.Err() != nil {
		t.Fatalf("a beating host judged gone: %v", context.Cause(ctx))
	}
	waitDone(t, ctx)
	if took := time.Since(last); took < stall {
		t.Errorf("judged gone %v after the last beat, before the stall of %v", took, stall)
	}
	if cause := context.Cause(ctx); !errors.Is(cause, sdk.ErrMediatorGone) || !strings.Contains(cause.Error(), "heartbeat") {
		t.Fatalf("cause %v, want ErrMediatorGone for the heartbeat", cause)
	}
}

// A host that never moves its heartbeat (a test's host, a mediator that
// has not beaten yet) is not judged by it.
func TestWatchHeartbeatNeverMoved(t *testing.T) {
	d, _, _ := openDeparting(t)
	ctx, stop := d.Watch(t.Context(), 10*time.Millisecond)
	stillAlive(t, ctx, 200*time.Millisecond)
	stop()
	if ctx.Err() == nil {
		t.Fatal("stop left the context alive")
	}
}

// Without a Departure and with the heartbeat off, Watch watches nothing.
func TestWatchNothing(t *testing.T) {
	mem, _ := validRegion(t)
	d, err := sdk.Open(&memTransport{mem: mem})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := d.Watch(t.Context(), 0)
	stillAlive(t, ctx, 20*time.Millisecond)
	stop()
	if !errors.Is(context.Cause(ctx), context.Canceled) {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
}

// unmapping is a region that its Close unmaps, as a real transport's does.
type unmapping struct {
	departing
	closed bool
}

func (u *unmapping) Close() error {
	u.closed = true
	return unix.Munmap(u.mem)
}

// TestCloseBeforeWatchStop closes the device while a watch still reads
// its heartbeat: Close ends the watch first (before, its goroutine read
// the unmapped region and faulted), without judging the mediator gone, and
// the watch's stop afterwards does nothing.
func TestCloseBeforeWatchStop(t *testing.T) {
	src, _ := validRegion(t)
	mem, err := unix.Mmap(-1, 0, len(src), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	copy(mem, src)
	tr := &unmapping{departing: departing{memTransport: memTransport{mem: mem}, gone: make(chan struct{})}}
	d, err := sdk.Open(tr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := d.Watch(t.Context(), 8*time.Millisecond) // looks every millisecond
	time.Sleep(5 * time.Millisecond)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if !tr.closed {
		t.Fatal("Close did not close the transport")
	}
	waitDone(t, ctx)
	if cause := context.Cause(ctx); errors.Is(cause, sdk.ErrMediatorGone) {
		t.Fatalf("closing the device judged the mediator gone: %v", cause)
	}
	time.Sleep(20 * time.Millisecond) // a watch still running would read the unmapped region now
	stop()
	// A watch of a closed device is over at once.
	ctx, stop = d.Watch(t.Context(), time.Second)
	defer stop()
	waitDone(t, ctx)
}
