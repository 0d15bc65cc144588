package hook

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/vmm-plugin/libvirt"
	"golang.org/x/sys/unix"
)

func TestACLCodec(t *testing.T) {
	base := aclFromMode(0o750)
	if want := []aclEntry{{aclUserObj, 7, aclUndefinedID}, {aclGroupObj, 5, aclUndefinedID}, {aclOther, 0, aclUndefinedID}}; !slices.Equal(base, want) {
		t.Fatalf("aclFromMode(0750) = %v, want %v", base, want)
	}
	acl := withUser(withUser(base, 500, 5), 64055, 7)
	acl = withUser(acl, 500, 4) // replaces
	got, err := parseACL(encodeACL(acl))
	if err != nil {
		t.Fatal(err)
	}
	want := []aclEntry{
		{aclUserObj, 7, aclUndefinedID}, {aclUser, 4, 500}, {aclUser, 7, 64055},
		{aclGroupObj, 5, aclUndefinedID}, {aclMask, 7, aclUndefinedID}, {aclOther, 0, aclUndefinedID},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("round trip = %v, want %v (sorted by tag, then id)", got, want)
	}
	if !grants(got, 64055, 7) || grants(got, 500, 7) || grants(base, 64055, 1) {
		t.Errorf("grants is wrong for %v", got)
	}
	if masked := withUser(base, 1, 1); masked[len(masked)-1] != (aclEntry{aclMask, 5, aclUndefinedID}) {
		t.Errorf("mask of %v should be the group class's union r-x", masked)
	}
	for _, bad := range [][]byte{nil, {2, 0, 0}, {1, 0, 0, 0}, {2, 0, 0, 0, 1}} {
		if _, err := parseACL(bad); err == nil {
			t.Errorf("parseACL(%v) should fail", bad)
		}
	}
}

