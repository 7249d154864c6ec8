/*
 * keel GPU kernels — the kernel toolkit's device side (CUDA C++, compiled
 * by nvcc for the CUDA plugin and by hipcc for the HIP plugin).
 *
 *   ck_type<DT>::type       the C++ element type of a keel dtype
 *   ck_ld<T>(p) / ck_st<T>  load an element as its compute type / store one
 *   CK_SWITCH_*(dt, T, ...) run a statement with T bound to dt's type
 *   ck_iter<N>              N operands of one shape (outputs first, then
 *                           inputs, as the core lays out elementwise ops),
 *                           dimensions merged where every operand allows
 *   ck_for_each<N>(l, it, f) a grid-stride loop calling f(ptrs, i) where
 *                           ptrs[k] is the address of operand k's element
 *   ck_grid(n, block)       a grid size for n work items
 *
 * Compute types: f16 and bf16 compute in float, float in float, double in
 * double, integers in their own type (int64 for reductions), bool as bool.
 */
#ifndef KEEL_CUDA_CK_CUH
#define KEEL_CUDA_CK_CUH

#include <stdint.h>
#include <string.h>

#ifdef KEEL_GPU_HIP
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif
#include "keel_gpu.h"

#define KEEL_PHILOX_QUAL __host__ __device__
#include <keel/philox.h>

#include "ck.h"

/* ---- what differs between nvcc and hipcc ---------------------------------
 *
 * 16-bit floats. ck_half and ck_bf16 are the storage types of float16 and
 * bfloat16; ck_f2h/ck_h2f and ck_f2bf/ck_bf2f convert (float to 16 bits
 * rounds to nearest even). CUDA has both types and their intrinsics. HIP
 * 5.2 has __half but no bfloat16 type usable in device code here, so the
 * HIP build defines one: a 16-bit struct with conversions by bit
 * manipulation, rounding as the kit's keel_kit_f32_to_bf16 does (nearest
 * even; a NaN stays a quiet NaN of the same sign).
 *
 * Warps. The kernels reduce and scan in groups of CK_WARP = 32 lanes (lane
 * = threadIdx.x & 31) through ck_shfl_xor/ck_shfl_up/ck_shfl. On NVIDIA a
 * group is a warp. AMD GPUs run wavefronts of 64 lanes (warpSize, 64 on the
 * gfx9 targets built here): there every shuffle is given width 32, so it
 * stays inside its half of the wavefront and a 64-lane wavefront holds two
 * independent groups, which is what the block-level code (threadIdx.x >>
 * 5 groups per block, block sizes multiples of 64) expects. The lanes of
 * one group always execute together on both, so the group-synchronous
 * code needs no barrier on either.
 *
 * __grid_constant__ (kernel parameters read in place) is CUDA's; HIP reads
 * kernel arguments from constant memory anyway. */
#define CK_WARP 32

/* The kernel tables (ck_kernels_*) are host data. hipcc's device pass
 * treats a namespace-scope const object as device data too and would then
 * need the host functions it points to, so the tables are compiled in the
 * host pass only. */
#if defined(__HIP_DEVICE_COMPILE__)
#define CK_HOST_PASS 0
#else
#define CK_HOST_PASS 1
#endif

#ifdef KEEL_GPU_HIP

typedef __half ck_half;
struct ck_bf16 {
    uint16_t x;
};

