/*
 * keel CUDA plugin — elementwise kernels: binary arithmetic (add ...
 * remainder), comparisons, logical ops, where, and the unary math and
 * activation ops of ops.def, with the CPU plugin's semantics
 * (plugins/cpu/kernels/k_elementwise.c).
 *
 * Design
 *
 *  - Every op is a small functor on the element math type M: float for
 *    float32/float16/bfloat16 (half types are widened to float and the
 *    result rounded back once, as the CPU plugin does), double for
 *    float64, and the storage type itself for integers, so that integer
 *    arithmetic can wrap through the unsigned twin exactly like the CPU
 *    loops. bool is handled as uint8 storage (0/1), as on the CPU.
 *
 *  - The generic path is the toolkit's ck_for_each over a ck_iter of
 *    (out, inputs...): any strides, broadcast (stride 0) inputs, empty
 *    and 0-d tensors. One thread per element, grid-stride.
 *
 *  - Binary arithmetic on float32/float16/bfloat16 has a fast path when
 *    the output is dense and every input is dense or one broadcast
 *    element: 16-byte vector loads and stores (when the base addresses
 *    are 16-byte aligned), two vectors in flight per thread, grid-stride,
 *    and a scalar tail for the last n % (16 / element size) elements.
 *
 *  - Dtype dispatch happens once per launch on the host; a per-op mask
 *    (the CPU plugin's registration mask) keeps unsupported instantiations
 *    out of the binary.
 *
 * Semantics (same as the CPU plugin): integer arithmetic wraps; divide is
 * float only; floor_divide floors and remainder takes the divisor's sign;
 * an integer zero divisor gives 0; integer pow is exact (wrapping) and a
 * negative exponent gives 0 except for the bases 1 and -1;
 * maximum/minimum/relu/clip/sign propagate NaN; round is half away from
 * zero; clip on integers truncates its float bounds toward zero,
 * saturated to the dtype's range (NaN: no bound).
 */
#include "ck.cuh"
#include "ck_act.cuh"

