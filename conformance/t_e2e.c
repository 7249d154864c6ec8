/*
 * keel conform — end to end: a small MLP trained with SGD on the device
 * under test and on cpu:0, through the core's op dispatch (keel_op_run).
 * The backward pass is written with ops (the core has no autograd yet):
 *
 *   pre = linear(x, W1, b1); h = relu(pre); logits = linear(h, W2, b2)
 *   (loss, p) = cross_entropy(logits, y)
 *   dlogits = cross_entropy_grad(p, y, 1)
 *   dW2 = matmul(h, dlogits, transpose_x); db2 = sum(dlogits, axis 0)
 *   dh = matmul(dlogits, W2, transpose_y); dpre = where(pre > 0, dh, 0)
 *   dW1 = matmul(x, dpre, transpose_x);    db1 = sum(dpre, axis 0)
 *   sgd_update(W, dW, lr) for every parameter
 *
 * The two loss curves must agree step by step, and the loss must fall.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <keel/autograd.h>
#include <keel/io.h>
#include <keel/nn.h>
#include <keel/optim.h>

#include "conform.h"

enum { B = 64, D = 16, H = 32, C = 4 };

struct net {
    const char *dev;
    keel_tensor *x, *y, *w1, *b1, *w2, *b2, *zero, *one;
};

static void net_free(struct net *n)
{
    keel_tensor_free(n->x);
    keel_tensor_free(n->y);
    keel_tensor_free(n->w1);
    keel_tensor_free(n->b1);
    keel_tensor_free(n->w2);
    keel_tensor_free(n->b2);
    keel_tensor_free(n->zero);
    keel_tensor_free(n->one);
}

static keel_status put(struct net *n, const void *data, keel_dtype dt, int nd,
                       const int64_t *shape, keel_tensor **out)
{
    return keel_tensor_from_host(data, dt, nd, shape, n->dev, out);
}

static bool net_make(struct net *n, const char *dev)
{
    static float x[B * D], w1[D * H], w2[H * C], b1[H], b2[C];
    static int64_t y[B];
    struct cf_rng r;
    float teacher[D * C], zero = 0, one = 1;
    const int64_t sx[2] = {B, D}, sw1[2] = {D, H}, sw2[2] = {H, C};
    const int64_t sb1[1] = {H}, sb2[1] = {C}, sy[1] = {B};

    memset(n, 0, sizeof(*n));
    n->dev = dev;
    cf_rng_seed(&r, cf_env.cfg->seed + 17);
    for (int i = 0; i < D * C; i++)
        teacher[i] = (float)cf_rng_uniform(&r, -1, 1);
    for (int i = 0; i < B * D; i++)
        x[i] = (float)cf_rng_uniform(&r, -1, 1);
    for (int b = 0; b < B; b++) {
        float best = -1e30f;
        for (int c = 0; c < C; c++) {
            float s = 0;
            for (int k = 0; k < D; k++)
                s += x[b * D + k] * teacher[k * C + c];
            if (s > best) {
                best = s;
                y[b] = c;
            }
        }
    }
    for (int i = 0; i < D * H; i++)
        w1[i] = (float)cf_rng_uniform(&r, -0.5, 0.5);
    for (int i = 0; i < H * C; i++)
        w2[i] = (float)cf_rng_uniform(&r, -0.5, 0.5);
    for (int i = 0; i < H; i++)
        b1[i] = 0.01f * (float)i;
    for (int i = 0; i < C; i++)
        b2[i] = 0;
    return CF_OK(put(n, x, KEEL_F32, 2, sx, &n->x), "x on %s: %s", dev,
                 keel_last_error()) &&
           CF_OK(put(n, y, KEEL_I64, 1, sy, &n->y), "labels") &&
           CF_OK(put(n, w1, KEEL_F32, 2, sw1, &n->w1), "W1") &&
           CF_OK(put(n, b1, KEEL_F32, 1, sb1, &n->b1), "b1") &&
           CF_OK(put(n, w2, KEEL_F32, 2, sw2, &n->w2), "W2") &&
           CF_OK(put(n, b2, KEEL_F32, 1, sb2, &n->b2), "b2") &&
           CF_OK(put(n, &zero, KEEL_F32, 0, NULL, &n->zero), "zero") &&
           CF_OK(put(n, &one, KEEL_F32, 0, NULL, &n->one), "one");
}

/* ---- op by op against cpu:0 --------------------------------------------------- */

