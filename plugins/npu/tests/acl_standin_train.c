/*
 * The stand-in's aclnn operators for the plugin's npu_kernels_train.c,
 * computed on the host (see acl_standin_internal.h for the shared parts):
 * the elementwise operators the optimizer updates are composed of,
 * aclnnInplaceAdd (selfRef += alpha other), aclnnInplaceMuls (selfRef *=
 * other), aclnnInplaceAdds (selfRef += alpha other, scalars),
 * aclnnInplaceAddcmul / aclnnInplaceAddcdiv (selfRef += value t1 * t2,
 * value t1 / t2) and aclnnSqrt (out = sqrt(self)); aclnnLayerNorm and
 * aclnnLayerNormBackward (biased variance, rstd = 1 / sqrt(var + eps);
 * the backward's weight and dbias sums in its workspace); aclnnBatchNorm
 * and aclnnBatchNormBackward (PyTorch's conventions, see there);
 * aclnnSoftmaxBackward and aclnnLogSoftmaxBackward along dim; aclnnNLLLoss
 * and aclnnNLLLossBackward (float32, int64 targets); aclnnLog. Each
 * element is
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
        /* sqrt writes an out tensor it must not read */
        double r, a = p->op == TR_SQRT ? 0.0 : ld_f(&p->dst, d);

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

/* ---- aclnnLayerNorm, aclnnLayerNormBackward ------------------------------ */

/* The element of t at row-major position f of its dims. */
static char *ln_at(const struct aclTensor *t, int64_t f)
{
    int64_t off = 0;

    for (int i = t->ndim - 1; i >= 0; i--) {
        off += (f % t->dims[i]) * t->strides[i];
        f /= t->dims[i];
    }
    return t->base + off * (int64_t)dt_size(t->dt);
}

static int64_t ln_numel(const struct aclTensor *t)
{
    int64_t n = 1;

    for (int i = 0; i < t->ndim; i++)
        n *= t->dims[i];
    return n;
}

struct ln_priv {
    bool grad, has_w, has_b;
    /* forward: x, w, b, out, mean, rstd; backward: dy, x, mean, rstd, w,
     * dx, dw, db */
    struct aclTensor x, w, b, out, mean, rstd, dy, dx, dw, db;
    bool has_mean, has_rstd;
    int64_t rows, n; /* A and R element counts */
    double eps;
};

static void ln_host(void *priv, void *workspace)
{
    const struct ln_priv *p = priv;
    double *acc = workspace; /* backward: dw, db sums, 2 n doubles */

    if (p->grad)
        for (int64_t j = 0; j < 2 * p->n; j++)
            acc[j] = 0;
    for (int64_t r = 0; r < p->rows; r++) {
        double mean = 0, var = 0, rstd, s1 = 0, s2 = 0;
        int64_t o = r * p->n;

        if (!p->grad) {
            for (int64_t j = 0; j < p->n; j++)
                mean += ld_f(&p->x, ln_at(&p->x, o + j));
            mean /= (double)p->n;
            for (int64_t j = 0; j < p->n; j++) {
                double d = ld_f(&p->x, ln_at(&p->x, o + j)) - mean;
                var += d * d;
            }
            rstd = 1 / sqrt(var / (double)p->n + p->eps);
            for (int64_t j = 0; j < p->n; j++) {
                double y = (ld_f(&p->x, ln_at(&p->x, o + j)) - mean) * rstd;
                if (p->has_w)
                    y *= ld_f(&p->w, ln_at(&p->w, j));
                if (p->has_b)
                    y += ld_f(&p->b, ln_at(&p->b, j));
                st_f(&p->out, ln_at(&p->out, o + j), y);
            }
            if (p->has_mean)
                st_f(&p->mean, ln_at(&p->mean, r), mean);
            if (p->has_rstd)
                st_f(&p->rstd, ln_at(&p->rstd, r), rstd);
            continue;
        }
        mean = ld_f(&p->mean, ln_at(&p->mean, r));
        rstd = ld_f(&p->rstd, ln_at(&p->rstd, r));
        for (int64_t j = 0; j < p->n; j++) {
            double xh = (ld_f(&p->x, ln_at(&p->x, o + j)) - mean) * rstd;
            double dy = ld_f(&p->dy, ln_at(&p->dy, o + j));
            double g = dy * ld_f(&p->w, ln_at(&p->w, j));
            s1 += g;
            s2 += g * xh;
            acc[j] += dy * xh;
            acc[p->n + j] += dy;
        }
        for (int64_t j = 0; j < p->n; j++) {
            double xh = (ld_f(&p->x, ln_at(&p->x, o + j)) - mean) * rstd;
            double g = ld_f(&p->dy, ln_at(&p->dy, o + j)) *
                       ld_f(&p->w, ln_at(&p->w, j));
            st_f(&p->dx, ln_at(&p->dx, o + j),
                 rstd * (g - s1 / (double)p->n - xh * s2 / (double)p->n));
        }
    }
    if (p->grad)
        for (int64_t j = 0; j < p->n; j++) {
            st_f(&p->dw, ln_at(&p->dw, j), acc[j]);
            st_f(&p->db, ln_at(&p->db, j), acc[p->n + j]);
        }
}

