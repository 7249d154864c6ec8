/*
 * keel Ascend NPU plugin — the kernel group on aclnn (see npu_internal.h).
 *
 * Every kernel follows aclnn's two phases: describe each operand with
 * aclCreateTensor (the keel descriptor's shape and element strides as the
 * view, its byte span as a 1-D storage, its address as the data), ask
 * aclnnXxxGetWorkspaceSize for the workspace and an executor, then run
 * aclnnXxx on the stream. A refusal in the first phase means aclnn does
 * not handle that dtype or layout: NOT_SUPPORTED, so the core can fall
 * back. The workspace comes from the core (keel_kernel_workspace, ABI
 * 1.3): stream-ordered memory from its caching allocator, so the launch
 * neither allocates nor waits. Under an older core, which offers none, it
 * comes from aclrtMalloc and is freed once the stream has run the launch,
 * so such a kernel waits for its stream.
 *
 * Kernels: add, multiply (float32, float16, bfloat16, int32, int64),
 * relu, softmax and log_softmax (float32, float16, bfloat16; the softmax
 * pair along the `axis` attribute, passed to aclnn normalised) and
 * matmul (float32, float16) for 2-D operands only: the core hands the
 * transposes over as strides, which aclnn views carry; batched and 1-D
 * launches, and an empty inner dimension, answer NOT_SUPPORTED; cast
 * between any two of float32, float16, bfloat16, int32, int64.
 *
 * The elementwise set (second table, NPU_OPAPI_EW_FUNCS, each kernel
 * offered only when its own two entry points resolved): subtract, neg,
 * abs and copy (float32, float16, bfloat16, int32, int64); divide, exp,
 * log, sqrt, sigmoid, tanh, silu and gelu in both forms (float32,
 * float16, bfloat16); maximum and minimum in int32 and int64 only (their
 * NaN rule is not documented by aclnn, see ewdefs). Which of them a given
 * Ascend part runs is aclnn's business; a refusal falls back as above.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/kit.h>

#include "npu_internal.h"

#define NPU_OPAPI_SONAME "libopapi.so"
#define OPAPI (npu_g.opapi)

enum npu_kop { K_ADD, K_MUL, K_RELU, K_SOFTMAX, K_LOG_SOFTMAX, K_MATMUL,
               K_CAST };

struct npu_kdef {
    const char *name;
    enum npu_kop kop;
    uint32_t dtypes; /* KEEL_DTYPE_BIT mask */
    int op;          /* catalog id, set when libopapi.so loads */
};

#define BINARY_DTYPES                                                       \
    (KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F16) |                  \
     KEEL_DTYPE_BIT(KEEL_BF16) | KEEL_DTYPE_BIT(KEEL_I32) |                 \
     KEEL_DTYPE_BIT(KEEL_I64))
#define FLOAT_DTYPES                                                        \
    (KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F16) |                  \
     KEEL_DTYPE_BIT(KEEL_BF16))

static struct npu_kdef kdefs[] = {
    {"add", K_ADD, BINARY_DTYPES, -1},
    {"multiply", K_MUL, BINARY_DTYPES, -1},
    {"relu", K_RELU, FLOAT_DTYPES, -1},
    {"softmax", K_SOFTMAX, FLOAT_DTYPES, -1},
    {"log_softmax", K_LOG_SOFTMAX, FLOAT_DTYPES, -1},
    {"cast", K_CAST, BINARY_DTYPES, -1},
    {"matmul", K_MATMUL, KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F16),
     -1},
};

/* The elementwise kernels of NPU_OPAPI_EW_FUNCS (acl_api.h): each one's two
 * entry points are resolved on their own, and a kernel missing either is
 * not offered. */
static struct {
#define NPU_EW_MEMBER(ret, name, params) ret(*name) params;
    NPU_OPAPI_EW_FUNCS(NPU_EW_MEMBER)
#undef NPU_EW_MEMBER
} ewf;

