// Command sluice-init is the /init of Sluice's guest image: the first and
// only process of a minimal Linux guest. It mounts /proc, /sys and /dev,
// runs /sbin/sluice-agent with the arguments named on the kernel command
// line, reports how it ended on the console, and powers the guest off.
//
// The agent's arguments come from the kernel parameter sluice.agent, words
// separated by commas (the kernel command line has no portable quoting):
//
//	sluice.agent=--device,auto,run,throttle,--kernel,100us,--duration,5s
//
// Without it the agent runs "--device info" (prints the region's header).
//
// Before the agent starts, sluice-init mounts the VM's volume (the host
// directory the VM's GPU system calls see as their root) at /volume: the
// virtio-9p device tagged sluice-volume, with 9p2000.L and cache=none so that
// what the host side writes is seen at once. A guest without the device
// boots on without /volume.
//
// It also hands each ivshmem device present at boot to vfio-pci
// (driver_override, drivers_probe), so that the agent takes the device's
// MSI-X vectors as eventfds and sleeps until the mediator signals a
// completion. That needs an IOMMU in the guest (sluicectl vm start --iommu):
// Debian's kernel has no VFIO no-IOMMU mode. Without one the device stays
// unbound and the agent polls.
// The power button (ACPI, from QMP system_powerdown or virsh shutdown) sends
// the agent SIGTERM and powers off once it has exited (or after 10 s).
// Outside a guest (not PID 1) sluice-init refuses to run: it would power the
// machine off.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// Paths inside the image.
const (
	agentPath = "/sbin/sluice-agent"
	param     = "sluice.agent="
)

// The volume: QEMU's virtio-9p device tagged volumeTag (vmm-plugin/qemu's
// VolumeTag; a test keeps them equal), mounted at volumeDir. msize bounds a
// 9p message: 512 KiB moves large files in few round trips (the kernel
// lowers it to what the transport takes).
const (
	volumeTag     = "sluice-volume"
	volumeDir     = "/volume"
	volumeOptions = "trans=virtio,version=9p2000.L,msize=524288,cache=none"
)

// version is stamped by the Makefile with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if informational(os.Args[1:], os.Stdout) {
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "sluice-init: not PID 1; this is the guest image's /init and powers the machine off when done")
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	os.Exit(run())
}

const usage = `usage: sluice-init (as /init of the guest image, PID 1)
       sluice-init --version

Mounts /proc, /sys and /dev and the VM's volume (9p tag sluice-volume) at
/volume where the guest has one, binds the ivshmem devices to vfio-pci where
the guest has an IOMMU (the agent then takes completions as interrupts), runs
/sbin/sluice-agent with the words of the kernel parameter sluice.agent
(comma-separated; default: --device,info), prints
"sluice-init: agent exited with status N" on the console and powers off. The
guest's power button stops the agent (SIGTERM) first.`

// informational answers --help and --version (anywhere, PID 1 or not) on
// out and says whether it did.
func informational(args []string, out io.Writer) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0] {
	case "--help", "-h":
		fmt.Fprintln(out, usage)
	case "--version":
		fmt.Fprintln(out, "sluice-init", version)
	default:
		return false
	}
	return true
}

// agentArgs extracts the agent's arguments from a kernel command line.
func agentArgs(cmdline string) []string {
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, param); ok && v != "" {
			return strings.Split(v, ",")
		}
	}
	return []string{"--device", "info"}
}
