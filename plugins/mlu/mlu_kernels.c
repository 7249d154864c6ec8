/*
 * keel Cambricon MLU plugin — kernels on CNNL (libcnnl.so, loaded at init
 * when CNRT has devices; KEEL_MLU_CNNL_LIBRARY overrides the name).
 *
 * add and multiply are cnnlOpTensor (c = alpha1*a op alpha2*b + beta*c with
 * alphas 1 and beta 0); subtract is its ADD with alpha2 = -1 (ADD is the
 * one op-tensor value verified, and x + (-1)*y is x - y exactly: negating
 * a float is exact, and in int32 both wrap modulo 2^32). relu, sigmoid
 * and tanh are cnnlActivationForward with an activation descriptor of
 * that mode. divide is cnnlDiv_v2 (with its workspace), sqrt cnnlSqrt_v2,
 * exp cnnlExp_v2, log cnnlLog_v2 (base e), neg cnnlNegTensor, abs cnnlAbs
 * and copy cnnlCopy (a strided view into the contiguous output, one
 * dtype). Those past add, multiply and relu are optional entry points
 * (cnrt_api.h's MLU_CNNL_EW_FUNCS, and cnnl_train_api.h's for divide and
 * sqrt), each resolved on its own: a library without one does not get
 * the kernels that call it offered and keeps the others. sigmoid and tanh
 * pass activation modes whose values are not verified (unverified_ops).
 * Every operand gets a tensor descriptor in
 * CNNL_LAYOUT_ARRAY with keel's shape and element strides
 * (cnnlSetTensorDescriptorEx). Each device has one cnnlHandle_t, made on
 * the first kernel and pointed at the launch's queue (cnnlSetQueue) under
 * the device's lock, so launches on different streams do not race for it.
 *
 * The op-tensor workspace comes from the core (keel_kernel_workspace, ABI
 * 1.3): stream-ordered memory the enqueued work may keep using after the
 * kernel returns. An older core offers none; then it is cnrtMalloc'd and
 * freed after cnrtQueueSync, so that launch waits.
 *
 * float32, float16 and int32 for add, subtract, multiply, neg, abs and
 * copy; the two float types for the others (the catalog's float-only ops,
 * and relu). Refused at phase 1 with NOT_SUPPORTED (the core then runs its
 * CPU fallback): mixed dtypes, other dtypes (copy's bool, int8, int64 ...:
 * no CNNL dtype value for them is verified), views with a negative stride
 * or a size or stride past INT_MAX (a CNNL descriptor cannot say them);
 * anything CNNL itself refuses comes back NOT_SUPPORTED too.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/kit.h>

#include "cnnl_train_api.h" /* cnnlDiv_v2, cnnlSqrt_v2, the preference */
#include "mlu_internal.h"

#define MLU_CNNL_SONAME "libcnnl.so"
#define NN (mlu.nn)

enum kop {
    OP_ADD, OP_MUL, OP_RELU, OP_SUB, OP_DIV, OP_SQRT, OP_EXP, OP_LOG,
    OP_NEG, OP_ABS, OP_SIGMOID, OP_TANH, OP_COPY,
};

/* The optional entry points (cnnlTransform, of the same list, is unused). */
static struct {
#define EW_SLOT(ret, name, params) ret(*name) params;
    MLU_CNNL_ADAM_FUNCS(EW_SLOT)
    MLU_CNNL_EW_FUNCS(EW_SLOT)
#undef EW_SLOT
} EW;

#define EW_FLOAT (KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F16))
#define EW_NUM (EW_FLOAT | KEEL_DTYPE_BIT(KEEL_I32))

static struct kdef {
    const char *name;
    enum kop op;
    uint32_t dtypes;
    int id; /* catalog id, -1 until CNNL is loaded */
} kdefs[] = {
    {"add", OP_ADD,
     KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F16) |
         KEEL_DTYPE_BIT(KEEL_I32),
     -1},
    {"multiply", OP_MUL,
     KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F16) |
         KEEL_DTYPE_BIT(KEEL_I32),
     -1},
    {"relu", OP_RELU, KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F16), -1},
    {"subtract", OP_SUB, EW_NUM, -1},
    {"divide", OP_DIV, EW_FLOAT, -1},
    {"sqrt", OP_SQRT, EW_FLOAT, -1},
    {"exp", OP_EXP, EW_FLOAT, -1},
    {"log", OP_LOG, EW_FLOAT, -1},
    {"neg", OP_NEG, EW_NUM, -1},
    {"abs", OP_ABS, EW_NUM, -1},
    {"sigmoid", OP_SIGMOID, EW_FLOAT, -1},
    {"tanh", OP_TANH, EW_FLOAT, -1},
    {"copy", OP_COPY, EW_NUM, -1},
};
#define NKDEFS (sizeof(kdefs) / sizeof(kdefs[0]))

