/*
 * Tensor core tests: creation, views, readback, device copies, casts,
 * printing, the caching allocator's statistics, the seeded generator, and
 * the dispatcher's error messages.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/philox.h>

#include "optest.h"

static void test_from_host_roundtrip(void)
{
    for (int k = 0; k < 9; k++) {
        keel_dtype dt = ot_all_dtypes[k];
        int64_t shape[3] = {2, 3, 4};
        double v[24], *back;
        keel_tensor *t;

        for (int i = 0; i < 24; i++)
            v[i] = dt == KEEL_BOOL ? (i % 3 == 0) : (double)(i - 7);
        if (dt == KEEL_U8)
            for (int i = 0; i < 24; i++)
                v[i] = i;
        t = ot_from(dt, 3, shape, v);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        CU_ASSERT_EQUAL(keel_tensor_dtype(t), dt);
        CU_ASSERT_EQUAL(keel_tensor_ndim(t), 3);
        CU_ASSERT_EQUAL(keel_tensor_numel(t), 24);
        CU_ASSERT_TRUE(keel_tensor_is_contiguous(t));
        CU_ASSERT_EQUAL(keel_tensor_strides(t)[0], 12);
        back = ot_host(t);
        CU_ASSERT_PTR_NOT_NULL_FATAL(back);
        CU_ASSERT_EQUAL(memcmp(back, v, sizeof(v)), 0);
        free(back);
        keel_tensor_free(t);
    }
}

static void test_scalar_and_empty(void)
{
    double one = 3.5, got = 0;
    int64_t zero_shape[2] = {0, 5};
    keel_tensor *s = ot_from(KEEL_F32, 0, NULL, &one), *e = NULL;
    float buf[1];

    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(keel_tensor_ndim(s), 0);
    CU_ASSERT_EQUAL(keel_tensor_numel(s), 1);
    CU_ASSERT_EQUAL(keel_tensor_item(s, 0, &got), KEEL_STATUS_OK);
    CU_ASSERT_DOUBLE_EQUAL(got, 3.5, 0);
    CU_ASSERT_EQUAL(keel_zeros(2, zero_shape, KEEL_F32, NULL, &e),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_numel(e), 0);
    CU_ASSERT_EQUAL(keel_tensor_to_host(e, NULL, 0), KEEL_STATUS_OK);
    /* Wrong buffer size is an error naming both sizes. */
    OT_EXPECT_ERROR(keel_tensor_to_host(s, buf, 8),
                    KEEL_STATUS_INVALID_ARGUMENT, "needs 4 bytes");
    keel_tensor_free(s);
    keel_tensor_free(e);
}

static void test_creation_ops(void)
{
    keel_tensor *t = NULL;
    int64_t shape[2] = {3, 4};
    double *v;

    CU_ASSERT_EQUAL_FATAL(keel_full(2, shape, KEEL_I32, -7, NULL, &t),
                          KEEL_STATUS_OK);
    v = ot_host(t);
    for (int i = 0; i < 12; i++)
        CU_ASSERT_EQUAL(v[i], -7);
    free(v);
    keel_tensor_free(t);

    CU_ASSERT_EQUAL_FATAL(keel_ones(2, shape, KEEL_BF16, NULL, &t),
                          KEEL_STATUS_OK);
    v = ot_host(t);
    for (int i = 0; i < 12; i++)
        CU_ASSERT_EQUAL(v[i], 1);
    free(v);
    keel_tensor_free(t);

    CU_ASSERT_EQUAL_FATAL(keel_arange(2, 11, 3, KEEL_I64, NULL, &t),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_numel(t), 3);
    v = ot_host(t);
    CU_ASSERT(v[0] == 2 && v[1] == 5 && v[2] == 8);
    free(v);
    keel_tensor_free(t);

    CU_ASSERT_EQUAL_FATAL(keel_arange(1, 0, -0.25, KEEL_F32, NULL, &t),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_numel(t), 4);
    v = ot_host(t);
    CU_ASSERT(v[0] == 1 && v[3] == 0.25);
    free(v);
    keel_tensor_free(t);

    CU_ASSERT_EQUAL_FATAL(keel_linspace(-1, 1, 5, KEEL_F64, NULL, &t),
                          KEEL_STATUS_OK);
    v = ot_host(t);
    CU_ASSERT(v[0] == -1 && v[2] == 0 && v[4] == 1 && v[1] == -0.5);
    free(v);
    keel_tensor_free(t);

    CU_ASSERT_EQUAL_FATAL(keel_eye(3, 4, KEEL_U8, NULL, &t), KEEL_STATUS_OK);
    v = ot_host(t);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            CU_ASSERT_EQUAL(v[i * 4 + j], i == j ? 1 : 0);
    free(v);
    keel_tensor_free(t);

    OT_EXPECT_ERROR(keel_arange(0, 1, 0, KEEL_F32, NULL, &t),
                    KEEL_STATUS_INVALID_ARGUMENT, "step must be non-zero");
    OT_EXPECT_ERROR(keel_zeros(2, (int64_t[]){2, -1}, KEEL_F32, NULL, &t),
                    KEEL_STATUS_INVALID_ARGUMENT, "negative");
    OT_EXPECT_ERROR(keel_zeros(1, shape, (keel_dtype)42, NULL, &t),
                    KEEL_STATUS_INVALID_ARGUMENT, "not a keel dtype");
    OT_EXPECT_ERROR(keel_zeros(1, shape, KEEL_F32, "npu:3", &t),
                    KEEL_STATUS_NOT_FOUND, "npu");
    OT_EXPECT_ERROR(keel_linspace(0, 1, -2, KEEL_F32, NULL, &t),
                    KEEL_STATUS_INVALID_ARGUMENT, "negative");
}

