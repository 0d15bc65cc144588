package slotcall

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
)

// Sentinel errors.
var (
	ErrAborted = errors.New("slotcall: aborted")
	ErrTimeout = errors.New("slotcall: timed out")
	// ErrLost: the slot's state word changed in a way the protocol does not
	// allow while the call owned it (a scribbling guest or a broken host).
	ErrLost  = errors.New("slotcall: slot lost")
	ErrRange = errors.New("slotcall: no such slot")
)

// Area is a view of one syscall area: the bitmap page and the slots. It is
// immutable; With* return modified copies. Safe for concurrent use.
type Area struct {
	r       *shm.Region
	off     uint64 // the area's offset in r
	slots   uint32
	stop    <-chan struct{}
	timeout time.Duration
}

// New views area, a whole syscall area (the ready map page, then slots of
// abi.SyscallSlotSize bytes and as many request ring entries, at most
// abi.MaxSyscallSlots of them: bytes beyond are ignored). area must be 8-byte aligned, as every mapping is.
func New(area []byte) (*Area, error) {
	if len(area) > 0 && !aligned(area) {
		return nil, fmt.Errorf("slotcall: syscall area not 8-byte aligned")
	}
	return NewInRegion(shm.New(area), 0, slotsIn(len(area)))
}

// NewInRegion views the area of slots slots at offset off of r (a whole
// mapped region, Layout.SyscallOff and Layout.SyscallSlots).
func NewInRegion(r *shm.Region, off uint64, slots uint32) (*Area, error) {
	if slots == 0 || slots > abi.MaxSyscallSlots {
		return nil, fmt.Errorf("slotcall: %d slots: want 1..%d", slots, abi.MaxSyscallSlots)
	}
	end := off + abi.SyscallAreaSize(int(slots))
	if off%8 != 0 || end < off || end > uint64(r.Len()) {
		return nil, fmt.Errorf("slotcall: area at %d with %d slots outside region of %d bytes", off, slots, r.Len())
	}
	return &Area{r: r, off: off, slots: slots}, nil
}

// SlotsIn is the number of slots a syscall area of n bytes holds.
func SlotsIn(n int) uint32 { return slotsIn(n) }

func slotsIn(n int) uint32 {
	if n < abi.SyscallSlotsOff {
		return 0
	}
	return uint32(min((n-abi.SyscallSlotsOff)/(abi.SyscallSlotSize+abi.SyscallRingEntrySize), abi.MaxSyscallSlots))
}

// WithStop returns a copy of a whose waits end with ErrAborted once stop is
// closed.
func (a *Area) WithStop(stop <-chan struct{}) *Area {
	c := *a
	c.stop = stop
	return &c
}

// WithTimeout returns a copy of a each of whose waits (for a free slot, for
// a result) ends with ErrTimeout after d; 0 means none.
func (a *Area) WithTimeout(d time.Duration) *Area {
	c := *a
	c.timeout = d
	return &c
}

// Slots is the number of slots.
func (a *Area) Slots() uint32 { return a.slots }

// Request is one call.
type Request struct {
	Number  uint16
	Flags   uint8 // abi.SysFlagBlocking, abi.SysFlagFastcall
	Context uint8
	Args    [abi.SysArgCount]uint64
	Cookie  uint64
}

// Blocking reports whether the caller waits for the result.
func (r *Request) Blocking() bool { return r.Flags&abi.SysFlagBlocking != 0 }

// Result is what the host wrote into a finished slot.
type Result struct {
	Ret   int64
	Errno abi.Errno // 0: success
}

// Ticket is a claimed or published slot: its index and sequence number.
type Ticket struct {
	Slot uint32
	Seq  uint32
}

// Call makes one call in slot: Claim, Publish, and for a blocking request
// Wait. A non-blocking call returns a zero Result once published.
func (a *Area) Call(slot uint32, req Request) (Result, error) {
	t, err := a.Claim(slot)
	if err != nil {
		return Result{}, err
	}
	a.Publish(t, req)
	if !req.Blocking() {
		return Result{}, nil
	}
	return a.Wait(t)
}
