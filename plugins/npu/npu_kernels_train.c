/*
 * keel Ascend NPU plugin — aclnn kernels for the training ops (see
 * npu_internal.h; the shared launch path is in npu_kernels.c).
 *
 * Kernels: sgd_update, momentum_update, adam_update and adamw_update
 * (float32, float16, bfloat16; param, velocity and moments updated in
 * place, the gradient only read, as the CPU plugin does); layer_norm and
 * layer_norm_grad (float32, float16, bfloat16; aclnnLayerNorm and
 * aclnnLayerNormBackward, see ln_run for the mapping and what is refused).
 * batch_norm and batch_norm_grad in training mode, float32 (bn_run: how
 * keel's running statistics are kept, and why inference is refused).
 * softmax_grad and log_softmax_grad (float32, float16, bfloat16;
 * aclnnSoftmaxBackward / aclnnLogSoftmaxBackward); cross_entropy and
 * cross_entropy_grad for hard labels, float32, where Paddle's reduction
 * can be met exactly (ce_run, ceg_run).
 *
 * Why they are composed. aclnn's fused optimizer operators follow
 * PyTorch: aclnnApplyAdamW takes a step count and adds epsilon after the
 * bias correction, while keel's adam (Paddle's) scales epsilon by
 * sqrt(1 - beta2_pow) and takes the powers as attributes; no argument
 * choice gives keel's formula from them. Every update is therefore a short
 * sequence of aclnn elementwise calls whose algebra is exactly the
 * catalog's (the order of rounding differs, as between any two kernels):
 *
 *   sgd       p *= 1 - lr wd (when wd != 0); p += -lr g
 *   momentum  v *= mu; v += g; v += wd p (when wd != 0); then
 *             plain:    p += -lr v
 *             nesterov: p *= 1 - lr wd (wd != 0); p += -lr g;
 *                       p += -lr mu v      (= p - lr (g + wd p + mu v))
 *   adam(w)   t = g + wd p (adam with wd != 0, else t is g itself);
 *             p *= 1 - lr coeff (adamw); m *= b1; m += (1 - b1) t;
 *             v *= b2; v += (1 - b2) t t; d = sqrt(v); d += eps sqrt(1-b2p);
 *             p += -lr sqrt(1-b2p)/(1-b1p) m / d
 *
 * with aclnnInplaceMuls, aclnnInplaceAdd, aclnnAdd (t), aclnnInplaceAddcmul,
 * aclnnSqrt, aclnnInplaceAdds and aclnnInplaceAddcdiv. The temporaries t
 * and d live in one workspace of the core (keel_kernel_workspace); an older
 * core without workspaces gets NOT_SUPPORTED for adam and adamw. Every
 * call's phase 1 runs before the first launch, so a refusal (NOT_SUPPORTED,
 * the CPU fallback) leaves param and state untouched; the executors planned
 * before it are never run (aclnn has no call that drops one). Each launch
 * takes its own workspace through npu_aclnn_launch. A gradient of another
 * dtype than param's is refused (NOT_SUPPORTED), as aclnn's promotion
 * would keep a second rounding keel's kernels do not have.
 *
 * Each kernel is offered only when libopapi.so has all of its entry
 * points (aclnn_train_api.h lists which need which).
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <keel/kit.h>

#include "aclnn_train_api.h"
#include "npu_internal.h"

#define OPAPI (npu_g.opapi)

/* The resolved entry points, and the kernels whose entry points all
 * resolved (NPU_TRAIN_NEED_*). */
static struct {
#define NPU_TRAIN_MEMBER(ret, name, params, need) ret(*name) params;
    NPU_ACLNN_TRAIN_FUNCS(NPU_TRAIN_MEMBER)
#undef NPU_TRAIN_MEMBER
} TR;
static uint32_t tr_have;

enum tr_kind { TK_SGD, TK_MOMENTUM, TK_ADAM, TK_ADAMW, TK_LN, TK_LN_GRAD,
               TK_BN, TK_BN_GRAD, TK_SM_GRAD, TK_LSM_GRAD, TK_CE,
               TK_CE_GRAD };

struct tr_def {
    const char *name;
    enum tr_kind kind;
    uint32_t need;
    int op; /* catalog id, set by load */
};

#define TR_DTYPES                                                           \
    (KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F16) |                  \
     KEEL_DTYPE_BIT(KEEL_BF16))

static struct tr_def tr_defs[] = {
    {"sgd_update", TK_SGD, NPU_TRAIN_NEED_SGD, -1},
    {"momentum_update", TK_MOMENTUM, NPU_TRAIN_NEED_MOMENTUM, -1},
    {"adam_update", TK_ADAM, NPU_TRAIN_NEED_ADAM, -1},
    {"adamw_update", TK_ADAMW, NPU_TRAIN_NEED_ADAM, -1},
    {"layer_norm", TK_LN, NPU_TRAIN_NEED_LN, -1},
    {"layer_norm_grad", TK_LN_GRAD, NPU_TRAIN_NEED_LN_GRAD, -1},
    {"batch_norm", TK_BN, NPU_TRAIN_NEED_BN, -1},
    {"batch_norm_grad", TK_BN_GRAD, NPU_TRAIN_NEED_BN_GRAD, -1},
    {"softmax_grad", TK_SM_GRAD, NPU_TRAIN_NEED_SM_GRAD, -1},
    {"log_softmax_grad", TK_LSM_GRAD, NPU_TRAIN_NEED_LSM_GRAD, -1},
    {"cross_entropy", TK_CE, NPU_TRAIN_NEED_CE, -1},
    {"cross_entropy_grad", TK_CE_GRAD, NPU_TRAIN_NEED_CE_GRAD, -1},
};

#define TR_NDEFS (sizeof(tr_defs) / sizeof(tr_defs[0]))

