package backend

import (
	"encoding/json"
	"errors"
)

// ErrBadKept is returned by Attach for kept device state (VMSpec.Adopt)
// that the backend must not act on: another backend's, or a description
// that does not check out. Nothing of it is taken then; the caller may
// attach the VM afresh.
var ErrBadKept = errors.New("bad kept device state")

// Keeper is implemented by a VM whose device state can outlive the
// mediator process (sim; cuda, whose GPU worker goes on): Keep ends the
// VM's work as Close does (its queued commands and any completion that
// comes later are the caller's to drop: the commands run again in the
// successor) but keeps its device memory, modules and handles, described
// in a Kept that a successor process attaches the VM with
// (VMSpec.Adopt). The VM is done with afterwards.
type Keeper interface {
	Keep() (Kept, error)
}

// Persister is implemented by a VM whose device state lives, from its
// Attach on, in descriptors that are consistent at every instant (the
// sim's device files: a kill -9 of the process leaves them as of the
// last command that completed, or one in flight whole), so that a
// successor started after a crash attaches the VM with them
// (VMSpec.Adopt) as with a Keep's. The mediator keeps them in its fd
// store while the VM lives, and leaves them there while a successor
// adopts them. A VM attached with them goes on in the same files:
// storing them again stores nothing new.
type Persister interface {
	// Stored is the VM's descriptors, its own (the caller neither keeps
	// nor closes them: a store takes duplicates); no FDs while it has
	// none.
	Stored() Kept
}

// Kept is a VM's device state handed to a successor process. Its
// descriptors are open and inheritable across exec. Attach does not take
// them: the caller closes them once Attach returns, and a backend that
// keeps one keeps a duplicate. What they hold is hostile until the
// adopting backend has checked it.
type Kept struct {
	Backend string `json:"backend"` // the backend that kept it
	FDs     []int  `json:"fds"`
	// Data is what else the backend needs, small (it travels in the
	// hand-over's manifest); empty for a Kept whose descriptors say it
	// all, which is the only kind an fd store can keep.
	Data json.RawMessage `json:"data,omitempty"`
}

// DeviceStore keeps a VM's device state outside the mediator process
// (VMSpec.Store), under the VM's name: a successor started after a crash
// finds it as a Kept without Data (VMSpec.Adopt). It is the caller's
// store; the backend neither keeps nor closes the descriptors it passes.
type DeviceStore interface {
	// StoreKept puts k's descriptors in the store, in place of what the
	// VM's backend stored before (the names are emptied first). k.Data
	// must be empty: only descriptors are stored. On failure part of k
	// may be stored: the caller removes it (RemoveKept).
	StoreKept(k Kept) error
	// RemoveKept takes what StoreKept stored for k's backend and count of
	// descriptors out of the store.
	RemoveKept(k Kept) error
}
