package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"

	"golang.org/x/sys/unix"
)

func run() int {
	for _, m := range []struct{ src, dst, fstype string }{
		{"proc", "/proc", "proc"},
		{"sysfs", "/sys", "sysfs"},
		{"devtmpfs", "/dev", "devtmpfs"},
	} {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "sluice-init: creating %s: %v\n", m.dst, err)
		}
		if err := unix.Mount(m.src, m.dst, m.fstype, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			fmt.Fprintf(os.Stderr, "sluice-init: mounting %s: %v\n", m.dst, err)
		}
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluice-init: reading the kernel command line: %v\n", err)
	}
	args := agentArgs(string(cmdline))
	cmd := exec.Command(agentPath, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	status := 0
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			status = ee.ExitCode()
		} else {
			fmt.Fprintf(os.Stderr, "sluice-init: running %s: %v\n", agentPath, err)
			status = 127
		}
	}
	fmt.Printf("sluice-init: agent exited with status %d\n", status)
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		fmt.Fprintf(os.Stderr, "sluice-init: powering off: %v\n", err)
	}
	select {} // PID 1 must not exit: the kernel would panic
}
