/*
 * The npu plugin's nn kernels (npu_kernels_nn.c) over the stand-in ACL,
 * which serves as libopapi.so too (meson test npu-nn-standin). Strict
 * mode: a kernel the plugin refuses is an error, not a CPU fallback, so
 * every result below came from the plugin's aclnn call.
 *
 *   - linear (with and without a bias, 2-D and 3-D x), conv2d,
 *     conv2d_grad, conv2d_transpose and its gradient, avg_pool2d
 *     (exclusive and inclusive divisors), avg_pool2d_grad,
 *     adaptive_avg_pool2d and its gradient give results worked out by
 *     hand here;
 *   - configurations aclnn cannot express answer NOT_SUPPORTED: linear
 *     over an N-D x that is no single GEMM, conv2d with padding that
 *     differs between top and bottom, avg_pool2d with asymmetric
 *     padding, and max_pool2d, which the plugin does not offer;
 *   - an aclnn failure injected into phase 1 (refusal: NOT_SUPPORTED) or
 *     phase 2 (DEVICE_ERROR) reaches the caller naming the aclnn call.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>
#include <keel/ops.h>
#include <keel/runtime.h>
#include <keel/tensor.h>

typedef void (*fail_next_fn)(const char *name, int code);
static fail_next_fn fail_next;

static int nn_init(void)
{
    const char *lib = getenv("KEEL_NPU_ACL_LIBRARY");
    keel_place npu0;
    void *h;

    /* first use loads the plugins, and the plugin loads the stand-in */
    if (!lib || keel_place_parse("npu:0", &npu0) != KEEL_STATUS_OK)
        return -1;
    h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return -1;
    *(void **)&fail_next = dlsym(h, "acl_standin_fail_next");
    dlclose(h);
    return fail_next ? 0 : -1;
}

static keel_tensor *npu(const float *v, int ndim, const int64_t *shape)
{
    keel_tensor *t = NULL;

    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_floats(v, ndim, shape, KEEL_F32,
                                                  "npu:0", &t),
                          KEEL_STATUS_OK);
    return t;
}

/* t holds exactly want[0..n) */
static void expect(const keel_tensor *t, const float *want, int n)
{
    float got[16];
    bool same = true;

    CU_ASSERT_FATAL(n <= 16);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_to_host(t, got, (size_t)n * 4),
                          KEEL_STATUS_OK);
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) {
            printf("\n    element %d: got %g, want %g", i, got[i], want[i]);
            same = false;
        }
    CU_ASSERT(same);
}

static void expect_msg(const char *a, const char *b)
{
    const char *m = keel_last_error();

    printf("\n    %s\n", m);
    CU_ASSERT_PTR_NOT_NULL(strstr(m, a));
    if (b)
        CU_ASSERT_PTR_NOT_NULL(strstr(m, b));
}

