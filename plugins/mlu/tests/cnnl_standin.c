/*
 * Stand-in for the CNNL entry points the mlu plugin calls (test code only,
 * in the same library as cnrt_standin.c). Checks: a handle must have a
 * queue of the current device; every data pointer must be device memory of
 * that device; the workspace must be device memory of at least the size
 * cnnlGetOpTensorWorkspaceSize asked for (it asks for 256 bytes, so the
 * workspace path is always taken); the three op-tensor descriptors must
 * have the same dims. The computation runs on the queue's worker, in
 * order with the rest of its work, and writes the workspace first so that
 * memory given back early would be caught by the sanitizers.
 *
 * Also the optional elementwise calls (cnrt_api.h's MLU_CNNL_EW_FUNCS:
 * exp, log base e, neg, abs, copy) and the sigmoid and tanh activation
 * modes, each with x and y of one dtype and the same dims.
 *
 * Planted fault (CNRT_STANDIN_FAULT): add_wrong makes cnnlOpTensor's ADD
 * with alpha2 1 one too large in its first element (add shows it);
 * sub_wrong does the same to an ADD with alpha2 -1 (subtract shows it,
 * add does not).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <keel/kit.h> /* float16 conversions */

#include "cnnl_standin.h"

#define NN_PROTO(ret, name, params) SI_API ret name params;
MLU_CNNL_FUNCS(NN_PROTO)
MLU_CNNL_EW_FUNCS(NN_PROTO)
#undef NN_PROTO

#define NN_WORKSPACE 256

/* struct cnnlContext, struct cnnlTensorStruct: cnnl_standin.h */

struct cnnlOpTensorStruct {
    bool set;
    cnnlOpTensorDesc_t op;
};

struct cnnlActivationStruct {
    bool set;
    cnnlActivationMode_t mode;
};


static const char *const nn_names[] = {
    "CNNL_STATUS_SUCCESS",        "CNNL_STATUS_NOT_INITIALIZED",
    "CNNL_STATUS_ALLOC_FAILED",   "CNNL_STATUS_BAD_PARAM",
    "CNNL_STATUS_INTERNAL_ERROR", "CNNL_STATUS_ARCH_MISMATCH",
    "CNNL_STATUS_EXECUTION_FAILED", "CNNL_STATUS_NOT_SUPPORTED",
    "CNNL_STATUS_NUMERICAL_OVERFLOW",
};

SI_API const char *cnnlGetErrorString(cnnlStatus_t status)
{
    if (status >= 0 && status < (int)(sizeof(nn_names) / sizeof(nn_names[0])))
        return nn_names[status];
    return "CNNL_STATUS_BAD_PARAM";
}

SI_API cnnlStatus_t cnnlCreate(cnnlHandle_t *handle)
{
    NN_ARMED("cnnlCreate");
    if (!handle || si_current() < 0)
        return CNNL_STATUS_NOT_INITIALIZED;
    *handle = calloc(1, sizeof(**handle));
    return *handle ? CNNL_STATUS_SUCCESS : CNNL_STATUS_ALLOC_FAILED;
}

SI_API cnnlStatus_t cnnlDestroy(cnnlHandle_t handle)
{
    if (!handle)
        return CNNL_STATUS_BAD_PARAM;
    free(handle);
    return CNNL_STATUS_SUCCESS;
}

SI_API cnnlStatus_t cnnlSetQueue(cnnlHandle_t handle, cnrtQueue_t queue)
{
    if (!handle || si_queue_device(queue) < 0)
        return CNNL_STATUS_BAD_PARAM;
    handle->q = queue;
    return CNNL_STATUS_SUCCESS;
}

/* ---- descriptors ---------------------------------------------------------- */

#define NN_CREATE(fn, type)                                   \
    SI_API cnnlStatus_t fn(type *desc)                        \
    {                                                         \
        if (!desc)                                            \
            return CNNL_STATUS_BAD_PARAM;                     \
        *desc = calloc(1, sizeof(**desc));                    \
        return *desc ? CNNL_STATUS_SUCCESS : CNNL_STATUS_ALLOC_FAILED; \
    }
