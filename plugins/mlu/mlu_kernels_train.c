/*
 * keel Cambricon MLU plugin — CNNL kernels for the optimizer updates
 * (sgd_update, momentum_update, adam_update, adamw_update), layer_norm,
 * batch_norm and their grads (see mlu_internal.h; the shared parts are in
 * mlu_kernels.c; the declarations this file adds are in cnnl_train_api.h;
 * docs/mlu-plugin.md, "Training ops on CNNL").
 *
 * CNNL's fused optimizer calls (cnnlGradientDescent, cnnlApplyMomentum,
 * cnnlApplyAdam ...) take the learning rate and betas as device tensors
 * and do not take keel's weight decay, Nesterov form or Paddle's epsilon
 * scaled by sqrt(1 - beta2_pow): instead every update is COMPOSED from
 * elementwise calls that give the catalog's formula step by step, each
 * rounded to the parameter's dtype (in float32 like the CPU plugin's
 * loops; in float16 coarser, as the CPU plugin keeps float between steps):
 *
 *   cnnlOpTensor ADD   c = alpha1 * a + alpha2 * b (beta 0)
 *   cnnlOpTensor MUL   c = a * b
 *   cnnlSqrt_v2        y = sqrt(x)
 *   cnnlTransform      y = x + eps
 *   cnnlDiv_v2         c = a / b
 *
 * grad is only read (the CPU plugin leaves it as it is too): g + wd * p
 * goes to a temporary when wd is not 0. Temporaries (contiguous, param's
 * shape and dtype) and the op-tensor / div workspace come from one block
 * of the launch's workspace. param and the states are written in place
 * (the output descriptor is the input's). float32 and float16; a grad of
 * another dtype than param's is refused (NOT_SUPPORTED: cnnlOpTensor takes
 * one dtype), and the core runs the CPU kernel.
 *
 * layer_norm and its grad are one CNNL call each (see ln_launch);
 * batch_norm and its grad run on CNNL's NHWC batch norm with transposes,
 * keel's running statistics composed after it (see bn_launch).
 * cross_entropy is not offered: it takes the CPU fallback.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <keel/kit.h>

#include "cnnl_train_api.h"
#include "mlu_internal.h"

#define NN (mlu.nn)

static struct {
#define TR_SLOT(ret, name, params) ret(*name) params;
    MLU_CNNL_TRAIN_FUNCS(TR_SLOT)
#undef TR_SLOT
} TR;

enum okind {
    OPT_SGD,
    OPT_MOMENTUM,
    OPT_ADAM,
    OPT_ADAMW,
    LN_FWD,
    LN_BWD,
    BN_FWD,
    BN_BWD
};

/* The groups of entry points of cnnl_train_api.h a kernel needs. */
enum { NEED_ADAM = 1, NEED_LN = 2, NEED_LNG = 4, NEED_NHWC = 8, NEED_BN = 16,
       NEED_BNG = 32 };

static struct odef {
    const char *name;
    enum okind kind;
    unsigned need;   /* NEED_* */
    uint32_t dtypes; /* KEEL_DTYPE_BIT set */
    int id;          /* catalog id; -1: not offered */
} odefs[] = {
    {"sgd_update", OPT_SGD, 0,
     KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F16), -1},
    {"momentum_update", OPT_MOMENTUM, 0,
     KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F16), -1},
    {"adam_update", OPT_ADAM, NEED_ADAM,
     KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F16), -1},
    {"adamw_update", OPT_ADAMW, NEED_ADAM,
     KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F16), -1},
    {"layer_norm", LN_FWD, NEED_LN, KEEL_DTYPE_BIT(KEEL_F32), -1},
    {"layer_norm_grad", LN_BWD, NEED_LNG, KEEL_DTYPE_BIT(KEEL_F32), -1},
    {"batch_norm", BN_FWD, NEED_ADAM | NEED_NHWC | NEED_BN,
     KEEL_DTYPE_BIT(KEEL_F32), -1},
    {"batch_norm_grad", BN_BWD, NEED_NHWC | NEED_BNG,
     KEEL_DTYPE_BIT(KEEL_F32), -1},
};
#define NODEFS (sizeof(odefs) / sizeof(odefs[0]))

