package framework

import "syscall"

// sysProcAttr has the kernel kill a child if the test binary dies without
// running its cleanups (go test's -timeout panic, a SIGKILL), so that even
// then no daemon or agent outlives the suite.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
