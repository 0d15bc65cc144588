package qemu

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestPrepareVolume(t *testing.T) {
	dir := t.TempDir()
	if err := PrepareVolume(dir); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			t.Skipf("no POSIX ACLs on the temporary directory's file system: %v", err)
		}
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, err := unix.Getxattr(dir, aclXattrDefault, buf)
	if err != nil || !bytes.Equal(buf[:n], volumeDefaultACL()) {
		t.Fatalf("default ACL %x, %v; want %x", buf[:n], err, volumeDefaultACL())
	}

	// What QEMU does under -daemonize: umask 027, files created with fmode
	// and dmode. The default ACL keeps the umask out.
	old := unix.Umask(0o027)
	f, ferr := os.OpenFile(filepath.Join(dir, "f"), os.O_CREATE|os.O_WRONLY, 0o644)
	derr := os.Mkdir(filepath.Join(dir, "d"), 0o755)
	unix.Umask(old)
	if ferr != nil || derr != nil {
		t.Fatal(ferr, derr)
	}
	f.Close()
	for name, want := range map[string]os.FileMode{"f": 0o644, "d": 0o755 | os.ModeDir} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode() != want {
			t.Errorf("%s: mode %v, %v; want %v", name, st.Mode(), err, want)
		}
	}
	if _, err := unix.Getxattr(filepath.Join(dir, "d"), aclXattrDefault, buf); err != nil {
		t.Errorf("a new directory did not inherit the default ACL: %v", err)
	}

	// An existing default ACL is left as it is.
	other := volumeDefaultACL()
	other[14] = 7 // the second entry's perm: g::rwx
	if err := unix.Setxattr(dir, aclXattrDefault, other, 0); err != nil {
		t.Fatal(err)
	}
	if err := PrepareVolume(dir); err != nil {
		t.Fatal(err)
	}
	n, _ = unix.Getxattr(dir, aclXattrDefault, buf)
	if !bytes.Equal(buf[:n], other) {
		t.Errorf("PrepareVolume replaced an existing default ACL: %x", buf[:n])
	}

	if err := PrepareVolume(filepath.Join(dir, "f")); !errors.Is(err, ErrInvalid) {
		t.Errorf("a file as volume: %v", err)
	}
	if err := PrepareVolume(filepath.Join(dir, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing volume: %v", err)
	}
}
