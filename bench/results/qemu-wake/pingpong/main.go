// Command pingpong times the raw ivshmem round trip between a QEMU guest and
// a host peer, without Sluice's rings: the guest stores a sequence number
// in the shared region and rings the host's doorbell; the host, woken on its
// eventfd, stores the number back and, in irq mode, signals the guest's
// vector 0. The guest either spins on the region (poll) or sleeps on the
// vector's MSI-X eventfd through vfio-pci (irq). It is the floor under the
// guest's NOP round trip through sluiced.
//
//	pingpong host --socket PATH          # an ivshmem server QEMU's ivshmem-doorbell joins
//	pingpong guest --mode poll|irq       # in the guest, as its /sbin/sluice-agent (run.sh)
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

var version = "dev"

func main() {
	root := &cobra.Command{Use: "pingpong", Version: version, SilenceUsage: true, SilenceErrors: true,
		Short: "Raw ivshmem round trip between a QEMU guest and a host peer: host, guest"}
	root.SetVersionTemplate("pingpong {{.Version}}\n")
	root.AddCommand(hostCmd(), guestCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "pingpong:", err)
		os.Exit(1)
	}
}

// Words of the shared region: the guest's number, the host's answer, and
// whether the host signals the guest's vector 0 after answering.
const (
	offSeq    = 0
	offAnswer = 8
	offNotify = 16
	// regionSize is a power of two, as QEMU requires of BAR2.
	regionSize = 1 << 20
	// vectors matches what run.sh gives ivshmem-doorbell.
	vectors = 6
)