void npu_kernels_train_load(void *opapi)
{
    uint32_t missing = 0;

    memset(&TR, 0, sizeof(TR));
    tr_have = 0;
    if (!opapi)
        return;
#define NPU_TRAIN_RESOLVE(ret, name, params, need)  \
    *(void **)&TR.name = dlsym(opapi, #name);       \
    if (!TR.name) {                                 \
        missing |= (need);                          \
        npu_log(KEEL_LOG_INFO, "npu: libopapi.so lacks %s", #name); \
    }
    NPU_ACLNN_TRAIN_FUNCS(NPU_TRAIN_RESOLVE)
#undef NPU_TRAIN_RESOLVE
    tr_have = NPU_TRAIN_NEED_ALL & ~missing;
    for (size_t i = 0; i < TR_NDEFS; i++)
        tr_defs[i].op = keel_kit_op_id(tr_defs[i].name);
}

void npu_kernels_train_unload(void)
{
    memset(&TR, 0, sizeof(TR));
    tr_have = 0;
}

/* ---- a planned sequence of aclnn calls ----------------------------------- */

#define TR_MAX_STEPS 12

struct tr_plan {
    const keel_kernel_args *a;
    const char *name; /* the keel op */
    keel_status st;   /* the first failure; later steps do nothing */
    int n, nsc;
    struct {
        aclOpExecutor *ex;
        uint64_t ws;
        npu_aclnn_phase2 fn;
        const char *call;
    } s[TR_MAX_STEPS];
    aclScalar *sc[2 * TR_MAX_STEPS];
};

/* A float scalar kept until the plan is done (NULL with p->st set). */
static aclScalar *tr_scalar(struct tr_plan *p, double v)
{
    float f = (float)v;
    aclScalar *s;

    if (p->st)
        return NULL;
    if (p->nsc == (int)(sizeof(p->sc) / sizeof(p->sc[0]))) {
        p->st = npu_fail(KEEL_STATUS_INTERNAL, "%s: too many scalars",
                         p->name);
        return NULL;
    }
    s = OPAPI.aclCreateScalar(&f, ACL_FLOAT);
    if (!s) {
        p->st = npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                         "%s: aclCreateScalar(%g) returned NULL", p->name, v);
        return NULL;
    }
    p->sc[p->nsc++] = s;
    return s;
}

/* Record one phase 1's answer (e, from `call`) and its executor. */
static void tr_push(struct tr_plan *p, aclnnStatus e, const char *call,
                    uint64_t ws, aclOpExecutor *ex, npu_aclnn_phase2 fn,
                    const char *call2)
{
    if (p->st)
        return;
    if ((p->st = npu_aclnn_check(e, false, p->a->device, call)))
        return;
    p->s[p->n].ex = ex;
    p->s[p->n].ws = ws;
    p->s[p->n].fn = fn;
    p->s[p->n].call = call2;
    p->n++;
}

/* Room for one more step, or false with p->st set. */
static bool tr_room(struct tr_plan *p)
{
    if (p->st)
        return false;
    if (p->n == TR_MAX_STEPS) {
        p->st = npu_fail(KEEL_STATUS_INTERNAL, "%s: too many aclnn calls",
                         p->name);
        return false;
    }
    return true;
}

/* Launch the planned calls in order. When one fails after others were
 * queued, wait for the stream: the caller may release the operands (and
 * the core the workspaces) as soon as the kernel returns, while the queued
 * calls still use them. */
static keel_status tr_launch(struct tr_plan *p, struct keel_stream_s *s)
{
    keel_status st = p->st;
    int i;

    for (i = 0; i < p->n && !st; i++)
        st = npu_aclnn_launch(p->a, s, p->name, p->s[i].ws, p->s[i].ex,
                              p->s[i].fn, p->s[i].call);
    if (st && i > 1)
        (void)ACL.aclrtSynchronizeStream(s->s);
    return st;
}

/* x *= v */
static void tr_muls(struct tr_plan *p, aclTensor *x, double v)
{
    aclScalar *s = tr_scalar(p, v);
    aclOpExecutor *ex = NULL;
    uint64_t ws = 0;
    aclnnStatus e;

    if (!s || !tr_room(p))
        return;
    e = TR.aclnnInplaceMulsGetWorkspaceSize(x, s, &ws, &ex);
    tr_push(p, e, "aclnnInplaceMulsGetWorkspaceSize", ws, ex,
            TR.aclnnInplaceMuls, "aclnnInplaceMuls");
}

/* x += alpha * y */
static void tr_add(struct tr_plan *p, aclTensor *x, const aclTensor *y,
                   double alpha)
{
    aclScalar *s = tr_scalar(p, alpha);
    aclOpExecutor *ex = NULL;
    uint64_t ws = 0;
    aclnnStatus e;

    if (!s || !tr_room(p))
        return;
    e = TR.aclnnInplaceAddGetWorkspaceSize(x, y, s, &ws, &ex);
    tr_push(p, e, "aclnnInplaceAddGetWorkspaceSize", ws, ex,
            TR.aclnnInplaceAdd, "aclnnInplaceAdd");
}

/* out = x + alpha * y */
static void tr_add_out(struct tr_plan *p, const aclTensor *x,
                       const aclTensor *y, double alpha, aclTensor *out)
{
    aclScalar *s = tr_scalar(p, alpha);
    aclOpExecutor *ex = NULL;
    uint64_t ws = 0;
    aclnnStatus e;

    if (!s || !tr_room(p))
        return;
    e = OPAPI.aclnnAddGetWorkspaceSize(x, y, s, out, &ws, &ex);
    tr_push(p, e, "aclnnAddGetWorkspaceSize", ws, ex, OPAPI.aclnnAdd,
            "aclnnAdd");
}

/* out = x * y */
static void tr_mul_out(struct tr_plan *p, const aclTensor *x,
                       const aclTensor *y, aclTensor *out)
{
    aclOpExecutor *ex = NULL;
    uint64_t ws = 0;
    aclnnStatus e;

    if (!tr_room(p))
        return;
    e = OPAPI.aclnnMulGetWorkspaceSize(x, y, out, &ws, &ex);
    tr_push(p, e, "aclnnMulGetWorkspaceSize", ws, ex, OPAPI.aclnnMul,
            "aclnnMul");
}

/* x += v (a scalar) */
static void tr_adds(struct tr_plan *p, aclTensor *x, double v)
{
    aclScalar *s = tr_scalar(p, v), *one = tr_scalar(p, 1.0);
    aclOpExecutor *ex = NULL;
    uint64_t ws = 0;
    aclnnStatus e;

    if (!s || !one || !tr_room(p))
        return;
    e = TR.aclnnInplaceAddsGetWorkspaceSize(x, s, one, &ws, &ex);
    tr_push(p, e, "aclnnInplaceAddsGetWorkspaceSize", ws, ex,
            TR.aclnnInplaceAdds, "aclnnInplaceAdds");
}

/* x += v * y * z (mul) or v * y / z (div) */
static void tr_addc(struct tr_plan *p, bool div, aclTensor *x,
                    const aclTensor *y, const aclTensor *z, double v)
{
    aclScalar *s = tr_scalar(p, v);
    aclOpExecutor *ex = NULL;
    uint64_t ws = 0;
    aclnnStatus e;

    if (!s || !tr_room(p))
        return;
    if (div) {
        e = TR.aclnnInplaceAddcdivGetWorkspaceSize(x, y, z, s, &ws, &ex);
        tr_push(p, e, "aclnnInplaceAddcdivGetWorkspaceSize", ws, ex,
                TR.aclnnInplaceAddcdiv, "aclnnInplaceAddcdiv");
    } else {
        e = TR.aclnnInplaceAddcmulGetWorkspaceSize(x, y, z, s, &ws, &ex);
        tr_push(p, e, "aclnnInplaceAddcmulGetWorkspaceSize", ws, ex,
                TR.aclnnInplaceAddcmul, "aclnnInplaceAddcmul");
    }
}

/* out = sqrt(x) */
static void tr_sqrt(struct tr_plan *p, const aclTensor *x, aclTensor *out)
{
    aclOpExecutor *ex = NULL;
    uint64_t ws = 0;
    aclnnStatus e;

    if (!tr_room(p))
        return;
    e = TR.aclnnSqrtGetWorkspaceSize(x, out, &ws, &ex);
    tr_push(p, e, "aclnnSqrtGetWorkspaceSize", ws, ex, TR.aclnnSqrt,
            "aclnnSqrt");
}

/* ---- the kernel ---------------------------------------------------------- */

/* sqrt(x) for x in (0, 1] (1 - beta2_pow), by Newton's iteration from 1:
 * the plugin does not link libm. Decreasing to the root, it stops when a
 * step no longer goes down. */
static double tr_sqrt01(double x)
{
    double y = 1, z;

    if (!(x > 0))
        return 0;
    for (int i = 0; i < 4000; i++) {
        z = 0.5 * (y + x / y);
        if (!(z < y))
            break;
        y = z;
    }
    return y;
}

/* A contiguous descriptor of d's shape and dtype at `data`. */
static keel_tensor_desc tr_temp(const keel_tensor_desc *d, keel_dptr data)
{
    keel_tensor_desc t = *d;
    int64_t st = 1;

    for (int i = d->ndim - 1; i >= 0; i--) {
        t.strides[i] = st;
        st *= d->shape[i];
    }
    t.data = data;
    return t;
}

static keel_status ln_run(const struct tr_def *k, const keel_kernel_args *a,
                          struct keel_stream_s *s);
static keel_status bn_run(const struct tr_def *k, const keel_kernel_args *a,
                          struct keel_stream_s *s);
static keel_status sm_run(const struct tr_def *k, const keel_kernel_args *a,
                          struct keel_stream_s *s);
static keel_status ce_run(const struct tr_def *k, const keel_kernel_args *a,
                          struct keel_stream_s *s);

static keel_status train_run(void *kernel_data, const keel_kernel_args *a)
{
    const struct tr_def *k = kernel_data;
    struct tr_plan p;
    struct keel_stream_s *s;
    keel_kit_msg msg;
    keel_status st;
    /* param, grad, state 1, state 2, t, d */
    aclTensor *t[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    keel_tensor_desc tmp[2];
    keel_dptr ws_base = 0;
    int nin = k->kind == TK_SGD ? 2 : k->kind == TK_MOMENTUM ? 3 : 4;
    double lr, wd, mu, b1, b2, b1p, b2p, eps;

    if (!a)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: args is NULL",
                        k->name);
    if ((st = keel_kit_check(k->op, a, &msg)))
        return npu_fail(st, "%s", msg.text);
    if ((st = npu_enter(a->device, k->name)) ||
        (st = npu_stream_get(a->device, a->stream, k->name, &s)))
        return st;
    if (k->kind == TK_LN || k->kind == TK_LN_GRAD) {
        if (!(TR_DTYPES & KEEL_DTYPE_BIT(a->inputs[0].dtype)))
            return npu_fail(KEEL_STATUS_NOT_SUPPORTED, "%s: %s is not "
                            "handled", k->name,
                            keel_kit_dtype_name(a->inputs[0].dtype));
        return ln_run(k, a, s);
    }
    if (k->kind == TK_BN || k->kind == TK_BN_GRAD)
        return bn_run(k, a, s);
    if (k->kind == TK_CE || k->kind == TK_CE_GRAD)
        return ce_run(k, a, s);
    if (k->kind == TK_SM_GRAD || k->kind == TK_LSM_GRAD) {
        if (!(TR_DTYPES & KEEL_DTYPE_BIT(a->inputs[0].dtype)))
            return npu_fail(KEEL_STATUS_NOT_SUPPORTED, "%s: %s is not "
                            "handled", k->name,
                            keel_kit_dtype_name(a->inputs[0].dtype));
        return sm_run(k, a, s);
    }
    for (int i = 0; i < nin; i++)
        if (a->inputs[i].dtype != a->inputs[0].dtype ||
            !(TR_DTYPES & KEEL_DTYPE_BIT(a->inputs[i].dtype)))
            return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                            "%s: input %d is %s with param %s: only one "
                            "dtype of float32, float16, bfloat16 is handled",
                            k->name, i,
                            keel_kit_dtype_name(a->inputs[i].dtype),
                            keel_kit_dtype_name(a->inputs[0].dtype));
    if (keel_kit_numel(&a->inputs[0]) == 0)
        return KEEL_STATUS_OK;

    lr = keel_kit_attr_f(a, "lr", 0);
    wd = k->kind == TK_ADAMW ? 0 : keel_kit_attr_f(a, "weight_decay", 0);
    mu = keel_kit_attr_f(a, "mu", 0.9);
    b1 = keel_kit_attr_f(a, "beta1", 0.9);
    b2 = keel_kit_attr_f(a, "beta2", 0.999);
    b1p = keel_kit_attr_f(a, "beta1_pow", b1);
    b2p = keel_kit_attr_f(a, "beta2_pow", b2);
    eps = keel_kit_attr_f(a, "epsilon", 1e-8);

    if (k->kind == TK_ADAM || k->kind == TK_ADAMW) {
        /* d, and t when the gradient gets an L2 term: one workspace */
        uint64_t es = keel_dtype_size(a->inputs[0].dtype);
        uint64_t n = (uint64_t)keel_kit_numel(&a->inputs[0]);
        uint64_t ntmp = wd != 0 ? 2 : 1, bytes;
        if (n > UINT64_MAX / es / ntmp || n * es > UINT64_MAX - 63)
            return npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                            "%s: %" PRIu64 " elements of temporaries "
                            "overflow", k->name, n);
        bytes = (n * es + 63) / 64 * 64; /* each temporary 64-byte aligned */
        if (bytes > UINT64_MAX / ntmp)
            return npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                            "%s: temporaries overflow", k->name);
        st = keel_kernel_workspace(a, bytes * ntmp, &ws_base);
        if (st == KEEL_STATUS_NOT_SUPPORTED)
            return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                            "%s: this core gives no workspace for the "
                            "temporaries", k->name);
        if (st)
            return npu_fail(st, "%s: the core could not give %" PRIu64
                            " bytes of temporaries (status %d)",
                            k->name, bytes * ntmp, (int)st);
        tmp[0] = tr_temp(&a->inputs[0], ws_base);          /* d */
        tmp[1] = tr_temp(&a->inputs[0], ws_base + bytes);  /* t */
    }

    for (int i = 0; i < nin && !st; i++)
        t[i] = npu_describe(&a->inputs[i], &st);
    if (!st && (k->kind == TK_ADAM || k->kind == TK_ADAMW)) {
        t[5] = npu_describe(&tmp[0], &st);
        if (!st && wd != 0)
            t[4] = npu_describe(&tmp[1], &st);
    }
    if (st)
        goto out;

    memset(&p, 0, sizeof(p));
    p.a = a;
    p.name = k->name;
    switch (k->kind) {
    case TK_SGD:
        if (wd != 0)
            tr_muls(&p, t[0], 1 - lr * wd);
        tr_add(&p, t[0], t[1], -lr);
        break;
    case TK_MOMENTUM:
        tr_muls(&p, t[2], mu);
        tr_add(&p, t[2], t[1], 1);
        if (wd != 0)
            tr_add(&p, t[2], t[0], wd);
        if (keel_kit_attr_i(a, "use_nesterov", 0)) {
            if (wd != 0)
                tr_muls(&p, t[0], 1 - lr * wd);
            tr_add(&p, t[0], t[1], -lr);
            tr_add(&p, t[0], t[2], -lr * mu);
        } else {
            tr_add(&p, t[0], t[2], -lr);
        }
        break;
    default: {
        const aclTensor *gg = wd != 0 ? t[4] : t[1];
        double c2 = tr_sqrt01(1 - b2p);
        if (wd != 0)
            tr_add_out(&p, t[1], t[0], wd, t[4]);
        if (k->kind == TK_ADAMW)
            tr_muls(&p, t[0], 1 - lr * keel_kit_attr_f(a, "coeff", 0.01));
        tr_muls(&p, t[2], b1);
        tr_add(&p, t[2], gg, 1 - b1);
        tr_muls(&p, t[3], b2);
        tr_addc(&p, false, t[3], gg, gg, 1 - b2);
        tr_sqrt(&p, t[3], t[5]);
        tr_adds(&p, t[5], eps * c2);
        tr_addc(&p, true, t[0], t[2], t[5], -lr * c2 / (1 - b1p));
        break;
    }
    }
    st = tr_launch(&p, s);
    for (int i = 0; i < p.nsc; i++)
        OPAPI.aclDestroyScalar(p.sc[i]);
