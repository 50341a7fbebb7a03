//go:build amd64 && !purego

#include "textflag.h"

// func accumSSE2(acc *[8]uint64, b *byte, key *uint64, stripes int)
//
// Per 16 bytes (two lanes): d = input, k = d ^ key; acc += swap64(d);
// acc += lo32(k) * hi32(k).
TEXT ·accumSSE2(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), AX
	MOVQ b+8(FP), SI
	MOVQ key+16(FP), DX
	MOVQ stripes+24(FP), CX
	MOVOU 0(AX), X0
	MOVOU 16(AX), X1
	MOVOU 32(AX), X2
	MOVOU 48(AX), X3

loop:
	MOVOU 0(SI), X4
	MOVOU 0(DX), X5
	PXOR X4, X5
	PSHUFD $0x4e, X4, X4
	PADDQ X4, X0
	PSHUFD $0xf5, X5, X6
	PMULULQ X6, X5
	PADDQ X5, X0

	MOVOU 16(SI), X7
	MOVOU 16(DX), X8
	PXOR X7, X8
	PSHUFD $0x4e, X7, X7
	PADDQ X7, X1
	PSHUFD $0xf5, X8, X9
	PMULULQ X9, X8
	PADDQ X8, X1

	MOVOU 32(SI), X10
	MOVOU 32(DX), X11
	PXOR X10, X11
	PSHUFD $0x4e, X10, X10
	PADDQ X10, X2
	PSHUFD $0xf5, X11, X12
	PMULULQ X12, X11
	PADDQ X11, X2

	MOVOU 48(SI), X13
	MOVOU 48(DX), X14
	PXOR X13, X14
	PSHUFD $0x4e, X13, X13
	PADDQ X13, X3
	PSHUFD $0xf5, X14, X15
	PMULULQ X15, X14
	PADDQ X14, X3

	ADDQ $64, SI
	ADDQ $8, DX
	DECQ CX
	JNZ  loop

	MOVOU X0, 0(AX)
	MOVOU X1, 16(AX)
	MOVOU X2, 32(AX)
	MOVOU X3, 48(AX)
	RET

// func accumAVX2(acc *[8]uint64, b *byte, key *uint64, stripes int)
//
// accumSSE2 with 32 bytes (four lanes) per instruction; the swap of
// adjacent lanes stays within each 128-bit half, as PSHUFD does.
TEXT ·accumAVX2(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), AX
	MOVQ b+8(FP), SI
	MOVQ key+16(FP), DX
	MOVQ stripes+24(FP), CX
	VMOVDQU 0(AX), Y0
	VMOVDQU 32(AX), Y1

loopavx2:
	VMOVDQU 0(SI), Y2
	VPXOR 0(DX), Y2, Y3
	VPSHUFD $0x4e, Y2, Y2
	VPADDQ Y2, Y0, Y0
	VPSHUFD $0xf5, Y3, Y4
	VPMULUDQ Y4, Y3, Y3
	VPADDQ Y3, Y0, Y0

	VMOVDQU 32(SI), Y5
	VPXOR 32(DX), Y5, Y6
	VPSHUFD $0x4e, Y5, Y5
	VPADDQ Y5, Y1, Y1
	VPSHUFD $0xf5, Y6, Y7
	VPMULUDQ Y7, Y6, Y6
	VPADDQ Y6, Y1, Y1

	ADDQ $64, SI
	ADDQ $8, DX
	DECQ CX
	JNZ  loopavx2

	VMOVDQU Y0, 0(AX)
	VMOVDQU Y1, 32(AX)
	VZEROUPPER
	RET

// func cpuid(leaf, sub uint32) (a, b, c, d uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, a+8(FP)
	MOVL BX, b+12(FP)
	MOVL CX, c+16(FP)
	MOVL DX, d+20(FP)
	RET

// func xgetbv0() (a, d uint32)
TEXT ·xgetbv0(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, a+0(FP)
	MOVL DX, d+4(FP)
	RET
