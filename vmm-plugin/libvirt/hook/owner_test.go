package hook

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/vmm-plugin/libvirt"
)

// ownerAPI is fakeAPI that keeps the owners of the VMs it is asked for.
type ownerAPI struct {
	*fakeAPI
	owners []string
}

func (o *ownerAPI) CreateVM(ctx context.Context, req hostapi.CreateVMRequest) (hostapi.VM, error) {
	o.owners = append(o.owners, req.Owner)
	vm, err := o.fakeAPI.CreateVM(ctx, req)
	if err == nil { // as sluiced: the owner in numbers
		o.mu.Lock()
		vm.Owner = req.Owner
		o.vms[req.Name] = vm
		o.mu.Unlock()
	}
	return vm, err
}

// UpdateVM sets the owner of a VM (ownerSetter), noting it as "set OWNER".
func (o *ownerAPI) UpdateVM(_ context.Context, name string, req hostapi.UpdateVMRequest) (hostapi.VM, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	vm := o.vms[name]
	vm.Owner = *req.Owner
	o.vms[name] = vm
	o.owners = append(o.owners, "set "+*req.Owner)
	return vm, nil
}

// TestPrepareOwner: the hook creates a domain's VM owned by the user QEMU
// runs as, gives an existing VM without an owner QEMU's user, and refuses
// one that exists for another user.
func TestPrepareOwner(t *testing.T) {
	dom := domainXML(t, "web", "/run/sluice/vms/web.sock", 5, libvirt.Settings{})
	for _, tc := range []struct {
		name     string
		qemuUser string
		existing string   // the owner of a VM that exists; "-" for none
		want     []string // the owners asked for, at create and as "set OWNER"
		err      string   // a substring of stderr; "" for success
	}{
		{"qemu's uid", "+7", "-", []string{"7"}, ""},
		{"root needs none", "root", "-", []string{""}, ""},
		{"an existing vm of qemu's user", "+7", "7:100", []string{"7"}, ""},
		{"an existing vm without an owner", "+7", "", []string{"7", "set 7"}, ""},
		{"an existing vm of another user", "+7", "8", []string{"7"}, `QEMU runs as uid 7, but the vm's endpoint admits uid 8 (owner 8)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &ownerAPI{fakeAPI: newFakeAPI()}
			if tc.existing != "-" {
				api.vms["web"] = hostapi.VM{Name: "web", Endpoint: "/run/sluice/vms/web.sock", Vectors: 5, Owner: tc.existing}
			}
			r := runHook(api, dom, "--qemu-user", tc.qemuUser, "web", "prepare", "begin", "-")
			if !slices.Equal(api.owners, tc.want) {
				t.Fatalf("owners asked for %q, want %q", api.owners, tc.want)
			}
			if tc.err == "" {
				if r.code != ExitOK {
					t.Fatalf("prepare: %+v", r)
				}
				return
			}
			if r.code != ExitError || !strings.Contains(r.stderr, tc.err) {
				t.Fatalf("prepare: %+v, want an error with %q", r, tc.err)
			}
		})
	}
}
