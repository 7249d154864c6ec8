/*
 * keel kernel kit — checks of the nn shape rules (see docs/ops.md,
 * "What a kernel receives", for what each promises a kernel).
 *
 * Each rule checks what core/src/shape_nn.c guarantees about the launch it
 * sends: arity, dtypes, the shapes of inputs and of every output (saved
 * statistics included), attribute ranges. Outputs are row-major
 * contiguous, as the core allocates them. Label, id and class values are
 * data: a kernel range-checks those itself.
 */
#include <math.h>

#include "kit_internal.h"

/* ---- helpers ------------------------------------------------------------- */

static bool int_dtype(keel_dtype dt)
{
    return dt == KEEL_I8 || dt == KEEL_U8 || dt == KEEL_I32 ||
           dt == KEEL_I64;
}

/* Statistics outputs: float64 for a float64 input, float32 otherwise. */
static keel_dtype stat_dtype(keel_dtype xdt)
{
    return xdt == KEEL_F64 ? KEEL_F64 : KEEL_F32;
}

static keel_status need_float(const struct kit_ctx *c, int i,
                              const char *what)
{
    if (!keel_kit_float_dtype(KIN(c, i)->dtype))
        return kit_bad(c, "%s (input %d) must be a floating dtype, got %s",
                       what, i, keel_kit_dtype_name(KIN(c, i)->dtype));
    return KEEL_STATUS_OK;
}

static keel_status need_int(const struct kit_ctx *c, int i, const char *what)
{
    if (!int_dtype(KIN(c, i)->dtype))
        return kit_bad(c, "%s (input %d) must have an integer dtype, got %s",
                       what, i, keel_kit_dtype_name(KIN(c, i)->dtype));
    return KEEL_STATUS_OK;
}

/* Input i is 1-D [n]. */
static keel_status need_vec(const struct kit_ctx *c, int i, int64_t n,
                            const char *what)
{
    const keel_tensor_desc *d = KIN(c, i);
    char got[160];

    if (d->ndim != 1 || d->shape[0] != n)
        return kit_bad(c, "%s (input %d) must have shape [%lld], got %s",
                       what, i, (long long)n,
                       kit_shape_str(got, sizeof(got), d->ndim, d->shape));
    return KEEL_STATUS_OK;
}

/* A normalisation parameter or statistic: x's dtype, or float32. */
static keel_status need_param_dtype(const struct kit_ctx *c, int i,
                                    const char *what)
{
    keel_dtype dt = KIN(c, i)->dtype, xdt = KIN(c, 0)->dtype;

    if (dt != xdt && dt != KEEL_F32)
        return kit_bad(c, "%s (input %d) must be %s or float32, got %s",
                       what, i, keel_kit_dtype_name(xdt),
                       keel_kit_dtype_name(dt));
    return KEEL_STATUS_OK;
}

/* Input i has x's shape and dtype (a grad's dy, cast by the core). */
static keel_status need_like_x(const struct kit_ctx *c, int i,
                               const char *what)
{
    const keel_tensor_desc *d = KIN(c, i), *x = KIN(c, 0);
    char got[160], want[160];

    if (!keel_kit_same_shape(d, x))
        return kit_bad(c, "%s (input %d) has shape %s, x %s: they must "
                       "match", what, i,
                       kit_shape_str(got, sizeof(got), d->ndim, d->shape),
                       kit_shape_str(want, sizeof(want), x->ndim, x->shape));
    if (d->dtype != x->dtype)
        return kit_bad(c, "%s (input %d) is %s, x %s: they must match", what,
                       i, keel_kit_dtype_name(d->dtype),
                       keel_kit_dtype_name(x->dtype));
    return KEEL_STATUS_OK;
}

/* Input i is written in place: no two of its elements may share memory. */
static keel_status need_writable(const struct kit_ctx *c, int i,
                                 const char *what)
{
    const keel_tensor_desc *d = KIN(c, i);

    for (int k = 0; k < d->ndim; k++)
        if (d->strides[k] == 0 && d->shape[k] > 1)
            return kit_bad(c, "%s (input %d) is updated in place and must "
                           "not be a broadcast view (stride 0 on dim %d)",
                           what, i, k);
    return KEEL_STATUS_OK;
}

