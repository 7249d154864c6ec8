/*
 * Shape rules of the reductions, cumsum and the softmax family.
 *
 *   reduce          sum mean max min prod var std logsumexp
 *   reduce_arg      argmax argmin (int64; axis empty: the flattened tensor)
 *   reduce_bool     all any (bool)
 *   cumsum          cumsum (axis empty: flattened to 1-D)
 *   same_axis       softmax log_softmax
 *   same_axis_grad  softmax_grad log_softmax_grad (inputs out, dout)
 *
 * Axes may be negative. A 0-d tensor accepts axis 0 and -1, as Paddle
 * does. Repeated or out-of-range axes are INVALID_ARGUMENT, and so is a
 * reduction without an identity (max, min, argmax, argmin) over an empty
 * axis that still has outputs to fill. The input descriptors are passed to
 * the kernel unchanged; kernels read the axes from the same attributes.
 *
 * Output dtypes follow Paddle: sum and cumsum of bool and integers give
 * int64, arg reductions int64, all/any bool, everything else keeps the
 * input dtype.
 */
#include <string.h>

#include "dispatch/dispatch_internal.h"

static void put_out(struct keel_op_call *c, keel_dtype dt, int ndim,
                    const int64_t *shape)
{
    c->nout = 1;
    c->out_dtype[0] = dt;
    c->out_ndim[0] = ndim;
    if (ndim > 0)
        memcpy(c->out_shape[0], shape, sizeof(int64_t) * (size_t)ndim);
}

static keel_status need_inputs(struct keel_op_call *c, int n)
{
    if (c->nin != n)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "takes %d input%s, got %d", n,
                              n == 1 ? "" : "s", c->nin);
    return KEEL_STATUS_OK;
}

static bool is_float_dtype(keel_dtype dt)
{
    return dt == KEEL_F32 || dt == KEEL_F64 || dt == KEEL_F16 ||
           dt == KEEL_BF16;
}

/* Normalise one axis of an `ndim`-d tensor (0-d: 0 and -1 are valid). */
static keel_status one_axis(struct keel_op_call *c, int64_t v, int ndim,
                            int *axis)
{
    int lim = ndim ? ndim : 1;

    if (v < -lim || v >= lim)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "axis %lld is out of range for a %d-d tensor "
                              "(valid: %d to %d)",
                              (long long)v, ndim, -lim, lim - 1);
    *axis = (int)(v < 0 ? v + lim : v);
    return KEEL_STATUS_OK;
}

/* The "axis" ints attribute as a bit mask of reduced dims (empty: all).
 * *naxes receives how many axes were given. */
static keel_status axes_mask(struct keel_op_call *c, uint32_t *mask,
                             int *naxes)
{
    const keel_attr *a = keel__attr(c, "axis");
    int ndim = c->in[0]->ndim;
    uint32_t seen = 0;
    keel_status st;

    *naxes = (int)a->v.ints.count;
    for (int64_t i = 0; i < a->v.ints.count; i++) {
        int d = 0;
        if ((st = one_axis(c, a->v.ints.data[i], ndim, &d)))
            return st;
        if (seen & (1u << d))
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "axis %lld is repeated",
                                  (long long)a->v.ints.data[i]);
        seen |= 1u << d;
    }
    if (a->v.ints.count == 0)
        seen = (1u << ndim) - 1;
    *mask = ndim ? seen : 0;
    return KEEL_STATUS_OK;
}

/* Output shape of reducing x over `mask`; element counts on the side. */
static void reduced_shape(const keel_tensor *x, uint32_t mask, bool keepdim,
                          int *ndim, int64_t *shape, int64_t *nout,
                          int64_t *nred)
{
    int nd = 0;

    *nout = 1;
    *nred = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (mask & (1u << d)) {
            *nred *= x->shape[d];
            if (keepdim)
                shape[nd++] = 1;
        } else {
            *nout *= x->shape[d];
            shape[nd++] = x->shape[d];
        }
    }
    *ndim = nd;
}