namespace {

/* ---- types -------------------------------------------------------------- */

/* Element math type: what a functor computes in. */
template <class T> struct em { typedef T t; };
template <> struct em<ck_half> { typedef float t; };
template <> struct em<ck_bf16> { typedef float t; };

/* Unsigned twin, for wrapping integer arithmetic (floats: themselves). */
template <class T> struct uns { typedef T t; };
template <> struct uns<int8_t> { typedef uint8_t t; };
template <> struct uns<int32_t> { typedef uint32_t t; };
template <> struct uns<int64_t> { typedef uint64_t t; };

template <class T> struct is_fp { static const bool v = false; };
template <> struct is_fp<float> { static const bool v = true; };
template <> struct is_fp<double> { static const bool v = true; };

/* Output storage type: bool (uint8) or the input's. */
template <bool B, class T> struct out_type { typedef T t; };
template <class T> struct out_type<true, T> { typedef uint8_t t; };

template <class T> struct is_u8 { static const bool v = false; };
template <> struct is_u8<uint8_t> { static const bool v = true; };

/* Load a stored element as its math type; store a math value. */
template <class T>
__device__ __forceinline__ typename em<T>::t ld(const char *p)
{
    return ck_cv<typename em<T>::t>(*(const T *)p);
}

template <class T, class V>
__device__ __forceinline__ void st(char *p, V v)
{
    *(T *)p = ck_cv<T>(v);
}

/* ---- math by precision -------------------------------------------------- */

#define EW_MATH1(name, ffn, dfn)                                             \
    __device__ __forceinline__ float name(float a) { return ffn(a); }       \
    __device__ __forceinline__ double name(double a) { return dfn(a); }
EW_MATH1(m_exp, expf, exp)
EW_MATH1(m_expm1, expm1f, expm1)
EW_MATH1(m_log, logf, log)
EW_MATH1(m_log1p, log1pf, log1p)
EW_MATH1(m_sqrt, sqrtf, sqrt)
EW_MATH1(m_sin, sinf, sin)
EW_MATH1(m_cos, cosf, cos)
EW_MATH1(m_fabs, fabsf, fabs)
EW_MATH1(m_floor, floorf, floor)
EW_MATH1(m_ceil, ceilf, ceil)
EW_MATH1(m_round, roundf, round) /* half away from zero */
#undef EW_MATH1

__device__ __forceinline__ float m_pow(float a, float b)
{
    return powf(a, b);
}
__device__ __forceinline__ double m_pow(double a, double b)
{
    return pow(a, b);
}
__device__ __forceinline__ float m_fmod(float a, float b)
{
    return fmodf(a, b);
}
__device__ __forceinline__ double m_fmod(double a, double b)
{
    return fmod(a, b);
}

/* Python floor division. float32 (and the half types through it): the
 * double quotient is never rounded up to an integer the exact quotient
 * lies below, so flooring it is exact. */
__device__ __forceinline__ float m_floordiv(float a, float b)
{
    return (float)floor((double)a / (double)b);
}
__device__ __forceinline__ double m_floordiv(double a, double b)
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

/* ---- integer division family (zero divisor gives 0) --------------------- */

template <class T> __device__ __forceinline__ T i_div(T a, T b)
{
    typedef typename uns<T>::t U;

    if constexpr (is_u8<T>::v) {
        return b ? (T)(a / b) : (T)0;
    } else {
        if (b == 0)
            return 0;
        if (b == -1) /* wrapping negation: no trap for the minimum */
            return (T)((U)0 - (U)a);
        return (T)(a / b);
    }
}

template <class T> __device__ __forceinline__ T i_floordiv(T a, T b)
{
    if constexpr (is_u8<T>::v) {
        return i_div<T>(a, b);
    } else {
        T q = i_div<T>(a, b);

        if (b != 0 && b != -1 && a % b != 0 && (a < 0) != (b < 0))
            q = (T)(q - 1);
        return q;
    }
}

template <class T> __device__ __forceinline__ T i_rem(T a, T b)
{
    if constexpr (is_u8<T>::v) {
        return b ? (T)(a % b) : (T)0;
    } else {
        T r;

        if (b == 0 || b == -1)
            return 0;
        r = (T)(a % b);
        return r != 0 && (r < 0) != (b < 0) ? (T)(r + b) : r;
    }
}

/* Exact integer power by squaring, wrapping. */
template <class T> __device__ __forceinline__ T i_pow(T a, T b)
{
    if constexpr (is_u8<T>::v) {
        unsigned r = 1, base = a, e = b;

        for (; e; e >>= 1, base = (base * base) & 0xffu)
            if (e & 1)
                r = (r * base) & 0xffu;
        return (T)r;
    } else {
        typedef typename uns<T>::t U;
        U r = 1, base = (U)a;

        if (b < 0)
            return a == 1 ? (T)1 : a == -1 ? (T)((b & 1) ? -1 : 1) : (T)0;
        for (; b; b = (T)(b >> 1), base = (U)(base * base))
            if (b & 1)
                r = (U)(r * base);
        return (T)r;
    }
}

/* ---- binary functors: M op(M, M) ---------------------------------------- */

struct b_add {
    template <class M> __device__ M operator()(M a, M b) const
    {
        typedef typename uns<M>::t U;
        return (M)((U)a + (U)b);
    }
};
struct b_subtract {
    template <class M> __device__ M operator()(M a, M b) const
    {
        typedef typename uns<M>::t U;
        return (M)((U)a - (U)b);
    }
};
struct b_multiply {
    template <class M> __device__ M operator()(M a, M b) const
    {
        typedef typename uns<M>::t U;
        return (M)((U)a * (U)b);
    }
};
struct b_divide { /* float dtypes only */
    template <class M> __device__ M operator()(M a, M b) const
    {
        return a / b;
    }
};
struct b_pow {
    template <class M> __device__ M operator()(M a, M b) const
    {
        if constexpr (is_fp<M>::v)
            return m_pow(a, b);
        else
            return i_pow<M>(a, b);
    }
};
struct b_maximum {
    template <class M> __device__ M operator()(M a, M b) const
    {
        if constexpr (is_fp<M>::v)
            return a > b || a != a ? a : b;
        else
            return a > b ? a : b;
    }
};
struct b_minimum {
    template <class M> __device__ M operator()(M a, M b) const
    {
        if constexpr (is_fp<M>::v)
            return a < b || a != a ? a : b;
        else
            return a < b ? a : b;
    }
};
struct b_floor_divide {
    template <class M> __device__ M operator()(M a, M b) const
    {
        if constexpr (is_fp<M>::v)
            return m_floordiv(a, b);
        else
            return i_floordiv<M>(a, b);
    }
};
struct b_remainder {
    template <class M> __device__ M operator()(M a, M b) const
    {
        if constexpr (is_fp<M>::v) {
            M r = m_fmod(a, b);
            return r != 0 && (b < 0) != (r < 0) ? r + b : r;
        } else {
            return i_rem<M>(a, b);
        }
    }
};

/* Comparisons and logical ops: bool results. */
struct b_equal {
    template <class M> __device__ bool operator()(M a, M b) const
    {
        return a == b;
    }
};
struct b_not_equal {
    template <class M> __device__ bool operator()(M a, M b) const
    {
        return a != b;
    }
};
struct b_less {
    template <class M> __device__ bool operator()(M a, M b) const
    {
        return a < b;
    }
};
struct b_less_equal {
    template <class M> __device__ bool operator()(M a, M b) const
    {
        return a <= b;
    }
};
struct b_greater {
    template <class M> __device__ bool operator()(M a, M b) const
    {
        return a > b;
    }
};
struct b_greater_equal {
    template <class M> __device__ bool operator()(M a, M b) const
    {
        return a >= b;
    }
};
/* Truth is x != 0: NaN is true, +-0 false (half types widened exactly). */
struct b_logical_and {
    template <class M> __device__ bool operator()(M a, M b) const
    {
        return (a != (M)0) & (b != (M)0);
    }
};
struct b_logical_or {
    template <class M> __device__ bool operator()(M a, M b) const
    {
        return (a != (M)0) | (b != (M)0);
    }
};
struct b_logical_xor {
    template <class M> __device__ bool operator()(M a, M b) const
    {
        return (a != (M)0) ^ (b != (M)0);
    }
};

/* ---- unary functors: M op(M), with up to two attributes p0, p1 ---------- */

template <class M> struct uparam {
    M p0, p1;
};

#define EW_UNARY(name, body)                                                 \
    template <class M> struct name : uparam<M> {                             \
        __device__ M operator()(M a) const                                   \
        {                                                                    \
            const M p0 = this->p0, p1 = this->p1;                            \
            (void)p0;                                                        \
            (void)p1;                                                        \
            body                                                             \
        }                                                                    \
    };

EW_UNARY(u_neg, {
    typedef typename uns<M>::t U;
    if constexpr (is_fp<M>::v)
        return -a;
    else
        return (M)((U)0 - (U)a);
})
EW_UNARY(u_abs, {
    typedef typename uns<M>::t U;
    if constexpr (is_fp<M>::v)
        return m_fabs(a);
    else
        return a < 0 ? (M)((U)0 - (U)a) : a;
})
/* -1, 0 or 1; NaN and -0 stay as they are. */
EW_UNARY(u_sign, { return a > 0 ? (M)1 : a < 0 ? (M)-1 : a; })
EW_UNARY(u_exp, { return m_exp(a); })
EW_UNARY(u_log, { return m_log(a); })
EW_UNARY(u_log1p, { return m_log1p(a); })
EW_UNARY(u_sqrt, { return m_sqrt(a); })
/* The exact 1 / sqrt (two correctly rounded steps), not rsqrt. */
EW_UNARY(u_rsqrt, { return (M)1 / m_sqrt(a); })
EW_UNARY(u_square, {
    typedef typename uns<M>::t U;
    if constexpr (is_fp<M>::v)
        return a * a;
    else
        return (M)((U)a * (U)a);
})
EW_UNARY(u_sin, { return m_sin(a); })
EW_UNARY(u_cos, { return m_cos(a); })
EW_UNARY(u_floor, { return m_floor(a); })
EW_UNARY(u_ceil, { return m_ceil(a); })
EW_UNARY(u_round, { return m_round(a); })
/* The activations are ck_act.cuh's, which the fused ops share. */
EW_UNARY(u_relu, { return ck_act_relu(a); })
EW_UNARY(u_relu6, { return ck_act_relu6(a); })
EW_UNARY(u_leaky_relu, { return ck_act_leaky_relu(a, p0); })
EW_UNARY(u_elu, { return a > 0 ? a : p0 * m_expm1(a); })
EW_UNARY(u_gelu, { return ck_act_gelu(a); })
EW_UNARY(u_gelu_tanh, { return ck_act_gelu_tanh(a); })
EW_UNARY(u_silu, { return ck_act_silu(a); })
EW_UNARY(u_sigmoid, { return ck_act_sigmoid(a); })
EW_UNARY(u_tanh, { return ck_act_tanh(a); })
/* ln(1 + e^(beta a)) / beta as max(z, 0) + ln(1 + e^-|z|), z = beta a:
 * cannot overflow. p0 = beta, p1 = threshold. */
EW_UNARY(u_softplus, {
    M z = a * p0;
    M sp = (z > 0 ? z : (M)0) + m_log1p(m_exp(-m_fabs(z)));
    return z > p1 ? a : sp / p0;
})
EW_UNARY(u_hardswish, { return ck_act_hardswish(a); })
/* p0 = min, p1 = max; NaN passes through. */
EW_UNARY(u_clip, { return a < p0 ? p0 : a > p1 ? p1 : a; })
#undef EW_UNARY

/* ---- attributes as the loops see them ----------------------------------- */

/* Integer dtype range (as doubles whose casts are defined). */
template <class T> struct irange;
template <> struct irange<int8_t> {
    static constexpr double lo = -128.0, hi = 127.0;
};
template <> struct irange<uint8_t> {
    static constexpr double lo = 0.0, hi = 255.0;
};
template <> struct irange<int32_t> {
    static constexpr double lo = -2147483648.0, hi = 2147483647.0;
};
/* The largest double below 2^63 keeps the cast defined. */
template <> struct irange<int64_t> {
    static constexpr double lo = -9223372036854775808.0,
                            hi = 9223372036854774784.0;
};

/* A float attribute in math type M: rounded to float for the float32
 * family, as given for float64; for integers truncated toward zero and
 * saturated to the dtype (NaN: no bound on that side). */
template <class M> static M attr_as(double v, bool upper)
{
    if constexpr (is_fp<M>::v) {
        (void)upper;
        return (M)v;
    } else {
        const double lo = irange<M>::lo, hi = irange<M>::hi;

        if (v != v)
            return (M)(int64_t)(upper ? hi : lo);
        if (v <= lo)
            return (M)(int64_t)lo;
        if (v >= hi)
            return (M)(int64_t)hi;
        return (M)(int64_t)v;
    }
}

/* ---- per-element functors for ck_for_each ------------------------------- */

/* p = {out, x}. */
template <class T, class TO, class F> struct un_each {
    F f;
    __device__ void operator()(char *const *p, int64_t) const
    {
        st<TO>(p[0], f(ld<T>(p[1])));
    }
};

/* p = {out, x, y}. */
template <class T, class TO, class F> struct bin_each {
    F f;
    __device__ void operator()(char *const *p, int64_t) const
    {
        st<TO>(p[0], f(ld<T>(p[1]), ld<T>(p[2])));
    }
};

struct not_op {
    template <class M> __device__ bool operator()(M a) const
    {
        return !(a != (M)0);
    }
};

/* p = {out, cond, x, y}: selection on storage of element type U. */
template <class U> struct where_each {
    __device__ void operator()(char *const *p, int64_t) const
    {
        *(U *)p[0] = *(const uint8_t *)p[1] ? *(const U *)p[2]
                                             : *(const U *)p[3];
    }
};

/* ---- vectorised dense binary path --------------------------------------- */

/* 16 bytes of T, loaded and stored as one vector. */
template <class T> struct __align__(16) vec16 {
    T v[16 / sizeof(T)];
};

enum { VV = 0, VS = 1, SV = 2 }; /* dense/dense, dense/scalar, scalar/dense */

template <class T, class F, int MODE, class M = typename em<T>::t>
__device__ __forceinline__ vec16<T> vapply(const F &f, const vec16<T> &x,
                                           const vec16<T> &y, M xs, M ys)
{
    const int n = 16 / sizeof(T);
    vec16<T> r;

#pragma unroll
    for (int k = 0; k < n; k++) {
        M a = MODE == SV ? xs : ck_cv<M>(x.v[k]);
        M b = MODE == VS ? ys : ck_cv<M>(y.v[k]);
        r.v[k] = ck_cv<T>(f(a, b));
    }
    return r;
}

/*
 * o = f(x, y) over n dense elements; in mode VS y is one element, in SV x
 * is. The first n / V elements go as V-element vectors (two per thread and
 * iteration, so that two loads per operand are in flight), the rest one by
 * one. The vector part requires 16-byte aligned dense pointers.
 */
template <class T, class F, int MODE>
__global__ void __launch_bounds__(CK_BLOCK)
bin_vec_kernel(T *o, const T *x, const T *y, int64_t n, F f)
{
    typedef typename em<T>::t M;
    const int V = 16 / sizeof(T);
    const int64_t nv = n / V;
    const int64_t step = (int64_t)blockDim.x * gridDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const vec16<T> *xv = (const vec16<T> *)x, *yv = (const vec16<T> *)y;
    vec16<T> *ov = (vec16<T> *)o;
    M xs = MODE == SV ? ck_cv<M>(x[0]) : (M)0;
    M ys = MODE == VS ? ck_cv<M>(y[0]) : (M)0;
    vec16<T> z = {};

    for (int64_t i = tid; i < nv; i += 2 * step) {
        int64_t j = i + step;
        bool two = j < nv;
        vec16<T> a0 = MODE == SV ? z : xv[i];
        vec16<T> b0 = MODE == VS ? z : yv[i];
        vec16<T> a1 = z, b1 = z;

        if (two) {
            if (MODE != SV)
                a1 = xv[j];
            if (MODE != VS)
                b1 = yv[j];
        }
        ov[i] = vapply<T, F, MODE>(f, a0, b0, xs, ys);
        if (two)
            ov[j] = vapply<T, F, MODE>(f, a1, b1, xs, ys);
    }
    for (int64_t i = nv * V + tid; i < n; i += step) {
        M a = MODE == SV ? xs : ck_cv<M>(x[i]);
        M b = MODE == VS ? ys : ck_cv<M>(y[i]);
        o[i] = ck_cv<T>(f(a, b));
    }
}

template <class T> struct vec_ok { static const bool v = false; };
template <> struct vec_ok<float> { static const bool v = true; };
template <> struct vec_ok<ck_half> { static const bool v = true; };
template <> struct vec_ok<ck_bf16> { static const bool v = true; };

/* The vector path, when the layout allows it. Returns false (nothing
 * launched) otherwise. */
template <class T, class F>
bool bin_vec(const struct ck_launch *l, const ck_iter<3> &it, F f)
{
    const int64_t es = (int64_t)sizeof(T);
    const int V = 16 / sizeof(T);
    int mode;

    if (it.numel <= 0 || it.ndim != 1 || it.stride[0][0] != es)
        return false;
    if (it.stride[1][0] == es && it.stride[2][0] == es)
        mode = VV;
    else if (it.stride[1][0] == es && it.stride[2][0] == 0)
        mode = VS;
    else if (it.stride[1][0] == 0 && it.stride[2][0] == es)
        mode = SV;
    else
        return false;
    uintptr_t al = (uintptr_t)it.base[0];
    if (mode != SV)
        al |= (uintptr_t)it.base[1];
    if (mode != VS)
        al |= (uintptr_t)it.base[2];
    if (al & 15)
        return false;

    int64_t nv = it.numel / V;
    int64_t work = nv > 0 ? (nv + 1) / 2 : it.numel - nv * V;
    unsigned grid = ck_grid(work, CK_BLOCK);
    T *o = (T *)it.base[0];
    const T *x = (const T *)it.base[1], *y = (const T *)it.base[2];

    if (mode == VV)
        bin_vec_kernel<T, F, VV>
            <<<grid, CK_BLOCK, 0, l->stream>>>(o, x, y, it.numel, f);
    else if (mode == VS)
        bin_vec_kernel<T, F, VS>
            <<<grid, CK_BLOCK, 0, l->stream>>>(o, x, y, it.numel, f);
    else
        bin_vec_kernel<T, F, SV>
            <<<grid, CK_BLOCK, 0, l->stream>>>(o, x, y, it.numel, f);
    return true;
}

/* ---- argument checks ---------------------------------------------------- */

/*
 * The value dtype of a launch the kit has checked (keel/kit.h: operand
 * counts, dtypes and shapes): input 0's, or input 1's for where (`cond`
 * 0). NOT_SUPPORTED when this plugin has no instantiation for it (`mask`).
 */
keel_status value_dtype(const keel_kernel_args *a, const char *name,
                        int cond, uint32_t mask, keel_dtype *dt)
{
    *dt = a->inputs[cond == 0 ? 1 : 0].dtype;
    if (!(mask & KEEL_DTYPE_BIT(*dt)))
        return ck_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: no CUDA kernel for %s", name,
                       ck_dtype_name(*dt));
    return KEEL_STATUS_OK;
}

