/*
 * keel kernel kit — checks of the linalg shape rules (see docs/ops.md,
 * "What a kernel receives", for what each promises a kernel), and the
 * batched-GEMM plan both ops reduce to.
 *
 * matmul arrives resolved (core/src/shape_linalg.c): transpose_x /
 * transpose_y are swapped strides, 1-D operands are matrices with a
 * stride-0 dim and the batch dims are broadcast to one shape with stride
 * 0, so the rule checks x [B..., M, K], y [B..., K, N] and an output of
 * B * M * N elements whose rank drops M and/or N where an operand was
 * 1-D. linear arrives as given: x [..., in], weight [in, out], bias [out].
 * fused_linear is linear plus a check of its `activation` name, and plans
 * as linear does.
 */
#include "kit_internal.h"

/* All inputs and output 0 of input 0's floating dtype. */
static keel_status one_float_dtype(const struct kit_ctx *c)
{
    keel_dtype dt = KIN(c, 0)->dtype;
    keel_status st;

    if ((st = kit_need_float(c, 0)) ||
        (st = kit_same_dtype(c, (1u << KNIN(c)) - 1, 0)))
        return st;
    if (KOUT(c, 0)->dtype != dt)
        return kit_bad(c, "output 0 is %s, the inputs %s: they must share "
                       "one dtype",
                       keel_kit_dtype_name(KOUT(c, 0)->dtype),
                       keel_kit_dtype_name(dt));
    return KEEL_STATUS_OK;
}

keel_status kit_rule_matmul(const struct kit_ctx *c)
{
    const keel_tensor_desc *x = KIN(c, 0), *y = KIN(c, 1), *o = KOUT(c, 0);
    int64_t M, N, K;
    char got[160];
    keel_status st;
    int nd, nb;
    bool ok;

    if ((st = kit_arity(c, 2, 1)) || (st = one_float_dtype(c)))
        return st;
    nd = x->ndim;
    if (nd < 2 || y->ndim != nd)
        return kit_bad(c, "takes x [B.., M, K] and y [B.., K, N] of one rank "
                       ">= 2, got %d and %d dims (the core resolves 1-D "
                       "operands, transposes and broadcasting)",
                       x->ndim, y->ndim);
    nb = nd - 2;
    for (int d = 0; d < nb; d++)
        if (x->shape[d] != y->shape[d])
            return kit_bad(c, "batch dim %d differs (%lld in x, %lld in y): "
                           "broadcast batch dims arrive expanded (stride 0)",
                           d, (long long)x->shape[d], (long long)y->shape[d]);
    M = x->shape[nd - 2];
    K = x->shape[nd - 1];
    N = y->shape[nd - 1];
    if (y->shape[nd - 2] != K)
        return kit_bad(c, "inner dims differ: x gives K = %lld, y %lld "
                       "(transposes arrive applied as strides)",
                       (long long)K, (long long)y->shape[nd - 2]);
    /* [B..., M, N], without M for a 1-D x (M = 1) and without N for a
     * 1-D y (N = 1). */
    ok = o->ndim >= nb && o->ndim <= nb + 2 &&
         !memcmp(o->shape, x->shape, sizeof(int64_t) * (size_t)nb);
    if (ok && o->ndim == nb + 2)
        ok = o->shape[nb] == M && o->shape[nb + 1] == N;
    else if (ok && o->ndim == nb + 1)
        ok = (o->shape[nb] == M && N == 1) || (o->shape[nb] == N && M == 1);
    else if (ok)
        ok = M == 1 && N == 1;
    if (!ok)
        return kit_bad(c, "output 0 has shape %s; expected the batch dims, "
                       "then M = %lld and N = %lld (either dropped where "
                       "it is 1 for a 1-D operand)",
                       kit_shape_str(got, sizeof(got), o->ndim, o->shape),
                       (long long)M, (long long)N);
    return KEEL_STATUS_OK; /* outputs: the generic check */
}

keel_status kit_rule_linear(const struct kit_ctx *c)
{
    const keel_tensor_desc *x = KIN(c, 0), *w = KIN(c, 1);
    int64_t shape[KEEL_MAX_DIMS];
    keel_status st;

    if ((st = kit_inputs_between(c, 2, 3)) || (st = kit_arity(c, -1, 1)) ||
        (st = one_float_dtype(c)))
        return st;
    if (x->ndim < 1)
        return kit_bad(c, "x must have at least 1 dimension");
    if (w->ndim != 2)
        return kit_bad(c, "weight must be 2-D [in, out], got %d dims",
                       w->ndim);
    if (x->shape[x->ndim - 1] != w->shape[0])
        return kit_bad(c, "x has %lld input features but weight [in, out] "
                       "expects %lld",
                       (long long)x->shape[x->ndim - 1],
                       (long long)w->shape[0]);
    if (KNIN(c) == 3 &&
        (KIN(c, 2)->ndim != 1 || KIN(c, 2)->shape[0] != w->shape[1]))
        return kit_bad(c, "bias must be 1-D with %lld elements (the "
                       "weight's out features)",
                       (long long)w->shape[1]);
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 1] = w->shape[1];
    if ((st = kit_out_is(c, 0, x->dtype, x->ndim, shape)))
        return st;
    return KEEL_STATUS_OK; /* outputs: the generic check */
}