out:
    for (int i = 0; i < 6; i++)
        if (t[i])
            OPAPI.aclDestroyTensor(t[i]);
    return st;
}

/* ---- layer_norm and layer_norm_grad -------------------------------------- */

/* d seen with `ndim` dims `dims`: its own strides when it has those dims
 * (or those dims without trailing 1s), else, for a contiguous or 1-D
 * tensor of as many elements (a 1-D scale, a flat mean), a row-major walk
 * with its stride. *ok false when it is none of these. */
static keel_tensor_desc ln_view(const keel_tensor_desc *d, int ndim,
                                const int64_t *dims, bool *ok)
{
    keel_tensor_desc v = *d;
    int64_t n = 1, st;
    bool same = d->ndim == ndim;

    for (int i = 0; i < ndim; i++) {
        same = same && d->shape[i] == dims[i];
        n *= dims[i];
    }
    *ok = true;
    if (same)
        return v;
    /* d's dims followed by 1s (a statistic [A] as [A, 1, ...]): its own
     * strides */
    same = d->ndim < ndim;
    for (int i = 0; same && i < ndim; i++)
        same = i < d->ndim ? d->shape[i] == dims[i] : dims[i] == 1;
    if (same) {
        v.ndim = ndim;
        for (int i = d->ndim; i < ndim; i++) {
            v.shape[i] = 1;
            v.strides[i] = 1;
        }
        return v;
    }
    /* a 1-D tensor of any stride, or a contiguous one, is a row-major
     * walk of its elements */
    if (keel_kit_numel(d) != n || (d->ndim != 1 && !keel_kit_contiguous(d))) {
        *ok = false;
        return v;
    }
    st = d->ndim == 1 && n > 1 ? d->strides[0] : 1;
    v.ndim = ndim;
    for (int i = ndim - 1; i >= 0; i--) {
        v.shape[i] = dims[i];
        v.strides[i] = st;
        st *= dims[i];
    }
    return v;
}

