/*
 * keel OpenCL C kernels — linalg family, host side (OpenCL C in
 * plugins/clkernels/linalg.cl): matmul and linear, and the GEMM the conv
 * family shares (okla_gemm).
 *
 * Both ops are one batched GEMM problem from the kit
 * (keel_kit_matmul_plan): out[b] (M x N, contiguous) = X[b] (M x K) *
 * Y[b] (K x N) (+ bias), X and Y given by element strides (matmul's
 * transposes and broadcasts arrive as strides). Batches that continue
 * the rows of X fold into M (keel_kit_matmul_merge_batches); the remaining
 * batch dims are merged where their strides allow.
 *
 * 1. The backend's BLAS (CLBlast: float32, float64) when both matrices are
 *    row- or column-major (keel_kit_mat_layout: a transposed view is a
 *    transpose flag and a leading dim, no copy), the batches form at most
 *    one strided batch (or a few of them), and K > 0; a bias is written
 *    into C first and the GEMM accumulates onto it (beta = 1).
 *    Not on CPU devices, where la_gemm16 below is faster, unless
 *    KEEL_OPENCL_BLAS=1; KEEL_OPENCL_BLAS=0 skips it everywhere (to test
 *    the kernels below; KEEL_OPENCL_GEMM=tiled also sends thin problems
 *    and CPU devices to the tiled one).
 * 2. Otherwise, or when the BLAS declines (NOT_SUPPORTED: no BLAS, no
 *    routine for the dtype), the program's own kernels (linalg.cl): on CPU
 *    devices for float32/float64 with B's columns unit-stride, la_gemm16
 *    (8 x 32 of C per work item, no barrier); else a 64 x 64 tiled GEMM,
 *    or one work item per 4 outputs (1 when M < 4)
 *    for thin problems and K = 0. They read any strides, so only more than two batch dims
 *    that do not merge need a packed copy (ok_contiguous_copy).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ok.h"
#include "okla.h"

/* ---- the GEMM shared with k_conv.c ---------------------------------------- */


static struct ok_arg okla_arg(const struct ok_launch *l,
                              const struct okla_mat *m)
{
    (void)l;
    if (m->m)
        return OK_MEM(m->m);
    return OK_BUF(l, m->p, m->bytes);
}

/* KEEL_OPENCL_GEMM=tiled or =gemm16: the tiled kernel, or la_gemm16 where
 * it applies, for every problem with K > 0, small ones too (so that the
 * conformance suite's shapes reach them). */
static const char *okla_force(void)
{
    const char *e = getenv("KEEL_OPENCL_GEMM");
    return e && (!strcmp(e, "tiled") || !strcmp(e, "gemm16")) ? e : NULL;
}

static bool okla_force_tiled(void)
{
    const char *e = okla_force();
    return e && !strcmp(e, "tiled");
}

/* Does the problem go to the thin kernel (a work item per 4 outputs)? */
static bool okla_thin(const struct okla_gemm *g)
{
    if (g->K > 0 && okla_force())
        return false;
    return g->K == 0 || g->M < 16 || g->N < 16 ||
           (double)g->M * (double)g->N < 4096.0;
}

