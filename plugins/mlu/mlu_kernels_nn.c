/*
 * keel Cambricon MLU plugin — CNNL kernels for softmax, log_softmax,
 * matmul, linear, cast, conv2d, conv2d_grad, avg_pool2d and its grad (see
 * mlu_internal.h; the shared parts, handle, descriptors and workspace, are
 * in mlu_kernels.c; the CNNL declarations and what was verified of them in
 * cnnl_nn_api.h).
 *
 *   softmax, log_softmax  cnnlSoftmaxForward_v2 on a 3-D view of a
 *                         contiguous x: [outer, 1, n] in LOW_DIMENSION
 *                         mode when the axis is innermost, else
 *                         [outer, n, inner] in MEDIUM_DIMENSION mode;
 *                         ACCURATE (max subtracted) or LOG algorithm.
 *                         A strided x or output is refused.
 *   matmul                2-D: cnnlMatMul; batched: cnnlBatchMatMulBCast
 *                         with its workspace. keel hands transposes over
 *                         as swapped strides: a row-major operand is
 *                         passed as it is, a column-major one as its
 *                         row-major transpose with the transpose flag set;
 *                         a batch dim of stride 0 is described as size 1
 *                         (CNNL's broadcast). Anything else, and K = 0,
 *                         is refused.
 *   linear                x collapsed to [M, in] and weight as a matmul
 *                         operand (cnnlMatMul); the bias is first
 *                         broadcast into the output with cnnlExpand and
 *                         then accumulated (beta 1).
 *   cast                  cnnlCastDataType for float32 <-> float16 and
 *                         int32 -> float32 / float16 only. Float to
 *                         integer is refused: keel truncates and CNNL's
 *                         rounding there is not documented in what was
 *                         read; a cast to the same dtype, to bool, int64
 *                         or any dtype CNNL has no verified name for is
 *                         refused too.
 *   conv2d, conv2d_grad,  through NHWC copies in the workspace (see the
 *   avg_pool2d(_grad)     comments above each).
 *
 * float32 and float16 (cast: the sources float32, float16, int32). Every
 * refusal is NOT_SUPPORTED, which the core answers with its CPU fallback.
 * Each kernel is offered only when its own entry points resolved.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <limits.h>
#include <string.h>

#include <keel/kit.h>

#include "cnnl_nn_api.h"
#include "mlu_internal.h"

#define NN (mlu.nn)

static struct {
#define NN_SLOT(ret, name, params) ret(*name) params;
    MLU_CNNL_NN_FUNCS(NN_SLOT)
#undef NN_SLOT
} F;

enum nop {
    OP_SOFTMAX,
    OP_LOG_SOFTMAX,
    OP_MATMUL,
    OP_LINEAR,
    OP_CAST,
    OP_CONV2D,
    OP_CONV2D_GRAD,
    OP_AVG_POOL2D,
    OP_AVG_POOL2D_GRAD
};

#define FLOATS (KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F16))

static struct ndef {
    const char *name;
    enum nop op;
    uint32_t dtypes;
    int id;  /* catalog id, -1 until open */
    bool ok; /* its entry points resolved */
} ndefs[] = {
    {"softmax", OP_SOFTMAX, FLOATS, -1, false},
    {"log_softmax", OP_LOG_SOFTMAX, FLOATS, -1, false},
    {"matmul", OP_MATMUL, FLOATS, -1, false},
    {"linear", OP_LINEAR, FLOATS, -1, false},
    {"cast", OP_CAST, FLOATS | KEEL_DTYPE_BIT(KEEL_I32), -1, false},
    {"conv2d", OP_CONV2D, FLOATS, -1, false},
    {"conv2d_grad", OP_CONV2D_GRAD, FLOATS, -1, false},
    {"avg_pool2d", OP_AVG_POOL2D, FLOATS, -1, false},
    {"avg_pool2d_grad", OP_AVG_POOL2D_GRAD, FLOATS, -1, false},
};
#define NNDEFS (sizeof(ndefs) / sizeof(ndefs[0]))

void mlu_kernels_nn_open(void *cnnl)
{
    memset(&F, 0, sizeof(F));
    if (!cnnl)
        return;
#define NN_GET(ret, name, params) *(void **)&F.name = dlsym(cnnl, #name);
    MLU_CNNL_NN_FUNCS(NN_GET)
#undef NN_GET
    for (size_t i = 0; i < NNDEFS; i++) {
        struct ndef *k = &ndefs[i];
        switch (k->op) {
        case OP_SOFTMAX:
        case OP_LOG_SOFTMAX:
            k->ok = F.cnnlSoftmaxForward_v2 != NULL;
            break;
        case OP_MATMUL: /* batched needs the BCast pair (checked there) */
            k->ok = F.cnnlMatMul != NULL;
            break;
        case OP_LINEAR:
            k->ok = F.cnnlMatMul && F.cnnlExpand;
            break;
        case OP_CAST:
            k->ok = F.cnnlCastDataType != NULL;
            break;
        case OP_CONV2D:
            k->ok = F.cnnlSetTensorDescriptor &&
                    F.cnnlCreateTransposeDescriptor &&
                    F.cnnlDestroyTransposeDescriptor &&
                    F.cnnlSetTransposeDescriptor &&
                    F.cnnlGetTransposeWorkspaceSize && F.cnnlTranspose_v2 &&
                    F.cnnlCreateConvolutionDescriptor &&
                    F.cnnlDestroyConvolutionDescriptor &&
                    F.cnnlSetConvolutionDescriptor &&
                    F.cnnlGetConvolutionForwardAlgorithm &&
                    F.cnnlGetConvolutionForwardWorkspaceSize &&
                    F.cnnlConvolutionForward && F.cnnlExpand;
            break;
        case OP_CONV2D_GRAD:
            k->ok = F.cnnlSetTensorDescriptor &&
                    F.cnnlCreateTransposeDescriptor &&
                    F.cnnlDestroyTransposeDescriptor &&
                    F.cnnlSetTransposeDescriptor &&
                    F.cnnlGetTransposeWorkspaceSize && F.cnnlTranspose_v2 &&
                    F.cnnlCreateConvolutionDescriptor &&
                    F.cnnlDestroyConvolutionDescriptor &&
                    F.cnnlSetConvolutionDescriptor &&
                    F.cnnlGetConvolutionBackwardDataAlgorithm &&
                    F.cnnlGetConvolutionBackwardDataWorkspaceSize &&
                    F.cnnlConvolutionBackwardData &&
                    F.cnnlGetConvolutionBackwardFilterAlgorithm &&
                    F.cnnlGetConvolutionBackwardFilterWorkspaceSize &&
                    F.cnnlConvolutionBackwardFilter && F.cnnlFill &&
                    F.cnnlMatMul;
            break;
        case OP_AVG_POOL2D:
        case OP_AVG_POOL2D_GRAD:
            k->ok = F.cnnlSetTensorDescriptor &&
                    F.cnnlCreateTransposeDescriptor &&
                    F.cnnlDestroyTransposeDescriptor &&
                    F.cnnlSetTransposeDescriptor &&
                    F.cnnlGetTransposeWorkspaceSize && F.cnnlTranspose_v2 &&
                    F.cnnlCreatePoolingDescriptor &&
                    F.cnnlDestroyPoolingDescriptor &&
                    F.cnnlSetPooling2dDescriptor &&
                    (k->op == OP_AVG_POOL2D
                         ? F.cnnlGetPoolingWorkspaceSize &&
                               F.cnnlPoolingForward
                         : F.cnnlPoolingBackward != NULL);
            break;
        }
        k->id = keel_kit_op_id(k->name);
        if (!k->ok)
            mlu_note(KEEL_LOG_INFO,
                     "mlu: libcnnl.so lacks an entry point of %s: it takes "
                     "the CPU fallback",
                     k->name);
    }
}

void mlu_kernels_nn_close(void)
{
    memset(&F, 0, sizeof(F));
    for (size_t i = 0; i < NNDEFS; i++) {
        ndefs[i].ok = false;
        ndefs[i].id = -1;
    }
}

/* ---- descriptors --------------------------------------------------------- */