static keel_status need_epsilon(const struct kit_ctx *c)
{
    double eps = keel_kit_attr_f(c->a, "epsilon", 1e-5);

    if (!(eps >= 0))
        return kit_bad(c, "epsilon must be >= 0, got %g", eps);
    return KEEL_STATUS_OK;
}

static keel_status need_reduction(const struct kit_ctx *c, int *mode)
{
    *mode = keel_kit_reduction(c->a);
    if (*mode < 0)
        return kit_bad(c, "reduction must be 'none', 'mean' or 'sum', got "
                       "'%s'",
                       keel_kit_attr_s(c->a, "reduction", "mean"));
    return KEEL_STATUS_OK;
}

int keel_kit_reduction(const keel_kernel_args *a)
{
    const char *r = keel_kit_attr_s(a, "reduction", "mean");

    if (!strcmp(r, "none"))
        return KEEL_KIT_RED_NONE;
    if (!strcmp(r, "mean"))
        return KEEL_KIT_RED_MEAN;
    if (!strcmp(r, "sum"))
        return KEEL_KIT_RED_SUM;
    return -1;
}

/* ---- normalisation geometry ---------------------------------------------- */

/*
 * The geometry of a norm launch without any check: callers have checked
 * the arity, x's rank and the attributes (a rule), or go through
 * keel_kit_norm_geometry, which runs the whole check first.
 */
static void norm_fill(int op, const keel_kernel_args *a, keel_kit_norm *g)
{
    const keel_tensor_desc *x = &a->inputs[0];
    int nin = a->num_inputs;

    memset(g, 0, sizeof(*g));
    g->scale = g->bias = g->stat[0] = g->stat[1] = g->dy = -1;
    switch (op) {
    case KEEL_OP_BATCH_NORM:
    case KEEL_OP_BATCH_NORM_GRAD:
        g->scale = 1;
        if (op == KEEL_OP_BATCH_NORM) {
            g->bias = 2;
            g->stat[0] = 3;
            g->stat[1] = 4;
        } else {
            g->stat[0] = 2;
            g->stat[1] = 3;
            g->dy = 4;
        }
        g->axis = 1;
        g->groups = 1;
        break;
    case KEEL_OP_LAYER_NORM:
    case KEEL_OP_GROUP_NORM:
        g->scale = nin > 1 ? 1 : -1;
        g->bias = nin > 2 ? 2 : -1;
        break;
    default: /* the grads: (x, scale?, mean, invstd, dy) */
        g->scale = nin == 5 ? 1 : -1;
        g->stat[0] = nin == 5 ? 2 : 1;
        g->stat[1] = g->stat[0] + 1;
        g->dy = nin - 1;
        break;
    }
    if (op == KEEL_OP_LAYER_NORM || op == KEEL_OP_LAYER_NORM_GRAD) {
        g->axis = keel_kit_axis(keel_kit_attr_i(a, "begin_norm_axis", -1),
                                x->ndim);
        g->outer = keel_kit_prod(x->shape, 0, g->axis);
        g->inner = keel_kit_prod(x->shape, g->axis, x->ndim);
        g->params = g->inner;
        return;
    }
    if (op == KEEL_OP_GROUP_NORM || op == KEEL_OP_GROUP_NORM_GRAD) {
        g->axis = 1;
        g->groups = keel_kit_attr_i(a, "groups", 1);
    }
    g->n = x->shape[0];
    g->c = x->shape[1];
    g->spatial = keel_kit_prod(x->shape, 2, x->ndim);
    g->params = g->c;
    if (g->groups == 1 && (op == KEEL_OP_BATCH_NORM ||
                           op == KEEL_OP_BATCH_NORM_GRAD)) {
        g->outer = g->c;
        g->inner = g->n * g->spatial;
    } else {
        g->outer = g->n * g->groups;
        g->inner = g->c / g->groups * g->spatial;
    }
}

keel_status keel_kit_norm_geometry(int op, const keel_kernel_args *a,
                                   keel_kit_norm *g, keel_kit_msg *msg)
{
    keel_status st;

    if (op != KEEL_OP_BATCH_NORM && op != KEEL_OP_BATCH_NORM_GRAD &&
        op != KEEL_OP_LAYER_NORM && op != KEEL_OP_LAYER_NORM_GRAD &&
        op != KEEL_OP_GROUP_NORM && op != KEEL_OP_GROUP_NORM_GRAD)
        return kit_bad_msg(msg, "op %d is not a normalisation", op);
    if ((st = keel_kit_check(op, a, msg)))
        return st;
    norm_fill(op, a, g);
    return KEEL_STATUS_OK;
}

