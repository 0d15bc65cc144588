// Package sdktest is an in-process fake Sluice host for tests of guest code:
// a Transport whose region is a plain byte slice with a valid ABI v1 header,
// and a host loop that serves the channels when a doorbell rings. It follows
// the host's contract (records complete in order, a failing record stops the
// channel until the guest resets it) without a GPU or a mediator.
package sdktest

import (
	"errors"
	"fmt"
	"sync"
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
}

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
}

var _ sdk.Transport = (*Host)(nil)

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
	}
	h.r = shm.New(h.mem)
	abi.EncodeHeader(h.mem, abi.Header{
		VersionMajor: abi.VersionMajor,
		VersionMinor: abi.VersionMinor,
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