void mlu_kernels_train_open(void *cnnl)
{
    unsigned have = NEED_ADAM | NEED_LN | NEED_LNG | NEED_NHWC | NEED_BN |
                    NEED_BNG,
             group;

#define TR_GET(ret, name, params)                                          \
    *(void **)&TR.name = dlsym(cnnl, #name);                               \
    if (!TR.name) {                                                        \
        have &= ~group;                                                    \
        mlu_note(KEEL_LOG_INFO,                                            \
                 "mlu: libcnnl.so has no %s: the kernels that need it "    \
                 "take the CPU fallback", #name);                          \
    }
    group = NEED_ADAM;
    MLU_CNNL_ADAM_FUNCS(TR_GET)
    group = NEED_LN;
    MLU_CNNL_LN_FUNCS(TR_GET)
    group = NEED_LNG;
    MLU_CNNL_LNG_FUNCS(TR_GET)
    group = NEED_NHWC;
    MLU_CNNL_NHWC_FUNCS(TR_GET)
    group = NEED_BN;
    MLU_CNNL_BN_FUNCS(TR_GET)
    group = NEED_BNG;
    MLU_CNNL_BNG_FUNCS(TR_GET)
#undef TR_GET
    for (size_t i = 0; i < NODEFS; i++)
        odefs[i].id = (odefs[i].need & have) == odefs[i].need
                          ? keel_kit_op_id(odefs[i].name)
                          : -1;
}

void mlu_kernels_train_close(void)
{
    memset(&TR, 0, sizeof(TR));
    for (size_t i = 0; i < NODEFS; i++)
        odefs[i].id = -1;
}

/* ---- one update as a sequence of CNNL calls ------------------------------- */

/*
 * The sequence runs twice: first with exec false, asking every call's
 * workspace size (the largest is kept), then, with the workspace and the
 * temporaries placed, launching the calls in order on the queue.
 */
struct orun {
    const keel_kernel_args *a;
    cnnlHandle_t h;
    bool exec;
    bool dirty; /* a launched call has written one of the inputs */
    const char *name;
    keel_status st;
    size_t ws_n;
    void *ws;
    cnnlOpTensorDescriptor_t add, mul;
    cnnlTransposeDescriptor_t trans; /* batch norm: [N, A, B] -> [N, B, A] */
};

/* The op-tensor descriptors every sequence uses (r->st says how it went). */
static void orun_begin(struct orun *r, const keel_kernel_args *a,
                       const char *name, cnnlHandle_t h)
{
    memset(r, 0, sizeof(*r));
    r->a = a;
    r->name = name;
    r->h = h;
    r->st = mlu_nn_check(NN.cnnlCreateOpTensorDescriptor(&r->add), a->device,
                         "cnnlCreateOpTensorDescriptor");
    if (!r->st)
        r->st = mlu_nn_check(NN.cnnlCreateOpTensorDescriptor(&r->mul),
                             a->device, "cnnlCreateOpTensorDescriptor");
    if (!r->st)
        r->st = mlu_nn_check(NN.cnnlSetOpTensorDescriptor(
                                 r->add, CNNL_OP_TENSOR_ADD, CNNL_DTYPE_FLOAT,
                                 CNNL_NOT_PROPAGATE_NAN),
                             a->device, "cnnlSetOpTensorDescriptor");
    if (!r->st)
        r->st = mlu_nn_check(NN.cnnlSetOpTensorDescriptor(
                                 r->mul, CNNL_OP_TENSOR_MUL, CNNL_DTYPE_FLOAT,
                                 CNNL_NOT_PROPAGATE_NAN),
                             a->device, "cnnlSetOpTensorDescriptor");
}

static void orun_end(struct orun *r)
{
    if (r->add)
        NN.cnnlDestroyOpTensorDescriptor(r->add);
    if (r->mul)
        NN.cnnlDestroyOpTensorDescriptor(r->mul);
    if (r->trans)
        TR.cnnlDestroyTransposeDescriptor(r->trans);
}

/*
 * After each launched call: once a call has written param, a state or a
 * running statistic in place, a later refusal must not become
 * NOT_SUPPORTED, or the core's CPU fallback would apply the update a
 * second time to partly updated inputs. It is DEVICE_ERROR instead.
 */
static void r_done(struct orun *r, const void *out, const char *call)
{
    if (r->st == KEEL_STATUS_NOT_SUPPORTED && r->dirty) {
        r->st = mlu_err(KEEL_STATUS_DEVICE_ERROR,
                        "%s on mlu:%d: %s refused a call after the update "
                        "had begun writing the inputs in place; they are "
                        "partly updated, so no CPU fallback can redo it",
                        r->name, (int)r->a->device, call);
        return;
    }
    for (int i = 0; !r->st && out && i < r->a->num_inputs; i++)
        if (MLU_PTR(r->a->inputs[i].data) == out)
            r->dirty = true;
}

static void r_op(struct orun *r, bool mul, float a1,
                 cnnlTensorDescriptor_t da, const void *pa, float a2,
                 cnnlTensorDescriptor_t db, const void *pb,
                 cnnlTensorDescriptor_t dc, void *pc)
{
    float zero = 0.0f;
    size_t n = 0;

    if (r->st)
        return;
    if (!r->exec) {
        r->st = mlu_nn_check(NN.cnnlGetOpTensorWorkspaceSize(r->h, da, db, dc,
                                                             &n),
                             r->a->device, "cnnlGetOpTensorWorkspaceSize");
        if (n > r->ws_n)
            r->ws_n = n;
        return;
    }
    r->st = mlu_nn_check(NN.cnnlOpTensor(r->h, mul ? r->mul : r->add, &a1, da,
                                         pa, &a2, db, pb, r->ws, r->ws_n,
                                         &zero, dc, pc),
                         r->a->device, "cnnlOpTensor");
    r_done(r, pc, "cnnlOpTensor");
}

static void r_sqrt(struct orun *r, cnnlTensorDescriptor_t dx, const void *x,
                   cnnlTensorDescriptor_t dy, void *y)
{
    if (r->st || !r->exec)
        return;
    r->st = mlu_nn_check(TR.cnnlSqrt_v2(r->h, CNNL_COMPUTATION_HIGH_PRECISION,
                                        dx, x, dy, y),
                         r->a->device, "cnnlSqrt_v2");
    r_done(r, y, "cnnlSqrt_v2");
}

/* y = x + add, in place (y is x). */
static void r_plus(struct orun *r, cnnlTensorDescriptor_t dx, void *x,
                   float add)
{
    float one = 1.0f;

    if (r->st || !r->exec)
        return;
    r->st = mlu_nn_check(TR.cnnlTransform(r->h, &one, dx, x, &add, x),
                         r->a->device, "cnnlTransform");
    r_done(r, x, "cnnlTransform");
}

/* y = alpha x + beta (y described by dx). */
static void r_affine(struct orun *r, float alpha, cnnlTensorDescriptor_t dx,
                     const void *x, float beta, void *y)
{
    if (r->st || !r->exec)
        return;
    r->st = mlu_nn_check(TR.cnnlTransform(r->h, &alpha, dx, x, &beta, y),
                         r->a->device, "cnnlTransform");
    r_done(r, y, "cnnlTransform");
}

/* r->trans of x into y. */
static void r_transpose(struct orun *r, cnnlTensorDescriptor_t dx,
                        const void *x, cnnlTensorDescriptor_t dy, void *y)
{
    size_t n = 0;

    if (r->st)
        return;
    if (!r->exec) {
        r->st = mlu_nn_check(TR.cnnlGetTransposeWorkspaceSize(r->h, dx,
                                                              r->trans, &n),
                             r->a->device, "cnnlGetTransposeWorkspaceSize");
        if (n > r->ws_n)
            r->ws_n = n;
        return;
    }
    r->st = mlu_nn_check(TR.cnnlTranspose_v2(r->h, r->trans, dx, x, dy, y,
                                             r->ws, r->ws_n),
                         r->a->device, "cnnlTranspose_v2");
    r_done(r, y, "cnnlTranspose_v2");
}

static void r_div(struct orun *r, cnnlTensorDescriptor_t da, const void *pa,
                  cnnlTensorDescriptor_t db, const void *pb,
                  cnnlTensorDescriptor_t dc, void *pc)
{
    size_t n = 0;

    if (r->st)
        return;
    if (!r->exec) {
        r->st = mlu_nn_check(TR.cnnlGetDivWorkspaceSize(r->h, da, db, dc, &n),
                             r->a->device, "cnnlGetDivWorkspaceSize");
        if (n > r->ws_n)
            r->ws_n = n;
        return;
    }
    r->st = mlu_nn_check(TR.cnnlDiv_v2(r->h, CNNL_COMPUTATION_HIGH_PRECISION,
                                       da, pa, db, pb, r->ws, r->ws_n, dc, pc),
                         r->a->device, "cnnlDiv_v2");
    r_done(r, pc, "cnnlDiv_v2");
}

/* sqrt of a non-negative double by Newton's iteration from above: the
 * plugin does not link libm for two scalars. */
static double opt_sqrt(double x)
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

/* The update's attributes, as the CPU plugin reads them. */
struct oattr {
    double lr, wd, mu, b1, b2, lr_t, eps_t, decay;
    bool nesterov;
};

static void read_attrs(const keel_kernel_args *a, enum okind kind,
                       struct oattr *o)
{
    double b1p, b2p;

    o->lr = keel_kit_attr_f(a, "lr", 0);
    o->wd = kind == OPT_ADAMW ? 0 : keel_kit_attr_f(a, "weight_decay", 0);
    o->mu = keel_kit_attr_f(a, "mu", 0.9);
    o->nesterov = keel_kit_attr_i(a, "use_nesterov", 0) != 0;
    o->b1 = keel_kit_attr_f(a, "beta1", 0.9);
    o->b2 = keel_kit_attr_f(a, "beta2", 0.999);
    b1p = keel_kit_attr_f(a, "beta1_pow", o->b1);
    b2p = keel_kit_attr_f(a, "beta2_pow", o->b2);
    o->lr_t = o->lr * opt_sqrt(1 - b2p) / (1 - b1p);
    o->eps_t = keel_kit_attr_f(a, "epsilon", 1e-8) * opt_sqrt(1 - b2p);
    o->decay = kind == OPT_ADAMW ? o->lr * keel_kit_attr_f(a, "coeff", 0.01)
                                 : 0;
}

/*
 * The catalog's formula in CNNL calls (p param, g grad, s1 velocity or m,
 * s2 v; t[0..2] temporaries described by dt):
 *   gp = g, or t0 = g + wd p
 *   sgd       p = p - lr gp
 *   momentum  v = mu v + gp; p = p - lr v, or t1 = gp + mu v; p = p - lr t1
 *   adam(w)   [adamw: p = p - decay p]; m = b1 m + (1-b1) gp;
 *             t1 = gp gp; v = b2 v + (1-b2) t1; t1 = sqrt(v) + eps_t;
 *             t2 = m / t1; p = p - lr_t t2
 */
static void sequence(struct orun *r, enum okind kind, const struct oattr *o,
                     cnnlTensorDescriptor_t d[4], cnnlTensorDescriptor_t dt,
                     void *t[3])
{
    const keel_kernel_args *a = r->a;
    void *p = MLU_PTR(a->inputs[0].data);
    void *s1 = a->num_inputs > 2 ? MLU_PTR(a->inputs[2].data) : NULL;
    void *s2 = a->num_inputs > 3 ? MLU_PTR(a->inputs[3].data) : NULL;
    cnnlTensorDescriptor_t dgp = d[1];
    const void *gp = MLU_PTR(a->inputs[1].data);

    if (o->wd != 0) {
        r_op(r, false, 1.0f, d[1], gp, (float)o->wd, d[0], p, dt, t[0]);
        dgp = dt;
        gp = t[0];
    }
    switch (kind) {
    case OPT_SGD:
        r_op(r, false, 1.0f, d[0], p, (float)-o->lr, dgp, gp, d[0], p);
        break;
    case OPT_MOMENTUM:
        r_op(r, false, (float)o->mu, d[2], s1, 1.0f, dgp, gp, d[2], s1);
        if (o->nesterov) {
            r_op(r, false, 1.0f, dgp, gp, (float)o->mu, d[2], s1, dt, t[1]);
            r_op(r, false, 1.0f, d[0], p, (float)-o->lr, dt, t[1], d[0], p);
        } else {
            r_op(r, false, 1.0f, d[0], p, (float)-o->lr, d[2], s1, d[0], p);
        }
        break;
    default:
        if (kind == OPT_ADAMW)
            r_op(r, false, 1.0f, d[0], p, (float)-o->decay, d[0], p, d[0], p);
        r_op(r, false, (float)o->b1, d[2], s1, (float)(1 - o->b1), dgp, gp,
             d[2], s1);
        r_op(r, true, 1.0f, dgp, gp, 1.0f, dgp, gp, dt, t[1]);
        r_op(r, false, (float)o->b2, d[3], s2, (float)(1 - o->b2), dt, t[1],
             d[3], s2);
        r_sqrt(r, d[3], s2, dt, t[1]);
        r_plus(r, dt, t[1], (float)o->eps_t);
        r_div(r, d[2], s1, dt, t[1], dt, t[2]);
        r_op(r, false, 1.0f, d[0], p, (float)-o->lr_t, dt, t[2], d[0], p);
        break;
    }
}

#define OPT_ALIGN ((size_t)MLU_ALLOC_ALIGNMENT)

static size_t align_up(size_t n)
{
    return (n + OPT_ALIGN - 1) / OPT_ALIGN * OPT_ALIGN;
}

static keel_status launch(void *kernel_data, const keel_kernel_args *a)
{
    const struct odef *k = kernel_data;
    cnnlTensorDescriptor_t d[4] = {NULL, NULL, NULL, NULL}, dt = NULL;
    keel_tensor_desc tmp;
    struct keel_stream_s *s;
    struct oattr o;
    struct orun r;
    keel_kit_msg msg;
    keel_status st;
    cnnlHandle_t h;
    void *t[3] = {NULL, NULL, NULL}, *ws = NULL;
    bool ours = false;
    int64_t n;
    size_t esz, tb, ntemp, total;

    if (!a)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT, "%s: args is NULL",
                       k->name);
    if ((st = keel_kit_check(k->id, a, &msg)))
        return mlu_err(st, "%s", msg.text);
    if ((st = mlu_enter(a->device, k->name)) ||
        (st = mlu_queue_of(a->device, a->stream, k->name, &s)))
        return st;
    if (a->inputs[0].dtype != KEEL_F32 && a->inputs[0].dtype != KEEL_F16)
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED, "%s: %s is not handled",
                       k->name, keel_kit_dtype_name(a->inputs[0].dtype));
    /* cnnlOpTensor takes operands of one dtype: a grad of another dtype
     * would need a cast first; the CPU kernel takes it instead. */
    if (a->inputs[1].dtype != a->inputs[0].dtype)
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: a %s grad of a %s param is not passed to CNNL",
                       k->name, keel_kit_dtype_name(a->inputs[1].dtype),
                       keel_kit_dtype_name(a->inputs[0].dtype));
    n = keel_kit_numel(&a->inputs[0]);
    if (n == 0)
        return KEEL_STATUS_OK;
    read_attrs(a, k->kind, &o);
    esz = a->inputs[0].dtype == KEEL_F32 ? 4 : 2;
    if ((uint64_t)n > (SIZE_MAX - OPT_ALIGN) / 4 / esz)
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: %" PRId64 " elements do not fit a workspace",
                       k->name, n);
    tb = align_up((size_t)n * esz);
    ntemp = k->kind == OPT_ADAM || k->kind == OPT_ADAMW ? 3
            : k->kind == OPT_MOMENTUM                  ? 2
                                                       : 1;

    /* the temporaries: param's shape, contiguous */
    tmp = a->inputs[0];
    tmp.data = 0;
    for (int64_t i = tmp.ndim - 1, step = 1; i >= 0; i--) {
        tmp.strides[i] = step;
        step *= tmp.shape[i] > 0 ? tmp.shape[i] : 1;
    }
    for (int i = 0; i < a->num_inputs && i < 4 && !st; i++)
        st = mlu_nn_describe(a->device, &a->inputs[i], &d[i]);
    if (!st)
        st = mlu_nn_describe(a->device, &tmp, &dt);
    if (st)
        goto out;
    if ((st = mlu_nn_lock(a->device, s, &h)))
        goto out;
    orun_begin(&r, a, k->name, h);
    sequence(&r, k->kind, &o, d, dt, t); /* sizes only */
    st = r.st;
    if (!st && r.ws_n > SIZE_MAX - OPT_ALIGN - ntemp * tb)
        st = mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                     "%s: a workspace of %zu bytes is too large", k->name,
                     r.ws_n);
    if (!st) {
        total = align_up(r.ws_n) + ntemp * tb;
        st = mlu_nn_workspace(a, k->name, total, &ws, &ours);
    }
    if (!st) {
        char *base = ws;
        r.ws = r.ws_n ? base : NULL;
        for (size_t i = 0; i < ntemp; i++)
            t[i] = base + align_up(r.ws_n) + i * tb;
        r.exec = true;
        sequence(&r, k->kind, &o, d, dt, t);
        st = r.st;
        st = mlu_nn_workspace_done(a, s, k->name, ws, ours, st);
    }
    orun_end(&r);
    mlu_nn_unlock(a->device);