/* ---- dtype dispatch ----------------------------------------------------- */

#define BIT(dt) KEEL_DTYPE_BIT(dt)
#define DT_FLOAT KEEL_DT_FLOAT
#define DT_SIGNED KEEL_DT_SIGNED
#define DT_NUMERIC KEEL_DT_NUMERIC
#define DT_ALL KEEL_DT_ALL

/* v.template run<T>() with T the storage type of dt (bool as uint8),
 * instantiated only for the dtypes in MASK. */
#define EW_CASE(DT, TYPE)                                                    \
    case DT:                                                                 \
        if constexpr ((MASK & BIT(DT)) != 0)                                 \
            return v.template run<TYPE>();                                   \
        break;

template <uint32_t MASK, class Vis>
keel_status dispatch(keel_dtype dt, const Vis &v, const char *name)
{
    switch (dt) {
        EW_CASE(KEEL_F32, float)
        EW_CASE(KEEL_F64, double)
        EW_CASE(KEEL_F16, ck_half)
        EW_CASE(KEEL_BF16, ck_bf16)
        EW_CASE(KEEL_I8, int8_t)
        EW_CASE(KEEL_U8, uint8_t)
        EW_CASE(KEEL_I32, int32_t)
        EW_CASE(KEEL_I64, int64_t)
        EW_CASE(KEEL_BOOL, uint8_t)
    default:
        break;
    }
    return ck_fail(KEEL_STATUS_NOT_SUPPORTED, "%s: no CUDA kernel for %s",
                   name, ck_dtype_name(dt));
}
#undef EW_CASE

