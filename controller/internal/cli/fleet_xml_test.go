package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/internal/testdeps"
	"github.com/sluice-gpu/sluice/vmm-plugin/libvirt"
)

// TestFleetVMXML: vm xml prints what the controller builds from the
// endpoint the host reported, for the VM's own tenant only.
func TestFleetVMXML(t *testing.T) {
	c := startController(t)
	alice := strings.TrimSpace(mustOK(t, c.ctl(c.op, "token", "create", "alice", "--role", "tenant", "--tenant", "acme"), "token create"))
	bob := strings.TrimSpace(mustOK(t, c.ctl(c.op, "token", "create", "bob", "--role", "tenant", "--tenant", "other"), "token create"))
	mustOK(t, c.ctl(alice, "vm", "create", "web", "--tenant", "acme"), "vm create")
	if r := c.ctl(alice, "vm", "xml", "web"); r.code != ExitError || !strings.Contains(r.stderr, "has not reported") {
		t.Fatalf("before the host reported: %+v", r)
	}
	res, err := c.api.ReportEndpointsWithResponse(context.Background(), "h1", controllerapi.EndpointReport{Vms: []controllerapi.VMEndpoint{
		{Vm: "web", Endpoint: "/run/sluice/vms/web.sock", Vectors: 3}}})
	if err != nil || res.StatusCode() != 204 {
		t.Fatalf("reporting: %v %s", err, res.Body)
	}
	out := mustOK(t, c.ctl(alice, "vm", "xml", "web"), "vm xml")
	if !strings.HasPrefix(out, `<shmem name="sluice">`) || !strings.Contains(out, `<server path="/run/sluice/vms/web.sock">`) {
		t.Fatalf("vm xml:\n%s", out)
	}
	out = mustOK(t, c.ctl(alice, "vm", "xml", "web", "--domain", "--accel", "tcg", "--memory", "512", "--image", "/srv/guest"), "vm xml --domain")
	d, err := libvirt.ParseDomain([]byte(out))
	if err != nil || d.Type != "qemu" || d.Memory.Value != 512 || d.OS.Initrd != "/srv/guest/initramfs.gz" {
		t.Fatalf("vm xml --domain: %v\n%s", err, out)
	}
	if path := testdeps.Tool(t, "virt-xml-validate", "libvirt-clients"); path != "" {
		file := filepath.Join(t.TempDir(), "d.xml")
		if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		if b, err := exec.Command(path, file, "domain").CombinedOutput(); err != nil {
			t.Errorf("virt-xml-validate: %v\n%s", err, b)
		}
	}
	for _, args := range [][]string{{"--memory", "512"}, {"--domain", "--accel", "xen"}, {"--domain", "--accel", "auto"}, {"--domain", "--type", "qemu"}, {"--image", "/x"}} {
		if r := c.ctl(alice, append([]string{"vm", "xml", "web"}, args...)...); r.code != ExitUsage {
			t.Errorf("vm xml web %q: %+v, want a usage error", args, r)
		}
	}
	// --whole, the old name of --domain, still works, with a warning.
	if r := c.ctl(alice, "vm", "xml", "web", "--whole"); r.code != ExitOK || !strings.HasPrefix(r.stdout, "<domain") ||
		r.stderr != "warning: --whole is deprecated: use --domain\n" {
		t.Errorf("vm xml web --whole: %+v", r)
	}
	if r := c.ctl(bob, "vm", "xml", "web"); r.code != ExitError || !strings.Contains(r.stderr, "not found") {
		t.Errorf("another tenant: %+v", r)
	}
}