/* ---- fused_linear -------------------------------------------------------- */

keel_status kit_activation(const struct kit_ctx *c)
{
    const char *name = keel_kit_attr_s(c->a, "activation", "none");

    if (keel_fused_act_from_name(name) < 0)
        return kit_bad(c, "activation '%s' is not one of " KEEL_FUSED_ACT_NAMES,
                       name);
    return KEEL_STATUS_OK;
}

int keel_kit_activation(const keel_kernel_args *a, double *alpha)
{
    if (alpha)
        *alpha = keel_kit_attr_f(a, "alpha", 0.0);
    return keel_fused_act_from_name(keel_kit_attr_s(a, "activation", "none"));
}

keel_status kit_rule_fused_linear(const struct kit_ctx *c)
{
    keel_status st = kit_activation(c);

    return st ? st : kit_rule_linear(c);
}

/* ---- the GEMM plan ------------------------------------------------------- */

keel_status keel_kit_matmul_plan(int op, const keel_kernel_args *a,
                                 keel_kit_matmul *p, keel_kit_msg *msg)
{
    const keel_tensor_desc *x, *y;
    keel_status st;
    int nd;

    if (op != KEEL_OP_MATMUL && op != KEEL_OP_LINEAR &&
        op != KEEL_OP_FUSED_LINEAR)
        return kit_bad_msg(msg, "op %d is not matmul, linear or fused_linear",
                           op);
    if ((st = keel_kit_check(op, a, msg)))
        return st;
    x = &a->inputs[0];
    y = &a->inputs[1];
    nd = x->ndim;
    memset(p, 0, sizeof(*p));
    p->batches = 1;
    if (op == KEEL_OP_MATMUL) {
        p->nb = nd - 2;
        for (int d = 0; d < p->nb; d++) {
            p->bshape[d] = x->shape[d];
            p->xbs[d] = x->strides[d];
            p->ybs[d] = y->strides[d];
            p->batches *= x->shape[d];
        }
        p->M = x->shape[nd - 2];
        p->K = x->shape[nd - 1];
        p->N = y->shape[nd - 1];
        p->xrs = x->strides[nd - 2];
        p->xcs = x->strides[nd - 1];
        p->yrs = y->strides[nd - 2];
        p->ycs = y->strides[nd - 1];
        return KEEL_STATUS_OK;
    }
    /* linear, fused_linear: x [d0, .., dn-2, in]; rows are dn-2, the dims
     * before it are batches sharing the weight (ybs 0). */
    p->nb = nd >= 2 ? nd - 2 : 0;
    for (int d = 0; d < p->nb; d++) {
        p->bshape[d] = x->shape[d];
        p->xbs[d] = x->strides[d];
        p->batches *= x->shape[d];
    }
    p->M = nd >= 2 ? x->shape[nd - 2] : 1;
    p->xrs = nd >= 2 ? x->strides[nd - 2] : 0;
    p->K = x->shape[nd - 1];
    p->xcs = x->strides[nd - 1];
    p->N = y->shape[1];
    p->yrs = y->strides[0];
    p->ycs = y->strides[1];
    p->has_bias = a->num_inputs == 3;
    if (p->has_bias)
        p->bs = a->inputs[2].strides[0];
    return KEEL_STATUS_OK;
}

void keel_kit_matmul_merge_batches(keel_kit_matmul *p)
{
    int64_t expect = p->M * p->xrs;

    if (p->nb == 0 || p->batches <= 1 || p->M == 0)
        return;
    for (int d = 0; d < p->nb; d++)
        if (p->bshape[d] != 1 && p->ybs[d] != 0)
            return;
    if (p->M == 1)
        expect = -1; /* any stride works for one row: take the first */
    for (int d = p->nb - 1; d >= 0; d--) {
        if (p->bshape[d] == 1)
            continue;
        if (expect == -1) {
            p->xrs = p->xbs[d];
            expect = p->xbs[d];
        } else if (p->xbs[d] != expect) {
            return;
        }
        expect *= p->bshape[d];
    }
    p->M *= p->batches;
    p->batches = 1;
    p->nb = 0;
}

int keel_kit_mat_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                        int64_t max_ld, int64_t *ld)
{
    int64_t r1 = rows > 1 ? rows : 1, c1 = cols > 1 ? cols : 1;

    if ((cols <= 1 || cs == 1) && (rows <= 1 || rs >= c1)) {
        *ld = rows <= 1 ? c1 : rs;
        return *ld <= max_ld ? KEEL_KIT_MAT_ROW : KEEL_KIT_MAT_STRIDED;
    }
    if ((rows <= 1 || rs == 1) && (cols <= 1 || cs >= r1)) {
        *ld = cols <= 1 ? r1 : cs;
        return *ld <= max_ld ? KEEL_KIT_MAT_COL : KEEL_KIT_MAT_STRIDED;
    }
    return KEEL_KIT_MAT_STRIDED;
}