static void test_views_share_storage(void)
{
    int64_t shape[2] = {4, 6};
    keel_tensor *x = ot_rand(KEEL_F32, 2, shape, -1, 1);
    keel_tensor *t = NULL, *r = NULL, *s = NULL, *e = NULL, *u = NULL,
                *q = NULL, *f = NULL, *c = NULL;
    double *xv = ot_host(x), *v;

    /* transpose */
    CU_ASSERT_EQUAL_FATAL(keel_transpose(x, 0, 1, &t), KEEL_STATUS_OK);
    CU_ASSERT_TRUE(keel_tensor_shares_storage(x, t));
    CU_ASSERT_FALSE(keel_tensor_is_contiguous(t));
    CU_ASSERT_EQUAL(keel_tensor_shape(t)[0], 6);
    v = ot_host(t);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 4; j++)
            CU_ASSERT_EQUAL(v[i * 4 + j], xv[j * 6 + i]);
    free(v);
    /* reshape of a contiguous tensor is a view; of a transpose, a copy */
    CU_ASSERT_EQUAL(keel_reshape(x, 3, (int64_t[]){2, -1, 3}, &r),
                    KEEL_STATUS_OK);
    CU_ASSERT_TRUE(keel_tensor_shares_storage(x, r));
    CU_ASSERT_EQUAL(keel_tensor_shape(r)[1], 4);
    keel_tensor_free(r);
    CU_ASSERT_EQUAL(keel_reshape(t, 1, (int64_t[]){24}, &r), KEEL_STATUS_OK);
    CU_ASSERT_FALSE(keel_tensor_shares_storage(x, r));
    v = ot_host(r);
    CU_ASSERT_EQUAL(v[1], xv[6]);
    free(v);
    keel_tensor_free(r);
    /* a transposed view split on a compatible axis stays a view */
    CU_ASSERT_EQUAL(keel_reshape(t, 3, (int64_t[]){2, 3, 4}, &r),
                    KEEL_STATUS_OK);
    CU_ASSERT_TRUE(keel_tensor_shares_storage(x, r));
    v = ot_host(r);
    CU_ASSERT_EQUAL(v[1 * 12 + 2 * 4 + 3], xv[3 * 6 + 5]);
    free(v);
    keel_tensor_free(r);
    /* slice with a negative step */
    CU_ASSERT_EQUAL_FATAL(keel_slice(x, 1, -1, -100, -2, &s), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_shape(s)[1], 3);
    v = ot_host(s);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            CU_ASSERT_EQUAL(v[i * 3 + j], xv[i * 6 + 5 - 2 * j]);
    free(v);
    /* empty slice */
    CU_ASSERT_EQUAL(keel_slice(x, 0, 3, 1, 1, &q), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_numel(q), 0);
    keel_tensor_free(q);
    /* expand, unsqueeze, squeeze, flatten */
    CU_ASSERT_EQUAL_FATAL(keel_unsqueeze(x, 0, &u), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_ndim(u), 3);
    CU_ASSERT_EQUAL_FATAL(keel_expand(u, 3, (int64_t[]){5, -1, -1}, &e),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_strides(e)[0], 0);
    v = ot_host(e);
    CU_ASSERT_EQUAL(v[4 * 24 + 13], xv[13]);
    free(v);
    CU_ASSERT_EQUAL(keel_squeeze(u, 0, NULL, &q), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_ndim(q), 2);
    keel_tensor_free(q);
    CU_ASSERT_EQUAL(keel_flatten(e, 1, 2, &f), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_shape(f)[1], 24);
    CU_ASSERT_TRUE(keel_tensor_shares_storage(x, f));
    /* contiguous copies only when needed */
    CU_ASSERT_EQUAL(keel_contiguous(x, &c), KEEL_STATUS_OK);
    CU_ASSERT_PTR_EQUAL(c, x);
    keel_tensor_free(c);
    CU_ASSERT_EQUAL(keel_contiguous(s, &c), KEEL_STATUS_OK);
    CU_ASSERT_TRUE(keel_tensor_is_contiguous(c));
    CU_ASSERT_FALSE(keel_tensor_shares_storage(c, s));
    keel_tensor_free(c);
    /* errors */
    OT_EXPECT_ERROR(keel_reshape(x, 1, (int64_t[]){25}, &q),
                    KEEL_STATUS_INVALID_ARGUMENT, "24 elements");
    OT_EXPECT_ERROR(keel_transpose(x, 0, 2, &q),
                    KEEL_STATUS_INVALID_ARGUMENT, "out of range");
    OT_EXPECT_ERROR(keel_expand(x, 2, (int64_t[]){4, 7}, &q),
                    KEEL_STATUS_INVALID_ARGUMENT, "cannot be broadcast");
    OT_EXPECT_ERROR(keel_slice(x, 0, 0, 4, 0, &q),
                    KEEL_STATUS_INVALID_ARGUMENT, "step is 0");
    OT_EXPECT_ERROR(keel_permute(x, (int[]){0, 0}, &q),
                    KEEL_STATUS_INVALID_ARGUMENT, "repeated");
    free(xv);
    keel_tensor_free(x);
    keel_tensor_free(t);
    keel_tensor_free(s);
    keel_tensor_free(u);
    keel_tensor_free(e);
    keel_tensor_free(f);
}

