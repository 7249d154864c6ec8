/*
 * keel GPU kernels (CUDA and HIP) — the native GEMM backend: the plugin's
 * own batched GEMM kernel (ckl_gemm_native, ck_gemm.h).
 *
 * It runs when the vendor BLAS (cuBLAS, rocBLAS) cannot be loaded, and
 * everywhere with KEEL_GPU_GEMM=native. The same source is compiled by
 * nvcc for the CUDA plugin and by hipcc for the HIP plugin, so it uses
 * nothing but shared memory and __syncthreads: no warp shuffles, no
 * tensor/matrix cores, no assumption about the warp (wavefront) width.
 *
 * The problem is ckl_gemm's: row-major C[b] (M x N, leading dim ldc) =
 * op(A[b]) op(B[b]) (+ C[b] when acc), op(A)[m][k] = A[m * lda + k], or
 * A[k * lda + m] when ta (A stored K x M); likewise op(B)[k][n] =
 * B[k * ldb + n], or B[n * ldb + k] when tb. That is exactly what the
 * column-major vendor call C^T = op(B)^T op(A)^T computes.
 *
 * Tiling. A block of 256 threads computes one 64 x 64 tile of C, walking
 * K in steps of 16: each step the block stages a 64 x 16 slab of op(A)
 * and a 16 x 64 slab of op(B) in shared memory (converted to the compute
 * type on the way in), and every thread accumulates a 4 x 4 sub-tile from
 * it. The thread's rows and columns are spread 16 apart (row ty + 16 i,
 * column tx + 16 j) so neighbouring threads read neighbouring shared
 * words and write neighbouring elements of C. While one slab is used the
 * next one is already being fetched into registers. Global reads go along
 * whichever dimension is contiguous in memory (k for a row-major A, m for
 * a transposed one), so they coalesce for all four ta/tb layouts; the
 * shared rows are padded by one word so those stores do not collide in
 * a bank either.
 *
 * Accumulation is in float for float32/float16/bfloat16 and in double for
 * float64; the result is rounded once, into C's dtype. Every global access
 * is bounds-checked: nothing outside op(A), op(B) and the M x N part of
 * each C (given ldc) is read or written, and C is read only with acc
 * (beta = 0 semantics: NaNs in an uninitialised C do not leak through).
 *
 * Grid: x runs over the tiles of one C, y over the batch, each capped at
 * 65535 (the y limit, and plenty to fill any GPU); a block loops over the
 * tiles and batches left beyond the grid.
 */
#include <stdint.h>

#include "ck.cuh"
#include "ck_gemm.h"

