package hook

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// qemuOwner is the owner the hook gives the VM of a domain: the uid libvirt
// runs its QEMU as (qemuUID), so that QEMU may open the VM's endpoint and
// no other user's process may; "" for root, whom every endpoint admits.
func qemuOwner(e *env, name string) (string, error) {
	uid, _, err := qemuUID(e.qemuUser, e.qemuConf, e.domainXML)
	if err != nil {
		return "", fmt.Errorf("domain %q: %w", name, err)
	}
	if uid == 0 {
		return "", nil
	}
	return strconv.FormatUint(uint64(uid), 10), nil
}

// ownerSetter is the part of sluiced's host API that changes a VM's owner;
// hostapi.Client has it.
type ownerSetter interface {
	UpdateVM(ctx context.Context, name string, req hostapi.UpdateVMRequest) (hostapi.VM, error)
}

var _ ownerSetter = (*hostapi.Client)(nil)

// ensureOwner makes sure QEMU, running as owner, may open the endpoint of
// a VM that existed before the domain started (one the hook created has
// it). One without an owner (the fleet agent creates them so) is given
// QEMU's user; one made for another user is refused, with what to do.
func ensureOwner(ctx context.Context, api API, name, owner string, vm hostapi.VM, created bool) error {
	uid, _, _ := strings.Cut(vm.Owner, ":")
	if created || owner == "" || uid == owner {
		return nil
	}
	if vm.Owner != "" {
		return fmt.Errorf("domain %q: QEMU runs as uid %s, but the vm's endpoint admits uid %s (owner %s): delete the vm ('sluicectl vm delete %s') so that the hook creates it for QEMU",
			name, owner, uid, vm.Owner, name)
	}
	set, ok := api.(ownerSetter)
	if !ok {
		return nil
	}
	if _, err := set.UpdateVM(ctx, name, hostapi.UpdateVMRequest{Owner: &owner}); err != nil {
		return fmt.Errorf("domain %q: making QEMU's uid %s the owner of vm %q: %w", name, owner, name, err)
	}
	return nil
}
