/*
 * Shape rules of elementwise and creation ops.
 *
 * Broadcasting is done here, once, for every elementwise op: each input
 * descriptor is re-expressed with the output's rank and shape, with stride
 * 0 along broadcast dimensions, so kernels only ever see same-shaped
 * operands.
 */
#include <math.h>
#include <string.h>

#include "dispatch/dispatch_internal.h"

/* Output shape of broadcasting inputs [first, first+n). */
static keel_status broadcast_shape(struct keel_op_call *c, int first, int n,
                                   int *ndim, int64_t *shape)
{
    int nd = 0;

    for (int i = first; i < first + n; i++)
        if (c->in[i]->ndim > nd)
            nd = c->in[i]->ndim;
    for (int d = 0; d < nd; d++)
        shape[d] = 1;
    for (int i = first; i < first + n; i++) {
        const keel_tensor *t = c->in[i];
        for (int j = 0; j < t->ndim; j++) {
            int d = nd - t->ndim + j;
            if (t->shape[j] == shape[d] || t->shape[j] == 1)
                continue;
            if (shape[d] == 1) {
                shape[d] = t->shape[j];
                continue;
            }
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "shapes cannot be broadcast together: dim "
                                  "%d is %lld in input %d but %lld before",
                                  d, (long long)t->shape[j], i,
                                  (long long)shape[d]);
        }
    }
    *ndim = nd;
    return KEEL_STATUS_OK;
}

/* Re-express input i's descriptor with the output geometry. */
static void expand_desc(struct keel_op_call *c, int i, int ndim,
                        const int64_t *shape)
{
    keel_tensor_desc *d = &c->in_desc[i];
    const keel_tensor *t = c->in[i];

    keel__desc(t, d);
    d->ndim = ndim;
    for (int k = 0; k < ndim; k++) {
        int j = k - (ndim - t->ndim);
        d->shape[k] = shape[k];
        d->strides[k] = (j < 0 || t->shape[j] == 1) ? 0 : t->strides[j];
    }
}

static void set_out(struct keel_op_call *c, int k, keel_dtype dt, int ndim,
                    const int64_t *shape)
{
    c->out_dtype[k] = dt;
    c->out_ndim[k] = ndim;
    if (ndim > 0) /* a 0-d shape may be NULL */
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

static bool is_float_dtype(keel_dtype d)
{
    return d == KEEL_F32 || d == KEEL_F64 || d == KEEL_F16 || d == KEEL_BF16;
}

/*
 * Promote inputs [first, first+n) to a common dtype; returns it. As in
 * Paddle 3.x, only floating dtypes promote (to the wider; float16 with
 * bfloat16 gives float32); any other mix is an error asking for a cast.
 */
static keel_status promote(struct keel_op_call *c, int first, int n,
                           keel_dtype *out)
{
    keel_dtype dt = c->in[first]->dtype;
    keel_status st;

    for (int i = first + 1; i < first + n; i++) {
        keel_dtype o = c->in[i]->dtype;
        if (o == dt)
            continue;
        if (!is_float_dtype(o) || !is_float_dtype(dt))
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "operands of different dtypes (%s and %s): "
                                  "only floating dtypes promote (as in "
                                  "Paddle); cast one operand first",
                                  keel_dtype_name(dt), keel_dtype_name(o));
        dt = keel_dtype_promote(dt, o);
    }
    for (int i = first; i < first + n; i++)
        if ((st = keel__cast_input(c, i, dt)))
            return st;
    *out = dt;
    return KEEL_STATUS_OK;
}

