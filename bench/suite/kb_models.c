/*
 * keel bench — steps of real models, and the model builders the suite
 * shares (kb.h).
 *
 *   e2e/model/bert_layer/train/n8      S 128, H 768, 12 heads, FFN 3072
 *   e2e/model/bert_layer/infer/n1
 *   e2e/model/resnet18/train/n16       3 x 64 x 64, 10 classes
 *   e2e/model/resnet18/infer/n1
 *   e2e/model/lenet/train/n64          1 x 28 x 28, 10 classes
 *   e2e/model/lenet/infer/n1
 *   (smoke: tiny sizes, same structure)
 *
 * The models, each as Paddle (and PyTorch) users write it, in float32:
 *
 *  - BERT-base encoder layer, post-LayerNorm: qkv = Linear(H, 3H); heads
 *    by reshape + permute; softmax(q k^T / sqrt(d)); dropout 0.1 on the
 *    probabilities; p v; heads merged; Linear(H, H); dropout; residual;
 *    LayerNorm; Linear(H, FFN), GELU (exact), Linear(FFN, H); dropout;
 *    residual; LayerNorm. Training: MSELoss to a fixed random target,
 *    AdamW (lr 1e-3, weight decay 0.01).
 *  - ResNet-18 (torchvision's and paddle.vision's layout): conv 7x7/2
 *    (no bias), BatchNorm, ReLU, max pool 3x3/2; four stages of two basic
 *    blocks (3x3 convs without bias, BatchNorm, ReLU; stride 2 and a 1x1
 *    conv + BatchNorm downsample at the start of stages 2 to 4); adaptive
 *    average pool 1x1, Linear(512, 10). Training: CrossEntropyLoss,
 *    Momentum (lr 0.01, 0.9).
 *  - LeNet-5: as e2e/amp_lenet_step (kb_amp.c); Adam (lr 1e-3).
 *
 * train: one step, forward + loss + backward + optimizer step + clear
 * grad, in training mode. infer: the forward pass in eval mode under
 * no-grad, batch 1. bench/models_ratio.sh runs the same steps in PyTorch
 * and Paddle (bench/models_torch_paddle.py) in interleaved rounds and
 * writes the table of ratios.
 *
 * The first call checks the result: a finite loss (train), finite
 * outputs of the expected shape (infer).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/autograd.h>
#include <keel/nn.h>
#include <keel/optim.h>
#include <keel/runtime.h>
#include <keel/tensor.h>

#include "kb.h"

#define MODEL_SEED 20261207u

/* ---- LeNet-5 --------------------------------------------------------------- */

keel_status kb_lenet_build(keel_layer **out)
{
    keel_layer *l[12] = {0};
    keel_conv2d_params p1 = keel_conv2d_default_params();
    keel_status s;
    int n = 0;

    p1.padding[0] = 2;
    p1.padding[1] = 2;
    p1.npadding = 2;
    if ((s = keel_nn_conv2d(1, 6, 5, 5, &p1, NULL, NULL, &l[n++])) ||
        (s = keel_nn_activation_default(KEEL_ACT_RELU, &l[n++])) ||
        (s = keel_nn_max_pool2d(2, 2, 0, false, &l[n++])) ||
        (s = keel_nn_conv2d(6, 16, 5, 5, NULL, NULL, NULL, &l[n++])) ||
        (s = keel_nn_activation_default(KEEL_ACT_RELU, &l[n++])) ||
        (s = keel_nn_max_pool2d(2, 2, 0, false, &l[n++])) ||
        (s = keel_nn_flatten(1, -1, &l[n++])) ||
        (s = keel_nn_linear(400, 120, NULL, NULL, &l[n++])) ||
        (s = keel_nn_activation_default(KEEL_ACT_RELU, &l[n++])) ||
        (s = keel_nn_linear(120, 84, NULL, NULL, &l[n++])) ||
        (s = keel_nn_activation_default(KEEL_ACT_RELU, &l[n++])) ||
        (s = keel_nn_linear(84, 10, NULL, NULL, &l[n++]))) {
        for (int i = 0; i < n; i++)
            keel_layer_free(l[i]);
        return s;
    }
    return keel_sequential_create(l, n, out);
}

