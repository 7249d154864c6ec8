/*
 * The stand-in's aclnn operators for the plugin's npu_kernels_nn.c,
 * computed on the host in double and stored through the output's dtype
 * (see acl_standin_internal.h for the shared parts): aclnnAddmm,
 * aclnnConvolution, aclnnConvolutionBackward, aclnnAvgPool2d,
 * aclnnAvgPool2dBackward, aclnnAdaptiveAvgPool2d and its backward, each
 * with the documented semantics and argument checks (operand shapes and
 * dtypes agree, the arrays have the lengths aclnn accepts). aclnnConvolution
 * takes transposed = true as well (conv2d_transpose). aclnnAddmm and the
 * two convolutions ask for a workspace and keep their accumulators in it,
 * so a workspace that is too small or not device memory is caught.
 *
 * ACL_STANDIN_FAULT=conv_wrong adds 1 to the first element of every
 * aclnnConvolution result.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "acl_standin_internal.h"
#include "aclnn_nn_api.h"

#define P(ret, name, params) API ret name params;
NPU_NN_FUNCS(P)
#undef P

#define E_NULL 161001
#define E_PARAM 161002

/* ---- helpers ----------------------------------------------------------------- */

static char *at(const struct aclTensor *t, const int64_t *idx)
{
    int64_t off = 0;

    for (int i = 0; i < t->ndim; i++)
        off += idx[i] * t->strides[i];
    return t->base + off * (int64_t)dt_size(t->dt);
}

static double get4(const struct aclTensor *t, int64_t a, int64_t b,
                   int64_t c, int64_t d)
{
    return ld_f(t, at(t, (int64_t[]){a, b, c, d}));
}

static void put4(const struct aclTensor *t, int64_t a, int64_t b, int64_t c,
                 int64_t d, double v)
{
    st_f(t, at(t, (int64_t[]){a, b, c, d}), v);
}

static bool dims_are(const struct aclTensor *t, int n, const int64_t *d)
{
    if (t->ndim != n)
        return false;
    for (int i = 0; i < n; i++)
        if (t->dims[i] != d[i])
            return false;
    return true;
}

/* (h, w) from an array of 1 or 2 values (0 values: `def`, when allowed). */
static bool pair(const struct aclIntArray *a, bool empty_ok,
                 const int64_t *def, int64_t lo, int64_t out[2])
{
    if (!a)
        return false;
    if (a->n == 0 && empty_ok && def) {
        out[0] = def[0];
        out[1] = def[1];
        return true;
    }
    if (a->n != 1 && a->n != 2)
        return false;
    out[0] = a->v[0];
    out[1] = a->v[a->n - 1];
    return out[0] >= lo && out[1] >= lo;
}

static void drop_priv(void *priv)
{
    free(priv);
}

/* ---- aclnnAddmm: out = beta * self + alpha * (mat1 @ mat2) ---------------- */

struct addmm {
    struct aclTensor self, m1, m2, out;
    double beta, alpha;
};

static void addmm_host(void *priv, void *workspace)
{
    const struct addmm *o = priv;
    double *acc = workspace; /* one row of out */
    int64_t m = o->m1.dims[0], k = o->m1.dims[1], n = o->m2.dims[1];
    int sn = o->self.ndim;

    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            acc[j] = 0;
            for (int64_t q = 0; q < k; q++)
                acc[j] += ld_f(&o->m1, at(&o->m1, (int64_t[]){i, q})) *
                          ld_f(&o->m2, at(&o->m2, (int64_t[]){q, j}));
        }
        for (int64_t j = 0; j < n; j++) {
            /* self broadcast from the right: [n], [1, n], [m, 1], [m, n] */
            int64_t si[2] = {0, 0};
            if (sn == 1) {
                si[0] = o->self.dims[0] == 1 ? 0 : j;
            } else {
                si[0] = o->self.dims[0] == 1 ? 0 : i;
                si[1] = o->self.dims[1] == 1 ? 0 : j;
            }
            st_f(&o->out, at(&o->out, (int64_t[]){i, j}),
                 o->beta * ld_f(&o->self, at(&o->self, si)) +
                     o->alpha * acc[j]);
        }
    }
}

