/*
 * keel kernel kit — checks of the reduce shape rules (see docs/ops.md,
 * "What a kernel receives", for what each promises a kernel), and the
 * axis helpers the reduction, cumsum and softmax kernels share.
 *
 * What the core sends is core/src/shape_reduce.c: x unchanged, `axis` as
 * the caller wrote it (negative entries allowed, empty: every dim; a 0-d x
 * accepts 0 and -1 and reduces nothing), outputs of the reduced shape.
 */
#include "kit_internal.h"

/* ---- helpers (public) ------------------------------------------------------ */

int keel_kit_axis_0d(int64_t axis, int ndim)
{
    return keel_kit_axis(axis, ndim ? ndim : 1);
}

uint32_t keel_kit_axes_bits(const keel_kernel_args *a, const char *name,
                            int ndim)
{
    int64_t n;
    const int64_t *ax = keel_kit_attr_ints(a, name, &n);
    uint32_t bits = 0;

    for (int64_t i = 0; i < n && ndim > 0; i++) {
        int d = keel_kit_axis(ax[i], ndim);
        if (d >= 0)
            bits |= 1u << d;
    }
    return bits;
}

uint32_t keel_kit_reduce_mask(const keel_kernel_args *a, int ndim)
{
    int64_t n;

    keel_kit_attr_ints(a, "axis", &n);
    if (n == 0)
        return ndim > 0 ? (uint32_t)((1u << ndim) - 1) : 0;
    return keel_kit_axes_bits(a, "axis", ndim);
}

void keel_kit_reduce_counts(const keel_tensor_desc *x, uint32_t mask,
                            int64_t *nout, int64_t *nred)
{
    int64_t o = 1, r = 1;

    for (int d = 0; d < x->ndim; d++) {
        if (mask & (1u << d))
            r *= x->shape[d];
        else
            o *= x->shape[d];
    }
    if (nout)
        *nout = o;
    if (nred)
        *nred = r;
}

int keel_kit_sort_axis(const keel_kernel_args *a, const keel_tensor_desc *x,
                       int64_t *len)
{
    int axis = keel_kit_axis_0d(keel_kit_attr_i(a, "axis", -1), x->ndim);

    *len = axis < 0 ? 0 : x->ndim ? x->shape[axis] : 1;
    return axis;
}

/* ---- rule helpers ------------------------------------------------------------ */

/* One axis `v` of an ndim-d input (0-d: 0 and -1); *axis normalised. */
static keel_status one_axis(const struct kit_ctx *c, int64_t v, int ndim,
                            int *axis)
{
    int lim = ndim ? ndim : 1;

    *axis = keel_kit_axis_0d(v, ndim);
    if (*axis < 0)
        return kit_bad(c, "axis %lld is out of range for a %d-d input "
                       "(valid: %d to %d)",
                       (long long)v, ndim, -lim, lim - 1);
    return KEEL_STATUS_OK;
}

/* The `axis` list of input 0: every entry in range, none repeated (so at
 * most ndim of them), at most one when `one`; *mask as
 * keel_kit_reduce_mask, *naxes the count. */
static keel_status axes(const struct kit_ctx *c, bool one, uint32_t *mask,
                        int *naxes)
{
    int ndim = KIN(c, 0)->ndim;
    int64_t n;
    const int64_t *ax = keel_kit_attr_ints(c->a, "axis", &n);
    uint32_t seen = 0;
    keel_status st;

    if (one && n > 1)
        return kit_bad(c, "takes one axis (or none: the flattened tensor), "
                       "got %lld", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        int d;
        if ((st = one_axis(c, ax[i], ndim, &d)))
            return st;
        if (seen & (1u << d))
            return kit_bad(c, "axis %lld is repeated", (long long)ax[i]);
        seen |= 1u << d;
    }
    *naxes = (int)n;
    *mask = keel_kit_reduce_mask(c->a, ndim);
    return KEEL_STATUS_OK;
}

/* reduce, reduce_arg, reduce_bool: one input, one output of x reduced
 * over `mask` (dims kept as 1 with keepdim) in dtype `odt`. */
static keel_status reduced(const struct kit_ctx *c, bool one,
                           bool need_identity, bool int64_sum,
                           keel_dtype odt)
{
    const keel_tensor_desc *x;
    int64_t shape[KEEL_MAX_DIMS], nout, nred;
    bool keepdim = keel_kit_attr_i(c->a, "keepdim", 0) != 0;
    uint32_t mask;
    int naxes, nd = 0;
    keel_status st;

    if ((st = kit_arity(c, 1, 1)))
        return st;
    x = KIN(c, 0);
    if ((st = kit_key_dtype(c, x->dtype)) ||
        (st = axes(c, one, &mask, &naxes)))
        return st;
    for (int d = 0; d < x->ndim; d++)
        if (!(mask & (1u << d)))
            shape[nd++] = x->shape[d];
        else if (keepdim)
            shape[nd++] = 1;
    keel_kit_reduce_counts(x, mask, &nout, &nred);
    if (need_identity && nred == 0 && nout > 0)
        return kit_bad(c, "cannot reduce over an empty axis: the op has no "
                       "identity value");
    if (int64_sum && !keel_kit_float_dtype(x->dtype))
        odt = KEEL_I64;
    return kit_out_is(c, 0, odt, nd, shape);
}

