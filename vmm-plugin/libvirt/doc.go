// Package libvirt owns Sluice's view of libvirt domain XML: a small typed
// model of the parts Sluice writes or reads, configurators that each build one
// device class (KubeVirt style), and the lookups the qemu hook needs (the
// Sluice <shmem> device and the Sluice settings in <metadata>).
//
// The model mirrors the type and field names of libvirt.org/go/libvirtxml
// (Domain, DomainDeviceList, DomainShmem, DomainShmemModel, DomainShmemServer,
// DomainShmemMSI, DomainOS, DomainMemory, DomainSerial, ...) so that switching
// to that module is a mechanical change. It is hand-written with encoding/xml
// only because the Go module proxy available to this project refuses the
// libvirt Go modules. Until the switch, the tests validate every whole domain
// we generate against libvirt's own RelaxNG schema (virt-xml-validate).
//
// The model is deliberately partial: parsing keeps only the fields declared
// here and drops everything else, so a parsed domain must never be written
// back to libvirt.
package libvirt
