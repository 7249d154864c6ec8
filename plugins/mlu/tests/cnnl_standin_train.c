/*
 * The stand-in's CNNL operators for the plugin's mlu_kernels_train.c,
 * computed on the host (shared parts: cnnl_standin.h, standin.h): the
 * elementwise calls the optimizer updates are composed of, layer norm,
 * the transpose and NHWC batch norm (each described where it is defined).
 *
 *   cnnlTransform   y = alpha * x + beta (y has x's descriptor; alpha and
 *                   beta are floats)
 *   cnnlSqrt_v2     y = sqrt(x)
 *   cnnlDiv_v2      c = a / b, with a workspace of at least what
 *                   cnnlGetDivWorkspaceSize asked for (TR_DIV_WORKSPACE,
 *                   not 0, so the plugin's workspace path runs)
 *
 * Checks as for the other operators: a handle with a queue of the current
 * device, descriptors set and of one dtype and the same dims, every
 * pointer device memory of the current device spanning its view. The
 * work runs on the queue's worker and fills the workspace first.
 *
 * Planted faults (CNRT_STANDIN_FAULT): div_wrong makes cnnlDiv_v2's first
 * element 100 too large, which adam_update's result shows;
 * bn_invstd_wrong doubles the training batch norm's saved invstd of
 * channel 0 (y is right), which the saved output and the running variance
 * the plugin derives from it show.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnnl_standin.h"
#include "cnnl_train_api.h"

#define TR_PROTO(ret, name, params) SI_API ret name params;
MLU_CNNL_TRAIN_FUNCS(TR_PROTO)
MLU_CNNL_FUNCS(TR_PROTO) /* cnnlSetTensorDescriptorEx, from cnnl_standin.c */
#undef TR_PROTO

#define TR_DIV_WORKSPACE 128

enum tr_kind { TR_TRANSFORM, TR_SQRT, TR_DIV };

struct tr_job {
    enum tr_kind kind;
    struct cnnlTensorStruct a, b, c;
    const char *ap, *bp;
    char *cp;
    double alpha, beta;
    char *ws;
    size_t ws_n;
};

/* sqrt by Newton's iteration from above (the stand-in does not link
 * libm); NaN for a negative x, like sqrt(). */
static double tr_sqrt(double x)
{
    double y;

    if (isnan(x) || x < 0)
        return NAN;
    if (x == 0 || isinf(x))
        return x;
    y = x > 1 ? x : 1;
    for (int i = 0; i < 4096; i++) {
        double z = 0.5 * (y + x / y);
        if (z >= y)
            break;
        y = z;
    }
    return y;
}

static void tr_run(void *arg)
{
    struct tr_job *j = arg;
    size_t span, n = nn_numel(&j->c, &span);

    if (j->ws)
        memset(j->ws, 0x5a, j->ws_n);
    for (size_t k = 0; k < n; k++) {
        double x = nn_load(&j->a, j->ap + nn_offset(&j->a, k)), v;

        if (j->kind == TR_TRANSFORM) {
            v = j->alpha * x + j->beta;
        } else if (j->kind == TR_SQRT) {
            v = tr_sqrt(x);
        } else {
            v = x / nn_load(&j->b, j->bp + nn_offset(&j->b, k));
            if (k == 0 && si_fault("div_wrong"))
                v += 100;
        }
        nn_store(&j->c, j->cp + nn_offset(&j->c, k), v);
    }
}

static bool tr_float(const struct cnnlTensorStruct *t)
{
    return t->dt == CNNL_DTYPE_FLOAT || t->dt == CNNL_DTYPE_HALF;
}

static bool tr_same(const struct cnnlTensorStruct *x,
                    const struct cnnlTensorStruct *y)
{
    return x && y && x->set && y->set && x->rank == y->rank &&
           x->dt == y->dt &&
           !memcmp(x->dims, y->dims, (size_t)x->rank * sizeof(int));
}

