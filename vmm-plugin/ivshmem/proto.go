package ivshmem

import (
	"errors"
	"fmt"

	"github.com/sluice-gpu/sluice/internal/sockfile"
)

// Protocol limits.
const (
	// ProtocolVersion is the first message the server sends.
	ProtocolVersion = 0
	// MaxVectors is the most eventfds (interrupt vectors) per peer this
	// package accepts.
	MaxVectors = 256
	// MaxPeerID is the largest peer id the protocol can carry (QEMU
	// rejects larger values).
	MaxPeerID = 65535
	// shmMessage is the value that carries the shared-memory fd.
	shmMessage = -1
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrProtocol marks a message sequence that breaks the protocol.
	ErrProtocol = errors.New("ivshmem protocol violation")
	// ErrClosed is returned by methods of a closed Server or Client.
	ErrClosed = errors.New("ivshmem: closed")
	// ErrNoPeer is returned by Notify for a peer that is not connected.
	ErrNoPeer = errors.New("ivshmem: no such peer")
	// ErrBadVector is returned for a vector outside 0..vectors-1.
	ErrBadVector = errors.New("ivshmem: vector out of range")
	// ErrServerGone is the Client's error once the server closed the
	// connection (QEMU treats this as final: there is no reconnect).
	ErrServerGone = errors.New("ivshmem: server closed the connection")
	// ErrSocketInUse is returned by NewServer when a server is already
	// listening at the socket path.
	ErrSocketInUse = sockfile.ErrInUse
	// ErrForeignPeer: a connection from a user the server does not admit
	// (ServerConfig.Owners) was closed before it received anything.
	ErrForeignPeer = errors.New("ivshmem: peer's user may not connect")
	// ErrPeersFull: a connection was closed at once, every peer slot being
	// held by a peer that has read its handshake.
	ErrPeersFull = errors.New("ivshmem: no free peer slot")
	// ErrNoHandshake: a peer was dropped without having read its handshake,
	// at the handshake deadline or when a new connection needed its slot.
	ErrNoHandshake = errors.New("ivshmem: peer did not read its handshake")
)

// message is one decoded wire message: its value and how many fds came
// with it (the protocol allows at most one).
type message struct {
	val int64
	fds int
}

type eventKind uint8

const (
	evNone       eventKind = iota // nothing to act on (the version)
	evOwnID                       // our id is event.peer
	evShm                         // the fd is the shared memory
	evOwnVector                   // the fd is our own eventfd for event.vector
	evPeerVector                  // the fd is eventfd[event.peer][event.vector]
	evPeerGone                    // event.peer disconnected; drop its fds
)

// event says what a message means; whether the message's fd is kept
// follows from the kind (see takesFD).
type event struct {
	kind   eventKind
	peer   uint16
	vector int
}

// takesFD reports whether the receiver keeps the message's fd; otherwise
// there was none.
func (e event) takesFD() bool {
	return e.kind == evShm || e.kind == evOwnVector || e.kind == evPeerVector
}

type decodeState uint8

const (
	wantVersion decodeState = iota
	wantID
	wantShm
	wantVectors // own vectors still missing: handshake in progress
	ready       // handshake complete
)

// decoder is the client side of the protocol as a pure state machine: it
// sees values and fd counts, never fds, so it can be fuzzed. The caller
// owns the fds and keeps or closes them according to the returned event.
// After an error the decoder stays failed.
type decoder struct {
	vectors  int // 0 until learned, when the caller did not know it
	first    int // eventfds of the first peer announced, to learn vectors from
	firstID  uint16
	state    decodeState
	own      uint16
	ownCount int
	counts   map[uint16]int // eventfds received per known peer
	err      error
}

// newDecoder returns a decoder for vectors eventfds per peer; 0 means learn
// the count from the first peer the server announces.
func newDecoder(vectors int) *decoder {
	return &decoder{vectors: vectors, counts: make(map[uint16]int)}
}

// handshakeDone reports whether our own N eventfds have arrived.
func (d *decoder) handshakeDone() bool { return d.state == ready }

// feed decodes the next message.
func (d *decoder) feed(m message) (event, error) {
	if d.err != nil {
		return event{}, d.err
	}
	ev, err := d.step(m)
	if err != nil {
		d.err = fmt.Errorf("%w: message %d: %s", ErrProtocol, m.val, err.Error())
		return event{}, d.err
	}
	return ev, nil
}

func (d *decoder) step(m message) (event, error) {
	if m.fds > 1 {
		return event{}, fmt.Errorf("carries %d fds, at most 1 allowed", m.fds)
	}
	switch d.state {
	case wantVersion:
		if m.val != ProtocolVersion || m.fds != 0 {
			return event{}, fmt.Errorf("want protocol version %d without fd", ProtocolVersion)
		}
		d.state = wantID
		return event{kind: evNone}, nil
	case wantID:
		if m.val < 0 || m.val > MaxPeerID || m.fds != 0 {
			return event{}, errors.New("want own id 0..65535 without fd")
		}
		d.own = uint16(m.val)
		d.state = wantShm
		return event{kind: evOwnID, peer: d.own}, nil
	case wantShm:
		if m.val != shmMessage || m.fds != 1 {
			return event{}, errors.New("want -1 with the shared-memory fd")
		}
		d.state = wantVectors
		return event{kind: evShm}, nil
	}
	return d.peerMessage(m)
}

// peerMessage handles everything after the shared memory: peer eventfds,
// our own eventfds and disconnects.
func (d *decoder) peerMessage(m message) (event, error) {
	if m.val < 0 || m.val > MaxPeerID {
		return event{}, errors.New("peer id out of range 0..65535 (or a second shared-memory fd)")
	}
	id := uint16(m.val)
	if id == d.own {
		if m.fds == 0 {
			return event{}, errors.New("disconnect of our own id")
		}
		if d.vectors == 0 {
			// Learn the vector count from the peer announced before us
			// (Sluice's host peer always is): it has as many as we do.
			if d.first == 0 {
				return event{}, errors.New("cannot learn the vector count: no peer announced before our own eventfds")
			}
			d.vectors = d.first
		}
		if d.ownCount >= d.vectors {
			return event{}, fmt.Errorf("more than %d own eventfds", d.vectors)
		}
		ev := event{kind: evOwnVector, peer: id, vector: d.ownCount}
		d.ownCount++
		if d.ownCount == d.vectors {
			d.state = ready
		}
		return ev, nil
	}
	n, known := d.counts[id]
	if m.fds == 0 {
		if !known {
			return event{}, fmt.Errorf("disconnect of unknown peer %d", id)
		}
		delete(d.counts, id)
		return event{kind: evPeerGone, peer: id}, nil
	}
	limit := d.vectors
	if limit == 0 {
		limit = MaxVectors
		if d.first == 0 || id == d.firstID {
			d.firstID, d.first = id, n+1
		}
	}
	if n >= limit {
		return event{}, fmt.Errorf("more than %d eventfds for peer %d", limit, id)
	}
	d.counts[id] = n + 1
	return event{kind: evPeerVector, peer: id, vector: n}, nil
}
