/*
 * The direct float32 convolution's AVX2 + FMA body (kconv_simd_body.h,
 * k_conv_simd.c).
 */
#if defined(__x86_64__) && defined(__GNUC__)

#define CS_ENTRY cpu_conv_simd_avx2
#define CS_VL 8
#define CS_TARGET "avx2,fma"
#define CS_RA 2
#define CS_RB 3
#define CS_SIX 0
#define CS_BWDF_KW4 2
#include "kconv_simd_body.h"

#else
/* ISO C wants a translation unit to declare something. */
typedef int keel_cpu_conv_simd_avx2_unused;
#endif