static bool tr_mem(const struct cnnlTensorStruct *t, const void *p, int dev)
{
    size_t span;

    nn_numel(t, &span);
    return p && si_device_mem(p, span, dev);
}

/* Checks and queues j (freed here on failure). */
static cnnlStatus_t tr_launch(cnnlHandle_t h, struct tr_job *j)
{
    int dev = si_current();

    if (!h || !h->q || dev < 0 || si_queue_device(h->q) != dev) {
        free(j);
        return CNNL_STATUS_NOT_INITIALIZED;
    }
    if (!tr_mem(&j->a, j->ap, dev) || !tr_mem(&j->c, j->cp, dev) ||
        (j->kind == TR_DIV && !tr_mem(&j->b, j->bp, dev)) ||
        (j->ws && !si_device_mem(j->ws, j->ws_n, dev))) {
        free(j);
        return CNNL_STATUS_BAD_PARAM;
    }
    return si_enqueue(h->q, tr_run, j) == cnrtSuccess
               ? CNNL_STATUS_SUCCESS
               : CNNL_STATUS_EXECUTION_FAILED;
}

static bool tr_prefer_ok(cnnlComputationPreference_t p)
{
    return p == CNNL_COMPUTATION_FAST || p == CNNL_COMPUTATION_HIGH_PRECISION;
}

SI_API cnnlStatus_t cnnlTransform(cnnlHandle_t handle, const void *alpha,
                                  const cnnlTensorDescriptor_t x_desc,
                                  const void *x, const void *beta, void *y)
{
    struct tr_job *j;
    float f;

    NN_ARMED("cnnlTransform");
    if (!x_desc || !x_desc->set || !tr_float(x_desc) || !alpha || !beta)
        return CNNL_STATUS_BAD_PARAM;
    if (!(j = calloc(1, sizeof(*j))))
        return CNNL_STATUS_ALLOC_FAILED;
    j->kind = TR_TRANSFORM;
    j->a = j->c = *x_desc;
    j->ap = x;
    j->cp = y;
    memcpy(&f, alpha, sizeof(f));
    j->alpha = f;
    memcpy(&f, beta, sizeof(f));
    j->beta = f;
    return tr_launch(handle, j);
}

SI_API cnnlStatus_t cnnlSqrt_v2(cnnlHandle_t handle,
                                cnnlComputationPreference_t prefer,
                                const cnnlTensorDescriptor_t x_desc,
                                const void *x,
                                const cnnlTensorDescriptor_t y_desc, void *y)
{
    struct tr_job *j;

    NN_ARMED("cnnlSqrt_v2");
    if (!tr_prefer_ok(prefer) || !tr_same(x_desc, y_desc) || !tr_float(x_desc))
        return CNNL_STATUS_BAD_PARAM;
    if (!(j = calloc(1, sizeof(*j))))
        return CNNL_STATUS_ALLOC_FAILED;
    j->kind = TR_SQRT;
    j->a = *x_desc;
    j->c = *y_desc;
    j->ap = x;
    j->cp = y;
    return tr_launch(handle, j);
}

SI_API cnnlStatus_t cnnlGetDivWorkspaceSize(cnnlHandle_t handle,
                                            const cnnlTensorDescriptor_t a_desc,
                                            const cnnlTensorDescriptor_t b_desc,
                                            const cnnlTensorDescriptor_t c_desc,
                                            size_t *size)
{
    NN_ARMED("cnnlGetDivWorkspaceSize");
    if (!handle || !size || !tr_same(a_desc, b_desc) ||
        !tr_same(a_desc, c_desc))
        return CNNL_STATUS_BAD_PARAM;
    *size = TR_DIV_WORKSPACE;
    return CNNL_STATUS_SUCCESS;
}