/* ---- launchers ---------------------------------------------------------- */

/* Binary op F over (out, x, y); bool output when BOOL_OUT; the vector path
 * for dense float32/float16/bfloat16 when VEC. */
template <class F, bool BOOL_OUT, bool VEC> struct bin_vis {
    const struct ck_launch *l;
    const keel_kernel_args *a;

    template <class T> keel_status run() const
    {
        typedef typename out_type<BOOL_OUT, T>::t TO;
        ck_iter<3> it;

        ck_iter_args<3>(&it, a);
        if constexpr (VEC && !BOOL_OUT && vec_ok<T>::v)
            if (bin_vec<T, F>(l, it, F()))
                return KEEL_STATUS_OK;
        ck_for_each<3>(l, it, bin_each<T, TO, F>{F()});
        return KEEL_STATUS_OK;
    }
};

template <uint32_t MASK, class F, bool BOOL_OUT, bool VEC>
keel_status bin_launch(const keel_kernel_args *a, const char *name)
{
    struct ck_launch l;
    keel_dtype dt;
    keel_status st = ck_begin(a, name, &l);

    if (st)
        return st;
    st = value_dtype(a, name, -1, MASK, &dt);
    if (st)
        return st;
    st = dispatch<MASK>(dt, bin_vis<F, BOOL_OUT, VEC>{&l, a}, name);
    if (st)
        return st;
    return ck_end(&l);
}

