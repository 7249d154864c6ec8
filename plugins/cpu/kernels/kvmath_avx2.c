/*
 * kvm_un_f32's AVX2 body (kvmath.h); this file is compiled with -mavx2
 * -mfma and runs only at the avx2 level or above.
 */
#include <immintrin.h>

#define KVM_ENTRY kvm_un_f32_avx2
#define KVM_W 8
#define VF __m256
#define V_LOADU(p) _mm256_loadu_ps(p)
#define V_STOREU(p, v) _mm256_storeu_ps(p, v)
#define V_SET1(x) _mm256_set1_ps(x)
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#define V_GT_SELECT(x, t, a, b) \
    _mm256_blendv_ps(a, b, _mm256_cmp_ps(x, t, _CMP_GT_OQ))
#define V_ERFC Sleef_erfcf8_u15avx2
#define V_LOG Sleef_logf8_u10avx2
#define V_LOG1P Sleef_log1pf8_u10avx2
#define V_SIN Sleef_sinf8_u10avx2
#define V_COS Sleef_cosf8_u10avx2
#include "kvmath_body.h"
