// Package proxyproto is the wire protocol between sluiced and a VM's
// sluice-proxy: datagrams on a SOCK_SEQPACKET socket pair, each one message
// whose first byte is its type. Requests are the mediator's validated copies
// of syscall slots (never the slots themselves); results name the slot and
// sequence number they answer, so that a result for a slot the mediator has
// since failed (the proxy was restarted) is recognised and dropped.
//
// The proxy starts by sending Ready (or Fatal, with why it could not start);
// the mediator answers with MsgRing and the rings' memfd (ring.go): from
// then on requests and results travel through shared memory, and the socket
// carries only MsgFastcall (with its descriptor), MsgKick wakeups and Fatal.
// Calls and Results datagrams remain (the proxy serves them; the mediator
// accepts Results), for tests that drive the proxy over the socket alone.
package proxyproto

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sluice-gpu/sluice/api/abi"
)

// Version of this protocol; Ready carries the proxy's, and the mediator
// refuses a proxy that speaks another.
//
// 2: calls and results travel through shared-memory rings (ring.go); the
// socket keeps Ready, Fatal, MsgFastcall and kicks.
// 3: MsgRing may hand the proxy the VM's syscall area, and the proxy then
// writes blocking calls' results into their slots itself (Delivery); the
// result ring's records are freed by the consumer's head.
// 4: the request ring holds 16-byte heads and a call's arguments apart,
// written and read only when it has any.
const Version = 4

// Message types.
const (
	MsgReady   byte = 1 // proxy → mediator: u16 version, u32 pid
	MsgFatal   byte = 2 // proxy → mediator: UTF-8 text, why the proxy stops
	MsgCalls   byte = 3 // mediator → proxy: u16 count, Request × count
	MsgResults byte = 4 // proxy → mediator: u16 count, Result × count
	// MsgFastcall (proxy → mediator) answers a SysFastcallRegister request
	// that the proxy validated: the request's slot and sequence number, the
	// curried call, and the call's file as an SCM_RIGHTS descriptor (a dup
	// of the context's fd, opened inside the sandbox). The mediator keeps the
	// table and runs fastcalls itself (pread/pwrite on that descriptor into
	// the pre-checked heap range): no proxy round trip, no per-call checks.
	MsgFastcall byte = 5
)

// FastcallSize is a MsgFastcall datagram's size.
const FastcallSize = 40

// Fastcall is a validated curried call.
type Fastcall struct {
	Slot    uint32
	Seq     uint32
	Op      uint16 // abi.SysPread64, SysPwrite64, SysRead or SysWrite
	HeapOff uint64
	Length  uint64
	FileOff uint64 // for pread64/pwrite64
}

// AppendFastcall appends a MsgFastcall (the descriptor travels beside it).
func AppendFastcall(b []byte, f Fastcall) []byte {
	b = append(b, MsgFastcall, 0)
	b = le.AppendUint16(b, f.Op)
	b = le.AppendUint32(b, f.Slot)
	b = le.AppendUint32(b, f.Seq)
	b = le.AppendUint32(b, 0)
	b = le.AppendUint64(b, f.HeapOff)
	b = le.AppendUint64(b, f.Length)
	return le.AppendUint64(b, f.FileOff)
}

// DecodeFastcall decodes a MsgFastcall datagram.
func DecodeFastcall(msg []byte) (Fastcall, error) {
	if len(msg) != FastcallSize || msg[0] != MsgFastcall {
		return Fastcall{}, fmt.Errorf("%w: fastcall of %d bytes", ErrMessage, len(msg))
	}
	return Fastcall{
		Op:      le.Uint16(msg[2:]),
		Slot:    le.Uint32(msg[4:]),
		Seq:     le.Uint32(msg[8:]),
		HeapOff: le.Uint64(msg[16:]),
		Length:  le.Uint64(msg[24:]),
		FileOff: le.Uint64(msg[32:]),
	}, nil
}

// Sizes on the wire.
const (
	hdrSize     = 8 // type, pad, u16 count, u32 pad
	RequestSize = 72
	ResultSize  = 24
	// MaxBatch bounds the requests of one Calls message (and the results of
	// one Results message): 1024 × 72 bytes fits a socket's default buffer.
	MaxBatch = 1024
	// MaxMessage is the largest datagram either side sends.
	MaxMessage = hdrSize + MaxBatch*RequestSize
)

// ErrMessage means a datagram that does not decode.
var ErrMessage = errors.New("malformed proxy message")

// Request is one call, as the mediator copied and checked it.
type Request struct {
	Slot    uint32 // the slot index in the VM's syscall area
	Seq     uint32 // the slot's sequence number when it was taken
	Number  uint16
	Flags   uint8
	Context uint8
	Args    [abi.SysArgCount]uint64
	// Aux carries what the proxy cannot know itself: for getrusage, the VM's
	// GPU time in nanoseconds from accounting.
	Aux uint64
	// Pos is the request's position in the request ring (the proxy's
	// own, set by ProxyRequests; not on the wire).
	Pos uint64
}

// Result is one call's outcome.
type Result struct {
	Slot  uint32
	Seq   uint32
	Ret   int64
	Errno abi.Errno
	// Delivery says who writes the result into the slot (result rings
	// only; a Results datagram's are ByMediator).
	Delivery Delivery
	// Flags are the request's, Call its CallWord and Pos its position in
	// the request ring (the proxy's own; not on the wire).
	Flags uint8
	Call  uint32
	Pos   uint64
	// Mask, in a Bulk result, has bit i set for the request at Pos+i.
	Mask uint64
}

