package syscalls

// NullHereEnv names a diagnostic switch: with it set to 1 in sluiced's
// environment, the poller answers null calls itself, as it answers
// fastcalls, instead of forwarding them to the proxy. A GPU null call's
// round trip with and without it prices the hop to the proxy process and
// back; nothing else changes. It is for measuring only: a null call then no
// longer exercises the path every other call takes.
const NullHereEnv = "SLUICE_SYSCALL_NULL_HERE"