/* A CNNL_LAYOUT_ARRAY descriptor with these dims and element strides. */
static keel_status describe(int32_t dev, keel_dtype dt, int rank,
                            const int64_t *dims, const int64_t *strides,
                            cnnlTensorDescriptor_t *out)
{
    int d[KEEL_MAX_DIMS], s[KEEL_MAX_DIMS];
    keel_status st;

    *out = NULL;
    if (rank < 1 || rank > KEEL_MAX_DIMS)
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "mlu kernels: rank %d does not fit a CNNL descriptor",
                       rank);
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0 || dims[i] > INT_MAX || strides[i] < 0 ||
            strides[i] > INT_MAX)
            return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                           "mlu kernels: dim %d (size %" PRId64
                           ", stride %" PRId64
                           ") does not fit a CNNL descriptor",
                           i, dims[i], strides[i]);
        d[i] = (int)dims[i];
        s[i] = (int)strides[i];
    }
    if ((st = mlu_nn_check(NN.cnnlCreateTensorDescriptor(out), dev,
                           "cnnlCreateTensorDescriptor")))
        return st;
    st = mlu_nn_check(NN.cnnlSetTensorDescriptorEx(*out, CNNL_LAYOUT_ARRAY,
                                                   mlu_nn_dtype(dt), rank, d,
                                                   s),
                      dev, "cnnlSetTensorDescriptorEx");
    if (st) {
        NN.cnnlDestroyTensorDescriptor(*out);
        *out = NULL;
    }
    return st;
}

/* Row-major strides of dims (empty dims counted as 1). */
static void row_major(int rank, const int64_t *dims, int64_t *strides)
{
    int64_t s = 1;

    for (int i = rank - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i] > 0 ? dims[i] : 1;
    }
}

/* ---- softmax, log_softmax ------------------------------------------------ */

static keel_status softmax(const struct ndef *k, const keel_kernel_args *a,
                           cnnlHandle_t h)
{
    const keel_tensor_desc *x = &a->inputs[0], *y = &a->outputs[0];
    int64_t axis = keel_kit_attr_i(a, "axis", -1), dims[3], strides[3];
    int64_t outer = 1, n = 1, inner = 1;
    cnnlTensorDescriptor_t xd = NULL, yd = NULL;
    cnnlSoftmaxMode_t mode;
    float one = 1.0f, zero = 0.0f;
    keel_status st;

    /* CNNL sees a 3-D contiguous view; a strided x would need a copy. */
    if (!keel_kit_contiguous(x) || !keel_kit_contiguous(y))
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: a strided x is not passed to CNNL", k->name);
    if (x->ndim > 0) {
        if (axis < 0)
            axis += x->ndim;
        if (axis < 0 || axis >= x->ndim)
            return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: axis %" PRId64 " is out of range for rank %d",
                           k->name, keel_kit_attr_i(a, "axis", -1),
                           (int)x->ndim);
        outer = keel_kit_prod(x->shape, 0, (int)axis);
        n = x->shape[axis];
        inner = keel_kit_prod(x->shape, (int)axis + 1, x->ndim);
    }
    if (inner == 1) {
        mode = CNNL_SOFTMAX_MODE_LOW_DIMENSION;
        dims[0] = outer, dims[1] = 1, dims[2] = n;
    } else {
        mode = CNNL_SOFTMAX_MODE_MEDIUM_DIMENSION;
        dims[0] = outer, dims[1] = n, dims[2] = inner;
    }
    row_major(3, dims, strides);
    st = describe(a->device, x->dtype, 3, dims, strides, &xd);
    if (!st)
        st = describe(a->device, y->dtype, 3, dims, strides, &yd);
    if (!st)
        st = mlu_nn_check(
            F.cnnlSoftmaxForward_v2(
                h, k->op == OP_LOG_SOFTMAX ? CNNL_SOFTMAX_LOG
                                           : CNNL_SOFTMAX_ACCURATE,
                mode, CNNL_COMPUTATION_HIGH_PRECISION, &one, xd,
                MLU_PTR(x->data), &zero, yd, MLU_PTR(y->data)),
            a->device, "cnnlSoftmaxForward_v2");
    if (xd)
        NN.cnnlDestroyTensorDescriptor(xd);
    if (yd)
        NN.cnnlDestroyTensorDescriptor(yd);
    return st;
}

/* ---- matmul, linear ------------------------------------------------------ */

/*
 * How one matrix operand reaches CNNL. The matrix is rows x cols with row
 * stride rs and column stride cs (in elements): row-major (cs 1, rs cols)
 * goes as it is; column-major (rs 1, cs rows) goes as its cols x rows
 * transpose, which is row-major, with the transpose flag set. A stride
 * along a dim of size 1 does not matter. False for any other layout.
 */
static bool mat_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                       bool *trans, int64_t dims[2])
{
    bool row = (cols == 1 || cs == 1) && (rows == 1 || rs == cols);
    bool col = (rows == 1 || rs == 1) && (cols == 1 || cs == rows);

    *trans = !row && col;
    dims[0] = *trans ? cols : rows;
    dims[1] = *trans ? rows : cols;
    return row || col;
}

/*
 * A batched operand [B..., rows, cols]: the batch dims of stride 0 become
 * size 1 (broadcast), the others must be row-major over the stored
 * matrices. dims/strides receive the descriptor (rank = d->ndim).
 */
static bool batch_layout(const keel_tensor_desc *d, bool *trans,
                         int64_t *dims, int64_t *strides)
{
    int r = d->ndim;
    int64_t m[2];

    if (!mat_layout(d->shape[r - 2], d->shape[r - 1], d->strides[r - 2],
                    d->strides[r - 1], trans, m))
        return false;
    dims[r - 2] = m[0];
    dims[r - 1] = m[1];
    for (int i = 0; i < r - 2; i++)
        dims[i] = d->strides[i] == 0 ? 1 : d->shape[i];
    row_major(r, dims, strides);
    for (int i = 0; i < r - 2; i++)
        if (dims[i] > 1 && d->strides[i] != strides[i])
            return false;
    return true;
}

static keel_status matmul(const struct ndef *k, const keel_kernel_args *a,
                          struct keel_stream_s *s, cnnlHandle_t h)
{
    const keel_tensor_desc *x = &a->inputs[0], *y = &a->inputs[1];
    const keel_tensor_desc *o = &a->outputs[0];
    int r = x->ndim;
    int64_t M, K, N, xd_[KEEL_MAX_DIMS], xs[KEEL_MAX_DIMS];
    int64_t yd_[KEEL_MAX_DIMS], ys[KEEL_MAX_DIMS];
    int64_t od_[KEEL_MAX_DIMS], os[KEEL_MAX_DIMS];
    cnnlTensorDescriptor_t td[3] = {NULL, NULL, NULL};
    bool tx, ty;
    keel_status st;

    if (r < 2 || y->ndim != r)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: x has rank %d and y rank %d (want both >= 2, "
                       "resolved by the shape rule)",
                       k->name, (int)x->ndim, (int)y->ndim);
    M = x->shape[r - 2];
    K = x->shape[r - 1];
    N = y->shape[r - 1];
    if (y->shape[r - 2] != K)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: x is [.., %" PRId64 ", %" PRId64
                       "] but y is [.., %" PRId64 ", %" PRId64 "]",
                       k->name, M, K, y->shape[r - 2], N);
    /* What CNNL makes of K = 0 (beta * c, or nothing) is not documented. */
    if (K == 0)
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: K = 0 is not passed to CNNL", k->name);
    if (!batch_layout(x, &tx, xd_, xs) || !batch_layout(y, &ty, yd_, ys))
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: an operand is neither row- nor column-major "
                       "(or its batch dims are not packed)",
                       k->name);
    for (int i = 0; i < r - 2; i++)
        od_[i] = x->shape[i];
    od_[r - 2] = M;
    od_[r - 1] = N;
    row_major(r, od_, os);
    if (r > 2 && (!F.cnnlBatchMatMulBCast ||
                  !F.cnnlGetBatchMatMulBCastWorkspaceSize))
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: libcnnl.so has no cnnlBatchMatMulBCast: batched "
                       "matmul takes the CPU fallback",
                       k->name);
    st = describe(a->device, x->dtype, r, xd_, xs, &td[0]);
    if (!st)
        st = describe(a->device, y->dtype, r, yd_, ys, &td[1]);
    if (!st)
        st = describe(a->device, o->dtype, r, od_, os, &td[2]);
    if (!st && r == 2) {
        float one = 1.0f, zero = 0.0f;
        st = mlu_nn_check(F.cnnlMatMul(h, tx, ty, &one, td[0],
                                       MLU_PTR(x->data), td[1],
                                       MLU_PTR(y->data), &zero, td[2],
                                       MLU_PTR(o->data)),
                          a->device, "cnnlMatMul");
    } else if (!st) {
        size_t ws = 0;
        void *wsp = NULL;
        bool ours = false;

        st = mlu_nn_check(F.cnnlGetBatchMatMulBCastWorkspaceSize(
                              h, td[0], td[1], td[2], &ws),
                          a->device, "cnnlGetBatchMatMulBCastWorkspaceSize");
        if (!st)
            st = mlu_nn_workspace(a, k->name, ws, &wsp, &ours);
        if (!st)
            st = mlu_nn_check(
                F.cnnlBatchMatMulBCast(h, tx, ty, td[0], MLU_PTR(x->data),
                                       td[1], MLU_PTR(y->data), wsp, ws,
                                       td[2], MLU_PTR(o->data)),
                a->device, "cnnlBatchMatMulBCast");
        st = mlu_nn_workspace_done(a, s, k->name, wsp, ours, st);
    }
    for (int i = 0; i < 3; i++)
        if (td[i])
            NN.cnnlDestroyTensorDescriptor(td[i]);
    return st;
}

