/*
 * keel Ascend NPU plugin — aclnn kernels for linear, conv2d,
 * conv2d_transpose and their gradients, and average and adaptive average
 * pooling and their gradients (see npu_internal.h; the shared launch path is in npu_kernels.c,
 * the aclnn declarations in aclnn_nn_api.h).
 *
 * Every kernel maps keel's descriptors and attributes onto one aclnn call
 * and refuses, at phase 1 with NOT_SUPPORTED (the core then runs the CPU
 * fallback, visibly), every configuration that call cannot compute
 * exactly as the catalog defines it:
 *
 *   linear        (float32, float16, bfloat16) out = x @ weight + bias.
 *                 With a bias aclnnAddmm (beta = alpha = 1, the bias a
 *                 1-D [out] view aclnn broadcasts over the rows), without
 *                 one aclnnMatmul. Only when the launch is one GEMM: x's
 *                 leading dims must fold into the rows (the kit's batch
 *                 merge; a strided N-D x that does not fold is refused,
 *                 aclnn's 2-D operands cannot say it) and the inner
 *                 dimension must not be empty (out = bias then, which
 *                 aclnnAddmm's empty path is not relied on for).
 *   conv2d        (float32, float16, bfloat16) aclnnConvolution, transposed
 *                 false, the geometry resolved by the kit exactly as the
 *                 core does (SAME / VALID become explicit padding). aclnn
 *                 takes one padding per spatial dim, applied on both
 *                 sides: padding that differs between top and bottom or
 *                 left and right (4 unequal values, or SAME with an odd
 *                 total) is refused. So are empty inputs (out = bias).
 *   conv2d_grad   (same dtypes) aclnnConvolutionBackward, outputMask
 *                 {need_dx, 1, has_bias}: with need_dx = 0 dx is left
 *                 unwritten, as the catalog allows. Same refusals as conv2d;
 *                 any empty operand is refused (dweight and dbias would be
 *                 zeros aclnn is not asked to write).
 *   conv2d_transpose, conv2d_transpose_grad  (same dtypes) the same two
 *                 calls with transposed = true and output_padding as
 *                 outputPadding (keel's output size (H - 1) * stride - pads
 *                 + (k - 1) * dilation + 1 + output_padding is aclnn's
 *                 with symmetric padding); the same refusals (SAME's pads
 *                 are often uneven here).
 *   avg_pool2d,   (same dtypes) aclnnAvgPool2d / aclnnAvgPool2dBackward,
 *   avg_pool2d_grad  countIncludePad = !exclusive, divisorOverride 0.
 *                 aclnn follows PyTorch's pooling: symmetric padding of at
 *                 most half the window, and with ceil_mode a last window
 *                 that would start in the bottom/right padding is dropped,
 *                 where keel keeps it (and gives it 0). So: asymmetric
 *                 padding, padding above kernel / 2, and a ceil_mode
 *                 launch whose last window starts past the input and the
 *                 leading padding are refused; within those limits PyTorch's
 *                 divisors (exclusive: the window inside the input;
 *                 inclusive: the window clipped to the padded input) are
 *                 keel's.
 *   adaptive_avg_pool2d, adaptive_avg_pool2d_grad  (same dtypes)
 *                 aclnnAdaptiveAvgPool2d with the output size as
 *                 outputSize, and aclnnAdaptiveAvgPool2dBackward (which
 *                 reads the sizes off its operands); the windows
 *                 [floor(i * H / oh), ceil((i + 1) * H / oh)) are the
 *                 catalog's (PyTorch's adaptive pooling, which the aclnn
 *                 op implements). Empty
 *                 inputs are refused.
 *
 * Not offered (NOT_FOUND, CPU fallback): max_pool2d and max_pool2d_grad.
 * aclnnMaxPool2dWithIndices documents that, on the Atlas A2 / A3 parts,
 * its input must not hold NaN or -inf and that a ceil_mode window lying
 * in the right padding is dropped, while keel's max pooling lets NaN win
 * and gives such a window -inf and index -1; a NaN cannot be ruled out at
 * phase 1. keel's max_pool2d_grad carries no window attributes at all,
 * which aclnnMaxPool2dWithIndicesBackward needs.
 *
 * Each kernel is offered only when both halves of its own aclnn call
 * resolved from libopapi.so (a CANN without one op still has the others);
 * linear also uses aclnnMatmul, which npu_kernels.c requires.
 */
