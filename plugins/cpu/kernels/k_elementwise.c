/*
 * Elementwise CPU kernels: binary arithmetic (add ... remainder),
 * comparisons, logical ops, where, and the unary math and activation ops
 * of ops.def.
 *
 * HOW IT IS BUILT
 *
 *  1. Inner loops. Each op is one expression macro, E(a, b, T, U) or
 *     E(a, T, U, p0, p1) (T the element type, U its unsigned twin for
 *     wrapping integer arithmetic, p0/p1 the op's attributes). The LOOP_*
 *     macros turn it into plain loops over restrict-qualified arrays, one
 *     per dtype: a unary loop, and for binary ops three loops, vector-
 *     vector, vector-scalar and scalar-vector (one operand broadcast).
 *     There are no dtype switches and no calls inside them (apart from
 *     libm for float64 transcendentals and the float32 ones that have no
 *     vectorisable form here: log, sin, cos, erfc, expm1, log1p, pow;
 *     at the avx2 and avx512 levels the float32 loops of gelu, log,
 *     log1p, sin and cos hand their rows to SLEEF first, kvmath.h);
 *     gcc vectorises the rest as far as SSE2 allows (not integer
 *     division, nor 64-bit multiplies and compares; see the pragma
 *     below). float32 exp and tanh (exp, sigmoid, silu, tanh, gelu's
 *     tanh form) use the branch-free kexpf/ktanhf below.
 *
 *  2. Row drivers (un_row, bin_row, where_row). A row is a run of
 *     elements with one byte stride per operand. When the strides are the
 *     element sizes (or 0 for a broadcast operand of a binary op) the loop
 *     runs on the memory directly. Otherwise the row is cut into blocks of
 *     EBLK elements: strided operands are gathered into stack buffers,
 *     float16/bfloat16 are converted to float32 (block conversions, F16C
 *     when the CPU has it), the float32 loop runs, and the result is
 *     converted back and scattered.
 *
 *  3. Launch (elem_rows). When every operand is contiguous or a
 *     broadcast scalar, the whole tensor is one row, split across the
 *     plugin's thread pool for large tensors (grain KGRAIN >> cost, so
 *     transcendental ops share work earlier than additions). Any other
 *     layout goes through kiter_call, which merges dimensions and shares
 *     rows.
 *
 * Semantics follow Paddle. Integer arithmetic wraps (two's complement).
 * divide is float only (the core divides integers as float32, as Paddle
 * does); floor_divide floors, remainder has the sign of the divisor
 * (Python %); an integer zero divisor gives 0. pow on
 * integers is exact integer power (wrapping); a negative exponent gives 0
 * except for the bases 1 and -1. maximum/minimum/relu/clip/sign propagate
 * NaN. round is half away from zero. clip on integer dtypes converts the
 * float bounds like Paddle's Scalar::to<T>() (truncation toward zero),
 * saturated to the dtype's range. The kernels compute float16 and
 * bfloat16 in float32.
 */

/*
 * gcc 12 at -O2 does not vectorise these loops (its -O2 vectoriser finds
 * no vector types without -ftree-vectorize), and without
 * -fno-trapping-math it keeps branches for float selects. The kernels do
 * not trap on floating-point exceptions, so ask for both, for this file.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "no-trapping-math")
#endif

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "kern.h"
#include "kvmath.h"

/* Type-generic math last: exp(a) is expf for a float a, and so on. */
#include <tgmath.h>

/* Elements per block in the gathered / converted paths. */
#define EBLK 512

/* Attributes of one launch, in the representation each loop uses. */
struct eparam {
    double f[2];  /* as given: f64 loops                          */
    float s[2];   /* rounded to float: f32 (and f16/bf16) loops    */
    int64_t i[2]; /* truncated, saturated to the dtype: int loops  */
};

typedef void (*un_fn)(void *o, const void *x, int64_t n,
                      const struct eparam *P);
typedef void (*bin_fn)(void *o, const void *x, const void *y, int64_t n,
                       const struct eparam *P);

/* ---- helpers used by the expressions ------------------------------------ */

/* Vectorisable floor/ceil/round: for |a| < M (2^23 or 2^52) (|a| + M) - M
 * is |a| rounded to the nearest integer; larger values, infinities and
 * NaN are returned as they are. */
#define ROUNDING_HELPERS(T, M)                                               \
    static inline T floor_##T(T a)                                           \
    {                                                                        \
        T ax = fabs(a), r = copysign((ax + M) - M, a);                       \
        r = r > a ? r - 1 : r;                                               \
        return ax < M ? r : a;                                               \
    }                                                                        \
    static inline T ceil_##T(T a)                                            \
    {                                                                        \
        T ax = fabs(a), r = copysign((ax + M) - M, a);                       \
        r = r < a ? r + 1 : r;                                               \
        return ax < M ? r : a;                                               \
    }                                                                        \
    static inline T round_##T(T a)                                           \
    {                                                                        \
        T ax = fabs(a), r = (ax + M) - M;                                    \
        r = ax - r >= (T)0.5 ? r + 1 : r;                                    \
        return ax < M ? copysign(r, a) : a;                                  \
    }
ROUNDING_HELPERS(float, 0x1p23f)
ROUNDING_HELPERS(double, 0x1p52)

/* Float division helpers (Python semantics for floor division and %). */
static inline double floordiv_double(double a, double b)
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

/* The double quotient of two floats is never rounded up to an integer
 * the exact quotient lies below, so this floor is exact. */
static inline float floordiv_float(float a, float b)
{
    return (float)floor((double)a / (double)b);
}

#define FLOAT_REM_HELPER(T)                                                  \
    static inline T rem_##T(T a, T b)                                        \
    {                                                                        \
        T r = fmod(a, b);                                                    \
        return r != 0 && (b < 0) != (r < 0) ? r + b : r;                     \
    }
FLOAT_REM_HELPER(float)
FLOAT_REM_HELPER(double)

/* softplus(a) = ln(1 + e^(beta a)) / beta, in a form that cannot
 * overflow: max(z, 0) + ln(1 + e^-|z|). */
#define SOFTPLUS_HELPER(T)                                                   \
    static inline T softplus_##T(T a, T beta, T threshold)                   \
    {                                                                        \
        T z = a * beta;                                                      \
        T sp = (z > 0 ? z : (T)0) + log1p(exp(-fabs(z)));                    \
        return z > threshold ? a : sp / beta;                                \
    }
SOFTPLUS_HELPER(float)
SOFTPLUS_HELPER(double)

#define HARDSWISH_HELPER(T)                                                  \
    static inline T hardswish_##T(T a)                                       \
    {                                                                        \
        T t = a + 3;                                                         \
        t = t < 0 ? (T)0 : t > 6 ? (T)6 : t;                                 \
        return a * t / 6;                                                    \
    }
HARDSWISH_HELPER(float)
HARDSWISH_HELPER(double)

/*
 * float32 exp and tanh as plain branch-free C that gcc vectorises (libm's
 * expf/tanhf are one call per element). These are the only "clever" math
 * here; float64 keeps libm.
 *
 * kexpf: Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, Cephes' degree
 * 5 polynomial for e^r, then 2^n applied as two exact power-of-two
 * factors so that results from the smallest subnormal up to FLT_MAX need
 * no special path. Max error 2 ulp (1 ulp of the smallest subnormal
 * below FLT_MIN); exact inf above ln(FLT_MAX), 0 below ln(2^-150), NaN
 * propagates.
 */
