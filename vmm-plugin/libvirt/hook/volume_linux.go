//go:build linux

package hook

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// grantVolume lets uid (the user libvirt runs QEMU as) use the VM's volume
// dir, whose root belongs to the VM's sandbox id range with mode 0750:
//
//   - an access ACL entry u:UID:rwx on the root (mask widened to match), so
//     that QEMU opens the volume for its 9p device and creates files there;
//   - the same entry in the root's default ACL, over u::rwx,g::r-x,o::r-x
//     when it has none yet: files created below the root then take their
//     modes from the default ACL rather than the creator's umask, so what
//     QEMU writes with the domain's fmode/dmode (0644/0755) stays readable
//     to the sandbox, which is "other" to QEMU's files, and QEMU keeps
//     reading what the sandbox writes.
//
// Entries already there stay; one that already grants uid rwx is left as
// it is. The kernel's xattr format is written directly: no setfacl needed.
func grantVolume(dir string, uid uint32) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("volume: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("volume %s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == uid {
		return nil // QEMU's own
	}
	access, err := readACL(dir, aclXattrAccess)
	if err != nil {
		return err
	}
	if access == nil {
		access = aclFromMode(fi.Mode())
	}
	if !grants(access, uid, 7) {
		if err := writeACL(dir, aclXattrAccess, withUser(access, uid, 7)); err != nil {
			return err
		}
	}
	def, err := readACL(dir, aclXattrDefault)
	if err != nil {
		return err
	}
	if def == nil {
		def = aclFromMode(0o755)
	}
	if !grants(def, uid, 7) {
		if err := writeACL(dir, aclXattrDefault, withUser(def, uid, 7)); err != nil {
			return err
		}
	}
	return nil
}

// readACL reads an ACL xattr; nil when there is none.
func readACL(dir, name string) ([]aclEntry, error) {
	buf := make([]byte, 1024)
	for {
		n, err := unix.Getxattr(dir, name, buf)
		switch {
		case errors.Is(err, unix.ENODATA):
			return nil, nil
		case errors.Is(err, unix.ERANGE):
			buf = make([]byte, 2*len(buf))
			continue
		case err != nil:
			return nil, aclError(dir, "reading", name, err)
		}
		acl, err := parseACL(buf[:n])
		if err != nil {
			return nil, fmt.Errorf("volume %s: %s: %w", dir, name, err)
		}
		return acl, nil
	}
}

func writeACL(dir, name string, acl []aclEntry) error {
	if err := unix.Setxattr(dir, name, encodeACL(acl), 0); err != nil {
		return aclError(dir, "setting", name, err)
	}
	return nil
}

func aclError(dir, verb, name string, err error) error {
	if errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("volume %s: %s %s: the file system has no POSIX ACLs (mount it with acl, or run QEMU as root in qemu.conf): %w", dir, verb, name, err)
	}
	return fmt.Errorf("volume %s: %s %s: %w", dir, verb, name, err)
}