/*
 * x [..., in] as one [M, in] matrix: the leading dims of size > 1 must
 * nest (each stride the next one's times its size); the innermost of them
 * gives the row stride. False when they do not.
 */
static bool collapse_rows(const keel_tensor_desc *x, int64_t *M,
                          int64_t *rs)
{
    int last = -1;

    *M = 1;
    *rs = 0;
    for (int i = 0; i < x->ndim - 1; i++) {
        if (x->shape[i] == 1)
            continue;
        if (last >= 0 && x->strides[last] != x->strides[i] * x->shape[i])
            return false;
        last = i;
        *M *= x->shape[i];
    }
    if (last >= 0)
        *rs = x->strides[last];
    return true;
}

static keel_status linear(const struct ndef *k, const keel_kernel_args *a,
                          cnnlHandle_t h)
{
    const keel_tensor_desc *x = &a->inputs[0], *w = &a->inputs[1];
    const keel_tensor_desc *b = a->num_inputs > 2 ? &a->inputs[2] : NULL;
    const keel_tensor_desc *o = &a->outputs[0];
    int64_t M, rs, in, out, xm[2], wm[2], om[2], st2[2], bs[2], bd[2];
    cnnlTensorDescriptor_t td[4] = {NULL, NULL, NULL, NULL};
    float one = 1.0f, beta = 0.0f;
    bool tx, tw;
    keel_status st;

    if (x->ndim < 1 || w->ndim != 2 || (b && b->ndim != 1))
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: want x [..., in], weight [in, out], bias [out]",
                       k->name);
    in = x->shape[x->ndim - 1];
    out = w->shape[1];
    if (w->shape[0] != in || (b && b->shape[0] != out))
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: x, weight and bias do not agree", k->name);
    if (in == 0)
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: in = 0 is not passed to CNNL", k->name);
    if (!collapse_rows(x, &M, &rs) ||
        !mat_layout(M, in, rs, x->strides[x->ndim - 1], &tx, xm) ||
        !mat_layout(in, out, w->strides[0], w->strides[1], &tw, wm))
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: x or weight is neither row- nor column-major",
                       k->name);
    om[0] = M;
    om[1] = out;
    row_major(2, xm, st2);
    st = describe(a->device, x->dtype, 2, xm, st2, &td[0]);
    row_major(2, wm, st2);
    if (!st)
        st = describe(a->device, w->dtype, 2, wm, st2, &td[1]);
    row_major(2, om, st2);
    if (!st)
        st = describe(a->device, o->dtype, 2, om, st2, &td[2]);
    if (!st && b) {
        /* bias as [1, out] broadcast over the rows of the output */
        bd[0] = 1;
        bd[1] = out;
        bs[0] = out;
        bs[1] = b->strides[0];
        st = describe(a->device, b->dtype, 2, bd, bs, &td[3]);
        if (!st)
            st = mlu_nn_check(F.cnnlExpand(h, td[3], MLU_PTR(b->data),
                                           td[2], MLU_PTR(o->data)),
                              a->device, "cnnlExpand");
        beta = 1.0f;
    }
    if (!st)
        st = mlu_nn_check(F.cnnlMatMul(h, tx, tw, &one, td[0],
                                       MLU_PTR(x->data), td[1],
                                       MLU_PTR(w->data), &beta, td[2],
                                       MLU_PTR(o->data)),
                          a->device, "cnnlMatMul");
    for (int i = 0; i < 4; i++)
        if (td[i])
            NN.cnnlDestroyTensorDescriptor(td[i]);
    return st;
}

/* ---- cast ---------------------------------------------------------------- */

static bool cast_type(keel_dtype from, keel_dtype to, cnnlCastDataType_t *c)
{
    if (from == KEEL_F32 && to == KEEL_F16)
        *c = CNNL_CAST_FLOAT_TO_HALF;
    else if (from == KEEL_F16 && to == KEEL_F32)
        *c = CNNL_CAST_HALF_TO_FLOAT;
    else if (from == KEEL_I32 && to == KEEL_F32)
        *c = CNNL_CAST_INT32_TO_FLOAT;
    else if (from == KEEL_I32 && to == KEEL_F16)
        *c = CNNL_CAST_INT32_TO_HALF;
    else
        return false;
    return true;
}

static keel_status cast(const struct ndef *k, const keel_kernel_args *a,
                        cnnlHandle_t h)
{
    const keel_tensor_desc *x = &a->inputs[0], *y = &a->outputs[0];
    cnnlTensorDescriptor_t xd = NULL, yd = NULL;
    cnnlCastDataType_t c;
    keel_status st;

    if (!cast_type(x->dtype, y->dtype, &c))
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: %s to %s is not passed to CNNL", k->name,
                       keel_kit_dtype_name(x->dtype),
                       keel_kit_dtype_name(y->dtype));
    st = mlu_nn_describe(a->device, x, &xd);
    if (!st)
        st = mlu_nn_describe(a->device, y, &yd);
    if (!st)
        st = mlu_nn_check(F.cnnlCastDataType(h, xd, MLU_PTR(x->data), c, yd,
                                             MLU_PTR(y->data)),
                          a->device, "cnnlCastDataType");
    if (xd)
        NN.cnnlDestroyTensorDescriptor(xd);
    if (yd)
        NN.cnnlDestroyTensorDescriptor(yd);
    return st;
}

/* ---- conv2d -------------------------------------------------------------- */

/*
 * CNNL's convolutions take NHWC (that is how every public caller read
 * feeds them), keel's are NCHW: x and weight are transposed into the
 * workspace (cnnlTranspose_v2, [N,C,H,W] -> [N,H,W,C] and [O,C/g,kh,kw]
 * -> [O,kh,kw,C/g]), the convolution writes an NHWC result there too, and
 * a last transpose brings it to keel's output. The bias is not handed to
 * the convolution (what shape CNNL wants for it was not found): it is
 * broadcast with cnnlExpand and added by cnnlOpTensor to the transposed
 * result. x, weight and bias must be contiguous.
 */

/* The geometry as keel's conv2d rule resolves it (core/src/dispatch/
 * shape_conv.c): stride, dilation (h, w); pad (top, bottom, left, right). */
struct conv_geo {
    int64_t stride[2], dil[2], pad[4], groups, out[2];
};

static bool pair_of(const keel_kernel_args *a, const char *name,
                    int64_t out[2])
{
    int64_t n = 0;
    const int64_t *v = keel_kit_attr_ints(a, name, &n);

    if (n == 0) {
        out[0] = out[1] = 1;
        return true;
    }
    if (n != 1 && n != 2)
        return false;
    out[0] = v[0];
    out[1] = v[n - 1];
    return out[0] >= 1 && out[1] >= 1 && out[0] <= INT_MAX &&
           out[1] <= INT_MAX;
}

static keel_status conv_geometry(const char *name, const keel_kernel_args *a,
                                 struct conv_geo *g)
{
    const keel_tensor_desc *x = &a->inputs[0], *w = &a->inputs[1];
    const char *algo = keel_kit_attr_s(a, "padding_algorithm", "EXPLICIT");
    int64_t n = 0, in[2] = {x->shape[2], x->shape[3]};
    int64_t k[2] = {w->shape[2], w->shape[3]};
    const int64_t *p = keel_kit_attr_ints(a, "padding", &n);

