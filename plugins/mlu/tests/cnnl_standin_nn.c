/*
 * The stand-in's CNNL operators for the plugin's mlu_kernels_nn.c,
 * computed on the host (shared parts: cnnl_standin.h, standin.h). Test
 * code only.
 *
 *   cnnlSoftmaxForward_v2   a 3-D descriptor; LOW_DIMENSION normalises
 *                           along dim 2, MEDIUM_DIMENSION along dim 1,
 *                           HIGH_DIMENSION along dim 0; ACCURATE / FAST
 *                           give e^(x - m) / sum, LOG x - m - ln sum;
 *                           y = alpha * that + beta * y (NULL: 1 and 0).
 *   cnnlMatMul              2-D a, b, c: c = alpha * op(a) op(b) + beta * c
 *                           (float alpha and beta).
 *   cnnlBatchMatMulBCast    a, b, c of one rank >= 3: a batch dim of size 1
 *                           broadcasts; asks for a 512-byte workspace and
 *                           checks it is given.
 *   cnnlExpand              input dims 1 or the output's (same rank).
 *   cnnlCastDataType        FLOAT<->HALF, INT32->FLOAT/HALF, the dtypes of
 *                           the descriptors matching the cast.
 *   cnnlTranspose_v2        any permutation of one rank; no workspace.
 *   cnnlConvolutionForward  x [N,H,W,C], w [O,kh,kw,C/g], y [N,oh,ow,O],
 *                           all set by cnnlSetTensorDescriptor with
 *                           CNNL_LAYOUT_NHWC (remembered per descriptor);
 *                           pad (top, bottom, left, right), stride,
 *                           dilation, groups; no bias; y = alpha * conv +
 *                           beta * y; asks for a 1 KiB workspace.
 *   cnnlConvolutionBackwardData / cnnlConvolutionBackwardFilter
 *                           the same layouts and checks; dx or dw =
 *                           alpha * gradient + beta * itself; each asks
 *                           for a 1 KiB workspace.
 *   cnnlFill                every element of the descriptor's view.
 *   cnnlPoolingForward      NHWC x and y; the two average modes (INCLUDE:
 *                           the full window; EXCLUDE: the elements inside
 *                           x); asks for a 128-byte workspace.
 *   cnnlPoolingBackward     the average modes' gradient (y and y_desc
 *                           NULL): each dy spread over its window's
 *                           elements inside x, divided as above.
 *
 * Every call checks its descriptors (set, dims consistent, dtypes equal
 * where CNNL wants that) and that each pointer is device memory of the
 * current device spanning its descriptor; the work runs on the queue's
 * worker, accumulating in double. CNRT_STANDIN_FAULT=softmax_wrong makes
 * the first element of every softmax 0.25 too large.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnnl_nn_api.h"
#include "cnnl_standin.h"

#define NN_PROTO(ret, name, params) SI_API ret name params;
MLU_CNNL_NN_FUNCS(NN_PROTO)
#undef NN_PROTO

#define BMM_WORKSPACE 512

#define CONV_WORKSPACE 1024

enum job_kind { J_SOFTMAX, J_MATMUL, J_BMM, J_EXPAND, J_CAST, J_TRANSPOSE,
                J_CONV, J_BWD_DATA, J_BWD_FILTER, J_FILL, J_POOL,
                J_POOL_BWD };

#define POOL_WORKSPACE 128

struct cnnlPoolingStruct {
    bool set;
    cnnlPoolingMode_t mode;
    int kh, kw, pad[4], sh, sw;
};

struct cnnlConvolutionStruct {
    bool set;
    int pad[4], stride[2], dil[2], groups;
};

struct job {
    enum job_kind kind;
    struct cnnlTensorStruct a, b, c;
    const char *ap, *bp;
    char *cp;
    char *ws;
    size_t ws_n;
    bool ta, tb, log;
    int axis; /* softmax: the dim normalised */
    double alpha, beta, value;
    struct cnnlTransposeStruct tr;
    struct cnnlConvolutionStruct cv;
    struct cnnlPoolingStruct pl;
};

static double at(const struct cnnlTensorStruct *t, const char *p,
                 const int *idx)
{
    size_t off = 0;

    for (int i = 0; i < t->rank; i++)
        off += (size_t)idx[i] * (size_t)t->strides[i];
    return nn_load(t, p + off * nn_dt_bytes(t->dt));
}

static void put(const struct cnnlTensorStruct *t, char *p, const int *idx,
                double v)
{
    size_t off = 0;

    for (int i = 0; i < t->rank; i++)
        off += (size_t)idx[i] * (size_t)t->strides[i];
    nn_store(t, p + off * nn_dt_bytes(t->dt), v);
}

static void run_softmax(struct job *j)
{
    int d0 = j->a.dims[0], d1 = j->a.dims[1], d2 = j->a.dims[2];
    int n = j->a.dims[j->axis], idx[3];
    int o1 = j->axis == 0 ? d1 : d0, o2 = j->axis == 2 ? d1 : d2;
    bool first = true;

    (void)d0;
    for (int p = 0; p < o1; p++) {
        for (int q = 0; q < o2; q++) {
            double m = -INFINITY, sum = 0;
#define SM_IDX(t)                                            \
    do {                                                     \
        if (j->axis == 0)                                    \
            idx[0] = (t), idx[1] = p, idx[2] = q;            \
        else if (j->axis == 1)                               \
            idx[0] = p, idx[1] = (t), idx[2] = q;            \
        else                                                 \
            idx[0] = p, idx[1] = q, idx[2] = (t);            \
    } while (0)
            for (int t = 0; t < n; t++) {
                SM_IDX(t);
                double v = at(&j->a, j->ap, idx);
                if (v > m || isnan(v))
                    m = isnan(m) ? m : v;
            }
            for (int t = 0; t < n; t++) {
                SM_IDX(t);
                sum += exp(at(&j->a, j->ap, idx) - m);
            }
            for (int t = 0; t < n; t++) {
                SM_IDX(t);
                double x = at(&j->a, j->ap, idx);
                double v = j->log ? x - m - log(sum) : exp(x - m) / sum;
                if (first && si_fault("softmax_wrong"))
                    v += 0.25;
                first = false;
                v *= j->alpha;
                if (j->beta != 0)
                    v += j->beta * at(&j->c, j->cp, idx);
                put(&j->c, j->cp, idx, v);
            }
#undef SM_IDX
        }
    }
}

/* One matrix product c[cb] = alpha * op(a[ab]) op(b[bb]) + beta * c; the
 * batch offsets in elements. */
