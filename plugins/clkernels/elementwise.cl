/*
 * keel OpenCL C kernels: elementwise family (see common.cl), host side
 * host/k_elementwise.c.
 *
 * Few kernels, each general: one kernel per dtype for the binary
 * arithmetic ops (ew_bin_<sfx>), the comparisons and logical ops
 * (ew_cmp_<sfx>, bool out) and the unary ops (ew_un_<sfx>), each taking
 * the op as an int code (EW_* below; k_elementwise.c has the same
 * numbers). Casts, fills, sequences and random numbers are one kernel
 * each over every dtype, the dtypes passed as keel_dtype values.
 *
 * OPERANDS. An input is (BUF, kdesc, mode): mode 0 reads element i
 * (contiguous in the output's index space), 1 reads element 0 (a
 * broadcast scalar), 2 reads kd_off(kdesc, i). The host merges dims
 * (keel_kit_plan) before it passes the kdescs. Outputs are contiguous.
 *
 * SEMANTICS are the CPU plugin's: integer arithmetic wraps, an integer
 * zero divisor gives 0, floor_divide floors and remainder takes the sign
 * of the divisor, integer pow is exact (wrapping; negative exponents give
 * 0 except for the bases 1 and -1), maximum/minimum/relu/clip/sign keep
 * NaN, round is half away from zero; float16 and bfloat16 compute in
 * float32. Conversions to integers saturate (NaN gives 0), as the CPU
 * plugin's stores do, except integer to integer, which wraps.
 */

/* The CPU plugin's results are unfused: no contraction of a * b + c. */
#pragma OPENCL FP_CONTRACT OFF

/* ---- codes shared with k_elementwise.c ----------------------------------- */

/* binary arithmetic */
#define EW_ADD 0
#define EW_SUB 1
#define EW_MUL 2
#define EW_DIV 3
#define EW_POW 4
#define EW_MAX 5
#define EW_MIN 6
#define EW_FLOORDIV 7
#define EW_REM 8
/* comparisons and logical ops */
#define EW_EQ 0
#define EW_NE 1
#define EW_LT 2
#define EW_LE 3
#define EW_GT 4
#define EW_GE 5
#define EW_AND 6
#define EW_OR 7
#define EW_XOR 8
#define EW_NOT 9
/* unary */
#define EW_NEG 0
#define EW_ABS 1
#define EW_SIGN 2
#define EW_EXP 3
#define EW_LOG 4
#define EW_LOG1P 5
#define EW_SQRT 6
#define EW_RSQRT 7
#define EW_SQUARE 8
#define EW_SIN 9
#define EW_COS 10
#define EW_FLOOR 11
#define EW_CEIL 12
#define EW_ROUND 13
#define EW_RELU 14
#define EW_RELU6 15
#define EW_LEAKY 16
#define EW_ELU 17
#define EW_GELU 18
#define EW_GELU_TANH 19
#define EW_SILU 20
#define EW_SIGMOID 21
#define EW_TANH 22
#define EW_SOFTPLUS 23
#define EW_HARDSWISH 24
#define EW_CLIP 25
/* random kinds */
#define EW_UNIFORM 0
#define EW_NORMAL 1
#define EW_RANDINT 2

/* keel_dtype values */
#define EW_DT_F32 0
#define EW_DT_F64 1
#define EW_DT_F16 2
#define EW_DT_BF16 3
#define EW_DT_I8 4
#define EW_DT_U8 5
#define EW_DT_I32 6
#define EW_DT_I64 7
#define EW_DT_BOOL 8

/* Element index of operand (d, m) at output index i. */
static inline long ew_ix(const kdesc *d, int m, long i)
{
    return m == 0 ? i : m == 1 ? 0 : kd_off(d, i);
}

/* The widest float: the CPU plugin converts through double. */
#ifdef KEEL_HAS_FP64
typedef double ew_real;
#else
typedef float ew_real;
#endif

/* Helper family of a float dtype's compute type: f (float), d (double). */
#define EWK_f32 f
#define EWK_f16 f
#define EWK_bf16 f
#define EWK_f64 d

