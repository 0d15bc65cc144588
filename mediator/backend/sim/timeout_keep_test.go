package sim

import (
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// TestTimeoutLossCommittedBeforeCompletion: the loss of a VM's buffers
// after a timeout is in its device files before the timed-out command's
// completion is delivered (every completion delivered is in the state):
// a crash right after the completion leaves no buffer for a successor to
// bring back. The mover is slowed at the loss's commit; the completion
// waits for it.
func TestTimeoutLossCommittedBeforeCompletion(t *testing.T) {
	for _, clock := range []string{"virtual", "wall"} {
		t.Run(clock, func(t *testing.T) {
			var s *Sim
			if clock == "virtual" {
				s = manual(t)
			} else {
				s = newSim(t, "wall", nil)
			}
			heap := make([]byte, 4096)
			heap[0] = 9
			var v *simVM
			delivered := make(chan struct{})
			atCompletion := make(chan backend.Kept, 1)
			r := newRecorder()
			r.next = func(c backend.Completion) {
				if c.Op == abi.OpThrottle {
					atCompletion <- snapshot(t, v.dev) // the files as a crash now leaves them
					close(delivered)
				}
			}
			vm, err := s.Attach(backend.VMSpec{ID: 1, Channels: 1, Heap: heap, MaxCommandNs: 100 * us, Complete: r.complete})
			if err != nil {
				t.Fatal(err)
			}
			v = vm.(*simVM)
			do := func(c abi.Command) backend.Completion {
				t.Helper()
				n := len(r.all())
				submit(t, v, 0, c, uint64(n))
				if clock == "virtual" {
					run(t, s)
				}
				return r.wait(t, n+1)[n]
			}
			do(abi.Command{Op: abi.OpAlloc, Handle: 1, Size: 100})
			do(abi.Command{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyHostToDevice, Length: 100})
			v.dev.hook = func(committed bool) {
				if !committed {
					select { // long enough for a completion that does not wait to come first
					case <-delivered:
					case <-time.After(200 * time.Millisecond):
					}
				}
			}
			if c := do(throttle(200 * us)); c.Code != abi.ErrTimedOut {
				t.Fatalf("THROTTLE past the limit: %v", c.Code)
			}
			got, _ := adoptImage(t, <-atCompletion, heap)
			if len(got.bufs) != 0 {
				t.Errorf("the files at the timed-out command's completion hold %v: the loss was not committed", got)
			}
		})
	}
}

// TestTimedOutAllocReleasesItsPages: an ALLOC that times out is never in
// the device state, but its buffer lives until the timeout ends, and
// another channel's COPY can write it meanwhile (on the copy engine): the
// slots that wrote are released with the loss; none stays taken.
func TestTimedOutAllocReleasesItsPages(t *testing.T) {
	s := manual(t, "cmd", "1ms")
	heap := make([]byte, 2*pageSize)
	for i := range heap {
		heap[i] = byte(i%7 + 1)
	}
	r := newRecorder()
	vm, err := s.Attach(backend.VMSpec{ID: 1, Channels: 2, Heap: heap, MaxCommandNs: 100 * us, Complete: r.complete})
	if err != nil {
		t.Fatal(err)
	}
	v := vm.(*simVM)
	submit(t, v, 0, abi.Command{Op: abi.OpAlloc, Handle: 5, Size: 2 * pageSize}, 0)
	submit(t, v, 1, abi.Command{Op: abi.OpCopy, Handle: 5, Dir: abi.CopyHostToDevice, Length: pageSize + 10}, 1)
	run(t, s)
	got := r.wait(t, 2)
	for _, c := range got {
		want := abi.OK
		if c.Op == abi.OpAlloc {
			want = abi.ErrTimedOut
		}
		if c.Code != want {
			t.Fatalf("%v: %v, want %v", c.Op, c.Code, want)
		}
	}
	d := v.dev
	if d.arenaSize == 0 {
		t.Fatal("the COPY wrote no slot: the test missed what it is for")
	}
	for i, n := range d.refs {
		if n != 0 {
			t.Errorf("slot %d still named %d times", i, n)
		}
	}
	if free := uint64(len(d.free)); free != d.arenaSize/pageSize {
		t.Errorf("%d slots free of %d", free, d.arenaSize/pageSize)
	}
}

// TestFreeOfBufferNotInState: a FREE of a buffer the device state does
// not have (a timed-out ALLOC's) records nothing, which would make every
// successor refuse the state, and releases the slots it was written in.
func TestFreeOfBufferNotInState(t *testing.T) {
	d, err := newDevFile(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	b := newDevBuffer(2*pageSize, 5, d) // never recorded
	b.write(10, []byte("data in two pages, written by another channel"))
	b.write(pageSize+1, []byte("x"))
	d.commit()
	d.freeBuf(5, b)
	d.commit()
	recs, _, _, _, err := committedRecords(d.mm[:d.metaSize])
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 0 {
		t.Errorf("%d bytes of records for a buffer never in the state", len(recs))
	}
	if _, err := decodeDev(recs, d.arenaSize/pageSize, 1<<20); err != nil {
		t.Errorf("the state is refused: %v", err)
	}
	if free := uint64(len(d.free)); free != d.arenaSize/pageSize || free == 0 {
		t.Errorf("%d slots free of %d", free, d.arenaSize/pageSize)
	}
}
