/*
 * The direct float32 convolution's AVX-512 body (kconv_simd_body.h,
 * k_conv_simd.c).
 */
#if defined(__x86_64__) && defined(__GNUC__)

#define CS_ENTRY cpu_conv_simd_avx512
#define CS_VL 16
#define CS_TARGET "avx512f"
#define CS_RA 4
#define CS_RB 5
#define CS_SIX 1
#define CS_BWDF_KW4 5
#include "kconv_simd_body.h"

#else
/* ISO C wants a translation unit to declare something. */
typedef int keel_cpu_conv_simd_avx512_unused;
#endif
