/*
 * keel kernel kit — checks of the manip shape rules (see docs/ops.md,
 * "What a kernel receives", for what each promises a kernel), and the
 * geometry helpers the shape and indexing kernels share.
 *
 * What the core sends is core/src/shape_manip.c, in canonical form: a 0-d
 * gather or scatter index arrives as [1] (scatter's updates then with a
 * leading dim 1), take_along_axis's x and index re-expressed with the
 * output's shape. Index values are the kernel's to check (they are data).
 */
#include <stdio.h>
#include <string.h>

#include "kit_internal.h"

/* ---- helpers (public) ------------------------------------------------------ */

void keel_kit_outer_inner(const keel_tensor_desc *d, int axis,
                          int64_t *outer, int64_t *inner)
{
    if (outer)
        *outer = keel_kit_prod(d->shape, 0, axis);
    if (inner)
        *inner = keel_kit_prod(d->shape, axis + 1, d->ndim);
}

int keel_kit_pad_mode(const keel_kernel_args *a)
{
    const char *m = keel_kit_attr_s(a, "mode", "constant");

    if (!strcmp(m, "constant"))
        return KEEL_KIT_PAD_CONSTANT;
    if (!strcmp(m, "reflect"))
        return KEEL_KIT_PAD_REFLECT;
    if (!strcmp(m, "replicate"))
        return KEEL_KIT_PAD_REPLICATE;
    return -1;
}

void keel_kit_pad_widths(const keel_kernel_args *a, int ndim,
                         int64_t *before, int64_t *after)
{
    int64_t np;
    const int64_t *pad = keel_kit_attr_ints(a, "pad", &np);

    for (int d = 0; d < ndim; d++) {
        before[d] = 2 * d < np ? pad[2 * d] : 0;
        after[d] = 2 * d + 1 < np ? pad[2 * d + 1] : 0;
    }
}

void keel_kit_align_right(const keel_tensor_desc *x, int nd, int64_t *shape,
                          int64_t *strides)
{
    int off = nd - x->ndim;

    for (int d = 0; d < nd; d++) {
        shape[d] = d < off ? 1 : x->shape[d - off];
        strides[d] = d < off ? 0 : x->strides[d - off];
    }
}

int64_t keel_kit_tile_repeat(const keel_kernel_args *a, int ndim, int d)
{
    int64_t nr;
    const int64_t *rep = keel_kit_attr_ints(a, "repeat_times", &nr);
    int64_t ri = d - (ndim - nr);

    return ri >= 0 && ri < nr ? rep[ri] : 1;
}

void keel_kit_gather_out(const keel_kernel_args *a, int axis,
                         keel_tensor_desc *v)
{
    const keel_tensor_desc *x = &a->inputs[0], *ix = &a->inputs[1];
    const keel_tensor_desc *o = &a->outputs[0];
    bool dropped = o->ndim < x->ndim;

    *v = *o;
    v->ndim = x->ndim;
    for (int d = 0, s = 0; d < x->ndim; d++) {
        v->shape[d] = d == axis ? ix->shape[0] : x->shape[d];
        v->strides[d] = d == axis && dropped ? 0 : o->strides[s++];
    }
}

/* ---- rule helpers ------------------------------------------------------------ */

/* One input x, whose dtype keys the lookup, and one output. */
static keel_status unary(const struct kit_ctx *c, const keel_tensor_desc **x)
{
    keel_status st = kit_arity(c, 1, 1);

    if (st)
        return st;
    *x = KIN(c, 0);
    return kit_key_dtype(c, (*x)->dtype);
}

/* Attribute `axis` (default def) normalised for ndim dims into *axis. */
static keel_status get_axis(const struct kit_ctx *c, int64_t def, int ndim,
                            int *axis)
{
    int64_t v = keel_kit_attr_i(c->a, "axis", def);

    *axis = keel_kit_axis(v, ndim);
    if (*axis < 0)
        return kit_bad(c, "axis %lld is out of range for %d dims (valid: "
                       "[%d, %d])",
                       (long long)v, ndim, -ndim, ndim - 1);
    return KEEL_STATUS_OK;
}

/* Input i is an int32 or int64 index. */
static keel_status index_dtype(const struct kit_ctx *c, int i)
{
    keel_dtype dt = KIN(c, i)->dtype;

    if (dt != KEEL_I32 && dt != KEEL_I64)
        return kit_bad(c, "the index (input %d) must be int32 or int64, got "
                       "%s", i, keel_kit_dtype_name(dt));
    return KEEL_STATUS_OK;
}