API aclnnStatus aclnnAddmmGetWorkspaceSize(
    const aclTensor *self, const aclTensor *mat1, const aclTensor *mat2,
    const aclScalar *beta, const aclScalar *alpha, aclTensor *out,
    int8_t cubeMathType, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char call[] = "aclnnAddmmGetWorkspaceSize";
    struct addmm *o;
    bool bc;

    if (!self || !mat1 || !mat2 || !beta || !alpha || !out)
        return err(E_NULL, "%s: a NULL argument", call);
    if (cubeMathType < 0 || cubeMathType > 3)
        return err(E_PARAM, "%s: cubeMathType %d", call, (int)cubeMathType);
    if (mat1->ndim != 2 || mat2->ndim != 2 || out->ndim != 2 ||
        mat1->dims[1] != mat2->dims[0] || out->dims[0] != mat1->dims[0] ||
        out->dims[1] != mat2->dims[1] || !dt_float(mat1->dt) ||
        mat2->dt != mat1->dt || out->dt != mat1->dt || self->dt != mat1->dt)
        return err(E_PARAM, "%s: mat1 [m, k] @ mat2 [k, n] -> out [m, n] of "
                   "one float dtype expected", call);
    bc = self->ndim == 1
             ? (self->dims[0] == 1 || self->dims[0] == out->dims[1])
             : self->ndim == 2 &&
                   (self->dims[0] == 1 || self->dims[0] == out->dims[0]) &&
                   (self->dims[1] == 1 || self->dims[1] == out->dims[1]);
    if (!bc)
        return err(E_PARAM, "%s: self does not broadcast to out", call);
    if ((uint64_t)out->dims[1] > UINT64_MAX / sizeof(double))
        return err(E_PARAM, "%s: n too large", call);
    o = calloc(1, sizeof(*o));
    if (!o)
        return err(ACL_ERROR_BAD_ALLOC, "%s: no memory", call);
    o->self = *self;
    o->m1 = *mat1;
    o->m2 = *mat2;
    o->out = *out;
    o->beta = beta->f;
    o->alpha = alpha->f;
    return standin_host_plan(call, (uint64_t)out->dims[1] * sizeof(double),
                             addmm_host, drop_priv, o, workspaceSize,
                             executor);
}

API aclnnStatus aclnnAddmm(void *workspace, uint64_t workspaceSize,
                           aclOpExecutor *executor, aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnAddmm");
}

/* ---- convolution (plain and transposed) ----------------------------------- */

/*
 * One walk serves all four computations. In the conv2d view the "big" side
 * is a plain conv's input and a transposed conv's output, the "small" side
 * the other one, and the weight is [small channels, big channels / groups,
 * kh, kw] in both cases. Every (small element, kernel tap) pair that lands
 * inside the big side is visited with the flat indices of x, y (output or
 * gradOutput) and weight:
 *   forward   y[yi] += x[xi] * w[wi]
 *   backward  dx[xi] += dy[yi] * w[wi],  dw[wi] += x[xi] * dy[yi]
 * accumulated in doubles in the workspace, then stored.
 */
struct conv {
    struct aclTensor x, w, b, y; /* y: output, or gradOutput */
    struct aclTensor dx, dw, db; /* backward */
    bool tr, has_b, mask[3];
    int64_t s[2], p[2], d[2], op[2], groups;
    int64_t nx, ny, nw; /* element counts */
};

static int64_t numel4(const struct aclTensor *t)
{
    return t->dims[0] * t->dims[1] * t->dims[2] * t->dims[3];
}

static int64_t flat4(const struct aclTensor *t, int64_t a, int64_t b,
                     int64_t c, int64_t d)
{
    return ((a * t->dims[1] + b) * t->dims[2] + c) * t->dims[3] + d;
}

static void conv_walk(const struct conv *c,
                      void (*f)(const struct conv *c, void *acc, int64_t xi,
                                int64_t yi, int64_t wi),
                      void *acc)
{
    const struct aclTensor *big = c->tr ? &c->y : &c->x;
    const struct aclTensor *sm = c->tr ? &c->x : &c->y;
    int64_t sg = c->w.dims[0] / c->groups, bg = c->w.dims[1];

    for (int64_t n = 0; n < sm->dims[0]; n++)
        for (int64_t sc = 0; sc < sm->dims[1]; sc++)
            for (int64_t t = 0; t < bg; t++) {
                int64_t bc = sc / sg * bg + t;
                for (int64_t i = 0; i < sm->dims[2]; i++)
                    for (int64_t kh = 0; kh < c->w.dims[2]; kh++) {
                        int64_t h = i * c->s[0] - c->p[0] + kh * c->d[0];
                        if (h < 0 || h >= big->dims[2])
                            continue;
                        for (int64_t j = 0; j < sm->dims[3]; j++)
                            for (int64_t kw = 0; kw < c->w.dims[3]; kw++) {
                                int64_t w = j * c->s[1] - c->p[1] +
                                            kw * c->d[1];
                                int64_t bi, si, wi;
                                if (w < 0 || w >= big->dims[3])
                                    continue;
                                bi = flat4(big, n, bc, h, w);
                                si = flat4(sm, n, sc, i, j);
                                wi = flat4(&c->w, sc, t, kh, kw);
                                f(c, acc, c->tr ? si : bi, c->tr ? bi : si,
                                  wi);
                            }
                    }
            }
}

