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

/* One op with up to 4 inputs; outs receives the outputs. */
static bool op(struct net *n, keel_op_id id, int nin, keel_tensor *a,
               keel_tensor *b, keel_tensor *c, const keel_attr *attrs,
               int nattrs, keel_tensor **outs, int maxout)
{
    keel_tensor *in[3] = {a, b, c};
    int nout = 0;
    keel_status st = keel_op_run(id, in, nin, attrs, nattrs, outs, maxout,
                                 &nout);

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
        ok = CF_CHECK(isfinite(ld) &&
                          fabs(ld - lr0) <= 1e-3 * fmax(1.0, fabs(lr0)),
                      "MLP step %d: loss %.7g on %s, %.7g on cpu:0 (relative "
                      "tolerance 1e-3)",
                      s, ld, dev.dev, lr0);
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

const struct cf_test_spec cf_e2e_tests[] = {
    {"e2e", "mlp_train", CF_LEVEL_SMOKE, t_mlp,
     "an MLP trained with SGD matches the CPU loss curve step by step"},
    {NULL, NULL, 0, NULL, NULL},
};
