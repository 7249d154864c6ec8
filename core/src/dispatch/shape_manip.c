/*
 * Shape rules of the shape and indexing ops: concat, stack, split, gather
 * (gather and index_select), scatter, take_along_axis, tile, pad, topk,
 * sort and argsort. flip uses the 'same' rule of shape_elementwise.c.
 *
 * Every rule validates what can be validated without reading tensor data
 * (ranks, sizes, axes, attribute values) and leaves index *values* to the
 * kernel's check (out-of-range and negative indices are reported there,
 * naming the offending position).
 *
 * Rules that take several data inputs (concat, stack, scatter) need them
 * all of one dtype, as Paddle does ("the data_type of input tensor in list
 * isn't consistent"): a mix is an error asking for a cast.
 * Rules for broadcasting ops (take_along_axis) and for 0-d indices
 * (gather, scatter) rewrite the input descriptors so that kernels always
 * see the canonical form:
 *
 *   take_along_axis  x and index both re-expressed with the output's shape
 *                    (x keeps its own size along `axis`; broadcast dims
 *                    get stride 0)
 *   gather           a 0-d index becomes a 1-element 1-D index; the output
 *                    drops the axis (the kernel re-inserts it as size 1)
 *   scatter          a 0-d index becomes [1] and updates gets a leading
 *                    dimension of 1
 */
#include <string.h>

#include "dispatch/dispatch_internal.h"

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

static keel_status need_inputs(struct keel_op_call *c, int n)
{
    if (c->nin != n)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "takes %d input%s, got %d", n,
                              n == 1 ? "" : "s", c->nin);
    return KEEL_STATUS_OK;
}

/* Normalise attribute `axis` for `ndim` dims into *out, or fail. */
static keel_status get_axis(struct keel_op_call *c, int ndim, int *out)
{
    int64_t axis = keel__attr_i(c, "axis");
    int a = keel__axis(axis, ndim);

    if (a < 0)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "axis %lld is out of range for %d dims "
                              "(valid: [%d, %d])",
                              (long long)axis, ndim, -ndim, ndim - 1);
    *out = a;
    return KEEL_STATUS_OK;
}

/* Inputs [first, first+n) must share one dtype; returns it. */
static keel_status promote(struct keel_op_call *c, int first, int n,
                           keel_dtype *out)
{
    keel_dtype dt = c->in[first]->dtype;

    for (int i = first + 1; i < first + n; i++)
        if (c->in[i]->dtype != dt)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "input %d is %s but input %d is %s: the "
                                  "inputs must share one dtype (as in "
                                  "Paddle); cast first",
                                  i, keel_dtype_name(c->in[i]->dtype), first,
                                  keel_dtype_name(dt));
    *out = dt;
    return KEEL_STATUS_OK;
}

static keel_status need_index_dtype(struct keel_op_call *c, int i)
{
    keel_dtype dt = c->in[i]->dtype;

    if (dt != KEEL_I32 && dt != KEEL_I64)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "the index (input %d) must be int32 or int64, "
                              "got %s",
                              i, keel_dtype_name(dt));
    return KEEL_STATUS_OK;
}

/* ---- concat and stack ---------------------------------------------------- */

/* Every input has the rank and shape of input 0, except along `skip`
 * (-1: no exception). */
static keel_status same_shapes(struct keel_op_call *c, int skip)
{
    const keel_tensor *x0 = c->in[0];

    for (int i = 1; i < c->nin; i++) {
        const keel_tensor *x = c->in[i];
        if (x->ndim != x0->ndim)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "input %d has %d dims, input 0 has %d", i,
                                  x->ndim, x0->ndim);
        for (int d = 0; d < x->ndim; d++)
            if (d != skip && x->shape[d] != x0->shape[d])
                return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                      "input %d has size %lld in dim %d, "
                                      "input 0 has %lld",
                                      i, (long long)x->shape[d], d,
                                      (long long)x0->shape[d]);
    }
    return KEEL_STATUS_OK;
}