/* ---- rules --------------------------------------------------------------------- */

keel_status kit_rule_reduce(const struct kit_ctx *c)
{
    bool minmax = c->op == KEEL_OP_MAX || c->op == KEEL_OP_MIN;

    if (KNIN(c) < 1)
        return kit_arity(c, 1, 1);
    return reduced(c, false, minmax, c->op == KEEL_OP_SUM,
                   KIN(c, 0)->dtype);
}

keel_status kit_rule_reduce_bool(const struct kit_ctx *c)
{
    return reduced(c, false, false, false, KEEL_BOOL);
}

keel_status kit_rule_reduce_arg(const struct kit_ctx *c)
{
    return reduced(c, true, true, false, KEEL_I64);
}

keel_status kit_rule_cumsum(const struct kit_ctx *c)
{
    const keel_tensor_desc *x;
    uint32_t mask;
    int naxes;
    keel_dtype odt;
    keel_status st;

    if ((st = kit_arity(c, 1, 1)))
        return st;
    x = KIN(c, 0);
    if ((st = kit_key_dtype(c, x->dtype)) || (st = axes(c, true, &mask, &naxes)))
        return st;
    /* Floating x keeps its dtype; integers and bool sum in int64. */
    odt = keel_kit_float_dtype(x->dtype) ? x->dtype : KEEL_I64;
    if (naxes == 0) {
        int64_t n = keel_kit_numel(x);
        return kit_out_is(c, 0, odt, 1, &n);
    }
    return kit_out_is(c, 0, odt, x->ndim, x->shape);
}

keel_status kit_rule_same_axis(const struct kit_ctx *c)
{
    const keel_tensor_desc *x;
    int axis;
    keel_status st;

    if ((st = kit_arity(c, 1, 1)))
        return st;
    x = KIN(c, 0);
    if ((st = kit_key_dtype(c, x->dtype)) ||
        (st = one_axis(c, keel_kit_attr_i(c->a, "axis", -1), x->ndim,
                       &axis)))
        return st;
    return kit_out_like(c, 0, x, x->dtype);
}

keel_status kit_rule_same_axis_grad(const struct kit_ctx *c)
{
    const keel_tensor_desc *y, *dy;
    int axis;
    keel_status st;

    if ((st = kit_arity(c, 2, 1)))
        return st;
    y = KIN(c, 0);
    dy = KIN(c, 1);
    if (!keel_kit_same_shape(y, dy))
        return kit_bad(c, "out and dout must have the same shape");
    /* The core casts both to their promoted dtype. */
    if ((st = kit_same_dtype(c, 0x3, 0)) || (st = kit_key_dtype(c, y->dtype)) ||
        (st = one_axis(c, keel_kit_attr_i(c->a, "axis", -1), y->ndim,
                       &axis)))
        return st;
    return kit_out_like(c, 0, y, y->dtype);
}

/* sort, argsort, topk: x's axis (0-d: 0 or -1), outputs [values in x's
 * dtype,] int64 indices, x's shape with `k` along the axis. */
static keel_status sorted(const struct kit_ctx *c, int nout, bool topk)
{
    const keel_tensor_desc *x;
    int64_t shape[KEEL_MAX_DIMS], len, k;
    int axis;
    keel_status st;

    if ((st = kit_arity(c, 1, nout)))
        return st;
    x = KIN(c, 0);
    if ((st = kit_key_dtype(c, x->dtype)) ||
        (st = one_axis(c, keel_kit_attr_i(c->a, "axis", -1), x->ndim,
                       &axis)))
        return st;
    keel_kit_sort_axis(c->a, x, &len);
    k = topk ? keel_kit_attr_i(c->a, "k", 1) : len;
    if (k < 0 || k > len || (x->ndim == 0 && k != 1))
        return kit_bad(c, "k = %lld is out of range: need %s%lld (the size "
                       "along axis %d)",
                       (long long)k, x->ndim ? "0 <= k <= " : "k = ",
                       (long long)len, axis);
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    if (x->ndim)
        shape[axis] = k;
    if (nout == 2 && (st = kit_out_is(c, 0, x->dtype, x->ndim, shape)))
        return st;
    return kit_out_is(c, nout - 1, KEEL_I64, x->ndim, shape);
}

keel_status kit_rule_sort(const struct kit_ctx *c)
{
    return sorted(c, 2, false);
}

keel_status kit_rule_argsort(const struct kit_ctx *c)
{
    return sorted(c, 1, false);
}

keel_status kit_rule_topk(const struct kit_ctx *c)
{
    return sorted(c, 2, true);
}