/* When a run diverges, it is replayed with `on` set: every op on the
 * device is also run on cpu:0 from copies of the same inputs, and the
 * first op whose outputs (or in-place updated input) differ is named. */
static struct {
    bool on;
    int step;
    char first[CF_MSG_MAX];
} opcheck;

/* A tensor's elements as doubles (malloc'd), or NULL. */
static double *host_values(const keel_tensor *t, int64_t *n)
{
    int dt = keel_tensor_dtype(t);
    size_t es = cf_dtype_size(dt);
    int64_t k = keel_tensor_numel(t);
    void *buf = malloc((size_t)(k ? k : 1) * es);
    double *v = malloc(sizeof(double) * (size_t)(k ? k : 1));

    if (!buf || !v ||
        keel_tensor_to_host(t, buf, (size_t)k * es) != KEEL_STATUS_OK) {
        free(buf);
        free(v);
        return NULL;
    }
    for (int64_t i = 0; i < k; i++)
        v[i] = cf_load(dt, buf, i);
    free(buf);
    *n = k;
    return v;
}

static void describe_tensor(char *buf, size_t size, const keel_tensor *t)
{
    const int64_t *sh = keel_tensor_shape(t);
    size_t n = (size_t)snprintf(buf, size, "%s[",
                                cf_dtype_name(keel_tensor_dtype(t)));

    for (int i = 0; i < keel_tensor_ndim(t) && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? "," : "",
                              (long long)sh[i]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

/* "name(float32[64,32], int64[64] | transpose_x=1)" */
static void describe_call(char *buf, size_t size, keel_op_id id,
                          keel_tensor *const *in, int nin,
                          const keel_attr *attrs, int nattrs)
{
    size_t n = (size_t)snprintf(buf, size, "%s(", keel_op_get_info(id)->name);

    for (int i = 0; i < nin && n < size; i++) {
        char t[96];
        describe_tensor(t, sizeof(t), in[i]);
        n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? ", " : "", t);
    }
    for (int i = 0; i < nattrs && n < size; i++) {
        const keel_attr *a = &attrs[i];
        n += (size_t)snprintf(buf + n, size - n, "%s%s=", i ? ";" : " | ",
                              a->name);
        if (n >= size)
            break;
        if (a->type == KEEL_ATTR_FLOAT)
            n += (size_t)snprintf(buf + n, size - n, "%g", a->v.f);
        else if (a->type == KEEL_ATTR_INTS)
            for (int64_t k = 0; k < a->v.ints.count && n < size; k++)
                n += (size_t)snprintf(buf + n, size - n, "%s%lld",
                                      k ? "," : "",
                                      (long long)a->v.ints.data[k]);
        else if (a->type == KEEL_ATTR_STRING)
            n += (size_t)snprintf(buf + n, size - n, "%s", a->v.s);
        else
            n += (size_t)snprintf(buf + n, size - n, "%lld",
                                  (long long)a->v.i);
    }
    if (n < size)
        snprintf(buf + n, size - n, ")");
}

/* Compare a device result with cpu:0's; true when they agree. */
static bool same_result(const keel_tensor *got, const keel_tensor *want,
                        char *why, size_t whysz)
{
    int dt = keel_tensor_dtype(want);
    int64_t ng = 0, nw = 0, first = -1;
    double *g = host_values(got, &ng), *w = host_values(want, &nw);
    double err = 0, den = 0, tol;
    bool ok = false;

    if (!g || !w || ng != nw) {
        snprintf(why, whysz, "%s", !g || !w ? "cannot read the results"
                                            : "element counts differ");
        goto out;
    }
    tol = cf_dtype_is_float(dt) ? cf_env.cfg->tolerance[dt] : 0;
    for (int64_t i = 0; i < nw; i++) {
        double d = g[i] - w[i];
        if (isnan(g[i]) != isnan(w[i]) || (!cf_dtype_is_float(dt) && d != 0)) {
            first = i;
            err = INFINITY;
            break;
        }
        if (isfinite(d)) {
            err += d * d;
            den += w[i] * w[i];
            if (first < 0 && d * d > tol * (w[i] * w[i] + 1e-30))
                first = i;
        }
    }
    ok = (den > 0 ? err / den : err) <= tol;
    if (!ok)
        snprintf(why, whysz,
                 "NMSE %.3g > %.3g; first differing element (flat) %lld: "
                 "got %.9g, expected %.9g",
                 den > 0 ? err / den : err, tol,
                 (long long)(first < 0 ? 0 : first),
                 g[first < 0 ? 0 : first], w[first < 0 ? 0 : first]);
out:
    free(g);
    free(w);
    return ok;
}

/* Run the op on cpu:0 from copies of `in` (taken before the device ran)
 * and compare with the device's outputs; record the first difference. */
static void check_against_cpu(const struct net *n, keel_op_id id,
                              keel_tensor **cin, int nin,
                              keel_tensor *const *din, const keel_attr *attrs,
                              int nattrs, keel_tensor **outs, int nout,
                              bool inplace0)
{
    keel_tensor *cout[4] = {NULL, NULL, NULL, NULL};
    char call[512], why[300];
    int cn = 0;

    describe_call(call, sizeof(call), id, din, nin, attrs, nattrs);
    if (keel_op_run(id, cin, nin, attrs, nattrs, cout, 4, &cn) !=
        KEEL_STATUS_OK) {
        keel_clear_error();
        return;
    }
    for (int o = 0; o < nout && o < cn && !opcheck.first[0]; o++)
        if (!same_result(outs[o], cout[o], why, sizeof(why)))
            snprintf(opcheck.first, sizeof(opcheck.first),
                     "first diverging op: %s on %s, step %d: output %d "
                     "differs from cpu:0 run on the same inputs: %s",
                     call, n->dev, opcheck.step, o, why);
    if (inplace0 && !opcheck.first[0] &&
        !same_result(din[0], cin[0], why, sizeof(why)))
        snprintf(opcheck.first, sizeof(opcheck.first),
                 "first diverging op: %s on %s, step %d: the in-place "
                 "input 0 differs from cpu:0 run on the same inputs: %s",
                 call, n->dev, opcheck.step, why);
    for (int o = 0; o < cn; o++)
        keel_tensor_free(cout[o]);
}

/* One op with up to 3 inputs; outs receives the outputs. */
static bool op(struct net *n, keel_op_id id, int nin, keel_tensor *a,
               keel_tensor *b, keel_tensor *c, const keel_attr *attrs,
               int nattrs, keel_tensor **outs, int maxout)
{
    keel_tensor *in[3] = {a, b, c}, *cin[3] = {NULL, NULL, NULL};
    keel_tensor *scratch[2] = {NULL, NULL};
    bool checking = opcheck.on && !opcheck.first[0], copied = checking;
    int nout = 0;
    keel_status st;

    /* copies first: an in-place op (sgd_update) changes its input 0 */
    for (int i = 0; checking && i < nin; i++)
        copied = copied && keel_tensor_to(in[i], "cpu:0", &cin[i]) ==
                               KEEL_STATUS_OK;
    st = keel_op_run(id, in, nin, attrs, nattrs, outs, maxout, &nout);
    if (st == KEEL_STATUS_OK && copied)
        check_against_cpu(n, id, cin, nin, in, attrs, nattrs,
                          outs ? outs : scratch, outs ? nout : 0,
                          id == KEEL_OP_SGD_UPDATE);
    for (int i = 0; i < nin; i++)
        keel_tensor_free(cin[i]);
    keel_clear_error();
    if (st != KEEL_STATUS_OK && checking && !opcheck.first[0]) {
        char call[512];
        describe_call(call, sizeof(call), id, in, nin, attrs, nattrs);
        snprintf(opcheck.first, sizeof(opcheck.first),
                 "first failing op: %s on %s, step %d", call, n->dev,
                 opcheck.step);
    }
    return CF_OK(st, "%s on %s: %s", keel_op_get_info(id)->name, n->dev,
                 keel_last_error());
}

static bool sgd(struct net *n, keel_tensor *p, keel_tensor *g, double lr)
{
    keel_attr a = keel_attr_float("lr", lr);

    return op(n, KEEL_OP_SGD_UPDATE, 2, p, g, NULL, &a, 1, NULL, 0);
}

static bool step(struct net *n, double lr, double *loss)
{
    keel_tensor *pre = NULL, *h = NULL, *logits = NULL, *ce[2] = {NULL, NULL};
    keel_tensor *dlog = NULL, *dw2 = NULL, *db2 = NULL, *dh = NULL;
    keel_tensor *mask = NULL, *dpre = NULL, *dw1 = NULL, *db1 = NULL;
    const int64_t axis0[1] = {0};
    keel_attr tx = keel_attr_bool("transpose_x", true);
    keel_attr ty = keel_attr_bool("transpose_y", true);
    keel_attr ax = keel_attr_ints("axis", axis0, 1);
    bool ok = op(n, KEEL_OP_LINEAR, 3, n->x, n->w1, n->b1, NULL, 0, &pre, 1) &&
              op(n, KEEL_OP_RELU, 1, pre, NULL, NULL, NULL, 0, &h, 1) &&
              op(n, KEEL_OP_LINEAR, 3, h, n->w2, n->b2, NULL, 0, &logits, 1) &&
              op(n, KEEL_OP_CROSS_ENTROPY, 2, logits, n->y, NULL, NULL, 0, ce,
                 2) &&
              op(n, KEEL_OP_CROSS_ENTROPY_GRAD, 3, ce[1], n->y, n->one, NULL,
                 0, &dlog, 1) &&
              op(n, KEEL_OP_MATMUL, 2, h, dlog, NULL, &tx, 1, &dw2, 1) &&
              op(n, KEEL_OP_SUM, 1, dlog, NULL, NULL, &ax, 1, &db2, 1) &&
              op(n, KEEL_OP_MATMUL, 2, dlog, n->w2, NULL, &ty, 1, &dh, 1) &&
              op(n, KEEL_OP_GREATER, 2, pre, n->zero, NULL, NULL, 0, &mask,
                 1) &&
              op(n, KEEL_OP_WHERE, 3, mask, dh, n->zero, NULL, 0, &dpre, 1) &&
              op(n, KEEL_OP_MATMUL, 2, n->x, dpre, NULL, &tx, 1, &dw1, 1) &&
              op(n, KEEL_OP_SUM, 1, dpre, NULL, NULL, &ax, 1, &db1, 1) &&
              sgd(n, n->w1, dw1, lr) && sgd(n, n->b1, db1, lr) &&
              sgd(n, n->w2, dw2, lr) && sgd(n, n->b2, db2, lr);

    if (ok)
        ok = CF_OK(keel_tensor_item(ce[0], 0, loss), "reading the loss on %s",
                   n->dev);
    keel_tensor_free(pre);
    keel_tensor_free(h);
    keel_tensor_free(logits);
    keel_tensor_free(ce[0]);
    keel_tensor_free(ce[1]);
    keel_tensor_free(dlog);
    keel_tensor_free(dw2);
    keel_tensor_free(db2);
    keel_tensor_free(dh);
    keel_tensor_free(mask);
    keel_tensor_free(dpre);
    keel_tensor_free(dw1);
    keel_tensor_free(db1);
    return ok;
}

static uint64_t fallbacks(void)
{
    uint64_t n = 0;

    for (int i = 0; i < KEEL_OP_COUNT; i++)
        n += keel_fallback_count((keel_op_id)i);
    return n;
}

/* Replay steps 0..last on a fresh copy of the network on `dev`, op by op
 * against cpu:0, and say which op diverged first. */
static void locate_divergence(const char *dev, double lr, int last,
                              char *where, size_t size)
{
    struct net n;
    double loss;

    memset(&opcheck, 0, sizeof(opcheck));
    if (!net_make(&n, dev)) {
        snprintf(where, size, "the op-by-op rerun could not set up");
        net_free(&n);
        return;
    }
    opcheck.on = true;
    for (int s = 0; s <= last && !opcheck.first[0]; s++) {
        opcheck.step = s;
        if (!step(&n, lr, &loss))
            break;
    }
    opcheck.on = false;
    if (opcheck.first[0])
        snprintf(where, size, "%s", opcheck.first);
    else
        snprintf(where, size,
                 "rerun op by op, every op of steps 0..%d matched cpu:0 on "
                 "the same inputs: the difference accumulates across ops",
                 last);
    net_free(&n);
}

static void t_mlp(void)
{
    int steps = cf_env.level == CF_LEVEL_SMOKE    ? 10
                : cf_env.level == CF_LEVEL_STRESS ? 5 * cf_env.cfg->e2e_steps
                                                  : cf_env.cfg->e2e_steps;
    struct net dev, ref;
    double ld = 0, lr0 = 0, first = 0, last = 0;
    const double lr = 0.5;
    uint64_t fb0;
    bool ok;

    if (!cf_env.have_ref) {
        cf_skip("%s", cf_env.ref_reason);
        return;
    }
    /* The last tested device: for the CPU plugin that is not cpu:0, the
     * reference itself. */
    ok = net_make(&dev, cf_env.place[cf_env.ndev - 1]);
    ok = net_make(&ref, "cpu:0") && ok;
    fb0 = fallbacks();
    for (int s = 0; ok && s < steps; s++) {
        ok = step(&dev, lr, &ld) && step(&ref, lr, &lr0);
        if (!ok)
            break;
        if (s == 0)
            first = lr0;
        last = lr0;
        if (!isfinite(ld) || fabs(ld - lr0) > 1e-3 * fmax(1.0, fabs(lr0))) {
            char where[CF_MSG_MAX];

            locate_divergence(dev.dev, lr, s, where, sizeof(where));
            CF_FAIL("MLP step %d: loss %.7g on %s, %.7g on cpu:0 (relative "
                    "tolerance 1e-3); %s",
                    s, ld, dev.dev, lr0, where);
            ok = false;
        }
    }
    if (ok)
        CF_CHECK(last < 0.7 * first,
                 "the MLP did not learn: loss %.5g after %d steps, %.5g at "
                 "the start",
                 last, steps, first);
    if (fallbacks() > fb0)
        cf_note("%llu op calls fell back to the CPU plugin (missing kernels)",
                (unsigned long long)(fallbacks() - fb0));
    cf_note("%d steps, loss %.4f -> %.4f", steps, first, last);
    net_free(&dev);
    net_free(&ref);
}

/* ---- the plugin's device current: creation ops and a LeNet step ------------------ */

/* Ops without tensor inputs are placed on the current device; a plugin
 * that lacks their kernels gets them through the core's CPU fallback, which
 * must land on cpu:0 and copy back. Each is compared with cpu:0. */
static bool creation_ops(const char *dev)
{
    enum { NC = 9 };
    static const char *const names[NC] = {
        "zeros", "ones", "full", "arange", "linspace",
        "eye",   "uniform", "normal", "randint"};
    const int64_t shape[2] = {7, 5};
    keel_tensor *t[2][NC];
    bool ok = true;

    memset(t, 0, sizeof(t));
    for (int side = 0; side < 2; side++) {
        const char *where = side ? "cpu:0" : dev;
        keel_status st[NC];

        if (!CF_OK(keel_set_device(where), "keel_set_device(\"%s\"): %s",
                   where, keel_last_error()))
            return false;
        keel_seed(cf_env.cfg->seed + 5);
        st[0] = keel_zeros(2, shape, KEEL_F32, NULL, &t[side][0]);
        st[1] = keel_ones(2, shape, KEEL_F32, NULL, &t[side][1]);
        st[2] = keel_full(2, shape, KEEL_F32, 2.5, NULL, &t[side][2]);
        st[3] = keel_arange(1, 20, 3, KEEL_F32, NULL, &t[side][3]);
        st[4] = keel_linspace(-1, 1, 9, KEEL_F32, NULL, &t[side][4]);
        st[5] = keel_eye(4, 6, KEEL_F32, NULL, &t[side][5]);
        st[6] = keel_uniform(2, shape, KEEL_F32, -1, 2, NULL, &t[side][6]);
        st[7] = keel_normal(2, shape, KEEL_F32, 0.5, 2, NULL, &t[side][7]);
        st[8] = keel_randint(0, 9, 2, shape, KEEL_I64, NULL, &t[side][8]);
        for (int k = 0; k < NC; k++)
            ok = CF_OK(st[k], "%s with %s current: %s", names[k], where,
                       keel_last_error()) &&
                 ok;
    }
    keel_set_device("cpu:0");
    for (int k = 0; ok && k < NC; k++) {
        char why[300], pl[64] = "?";

        keel_place_name(keel_tensor_place(t[0][k]), pl, sizeof(pl));
        if (!CF_CHECK(!strcmp(pl, dev),
                      "%s with %s current made its tensor on %s", names[k],
                      dev, pl))
            ok = false;
        else if (!same_result(t[0][k], t[1][k], why, sizeof(why))) {
            CF_FAIL("%s with %s current differs from the same call with "
                    "cpu:0 current (same seed): %s",
                    names[k], dev, why);
            ok = false;
        }
    }
    for (int side = 0; side < 2; side++)
        for (int k = 0; k < NC; k++)
            keel_tensor_free(t[side][k]);
    return ok;
}

static keel_status lenet(keel_layer **out)
{
    keel_layer *l[12] = {0};
    keel_conv2d_params p = keel_conv2d_default_params();
    keel_status st = KEEL_STATUS_OK;
    int n = 0;

    p.padding[0] = p.padding[1] = 2;
    p.npadding = 2;
#define ADD(call)                                                            \
    if (st == KEEL_STATUS_OK)                                                \
    st = (call)
    ADD(keel_nn_conv2d(1, 6, 5, 5, &p, NULL, NULL, &l[n++]));
    ADD(keel_nn_activation_default(KEEL_ACT_RELU, &l[n++]));
    ADD(keel_nn_max_pool2d(2, 2, 0, false, &l[n++]));
    ADD(keel_nn_conv2d(6, 16, 5, 5, NULL, NULL, NULL, &l[n++]));
    ADD(keel_nn_activation_default(KEEL_ACT_RELU, &l[n++]));
    ADD(keel_nn_max_pool2d(2, 2, 0, false, &l[n++]));
    ADD(keel_nn_flatten(1, -1, &l[n++]));
    ADD(keel_nn_linear(400, 120, NULL, NULL, &l[n++]));
    ADD(keel_nn_activation_default(KEEL_ACT_RELU, &l[n++]));
    ADD(keel_nn_linear(120, 84, NULL, NULL, &l[n++]));
    ADD(keel_nn_activation_default(KEEL_ACT_RELU, &l[n++]));
    ADD(keel_nn_linear(84, 10, NULL, NULL, &l[n++]));
#undef ADD
    if (st != KEEL_STATUS_OK) {
        for (int i = 0; i < n; i++)
            keel_layer_free(l[i]);
        return st;
    }
    return keel_sequential_create(l, n, out);
}

/* Build LeNet with `dev` current (its parameters come from the device's
 * creation ops), run one SGD step on a fixed batch and the forward pass
 * after it: loss[0] before, loss[1] after the update. */
static bool lenet_step(const char *dev, double loss[2])
{
    enum { NB = 8 };
    static float x[NB * 28 * 28];
    static int64_t y[NB];
    const int64_t xs[4] = {NB, 1, 28, 28}, ys[1] = {NB};
    keel_tensor *xt = NULL, *yt = NULL;
    keel_layer *net = NULL, *ce = NULL;
    keel_state_dict *ps = NULL;
    keel_named_param np[16];
    keel_optimizer *opt = NULL;
    keel_optimizer_options oo;
    struct cf_rng r;
    int64_t n = 0;
    bool ok = false;

    cf_rng_seed(&r, cf_env.cfg->seed + 29);
    for (int i = 0; i < NB * 28 * 28; i++)
        x[i] = (float)cf_rng_uniform(&r, 0, 1);
    for (int i = 0; i < NB; i++)
        y[i] = cf_rng_int(&r, 0, 9);
    if (!CF_OK(keel_set_device(dev), "keel_set_device(\"%s\")", dev))
        return false;
    keel_seed(cf_env.cfg->seed + 31);
    if (!CF_OK(lenet(&net), "building LeNet with %s current: %s", dev,
               keel_last_error()) ||
        !CF_OK(keel_nn_cross_entropy_loss(NULL, &ce), "cross_entropy_loss") ||
        !CF_OK(keel_layer_parameters(net, &ps), "layer_parameters") ||
        !CF_OK(keel_tensor_from_host(x, KEEL_F32, 4, xs, NULL, &xt),
               "the batch on %s: %s", dev, keel_last_error()) ||
        !CF_OK(keel_tensor_from_host(y, KEEL_I64, 1, ys, NULL, &yt),
               "the labels on %s", dev))
        goto out;
    n = keel_state_dict_count(ps);
    if (!CF_CHECK(n > 0 && n <= 16, "LeNet has %lld parameters", (long long)n))
        goto out;
    for (int64_t i = 0; i < n; i++)
        if (!CF_OK(keel_state_dict_at(ps, i, &np[i].name, &np[i].param),
                   "state_dict_at"))
            goto out;
    oo = keel_optimizer_default_options(KEEL_OPTIM_SGD);
    oo.learning_rate = 0.05;
    if (!CF_OK(keel_optimizer_create(KEEL_OPTIM_SGD, np, (size_t)n, &oo, &opt),
               "optimizer_create"))
        goto out;
    for (int s = 0; s < 2; s++) {
        keel_tensor *logits = NULL, *lt = NULL;
        bool sok = CF_OK(keel_layer_call(net, xt, &logits),
                         "LeNet forward %d on %s: %s", s, dev,
                         keel_last_error()) &&
                   CF_OK(keel_layer_call2(ce, logits, yt, &lt),
                         "LeNet loss %d on %s: %s", s, dev,
                         keel_last_error()) &&
                   CF_OK(keel_tensor_item(lt, 0, &loss[s]),
                         "reading LeNet's loss on %s", dev) &&
                   (s == 1 ||
                    (CF_OK(keel_backward(lt, NULL, false),
                           "LeNet backward on %s: %s", dev,
                           keel_last_error()) &&
                     CF_OK(keel_optimizer_step(opt),
                           "SGD step on %s: %s", dev, keel_last_error())));
        keel_tensor_free(lt);
        keel_tensor_free(logits);
        if (!sok)
            goto out;
    }
    ok = true;
out:
    keel_optimizer_free(opt);
    keel_state_dict_free(ps);
    keel_layer_free(ce);
    keel_layer_free(net);
    keel_tensor_free(xt);
    keel_tensor_free(yt);
    keel_set_device("cpu:0");
    return ok;
}

static void t_device_current(void)
{
    const char *dev = cf_env.place[cf_env.ndev - 1];
    double ld[2] = {0, 0}, lc[2] = {0, 0};
    uint64_t fb0 = fallbacks();

    if (!cf_env.have_ref) {
        cf_skip("%s", cf_env.ref_reason);
        return;
    }
    creation_ops(dev);
    if (lenet_step(dev, ld) && lenet_step("cpu:0", lc)) {
        for (int s = 0; s < 2; s++)
            CF_CHECK(isfinite(ld[s]) &&
                         fabs(ld[s] - lc[s]) <= 1e-4 * fmax(1.0, fabs(lc[s])),
                     "LeNet with %s current: loss %.7g %s the SGD step, "
                     "%.7g with cpu:0 current (relative tolerance 1e-4)",
                     dev, ld[s], s ? "after" : "before", lc[s]);
        CF_CHECK(lc[1] < lc[0], "LeNet's loss did not fall on cpu:0 (%.5g "
                                "-> %.5g): the test is broken",
                 lc[0], lc[1]);
        cf_note("LeNet loss %.5f -> %.5f with %s current", ld[0], ld[1], dev);
    }
    if (fallbacks() > fb0)
        cf_note("%llu op calls fell back to the CPU plugin (missing kernels)",
                (unsigned long long)(fallbacks() - fb0));
}

const struct cf_test_spec cf_e2e_tests[] = {
    {"e2e", "device_current", CF_LEVEL_SMOKE, t_device_current,
     "with the plugin's device current: creation ops (zeros, ones, full, "
     "arange, linspace, eye, uniform, normal, randint) and one LeNet SGD "
     "step match cpu:0"},
    {"e2e", "mlp_train", CF_LEVEL_SMOKE, t_mlp,
     "an MLP trained with SGD matches the CPU loss curve step by step"},
    {NULL, NULL, 0, NULL, NULL},
};