static inline float f32_from_bits(uint32_t u)
{
    float f;

    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline float kexpf(float x)
{
    /* NaN is clamped too (to 0), so that the conversion to int32 below
     * stays defined; the result for NaN is x itself (the last line). */
    float xc = x < -104.0f ? -104.0f : x > 89.0f ? 89.0f : x == x ? x : 0.0f;
    float n = (xc * 1.44269504088896341f + 0x1.8p23f) - 0x1.8p23f;
    float r = xc - n * 0.693359375f;
    float p;
    int32_t ni, h;

    r = r - n * -2.12194440e-4f;
    p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    ni = (int32_t)n; /* in [-150, 128]: two factors in the normal range */
    h = ni / 2;
    p = p * f32_from_bits((uint32_t)(h + 127) << 23) *
        f32_from_bits((uint32_t)(ni - h + 127) << 23);
    p = x > 88.72283935546875f ? INFINITY : p;
    p = x < -103.97208404541015625f ? 0.0f : p;
    return x != x ? x : p;
}

/* ktanhf: 1 - 2 / (e^2|x| + 1) with the sign of x, and Cephes' odd
 * polynomial below |x| = 0.5493 where that form cancels. Max error
 * 3 ulp; +-1 at +-inf, NaN propagates. */
static inline float ktanhf(float x)
{
    float ax = fabs(x), z = x * x;
    float big = copysign(1.0f - 2.0f / (kexpf(2.0f * ax) + 1.0f), x);
    float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z -
                     5.37397155531e-2f) * z + 1.33314422036e-1f) * z -
                   3.33332819422e-1f) * z * x + x;

    return ax > 0.5493f ? big : small;
}

/* exp and tanh by element type: the vectorisable float32 forms, libm for
 * float64. */
static inline float exp_float(float a)
{
    return kexpf(a);
}

static inline double exp_double(double a)
{
    return exp(a);
}

static inline float tanh_float(float a)
{
    return ktanhf(a);
}

static inline double tanh_double(double a)
{
    return tanh(a);
}

/* Signed integer division family: zero divisor gives 0, and x / -1 is
 * computed as a wrapping negation (no overflow trap for the minimum). */
#define SINT_HELPERS(T, U)                                                   \
    static inline T div_##T(T a, T b)                                        \
    {                                                                        \
        if (b == 0)                                                          \
            return 0;                                                        \
        if (b == -1)                                                         \
            return (T)(0 - (U)a);                                            \
        return (T)(a / b);                                                   \
    }                                                                        \
    static inline T floordiv_##T(T a, T b)                                   \
    {                                                                        \
        T q = div_##T(a, b);                                                 \
        if (b != 0 && b != -1 && a % b != 0 && (a < 0) != (b < 0))           \
            q = (T)(q - 1);                                                  \
        return q;                                                            \
    }                                                                        \
    static inline T rem_##T(T a, T b)                                        \
    {                                                                        \
        T r;                                                                 \
        if (b == 0 || b == -1)                                               \
            return 0;                                                        \
        r = (T)(a % b);                                                      \
        return r != 0 && (r < 0) != (b < 0) ? (T)(r + b) : r;                \
    }                                                                        \
    static inline T pow_##T(T a, T b)                                        \
    {                                                                        \
        U r = 1, base = (U)a;                                                \
        if (b < 0)                                                           \
            return a == 1 ? (T)1 : a == -1 ? (T)((b & 1) ? -1 : 1) : (T)0;  \
        for (; b; b = (T)(b >> 1), base = (U)(base * base))                  \
            if (b & 1)                                                       \
                r = (U)(r * base);                                           \
        return (T)r;                                                         \
    }
SINT_HELPERS(int8_t, uint8_t)
SINT_HELPERS(int32_t, uint32_t)
SINT_HELPERS(int64_t, uint64_t)

static inline uint8_t div_uint8_t(uint8_t a, uint8_t b)
{
    return b ? (uint8_t)(a / b) : 0;
}

static inline uint8_t floordiv_uint8_t(uint8_t a, uint8_t b)
{
    return div_uint8_t(a, b);
}

static inline uint8_t rem_uint8_t(uint8_t a, uint8_t b)
{
    return b ? (uint8_t)(a % b) : 0;
}

static inline uint8_t pow_uint8_t(uint8_t a, uint8_t b)
{
    unsigned r = 1, base = a;

    for (; b; b >>= 1, base = (base * base) & 0xffu)
        if (b & 1)
            r = (r * base) & 0xffu;
    return (uint8_t)r;
}

/* Truth of an element (x != 0) by storage type; float16/bfloat16 are
 * tested on their bits (anything but +-0 is true, NaN included). */
#define TRUTH(a, T) truth_##T(a)
#define TRUTH_HELPER(T)                                                      \
    static inline int truth_##T(T a)                                         \
    {                                                                        \
        return a != 0;                                                       \
    }
TRUTH_HELPER(float)
TRUTH_HELPER(double)
TRUTH_HELPER(int8_t)
TRUTH_HELPER(uint8_t)
TRUTH_HELPER(int32_t)
TRUTH_HELPER(int64_t)
static inline int truth_uint16_t(uint16_t a)
{
    return (a & 0x7fffu) != 0;
}

/* ---- loop generators ----------------------------------------------------- */

#define LOOP_UN(fn, T, U, TO, PS, E)                                         \
    static void fn(void *restrict o_, const void *restrict x_, int64_t n,    \
                   const struct eparam *P)                                   \
    {                                                                        \
        TO *restrict o = o_;                                                 \
        const T *restrict x = x_;                                            \
        const T p0 = (T)P->PS[0], p1 = (T)P->PS[1];                          \
                                                                             \
        (void)p0;                                                            \
        (void)p1;                                                            \
        for (int64_t i = 0; i < n; i++) {                                    \
            T a = x[i];                                                      \
            o[i] = (TO)(E(a, T, U, p0, p1));                                 \
        }                                                                    \
    }

#define LOOP_BIN(fn, T, U, TO, E)                                            \
    static void fn##_vv(void *restrict o_, const void *restrict x_,         \
                        const void *restrict y_, int64_t n,                  \
                        const struct eparam *P)                              \
    {                                                                        \
        TO *restrict o = o_;                                                 \
        const T *restrict x = x_, *restrict y = y_;                          \
                                                                             \
        (void)P;                                                             \
        for (int64_t i = 0; i < n; i++) {                                    \
            T a = x[i], b = y[i];                                            \
            o[i] = (TO)(E(a, b, T, U));                                      \
        }                                                                    \
    }                                                                        \
    static void fn##_vs(void *restrict o_, const void *restrict x_,         \
                        const void *restrict y_, int64_t n,                  \
                        const struct eparam *P)                              \
    {                                                                        \
        TO *restrict o = o_;                                                 \
        const T *restrict x = x_;                                            \
        const T b = *(const T *)y_;                                          \
                                                                             \
        (void)P;                                                             \
        for (int64_t i = 0; i < n; i++) {                                    \
            T a = x[i];                                                      \
            o[i] = (TO)(E(a, b, T, U));                                      \
        }                                                                    \
    }                                                                        \
    static void fn##_sv(void *restrict o_, const void *restrict x_,         \
                        const void *restrict y_, int64_t n,                  \
                        const struct eparam *P)                              \
    {                                                                        \
        TO *restrict o = o_;                                                 \
        const T a = *(const T *)x_;                                          \
        const T *restrict y = y_;                                            \
                                                                             \
        (void)P;                                                             \
        for (int64_t i = 0; i < n; i++) {                                    \
            T b = y[i];                                                      \
            o[i] = (TO)(E(a, b, T, U));                                      \
        }                                                                    \
    }