/*
 * layer_norm: aclnnLayerNorm over normalizedShape = x.shape[b:], with
 * keel's mean and invstd (shape x.shape[:b]) passed as aclnn's meanOut
 * and rstdOut views [x.shape[:b], 1, ..., 1] of the same memory: aclnn's
 * rstd is 1 / sqrt(var + eps) with the biased variance, keel's invstd.
 * layer_norm_grad: aclnnLayerNormBackward with all three outputs; aclnn
 * wants a weight there (its documentation asks a caller without one to
 * pass ones), so the 4-input form without scale is refused
 * (NOT_SUPPORTED). Empty tensors are refused too (aclnn views cannot
 * have a 0 dim).
 */
static keel_status ln_run(const struct tr_def *k, const keel_kernel_args *a,
                          struct keel_stream_s *s)
{
    const keel_tensor_desc *x = &a->inputs[0];
    bool grad = k->kind == TK_LN_GRAD, ok = true;
    int b = keel_kit_axis(keel_kit_attr_i(a, "begin_norm_axis", -1), x->ndim);
    int nt = 0;
    aclTensor *t[8] = {NULL};
    keel_tensor_desc v[8];
    aclIntArray *norm = NULL;
    aclBoolArray *mask = NULL;
    static const bool all3[3] = {true, true, true};
    int64_t adims[KEEL_MAX_DIMS];
    aclOpExecutor *ex = NULL;
    uint64_t ws = 0;
    keel_status st = KEEL_STATUS_OK;
    aclnnStatus e;