out:
    for (int i = 0; i < 4; i++)
        if (d[i])
            NN.cnnlDestroyTensorDescriptor(d[i]);
    if (dt)
        NN.cnnlDestroyTensorDescriptor(dt);
    return st;
}

/* ---- layer_norm and layer_norm_grad ------------------------------------- */

/*
 * One cnnlLayerNormForward / cnnlLayerNormBackward_v2 over x seen as
 * [outer, inner] with axis 1 (the rows keel normalises), scale and bias as
 * [inner], the statistics as [outer]. CNNL's rstd is keel's invstd,
 * 1 / sqrt(var + eps) with the biased variance, and the backward reads the
 * saved statistics as keel's does, so the results are the catalog's.
 * Refused (NOT_SUPPORTED, the CPU kernel runs): x, dy or a parameter that
 * is a strided view (the 2-D view needs contiguous data), a parameter or
 * statistic of another dtype than x's (float32 only), a scale without a
 * bias in the forward (not verified that CNNL takes it), a grad without a
 * scale (CNNL's backward reads a weight), empty rows.
 */

/* A contiguous CNNL descriptor of `ndim` dims (ndim 1 or 2). */
static keel_status describe_dims(int32_t dev, keel_dtype dt, int ndim,
                                 int64_t d0, int64_t d1,
                                 cnnlTensorDescriptor_t *out)
{
    keel_tensor_desc t;

    memset(&t, 0, sizeof(t));
    t.dtype = dt;
    t.ndim = ndim;
    t.shape[0] = d0;
    t.strides[0] = ndim == 2 ? d1 : 1;
    if (ndim == 2) {
        t.shape[1] = d1;
        t.strides[1] = 1;
    }
    return mlu_nn_describe(dev, &t, out);
}

