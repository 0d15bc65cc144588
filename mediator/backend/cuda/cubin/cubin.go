// Package cubin measures the device memory a CUDA module image asks for,
// before the driver loads it.
//
// cuModuleLoadData allocates a module's global variables (.nv.global,
// .nv.global.init), constant banks and code in device memory at once,
// outside any allocation call: a PTX line such as
//
//	.global .b8 big[1073741824];
//
// takes a gigabyte when its module loads. A GPU virtualization layer that
// holds VMs to a device memory quota must charge that to the VM that loads
// the module, and refuse it past the quota, before the driver is asked.
//
// Footprint reads a cubin (an ELF image for EM_CUDA, as the driver loads
// it; PTX becomes one through the driver's linker first) and charges what
// its sections and loaded segments ask for, whichever is more, plus
// ModuleOverhead. A guest may write the cubin itself, so no flag or name
// it chose lets memory go uncharged: every section that takes memory but
// no file bytes (NOBITS: .nv.global and the like) is charged, as is every
// allocated section and every section named as device memory (.nv.global*,
// .nv.constant*, .text.*) whatever its flags. Only static shared memory
// (.nv.shared.* NOBITS sections of at most MaxSharedSection, one for each
// kernel and one more) lives on the chip and is left out. Other sections
// carry bytes of the image (bounded by its length) and no more. Fatbins
// are refused (ErrFatbin): the driver picks one of their images by itself,
// so what it will allocate is not known before.
//
// The image is hostile (a guest wrote it): Footprint reads only headers,
// never trusts a size with arithmetic that could wrap (sums saturate), and
// turns a malformed image into ErrNotCubin.
package cubin

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
)

// Errors Footprint returns.
var (
	// ErrNotCubin: the image is not a 64-bit ELF for EM_CUDA, or its
	// headers are malformed.
	ErrNotCubin = errors.New("not a cubin")
	// ErrFatbin: the image is a fatbin (or its wrapper), whose device
	// memory cannot be told before the driver picks one of its images.
	ErrFatbin = errors.New("a fatbin, not a cubin")
)

const (
	// ModuleOverhead is charged for each module beyond its sections: what
	// the driver takes for a module's bookkeeping and rounding (1 000 small
	// modules took 4 MiB on an H100, driver 580).
	ModuleOverhead = 4 << 10
	// MaxSharedSection is the largest .nv.shared.* section left uncharged:
	// a block's static shared memory is at most 48 KiB (and the driver's
	// reserve beside it), so a larger one is not shared memory and is
	// charged.
	MaxSharedSection = 64 << 10
)

// Magic numbers of the fatbin container and its wrapper, little endian.
const (
	fatbinMagic        = 0xBA55ED50
	fatbinWrapperMagic = 0x466243B1
)

// Footprint returns the device memory, in bytes, that loading image
// takes: the larger of its allocated sections' and its loaded segments'
// sizes, plus ModuleOverhead (math.MaxUint64 where they overflow).
func Footprint(image []byte) (n uint64, err error) {
	if len(image) >= 4 {
		switch binary.LittleEndian.Uint32(image) {
		case fatbinMagic, fatbinWrapperMagic:
			return 0, ErrFatbin
		}
	}
	// debug/elf bounds what it allocates for hostile headers; a panic in
	// it would still be a malformed image, not the caller's problem.
	defer func() {
		if r := recover(); r != nil {
			n, err = 0, fmt.Errorf("%w: %v", ErrNotCubin, r)
		}
	}()
	f, err := elf.NewFile(bytes.NewReader(image))
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNotCubin, err)
	}
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_CUDA {
		return 0, fmt.Errorf("%w: a %v image for %v", ErrNotCubin, f.Class, f.Machine)
	}
	kernels := 0
	for _, s := range f.Sections {
		if strings.HasPrefix(s.Name, ".text.") {
			kernels++
		}
	}
	shared := kernels + 1 // .nv.shared.* sections left out at most
	var sections, segments uint64
	for _, s := range f.Sections {
		nobits := s.Type == elf.SHT_NOBITS
		if nobits && strings.HasPrefix(s.Name, ".nv.shared.") && s.Size <= MaxSharedSection && shared > 0 {
			shared--
			continue
		}
		if nobits || s.Flags&elf.SHF_ALLOC != 0 || deviceName(s.Name) {
			sections = add(sections, s.Size)
		}
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			segments = add(segments, p.Memsz)
		}
	}
	return add(max(sections, segments), ModuleOverhead), nil
}

// deviceName reports whether a section of that name is device memory when
// the driver loads it (flags aside).
func deviceName(n string) bool {
	for _, p := range []string{".nv.global", ".nv.constant", ".text."} {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}

// add is a+b, or math.MaxUint64 where that overflows.
func add(a, b uint64) uint64 {
	if b > math.MaxUint64-a {
		return math.MaxUint64
	}
	return a + b
}
