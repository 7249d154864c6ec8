/*
 * The mlu plugin's training kernels over the stand-in (meson test
 * mlu-train-standin, plugins/mlu/tests/meson.build).
 *
 *   test_mlu_train standin   the optimizer updates on mlu:0 through the
 *                            core in strict mode: one small update
 *                            per op whose result was worked out by hand
 *                            (values chosen so every step is exact in
 *                            float32), a grad of another dtype refused
 *                            with NOT_SUPPORTED, and injected CNNL failures
 *                            mapped to keel statuses naming the call;
 *                            the same for layer_norm, layer_norm_grad,
 *                            batch_norm and batch_norm_grad.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>
#include <keel/ops.h>
#include <keel/runtime.h>
#include <keel/tensor.h>

#include "cnrt_api.h"

static void (*arm)(const char *name, int code);
static keel_place mlu0;
static const keel_plugin_api *api;

static const keel_plugin_api *mlu_table(void)
{
    keel_plugin_info info;

    for (int i = 0; i < keel_plugin_count(); i++)
        if (keel_plugin_get_info(i, &info) == KEEL_STATUS_OK && info.name &&
            !strcmp(info.name, "mlu"))
            return keel_plugin_table(i);
    return NULL;
}

static int standin_setup(void)
{
    const char *lib = getenv("KEEL_MLU_CNRT_LIBRARY");
    void *h;

    if (!lib || keel_place_parse("mlu:0", &mlu0) != KEEL_STATUS_OK ||
        !(api = mlu_table()))
        return -1;
    if (!(h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD)))
        return -1;
    *(void **)&arm = dlsym(h, "cnrt_standin_fail_next");
    dlclose(h);
    return arm ? 0 : -1;
}

static char last_msg[1024]; /* keel_last_error() of the last update */

static void saw(const char *a, const char *b)
{
    const char *m = last_msg;

    printf("\n    %s\n", m);
    CU_ASSERT_PTR_NOT_NULL(strstr(m, a));
    if (b)
        CU_ASSERT_PTR_NOT_NULL(strstr(m, b));
}

/* ---- one update of 4 float32 elements ------------------------------------- */

#define N 4

struct upd {
    const char *op;
    int nin;
    float in[4][N];  /* param, grad, states */
    keel_attr attr[8];
    int nattr;
    keel_dtype grad_dt; /* 0: float32 */
};

static keel_attr fa(const char *name, double v)
{
    keel_attr a = {.name = name, .type = KEEL_ATTR_FLOAT};

    a.v.f = v;
    return a;
}

/* Runs u on mlu:0 through the core (strict mode: a refusal is an error,
 * not a CPU fallback); the inputs come back in u->in. */
static keel_status run_update(struct upd *u)
{
    const int64_t dims[1] = {N};
    keel_tensor *t[4] = {NULL, NULL, NULL, NULL};
    keel_op_id op;
    keel_status st;
    int nout = 0;

    CU_ASSERT_EQUAL_FATAL(keel_op_find(u->op, &op), KEEL_STATUS_OK);
    for (int i = 0; i < u->nin; i++) {
        keel_dtype dt = i == 1 && u->grad_dt ? u->grad_dt : KEEL_F32;
        CU_ASSERT_EQUAL_FATAL(
            keel_tensor_from_floats(u->in[i], 1, dims, dt, "mlu:0", &t[i]),
            KEEL_STATUS_OK);
    }
    st = keel_op_run(op, t, u->nin, u->attr, u->nattr, NULL, 0, &nout);
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s", keel_last_error());
    for (int i = 0; i < u->nin; i++) {
        if (!u->grad_dt || i != 1)
            CU_ASSERT_EQUAL(
                keel_tensor_to_host(t[i], u->in[i], sizeof(u->in[i])),
                KEEL_STATUS_OK);
        keel_tensor_free(t[i]);
    }
    snprintf(last_msg, sizeof(last_msg), "%s", msg);
    return st;
}

static void expect(const float *got, const float want[N])
{
    for (int i = 0; i < N; i++) {
        if (got[i] != want[i])
            printf("\n    [%d]: got %.9g, want %.9g", i, got[i], want[i]);
        CU_ASSERT_EQUAL(got[i], want[i]);
    }
}

static const float p0[N] = {1.0f, 2.0f, -1.0f, 0.5f};