/* Instantiation per dtype family: name##_<tag>. TB is the output type of
 * the family's loops: the element type itself, or uint8_t (bool). */
#define UN_FLOAT(name, TB, E)                                                \
    LOOP_UN(name##_f32, float, float, TB(float), s, E)                       \
    LOOP_UN(name##_f64, double, double, TB(double), f, E)
#define UN_SINT(name, TB, E)                                                 \
    LOOP_UN(name##_i8, int8_t, uint8_t, TB(int8_t), i, E)                    \
    LOOP_UN(name##_i32, int32_t, uint32_t, TB(int32_t), i, E)                \
    LOOP_UN(name##_i64, int64_t, uint64_t, TB(int64_t), i, E)
#define UN_UINT(name, TB, E)                                                 \
    LOOP_UN(name##_u8, uint8_t, uint8_t, TB(uint8_t), i, E)

#define BIN_FLOAT(name, TB, E)                                               \
    LOOP_BIN(name##_f32, float, float, TB(float), E)                         \
    LOOP_BIN(name##_f64, double, double, TB(double), E)
#define BIN_SINT(name, TB, E)                                                \
    LOOP_BIN(name##_i8, int8_t, uint8_t, TB(int8_t), E)                      \
    LOOP_BIN(name##_i32, int32_t, uint32_t, TB(int32_t), E)                  \
    LOOP_BIN(name##_i64, int64_t, uint64_t, TB(int64_t), E)
#define BIN_UINT(name, TB, E)                                                \
    LOOP_BIN(name##_u8, uint8_t, uint8_t, TB(uint8_t), E)
#define SAME(T) T
#define BOOL(T) uint8_t

/* ---- op descriptions ----------------------------------------------------- */

struct eloops {
    un_fn un;
    bin_fn vv, vs, sv;
};

struct eop {
    const char *name;
    int nin;
    bool bool_out;       /* comparisons and logical ops                 */
    int cost;            /* log2 of the cost per element relative to an
                          * add: the thread grain is KGRAIN >> cost      */
    const char *attr[2]; /* float attributes -> p0, p1                  */
    double def[2];
    /* Loops by storage dtype. A float16/bfloat16 entry left empty means:
     * convert to float32 and use the float32 loops. */
    struct eloops l[KEEL_DTYPE_COUNT_];
};

#define L_UN(name, dt, tag) [dt] = {.un = name##_##tag}
#define L_BIN(name, dt, tag)                                                 \
    [dt] = {.vv = name##_##tag##_vv, .vs = name##_##tag##_vs,                \
            .sv = name##_##tag##_sv}
#define L_FLOAT(K, name) K(name, KEEL_F32, f32), K(name, KEEL_F64, f64)
#define L_SINT(K, name)                                                      \
    K(name, KEEL_I8, i8), K(name, KEEL_I32, i32), K(name, KEEL_I64, i64)
#define L_UINT(K, name) K(name, KEEL_U8, u8)
#define L_BOOL(K, name) K(name, KEEL_BOOL, u8)
#define L_HALF(K, name) K(name, KEEL_F16, h), K(name, KEEL_BF16, h)

/* ---- binary arithmetic --------------------------------------------------- */

#define E_ADD(a, b, T, U) ((U)(a) + (U)(b))
#define E_SUB(a, b, T, U) ((U)(a) - (U)(b))
#define E_MUL(a, b, T, U) ((U)(a) * (U)(b))
#define E_FDIV(a, b, T, U) ((a) / (b))
#define E_FPOW(a, b, T, U) pow(a, b)
#define E_IPOW(a, b, T, U) pow_##T(a, b)
#define E_FMAX(a, b, T, U) ((a) > (b) || (a) != (a) ? (a) : (b))
#define E_FMIN(a, b, T, U) ((a) < (b) || (a) != (a) ? (a) : (b))
#define E_IMAX(a, b, T, U) ((a) > (b) ? (a) : (b))
#define E_IMIN(a, b, T, U) ((a) < (b) ? (a) : (b))
#define E_FLOORDIV(a, b, T, U) floordiv_##T(a, b)
#define E_REM(a, b, T, U) rem_##T(a, b)

/* An arithmetic op over every numeric dtype: float and integer forms. */
#define DEF_ARITH(name, cost_, EF, EI)                                       \
    BIN_FLOAT(name, SAME, EF)                                                \
    BIN_SINT(name, SAME, EI)                                                 \
    BIN_UINT(name, SAME, EI)                                                 \
    static const struct eop op_##name = {                                    \
        #name, 2, false, cost_, {NULL, NULL}, {0, 0},                        \
        {L_FLOAT(L_BIN, name), L_SINT(L_BIN, name), L_UINT(L_BIN, name)}};

DEF_ARITH(add, 0, E_ADD, E_ADD)
DEF_ARITH(subtract, 0, E_SUB, E_SUB)
DEF_ARITH(multiply, 0, E_MUL, E_MUL)
/* divide: float only; the core divides integers as float32 (Paddle). */
BIN_FLOAT(divide, SAME, E_FDIV)
static const struct eop op_divide = {"divide", 2, false, 1, {NULL, NULL},
                                     {0, 0}, {L_FLOAT(L_BIN, divide)}};
DEF_ARITH(pow, 4, E_FPOW, E_IPOW)
DEF_ARITH(maximum, 0, E_FMAX, E_IMAX)
DEF_ARITH(minimum, 0, E_FMIN, E_IMIN)
DEF_ARITH(floor_divide, 3, E_FLOORDIV, E_FLOORDIV)
DEF_ARITH(remainder, 3, E_REM, E_REM)

/* ---- comparisons and logical ops (bool outputs) -------------------------- */

#define E_EQ(a, b, T, U) ((a) == (b))
#define E_NE(a, b, T, U) ((a) != (b))
#define E_LT(a, b, T, U) ((a) < (b))
#define E_LE(a, b, T, U) ((a) <= (b))
#define E_GT(a, b, T, U) ((a) > (b))
#define E_GE(a, b, T, U) ((a) >= (b))

/* bool compares as uint8 0/1; float16/bfloat16 through float32. */
#define DEF_CMP(name, E)                                                     \
    BIN_FLOAT(name, BOOL, E)                                                 \
    BIN_SINT(name, BOOL, E)                                                  \
    BIN_UINT(name, BOOL, E)                                                  \
    static const struct eop op_##name = {                                    \
        #name, 2, true, 0, {NULL, NULL}, {0, 0},                             \
        {L_FLOAT(L_BIN, name), L_SINT(L_BIN, name), L_UINT(L_BIN, name),     \
         L_BOOL(L_BIN, name)}};

DEF_CMP(equal, E_EQ)
DEF_CMP(not_equal, E_NE)
DEF_CMP(less, E_LT)
DEF_CMP(less_equal, E_LE)
DEF_CMP(greater, E_GT)
DEF_CMP(greater_equal, E_GE)

/* Bitwise & | ^ of 0/1 truths: no short-circuit branches in the loop. */
#define E_AND(a, b, T, U) (TRUTH(a, T) & TRUTH(b, T))
#define E_OR(a, b, T, U) (TRUTH(a, T) | TRUTH(b, T))
#define E_XOR(a, b, T, U) (TRUTH(a, T) ^ TRUTH(b, T))

/* Logical ops read storage directly, float16/bfloat16 included. */
#define DEF_LOGICAL(name, E)                                                 \
    BIN_FLOAT(name, BOOL, E)                                                 \
    BIN_SINT(name, BOOL, E)                                                  \
    BIN_UINT(name, BOOL, E)                                                  \
    LOOP_BIN(name##_h, uint16_t, uint16_t, uint8_t, E)                       \
    static const struct eop op_##name = {                                    \
        #name, 2, true, 0, {NULL, NULL}, {0, 0},                             \
        {L_FLOAT(L_BIN, name), L_SINT(L_BIN, name), L_UINT(L_BIN, name),     \
         L_BOOL(L_BIN, name), L_HALF(L_BIN, name)}};

DEF_LOGICAL(logical_and, E_AND)
DEF_LOGICAL(logical_or, E_OR)
DEF_LOGICAL(logical_xor, E_XOR)

#define E_NOT(a, T, U, p0, p1) (!TRUTH(a, T))
UN_FLOAT(logical_not, BOOL, E_NOT)
UN_SINT(logical_not, BOOL, E_NOT)
UN_UINT(logical_not, BOOL, E_NOT)
LOOP_UN(logical_not_h, uint16_t, uint16_t, uint8_t, i, E_NOT)
static const struct eop op_logical_not = {
    "logical_not", 1, true, 0, {NULL, NULL}, {0, 0},
    {L_FLOAT(L_UN, logical_not), L_SINT(L_UN, logical_not),
     L_UINT(L_UN, logical_not), L_BOOL(L_UN, logical_not),
     L_HALF(L_UN, logical_not)}};

/* ---- unary ops ----------------------------------------------------------- */

#define E_FNEG(a, T, U, p0, p1) (-(a))
#define E_INEG(a, T, U, p0, p1) (0 - (U)(a))
#define E_FABS(a, T, U, p0, p1) fabs(a)
#define E_IABS(a, T, U, p0, p1) ((a) < 0 ? (T)(0 - (U)(a)) : (a))
#define E_SIGN(a, T, U, p0, p1) ((a) > 0 ? (T)1 : (a) < 0 ? (T)-1 : (a))
#define E_EXP(a, T, U, p0, p1) exp_##T(a)
#define E_LOG(a, T, U, p0, p1) log(a)
#define E_LOG1P(a, T, U, p0, p1) log1p(a)
#define E_FSQUARE(a, T, U, p0, p1) ((a) * (a))
#define E_ISQUARE(a, T, U, p0, p1) ((U)(a) * (U)(a))
#define E_SIN(a, T, U, p0, p1) sin(a)
#define E_COS(a, T, U, p0, p1) cos(a)
#define E_FLOOR(a, T, U, p0, p1) floor_##T(a)
#define E_CEIL(a, T, U, p0, p1) ceil_##T(a)
#define E_ROUND(a, T, U, p0, p1) round_##T(a)
#define E_RELU(a, T, U, p0, p1) ((a) < 0 ? (T)0 : (a))
#define E_RELU6(a, T, U, p0, p1) ((a) < 0 ? (T)0 : (a) > 6 ? (T)6 : (a))
#define E_LEAKY(a, T, U, p0, p1) ((a) > 0 ? (a) : (a) * (p0))
#define E_ELU(a, T, U, p0, p1) ((a) > 0 ? (a) : (p0) * expm1(a))
/* 0.5 x (1 + erf(x / sqrt 2)) written with erfc: no cancellation for
 * negative x. */
#define E_GELU(a, T, U, p0, p1)                                              \
    ((T)0.5 * (a) * erfc(-(a) * (T)0.70710678118654752440))
#define E_GELU_TANH(a, T, U, p0, p1)                                         \
    ((T)0.5 * (a) *                                                          \
     ((T)1 + tanh_##T((T)0.79788456080286535588 *                            \
                  ((a) + (T)0.044715 * (a) * (a) * (a)))))
#define E_SILU(a, T, U, p0, p1) ((a) / ((T)1 + exp_##T(-(a))))
#define E_SIGMOID(a, T, U, p0, p1) ((T)1 / ((T)1 + exp_##T(-(a))))
#define E_TANH(a, T, U, p0, p1) tanh_##T(a)
#define E_SOFTPLUS(a, T, U, p0, p1) softplus_##T(a, p0, p1)
#define E_HARDSWISH(a, T, U, p0, p1) hardswish_##T(a)
#define E_CLIP(a, T, U, p0, p1) ((a) < (p0) ? (p0) : (a) > (p1) ? (p1) : (a))

#define NOATTR {NULL, NULL}, {0, 0}
#define ATTR1(n0, d0) {n0, NULL}, {d0, 0}
#define ATTR2(n0, d0, n1, d1) {n0, n1}, {d0, d1}

/* Float-only unary op. */
#define DEF_UN_F(name, cost_, attrs, E)                                      \
    UN_FLOAT(name, SAME, E)                                                  \
    static const struct eop op_##name = {#name, 1, false, cost_, attrs,      \
                                         {L_FLOAT(L_UN, name)}};
/* Float-only unary op whose float32 loop first offers the row to the
 * vector math (kvmath.h: SLEEF at the avx2 and avx512 levels); libm's
 * loop runs when that declines. */
#define DEF_UN_FV(name, cost_, attrs, E, VFN)                                \
    LOOP_UN(name##_f32s, float, float, float, s, E)                          \
    static void name##_f32(void *restrict o_, const void *restrict x_,       \
                           int64_t n, const struct eparam *P)                \
    {                                                                        \
        if (!kvm_un_f32(VFN, o_, x_, n))                                     \
            name##_f32s(o_, x_, n, P);                                       \
    }                                                                        \
    LOOP_UN(name##_f64, double, double, double, f, E)                        \
    static const struct eop op_##name = {#name, 1, false, cost_, attrs,      \
                                         {L_FLOAT(L_UN, name)}};
/* Float and signed integer dtypes (KEEL_DT_SIGNED). */
#define DEF_UN_S(name, cost_, EF, EI)                                        \
    UN_FLOAT(name, SAME, EF)                                                 \
    UN_SINT(name, SAME, EI)                                                  \
    static const struct eop op_##name = {                                    \
        #name, 1, false, cost_, NOATTR,                                      \
        {L_FLOAT(L_UN, name), L_SINT(L_UN, name)}};
/* Every numeric dtype. */
#define DEF_UN_N(name, cost_, attrs, EF, EI)                                 \
    UN_FLOAT(name, SAME, EF)                                                 \
    UN_SINT(name, SAME, EI)                                                  \
    UN_UINT(name, SAME, EI)                                                  \
    static const struct eop op_##name = {                                    \
        #name, 1, false, cost_, attrs,                                       \
        {L_FLOAT(L_UN, name), L_SINT(L_UN, name), L_UINT(L_UN, name)}};

/*
 * sqrt and rsqrt: gcc keeps an errno branch around every sqrt() call
 * (an optimize pragma's no-math-errno does not reach the builtin in gcc
 * 12), which blocks vectorisation; use the SSE2 square root directly
 * where it exists. rsqrt is the exact 1 / sqrt, not rsqrtps.
 */
#ifdef __SSE2__
#define SQRT_SIMD(T, V, sfx, recip)                                          \
    for (; i + (int64_t)(sizeof(V) / sizeof(T)) <= n;                        \
         i += (int64_t)(sizeof(V) / sizeof(T))) {                            \
        V v = _mm_sqrt_##sfx(_mm_loadu_##sfx(x + i));                        \
        if (recip)                                                           \
            v = _mm_div_##sfx(_mm_set1_##sfx(1), v);                         \
        _mm_storeu_##sfx(o + i, v);                                          \
    }
#else
#define SQRT_SIMD(T, V, sfx, recip)
#endif

#define LOOP_SQRT(fn, T, V, sfx, recip)                                      \
    static void fn(void *o_, const void *x_, int64_t n,                      \
                   const struct eparam *P)                                   \
    {                                                                        \
        T *restrict o = o_;                                                  \
        const T *restrict x = x_;                                            \
        int64_t i = 0;                                                       \
                                                                             \
        (void)P;                                                             \
        SQRT_SIMD(T, V, sfx, recip)                                          \
        for (; i < n; i++)                                                   \
            o[i] = recip ? (T)1 / sqrt(x[i]) : sqrt(x[i]);                   \
    }
LOOP_SQRT(sqrt_f32, float, __m128, ps, 0)
LOOP_SQRT(sqrt_f64, double, __m128d, pd, 0)
LOOP_SQRT(rsqrt_f32, float, __m128, ps, 1)
LOOP_SQRT(rsqrt_f64, double, __m128d, pd, 1)

/* The same square roots for other kernels (Adam's sqrt(v)). */
void cpu_vsqrt_f32(float *o, const float *x, int64_t n)
{
    sqrt_f32(o, x, n, NULL);
}

void cpu_vsqrt_f64(double *o, const double *x, int64_t n)
{
    sqrt_f64(o, x, n, NULL);
}
static const struct eop op_sqrt = {"sqrt", 1, false, 1, NOATTR,
                                   {L_FLOAT(L_UN, sqrt)}};
static const struct eop op_rsqrt = {"rsqrt", 1, false, 1, NOATTR,
                                    {L_FLOAT(L_UN, rsqrt)}};

DEF_UN_S(neg, 0, E_FNEG, E_INEG)
DEF_UN_S(abs, 0, E_FABS, E_IABS)
DEF_UN_S(sign, 0, E_SIGN, E_SIGN)
DEF_UN_S(relu, 0, E_RELU, E_RELU)
DEF_UN_F(exp, 3, NOATTR, E_EXP)
DEF_UN_FV(log, 3, NOATTR, E_LOG, KVM_LOG)
DEF_UN_FV(log1p, 3, NOATTR, E_LOG1P, KVM_LOG1P)
DEF_UN_FV(sin, 3, NOATTR, E_SIN, KVM_SIN)
DEF_UN_FV(cos, 3, NOATTR, E_COS, KVM_COS)
DEF_UN_F(floor, 0, NOATTR, E_FLOOR)
DEF_UN_F(ceil, 0, NOATTR, E_CEIL)
DEF_UN_F(round, 0, NOATTR, E_ROUND)
DEF_UN_F(relu6, 0, NOATTR, E_RELU6)
DEF_UN_F(leaky_relu, 0, ATTR1("negative_slope", 0.01), E_LEAKY)
DEF_UN_F(elu, 3, ATTR1("alpha", 1.0), E_ELU)
DEF_UN_FV(gelu, 4, NOATTR, E_GELU, KVM_GELU)
DEF_UN_F(gelu_tanh, 4, NOATTR, E_GELU_TANH)
DEF_UN_F(silu, 3, NOATTR, E_SILU)
DEF_UN_F(sigmoid, 3, NOATTR, E_SIGMOID)
DEF_UN_F(tanh, 3, NOATTR, E_TANH)
DEF_UN_F(softplus, 4, ATTR2("beta", 1.0, "threshold", 20.0), E_SOFTPLUS)
DEF_UN_F(hardswish, 0, NOATTR, E_HARDSWISH)
DEF_UN_N(square, 0, NOATTR, E_FSQUARE, E_ISQUARE)
DEF_UN_N(clip, 0, ATTR2("min", -INFINITY, "max", INFINITY), E_CLIP, E_CLIP)

/* ---- where: selection on storage, by element size ------------------------ */

/* Branch-free select through an all-ones / all-zeros mask: vectorises
 * for every element size (a plain ?: does not for 8-byte elements). Y is
 * y[i], or y[0] for a broadcast scalar y (where_ys_*: relu's gradient is
 * where(out > 0, dout, 0)). */
#define LOOP_WHERE(name, T, Y)                                               \
    static void name(void *restrict o_, const uint8_t *restrict c,           \
                     const void *restrict x_, const void *restrict y_,       \
                     int64_t n)                                              \
    {                                                                        \
        T *restrict o = o_;                                                  \
        const T *restrict x = x_, *restrict y = y_;                          \
                                                                             \
        for (int64_t i = 0; i < n; i++) {                                    \
            T m = (T)((T)0 - (T)(c[i] != 0));                                \
            o[i] = (T)((x[i] & m) | (Y & (T)~m));                            \
        }                                                                    \
    }
LOOP_WHERE(where_uint8_t, uint8_t, y[i])
LOOP_WHERE(where_uint16_t, uint16_t, y[i])
LOOP_WHERE(where_uint32_t, uint32_t, y[i])
LOOP_WHERE(where_uint64_t, uint64_t, y[i])
LOOP_WHERE(where_ys_uint8_t, uint8_t, y[0])
LOOP_WHERE(where_ys_uint16_t, uint16_t, y[0])
LOOP_WHERE(where_ys_uint32_t, uint32_t, y[0])
LOOP_WHERE(where_ys_uint64_t, uint64_t, y[0])

typedef void (*where_fn)(void *o, const uint8_t *c, const void *x,
                         const void *y, int64_t n);

/* ---- gathers, scatters, conversions -------------------------------------- */

enum { CV_NONE = 0, CV_F16 = 1, CV_BF16 = 2 };

/* dst[i] = element at src + i * st (st in bytes; 0 repeats one element). */
static void gather(void *dst, const char *src, int64_t st, int64_t n,
                   uint32_t es)
{
    switch (es) {
    case 1: {
        uint8_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = *(const uint8_t *)(src + i * st);
        break;
    }
    case 2: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            memcpy(&d[i], src + i * st, 2);
        break;
    }
    case 4: {
        uint32_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            memcpy(&d[i], src + i * st, 4);
        break;
    }
    default: {
        uint64_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            memcpy(&d[i], src + i * st, 8);
        break;
    }
    }
}

static void scatter(char *dst, int64_t st, const void *src, int64_t n,
                    uint32_t es)
{
    if (st == (int64_t)es) {
        memcpy(dst, src, (size_t)(n * es));
        return;
    }
    switch (es) {
    case 1:
        for (int64_t i = 0; i < n; i++)
            dst[i * st] = (char)((const uint8_t *)src)[i];
        break;
    case 2:
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + i * st, (const uint16_t *)src + i, 2);
        break;
    case 4:
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + i * st, (const uint32_t *)src + i, 4);
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + i * st, (const uint64_t *)src + i, 8);
        break;
    }
}

static void half_to_f32(int cv, const uint16_t *h, float *f, int64_t n)
{
    if (cv == CV_F16)
        kf16_to_f32(h, f, n);
    else
        kbf16_to_f32(h, f, n);
}

static void f32_to_half(int cv, const float *f, uint16_t *h, int64_t n)
{
    if (cv == CV_F16)
        kf32_to_f16(f, h, n);
    else
        kf32_to_bf16(f, h, n);
}

/* ---- row drivers --------------------------------------------------------- */

/* One launch of a unary or binary op, shared read-only by all rows. */
struct erow {
    const struct eloops *l;
    const struct eparam *p;
    uint32_t ies, oes; /* storage element sizes of inputs and output */
    int cin, cout;     /* CV_*: conversion of inputs / output       */
};

/* n elements of an input at src (byte stride st) in the loops' layout:
 * the memory itself when it already is, else buf (EBLK elements). */
static const void *load_block(const struct erow *r, const char *src,
                              int64_t st, int64_t n, void *buf,
                              uint16_t *tmp)
{
    if (r->cin == CV_NONE) {
        if (st == (int64_t)r->ies)
            return src;
        gather(buf, src, st, n, r->ies);
        return buf;
    }
    if (st != 2) {
        gather(tmp, src, st, n, 2);
        src = (const char *)tmp;
    }
    half_to_f32(r->cin, (const uint16_t *)src, buf, n);
    return buf;
}

/* Write n results from res (the loops' layout) to dst (byte stride st). */
static void store_block(const struct erow *r, char *dst, int64_t st,
                        const void *res, int64_t n, uint16_t *tmp)
{
    if (r->cout == CV_NONE) {
        scatter(dst, st, res, n, r->oes);
        return;
    }
    if (st == 2) {
        f32_to_half(r->cout, res, (uint16_t *)dst, n);
        return;
    }
    f32_to_half(r->cout, res, tmp, n);
    scatter(dst, st, tmp, n, 2);
}

static bool out_direct(const struct erow *r, int64_t st)
{
    return r->cout == CV_NONE && st == (int64_t)r->oes;
}

static void un_blocks(const struct erow *r, char *o, const char *x,
                      const int64_t *st, int64_t n)
{
    double xb[EBLK], ob[EBLK];
    uint16_t tmp[EBLK];

    for (int64_t b = 0; b < n; b += EBLK) {
        int64_t m = n - b < EBLK ? n - b : EBLK;
        bool direct = out_direct(r, st[0]);
        void *dst = direct ? (void *)(o + b * st[0]) : (void *)ob;
        const void *xv = load_block(r, x + b * st[1], st[1], m, xb, tmp);

        r->l->un(dst, xv, m, r->p);
        if (!direct)
            store_block(r, o + b * st[0], st[0], ob, m, tmp);
    }
}

/* krow_fn: p = {out, x}. */
static void un_row(void *ctx, char *const *p, const int64_t *st, int64_t n)
{
    const struct erow *r = ctx;

    if (r->cin == CV_NONE && out_direct(r, st[0]) &&
        st[1] == (int64_t)r->ies) {
        r->l->un(p[0], p[1], n, r->p);
        return;
    }
    un_blocks(r, p[0], p[1], st, n);
}

static void bin_blocks(const struct erow *r, char *o, const char *x,
                       const char *y, const int64_t *st, int64_t n)
{
    double xb[EBLK], yb[EBLK], ob[EBLK];
    uint16_t tmp[EBLK];
    bool xs = st[1] == 0, ys = st[2] == 0 && !xs;
    const void *xv = NULL, *yv = NULL;

    /* A broadcast operand is loaded (and converted) once. */
    if (xs)
        xv = load_block(r, x, 0, 1, xb, tmp);
    if (ys)
        yv = load_block(r, y, 0, 1, yb, tmp);
    for (int64_t b = 0; b < n; b += EBLK) {
        int64_t m = n - b < EBLK ? n - b : EBLK;
        bool direct = out_direct(r, st[0]);
        void *dst = direct ? (void *)(o + b * st[0]) : (void *)ob;

        if (!xs)
            xv = load_block(r, x + b * st[1], st[1], m, xb, tmp);
        if (!ys)
            yv = load_block(r, y + b * st[2], st[2], m, yb, tmp);
        if (xs)
            r->l->sv(dst, xv, yv, m, r->p);
        else if (ys)
            r->l->vs(dst, xv, yv, m, r->p);
        else
            r->l->vv(dst, xv, yv, m, r->p);
        if (!direct)
            store_block(r, o + b * st[0], st[0], ob, m, tmp);
    }
}

/* krow_fn: p = {out, x, y}. Contiguous and scalar-broadcast rows run the
 * loops on the tensors' memory; the rest goes block by block. */
static void bin_row(void *ctx, char *const *p, const int64_t *st, int64_t n)
{
    const struct erow *r = ctx;
    int64_t es = r->ies;

    if (r->cin == CV_NONE && out_direct(r, st[0])) {
        if (st[1] == es && st[2] == es) {
            r->l->vv(p[0], p[1], p[2], n, r->p);
            return;
        }
        if (st[1] == es && st[2] == 0) {
            r->l->vs(p[0], p[1], p[2], n, r->p);
            return;
        }
        if (st[1] == 0 && st[2] == es) {
            r->l->sv(p[0], p[1], p[2], n, r->p);
            return;
        }
    }
    bin_blocks(r, p[0], p[1], p[2], st, n);
}

struct wrow {
    where_fn fn, fn_ys;
    uint32_t es;
};

/* krow_fn: p = {out, cond, x, y}. */
static void where_row(void *ctx, char *const *p, const int64_t *st,
                      int64_t n)
{
    const struct wrow *w = ctx;
    int64_t es = w->es;
    uint64_t xb[EBLK], yb[EBLK], ob[EBLK];
    uint8_t cb[EBLK];

    if (st[0] == es && st[1] == 1 && st[2] == es && st[3] == es) {
        w->fn(p[0], (const uint8_t *)p[1], p[2], p[3], n);
        return;
    }
    if (st[0] == es && st[1] == 1 && st[2] == es && st[3] == 0) {
        w->fn_ys(p[0], (const uint8_t *)p[1], p[2], p[3], n);
        return;
    }
    for (int64_t b = 0; b < n; b += EBLK) {
        int64_t m = n - b < EBLK ? n - b : EBLK;
        const uint8_t *c = (const uint8_t *)p[1] + b * st[1];
        const char *x = p[2] + b * st[2], *y = p[3] + b * st[3];
        char *o = p[0] + b * st[0];
        void *dst = st[0] == es ? (void *)o : (void *)ob;

        if (st[1] != 1) {
            gather(cb, (const char *)c, st[1], m, 1);
            c = cb;
        }
        if (st[2] != es) {
            gather(xb, x, st[2], m, w->es);
            x = (const char *)xb;
        }
        if (st[3] != es) {
            gather(yb, y, st[3], m, w->es);
            y = (const char *)yb;
        }
        w->fn(dst, c, x, y, m);
        if (dst == ob)
            scatter(o, st[0], ob, m, w->es);
    }
}

/* ---- launching ----------------------------------------------------------- */

/* Every operand as one flat run over the output's elements. */
struct eflat {
    krow_fn row;
    void *ctx;
    int nops;
    char *base[4];
    int64_t st[4];
};

/* Byte stride of d as one flat run: its element size when contiguous, 0
 * when every element is the same one (a broadcast scalar), -1 otherwise.
 * One pass over the dims; numel > 0. */
static int64_t flat_stride(const keel_tensor_desc *d)
{
    int64_t want = 1;
    bool contig = true, zero = true;

    for (int i = d->ndim - 1; i >= 0; i--) {
        if (d->shape[i] == 1)
            continue;
        contig = contig && d->strides[i] == want;
        zero = zero && d->strides[i] == 0;
        want *= d->shape[i];
    }
    if (contig)
        return keel_dtype_size(d->dtype);
    return zero ? 0 : -1;
}

static void flat_part(void *ctx, int64_t b, int64_t e)
{
    const struct eflat *f = ctx;
    char *p[4];

    for (int i = 0; i < f->nops; i++)
        p[i] = f->base[i] + b * f->st[i];
    f->row(f->ctx, p, f->st, e - b);
}

/* Run `row` over the launch's operands (outputs first, then inputs):
 * one flat row (split over the pool when large) when every operand is
 * contiguous or a broadcast scalar, else rows from kiter. */
static void elem_rows(const struct kcall *k, krow_fn row, void *ctx,
                      int cost)
{
    const keel_kernel_args *a = k->a;
    int64_t n = knumel(&a->outputs[0]), grain = KGRAIN >> cost;
    struct eflat f;

    if (n == 0)
        return;
    f.row = row;
    f.ctx = ctx;
    f.nops = 1 + a->num_inputs;
    f.base[0] = k->out[0];
    f.st[0] = flat_stride(&a->outputs[0]);
    for (int i = 0; i < a->num_inputs; i++) {
        f.base[1 + i] = k->in[i];
        f.st[1 + i] = flat_stride(&a->inputs[i]);
        if (f.st[1 + i] < 0)
            f.st[0] = -1;
    }
    if (f.st[0] <= 0) {
        kiter_call(k, row, ctx);
        return;
    }
    if (n < 2 * grain)
        row(ctx, f.base, f.st, n);
    else
        cpu_parallel_for(n, grain, flat_part, &f);
}

/* Loops for `dt`, and whether they compute through float32. */
static const struct eloops *eop_loops(const struct eop *op, keel_dtype dt,
                                      int *cv)
{
    const struct eloops *l;

    *cv = CV_NONE;
    if ((unsigned)dt >= KEEL_DTYPE_COUNT_)
        return NULL;
    l = &op->l[dt];
    if (l->un || l->vv)
        return l;
    if (dt != KEEL_F16 && dt != KEEL_BF16)
        return NULL;
    l = &op->l[KEEL_F32];
    *cv = dt == KEEL_F16 ? CV_F16 : CV_BF16;
    return l->un || l->vv ? l : NULL;
}

/* Integer view of a float bound, as Paddle's Scalar::to<T>() truncates,
 * saturated to [lo, hi]; NaN means no bound on that side. */
static int64_t bound_i(double v, double lo, double hi, bool upper)
{
    if (v != v)
        return (int64_t)(upper ? hi : lo);
    if (v <= lo)
        return (int64_t)lo;
    if (v >= hi)
        return (int64_t)hi;
    return (int64_t)v;
}

static void int_range(keel_dtype dt, double *lo, double *hi)
{
    switch (dt) {
    case KEEL_I8:
        *lo = INT8_MIN;
        *hi = INT8_MAX;
        break;
    case KEEL_U8:
    case KEEL_BOOL:
        *lo = 0;
        *hi = UINT8_MAX;
        break;
    case KEEL_I32:
        *lo = INT32_MIN;
        *hi = INT32_MAX;
        break;
    default:
        /* The largest double below 2^63 keeps the cast defined. */
        *lo = -9223372036854775808.0;
        *hi = 9223372036854774784.0;
        break;
    }
}

static void eparams(const struct eop *op, const keel_kernel_args *a,
                    keel_dtype dt, struct eparam *p)
{
    double lo, hi;

    if (!op->attr[0]) {
        memset(p, 0, sizeof(*p));
        return;
    }
    int_range(dt, &lo, &hi);
    for (int k = 0; k < 2; k++) {
        double v = op->attr[k] ? kattr_f(a, op->attr[k], op->def[k]) : 0;
        p->f[k] = v;
        p->s[k] = (float)v;
        p->i[k] = bound_i(v, lo, hi, k == 1);
    }
}

static void elem_run(const struct kcall *k, const struct eop *op)
{
    keel_dtype dt = k->a->inputs[0].dtype;
    struct eparam prm;
    struct erow r;
    int cv;

    r.l = eop_loops(op, dt, &cv);
    r.p = &prm;
    r.cin = cv;
    r.cout = op->bool_out ? CV_NONE : cv;
    r.ies = keel_dtype_size(dt);
    r.oes = keel_dtype_size(k->a->outputs[0].dtype);
    eparams(op, k->a, dt, &prm);
    elem_rows(k, op->nin == 1 ? un_row : bin_row, &r,
              cv == CV_NONE ? op->cost : op->cost + 1);
}

/* The kit checked counts, dtypes and shapes (keel/kit.h); what is left is
 * whether this plugin has loops for the dtype. */
static keel_status elem_check(const keel_kernel_args *a, const struct eop *op)
{
    int cv;

    if (!eop_loops(op, a->inputs[0].dtype, &cv))
        return cpu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: no CPU kernel for %s", op->name,
                       cpu_dtype_name(a->inputs[0].dtype));
    return KEEL_STATUS_OK;
}

/* A kernel per op: launch with the op's checks and loops. */
#define EKERNEL(name)                                                        \
    static void name##_impl(const struct kcall *k)                           \
    {                                                                        \
        elem_run(k, &op_##name);                                             \
    }                                                                        \
    static keel_status name##_check(const keel_kernel_args *a)               \
    {                                                                        \
        return elem_check(a, &op_##name);                                    \
    }                                                                        \
    KERNEL(k_##name, #name, name##_impl, name##_check)

EKERNEL(add)
EKERNEL(subtract)
EKERNEL(multiply)
EKERNEL(divide)
EKERNEL(pow)
EKERNEL(maximum)
EKERNEL(minimum)
EKERNEL(floor_divide)
EKERNEL(remainder)
EKERNEL(equal)
EKERNEL(not_equal)
EKERNEL(less)
EKERNEL(less_equal)
EKERNEL(greater)
EKERNEL(greater_equal)
EKERNEL(logical_and)
EKERNEL(logical_or)
EKERNEL(logical_xor)
EKERNEL(logical_not)
EKERNEL(neg)
EKERNEL(abs)
EKERNEL(sign)
EKERNEL(exp)
EKERNEL(log)
EKERNEL(log1p)
EKERNEL(sqrt)
EKERNEL(rsqrt)
EKERNEL(square)
EKERNEL(sin)
EKERNEL(cos)
EKERNEL(floor)
EKERNEL(ceil)
EKERNEL(round)
EKERNEL(relu)
EKERNEL(relu6)
EKERNEL(leaky_relu)
EKERNEL(elu)
EKERNEL(silu)
EKERNEL(sigmoid)
EKERNEL(tanh)
EKERNEL(softplus)
EKERNEL(hardswish)
EKERNEL(clip)

/* ---- the fused ops' activations (kern.h: cpu_act_f32 and the others) ----- */

/*
 * fused_linear and fused_conv2d apply their activation with the loops of
 * the activation ops above, block by block (EBLK elements: a copy of the
 * block in a stack buffer is the loop's input, the element's own place its
 * output), so that a fused result equals the activation op's on the
 * unfused result bit for bit.
 */
static const struct eop *act_op(keel_fused_act act)
{
    switch (act) {
    case KEEL_FUSED_ACT_RELU:
        return &op_relu;
    case KEEL_FUSED_ACT_RELU6:
        return &op_relu6;
    case KEEL_FUSED_ACT_GELU:
        return &op_gelu;
    case KEEL_FUSED_ACT_GELU_TANH:
        return &op_gelu_tanh;
    case KEEL_FUSED_ACT_SILU:
        return &op_silu;
    case KEEL_FUSED_ACT_SIGMOID:
        return &op_sigmoid;
    case KEEL_FUSED_ACT_TANH:
        return &op_tanh;
    case KEEL_FUSED_ACT_LEAKY_RELU:
        return &op_leaky_relu;
    case KEEL_FUSED_ACT_HARDSWISH:
        return &op_hardswish;
    default:
        return NULL;
    }
}

/* How the values are stored: float32 (rounded first through the half
 * dtype cv unless CV_NONE), float64, or float16/bfloat16 (cv). */
enum { ACT_F32, ACT_F64, ACT_HALF };

struct act_run {
    un_fn f;
    struct eparam p;
    int mode, cv;
    void *base;
};

static void act_part(void *ctx, int64_t b, int64_t e)
{
    const struct act_run *r = ctx;
    double xb[EBLK]; /* EBLK inputs of either float type */
    float *xf = (float *)xb, ob[EBLK];
    uint16_t hb[EBLK];

    for (int64_t i = b; i < e; i += EBLK) {
        int64_t m = e - i < EBLK ? e - i : EBLK;

        if (r->mode == ACT_F64) {
            double *o = (double *)r->base + i;
            memcpy(xb, o, (size_t)m * sizeof(double));
            r->f(o, xb, m, &r->p);
        } else if (r->mode == ACT_F32) {
            float *o = (float *)r->base + i;
            if (r->cv != CV_NONE) {
                f32_to_half(r->cv, o, hb, m);
                half_to_f32(r->cv, hb, xf, m);
            } else {
                memcpy(xf, o, (size_t)m * sizeof(float));
            }
            r->f(o, xf, m, &r->p);
        } else {
            uint16_t *o = (uint16_t *)r->base + i;
            half_to_f32(r->cv, o, xf, m);
            r->f(ob, xf, m, &r->p);
            f32_to_half(r->cv, ob, o, m);
        }
    }
}

static void act_launch(keel_fused_act act, double alpha, int mode, int cv, void *p,
                       int64_t n)
{
    const struct eop *op = act_op(act);
    struct act_run r;

    if (!op || n <= 0)
        return;
    memset(&r, 0, sizeof(r));
    r.f = op->l[mode == ACT_F64 ? KEEL_F64 : KEEL_F32].un;
    if (op->attr[0]) { /* leaky_relu's slope, as eparams() gives it */
        r.p.f[0] = alpha;
        r.p.s[0] = (float)alpha;
    }
    r.mode = mode;
    r.cv = cv;
    r.base = p;
    cpu_parallel_for(n, KGRAIN >> (op->cost + (cv != CV_NONE)), act_part, &r);
}

static int half_cv(keel_dtype dt)
{
    return dt == KEEL_F16 ? CV_F16 : dt == KEEL_BF16 ? CV_BF16 : CV_NONE;
}

void cpu_act_f32(keel_fused_act act, double alpha, float *p, int64_t n,
                 keel_dtype round_dt)
{
    act_launch(act, alpha, ACT_F32, half_cv(round_dt), p, n);
}

void cpu_act_f64(keel_fused_act act, double alpha, double *p, int64_t n)
{
    act_launch(act, alpha, ACT_F64, CV_NONE, p, n);
}

void cpu_act(keel_fused_act act, double alpha, keel_dtype dt, void *p, int64_t n)
{
    if (dt == KEEL_F64)
        cpu_act_f64(act, alpha, p, n);
    else if (dt == KEEL_F32)
        cpu_act_f32(act, alpha, p, n, KEEL_F32);
    else
        act_launch(act, alpha, ACT_HALF, half_cv(dt), p, n);
}

/* gelu: the exact (erf) form, or the tanh approximation. */
static void gelu_impl(const struct kcall *k)
{
    elem_run(k, kattr_i(k->a, "approximate", 0) ? &op_gelu_tanh : &op_gelu);
}

static keel_status gelu_check(const keel_kernel_args *a)
{
    return elem_check(a, &op_gelu);
}

KERNEL(k_gelu, "gelu", gelu_impl, gelu_check)

/* where(cond, x, y): selection on storage by element size. */
static void where_impl(const struct kcall *k)
{
    static const where_fn fns[9] = {
        [1] = where_uint8_t,
        [2] = where_uint16_t,
        [4] = where_uint32_t,
        [8] = where_uint64_t,
    };
    static const where_fn fns_ys[9] = {
        [1] = where_ys_uint8_t,
        [2] = where_ys_uint16_t,
        [4] = where_ys_uint32_t,
        [8] = where_ys_uint64_t,
    };
    struct wrow w;

    w.es = keel_dtype_size(k->a->outputs[0].dtype);
    w.fn = fns[w.es];
    w.fn_ys = fns_ys[w.es];
    elem_rows(k, where_row, &w, 0);
}

KERNEL(k_where, "where", where_impl, NULL)

const struct cpu_kernel_entry cpu_kernels_elementwise[] = {
    {"add", KEEL_DT_NUMERIC, k_add},
    {"subtract", KEEL_DT_NUMERIC, k_subtract},
    {"multiply", KEEL_DT_NUMERIC, k_multiply},
    {"divide", KEEL_DT_FLOAT, k_divide},
    {"pow", KEEL_DT_NUMERIC, k_pow},
    {"maximum", KEEL_DT_NUMERIC, k_maximum},
    {"minimum", KEEL_DT_NUMERIC, k_minimum},
    {"floor_divide", KEEL_DT_NUMERIC, k_floor_divide},
    {"remainder", KEEL_DT_NUMERIC, k_remainder},
    {"equal", KEEL_DT_ALL, k_equal},
    {"not_equal", KEEL_DT_ALL, k_not_equal},
    {"less", KEEL_DT_ALL, k_less},
    {"less_equal", KEEL_DT_ALL, k_less_equal},
    {"greater", KEEL_DT_ALL, k_greater},
    {"greater_equal", KEEL_DT_ALL, k_greater_equal},
    {"logical_and", KEEL_DT_ALL, k_logical_and},
    {"logical_or", KEEL_DT_ALL, k_logical_or},
    {"logical_xor", KEEL_DT_ALL, k_logical_xor},
    {"logical_not", KEEL_DT_ALL, k_logical_not},
    {"where", KEEL_DT_ALL, k_where},
    {"neg", KEEL_DT_SIGNED, k_neg},
    {"abs", KEEL_DT_SIGNED, k_abs},
    {"sign", KEEL_DT_SIGNED, k_sign},
    {"exp", KEEL_DT_FLOAT, k_exp},
    {"log", KEEL_DT_FLOAT, k_log},
    {"log1p", KEEL_DT_FLOAT, k_log1p},
    {"sqrt", KEEL_DT_FLOAT, k_sqrt},
    {"rsqrt", KEEL_DT_FLOAT, k_rsqrt},
    {"square", KEEL_DT_NUMERIC, k_square},
    {"sin", KEEL_DT_FLOAT, k_sin},
    {"cos", KEEL_DT_FLOAT, k_cos},
    {"floor", KEEL_DT_FLOAT, k_floor},
    {"ceil", KEEL_DT_FLOAT, k_ceil},
    {"round", KEEL_DT_FLOAT, k_round},
    {"relu", KEEL_DT_SIGNED, k_relu},
    {"relu6", KEEL_DT_FLOAT, k_relu6},
    {"leaky_relu", KEEL_DT_FLOAT, k_leaky_relu},
    {"elu", KEEL_DT_FLOAT, k_elu},
    {"gelu", KEEL_DT_FLOAT, k_gelu},
    {"silu", KEEL_DT_FLOAT, k_silu},
    {"sigmoid", KEEL_DT_FLOAT, k_sigmoid},
    {"tanh", KEEL_DT_FLOAT, k_tanh},
    {"softplus", KEEL_DT_FLOAT, k_softplus},
    {"hardswish", KEEL_DT_FLOAT, k_hardswish},
    {"clip", KEEL_DT_NUMERIC, k_clip},
    {NULL, 0, NULL},
};
