// Package proxy is a VM's system-call proxy: it serves the GPU system calls
// the mediator forwards (mediator/internal/proxyproto), and starts the
// sandboxed sluice-proxy process that does so for sluiced (Start).
//
// # Serving
//
// Serve sends Ready, then answers each Calls batch with Results batches: the
// receive loop answers null (the round-trip benchmark), the context table's
// calls and every early failure itself, and hands each context its share
// of the batch in one channel send; one writer gathers results into as few
// datagrams as it can. Dispatch is a table (calls) keyed by call number; the
// zero handler is ENOSYS, and a test holds the table to abi.Calls.
//
// Pointer arguments are heap offsets, checked against the heap without
// overflow (EFAULT). Paths and socket addresses are copied out of the heap
// before use (the guest rewrites it concurrently); a path must end with a
// NUL inside the heap (EFAULT) within abi.PathMax bytes (ENAMETOOLONG).
// Data buffers are handed to the kernel as heap sub-slices. The memory calls
// (mmap, munmap, madvise) act on the heap itself: see calls_mem.go.
//
// # Contexts
//
// A guest context is a goroutine locked for good to an OS thread that did
// unshare(CLONE_FS|CLONE_FILES): its own cwd, umask and fd table, and its own
// credentials, set with raw per-thread setresgid/setresuid (Go's
// syscall.Setresuid changes every thread, stopping them all). Switching
// context per request is a channel send to the right thread: no credential
// change on the hot path. Context 0 is the default (the process's own
// identity: root of the sandbox's user namespace; cwd ServeConfig.Dir;
// umask 022); SysContextRegister starts ids 1..255, SysContextUnregister
// ends one (its thread exits, its fd table and files with it). A call that
// blocks (recvfrom on a socket) holds up only its own context; results
// already made go out first.
//
// # Transport
//
// Requests arrive in the request ring the mediator sends after Ready
// (proxyproto's MsgRing); the receive loop reads them, answers null and the
// context table's calls itself and hands each context its group; every
// thread writes its results straight into the result ring (many producers,
// compare-and-swap) and kicks the mediator only when it said it sleeps. The
// receive loop watches the ring for ServeConfig.Spin after its last request,
// then announces that it sleeps and blocks in poll(2) on the socket until a
// kick; an idle context thread watches its queue for ServeConfig.ContextSpin
// (at most GOMAXPROCS-2 at a time) before it blocks.
//
// A context's fd table starts as a copy of the process's: those inherited
// descriptors (stdio, the Go runtime's epoll and eventfd, the mediator
// socket) are reserved, EBADF to the guest; the thread's copies of inherited
// sockets and pipes other than the mediator's are closed. The context's
// copy of the mediator socket carries MsgFastcall and its SCM_RIGHTS
// descriptor (a fastcall's file lives in the context's table only).
//
// Contexts are not a security boundary against the guest (any call can
// register a context of any uid inside the sandbox); the sandbox is.
//
// # Errnos
//
// Errors of host calls pass through unchanged. The proxy's own: EFAULT (heap
// range, unterminated path), ENAMETOOLONG (path), ENOSYS (no such call),
// ESRCH (context not registered), EBADF (descriptor not the guest's),
// EINVAL (a fastcall slot, SysFastcallRevoke, unregistering context 0, bad
// register or memory-call arguments), EAGAIN (all 255 contexts taken),
// EAFNOSUPPORT (socket domains other than UNIX, INET, INET6).
//
// # Sandbox
//
// Start runs sluice-proxy in new user, mount, network, PID, IPC and UTS
// namespaces, ids mapped to an unprivileged host range; the binary then
// confines itself with package sandbox before serving.
package proxy