typedef aclnnStatus (*npu_ew_binary)(const aclTensor *self,
                                     const aclTensor *other, aclTensor *out,
                                     uint64_t *ws, aclOpExecutor **ex);
typedef aclnnStatus (*npu_ew_unary)(const aclTensor *self, aclTensor *out,
                                    uint64_t *ws, aclOpExecutor **ex);

enum npu_ew_form {
    EW_SUB,    /* aclnnSub: self - alpha * other, alpha 1 */
    EW_BINARY, /* out = f(self, other) */
    EW_UNARY,  /* out = f(self) */
    EW_GELU,   /* aclnnGeluV2 with keel's `approximate` as its mode */
    EW_COPY,   /* aclnnInplaceCopy(out, in) */
};

struct npu_ewdef {
    const char *name;
    enum npu_ew_form form;
    uint32_t dtypes;     /* KEEL_DTYPE_BIT mask */
    const char *call;    /* phase 2's name; phase 1 adds GetWorkspaceSize */
    npu_ew_binary *bin;  /* EW_BINARY's phase 1 */
    npu_ew_unary *un;    /* EW_UNARY's phase 1 */
    npu_aclnn_phase2 *p2;
    bool have;           /* both halves resolved */
    int op;              /* catalog id */
};

#define INT_DTYPES (KEEL_DTYPE_BIT(KEEL_I32) | KEEL_DTYPE_BIT(KEEL_I64))
#define EW_BIN(kname, fn, dt)                                               \
    {kname, EW_BINARY, dt, #fn, &ewf.fn##GetWorkspaceSize, NULL, &ewf.fn,   \
     false, -1}
#define EW_UN(kname, fn, dt)                                                \
    {kname, EW_UNARY, dt, #fn, NULL, &ewf.fn##GetWorkspaceSize, &ewf.fn,    \
     false, -1}

/*
 * Dtypes: the catalog's, cut to those aclnn documents for the operator
 * and the stand-in computes. divide: float only (the catalog casts
 * integer inputs to float32 before the kernel). maximum / minimum: the
 * catalog wants NaN when either input is NaN; aclnnMaximum / aclnnMinimum's
 * own documentation does not say what a NaN gives, so float launches are
 * not offered (the CPU kernel runs them) and only int32 / int64, where no
 * NaN exists, go to aclnn. copy: one dtype on both sides (the catalog's
 * `same` rule), any strides on the input.
 */
static struct npu_ewdef ewdefs[] = {
    {"subtract", EW_SUB, BINARY_DTYPES, "aclnnSub", NULL, NULL, &ewf.aclnnSub,
     false, -1},
    EW_BIN("divide", aclnnDiv, FLOAT_DTYPES),
    EW_BIN("maximum", aclnnMaximum, INT_DTYPES),
    EW_BIN("minimum", aclnnMinimum, INT_DTYPES),
    EW_UN("neg", aclnnNeg, BINARY_DTYPES),
    EW_UN("abs", aclnnAbs, BINARY_DTYPES),
    EW_UN("exp", aclnnExp, FLOAT_DTYPES),
    EW_UN("log", aclnnLog, FLOAT_DTYPES),
    EW_UN("sqrt", aclnnSqrt, FLOAT_DTYPES),
    EW_UN("sigmoid", aclnnSigmoid, FLOAT_DTYPES),
    EW_UN("tanh", aclnnTanh, FLOAT_DTYPES),
    EW_UN("silu", aclnnSilu, FLOAT_DTYPES),
    {"gelu", EW_GELU, FLOAT_DTYPES, "aclnnGeluV2", NULL, NULL,
     &ewf.aclnnGeluV2, false, -1},
    {"copy", EW_COPY, BINARY_DTYPES, "aclnnInplaceCopy", NULL, NULL,
     &ewf.aclnnInplaceCopy, false, -1},
};