/* ---- batch_norm ---------------------------------------------------------- */

/* x [N, C, ...] and the [C] vectors at inputs 1..4 but `skip`. */
static keel_status bn_common(const struct kit_ctx *c,
                             const char *const names[5], int skip)
{
    const keel_tensor_desc *x = KIN(c, 0);
    keel_status st;

    if ((st = kit_arity(c, 5, 3)) || (st = need_float(c, 0, "x")))
        return st;
    if (x->ndim < 2)
        return kit_bad(c, "x must be [N, C, ...] with at least 2 dims, got "
                       "%d", x->ndim);
    for (int i = 1; i < 5; i++)
        if (i != skip &&
            ((st = need_float(c, i, names[i])) ||
             (st = need_vec(c, i, x->shape[1], names[i])) ||
             (st = need_param_dtype(c, i, names[i]))))
            return st;
    if ((st = need_epsilon(c)) ||
        (st = kit_out_like(c, 0, x, x->dtype)))
        return st;
    return KEEL_STATUS_OK;
}

keel_status kit_rule_batch_norm(const struct kit_ctx *c)
{
    static const char *const names[5] = {"x", "scale", "bias",
                                         "running_mean", "running_var"};
    double mom = keel_kit_attr_f(c->a, "momentum", 0.9);
    keel_status st;
    int64_t ch;

    if ((st = bn_common(c, names, 0)))
        return st;
    /* The core sets no range; only a value that is not a number would
     * turn the running statistics into garbage. */
    if (!isfinite(mom))
        return kit_bad(c, "momentum must be finite, got %g", mom);
    if ((st = need_writable(c, 3, "running_mean")) ||
        (st = need_writable(c, 4, "running_var")))
        return st;
    ch = KIN(c, 0)->shape[1];
    if ((st = kit_out_is(c, 1, stat_dtype(KIN(c, 0)->dtype), 1, &ch)) ||
        (st = kit_out_is(c, 2, stat_dtype(KIN(c, 0)->dtype), 1, &ch)))
        return st;
    return KEEL_STATUS_OK; /* outputs: the generic check */
}

keel_status kit_rule_batch_norm_grad(const struct kit_ctx *c)
{
    static const char *const names[5] = {"x", "scale", "saved_mean",
                                         "saved_invstd", "dy"};
    keel_status st;
    int64_t ch;

    if ((st = bn_common(c, names, 4)) || (st = need_like_x(c, 4, "dy")))
        return st;
    ch = KIN(c, 0)->shape[1];
    if ((st = kit_out_is(c, 1, KIN(c, 1)->dtype, 1, &ch)) ||
        (st = kit_out_is(c, 2, KIN(c, 1)->dtype, 1, &ch)))
        return st;
    return KEEL_STATUS_OK; /* outputs: the generic check */
}

/* ---- layer_norm ---------------------------------------------------------- */

static keel_status ln_axis(const struct kit_ctx *c, int *b)
{
    int64_t v = keel_kit_attr_i(c->a, "begin_norm_axis", -1);

    *b = keel_kit_axis(v, KIN(c, 0)->ndim);
    if (*b < 0)
        return kit_bad(c, "begin_norm_axis %lld is out of range for %d dims",
                       (long long)v, KIN(c, 0)->ndim);
    return KEEL_STATUS_OK;
}

/* scale/bias: 1-D with prod(x.shape[b:]) elements, or x.shape[b:]. */
static keel_status ln_param(const struct kit_ctx *c, int i, int b,
                            const char *what)
{
    const keel_tensor_desc *x = KIN(c, 0), *p = KIN(c, i);
    int64_t n = keel_kit_prod(x->shape, b, x->ndim);
    bool ok = p->ndim == 1 && p->shape[0] == n;
    keel_status st;

    if (!ok && p->ndim == x->ndim - b)
        ok = !memcmp(p->shape, x->shape + b,
                     sizeof(int64_t) * (size_t)p->ndim);
    if (!ok)
        return kit_bad(c, "%s (input %d) must match the normalized shape "
                       "(%lld elements from axis %d)",
                       what, i, (long long)n, b);
    if ((st = need_float(c, i, what)) ||
        (st = need_param_dtype(c, i, what)))
        return st;
    return KEEL_STATUS_OK;
}

