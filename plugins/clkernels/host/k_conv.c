/*
 * keel OpenCL C kernels — conv family, host side (OpenCL C in
 * plugins/clkernels/conv.cl, GEMMs in linalg.cl through okla_gemm).
 *
 * CONVOLUTION. Every conv op is made of three primitives over one conv2d
 * geometry (the kit's keel_kit_conv: big side [n, c, h, w], weight
 * [o, c/g, kh, kw], small side [n, o, oh, ow]):
 *
 *   fwd          y = conv(x, w) (+ bias)     im2col + GEMM W_g col
 *   bwd_data     dx = conv^T(dy, w) (+ bias) GEMM W_g^T dy + col2im
 *   bwd_filter   dw = sum_n dy col(x)^T      im2col + GEMM, the images
 *                                            of a chunk folded into K
 *
 *   conv2d                 fwd
 *   conv2d_grad            bwd_data (need_dx), bwd_filter, channel sum
 *   conv2d_transpose       bwd_data with x as dy
 *   conv2d_transpose_grad  dx = fwd(dout), dw = bwd_filter(dout, x)
 *
 * One GEMM launch covers every image of a chunk and every group (batch
 * dims [images, groups]). A 1x1 kernel with stride 1 and no padding reads
 * the image itself as the column matrix (fwd, bwd_data). The column
 * buffer is chunked over the images to stay under CV_COL_CAP bytes.
 *
 * Compute dtype: float32, float64 for float64. float16/bfloat16 inputs
 * are packed to float32 (cv_pack) and results rounded back once
 * (cv_unpack), as the CPU plugin computes them. float32/float64 inputs
 * are read in place through their strides, except a weight or dout whose
 * inner dims the GEMM cannot address with one stride: those are packed.
 *
 * POOLING: one work item per output (forward) or per dx element
 * (avg/adaptive grads: a gather in output order, so no atomics);
 * max_pool2d_grad one work item per plane, adding dout at the indices in
 * output order into a zeroed plane (float32 for the half dtypes).
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "ok.h"
#include "okla.h"



/* Column buffers above this are cut into chunks of images. */
#define CV_COL_CAP ((int64_t)256 << 20)

#define CV_MAXTMP 12

/* An operand in the compute dtype: buffer, base offset and strides
 * (elements; 4-D, or 1-D in s[0]). */
struct cv_t {
    struct okla_mat mat;
    int64_t base;
    int64_t s[4];
};

struct cv_job {
    struct ok_launch l;
    const char *op;
    keel_kit_conv k;
    keel_dtype dt, cdt;
    bool half;
    uint32_t ces;
    struct ok_kdesc g;
    ok_mem tmp[CV_MAXTMP];
    int ntmp;
};

static struct ok_arg cv_arg(const struct ok_launch *l, const struct okla_mat *m)
{
    (void)l;
    if (m->m)
        return OK_MEM(m->m);
    return OK_BUF(l, m->p, m->bytes);
}

static keel_status cv_scratch(struct cv_job *j, int64_t elems, ok_mem *m)
{
    keel_status st;

    *m = NULL;
    if (j->ntmp >= CV_MAXTMP)
        return ok_fail(KEEL_STATUS_INTERNAL, "%s: too many scratch buffers",
                       j->op);
    if (elems < 0 || (uint64_t)elems > SIZE_MAX / 8)
        return ok_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: a scratch buffer of %lld elements is too large",
                       j->op, (long long)elems);
    st = ok_scratch(&j->l, (size_t)(elems > 0 ? elems : 1) * j->ces, m);
    if (st == KEEL_STATUS_OUT_OF_MEMORY)
        /* even one image's columns do not fit the device: let the core
         * run the op elsewhere */
        return ok_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: no scratch buffer of %lld bytes on this device",
                       j->op, (long long)elems * j->ces);
    if (st)
        return st;
    j->tmp[j->ntmp++] = *m;
    return KEEL_STATUS_OK;
}

static void cv_release(struct cv_job *j)
{
    for (int i = 0; i < j->ntmp; i++)
        ok_scratch_release(&j->l, j->tmp[i]);
    j->ntmp = 0;
}

static void cv_contig_strides(const int64_t *shape, int nd, int64_t *s)
{
    int64_t run = 1;

    for (int i = nd - 1; i >= 0; i--) {
        s[i] = run;
        run *= shape[i] > 1 ? shape[i] : 1;
    }
}