/* input's trailing dims are normalizedShape; *rows, *n the counts. */
static bool ln_dims(const struct aclTensor *x, const aclIntArray *norm,
                    int64_t *rows, int64_t *n)
{
    int a = x->ndim - (int)norm->n;

    if (norm->n < 1 || a < 0)
        return false;
    *rows = 1;
    *n = 1;
    for (int i = 0; i < x->ndim; i++) {
        if (i >= a && norm->v[i - a] != x->dims[i])
            return false;
        *(i < a ? rows : n) *= x->dims[i];
    }
    return true;
}

/* t has dims: the trailing normalized ones (param), or [A..., 1...]
 * (statistic): checked as the element count and rank aclnn checks. */
static bool ln_param_ok(const struct aclTensor *t, const aclIntArray *norm)
{
    if (!dt_float(t->dt) || t->ndim != (int)norm->n)
        return false;
    for (int i = 0; i < t->ndim; i++)
        if (t->dims[i] != norm->v[i])
            return false;
    return true;
}

static bool ln_stat_ok(const struct aclTensor *t, int64_t rows)
{
    return dt_float(t->dt) && ln_numel(t) == rows;
}

API aclnnStatus aclnnLayerNormGetWorkspaceSize(
    const aclTensor *input, const aclIntArray *normalizedShape,
    const aclTensor *weightOptional, const aclTensor *biasOptional,
    double eps, aclTensor *out, aclTensor *meanOutOptional,
    aclTensor *rstdOutOptional, uint64_t *workspaceSize,
    aclOpExecutor **executor)
{
    const char *call = "aclnnLayerNormGetWorkspaceSize";
    struct ln_priv *p;
    int64_t rows, n;
    aclError inj = injected(call);

    if (inj)
        return inj;
    if (!input || !normalizedShape || !out || !workspaceSize || !executor)
        return err(161001, "%s: a NULL argument", call);
    if (!dt_float(input->dt) || !tr_same(input, out) ||
        !ln_dims(input, normalizedShape, &rows, &n) ||
        (weightOptional && !ln_param_ok(weightOptional, normalizedShape)) ||
        (biasOptional && !ln_param_ok(biasOptional, normalizedShape)) ||
        (meanOutOptional && !ln_stat_ok(meanOutOptional, rows)) ||
        (rstdOutOptional && !ln_stat_ok(rstdOutOptional, rows)) ||
        !(eps >= 0))
        return err(161002, "%s: shapes or dtypes do not agree", call);
    p = calloc(1, sizeof(*p));
    if (!p)
        return err(ACL_ERROR_BAD_ALLOC, "%s: no memory", call);
    p->x = *input;
    p->out = *out;
    p->has_w = weightOptional != NULL;
    p->has_b = biasOptional != NULL;
    if (p->has_w)
        p->w = *weightOptional;
    if (p->has_b)
        p->b = *biasOptional;
    p->has_mean = meanOutOptional != NULL;
    p->has_rstd = rstdOutOptional != NULL;
    if (p->has_mean)
        p->mean = *meanOutOptional;
    if (p->has_rstd)
        p->rstd = *rstdOutOptional;
    p->rows = rows;
    p->n = n;
    p->eps = eps;
    return standin_host_plan(call, 0, ln_host, free, p, workspaceSize,
                             executor);
}

