/*
 * keel GPU kernels (CUDA and HIP) — linalg: matmul, linear and
 * fused_linear.
 *
 * Both ops become one batched row-major GEMM problem (struct mm):
 *
 *   out[b] (M x N, contiguous) = A[b] (M x K) * B[b] (K x N) (+ bias row)
 *
 * with A and B given by element strides. The core has already applied
 * transpose_x/transpose_y, the 1-D promotions and batch broadcasting to the
 * descriptors (core/src/shape_linalg.c), so x is read as [B.., M, K] and y
 * as [B.., K, N]; linear is x [.., in] times weight [in, out] plus bias.
 *
 * Layouts. A matrix stored row-major (unit column stride) or column-major
 * (unit row stride: a transposed contiguous matrix) goes to the GEMM as it
 * is, with the transpose flag and leading dimension taken from its strides.
 * Batch dims must give each operand one uniform batch stride (0 for a
 * broadcast operand) for a single strided-batched call; an operand whose
 * matrix or batch strides do not fit is first packed into contiguous
 * scratch by a strided-copy kernel. When B is shared by every batch and
 * x's batch dims continue its rows, the batches merge into one tall GEMM.
 * The contiguous path allocates nothing and copies nothing.
 * Bias: the output is first filled with the bias rows and the GEMM runs
 * with beta = 1.
 *
 * fused_linear: linear's GEMM (bias included), then one elementwise
 * epilogue kernel over the output applying the activation (ck_act.cuh,
 * the activation ops' own code) in the output dtype.
 *
 * ckl_gemm (shared with k_conv.cu) picks the backend: the vendor BLAS
 * (cuBLAS, rocBLAS) or the plugin's own kernel; see ck_gemm.h.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck.cuh"
#include "ck_act.cuh"
#include "ck_gemm.h"


namespace {

bool fits_int(int64_t v)
{
    return v >= 0 && v <= INT_MAX;
}

/* ---- element kernels ----------------------------------------------------- */

template <class T> struct copy_op {
    __device__ void operator()(char *const *p, int64_t) const
    {
        *(T *)p[0] = *(const T *)p[1];
    }
};

/* out[i] = bias[(i % n) * bs] over `total` elements (same dtype: copies
 * bits of the element size). */
template <class T>
__global__ void bias_rows_kernel(T *out, const T *bias, int64_t bs,
                                 int64_t n, int64_t total)
{
    int64_t step = (int64_t)blockDim.x * gridDim.x;

    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         i < total; i += step)
        out[i] = bias[(i % n) * bs];
}

void bias_rows(const struct ck_launch *l, size_t es, void *out,
               const void *bias, int64_t bs, int64_t n, int64_t total)
{
    unsigned g = ck_grid(total, CK_BLOCK);

    if (total <= 0 || n <= 0)
        return;
    if (es == 2)
        bias_rows_kernel<uint16_t><<<g, CK_BLOCK, 0, l->stream>>>(
            (uint16_t *)out, (const uint16_t *)bias, bs, n, total);
    else if (es == 4)
        bias_rows_kernel<uint32_t><<<g, CK_BLOCK, 0, l->stream>>>(
            (uint32_t *)out, (const uint32_t *)bias, bs, n, total);
    else
        bias_rows_kernel<uint64_t><<<g, CK_BLOCK, 0, l->stream>>>(
            (uint64_t *)out, (const uint64_t *)bias, bs, n, total);
}

/* ---- the problem --------------------------------------------------------- */

struct mm {
    keel_kit_matmul g; /* shapes and element strides (keel/kit.h) */
    keel_dtype dt;
    const char *x, *y, *bias;
    char *out;
    int act; /* fused_linear's epilogue (KEEL_FUSED_ACT_NONE: none) */
    double alpha;
};

/* One batch stride for all batch dims (offset of batch b = b * *st), or
 * false. Size-1 dims do not count. */
bool batch_uniform(const struct mm *p, const int64_t *bst, int64_t *st)
{
    int64_t expect = -1;

    *st = 0;
    for (int d = p->g.nb - 1; d >= 0; d--) {
        if (p->g.bshape[d] == 1)
            continue;
        if (expect == -1)
            *st = bst[d];
        else if (bst[d] != expect)
            return false;
        expect = bst[d] * p->g.bshape[d];
    }
    return true;
}

/* A cuBLAS-ready operand. */
struct bop {
    const void *p;
    bool trans;
    int64_t ld, bstride;
    void *scratch; /* to free after the GEMM */
};

/* Copy batches x rows x cols (batch dims of p, strides bst/rs/cs) into
 * contiguous scratch. */
