/*
 * The CNNL entry points mlu_kernels_train.c adds to those of cnrt_api.h
 * (optimizer updates composed from elementwise calls). Declared here so
 * the plugin builds without Neuware; the plugin dlsym()s every function
 * below from libcnnl.so, and the stand-in (tests/cnnl_standin_train.c)
 * declares its exports from the same list, so a drifting signature does
 * not compile.
 *
 * WHERE EACH FACT WAS CHECKED (public sources only; docs/mlu-plugin.md,
 * "Training ops", says the same):
 *   - cnnlComputationPreference_t: CNNL_COMPUTATION_FAST 0,
 *     CNNL_COMPUTATION_HIGH_PRECISION 1, in a copy of Neuware's cnnl core
 *     header (CNNL_CORE_H_, "Copyright (C) 2021 Cambricon") kept in a
 *     public repository and named by content only;
 *   - cnnlSqrt_v2(handle, prefer, x_desc, x, y_desc, y): PaddlePaddle/
 *     PaddleCustomDevice backends/mlu/kernels/funcs/mlu_baseop.cc
 *     (MLUCnnl::Sqrt) and DeepLink's camb sqrt wrapper;
 *   - cnnlGetDivWorkspaceSize(handle, a_desc, b_desc, c_desc, size_t *)
 *     and cnnlDiv_v2(handle, prefer, a_desc, a, b_desc, b, workspace,
 *     workspace_size, c_desc, c): the same mlu_baseop.cc (MLUCnnl::Div),
 *     Oneflow's cambricon div kernel and torch_mlu's div;
 *   - cnnlTransform(handle, alpha, x_desc, x, beta, y) computing
 *     y = alpha * x + beta with y described by x_desc: a prototype quoted
 *     in Oneflow's cambricon scalar-math kernel and its use there (alpha 1,
 *     beta the scalar to add).
 *
 * NOT VERIFIED: that alpha and beta of cnnlTransform are read as float
 * for a half tensor (Oneflow passes them in the tensor's type for float
 * only); that cnnlOpTensor accepts an output that is one of its inputs
 * (the in-place updates below rely on it, as in-place framework ops do).
 */
#ifndef KEEL_MLU_CNNL_TRAIN_API_H
#define KEEL_MLU_CNNL_TRAIN_API_H

#include "cnrt_api.h"

#ifndef MLU_CNNL_HAVE_COMPUTATION_PREFERENCE
#define MLU_CNNL_HAVE_COMPUTATION_PREFERENCE
typedef enum {
    CNNL_COMPUTATION_FAST = 0,
    CNNL_COMPUTATION_HIGH_PRECISION = 1,
} cnnlComputationPreference_t;
#endif

/* X(return type, name, parameters). Each kernel names the ones it needs
 * (mlu_kernels_train.c); a library without one of them does not get that
 * kernel offered. */
#define MLU_CNNL_TRAIN_FUNCS(X)                                               \
    X(cnnlStatus_t, cnnlTransform,                                            \
      (cnnlHandle_t handle, const void *alpha,                                \
       const cnnlTensorDescriptor_t x_desc, const void *x, const void *beta,  \
       void *y))                                                              \
    X(cnnlStatus_t, cnnlSqrt_v2,                                              \
      (cnnlHandle_t handle, cnnlComputationPreference_t prefer,               \
       const cnnlTensorDescriptor_t x_desc, const void *x,                    \
       const cnnlTensorDescriptor_t y_desc, void *y))                         \
    X(cnnlStatus_t, cnnlGetDivWorkspaceSize,                                  \
      (cnnlHandle_t handle, const cnnlTensorDescriptor_t a_desc,              \
       const cnnlTensorDescriptor_t b_desc,                                   \
       const cnnlTensorDescriptor_t c_desc, size_t *size))                    \
    X(cnnlStatus_t, cnnlDiv_v2,                                               \
      (cnnlHandle_t handle, cnnlComputationPreference_t prefer,               \
       const cnnlTensorDescriptor_t a_desc, const void *a,                    \
       const cnnlTensorDescriptor_t b_desc, const void *b, void *workspace,   \
       size_t workspace_size, const cnnlTensorDescriptor_t c_desc, void *c))

#endif /* KEEL_MLU_CNNL_TRAIN_API_H */
