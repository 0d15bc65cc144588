package channel

import (
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
)

// Found forwards what a spinning poller found, counts no doorbell, and
// says whether anything went: a held channel's records, garbage and a
// failed channel are no work.
func TestFound(t *testing.T) {
	r := newRig(t)
	if r.ch.Found() {
		t.Fatal("work found in an empty ring")
	}
	r.write(throttle(1), throttle(2))
	if r.ch.Put() != r.put {
		t.Fatalf("Put %d, want the guest's %d", r.ch.Put(), r.put)
	}
	if !r.ch.Found() || len(r.gpu.take()) != 2 {
		t.Fatal("two valid records not forwarded as found work")
	}
	if d := r.ch.Snapshot().Doorbells; d != 0 {
		t.Fatalf("%d doorbells counted for a spin's find", d)
	}
	r.ch.SetHeld(true)
	r.write(throttle(3))
	if r.ch.Found() || len(r.gpu.take()) != 0 {
		t.Fatal("a held channel's record forwarded as found work")
	}
	r.ch.SetHeld(false)
	r.ch.Poll()
	r.gpu.take()
	var bad abi.Record
	bad[0] = 0xff // no such opcode
	r.writeRaw(bad)
	if r.ch.Found() {
		t.Fatal("garbage counted as found work")
	}
	r.write(throttle(4))
	if r.ch.Found() {
		t.Fatal("a record behind a failure counted as found work")
	}
}