keel_status keel__shape_concat(struct keel_op_call *c)
{
    int64_t shape[KEEL_MAX_DIMS];
    keel_dtype dt;
    int axis, nd;
    keel_status st;

    if (c->nin < 1)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "needs at least one input");
    nd = c->in[0]->ndim;
    if (nd == 0)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "cannot concatenate 0-d tensors (use stack)");
    if ((st = get_axis(c, nd, &axis)) || (st = same_shapes(c, axis)))
        return st;
    memcpy(shape, c->in[0]->shape, sizeof(int64_t) * (size_t)nd);
    shape[axis] = 0;
    for (int i = 0; i < c->nin; i++)
        if (__builtin_add_overflow(shape[axis], c->in[i]->shape[axis],
                                   &shape[axis]))
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "the sizes along axis %d add up past "
                                  "int64",
                                  axis);
    if ((st = promote(c, 0, c->nin, &dt)))
        return st;
    c->key_dtype = dt;
    set_out(c, 0, dt, nd, shape);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_stack(struct keel_op_call *c)
{
    int64_t shape[KEEL_MAX_DIMS];
    keel_dtype dt;
    int axis, nd;
    keel_status st;

    if (c->nin < 1)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "needs at least one input");
    nd = c->in[0]->ndim;
    if (nd + 1 > KEEL_MAX_DIMS)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "stacking %d-d inputs gives more than %d dims",
                              nd, KEEL_MAX_DIMS);
    if ((st = get_axis(c, nd + 1, &axis)) || (st = same_shapes(c, -1)))
        return st;
    for (int d = 0, s = 0; d < nd + 1; d++)
        shape[d] = d == axis ? c->nin : c->in[0]->shape[s++];
    if ((st = promote(c, 0, c->nin, &dt)))
        return st;
    c->key_dtype = dt;
    set_out(c, 0, dt, nd + 1, shape);
    return KEEL_STATUS_OK;
}

/* ---- split --------------------------------------------------------------- */

keel_status keel__shape_split(struct keel_op_call *c)
{
    const keel_attr *sec = keel__attr(c, "sections");
    int64_t shape[KEEL_MAX_DIMS], sum = 0, len;
    int axis, infer = -1, nd;
    keel_status st;

    if ((st = need_inputs(c, 1)))
        return st;
    nd = c->in[0]->ndim;
    if ((st = get_axis(c, nd, &axis)))
        return st;
    if (sec->v.ints.count < 1 || sec->v.ints.count > KEEL_MAX_OP_OUTPUTS)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "sections has %lld entries, need 1 to %d",
                              (long long)sec->v.ints.count,
                              KEEL_MAX_OP_OUTPUTS);
    for (int i = 0; i < (int)sec->v.ints.count; i++) {
        int64_t s = sec->v.ints.data[i];
        if (s == -1 && infer < 0) {
            infer = i;
            continue;
        }
        if (s < 0)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "sections[%d] = %lld: sizes must be >= 0, "
                                  "with at most one -1",
                                  i, (long long)s);
        if (__builtin_add_overflow(sum, s, &sum))
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "sections add up past int64 at "
                                  "sections[%d] = %lld",
                                  i, (long long)s);
    }
    len = c->in[0]->shape[axis];
    if ((infer < 0 && sum != len) || (infer >= 0 && sum > len))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "sections add up to %lld%s but axis %d has "
                              "size %lld",
                              (long long)sum,
                              infer >= 0 ? " (before the -1)" : "", axis,
                              (long long)len);
    memcpy(shape, c->in[0]->shape, sizeof(int64_t) * (size_t)nd);
    for (int i = 0; i < (int)sec->v.ints.count; i++) {
        shape[axis] = i == infer ? len - sum : sec->v.ints.data[i];
        set_out(c, i, c->in[0]->dtype, nd, shape);
    }
    c->key_dtype = c->in[0]->dtype;
    return KEEL_STATUS_OK;
}