/* dst (new scratch, compute dtype, contiguous) = the view (shape, strides
 * relative to base) of src, whose dtype is `sdt` (the job's dtype for a
 * tensor, the compute dtype for a packed operand). */
static keel_status cv_pack_view(struct cv_job *j, keel_dtype sdt,
                                const struct okla_mat *src, int64_t base,
                                int nd, const int64_t *shape,
                                const int64_t *strides, struct cv_t *out)
{
    struct ok_kdesc kd;
    int64_t n = 1;
    char name[32];
    ok_mem m;
    keel_status st;

    memset(&kd, 0, sizeof(kd));
    kd.ndim = nd;
    for (int i = 0; i < nd; i++) {
        kd.shape[i] = shape[i];
        kd.stride[i] = strides[i];
        n *= shape[i];
    }
    memset(out, 0, sizeof(*out));
    cv_contig_strides(shape, nd, out->s);
    st = cv_scratch(j, n, &m);
    if (st)
        return st;
    out->mat.m = m;
    snprintf(name, sizeof(name), "cv_pack_%s", ok_sfx(sdt));
    return OK_RUN(&j->l, name, n, cv_arg(&j->l, src), OK_I64(base),
                  OK_DESC(&kd), OK_MEM(m), OK_I64(n));
}

/* Input d as a compute operand: in place (float32/float64) or packed. */
static keel_status cv_in(struct cv_job *j, const keel_tensor_desc *d,
                         struct cv_t *t)
{
    struct okla_mat src = {d->data, ok_span_bytes(d), NULL};

    memset(t, 0, sizeof(*t));
    if (!j->half || keel_kit_numel(d) == 0) {
        t->mat = src;
        for (int i = 0; i < d->ndim && i < 4; i++)
            t->s[i] = d->strides[i];
        return KEEL_STATUS_OK;
    }
    return cv_pack_view(j, j->dt, &src, 0, d->ndim, d->shape, d->strides, t);
}

/* Are the inner dims [from, 4) of a 4-D operand addressable as one
 * unit-stride run? */
static bool cv_inner_dense(const int64_t *shape, const int64_t *s, int from)
{
    int64_t run = 1;

    for (int i = 3; i >= from; i--) {
        if (shape[i] != 1 && s[i] != run)
            return false;
        run *= shape[i];
    }
    return true;
}

/* Input d as a compute operand whose dims [from, 4) form a unit-stride
 * run (weight rows: from 1; image planes: from 2), packing when not. */
static keel_status cv_in_dense(struct cv_job *j, const keel_tensor_desc *d,
                               int from, struct cv_t *t)
{
    keel_status st = cv_in(j, d, t);
    struct cv_t p;

    if (st || keel_kit_numel(d) == 0 || cv_inner_dense(d->shape, t->s, from))
        return st;
    st = cv_pack_view(j, j->cdt, &t->mat, t->base, 4, d->shape, t->s, &p);
    if (!st)
        *t = p;
    return st;
}

/* Output d in the compute dtype: d itself, or a float32 scratch buffer
 * that cv_out_finish rounds into d. */
static keel_status cv_out(struct cv_job *j, const keel_tensor_desc *d,
                          struct cv_t *t)
{
    ok_mem m;
    keel_status st;

    memset(t, 0, sizeof(*t));
    cv_contig_strides(d->shape, d->ndim, t->s);
    if (!j->half) {
        t->mat = (struct okla_mat){d->data, ok_span_bytes(d), NULL};
        return KEEL_STATUS_OK;
    }
    st = cv_scratch(j, keel_kit_numel(d), &m);
    t->mat.m = m;
    return st;
}

static keel_status cv_out_finish(struct cv_job *j, const keel_tensor_desc *d,
                                 const struct cv_t *t)
{
    char name[32];
    int64_t n = keel_kit_numel(d);

    if (!j->half || n == 0)
        return KEEL_STATUS_OK;
    snprintf(name, sizeof(name), "cv_unpack_%s", ok_sfx(j->dt));
    return OK_RUN(&j->l, name, n, OK_MEM(t->mat.m), OK_T(&j->l, d),
                  OK_I64(n));
}

/* ---- the job ---------------------------------------------------------------- */

