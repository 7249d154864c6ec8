// SPDX-License-Identifier: Apache-2.0
/*
 * Optimizers (SGD, Momentum, Adam, AdamW) with PaddlePaddle 3.x semantics
 * and gradient clipping. Updates run through the fused catalog ops under
 * no-grad; see keel/optim.h and docs/optim.md.
 *
 * Adam's beta-power accumulators are kept on the host, one pair per
 * parameter, in the parameter's dtype as in Paddle: they start at beta1 /
 * beta2 and are multiplied by the betas after each update of that
 * parameter (in float32 arithmetic for float32 parameters).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/autograd.h>
#include <keel/io.h>
#include <keel/nn.h>
#include <keel/ops.h>
#include <keel/optim.h>

#include "optim/optim_internal.h"

struct opt_param {
    char *name;
    keel_tensor *param;
    keel_tensor *master; /* multi_precision: float32 copy of a float16 or
                            bfloat16 parameter; NULL until first update */
    keel_tensor *acc1;  /* velocity or moment1; NULL until first update */
    keel_tensor *acc2;  /* moment2 */
    double beta1_pow;   /* rounded to float32 for float32 parameters */
    double beta2_pow;
    bool has_state;
    /* Parameter groups (keel_optimizer_set_param_options): the step's lr
     * times lr_scale, and weight_decay instead of the optimizer's when
     * own_decay. */
    double lr_scale;
    double weight_decay;
    bool own_decay;
};

struct keel_optimizer {
    keel_optimizer_kind kind;
    keel_optimizer_options o;
    struct opt_param *p;
    size_t n;
    int64_t steps;
    bool multi_precision; /* Paddle's multi_precision (amp decorate O2) */
};

static const char *const kind_names[] = {"SGD", "Momentum", "Adam", "AdamW"};

keel_optimizer_options keel_optimizer_default_options(keel_optimizer_kind kind)
{
    keel_optimizer_options o;

    memset(&o, 0, sizeof(o));
    o.learning_rate = 1e-3;
    o.grad_clip.kind = KEEL_GRAD_CLIP_NONE;
    o.momentum = 0.9;
    o.beta1 = 0.9;
    o.beta2 = 0.999;
    o.epsilon = 1e-8;
    o.weight_decay = kind == KEEL_OPTIM_ADAMW ? 0.01 : 0.0;
    return o;
}

static keel_status bad(keel_optimizer_kind kind, const char *msg, double v)
{
    return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: %s, got %g",
                       kind_names[kind], msg, v);
}

static keel_status check_options(keel_optimizer_kind kind,
                                 const keel_optimizer_options *o)
{
    const keel_grad_clip *c = &o->grad_clip;

    if (!o->lr_scheduler && !(isfinite(o->learning_rate) &&
                              o->learning_rate >= 0))
        return bad(kind, "learning_rate must be finite and >= 0",
                   o->learning_rate);
    if (!isfinite(o->weight_decay))
        return bad(kind, "weight_decay must be finite", o->weight_decay);
    if (kind == KEEL_OPTIM_MOMENTUM && !isfinite(o->momentum))
        return bad(kind, "momentum must be finite", o->momentum);
    if (kind == KEEL_OPTIM_ADAM || kind == KEEL_OPTIM_ADAMW) {
        if (!(o->beta1 >= 0 && o->beta1 < 1))
            return bad(kind, "beta1 must be in [0, 1)", o->beta1);
        if (!(o->beta2 >= 0 && o->beta2 < 1))
            return bad(kind, "beta2 must be in [0, 1)", o->beta2);
        if (!(o->epsilon > 0 && isfinite(o->epsilon)))
            return bad(kind, "epsilon must be > 0", o->epsilon);
    }
    switch (c->kind) {
    case KEEL_GRAD_CLIP_NONE:
        break;
    case KEEL_GRAD_CLIP_GLOBAL_NORM:
    case KEEL_GRAD_CLIP_NORM:
        if (!(c->clip_norm > 0 && isfinite(c->clip_norm)))
            return bad(kind, "grad_clip clip_norm must be > 0", c->clip_norm);
        break;
    case KEEL_GRAD_CLIP_VALUE:
        if (isnan(c->min) || isnan(c->max) || c->min > c->max)
            return bad(kind, "grad_clip needs min <= max", c->min);
        break;
    default:
        return bad(kind, "unknown grad_clip kind", (double)c->kind);
    }
    return KEEL_STATUS_OK;
}

