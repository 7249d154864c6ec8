/*
 * Mixed precision: auto_cast's per-op dtypes at each level, custom lists,
 * nesting, the linear/conv2d bias composition (checked bitwise against
 * the same ops run by hand), gradients through the casts, backward passes
 * left uncast, the cast cache, decorate O2 with master weights, and the
 * GradScaler's state machine and state dict.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>

#include <keel/amp.h>
#include <keel/autograd.h>
#include <keel/io.h>
#include <keel/nn.h>
#include <keel/ops.h>
#include <keel/optim.h>

#include "check.h"

static keel_tensor *tens(keel_dtype dt, int ndim, const int64_t *shape,
                         float seed)
{
    int64_t n = 1;
    float *v;
    keel_tensor *t = NULL;

    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    v = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        v[i] = sinf(seed + 0.37f * (float)i) * 1.7f;
    if (keel_tensor_from_floats(v, ndim, shape, dt, "cpu:0", &t) !=
        KEEL_STATUS_OK)
        t = NULL;
    free(v);
    return t;
}

static keel_amp_options opts(keel_amp_level level, keel_dtype dt)
{
    keel_amp_options o = keel_amp_default_options();

    o.level = level;
    o.dtype = dt;
    return o;
}

/* The bytes of two tensors of the same dtype and shape are equal. */
static bool same_bits(const keel_tensor *a, const keel_tensor *b)
{
    size_t n;
    void *x, *y;
    bool eq;

    if (keel_tensor_dtype(a) != keel_tensor_dtype(b) ||
        keel_tensor_numel(a) != keel_tensor_numel(b))
        return false;
    n = (size_t)keel_tensor_numel(a) * keel_dtype_size(keel_tensor_dtype(a));
    x = malloc(n ? n : 1);
    y = malloc(n ? n : 1);
    eq = keel_tensor_to_host(a, x, n) == KEEL_STATUS_OK &&
         keel_tensor_to_host(b, y, n) == KEEL_STATUS_OK && !memcmp(x, y, n);
    free(x);
    free(y);
    return eq;
}

/* ---- decisions ------------------------------------------------------------ */

static void test_defaults(void)
{
    keel_amp_options o = keel_amp_default_options();

    CU_ASSERT(o.enable);
    CU_ASSERT_EQUAL(o.level, KEEL_AMP_O1);
    CU_ASSERT_EQUAL(o.dtype, KEEL_F16);
    CU_ASSERT(o.use_promote);
    CU_ASSERT(!keel_amp_is_enabled());
    CU_ASSERT_EQUAL(keel_amp_current_dtype(), KEEL_F32);
}

static void test_o1_dtypes(void)
{
    int64_t s[2] = {3, 4}, sw[2] = {4, 2};
    keel_tensor *x = tens(KEEL_F32, 2, s, 0), *w = tens(KEEL_F32, 2, sw, 1);
    keel_tensor *y = NULL, *z = NULL, *e = NULL, *r = NULL, *m = NULL;
    keel_amp_options o = opts(KEEL_AMP_O1, KEEL_BF16);

    OK(keel_amp_begin(&o));
    CU_ASSERT(keel_amp_is_enabled());
    OK(keel_matmul(x, w, false, false, &y));   /* white */
    CU_ASSERT_EQUAL(keel_tensor_dtype(y), KEEL_BF16);
    OK(keel_relu(y, &r));                       /* promote, all low */
    CU_ASSERT_EQUAL(keel_tensor_dtype(r), KEEL_BF16);
    OK(keel_exp(y, &e));                        /* black */
    CU_ASSERT_EQUAL(keel_tensor_dtype(e), KEEL_F32);
    OK(keel_add(y, e, &z));                     /* promote, one f32 */
    CU_ASSERT_EQUAL(keel_tensor_dtype(z), KEEL_F32);
    OK(keel_amp_end());
    /* Outside the scope nothing is cast. */
    OK(keel_matmul(x, w, false, false, &m));
    CU_ASSERT_EQUAL(keel_tensor_dtype(m), KEEL_F32);
    CU_ASSERT(!keel_amp_is_enabled());
    keel_tensor_free(x), keel_tensor_free(w), keel_tensor_free(y);
    keel_tensor_free(z), keel_tensor_free(e), keel_tensor_free(r);
    keel_tensor_free(m);
}

