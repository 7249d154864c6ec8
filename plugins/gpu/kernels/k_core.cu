/*
 * keel CUDA plugin — core kernels every tensor needs: copy (strided to
 * strided, same dtype), full, cast (any dtype to any dtype), and the
 * creation kernels arange, linspace, eye, uniform, normal, randint and
 * bernoulli.
 *
 * Every kernel here is one ck_for_each over the output (and the input,
 * for copy, cast and bernoulli): one thread per element, grid-stride. The
 * creation kernels compute element i from its logical (row-major) index
 * alone, so any output layout works; the random ones use keel/philox.h
 * with the counter offset + i, exactly as the CPU plugin does.
 *
 * Conversions follow the CPU plugin's kstore/kload: a double goes to
 * float16/bfloat16 through float, to an integer by truncation saturated
 * to the dtype's range (NaN gives 0), to bool as v != 0. The double
 * arithmetic of the creation kernels is written with explicit _rn
 * intrinsics so that nvcc cannot contract it into FMAs: float32 results
 * are then bit-identical to the CPU plugin's (normal: up to the last-ulp
 * differences of the device's log and cos).
 */
#include "ck.cuh"

namespace {

/* ---- conversions from double (the CPU plugin's kstore) ------------------ */

/* Truncation toward zero, saturated to [lo, hi]; NaN gives 0. */
__host__ __device__ inline int64_t sat_i64(double v, double lo, double hi)
{
    if (v != v)
        return 0;
    if (v <= lo)
        return (int64_t)lo;
    if (v >= hi)
        return (int64_t)hi;
    return (int64_t)v;
}

template <class T> struct tag {};

template <class T> struct is_bool { static const bool v = false; };
template <> struct is_bool<bool> { static const bool v = true; };

__host__ __device__ inline float cd(tag<float>, double v) { return (float)v; }
__host__ __device__ inline double cd(tag<double>, double v) { return v; }
__host__ __device__ inline ck_half cd(tag<ck_half>, double v)
{
    return ck_f2h((float)v);
}
__host__ __device__ inline ck_bf16 cd(tag<ck_bf16>, double v)
{
    return ck_f2bf((float)v);
}
__host__ __device__ inline int8_t cd(tag<int8_t>, double v)
{
    return (int8_t)sat_i64(v, -128.0, 127.0);
}
__host__ __device__ inline uint8_t cd(tag<uint8_t>, double v)
{
    return (uint8_t)sat_i64(v, 0.0, 255.0);
}
__host__ __device__ inline int32_t cd(tag<int32_t>, double v)
{
    return (int32_t)sat_i64(v, -2147483648.0, 2147483647.0);
}
/* The largest double below 2^63 keeps the cast defined. */
__host__ __device__ inline int64_t cd(tag<int64_t>, double v)
{
    return sat_i64(v, -9223372036854775808.0, 9223372036854774784.0);
}
__host__ __device__ inline bool cd(tag<bool>, double v) { return v != 0.0; }

template <class T> __host__ __device__ inline T conv_d(double v)
{
    return cd(tag<T>(), v);
}

/* An int64 value: integers wrap, bool is v != 0, floats go via double
 * (the CPU plugin's kstore_i). */
template <class T> __device__ inline T conv_i(int64_t v)
{
    if constexpr (ck_is_float<T>::v)
        return conv_d<T>((double)v);
    else if constexpr (is_bool<T>::v)
        return v != 0;
    else
        return (T)v;
}

template <class T> __device__ inline T conv_v(double v)
{
    return conv_d<T>(v);
}
template <class T> __device__ inline T conv_v(int64_t v)
{
    return conv_i<T>(v);
}

/* ---- copy --------------------------------------------------------------- */

template <class T> struct copy_op {
    __device__ void operator()(char *const *p, int64_t) const
    {
        *(T *)p[0] = *(const T *)p[1];
    }
};

keel_status k_copy(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "copy", &l);

