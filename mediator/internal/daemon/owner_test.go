package daemon

import (
	"context"
	"errors"
	"os/user"
	"slices"
	"testing"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/vmm-plugin/ivshmem"
)

func TestResolveOwner(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []ivshmem.Owner // nil with ok: none
		ok   bool
	}{
		{"", nil, true},
		{"1000", []ivshmem.Owner{{UID: 1000}}, true},
		{"64055:994", []ivshmem.Owner{{UID: 64055, GID: 994, HasGID: true}}, true},
		{"root", []ivshmem.Owner{{UID: 0}}, true},
		{"root:root", []ivshmem.Owner{{UID: 0, GID: 0, HasGID: true}}, true},
		{"4294967295", []ivshmem.Owner{{UID: 1<<32 - 1}}, true},
		{"4294967296", nil, false},
		{"1000:", nil, false},
		{":100", nil, false},
		{"no-such-user-sluice", nil, false},
		{"root:no-such-group-sluice", nil, false},
		{"1x", nil, false},
	} {
		got, err := resolveOwner(tc.in)
		if !tc.ok {
			if !errors.Is(err, hostapi.ErrInvalid) {
				t.Errorf("resolveOwner(%q) = %v, %v; want ErrInvalid", tc.in, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("resolveOwner(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestOwnerKept: a VM's owner, given by name, is kept in numbers across a
// restart, and shows in the VM with its refused peers.
func TestOwnerKept(t *testing.T) {
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody on this host")
	}
	state := t.TempDir()
	d := newDaemon(t, "virtual", state)
	ctx := context.Background()
	vm, err := d.CreateVM(ctx, hostapi.CreateVMRequest{Name: "owned", Owner: "nobody:" + u.Gid})
	if err != nil {
		t.Fatal(err)
	}
	want := u.Uid + ":" + u.Gid
	if vm.Owner != want {
		t.Fatalf("owner %q, want %q", vm.Owner, want)
	}
	if _, err := d.CreateVM(ctx, hostapi.CreateVMRequest{Name: "bad", Owner: "no-such-user-sluice"}); !errors.Is(err, hostapi.ErrInvalid) {
		t.Fatalf("an unknown owner: %v, want ErrInvalid", err)
	}
	d.Close()
	d = newDaemon(t, "virtual", state)
	vm, err = d.GetVM(ctx, "owned")
	if err != nil {
		t.Fatal(err)
	}
	if vm.Owner != want || vm.RefusedPeers != (hostapi.PeerRefusals{}) {
		t.Fatalf("after a restart: owner %q, refused %+v; want %q and none", vm.Owner, vm.RefusedPeers, want)
	}
	d.mu.Lock()
	owners := d.vms["owned"].vm.Config().Owners
	d.mu.Unlock()
	if len(owners) != 1 || owners[0].String() != want || !owners[0].HasGID {
		t.Fatalf("the endpoint's owners %v, want %s", owners, want)
	}
}

// TestUpdateOwner: a VM's owner set at run time (the libvirt hook does it
// for a VM the fleet agent created) is kept across a restart; an unknown
// one changes nothing; "" removes it.
func TestUpdateOwner(t *testing.T) {
	state := t.TempDir()
	d := newDaemon(t, "virtual", state)
	ctx := context.Background()
	if _, err := d.CreateVM(ctx, hostapi.CreateVMRequest{Name: "placed"}); err != nil {
		t.Fatal(err)
	}
	owner := func(s string) hostapi.UpdateVMRequest { return hostapi.UpdateVMRequest{Owner: &s} }
	vm, err := d.UpdateVM(ctx, "placed", owner("root:0"))
	if err != nil || vm.Owner != "0:0" {
		t.Fatalf("set owner: %q, %v; want 0:0", vm.Owner, err)
	}
	if _, err := d.UpdateVM(ctx, "placed", owner("no-such-user-sluice")); !errors.Is(err, hostapi.ErrInvalid) {
		t.Fatalf("an unknown owner: %v, want ErrInvalid", err)
	}
	d.Close()
	d = newDaemon(t, "virtual", state)
	if vm, err = d.GetVM(ctx, "placed"); err != nil || vm.Owner != "0:0" {
		t.Fatalf("after a restart: %q, %v; want 0:0", vm.Owner, err)
	}
	if vm, err = d.UpdateVM(ctx, "placed", owner("")); err != nil || vm.Owner != "" {
		t.Fatalf("remove owner: %q, %v; want none", vm.Owner, err)
	}
}
