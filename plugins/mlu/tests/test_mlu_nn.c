/*
 * The mlu plugin's CNNL softmax, log_softmax, matmul, linear, cast,
 * conv2d, conv2d_grad, avg_pool2d and avg_pool2d_grad over the stand-in
 * Neuware (meson test mlu-nn-standin, strict mode: a kernel that is not
 * used is an error, not a CPU fallback). Each op computes one small case
 * whose result is worked out here by hand; a strided softmax, a float32
 * -> int32 cast and avg_pool2d with ceil_mode are refused with
 * NOT_SUPPORTED; CNNL failures injected into one call come back as the
 * mapped keel status naming the CNNL function.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>
#include <keel/device_api.h>
#include <keel/ops.h>
#include <keel/runtime.h>
#include <keel/tensor.h>

#include "cnrt_api.h"

static void (*arm)(const char *name, int code);
static keel_place mlu0;

static int setup(void)
{
    const char *lib = getenv("KEEL_MLU_CNRT_LIBRARY");
    void *h;

    if (!lib || keel_place_parse("mlu:0", &mlu0) != KEEL_STATUS_OK)
        return -1;
    if (!(h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD)))
        return -1;
    *(void **)&arm = dlsym(h, "cnrt_standin_fail_next");
    dlclose(h);
    return arm ? 0 : -1;
}

static const keel_plugin_api *mlu_table(void)
{
    keel_plugin_info info;

    for (int i = 0; i < keel_plugin_count(); i++)
        if (keel_plugin_get_info(i, &info) == KEEL_STATUS_OK && info.name &&
            !strcmp(info.name, "mlu"))
            return keel_plugin_table(i);
    return NULL;
}

static void saw(const char *a, const char *b)
{
    const char *m = keel_last_error();

    printf("\n    %s\n", m);
    CU_ASSERT_PTR_NOT_NULL(strstr(m, a));
    if (b)
        CU_ASSERT_PTR_NOT_NULL(strstr(m, b));
}

static keel_tensor *dev_floats(const float *v, int nd, const int64_t *dims,
                               keel_dtype dt)
{
    keel_tensor *t = NULL;

    CU_ASSERT_EQUAL(keel_tensor_from_floats(v, nd, dims, dt, "mlu:0", &t),
                    KEEL_STATUS_OK);
    return t;
}

static bool near(float got, double want, double tol)
{
    return fabs((double)got - want) <= tol;
}

/* softmax of [1, 2, 3] is [1, e, e^2] / (1 + e + e^2); log_softmax is
 * x - 3 - ln(1 + e^-1 + e^-2). Along axis 0 of [[0, 1], [0, 1]] each
 * column is [0.5, 0.5] (the MEDIUM_DIMENSION view). */
static void t_softmax(void)
{
    static const float x[3] = {1, 2, 3}, sq[4] = {0, 1, 0, 1};
    const int64_t d3[1] = {3}, d22[2] = {2, 2};
    double e = exp(1.0), s = 1 + e + e * e;
    double lse = log(1 + exp(-1.0) + exp(-2.0));
    const double want[3] = {1 / s, e / s, e * e / s};
    keel_tensor *t = dev_floats(x, 1, d3, KEEL_F32), *r = NULL;
    keel_tensor *q = dev_floats(sq, 2, d22, KEEL_F32);
    float got[4];

    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_PTR_NOT_NULL_FATAL(q);
    CU_ASSERT_EQUAL_FATAL(keel_softmax(t, -1, &r), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_to_host(r, got, 3 * sizeof(float)),
                          KEEL_STATUS_OK);
    for (int i = 0; i < 3; i++)
        CU_ASSERT(near(got[i], want[i], 1e-6));
    keel_tensor_free(r);
    r = NULL;
    CU_ASSERT_EQUAL_FATAL(keel_log_softmax(t, 0, &r), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_to_host(r, got, 3 * sizeof(float)),
                          KEEL_STATUS_OK);
    for (int i = 0; i < 3; i++)
        CU_ASSERT(near(got[i], x[i] - 3 - lse, 1e-6));
    keel_tensor_free(r);
    r = NULL;
    CU_ASSERT_EQUAL_FATAL(keel_softmax(q, 0, &r), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_to_host(r, got, 4 * sizeof(float)),
                          KEEL_STATUS_OK);
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(got[i], 0.5f);
    keel_tensor_free(r);
    keel_tensor_free(q);
    keel_tensor_free(t);
}