static keel_status cv_begin(struct cv_job *j, const keel_kernel_args *a,
                            const char *op, bool transpose,
                            const keel_tensor_desc *big,
                            const keel_tensor_desc *small)
{
    keel_kit_msg msg;
    keel_status st;
    int64_t t;

    memset(j, 0, sizeof(*j));
    j->op = op;
    st = ok_begin(a, op, &j->l);
    if (st)
        return st;
    st = keel_kit_conv_geometry(a, transpose, big, &a->inputs[1], small,
                                &j->k, &msg);
    if (st)
        return ok_fail(st, "%s", msg.text);
    j->dt = a->inputs[0].dtype;
    if (j->dt == KEEL_F64 && !j->l.fp64)
        return ok_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: the device has no float64", op);
    j->half = j->dt == KEEL_F16 || j->dt == KEEL_BF16;
    j->cdt = j->dt == KEEL_F64 ? KEEL_F64 : KEEL_F32;
    j->ces = keel_dtype_size(j->cdt);
    /* C * kh * kw (all groups) and times oh * ow must fit. */
    if (__builtin_mul_overflow(j->k.c, j->k.kh * j->k.kw, &t) ||
        __builtin_mul_overflow(t, j->k.oh * j->k.ow, &t))
        return ok_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: the column matrix of one image is too large", op);
    j->g.ndim = 8;
    j->g.shape[0] = j->k.n;
    j->g.shape[1] = j->k.c;
    j->g.shape[2] = j->k.h;
    j->g.shape[3] = j->k.w;
    j->g.shape[4] = j->k.o;
    j->g.shape[5] = j->k.oh;
    j->g.shape[6] = j->k.ow;
    j->g.shape[7] = j->k.groups;
    j->g.stride[0] = j->k.kh;
    j->g.stride[1] = j->k.kw;
    j->g.stride[2] = j->k.sh;
    j->g.stride[3] = j->k.sw;
    j->g.stride[4] = j->k.dh;
    j->g.stride[5] = j->k.dw;
    j->g.stride[6] = j->k.pad[0];
    j->g.stride[7] = j->k.pad[2];
    return KEEL_STATUS_OK;
}

static keel_status cv_end(struct cv_job *j, keel_status st)
{
    cv_release(j);
    return st;
}

static bool cv_is_1x1(const keel_kit_conv *k)
{
    return k->kh == 1 && k->kw == 1 && k->sh == 1 && k->sw == 1 &&
           !k->pad[0] && !k->pad[1] && !k->pad[2] && !k->pad[3] &&
           k->oh == k->h && k->ow == k->w;
}

/* Images per chunk whose columns (rows * oh*ow per image) stay under the
 * cap; at least 1. */
static int64_t cv_chunk(const struct cv_job *j, int64_t per_image)
{
    int64_t per, nc;

    if (__builtin_mul_overflow(per_image, (int64_t)j->ces, &per))
        per = INT64_MAX;
    if (per <= 0)
        return j->k.n > 0 ? j->k.n : 1;
    nc = CV_COL_CAP / per;
    if (nc < 1)
        nc = 1;
    return nc < j->k.n ? nc : j->k.n;
}

static keel_status cv_im2col(struct cv_job *j, const struct cv_t *x,
                             int64_t n0, int64_t cnt, int64_t cs_n,
                             int64_t cs_r, ok_mem col)
{
    const keel_kit_conv *k = &j->k;
    struct ok_kdesc xd;
    char name[32];
    size_t gl[3] = {(size_t)k->ow, (size_t)k->oh,
                    (size_t)(cnt * k->c * k->kh * k->kw)};

    memset(&xd, 0, sizeof(xd));
    xd.ndim = 4;
    for (int i = 0; i < 4; i++)
        xd.stride[i] = x->s[i];
    snprintf(name, sizeof(name), "cv_im2col_%s", ok_sfx(j->cdt));
    struct ok_arg args[] = {cv_arg(&j->l, &x->mat),
                            OK_I64(x->base + n0 * x->s[0]), OK_DESC(&xd),
                            OK_DESC(&j->g), OK_I64(cnt), OK_I64(cs_n),
                            OK_I64(cs_r), OK_MEM(col)};
    return ok_run_nd(&j->l, name, 3, gl, NULL, args,
                     (int)(sizeof(args) / sizeof(args[0])));
}

