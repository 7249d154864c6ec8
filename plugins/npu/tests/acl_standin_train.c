/*
 * The stand-in's aclnn operators for the plugin's npu_kernels_train.c,
 * computed on the host (see acl_standin_internal.h for the shared parts):
 * the elementwise operators the optimizer updates are composed of,
 * aclnnInplaceAdd (selfRef += alpha other), aclnnInplaceMuls (selfRef *=
 * other), aclnnInplaceAdds (selfRef += alpha other, scalars),
 * aclnnInplaceAddcmul / aclnnInplaceAddcdiv (selfRef += value t1 * t2,
 * value t1 / t2) and aclnnSqrt (out = sqrt(self)). Each element is
 * computed in double and stored through the destination's dtype.
 *
 * Checks: every tensor of an operator has the same dims and one float
 * dtype (the stand-in does not broadcast or promote; the plugin never asks
 * it to); a NULL argument is ACLNN_ERR_PARAM_NULLPTR (161001), anything
 * else ACLNN_ERR_PARAM_INVALID (161002). aclnnInplaceAddcdiv asks for a
 * workspace of TR_ADDCDIV_WS bytes and uses it, so the workspace path of
 * the plugin runs. ACL_STANDIN_FAULT=addcdiv_wrong adds 1 to the first
 * element of every aclnnInplaceAddcdiv result.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "acl_standin_internal.h"
#include "../aclnn_train_api.h"

#define NPU_TRAIN_DECL(ret, name, params, need) API ret name params;
NPU_ACLNN_TRAIN_FUNCS(NPU_TRAIN_DECL)
#undef NPU_TRAIN_DECL

#define TR_ADDCDIV_WS 64u

static bool addcdiv_wrong;

void standin_train_fault(const char *fault)
{
    addcdiv_wrong = fault && !strcmp(fault, "addcdiv_wrong");
}

enum tr_op { TR_ADD, TR_MULS, TR_ADDS, TR_ADDCMUL, TR_ADDCDIV, TR_SQRT };

struct tr_priv {
    enum tr_op op;
    struct aclTensor dst, x, y; /* dst is selfRef or out */
    double v, alpha;
};

static char *tr_at(const struct aclTensor *t, const int64_t *idx)
{
    int64_t off = 0;

    for (int i = 0; i < t->ndim; i++)
        off += idx[i] * t->strides[i];
    return t->base + off * (int64_t)dt_size(t->dt);
}

static void tr_host(void *priv, void *workspace)
{
    const struct tr_priv *p = priv;
    int64_t idx[8] = {0}, n = 1;
    double *scratch = workspace; /* TR_ADDCDIV_WS bytes for addcdiv */

    for (int i = 0; i < p->dst.ndim; i++)
        n *= p->dst.dims[i];
    for (int64_t k = 0; k < n; k++) {
        char *d = tr_at(&p->dst, idx);
        double r, a = ld_f(&p->dst, d);

        switch (p->op) {
        case TR_ADD:
            r = a + p->alpha * ld_f(&p->x, tr_at(&p->x, idx));
            break;
        case TR_MULS:
            r = a * p->v;
            break;
        case TR_ADDS:
            r = a + p->alpha * p->v;
            break;
        case TR_ADDCMUL:
            r = a + p->v * ld_f(&p->x, tr_at(&p->x, idx)) *
                        ld_f(&p->y, tr_at(&p->y, idx));
            break;
        case TR_ADDCDIV:
            /* through the workspace, so that a short one would show */
            scratch[0] = ld_f(&p->x, tr_at(&p->x, idx));
            scratch[1] = ld_f(&p->y, tr_at(&p->y, idx));
            r = a + p->v * scratch[0] / scratch[1];
            if (addcdiv_wrong && k == 0)
                r += 1;
            break;
        default:
            r = sqrt(ld_f(&p->x, tr_at(&p->x, idx)));
            break;
        }
        st_f(&p->dst, d, r);
        for (int i = p->dst.ndim - 1; i >= 0; i--) {
            if (++idx[i] < p->dst.dims[i])
                break;
            idx[i] = 0;
        }
    }
}

static bool tr_same(const struct aclTensor *a, const struct aclTensor *b)
{
    if (a->ndim != b->ndim || a->dt != b->dt)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i])
            return false;
    return true;
}

/* Phase 1 of every operator here: x, y may be NULL where op has none,
 * sv / sa the scalars where it has them. */
