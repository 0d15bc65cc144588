// Package cubintest builds small cubin-shaped ELF images for tests: the
// sections and segments a test names, with nothing to run. cubin.Footprint
// and the cuda backend's fake driver read them as they read the driver's.
package cubintest

import (
	"debug/elf"
	"encoding/binary"
)

// Section is one section of an image. NOBITS sections (Data nil and
// NoBits set) take Size in memory and nothing in the file.
type Section struct {
	Name   string
	Type   elf.SectionType
	Flags  elf.SectionFlag
	Data   []byte
	Size   uint64 // NOBITS only
	NoBits bool
}

// Segment is one program header.
type Segment struct {
	Type  elf.ProgType
	Memsz uint64
}

// Image is an ELF image's parts.
type Image struct {
	Machine  elf.Machine // elf.EM_CUDA when zero
	Sections []Section
	Segments []Segment
}

// Kernel is a kernel's code section, as the driver's linker names it.
func Kernel(name string) Section {
	return Section{Name: ".text." + name, Type: elf.SHT_PROGBITS, Flags: elf.SHF_ALLOC | elf.SHF_EXECINSTR, Data: make([]byte, 128)}
}

// Global is the module's uninitialised global variables, size bytes.
func Global(size uint64) Section {
	return Section{Name: ".nv.global", Type: elf.SHT_NOBITS, Flags: elf.SHF_ALLOC | elf.SHF_WRITE, Size: size, NoBits: true}
}

// Shared is a kernel's static shared memory, size bytes.
func Shared(kernel string, size uint64) Section {
	return Section{Name: ".nv.shared." + kernel, Type: elf.SHT_NOBITS, Flags: elf.SHF_ALLOC | elf.SHF_WRITE, Size: size, NoBits: true}
}

// Build lays the image out: the ELF header, the sections' data, the
// section name table, the section headers, then the program headers.
func Build(img Image) []byte {
	le := binary.LittleEndian
	machine := img.Machine
	if machine == 0 {
		machine = elf.EM_CUDA
	}
	const ehsize, shentsize, phentsize = 64, 64, 56
	out := make([]byte, ehsize)
	type placed struct{ name, off, size uint64 }
	names := []byte{0}
	addName := func(n string) uint64 {
		at := uint64(len(names))
		names = append(append(names, n...), 0)
		return at
	}
	places := make([]placed, len(img.Sections))
	for i, s := range img.Sections {
		places[i] = placed{name: addName(s.Name), off: uint64(len(out)), size: s.Size}
		if !s.NoBits {
			out = append(out, s.Data...)
			places[i].size = uint64(len(s.Data))
		}
	}
	shstrName := addName(".shstrtab")
	shstrOff := uint64(len(out))
	out = append(out, names...)
	for len(out)%8 != 0 {
		out = append(out, 0)
	}
	shoff := uint64(len(out))
	out = append(out, make([]byte, shentsize)...) // SHT_NULL
	sh := func(name uint64, typ elf.SectionType, flags elf.SectionFlag, off, size uint64) {
		b := make([]byte, shentsize)
		le.PutUint32(b[0:], uint32(name))
		le.PutUint32(b[4:], uint32(typ))
		le.PutUint64(b[8:], uint64(flags))
		le.PutUint64(b[24:], off)
		le.PutUint64(b[32:], size)
		le.PutUint64(b[48:], 1) // alignment
		out = append(out, b...)
	}
	for i, s := range img.Sections {
		sh(places[i].name, s.Type, s.Flags, places[i].off, places[i].size)
	}
	sh(shstrName, elf.SHT_STRTAB, 0, shstrOff, uint64(len(names)))
	phoff := uint64(len(out))
	for _, p := range img.Segments {
		b := make([]byte, phentsize)
		le.PutUint32(b[0:], uint32(p.Type))
		le.PutUint64(b[40:], p.Memsz)
		out = append(out, b...)
	}
	h := out[:ehsize]
	copy(h, elf.ELFMAG)
	h[elf.EI_CLASS], h[elf.EI_DATA], h[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	le.PutUint16(h[16:], uint16(elf.ET_EXEC))
	le.PutUint16(h[18:], uint16(machine))
	le.PutUint32(h[20:], uint32(elf.EV_CURRENT))
	if len(img.Segments) > 0 {
		le.PutUint64(h[32:], phoff)
	}
	le.PutUint64(h[40:], shoff)
	le.PutUint16(h[52:], ehsize)
	le.PutUint16(h[54:], phentsize)
	le.PutUint16(h[56:], uint16(len(img.Segments)))
	le.PutUint16(h[58:], shentsize)
	le.PutUint16(h[60:], uint16(len(img.Sections)+2))
	le.PutUint16(h[62:], uint16(len(img.Sections)+1)) // shstrndx
	return out
}