/* ---- gather / index_select ----------------------------------------------- */

/* 1-D view [1] (stride 0) of a 0-d descriptor. */
static void desc_as_1d(keel_tensor_desc *d)
{
    d->ndim = 1;
    d->shape[0] = 1;
    d->strides[0] = 0;
}

keel_status keel__shape_gather(struct keel_op_call *c)
{
    int64_t shape[KEEL_MAX_DIMS];
    const keel_tensor *x, *idx;
    int axis, nd, o = 0;
    keel_status st;

    if ((st = need_inputs(c, 2)) || (st = need_index_dtype(c, 1)))
        return st;
    x = c->in[0];
    idx = c->in[1];
    nd = x->ndim;
    if ((st = get_axis(c, nd, &axis)))
        return st;
    /* index_select takes a 1-D index; gather also a 0-d one (as Paddle),
     * which drops the axis from the output. */
    if (idx->ndim != 1 && !(idx->ndim == 0 && c->op == KEEL_OP_GATHER))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "the index must be 1-D%s, got %d dims",
                              c->op == KEEL_OP_GATHER ? " or 0-d" : "",
                              idx->ndim);
    for (int d = 0; d < nd; d++) {
        if (d != axis)
            shape[o++] = x->shape[d];
        else if (idx->ndim == 1)
            shape[o++] = idx->shape[0];
    }
    if (idx->ndim == 0)
        desc_as_1d(&c->in_desc[1]);
    c->key_dtype = x->dtype;
    set_out(c, 0, x->dtype, o, shape);
    return KEEL_STATUS_OK;
}

/* ---- scatter ------------------------------------------------------------- */

keel_status keel__shape_scatter(struct keel_op_call *c)
{
    const keel_tensor *x, *idx, *up;
    int64_t n;
    keel_dtype dt;
    keel_status st;

    if ((st = need_inputs(c, 3)) || (st = need_index_dtype(c, 1)))
        return st;
    x = c->in[0];
    idx = c->in[1];
    up = c->in[2];
    if (x->ndim < 1)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "x must have at least 1 dim");
    if (idx->ndim > 1)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "the index must be 1-D or 0-d, got %d dims",
                              idx->ndim);
    /* updates: [n, x.shape[1:]...], or x.shape[1:] for a 0-d index. */
    n = idx->ndim ? idx->shape[0] : 1;
    if (up->ndim != x->ndim - (idx->ndim ? 0 : 1))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "updates has %d dims, expected %d", up->ndim,
                              x->ndim - (idx->ndim ? 0 : 1));
    if (idx->ndim && up->shape[0] != n)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "updates has %lld rows but the index has %lld "
                              "entries",
                              (long long)up->shape[0], (long long)n);
    for (int d = 1; d < x->ndim; d++) {
        int64_t u = up->shape[d - (idx->ndim ? 0 : 1)];
        if (u != x->shape[d])
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "updates has size %lld in dim %d, x has "
                                  "%lld",
                                  (long long)u, d, (long long)x->shape[d]);
    }
    if (up->dtype != x->dtype)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "updates is %s but x is %s: they must share "
                              "one dtype (as in Paddle); cast first",
                              keel_dtype_name(up->dtype),
                              keel_dtype_name(x->dtype));
    dt = x->dtype;
    if (c->in[1]->ndim == 0) {
        keel_tensor_desc *u = &c->in_desc[2];
        desc_as_1d(&c->in_desc[1]);
        for (int d = u->ndim; d > 0; d--) {
            u->shape[d] = u->shape[d - 1];
            u->strides[d] = u->strides[d - 1];
        }
        u->shape[0] = 1;
        u->strides[0] = 0;
        u->ndim++;
    }
    c->key_dtype = dt;
    set_out(c, 0, dt, c->in[0]->ndim, c->in[0]->shape);
    return KEEL_STATUS_OK;
}