static aclnnStatus tr_plan(enum tr_op op, const aclTensor *dst,
                           const aclTensor *x, const aclTensor *y,
                           const aclScalar *sv, const aclScalar *sa,
                           bool want_x, bool want_y, bool want_v,
                           bool want_a, uint64_t *ws, aclOpExecutor **ex,
                           const char *call)
{
    struct tr_priv *p;
    aclError inj = injected(call);

    if (inj)
        return inj;
    if (!dst || (want_x && !x) || (want_y && !y) || (want_v && !sv) ||
        (want_a && !sa) || !ws || !ex)
        return err(161001, "%s: a NULL argument", call);
    if (!dt_float(dst->dt) || (x && !tr_same(dst, x)) ||
        (y && !tr_same(dst, y)))
        return err(161002, "%s: the tensors differ in dims or dtype, or "
                   "are not float32, float16, bfloat16", call);
    p = calloc(1, sizeof(*p));
    if (!p)
        return err(ACL_ERROR_BAD_ALLOC, "%s: no memory", call);
    p->op = op;
    p->dst = *dst;
    if (x)
        p->x = *x;
    if (y)
        p->y = *y;
    p->v = sv ? sv->f : 0;
    p->alpha = sa ? sa->f : 1;
    return standin_host_plan(call, op == TR_ADDCDIV ? TR_ADDCDIV_WS : 0,
                             tr_host, free, p, ws, ex);
}

API aclnnStatus aclnnInplaceAddGetWorkspaceSize(const aclTensor *selfRef,
                                                const aclTensor *other,
                                                const aclScalar *alpha,
                                                uint64_t *workspaceSize,
                                                aclOpExecutor **executor)
{
    return tr_plan(TR_ADD, selfRef, other, NULL, NULL, alpha, true, false,
                   false, true, workspaceSize, executor,
                   "aclnnInplaceAddGetWorkspaceSize");
}

API aclnnStatus aclnnInplaceAdd(void *workspace, uint64_t workspaceSize,
                                aclOpExecutor *executor, aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnInplaceAdd");
}

API aclnnStatus aclnnInplaceMulsGetWorkspaceSize(aclTensor *selfRef,
                                                 const aclScalar *other,
                                                 uint64_t *workspaceSize,
                                                 aclOpExecutor **executor)
{
    return tr_plan(TR_MULS, selfRef, NULL, NULL, other, NULL, false, false,
                   true, false, workspaceSize, executor,
                   "aclnnInplaceMulsGetWorkspaceSize");
}

API aclnnStatus aclnnInplaceMuls(void *workspace, uint64_t workspaceSize,
                                 aclOpExecutor *executor, aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnInplaceMuls");
}

API aclnnStatus aclnnInplaceAddsGetWorkspaceSize(const aclTensor *selfRef,
                                                 const aclScalar *other,
                                                 const aclScalar *alpha,
                                                 uint64_t *workspaceSize,
                                                 aclOpExecutor **executor)
{
    return tr_plan(TR_ADDS, selfRef, NULL, NULL, other, alpha, false, false,
                   true, true, workspaceSize, executor,
                   "aclnnInplaceAddsGetWorkspaceSize");
}

API aclnnStatus aclnnInplaceAdds(void *workspace, uint64_t workspaceSize,
                                 aclOpExecutor *executor, aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnInplaceAdds");
}

API aclnnStatus aclnnInplaceAddcmulGetWorkspaceSize(
    const aclTensor *selfRef, const aclTensor *tensor1,
    const aclTensor *tensor2, const aclScalar *value,
    uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return tr_plan(TR_ADDCMUL, selfRef, tensor1, tensor2, value, NULL, true,
                   true, true, false, workspaceSize, executor,
                   "aclnnInplaceAddcmulGetWorkspaceSize");
}

API aclnnStatus aclnnInplaceAddcmul(void *workspace, uint64_t workspaceSize,
                                    aclOpExecutor *executor,
                                    aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnInplaceAddcmul");
}

API aclnnStatus aclnnInplaceAddcdivGetWorkspaceSize(
    const aclTensor *selfRef, const aclTensor *tensor1,
    const aclTensor *tensor2, const aclScalar *value,
    uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return tr_plan(TR_ADDCDIV, selfRef, tensor1, tensor2, value, NULL, true,
                   true, true, false, workspaceSize, executor,
                   "aclnnInplaceAddcdivGetWorkspaceSize");
}

API aclnnStatus aclnnInplaceAddcdiv(void *workspace, uint64_t workspaceSize,
                                    aclOpExecutor *executor,
                                    aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnInplaceAddcdiv");
}

API aclnnStatus aclnnSqrtGetWorkspaceSize(const aclTensor *self,
                                          aclTensor *out,
                                          uint64_t *workspaceSize,
                                          aclOpExecutor **executor)
{
    return tr_plan(TR_SQRT, out, self, NULL, NULL, NULL, true, false, false,
                   false, workspaceSize, executor,
                   "aclnnSqrtGetWorkspaceSize");
}

API aclnnStatus aclnnSqrt(void *workspace, uint64_t workspaceSize,
                          aclOpExecutor *executor, aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream, "aclnnSqrt");
}