static void t_sgd(void)
{
    /* g' = g + 0.5 p = {1, 0, 1.5, 0.25}; p - 0.5 g' */
    static const float want[N] = {0.5f, 2.0f, -1.75f, 0.375f};
    struct upd u = {.op = "sgd_update", .nin = 2, .nattr = 2};

    memcpy(u.in[0], p0, sizeof(p0));
    memcpy(u.in[1], (float[N]){0.5f, -1.0f, 2.0f, 0.0f}, sizeof(p0));
    u.attr[0] = fa("lr", 0.5);
    u.attr[1] = fa("weight_decay", 0.5);
    CU_ASSERT_EQUAL_FATAL(run_update(&u), KEEL_STATUS_OK);
    expect(u.in[0], want);
    expect(u.in[1], (float[N]){0.5f, -1.0f, 2.0f, 0.0f}); /* grad kept */
}

static void t_momentum(void)
{
    /* v = 0.5 v + g = {1, -1, 1, 2}; p - 0.5 v */
    static const float want_p[N] = {0.5f, 2.5f, -1.5f, -0.5f};
    static const float want_v[N] = {1.0f, -1.0f, 1.0f, 2.0f};
    /* Nesterov: p - 0.5 (g + 0.5 v) = p - 0.5 {1, -1.5, 2.5, 1} */
    static const float want_pn[N] = {0.5f, 2.75f, -2.25f, 0.0f};
    struct upd u = {.op = "momentum_update", .nin = 3, .nattr = 2};

    memcpy(u.in[0], p0, sizeof(p0));
    memcpy(u.in[1], (float[N]){0.5f, -1.0f, 2.0f, 0.0f}, sizeof(p0));
    memcpy(u.in[2], (float[N]){1.0f, 0.0f, -2.0f, 4.0f}, sizeof(p0));
    u.attr[0] = fa("lr", 0.5);
    u.attr[1] = fa("mu", 0.5);
    struct upd n = u;
    CU_ASSERT_EQUAL_FATAL(run_update(&u), KEEL_STATUS_OK);
    expect(u.in[0], want_p);
    expect(u.in[2], want_v);

    n.attr[2] = (keel_attr){.name = "use_nesterov", .type = KEEL_ATTR_BOOL};
    n.attr[2].v.i = 1;
    n.nattr = 3;
    CU_ASSERT_EQUAL_FATAL(run_update(&n), KEEL_STATUS_OK);
    expect(n.in[0], want_pn);
    expect(n.in[2], want_v);
}

/* beta1 = beta1_pow = 0.5, beta2 = beta2_pow = 0.75, epsilon 0: lr_t = lr
 * sqrt(0.25) / 0.5 = lr. From m = v = 0 and g = {2, -4, 1, 8}:
 * m = 0.5 g = {1, -2, 0.5, 4}, v = 0.25 g^2 = {1, 4, 0.25, 16},
 * m / sqrt(v) = {1, -1, 1, 1}. */
static void adam_case(struct upd *u, const char *op)
{
    memset(u, 0, sizeof(*u));
    u->op = op;
    u->nin = 4;
    memcpy(u->in[0], p0, sizeof(p0));
    memcpy(u->in[1], (float[N]){2.0f, -4.0f, 1.0f, 8.0f}, sizeof(p0));
    u->attr[0] = fa("lr", 0.25);
    u->attr[1] = fa("beta1", 0.5);
    u->attr[2] = fa("beta2", 0.75);
    u->attr[3] = fa("epsilon", 0);
    u->attr[4] = fa("beta1_pow", 0.5);
    u->attr[5] = fa("beta2_pow", 0.75);
    u->nattr = 6;
}

static void t_adam(void)
{
    static const float want_p[N] = {0.75f, 2.25f, -1.25f, 0.25f};
    static const float want_m[N] = {1.0f, -2.0f, 0.5f, 4.0f};
    static const float want_v[N] = {1.0f, 4.0f, 0.25f, 16.0f};
    struct upd u;

    adam_case(&u, "adam_update");
    CU_ASSERT_EQUAL_FATAL(run_update(&u), KEEL_STATUS_OK);
    expect(u.in[0], want_p);
    expect(u.in[2], want_m);
    expect(u.in[3], want_v);
}

static void t_adamw(void)
{
    /* p = p - 0.25 * 0.5 p = 0.875 p, then p - 0.25 {1, -1, 1, 1} */
    static const float want_p[N] = {0.625f, 2.0f, -1.125f, 0.1875f};
    struct upd u;

    adam_case(&u, "adamw_update");
    u.attr[u.nattr++] = fa("coeff", 0.5);
    CU_ASSERT_EQUAL_FATAL(run_update(&u), KEEL_STATUS_OK);
    expect(u.in[0], want_p);
}

