/*
 * keel bench — end to end.
 *
 *   e2e/lenet_train_step/{sgd,adam}/nB   one training step of LeNet-5 at
 *                                        batch B (64; smoke 4), ms/step
 *                                        and samples/s
 *   e2e/mlp_infer/nB                     784-512-512-10 MLP forward with
 *                                        ReLU and softmax, batch 1 and 64
 *
 * LeNet: conv 1->6 k5 pad 2, relu, maxpool 2, conv 6->16 k5, relu,
 * maxpool 2, fc 400->120, relu, fc 120->84, relu, fc 84->10,
 * cross_entropy (mean). The backward pass is written out with the
 * catalog's *_grad ops and matmuls (ReLU's gradient is where(h > 0, dy,
 * 0)), followed by one sgd_update or adam_update per parameter, so that
 * autograd's bookkeeping is not part of the time (kb_amp.c times the same
 * model through the nn layers and autograd). The first step is checked
 * against a float64 host implementation of the same network: the loss and
 * every bias gradient, plus samples of the conv1, conv2 and fc1 weight
 * gradients.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb.h"

#define NPARAM 10
#define MAX_TMP 64

/* Parameter shapes: w1 b1 w2 b2 w3 b3 w4 b4 w5 b5. */
static const int64_t lenet_shapes[NPARAM][4] = {
    {6, 1, 5, 5}, {6}, {16, 6, 5, 5}, {16}, {400, 120},
    {120},        {120, 84}, {84},    {84, 10}, {10},
};
static const int lenet_ndims[NPARAM] = {4, 1, 4, 1, 2, 1, 2, 1, 2, 1};
static const int lenet_fan_in[NPARAM] = {25, 25, 150, 150, 400,
                                         400, 120, 120, 84, 84};

struct e2e_bench {
    struct kb_bench b;
    bool mlp;
    bool adam;
    int64_t batch;
};

struct lenet {
    const struct kb_env *env;
    int64_t batch;
    bool adam;
    int64_t step;
    keel_tensor *p[NPARAM], *m[NPARAM], *v[NPARAM];
    float *hp[NPARAM];
    keel_tensor *x, *labels, *zero, *one;
    float *hx;
    int64_t *hl;
    /* Results of the last step. */
    keel_tensor *g[NPARAM], *loss;
    keel_tensor *tmp[MAX_TMP];
    int ntmp;
};

/* ---- small op wrappers -------------------------------------------------- */

static keel_status keep(struct lenet *l, keel_tensor *t)
{
    if (l->ntmp == MAX_TMP) {
        keel_tensor_free(t);
        return KEEL_STATUS_INTERNAL;
    }
    l->tmp[l->ntmp++] = t;
    return KEEL_STATUS_OK;
}

static keel_status run_op(keel_op_id op, keel_tensor **in, int nin,
                          const keel_attr *attrs, int nattrs,
                          keel_tensor **out, int nout)
{
    int n = 0;
    keel_status s = keel_op_run(op, in, nin, attrs, nattrs, out, nout, &n);

    if (s == KEEL_STATUS_OK && n != nout) {
        kb_free_tensors(out, n);
        return KEEL_STATUS_INTERNAL;
    }
    return s;
}

static keel_status conv(struct lenet *l, keel_tensor *x, keel_tensor *w,
                        keel_tensor *b, int64_t pad, keel_tensor **y)
{
    int64_t p[2] = {pad, pad};
    keel_attr a = keel_attr_ints("padding", p, 2);
    keel_tensor *in[3] = {x, w, b};
    keel_status s = run_op(KEEL_OP_CONV2D, in, 3, &a, 1, y, 1);

    return s ? s : keep(l, *y);
}

static keel_status conv_grad(struct lenet *l, keel_tensor *x, keel_tensor *w,
                             keel_tensor *dy, int64_t pad, keel_tensor **dx,
                             keel_tensor **dw, keel_tensor **db)
{
    int64_t p[2] = {pad, pad};
    keel_attr a[2] = {keel_attr_ints("padding", p, 2),
                      keel_attr_bool("has_bias", true)};
    keel_tensor *in[3] = {x, w, dy}, *out[3] = {NULL, NULL, NULL};
    keel_status s = run_op(KEEL_OP_CONV2D_GRAD, in, 3, a, 2, out, 3);

    if (s != KEEL_STATUS_OK)
        return s;
    *dx = out[0];
    *dw = out[1];
    *db = out[2];
    return keep(l, out[0]);
}

