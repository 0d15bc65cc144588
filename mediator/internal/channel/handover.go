package channel

import (
	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
)

// Position is what a channel's host side must carry across a hand-over to
// a successor process (sluiced re-executing itself): where the guest's
// ring was completed to and what the host-owned line showed. Records past
// Get that the guest wrote, forwarded or not, are the successor's to
// forward: the ones in flight at the hand-over were never counted nor
// published, so they run once, in the successor.
type Position struct {
	Get       uint32        `json:"get"`       // the next record to complete
	Fence     uint64        `json:"fence"`     // the last fence value completed
	ResetAck  uint32        `json:"reset_ack"` // the last reset request acted on
	Completed uint64        `json:"completed"` // records completed since the channel was created (ChCompleted)
	Failed    bool          `json:"failed,omitempty"`
	FailCode  abi.ErrorCode `json:"fail_code,omitempty"`
	FailIndex uint32        `json:"fail_index,omitempty"`
}

// Freeze ends the channel for a hand-over and returns its position: it
// forwards nothing more, and completions of the records in flight, which
// the backend may still report, are dropped uncounted and unpublished (the
// successor forwards those records again). Counters stop with it: they are
// the channel's final usage.
func (c *Channel) Freeze() Position {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed, c.frozen = true, true
	p := Position{Get: c.get, Fence: c.fence, ResetAck: c.resetAck, Completed: c.completedBase + c.counters.Commands}
	if c.failed && !c.failLocal {
		// A failure by validation is found again on the record, which the
		// successor reads anew; one the backend reported is not.
		p.Failed, p.FailCode, p.FailIndex = true, c.failCode, c.failIndex
	}
	return p
}

// Resumed is New for a successor process, over a region a predecessor
// served: the channel starts from p instead of from the guest's put (it
// never publishes anything else), and its counters from zero: the
// predecessor's are in the usage ledger. p comes from the predecessor, not
// from the guest: a guest cannot move get.
func Resumed(idx int, region *shm.Region, l abi.Layout, lim abi.Limits, gpu Submitter, p Position) *Channel {
	c := newChannel(idx, region, l, lim, gpu)
	c.get, c.submitted = p.Get, p.Get
	c.fence, c.resetAck, c.completedBase = p.Fence, p.ResetAck, p.Completed
	c.failed, c.failCode, c.failIndex = p.Failed, p.FailCode, p.FailIndex
	c.publishLocked()
	return c
}