/* [[1, 2], [3, 4]] @ [[5, 6], [7, 8]] = [[19, 22], [43, 50]]; with
 * transpose_y the product with [[5, 7], [6, 8]] stored is the same; the
 * batched [2, 1, 2] @ [2, 2, 1] is [[[1*5 + 2*7]], [[3*6 + 4*8]]]. */
static void t_matmul(void)
{
    static const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
    static const float bt[4] = {5, 7, 6, 8};
    const int64_t d22[2] = {2, 2}, d212[3] = {2, 1, 2}, d221[3] = {2, 2, 1};
    static const float bb[4] = {5, 7, 6, 8};
    keel_tensor *x = dev_floats(a, 2, d22, KEEL_F32);
    keel_tensor *y = dev_floats(b, 2, d22, KEEL_F32);
    keel_tensor *yt = dev_floats(bt, 2, d22, KEEL_F32);
    keel_tensor *xb = dev_floats(a, 3, d212, KEEL_F32);
    keel_tensor *yb = dev_floats(bb, 3, d221, KEEL_F32);
    keel_tensor *r = NULL;
    float got[4];

    CU_ASSERT_EQUAL_FATAL(keel_matmul(x, y, false, false, &r),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_to_host(r, got, sizeof(got)),
                          KEEL_STATUS_OK);
    CU_ASSERT(got[0] == 19 && got[1] == 22 && got[2] == 43 && got[3] == 50);
    keel_tensor_free(r);
    r = NULL;
    CU_ASSERT_EQUAL_FATAL(keel_matmul(x, yt, false, true, &r),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_to_host(r, got, sizeof(got)),
                          KEEL_STATUS_OK);
    CU_ASSERT(got[0] == 19 && got[1] == 22 && got[2] == 43 && got[3] == 50);
    keel_tensor_free(r);
    r = NULL;
    CU_ASSERT_EQUAL_FATAL(keel_matmul(xb, yb, false, false, &r),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_to_host(r, got, 2 * sizeof(float)),
                          KEEL_STATUS_OK);
    CU_ASSERT(got[0] == 19 && got[1] == 50);
    keel_tensor_free(r);
    keel_tensor_free(yb);
    keel_tensor_free(xb);
    keel_tensor_free(yt);
    keel_tensor_free(y);
    keel_tensor_free(x);
}

/* [[1, 2], [3, 4]] @ [[1, 0, 1], [0, 1, 1]] + [10, 20, 30] =
 * [[11, 22, 33], [13, 24, 37]]. */
static void t_linear(void)
{
    static const float a[4] = {1, 2, 3, 4}, w[6] = {1, 0, 1, 0, 1, 1};
    static const float bias[3] = {10, 20, 30};
    static const float want[6] = {11, 22, 33, 13, 24, 37};
    const int64_t d22[2] = {2, 2}, d23[2] = {2, 3}, d3[1] = {3};
    keel_tensor *x = dev_floats(a, 2, d22, KEEL_F32);
    keel_tensor *wt = dev_floats(w, 2, d23, KEEL_F32);
    keel_tensor *b = dev_floats(bias, 1, d3, KEEL_F32);
    keel_tensor *r = NULL;
    float got[6];

    CU_ASSERT_EQUAL_FATAL(keel_linear(x, wt, b, &r), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_to_host(r, got, sizeof(got)),
                          KEEL_STATUS_OK);
    for (int i = 0; i < 6; i++)
        CU_ASSERT_EQUAL(got[i], want[i]);
    keel_tensor_free(r);
    keel_tensor_free(b);
    keel_tensor_free(wt);
    keel_tensor_free(x);
}

/* float32 -> float16: 1.5 and -2 are exact, 65504 is float16's largest,
 * 1 + 2^-11 is a tie that rounds to even (1.0). Read back as float32
 * through a second cast (float16 -> float32). */
static void t_cast(void)
{
    static const float v[4] = {1.5f, -2.0f, 65504.0f, 1.00048828125f};
    static const float want[4] = {1.5f, -2.0f, 65504.0f, 1.0f};
    const int64_t d4[1] = {4};
    keel_tensor *x = dev_floats(v, 1, d4, KEEL_F32), *h = NULL, *r = NULL;
    float got[4];

    CU_ASSERT_EQUAL_FATAL(keel_cast(x, KEEL_F16, &h), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_cast(h, KEEL_F32, &r), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_to_host(r, got, sizeof(got)),
                          KEEL_STATUS_OK);
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(got[i], want[i]);
    keel_tensor_free(r);
    keel_tensor_free(h);
    keel_tensor_free(x);
}