static keel_status pool(struct lenet *l, keel_tensor *x, keel_tensor **y,
                        keel_tensor **idx)
{
    int64_t k[2] = {2, 2};
    keel_attr a = keel_attr_ints("kernel_size", k, 2);
    keel_tensor *out[2] = {NULL, NULL};
    keel_status s = run_op(KEEL_OP_MAX_POOL2D, &x, 1, &a, 1, out, 2);

    if (s != KEEL_STATUS_OK)
        return s;
    *y = out[0];
    *idx = out[1];
    s = keep(l, out[0]);
    return s ? s : keep(l, out[1]);
}

static keel_status pool_grad(struct lenet *l, keel_tensor *x,
                             keel_tensor *idx, keel_tensor *dy,
                             keel_tensor **dx)
{
    keel_tensor *in[3] = {x, idx, dy};
    keel_status s = run_op(KEEL_OP_MAX_POOL2D_GRAD, in, 3, NULL, 0, dx, 1);

    return s ? s : keep(l, *dx);
}

static keel_status relu(struct lenet *l, keel_tensor *x, keel_tensor **y)
{
    keel_status s = keel_relu(x, y);

    return s ? s : keep(l, *y);
}

/* dx = where(h > 0, dy, 0) */
static keel_status relu_grad(struct lenet *l, keel_tensor *h, keel_tensor *dy,
                             keel_tensor **dx)
{
    keel_tensor *mask = NULL;
    keel_status s = keel_greater(h, l->zero, &mask);

    if (s == KEEL_STATUS_OK)
        s = keep(l, mask);
    if (s == KEEL_STATUS_OK)
        s = keel_where(mask, dy, l->zero, dx);
    return s ? s : keep(l, *dx);
}

static keel_status linear(struct lenet *l, keel_tensor *x, keel_tensor *w,
                          keel_tensor *b, keel_tensor **y)
{
    keel_status s = keel_linear(x, w, b, y);

    return s ? s : keep(l, *y);
}

static keel_status matmul(struct lenet *l, keel_tensor *a, keel_tensor *b,
                          bool ta, bool tb, keel_tensor **y, bool kept)
{
    keel_status s = keel_matmul(a, b, ta, tb, y);

    return s || !kept ? s : keep(l, *y);
}

static keel_status sum0(keel_tensor *x, keel_tensor **y)
{
    int axis = 0;

    return keel_sum(x, 1, &axis, false, y);
}

/* ---- the network -------------------------------------------------------- */

static void lenet_release_step(struct lenet *l)
{
    kb_free_tensors(l->tmp, l->ntmp);
    l->ntmp = 0;
    kb_free_tensors(l->g, NPARAM);
    keel_tensor_free(l->loss);
    l->loss = NULL;
}

static void lenet_free(struct lenet *l)
{
    lenet_release_step(l);
    kb_free_tensors(l->p, NPARAM);
    kb_free_tensors(l->m, NPARAM);
    kb_free_tensors(l->v, NPARAM);
    for (int i = 0; i < NPARAM; i++)
        free(l->hp[i]);
    keel_tensor_free(l->x);
    keel_tensor_free(l->labels);
    keel_tensor_free(l->zero);
    keel_tensor_free(l->one);
    free(l->hx);
    free(l->hl);
    memset(l, 0, sizeof(*l));
}

static keel_status lenet_init(struct lenet *l, const struct kb_env *env,
                              int64_t batch, bool adam)
{
    int64_t xs[4] = {batch, 1, 28, 28}, ls[1] = {batch};
    keel_status s = KEEL_STATUS_OK;

    memset(l, 0, sizeof(*l));
    l->env = env;
    l->batch = batch;
    l->adam = adam;
    for (int i = 0; i < NPARAM && s == KEEL_STATUS_OK; i++) {
        float r = 1.0f / sqrtf((float)lenet_fan_in[i]);
        s = kb_tensor_random(env, KEEL_F32, lenet_ndims[i], lenet_shapes[i],
                             100 + (uint64_t)i, -r, r, &l->p[i], &l->hp[i]);
        if (s == KEEL_STATUS_OK && adam)
            s = keel_zeros(lenet_ndims[i], lenet_shapes[i], KEEL_F32,
                           env->device, &l->m[i]);
        if (s == KEEL_STATUS_OK && adam)
            s = keel_zeros(lenet_ndims[i], lenet_shapes[i], KEEL_F32,
                           env->device, &l->v[i]);
    }
    if (s == KEEL_STATUS_OK)
        s = kb_tensor_random(env, KEEL_F32, 4, xs, 99, 0, 1, &l->x, &l->hx);
    if (s == KEEL_STATUS_OK) {
        l->hl = malloc((size_t)batch * sizeof(int64_t));
        if (!l->hl)
            s = KEEL_STATUS_OUT_OF_MEMORY;
    }
    for (int64_t i = 0; s == KEEL_STATUS_OK && i < batch; i++)
        l->hl[i] = (i * 3 + 1) % 10;
    if (s == KEEL_STATUS_OK)
        s = keel_tensor_from_host(l->hl, KEEL_I64, 1, ls, env->device,
                                  &l->labels);
    if (s == KEEL_STATUS_OK)
        s = keel_zeros(0, NULL, KEEL_F32, env->device, &l->zero);
    if (s == KEEL_STATUS_OK)
        s = keel_ones(0, NULL, KEEL_F32, env->device, &l->one);
    return s;
}