API aclnnStatus aclnnLayerNorm(void *workspace, uint64_t workspaceSize,
                               aclOpExecutor *executor, aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnLayerNorm");
}

API aclnnStatus aclnnLayerNormBackwardGetWorkspaceSize(
    const aclTensor *gradOut, const aclTensor *input,
    const aclIntArray *normalizedShape, const aclTensor *mean,
    const aclTensor *rstd, const aclTensor *weightOptional,
    const aclTensor *biasOptional, const aclBoolArray *outputMask,
    aclTensor *gradInputOut, aclTensor *gradWeightOut,
    aclTensor *gradBiasOut, uint64_t *workspaceSize,
    aclOpExecutor **executor)
{
    const char *call = "aclnnLayerNormBackwardGetWorkspaceSize";
    struct ln_priv *p;
    int64_t rows, n;
    aclError inj = injected(call);

    if (inj)
        return inj;
    if (!gradOut || !input || !normalizedShape || !mean || !rstd ||
        !outputMask || !workspaceSize || !executor)
        return err(161001, "%s: a NULL argument", call);
    /* the stand-in computes only what the plugin asks: every output, with
     * a weight (aclnn wants ones when there is none) */
    if (outputMask->n != 3 || !outputMask->v[0] || !outputMask->v[1] ||
        !outputMask->v[2] || !gradInputOut || !gradWeightOut ||
        !gradBiasOut || !weightOptional)
        return err(161001, "%s: the stand-in wants a weight and all three "
                   "outputs", call);
    if (!dt_float(input->dt) || !tr_same(input, gradOut) ||
        !tr_same(input, gradInputOut) ||
        !ln_dims(input, normalizedShape, &rows, &n) ||
        !ln_param_ok(weightOptional, normalizedShape) ||
        (biasOptional && !ln_param_ok(biasOptional, normalizedShape)) ||
        !ln_param_ok(gradWeightOut, normalizedShape) ||
        !ln_param_ok(gradBiasOut, normalizedShape) ||
        !ln_stat_ok(mean, rows) || !ln_stat_ok(rstd, rows) ||
        n > (int64_t)(UINT64_MAX / 16))
        return err(161002, "%s: shapes or dtypes do not agree", call);
    p = calloc(1, sizeof(*p));
    if (!p)
        return err(ACL_ERROR_BAD_ALLOC, "%s: no memory", call);
    p->grad = true;
    p->dy = *gradOut;
    p->x = *input;
    p->mean = *mean;
    p->rstd = *rstd;
    p->w = *weightOptional;
    p->dx = *gradInputOut;
    p->dw = *gradWeightOut;
    p->db = *gradBiasOut;
    p->rows = rows;
    p->n = n;
    /* the dw and db sums live in the workspace */
    return standin_host_plan(call, (uint64_t)n * 2 * sizeof(double), ln_host,
                             free, p, workspaceSize, executor);
}

API aclnnStatus aclnnLayerNormBackward(void *workspace, uint64_t workspaceSize,
                                       aclOpExecutor *executor,
                                       aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnLayerNormBackward");
}

/* ---- aclnnBatchNorm, aclnnBatchNormBackward ------------------------------ */

/* PyTorch's semantics over dim 1 of [N, C, ...]: training normalises with
 * the batch statistics (biased variance) and, when running statistics are
 * given, updates them as running = (1 - momentum) running + momentum
 * batch, the variance unbiased; inference uses the running statistics.
 * The backward uses saveMean / saveInvstd in training, the running
 * statistics otherwise. */
struct bn_priv {
    bool grad, training;
    struct aclTensor x, w, b, rm, rv, y, sm, si, dy, dx, dw, db;
    bool has_w, has_b, has_rm, has_rv, has_sm, has_si;
    int64_t c, inner, n; /* channels, elements per (n, c), per channel */
    double mom, eps;
};

static double bn_get(const struct aclTensor *t, bool has, int64_t i,
                     double def)
{
    return has ? ld_f(t, ln_at(t, i)) : def;
}

