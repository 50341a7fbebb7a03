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
