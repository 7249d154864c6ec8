/*
 * CPU kernels: matmul, linear and fused_linear, on OpenBLAS.
 *
 * Both ops become one "batched GEMM problem" (struct mm):
 *
 *   out[b] (M x N, contiguous) = A[b] (M x K) * B[b] (K x N) (+ bias row)
 *
 * with A and B given by element strides. The core's matmul shape rule has
 * already applied transpose_x/transpose_y, the 1-D promotions and the batch
 * broadcasting to the descriptors (see core/src/shape_linalg.c), so the
 * kernel reads x as [B..., M, K] and y as [B..., K, N] and never looks at
 * the transpose attributes. linear is x [..., in] times weight [in, out]
 * (shared by every row) plus bias.
 *
 * Operands: a matrix whose storage is row-major (unit column stride) or
 * column-major (unit row stride, i.e. a transposed contiguous matrix) goes
 * to BLAS as it is, with the transpose flag and leading dimension read from
 * its strides; anything else is packed into a contiguous workspace first.
 * When the weight is shared by every batch (linear, or a matmul whose y is
 * broadcast) and the batch dims of x collapse into its rows, the batches
 * merge into one tall GEMM.
 *
 * float16/bfloat16: operands are converted block-wise to float32 (rows or
 * columns at a time, F16C when available), multiplied with sgemm into a
 * float32 buffer, and the result converted back: all arithmetic in f32.
 *
 * Threads. OpenBLAS (pthread build) runs a GEMM single-threaded when
 * M * N * K <= 65536 * GEMM_MULTITHREAD_THRESHOLD (4 by default) and with
 * its own threads above that. So:
 *   - many small GEMMs (batched, each under that threshold): batches are
 *     shared out over the plugin's pool with cpu_parallel_for, one
 *     workspace slot per share; OpenBLAS stays single-threaded inside;
 *   - otherwise: batches run one after another on the calling thread and
 *     OpenBLAS threads each GEMM (unless OpenBLAS has one thread, when
 *     batches go over the pool whatever their size).
 * Its thread count is set once to the plugin's (KEEL_CPU_THREADS) unless
 * OPENBLAS_NUM_THREADS / GOTO_NUM_THREADS / OMP_NUM_THREADS is set, so the
 * two pools never oversubscribe the machine.
 *
 * fused_linear is linear with an epilogue: right after each batch's GEMM
 * (one BLAS call, exactly linear's, so that the sums are linear's bit for
 * bit), while that output is still in cache, the activation runs over it
 * in place (cpu_act_f32/_f64: the activation ops' own loops, over the
 * pool). float16/bfloat16 outputs are first rounded to their dtype in the
 * float32 buffer, so the activation reads what linear would have stored,
 * and the result is rounded once more on the way out, as the activation
 * op would round it. A batch is the whole tall GEMM when the batches
 * merge: the activation then follows the single GEMM over all rows.
 *
 * Workspace: taken with malloc at run time. Impls cannot fail, so when a
 * workspace cannot be had the op runs an allocation-free reference loop
 * (double accumulation, any layout) instead: slow but correct. Tests force
 * that path with KEEL_CPU_NO_WORKSPACE=1.
 */
#include <limits.h>
#include <stdlib.h>

#include "kblas.h"
#include "kern.h"

/* Shared with k_conv.c (declared there too). */
bool cpu_blas_single(double mnk);

/* MNK at or below which OpenBLAS runs a GEMM on one thread. */
#define GEMM_SMALL_MNK (65536.0 * 4.0)

/* ---- shared helpers ------------------------------------------------------ */

/* Does the BLAS run a GEMM of m*n*k multiply-adds on the calling thread
 * only? Then callers may run several at once over the plugin's pool. A
 * library without OpenBLAS's thread calls is taken to thread large GEMMs
 * itself. */
bool cpu_blas_single(double mnk)
{
    return mnk <= GEMM_SMALL_MNK ||
           (cpu_blas.get_threads && cpu_blas.get_threads() <= 1);
}

