package cubin_test

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"testing"

	"github.com/sluice-gpu/sluice/mediator/backend/cuda/cubin"
	"github.com/sluice-gpu/sluice/mediator/backend/cuda/cubin/cubintest"
)

// nvcc-global256m.cubin is `nvcc -cubin -arch=sm_90` (CUDA 13) of
//
//	__device__ char big[1<<28];
//	extern "C" __global__ void k(int *p) { *p = big[threadIdx.x]; }
//
// which took 268 435 456 bytes of an H100's memory when it loaded.
func TestFootprintOfNvccCubin(t *testing.T) {
	img, err := os.ReadFile("testdata/nvcc-global256m.cubin")
	if err != nil {
		t.Fatal(err)
	}
	n, err := cubin.Footprint(img)
	if err != nil {
		t.Fatal(err)
	}
	// Its loaded segments, the larger: the program headers (0x150),
	// .nv.constant4 (8), .text.k (0x180), .nv.global (256 MiB) and
	// .nv.constant0.k (0x218). Its allocated sections are the same but
	// for the program headers.
	want := uint64(0x150+8+0x180+1<<28+0x218) + cubin.ModuleOverhead
	if n != want {
		t.Fatalf("footprint %d, want %d", n, want)
	}
}

func TestFootprint(t *testing.T) {
	k := cubintest.Kernel("k")
	for _, tc := range []struct {
		name string
		img  cubintest.Image
		want uint64
	}{
		{"code only", cubintest.Image{Sections: []cubintest.Section{k}}, 128},
		{"globals", cubintest.Image{Sections: []cubintest.Section{k, cubintest.Global(1 << 30)}}, 128 + 1<<30},
		{"shared is on the chip", cubintest.Image{Sections: []cubintest.Section{k, cubintest.Shared("k", 48<<10)}}, 128},
		{"a shared section too large to be one", cubintest.Image{Sections: []cubintest.Section{k, cubintest.Shared("k", cubin.MaxSharedSection+1)}},
			128 + cubin.MaxSharedSection + 1},
		{"not allocated", cubintest.Image{Sections: []cubintest.Section{k,
			{Name: ".nv.info", Type: elf.SHT_LOPROC, Data: make([]byte, 4096)}}}, 128},
		{"segments asking more than sections", cubintest.Image{Sections: []cubintest.Section{k},
			Segments: []cubintest.Segment{{Type: elf.PT_LOAD, Memsz: 1 << 32}, {Type: elf.PT_LOAD, Memsz: 1}, {Type: elf.PT_NOTE, Memsz: 1 << 40}}},
			1<<32 + 1},
		{"globals with their flags cleared", cubintest.Image{Sections: []cubintest.Section{k,
			{Name: ".nv.global", Type: elf.SHT_NOBITS, Size: 1 << 30, NoBits: true}}}, 128 + 1<<30},
		{"memory under any name", cubintest.Image{Sections: []cubintest.Section{k,
			{Name: ".nv.info.big", Type: elf.SHT_NOBITS, Size: 1 << 20, NoBits: true}}}, 128 + 1<<20},
		{"initialised globals without flags", cubintest.Image{Sections: []cubintest.Section{k,
			{Name: ".nv.global.init", Type: elf.SHT_PROGBITS, Data: make([]byte, 4096)}}}, 128 + 4096},
		{"shared sections past one a kernel and one", cubintest.Image{Sections: []cubintest.Section{k,
			cubintest.Shared("a", 40<<10), cubintest.Shared("b", 40<<10), cubintest.Shared("c", 40<<10)}}, 128 + 40<<10},
		{"sizes that wrap saturate", cubintest.Image{Sections: []cubintest.Section{k,
			cubintest.Global(1 << 62), cubintest.Global(1 << 62), cubintest.Global(1 << 62), cubintest.Global(1 << 62)}}, math.MaxUint64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := cubin.Footprint(cubintest.Build(tc.img))
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if want != math.MaxUint64 {
				want += cubin.ModuleOverhead
			}
			if n != want {
				t.Fatalf("footprint %d, want %d", n, want)
			}
		})
	}
}

func TestFootprintRefuses(t *testing.T) {
	good := cubintest.Build(cubintest.Image{Sections: []cubintest.Section{cubintest.Kernel("k")}})
	fatbin := make([]byte, 64)
	binary.LittleEndian.PutUint32(fatbin, 0xBA55ED50)
	wrapper := make([]byte, 64)
	binary.LittleEndian.PutUint32(wrapper, 0x466243B1)
	for _, tc := range []struct {
		name string
		img  []byte
		want error
	}{
		{"empty", nil, cubin.ErrNotCubin},
		{"ptx", []byte(".version 8.0\n.target sm_90\n"), cubin.ErrNotCubin},
		{"fatbin", fatbin, cubin.ErrFatbin},
		{"fatbin wrapper", wrapper, cubin.ErrFatbin},
		{"x86-64", cubintest.Build(cubintest.Image{Machine: elf.EM_X86_64, Sections: []cubintest.Section{cubintest.Kernel("k")}}), cubin.ErrNotCubin},
		{"truncated", good[:100], cubin.ErrNotCubin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := cubin.Footprint(tc.img); !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

func FuzzFootprint(f *testing.F) {
	if img, err := os.ReadFile("testdata/nvcc-global256m.cubin"); err == nil {
		f.Add(img)
	}
	f.Add(cubintest.Build(cubintest.Image{Sections: []cubintest.Section{cubintest.Kernel("k"), cubintest.Global(1 << 20), cubintest.Shared("k", 1024)},
		Segments: []cubintest.Segment{{Type: elf.PT_LOAD, Memsz: 4096}}}))
	f.Add([]byte("\x7fELF"))
	f.Fuzz(func(t *testing.T, img []byte) {
		n, err := cubin.Footprint(img)
		if err != nil {
			if !errors.Is(err, cubin.ErrNotCubin) && !errors.Is(err, cubin.ErrFatbin) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if n < cubin.ModuleOverhead {
			t.Fatalf("footprint %d below the module overhead", n)
		}
	})
}