static void npu_ew_load(void *h)
{
#define NPU_EW_RESOLVE(ret, name, params) \
    *(void **)&ewf.name = dlsym(h, #name);
    NPU_OPAPI_EW_FUNCS(NPU_EW_RESOLVE)
#undef NPU_EW_RESOLVE
    for (size_t i = 0; i < sizeof(ewdefs) / sizeof(ewdefs[0]); i++) {
        struct npu_ewdef *k = &ewdefs[i];
        bool p1;
        switch (k->form) {
        case EW_SUB: p1 = ewf.aclnnSubGetWorkspaceSize != NULL; break;
        case EW_GELU: p1 = ewf.aclnnGeluV2GetWorkspaceSize != NULL; break;
        case EW_COPY: p1 = ewf.aclnnInplaceCopyGetWorkspaceSize != NULL; break;
        case EW_BINARY: p1 = *k->bin != NULL; break;
        default: p1 = *k->un != NULL; break;
        }
        k->have = p1 && *k->p2 != NULL;
        k->op = keel_kit_op_id(k->name);
        if (!k->have)
            npu_log(KEEL_LOG_INFO, "npu: %s lacks %s or its phase 1: %s runs "
                    "on the CPU fallback", NPU_OPAPI_SONAME, k->call, k->name);
    }
}

/* ---- loading -------------------------------------------------------------- */

void npu_kernels_load(void)
{
    const char *missing = NULL, *path, *why;
    void *h = npu_open("KEEL_NPU_OPAPI_LIBRARY", NPU_OPAPI_SONAME, &path, &why);

    if (!h) {
        snprintf(npu_g.opapi_reason, sizeof(npu_g.opapi_reason),
                 "%s could not be loaded (%s): no aclnn kernels, every op "
                 "runs on the CPU fallback",
                 NPU_OPAPI_SONAME, why);
        npu_log(KEEL_LOG_INFO, "npu: %s", npu_g.opapi_reason);
        return;
    }
    /* aclCreateTensor and friends live in libnnopbase.so, a dependency of
     * libopapi.so: dlsym on this handle searches it too. */
#define NPU_OPAPI_RESOLVE(ret, name, params)    \
    *(void **)&OPAPI.name = dlsym(h, #name);    \
    if (!OPAPI.name && !missing)                \
        missing = #name;
    NPU_OPAPI_FUNCS(NPU_OPAPI_RESOLVE)
#undef NPU_OPAPI_RESOLVE
    if (missing) {
        snprintf(npu_g.opapi_reason, sizeof(npu_g.opapi_reason),
                 "%s (%s) lacks %s: no aclnn kernels", NPU_OPAPI_SONAME, path,
                 missing);
        npu_log(KEEL_LOG_WARN, "npu: %s", npu_g.opapi_reason);
        memset(&OPAPI, 0, sizeof(OPAPI));
        dlclose(h);
        return;
    }
    for (size_t i = 0; i < sizeof(kdefs) / sizeof(kdefs[0]); i++)
        kdefs[i].op = keel_kit_op_id(kdefs[i].name);
    OPAPI.lib = h;
    npu_ew_load(h);
    npu_kernels_nn_load(h);
    npu_kernels_train_load(h);
}

void npu_kernels_unload(void)
{
    npu_kernels_nn_unload();
    npu_kernels_train_unload();
    if (OPAPI.lib)
        dlclose(OPAPI.lib);
    memset(&OPAPI, 0, sizeof(OPAPI));
    memset(&ewf, 0, sizeof(ewf));
    for (size_t i = 0; i < sizeof(ewdefs) / sizeof(ewdefs[0]); i++)
        ewdefs[i].have = false;
}

/* ---- descriptors ------------------------------------------------------------ */

static aclDataType acl_dtype(keel_dtype dt)
{
    switch (dt) {
    case KEEL_F32: return ACL_FLOAT;
    case KEEL_F64: return ACL_DOUBLE;
    case KEEL_F16: return ACL_FLOAT16;
    case KEEL_BF16: return ACL_BF16;
    case KEEL_I8: return ACL_INT8;
    case KEEL_U8: return ACL_UINT8;
    case KEEL_I32: return ACL_INT32;
    case KEEL_I64: return ACL_INT64;
    case KEEL_BOOL: return ACL_BOOL;
    default: return ACL_DT_UNDEFINED;
    }
}

/* An aclTensor viewing keel descriptor d: NULL with the status in *st
 * (NOT_SUPPORTED for a negative stride, which aclnn views cannot say). */
aclTensor *npu_describe(const keel_tensor_desc *d, keel_status *st)
{
    int64_t span = 1; /* elements from data to the last one, plus one */
    aclTensor *t;

    for (int i = 0; i < d->ndim; i++) {
        if (d->strides[i] < 0) {
            *st = npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                           "npu kernels: a negative stride (dim %d) is not "
                           "passed to aclnn",
                           i);
            return NULL;
        }
        span += (d->shape[i] - 1) * d->strides[i];
    }
    t = OPAPI.aclCreateTensor(d->shape, (uint64_t)d->ndim, acl_dtype(d->dtype),
                              d->strides, 0, ACL_FORMAT_ND, &span, 1,
                              NPU_PTR(d->data));
    if (!t)
        *st = npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                       "aclCreateTensor(%s, rank %d) returned NULL",
                       keel_kit_dtype_name(d->dtype), (int)d->ndim);
    return t;
}

