package cli

import (
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

func TestCreateOwner(t *testing.T) {
	f := newFakeDaemon()
	socket := f.serve(t)
	got := runCLI(t.Context(), nil, false, "--socket", socket, "vm", "create", "g", "--owner", "libvirt-qemu:kvm")
	if got.code != 0 {
		t.Fatalf("vm create --owner: %+v", got)
	}
	f.mu.Lock()
	wantReqs(t, f, hostapi.CreateVMRequest{Name: "g", Owner: "libvirt-qemu:kvm"})
	f.mu.Unlock()

	got = runCLI(t.Context(), nil, false, "--socket", socket, "vm", "create", "x", "--owner", "")
	if want := (result{stderr: "sluicectl: --owner must name a user: UID[:GID] or USER[:GROUP]\n" + hint, code: 2}); got != want {
		t.Fatalf("an empty --owner: %+v, want %+v", got, want)
	}
}

func TestSetOwner(t *testing.T) {
	f := newFakeDaemon()
	socket := f.serve(t)
	for _, owner := range []string{"libvirt-qemu:kvm", "none"} {
		if got := runCLI(t.Context(), nil, false, "--socket", socket, "vm", "set", "web", "--owner", owner); got.code != 0 {
			t.Fatalf("vm set --owner %s: %+v", owner, got)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	wantUpdates(t, f, `web weight=- cap=- owner="libvirt-qemu:kvm"`, `web weight=- cap=- owner=""`)
}

func TestRenderOwner(t *testing.T) {
	vm := vmWeb
	out := RenderVM(vm)
	if strings.Contains(out, "Owner:") || strings.Contains(out, "Refused peers:") {
		t.Fatalf("owner or refusals shown for a VM with neither:\n%s", out)
	}
	vm.Owner = "64055:994"
	vm.RefusedPeers = hostapi.PeerRefusals{Foreign: 3, NoHandshake: 1}
	out = RenderVM(vm)
	for _, want := range []string{
		"Owner:          64055:994 (and root, the daemon's user)\n",
		"Refused peers:  3 foreign, 1 no handshake, 0 full, 0 other\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}