/* Input i (a < 0: absent, allowed) is contiguous and of x's dtype. */
static keel_status ln_input_ok(const struct odef *k, const keel_kernel_args *a,
                               int i, const char *what)
{
    if (i < 0)
        return KEEL_STATUS_OK;
    if (a->inputs[i].dtype != a->inputs[0].dtype)
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: a %s %s with a %s x is not passed to CNNL",
                       k->name, keel_kit_dtype_name(a->inputs[i].dtype), what,
                       keel_kit_dtype_name(a->inputs[0].dtype));
    if (!keel_kit_contiguous(&a->inputs[i]))
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: a strided %s is not passed to CNNL (it is seen "
                       "as a contiguous [rows, cols] tensor)",
                       k->name, what);
    return KEEL_STATUS_OK;
}

static keel_status ln_launch(void *kernel_data, const keel_kernel_args *a)
{
    const struct odef *k = kernel_data;
    cnnlTensorDescriptor_t dx = NULL, dp = NULL, dm = NULL;
    struct keel_stream_s *s;
    keel_kit_norm g;
    keel_kit_msg msg;
    keel_status st;
    cnnlHandle_t h;
    void *ws = NULL;
    bool ours = false, fwd = k->kind == LN_FWD;
    size_t n = 0;
    int32_t dev;

    if (!a)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT, "%s: args is NULL",
                       k->name);
    if ((st = keel_kit_check(k->id, a, &msg)) ||
        (st = keel_kit_norm_geometry(k->id, a, &g, &msg)))
        return mlu_err(st, "%s", msg.text);
    dev = a->device;
    if ((st = mlu_enter(dev, k->name)) ||
        (st = mlu_queue_of(dev, a->stream, k->name, &s)))
        return st;
    if (a->inputs[0].dtype != KEEL_F32)
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED, "%s: %s is not handled",
                       k->name, keel_kit_dtype_name(a->inputs[0].dtype));
    if (g.outer == 0 || (!fwd && g.inner == 0))
        return KEEL_STATUS_OK; /* no element to write */
    if (g.inner == 0)
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: empty rows are not passed to CNNL", k->name);
    if (g.outer > INT_MAX || g.inner > INT_MAX)
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: %" PRId64 " rows of %" PRId64
                       " do not fit a CNNL descriptor",
                       k->name, g.outer, g.inner);
    if (fwd && (g.scale >= 0) != (g.bias >= 0))
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: a scale without a bias (or a bias without a "
                       "scale) is not passed to CNNL",
                       k->name);
    if (!fwd && g.scale < 0)
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: without a scale: cnnlLayerNormBackward_v2 reads "
                       "a weight",
                       k->name);
    if ((st = ln_input_ok(k, a, 0, "x")) ||
        (st = ln_input_ok(k, a, g.scale, "scale")) ||
        (st = ln_input_ok(k, a, fwd ? g.bias : -1, "bias")) ||
        (st = ln_input_ok(k, a, fwd ? -1 : g.stat[0], "mean")) ||
        (st = ln_input_ok(k, a, fwd ? -1 : g.stat[1], "invstd")) ||
        (st = ln_input_ok(k, a, fwd ? -1 : g.dy, "dy")))
        return st;
    if (!fwd && (a->outputs[1].dtype != KEEL_F32 ||
                 a->outputs[2].dtype != KEEL_F32))
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: dscale and dbias of another dtype than x's",
                       k->name);

    if ((st = describe_dims(dev, KEEL_F32, 2, g.outer, g.inner, &dx)) ||
        (st = describe_dims(dev, KEEL_F32, 1, g.inner, 0, &dp)) ||
        (st = describe_dims(dev, KEEL_F32, 1, g.outer, 0, &dm)))
        goto out;
    if ((st = mlu_nn_lock(dev, s, &h)))
        goto out;
    st = fwd ? mlu_nn_check(TR.cnnlGetLayerNormOpWorkspaceSize(h, 1, dx, &n),
                            dev, "cnnlGetLayerNormOpWorkspaceSize")
             : mlu_nn_check(TR.cnnlGetLayerNormBackwardWorkspaceSize(h, dx, 1,
                                                                    &n),
                            dev, "cnnlGetLayerNormBackwardWorkspaceSize");
    if (!st)
        st = mlu_nn_workspace(a, k->name, n, &ws, &ours);
    if (!st) {
        if (fwd) {
            bool affine = g.scale >= 0;
            st = mlu_nn_check(
                TR.cnnlLayerNormForward(
                    h, dx, MLU_PTR(a->inputs[0].data), 1, affine ? dp : NULL,
                    affine ? MLU_PTR(a->inputs[g.scale].data) : NULL,
                    affine ? MLU_PTR(a->inputs[g.bias].data) : NULL,
                    (float)keel_kit_attr_f(a, "epsilon", 1e-5), ws, n, dx,
                    MLU_PTR(a->outputs[0].data), dm,
                    MLU_PTR(a->outputs[1].data), MLU_PTR(a->outputs[2].data)),
                dev, "cnnlLayerNormForward");
        } else {
            st = mlu_nn_check(
                TR.cnnlLayerNormBackward_v2(
                    h, dx, MLU_PTR(a->inputs[0].data), 1, dx,
                    MLU_PTR(a->inputs[g.dy].data), dp,
                    MLU_PTR(a->inputs[g.scale].data), dm,
                    MLU_PTR(a->inputs[g.stat[0]].data),
                    MLU_PTR(a->inputs[g.stat[1]].data), ws, n, dx,
                    MLU_PTR(a->outputs[0].data), MLU_PTR(a->outputs[1].data),
                    MLU_PTR(a->outputs[2].data)),
                dev, "cnnlLayerNormBackward_v2");
        }
        st = mlu_nn_workspace_done(a, s, k->name, ws, ours, st);
    }
    mlu_nn_unlock(dev);