    g->groups = keel_kit_attr_i(a, "groups", 1);
    if (!pair_of(a, "stride", g->stride) || !pair_of(a, "dilation", g->dil))
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: stride and dilation need 1 or 2 values >= 1",
                       name);
    if (!strcmp(algo, "VALID")) {
        memset(g->pad, 0, sizeof(g->pad));
    } else if (!strcmp(algo, "SAME")) {
        for (int i = 0; i < 2; i++) {
            int64_t o = in[i] / g->stride[i] + (in[i] % g->stride[i] != 0);
            int64_t t = (o - 1) * g->stride[i] + (k[i] - 1) * g->dil[i] + 1 -
                        in[i];
            if (t < 0)
                t = 0;
            g->pad[2 * i] = t / 2;
            g->pad[2 * i + 1] = t - t / 2;
        }
    } else if (!strcmp(algo, "EXPLICIT") && (n == 0 || n == 1)) {
        for (int i = 0; i < 4; i++)
            g->pad[i] = n ? p[0] : 0;
    } else if (!strcmp(algo, "EXPLICIT") && n == 2) {
        g->pad[0] = g->pad[1] = p[0];
        g->pad[2] = g->pad[3] = p[1];
    } else if (!strcmp(algo, "EXPLICIT") && n == 4) {
        memcpy(g->pad, p, sizeof(g->pad));
    } else {
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: padding_algorithm '%s' with %" PRId64
                       " padding values",
                       name, algo, n);
    }
    for (int i = 0; i < 4; i++)
        if (g->pad[i] < 0 || g->pad[i] > INT_MAX / 4)
            return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                           "%s: padding %" PRId64 " does not fit CNNL", name,
                           g->pad[i]);
    if (g->groups < 1 || g->groups > INT_MAX)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT, "%s: groups %" PRId64,
                       name, g->groups);
    for (int i = 0; i < 2; i++) {
        int64_t ek = (k[i] - 1) * g->dil[i] + 1;
        int64_t span = in[i] + g->pad[2 * i] + g->pad[2 * i + 1];
        if (k[i] < 1 || span < ek)
            return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: the dilated kernel does not fit dim %d", name,
                           i + 2);
        g->out[i] = (span - ek) / g->stride[i] + 1;
    }
    return KEEL_STATUS_OK;
}

#define WS_ALIGN 64u

/* Append n bytes to a workspace layout at *off (aligned); false on
 * overflow. */
static bool ws_take(size_t *off, size_t n, size_t *at)
{
    size_t o = (*off + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;

    if (o < *off || o + n < o)
        return false;
    *at = o;
    *off = o + n;
    return true;
}

/* An NHWC descriptor of [d0, d1, d2, d3] (already in NHWC order). */
static keel_status describe_nhwc(int32_t dev, keel_dtype dt,
                                 const int64_t d[4],
                                 cnnlTensorDescriptor_t *out)
{
    int dims[4];
    keel_status st;

    *out = NULL;
    for (int i = 0; i < 4; i++) {
        if (d[i] < 0 || d[i] > INT_MAX)
            return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                           "conv2d: dim %" PRId64 " does not fit CNNL", d[i]);
        dims[i] = (int)d[i];
    }
    if ((st = mlu_nn_check(NN.cnnlCreateTensorDescriptor(out), dev,
                           "cnnlCreateTensorDescriptor")))
        return st;
    st = mlu_nn_check(F.cnnlSetTensorDescriptor(*out, MLU_CNNL_LAYOUT_NHWC,
                                                mlu_nn_dtype(dt), 4, dims),
                      dev, "cnnlSetTensorDescriptor");
    if (st) {
        NN.cnnlDestroyTensorDescriptor(*out);
        *out = NULL;
    }
    return st;
}

enum { CD_X, CD_W, CD_Y, CD_XN, CD_WN, CD_YN, CD_B, CD_T, CD_BE, CD_N };

/* The two NCHW <-> NHWC transposes and the convolution descriptor of g
 * (float accumulation for float16 too), for conv2d and its grad. On
 * failure what was made is left for the caller to destroy. */
static keel_status conv_descs(int32_t dev, const struct conv_geo *g,
                              cnnlTransposeDescriptor_t *tin,
                              cnnlTransposeDescriptor_t *tout,
                              cnnlConvolutionDescriptor_t *cd)
{
    static const int to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};
    const int pad[4] = {(int)g->pad[0], (int)g->pad[1], (int)g->pad[2],
                        (int)g->pad[3]};
    const int str[2] = {(int)g->stride[0], (int)g->stride[1]};
    const int dil[2] = {(int)g->dil[0], (int)g->dil[1]};
    keel_status st;

    st = mlu_nn_check(F.cnnlCreateTransposeDescriptor(tin), dev,
                      "cnnlCreateTransposeDescriptor");
    if (!st)
        st = mlu_nn_check(F.cnnlCreateTransposeDescriptor(tout), dev,
                          "cnnlCreateTransposeDescriptor");
    if (!st)
        st = mlu_nn_check(F.cnnlSetTransposeDescriptor(*tin, 4, to_nhwc), dev,
                          "cnnlSetTransposeDescriptor");
    if (!st)
        st = mlu_nn_check(F.cnnlSetTransposeDescriptor(*tout, 4, to_nchw),
                          dev, "cnnlSetTransposeDescriptor");
    if (!st)
        st = mlu_nn_check(F.cnnlCreateConvolutionDescriptor(cd), dev,
                          "cnnlCreateConvolutionDescriptor");
    if (!st)
        st = mlu_nn_check(F.cnnlSetConvolutionDescriptor(*cd, 4, pad, str, dil,
                                                         (int)g->groups,
                                                         CNNL_DTYPE_FLOAT),
                          dev, "cnnlSetConvolutionDescriptor");
    return st;
}

static keel_status conv2d(const struct ndef *k, const keel_kernel_args *a,
                          struct keel_stream_s *s, cnnlHandle_t h)
{
    const keel_tensor_desc *x = &a->inputs[0], *w = &a->inputs[1];
    const keel_tensor_desc *b = a->num_inputs > 2 ? &a->inputs[2] : NULL;
    const keel_tensor_desc *o = &a->outputs[0];
    cnnlTensorDescriptor_t td[CD_N] = {NULL};
    cnnlTransposeDescriptor_t tin = NULL, tout = NULL;
    cnnlConvolutionDescriptor_t cd = NULL;
    cnnlOpTensorDescriptor_t od = NULL;
    cnnlConvolutionForwardAlgo_t algo = MLU_CNNL_CONV_FWD_ALGO_ANY;
    struct conv_geo g;
    int32_t dev = a->device;
    size_t es = keel_dtype_size(x->dtype), t1 = 0, t2 = 0, t3 = 0;
    size_t wsc = 0, wso = 0, total = 0, at[8] = {0};
    void *wsp = NULL;
    bool ours = false;
    char *base;
    float one = 1.0f, zero = 0.0f;
    keel_status st;

