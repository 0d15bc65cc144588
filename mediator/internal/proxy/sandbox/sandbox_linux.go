package sandbox

import (
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
	rep.LandlockABI = abi
	return rep, Seccomp()
}

// Root makes dir the process's "/" (nosuid, nodev), with nothing above it.
func Root(dir string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting the volume %s: %w", dir, err)
	}
	// A remount must keep the flags the host locked on the mount.
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return fmt.Errorf("reading the volume's mount flags: %w", err)
	}
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_NOSUID | unix.MS_NODEV)
	for _, f := range []struct{ st, ms uintptr }{
		{unix.ST_RDONLY, unix.MS_RDONLY}, {unix.ST_NOEXEC, unix.MS_NOEXEC},
		{unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME},
		{unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(fs.Flags)&f.st != 0 {
			flags |= f.ms
		}
	}
	if err := unix.Mount("", dir, "", flags, ""); err != nil {
		return fmt.Errorf("remounting the volume nosuid,nodev: %w", err)
	}
	if err := unix.Chdir(dir); err != nil {
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

// Landlock allows reading and writing beneath "/" and nothing else, as far
// as the kernel's Landlock goes; it returns the kernel's ABI level (0: none,
// nothing done).
func Landlock() (int, error) {
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil {
		abi = 0
	}
	if err := landlock.V7.BestEffort().RestrictPaths(landlock.RWDirs("/").WithRefer()); err != nil {
		return abi, fmt.Errorf("landlock: %w", err)
	}
	return abi, nil
}