static void bn_host(void *priv, void *workspace)
{
    const struct bn_priv *p = priv;
    int64_t total = ln_numel(&p->x);

    (void)workspace;
    for (int64_t ch = 0; ch < p->c; ch++) {
        double mean = 0, var = 0, inv, sg = 0, sgx = 0, w;
        int64_t f;

        /* the channel's elements: f = (n * c + ch) * inner + i */
        if (p->grad && p->training) {
            mean = ld_f(&p->sm, ln_at(&p->sm, ch));
            inv = ld_f(&p->si, ln_at(&p->si, ch));
        } else if (p->training) {
            for (f = ch * p->inner; f < total; f += p->c * p->inner)
                for (int64_t i = 0; i < p->inner; i++)
                    mean += ld_f(&p->x, ln_at(&p->x, f + i));
            mean /= (double)p->n;
            for (f = ch * p->inner; f < total; f += p->c * p->inner)
                for (int64_t i = 0; i < p->inner; i++) {
                    double d = ld_f(&p->x, ln_at(&p->x, f + i)) - mean;
                    var += d * d;
                }
            var /= (double)p->n;
            inv = 1 / sqrt(var + p->eps);
        } else {
            mean = ld_f(&p->rm, ln_at(&p->rm, ch));
            inv = 1 / sqrt(ld_f(&p->rv, ln_at(&p->rv, ch)) + p->eps);
        }
        w = bn_get(&p->w, p->has_w, ch, 1);
        if (!p->grad) {
            for (f = ch * p->inner; f < total; f += p->c * p->inner)
                for (int64_t i = 0; i < p->inner; i++)
                    st_f(&p->y, ln_at(&p->y, f + i),
                         (ld_f(&p->x, ln_at(&p->x, f + i)) - mean) * inv * w +
                             bn_get(&p->b, p->has_b, ch, 0));
            if (p->training && p->has_sm)
                st_f(&p->sm, ln_at(&p->sm, ch), mean);
            if (p->training && p->has_si)
                st_f(&p->si, ln_at(&p->si, ch), inv);
            if (p->training && p->has_rm)
                st_f(&p->rm, ln_at(&p->rm, ch),
                     (1 - p->mom) * ld_f(&p->rm, ln_at(&p->rm, ch)) +
                         p->mom * mean);
            if (p->training && p->has_rv)
                st_f(&p->rv, ln_at(&p->rv, ch),
                     (1 - p->mom) * ld_f(&p->rv, ln_at(&p->rv, ch)) +
                         p->mom * var * (double)p->n /
                             (double)(p->n > 1 ? p->n - 1 : 1));
            continue;
        }
        for (f = ch * p->inner; f < total; f += p->c * p->inner)
            for (int64_t i = 0; i < p->inner; i++) {
                double dy = ld_f(&p->dy, ln_at(&p->dy, f + i));
                sg += dy;
                sgx += dy * (ld_f(&p->x, ln_at(&p->x, f + i)) - mean) * inv;
            }
        for (f = ch * p->inner; f < total; f += p->c * p->inner)
            for (int64_t i = 0; i < p->inner; i++) {
                double xh = (ld_f(&p->x, ln_at(&p->x, f + i)) - mean) * inv;
                double dy = ld_f(&p->dy, ln_at(&p->dy, f + i));
                double d = p->training ? dy - sg / (double)p->n -
                                             xh * sgx / (double)p->n
                                       : dy;
                st_f(&p->dx, ln_at(&p->dx, f + i), w * inv * d);
            }
        st_f(&p->dw, ln_at(&p->dw, ch), sgx);
        st_f(&p->db, ln_at(&p->db, ch), sg);
    }
}

/* t is NULL or a 1-D float tensor of c elements. */
static bool bn_vec(const aclTensor *t, int64_t c)
{
    return !t || (dt_float(t->dt) && t->ndim == 1 && t->dims[0] == c);
}