void *cpu_workspace(size_t bytes)
{
    const char *e = cpu_getenv("KEEL_CPU_NO_WORKSPACE");

    if (e && *e && strcmp(e, "0"))
        return NULL;
    return malloc(bytes ? bytes : 1);
}

/* ---- the problem --------------------------------------------------------- */

struct mm {
    keel_kit_matmul g; /* shapes and element strides (keel/kit.h) */
    keel_dtype dt;
    const char *x, *y, *bias;
    char *out;
    keel_fused_act act; /* fused_linear's epilogue (KEEL_FUSED_ACT_NONE: none) */
    double alpha;
};

/* ---- element conversion -------------------------------------------------- */

/* n elements, element stride `st`, of dtype dt (f32, f16 or bf16) -> f32. */
static void cvt_to_f32(float *dst, const char *src, keel_dtype dt, int64_t n,
                       int64_t st)
{
    const uint16_t *h = (const uint16_t *)src;
    const float *f = (const float *)src;

    if (st == 1) {
        if (dt == KEEL_F16)
            kf16_to_f32(h, dst, n);
        else if (dt == KEEL_BF16)
            kbf16_to_f32(h, dst, n);
        else
            memcpy(dst, f, (size_t)n * sizeof(float));
        return;
    }
    switch (dt) {
    case KEEL_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = cpu_f16_to_f32(h[i * st]);
        break;
    case KEEL_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)h[i * st] << 16;
            memcpy(&dst[i], &u, sizeof(float));
        }
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            dst[i] = f[i * st];
        break;
    }
}

static void cvt_to_f64(double *dst, const double *src, int64_t n, int64_t st)
{
    if (st == 1) {
        memcpy(dst, src, (size_t)n * sizeof(double));
        return;
    }
    for (int64_t i = 0; i < n; i++)
        dst[i] = src[i * st];
}

/* Pack a rows x cols matrix row-major into dst (f32 or f64 by dt). */
struct pack {
    void *dst;
    const char *src;
    keel_dtype dt;
    int64_t cols, rs, cs;
};

static void pack_part(void *ctx, int64_t r0, int64_t r1)
{
    const struct pack *k = ctx;
    int64_t es = keel_dtype_size(k->dt);

    for (int64_t r = r0; r < r1; r++) {
        const char *s = k->src + r * k->rs * es;
        if (k->dt == KEEL_F64)
            cvt_to_f64((double *)k->dst + r * k->cols, (const double *)s,
                       k->cols, k->cs);
        else
            cvt_to_f32((float *)k->dst + r * k->cols, s, k->dt, k->cols,
                       k->cs);
    }
}

static void pack_rows(void *dst, const char *src, keel_dtype dt, int64_t rows,
                      int64_t cols, int64_t rs, int64_t cs)
{
    struct pack k = {dst, src, dt, cols, rs, cs};
    int64_t grain = cols > 0 ? KGRAIN / cols : rows;

    cpu_parallel_for(rows, grain > 0 ? grain : 1, pack_part, &k);
}

/* f32 -> output dtype, contiguous, in parallel for large n. */
struct unpack {
    const float *src;
    void *dst;
    keel_dtype dt;
};

static void unpack_part(void *ctx, int64_t b, int64_t e)
{
    const struct unpack *u = ctx;

    if (u->dt == KEEL_F16)
        kf32_to_f16(u->src + b, (uint16_t *)u->dst + b, e - b);
    else
        kf32_to_bf16(u->src + b, (uint16_t *)u->dst + b, e - b);
}

static void unpack_f32(void *dst, keel_dtype dt, const float *src, int64_t n)
{
    struct unpack u = {src, dst, dt};

    cpu_parallel_for(n, KGRAIN, unpack_part, &u);
}

/* ---- one GEMM ------------------------------------------------------------ */

