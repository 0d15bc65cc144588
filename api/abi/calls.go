package abi

import (
	"errors"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Errno is a Linux errno value, as the host writes it into a finished slot's
// args[1] (0: success). The values are Linux's (x86-64 and every other
// architecture Sluice runs on agree on these).
type Errno uint32

// The errnos the syscall path itself produces (the calls return any errno
// their host call returns).
const (
	ErrnoPERM        Errno = 1
	ErrnoNOENT       Errno = 2
	ErrnoSRCH        Errno = 3 // no such guest context
	ErrnoIO          Errno = 5 // the VM's proxy died while serving the call
	ErrnoBADF        Errno = 9
	ErrnoAGAIN       Errno = 11
	ErrnoNOMEM       Errno = 12
	ErrnoACCES       Errno = 13
	ErrnoFAULT       Errno = 14 // a heap offset or length outside the heap, a string not NUL-terminated in it
	ErrnoEXIST       Errno = 17
	ErrnoXDEV        Errno = 18
	ErrnoNOTDIR      Errno = 20
	ErrnoINVAL       Errno = 22
	ErrnoMFILE       Errno = 24
	ErrnoNAMETOOLONG Errno = 36
	ErrnoNOSYS       Errno = 38 // not a call of this ABI
	ErrnoLOOP        Errno = 40
	ErrnoSTALE       Errno = 116 // a revoked fastcall
)

func (e Errno) Error() string { return "errno " + strconv.FormatUint(uint64(e), 10) }

// Name is e's symbolic name ("ENOENT"), "OK" for 0, or Error's text for a
// number Linux does not name.
func (e Errno) Name() string {
	if e == 0 {
		return "OK"
	}
	if n := unix.ErrnoName(syscall.Errno(e)); n != "" {
		return n
	}
	return e.Error()
}

// ErrnoOf maps a host call's error to the errno a guest sees: the kernel's
// own unchanged, anything else EIO.
func ErrnoOf(err error) Errno {
	var en syscall.Errno
	if errors.As(err, &en) {
		return Errno(en)
	}
	return ErrnoIO
}

// PathMax is Linux's PATH_MAX: a path argument is at most PathMax bytes with
// its NUL (longer: ENAMETOOLONG).
const PathMax = 4096

// Call numbers. The Linux calls keep their x86-64 numbers; Sluice's own calls
// are from 0x400 up. Every call is in the table below (LookupCall).
const (
	SysRead       uint16 = 0
	SysWrite      uint16 = 1
	SysClose      uint16 = 3
	SysFstat      uint16 = 5
	SysLseek      uint16 = 8
	SysMmap       uint16 = 9
	SysMunmap     uint16 = 11
	SysPread64    uint16 = 17
	SysPwrite64   uint16 = 18
	SysMadvise    uint16 = 28
	SysSocket     uint16 = 41
	SysConnect    uint16 = 42
	SysSendto     uint16 = 44
	SysRecvfrom   uint16 = 45
	SysGetrusage  uint16 = 98
	SysClockGet   uint16 = 228 // clock_gettime
	SysGetdents64 uint16 = 217
	SysOpenat     uint16 = 257
	SysMkdirat    uint16 = 258
	SysUnlinkat   uint16 = 263

	// SysNull does nothing in the proxy and returns 0: the round trip alone.
	SysNull uint16 = 0x400
	// SysContextRegister(uid, gid, umask, cwd path) → a context id (1..255).
	SysContextRegister uint16 = 0x401
	// SysContextUnregister(id) closes the context's files.
	SysContextUnregister uint16 = 0x402
	// SysFastcallRegister(op, fd, heap offset, length, file offset) → a
	// fastcall number, in the slot's context; op is SysPread64, SysPwrite64,
	// SysRead or SysWrite. A slot with SysFlagFastcall and that number runs
	// the call with no arguments and no per-call checks.
	SysFastcallRegister uint16 = 0x403
	// SysFastcallRevoke(number): later slots with it fail with ESTALE.
	SysFastcallRevoke uint16 = 0x404
)

// ArgKind says how a call reads one argument: its meaning to tools (a CLI
// that places a path in the heap) and to fuzzers.
type ArgKind uint8

const (
	ArgNone    ArgKind = iota // unused (must be ignored by the host)
	ArgInt                    // a plain integer (fd, flags, mode, length, offset)
	ArgPath                   // heap offset of a NUL-terminated path
	ArgBuf                    // heap offset of a buffer whose length is another argument
	ArgHeapOut                // heap offset of a struct the call writes (stat, timespec, rusage)
)

// Call describes one call of the ABI.
type Call struct {
	Number uint16
	Name   string
	Args   [SysArgCount]ArgKind
}

// Calls is every call of ABI 1.1, in number order.
var Calls = []Call{
	{SysRead, "read", [6]ArgKind{ArgInt, ArgBuf, ArgInt}},
	{SysWrite, "write", [6]ArgKind{ArgInt, ArgBuf, ArgInt}},
	{SysClose, "close", [6]ArgKind{ArgInt}},
	{SysFstat, "fstat", [6]ArgKind{ArgInt, ArgHeapOut}},
	{SysLseek, "lseek", [6]ArgKind{ArgInt, ArgInt, ArgInt}},
	{SysMmap, "mmap", [6]ArgKind{ArgInt, ArgInt, ArgInt, ArgInt, ArgInt, ArgInt}},
	{SysMunmap, "munmap", [6]ArgKind{ArgInt, ArgInt}},
	{SysPread64, "pread64", [6]ArgKind{ArgInt, ArgBuf, ArgInt, ArgInt}},
	{SysPwrite64, "pwrite64", [6]ArgKind{ArgInt, ArgBuf, ArgInt, ArgInt}},
	{SysMadvise, "madvise", [6]ArgKind{ArgInt, ArgInt, ArgInt}},
	{SysSocket, "socket", [6]ArgKind{ArgInt, ArgInt, ArgInt}},
	{SysConnect, "connect", [6]ArgKind{ArgInt, ArgBuf, ArgInt}},
	{SysSendto, "sendto", [6]ArgKind{ArgInt, ArgBuf, ArgInt, ArgInt, ArgBuf, ArgInt}},
	{SysRecvfrom, "recvfrom", [6]ArgKind{ArgInt, ArgBuf, ArgInt, ArgInt, ArgHeapOut, ArgHeapOut}},
	{SysGetrusage, "getrusage", [6]ArgKind{ArgInt, ArgHeapOut}},
	{SysGetdents64, "getdents64", [6]ArgKind{ArgInt, ArgBuf, ArgInt}},
	{SysClockGet, "clock_gettime", [6]ArgKind{ArgInt, ArgHeapOut}},
	{SysOpenat, "openat", [6]ArgKind{ArgInt, ArgPath, ArgInt, ArgInt}},
	{SysMkdirat, "mkdirat", [6]ArgKind{ArgInt, ArgPath, ArgInt}},
	{SysUnlinkat, "unlinkat", [6]ArgKind{ArgInt, ArgPath, ArgInt}},
	{SysNull, "null", [6]ArgKind{}},
	{SysContextRegister, "context_register", [6]ArgKind{ArgInt, ArgInt, ArgInt, ArgPath}},
	{SysContextUnregister, "context_unregister", [6]ArgKind{ArgInt}},
	{SysFastcallRegister, "fastcall_register", [6]ArgKind{ArgInt, ArgInt, ArgBuf, ArgInt, ArgInt}},
	{SysFastcallRevoke, "fastcall_revoke", [6]ArgKind{ArgInt}},
}

// callIndex maps a call number to 1 + its index in Calls (0: no call): a
// dense table, since every slot's number is looked up on the host's hot
// path (DecodeSlot, the forwarder's counters).
var callIndex = func() []uint8 {
	top := uint16(0)
	for _, c := range Calls {
		top = max(top, c.Number)
	}
	t := make([]uint8, int(top)+1)
	for i, c := range Calls {
		t[c.Number] = uint8(i + 1)
	}
	return t
}()

// CallIndex is the index in Calls of the call with number n, or -1.
func CallIndex(n uint16) int {
	if int(n) >= len(callIndex) {
		return -1
	}
	return int(callIndex[n]) - 1
}

// LookupCall returns the call with number n, or nil (ENOSYS).
func LookupCall(n uint16) *Call {
	if i := CallIndex(n); i >= 0 {
		return &Calls[i]
	}
	return nil
}

// CallByName returns the call named name ("pread64", "null", ...), or nil.
// "pread" and "pwrite" name pread64 and pwrite64.
func CallByName(name string) *Call {
	switch name {
	case "pread":
		name = "pread64"
	case "pwrite":
		name = "pwrite64"
	}
	for i := range Calls {
		if Calls[i].Name == name {
			return &Calls[i]
		}
	}
	return nil
}

// Fastcall numbers: the low FastcallIndexBits bits index the VM's fastcall
// table, the high bits are the entry's generation, bumped by each revocation
// so that a revoked number is recognised (ESTALE) even once its entry is
// reused.
const (
	FastcallIndexBits = 10
	MaxFastcalls      = 1 << FastcallIndexBits
	FastcallGenMask   = 1<<(16-FastcallIndexBits) - 1
)

// FastcallNumber packs an index and a generation.
func FastcallNumber(index, gen uint32) uint16 {
	return uint16((gen&FastcallGenMask)<<FastcallIndexBits | index&(MaxFastcalls-1))
}

// SplitFastcall is FastcallNumber's inverse.
func SplitFastcall(n uint16) (index, gen uint32) {
	return uint32(n) & (MaxFastcalls - 1), uint32(n) >> FastcallIndexBits
}
