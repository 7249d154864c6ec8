/*
 * White-box CUnit tests of the CPU plugin's direct SIMD convolution
 * (kernels/k_conv_simd*.c), linked straight into this program with the few
 * plugin services it uses stubbed below (environment, workspace, a
 * parallel_for that cuts every range into single items, three pool
 * threads so that bwd_filter's per-part sums are added up, the plugin's
 * SIMD level).
 *
 * Every body the CPU can run is tested, one suite each: AVX-512 and
 * AVX2 + FMA, called through cpu_conv_simd with the SIMD level set to
 * that body's (as KEEL_CPU_ISA sets it in the plugin) and checked to have
 * taken it. A third suite sets the level to the SSE2 baseline, where every
 * call must decline (the plugin then runs im2col + GEMM).
 *
 * The op-level suites (ops-conv-*) run conv2d through the plugin, where a
 * path that declines simply falls back to im2col + GEMM; here each call
 * must be taken by the direct path, and its
 * result is checked against a double-precision loop over exactly the
 * terms of the definition:
 *
 *   - forward, backward data (with and without bias) and backward filter
 *     over geometries that reach every block shape: LeNet's two layers,
 *     rows of several vectors with ragged tails, kernels 1 to 7 wide,
 *     asymmetric padding, groups, channel counts that leave blocks of 4,
 *     2 and 1, and row counts that leave dead rows in a block;
 *   - an infinite input in a column that only the lanes past the output
 *     row would read must not turn other taps of dw into NaN;
 *   - the cases it must decline (kernel wider than 7, rows over 128,
 *     large layers, KEEL_CPU_CONV_SIMD=0, no workspace) return false and
 *     leave the output untouched.
 *
 * A body the CPU lacks cannot run: its suite says so and is not run, and
 * the program prints which bodies were left untested. With neither
 * AVX2 nor AVX-512F it exits 77 (meson's SKIP): declining is all such a
 * CPU can show.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>

#include "../kernels/kconv_simd.h"
#include "../kernels/kern.h"

/* ---- the plugin services the kernels use --------------------------------- */

static bool no_workspace;
static enum cpu_isa test_isa = CPU_ISA_SSE2; /* the plugin's SIMD level */

enum cpu_isa cpu_isa(void)
{
    return test_isa;
}

const char *cpu_getenv(const char *name)
{
    return getenv(name);
}

void *cpu_workspace(size_t bytes)
{
    return no_workspace ? NULL : malloc(bytes ? bytes : 1);
}

void cpu_parallel_for(int64_t n, int64_t grain, kpar_fn fn, void *ctx)
{
    (void)grain;
    for (int64_t i = 0; i < n; i++)
        fn(ctx, i, i + 1);
}

int cpu_pool_threads(void)
{
    return 3;
}

/* ---- reference ------------------------------------------------------------ */

struct gcase {
    const char *name;
    int64_t n, c, h, w, o, kh, kw, pt, pb, pl, pr, groups;
};

static struct conv_simd_geo geo_of(const struct gcase *k)
{
    struct conv_simd_geo g = {k->n,
                              k->c,
                              k->h,
                              k->w,
                              k->o,
                              k->h + k->pt + k->pb - k->kh + 1,
                              k->w + k->pl + k->pr - k->kw + 1,
                              k->kh,
                              k->kw,
                              k->pt,
                              k->pl,
                              k->groups,
                              NULL,
                              NULL};
    return g;
}

static uint64_t rng = 88172645463325252ull;

static float rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *rnd_buf(int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));

    for (int64_t i = 0; i < n; i++)
        p[i] = rnd();
    return p;
}

/* Every term x[n][c][iy][ix] * w[o][c'][i][j] of the conv, visited once:
 * fn(n, c, iy, ix, o, i, j, oy, ox). */
#define FOR_TERMS(g, BODY)                                                     \
    for (int64_t n = 0; n < (g).n; n++)                                        \
        for (int64_t o = 0; o < (g).o; o++)                                    \
            for (int64_t ci = 0; ci < (g).c / (g).groups; ci++)                \
                for (int64_t oy = 0; oy < (g).oh; oy++)                        \
                    for (int64_t ox = 0; ox < (g).ow; ox++)                    \
                        for (int64_t i = 0; i < (g).kh; i++)                   \
                            for (int64_t j = 0; j < (g).kw; j++) {             \
                                int64_t og = (g).o / (g).groups;               \
                                int64_t gc = (g).c / (g).groups;               \
                                int64_t c = o / og * gc + ci;                  \
                                int64_t iy = oy + i - (g).pt;                  \
                                int64_t ix = ox + j - (g).pl;                  \
                                if (iy < 0 || iy >= (g).h || ix < 0 ||         \
                                    ix >= (g).w)                               \
                                    continue;                                  \
                                int64_t xi =                                   \
                                    ((n * (g).c + c) * (g).h + iy) * (g).w +   \
                                    ix;                                        \
                                int64_t wi =                                   \
                                    ((o * gc + ci) * (g).kh + i) * (g).kw + j; \
                                int64_t yi =                                   \
                                    ((n * (g).o + o) * (g).oh + oy) * (g).ow + \
                                    ox;                                        \
                                BODY                                           \
                            }

