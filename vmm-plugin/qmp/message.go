package qmp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Event is an asynchronous QMP event.
type Event struct {
	Name      string          // "SHUTDOWN", "DEVICE_DELETED", ...
	Data      json.RawMessage // the event's "data" member; nil if it has none
	Timestamp time.Time       // when QEMU emitted it; zero if QEMU sent none
}

// Greeting is what QEMU sends when a client connects.
type Greeting struct {
	Version      Version
	Package      string   // distribution package version, e.g. "Debian 1:7.2+dfsg-7"
	Capabilities []string // offered capabilities, e.g. "oob" (never enabled here)
}

// Version is a QEMU version.
type Version struct{ Major, Minor, Micro int }

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Micro) }

// Error is an error reply from QEMU.
type Error struct {
	Class   string // "GenericError", "CommandNotFound", "DeviceNotFound", ...
	Desc    string // human-readable description
	Command string // the command that failed
}

func (e *Error) Error() string { return fmt.Sprintf("qmp %s: %s: %s", e.Command, e.Class, e.Desc) }

// Error classes QEMU 7.2 uses (qapi/error.json).
const (
	ClassGenericError    = "GenericError"
	ClassCommandNotFound = "CommandNotFound"
	ClassDeviceNotActive = "DeviceNotActive"
	ClassDeviceNotFound  = "DeviceNotFound"
	ClassKVMMissingCap   = "KVMMissingCap"
)

type messageKind int

const (
	kindGreeting messageKind = iota + 1
	kindReply
	kindEvent
)

// idKind says what a reply's "id" member was.
type idKind int

const (
	idNone    idKind = iota // absent: QEMU could not parse the command
	idOurs                  // a number, as this package sends
	idForeign               // anything else: not a reply to us
)

// message is one decoded QMP message.
type message struct {
	kind     messageKind
	greeting Greeting
	// Replies.
	idKind idKind
	id     uint64
	ret    json.RawMessage // the "return" member, if no error
	err    *Error          // the "error" member, Command unset
	// Events.
	event Event
}

// wireMessage is every member a server message may have.
type wireMessage struct {
	QMP *struct {
		Version struct {
			QEMU    Version `json:"qemu"`
			Package string  `json:"package"`
		} `json:"version"`
		Capabilities []string `json:"capabilities"`
	} `json:"QMP"`
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	ID        json.RawMessage `json:"id"`
	Event     *string         `json:"event"`
	Data      json.RawMessage `json:"data"`
	Timestamp *struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
}

var errNotObject = errors.New("message is not a JSON object")

// decodeMessage turns one JSON value from QEMU into a greeting, a reply or
// an event.
func decodeMessage(b []byte) (message, error) {
	if b = bytes.TrimSpace(b); len(b) == 0 || b[0] != '{' {
		return message{}, errNotObject
	}
	var w wireMessage
	if err := json.Unmarshal(b, &w); err != nil {
		return message{}, fmt.Errorf("decoding message: %w", err)
	}
	switch {
	case w.QMP != nil:
		v := w.QMP.Version
		return message{kind: kindGreeting, greeting: Greeting{
			Version: v.QEMU, Package: v.Package, Capabilities: w.QMP.Capabilities,
		}}, nil
	case w.Event != nil:
		e := Event{Name: *w.Event, Data: w.Data}
		// QEMU sends -1/-1 when it could not read the clock.
		if ts := w.Timestamp; ts != nil && ts.Seconds >= 0 && ts.Microseconds >= 0 {
			e.Timestamp = time.Unix(ts.Seconds, ts.Microseconds*int64(time.Microsecond))
		}
		return message{kind: kindEvent, event: e}, nil
	case w.Return != nil || w.Error != nil:
		m := message{kind: kindReply, ret: w.Return}
		if w.Error != nil {
			m.ret, m.err = nil, &Error{Class: w.Error.Class, Desc: w.Error.Desc}
		}
		m.idKind, m.id = decodeID(w.ID)
		return m, nil
	}
	return message{}, errors.New("message is neither a greeting, a reply nor an event")
}

func decodeID(raw json.RawMessage) (idKind, uint64) {
	if raw == nil {
		return idNone, 0
	}
	id, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return idForeign, 0
	}
	return idOurs, id
}

// request is a command as sent.
type request struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	ID        uint64          `json:"id"`
}

// encodeArgs marshals a command's arguments; nil (or anything that
// marshals to null) means none.
func encodeArgs(args any) (json.RawMessage, error) {
	if args == nil {
		return nil, nil
	}
	b, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	if string(b) == "null" {
		return nil, nil
	}
	if b[0] != '{' {
		return nil, fmt.Errorf("arguments must marshal to a JSON object, not %.20s", b)
	}
	return b, nil
}
