/*
 * Shape rules of the neural-network ops: normalisations, losses,
 * embedding, dropout, one_hot, the in-place optimizer updates and
 * check_finite_and_unscale (a GradScaler's check, in place).
 *
 * Semantics follow Paddle 3.x; where the catalog leaves a choice open:
 *
 *  - batch_norm in eval mode (training=0) normalises with the running
 *    statistics, leaves them unchanged and returns them as saved_mean and
 *    saved_invstd = 1/sqrt(running_var + eps), so batch_norm_grad with
 *    training=0 differentiates the eval form. A training batch with no
 *    elements leaves the running statistics unchanged and saves mean 0,
 *    invstd 1/sqrt(eps).
 *  - cross_entropy: label_smoothing turns hard labels into the soft
 *    targets (1-eps) onehot + eps/C (Paddle's one_hot + label_smooth), and
 *    applies to soft labels the same way; a class weight then weighs a
 *    sample by sum_c t_c w_c, and 'mean' divides by the sum of those
 *    sample weights (1 when it is 0). ignore_index applies to hard labels,
 *    also with smoothing (Paddle cannot one-hot them). use_softmax=0 takes
 *    probabilities: loss -log p clamped at 1e20 (Paddle's TolerableValue)
 *    and the softmax output is a copy of the input. The per-sample loss of
 *    reduction 'none' has the logits' shape with the class axis set to 1,
 *    dropped for hard labels given without it.
 *  - nll_loss 'mean' divides by the sum of the selected weights, and
 *    gives 0 when every label is ignored.
 *  - embedding: padding_idx < 0 means no padding row (the catalog's
 *    meaning; Paddle's negative padding_idx counts from V, so a caller
 *    converts -k to V-k first).
 *  - dropout in eval mode returns a mask of ones.
 *
 * Conventions shared by the rules below (docs/ops.md quotes them):
 *
 *  - Normalisation parameters and statistics (scale, bias, running stats,
 *    mean, invstd) have the input's dtype, or float32 when the input is
 *    float16/bfloat16 (Paddle's mixed-precision layout). The statistics
 *    outputs (saved_mean/saved_invstd, mean/invstd) are float64 for a
 *    float64 input and float32 otherwise; kernels compute f16/bf16 in f32.
 *  - Optional inputs are simply absent: layer_norm/group_norm take
 *    (x), (x, scale) or (x, scale, bias); their grads take
 *    (x, scale, mean, invstd, dy) or, without a scale, (x, mean, invstd,
 *    dy) and still return (dx, dscale, dbias).
 *  - Losses: reduction is "none", "mean" or "sum"; "none" keeps one loss
 *    per sample, the others give a 0-d tensor.
 *  - Inputs written in place (running statistics, optimizer parameters
 *    and states, check_finite_and_unscale's x and found_inf) must not be
 *    broadcast views (a stride 0 over a dim > 1).
 *    Optimizer states have the param's dtype; the grad may be any
 *    floating dtype (so may loss labels and class weights).
 *  - Data-dependent errors (a label, id or class out of range) are found
 *    by the kernels, which name the offending value.
 */
#include <string.h>

#include "dispatch/dispatch_internal.h"

/* ---- helpers ------------------------------------------------------------- */

static bool is_float(keel_dtype dt)
{
    return dt == KEEL_F32 || dt == KEEL_F64 || dt == KEEL_F16 ||
           dt == KEEL_BF16;
}

static bool is_int(keel_dtype dt)
{
    return dt == KEEL_I8 || dt == KEEL_U8 || dt == KEEL_I32 ||
           dt == KEEL_I64;
}

static void set_out(struct keel_op_call *c, int k, keel_dtype dt, int ndim,
                    const int64_t *shape)
{
    c->out_dtype[k] = dt;
    c->out_ndim[k] = ndim;
    if (ndim > 0)
        memcpy(c->out_shape[k], shape, sizeof(int64_t) * (size_t)ndim);
    if (c->nout < k + 1)
        c->nout = k + 1;
}

static keel_status nin_between(struct keel_op_call *c, int lo, int hi)
{
    if (c->nin < lo || c->nin > hi) {
        if (lo == hi)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "takes %d inputs, got %d", lo, c->nin);
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "takes %d to %d inputs, got %d", lo, hi,
                              c->nin);
    }
    return KEEL_STATUS_OK;
}