#include <dlfcn.h>
#include <string.h>

#include <keel/kit.h>

#include "aclnn_nn_api.h"
#include "npu_internal.h"

#define OPAPI (npu_g.opapi)

/* The nn entry points, NULL where libopapi.so lacks one. */
static struct {
#define NN_MEMBER(ret, name, params) ret(*name) params;
    NPU_NN_FUNCS(NN_MEMBER)
#undef NN_MEMBER
} nnf;

enum nn_kind { NN_LINEAR, NN_CONV2D, NN_CONV2D_GRAD, NN_CONV2D_T,
               NN_CONV2D_T_GRAD, NN_AVG_POOL, NN_AVG_POOL_GRAD,
               NN_ADAPTIVE_AVG, NN_ADAPTIVE_AVG_GRAD };

struct nn_kdef {
    const char *name;
    enum nn_kind kind;
    int op; /* catalog id, set at load */
};

#define NN_DTYPES                                                           \
    (KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F16) |                  \
     KEEL_DTYPE_BIT(KEEL_BF16))

static struct nn_kdef nn_kdefs[] = {
    {"linear", NN_LINEAR, -1},
    {"conv2d", NN_CONV2D, -1},
    {"conv2d_grad", NN_CONV2D_GRAD, -1},
    {"conv2d_transpose", NN_CONV2D_T, -1},
    {"conv2d_transpose_grad", NN_CONV2D_T_GRAD, -1},
    {"avg_pool2d", NN_AVG_POOL, -1},
    {"avg_pool2d_grad", NN_AVG_POOL_GRAD, -1},
    {"adaptive_avg_pool2d", NN_ADAPTIVE_AVG, -1},
    {"adaptive_avg_pool2d_grad", NN_ADAPTIVE_AVG_GRAD, -1},
};
#define NN_NKDEFS (sizeof(nn_kdefs) / sizeof(nn_kdefs[0]))

/* Both halves of kind k's aclnn call resolved. */
static bool nn_ready(enum nn_kind k)
{
    switch (k) {
    case NN_LINEAR:
        return nnf.aclnnAddmmGetWorkspaceSize && nnf.aclnnAddmm;
    case NN_CONV2D:
    case NN_CONV2D_T:
        return nnf.aclnnConvolutionGetWorkspaceSize && nnf.aclnnConvolution;
    case NN_CONV2D_GRAD:
    case NN_CONV2D_T_GRAD:
        return nnf.aclnnConvolutionBackwardGetWorkspaceSize &&
               nnf.aclnnConvolutionBackward;
    case NN_AVG_POOL:
        return nnf.aclnnAvgPool2dGetWorkspaceSize && nnf.aclnnAvgPool2d;
    case NN_AVG_POOL_GRAD:
        return nnf.aclnnAvgPool2dBackwardGetWorkspaceSize &&
               nnf.aclnnAvgPool2dBackward;
    case NN_ADAPTIVE_AVG:
        return nnf.aclnnAdaptiveAvgPool2dGetWorkspaceSize &&
               nnf.aclnnAdaptiveAvgPool2d;
    case NN_ADAPTIVE_AVG_GRAD:
        return nnf.aclnnAdaptiveAvgPool2dBackwardGetWorkspaceSize &&
               nnf.aclnnAdaptiveAvgPool2dBackward;
    }
    return false;
}

