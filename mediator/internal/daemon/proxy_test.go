package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// A volume that already holds files and belongs to no sandbox is refused,
// untouched: sluiced gives a volume's root to the VM's sandbox, and a
// typo'd --volume /etc must not hand /etc to a guest. New and empty
// directories are given; a symbolic link is not followed.
func TestPrepareVolumeRefusesForeignDirs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the volume is chowned to a sandbox id range")
	}
	d := &Daemon{cfg: Config{Proxy: ProxyConfig{Binary: "/x/sluice-proxy"}}, vms: map[string]*entry{}}
	dir := t.TempDir()
	for _, p := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	owner := func(p string) uint32 {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid
	}

	full := filepath.Join(dir, "full")
	if err := os.MkdirAll(filepath.Join(full, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	req := hostapi.CreateVMRequest{Name: "a", Volume: full}
	if err := d.prepareVolume(&req); !errors.Is(err, hostapi.ErrInvalid) {
		t.Errorf("volume with files: %v, want ErrInvalid", err)
	}
	if u := owner(full); u != 0 {
		t.Errorf("the refused volume was given to uid %d", u)
	}

	link := filepath.Join(dir, "link")
	if err := os.Symlink(full, link); err != nil {
		t.Fatal(err)
	}
	req = hostapi.CreateVMRequest{Name: "b", Volume: link}
	if err := d.prepareVolume(&req); !errors.Is(err, hostapi.ErrInvalid) {
		t.Errorf("volume through a symlink: %v, want ErrInvalid", err)
	}
	if u := owner(full); u != 0 {
		t.Errorf("the symlink's target was given to uid %d", u)
	}

	for _, name := range []string{"new", "empty"} {
		vol := filepath.Join(dir, name)
		if name == "empty" {
			if err := os.Mkdir(vol, 0o711); err != nil {
				t.Fatal(err)
			}
		}
		req = hostapi.CreateVMRequest{Name: name, Volume: vol}
		if err := d.prepareVolume(&req); err != nil {
			t.Fatalf("%s volume: %v", name, err)
		}
		if u := owner(vol); u < idRangeStart {
			t.Errorf("%s volume owned by %d, want a sandbox range", name, u)
		}
		// Files in it now, and its owner says it is a sandbox's: accepted
		// again (a restart, a re-created VM).
		if err := os.WriteFile(filepath.Join(vol, "f"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := d.prepareVolume(&req); err != nil {
			t.Errorf("%s volume again: %v", name, err)
		}
	}
}

// A proxy's network namespace is a name of /run/netns and its cgroup an
// absolute cgroup v2 directory, both there when the VM is created: a path
// would let "vm create --netns ../../proc/1/ns/net" put the guest's sockets
// in the host's namespace, and a missing one only showed as a proxy failing
// to start over and over.
func TestCreateVMChecksProxyPlacement(t *testing.T) {
	d := newDaemon(t, "virtual", t.TempDir())
	for _, req := range []hostapi.CreateVMRequest{
		{Name: "n1", NetNS: "../../proc/1/ns/net"},
		{Name: "n2", NetNS: ".."},
		{Name: "n3", NetNS: "sluice-test-no-such-netns"},
		{Name: "c1", Cgroup: "sluice/vm"},
		{Name: "c2", Cgroup: t.TempDir()}, // a directory, no cgroup
	} {
		_, err := d.CreateVM(t.Context(), req)
		if !errors.Is(err, hostapi.ErrInvalid) {
			t.Errorf("netns %q, cgroup %q: %v, want ErrInvalid", req.NetNS, req.Cgroup, err)
		}
	}
	if vms, _ := d.ListVMs(t.Context()); len(vms) != 0 {
		t.Errorf("%d vms created", len(vms))
	}
}

func TestVolumesDoNotNest(t *testing.T) {
	d := &Daemon{vms: map[string]*entry{"outer": {req: hostapi.CreateVMRequest{Name: "outer", Volume: "/srv/vols/outer"}}}}
	for _, tc := range []struct {
		vol string
		ok  bool
	}{
		{"/srv/vols/outer/inner", false}, // inside another VM's volume
		{"/srv/vols", false},             // holding it
		{"/srv/vols/outer", false},       // the same
		{"/srv/vols/outer2", true},       // a sibling whose name shares a prefix
		{"/srv/other", true},
	} {
		err := d.notNestedLocked("new", tc.vol)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, hostapi.ErrInvalid)) {
			t.Errorf("volume %s: %v, want ok=%v", tc.vol, err, tc.ok)
		}
	}
	if err := d.notNestedLocked("outer", "/srv/vols/outer"); err != nil {
		t.Errorf("a VM's own volume (restore): %v", err)
	}
}