static void test_levels(void)
{
    keel_dtype f32 = KEEL_F32, bf = KEEL_BF16, both[2] = {KEEL_BF16, KEEL_F32};
    keel_dtype out;
    keel_amp_options o;

    /* O2: black ops promote, fp32 ops stay float32. */
    o = opts(KEEL_AMP_O2, KEEL_BF16);
    OK(keel_amp_begin(&o));
    OK(keel_amp_op_dtype(KEEL_OP_SOFTMAX, &bf, 1, &out));
    CU_ASSERT_EQUAL(out, KEEL_BF16);
    OK(keel_amp_op_dtype(KEEL_OP_SOFTMAX, &f32, 1, &out));
    CU_ASSERT_EQUAL(out, KEEL_F32);
    OK(keel_amp_op_dtype(KEEL_OP_EMBEDDING, &bf, 1, &out));
    CU_ASSERT_EQUAL(out, KEEL_F32);
    OK(keel_amp_op_dtype(KEEL_OP_MATMUL, &f32, 1, &out));
    CU_ASSERT_EQUAL(out, KEEL_BF16);
    OK(keel_amp_end());
    /* O2 without promote: everything but the fp32 class goes low. */
    o.use_promote = false;
    OK(keel_amp_begin(&o));
    OK(keel_amp_op_dtype(KEEL_OP_ADD, both, 2, &out));
    CU_ASSERT_EQUAL(out, KEEL_BF16);
    OK(keel_amp_op_dtype(KEEL_OP_SCATTER, &bf, 1, &out));
    CU_ASSERT_EQUAL(out, KEEL_F32);
    OK(keel_amp_end());
    /* O1 ignores use_promote = false, as Paddle does. */
    o = opts(KEEL_AMP_O1, KEEL_F16);
    o.use_promote = false;
    OK(keel_amp_begin(&o));
    OK(keel_amp_op_dtype(KEEL_OP_ADD, both, 2, &out));
    CU_ASSERT_EQUAL(out, KEEL_F32);
    OK(keel_amp_op_dtype(KEEL_OP_EXP, &bf, 1, &out));
    CU_ASSERT_EQUAL(out, KEEL_F32);
    OK(keel_amp_end());
    /* OD: white low, everything else float32. */
    o = opts(KEEL_AMP_OD, KEEL_F16);
    OK(keel_amp_begin(&o));
    OK(keel_amp_op_dtype(KEEL_OP_RELU, &bf, 1, &out));
    CU_ASSERT_EQUAL(out, KEEL_F32);
    OK(keel_amp_op_dtype(KEEL_OP_CONV2D, &f32, 1, &out));
    CU_ASSERT_EQUAL(out, KEEL_F16);
    OK(keel_amp_end());
    /* O0 casts nothing: inputs keep their dtypes. */
    o = opts(KEEL_AMP_O0, KEEL_F16);
    OK(keel_amp_begin(&o));
    CU_ASSERT(!keel_amp_is_enabled());
    OK(keel_amp_op_dtype(KEEL_OP_MATMUL, &f32, 1, &out));
    CU_ASSERT_EQUAL(out, KEEL_F32);
    OK(keel_amp_end());
}

static void test_custom_lists_and_nesting(void)
{
    const char *white[] = {"exp"}, *black[] = {"matmul"};
    const char *both[] = {"exp", "matmul"}, *unknown[] = {"no_such_op"};
    const char *none_op[] = {"equal"};
    keel_dtype f32 = KEEL_F32, out;
    keel_amp_options o = opts(KEEL_AMP_O1, KEEL_BF16), off;

    o.custom_white_list = white;
    o.num_custom_white = 1;
    o.custom_black_list = black;
    o.num_custom_black = 1;
    OK(keel_amp_begin(&o));
    OK(keel_amp_op_dtype(KEEL_OP_EXP, &f32, 1, &out));
    CU_ASSERT_EQUAL(out, KEEL_BF16);
    OK(keel_amp_op_dtype(KEEL_OP_MATMUL, &f32, 1, &out));
    CU_ASSERT_EQUAL(out, KEEL_F32);
    /* A disabled scope inside: nothing casts until it ends. */
    off = keel_amp_default_options();
    off.enable = false;
    OK(keel_amp_begin(&off));
    CU_ASSERT(!keel_amp_is_enabled());
    OK(keel_amp_op_dtype(KEEL_OP_EXP, &f32, 1, &out));
    CU_ASSERT_EQUAL(out, KEEL_F32);
    OK(keel_amp_end());
    CU_ASSERT(keel_amp_is_enabled());
    CU_ASSERT_EQUAL(keel_amp_current_dtype(), KEEL_BF16);
    OK(keel_amp_end());
    ERR(keel_amp_end(), KEEL_STATUS_INVALID_STATE, "without an open scope");

    o = opts(KEEL_AMP_O1, KEEL_BF16);
    o.custom_white_list = both;
    o.num_custom_white = 2;
    o.custom_black_list = black;
    o.num_custom_black = 1;
    ERR(keel_amp_begin(&o), KEEL_STATUS_INVALID_ARGUMENT, "both the custom");
    o.num_custom_black = 0;
    o.custom_white_list = unknown;
    o.num_custom_white = 1;
    ERR(keel_amp_begin(&o), KEEL_STATUS_INVALID_ARGUMENT,
        "'no_such_op') is not an op");
    o.custom_white_list = none_op;
    ERR(keel_amp_begin(&o), KEEL_STATUS_INVALID_ARGUMENT, "never cast");
    o = opts(KEEL_AMP_O1, KEEL_F32);
    ERR(keel_amp_begin(&o), KEEL_STATUS_INVALID_ARGUMENT,
        "float16 or bfloat16");
    o = opts((keel_amp_level)7, KEEL_F16);
    ERR(keel_amp_begin(&o), KEEL_STATUS_INVALID_ARGUMENT, "level 7");
    CU_ASSERT(!keel_amp_is_enabled());
}

/* Norms decide from x alone and keep float32 parameters (Paddle): a
 * bfloat16 x runs batch_norm in bfloat16 with float32 statistics, which
 * are still updated in place. */
