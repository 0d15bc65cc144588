package hook

import (
	"context"
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
	return o.fakeAPI.CreateVM(ctx, req)
}

// TestPrepareOwner: the hook creates a domain's VM owned by the user QEMU
// runs as, and refuses a VM that exists for another user.
func TestPrepareOwner(t *testing.T) {
	dom := domainXML(t, "web", "/run/sluice/vms/web.sock", 5, libvirt.Settings{})
	for _, tc := range []struct {
		name     string
		qemuUser string
		existing string // the owner of a VM that exists; "-" for none
		want     string // the owner asked for
		err      string // a substring of stderr; "" for success
	}{
		{"qemu's uid", "+7", "-", "7", ""},
		{"root needs none", "root", "-", "", ""},
		{"an existing vm of qemu's user", "+7", "7:100", "7", ""},
		{"an existing vm without an owner", "+7", "", "7", ""},
		{"an existing vm of another user", "+7", "8", "7", `QEMU runs as uid 7, but the vm's endpoint admits uid 8 (owner 8)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &ownerAPI{fakeAPI: newFakeAPI()}
			if tc.existing != "-" {
				api.vms["web"] = hostapi.VM{Name: "web", Endpoint: "/run/sluice/vms/web.sock", Vectors: 5, Owner: tc.existing}
			}
			r := runHook(api, dom, "--qemu-user", tc.qemuUser, "web", "prepare", "begin", "-")
			if len(api.owners) != 1 || api.owners[0] != tc.want {
				t.Fatalf("owners asked for %q, want [%q]", api.owners, tc.want)
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