static void gemm(struct job *j, size_t ab, size_t bb, size_t cb)
{
    int r = j->c.rank, M = j->c.dims[r - 2], N = j->c.dims[r - 1];
    int K = j->ta ? j->a.dims[r - 2] : j->a.dims[r - 1];
    size_t ea = nn_dt_bytes(j->a.dt), eb = nn_dt_bytes(j->b.dt);
    size_t ec = nn_dt_bytes(j->c.dt);

    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            double acc = 0;
            for (int k = 0; k < K; k++) {
                int ar = j->ta ? k : m, ac = j->ta ? m : k;
                int br = j->tb ? n : k, bc = j->tb ? k : n;
                size_t ao = ab + (size_t)ar * (size_t)j->a.strides[r - 2] +
                            (size_t)ac * (size_t)j->a.strides[r - 1];
                size_t bo = bb + (size_t)br * (size_t)j->b.strides[r - 2] +
                            (size_t)bc * (size_t)j->b.strides[r - 1];
                acc += nn_load(&j->a, j->ap + ao * ea) *
                       nn_load(&j->b, j->bp + bo * eb);
            }
            size_t co = cb + (size_t)m * (size_t)j->c.strides[r - 2] +
                        (size_t)n * (size_t)j->c.strides[r - 1];
            double v = j->alpha * acc;
            if (j->beta != 0)
                v += j->beta * nn_load(&j->c, j->cp + co * ec);
            nn_store(&j->c, j->cp + co * ec, v);
        }
    }
}

static void run_bmm(struct job *j)
{
    int r = j->c.rank, idx[8] = {0};
    size_t batches = 1;

    for (int i = 0; i < r - 2; i++)
        batches *= (size_t)j->c.dims[i];
    for (size_t t = 0; t < batches; t++) {
        size_t k = t, ab = 0, bb = 0, cb = 0;
        for (int i = r - 3; i >= 0; i--) {
            idx[i] = (int)(k % (size_t)j->c.dims[i]);
            k /= (size_t)j->c.dims[i];
            if (j->a.dims[i] > 1)
                ab += (size_t)idx[i] * (size_t)j->a.strides[i];
            if (j->b.dims[i] > 1)
                bb += (size_t)idx[i] * (size_t)j->b.strides[i];
            cb += (size_t)idx[i] * (size_t)j->c.strides[i];
        }
        gemm(j, ab, bb, cb);
    }
}

static void run_expand(struct job *j)
{
    size_t span, n = nn_numel(&j->c, &span);
    int idx[8], src[8];

    for (size_t k = 0; k < n; k++) {
        size_t q = k;
        for (int i = j->c.rank - 1; i >= 0; i--) {
            idx[i] = (int)(q % (size_t)j->c.dims[i]);
            q /= (size_t)j->c.dims[i];
            src[i] = j->a.dims[i] == 1 ? 0 : idx[i];
        }
        put(&j->c, j->cp, idx, at(&j->a, j->ap, src));
    }
}

static void run_cast(struct job *j)
{
    size_t span, n = nn_numel(&j->c, &span);

    for (size_t k = 0; k < n; k++)
        nn_store(&j->c, j->cp + nn_offset(&j->c, k),
                 nn_load(&j->a, j->ap + nn_offset(&j->a, k)));
}

static void run_transpose(struct job *j)
{
    size_t span, n = nn_numel(&j->c, &span);
    int idx[8], src[8];

    for (size_t k = 0; k < n; k++) {
        size_t q = k;
        for (int i = j->c.rank - 1; i >= 0; i--) {
            idx[i] = (int)(q % (size_t)j->c.dims[i]);
            q /= (size_t)j->c.dims[i];
        }
        for (int i = 0; i < j->c.rank; i++)
            src[j->tr.perm[i]] = idx[i];
        put(&j->c, j->cp, idx, at(&j->a, j->ap, src));
    }
}

static void run_conv(struct job *j)
{
    const struct cnnlConvolutionStruct *g = &j->cv;
    int N = j->a.dims[0], H = j->a.dims[1], W = j->a.dims[2];
    int O = j->b.dims[0], kh = j->b.dims[1], kw = j->b.dims[2];
    int cg = j->b.dims[3], og = O / g->groups;
    int oh = j->c.dims[1], ow = j->c.dims[2];

    for (int n = 0; n < N; n++)
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++)
                for (int o = 0; o < O; o++) {
                    double acc = 0;
                    int c0 = o / og * cg;
                    for (int r = 0; r < kh; r++)
                        for (int s = 0; s < kw; s++) {
                            int ih = y * g->stride[0] - g->pad[0] +
                                     r * g->dil[0];
                            int iw = x * g->stride[1] - g->pad[2] +
                                     s * g->dil[1];
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                                continue;
                            for (int c = 0; c < cg; c++) {
                                int xi[4] = {n, ih, iw, c0 + c};
                                int wi[4] = {o, r, s, c};
                                acc += at(&j->a, j->ap, xi) *
                                       at(&j->b, j->bp, wi);
                            }
                        }
                    int yi[4] = {n, y, x, o};
                    double v = j->alpha * acc;
                    if (j->beta != 0)
                        v += j->beta * at(&j->c, j->cp, yi);
                    put(&j->c, j->cp, yi, v);
                }
}

/* The gradients of run_conv: dx (J_BWD_DATA: a dy, b w, c dx) or dw
 * (J_BWD_FILTER: a x, b dy, c dw), accumulated in double first. */
static void run_conv_grad(struct job *j)
{
    const struct cnnlConvolutionStruct *g = &j->cv;
    bool data = j->kind == J_BWD_DATA;
    const struct cnnlTensorStruct *xd = data ? &j->c : &j->a;
    const struct cnnlTensorStruct *wd = data ? &j->b : &j->c;
    const struct cnnlTensorStruct *yd = data ? &j->a : &j->b;
    int N = xd->dims[0], H = xd->dims[1], W = xd->dims[2];
    int O = wd->dims[0], kh = wd->dims[1], kw = wd->dims[2], cg = wd->dims[3];
    int og = O / g->groups, oh = yd->dims[1], ow = yd->dims[2];
    size_t span, n_out = nn_numel(&j->c, &span);
    double *acc = calloc(n_out ? n_out : 1, sizeof(double));
    int idx[4];

    if (!acc)
        return; /* the result stays unwritten: conform sees it */
    for (int n = 0; n < N; n++)
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++)
                for (int o = 0; o < O; o++) {
                    int yi[4] = {n, y, x, o}, c0 = o / og * cg;
                    double gy = at(yd, data ? j->ap : j->bp, yi);
                    for (int r = 0; r < kh; r++)
                        for (int s = 0; s < kw; s++) {
                            int ih = y * g->stride[0] - g->pad[0] +
                                     r * g->dil[0];
                            int iw = x * g->stride[1] - g->pad[2] +
                                     s * g->dil[1];
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                                continue;
                            for (int c = 0; c < cg; c++) {
                                int xi[4] = {n, ih, iw, c0 + c};
                                int wi[4] = {o, r, s, c};
                                if (data)
                                    acc[((size_t)(n * H + ih) * W + iw) *
                                            (size_t)xd->dims[3] +
                                        (size_t)(c0 + c)] +=
                                        gy * at(wd, j->bp, wi);
                                else
                                    acc[((size_t)(o * kh + r) * kw + s) *
                                            (size_t)cg +
                                        (size_t)c] +=
                                        gy * at(xd, j->ap, xi);
                            }
                        }
                }
    for (size_t k = 0; k < n_out; k++) {
        size_t q = k;
        for (int i = 3; i >= 0; i--) {
            idx[i] = (int)(q % (size_t)j->c.dims[i]);
            q /= (size_t)j->c.dims[i];
        }
        double v = j->alpha * acc[k];
        if (j->beta != 0)
            v += j->beta * at(&j->c, j->cp, idx);
        put(&j->c, j->cp, idx, v);
    }
    free(acc);
}