static void test_norms(void)
{
    int64_t sx[2] = {6, 4}, sc[1] = {4};
    keel_tensor *x = tens(KEEL_BF16, 2, sx, 0), *xf = tens(KEEL_F32, 2, sx, 0);
    keel_tensor *scale = tens(KEEL_F32, 1, sc, 1), *bias = tens(KEEL_F32, 1, sc, 2);
    keel_tensor *mean = NULL, *var = NULL, *out[3] = {NULL}, *y = NULL;
    keel_tensor *in[5];
    keel_amp_options o = opts(KEEL_AMP_O1, KEEL_BF16);
    float m0[4], m1[4];
    int n = 0;

    OK(keel_zeros(1, sc, KEEL_F32, "cpu:0", &mean));
    OK(keel_ones(1, sc, KEEL_F32, "cpu:0", &var));
    in[0] = x, in[1] = scale, in[2] = bias, in[3] = mean, in[4] = var;
    OK(keel_tensor_to_host(mean, m0, sizeof(m0)));
    OK(keel_amp_begin(&o));
    OK(keel_op_run(KEEL_OP_BATCH_NORM, in, 5, NULL, 0, out, 3, &n));
    OK(keel_amp_end());
    CU_ASSERT_EQUAL(keel_tensor_dtype(out[0]), KEEL_BF16);
    CU_ASSERT_EQUAL(keel_tensor_dtype(mean), KEEL_F32);
    OK(keel_tensor_to_host(mean, m1, sizeof(m1)));
    CU_ASSERT(memcmp(m0, m1, sizeof(m0)) != 0); /* updated in place */
    for (int i = 0; i < n; i++)
        keel_tensor_free(out[i]), out[i] = NULL;
    in[0] = xf;
    OK(keel_amp_begin(&o));
    OK(keel_op_run(KEEL_OP_BATCH_NORM, in, 5, NULL, 0, out, 3, &n));
    OK(keel_amp_end());
    CU_ASSERT_EQUAL(keel_tensor_dtype(out[0]), KEEL_F32);
    for (int i = 0; i < n; i++)
        keel_tensor_free(out[i]), out[i] = NULL;
    /* layer_norm: black at O1 (float32); at O2 float16 with float32
     * parameters (decorate keeps them for float16) it runs in float16 */
    in[0] = x;
    OK(keel_amp_begin(&o));
    OK(keel_op_run(KEEL_OP_LAYER_NORM, in, 3, NULL, 0, out, 3, &n));
    OK(keel_amp_end());
    CU_ASSERT_EQUAL(keel_tensor_dtype(out[0]), KEEL_F32);
    for (int i = 0; i < n; i++)
        keel_tensor_free(out[i]), out[i] = NULL;
    o = opts(KEEL_AMP_O2, KEEL_F16);
    OK(keel_cast(x, KEEL_F16, &y));
    in[0] = y;
    OK(keel_amp_begin(&o));
    OK(keel_op_run(KEEL_OP_LAYER_NORM, in, 3, NULL, 0, out, 3, &n));
    OK(keel_amp_end());
    CU_ASSERT_EQUAL(keel_tensor_dtype(out[0]), KEEL_F16);
    CU_ASSERT_EQUAL(keel_tensor_dtype(scale), KEEL_F32);
    for (int i = 0; i < n; i++)
        keel_tensor_free(out[i]);
    keel_tensor_free(x), keel_tensor_free(xf), keel_tensor_free(scale);
    keel_tensor_free(bias), keel_tensor_free(mean), keel_tensor_free(var);
    keel_tensor_free(y);
}

/* ---- linear and conv2d with a float32 bias --------------------------------- */

static void test_linear_bias(void)
{
    int64_t sx[2] = {5, 6}, sw[2] = {6, 3}, sb[1] = {3};
    keel_tensor *x = tens(KEEL_F32, 2, sx, 0), *w = tens(KEEL_F32, 2, sw, 1);
    keel_tensor *b = tens(KEEL_F32, 1, sb, 2);
    keel_tensor *y = NULL, *xl = NULL, *wl = NULL, *m = NULL, *mf = NULL;
    keel_tensor *ref = NULL;
    keel_amp_options o = opts(KEEL_AMP_O1, KEEL_BF16);

    OK(keel_amp_begin(&o));
    OK(keel_linear(x, w, b, &y));
    OK(keel_amp_end());
    /* Paddle: matmul in bfloat16, the add of the float32 bias promotes. */
    CU_ASSERT_EQUAL(keel_tensor_dtype(y), KEEL_F32);
    OK(keel_cast(x, KEEL_BF16, &xl));
    OK(keel_cast(w, KEEL_BF16, &wl));
    OK(keel_linear(xl, wl, NULL, &m));
    OK(keel_cast(m, KEEL_F32, &mf));
    OK(keel_add(mf, b, &ref));
    CU_ASSERT(same_bits(y, ref));
    keel_tensor_free(x), keel_tensor_free(w), keel_tensor_free(b);
    keel_tensor_free(y), keel_tensor_free(xl), keel_tensor_free(wl);
    keel_tensor_free(m), keel_tensor_free(mf), keel_tensor_free(ref);
}

