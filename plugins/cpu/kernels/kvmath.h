/*
 * Vectorised float32 math for the elementwise kernels (k_elementwise.c),
 * on SLEEF (libsleef, Debian's libsleef-dev): the transcendentals that the
 * plain C loops can only do one libm call per element.
 *
 * One body per SIMD level, each in its own file compiled for that
 * instruction set (kvmath_avx2.c with -mavx2 -mfma, kvmath_avx512.c with
 * -mavx512f), since SLEEF declares its AVX2 and AVX-512 functions only
 * for such files; they are called only at that level (cpu_isa()). At the
 * sse2 level, or in a build without SLEEF, kvm_un_f32 declines and the
 * caller's libm loop runs. Accuracy: SLEEF's 1.0-ulp functions, erfc's
 * 1.5-ulp one.
 */
#ifndef KEEL_CPU_KVMATH_H
#define KEEL_CPU_KVMATH_H

#include <stdbool.h>
#include <stdint.h>

enum kvm_fn {
    KVM_GELU,   /* 0.5 x erfc(-x / sqrt 2): gelu's exact form */
    KVM_LOG,
    KVM_LOG1P,
    KVM_SIN,
    KVM_COS,
    KVM_NFN
};

/* o[i] = f(x[i]) for i < n (o may be x). Returns false, having written
 * nothing, when no vector body runs at the plugin's level. */
bool kvm_un_f32(enum kvm_fn f, float *o, const float *x, int64_t n);

/* "sleef 3.5 (avx2)", "none (sse2 level: libm)", ... for the
 * description. */
const char *kvm_summary(void);

/* The bodies (kvmath_avx2.c, kvmath_avx512.c); the CPU must have the
 * instruction set. */
void kvm_un_f32_avx2(enum kvm_fn f, float *o, const float *x, int64_t n);
void kvm_un_f32_avx512(enum kvm_fn f, float *o, const float *x, int64_t n);

#endif /* KEEL_CPU_KVMATH_H */