/* y (small side, contiguous) = conv(x (big side), w) (+ bias [o]). */
static keel_status cv_fwd(struct cv_job *j, const struct cv_t *x,
                          const struct cv_t *w, const struct cv_t *bias,
                          const struct cv_t *y)
{
    const keel_kit_conv *k = &j->k;
    int64_t ohw = k->oh * k->ow, ckk = k->cg * k->kh * k->kw;
    int64_t rows = k->c * k->kh * k->kw;
    struct okla_gemm g;
    keel_status st = KEEL_STATUS_OK;
    ok_mem col;

    if (k->n == 0 || k->o == 0 || ohw == 0)
        return KEEL_STATUS_OK;
    memset(&g, 0, sizeof(g));
    g.dt = j->cdt;
    g.M = k->og;
    g.N = ohw;
    g.K = ckk;
    g.a = w->mat;
    g.aoff = w->base;
    g.ars = w->s[0];
    g.acs = 1;
    g.c = y->mat;
    g.ldc = ohw;
    g.nb = 2;
    g.bshape[1] = k->groups;
    g.abs[0] = 0;
    g.abs[1] = k->og * w->s[0];
    g.cbs[0] = k->o * ohw;
    g.cbs[1] = k->og * ohw;
    if (bias) {
        g.has_bias = true;
        g.bias = bias->mat;
        g.soff = bias->base;
        g.bias_rs = bias->s[0];
        g.bias_cs = 0;
        g.sbs[1] = k->og * bias->s[0];
    }
    if (cv_is_1x1(k) && cv_inner_dense((int64_t[]){k->n, k->c, k->h, k->w},
                                       x->s, 2)) {
        g.b = x->mat;
        g.boff = x->base;
        g.brs = x->s[1];
        g.bcs = 1;
        g.bshape[0] = k->n;
        g.bbs[0] = x->s[0];
        g.bbs[1] = k->cg * x->s[1];
        return okla_gemm(&j->l, &g);
    }
    int64_t nc = cv_chunk(j, rows * ohw);
    st = cv_scratch(j, nc * rows * ohw, &col);
    if (st)
        return st;
    g.b = (struct okla_mat){0, 0, col};
    g.brs = ohw;
    g.bcs = 1;
    g.bbs[0] = rows * ohw;
    g.bbs[1] = ckk * ohw;
    for (int64_t n0 = 0; n0 < k->n && !st; n0 += nc) {
        int64_t cnt = k->n - n0 < nc ? k->n - n0 : nc;
        st = cv_im2col(j, x, n0, cnt, rows * ohw, ohw, col);
        if (st)
            break;
        g.bshape[0] = cnt;
        g.coff = y->base + n0 * k->o * ohw;
        st = okla_gemm(&j->l, &g);
    }
    return st;
}

/* dx (big side, contiguous) = conv^T(dy (small side, planes dense), w)
 * (+ bias [c]). */