/* Descriptor d has ref's rank and dims, except along `skip` (-1: none). */
static keel_status dims_match(const struct kit_ctx *c, const char *what,
                              const keel_tensor_desc *d,
                              const keel_tensor_desc *ref,
                              const char *refname, int skip)
{
    if (d->ndim != ref->ndim)
        return kit_bad(c, "%s has %d dims, %s has %d", what, (int)d->ndim,
                       refname, (int)ref->ndim);
    for (int k = 0; k < d->ndim; k++)
        if (k != skip && d->shape[k] != ref->shape[k])
            return kit_bad(c, "%s has size %lld in dim %d, %s has %lld",
                           what, (long long)d->shape[k], k, refname,
                           (long long)ref->shape[k]);
    return KEEL_STATUS_OK;
}

/* Inputs 0..n-1 of one dtype and of input 0's dims except `skip`. */
static keel_status parts_match(const struct kit_ctx *c, int skip)
{
    char what[32];
    keel_status st;

    if ((st = kit_same_dtype(c, 0xffffffffu, 0)))
        return st;
    for (int i = 1; i < KNIN(c); i++) {
        if (i >= 32 && KIN(c, i)->dtype != KIN(c, 0)->dtype)
            return kit_bad(c, "input %d is %s, input 0 %s: they must share "
                           "one dtype", i,
                           keel_kit_dtype_name(KIN(c, i)->dtype),
                           keel_kit_dtype_name(KIN(c, 0)->dtype));
        snprintf(what, sizeof(what), "input %d", i);
        if ((st = dims_match(c, what, KIN(c, i), KIN(c, 0), "input 0",
                             skip)))
            return st;
    }
    return KEEL_STATUS_OK;
}

/* ---- concat and stack ------------------------------------------------------- */

keel_status kit_rule_concat(const struct kit_ctx *c)
{
    int64_t shape[KEEL_MAX_DIMS];
    const keel_tensor_desc *x0;
    int axis;
    keel_status st;

    if (KNIN(c) < 1 || KNOUT(c) != 1)
        return kit_bad(c, "needs at least one input and one output, got %d "
                       "and %d", (int)KNIN(c), (int)KNOUT(c));
    x0 = KIN(c, 0);
    if (x0->ndim == 0)
        return kit_bad(c, "cannot concatenate 0-d tensors");
    if ((st = kit_key_dtype(c, x0->dtype)) ||
        (st = get_axis(c, 0, x0->ndim, &axis)) ||
        (st = parts_match(c, axis)))
        return st;
    memcpy(shape, x0->shape, sizeof(int64_t) * (size_t)x0->ndim);
    shape[axis] = 0;
    for (int i = 0; i < KNIN(c); i++)
        if (__builtin_add_overflow(shape[axis], KIN(c, i)->shape[axis],
                                   &shape[axis]))
            return kit_bad(c, "the sizes along axis %d add up past int64",
                           axis);
    return kit_out_is(c, 0, x0->dtype, x0->ndim, shape);
}

keel_status kit_rule_stack(const struct kit_ctx *c)
{
    int64_t shape[KEEL_MAX_DIMS];
    const keel_tensor_desc *x0;
    int axis, nd;
    keel_status st;

    if (KNIN(c) < 1 || KNOUT(c) != 1)
        return kit_bad(c, "needs at least one input and one output, got %d "
                       "and %d", (int)KNIN(c), (int)KNOUT(c));
    x0 = KIN(c, 0);
    nd = x0->ndim;
    if (nd + 1 > KEEL_MAX_DIMS)
        return kit_bad(c, "stacking %d-d inputs gives more than %d dims", nd,
                       KEEL_MAX_DIMS);
    /* The axis counts in the output's dims. */
    if ((st = kit_key_dtype(c, x0->dtype)) ||
        (st = get_axis(c, 0, nd + 1, &axis)) || (st = parts_match(c, -1)))
        return st;
    for (int d = 0, s = 0; d < nd + 1; d++)
        shape[d] = d == axis ? KNIN(c) : x0->shape[s++];
    return kit_out_is(c, 0, x0->dtype, nd + 1, shape);
}

/* ---- split ---------------------------------------------------------------------- */