#define NN_DESTROY(fn, type)                                  \
    SI_API cnnlStatus_t fn(type desc)                         \
    {                                                         \
        if (!desc)                                            \
            return CNNL_STATUS_BAD_PARAM;                     \
        free(desc);                                           \
        return CNNL_STATUS_SUCCESS;                           \
    }
NN_CREATE(cnnlCreateTensorDescriptor, cnnlTensorDescriptor_t)
NN_DESTROY(cnnlDestroyTensorDescriptor, cnnlTensorDescriptor_t)
NN_CREATE(cnnlCreateOpTensorDescriptor, cnnlOpTensorDescriptor_t)
NN_DESTROY(cnnlDestroyOpTensorDescriptor, cnnlOpTensorDescriptor_t)
NN_CREATE(cnnlCreateActivationDescriptor, cnnlActivationDescriptor_t)
NN_DESTROY(cnnlDestroyActivationDescriptor, cnnlActivationDescriptor_t)

SI_API cnnlStatus_t cnnlSetTensorDescriptorEx(cnnlTensorDescriptor_t desc,
                                              cnnlTensorLayout_t layout,
                                              cnnlDataType_t dtype, int dimNb,
                                              const int dimSize[],
                                              const int dimStride[])
{
    if (!desc || layout != CNNL_LAYOUT_ARRAY || dimNb < 1 || dimNb > 8 ||
        !dimSize || !dimStride)
        return CNNL_STATUS_BAD_PARAM;
    if (dtype != CNNL_DTYPE_FLOAT && dtype != CNNL_DTYPE_HALF &&
        dtype != CNNL_DTYPE_INT32)
        return CNNL_STATUS_NOT_SUPPORTED;
    for (int i = 0; i < dimNb; i++) {
        if (dimSize[i] < 0 || dimStride[i] < 0)
            return CNNL_STATUS_BAD_PARAM;
        desc->dims[i] = dimSize[i];
        desc->strides[i] = dimStride[i];
    }
    desc->dt = dtype;
    desc->rank = dimNb;
    desc->nhwc = false;
    desc->set = true;
    return CNNL_STATUS_SUCCESS;
}

SI_API cnnlStatus_t cnnlSetOpTensorDescriptor(cnnlOpTensorDescriptor_t desc,
                                              cnnlOpTensorDesc_t op,
                                              cnnlDataType_t compute,
                                              cnnlNanPropagation_t nan)
{
    (void)nan;
    if (!desc || (op != CNNL_OP_TENSOR_ADD && op != CNNL_OP_TENSOR_MUL) ||
        (compute != CNNL_DTYPE_FLOAT && compute != CNNL_DTYPE_INT32))
        return CNNL_STATUS_BAD_PARAM;
    desc->op = op;
    desc->set = true;
    return CNNL_STATUS_SUCCESS;
}

SI_API cnnlStatus_t cnnlSetActivationDescriptor_v2(
    cnnlActivationDescriptor_t desc, cnnlActivationMode_t mode,
    cnnlActivationPreference_t pref, cnnlNanPropagation_t nan, float coef)
{
    (void)pref;
    (void)nan;
    (void)coef;
    if (!desc || (mode != CNNL_ACTIVATION_RELU &&
                  mode != MLU_CNNL_ACTIVATION_SIGMOID &&
                  mode != MLU_CNNL_ACTIVATION_TANH))
        return CNNL_STATUS_BAD_PARAM;
    desc->mode = mode;
    desc->set = true;
    return CNNL_STATUS_SUCCESS;
}

/* ---- computing ----------------------------------------------------------- */

size_t nn_dt_bytes(cnnlDataType_t dt)
{
    return dt == CNNL_DTYPE_HALF ? 2 : 4;
}

/* Elements and the byte span of a descriptor's view. */
size_t nn_numel(const struct cnnlTensorStruct *t, size_t *span)
{
    size_t n = 1, last = 0;

    for (int i = 0; i < t->rank; i++) {
        n *= (size_t)t->dims[i];
        if (t->dims[i] > 0)
            last += (size_t)(t->dims[i] - 1) * (size_t)t->strides[i];
    }
    *span = (last + 1) * nn_dt_bytes(t->dt);
    return n;
}

/* Byte offset of the k-th element in row-major order. */
size_t nn_offset(const struct cnnlTensorStruct *t, size_t k)
{
    size_t off = 0;

    for (int i = t->rank - 1; i >= 0; i--) {
        size_t d = (size_t)t->dims[i];
        off += (k % d) * (size_t)t->strides[i];
        k /= d;
    }
    return off * nn_dt_bytes(t->dt);
}

