//go:build amd64 && !purego

#include "textflag.h"

// SAFE sets out to 0xFF in each byte of in that encoding/json writes as it
// is (0x20..0x7F except " & < > \) and to 0 elsewhere. Y8..Y13 hold the
// constants 0x1F, 0x04, 0x26, 0x02, 0x3E, 0x5C in every byte.
//   out = (in >s 0x1F) &^ ((in|0x04) == 0x26 | (in|0x02) == 0x3E | in == 0x5C)
// Signed compare: bytes >= 0x80 are negative, so not > 0x1F.
#define SAFE(in, out, t1, t2) \
	VPCMPGTB Y8, in, out; \
	VPOR     Y9, in, t1; \
	VPCMPEQB Y10, t1, t1; \
	VPOR     Y11, in, t2; \
	VPCMPEQB Y12, t2, t2; \
	VPOR     t2, t1, t1; \
	VPCMPEQB Y13, in, t2; \
	VPOR     t2, t1, t1; \
	VPANDN   out, t1, out

// The constants of SAFE, one byte each, broadcast into Y8..Y13. (Loaded
// from memory with VEX instructions only: moving them in from a general
// register with a legacy-SSE MOVQ made each call cost ~650 ns here, an
// SSE/AVX transition penalty.)
DATA safeConsts<>+0(SB)/1, $0x1F
DATA safeConsts<>+1(SB)/1, $0x04
DATA safeConsts<>+2(SB)/1, $0x26
DATA safeConsts<>+3(SB)/1, $0x02
DATA safeConsts<>+4(SB)/1, $0x3E
DATA safeConsts<>+5(SB)/1, $0x5C
GLOBL safeConsts<>(SB), RODATA|NOPTR, $6

// func safePrefixAVX2(s []byte) int
// Requires len(s) >= 32. Returns the index of the first byte of s that is
// not SAFE, or len(s).
TEXT ·safePrefixAVX2(SB), NOSPLIT, $0-32
	MOVQ s_base+0(FP), SI
	MOVQ s_len+8(FP), CX
	VPBROADCASTB safeConsts<>+0(SB), Y8
	VPBROADCASTB safeConsts<>+1(SB), Y9
	VPBROADCASTB safeConsts<>+2(SB), Y10
	VPBROADCASTB safeConsts<>+3(SB), Y11
	VPBROADCASTB safeConsts<>+4(SB), Y12
	VPBROADCASTB safeConsts<>+5(SB), Y13
	XORQ DI, DI // bytes tested, all safe

loop64:
	LEAQ 64(DI), DX
	CMPQ DX, CX
	JA   tail32
	VMOVDQU (SI)(DI*1), Y0
	VMOVDQU 32(SI)(DI*1), Y4
	SAFE(Y0, Y1, Y2, Y3)
	SAFE(Y4, Y5, Y6, Y7)
	VPAND     Y1, Y5, Y6
	VPMOVMSKB Y6, AX
	CMPL      AX, $-1
	JNE       found64
	MOVQ      DX, DI
	JMP       loop64

found64:
	VPMOVMSKB Y1, AX
	CMPL      AX, $-1
	JNE       found
	ADDQ      $32, DI
	VPMOVMSKB Y5, AX
	JMP       found

tail32:
	// fewer than 64 bytes left
	LEAQ 32(DI), DX
	CMPQ DX, CX
	JA   last32
	VMOVDQU   (SI)(DI*1), Y0
	SAFE(Y0, Y1, Y2, Y3)
	VPMOVMSKB Y1, AX
	CMPL      AX, $-1
	JNE       found
	MOVQ      DX, DI

last32:
	// fewer than 32 bytes left: test the last 32 bytes of s, which
	// overlap safe bytes already tested
	CMPQ DI, CX
	JEQ  all
	MOVQ CX, DI
	SUBQ $32, DI
	VMOVDQU   (SI)(DI*1), Y0
	SAFE(Y0, Y1, Y2, Y3)
	VPMOVMSKB Y1, AX
	CMPL      AX, $-1
	JNE       found

all:
	VZEROUPPER
	MOVQ CX, ret+24(FP)
	RET

found:
	// AX has a 0 bit for each byte that is not safe
	NOTL AX
	BSFL AX, AX
	ADDQ AX, DI
	VZEROUPPER
	MOVQ DI, ret+24(FP)
	RET
