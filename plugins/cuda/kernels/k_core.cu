/*
 * keel CUDA plugin — core kernels every tensor needs: copy (strided to
 * strided, same dtype), full, cast (any dtype to any dtype).
 */
#include "ck.cuh"

namespace {

/* ---- copy ------------------------------------------------------------------ */

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
    if ((st = ck_arity(a, "copy", 1, 1)))
        return st;
    if (a->inputs[0].dtype != a->outputs[0].dtype ||
        ck_numel(&a->inputs[0]) != ck_numel(&a->outputs[0]))
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "copy: needs one input and one output of the same "
                       "dtype and size");
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

/* ---- full ------------------------------------------------------------------ */

template <class T> struct fill_op {
    T v;
    __device__ void operator()(char *const *p, int64_t) const
    {
        *(T *)p[0] = v;
    }
};

template <class T> struct host_value {
    static T of(double v) { return (T)v; }
};
template <> struct host_value<__half> {
    static __half of(double v) { return __double2half(v); }
};
template <> struct host_value<__nv_bfloat16> {
    static __nv_bfloat16 of(double v) { return __double2bfloat16(v); }
};
template <> struct host_value<bool> {
    static bool of(double v) { return v != 0.0; }
};

keel_status k_full(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "full", &l);

    if (st)
        return st;
    if (a->num_outputs != 1)
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "full: needs exactly one output");
    double v = ck_attr_f(a, "value", 0.0);
    ck_iter<1> it;
    const keel_tensor_desc *d[1] = {&a->outputs[0]};
    ck_iter_make<1>(&it, d);
    CK_SWITCH_ALL(a->outputs[0].dtype, T,
                  (ck_for_each<1>(&l, it, fill_op<T>{host_value<T>::of(v)})),
                  return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                                 "full: unknown output dtype"))
    return ck_end(&l);
}

/* ---- cast -------------------------------------------------------------------- */

/* Integer to integer wraps like C; floating to integer goes through the
 * compute type as C conversions do (NaN and out-of-range values are
 * undefined in C; CUDA saturates them). */
template <class To, class From> struct cast_op {
    __device__ void operator()(char *const *p, int64_t) const
    {
        *(To *)p[0] = ck_cv<To>(*(const From *)p[1]);
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
    if ((st = ck_arity(a, "cast", 1, 1)))
        return st;
    if (ck_numel(&a->inputs[0]) != ck_numel(&a->outputs[0]))
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "cast: needs one input and one output of one size");
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

} // namespace

extern "C" const struct ck_entry ck_kernels_core[] = {
    {"copy", KEEL_DT_ALL, k_copy},
    {"full", KEEL_DT_ALL, k_full},
    {"cast", KEEL_DT_ALL, k_cast},
    {NULL, 0, NULL},
};