keel_status keel_optimizer_create(keel_optimizer_kind kind,
                                  const keel_named_param *params,
                                  size_t num_params,
                                  const keel_optimizer_options *options,
                                  keel_optimizer **out)
{
    keel_optimizer *opt = NULL;
    keel_status st;
    size_t i, j;

    if (out)
        *out = NULL;
    if ((unsigned)kind > KEEL_OPTIM_ADAMW)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "optimizer: unknown kind %d", (int)kind);
    if (!out || !params || num_params == 0)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: out and a non-empty params list are required",
                           kind_names[kind]);
    opt = calloc(1, sizeof(*opt));
    if (!opt)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY, "optimizer: no memory");
    opt->kind = kind;
    opt->o = options ? *options : keel_optimizer_default_options(kind);
    st = check_options(kind, &opt->o);
    if (st)
        goto fail;
    for (i = 0; i < num_params; i++) {
        const keel_named_param *np = &params[i];
        keel_dtype dt;

        if (!np->name || !np->name[0] || !np->param) {
            st = keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                             "%s: parameter %zu has no name or tensor",
                             kind_names[kind], i);
            goto fail;
        }
        dt = keel_tensor_dtype(np->param);
        if (dt != KEEL_F32 && dt != KEEL_F64 && dt != KEEL_F16 &&
            dt != KEEL_BF16) {
            st = keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                             "%s: parameter '%s' must be a floating-point "
                             "tensor (float32, float64, float16 or "
                             "bfloat16)",
                             kind_names[kind], np->name);
            goto fail;
        }
        for (j = 0; j < i; j++) {
            if (!strcmp(params[j].name, np->name)) {
                st = keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                                 "%s: duplicate parameter name '%s'",
                                 kind_names[kind], np->name);
                goto fail;
            }
        }
    }
    opt->p = calloc(num_params, sizeof(*opt->p));
    if (!opt->p) {
        st = keel__error(KEEL_STATUS_OUT_OF_MEMORY, "optimizer: no memory");
        goto fail;
    }
    opt->n = num_params;
    for (i = 0; i < num_params; i++) {
        opt->p[i].name = strdup(params[i].name);
        if (!opt->p[i].name) {
            st = keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                             "optimizer: no memory");
            goto fail;
        }
        opt->p[i].param = keel_tensor_ref(params[i].param);
        opt->p[i].lr_scale = 1.0;
    }
    *out = opt;
    return KEEL_STATUS_OK;
fail:
    keel_optimizer_free(opt);
    return st;
}

keel_status keel_optimizer_create_from_layer(
    keel_optimizer_kind kind, const keel_layer *layer,
    const keel_optimizer_options *options, keel_optimizer **out)
{
    keel_state_dict *sd = NULL;
    keel_named_param *params = NULL;
    keel_status st;
    int64_t n, i;

    if (out)
        *out = NULL;
    if (!layer || !out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_optimizer_create_from_layer: %s is NULL",
                           !layer ? "layer" : "out");
    st = keel_layer_parameters(layer, &sd);
    if (st)
        return st;
    n = keel_state_dict_count(sd);
    if (n == 0) {
        st = keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                         "keel_optimizer_create_from_layer: layer '%s' has "
                         "no parameters",
                         keel_layer_type(layer));
        goto done;
    }
    params = calloc((size_t)n, sizeof(*params));
    if (!params) {
        st = keel__error(KEEL_STATUS_OUT_OF_MEMORY, "optimizer: no memory");
        goto done;
    }
    for (i = 0; i < n; i++) {
        st = keel_state_dict_at(sd, i, &params[i].name, &params[i].param);
        if (st)
            goto done;
    }
    st = keel_optimizer_create(kind, params, (size_t)n, options, out);
done:
    free(params);
    keel_state_dict_free(sd);
    return st;
}

void keel_optimizer_free(keel_optimizer *opt)
{
    size_t i;

    if (!opt)
        return;
    for (i = 0; opt->p && i < opt->n; i++) {
        free(opt->p[i].name);
        keel_tensor_free(opt->p[i].param);
        keel_tensor_free(opt->p[i].master);
        keel_tensor_free(opt->p[i].acc1);
        keel_tensor_free(opt->p[i].acc2);
    }
    free(opt->p);
    free(opt);
}

double keel_optimizer_get_lr(const keel_optimizer *opt)
{
    if (!opt)
        return NAN;
    if (opt->o.lr_scheduler)
        return keel_lr_scheduler_last_lr(opt->o.lr_scheduler);
    return opt->o.learning_rate;
}