/* A 4-D tensor's element at flat (contiguous-order) index k. */
static char *at_flat(const struct aclTensor *t, int64_t k)
{
    int64_t idx[4];

    for (int i = 3; i >= 0; i--) {
        idx[i] = k % t->dims[i];
        k /= t->dims[i];
    }
    return at(t, idx);
}

/* Check the operands against the arrays; 0 or the error recorded. */
static aclnnStatus conv_check(struct conv *c, const aclIntArray *stride,
                              const aclIntArray *padding,
                              const aclIntArray *dilation, bool transposed,
                              const aclIntArray *outputPadding,
                              int64_t groups, const char *call)
{
    const struct aclTensor *x = &c->x, *w = &c->w, *y = &c->y;
    int64_t want[4];

    if (!pair(stride, false, NULL, 1, c->s) ||
        !pair(padding, false, NULL, 0, c->p) ||
        !pair(dilation, false, NULL, 1, c->d) ||
        !pair(outputPadding, false, NULL, 0, c->op))
        return err(E_PARAM, "%s: stride, padding, dilation, outputPadding "
                   "need 1 or 2 values (stride, dilation >= 1, the others "
                   ">= 0)", call);
    if (x->ndim != 4 || w->ndim != 4 || y->ndim != 4 || groups < 1 ||
        x->dims[1] % groups || w->dims[0] % groups || !dt_float(x->dt) ||
        w->dt != x->dt || y->dt != x->dt ||
        (transposed ? w->dims[0] != x->dims[1]
                    : w->dims[1] * groups != x->dims[1]))
        return err(E_PARAM, "%s: input [N, C, H, W] and weight [%s] of one "
                   "float dtype expected", call,
                   transposed ? "C, O/groups, kh, kw" : "O, C/groups, kh, kw");
    want[0] = x->dims[0];
    want[1] = transposed ? w->dims[1] * groups : w->dims[0];
    for (int i = 0; i < 2; i++) {
        int64_t span = (w->dims[2 + i] - 1) * c->d[i] + 1;
        int64_t in = x->dims[2 + i];
        if (transposed) {
            if (c->op[i] >= c->s[i] && c->op[i] >= c->d[i])
                return err(E_PARAM, "%s: outputPadding must be smaller than "
                           "stride or dilation", call);
            want[2 + i] = (in - 1) * c->s[i] - 2 * c->p[i] + span + c->op[i];
        } else {
            if (in + 2 * c->p[i] < span)
                return err(E_PARAM, "%s: the dilated kernel exceeds the "
                           "padded input", call);
            want[2 + i] = (in + 2 * c->p[i] - span) / c->s[i] + 1;
        }
    }
    if (want[2] < 1 || want[3] < 1 || !dims_are(y, 4, want))
        return err(E_PARAM, "%s: output / gradOutput shape is not [%lld, "
                   "%lld, %lld, %lld]", call, (long long)want[0],
                   (long long)want[1], (long long)want[2], (long long)want[3]);
    c->tr = transposed;
    c->groups = groups;
    c->nx = numel4(x);
    c->ny = numel4(y);
    c->nw = numel4(w);
    return 0;
}

/* ---- aclnnConvolution -------------------------------------------------------- */

static void fwd_step(const struct conv *c, void *acc, int64_t xi, int64_t yi,
                     int64_t wi)
{
    ((double *)acc)[yi] += ld_f(&c->x, at_flat(&c->x, xi)) *
                           ld_f(&c->w, at_flat(&c->w, wi));
}

static void conv_host(void *priv, void *workspace)
{
    const struct conv *c = priv;
    double *y = workspace;
    int64_t plane = c->y.dims[2] * c->y.dims[3];

    memset(y, 0, (size_t)c->ny * sizeof(double));
    conv_walk(c, fwd_step, y);
    for (int64_t k = 0; k < c->ny; k++) {
        double v = y[k];
        if (c->has_b) {
            int64_t o = k / plane % c->y.dims[1];
            v += ld_f(&c->b, at(&c->b, &o));
        }
        if (k == 0 && standin_conv_wrong())
            v += 1.0;
        st_f(&c->y, at_flat(&c->y, k), v);
    }
}