    if (x->ndim != 4 || w->ndim != 4 || o->ndim != 4 || (b && b->ndim != 1))
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: want x [N,C,H,W], weight [O,C/g,kh,kw], bias [O]",
                       k->name);
    if ((st = conv_geometry(k->name, a, &g)))
        return st;
    if (x->shape[1] != w->shape[1] * g.groups || w->shape[0] % g.groups ||
        o->shape[0] != x->shape[0] || o->shape[1] != w->shape[0] ||
        o->shape[2] != g.out[0] || o->shape[3] != g.out[1] ||
        (b && b->shape[0] != w->shape[0]))
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: x, weight, bias, groups and the output do not "
                       "agree",
                       k->name);
    if (!keel_kit_contiguous(x) || !keel_kit_contiguous(w) ||
        (b && !keel_kit_contiguous(b)))
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: strided operands are not passed to CNNL",
                       k->name);
    if (keel_kit_numel(x) == 0 || keel_kit_numel(w) == 0)
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: an empty x or weight is not passed to CNNL",
                       k->name);
    {
        const int64_t xn[4] = {x->shape[0], x->shape[2], x->shape[3],
                               x->shape[1]};
        const int64_t wn[4] = {w->shape[0], w->shape[2], w->shape[3],
                               w->shape[1]};
        const int64_t yn[4] = {o->shape[0], o->shape[2], o->shape[3],
                               o->shape[1]};
        const int64_t bd[4] = {1, o->shape[1], 1, 1};
        int64_t bstr[4];

        st = mlu_nn_describe(dev, x, &td[CD_X]);
        if (!st)
            st = mlu_nn_describe(dev, w, &td[CD_W]);
        if (!st)
            st = mlu_nn_describe(dev, o, &td[CD_Y]);
        if (!st)
            st = describe_nhwc(dev, x->dtype, xn, &td[CD_XN]);
        if (!st)
            st = describe_nhwc(dev, w->dtype, wn, &td[CD_WN]);
        if (!st)
            st = describe_nhwc(dev, o->dtype, yn, &td[CD_YN]);
        if (!st && b) {
            row_major(4, bd, bstr);
            st = describe(dev, b->dtype, 4, bd, bstr, &td[CD_B]);
            if (!st) /* the transposed result and the broadcast bias */
                st = mlu_nn_describe(dev, o, &td[CD_T]);
            if (!st)
                st = mlu_nn_describe(dev, o, &td[CD_BE]);
        }
    }
    if (!st)
        st = conv_descs(dev, &g, &tin, &tout, &cd);
    if (!st)
        st = mlu_nn_check(F.cnnlGetTransposeWorkspaceSize(h, td[CD_X], tin,
                                                          &t1),
                          dev, "cnnlGetTransposeWorkspaceSize");
    if (!st)
        st = mlu_nn_check(F.cnnlGetTransposeWorkspaceSize(h, td[CD_W], tin,
                                                          &t2),
                          dev, "cnnlGetTransposeWorkspaceSize");
    if (!st)
        st = mlu_nn_check(F.cnnlGetTransposeWorkspaceSize(h, td[CD_YN], tout,
                                                          &t3),
                          dev, "cnnlGetTransposeWorkspaceSize");
    if (!st)
        st = mlu_nn_check(F.cnnlGetConvolutionForwardAlgorithm(
                              h, cd, td[CD_XN], td[CD_WN], td[CD_YN],
                              CNNL_CONVOLUTION_FWD_FASTEST, &algo),
                          dev, "cnnlGetConvolutionForwardAlgorithm");
    if (!st)
        st = mlu_nn_check(F.cnnlGetConvolutionForwardWorkspaceSize(
                              h, td[CD_XN], td[CD_WN], td[CD_YN], NULL, cd,
                              algo, &wsc),
                          dev, "cnnlGetConvolutionForwardWorkspaceSize");
    if (!st && b) {
        st = mlu_nn_check(NN.cnnlCreateOpTensorDescriptor(&od), dev,
                          "cnnlCreateOpTensorDescriptor");
        if (!st)
            st = mlu_nn_check(NN.cnnlSetOpTensorDescriptor(
                                  od, CNNL_OP_TENSOR_ADD, CNNL_DTYPE_FLOAT,
                                  CNNL_NOT_PROPAGATE_NAN),
                              dev, "cnnlSetOpTensorDescriptor");
        if (!st)
            st = mlu_nn_check(NN.cnnlGetOpTensorWorkspaceSize(
                                  h, td[CD_T], td[CD_BE], td[CD_Y], &wso),
                              dev, "cnnlGetOpTensorWorkspaceSize");
    }
    if (!st) {
        /* x, w, y in NHWC, the transposes' and the convolution's
         * workspace, then (bias) the NCHW result, the broadcast bias and
         * the op-tensor's workspace; the sizes are those of tensors that
         * exist, so only the sum can overflow */
        size_t tmax = t1 > t2 ? t1 : t2;
        size_t n_y = (size_t)keel_kit_numel(o) * es;
        bool fit = ws_take(&total, (size_t)keel_kit_numel(x) * es, &at[0]) &&
                   ws_take(&total, (size_t)keel_kit_numel(w) * es, &at[1]) &&
                   ws_take(&total, n_y, &at[2]) &&
                   ws_take(&total, tmax > t3 ? tmax : t3, &at[3]) &&
                   ws_take(&total, wsc, &at[4]);
        if (fit && b)
            fit = ws_take(&total, n_y, &at[5]) &&
                  ws_take(&total, n_y, &at[6]) &&
                  ws_take(&total, wso, &at[7]);
        st = fit ? mlu_nn_workspace(a, k->name, total, &wsp, &ours)
                 : mlu_err(KEEL_STATUS_OUT_OF_MEMORY,
                           "%s: the workspace size overflows", k->name);
    }
    if (!st) {
        size_t tw = t1 > t2 ? t1 : t2;
        base = wsp;
        st = mlu_nn_check(F.cnnlTranspose_v2(h, tin, td[CD_X],
                                             MLU_PTR(x->data), td[CD_XN],
                                             base + at[0],
                                             tw ? base + at[3] : NULL, t1),
                          dev, "cnnlTranspose_v2");
        if (!st)
            st = mlu_nn_check(F.cnnlTranspose_v2(h, tin, td[CD_W],
                                                 MLU_PTR(w->data), td[CD_WN],
                                                 base + at[1],
                                                 tw ? base + at[3] : NULL,
                                                 t2),
                              dev, "cnnlTranspose_v2");
        if (!st)
            st = mlu_nn_check(F.cnnlConvolutionForward(
                                  h, cd, algo, &one, td[CD_XN], base + at[0],
                                  td[CD_WN], base + at[1], NULL, NULL,
                                  wsc ? base + at[4] : NULL, wsc, &zero,
                                  td[CD_YN], base + at[2]),
                              dev, "cnnlConvolutionForward");
        if (!st)
            st = mlu_nn_check(F.cnnlTranspose_v2(
                                  h, tout, td[CD_YN], base + at[2],
                                  b ? td[CD_T] : td[CD_Y],
                                  b ? base + at[5] : MLU_PTR(o->data),
                                  t3 ? base + at[3] : NULL, t3),
                              dev, "cnnlTranspose_v2");
        if (!st && b)
            st = mlu_nn_check(F.cnnlExpand(h, td[CD_B], MLU_PTR(b->data),
                                           td[CD_BE], base + at[6]),
                              dev, "cnnlExpand");
        if (!st && b)
            st = mlu_nn_check(NN.cnnlOpTensor(h, od, &one, td[CD_T],
                                              base + at[5], &one, td[CD_BE],
                                              base + at[6],
                                              wso ? base + at[7] : NULL, wso,
                                              &zero, td[CD_Y],
                                              MLU_PTR(o->data)),
                              dev, "cnnlOpTensor");
    }
    if (wsp || ours)
        st = mlu_nn_workspace_done(a, s, k->name, wsp, ours, st);
    if (od)
        NN.cnnlDestroyOpTensorDescriptor(od);
    if (cd)
        F.cnnlDestroyConvolutionDescriptor(cd);
    if (tin)
        F.cnnlDestroyTransposeDescriptor(tin);
    if (tout)
        F.cnnlDestroyTransposeDescriptor(tout);
    for (int i = 0; i < CD_N; i++)
        if (td[i])
            NN.cnnlDestroyTensorDescriptor(td[i]);
    return st;
}

/*
 * conv2d_grad: x, weight and dout are transposed to NHWC in the workspace;
 * dx is cnnlConvolutionBackwardData, dweight cnnlConvolutionBackwardFilter
 * (both NHWC, transposed back to keel's layout); dbias, the sum of dout
 * over N, oh and ow, is a product with a row of ones (cnnlFill):
 * ones [1, M] @ dout [M, O] with M = N * oh * ow, dout read in NHWC order.
 * With need_dx = 0 dx is not computed. x, weight and dout must be
 * contiguous.
 */
enum { GD_X, GD_W, GD_DY, GD_XN, GD_WN, GD_DYN, GD_DXN, GD_DWN, GD_DX,
       GD_DW, GD_ONES, GD_DY2, GD_DB, GD_N };