/* Attribute parameter type of a dtype's unary kernel. */
#define P_f32 float
#define P_f16 float
#define P_bf16 float
#define P_f64 double
#define P_i8 long
#define P_u8 long
#define P_i32 long
#define P_i64 long

/* Unsigned twins of the integer types (wrapping arithmetic). */
#define U_i8 uchar
#define U_u8 uchar
#define U_i32 uint
#define U_i64 ulong

/* ---- float helpers, for float (f) and double (d) ------------------------- */

/* floor(a / b) on float: the double quotient's floor, exact, as the CPU
 * plugin computes it; without float64, Python's fmod-based form. */
#ifndef KEEL_HAS_FP64
static inline float ew_floordiv_py_f(float a, float b)
{
    float mod, div, fl;

    if (b == 0 || !isfinite(a) || !isfinite(b))
        return floor(a / b);
    mod = fmod(a, b);
    div = (a - mod) / b;
    if (mod != 0 && (b < 0) != (mod < 0))
        div -= 1;
    if (div == 0)
        return copysign(0.0f, a / b);
    fl = floor(div);
    return div - fl > 0.5f ? fl + 1 : fl;
}
#endif

static inline float ew_floordiv_f(float a, float b)
{
#ifdef KEEL_HAS_FP64
    return (float)floor((double)a / (double)b);
#else
    return ew_floordiv_py_f(a, b);
#endif
}

#ifdef KEEL_HAS_FP64
static inline double ew_floordiv_d(double a, double b)
{
    double mod, div, fl;

    if (b == 0 || !isfinite(a) || !isfinite(b))
        return floor(a / b);
    mod = fmod(a, b);
    div = (a - mod) / b;
    if (mod != 0 && (b < 0) != (mod < 0))
        div -= 1;
    if (div == 0)
        return copysign(0.0, a / b);
    fl = floor(div);
    return div - fl > 0.5 ? fl + 1 : fl;
}
#endif

/* float pow through double where there is one: OpenCL's float pow may be
 * 16 ulp off, even for integer results; the CPU plugin's powf is within
 * 1 ulp. */
static inline float ew_pow_f(float a, float b)
{
#ifdef KEEL_HAS_FP64
    return (float)pow((double)a, (double)b);
#else
    return pow(a, b);
#endif
}

#ifdef KEEL_HAS_FP64
static inline double ew_pow_d(double a, double b)
{
    return pow(a, b);
}
#endif

/* float tanh as the CPU plugin's: 1 - 2 / (e^2|x| + 1) with the sign of
 * x, and Cephes' odd polynomial below |x| = 0.5493 where that form
 * cancels; exactly +-1 once e^2|x| is large (OpenCL's tanh may stop one
 * ulp short of it, which gelu's tanh form turns into a visible error). */
static inline float ew_tanh_f(float x)
{
    float ax = fabs(x), z = x * x;
    float big = copysign(1.0f - 2.0f / (exp(2.0f * ax) + 1.0f), x);
    float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z -
                     5.37397155531e-2f) * z + 1.33314422036e-1f) * z -
                   3.33332819422e-1f) * z * x + x;

    return ax > 0.5493f ? big : small;
}

#ifdef KEEL_HAS_FP64
static inline double ew_tanh_d(double x)
{
    return tanh(x);
}
#endif

