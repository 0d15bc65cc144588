#include "textflag.h"

// func prefetch(p uintptr)
TEXT ·prefetch(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ p+0(FP), AX
	PREFETCHT0 (AX)
	RET

// func prefetchw(p uintptr)
TEXT ·prefetchw(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ p+0(FP), AX
	// PREFETCHW (AX): 0F 0D /1. Processors without it (before Broadwell)
	// execute it as a NOP.
	BYTE $0x0F; BYTE $0x0D; BYTE $0x08
	RET

// func demote(p uintptr)
TEXT ·demote(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ p+0(FP), AX
	// CLDEMOTE (AX): 0F 1C /0, in the hint-NOP space: a NOP on processors
	// without it.
	BYTE $0x0F; BYTE $0x1C; BYTE $0x00
	RET