/* KEEL_MLU_UNVERIFIED_KERNELS=1 at load (see withheld below) */
static bool unverified_ok;

/* The first optional entry point op needs that did not resolve; NULL
 * when all did, or when op needs only the required ones. */
static const char *ew_missing(enum kop op)
{
    switch (op) {
    case OP_DIV:
        return !EW.cnnlGetDivWorkspaceSize ? "cnnlGetDivWorkspaceSize"
               : !EW.cnnlDiv_v2            ? "cnnlDiv_v2"
                                           : NULL;
    case OP_SQRT: return EW.cnnlSqrt_v2 ? NULL : "cnnlSqrt_v2";
    case OP_EXP: return EW.cnnlExp_v2 ? NULL : "cnnlExp_v2";
    case OP_LOG: return EW.cnnlLog_v2 ? NULL : "cnnlLog_v2";
    case OP_NEG: return EW.cnnlNegTensor ? NULL : "cnnlNegTensor";
    case OP_ABS: return EW.cnnlAbs ? NULL : "cnnlAbs";
    case OP_COPY: return EW.cnnlCopy ? NULL : "cnnlCopy";
    default: return NULL; /* the required list */
    }
}

void mlu_kernels_open(void)
{
    const char *path, *why, *gap = NULL;
    void *h = mlu_dlopen("KEEL_MLU_CNNL_LIBRARY", MLU_CNNL_SONAME, &path, &why);

    if (!h) {
        snprintf(mlu.nn_why, sizeof(mlu.nn_why),
                 "%s could not be loaded (%s): no CNNL kernels, every op "
                 "takes the CPU fallback",
                 MLU_CNNL_SONAME, why);
        mlu_note(KEEL_LOG_INFO, "mlu: %s", mlu.nn_why);
        return;
    }
#define MLU_NN_GET(ret, name, params)      \
    *(void **)&NN.name = dlsym(h, #name);  \
    if (!NN.name && !gap)                  \
        gap = #name;
    MLU_CNNL_FUNCS(MLU_NN_GET)
#undef MLU_NN_GET
    if (gap) {
        snprintf(mlu.nn_why, sizeof(mlu.nn_why),
                 "%s (%s) has no %s: no CNNL kernels", MLU_CNNL_SONAME, path,
                 gap);
        mlu_note(KEEL_LOG_WARN, "mlu: %s", mlu.nn_why);
        memset(&NN, 0, sizeof(NN));
        dlclose(h);
        return;
    }
#define EW_GET(ret, name, params) *(void **)&EW.name = dlsym(h, #name);
    MLU_CNNL_ADAM_FUNCS(EW_GET)
    MLU_CNNL_EW_FUNCS(EW_GET)
#undef EW_GET
    for (size_t i = 0; i < NKDEFS; i++) {
        const char *miss = ew_missing(kdefs[i].op);
        kdefs[i].id = miss ? -1 : keel_kit_op_id(kdefs[i].name);
        if (miss)
            mlu_note(KEEL_LOG_INFO,
                     "mlu: %s takes the CPU fallback: %s (%s) has no %s",
                     kdefs[i].name, MLU_CNNL_SONAME, path, miss);
    }
    NN.lib = h;
    {
        const char *u = getenv("KEEL_MLU_UNVERIFIED_KERNELS");
        unverified_ok = u && !strcmp(u, "1");
        if (!unverified_ok)
            mlu_note(KEEL_LOG_INFO,
                     "mlu: cast, softmax, log_softmax, avg pooling, sigmoid "
                     "and tanh take the CPU fallback: their CNNL enum values "
                     "are not verified (KEEL_MLU_UNVERIFIED_KERNELS=1 offers "
                     "them)");
    }
    mlu_kernels_nn_open(h);
    mlu_kernels_train_open(h);
}

void mlu_kernels_release(void)
{
    for (int32_t i = 0; i < mlu.count; i++) {
        if (mlu.dev[i].cnnl && mlu_bind(i) == KEEL_STATUS_OK)
            NN.cnnlDestroy(mlu.dev[i].cnnl);
        mlu.dev[i].cnnl = NULL;
    }
}

void mlu_kernels_close(void)
{
    mlu_kernels_nn_close();
    mlu_kernels_train_close();
    if (NN.lib)
        dlclose(NN.lib);
    memset(&NN, 0, sizeof(NN));
    memset(&EW, 0, sizeof(EW));
}

/* A CNNL status as a keel one, with CNNL's name for it. */
keel_status mlu_nn_check(cnnlStatus_t r, int32_t dev, const char *call)
{
    const char *t;
    keel_status st;

    if (r == CNNL_STATUS_SUCCESS)
        return KEEL_STATUS_OK;
    switch (r) {
    case CNNL_STATUS_BAD_PARAM:
    case CNNL_STATUS_NOT_SUPPORTED:
    case CNNL_STATUS_ARCH_MISMATCH:
        st = KEEL_STATUS_NOT_SUPPORTED;
        break;
    case CNNL_STATUS_ALLOC_FAILED:
        st = KEEL_STATUS_OUT_OF_MEMORY;
        break;
    case CNNL_STATUS_NOT_INITIALIZED:
        st = KEEL_STATUS_NOT_INITIALIZED;
        break;
    default:
        st = KEEL_STATUS_DEVICE_ERROR;
    }
    t = NN.cnnlGetErrorString(r);
    return mlu_err(st, "%s on mlu:%d: cnnlStatus_t %d (%s)", call, (int)dev,
                   (int)r, t ? t : "?");
}

cnnlDataType_t mlu_nn_dtype(keel_dtype dt)
{
    return dt == KEEL_F32   ? CNNL_DTYPE_FLOAT
           : dt == KEEL_F16 ? CNNL_DTYPE_HALF
           : dt == KEEL_I32 ? CNNL_DTYPE_INT32
                            : CNNL_DTYPE_INVALID;
}

/* A CNNL descriptor of d; a rank-0 tensor is described as [1]. */
keel_status mlu_nn_describe(int32_t dev, const keel_tensor_desc *d,
                            cnnlTensorDescriptor_t *out)
{
    int dims[KEEL_MAX_DIMS], strides[KEEL_MAX_DIMS];
    int rank = d->ndim > 0 ? d->ndim : 1;
    keel_status st;

    *out = NULL;
    dims[0] = strides[0] = 1;
    for (int i = 0; i < d->ndim; i++) {
        if (d->shape[i] > INT_MAX || d->strides[i] < 0 ||
            d->strides[i] > INT_MAX)
            return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                           "mlu kernels: dim %d (size %" PRId64 ", stride %"
                           PRId64 ") does not fit a CNNL descriptor",
                           i, d->shape[i], d->strides[i]);
        dims[i] = (int)d->shape[i];
        strides[i] = (int)d->strides[i];
    }
    if ((st = mlu_nn_check(NN.cnnlCreateTensorDescriptor(out), dev,
                       "cnnlCreateTensorDescriptor")))
        return st;
    st = mlu_nn_check(NN.cnnlSetTensorDescriptorEx(*out, CNNL_LAYOUT_ARRAY,
                                               mlu_nn_dtype(d->dtype), rank, dims,
                                               strides),
                  dev, "cnnlSetTensorDescriptorEx");
    if (st) {
        NN.cnnlDestroyTensorDescriptor(*out);
        *out = NULL;
    }
    return st;
}