void npu_kernels_nn_load(void *opapi)
{
    memset(&nnf, 0, sizeof(nnf));
    if (!opapi)
        return;
#define NN_RESOLVE(ret, name, params) \
    *(void **)&nnf.name = dlsym(opapi, #name);
    NPU_NN_FUNCS(NN_RESOLVE)
#undef NN_RESOLVE
    for (size_t i = 0; i < NN_NKDEFS; i++) {
        nn_kdefs[i].op = keel_kit_op_id(nn_kdefs[i].name);
        if (!nn_ready(nn_kdefs[i].kind))
            npu_log(KEEL_LOG_INFO,
                    "npu: libopapi.so lacks the aclnn call of %s: it runs "
                    "on the CPU fallback",
                    nn_kdefs[i].name);
    }
}

void npu_kernels_nn_unload(void)
{
    memset(&nnf, 0, sizeof(nnf));
    for (size_t i = 0; i < NN_NKDEFS; i++)
        nn_kdefs[i].op = -1;
}

/* ---- one launch's aclnn objects ------------------------------------------ */

struct nn_call {
    aclTensor *t[6];
    int nt;
    aclIntArray *ia[5];
    int nia;
    aclBoolArray *mask;
    aclScalar *one;
    keel_status st;
};

/* Describe d into the call (NULL, with c->st set, on failure). */
static aclTensor *nn_tensor(struct nn_call *c, const keel_tensor_desc *d)
{
    aclTensor *t;

    if (c->st)
        return NULL;
    t = npu_describe(d, &c->st);
    if (t)
        c->t[c->nt++] = t;
    return t;
}

/* A view of `d`'s memory with other dims and element strides. */
static aclTensor *nn_view(struct nn_call *c, const keel_tensor_desc *d,
                          int ndim, const int64_t *shape,
                          const int64_t *strides)
{
    keel_tensor_desc v;

    memset(&v, 0, sizeof(v));
    v.data = d->data;
    v.dtype = d->dtype;
    v.ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        v.shape[i] = shape[i];
        v.strides[i] = strides[i];
    }
    return nn_tensor(c, &v);
}

static aclIntArray *nn_ints(struct nn_call *c, int64_t a, int64_t b, int n)
{
    int64_t v[2] = {a, b};
    aclIntArray *r;

    if (c->st)
        return NULL;
    r = OPAPI.aclCreateIntArray(v, (uint64_t)n);
    if (!r)
        c->st = npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                         "aclCreateIntArray(%d values) returned NULL", n);
    else
        c->ia[c->nia++] = r;
    return r;
}

static void nn_release(struct nn_call *c)
{
    for (int i = 0; i < c->nt; i++)
        OPAPI.aclDestroyTensor(c->t[i]);
    for (int i = 0; i < c->nia; i++)
        OPAPI.aclDestroyIntArray(c->ia[i]);
    if (c->mask)
        OPAPI.aclDestroyBoolArray(c->mask);
    if (c->one)
        OPAPI.aclDestroyScalar(c->one);
}

static keel_status refuse(const char *op, const char *why)
{
    return npu_fail(KEEL_STATUS_NOT_SUPPORTED, "%s: %s", op, why);
}

static bool any_empty(const keel_kernel_args *a)
{
    for (int i = 0; i < a->num_inputs; i++)
        if (keel_kit_numel(&a->inputs[i]) == 0)
            return true;
    return false;
}

/* ---- the kernels' phase 1 ---------------------------------------------------- */

/* Phase 1 result: the executor, workspace and phase 2 to run. */
struct nn_plan {
    uint64_t ws;
    aclOpExecutor *ex;
    npu_aclnn_phase2 fn;
    const char *phase2;
    bool nothing; /* nothing to compute: OK without a launch */
};

static keel_status plan_linear(const struct nn_kdef *k,
                               const keel_kernel_args *a, struct nn_call *c,
                               struct nn_plan *p)
{
    keel_kit_matmul mm;
    keel_kit_msg msg;
    keel_status st;
    aclTensor *x, *w, *o, *b = NULL;
    float one = 1.0f;
    aclnnStatus e;

