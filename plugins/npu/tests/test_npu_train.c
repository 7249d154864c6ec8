/*
 * The npu plugin's training kernels (npu_kernels_train.c) over the stand-in
 * ACL and aclnn (meson test npu-train-standin, strict mode: a kernel that
 * refuses is an error, never a CPU fallback):
 *
 *   - each kernel (optimizer updates, norms, softmax grads, cross_entropy)
 *     computes a small case whose result was worked
 *     out by hand (below, next to each case), the gradient left as it was;
 *   - a configuration the kernel refuses answers NOT_SUPPORTED;
 *   - an aclnn phase 1 that refuses is NOT_SUPPORTED naming the aclnn
 *     function, and leaves param and state untouched (every phase 1 runs
 *     before the first launch); a failed launch is DEVICE_ERROR naming it.
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
static keel_place npu0;

static int train_init(void)
{
    const char *lib = getenv("KEEL_NPU_ACL_LIBRARY");
    void *h;

    if (!lib || keel_place_parse("npu:0", &npu0) != KEEL_STATUS_OK)
        return -1;
    h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return -1;
    *(void **)&fail_next = dlsym(h, "acl_standin_fail_next");
    dlclose(h);
    return fail_next ? 0 : -1;
}

static const keel_plugin_api *npu_api(void)
{
    for (int i = 0; i < keel_plugin_count(); i++) {
        keel_plugin_info info;
        if (keel_plugin_get_info(i, &info) == KEEL_STATUS_OK && info.name &&
            !strcmp(info.name, "npu"))
            return keel_plugin_table(i);
    }
    return NULL;
}

static void expect_msg(const char *a, const char *b)
{
    const char *m = keel_last_error();

    printf("\n    %s\n", m);
    CU_ASSERT_PTR_NOT_NULL(strstr(m, a));
    if (b)
        CU_ASSERT_PTR_NOT_NULL(strstr(m, b));
}

#define N 2

/* Inputs t[0..nin) on npu:0 from rows of vals (N float32 each, grad as
 * gdt), the op run with its attributes, the rows read back into got. */
static keel_status run_case(keel_op_id op, int nin, float vals[][N],
                            keel_dtype gdt, const keel_attr *attrs,
                            int nattr, float got[][N])
{
    int64_t shape[1] = {N};
    keel_tensor *t[4] = {NULL, NULL, NULL, NULL};
    keel_status st = KEEL_STATUS_OK;
    int nout = -1;

    for (int i = 0; i < nin; i++)
        CU_ASSERT_EQUAL_FATAL(
            keel_tensor_from_floats(vals[i], 1, shape,
                                    i == 1 ? gdt : KEEL_F32, "npu:0", &t[i]),
            KEEL_STATUS_OK);
    st = keel_op_run(op, t, nin, attrs, nattr, NULL, 0, &nout);
    for (int i = 0; i < nin; i++) {
        if (i != 1 || gdt == KEEL_F32)
            CU_ASSERT_EQUAL(keel_tensor_to_host(t[i], got[i], sizeof(got[i])),
                            KEEL_STATUS_OK);
        keel_tensor_free(t[i]);
    }
    return st;
}

static bool near(float a, double b)
{
    return fabs((double)a - b) <= 1e-5 * (1 + fabs(b));
}

