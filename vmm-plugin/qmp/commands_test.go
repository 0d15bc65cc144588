package qmp_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/sluice-gpu/sluice/vmm-plugin/qmp"
	"github.com/sluice-gpu/sluice/vmm-plugin/qmp/qmptest"
)

// TestCommandArguments checks what each typed helper puts on the wire.
func TestCommandArguments(t *testing.T) {
	for _, tc := range []struct {
		name     string
		run      func(*qmp.Monitor, context.Context) error
		wantCmd  string
		wantArgs string // JSON; "" for none
	}{
		{"Status", func(m *qmp.Monitor, ctx context.Context) error { _, err := m.Status(ctx); return err },
			"query-status", ""},
		{"SystemPowerdown", (*qmp.Monitor).SystemPowerdown, "system_powerdown", ""},
		{"Quit", (*qmp.Monitor).Quit, "quit", ""},
		{"ChardevAddSocket", func(m *qmp.Monitor, ctx context.Context) error {
			return m.ChardevAddSocket(ctx, "c0", "/run/x.sock")
		}, "chardev-add", `{"id":"c0","backend":{"type":"socket","data":{
			"addr":{"type":"unix","data":{"path":"/run/x.sock"}},"server":false}}}`},
		{"ChardevRemove", func(m *qmp.Monitor, ctx context.Context) error { return m.ChardevRemove(ctx, "c0") },
			"chardev-remove", `{"id":"c0"}`},
		{"DeviceAdd", func(m *qmp.Monitor, ctx context.Context) error {
			return m.DeviceAdd(ctx, "ivshmem-doorbell", "gpu0", map[string]any{"chardev": "c0", "vectors": 2})
		}, "device_add", `{"driver":"ivshmem-doorbell","id":"gpu0","chardev":"c0","vectors":2}`},
		{"DeviceAdd without props", func(m *qmp.Monitor, ctx context.Context) error {
			return m.DeviceAdd(ctx, "virtio-rng-pci", "rng0", nil)
		}, "device_add", `{"driver":"virtio-rng-pci","id":"rng0"}`},
		{"DeviceDel", func(m *qmp.Monitor, ctx context.Context) error { return m.DeviceDel(ctx, "gpu0") },
			"device_del", `{"id":"gpu0"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := qmptest.New(t, nil)
			m := mustDial(t, srv.Path())
			if err := tc.run(m, testCtx(t)); err != nil {
				t.Fatal(err)
			}
			cmds := srv.Commands()
			if len(cmds) != 1 || cmds[0].Name != tc.wantCmd {
				t.Fatalf("server got %+v, want one %s", cmds, tc.wantCmd)
			}
			if tc.wantArgs == "" {
				if cmds[0].Args != nil {
					t.Fatalf("arguments %s, want none", cmds[0].Args)
				}
				return
			}
			var got, want any
			if err := json.Unmarshal(cmds[0].Args, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.wantArgs), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("arguments %s, want %s", cmds[0].Args, tc.wantArgs)
			}
		})
	}
}

func TestDeviceAddRejectsReservedProps(t *testing.T) {
	srv := qmptest.New(t, nil)
	m := mustDial(t, srv.Path())
	for _, k := range []string{"driver", "id"} {
		if err := m.DeviceAdd(testCtx(t), "d", "x", map[string]any{k: "y"}); err == nil {
			t.Errorf("props with %q accepted", k)
		}
	}
	if n := len(srv.Commands()); n != 0 {
		t.Fatalf("%d commands sent", n)
	}
}