/* Forward, backward by hand, update. Gradients stay in l->g. */
static keel_status lenet_step(struct lenet *l)
{
    keel_tensor *y1, *r1, *p1, *i1, *y2, *r2, *p2, *i2, *f, *h3, *a3, *h4,
        *a4, *z, *out[2] = {NULL, NULL};
    keel_tensor *dz, *da4, *dh4, *da3, *dh3, *df, *dp2, *dr2, *dy2, *dp1,
        *dr1, *dy1, *dx;
    keel_tensor **p = l->p, **g = l->g;
    int64_t fs[2] = {l->batch, 400}, ps[4] = {l->batch, 16, 5, 5};
    keel_status s;

#define TRY(e)                                                               \
    do {                                                                     \
        if ((s = (e)) != KEEL_STATUS_OK)                                     \
            return s;                                                        \
    } while (0)
    /* forward */
    TRY(conv(l, l->x, p[0], p[1], 2, &y1));
    TRY(relu(l, y1, &r1));
    TRY(pool(l, r1, &p1, &i1));
    TRY(conv(l, p1, p[2], p[3], 0, &y2));
    TRY(relu(l, y2, &r2));
    TRY(pool(l, r2, &p2, &i2));
    TRY(keel_reshape(p2, 2, fs, &f));
    TRY(keep(l, f));
    TRY(linear(l, f, p[4], p[5], &h3));
    TRY(relu(l, h3, &a3));
    TRY(linear(l, a3, p[6], p[7], &h4));
    TRY(relu(l, h4, &a4));
    TRY(linear(l, a4, p[8], p[9], &z));
    {
        keel_tensor *in[2] = {z, l->labels};
        TRY(run_op(KEEL_OP_CROSS_ENTROPY, in, 2, NULL, 0, out, 2));
        l->loss = out[0];
        TRY(keep(l, out[1]));
    }
    /* backward */
    {
        keel_tensor *in[3] = {out[1], l->labels, l->one};
        TRY(run_op(KEEL_OP_CROSS_ENTROPY_GRAD, in, 3, NULL, 0, &dz, 1));
        TRY(keep(l, dz));
    }
    TRY(matmul(l, a4, dz, true, false, &g[8], false));
    TRY(sum0(dz, &g[9]));
    TRY(matmul(l, dz, p[8], false, true, &da4, true));
    TRY(relu_grad(l, h4, da4, &dh4));
    TRY(matmul(l, a3, dh4, true, false, &g[6], false));
    TRY(sum0(dh4, &g[7]));
    TRY(matmul(l, dh4, p[6], false, true, &da3, true));
    TRY(relu_grad(l, h3, da3, &dh3));
    TRY(matmul(l, f, dh3, true, false, &g[4], false));
    TRY(sum0(dh3, &g[5]));
    TRY(matmul(l, dh3, p[4], false, true, &df, true));
    TRY(keel_reshape(df, 4, ps, &dp2));
    TRY(keep(l, dp2));
    TRY(pool_grad(l, r2, i2, dp2, &dr2));
    TRY(relu_grad(l, y2, dr2, &dy2));
    TRY(conv_grad(l, p1, p[2], dy2, 0, &dp1, &g[2], &g[3]));
    TRY(pool_grad(l, r1, i1, dp1, &dr1));
    TRY(relu_grad(l, y1, dr1, &dy1));
    TRY(conv_grad(l, l->x, p[0], dy1, 2, &dx, &g[0], &g[1]));
    /* update */
    l->step++;
    for (int i = 0; i < NPARAM; i++) {
        if (l->adam) {
            keel_attr a[3] = {
                keel_attr_float("lr", 1e-3),
                keel_attr_float("beta1_pow", pow(0.9, (double)l->step)),
                keel_attr_float("beta2_pow", pow(0.999, (double)l->step))};
            keel_tensor *in[4] = {p[i], g[i], l->m[i], l->v[i]};
            TRY(run_op(KEEL_OP_ADAM_UPDATE, in, 4, a, 3, NULL, 0));
        } else {
            keel_attr a = keel_attr_float("lr", 0.01);
            keel_tensor *in[2] = {p[i], g[i]};
            TRY(run_op(KEEL_OP_SGD_UPDATE, in, 2, &a, 1, NULL, 0));
        }
    }
#undef TRY
    return KEEL_STATUS_OK;
}

