/*
 * keel bench — mixed precision (AMP) training steps.
 *
 *   e2e/amp_lenet_step/{fp32,bf16_o1,bf16_o2}/nB     B = 64 (smoke 4)
 *   e2e/amp_encoder_step/{fp32,bf16_o1,bf16_o2}/n8
 *
 * One training step of a model built from keel's nn layers, the way a
 * Paddle user writes it: the forward pass and the loss inside an
 * auto_cast scope (keel_amp_begin, level O1 or O2, dtype bfloat16; none
 * for fp32), keel_backward, keel_optimizer_step, keel_optimizer_clear_grad.
 * bf16_o2 first decorates the model and its optimizer
 * (keel_amp_decorate(..., KEEL_AMP_O2, KEEL_BF16, -1): bfloat16 parameters
 * with float32 master weights). No GradScaler: bfloat16 has float32's
 * exponent range and Paddle disables the scaler for it.
 *
 * LeNet-5: conv 1->6 k5 pad 2, relu, maxpool 2, conv 6->16 k5, relu,
 * maxpool 2, flatten, linear 400->120, relu, linear 120->84, relu, linear
 * 84->10, CrossEntropyLoss; Adam (lr 1e-3); 1x28x28 inputs.
 *
 * Encoder: one post-LayerNorm (BERT-style) transformer block on x [B, S, H],
 * S = 128, H = 256, 4 heads, FFN 1024 (smoke: S = 16, H = 32, 2 heads,
 * FFN 64): qkv = Linear(H, 3H); heads by reshape + permute; scores =
 * q k^T (matmul with transpose_y) times 1/sqrt(d); softmax; p v; heads
 * merged; Linear(H, H); residual; LayerNorm; Linear(H, FFN), GELU,
 * Linear(FFN, H); residual; LayerNorm; MSELoss to a fixed random target.
 * No dropout. AdamW (lr 1e-3, weight decay 0.01). The 1/sqrt(d) factor is
 * a 0-d tensor of the scores' dtype, as Paddle's scale of a Python float,
 * which keeps the dtype (a float32 tensor would promote the scores).
 *
 * Before timing, the first call checks the step:
 *
 *  - the loss is finite; for bf16 the loss of the auto_cast step is within
 *    5% of the float32 loss of the same weights and data (a forward pass
 *    under no-grad before any casting);
 *  - keel_amp_op_stats over one step: in the bf16 variants every white op
 *    of the model (conv2d and linear for LeNet, linear and matmul for the
 *    encoder) ran in bfloat16 at least once, and in fp32 nothing ran in a
 *    low-precision dtype. A device without the bfloat16 kernel (auto_cast
 *    fell back to float32, keel_amp_fallback_count) is a skip; any other
 *    miss is a failure: a "bf16" figure measured in float32 would be a
 *    lie.
 *
 * Counters: samples/s, and the op calls per step by the dtype they
 * computed in (ops_f32, ops_bf16), from that check.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/amp.h>
#include <keel/autograd.h>
#include <keel/nn.h>
#include <keel/optim.h>
#include <keel/runtime.h>
#include <keel/tensor.h>

#include "kb.h"

enum amp_model { AMP_LENET, AMP_ENCODER };
enum amp_variant { AMP_FP32, AMP_BF16_O1, AMP_BF16_O2 };

static const char *const variant_names[] = {"fp32", "bf16_o1", "bf16_o2"};

#define AMP_SEED 20261203u
#define AMP_LOSS_RTOL 0.05

struct amp_bench {
    struct kb_bench b;
    enum amp_model model;
    enum amp_variant variant;
    int64_t batch;
    struct kb_enc_dims enc; /* encoder (no dropout) */
    /* From the first call's check. */
    double ops_f32, ops_bf16;
};

struct amp_run {
    const struct amp_bench *a;
    keel_layer *model;   /* Sequential (LeNet) or LayerList (encoder) */
    keel_layer *loss_fn;
    keel_optimizer *opt;
    keel_tensor *x, *y;  /* input; labels (LeNet) or target (encoder) */
    keel_tensor *scale_f32, *scale_bf16; /* encoder: 1/sqrt(d) */
    keel_tensor *loss;   /* of the last step */
    keel_amp_options amp;
    bool use_amp;
};

/* Forward pass and loss: r->loss. */
static keel_status forward_loss(struct amp_run *r)
{
    keel_tensor *out = NULL;
    keel_status s;

    if (r->a->model == AMP_LENET)
        s = keel_layer_call(r->model, r->x, &out);
    else
        s = kb_encoder_forward(r->model, &r->a->enc, r->x, r->scale_f32,
                               r->scale_bf16, &out);
    if (s == KEEL_STATUS_OK)
        s = keel_layer_call2(r->loss_fn, out, r->y, &r->loss);
    keel_tensor_free(out);
    return s;
}