keel_status kit_rule_split(const struct kit_ctx *c)
{
    int64_t n, sum = 0, len, shape[KEEL_MAX_DIMS];
    const int64_t *sec = keel_kit_attr_ints(c->a, "sections", &n);
    const keel_tensor_desc *x;
    int axis, infer = -1;
    keel_status st;

    if (KNIN(c) != 1 || KNOUT(c) < 1)
        return kit_bad(c, "needs one input and at least one output, got %d "
                       "and %d", (int)KNIN(c), (int)KNOUT(c));
    x = KIN(c, 0);
    if ((st = kit_key_dtype(c, x->dtype)) ||
        (st = get_axis(c, 0, x->ndim, &axis)))
        return st;
    if (n != KNOUT(c))
        return kit_bad(c, "sections has %lld entries but there are %d "
                       "outputs", (long long)n, (int)KNOUT(c));
    for (int i = 0; i < n; i++) {
        if (sec[i] == -1 && infer < 0) {
            infer = i;
            continue;
        }
        if (sec[i] < 0)
            return kit_bad(c, "sections[%d] = %lld: sizes must be >= 0, "
                           "with at most one -1", i, (long long)sec[i]);
        if (__builtin_add_overflow(sum, sec[i], &sum))
            return kit_bad(c, "sections add up past int64 at sections[%d]",
                           i);
    }
    len = x->shape[axis];
    if ((infer < 0 && sum != len) || (infer >= 0 && sum > len))
        return kit_bad(c, "sections add up to %lld%s but axis %d has size "
                       "%lld", (long long)sum,
                       infer >= 0 ? " (before the -1)" : "", axis,
                       (long long)len);
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    for (int i = 0; i < n; i++) {
        shape[axis] = i == infer ? len - sum : sec[i];
        if ((st = kit_out_is(c, i, x->dtype, x->ndim, shape)))
            return st;
    }
    return KEEL_STATUS_OK;
}

/* ---- gather, index_select, scatter, take_along_axis ------------------------------ */

keel_status kit_rule_gather(const struct kit_ctx *c)
{
    int64_t shape[KEEL_MAX_DIMS];
    const keel_tensor_desc *x, *ix, *o;
    int axis, nd;
    keel_status st;

    if ((st = kit_arity(c, 2, 1)))
        return st;
    x = KIN(c, 0);
    ix = KIN(c, 1);
    o = KOUT(c, 0);
    if ((st = kit_key_dtype(c, x->dtype)) || (st = index_dtype(c, 1)) ||
        (st = get_axis(c, 0, x->ndim, &axis)))
        return st;
    /* A 0-d index arrives as [1] (stride 0). */
    if (ix->ndim != 1)
        return kit_bad(c, "the index must be 1-D (a 0-d one arrives as "
                       "[1]), got %d dims", (int)ix->ndim);
    /* gather of a 0-d index drops the axis from the output. */
    nd = 0;
    for (int d = 0; d < x->ndim; d++)
        if (d != axis || o->ndim == x->ndim || c->op != KEEL_OP_GATHER ||
            ix->shape[0] != 1)
            shape[nd++] = d == axis ? ix->shape[0] : x->shape[d];
    return kit_out_is(c, 0, x->dtype, nd, shape);
}

keel_status kit_rule_scatter(const struct kit_ctx *c)
{
    const keel_tensor_desc *x, *ix, *up;
    keel_status st;

    if ((st = kit_arity(c, 3, 1)))
        return st;
    x = KIN(c, 0);
    ix = KIN(c, 1);
    up = KIN(c, 2);
    if ((st = kit_key_dtype(c, x->dtype)) || (st = index_dtype(c, 1)))
        return st;
    if (x->ndim < 1)
        return kit_bad(c, "x must have at least 1 dim");
    if (ix->ndim != 1)
        return kit_bad(c, "the index must be 1-D (a 0-d one arrives as "
                       "[1]), got %d dims", (int)ix->ndim);
    if (up->dtype != x->dtype)
        return kit_bad(c, "updates is %s but x is %s: they must share one "
                       "dtype", keel_kit_dtype_name(up->dtype),
                       keel_kit_dtype_name(x->dtype));
    /* updates: [n, x.shape[1:]...]. */
    if ((st = dims_match(c, "updates", up, x, "x", 0)))
        return st;
    if (up->shape[0] != ix->shape[0])
        return kit_bad(c, "updates has %lld rows but the index has %lld "
                       "entries", (long long)up->shape[0],
                       (long long)ix->shape[0]);
    return kit_out_like(c, 0, x, x->dtype);
}

