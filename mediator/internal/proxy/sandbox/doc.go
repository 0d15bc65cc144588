// Package sandbox confines a VM's sluice-proxy before it serves: the layers
// that sit between a GPU program's system calls and the host, each one
// alone enough to stop what it targets.
//
//  1. Namespaces (set up by the parent, proxy.Start): a user namespace
//     mapping 0..65535 to an unprivileged host range (root inside is no one
//     outside), and new mount, network, PID, IPC and UTS namespaces.
//  2. Root: mounts made private, the VM's volume opened once (O_PATH,
//     O_NOFOLLOW) and checked (a directory owned by the sandbox's root), then
//     bind-mounted from that descriptor nosuid,nodev (open_tree,
//     mount_setattr, move_mount) and pivot_root'ed into, the old root
//     detached. "/" is the
//     volume: absolute paths, "..", and symlinks pointing out all resolve
//     inside it; no /proc, /sys or /dev exist (ENOENT).
//  3. Resource limits: RLIMIT_NOFILE (EMFILE past it), RLIMIT_NPROC (threads
//     of the sandbox's uids), RLIMIT_CORE 0, RLIMIT_FSIZE, RLIMIT_AS.
//  4. Capabilities: every thread keeps only Kept (identity switching and
//     file access as the sandbox's root); CAP_SYS_ADMIN, CAP_NET_ADMIN,
//     CAP_NET_RAW and the rest leave every set, the bounding set included.
//     Then no_new_privs.
//  5. Landlock, best effort: read and write beneath "/" (the volume),
//     nothing else; from ABI 6, abstract unix sockets and signals scoped to
//     the sandbox. Enter reports the ABI level the kernel gave.
//  6. A seccomp allowlist on every thread (TSYNC): the Go runtime's calls and
//     the served ones; the dangerous ones (exec, ptrace, mount, namespaces,
//     kernel modules, bpf, keys) kill the process; anything else is EPERM.
package sandbox
