/*
 * Shape rules of the linear algebra ops: matmul and linear.
 *
 * matmul hands its kernel operands that are already "resolved": the
 * transpose attributes, numpy's 1-D promotion and the broadcasting of the
 * batch dimensions are all expressed in the input descriptors, so that a
 * kernel always sees
 *
 *     x  [B0, ..., Bk, M, K]     y  [B0, ..., Bk, K, N]
 *
 * with the same batch shape (stride 0 along broadcast batch dimensions),
 * and an output whose element count is B * M * N (contiguous; its rank
 * drops M and/or N where an operand was 1-D). A transposed operand is a
 * stride swap, so kernels must NOT apply transpose_x / transpose_y again.
 *
 * linear leaves its descriptors alone: x [..., in], weight [in, out],
 * bias [out] (optional) -> out [..., out]. fused_linear is linear's rule
 * after a check of its `activation` attribute (keel__check_activation,
 * which fused_conv2d shares).
 *
 * Both promote floating inputs to a common dtype (float16 with bfloat16
 * gives float32) and refuse non-floating inputs.
 */
#include <string.h>

#include "dispatch/dispatch_internal.h"

static bool is_float_dtype(keel_dtype dt)
{
    return dt == KEEL_F32 || dt == KEEL_F64 || dt == KEEL_F16 ||
           dt == KEEL_BF16;
}

/* Every input floating, then cast to their common dtype. */
static keel_status promote_floats(struct keel_op_call *c, keel_dtype *out)
{
    keel_dtype dt = c->in[0]->dtype;
    keel_status st;

    for (int i = 0; i < c->nin; i++) {
        if (!is_float_dtype(c->in[i]->dtype))
            return keel__op_error(c, KEEL_STATUS_NOT_SUPPORTED,
                                  "input %d is %s; this op is defined for "
                                  "floating-point dtypes only",
                                  i, keel_dtype_name(c->in[i]->dtype));
        dt = keel_dtype_promote(dt, c->in[i]->dtype);
    }
    for (int i = 0; i < c->nin; i++)
        if ((st = keel__cast_input(c, i, dt)))
            return st;
    *out = dt;
    return KEEL_STATUS_OK;
}

static void set_out(struct keel_op_call *c, keel_dtype dt, int ndim,
                    const int64_t *shape)
{
    c->nout = 1;
    c->out_dtype[0] = dt;
    c->out_ndim[0] = ndim;
    memcpy(c->out_shape[0], shape, sizeof(int64_t) * (size_t)ndim);
}

/* The matrix part of one matmul operand after 1-D promotion and the
 * transpose flag: rows x cols with element strides rs, cs. */
struct mm_operand {
    int64_t rows, cols, rs, cs;
    int nbatch; /* leading (batch) dims of the tensor */
};

static void mm_operand_of(const keel_tensor *t, bool transpose, bool is_x,
                          struct mm_operand *m)
{
    int nd = t->ndim;

    if (nd == 1) {
        /* x [K] is [1, K]; y [K] is [K, 1]. Transposing is a no-op. */
        if (is_x) {
            m->rows = 1;
            m->cols = t->shape[0];
            m->rs = 0;
            m->cs = t->strides[0];
        } else {
            m->rows = t->shape[0];
            m->cols = 1;
            m->rs = t->strides[0];
            m->cs = 0;
        }
        m->nbatch = 0;
        return;
    }
    m->rows = t->shape[nd - 2];
    m->cols = t->shape[nd - 1];
    m->rs = t->strides[nd - 2];
    m->cs = t->strides[nd - 1];
    if (transpose) {
        int64_t s = m->rows;
        m->rows = m->cols;
        m->cols = s;
        s = m->rs;
        m->rs = m->cs;
        m->cs = s;
    }
    m->nbatch = nd - 2;
}

/* Broadcast the batch dims of x and y into shape[nb]. */
static keel_status mm_batch(struct keel_op_call *c, const struct mm_operand *a,
                            const struct mm_operand *b, int *nb,
                            int64_t *shape)
{
    const keel_tensor *x = c->in[0], *y = c->in[1];
    int n = a->nbatch > b->nbatch ? a->nbatch : b->nbatch;

    for (int d = 0; d < n; d++) {
        int i = d - (n - a->nbatch), j = d - (n - b->nbatch);
        int64_t u = i >= 0 ? x->shape[i] : 1, v = j >= 0 ? y->shape[j] : 1;
        if (u != v && u != 1 && v != 1)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "batch dimensions cannot be broadcast: "
                                  "batch dim %d is %lld in x and %lld in y",
                                  d, (long long)u, (long long)v);
        shape[d] = u == 1 ? v : u;
    }
    *nb = n;
    return KEEL_STATUS_OK;
}