double nn_load(const struct cnnlTensorStruct *t, const char *p)
{
    if (t->dt == CNNL_DTYPE_FLOAT) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    if (t->dt == CNNL_DTYPE_HALF) {
        uint16_t h;
        memcpy(&h, p, 2);
        return keel_kit_f16_to_f32(h);
    }
    int32_t i;
    memcpy(&i, p, 4);
    return i;
}

void nn_store(const struct cnnlTensorStruct *t, char *p, double v)
{
    if (t->dt == CNNL_DTYPE_FLOAT) {
        float f = (float)v;
        memcpy(p, &f, 4);
    } else if (t->dt == CNNL_DTYPE_HALF) {
        uint16_t h = keel_kit_f32_to_f16((float)v);
        memcpy(p, &h, 2);
    } else {
        /* int32 wraps like the device would */
        int32_t i = (int32_t)(uint32_t)(int64_t)v;
        memcpy(p, &i, 4);
    }
}

enum nn_kind {
    NN_ADD, NN_MUL, NN_RELU, NN_SIGMOID, NN_TANH, NN_EXP, NN_LOG, NN_NEG,
    NN_ABS, NN_COPY,
};

/* The one-input kinds: y = f(x). */
static double nn_unary(enum nn_kind kind, double x)
{
    switch (kind) {
    case NN_RELU: return x > 0 ? x : 0;
    case NN_SIGMOID: return 1 / (1 + exp(-x));
    case NN_TANH: return tanh(x);
    case NN_EXP: return exp(x);
    case NN_LOG: return log(x);
    case NN_NEG: return -x;
    case NN_ABS: return fabs(x);
    default: return x; /* NN_COPY */
    }
}

struct nn_job {
    enum nn_kind kind;
    struct cnnlTensorStruct a, b, c;
    const char *ap, *bp;
    char *cp;
    char *ws;
    size_t ws_n;
    double alpha1, alpha2, beta; /* op tensor: c = a1 a op a2 b + beta c */
};

static void nn_run(void *arg)
{
    struct nn_job *j = arg;
    size_t span, n = nn_numel(&j->c, &span);

    if (j->ws)
        memset(j->ws, 0xa5, j->ws_n);
    for (size_t k = 0; k < n; k++) {
        double x = nn_load(&j->a, j->ap + nn_offset(&j->a, k)), v;
        if (j->kind != NN_ADD && j->kind != NN_MUL) {
            /* int32 neg and abs wrap (-INT32_MIN is INT32_MIN), as
             * nn_store does */
            v = nn_unary(j->kind, x);
        } else {
            double y = nn_load(&j->b, j->bp + nn_offset(&j->b, k));
            if (j->alpha1 != 1 || j->alpha2 != 1 || j->beta != 0) {
                /* scaled: CNNL's c = alpha1 a op alpha2 b + beta c; c is
                 * read only when beta is not 0 */
                x *= j->alpha1;
                y *= j->alpha2;
            }
            if (j->c.dt == CNNL_DTYPE_INT32)
                /* scaled int32 operands are exact in int64 (|alpha| 1
                 * here); the sum or product wraps modulo 2^32 */
                v = j->kind == NN_ADD
                        ? (double)(int32_t)((uint32_t)(int64_t)x +
                                            (uint32_t)(int64_t)y)
                        : (double)(int32_t)((uint32_t)(int64_t)x *
                                            (uint32_t)(int64_t)y);
            else
                v = j->kind == NN_ADD ? x + y : x * y;
            if (k == 0 && j->kind == NN_ADD && j->alpha2 == 1 &&
                si_fault("add_wrong"))
                v += 1;
            if (k == 0 && j->kind == NN_ADD && j->alpha2 == -1 &&
                si_fault("sub_wrong"))
                v += 1;
            if (j->beta != 0)
                v += j->beta * nn_load(&j->c, j->cp + nn_offset(&j->c, k));
        }
        nn_store(&j->c, j->cp + nn_offset(&j->c, k), v);
    }
}