SI_API cnnlStatus_t cnnlDiv_v2(cnnlHandle_t handle,
                               cnnlComputationPreference_t prefer,
                               const cnnlTensorDescriptor_t a_desc,
                               const void *a,
                               const cnnlTensorDescriptor_t b_desc,
                               const void *b, void *workspace,
                               size_t workspace_size,
                               const cnnlTensorDescriptor_t c_desc, void *c)
{
    struct tr_job *j;

    NN_ARMED("cnnlDiv_v2");
    if (!tr_prefer_ok(prefer) || !tr_same(a_desc, b_desc) ||
        !tr_same(a_desc, c_desc) || !tr_float(a_desc))
        return CNNL_STATUS_BAD_PARAM;
    if (!workspace || workspace_size < TR_DIV_WORKSPACE)
        return CNNL_STATUS_BAD_PARAM;
    if (!(j = calloc(1, sizeof(*j))))
        return CNNL_STATUS_ALLOC_FAILED;
    j->kind = TR_DIV;
    j->a = *a_desc;
    j->b = *b_desc;
    j->c = *c_desc;
    j->ap = a;
    j->bp = b;
    j->cp = c;
    j->ws = workspace;
    j->ws_n = workspace_size;
    return tr_launch(handle, j);
}

/* ---- layer norm ------------------------------------------------------------ */

/*
 * cnnlLayerNormForward / cnnlLayerNormBackward_v2 over the dims [axis,
 * rank) of x: per row mean, biased variance, rstd = 1 / sqrt(var + eps),
 * y = (x - mean) rstd w + b (no affine with a NULL w_desc); the backward,
 * from the saved statistics, dx = rstd (g - mean(g) - xhat mean(g xhat))
 * with g = dy w, dw = sum over rows of dy xhat, db = sum of dy. Each asks
 * for TR_LN_WORKSPACE bytes.
 */
#define TR_LN_WORKSPACE 64

struct ln_job {
    bool bwd;
    struct cnnlTensorStruct x, y, w, m, dy; /* y: y or dx */
    bool affine;
    size_t rows, cols;
    const char *xp, *wp, *bp, *dyp;
    char *yp, *mp, *rp, *dwp, *dbp; /* forward: mp/rp written; backward: read */
    float eps;
    char *ws;
    size_t ws_n;
};

static double ln_get(const struct cnnlTensorStruct *t, const char *p, size_t k)
{
    return nn_load(t, p + nn_offset(t, k));
}

static void ln_put(const struct cnnlTensorStruct *t, char *p, size_t k,
                   double v)
{
    nn_store(t, p + nn_offset(t, k), v);
}

static void ln_run(void *arg)
{
    struct ln_job *j = arg;
    size_t R = j->rows, C = j->cols;

    memset(j->ws, 0x3c, j->ws_n);
    if (!j->bwd) {
        for (size_t r = 0; r < R; r++) {
            double mean = 0, var = 0, rstd;
            for (size_t c = 0; c < C; c++)
                mean += ln_get(&j->x, j->xp, r * C + c);
            mean /= (double)C;
            for (size_t c = 0; c < C; c++) {
                double d = ln_get(&j->x, j->xp, r * C + c) - mean;
                var += d * d;
            }
            var /= (double)C;
            rstd = 1 / tr_sqrt(var + (double)j->eps);
            for (size_t c = 0; c < C; c++) {
                double v = (ln_get(&j->x, j->xp, r * C + c) - mean) * rstd;
                if (j->affine)
                    v = v * ln_get(&j->w, j->wp, c) + ln_get(&j->w, j->bp, c);
                ln_put(&j->y, j->yp, r * C + c, v);
            }
            if (j->mp)
                ln_put(&j->m, j->mp, r, mean);
            if (j->rp)
                ln_put(&j->m, j->rp, r, rstd);
        }
        return;
    }
    for (size_t c = 0; c < C; c++) {
        ln_put(&j->w, j->dwp, c, 0);
        ln_put(&j->w, j->dbp, c, 0);
    }
    /* the column sums in double, stored once */
    double *dw = calloc(2 * C, sizeof(double));
    if (!dw)
        return;
    for (size_t r = 0; r < R; r++) {
        double mean = ln_get(&j->m, j->mp, r), rstd = ln_get(&j->m, j->rp, r);
        double sg = 0, sgx = 0;
        for (size_t c = 0; c < C; c++) {
            double xh = (ln_get(&j->x, j->xp, r * C + c) - mean) * rstd;
            double dy = ln_get(&j->dy, j->dyp, r * C + c);
            double gg = dy * ln_get(&j->w, j->wp, c);
            sg += gg;
            sgx += gg * xh;
            dw[c] += dy * xh;
            dw[C + c] += dy;
        }
        for (size_t c = 0; c < C; c++) {
            double xh = (ln_get(&j->x, j->xp, r * C + c) - mean) * rstd;
            double gg = ln_get(&j->dy, j->dyp, r * C + c) *
                        ln_get(&j->w, j->wp, c);
            ln_put(&j->y, j->yp, r * C + c,
                   rstd * (gg - sg / (double)C - xh * sgx / (double)C));
        }
    }
    for (size_t c = 0; c < C; c++) {
        ln_put(&j->w, j->dwp, c, dw[c]);
        ln_put(&j->w, j->dbp, c, dw[C + c]);
    }
    free(dw);
}