/* x = [[1,2,3],[4,5,6],[7,8,9]] with the 2x2 kernels [[1,0],[0,1]] (x[i][j]
 * + x[i+1][j+1]) and [[0,1],[1,0]] (x[i][j+1] + x[i+1][j]) plus the bias
 * [10, 20]; then kernel [[1]] with padding 1 puts a zero border round x. */
static void t_conv2d(void)
{
    static const float xv[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    static const float wv[8] = {1, 0, 0, 1, 0, 1, 1, 0}, bv[2] = {10, 20};
    static const float want[8] = {16, 18, 22, 24, 26, 28, 32, 34};
    static const float one[1] = {1};
    const int64_t dx[4] = {1, 1, 3, 3}, dw[4] = {2, 1, 2, 2}, db[1] = {2};
    const int64_t d1[4] = {1, 1, 1, 1};
    keel_tensor *x = dev_floats(xv, 4, dx, KEEL_F32);
    keel_tensor *w = dev_floats(wv, 4, dw, KEEL_F32);
    keel_tensor *b = dev_floats(bv, 1, db, KEEL_F32);
    keel_tensor *w1 = dev_floats(one, 4, d1, KEEL_F32), *r = NULL;
    keel_conv2d_params p = keel_conv2d_default_params();
    float got[25];

    CU_ASSERT_EQUAL_FATAL(keel_conv2d(x, w, b, &p, &r), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_to_host(r, got, 8 * sizeof(float)),
                          KEEL_STATUS_OK);
    for (int i = 0; i < 8; i++)
        CU_ASSERT_EQUAL(got[i], want[i]);
    keel_tensor_free(r);
    r = NULL;
    p.padding[0] = 1;
    p.npadding = 1;
    CU_ASSERT_EQUAL_FATAL(keel_conv2d(x, w1, NULL, &p, &r), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_to_host(r, got, sizeof(got)),
                          KEEL_STATUS_OK);
    for (int i = 0; i < 25; i++) {
        int h = i / 5, c = i % 5;
        bool in = h >= 1 && h <= 3 && c >= 1 && c <= 3;
        CU_ASSERT_EQUAL(got[i], in ? xv[(h - 1) * 3 + c - 1] : 0.0f);
    }
    keel_tensor_free(r);
    keel_tensor_free(w1);
    keel_tensor_free(b);
    keel_tensor_free(w);
    keel_tensor_free(x);
}

/* conv2d_grad launched directly (no core workspace: the plugin's own)
 * with x [[1, 2], [3, 4]], the 1x1 kernel [2] and dout [[1, 0], [0, 5]]:
 * dx = 2 * dout, dweight = 1*1 + 4*5 = 21, dbias = 1 + 5 = 6. */
static void t_conv2d_grad(void)
{
    const keel_plugin_api *api = mlu_table();
    static const float xv[4] = {1, 2, 3, 4}, wv[1] = {2};
    static const float dyv[4] = {1, 0, 0, 5};
    const float *src[3] = {xv, wv, dyv};
    const int64_t shp[6][4] = {{1, 1, 2, 2}, {1, 1, 1, 1}, {1, 1, 2, 2},
                               {1, 1, 2, 2}, {1, 1, 1, 1}, {1}};
    keel_tensor_desc td[6];
    keel_kernel_args a;
    keel_kernel k;
    keel_dptr d[6] = {0};
    float dx[4] = {0}, dw = 0, db = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_EQUAL_FATAL(
        api->kernel->lookup(0, "conv2d_grad", KEEL_F32, &k), KEEL_STATUS_OK);
    memset(td, 0, sizeof(td));
    for (int i = 0; i < 6; i++) {
        int nd = i == 5 ? 1 : 4;
        int64_t n = 1;
        td[i].dtype = KEEL_F32;
        td[i].ndim = nd;
        for (int j = nd - 1; j >= 0; j--) {
            td[i].shape[j] = shp[i][j];
            td[i].strides[j] = n;
            n *= shp[i][j];
        }
        CU_ASSERT_EQUAL_FATAL(keel_mem_alloc(mlu0, (uint64_t)n * 4, &d[i]),
                              KEEL_STATUS_OK);
        td[i].data = d[i];
        if (i < 3)
            CU_ASSERT_EQUAL(keel_mem_copy_h2d(mlu0, d[i], src[i],
                                              (uint64_t)n * 4),
                            KEEL_STATUS_OK);
    }
    memset(&a, 0, sizeof(a));
    a.struct_size = (uint32_t)KEEL_KERNEL_ARGS_MIN_SIZE;
    a.inputs = td;
    a.num_inputs = 3;
    a.outputs = &td[3];
    a.num_outputs = 3;
    CU_ASSERT_EQUAL_FATAL(k.fn(k.kernel_data, &a), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_mem_copy_d2h(mlu0, dx, d[3], sizeof(dx)), 0);
    CU_ASSERT_EQUAL(keel_mem_copy_d2h(mlu0, &dw, d[4], 4), 0);
    CU_ASSERT_EQUAL(keel_mem_copy_d2h(mlu0, &db, d[5], 4), 0);
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(dx[i], 2 * dyv[i]);
    CU_ASSERT_EQUAL(dw, 21.0f);
    CU_ASSERT_EQUAL(db, 6.0f);
    /* an injected failure of the filter pass is the call's status */
    arm("cnnlConvolutionBackwardFilter", CNNL_STATUS_EXECUTION_FAILED);
    CU_ASSERT_EQUAL(k.fn(k.kernel_data, &a), KEEL_STATUS_DEVICE_ERROR);
    /* the data pass may be queued still: let it finish first */
    CU_ASSERT_EQUAL(keel_device_synchronize(mlu0), KEEL_STATUS_OK);
    for (int i = 0; i < 6; i++)
        keel_mem_free(mlu0, d[i]);
}

/* avg_pool2d of x [[1, 2], [3, 4]], 2x2 windows, stride 1, padding 1:
 * exclusive, the corners are the corner values, the edges the mean of
 * two, the centre 2.5; not exclusive, everything is the window's sum / 4.
 * ceil_mode is refused. */
static void t_avg_pool2d(void)
{
    static const float xv[4] = {1, 2, 3, 4};
    static const float excl[9] = {1, 1.5f, 2, 2, 2.5f, 3, 3, 3.5f, 4};
    static const float incl[9] = {0.25f, 0.75f, 0.5f, 1, 2.5f, 1.5f,
                                  0.75f, 1.75f, 1};
    const int64_t dx[4] = {1, 1, 2, 2}, two[1] = {2}, one[1] = {1};
    keel_tensor *x = dev_floats(xv, 4, dx, KEEL_F32), *r = NULL;
    float got[9];
    int n = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    for (int e = 1; e >= 0; e--) {
        keel_attr at[5] = {keel_attr_ints("kernel_size", two, 1),
                           keel_attr_ints("stride", one, 1),
                           keel_attr_ints("padding", one, 1),
                           keel_attr_bool("exclusive", e),
                           keel_attr_bool("ceil_mode", false)};
        CU_ASSERT_EQUAL_FATAL(keel_op_run(KEEL_OP_AVG_POOL2D, &x, 1, at, 5,
                                          &r, 1, &n),
                              KEEL_STATUS_OK);
        CU_ASSERT_EQUAL_FATAL(keel_tensor_to_host(r, got, sizeof(got)),
                              KEEL_STATUS_OK);
        for (int i = 0; i < 9; i++)
            CU_ASSERT_EQUAL(got[i], e ? excl[i] : incl[i]);
        keel_tensor_free(r);
        r = NULL;
    }
    /* the gradient of the same pooling with dout all ones: each element
     * of x lies in 4 windows, of 1, 2, 2 and 4 elements inside x, so
     * 1 + 1/2 + 1/2 + 1/4 exclusive, 4 * 1/4 not */
    {
        static const float ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
        const int64_t d33[4] = {1, 1, 3, 3};
        keel_tensor *in[2] = {x, dev_floats(ones, 4, d33, KEEL_F32)};

        CU_ASSERT_PTR_NOT_NULL_FATAL(in[1]);
        for (int e = 1; e >= 0; e--) {
            keel_attr at[4] = {keel_attr_ints("kernel_size", two, 1),
                               keel_attr_ints("stride", one, 1),
                               keel_attr_ints("padding", one, 1),
                               keel_attr_bool("exclusive", e)};
            CU_ASSERT_EQUAL_FATAL(keel_op_run(KEEL_OP_AVG_POOL2D_GRAD, in, 2,
                                              at, 4, &r, 1, &n),
                                  KEEL_STATUS_OK);
            CU_ASSERT_EQUAL_FATAL(
                keel_tensor_to_host(r, got, 4 * sizeof(float)),
                KEEL_STATUS_OK);
            for (int i = 0; i < 4; i++)
                CU_ASSERT_EQUAL(got[i], e ? 2.25f : 1.0f);
            keel_tensor_free(r);
            r = NULL;
        }
        keel_tensor_free(in[1]);
    }
    {
        keel_attr at[2] = {keel_attr_ints("kernel_size", two, 1),
                           keel_attr_bool("ceil_mode", true)};
        CU_ASSERT_EQUAL(keel_op_run(KEEL_OP_AVG_POOL2D, &x, 1, at, 2, &r, 1,
                                    &n),
                        KEEL_STATUS_NOT_SUPPORTED);
        saw("avg_pool2d", "ceil_mode");
    }
    keel_tensor_free(x);
}

/* A launch of the plugin's softmax kernel itself on a 2x2 x read with
 * strides {1, 2} (a transpose): refused with NOT_SUPPORTED, so the core
 * would fall back; and a float32 -> int32 cast is refused the same way. */
static void t_refused(void)
{
    const keel_plugin_api *api = mlu_table();
    keel_tensor_desc td[2];
    keel_attr at = {0};
    keel_kernel_args a;
    keel_kernel k;
    keel_dptr d[2] = {0};

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_EQUAL_FATAL(api->kernel->lookup(0, "softmax", KEEL_F32, &k),
                          KEEL_STATUS_OK);
    memset(td, 0, sizeof(td));
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL_FATAL(keel_mem_alloc(mlu0, 16, &d[i]),
                              KEEL_STATUS_OK);
        td[i] = (keel_tensor_desc){.data = d[i], .dtype = KEEL_F32, .ndim = 2};
        td[i].shape[0] = td[i].shape[1] = 2;
        td[i].strides[0] = 2;
        td[i].strides[1] = 1;
    }
    td[0].strides[0] = 1;
    td[0].strides[1] = 2;
    memset(&a, 0, sizeof(a));
    a.struct_size = (uint32_t)KEEL_KERNEL_ARGS_MIN_SIZE;
    a.inputs = &td[0];
    a.num_inputs = 1;
    a.outputs = &td[1];
    a.num_outputs = 1;
    CU_ASSERT_EQUAL(k.fn(k.kernel_data, &a), KEEL_STATUS_NOT_SUPPORTED);
    /* float32 -> int32: keel truncates, CNNL's rounding is unknown */
    CU_ASSERT_EQUAL_FATAL(api->kernel->lookup(0, "cast", KEEL_F32, &k),
                          KEEL_STATUS_OK);
    td[0].strides[0] = 2;
    td[0].strides[1] = 1;
    td[1].dtype = KEEL_I32;
    at.name = "dtype";
    at.type = KEEL_ATTR_DTYPE;
    at.v.i = KEEL_I32;
    a.attrs = &at;
    a.num_attrs = 1;
    CU_ASSERT_EQUAL(k.fn(k.kernel_data, &a), KEEL_STATUS_NOT_SUPPORTED);
    for (int i = 0; i < 2; i++)
        keel_mem_free(mlu0, d[i]);
    /* through the core in strict mode the refusal is the call's error */
    {
        static const float v[2] = {1.5f, -2.5f};
        const int64_t d2[1] = {2};
        keel_tensor *x = dev_floats(v, 1, d2, KEEL_F32), *r = NULL;

        CU_ASSERT_PTR_NOT_NULL_FATAL(x);
        CU_ASSERT_EQUAL(keel_cast(x, KEEL_I32, &r),
                        KEEL_STATUS_NOT_SUPPORTED);
        saw("cast", "float32 to int32");
        CU_ASSERT_PTR_NULL(r);
        keel_tensor_free(x);
    }
}