/* An aclnn status as a keel one: phase 1 refusals are NOT_SUPPORTED. */
keel_status npu_aclnn_check(aclnnStatus e, bool launch, int32_t device,
                            const char *call)
{
    const char *m = ACL.aclGetRecentErrMsg ? ACL.aclGetRecentErrMsg() : NULL;

    if (e == 0)
        return KEEL_STATUS_OK;
    return npu_fail(launch ? KEEL_STATUS_DEVICE_ERROR : KEEL_STATUS_NOT_SUPPORTED,
                    "%s on npu:%d: aclnnStatus %d%s%s", call, (int)device, e,
                    m && m[0] ? ": " : "", m ? m : "");
}

keel_status npu_aclnn_launch(const keel_kernel_args *a,
                             struct keel_stream_s *s, const char *name,
                             uint64_t ws, aclOpExecutor *ex,
                             npu_aclnn_phase2 fn, const char *call)
{
    void *wsp = NULL;
    bool own_ws = false; /* from aclrtMalloc: wait, then free */
    keel_dptr core_ws = 0;
    keel_status st = KEEL_STATUS_OK;
    aclnnStatus e;

    if (ws > 0) {
        if (ws > (uint64_t)SIZE_MAX)
            return npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                            "%s: workspace of %" PRIu64 " bytes", name, ws);
        st = keel_kernel_workspace(a, ws, &core_ws);
        if (st == KEEL_STATUS_OK) {
            wsp = (void *)(uintptr_t)core_ws;
        } else if (st == KEEL_STATUS_NOT_SUPPORTED) {
            st = npu_check_alloc(ACL.aclrtMalloc(&wsp, (size_t)ws,
                                                 ACL_MEM_MALLOC_HUGE_FIRST),
                                 a->device, "aclrtMalloc(%" PRIu64 " bytes, "
                                 "%s's workspace)", ws, name);
            own_ws = st == KEEL_STATUS_OK;
        } else {
            st = npu_fail(st, "%s: the core could not give a workspace of "
                          "%" PRIu64 " bytes (status %d)", name, ws, (int)st);
        }
        if (st)
            return st; /* the executor is not run; aclnn gives no way to drop it */
    }
    e = fn(wsp, ws, ex, s->s);
    st = npu_aclnn_check(e, true, a->device, call);
    if (!st)
        npu_stream_note(s);
    if (own_ws) {
        /* an older core's launch: wait for it, then give the memory back */
        keel_status w = npu_check(ACL.aclrtSynchronizeStream(s->s), a->device,
                                  "aclrtSynchronizeStream (%s's workspace)",
                                  name);
        ACL.aclrtFree(wsp);
        if (!st)
            st = w;
    }
    return st;
}