/* |got - ref| within float rounding of a sum whose terms add up to
 * `mag` in absolute value; non-finite values must match in class. */
static bool close_to(float got, double ref, double mag)
{
    if (isnan(ref) || isnan(got))
        return isnan(ref) && isnan(got);
    if (isinf(ref) || isinf(got))
        return got == ref;
    return fabs(got - ref) <= 1e-5 * (mag + 1.0);
}

static int check(const char *what, const char *name, const float *got,
                 const double *ref, const double *mag, int64_t n)
{
    int bad = 0;

    for (int64_t i = 0; i < n; i++)
        if (!close_to(got[i], ref[i], mag[i])) {
            if (bad < 3)
                fprintf(stderr, "\n  %s %s [%lld]: %.9g, want %.9g", what,
                        name, (long long)i, got[i], ref[i]);
            bad++;
        }
    return bad;
}

static bool cpu_has(enum cpu_isa isa)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (isa == CPU_ISA_AVX512)
        return __builtin_cpu_supports("avx512f");
    if (isa == CPU_ISA_AVX2)
        return __builtin_cpu_supports("avx2") &&
               __builtin_cpu_supports("fma");
    return true;
#else
    return isa == CPU_ISA_SSE2;
#endif
}

/* Whether the level under test has a body: every call must then be
 * taken (or declined, at the SSE2 baseline). */
static bool have_simd(void)
{
    return test_isa != CPU_ISA_SSE2 && cpu_has(test_isa);
}

/* Reference sums start at the bias of each element's channel (bias of
 * `ch` channels over planes of `plane` elements; NULL: zero). */
static void ref_start(double *r, double *m, int64_t len, const float *b,
                      int64_t ch, int64_t plane)
{
    for (int64_t i = 0; i < len; i++) {
        double v = b ? b[i / plane % ch] : 0;
        r[i] = v, m[i] = fabs(v);
    }
}

/* The primitive ran where the level has a body (and only there), and then
 * agrees with the reference. */
static void expect_run(const char *what, const char *name, bool ran,
                       const float *got, const double *r, const double *m,
                       int64_t n)
{
    bool on = have_simd();

    CU_ASSERT_EQUAL(ran, on);
    if (on)
        CU_ASSERT_EQUAL(check(what, name, got, r, m, n), 0);
}

/* Runs the three primitives of one geometry and checks them. */
static void run_case(const struct gcase *k, bool bias)
{
    struct conv_simd_geo g = geo_of(k);
    int64_t cg = g.c / g.groups;
    int64_t nx = g.n * g.c * g.h * g.w, ny = g.n * g.o * g.oh * g.ow;
    int64_t nw = g.o * cg * g.kh * g.kw;
    float *x = rnd_buf(nx), *w = rnd_buf(nw), *dy = rnd_buf(ny);
    float *b = rnd_buf(g.o > g.c ? g.o : g.c);
    float *y = malloc((size_t)ny * sizeof(float));
    float *dx = malloc((size_t)nx * sizeof(float));
    float *dw = malloc((size_t)nw * sizeof(float));
    double *r = calloc((size_t)(nx + ny + nw), sizeof(double));
    double *m = calloc((size_t)(nx + ny + nw), sizeof(double));
    const float *bb = bias ? b : NULL;

    /* forward: y[o] = bias[o] + sum of x * w */
    ref_start(r, m, ny, bb, g.o, g.oh * g.ow);
    FOR_TERMS(g, {
        r[yi] += (double)x[xi] * w[wi];
        m[yi] += fabs((double)x[xi] * w[wi]);
    })
    expect_run("fwd", k->name,
               cpu_conv_simd(CONV_SIMD_FWD, &g, x, w, bb, NULL, y), y, r, m,
               ny);

    /* backward data: dx[c] = bias[c] + sum of w * dy */
    ref_start(r, m, nx, bb, g.c, g.h * g.w);
    FOR_TERMS(g, {
        r[xi] += (double)dy[yi] * w[wi];
        m[xi] += fabs((double)dy[yi] * w[wi]);
    })
    expect_run("bwd_data", k->name,
               cpu_conv_simd(CONV_SIMD_BWD_DATA, &g, NULL, w, bb, dy, dx), dx,
               r, m, nx);

    /* backward filter */
    ref_start(r, m, nw, NULL, 1, 1);
    FOR_TERMS(g, {
        r[wi] += (double)dy[yi] * x[xi];
        m[wi] += fabs((double)dy[yi] * x[xi]);
    })
    expect_run("bwd_filter", k->name,
               cpu_conv_simd(CONV_SIMD_BWD_FILTER, &g, x, NULL, NULL, dy, dw),
               dw, r, m, nw);
    free(x), free(w), free(dy), free(b), free(y), free(dx), free(dw);
    free(r), free(m);
}