    if (st)
        return st;
    ck_iter<2> it;
    ck_iter_args<2>(&it, a);
    if (it.contig) {
        if (it.numel > 0)
            st = ck_check(cudaMemcpyAsync(it.base[0], it.base[1],
                                          (size_t)(it.numel * it.esize[0]),
                                          cudaMemcpyDeviceToDevice,
                                          l.stream),
                          &l, "cudaMemcpyAsync");
        return st;
    }
    switch (it.esize[0]) {
    case 1: ck_for_each<2>(&l, it, copy_op<uint8_t>()); break;
    case 2: ck_for_each<2>(&l, it, copy_op<uint16_t>()); break;
    case 4: ck_for_each<2>(&l, it, copy_op<uint32_t>()); break;
    default: ck_for_each<2>(&l, it, copy_op<uint64_t>()); break;
    }
    return ck_end(&l);
}

/* ---- full --------------------------------------------------------------- */

template <class T> struct fill_op {
    T v;
    __device__ void operator()(char *const *p, int64_t) const
    {
        *(T *)p[0] = v;
    }
};

keel_status k_full(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "full", &l);

    if (st)
        return st;
    double v = ck_attr_f(a, "value", 0.0);
    ck_iter<1> it;
    const keel_tensor_desc *d[1] = {&a->outputs[0]};
    ck_iter_make<1>(&it, d);
    CK_SWITCH_ALL(a->outputs[0].dtype, T,
                  (ck_for_each<1>(&l, it, fill_op<T>{conv_d<T>(v)})),
                  return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                                 "full: unknown output dtype"))
    return ck_end(&l);
}

/* ---- cast --------------------------------------------------------------- */

/* Integer to integer wraps like C, float to float rounds once per step
 * (float64 to float16 through float32, as the CPU plugin). Between the
 * two families the value goes through double like the CPU plugin's
 * kload/kstore: to an integer it truncates and saturates (NaN gives 0),
 * and int64 reaches float32 by way of double. */
template <class To, class From> struct cast_op {
    __device__ void operator()(char *const *p, int64_t) const
    {
        const From v = *(const From *)p[1];

        if constexpr (ck_is_float<To>::v != ck_is_float<From>::v)
            *(To *)p[0] = conv_d<To>(ck_cv<double>(v));
        else
            *(To *)p[0] = ck_cv<To>(v);
    }
};

template <class To>
keel_status cast_to(const struct ck_launch *l, const ck_iter<2> &it,
                    keel_dtype from)
{
    CK_SWITCH_ALL(from, From, (ck_for_each<2>(l, it, cast_op<To, From>())),
                  return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                                 "cast: unknown input dtype"))
    return KEEL_STATUS_OK;
}

keel_status k_cast(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "cast", &l);

    if (st)
        return st;
    ck_iter<2> it;
    ck_iter_args<2>(&it, a);
    CK_SWITCH_ALL(a->outputs[0].dtype, To,
                  (st = cast_to<To>(&l, it, a->inputs[0].dtype)),
                  return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                                 "cast: unknown output dtype"))
    if (st)
        return st;
    return ck_end(&l);
}

/* ---- creation ----------------------------------------------------------- */

/* p = {out}: element i (row-major index) of the output is g(i). */
template <class T, class G> struct gen_op {
    G g;
    __device__ void operator()(char *const *p, int64_t i) const
    {
        *(T *)p[0] = conv_v<T>(g(i));
    }
};

/* Begin (the kit checks the single output) and build its iterator. */
keel_status gen_begin(const keel_kernel_args *a, const char *op,
                      struct ck_launch *l, ck_iter<1> *it)
{
    keel_status st = ck_begin(a, op, l);

    if (st)
        return st;
    const keel_tensor_desc *d[1] = {&a->outputs[0]};
    ck_iter_make<1>(it, d);
    return KEEL_STATUS_OK;
}

/* Run generator g over the output, in the output's dtype. */
template <class G>
keel_status gen_run(const struct ck_launch *l, const ck_iter<1> &it,
                    keel_dtype dt, G g)
{
    CK_SWITCH_ALL(dt, T, (ck_for_each<1>(l, it, gen_op<T, G>{g})),
                  return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                                 "%s: unknown output dtype", l->op))
    return ck_end(l);
}