keel_status keel_optimizer_set_param_options(keel_optimizer *opt,
                                             const char *name,
                                             double lr_scale,
                                             double weight_decay)
{
    size_t i;

    if (!opt || !name)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "optimizer: set_param_options: %s is NULL",
                           !opt ? "opt" : "name");
    if (!(isfinite(lr_scale) && lr_scale >= 0))
        return bad(opt->kind, "a parameter's learning-rate scale must be "
                   "finite and >= 0", lr_scale);
    if (isinf(weight_decay))
        return bad(opt->kind, "a parameter's weight_decay must be finite "
                   "(or NaN for the optimizer's)", weight_decay);
    for (i = 0; i < opt->n; i++)
        if (!strcmp(opt->p[i].name, name))
            break;
    if (i == opt->n)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: set_param_options: no parameter named '%s'",
                           kind_names[opt->kind], name);
    opt->p[i].lr_scale = lr_scale;
    opt->p[i].own_decay = !isnan(weight_decay);
    opt->p[i].weight_decay = weight_decay;
    return KEEL_STATUS_OK;
}

keel_status keel_optimizer_set_lr(keel_optimizer *opt, double lr)
{
    if (!opt)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "optimizer: opt is NULL");
    if (opt->o.lr_scheduler)
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "%s: set_lr with an LR scheduler attached",
                           kind_names[opt->kind]);
    if (!(isfinite(lr) && lr >= 0))
        return bad(opt->kind, "learning_rate must be finite and >= 0", lr);
    opt->o.learning_rate = lr;
    return KEEL_STATUS_OK;
}

int64_t keel_optimizer_step_count(const keel_optimizer *opt)
{
    return opt ? opt->steps : -1;
}

/* ---- helpers ------------------------------------------------------------ */

static keel_status device_of(const keel_tensor *t, char *buf, size_t size)
{
    return keel_place_name(keel_tensor_place(t), buf, size);
}

static keel_status copy_tensor(const keel_tensor *t, keel_tensor **out)
{
    keel_tensor *in = (keel_tensor *)t;
    int n = 0;

    *out = NULL;
    return keel_op_run(KEEL_OP_COPY, &in, 1, NULL, 0, out, 1, &n);
}

/* Multiply t by the 0-d / [1] tensor s (same dtype as t via cast). */
static keel_status scale_by(const keel_tensor *t, const keel_tensor *s,
                            keel_tensor **out)
{
    keel_tensor *c = NULL;
    keel_status st;

    st = keel_cast(s, keel_tensor_dtype(t), &c);
    if (st)
        return st;
    st = keel_multiply(t, c, out);
    keel_tensor_free(c);
    return st;
}

/* Sum of squares of g as a float32 scalar (or float64 for float64 g). */
static keel_status sum_square(const keel_tensor *g, keel_tensor **out)
{
    keel_tensor *sq = NULL;
    keel_status st;

    st = keel_square(g, &sq);
    if (st)
        return st;
    st = keel_sum(sq, 0, NULL, false, out);
    keel_tensor_free(sq);
    return st;
}

/* grads[i] (new references, NULL where the parameter has none) scaled by
 * clip_norm / max(global_norm, clip_norm): in place, as Paddle 3.3's
 * ClipGradByGlobalNorm does, so the parameters' stored gradients change;
 * a 0-d or strided gradient is replaced by a scaled copy instead. */
static keel_status clip_global_norm(keel_optimizer *opt, keel_tensor **grads)
{
    keel_tensor *total = NULL, *ss = NULL, *t = NULL, *norm = NULL;
    keel_tensor *cap = NULL, *den = NULL, *scale = NULL, *ng = NULL;
    char dev[64];
    keel_status st = KEEL_STATUS_OK;
    size_t i, first = opt->n;

    for (i = 0; i < opt->n; i++) {
        if (!grads[i])
            continue;
        if (first == opt->n)
            first = i;
        st = sum_square(grads[i], &ss);
        if (st)
            goto out;
        /* Paddle adds float32 squares in float32, float64 ones in float64 */
        if (!total) {
            total = ss;
            ss = NULL;
            continue;
        }
        if (keel_tensor_dtype(ss) != keel_tensor_dtype(total)) {
            st = keel_cast(ss, KEEL_F64, &t);
            if (st)
                goto out;
            keel_tensor_free(ss);
            ss = t;
            t = NULL;
            st = keel_cast(total, KEEL_F64, &t);
            if (st)
                goto out;
            keel_tensor_free(total);
            total = t;
            t = NULL;
        }
        st = keel_add(total, ss, &t);
        if (st)
            goto out;
        keel_tensor_free(total);
        keel_tensor_free(ss);
        total = t;
        ss = t = NULL;
    }
    if (!total)
        goto out;
    st = device_of(total, dev, sizeof(dev));
    if (st)
        goto out;
    st = keel_sqrt(total, &norm);
    if (st)
        goto out;
    st = keel_full(0, NULL, keel_tensor_dtype(norm), opt->o.grad_clip.clip_norm,
                   dev, &cap);
    if (st)
        goto out;
    st = keel_maximum(norm, cap, &den);
    if (st)
        goto out;
    st = keel_divide(cap, den, &scale);
    if (st)
        goto out;
    for (i = first; i < opt->n; i++) {
        if (!grads[i])
            continue;
        st = scale_by(grads[i], scale, &ng);
        if (st)
            goto out;
        /* Paddle 3.3 scales the stored gradient in place
         * (g.multiply_(clip_input)) unless it is 0-d. */
        if (keel_tensor_ndim(grads[i]) > 0 &&
            keel_tensor_dtype(ng) == keel_tensor_dtype(grads[i]) &&
            keel_tensor_is_contiguous(grads[i])) {
            st = keel__tensor_copy_values(grads[i], ng);
            keel_tensor_free(ng);
            ng = NULL;
            if (st)
                goto out;
            continue;
        }
        keel_tensor_free(grads[i]);
        grads[i] = ng;
        ng = NULL;
    }
out:
    keel_tensor_free(total);
    keel_tensor_free(ss);
    keel_tensor_free(t);
    keel_tensor_free(norm);
    keel_tensor_free(cap);
    keel_tensor_free(den);
    keel_tensor_free(scale);
    return st;
}