/* Workspace for n doubles, or 0 with the error recorded. */
static uint64_t doubles(int64_t n, const char *call)
{
    if (n < 0 || (uint64_t)n > UINT64_MAX / 2 / sizeof(double)) {
        err(E_PARAM, "%s: operands too large", call);
        return 0;
    }
    return (uint64_t)n * sizeof(double);
}

API aclnnStatus aclnnConvolutionGetWorkspaceSize(
    const aclTensor *input, const aclTensor *weight, const aclTensor *bias,
    const aclIntArray *stride, const aclIntArray *padding,
    const aclIntArray *dilation, bool transposed,
    const aclIntArray *outputPadding, const int64_t groups, aclTensor *output,
    int8_t cubeMathType, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char call[] = "aclnnConvolutionGetWorkspaceSize";
    struct conv *c;
    aclnnStatus e;
    uint64_t ws;

    if (!input || !weight || !output || !stride || !padding || !dilation ||
        !outputPadding)
        return err(E_NULL, "%s: a NULL argument", call);
    if (cubeMathType < 0 || cubeMathType > 3)
        return err(E_PARAM, "%s: cubeMathType %d", call, (int)cubeMathType);
    c = calloc(1, sizeof(*c));
    if (!c)
        return err(ACL_ERROR_BAD_ALLOC, "%s: no memory", call);
    c->x = *input;
    c->w = *weight;
    c->y = *output;
    e = conv_check(c, stride, padding, dilation, transposed, outputPadding,
                   groups, call);
    if (!e && bias &&
        (!dims_are(bias, 1, &output->dims[1]) || bias->dt != input->dt))
        e = err(E_PARAM, "%s: bias is not [O] of the input's dtype", call);
    if (!e && !(ws = doubles(c->ny, call)))
        e = E_PARAM;
    if (e) {
        free(c);
        return e;
    }
    if (bias) {
        c->b = *bias;
        c->has_b = true;
    }
    return standin_host_plan(call, ws, conv_host, drop_priv, c, workspaceSize,
                             executor);
}

/* Left out of the partial stand-in (tests/standin-partial): a CANN whose
 * libopapi.so lacks one op must keep offering the others. */
#ifndef ACL_STANDIN_WITHOUT_CONV
API aclnnStatus aclnnConvolution(void *workspace, uint64_t workspaceSize,
                                 aclOpExecutor *executor, aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnConvolution");
}
#endif

/* ---- aclnnConvolutionBackward ------------------------------------------------ */

struct bwd_acc {
    double *dx, *dw; /* NULL where the mask leaves it out */
};

static void bwd_step(const struct conv *c, void *acc, int64_t xi, int64_t yi,
                     int64_t wi)
{
    struct bwd_acc *a = acc;
    double dy = ld_f(&c->y, at_flat(&c->y, yi));

    if (a->dx)
        a->dx[xi] += dy * ld_f(&c->w, at_flat(&c->w, wi));
    if (a->dw)
        a->dw[wi] += dy * ld_f(&c->x, at_flat(&c->x, xi));
}

static void conv_bwd_host(void *priv, void *workspace)
{
    const struct conv *c = priv;
    struct bwd_acc a = {NULL, NULL};
    double *next = workspace;
    int64_t plane = c->y.dims[2] * c->y.dims[3];

    if (c->mask[0]) {
        a.dx = next;
        next += c->nx;
    }
    if (c->mask[1])
        a.dw = next;
    if (a.dx)
        memset(a.dx, 0, (size_t)c->nx * sizeof(double));
    if (a.dw)
        memset(a.dw, 0, (size_t)c->nw * sizeof(double));
    if (a.dx || a.dw)
        conv_walk(c, bwd_step, &a);
    for (int64_t k = 0; a.dx && k < c->nx; k++)
        st_f(&c->dx, at_flat(&c->dx, k), a.dx[k]);
    for (int64_t k = 0; a.dw && k < c->nw; k++)
        st_f(&c->dw, at_flat(&c->dw, k), a.dw[k]);
    if (c->mask[2])
        for (int64_t o = 0; o < c->y.dims[1]; o++) {
            double db = 0;
            for (int64_t n = 0; n < c->y.dims[0]; n++)
                for (int64_t k = 0; k < plane; k++)
                    db += ld_f(&c->y, at_flat(&c->y, (n * c->y.dims[1] + o) *
                                                         plane + k));
            st_f(&c->db, at(&c->db, &o), db);
        }
}