static keel_status conv2d_grad(const struct ndef *k,
                               const keel_kernel_args *a,
                               struct keel_stream_s *s, cnnlHandle_t h)
{
    const keel_tensor_desc *x = &a->inputs[0], *w = &a->inputs[1];
    const keel_tensor_desc *dy = &a->inputs[2];
    const keel_tensor_desc *dx = &a->outputs[0], *dw = &a->outputs[1];
    const keel_tensor_desc *db = a->num_outputs > 2 ? &a->outputs[2] : NULL;
    bool need_dx = keel_kit_attr_i(a, "need_dx", 1) != 0;
    cnnlTensorDescriptor_t td[GD_N] = {NULL};
    cnnlTransposeDescriptor_t tin = NULL, tout = NULL;
    cnnlConvolutionDescriptor_t cd = NULL;
    cnnlConvolutionBwdDataAlgo_t da = MLU_CNNL_CONV_BWD_DATA_ALGO_ANY;
    cnnlConvolutionBwdFilterAlgo_t fa = MLU_CNNL_CONV_BWD_FILTER_ALGO_ANY;
    struct conv_geo g;
    int32_t dev = a->device;
    size_t es = keel_dtype_size(x->dtype), tt[5] = {0}, wsd = 0;
    size_t wsf = 0, tmax, total = 0, at[9] = {0};
    int64_t M;
    void *wsp = NULL;
    bool ours = false, fit;
    char *base;
    float one = 1.0f, zero = 0.0f;
    keel_status st;

    if (x->ndim != 4 || w->ndim != 4 || dy->ndim != 4 || dx->ndim != 4 ||
        dw->ndim != 4 || (db && db->ndim != 1))
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: want x [N,C,H,W], weight [O,C/g,kh,kw], dout "
                       "[N,O,oh,ow]",
                       k->name);
    if ((st = conv_geometry(k->name, a, &g)))
        return st;
    if (x->shape[1] != w->shape[1] * g.groups || w->shape[0] % g.groups ||
        dy->shape[0] != x->shape[0] || dy->shape[1] != w->shape[0] ||
        dy->shape[2] != g.out[0] || dy->shape[3] != g.out[1] ||
        !keel_kit_same_shape(dx, x) || !keel_kit_same_shape(dw, w) ||
        (db && db->shape[0] != w->shape[0]))
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: x, weight, dout and the gradients do not agree",
                       k->name);
    if (!keel_kit_contiguous(x) || !keel_kit_contiguous(w) ||
        !keel_kit_contiguous(dy))
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: strided operands are not passed to CNNL",
                       k->name);
    if (keel_kit_numel(x) == 0 || keel_kit_numel(w) == 0 ||
        keel_kit_numel(dy) == 0)
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: empty operands are not passed to CNNL", k->name);
    M = dy->shape[0] * dy->shape[2] * dy->shape[3];
    {
        const int64_t xn[4] = {x->shape[0], x->shape[2], x->shape[3],
                               x->shape[1]};
        const int64_t wn[4] = {w->shape[0], w->shape[2], w->shape[3],
                               w->shape[1]};
        const int64_t yn[4] = {dy->shape[0], dy->shape[2], dy->shape[3],
                               dy->shape[1]};
        const int64_t od[2] = {1, M}, yd[2] = {M, dy->shape[1]};
        const int64_t bd[2] = {1, dy->shape[1]};
        int64_t str[2];

        st = mlu_nn_describe(dev, x, &td[GD_X]);
        if (!st)
            st = mlu_nn_describe(dev, w, &td[GD_W]);
        if (!st)
            st = mlu_nn_describe(dev, dy, &td[GD_DY]);
        if (!st)
            st = mlu_nn_describe(dev, dx, &td[GD_DX]);
        if (!st)
            st = mlu_nn_describe(dev, dw, &td[GD_DW]);
        if (!st)
            st = describe_nhwc(dev, x->dtype, xn, &td[GD_XN]);
        if (!st)
            st = describe_nhwc(dev, w->dtype, wn, &td[GD_WN]);
        if (!st)
            st = describe_nhwc(dev, dy->dtype, yn, &td[GD_DYN]);
        if (!st)
            st = describe_nhwc(dev, dx->dtype, xn, &td[GD_DXN]);
        if (!st)
            st = describe_nhwc(dev, dw->dtype, wn, &td[GD_DWN]);
        if (!st && db) {
            row_major(2, od, str);
            st = describe(dev, dy->dtype, 2, od, str, &td[GD_ONES]);
            row_major(2, yd, str);
            if (!st)
                st = describe(dev, dy->dtype, 2, yd, str, &td[GD_DY2]);
            if (!st) {
                str[0] = bd[1];
                str[1] = db->strides[0];
                st = describe(dev, db->dtype, 2, bd, str, &td[GD_DB]);
            }
        }
    }
    if (!st)
        st = conv_descs(dev, &g, &tin, &tout, &cd);
    for (int i = 0; i < 5 && !st; i++) {
        /* into NHWC: x, w, dout; back: dx, dweight */
        static const int which[5] = {GD_X, GD_W, GD_DY, GD_DXN, GD_DWN};
        st = mlu_nn_check(F.cnnlGetTransposeWorkspaceSize(
                              h, td[which[i]], i < 3 ? tin : tout, &tt[i]),
                          dev, "cnnlGetTransposeWorkspaceSize");
    }
    if (!st && need_dx)
        st = mlu_nn_check(F.cnnlGetConvolutionBackwardDataAlgorithm(
                              h, td[GD_WN], td[GD_DYN], cd, td[GD_DXN],
                              CNNL_CONVOLUTION_BWD_DATA_FASTEST, &da),
                          dev, "cnnlGetConvolutionBackwardDataAlgorithm");
    if (!st && need_dx)
        st = mlu_nn_check(F.cnnlGetConvolutionBackwardDataWorkspaceSize(
                              h, td[GD_WN], td[GD_DYN], cd, td[GD_DXN], da,
                              &wsd),
                          dev, "cnnlGetConvolutionBackwardDataWorkspaceSize");
    if (!st)
        st = mlu_nn_check(F.cnnlGetConvolutionBackwardFilterAlgorithm(
                              h, cd, td[GD_XN], td[GD_DYN], td[GD_DWN],
                              CNNL_CONVOLUTION_BWD_FILTER_FASTEST, &fa),
                          dev, "cnnlGetConvolutionBackwardFilterAlgorithm");
    if (!st)
        st = mlu_nn_check(F.cnnlGetConvolutionBackwardFilterWorkspaceSize(
                              h, td[GD_XN], td[GD_DYN], td[GD_DWN], cd, fa,
                              &wsf),
                          dev,
                          "cnnlGetConvolutionBackwardFilterWorkspaceSize");
    if (st)
        goto done;
    /* x, w, dout, dx, dweight in NHWC, the largest transpose workspace,
     * the two passes' workspaces, the ones */
    tmax = 0;
    for (int i = 0; i < 5; i++)
        tmax = tt[i] > tmax ? tt[i] : tmax;
    fit = ws_take(&total, (size_t)keel_kit_numel(x) * es, &at[0]) &&
          ws_take(&total, (size_t)keel_kit_numel(w) * es, &at[1]) &&
          ws_take(&total, (size_t)keel_kit_numel(dy) * es, &at[2]) &&
          ws_take(&total, need_dx ? (size_t)keel_kit_numel(x) * es : 0,
                  &at[3]) &&
          ws_take(&total, (size_t)keel_kit_numel(w) * es, &at[4]) &&
          ws_take(&total, tmax, &at[5]) && ws_take(&total, wsd, &at[6]) &&
          ws_take(&total, wsf, &at[7]) &&
          ws_take(&total, db ? (size_t)M * es : 0, &at[8]);
    st = fit ? mlu_nn_workspace(a, k->name, total, &wsp, &ours)
             : mlu_err(KEEL_STATUS_OUT_OF_MEMORY,
                       "%s: the workspace size overflows", k->name);
    if (st)
        goto done;
    base = wsp;