/* aclnnAdd's and aclnnSub's alpha: 1, as a float for the float dtypes and
 * an int64 for the integer ones (NULL with *st set if ACL has no memory). */
static aclScalar *scalar_one(keel_dtype dt, keel_status *st)
{
    float one_f = 1.0f;
    int64_t one_i = 1;
    aclScalar *s = keel_kit_float_dtype(dt)
                       ? OPAPI.aclCreateScalar(&one_f, ACL_FLOAT)
                       : OPAPI.aclCreateScalar(&one_i, ACL_INT64);

    if (!s)
        *st = npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                       "aclCreateScalar(1) returned NULL");
    return s;
}

/* ---- the kernel ---------------------------------------------------------------- */

static keel_status run(void *kernel_data, const keel_kernel_args *a)
{
    const struct npu_kdef *k = kernel_data;
    aclTensor *t[3] = {NULL, NULL, NULL};
    aclScalar *alpha = NULL;
    aclOpExecutor *ex = NULL;
    struct keel_stream_s *s;
    uint64_t ws = 0;
    npu_aclnn_phase2 fn;
    keel_kit_msg msg;
    keel_status st;
    int nin = k->kop == K_ADD || k->kop == K_MUL || k->kop == K_MATMUL
                  ? 2 : 1;
    int64_t dim = 0;
    aclnnStatus e;
    const char *phase1, *phase2;

    if (!a)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: args is NULL",
                        k->name);
    if ((st = keel_kit_check(k->op, a, &msg)))
        return npu_fail(st, "%s", msg.text);
    if ((st = npu_enter(a->device, k->name)) ||
        (st = npu_stream_get(a->device, a->stream, k->name, &s)))
        return st;
    if ((k->kop != K_CAST && a->outputs[0].dtype != a->inputs[0].dtype) ||
        !(k->dtypes & KEEL_DTYPE_BIT(a->inputs[0].dtype)) ||
        !(k->dtypes & KEEL_DTYPE_BIT(a->outputs[0].dtype)))
        return npu_fail(KEEL_STATUS_NOT_SUPPORTED, "%s: %s is not handled",
                        k->name, keel_kit_dtype_name(a->inputs[0].dtype));
    if (k->kop == K_MATMUL &&
        (a->inputs[1].dtype != a->inputs[0].dtype || a->inputs[0].ndim != 2 ||
         a->inputs[1].ndim != 2 || a->outputs[0].ndim != 2 ||
         a->inputs[0].shape[1] == 0))
        return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                        "matmul: only 2-D operands of one dtype with a "
                        "non-empty inner dimension go to aclnnMatmul");
    if (keel_kit_numel(&a->outputs[0]) == 0)
        return KEEL_STATUS_OK;
    for (int i = 0; i < nin && !st; i++)
        t[i] = npu_describe(&a->inputs[i], &st);
    if (!st)
        t[2] = npu_describe(&a->outputs[0], &st);
    if (st)
        goto out;

    switch (k->kop) {
    case K_ADD: {
        /* out = self + alpha * other, alpha 1 in a dtype of its kind */
        if (!(alpha = scalar_one(a->inputs[0].dtype, &st)))
            goto out;
        phase1 = "aclnnAddGetWorkspaceSize";
        phase2 = "aclnnAdd";
        e = OPAPI.aclnnAddGetWorkspaceSize(t[0], t[1], alpha, t[2], &ws, &ex);
        break;
    }
    case K_SOFTMAX:
    case K_LOG_SOFTMAX:
        /* keel_kit_check has refused an axis out of range; 0-d takes 0 */
        dim = keel_kit_axis_0d(keel_kit_attr_i(a, "axis", -1),
                               a->inputs[0].ndim);
        if (dim < 0) {
            st = npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                          "%s: axis out of range", k->name);
            goto out;
        }
        if (k->kop == K_SOFTMAX) {
            phase1 = "aclnnSoftmaxGetWorkspaceSize";
            phase2 = "aclnnSoftmax";
            e = OPAPI.aclnnSoftmaxGetWorkspaceSize(t[0], dim, t[2], &ws, &ex);
        } else {
            phase1 = "aclnnLogSoftmaxGetWorkspaceSize";
            phase2 = "aclnnLogSoftmax";
            e = OPAPI.aclnnLogSoftmaxGetWorkspaceSize(t[0], dim, t[2], &ws,
                                                      &ex);
        }
        break;
    case K_CAST:
        phase1 = "aclnnCastGetWorkspaceSize";
        phase2 = "aclnnCast";
        e = OPAPI.aclnnCastGetWorkspaceSize(
            t[0], acl_dtype(a->outputs[0].dtype), t[2], &ws, &ex);
        break;
    case K_MATMUL:
        phase1 = "aclnnMatmulGetWorkspaceSize";
        phase2 = "aclnnMatmul";
        e = OPAPI.aclnnMatmulGetWorkspaceSize(t[0], t[1], t[2],
                                              NPU_CUBE_KEEP_DTYPE, &ws, &ex);
        break;
    case K_MUL:
        phase1 = "aclnnMulGetWorkspaceSize";
        phase2 = "aclnnMul";
        e = OPAPI.aclnnMulGetWorkspaceSize(t[0], t[1], t[2], &ws, &ex);
        break;
    default:
        phase1 = "aclnnReluGetWorkspaceSize";
        phase2 = "aclnnRelu";
        e = OPAPI.aclnnReluGetWorkspaceSize(t[0], t[2], &ws, &ex);
        break;
    }
    if ((st = npu_aclnn_check(e, false, a->device, phase1)))
        goto out;
    switch (k->kop) {
    case K_ADD: fn = OPAPI.aclnnAdd; break;
    case K_MUL: fn = OPAPI.aclnnMul; break;
    case K_SOFTMAX: fn = OPAPI.aclnnSoftmax; break;
    case K_LOG_SOFTMAX: fn = OPAPI.aclnnLogSoftmax; break;
    case K_MATMUL: fn = OPAPI.aclnnMatmul; break;
    case K_CAST: fn = OPAPI.aclnnCast; break;
    default: fn = OPAPI.aclnnRelu; break;
    }
    st = npu_aclnn_launch(a, s, k->name, ws, ex, fn, phase2);