/* ---- float64 reference -------------------------------------------------- */

struct lenet_ref {
    double loss;
    double *g[NPARAM];
};

static void ref_free(struct lenet_ref *r)
{
    for (int i = 0; i < NPARAM; i++)
        free(r->g[i]);
}

/* 2x2 max pool with the first maximum winning; idx is within H*W. */
static void ref_pool(const double *x, int64_t planes, int64_t h, int64_t w,
                     double *y, int64_t *idx)
{
    for (int64_t p = 0; p < planes; p++)
        for (int64_t i = 0; i < h / 2; i++)
            for (int64_t j = 0; j < w / 2; j++) {
                int64_t best = (2 * i) * w + 2 * j;
                for (int a = 0; a < 2; a++)
                    for (int b = 0; b < 2; b++) {
                        int64_t q = (2 * i + a) * w + 2 * j + b;
                        if (x[p * h * w + q] > x[p * h * w + best])
                            best = q;
                    }
                y[(p * (h / 2) + i) * (w / 2) + j] = x[p * h * w + best];
                idx[(p * (h / 2) + i) * (w / 2) + j] = best;
            }
}

/* Direct convolution, stride 1: y[B,O,OH,OW] from x[B,C,H,W]. */
static void ref_conv(const double *x, const float *w, const float *b,
                     int64_t B, int64_t C, int64_t H, int64_t W, int64_t O,
                     int64_t K, int64_t pad, double *y)
{
    int64_t OH = H + 2 * pad - K + 1, OW = W + 2 * pad - K + 1;

    for (int64_t n = 0; n < B; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t i = 0; i < OH; i++)
                for (int64_t j = 0; j < OW; j++) {
                    double s = b[o];
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t a = 0; a < K; a++)
                            for (int64_t e = 0; e < K; e++) {
                                int64_t yy = i + a - pad, xx = j + e - pad;
                                if (yy < 0 || yy >= H || xx < 0 || xx >= W)
                                    continue;
                                s += x[((n * C + c) * H + yy) * W + xx] *
                                     w[((o * C + c) * K + a) * K + e];
                            }
                    y[((n * O + o) * OH + i) * OW + j] = s;
                }
}

/* dw, db and (when dx) dx of a stride-1 convolution. */
static void ref_conv_grad(const double *x, const float *w, const double *dy,
                          int64_t B, int64_t C, int64_t H, int64_t W,
                          int64_t O, int64_t K, int64_t pad, double *dx,
                          double *dw, double *db)
{
    int64_t OH = H + 2 * pad - K + 1, OW = W + 2 * pad - K + 1;

    memset(dw, 0, (size_t)(O * C * K * K) * sizeof(double));
    memset(db, 0, (size_t)O * sizeof(double));
    if (dx)
        memset(dx, 0, (size_t)(B * C * H * W) * sizeof(double));
    for (int64_t n = 0; n < B; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t i = 0; i < OH; i++)
                for (int64_t j = 0; j < OW; j++) {
                    double d = dy[((n * O + o) * OH + i) * OW + j];
                    db[o] += d;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t a = 0; a < K; a++)
                            for (int64_t e = 0; e < K; e++) {
                                int64_t yy = i + a - pad, xx = j + e - pad;
                                int64_t xi = ((n * C + c) * H + yy) * W + xx;
                                int64_t wi = ((o * C + c) * K + a) * K + e;
                                if (yy < 0 || yy >= H || xx < 0 || xx >= W)
                                    continue;
                                dw[wi] += d * x[xi];
                                if (dx)
                                    dx[xi] += d * w[wi];
                            }
                }
}

/* y[B,N] = x[B,K] @ w[K,N] + b */
static void ref_fc(const double *x, const float *w, const float *b, int64_t B,
                   int64_t K, int64_t N, double *y)
{
    for (int64_t n = 0; n < B; n++)
        for (int64_t j = 0; j < N; j++) {
            double s = b[j];
            for (int64_t k = 0; k < K; k++)
                s += x[n * K + k] * w[k * N + j];
            y[n * N + j] = s;
        }
}

/* dw = x^T dy, db = sum dy, dx = dy w^T (masked by mask > 0 when given). */
static void ref_fc_grad(const double *x, const float *w, const double *dy,
                        int64_t B, int64_t K, int64_t N, double *dw,
                        double *db, double *dx, const double *mask)
{
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t n = 0; n < B; n++)
                s += x[n * K + k] * dy[n * N + j];
            dw[k * N + j] = s;
        }
    for (int64_t j = 0; j < N; j++) {
        db[j] = 0;
        for (int64_t n = 0; n < B; n++)
            db[j] += dy[n * N + j];
    }
    for (int64_t n = 0; dx && n < B; n++)
        for (int64_t k = 0; k < K; k++) {
            double s = 0;
            for (int64_t j = 0; j < N; j++)
                s += dy[n * N + j] * w[k * N + j];
            dx[n * K + k] = mask && mask[n * K + k] <= 0 ? 0 : s;
        }
}

