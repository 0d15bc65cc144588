package libvirt

import "encoding/xml"

// The VM's volume: the host directory its GPU system calls see as their
// root, shared with the guest over virtio-9p. The guest's sluice-init mounts
// the tag VolumeTag at /volume.
const (
	// VolumeTag is the 9p mount tag (<target dir='...'/>); the same as
	// vmm-plugin/qemu's VolumeTag.
	VolumeTag = "sluice-volume"
	// VolumeAccessMode is libvirt's name for QEMU's mapped-xattr security
	// model: the guest's owners and modes live in extended attributes, and
	// every host file is QEMU's own with VolumeFileMode or VolumeDirMode, so
	// a guest cannot plant setuid files or device nodes on the host and what
	// it writes stays readable to the VM's system-call proxy ("other" to
	// QEMU's files). vmm-plugin/qemu's VolumeSecurityModel says more.
	VolumeAccessMode = "mapped"
	VolumeFileMode   = "0644"
	VolumeDirMode    = "0755"
)

// DomainFilesystem is a <filesystem> device. As in libvirtxml, the source is
// a union whose variant sets the type attribute; only type='mount' (a host
// directory) is modelled, a filesystem of another type parses with a nil
// Source.
type DomainFilesystem struct {
	XMLName    xml.Name                `xml:"filesystem"`
	AccessMode string                  `xml:"accessmode,attr,omitempty"` // passthrough, mapped or squash
	FMode      string                  `xml:"fmode,attr,omitempty"`      // with mapped: mode of new host files
	DMode      string                  `xml:"dmode,attr,omitempty"`      // with mapped: mode of new host directories
	Source     *DomainFilesystemSource `xml:"source"`
	Target     *DomainFilesystemTarget `xml:"target"`
}

// DomainFilesystemSource is the filesystem's backend: set one field.
type DomainFilesystemSource struct {
	Mount *DomainFilesystemSourceMount
}

// DomainFilesystemSourceMount is type='mount': <source dir='HOST_DIR'/>.
type DomainFilesystemSourceMount struct {
	Dir string
}

// DomainFilesystemTarget is <target dir='TAG'/>: for 9p, the mount tag.
type DomainFilesystemTarget struct {
	Dir string `xml:"dir,attr"`
}

// FilesystemFor is the VM's volume as a virtio-9p filesystem, or false when
// the VM has none.
func FilesystemFor(vm VMInfo) (DomainFilesystem, bool) {
	if vm.Volume == "" {
		return DomainFilesystem{}, false
	}
	return DomainFilesystem{
		AccessMode: VolumeAccessMode,
		FMode:      VolumeFileMode,
		DMode:      VolumeDirMode,
		Source:     &DomainFilesystemSource{Mount: &DomainFilesystemSourceMount{Dir: vm.Volume}},
		Target:     &DomainFilesystemTarget{Dir: VolumeTag},
	}, true
}

// filesystemXML is the wire form of DomainFilesystem.
type filesystemXML struct {
	Type       string                  `xml:"type,attr,omitempty"`
	AccessMode string                  `xml:"accessmode,attr,omitempty"`
	FMode      string                  `xml:"fmode,attr,omitempty"`
	DMode      string                  `xml:"dmode,attr,omitempty"`
	Source     *filesystemSourceXML    `xml:"source"`
	Target     *DomainFilesystemTarget `xml:"target"`
}

type filesystemSourceXML struct {
	Dir string `xml:"dir,attr,omitempty"`
}

// MarshalXML writes the source's variant as the type attribute.
func (f DomainFilesystem) MarshalXML(e *xml.Encoder, start xml.StartElement) error {
	c := filesystemXML{AccessMode: f.AccessMode, FMode: f.FMode, DMode: f.DMode, Target: f.Target}
	if f.Source != nil && f.Source.Mount != nil {
		c.Type, c.Source = "mount", &filesystemSourceXML{Dir: f.Source.Mount.Dir}
	}
	start.Name = xml.Name{Local: "filesystem"}
	return e.EncodeElement(c, start)
}

// UnmarshalXML reads the type attribute into the source's variant. libvirt
// takes a filesystem without a type as type='mount'.
func (f *DomainFilesystem) UnmarshalXML(d *xml.Decoder, start xml.StartElement) error {
	var c filesystemXML
	if err := d.DecodeElement(&c, &start); err != nil {
		return err
	}
	*f = DomainFilesystem{AccessMode: c.AccessMode, FMode: c.FMode, DMode: c.DMode, Target: c.Target}
	if (c.Type == "" || c.Type == "mount") && c.Source != nil {
		f.Source = &DomainFilesystemSource{Mount: &DomainFilesystemSourceMount{Dir: c.Source.Dir}}
	}
	return nil
}

// MarshalFilesystem renders one <filesystem> device, to paste into <devices>
// of an existing domain.
func MarshalFilesystem(f DomainFilesystem) ([]byte, error) {
	return marshalIndent(f, "filesystem")
}

// SluiceVolume returns the host directory of d's Sluice volume: the source
// of its mount filesystem with target VolumeTag. ok is false without one.
func SluiceVolume(d Domain) (dir string, ok bool) {
	if d.Devices == nil {
		return "", false
	}
	for _, f := range d.Devices.Filesystems {
		if f.Target != nil && f.Target.Dir == VolumeTag && f.Source != nil && f.Source.Mount != nil {
			return f.Source.Mount.Dir, true
		}
	}
	return "", false
}