static void t_refused(void)
{
    struct upd u = {.op = "sgd_update", .nin = 2, .nattr = 1,
                    .grad_dt = KEEL_F16};

    memcpy(u.in[0], p0, sizeof(p0));
    u.attr[0] = fa("lr", 0.5);
    CU_ASSERT_EQUAL(run_update(&u), KEEL_STATUS_NOT_SUPPORTED);
    saw("sgd_update", "float16 grad");
    expect(u.in[0], p0); /* untouched */
}

static void t_failures(void)
{
    struct upd u;

    adam_case(&u, "adam_update");
    arm("cnnlDiv_v2", CNNL_STATUS_EXECUTION_FAILED);
    CU_ASSERT_EQUAL(run_update(&u), KEEL_STATUS_DEVICE_ERROR);
    saw("cnnlDiv_v2", "CNNL_STATUS_EXECUTION_FAILED");

    /* a refusal after m and v were written in place must not reach the
     * CPU fallback, which would update them again */
    adam_case(&u, "adam_update");
    arm("cnnlSqrt_v2", CNNL_STATUS_BAD_PARAM);
    CU_ASSERT_EQUAL(run_update(&u), KEEL_STATUS_DEVICE_ERROR);
    saw("cnnlSqrt_v2", "partly updated");

    /* before any write a refusal is NOT_SUPPORTED (the fallback may run) */
    adam_case(&u, "adam_update");
    arm("cnnlOpTensor", CNNL_STATUS_BAD_PARAM);
    CU_ASSERT_EQUAL(run_update(&u), KEEL_STATUS_NOT_SUPPORTED);
    saw("cnnlOpTensor", "CNNL_STATUS_BAD_PARAM");
    expect(u.in[0], p0);

    adam_case(&u, "adam_update");
    arm("cnnlGetDivWorkspaceSize", CNNL_STATUS_ALLOC_FAILED);
    CU_ASSERT_EQUAL(run_update(&u), KEEL_STATUS_OUT_OF_MEMORY);
    saw("cnnlGetDivWorkspaceSize", "CNNL_STATUS_ALLOC_FAILED");
    expect(u.in[0], p0); /* failed before any launch */
}

/* ---- layer_norm and layer_norm_grad ----------------------------------------- */

/* One float32 input: data and shape. */
struct arg {
    const float *v;
    int ndim;
    int64_t dims[3];
    float *back; /* not NULL: the input's data after the op lands here */
};

/* Runs op on mlu:0 with the inputs in, its outputs copied to out[o]
 * (out_n[o] floats each). */
static keel_status run_op(const char *name, const struct arg *in, int nin,
                          const keel_attr *attr, int nattr, float **out,
                          const size_t *out_n, int nout)
{
    keel_tensor *t[6] = {NULL}, *res[4] = {NULL};
    keel_op_id op;
    keel_status st = KEEL_STATUS_OK;
    int got = 0;

    CU_ASSERT_EQUAL_FATAL(keel_op_find(name, &op), KEEL_STATUS_OK);
    for (int i = 0; i < nin && !st; i++)
        st = keel_tensor_from_floats(in[i].v, in[i].ndim, in[i].dims,
                                     KEEL_F32, "mlu:0", &t[i]);
    CU_ASSERT_EQUAL_FATAL(st, KEEL_STATUS_OK);
    st = keel_op_run(op, t, nin, attr, nattr, res, 4, &got);
    snprintf(last_msg, sizeof(last_msg), "%s", keel_last_error());
    for (int i = 0; i < nin; i++)
        if (in[i].back)
            CU_ASSERT_EQUAL(
                keel_tensor_to_host(t[i], in[i].back,
                                    (size_t)keel_tensor_numel(t[i]) *
                                        sizeof(float)),
                KEEL_STATUS_OK);
    if (st == KEEL_STATUS_OK) {
        CU_ASSERT_EQUAL(got, nout);
        for (int o = 0; o < nout && o < got; o++)
            CU_ASSERT_EQUAL(keel_tensor_to_host(res[o], out[o],
                                                out_n[o] * sizeof(float)),
                            KEEL_STATUS_OK);
    }
    for (int o = 0; o < got; o++)
        keel_tensor_free(res[o]);
    for (int i = 0; i < nin; i++)
        keel_tensor_free(t[i]);
    return st;
}