    if (b < 0)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "%s: begin_norm_axis out of range", k->name);
    if (grad && a->num_inputs != 5)
        return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                        "layer_norm_grad: without scale aclnnLayerNormBackward "
                        "would need a tensor of ones; not passed to aclnn");
    if (keel_kit_numel(x) == 0)
        return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                        "%s: an empty tensor is not passed to aclnn", k->name);
    for (int i = 0; i < x->ndim; i++)
        adims[i] = i < b ? x->shape[i] : 1;
    if (!grad) {
        /* x, scale?, bias?, y, mean, invstd */
        v[nt++] = *x;
        for (int i = 1; i < a->num_inputs && ok; i++)
            v[nt++] = ln_view(&a->inputs[i], x->ndim - b, x->shape + b, &ok);
        for (int i = a->num_inputs; i < 3; i++)
            nt++; /* absent: no tensor */
        v[nt++] = a->outputs[0];
        for (int i = 1; i < 3 && ok; i++)
            v[nt++] = ln_view(&a->outputs[i], x->ndim, adims, &ok);
    } else {
        /* x, scale, mean, invstd, dy, dx, dscale, dbias */
        v[nt++] = *x;
        v[nt++] = ln_view(&a->inputs[1], x->ndim - b, x->shape + b, &ok);
        for (int i = 2; i < 4 && ok; i++)
            v[nt++] = ln_view(&a->inputs[i], x->ndim, adims, &ok);
        v[nt++] = a->inputs[4];
        v[nt++] = a->outputs[0];
        for (int i = 1; i < 3 && ok; i++)
            v[nt++] = ln_view(&a->outputs[i], x->ndim - b, x->shape + b, &ok);
    }
    if (!ok)
        return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                        "%s: a strided statistic or parameter of another "
                        "shape than aclnn's is not passed", k->name);
    for (int i = 0; i < nt && !st; i++) {
        if (!grad && (i == 1 || i == 2) && i >= a->num_inputs)
            continue;
        t[i] = npu_describe(&v[i], &st);
    }
    if (st)
        goto out;
    norm = OPAPI.aclCreateIntArray(x->shape + b, (uint64_t)(x->ndim - b));
    mask = grad ? OPAPI.aclCreateBoolArray(all3, 3) : NULL;
    if (!norm || (grad && !mask)) {
        st = npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                      "%s: aclCreateIntArray / aclCreateBoolArray returned "
                      "NULL", k->name);
        goto out;
    }
    if (!grad) {
        e = TR.aclnnLayerNormGetWorkspaceSize(
            t[0], norm, t[1], t[2], keel_kit_attr_f(a, "epsilon", 1e-5), t[3],
            t[4], t[5], &ws, &ex);
        if (!(st = npu_aclnn_check(e, false, a->device,
                                   "aclnnLayerNormGetWorkspaceSize")))
            st = npu_aclnn_launch(a, s, k->name, ws, ex, TR.aclnnLayerNorm,
                                  "aclnnLayerNorm");
    } else {
        e = TR.aclnnLayerNormBackwardGetWorkspaceSize(
            t[4], t[0], norm, t[2], t[3], t[1], NULL, mask, t[5], t[6], t[7],
            &ws, &ex);
        if (!(st = npu_aclnn_check(e, false, a->device,
                                   "aclnnLayerNormBackwardGetWorkspaceSize")))
            st = npu_aclnn_launch(a, s, k->name, ws, ex,
                                  TR.aclnnLayerNormBackward,
                                  "aclnnLayerNormBackward");
    }
out:
    for (int i = 0; i < 8; i++)
        if (t[i])
            OPAPI.aclDestroyTensor(t[i]);
    if (norm)
        OPAPI.aclDestroyIntArray(norm);
    if (mask)
        OPAPI.aclDestroyBoolArray(mask);
    return st;
}

/* ---- batch_norm and batch_norm_grad -------------------------------------- */

/*
 * batch_norm, training: aclnnBatchNorm with the running statistics absent
 * (they are optional there) computes y, saveMean and saveInvstd; aclnn's
 * own update would follow PyTorch (momentum on the batch side, unbiased
 * variance), so keel's update is composed after it from the saved values:
 *   rm = momentum rm + (1 - momentum) mean;
 *   rv = momentum rv + (1 - momentum) (1 / invstd^2 - eps)
 * (the biased variance back from invstd = 1 / sqrt(var + eps)), with
 * t = invstd * invstd and ones = t - t + 1 as temporaries in the core's
 * workspace (aclnnMul, aclnnAdd, aclnnInplaceAdds, aclnnInplaceMuls,
 * aclnnInplaceAdd, aclnnInplaceAddcdiv). Inference mode is refused: what
 * aclnnBatchNorm writes to saveMean / saveInvstd there is not documented,
 * and keel returns the running mean and 1 / sqrt(rv + eps) in them.
 * batch_norm_grad, training: aclnnBatchNormBackward from saveMean and
 * saveInvstd, as keel; inference mode is refused, as aclnn then reads
 * runningVar where keel gives invstd. float32 only: aclnn wants the saved
 * statistics in the input's dtype, and keel's are float32.
 */
static keel_status bn_run(const struct tr_def *k, const keel_kernel_args *a,
                          struct keel_stream_s *s)
{
    const keel_tensor_desc *x = &a->inputs[0];
    bool grad = k->kind == TK_BN_GRAD;
    double mom = keel_kit_attr_f(a, "momentum", 0.9);
    double eps = keel_kit_attr_f(a, "epsilon", 1e-5);
    aclTensor *t[10] = {NULL};
    keel_tensor_desc tmp[2];
    aclBoolArray *mask = NULL;
    static const bool all3[3] = {true, true, true};
    struct tr_plan p;
    keel_status st = KEEL_STATUS_OK;
    int nt = 0;

    if (!keel_kit_attr_i(a, "training", 1))
        return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                        "%s: inference mode is not passed to aclnn (its "
                        "statistics there differ from keel's)", k->name);
    for (int i = 0; i < a->num_inputs; i++)
        if (a->inputs[i].dtype != KEEL_F32)
            return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                            "%s: only float32 is passed to aclnn (input %d "
                            "is %s)", k->name, i,
                            keel_kit_dtype_name(a->inputs[i].dtype));
    if (keel_kit_numel(x) == 0)
        return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                        "%s: an empty tensor is not passed to aclnn", k->name);
    memset(&p, 0, sizeof(p));
    p.a = a;
    p.name = k->name;
    if (!grad) {
        int64_t c = x->shape[1];
        uint64_t bytes;
        keel_dptr base = 0;
        if ((uint64_t)c > (UINT64_MAX >> 4))
            return npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                            "batch_norm: %" PRId64 " channels of "
                            "temporaries overflow", c);
        bytes = ((uint64_t)c * 4 + 63) / 64 * 64;
        /* the C-element temporaries t and ones */
        st = keel_kernel_workspace(a, 2 * bytes, &base);
        if (st == KEEL_STATUS_NOT_SUPPORTED)
            return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                            "batch_norm: this core gives no workspace for "
                            "the temporaries");
        if (st)
            return npu_fail(st, "batch_norm: the core could not give %"
                            PRIu64 " bytes of temporaries", 2 * bytes);
        tmp[0] = tr_temp(&a->outputs[2], base);
        tmp[1] = tr_temp(&a->outputs[2], base + bytes);
        /* x, scale, bias, rm, rv, y, mean, invstd, t, ones */
        for (int i = 0; i < 5 && !st; i++)
            t[nt++] = npu_describe(&a->inputs[i], &st);
        for (int i = 0; i < 3 && !st; i++)
            t[nt++] = npu_describe(&a->outputs[i], &st);
        for (int i = 0; i < 2 && !st; i++)
            t[nt++] = npu_describe(&tmp[i], &st);
        if (st)
            goto out;
        if (tr_room(&p)) {
            aclOpExecutor *ex = NULL;
            uint64_t ws = 0;
            aclnnStatus e = TR.aclnnBatchNormGetWorkspaceSize(
                t[0], t[1], t[2], NULL, NULL, true, 1 - mom, eps, t[5], t[6],
                t[7], &ws, &ex);
            tr_push(&p, e, "aclnnBatchNormGetWorkspaceSize", ws, ex,
                    TR.aclnnBatchNorm, "aclnnBatchNorm");
        }
        tr_muls(&p, t[3], mom);
        tr_add(&p, t[3], t[6], 1 - mom);
        tr_mul_out(&p, t[7], t[7], t[8]);
        tr_add_out(&p, t[8], t[8], -1, t[9]);
        tr_adds(&p, t[9], 1);
        tr_muls(&p, t[4], mom);
        tr_addc(&p, true, t[4], t[9], t[8], 1 - mom);
        tr_adds(&p, t[4], -(1 - mom) * eps);
    } else {
        /* x, scale, mean, invstd, dy, dx, dscale, dbias */
        for (int i = 0; i < 5 && !st; i++)
            t[nt++] = npu_describe(&a->inputs[i], &st);
        for (int i = 0; i < 3 && !st; i++)
            t[nt++] = npu_describe(&a->outputs[i], &st);
        if (st)
            goto out;
        mask = OPAPI.aclCreateBoolArray(all3, 3);
        if (!mask) {
            st = npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                          "batch_norm_grad: aclCreateBoolArray returned NULL");
            goto out;
        }
        if (tr_room(&p)) {
            aclOpExecutor *ex = NULL;
            uint64_t ws = 0;
            aclnnStatus e = TR.aclnnBatchNormBackwardGetWorkspaceSize(
                t[4], t[0], t[1], NULL, NULL, t[2], t[3], true, eps, mask,
                t[5], t[6], t[7], &ws, &ex);
            tr_push(&p, e, "aclnnBatchNormBackwardGetWorkspaceSize", ws, ex,
                    TR.aclnnBatchNormBackward, "aclnnBatchNormBackward");
        }
    }
    st = tr_launch(&p, s);
    for (int i = 0; i < p.nsc; i++)
        OPAPI.aclDestroyScalar(p.sc[i]);