/* The device's handle, made once (caller holds cnnl_mu). */
static keel_status handle_of(int32_t dev, cnnlHandle_t *h)
{
    struct mlu_dev *d = &mlu.dev[dev];
    keel_status st = KEEL_STATUS_OK;

    if (!d->cnnl)
        st = mlu_nn_check(NN.cnnlCreate(&d->cnnl), dev, "cnnlCreate");
    *h = d->cnnl;
    return st;
}

keel_status mlu_nn_lock(int32_t dev, struct keel_stream_s *s,
                        cnnlHandle_t *h)
{
    keel_status st;

    pthread_mutex_lock(&mlu.dev[dev].cnnl_mu);
    st = handle_of(dev, h);
    if (!st)
        st = mlu_nn_check(NN.cnnlSetQueue(*h, s->q), dev, "cnnlSetQueue");
    if (st)
        pthread_mutex_unlock(&mlu.dev[dev].cnnl_mu);
    return st;
}

void mlu_nn_unlock(int32_t dev)
{
    pthread_mutex_unlock(&mlu.dev[dev].cnnl_mu);
}

keel_status mlu_nn_workspace(const keel_kernel_args *a, const char *name,
                             size_t n, void **p, bool *ours)
{
    keel_dptr core = 0;
    keel_status st;

    *p = NULL;
    *ours = false;
    if (!n)
        return KEEL_STATUS_OK;
    st = keel_kernel_workspace(a, n, &core);
    if (st == KEEL_STATUS_OK) {
        *p = MLU_PTR(core);
    } else if (st == KEEL_STATUS_NOT_SUPPORTED) {
        st = MLU_RT_ALLOC(mlu.rt.cnrtMalloc(p, n), a->device,
                          "cnrtMalloc(%zu bytes, %s's workspace)", n, name);
        *ours = st == KEEL_STATUS_OK;
    } else {
        st = mlu_err(st, "%s: no workspace of %zu bytes from the core", name,
                     n);
    }
    return st;
}