static void expect_n(const float *got, const float *want, int n)
{
    for (int i = 0; i < n; i++) {
        if (got[i] != want[i])
            printf("\n    [%d]: got %.9g, want %.9g", i, got[i], want[i]);
        CU_ASSERT_EQUAL(got[i], want[i]);
    }
}

/* Rows {0, 0, 4, 4} and {-1, -1, 3, 3}: means 2 and 1, variances 4, so
 * with epsilon 0 invstd is 0.5 and xhat {-1, -1, 1, 1} in both rows. */
static const float ln_x[8] = {0, 0, 4, 4, -1, -1, 3, 3};
static const float ln_scale[4] = {2, 1, 0.5f, 1};
static const float ln_bias[4] = {1, 0, -1, 0.5f};

static void t_layer_norm(void)
{
    /* y = xhat scale + bias */
    static const float want_y[8] = {-1, -1, -0.5f, 1.5f, -1, -1, -0.5f, 1.5f};
    static const float want_mean[2] = {2, 1}, want_inv[2] = {0.5f, 0.5f};
    const struct arg in[3] = {{ln_x, 2, {2, 4}, NULL}, {ln_scale, 1, {4}, NULL},
                              {ln_bias, 1, {4}, NULL}};
    keel_attr at[1] = {fa("epsilon", 0)};
    float y[8], mean[2], inv[2], *out[3] = {y, mean, inv};
    const size_t n[3] = {8, 2, 2};

    CU_ASSERT_EQUAL_FATAL(run_op("layer_norm", in, 3, at, 1, out, n, 3),
                          KEEL_STATUS_OK);
    expect_n(y, want_y, 8);
    expect_n(mean, want_mean, 2);
    expect_n(inv, want_inv, 2);
}

static void t_layer_norm_grad(void)
{
    /* row 0: dy {1, 0, 2, 0}, g = dy scale = {2, 0, 1, 0}, mean(g) 0.75,
     * mean(g xhat) -0.25: dx = 0.5 (g - 0.75 + 0.25 xhat);
     * row 1: dy {0, 1, 0, 1}, g = {0, 1, 0, 1}, 0.5 and 0:
     * dx = 0.5 (g - 0.5); dscale = sum dy xhat, dbias = sum dy */
    static const float dy[8] = {1, 0, 2, 0, 0, 1, 0, 1};
    static const float mean[2] = {2, 1}, inv[2] = {0.5f, 0.5f};
    static const float want_dx[8] = {0.5f,   -0.5f, 0.25f,  -0.25f,
                                     -0.25f, 0.25f, -0.25f, 0.25f};
    static const float want_ds[4] = {-1, -1, 2, 1}, want_db[4] = {1, 1, 2, 1};
    const struct arg in[5] = {{ln_x, 2, {2, 4}, NULL},
                              {ln_scale, 1, {4}, NULL},
                              {mean, 1, {2}, NULL},
                              {inv, 1, {2}, NULL},
                              {dy, 2, {2, 4}, NULL}};
    float dx[8], ds[4], db[4], *out[3] = {dx, ds, db};
    const size_t n[3] = {8, 4, 4};

    CU_ASSERT_EQUAL_FATAL(
        run_op("layer_norm_grad", in, 5, NULL, 0, out, n, 3), KEEL_STATUS_OK);
    expect_n(dx, want_dx, 8);
    expect_n(ds, want_ds, 4);
    expect_n(db, want_db, 4);
}

static void t_layer_norm_refused(void)
{
    const struct arg in[2] = {{ln_x, 2, {2, 4}, NULL}, {ln_scale, 1, {4}, NULL}};
    float y[8], mean[2], inv[2], *out[3] = {y, mean, inv};
    const size_t n[3] = {8, 2, 2};

    /* a scale without a bias: strict mode, so no CPU fallback hides it */
    CU_ASSERT_EQUAL(run_op("layer_norm", in, 2, NULL, 0, out, n, 3),
                    KEEL_STATUS_NOT_SUPPORTED);
    saw("layer_norm", "a scale without a bias");
}

