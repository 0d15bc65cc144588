// Package qmptest is a fake QEMU monitor for tests: a QMP server on a UNIX
// socket that greets, negotiates capabilities like QEMU 7.2, and answers
// each command from a Handler. It can emit events (also during the
// handshake) and hang up after a command, as QEMU does on quit.
//
// Like QEMU, it serves one client at a time, handles a client's commands in
// order, and echoes each command's "id".
package qmptest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Command is a command the server received.
type Command struct {
	Name string          // "execute"
	Args json.RawMessage // "arguments"; nil if absent
}

// Event is an event to send.
type Event struct {
	Name string
	Data any // marshalled as "data"; nil for none
}

// Reply is how the server answers one command.
type Reply struct {
	// Return is marshalled as "return"; nil sends {}.
	Return any
	// ErrorClass, if set, makes the reply an error
	// {"error":{"class":ErrorClass,"desc":ErrorDesc}} instead.
	ErrorClass, ErrorDesc string
	// Events are sent after the reply, in order.
	Events []Event
	// NoReply sends no reply (QEMU dying before it answers).
	NoReply bool
	// Exit makes the server behave as an exiting QEMU once the reply and
	// events are sent: it closes the connection and stops listening.
	Exit bool
}

// Handler answers a command. It runs on the server's goroutine, one
// command at a time, and must return. qmp_capabilities never reaches it.
type Handler func(Command) Reply

// Script answers the commands it names with their Reply, and any other with
// QEMU's CommandNotFound error. Pass its Handle method to New.
type Script map[string]Reply

// Handle is a Handler.
func (s Script) Handle(c Command) Reply {
	if r, ok := s[c.Name]; ok {
		return r
	}
	return Reply{ErrorClass: "CommandNotFound", ErrorDesc: fmt.Sprintf("The command %s has not been found", c.Name)}
}

// Option configures New.
type Option func(*Server)

// WithHandshakeEvents makes the server send events after receiving
// qmp_capabilities and before its reply.
func WithHandshakeEvents(events ...Event) Option {
	return func(s *Server) { s.handshakeEvents = events }
}

// Server is a fake QMP server.
type Server struct {
	tb              testing.TB
	path            string
	ln              *net.UnixListener
	h               Handler
	handshakeEvents []Event
	wg              sync.WaitGroup
	stopOnce        sync.Once

	wmu sync.Mutex // one message is one Write

	mu       sync.Mutex // guards the fields below
	conn     net.Conn   // the current client
	ready    bool       // conn has negotiated capabilities
	stopped  bool
	commands []Command
}

// New starts a server on a fresh socket; h nil answers every command with
// {}. It stops when the test ends.
func New(tb testing.TB, h Handler, opts ...Option) *Server {
	tb.Helper()
	if h == nil {
		h = func(Command) Reply { return Reply{} }
	}
	s := &Server{tb: tb, path: SocketPath(tb, "qmp.sock"), h: h}
	for _, o := range opts {
		o(s)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.path, Net: "unix"})
	if err != nil {
		tb.Fatalf("qmptest: %v", err)
	}
	s.ln = ln
	s.wg.Add(1)
	go s.acceptLoop()
	tb.Cleanup(s.Close)
	return s
}

// Path returns the socket's path, for qmp.Dial.
func (s *Server) Path() string { return s.path }

// Commands returns the commands the Handler got so far, in order: not
// qmp_capabilities, nor what came before it.
func (s *Server) Commands() []Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Command(nil), s.commands...)
}

// Emit sends an event to the client, which must have negotiated
// capabilities (qmp.Dial has returned).
func (s *Server) Emit(name string, data any) error {
	s.mu.Lock()
	c, ready := s.conn, s.ready
	s.mu.Unlock()
	if !ready {
		return errors.New("qmptest: no client in command mode")
	}
	return s.send(c, event(name, data))
}

// Close stops the server like a crashing QEMU: the client's connection
// drops and the socket goes away. It waits for the server's goroutine.
func (s *Server) Close() {
	s.stop()
	s.wg.Wait()
}

