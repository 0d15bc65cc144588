package channel

import (
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
)

// A hand-over loses no record and completes none twice: of four records,
// two completed before the freeze, one was in flight (its late completion
// is dropped) and one not yet forwarded; the successor's channel forwards
// the last two from the frozen get, and ChCompleted goes on from the
// predecessor's count.
func TestFreezeResume(t *testing.T) {
	r := newRig(t)
	k := throttle(1000)
	r.write(k, k, k)
	r.ch.Poll()
	sent := r.gpu.take()
	if len(sent) != 3 {
		t.Fatalf("%d forwarded, want 3", len(sent))
	}
	for _, s := range sent[:2] {
		r.ch.Complete(Completion{Index: uint32(s.tag), Op: s.cmd.Op, BusyNs: 1000})
	}
	r.write(k) // after the last doorbell the old host saw

	pos := r.ch.Freeze()
	r.ch.Complete(Completion{Index: uint32(sent[2].tag), Op: k.Op, BusyNs: 1000}) // late: dropped
	if pos.Get != 2 || pos.Completed != 2 {
		t.Fatalf("position %+v, want get 2, completed 2", pos)
	}
	if got := r.ch.Snapshot().Counters; got.Commands != 2 || got.Kernels != 2 || got.BusyNs != 2000 {
		t.Fatalf("counters after a late completion %+v, want the 2 completed before the freeze", got)
	}
	if get := r.region.Load32(r.layout.ChannelOff(1) + abi.ChGet); get != 2 {
		t.Fatalf("the late completion was published: get %d", get)
	}

	// The successor: a new channel over the same region.
	succ := Resumed(1, r.region, r.layout, abi.DefaultLimits(), r.gpu, pos)
	if get := r.region.Load32(r.layout.ChannelOff(1) + abi.ChGet); get != 2 {
		t.Fatalf("the successor published get %d, want 2", get)
	}
	succ.Poll()
	again := r.gpu.take()
	if len(again) != 2 || again[0].tag != 2 || again[1].tag != 3 {
		t.Fatalf("the successor forwarded %+v, want records 2 and 3", again)
	}
	for _, s := range again {
		succ.Complete(Completion{Index: uint32(s.tag), Op: s.cmd.Op, BusyNs: 1000})
	}
	off := r.layout.ChannelOff(1)
	if get, done := r.region.Load32(off+abi.ChGet), r.region.Load64(off+abi.ChCompleted); get != 4 || done != 4 {
		t.Fatalf("after the successor: get %d, completed %d, want 4 and 4", get, done)
	}
	if got := succ.Snapshot().Counters; got.Commands != 2 || got.Kernels != 2 {
		t.Fatalf("the successor counted %+v, want its own 2", got)
	}
}

// A failure the backend reported survives the hand-over; one found by
// validation is the successor's to find again.
func TestFreezeKeepsBackendFailure(t *testing.T) {
	r := newRig(t)
	r.write(throttle(1000))
	r.ch.Poll()
	r.completeAll(abi.ErrDevice)
	pos := r.ch.Freeze()
	if !pos.Failed || pos.FailCode != abi.ErrDevice || pos.FailIndex != 0 || pos.Get != 1 {
		t.Fatalf("position %+v, want the device error on record 0", pos)
	}
	succ := Resumed(1, r.region, r.layout, abi.DefaultLimits(), r.gpu, pos)
	if s := succ.Snapshot(); s.State != abi.ChannelFailed || s.Error != abi.ErrDevice {
		t.Fatalf("successor state %v error %v, want failed with the device error", s.State, s.Error)
	}
}