static keel_status cv_bwd_data(struct cv_job *j, const struct cv_t *dy,
                               const struct cv_t *w, const struct cv_t *bias,
                               const struct cv_t *dx)
{
    const keel_kit_conv *k = &j->k;
    int64_t ohw = k->oh * k->ow, hw = k->h * k->w;
    int64_t ckk = k->cg * k->kh * k->kw, rows = k->c * k->kh * k->kw;
    struct okla_gemm g;
    char name[32];
    keel_status st = KEEL_STATUS_OK;
    ok_mem col;

    if (k->n == 0 || k->c == 0 || hw == 0)
        return KEEL_STATUS_OK;
    memset(&g, 0, sizeof(g));
    g.dt = j->cdt;
    g.M = ckk;
    g.N = ohw;
    g.K = k->og;
    g.a = w->mat;
    g.aoff = w->base;
    g.ars = 1;
    g.acs = w->s[0];
    g.b = dy->mat;
    g.brs = dy->s[1];
    g.bcs = 1;
    g.nb = 2;
    g.bshape[1] = k->groups;
    g.abs[1] = k->og * w->s[0];
    g.bbs[0] = dy->s[0];
    g.bbs[1] = k->og * dy->s[1];
    if (cv_is_1x1(k)) {
        /* dcol is dx itself: rows c of the group, columns the plane. */
        g.c = dx->mat;
        g.coff = dx->base;
        g.ldc = hw;
        g.cbs[0] = k->c * hw;
        g.cbs[1] = k->cg * hw;
        g.boff = dy->base;
        g.bshape[0] = k->n;
        if (bias) {
            g.has_bias = true;
            g.bias = bias->mat;
            g.soff = bias->base;
            g.bias_rs = bias->s[0];
            g.sbs[1] = k->cg * bias->s[0];
        }
        return okla_gemm(&j->l, &g);
    }
    int64_t nc = cv_chunk(j, rows * ohw);
    st = cv_scratch(j, nc * rows * ohw, &col);
    if (st)
        return st;
    g.c = (struct okla_mat){0, 0, col};
    g.ldc = ohw;
    g.cbs[0] = rows * ohw;
    g.cbs[1] = ckk * ohw;
    snprintf(name, sizeof(name), "cv_col2im_%s", ok_sfx(j->cdt));
    for (int64_t n0 = 0; n0 < k->n && !st; n0 += nc) {
        int64_t cnt = k->n - n0 < nc ? k->n - n0 : nc;
        g.bshape[0] = cnt;
        g.boff = dy->base + n0 * dy->s[0];
        st = okla_gemm(&j->l, &g);
        if (st)
            break;
        size_t gl[3] = {(size_t)k->w, (size_t)k->h, (size_t)(cnt * k->c)};
        struct ok_arg args[] = {
            OK_MEM(col), OK_DESC(&j->g), OK_I64(cnt), OK_I64(rows * ohw),
            OK_I64(ohw),
            bias ? cv_arg(&j->l, &bias->mat) : OK_BUF(&j->l, 0, 0),
            OK_I64(bias ? bias->s[0] : 0), OK_I32(bias ? 1 : 0),
            cv_arg(&j->l, &dx->mat), OK_I64(dx->base + n0 * k->c * hw)};
        st = ok_run_nd(&j->l, name, 3, gl, NULL, args,
                       (int)(sizeof(args) / sizeof(args[0])));
    }
    return st;
}

/* dw [o, c/g * kh * kw] (contiguous) = sum over images of dy (small side)
 * times the columns of x (big side). */
static keel_status cv_bwd_filter(struct cv_job *j, const struct cv_t *x,
                                 const struct cv_t *dy, const struct cv_t *dw)
{
    const keel_kit_conv *k = &j->k;
    int64_t ohw = k->oh * k->ow, ckk = k->cg * k->kh * k->kw;
    int64_t rows = k->c * k->kh * k->kw;
    struct okla_gemm g;
    keel_status st = KEEL_STATUS_OK;
    ok_mem col;

    if (k->o == 0 || ckk == 0)
        return KEEL_STATUS_OK;
    memset(&g, 0, sizeof(g));
    g.dt = j->cdt;
    g.M = k->og;
    g.N = ckk;
    g.c = dw->mat;
    g.coff = dw->base;
    g.ldc = ckk;
    g.nb = 1;
    g.bshape[0] = k->groups;
    g.cbs[0] = k->og * ckk;
    if (k->n == 0 || ohw == 0) {
        g.K = 0; /* no terms: zeros */
        return okla_gemm(&j->l, &g);
    }
    int64_t per;
    if (__builtin_add_overflow(rows, k->o, &per) ||
        __builtin_mul_overflow(per, ohw, &per))
        return ok_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: the column matrix of one image is too large",
                       j->op);
    int64_t nc = cv_chunk(j, per); /* columns and the dout copy */
    st = cv_scratch(j, nc * rows * ohw, &col);
    if (st)
        return st;
    for (int64_t n0 = 0; n0 < k->n && !st; n0 += nc) {
        int64_t cnt = k->n - n0 < nc ? k->n - n0 : nc;
        int64_t kk = cnt * ohw;
        struct cv_t dyp;
        /* dy of the chunk as [o, images, oh, ow]: rows o, K = (image, p) */
        int64_t shp[4] = {k->o, cnt, k->oh, k->ow};
        int64_t str[4] = {dy->s[1], dy->s[0], dy->s[2], dy->s[3]};
        st = cv_pack_view(j, j->cdt, &dy->mat, dy->base + n0 * dy->s[0], 4,
                          shp, str, &dyp);
        if (!st)
            st = cv_im2col(j, x, n0, cnt, ohw, kk, col);
        if (st)
            break;
        g.K = kk;
        g.a = dyp.mat;
        g.ars = kk;
        g.acs = 1;
        g.abs[0] = k->og * kk;
        g.b = (struct okla_mat){0, 0, col};
        g.brs = 1;
        g.bcs = kk;
        g.bbs[0] = ckk * kk;
        g.accum = n0 > 0;
        st = okla_gemm(&j->l, &g);
        /* this chunk's dy copy is done with once enqueued */
        ok_scratch_release(&j->l, dyp.mat.m);
        j->ntmp--;
    }
    return st;
}