keel_status okla_gemm(const struct ok_launch *l, const struct okla_gemm *g)
{
    struct ok_kdesc bt;
    char name[32];
    int64_t batches = 1;
    const char *sfx = ok_sfx(g->dt);

    if (g->M <= 0 || g->N <= 0)
        return KEEL_STATUS_OK;
    if (g->nb < 0 || g->nb > 2)
        return ok_fail(KEEL_STATUS_INTERNAL, "%s: %d GEMM batch dims", l->op,
                       g->nb);
    memset(&bt, 0, sizeof(bt));
    bt.ndim = g->nb;
    for (int d = 0; d < g->nb; d++) {
        if (g->bshape[d] <= 0)
            return KEEL_STATUS_OK;
        bt.shape[d] = g->bshape[d];
        bt.stride[d] = g->abs[d];
        bt.stride[2 + d] = g->bbs[d];
        bt.stride[4 + d] = g->cbs[d];
        bt.stride[6 + d] = g->sbs[d];
        batches *= g->bshape[d];
    }
    bt.shape[2] = g->aoff;
    bt.shape[3] = g->boff;
    bt.shape[4] = g->coff;
    bt.shape[5] = g->soff;
    int flags = (g->has_bias ? 1 : 0) | (g->accum ? 2 : 0);
    struct ok_arg args[] = {
        okla_arg(l, &g->a), okla_arg(l, &g->b), okla_arg(l, &g->c),
        g->has_bias ? okla_arg(l, &g->bias) : OK_BUF(l, 0, 0),
        OK_DESC(&bt), OK_I64(g->M), OK_I64(g->N), OK_I64(g->K),
        OK_I64(g->ars), OK_I64(g->acs), OK_I64(g->brs), OK_I64(g->bcs),
        OK_I64(g->ldc), OK_I64(g->bias_rs), OK_I64(g->bias_cs),
        OK_I32(flags),
    };
    int nargs = (int)(sizeof(args) / sizeof(args[0]));
    if (okla_thin(g)) {
        /* 4 rows per work item (linalg.cl), 1 when M < 4 */
        size_t gl[3] = {(size_t)g->N,
                        (size_t)(g->M >= 4 ? (g->M + 3) / 4 : g->M),
                        (size_t)batches};
        snprintf(name, sizeof(name), "la_gemv_%s", sfx);
        return ok_run_nd(l, name, 3, gl, NULL, args, nargs);
    }
    if (l->cpu && g->bcs == 1 && (g->dt == KEEL_F32 || g->dt == KEEL_F64) &&
        !okla_force_tiled()) {
        /* 8 x 32 of C per work item, no barrier (linalg.cl) */
        size_t g16[3] = {(size_t)((g->M + 7) / 8), (size_t)((g->N + 31) / 32),
                         (size_t)batches};
        snprintf(name, sizeof(name), "la_gemm16_%s", sfx);
        return ok_run_nd(l, name, 3, g16, NULL, args, nargs);
    }
    size_t gl[3] = {(size_t)((g->N + 63) / 64 * 16),
                    (size_t)((g->M + 63) / 64 * 16), (size_t)batches};
    size_t lo[3] = {16, 16, 1};
    snprintf(name, sizeof(name), "la_gemm_%s", sfx);
    return ok_run_nd(l, name, 3, gl, lo, args, nargs);
}

/* ---- matmul, linear ---------------------------------------------------------- */

/* KEEL_OPENCL_BLAS=1: the BLAS always, =0: never; unset: on every device
 * but CPUs, where the program's la_gemm16 kernel is the faster one (on
 * PoCL 3.1, 2 cores: 80-100 GFLOP/s against CLBlast's 15-18, f32
 * 1024-2048; docs/benchmarks.md). */
static bool blas_enabled(const struct ok_launch *l)
{
    const char *e = getenv("KEEL_OPENCL_BLAS");
    if (e && !strcmp(e, "0"))
        return false;
    if (e && !strcmp(e, "1"))
        return true;
    return !l->cpu;
}

/* The batch dims of a plan, size-1 dims dropped and neighbours merged
 * where X's, Y's and the output's strides all continue. */
struct mm_batch {
    int nb;
    int64_t shape[KEEL_MAX_DIMS];
    int64_t xs[KEEL_MAX_DIMS], ys[KEEL_MAX_DIMS], cs[KEEL_MAX_DIMS];
};

static void mm_batch_make(const keel_kit_matmul *p, struct mm_batch *b)
{
    int64_t cst[KEEL_MAX_DIMS], run = p->M * p->N;

    for (int d = p->nb - 1; d >= 0; d--) {
        cst[d] = run;
        run *= p->bshape[d];
    }
    b->nb = 0;
    for (int d = 0; d < p->nb; d++) {
        if (p->bshape[d] == 1)
            continue;
        if (b->nb > 0) {
            int k = b->nb - 1;
            if (b->xs[k] == p->xbs[d] * p->bshape[d] &&
                b->ys[k] == p->ybs[d] * p->bshape[d] &&
                b->cs[k] == cst[d] * p->bshape[d]) {
                b->shape[k] *= p->bshape[d];
                b->xs[k] = p->xbs[d];
                b->ys[k] = p->ybs[d];
                b->cs[k] = cst[d];
                continue;
            }
        }
        b->shape[b->nb] = p->bshape[d];
        b->xs[b->nb] = p->xbs[d];
        b->ys[b->nb] = p->ybs[d];
        b->cs[b->nb] = cst[d];
        b->nb++;
    }
}

/* A packed row-major copy of the batched matrix operand (batch dims of b,
 * then rows x cols with strides rs, cs) of tensor d. */