keel_status mlu_nn_workspace_done(const keel_kernel_args *a,
                                  struct keel_stream_s *s, const char *name,
                                  void *p, bool ours, keel_status st)
{
    if (ours) {
        keel_status w = MLU_RT(mlu.rt.cnrtQueueSync(s->q), a->device,
                               "cnrtQueueSync (%s's own workspace)", name);
        mlu.rt.cnrtFree(p);
        if (!st)
            st = w;
    }
    return st;
}

/* cnnlOpTensor with its workspace (add, multiply; subtract as ADD with
 * alpha2 = -1). */
static keel_status op_tensor(const struct kdef *k, const keel_kernel_args *a,
                             struct keel_stream_s *s, cnnlHandle_t h,
                             cnnlTensorDescriptor_t td[3])
{
    cnnlOpTensorDescriptor_t od = NULL;
    size_t ws = 0;
    void *wsp = NULL;
    bool ours = false;
    float f1 = 1.0f, f0 = 0.0f, f2 = k->op == OP_SUB ? -1.0f : 1.0f;
    int i1 = 1, i0 = 0, i2 = k->op == OP_SUB ? -1 : 1;
    bool fl = a->inputs[0].dtype != KEEL_I32;
    cnnlDataType_t compute = fl ? CNNL_DTYPE_FLOAT : CNNL_DTYPE_INT32;
    int32_t dev = a->device;
    keel_status st;

    if ((st = mlu_nn_check(NN.cnnlCreateOpTensorDescriptor(&od), dev,
                       "cnnlCreateOpTensorDescriptor")))
        return st;
    st = mlu_nn_check(NN.cnnlSetOpTensorDescriptor(
                      od, k->op == OP_MUL ? CNNL_OP_TENSOR_MUL
                                          : CNNL_OP_TENSOR_ADD,
                      compute, CNNL_NOT_PROPAGATE_NAN),
                  dev, "cnnlSetOpTensorDescriptor");
    if (!st)
        st = mlu_nn_check(NN.cnnlGetOpTensorWorkspaceSize(h, td[0], td[1], td[2],
                                                      &ws),
                      dev, "cnnlGetOpTensorWorkspaceSize");
    if (!st)
        st = mlu_nn_workspace(a, k->name, ws, &wsp, &ours);
    if (!st)
        st = mlu_nn_check(NN.cnnlOpTensor(h, od, fl ? (void *)&f1 : (void *)&i1,
                                      td[0], MLU_PTR(a->inputs[0].data),
                                      fl ? (void *)&f2 : (void *)&i2, td[1],
                                      MLU_PTR(a->inputs[1].data), wsp, ws,
                                      fl ? (void *)&f0 : (void *)&i0, td[2],
                                      MLU_PTR(a->outputs[0].data)),
                      dev, "cnnlOpTensor");
    st = mlu_nn_workspace_done(a, s, k->name, wsp, ours, st);
    NN.cnnlDestroyOpTensorDescriptor(od);
    return st;
}