keel_status kit_rule_layer_norm(const struct kit_ctx *c)
{
    static const char *const names[3] = {"x", "scale", "bias"};
    const keel_tensor_desc *x;
    keel_status st;
    int b;

    if ((st = kit_inputs_between(c, 1, 3)) || (st = kit_arity(c, -1, 3)) ||
        (st = need_float(c, 0, "x")) || (st = ln_axis(c, &b)) ||
        (st = need_epsilon(c)))
        return st;
    x = KIN(c, 0);
    for (int i = 1; i < KNIN(c); i++)
        if ((st = ln_param(c, i, b, names[i])))
            return st;
    if ((st = kit_out_like(c, 0, x, x->dtype)) ||
        (st = kit_out_is(c, 1, stat_dtype(x->dtype), b, x->shape)) ||
        (st = kit_out_is(c, 2, stat_dtype(x->dtype), b, x->shape)))
        return st;
    return KEEL_STATUS_OK; /* outputs: the generic check */
}

/* The norm grads' (x, scale?, mean, invstd, dy): mean and invstd any
 * floating dtype and shape with nstat elements, dy like x. */
static keel_status norm_grad_inputs(const struct kit_ctx *c, int64_t nstat,
                                    const keel_kit_norm *g)
{
    keel_status st;

    for (int k = 0; k < 2; k++) {
        const char *what = k ? "invstd" : "mean";
        const keel_tensor_desc *d = KIN(c, g->stat[k]);
        if ((st = need_float(c, g->stat[k], what)))
            return st;
        if (keel_kit_numel(d) != nstat)
            return kit_bad(c, "%s (input %d) must have %lld elements, got "
                           "%lld",
                           what, g->stat[k], (long long)nstat,
                           (long long)keel_kit_numel(d));
    }
    return need_like_x(c, g->dy, "dy");
}

keel_status kit_rule_layer_norm_grad(const struct kit_ctx *c)
{
    const keel_tensor_desc *x;
    keel_kit_norm g;
    keel_status st;
    int b;

    if ((st = kit_inputs_between(c, 4, 5)) || (st = kit_arity(c, -1, 3)) ||
        (st = need_float(c, 0, "x")) || (st = ln_axis(c, &b)))
        return st;
    x = KIN(c, 0);
    norm_fill(c->op, c->a, &g);
    if ((st = norm_grad_inputs(c, g.outer, &g)) ||
        (g.scale >= 0 && (st = ln_param(c, g.scale, b, "scale"))) ||
        (st = kit_out_like(c, 0, x, x->dtype)))
        return st;
    for (int k = 1; k < 3; k++) {
        st = g.scale >= 0
                 ? kit_out_like(c, k, KIN(c, g.scale), KIN(c, g.scale)->dtype)
                 : kit_out_is(c, k, x->dtype, x->ndim - b, x->shape + b);
        if (st)
            return st;
    }
    return KEEL_STATUS_OK; /* outputs: the generic check */
}

/* ---- group_norm ---------------------------------------------------------- */

static keel_status gn_groups(const struct kit_ctx *c, int64_t *groups)
{
    const keel_tensor_desc *x = KIN(c, 0);
    int64_t g = keel_kit_attr_i(c->a, "groups", 1);

    if (x->ndim < 2)
        return kit_bad(c, "x must be [N, C, ...] with at least 2 dims, got "
                       "%d", x->ndim);
    if (g <= 0 || x->shape[1] % g != 0)
        return kit_bad(c, "groups = %lld must be positive and divide the "
                       "%lld channels",
                       (long long)g, (long long)x->shape[1]);
    *groups = g;
    return KEEL_STATUS_OK;
}

static keel_status gn_param(const struct kit_ctx *c, int i, const char *what)
{
    keel_status st;

    if ((st = need_float(c, i, what)) ||
        (st = need_vec(c, i, KIN(c, 0)->shape[1], what)) ||
        (st = need_param_dtype(c, i, what)))
        return st;
    return KEEL_STATUS_OK;
}