/* Unary op Op<M> over (out, x), attributes p0/p1 as doubles. */
template <template <class> class Op> struct un_vis {
    const struct ck_launch *l;
    const keel_kernel_args *a;
    double v0, v1;

    template <class T> keel_status run() const
    {
        typedef typename em<T>::t M;
        Op<M> f;
        ck_iter<2> it;

        f.p0 = attr_as<M>(v0, false);
        f.p1 = attr_as<M>(v1, true);
        ck_iter_args<2>(&it, a);
        ck_for_each<2>(l, it, un_each<T, T, Op<M>>{f});
        return KEEL_STATUS_OK;
    }
};

/* Attribute names (NULL: none) and their defaults. */
struct uattrs {
    const char *n0;
    double d0;
    const char *n1;
    double d1;
};

template <uint32_t MASK, template <class> class Op>
keel_status un_launch(const keel_kernel_args *a, const char *name,
                      struct uattrs at)
{
    struct ck_launch l;
    keel_dtype dt;
    keel_status st = ck_begin(a, name, &l);

    if (st)
        return st;
    st = value_dtype(a, name, -1, MASK, &dt);
    if (st)
        return st;
    double v0 = at.n0 ? ck_attr_f(a, at.n0, at.d0) : 0.0;
    double v1 = at.n1 ? ck_attr_f(a, at.n1, at.d1) : 0.0;
    st = dispatch<MASK>(dt, un_vis<Op>{&l, a, v0, v1}, name);
    if (st)
        return st;
    return ck_end(&l);
}