#define TWS (tmax ? base + at[5] : NULL), tmax
    st = mlu_nn_check(F.cnnlTranspose_v2(h, tin, td[GD_X], MLU_PTR(x->data),
                                         td[GD_XN], base + at[0], TWS),
                      dev, "cnnlTranspose_v2");
    if (!st && need_dx)
        st = mlu_nn_check(F.cnnlTranspose_v2(h, tin, td[GD_W],
                                             MLU_PTR(w->data), td[GD_WN],
                                             base + at[1], TWS),
                          dev, "cnnlTranspose_v2");
    if (!st)
        st = mlu_nn_check(F.cnnlTranspose_v2(h, tin, td[GD_DY],
                                             MLU_PTR(dy->data), td[GD_DYN],
                                             base + at[2], TWS),
                          dev, "cnnlTranspose_v2");
    if (!st && need_dx)
        st = mlu_nn_check(F.cnnlConvolutionBackwardData(
                              h, &one, td[GD_WN], base + at[1], td[GD_DYN],
                              base + at[2], cd, da,
                              wsd ? base + at[6] : NULL, wsd, &zero,
                              td[GD_DXN], base + at[3]),
                          dev, "cnnlConvolutionBackwardData");
    if (!st && need_dx)
        st = mlu_nn_check(F.cnnlTranspose_v2(h, tout, td[GD_DXN],
                                             base + at[3], td[GD_DX],
                                             MLU_PTR(dx->data), TWS),
                          dev, "cnnlTranspose_v2");
    if (!st)
        st = mlu_nn_check(F.cnnlConvolutionBackwardFilter(
                              h, &one, td[GD_XN], base + at[0], td[GD_DYN],
                              base + at[2], cd, fa,
                              wsf ? base + at[7] : NULL, wsf, &zero,
                              td[GD_DWN], base + at[4]),
                          dev, "cnnlConvolutionBackwardFilter");
    if (!st)
        st = mlu_nn_check(F.cnnlTranspose_v2(h, tout, td[GD_DWN],
                                             base + at[4], td[GD_DW],
                                             MLU_PTR(dw->data), TWS),
                          dev, "cnnlTranspose_v2");
#undef TWS
    if (!st && db)
        st = mlu_nn_check(F.cnnlFill(h, 1.0f, td[GD_ONES], base + at[8]),
                          dev, "cnnlFill");
    if (!st && db)
        st = mlu_nn_check(F.cnnlMatMul(h, false, false, &one, td[GD_ONES],
                                       base + at[8], td[GD_DY2],
                                       base + at[2], &zero, td[GD_DB],
                                       MLU_PTR(db->data)),
                          dev, "cnnlMatMul");
    st = mlu_nn_workspace_done(a, s, k->name, wsp, ours, st);
done:
    if (cd)
        F.cnnlDestroyConvolutionDescriptor(cd);
    if (tin)
        F.cnnlDestroyTransposeDescriptor(tin);
    if (tout)
        F.cnnlDestroyTransposeDescriptor(tout);
    for (int i = 0; i < GD_N; i++)
        if (td[i])
            NN.cnnlDestroyTensorDescriptor(td[i]);
    return st;
}

/* ---- avg_pool2d ---------------------------------------------------------- */

/*
 * cnnlPoolingForward in NHWC, x and the result transposed through the
 * workspace as for conv2d. exclusive maps to AVERAGE_COUNT_EXCLUDE_PADDING
 * (padding not counted), exclusive = 0 to AVERAGE_COUNT_INCLUDE_PADDING,
 * whose divisor, the full window, is keel's "window clipped to the padded
 * input" only while no window runs past the padded input: ceil_mode is
 * refused. So is a padding as large as the window, which could leave a
 * window all padding (keel: 0; CNNL's answer for an empty count is not
 * documented). x must be contiguous.
 */
struct pool_geo {
    int64_t k[2], stride[2], pad[4], out[2];
    cnnlPoolingMode_t mode;
};

/* avg_pool2d's attributes on x as the pool2d rule reads them; the refusals
 * of the comment above. */
static keel_status pool_geometry(const char *name, const keel_kernel_args *a,
                                 const keel_tensor_desc *x,
                                 struct pool_geo *g)
{
    int64_t kn = 0, sn = 0, pn = 0;
    const int64_t *kv = keel_kit_attr_ints(a, "kernel_size", &kn);
    const int64_t *sv = keel_kit_attr_ints(a, "stride", &sn);
    const int64_t *pv = keel_kit_attr_ints(a, "padding", &pn);

    g->mode = keel_kit_attr_i(a, "exclusive", 1)
                  ? CNNL_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING
                  : CNNL_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    if (x->ndim != 4 || (kn != 1 && kn != 2) ||
        (sn != 0 && sn != 1 && sn != 2) ||
        (pn != 0 && pn != 1 && pn != 2 && pn != 4))
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: want x [N,C,H,W], kernel_size 1 or 2 values, "
                       "stride 0 to 2, padding 1, 2 or 4",
                       name);
    if (keel_kit_attr_i(a, "ceil_mode", 0))
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: ceil_mode is not passed to CNNL (its divisor "
                       "past the padded input is not documented)",
                       name);
    g->k[0] = kv[0];
    g->k[1] = kv[kn - 1];
    g->stride[0] = sn ? sv[0] : g->k[0];
    g->stride[1] = sn ? sv[sn - 1] : g->k[1];
    if (pn == 0 || pn == 1)
        for (int i = 0; i < 4; i++)
            g->pad[i] = pn ? pv[0] : 0;
    else if (pn == 2)
        g->pad[0] = g->pad[1] = pv[0], g->pad[2] = g->pad[3] = pv[1];
    else
        memcpy(g->pad, pv, sizeof(g->pad));
    for (int i = 0; i < 2; i++) {
        if (g->k[i] < 1 || g->k[i] > INT_MAX || g->stride[i] < 1 ||
            g->stride[i] > INT_MAX || g->pad[2 * i] < 0 ||
            g->pad[2 * i + 1] < 0)
            return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: kernel_size, stride or padding out of range",
                           name);
        if (g->pad[2 * i] >= g->k[i] || g->pad[2 * i + 1] >= g->k[i])
            return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                           "%s: a padding as large as the window is not "
                           "passed to CNNL",
                           name);
        g->out[i] = (x->shape[2 + i] + g->pad[2 * i] + g->pad[2 * i + 1] -
                     g->k[i]) / g->stride[i] + 1;
    }
    if (!keel_kit_contiguous(x))
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: a strided x is not passed to CNNL", name);
    return KEEL_STATUS_OK;
}

/*
 * avg_pool2d (a->inputs x, output y) and avg_pool2d_grad (inputs x, dy,
 * output dx): the operands transposed to NHWC in the workspace, the
 * pooling pass, the result transposed back.
 */
