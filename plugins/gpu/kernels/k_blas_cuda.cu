/*
 * keel GPU kernels, CUDA build — the vendor GEMM backend: cuBLAS
 * (ck_gemm.h).
 *
 * cuBLAS is column-major: the row-major C = A B of ckl_gemm is computed as
 * the column-major C^T = B^T A^T. Compute types: float32 in
 * CUBLAS_COMPUTE_32F (no TF32), float16/bfloat16 inputs and outputs with
 * float accumulation (tensor cores), float64 in CUBLAS_COMPUTE_64F.
 *
 * Handles: one per device, created lazily the first time that device runs
 * a GEMM; cublasSetStream and the GEMM run under that device's mutex. The
 * handles live for the process.
 *
 * cuBLAS is not linked: the first GEMM dlopens libcublas.so.<major> (the
 * major version of the headers built against, found through the plugin's
 * runpath) and resolves the seven entry points used here. Loading cuBLAS
 * maps and relocates cublasLt, about 150 MB of resident memory, which
 * every process that loads the plugin would otherwise pay at start-up,
 * with or without a GPU. When it cannot be loaded, ckl_gemm runs the
 * plugin's own kernel (k_gemm.cu) instead.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cublas_v2.h>

#include "ck.cuh"
#include "ck_gemm.h"

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


char g_what[400];

} // namespace

bool ckl_vendor_load(const char **what)
{
    pthread_once(&g_cb_once, cublas_load);
    if (g_cb_ok)
        snprintf(g_what, sizeof(g_what), "cuBLAS (%s)", LG_CUBLAS_SONAME);
    else
        snprintf(g_what, sizeof(g_what), "%s", g_cb_error);
    *what = g_what;
    return g_cb_ok;
}

keel_status ckl_gemm_vendor(CKL_GEMM_PARAMS)
{
    size_t es = keel_dtype_size(dt), ces = keel_dtype_size(cdt);
    cudaDataType_t ct, cct;
    cublasComputeType_t comp;
    float f1 = 1.0f, fb = acc ? 1.0f : 0.0f;
    double d1 = 1.0, db = acc ? 1.0 : 0.0;
    const void *alpha = &f1, *beta = &fb;
    cublasHandle_t h;
    keel_status st;

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
    default: /* ckl_gemm admits no other */
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: GEMM on %s",
                       l->op, ck_dtype_name(dt));
    }
    cct = cdt != dt ? CUDA_R_32F : ct;
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