/* A BLAS-ready operand. */
struct bop {
    const void *p;
    bool trans;
    int64_t ld;
};

/* Layout of A and B and what each needs in workspace (elements). */
struct mm_plan {
    int lay_a, lay_b;
    int64_t lda, ldb;
    bool half;            /* f16/bf16: compute in f32 */
    size_t es;            /* compute element size */
    int64_t ws_a, ws_b, ws_c; /* per slot, in compute elements */
    int64_t ws_bias;          /* shared */
};

static void mm_plan_make(const struct mm *p, struct mm_plan *pl)
{
    pl->half = p->dt == KEEL_F16 || p->dt == KEEL_BF16;
    pl->es = p->dt == KEEL_F64 ? sizeof(double) : sizeof(float);
    pl->lay_a = keel_kit_mat_layout(p->g.M, p->g.K, p->g.xrs, p->g.xcs,
                                    INT_MAX, &pl->lda);
    pl->lay_b = keel_kit_mat_layout(p->g.K, p->g.N, p->g.yrs, p->g.ycs,
                                    INT_MAX, &pl->ldb);
    pl->ws_a = pl->half || pl->lay_a == KEEL_KIT_MAT_STRIDED ? p->g.M * p->g.K
                                                             : 0;
    pl->ws_b = pl->half || pl->lay_b == KEEL_KIT_MAT_STRIDED ? p->g.K * p->g.N
                                                             : 0;
    pl->ws_c = pl->half ? p->g.M * p->g.N : 0;
    pl->ws_bias = p->bias && (pl->half || p->g.bs != 1) ? p->g.N : 0;
}

/* Make a BLAS operand from a strided matrix, converting/packing into ws
 * when needed (a column-major matrix is converted column by column and
 * stays transposed). */
static struct bop mm_operand(const char *src, keel_dtype dt, int lay,
                             int64_t ld, int64_t rows, int64_t cols,
                             int64_t rs, int64_t cs, bool half, void *ws)
{
    struct bop o;

    if (!half && lay != KEEL_KIT_MAT_STRIDED) {
        o.p = src;
        o.trans = lay == KEEL_KIT_MAT_COL;
        o.ld = ld;
        return o;
    }
    if (lay == KEEL_KIT_MAT_COL) {
        pack_rows(ws, src, dt, cols, rows, cs, rs);
        o.trans = true;
        o.ld = rows > 1 ? rows : 1;
    } else {
        pack_rows(ws, src, dt, rows, cols, rs, cs);
        o.trans = false;
        o.ld = cols > 1 ? cols : 1;
    }
    o.p = ws;
    return o;
}

struct mm_run {
    const struct mm *p;
    const struct mm_plan *pl;
    const void *bias; /* compute dtype, contiguous, or NULL */
    char *ws;         /* slots * slot_bytes */
    size_t slot_bytes;
    int64_t slots;
};