/* x is [N, C, ...] of 2 to 8 dims. */
static bool bn_shape(const aclTensor *x, int64_t *c, int64_t *inner,
                     int64_t *n)
{
    if (!dt_float(x->dt) || x->ndim < 2)
        return false;
    *c = x->dims[1];
    *inner = 1;
    for (int i = 2; i < x->ndim; i++)
        *inner *= x->dims[i];
    *n = x->dims[0] * *inner;
    return true;
}

API aclnnStatus aclnnBatchNormGetWorkspaceSize(
    const aclTensor *input, const aclTensor *weight, const aclTensor *bias,
    aclTensor *runningMean, aclTensor *runningVar, bool training,
    double momentum, double eps, aclTensor *output, aclTensor *saveMean,
    aclTensor *saveInvstd, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    const char *call = "aclnnBatchNormGetWorkspaceSize";
    struct bn_priv *p;
    int64_t c, inner, n;
    aclError inj = injected(call);

    if (inj)
        return inj;
    if (!input || !output || !workspaceSize || !executor ||
        (!training && (!runningMean || !runningVar)))
        return err(161001, "%s: a NULL argument", call);
    if (!bn_shape(input, &c, &inner, &n) || !tr_same(input, output) ||
        !bn_vec(weight, c) || !bn_vec(bias, c) || !bn_vec(runningMean, c) ||
        !bn_vec(runningVar, c) || !bn_vec(saveMean, c) ||
        !bn_vec(saveInvstd, c) || !(eps >= 0))
        return err(161002, "%s: shapes or dtypes do not agree", call);
    p = calloc(1, sizeof(*p));
    if (!p)
        return err(ACL_ERROR_BAD_ALLOC, "%s: no memory", call);
    p->training = training;
    p->x = *input;
    p->y = *output;
#define BN_TAKE(field, has, arg) \
    if ((p->has = (arg) != NULL)) \
        p->field = *(arg);
    BN_TAKE(w, has_w, weight)
    BN_TAKE(b, has_b, bias)
    BN_TAKE(rm, has_rm, runningMean)
    BN_TAKE(rv, has_rv, runningVar)
    BN_TAKE(sm, has_sm, saveMean)
    BN_TAKE(si, has_si, saveInvstd)
    p->c = c;
    p->inner = inner;
    p->n = n;
    p->mom = momentum;
    p->eps = eps;
    return standin_host_plan(call, 0, bn_host, free, p, workspaceSize,
                             executor);
}

API aclnnStatus aclnnBatchNorm(void *workspace, uint64_t workspaceSize,
                               aclOpExecutor *executor, aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnBatchNorm");
}

API aclnnStatus aclnnBatchNormBackwardGetWorkspaceSize(
    const aclTensor *gradOut, const aclTensor *input, const aclTensor *weight,
    const aclTensor *runningMean, const aclTensor *runningVar,
    const aclTensor *saveMean, const aclTensor *saveInvstd, bool training,
    double eps, const aclBoolArray *outputMask, aclTensor *gradInput,
    aclTensor *gradWeight, aclTensor *gradBias, uint64_t *workspaceSize,
    aclOpExecutor **executor)
{
    const char *call = "aclnnBatchNormBackwardGetWorkspaceSize";
    struct bn_priv *p;
    int64_t c, inner, n;
    aclError inj = injected(call);

    if (inj)
        return inj;
    if (!gradOut || !input || !outputMask || !workspaceSize || !executor ||
        (training && (!saveMean || !saveInvstd)) ||
        (!training && (!runningMean || !runningVar)))
        return err(161001, "%s: a NULL argument", call);
    /* the stand-in computes every output: the plugin asks for all three */
    if (outputMask->n != 3 || !outputMask->v[0] || !outputMask->v[1] ||
        !outputMask->v[2] || !gradInput || !gradWeight || !gradBias)
        return err(161001, "%s: the stand-in wants all three outputs", call);
    if (!bn_shape(input, &c, &inner, &n) || !tr_same(input, gradOut) ||
        !tr_same(input, gradInput) || !bn_vec(weight, c) ||
        !bn_vec(runningMean, c) || !bn_vec(runningVar, c) ||
        !bn_vec(saveMean, c) || !bn_vec(saveInvstd, c) ||
        !bn_vec(gradWeight, c) || !bn_vec(gradBias, c) || !(eps >= 0))
        return err(161002, "%s: shapes or dtypes do not agree", call);
    p = calloc(1, sizeof(*p));
    if (!p)
        return err(ACL_ERROR_BAD_ALLOC, "%s: no memory", call);
    p->grad = true;
    p->training = training;
    p->x = *input;
    p->dy = *gradOut;
    p->dx = *gradInput;
    p->dw = *gradWeight;
    p->db = *gradBias;
    BN_TAKE(w, has_w, weight)
    BN_TAKE(rm, has_rm, runningMean)
    BN_TAKE(rv, has_rv, runningVar)
    BN_TAKE(sm, has_sm, saveMean)
    BN_TAKE(si, has_si, saveInvstd)
#undef BN_TAKE
    p->c = c;
    p->inner = inner;
    p->n = n;
    p->eps = eps;
    return standin_host_plan(call, 0, bn_host, free, p, workspaceSize,
                             executor);
}