static keel_status need_float(struct keel_op_call *c, int i, const char *what)
{
    if (!is_float(c->in[i]->dtype))
        return keel__op_error(c, KEEL_STATUS_NOT_SUPPORTED,
                              "%s must be a floating dtype, got %s", what,
                              keel_dtype_name(c->in[i]->dtype));
    return KEEL_STATUS_OK;
}

static keel_status need_int(struct keel_op_call *c, int i, const char *what)
{
    if (!is_int(c->in[i]->dtype))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "%s must have an integer dtype, got %s", what,
                              keel_dtype_name(c->in[i]->dtype));
    return KEEL_STATUS_OK;
}

/* A parameter/statistic of a normalisation: x's dtype, or float32. */
static keel_status need_param_dtype(struct keel_op_call *c, int i,
                                    keel_dtype xdt, const char *what)
{
    keel_dtype dt = c->in[i]->dtype;

    if (dt != xdt && dt != KEEL_F32)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "%s must be %s or float32, got %s", what,
                              keel_dtype_name(xdt), keel_dtype_name(dt));
    return KEEL_STATUS_OK;
}

static keel_status need_vec(struct keel_op_call *c, int i, int64_t n,
                            const char *what)
{
    const keel_tensor *t = c->in[i];

    if (t->ndim != 1 || t->shape[0] != n)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "%s must have shape [%lld] (input %d has %d "
                              "dims, first %lld)",
                              what, (long long)n, i, t->ndim,
                              (long long)(t->ndim ? t->shape[0] : 1));
    return KEEL_STATUS_OK;
}

static bool same_shape(const keel_tensor *a, const keel_tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

static keel_status need_same_shape(struct keel_op_call *c, int i, int j,
                                   const char *what)
{
    if (!same_shape(c->in[i], c->in[j]))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "%s must have the shape of input %d", what, j);
    return KEEL_STATUS_OK;
}

/* Input i is updated in place: no two elements may share memory. */
static keel_status need_writable(struct keel_op_call *c, int i,
                                 const char *what)
{
    const keel_tensor *t = c->in[i];

    for (int d = 0; d < t->ndim; d++)
        if (t->strides[d] == 0 && t->shape[d] > 1)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "%s is updated in place and must not be "
                                  "a broadcast view (stride 0 on dim %d)",
                                  what, d);
    return KEEL_STATUS_OK;
}

static keel_status need_epsilon(struct keel_op_call *c)
{
    double eps = keel__attr_f(c, "epsilon");

    if (!(eps >= 0))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "epsilon must be >= 0, got %g", eps);
    return KEEL_STATUS_OK;
}

enum { RED_NONE, RED_MEAN, RED_SUM };

static keel_status reduction(struct keel_op_call *c, int *mode)
{
    const char *r = keel__attr_s(c, "reduction");

    if (!strcmp(r, "none"))
        *mode = RED_NONE;
    else if (!strcmp(r, "mean"))
        *mode = RED_MEAN;
    else if (!strcmp(r, "sum"))
        *mode = RED_SUM;
    else
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "reduction must be 'none', 'mean' or 'sum', "
                              "got '%s'",
                              r);
    return KEEL_STATUS_OK;
}

static keel_dtype stat_dtype(keel_dtype xdt)
{
    return xdt == KEEL_F64 ? KEEL_F64 : KEEL_F32;
}

static int64_t prod(const int64_t *shape, int from, int to)
{
    int64_t n = 1;

    for (int i = from; i < to; i++)
        n *= shape[i];
    return n;
}

/* ---- batch_norm ---------------------------------------------------------- */

static keel_status bn_common(struct keel_op_call *c, const char *const *names)
{
    const keel_tensor *x = c->in[0];
    keel_status st;

    if ((st = nin_between(c, 5, 5)) || (st = need_float(c, 0, "x")))
        return st;
    if (x->ndim < 2)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "x must be [N, C, ...] with at least 2 dims, "
                              "got %d",
                              x->ndim);
    for (int i = 1; i < 5; i++) {
        if (!names[i])
            continue;
        if ((st = need_vec(c, i, x->shape[1], names[i])) ||
            (st = need_param_dtype(c, i, x->dtype, names[i])))
            return st;
    }
    c->key_dtype = x->dtype;
    return need_epsilon(c);
}