__host__ __device__ __forceinline__ ck_half ck_f2h(float v)
{
    return __float2half_rn(v);
}
__host__ __device__ __forceinline__ float ck_h2f(ck_half v)
{
    return __half2float(v);
}
__host__ __device__ __forceinline__ ck_bf16 ck_f2bf(float v)
{
    uint32_t u;
    ck_bf16 r;

    memcpy(&u, &v, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet */
        r.x = (uint16_t)((u >> 16) | 0x0040u);
    else
        r.x = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return r;
}
__host__ __device__ __forceinline__ float ck_bf2f(ck_bf16 v)
{
    uint32_t u = (uint32_t)v.x << 16;
    float f;

    memcpy(&f, &u, 4);
    return f;
}

#define ck_shfl_xor(v, m) __shfl_xor((v), (m), CK_WARP)
#define ck_shfl_up(v, k) __shfl_up((v), (k), CK_WARP)
#define ck_shfl(v, src) __shfl((v), (src), CK_WARP)

#define __grid_constant__

#ifndef CUDART_INF
#define CUDART_INF __builtin_huge_val()
#define CUDART_NAN __builtin_nan("")
#endif

#else /* CUDA */

typedef __half ck_half;
typedef __nv_bfloat16 ck_bf16;

__host__ __device__ __forceinline__ ck_half ck_f2h(float v)
{
    return __float2half_rn(v);
}
__host__ __device__ __forceinline__ float ck_h2f(ck_half v)
{
    return __half2float(v);
}
__host__ __device__ __forceinline__ ck_bf16 ck_f2bf(float v)
{
    return __float2bfloat16_rn(v);
}
__host__ __device__ __forceinline__ float ck_bf2f(ck_bf16 v)
{
    return __bfloat162float(v);
}

#define ck_shfl_xor(v, m) __shfl_xor_sync(0xffffffffu, (v), (m), CK_WARP)
#define ck_shfl_up(v, k) __shfl_up_sync(0xffffffffu, (v), (k), CK_WARP)
#define ck_shfl(v, src) __shfl_sync(0xffffffffu, (v), (src), CK_WARP)

#endif

/* ---- dtypes --------------------------------------------------------------- */

template <int DT> struct ck_type;
template <> struct ck_type<KEEL_F32> { typedef float type; typedef float C; };
template <> struct ck_type<KEEL_F64> { typedef double type; typedef double C; };
template <> struct ck_type<KEEL_F16> { typedef ck_half type; typedef float C; };
template <> struct ck_type<KEEL_BF16> {
    typedef ck_bf16 type;
    typedef float C;
};
template <> struct ck_type<KEEL_I8> { typedef int8_t type; typedef int32_t C; };
template <> struct ck_type<KEEL_U8> { typedef uint8_t type; typedef int32_t C; };
template <> struct ck_type<KEEL_I32> { typedef int32_t type; typedef int32_t C; };
template <> struct ck_type<KEEL_I64> { typedef int64_t type; typedef int64_t C; };
template <> struct ck_type<KEEL_BOOL> { typedef bool type; typedef bool C; };

/* Compute type of a storage type. */
template <class T> struct ck_compute { typedef T C; };
template <> struct ck_compute<ck_half> { typedef float C; };
template <> struct ck_compute<ck_bf16> { typedef float C; };
template <> struct ck_compute<int8_t> { typedef int32_t C; };
template <> struct ck_compute<uint8_t> { typedef int32_t C; };

template <class T> struct ck_is_float { static const bool v = false; };
template <> struct ck_is_float<float> { static const bool v = true; };
template <> struct ck_is_float<double> { static const bool v = true; };
template <> struct ck_is_float<ck_half> { static const bool v = true; };
template <> struct ck_is_float<ck_bf16> { static const bool v = true; };

/* Conversions between any two element/compute types, by value. */
template <class To, class From> struct ck_conv {
    static __device__ __forceinline__ To go(From v) { return (To)v; }
};
template <class From> struct ck_conv<ck_half, From> {
    static __device__ __forceinline__ ck_half go(From v)
    {
        return ck_f2h((float)v);
    }
};
template <class From> struct ck_conv<ck_bf16, From> {
    static __device__ __forceinline__ ck_bf16 go(From v)
    {
        return ck_f2bf((float)v);
    }
};
template <class To> struct ck_conv<To, ck_half> {
    static __device__ __forceinline__ To go(ck_half v)
    {
        return (To)ck_h2f(v);
    }
};
template <class To> struct ck_conv<To, ck_bf16> {
    static __device__ __forceinline__ To go(ck_bf16 v)
    {
        return (To)ck_bf2f(v);
    }
};
template <> struct ck_conv<ck_half, ck_half> {
    static __device__ __forceinline__ ck_half go(ck_half v) { return v; }
};
template <> struct ck_conv<ck_bf16, ck_bf16> {
    static __device__ __forceinline__ ck_bf16 go(ck_bf16 v)
    {
        return v;
    }
};
template <> struct ck_conv<ck_half, ck_bf16> {
    static __device__ __forceinline__ ck_half go(ck_bf16 v)
    {
        return ck_f2h(ck_bf2f(v));
    }
};
template <> struct ck_conv<ck_bf16, ck_half> {
    static __device__ __forceinline__ ck_bf16 go(ck_half v)
    {
        return ck_f2bf(ck_h2f(v));
    }
};
/* Floating point to bool: nonzero (NaN included) is true. */
template <class From> struct ck_conv<bool, From> {
    static __device__ __forceinline__ bool go(From v)
    {
        return ck_conv<double, From>::go(v) != 0.0;
    }
};
template <> struct ck_conv<bool, bool> {
    static __device__ __forceinline__ bool go(bool v) { return v; }
};
template <> struct ck_conv<bool, ck_half> {
    static __device__ __forceinline__ bool go(ck_half v)
    {
        return ck_h2f(v) != 0.0f;
    }
};
template <> struct ck_conv<bool, ck_bf16> {
    static __device__ __forceinline__ bool go(ck_bf16 v)
    {
        return ck_bf2f(v) != 0.0f;
    }
};

template <class To, class From>
__device__ __forceinline__ To ck_cv(From v)
{
    return ck_conv<To, From>::go(v);
}

/* Load an element of storage type T as its compute type; store back. */
template <class T>
__device__ __forceinline__ typename ck_compute<T>::C ck_ld(const void *p)
{
    return ck_cv<typename ck_compute<T>::C>(*(const T *)p);
}
template <class T, class V>
__device__ __forceinline__ void ck_st(void *p, V v)
{
    *(T *)p = ck_cv<T>(v);
}

/* Run STMT with T typedef'd to the element type of `dt`. The _FLOAT form
 * covers f32, f64, f16, bf16; _NUMERIC adds the integers; _ALL adds bool.
 * Unlisted dtypes run FALLBACK. */
#define CK_CASE_(DT, T, STMT)                                                \
    case DT: {                                                               \
        typedef ck_type<DT>::type T;                                            \
        STMT;                                                                \
    } break;
#define CK_SWITCH_FLOAT(dt, T, STMT, FALLBACK)                               \
    switch (dt) {                                                            \
        CK_CASE_(KEEL_F32, T, STMT)                                          \
        CK_CASE_(KEEL_F64, T, STMT)                                          \
        CK_CASE_(KEEL_F16, T, STMT)                                          \
        CK_CASE_(KEEL_BF16, T, STMT)                                         \
    default:                                                                 \
        FALLBACK;                                                            \
    }
#define CK_SWITCH_NUMERIC(dt, T, STMT, FALLBACK)                             \
    switch (dt) {                                                            \
        CK_CASE_(KEEL_F32, T, STMT)                                          \
        CK_CASE_(KEEL_F64, T, STMT)                                          \
        CK_CASE_(KEEL_F16, T, STMT)                                          \
        CK_CASE_(KEEL_BF16, T, STMT)                                         \
        CK_CASE_(KEEL_I8, T, STMT)                                           \
        CK_CASE_(KEEL_U8, T, STMT)                                           \
        CK_CASE_(KEEL_I32, T, STMT)                                          \
        CK_CASE_(KEEL_I64, T, STMT)                                          \
    default:                                                                 \
        FALLBACK;                                                            \
    }
#define CK_SWITCH_ALL(dt, T, STMT, FALLBACK)                                 \
    switch (dt) {                                                            \
        CK_CASE_(KEEL_F32, T, STMT)                                          \
        CK_CASE_(KEEL_F64, T, STMT)                                          \
        CK_CASE_(KEEL_F16, T, STMT)                                          \
        CK_CASE_(KEEL_BF16, T, STMT)                                         \
        CK_CASE_(KEEL_I8, T, STMT)                                           \
        CK_CASE_(KEEL_U8, T, STMT)                                           \
        CK_CASE_(KEEL_I32, T, STMT)                                          \
        CK_CASE_(KEEL_I64, T, STMT)                                          \
        CK_CASE_(KEEL_BOOL, T, STMT)                                         \
    default:                                                                 \
        FALLBACK;                                                            \
    }

/* ---- iteration ------------------------------------------------------------ */

#define CK_BLOCK 256

/* Blocks for n items at `block` threads each, capped for grid-stride loops
 * (a few waves of the largest GPUs). */
static inline unsigned ck_grid(int64_t n, int block)
{
    int64_t g = (n + block - 1) / block;

    if (g < 1)
        g = 1;
    if (g > 65536)
        g = 65536;
    return (unsigned)g;
}

/* N operands over one index space. stride[k][d] and the base pointers are
 * in BYTES. contig: every operand is dense in the same order, so element i
 * of operand k is at base[k] + i * esize[k]. */
template <int N> struct ck_iter {
    int ndim;
    bool contig;
    int64_t numel;
    int64_t shape[KEEL_MAX_DIMS];
    int64_t stride[N][KEEL_MAX_DIMS];
    int64_t esize[N];
    char *base[N];
};

/*
 * Build an iterator over descriptors d[0..N-1], all of shape d[0]->shape
 * (the caller has checked the element counts agree; only d[0]'s shape is
 * used). Size-1 dimensions are dropped and adjacent dimensions merged when
 * they are contiguous for every operand.
 */
template <int N>
static inline void ck_iter_make(ck_iter<N> *it,
                                const keel_tensor_desc *const d[N])
{
    int nd = 0;
    int64_t shape[KEEL_MAX_DIMS], st[N][KEEL_MAX_DIMS];

    it->numel = 1;
    for (int k = 0; k < N; k++) {
        it->esize[k] = keel_dtype_size(d[k]->dtype);
        it->base[k] = (char *)(uintptr_t)d[k]->data;
    }
    for (int i = 0; i < d[0]->ndim; i++) {
        int64_t n = d[0]->shape[i];

        it->numel *= n;
        if (n == 1)
            continue;
        shape[nd] = n;
        for (int k = 0; k < N; k++)
            st[k][nd] = d[k]->strides[i] * it->esize[k];
        nd++;
    }
    /* Merge dimension j into j-1 when for every operand
     * stride[j-1] == stride[j] * shape[j]. */
    int m = 0;
    for (int j = 0; j < nd; j++) {
        bool merge = m > 0;

        for (int k = 0; k < N && merge; k++)
            merge = st[k][m - 1] == st[k][j] * shape[j];
        if (merge) {
            shape[m - 1] *= shape[j];
            for (int k = 0; k < N; k++)
                st[k][m - 1] = st[k][j];
        } else {
            shape[m] = shape[j];
            for (int k = 0; k < N; k++)
                st[k][m] = st[k][j];
            m++;
        }
    }
    it->ndim = m;
    it->contig = true;
    for (int i = 0; i < m; i++)
        it->shape[i] = shape[i];
    for (int k = 0; k < N; k++)
        for (int i = 0; i < m; i++)
            it->stride[k][i] = st[k][i];
    for (int i = m; i < KEEL_MAX_DIMS; i++) {
        it->shape[i] = 1;
        for (int k = 0; k < N; k++)
            it->stride[k][i] = 0;
    }
    if (m > 1)
        it->contig = false;
    else if (m == 1)
        for (int k = 0; k < N; k++)
            if (st[k][0] != it->esize[k])
                it->contig = false;
}

/* Byte offsets of linear element i for every operand. */
template <int N>
__device__ __forceinline__ void ck_iter_offsets(const ck_iter<N> &it,
                                                int64_t i, int64_t off[N])
{
    for (int k = 0; k < N; k++)
        off[k] = 0;
    for (int d = it.ndim - 1; d >= 0; d--) {
        int64_t n = it.shape[d], q = i / n, r = i - q * n;

        for (int k = 0; k < N; k++)
            off[k] += r * it.stride[k][d];
        i = q;
    }
}

template <int N, class F>
__global__ void ck_for_each_kernel(ck_iter<N> it, F f)
{
    int64_t step = (int64_t)blockDim.x * gridDim.x;

    if (it.contig) {
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
             i < it.numel; i += step) {
            char *p[N];

            for (int k = 0; k < N; k++)
                p[k] = it.base[k] + i * it.esize[k];
            f(p, i);
        }
        return;
    }
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         i < it.numel; i += step) {
        int64_t off[N];
        char *p[N];

        ck_iter_offsets<N>(it, i, off);
        for (int k = 0; k < N; k++)
            p[k] = it.base[k] + off[k];
        f(p, i);
    }
}