out:
    if (dx)
        NN.cnnlDestroyTensorDescriptor(dx);
    if (dp)
        NN.cnnlDestroyTensorDescriptor(dp);
    if (dm)
        NN.cnnlDestroyTensorDescriptor(dm);
    return st;
}

/* ---- batch_norm and batch_norm_grad --------------------------------------- */

/*
 * CNNL's batch norm takes channels-last (NHWC) tensors: x [N, C, S...] is
 * transposed as [N, C, S] -> [N, S, C] into the workspace, described as
 * NHWC [N, S, 1, C], and the result transposed back.
 *
 * The running statistics are NOT left to CNNL: its update is
 * (1 - momentum) running + momentum batch, and which variance it folds in
 * (biased, as keel, or unbiased) was not found in public sources. So the
 * training forward gets no moving statistics (NULL, as torch_mlu passes
 * when there are none) and keel's update is composed after it from the
 * saved statistics, with the biased variance recovered from CNNL's saved
 * invstd = 1 / sqrt(var + eps):
 *   running_mean = momentum running_mean + (1 - momentum) saved_mean
 *   var = 1 / (saved_invstd saved_invstd) - eps
 *   running_var = momentum running_var + (1 - momentum) var
 * (rounding differs from the CPU kernel's double variance by a few float
 * ulps). Inference uses cnnlBatchNormForwardInference and writes keel's
 * saved outputs: the running mean and 1 / sqrt(running_var + eps).
 * The grad is cnnlBatchNormBackward, training form only: with training 0
 * keel's dx = scale invstd dy is refused (the CPU kernel runs).
 * Also refused: strided x, dy or [C] tensors, a dtype other than float32
 * for any of them, an empty batch (N * spatial 0), sizes past int.
 */