/* start + i * step in double, without contraction; the last element of
 * a linspace (index `last`) is exactly `stop`. */
struct seq_gen {
    double start, step, stop;
    int64_t last; /* -1: none */
    __device__ double operator()(int64_t i) const
    {
        if (i == last)
            return stop;
        return __dadd_rn(start, __dmul_rn((double)i, step));
    }
};

keel_status k_arange(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    ck_iter<1> it;
    keel_status st = gen_begin(a, "arange", &l, &it);

    if (st)
        return st;
    seq_gen g = {ck_attr_f(a, "start", 0.0), ck_attr_f(a, "step", 1.0), 0.0,
                 -1};
    return gen_run(&l, it, a->outputs[0].dtype, g);
}

keel_status k_linspace(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    ck_iter<1> it;
    keel_status st = gen_begin(a, "linspace", &l, &it);

    if (st)
        return st;
    int64_t n = ck_numel(&a->outputs[0]);
    double start = ck_attr_f(a, "start", 0.0);
    double stop = ck_attr_f(a, "stop", 0.0);
    seq_gen g = {start, n > 1 ? (stop - start) / (double)(n - 1) : 0.0, stop,
                 n > 1 ? n - 1 : -1};
    return gen_run(&l, it, a->outputs[0].dtype, g);
}

/* Ones where row == column of an [n, m] output. */
struct eye_gen {
    int64_t m;
    __device__ double operator()(int64_t i) const
    {
        return i / m == i % m ? 1.0 : 0.0;
    }
};

keel_status k_eye(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    ck_iter<1> it;
    keel_status st = gen_begin(a, "eye", &l, &it);

    if (st)
        return st;
    /* The kit checked the output is 2-D; m >= 1 whenever anything is launched (numel > 0). */
    eye_gen g = {a->outputs[0].shape[1] > 0 ? a->outputs[0].shape[1] : 1};
    return gen_run(&l, it, a->outputs[0].dtype, g);
}

/* ---- random (keel/philox.h) --------------------------------------------- */

struct rnd_attrs {
    uint64_t seed, offset;
};

rnd_attrs rnd_from(const keel_kernel_args *a)
{
    rnd_attrs r = {(uint64_t)ck_attr_i(a, "seed", 0),
                   (uint64_t)ck_attr_i(a, "offset", 0)};
    return r;
}

/* low + (high - low) * u(seed, offset + i). */
struct uniform_gen {
    rnd_attrs r;
    double low, span;
    __device__ double operator()(int64_t i) const
    {
        float u = keel_philox_uniform(r.seed, r.offset + (uint64_t)i);
        return __dadd_rn(low, __dmul_rn(span, (double)u));
    }
};

/* mean + std * sqrt(-2 ln(1 - u1)) cos(2 pi u2), u1 and u2 from the
 * counters offset + 2i and offset + 2i + 1. */
struct normal_gen {
    rnd_attrs r;
    double mean, std;
    __device__ double operator()(int64_t i) const
    {
        const double two_pi = 2.0 * 3.14159265358979323846;
        uint64_t c = r.offset + 2 * (uint64_t)i;
        double u1 = keel_philox_uniform(r.seed, c);
        double u2 = keel_philox_uniform(r.seed, c + 1);
        double rad = sqrt(__dmul_rn(-2.0, log(__dsub_rn(1.0, u1))));
        double z = __dmul_rn(rad, cos(__dmul_rn(two_pi, u2)));
        return __dadd_rn(mean, __dmul_rn(std, z));
    }
};

/* low + floor(u * (high - low)), kept below high; an int64 value. */
struct randint_gen {
    rnd_attrs r;
    int64_t low, span;
    __device__ int64_t operator()(int64_t i) const
    {
        double u = keel_philox_uniform(r.seed, r.offset + (uint64_t)i);
        int64_t v = low + (int64_t)floor(__dmul_rn(u, (double)span));

        if (v >= low + span)
            v = low + span - 1;
        return v;
    }
};