static keel_status avg_pool2d(const struct ndef *k, const keel_kernel_args *a,
                              struct keel_stream_s *s, cnnlHandle_t h)
{
    bool grad = k->op == OP_AVG_POOL2D_GRAD;
    const keel_tensor_desc *x = &a->inputs[0], *o = &a->outputs[0];
    const keel_tensor_desc *y = grad ? &a->inputs[1] : o; /* pooled shape */
    static const int to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};
    enum { PD_X, PD_Y, PD_O, PD_XN, PD_YN, PD_N };
    cnnlTensorDescriptor_t td[PD_N] = {NULL};
    cnnlTransposeDescriptor_t tin = NULL, tout = NULL;
    cnnlPoolingDescriptor_t pd = NULL;
    struct pool_geo g;
    int32_t dev = a->device;
    size_t es = keel_dtype_size(x->dtype), t[3] = {0, 0, 0}, wsp_n = 0;
    size_t tmax = 0, total = 0, at[4] = {0};
    void *wsp = NULL;
    bool ours = false, fit;
    char *base;
    float one = 1.0f, zero = 0.0f;
    keel_status st;

    if ((st = pool_geometry(k->name, a, x, &g)))
        return st;
    if (o->ndim != 4 || y->ndim != 4 || y->shape[0] != x->shape[0] ||
        y->shape[1] != x->shape[1] || y->shape[2] != g.out[0] ||
        y->shape[3] != g.out[1] || (grad && !keel_kit_same_shape(o, x)))
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: the pooled shape is not [N, C, %" PRId64
                       ", %" PRId64 "]",
                       k->name, g.out[0], g.out[1]);
    if (grad && !keel_kit_contiguous(y))
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: a strided dout is not passed to CNNL", k->name);
    {
        const int64_t xn[4] = {x->shape[0], x->shape[2], x->shape[3],
                               x->shape[1]};
        const int64_t yn[4] = {y->shape[0], y->shape[2], y->shape[3],
                               y->shape[1]};
        st = mlu_nn_describe(dev, x, &td[PD_X]);
        if (!st && grad)
            st = mlu_nn_describe(dev, y, &td[PD_Y]);
        if (!st)
            st = mlu_nn_describe(dev, o, &td[PD_O]);
        if (!st)
            st = describe_nhwc(dev, x->dtype, xn, &td[PD_XN]);
        if (!st)
            st = describe_nhwc(dev, y->dtype, yn, &td[PD_YN]);
    }
    if (!st)
        st = mlu_nn_check(F.cnnlCreateTransposeDescriptor(&tin), dev,
                          "cnnlCreateTransposeDescriptor");
    if (!st)
        st = mlu_nn_check(F.cnnlCreateTransposeDescriptor(&tout), dev,
                          "cnnlCreateTransposeDescriptor");
    if (!st)
        st = mlu_nn_check(F.cnnlSetTransposeDescriptor(tin, 4, to_nhwc), dev,
                          "cnnlSetTransposeDescriptor");
    if (!st)
        st = mlu_nn_check(F.cnnlSetTransposeDescriptor(tout, 4, to_nchw),
                          dev, "cnnlSetTransposeDescriptor");
    if (!st)
        st = mlu_nn_check(F.cnnlCreatePoolingDescriptor(&pd), dev,
                          "cnnlCreatePoolingDescriptor");
    if (!st)
        st = mlu_nn_check(F.cnnlSetPooling2dDescriptor(
                              pd, g.mode, CNNL_NOT_PROPAGATE_NAN,
                              (int)g.k[0], (int)g.k[1], (int)g.pad[0],
                              (int)g.pad[1], (int)g.pad[2], (int)g.pad[3],
                              (int)g.stride[0], (int)g.stride[1]),
                          dev, "cnnlSetPooling2dDescriptor");
    /* into NHWC: x (and dy); back: the result */
    if (!st)
        st = mlu_nn_check(F.cnnlGetTransposeWorkspaceSize(h, td[PD_X], tin,
                                                          &t[0]),
                          dev, "cnnlGetTransposeWorkspaceSize");
    if (!st && grad)
        st = mlu_nn_check(F.cnnlGetTransposeWorkspaceSize(h, td[PD_Y], tin,
                                                          &t[1]),
                          dev, "cnnlGetTransposeWorkspaceSize");
    if (!st)
        st = mlu_nn_check(F.cnnlGetTransposeWorkspaceSize(
                              h, grad ? td[PD_XN] : td[PD_YN], tout, &t[2]),
                          dev, "cnnlGetTransposeWorkspaceSize");
    if (!st && !grad) /* width before height */
        st = mlu_nn_check(F.cnnlGetPoolingWorkspaceSize(h, g.mode,
                                                        (int)g.out[1],
                                                        (int)g.out[0],
                                                        &wsp_n),
                          dev, "cnnlGetPoolingWorkspaceSize");
    if (st)
        goto done;
    for (int i = 0; i < 3; i++)
        tmax = t[i] > tmax ? t[i] : tmax;
    /* x and y in NHWC, dx in NHWC (grad), one scratch block for the
     * transposes and the pooling (their calls run in order on one queue) */
    fit = ws_take(&total, (size_t)keel_kit_numel(x) * es, &at[0]) &&
          ws_take(&total, (size_t)keel_kit_numel(y) * es, &at[1]) &&
          ws_take(&total, grad ? (size_t)keel_kit_numel(x) * es : 0,
                  &at[2]) &&
          ws_take(&total, tmax > wsp_n ? tmax : wsp_n, &at[3]);
    st = fit ? mlu_nn_workspace(a, k->name, total, &wsp, &ours)
             : mlu_err(KEEL_STATUS_OUT_OF_MEMORY,
                       "%s: the workspace size overflows", k->name);
    if (st)
        goto done;
    base = wsp;
#define SCR(n) ((n) ? base + at[3] : NULL), (n)
    st = mlu_nn_check(F.cnnlTranspose_v2(h, tin, td[PD_X], MLU_PTR(x->data),
                                         td[PD_XN], base + at[0], SCR(t[0])),
                      dev, "cnnlTranspose_v2");
    if (!st && grad)
        st = mlu_nn_check(F.cnnlTranspose_v2(h, tin, td[PD_Y],
                                             MLU_PTR(y->data), td[PD_YN],
                                             base + at[1], SCR(t[1])),
                          dev, "cnnlTranspose_v2");
    if (!st && !grad)
        st = mlu_nn_check(F.cnnlPoolingForward(h, pd, &one, td[PD_XN],
                                               base + at[0], &zero,
                                               td[PD_YN], base + at[1],
                                               SCR(wsp_n)),
                          dev, "cnnlPoolingForward");
    if (!st && grad) /* dx in NHWC: the x descriptor's shape */
        st = mlu_nn_check(F.cnnlPoolingBackward(h, pd, &one, NULL, NULL,
                                                td[PD_YN], base + at[1],
                                                td[PD_XN], base + at[0],
                                                &zero, td[PD_XN],
                                                base + at[2]),
                          dev, "cnnlPoolingBackward");
    if (!st)
        st = mlu_nn_check(F.cnnlTranspose_v2(
                              h, tout, grad ? td[PD_XN] : td[PD_YN],
                              base + at[grad ? 2 : 1], td[PD_O],
                              MLU_PTR(o->data), SCR(t[2])),
                          dev, "cnnlTranspose_v2");
#undef SCR
    st = mlu_nn_workspace_done(a, s, k->name, wsp, ours, st);
done:
    if (pd)
        F.cnnlDestroyPoolingDescriptor(pd);
    if (tin)
        F.cnnlDestroyTransposeDescriptor(tin);
    if (tout)
        F.cnnlDestroyTransposeDescriptor(tout);
    for (int i = 0; i < PD_N; i++)
        if (td[i])
            NN.cnnlDestroyTensorDescriptor(td[i]);
    return st;
}

/* ---- launch and lookup --------------------------------------------------- */

static keel_status launch(void *kernel_data, const keel_kernel_args *a)
{
    const struct ndef *k = kernel_data;
    struct keel_stream_s *s;
    cnnlHandle_t h;
    keel_kit_msg msg;
    keel_status st;

    if (!a)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT, "%s: args is NULL",
                       k->name);
    if ((st = keel_kit_check(k->id, a, &msg)))
        return mlu_err(st, "%s: %s", k->name, msg.text);
    if ((st = mlu_enter(a->device, k->name)) ||
        (st = mlu_queue_of(a->device, a->stream, k->name, &s)))
        return st;
    if (!(k->dtypes & KEEL_DTYPE_BIT(a->inputs[0].dtype)))
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED, "%s: %s is not handled",
                       k->name, keel_kit_dtype_name(a->inputs[0].dtype));
    if (k->op != OP_CAST) {
        for (int i = 0; i < a->num_inputs; i++)
            if (a->inputs[i].dtype != a->outputs[0].dtype)
                return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                               "%s: mixed dtypes are not passed to CNNL",
                               k->name);
    }
    /* conv2d_grad's dweight and dbias need writing even when dx is empty:
     * it refuses empty operands itself */
    if (k->op != OP_CONV2D_GRAD && keel_kit_numel(&a->outputs[0]) == 0)
        return KEEL_STATUS_OK;
    if ((st = mlu_nn_lock(a->device, s, &h)))
        return st;
    switch (k->op) {
    case OP_SOFTMAX:
    case OP_LOG_SOFTMAX:
        st = softmax(k, a, h);
        break;
    case OP_MATMUL:
        st = matmul(k, a, s, h);
        break;
    case OP_LINEAR:
        st = linear(k, a, h);
        break;
    case OP_CAST:
        st = cast(k, a, h);
        break;
    case OP_CONV2D:
        st = conv2d(k, a, s, h);
        break;
    case OP_CONV2D_GRAD:
        st = conv2d_grad(k, a, s, h);
        break;
    case OP_AVG_POOL2D:
    case OP_AVG_POOL2D_GRAD:
        st = avg_pool2d(k, a, s, h);
        break;
    }
    mlu_nn_unlock(a->device);
    return st;
}

keel_status mlu_kernels_nn_lookup(const char *op_name, keel_dtype dtype,
                                  keel_kernel *kernel)
{
    for (size_t i = 0; i < NNDEFS; i++) {
        if (!ndefs[i].ok || ndefs[i].id < 0 ||
            strcmp(ndefs[i].name, op_name) ||
            !(ndefs[i].dtypes & KEEL_DTYPE_BIT(dtype)))
            continue;
        kernel->fn = launch;
        kernel->kernel_data = &ndefs[i];
        return KEEL_STATUS_OK;
    }
    return KEEL_STATUS_NOT_FOUND;
}
