/*
 * keel GPU kernels (CUDA and HIP) — the GEMM behind matmul, linear and the
 * convolutions.
 *
 * ckl_gemm (k_linalg.cu) is the entry every op uses: a row-major batched
 * GEMM
 *
 *   C[b] (M x N, leading dim ldc) = op(A[b]) (M x K) op(B[b]) (K x N)
 *                                   (+ C[b] when acc)
 *
 * with batch strides sa, sb, sc in elements, A, B of dtype dt and C of cdt
 * (cdt == dt, or float32 for float16/bfloat16 inputs). It handles the
 * empty cases and the int range, then hands the problem to one of two
 * backends:
 *
 *   vendor  the vendor library, loaded on first use: cuBLAS in the CUDA
 *           build (k_blas_cuda.cu), rocBLAS in the HIP build
 *           (k_blas_hip.cu);
 *   native  the plugin's own tiled kernel (k_gemm.cu), the same source in
 *           both builds: used when the vendor library cannot be loaded, or
 *           everywhere with KEEL_GPU_GEMM=native.
 *
 * Backends are called with M, N, K >= 1, batch >= 1 and every dimension
 * and leading dimension within int range; they must not write anything on
 * failure other than what a partly run GEMM writes into C.
 */
#ifndef KEEL_GPU_CK_GEMM_H
#define KEEL_GPU_CK_GEMM_H

#include "ck.h"

#define CKL_GEMM_PARAMS                                                      \
    const struct ck_launch *l, keel_dtype dt, keel_dtype cdt, bool ta,       \
        bool tb, int64_t M, int64_t N, int64_t K, const void *A,             \
        int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb,     \
        bool acc, void *C, int64_t ldc, int64_t sc, int64_t batch

#ifdef __cplusplus
extern "C" {
#endif

keel_status ckl_gemm(CKL_GEMM_PARAMS);

/* The vendor backend (k_blas_cuda.cu or k_blas_hip.cu): load the library
 * once; true when it loaded. *what is "cuBLAS (libcublas.so.13)" and the
 * like, or why it could not be loaded. */
bool ckl_vendor_load(const char **what);
/* Picked once, at the first GEMM (k_linalg.cu): the vendor library unless
 * it cannot be loaded or KEEL_GPU_GEMM=native, in which case it is not
 * loaded at all. */
bool ckl_vendor_ready(void);
keel_status ckl_gemm_vendor(CKL_GEMM_PARAMS);
keel_status ckl_gemm_native(CKL_GEMM_PARAMS);

/* "cuBLAS 12", "rocBLAS (librocblas.so.0)", or "plugin kernel (why)":
 * the backend ckl_gemm uses, for device properties and logs. Loads the
 * vendor library if that has not been tried yet. */
const char *ckl_gemm_backend(void);

#ifdef __cplusplus
}
#endif

#endif /* KEEL_GPU_CK_GEMM_H */
