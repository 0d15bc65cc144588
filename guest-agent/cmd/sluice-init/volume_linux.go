package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// mountVolume mounts the VM's volume, the virtio-9p device tagged
// volumeTag, at volumeDir. A guest started without a volume has no such
// device: that is said on the console and is no error.
func mountVolume() {
	if !hasMountTag("/sys/bus/virtio/devices", volumeTag) {
		fmt.Printf("sluice-init: no volume (no virtio-9p device tagged %s)\n", volumeTag)
		return
	}
	if err := os.MkdirAll(volumeDir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "sluice-init: creating %s: %v\n", volumeDir, err)
		return
	}
	if err := unix.Mount(volumeTag, volumeDir, "9p", unix.MS_NOSUID|unix.MS_NODEV, volumeOptions); err != nil {
		fmt.Fprintf(os.Stderr, "sluice-init: mounting the volume at %s: %v\n", volumeDir, err)
		return
	}
	fmt.Printf("sluice-init: volume mounted at %s\n", volumeDir)
}

// hasMountTag reports whether a virtio device under devices (sysfs) is a 9p
// transport carrying tag. The device is there once 9pnet_virtio has loaded:
// module loading probes synchronously.
func hasMountTag(devices, tag string) bool {
	files, _ := filepath.Glob(filepath.Join(devices, "*", "mount_tag"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.TrimRight(string(b), "\x00\n") == tag {
			return true
		}
	}
	return false
}
