// Command sluice-libvirt-hook is Sluice's libvirt qemu hook: it creates a
// domain's VM endpoint in sluiced before QEMU starts and deletes it when the
// domain has stopped. deploy/install-libvirt-hook.sh installs it; --help
// explains the rest.
package main

import (
	"context"
	"os"

	"github.com/sluice-gpu/sluice/vmm-plugin/libvirt/hook"
)

// version is stamped by the Makefile with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	hook.Version = version
	os.Exit(hook.Run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr, nil))
}