#define EW_FLOAT_HELPERS(T, K)                                               \
    static inline T ew_binf_##K(int op, T a, T b)                            \
    {                                                                        \
        T r;                                                                 \
        switch (op) {                                                        \
        case EW_ADD: return a + b;                                           \
        case EW_SUB: return a - b;                                           \
        case EW_MUL: return a * b;                                           \
        case EW_DIV: return a / b;                                           \
        case EW_POW: return ew_pow_##K(a, b);                                \
        case EW_MAX: return a > b || a != a ? a : b;                         \
        case EW_MIN: return a < b || a != a ? a : b;                         \
        case EW_FLOORDIV: return ew_floordiv_##K(a, b);                      \
        case EW_REM:                                                         \
            r = fmod(a, b);                                                  \
            return r != 0 && (b < 0) != (r < 0) ? r + b : r;                 \
        default: return 0;                                                   \
        }                                                                    \
    }                                                                        \
    static inline T ew_unf_##K(int op, T a, T p0, T p1)                      \
    {                                                                        \
        T t, z;                                                              \
        switch (op) {                                                        \
        case EW_NEG: return -a;                                              \
        case EW_ABS: return fabs(a);                                         \
        case EW_SIGN: return a > 0 ? (T)1 : a < 0 ? (T)-1 : a;               \
        case EW_EXP: return exp(a);                                          \
        case EW_LOG: return log(a);                                          \
        case EW_LOG1P: return log1p(a);                                      \
        case EW_SQRT: return sqrt(a);                                        \
        case EW_RSQRT: return (T)1 / sqrt(a);                                \
        case EW_SQUARE: return a * a;                                        \
        case EW_SIN: return sin(a);                                          \
        case EW_COS: return cos(a);                                          \
        case EW_FLOOR: return floor(a);                                      \
        case EW_CEIL: return ceil(a);                                        \
        case EW_ROUND: return round(a);                                      \
        case EW_RELU: return a < 0 ? (T)0 : a;                               \
        case EW_RELU6: return a < 0 ? (T)0 : a > 6 ? (T)6 : a;               \
        case EW_LEAKY: return a > 0 ? a : a * p0;                            \
        case EW_ELU: return a > 0 ? a : p0 * expm1(a);                       \
        case EW_GELU:                                                        \
            return (T)0.5 * a * erfc(-a * (T)0.70710678118654752440);        \
        case EW_GELU_TANH:                                                   \
            return (T)0.5 * a *                                              \
                   ((T)1 + ew_tanh_##K((T)0.79788456080286535588 *            \
                                (a + (T)0.044715 * a * a * a)));       \
        case EW_SILU: return a / ((T)1 + exp(-a));                           \
        case EW_SIGMOID: return (T)1 / ((T)1 + exp(-a));                     \
        case EW_TANH: return ew_tanh_##K(a);                                 \
        case EW_SOFTPLUS:                                                    \
            z = a * p0;                                                      \
            t = (z > 0 ? z : (T)0) + log1p(exp(-fabs(z)));                   \
            return z > p1 ? a : t / p0;                                      \
        case EW_HARDSWISH:                                                   \
            t = a + 3;                                                       \
            t = t < 0 ? (T)0 : t > 6 ? (T)6 : t;                             \
            return a * t / 6;                                                \
        case EW_CLIP: return a < p0 ? p0 : a > p1 ? p1 : a;                  \
        default: return 0;                                                   \
        }                                                                    \
    }
EW_FLOAT_HELPERS(float, f)
#ifdef KEEL_HAS_FP64
EW_FLOAT_HELPERS(double, d)
#endif

/* ---- integer helpers, per integer dtype --------------------------------- */

/* v == -1, without a tautology warning for uchar. */
#define EW_M1(v) ((long)(v) == -1L)

/* Written for signed types; for uchar the b == -1 and sign tests are
 * never true, which leaves plain unsigned division. */
