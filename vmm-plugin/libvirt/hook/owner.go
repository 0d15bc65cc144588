package hook

import (
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

// checkOwner makes sure QEMU, running as owner, may open the endpoint of a
// VM that existed before the domain started: one made for another user
// would refuse it. A VM without an owner admits the daemon's user, which the
// hook cannot know, so it passes.
func checkOwner(name, owner string, vm hostapi.VM) error {
	uid, _, _ := strings.Cut(vm.Owner, ":")
	if owner == "" || vm.Owner == "" || uid == owner {
		return nil
	}
	return fmt.Errorf("domain %q: QEMU runs as uid %s, but the vm's endpoint admits uid %s (owner %s): delete the vm ('sluicectl vm delete %s') so that the hook creates it for QEMU",
		name, owner, uid, vm.Owner, name)
}