static keel_status no_identity(struct keel_op_call *c, int64_t nout,
                               int64_t nred)
{
    if (nred == 0 && nout > 0)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "cannot reduce over an empty axis: %s has no "
                              "identity value",
                              c->def->info->name);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_reduce(struct keel_op_call *c)
{
    int64_t shape[KEEL_MAX_DIMS], nout, nred;
    uint32_t mask;
    int ndim, naxes;
    keel_dtype dt;
    keel_status st;

    if ((st = need_inputs(c, 1)) || (st = axes_mask(c, &mask, &naxes)))
        return st;
    reduced_shape(c->in[0], mask, keel__attr_i(c, "keepdim") != 0, &ndim,
                  shape, &nout, &nred);
    if ((c->op == KEEL_OP_MAX || c->op == KEEL_OP_MIN) &&
        (st = no_identity(c, nout, nred)))
        return st;
    dt = c->in[0]->dtype;
    if (c->op == KEEL_OP_SUM && !is_float_dtype(dt))
        dt = KEEL_I64;
    c->key_dtype = c->in[0]->dtype;
    put_out(c, dt, ndim, shape);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_reduce_arg(struct keel_op_call *c)
{
    int64_t shape[KEEL_MAX_DIMS], nout, nred;
    bool keepdim = keel__attr_i(c, "keepdim") != 0;
    uint32_t mask;
    int ndim, naxes;
    keel_status st;

    if ((st = need_inputs(c, 1)) || (st = axes_mask(c, &mask, &naxes)))
        return st;
    if (naxes > 1)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "takes one axis (or none: the flattened "
                              "tensor), got %d",
                              naxes);
    reduced_shape(c->in[0], mask, keepdim, &ndim, shape, &nout, &nred);
    if ((st = no_identity(c, nout, nred)))
        return st;
    c->key_dtype = c->in[0]->dtype;
    put_out(c, KEEL_I64, ndim, shape);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_reduce_bool(struct keel_op_call *c)
{
    int64_t shape[KEEL_MAX_DIMS], nout, nred;
    uint32_t mask;
    int ndim, naxes;
    keel_status st;

    if ((st = need_inputs(c, 1)) || (st = axes_mask(c, &mask, &naxes)))
        return st;
    reduced_shape(c->in[0], mask, keel__attr_i(c, "keepdim") != 0, &ndim,
                  shape, &nout, &nred);
    c->key_dtype = c->in[0]->dtype;
    put_out(c, KEEL_BOOL, ndim, shape);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_cumsum(struct keel_op_call *c)
{
    const keel_tensor *x;
    keel_dtype dt;
    uint32_t mask;
    int naxes;
    keel_status st;

    if ((st = need_inputs(c, 1)) || (st = axes_mask(c, &mask, &naxes)))
        return st;
    x = c->in[0];
    if (naxes > 1)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "takes one axis (or none: the flattened "
                              "tensor), got %d",
                              naxes);
    dt = is_float_dtype(x->dtype) ? x->dtype : KEEL_I64;
    c->key_dtype = x->dtype;
    if (naxes == 0) {
        int64_t n = keel__numel(x->ndim, x->shape);
        put_out(c, dt, 1, &n);
    } else {
        put_out(c, dt, x->ndim, x->shape);
    }
    return KEEL_STATUS_OK;
}

keel_status keel__shape_same_axis(struct keel_op_call *c)
{
    keel_status st;
    int axis;

    if ((st = need_inputs(c, 1)) ||
        (st = one_axis(c, keel__attr_i(c, "axis"), c->in[0]->ndim, &axis)))
        return st;
    c->key_dtype = c->in[0]->dtype;
    put_out(c, c->in[0]->dtype, c->in[0]->ndim, c->in[0]->shape);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_same_axis_grad(struct keel_op_call *c)
{
    const keel_tensor *y, *dy;
    keel_dtype dt;
    keel_status st;
    int axis;

    if ((st = need_inputs(c, 2)))
        return st;
    y = c->in[0];
    dy = c->in[1];
    if (y->ndim != dy->ndim ||
        memcmp(y->shape, dy->shape, sizeof(int64_t) * (size_t)y->ndim))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "out and dout must have the same shape");
    if ((st = one_axis(c, keel__attr_i(c, "axis"), y->ndim, &axis)))
        return st;
    dt = keel_dtype_promote(y->dtype, dy->dtype);
    if ((st = keel__cast_input(c, 0, dt)) || (st = keel__cast_input(c, 1, dt)))
        return st;
    c->key_dtype = dt;
    put_out(c, dt, c->in[0]->ndim, c->in[0]->shape);
    return KEEL_STATUS_OK;
}