keel_status pack_operand(const struct ck_launch *l, const struct mm *p,
                         const char *src, const int64_t *bst, int64_t rows,
                         int64_t cols, int64_t rs, int64_t cs, struct bop *o)
{
    keel_tensor_desc sd, dd;
    const keel_tensor_desc *d[2] = {&dd, &sd};
    size_t es = keel_dtype_size(p->dt);
    int64_t n = p->g.batches * rows * cols, acc = 1;
    keel_status st;
    void *buf;

    memset(&sd, 0, sizeof(sd));
    sd.dtype = p->dt;
    sd.ndim = p->g.nb + 2;
    for (int i = 0; i < p->g.nb; i++) {
        sd.shape[i] = p->g.bshape[i];
        sd.strides[i] = bst[i];
    }
    sd.shape[p->g.nb] = rows;
    sd.strides[p->g.nb] = rs;
    sd.shape[p->g.nb + 1] = cols;
    sd.strides[p->g.nb + 1] = cs;
    sd.data = (keel_dptr)(uintptr_t)src;
    dd = sd;
    for (int i = dd.ndim - 1; i >= 0; i--) {
        dd.strides[i] = acc;
        acc *= dd.shape[i];
    }
    st = ck_scratch(l, (size_t)n * es, &buf);
    if (st)
        return st;
    dd.data = (keel_dptr)(uintptr_t)buf;
    ck_iter<2> it;
    ck_iter_make<2>(&it, d);
    if (es == 2)
        ck_for_each<2>(l, it, copy_op<uint16_t>());
    else if (es == 4)
        ck_for_each<2>(l, it, copy_op<uint32_t>());
    else
        ck_for_each<2>(l, it, copy_op<uint64_t>());
    o->p = buf;
    o->trans = false;
    o->ld = cols > 1 ? cols : 1;
    o->bstride = rows * cols;
    o->scratch = buf;
    return KEEL_STATUS_OK;
}

/* An operand as cuBLAS takes it, packing when the strides do not fit. */
keel_status mm_operand(const struct ck_launch *l, const struct mm *p,
                       const char *src, const int64_t *bst, int64_t rows,
                       int64_t cols, int64_t rs, int64_t cs, struct bop *o)
{
    int64_t ld, bstride = 0;
    int lay = keel_kit_mat_layout(rows, cols, rs, cs, INT_MAX, &ld);

    o->scratch = NULL;
    if (lay == KEEL_KIT_MAT_STRIDED || !batch_uniform(p, bst, &bstride))
        return pack_operand(l, p, src, bst, rows, cols, rs, cs, o);
    o->p = src;
    o->trans = lay == KEEL_KIT_MAT_COL;
    o->ld = ld;
    o->bstride = bstride;
    return KEEL_STATUS_OK;
}

keel_status mm_exec(const struct ck_launch *l, struct mm *p)
{
    size_t es = keel_dtype_size(p->dt);
    struct bop A, B;
    keel_status st;
    bool acc = false;
    const keel_kit_matmul *g = &p->g; /* merge_batches updates it */

    if (g->batches == 0 || g->M == 0 || g->N == 0)
        return ck_end(l);
    keel_kit_matmul_merge_batches(&p->g);
    if (p->bias) {
        bias_rows(l, es, p->out, p->bias, p->g.bs, p->g.N,
                  p->g.batches * p->g.M * p->g.N);
        acc = true;
    } else if (p->g.K == 0) {
        st = ck_check(cudaMemsetAsync(p->out, 0,
                                      (size_t)(g->batches * g->M * g->N) * es,
                                      l->stream),
                      l, "cudaMemsetAsync");
        if (st)
            return st;
    }
    if (p->g.K == 0) {
        st = ck_act_run(l, p->dt, p->act, p->alpha, p->out,
                        g->batches * g->M * g->N);
        return st ? st : ck_end(l);
    }
    st = mm_operand(l, p, p->x, g->xbs, g->M, g->K, g->xrs, g->xcs, &A);
    if (st)
        return st;
    st = mm_operand(l, p, p->y, g->ybs, g->K, g->N, g->yrs, g->ycs, &B);
    if (st) {
        ck_scratch_free(l, A.scratch);
        return st;
    }
    st = ckl_gemm(l, p->dt, p->dt, A.trans, B.trans, p->g.M, p->g.N, p->g.K,
                  A.p, A.ld, A.bstride, B.p, B.ld, B.bstride, acc, p->out,
                  p->g.N, p->g.M * p->g.N, p->g.batches);
    ck_scratch_free(l, A.scratch);
    ck_scratch_free(l, B.scratch);
    if (!st)
        st = ck_act_run(l, p->dt, p->act, p->alpha, p->out,
                        g->batches * g->M * g->N);
    if (st)
        return st;
    return ck_end(l);
}

/* ---- matmul, linear ------------------------------------------------------ */

/* The kit checked the launch (keel/kit.h); what is left is cuBLAS's int
 * dims. linear's batches may fold into M, so its rows count in full. */