keel_status k_uniform(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    ck_iter<1> it;
    keel_status st = gen_begin(a, "uniform", &l, &it);

    if (st)
        return st;
    double low = ck_attr_f(a, "low", 0.0), high = ck_attr_f(a, "high", 1.0);
    uniform_gen g = {rnd_from(a), low, high - low};
    return gen_run(&l, it, a->outputs[0].dtype, g);
}

keel_status k_normal(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    ck_iter<1> it;
    keel_status st = gen_begin(a, "normal", &l, &it);

    if (st)
        return st;
    normal_gen g = {rnd_from(a), ck_attr_f(a, "mean", 0.0),
                    ck_attr_f(a, "std", 1.0)};
    return gen_run(&l, it, a->outputs[0].dtype, g);
}

keel_status k_randint(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    ck_iter<1> it;
    keel_status st = gen_begin(a, "randint", &l, &it);

    if (st)
        return st;
    /* As the CPU plugin: the bounds read as doubles, truncated. */
    int64_t low = (int64_t)ck_attr_f(a, "low", 0.0);
    int64_t high = (int64_t)ck_attr_f(a, "high", 1.0);
    randint_gen g = {rnd_from(a), low, high - low};
    return gen_run(&l, it, a->outputs[0].dtype, g);
}

/* p = {out, prob}: 1 where u(seed, offset + i) < p[i], else 0. */
template <class TO, class TP> struct bernoulli_op {
    rnd_attrs r;
    __device__ void operator()(char *const *p, int64_t i) const
    {
        float u = keel_philox_uniform(r.seed, r.offset + (uint64_t)i);
        double pr = ck_cv<double>(*(const TP *)p[1]);

        *(TO *)p[0] = conv_d<TO>((double)u < pr ? 1.0 : 0.0);
    }
};

template <class TO>
keel_status bernoulli_to(const struct ck_launch *l, const ck_iter<2> &it,
                         keel_dtype pdt, rnd_attrs r)
{
    CK_SWITCH_FLOAT(pdt, TP,
                    (ck_for_each<2>(l, it, bernoulli_op<TO, TP>{r})),
                    return ck_fail(KEEL_STATUS_NOT_SUPPORTED,
                                   "bernoulli: probabilities of dtype %s "
                                   "(expected a float dtype)",
                                   ck_dtype_name(pdt)))
    return KEEL_STATUS_OK;
}

keel_status k_bernoulli(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    ck_iter<1> oit;
    keel_status st = gen_begin(a, "bernoulli", &l, &oit);

    if (st)
        return st;
    /* The kit checked that p has the output's shape and a float dtype. */
    const keel_tensor_desc *o = &a->outputs[0];
    const keel_tensor_desc *d[2] = {o, &a->inputs[0]};
    ck_iter<2> it;
    ck_iter_make<2>(&it, d);
    rnd_attrs r = rnd_from(a);
    CK_SWITCH_ALL(o->dtype, TO, (st = bernoulli_to<TO>(&l, it, a->inputs[0].dtype, r)),
                  return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                                 "bernoulli: unknown output dtype"))
    if (st)
        return st;
    return ck_end(&l);
}

} // namespace

#if CK_HOST_PASS
extern "C" const struct ck_entry ck_kernels_core[] = {
    {"copy", KEEL_DT_ALL, k_copy},
    {"full", KEEL_DT_ALL, k_full},
    {"cast", KEEL_DT_ALL, k_cast},
    {"arange", KEEL_DT_NUMERIC, k_arange},
    {"linspace", KEEL_DT_FLOAT, k_linspace},
    {"eye", KEEL_DT_ALL, k_eye},
    {"uniform", KEEL_DT_FLOAT, k_uniform},
    {"normal", KEEL_DT_FLOAT, k_normal},
    {"randint", KEEL_DT_INT, k_randint},
    {"bernoulli", KEEL_DT_FLOAT, k_bernoulli},
    {NULL, 0, NULL},
};
#endif