API aclnnStatus aclnnConvolutionBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *input,
    const aclTensor *weight, const aclIntArray *biasSizes,
    const aclIntArray *stride, const aclIntArray *padding,
    const aclIntArray *dilation, bool transposed,
    const aclIntArray *outputPadding, int groups,
    const aclBoolArray *outputMask, int8_t cubeMathType,
    aclTensor *gradInput, aclTensor *gradWeight, aclTensor *gradBias,
    uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char call[] = "aclnnConvolutionBackwardGetWorkspaceSize";
    struct conv *c;
    aclnnStatus e;
    uint64_t ws = 0;

    if (!gradOutput || !input || !weight || !stride || !padding ||
        !dilation || !outputPadding || !outputMask)
        return err(E_NULL, "%s: a NULL argument", call);
    if (outputMask->n != 3)
        return err(E_PARAM, "%s: outputMask needs 3 values", call);
    if ((outputMask->v[0] && !gradInput) || (outputMask->v[1] && !gradWeight) ||
        (outputMask->v[2] && !gradBias))
        return err(E_NULL, "%s: an output the mask asks for is NULL", call);
    if (cubeMathType < 0 || cubeMathType > 3)
        return err(E_PARAM, "%s: cubeMathType %d", call, (int)cubeMathType);
    c = calloc(1, sizeof(*c));
    if (!c)
        return err(ACL_ERROR_BAD_ALLOC, "%s: no memory", call);
    c->x = *input;
    c->w = *weight;
    c->y = *gradOutput;
    for (int i = 0; i < 3; i++)
        c->mask[i] = outputMask->v[i];
    e = conv_check(c, stride, padding, dilation, transposed, outputPadding,
                   groups, call);
    if (!e && c->mask[0] &&
        (!dims_are(gradInput, 4, input->dims) || gradInput->dt != input->dt))
        e = err(E_PARAM, "%s: gradInput is not the input's shape and dtype",
                call);
    if (!e && c->mask[1] &&
        (!dims_are(gradWeight, 4, weight->dims) ||
         gradWeight->dt != input->dt))
        e = err(E_PARAM, "%s: gradWeight is not the weight's shape and dtype",
                call);
    if (!e && c->mask[2] &&
        (!biasSizes || biasSizes->n != 1 ||
         biasSizes->v[0] != gradOutput->dims[1] ||
         !dims_are(gradBias, 1, &gradOutput->dims[1]) ||
         gradBias->dt != input->dt))
        e = err(E_PARAM, "%s: biasSizes / gradBias are not [O]", call);
    if (!e && (c->mask[0] || c->mask[1]) &&
        !(ws = doubles((c->mask[0] ? c->nx : 0) + (c->mask[1] ? c->nw : 0),
                       call)))
        e = E_PARAM;
    if (e) {
        free(c);
        return e;
    }
    if (c->mask[0])
        c->dx = *gradInput;
    if (c->mask[1])
        c->dw = *gradWeight;
    if (c->mask[2])
        c->db = *gradBias;
    return standin_host_plan(call, ws, conv_bwd_host, drop_priv, c,
                             workspaceSize, executor);
}

API aclnnStatus aclnnConvolutionBackward(void *workspace,
                                         uint64_t workspaceSize,
                                         aclOpExecutor *executor,
                                         aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnConvolutionBackward");
}

/* ---- average pooling (PyTorch's avg_pool2d) -------------------------------- */

struct pool {
    struct aclTensor x, y, dx; /* y: out, or gradOutput */
    int64_t k[2], s[2], p[2];
    bool ceil, include_pad;
    int64_t divisor; /* 0: none */
};

/* Output size along one dim, PyTorch's rule (a last window that would
 * start in the trailing padding is dropped). */
static int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p,
                        bool ceil)
{
    int64_t num = in + 2 * p - k + (ceil ? s - 1 : 0);
    int64_t o;

    if (num < 0)
        return -1;
    o = num / s + 1;
    if (ceil && (o - 1) * s >= in + p)
        o--;
    return o;
}