static void run_fill(struct job *j)
{
    size_t span, n = nn_numel(&j->c, &span);

    for (size_t k = 0; k < n; k++)
        nn_store(&j->c, j->cp + nn_offset(&j->c, k), j->value);
}

static void run_pool(struct job *j)
{
    const struct cnnlPoolingStruct *g = &j->pl;
    int N = j->a.dims[0], H = j->a.dims[1], W = j->a.dims[2];
    int C = j->a.dims[3], oh = j->c.dims[1], ow = j->c.dims[2];

    for (int n = 0; n < N; n++)
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++)
                for (int c = 0; c < C; c++) {
                    double sum = 0;
                    int cnt = 0;
                    for (int r = 0; r < g->kh; r++)
                        for (int s = 0; s < g->kw; s++) {
                            int ih = y * g->sh - g->pad[0] + r;
                            int iw = x * g->sw - g->pad[2] + s;
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                                continue;
                            int xi[4] = {n, ih, iw, c};
                            sum += at(&j->a, j->ap, xi);
                            cnt++;
                        }
                    int yi[4] = {n, y, x, c};
                    double d = g->mode ==
                                       CNNL_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING
                                   ? cnt
                                   : g->kh * g->kw;
                    double v = j->alpha * (d > 0 ? sum / d : 0);
                    if (j->beta != 0)
                        v += j->beta * at(&j->c, j->cp, yi);
                    put(&j->c, j->cp, yi, v);
                }
}

/* a dy, b x, c dx (NHWC). */
static void run_pool_bwd(struct job *j)
{
    const struct cnnlPoolingStruct *g = &j->pl;
    int N = j->c.dims[0], H = j->c.dims[1], W = j->c.dims[2];
    int C = j->c.dims[3], oh = j->a.dims[1], ow = j->a.dims[2];
    size_t span, n_out = nn_numel(&j->c, &span);
    double *acc = calloc(n_out ? n_out : 1, sizeof(double));
    int idx[4];

    if (!acc)
        return;
    for (int n = 0; n < N; n++)
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++)
                for (int c = 0; c < C; c++) {
                    int cnt = 0, yi[4] = {n, y, x, c};
                    for (int pass = 0; pass < 2; pass++)
                        for (int r = 0; r < g->kh; r++)
                            for (int s = 0; s < g->kw; s++) {
                                int ih = y * g->sh - g->pad[0] + r;
                                int iw = x * g->sw - g->pad[2] + s;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                                    continue;
                                if (pass == 0) {
                                    cnt++;
                                    continue;
                                }
                                double d =
                                    g->mode ==
                                            CNNL_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING
                                        ? cnt
                                        : g->kh * g->kw;
                                acc[((size_t)(n * H + ih) * W + iw) *
                                        (size_t)C +
                                    (size_t)c] +=
                                    at(&j->a, j->ap, yi) / d;
                            }
                }
    for (size_t k = 0; k < n_out; k++) {
        size_t q = k;
        for (int i = 3; i >= 0; i--) {
            idx[i] = (int)(q % (size_t)j->c.dims[i]);
            q /= (size_t)j->c.dims[i];
        }
        double v = j->alpha * acc[k];
        if (j->beta != 0)
            v += j->beta * at(&j->c, j->cp, idx);
        put(&j->c, j->cp, idx, v);
    }
    free(acc);
}

static void job_run(void *arg)
{
    struct job *j = arg;

    if (j->ws)
        memset(j->ws, 0xa5, j->ws_n);
    switch (j->kind) {
    case J_SOFTMAX: run_softmax(j); break;
    case J_MATMUL:
    case J_BMM: run_bmm(j); break;
    case J_EXPAND: run_expand(j); break;
    case J_CAST: run_cast(j); break;
    case J_TRANSPOSE: run_transpose(j); break;
    case J_CONV: run_conv(j); break;
    case J_BWD_DATA:
    case J_BWD_FILTER: run_conv_grad(j); break;
    case J_FILL: run_fill(j); break;
    case J_POOL: run_pool(j); break;
    case J_POOL_BWD: run_pool_bwd(j); break;
    }
}

/* The checks every launch makes, then the job goes on the handle's queue
 * (freed there; freed here on a refusal). */
static cnnlStatus_t submit(cnnlHandle_t h, struct job *j)
{
    int dev = si_current();
    size_t span;

    if (!h || !h->q || dev < 0 || si_queue_device(h->q) != dev) {
        free(j);
        return CNNL_STATUS_NOT_INITIALIZED;
    }
    nn_numel(&j->a, &span);
    if (j->kind != J_FILL && !si_device_mem(j->ap, span, dev))
        goto bad;
    if (j->kind == J_MATMUL || j->kind == J_BMM || j->kind == J_CONV ||
        j->kind == J_BWD_DATA || j->kind == J_BWD_FILTER ||
        j->kind == J_POOL_BWD) {
        nn_numel(&j->b, &span);
        if (!si_device_mem(j->bp, span, dev))
            goto bad;
    }
    nn_numel(&j->c, &span);
    if (!si_device_mem(j->cp, span, dev))
        goto bad;
    if (j->ws && !si_device_mem(j->ws, j->ws_n, dev))
        goto bad;
    return si_enqueue(h->q, job_run, j) == cnrtSuccess
               ? CNNL_STATUS_SUCCESS
               : CNNL_STATUS_EXECUTION_FAILED;
bad:
    free(j);
    return CNNL_STATUS_BAD_PARAM;
}

static bool is_float(cnnlDataType_t dt)
{
    return dt == CNNL_DTYPE_FLOAT || dt == CNNL_DTYPE_HALF;
}

static struct job *job_new(enum job_kind kind)
{
    struct job *j = calloc(1, sizeof(*j));