keel_status kit_rule_take_along_axis(const struct kit_ctx *c)
{
    const keel_tensor_desc *x, *ix;
    int axis;
    keel_status st;

    if ((st = kit_arity(c, 2, 1)))
        return st;
    x = KIN(c, 0);
    ix = KIN(c, 1);
    if ((st = kit_key_dtype(c, x->dtype)) || (st = index_dtype(c, 1)) ||
        (st = get_axis(c, 0, x->ndim, &axis)))
        return st;
    /* Both arrive with the output's shape, x keeping its size along axis
     * (broadcast dims have stride 0). */
    if ((st = dims_match(c, "the index", ix, x, "x", axis)))
        return st;
    return kit_out_like(c, 0, ix, x->dtype);
}

/* ---- tile and pad ------------------------------------------------------------------ */

keel_status kit_rule_tile(const struct kit_ctx *c)
{
    int64_t nr, shape[KEEL_MAX_DIMS], xs[KEEL_MAX_DIMS], xst[KEEL_MAX_DIMS];
    const keel_tensor_desc *x;
    int on;
    keel_status st;

    if ((st = unary(c, &x)))
        return st;
    keel_kit_attr_ints(c->a, "repeat_times", &nr);
    if (nr > KEEL_MAX_DIMS)
        return kit_bad(c, "repeat_times has %lld entries, at most %d",
                       (long long)nr, KEEL_MAX_DIMS);
    on = (int)nr > x->ndim ? (int)nr : x->ndim;
    keel_kit_align_right(x, on, xs, xst);
    for (int d = 0; d < on; d++) {
        int64_t r = keel_kit_tile_repeat(c->a, on, d);
        if (r < 0)
            return kit_bad(c, "repeat_times[%lld] = %lld is negative",
                           (long long)(d - (on - nr)), (long long)r);
        if (__builtin_mul_overflow(r, xs[d], &shape[d]))
            return kit_bad(c, "repeat %lld times dim %d (%lld) does not fit "
                           "in int64", (long long)r, d, (long long)xs[d]);
    }
    return kit_out_is(c, 0, x->dtype, on, shape);
}

keel_status kit_rule_pad(const struct kit_ctx *c)
{
    int64_t np, shape[KEEL_MAX_DIMS], bf[KEEL_MAX_DIMS], af[KEEL_MAX_DIMS];
    const keel_tensor_desc *x;
    int mode;
    keel_status st;

    if ((st = unary(c, &x)))
        return st;
    mode = keel_kit_pad_mode(c->a);
    if (mode < 0)
        return kit_bad(c, "mode '%s' is not one of constant, reflect, "
                       "replicate", keel_kit_attr_s(c->a, "mode", ""));
    keel_kit_attr_ints(c->a, "pad", &np);
    if (np % 2 || np > 2 * (int64_t)x->ndim)
        return kit_bad(c, "pad has %lld entries: need (before, after) pairs "
                       "for at most %d dims", (long long)np, (int)x->ndim);
    keel_kit_pad_widths(c->a, x->ndim, bf, af);
    for (int d = 0; d < x->ndim; d++) {
        int64_t len = x->shape[d];
        for (int e = 0; e < 2; e++) {
            int64_t p = e ? af[d] : bf[d];
            if (p < 0)
                return kit_bad(c, "pad[%d] = %lld is negative", 2 * d + e,
                               (long long)p);
            if (mode == KEEL_KIT_PAD_REFLECT && p > 0 && p >= len)
                return kit_bad(c, "reflect pad[%d] = %lld must be less than "
                               "the size %lld of dim %d", 2 * d + e,
                               (long long)p, (long long)len, d);
            if (mode == KEEL_KIT_PAD_REPLICATE && p > 0 && len == 0)
                return kit_bad(c, "replicate pad of the empty dim %d", d);
        }
        if (__builtin_add_overflow(len, bf[d], &shape[d]) ||
            __builtin_add_overflow(shape[d], af[d], &shape[d]))
            return kit_bad(c, "the padded dim %d does not fit in int64", d);
    }
    return kit_out_is(c, 0, x->dtype, x->ndim, shape);
}