/* out [C] = sum of t ([N, C, H, W], descriptor d) over N, H, W. */
static keel_status cv_chsum(struct cv_job *j, const keel_tensor_desc *d,
                            const struct cv_t *t, const struct cv_t *out)
{
    struct ok_kdesc td;
    char name[32];

    if (d->shape[1] == 0)
        return KEEL_STATUS_OK;
    memset(&td, 0, sizeof(td));
    td.ndim = 4;
    for (int i = 0; i < 4; i++) {
        td.shape[i] = d->shape[i];
        td.stride[i] = t->s[i];
    }
    snprintf(name, sizeof(name), "cv_chsum_%s", ok_sfx(j->cdt));
    return ok_run_nd(&j->l, name, 1, (size_t[]){(size_t)d->shape[1] * 256},
                     (size_t[]){256},
                     (struct ok_arg[]){cv_arg(&j->l, &t->mat),
                                       OK_I64(t->base), OK_DESC(&td),
                                       cv_arg(&j->l, &out->mat)},
                     4);
}

/* ---- conv ops ------------------------------------------------------------------ */

static keel_status k_conv2d(void *kd, const keel_kernel_args *a)
{
    struct cv_job j;
    struct cv_t x, w, b, y;
    keel_status st;

    (void)kd;
    st = cv_begin(&j, a, "conv2d", false, &a->inputs[0], &a->outputs[0]);
    if (st || keel_kit_numel(&a->outputs[0]) == 0)
        return cv_end(&j, st);
    st = cv_in(&j, &a->inputs[0], &x);
    if (!st)
        st = cv_in_dense(&j, &a->inputs[1], 1, &w);
    if (!st && a->num_inputs == 3)
        st = cv_in(&j, &a->inputs[2], &b);
    if (!st)
        st = cv_out(&j, &a->outputs[0], &y);
    if (!st)
        st = cv_fwd(&j, &x, &w, a->num_inputs == 3 ? &b : NULL, &y);
    if (!st)
        st = cv_out_finish(&j, &a->outputs[0], &y);
    return cv_end(&j, st);
}

static keel_status k_conv2d_transpose(void *kd, const keel_kernel_args *a)
{
    struct cv_job j;
    struct cv_t x, w, b, y;
    keel_status st;

    (void)kd;
    st = cv_begin(&j, a, "conv2d_transpose", true, &a->outputs[0],
                  &a->inputs[0]);
    if (st || keel_kit_numel(&a->outputs[0]) == 0)
        return cv_end(&j, st);
    st = cv_in_dense(&j, &a->inputs[0], 2, &x);
    if (!st)
        st = cv_in_dense(&j, &a->inputs[1], 1, &w);
    if (!st && a->num_inputs == 3)
        st = cv_in(&j, &a->inputs[2], &b);
    if (!st)
        st = cv_out(&j, &a->outputs[0], &y);
    if (!st)
        st = cv_bwd_data(&j, &x, &w, a->num_inputs == 3 ? &b : NULL, &y);
    if (!st)
        st = cv_out_finish(&j, &a->outputs[0], &y);
    return cv_end(&j, st);
}

/* conv2d_grad (transpose false) and conv2d_transpose_grad: inputs (x, w,
 * dout), outputs (dx, dw[, db]). */