struct bnio {
    cnnlTensorDescriptor_t d3, d3t, dn, dc;
    void *xt, *yt, *dyt, *c[3]; /* workspace temporaries */
    float momentum, eps;
    bool training;
};

static void bn_sequence(struct orun *r, const struct odef *k,
                        const struct bnio *b)
{
    const keel_kernel_args *a = r->a;
    const void *x = MLU_PTR(a->inputs[0].data);
    float m = b->momentum;

    if (k->kind == BN_BWD) {
        r_transpose(r, b->d3, x, b->d3t, b->xt);
        r_transpose(r, b->d3, MLU_PTR(a->inputs[4].data), b->d3t, b->dyt);
        if (r->exec && !r->st)
            r->st = mlu_nn_check(
                TR.cnnlBatchNormBackward(
                    r->h, NULL, NULL, NULL, NULL, b->dn, b->xt, b->dn, b->dyt,
                    b->dc, MLU_PTR(a->inputs[1].data),
                    MLU_PTR(a->inputs[2].data), MLU_PTR(a->inputs[3].data),
                    b->eps, b->dn, b->yt, MLU_PTR(a->outputs[1].data),
                    MLU_PTR(a->outputs[2].data)),
                a->device, "cnnlBatchNormBackward");
        r_transpose(r, b->d3t, b->yt, b->d3, MLU_PTR(a->outputs[0].data));
        return;
    }
    void *rm = MLU_PTR(a->inputs[3].data), *rv = MLU_PTR(a->inputs[4].data);
    void *smean = MLU_PTR(a->outputs[1].data);
    void *sinv = MLU_PTR(a->outputs[2].data);

    r_transpose(r, b->d3, x, b->d3t, b->xt);
    if (r->exec && !r->st) {
        if (b->training)
            r->st = mlu_nn_check(
                TR.cnnlBatchNormForwardTraining(
                    r->h, NULL, NULL, b->dn, b->xt, b->dc,
                    MLU_PTR(a->inputs[1].data), MLU_PTR(a->inputs[2].data),
                    NULL, NULL, b->eps, 1 - m, b->dn, b->yt, smean, sinv),
                a->device, "cnnlBatchNormForwardTraining");
        else
            r->st = mlu_nn_check(
                TR.cnnlBatchNormForwardInference(
                    r->h, NULL, NULL, b->dn, b->xt, b->dc,
                    MLU_PTR(a->inputs[1].data), MLU_PTR(a->inputs[2].data),
                    rm, rv, b->eps, b->dn, b->yt),
                a->device, "cnnlBatchNormForwardInference");
    }
    r_transpose(r, b->d3t, b->yt, b->d3, MLU_PTR(a->outputs[0].data));
    if (b->training) {
        r_op(r, false, m, b->dc, rm, 1 - m, b->dc, smean, b->dc, rm);
        r_op(r, true, 1.0f, b->dc, sinv, 1.0f, b->dc, sinv, b->dc, b->c[0]);
        r_affine(r, 0.0f, b->dc, b->c[0], 1.0f, b->c[1]); /* ones */
        r_div(r, b->dc, b->c[1], b->dc, b->c[0], b->dc, b->c[2]);
        r_affine(r, 1.0f, b->dc, b->c[2], -b->eps, b->c[2]);
        r_op(r, false, m, b->dc, rv, 1 - m, b->dc, b->c[2], b->dc, rv);
    } else {
        r_affine(r, 1.0f, b->dc, rm, 0.0f, smean);
        r_affine(r, 1.0f, b->dc, rv, b->eps, b->c[0]);
        r_sqrt(r, b->dc, b->c[0], b->dc, b->c[1]);
        r_affine(r, 0.0f, b->dc, b->c[1], 1.0f, b->c[2]); /* ones */
        r_div(r, b->dc, b->c[2], b->dc, b->c[1], b->dc, sinv);
    }
}

