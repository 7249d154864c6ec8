/*
 * keel OpenCL C kernels — what every family file shares.
 *
 * The sources of this folder are one program: common.cl first, then the
 * family files (elementwise.cl, reduce.cl, linalg.cl, conv.cl, nn.cl,
 * manip.cl), concatenated in that order. The OpenCL plugin builds them at
 * run time (clBuildProgram); the Level Zero plugin gets them compiled to
 * SPIR-V at build time. They are OpenCL C 1.2: no generic address space,
 * no program-scope variables beyond constants.
 *
 * Build options the host passes:
 *   KEEL_HAS_FP64   the device has cl_khr_fp64: float64 kernels exist
 *   KEEL_HAS_FP16   the device has cl_khr_fp16 (float16 is still stored as
 *                   ushort and computed in float, see below)
 *
 * BUFFERS. Every buffer argument is a pair (buffer, byte offset): declare
 * it with BUF(name) and take the typed pointer with PTR(type, name). The
 * host passes OK_BUF / OK_T / OK_MEM (kernels/ok.h).
 *
 * DTYPES. Each keel dtype has a suffix (kernel names end in _<sfx>), a
 * storage type S_<sfx> and a compute type C_<sfx>; LD_<sfx>(p, i) reads
 * element i as the compute type, ST_<sfx>(p, i, v) stores a compute value.
 * float16 and bfloat16 are stored as ushort and computed in float;
 * float16 through vload_half / vstore_half_rte (core OpenCL, no extension
 * needed), bfloat16 by bits with round-to-nearest-even. bool is uchar 0/1.
 * Family files instantiate a kernel for several dtypes with FOR_FLOAT(M),
 * FOR_NUMERIC(M), FOR_ALL(M): each calls M(sfx) once per dtype, float64
 * only under KEEL_HAS_FP64.
 */

#ifdef KEEL_HAS_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#define BUF(name) __global uchar *name##_b, ulong name##_o
#define PTR(T, name) ((__global T *)(name##_b + name##_o))

/* ---- dtypes ------------------------------------------------------------- */

#define S_f32 float
#define C_f32 float
#define LD_f32(p, i) ((p)[i])
#define ST_f32(p, i, v) ((p)[i] = (float)(v))

#ifdef KEEL_HAS_FP64
#define S_f64 double
#define C_f64 double
#define LD_f64(p, i) ((p)[i])
#define ST_f64(p, i, v) ((p)[i] = (double)(v))
#endif

#define S_f16 ushort
#define C_f16 float
#define LD_f16(p, i) vload_half((i), (__global half *)(p))
#define ST_f16(p, i, v) vstore_half_rte((float)(v), (i), (__global half *)(p))

static inline float bf16_to_f32(ushort h)
{
    return as_float(((uint)h) << 16);
}
static inline ushort f32_to_bf16(float f)
{
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (ushort)((u >> 16) | 0x40u); /* quiet NaN, sign kept */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}
#define S_bf16 ushort
#define C_bf16 float
#define LD_bf16(p, i) bf16_to_f32((p)[i])
#define ST_bf16(p, i, v) ((p)[i] = f32_to_bf16((float)(v)))

#define S_i8 char
#define C_i8 char
#define LD_i8(p, i) ((p)[i])
#define ST_i8(p, i, v) ((p)[i] = (char)(v))

#define S_u8 uchar
#define C_u8 uchar
#define LD_u8(p, i) ((p)[i])
#define ST_u8(p, i, v) ((p)[i] = (uchar)(v))

#define S_i32 int
#define C_i32 int
#define LD_i32(p, i) ((p)[i])
#define ST_i32(p, i, v) ((p)[i] = (int)(v))

#define S_i64 long
#define C_i64 long
#define LD_i64(p, i) ((p)[i])
#define ST_i64(p, i, v) ((p)[i] = (long)(v))

#define S_bool uchar
#define C_bool uchar
#define LD_bool(p, i) ((p)[i])
#define ST_bool(p, i, v) ((p)[i] = (uchar)((v) != 0))

/* Float accumulator type of a dtype: double for f64, float otherwise. */
#define A_f32 float
#define A_f16 float
#define A_bf16 float
#ifdef KEEL_HAS_FP64
#define A_f64 double
#endif

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)

#ifdef KEEL_HAS_FP64
#define FOR_F64_(M) M(f64)
#else
#define FOR_F64_(M)
#endif
#define FOR_FLOAT(M) M(f32) M(f16) M(bf16) FOR_F64_(M)
#define FOR_INT(M) M(i8) M(u8) M(i32) M(i64)
#define FOR_NUMERIC(M) FOR_FLOAT(M) FOR_INT(M)
#define FOR_ALL(M) FOR_NUMERIC(M) M(bool)

/* ---- descriptors -------------------------------------------------------- */

/* Shape and element strides of an operand, passed by value (the host's
 * struct ok_kdesc). */
typedef struct kdesc {
    long shape[8];
    long stride[8];
    int ndim;
    int pad_;
} kdesc;

/* Element offset of row-major linear index i in the index space of d. */
static inline long kd_off(const kdesc *d, long i)
{
    long off = 0;
    for (int k = d->ndim - 1; k >= 0; k--) {
        long n = d->shape[k];
        long q = i / n;
        off += (i - q * n) * d->stride[k];
        i = q;
    }
    return off;
}

/* ---- Philox-4x32-10 (device-api/include/keel/philox.h is the reference) - */

static inline uint4 keel_philox(ulong block, ulong seed)
{
    uint c0 = (uint)block, c1 = (uint)(block >> 32), c2 = 0, c3 = 0;
    uint k0 = (uint)seed, k1 = (uint)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        ulong p0 = (ulong)0xD2511F53u * c0;
        ulong p1 = (ulong)0xCD9E8D57u * c2;
        uint hi0 = (uint)(p0 >> 32), lo0 = (uint)p0;
        uint hi1 = (uint)(p1 >> 32), lo1 = (uint)p1;
        uint n0 = hi1 ^ c1 ^ k0;
        uint n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return (uint4)(c0, c1, c2, c3);
}

/* u(seed, counter) in [0, 1), exactly as keel_philox_uniform. */
static inline float keel_u01(ulong seed, ulong counter)
{
    uint4 w = keel_philox(counter >> 2, seed);
    uint lane = (uint)(counter & 3);
    uint v = lane == 0 ? w.x : lane == 1 ? w.y : lane == 2 ? w.z : w.w;
    return (float)(v >> 8) * (1.0f / 16777216.0f);
}

/* ---- the one kernel every family needs ------------------------------- */

/* out[i] = x[kd_off(x, i)], byte-wise by element size: strided to
 * contiguous for any dtype. */
#define COPY_STRIDED(T, sz)                                                  \
    __kernel void copy_strided_##sz(BUF(x), kdesc xd, BUF(out), long n)     \
    {                                                                        \
        long i = get_global_id(0);                                           \
        if (i >= n)                                                          \
            return;                                                          \
        PTR(T, out)[i] = PTR(T, x)[kd_off(&xd, i)];                          \
    }
COPY_STRIDED(uchar, 1)
COPY_STRIDED(ushort, 2)
COPY_STRIDED(uint, 4)
COPY_STRIDED(ulong, 8)