out:
    for (int i = 0; i < 10; i++)
        if (t[i])
            OPAPI.aclDestroyTensor(t[i]);
    if (mask)
        OPAPI.aclDestroyBoolArray(mask);
    return st;
}

/* ---- softmax_grad and log_softmax_grad ----------------------------------- */

/* keel's inputs (out, dout) are aclnn's (output, gradOutput), the axis
 * normalised to aclnn's dim (0 for a 0-d tensor); the catalog's formulas
 * are aclnnSoftmaxBackward's and aclnnLogSoftmaxBackward's. */
static keel_status sm_run(const struct tr_def *k, const keel_kernel_args *a,
                          struct keel_stream_s *s)
{
    bool log = k->kind == TK_LSM_GRAD;
    int64_t dim = keel_kit_axis_0d(keel_kit_attr_i(a, "axis", -1),
                                   a->inputs[0].ndim);
    aclTensor *t[3] = {NULL, NULL, NULL};
    aclOpExecutor *ex = NULL;
    uint64_t ws = 0;
    keel_status st = KEEL_STATUS_OK;
    aclnnStatus e;
    const char *p1 = log ? "aclnnLogSoftmaxBackwardGetWorkspaceSize"
                         : "aclnnSoftmaxBackwardGetWorkspaceSize";

    if (dim < 0)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: axis out of range",
                        k->name);
    if (a->inputs[1].dtype != a->inputs[0].dtype ||
        a->outputs[0].dtype != a->inputs[0].dtype)
        return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                        "%s: out, dout and dx of one dtype only", k->name);
    if (keel_kit_numel(&a->inputs[0]) == 0)
        return KEEL_STATUS_OK;
    t[0] = npu_describe(&a->inputs[0], &st);
    if (!st)
        t[1] = npu_describe(&a->inputs[1], &st);
    if (!st)
        t[2] = npu_describe(&a->outputs[0], &st);
    if (st)
        goto out;
    e = log ? TR.aclnnLogSoftmaxBackwardGetWorkspaceSize(t[1], t[0], dim,
                                                          t[2], &ws, &ex)
            : TR.aclnnSoftmaxBackwardGetWorkspaceSize(t[1], t[0], dim, t[2],
                                                       &ws, &ex);
    if (!(st = npu_aclnn_check(e, false, a->device, p1)))
        st = npu_aclnn_launch(a, s, k->name, ws, ex,
                              log ? TR.aclnnLogSoftmaxBackward
                                  : TR.aclnnSoftmaxBackward,
                              log ? "aclnnLogSoftmaxBackward"
                                  : "aclnnSoftmaxBackward");
out:
    for (int i = 0; i < 3; i++)
        if (t[i])
            OPAPI.aclDestroyTensor(t[i]);
    return st;
}

/* ---- cross_entropy ------------------------------------------------------- */

/* d (n elements: [n] or [n, 1]) as a 1-D view of n elements. */
static bool ce_flat(const keel_tensor_desc *d, int64_t n, keel_tensor_desc *v)
{
    int64_t st = 1;
    int k = 0;

    if (keel_kit_numel(d) != n)
        return false;
    for (int i = 0; i < d->ndim; i++)
        if (d->shape[i] != 1) {
            k++;
            st = d->strides[i];
        }
    if (k > 1)
        return false;
    *v = *d;
    v->ndim = 1;
    v->shape[0] = n;
    v->strides[0] = st;
    return true;
}

/*
 * cross_entropy_grad, same configurations as cross_entropy: with
 * logp = aclnnLog(softmax) and gi = aclnnNLLLossBackward(dloss, logp,
 * label, weight) (-weight[y] dloss at the label, 0 elsewhere and for
 * ignore_index), aclnnLogSoftmaxBackward(gi, logp) = gi - softmax sum(gi)
 * = weight[y] dloss (softmax - onehot(y)), keel's dlogits. totalWeight,
 * which NLLLossBackward reads only for 'mean', is a temporary.
 */
static keel_status ceg_run(const struct tr_def *k, const keel_kernel_args *a,
                           struct keel_stream_s *s, int red)
{
    const keel_tensor_desc *x = &a->inputs[0];
    aclTensor *t[11] = {NULL};
    keel_tensor_desc v[11];
    bool has_w = a->num_inputs > 3, mean = red == KEEL_KIT_RED_MEAN;
    uint64_t cbytes;
    struct tr_plan p;
    keel_dptr base = 0;
    uint64_t bytes;
    int64_t n = x->shape[0], c = x->shape[1];
    keel_status st = KEEL_STATUS_OK;