static void test_offered(void)
{
    const keel_plugin_api *api = npu_api();
    static const char *const ops[] = {"sgd_update", "momentum_update",
                                      "adam_update", "adamw_update",
                                      "layer_norm", "layer_norm_grad",
                                      "softmax_grad", "log_softmax_grad"};
    static const keel_dtype dts[] = {KEEL_F32, KEEL_F16, KEEL_BF16};
    keel_kernel k;

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 3; j++)
            CU_ASSERT_EQUAL(api->kernel->lookup(0, ops[i], dts[j], &k),
                            KEEL_STATUS_OK);
    /* batch_norm: float32 only (keel's statistics are float32) */
    CU_ASSERT_EQUAL(api->kernel->lookup(0, "batch_norm", KEEL_F32, &k),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(api->kernel->lookup(0, "batch_norm_grad", KEEL_F32, &k),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(api->kernel->lookup(0, "batch_norm", KEEL_F16, &k),
                    KEEL_STATUS_NOT_FOUND);
    CU_ASSERT_EQUAL(api->kernel->lookup(0, "cross_entropy", KEEL_F32, &k),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(api->kernel->lookup(0, "cross_entropy_grad", KEEL_F32,
                                        &k),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(api->kernel->lookup(0, "cross_entropy", KEEL_F16, &k),
                    KEEL_STATUS_NOT_FOUND);
    /* float64: aclnn computes it, the stand-in does not; not offered */
    CU_ASSERT_EQUAL(api->kernel->lookup(0, "sgd_update", KEEL_F64, &k),
                    KEEL_STATUS_NOT_FOUND);
}

static void test_sgd(void)
{
    float v[2][N] = {{1.0f, -1.0f}, {0.5f, 2.0f}}, got[2][N];
    keel_attr at[2] = {keel_attr_float("lr", 0.5),
                       keel_attr_float("weight_decay", 0.5)};

    /* p - lr g = 1 - 0.25, -1 - 1 */
    CU_ASSERT_EQUAL_FATAL(run_case(KEEL_OP_SGD_UPDATE, 2, v, KEEL_F32, at, 1,
                                   got),
                          KEEL_STATUS_OK);
    CU_ASSERT(got[0][0] == 0.75f && got[0][1] == -2.0f);
    CU_ASSERT(got[1][0] == 0.5f && got[1][1] == 2.0f); /* grad as it was */
    /* g + wd p = 1, 1.5; p - lr g = 0.5, -1.75 */
    CU_ASSERT_EQUAL_FATAL(run_case(KEEL_OP_SGD_UPDATE, 2, v, KEEL_F32, at, 2,
                                   got),
                          KEEL_STATUS_OK);
    CU_ASSERT(got[0][0] == 0.5f && got[0][1] == -1.75f);
    CU_ASSERT(got[1][0] == 0.5f && got[1][1] == 2.0f);
}

static void test_momentum(void)
{
    float v[3][N] = {{1, 2}, {1, -2}, {0.5f, 1}}, got[3][N];
    keel_attr at[3] = {keel_attr_float("lr", 0.5), keel_attr_float("mu", 0.5),
                       keel_attr_bool("use_nesterov", true)};

    /* v = 0.5 v + g = 1.25, -1.5; p - 0.5 v = 0.375, 2.75 */
    CU_ASSERT_EQUAL_FATAL(run_case(KEEL_OP_MOMENTUM_UPDATE, 3, v, KEEL_F32,
                                   at, 2, got),
                          KEEL_STATUS_OK);
    CU_ASSERT(got[2][0] == 1.25f && got[2][1] == -1.5f);
    CU_ASSERT(got[0][0] == 0.375f && got[0][1] == 2.75f);
    CU_ASSERT(got[1][0] == 1.0f && got[1][1] == -2.0f);
    /* nesterov: p - 0.5 (g + 0.5 v) = 1 - 0.8125, 2 + 1.375 */
    CU_ASSERT_EQUAL_FATAL(run_case(KEEL_OP_MOMENTUM_UPDATE, 3, v, KEEL_F32,
                                   at, 3, got),
                          KEEL_STATUS_OK);
    CU_ASSERT(got[2][0] == 1.25f && got[2][1] == -1.5f);
    CU_ASSERT(got[0][0] == 0.1875f && got[0][1] == 3.375f);
}

/* Adam with b1 = b1p = 0.5, b2 = b2p = 0.75, lr 1, so that lr_t =
 * sqrt(0.25) / 0.5 = 1 and eps' = 1e-8 * 0.5 is far below float32's
 * resolution at these values. */
static keel_attr adam_at[8];

static int adam_attrs(const char *extra, double x)
{
    adam_at[0] = keel_attr_float("lr", 1);
    adam_at[1] = keel_attr_float("beta1", 0.5);
    adam_at[2] = keel_attr_float("beta2", 0.75);
    adam_at[3] = keel_attr_float("beta1_pow", 0.5);
    adam_at[4] = keel_attr_float("beta2_pow", 0.75);
    if (!extra)
        return 5;
    adam_at[5] = keel_attr_float(extra, x);
    return 6;
}

static void test_adam(void)
{
    float v[4][N] = {{1, 3}, {2, -4}, {0, 0}, {0, 0}}, got[4][N];
    int na = adam_attrs(NULL, 0);

    /* m = 0.5 g = 1, -2; v = 0.25 g^2 = 1, 4; p - m / sqrt(v) = 0, 4 */
    CU_ASSERT_EQUAL_FATAL(run_case(KEEL_OP_ADAM_UPDATE, 4, v, KEEL_F32,
                                   adam_at, na, got),
                          KEEL_STATUS_OK);
    CU_ASSERT(near(got[0][0], 0) && near(got[0][1], 4));
    CU_ASSERT(got[2][0] == 1 && got[2][1] == -2);
    CU_ASSERT(got[3][0] == 1 && got[3][1] == 4);
    CU_ASSERT(got[1][0] == 2 && got[1][1] == -4);
    /* weight_decay 0.5: g + 0.5 p = 2.5, -2.5; m = 1.25, -1.25;
     * v = 0.25 * 6.25 = 1.5625; sqrt = 1.25; p = 1 - 1, 3 + 1 */
    na = adam_attrs("weight_decay", 0.5);
    CU_ASSERT_EQUAL_FATAL(run_case(KEEL_OP_ADAM_UPDATE, 4, v, KEEL_F32,
                                   adam_at, na, got),
                          KEEL_STATUS_OK);
    CU_ASSERT(near(got[0][0], 0) && near(got[0][1], 4));
    CU_ASSERT(got[2][0] == 1.25f && got[2][1] == -1.25f);
    CU_ASSERT(got[3][0] == 1.5625f && got[3][1] == 1.5625f);
    CU_ASSERT(got[1][0] == 2 && got[1][1] == -4); /* not the L2 gradient */
}

static void test_adamw(void)
{
    float v[4][N] = {{1, 3}, {2, -4}, {0, 0}, {0, 0}}, got[4][N];
    int na = adam_attrs("coeff", 0.5);

    /* p *= 1 - 0.5 = 0.5, 1.5; then as adam: - (1, -1) = -0.5, 2.5 */
    CU_ASSERT_EQUAL_FATAL(run_case(KEEL_OP_ADAMW_UPDATE, 4, v, KEEL_F32,
                                   adam_at, na, got),
                          KEEL_STATUS_OK);
    CU_ASSERT(near(got[0][0], -0.5) && near(got[0][1], 2.5));
    CU_ASSERT(got[2][0] == 1 && got[2][1] == -2);
    CU_ASSERT(got[3][0] == 1 && got[3][1] == 4);
}

/* A float16 gradient with a float32 param: refused, not promoted. */
static void test_refused_mixed(void)
{
    float v[2][N] = {{1.0f, -1.0f}, {0.5f, 2.0f}}, got[2][N];
    keel_attr at[1] = {keel_attr_float("lr", 0.5)};

    CU_ASSERT_EQUAL(run_case(KEEL_OP_SGD_UPDATE, 2, v, KEEL_F16, at, 1, got),
                    KEEL_STATUS_NOT_SUPPORTED);
    expect_msg("sgd_update", "float16");
    CU_ASSERT(got[0][0] == 1.0f && got[0][1] == -1.0f);
}

/* Under a core without workspaces, adam has no room for its
 * temporaries: NOT_SUPPORTED before anything runs. */
static void test_refused_older_core(void)
{
    const keel_plugin_api *api = npu_api();
    keel_dptr d[4] = {0, 0, 0, 0};
    keel_tensor_desc td[4];
    keel_kernel k;
    keel_kernel_args a;
    int na = adam_attrs(NULL, 0);

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_EQUAL_FATAL(api->kernel->lookup(0, "adam_update", KEEL_F32, &k),
                          KEEL_STATUS_OK);
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL_FATAL(keel_mem_alloc(npu0, 16, &d[i]), KEEL_STATUS_OK);
        CU_ASSERT_EQUAL_FATAL(keel_mem_set(npu0, d[i], 0, 16), KEEL_STATUS_OK);
        memset(&td[i], 0, sizeof(td[i]));
        td[i].data = d[i];
        td[i].dtype = KEEL_F32;
        td[i].ndim = 1;
        td[i].shape[0] = 4;
        td[i].strides[0] = 1;
    }
    memset(&a, 0, sizeof(a));
    a.struct_size = (uint32_t)KEEL_KERNEL_ARGS_MIN_SIZE;
    a.device = 0;
    a.inputs = td;
    a.num_inputs = 4;
    a.attrs = adam_at;
    a.num_attrs = na;
    /* (called directly: the message goes to the plugin's host, not to
     * keel_last_error) */
    CU_ASSERT_EQUAL(k.fn(k.kernel_data, &a), KEEL_STATUS_NOT_SUPPORTED);
    /* sgd needs no temporaries: it runs under that core */
    CU_ASSERT_EQUAL_FATAL(api->kernel->lookup(0, "sgd_update", KEEL_F32, &k),
                          KEEL_STATUS_OK);
    a.num_inputs = 2;
    a.attrs = adam_at; /* lr 1 */
    a.num_attrs = 1;
    CU_ASSERT_EQUAL(k.fn(k.kernel_data, &a), KEEL_STATUS_OK);
    /* the launch is asynchronous: let it finish before the memory goes */
    CU_ASSERT_EQUAL(keel_device_synchronize(npu0), KEEL_STATUS_OK);
    for (int i = 0; i < 4; i++)
        keel_mem_free(npu0, d[i]);
}

static void test_phase1_refusal(void)
{
    float v[4][N] = {{1, 3}, {2, -4}, {0.5f, 0.5f}, {1, 1}}, got[4][N];
    int na = adam_attrs(NULL, 0);

    /* the last call's phase 1 refuses: nothing has run */
    fail_next("aclnnInplaceAddcdivGetWorkspaceSize", 161002);
    CU_ASSERT_EQUAL(run_case(KEEL_OP_ADAM_UPDATE, 4, v, KEEL_F32, adam_at,
                             na, got),
                    KEEL_STATUS_NOT_SUPPORTED);
    expect_msg("aclnnInplaceAddcdivGetWorkspaceSize", "aclnnStatus 161002");
    CU_ASSERT(got[0][0] == 1 && got[0][1] == 3);
    CU_ASSERT(got[2][0] == 0.5f && got[2][1] == 0.5f);
    CU_ASSERT(got[3][0] == 1 && got[3][1] == 1);
}

static void test_launch_failure(void)
{
    float v[3][N] = {{1, 2}, {1, -2}, {0.5f, 1}}, got[3][N];
    keel_attr at[1] = {keel_attr_float("lr", 0.5)};

    fail_next("aclnnInplaceMuls", 561000);
    CU_ASSERT_EQUAL(run_case(KEEL_OP_MOMENTUM_UPDATE, 3, v, KEEL_F32, at, 1,
                             got),
                    KEEL_STATUS_DEVICE_ERROR);
    expect_msg("aclnnInplaceMuls", "aclnnStatus 561000");
}

/* ---- layer_norm ---------------------------------------------------------- */

struct ln_in {
    const float *v;
    int ndim;
    int64_t shape[2];
};

/* The op on float32 inputs in[0..nin) on npu:0; outputs read into
 * out[i] (cap floats each). */
static keel_status ln_case(keel_op_id op, const struct ln_in *in, int nin,
                           float out[][6], int cap)
{
    keel_tensor *t[5] = {NULL}, *o[3] = {NULL};
    keel_status st;
    int nout = 0;

    for (int i = 0; i < nin; i++)
        CU_ASSERT_EQUAL_FATAL(keel_tensor_from_floats(in[i].v, in[i].ndim,
                                                      in[i].shape, KEEL_F32,
                                                      "npu:0", &t[i]),
                              KEEL_STATUS_OK);
    st = keel_op_run(op, t, nin, NULL, 0, o, 3, &nout);
    for (int i = 0; st == KEEL_STATUS_OK && i < nout; i++) {
        size_t bytes = (size_t)keel_tensor_numel(o[i]) * sizeof(float);
        CU_ASSERT_FATAL(bytes <= (size_t)cap * sizeof(float));
        CU_ASSERT_EQUAL(keel_tensor_to_host(o[i], out[i], bytes),
                        KEEL_STATUS_OK);
    }
    for (int i = 0; i < nin; i++)
        keel_tensor_free(t[i]);
    for (int i = 0; i < nout; i++)
        keel_tensor_free(o[i]);
    return st;
}

static void test_layer_norm(void)
{
    static const float x[4] = {1, 3, 2, 2}, w[2] = {2, 1}, b[2] = {0.5f, 0};
    const struct ln_in in[3] = {{x, 2, {2, 2}}, {w, 1, {2}}, {b, 1, {2}}};
    float out[3][6];
    /* row 0: mean 2, var 1; row 1: mean 2, var 0 (eps 1e-5 alone) */
    double i0 = 1 / sqrt(1 + 1e-5), i1 = 1 / sqrt(1e-5);

    CU_ASSERT_EQUAL_FATAL(ln_case(KEEL_OP_LAYER_NORM, in, 3, out, 6),
                          KEEL_STATUS_OK);
    /* y = (x - mean) invstd w + b */
    CU_ASSERT(near(out[0][0], -2 * i0 + 0.5) && near(out[0][1], i0));
    CU_ASSERT(near(out[0][2], 0.5) && near(out[0][3], 0));
    CU_ASSERT(out[1][0] == 2 && out[1][1] == 2);
    CU_ASSERT(near(out[2][0], i0) && near(out[2][1], i1));
}

static void test_layer_norm_grad(void)
{
    static const float x[3] = {1, 2, 3}, w[3] = {1, 2, 1}, m[1] = {2},
                       inv[1] = {1}, dy[3] = {1, 1, 2};
    const struct ln_in in[5] = {{x, 2, {1, 3}}, {w, 1, {3}}, {m, 1, {1}},
                                {inv, 1, {1}}, {dy, 2, {1, 3}}};
    float out[3][6];

    /* xhat = -1, 0, 1; g = dy w = 1, 2, 2; sum g = 5, sum g xhat = 1;
     * dx = invstd (g - 5/3 - xhat / 3) = -1/3, 1/3, 0;
     * dscale = dy xhat = -1, 0, 2; dbias = dy */
    CU_ASSERT_EQUAL_FATAL(ln_case(KEEL_OP_LAYER_NORM_GRAD, in, 5, out, 6),
                          KEEL_STATUS_OK);
    CU_ASSERT(near(out[0][0], -1.0 / 3) && near(out[0][1], 1.0 / 3) &&
              near(out[0][2], 0));
    CU_ASSERT(out[1][0] == -1 && out[1][1] == 0 && out[1][2] == 2);
    CU_ASSERT(out[2][0] == 1 && out[2][1] == 1 && out[2][2] == 2);
}

/* Without scale aclnnLayerNormBackward would need a tensor of ones. */
static void test_layer_norm_grad_refused(void)
{
    static const float x[3] = {1, 2, 3}, m[1] = {2}, inv[1] = {1},
                       dy[3] = {1, 1, 2};
    const struct ln_in in[4] = {{x, 2, {1, 3}}, {m, 1, {1}}, {inv, 1, {1}},
                                {dy, 2, {1, 3}}};
    float out[3][6];

    CU_ASSERT_EQUAL(ln_case(KEEL_OP_LAYER_NORM_GRAD, in, 4, out, 6),
                    KEEL_STATUS_NOT_SUPPORTED);
    expect_msg("layer_norm_grad", "without scale");
}

static void test_layer_norm_phase1(void)
{
    static const float x[4] = {1, 3, 2, 2};
    const struct ln_in in[1] = {{x, 2, {2, 2}}};
    float out[3][6];

    fail_next("aclnnLayerNormGetWorkspaceSize", 161002);
    CU_ASSERT_EQUAL(ln_case(KEEL_OP_LAYER_NORM, in, 1, out, 6),
                    KEEL_STATUS_NOT_SUPPORTED);
    expect_msg("aclnnLayerNormGetWorkspaceSize", "aclnnStatus 161002");
    fail_next("aclnnLayerNorm", 561000);
    CU_ASSERT_EQUAL(ln_case(KEEL_OP_LAYER_NORM, in, 1, out, 6),
                    KEEL_STATUS_DEVICE_ERROR);
    expect_msg("aclnnLayerNorm ", "aclnnStatus 561000");
}

/* ---- batch_norm ---------------------------------------------------------- */

static void test_batch_norm(void)
{
    static const float xs[3] = {1, 2, 3}, sc[1] = {2}, bi[1] = {0.5f},
                       rm0[1] = {0}, rv0[1] = {1};
    int64_t xsh[2] = {3, 1}, csh[1] = {1};
    keel_tensor *t[5] = {NULL}, *o[3] = {NULL};
    keel_attr at[1] = {keel_attr_bool("training", false)};
    float y[3], sm, si, rm, rv;
    int nout = 0;
    /* batch mean 2, biased variance 2/3 (unbiased 1) */
    double inv = 1 / sqrt(2.0 / 3 + 1e-5);

    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_floats(xs, 2, xsh, KEEL_F32,
                                                  "npu:0", &t[0]),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_floats(sc, 1, csh, KEEL_F32,
                                                  "npu:0", &t[1]),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_floats(bi, 1, csh, KEEL_F32,
                                                  "npu:0", &t[2]),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_floats(rm0, 1, csh, KEEL_F32,
                                                  "npu:0", &t[3]),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_floats(rv0, 1, csh, KEEL_F32,
                                                  "npu:0", &t[4]),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_op_run(KEEL_OP_BATCH_NORM, t, 5, NULL, 0, o, 3,
                                      &nout),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(nout, 3);
    keel_tensor_to_host(o[0], y, sizeof(y));
    keel_tensor_to_host(o[1], &sm, sizeof(sm));
    keel_tensor_to_host(o[2], &si, sizeof(si));
    keel_tensor_to_host(t[3], &rm, sizeof(rm));
    keel_tensor_to_host(t[4], &rv, sizeof(rv));
    /* y = (x - 2) inv 2 + 0.5 */
    CU_ASSERT(near(y[0], -2 * inv + 0.5) && near(y[1], 0.5) &&
              near(y[2], 2 * inv + 0.5));
    CU_ASSERT(sm == 2 && near(si, inv));
    /* keel: 0.9 running + 0.1 batch, the variance biased: 0.2 and
     * 0.9 + 0.1 * 2/3 (PyTorch's rule would give 0.9 * 1 + 0.1 * 1) */
    CU_ASSERT(near(rm, 0.2));
    CU_ASSERT(near(rv, 0.9 + 0.1 * 2.0 / 3));
    for (int i = 0; i < 3; i++)
        keel_tensor_free(o[i]);
    /* inference mode is refused */
    CU_ASSERT_EQUAL(keel_op_run(KEEL_OP_BATCH_NORM, t, 5, at, 1, o, 3, &nout),
                    KEEL_STATUS_NOT_SUPPORTED);
    expect_msg("batch_norm", "inference mode");
    for (int i = 0; i < 5; i++)
        keel_tensor_free(t[i]);
}

static void test_batch_norm_grad(void)
{
    static const float x[3] = {1, 2, 3}, w[1] = {2}, m[1] = {2},
                       inv[1] = {1}, dy[3] = {1, 1, 2};
    const struct ln_in in[5] = {{x, 2, {3, 1}}, {w, 1, {1}}, {m, 1, {1}},
                                {inv, 1, {1}}, {dy, 2, {3, 1}}};
    float out[3][6];

    /* xhat = -1, 0, 1; sum dy = 4, sum dy xhat = 1; dx = scale invstd
     * (dy - 4/3 - xhat / 3) = 2 (0, -1/3, 1/3); dscale 1, dbias 4 */
    CU_ASSERT_EQUAL_FATAL(ln_case(KEEL_OP_BATCH_NORM_GRAD, in, 5, out, 6),
                          KEEL_STATUS_OK);
    CU_ASSERT(near(out[0][0], 0) && near(out[0][1], -2.0 / 3) &&
              near(out[0][2], 2.0 / 3));
    CU_ASSERT(out[1][0] == 1 && out[2][0] == 4);
    fail_next("aclnnBatchNormBackward", 561000);
    CU_ASSERT_EQUAL(ln_case(KEEL_OP_BATCH_NORM_GRAD, in, 5, out, 6),
                    KEEL_STATUS_DEVICE_ERROR);
    expect_msg("aclnnBatchNormBackward", "aclnnStatus 561000");
}

/* ---- softmax_grad, log_softmax_grad -------------------------------------- */

static void test_softmax_grads(void)
{
    static const float y[2] = {0.25f, 0.75f}, dy[2] = {1, 3},
                       ly[2] = {-1.38629436f, -0.28768207f}, ldy[2] = {2, 1};
    const struct ln_in row[2] = {{y, 2, {1, 2}}, {dy, 2, {1, 2}}};
    const struct ln_in col[2] = {{y, 2, {2, 1}}, {dy, 2, {2, 1}}};
    const struct ln_in lrow[2] = {{ly, 1, {2}}, {ldy, 1, {2}}};
    keel_tensor *t[2] = {NULL, NULL}, *o[1] = {NULL};
    keel_attr ax0 = keel_attr_int("axis", 0);
    float out[3][6];
    int nout = 0;

    /* sum(dout out) = 2.5; dx = out (dout - 2.5) = -0.375, 0.375 */
    CU_ASSERT_EQUAL_FATAL(ln_case(KEEL_OP_SOFTMAX_GRAD, row, 2, out, 6),
                          KEEL_STATUS_OK);
    CU_ASSERT(out[0][0] == -0.375f && out[0][1] == 0.375f);
    /* the same along axis 0 of [2, 1] */
    for (int i = 0; i < 2; i++)
        CU_ASSERT_EQUAL_FATAL(keel_tensor_from_floats(col[i].v, 2,
                                                      col[i].shape, KEEL_F32,
                                                      "npu:0", &t[i]),
                              KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_op_run(KEEL_OP_SOFTMAX_GRAD, t, 2, &ax0, 1, o,
                                      1, &nout),
                          KEEL_STATUS_OK);
    keel_tensor_to_host(o[0], out[1], 2 * sizeof(float));
    CU_ASSERT(out[1][0] == -0.375f && out[1][1] == 0.375f);
    keel_tensor_free(o[0]);
    for (int i = 0; i < 2; i++)
        keel_tensor_free(t[i]);
    /* out = log(0.25, 0.75), dout = 2, 1: dx = dout - e^out 3 = 1.25, -1.25 */
    CU_ASSERT_EQUAL_FATAL(ln_case(KEEL_OP_LOG_SOFTMAX_GRAD, lrow, 2, out, 6),
                          KEEL_STATUS_OK);
    CU_ASSERT(near(out[0][0], 1.25) && near(out[0][1], -1.25));
    fail_next("aclnnLogSoftmaxBackwardGetWorkspaceSize", 161002);
    CU_ASSERT_EQUAL(ln_case(KEEL_OP_LOG_SOFTMAX_GRAD, lrow, 2, out, 6),
                    KEEL_STATUS_NOT_SUPPORTED);
    expect_msg("aclnnLogSoftmaxBackwardGetWorkspaceSize", "161002");
}

/* ---- cross_entropy ------------------------------------------------------- */

/* logits [[0, 0], [ln 3, 0]], labels 0, 1, class weight 1, 2; loss and
 * softmax read back. */
static keel_status ce_case(const keel_attr *at, int nat, float *loss,
                           float *sm)
{
    static const float lg[4] = {0, 0, 1.09861229f, 0}, w[2] = {1, 2};
    static const int64_t lb[2] = {0, 1};
    int64_t xs[2] = {2, 2}, ns[1] = {2};
    keel_tensor *t[3] = {NULL}, *o[2] = {NULL};
    keel_status st;
    int nout = 0;

    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_floats(lg, 2, xs, KEEL_F32,
                                                  "npu:0", &t[0]),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_host(lb, KEEL_I64, 1, ns,
                                                "npu:0", &t[1]),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_floats(w, 1, ns, KEEL_F32,
                                                  "npu:0", &t[2]),
                          KEEL_STATUS_OK);
    st = keel_op_run(KEEL_OP_CROSS_ENTROPY, t, 3, at, nat, o, 2, &nout);
    if (st == KEEL_STATUS_OK) {
        keel_tensor_to_host(o[0], loss,
                            (size_t)keel_tensor_numel(o[0]) * sizeof(float));
        keel_tensor_to_host(o[1], sm, 4 * sizeof(float));
    }
    for (int i = 0; i < 3; i++)
        keel_tensor_free(t[i]);
    for (int i = 0; i < nout; i++)
        keel_tensor_free(o[i]);
    return st;
}

static void test_cross_entropy(void)
{
    keel_attr none[2] = {keel_attr_str("reduction", "none"),
                         keel_attr_int("ignore_index", 1)};
    keel_attr sum[1] = {keel_attr_str("reduction", "sum")};
    float loss[2], sm[4];

    /* softmax rows 0.5, 0.5 and 0.75, 0.25; loss = -w[y] ln p[y] =
     * ln 2, -2 ln 0.25 */
    CU_ASSERT_EQUAL_FATAL(ce_case(none, 1, loss, sm), KEEL_STATUS_OK);
    CU_ASSERT(near(sm[0], 0.5) && near(sm[1], 0.5) && near(sm[2], 0.75) &&
              near(sm[3], 0.25));
    CU_ASSERT(near(loss[0], log(2.0)) && near(loss[1], -2 * log(0.25)));
    /* ignore_index 1: the second sample counts 0 */
    CU_ASSERT_EQUAL_FATAL(ce_case(none, 2, loss, sm), KEEL_STATUS_OK);
    CU_ASSERT(near(loss[0], log(2.0)) && loss[1] == 0);
    CU_ASSERT_EQUAL_FATAL(ce_case(sum, 1, loss, sm), KEEL_STATUS_OK);
    CU_ASSERT(near(loss[0], log(2.0) - 2 * log(0.25)));
    /* 'mean' with a class weight is refused: Paddle's divisor */
    CU_ASSERT_EQUAL(ce_case(NULL, 0, loss, sm), KEEL_STATUS_NOT_SUPPORTED);
    expect_msg("cross_entropy", "reduction 'mean'");
    fail_next("aclnnNLLLoss", 561000);
    CU_ASSERT_EQUAL(ce_case(sum, 1, loss, sm), KEEL_STATUS_DEVICE_ERROR);
    expect_msg("aclnnNLLLoss ", "aclnnStatus 561000");
}

/* softmax [[0.5, 0.5], [0.75, 0.25]], labels 0, 1, no weight. */
static keel_status ceg_case(const keel_attr *at, int nat, const float *dl,
                            int ndl, float *dx)
{
    static const float sm[4] = {0.5f, 0.5f, 0.75f, 0.25f};
    static const int64_t lb[2] = {0, 1};
    int64_t xs[2] = {2, 2}, ns[1] = {2};
    keel_tensor *t[3] = {NULL}, *o[1] = {NULL};
    keel_status st;
    int nout = 0;

    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_floats(sm, 2, xs, KEEL_F32,
                                                  "npu:0", &t[0]),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_host(lb, KEEL_I64, 1, ns, "npu:0",
                                                &t[1]),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_floats(dl, ndl, ns, KEEL_F32,
                                                  "npu:0", &t[2]),
                          KEEL_STATUS_OK);
    st = keel_op_run(KEEL_OP_CROSS_ENTROPY_GRAD, t, 3, at, nat, o, 1, &nout);
    if (st == KEEL_STATUS_OK)
        keel_tensor_to_host(o[0], dx, 4 * sizeof(float));
    for (int i = 0; i < 3; i++)
        keel_tensor_free(t[i]);
    for (int i = 0; i < nout; i++)
        keel_tensor_free(o[i]);
    return st;
}