keel_status kit_rule_group_norm(const struct kit_ctx *c)
{
    static const char *const names[3] = {"x", "scale", "bias"};
    const keel_tensor_desc *x;
    int64_t g, stat[2];
    keel_status st;

    if ((st = kit_inputs_between(c, 1, 3)) || (st = kit_arity(c, -1, 3)) ||
        (st = need_float(c, 0, "x")) || (st = gn_groups(c, &g)) ||
        (st = need_epsilon(c)))
        return st;
    x = KIN(c, 0);
    for (int i = 1; i < KNIN(c); i++)
        if ((st = gn_param(c, i, names[i])))
            return st;
    stat[0] = x->shape[0];
    stat[1] = g;
    if ((st = kit_out_like(c, 0, x, x->dtype)) ||
        (st = kit_out_is(c, 1, stat_dtype(x->dtype), 2, stat)) ||
        (st = kit_out_is(c, 2, stat_dtype(x->dtype), 2, stat)))
        return st;
    return KEEL_STATUS_OK; /* outputs: the generic check */
}

keel_status kit_rule_group_norm_grad(const struct kit_ctx *c)
{
    const keel_tensor_desc *x;
    keel_kit_norm g;
    keel_status st;
    int64_t groups;
    keel_dtype pdt;

    if ((st = kit_inputs_between(c, 4, 5)) || (st = kit_arity(c, -1, 3)) ||
        (st = need_float(c, 0, "x")) || (st = gn_groups(c, &groups)))
        return st;
    x = KIN(c, 0);
    norm_fill(c->op, c->a, &g);
    if ((st = norm_grad_inputs(c, x->shape[0] * groups, &g)) ||
        (g.scale >= 0 && (st = gn_param(c, g.scale, "scale"))) ||
        (st = kit_out_like(c, 0, x, x->dtype)))
        return st;
    pdt = g.scale >= 0 ? KIN(c, g.scale)->dtype : x->dtype;
    if ((st = kit_out_is(c, 1, pdt, 1, &x->shape[1])) ||
        (st = kit_out_is(c, 2, pdt, 1, &x->shape[1])))
        return st;
    return KEEL_STATUS_OK; /* outputs: the generic check */
}

/* ---- cross_entropy ------------------------------------------------------- */

/* logits (input 0), the class axis, label_smoothing and reduction. */
static keel_status ce_attrs(const struct kit_ctx *c, int *axis, int *mode)
{
    const keel_tensor_desc *x = KIN(c, 0);
    int64_t v = keel_kit_attr_i(c->a, "axis", -1);
    double eps = keel_kit_attr_f(c->a, "label_smoothing", 0);
    keel_status st;

    if ((st = need_float(c, 0, "the input")))
        return st;
    if (x->ndim < 1)
        return kit_bad(c, "the input needs a class axis (got a 0-d tensor)");
    *axis = keel_kit_axis(v, x->ndim);
    if (*axis < 0)
        return kit_bad(c, "axis %lld is out of range for %d dims",
                       (long long)v, x->ndim);
    if (x->shape[*axis] == 0)
        return kit_bad(c, "the class axis %d is empty", *axis);
    if (!(eps >= 0 && eps <= 1))
        return kit_bad(c, "label_smoothing must be in [0, 1], got %g", eps);
    return need_reduction(c, mode);
}

/*
 * Hard labels: any integer dtype, the logits' shape without the class axis
 * (*squeeze: the per-sample loss drops it) or with it equal to 1. Soft
 * labels: any floating dtype, the logits' shape.
 */
static keel_status ce_label(const struct kit_ctx *c, int axis, bool *squeeze)
{
    const keel_tensor_desc *lg = KIN(c, 0), *lb = KIN(c, 1);
    bool ok = false;
    keel_status st;

    *squeeze = false;
    if (keel_kit_attr_i(c->a, "soft_label", 0)) {
        if ((st = need_float(c, 1, "a soft label")))
            return st;
        if (!keel_kit_same_shape(lg, lb))
            return kit_bad(c, "a soft label must have the logits' shape");
        return KEEL_STATUS_OK;
    }
    if (!int_dtype(lb->dtype))
        return kit_bad(c, "a hard label must have an integer dtype, got %s "
                       "(soft_label takes distributions)",
                       keel_kit_dtype_name(lb->dtype));
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
    }
    if (!ok)
        return kit_bad(c, "the hard label must have the logits' shape "
                       "without axis %d (or with it equal to 1)",
                       axis);
    return KEEL_STATUS_OK;
}