static bool same_dims(const struct cnnlTensorStruct *x,
                      const struct cnnlTensorStruct *y)
{
    return x->rank == y->rank && x->dt == y->dt &&
           !memcmp(x->dims, y->dims, (size_t)x->rank * sizeof(int));
}

/* The checks every launch makes; the job is queued on the handle's queue. */
static cnnlStatus_t nn_launch(cnnlHandle_t h, struct nn_job *j)
{
    int dev = si_current();
    size_t span;

    if (!h || !h->q || dev < 0 || si_queue_device(h->q) != dev) {
        free(j);
        return CNNL_STATUS_NOT_INITIALIZED;
    }
    nn_numel(&j->a, &span);
    if (!si_device_mem(j->ap, span, dev))
        goto bad;
    if (j->kind == NN_ADD || j->kind == NN_MUL) {
        nn_numel(&j->b, &span);
        if (!si_device_mem(j->bp, span, dev))
            goto bad;
    }
    nn_numel(&j->c, &span);
    if (!si_device_mem(j->cp, span, dev))
        goto bad;
    if (j->ws && !si_device_mem(j->ws, j->ws_n, dev))
        goto bad;
    return si_enqueue(h->q, nn_run, j) == cnrtSuccess
               ? CNNL_STATUS_SUCCESS
               : CNNL_STATUS_EXECUTION_FAILED;
bad:
    free(j);
    return CNNL_STATUS_BAD_PARAM;
}

SI_API cnnlStatus_t cnnlGetOpTensorWorkspaceSize(
    cnnlHandle_t handle, const cnnlTensorDescriptor_t a,
    const cnnlTensorDescriptor_t b, const cnnlTensorDescriptor_t c,
    size_t *size)
{
    NN_ARMED("cnnlGetOpTensorWorkspaceSize");
    if (!handle || !a || !b || !c || !size || !a->set || !b->set || !c->set)
        return CNNL_STATUS_BAD_PARAM;
    *size = NN_WORKSPACE;
    return CNNL_STATUS_SUCCESS;
}

/* An op-tensor scaling factor: int for int32 operands, else float. */
static double nn_scalar(const struct cnnlTensorStruct *c, const void *p)
{
    if (c->dt == CNNL_DTYPE_INT32) {
        int i;
        memcpy(&i, p, sizeof(i));
        return i;
    }
    float f;
    memcpy(&f, p, sizeof(f));
    return f;
}

SI_API cnnlStatus_t cnnlOpTensor(
    cnnlHandle_t handle, const cnnlOpTensorDescriptor_t op, const void *alpha1,
    const cnnlTensorDescriptor_t a, const void *a_ptr, const void *alpha2,
    const cnnlTensorDescriptor_t b, const void *b_ptr, void *workspace,
    size_t workspace_size, const void *beta, const cnnlTensorDescriptor_t c,
    void *c_ptr)
{
    struct nn_job *j;

    NN_ARMED("cnnlOpTensor");
    if (!op || !op->set || !a || !b || !c || !alpha1 || !alpha2 || !beta ||
        !same_dims(a, b) || !same_dims(a, c))
        return CNNL_STATUS_BAD_PARAM;
    if (workspace_size < NN_WORKSPACE || !workspace)
        return CNNL_STATUS_BAD_PARAM;
    if (!(j = calloc(1, sizeof(*j))))
        return CNNL_STATUS_ALLOC_FAILED;
    j->kind = op->op == CNNL_OP_TENSOR_ADD ? NN_ADD : NN_MUL;
    j->alpha1 = nn_scalar(c, alpha1);
    j->alpha2 = nn_scalar(c, alpha2);
    j->beta = nn_scalar(c, beta);
    j->a = *a;
    j->b = *b;
    j->c = *c;
    j->ap = a_ptr;
    j->bp = b_ptr;
    j->cp = c_ptr;
    j->ws = workspace;
    j->ws_n = workspace_size;
    return nn_launch(handle, j);
}