/* clip_by_norm: g * clip_norm / norm when norm > clip_norm, else g. */
static keel_status clip_norm_one(const keel_tensor *g, double clip_norm,
                                 keel_tensor **out)
{
    keel_tensor *ss = NULL, *norm = NULL, *cap = NULL, *scale = NULL;
    keel_tensor *cmp = NULL, *sel = NULL, *one = NULL;
    char dev[64];
    keel_status st;

    *out = NULL;
    st = device_of(g, dev, sizeof(dev));
    if (st)
        return st;
    st = sum_square(g, &ss);
    if (st)
        goto out;
    st = keel_sqrt(ss, &norm);
    if (st)
        goto out;
    st = keel_full(0, NULL, keel_tensor_dtype(norm), clip_norm, dev, &cap);
    if (st)
        goto out;
    st = keel_full(0, NULL, keel_tensor_dtype(norm), 1.0, dev, &one);
    if (st)
        goto out;
    st = keel_divide(cap, norm, &scale);
    if (st)
        goto out;
    st = keel_greater(norm, cap, &cmp);
    if (st)
        goto out;
    st = keel_where(cmp, scale, one, &sel);
    if (st)
        goto out;
    st = scale_by(g, sel, out);
out:
    keel_tensor_free(ss);
    keel_tensor_free(norm);
    keel_tensor_free(cap);
    keel_tensor_free(one);
    keel_tensor_free(scale);
    keel_tensor_free(cmp);
    keel_tensor_free(sel);
    return st;
}

static keel_status apply_clip(keel_optimizer *opt, keel_tensor **grads)
{
    const keel_grad_clip *c = &opt->o.grad_clip;
    keel_tensor *ng = NULL;
    keel_status st;
    size_t i;

    if (c->kind == KEEL_GRAD_CLIP_NONE)
        return KEEL_STATUS_OK;
    if (c->kind == KEEL_GRAD_CLIP_GLOBAL_NORM)
        return clip_global_norm(opt, grads);
    for (i = 0; i < opt->n; i++) {
        if (!grads[i])
            continue;
        if (c->kind == KEEL_GRAD_CLIP_NORM)
            st = clip_norm_one(grads[i], c->clip_norm, &ng);
        else
            st = keel_clip(grads[i], c->min, c->max, &ng);
        if (st)
            return st;
        keel_tensor_free(grads[i]);
        grads[i] = ng;
        ng = NULL;
    }
    return KEEL_STATUS_OK;
}

/* pow * beta in the arithmetic of dtype dt. */
static double pow_mul(double pow, double beta, keel_dtype dt)
{
    if (dt == KEEL_F32)
        return (float)((float)pow * (float)beta);
    return pow * beta;
}

/* beta rounded to dtype dt: the starting beta power, as Paddle keeps it in
 * the parameter's dtype. The float32 rounding goes through a volatile
 * float, which every compiler must store and reload: GCC 12 at -O2
 * vectorised the plain (double)(float)beta of both powers into one copy of
 * the doubles and lost the rounding, making the first Adam step 6.5e-6
 * (relative) larger than Paddle's. */
static double pow_init(double beta, keel_dtype dt)
{
    volatile float rounded;

    if (dt != KEEL_F32)
        return beta;
    rounded = (float)beta;
    return (double)rounded;
}

/* Whether p is updated through a float32 master weight. */
static bool uses_master(const keel_optimizer *opt, const struct opt_param *p)
{
    keel_dtype dt = keel_tensor_dtype(p->param);

    return opt->multi_precision && (dt == KEEL_F16 || dt == KEEL_BF16);
}