static void relu_inplace(double *x, int64_t n, double *out)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = x[i] > 0 ? x[i] : 0;
}

static bool lenet_reference(const struct lenet *l, struct lenet_ref *r)
{
    int64_t B = l->batch;
    size_t n1 = (size_t)(B * 6 * 28 * 28), n2 = (size_t)(B * 6 * 14 * 14);
    size_t n3 = (size_t)(B * 16 * 10 * 10), n4 = (size_t)(B * 400);
    double *x = malloc((size_t)(B * 784) * sizeof(double));
    double *y1 = malloc(n1 * sizeof(double)), *r1 = malloc(n1 * sizeof(double));
    double *p1 = malloc(n2 * sizeof(double)), *y2 = malloc(n3 * sizeof(double));
    double *r2 = malloc(n3 * sizeof(double)), *f = malloc(n4 * sizeof(double));
    double *h3 = malloc((size_t)(B * 120) * sizeof(double));
    double *a3 = malloc((size_t)(B * 120) * sizeof(double));
    double *h4 = malloc((size_t)(B * 84) * sizeof(double));
    double *a4 = malloc((size_t)(B * 84) * sizeof(double));
    double *z = malloc((size_t)(B * 10) * sizeof(double));
    double *dz = malloc((size_t)(B * 10) * sizeof(double));
    double *dh4 = malloc((size_t)(B * 84) * sizeof(double));
    double *dh3 = malloc((size_t)(B * 120) * sizeof(double));
    double *df = malloc(n4 * sizeof(double)), *dy2 = calloc(n3, sizeof(double));
    double *dp1 = malloc(n2 * sizeof(double));
    double *dy1 = calloc(n1, sizeof(double));
    int64_t *i1 = malloc(n2 * sizeof(int64_t));
    int64_t *i2 = malloc(n4 * sizeof(int64_t));
    bool ok = x && y1 && r1 && p1 && y2 && r2 && f && h3 && a3 && h4 && a4 &&
              z && dz && dh4 && dh3 && df && dy2 && dp1 && dy1 && i1 && i2;

    memset(r, 0, sizeof(*r));
    for (int i = 0; ok && i < NPARAM; i++) {
        r->g[i] = malloc((size_t)kb_numel(lenet_ndims[i], lenet_shapes[i]) *
                         sizeof(double));
        ok = r->g[i] != NULL;
    }
    if (!ok)
        goto out;
    for (int64_t i = 0; i < B * 784; i++)
        x[i] = l->hx[i];
    /* forward */
    ref_conv(x, l->hp[0], l->hp[1], B, 1, 28, 28, 6, 5, 2, y1);
    relu_inplace(y1, (int64_t)n1, r1);
    ref_pool(r1, B * 6, 28, 28, p1, i1);
    ref_conv(p1, l->hp[2], l->hp[3], B, 6, 14, 14, 16, 5, 0, y2);
    relu_inplace(y2, (int64_t)n3, r2);
    ref_pool(r2, B * 16, 10, 10, f, i2);
    ref_fc(f, l->hp[4], l->hp[5], B, 400, 120, h3);
    relu_inplace(h3, B * 120, a3);
    ref_fc(a3, l->hp[6], l->hp[7], B, 120, 84, h4);
    relu_inplace(h4, B * 84, a4);
    ref_fc(a4, l->hp[8], l->hp[9], B, 84, 10, z);
    r->loss = 0;
    for (int64_t n = 0; n < B; n++) {
        double m = -INFINITY, s = 0;
        for (int j = 0; j < 10; j++)
            m = z[n * 10 + j] > m ? z[n * 10 + j] : m;
        for (int j = 0; j < 10; j++)
            s += exp(z[n * 10 + j] - m);
        r->loss += m + log(s) - z[n * 10 + l->hl[n]];
        for (int j = 0; j < 10; j++)
            dz[n * 10 + j] = (exp(z[n * 10 + j] - m) / s -
                              (j == l->hl[n] ? 1.0 : 0.0)) / (double)B;
    }
    r->loss /= (double)B;
    /* backward */
    ref_fc_grad(a4, l->hp[8], dz, B, 84, 10, r->g[8], r->g[9], dh4, h4);
    ref_fc_grad(a3, l->hp[6], dh4, B, 120, 84, r->g[6], r->g[7], dh3, h3);
    ref_fc_grad(f, l->hp[4], dh3, B, 400, 120, r->g[4], r->g[5], df, NULL);
    for (size_t q = 0; q < n4; q++) { /* unpool 2, then relu mask */
        int64_t plane = (int64_t)q / 25, at = plane * 100 + i2[q];
        dy2[at] += df[q];
    }
    for (size_t q = 0; q < n3; q++)
        dy2[q] = y2[q] > 0 ? dy2[q] : 0;
    ref_conv_grad(p1, l->hp[2], dy2, B, 6, 14, 14, 16, 5, 0, dp1, r->g[2],
                  r->g[3]);
    for (size_t q = 0; q < n2; q++) {
        int64_t plane = (int64_t)q / 196, at = plane * 784 + i1[q];
        dy1[at] += dp1[q];
    }
    for (size_t q = 0; q < n1; q++)
        dy1[q] = y1[q] > 0 ? dy1[q] : 0;
    ref_conv_grad(x, l->hp[0], dy1, B, 1, 28, 28, 6, 5, 2, NULL, r->g[0],
                  r->g[1]);
out:
    free(x), free(y1), free(r1), free(p1), free(y2), free(r2), free(f);
    free(h3), free(a3), free(h4), free(a4), free(z), free(dz), free(dh4);
    free(dh3), free(df), free(dy2), free(dp1), free(dy1), free(i1), free(i2);
    if (!ok)
        ref_free(r);
    return ok;
}