/* One training step; r->loss holds its loss afterwards. */
static keel_status amp_step(struct amp_run *r)
{
    keel_status s, e;

    keel_tensor_free(r->loss);
    r->loss = NULL;
    if (r->use_amp) {
        s = keel_amp_begin(&r->amp);
        if (s != KEEL_STATUS_OK)
            return s;
    }
    s = forward_loss(r);
    if (r->use_amp) {
        e = keel_amp_end();
        if (s == KEEL_STATUS_OK)
            s = e;
    }
    if (s == KEEL_STATUS_OK)
        s = keel_backward(r->loss, NULL, false);
    if (s == KEEL_STATUS_OK)
        s = keel_optimizer_step(r->opt);
    if (s == KEEL_STATUS_OK)
        s = keel_optimizer_clear_grad(r->opt);
    return s;
}

static void run_free(struct amp_run *r)
{
    keel_tensor_free(r->loss);
    keel_tensor_free(r->x);
    keel_tensor_free(r->y);
    keel_tensor_free(r->scale_f32);
    keel_tensor_free(r->scale_bf16);
    keel_optimizer_free(r->opt);
    keel_layer_free(r->loss_fn);
    keel_layer_free(r->model);
    memset(r, 0, sizeof(*r));
}

/* Model, data, loss and optimizer, seeded: every variant starts from the
 * same weights and data. Not decorated yet. */
static keel_status run_init(struct amp_run *r, const struct amp_bench *a)
{
    const struct kb_env *env = a->b.env;
    keel_optimizer_options oo;
    keel_optimizer_kind kind;
    keel_status s;

    memset(r, 0, sizeof(*r));
    r->a = a;
    s = keel_set_device(env->device);
    if (s != KEEL_STATUS_OK)
        return s;
    keel_seed(AMP_SEED);
    if (a->model == AMP_LENET) {
        int64_t xs[4] = {a->batch, 1, 28, 28}, ys[1] = {a->batch};

        kind = KEEL_OPTIM_ADAM;
        s = kb_lenet_build(&r->model);
        if (s == KEEL_STATUS_OK)
            s = keel_nn_cross_entropy_loss(NULL, &r->loss_fn);
        if (s == KEEL_STATUS_OK)
            s = keel_uniform(4, xs, KEEL_F32, 0.0, 1.0, env->device, &r->x);
        if (s == KEEL_STATUS_OK)
            s = keel_randint(0, 10, 1, ys, KEEL_I64, env->device, &r->y);
    } else {
        int64_t xs[3] = {a->batch, a->enc.seq, a->enc.hidden};
        double sc = 1.0 / sqrt((double)(a->enc.hidden / a->enc.heads));

        kind = KEEL_OPTIM_ADAMW;
        s = kb_encoder_build(&a->enc, &r->model);
        if (s == KEEL_STATUS_OK)
            s = keel_nn_mse_loss("mean", &r->loss_fn);
        if (s == KEEL_STATUS_OK)
            s = keel_randn(3, xs, KEEL_F32, env->device, &r->x);
        if (s == KEEL_STATUS_OK)
            s = keel_randn(3, xs, KEEL_F32, env->device, &r->y);
        if (s == KEEL_STATUS_OK)
            s = keel_full(0, NULL, KEEL_F32, sc, env->device, &r->scale_f32);
        if (s == KEEL_STATUS_OK)
            s = keel_full(0, NULL, KEEL_BF16, sc, env->device,
                          &r->scale_bf16);
    }
    if (s == KEEL_STATUS_OK) {
        oo = keel_optimizer_default_options(kind);
        oo.learning_rate = 1e-3;
        s = keel_optimizer_create_from_layer(kind, r->model, &oo, &r->opt);
    }
    r->amp = keel_amp_default_options();
    r->amp.dtype = KEEL_BF16;
    r->amp.level = a->variant == AMP_BF16_O2 ? KEEL_AMP_O2 : KEEL_AMP_O1;
    r->use_amp = a->variant != AMP_FP32;
    if (s != KEEL_STATUS_OK)
        run_free(r);
    return s;
}

/* The float32 loss of the current weights, without recording a graph. */
static keel_status reference_loss(struct amp_run *r, double *loss)
{
    keel_status s;

    keel_no_grad_begin();
    s = forward_loss(r);
    keel_no_grad_end();
    if (s == KEEL_STATUS_OK)
        s = keel_tensor_item(r->loss, 0, loss);
    keel_tensor_free(r->loss);
    r->loss = NULL;
    return s;
}