static void test_layouts_helper(void)
{
    int64_t shape[3] = {2, 3, 5};
    keel_tensor *x = ot_rand(KEEL_F64, 3, shape, -3, 3);
    double *xv = ot_host(x);

    for (int l = 0; l < 3; l++) {
        keel_tensor *y = ot_layout(x, (enum ot_layout)l);
        CU_ASSERT_PTR_NOT_NULL_FATAL(y);
        CU_ASSERT_EQUAL(keel_tensor_is_contiguous(y), l == OT_CONTIG);
        ot_check("layout", y, xv, KEEL_F64);
        keel_tensor_free(y);
    }
    free(xv);
    keel_tensor_free(x);
}

static void test_to_other_device(void)
{
    int64_t shape[2] = {3, 3};
    keel_tensor *x = ot_rand(KEEL_F32, 2, shape, 0, 1), *y = NULL, *z = NULL;
    double *xv = ot_host(x);
    char name[32];

    CU_ASSERT_EQUAL_FATAL(keel_tensor_to(x, "cpu:1", &y), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_place_name(keel_tensor_place(y), name, sizeof(name)),
                    KEEL_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(name, "cpu:1");
    ot_check("to cpu:1", y, xv, KEEL_F32);
    /* Same place: a new reference, no copy. */
    CU_ASSERT_EQUAL(keel_tensor_to(y, "cpu:1", &z), KEEL_STATUS_OK);
    CU_ASSERT_PTR_EQUAL(z, y);
    keel_tensor_free(z);
    /* Ops refuse mixed devices, naming both. */
    OT_EXPECT_ERROR(keel_add(x, y, &z), KEEL_STATUS_INVALID_ARGUMENT,
                    "mismatched devices");
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "cpu:1"));
    free(xv);
    keel_tensor_free(x);
    keel_tensor_free(y);
}