static keel_status bn_launch(void *kernel_data, const keel_kernel_args *a)
{
    const struct odef *k = kernel_data;
    struct bnio b;
    struct keel_stream_s *s;
    struct orun r;
    keel_kit_norm g;
    keel_kit_msg msg;
    keel_status st;
    cnnlHandle_t h;
    void *ws = NULL;
    bool ours = false, fwd = k->kind == BN_FWD;
    int32_t dev;
    size_t big, small, nbig;
    static const int perm[3] = {0, 2, 1};

    if (!a)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT, "%s: args is NULL",
                       k->name);
    if ((st = keel_kit_check(k->id, a, &msg)) ||
        (st = keel_kit_norm_geometry(k->id, a, &g, &msg)))
        return mlu_err(st, "%s", msg.text);
    dev = a->device;
    if ((st = mlu_enter(dev, k->name)) ||
        (st = mlu_queue_of(dev, a->stream, k->name, &s)))
        return st;
    memset(&b, 0, sizeof(b));
    b.training = keel_kit_attr_i(a, "training", 1) != 0;
    b.momentum = (float)keel_kit_attr_f(a, "momentum", 0.9);
    b.eps = (float)keel_kit_attr_f(a, "epsilon", 1e-5);
    if (a->inputs[0].dtype != KEEL_F32)
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED, "%s: %s is not handled",
                       k->name, keel_kit_dtype_name(a->inputs[0].dtype));
    if (!fwd && !b.training)
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: training 0 (global statistics) is not "
                       "cnnlBatchNormBackward's formula",
                       k->name);
    if (g.c == 0)
        return KEEL_STATUS_OK; /* no element to write */
    if (g.n * g.spatial == 0)
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: an empty batch is not passed to CNNL", k->name);
    if (keel_kit_numel(&a->inputs[0]) > INT_MAX)
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: %" PRId64 " elements do not fit a CNNL descriptor",
                       k->name, keel_kit_numel(&a->inputs[0]));
    static const char *const names[5] = {"x", "scale", "bias", "running_mean",
                                         "running_var"};
    static const char *const gnames[5] = {"x", "scale", "saved_mean",
                                          "saved_invstd", "dy"};
    for (int i = 0; i < 5; i++)
        if ((st = ln_input_ok(k, a, i, fwd ? names[i] : gnames[i])))
            return st;
    for (int i = 1; i < 3; i++)
        if (a->outputs[i].dtype != KEEL_F32)
            return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                           "%s: output %d of another dtype than x's", k->name,
                           i);

    big = align_up((size_t)keel_kit_numel(&a->inputs[0]) * 4);
    small = align_up((size_t)g.c * 4);
    nbig = fwd ? 2 : 3;
    {
        keel_tensor_desc t;
        memset(&t, 0, sizeof(t));
        t.dtype = KEEL_F32;
        t.ndim = 3;
        t.shape[0] = g.n;
        t.shape[1] = g.c;
        t.shape[2] = g.spatial;
        t.strides[0] = g.c * g.spatial;
        t.strides[1] = g.spatial;
        t.strides[2] = 1;
        st = mlu_nn_describe(dev, &t, &b.d3);
        t.shape[1] = g.spatial;
        t.shape[2] = g.c;
        t.strides[1] = g.c;
        if (!st)
            st = mlu_nn_describe(dev, &t, &b.d3t);
    }
    if (!st)
        st = describe_dims(dev, KEEL_F32, 1, g.c, 0, &b.dc);
    if (!st) {
        const int nhwc[4] = {(int)g.n, (int)g.spatial, 1, (int)g.c};
        st = mlu_nn_check(NN.cnnlCreateTensorDescriptor(&b.dn), dev,
                          "cnnlCreateTensorDescriptor");
        if (!st)
            st = mlu_nn_check(TR.cnnlSetTensorDescriptor(
                                  b.dn, MLU_CNNL_LAYOUT_NHWC, CNNL_DTYPE_FLOAT,
                                  4, nhwc),
                              dev, "cnnlSetTensorDescriptor");
    }
    if (st)
        goto out;
    if ((st = mlu_nn_lock(dev, s, &h)))
        goto out;
    orun_begin(&r, a, k->name, h);
    if (!r.st)
        r.st = mlu_nn_check(TR.cnnlCreateTransposeDescriptor(&r.trans), dev,
                            "cnnlCreateTransposeDescriptor");
    if (!r.st)
        r.st = mlu_nn_check(TR.cnnlSetTransposeDescriptor(r.trans, 3, perm),
                            dev, "cnnlSetTransposeDescriptor");
    bn_sequence(&r, k, &b); /* sizes only */
    st = r.st;
    if (!st) {
        /* numel <= INT_MAX: no overflow below */
        size_t total = align_up(r.ws_n) + nbig * big + 3 * small;
        st = mlu_nn_workspace(a, k->name, total, &ws, &ours);
    }
    if (!st) {
        char *p = (char *)ws + align_up(r.ws_n);
        r.ws = r.ws_n ? ws : NULL;
        b.xt = p;
        b.yt = p + big;
        b.dyt = nbig > 2 ? p + 2 * big : NULL;
        for (int i = 0; i < 3; i++)
            b.c[i] = p + nbig * big + (size_t)i * small;
        r.exec = true;
        bn_sequence(&r, k, &b);
        st = mlu_nn_workspace_done(a, s, k->name, ws, ours, r.st);
    }
    orun_end(&r);
    mlu_nn_unlock(dev);
out:
    if (b.d3)
        NN.cnnlDestroyTensorDescriptor(b.d3);
    if (b.d3t)
        NN.cnnlDestroyTensorDescriptor(b.d3t);
    if (b.dn)
        NN.cnnlDestroyTensorDescriptor(b.dn);
    if (b.dc)
        NN.cnnlDestroyTensorDescriptor(b.dc);
    return st;
}

keel_status mlu_kernels_train_lookup(const char *op_name, keel_dtype dtype,
                                     keel_kernel *kernel)
{
    for (size_t i = 0; i < NODEFS; i++) {
        if (odefs[i].id < 0 || strcmp(odefs[i].name, op_name) ||
            !(odefs[i].dtypes & KEEL_DTYPE_BIT(dtype)))
            continue;
        kernel->fn = odefs[i].kind == LN_FWD || odefs[i].kind == LN_BWD
                         ? ln_launch
                     : odefs[i].kind == BN_FWD || odefs[i].kind == BN_BWD
                         ? bn_launch
                         : launch;
        kernel->kernel_data = &odefs[i];
        return KEEL_STATUS_OK;
    }
    return KEEL_STATUS_NOT_FOUND;
}