/* rows and cols of x split at axis; false when the descriptors disagree:
 * y like x, w (when given) the dims [axis, rank) of x, m rows elements,
 * all of one float dtype. */
static bool ln_shapes(const struct cnnlTensorStruct *x, int axis,
                      const struct cnnlTensorStruct *y,
                      const struct cnnlTensorStruct *w,
                      const struct cnnlTensorStruct *m, size_t *rows,
                      size_t *cols)
{
    size_t span, r = 1, c = 1;

    if (!x || !x->set || !tr_float(x) || axis < 0 || axis >= x->rank ||
        !tr_same(x, y) || !m || !m->set || m->dt != x->dt)
        return false;
    for (int i = 0; i < x->rank; i++)
        *(i < axis ? &r : &c) *= (size_t)x->dims[i];
    if (w && (!w->set || w->dt != x->dt || w->rank != x->rank - axis ||
              memcmp(w->dims, x->dims + axis, (size_t)w->rank * sizeof(int))))
        return false;
    if (nn_numel(m, &span) != r)
        return false;
    *rows = r;
    *cols = c;
    return true;
}

SI_API cnnlStatus_t cnnlGetLayerNormOpWorkspaceSize(
    cnnlHandle_t handle, int axis, const cnnlTensorDescriptor_t x_desc,
    size_t *size)
{
    NN_ARMED("cnnlGetLayerNormOpWorkspaceSize");
    if (!handle || !size || !x_desc || !x_desc->set || axis < 0 ||
        axis >= x_desc->rank)
        return CNNL_STATUS_BAD_PARAM;
    *size = TR_LN_WORKSPACE;
    return CNNL_STATUS_SUCCESS;
}

SI_API cnnlStatus_t cnnlGetLayerNormBackwardWorkspaceSize(
    cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc, int axis,
    size_t *size)
{
    NN_ARMED("cnnlGetLayerNormBackwardWorkspaceSize");
    if (!handle || !size || !x_desc || !x_desc->set || axis < 0 ||
        axis >= x_desc->rank)
        return CNNL_STATUS_BAD_PARAM;
    *size = TR_LN_WORKSPACE;
    return CNNL_STATUS_SUCCESS;
}