/* ---- the transformer encoder block --------------------------------------- */

/* Sublayers of the encoder's LayerList; ENC_DROP only with dropout. */
enum { ENC_QKV, ENC_PROJ, ENC_LN1, ENC_FF1, ENC_FF2, ENC_LN2, ENC_DROP };

/* A LayerList's layers in order, taking each (freed on failure). */
static keel_status list_of(keel_layer **l, int n, keel_status s,
                           keel_layer **out)
{
    keel_layer *list = NULL;
    int i = 0;

    if (s == KEEL_STATUS_OK)
        s = keel_layer_list_create(&list);
    for (; s == KEEL_STATUS_OK && i < n; i++)
        s = keel_layer_list_append(list, l[i]); /* takes l[i] */
    for (; i < n; i++)
        keel_layer_free(l[i]);
    if (s != KEEL_STATUS_OK) {
        keel_layer_free(list);
        return s;
    }
    *out = list;
    return KEEL_STATUS_OK;
}

keel_status kb_encoder_build(const struct kb_enc_dims *d, keel_layer **out)
{
    int64_t H = d->hidden, ln_shape[1] = {d->hidden};
    keel_layer *l[ENC_DROP + 1] = {0};
    keel_status s;
    int n = 0;

    if (!(s = keel_nn_linear(H, 3 * H, NULL, NULL, &l[n++])) &&
        !(s = keel_nn_linear(H, H, NULL, NULL, &l[n++])) &&
        !(s = keel_nn_layer_norm(1, ln_shape, 1e-5, &l[n++])) &&
        !(s = keel_nn_linear(H, d->ffn, NULL, NULL, &l[n++])) &&
        !(s = keel_nn_linear(d->ffn, H, NULL, NULL, &l[n++])) &&
        !(s = keel_nn_layer_norm(1, ln_shape, 1e-5, &l[n++])) &&
        d->dropout > 0)
        s = keel_nn_dropout(d->dropout, false, &l[n++]);
    return list_of(l, n, s, out);
}

/* x through the dropout layer when the model has one (the identity in
 * eval mode); takes x. */
static keel_status drop(keel_layer *model, const struct kb_enc_dims *d,
                        keel_tensor **x)
{
    keel_tensor *y = NULL;
    keel_status s;

    if (d->dropout <= 0)
        return KEEL_STATUS_OK;
    s = keel_layer_call(keel_layer_sublayer_at(model, ENC_DROP), *x, &y);
    keel_tensor_free(*x);
    *x = y;
    return s;
}