/* relu, sigmoid, tanh: cnnlActivationForward in that mode. */
static keel_status activation(const struct kdef *k, const keel_kernel_args *a,
                              cnnlHandle_t h, cnnlTensorDescriptor_t td[3])
{
    cnnlActivationMode_t mode =
        k->op == OP_SIGMOID ? MLU_CNNL_ACTIVATION_SIGMOID
        : k->op == OP_TANH  ? MLU_CNNL_ACTIVATION_TANH
                            : CNNL_ACTIVATION_RELU;
    cnnlActivationDescriptor_t ad = NULL;
    keel_status st = mlu_nn_check(NN.cnnlCreateActivationDescriptor(&ad), a->device,
                              "cnnlCreateActivationDescriptor");

    if (st)
        return st;
    st = mlu_nn_check(NN.cnnlSetActivationDescriptor_v2(
                      ad, mode, CNNL_ACTIVATION_HIGH_PRECISION,
                      CNNL_NOT_PROPAGATE_NAN, 0.0f),
                  a->device, "cnnlSetActivationDescriptor_v2");
    if (!st)
        st = mlu_nn_check(NN.cnnlActivationForward(h, ad, NULL, td[0],
                                               MLU_PTR(a->inputs[0].data), NULL,
                                               td[2],
                                               MLU_PTR(a->outputs[0].data)),
                      a->device, "cnnlActivationForward");
    NN.cnnlDestroyActivationDescriptor(ad);
    return st;
}

/* cnnlDiv_v2 with its workspace. */
static keel_status divide(const struct kdef *k, const keel_kernel_args *a,
                          struct keel_stream_s *s, cnnlHandle_t h,
                          cnnlTensorDescriptor_t td[3])
{
    size_t ws = 0;
    void *wsp = NULL;
    bool ours = false;
    keel_status st = mlu_nn_check(
        EW.cnnlGetDivWorkspaceSize(h, td[0], td[1], td[2], &ws), a->device,
        "cnnlGetDivWorkspaceSize");

    if (!st)
        st = mlu_nn_workspace(a, k->name, ws, &wsp, &ours);
    if (!st)
        st = mlu_nn_check(
            EW.cnnlDiv_v2(h, CNNL_COMPUTATION_HIGH_PRECISION, td[0],
                          MLU_PTR(a->inputs[0].data), td[1],
                          MLU_PTR(a->inputs[1].data), wsp, ws, td[2],
                          MLU_PTR(a->outputs[0].data)),
            a->device, "cnnlDiv_v2");
    return mlu_nn_workspace_done(a, s, k->name, wsp, ours, st);
}

/* The one-call unary ops: y = f(x), x a view, y the contiguous output. */
static keel_status unary(const struct kdef *k, const keel_kernel_args *a,
                         cnnlHandle_t h, cnnlTensorDescriptor_t td[3])
{
    const void *x = MLU_PTR(a->inputs[0].data);
    void *y = MLU_PTR(a->outputs[0].data);
    int32_t dev = a->device;

    switch (k->op) {
    case OP_SQRT:
        return mlu_nn_check(EW.cnnlSqrt_v2(h, CNNL_COMPUTATION_HIGH_PRECISION,
                                           td[0], x, td[2], y),
                            dev, "cnnlSqrt_v2");
    case OP_EXP:
        return mlu_nn_check(EW.cnnlExp_v2(h, CNNL_COMPUTATION_HIGH_PRECISION,
                                          td[0], x, td[2], y),
                            dev, "cnnlExp_v2");
    case OP_LOG:
        return mlu_nn_check(EW.cnnlLog_v2(h, CNNL_COMPUTATION_HIGH_PRECISION,
                                          CNNL_LOG_E, td[0], x, td[2], y),
                            dev, "cnnlLog_v2");
    case OP_NEG:
        return mlu_nn_check(EW.cnnlNegTensor(h, td[0], x, td[2], y), dev,
                            "cnnlNegTensor");
    case OP_ABS:
        return mlu_nn_check(EW.cnnlAbs(h, td[0], x, td[2], y), dev,
                            "cnnlAbs");
    default:
        return mlu_nn_check(EW.cnnlCopy(h, td[0], x, td[2], y), dev,
                            "cnnlCopy");
    }
}