keel_status keel__shape_batch_norm(struct keel_op_call *c)
{
    static const char *const names[5] = {"x", "scale", "bias",
                                         "running_mean", "running_var"};
    keel_status st = bn_common(c, names);
    int64_t ch;

    if (st)
        return st;
    if ((st = need_writable(c, 3, "running_mean")) ||
        (st = need_writable(c, 4, "running_var")))
        return st;
    ch = c->in[0]->shape[1];
    set_out(c, 0, c->in[0]->dtype, c->in[0]->ndim, c->in[0]->shape);
    set_out(c, 1, stat_dtype(c->in[0]->dtype), 1, &ch);
    set_out(c, 2, stat_dtype(c->in[0]->dtype), 1, &ch);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_batch_norm_grad(struct keel_op_call *c)
{
    static const char *const names[5] = {"x", "scale", "saved_mean",
                                         "saved_invstd", NULL};
    keel_status st = bn_common(c, names);
    int64_t ch;

    if (st)
        return st;
    if ((st = need_float(c, 4, "dy")) ||
        (st = need_same_shape(c, 4, 0, "dy")) ||
        (st = keel__cast_input(c, 4, c->in[0]->dtype)))
        return st;
    ch = c->in[0]->shape[1];
    set_out(c, 0, c->in[0]->dtype, c->in[0]->ndim, c->in[0]->shape);
    set_out(c, 1, c->in[1]->dtype, 1, &ch);
    set_out(c, 2, c->in[1]->dtype, 1, &ch);
    return KEEL_STATUS_OK;
}

/* ---- layer_norm ---------------------------------------------------------- */

static keel_status ln_axis(struct keel_op_call *c, int *begin)
{
    const keel_tensor *x = c->in[0];
    int64_t b = keel__attr_i(c, "begin_norm_axis");
    int a = keel__axis(b, x->ndim);

    if (a < 0)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "begin_norm_axis %lld is out of range for %d "
                              "dims",
                              (long long)b, x->ndim);
    *begin = a;
    return KEEL_STATUS_OK;
}

/* scale/bias of layer_norm: [prod(x.shape[b:])] or x.shape[b:]. */
static keel_status ln_param(struct keel_op_call *c, int i, int b,
                            const char *what)
{
    const keel_tensor *x = c->in[0], *p = c->in[i];
    int64_t n = prod(x->shape, b, x->ndim);
    bool ok = p->ndim == 1 && p->shape[0] == n;
    keel_status st;

    if (!ok && p->ndim == x->ndim - b) {
        ok = true;
        for (int d = 0; d < p->ndim; d++)
            ok = ok && p->shape[d] == x->shape[b + d];
    }
    if (!ok)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "%s must match the normalized shape (%lld "
                              "elements from axis %d)",
                              what, (long long)n, b);
    if ((st = need_float(c, i, what)) ||
        (st = need_param_dtype(c, i, x->dtype, what)))
        return st;
    return KEEL_STATUS_OK;
}

keel_status keel__shape_layer_norm(struct keel_op_call *c)
{
    const keel_tensor *x = c->in[0];
    static const char *const names[3] = {"x", "scale", "bias"};
    keel_status st;
    int b;

    if ((st = nin_between(c, 1, 3)) || (st = need_float(c, 0, "x")) ||
        (st = ln_axis(c, &b)) || (st = need_epsilon(c)))
        return st;
    for (int i = 1; i < c->nin; i++)
        if ((st = ln_param(c, i, b, names[i])))
            return st;
    c->key_dtype = x->dtype;
    set_out(c, 0, x->dtype, x->ndim, x->shape);
    set_out(c, 1, stat_dtype(x->dtype), b, x->shape);
    set_out(c, 2, stat_dtype(x->dtype), b, x->shape);
    return KEEL_STATUS_OK;
}

/* Inputs of the norm grads: (x, scale?, mean, invstd, dy); *si is the
 * scale's index or -1, *mi the mean's. */