struct not_vis {
    const struct ck_launch *l;
    const keel_kernel_args *a;

    template <class T> keel_status run() const
    {
        ck_iter<2> it;

        ck_iter_args<2>(&it, a);
        ck_for_each<2>(l, it, un_each<T, uint8_t, not_op>{not_op()});
        return KEEL_STATUS_OK;
    }
};

/* ---- kernel entry points ------------------------------------------------ */

#define EW_BIN(name, mask, bool_out, vec)                                    \
    keel_status k_##name(void *, const keel_kernel_args *a)                  \
    {                                                                        \
        return bin_launch<mask, b_##name, bool_out, vec>(a, #name);          \
    }

EW_BIN(add, DT_NUMERIC, false, true)
EW_BIN(subtract, DT_NUMERIC, false, true)
EW_BIN(multiply, DT_NUMERIC, false, true)
EW_BIN(divide, DT_FLOAT, false, true)
EW_BIN(pow, DT_NUMERIC, false, true)
EW_BIN(maximum, DT_NUMERIC, false, true)
EW_BIN(minimum, DT_NUMERIC, false, true)
EW_BIN(floor_divide, DT_NUMERIC, false, true)
EW_BIN(remainder, DT_NUMERIC, false, true)
EW_BIN(equal, DT_ALL, true, false)
EW_BIN(not_equal, DT_ALL, true, false)
EW_BIN(less, DT_ALL, true, false)
EW_BIN(less_equal, DT_ALL, true, false)
EW_BIN(greater, DT_ALL, true, false)
EW_BIN(greater_equal, DT_ALL, true, false)
EW_BIN(logical_and, DT_ALL, true, false)
EW_BIN(logical_or, DT_ALL, true, false)
EW_BIN(logical_xor, DT_ALL, true, false)
#undef EW_BIN