/* The dtype of p's accumulators and beta powers: float32 for a
 * multi-precision parameter (Paddle's _get_accumulator_master). */
static keel_dtype acc_dtype(const keel_optimizer *opt,
                            const struct opt_param *p)
{
    return uses_master(opt, p) ? KEEL_F32 : keel_tensor_dtype(p->param);
}

static keel_status ensure_master(keel_optimizer *opt, struct opt_param *p)
{
    if (p->master || !uses_master(opt, p))
        return KEEL_STATUS_OK;
    return keel_cast(p->param, KEEL_F32, &p->master);
}

static keel_status ensure_state(keel_optimizer *opt, struct opt_param *p)
{
    char dev[64];
    keel_status st;
    int nd = keel_tensor_ndim(p->param);
    const int64_t *shape = keel_tensor_shape(p->param);
    keel_dtype dt = acc_dtype(opt, p);

    st = ensure_master(opt, p);
    if (st || p->has_state || opt->kind == KEEL_OPTIM_SGD)
        return st;
    st = device_of(p->param, dev, sizeof(dev));
    if (st)
        return st;
    if (!p->acc1) {
        st = keel_zeros(nd, shape, dt, dev, &p->acc1);
        if (st)
            return st;
    }
    if (opt->kind != KEEL_OPTIM_MOMENTUM && !p->acc2) {
        st = keel_zeros(nd, shape, dt, dev, &p->acc2);
        if (st)
            return st;
    }
    p->beta1_pow = pow_init(opt->o.beta1, dt);
    p->beta2_pow = pow_init(opt->o.beta2, dt);
    p->has_state = true;
    return KEEL_STATUS_OK;
}

static keel_attr fattr(const char *name, double v)
{
    keel_attr a;

    a.name = name;
    a.type = KEEL_ATTR_FLOAT;
    a.v.f = v;
    return a;
}

/* param = master rounded to the parameter's dtype, written into the
 * parameter's own storage (its version advances, as an in-place update). */
static keel_status write_back(struct opt_param *p)
{
    keel_tensor *low = NULL;
    keel_status st;

    st = keel_cast(p->master, keel_tensor_dtype(p->param), &low);
    if (st == KEEL_STATUS_OK)
        st = keel__tensor_copy_values(p->param, low);
    keel_tensor_free(low);
    return st;
}

static keel_status update_one(keel_optimizer *opt, struct opt_param *p,
                              keel_tensor *grad, double lr)
{
    const keel_optimizer_options *o = &opt->o;
    keel_tensor *in[4];
    keel_attr a[8];
    int na = 0, nin = 2, nout = 0;
    keel_op_id op;
    keel_status st;
    double wd = p->own_decay ? p->weight_decay : o->weight_decay;

    st = ensure_state(opt, p);
    if (st)
        return st;
    in[0] = p->master ? p->master : p->param;
    in[1] = grad;
    a[na++] = fattr("lr", lr * p->lr_scale);
    switch (opt->kind) {
    case KEEL_OPTIM_SGD:
        op = KEEL_OP_SGD_UPDATE;
        a[na++] = fattr("weight_decay", wd);
        break;
    case KEEL_OPTIM_MOMENTUM:
        op = KEEL_OP_MOMENTUM_UPDATE;
        in[nin++] = p->acc1;
        a[na++] = fattr("mu", o->momentum);
        a[na].name = "use_nesterov";
        a[na].type = KEEL_ATTR_BOOL;
        a[na++].v.i = o->use_nesterov ? 1 : 0;
        a[na++] = fattr("weight_decay", wd);
        break;
    default:
        op = opt->kind == KEEL_OPTIM_ADAM ? KEEL_OP_ADAM_UPDATE
                                          : KEEL_OP_ADAMW_UPDATE;
        in[nin++] = p->acc1;
        in[nin++] = p->acc2;
        a[na++] = fattr("beta1", o->beta1);
        a[na++] = fattr("beta2", o->beta2);
        a[na++] = fattr("epsilon", o->epsilon);
        a[na++] = fattr("beta1_pow", p->beta1_pow);
        a[na++] = fattr("beta2_pow", p->beta2_pow);
        if (opt->kind == KEEL_OPTIM_ADAM) {
            a[na++] = fattr("weight_decay", wd);
        } else {
            bool decay = !o->apply_decay_param_fun ||
                         o->apply_decay_param_fun(p->name, o->decay_user);

            a[na++] = fattr("coeff", decay ? wd : 0.0);
        }
        break;
    }
    st = keel_op_run(op, in, nin, a, na, NULL, 0, &nout);
    if (st == KEEL_STATUS_OK && p->master)
        st = write_back(p);
    if (st)
        return st;
    if (opt->kind == KEEL_OPTIM_ADAM || opt->kind == KEEL_OPTIM_ADAMW) {
        keel_dtype dt = acc_dtype(opt, p);

        p->beta1_pow = pow_mul(p->beta1_pow, o->beta1, dt);
        p->beta2_pow = pow_mul(p->beta2_pow, o->beta2, dt);
    }
    return KEEL_STATUS_OK;
}

