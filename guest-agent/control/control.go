package control

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version this package speaks.
const Version = 1

// MaxLine bounds one message, newline included. A workload's JSON result is
// a few KiB; a bound keeps a confused peer from growing a buffer forever.
const MaxLine = 1 << 20

// MaxArgs bounds a request's command line.
const MaxArgs = 256

// Message kinds.
const (
	KindHello    = "hello"
	KindRequest  = "request"
	KindResponse = "response"
)

// ErrInvalid is wrapped by every decoding error about a message's content.
var ErrInvalid = errors.New("invalid control message")

// ErrTooLong is returned for a line over MaxLine; the rest of that line is
// skipped.
var ErrTooLong = errors.New("control message too long")

// Message is one line on the stream. Kind says which fields mean something.
type Message struct {
	V    int    `json:"v"`
	Kind string `json:"kind"`
	// Hello: the agent's version string.
	Agent string `json:"agent,omitempty"`
	// Request and Response: matches a response to its request.
	ID uint64 `json:"id,omitempty"`
	// Request: the agent command line, e.g. ["run","throttle","--json"].
	Args []string `json:"args,omitempty"`
	// Response: the command's exit status (0 success) and its output.
	Exit   int    `json:"exit"`
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
}

// Validate checks a decoded message's fields.
func (m *Message) Validate() error {
	if m.V != Version {
		return fmt.Errorf("%w: protocol version %d, want %d", ErrInvalid, m.V, Version)
	}
	switch m.Kind {
	case KindHello:
	case KindRequest:
		if m.ID == 0 {
			return fmt.Errorf("%w: request without an id", ErrInvalid)
		}
		if len(m.Args) == 0 || len(m.Args) > MaxArgs {
			return fmt.Errorf("%w: request with %d arguments (want 1 to %d)", ErrInvalid, len(m.Args), MaxArgs)
		}
	case KindResponse:
		if m.ID == 0 {
			return fmt.Errorf("%w: response without an id", ErrInvalid)
		}
		if m.Exit < 0 || m.Exit > 255 {
			return fmt.Errorf("%w: exit status %d", ErrInvalid, m.Exit)
		}
	default:
		return fmt.Errorf("%w: kind %q", ErrInvalid, m.Kind)
	}
	return nil
}

// Decode parses and validates one line (without its newline).
func Decode(line []byte) (Message, error) {
	var m Message
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Message{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if dec.More() {
		return Message{}, fmt.Errorf("%w: trailing data", ErrInvalid)
	}
	if err := m.Validate(); err != nil {
		return Message{}, err
	}
	return m, nil
}

// Encode renders a message as one line, newline included.
func Encode(m Message) ([]byte, error) {
	m.V = Version
	if err := m.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding control message: %w", err)
	}
	if len(b)+1 > MaxLine {
		return nil, fmt.Errorf("encoding control message: %w (%d bytes)", ErrTooLong, len(b)+1)
	}
	return append(b, '\n'), nil
}

// Reader reads messages from a stream.
type Reader struct {
	r *bufio.Reader
}

// NewReader reads from r.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReaderSize(r, 64<<10)} }

// Next returns the next line's message. A line that is not a valid message
// gives an error wrapping ErrInvalid or ErrTooLong, and the stream stays
// usable: call Next again. Other errors (io.EOF among them) end the stream.
func (r *Reader) Next() (Message, error) {
	var line []byte
	tooLong := false
	for {
		chunk, err := r.r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > MaxLine {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		switch {
		case err == nil:
			if tooLong {
				return Message{}, ErrTooLong
			}
			return Decode(bytes.TrimRight(line, "\r\n"))
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return Message{}, err
		}
	}
}

// Skippable reports whether err from Next concerns one line only.
func Skippable(err error) bool {
	return errors.Is(err, ErrInvalid) || errors.Is(err, ErrTooLong)
}