namespace {

constexpr int TILE_M = 64;
constexpr int TILE_N = 64;
constexpr int TILE_K = 16;
constexpr int THREADS = 256;
/* Per-thread sub-tile; THREADS = (TILE_M / SUB) * (TILE_N / SUB). */
constexpr int SUB = 4;
constexpr int LANES_N = TILE_N / SUB; /* threads along n: 16 */
constexpr int LANES_M = TILE_M / SUB; /* threads along m: 16 */
/* Elements of each slab every thread stages per K step. */
constexpr int A_PER = TILE_M * TILE_K / THREADS;
constexpr int B_PER = TILE_K * TILE_N / THREADS;
constexpr unsigned GRID_MAX = 65535;

static_assert(LANES_M * LANES_N == THREADS, "one thread per 4x4 sub-tile");
static_assert(A_PER * THREADS == TILE_M * TILE_K, "A slab split evenly");
static_assert(B_PER * THREADS == TILE_K * TILE_N, "B slab split evenly");
/* Element r + 1 of a thread is element r moved THREADS / TILE_x along one
 * dimension and not at all along the other (a_step, b_step). */
static_assert(THREADS % TILE_M == 0 && THREADS % TILE_N == 0 &&
                  THREADS % TILE_K == 0,
              "slab rows map to whole thread groups");

struct gemm_args {
    const void *A, *B;
    void *C;
    int M, N, K;
    int64_t lda, ldb, ldc;
    int64_t sa, sb, sc; /* batch strides, elements */
    int64_t batch;
    int64_t tiles_n, tiles; /* tiles along n, tiles per C */
    bool ta, tb, acc;
};

/*
 * T: storage type of A and B; CT: storage type of C. Acc (the compute type
 * of T) is what the slabs hold and what the sums are made in.
 */
template <class T, class CT>
__global__ void __launch_bounds__(THREADS) gemm_kernel(gemm_args p)
{
    typedef typename ck_compute<T>::C Acc;

    /* [k][m] and [k][n], each row padded by one word (see the top). */
    __shared__ Acc as[TILE_K][TILE_M + 1];
    __shared__ Acc bs[TILE_K][TILE_N + 1];

    const int tid = threadIdx.x;
    const int tx = tid % LANES_N, ty = tid / LANES_N;

    /* Which slab element each thread stages: the memory-contiguous
     * dimension varies fastest across threads. For op(A)[m][k] the
     * distance between consecutive k is a_k, between consecutive m a_m. */
    const int64_t a_m = p.ta ? 1 : p.lda, a_k = p.ta ? p.lda : 1;
    const int64_t b_k = p.tb ? 1 : p.ldb, b_n = p.tb ? p.ldb : 1;
    const int64_t a_step = p.ta ? (THREADS / TILE_M) * a_k
                                : (THREADS / TILE_K) * a_m;
    const int64_t b_step = p.tb ? (THREADS / TILE_K) * b_n
                                : (THREADS / TILE_N) * b_k;
    int am[A_PER], ak[A_PER], bk[B_PER], bn[B_PER];

    for (int r = 0; r < A_PER; r++) {
        int e = tid + r * THREADS;

        am[r] = p.ta ? e % TILE_M : e / TILE_K;
        ak[r] = p.ta ? e / TILE_M : e % TILE_K;
    }
    for (int r = 0; r < B_PER; r++) {
        int e = tid + r * THREADS;

        bn[r] = p.tb ? e / TILE_K : e % TILE_N;
        bk[r] = p.tb ? e % TILE_K : e / TILE_N;
    }

    /* gridDim and blockIdx are the same for all threads of the block, so
     * every thread runs the same iterations and reaches every barrier. */
    for (int64_t b = blockIdx.y; b < p.batch; b += gridDim.y) {
        const T *A = (const T *)p.A + b * p.sa;
        const T *B = (const T *)p.B + b * p.sb;
        CT *C = (CT *)p.C + b * p.sc;

        for (int64_t t = blockIdx.x; t < p.tiles; t += gridDim.x) {
            const int m0 = (int)(t / p.tiles_n) * TILE_M;
            const int n0 = (int)(t % p.tiles_n) * TILE_N;
            const int mr = p.M - m0, nr = p.N - n0; /* >= 1 */
            Acc sum[SUB][SUB];
            Acc ra[A_PER], rb[B_PER];

            for (int i = 0; i < SUB; i++)
                for (int j = 0; j < SUB; j++)
                    sum[i][j] = (Acc)0;

            /* Fetch the slabs of step k0 into registers; zeros outside
             * the matrices, so the edge tiles need no other care. Bounds
             * are compared as what is left of each dimension (m0 + 63
             * may not fit an int when M is near INT_MAX), and an address
             * is formed only for an element that exists. A thread's
             * elements r = 0, 1, .. lie a_step (b_step) apart, so one
             * offset per operand and thread is all that lives in
             * registers. */
            const int64_t a_off = (int64_t)(am[0] + m0) * a_m + ak[0] * a_k;
            const int64_t b_off = (int64_t)(bn[0] + n0) * b_n + bk[0] * b_k;
            auto fetch = [&](int k0) {
                const int kr = p.K - k0;
                const T *pa = A + (a_off + k0 * a_k);
                const T *pb = B + (b_off + k0 * b_k);

#pragma unroll
                for (int r = 0; r < A_PER; r++)
                    ra[r] = am[r] < mr && ak[r] < kr
                                ? ck_ld<T>(pa + r * a_step)
                                : (Acc)0;
#pragma unroll
                for (int r = 0; r < B_PER; r++)
                    rb[r] = bk[r] < kr && bn[r] < nr
                                ? ck_ld<T>(pb + r * b_step)
                                : (Acc)0;
            };

            fetch(0);
            for (int k0 = 0;; k0 += TILE_K) {
#pragma unroll
                for (int r = 0; r < A_PER; r++)
                    as[ak[r]][am[r]] = ra[r];
#pragma unroll
                for (int r = 0; r < B_PER; r++)
                    bs[bk[r]][bn[r]] = rb[r];
                __syncthreads();
                /* Issue the next step's loads before the arithmetic so
                 * they are in flight while it runs. */
                const bool more = p.K - k0 > TILE_K;

                if (more)
                    fetch(k0 + TILE_K);
#pragma unroll
                for (int kk = 0; kk < TILE_K; kk++) {
                    Acc a[SUB], w[SUB];

#pragma unroll
                    for (int i = 0; i < SUB; i++)
                        a[i] = as[kk][ty + i * LANES_M];
#pragma unroll
                    for (int j = 0; j < SUB; j++)
                        w[j] = bs[kk][tx + j * LANES_N];
#pragma unroll
                    for (int i = 0; i < SUB; i++)
#pragma unroll
                        for (int j = 0; j < SUB; j++)
                            sum[i][j] += a[i] * w[j];
                }
                /* Everyone is done reading before the slabs are
                 * overwritten at the top of the next step. */
                __syncthreads();
                if (!more)
                    break;
            }

#pragma unroll
            for (int i = 0; i < SUB; i++) {
                const int mi = ty + i * LANES_M;

                if (mi >= mr)
                    break;
#pragma unroll
                for (int j = 0; j < SUB; j++) {
                    const int nj = tx + j * LANES_N;

                    if (nj >= nr)
                        break;
                    CT *c = C + (m0 + mi) * p.ldc + (n0 + nj);
                    Acc v = sum[i][j];

                    if (p.acc)
                        v += (Acc)ck_ld<CT>(c);
                    ck_st<CT>(c, v);
                }
            }
        }
    }
}

template <class T, class CT>
keel_status gemm_launch(const struct ck_launch *l, const gemm_args &p)
{
    dim3 grid((unsigned)(p.tiles < GRID_MAX ? p.tiles : GRID_MAX),
              (unsigned)(p.batch < GRID_MAX ? p.batch : GRID_MAX), 1);

    gemm_kernel<T, CT><<<grid, THREADS, 0, l->stream>>>(p);
    return ck_check(cudaGetLastError(), l, "gemm kernel");
}

} // namespace