keel_status keel_optimizer_step(keel_optimizer *opt)
{
    keel_tensor **grads = NULL;
    keel_status st = KEEL_STATUS_OK;
    double lr;
    size_t i;

    if (!opt)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "optimizer: opt is NULL");
    lr = keel_optimizer_get_lr(opt);
    if (!isfinite(lr))
        return bad(opt->kind, "the learning rate is not finite", lr);
    grads = calloc(opt->n, sizeof(*grads));
    if (!grads)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY, "optimizer: no memory");
    keel_no_grad_begin();
    for (i = 0; i < opt->n; i++)
        grads[i] = keel_tensor_grad(opt->p[i].param);
    st = apply_clip(opt, grads);
    if (st)
        goto out;
    for (i = 0; i < opt->n; i++) {
        keel_tensor *g;

        if (!grads[i])
            continue;
        /* The fused ops add L2 into the gradient in place: use a copy so
         * that the stored gradient keeps its value, as in Paddle. */
        if (uses_master(opt, &opt->p[i]))
            st = keel_cast(grads[i], KEEL_F32, &g);
        else
            st = copy_tensor(grads[i], &g);
        if (st)
            goto out;
        keel_tensor_free(grads[i]);
        grads[i] = g;
        st = update_one(opt, &opt->p[i], g, lr);
        if (st)
            goto out;
    }
    opt->steps++;
out:
    keel_no_grad_end();
    for (i = 0; i < opt->n; i++)
        keel_tensor_free(grads[i]);
    free(grads);
    return st;
}

keel_status keel_optimizer_clear_grad(keel_optimizer *opt)
{
    keel_status st;
    size_t i;

    if (!opt)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "optimizer: opt is NULL");
    for (i = 0; i < opt->n; i++) {
        st = keel_tensor_clear_grad(opt->p[i].param);
        if (st)
            return st;
    }
    return KEEL_STATUS_OK;
}

/* ---- state dict --------------------------------------------------------- */

static keel_status put_copy(keel_state_dict *sd, const char *name,
                            const keel_tensor *t)
{
    keel_tensor *c = NULL;
    keel_status st;

    st = copy_tensor(t, &c);
    if (st)
        return st;
    st = keel_state_dict_set(sd, name, c);
    keel_tensor_free(c);
    return st;
}

static keel_status put_host(keel_state_dict *sd, const char *name,
                            const void *v, keel_dtype dt)
{
    int64_t one = 1;
    keel_tensor *t = NULL;
    keel_status st;

    st = keel_tensor_from_host(v, dt, 1, &one, "cpu", &t);
    if (st)
        return st;
    st = keel_state_dict_set(sd, name, t);
    keel_tensor_free(t);
    return st;
}

/* A beta power as a [1] tensor of the parameter's dtype. */
static keel_status put_pow(keel_state_dict *sd, const char *name, double v,
                           keel_dtype dt)
{
    float f = (float)v;

    if (dt == KEEL_F32)
        return put_host(sd, name, &f, KEEL_F32);
    return put_host(sd, name, &v, KEEL_F64);
}

static bool is_adam(const keel_optimizer *opt)
{
    return opt->kind == KEEL_OPTIM_ADAM || opt->kind == KEEL_OPTIM_ADAMW;
}

