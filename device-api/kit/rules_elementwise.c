/*
 * keel kernel kit — checks of the elementwise, cast and creation shape
 * rules (docs/ops.md, "What a kernel receives", says what each promises a
 * kernel; core/src/dispatch/shape_elementwise.c is what the core sends).
 *
 * Elementwise inputs arrive already broadcast: every input has the
 * output's shape (stride 0 along broadcast dims), so a kernel never
 * broadcasts. The inputs that take part in promotion share one dtype,
 * which keys the look-up.
 */
#include <math.h>

#include "kit_internal.h"

/* n inputs of the output's shape; inputs [first, n) share input first's
 * dtype, the key, which must be in the op's set; the output is `out_dt`,
 * or the key when out_dt is -1. */
static keel_status elementwise(const struct kit_ctx *c, int n, int first,
                               int out_dt)
{
    const keel_tensor_desc *o;
    keel_dtype key;
    keel_status st;

    if ((st = kit_arity(c, n, 1)))
        return st;
    o = KOUT(c, 0);
    key = KIN(c, first)->dtype;
    for (int i = first; i < n; i++)
        if (KIN(c, i)->dtype != key)
            return kit_bad(c, "input %d is %s, input %d %s: the inputs "
                           "arrive promoted to one dtype",
                           i, keel_kit_dtype_name(KIN(c, i)->dtype), first,
                           keel_kit_dtype_name(key));
    if ((st = kit_key_dtype(c, key)))
        return st;
    for (int i = 0; i < n; i++)
        if (!keel_kit_same_shape(KIN(c, i), o)) {
            char a[160], b[160];
            return kit_bad(c, "input %d has shape %s, the output %s: inputs "
                           "arrive broadcast to the output's shape",
                           i,
                           kit_shape_str(a, sizeof(a), KIN(c, i)->ndim,
                                         KIN(c, i)->shape),
                           kit_shape_str(b, sizeof(b), o->ndim, o->shape));
        }
    return kit_out_like(c, 0, o, out_dt < 0 ? key : (keel_dtype)out_dt);
}

keel_status kit_rule_broadcast(const struct kit_ctx *c)
{
    return elementwise(c, 2, 0, -1);
}

keel_status kit_rule_compare(const struct kit_ctx *c)
{
    return elementwise(c, 2, 0, KEEL_BOOL);
}

keel_status kit_rule_logical(const struct kit_ctx *c)
{
    return elementwise(c, 2, 0, KEEL_BOOL);
}

keel_status kit_rule_logical_unary(const struct kit_ctx *c)
{
    return elementwise(c, 1, 0, KEEL_BOOL);
}

keel_status kit_rule_where(const struct kit_ctx *c)
{
    keel_status st;

    if ((st = kit_arity(c, 3, 1)))
        return st;
    if (KIN(c, 0)->dtype != KEEL_BOOL)
        return kit_bad(c, "the condition (input 0) is %s, expected bool",
                       keel_kit_dtype_name(KIN(c, 0)->dtype));
    /* The value dtype (x's, y's) keys the look-up, not the condition's. */
    return elementwise(c, 3, 1, -1);
}

static bool is_finite(double v)
{
    return isfinite(v);
}

/* The attribute ranges the core's `same` rule enforces, per op. */
static keel_status same_attrs(const struct kit_ctx *c)
{
    const keel_kernel_args *a = c->a;

    switch (c->op) {
    case KEEL_OP_FLIP: {
        int64_t n;
        const int64_t *ax = keel_kit_attr_ints(a, "axis", &n);
        /* A repeated axis flips once, as in Paddle. */
        for (int64_t i = 0; i < n; i++)
            if (keel_kit_axis(ax[i], KIN(c, 0)->ndim) < 0)
                return kit_bad(c, "axis %lld is out of range for %d dims",
                               (long long)ax[i], (int)KIN(c, 0)->ndim);
        return KEEL_STATUS_OK;
    }
    case KEEL_OP_CLIP: {
        double lo = keel_kit_attr_f(a, "min", -INFINITY);
        double hi = keel_kit_attr_f(a, "max", INFINITY);
        if (isnan(lo) || isnan(hi))
            return kit_bad(c, "min and max must not be NaN");
        if (lo > hi)
            return kit_bad(c, "min %g is greater than max %g", lo, hi);
        return KEEL_STATUS_OK;
    }
    case KEEL_OP_SOFTPLUS: {
        double beta = keel_kit_attr_f(a, "beta", 1.0);
        double th = keel_kit_attr_f(a, "threshold", 20.0);
        if (beta == 0 || !is_finite(beta) || isnan(th))
            return kit_bad(c, "beta %g must be finite and non-zero, "
                           "threshold %g not NaN", beta, th);
        return KEEL_STATUS_OK;
    }
    case KEEL_OP_LEAKY_RELU:
        if (!is_finite(keel_kit_attr_f(a, "negative_slope", 0.01)))
            return kit_bad(c, "negative_slope must be finite");
        return KEEL_STATUS_OK;
    case KEEL_OP_ELU:
        if (!is_finite(keel_kit_attr_f(a, "alpha", 1.0)))
            return kit_bad(c, "alpha must be finite");
        return KEEL_STATUS_OK;
    default:
        return KEEL_STATUS_OK;
    }
}