static keel_status cv_grad(const keel_kernel_args *a, bool transpose)
{
    const char *op = transpose ? "conv2d_transpose_grad" : "conv2d_grad";
    const keel_tensor_desc *xd = &a->inputs[0], *dd = &a->inputs[2];
    const keel_tensor_desc *dxd = &a->outputs[0], *dwd = &a->outputs[1];
    struct cv_job j;
    struct cv_t x, w, d, dx, dw, db;
    keel_status st;

    st = cv_begin(&j, a, op, transpose, transpose ? dd : xd,
                  transpose ? xd : dd);
    if (st)
        return cv_end(&j, st);
    bool need_dx = keel_kit_attr_i(a, "need_dx", 1) != 0;
    /* the small side operand of the GEMMs needs dense planes */
    st = cv_in_dense(&j, dd, transpose ? 4 : 2, &d);
    if (!st)
        st = cv_in(&j, xd, &x);
    if (!st)
        st = cv_in_dense(&j, &a->inputs[1], 1, &w);
    if (st)
        return cv_end(&j, st);
    if (need_dx && keel_kit_numel(dxd) > 0) {
        st = cv_out(&j, dxd, &dx);
        if (!st)
            st = transpose ? cv_fwd(&j, &d, &w, NULL, &dx)
                           : cv_bwd_data(&j, &d, &w, NULL, &dx);
        if (!st)
            st = cv_out_finish(&j, dxd, &dx);
    }
    if (!st && keel_kit_numel(dwd) > 0) {
        st = cv_out(&j, dwd, &dw);
        if (!st)
            st = transpose ? cv_bwd_filter(&j, &d, &x, &dw)
                           : cv_bwd_filter(&j, &x, &d, &dw);
        if (!st)
            st = cv_out_finish(&j, dwd, &dw);
    }
    if (!st && a->num_outputs == 3 && keel_kit_numel(&a->outputs[2]) > 0) {
        st = cv_out(&j, &a->outputs[2], &db);
        if (!st)
            st = cv_chsum(&j, dd, &d, &db);
        if (!st)
            st = cv_out_finish(&j, &a->outputs[2], &db);
    }
    return cv_end(&j, st);
}

static keel_status k_conv2d_grad(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return cv_grad(a, false);
}

static keel_status k_conv2d_transpose_grad(void *kd,
                                           const keel_kernel_args *a)
{
    (void)kd;
    return cv_grad(a, true);
}

/* ---- pooling ----------------------------------------------------------------- */

static keel_status pool_begin(const keel_kernel_args *a, const char *op,
                              int kind, const keel_tensor_desc *x,
                              const keel_tensor_desc *o, struct ok_launch *l,
                              struct ok_kdesc *pg)
{
    keel_kit_pool p;
    keel_kit_msg msg;
    keel_status st = ok_begin(a, op, l);

    if (st)
        return st;
    st = keel_kit_pool_geometry(a, kind, x, o, &p, &msg);
    if (st)
        return ok_fail(st, "%s", msg.text);
    if (x->dtype == KEEL_F64 && !l->fp64)
        return ok_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: the device has no float64", op);
    memset(pg, 0, sizeof(*pg));
    pg->ndim = 8;
    pg->shape[0] = p.n;
    pg->shape[1] = p.c;
    pg->shape[2] = p.h;
    pg->shape[3] = p.w;
    pg->shape[4] = p.oh;
    pg->shape[5] = p.ow;
    pg->shape[6] = p.kh;
    pg->shape[7] = p.kw;
    pg->stride[0] = p.sh;
    pg->stride[1] = p.sw;
    for (int i = 0; i < 4; i++)
        pg->stride[2 + i] = p.pad[i];
    pg->stride[6] = p.exclusive;
    pg->stride[7] = kind == KEEL_KIT_POOL_ADAPTIVE ? 2
                    : kind == KEEL_KIT_POOL_AVG    ? 1
                                                   : 0;
    return KEEL_STATUS_OK;
}

static keel_status pool_fwd(const keel_kernel_args *a, const char *op,
                            int kind)
{
    const keel_tensor_desc *x = &a->inputs[0], *out = &a->outputs[0];
    struct ok_launch l;
    struct ok_kdesc pg, xd;
    char name[32];
    int64_t total = keel_kit_numel(out);
    keel_status st = pool_begin(a, op, kind, x, out, &l, &pg);

    if (st || total == 0)
        return st;
    ok_kdesc_of(&xd, x);
    snprintf(name, sizeof(name), "cv_pool_%s", ok_sfx(x->dtype));
    return OK_RUN(&l, name, total, OK_T(&l, x), OK_DESC(&xd), OK_DESC(&pg),
                  OK_T(&l, out),
                  kind == KEEL_KIT_POOL_MAX ? OK_T(&l, &a->outputs[1])
                                            : OK_BUF(&l, 0, 0),
                  OK_I64(total));
}

static keel_status k_max_pool2d(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return pool_fwd(a, "max_pool2d", KEEL_KIT_POOL_MAX);
}

static keel_status k_avg_pool2d(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return pool_fwd(a, "avg_pool2d", KEEL_KIT_POOL_AVG);
}

static keel_status k_adaptive_avg_pool2d(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return pool_fwd(a, "adaptive_avg_pool2d", KEEL_KIT_POOL_ADAPTIVE);
}