static bool lenet_check(keel_bm_state *st, struct e2e_bench *e,
                        struct lenet *l)
{
    static const char *const names[NPARAM] = {
        "grad conv1.w", "grad conv1.b", "grad conv2.w", "grad conv2.b",
        "grad fc1.w",   "grad fc1.b",   "grad fc2.w",   "grad fc2.b",
        "grad fc3.w",   "grad fc3.b"};
    struct lenet_ref r;
    float *got = NULL;
    bool ok = true;
    double loss;
    keel_status s;

    if (!lenet_reference(l, &r))
        return kb_fail(st, &e->b, KB_ERROR, "out of host memory");
    s = keel_tensor_item(l->loss, 0, &loss);
    if (s != KEEL_STATUS_OK) {
        ref_free(&r);
        return kb_fail_status(st, &e->b, "read loss", s);
    }
    if (fabs(loss - r.loss) > 1e-4 * fabs(r.loss) + 1e-5) {
        ref_free(&r);
        return kb_fail(st, &e->b, KB_WRONG,
                       "wrong result: loss %.8g, the reference is %.8g", loss,
                       r.loss);
    }
    for (int i = 0; i < NPARAM && ok; i++) {
        int64_t n = kb_numel(lenet_ndims[i], lenet_shapes[i]);
        int64_t cnt = n < 512 ? n : 512, *idx = malloc(512 * sizeof(int64_t));
        double *ref = malloc(512 * sizeof(double)), big = 0;
        if (!idx || !ref) {
            ok = kb_fail(st, &e->b, KB_ERROR, "out of host memory");
        } else if ((s = kb_tensor_read(l->g[i], &got)) != KEEL_STATUS_OK) {
            ok = kb_fail_status(st, &e->b, "read gradient", s);
        } else {
            for (int64_t k = 0; k < cnt; k++) {
                idx[k] = cnt == n ? k : k * (n / cnt);
                ref[k] = r.g[i][idx[k]];
            }
            for (int64_t k = 0; k < n; k++)
                big = fmax(big, fabs(r.g[i][k]));
            /* float32 against float64 through a deep chain: relative to
             * the gradient's largest magnitude. */
            ok = kb_check(st, &e->b, names[i], got, ref, idx, cnt, 1e-3,
                          1e-3 * big + 1e-7);
        }
        free(idx);
        free(ref);
        free(got);
        got = NULL;
    }
    ref_free(&r);
    return ok;
}

static const keel_op_id lenet_ops[] = {
    KEEL_OP_CONV2D,         KEEL_OP_CONV2D_GRAD,     KEEL_OP_RELU,
    KEEL_OP_MAX_POOL2D,     KEEL_OP_MAX_POOL2D_GRAD, KEEL_OP_LINEAR,
    KEEL_OP_MATMUL,         KEEL_OP_CROSS_ENTROPY,   KEEL_OP_CROSS_ENTROPY_GRAD,
    KEEL_OP_SUM,            KEEL_OP_GREATER,
};