static void t_layer_norm_failure(void)
{
    const struct arg in[3] = {{ln_x, 2, {2, 4}, NULL}, {ln_scale, 1, {4}, NULL},
                              {ln_bias, 1, {4}, NULL}};
    float y[8], mean[2], inv[2], *out[3] = {y, mean, inv};
    const size_t n[3] = {8, 2, 2};

    arm("cnnlLayerNormForward", CNNL_STATUS_EXECUTION_FAILED);
    CU_ASSERT_EQUAL(run_op("layer_norm", in, 3, NULL, 0, out, n, 3),
                    KEEL_STATUS_DEVICE_ERROR);
    saw("cnnlLayerNormForward", "CNNL_STATUS_EXECUTION_FAILED");
    arm("cnnlGetLayerNormBackwardWorkspaceSize", CNNL_STATUS_NOT_SUPPORTED);
    const struct arg gin[5] = {{ln_x, 2, {2, 4}, NULL}, {ln_scale, 1, {4}, NULL},
                               {(float[2]){2, 1}, 1, {2}, NULL},
                               {(float[2]){0.5f, 0.5f}, 1, {2}, NULL},
                               {ln_x, 2, {2, 4}, NULL}};
    float dx[8], ds[4], db[4], *gout[3] = {dx, ds, db};
    const size_t gn[3] = {8, 4, 4};
    CU_ASSERT_EQUAL(run_op("layer_norm_grad", gin, 5, NULL, 0, gout, gn, 3),
                    KEEL_STATUS_NOT_SUPPORTED);
    saw("cnnlGetLayerNormBackwardWorkspaceSize", "CNNL_STATUS_NOT_SUPPORTED");
}

/* ---- batch_norm and batch_norm_grad ----------------------------------------- */

/* x [2, 2, 2]: channel 0 holds {0, 4, 4, 0} (mean 2, variance 4, invstd
 * 0.5 with epsilon 0, xhat {-1, 1, 1, -1} in (n, s) order), channel 1
 * {1, 1, 3, 3} (mean 2, variance 1, invstd 1, xhat {-1, -1, 1, 1}). */
static const float bn_x[8] = {0, 4, 1, 1, 4, 0, 3, 3};
static const float bn_scale[2] = {2, 0.5f}, bn_bias[2] = {1, -1};
/* y = xhat scale + bias, laid out as x */
static const float bn_y[8] = {-1, 3, -1.5f, -1.5f, 3, -1, -0.5f, -0.5f};

static void t_batch_norm(void)
{
    /* running = 0.5 running + 0.5 batch (biased variance) */
    static const float want_rm[2] = {1, 3}, want_rv[2] = {3, 1};
    static const float want_mean[2] = {2, 2}, want_inv[2] = {0.5f, 1};
    float rm[2] = {0, 4}, rv[2] = {2, 1}, rm_after[2], rv_after[2];
    const struct arg in[5] = {{bn_x, 3, {2, 2, 2}, NULL},
                              {bn_scale, 1, {2}, NULL},
                              {bn_bias, 1, {2}, NULL},
                              {rm, 1, {2}, rm_after},
                              {rv, 1, {2}, rv_after}};
    keel_attr at[3] = {fa("epsilon", 0), fa("momentum", 0.5),
                       {.name = "training", .type = KEEL_ATTR_BOOL}};
    float y[8], mean[2], inv[2], *out[3] = {y, mean, inv};
    const size_t n[3] = {8, 2, 2};

    at[2].v.i = 1;
    CU_ASSERT_EQUAL_FATAL(run_op("batch_norm", in, 5, at, 3, out, n, 3),
                          KEEL_STATUS_OK);
    expect_n(y, bn_y, 8);
    expect_n(mean, want_mean, 2);
    expect_n(inv, want_inv, 2);
    expect_n(rm_after, want_rm, 2);
    expect_n(rv_after, want_rv, 2);
}

static void t_batch_norm_inference(void)
{
    /* the running statistics are the batch's: the same y; saved mean and
     * invstd from them, the running ones untouched */
    float rm[2] = {2, 2}, rv[2] = {4, 1}, rm_after[2], rv_after[2];
    const struct arg in[5] = {{bn_x, 3, {2, 2, 2}, NULL},
                              {bn_scale, 1, {2}, NULL},
                              {bn_bias, 1, {2}, NULL},
                              {rm, 1, {2}, rm_after},
                              {rv, 1, {2}, rv_after}};
    keel_attr at[2] = {fa("epsilon", 0),
                       {.name = "training", .type = KEEL_ATTR_BOOL}};
    float y[8], mean[2], inv[2], *out[3] = {y, mean, inv};
    const size_t n[3] = {8, 2, 2};

    at[1].v.i = 0;
    CU_ASSERT_EQUAL_FATAL(run_op("batch_norm", in, 5, at, 2, out, n, 3),
                          KEEL_STATUS_OK);
    expect_n(y, bn_y, 8);
    expect_n(mean, rm, 2);
    expect_n(inv, (float[2]){0.5f, 1}, 2);
    expect_n(rm_after, rm, 2);
    expect_n(rv_after, rv, 2);
}