    if (j) {
        j->kind = kind;
        j->alpha = 1;
    }
    return j;
}

/* ---- softmax ------------------------------------------------------------- */

SI_API cnnlStatus_t cnnlSoftmaxForward_v2(
    cnnlHandle_t handle, cnnlSoftmaxAlgorithm_t algorithm,
    cnnlSoftmaxMode_t mode, cnnlComputationPreference_t prefer,
    const void *alpha, const cnnlTensorDescriptor_t x_desc, const void *x,
    const void *beta, const cnnlTensorDescriptor_t y_desc, void *y)
{
    struct job *j;
    int axis;

    NN_ARMED("cnnlSoftmaxForward_v2");
    if (!x_desc || !y_desc || !x_desc->set || !y_desc->set ||
        x_desc->rank != 3 || y_desc->rank != 3 || x_desc->dt != y_desc->dt ||
        !is_float(x_desc->dt) ||
        memcmp(x_desc->dims, y_desc->dims, 3 * sizeof(int)))
        return CNNL_STATUS_BAD_PARAM;
    if (prefer != CNNL_COMPUTATION_FAST &&
        prefer != CNNL_COMPUTATION_HIGH_PRECISION)
        return CNNL_STATUS_BAD_PARAM;
    switch (mode) {
    case CNNL_SOFTMAX_MODE_HIGH_DIMENSION: axis = 0; break;
    case CNNL_SOFTMAX_MODE_MEDIUM_DIMENSION: axis = 1; break;
    case CNNL_SOFTMAX_MODE_LOW_DIMENSION: axis = 2; break;
    default: return CNNL_STATUS_BAD_PARAM;
    }
    if (algorithm != CNNL_SOFTMAX_FAST && algorithm != CNNL_SOFTMAX_ACCURATE &&
        algorithm != CNNL_SOFTMAX_LOG)
        return CNNL_STATUS_BAD_PARAM;
    if (!(j = job_new(J_SOFTMAX)))
        return CNNL_STATUS_ALLOC_FAILED;
    j->a = *x_desc;
    j->c = *y_desc;
    j->ap = x;
    j->cp = y;
    j->axis = axis;
    j->log = algorithm == CNNL_SOFTMAX_LOG;
    j->alpha = alpha ? *(const float *)alpha : 1.0;
    j->beta = beta ? *(const float *)beta : 0.0;
    return submit(handle, j);
}

/* ---- matmul -------------------------------------------------------------- */

/* a, b, c of one rank with op(a) [.., M, K], op(b) [.., K, N], c [.., M,
 * N]; batch dims of a and b 1 or c's. */
static bool mm_dims(const struct cnnlTensorStruct *a,
                    const struct cnnlTensorStruct *b,
                    const struct cnnlTensorStruct *c, bool ta, bool tb)
{
    int r = c->rank;

    if (!a->set || !b->set || !c->set || a->rank != r || b->rank != r ||
        a->dt != b->dt || a->dt != c->dt || !is_float(a->dt))
        return false;
    int M = ta ? a->dims[r - 1] : a->dims[r - 2];
    int K = ta ? a->dims[r - 2] : a->dims[r - 1];
    int Kb = tb ? b->dims[r - 1] : b->dims[r - 2];
    int N = tb ? b->dims[r - 2] : b->dims[r - 1];
    if (K != Kb || M != c->dims[r - 2] || N != c->dims[r - 1])
        return false;
    for (int i = 0; i < r - 2; i++)
        if ((a->dims[i] != 1 && a->dims[i] != c->dims[i]) ||
            (b->dims[i] != 1 && b->dims[i] != c->dims[i]))
            return false;
    return true;
}

SI_API cnnlStatus_t cnnlMatMul(cnnlHandle_t handle, const bool is_trans_a,
                               const bool is_trans_b, const void *alpha,
                               const cnnlTensorDescriptor_t a_desc,
                               const void *a,
                               const cnnlTensorDescriptor_t b_desc,
                               const void *b, const void *beta,
                               const cnnlTensorDescriptor_t c_desc, void *c)
{
    struct job *j;

    NN_ARMED("cnnlMatMul");
    if (!a_desc || !b_desc || !c_desc || !alpha || !beta ||
        c_desc->rank != 2 || !mm_dims(a_desc, b_desc, c_desc, is_trans_a,
                                      is_trans_b))
        return CNNL_STATUS_BAD_PARAM;
    if (!(j = job_new(J_MATMUL)))
        return CNNL_STATUS_ALLOC_FAILED;
    j->a = *a_desc;
    j->b = *b_desc;
    j->c = *c_desc;
    j->ap = a;
    j->bp = b;
    j->cp = c;
    j->ta = is_trans_a;
    j->tb = is_trans_b;
    j->alpha = *(const float *)alpha;
    j->beta = *(const float *)beta;
    return submit(handle, j);
}

SI_API cnnlStatus_t cnnlGetBatchMatMulBCastWorkspaceSize(
    cnnlHandle_t handle, const cnnlTensorDescriptor_t a_desc,
    const cnnlTensorDescriptor_t b_desc, const cnnlTensorDescriptor_t c_desc,
    size_t *size)
{
    NN_ARMED("cnnlGetBatchMatMulBCastWorkspaceSize");
    if (!handle || !a_desc || !b_desc || !c_desc || !size || !a_desc->set ||
        !b_desc->set || !c_desc->set)
        return CNNL_STATUS_BAD_PARAM;
    *size = BMM_WORKSPACE;
    return CNNL_STATUS_SUCCESS;
}

SI_API cnnlStatus_t cnnlBatchMatMulBCast(
    cnnlHandle_t handle, const bool is_trans_a, const bool is_trans_b,
    const cnnlTensorDescriptor_t a_desc, const void *a,
    const cnnlTensorDescriptor_t b_desc, const void *b, void *workspace,
    size_t workspace_size, const cnnlTensorDescriptor_t c_desc, void *c)
{
    struct job *j;

    NN_ARMED("cnnlBatchMatMulBCast");
    if (!a_desc || !b_desc || !c_desc || c_desc->rank < 3 ||
        !mm_dims(a_desc, b_desc, c_desc, is_trans_a, is_trans_b))
        return CNNL_STATUS_BAD_PARAM;
    if (workspace_size < BMM_WORKSPACE || !workspace)
        return CNNL_STATUS_BAD_PARAM;
    if (!(j = job_new(J_BMM)))
        return CNNL_STATUS_ALLOC_FAILED;
    j->a = *a_desc;
    j->b = *b_desc;
    j->c = *c_desc;
    j->ap = a;
    j->bp = b;
    j->cp = c;
    j->ta = is_trans_a;
    j->tb = is_trans_b;
    j->ws = workspace;
    j->ws_n = workspace_size;
    return submit(handle, j);
}