static void test_cross_entropy_grad(void)
{
    keel_attr none[1] = {keel_attr_str("reduction", "none")};
    static const float dl2[2] = {1, 2}, dl1[1] = {1};
    float dx[4];

    /* dloss (softmax - onehot): 1 (-0.5, 0.5), 2 (0.75, -0.75) */
    CU_ASSERT_EQUAL_FATAL(ceg_case(none, 1, dl2, 1, dx), KEEL_STATUS_OK);
    CU_ASSERT(near(dx[0], -0.5) && near(dx[1], 0.5) && near(dx[2], 1.5) &&
              near(dx[3], -1.5));
    /* 'mean' without weight, ignore_index -100: divided by N = 2 */
    CU_ASSERT_EQUAL_FATAL(ceg_case(NULL, 0, dl1, 0, dx), KEEL_STATUS_OK);
    CU_ASSERT(near(dx[0], -0.25) && near(dx[1], 0.25) && near(dx[2], 0.375) &&
              near(dx[3], -0.375));
    fail_next("aclnnNLLLossBackwardGetWorkspaceSize", 161002);
    CU_ASSERT_EQUAL(ceg_case(none, 1, dl2, 1, dx), KEEL_STATUS_NOT_SUPPORTED);
    expect_msg("aclnnNLLLossBackwardGetWorkspaceSize", "161002");
}