/* The per-sample loss shape; its rank. */
static int ce_loss_shape(const keel_tensor_desc *x, int axis, bool squeeze,
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

/* (logits|softmax, label, [dloss,] weight?) */
static keel_status ce_common(const struct kit_ctx *c, int wi, int *axis,
                             int *mode, bool *squeeze)
{
    keel_status st;

    if ((st = ce_attrs(c, axis, mode)) || (st = ce_label(c, *axis, squeeze)))
        return st;
    if (KNIN(c) > wi &&
        ((st = need_float(c, wi, "weight")) ||
         (st = need_vec(c, wi, KIN(c, 0)->shape[*axis], "weight"))))
        return st;
    return KEEL_STATUS_OK;
}

keel_status kit_rule_cross_entropy(const struct kit_ctx *c)
{
    const keel_tensor_desc *x = KIN(c, 0);
    int64_t shape[KEEL_MAX_DIMS];
    int axis, mode, n;
    bool squeeze;
    keel_status st;

    if ((st = kit_inputs_between(c, 2, 3)) || (st = kit_arity(c, -1, 2)) ||
        (st = ce_common(c, 2, &axis, &mode, &squeeze)))
        return st;
    n = ce_loss_shape(x, axis, squeeze, shape);
    if ((st = kit_out_is(c, 0, x->dtype, mode == KEEL_KIT_RED_NONE ? n : 0,
                         shape)) ||
        (st = kit_out_like(c, 1, x, x->dtype)))
        return st;
    return KEEL_STATUS_OK; /* outputs: the generic check */
}

keel_status kit_rule_cross_entropy_grad(const struct kit_ctx *c)
{
    const keel_tensor_desc *x = KIN(c, 0);
    int64_t shape[KEEL_MAX_DIMS], want;
    int axis, mode, n;
    bool squeeze;
    keel_status st;

    if ((st = kit_inputs_between(c, 3, 4)) || (st = kit_arity(c, -1, 1)) ||
        (st = ce_common(c, 3, &axis, &mode, &squeeze)) ||
        (st = need_float(c, 2, "dloss")))
        return st;
    n = ce_loss_shape(x, axis, squeeze, shape);
    want = mode == KEEL_KIT_RED_NONE ? keel_kit_prod(shape, 0, n) : 1;
    if (keel_kit_numel(KIN(c, 2)) != want)
        return kit_bad(c, "dloss (input 2) must have %lld elements (the "
                       "loss' shape), got %lld",
                       (long long)want, (long long)keel_kit_numel(KIN(c, 2)));
    if ((st = kit_out_like(c, 0, x, x->dtype)))
        return st;
    return KEEL_STATUS_OK; /* outputs: the generic check */
}

/* ---- mse_loss, bce_with_logits ------------------------------------------- */

keel_status kit_rule_loss(const struct kit_ctx *c)
{
    static const char *const names[3] = {"the input", "the label",
                                         "pos_weight"};
    const keel_tensor_desc *x = KIN(c, 0);
    int hi = c->op == KEEL_OP_BCE_WITH_LOGITS ? 3 : 2, mode;
    keel_status st;

    if ((st = kit_inputs_between(c, 2, hi)) || (st = kit_arity(c, -1, 1)) ||
        (st = need_reduction(c, &mode)))
        return st;
    for (int i = 0; i < KNIN(c); i++) {
        if ((st = need_float(c, i, names[i])))
            return st;
        /* pos_weight arrives broadcast to x's shape (stride 0). */
        if (i > 0 && !keel_kit_same_shape(KIN(c, i), x))
            return kit_bad(c, "%s (input %d) must have the input's shape",
                           names[i], i);
    }
    if ((st = kit_out_is(c, 0, x->dtype,
                         mode == KEEL_KIT_RED_NONE ? x->ndim : 0, x->shape)))
        return st;
    return KEEL_STATUS_OK; /* outputs: the generic check */
}

/* ---- nll_loss ------------------------------------------------------------ */

keel_status kit_rule_nll_loss(const struct kit_ctx *c)
{
    const keel_tensor_desc *x = KIN(c, 0), *lb;
    int64_t shape[KEEL_MAX_DIMS], C;
    int mode, n = 0, cd;
    keel_status st;
    bool ok;

    if ((st = kit_inputs_between(c, 2, 3)) || (st = kit_arity(c, -1, 1)) ||
        (st = need_float(c, 0, "the input")) ||
        (st = need_reduction(c, &mode)))
        return st;
    if (x->ndim < 1)
        return kit_bad(c, "the input must be [N, C, ...] or [C]");
    if ((st = need_int(c, 1, "the label")))
        return st;
    cd = x->ndim == 1 ? 0 : 1;
    C = x->shape[cd];
    lb = KIN(c, 1);
    for (int d = 0; d < x->ndim; d++)
        if (d != cd)
            shape[n++] = x->shape[d];
    ok = lb->ndim == n &&
         !memcmp(lb->shape, shape, sizeof(int64_t) * (size_t)n);
    if (!ok)
        return kit_bad(c, "the label must have the input's shape without "
                       "the class dim %d (%d dims)",
                       cd, n);
    if (C == 0)
        return kit_bad(c, "the class dim is empty");
    if (KNIN(c) == 3 && ((st = need_float(c, 2, "weight")) ||
                         (st = need_vec(c, 2, C, "weight"))))
        return st;
    if ((st = kit_out_is(c, 0, x->dtype, mode == KEEL_KIT_RED_NONE ? n : 0,
                         shape)))
        return st;
    return KEEL_STATUS_OK; /* outputs: the generic check */
}

/* ---- embedding ----------------------------------------------------------- */

static keel_status need_padding_idx(const struct kit_ctx *c, int64_t rows)
{
    int64_t pad = keel_kit_attr_i(c->a, "padding_idx", -1);

    if (pad >= rows)
        return kit_bad(c, "padding_idx %lld is out of range for %lld rows "
                       "(negative means none)",
                       (long long)pad, (long long)rows);
    return KEEL_STATUS_OK;
}

keel_status kit_rule_embedding(const struct kit_ctx *c)
{
    const keel_tensor_desc *ids = KIN(c, 0), *w = KIN(c, 1);
    int64_t shape[KEEL_MAX_DIMS];
    keel_status st;

    if ((st = kit_arity(c, 2, 1)) || (st = need_int(c, 0, "ids")) ||
        (st = need_float(c, 1, "the table")))
        return st;
    if (w->ndim != 2)
        return kit_bad(c, "the table must be [V, D], got %d dims", w->ndim);
    if (ids->ndim + 1 > KEEL_MAX_DIMS)
        return kit_bad(c, "ids have too many dims (%d)", ids->ndim);
    if ((st = need_padding_idx(c, w->shape[0])))
        return st;
    memcpy(shape, ids->shape, sizeof(int64_t) * (size_t)ids->ndim);
    shape[ids->ndim] = w->shape[1];
    if ((st = kit_out_is(c, 0, w->dtype, ids->ndim + 1, shape)))
        return st;
    return KEEL_STATUS_OK; /* outputs: the generic check */
}

keel_status kit_rule_embedding_grad(const struct kit_ctx *c)
{
    const keel_tensor_desc *ids = KIN(c, 0), *dy = KIN(c, 1);
    int64_t v = keel_kit_attr_i(c->a, "num_embeddings", 0), shape[2];
    keel_status st;

    if ((st = kit_arity(c, 2, 1)) || (st = need_int(c, 0, "ids")) ||
        (st = need_float(c, 1, "dout")))
        return st;
    if (dy->ndim != ids->ndim + 1 ||
        memcmp(dy->shape, ids->shape, sizeof(int64_t) * (size_t)ids->ndim))
        return kit_bad(c, "dout must be [ids.shape..., D]");
    if (v < 0)
        return kit_bad(c, "num_embeddings must be >= 0, got %lld",
                       (long long)v);
    if ((st = need_padding_idx(c, v)))
        return st;
    shape[0] = v;
    shape[1] = dy->shape[dy->ndim - 1];
    if ((st = kit_out_is(c, 0, dy->dtype, 2, shape)))
        return st;
    return KEEL_STATUS_OK; /* outputs: the generic check */
}

/* ---- one_hot, dropout ---------------------------------------------------- */

keel_status kit_rule_one_hot(const struct kit_ctx *c)
{
    const keel_tensor_desc *x = KIN(c, 0);
    int64_t n = keel_kit_attr_i(c->a, "num_classes", 0);
    int64_t shape[KEEL_MAX_DIMS];
    keel_status st;

    if ((st = kit_arity(c, 1, 1)) || (st = need_int(c, 0, "x")))
        return st;
    if (n <= 0)
        return kit_bad(c, "num_classes must be positive, got %lld",
                       (long long)n);
    if (x->ndim + 1 > KEEL_MAX_DIMS)
        return kit_bad(c, "x has too many dims (%d)", x->ndim);
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim] = n;
    if ((st = kit_out_is(c, 0, KEEL_F32, x->ndim + 1, shape)))
        return st;
    return KEEL_STATUS_OK; /* outputs: the generic check */
}

