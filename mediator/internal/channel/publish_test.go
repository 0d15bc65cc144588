package channel

import (
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
)

// A publication stores only the fields of the host line that changed (the
// guest polls that line: every store takes it from the guest's core), and
// Republish writes the whole line again.
func TestPublishWritesOnlyChanges(t *testing.T) {
	r := newRig(t)
	off := r.layout.ChannelOff(1)
	// Scribbles on fields a NOP does not change, as a guest could write.
	r.region.Store64(off+abi.ChFence, 0xfe)
	r.region.Store32(off+abi.ChResetAck, 0xac)
	r.region.Store32(off+abi.ChErrorIndex, 0x1d)
	r.write(abi.Command{Op: abi.OpNop})
	r.ch.Poll()
	if s := abi.ChannelState(r.host32(abi.ChState)); s != abi.ChannelBusy {
		t.Fatalf("state %v after forwarding, want busy", s)
	}
	r.completeAll(abi.OK)
	if g, c, s := r.host32(abi.ChGet), r.region.Load64(off+abi.ChCompleted), abi.ChannelState(r.host32(abi.ChState)); g != 1 || c != 1 || s != abi.ChannelIdle {
		t.Fatalf("after the completion: get %d, completed %d, state %v; want 1, 1, idle", g, c, s)
	}
	if f, a, i := r.region.Load64(off+abi.ChFence), r.host32(abi.ChResetAck), r.host32(abi.ChErrorIndex); f != 0xfe || a != 0xac || i != 0x1d {
		t.Fatalf("unchanged fields written again: fence %#x, reset_ack %#x, error_index %#x", f, a, i)
	}
	r.region.Store32(off+abi.ChGet, 77)
	r.ch.Republish()
	if f, a, i, g := r.region.Load64(off+abi.ChFence), r.host32(abi.ChResetAck), r.host32(abi.ChErrorIndex), r.host32(abi.ChGet); f != 0 || a != 0 || i != 0 || g != 1 {
		t.Fatalf("after Republish: fence %#x, reset_ack %#x, error_index %#x, get %d; want 0, 0, 0, 1", f, a, i, g)
	}
	// A failure still publishes its index with its code, and a reset
	// clears both.
	r.write(throttle(1))
	r.ch.Poll()
	r.completeAll(abi.ErrDevice)
	if c, i := abi.ErrorCode(r.host32(abi.ChError)), r.host32(abi.ChErrorIndex); c != abi.ErrDevice || i != 1 {
		t.Fatalf("error %v at %d, want %v at 1", c, i, abi.ErrDevice)
	}
	r.region.Store32(off+abi.ChReset, 1)
	r.ch.Poll()
	if c, i, a := abi.ErrorCode(r.host32(abi.ChError)), r.host32(abi.ChErrorIndex), r.host32(abi.ChResetAck); c != abi.OK || i != 0 || a != 1 {
		t.Fatalf("after the reset: error %v at %d, reset_ack %d; want OK at 0, 1", c, i, a)
	}
}