keel_status keel_optimizer_state_get(const keel_optimizer *opt,
                                     keel_state_dict *sd)
{
    char key[KEEL_STATE_DICT_NAME_MAX + 1];
    keel_lr_state ls;
    keel_status st;
    size_t i;
    int32_t f;

    if (!opt || !sd)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "optimizer state_get: NULL argument");
    keel_no_grad_begin();
    for (i = 0; i < opt->n; i++) {
        const struct opt_param *p = &opt->p[i];

        if (p->master) {
            snprintf(key, sizeof(key), "%s_fp32_master_0", p->name);
            st = put_copy(sd, key, p->master);
            if (st)
                goto out;
        }
        if (!p->has_state)
            continue;
        if (opt->kind == KEEL_OPTIM_MOMENTUM) {
            snprintf(key, sizeof(key), "%s_velocity_0", p->name);
            st = put_copy(sd, key, p->acc1);
            if (st)
                goto out;
            continue;
        }
        snprintf(key, sizeof(key), "%s_moment1_0", p->name);
        st = put_copy(sd, key, p->acc1);
        if (st)
            goto out;
        snprintf(key, sizeof(key), "%s_moment2_0", p->name);
        st = put_copy(sd, key, p->acc2);
        if (st)
            goto out;
        snprintf(key, sizeof(key), "%s_beta1_pow_acc_0", p->name);
        st = put_pow(sd, key, p->beta1_pow, acc_dtype(opt, p));
        if (st)
            goto out;
        snprintf(key, sizeof(key), "%s_beta2_pow_acc_0", p->name);
        st = put_pow(sd, key, p->beta2_pow, acc_dtype(opt, p));
        if (st)
            goto out;
    }
    st = put_host(sd, "global_step", &opt->steps, KEEL_I64);
    if (st)
        goto out;
    if (opt->o.lr_scheduler) {
        st = keel_lr_scheduler_state_get(opt->o.lr_scheduler, &ls);
        if (st)
            goto out;
        for (f = 0; f < ls.count; f++) {
            snprintf(key, sizeof(key), "LR_Scheduler.%s", ls.fields[f].name);
            st = put_host(sd, key, &ls.fields[f].value, KEEL_F64);
            if (st)
                goto out;
        }
    }
out:
    keel_no_grad_end();
    return st;
}

/* The one value of state entry `key` (borrowed tensor), or NOT_FOUND. */
static keel_status get_scalar(const keel_state_dict *sd, const char *key,
                              double *v)
{
    keel_tensor *t = keel_state_dict_get(sd, key);
    keel_status st;

    if (!t)
        return KEEL_STATUS_NOT_FOUND;
    if (keel_tensor_numel(t) != 1) {
        st = keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                         "optimizer state_set: '%s' must hold one value", key);
    } else {
        st = keel_tensor_item(t, 0, v);
    }
    return st;
}

/* Entry `key` checked against p's shape, copied onto p's device and dtype. */
static keel_status load_acc(const keel_state_dict *sd, const char *key,
                            const keel_tensor *param, keel_dtype dtype,
                            keel_tensor **out)
{
    keel_tensor *t = keel_state_dict_get(sd, key), *a = NULL, *b = NULL;
    char dev[64];
    keel_status st;
    int d;

    *out = NULL;
    if (!t)
        return KEEL_STATUS_NOT_FOUND;
    st = KEEL_STATUS_OK;
    if (keel_tensor_ndim(t) != keel_tensor_ndim(param))
        st = KEEL_STATUS_INVALID_ARGUMENT;
    for (d = 0; !st && d < keel_tensor_ndim(t); d++)
        if (keel_tensor_shape(t)[d] != keel_tensor_shape(param)[d])
            st = KEEL_STATUS_INVALID_ARGUMENT;
    if (st) {
        st = keel__error(st, "optimizer state_set: '%s' has the wrong shape",
                         key);
        goto out;
    }
    st = device_of(param, dev, sizeof(dev));
    if (st)
        goto out;
    st = keel_tensor_to(t, dev, &a);
    if (st)
        goto out;
    st = keel_cast(a, dtype, &b);
    if (st)
        goto out;
    st = copy_tensor(b, out);
out:
    keel_tensor_free(a);
    keel_tensor_free(b);
    return st;
}