#define NOATTR {NULL, 0.0, NULL, 0.0}
#define EW_UN(name, mask, attrs)                                             \
    keel_status k_##name(void *, const keel_kernel_args *a)                  \
    {                                                                        \
        return un_launch<mask, u_##name>(a, #name, attrs);                   \
    }

EW_UN(neg, DT_SIGNED, NOATTR)
EW_UN(abs, DT_SIGNED, NOATTR)
EW_UN(sign, DT_SIGNED, NOATTR)
EW_UN(exp, DT_FLOAT, NOATTR)
EW_UN(log, DT_FLOAT, NOATTR)
EW_UN(log1p, DT_FLOAT, NOATTR)
EW_UN(sqrt, DT_FLOAT, NOATTR)
EW_UN(rsqrt, DT_FLOAT, NOATTR)
EW_UN(square, DT_NUMERIC, NOATTR)
EW_UN(sin, DT_FLOAT, NOATTR)
EW_UN(cos, DT_FLOAT, NOATTR)
EW_UN(floor, DT_FLOAT, NOATTR)
EW_UN(ceil, DT_FLOAT, NOATTR)
EW_UN(round, DT_FLOAT, NOATTR)
EW_UN(relu, DT_SIGNED, NOATTR)
EW_UN(relu6, DT_FLOAT, NOATTR)
EW_UN(leaky_relu, DT_FLOAT, (uattrs{"negative_slope", 0.01, NULL, 0.0}))
EW_UN(elu, DT_FLOAT, (uattrs{"alpha", 1.0, NULL, 0.0}))
EW_UN(silu, DT_FLOAT, NOATTR)
EW_UN(sigmoid, DT_FLOAT, NOATTR)
EW_UN(tanh, DT_FLOAT, NOATTR)
EW_UN(softplus, DT_FLOAT, (uattrs{"beta", 1.0, "threshold", 20.0}))
EW_UN(hardswish, DT_FLOAT, NOATTR)
EW_UN(clip, DT_NUMERIC, (uattrs{"min", -HUGE_VAL, "max", HUGE_VAL}))
#undef EW_UN