static void mm_one(const struct mm_run *r, int64_t b, char *ws)
{
    const struct mm *p = r->p;
    const struct mm_plan *pl = r->pl;
    int64_t es = keel_dtype_size(p->dt), offx = 0, offy = 0, rem = b;
    int64_t M = p->g.M, N = p->g.N, K = p->g.K;
    char *wa = ws, *wb = wa + pl->ws_a * pl->es, *wc = wb + pl->ws_b * pl->es;
    char *c = pl->half ? wc : p->out + b * M * N * es;
    struct bop A, B;
    double beta = 0;

    for (int d = p->g.nb - 1; d >= 0; d--) {
        int64_t i = rem % p->g.bshape[d];
        rem /= p->g.bshape[d];
        offx += i * p->g.xbs[d];
        offy += i * p->g.ybs[d];
    }
    if (r->bias) {
        for (int64_t m = 0; m < M; m++)
            memcpy(c + m * N * pl->es, r->bias, (size_t)N * pl->es);
        beta = 1;
    } else if (K == 0) {
        memset(c, 0, (size_t)(M * N) * pl->es);
    }
    if (K > 0) {
        A = mm_operand(p->x + offx * es, p->dt, pl->lay_a, pl->lda, M, K,
                       p->g.xrs, p->g.xcs, pl->half, wa);
        B = mm_operand(p->y + offy * es, p->dt, pl->lay_b, pl->ldb, K, N,
                       p->g.yrs, p->g.ycs, pl->half, wb);
        if (p->dt == KEEL_F64)
            cpu_blas.dgemm(CblasRowMajor, A.trans ? CblasTrans : CblasNoTrans,
                           B.trans ? CblasTrans : CblasNoTrans, (int)M,
                           (int)N, (int)K, 1.0, A.p, (int)A.ld, B.p,
                           (int)B.ld, beta, (double *)c, (int)N);
        else
            cpu_blas.sgemm(CblasRowMajor, A.trans ? CblasTrans : CblasNoTrans,
                           B.trans ? CblasTrans : CblasNoTrans, (int)M,
                           (int)N, (int)K, 1.0f, A.p, (int)A.ld, B.p,
                           (int)B.ld, (float)beta, (float *)c, (int)N);
    }
    if (p->dt == KEEL_F64)
        cpu_act_f64(p->act, p->alpha, (double *)c, M * N);
    else
        cpu_act_f32(p->act, p->alpha, (float *)c, M * N, p->dt);
    if (pl->half)
        unpack_f32(p->out + b * M * N * es, p->dt, (const float *)c, M * N);
}

static void mm_slot(void *ctx, int64_t s0, int64_t s1)
{
    const struct mm_run *r = ctx;
    int64_t B = r->p->g.batches;

    for (int64_t s = s0; s < s1; s++) {
        int64_t b0 = B * s / r->slots, b1 = B * (s + 1) / r->slots;
        for (int64_t b = b0; b < b1; b++)
            mm_one(r, b, r->ws + (size_t)s * r->slot_bytes);
    }
}

/* Allocation-free reference: double accumulation, any layout. */
static void mm_direct(const struct mm *p)
{
    int64_t es = keel_dtype_size(p->dt);

    for (int64_t b = 0; b < p->g.batches; b++) {
        int64_t offx = 0, offy = 0, rem = b;
        for (int d = p->g.nb - 1; d >= 0; d--) {
            int64_t i = rem % p->g.bshape[d];
            rem /= p->g.bshape[d];
            offx += i * p->g.xbs[d];
            offy += i * p->g.ybs[d];
        }
        for (int64_t m = 0; m < p->g.M; m++)
            for (int64_t n = 0; n < p->g.N; n++) {
                double acc = p->bias ? kload(p->bias + n * p->g.bs * es, p->dt)
                                     : 0.0;
                /* Addresses formed inside the loop: with K = 0 the inputs
                 * are empty and may have no memory at all. */
                for (int64_t k = 0; k < p->g.K; k++)
                    acc += kload(p->x + (offx + m * p->g.xrs + k * p->g.xcs) *
                                            es,
                                 p->dt) *
                           kload(p->y + (offy + k * p->g.yrs + n * p->g.ycs) *
                                            es,
                                 p->dt);
                kstore(p->out + ((b * p->g.M + m) * p->g.N + n) * es, p->dt,
                       acc);
            }
    }
    cpu_act(p->act, p->alpha, p->dt, p->out,
            p->g.batches * p->g.M * p->g.N);
}