keel_status keel_optimizer_state_set(keel_optimizer *opt,
                                     const keel_state_dict *sd)
{
    char key[KEEL_STATE_DICT_NAME_MAX + 1];
    struct opt_param *np = NULL;
    keel_lr_state ls;
    bool have_ls = false;
    keel_status st;
    double v;
    int64_t steps;
    size_t i;
    int32_t f;

    if (!opt || !sd)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "optimizer state_set: NULL argument");
    st = get_scalar(sd, "global_step", &v);
    if (st == KEEL_STATUS_NOT_FOUND)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "optimizer state_set: no 'global_step'");
    if (st)
        return st;
    if (!(v >= 0 && v == floor(v)))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "optimizer state_set: bad global_step %g", v);
    steps = (int64_t)v;
    np = calloc(opt->n, sizeof(*np));
    if (!np)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY, "optimizer: no memory");
    keel_no_grad_begin();
    for (i = 0; i < opt->n; i++) {
        const struct opt_param *p = &opt->p[i];
        keel_dtype adt = acc_dtype(opt, p);
        double b1, b2;

        if (uses_master(opt, p)) {
            snprintf(key, sizeof(key), "%s_fp32_master_0", p->name);
            st = load_acc(sd, key, p->param, KEEL_F32, &np[i].master);
            if (st == KEEL_STATUS_NOT_FOUND)
                st = KEEL_STATUS_OK;
            if (st)
                goto out;
        }
        if (opt->kind == KEEL_OPTIM_SGD)
            continue;
        snprintf(key, sizeof(key), "%s_%s_0", p->name,
                 opt->kind == KEEL_OPTIM_MOMENTUM ? "velocity" : "moment1");
        st = load_acc(sd, key, p->param, adt, &np[i].acc1);
        if (st == KEEL_STATUS_NOT_FOUND) {
            st = KEEL_STATUS_OK;
            continue;
        }
        if (st)
            goto out;
        np[i].has_state = true;
        if (!is_adam(opt))
            continue;
        snprintf(key, sizeof(key), "%s_moment2_0", p->name);
        st = load_acc(sd, key, p->param, adt, &np[i].acc2);
        if (st)
            goto missing;
        snprintf(key, sizeof(key), "%s_beta1_pow_acc_0", p->name);
        st = get_scalar(sd, key, &b1);
        if (st)
            goto missing;
        snprintf(key, sizeof(key), "%s_beta2_pow_acc_0", p->name);
        st = get_scalar(sd, key, &b2);
        if (st)
            goto missing;
        if (!(b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1)) {
            st = keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                             "optimizer state_set: beta pows of '%s' must be "
                             "in [0, 1)", p->name);
            goto out;
        }
        np[i].beta1_pow = pow_init(b1, adt);
        np[i].beta2_pow = pow_init(b2, adt);
    }
    if (opt->o.lr_scheduler) {
        keel_lr_state cur;

        st = keel_lr_scheduler_state_get(opt->o.lr_scheduler, &cur);
        if (st)
            goto out;
        memset(&ls, 0, sizeof(ls));
        for (f = 0; f < cur.count; f++) {
            snprintf(key, sizeof(key), "LR_Scheduler.%s", cur.fields[f].name);
            st = get_scalar(sd, key, &v);
            if (st == KEEL_STATUS_NOT_FOUND) {
                st = KEEL_STATUS_OK;
                continue;
            }
            if (st)
                goto out;
            st = keel_lr_state_set_field(&ls, cur.fields[f].name, v);
            if (st)
                goto out;
            have_ls = true;
        }
        if (have_ls) {
            st = keel_lr_scheduler_state_set(opt->o.lr_scheduler, &ls);
            if (st)
                goto out;
        }
    }
    /* Commit. */
    for (i = 0; i < opt->n; i++) {
        struct opt_param *p = &opt->p[i];

        keel_tensor_free(p->acc1);
        keel_tensor_free(p->acc2);
        p->acc1 = np[i].acc1;
        p->acc2 = np[i].acc2;
        np[i].acc1 = np[i].acc2 = NULL;
        if (np[i].master) {
            keel_tensor_free(p->master);
            p->master = np[i].master;
            np[i].master = NULL;
        }
        p->has_state = np[i].has_state;
        p->beta1_pow = np[i].beta1_pow;
        p->beta2_pow = np[i].beta2_pow;
    }
    opt->steps = steps;
    goto out;
missing:
    if (st == KEEL_STATUS_NOT_FOUND)
        st = keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                         "optimizer state_set: missing '%s'", key);
out:
    keel_no_grad_end();
    for (i = 0; i < opt->n; i++) {
        keel_tensor_free(np[i].acc1);
        keel_tensor_free(np[i].acc2);
        keel_tensor_free(np[i].master);
    }
    free(np);
    return st;
}

/* ---- for the amp layer's decorate and GradScaler (optim_internal.h) ---- */

size_t keel__optimizer_num_params(const keel_optimizer *opt)
{
    return opt ? opt->n : 0;
}

keel_tensor *keel__optimizer_param(const keel_optimizer *opt, size_t i)
{
    return opt && i < opt->n ? opt->p[i].param : NULL;
}

bool keel__optimizer_has_state(const keel_optimizer *opt)
{
    if (opt && opt->steps > 0)
        return true;
    for (size_t i = 0; opt && i < opt->n; i++)
        if (opt->p[i].has_state || opt->p[i].master)
            return true;
    return false;
}

bool keel_optimizer_multi_precision(const keel_optimizer *opt)
{
    return opt && opt->multi_precision;
}

keel_status keel_optimizer_set_multi_precision(keel_optimizer *opt, bool on)
{
    if (!opt)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "optimizer: opt is NULL");
    if (keel__optimizer_has_state(opt) && on != opt->multi_precision)
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "%s: multi_precision cannot change after the "
                           "first update",
                           kind_names[opt->kind]);
    opt->multi_precision = on;
    return KEEL_STATUS_OK;
}