/* name, n c h w, o kh kw, pad top bottom left right, groups */
static const struct gcase cases[] = {
    {"lenet conv1", 3, 1, 28, 28, 6, 5, 5, 2, 2, 2, 2, 1},
    {"lenet conv2", 5, 6, 14, 14, 16, 5, 5, 0, 0, 0, 0, 1},
    {"3 vectors per row, kw 7", 2, 3, 9, 37, 5, 3, 7, 1, 2, 3, 1, 1},
    {"groups 2, kw 6, right pad only", 2, 4, 7, 20, 6, 3, 6, 2, 0, 0, 5, 2},
    {"7 channels (4+2+1), 13 rows", 2, 2, 13, 16, 7, 3, 3, 1, 1, 1, 1, 1},
    {"depthwise", 3, 5, 6, 17, 5, 3, 3, 1, 1, 1, 1, 5},
    {"1x1", 2, 3, 4, 5, 3, 1, 1, 0, 0, 0, 0, 1},
    {"kernel 2x4, pad top kh-1", 2, 3, 5, 9, 4, 2, 4, 1, 0, 2, 1, 1},
    {"one output row, 128 wide", 1, 2, 3, 128, 3, 3, 3, 0, 0, 1, 1, 1},
    {"kw 1..7 sweep: 1", 2, 2, 6, 19, 5, 2, 1, 0, 1, 0, 0, 1},
    {"kw 1..7 sweep: 2", 2, 2, 6, 19, 5, 2, 2, 0, 1, 1, 0, 1},
    {"kw 1..7 sweep: 4", 2, 2, 6, 19, 5, 2, 4, 0, 1, 1, 2, 1},
    {"kw 1..7 sweep: 6", 2, 2, 6, 19, 5, 2, 6, 0, 1, 3, 2, 1},
    {"9 images over 3 parts", 9, 2, 8, 8, 4, 5, 5, 2, 2, 2, 2, 1},
    /* no horizontal padding: unmasked loads (all but the last image) */
    {"no padding, two whole vectors", 4, 2, 5, 36, 3, 3, 5, 0, 0, 0, 0, 1},
    {"no padding, 3 vectors, ragged", 4, 2, 4, 40, 5, 2, 3, 1, 0, 0, 0, 1},
    {"no padding, groups", 5, 4, 6, 9, 6, 3, 4, 0, 1, 0, 0, 2},
};

static void test_geometries(void)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        run_case(&cases[i], true);
        run_case(&cases[i], false);
    }
}

/* LeNet conv2 (ow 10 of 14 input columns): x[.., 13] = inf is a valid
 * term only for tap j = 4 (ox 9); the lanes ox 10 .. 13 of taps 0 .. 3
 * also reach it, and must not bring 0 * inf = NaN into those taps. Ten
 * images over three parts: the first parts' images take the unmasked
 * loads, the last one's the masked ones. */
static void test_junk_lanes(void)
{
    struct gcase k = {"inf", 10, 1, 14, 14, 2, 5, 5, 0, 0, 0, 0, 1};
    struct conv_simd_geo g = geo_of(&k);
    float *x = rnd_buf(10 * 14 * 14), *dy = rnd_buf(10 * 2 * 10 * 10), dw[50];

    if (!have_simd()) {
        CU_ASSERT_FALSE(cpu_conv_simd(CONV_SIMD_BWD_FILTER, &g, x, NULL,
                                      NULL, dy, dw));
        free(x), free(dy);
        return;
    }
    for (int iy = 0; iy < 10 * 14; iy++)
        x[iy * 14 + 13] = INFINITY;
    CU_ASSERT_TRUE_FATAL(
        cpu_conv_simd(CONV_SIMD_BWD_FILTER, &g, x, NULL, NULL, dy, dw));
    for (int o = 0; o < 2; o++)
        for (int t = 0; t < 25; t++) {
            bool last = t % 5 == 4;
            CU_ASSERT_EQUAL(isfinite(dw[o * 25 + t]) != 0, !last);
        }
    free(x), free(dy);
}