// Delivery says who writes a blocking call's result into its slot.
type Delivery uint8

const (
	// ByMediator: the mediator writes it (the proxy has no area).
	ByMediator Delivery = iota
	// ByProxy: the proxy wrote it and set FINISHED (CompleteSlot).
	ByProxy
	// Refused: the proxy found the slot no longer PROCESSING with the
	// call's sequence number (the guest took it back) and wrote nothing.
	Refused
	// Bulk: one record for many blocking calls the proxy answered in
	// their slots (ByProxy) with errno 0: the requests at Pos+i for each
	// bit i set in Mask. Only for requests answered before the proxy gave
	// their records back (ProxyConsumed), so that the mediator, which
	// reads the proxy's head before it drains (MediatorReqHead), knows
	// which call each position held.
	Bulk
)

var le = binary.LittleEndian

// AppendCalls appends a Calls message holding reqs (at most MaxBatch) to b.
func AppendCalls(b []byte, reqs []Request) []byte {
	b = appendHdr(b, MsgCalls, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		b = le.AppendUint32(b, r.Slot)
		b = le.AppendUint32(b, r.Seq)
		b = le.AppendUint16(b, r.Number)
		b = append(b, r.Flags, r.Context)
		b = le.AppendUint32(b, 0)
		for _, a := range r.Args {
			b = le.AppendUint64(b, a)
		}
		b = le.AppendUint64(b, r.Aux)
	}
	return b
}

// AppendResults appends a Results message holding res (at most MaxBatch).
func AppendResults(b []byte, res []Result) []byte {
	b = appendHdr(b, MsgResults, len(res))
	for _, r := range res {
		b = le.AppendUint32(b, r.Slot)
		b = le.AppendUint32(b, r.Seq)
		b = le.AppendUint64(b, uint64(r.Ret))
		b = le.AppendUint32(b, uint32(r.Errno))
		b = le.AppendUint32(b, 0)
	}
	return b
}

// AppendReady appends a Ready message.
func AppendReady(b []byte, pid int) []byte {
	b = append(b, MsgReady, 0)
	b = le.AppendUint16(b, Version)
	return le.AppendUint32(b, uint32(pid))
}

// AppendFatal appends a Fatal message.
func AppendFatal(b []byte, why string) []byte {
	return append(append(b, MsgFatal), why...)
}

func appendHdr(b []byte, typ byte, n int) []byte {
	if n > MaxBatch {
		panic(fmt.Sprintf("proxyproto: batch of %d > %d", n, MaxBatch))
	}
	b = append(b, typ, 0)
	b = le.AppendUint16(b, uint16(n))
	return le.AppendUint32(b, 0)
}

// Type returns a message's type, 0 for an empty one.
func Type(msg []byte) byte {
	if len(msg) == 0 {
		return 0
	}
	return msg[0]
}

// DecodeReady returns the version and pid of a Ready message.
func DecodeReady(msg []byte) (version uint16, pid int, err error) {
	if len(msg) != 8 || msg[0] != MsgReady {
		return 0, 0, fmt.Errorf("%w: ready of %d bytes", ErrMessage, len(msg))
	}
	return le.Uint16(msg[2:]), int(le.Uint32(msg[4:])), nil
}

// DecodeFatal returns a Fatal message's text.
func DecodeFatal(msg []byte) string { return string(msg[1:]) }

func count(msg []byte, typ byte, size int) (int, error) {
	if len(msg) < hdrSize || msg[0] != typ {
		return 0, fmt.Errorf("%w: %d bytes, type %d, want type %d", ErrMessage, len(msg), Type(msg), typ)
	}
	n := int(le.Uint16(msg[2:]))
	if n > MaxBatch || len(msg) != hdrSize+n*size {
		return 0, fmt.Errorf("%w: %d bytes for %d entries", ErrMessage, len(msg), n)
	}
	return n, nil
}

// DecodeCalls appends the requests of a Calls message to dst.
func DecodeCalls(dst []Request, msg []byte) ([]Request, error) {
	n, err := count(msg, MsgCalls, RequestSize)
	if err != nil {
		return dst, err
	}
	p := msg[hdrSize:]
	for range n {
		r := Request{
			Slot:    le.Uint32(p[0:]),
			Seq:     le.Uint32(p[4:]),
			Number:  le.Uint16(p[8:]),
			Flags:   p[10],
			Context: p[11],
		}
		for i := range r.Args {
			r.Args[i] = le.Uint64(p[16+8*i:])
		}
		r.Aux = le.Uint64(p[64:])
		dst = append(dst, r)
		p = p[RequestSize:]
	}
	return dst, nil
}

// DecodeResults appends the results of a Results message to dst.
func DecodeResults(dst []Result, msg []byte) ([]Result, error) {
	n, err := count(msg, MsgResults, ResultSize)
	if err != nil {
		return dst, err
	}
	p := msg[hdrSize:]
	for range n {
		dst = append(dst, Result{
			Slot:  le.Uint32(p[0:]),
			Seq:   le.Uint32(p[4:]),
			Ret:   int64(le.Uint64(p[8:])),
			Errno: abi.Errno(le.Uint32(p[16:])),
		})
		p = p[ResultSize:]
	}
	return dst, nil
}