static keel_status norm_grad_inputs(struct keel_op_call *c, int64_t nstat,
                                    int *si, int *mi)
{
    const keel_tensor *x = c->in[0];
    keel_status st;
    int dy;

    if ((st = nin_between(c, 4, 5)) || (st = need_float(c, 0, "x")))
        return st;
    *si = c->nin == 5 ? 1 : -1;
    *mi = c->nin == 5 ? 2 : 1;
    dy = c->nin - 1;
    for (int k = 0; k < 2; k++) {
        const char *what = k ? "invstd" : "mean";
        if (keel_tensor_numel(c->in[*mi + k]) != nstat)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "%s must have %lld elements, got %lld",
                                  what, (long long)nstat,
                                  (long long)keel_tensor_numel(
                                      c->in[*mi + k]));
        if ((st = need_float(c, *mi + k, what)))
            return st;
    }
    if ((st = need_float(c, dy, "dy")) ||
        (st = need_same_shape(c, dy, 0, "dy")) ||
        (st = keel__cast_input(c, dy, x->dtype)))
        return st;
    c->key_dtype = x->dtype;
    return KEEL_STATUS_OK;
}

keel_status keel__shape_layer_norm_grad(struct keel_op_call *c)
{
    const keel_tensor *x = c->in[0];
    keel_status st;
    int b, si, mi;

    if ((st = nin_between(c, 4, 5)) || (st = ln_axis(c, &b)) ||
        (st = norm_grad_inputs(c, prod(x->shape, 0, b), &si, &mi)))
        return st;
    if (si >= 0 && (st = ln_param(c, si, b, "scale")))
        return st;
    set_out(c, 0, x->dtype, x->ndim, x->shape);
    if (si >= 0) {
        set_out(c, 1, c->in[si]->dtype, c->in[si]->ndim, c->in[si]->shape);
        set_out(c, 2, c->in[si]->dtype, c->in[si]->ndim, c->in[si]->shape);
    } else {
        set_out(c, 1, x->dtype, x->ndim - b, x->shape + b);
        set_out(c, 2, x->dtype, x->ndim - b, x->shape + b);
    }
    return KEEL_STATUS_OK;
}

/* ---- group_norm ---------------------------------------------------------- */

static keel_status gn_groups(struct keel_op_call *c, int64_t *groups)
{
    const keel_tensor *x = c->in[0];
    int64_t g = keel__attr_i(c, "groups");

    if (x->ndim < 2)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "x must be [N, C, ...] with at least 2 dims, "
                              "got %d",
                              x->ndim);
    if (g <= 0 || x->shape[1] % g != 0)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "groups = %lld must be positive and divide "
                              "the %lld channels",
                              (long long)g, (long long)x->shape[1]);
    *groups = g;
    return KEEL_STATUS_OK;
}

static keel_status gn_param(struct keel_op_call *c, int i, const char *what)
{
    keel_status st;

    if ((st = need_vec(c, i, c->in[0]->shape[1], what)) ||
        (st = need_float(c, i, what)) ||
        (st = need_param_dtype(c, i, c->in[0]->dtype, what)))
        return st;
    return KEEL_STATUS_OK;
}