int main(void)
{
    CU_pSuite suite;
    unsigned failed;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    suite = CU_add_suite("npu training kernels over the stand-in", train_init,
                         NULL);
    CU_add_test(suite, "the float kernels are offered", test_offered);
    CU_add_test(suite, "sgd_update by hand", test_sgd);
    CU_add_test(suite, "momentum_update by hand", test_momentum);
    CU_add_test(suite, "adam_update by hand", test_adam);
    CU_add_test(suite, "adamw_update by hand", test_adamw);
    CU_add_test(suite, "mixed-dtype gradient -> NOT_SUPPORTED",
                test_refused_mixed);
    CU_add_test(suite, "older core, adam -> NOT_SUPPORTED",
                test_refused_older_core);
    CU_add_test(suite, "aclnnInplaceAddcdivGetWorkspaceSize refuses -> "
                       "NOT_SUPPORTED, nothing changed",
                test_phase1_refusal);
    CU_add_test(suite, "aclnnInplaceMuls fails -> DEVICE_ERROR",
                test_launch_failure);
    CU_add_test(suite, "layer_norm by hand", test_layer_norm);
    CU_add_test(suite, "layer_norm_grad by hand", test_layer_norm_grad);
    CU_add_test(suite, "layer_norm_grad without scale -> NOT_SUPPORTED",
                test_layer_norm_grad_refused);
    CU_add_test(suite, "aclnnLayerNorm phase 1 / 2 failures",
                test_layer_norm_phase1);
    CU_add_test(suite, "batch_norm by hand; inference -> NOT_SUPPORTED",
                test_batch_norm);
    CU_add_test(suite, "batch_norm_grad by hand; aclnnBatchNormBackward fails",
                test_batch_norm_grad);
    CU_add_test(suite, "softmax_grad and log_softmax_grad by hand",
                test_softmax_grads);
    CU_add_test(suite, "cross_entropy by hand; mean -> NOT_SUPPORTED",
                test_cross_entropy);
    CU_add_test(suite, "cross_entropy_grad by hand", test_cross_entropy_grad);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_suites_failed() +
             CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return failed ? 1 : 0;
}