keel_status kb_encoder_forward(keel_layer *model, const struct kb_enc_dims *d,
                               keel_tensor *x, const keel_tensor *scale_f32,
                               const keel_tensor *scale_bf16,
                               keel_tensor **out)
{
    int64_t B = d->batch, S = d->seq, H = d->hidden, nh = d->heads;
    int64_t dh = H / nh;
    int64_t s5[5] = {B, S, 3, nh, dh}, s3[3] = {B, S, H};
    int p5[5] = {2, 0, 3, 1, 4}, p4[4] = {0, 2, 1, 3}, ax0 = 0;
    keel_layer *L[ENC_DROP];
    enum {
        T_QKV, T_QKV5, T_QKVP, T_Q1, T_K1, T_V1, T_Q, T_K, T_V, T_SC, T_SCS,
        T_P, T_CTX, T_CTXP, T_CTXM, T_ATT, T_RES1, T_H1, T_F1, T_G, T_F2,
        T_RES2, T_N
    };
    keel_tensor *t[T_N] = {0}, *parts[3] = {0};
    const keel_tensor *scale;
    keel_status s;

    for (int i = 0; i < ENC_DROP; i++)
        L[i] = keel_layer_sublayer_at(model, i);
    s = keel_layer_call(L[ENC_QKV], x, &t[T_QKV]);
    if (!s)
        s = keel_reshape(t[T_QKV], 5, s5, &t[T_QKV5]);
    if (!s) /* [3, B, nh, S, dh] */
        s = keel_permute(t[T_QKV5], p5, &t[T_QKVP]);
    if (!s)
        s = keel_chunk(t[T_QKVP], 3, 0, parts);
    if (!s) {
        t[T_Q1] = parts[0];
        t[T_K1] = parts[1];
        t[T_V1] = parts[2];
        s = keel_squeeze(t[T_Q1], 1, &ax0, &t[T_Q]);
    }
    if (!s)
        s = keel_squeeze(t[T_K1], 1, &ax0, &t[T_K]);
    if (!s)
        s = keel_squeeze(t[T_V1], 1, &ax0, &t[T_V]);
    if (!s) /* [B, nh, S, S] */
        s = keel_matmul(t[T_Q], t[T_K], false, true, &t[T_SC]);
    if (!s) {
        scale = keel_tensor_dtype(t[T_SC]) == KEEL_BF16 && scale_bf16
                    ? scale_bf16
                    : scale_f32;
        s = keel_multiply(t[T_SC], scale, &t[T_SCS]);
    }
    if (!s)
        s = keel_softmax(t[T_SCS], -1, &t[T_P]);
    if (!s)
        s = drop(model, d, &t[T_P]);
    if (!s) /* [B, nh, S, dh] */
        s = keel_matmul(t[T_P], t[T_V], false, false, &t[T_CTX]);
    if (!s)
        s = keel_permute(t[T_CTX], p4, &t[T_CTXP]);
    if (!s)
        s = keel_reshape(t[T_CTXP], 3, s3, &t[T_CTXM]);
    if (!s)
        s = keel_layer_call(L[ENC_PROJ], t[T_CTXM], &t[T_ATT]);
    if (!s)
        s = drop(model, d, &t[T_ATT]);
    if (!s)
        s = keel_add(t[T_ATT], x, &t[T_RES1]);
    if (!s)
        s = keel_layer_call(L[ENC_LN1], t[T_RES1], &t[T_H1]);
    if (!s)
        s = keel_layer_call(L[ENC_FF1], t[T_H1], &t[T_F1]);
    if (!s)
        s = keel_gelu(t[T_F1], false, &t[T_G]);
    if (!s)
        s = keel_layer_call(L[ENC_FF2], t[T_G], &t[T_F2]);
    if (!s)
        s = drop(model, d, &t[T_F2]);
    if (!s)
        s = keel_add(t[T_F2], t[T_H1], &t[T_RES2]);
    if (!s)
        s = keel_layer_call(L[ENC_LN2], t[T_RES2], out);
    for (int i = 0; i < T_N; i++)
        keel_tensor_free(t[i]);
    return s;
}

/* ---- ResNet-18 --------------------------------------------------------------- */

/*
 * The LayerList, in order: stem conv, bn, max pool; per block conv1, bn1,
 * conv2, bn2 and, for the first block of stages 2 to 4, the downsample's
 * conv and bn; the average pool, flatten, fc.
 */
#define RN_MAX 64

static keel_status conv_bn(int64_t cin, int64_t cout, int64_t k,
                           int64_t stride, int64_t pad, keel_layer **l,
                           int *n)
{
    keel_conv2d_params p = keel_conv2d_default_params();
    keel_param_attr nob = {KEEL_INIT_NONE, 0, 0};
    keel_status s;

    p.stride[0] = p.stride[1] = stride;
    p.padding[0] = p.padding[1] = pad;
    p.npadding = 2;
    s = keel_nn_conv2d(cin, cout, k, k, &p, NULL, &nob, &l[*n]);
    if (s != KEEL_STATUS_OK)
        return s;
    (*n)++;
    s = keel_nn_batch_norm2d(cout, 0.9, 1e-5, &l[*n]);
    if (s == KEEL_STATUS_OK)
        (*n)++;
    return s;
}

