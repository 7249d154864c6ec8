/*
 * keel CUDA plugin — linalg kernels: matmul and linear, on cuBLAS.
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
 * (unit row stride: a transposed contiguous matrix) goes to cuBLAS as it
 * is, with the transpose flag and leading dimension taken from its strides.
 * Batch dims must give each operand one uniform batch stride (0 for a
 * broadcast operand) for a single strided-batched call; an operand whose
 * matrix or batch strides do not fit is first packed into contiguous
 * scratch by a strided-copy kernel. When B is shared by every batch and
 * x's batch dims continue its rows, the batches merge into one tall GEMM.
 * The contiguous path allocates nothing and copies nothing.
 *
 * cuBLAS is column-major: row-major C = A B is computed as the column-major
 * C^T = B^T A^T (ckl_gemm does the swap). Compute types: float32 in
 * CUBLAS_COMPUTE_32F (no TF32), float16/bfloat16 inputs and outputs with
 * float accumulation (tensor cores), float64 in CUBLAS_COMPUTE_64F.
 * Bias: the output is first filled with the bias rows and the GEMM runs
 * with beta = 1.
 *
 * Handles: one per device, created lazily the first time that device runs
 * a GEMM; cublasSetStream and the GEMM run under that device's mutex. The
 * handles live for the process. ckl_gemm is shared with k_conv.cu.
 *
 * cuBLAS is not linked: the first GEMM dlopens libcublas.so.<major> (the
 * major version of the headers built against, found through the plugin's
 * runpath) and resolves the seven entry points used here. Loading cuBLAS
 * maps and relocates cublasLt, about 150 MB of resident memory, which
 * every process that loads the plugin would otherwise pay at start-up,
 * with or without a GPU.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cublas_v2.h>

#include "ck.cuh"

/* Row-major batched GEMM shared with k_conv.cu (defined below). */
keel_status ckl_gemm(const struct ck_launch *l, keel_dtype dt,
                     keel_dtype cdt, bool ta, bool tb, int64_t M, int64_t N,
                     int64_t K, const void *A, int64_t lda, int64_t sa,
                     const void *B, int64_t ldb, int64_t sb, bool acc,
                     void *C, int64_t ldc, int64_t sc, int64_t batch);

