package process

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/vmm-plugin/ivshmem"
)

// ErrVectors means the peer joined with a vector count the region's channel
// count disagrees with.
var ErrVectors = errors.New("vector count disagrees with the region")

// Transport is a joined endpoint.
type Transport struct {
	client *ivshmem.Client
	region []byte
}

var (
	_ sdk.Transport  = (*Transport)(nil)
	_ sdk.Interrupts = (*Transport)(nil)
	_ sdk.Departure  = (*Transport)(nil)
)

// Dial joins the endpoint at path with vectors doorbell vectors per peer
// (0: learn the count from the host peer the endpoint announces first), maps
// the shared memory and checks that the region's header names as many
// channels as the vector count implies. ctx bounds the connection and
// handshake. With an explicit count, too few vectors fail the handshake at
// once and too many make it wait until ctx ends (both errors say so).
func Dial(ctx context.Context, path string, vectors int) (*Transport, error) {
	c, err := ivshmem.Dial(ctx, path, vectors)
	if errors.Is(err, ivshmem.ErrProtocol) {
		// The usual cause: the server hands each peer more eventfds than
		// the vectors we asked for.
		return nil, fmt.Errorf("joining endpoint with %d vectors (does the endpoint use more? it needs its channel count + 2): %w", vectors, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		// The handshake waits for vectors eventfds of our own; a server
		// with fewer vectors never sends the rest.
		return nil, fmt.Errorf("joining endpoint with %d vectors timed out (does the endpoint use fewer? it needs its channel count + 2): %w: %w", vectors, context.DeadlineExceeded, err)
	}
	if err != nil {
		return nil, fmt.Errorf("joining endpoint: %w", err)
	}
	vectors = c.Vectors()
	region, err := mapShm(c.ShmFD())
	if err != nil {
		c.Close()
		return nil, err
	}
	t := &Transport{client: c, region: region}
	hdr, err := sdk.DecodeRegionHeader(region)
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("endpoint %s: %w", path, err)
	}
	if want := abi.Vectors(int(hdr.Layout.Channels)); want != vectors {
		t.Close()
		return nil, fmt.Errorf("endpoint %s has %d channels, which need %d vectors; joined with %d (set the vector count to %d): %w",
			path, hdr.Layout.Channels, want, vectors, want, ErrVectors)
	}
	return t, nil
}

// mapShm maps all of the shared-memory fd, sized by fstat.
func mapShm(fd int) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("sizing shared memory: %w", err)
	}
	if st.Size < abi.HeaderSize || st.Size > abi.MaxRegionSize {
		return nil, fmt.Errorf("shared memory of %d bytes: not a Sluice region", st.Size)
	}
	b, err := shm.Map(fd, int(st.Size))
	if err != nil {
		return nil, fmt.Errorf("mapping shared memory: %w", err)
	}
	return b, nil
}

// ID is this peer's id on the endpoint.
func (t *Transport) ID() uint16 { return t.client.ID() }

// Client is the underlying ivshmem client (for its own vector eventfds and
// Done).
func (t *Transport) Client() *ivshmem.Client { return t.client }

// Departed is closed when the endpoint's connection ended (sdk.Departure):
// the ivshmem server closed it (sluiced exited or was killed; a hand-over
// keeps it open), it broke the protocol, or Close was called.
func (t *Transport) Departed() <-chan struct{} { return t.client.Done() }

// DepartErr says why Departed was closed (sdk.Departure): it wraps
// ivshmem.ErrServerGone when the server closed the connection, and
// sdk.ErrClosedHere after Close.
func (t *Transport) DepartErr() error {
	err := t.client.Err()
	if errors.Is(err, ivshmem.ErrClosed) {
		return fmt.Errorf("%w: %w", sdk.ErrClosedHere, err)
	}
	return err
}

// Region is the mapped shared memory.
func (t *Transport) Region() []byte { return t.region }

// Doorbell signals the host peer's eventfd for vector, as KVM does for a
// guest's BAR0 doorbell write.
func (t *Transport) Doorbell(hostPeer uint16, vector int) error {
	return t.client.Notify(hostPeer, vector)
}

// ClearVector drops the signals pending on this peer's own eventfd for
// vector (sdk.Interrupts).
func (t *Transport) ClearVector(vector int) error { return t.client.ClearVector(vector) }

// WaitVector blocks until the host signals this peer's vector or ctx ends
// (sdk.Interrupts): the host signals a channel's vector when the record a
// sleeping waiter named in the channel's wake word completes.
func (t *Transport) WaitVector(ctx context.Context, vector int) error {
	return t.client.WaitVector(ctx, vector)
}

// Close unmaps the region and leaves the endpoint. It is idempotent.
func (t *Transport) Close() error {
	var errs []error
	if t.region != nil {
		errs = append(errs, shm.Unmap(t.region))
		t.region = nil
	}
	errs = append(errs, t.client.Close())
	return errors.Join(errs...)
}