    if ((st = keel_kit_matmul_plan(k->op, a, &mm, &msg)))
        return npu_fail(st, "%s", msg.text);
    keel_kit_matmul_merge_batches(&mm);
    if (mm.M == 0 || mm.N == 0) {
        p->nothing = true;
        return KEEL_STATUS_OK;
    }
    if (mm.batches != 1)
        return refuse("linear", "x's leading dims do not fold into the rows "
                                "of one GEMM (a strided N-D x), which "
                                "aclnn's 2-D operands cannot view");
    if (mm.K == 0)
        return refuse("linear", "an empty inner dimension (out = bias) is "
                                "not sent to aclnn");
    x = nn_view(c, &a->inputs[0], 2, (int64_t[]){mm.M, mm.K},
                (int64_t[]){mm.xrs, mm.xcs});
    w = nn_view(c, &a->inputs[1], 2, (int64_t[]){mm.K, mm.N},
                (int64_t[]){mm.yrs, mm.ycs});
    o = nn_view(c, &a->outputs[0], 2, (int64_t[]){mm.M, mm.N},
                (int64_t[]){mm.N, 1});
    if (mm.has_bias)
        b = nn_view(c, &a->inputs[2], 1, (int64_t[]){mm.N},
                    (int64_t[]){mm.bs});
    if (c->st)
        return c->st;
    if (!mm.has_bias) {
        e = OPAPI.aclnnMatmulGetWorkspaceSize(x, w, o, NPU_CUBE_KEEP_DTYPE,
                                              &p->ws, &p->ex);
        p->fn = OPAPI.aclnnMatmul;
        p->phase2 = "aclnnMatmul";
        return npu_aclnn_check(e, false, a->device,
                               "aclnnMatmulGetWorkspaceSize");
    }
    c->one = OPAPI.aclCreateScalar(&one, ACL_FLOAT);
    if (!c->one)
        return npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "aclCreateScalar(1) returned NULL");
    /* out = beta * bias + alpha * (x @ weight), beta = alpha = 1 */
    e = nnf.aclnnAddmmGetWorkspaceSize(b, x, w, c->one, c->one, o,
                                       NPU_CUBE_KEEP_DTYPE, &p->ws, &p->ex);
    p->fn = nnf.aclnnAddmm;
    p->phase2 = "aclnnAddmm";
    return npu_aclnn_check(e, false, a->device, "aclnnAddmmGetWorkspaceSize");
}

/* The conv geometry (big and small sides as keel_kit_conv_geometry takes
 * them), refused where aclnn's symmetric padding cannot say it. */
static keel_status conv_geometry(const char *op, const keel_kernel_args *a,
                                 bool transpose, const keel_tensor_desc *big,
                                 const keel_tensor_desc *small,
                                 keel_kit_conv *g)
{
    keel_kit_msg msg;
    keel_status st = keel_kit_conv_geometry(a, transpose, big, &a->inputs[1],
                                            small, g, &msg);

    if (st)
        return npu_fail(st, "%s", msg.text);
    if (g->pad[0] != g->pad[1] || g->pad[2] != g->pad[3])
        return refuse(op, "padding that differs between top and bottom or "
                          "left and right (4 values, or SAME with an odd "
                          "total) has no aclnnConvolution form");
    return KEEL_STATUS_OK;
}

static keel_status plan_conv2d(const struct nn_kdef *k,
                               const keel_kernel_args *a, struct nn_call *c,
                               struct nn_plan *p)
{
    bool tr = k->kind == NN_CONV2D_T;
    keel_kit_conv g;
    keel_status st;
    aclTensor *x, *w, *o, *b = NULL;
    aclIntArray *stride, *pad, *dil, *opad;
    aclnnStatus e;