keel_status keel__shape_group_norm(struct keel_op_call *c)
{
    const keel_tensor *x = c->in[0];
    static const char *const names[3] = {"x", "scale", "bias"};
    int64_t g, stat[2];
    keel_status st;

    if ((st = nin_between(c, 1, 3)) || (st = need_float(c, 0, "x")) ||
        (st = gn_groups(c, &g)) || (st = need_epsilon(c)))
        return st;
    for (int i = 1; i < c->nin; i++)
        if ((st = gn_param(c, i, names[i])))
            return st;
    stat[0] = x->shape[0];
    stat[1] = g;
    c->key_dtype = x->dtype;
    set_out(c, 0, x->dtype, x->ndim, x->shape);
    set_out(c, 1, stat_dtype(x->dtype), 2, stat);
    set_out(c, 2, stat_dtype(x->dtype), 2, stat);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_group_norm_grad(struct keel_op_call *c)
{
    const keel_tensor *x = c->in[0];
    keel_status st;
    int64_t g;
    int si, mi;

    if ((st = nin_between(c, 4, 5)) || (st = gn_groups(c, &g)) ||
        (st = norm_grad_inputs(c, x->shape[0] * g, &si, &mi)))
        return st;
    if (si >= 0 && (st = gn_param(c, si, "scale")))
        return st;
    set_out(c, 0, x->dtype, x->ndim, x->shape);
    set_out(c, 1, si >= 0 ? c->in[si]->dtype : x->dtype, 1, &x->shape[1]);
    set_out(c, 2, si >= 0 ? c->in[si]->dtype : x->dtype, 1, &x->shape[1]);
    return KEEL_STATUS_OK;
}

/* ---- cross_entropy ------------------------------------------------------- */

/*
 * Hard labels: logits' shape without the class axis, or with it set to 1.
 * Soft labels (soft_label=1): logits' shape, a floating dtype. *squeeze
 * tells whether the per-sample loss drops the class axis (hard labels of
 * rank ndim-1, as Paddle squeezes) or keeps it as 1.
 */
static keel_status ce_label(struct keel_op_call *c, int x, int l, int axis,
                            bool soft, bool *squeeze)
{
    const keel_tensor *lg = c->in[x], *lb = c->in[l];
    bool ok;
    keel_status st;

    *squeeze = false;
    if (soft) {
        if ((st = need_float(c, l, "a soft label")))
            return st;
        if (!same_shape(lg, lb))
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "a soft label must have the logits' "
                                  "shape");
        return KEEL_STATUS_OK;
    }
    if (!is_int(lb->dtype))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "a hard label must have an integer dtype "
                              "(int64 or int32), got %s (use soft_label "
                              "for distributions)",
                              keel_dtype_name(lb->dtype));
    if (lb->ndim == lg->ndim - 1) {
        ok = true;
        for (int d = 0, e = 0; d < lg->ndim; d++)
            if (d != axis)
                ok = ok && lb->shape[e++] == lg->shape[d];
        *squeeze = true;
    } else if (lb->ndim == lg->ndim) {
        ok = true;
        for (int d = 0; d < lg->ndim; d++)
            ok = ok && lb->shape[d] == (d == axis ? 1 : lg->shape[d]);
    } else {
        ok = false;
    }
    if (!ok)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "the hard label must have the logits' shape "
                              "without axis %d (or with it equal to 1)",
                              axis);
    return KEEL_STATUS_OK;
}

static keel_status ce_attrs(struct keel_op_call *c, int *axis, int *mode)
{
    const keel_tensor *x = c->in[0];
    int64_t a = keel__attr_i(c, "axis");
    double eps = keel__attr_f(c, "label_smoothing");
    keel_status st;

    if ((st = need_float(c, 0, "the input")))
        return st;
    if (x->ndim < 1)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "the input needs a class axis (got a 0-d "
                              "tensor)");
    *axis = keel__axis(a, x->ndim);
    if (*axis < 0)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "axis %lld is out of range for %d dims",
                              (long long)a, x->ndim);
    if (x->shape[*axis] == 0)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "the class axis %d is empty", *axis);
    if (!(eps >= 0 && eps <= 1))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "label_smoothing must be in [0, 1], got %g",
                              eps);
    return reduction(c, mode);
}

static keel_status ce_weight(struct keel_op_call *c, int i, int64_t classes)
{
    keel_status st;

    if ((st = need_float(c, i, "weight")) ||
        (st = need_vec(c, i, classes, "weight")))
        return st;
    return KEEL_STATUS_OK;
}

/* The per-sample loss shape. */
static int ce_loss_shape(const keel_tensor *x, int axis, bool squeeze,
                         int64_t *shape)
{
    int n = 0;

    for (int d = 0; d < x->ndim; d++) {
        if (d == axis && squeeze)
            continue;
        shape[n++] = d == axis ? 1 : x->shape[d];
    }
    return n;
}