/* channel 0: dy {0, 2, 0, 0}, sum 2, sum dy xhat 2: dx = 2 * 0.5 (dy - 0.5
 * - 0.5 xhat) = {0, 1, -1, 0}; channel 1: dy {0, 0, 2, 0}, 2 and 2:
 * dx = 0.5 * 1 (dy - 0.5 - 0.5 xhat) = {0, 0, 0.5, -0.5} */
static const float bn_dy[8] = {0, 2, 0, 0, 0, 0, 2, 0};

static keel_status run_bn_grad(bool training, float dx[8], float ds[2],
                               float db[2])
{
    const struct arg in[5] = {{bn_x, 3, {2, 2, 2}, NULL},
                              {bn_scale, 1, {2}, NULL},
                              {(float[2]){2, 2}, 1, {2}, NULL},
                              {(float[2]){0.5f, 1}, 1, {2}, NULL},
                              {bn_dy, 3, {2, 2, 2}, NULL}};
    keel_attr at[2] = {fa("epsilon", 0),
                       {.name = "training", .type = KEEL_ATTR_BOOL}};
    float *out[3] = {dx, ds, db};
    const size_t n[3] = {8, 2, 2};

    at[1].v.i = training;
    return run_op("batch_norm_grad", in, 5, at, 2, out, n, 3);
}

static void t_batch_norm_grad(void)
{
    static const float want_dx[8] = {0, 1, 0, 0, -1, 0, 0.5f, -0.5f};
    static const float want_ds[2] = {2, 2}, want_db[2] = {2, 2};
    float dx[8], ds[2], db[2];

    CU_ASSERT_EQUAL_FATAL(run_bn_grad(true, dx, ds, db), KEEL_STATUS_OK);
    expect_n(dx, want_dx, 8);
    expect_n(ds, want_ds, 2);
    expect_n(db, want_db, 2);
}

static void t_batch_norm_refused_and_failures(void)
{
    float dx[8], ds[2], db[2];

    CU_ASSERT_EQUAL(run_bn_grad(false, dx, ds, db), KEEL_STATUS_NOT_SUPPORTED);
    saw("batch_norm_grad", "training 0");

    arm("cnnlTranspose_v2", CNNL_STATUS_EXECUTION_FAILED);
    CU_ASSERT_EQUAL(run_bn_grad(true, dx, ds, db), KEEL_STATUS_DEVICE_ERROR);
    saw("cnnlTranspose_v2", "CNNL_STATUS_EXECUTION_FAILED");

    arm("cnnlBatchNormBackward", CNNL_STATUS_ARCH_MISMATCH);
    CU_ASSERT_EQUAL(run_bn_grad(true, dx, ds, db), KEEL_STATUS_NOT_SUPPORTED);
    saw("cnnlBatchNormBackward", "CNNL_STATUS_ARCH_MISMATCH");
}

int main(int argc, char **argv)
{
    CU_pSuite s;
    unsigned bad;

    if (argc < 2 || strcmp(argv[1], "standin")) {
        fprintf(stderr, "usage: %s standin\n", argv[0]);
        return 2;
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("mlu training kernels over the stand-in", standin_setup,
                     NULL);
    CU_add_test(s, "sgd_update by hand", t_sgd);
    CU_add_test(s, "momentum_update by hand", t_momentum);
    CU_add_test(s, "adam_update by hand", t_adam);
    CU_add_test(s, "adamw_update by hand", t_adamw);
    CU_add_test(s, "a grad of another dtype is refused", t_refused);
    CU_add_test(s, "CNNL failures map to keel statuses", t_failures);
    CU_add_test(s, "layer_norm by hand", t_layer_norm);
    CU_add_test(s, "layer_norm_grad by hand", t_layer_norm_grad);
    CU_add_test(s, "layer_norm: a lone scale is refused", t_layer_norm_refused);
    CU_add_test(s, "layer_norm: CNNL failures", t_layer_norm_failure);
    CU_add_test(s, "batch_norm (training) by hand", t_batch_norm);
    CU_add_test(s, "batch_norm (inference) by hand", t_batch_norm_inference);
    CU_add_test(s, "batch_norm_grad by hand", t_batch_norm_grad);
    CU_add_test(s, "batch_norm_grad: refusal and CNNL failures",
                t_batch_norm_refused_and_failures);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    bad = CU_get_number_of_failures() + CU_get_number_of_suites_failed() +
          CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return bad ? 1 : 0;
}