keel_status mm_run(const keel_kernel_args *a, int op)
{
    const char *name = keel_kit_op_info(op)->name;
    struct ck_launch l;
    keel_status st = ck_begin(a, name, &l);
    keel_kit_msg m;
    struct mm p;

    if (st)
        return st;
    memset(&p, 0, sizeof(p));
    if ((st = keel_kit_matmul_plan(op, a, &p.g, &m)))
        return ck_fail(st, "%s", m.text);
    if (!fits_int(op != KEEL_OP_MATMUL ? p.g.M * p.g.batches : p.g.M) ||
        !fits_int(p.g.N) || !fits_int(p.g.K))
        return ck_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: a matrix dim exceeds the BLAS int range", name);
    p.dt = a->inputs[0].dtype;
    p.x = (const char *)(uintptr_t)a->inputs[0].data;
    p.y = (const char *)(uintptr_t)a->inputs[1].data;
    if (p.g.has_bias)
        p.bias = (const char *)(uintptr_t)a->inputs[2].data;
    p.out = (char *)(uintptr_t)a->outputs[0].data;
    p.act = KEEL_FUSED_ACT_NONE;
    if (op == KEEL_OP_FUSED_LINEAR)
        p.act = keel_kit_activation(a, &p.alpha); /* checked by ck_begin */
    return mm_exec(&l, &p);
}

keel_status k_matmul(void *, const keel_kernel_args *a)
{
    return mm_run(a, KEEL_OP_MATMUL);
}

keel_status k_linear(void *, const keel_kernel_args *a)
{
    return mm_run(a, KEEL_OP_LINEAR);
}

keel_status k_fused_linear(void *, const keel_kernel_args *a)
{
    return mm_run(a, KEEL_OP_FUSED_LINEAR);
}

} // namespace

/* ---- the shared GEMM ----------------------------------------------------- */

/*
 * Row-major C[b] (M x N, leading dim ldc) = op(A[b]) op(B[b]) (+ C[b] when
 * acc), b < batch, with batch strides sa/sb/sc in elements. ta: A is stored
 * K x M (lda >= M) instead of M x K (lda >= K); tb likewise for B. A and B
 * are of dtype dt; C of dt, or of float32 when dt is float16/bfloat16 and
 * cdt says so (float results for a later float computation).
 * Enqueued on l->stream; nothing is launched for an empty problem. K == 0
 * zeroes C (unless acc).
 */
/* ---- backend choice, made once --------------------------------------------- */

namespace {

bool g_use_vendor;
char g_backend[440];
pthread_once_t g_backend_once = PTHREAD_ONCE_INIT;

void backend_pick(void)
{
    const char *e = getenv("KEEL_GPU_GEMM"), *what = "";

    if (e && !strcmp(e, "native")) {
        snprintf(g_backend, sizeof(g_backend),
                 "plugin kernel (KEEL_GPU_GEMM=native)");
        return;
    }
    g_use_vendor = ckl_vendor_load(&what);
    if (g_use_vendor)
        snprintf(g_backend, sizeof(g_backend), "%s", what);
    else
        snprintf(g_backend, sizeof(g_backend), "plugin kernel (%.400s)", what);
}

} // namespace

bool ckl_vendor_ready(void)
{
    pthread_once(&g_backend_once, backend_pick);
    return g_use_vendor;
}

const char *ckl_gemm_backend(void)
{
    pthread_once(&g_backend_once, backend_pick);
    return g_backend;
}

keel_status ckl_gemm(CKL_GEMM_PARAMS)
{
    size_t ces = keel_dtype_size(cdt);
    keel_status st;

    if (M <= 0 || N <= 0 || batch <= 0)
        return KEEL_STATUS_OK;
    if (K <= 0) {
        if (acc)
            return KEEL_STATUS_OK;
        for (int64_t b = 0; b < batch; b++) {
            st = ck_check(cudaMemset2DAsync((char *)C + b * sc * ces,
                                            (size_t)ldc * ces, 0,
                                            (size_t)N * ces, (size_t)M,
                                            l->stream),
                          l, "cudaMemset2DAsync");
            if (st)
                return st;
        }
        return KEEL_STATUS_OK;
    }
    if (!fits_int(M) || !fits_int(N) || !fits_int(K) || !fits_int(lda) ||
        !fits_int(ldb) || !fits_int(ldc))
        return ck_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: a GEMM dim exceeds the BLAS int range", l->op);
    switch (dt) {
    case KEEL_F32:
    case KEEL_F64:
    case KEEL_F16:
    case KEEL_BF16:
        break;
    default:
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: GEMM on %s",
                       l->op, ck_dtype_name(dt));
    }
    if (cdt != dt && (cdt != KEEL_F32 || (dt != KEEL_F16 && dt != KEEL_BF16)))
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: GEMM of %s into %s",
                       l->op, ck_dtype_name(dt), ck_dtype_name(cdt));
    if (ckl_vendor_ready())
        return ckl_gemm_vendor(l, dt, cdt, ta, tb, M, N, K, A, lda, sa, B, ldb,
                               sb, acc, C, ldc, sc, batch);
    return ckl_gemm_native(l, dt, cdt, ta, tb, M, N, K, A, lda, sa, B, ldb,
                           sb, acc, C, ldc, sc, batch);
}

#if CK_HOST_PASS
extern "C" const struct ck_entry ck_kernels_linalg[] = {
    {"matmul", KEEL_DT_FLOAT, k_matmul},
    {"linear", KEEL_DT_FLOAT, k_linear},
    {"fused_linear", KEEL_DT_FLOAT, k_fused_linear},
    {NULL, 0, NULL},
};
#endif

