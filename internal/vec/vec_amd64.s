#include "textflag.h"

DATA expHi<>+0(SB)/4, $0x42b0999a
DATA expHi<>+4(SB)/4, $0x42b0999a
DATA expHi<>+8(SB)/4, $0x42b0999a
DATA expHi<>+12(SB)/4, $0x42b0999a
DATA expHi<>+16(SB)/4, $0x42b0999a
DATA expHi<>+20(SB)/4, $0x42b0999a
DATA expHi<>+24(SB)/4, $0x42b0999a
DATA expHi<>+28(SB)/4, $0x42b0999a
GLOBL expHi<>(SB), RODATA|NOPTR, $32

DATA expLo<>+0(SB)/4, $0xc2ad0000
DATA expLo<>+4(SB)/4, $0xc2ad0000
DATA expLo<>+8(SB)/4, $0xc2ad0000
DATA expLo<>+12(SB)/4, $0xc2ad0000
DATA expLo<>+16(SB)/4, $0xc2ad0000
DATA expLo<>+20(SB)/4, $0xc2ad0000
DATA expLo<>+24(SB)/4, $0xc2ad0000
DATA expLo<>+28(SB)/4, $0xc2ad0000
GLOBL expLo<>(SB), RODATA|NOPTR, $32

DATA log2e<>+0(SB)/4, $0x3fb8aa3b
DATA log2e<>+4(SB)/4, $0x3fb8aa3b
DATA log2e<>+8(SB)/4, $0x3fb8aa3b
DATA log2e<>+12(SB)/4, $0x3fb8aa3b
DATA log2e<>+16(SB)/4, $0x3fb8aa3b
DATA log2e<>+20(SB)/4, $0x3fb8aa3b
DATA log2e<>+24(SB)/4, $0x3fb8aa3b
DATA log2e<>+28(SB)/4, $0x3fb8aa3b
GLOBL log2e<>(SB), RODATA|NOPTR, $32

DATA ln2Hi<>+0(SB)/4, $0x3f318000
DATA ln2Hi<>+4(SB)/4, $0x3f318000
DATA ln2Hi<>+8(SB)/4, $0x3f318000
DATA ln2Hi<>+12(SB)/4, $0x3f318000
DATA ln2Hi<>+16(SB)/4, $0x3f318000
DATA ln2Hi<>+20(SB)/4, $0x3f318000
DATA ln2Hi<>+24(SB)/4, $0x3f318000
DATA ln2Hi<>+28(SB)/4, $0x3f318000
GLOBL ln2Hi<>(SB), RODATA|NOPTR, $32

DATA ln2Lo<>+0(SB)/4, $0xb95e8083
DATA ln2Lo<>+4(SB)/4, $0xb95e8083
DATA ln2Lo<>+8(SB)/4, $0xb95e8083
DATA ln2Lo<>+12(SB)/4, $0xb95e8083
DATA ln2Lo<>+16(SB)/4, $0xb95e8083
DATA ln2Lo<>+20(SB)/4, $0xb95e8083
DATA ln2Lo<>+24(SB)/4, $0xb95e8083
DATA ln2Lo<>+28(SB)/4, $0xb95e8083
GLOBL ln2Lo<>(SB), RODATA|NOPTR, $32

DATA p0<>+0(SB)/4, $0x39506967
DATA p0<>+4(SB)/4, $0x39506967
DATA p0<>+8(SB)/4, $0x39506967
DATA p0<>+12(SB)/4, $0x39506967
DATA p0<>+16(SB)/4, $0x39506967
DATA p0<>+20(SB)/4, $0x39506967
DATA p0<>+24(SB)/4, $0x39506967
DATA p0<>+28(SB)/4, $0x39506967
GLOBL p0<>(SB), RODATA|NOPTR, $32

DATA p1<>+0(SB)/4, $0x3ab743ce
DATA p1<>+4(SB)/4, $0x3ab743ce
DATA p1<>+8(SB)/4, $0x3ab743ce
DATA p1<>+12(SB)/4, $0x3ab743ce
DATA p1<>+16(SB)/4, $0x3ab743ce
DATA p1<>+20(SB)/4, $0x3ab743ce
DATA p1<>+24(SB)/4, $0x3ab743ce
DATA p1<>+28(SB)/4, $0x3ab743ce
GLOBL p1<>(SB), RODATA|NOPTR, $32

DATA p2<>+0(SB)/4, $0x3c088908
DATA p2<>+4(SB)/4, $0x3c088908
DATA p2<>+8(SB)/4, $0x3c088908
DATA p2<>+12(SB)/4, $0x3c088908
DATA p2<>+16(SB)/4, $0x3c088908
DATA p2<>+20(SB)/4, $0x3c088908
DATA p2<>+24(SB)/4, $0x3c088908
DATA p2<>+28(SB)/4, $0x3c088908
GLOBL p2<>(SB), RODATA|NOPTR, $32