static keel_status mm_pack(const struct ok_launch *l,
                           const keel_tensor_desc *d, const struct mm_batch *b,
                           const int64_t *bs, int64_t rows, int64_t cols,
                           int64_t rs, int64_t cs, ok_mem *m)
{
    keel_tensor_desc v = *d;

    v.ndim = b->nb + 2;
    for (int i = 0; i < b->nb; i++) {
        v.shape[i] = b->shape[i];
        v.strides[i] = bs[i];
    }
    v.shape[b->nb] = rows;
    v.strides[b->nb] = rs;
    v.shape[b->nb + 1] = cols;
    v.strides[b->nb + 1] = cs;
    return ok_contiguous_copy(l, &v, m);
}

/* The BLAS route; NOT_SUPPORTED (nothing enqueued unless the bias was
 * written into the output, which the kernel route then overwrites) when
 * it does not apply. */
static keel_status mm_blas(const struct ok_launch *l, const keel_kernel_args *a,
                           const keel_kit_matmul *p, const struct mm_batch *b)
{
    const keel_tensor_desc *x = &a->inputs[0], *y = &a->inputs[1];
    const keel_tensor_desc *out = &a->outputs[0];
    keel_dtype dt = x->dtype;
    uint32_t es = keel_dtype_size(dt);
    int64_t lda, ldb, outer = 1, inner = 1;
    int la, lb;
    struct ok_gemm g;
    keel_status st;

    if (!blas_enabled(l) || (dt != KEEL_F32 && dt != KEEL_F64) || p->K == 0 ||
        !ok_backend_blas_name()[0])
        return KEEL_STATUS_NOT_SUPPORTED;
    if (p->M > INT_MAX || p->N > INT_MAX || p->K > INT_MAX || b->nb > 2)
        return KEEL_STATUS_NOT_SUPPORTED;
    la = keel_kit_mat_layout(p->M, p->K, p->xrs, p->xcs, INT_MAX, &lda);
    lb = keel_kit_mat_layout(p->K, p->N, p->yrs, p->ycs, INT_MAX, &ldb);
    if (la == KEEL_KIT_MAT_STRIDED || lb == KEEL_KIT_MAT_STRIDED)
        return KEEL_STATUS_NOT_SUPPORTED;
    if (b->nb >= 1)
        inner = b->shape[b->nb - 1];
    if (b->nb == 2)
        outer = b->shape[0];
    if (outer > 16)
        return KEEL_STATUS_NOT_SUPPORTED;
    /* CLBlast reads every batch at a + i * stride: no broadcast batch
     * (stride 0) and no overlapping ones. */
    if (inner > 1) {
        int k = b->nb - 1;
        if (b->xs[k] <= 0 || b->ys[k] <= 0)
            return KEEL_STATUS_NOT_SUPPORTED;
    }
    if (p->has_bias) {
        /* out = bias rows; the GEMM then adds onto it. */
        struct okla_gemm f;
        memset(&f, 0, sizeof(f));
        f.dt = dt;
        f.M = p->M * p->batches;
        f.N = p->N;
        f.K = 0;
        f.a = f.b = (struct okla_mat){0, 0, NULL};
        f.c = (struct okla_mat){out->data, ok_span_bytes(out), NULL};
        f.bias = (struct okla_mat){a->inputs[2].data,
                                   ok_span_bytes(&a->inputs[2]), NULL};
        f.has_bias = true;
        f.ldc = p->N;
        f.bias_cs = p->bs;
        st = okla_gemm(l, &f);
        if (st)
            return st;
    }
    memset(&g, 0, sizeof(g));
    g.dtype = dt;
    g.trans_a = la == KEEL_KIT_MAT_COL;
    g.trans_b = lb == KEEL_KIT_MAT_COL;
    g.m = p->M;
    g.n = p->N;
    g.k = p->K;
    g.batch = inner;
    g.alpha = 1.0;
    g.beta = p->has_bias ? 1.0 : 0.0;
    g.lda = lda;
    g.ldb = ldb;
    g.ldc = p->N;
    if (b->nb >= 1) {
        g.stride_a = b->xs[b->nb - 1];
        g.stride_b = b->ys[b->nb - 1];
        g.stride_c = b->cs[b->nb - 1];
    }
    for (int64_t o = 0; o < outer; o++) {
        int64_t xo = b->nb == 2 ? o * b->xs[0] : 0;
        int64_t yo = b->nb == 2 ? o * b->ys[0] : 0;
        int64_t co = b->nb == 2 ? o * b->cs[0] : 0;
        g.a = x->data + (keel_dptr)(xo * es);
        g.b = y->data + (keel_dptr)(yo * es);
        g.c = out->data + (keel_dptr)(co * es);
        st = ok_backend_gemm(l, &g);
        if (st == KEEL_STATUS_NOT_SUPPORTED && o > 0)
            return ok_fail(KEEL_STATUS_INTERNAL,
                           "%s: the BLAS took part of the batches", l->op);
        if (st)
            return st;
    }
    return KEEL_STATUS_OK;
}

