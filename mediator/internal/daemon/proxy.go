package daemon

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxy"
	"github.com/sluice-gpu/sluice/mediator/internal/syscalls"
	"github.com/sluice-gpu/sluice/mediator/internal/vm"
)

// Each VM's proxy runs in a user namespace whose 65536 ids map to a host
// range of its own, uidBase(slot) upwards, far from real users. The range a
// VM got is the owner of its volume's root, so it survives restarts without
// a record of its own.
const (
	idRangeStart = 1 << 20
	idRangeSize  = 1 << 16
	idRanges     = 60000 // 1 MiB + 60000 × 64 Ki < 2^32
)

func uidBase(slot int) uint32 { return uint32(idRangeStart + slot*idRangeSize) }

// prepareVolume fills in the VM's volume (default VolumeDir/NAME), creates
// it, and gives its root to the VM's id range.
func (d *Daemon) prepareVolume(req *hostapi.CreateVMRequest) error {
	if d.cfg.Proxy.Binary == "off" {
		return nil
	}
	if req.Volume == "" {
		req.Volume = filepath.Join(d.cfg.Proxy.VolumeDir, req.Name)
	}
	if !filepath.IsAbs(req.Volume) {
		return fmt.Errorf("vm %q: volume %q must be an absolute path: %w", req.Name, req.Volume, hostapi.ErrInvalid)
	}
	req.Volume = filepath.Clean(req.Volume)
	if err := d.notNestedLocked(req.Name, req.Volume); err != nil {
		return err
	}
	_, err := os.Lstat(req.Volume)
	existed := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("vm %q: volume: %w", req.Name, err)
	}
	// 0711: the sandbox's contexts of other uids than its root must reach
	// their working directories (search, no listing of the root).
	if err := os.MkdirAll(req.Volume, 0o711); err != nil {
		return fmt.Errorf("vm %q: creating its volume: %w", req.Name, err)
	}
	if err := searchable(filepath.Dir(req.Volume)); err != nil {
		return fmt.Errorf("vm %q: volume %q: %w: %w", req.Name, req.Volume, hostapi.ErrInvalid, err)
	}
	fi, err := os.Lstat(req.Volume)
	if err != nil {
		return fmt.Errorf("vm %q: volume: %w", req.Name, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("vm %q: volume %q is not a directory (a symbolic link is not followed: name the directory itself): %w", req.Name, req.Volume, hostapi.ErrInvalid)
	}
	if _, ok := volumeBase(fi); ok {
		return nil
	}
	// Giving a directory to a sandbox lets the guest create, replace and
	// delete anything in it: only a new or empty one is given (never /etc
	// or a home directory named by mistake).
	if existed {
		if empty, err := isEmptyDir(req.Volume); err != nil || !empty {
			owner := -1
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				owner = int(st.Uid)
			}
			return fmt.Errorf("vm %q: volume %q already holds files and is no sandbox's (owner uid %d): sluiced gives a volume's root to the VM's sandbox, whose guest may then change anything in it; name a new or empty directory: %w",
				req.Name, req.Volume, owner, hostapi.ErrInvalid)
		}
	}
	base, err := d.freeBaseLocked()
	if err != nil {
		return fmt.Errorf("vm %q: %w", req.Name, err)
	}
	// The sandbox's root (uid 0 inside) owns the volume's root; the guest's
	// files arriving over 9p keep their own owners.
	if err := os.Lchown(req.Volume, int(base), int(base)); err != nil {
		return fmt.Errorf("vm %q: giving its volume to its sandbox: %w", req.Name, err)
	}
	return nil
}

// checkPlacement checks the VM's proxy network namespace and cgroup: a
// network namespace is a name of /run/netns (no path: "../../proc/1/ns/net"
// would put the proxy, and the guest's sockets, in the host's), a cgroup an
// absolute path. With exist, both must exist now: a VM created with a
// mistyped one would only show its proxy failing to start, again and again.
func checkPlacement(req hostapi.CreateVMRequest, exist bool) error {
	if n := req.NetNS; n != "" {
		if n == "." || n == ".." || strings.ContainsAny(n, "/\x00") {
			return fmt.Errorf("vm %q: network namespace %q: want a name in /run/netns (ip netns list): %w", req.Name, n, hostapi.ErrInvalid)
		}
		if exist {
			if _, err := os.Stat(filepath.Join("/run/netns", n)); err != nil {
				return fmt.Errorf("vm %q: network namespace %q: %w (create it with ip netns add %s): %w", req.Name, n, err, n, hostapi.ErrInvalid)
			}
		}
	}
	if c := req.Cgroup; c != "" {
		if !filepath.IsAbs(c) {
			return fmt.Errorf("vm %q: cgroup %q must be an absolute path (e.g. /sys/fs/cgroup/sluice/%s): %w", req.Name, c, req.Name, hostapi.ErrInvalid)
		}
		if exist {
			if _, err := os.Stat(filepath.Join(c, "cgroup.procs")); err != nil {
				return fmt.Errorf("vm %q: cgroup %q is not a cgroup v2 directory: %w (create it with mkdir under /sys/fs/cgroup): %w", req.Name, c, err, hostapi.ErrInvalid)
			}
		}
	}
	return nil
}