DATA p3<>+0(SB)/4, $0x3d2aa9c1
DATA p3<>+4(SB)/4, $0x3d2aa9c1
DATA p3<>+8(SB)/4, $0x3d2aa9c1
DATA p3<>+12(SB)/4, $0x3d2aa9c1
DATA p3<>+16(SB)/4, $0x3d2aa9c1
DATA p3<>+20(SB)/4, $0x3d2aa9c1
DATA p3<>+24(SB)/4, $0x3d2aa9c1
DATA p3<>+28(SB)/4, $0x3d2aa9c1
GLOBL p3<>(SB), RODATA|NOPTR, $32

DATA p4<>+0(SB)/4, $0x3e2aaaaa
DATA p4<>+4(SB)/4, $0x3e2aaaaa
DATA p4<>+8(SB)/4, $0x3e2aaaaa
DATA p4<>+12(SB)/4, $0x3e2aaaaa
DATA p4<>+16(SB)/4, $0x3e2aaaaa
DATA p4<>+20(SB)/4, $0x3e2aaaaa
DATA p4<>+24(SB)/4, $0x3e2aaaaa
DATA p4<>+28(SB)/4, $0x3e2aaaaa
GLOBL p4<>(SB), RODATA|NOPTR, $32

DATA p5<>+0(SB)/4, $0x3f000000
DATA p5<>+4(SB)/4, $0x3f000000
DATA p5<>+8(SB)/4, $0x3f000000
DATA p5<>+12(SB)/4, $0x3f000000
DATA p5<>+16(SB)/4, $0x3f000000
DATA p5<>+20(SB)/4, $0x3f000000
DATA p5<>+24(SB)/4, $0x3f000000
DATA p5<>+28(SB)/4, $0x3f000000
GLOBL p5<>(SB), RODATA|NOPTR, $32

DATA one<>+0(SB)/4, $0x3f800000
DATA one<>+4(SB)/4, $0x3f800000
DATA one<>+8(SB)/4, $0x3f800000
DATA one<>+12(SB)/4, $0x3f800000
DATA one<>+16(SB)/4, $0x3f800000
DATA one<>+20(SB)/4, $0x3f800000
DATA one<>+24(SB)/4, $0x3f800000
DATA one<>+28(SB)/4, $0x3f800000
GLOBL one<>(SB), RODATA|NOPTR, $32

// EXP sets Y0 = exp(Y0) (Cephes expf; 0 below expLo), using Y1..Y4.
#define EXP \
	VCMPPS $1, expLo<>(SB), Y0, Y4 \
	VMINPS expHi<>(SB), Y0, Y0 \
	VMULPS log2e<>(SB), Y0, Y1 \
	VROUNDPS $0, Y1, Y1 \
	VFNMADD231PS ln2Hi<>(SB), Y1, Y0 \
	VFNMADD231PS ln2Lo<>(SB), Y1, Y0 \
	VMOVUPS p0<>(SB), Y2 \
	VFMADD213PS p1<>(SB), Y0, Y2 \
	VFMADD213PS p2<>(SB), Y0, Y2 \
	VFMADD213PS p3<>(SB), Y0, Y2 \
	VFMADD213PS p4<>(SB), Y0, Y2 \
	VFMADD213PS p5<>(SB), Y0, Y2 \
	VMULPS Y0, Y0, Y3 \
	VFMADD213PS Y0, Y3, Y2 \
	VADDPS one<>(SB), Y2, Y2 \
	VCVTPS2DQ Y1, Y1 \
	VPSLLD $23, Y1, Y1 \
	VPADDD Y1, Y2, Y0 \
	VANDNPS Y0, Y4, Y0

// SIGMOID sets Y0 = 1/(1+exp(-Y0)), using Y1..Y4 (Y5 holds 1.0, Y6 zero).
#define SIGMOID \
	VSUBPS Y0, Y6, Y0 \
	EXP \
	VADDPS Y5, Y0, Y0 \
	VDIVPS Y0, Y5, Y0

// HSUM reduces Y7 to its lane sum in X7.
#define HSUM \
	VEXTRACTF128 $1, Y7, X1 \
	VADDPS X1, X7, X7 \
	VHADDPS X7, X7, X7 \
	VHADDPS X7, X7, X7