static void test_conv_bias(void)
{
    int64_t sx[4] = {2, 3, 5, 5}, sw[4] = {4, 3, 3, 3}, sb[1] = {4};
    int64_t sb3[3] = {4, 1, 1};
    keel_tensor *x = tens(KEEL_F32, 4, sx, 0), *w = tens(KEEL_F32, 4, sw, 1);
    keel_tensor *b = tens(KEEL_F32, 1, sb, 2);
    keel_tensor *y = NULL, *xl = NULL, *wl = NULL, *m = NULL, *mf = NULL;
    keel_tensor *ref = NULL, *b3 = NULL;
    keel_conv2d_params p = keel_conv2d_default_params();
    keel_amp_options o = opts(KEEL_AMP_O1, KEEL_BF16);

    OK(keel_amp_begin(&o));
    OK(keel_conv2d(x, w, b, &p, &y));
    OK(keel_amp_end());
    CU_ASSERT_EQUAL(keel_tensor_dtype(y), KEEL_F32);
    OK(keel_cast(x, KEEL_BF16, &xl));
    OK(keel_cast(w, KEEL_BF16, &wl));
    OK(keel_conv2d(xl, wl, NULL, &p, &m));
    CU_ASSERT_EQUAL(keel_tensor_dtype(m), KEEL_BF16);
    OK(keel_cast(m, KEEL_F32, &mf));
    OK(keel_reshape(b, 3, sb3, &b3));
    OK(keel_add(mf, b3, &ref));
    CU_ASSERT(same_bits(y, ref));
    keel_tensor_free(x), keel_tensor_free(w), keel_tensor_free(b);
    keel_tensor_free(y), keel_tensor_free(xl), keel_tensor_free(wl);
    keel_tensor_free(m), keel_tensor_free(mf), keel_tensor_free(ref);
    keel_tensor_free(b3);
}

/* Gradients flow back through the casts into float32 leaves, and the
 * backward pass computes the same with or without an open scope. */
static void test_gradients(void)
{
    int64_t sx[2] = {4, 6}, sw[2] = {6, 3}, sb[1] = {3};
    keel_tensor *x = tens(KEEL_F32, 2, sx, 0);
    keel_tensor *w = tens(KEEL_F32, 2, sw, 1), *b = tens(KEEL_F32, 1, sb, 2);
    keel_tensor *g1[2] = {NULL}, *g2[2] = {NULL};
    keel_amp_options o = opts(KEEL_AMP_O1, KEEL_BF16);

    OK(keel_tensor_set_stop_gradient(w, false));
    OK(keel_tensor_set_stop_gradient(b, false));
    for (int pass = 0; pass < 2; pass++) {
        keel_tensor *y = NULL, *s = NULL, *l = NULL;

        OK(keel_amp_begin(&o));
        OK(keel_linear(x, w, b, &y));
        OK(keel_tanh(y, &s));
        OK(keel_mean(s, 0, NULL, false, &l));
        if (pass == 1)
            OK(keel_amp_end()); /* backward outside the scope */
        OK(keel_backward(l, NULL, false));
        if (pass == 0)
            OK(keel_amp_end()); /* backward inside the scope */
        (pass ? g2 : g1)[0] = keel_tensor_grad(w);
        (pass ? g2 : g1)[1] = keel_tensor_grad(b);
        OK(keel_tensor_set_grad(w, NULL));
        OK(keel_tensor_set_grad(b, NULL));
        keel_tensor_free(y), keel_tensor_free(s), keel_tensor_free(l);
    }
    CU_ASSERT_PTR_NOT_NULL_FATAL(g1[0]);
    CU_ASSERT_EQUAL(keel_tensor_dtype(g1[0]), KEEL_F32);
    CU_ASSERT_EQUAL(keel_tensor_dtype(g1[1]), KEEL_F32);
    CU_ASSERT(same_bits(g1[0], g2[0]));
    CU_ASSERT(same_bits(g1[1], g2[1]));
    for (int i = 0; i < 2; i++)
        keel_tensor_free(g1[i]), keel_tensor_free(g2[i]);
    keel_tensor_free(x), keel_tensor_free(w), keel_tensor_free(b);
}

/* A weight used twice in a scope is cast once; a backward pass, or an
 * in-place change of it, makes the next use cast again. */
