package ivshmem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Client is a peer on an ivshmem server, doing what QEMU's ivshmem-doorbell
// device does: it receives the shared memory, its own eventfds and every
// other peer's eventfds, and keeps the peer set current.
type Client struct {
	conn    *net.UnixConn
	rd      *msgReader
	dec     *decoder
	vectors int
	id      uint16
	shm     int
	own     []int

	mu     sync.RWMutex
	closed bool             // under mu
	peers  map[uint16][]int // peer id -> its eventfds, by vector; under mu
	cancel []int            // WaitVector's cancellation eventfds by vector (-1: none yet); under mu

	done      chan struct{} // closed when the reader goroutine ends
	err       error         // why the reader ended; set before done closes
	closeOnce sync.Once
}

// Dial connects to the server at path with vectors eventfds per peer, or,
// when vectors is 0, as many as the first peer the server announces has (a
// Sluice endpoint always announces its host peer first). It completes the handshake:
// version, own id, shared memory, the existing peers' eventfds and its own
// vectors eventfds. ctx bounds the connect and the handshake. A goroutine
// then follows peers connecting and disconnecting until Close or until the
// server goes away (see Done and Err).
func Dial(ctx context.Context, path string, vectors int) (*Client, error) {
	if vectors < 0 || vectors > MaxVectors {
		return nil, fmt.Errorf("dialing ivshmem server %s: %d vectors, want 1..%d (0: learn from the server)", path, vectors, MaxVectors)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("dialing ivshmem server %s: %w", path, err)
	}
	conn := nc.(*net.UnixConn)
	c := &Client{
		conn: conn, rd: newMsgReader(conn), dec: newDecoder(vectors),
		vectors: vectors, shm: -1,
		peers: make(map[uint16][]int), done: make(chan struct{}),
	}
	if err := c.handshake(ctx); err != nil {
		conn.Close()
		c.closeFDs()
		return nil, fmt.Errorf("ivshmem handshake with %s: %w", path, err)
	}
	c.vectors = c.dec.vectors
	go c.readLoop()
	return c, nil
}

func (c *Client) handshake(ctx context.Context) error {
	if dl, ok := ctx.Deadline(); ok {
		if err := c.conn.SetReadDeadline(dl); err != nil {
			return err
		}
	}
	stop := context.AfterFunc(ctx, func() { c.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	for !c.dec.handshakeDone() {
		if err := c.next(); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
	}
	if !stop() {
		// Cancelled just now: the deadline may be set behind our back.
		return ctx.Err()
	}
	return c.conn.SetReadDeadline(time.Time{})
}

// next reads, decodes and applies one message.
func (c *Client) next() error {
	val, fds, err := c.rd.read()
	if err != nil {
		closeFDs(fds)
		return err
	}
	ev, err := c.dec.feed(message{val: val, fds: len(fds)})
	if err != nil {
		closeFDs(fds)
		return err
	}
	fd := -1
	if ev.takesFD() {
		fd = fds[0]
		// QEMU does the same; it keeps a peer that set a huge counter
		// from blocking our writes.
		if ev.kind != evShm {
			if err := unix.SetNonblock(fd, true); err != nil {
				unix.Close(fd)
				return fmt.Errorf("setting eventfd non-blocking: %w", err)
			}
		}
	}
	c.apply(ev, fd)
	return nil
}

func (c *Client) apply(ev event, fd int) {
	switch ev.kind {
	case evOwnID:
		c.id = ev.peer
	case evShm:
		c.mu.Lock()
		c.shm = fd
		c.mu.Unlock()
	case evOwnVector:
		c.mu.Lock()
		c.own = append(c.own, fd)
		c.mu.Unlock()
	case evPeerVector:
		c.mu.Lock()
		c.peers[ev.peer] = append(c.peers[ev.peer], fd)
		c.mu.Unlock()
	case evPeerGone:
		c.mu.Lock()
		fds := c.peers[ev.peer]
		delete(c.peers, ev.peer)
		c.mu.Unlock()
		closeFDs(fds)
	}
}

func (c *Client) readLoop() {
	defer close(c.done)
	for {
		err := c.next()
		if err == nil {
			continue
		}
		switch {
		case errors.Is(err, net.ErrClosed):
			c.err = ErrClosed
		case errors.Is(err, io.EOF):
			c.err = ErrServerGone
		default:
			c.err = fmt.Errorf("ivshmem client %d: %w", c.id, err)
		}
		return
	}
}

// Vectors is the number of eventfds per peer, given or learned.
func (c *Client) Vectors() int { return c.vectors }

// ID is the peer id the server gave this client.
func (c *Client) ID() uint16 { return c.id }

// ShmFD is the shared memory; the Client owns it and Close closes it (-1
// after Close).
func (c *Client) ShmFD() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.shm
}

// VectorFD is the client's own eventfd for vector (non-blocking, as QEMU
// leaves it): other peers interrupt this client by signalling it. It is -1
// for a vector out of range. The Client owns it.
func (c *Client) VectorFD(vector int) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if vector < 0 || vector >= len(c.own) {
		return -1
	}
	return c.own[vector]
}

// Peers returns the ids of the other peers currently known, sorted; with
// a Sluice server that includes the host peer 0.
func (c *Client) Peers() []uint16 {
	c.mu.RLock()
	ids := make([]uint16, 0, len(c.peers))
	for id := range c.peers {
		ids = append(ids, id)
	}
	c.mu.RUnlock()
	slices.Sort(ids)
	return ids
}

// Notify rings peer's vector: an 8-byte write of 1 to its eventfd. This is
// the doorbell hot path: one read lock, one map lookup, one write(2).
func (c *Client) Notify(peer uint16, vector int) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return ErrClosed
	}
	fds, ok := c.peers[peer]
	if !ok {
		return fmt.Errorf("notifying peer %d: %w", peer, ErrNoPeer)
	}
	if vector < 0 || vector >= len(fds) {
		return fmt.Errorf("notifying peer %d vector %d: %w", peer, vector, ErrBadVector)
	}
	// The read lock keeps the reader goroutine from closing the fd (and
	// its number being reused) under the write.
	return signal(fds[vector])
}

// Done is closed when the client stops following the server: the server
// went away (Err is ErrServerGone), it broke the protocol, or Close was
// called. QEMU does not reconnect, and neither does Client.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err says why Done was closed; nil while it is open.
func (c *Client) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Close disconnects from the server and closes every fd the client holds.
// It is idempotent.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		if cerr := c.conn.Close(); cerr != nil {
			err = fmt.Errorf("closing ivshmem connection: %w", cerr)
		}
		<-c.done
		c.closeFDs()
	})
	return err
}

func (c *Client) closeFDs() {
	c.mu.Lock()
	defer c.mu.Unlock()
	closeFDs(c.own)
	c.own = nil
	for _, fd := range c.cancel {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	c.cancel = nil
	if c.shm >= 0 {
		unix.Close(c.shm)
		c.shm = -1
	}
	for id, fds := range c.peers {
		closeFDs(fds)
		delete(c.peers, id)
	}
}
