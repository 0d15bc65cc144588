package qemu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Linux's POSIX ACL xattr format (include/uapi/linux/posix_acl_xattr.h):
// a version word, then {tag u16, perm u16, id u32} entries, little endian.
const (
	aclXattrDefault = "system.posix_acl_default"
	aclVersion      = 2
	aclUserObj      = 0x01
	aclGroupObj     = 0x04
	aclOther        = 0x20
	aclUndefinedID  = 0xffffffff
)

// volumeDefaultACL is u::rwx,g::r-x,o::r-x as a default ACL.
func volumeDefaultACL() []byte {
	b := binary.LittleEndian.AppendUint32(nil, aclVersion)
	for _, e := range []struct{ tag, perm uint16 }{{aclUserObj, 7}, {aclGroupObj, 5}, {aclOther, 5}} {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, aclUndefinedID)
	}
	return b
}

// PrepareVolume readies dir to be the guest's volume: it must be a
// directory, and files QEMU creates in it must get VolumeFileMode and
// VolumeDirMode as they are. QEMU under -daemonize sets its umask to 027,
// which would leave them unreadable to "other", which is what the VM's
// system-call proxy is (its user namespace maps none of QEMU's ids). A
// default ACL on dir replaces the umask for everything created below it
// (and is inherited by new directories), so PrepareVolume sets
// u::rwx,g::r-x,o::r-x unless dir already has a default ACL, which it
// leaves alone (an operator's or the mediator's, e.g. one granting the
// proxy's host uid more).
func PrepareVolume(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("volume: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: volume %s is not a directory", ErrInvalid, dir)
	}
	_, err = unix.Getxattr(dir, aclXattrDefault, nil)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENODATA) {
		return fmt.Errorf("volume %s: reading its default ACL: %w", dir, err)
	}
	if err := unix.Setxattr(dir, aclXattrDefault, volumeDefaultACL(), 0); err != nil {
		return fmt.Errorf("volume %s: setting a default ACL so that the guest's files stay readable to the host (needs a file system with POSIX ACLs): %w", dir, err)
	}
	return nil
}
