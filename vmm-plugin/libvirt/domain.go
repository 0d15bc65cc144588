package libvirt

import "encoding/xml"

// Domain is a libvirt domain definition, as far as Sluice writes or reads it.
// Names follow libvirtxml.Domain.
type Domain struct {
	XMLName    xml.Name           `xml:"domain"`
	Type       string             `xml:"type,attr,omitempty"` // kvm, or qemu for TCG
	Name       string             `xml:"name,omitempty"`
	UUID       string             `xml:"uuid,omitempty"`
	Metadata   *DomainMetadata    `xml:"metadata"`
	Memory     *DomainMemory      `xml:"memory"`
	VCPU       *DomainVCPU        `xml:"vcpu"`
	OS         *DomainOS          `xml:"os"`
	Features   *DomainFeatureList `xml:"features"`
	Clock      *DomainClock       `xml:"clock"`
	OnPoweroff string             `xml:"on_poweroff,omitempty"`
	OnReboot   string             `xml:"on_reboot,omitempty"`
	OnCrash    string             `xml:"on_crash,omitempty"`
	Devices    *DomainDeviceList  `xml:"devices"`
}

// DomainMetadata keeps the elements inside <metadata> as raw XML, as
// libvirtxml does; see SluiceSettings and SluiceMetadata.
type DomainMetadata struct {
	XML string `xml:",innerxml"`
}

// DomainMemory is <memory unit='MiB'>256</memory>.
type DomainMemory struct {
	Value uint64 `xml:",chardata"`
	Unit  string `xml:"unit,attr,omitempty"` // libvirt's default is KiB
}

// DomainVCPU is <vcpu>1</vcpu>.
type DomainVCPU struct {
	Placement string `xml:"placement,attr,omitempty"`
	Current   uint   `xml:"current,attr,omitempty"`
	Value     uint   `xml:",chardata"`
}

// DomainOS is <os>: how the guest boots.
type DomainOS struct {
	Type    *DomainOSType `xml:"type"`
	Loader  *DomainLoader `xml:"loader"`
	Kernel  string        `xml:"kernel,omitempty"`
	Initrd  string        `xml:"initrd,omitempty"`
	Cmdline string        `xml:"cmdline,omitempty"`
}

// DomainOSType is <type arch='x86_64' machine='pc'>hvm</type>.
type DomainOSType struct {
	Arch    string `xml:"arch,attr,omitempty"`
	Machine string `xml:"machine,attr,omitempty"`
	Type    string `xml:",chardata"`
}

// DomainLoader is the firmware: <loader type='rom'>PATH</loader> becomes
// QEMU's -bios PATH.
type DomainLoader struct {
	Path     string `xml:",chardata"`
	Readonly string `xml:"readonly,attr,omitempty"`
	Type     string `xml:"type,attr,omitempty"` // rom or pflash
}

// DomainFeatureList is <features>.
type DomainFeatureList struct {
	// ACPI lets a guest's power-off end the domain; without it the guest
	// only halts and the domain stays running.
	ACPI *DomainFeature `xml:"acpi"`
}

// DomainFeature is a feature switched on by its mere presence.
type DomainFeature struct{}

// DomainClock is <clock offset='utc'/>.
type DomainClock struct {
	Offset string `xml:"offset,attr,omitempty"`
}

// DomainDeviceList is <devices>.
type DomainDeviceList struct {
	Emulator    string             `xml:"emulator,omitempty"`
	Filesystems []DomainFilesystem `xml:"filesystem"`
	Serials     []DomainSerial     `xml:"serial"`
	Consoles    []DomainConsole    `xml:"console"`
	Shmems      []DomainShmem      `xml:"shmem"`
	MemBalloon  *DomainMemBalloon  `xml:"memballoon"`
}

// DomainMemBalloon is <memballoon model='none'/>, which keeps libvirt from
// adding a virtio balloon the guest does not use.
type DomainMemBalloon struct {
	Model string `xml:"model,attr"`
}

// DomainShmem is a <shmem> device: for Sluice an ivshmem-doorbell whose
// server is the VM's endpoint socket in sluiced.
type DomainShmem struct {
	XMLName xml.Name           `xml:"shmem"`
	Name    string             `xml:"name,attr"`
	Role    string             `xml:"role,attr,omitempty"`
	Size    *DomainShmemSize   `xml:"size"`
	Model   *DomainShmemModel  `xml:"model"`
	Server  *DomainShmemServer `xml:"server"`
	MSI     *DomainShmemMSI    `xml:"msi"`
}

// DomainShmemSize is <size unit='M'>4</size>; with a doorbell server the
// size comes from the server, so Sluice never sets it.
type DomainShmemSize struct {
	Value uint   `xml:",chardata"`
	Unit  string `xml:"unit,attr,omitempty"`
}

// DomainShmemModel is <model type='ivshmem-doorbell'/>.
type DomainShmemModel struct {
	Type string `xml:"type,attr"`
}

// DomainShmemServer is <server path='SOCKET'/>.
type DomainShmemServer struct {
	Path string `xml:"path,attr,omitempty"`
}

// DomainShmemMSI is <msi vectors='N' ioeventfd='on'/>.
type DomainShmemMSI struct {
	Enabled   string `xml:"enabled,attr,omitempty"`
	Vectors   uint   `xml:"vectors,attr,omitempty"`
	IOEventFD string `xml:"ioeventfd,attr,omitempty"`
}