keel_status kit_rule_same(const struct kit_ctx *c)
{
    keel_status st = elementwise(c, 1, 0, -1);

    return st ? st : same_attrs(c);
}

keel_status kit_rule_cast(const struct kit_ctx *c)
{
    keel_status st;

    /* The source dtype keys the look-up: one kernel converts to every
     * target. `dtype` is required, so the generic check saw it. */
    if ((st = kit_arity(c, 1, 1)) || (st = kit_key_dtype(c, KIN(c, 0)->dtype)))
        return st;
    return kit_out_like(c, 0, KIN(c, 0),
                        (keel_dtype)keel_kit_attr_i(c->a, "dtype", -1));
}

keel_status kit_rule_creation(const struct kit_ctx *c)
{
    const keel_kernel_args *a = c->a;
    keel_dtype dt = (keel_dtype)keel_kit_attr_i(a, "dtype", -1);
    int64_t n;
    const int64_t *shape = keel_kit_attr_ints(a, "shape", &n);
    keel_status st;
    int want_rank = c->op == KEEL_OP_EYE ? 2
                    : (c->op == KEEL_OP_ARANGE || c->op == KEEL_OP_LINSPACE)
                        ? 1
                        : -1;

    if ((st = kit_arity(c, 0, 1)) || (st = kit_key_dtype(c, dt)))
        return st;
    if (n > KEEL_MAX_DIMS)
        return kit_bad(c, "shape has %lld dims, at most %d", (long long)n,
                       KEEL_MAX_DIMS);
    for (int64_t i = 0; i < n; i++)
        if (shape[i] < 0)
            return kit_bad(c, "shape[%lld] = %lld is negative", (long long)i,
                           (long long)shape[i]);
    if (want_rank >= 0 && n != want_rank)
        return kit_bad(c, "shape has %lld dims, this op makes %d-D tensors",
                       (long long)n, want_rank);
    switch (c->op) {
    case KEEL_OP_RANDINT:
        if (keel_kit_attr_i(a, "high", 0) <= keel_kit_attr_i(a, "low", 0))
            return kit_bad(c, "needs low < high (low %lld, high %lld)",
                           (long long)keel_kit_attr_i(a, "low", 0),
                           (long long)keel_kit_attr_i(a, "high", 0));
        break;
    case KEEL_OP_ARANGE:
        if (!is_finite(keel_kit_attr_f(a, "start", 0)) ||
            !is_finite(keel_kit_attr_f(a, "step", 1)))
            return kit_bad(c, "start and step must be finite");
        break;
    case KEEL_OP_LINSPACE:
        if (!is_finite(keel_kit_attr_f(a, "start", 0)) ||
            !is_finite(keel_kit_attr_f(a, "stop", 0)))
            return kit_bad(c, "start and stop must be finite");
        break;
    case KEEL_OP_UNIFORM: {
        double lo = keel_kit_attr_f(a, "low", 0), hi = keel_kit_attr_f(a, "high", 1);
        if (!is_finite(lo) || !is_finite(hi) || lo > hi)
            return kit_bad(c, "low %g and high %g must be finite, low <= high",
                           lo, hi);
        break;
    }
    case KEEL_OP_NORMAL: {
        double m = keel_kit_attr_f(a, "mean", 0), s = keel_kit_attr_f(a, "std", 1);
        if (!is_finite(m) || !is_finite(s) || s < 0)
            return kit_bad(c, "mean %g and std %g must be finite, std >= 0",
                           m, s);
        break;
    }
    default:
        break;
    }
    return kit_out_is(c, 0, dt, (int)n, shape);
}