keel_status kit_rule_dropout(const struct kit_ctx *c)
{
    const keel_tensor_desc *x = KIN(c, 0);
    const char *mode = keel_kit_attr_s(c->a, "mode", "upscale_in_train");
    double p = keel_kit_attr_f(c->a, "p", 0.5);
    keel_status st;

    if ((st = kit_arity(c, 1, 2)) || (st = need_float(c, 0, "x")))
        return st;
    if (!(p >= 0 && p <= 1))
        return kit_bad(c, "p must be in [0, 1], got %g", p);
    if (strcmp(mode, "upscale_in_train") && strcmp(mode, "downscale_in_infer"))
        return kit_bad(c, "mode must be 'upscale_in_train' or "
                       "'downscale_in_infer', got '%s'",
                       mode);
    if ((st = kit_out_like(c, 0, x, x->dtype)) ||
        (st = kit_out_like(c, 1, x, KEEL_U8)))
        return st;
    return KEEL_STATUS_OK; /* outputs: the generic check */
}

/* ---- optimizer updates --------------------------------------------------- */

static keel_status need_unit(const struct kit_ctx *c, const char *name,
                             double def)
{
    double v = keel_kit_attr_f(c->a, name, def);

    if (!(v >= 0 && v < 1))
        return kit_bad(c, "%s = %g must be in [0, 1)", name, v);
    return KEEL_STATUS_OK;
}