/* ---- the check ------------------------------------------------------------- */

/* The ops that must compute in bfloat16 under auto_cast (the white ops
 * the model calls). */
static int white_ops(const struct amp_bench *a, keel_op_id *ops)
{
    if (a->model == AMP_LENET) {
        ops[0] = KEEL_OP_CONV2D;
        ops[1] = KEEL_OP_LINEAR;
    } else {
        ops[0] = KEEL_OP_LINEAR;
        ops[1] = KEEL_OP_MATMUL;
    }
    return 2;
}

/* One step with operator statistics on: the dtypes it computed in. */
static bool check_dtypes(keel_bm_state *st, struct amp_bench *a,
                         struct amp_run *r)
{
    keel_op_id ops[4];
    int n = white_ops(a, ops);
    double f32 = 0, bf16 = 0, f16 = 0;
    keel_status s;

    keel_amp_fallback_reset();
    keel_amp_op_stats_reset();
    keel_amp_op_stats_enable(true);
    s = amp_step(r);
    if (s == KEEL_STATUS_OK)
        s = keel_stream_synchronize(a->b.env->place, NULL);
    keel_amp_op_stats_enable(false);
    if (s != KEEL_STATUS_OK)
        return kb_fail_status(st, &a->b, "amp step (operator statistics)", s);
    for (int op = 0; op < KEEL_OP_COUNT; op++) {
        f32 += (double)keel_amp_op_stats_get((keel_op_id)op, KEEL_F32);
        bf16 += (double)keel_amp_op_stats_get((keel_op_id)op, KEEL_BF16);
        f16 += (double)keel_amp_op_stats_get((keel_op_id)op, KEEL_F16);
    }
    a->ops_f32 = f32;
    a->ops_bf16 = bf16;
    if (a->variant == AMP_FP32) {
        if (bf16 > 0 || f16 > 0)
            return kb_fail(st, &a->b, KB_ERROR,
                           "the float32 step ran %.0f bfloat16 and %.0f "
                           "float16 op calls (no auto_cast scope is open)",
                           bf16, f16);
        return true;
    }
    for (int i = 0; i < n; i++) {
        const char *name = keel_op_get_info(ops[i])->name;
        uint64_t lo = keel_amp_op_stats_get(ops[i], KEEL_BF16);
        uint64_t hi = keel_amp_op_stats_get(ops[i], KEEL_F32);

        if (lo > 0)
            continue;
        if (keel_amp_fallback_count(ops[i]) > 0)
            return kb_fail(st, &a->b, KB_SKIPPED,
                           "no kernel: the device has no bfloat16 %s kernel; "
                           "auto_cast ran %llu %s calls in float32, so this "
                           "would measure float32",
                           name, (unsigned long long)hi, name);
        return kb_fail(st, &a->b, KB_ERROR,
                       "%s never ran in bfloat16 under auto_cast %s "
                       "(%llu float32 calls in one step): this would "
                       "measure float32",
                       name, variant_names[a->variant],
                       (unsigned long long)hi);
    }
    return true;
}

static bool check_loss(keel_bm_state *st, struct amp_bench *a,
                       struct amp_run *r, double ref)
{
    double loss;
    keel_status s = keel_tensor_item(r->loss, 0, &loss);

    if (s != KEEL_STATUS_OK)
        return kb_fail_status(st, &a->b, "read loss", s);
    if (!isfinite(loss))
        return kb_fail(st, &a->b, KB_WRONG, "wrong result: loss %g", loss);
    if (a->variant != AMP_FP32 &&
        fabs(loss - ref) > AMP_LOSS_RTOL * fabs(ref) + 1e-4)
        return kb_fail(st, &a->b, KB_WRONG,
                       "wrong result: the %s loss %.6g is more than %.0f%% "
                       "from the float32 loss %.6g of the same weights",
                       variant_names[a->variant], loss, AMP_LOSS_RTOL * 100,
                       ref);
    return true;
}

/* ---- the benchmark --------------------------------------------------------- */