keel_status keel__shape_cross_entropy(struct keel_op_call *c)
{
    const keel_tensor *x = c->in[0];
    int64_t shape[KEEL_MAX_DIMS];
    bool squeeze;
    int axis, mode, n;
    keel_status st;

    if ((st = nin_between(c, 2, 3)) || (st = ce_attrs(c, &axis, &mode)) ||
        (st = ce_label(c, 0, 1, axis, keel__attr_i(c, "soft_label") != 0,
                       &squeeze)))
        return st;
    if (c->nin == 3 && (st = ce_weight(c, 2, x->shape[axis])))
        return st;
    c->key_dtype = x->dtype;
    n = ce_loss_shape(x, axis, squeeze, shape);
    set_out(c, 0, x->dtype, mode == RED_NONE ? n : 0, shape);
    set_out(c, 1, x->dtype, x->ndim, x->shape);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_cross_entropy_grad(struct keel_op_call *c)
{
    const keel_tensor *x = c->in[0];
    int64_t shape[KEEL_MAX_DIMS], want;
    bool squeeze;
    int axis, mode, n;
    keel_status st;

    if ((st = nin_between(c, 3, 4)) || (st = ce_attrs(c, &axis, &mode)) ||
        (st = ce_label(c, 0, 1, axis, keel__attr_i(c, "soft_label") != 0,
                       &squeeze)) ||
        (st = need_float(c, 2, "dloss")))
        return st;
    if (c->nin == 4 && (st = ce_weight(c, 3, x->shape[axis])))
        return st;
    n = ce_loss_shape(x, axis, squeeze, shape);
    want = mode == RED_NONE ? prod(shape, 0, n) : 1;
    if (keel_tensor_numel(c->in[2]) != want)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "dloss must have %lld elements (the loss' "
                              "shape), got %lld",
                              (long long)want,
                              (long long)keel_tensor_numel(c->in[2]));
    c->key_dtype = x->dtype;
    set_out(c, 0, x->dtype, x->ndim, x->shape);
    return KEEL_STATUS_OK;
}

/* ---- mse_loss, bce_with_logits ------------------------------------------- */

/* Re-express input i with x's shape (numpy broadcasting, stride 0). */
static keel_status expand_to_x(struct keel_op_call *c, int i,
                               const char *what)
{
    const keel_tensor *x = c->in[0], *t = c->in[i];
    keel_tensor_desc *d = &c->in_desc[i];

    if (t->ndim > x->ndim)
        goto bad;
    for (int k = 0; k < x->ndim; k++) {
        int j = k - (x->ndim - t->ndim);
        if (j >= 0 && t->shape[j] != 1 && t->shape[j] != x->shape[k])
            goto bad;
    }
    keel__desc(t, d);
    d->ndim = x->ndim;
    for (int k = 0; k < x->ndim; k++) {
        int j = k - (x->ndim - t->ndim);
        d->shape[k] = x->shape[k];
        d->strides[k] = (j < 0 || t->shape[j] == 1) ? 0 : t->strides[j];
    }
    return KEEL_STATUS_OK;
bad:
    return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                          "%s cannot be broadcast to the input's shape",
                          what);
}

keel_status keel__shape_loss(struct keel_op_call *c)
{
    const keel_tensor *x = c->in[0];
    int hi = c->op == KEEL_OP_BCE_WITH_LOGITS ? 3 : 2;
    keel_status st;
    int mode;

    if ((st = nin_between(c, 2, hi)) || (st = need_float(c, 0, "the input")) ||
        (st = need_float(c, 1, "the label")) || (st = reduction(c, &mode)))
        return st;
    if (!same_shape(c->in[0], c->in[1]))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "the label must have the input's shape");
    if (c->nin == 3 && ((st = need_float(c, 2, "pos_weight")) ||
                        (st = expand_to_x(c, 2, "pos_weight"))))
        return st;
    c->key_dtype = x->dtype;
    set_out(c, 0, x->dtype, mode == RED_NONE ? x->ndim : 0, x->shape);
    return KEEL_STATUS_OK;
}

/* ---- nll_loss ------------------------------------------------------------ */

