// Package sdktest is an in-process fake Sluice host for tests of guest code:
// a Transport whose region is a plain byte slice with a valid ABI v1 header,
// and a host loop that serves the channels when a doorbell rings. It follows
// the host's contract (records complete in order, a failing record stops the
// channel until the guest resets it) without a GPU or a mediator.
package sdktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/internal/shm"
)

// ErrClosed is returned by the doorbell of a closed host.
var ErrClosed = errors.New("fake host closed")

// ErrWrongPeer is returned by a doorbell aimed at a peer other than the host.
var ErrWrongPeer = errors.New("doorbell for a peer that is not the host")

// Handler runs one decoded command on channel ch, record index idx, and says
// how it ended. The default runs NOP and FENCE instantly and sleeps for
// THROTTLE.
type Handler func(ch, idx uint32, cmd abi.Command) abi.ErrorCode

// Config shapes a fake host. The zero value is abi.DefaultLayoutConfig with
// abi.DefaultLimits.
type Config struct {
	Layout     abi.LayoutConfig
	Limits     abi.Limits
	Epoch      uint64
	HostPeerID uint16 // announced in the header; 0 like the mediator's ivshmem server
	Handler    Handler
	// Wake announces abi.FeatureWake: the host signals a guest that armed
	// a channel's wake word, as the mediator does, through the Host's own
	// sdk.Interrupts (the guest is peer GuestPeerID).
	Wake bool
	// LoseWakes (with Wake): the host disarms the word as it would to
	// signal, and the signal is lost on the way.
	LoseWakes bool
}

// GuestPeerID is the guest's peer id on a fake host (sdk.Interrupts.ID).
const GuestPeerID = 1

// Host is the fake host. It also implements sdk.Transport.
type Host struct {
	cfg    Config
	layout abi.Layout
	mem    []byte
	r      *shm.Region
	wake   chan struct{}
	done   chan struct{}
	exited chan struct{}

	mu        sync.Mutex
	paused    bool
	doorbells map[int]int
	closed    bool
	failed    []bool // host-private: channel is stopped at its error

	vectors []chan struct{} // the guest's eventfds: capacity 1, signals coalesce
	wakes   atomic.Uint64   // signals sent to sleeping guests
}

var (
	_ sdk.Transport  = (*Host)(nil)
	_ sdk.Interrupts = (*Host)(nil)
)

// New starts a fake host on a region of its own. Close stops it.
func New(cfg Config) (*Host, error) { return Serve(nil, cfg) }

// Serve starts a fake host on mem (a mapped memfd, say), which must be as
// large as cfg's layout says, or on a region of its own when mem is nil. It
// writes the header; Kick (or Doorbell) makes it serve the channels.
func Serve(mem []byte, cfg Config) (*Host, error) {
	if cfg.Layout == (abi.LayoutConfig{}) {
		cfg.Layout = abi.DefaultLayoutConfig()
	}
	if cfg.Limits == (abi.Limits{}) {
		cfg.Limits = abi.DefaultLimits()
	}
	if cfg.Handler == nil {
		cfg.Handler = DefaultHandler
	}
	l, err := abi.NewLayout(cfg.Layout)
	if err != nil {
		return nil, fmt.Errorf("fake host layout: %w", err)
	}
	if mem == nil {
		mem = make([]byte, l.RegionSize)
	}
	if uint64(len(mem)) != l.RegionSize {
		return nil, fmt.Errorf("fake host: region of %d bytes, layout wants %d", len(mem), l.RegionSize)
	}
	h := &Host{
		cfg:       cfg,
		layout:    l,
		mem:       mem,
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		exited:    make(chan struct{}),
		doorbells: map[int]int{},
		failed:    make([]bool, l.Channels),
		vectors:   make([]chan struct{}, abi.Vectors(int(l.Channels))),
	}
	for i := range h.vectors {
		h.vectors[i] = make(chan struct{}, 1)
	}
	var features uint64
	if cfg.Wake {
		features = abi.FeatureWake
	}
	h.r = shm.New(h.mem)
	abi.EncodeHeader(h.mem, abi.Header{
		VersionMajor: abi.VersionMajor,
		VersionMinor: abi.VersionMinor,
		Features:     features,
		HostPeerID:   uint32(cfg.HostPeerID),
		Layout:       l,
		Epoch:        cfg.Epoch,
		Limits:       cfg.Limits,
	})
	go h.loop()
	return h, nil
}