SI_API cnnlStatus_t cnnlActivationForward(
    cnnlHandle_t handle, const cnnlActivationDescriptor_t desc,
    const void *alpha, const cnnlTensorDescriptor_t x, const void *x_ptr,
    const void *beta, const cnnlTensorDescriptor_t y, void *y_ptr)
{
    struct nn_job *j;

    (void)alpha;
    (void)beta;
    NN_ARMED("cnnlActivationForward");
    if (!desc || !desc->set || !x || !y || !same_dims(x, y))
        return CNNL_STATUS_BAD_PARAM;
    if (!(j = calloc(1, sizeof(*j))))
        return CNNL_STATUS_ALLOC_FAILED;
    j->kind = desc->mode == MLU_CNNL_ACTIVATION_SIGMOID ? NN_SIGMOID
              : desc->mode == MLU_CNNL_ACTIVATION_TANH  ? NN_TANH
                                                        : NN_RELU;
    j->a = *x;
    j->c = *y;
    j->ap = x_ptr;
    j->cp = y_ptr;
    return nn_launch(handle, j);
}

/* ---- the optional elementwise calls ---------------------------------------- */

/* Queues y = f(x) after the checks the calls share. */
static cnnlStatus_t nn_unary_call(cnnlHandle_t handle, enum nn_kind kind,
                                  bool float_only,
                                  const cnnlTensorDescriptor_t x,
                                  const void *x_ptr,
                                  const cnnlTensorDescriptor_t y, void *y_ptr)
{
    struct nn_job *j;

    if (!x || !y || !x->set || !y->set || !same_dims(x, y))
        return CNNL_STATUS_BAD_PARAM;
    if (float_only && x->dt == CNNL_DTYPE_INT32)
        return CNNL_STATUS_NOT_SUPPORTED;
    if (!(j = calloc(1, sizeof(*j))))
        return CNNL_STATUS_ALLOC_FAILED;
    j->kind = kind;
    j->a = *x;
    j->c = *y;
    j->ap = x_ptr;
    j->cp = y_ptr;
    return nn_launch(handle, j);
}

static bool nn_prefer_ok(int prefer)
{
    return prefer == 0 || prefer == 1; /* FAST, HIGH_PRECISION */
}

/* Left out of the partial stand-in (tests/standin-partial), which shows
 * that a Neuware lacking one entry point keeps the other kernels. */
#ifndef CNNL_STANDIN_WITHOUT_EXP
SI_API cnnlStatus_t cnnlExp_v2(cnnlHandle_t handle, int prefer,
                               const cnnlTensorDescriptor_t x_desc,
                               const void *x,
                               const cnnlTensorDescriptor_t y_desc, void *y)
{
    NN_ARMED("cnnlExp_v2");
    if (!nn_prefer_ok(prefer))
        return CNNL_STATUS_BAD_PARAM;
    return nn_unary_call(handle, NN_EXP, true, x_desc, x, y_desc, y);
}
#endif

SI_API cnnlStatus_t cnnlLog_v2(cnnlHandle_t handle, int prefer,
                               cnnlLogBase_t base,
                               const cnnlTensorDescriptor_t x_desc,
                               const void *x,
                               const cnnlTensorDescriptor_t y_desc, void *y)
{
    NN_ARMED("cnnlLog_v2");
    if (!nn_prefer_ok(prefer) || base != CNNL_LOG_E)
        return CNNL_STATUS_BAD_PARAM;
    return nn_unary_call(handle, NN_LOG, true, x_desc, x, y_desc, y);
}

SI_API cnnlStatus_t cnnlNegTensor(cnnlHandle_t handle,
                                  const cnnlTensorDescriptor_t x_desc,
                                  const void *x,
                                  const cnnlTensorDescriptor_t y_desc, void *y)
{
    NN_ARMED("cnnlNegTensor");
    return nn_unary_call(handle, NN_NEG, false, x_desc, x, y_desc, y);
}

SI_API cnnlStatus_t cnnlAbs(cnnlHandle_t handle,
                            const cnnlTensorDescriptor_t x_desc, const void *x,
                            const cnnlTensorDescriptor_t y_desc, void *y)
{
    NN_ARMED("cnnlAbs");
    return nn_unary_call(handle, NN_ABS, false, x_desc, x, y_desc, y);
}

SI_API cnnlStatus_t cnnlCopy(cnnlHandle_t handle,
                             const cnnlTensorDescriptor_t x_desc,
                             const void *x,
                             const cnnlTensorDescriptor_t y_desc, void *y)
{
    NN_ARMED("cnnlCopy");
    return nn_unary_call(handle, NN_COPY, false, x_desc, x, y_desc, y);
}