static void mm_exec(struct mm *p)
{
    struct mm_plan pl;
    struct mm_run r;
    size_t bias_bytes;
    char *ws;

    if (p->g.batches == 0 || p->g.M == 0 || p->g.N == 0)
        return;
    keel_kit_matmul_merge_batches(&p->g);
    mm_plan_make(p, &pl);
    r.p = p;
    r.pl = &pl;
    r.slots = 1;
    if (p->g.batches > 1 &&
        cpu_blas_single((double)p->g.M * (double)p->g.N * (double)p->g.K)) {
        r.slots = cpu_pool_threads();
        if (r.slots > p->g.batches)
            r.slots = p->g.batches;
    }
    r.slot_bytes = (size_t)(pl.ws_a + pl.ws_b + pl.ws_c) * pl.es;
    r.slot_bytes = (r.slot_bytes + 63) & ~(size_t)63;
    bias_bytes = (size_t)pl.ws_bias * pl.es;
    ws = cpu_workspace(r.slot_bytes * (size_t)r.slots + bias_bytes);
    if (!ws) {
        mm_direct(p);
        return;
    }
    r.ws = ws + bias_bytes;
    r.bias = p->bias;
    if (pl.ws_bias) {
        pack_rows(ws, p->bias, p->dt, 1, p->g.N, 0, p->g.bs);
        r.bias = ws;
    }
    cpu_parallel_for(r.slots, 1, mm_slot, &r);
    free(ws);
}

/* ---- matmul, linear ------------------------------------------------------ */

/* The kit checked the launch (keel/kit.h); what is left is the BLAS's int
 * dims. linear's batches may fold into M, so its rows count in full, as
 * do a matmul's when y is broadcast (then M grows the same way). */
static keel_status blas_range(const keel_kernel_args *a, int op)
{
    keel_kit_matmul g;
    keel_kit_msg m;
    keel_status st = keel_kit_matmul_plan(op, a, &g, &m);
    int64_t rows = op != KEEL_OP_MATMUL ? g.M * g.batches : g.M;

    if (st)
        return cpu_err(st, "%s", m.text);
    if (rows > INT_MAX || g.N > INT_MAX || g.K > INT_MAX)
        return cpu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: a matrix dim exceeds the BLAS int range",
                       keel_kit_op_info(op)->name);
    return KEEL_STATUS_OK;
}

static keel_status matmul_check(const keel_kernel_args *a)
{
    return blas_range(a, KEEL_OP_MATMUL);
}

static keel_status linear_check(const keel_kernel_args *a)
{
    return blas_range(a, KEEL_OP_LINEAR);
}

static void mm_impl(const struct kcall *k, int op)
{
    struct mm p;

    memset(&p, 0, sizeof(p));
    (void)keel_kit_matmul_plan(op, k->a, &p.g, NULL); /* checked above */
    p.dt = k->a->inputs[0].dtype;
    p.x = k->in[0];
    p.y = k->in[1];
    p.bias = p.g.has_bias ? k->in[2] : NULL;
    p.out = k->out[0];
    p.act = KEEL_FUSED_ACT_NONE;
    if (op == KEEL_OP_FUSED_LINEAR)
        p.act = (keel_fused_act)keel_kit_activation(k->a, &p.alpha); /* checked */
    mm_exec(&p);
}

static void matmul_impl(const struct kcall *k)
{
    mm_impl(k, KEEL_OP_MATMUL);
}

static void linear_impl(const struct kcall *k)
{
    mm_impl(k, KEEL_OP_LINEAR);
}

static keel_status fused_linear_check(const keel_kernel_args *a)
{
    return blas_range(a, KEEL_OP_FUSED_LINEAR);
}

static void fused_linear_impl(const struct kcall *k)
{
    mm_impl(k, KEEL_OP_FUSED_LINEAR);
}

KERNEL(k_matmul, "matmul", matmul_impl, matmul_check)
KERNEL(k_linear, "linear", linear_impl, linear_check)
KERNEL(k_fused_linear, "fused_linear", fused_linear_impl, fused_linear_check)

const struct cpu_kernel_entry cpu_kernels_linalg[] = {
    {"matmul", KEEL_DT_FLOAT, k_matmul},
    {"linear", KEEL_DT_FLOAT, k_linear},
    {"fused_linear", KEEL_DT_FLOAT, k_fused_linear},
    {NULL, 0, NULL},
};