/* Rewrite input i's descriptor as [batch..., rows, cols]. */
static void mm_desc(struct keel_op_call *c, int i, const struct mm_operand *m,
                    int nb, const int64_t *bshape)
{
    const keel_tensor *t = c->in[i];
    keel_tensor_desc *d = &c->in_desc[i];

    keel__desc(t, d);
    for (int k = 0; k < nb; k++) {
        int j = k - (nb - m->nbatch);
        d->shape[k] = bshape[k];
        d->strides[k] = (j < 0 || t->shape[j] == 1) ? 0 : t->strides[j];
    }
    d->shape[nb] = m->rows;
    d->strides[nb] = m->rs;
    d->shape[nb + 1] = m->cols;
    d->strides[nb + 1] = m->cs;
    d->ndim = nb + 2;
}

keel_status keel__shape_matmul(struct keel_op_call *c)
{
    int64_t shape[KEEL_MAX_DIMS];
    struct mm_operand a, b;
    bool tx = keel__attr_i(c, "transpose_x") != 0;
    bool ty = keel__attr_i(c, "transpose_y") != 0;
    keel_dtype dt;
    keel_status st;
    int nb = 0, nd;

    if (c->nin != 2)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "takes 2 inputs (x, y), got %d", c->nin);
    if ((st = promote_floats(c, &dt)))
        return st;
    if (c->in[0]->ndim < 1 || c->in[1]->ndim < 1)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "operands must have at least 1 dimension "
                              "(0-d tensors cannot be multiplied as "
                              "matrices)");
    mm_operand_of(c->in[0], tx, true, &a);
    mm_operand_of(c->in[1], ty, false, &b);
    if (a.cols != b.rows)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "inner dimensions differ: x%s gives K = %lld, "
                              "y%s gives K = %lld",
                              tx ? " (transposed)" : "", (long long)a.cols,
                              ty ? " (transposed)" : "", (long long)b.rows);
    if ((st = mm_batch(c, &a, &b, &nb, shape)))
        return st;
    mm_desc(c, 0, &a, nb, shape);
    mm_desc(c, 1, &b, nb, shape);
    nd = nb;
    if (c->in[0]->ndim > 1)
        shape[nd++] = a.rows;
    if (c->in[1]->ndim > 1)
        shape[nd++] = b.cols;
    c->key_dtype = dt;
    set_out(c, dt, nd, shape);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_linear(struct keel_op_call *c)
{
    int64_t shape[KEEL_MAX_DIMS];
    const keel_tensor *x, *w;
    keel_dtype dt;
    keel_status st;

    if (c->nin != 2 && c->nin != 3)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "takes 2 or 3 inputs (x, weight[, bias]), got "
                              "%d",
                              c->nin);
    if ((st = promote_floats(c, &dt)))
        return st;
    x = c->in[0];
    w = c->in[1];
    if (x->ndim < 1)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "x must have at least 1 dimension");
    if (w->ndim != 2)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "weight must be 2-D [in, out], got %d dims",
                              w->ndim);
    if (x->shape[x->ndim - 1] != w->shape[0])
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "x has %lld input features but weight [in, "
                              "out] expects %lld",
                              (long long)x->shape[x->ndim - 1],
                              (long long)w->shape[0]);
    if (c->nin == 3 &&
        (c->in[2]->ndim != 1 || c->in[2]->shape[0] != w->shape[1]))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "bias must be 1-D with %lld elements (the "
                              "weight's out features)",
                              (long long)w->shape[1]);
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 1] = w->shape[1];
    c->key_dtype = dt;
    set_out(c, dt, x->ndim, shape);
    return KEEL_STATUS_OK;
}

/* ---- fused_linear --------------------------------------------------------- */

keel_status keel__check_activation(struct keel_op_call *c)
{
    const char *name = keel__attr_s(c, "activation");

    if (keel_fused_act_from_name(name) < 0)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "activation '%s' is not one of " KEEL_FUSED_ACT_NAMES,
                              name);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_fused_linear(struct keel_op_call *c)
{
    keel_status st = keel__check_activation(c);

    return st ? st : keel__shape_linear(c);
}
