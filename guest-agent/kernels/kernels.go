// Package kernels holds the GPU programs of ABI 1.1 (api/abi/kernels.go) as
// PTX, for an NVIDIA GPU: a guest loads PTX with LOAD_MODULE (ModulePTX) and
// launches the programs by name; the sim backend has the same programs built
// in (ModuleSim).
//
// The source is sluice_kernels.cu, on top of api/abi/include/sluice_syscall.h.
// The PTX is generated and checked in, so that building Sluice needs no
// CUDA toolkit and no clang:
//
//	make ptx    # runs guest-agent/kernels/gen.sh, which is
//	clang -x cuda --cuda-device-only --cuda-gpu-arch=sm_80 -nocudainc -nocudalib \
//		-O2 -Wall -Wextra -Werror -I api/abi/include \
//		-S -o guest-agent/kernels/sluice_kernels.ptx guest-agent/kernels/sluice_kernels.cu
//
// with Debian 12's clang 14. The target is sm_80 with PTX ISA 7.0 because
// clang 14 knows no sm_90; the driver JIT-compiles the PTX for the GPU it
// finds (an H100, sm_90, included). The code needs sm_70 at least
// (system-scope acquire/release, nanosleep, independent thread scheduling).
//
// Each kernel takes its argument blob as one by-value struct of the blob's
// size, so the LAUNCH blob is the kernel's parameter buffer byte for byte.
package kernels

import (
	_ "embed"

	"github.com/sluice-gpu/sluice/api/abi"
)

// PTX is the module holding every program.
//
//go:embed sluice_kernels.ptx
var PTX []byte

// The PTX's target and ISA version.
const (
	Target     = "sm_80"
	PTXVersion = "7.0"
)

// The programs' entry points.
const (
	SysOne     = abi.KernelSysOne
	SysNull    = abi.KernelSysNull
	PreadSweep = abi.KernelPreadSwp
	WordCount  = abi.KernelWordCount
	// NullPhases is a diagnostic, not one of the ABI's programs (the sim
	// has none): null calls timed phase by phase (sluice_kernels.cu).
	NullPhases = "sluice_sys_null_phases"
)

// NullPhases' blob (ProgArgs, then u32 mode, u32 pad) and its out record
// per call: u64 t0, u32 ns at claimed, populated, rung, finished seen, freed,
// u32 polls.
const (
	NullPhasesMode     = abi.ProgSpecific
	NullPhasesBlobSize = abi.ProgArgsBaseSize + 8
	NullPhasesRec      = 32
	// Modes (bits): no cookie lock, no state read at the claim after the
	// first (with PhaseOwned), poll without nanosleep, free with a relaxed
	// store, set no ready hint, read the result the old way (state, then
	// args[0] and args[1]; otherwise one 16-byte load).
	PhaseOwned     = 1
	PhaseKnownSeq  = 2
	PhaseSpin      = 4
	PhaseFreeRlx   = 8
	PhaseNoHint    = 16
	PhaseOldResult = 32
)

// Names lists every entry point of PTX.
var Names = []string{SysOne, SysNull, PreadSweep, WordCount, NullPhases}

// BlobSize is each program's argument blob size in bytes.
var BlobSize = map[string]int{
	SysOne:     abi.SysOneBlobSize,
	SysNull:    abi.NullBlobSize,
	PreadSweep: abi.SweepBlobSize,
	WordCount:  abi.WCBlobSize,
	NullPhases: NullPhasesBlobSize,
}