static aclnnStatus pool_check(struct pool *q, const struct aclTensor *x,
                              const struct aclTensor *y,
                              const aclIntArray *kernelSize,
                              const aclIntArray *strides,
                              const aclIntArray *paddings, bool ceil,
                              bool include_pad, int64_t divisor,
                              int8_t cubeMathType, const char *call)
{
    int64_t oh, ow;

    if (cubeMathType < 0 || cubeMathType > 3)
        return err(E_PARAM, "%s: cubeMathType %d", call, (int)cubeMathType);
    if (!pair(kernelSize, false, NULL, 1, q->k) ||
        !pair(strides, true, q->k, 1, q->s) ||
        !pair(paddings, false, NULL, 0, q->p))
        return err(E_PARAM, "%s: kernelSize 1 or 2 values >= 1, strides 0, "
                   "1 or 2 >= 1, paddings 1 or 2 >= 0", call);
    if (2 * q->p[0] > q->k[0] || 2 * q->p[1] > q->k[1])
        return err(E_PARAM, "%s: padding above half the kernel", call);
    if (divisor < 0)
        return err(E_PARAM, "%s: divisorOverride %lld", call,
                   (long long)divisor);
    if (x->ndim != 4 || !dt_float(x->dt) || y->dt != x->dt)
        return err(E_PARAM, "%s: self [N, C, H, W] of a float dtype, and "
                   "the other operand of its dtype expected", call);
    oh = pool_out(x->dims[2], q->k[0], q->s[0], q->p[0], ceil);
    ow = pool_out(x->dims[3], q->k[1], q->s[1], q->p[1], ceil);
    if (oh <= 0 || ow <= 0 ||
        !dims_are(y, 4, (int64_t[]){x->dims[0], x->dims[1], oh, ow}))
        return err(E_PARAM, "%s: out / gradOutput is not [N, C, %lld, %lld]",
                   call, (long long)oh, (long long)ow);
    q->x = *x;
    q->y = *y;
    q->ceil = ceil;
    q->include_pad = include_pad;
    q->divisor = divisor;
    return 0;
}

/* Window of output (i, j): [h0, h1) x [w0, w1) inside the input, and its
 * divisor. */
static double pool_window(const struct pool *q, int64_t i, int64_t j,
                          int64_t *h0, int64_t *h1, int64_t *w0, int64_t *w1)
{
    int64_t H = q->x.dims[2], W = q->x.dims[3];
    int64_t hs = i * q->s[0] - q->p[0], ws = j * q->s[1] - q->p[1];
    int64_t he = hs + q->k[0], we = ws + q->k[1];
    int64_t hp = he < H + q->p[0] ? he : H + q->p[0];
    int64_t wp = we < W + q->p[1] ? we : W + q->p[1];
    int64_t whole = (hp - hs) * (wp - ws);

    *h0 = hs > 0 ? hs : 0;
    *w0 = ws > 0 ? ws : 0;
    *h1 = he < H ? he : H;
    *w1 = we < W ? we : W;
    if (q->divisor)
        return (double)q->divisor;
    return q->include_pad ? (double)whole
                          : (double)((*h1 - *h0) * (*w1 - *w0));
}

static void avg_host(void *priv, void *workspace)
{
    const struct pool *q = priv;

    (void)workspace;
    for (int64_t n = 0; n < q->y.dims[0]; n++)
        for (int64_t ch = 0; ch < q->y.dims[1]; ch++)
            for (int64_t i = 0; i < q->y.dims[2]; i++)
                for (int64_t j = 0; j < q->y.dims[3]; j++) {
                    int64_t h0, h1, w0, w1;
                    double div = pool_window(q, i, j, &h0, &h1, &w0, &w1);
                    double sum = 0;
                    for (int64_t h = h0; h < h1; h++)
                        for (int64_t w = w0; w < w1; w++)
                            sum += get4(&q->x, n, ch, h, w);
                    put4(&q->y, n, ch, i, j, div > 0 ? sum / div : 0);
                }
}

API aclnnStatus aclnnAvgPool2dGetWorkspaceSize(
    const aclTensor *self, const aclIntArray *kernelSize,
    const aclIntArray *strides, const aclIntArray *paddings,
    const bool ceilMode, const bool countIncludePad,
    const int64_t divisorOverride, const int8_t cubeMathType, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char call[] = "aclnnAvgPool2dGetWorkspaceSize";
    struct pool *q;
    aclnnStatus e;

    if (!self || !kernelSize || !strides || !paddings || !out)
        return err(E_NULL, "%s: a NULL argument", call);
    q = calloc(1, sizeof(*q));
    if (!q)
        return err(ACL_ERROR_BAD_ALLOC, "%s: no memory", call);
    if ((e = pool_check(q, self, out, kernelSize, strides, paddings, ceilMode,
                        countIncludePad, divisorOverride, cubeMathType,
                        call))) {
        free(q);
        return e;
    }
    return standin_host_plan(call, 0, avg_host, drop_priv, q, workspaceSize,
                             executor);
}

