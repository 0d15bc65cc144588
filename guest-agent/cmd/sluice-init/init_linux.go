package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Where the image keeps the kernel modules init loads: the ACPI power button
// and the input event interface, so that a host's "powerdown" (QMP
// system_powerdown, virsh shutdown) stops the guest cleanly, virtio-pci
// and 9p, for the volume, and vfio-pci, for the ivshmem device's interrupts.
const moduleDir = "/lib/sluice-modules"

// stopGrace is how long the agent gets to finish after the power button.
const stopGrace = 10 * time.Second

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
	loadModules(moduleDir)
	bindVFIO()
	mountVolume()
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluice-init: reading the kernel command line: %v\n", err)
	}
	args := agentArgs(string(cmdline))
	cmd := exec.Command(agentPath, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	status := 0
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "sluice-init: running %s: %v\n", agentPath, err)
		status = 127
	} else {
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		button := make(chan struct{}, 1)
		go watchPowerButton(button)
		select {
		case err = <-exited:
		case <-button:
			fmt.Println("sluice-init: power button: stopping the agent")
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err = <-exited:
			case <-time.After(stopGrace):
				cmd.Process.Kill()
				err = <-exited
			}
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			status = ee.ExitCode()
		}
	}
	fmt.Printf("sluice-init: agent exited with status %d\n", status)
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		fmt.Fprintf(os.Stderr, "sluice-init: powering off: %v\n", err)
	}
	select {} // PID 1 must not exit: the kernel would panic
}

// loadModules loads every .ko in dir, in name order (deploy/guest-image.sh
// numbers them so that dependencies come first). A module the kernel has
// built in already answers EEXIST; a missing dir means an image without them.
func loadModules(dir string) {
	names, _ := filepath.Glob(filepath.Join(dir, "*.ko"))
	sort.Strings(names)
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintf(os.Stderr, "sluice-init: %v\n", err)
			continue
		}
		if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
			fmt.Fprintf(os.Stderr, "sluice-init: loading %s: %v\n", filepath.Base(name), err)
		}
		f.Close()
	}
}

// watchPowerButton signals once when any input device reports the power
// key pressed. Devices appear shortly after their modules load.
func watchPowerButton(pressed chan<- struct{}) {
	seen := map[string]bool{}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		devs, _ := filepath.Glob("/dev/input/event*")
		for _, dev := range devs {
			if seen[dev] {
				continue
			}
			seen[dev] = true
			f, err := os.Open(dev)
			if err != nil {
				continue
			}
			go func() {
				defer f.Close()
				if readPowerKey(f) {
					select {
					case pressed <- struct{}{}:
					default:
					}
				}
			}()
		}
	}
}

// Linux input events (linux/input.h) on amd64: struct timeval, then type,
// code and value.
const (
	inputEventSize = 24
	evKey          = 1
	keyPower       = 116
)

// readPowerKey reads input events until the power key goes down.
func readPowerKey(f *os.File) bool {
	buf := make([]byte, inputEventSize*16)
	for {
		n, err := f.Read(buf)
		if err != nil {
			return false
		}
		for ev := buf[:n-n%inputEventSize]; len(ev) >= inputEventSize; ev = ev[inputEventSize:] {
			typ := binary.LittleEndian.Uint16(ev[16:])
			code := binary.LittleEndian.Uint16(ev[18:])
			value := int32(binary.LittleEndian.Uint32(ev[20:]))
			if typ == evKey && code == keyPower && value == 1 {
				return true
			}
		}
	}
}