    if (n == 0 || c == 0)
        return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                        "%s: an empty tensor is not passed to aclnn", k->name);
    /* softmax, label, dloss, weight, dlogits, logp, gi, total weight */
    if (!ce_flat(&a->inputs[1], n, &v[1]) ||
        !ce_flat(&a->inputs[2], red == KEEL_KIT_RED_NONE ? n : 1, &v[2]))
        return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                        "%s: label or dloss of another layout than [N] / "
                        "[N, 1]", k->name);
    /* n c elements twice, c more and 192 bytes, each rounded up to 64 */
    if ((uint64_t)c > (UINT64_MAX >> 8) ||
        (uint64_t)n > ((UINT64_MAX >> 4) - (uint64_t)c) / (uint64_t)c)
        return npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "%s: temporaries overflow", k->name);
    bytes = ((uint64_t)n * (uint64_t)c * 4 + 63) / 64 * 64;
    cbytes = ((uint64_t)c * 4 + 63) / 64 * 64;
    /* logp, gi, total weight, ones [C], dloss / N */
    if ((st = keel_kernel_workspace(a, 2 * bytes + 128 + cbytes, &base)))
        return npu_fail(st, "%s: no workspace for the temporaries (status "
                        "%d)", k->name, (int)st);
    v[0] = *x;
    if (has_w) {
        v[3] = a->inputs[3];
    } else {
        /* ones [C], and the first row of softmax to make them from */
        v[3] = tr_temp(x, base + 2 * bytes + 64);
        v[3].ndim = 1;
        v[3].shape[0] = c;
        v[3].strides[0] = 1;
        v[8] = *x;
        v[8].ndim = 1;
        v[8].shape[0] = c;
        v[8].strides[0] = x->strides[1];
    }
    if (mean) {
        /* dloss / N, which 'sum' then takes */
        v[9] = v[2];
        v[10] = v[2];
        v[10].data = base + 2 * bytes + 64 + cbytes;
        v[10].strides[0] = 1;
    }
    v[4] = a->outputs[0];
    v[5] = tr_temp(x, base);
    v[6] = tr_temp(x, base + bytes);
    memset(&v[7], 0, sizeof(v[7]));
    v[7].data = base + 2 * bytes;
    v[7].dtype = KEEL_F32;
    v[7].ndim = 1;
    v[7].shape[0] = 1;
    v[7].strides[0] = 1;
    for (int i = 0; i < 11 && !st; i++)
        if (i < 8 || (i == 8 && !has_w) || (i >= 9 && mean))
            t[i] = npu_describe(&v[i], &st);
    if (st)
        goto out;
    memset(&p, 0, sizeof(p));
    p.a = a;
    p.name = k->name;
    if (!has_w) {
        /* ones = p - p + 1 from probabilities, which are finite */
        tr_add_out(&p, t[8], t[8], -1, t[3]);
        tr_adds(&p, t[3], 1);
    }
    if (mean) /* g / N = g + (1/N - 1) g: Paddle's divisor */
        tr_add_out(&p, t[9], t[9], 1.0 / (double)n - 1, t[10]);
    if (tr_room(&p)) {
        aclOpExecutor *ex = NULL;
        uint64_t ws = 0;
        aclnnStatus e = TR.aclnnLogGetWorkspaceSize(t[0], t[5], &ws, &ex);
        tr_push(&p, e, "aclnnLogGetWorkspaceSize", ws, ex, TR.aclnnLog,
                "aclnnLog");
    }
    if (tr_room(&p)) {
        aclOpExecutor *ex = NULL;
        uint64_t ws = 0;
        aclnnStatus e = TR.aclnnNLLLossBackwardGetWorkspaceSize(
            mean ? t[10] : t[2], t[5], t[1], t[3],
            red == KEEL_KIT_RED_NONE ? 0 : 2,
            keel_kit_attr_i(a, "ignore_index", -100), t[7], t[6], &ws, &ex);
        tr_push(&p, e, "aclnnNLLLossBackwardGetWorkspaceSize", ws, ex,
                TR.aclnnNLLLossBackward, "aclnnNLLLossBackward");
    }
    if (tr_room(&p)) {
        aclOpExecutor *ex = NULL;
        uint64_t ws = 0;
        aclnnStatus e = TR.aclnnLogSoftmaxBackwardGetWorkspaceSize(
            t[6], t[5], 1, t[4], &ws, &ex);
        tr_push(&p, e, "aclnnLogSoftmaxBackwardGetWorkspaceSize", ws, ex,
                TR.aclnnLogSoftmaxBackward, "aclnnLogSoftmaxBackward");
    }
    st = tr_launch(&p, s);
    for (int i = 0; i < p.nsc; i++)
        OPAPI.aclDestroyScalar(p.sc[i]);
out:
    for (int i = 0; i < 11; i++)
        if (t[i])
            OPAPI.aclDestroyTensor(t[i]);
    return st;
}

/*
 * cross_entropy with hard labels, use_softmax and the class axis last, of
 * [N, C] float32 logits, int64 labels and a class weight:
 * softmax = aclnnSoftmax(logits); logp = aclnnLogSoftmax(logits) (a
 * temporary in the core's workspace); loss = aclnnNLLLoss(logp, label,
 * weight, none or sum, ignore_index) — NLLLoss's per-sample loss
 * -weight[label] logp[label] (0 for ignore_index) is keel's. Without a
 * weight, ones (aclnn's headers do not mark it optional) are made from
 * softmax's first row (p - p + 1). 'mean' only where Paddle divides by N
 * (no weight, ignore_index < 0): NLLLoss's sum, then times 1/N; refused
 * (NOT_SUPPORTED) otherwise, as Paddle divides by 1 when nothing is kept
 * and NLLLoss by 0. Refused too: soft labels, label_smoothing, use_softmax=0,
 * another axis, other ranks and dtypes (NLLLoss takes float32 and int64
 * labels). Label values are device data and are not range-checked here,
 * as the CPU kernel does: a label outside [0, C) other than ignore_index
 * is the caller's error.
 */
static keel_status ce_run(const struct tr_def *k, const keel_kernel_args *a,
                          struct keel_stream_s *s)
{
    const keel_tensor_desc *x = &a->inputs[0];
    bool grad = k->kind == TK_CE_GRAD;
    int wi = grad ? 3 : 2; /* the weight's input */
    int red = keel_kit_reduction(a);
    int axis = keel_kit_axis(keel_kit_attr_i(a, "axis", -1), x->ndim);
    aclTensor *t[8] = {NULL};
    keel_tensor_desc v[8];
    struct tr_plan p;
    keel_dptr base = 0;
    uint64_t lbytes;
    int64_t n, c;
    keel_status st = KEEL_STATUS_OK;