namespace {

/* ---- cuBLAS, loaded on first use ----------------------------------------- */

#define LG_STR2(x) #x
#define LG_STR(x) LG_STR2(x)
#define LG_CUBLAS_SONAME "libcublas.so." LG_STR(CUBLAS_VER_MAJOR)

/* The C entry points (the header adds C++ overloads taking the legacy
 * cudaDataType compute type; the casts below pick the C ones and check
 * these signatures against the header). */
typedef cublasStatus_t (*gemm_fn)(cublasHandle_t, cublasOperation_t,
                                  cublasOperation_t, int, int, int,
                                  const void *, const void *, cudaDataType,
                                  int, const void *, cudaDataType, int,
                                  const void *, void *, cudaDataType, int,
                                  cublasComputeType_t, cublasGemmAlgo_t);
typedef cublasStatus_t (*gemm_batched_fn)(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
    const void *, const void *, cudaDataType, int, long long, const void *,
    cudaDataType, int, long long, const void *, void *, cudaDataType, int,
    long long, int, cublasComputeType_t, cublasGemmAlgo_t);
static_assert(static_cast<gemm_fn>(&cublasGemmEx) != nullptr, "GemmEx");
static_assert(static_cast<gemm_batched_fn>(&cublasGemmStridedBatchedEx) !=
                  nullptr,
              "GemmStridedBatchedEx");

struct cublas_api {
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    gemm_fn gemm;
    gemm_batched_fn gemm_batched;
    decltype(&cublasGetStatusName) status_name;
};

cublas_api g_cb;
bool g_cb_ok;
char g_cb_error[320];
pthread_once_t g_cb_once = PTHREAD_ONCE_INIT;

template <class F> bool cb_sym(void *h, const char *name, F *fp)
{
    void *p = dlsym(h, name);
    memcpy(fp, &p, sizeof(p));
    return p != nullptr;
}

void cublas_load(void)
{
    void *h = dlopen(LG_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    const char *missing = nullptr;

    if (!h) {
        const char *e = dlerror();
        snprintf(g_cb_error, sizeof(g_cb_error), "cannot load %s: %s",
                 LG_CUBLAS_SONAME, e ? e : "unknown error");
        return;
    }
    if (!cb_sym(h, "cublasCreate_v2", &g_cb.create))
        missing = "cublasCreate_v2";
    else if (!cb_sym(h, "cublasDestroy_v2", &g_cb.destroy))
        missing = "cublasDestroy_v2";
    else if (!cb_sym(h, "cublasSetStream_v2", &g_cb.set_stream))
        missing = "cublasSetStream_v2";
    else if (!cb_sym(h, "cublasSetMathMode", &g_cb.set_math_mode))
        missing = "cublasSetMathMode";
    else if (!cb_sym(h, "cublasGemmEx", &g_cb.gemm))
        missing = "cublasGemmEx";
    else if (!cb_sym(h, "cublasGemmStridedBatchedEx", &g_cb.gemm_batched))
        missing = "cublasGemmStridedBatchedEx";
    else if (!cb_sym(h, "cublasGetStatusName", &g_cb.status_name))
        missing = "cublasGetStatusName";
    if (missing) {
        snprintf(g_cb_error, sizeof(g_cb_error), "%s lacks %s",
                 LG_CUBLAS_SONAME, missing);
        dlclose(h);
        return;
    }
    g_cb_ok = true; /* h stays open for the process, like the handles */
}

/* ---- cuBLAS handles ------------------------------------------------------ */

#define LG_MAX_DEVICES 64

cublasHandle_t g_handle[LG_MAX_DEVICES];
pthread_mutex_t g_lock[LG_MAX_DEVICES];
pthread_once_t g_once = PTHREAD_ONCE_INIT;
const cublasMath_t math_mode = (cublasMath_t)(
    CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);

void locks_init(void)
{
    for (int i = 0; i < LG_MAX_DEVICES; i++)
        pthread_mutex_init(&g_lock[i], NULL);
}

keel_status blas_status(cublasStatus_t s, const struct ck_launch *l,
                        const char *what)
{
    keel_status st;

    if (s == CUBLAS_STATUS_SUCCESS)
        return KEEL_STATUS_OK;
    switch (s) {
    case CUBLAS_STATUS_ALLOC_FAILED: st = KEEL_STATUS_OUT_OF_MEMORY; break;
    case CUBLAS_STATUS_INVALID_VALUE: st = KEEL_STATUS_INVALID_ARGUMENT; break;
    case CUBLAS_STATUS_ARCH_MISMATCH:
    case CUBLAS_STATUS_NOT_SUPPORTED: st = KEEL_STATUS_NOT_SUPPORTED; break;
    case CUBLAS_STATUS_NOT_INITIALIZED:
        st = KEEL_STATUS_NOT_INITIALIZED;
        break;
    case CUBLAS_STATUS_EXECUTION_FAILED:
    case CUBLAS_STATUS_MAPPING_ERROR: st = KEEL_STATUS_DEVICE_ERROR; break;
    default: st = KEEL_STATUS_INTERNAL; break;
    }
    return ck_fail(st, "%s: %s failed: %s", l->op, what,
                   g_cb.status_name(s));
}

/* The device's handle, locked; release with handle_release. */
keel_status handle_acquire(const struct ck_launch *l, cublasHandle_t *h)
{
    int d = l->device;
    cublasStatus_t s;

    if (d < 0 || d >= LG_MAX_DEVICES)
        return ck_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: device %d beyond the cuBLAS handle table", l->op,
                       d);
    pthread_once(&g_cb_once, cublas_load);
    if (!g_cb_ok)
        return ck_fail(KEEL_STATUS_NOT_SUPPORTED, "%s: cuBLAS: %s", l->op,
                       g_cb_error);
    pthread_once(&g_once, locks_init);
    pthread_mutex_lock(&g_lock[d]);
    if (!g_handle[d]) {
        cublasHandle_t nh = NULL;

        /* ck_begin made device d current: the handle belongs to it. */
        s = g_cb.create(&nh);
        if (s != CUBLAS_STATUS_SUCCESS) {
            pthread_mutex_unlock(&g_lock[d]);
            return blas_status(s, l, "cublasCreate");
        }
        /* Default math: no TF32 for float32; half and bfloat16 GEMMs
         * keep float accumulation even in split-K reductions. */
        s = g_cb.set_math_mode(nh, math_mode);
        if (s != CUBLAS_STATUS_SUCCESS) {
            g_cb.destroy(nh);
            pthread_mutex_unlock(&g_lock[d]);
            return blas_status(s, l, "cublasSetMathMode");
        }
        g_handle[d] = nh;
    }
    s = g_cb.set_stream(g_handle[d], l->stream);
    if (s != CUBLAS_STATUS_SUCCESS) {
        pthread_mutex_unlock(&g_lock[d]);
        return blas_status(s, l, "cublasSetStream");
    }
    *h = g_handle[d];
    return KEEL_STATUS_OK;
}

void handle_release(const struct ck_launch *l)
{
    pthread_mutex_unlock(&g_lock[l->device]);
}

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
    if (p->g.K == 0)
        return ck_end(l);
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
    if (!fits_int(op == KEEL_OP_LINEAR ? p.g.M * p.g.batches : p.g.M) ||
        !fits_int(p.g.N) || !fits_int(p.g.K))
        return ck_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: a matrix dim exceeds the cuBLAS int range", name);
    p.dt = a->inputs[0].dtype;
    p.x = (const char *)(uintptr_t)a->inputs[0].data;
    p.y = (const char *)(uintptr_t)a->inputs[1].data;
    if (p.g.has_bias)
        p.bias = (const char *)(uintptr_t)a->inputs[2].data;
    p.out = (char *)(uintptr_t)a->outputs[0].data;
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
keel_status ckl_gemm(const struct ck_launch *l, keel_dtype dt,
                     keel_dtype cdt, bool ta, bool tb, int64_t M, int64_t N,
                     int64_t K, const void *A, int64_t lda, int64_t sa,
                     const void *B, int64_t ldb, int64_t sb, bool acc,
                     void *C, int64_t ldc, int64_t sc, int64_t batch)
{
    size_t es = keel_dtype_size(dt), ces = keel_dtype_size(cdt);
    cudaDataType_t ct, cct;
    cublasComputeType_t comp;
    float f1 = 1.0f, fb = acc ? 1.0f : 0.0f;
    double d1 = 1.0, db = acc ? 1.0 : 0.0;
    const void *alpha = &f1, *beta = &fb;
    cublasHandle_t h;
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
                       "%s: a GEMM dim exceeds the cuBLAS int range", l->op);
    switch (dt) {
    case KEEL_F32: ct = CUDA_R_32F; comp = CUBLAS_COMPUTE_32F; break;
    case KEEL_F16: ct = CUDA_R_16F; comp = CUBLAS_COMPUTE_32F; break;
    case KEEL_BF16: ct = CUDA_R_16BF; comp = CUBLAS_COMPUTE_32F; break;
    case KEEL_F64:
        ct = CUDA_R_64F;
        comp = CUBLAS_COMPUTE_64F;
        alpha = &d1;
        beta = &db;
        break;
    default:
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: GEMM on %s",
                       l->op, ck_dtype_name(dt));
    }
    cct = ct;
    if (cdt != dt) {
        if (cdt != KEEL_F32 || (dt != KEEL_F16 && dt != KEEL_BF16))
            return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: GEMM of %s into %s", l->op,
                           ck_dtype_name(dt), ck_dtype_name(cdt));
        cct = CUDA_R_32F;
    }
    if ((st = handle_acquire(l, &h)))
        return st;
    /* Column-major C^T (N x M) = op(B)^T (N x K) op(A)^T (K x M). */
    cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1) {
        cublasStatus_t s = g_cb.gemm(
            h, opb, opa, (int)N, (int)M, (int)K, alpha, B, ct, (int)ldb, A,
            ct, (int)lda, beta, C, cct, (int)ldc, comp, CUBLAS_GEMM_DEFAULT);
        handle_release(l);
        return blas_status(s, l, "cublasGemmEx");
    }
    for (int64_t b0 = 0; b0 < batch; b0 += INT_MAX) {
        int64_t nb = batch - b0 < INT_MAX ? batch - b0 : INT_MAX;
        cublasStatus_t s = g_cb.gemm_batched(
            h, opb, opa, (int)N, (int)M, (int)K, alpha,
            (const char *)B + b0 * sb * es, ct, (int)ldb, (long long)sb,
            (const char *)A + b0 * sa * es, ct, (int)lda, (long long)sa,
            beta, (char *)C + b0 * sc * ces, cct, (int)ldc, (long long)sc,
            (int)nb, comp, CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS) {
            handle_release(l);
            return blas_status(s, l, "cublasGemmStridedBatchedEx");
        }
    }
    handle_release(l);
    return KEEL_STATUS_OK;
}

extern "C" const struct ck_entry ck_kernels_linalg[] = {
    {"matmul", KEEL_DT_FLOAT, k_matmul},
    {"linear", KEEL_DT_FLOAT, k_linear},
    {NULL, 0, NULL},
};