API aclnnStatus aclnnBatchNormBackward(void *workspace, uint64_t workspaceSize,
                                       aclOpExecutor *executor,
                                       aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnBatchNormBackward");
}

/* ---- aclnnSoftmaxBackward, aclnnLogSoftmaxBackward ----------------------- */

struct smb_priv {
    bool log;
    struct aclTensor dy, y, dx;
    int64_t outer, len, inner;
};

static void smb_host(void *priv, void *workspace)
{
    const struct smb_priv *p = priv;

    (void)workspace;
    for (int64_t o = 0; o < p->outer; o++)
        for (int64_t i = 0; i < p->inner; i++) {
            double sum = 0;
            int64_t f0 = o * p->len * p->inner + i;

            for (int64_t j = 0; j < p->len; j++) {
                int64_t f = f0 + j * p->inner;
                double dy = ld_f(&p->dy, ln_at(&p->dy, f));
                sum += p->log ? dy : dy * ld_f(&p->y, ln_at(&p->y, f));
            }
            for (int64_t j = 0; j < p->len; j++) {
                int64_t f = f0 + j * p->inner;
                double dy = ld_f(&p->dy, ln_at(&p->dy, f));
                double y = ld_f(&p->y, ln_at(&p->y, f));
                st_f(&p->dx, ln_at(&p->dx, f),
                     p->log ? dy - exp(y) * sum : y * (dy - sum));
            }
        }
}

static aclnnStatus smb_plan(bool log, const aclTensor *gradOutput,
                            const aclTensor *output, int64_t dim,
                            aclTensor *out, uint64_t *ws, aclOpExecutor **ex,
                            const char *call)
{
    struct smb_priv *p;
    int nd;
    aclError inj = injected(call);

    if (inj)
        return inj;
    if (!gradOutput || !output || !out || !ws || !ex)
        return err(161001, "%s: a NULL argument", call);
    nd = output->ndim;
    if (!dt_float(output->dt) || !tr_same(output, gradOutput) ||
        !tr_same(output, out) || dim < 0 || dim >= (nd ? nd : 1))
        return err(161002, "%s: shapes, dtypes or dim do not agree", call);
    p = calloc(1, sizeof(*p));
    if (!p)
        return err(ACL_ERROR_BAD_ALLOC, "%s: no memory", call);
    p->log = log;
    p->dy = *gradOutput;
    p->y = *output;
    p->dx = *out;
    p->outer = 1;
    p->inner = 1;
    p->len = nd ? output->dims[dim] : 1;
    for (int i = 0; i < nd; i++) {
        if (i < dim)
            p->outer *= output->dims[i];
        else if (i > dim)
            p->inner *= output->dims[i];
    }
    return standin_host_plan(call, 0, smb_host, free, p, ws, ex);
}

API aclnnStatus aclnnSoftmaxBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *output, int64_t dim,
    aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return smb_plan(false, gradOutput, output, dim, out, workspaceSize,
                    executor, "aclnnSoftmaxBackwardGetWorkspaceSize");
}

API aclnnStatus aclnnSoftmaxBackward(void *workspace, uint64_t workspaceSize,
                                     aclOpExecutor *executor,
                                     aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnSoftmaxBackward");
}

API aclnnStatus aclnnLogSoftmaxBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *output, int64_t dim,
    aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return smb_plan(true, gradOutput, output, dim, out, workspaceSize,
                    executor, "aclnnLogSoftmaxBackwardGetWorkspaceSize");
}

API aclnnStatus aclnnLogSoftmaxBackward(void *workspace,
                                        uint64_t workspaceSize,
                                        aclOpExecutor *executor,
                                        aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnLogSoftmaxBackward");
}

/* ---- aclnnNLLLoss -------------------------------------------------------- */

/* PyTorch's nll_loss: per sample -weight[t] self[n, t], 0 (and no weight)
 * where t is ignoreIndex; reduction 0 none, 1 mean (sum over the total
 * weight), 2 sum; totalWeightOut the total weight of the kept samples. */
struct nll_priv {
    struct aclTensor x, t, w, out, tw;
    int64_t n, c, red, ignore;
};

static void nll_host(void *priv, void *workspace)
{
    const struct nll_priv *p = priv;
    double sum = 0, tw = 0;

    (void)workspace;
    for (int64_t i = 0; i < p->n; i++) {
        int64_t y = ld_i(&p->t, ln_at(&p->t, i));
        double l = 0;

        if (y != p->ignore && y >= 0 && y < p->c) {
            double w = ld_f(&p->w, ln_at(&p->w, y));
            l = -w * ld_f(&p->x, ln_at(&p->x, i * p->c + y));
            tw += w;
        }
        if (p->red == 0)
            st_f(&p->out, ln_at(&p->out, i), l);
        sum += l;
    }
    if (p->red != 0)
        st_f(&p->out, ln_at(&p->out, 0), p->red == 1 ? sum / tw : sum);
    st_f(&p->tw, ln_at(&p->tw, 0), tw);
}

API aclnnStatus aclnnNLLLossGetWorkspaceSize(
    const aclTensor *self, const aclTensor *target, const aclTensor *weight,
    int64_t reduction, int64_t ignoreIndex, aclTensor *out,
    aclTensor *totalWeightOut, uint64_t *workspaceSize,
    aclOpExecutor **executor)
{
    const char *call = "aclnnNLLLossGetWorkspaceSize";
    struct nll_priv *p;
    int64_t n, c;
    aclError inj = injected(call);

    if (inj)
        return inj;
    if (!self || !target || !weight || !out || !totalWeightOut ||
        !workspaceSize || !executor)
        return err(161001, "%s: a NULL argument", call);
    n = self->ndim == 2 ? self->dims[0] : 1;
    c = self->ndim ? self->dims[self->ndim - 1] : 0;
    if (self->dt != ACL_FLOAT || (self->ndim != 1 && self->ndim != 2) ||
        target->dt != ACL_INT64 || ln_numel(target) != n ||
        !bn_vec(weight, c) || weight->dt != ACL_FLOAT || reduction < 0 ||
        reduction > 2 || !dt_float(out->dt) ||
        ln_numel(out) != (reduction == 0 ? n : 1) ||
        !dt_float(totalWeightOut->dt) || ln_numel(totalWeightOut) != 1)
        return err(161002, "%s: shapes, dtypes or reduction do not agree",
                   call);
    p = calloc(1, sizeof(*p));
    if (!p)
        return err(ACL_ERROR_BAD_ALLOC, "%s: no memory", call);
    p->x = *self;
    p->t = *target;
    p->w = *weight;
    p->out = *out;
    p->tw = *totalWeightOut;
    p->n = n;
    p->c = c;
    p->red = reduction;
    p->ignore = ignoreIndex;
    return standin_host_plan(call, 0, nll_host, free, p, workspaceSize,
                             executor);
}

API aclnnStatus aclnnNLLLoss(void *workspace, uint64_t workspaceSize,
                             aclOpExecutor *executor, aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnNLLLoss");
}

/* ---- aclnnNLLLossBackward, aclnnLog -------------------------------------- */

struct nllb_priv {
    struct aclTensor g, t, w, tw, out;
    int64_t n, c, red, ignore;
};