/* gelu: the exact (erf) form, or the tanh approximation. */
keel_status k_gelu(void *, const keel_kernel_args *a)
{
    if (a && a->struct_size >= KEEL_KERNEL_ARGS_MIN_SIZE &&
        (a->num_attrs == 0 || a->attrs) &&
        ck_attr_i(a, "approximate", 0))
        return un_launch<DT_FLOAT, u_gelu_tanh>(a, "gelu", NOATTR);
    return un_launch<DT_FLOAT, u_gelu>(a, "gelu", NOATTR);
}
#undef NOATTR

keel_status k_logical_not(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_dtype dt;
    keel_status st = ck_begin(a, "logical_not", &l);

    if (st)
        return st;
    st = value_dtype(a, "logical_not", -1, DT_ALL, &dt);
    if (st)
        return st;
    st = dispatch<DT_ALL>(dt, not_vis{&l, a}, "logical_not");
    if (st)
        return st;
    return ck_end(&l);
}

/* where(cond, x, y): selection on storage, by element size. */
keel_status k_where(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_dtype dt;
    keel_status st = ck_begin(a, "where", &l);

    if (st)
        return st;
    st = value_dtype(a, "where", 0, DT_ALL, &dt);
    if (st)
        return st;
    ck_iter<4> it;
    ck_iter_args<4>(&it, a);
    switch (keel_dtype_size(dt)) {
    case 1: ck_for_each<4>(&l, it, where_each<uint8_t>()); break;
    case 2: ck_for_each<4>(&l, it, where_each<uint16_t>()); break;
    case 4: ck_for_each<4>(&l, it, where_each<uint32_t>()); break;
    default: ck_for_each<4>(&l, it, where_each<uint64_t>()); break;
    }
    return ck_end(&l);
}

} // namespace

#if CK_HOST_PASS
extern "C" const struct ck_entry ck_kernels_elementwise[] = {
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
#endif