/*
 * Enqueue f over every element of the iterator on l->stream. f is a
 * device functor: __device__ void operator()(char *const *p, int64_t i).
 * Nothing is launched for an empty iterator.
 */
template <int N, class F>
static inline void ck_for_each(const struct ck_launch *l, const ck_iter<N> &it,
                               F f)
{
    if (it.numel <= 0)
        return;
    ck_for_each_kernel<N, F>
        <<<ck_grid(it.numel, CK_BLOCK), CK_BLOCK, 0, l->stream>>>(it, f);
}

/* Convenience: iterate the kernel's outputs then inputs (N in total). */
template <int N>
static inline void ck_iter_args(ck_iter<N> *it, const keel_kernel_args *a)
{
    const keel_tensor_desc *d[N];
    int k = 0;

    for (int o = 0; o < a->num_outputs && k < N; o++)
        d[k++] = &a->outputs[o];
    for (int i = 0; i < a->num_inputs && k < N; i++)
        d[k++] = &a->inputs[i];
    ck_iter_make<N>(it, d);
}

/* ---- warp and block reductions ------------------------------------------- */

template <class T> __device__ __forceinline__ T ck_warp_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += ck_shfl_xor(v, o);
    return v;
}
template <class T> __device__ __forceinline__ T ck_warp_max(T v)
{
    for (int o = 16; o > 0; o >>= 1) {
        T w = ck_shfl_xor(v, o);
        v = w > v ? w : v;
    }
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread
 * gets the result. Uses 32 elements of shared memory of type T. */
template <class T> __device__ T ck_block_sum(T v)
{
    __shared__ T part[32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int nw = (blockDim.x + 31) >> 5;

    v = ck_warp_sum(v);
    __syncthreads();
    if (lane == 0)
        part[w] = v;
    __syncthreads();
    v = lane < nw ? part[lane] : (T)0;
    return ck_warp_sum(v);
}

#endif /* KEEL_CUDA_CK_CUH */