    if (keel_kit_attr_i(a, "soft_label", 0) ||
        keel_kit_attr_f(a, "label_smoothing", 0) != 0 ||
        !keel_kit_attr_i(a, "use_softmax", 1) || x->ndim != 2 || axis != 1 ||
        red < 0 || x->dtype != KEEL_F32 || a->inputs[1].dtype != KEEL_I64 ||
        (a->num_inputs > wi && a->inputs[wi].dtype != KEEL_F32) ||
        (grad && a->inputs[2].dtype != KEEL_F32))
        return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                        "%s: only hard int64 labels, use_softmax, no "
                        "smoothing and float32 [N, C] logits with the class "
                        "axis last are passed to aclnnNLLLoss", k->name);
    /* 'mean' is NLLLoss's sum over N only without weights and with
     * ignore_index < 0 (Paddle's divisor N); else Paddle divides by the
     * kept weight but by 1 when nothing is kept, NLLLoss by 0 */
    if (red == KEEL_KIT_RED_MEAN &&
        (a->num_inputs > wi || keel_kit_attr_i(a, "ignore_index", -100) >= 0))
        return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                        "%s: reduction 'mean' with a class weight or "
                        "ignore_index >= 0 divides as Paddle, not as "
                        "aclnnNLLLoss (all samples ignored: 1, not 0)",
                        k->name);
    if (grad)
        return ceg_run(k, a, s, red);
    n = x->shape[0];
    c = x->shape[1];
    if (n == 0 || c == 0)
        return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                        "cross_entropy: an empty tensor is not passed to "
                        "aclnn");
    if (!ce_flat(&a->inputs[1], n, &v[1]) ||
        !ce_flat(&a->outputs[0], red == KEEL_KIT_RED_NONE ? n : 1, &v[3]))
        return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                        "cross_entropy: label or loss of another layout than "
                        "[N] / [N, 1]");
    /* n c elements, c more and 128 bytes, each rounded up to 64 */
    if ((uint64_t)c > (UINT64_MAX >> 8) ||
        (uint64_t)n > ((UINT64_MAX >> 4) - (uint64_t)c) / (uint64_t)c)
        return npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "cross_entropy: temporaries overflow");
    /* logp [N, C], the total weight (one float), ones [C] */
    lbytes = ((uint64_t)n * (uint64_t)c * 4 + 63) / 64 * 64;
    st = keel_kernel_workspace(a, lbytes + 64 + ((uint64_t)c * 4 + 63) / 64 *
                                                    64, &base);
    if (st)
        return npu_fail(st,
                        "cross_entropy: no workspace for the temporaries "
                        "(status %d)", (int)st);
    /* logits, label, weight, loss, softmax, logp, total weight, and
     * without a weight: ones [C] and softmax's first row */
    v[0] = *x;
    if (a->num_inputs > 2) {
        v[2] = a->inputs[2];
    } else {
        v[2] = tr_temp(&a->outputs[1], base + lbytes + 64);
        v[2].ndim = 1;
        v[2].shape[0] = c;
        v[2].strides[0] = 1;
        v[7] = a->outputs[1];
        v[7].ndim = 1;
        v[7].shape[0] = c;
        v[7].strides[0] = a->outputs[1].strides[1];
    }
    v[4] = a->outputs[1];
    v[5] = tr_temp(x, base);
    memset(&v[6], 0, sizeof(v[6]));
    v[6].data = base + lbytes;
    v[6].dtype = KEEL_F32;
    v[6].ndim = 1;
    v[6].shape[0] = 1;
    v[6].strides[0] = 1;
    for (int i = 0; i < (a->num_inputs > 2 ? 7 : 8) && !st; i++)
        t[i] = npu_describe(&v[i], &st);
    if (st)
        goto out;
    memset(&p, 0, sizeof(p));
    p.a = a;
    p.name = k->name;
    if (tr_room(&p)) {
        aclOpExecutor *ex = NULL;
        uint64_t ws = 0;
        aclnnStatus e = OPAPI.aclnnSoftmaxGetWorkspaceSize(t[0], 1, t[4], &ws,
                                                           &ex);
        tr_push(&p, e, "aclnnSoftmaxGetWorkspaceSize", ws, ex,
                OPAPI.aclnnSoftmax, "aclnnSoftmax");
    }
    if (a->num_inputs == 2) {
        /* ones = p - p + 1 from probabilities, which are finite */
        tr_add_out(&p, t[7], t[7], -1, t[2]);
        tr_adds(&p, t[2], 1);
    }
    if (tr_room(&p)) {
        aclOpExecutor *ex = NULL;
        uint64_t ws = 0;
        aclnnStatus e = OPAPI.aclnnLogSoftmaxGetWorkspaceSize(t[0], 1, t[5],
                                                              &ws, &ex);
        tr_push(&p, e, "aclnnLogSoftmaxGetWorkspaceSize", ws, ex,
                OPAPI.aclnnLogSoftmax, "aclnnLogSoftmax");
    }
    if (tr_room(&p)) {
        aclOpExecutor *ex = NULL;
        uint64_t ws = 0;
        /* aclnn's reduction: 0 none, 2 sum (KEEL_KIT_RED_* agree) */
        aclnnStatus e = TR.aclnnNLLLossGetWorkspaceSize(
            t[5], t[1], t[2], red == KEEL_KIT_RED_NONE ? 0 : 2,
            keel_kit_attr_i(a, "ignore_index", -100), t[3], t[6], &ws, &ex);
        tr_push(&p, e, "aclnnNLLLossGetWorkspaceSize", ws, ex,
                TR.aclnnNLLLoss, "aclnnNLLLoss");
    }
    if (red == KEEL_KIT_RED_MEAN)
        tr_muls(&p, t[3], 1.0 / (double)n); /* Paddle's divisor N */
    st = tr_launch(&p, s);
    for (int i = 0; i < p.nsc; i++)
        OPAPI.aclDestroyScalar(p.sc[i]);
out:
    for (int i = 0; i < 8; i++)
        if (t[i])
            OPAPI.aclDestroyTensor(t[i]);
    return st;
}

keel_status npu_kernels_train_lookup(const char *op_name, keel_dtype dtype,
                                     keel_kernel *kernel)
{
    if (!op_name || !kernel || !(TR_DTYPES & KEEL_DTYPE_BIT(dtype)))
        return KEEL_STATUS_NOT_FOUND;
    for (size_t i = 0; i < TR_NDEFS; i++) {
        struct tr_def *k = &tr_defs[i];
        if (k->op < 0 || (tr_have & k->need) != k->need ||
            strcmp(k->name, op_name) ||
            ((k->kind == TK_BN || k->kind == TK_BN_GRAD || k->kind == TK_CE ||
              k->kind == TK_CE_GRAD) &&
             dtype != KEEL_F32))
            continue;
        kernel->fn = train_run;
        kernel->kernel_data = k;
        return KEEL_STATUS_OK;
    }
    return KEEL_STATUS_NOT_FOUND;
}