/* x [1, 1, 3, 3] = 1..9 */
static const float x9[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
static const int64_t s1133[4] = {1, 1, 3, 3};

/* ---- linear ----------------------------------------------------------------- */

static void test_linear(void)
{
    static const float xv[6] = {1, 2, 3, 4, 5, 6};
    static const float wv[6] = {1, 0, 0, 1, 1, 1};
    static const float bv[2] = {10, 20};
    int64_t sx[2] = {2, 3}, sw[2] = {3, 2}, sb[1] = {2};
    keel_tensor *x = npu(xv, 2, sx), *w = npu(wv, 2, sw), *b = npu(bv, 1, sb);
    keel_tensor *y = NULL, *z = NULL;

    /* [[1,2,3],[4,5,6]] @ [[1,0],[0,1],[1,1]] = [[4,5],[10,11]] */
    CU_ASSERT_EQUAL_FATAL(keel_linear(x, w, b, &y), KEEL_STATUS_OK);
    expect(y, (const float[]){14, 25, 20, 31}, 4);
    CU_ASSERT_EQUAL_FATAL(keel_linear(x, w, NULL, &z), KEEL_STATUS_OK);
    expect(z, (const float[]){4, 5, 10, 11}, 4);
    keel_tensor_free(z);
    z = NULL;
    /* x [2, 1, 3]: the batch dim folds into the rows of one GEMM */
    {
        static const float x12[12] = {0};
        int64_t s3[3] = {2, 1, 3}, s4[3] = {2, 2, 3};
        keel_tensor *x3 = npu(xv, 3, s3), *x4 = npu(x12, 3, s4), *xt = NULL;
        CU_ASSERT_EQUAL_FATAL(keel_linear(x3, w, b, &z), KEEL_STATUS_OK);
        expect(z, (const float[]){14, 25, 20, 31}, 4);
        keel_tensor_free(z);
        z = NULL;
        /* [2, 2, 3] with its first two dims swapped: rows 6 apart within
         * a batch, batches 3 apart: no single GEMM view, refused */
        CU_ASSERT_EQUAL_FATAL(keel_transpose(x4, 0, 1, &xt), KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(keel_linear(xt, w, b, &z), KEEL_STATUS_NOT_SUPPORTED);
        expect_msg("linear", "fold");
        keel_tensor_free(xt);
        keel_tensor_free(x3);
        keel_tensor_free(x4);
        z = NULL;
    }
    /* phase 1 refused (aclnnAddmm): NOT_SUPPORTED, named */
    fail_next("aclnnAddmmGetWorkspaceSize", 161002);
    CU_ASSERT_EQUAL(keel_linear(x, w, b, &z), KEEL_STATUS_NOT_SUPPORTED);
    CU_ASSERT_PTR_NULL(z);
    expect_msg("aclnnAddmmGetWorkspaceSize", "aclnnStatus 161002");
    keel_tensor_free(x);
    keel_tensor_free(w);
    keel_tensor_free(b);
    keel_tensor_free(y);
}

/* ---- conv2d ----------------------------------------------------------------- */

/* w [1, 1, 2, 2] = [[1, 0], [0, 1]]: out[i][j] = x[i][j] + x[i+1][j+1] */
static const float wdiag[4] = {1, 0, 0, 1};
static const int64_t s1122[4] = {1, 1, 2, 2};

static void test_conv2d(void)
{
    static const float bv[1] = {0.5f};
    int64_t sb[1] = {1};
    keel_tensor *x = npu(x9, 4, s1133), *w = npu(wdiag, 4, s1122),
                *b = npu(bv, 1, sb), *y = NULL;
    keel_conv2d_params p = keel_conv2d_default_params();

    CU_ASSERT_EQUAL_FATAL(keel_conv2d(x, w, b, &p, &y), KEEL_STATUS_OK);
    expect(y, (const float[]){6.5f, 8.5f, 12.5f, 14.5f}, 4);
    keel_tensor_free(y);
    y = NULL;

    /* padding 1 on top only: aclnn has one padding per dim */
    p.npadding = 4;
    p.padding[0] = 1;
    p.padding[1] = 0;
    p.padding[2] = 0;
    p.padding[3] = 0;
    CU_ASSERT_EQUAL(keel_conv2d(x, w, b, &p, &y), KEEL_STATUS_NOT_SUPPORTED);
    CU_ASSERT_PTR_NULL(y);
    expect_msg("conv2d", "padding");

    /* phase 2 fails: DEVICE_ERROR, named */
    p = keel_conv2d_default_params();
    fail_next("aclnnConvolution", 561000);
    CU_ASSERT_EQUAL(keel_conv2d(x, w, b, &p, &y), KEEL_STATUS_DEVICE_ERROR);
    expect_msg("aclnnConvolution on npu:0", "aclnnStatus 561000");
    keel_tensor_free(y);
    keel_tensor_free(x);
    keel_tensor_free(w);
    keel_tensor_free(b);
}

static void test_conv2d_grad(void)
{
    static const float ones[4] = {1, 1, 1, 1};
    keel_tensor *in[3] = {npu(x9, 4, s1133), npu(wdiag, 4, s1122),
                          npu(ones, 4, s1122)};
    keel_tensor *out[3] = {NULL, NULL, NULL};
    keel_attr attrs[2] = {keel_attr_bool("has_bias", true),
                          keel_attr_bool("need_dx", true)};
    int nout = 0;

    CU_ASSERT_EQUAL_FATAL(keel_op_run(KEEL_OP_CONV2D_GRAD, in, 3, attrs, 2,
                                      out, 3, &nout),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(nout, 3);
    /* dx[h][w] = [h < 2 && w < 2] + [h >= 1 && w >= 1] */
    expect(out[0], (const float[]){1, 1, 0, 1, 2, 1, 0, 1, 1}, 9);
    /* dweight[kh][kw]: the 2x2 window sums of x at (kh, kw) */
    expect(out[1], (const float[]){12, 16, 24, 28}, 4);
    /* dbias: the sum of dout */
    expect(out[2], (const float[]){4}, 1);
    for (int i = 0; i < 3; i++) {
        keel_tensor_free(out[i]);
        out[i] = NULL;
    }
    /* without a bias gradient and dx: dweight only is asked for */
    attrs[0] = keel_attr_bool("has_bias", false);
    attrs[1] = keel_attr_bool("need_dx", false);
    CU_ASSERT_EQUAL_FATAL(keel_op_run(KEEL_OP_CONV2D_GRAD, in, 3, attrs, 2,
                                      out, 3, &nout),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(nout, 2);
    expect(out[1], (const float[]){12, 16, 24, 28}, 4);
    for (int i = 0; i < 3; i++)
        keel_tensor_free(out[i]);
    for (int i = 0; i < 3; i++)
        keel_tensor_free(in[i]);
}

static void test_conv2d_transpose(void)
{
    static const float xv[4] = {1, 2, 3, 4};
    int64_t s1122b[4] = {1, 1, 2, 2};
    keel_tensor *x = npu(xv, 4, s1122b), *w = npu(wdiag, 4, s1122), *y = NULL;
    keel_conv2d_params p = keel_conv2d_default_params();

    /* x scattered through [[1, 0], [0, 1]]: x at (0, 0) plus x at (1, 1) */
    CU_ASSERT_EQUAL_FATAL(keel_conv2d_transpose(x, w, NULL, &p, &y),
                          KEEL_STATUS_OK);
    expect(y, (const float[]){1, 2, 0, 3, 5, 2, 0, 3, 4}, 9);
    keel_tensor_free(y);

    /* its gradient for dout [1, 1, 3, 3] = 1..9 */
    {
        keel_tensor *in[3] = {x, w, npu(x9, 4, s1133)};
        keel_tensor *out[3] = {NULL, NULL, NULL};
        int nout = 0;

        CU_ASSERT_EQUAL_FATAL(keel_op_run(KEEL_OP_CONV2D_TRANSPOSE_GRAD, in, 3,
                                          NULL, 0, out, 3, &nout),
                              KEEL_STATUS_OK);
        CU_ASSERT_EQUAL_FATAL(nout, 3);
        /* dx[i][j] = dout[i][j] + dout[i+1][j+1] */
        expect(out[0], (const float[]){6, 8, 12, 14}, 4);
        /* dweight[kh][kw] = sum of x[i][j] * dout[i+kh][j+kw] */
        expect(out[1], (const float[]){37, 47, 67, 77}, 4);
        expect(out[2], (const float[]){45}, 1);
        for (int i = 0; i < 3; i++)
            keel_tensor_free(out[i]);
        keel_tensor_free(in[2]);
    }
    keel_tensor_free(x);
    keel_tensor_free(w);
}

/* ---- average pooling ---------------------------------------------------- */

static keel_status avg(keel_tensor *x, int64_t k, int64_t s, const int64_t *pad,
                       int npad, bool exclusive, keel_tensor **y)
{
    keel_attr attrs[4] = {keel_attr_ints("kernel_size", &k, 1),
                          keel_attr_ints("stride", &s, 1),
                          keel_attr_ints("padding", pad, npad),
                          keel_attr_bool("exclusive", exclusive)};
    int nout = 0;

    return keel_op_run(KEEL_OP_AVG_POOL2D, &x, 1, attrs, 4, y, 1, &nout);
}

static void test_avg_pool2d(void)
{
    keel_tensor *x = npu(x9, 4, s1133), *y = NULL;
    int64_t p0[2] = {0, 0}, p1[2] = {1, 1}, pa[4] = {1, 0, 1, 0};

    /* 2x2 windows, stride 1 */
    CU_ASSERT_EQUAL_FATAL(avg(x, 2, 1, p0, 2, true, &y), KEEL_STATUS_OK);
    expect(y, (const float[]){3, 4, 6, 7}, 4);
    keel_tensor_free(y);
    y = NULL;
    /* stride 2, padding 1: windows {1}, {2,3}, {4,7}, {5,6,8,9} */
    CU_ASSERT_EQUAL_FATAL(avg(x, 2, 2, p1, 2, true, &y), KEEL_STATUS_OK);
    expect(y, (const float[]){1, 2.5f, 5.5f, 7}, 4);
    keel_tensor_free(y);
    y = NULL;
    /* the same, padding counted: every window divides by 4 */
    CU_ASSERT_EQUAL_FATAL(avg(x, 2, 2, p1, 2, false, &y), KEEL_STATUS_OK);
    expect(y, (const float[]){0.25f, 1.25f, 2.75f, 7}, 4);
    keel_tensor_free(y);
    y = NULL;
    /* asymmetric padding: refused */
    CU_ASSERT_EQUAL(avg(x, 2, 2, pa, 4, true, &y), KEEL_STATUS_NOT_SUPPORTED);
    CU_ASSERT_PTR_NULL(y);
    expect_msg("avg_pool2d", "asymmetric");
    keel_tensor_free(x);
}

static void test_avg_pool2d_grad(void)
{
    static const float ones[4] = {1, 1, 1, 1};
    keel_tensor *in[2] = {npu(x9, 4, s1133), npu(ones, 4, s1122)};
    keel_tensor *dx = NULL;
    int64_t k = 2, s = 1, p[2] = {0, 0};
    keel_attr attrs[3] = {keel_attr_ints("kernel_size", &k, 1),
                          keel_attr_ints("stride", &s, 1),
                          keel_attr_ints("padding", p, 2)};
    int nout = 0;

    /* each input element gets 1/4 per window covering it */
    CU_ASSERT_EQUAL_FATAL(keel_op_run(KEEL_OP_AVG_POOL2D_GRAD, in, 2, attrs,
                                      3, &dx, 1, &nout),
                          KEEL_STATUS_OK);
    expect(dx, (const float[]){0.25f, 0.5f, 0.25f, 0.5f, 1, 0.5f, 0.25f,
                               0.5f, 0.25f},
           9);
    keel_tensor_free(dx);
    keel_tensor_free(in[0]);
    keel_tensor_free(in[1]);
}

static void test_adaptive_avg_pool2d(void)
{
    keel_tensor *x = npu(x9, 4, s1133), *y = NULL;
    int64_t osz[2] = {2, 1};
    keel_attr attrs[1] = {keel_attr_ints("output_size", osz, 2)};
    int nout = 0;

    /* rows [0, 2) and [1, 3), all columns: mean of 1..6 and of 4..9 */
    CU_ASSERT_EQUAL_FATAL(keel_op_run(KEEL_OP_ADAPTIVE_AVG_POOL2D, &x, 1,
                                      attrs, 1, &y, 1, &nout),
                          KEEL_STATUS_OK);
    expect(y, (const float[]){3.5f, 6.5f}, 2);
    keel_tensor_free(y);
    y = NULL;
    /* the gradient: each dout element spread over its 6-element window */
    {
        static const float dv[2] = {6, 12};
        int64_t sd[4] = {1, 1, 2, 1};
        keel_tensor *in[2] = {x, npu(dv, 4, sd)}, *dx = NULL;
        CU_ASSERT_EQUAL_FATAL(keel_op_run(KEEL_OP_ADAPTIVE_AVG_POOL2D_GRAD,
                                          in, 2, attrs, 1, &dx, 1, &nout),
                              KEEL_STATUS_OK);
        expect(dx, (const float[]){1, 1, 1, 3, 3, 3, 2, 2, 2}, 9);
        keel_tensor_free(dx);
        keel_tensor_free(in[1]);
    }
    /* phase 2 fails: named */
    fail_next("aclnnAdaptiveAvgPool2d", 507035);
    CU_ASSERT_EQUAL(keel_op_run(KEEL_OP_ADAPTIVE_AVG_POOL2D, &x, 1, attrs, 1,
                                &y, 1, &nout),
                    KEEL_STATUS_DEVICE_ERROR);
    expect_msg("aclnnAdaptiveAvgPool2d on npu:0", "aclnnStatus 507035");
    keel_tensor_free(y);
    keel_tensor_free(x);
}

/* max_pool2d is not offered (NaN and all-padding windows): strict mode
 * says so. */
static void test_max_pool_not_offered(void)
{
    keel_tensor *x = npu(x9, 4, s1133), *y[2] = {NULL, NULL};
    int64_t k = 2;
    keel_attr attrs[1] = {keel_attr_ints("kernel_size", &k, 1)};
    int nout = 0;

    CU_ASSERT_EQUAL(keel_op_run(KEEL_OP_MAX_POOL2D, &x, 1, attrs, 1, y, 2,
                                &nout),
                    KEEL_STATUS_NOT_SUPPORTED);
    expect_msg("max_pool2d", NULL);
    keel_tensor_free(x);
}

/* Over the partial stand-in (no aclnnConvolution): conv2d is not offered
 * (strict mode: NOT_SUPPORTED instead of a fallback), while linear and
 * conv2d_grad, whose entry points are there, still compute. */
static void test_partial(void)
{
    keel_tensor *x = npu(x9, 4, s1133), *w = npu(wdiag, 4, s1122), *y = NULL;
    keel_conv2d_params p = keel_conv2d_default_params();

    CU_ASSERT_EQUAL(keel_conv2d(x, w, NULL, &p, &y),
                    KEEL_STATUS_NOT_SUPPORTED);
    CU_ASSERT_PTR_NULL(y);
    expect_msg("conv2d", NULL);
    keel_tensor_free(x);
    keel_tensor_free(w);
    test_linear();
    test_conv2d_grad();
}

int main(int argc, char **argv)
{
    CU_pSuite suite;
    unsigned failed;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    if (argc >= 2 && !strcmp(argv[1], "partial")) {
        suite = CU_add_suite("npu nn kernels over a stand-in without "
                             "aclnnConvolution", nn_init, NULL);
        CU_add_test(suite, "conv2d falls back, linear and conv2d_grad stay",
                    test_partial);
        goto run;
    }
    suite = CU_add_suite("npu nn kernels over the stand-in", nn_init, NULL);
    CU_add_test(suite, "linear: Addmm / Matmul; Addmm refusal named",
                test_linear);
    CU_add_test(suite, "conv2d: result; uneven padding refused; launch "
                "failure named", test_conv2d);
    CU_add_test(suite, "conv2d_grad: dx, dweight, dbias; mask", test_conv2d_grad);
    CU_add_test(suite, "conv2d_transpose and its gradient",
                test_conv2d_transpose);
    CU_add_test(suite, "avg_pool2d: both divisors; asymmetric refused",
                test_avg_pool2d);
    CU_add_test(suite, "avg_pool2d_grad", test_avg_pool2d_grad);
    CU_add_test(suite, "adaptive_avg_pool2d and its gradient; launch "
                "failure named",
                test_adaptive_avg_pool2d);
    CU_add_test(suite, "max_pool2d not offered", test_max_pool_not_offered);
run:
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