static cnnlStatus_t ln_launch(cnnlHandle_t h, struct ln_job *j)
{
    int dev = si_current();
    size_t span, wspan = 0, mspan;
    bool ok;

    if (!h || !h->q || dev < 0 || si_queue_device(h->q) != dev) {
        free(j);
        return CNNL_STATUS_NOT_INITIALIZED;
    }
    nn_numel(&j->m, &mspan);
    if (j->affine || j->bwd)
        nn_numel(&j->w, &wspan);
    ok = tr_mem(&j->x, j->xp, dev) && tr_mem(&j->y, j->yp, dev) &&
         si_device_mem(j->ws, j->ws_n, dev);
    if (j->affine || j->bwd)
        ok = ok && si_device_mem(j->wp, wspan, dev);
    if (j->affine)
        ok = ok && si_device_mem(j->bp, wspan, dev);
    if (j->mp)
        ok = ok && si_device_mem(j->mp, mspan, dev);
    if (j->rp)
        ok = ok && si_device_mem(j->rp, mspan, dev);
    if (j->bwd) {
        nn_numel(&j->dy, &span);
        ok = ok && tr_mem(&j->dy, j->dyp, dev) && j->mp && j->rp &&
             si_device_mem(j->dwp, wspan, dev) &&
             si_device_mem(j->dbp, wspan, dev);
    }
    if (!ok) {
        free(j);
        return CNNL_STATUS_BAD_PARAM;
    }
    return si_enqueue(h->q, ln_run, j) == cnrtSuccess
               ? CNNL_STATUS_SUCCESS
               : CNNL_STATUS_EXECUTION_FAILED;
}

SI_API cnnlStatus_t cnnlLayerNormForward(
    cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc, const void *x,
    int axis, const cnnlTensorDescriptor_t wb_desc, const void *weight,
    const void *bias, float eps, void *workspace, size_t workspace_size,
    const cnnlTensorDescriptor_t y_desc, void *y,
    const cnnlTensorDescriptor_t mean_rstd_desc, void *saved_mean,
    void *saved_rstd)
{
    struct ln_job *j;
    size_t rows, cols;

    NN_ARMED("cnnlLayerNormForward");
    if (!ln_shapes(x_desc, axis, y_desc, wb_desc, mean_rstd_desc, &rows,
                   &cols) ||
        (wb_desc && (!weight || !bias)) || (!wb_desc && (weight || bias)) ||
        !(eps >= 0))
        return CNNL_STATUS_BAD_PARAM;
    if (!workspace || workspace_size < TR_LN_WORKSPACE)
        return CNNL_STATUS_BAD_PARAM;
    if (!(j = calloc(1, sizeof(*j))))
        return CNNL_STATUS_ALLOC_FAILED;
    j->x = *x_desc;
    j->y = *y_desc;
    j->m = *mean_rstd_desc;
    j->affine = wb_desc != NULL;
    if (wb_desc)
        j->w = *wb_desc;
    j->rows = rows;
    j->cols = cols;
    j->xp = x;
    j->wp = weight;
    j->bp = bias;
    j->yp = y;
    j->mp = saved_mean;
    j->rp = saved_rstd;
    j->eps = eps;
    j->ws = workspace;
    j->ws_n = workspace_size;
    return ln_launch(handle, j);
}