    if ((st = conv_geometry(k->name, a, tr,
                            tr ? &a->outputs[0] : &a->inputs[0],
                            tr ? &a->inputs[0] : &a->outputs[0], &g)))
        return st;
    if (keel_kit_numel(&a->outputs[0]) == 0) {
        p->nothing = true;
        return KEEL_STATUS_OK;
    }
    if (any_empty(a))
        return refuse(k->name, "an empty input (out = bias) is not sent "
                               "to aclnn");
    x = nn_tensor(c, &a->inputs[0]);
    w = nn_tensor(c, &a->inputs[1]);
    if (a->num_inputs == 3)
        b = nn_tensor(c, &a->inputs[2]);
    o = nn_tensor(c, &a->outputs[0]);
    stride = nn_ints(c, g.sh, g.sw, 2);
    pad = nn_ints(c, g.pad[0], g.pad[2], 2);
    dil = nn_ints(c, g.dh, g.dw, 2);
    /* 0 for a plain conv, which aclnn ignores then */
    opad = nn_ints(c, g.output_padding[0], g.output_padding[1], 2);
    if (c->st)
        return c->st;
    e = nnf.aclnnConvolutionGetWorkspaceSize(x, w, b, stride, pad, dil, tr,
                                             opad, g.groups, o,
                                             NPU_CUBE_KEEP_DTYPE, &p->ws,
                                             &p->ex);
    p->fn = nnf.aclnnConvolution;
    p->phase2 = "aclnnConvolution";
    return npu_aclnn_check(e, false, a->device,
                           "aclnnConvolutionGetWorkspaceSize");
}

static keel_status plan_conv2d_grad(const struct nn_kdef *k,
                                    const keel_kernel_args *a,
                                    struct nn_call *c, struct nn_plan *p)
{
    bool tr = k->kind == NN_CONV2D_T_GRAD;
    keel_kit_conv g;
    keel_status st;
    bool has_bias = keel_kit_attr_i(a, "has_bias", 1) != 0;
    bool need_dx = keel_kit_attr_i(a, "need_dx", 1) != 0;
    bool mask[3] = {need_dx, true, has_bias};
    aclTensor *x, *w, *dy, *dx = NULL, *dw, *db = NULL;
    aclIntArray *stride, *pad, *dil, *opad, *bsz = NULL;
    aclnnStatus e;

    if ((st = conv_geometry(k->name, a, tr,
                            tr ? &a->inputs[2] : &a->inputs[0],
                            tr ? &a->inputs[0] : &a->inputs[2], &g)))
        return st;
    if (any_empty(a))
        return refuse(k->name, "an empty operand (zero gradients) is not "
                               "sent to aclnn");
    if (g.groups > INT32_MAX)
        return refuse(k->name, "groups does not fit aclnn's int");
    dy = nn_tensor(c, &a->inputs[2]);
    x = nn_tensor(c, &a->inputs[0]);
    w = nn_tensor(c, &a->inputs[1]);
    if (need_dx)
        dx = nn_tensor(c, &a->outputs[0]);
    dw = nn_tensor(c, &a->outputs[1]);
    if (has_bias) {
        db = nn_tensor(c, &a->outputs[2]);
        /* the forward output's channels: dout's */
        bsz = nn_ints(c, a->inputs[2].shape[1], 0, 1);
    }
    stride = nn_ints(c, g.sh, g.sw, 2);
    pad = nn_ints(c, g.pad[0], g.pad[2], 2);
    dil = nn_ints(c, g.dh, g.dw, 2);
    opad = nn_ints(c, g.output_padding[0], g.output_padding[1], 2);
    if (!c->st) {
        c->mask = OPAPI.aclCreateBoolArray(mask, 3);
        if (!c->mask)
            c->st = npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                             "aclCreateBoolArray(3 values) returned NULL");
    }
    if (c->st)
        return c->st;
    e = nnf.aclnnConvolutionBackwardGetWorkspaceSize(
        dy, x, w, bsz, stride, pad, dil, tr, opad, (int)g.groups, c->mask,
        NPU_CUBE_KEEP_DTYPE, dx, dw, db, &p->ws, &p->ex);
    p->fn = nnf.aclnnConvolutionBackward;
    p->phase2 = "aclnnConvolutionBackward";
    return npu_aclnn_check(e, false, a->device,
                           "aclnnConvolutionBackwardGetWorkspaceSize");
}

static keel_status plan_avg_pool(const struct nn_kdef *k,
                                 const keel_kernel_args *a, struct nn_call *c,
                                 struct nn_plan *p)
{
    bool grad = k->kind == NN_AVG_POOL_GRAD;
    const keel_tensor_desc *out = grad ? &a->inputs[1] : &a->outputs[0];
    keel_kit_pool g;
    keel_kit_msg msg;
    keel_status st;
    aclTensor *x, *o;
    aclIntArray *ks, *stride, *pad;
    aclnnStatus e;