func (s *Server) stop() {
	s.stopOnce.Do(func() {
		s.ln.Close() // also removes the socket file
		s.mu.Lock()
		s.stopped = true
		if s.conn != nil {
			s.conn.Close()
		}
		s.mu.Unlock()
	})
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.serve(c)
	}
}

type request struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments"`
	ID        json.RawMessage `json:"id"`
}

func (s *Server) serve(c net.Conn) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		c.Close()
		return
	}
	s.conn = c
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.conn, s.ready = nil, false
		s.mu.Unlock()
		c.Close()
	}()
	if s.send(c, greeting) != nil {
		return
	}
	dec := json.NewDecoder(c)
	negotiated := false
	for {
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			return // EOF, or input QEMU would also give up on
		}
		var req request
		if err := json.Unmarshal(raw, &req); err != nil || req.Execute == "" {
			// QEMU can't tell the id of what it can't parse.
			s.send(c, errorReply(nil, "GenericError", "QMP input must be a JSON object with 'execute'"))
			continue
		}
		switch {
		case !negotiated && req.Execute != "qmp_capabilities":
			s.send(c, errorReply(req.ID, "CommandNotFound", "Expecting capabilities negotiation with 'qmp_capabilities'"))
		case !negotiated:
			negotiated = true
			for _, e := range s.handshakeEvents {
				s.send(c, event(e.Name, e.Data))
			}
			s.mu.Lock()
			s.ready = true
			s.mu.Unlock()
			if s.send(c, returnReply(req.ID, nil)) != nil {
				return
			}
		case req.Execute == "qmp_capabilities":
			s.send(c, errorReply(req.ID, "CommandNotFound", "Capabilities negotiation is already complete, command ignored"))
		default:
			s.mu.Lock()
			s.commands = append(s.commands, Command{Name: req.Execute, Args: req.Arguments})
			s.mu.Unlock()
			if exit := s.answer(c, req); exit {
				s.stop()
				return
			}
		}
	}
}

// answer runs the handler and sends its reply; it reports whether the
// server is to exit.
func (s *Server) answer(c net.Conn, req request) (exit bool) {
	r := s.h(Command{Name: req.Execute, Args: req.Arguments})
	if !r.NoReply {
		msg := returnReply(req.ID, r.Return)
		if r.ErrorClass != "" {
			msg = errorReply(req.ID, r.ErrorClass, r.ErrorDesc)
		}
		s.send(c, msg)
	}
	for _, e := range r.Events {
		s.send(c, event(e.Name, e.Data))
	}
	return r.Exit
}

// send writes one message as QEMU does: compact, then CRLF.
func (s *Server) send(c net.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		s.tb.Errorf("qmptest: encoding %T: %v", v, err)
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err = c.Write(append(b, '\r', '\n'))
	return err
}

var greeting = map[string]any{"QMP": map[string]any{
	"version": map[string]any{
		"qemu":    map[string]int{"major": 7, "minor": 2, "micro": 0},
		"package": "qmptest",
	},
	"capabilities": []string{"oob"},
}}

func returnReply(id json.RawMessage, ret any) map[string]any {
	if ret == nil {
		ret = struct{}{}
	}
	m := map[string]any{"return": ret}
	if id != nil {
		m["id"] = id
	}
	return m
}

func errorReply(id json.RawMessage, class, desc string) map[string]any {
	m := map[string]any{"error": map[string]string{"class": class, "desc": desc}}
	if id != nil {
		m["id"] = id
	}
	return m
}

func event(name string, data any) map[string]any {
	now := time.Now()
	m := map[string]any{
		"event":     name,
		"timestamp": map[string]int64{"seconds": now.Unix(), "microseconds": int64(now.Nanosecond() / 1000)},
	}
	if data != nil {
		m["data"] = data
	}
	return m
}

// SocketPath returns a path for a UNIX socket named name in a fresh
// directory removed when the test ends. The directory is short enough for
// sun_path (108 bytes) even when t.TempDir's would not be.
func SocketPath(tb testing.TB, name string) string {
	tb.Helper()
	if p := filepath.Join(tb.TempDir(), name); len(p) < 100 {
		return p
	}
	dir, err := os.MkdirTemp("", "qmp")
	if err != nil {
		tb.Fatalf("qmptest: %v", err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, name)
}