SI_API cnnlStatus_t cnnlLayerNormBackward_v2(
    cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc, const void *x,
    int axis, const cnnlTensorDescriptor_t diff_z_desc, const void *diff_z,
    const cnnlTensorDescriptor_t w_desc, const void *weight,
    const cnnlTensorDescriptor_t mean_rstd_desc, const void *saved_mean,
    const void *saved_rstd, void *workspace, size_t workspace_size,
    const cnnlTensorDescriptor_t diff_x_desc, void *diff_x, void *diff_weight,
    void *diff_bias)
{
    struct ln_job *j;
    size_t rows, cols;

    NN_ARMED("cnnlLayerNormBackward_v2");
    if (!w_desc ||
        !ln_shapes(x_desc, axis, diff_x_desc, w_desc, mean_rstd_desc, &rows,
                   &cols) ||
        !tr_same(x_desc, diff_z_desc))
        return CNNL_STATUS_BAD_PARAM;
    if (!workspace || workspace_size < TR_LN_WORKSPACE)
        return CNNL_STATUS_BAD_PARAM;
    if (!(j = calloc(1, sizeof(*j))))
        return CNNL_STATUS_ALLOC_FAILED;
    j->bwd = true;
    j->x = *x_desc;
    j->y = *diff_x_desc;
    j->dy = *diff_z_desc;
    j->w = *w_desc;
    j->m = *mean_rstd_desc;
    j->rows = rows;
    j->cols = cols;
    j->xp = x;
    j->dyp = diff_z;
    j->wp = weight;
    j->mp = (char *)(uintptr_t)saved_mean;
    j->rp = (char *)(uintptr_t)saved_rstd;
    j->yp = diff_x;
    j->dwp = diff_weight;
    j->dbp = diff_bias;
    j->ws = workspace;
    j->ws_n = workspace_size;
    return ln_launch(handle, j);
}

/* ---- channels-last descriptors ----------------------------------------------
 *
 * cnnlSetTensorDescriptor and the transpose calls are the nn half's
 * (cnnl_standin_nn.c); the descriptor remembers whether it was set NHWC. */

static bool tr_is_nhwc(const struct cnnlTensorStruct *t)
{
    return t->nhwc;
}

/* ---- batch norm (NHWC: the channel is the last dim) ------------------------- */

/*
 * Training: per channel the mean and biased variance over the other dims,
 * saved_invstd = 1 / sqrt(var + eps), y = (x - mean) invstd w + b; moving
 * statistics, when given, become (1 - momentum) moving + momentum batch
 * with the UNBIASED variance (a guess at CNNL: not verified; the plugin
 * passes none). Inference: y from the given mean and var. Backward, from
 * the saved statistics: db = sum dy, dw = sum dy xhat, dx = w invstd (dy -
 * db / M - xhat dw / M). alpha and beta must be NULL (no blending).
 */
struct bn_job {
    int kind; /* 0 training, 1 inference, 2 backward */
    struct cnnlTensorStruct x, y, dy, p;
    const char *xp, *dyp, *wp, *bp, *mp, *vp;
    char *yp, *mmp, *mvp, *smp, *sip, *dwp, *dbp;
    float eps, momentum;
};

static void bn_run(void *arg)
{
    struct bn_job *j = arg;
    size_t span, n = nn_numel(&j->x, &span);
    size_t C = (size_t)j->x.dims[j->x.rank - 1], M = n / C;

    for (size_t c = 0; c < C; c++) {
        double mean = 0, var = 0, inv, w = ln_get(&j->p, j->wp, c);
        if (j->kind == 1) {
            mean = ln_get(&j->p, j->mp, c);
            inv = 1 / tr_sqrt(ln_get(&j->p, j->vp, c) + (double)j->eps);
        } else if (j->kind == 2) {
            mean = ln_get(&j->p, j->mp, c);
            inv = ln_get(&j->p, j->vp, c);
        } else {
            for (size_t m = 0; m < M; m++)
                mean += ln_get(&j->x, j->xp, m * C + c);
            mean /= (double)M;
            for (size_t m = 0; m < M; m++) {
                double d = ln_get(&j->x, j->xp, m * C + c) - mean;
                var += d * d;
            }
            inv = 1 / tr_sqrt(var / (double)M + (double)j->eps);
            if (j->smp)
                ln_put(&j->p, j->smp, c, mean);
            if (j->sip)
                ln_put(&j->p, j->sip, c,
                       c == 0 && si_fault("bn_invstd_wrong") ? 2 * inv : inv);
            if (j->mmp && j->mvp && M > 1) {
                double f = j->momentum;
                ln_put(&j->p, j->mmp, c,
                       (1 - f) * ln_get(&j->p, j->mmp, c) + f * mean);
                ln_put(&j->p, j->mvp, c,
                       (1 - f) * ln_get(&j->p, j->mvp, c) +
                           f * var / (double)(M - 1));
            }
        }
        if (j->kind != 2) {
            double bias = ln_get(&j->p, j->bp, c);
            for (size_t m = 0; m < M; m++)
                ln_put(&j->y, j->yp, m * C + c,
                       (ln_get(&j->x, j->xp, m * C + c) - mean) * inv * w +
                           bias);
            continue;
        }
        double sdy = 0, sdyx = 0;
        for (size_t m = 0; m < M; m++) {
            double dy = ln_get(&j->dy, j->dyp, m * C + c);
            sdy += dy;
            sdyx += dy * (ln_get(&j->x, j->xp, m * C + c) - mean) * inv;
        }
        for (size_t m = 0; m < M; m++) {
            double xh = (ln_get(&j->x, j->xp, m * C + c) - mean) * inv;
            double dy = ln_get(&j->dy, j->dyp, m * C + c);
            ln_put(&j->y, j->yp, m * C + c,
                   w * inv *
                       (dy - sdy / (double)M - xh * sdyx / (double)M));
        }
        ln_put(&j->p, j->dwp, c, sdyx);
        ln_put(&j->p, j->dbp, c, sdy);
    }
}

