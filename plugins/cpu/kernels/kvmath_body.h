/*
 * One SIMD level's body of kvm_un_f32 (kvmath.h), included by
 * kvmath_avx2.c and kvmath_avx512.c with:
 *   KVM_ENTRY  the function's name
 *   KVM_W      floats per vector; VF the vector type; V_LOADU, V_STOREU,
 *              V_SET1, V_MUL, V_GT_SELECT(x, t, a, b) (x > t ? b : a per
 *              lane) and the SLEEF functions of that level: V_ERFC,
 *              V_LOG, V_LOG1P, V_SIN, V_COS
 */
#include <string.h>

#include <sleef.h>

#include "kvmath.h"

static inline VF kvm_apply(enum kvm_fn f, VF x)
{
    switch (f) {
    case KVM_GELU:
        return V_MUL(V_MUL(V_SET1(0.5f), x),
                     V_ERFC(V_MUL(x, V_SET1(-0.70710678118654752440f))));
    case KVM_LOG:
        return V_LOG(x);
    case KVM_LOG1P:
        /* SLEEF's log1pf holds its bound up to 1e38 and overflows past
         * it; there log(x) is log1p(x) to float32 rounding. */
        return V_GT_SELECT(x, V_SET1(1e38f), V_LOG1P(x), V_LOG(x));
    case KVM_SIN:
        return V_SIN(x);
    case KVM_COS:
    default:
        return V_COS(x);
    }
}

void KVM_ENTRY(enum kvm_fn f, float *o, const float *x, int64_t n)
{
    int64_t i = 0;

    for (; i + KVM_W <= n; i += KVM_W)
        V_STOREU(o + i, kvm_apply(f, V_LOADU(x + i)));
    if (i < n) {
        /* the tail through a full vector: padding lanes compute f(0) */
        float t[KVM_W];

        memset(t, 0, sizeof(t));
        memcpy(t, x + i, (size_t)(n - i) * sizeof(float));
        V_STOREU(t, kvm_apply(f, V_LOADU(t)));
        memcpy(o + i, t, (size_t)(n - i) * sizeof(float));
    }
}
