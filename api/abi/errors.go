package abi

import (
	"errors"
	"strconv"
)

// ErrLayout means a region geometry or header is impossible or inconsistent.
var ErrLayout = errors.New("invalid layout")

// ErrorCode is what the host writes into a channel's error field when a
// command fails. Zero means no error. The codes are part of the ABI (the C
// header has the same numbers); ErrorCode is also an error, so handlers can
// return it and boundaries map it with errors.As.
type ErrorCode uint32

// Channel error codes.
const (
	OK              ErrorCode = 0
	ErrBadOpcode    ErrorCode = 1  // unknown opcode (0 is never valid)
	ErrBadRecord    ErrorCode = 2  // reserved bits or bytes set, or a field out of its range
	ErrRingOverflow ErrorCode = 3  // put is more than RingEntries ahead of get, or behind it
	ErrHeapRange    ErrorCode = 4  // a heap offset or length reaches outside the heap
	ErrBadHandle    ErrorCode = 5  // no buffer or module with that handle, or a handle reused
	ErrNoMemory     ErrorCode = 6  // the device or the VM's quota has no room
	ErrUnsupported  ErrorCode = 7  // the backend does not implement this command
	ErrDevice       ErrorCode = 8  // the device failed the command (a fault in a kernel, say)
	ErrBufferRange  ErrorCode = 9  // an offset or length reaches outside a device buffer
	ErrTooLong      ErrorCode = 10 // a throttle longer than the host allows
	ErrShutdown     ErrorCode = 11 // the channel or VM is being torn down
	// ErrTimedOut: a command of the VM ran on the GPU past the VM's longest
	// command (Limits.MaxThrottleNs, the operator's max command). The host
	// ended the VM's GPU work: the command, and on a GPU that ends the VM's
	// context every command the VM had in flight, fail with it; the VM's
	// buffers and modules are gone (their handles are ErrBadHandle after).
	ErrTimedOut    ErrorCode = 12
	errorCodeCount ErrorCode = 13
)

var errorNames = [errorCodeCount]string{
	OK:              "ok",
	ErrBadOpcode:    "bad opcode",
	ErrBadRecord:    "bad record",
	ErrRingOverflow: "ring overflow",
	ErrHeapRange:    "heap range",
	ErrBadHandle:    "bad handle",
	ErrNoMemory:     "no memory",
	ErrUnsupported:  "unsupported",
	ErrDevice:       "device error",
	ErrBufferRange:  "buffer range",
	ErrTooLong:      "too long",
	ErrShutdown:     "shutdown",
	ErrTimedOut:     "timed out",
}

func (e ErrorCode) String() string {
	if int(e) < len(errorNames) {
		return errorNames[e]
	}
	return "error " + strconv.FormatUint(uint64(e), 10)
}

func (e ErrorCode) Error() string { return "channel error: " + e.String() }

// CodeOf maps an error to the channel error code a guest sees: an ErrorCode
// anywhere in err's chain is itself, nil is OK, anything else is ErrDevice.
func CodeOf(err error) ErrorCode {
	if err == nil {
		return OK
	}
	var c ErrorCode
	if errors.As(err, &c) {
		return c
	}
	return ErrDevice
}