/* x (and y) NHWC of one float dtype, p [C] of that dtype. */
static bool bn_descs(const struct cnnlTensorStruct *x,
                     const struct cnnlTensorStruct *y,
                     const struct cnnlTensorStruct *p)
{
    return x && x->set && tr_float(x) && tr_is_nhwc(x) && tr_same(x, y) &&
           tr_is_nhwc(y) && p && p->set && p->dt == x->dt && p->rank == 1 &&
           p->dims[0] == x->dims[3] && x->dims[3] > 0 &&
           x->dims[0] > 0 && x->dims[1] > 0 && x->dims[2] > 0;
}

static cnnlStatus_t bn_launch(cnnlHandle_t h, struct bn_job *j)
{
    int dev = si_current();
    size_t ps;
    bool ok;

    if (!h || !h->q || dev < 0 || si_queue_device(h->q) != dev) {
        free(j);
        return CNNL_STATUS_NOT_INITIALIZED;
    }
    nn_numel(&j->p, &ps);
#define BN_MEM(ptr) (!(ptr) || si_device_mem((ptr), ps, dev))
    ok = tr_mem(&j->x, j->xp, dev) && tr_mem(&j->y, j->yp, dev) &&
         j->wp && BN_MEM(j->wp) && BN_MEM(j->mp) && BN_MEM(j->vp) &&
         BN_MEM(j->mmp) && BN_MEM(j->mvp) && BN_MEM(j->smp) &&
         BN_MEM(j->sip) && BN_MEM(j->dwp) && BN_MEM(j->dbp);
    if (j->kind != 2)
        ok = ok && j->bp && BN_MEM(j->bp);
    if (j->kind == 1)
        ok = ok && j->mp && j->vp;
    if (j->kind == 2)
        ok = ok && tr_mem(&j->dy, j->dyp, dev) && j->mp && j->vp && j->dwp &&
             j->dbp;
#undef BN_MEM
    if (!ok) {
        free(j);
        return CNNL_STATUS_BAD_PARAM;
    }
    return si_enqueue(h->q, bn_run, j) == cnrtSuccess
               ? CNNL_STATUS_SUCCESS
               : CNNL_STATUS_EXECUTION_FAILED;
}

