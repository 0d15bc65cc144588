package sdk

import (
	"errors"
	"fmt"
	"sync"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
)

// Sentinel errors.
var (
	// ErrHeader means the region's header is missing, invalid or speaks
	// another ABI major version.
	ErrHeader = errors.New("invalid region header")
	// ErrProtocol means the host published an index no correct host could
	// (get ahead of put, say).
	ErrProtocol = errors.New("host protocol violation")
	// ErrRange means an argument (channel, heap offset, record index) is out
	// of range.
	ErrRange = errors.New("out of range")
)

// Device is one opened shared region. Its methods are safe for concurrent
// use; each Channel is not (see Channel).
type Device struct {
	t    Transport
	r    *shm.Region
	hdr  abi.Header
	poll Poll
	irq  Interrupts // nil: the host cannot wake waiters, they poll
	// polls: the host announces abi.FeaturePolling, so a submission that
	// finds HdrPolling set leaves out the doorbell.
	polls  bool
	mu     sync.Mutex
	chans  []*Channel
	closed bool
	// watches are the running watches' ends (Watch), by id: Close ends
	// them before the region goes, as their goroutines read it.
	watches   map[uint64]func()
	nextWatch uint64
}

// Option configures Open.
type Option func(*Device)

// WithPoll sets how the device's channels poll for completion (DefaultPoll
// otherwise).
func WithPoll(p Poll) Option { return func(d *Device) { d.poll = p } }

// Open validates the header of t's region and returns a Device over it. It
// does not take ownership of t on failure: the caller closes it.
func Open(t Transport, opts ...Option) (*Device, error) {
	d := &Device{t: t, poll: DefaultPoll()}
	for _, o := range opts {
		o(d)
	}
	if err := d.poll.Validate(); err != nil {
		return nil, fmt.Errorf("opening device: %w", err)
	}
	region := t.Region()
	hdr, err := DecodeRegionHeader(region)
	if err != nil {
		return nil, err
	}
	d.hdr = hdr
	if irq, ok := t.(Interrupts); ok && hdr.Features&abi.FeatureWake != 0 {
		d.irq = irq
	}
	d.polls = hdr.Features&abi.FeaturePolling != 0
	d.r = shm.New(region)
	d.chans = make([]*Channel, hdr.Layout.Channels)
	return d, nil
}

// DecodeRegionHeader copies the header out of region and validates it
// against the region's size.
func DecodeRegionHeader(region []byte) (abi.Header, error) {
	if len(region) < abi.HeaderSize {
		return abi.Header{}, fmt.Errorf("%w: region of %d bytes cannot hold a header", ErrHeader, len(region))
	}
	var b [abi.HeaderSize]byte
	copy(b[:], region)
	hdr, err := abi.DecodeHeader(b[:], uint64(len(region)))
	if err != nil {
		return abi.Header{}, fmt.Errorf("%w: %w", ErrHeader, err)
	}
	return hdr, nil
}

// Header is the header as validated by Open. Epoch and Heartbeat change
// later: read them live with Epoch and Heartbeat.
func (d *Device) Header() abi.Header { return d.hdr }

// Transport is the transport the device was opened on.
func (d *Device) Transport() Transport { return d.t }

// Layout is the region's validated geometry.
func (d *Device) Layout() abi.Layout { return d.hdr.Layout }

// HostPeer is the ivshmem peer id of the host, the doorbells' target.
func (d *Device) HostPeer() uint16 { return uint16(d.hdr.HostPeerID) }

// Epoch is the mediator's current epoch; it changes when the mediator
// restarts.
func (d *Device) Epoch() uint64 { return d.r.Load64(abi.HdrEpoch) }

// Heartbeat is the mediator's heartbeat counter.
func (d *Device) Heartbeat() uint64 { return d.r.Load64(abi.HdrHeartbeat) }

// Doorbell rings vector on the host peer.
func (d *Device) Doorbell(vector int) error {
	if vector < 0 || vector >= abi.Vectors(int(d.hdr.Layout.Channels)) {
		return fmt.Errorf("doorbell vector %d: %w", vector, ErrRange)
	}
	if err := d.t.Doorbell(d.HostPeer(), vector); err != nil {
		return fmt.Errorf("ringing doorbell %d: %w", vector, err)
	}
	return nil
}

// hostPolling reports whether the host busy-polls the channels' put
// indices now (abi.FeaturePolling), so that a put just stored needs no
// doorbell. The load is sequentially consistent, as the store of put
// before it.
func (d *Device) hostPolling() bool {
	return d.polls && d.r.Load32(abi.HdrPolling) != 0
}

// Heap is the heap part of the region. The host reads it while commands that
// reference it run: don't change bytes a command in flight uses.
func (d *Device) Heap() []byte {
	l := d.hdr.Layout
	return d.r.Bytes(l.HeapOff, l.HeapSize)
}

// WriteHeap copies b into the heap at off.
func (d *Device) WriteHeap(off uint64, b []byte) error {
	if !d.hdr.Layout.HeapRange(off, uint64(len(b))) {
		return fmt.Errorf("writing %d bytes at heap offset %d: %w", len(b), off, ErrRange)
	}
	d.r.CopyIn(d.hdr.Layout.HeapOff+off, b)
	return nil
}

// ReadHeap copies len(b) bytes of the heap at off into b.
func (d *Device) ReadHeap(off uint64, b []byte) error {
	if !d.hdr.Layout.HeapRange(off, uint64(len(b))) {
		return fmt.Errorf("reading %d bytes at heap offset %d: %w", len(b), off, ErrRange)
	}
	d.r.CopyOut(b, d.hdr.Layout.HeapOff+off)
	return nil
}

// Channel returns channel i. Every call for the same i returns the same
// Channel.
func (d *Device) Channel(i int) (*Channel, error) {
	if i < 0 || i >= len(d.chans) {
		return nil, fmt.Errorf("channel %d of %d: %w", i, len(d.chans), ErrRange)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.chans[i] == nil {
		d.chans[i] = newChannel(d, uint32(i))
	}
	return d.chans[i], nil
}

// Close ends the device's watches (their contexts are cancelled, with no
// cause: nobody went away) and closes the transport; the Device and its
// Channels must not be used afterwards.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	stops := d.watches
	d.watches = nil
	d.mu.Unlock()
	for _, stop := range stops {
		stop() // returns once its goroutine, which reads the region, ended
	}
	return d.t.Close()
}
