package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"
)

// ErrNoAgent is returned when nothing answers on the control port: the
// guest is still booting, or runs no agent in serve mode.
var ErrNoAgent = errors.New("no agent answering on the control port")

// Client is the host's side of a control port.
type Client struct {
	conn   net.Conn
	r      *Reader
	agent  string
	nextID uint64
}

// idBase keeps ids unique across clients, so a response left on the port by
// an earlier client that went away is never taken for this one's.
var idBase atomic.Uint64

func init() { idBase.Store(uint64(time.Now().UnixNano()) << 8) }

// Dial connects to the control socket (QEMU's end of the guest's second
// serial port) and waits for the agent's hello. It retries while the socket
// does not exist yet or nobody answers, until ctx is done.
func Dial(ctx context.Context, socket string) (*Client, error) {
	var last error
	for {
		c, err := dialOnce(ctx, socket)
		if err == nil {
			return c, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connecting to the agent on %s: %w (last: %v)", socket, ErrNoAgent, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func dialOnce(ctx context.Context, socket string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	c := &Client{conn: conn, r: NewReader(conn), nextID: idBase.Add(1 << 20)}
	// Ask for a hello: the agent's first one went out before anyone listened.
	// A short deadline per try: a booting guest does not answer yet.
	deadline := time.Now().Add(time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	conn.SetDeadline(deadline)
	if err := c.send(Message{Kind: KindHello}); err != nil {
		conn.Close()
		return nil, err
	}
	for {
		m, err := c.r.Next()
		if Skippable(err) {
			continue
		}
		if err != nil {
			conn.Close()
			return nil, err
		}
		// A hello without the agent's version is the host's own, echoed by
		// the guest's tty before the agent put it in raw mode.
		if m.Kind == KindHello && m.Agent != "" {
			c.agent = m.Agent
			conn.SetDeadline(time.Time{})
			return c, nil
		}
	}
}

// Agent is the agent's version string from its hello.
func (c *Client) Agent() string { return c.agent }

// Close closes the connection. A request still running in the guest runs
// to its end; its response is dropped.
func (c *Client) Close() error { return c.conn.Close() }

func (c *Client) send(m Message) error {
	b, err := Encode(m)
	if err != nil {
		return err
	}
	if _, err := c.conn.Write(b); err != nil {
		return fmt.Errorf("writing to the control port: %w", err)
	}
	return nil
}

// Exec runs an agent command line in the guest (e.g. run throttle
// --kernel 100us --json) and returns its response: exit status, stdout,
// stderr. The guest runs one request at a time.
func (c *Client) Exec(ctx context.Context, args ...string) (Message, error) {
	c.nextID++
	id := c.nextID
	if err := c.send(Message{Kind: KindRequest, ID: id, Args: args}); err != nil {
		return Message{}, err
	}
	stop := context.AfterFunc(ctx, func() { c.conn.SetReadDeadline(time.Now()) })
	defer stop()
	for {
		m, err := c.r.Next()
		if Skippable(err) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return Message{}, fmt.Errorf("waiting for the agent's answer: %w", ctx.Err())
			}
			return Message{}, fmt.Errorf("reading the control port: %w", err)
		}
		if m.Kind == KindResponse && m.ID == id {
			return m, nil
		}
	}
}