/* ---- expand, cast -------------------------------------------------------- */

SI_API cnnlStatus_t cnnlExpand(cnnlHandle_t handle,
                               const cnnlTensorDescriptor_t input_desc,
                               const void *input,
                               const cnnlTensorDescriptor_t output_desc,
                               void *output)
{
    struct job *j;

    NN_ARMED("cnnlExpand");
    if (!input_desc || !output_desc || !input_desc->set ||
        !output_desc->set || input_desc->rank != output_desc->rank ||
        input_desc->dt != output_desc->dt)
        return CNNL_STATUS_BAD_PARAM;
    for (int i = 0; i < input_desc->rank; i++)
        if (input_desc->dims[i] != 1 &&
            input_desc->dims[i] != output_desc->dims[i])
            return CNNL_STATUS_BAD_PARAM;
    if (!(j = job_new(J_EXPAND)))
        return CNNL_STATUS_ALLOC_FAILED;
    j->a = *input_desc;
    j->c = *output_desc;
    j->ap = input;
    j->cp = output;
    return submit(handle, j);
}

SI_API cnnlStatus_t cnnlCastDataType(cnnlHandle_t handle,
                                     const cnnlTensorDescriptor_t input_desc,
                                     const void *input,
                                     const cnnlCastDataType_t cast_type,
                                     const cnnlTensorDescriptor_t output_desc,
                                     void *output)
{
    cnnlDataType_t from, to;
    struct job *j;

    NN_ARMED("cnnlCastDataType");
    switch (cast_type) {
    case CNNL_CAST_FLOAT_TO_HALF:
        from = CNNL_DTYPE_FLOAT, to = CNNL_DTYPE_HALF;
        break;
    case CNNL_CAST_HALF_TO_FLOAT:
        from = CNNL_DTYPE_HALF, to = CNNL_DTYPE_FLOAT;
        break;
    case CNNL_CAST_INT32_TO_FLOAT:
        from = CNNL_DTYPE_INT32, to = CNNL_DTYPE_FLOAT;
        break;
    case CNNL_CAST_INT32_TO_HALF:
        from = CNNL_DTYPE_INT32, to = CNNL_DTYPE_HALF;
        break;
    default:
        return CNNL_STATUS_BAD_PARAM;
    }
    if (!input_desc || !output_desc || !input_desc->set ||
        !output_desc->set || input_desc->dt != from ||
        output_desc->dt != to || input_desc->rank != output_desc->rank ||
        memcmp(input_desc->dims, output_desc->dims,
               (size_t)input_desc->rank * sizeof(int)))
        return CNNL_STATUS_BAD_PARAM;
    if (!(j = job_new(J_CAST)))
        return CNNL_STATUS_ALLOC_FAILED;
    j->a = *input_desc;
    j->c = *output_desc;
    j->ap = input;
    j->cp = output;
    return submit(handle, j);
}

/* ---- NHWC descriptors, transpose ------------------------------------------ */

/* Whether cnnlSetTensorDescriptor last set d as NHWC. */
static bool layout_nhwc(const struct cnnlTensorStruct *d)
{
    return d->nhwc;
}

SI_API cnnlStatus_t cnnlSetTensorDescriptor(cnnlTensorDescriptor_t desc,
                                            cnnlTensorLayout_t layout,
                                            cnnlDataType_t dtype, int dimNb,
                                            const int dimSize[])
{
    int s = 1;

    NN_ARMED("cnnlSetTensorDescriptor");
    if (!desc || dimNb < 1 || dimNb > 8 || !dimSize ||
        (layout != CNNL_LAYOUT_ARRAY && layout != MLU_CNNL_LAYOUT_NHWC) ||
        (layout == MLU_CNNL_LAYOUT_NHWC && dimNb != 4))
        return CNNL_STATUS_BAD_PARAM;
    if (dtype != CNNL_DTYPE_FLOAT && dtype != CNNL_DTYPE_HALF &&
        dtype != CNNL_DTYPE_INT32)
        return CNNL_STATUS_NOT_SUPPORTED;
    for (int i = dimNb - 1; i >= 0; i--) {
        if (dimSize[i] < 0)
            return CNNL_STATUS_BAD_PARAM;
        desc->dims[i] = dimSize[i];
        desc->strides[i] = s;
        s *= dimSize[i] > 0 ? dimSize[i] : 1;
    }
    desc->dt = dtype;
    desc->rank = dimNb;
    desc->set = true;
    desc->nhwc = layout == MLU_CNNL_LAYOUT_NHWC;
    return CNNL_STATUS_SUCCESS;
}

SI_API cnnlStatus_t cnnlCreateTransposeDescriptor(
    cnnlTransposeDescriptor_t *desc)
{
    if (!desc)
        return CNNL_STATUS_BAD_PARAM;
    *desc = calloc(1, sizeof(**desc));
    return *desc ? CNNL_STATUS_SUCCESS : CNNL_STATUS_ALLOC_FAILED;
}

SI_API cnnlStatus_t cnnlDestroyTransposeDescriptor(
    cnnlTransposeDescriptor_t desc)
{
    if (!desc)
        return CNNL_STATUS_BAD_PARAM;
    free(desc);
    return CNNL_STATUS_SUCCESS;
}

SI_API cnnlStatus_t cnnlSetTransposeDescriptor(cnnlTransposeDescriptor_t desc,
                                               const int dims,
                                               const int permute[])
{
    int seen = 0;

    if (!desc || dims < 1 || dims > 8 || !permute)
        return CNNL_STATUS_BAD_PARAM;
    for (int i = 0; i < dims; i++) {
        if (permute[i] < 0 || permute[i] >= dims || (seen >> permute[i]) & 1)
            return CNNL_STATUS_BAD_PARAM;
        seen |= 1 << permute[i];
        desc->perm[i] = permute[i];
    }
    desc->rank = dims;
    desc->set = true;
    return CNNL_STATUS_SUCCESS;
}

SI_API cnnlStatus_t cnnlGetTransposeWorkspaceSize(
    cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc,
    const cnnlTransposeDescriptor_t desc, size_t *size)
{
    NN_ARMED("cnnlGetTransposeWorkspaceSize");
    if (!handle || !x_desc || !x_desc->set || !desc || !desc->set || !size ||
        desc->rank != x_desc->rank)
        return CNNL_STATUS_BAD_PARAM;
    *size = 0;
    return CNNL_STATUS_SUCCESS;
}