    if ((st = keel_kit_pool_geometry(a, KEEL_KIT_POOL_AVG, &a->inputs[0], out,
                                     &g, &msg)))
        return npu_fail(st, "%s", msg.text);
    if (keel_kit_numel(&a->outputs[0]) == 0) {
        p->nothing = true;
        return KEEL_STATUS_OK;
    }
    if (any_empty(a))
        return refuse(k->name, "an empty input is not sent to aclnn");
    if (g.pad[0] != g.pad[1] || g.pad[2] != g.pad[3])
        return refuse(k->name, "asymmetric padding has no aclnnAvgPool2d "
                               "form");
    if (2 * g.pad[0] > g.kh || 2 * g.pad[2] > g.kw)
        return refuse(k->name, "padding above half the window is outside "
                               "aclnnAvgPool2d's range");
    /* ceil_mode: aclnn drops a last window starting past the input and the
     * leading padding, keel keeps it */
    if (g.ceil_mode && ((g.oh - 1) * g.sh >= g.h + g.pad[0] ||
                        (g.ow - 1) * g.sw >= g.w + g.pad[2]))
        return refuse(k->name, "with ceil_mode the last window starts in "
                               "the trailing padding, where aclnn drops it "
                               "and keel gives it 0");
    x = nn_tensor(c, &a->inputs[0]);
    o = nn_tensor(c, grad ? &a->inputs[1] : &a->outputs[0]);
    ks = nn_ints(c, g.kh, g.kw, 2);
    stride = nn_ints(c, g.sh, g.sw, 2);
    pad = nn_ints(c, g.pad[0], g.pad[2], 2);
    if (c->st)
        return c->st;
    if (!grad) {
        e = nnf.aclnnAvgPool2dGetWorkspaceSize(x, ks, stride, pad, g.ceil_mode,
                                               !g.exclusive, 0,
                                               NPU_CUBE_KEEP_DTYPE, o, &p->ws,
                                               &p->ex);
        p->fn = nnf.aclnnAvgPool2d;
        p->phase2 = "aclnnAvgPool2d";
        return npu_aclnn_check(e, false, a->device,
                               "aclnnAvgPool2dGetWorkspaceSize");
    }
    {
        aclTensor *dx = nn_tensor(c, &a->outputs[0]);
        if (c->st)
            return c->st;
        e = nnf.aclnnAvgPool2dBackwardGetWorkspaceSize(
            o, x, ks, stride, pad, g.ceil_mode, !g.exclusive, 0,
            NPU_CUBE_KEEP_DTYPE, dx, &p->ws, &p->ex);
    }
    p->fn = nnf.aclnnAvgPool2dBackward;
    p->phase2 = "aclnnAvgPool2dBackward";
    return npu_aclnn_check(e, false, a->device,
                           "aclnnAvgPool2dBackwardGetWorkspaceSize");
}

static keel_status plan_adaptive_avg(const struct nn_kdef *k,
                                     const keel_kernel_args *a,
                                     struct nn_call *c, struct nn_plan *p)
{
    bool grad = k->kind == NN_ADAPTIVE_AVG_GRAD;
    keel_kit_pool g;
    keel_kit_msg msg;
    keel_status st;
    aclTensor *x, *o, *dy;
    aclIntArray *osz;
    aclnnStatus e;

