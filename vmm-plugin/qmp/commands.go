package qmp

import (
	"context"
	"errors"
	"fmt"
)

// StatusInfo is query-status's reply.
type StatusInfo struct {
	Status  string `json:"status"`  // RunState: "prelaunch", "running", "paused", "shutdown", ...
	Running bool   `json:"running"` // whether the guest's CPUs run
}

// Status runs query-status.
func (m *Monitor) Status(ctx context.Context) (StatusInfo, error) {
	var s StatusInfo
	err := m.Execute(ctx, "query-status", nil, &s)
	return s, err
}

// SystemPowerdown runs system_powerdown: it asks the guest to power off (an
// ACPI power button press) and returns at once. A guest that complies powers
// off later; QEMU then emits SHUTDOWN and, unless started with -no-shutdown,
// exits. Subscribe to SHUTDOWN first to see it.
func (m *Monitor) SystemPowerdown(ctx context.Context) error {
	return m.Execute(ctx, "system_powerdown", nil, nil)
}

// Quit runs quit: QEMU exits at once. QEMU may close the connection before
// or after its reply; both count as success once the command went out.
// Wait for the QEMU process to know it has exited.
func (m *Monitor) Quit(ctx context.Context) error {
	sent, err := m.execute(ctx, "quit", nil, nil)
	if sent && errors.Is(err, ErrClosed) {
		return nil
	}
	return err
}

// ChardevAddSocket runs chardev-add for a UNIX socket client chardev: QEMU
// connects to path, where something must already listen, before replying.
func (m *Monitor) ChardevAddSocket(ctx context.Context, id, path string) error {
	// QEMU 7.2's ChardevBackend and SocketAddressLegacy are "simple" unions:
	// {"type": ..., "data": {...}}.
	type unixAddr struct {
		Path string `json:"path"`
	}
	args := map[string]any{
		"id": id,
		"backend": map[string]any{
			"type": "socket",
			"data": map[string]any{
				"addr":   map[string]any{"type": "unix", "data": unixAddr{Path: path}},
				"server": false,
			},
		},
	}
	return m.Execute(ctx, "chardev-add", args, nil)
}

// ChardevRemove runs chardev-remove.
func (m *Monitor) ChardevRemove(ctx context.Context, id string) error {
	return m.Execute(ctx, "chardev-remove", map[string]string{"id": id}, nil)
}

// DeviceAdd runs device_add with driver, id and props as its (flat)
// arguments, as -device driver,id=id,props... would. props must not set
// driver or id.
func (m *Monitor) DeviceAdd(ctx context.Context, driver, id string, props map[string]any) error {
	args := make(map[string]any, len(props)+2)
	for k, v := range props {
		if k == "driver" || k == "id" {
			return fmt.Errorf("adding device %s: props must not set %q", id, k)
		}
		args[k] = v
	}
	args["driver"], args["id"] = driver, id
	return m.Execute(ctx, "device_add", args, nil)
}

// DeviceDel runs device_del. It returns once removal is requested; with
// hotplug controllers that ask the guest, the device is gone only when QEMU
// emits DEVICE_DELETED (data {"device": id, "path": ...}): Subscribe to it
// first.
func (m *Monitor) DeviceDel(ctx context.Context, id string) error {
	return m.Execute(ctx, "device_del", map[string]string{"id": id}, nil)
}