// func maxAVX(x *float32, n int) float32
TEXT ·maxAVX(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VMOVUPS (SI), Y7
	ADDQ $32, SI
	SUBQ $8, CX
	JZ   maxdone
maxloop:
	VMAXPS (SI), Y7, Y7
	ADDQ $32, SI
	SUBQ $8, CX
	JNZ  maxloop
maxdone:
	VEXTRACTF128 $1, Y7, X1
	VMAXPS X1, X7, X7
	VPERMILPS $0x4e, X7, X1
	VMAXPS X1, X7, X7
	VPERMILPS $0xb1, X7, X1
	VMAXPS X1, X7, X7
	VMOVSS X7, ret+16(FP)
	VZEROUPPER
	RET

// func dotAVX(x, y *float32, n int) float32
TEXT ·dotAVX(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y7, Y7, Y7
dotloop:
	VMOVUPS (SI), Y0
	VFMADD231PS (DI), Y0, Y7
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  dotloop
	HSUM
	VMOVSS X7, ret+24(FP)
	VZEROUPPER
	RET

// func scaleAVX(x *float32, n int, a float32)
TEXT ·scaleAVX(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS a+16(FP), Y5
scaleloop:
	VMULPS (SI), Y5, Y0
	VMOVUPS Y0, (SI)
	ADDQ $32, SI
	SUBQ $8, CX
	JNZ  scaleloop
	VZEROUPPER
	RET

// func expSumAVX(dst, src *float32, n int, scale, shift float32) float32
TEXT ·expSumAVX(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y5
	VBROADCASTSS shift+28(FP), Y6
	VXORPS Y7, Y7, Y7
esloop:
	VMOVUPS (SI), Y0
	VFMSUB213PS Y6, Y5, Y0
	EXP
	VMOVUPS Y0, (DI)
	VADDPS Y0, Y7, Y7
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  esloop
	HSUM
	VMOVSS X7, ret+32(FP)
	VZEROUPPER
	RET

// func expAffineAVX(dst, src *float32, n int, scale, shift, a, b float32)
TEXT ·expAffineAVX(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y5
	VBROADCASTSS shift+28(FP), Y6
	VBROADCASTSS a+32(FP), Y7
	VBROADCASTSS b+36(FP), Y8
ealoop:
	VMOVUPS (SI), Y9
	VMOVAPS Y9, Y0
	VFMSUB213PS Y6, Y5, Y0
	EXP
	VMOVAPS Y8, Y10
	VFMADD213PS Y7, Y9, Y10
	VMULPS Y10, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  ealoop
	VZEROUPPER
	RET

// func mulAffineAVX(dst, p, d *float32, n int, a, b float32)
TEXT ·mulAffineAVX(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ d+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS a+32(FP), Y7
	VBROADCASTSS b+36(FP), Y8
maloop:
	VMOVAPS Y7, Y0
	VFMADD231PS (DX), Y8, Y0
	VMULPS (SI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  maloop
	VZEROUPPER
	RET

// func siluMulAVX(dst, a, b *float32, n int)
TEXT ·siluMulAVX(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	VMOVUPS one<>(SB), Y5
	VXORPS Y6, Y6, Y6
smloop:
	VMOVUPS (SI), Y9
	VMOVAPS Y9, Y0
	SIGMOID
	VMULPS Y9, Y0, Y0
	VMULPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  smloop
	VZEROUPPER
	RET

// func siluGradAAVX(dst, a, b, gr *float32, n int)
TEXT ·siluGradAAVX(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ gr+24(FP), R8
	MOVQ n+32(FP), CX
	VMOVUPS one<>(SB), Y5
	VXORPS Y6, Y6, Y6
galoop:
	VMOVUPS (SI), Y9
	VMOVAPS Y9, Y0
	SIGMOID
	// s·(1 + a·(1−s)) · b · g
	VSUBPS Y0, Y5, Y10
	VFMADD213PS Y5, Y9, Y10
	VMULPS Y10, Y0, Y0
	VMULPS (DX), Y0, Y0
	VMULPS (R8), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, R8
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  galoop
	VZEROUPPER
	RET

// func siluGradBAVX(dst, a, gr *float32, n int)
TEXT ·siluGradBAVX(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ gr+16(FP), DX
	MOVQ n+24(FP), CX
	VMOVUPS one<>(SB), Y5
	VXORPS Y6, Y6, Y6
gbloop:
	VMOVUPS (SI), Y9
	VMOVAPS Y9, Y0
	SIGMOID
	VMULPS Y9, Y0, Y0
	VMULPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  gbloop
	VZEROUPPER
	RET

// func axpyAVX(y, x *float32, n int, a float32)
TEXT ·axpyAVX(SB), NOSPLIT, $0-28
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS a+24(FP), Y5
axloop:
	VMOVUPS (DI), Y0
	VFMADD231PS (SI), Y5, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  axloop
	VZEROUPPER
	RET
