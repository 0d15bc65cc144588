package sandbox

import (
	"errors"
	"fmt"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Config says how to confine the process.
type Config struct {
	// Volume is the host directory that becomes "/". Required.
	Volume string
	// MaxFiles is RLIMIT_NOFILE; default 256.
	MaxFiles uint64
	// MaxFileSize is RLIMIT_FSIZE in bytes; 0: unlimited.
	MaxFileSize uint64
	// AddressSpace is RLIMIT_AS in bytes; 0: unlimited. The heap mapping
	// and the Go runtime's reservations count against it.
	AddressSpace uint64
	// Threads is RLIMIT_NPROC (it counts threads, per uid); default 1024.
	Threads uint64
}

// DefaultConfig returns the defaults for volume dir.
func DefaultConfig(dir string) Config {
	return Config{Volume: dir, MaxFiles: 256, Threads: 1024}
}

// Validate checks cfg.
func (cfg Config) Validate() error {
	switch {
	case cfg.Volume == "":
		return fmt.Errorf("sandbox: no volume")
	case cfg.MaxFiles < 8:
		return fmt.Errorf("sandbox: max files %d < 8", cfg.MaxFiles)
	case cfg.Threads < 16:
		return fmt.Errorf("sandbox: threads %d < 16", cfg.Threads)
	}
	return nil
}

// Report is what Enter got from the kernel.
type Report struct {
	LandlockABI int // 0: no Landlock on this kernel
	// LandlockScoped: abstract unix sockets and signals are scoped to the
	// sandbox (LandlockABI >= LandlockScopes).
	LandlockScoped bool
}

// Enter confines the calling process, layers 2 to 6 (see the package doc).
// Call it before the process starts any thread of its own that changes its
// fs state (a context): it is process-wide and irreversible.
func Enter(cfg Config) (Report, error) {
	var rep Report
	if err := cfg.Validate(); err != nil {
		return rep, err
	}
	last, err := LastCap()
	if err != nil {
		return rep, err
	}
	if err := Root(cfg.Volume); err != nil {
		return rep, err
	}
	if err := Limits(cfg); err != nil {
		return rep, err
	}
	if err := DropCapabilities(last); err != nil {
		return rep, err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return rep, fmt.Errorf("setting no_new_privs: %w", err)
	}
	abi, err := Landlock()
	if err != nil {
		return rep, err
	}
	rep.LandlockABI, rep.LandlockScoped = abi, abi >= LandlockScopes
	return rep, Seccomp()
}

// Root makes dir the process's "/" (nosuid, nodev), with nothing above it.
//
// The volume is opened once (O_PATH, O_NOFOLLOW: a volume that is itself a
// symbolic link is refused) and checked through that descriptor: a directory
// owned by this namespace's root (the parent chowned it to the sandbox's
// UIDBase). Everything after works on the descriptor, never on the path
// again: the bind mount is a clone of it (open_tree), made nosuid,nodev
// (mount_setattr) and attached on top of it (move_mount), and the process
// enters it by descriptor before pivot_root. So what was checked is what is
// mounted, whatever happens to the path meanwhile. Needs Linux 5.12.
func Root(dir string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	vol, err := OpenVolume(dir)
	if err != nil {
		return err
	}
	defer unix.Close(vol)
	tree, err := unix.OpenTree(vol, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("bind-mounting the volume %s (open_tree): %w", dir, err)
	}
	defer unix.Close(tree)
	// Only sets flags: the ones the host locked on the mount stay as they are.
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("making the volume nosuid,nodev (mount_setattr): %w", err)
	}
	if err := unix.MoveMount(tree, "", vol, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("attaching the volume's mount (move_mount): %w", err)
	}
	if err := unix.Fchdir(tree); err != nil {
		return fmt.Errorf("entering the volume: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root into the volume: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("entering the new root: %w", err)
	}
	return nil
}

// ErrVolumeSymlink is returned for a volume path whose last component is a
// symbolic link: the sandbox binds only the directory named directly.
var ErrVolumeSymlink = errors.New("is a symbolic link (give the directory itself)")

// OpenVolume opens dir once, O_PATH|O_NOFOLLOW, and checks it through the
// descriptor: a directory (not a symbolic link: ErrVolumeSymlink), owned by
// uid 0 of the caller's user namespace. It returns the descriptor.
func OpenVolume(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening the volume %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("checking the volume %s: %w", dir, err)
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		err = fmt.Errorf("the volume %s %w", dir, ErrVolumeSymlink)
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		err = fmt.Errorf("the volume %s is not a directory (mode %#o)", dir, st.Mode)
	case st.Uid != 0:
		err = fmt.Errorf("the volume %s is owned by uid %d of the sandbox, want 0 (its root: the parent chowns it to the sandbox's id base)", dir, st.Uid)
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// Limits sets the resource limits of cfg.
func Limits(cfg Config) error {
	for _, l := range []struct {
		name     string
		resource int
		v        uint64
	}{
		{"RLIMIT_NOFILE", unix.RLIMIT_NOFILE, cfg.MaxFiles},
		{"RLIMIT_NPROC", unix.RLIMIT_NPROC, cfg.Threads},
		{"RLIMIT_CORE", unix.RLIMIT_CORE, 0},
		{"RLIMIT_FSIZE", unix.RLIMIT_FSIZE, orInfinity(cfg.MaxFileSize)},
		{"RLIMIT_AS", unix.RLIMIT_AS, orInfinity(cfg.AddressSpace)},
	} {
		if err := unix.Setrlimit(l.resource, &unix.Rlimit{Cur: l.v, Max: l.v}); err != nil {
			return fmt.Errorf("setting %s to %d: %w", l.name, l.v, err)
		}
	}
	return nil
}

func orInfinity(v uint64) uint64 {
	if v == 0 {
		return unix.RLIM_INFINITY
	}
	return v
}

// Landlock allows reading and writing beneath "/" and nothing else, and,
// from ABI 6 (Linux 6.12), scopes abstract unix sockets and signals to the
// sandbox: connecting to an abstract socket that a process outside the
// sandbox bound (in the proxy's network namespace, which may be a named one
// the operator shares with host processes) is EPERM, and so is signalling a
// process outside it. Best effort: it does what the kernel's Landlock can and
// returns the kernel's ABI level (0: none, nothing done). TCP ports are not
// restricted (the proxy's sockets may connect where its network namespace
// reaches).
func Landlock() (int, error) {
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil {
		abi = 0
	}
	cfg := landlock.Config{HandledAccessFS: landlock.V7.HandledAccessFS, Scoped: landlock.V7.Scoped}
	if err := cfg.BestEffort().Restrict(landlock.RWDirs("/").WithRefer()); err != nil {
		return abi, fmt.Errorf("landlock: %w", err)
	}
	return abi, nil
}

// LandlockScopes is the first Landlock ABI that scopes abstract unix sockets
// and signals.
const LandlockScopes = 6