/* ---- take_along_axis ----------------------------------------------------- */

keel_status keel__shape_take_along_axis(struct keel_op_call *c)
{
    int64_t shape[KEEL_MAX_DIMS];
    const keel_tensor *x, *idx;
    keel_tensor_desc *xd, *id;
    int axis, nd;
    keel_status st;

    if ((st = need_inputs(c, 2)) || (st = need_index_dtype(c, 1)))
        return st;
    x = c->in[0];
    idx = c->in[1];
    nd = x->ndim;
    if ((st = get_axis(c, nd, &axis)))
        return st;
    if (idx->ndim != nd)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "the index must have the rank of x (%d), got "
                              "%d",
                              nd, idx->ndim);
    /* Paddle's broadcast: the non-axis dims of x and index broadcast
     * against each other; the output has the index's size along axis. */
    for (int d = 0; d < nd; d++) {
        int64_t a = x->shape[d], b = idx->shape[d];
        if (d == axis)
            shape[d] = b;
        else if (a == b || b == 1)
            shape[d] = a;
        else if (a == 1)
            shape[d] = b;
        else
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "dim %d: x has %lld and the index %lld, "
                                  "which do not broadcast",
                                  d, (long long)a, (long long)b);
    }
    xd = &c->in_desc[0];
    id = &c->in_desc[1];
    for (int d = 0; d < nd; d++) {
        if (d != axis) {
            if (x->shape[d] != shape[d])
                xd->strides[d] = 0;
            xd->shape[d] = shape[d];
        }
        if (idx->shape[d] != shape[d])
            id->strides[d] = 0;
        id->shape[d] = shape[d];
    }
    c->key_dtype = x->dtype;
    set_out(c, 0, x->dtype, nd, shape);
    return KEEL_STATUS_OK;
}

/* ---- tile ---------------------------------------------------------------- */

keel_status keel__shape_tile(struct keel_op_call *c)
{
    const keel_attr *rep = keel__attr(c, "repeat_times");
    int64_t shape[KEEL_MAX_DIMS];
    const keel_tensor *x;
    int nr, nd, on;
    keel_status st;

    if ((st = need_inputs(c, 1)))
        return st;
    x = c->in[0];
    nd = x->ndim;
    if (rep->v.ints.count > KEEL_MAX_DIMS)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "repeat_times has %lld entries, at most %d",
                              (long long)rep->v.ints.count, KEEL_MAX_DIMS);
    nr = (int)rep->v.ints.count;
    on = nr > nd ? nr : nd;
    /* Align right: missing repeats are 1, missing x dims are 1. */
    for (int d = 0; d < on; d++) {
        int ri = d - (on - nr), xi = d - (on - nd);
        int64_t r = ri >= 0 ? rep->v.ints.data[ri] : 1;
        int64_t s = xi >= 0 ? x->shape[xi] : 1;
        if (r < 0)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "repeat_times[%d] = %lld is negative", ri,
                                  (long long)r);
        if (__builtin_mul_overflow(r, s, &shape[d]))
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "repeat_times[%d] = %lld times dim %d (%lld) "
                                  "does not fit in int64",
                                  ri, (long long)r, d, (long long)s);
    }
    c->key_dtype = x->dtype;
    set_out(c, 0, x->dtype, on, shape);
    return KEEL_STATUS_OK;
}

/* ---- pad ----------------------------------------------------------------- */