keel_status kb_resnet18_build(int64_t width, int64_t classes, keel_layer **out)
{
    keel_layer *l[RN_MAX] = {0};
    keel_status s;
    int n = 0;
    int64_t cin = width;

    s = conv_bn(3, width, 7, 2, 3, l, &n);
    if (s == KEEL_STATUS_OK && (s = keel_nn_max_pool2d(3, 2, 1, false,
                                                        &l[n])) == 0)
        n++;
    for (int stage = 0; stage < 4 && s == KEEL_STATUS_OK; stage++) {
        int64_t cout = width << stage;
        for (int blk = 0; blk < 2 && s == KEEL_STATUS_OK; blk++) {
            int64_t stride = stage > 0 && blk == 0 ? 2 : 1;
            s = conv_bn(cin, cout, 3, stride, 1, l, &n);
            if (s == KEEL_STATUS_OK)
                s = conv_bn(cout, cout, 3, 1, 1, l, &n);
            if (s == KEEL_STATUS_OK && stride != 1)
                s = conv_bn(cin, cout, 1, stride, 0, l, &n);
            cin = cout;
        }
    }
    if (s == KEEL_STATUS_OK && (s = keel_nn_adaptive_avg_pool2d(1, 1,
                                                                 &l[n])) == 0)
        n++;
    if (s == KEEL_STATUS_OK && (s = keel_nn_flatten(1, -1, &l[n])) == 0)
        n++;
    if (s == KEEL_STATUS_OK &&
        (s = keel_nn_linear(cin, classes, NULL, NULL, &l[n])) == 0)
        n++;
    return list_of(l, n, s, out);
}

/* y = layer(x), x freed (a chain of calls). */
static keel_status chain(keel_layer *layer, keel_tensor **x)
{
    keel_tensor *y = NULL;
    keel_status s = keel_layer_call(layer, *x, &y);

    keel_tensor_free(*x);
    *x = y;
    return s;
}

static keel_status relu_in(keel_tensor **x)
{
    keel_tensor *y = NULL;
    keel_status s = keel_relu(*x, &y);

    keel_tensor_free(*x);
    *x = y;
    return s;
}

keel_status kb_resnet18_forward(keel_layer *m, keel_tensor *x,
                                keel_tensor **out)
{
    keel_tensor *h = NULL, *a = NULL, *idn = NULL, *sum = NULL;
    keel_status s;
    int i = 0;

    s = keel_layer_call(keel_layer_sublayer_at(m, i++), x, &h); /* conv */
    if (!s)
        s = chain(keel_layer_sublayer_at(m, i++), &h); /* bn */
    if (!s)
        s = relu_in(&h);
    if (!s)
        s = chain(keel_layer_sublayer_at(m, i++), &h); /* max pool */
    for (int stage = 0; stage < 4 && !s; stage++)
        for (int blk = 0; blk < 2 && !s; blk++) {
            bool ds = stage > 0 && blk == 0;
            s = keel_layer_call(keel_layer_sublayer_at(m, i++), h, &a);
            if (!s)
                s = chain(keel_layer_sublayer_at(m, i++), &a);
            if (!s)
                s = relu_in(&a);
            if (!s)
                s = chain(keel_layer_sublayer_at(m, i++), &a);
            if (!s)
                s = chain(keel_layer_sublayer_at(m, i++), &a);
            if (!s && ds) {
                s = keel_layer_call(keel_layer_sublayer_at(m, i++), h, &idn);
                if (!s)
                    s = chain(keel_layer_sublayer_at(m, i++), &idn);
            }
            if (!s)
                s = keel_add(a, ds ? idn : h, &sum);
            keel_tensor_free(a);
            keel_tensor_free(idn);
            keel_tensor_free(h);
            a = idn = NULL;
            h = sum;
            sum = NULL;
            if (!s)
                s = relu_in(&h);
        }
    for (int k = 0; k < 3 && !s; k++) /* avg pool, flatten, fc */
        s = chain(keel_layer_sublayer_at(m, i++), &h);
    if (s != KEEL_STATUS_OK) {
        keel_tensor_free(h);
        return s;
    }
    *out = h;
    return KEEL_STATUS_OK;
}

/* ---- the benchmarks ------------------------------------------------------- */

enum model { M_BERT, M_RESNET, M_LENET };
static const char *const model_names[] = {"bert_layer", "resnet18", "lenet"};

struct model_bench {
    struct kb_bench b;
    enum model model;
    bool train;
    int64_t batch;
    struct kb_enc_dims enc; /* M_BERT */
    int64_t width, image;   /* M_RESNET: stem channels, input side */
};

struct model_run {
    const struct model_bench *m;
    keel_layer *model, *loss_fn;
    keel_optimizer *opt;
    keel_tensor *x, *y, *scale;
    keel_tensor *loss, *out; /* of the last step */
};