// isEmptyDir says whether dir has no entries.
func isEmptyDir(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return false, err
}

// notNestedLocked refuses a volume inside another VM's, or holding one: the
// outer VM's guest could then replace the inner volume's root (and with it
// the id range the inner sandbox runs as, read from the root's owner).
func (d *Daemon) notNestedLocked(name, vol string) error {
	for other, e := range d.vms {
		if other == name || e.req.Volume == "" {
			continue
		}
		if within(vol, e.req.Volume) || within(e.req.Volume, vol) {
			return fmt.Errorf("vm %q: volume %q overlaps vm %q's volume %q: give each VM a directory of its own: %w",
				name, vol, other, e.req.Volume, hostapi.ErrInvalid)
		}
	}
	return nil
}

// within reports whether path is dir or below it (both clean and absolute).
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// searchable checks that the sandbox, whose ids are nobody's on the host,
// can reach a volume in dir: every directory up to / must let others
// search it (o+x).
func searchable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("the sandbox cannot reach it: %s is mode %v, needs o+x (chmod o+x %s)", d, fi.Mode().Perm(), d)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// volumeBase reads the id range a volume's owner names.
func volumeBase(fi os.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid < idRangeStart || (st.Uid-idRangeStart)%idRangeSize != 0 || st.Uid >= uidBase(idRanges) {
		return 0, false
	}
	return st.Uid, true
}

// freeBaseLocked picks an id range no VM's volume has.
func (d *Daemon) freeBaseLocked() (uint32, error) {
	used := map[uint32]bool{}
	for _, e := range d.vms {
		if fi, err := os.Stat(e.req.Volume); err == nil {
			if b, ok := volumeBase(fi); ok {
				used[b] = true
			}
		}
	}
	for slot := range idRanges {
		if !used[uidBase(slot)] {
			return uidBase(slot), nil
		}
	}
	return 0, errors.New("no free id range for a sandbox")
}

// proxyStarter is how the VM's forwarder starts its sluice-proxy: in the
// sandbox, rooted at the VM's volume, with the VM's heap mapped.
func (d *Daemon) proxyStarter(req hostapi.CreateVMRequest, id uint32) vm.ProxyStarter {
	if d.cfg.Proxy.Binary == "off" {
		return nil
	}
	bin := d.cfg.Proxy.Binary
	return func(memfd int, heapOff int64, heapSize uint64) (syscalls.Proxy, error) {
		fi, err := os.Stat(req.Volume)
		if err != nil {
			return nil, fmt.Errorf("volume of vm %q: %w", req.Name, err)
		}
		base, ok := volumeBase(fi)
		if !ok {
			return nil, fmt.Errorf("volume %q of vm %q is not owned by a sandbox id range (was it chowned?)", req.Volume, req.Name)
		}
		p, err := proxy.Start(proxy.StartConfig{
			Binary:   bin,
			VM:       req.Name,
			Volume:   req.Volume,
			HeapFD:   memfd,
			HeapOff:  uint64(heapOff),
			HeapSize: heapSize,
			MaxFiles: d.cfg.Proxy.MaxFiles,
			// The VM's fastcalls get the same (vm.Config.MaxFileSize).
			MaxFileSize: d.cfg.Proxy.MaxFileSize,
			NetNS:       req.NetNS,
			Cgroup:      req.Cgroup,
			UIDBase:     base,
			Stderr:      os.Stderr,
		})
		if err != nil {
			return nil, err
		}
		return p.Handle(), nil
	}
}

// addSearch lets others search dir (o+x), which the sandboxes need to reach
// their volumes; it adds nothing else.
func addSearch(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o001 != 0 {
		return nil
	}
	if err := os.Chmod(dir, fi.Mode().Perm()|0o001); err != nil {
		return fmt.Errorf("letting the syscall sandboxes reach %s: %w", dir, err)
	}
	return nil
}
