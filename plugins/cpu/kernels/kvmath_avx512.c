/*
 * kvm_un_f32's AVX-512 body (kvmath.h); this file is compiled with
 * -mavx512f and runs only at the avx512 level.
 */
#include <immintrin.h>

#define KVM_ENTRY kvm_un_f32_avx512
#define KVM_W 16
#define VF __m512
#define V_LOADU(p) _mm512_loadu_ps(p)
#define V_STOREU(p, v) _mm512_storeu_ps(p, v)
#define V_SET1(x) _mm512_set1_ps(x)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_GT_SELECT(x, t, a, b) \
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, t, _CMP_GT_OQ), a, b)
#define V_ERFC Sleef_erfcf16_u15avx512f
#define V_LOG Sleef_logf16_u10avx512f
#define V_LOG1P Sleef_log1pf16_u10avx512f
#define V_SIN Sleef_sinf16_u10avx512f
#define V_COS Sleef_cosf16_u10avx512f
#include "kvmath_body.h"