static void run_free(struct model_run *r)
{
    keel_tensor_free(r->loss);
    keel_tensor_free(r->out);
    keel_tensor_free(r->x);
    keel_tensor_free(r->y);
    keel_tensor_free(r->scale);
    keel_optimizer_free(r->opt);
    keel_layer_free(r->loss_fn);
    keel_layer_free(r->model);
    memset(r, 0, sizeof(*r));
}

static keel_status run_init(struct model_run *r, const struct model_bench *m)
{
    const struct kb_env *env = m->b.env;
    keel_optimizer_kind kind = KEEL_OPTIM_ADAM;
    keel_optimizer_options oo;
    keel_status s;
    int64_t B = m->batch;

    memset(r, 0, sizeof(*r));
    r->m = m;
    s = keel_set_device(env->device);
    if (s != KEEL_STATUS_OK)
        return s;
    keel_seed(MODEL_SEED);
    if (m->model == M_BERT) {
        int64_t xs[3] = {B, m->enc.seq, m->enc.hidden};
        double sc = 1.0 / sqrt((double)(m->enc.hidden / m->enc.heads));

        kind = KEEL_OPTIM_ADAMW;
        s = kb_encoder_build(&m->enc, &r->model);
        if (!s)
            s = keel_nn_mse_loss("mean", &r->loss_fn);
        if (!s)
            s = keel_randn(3, xs, KEEL_F32, env->device, &r->x);
        if (!s)
            s = keel_randn(3, xs, KEEL_F32, env->device, &r->y);
        if (!s)
            s = keel_full(0, NULL, KEEL_F32, sc, env->device, &r->scale);
    } else {
        int64_t side = m->model == M_LENET ? 28 : m->image;
        int64_t xs[4] = {B, m->model == M_LENET ? 1 : 3, side, side};
        int64_t ys[1] = {B};

        if (m->model == M_LENET)
            s = kb_lenet_build(&r->model);
        else {
            kind = KEEL_OPTIM_MOMENTUM;
            s = kb_resnet18_build(m->width, 10, &r->model);
        }
        if (!s)
            s = keel_nn_cross_entropy_loss(NULL, &r->loss_fn);
        if (!s)
            s = keel_uniform(4, xs, KEEL_F32, 0.0, 1.0, env->device, &r->x);
        if (!s)
            s = keel_randint(0, 10, 1, ys, KEEL_I64, env->device, &r->y);
    }
    if (!s && m->train) {
        oo = keel_optimizer_default_options(kind);
        oo.learning_rate = kind == KEEL_OPTIM_MOMENTUM ? 0.01 : 1e-3;
        s = keel_optimizer_create_from_layer(kind, r->model, &oo, &r->opt);
    }
    if (!s) {
        if (m->train)
            keel_layer_train(r->model);
        else
            keel_layer_eval(r->model);
    }
    if (s != KEEL_STATUS_OK)
        run_free(r);
    return s;
}

static keel_status forward(struct model_run *r, keel_tensor **out)
{
    switch (r->m->model) {
    case M_BERT:
        return kb_encoder_forward(r->model, &r->m->enc, r->x, r->scale, NULL,
                                  out);
    case M_RESNET:
        return kb_resnet18_forward(r->model, r->x, out);
    default:
        return keel_layer_call(r->model, r->x, out);
    }
}

/* One training step, or one inference under no-grad. */
static keel_status step(struct model_run *r)
{
    keel_status s;

    keel_tensor_free(r->loss);
    keel_tensor_free(r->out);
    r->loss = r->out = NULL;
    if (!r->m->train) {
        keel_no_grad_begin();
        s = forward(r, &r->out);
        keel_no_grad_end();
        return s;
    }
    s = forward(r, &r->out);
    if (!s)
        s = keel_layer_call2(r->loss_fn, r->out, r->y, &r->loss);
    if (!s)
        s = keel_backward(r->loss, NULL, false);
    if (!s)
        s = keel_optimizer_step(r->opt);
    if (!s)
        s = keel_optimizer_clear_grad(r->opt);
    return s;
}

/* The first step's result: a finite loss, or finite outputs of the
 * expected shape. */