SI_API cnnlStatus_t cnnlBatchNormForwardTraining(
    cnnlHandle_t handle, const void *alpha, const void *beta,
    const cnnlTensorDescriptor_t x_desc, const void *x,
    const cnnlTensorDescriptor_t wbmv_desc, const void *weight,
    const void *bias, void *moving_mean, void *moving_var, float eps,
    float momentum, const cnnlTensorDescriptor_t y_desc, void *y,
    void *saved_mean, void *saved_invstd)
{
    struct bn_job *j;

    NN_ARMED("cnnlBatchNormForwardTraining");
    if (alpha || beta || !bn_descs(x_desc, y_desc, wbmv_desc) ||
        !(eps >= 0) || !(momentum >= 0 && momentum <= 1) ||
        (!moving_mean) != (!moving_var))
        return CNNL_STATUS_BAD_PARAM;
    if (!(j = calloc(1, sizeof(*j))))
        return CNNL_STATUS_ALLOC_FAILED;
    j->kind = 0;
    j->x = *x_desc;
    j->y = *y_desc;
    j->p = *wbmv_desc;
    j->xp = x;
    j->wp = weight;
    j->bp = bias;
    j->mmp = moving_mean;
    j->mvp = moving_var;
    j->yp = y;
    j->smp = saved_mean;
    j->sip = saved_invstd;
    j->eps = eps;
    j->momentum = momentum;
    return bn_launch(handle, j);
}

SI_API cnnlStatus_t cnnlBatchNormForwardInference(
    cnnlHandle_t handle, const void *alpha, const void *beta,
    const cnnlTensorDescriptor_t x_desc, const void *x,
    const cnnlTensorDescriptor_t wbmv_desc, const void *weight,
    const void *bias, const void *estimated_mean, const void *estimated_var,
    float eps, const cnnlTensorDescriptor_t y_desc, void *y)
{
    struct bn_job *j;

    NN_ARMED("cnnlBatchNormForwardInference");
    if (alpha || beta || !bn_descs(x_desc, y_desc, wbmv_desc) || !(eps >= 0))
        return CNNL_STATUS_BAD_PARAM;
    if (!(j = calloc(1, sizeof(*j))))
        return CNNL_STATUS_ALLOC_FAILED;
    j->kind = 1;
    j->x = *x_desc;
    j->y = *y_desc;
    j->p = *wbmv_desc;
    j->xp = x;
    j->wp = weight;
    j->bp = bias;
    j->mp = estimated_mean;
    j->vp = estimated_var;
    j->yp = y;
    j->eps = eps;
    return bn_launch(handle, j);
}

SI_API cnnlStatus_t cnnlBatchNormBackward(
    cnnlHandle_t handle, const void *alpha_data_diff,
    const void *beta_data_diff, const void *alpha_param_diff,
    const void *beta_param_diff, const cnnlTensorDescriptor_t x_desc,
    const void *x, const cnnlTensorDescriptor_t diff_y_desc,
    const void *diff_y, const cnnlTensorDescriptor_t wbmv_desc,
    const void *weight, const void *saved_mean, const void *saved_invstd,
    float eps, const cnnlTensorDescriptor_t diff_x_desc, void *diff_x,
    void *diff_weight, void *diff_bias)
{
    struct bn_job *j;

    NN_ARMED("cnnlBatchNormBackward");
    if (alpha_data_diff || beta_data_diff || alpha_param_diff ||
        beta_param_diff || !bn_descs(x_desc, diff_x_desc, wbmv_desc) ||
        !tr_same(x_desc, diff_y_desc) || !tr_is_nhwc(diff_y_desc) ||
        !(eps >= 0))
        return CNNL_STATUS_BAD_PARAM;
    if (!(j = calloc(1, sizeof(*j))))
        return CNNL_STATUS_ALLOC_FAILED;
    j->kind = 2;
    j->x = *x_desc;
    j->y = *diff_x_desc;
    j->dy = *diff_y_desc;
    j->p = *wbmv_desc;
    j->xp = x;
    j->dyp = diff_y;
    j->wp = weight;
    j->mp = saved_mean;
    j->vp = saved_invstd;
    j->yp = diff_x;
    j->dwp = diff_weight;
    j->dbp = diff_bias;
    j->eps = eps;
    return bn_launch(handle, j);
}