/* Failures injected into one CNNL call: the keel status CNNL's maps to,
 * and the function's name and the status's in the message. */
static void t_failures(void)
{
    static const float v[4] = {1, 2, 3, 4};
    const int64_t d22[2] = {2, 2}, d122[3] = {1, 2, 2};
    keel_tensor *x = dev_floats(v, 2, d22, KEEL_F32), *r = NULL;
    keel_tensor *xb = dev_floats(v, 3, d122, KEEL_F32);

    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    CU_ASSERT_PTR_NOT_NULL_FATAL(xb);
    arm("cnnlSoftmaxForward_v2", CNNL_STATUS_EXECUTION_FAILED);
    CU_ASSERT_EQUAL(keel_softmax(x, -1, &r), KEEL_STATUS_DEVICE_ERROR);
    saw("cnnlSoftmaxForward_v2", "CNNL_STATUS_EXECUTION_FAILED");
    CU_ASSERT_PTR_NULL(r);
    arm("cnnlMatMul", CNNL_STATUS_ALLOC_FAILED);
    CU_ASSERT_EQUAL(keel_matmul(x, x, false, false, &r),
                    KEEL_STATUS_OUT_OF_MEMORY);
    saw("cnnlMatMul", "CNNL_STATUS_ALLOC_FAILED");
    arm("cnnlGetBatchMatMulBCastWorkspaceSize", CNNL_STATUS_INTERNAL_ERROR);
    CU_ASSERT_EQUAL(keel_matmul(xb, xb, false, false, &r),
                    KEEL_STATUS_DEVICE_ERROR);
    saw("cnnlGetBatchMatMulBCastWorkspaceSize", "CNNL_STATUS_INTERNAL_ERROR");
    arm("cnnlCastDataType", CNNL_STATUS_BAD_PARAM);
    CU_ASSERT_EQUAL(keel_cast(x, KEEL_F16, &r), KEEL_STATUS_NOT_SUPPORTED);
    saw("cnnlCastDataType", "CNNL_STATUS_BAD_PARAM");
    {
        const int64_t d4[4] = {1, 1, 2, 2};
        keel_tensor *x4 = dev_floats(v, 4, d4, KEEL_F32);
        keel_conv2d_params p = keel_conv2d_default_params();

        CU_ASSERT_PTR_NOT_NULL_FATAL(x4);
        arm("cnnlConvolutionForward", CNNL_STATUS_EXECUTION_FAILED);
        CU_ASSERT_EQUAL(keel_conv2d(x4, x4, NULL, &p, &r),
                        KEEL_STATUS_DEVICE_ERROR);
        saw("cnnlConvolutionForward", "CNNL_STATUS_EXECUTION_FAILED");
        CU_ASSERT_PTR_NULL(r);
        keel_tensor_free(x4);
    }
    /* once only: the next call works */
    CU_ASSERT_EQUAL(keel_softmax(x, -1, &r), KEEL_STATUS_OK);
    keel_tensor_free(r);
    keel_tensor_free(xb);
    keel_tensor_free(x);
}

