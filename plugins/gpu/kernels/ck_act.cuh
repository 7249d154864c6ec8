/*
 * keel GPU kernels (CUDA and HIP) — the activations, written once: the
 * activation ops of k_elementwise.cu (relu, relu6, leaky_relu, gelu and
 * its tanh form, silu, sigmoid, tanh, hardswish) compute with these, and
 * so does the epilogue of the fused inference ops (fused_linear in
 * k_linalg.cu, fused_conv2d in k_conv.cu), so that a fused result is the
 * activation op's on the unfused one.
 *
 *   ck_act_relu<M>(a) ...   one activation on the math type M (float for
 *                           float32/float16/bfloat16, double for float64;
 *                           relu also on integers)
 *   ck_act_apply<M>(act, a, alpha)
 *                           the keel_fused_act `act` (keel/op_catalog.h);
 *                           alpha: leaky_relu's negative slope
 *   ck_act_run(l, dt, act, alpha, y, n)
 *                           in place on n contiguous elements of dtype dt
 *                           on l->stream, one thread per element,
 *                           grid-stride; float16/bfloat16 read as float
 *                           and rounded back once, as the activation op
 *                           does. KEEL_FUSED_ACT_NONE launches nothing.
 */
#ifndef KEEL_GPU_CK_ACT_CUH
#define KEEL_GPU_CK_ACT_CUH

#include "ck.cuh"

/* ---- math by precision ---------------------------------------------------- */

__device__ __forceinline__ float ck_act_exp(float a) { return expf(a); }
__device__ __forceinline__ double ck_act_exp(double a) { return exp(a); }
__device__ __forceinline__ float ck_act_tanh(float a) { return tanhf(a); }
__device__ __forceinline__ double ck_act_tanh(double a) { return tanh(a); }
__device__ __forceinline__ float ck_act_erfc(float a) { return erfcf(a); }
__device__ __forceinline__ double ck_act_erfc(double a) { return erfc(a); }

/* ---- the activations -------------------------------------------------------- */

template <class M> __device__ __forceinline__ M ck_act_relu(M a)
{
    return a < 0 ? (M)0 : a;
}
template <class M> __device__ __forceinline__ M ck_act_relu6(M a)
{
    return a < 0 ? (M)0 : a > 6 ? (M)6 : a;
}
template <class M> __device__ __forceinline__ M ck_act_leaky_relu(M a, M s)
{
    return a > 0 ? a : a * s;
}
/* 0.5 x (1 + erf(x / sqrt 2)) through erfc: no cancellation for x < 0. */
template <class M> __device__ __forceinline__ M ck_act_gelu(M a)
{
    return (M)0.5 * a * ck_act_erfc(-a * (M)0.70710678118654752440);
}
template <class M> __device__ __forceinline__ M ck_act_gelu_tanh(M a)
{
    return (M)0.5 * a *
           ((M)1 + ck_act_tanh((M)0.79788456080286535588 *
                               (a + (M)0.044715 * a * a * a)));
}
template <class M> __device__ __forceinline__ M ck_act_silu(M a)
{
    return a / ((M)1 + ck_act_exp(-a));
}
template <class M> __device__ __forceinline__ M ck_act_sigmoid(M a)
{
    return (M)1 / ((M)1 + ck_act_exp(-a));
}
template <class M> __device__ __forceinline__ M ck_act_hardswish(M a)
{
    M t = a + 3;

    t = t < 0 ? (M)0 : t > 6 ? (M)6 : t;
    return a * t / 6;
}

template <class M>
__device__ __forceinline__ M ck_act_apply(int act, M a, M alpha)
{
    switch (act) {
    case KEEL_FUSED_ACT_RELU:
        return ck_act_relu(a);
    case KEEL_FUSED_ACT_RELU6:
        return ck_act_relu6(a);
    case KEEL_FUSED_ACT_GELU:
        return ck_act_gelu(a);
    case KEEL_FUSED_ACT_GELU_TANH:
        return ck_act_gelu_tanh(a);
    case KEEL_FUSED_ACT_SILU:
        return ck_act_silu(a);
    case KEEL_FUSED_ACT_SIGMOID:
        return ck_act_sigmoid(a);
    case KEEL_FUSED_ACT_TANH:
        return ck_act_tanh(a);
    case KEEL_FUSED_ACT_LEAKY_RELU:
        return ck_act_leaky_relu(a, alpha);
    case KEEL_FUSED_ACT_HARDSWISH:
        return ck_act_hardswish(a);
    default:
        return a;
    }
}

/* ---- the epilogue kernel ------------------------------------------------------ */

/* y[i] = act(y[i]), i < n: the act switch is uniform across the grid. */
template <class T>
__global__ void ck_act_kernel(T *y, int64_t n, int act,
                              typename ck_compute<T>::C alpha)
{
    typedef typename ck_compute<T>::C M;
    int64_t step = (int64_t)blockDim.x * gridDim.x;

    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += step)
        y[i] = ck_cv<T>(ck_act_apply<M>(act, ck_cv<M>(y[i]), alpha));
}

static inline keel_status ck_act_run(const struct ck_launch *l, keel_dtype dt,
                                     int act, double alpha, void *y, int64_t n)
{
    unsigned g = ck_grid(n, CK_BLOCK);

    if (act == KEEL_FUSED_ACT_NONE || n <= 0)
        return KEEL_STATUS_OK;
    switch (dt) {
    case KEEL_F32:
        ck_act_kernel<float><<<g, CK_BLOCK, 0, l->stream>>>(
            (float *)y, n, act, (float)alpha);
        break;
    case KEEL_F64:
        ck_act_kernel<double><<<g, CK_BLOCK, 0, l->stream>>>((double *)y, n,
                                                             act, alpha);
        break;
    case KEEL_F16:
        ck_act_kernel<ck_half><<<g, CK_BLOCK, 0, l->stream>>>(
            (ck_half *)y, n, act, (float)alpha);
        break;
    case KEEL_BF16:
        ck_act_kernel<ck_bf16><<<g, CK_BLOCK, 0, l->stream>>>(
            (ck_bf16 *)y, n, act, (float)alpha);
        break;
    default:
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: activation on %s", l->op, ck_dtype_name(dt));
    }
    return KEEL_STATUS_OK;
}

#endif /* KEEL_GPU_CK_ACT_CUH */