static void bm_lenet(keel_bm_state *st, struct e2e_bench *e)
{
    const struct kb_env *env = e->b.env;
    keel_op_id ops[16];
    keel_dtype dts[16];
    int nops = (int)(sizeof(lenet_ops) / sizeof(lenet_ops[0]));
    struct lenet l;
    struct kb_timer t;
    keel_status s;
    double secs;

    memcpy(ops, lenet_ops, sizeof(lenet_ops));
    ops[nops++] = e->adam ? KEEL_OP_ADAM_UPDATE : KEEL_OP_SGD_UPDATE;
    for (int i = 0; i < nops; i++)
        dts[i] = KEEL_F32;
    memset(&l, 0, sizeof(l));
    if (!kb_need_kernels(st, &e->b, nops, ops, dts))
        return;
    if (kb_timer_init(&t, env) != KEEL_STATUS_OK) {
        kb_fail_status(st, &e->b, "event create", keel_last_status());
        return;
    }
    s = lenet_init(&l, env, e->batch, e->adam);
    if (s == KEEL_STATUS_OK)
        s = lenet_step(&l);
    if (s == KEEL_STATUS_OK)
        s = keel_stream_synchronize(env->place, NULL);
    if (s != KEEL_STATUS_OK) {
        kb_fail_status(st, &e->b, "lenet step", s);
        goto out;
    }
    if (!e->b.checked) {
        if (!lenet_check(st, e, &l))
            goto out;
        e->b.checked = true;
    }
    while (keel_bm_keep_running(st)) {
        lenet_release_step(&l);
        s = kb_timer_start(&t);
        if (s == KEEL_STATUS_OK)
            s = lenet_step(&l);
        if (s == KEEL_STATUS_OK)
            s = kb_timer_stop(&t, &secs);
        if (s != KEEL_STATUS_OK) {
            kb_fail_status(st, &e->b, "lenet step", s);
            goto out;
        }
        keel_bm_set_iteration_time(st, secs);
    }
    keel_bm_set_items_processed(st, e->batch * keel_bm_iterations(st));
    keel_bm_set_counter(st, "samples/s",
                        (double)e->batch * (double)keel_bm_iterations(st) /
                            keel_bm_manual_time(st),
                        KEEL_BM_COUNTER_PLAIN);
out:
    lenet_free(&l);
    kb_timer_destroy(&t);
}

/* ---- MLP inference ------------------------------------------------------ */

static const int64_t mlp_dims[4] = {784, 512, 512, 10};