keel_status ckl_gemm_native(CKL_GEMM_PARAMS)
{
    typedef ck_type<KEEL_F16>::type f16;
    typedef ck_type<KEEL_BF16>::type bf16;
    gemm_args p;

    p.A = A;
    p.B = B;
    p.C = C;
    p.M = (int)M;
    p.N = (int)N;
    p.K = (int)K;
    p.lda = lda;
    p.ldb = ldb;
    p.ldc = ldc;
    p.sa = sa;
    p.sb = sb;
    p.sc = sc;
    p.batch = batch;
    p.tiles_n = (N + TILE_N - 1) / TILE_N;
    p.tiles = p.tiles_n * ((M + TILE_M - 1) / TILE_M);
    p.ta = ta;
    p.tb = tb;
    p.acc = acc;

    if (cdt != dt && !(cdt == KEEL_F32 && (dt == KEEL_F16 || dt == KEEL_BF16)))
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: GEMM of %s into %s",
                       l->op, ck_dtype_name(dt), ck_dtype_name(cdt));
    switch (dt) {
    case KEEL_F32: return gemm_launch<float, float>(l, p);
    case KEEL_F64: return gemm_launch<double, double>(l, p);
    case KEEL_F16:
        return cdt == KEEL_F32 ? gemm_launch<f16, float>(l, p)
                               : gemm_launch<f16, f16>(l, p);
    case KEEL_BF16:
        return cdt == KEEL_F32 ? gemm_launch<bf16, float>(l, p)
                               : gemm_launch<bf16, bf16>(l, p);
    default: /* ckl_gemm admits no other */
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: GEMM on %s",
                       l->op, ck_dtype_name(dt));
    }
}