/* Geometries and settings the direct path must decline, output intact. */
static void test_declines(void)
{
    struct gcase big[] = {
        {"kw 8", 1, 2, 6, 20, 3, 3, 8, 0, 0, 0, 0, 1},
        {"129 columns", 1, 2, 4, 129, 3, 3, 3, 0, 0, 1, 1, 1},
        {"33 output channels", 1, 2, 6, 6, 33, 3, 3, 1, 1, 1, 1, 1},
        {"c*kh*kw 270", 1, 30, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1},
        {"padding as large as the kernel", 1, 1, 6, 6, 2, 3, 3, 3, 3, 0, 0,
         1},
    };
    struct gcase ok = cases[1];
    struct conv_simd_geo g;
    float *x = rnd_buf(8 * 30 * 6 * 129), *w = rnd_buf(33 * 30 * 9 * 8);
    float *out = malloc(8 * 33 * 6 * 129 * sizeof(float));

    for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
        g = geo_of(&big[i]);
        out[0] = 42.0f;
        for (int p = 0; p < 3; p++)
            CU_ASSERT_FALSE(cpu_conv_simd(p, &g, x, w, NULL, x, out));
        CU_ASSERT_EQUAL(out[0], 42.0f);
    }
    g = geo_of(&ok);
    setenv("KEEL_CPU_CONV_SIMD", "0", 1);
    for (int p = 0; p < 3; p++)
        CU_ASSERT_FALSE(cpu_conv_simd(p, &g, x, w, NULL, x, out));
    unsetenv("KEEL_CPU_CONV_SIMD");
    no_workspace = true;
    for (int p = 0; p < 3; p++)
        CU_ASSERT_FALSE(cpu_conv_simd(p, &g, x, w, NULL, x, out));
    no_workspace = false;
    CU_ASSERT_EQUAL(out[0], 42.0f);
    CU_ASSERT_EQUAL(cpu_conv_simd(CONV_SIMD_FWD, &g, x, w, NULL, NULL, out),
                    have_simd());
    free(x), free(w), free(out);
}

static void set_avx512(void)
{
    test_isa = CPU_ISA_AVX512;
}
static void set_avx2(void)
{
    test_isa = CPU_ISA_AVX2;
}
static void set_sse2(void)
{
    test_isa = CPU_ISA_SSE2;
}

static int add_suite(const char *name, enum cpu_isa isa, void (*set)(void))
{
    CU_pSuite s;

    if (isa != CPU_ISA_SSE2 && !cpu_has(isa)) {
        printf("cpu-conv-simd: NOT RUN: the %s body (this CPU lacks it)\n",
               name);
        return 0;
    }
    s = CU_add_suite(name, NULL, NULL);
    if (!s || !CU_add_test(s, "set the SIMD level", set) ||
        !CU_add_test(s, "geometries against a double reference",
                     test_geometries) ||
        !CU_add_test(s, "lanes past the row never meet an infinity",
                     test_junk_lanes) ||
        !CU_add_test(s, "declined geometries and settings", test_declines))
        return -1;
    return 1;
}

int main(void)
{
    unsigned fails;
    int bodies = 0, r;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    if ((r = add_suite("avx512", CPU_ISA_AVX512, set_avx512)) < 0)
        goto fail;
    bodies += r;
    if ((r = add_suite("avx2", CPU_ISA_AVX2, set_avx2)) < 0)
        goto fail;
    bodies += r;
    /* the baseline: every call declines */
    if (add_suite("sse2 (declines)", CPU_ISA_SSE2, set_sse2) < 0)
        goto fail;
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    if (fails)
        return 1;
    if (!bodies) {
        printf("\ncpu-conv-simd: SKIP: this CPU has neither AVX2 + FMA nor "
               "AVX-512F, so the direct convolution kernels never ran; only "
               "their declining every call was checked. Run it on a CPU "
               "with AVX2 (grep avx2 /proc/cpuinfo) to test them.\n");
        return 77;
    }
    return 0;
fail:
    CU_cleanup_registry();
    return 1;
}
