package cli

import (
	"os"
	"strconv"
)

// invokingOwner is the owner of a VM whose guest sluicectl starts itself
// (vm start): the user running sluicectl, as whom its QEMU opens the VM's
// endpoint; "" for root, whom every endpoint admits.
func invokingOwner() string {
	if uid := os.Getuid(); uid != 0 {
		return strconv.Itoa(uid)
	}
	return ""
}