out:
    for (int i = 0; i < 3; i++)
        if (t[i])
            OPAPI.aclDestroyTensor(t[i]);
    if (alpha)
        OPAPI.aclDestroyScalar(alpha);
    return st;
}

/* The elementwise kernels and copy: operands already broadcast to the
 * output's shape (stride-0 dims included, which aclnn views take), one
 * dtype throughout. */
static keel_status ew_run(void *kernel_data, const keel_kernel_args *a)
{
    const struct npu_ewdef *k = kernel_data;
    aclTensor *t[3] = {NULL, NULL, NULL};
    aclScalar *alpha = NULL;
    aclOpExecutor *ex = NULL;
    struct keel_stream_s *s;
    uint64_t ws = 0;
    keel_kit_msg msg;
    keel_status st;
    int nin = k->form == EW_SUB || k->form == EW_BINARY ? 2 : 1;
    char phase1[64];
    aclnnStatus e;

    if (!a)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: args is NULL",
                        k->name);
    if ((st = keel_kit_check(k->op, a, &msg)))
        return npu_fail(st, "%s", msg.text);
    if ((st = npu_enter(a->device, k->name)) ||
        (st = npu_stream_get(a->device, a->stream, k->name, &s)))
        return st;
    for (int i = 0; i < nin; i++)
        if (a->inputs[i].dtype != a->outputs[0].dtype ||
            !(k->dtypes & KEEL_DTYPE_BIT(a->inputs[i].dtype)))
            return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                            "%s: %s is not handled", k->name,
                            keel_kit_dtype_name(a->inputs[i].dtype));
    if (keel_kit_numel(&a->outputs[0]) == 0)
        return KEEL_STATUS_OK;
    for (int i = 0; i < nin && !st; i++)
        t[i] = npu_describe(&a->inputs[i], &st);
    if (!st)
        t[2] = npu_describe(&a->outputs[0], &st);
    if (st)
        goto out;
    snprintf(phase1, sizeof(phase1), "%sGetWorkspaceSize", k->call);

    switch (k->form) {
    case EW_SUB: {
        /* out = self - alpha * other with alpha 1, as keel's x - y */
        if (!(alpha = scalar_one(a->inputs[0].dtype, &st)))
            goto out;
        e = ewf.aclnnSubGetWorkspaceSize(t[0], t[1], alpha, t[2], &ws, &ex);
        break;
    }
    case EW_BINARY:
        e = (*k->bin)(t[0], t[1], t[2], &ws, &ex);
        break;
    case EW_GELU:
        /* aclnnGeluV2's mode 0 is the erf form x * Phi(x), 1 the tanh
         * form: keel's approximate false / true, the same formulas */
        e = ewf.aclnnGeluV2GetWorkspaceSize(
            t[0], keel_kit_attr_i(a, "approximate", 0) ? 1 : 0, t[2], &ws,
            &ex);
        break;
    case EW_COPY:
        /* selfRef is keel's output, src its strided input */
        e = ewf.aclnnInplaceCopyGetWorkspaceSize(t[2], t[0], &ws, &ex);
        break;
    default:
        e = (*k->un)(t[0], t[2], &ws, &ex);
        break;
    }
    if ((st = npu_aclnn_check(e, false, a->device, phase1)))
        goto out;
    st = npu_aclnn_launch(a, s, k->name, ws, ex, *k->p2, k->call);