#define EW_INT_HELPERS(s)                                                    \
    static inline C_##s ew_div_##s(C_##s a, C_##s b)                         \
    {                                                                        \
        if (b == 0)                                                          \
            return 0;                                                        \
        if (EW_M1(b))                                                        \
            return (C_##s)(U_##s)((U_##s)0 - (U_##s)a);                      \
        return (C_##s)(a / b);                                               \
    }                                                                        \
    static inline C_##s ew_bini_##s(int op, C_##s a, C_##s b)                \
    {                                                                        \
        C_##s q, r;                                                          \
        U_##s acc = 1, base = (U_##s)a;                                      \
        switch (op) {                                                        \
        case EW_ADD: return (C_##s)(U_##s)((U_##s)a + (U_##s)b);             \
        case EW_SUB: return (C_##s)(U_##s)((U_##s)a - (U_##s)b);             \
        case EW_MUL: return (C_##s)(U_##s)((U_##s)a * (U_##s)b);             \
        case EW_DIV: return ew_div_##s(a, b);                                \
        case EW_POW:                                                         \
            if (b < 0)                                                       \
                return a == 1 ? (C_##s)1                                     \
                       : EW_M1(a) ? (C_##s)((b & 1) ? -1 : 1)                \
                                 : (C_##s)0;                                 \
            for (; b; b = (C_##s)(b >> 1),                                   \
                      base = (U_##s)(base * base))                           \
                if (b & 1)                                                   \
                    acc = (U_##s)(acc * base);                               \
            return (C_##s)acc;                                               \
        case EW_MAX: return a > b ? a : b;                                   \
        case EW_MIN: return a < b ? a : b;                                   \
        case EW_FLOORDIV:                                                    \
            q = ew_div_##s(a, b);                                            \
            if (b != 0 && !EW_M1(b) && a % b != 0 && (a < 0) != (b < 0))     \
                q = (C_##s)(q - 1);                                          \
            return q;                                                        \
        case EW_REM:                                                         \
            if (b == 0 || EW_M1(b))                                          \
                return 0;                                                    \
            r = (C_##s)(a % b);                                              \
            return r != 0 && (r < 0) != (b < 0) ? (C_##s)(r + b) : r;        \
        default: return 0;                                                   \
        }                                                                    \
    }                                                                        \
    static inline C_##s ew_uni_##s(int op, C_##s a, C_##s p0, C_##s p1)      \
    {                                                                        \
        switch (op) {                                                        \
        case EW_NEG: return (C_##s)(U_##s)((U_##s)0 - (U_##s)a);             \
        case EW_ABS:                                                         \
            return a < 0 ? (C_##s)(U_##s)((U_##s)0 - (U_##s)a) : a;          \
        case EW_SIGN: return a > 0 ? (C_##s)1 : a < 0 ? (C_##s)-1 : a;       \
        case EW_SQUARE: return (C_##s)(U_##s)((U_##s)a * (U_##s)a);          \
        case EW_RELU: return a < 0 ? (C_##s)0 : a;                           \
        case EW_CLIP: return a < p0 ? p0 : a > p1 ? p1 : a;                  \
        default: return 0;                                                   \
        }                                                                    \
    }
FOR_INT(EW_INT_HELPERS)

/* ---- binary arithmetic: ew_bin_<sfx> ------------------------------------- */

#define EW_BIN_HEAD(name, s)                                                 \
    __kernel void name##_##s(int op, BUF(x), kdesc xd, int xm, BUF(y),       \
                             kdesc yd, int ym, BUF(out), long n)             \
    {                                                                        \
        long i = get_global_id(0);                                           \
        if (i >= n)                                                          \
            return;                                                          \
        C_##s a = LD_##s(PTR(S_##s, x), ew_ix(&xd, xm, i));                  \
        C_##s b = LD_##s(PTR(S_##s, y), ew_ix(&yd, ym, i));

#define EW_BIN_FLOAT(s)                                                      \
    EW_BIN_HEAD(ew_bin, s)                                                   \
        ST_##s(PTR(S_##s, out), i, CAT(ew_binf, EWK_##s)(op, a, b));         \
    }
#define EW_BIN_INT(s)                                                        \
    EW_BIN_HEAD(ew_bin, s)                                                   \
        ST_##s(PTR(S_##s, out), i, ew_bini_##s(op, a, b));                   \
    }
FOR_FLOAT(EW_BIN_FLOAT)
FOR_INT(EW_BIN_INT)

/* ---- comparisons and logical ops: ew_cmp_<sfx>, bool out ----------------- */

/* float16/bfloat16 compare as float32 (exact); truth is x != 0 (NaN is
 * true). EW_NOT reads x only (the host passes x as y too). */
#define EW_CMP(s)                                                            \
    EW_BIN_HEAD(ew_cmp, s)                                                   \
        int ta = a != 0, tb = b != 0, r;                                     \
        switch (op) {                                                        \
        case EW_EQ: r = a == b; break;                                       \
        case EW_NE: r = a != b; break;                                       \
        case EW_LT: r = a < b; break;                                        \
        case EW_LE: r = a <= b; break;                                       \
        case EW_GT: r = a > b; break;                                        \
        case EW_GE: r = a >= b; break;                                       \
        case EW_AND: r = ta & tb; break;                                     \
        case EW_OR: r = ta | tb; break;                                      \
        case EW_XOR: r = ta ^ tb; break;                                     \
        default: r = !ta; break;                                             \
        }                                                                    \
        PTR(uchar, out)[i] = (uchar)(r != 0);                                \
    }
FOR_ALL(EW_CMP)

/* ---- unary: ew_un_<sfx> -------------------------------------------------- */

#define EW_UN_HEAD(s)                                                        \
    __kernel void ew_un_##s(int op, BUF(x), kdesc xd, int xm, BUF(out),      \
                            long n, P_##s p0, P_##s p1)                      \
    {                                                                        \
        long i = get_global_id(0);                                           \
        if (i >= n)                                                          \
            return;                                                          \
        C_##s a = LD_##s(PTR(S_##s, x), ew_ix(&xd, xm, i));
#define EW_UN_FLOAT(s)                                                       \
    EW_UN_HEAD(s)                                                            \
        ST_##s(PTR(S_##s, out), i, CAT(ew_unf, EWK_##s)(op, a, p0, p1));     \
    }
#define EW_UN_INT(s)                                                         \
    EW_UN_HEAD(s)                                                            \
        ST_##s(PTR(S_##s, out), i,                                           \
               ew_uni_##s(op, a, (C_##s)p0, (C_##s)p1));                     \
    }
FOR_FLOAT(EW_UN_FLOAT)
FOR_INT(EW_UN_INT)

/* ---- dtype-generic loads and stores --------------------------------------- */

/* Float to integer as the CPU plugin's stores: NaN 0, saturating at
 * [lo, hi] (compared in ew_real, returned as the integers li, hi_). */
static inline long ew_sat(ew_real v, ew_real lo, ew_real hi, long li,
                          long hi_)
{
    if (v != v)
        return 0;
    if (v <= lo)
        return li;
    if (v >= hi)
        return hi_;
    return (long)v;
}

/* Element i (storage type of dt) at p as ew_real. */
static inline ew_real ew_load_real(__global uchar *p, int dt, long i)
{
    switch (dt) {
    case EW_DT_F32: return (ew_real)((__global float *)p)[i];
#ifdef KEEL_HAS_FP64
    case EW_DT_F64: return ((__global double *)p)[i];
#endif
    case EW_DT_F16: return (ew_real)vload_half(i, (__global half *)p);
    case EW_DT_BF16: return (ew_real)bf16_to_f32(((__global ushort *)p)[i]);
    case EW_DT_I8: return (ew_real)((__global char *)p)[i];
    case EW_DT_U8: return (ew_real)p[i];
    case EW_DT_I32: return (ew_real)((__global int *)p)[i];
    case EW_DT_I64: return (ew_real)((__global long *)p)[i];
    case EW_DT_BOOL: return p[i] != 0 ? (ew_real)1 : (ew_real)0;
    default: return 0;
    }
}

/* Integer (or bool, as stored) element i at p. */
static inline long ew_load_int(__global uchar *p, int dt, long i)
{
    switch (dt) {
    case EW_DT_I8: return ((__global char *)p)[i];
    case EW_DT_I32: return ((__global int *)p)[i];
    case EW_DT_I64: return ((__global long *)p)[i];
    default: return p[i]; /* u8, bool */
    }
}

/* Store v as dt at element i: floats round to nearest even (float16 and
 * bfloat16 through float32, as the CPU plugin), integers saturate. */
static inline void ew_store_real(__global uchar *p, int dt, long i, ew_real v)
{
    switch (dt) {
    case EW_DT_F32: ((__global float *)p)[i] = (float)v; break;
#ifdef KEEL_HAS_FP64
    case EW_DT_F64: ((__global double *)p)[i] = v; break;
#endif
    case EW_DT_F16: vstore_half_rte((float)v, i, (__global half *)p); break;
    case EW_DT_BF16: ((__global ushort *)p)[i] = f32_to_bf16((float)v); break;
    case EW_DT_I8:
        ((__global char *)p)[i] = (char)ew_sat(v, -128, 127, -128, 127);
        break;
    case EW_DT_U8: p[i] = (uchar)ew_sat(v, 0, 255, 0, 255); break;
    case EW_DT_I32:
        ((__global int *)p)[i] = (int)ew_sat(v, -2147483648.0, 2147483647.0,
                                             -2147483647L - 1, 2147483647L);
        break;
    case EW_DT_I64:
        ((__global long *)p)[i] =
            ew_sat(v, -9223372036854775808.0, 9223372036854774784.0,
                   (-9223372036854775807L - 1), 9223372036854774784L);
        break;
    case EW_DT_BOOL: p[i] = v != 0; break;
    default: break;
    }
}

/* Integer store of an integer value: wraps (bool: v != 0). */
static inline void ew_store_int(__global uchar *p, int dt, long i, long v)
{
    switch (dt) {
    case EW_DT_I8: ((__global char *)p)[i] = (char)v; break;
    case EW_DT_U8: p[i] = (uchar)v; break;
    case EW_DT_I32: ((__global int *)p)[i] = (int)v; break;
    case EW_DT_I64: ((__global long *)p)[i] = v; break;
    case EW_DT_BOOL: p[i] = v != 0; break;
    default: ew_store_real(p, dt, i, (ew_real)v); break;
    }
}

static inline int ew_is_int(int dt)
{
    return dt >= EW_DT_I8 && dt <= EW_DT_BOOL;
}

/* ---- cast ----------------------------------------------------------------- */

/* out[i] = x converted from dtype src to dtype dst: integer to integer
 * exactly (wrapping), anything else through ew_real. */
__kernel void ew_cast(BUF(x), kdesc xd, int xm, int src, BUF(out), int dst,
                      long n)
{
    long i = get_global_id(0);
    if (i >= n)
        return;
    long j = ew_ix(&xd, xm, i);
    __global uchar *xp = PTR(uchar, x), *op = PTR(uchar, out);
    if (ew_is_int(src) && ew_is_int(dst))
        ew_store_int(op, dst, i, ew_load_int(xp, src, j));
    else
        ew_store_real(op, dst, i, ew_load_real(xp, src, j));
}

/* ---- copy, where, full and eye: by element size ----------------------------- */

__kernel void ew_copy(BUF(x), kdesc xd, int xm, BUF(out), int es, long n)
{
    long i = get_global_id(0);
    if (i >= n)
        return;
    long j = ew_ix(&xd, xm, i);
    switch (es) {
    case 1: PTR(uchar, out)[i] = PTR(uchar, x)[j]; break;
    case 2: PTR(ushort, out)[i] = PTR(ushort, x)[j]; break;
    case 4: PTR(uint, out)[i] = PTR(uint, x)[j]; break;
    default: PTR(ulong, out)[i] = PTR(ulong, x)[j]; break;
    }
}

__kernel void ew_where(BUF(c), kdesc cd, int cm, BUF(x), kdesc xd, int xm,
                       BUF(y), kdesc yd, int ym, BUF(out), int es, long n)
{
    long i = get_global_id(0);
    if (i >= n)
        return;
    int t = PTR(uchar, c)[ew_ix(&cd, cm, i)] != 0;
    long j = t ? ew_ix(&xd, xm, i) : ew_ix(&yd, ym, i);
    __global uchar *src = t ? PTR(uchar, x) : PTR(uchar, y);
    switch (es) {
    case 1: PTR(uchar, out)[i] = src[j]; break;
    case 2: PTR(ushort, out)[i] = ((__global ushort *)src)[j]; break;
    case 4: PTR(uint, out)[i] = ((__global uint *)src)[j]; break;
    default: PTR(ulong, out)[i] = ((__global ulong *)src)[j]; break;
    }
}

/* out[i] = pat (the value's bits, low es bytes); eye (m columns):
 * one on the diagonal, zero elsewhere. */
__kernel void ew_fill(BUF(out), int es, ulong pat, long n, int eye, long m,
                      ulong one)
{
    long i = get_global_id(0);
    if (i >= n)
        return;
    ulong v = pat;
    if (eye)
        v = i / m == i % m ? one : 0;
    switch (es) {
    case 1: PTR(uchar, out)[i] = (uchar)v; break;
    case 2: PTR(ushort, out)[i] = (ushort)v; break;
    case 4: PTR(uint, out)[i] = (uint)v; break;
    default: PTR(ulong, out)[i] = v; break;
    }
}

/* ---- arange, linspace --------------------------------------------------------- */

/* out[i] = start + i * step in dtype dt; linspace (last >= 0): element
 * `last` is exactly stop. float32 rounds the ew_real value once. */
__kernel void ew_seq(BUF(out), int dt, ew_real start, ew_real step, long n,
                     long last, ew_real stop)
{
    long i = get_global_id(0);
    if (i >= n)
        return;
    ew_real v = i == last ? stop : start + (ew_real)i * step;
    ew_store_real(PTR(uchar, out), dt, i, v);
}

/* ---- random: Philox counters (keel/philox.h) ------------------------------------ */

/* uniform: a + (b - a) u; normal: a + b * Box-Muller(u1, u2); randint:
 * lo + floor(u * span), below lo + span, lo and span integers. */
__kernel void ew_rand(int kind, BUF(out), int dt, ulong seed, ulong offset,
                      ew_real a, ew_real b, long lo, long span, long n)
{
    long i = get_global_id(0);
    if (i >= n)
        return;
    __global uchar *op = PTR(uchar, out);
    if (kind == EW_NORMAL) {
        ulong c = offset + 2 * (ulong)i;
        ew_real u1 = (ew_real)keel_u01(seed, c);
        ew_real u2 = (ew_real)keel_u01(seed, c + 1);
        ew_real z = sqrt((ew_real)-2 * log((ew_real)1 - u1)) *
                    cos((ew_real)2 * (ew_real)3.14159265358979323846 * u2);
        ew_store_real(op, dt, i, a + b * z);
    } else if (kind == EW_RANDINT) {
        ew_real u = (ew_real)keel_u01(seed, offset + (ulong)i);
        long v = lo + (long)floor(u * (ew_real)span);
        if (v >= lo + span)
            v = lo + span - 1;
        ew_store_int(op, dt, i, v);
    } else {
        ew_real u = (ew_real)keel_u01(seed, offset + (ulong)i);
        ew_store_real(op, dt, i, a + (b - a) * u);
    }
}

/* out[i] = u(seed, offset + i) < p[i] ? 1 : 0, p and out of one float
 * dtype (compared in its compute type, exactly as in double). */
#define EW_BERNOULLI(s)                                                      \
    __kernel void ew_bernoulli_##s(BUF(p), kdesc pd, int pm, BUF(out),     \
                                   ulong seed, ulong offset, long n)         \
    {                                                                        \
        long i = get_global_id(0);                                           \
        if (i >= n)                                                          \
            return;                                                          \
        C_##s pv = LD_##s(PTR(S_##s, p), ew_ix(&pd, pm, i));                 \
        C_##s u = (C_##s)keel_u01(seed, offset + (ulong)i);                  \
        ST_##s(PTR(S_##s, out), i, u < pv ? (C_##s)1 : (C_##s)0);            \
    }
FOR_FLOAT(EW_BERNOULLI)

/* Back to the default for the files that follow. */
#pragma OPENCL FP_CONTRACT ON
