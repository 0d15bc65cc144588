//go:build !linux

package hook

import "errors"

// grantVolume needs Linux's POSIX ACL xattrs.
func grantVolume(dir string, uid uint32) error {
	return errors.New("granting QEMU access to the volume needs Linux")
}
