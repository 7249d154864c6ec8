/*
 * The stand-in's CNNL operators for the plugin's mlu_kernels_train.c,
 * computed on the host (shared parts: cnnl_standin.h, standin.h): the
 * elementwise calls the optimizer updates are composed of.
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
 * Planted fault (CNRT_STANDIN_FAULT=div_wrong): cnnlDiv_v2's first
 * element is 100 too large, which adam_update's result shows.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnnl_standin.h"
#include "cnnl_train_api.h"

#define TR_PROTO(ret, name, params) SI_API ret name params;
MLU_CNNL_TRAIN_FUNCS(TR_PROTO)
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

    if (!(x > 0) || isinf(x))
        return x == 0 || isinf(x) ? x : NAN;
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