keel_status keel__shape_pad(struct keel_op_call *c)
{
    const keel_attr *pad = keel__attr(c, "pad");
    const char *mode = keel__attr_s(c, "mode");
    int64_t shape[KEEL_MAX_DIMS];
    const keel_tensor *x;
    bool reflect, replicate;
    int nd;
    keel_status st;

    if ((st = need_inputs(c, 1)))
        return st;
    x = c->in[0];
    nd = x->ndim;
    reflect = !strcmp(mode, "reflect");
    replicate = !strcmp(mode, "replicate");
    if (!reflect && !replicate && strcmp(mode, "constant"))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "mode '%s' is not one of constant, reflect, "
                              "replicate",
                              mode);
    if (pad->v.ints.count % 2 || pad->v.ints.count > 2 * (int64_t)nd)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "pad has %lld entries: need (before, after) "
                              "pairs for at most %d dims",
                              (long long)pad->v.ints.count, nd);
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)nd);
    for (int i = 0; i < (int)pad->v.ints.count; i++) {
        int64_t p = pad->v.ints.data[i], len = x->shape[i / 2];
        if (p < 0)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "pad[%d] = %lld is negative", i,
                                  (long long)p);
        if (reflect && p > 0 && p >= len)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "reflect pad[%d] = %lld must be less than "
                                  "the size %lld of dim %d",
                                  i, (long long)p, (long long)len, i / 2);
        if (replicate && p > 0 && len == 0)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "replicate pad of the empty dim %d", i / 2);
        if (__builtin_add_overflow(shape[i / 2], p, &shape[i / 2]))
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "pad[%d] = %lld on dim %d (%lld) does not "
                                  "fit in int64",
                                  i, (long long)p, i / 2, (long long)len);
    }
    c->key_dtype = x->dtype;
    set_out(c, 0, x->dtype, nd, shape);
    return KEEL_STATUS_OK;
}

/* ---- topk, sort, argsort ------------------------------------------------- */

/* Axis of a sort-like op; a 0-d input sorts its one element (axis -1 or
 * 0). *len receives the length along the axis. */
static keel_status sort_axis(struct keel_op_call *c, int *axis, int64_t *len)
{
    const keel_tensor *x = c->in[0];
    int64_t a = keel__attr_i(c, "axis");
    keel_status st;

    if (x->ndim == 0) {
        if (a != 0 && a != -1)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "axis %lld is out of range for a 0-d "
                                  "tensor (valid: -1, 0)",
                                  (long long)a);
        *axis = 0;
        *len = 1;
        return KEEL_STATUS_OK;
    }
    if ((st = get_axis(c, x->ndim, axis)))
        return st;
    *len = x->shape[*axis];
    return KEEL_STATUS_OK;
}

keel_status keel__shape_topk(struct keel_op_call *c)
{
    int64_t shape[KEEL_MAX_DIMS], k = keel__attr_i(c, "k"), len;
    const keel_tensor *x;
    int axis;
    keel_status st;

    if ((st = need_inputs(c, 1)) || (st = sort_axis(c, &axis, &len)))
        return st;
    x = c->in[0];
    if (k < 0 || k > len || (x->ndim == 0 && k != 1))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "k = %lld is out of range: need %s%lld "
                              "(the size along axis %d)",
                              (long long)k, x->ndim ? "0 <= k <= " : "k = ",
                              (long long)len, axis);
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    if (x->ndim)
        shape[axis] = k;
    c->key_dtype = x->dtype;
    set_out(c, 0, x->dtype, x->ndim, shape);
    set_out(c, 1, KEEL_I64, x->ndim, shape);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_sort(struct keel_op_call *c)
{
    const keel_tensor *x;
    int64_t len;
    int axis;
    keel_status st;

    if ((st = need_inputs(c, 1)) || (st = sort_axis(c, &axis, &len)))
        return st;
    x = c->in[0];
    c->key_dtype = x->dtype;
    set_out(c, 0, x->dtype, x->ndim, x->shape);
    set_out(c, 1, KEEL_I64, x->ndim, x->shape);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_argsort(struct keel_op_call *c)
{
    const keel_tensor *x;
    int64_t len;
    int axis;
    keel_status st;

    if ((st = need_inputs(c, 1)) || (st = sort_axis(c, &axis, &len)))
        return st;
    x = c->in[0];
    c->key_dtype = x->dtype;
    set_out(c, 0, KEEL_I64, x->ndim, x->shape);
    return KEEL_STATUS_OK;
}