static void bm_mlp(keel_bm_state *st, struct e2e_bench *e)
{
    const struct kb_env *env = e->b.env;
    static const keel_op_id ops[] = {KEEL_OP_LINEAR, KEEL_OP_RELU,
                                     KEEL_OP_SOFTMAX};
    static const keel_dtype dts[] = {KEEL_F32, KEEL_F32, KEEL_F32};
    keel_tensor *w[3] = {0}, *b[3] = {0}, *x = NULL, *out = NULL;
    float *hw[3] = {0}, *hb[3] = {0}, *hx = NULL, *got = NULL;
    double *act = NULL, *nxt = NULL;
    int64_t B = e->batch, xs[2] = {B, 784};
    struct kb_timer t;
    keel_status s = KEEL_STATUS_OK;
    double secs;

#define MLP_FORWARD(res)                                                     \
    do {                                                                     \
        keel_tensor *h_ = keel_tensor_ref(x), *n_ = NULL;                    \
        for (int i_ = 0; i_ < 3 && s == KEEL_STATUS_OK; i_++) {              \
            s = keel_linear(h_, w[i_], b[i_], &n_);                          \
            keel_tensor_free(h_);                                            \
            h_ = n_;                                                         \
            n_ = NULL;                                                       \
            if (s == KEEL_STATUS_OK)                                         \
                s = i_ < 2 ? keel_relu(h_, &n_) : keel_softmax(h_, -1, &n_); \
            keel_tensor_free(h_);                                            \
            h_ = n_;                                                         \
        }                                                                    \
        (res) = h_;                                                          \
    } while (0)

    if (!kb_need_kernels(st, &e->b, 3, ops, dts))
        return;
    if (kb_timer_init(&t, env) != KEEL_STATUS_OK) {
        kb_fail_status(st, &e->b, "event create", keel_last_status());
        return;
    }
    for (int i = 0; i < 3 && s == KEEL_STATUS_OK; i++) {
        int64_t ws[2] = {mlp_dims[i], mlp_dims[i + 1]}, bs[1] = {ws[1]};
        float r = 1.0f / sqrtf((float)mlp_dims[i]);
        s = kb_tensor_random(env, KEEL_F32, 2, ws, 200 + (uint64_t)i, -r, r,
                             &w[i], &hw[i]);
        if (s == KEEL_STATUS_OK)
            s = kb_tensor_random(env, KEEL_F32, 1, bs, 300 + (uint64_t)i, -r,
                                 r, &b[i], &hb[i]);
    }
    if (s == KEEL_STATUS_OK)
        s = kb_tensor_random(env, KEEL_F32, 2, xs, 400, 0, 1, &x, &hx);
    if (s == KEEL_STATUS_OK)
        MLP_FORWARD(out);
    if (s == KEEL_STATUS_OK)
        s = keel_stream_synchronize(env->place, NULL);
    if (s != KEEL_STATUS_OK) {
        kb_fail_status(st, &e->b, "mlp forward", s);
        goto out;
    }
    if (!e->b.checked) {
        double ref[64 * 10];
        int64_t n = B < 64 ? B : 64;
        act = malloc((size_t)(B * 784) * sizeof(double));
        nxt = malloc((size_t)(B * 512) * sizeof(double));
        s = kb_tensor_read(out, &got);
        if (!act || !nxt || s != KEEL_STATUS_OK) {
            kb_fail(st, &e->b, KB_ERROR, "reading the result: %s",
                    keel_status_name(s ? s : KEEL_STATUS_OUT_OF_MEMORY));
            goto out;
        }
        for (int64_t i = 0; i < B * 784; i++)
            act[i] = hx[i];
        for (int l = 0; l < 3; l++) {
            double *tmp;
            ref_fc(act, hw[l], hb[l], B, mlp_dims[l], mlp_dims[l + 1], nxt);
            if (l < 2)
                relu_inplace(nxt, B * mlp_dims[l + 1], nxt);
            tmp = act;
            act = nxt;
            nxt = tmp;
        }
        for (int64_t r = 0; r < n; r++) {
            double m = -INFINITY, sum = 0;
            for (int j = 0; j < 10; j++)
                m = act[r * 10 + j] > m ? act[r * 10 + j] : m;
            for (int j = 0; j < 10; j++)
                sum += exp(act[r * 10 + j] - m);
            for (int j = 0; j < 10; j++)
                ref[r * 10 + j] = exp(act[r * 10 + j] - m) / sum;
        }
        if (!kb_check(st, &e->b, "mlp softmax", got, ref, NULL, n * 10, 1e-4,
                      1e-6))
            goto out;
        e->b.checked = true;
    }
    while (keel_bm_keep_running(st)) {
        keel_tensor_free(out);
        out = NULL;
        s = kb_timer_start(&t);
        if (s == KEEL_STATUS_OK)
            MLP_FORWARD(out);
        if (s == KEEL_STATUS_OK)
            s = kb_timer_stop(&t, &secs);
        if (s != KEEL_STATUS_OK) {
            kb_fail_status(st, &e->b, "mlp forward", s);
            goto out;
        }
        keel_bm_set_iteration_time(st, secs);
    }
    keel_bm_set_items_processed(st, B * keel_bm_iterations(st));
    keel_bm_set_counter(st, "samples/s",
                        (double)B * (double)keel_bm_iterations(st) /
                            keel_bm_manual_time(st),
                        KEEL_BM_COUNTER_PLAIN);
#undef MLP_FORWARD
out:
    for (int i = 0; i < 3; i++) {
        keel_tensor_free(w[i]);
        keel_tensor_free(b[i]);
        free(hw[i]);
        free(hb[i]);
    }
    keel_tensor_free(x);
    keel_tensor_free(out);
    free(hx);
    free(got);
    free(act);
    free(nxt);
    kb_timer_destroy(&t);
}

static void bm_e2e(keel_bm_state *st, void *ctx)
{
    struct e2e_bench *e = ctx;

    if (e->mlp)
        bm_mlp(st, e);
    else
        bm_lenet(st, e);
}

void kb_register_e2e(const struct kb_env *env)
{
    int64_t lb = env->smoke ? 4 : 64;

    for (int adam = 0; adam < 2; adam++) {
        char name[128];
        struct e2e_bench *e;
        snprintf(name, sizeof(name), "e2e/lenet_train_step/%s/n%lld",
                 adam ? "adam" : "sgd", (long long)lb);
        e = kb_register(env, name, sizeof(*e), bm_e2e, KEEL_BM_TIME_MANUAL,
                        KEEL_BM_UNIT_MS);
        if (e) {
            e->adam = adam;
            e->batch = lb;
        }
    }
    for (int i = 0; i < 2; i++) {
        int64_t batch = i == 0 ? 1 : (env->smoke ? 4 : 64);
        char name[128];
        struct e2e_bench *e;
        snprintf(name, sizeof(name), "e2e/mlp_infer/n%lld", (long long)batch);
        e = kb_register(env, name, sizeof(*e), bm_e2e, KEEL_BM_TIME_MANUAL,
                        KEEL_BM_UNIT_US);
        if (e) {
            e->mlp = true;
            e->batch = batch;
        }
    }
}
