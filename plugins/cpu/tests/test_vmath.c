/*
 * White-box CUnit tests of the CPU plugin's vector math (kernels/kvmath*.c,
 * SLEEF bodies by SIMD level), linked straight into this program with the
 * plugin's SIMD level stubbed: every body the CPU has is run over random
 * values of each function's working range, special values (+-0, +-inf,
 * NaN, subnormals, huge arguments) and every length from 1 to 40 (vector
 * tails), in place and not, and checked against float64 libm within a
 * bound in float32 ulps of the correctly rounded result. At the sse2 level
 * every call must decline (the kernels then run their libm loops). With
 * neither AVX2 nor AVX-512F only that is checked, and the program exits 77
 * (meson's SKIP) saying so.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>

#include "../kernels/kern.h"
#include "../kernels/kvmath.h"

static enum cpu_isa test_isa = CPU_ISA_SSE2;

enum cpu_isa cpu_isa(void)
{
    return test_isa;
}

static double ref(enum kvm_fn f, double x)
{
    switch (f) {
    case KVM_GELU:
        /* erfc's argument as float32 computes it (the kernels' libm loop
         * too): erfc is steep in the tail, so the argument's rounding
         * alone is worth tens of ulps there; the bound is on the rest. */
        return 0.5 * x * erfc((double)((float)-x * 0.70710678f));
    case KVM_LOG:
        return log(x);
    case KVM_LOG1P:
        return log1p(x);
    case KVM_SIN:
        return sin(x);
    default:
        return cos(x);
    }
}

static const char *const fname[KVM_NFN] = {"gelu", "log", "log1p", "sin",
                                           "cos"};

/* Distance in float32 ulps between got and the double want rounded. */
static double ulps(float got, double want)
{
    float w = (float)want;
    double u;

    if (isnan(w) || isnan(got))
        return isnan(w) && isnan(got) ? 0 : INFINITY;
    if (isinf(w) || isinf(got))
        return w == got ? 0 : INFINITY;
    u = nextafterf(fabsf(w), INFINITY) - fabsf(w);
    if (fabs(want) < FLT_MIN)
        u = ldexp(1.0, -149); /* the subnormal spacing */
    return fabs((double)got - want) / u;
}

static uint64_t rs = 88172645463325252ull;
static double rnd(double lo, double hi)
{
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return lo + (hi - lo) * (double)(rs >> 11) / 9007199254740992.0;
}

#define N 4096

static void check_fn(enum kvm_fn f, double lo, double hi, double bound)
{
    static float x[N], o[N];
    static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN,
                                    1e-40f, -1e-40f, FLT_MIN, 1.0f, -1.0f,
                                    0.5f, 3.0f, -3.0f, 10.0f, -10.0f,
                                    1e4f, -1e4f, 1e30f, -1e30f, FLT_MAX};
    const size_t ns = sizeof(special) / sizeof(special[0]);
    double worst = 0;
    int64_t bad = 0;

    for (int64_t i = 0; i < N; i++)
        x[i] = i < (int64_t)ns ? special[i] : (float)rnd(lo, hi);
    CU_ASSERT_TRUE_FATAL(kvm_un_f32(f, o, x, N));
    for (int64_t i = 0; i < N; i++) {
        double want = ref(f, (double)x[i]);
        double e = ulps(o[i], want);
        /* sin/cos of huge arguments: SLEEF's u10 functions reduce
         * exactly, as libm's do; gelu's tails go through erfc's. */
        if (e > bound) {
            if (bad < 3)
                fprintf(stderr, "\n  %s(%.9g) = %.9g, want %.9g (%.1f ulp)",
                        fname[f], x[i], o[i], want, e);
            bad++;
        }
        worst = e > worst && isfinite(e) ? e : worst;
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* every length, in place: the same values as one long call */
    for (int64_t n = 1; n <= 40; n++) {
        float y[40];
        memcpy(y, x + 100, (size_t)n * sizeof(float));
        CU_ASSERT_TRUE(kvm_un_f32(f, y, y, n));
        CU_ASSERT_EQUAL(memcmp(y, o + 100, (size_t)n * sizeof(float)), 0);
    }
}

static void test_all(void)
{
    check_fn(KVM_GELU, -12, 12, 4);
    check_fn(KVM_LOG, 0, 1e6, 2);
    check_fn(KVM_LOG1P, -0.999, 1e4, 2);
    check_fn(KVM_SIN, -100, 100, 2);
    check_fn(KVM_COS, -100, 100, 2);
}

static void test_declines(void)
{
    float x[4] = {1, 2, 3, 4}, o[4] = {0};

    for (int f = 0; f < KVM_NFN; f++)
        CU_ASSERT_FALSE(kvm_un_f32((enum kvm_fn)f, o, x, 4));
    CU_ASSERT_EQUAL(o[0], 0.0f);
}

static void set_avx512(void) { test_isa = CPU_ISA_AVX512; }
static void set_avx2(void) { test_isa = CPU_ISA_AVX2; }
static void set_sse2(void) { test_isa = CPU_ISA_SSE2; }

static bool cpu_has(enum cpu_isa isa)
{
    __builtin_cpu_init();
    if (isa == CPU_ISA_AVX512)
        return __builtin_cpu_supports("avx512f");
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

int main(void)
{
    CU_pSuite s;
    unsigned fails;
    int bodies = 0;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
#ifndef KEEL_CPU_HAVE_SLEEF
    printf("cpu-vmath: SKIP: the plugin was built without SLEEF (Debian: "
           "libsleef-dev), so there is no vector math to test.\n");
    CU_cleanup_registry();
    return 77;
#endif
    if (cpu_has(CPU_ISA_AVX512)) {
        s = CU_add_suite("avx512", NULL, NULL);
        if (!s || !CU_add_test(s, "set", set_avx512) ||
            !CU_add_test(s, "against float64 libm", test_all))
            return 1;
        bodies++;
    } else {
        printf("cpu-vmath: NOT RUN: the avx512 body (this CPU lacks it)\n");
    }
    if (cpu_has(CPU_ISA_AVX2)) {
        s = CU_add_suite("avx2", NULL, NULL);
        if (!s || !CU_add_test(s, "set", set_avx2) ||
            !CU_add_test(s, "against float64 libm", test_all))
            return 1;
        bodies++;
    }
    s = CU_add_suite("sse2", NULL, NULL);
    if (!s || !CU_add_test(s, "set", set_sse2) ||
        !CU_add_test(s, "every call declines", test_declines))
        return 1;
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    if (fails)
        return 1;
    if (!bodies) {
        printf("\ncpu-vmath: SKIP: this CPU has neither AVX2 + FMA nor "
               "AVX-512F: only the declines were checked.\n");
        return 77;
    }
    return 0;
}