static void nllb_host(void *priv, void *workspace)
{
    const struct nllb_priv *p = priv;
    double tw = p->red == 1 ? ld_f(&p->tw, ln_at(&p->tw, 0)) : 1;

    (void)workspace;
    for (int64_t i = 0; i < p->n; i++) {
        int64_t y = ld_i(&p->t, ln_at(&p->t, i));
        double g = ld_f(&p->g, ln_at(&p->g, p->red == 0 ? i : 0));

        for (int64_t j = 0; j < p->c; j++)
            st_f(&p->out, ln_at(&p->out, i * p->c + j),
                 j == y && y != p->ignore
                     ? -ld_f(&p->w, ln_at(&p->w, y)) * g / tw
                     : 0);
    }
}

API aclnnStatus aclnnNLLLossBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *self,
    const aclTensor *target, const aclTensor *weight, int64_t reduction,
    int64_t ignoreIndex, const aclTensor *totalWeight, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor)
{
    const char *call = "aclnnNLLLossBackwardGetWorkspaceSize";
    struct nllb_priv *p;
    int64_t n, c;
    aclError inj = injected(call);

    if (inj)
        return inj;
    if (!gradOutput || !self || !target || !weight || !totalWeight || !out ||
        !workspaceSize || !executor)
        return err(161001, "%s: a NULL argument", call);
    n = self->ndim == 2 ? self->dims[0] : 1;
    c = self->ndim ? self->dims[self->ndim - 1] : 0;
    if (self->dt != ACL_FLOAT || (self->ndim != 1 && self->ndim != 2) ||
        !tr_same(self, out) || target->dt != ACL_INT64 ||
        ln_numel(target) != n || !bn_vec(weight, c) ||
        weight->dt != ACL_FLOAT || reduction < 0 || reduction > 2 ||
        !dt_float(gradOutput->dt) ||
        ln_numel(gradOutput) != (reduction == 0 ? n : 1) ||
        totalWeight->dt != ACL_FLOAT || ln_numel(totalWeight) != 1)
        return err(161002, "%s: shapes, dtypes or reduction do not agree",
                   call);
    p = calloc(1, sizeof(*p));
    if (!p)
        return err(ACL_ERROR_BAD_ALLOC, "%s: no memory", call);
    p->g = *gradOutput;
    p->t = *target;
    p->w = *weight;
    p->tw = *totalWeight;
    p->out = *out;
    p->n = n;
    p->c = c;
    p->red = reduction;
    p->ignore = ignoreIndex;
    return standin_host_plan(call, 0, nllb_host, free, p, workspaceSize,
                             executor);
}

API aclnnStatus aclnnNLLLossBackward(void *workspace, uint64_t workspaceSize,
                                     aclOpExecutor *executor,
                                     aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnNLLLossBackward");
}

struct log_priv {
    struct aclTensor x, out;
};

static void log_host(void *priv, void *workspace)
{
    const struct log_priv *p = priv;
    int64_t n = ln_numel(&p->x);

    (void)workspace;
    for (int64_t i = 0; i < n; i++)
        st_f(&p->out, ln_at(&p->out, i), log(ld_f(&p->x, ln_at(&p->x, i))));
}

API aclnnStatus aclnnLogGetWorkspaceSize(const aclTensor *self,
                                         aclTensor *out,
                                         uint64_t *workspaceSize,
                                         aclOpExecutor **executor)
{
    const char *call = "aclnnLogGetWorkspaceSize";
    struct log_priv *p;
    aclError inj = injected(call);

    if (inj)
        return inj;
    if (!self || !out || !workspaceSize || !executor)
        return err(161001, "%s: a NULL argument", call);
    if (!dt_float(self->dt) || !tr_same(self, out))
        return err(161002, "%s: shapes or dtypes do not agree", call);
    p = calloc(1, sizeof(*p));
    if (!p)
        return err(ACL_ERROR_BAD_ALLOC, "%s: no memory", call);
    p->x = *self;
    p->out = *out;
    return standin_host_plan(call, 0, log_host, free, p, workspaceSize,
                             executor);
}

API aclnnStatus aclnnLog(void *workspace, uint64_t workspaceSize,
                         aclOpExecutor *executor, aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream, "aclnnLog");
}
