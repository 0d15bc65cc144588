package daemon

import (
	"fmt"
	"os/user"
	"strconv"
	"strings"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/vmm-plugin/ivshmem"
)

// resolveOwner turns a VM's owner ("UID[:GID]", numbers or names) into the
// endpoint's owner; "" is none (only root and the daemon's user connect).
// Names are looked up on this host, so the owner kept with the VM is its
// numbers (ivshmem.Owner.String).
func resolveOwner(s string) ([]ivshmem.Owner, error) {
	if s == "" {
		return nil, nil
	}
	name, group, hasGroup := strings.Cut(s, ":")
	var o ivshmem.Owner
	var err error
	if o.UID, err = lookupID(name, "user", func(n string) (string, error) {
		u, err := user.Lookup(n)
		if err != nil {
			return "", err
		}
		return u.Uid, nil
	}); err != nil {
		return nil, fmt.Errorf("owner %q: %w: %w", s, err, hostapi.ErrInvalid)
	}
	if hasGroup {
		o.HasGID = true
		if o.GID, err = lookupID(group, "group", func(n string) (string, error) {
			g, err := user.LookupGroup(n)
			if err != nil {
				return "", err
			}
			return g.Gid, nil
		}); err != nil {
			return nil, fmt.Errorf("owner %q: %w: %w", s, err, hostapi.ErrInvalid)
		}
	}
	return []ivshmem.Owner{o}, nil
}

// lookupID is s as a number, or the id lookup finds for the name s.
func lookupID(s, what string, lookup func(string) (string, error)) (uint32, error) {
	if s == "" {
		return 0, fmt.Errorf("empty %s", what)
	}
	if s[0] >= '0' && s[0] <= '9' {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("%s id %q: want a number up to %d", what, s, uint32(1<<32-1))
		}
		return uint32(n), nil
	}
	id, err := lookup(s)
	if err != nil {
		return 0, fmt.Errorf("looking up %s %q: %w", what, s, err)
	}
	n, err := strconv.ParseUint(id, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%s %q has id %q: %w", what, s, id, err)
	}
	return uint32(n), nil
}

// ownerChange checks a new owner for the VM and returns what applies it
// (and keeps it with the VM); a no-op when the request changes none.
func ownerChange(e *entry, req hostapi.UpdateVMRequest) (func(), error) {
	if req.Owner == nil {
		return func() {}, nil
	}
	owners, err := resolveOwner(*req.Owner)
	if err != nil {
		return nil, fmt.Errorf("vm %q: %w", e.req.Name, err)
	}
	return func() {
		e.vm.SetOwners(owners)
		e.req.Owner = ownerString(owners)
	}, nil
}

// ownerString is the owner as the VM keeps it: numbers, "" for none.
func ownerString(owners []ivshmem.Owner) string {
	if len(owners) == 0 {
		return ""
	}
	return owners[0].String()
}