static void test_cast_cache(void)
{
    int64_t sx[2] = {2, 4}, sw[2] = {4, 4};
    keel_tensor *x = tens(KEEL_BF16, 2, sx, 0), *w = tens(KEEL_F32, 2, sw, 1);
    keel_tensor *a = NULL, *b = NULL, *c = NULL, *l = NULL;
    keel_amp_options o = opts(KEEL_AMP_O1, KEEL_BF16);
    keel_optimizer *opt = NULL;
    keel_named_param np = {"w", w};

    OK(keel_tensor_set_stop_gradient(w, false));
    OK(keel_optimizer_create(KEEL_OPTIM_SGD, &np, 1, NULL, &opt));
    uint64_t n0;

    /* Casts from float32 made by each call (x is bfloat16 already). */
#define CASTS_BY(call, want)                                                \
    do {                                                                    \
        n0 = keel_amp_op_stats_get(KEEL_OP_CAST, KEEL_F32);                 \
        OK(call);                                                           \
        CU_ASSERT_EQUAL(keel_amp_op_stats_get(KEEL_OP_CAST, KEEL_F32) - n0, \
                        want);                                              \
    } while (0)
    keel_amp_op_stats_reset();
    keel_amp_op_stats_enable(true);
    OK(keel_amp_begin(&o));
    CASTS_BY(keel_matmul(x, w, false, false, &a), 1);
    CASTS_BY(keel_matmul(a, w, false, false, &b), 0);
    OK(keel_sum(b, 0, NULL, false, &l));
    OK(keel_backward(l, NULL, false));
    keel_tensor_free(l);
    l = NULL;
    /* after a backward pass: cast again */
    CASTS_BY(keel_matmul(x, w, false, false, &c), 1);
    keel_tensor_free(c);
    OK(keel_optimizer_step(opt)); /* an in-place update of w */
    CASTS_BY(keel_matmul(x, w, false, false, &c), 1);
    OK(keel_amp_end());
    /* a new scope starts with an empty cache */
    keel_tensor_free(c);
    OK(keel_amp_begin(&o));
    CASTS_BY(keel_matmul(x, w, false, false, &c), 1);
    OK(keel_amp_end());
#undef CASTS_BY
    keel_amp_op_stats_enable(false);
    keel_tensor_free(a), keel_tensor_free(b), keel_tensor_free(c);
    keel_tensor_free(x), keel_tensor_free(w);
    keel_optimizer_free(opt);
}

/* A device without bfloat16 kernels: white ops run in float32 there,
 * counted, rather than leave the device for the CPU fallback. */
static void test_device_without_half(void)
{
    int64_t s[2] = {3, 4}, sw[2] = {4, 2};
    keel_tensor *x = tens(KEEL_F32, 2, s, 0), *w = tens(KEEL_F32, 2, sw, 1);
    keel_tensor *xd = NULL, *wd = NULL, *y = NULL, *yc = NULL, *ref = NULL;
    keel_amp_options o = opts(KEEL_AMP_O1, KEEL_BF16);
    uint64_t fb0 = keel_fallback_count(KEEL_OP_MATMUL);

    OK(keel_tensor_to(x, "nohalf:0", &xd));
    OK(keel_tensor_to(w, "nohalf:0", &wd));
    keel_amp_fallback_reset();
    OK(keel_amp_begin(&o));
    OK(keel_matmul(xd, wd, false, false, &y));
    OK(keel_amp_end());
    CU_ASSERT_EQUAL(keel_tensor_dtype(y), KEEL_F32);
    CU_ASSERT_EQUAL(keel_amp_fallback_count(KEEL_OP_MATMUL), 1);
    /* it ran on the device itself: no CPU fallback was counted */
    CU_ASSERT_EQUAL(keel_fallback_count(KEEL_OP_MATMUL), fb0);
    OK(keel_tensor_to(y, "cpu:0", &yc));
    OK(keel_matmul(x, w, false, false, &ref));
    CU_ASSERT(same_bits(yc, ref));
    /* on the CPU plugin the same call runs in bfloat16 */
    OK(keel_amp_begin(&o));
    keel_tensor_free(y);
    OK(keel_matmul(x, w, false, false, &y));
    OK(keel_amp_end());
    CU_ASSERT_EQUAL(keel_tensor_dtype(y), KEEL_BF16);
    CU_ASSERT_EQUAL(keel_amp_fallback_count(KEEL_OP_MATMUL), 1);
    keel_tensor_free(x), keel_tensor_free(w), keel_tensor_free(xd);
    keel_tensor_free(wd), keel_tensor_free(y), keel_tensor_free(yc);
    keel_tensor_free(ref);
}

/* ---- decorate ------------------------------------------------------------- */

static keel_layer *model(void)
{
    keel_layer *l[3] = {NULL}, *seq = NULL;
    int64_t ln = 3;

    if (keel_nn_linear(4, 3, NULL, NULL, &l[0]) ||
        keel_nn_batch_norm1d(3, 0.9, 1e-5, &l[1]) ||
        keel_nn_layer_norm(1, &ln, 1e-5, &l[2]) ||
        keel_sequential_create(l, 3, &seq))
        return NULL;
    return seq;
}