static void test_casts(void)
{
    static const double vals[] = {0,    1,     -1,     2.5,   -2.5,  127.9,
                                  -128, 255.5, 300,    65504, 1e-8,  -0.0,
                                  3.14159265358979, 1e20, -1e20, 0.1};
    int n = sizeof(vals) / sizeof(vals[0]);
    int64_t shape[1] = {n};

    for (int a = 0; a < 4; a++) {
        keel_tensor *x = ot_from(ot_float_dtypes[a], 1, shape, vals);
        double *xv = ot_host(x);
        for (int b = 0; b < 9; b++) {
            keel_dtype to = ot_all_dtypes[b];
            keel_tensor *y = NULL;
            double ref[16];
            CU_ASSERT_EQUAL_FATAL(keel_cast(x, to, &y), KEEL_STATUS_OK);
            for (int i = 0; i < n; i++) {
                double v = xv[i];
                switch (to) {
                case KEEL_BOOL:
                    ref[i] = v != 0;
                    break;
                case KEEL_I8:
                    ref[i] = v < -128 ? -128 : v > 127 ? 127 : trunc(v);
                    break;
                case KEEL_U8:
                    ref[i] = v < 0 ? 0 : v > 255 ? 255 : trunc(v);
                    break;
                case KEEL_I32:
                    ref[i] = v < -2147483648.0 ? -2147483648.0
                             : v > 2147483647.0 ? 2147483647.0
                                                : trunc(v);
                    break;
                case KEEL_I64:
                    ref[i] = v < -9223372036854775808.0
                                 ? -9223372036854775808.0
                             : v > 9223372036854774784.0
                                 ? 9223372036854774784.0
                                 : trunc(v);
                    break;
                default:
                    ref[i] = ot_round(v, to);
                }
            }
            ot_check("cast", y, ref, to == KEEL_BOOL ? KEEL_BOOL : to);
            keel_tensor_free(y);
        }
        free(xv);
        keel_tensor_free(x);
    }
}

static void test_f16_bf16_rounding(void)
{
    /* Round to nearest even at the halfway points, and overflow to inf. */
    double in[5] = {1.0 + 1.0 / 2048, 1.0 + 3.0 / 2048, 65520, 1.0 + 1.0 / 256,
                    1.0 + 3.0 / 256};
    double h_ref[5] = {1.0, 1.0 + 4.0 / 2048, INFINITY, 1.0 + 1.0 / 256,
                       1.0 + 3.0 / 256};
    double b_ref[5] = {1.0, 1.0, 65536, 1.0, 1.0 + 4.0 / 256};
    int64_t shape[1] = {5};
    keel_tensor *x = ot_from(KEEL_F64, 1, shape, in), *h = NULL, *b = NULL;

    CU_ASSERT_EQUAL_FATAL(keel_cast(x, KEEL_F16, &h), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_cast(x, KEEL_BF16, &b), KEEL_STATUS_OK);
    {
        double *hv = ot_host(h), *bv = ot_host(b);
        for (int i = 0; i < 5; i++) {
            CU_ASSERT_EQUAL(hv[i], h_ref[i]);
            CU_ASSERT_EQUAL(bv[i], b_ref[i]);
        }
        free(hv);
        free(bv);
    }
    keel_tensor_free(x);
    keel_tensor_free(h);
    keel_tensor_free(b);
}