    if ((st = keel_kit_pool_geometry(a, KEEL_KIT_POOL_ADAPTIVE, &a->inputs[0],
                                     grad ? &a->inputs[1] : &a->outputs[0],
                                     &g, &msg)))
        return npu_fail(st, "%s", msg.text);
    if (keel_kit_numel(&a->outputs[0]) == 0) {
        p->nothing = true;
        return KEEL_STATUS_OK;
    }
    if (any_empty(a))
        return refuse(k->name, "an empty input is not sent to aclnn");
    x = nn_tensor(c, &a->inputs[0]);
    o = nn_tensor(c, &a->outputs[0]);
    if (grad) {
        /* dx from dout; the window sizes follow from the two shapes */
        dy = nn_tensor(c, &a->inputs[1]);
        if (c->st)
            return c->st;
        e = nnf.aclnnAdaptiveAvgPool2dBackwardGetWorkspaceSize(dy, x, o,
                                                               &p->ws, &p->ex);
        p->fn = nnf.aclnnAdaptiveAvgPool2dBackward;
        p->phase2 = "aclnnAdaptiveAvgPool2dBackward";
        return npu_aclnn_check(e, false, a->device,
                               "aclnnAdaptiveAvgPool2dBackwardGetWorkspaceSize");
    }
    osz = nn_ints(c, g.oh, g.ow, 2);
    if (c->st)
        return c->st;
    e = nnf.aclnnAdaptiveAvgPool2dGetWorkspaceSize(x, osz, o, &p->ws, &p->ex);
    p->fn = nnf.aclnnAdaptiveAvgPool2d;
    p->phase2 = "aclnnAdaptiveAvgPool2d";
    return npu_aclnn_check(e, false, a->device,
                           "aclnnAdaptiveAvgPool2dGetWorkspaceSize");
}

/* ---- the kernel ------------------------------------------------------------- */

static keel_status run_nn(void *kernel_data, const keel_kernel_args *a)
{
    const struct nn_kdef *k = kernel_data;
    struct nn_call c;
    struct nn_plan p;
    struct keel_stream_s *s;
    keel_kit_msg msg;
    keel_status st;
    keel_dtype dt;

    if (!a)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: args is NULL",
                        k->name);
    if ((st = keel_kit_check(k->op, a, &msg)))
        return npu_fail(st, "%s", msg.text);
    if ((st = npu_enter(a->device, k->name)) ||
        (st = npu_stream_get(a->device, a->stream, k->name, &s)))
        return st;
    /* one floating dtype throughout (the rules promote the inputs) */
    dt = a->inputs[0].dtype;
    for (int i = 0; i < a->num_inputs + a->num_outputs; i++) {
        const keel_tensor_desc *d = i < a->num_inputs
                                        ? &a->inputs[i]
                                        : &a->outputs[i - a->num_inputs];
        if (d->dtype != dt || !(NN_DTYPES & KEEL_DTYPE_BIT(d->dtype)))
            return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                            "%s: %s operands are not handled", k->name,
                            keel_kit_dtype_name(d->dtype));
    }
    memset(&c, 0, sizeof(c));
    memset(&p, 0, sizeof(p));
    switch (k->kind) {
    case NN_LINEAR: st = plan_linear(k, a, &c, &p); break;
    case NN_CONV2D:
    case NN_CONV2D_T: st = plan_conv2d(k, a, &c, &p); break;
    case NN_CONV2D_GRAD:
    case NN_CONV2D_T_GRAD: st = plan_conv2d_grad(k, a, &c, &p); break;
    case NN_ADAPTIVE_AVG:
    case NN_ADAPTIVE_AVG_GRAD: st = plan_adaptive_avg(k, a, &c, &p); break;
    default: st = plan_avg_pool(k, a, &c, &p); break;
    }
    if (!st && !p.nothing)
        st = npu_aclnn_launch(a, s, k->name, p.ws, p.ex, p.fn, p.phase2);
    nn_release(&c);
    return st;
}

keel_status npu_kernels_nn_lookup(const char *op_name, keel_dtype dtype,
                                  keel_kernel *kernel)
{
    if (!op_name || !kernel || !(NN_DTYPES & KEEL_DTYPE_BIT(dtype)))
        return KEEL_STATUS_NOT_FOUND;
    for (size_t i = 0; i < NN_NKDEFS; i++) {
        struct nn_kdef *k = &nn_kdefs[i];
        if (k->op < 0 || strcmp(k->name, op_name) || !nn_ready(k->kind))
            continue;
        kernel->fn = run_nn;
        kernel->kernel_data = k;
        return KEEL_STATUS_OK;
    }
    return KEEL_STATUS_NOT_FOUND;
}