static void test_decorate(void)
{
    keel_layer *m = model(), *m16 = model();
    keel_optimizer *opt = NULL;
    keel_layer *lin, *bn, *ln;

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m16);
    OK(keel_optimizer_create_from_layer(KEEL_OPTIM_ADAMW, m, NULL, &opt));
    ERR(keel_amp_decorate(&m, 1, &opt, 1, KEEL_AMP_O2, KEEL_F32, -1),
        KEEL_STATUS_INVALID_ARGUMENT, "float16 or bfloat16");
    ERR(keel_amp_decorate(&m, 1, &opt, 1, KEEL_AMP_OD, KEEL_BF16, -1),
        KEEL_STATUS_INVALID_ARGUMENT, "O1 or O2");
    OK(keel_amp_decorate(&m, 1, &opt, 1, KEEL_AMP_O1, KEEL_BF16, -1));
    CU_ASSERT(!keel_optimizer_multi_precision(opt));
    OK(keel_amp_decorate(&m, 1, &opt, 1, KEEL_AMP_O2, KEEL_BF16, -1));
    CU_ASSERT(keel_optimizer_multi_precision(opt));
    lin = keel_layer_sublayer_at(m, 0);
    bn = keel_layer_sublayer_at(m, 1);
    ln = keel_layer_sublayer_at(m, 2);
    CU_ASSERT_EQUAL(keel_tensor_dtype(keel_layer_parameter(lin, "weight")),
                    KEEL_BF16);
    CU_ASSERT_EQUAL(keel_tensor_dtype(keel_layer_parameter(lin, "bias")),
                    KEEL_BF16);
    CU_ASSERT_EQUAL(keel_tensor_dtype(keel_layer_parameter(bn, "weight")),
                    KEEL_F32);
    CU_ASSERT_EQUAL(keel_tensor_dtype(keel_layer_buffer(bn, "_mean")),
                    KEEL_F32);
    CU_ASSERT_EQUAL(keel_tensor_dtype(keel_layer_parameter(ln, "weight")),
                    KEEL_BF16);
    CU_ASSERT(!keel_tensor_stop_gradient(keel_layer_parameter(lin,
                                                              "weight")));
    /* float16 keeps LayerNorm in float32 too; keep_fp32 marks a layer. */
    OK(keel_layer_set_keep_fp32(keel_layer_sublayer_at(m16, 0), true));
    OK(keel_amp_decorate(&m16, 1, NULL, 0, KEEL_AMP_O2, KEEL_F16, -1));
    CU_ASSERT_EQUAL(keel_tensor_dtype(keel_layer_parameter(
                        keel_layer_sublayer_at(m16, 2), "weight")),
                    KEEL_F32);
    CU_ASSERT_EQUAL(keel_tensor_dtype(keel_layer_parameter(
                        keel_layer_sublayer_at(m16, 0), "weight")),
                    KEEL_F32);
    keel_optimizer_free(opt);
    keel_layer_free(m);
    keel_layer_free(m16);
}

/* O2 training: the float32 master weight is updated and the parameter is
 * its bfloat16 rounding; a parameter updated without master weights
 * drifts from it. */
static void test_master_weights(void)
{
    int64_t sx[2] = {8, 4};
    keel_tensor *x = tens(KEEL_F32, 2, sx, 3);
    keel_layer *m[2] = {model(), model()};
    keel_optimizer *opt[2] = {NULL};
    keel_amp_options o = opts(KEEL_AMP_O2, KEEL_BF16);
    keel_optimizer_options oo = keel_optimizer_default_options(KEEL_OPTIM_ADAMW);
    keel_state_dict *sd = NULL;

    /* Steps of about 1e-3 are below half a bfloat16 ulp for weights of
     * magnitude 0.5 and up: updated in bfloat16 they round away. */
    oo.learning_rate = 1e-3;
    CU_ASSERT_PTR_NOT_NULL_FATAL(m[0]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m[1]);
    {   /* same initial values */
        keel_state_dict *p0 = NULL;

        OK(keel_layer_state_dict(m[0], &p0));
        OK(keel_layer_set_state_dict(m[1], p0, true));
        keel_state_dict_free(p0);
    }
    for (int k = 0; k < 2; k++) {
        OK(keel_optimizer_create_from_layer(KEEL_OPTIM_ADAMW, m[k], &oo,
                                            &opt[k]));
        OK(keel_amp_decorate(&m[k], 1, &opt[k], 1, KEEL_AMP_O2, KEEL_BF16,
                             k == 0 ? -1 : 0));
    }
    for (int step = 0; step < 20; step++) {
        for (int k = 0; k < 2; k++) {
            keel_tensor *y = NULL, *l = NULL;

            OK(keel_amp_begin(&o));
            OK(keel_layer_call(m[k], x, &y));
            OK(keel_mean(y, 0, NULL, false, &l));
            OK(keel_amp_end());
            OK(keel_backward(l, NULL, false));
            OK(keel_optimizer_step(opt[k]));
            OK(keel_optimizer_clear_grad(opt[k]));
            keel_tensor_free(y), keel_tensor_free(l);
        }
    }
    OK(keel_state_dict_create(&sd));
    OK(keel_optimizer_state_get(opt[0], sd));
    {
        keel_tensor *w = keel_layer_parameter(keel_layer_sublayer_at(m[0], 0),
                                              "weight");
        keel_tensor *w1 = keel_layer_parameter(
            keel_layer_sublayer_at(m[1], 0), "weight");
        keel_tensor *master = keel_state_dict_get(sd, "0.weight_fp32_master_0");
        keel_tensor *mom = keel_state_dict_get(sd, "0.weight_moment1_0");
        keel_tensor *round = NULL;

        CU_ASSERT_PTR_NOT_NULL_FATAL(master);
        CU_ASSERT_PTR_NOT_NULL_FATAL(mom);
        CU_ASSERT_EQUAL(keel_tensor_dtype(master), KEEL_F32);
        CU_ASSERT_EQUAL(keel_tensor_dtype(mom), KEEL_F32);
        CU_ASSERT_EQUAL(keel_tensor_dtype(w), KEEL_BF16);
        OK(keel_cast(master, KEEL_BF16, &round));
        CU_ASSERT(same_bits(w, round));
        /* Without master weights the small steps round away. */
        CU_ASSERT(!same_bits(w1, w));
        keel_tensor_free(round);
    }
    keel_state_dict_free(sd);
    for (int k = 0; k < 2; k++) {
        keel_optimizer_free(opt[k]);
        keel_layer_free(m[k]);
    }
    keel_tensor_free(x);
}

