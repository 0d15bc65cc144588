package main

import (
	"fmt"
	"os"

	"github.com/sluice-gpu/sluice/guest-agent/transport/pci"
)

// bindVFIO hands every ivshmem device present at boot to vfio-pci, so that
// the agent takes its MSI-X vectors as eventfds and sleeps until the host
// signals a completion. Where that fails (no VFIO module, no IOMMU) the
// device stays as it is and the agent polls; a device hot-plugged later is
// not bound, and polls.
func bindVFIO() {
	devs, err := pci.Find(pci.DefaultSysfsRoot)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluice-init: %v\n", err)
		return
	}
	if _, err := os.Stat("/sys/bus/pci/drivers/" + pci.VFIODriver); err != nil {
		if len(devs) > 0 {
			fmt.Println("sluice-init: no " + pci.VFIODriver + " driver: the agent will poll for completions")
		}
		return
	}
	for _, d := range devs {
		if err := pci.BindVFIO(pci.DefaultSysfsRoot, d); err != nil {
			fmt.Fprintf(os.Stderr, "sluice-init: %v\n", err)
		}
	}
}