SI_API cnnlStatus_t cnnlTranspose_v2(cnnlHandle_t handle,
                                     const cnnlTransposeDescriptor_t desc,
                                     const cnnlTensorDescriptor_t x_desc,
                                     const void *x,
                                     const cnnlTensorDescriptor_t y_desc,
                                     void *y, void *workspace,
                                     size_t workspace_size)
{
    struct job *j;

    (void)workspace;
    (void)workspace_size;
    NN_ARMED("cnnlTranspose_v2");
    if (!desc || !desc->set || !x_desc || !y_desc || !x_desc->set ||
        !y_desc->set || x_desc->rank != desc->rank ||
        y_desc->rank != desc->rank || x_desc->dt != y_desc->dt)
        return CNNL_STATUS_BAD_PARAM;
    for (int i = 0; i < desc->rank; i++)
        if (y_desc->dims[i] != x_desc->dims[desc->perm[i]])
            return CNNL_STATUS_BAD_PARAM;
    if (!(j = job_new(J_TRANSPOSE)))
        return CNNL_STATUS_ALLOC_FAILED;
    j->a = *x_desc;
    j->c = *y_desc;
    j->ap = x;
    j->cp = y;
    j->tr = *desc;
    return submit(handle, j);
}

/* ---- convolution --------------------------------------------------------- */

SI_API cnnlStatus_t cnnlCreateConvolutionDescriptor(
    cnnlConvolutionDescriptor_t *desc)
{
    if (!desc)
        return CNNL_STATUS_BAD_PARAM;
    *desc = calloc(1, sizeof(**desc));
    return *desc ? CNNL_STATUS_SUCCESS : CNNL_STATUS_ALLOC_FAILED;
}

SI_API cnnlStatus_t cnnlDestroyConvolutionDescriptor(
    cnnlConvolutionDescriptor_t desc)
{
    if (!desc)
        return CNNL_STATUS_BAD_PARAM;
    free(desc);
    return CNNL_STATUS_SUCCESS;
}

SI_API cnnlStatus_t cnnlSetConvolutionDescriptor(
    cnnlConvolutionDescriptor_t desc, int dimNb, const int pad[],
    const int stride[], const int dilation[], int group_count,
    cnnlDataType_t compute_type)
{
    if (!desc || dimNb != 4 || !pad || !stride || !dilation ||
        group_count < 1 || !is_float(compute_type))
        return CNNL_STATUS_BAD_PARAM;
    for (int i = 0; i < 4; i++)
        if (pad[i] < 0)
            return CNNL_STATUS_BAD_PARAM;
    for (int i = 0; i < 2; i++)
        if (stride[i] < 1 || dilation[i] < 1)
            return CNNL_STATUS_BAD_PARAM;
    memcpy(desc->pad, pad, sizeof(desc->pad));
    memcpy(desc->stride, stride, sizeof(desc->stride));
    memcpy(desc->dil, dilation, sizeof(desc->dil));
    desc->groups = group_count;
    desc->set = true;
    return CNNL_STATUS_SUCCESS;
}

/* x, w, y NHWC and consistent with the convolution's geometry. */
static bool conv_ok(const struct cnnlConvolutionStruct *g,
                    const struct cnnlTensorStruct *x,
                    const struct cnnlTensorStruct *w,
                    const struct cnnlTensorStruct *y)
{
    if (!g || !g->set || !x || !w || !y || !x->set || !w->set || !y->set ||
        !layout_nhwc(x) || !layout_nhwc(w) || !layout_nhwc(y) ||
        x->dt != w->dt || x->dt != y->dt || !is_float(x->dt))
        return false;
    if (x->dims[3] != w->dims[3] * g->groups || w->dims[0] % g->groups ||
        y->dims[0] != x->dims[0] || y->dims[3] != w->dims[0])
        return false;
    for (int i = 0; i < 2; i++) {
        long ek = (long)(w->dims[1 + i] - 1) * g->dil[i] + 1;
        long span = (long)x->dims[1 + i] + g->pad[2 * i] + g->pad[2 * i + 1];
        if (span < ek || y->dims[1 + i] != (span - ek) / g->stride[i] + 1)
            return false;
    }
    return true;
}

SI_API cnnlStatus_t cnnlGetConvolutionForwardAlgorithm(
    cnnlHandle_t handle, const cnnlConvolutionDescriptor_t conv_desc,
    const cnnlTensorDescriptor_t x_desc, const cnnlTensorDescriptor_t w_desc,
    const cnnlTensorDescriptor_t y_desc,
    const cnnlConvolutionFwdPreference_t preference,
    cnnlConvolutionForwardAlgo_t *algo)
{
    NN_ARMED("cnnlGetConvolutionForwardAlgorithm");
    if (!handle || !algo || preference != CNNL_CONVOLUTION_FWD_FASTEST ||
        !conv_ok(conv_desc, x_desc, w_desc, y_desc))
        return CNNL_STATUS_BAD_PARAM;
    *algo = (cnnlConvolutionForwardAlgo_t)3; /* any value: passed back */
    return CNNL_STATUS_SUCCESS;
}

SI_API cnnlStatus_t cnnlGetConvolutionForwardWorkspaceSize(
    cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc,
    const cnnlTensorDescriptor_t w_desc, const cnnlTensorDescriptor_t y_desc,
    const cnnlTensorDescriptor_t bias_desc,
    const cnnlConvolutionDescriptor_t conv_desc,
    const cnnlConvolutionForwardAlgo_t algo, size_t *size)
{
    NN_ARMED("cnnlGetConvolutionForwardWorkspaceSize");
    if (!handle || !size || bias_desc || (int)algo != 3 ||
        !conv_ok(conv_desc, x_desc, w_desc, y_desc))
        return CNNL_STATUS_BAD_PARAM;
    *size = CONV_WORKSPACE;
    return CNNL_STATUS_SUCCESS;
}

/* Queue a convolution job (forward, backward data or backward filter):
 * a and b the inputs, c the output, alpha and beta as CNNL blends them. */
static cnnlStatus_t conv_submit(cnnlHandle_t handle, enum job_kind kind,
                                const struct cnnlTensorStruct *a,
                                const void *ap,
                                const struct cnnlTensorStruct *b,
                                const void *bp,
                                const struct cnnlTensorStruct *c, void *cp,
                                const struct cnnlConvolutionStruct *cv,
                                void *workspace, size_t workspace_size,
                                const void *alpha, const void *beta)
{
    struct job *j = job_new(kind);

    if (!j)
        return CNNL_STATUS_ALLOC_FAILED;
    j->a = *a;
    j->b = *b;
    j->c = *c;
    j->ap = ap;
    j->bp = bp;
    j->cp = cp;
    j->cv = *cv;
    j->ws = workspace;
    j->ws_n = workspace_size;
    j->alpha = alpha ? *(const float *)alpha : 1.0;
    j->beta = beta ? *(const float *)beta : 0.0;
    return submit(handle, j);
}