API aclnnStatus aclnnAvgPool2d(void *workspace, uint64_t workspaceSize,
                               aclOpExecutor *executor, aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnAvgPool2d");
}

static void avg_bwd_host(void *priv, void *workspace)
{
    const struct pool *q = priv;
    int64_t H = q->x.dims[2], W = q->x.dims[3];

    (void)workspace;
    for (int64_t n = 0; n < q->x.dims[0]; n++)
        for (int64_t ch = 0; ch < q->x.dims[1]; ch++) {
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++) {
                    /* the windows covering (h, w) */
                    double g = 0;
                    for (int64_t i = 0; i < q->y.dims[2]; i++)
                        for (int64_t j = 0; j < q->y.dims[3]; j++) {
                            int64_t h0, h1, w0, w1;
                            double div =
                                pool_window(q, i, j, &h0, &h1, &w0, &w1);
                            if (h >= h0 && h < h1 && w >= w0 && w < w1 &&
                                div > 0)
                                g += get4(&q->y, n, ch, i, j) / div;
                        }
                    put4(&q->dx, n, ch, h, w, g);
                }
        }
}

API aclnnStatus aclnnAvgPool2dBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *self,
    const aclIntArray *kernelSize, const aclIntArray *stride,
    const aclIntArray *padding, bool ceilMode, bool countIncludePad,
    int64_t divisorOverride, int8_t cubeMathType, aclTensor *gradInput,
    uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char call[] = "aclnnAvgPool2dBackwardGetWorkspaceSize";
    struct pool *q;
    aclnnStatus e;

    if (!gradOutput || !self || !kernelSize || !stride || !padding ||
        !gradInput)
        return err(E_NULL, "%s: a NULL argument", call);
    if (!dims_are(gradInput, self->ndim, self->dims) ||
        gradInput->dt != self->dt)
        return err(E_PARAM, "%s: gradInput is not self's shape and dtype",
                   call);
    q = calloc(1, sizeof(*q));
    if (!q)
        return err(ACL_ERROR_BAD_ALLOC, "%s: no memory", call);
    if ((e = pool_check(q, self, gradOutput, kernelSize, stride, padding,
                        ceilMode, countIncludePad, divisorOverride,
                        cubeMathType, call))) {
        free(q);
        return e;
    }
    q->dx = *gradInput;
    return standin_host_plan(call, 0, avg_bwd_host, drop_priv, q,
                             workspaceSize, executor);
}

API aclnnStatus aclnnAvgPool2dBackward(void *workspace, uint64_t workspaceSize,
                                       aclOpExecutor *executor,
                                       aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnAvgPool2dBackward");
}

/* ---- aclnnAdaptiveAvgPool2d ------------------------------------------------ */

struct apool {
    struct aclTensor x, y;
};

static void adaptive_host(void *priv, void *workspace)
{
    const struct apool *q = priv;
    int64_t H = q->x.dims[2], W = q->x.dims[3];
    int64_t OH = q->y.dims[2], OW = q->y.dims[3];

    (void)workspace;
    for (int64_t n = 0; n < q->y.dims[0]; n++)
        for (int64_t ch = 0; ch < q->y.dims[1]; ch++)
            for (int64_t i = 0; i < OH; i++)
                for (int64_t j = 0; j < OW; j++) {
                    /* [floor(i * H / OH), ceil((i + 1) * H / OH)) */
                    int64_t h0 = i * H / OH, h1 = ((i + 1) * H + OH - 1) / OH;
                    int64_t w0 = j * W / OW, w1 = ((j + 1) * W + OW - 1) / OW;
                    double sum = 0;
                    for (int64_t h = h0; h < h1; h++)
                        for (int64_t w = w0; w < w1; w++)
                            sum += get4(&q->x, n, ch, h, w);
                    put4(&q->y, n, ch, i, j,
                         sum / (double)((h1 - h0) * (w1 - w0)));
                }
}