static void test_printing(void)
{
    int64_t shape[2] = {2, 9};
    keel_tensor *t = NULL;
    char buf[512];
    int n;

    CU_ASSERT_EQUAL_FATAL(keel_arange(0, 18, 1, KEEL_I64, NULL, &t),
                          KEEL_STATUS_OK);
    {
        keel_tensor *r = NULL;
        CU_ASSERT_EQUAL_FATAL(keel_reshape(t, 2, shape, &r), KEEL_STATUS_OK);
        keel_tensor_free(t);
        t = r;
    }
    n = keel_tensor_format(t, buf, sizeof(buf));
    CU_ASSERT(n > 0 && (size_t)n < sizeof(buf));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "shape=[2, 9]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "dtype=int64"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "place=cpu:0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "[[0, 1, 2, ..., 6, 7, 8]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "[9, 10, 11, ..., 15, 16, 17]]"));
    /* Truncation reports the needed length like snprintf. */
    CU_ASSERT_EQUAL(keel_tensor_format(t, buf, 10), n);
    CU_ASSERT_EQUAL(strlen(buf), 9);
    keel_tensor_free(t);
}

static void test_allocator_stats(void)
{
    keel_memory_stats s0, s1, s2, s3;
    int64_t shape[1] = {1000};
    keel_tensor *a = NULL, *b = NULL;

    CU_ASSERT_EQUAL_FATAL(keel_memory_empty_cache(NULL), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_memory_stats_get(NULL, &s0), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_empty(1, shape, KEEL_F32, NULL, &a), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_memory_stats_get(NULL, &s1), KEEL_STATUS_OK);
    /* 4000 bytes round up to a 4096-byte class. */
    CU_ASSERT_EQUAL(s1.allocated - s0.allocated, 4096);
    CU_ASSERT(s1.reserved >= s0.reserved + 4096);
    CU_ASSERT(s1.peak_allocated >= s1.allocated);
    keel_tensor_free(a);
    /* Freed memory stays reserved, and the next request of the class
     * is served from the cache. */
    CU_ASSERT_EQUAL(keel_memory_stats_get(NULL, &s2), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(s2.allocated, s0.allocated);
    CU_ASSERT_EQUAL(s2.reserved, s1.reserved);
    CU_ASSERT_EQUAL(keel_empty(1, shape, KEEL_F32, NULL, &b), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_memory_stats_get(NULL, &s3), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(s3.cache_hits, s2.cache_hits + 1);
    CU_ASSERT_EQUAL(s3.plugin_allocs, s2.plugin_allocs);
    keel_tensor_free(b);
    CU_ASSERT_EQUAL(keel_memory_empty_cache(NULL), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_memory_stats_get(NULL, &s3), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(s3.reserved, s0.reserved);
    CU_ASSERT(s3.plugin_frees > s2.plugin_frees);
    CU_ASSERT_EQUAL(keel_memory_reset_peak(NULL), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_memory_stats_get(NULL, &s3), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(s3.peak_allocated, s3.allocated);
    OT_EXPECT_ERROR(keel_memory_stats_get("cpu:9", &s3),
                    KEEL_STATUS_INVALID_DEVICE, "cpu:9");
}

static void test_rng_reproducible(void)
{
    int64_t shape[1] = {4099};
    keel_tensor *a = NULL, *b = NULL, *c = NULL, *n = NULL, *r = NULL;
    double *av, *bv, *cv, *nv, *rv, mean = 0, var = 0;

    keel_seed(42);
    CU_ASSERT_EQUAL_FATAL(keel_rand(1, shape, KEEL_F32, NULL, &a),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_randn(1, shape, KEEL_F64, NULL, &n),
                          KEEL_STATUS_OK);
    keel_seed(42);
    CU_ASSERT_EQUAL_FATAL(keel_rand(1, shape, KEEL_F32, "cpu:1", &b),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_rand(1, shape, KEEL_F32, NULL, &c),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_randint(-3, 4, 1, shape, KEEL_I32, NULL, &r),
                          KEEL_STATUS_OK);
    av = ot_host(a);
    bv = ot_host(b);
    cv = ot_host(c);
    nv = ot_host(n);
    rv = ot_host(r);
    /* Same seed: same numbers on another device; the next draw differs. */
    CU_ASSERT_EQUAL(memcmp(av, bv, sizeof(double) * 4099), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(av, cv, sizeof(double) * 4099), 0);
    for (int i = 0; i < 4099; i++) {
        CU_ASSERT(av[i] >= 0 && av[i] < 1);
        CU_ASSERT(rv[i] >= -3 && rv[i] < 4 && rv[i] == floor(rv[i]));
        mean += nv[i];
    }
    mean /= 4099;
    for (int i = 0; i < 4099; i++)
        var += (nv[i] - mean) * (nv[i] - mean);
    var /= 4098;
    CU_ASSERT(fabs(mean) < 0.06);
    CU_ASSERT(fabs(var - 1) < 0.08);
    /* The first value is Philox's, by the documented mapping. */
    {
        uint32_t w[4];
        keel_philox_block(42, 0, w);
        CU_ASSERT_EQUAL(av[0], (double)keel_philox_u01(w[0]));
        CU_ASSERT_EQUAL(av[3], (double)keel_philox_u01(w[3]));
    }
    free(av);
    free(bv);
    free(cv);
    free(nv);
    free(rv);
    keel_tensor_free(a);
    keel_tensor_free(b);
    keel_tensor_free(c);
    keel_tensor_free(n);
    keel_tensor_free(r);
}

static void test_bernoulli(void)
{
    int64_t shape[1] = {2000};
    double p[2000];
    keel_tensor *pt, *s = NULL;
    double *sv;
    int ones_lo = 0, ones_hi = 0;

    for (int i = 0; i < 2000; i++)
        p[i] = i < 1000 ? 0.1 : 0.9;
    pt = ot_from(KEEL_F32, 1, shape, p);
    CU_ASSERT_EQUAL_FATAL(keel_bernoulli(pt, &s), KEEL_STATUS_OK);
    sv = ot_host(s);
    for (int i = 0; i < 2000; i++) {
        CU_ASSERT(sv[i] == 0 || sv[i] == 1);
        if (i < 1000)
            ones_lo += sv[i] == 1;
        else
            ones_hi += sv[i] == 1;
    }
    CU_ASSERT(ones_lo > 60 && ones_lo < 140);
    CU_ASSERT(ones_hi > 860 && ones_hi < 940);
    free(sv);
    keel_tensor_free(pt);
    keel_tensor_free(s);
}

static void test_dispatch_errors(void)
{
    int64_t shape[1] = {4};
    keel_tensor *x = ot_rand(KEEL_F32, 1, shape, 0, 1), *o[2] = {NULL, NULL};
    keel_attr bad = keel_attr_int("no_such_attr", 1);
    keel_attr wrong = keel_attr_str("value", "x");
    keel_op_id id;
    int n = 0;

    OT_EXPECT_ERROR(keel_op_run(KEEL_OP_COPY, &x, 1, &bad, 1, o, 2, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "unknown attribute");
    OT_EXPECT_ERROR(keel_op_run(KEEL_OP_FULL, NULL, 0, &wrong, 1, o, 2, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "must be float");
    OT_EXPECT_ERROR(keel_op_run(KEEL_OP_FULL, NULL, 0, NULL, 0, o, 2, &n),
                    KEEL_STATUS_INVALID_ARGUMENT,
                    "required attribute 'shape'");
    OT_EXPECT_ERROR(keel_op_run((keel_op_id)9999, &x, 1, NULL, 0, o, 2, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "not an op");
    OT_EXPECT_ERROR(keel_op_run(KEEL_OP_COPY, NULL, 1, NULL, 0, o, 2, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "bad input list");
    CU_ASSERT_EQUAL(keel_op_find("layer_norm", &id), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(id, KEEL_OP_LAYER_NORM);
    OT_EXPECT_ERROR(keel_op_find("fused_magic", &id), KEEL_STATUS_NOT_FOUND,
                    "fused_magic");
    keel_tensor_free(x);
}

int main(void)
{
    static const ot_test tests[] = {
        {"from_host round trip, every dtype", test_from_host_roundtrip},
        {"scalars and empty tensors", test_scalar_and_empty},
        {"creation ops", test_creation_ops},
        {"views share storage", test_views_share_storage},
        {"layout helper", test_layouts_helper},
        {"copy to another device", test_to_other_device},
        {"casts between all dtypes", test_casts},
        {"f16/bf16 rounding", test_f16_bf16_rounding},
        {"printing", test_printing},
        {"caching allocator statistics", test_allocator_stats},
        {"seeded generator", test_rng_reproducible},
        {"bernoulli", test_bernoulli},
        {"dispatch errors", test_dispatch_errors},
    };
    return ot_main("tensor", tests, sizeof(tests) / sizeof(tests[0]));
}