keel_status keel__shape_nll_loss(struct keel_op_call *c)
{
    const keel_tensor *x = c->in[0], *lb;
    int64_t shape[KEEL_MAX_DIMS];
    keel_status st;
    int mode, n = 0;
    bool ok;

    if ((st = nin_between(c, 2, 3)) || (st = need_float(c, 0, "the input")) ||
        (st = reduction(c, &mode)))
        return st;
    if (x->ndim < 1)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "the input must be [N, C, ...] or [C]");
    if ((st = need_int(c, 1, "the label")))
        return st;
    lb = c->in[1];
    for (int d = 0; d < x->ndim; d++)
        if (d != (x->ndim == 1 ? 0 : 1))
            shape[n++] = x->shape[d];
    ok = lb->ndim == n;
    for (int d = 0; ok && d < n; d++)
        ok = lb->shape[d] == shape[d];
    if (!ok)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "the label must have the input's shape "
                              "without the class dim (%d dims)",
                              n);
    if (x->shape[x->ndim == 1 ? 0 : 1] == 0)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "the class dim is empty");
    if (c->nin == 3 &&
        ((st = need_float(c, 2, "weight")) ||
         (st = need_vec(c, 2, x->shape[x->ndim == 1 ? 0 : 1], "weight"))))
        return st;
    c->key_dtype = x->dtype;
    set_out(c, 0, x->dtype, mode == RED_NONE ? n : 0, shape);
    return KEEL_STATUS_OK;
}

/* ---- embedding ----------------------------------------------------------- */

keel_status keel__shape_embedding(struct keel_op_call *c)
{
    const keel_tensor *ids = c->in[0], *w = c->in[1];
    int64_t shape[KEEL_MAX_DIMS], pad = keel__attr_i(c, "padding_idx");
    keel_status st;

    if ((st = nin_between(c, 2, 2)) || (st = need_int(c, 0, "ids")) ||
        (st = need_float(c, 1, "the table")))
        return st;
    if (w->ndim != 2)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "the table must be [V, D], got %d dims",
                              w->ndim);
    if (ids->ndim + 1 > KEEL_MAX_DIMS)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "ids have too many dims (%d)", ids->ndim);
    if (pad >= w->shape[0])
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "padding_idx %lld is out of range for %lld "
                              "rows (negative means none)",
                              (long long)pad, (long long)w->shape[0]);
    memcpy(shape, ids->shape, sizeof(int64_t) * (size_t)ids->ndim);
    shape[ids->ndim] = w->shape[1];
    c->key_dtype = w->dtype;
    set_out(c, 0, w->dtype, ids->ndim + 1, shape);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_embedding_grad(struct keel_op_call *c)
{
    const keel_tensor *ids = c->in[0], *dy = c->in[1];
    int64_t v = keel__attr_i(c, "num_embeddings");
    int64_t pad = keel__attr_i(c, "padding_idx"), shape[2];
    keel_status st;
    bool ok;

    if ((st = nin_between(c, 2, 2)) || (st = need_int(c, 0, "ids")) ||
        (st = need_float(c, 1, "dout")))
        return st;
    ok = dy->ndim == ids->ndim + 1;
    for (int d = 0; ok && d < ids->ndim; d++)
        ok = dy->shape[d] == ids->shape[d];
    if (!ok)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "dout must be [ids.shape..., D]");
    if (v < 0)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "num_embeddings must be >= 0, got %lld",
                              (long long)v);
    if (pad >= v)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "padding_idx %lld is out of range for %lld "
                              "rows (negative means none)",
                              (long long)pad, (long long)v);
    shape[0] = v;
    shape[1] = dy->shape[dy->ndim - 1];
    c->key_dtype = dy->dtype;
    set_out(c, 0, dy->dtype, 2, shape);
    return KEEL_STATUS_OK;
}

/* ---- dropout, one_hot ---------------------------------------------------- */

