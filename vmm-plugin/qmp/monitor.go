package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"
)

// ErrClosed means the connection to QEMU is gone (QEMU exited or closed it)
// or Close was called. Errors wrapping it may also wrap the cause (io.EOF).
var ErrClosed = errors.New("qmp connection closed")

// Monitor is a connection to one QEMU monitor. Its methods are safe for
// concurrent use.
type Monitor struct {
	conn       net.Conn
	greeted    chan struct{} // closed once greeting is set
	greeting   Greeting
	done       chan struct{} // closed once the connection is closed and err set
	readerDone chan struct{}

	writeMu sync.Mutex // one command is one Write

	mu          sync.Mutex
	nextID      uint64
	calls       []*call // sent, unanswered, in order of sending
	subs        map[*subscription]struct{}
	handshaking bool
	early       []Event // events received while handshaking
	dropped     uint64
	closing     bool  // Close was called
	err         error // set once closed; wraps ErrClosed
}

// call is one command waiting for its reply.
type call struct {
	id uint64
	ch chan result // buffered: the reader never waits for an abandoned call
}

type result struct {
	ret    json.RawMessage
	err    *Error
	closed bool
}

func newMonitor(conn net.Conn) *Monitor {
	m := &Monitor{
		conn:        conn,
		greeted:     make(chan struct{}),
		done:        make(chan struct{}),
		readerDone:  make(chan struct{}),
		subs:        make(map[*subscription]struct{}),
		handshaking: true,
	}
	go m.readLoop()
	return m
}

// Greeting returns what QEMU said when the connection opened.
func (m *Monitor) Greeting() Greeting { return m.greeting }

// Done is closed when the connection is gone; Err then says why.
func (m *Monitor) Done() <-chan struct{} { return m.done }

// Err returns nil while the connection is up, then an error wrapping
// ErrClosed.
func (m *Monitor) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Close closes the connection, fails pending calls with ErrClosed and closes
// subscriptions. It does not stop QEMU (see Quit). It always returns nil.
func (m *Monitor) Close() error {
	m.mu.Lock()
	m.closing = true
	m.mu.Unlock()
	m.conn.Close()
	<-m.readerDone
	return nil
}

// Execute runs cmd with args (nil for none; else anything that marshals to a
// JSON object) and decodes its "return" member into out unless out is nil.
// An error reply is returned as an *Error. If ctx ends first, Execute
// returns an error wrapping ctx.Err(); QEMU still runs the command.
func (m *Monitor) Execute(ctx context.Context, cmd string, args, out any) error {
	_, err := m.execute(ctx, cmd, args, out)
	return err
}

// execute is Execute, also saying whether the command was written whole.
func (m *Monitor) execute(ctx context.Context, cmd string, args, out any) (sent bool, err error) {
	a, err := encodeArgs(args)
	if err != nil {
		return false, fmt.Errorf("encoding %s arguments: %w", cmd, err)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("executing %s: %w", cmd, err)
	}
	m.mu.Lock()
	if err := m.err; err != nil {
		m.mu.Unlock()
		return false, fmt.Errorf("executing %s: %w", cmd, err)
	}
	m.nextID++
	c := &call{id: m.nextID, ch: make(chan result, 1)}
	m.calls = append(m.calls, c)
	m.mu.Unlock()

	b, err := json.Marshal(request{Execute: cmd, Arguments: a, ID: c.id})
	if err == nil {
		err = m.write(ctx, b)
	}
	if err != nil {
		m.forget(c)
		return false, fmt.Errorf("executing %s: %w", cmd, err)
	}
	select {
	case r := <-c.ch:
		switch {
		case r.closed:
			return true, fmt.Errorf("executing %s: %w", cmd, m.Err())
		case r.err != nil:
			e := *r.err
			e.Command = cmd
			return true, &e
		case out != nil:
			if err := json.Unmarshal(r.ret, out); err != nil {
				return true, fmt.Errorf("decoding %s reply: %w", cmd, err)
			}
		}
		return true, nil
	case <-ctx.Done():
		// The reply, if it comes, is dropped by the reader.
		return true, fmt.Errorf("executing %s: %w", cmd, ctx.Err())
	}
}

// write sends one command, or nothing. If ctx ends in the middle of it, the
// stream is torn and the connection is closed.
func (m *Monitor) write(ctx context.Context, b []byte) error {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		m.conn.SetWriteDeadline(time.Unix(1, 0)) // interrupt the Write
		close(fired)
	})
	n, err := m.conn.Write(b)
	if !stop() {
		<-fired
		m.conn.SetWriteDeadline(time.Time{})
	}
	if err == nil {
		return nil
	}
	if n == 0 && ctx.Err() != nil {
		return ctx.Err()
	}
	m.fail(fmt.Errorf("writing command: %w", err))
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return m.Err()
}

// forget drops a call whose command did not go out.
func (m *Monitor) forget(c *call) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = slices.DeleteFunc(m.calls, func(x *call) bool { return x == c })
}

// readLoop reads messages until the connection fails.
func (m *Monitor) readLoop() {
	defer close(m.readerDone)
	dec := json.NewDecoder(m.conn)
	first := true
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			m.fail(err)
			return
		}
		msg, err := decodeMessage(raw)
		if err != nil {
			m.fail(err)
			return
		}
		if first {
			if msg.kind != kindGreeting {
				m.fail(errors.New("protocol error: first message is not a QMP greeting"))
				return
			}
			first = false
			m.greeting = msg.greeting
			close(m.greeted)
			continue
		}
		switch msg.kind {
		case kindReply:
			m.deliver(msg)
		case kindEvent:
			m.dispatch(msg.event)
		}
	}
}

// deliver hands a reply to the call it answers.
func (m *Monitor) deliver(msg message) {
	m.mu.Lock()
	i := -1
	switch msg.idKind {
	case idOurs:
		i = slices.IndexFunc(m.calls, func(c *call) bool { return c.id == msg.id })
	case idNone:
		if len(m.calls) > 0 {
			i = 0 // QEMU answers in order
		}
	}
	if i < 0 {
		m.mu.Unlock()
		return
	}
	c := m.calls[i]
	m.calls = slices.Delete(m.calls, i, i+1)
	m.mu.Unlock()
	c.ch <- result{ret: msg.ret, err: msg.err}
}

// fail closes the connection for cause (nil or anything after Close: plain
// ErrClosed), fails every pending call and closes every subscription.
func (m *Monitor) fail(cause error) {
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		return
	}
	if m.closing || cause == nil {
		m.err = ErrClosed
	} else {
		m.err = fmt.Errorf("%w: %w", ErrClosed, cause)
	}
	calls := m.calls
	m.calls = nil
	for s := range m.subs {
		close(s.ch)
	}
	clear(m.subs)
	m.mu.Unlock()
	m.conn.Close()
	for _, c := range calls {
		c.ch <- result{closed: true}
	}
	close(m.done)
}