static keel_status launch(void *kernel_data, const keel_kernel_args *a)
{
    const struct kdef *k = kernel_data;
    cnnlTensorDescriptor_t td[3] = {NULL, NULL, NULL};
    struct keel_stream_s *s;
    cnnlHandle_t h;
    keel_kit_msg msg;
    keel_status st;
    bool binary = k->op == OP_ADD || k->op == OP_MUL || k->op == OP_SUB ||
                  k->op == OP_DIV;
    int nin = binary ? 2 : 1;

    if (!a)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT, "%s: args is NULL",
                       k->name);
    if ((st = keel_kit_check(k->id, a, &msg)))
        return mlu_err(st, "%s", msg.text);
    if ((st = mlu_enter(a->device, k->name)) ||
        (st = mlu_queue_of(a->device, a->stream, k->name, &s)))
        return st;
    for (int i = 0; i < nin; i++)
        if (a->inputs[i].dtype != a->outputs[0].dtype)
            return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                           "%s: mixed dtypes are not passed to CNNL", k->name);
    if (!(k->dtypes & KEEL_DTYPE_BIT(a->outputs[0].dtype)))
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED, "%s: %s is not handled",
                       k->name, keel_kit_dtype_name(a->outputs[0].dtype));
    if (keel_kit_numel(&a->outputs[0]) == 0)
        return KEEL_STATUS_OK;
    for (int i = 0; i < nin && !st; i++)
        st = mlu_nn_describe(a->device, &a->inputs[i], &td[i]);
    if (!st)
        st = mlu_nn_describe(a->device, &a->outputs[0], &td[2]);
    if (!st && !(st = mlu_nn_lock(a->device, s, &h))) {
        switch (k->op) {
        case OP_ADD:
        case OP_MUL:
        case OP_SUB: st = op_tensor(k, a, s, h, td); break;
        case OP_DIV: st = divide(k, a, s, h, td); break;
        case OP_RELU:
        case OP_SIGMOID:
        case OP_TANH: st = activation(k, a, h, td); break;
        default: st = unary(k, a, h, td);
        }
        mlu_nn_unlock(a->device);
    }
    for (int i = 0; i < 3; i++)
        if (td[i])
            NN.cnnlDestroyTensorDescriptor(td[i]);
    return st;
}

/*
 * Kernels that pass a CNNL enum value no public source confirms, and for
 * which the value taken is a guess with no evidence behind it (the cast
 * codes, the softmax algorithm and mode, the pooling mode, the sigmoid
 * and tanh activation modes: a wrong one computes another function,
 * silently). They are offered only when
 * KEEL_MLU_UNVERIFIED_KERNELS=1, as the stand-in tests and the vendor
 * script do, so that on silicon they run only where conformance checks
 * them against the CPU plugin. docs/mlu-plugin.md lists the values.
 */
static const char *const unverified_ops[] = {
    "cast", "softmax", "log_softmax", "avg_pool2d", "avg_pool2d_grad",
    "sigmoid", "tanh",
};

static bool withheld(const char *op_name)
{
    if (unverified_ok)
        return false;
    for (size_t i = 0; i < sizeof(unverified_ops) / sizeof(unverified_ops[0]);
         i++)
        if (!strcmp(op_name, unverified_ops[i]))
            return true;
    return false;
}

static keel_status mlu_lookup(int32_t device, const char *op_name,
                              keel_dtype dtype, keel_kernel *kernel)
{
    if (!op_name || !kernel)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "lookup: op_name or kernel is NULL");
    if (!atomic_load(&mlu.up))
        return mlu_err(KEEL_STATUS_NOT_INITIALIZED,
                       "lookup: the mlu plugin is not initialised");
    if (device < 0 || device >= mlu.count)
        return mlu_err(KEEL_STATUS_INVALID_DEVICE, "lookup: no device %d",
                       (int)device);
    if (!NN.lib || withheld(op_name))
        return KEEL_STATUS_NOT_FOUND;
    for (size_t i = 0; i < NKDEFS; i++) {
        if (kdefs[i].id < 0 || strcmp(kdefs[i].name, op_name) ||
            !(kdefs[i].dtypes & KEEL_DTYPE_BIT(dtype)))
            continue;
        kernel->fn = launch;
        kernel->kernel_data = &kdefs[i];
        return KEEL_STATUS_OK;
    }
    if (mlu_kernels_nn_lookup(op_name, dtype, kernel) == KEEL_STATUS_OK ||
        mlu_kernels_train_lookup(op_name, dtype, kernel) == KEEL_STATUS_OK)
        return KEEL_STATUS_OK;
    return KEEL_STATUS_NOT_FOUND;
}

const keel_kernel_ops mlu_kernel_ops = {
    .header = KEEL_TABLE_HEADER(keel_kernel_ops),
    .lookup = mlu_lookup,
};
