package server

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/internal/testdeps"
	"github.com/sluice-gpu/sluice/vmm-plugin/libvirt"
)

// validateDomain checks a domain with libvirt's RelaxNG schema, as
// vmm-plugin/libvirt's golden tests and the e2e suite do; it fails where
// virt-xml-validate is not installed (internal/testdeps).
func validateDomain(t *testing.T, doc string) {
	t.Helper()
	validator := testdeps.Tool(t, "virt-xml-validate", "libvirt-clients")
	path := filepath.Join(t.TempDir(), "domain.xml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(validator, path, "domain").CombinedOutput(); err != nil {
		t.Errorf("virt-xml-validate: %v\n%s\n%s", err, out, doc)
	}
}

const webEndpoints = `{"vms":[{"vm":"web","endpoint":"/run/sluice/vms/web.sock","vectors":3,
	"volume":"/var/lib/sluice/volumes/web","weight":2,"cap":0.5,"channels":2,"ring_entries":256,"region_size":16777216}]}`

// TestDomainXML: a tenant gets its VM's <shmem> device and whole domain,
// built from the endpoint the host reported, valid for libvirt.
func TestDomainXML(t *testing.T) {
	e := withWeb(t)
	var vm controllerapi.VM
	e.must(200, "GET", "/v1/vms/web", e.acme, "", &vm)
	if vm.Host != "h1" {
		t.Fatalf("web placed on %s, the test wants h1", vm.Host)
	}
	if r := e.do("GET", "/v1/vms/web/domain.xml", e.acme, ""); r.status != http.StatusConflict || r.field() != "name" ||
		!strings.Contains(r.apiError(t).Message, "has not reported") {
		t.Fatalf("before the host reported: %d %s", r.status, r.body)
	}
	e.must(204, "PUT", "/v1/hosts/h1/endpoints", e.h1, webEndpoints, nil)

	r := e.do("GET", "/v1/vms/web/domain.xml", e.acme, "")
	if r.status != 200 {
		t.Fatalf("shmem: %d %s", r.status, r.body)
	}
	shmem := string(r.body)
	for _, want := range []string{`<shmem name="sluice">`, `<model type="ivshmem-doorbell">`,
		`<server path="/run/sluice/vms/web.sock">`, `<msi vectors="3" ioeventfd="on">`} {
		if !strings.Contains(shmem, want) {
			t.Errorf("shmem lacks %s:\n%s", want, shmem)
		}
	}
	validateDomain(t, `<domain type='kvm'><name>pasted</name><memory unit='MiB'>128</memory>
<os><type arch='x86_64' machine='pc'>hvm</type></os><devices>`+shmem+`</devices></domain>`)

	r = e.do("GET", "/v1/vms/web/domain.xml?whole=true&accel=tcg&memory_mib=512&image=/srv/guest", e.acme, "")
	if r.status != 200 {
		t.Fatalf("whole: %d %s", r.status, r.body)
	}
	d, err := libvirt.ParseDomain(r.body)
	if err != nil {
		t.Fatal(err)
	}
	sh, ok := libvirt.SluiceShmem(d)
	if d.Name != "web" || d.Type != "qemu" || d.Memory.Value != 512 || d.OS.Kernel != "/srv/guest/vmlinux" ||
		!ok || sh.Server.Path != "/run/sluice/vms/web.sock" || sh.MSI.Vectors != 3 {
		t.Errorf("whole domain: %+v, shmem %+v", d, sh)
	}
	if set, err := libvirt.SluiceSettings(d); err != nil || set != (libvirt.Settings{Weight: 2, Cap: 0.5, Channels: 2, RingEntries: 256, RegionSize: 16 << 20}) {
		t.Errorf("metadata settings %+v, %v", set, err)
	}
	if dir, ok := libvirt.SluiceVolume(d); !ok || dir != "/var/lib/sluice/volumes/web" {
		t.Errorf("volume %q %v", dir, ok)
	}
	validateDomain(t, string(r.body))
	// The defaults: kvm, the guest image under /var/lib/sluice.
	r = e.do("GET", "/v1/vms/web/domain.xml?whole=true", e.op, "")
	if d, err := libvirt.ParseDomain(r.body); r.status != 200 || err != nil || d.Type != "kvm" || d.OS.Kernel != DefaultGuestImage+"/vmlinux" {
		t.Errorf("defaults: %d %v %s", r.status, err, r.body)
	}
	// accel's old name, type, as libvirt spells the domain type.
	for q, want := range map[string]string{"accel=kvm": "kvm", "type=qemu": "qemu", "type=kvm": "kvm"} {
		r = e.do("GET", "/v1/vms/web/domain.xml?whole=true&"+q, e.op, "")
		if d, err := libvirt.ParseDomain(r.body); r.status != 200 || err != nil || d.Type != want {
			t.Errorf("%s: %d %v %s", q, r.status, err, r.body)
		}
	}
}