// TestGrantVolume sets the ACLs on a real directory and checks that the
// kernel takes them and applies the default ACL to new files.
func TestGrantVolume(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("POSIX ACLs: Linux only")
	}
	dir := filepath.Join(t.TempDir(), "vol")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	const uid = 64123
	err := grantVolume(dir, uid)
	if errors.Is(err, unix.EOPNOTSUPP) {
		t.Skipf("%s has no POSIX ACLs: %v", dir, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	access, err := readACL(dir, aclXattrAccess)
	if err != nil {
		t.Fatal(err)
	}
	want := []aclEntry{{aclUserObj, 7, aclUndefinedID}, {aclUser, 7, uid}, {aclGroupObj, 5, aclUndefinedID},
		{aclMask, 7, aclUndefinedID}, {aclOther, 0, aclUndefinedID}}
	if !slices.Equal(access, want) {
		t.Errorf("access ACL %v, want %v", access, want)
	}
	def, err := readACL(dir, aclXattrDefault)
	if err != nil {
		t.Fatal(err)
	}
	want = []aclEntry{{aclUserObj, 7, aclUndefinedID}, {aclUser, 7, uid}, {aclGroupObj, 5, aclUndefinedID},
		{aclMask, 7, aclUndefinedID}, {aclOther, 5, aclUndefinedID}}
	if !slices.Equal(def, want) {
		t.Errorf("default ACL %v, want %v", def, want)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o007 != 0 {
		t.Errorf("the volume's root is %v: others must not get in", fi.Mode())
	}
	// A new file takes its mode from the default ACL, not from the umask.
	old := unix.Umask(0o077)
	f, err := os.OpenFile(filepath.Join(dir, "f"), os.O_CREATE|os.O_WRONLY, 0o644)
	unix.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if fi, err := os.Stat(f.Name()); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("a new file is %v (%v), want -rw-r--r-- whatever the umask", fi.Mode(), err)
	}
	// Again: nothing to change, nothing breaks.
	if err := grantVolume(dir, uid); err != nil {
		t.Fatal(err)
	}
	if again, _ := readACL(dir, aclXattrAccess); !slices.Equal(again, access) {
		t.Errorf("a second grant changed the ACL: %v", again)
	}
	if err := grantVolume(filepath.Join(dir, "none"), uid); err == nil {
		t.Error("a missing volume should fail")
	}
}

func TestQEMUUID(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "qemu.conf")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(conf, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("# user = \"nobody\"\nuser = \"+777\"  \ngroup = \"+5\"\n")
	static := []byte(`<domain><name>web</name><seclabel type='static' model='dac' relabel='no'><label>+4242:+42</label></seclabel></domain>`)
	plain := []byte(`<domain><name>web</name><seclabel type='dynamic' model='dac'/></domain>`)
	for _, tc := range []struct {
		flag string
		xml  []byte
		want uint32
		who  string
	}{
		{"+99", static, 99, "--qemu-user"},
		{"root", static, 0, "--qemu-user"},
		{"", static, 4242, "seclabel"},
		{"", plain, 777, "user= in " + conf},
	} {
		uid, who, err := qemuUID(tc.flag, conf, tc.xml)
		if err != nil || uid != tc.want || !strings.Contains(who, tc.who) {
			t.Errorf("qemuUID(%q, %s) = %d, %q, %v; want %d from %s", tc.flag, tc.xml, uid, who, err, tc.want, tc.who)
		}
	}
	write("user = \"no-such-user-here\"\n")
	if _, _, err := qemuUID("", conf, plain); err == nil || !strings.Contains(err.Error(), "no-such-user-here") {
		t.Errorf("an unknown user: %v", err)
	}
	// Without a setting: the distributions' default where one exists, else root.
	uid, who, err := qemuUID("", filepath.Join(dir, "none.conf"), plain)
	if err != nil || !strings.Contains(who, "default") {
		t.Errorf("default: %d, %q, %v", uid, who, err)
	}
}

// TestPrepareGrantsQEMU checks that prepare grants the volume to QEMU's user
// only when the domain shares it, and that a failed grant aborts the start.
func TestPrepareGrantsQEMU(t *testing.T) {
	var granted []string
	var grantErr error
	saved := volumeAccess
	volumeAccess = func(dir string, uid uint32) error {
		granted = append(granted, fmt.Sprint(dir, " ", uid))
		return grantErr
	}
	t.Cleanup(func() { volumeAccess = saved })
	set := libvirt.Settings{Weight: 1}
	shared := volumeDomainXML(t, "web", "/run/sluice/vms/web.sock", 5, set, "/srv/vol/web")
	api := newFakeAPI()
	if r := runHook(api, shared, "--qemu-user", "+7", "web", "prepare", "begin", "-"); r.code != ExitOK {
		t.Fatalf("prepare: %+v", r)
	}
	if want := []string{"/srv/vol/web 7"}; !slices.Equal(granted, want) {
		t.Errorf("granted %q, want %q", granted, want)
	}
	granted = nil
	api = newFakeAPI()
	if r := runHook(api, domainXML(t, "web", "/run/sluice/vms/web.sock", 5, set), "--qemu-user", "+7", "web", "prepare", "begin", "-"); r.code != ExitOK || granted != nil {
		t.Errorf("a domain without the volume: %+v, granted %q", r, granted)
	}
	if r := runHook(newFakeAPI(), shared, "--qemu-user", "root", "web", "prepare", "begin", "-"); r.code != ExitOK || granted != nil {
		t.Errorf("QEMU as root: %+v, granted %q", r, granted)
	}
	grantErr = errors.New("no ACLs here")
	api = newFakeAPI()
	r := runHook(api, shared, "--qemu-user", "+7", "web", "prepare", "begin", "-")
	if r.code != ExitError || !strings.Contains(r.stderr, "letting QEMU's user, +7 (--qemu-user), uid 7, use the vm's volume: no ACLs here") {
		t.Errorf("a failed grant: %+v", r)
	}
	if _, err := api.GetVM(t.Context(), "web"); !errors.Is(err, hostapi.ErrNotFound) {
		t.Errorf("the vm prepare created should be deleted after a failed grant: %v", err)
	}
}
