package vm

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/vmm-plugin/ivshmem"
)

// Refusals counts the connections to a VM's endpoint that were closed
// before they joined, by why.
type Refusals struct {
	Foreign     uint64 // from a user other than the VM's owner, root or the daemon's
	NoHandshake uint64 // did not read the handshake in time, or gave up their slot unread
	Full        uint64 // every peer slot held by a guest that joined
	Other       uint64 // anything else (the connection failed during the handshake)
}

// refusals is Refusals counted as they happen, with the log they go to.
type refusals struct {
	foreign, noHandshake, full, other atomic.Uint64

	mu       sync.Mutex
	logged   time.Time // the last line
	unlogged uint64    // refusals since it, not logged
}

// refuseLogEvery bounds the refusal lines of a VM: a peer that connects in
// a loop gets one line a second, with the count of those not logged since.
// A variable so that tests can lengthen it.
var refuseLogEvery = time.Second

// refused is the endpoint's OnRefuse: it counts and logs the refusal.
func (v *VM) refused(peer ivshmem.Cred, why error) {
	r := &v.refusals
	switch {
	case errors.Is(why, ivshmem.ErrForeignPeer):
		r.foreign.Add(1)
	case errors.Is(why, ivshmem.ErrNoHandshake):
		r.noHandshake.Add(1)
	case errors.Is(why, ivshmem.ErrPeersFull):
		r.full.Add(1)
	default:
		r.other.Add(1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); r.logged.IsZero() || now.Sub(r.logged) >= refuseLogEvery {
		slog.Warn("guest connection refused", "vm", v.cfg.Name, "pid", peer.PID, "uid", peer.UID, "gid", peer.GID,
			"err", why, "not_logged_since", r.unlogged)
		r.logged, r.unlogged = now, 0
		return
	}
	r.unlogged++
}

// SetOwners changes who may open the endpoint besides root and the
// daemon's user (Config.Owners has the first) for the connections that
// follow; the guests connected stay.
func (v *VM) SetOwners(owners []ivshmem.Owner) {
	v.mu.Lock()
	srv := v.server
	v.mu.Unlock()
	if srv != nil {
		srv.SetOwners(owners)
	}
}

// Refusals counts the connections refused since the endpoint started.
func (v *VM) Refusals() Refusals {
	r := &v.refusals
	return Refusals{Foreign: r.foreign.Load(), NoHandshake: r.noHandshake.Load(), Full: r.full.Load(), Other: r.other.Load()}
}