// TestDomainXMLSurvivesRestart: the endpoints are stored, so a restarted
// controller answers the same before the host reports again, and a deleted
// host's go with it.
func TestDomainXMLSurvivesRestart(t *testing.T) {
	e := withWeb(t)
	e.must(204, "PUT", "/v1/hosts/h1/endpoints", e.h1, webEndpoints, nil)
	before := e.do("GET", "/v1/vms/web/domain.xml?whole=true", e.acme, "")
	if before.status != 200 {
		t.Fatalf("before the restart: %d %s", before.status, before.body)
	}
	e.stop()
	e.start()
	if r := e.do("GET", "/v1/vms/web/domain.xml?whole=true", e.acme, ""); r.status != 200 || string(r.body) != string(before.body) {
		t.Fatalf("after the restart: %d %s\nwant %s", r.status, r.body, before.body)
	}
	e.must(204, "DELETE", "/v1/vms/web", e.acme, "", nil)
	e.must(204, "DELETE", "/v1/hosts/h1", e.op, "", nil)
	e.registerHost("h1", 8*gib)
	e.createVM(e.op, `{"name":"web","tenant":"acme","host":"h1"}`)
	if r := e.do("GET", "/v1/vms/web/domain.xml", e.acme, ""); r.status != http.StatusConflict {
		t.Fatalf("a new web on a host registered again, not reported yet: %d %s", r.status, r.body)
	}
}

// TestDomainXMLRejects: bad parameters and reports are 400 naming what is
// wrong, a host reports only for itself, and a new report replaces the old.
func TestDomainXMLRejects(t *testing.T) {
	e := withWeb(t)
	e.must(204, "PUT", "/v1/hosts/h1/endpoints", e.h1, webEndpoints, nil)
	for path, field := range map[string]string{
		"/v1/vms/web/domain.xml?image=/srv":                    "image",
		"/v1/vms/web/domain.xml?memory_mib=5":                  "memory_mib",
		"/v1/vms/web/domain.xml?whole=true&image=guest":        "image",
		"/v1/vms/web/domain.xml?whole=true&memory_mib=0":       "memory_mib",
		"/v1/vms/web/domain.xml?whole=true&type=xen":           "type",
		"/v1/vms/web/domain.xml?whole=true&accel=qemu":         "accel",
		"/v1/vms/web/domain.xml?whole=true&accel=tcg&type=kvm": "accel",
		"/v1/vms/web/domain.xml?accel=tcg":                     "accel",
		"/v1/vms/web/domain.xml?whole=maybe":                   "whole",
		"/v1/vms/web/domain.xml?whole=true&memory_mib=lots":    "memory_mib",
		"/v1/vms/web/domain.xml?whole=false&type=kvm&image=/x": "",
	} {
		r := e.do("GET", path, e.acme, "")
		if r.status != 400 || (field != "" && r.field() != field) {
			t.Errorf("GET %s: %d %s, want 400 field %q", path, r.status, r.body, field)
		}
	}
	for body, field := range map[string]string{
		`{}`: "vms",
		`{"vms":[{"vm":"web","endpoint":"web.sock","vectors":3}]}`:                  "vms[0].endpoint",
		`{"vms":[{"vm":"web","endpoint":"/w.sock","vectors":0}]}`:                   "vms[0].vectors",
		`{"vms":[{"vm":"-x","endpoint":"/w.sock","vectors":1}]}`:                    "vms[0].vm",
		`{"vms":[{"vm":"web","endpoint":"/w.sock","vectors":1,"volume":"rel"}]}`:    "vms[0].volume",
		`{"vms":[{"vm":"web","endpoint":"/w.sock","vectors":1,"colour":"blue"}]}`:   "colour",
		`{"vms":[{"vm":"web","endpoint":"/w.sock","vectors":1}],"host":"h2"}`:       "host",
		`{"vms":[{"vm":"web","endpoint":"/w.sock","vectors":1,"cap":"half"}]}`:      "vms.cap",
		`{"vms":[{"vm":"web","endpoint":"/w.sock","vectors":1,"weight":1.5}]}`:      "vms.weight",
		`{"vms":[{"vm":"web","endpoint":"/w.sock","vectors":1,"channels":[1]}]}`:    "vms.channels",
		`{"vms":[{"vm":"web","endpoint":"/w.sock","vectors":1,"region_size":"x"}]}`: "vms.region_size",
	} {
		if r := e.do("PUT", "/v1/hosts/h1/endpoints", e.h1, body); r.status != 400 || r.field() != field {
			t.Errorf("PUT endpoints %s: %d %s, want 400 field %q", body, r.status, r.body, field)
		}
	}
	if r := e.do("PUT", "/v1/hosts/h2/endpoints", e.h1, `{"vms":[]}`); r.status != 403 || r.field() != "name" {
		t.Errorf("h1 reporting for h2: %d %s", r.status, r.body)
	}
	if r := e.do("PUT", "/v1/hosts/nosuch/endpoints", e.op, `{"vms":[]}`); r.status != 404 {
		t.Errorf("an unknown host: %d %s", r.status, r.body)
	}
	// The bad reports changed nothing; an empty one forgets web's endpoint.
	e.must(200, "GET", "/v1/vms/web/domain.xml", e.acme, "", nil)
	e.must(204, "PUT", "/v1/hosts/h1/endpoints", e.h1, `{"vms":[]}`, nil)
	if r := e.do("GET", "/v1/vms/web/domain.xml", e.acme, ""); r.status != http.StatusConflict {
		t.Errorf("after an empty report: %d %s", r.status, r.body)
	}
}
