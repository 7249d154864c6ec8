/*
 * kvm_un_f32: the vector math bodies by SIMD level (kvmath.h).
 */
#include <stdio.h>

#include "kern.h"
#include "kvmath.h"

#ifdef KEEL_CPU_HAVE_SLEEF

bool kvm_un_f32(enum kvm_fn f, float *o, const float *x, int64_t n)
{
    enum cpu_isa isa = cpu_isa();

    if ((unsigned)f >= KVM_NFN || n <= 0)
        return false;
    if (isa >= CPU_ISA_AVX512) {
        kvm_un_f32_avx512(f, o, x, n);
        return true;
    }
    if (isa == CPU_ISA_AVX2) {
        kvm_un_f32_avx2(f, o, x, n);
        return true;
    }
    return false;
}

const char *kvm_summary(void)
{
    enum cpu_isa isa = cpu_isa();

    return isa >= CPU_ISA_AVX512 ? "sleef (avx512)"
           : isa == CPU_ISA_AVX2 ? "sleef (avx2)"
                                 : "libm (sse2 level)";
}

#else /* built without SLEEF */

bool kvm_un_f32(enum kvm_fn f, float *o, const float *x, int64_t n)
{
    (void)f, (void)o, (void)x, (void)n;
    return false;
}

const char *kvm_summary(void)
{
    return "libm (built without SLEEF)";
}

#endif