static keel_status mm_run(const keel_kernel_args *a, int op, const char *name)
{
    struct ok_launch l;
    keel_kit_matmul p;
    keel_kit_msg msg;
    struct mm_batch b;
    struct okla_gemm g;
    ok_mem xm = NULL, ym = NULL;
    keel_status st;

    st = ok_begin(a, name, &l);
    if (st)
        return st;
    st = keel_kit_matmul_plan(op, a, &p, &msg);
    if (st)
        return ok_fail(st, "%s", msg.text);
    const keel_tensor_desc *x = &a->inputs[0], *y = &a->inputs[1];
    const keel_tensor_desc *out = &a->outputs[0];
    keel_dtype dt = x->dtype;
    if (dt == KEEL_F64 && !l.fp64)
        return ok_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: the device has no float64", name);
    if (keel_kit_numel(out) == 0)
        return KEEL_STATUS_OK;
    keel_kit_matmul_merge_batches(&p);
    mm_batch_make(&p, &b);

    st = mm_blas(&l, a, &p, &b);
    if (st != KEEL_STATUS_NOT_SUPPORTED)
        return st;

    memset(&g, 0, sizeof(g));
    g.dt = dt;
    g.M = p.M;
    g.N = p.N;
    g.K = p.K;
    g.a = (struct okla_mat){x->data, ok_span_bytes(x), NULL};
    g.b = (struct okla_mat){y->data, ok_span_bytes(y), NULL};
    g.c = (struct okla_mat){out->data, ok_span_bytes(out), NULL};
    g.ars = p.xrs;
    g.acs = p.xcs;
    g.brs = p.yrs;
    g.bcs = p.ycs;
    g.ldc = p.N;
    if (p.has_bias) {
        g.has_bias = true;
        g.bias = (struct okla_mat){a->inputs[2].data,
                                   ok_span_bytes(&a->inputs[2]), NULL};
        g.bias_cs = p.bs;
    }
    if (b.nb > 2) {
        /* Pack both operands: [batches, M, K] and [batches, K, N]. */
        if (p.K > 0) {
            st = mm_pack(&l, x, &b, b.xs, p.M, p.K, p.xrs, p.xcs, &xm);
            if (!st)
                st = mm_pack(&l, y, &b, b.ys, p.K, p.N, p.yrs, p.ycs, &ym);
            if (st) {
                ok_scratch_release(&l, xm);
                return st;
            }
            g.a = (struct okla_mat){0, 0, xm};
            g.b = (struct okla_mat){0, 0, ym};
        }
        g.ars = p.K;
        g.acs = 1;
        g.brs = p.N;
        g.bcs = 1;
        g.nb = 1;
        g.bshape[0] = p.batches;
        g.abs[0] = p.M * p.K;
        g.bbs[0] = p.K * p.N;
        g.cbs[0] = p.M * p.N;
    } else {
        g.nb = b.nb;
        for (int d = 0; d < b.nb; d++) {
            g.bshape[d] = b.shape[d];
            g.abs[d] = b.xs[d];
            g.bbs[d] = b.ys[d];
            g.cbs[d] = b.cs[d];
        }
    }
    st = okla_gemm(&l, &g);
    ok_scratch_release(&l, xm);
    ok_scratch_release(&l, ym);
    return st;
}

static keel_status k_matmul(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return mm_run(a, KEEL_OP_MATMUL, "matmul");
}

static keel_status k_linear(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return mm_run(a, KEEL_OP_LINEAR, "linear");
}

#define LA_FLOAT                                                             \
    (KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F64) |                   \
     KEEL_DTYPE_BIT(KEEL_F16) | KEEL_DTYPE_BIT(KEEL_BF16))

const struct ok_entry ok_kernels_linalg[] = {
    {"matmul", LA_FLOAT, k_matmul},
    {"linear", LA_FLOAT, k_linear},
    {NULL, 0, NULL},
};