/* ---- GradScaler -------------------------------------------------------------- */

/* The sequence Paddle 3.3.1's GradScaler gives for init 8, incr_every 2,
 * infinite losses at steps 2 and 3 (the parity suite checks it against
 * Paddle itself): scale after each update and whether the step ran. */
static void test_scaler_sequence(void)
{
    static const double want_scale[6] = {8, 16, 8, 4, 4, 8};
    static const bool want_step[6] = {true, true, false, false, true, true};
    int64_t sx[2] = {4, 3};
    keel_tensor *x = NULL;
    keel_layer *lin = NULL;
    keel_optimizer *opt = NULL;
    keel_grad_scaler *s = NULL;
    keel_grad_scaler_options so = keel_grad_scaler_default_options();
    keel_amp_options o = opts(KEEL_AMP_O1, KEEL_F16);
    float ones[12];

    for (int i = 0; i < 12; i++)
        ones[i] = 1.0f;
    OK(keel_tensor_from_floats(ones, 2, sx, KEEL_F32, "cpu:0", &x));
    OK(keel_nn_linear(3, 2, NULL, NULL, &lin));
    OK(keel_optimizer_create_from_layer(KEEL_OPTIM_SGD, lin, NULL, &opt));
    so.init_loss_scaling = 8;
    so.incr_every_n_steps = 2;
    OK(keel_grad_scaler_create(&so, &s));
    OK(keel_amp_begin(&o)); /* the last auto_cast dtype: float16 */
    OK(keel_amp_end());
    for (int step = 0; step < 6; step++) {
        keel_tensor *y = NULL, *l = NULL, *sl = NULL, *inf = NULL, *li = NULL;
        float v = INFINITY, w0[6], w1[6];

        OK(keel_layer_call(lin, x, &y));
        OK(keel_mean(y, 0, NULL, false, &l));
        if (step == 2 || step == 3) {
            OK(keel_tensor_from_floats(&v, 0, NULL, KEEL_F32, "cpu:0", &inf));
            OK(keel_multiply(l, inf, &li));
            keel_tensor_free(l);
            l = li;
        }
        OK(keel_grad_scaler_scale(s, l, &sl));
        OK(keel_backward(sl, NULL, false));
        OK(keel_tensor_to_host(keel_layer_parameter(lin, "weight"), w0,
                               sizeof(w0)));
        OK(keel_grad_scaler_step(s, opt));
        ERR(keel_grad_scaler_step(s, opt), KEEL_STATUS_INVALID_STATE,
            "step() has already been called");
        OK(keel_grad_scaler_update(s));
        CU_ASSERT_EQUAL(keel_grad_scaler_get_scale(s), want_scale[step]);
        CU_ASSERT_EQUAL(keel_grad_scaler_found_inf(s), !want_step[step]);
        OK(keel_tensor_to_host(keel_layer_parameter(lin, "weight"), w1,
                               sizeof(w1)));
        CU_ASSERT_EQUAL(memcmp(w0, w1, sizeof(w0)) != 0, want_step[step]);
        OK(keel_optimizer_clear_grad(opt));
        keel_tensor_free(y), keel_tensor_free(l), keel_tensor_free(sl);
        keel_tensor_free(inf);
    }
    keel_grad_scaler_free(s);
    keel_optimizer_free(opt);
    keel_layer_free(lin);
    keel_tensor_free(x);
}