static keel_status avg_grad(const keel_kernel_args *a, const char *op,
                            int kind)
{
    const keel_tensor_desc *x = &a->inputs[0], *d = &a->inputs[1];
    const keel_tensor_desc *dx = &a->outputs[0];
    struct ok_launch l;
    struct ok_kdesc pg, dd;
    char name[32];
    int64_t total = keel_kit_numel(dx);
    keel_status st = pool_begin(a, op, kind, x, d, &l, &pg);

    if (st || total == 0)
        return st;
    ok_kdesc_of(&dd, d);
    snprintf(name, sizeof(name), "cv_avg_grad_%s", ok_sfx(dx->dtype));
    return OK_RUN(&l, name, total, OK_T(&l, d), OK_DESC(&dd), OK_DESC(&pg),
                  OK_T(&l, dx), OK_I64(total));
}

static keel_status k_avg_pool2d_grad(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return avg_grad(a, "avg_pool2d_grad", KEEL_KIT_POOL_AVG);
}

static keel_status k_adaptive_avg_pool2d_grad(void *kd,
                                              const keel_kernel_args *a)
{
    (void)kd;
    return avg_grad(a, "adaptive_avg_pool2d_grad", KEEL_KIT_POOL_ADAPTIVE);
}

static keel_status k_max_pool2d_grad(void *kd, const keel_kernel_args *a)
{
    const keel_tensor_desc *x = &a->inputs[0], *idx = &a->inputs[1];
    const keel_tensor_desc *d = &a->inputs[2], *dx = &a->outputs[0];
    struct ok_launch l;
    struct ok_kdesc pg, dd, id;
    char name[32];
    int64_t total = keel_kit_numel(dx);
    bool half = dx->dtype == KEEL_F16 || dx->dtype == KEEL_BF16;
    ok_mem m = NULL;
    keel_status st;

    (void)kd;
    st = pool_begin(a, "max_pool2d_grad", KEEL_KIT_POOL_INDEXED, x, d, &l,
                    &pg);
    if (st || total == 0)
        return st;
    if (idx->dtype != KEEL_I64)
        return ok_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "max_pool2d_grad: indices must be int64");
    ok_kdesc_of(&dd, d);
    ok_kdesc_of(&id, idx);
    if (half) {
        st = ok_scratch(&l, (size_t)total * sizeof(float), &m);
        if (st)
            return st;
    }
    snprintf(name, sizeof(name), "cv_max_grad_%s", ok_sfx(dx->dtype));
    st = OK_RUN(&l, name, pg.shape[0] * pg.shape[1], OK_T(&l, d),
                OK_DESC(&dd), OK_T(&l, idx), OK_DESC(&id), OK_DESC(&pg),
                half ? OK_MEM(m) : OK_T(&l, dx),
                OK_I64(pg.shape[0] * pg.shape[1]));
    if (!st && half) {
        snprintf(name, sizeof(name), "cv_unpack_%s", ok_sfx(dx->dtype));
        st = OK_RUN(&l, name, total, OK_MEM(m), OK_T(&l, dx),
                    OK_I64(total));
    }
    ok_scratch_release(&l, m);
    return st;
}

#define CV_FLOAT                                                             \
    (KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F64) |                   \
     KEEL_DTYPE_BIT(KEEL_F16) | KEEL_DTYPE_BIT(KEEL_BF16))

const struct ok_entry ok_kernels_conv[] = {
    {"conv2d", CV_FLOAT, k_conv2d},
    {"conv2d_grad", CV_FLOAT, k_conv2d_grad},
    {"conv2d_transpose", CV_FLOAT, k_conv2d_transpose},
    {"conv2d_transpose_grad", CV_FLOAT, k_conv2d_transpose_grad},
    {"max_pool2d", CV_FLOAT, k_max_pool2d},
    {"max_pool2d_grad", CV_FLOAT, k_max_pool2d_grad},
    {"avg_pool2d", CV_FLOAT, k_avg_pool2d},
    {"avg_pool2d_grad", CV_FLOAT, k_avg_pool2d_grad},
    {"adaptive_avg_pool2d", CV_FLOAT, k_adaptive_avg_pool2d},
    {"adaptive_avg_pool2d_grad", CV_FLOAT, k_adaptive_avg_pool2d_grad},
    {NULL, 0, NULL},
};