static bool check(keel_bm_state *st, struct model_bench *m,
                  struct model_run *r)
{
    const keel_tensor *t = m->train ? r->loss : r->out;
    int64_t want = m->model == M_BERT
                       ? m->batch * m->enc.seq * m->enc.hidden
                       : m->batch * 10;
    int64_t n = t ? keel_tensor_numel(t) : 0;
    float *v = NULL;
    keel_status s;

    if (m->train)
        want = 1;
    if (n != want)
        return kb_fail(st, &m->b, KB_WRONG,
                       "wrong result: %lld output elements, expected %lld",
                       (long long)n, (long long)want);
    s = kb_tensor_read(t, &v);
    if (s != KEEL_STATUS_OK)
        return kb_fail_status(st, &m->b, "reading the result", s);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i])) {
            free(v);
            return kb_fail(st, &m->b, KB_WRONG,
                           "wrong result: element %lld is not finite",
                           (long long)i);
        }
    free(v);
    return true;
}

static void bm_model(keel_bm_state *st, void *ctx)
{
    struct model_bench *m = ctx;
    const struct kb_env *env = m->b.env;
    struct model_run r;
    struct kb_timer t;
    keel_status s;
    double secs;
    char prev[64];

    memset(&r, 0, sizeof(r));
    snprintf(prev, sizeof(prev), "%s", keel_get_device());
    if (kb_timer_init(&t, env) != KEEL_STATUS_OK) {
        kb_fail_status(st, &m->b, "event create", keel_last_status());
        return;
    }
    s = run_init(&r, m);
    if (s != KEEL_STATUS_OK) {
        kb_fail_status(st, &m->b, "model setup", s);
        goto out;
    }
    /* The first step warms up (and is checked once). */
    s = step(&r);
    if (s == KEEL_STATUS_OK)
        s = keel_stream_synchronize(env->place, NULL);
    if (s != KEEL_STATUS_OK) {
        kb_fail_status(st, &m->b, m->train ? "training step" : "inference",
                       s);
        goto out;
    }
    if (!m->b.checked) {
        if (!check(st, m, &r))
            goto out;
        m->b.checked = true;
    }
    while (keel_bm_keep_running(st)) {
        s = kb_timer_start(&t);
        if (s == KEEL_STATUS_OK)
            s = step(&r);
        if (s == KEEL_STATUS_OK)
            s = kb_timer_stop(&t, &secs);
        if (s != KEEL_STATUS_OK) {
            kb_fail_status(st, &m->b, m->train ? "training step" : "inference",
                           s);
            goto out;
        }
        keel_bm_set_iteration_time(st, secs);
    }
    keel_bm_set_items_processed(st, m->batch * keel_bm_iterations(st));
    keel_bm_set_counter(st, "samples/s",
                        (double)m->batch * (double)keel_bm_iterations(st) /
                            keel_bm_manual_time(st),
                        KEEL_BM_COUNTER_PLAIN);
out:
    run_free(&r);
    kb_timer_destroy(&t);
    if (prev[0])
        keel_set_device(prev);
}

void kb_register_models(const struct kb_env *env)
{
    for (int mi = 0; mi < 3; mi++)
        for (int tr = 1; tr >= 0; tr--) {
            struct model_bench *m;
            int64_t batch = !tr ? 1 : mi == M_BERT ? 8 : mi == M_RESNET ? 16
                                                                          : 64;
            char name[128];

            if (env->smoke && tr)
                batch = 2;
            snprintf(name, sizeof(name), "e2e/model/%s/%s/n%lld",
                     model_names[mi], tr ? "train" : "infer",
                     (long long)batch);
            m = kb_register(env, name, sizeof(*m), bm_model,
                            KEEL_BM_TIME_MANUAL, KEEL_BM_UNIT_MS);
            if (!m)
                continue;
            m->model = (enum model)mi;
            m->train = tr;
            m->batch = batch;
            m->enc.batch = batch;
            m->enc.seq = env->smoke ? 16 : 128;
            m->enc.hidden = env->smoke ? 48 : 768;
            m->enc.heads = env->smoke ? 4 : 12;
            m->enc.ffn = env->smoke ? 96 : 3072;
            m->enc.dropout = 0.1;
            m->width = env->smoke ? 8 : 64;
            m->image = env->smoke ? 32 : 64;
        }
}
