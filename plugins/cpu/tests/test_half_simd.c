/*
 * White-box CUnit tests of the CPU plugin's bfloat16 block conversions
 * (kernels/khalf.c), linked straight into this program: every path the
 * CPU supports (scalar, AVX2, AVX-512) must give the kit's bits
 * (keel_kit_f32_to_bf16 / keel_kit_bf16_to_f32) for
 *
 *   - all 65536 bfloat16 patterns, widened;
 *   - float32 inputs that reach every branch of the rounding: exact
 *     values, ties to even in both directions, carries into the exponent
 *     and into infinity, denormals, signed zeros, infinities, quiet and
 *     signalling NaNs of both signs, plus a million pseudo-random bit
 *     patterns;
 *   - lengths 0 to 40 at every misalignment, so that each vector body and
 *     its scalar tail are used.
 *
 * A path the CPU lacks is reported on stderr and not run; when neither
 * SIMD path can run the program exits 77 (SKIP) after the scalar checks,
 * saying so.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>

#include <keel/kit.h>

#include "../kernels/khalf.h"

static const char *const names[3] = {"scalar", "AVX2", "AVX-512"};

static bool runs(enum khalf_isa isa)
{
    return isa <= khalf_isa();
}

static uint32_t rng = 12345;

static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static float from_bits(uint32_t u)
{
    float f;

    memcpy(&f, &u, sizeof(f));
    return f;
}

static void check_widen(enum khalf_isa isa)
{
    enum { N = 65536 };
    uint16_t *h = malloc(N * sizeof(*h));
    float *f = malloc(N * sizeof(*f));
    int bad = 0;

    for (int i = 0; i < N; i++)
        h[i] = (uint16_t)i;
    khalf_bf16_to_f32(h, f, N, isa);
    for (int i = 0; i < N; i++) {
        uint32_t got, want = (uint32_t)i << 16;

        memcpy(&got, &f[i], sizeof(got));
        bad += got != want;
    }
    if (bad)
        fprintf(stderr, "\n  %s: %d of 65536 widened wrongly\n", names[isa],
                bad);
    CU_ASSERT_EQUAL(bad, 0);
    free(h);
    free(f);
}

static void check_narrow(enum khalf_isa isa)
{
    static const uint32_t special[] = {
        0x00000000, 0x80000000, 0x3f800000, 0xbf800000, /* 0, -0, 1, -1 */
        0x3f808000, 0x3f818000, /* ties: to even down, to even up */
        0x3f807fff, 0x3f808001, /* just below, just above a tie */
        0x3fffffff, 0x7f7fffff, /* carry into the exponent; into inf */
        0x7f7f8000, 0xff7f8000, /* ties at the largest finite */
        0x00000001, 0x00008000, 0x00018000, 0x807fffff, /* denormals */
        0x7f800000, 0xff800000, /* infinities */
        0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, /* NaNs */
        0x7fbfffff, 0x7fff0000, 0x7f80ffff,
    };
    enum { NS = sizeof(special) / sizeof(special[0]), NR = 1 << 20 };
    float *f = malloc((NS + NR) * sizeof(*f));
    uint16_t *h = malloc((NS + NR) * sizeof(*h));
    int bad = 0;

    for (int i = 0; i < NS; i++)
        f[i] = from_bits(special[i]);
    for (int i = 0; i < NR; i++)
        f[NS + i] = from_bits(next());
    khalf_f32_to_bf16(f, h, NS + NR, isa);
    for (int i = 0; i < NS + NR; i++)
        if (h[i] != keel_kit_f32_to_bf16(f[i])) {
            if (bad++ < 5) {
                uint32_t u;

                memcpy(&u, &f[i], sizeof(u));
                fprintf(stderr, "\n  %s: 0x%08x -> 0x%04x, want 0x%04x",
                        names[isa], u, h[i], keel_kit_f32_to_bf16(f[i]));
            }
        }
    CU_ASSERT_EQUAL(bad, 0);
    free(f);
    free(h);
}

/* Every length and offset: the bodies and their tails, and nothing
 * written past the end. */
static void check_lengths(enum khalf_isa isa)
{
    float f[64], back[64];
    uint16_t h[64 + 8];
    int bad = 0;

    for (int i = 0; i < 64; i++)
        f[i] = from_bits(next());
    for (int off = 0; off < 8; off++)
        for (int n = 0; n <= 40; n++) {
            memset(h, 0xab, sizeof(h));
            khalf_f32_to_bf16(f + off, h + off, n, isa);
            for (int i = 0; i < off; i++)
                bad += h[i] != 0xabab;
            for (int i = off + n; i < 64 + 8; i++)
                bad += h[i] != 0xabab;
            for (int i = off; i < off + n; i++)
                bad += h[i] != keel_kit_f32_to_bf16(f[i]);
            memset(back, 0, sizeof(back));
            khalf_bf16_to_f32(h + off, back, n, isa);
            for (int i = 0; i < n; i++)
                bad += keel_kit_f32_to_bf16(back[i]) != h[off + i] &&
                       back[i] == back[i];
        }
    CU_ASSERT_EQUAL(bad, 0);
}

static void run_all(enum khalf_isa isa)
{
    if (!runs(isa)) {
        fprintf(stderr, "\n  %s: this CPU lacks it; not run", names[isa]);
        return;
    }
    check_widen(isa);
    check_narrow(isa);
    check_lengths(isa);
}

static void test_scalar(void)
{
    run_all(KHALF_SCALAR);
}

static void test_avx2(void)
{
    run_all(KHALF_AVX2);
}

static void test_avx512(void)
{
    run_all(KHALF_AVX512);
}

int main(void)
{
    CU_pSuite s;
    unsigned failed;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    s = CU_add_suite("cpu-half-simd", NULL, NULL);
    CU_add_test(s, "scalar", test_scalar);
    CU_add_test(s, "AVX2 (when the CPU has it)", test_avx2);
    CU_add_test(s, "AVX-512 (when the CPU has it)", test_avx512);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    fprintf(stderr, "cpu-half-simd: best path on this CPU: %s\n",
            names[khalf_isa()]);
    if (failed)
        return 1;
    if (khalf_isa() == KHALF_SCALAR) {
        fprintf(stderr, "SKIP: neither AVX2 nor AVX-512 runs on this CPU: "
                        "only the scalar path was checked\n");
        return 77;
    }
    return 0;
}