static void bm_amp(keel_bm_state *st, void *ctx)
{
    struct amp_bench *a = ctx;
    const struct kb_env *env = a->b.env;
    keel_op_id ops[4];
    keel_dtype dts[4] = {KEEL_BF16, KEEL_BF16, KEEL_BF16, KEEL_BF16};
    struct amp_run r;
    struct kb_timer t;
    keel_status s;
    double secs, ref = 0;
    char label[96], prev[64];

    memset(&r, 0, sizeof(r));
    /* The layers are made on the current device: the one under test for
     * the duration of the benchmark. */
    snprintf(prev, sizeof(prev), "%s", keel_get_device());
    if (a->variant != AMP_FP32 &&
        !kb_need_kernels(st, &a->b, white_ops(a, ops), ops, dts))
        return;
    if (kb_timer_init(&t, env) != KEEL_STATUS_OK) {
        kb_fail_status(st, &a->b, "event create", keel_last_status());
        return;
    }
    s = run_init(&r, a);
    if (s != KEEL_STATUS_OK) {
        kb_fail_status(st, &a->b, "model setup", s);
        goto out;
    }
    if (!a->b.checked && a->variant != AMP_FP32) {
        s = reference_loss(&r, &ref);
        if (s != KEEL_STATUS_OK) {
            kb_fail_status(st, &a->b, "float32 reference forward", s);
            goto out;
        }
    }
    if (a->variant == AMP_BF16_O2) {
        s = keel_amp_decorate(&r.model, 1, &r.opt, 1, KEEL_AMP_O2, KEEL_BF16,
                              -1);
        if (s != KEEL_STATUS_OK) {
            kb_fail_status(st, &a->b, "keel_amp_decorate O2", s);
            goto out;
        }
    }
    if (!a->b.checked) {
        /* The first step: its loss is the loss of the initial weights. */
        s = amp_step(&r);
        if (s == KEEL_STATUS_OK)
            s = keel_stream_synchronize(env->place, NULL);
        if (s != KEEL_STATUS_OK) {
            kb_fail_status(st, &a->b, "amp step", s);
            goto out;
        }
        if (!check_loss(st, a, &r, ref) || !check_dtypes(st, a, &r))
            goto out;
        a->b.checked = true;
    } else {
        /* Warm up. */
        s = amp_step(&r);
        if (s == KEEL_STATUS_OK)
            s = keel_stream_synchronize(env->place, NULL);
        if (s != KEEL_STATUS_OK) {
            kb_fail_status(st, &a->b, "amp step", s);
            goto out;
        }
    }
    while (keel_bm_keep_running(st)) {
        s = kb_timer_start(&t);
        if (s == KEEL_STATUS_OK)
            s = amp_step(&r);
        if (s == KEEL_STATUS_OK)
            s = kb_timer_stop(&t, &secs);
        if (s != KEEL_STATUS_OK) {
            kb_fail_status(st, &a->b, "amp step", s);
            goto out;
        }
        keel_bm_set_iteration_time(st, secs);
    }
    keel_bm_set_items_processed(st, a->batch * keel_bm_iterations(st));
    keel_bm_set_counter(st, "samples/s",
                        (double)a->batch * (double)keel_bm_iterations(st) /
                            keel_bm_manual_time(st),
                        KEEL_BM_COUNTER_PLAIN);
    keel_bm_set_counter(st, "ops_f32", a->ops_f32, KEEL_BM_COUNTER_PLAIN);
    keel_bm_set_counter(st, "ops_bf16", a->ops_bf16, KEEL_BM_COUNTER_PLAIN);
    if (a->model == AMP_ENCODER) {
        snprintf(label, sizeof(label), "S%lld H%lld heads%lld ffn%lld",
                 (long long)a->enc.seq, (long long)a->enc.hidden,
                 (long long)a->enc.heads, (long long)a->enc.ffn);
        keel_bm_set_label(st, label);
    }
out:
    run_free(&r);
    kb_timer_destroy(&t);
    if (prev[0])
        keel_set_device(prev);
}

void kb_register_amp(const struct kb_env *env)
{
    for (int m = 0; m < 2; m++) {
        for (int v = 0; v < 3; v++) {
            int64_t batch = m == AMP_LENET ? (env->smoke ? 4 : 64) : 8;
            char name[128];
            struct amp_bench *a;

            snprintf(name, sizeof(name), "e2e/amp_%s_step/%s/n%lld",
                     m == AMP_LENET ? "lenet" : "encoder", variant_names[v],
                     (long long)batch);
            a = kb_register(env, name, sizeof(*a), bm_amp,
                            KEEL_BM_TIME_MANUAL, KEEL_BM_UNIT_MS);
            if (!a)
                continue;
            a->model = (enum amp_model)m;
            a->variant = (enum amp_variant)v;
            a->batch = batch;
            a->enc.batch = batch;
            a->enc.seq = env->smoke ? 16 : 128;
            a->enc.hidden = env->smoke ? 32 : 256;
            a->enc.heads = env->smoke ? 2 : 4;
            a->enc.ffn = env->smoke ? 64 : 1024;
            a->enc.dropout = 0;
        }
    }
}