/* The batched matmul's workspace is a block of the core's caching
 * allocator: x, y, the output and the workspace, all given back. */
static void t_workspace(void)
{
    static const float v[4] = {1, 2, 3, 4};
    const int64_t d122[3] = {1, 2, 2};
    keel_tensor *x = dev_floats(v, 3, d122, KEEL_F32), *r = NULL;
    keel_memory_stats s0, s1;

    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    CU_ASSERT_EQUAL(keel_memory_stats_get("mlu:0", &s0), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_matmul(x, x, false, false, &r),
                          KEEL_STATUS_OK);
    keel_tensor_free(r);
    CU_ASSERT_EQUAL(keel_memory_stats_get("mlu:0", &s1), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(s1.alloc_count - s0.alloc_count, 2);
    CU_ASSERT_EQUAL(s1.allocated, s0.allocated);
    keel_tensor_free(x);
}

int main(void)
{
    CU_pSuite s;
    unsigned bad;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("mlu nn kernels over the stand-in Neuware", setup, NULL);
    CU_add_test(s, "softmax and log_softmax", t_softmax);
    CU_add_test(s, "matmul, transposed and batched", t_matmul);
    CU_add_test(s, "linear with bias", t_linear);
    CU_add_test(s, "cast float32 <-> float16", t_cast);
    CU_add_test(s, "conv2d with bias, and padded", t_conv2d);
    CU_add_test(s, "conv2d_grad: dx, dweight, dbias", t_conv2d_grad);
    CU_add_test(s, "avg_pool2d and its grad, exclusive or not",
                t_avg_pool2d);
    CU_add_test(s, "refused configurations", t_refused);
    CU_add_test(s, "injected CNNL failures", t_failures);
    CU_add_test(s, "batched matmul workspace", t_workspace);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    bad = CU_get_number_of_failures() + CU_get_number_of_suites_failed() +
          CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return bad ? 1 : 0;
}