static void test_scaler_unscale_and_state(void)
{
    int64_t one = 1;
    float gv = 6.0f, wv = 1.0f;
    keel_tensor *w = NULL, *g = NULL, *got = NULL;
    keel_named_param np = {"w", NULL};
    keel_optimizer *opt = NULL;
    keel_grad_scaler *s = NULL, *t = NULL;
    keel_grad_scaler_options so = keel_grad_scaler_default_options();
    keel_amp_options o = opts(KEEL_AMP_O1, KEEL_F16);
    keel_state_dict *sd = NULL;
    float out = 0;

    OK(keel_amp_begin(&o));
    OK(keel_amp_end());
    OK(keel_tensor_from_floats(&wv, 1, &one, KEEL_F32, "cpu:0", &w));
    OK(keel_tensor_set_stop_gradient(w, false));
    OK(keel_tensor_from_floats(&gv, 1, &one, KEEL_F32, "cpu:0", &g));
    OK(keel_tensor_set_grad(w, g));
    np.param = w;
    OK(keel_optimizer_create(KEEL_OPTIM_SGD, &np, 1, NULL, &opt));
    so.init_loss_scaling = 4;
    OK(keel_grad_scaler_create(&so, &s));
    OK(keel_grad_scaler_unscale(s, opt));
    got = keel_tensor_grad(w);
    OK(keel_tensor_to_host(got, &out, sizeof(out)));
    CU_ASSERT_EQUAL(out, 1.5f); /* 6 / 4 */
    keel_tensor_free(got);
    ERR(keel_grad_scaler_unscale(s, opt), KEEL_STATUS_INVALID_STATE,
        "already been called");
    OK(keel_grad_scaler_step(s, opt)); /* no second unscale */
    ERR(keel_grad_scaler_unscale(s, opt), KEEL_STATUS_INVALID_STATE,
        "after step()");
    OK(keel_grad_scaler_update(s));
    CU_ASSERT_EQUAL(keel_grad_scaler_incr_count(s), 1);
    /* state dict round trip into a scaler built with the defaults */
    OK(keel_state_dict_create(&sd));
    OK(keel_grad_scaler_state_get(s, "scaler.", sd));
    CU_ASSERT_EQUAL(keel_state_dict_count(sd), 8);
    CU_ASSERT(keel_state_dict_contains(sd, "scaler.use_dynamic_loss_scaling"));
    OK(keel_grad_scaler_create(NULL, &t));
    CU_ASSERT_EQUAL(keel_grad_scaler_get_scale(t), 65536.0);
    OK(keel_grad_scaler_state_set(t, "scaler.", sd));
    CU_ASSERT_EQUAL(keel_grad_scaler_get_scale(t), 4.0);
    CU_ASSERT_EQUAL(keel_grad_scaler_incr_count(t), 1);
    OK(keel_state_dict_remove(sd, "scaler.decr_count"));
    ERR(keel_grad_scaler_state_set(t, "scaler.", sd),
        KEEL_STATUS_INVALID_ARGUMENT, "missing 'scaler.decr_count'");
    keel_state_dict_free(sd);
    keel_grad_scaler_free(t);
    /* bad options */
    so = keel_grad_scaler_default_options();
    so.incr_ratio = 1.0;
    ERR(keel_grad_scaler_create(&so, &t), KEEL_STATUS_INVALID_ARGUMENT,
        "incr_ratio");
    so = keel_grad_scaler_default_options();
    so.decr_ratio = 1.5;
    ERR(keel_grad_scaler_create(&so, &t), KEEL_STATUS_INVALID_ARGUMENT,
        "decr_ratio");
    keel_grad_scaler_free(s);
    keel_optimizer_free(opt);
    keel_tensor_free(w), keel_tensor_free(g);
}

/* bfloat16 needs no loss scaling: the first scale() after a bfloat16
 * auto_cast disables a dynamic scaler, as Paddle's does. */
static void test_scaler_bf16(void)
{
    int64_t one = 1;
    float v = 3.0f;
    keel_tensor *l = NULL, *sl = NULL;
    keel_grad_scaler *s = NULL;
    keel_amp_options o = opts(KEEL_AMP_O1, KEEL_BF16);

    OK(keel_amp_begin(&o));
    OK(keel_amp_end());
    CU_ASSERT_EQUAL(keel_amp_last_dtype(), KEEL_BF16);
    OK(keel_grad_scaler_create(NULL, &s));
    CU_ASSERT(keel_grad_scaler_is_enabled(s));
    OK(keel_tensor_from_floats(&v, 1, &one, KEEL_F32, "cpu:0", &l));
    OK(keel_grad_scaler_scale(s, l, &sl));
    CU_ASSERT(!keel_grad_scaler_is_enabled(s));
    CU_ASSERT_EQUAL(keel_grad_scaler_get_scale(s), 1.0);
    CU_ASSERT_PTR_EQUAL(sl, l);
    keel_tensor_free(sl), keel_tensor_free(l);
    keel_grad_scaler_free(s);
}

int main(void)
{
    static const struct {
        const char *name;
        CU_TestFunc fn;
    } tests[] = {
        {"defaults", test_defaults},
        {"O1 dtypes of real calls", test_o1_dtypes},
        {"O2, O2 without promote, OD, O0", test_levels},
        {"custom lists, nesting, bad options", test_custom_lists_and_nesting},
        {"norms: x decides, float32 parameters stay", test_norms},
        {"linear with a float32 bias: Paddle's composition",
         test_linear_bias},
        {"conv2d with a float32 bias: Paddle's composition", test_conv_bias},
        {"gradients through casts; backward never casts", test_gradients},
        {"cast cache: once per version and backward", test_cast_cache},
        {"a device without bfloat16 kernels: float32, counted",
         test_device_without_half},
        {"decorate O2: which layers keep float32", test_decorate},
        {"O2 master weights", test_master_weights},
        {"GradScaler: Paddle's scale sequence", test_scaler_sequence},
        {"GradScaler: unscale_, states, state dict, options",
         test_scaler_unscale_and_state},
        {"GradScaler: disabled for bfloat16", test_scaler_bf16},
    };
    CU_pSuite suite;
    unsigned failed;

    if (keel_set_device("cpu:0") != KEEL_STATUS_OK) {
        fprintf(stderr, "cpu:0: %s\n", keel_last_error());
        return 1;
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    suite = CU_add_suite("amp", NULL, NULL);
    for (size_t i = 0; suite && i < sizeof(tests) / sizeof(tests[0]); i++)
        CU_add_test(suite, tests[i].name, tests[i].fn);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return failed ? 1 : 0;
}
