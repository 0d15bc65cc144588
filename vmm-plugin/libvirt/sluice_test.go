package libvirt

import (
	"errors"
	"strings"
	"testing"
)

func TestSluiceSettings(t *testing.T) {
	for _, tc := range []struct {
		name     string
		metadata string
		want     Settings
		err      string
	}{
		{name: "none"},
		{name: "other namespace", metadata: `<app:vm xmlns:app="https://example.com/1" weight="9"/>`},
		{name: "generated", metadata: SluiceMetadata(testVM.Settings).XML, want: testVM.Settings},
		{name: "empty element", metadata: `<sluice:vm xmlns:sluice="` + Namespace + `"/>`},
		{name: "other prefix as libvirt may write it",
			metadata: "\n    <s:vm xmlns:s=\"" + Namespace + "\" weight=\"3\" channels=\"8\"/>\n  ",
			want:     Settings{Weight: 3, Channels: 8}},
		{name: "default namespace", metadata: `<vm xmlns="` + Namespace + `" cap="1"/>`, want: Settings{Cap: 1}},
		{name: "after other elements",
			metadata: `<a:x xmlns:a="urn:a"><vm xmlns="` + Namespace + `" weight="7"/></a:x><sluice:vm xmlns:sluice="` + Namespace + `" weight="4"/>`,
			want:     Settings{Weight: 4}},
		{name: "unknown attribute", metadata: `<sluice:vm xmlns:sluice="` + Namespace + `" colour="blue" weight="2"/>`,
			want: Settings{Weight: 2}},
		{name: "weight zero", metadata: `<vm xmlns="` + Namespace + `" weight="0"/>`, err: `weight "0"`},
		{name: "weight text", metadata: `<vm xmlns="` + Namespace + `" weight="two"/>`, err: `weight "two"`},
		{name: "cap too big", metadata: `<vm xmlns="` + Namespace + `" cap="1.5"/>`, err: `cap "1.5"`},
		{name: "cap NaN", metadata: `<vm xmlns="` + Namespace + `" cap="NaN"/>`, err: `cap "NaN"`},
		{name: "channels negative", metadata: `<vm xmlns="` + Namespace + `" channels="-1"/>`, err: `channels "-1"`},
		{name: "ring entries", metadata: `<vm xmlns="` + Namespace + `" ring-entries="x"/>`, err: `ring-entries "x"`},
		{name: "region not a power of two", metadata: `<vm xmlns="` + Namespace + `" region-size="3000"/>`, err: `region-size "3000"`},
		{name: "broken xml", metadata: `<vm xmlns="` + Namespace, err: "parsing domain metadata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d Domain
			if tc.metadata != "" {
				d.Metadata = &DomainMetadata{XML: tc.metadata}
			}
			got, err := SluiceSettings(d)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("err = %v, want one containing %q and wrapping ErrInvalid", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("SluiceSettings = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestSluiceShmem(t *testing.T) {
	doorbell := &DomainShmemModel{Type: ShmemModel}
	for _, tc := range []struct {
		name   string
		shmems []DomainShmem
		want   string // name of the device found, "" for none
	}{
		{name: "no devices"},
		{name: "plain shmem named sluice", shmems: []DomainShmem{{Name: "sluice", Model: &DomainShmemModel{Type: "ivshmem-plain"}}}},
		{name: "no model", shmems: []DomainShmem{{Name: "sluice"}}},
		{name: "other doorbell", shmems: []DomainShmem{{Name: "looking-glass", Model: doorbell}}},
		{name: "sluice", shmems: []DomainShmem{{Name: "x", Model: doorbell}, {Name: "sluice", Model: doorbell}}, want: "sluice"},
		{name: "prefixed", shmems: []DomainShmem{{Name: "sluice0", Model: doorbell}}, want: "sluice0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Domain{Devices: &DomainDeviceList{Shmems: tc.shmems}}
			got, ok := SluiceShmem(d)
			if ok != (tc.want != "") || got.Name != tc.want {
				t.Errorf("SluiceShmem = %q, %v; want %q", got.Name, ok, tc.want)
			}
		})
	}
	if _, ok := SluiceShmem(Domain{}); ok {
		t.Error("found a device in a domain without devices")
	}
}

// libvirtLiveXML is the shape of what libvirt hands a hook: many elements
// the model does not know, which parsing must skip.
const libvirtLiveXML = `<domain type='kvm' id='3'>
  <name>web</name>
  <uuid>8f4e1c2a-3b5d-4e6f-9a7b-0c1d2e3f4a5b</uuid>
  <metadata>
    <sluice:vm xmlns:sluice="https://sluice-gpu.dev/xmlns/libvirt/1" weight="2" channels="4"/>
  </metadata>
  <memory unit='KiB'>262144</memory>
  <currentMemory unit='KiB'>262144</currentMemory>
  <vcpu placement='static'>1</vcpu>
  <resource><partition>/machine</partition></resource>
  <os>
    <type arch='x86_64' machine='pc-i440fx-7.2'>hvm</type>
    <loader type='rom'>/usr/share/qemu/qboot.rom</loader>
    <kernel>/srv/guest/vmlinux</kernel>
    <boot dev='hd'/>
  </os>
  <features><acpi/></features>
  <cpu mode='custom' match='exact' check='full'><model fallback='forbid'>qemu64</model></cpu>
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <controller type='pci' index='0' model='pci-root'><alias name='pci.0'/></controller>
    <serial type='pty'>
      <source path='/dev/pts/3'/>
      <target type='isa-serial' port='0'><model name='isa-serial'/></target>
      <alias name='serial0'/>
    </serial>
    <console type='pty' tty='/dev/pts/3'>
      <source path='/dev/pts/3'/>
      <target type='serial' port='0'/>
    </console>
    <serial type='unix'><source mode='bind' path='/tmp/x'/><target port='1'/></serial>
    <shmem name='sluice'>
      <model type='ivshmem-doorbell'/>
      <server path='/run/sluice/vms/web.sock'/>
      <msi vectors='5' ioeventfd='on'/>
      <alias name='shmem0'/>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x03' function='0x0'/>
    </shmem>
  </devices>
  <seclabel type='dynamic' model='dac' relabel='yes'><label>+64055:+64055</label></seclabel>
</domain>
`

func TestParseLibvirtXML(t *testing.T) {
	d, _, err := ReadDomain(strings.NewReader(libvirtLiveXML))
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "web" || d.Type != "kvm" || d.Memory.Value != 262144 || d.Memory.Unit != "KiB" {
		t.Errorf("parsed %+v", d)
	}
	if d.OS.Loader == nil || d.OS.Loader.Path != QbootROM || d.OS.Type.Machine != "pc-i440fx-7.2" {
		t.Errorf("os = %+v", d.OS)
	}
	serials := d.Devices.Serials
	if len(serials) != 2 || serials[0].Source.Pty == nil || serials[0].Source.Pty.Path != "/dev/pts/3" ||
		*serials[0].Target.Port != 0 || serials[1].Source != nil {
		t.Errorf("serials = %s", dump(serials))
	}
	dev, ok := SluiceShmem(d)
	if !ok || dev.Server.Path != "/run/sluice/vms/web.sock" || dev.MSI.Vectors != 5 {
		t.Errorf("SluiceShmem = %s, %v", dump(dev), ok)
	}
	s, err := SluiceSettings(d)
	if err != nil || s != (Settings{Weight: 2, Channels: 4}) {
		t.Errorf("SluiceSettings = %+v, %v", s, err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, doc, err string }{
		{"empty", "", "parsing domain xml: EOF"},
		{"not a domain", "<network/>", "expected element type <domain>"},
		{"bad number", "<domain><memory>lots</memory></domain>", "parsing domain xml: "},
		{"truncated", "<domain><name>x</name>", "parsing domain xml: "},
		{"too large", "<domain>" + strings.Repeat(" ", MaxDomainXML) + "</domain>", "more than the"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ReadDomain(strings.NewReader(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("err = %v, want one containing %q", err, tc.err)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	ok := testOptions(DomainTypeKVM)
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*DomainOptions)
		err  string
	}{
		{"no name", func(o *DomainOptions) { o.Name = "" }, "domain name"},
		{"bad type", func(o *DomainOptions) { o.Type = "xen" }, `domain type "xen"`},
		{"no kernel", func(o *DomainOptions) { o.Kernel = "" }, "no kernel"},
		{"relative initrd", func(o *DomainOptions) { o.Initrd = "build/guest/initramfs.gz" }, "initrd path"},
		{"no endpoint", func(o *DomainOptions) { o.VM.Endpoint = "" }, "no sluice endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.edit(&o)
			err := o.Validate()
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Validate = %v, want an ErrInvalid containing %q", err, tc.err)
			}
		})
	}
}

func TestSluiceVolume(t *testing.T) {
	o := testOptions(DomainTypeQEMU)
	if dir, ok := SluiceVolume(ExampleDomain(o)); ok {
		t.Errorf("volume %q in a domain without one", dir)
	}
	o.VM.Volume = testVolume
	b, err := Marshal(ExampleDomain(o))
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseDomain(b)
	if err != nil {
		t.Fatal(err)
	}
	if dir, ok := SluiceVolume(d); !ok || dir != testVolume {
		t.Errorf("SluiceVolume = %q, %v; want %q", dir, ok, testVolume)
	}
	other := `<domain><devices><filesystem type="mount"><source dir="/srv/data"/><target dir="data"/></filesystem></devices></domain>`
	if d, err := ParseDomain([]byte(other)); err != nil {
		t.Fatal(err)
	} else if dir, ok := SluiceVolume(d); ok {
		t.Errorf("a filesystem of another tag taken for the volume: %q", dir)
	}
}