static keel_status binary(struct keel_op_call *c, bool bool_out)
{
    int64_t shape[KEEL_MAX_DIMS];
    keel_dtype dt;
    int ndim;
    keel_status st;

    if ((st = need_inputs(c, 2)) || (st = promote(c, 0, 2, &dt)) ||
        (st = broadcast_shape(c, 0, 2, &ndim, shape)))
        return st;
    /* Paddle: dividing integers is true division, in float32. */
    if (c->op == KEEL_OP_DIVIDE && !is_float_dtype(dt) && dt != KEEL_BOOL) {
        if ((st = keel__cast_input(c, 0, KEEL_F32)) ||
            (st = keel__cast_input(c, 1, KEEL_F32)))
            return st;
        dt = KEEL_F32;
    }
    expand_desc(c, 0, ndim, shape);
    expand_desc(c, 1, ndim, shape);
    c->key_dtype = dt;
    set_out(c, 0, bool_out ? KEEL_BOOL : dt, ndim, shape);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_broadcast(struct keel_op_call *c)
{
    keel_status st = binary(c, false);

    if (st == KEEL_STATUS_OK && c->key_dtype == KEEL_BOOL)
        return keel__op_error(c, KEEL_STATUS_NOT_SUPPORTED,
                              "arithmetic on bool tensors is not defined; "
                              "cast to an integer or float dtype first");
    return st;
}

keel_status keel__shape_compare(struct keel_op_call *c)
{
    return binary(c, true);
}

keel_status keel__shape_logical(struct keel_op_call *c)
{
    return binary(c, true);
}

keel_status keel__shape_logical_unary(struct keel_op_call *c)
{
    keel_status st = need_inputs(c, 1);

    if (st)
        return st;
    set_out(c, 0, KEEL_BOOL, c->in[0]->ndim, c->in[0]->shape);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_where(struct keel_op_call *c)
{
    int64_t shape[KEEL_MAX_DIMS];
    keel_dtype dt;
    int ndim;
    keel_status st;

    if ((st = need_inputs(c, 3)))
        return st;
    if (c->in[0]->dtype != KEEL_BOOL)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "the condition must be bool, got %s",
                              keel_dtype_name(c->in[0]->dtype));
    if ((st = promote(c, 1, 2, &dt)) ||
        (st = broadcast_shape(c, 0, 3, &ndim, shape)))
        return st;
    for (int i = 0; i < 3; i++)
        expand_desc(c, i, ndim, shape);
    /* The value dtype keys the kernel; the condition is always bool. */
    c->key_dtype = dt;
    set_out(c, 0, dt, ndim, shape);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_same(struct keel_op_call *c)
{
    keel_status st = need_inputs(c, 1);

    if (st)
        return st;
    if (c->op == KEEL_OP_FLIP) {
        const keel_attr *a = keel__attr(c, "axis");
        for (int64_t i = 0; i < a->v.ints.count; i++)
            if (keel__axis(a->v.ints.data[i], c->in[0]->ndim) < 0)
                return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                      "axis %lld out of range for %d dims",
                                      (long long)a->v.ints.data[i],
                                      c->in[0]->ndim);
    }
    if (c->op == KEEL_OP_CLIP &&
        (isnan(keel__attr_f(c, "min")) || isnan(keel__attr_f(c, "max"))))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "min and max must not be NaN");
    if (c->op == KEEL_OP_CLIP &&
        keel__attr_f(c, "min") > keel__attr_f(c, "max"))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "min %g is greater than max %g",
                              keel__attr_f(c, "min"), keel__attr_f(c, "max"));
    if (c->op == KEEL_OP_SOFTPLUS &&
        (keel__attr_f(c, "beta") == 0 || !isfinite(keel__attr_f(c, "beta")) ||
         isnan(keel__attr_f(c, "threshold"))))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "beta %g must be finite and non-zero, "
                              "threshold %g not NaN",
                              keel__attr_f(c, "beta"),
                              keel__attr_f(c, "threshold"));
    if (c->op == KEEL_OP_LEAKY_RELU &&
        !isfinite(keel__attr_f(c, "negative_slope")))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "negative_slope %g must be finite",
                              keel__attr_f(c, "negative_slope"));
    if (c->op == KEEL_OP_ELU && !isfinite(keel__attr_f(c, "alpha")))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "alpha %g must be finite",
                              keel__attr_f(c, "alpha"));
    c->key_dtype = c->in[0]->dtype;
    set_out(c, 0, c->in[0]->dtype, c->in[0]->ndim, c->in[0]->shape);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_cast(struct keel_op_call *c)
{
    keel_status st = need_inputs(c, 1);

    if (st)
        return st;
    c->key_dtype = c->in[0]->dtype;
    set_out(c, 0, (keel_dtype)keel__attr_i(c, "dtype"), c->in[0]->ndim,
            c->in[0]->shape);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_creation(struct keel_op_call *c)
{
    const keel_attr *shape = keel__attr(c, "shape");
    keel_dtype dt = (keel_dtype)keel__attr_i(c, "dtype");
    keel_status st = need_inputs(c, 0);

    if (st)
        return st;
    if (shape->v.ints.count > KEEL_MAX_DIMS)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "%lld dims, at most %d",
                              (long long)shape->v.ints.count, KEEL_MAX_DIMS);
    for (int64_t i = 0; i < shape->v.ints.count; i++)
        if (shape->v.ints.data[i] < 0)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "shape[%lld] = %lld is negative",
                                  (long long)i,
                                  (long long)shape->v.ints.data[i]);
    if ((c->op == KEEL_OP_EYE && shape->v.ints.count != 2) ||
        ((c->op == KEEL_OP_ARANGE || c->op == KEEL_OP_LINSPACE) &&
         shape->v.ints.count != 1))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "wrong rank %lld for this creation op",
                              (long long)shape->v.ints.count);
    if (c->op == KEEL_OP_RANDINT &&
        keel__attr_i(c, "high") <= keel__attr_i(c, "low"))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "randint needs low < high");
    if ((c->op == KEEL_OP_ARANGE &&
         (!isfinite(keel__attr_f(c, "start")) ||
          !isfinite(keel__attr_f(c, "step")))) ||
        (c->op == KEEL_OP_LINSPACE &&
         (!isfinite(keel__attr_f(c, "start")) ||
          !isfinite(keel__attr_f(c, "stop")))) ||
        (c->op == KEEL_OP_UNIFORM &&
         !(isfinite(keel__attr_f(c, "low")) &&
           isfinite(keel__attr_f(c, "high")) &&
           keel__attr_f(c, "low") <= keel__attr_f(c, "high"))) ||
        (c->op == KEEL_OP_NORMAL &&
         !(isfinite(keel__attr_f(c, "mean")) &&
           isfinite(keel__attr_f(c, "std")) && keel__attr_f(c, "std") >= 0)))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "range parameters must be finite (and low <= "
                              "high, std >= 0)");
    c->key_dtype = dt;
    set_out(c, 0, dt, (int)shape->v.ints.count, shape->v.ints.data);
    return KEEL_STATUS_OK;
}