out:
    for (int i = 0; i < 3; i++)
        if (t[i])
            OPAPI.aclDestroyTensor(t[i]);
    if (alpha)
        OPAPI.aclDestroyScalar(alpha);
    return st;
}

static keel_status npu_lookup(int32_t device, const char *op_name,
                              keel_dtype dtype, keel_kernel *kernel)
{
    if (!op_name || !kernel)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "lookup: op_name or kernel is NULL");
    if (!atomic_load(&npu_g.initialized))
        return npu_fail(KEEL_STATUS_NOT_INITIALIZED,
                        "lookup: the npu plugin is not initialised");
    if (device < 0 || device >= npu_g.ndev)
        return npu_fail(KEEL_STATUS_INVALID_DEVICE,
                        "lookup: device %d does not exist (npu has %d)",
                        (int)device, (int)npu_g.ndev);
    if (!OPAPI.lib)
        return KEEL_STATUS_NOT_FOUND;
    for (size_t i = 0; i < sizeof(kdefs) / sizeof(kdefs[0]); i++) {
        struct npu_kdef *k = &kdefs[i];
        if (k->op < 0 || strcmp(k->name, op_name) ||
            !(k->dtypes & KEEL_DTYPE_BIT(dtype)))
            continue;
        kernel->fn = run;
        kernel->kernel_data = k;
        return KEEL_STATUS_OK;
    }
    for (size_t i = 0; i < sizeof(ewdefs) / sizeof(ewdefs[0]); i++) {
        struct npu_ewdef *k = &ewdefs[i];
        if (!k->have || k->op < 0 || strcmp(k->name, op_name) ||
            !(k->dtypes & KEEL_DTYPE_BIT(dtype)))
            continue;
        kernel->fn = ew_run;
        kernel->kernel_data = k;
        return KEEL_STATUS_OK;
    }
    if (npu_kernels_nn_lookup(op_name, dtype, kernel) == KEEL_STATUS_OK ||
        npu_kernels_train_lookup(op_name, dtype, kernel) == KEEL_STATUS_OK)
        return KEEL_STATUS_OK;
    return KEEL_STATUS_NOT_FOUND;
}

const keel_kernel_ops npu_kernel_ops = {
    .header = KEEL_TABLE_HEADER(keel_kernel_ops),
    .lookup = npu_lookup,
};