// DefaultHandler completes NOP and FENCE at once, sleeps through THROTTLE
// and accepts everything else.
func DefaultHandler(_, _ uint32, cmd abi.Command) abi.ErrorCode {
	if cmd.Op == abi.OpThrottle && cmd.DurationNs > 0 {
		time.Sleep(time.Duration(cmd.DurationNs))
	}
	return abi.OK
}

// Layout is the host's own layout.
func (h *Host) Layout() abi.Layout { return h.layout }

// Region is the shared region.
func (h *Host) Region() []byte { return h.mem }

// Doorbell wakes the host loop.
func (h *Host) Doorbell(peer uint16, vector int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	if peer != h.cfg.HostPeerID {
		return fmt.Errorf("doorbell to peer %d: %w", peer, ErrWrongPeer)
	}
	if vector < 0 || vector >= abi.Vectors(int(h.layout.Channels)) {
		return fmt.Errorf("doorbell vector %d out of range", vector)
	}
	h.doorbells[vector]++
	h.kick()
	return nil
}

// Kick wakes the host loop as a doorbell would, for hosts served through
// another doorbell path (an ivshmem server's OnDoorbell, say). It never
// blocks.
func (h *Host) Kick() { h.kick() }

func (h *Host) kick() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// ID is the guest's peer id, GuestPeerID (sdk.Interrupts).
func (h *Host) ID() uint16 { return GuestPeerID }

// ClearVector drops the signals pending on the guest's vector.
func (h *Host) ClearVector(vector int) error {
	if vector < 0 || vector >= len(h.vectors) {
		return fmt.Errorf("vector %d out of range", vector)
	}
	select {
	case <-h.vectors[vector]:
	default:
	}
	return nil
}

// WaitVector blocks until the host signals the guest's vector or ctx ends.
func (h *Host) WaitVector(ctx context.Context, vector int) error {
	if vector < 0 || vector >= len(h.vectors) {
		return fmt.Errorf("vector %d out of range", vector)
	}
	select {
	case <-h.vectors[vector]:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wakes is how many signals the host sent to sleeping guests (Config.Wake).
func (h *Host) Wakes() uint64 { return h.wakes.Load() }

// wakeGuest signals a guest sleeping on channel c's wake word when what was
// just published is what it waits for (abi.WakeDue), as the mediator does.
func (h *Host) wakeGuest(c uint32) {
	if !h.cfg.Wake {
		return
	}
	d := h.layout.ChannelOff(c)
	w := h.r.Load64(d + abi.ChWake)
	peer, due := abi.WakeDue(w, h.r.Load32(d+abi.ChGet), h.failed[c])
	if !due || peer != GuestPeerID || !h.r.CompareAndSwap64(d+abi.ChWake, w, w&^abi.WakeArmed) {
		return
	}
	h.wakes.Add(1)
	if h.cfg.LoseWakes {
		return
	}
	select {
	case h.vectors[c] <- struct{}{}:
	default:
	}
}

// Doorbells is how many times vector was rung.
func (h *Host) Doorbells(vector int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.doorbells[vector]
}

// Pause stops serving channels (doorbells are remembered) until Resume.
func (h *Host) Pause() {
	h.mu.Lock()
	h.paused = true
	h.mu.Unlock()
}

// Resume serves channels again, including doorbells rung while paused.
func (h *Host) Resume() {
	h.mu.Lock()
	h.paused = false
	h.kick()
	h.mu.Unlock()
}

// Close stops the host loop and waits for it. It is idempotent; it does not
// free the region, which a guest may still read.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	close(h.done)
	h.mu.Unlock()
	<-h.exited
	return nil
}

func (h *Host) loop() {
	defer close(h.exited)
	for {
		select {
		case <-h.done:
			return
		case <-h.wake:
		}
		h.mu.Lock()
		paused := h.paused
		h.mu.Unlock()
		if paused {
			continue
		}
		for c := range h.layout.Channels {
			h.serve(c)
		}
	}
}