SI_API cnnlStatus_t cnnlConvolutionForward(
    cnnlHandle_t handle, const cnnlConvolutionDescriptor_t conv_desc,
    cnnlConvolutionForwardAlgo_t algo, const void *alpha,
    const cnnlTensorDescriptor_t x_desc, const void *x,
    const cnnlTensorDescriptor_t w_desc, const void *w,
    const cnnlTensorDescriptor_t bias_desc, const void *bias,
    void *workspace, size_t workspace_size, const void *beta,
    const cnnlTensorDescriptor_t y_desc, void *y)
{
    NN_ARMED("cnnlConvolutionForward");
    if ((int)algo != 3 || bias_desc || bias ||
        !conv_ok(conv_desc, x_desc, w_desc, y_desc))
        return CNNL_STATUS_BAD_PARAM;
    if (workspace_size < CONV_WORKSPACE || !workspace)
        return CNNL_STATUS_BAD_PARAM;
    return conv_submit(handle, J_CONV, x_desc, x, w_desc, w,
                       y_desc, y, conv_desc, workspace, workspace_size,
                       alpha, beta);
}

/* ---- convolution gradients, fill ----------------------------------------- */

SI_API cnnlStatus_t cnnlGetConvolutionBackwardDataAlgorithm(
    cnnlHandle_t handle, const cnnlTensorDescriptor_t w_desc,
    const cnnlTensorDescriptor_t dy_desc,
    const cnnlConvolutionDescriptor_t conv_desc,
    const cnnlTensorDescriptor_t dx_desc,
    const cnnlConvolutionBwdDataPreference_t preference,
    cnnlConvolutionBwdDataAlgo_t *algo)
{
    NN_ARMED("cnnlGetConvolutionBackwardDataAlgorithm");
    if (!handle || !algo || preference != CNNL_CONVOLUTION_BWD_DATA_FASTEST ||
        !conv_ok(conv_desc, dx_desc, w_desc, dy_desc))
        return CNNL_STATUS_BAD_PARAM;
    *algo = (cnnlConvolutionBwdDataAlgo_t)5;
    return CNNL_STATUS_SUCCESS;
}

SI_API cnnlStatus_t cnnlGetConvolutionBackwardDataWorkspaceSize(
    cnnlHandle_t handle, const cnnlTensorDescriptor_t w_desc,
    const cnnlTensorDescriptor_t dy_desc,
    const cnnlConvolutionDescriptor_t conv_desc,
    const cnnlTensorDescriptor_t dx_desc,
    const cnnlConvolutionBwdDataAlgo_t algo, size_t *size)
{
    NN_ARMED("cnnlGetConvolutionBackwardDataWorkspaceSize");
    if (!handle || !size || (int)algo != 5 ||
        !conv_ok(conv_desc, dx_desc, w_desc, dy_desc))
        return CNNL_STATUS_BAD_PARAM;
    *size = CONV_WORKSPACE;
    return CNNL_STATUS_SUCCESS;
}

SI_API cnnlStatus_t cnnlConvolutionBackwardData(
    cnnlHandle_t handle, const void *alpha,
    const cnnlTensorDescriptor_t w_desc, const void *w,
    const cnnlTensorDescriptor_t dy_desc, const void *dy,
    const cnnlConvolutionDescriptor_t conv_desc,
    const cnnlConvolutionBwdDataAlgo_t algo, void *workspace,
    size_t workspace_size, const void *beta,
    const cnnlTensorDescriptor_t dx_desc, void *dx)
{
    NN_ARMED("cnnlConvolutionBackwardData");
    if ((int)algo != 5 || !conv_ok(conv_desc, dx_desc, w_desc, dy_desc) ||
        workspace_size < CONV_WORKSPACE || !workspace)
        return CNNL_STATUS_BAD_PARAM;
    return conv_submit(handle, J_BWD_DATA, dy_desc, dy, w_desc, w,
                       dx_desc, dx, conv_desc, workspace, workspace_size,
                       alpha, beta);
}

SI_API cnnlStatus_t cnnlGetConvolutionBackwardFilterAlgorithm(
    cnnlHandle_t handle, const cnnlConvolutionDescriptor_t conv_desc,
    const cnnlTensorDescriptor_t x_desc, const cnnlTensorDescriptor_t dy_desc,
    const cnnlTensorDescriptor_t dw_desc,
    const cnnlConvolutionBwdFilterPreference_t preference,
    cnnlConvolutionBwdFilterAlgo_t *algo)
{
    NN_ARMED("cnnlGetConvolutionBackwardFilterAlgorithm");
    if (!handle || !algo ||
        preference != CNNL_CONVOLUTION_BWD_FILTER_FASTEST ||
        !conv_ok(conv_desc, x_desc, dw_desc, dy_desc))
        return CNNL_STATUS_BAD_PARAM;
    *algo = (cnnlConvolutionBwdFilterAlgo_t)6;
    return CNNL_STATUS_SUCCESS;
}

SI_API cnnlStatus_t cnnlGetConvolutionBackwardFilterWorkspaceSize(
    cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc,
    const cnnlTensorDescriptor_t dy_desc,
    const cnnlTensorDescriptor_t dw_desc,
    const cnnlConvolutionDescriptor_t conv_desc,
    const cnnlConvolutionBwdFilterAlgo_t algo, size_t *size)
{
    NN_ARMED("cnnlGetConvolutionBackwardFilterWorkspaceSize");
    if (!handle || !size || (int)algo != 6 ||
        !conv_ok(conv_desc, x_desc, dw_desc, dy_desc))
        return CNNL_STATUS_BAD_PARAM;
    *size = CONV_WORKSPACE;
    return CNNL_STATUS_SUCCESS;
}

SI_API cnnlStatus_t cnnlConvolutionBackwardFilter(
    cnnlHandle_t handle, const void *alpha,
    const cnnlTensorDescriptor_t x_desc, const void *x,
    const cnnlTensorDescriptor_t dy_desc, const void *dy,
    const cnnlConvolutionDescriptor_t conv_desc,
    const cnnlConvolutionBwdFilterAlgo_t algo, void *workspace,
    size_t workspace_size, const void *beta,
    const cnnlTensorDescriptor_t dw_desc, void *dw)
{
    NN_ARMED("cnnlConvolutionBackwardFilter");
    if ((int)algo != 6 || !conv_ok(conv_desc, x_desc, dw_desc, dy_desc) ||
        workspace_size < CONV_WORKSPACE || !workspace)
        return CNNL_STATUS_BAD_PARAM;
    return conv_submit(handle, J_BWD_FILTER, x_desc, x, dy_desc, dy,
                       dw_desc, dw, conv_desc, workspace, workspace_size,
                       alpha, beta);
}