keel_status keel__shape_dropout(struct keel_op_call *c)
{
    const keel_tensor *x = c->in[0];
    const char *mode = keel__attr_s(c, "mode");
    double p = keel__attr_f(c, "p");
    keel_status st;

    if ((st = nin_between(c, 1, 1)) || (st = need_float(c, 0, "x")))
        return st;
    if (!(p >= 0 && p <= 1))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "p must be in [0, 1], got %g", p);
    if (strcmp(mode, "upscale_in_train") && strcmp(mode, "downscale_in_infer"))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "mode must be 'upscale_in_train' or "
                              "'downscale_in_infer', got '%s'",
                              mode);
    c->key_dtype = x->dtype;
    set_out(c, 0, x->dtype, x->ndim, x->shape);
    set_out(c, 1, KEEL_U8, x->ndim, x->shape);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_one_hot(struct keel_op_call *c)
{
    const keel_tensor *x = c->in[0];
    int64_t n = keel__attr_i(c, "num_classes"), shape[KEEL_MAX_DIMS];
    keel_status st;

    if ((st = nin_between(c, 1, 1)))
        return st;
    if (!is_int(x->dtype))
        return keel__op_error(c, KEEL_STATUS_NOT_SUPPORTED,
                              "x must have an integer dtype, got %s",
                              keel_dtype_name(x->dtype));
    if (n <= 0)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "num_classes must be positive, got %lld",
                              (long long)n);
    if (x->ndim + 1 > KEEL_MAX_DIMS)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "x has too many dims (%d)", x->ndim);
    if (x->ndim > 0)
        memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim] = n;
    c->key_dtype = x->dtype;
    set_out(c, 0, KEEL_F32, x->ndim + 1, shape);
    return KEEL_STATUS_OK;
}

/* ---- optimizer updates --------------------------------------------------- */

static keel_status need_attr_range(struct keel_op_call *c, const char *name,
                                   double lo, double hi, bool hi_open)
{
    double v = keel__attr_f(c, name);

    if (!(v >= lo && (hi_open ? v < hi : v <= hi)))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "%s = %g must be in [%g, %g%c", name, v, lo, hi,
                              hi_open ? ')' : ']');
    return KEEL_STATUS_OK;
}

keel_status keel__shape_optimizer(struct keel_op_call *c)
{
    static const char *const names[4] = {"param", "grad", "state 1",
                                         "state 2"};
    int n = c->def->info->num_inputs;
    keel_status st;

    if ((st = nin_between(c, n, n)) || (st = need_float(c, 0, "param")) ||
        (st = need_float(c, 1, "grad")) ||
        (st = need_writable(c, 0, "param")))
        return st;
    for (int i = 1; i < n; i++) {
        if ((st = need_same_shape(c, i, 0, names[i])))
            return st;
        if (i < 2)
            continue;
        if (c->in[i]->dtype != c->in[0]->dtype)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "%s must have the param's dtype %s, got "
                                  "%s",
                                  names[i], keel_dtype_name(c->in[0]->dtype),
                                  keel_dtype_name(c->in[i]->dtype));
        if ((st = need_writable(c, i, names[i])))
            return st;
    }
    if (c->op == KEEL_OP_ADAM_UPDATE || c->op == KEEL_OP_ADAMW_UPDATE) {
        if ((st = need_attr_range(c, "beta1", 0, 1, true)) ||
            (st = need_attr_range(c, "beta2", 0, 1, true)) ||
            (st = need_attr_range(c, "beta1_pow", 0, 1, true)) ||
            (st = need_attr_range(c, "beta2_pow", 0, 1, true)))
            return st;
    }
    c->key_dtype = c->in[0]->dtype;
    c->nout = 0;
    return KEEL_STATUS_OK;
}

/* ---- check_finite_and_unscale ------------------------------------------- */

/* Input i is a one-element tensor ([1], 0-d or any shape of 1 element) of
 * dtype dt. */
static keel_status need_one(struct keel_op_call *c, int i, keel_dtype dt,
                            const char *what)
{
    const keel_tensor *t = c->in[i];
    int64_t n = keel__numel(t->ndim, t->shape);

    if (t->dtype != dt)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "%s (input %d) must be %s, got %s", what, i,
                              keel_dtype_name(dt), keel_dtype_name(t->dtype));
    if (n != 1)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "%s (input %d) must have one element (shape "
                              "[1] or []), got %lld elements",
                              what, i, (long long)n);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_unscale(struct keel_op_call *c)
{
    keel_status st;

    if ((st = nin_between(c, 3, 3)) || (st = need_float(c, 0, "x")) ||
        (st = need_writable(c, 0, "x")) ||
        (st = need_one(c, 1, KEEL_F32, "scale")) ||
        (st = need_one(c, 2, KEEL_BOOL, "found_inf")))
        return st;
    c->key_dtype = c->in[0]->dtype;
    c->nout = 0;
    return KEEL_STATUS_OK;
}