API aclnnStatus aclnnAdaptiveAvgPool2dGetWorkspaceSize(
    const aclTensor *self, const aclIntArray *outputSize, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char call[] = "aclnnAdaptiveAvgPool2dGetWorkspaceSize";
    struct apool *q;

    if (!self || !outputSize || !out)
        return err(E_NULL, "%s: a NULL argument", call);
    if (outputSize->n != 2 || outputSize->v[0] < 1 || outputSize->v[1] < 1)
        return err(E_PARAM, "%s: outputSize needs 2 values >= 1", call);
    if (self->ndim != 4 || !dt_float(self->dt) || out->dt != self->dt ||
        !dims_are(out, 4, (int64_t[]){self->dims[0], self->dims[1],
                                      outputSize->v[0], outputSize->v[1]}))
        return err(E_PARAM, "%s: self [N, C, H, W] and out [N, C, oh, ow] "
                   "of one float dtype expected", call);
    /* the window bounds' products must fit */
    if (self->dims[2] > INT64_MAX / (outputSize->v[0] + 1) ||
        self->dims[3] > INT64_MAX / (outputSize->v[1] + 1))
        return err(E_PARAM, "%s: sizes too large", call);
    q = calloc(1, sizeof(*q));
    if (!q)
        return err(ACL_ERROR_BAD_ALLOC, "%s: no memory", call);
    q->x = *self;
    q->y = *out;
    return standin_host_plan(call, 0, adaptive_host, drop_priv, q,
                             workspaceSize, executor);
}

API aclnnStatus aclnnAdaptiveAvgPool2d(void *workspace, uint64_t workspaceSize,
                                       aclOpExecutor *executor,
                                       aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnAdaptiveAvgPool2d");
}

/* ---- aclnnAdaptiveAvgPool2dBackward ---------------------------------------- */

/* q->x: self, q->y: gradOutput; q->dx below */
struct apool_bwd {
    struct aclTensor x, y, dx;
};

static void adaptive_bwd_host(void *priv, void *workspace)
{
    const struct apool_bwd *q = priv;
    int64_t H = q->x.dims[2], W = q->x.dims[3];
    int64_t OH = q->y.dims[2], OW = q->y.dims[3];

    (void)workspace;
    for (int64_t n = 0; n < q->x.dims[0]; n++)
        for (int64_t ch = 0; ch < q->x.dims[1]; ch++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++) {
                    double g = 0;
                    for (int64_t i = 0; i < OH; i++) {
                        int64_t h0 = i * H / OH,
                                h1 = ((i + 1) * H + OH - 1) / OH;
                        if (h < h0 || h >= h1)
                            continue;
                        for (int64_t j = 0; j < OW; j++) {
                            int64_t w0 = j * W / OW,
                                    w1 = ((j + 1) * W + OW - 1) / OW;
                            if (w >= w0 && w < w1)
                                g += get4(&q->y, n, ch, i, j) /
                                     (double)((h1 - h0) * (w1 - w0));
                        }
                    }
                    put4(&q->dx, n, ch, h, w, g);
                }
}

API aclnnStatus aclnnAdaptiveAvgPool2dBackwardGetWorkspaceSize(
    const aclTensor *gradOutput, const aclTensor *self, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const char call[] = "aclnnAdaptiveAvgPool2dBackwardGetWorkspaceSize";
    struct apool_bwd *q;

    if (!gradOutput || !self || !out)
        return err(E_NULL, "%s: a NULL argument", call);
    if (self->ndim != 4 || gradOutput->ndim != 4 || !dt_float(self->dt) ||
        gradOutput->dt != self->dt || out->dt != self->dt ||
        !dims_are(out, 4, self->dims) ||
        gradOutput->dims[0] != self->dims[0] ||
        gradOutput->dims[1] != self->dims[1])
        return err(E_PARAM, "%s: gradOutput [N, C, oh, ow], self and out "
                   "[N, C, H, W] of one float dtype expected", call);
    if (self->dims[2] > INT64_MAX / (gradOutput->dims[2] + 1) ||
        self->dims[3] > INT64_MAX / (gradOutput->dims[3] + 1))
        return err(E_PARAM, "%s: sizes too large", call);
    q = calloc(1, sizeof(*q));
    if (!q)
        return err(ACL_ERROR_BAD_ALLOC, "%s: no memory", call);
    q->x = *self;
    q->y = *gradOutput;
    q->dx = *out;
    return standin_host_plan(call, 0, adaptive_bwd_host, drop_priv, q,
                             workspaceSize, executor);
}

API aclnnStatus aclnnAdaptiveAvgPool2dBackward(void *workspace,
                                               uint64_t workspaceSize,
                                               aclOpExecutor *executor,
                                               aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnAdaptiveAvgPool2dBackward");
}