keel_status kit_rule_optimizer(const struct kit_ctx *c)
{
    static const char *const names[4] = {"param", "grad", "state 1",
                                         "state 2"};
    const keel_tensor_desc *p = KIN(c, 0);
    int n = c->info->num_inputs;
    keel_status st;

    if ((st = kit_arity(c, n, 0)) || (st = need_float(c, 0, "param")) ||
        (st = need_float(c, 1, "grad")) ||
        (st = need_writable(c, 0, "param")))
        return st;
    for (int i = 1; i < n; i++) {
        if (!keel_kit_same_shape(KIN(c, i), p))
            return kit_bad(c, "%s (input %d) must have the param's shape",
                           names[i], i);
        if (i < 2)
            continue;
        if (KIN(c, i)->dtype != p->dtype)
            return kit_bad(c, "%s (input %d) must have the param's dtype "
                           "%s, got %s",
                           names[i], i, keel_kit_dtype_name(p->dtype),
                           keel_kit_dtype_name(KIN(c, i)->dtype));
        if ((st = need_writable(c, i, names[i])))
            return st;
    }
    if (c->op == KEEL_OP_ADAM_UPDATE || c->op == KEEL_OP_ADAMW_UPDATE) {
        if ((st = need_unit(c, "beta1", 0.9)) ||
            (st = need_unit(c, "beta2", 0.999)) ||
            (st = need_unit(c, "beta1_pow", 0)) ||
            (st = need_unit(c, "beta2_pow", 0)))
            return st;
    }
    return KEEL_STATUS_OK;
}

/* ---- check_finite_and_unscale -------------------------------------------- */

/* Input i has dtype dt and one element ([1], 0-d or any shape of one). */
static keel_status need_one(const struct kit_ctx *c, int i, keel_dtype dt,
                            const char *what)
{
    const keel_tensor_desc *d = KIN(c, i);
    char got[160];

    if (d->dtype != dt)
        return kit_bad(c, "%s (input %d) must be %s, got %s", what, i,
                       keel_kit_dtype_name(dt),
                       keel_kit_dtype_name(d->dtype));
    if (keel_kit_numel(d) != 1)
        return kit_bad(c, "%s (input %d) must have one element (shape [1] "
                       "or []), got %s",
                       what, i, kit_shape_str(got, sizeof(got), d->ndim,
                                              d->shape));
    return KEEL_STATUS_OK;
}

keel_status kit_rule_unscale(const struct kit_ctx *c)
{
    keel_status st;

    if ((st = kit_arity(c, 3, 0)) || (st = need_float(c, 0, "x")) ||
        (st = need_writable(c, 0, "x")) ||
        (st = need_one(c, 1, KEEL_F32, "scale")) ||
        (st = need_one(c, 2, KEEL_BOOL, "found_inf")))
        return st;
    return KEEL_STATUS_OK;
}
