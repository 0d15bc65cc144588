package sandbox

import (
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/sys/unix"
)

// allowed are the system calls the sandboxed proxy makes: the Go runtime's
// (threads, signals, memory, timers, the network poller) and the served
// calls'. Names this architecture lacks are skipped.
var allowed = []string{
	// Go runtime.
	"read", "write", "close", "mmap", "munmap", "madvise", "mprotect", "brk",
	"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack",
	"exit", "exit_group", "futex", "sched_yield", "nanosleep", "clock_nanosleep",
	"clock_gettime", "clock_getres", "gettimeofday", "gettid", "getpid", "getppid", "tgkill", "tkill",
	"epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_pwait2", "epoll_wait", "eventfd2", "pipe2",
	"fcntl", "getrlimit", "prlimit64", "sched_getaffinity", "uname", "arch_prctl",
	"set_robust_list", "getrandom", "mincore", "restart_syscall",
	"setitimer", "timer_create", "timer_settime", "timer_delete",
	"getuid", "geteuid", "getgid", "getegid", "poll", "ppoll", "pselect6",
	"readv", "writev", "dup", "dup3", "fstat", "newfstatat", "statx", "lseek",
	// Served calls and the proxy's own.
	"openat", "pread64", "pwrite64", "getdents64", "mkdirat", "unlinkat",
	"connect", "sendto", "recvfrom", "sendmsg", "recvmsg",
	"getsockopt", "getsockname", "getpeername", "shutdown",
	"chdir", "umask", "setresuid", "setresgid", "getrusage",
}

// killed end the process at once: reaching them means a bug is being
// exploited.
var killed = []string{
	"execve", "execveat", "ptrace", "mount", "umount2", "pivot_root", "chroot",
	"move_mount", "open_tree", "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr",
	"setns", "kexec_load", "kexec_file_load", "bpf", "init_module", "finit_module",
	"delete_module", "perf_event_open", "keyctl", "add_key", "request_key",
	"process_vm_readv", "process_vm_writev", "userfaultfd", "open_by_handle_at",
	"name_to_handle_at", "swapon", "swapoff", "acct", "personality",
}

// nsFlags are the namespace flags no thread may use: clone and unshare are
// allowed for threads and a context's private fs state only.
const nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUSER | unix.CLONE_NEWNET | unix.CLONE_NEWPID |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// Policy returns the seccomp policy: allowed calls, clone only for threads,
// unshare without namespaces, socket of AF_UNIX, AF_INET and AF_INET6 only,
// setsockopt at SOL_SOCKET only; killed calls end the process; anything else
// fails with EPERM.
func Policy() (seccomp.Policy, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return seccomp.Policy{}, fmt.Errorf("seccomp: %w", err)
	}
	known := func(names []string) []string {
		var out []string
		for _, n := range names {
			if _, ok := info.SyscallNames[n]; ok {
				out = append(out, n)
			}
		}
		return out
	}
	return seccomp.Policy{
		DefaultAction: seccomp.ActionErrno,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionAllow, Names: known(allowed)},
			{Action: seccomp.ActionAllow, NamesWithCondtions: []seccomp.NameWithConditions{
				{Name: "clone", Conditions: seccomp.ArgumentConditions{
					{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_THREAD},
					{Argument: 0, Operation: seccomp.BitsNotSet, Value: nsFlags},
				}},
				{Name: "unshare", Conditions: seccomp.ArgumentConditions{
					{Argument: 0, Operation: seccomp.BitsNotSet, Value: nsFlags},
				}},
				// The proxy is root of a user namespace that owns its
				// network namespace (CAP_NET_ADMIN there): netlink
				// (nf_tables) and the IP levels of setsockopt (x_tables)
				// are the kernel's usual way up from there, and nothing
				// the proxy serves needs them. Socket domains as
				// sysSocket's; setsockopt at SOL_SOCKET only.
				{Name: "socket", Conditions: seccomp.ArgumentConditions{
					{Argument: 0, Operation: seccomp.Equal, Value: unix.AF_UNIX},
				}},
				{Name: "socket", Conditions: seccomp.ArgumentConditions{
					{Argument: 0, Operation: seccomp.Equal, Value: unix.AF_INET},
				}},
				{Name: "socket", Conditions: seccomp.ArgumentConditions{
					{Argument: 0, Operation: seccomp.Equal, Value: unix.AF_INET6},
				}},
				{Name: "setsockopt", Conditions: seccomp.ArgumentConditions{
					{Argument: 1, Operation: seccomp.Equal, Value: unix.SOL_SOCKET},
				}},
			}},
			{Action: seccomp.ActionKillProcess, Names: known(killed)},
		},
	}, nil
}

// Seccomp loads Policy on every thread of the process (TSYNC).
func Seccomp() error {
	p, err := Policy()
	if err != nil {
		return err
	}
	f := seccomp.Filter{NoNewPrivs: true, Flag: seccomp.FilterFlagTSync, Policy: p}
	if err := seccomp.LoadFilter(f); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	return nil
}