SI_API cnnlStatus_t cnnlFill(cnnlHandle_t handle, float value,
                             const cnnlTensorDescriptor_t output_desc,
                             void *output)
{
    struct job *j;

    NN_ARMED("cnnlFill");
    if (!output_desc || !output_desc->set)
        return CNNL_STATUS_BAD_PARAM;
    if (!(j = job_new(J_FILL)))
        return CNNL_STATUS_ALLOC_FAILED;
    j->a = *output_desc;
    j->c = *output_desc;
    j->cp = output;
    j->value = value;
    return submit(handle, j);
}

/* ---- pooling ------------------------------------------------------------- */

SI_API cnnlStatus_t cnnlCreatePoolingDescriptor(cnnlPoolingDescriptor_t *desc)
{
    if (!desc)
        return CNNL_STATUS_BAD_PARAM;
    *desc = calloc(1, sizeof(**desc));
    return *desc ? CNNL_STATUS_SUCCESS : CNNL_STATUS_ALLOC_FAILED;
}

SI_API cnnlStatus_t cnnlDestroyPoolingDescriptor(cnnlPoolingDescriptor_t desc)
{
    if (!desc)
        return CNNL_STATUS_BAD_PARAM;
    free(desc);
    return CNNL_STATUS_SUCCESS;
}

SI_API cnnlStatus_t cnnlSetPooling2dDescriptor(
    cnnlPoolingDescriptor_t desc, cnnlPoolingMode_t mode,
    cnnlNanPropagation_t nan, int window_height, int window_width,
    int top_padding, int bottom_padding, int left_padding, int right_padding,
    int vertical_stride, int horizon_stride)
{
    (void)nan;
    if (!desc ||
        (mode != CNNL_POOLING_AVERAGE_COUNT_INCLUDE_PADDING &&
         mode != CNNL_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING) ||
        window_height < 1 || window_width < 1 || top_padding < 0 ||
        bottom_padding < 0 || left_padding < 0 || right_padding < 0 ||
        vertical_stride < 1 || horizon_stride < 1)
        return CNNL_STATUS_BAD_PARAM;
    desc->mode = mode;
    desc->kh = window_height;
    desc->kw = window_width;
    desc->pad[0] = top_padding;
    desc->pad[1] = bottom_padding;
    desc->pad[2] = left_padding;
    desc->pad[3] = right_padding;
    desc->sh = vertical_stride;
    desc->sw = horizon_stride;
    desc->set = true;
    return CNNL_STATUS_SUCCESS;
}

SI_API cnnlStatus_t cnnlGetPoolingWorkspaceSize(cnnlHandle_t handle,
                                                cnnlPoolingMode_t mode,
                                                int output_w, int output_h,
                                                size_t *size)
{
    NN_ARMED("cnnlGetPoolingWorkspaceSize");
    (void)mode;
    if (!handle || !size || output_w < 0 || output_h < 0)
        return CNNL_STATUS_BAD_PARAM;
    *size = POOL_WORKSPACE;
    return CNNL_STATUS_SUCCESS;
}

SI_API cnnlStatus_t cnnlPoolingForward(cnnlHandle_t handle,
                                       const cnnlPoolingDescriptor_t desc,
                                       const void *alpha,
                                       const cnnlTensorDescriptor_t x_desc,
                                       const void *x, const void *beta,
                                       const cnnlTensorDescriptor_t y_desc,
                                       void *y, void *workspace,
                                       size_t workspace_size)
{
    struct job *j;

    NN_ARMED("cnnlPoolingForward");
    if (!desc || !desc->set || !x_desc || !y_desc || !x_desc->set ||
        !y_desc->set || !layout_nhwc(x_desc) || !layout_nhwc(y_desc) ||
        x_desc->dt != y_desc->dt || !is_float(x_desc->dt) ||
        y_desc->dims[0] != x_desc->dims[0] ||
        y_desc->dims[3] != x_desc->dims[3] ||
        y_desc->dims[1] != (x_desc->dims[1] + desc->pad[0] + desc->pad[1] -
                            desc->kh) / desc->sh + 1 ||
        y_desc->dims[2] != (x_desc->dims[2] + desc->pad[2] + desc->pad[3] -
                            desc->kw) / desc->sw + 1)
        return CNNL_STATUS_BAD_PARAM;
    if (workspace_size < POOL_WORKSPACE || !workspace)
        return CNNL_STATUS_BAD_PARAM;
    if (!(j = job_new(J_POOL)))
        return CNNL_STATUS_ALLOC_FAILED;
    j->a = *x_desc;
    j->c = *y_desc;
    j->ap = x;
    j->cp = y;
    j->pl = *desc;
    j->ws = workspace;
    j->ws_n = workspace_size;
    j->alpha = alpha ? *(const float *)alpha : 1.0;
    j->beta = beta ? *(const float *)beta : 0.0;
    return submit(handle, j);
}

SI_API cnnlStatus_t cnnlPoolingBackward(
    cnnlHandle_t handle, const cnnlPoolingDescriptor_t desc,
    const void *alpha, const cnnlTensorDescriptor_t y_desc, const void *y,
    const cnnlTensorDescriptor_t diff_y_desc, const void *diff_y,
    const cnnlTensorDescriptor_t x_desc, const void *x, const void *beta,
    const cnnlTensorDescriptor_t diff_x_desc, void *diff_x)
{
    const struct cnnlTensorStruct *dy = diff_y_desc, *xd = x_desc;
    struct job *j;

    NN_ARMED("cnnlPoolingBackward");
    if (!desc || !desc->set || y_desc || y || !dy || !xd || !diff_x_desc ||
        !dy->set || !xd->set || !diff_x_desc->set || !layout_nhwc(dy) ||
        !layout_nhwc(xd) || !layout_nhwc(diff_x_desc) || xd->dt != dy->dt ||
        xd->dt != diff_x_desc->dt || !is_float(xd->dt) ||
        memcmp(xd->dims, diff_x_desc->dims, 4 * sizeof(int)) ||
        dy->dims[0] != xd->dims[0] || dy->dims[3] != xd->dims[3] ||
        dy->dims[1] != (xd->dims[1] + desc->pad[0] + desc->pad[1] -
                        desc->kh) / desc->sh + 1 ||
        dy->dims[2] != (xd->dims[2] + desc->pad[2] + desc->pad[3] -
                        desc->kw) / desc->sw + 1)
        return CNNL_STATUS_BAD_PARAM;
    if (!(j = job_new(J_POOL_BWD)))
        return CNNL_STATUS_ALLOC_FAILED;
    j->a = *dy;
    j->b = *xd;
    j->c = *diff_x_desc;
    j->ap = diff_y;
    j->bp = x;
    j->cp = diff_x;
    j->pl = *desc;
    j->alpha = alpha ? *(const float *)alpha : 1.0;
    j->beta = beta ? *(const float *)beta : 0.0;
    return submit(handle, j);
}
