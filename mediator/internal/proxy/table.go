package proxy

import (
	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// where says which goroutine serves a call.
type where uint8

const (
	// nowhere: the zero handler, ENOSYS.
	nowhere where = iota
	// inContext: the context's own thread (its identity, cwd, fd table).
	inContext
	// inLoop: the receive loop itself, no hand-off (null, the context
	// table's own calls).
	inLoop
	// inMediator: calls the mediator serves itself; reaching the proxy is a
	// mediator bug, answered EINVAL.
	inMediator
)

// callFunc serves one request on its context's thread and returns the
// call's value or an errno.
type callFunc func(c *guestContext, r *proxyproto.Request) (int64, abi.Errno)

// handler is one entry of the dispatch table. The zero handler is ENOSYS.
type handler struct {
	name  string
	where where
	fn    callFunc // inContext only
	// mayBlock: the call can wait on the outside world (a socket, a pipe):
	// the context sends the results it holds before making it, so that a
	// blocked call delays nothing but the calls behind it in its context.
	mayBlock bool
}

func ctxCall(name string, fn callFunc) handler {
	return handler{name: name, where: inContext, fn: fn}
}

func blockingCall(name string, fn callFunc) handler {
	return handler{name: name, where: inContext, fn: fn, mayBlock: true}
}

func loopCall(name string) handler     { return handler{name: name, where: inLoop} }
func mediatorCall(name string) handler { return handler{name: name, where: inMediator} }

// calls is the dispatch table, keyed by call number; it covers exactly
// abi.Calls (tested).
var calls = map[uint16]handler{
	abi.SysRead:       blockingCall("read", sysRead),
	abi.SysWrite:      blockingCall("write", sysWrite),
	abi.SysClose:      ctxCall("close", sysClose),
	abi.SysFstat:      ctxCall("fstat", sysFstat),
	abi.SysLseek:      ctxCall("lseek", sysLseek),
	abi.SysMmap:       ctxCall("mmap", sysMmap),
	abi.SysMunmap:     ctxCall("munmap", sysMunmap),
	abi.SysPread64:    ctxCall("pread64", sysPread64),
	abi.SysPwrite64:   ctxCall("pwrite64", sysPwrite64),
	abi.SysMadvise:    ctxCall("madvise", sysMadvise),
	abi.SysSocket:     ctxCall("socket", sysSocket),
	abi.SysConnect:    blockingCall("connect", sysConnect),
	abi.SysSendto:     blockingCall("sendto", sysSendto),
	abi.SysRecvfrom:   blockingCall("recvfrom", sysRecvfrom),
	abi.SysGetrusage:  ctxCall("getrusage", sysGetrusage),
	abi.SysGetdents64: ctxCall("getdents64", sysGetdents64),
	abi.SysClockGet:   ctxCall("clock_gettime", sysClockGettime),
	abi.SysOpenat:     ctxCall("openat", sysOpenat),
	abi.SysMkdirat:    ctxCall("mkdirat", sysMkdirat),
	abi.SysUnlinkat:   ctxCall("unlinkat", sysUnlinkat),

	abi.SysNull:              loopCall("null"),
	abi.SysContextRegister:   loopCall("context_register"),
	abi.SysContextUnregister: loopCall("context_unregister"),
	abi.SysFastcallRegister:  ctxCall("fastcall_register", sysFastcallRegister),
	abi.SysFastcallRevoke:    mediatorCall("fastcall_revoke"),
}

// byIndex is calls by abi.CallIndex: an index instead of a map lookup on
// every call (a map's hash was a fifth of the receive loop's time at 1024
// GPU callers of null calls on an H100).
var byIndex = func() []handler {
	t := make([]handler, len(abi.Calls))
	for n, h := range calls {
		if i := abi.CallIndex(n); i >= 0 {
			t[i] = h
		}
	}
	return t
}()

// noHandler is the zero handler: ENOSYS.
var noHandler handler

// lookup returns the handler of call number n (the zero handler: ENOSYS).
func lookup(n uint16) *handler {
	if i := abi.CallIndex(n); i >= 0 {
		return &byIndex[i]
	}
	return &noHandler
}
