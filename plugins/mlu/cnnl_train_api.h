/*
 * The CNNL entry points mlu_kernels_train.c adds to those of cnrt_api.h
 * (optimizer updates composed from elementwise calls, layer norm, batch
 * norm with its transposes). Declared here so
 * the plugin builds without Neuware; the plugin dlsym()s every function
 * below from libcnnl.so, and the stand-in (tests/cnnl_standin_train.c)
 * declares its exports from the same list, so a drifting signature does
 * not compile.
 *
 * WHERE EACH FACT WAS CHECKED (public sources only; docs/mlu-plugin.md,
 * "Training ops on CNNL", says the same):
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
 *     beta the scalar to add);
 *   - cnnlGetLayerNormOpWorkspaceSize(handle, int axis, x_desc, size_t *),
 *     cnnlLayerNormForward(handle, x_desc, x, int axis, wb_desc, weight,
 *     bias, float eps, workspace, workspace_size, y_desc, y,
 *     mean_rstd_desc, saved_mean, saved_rstd) (rstd = 1 / sqrt(var +
 *     eps), keel's invstd), cnnlGetLayerNormBackwardWorkspaceSize(handle,
 *     x_desc, int axis, size_t *) and cnnlLayerNormBackward_v2(handle,
 *     x_desc, x, axis, diff_z_desc, diff_z, w_desc, weight,
 *     mean_rstd_desc, saved_mean, saved_rstd, workspace, workspace_size,
 *     diff_x_desc, diff_x, diff_weight, diff_bias): Cambricon's torch_mlu
 *     (layer_norm internals), Oneflow's cambricon layer_norm kernels and
 *     DeepLink's camb layer_norm; a NULL wb_desc with NULL weight and bias
 *     (no affine) is how DeepLink calls the forward;
 *   - cnnlTensorLayout_t CNNL_LAYOUT_NHWC 1 and cnnlSetTensorDescriptor(
 *     desc, layout, dtype, dimNb, dimSize[]): the core header copy above;
 *   - cnnlCreate/DestroyTransposeDescriptor, cnnlSetTransposeDescriptor(
 *     desc, dims, permute[]), cnnlGetTransposeWorkspaceSize(handle,
 *     x_desc, trans_desc, size_t *), cnnlTranspose_v2(handle, trans_desc,
 *     x_desc, x, y_desc, y, workspace, workspace_size): torch_mlu's
 *     permute, DeepLink's camb transpose, Cambricon mlu-ops' CNNL helper;
 *   - cnnlBatchNormForwardTraining(handle, alpha, beta, x_desc, x,
 *     wbmv_desc, weight, bias, moving_mean, moving_var, eps, momentum,
 *     y_desc, y, saved_mean, saved_invstd), cnnlBatchNormForwardInference(
 *     handle, alpha, beta, x_desc, x, wbmv_desc, weight, bias, mean, var,
 *     eps, y_desc, y) and cnnlBatchNormBackward(handle, alpha_data_diff,
 *     beta_data_diff, alpha_param_diff, beta_param_diff, x_desc, x,
 *     diff_y_desc, diff_y, wbmv_desc, weight, saved_mean, saved_invstd,
 *     eps, diff_x_desc, diff_x, diff_weight, diff_bias), on NHWC x:
 *     torch_mlu, PaddleCustomDevice's mlu_baseop.cc (whose comment gives
 *     CNNL's running update as (1 - momentum) running + momentum batch)
 *     and oneflow's Cambricon batch norm (NHWC descriptors, a transpose
 *     each way); NULL moving_mean / moving_var when there are none, and
 *     NULL alpha / beta, are how torch_mlu calls them.
 *
 * NOT VERIFIED: that alpha and beta of cnnlTransform are read as float
 * for a half tensor (Oneflow passes them in the tensor's type for float
 * only); that cnnlOpTensor and cnnlTransform accept an output that is
 * one of their inputs (the in-place updates rely on it, as in-place
 * framework ops do); that
 * cnnlLayerNormForward takes a weight without a bias (not used: refused);
 * the dtype CNNL wants for mean and rstd of a half x (float16 layer norm
 * is not offered); which variance (biased or not) CNNL folds into its
 * moving variance (the plugin gives it no moving statistics and updates
 * keel's itself); that NULL alpha / beta of the batch-norm calls mean no
 * blending (all public callers pass NULL).
 */
#ifndef KEEL_MLU_CNNL_TRAIN_API_H
#define KEEL_MLU_CNNL_TRAIN_API_H

#include "cnrt_api.h"

typedef struct cnnlTransposeStruct *cnnlTransposeDescriptor_t;

/* A value of cnnlTensorLayout_t past cnrt_api.h's ARRAY (the same core
 * header: NCHW 0, NHWC 1, HWCN 2, NDHWC 3, ARRAY 4). */
#define MLU_CNNL_LAYOUT_NHWC ((cnnlTensorLayout_t)1)

#ifndef MLU_CNNL_HAVE_COMPUTATION_PREFERENCE
#define MLU_CNNL_HAVE_COMPUTATION_PREFERENCE
typedef enum {
    CNNL_COMPUTATION_FAST = 0,
    CNNL_COMPUTATION_HIGH_PRECISION = 1,
} cnnlComputationPreference_t;
#endif

/* X(return type, name, parameters), one list per group of kernels that
 * needs it (mlu_kernels_train.c): a library without one entry point of a
 * list does not get that list's kernels offered. */
#define MLU_CNNL_ADAM_FUNCS(X)                                                \
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

#define MLU_CNNL_LN_FUNCS(X)                                                  \
    X(cnnlStatus_t, cnnlGetLayerNormOpWorkspaceSize,                          \
      (cnnlHandle_t handle, int axis, const cnnlTensorDescriptor_t x_desc,    \
       size_t *size))                                                         \
    X(cnnlStatus_t, cnnlLayerNormForward,                                     \
      (cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc,              \
       const void *x, int axis, const cnnlTensorDescriptor_t wb_desc,         \
       const void *weight, const void *bias, float eps, void *workspace,      \
       size_t workspace_size, const cnnlTensorDescriptor_t y_desc, void *y,   \
       const cnnlTensorDescriptor_t mean_rstd_desc, void *saved_mean,         \
       void *saved_rstd))

#define MLU_CNNL_LNG_FUNCS(X)                                                 \
    X(cnnlStatus_t, cnnlGetLayerNormBackwardWorkspaceSize,                    \
      (cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc, int axis,    \
       size_t *size))                                                         \
    X(cnnlStatus_t, cnnlLayerNormBackward_v2,                                 \
      (cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc,              \
       const void *x, int axis, const cnnlTensorDescriptor_t diff_z_desc,     \
       const void *diff_z, const cnnlTensorDescriptor_t w_desc,               \
       const void *weight, const cnnlTensorDescriptor_t mean_rstd_desc,       \
       const void *saved_mean, const void *saved_rstd, void *workspace,       \
       size_t workspace_size, const cnnlTensorDescriptor_t diff_x_desc,       \
       void *diff_x, void *diff_weight, void *diff_bias))

/* Channels-last views (batch norm): a transpose, and descriptors with a
 * layout other than ARRAY. */
#define MLU_CNNL_NHWC_FUNCS(X)                                                \
    X(cnnlStatus_t, cnnlSetTensorDescriptor,                                  \
      (cnnlTensorDescriptor_t desc, cnnlTensorLayout_t layout,                \
       cnnlDataType_t dtype, int dimNb, const int dimSize[]))                 \
    X(cnnlStatus_t, cnnlCreateTransposeDescriptor,                            \
      (cnnlTransposeDescriptor_t *desc))                                      \
    X(cnnlStatus_t, cnnlDestroyTransposeDescriptor,                           \
      (cnnlTransposeDescriptor_t desc))                                       \
    X(cnnlStatus_t, cnnlSetTransposeDescriptor,                               \
      (cnnlTransposeDescriptor_t desc, const int dims, const int permute[]))  \
    X(cnnlStatus_t, cnnlGetTransposeWorkspaceSize,                            \
      (cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc,              \
       const cnnlTransposeDescriptor_t desc, size_t *size))                   \
    X(cnnlStatus_t, cnnlTranspose_v2,                                         \
      (cnnlHandle_t handle, const cnnlTransposeDescriptor_t desc,             \
       const cnnlTensorDescriptor_t x_desc, const void *x,                    \
       const cnnlTensorDescriptor_t y_desc, void *y, void *workspace,         \
       size_t workspace_size))

#define MLU_CNNL_BN_FUNCS(X)                                                  \
    X(cnnlStatus_t, cnnlBatchNormForwardTraining,                             \
      (cnnlHandle_t handle, const void *alpha, const void *beta,              \
       const cnnlTensorDescriptor_t x_desc, const void *x,                    \
       const cnnlTensorDescriptor_t wbmv_desc, const void *weight,            \
       const void *bias, void *moving_mean, void *moving_var, float eps,      \
       float momentum, const cnnlTensorDescriptor_t y_desc, void *y,          \
       void *saved_mean, void *saved_invstd))                                 \
    X(cnnlStatus_t, cnnlBatchNormForwardInference,                            \
      (cnnlHandle_t handle, const void *alpha, const void *beta,              \
       const cnnlTensorDescriptor_t x_desc, const void *x,                    \
       const cnnlTensorDescriptor_t wbmv_desc, const void *weight,            \
       const void *bias, const void *estimated_mean,                          \
       const void *estimated_var, float eps,                                  \
       const cnnlTensorDescriptor_t y_desc, void *y))

#define MLU_CNNL_BNG_FUNCS(X)                                                 \
    X(cnnlStatus_t, cnnlBatchNormBackward,                                    \
      (cnnlHandle_t handle, const void *alpha_data_diff,                      \
       const void *beta_data_diff, const void *alpha_param_diff,              \
       const void *beta_param_diff, const cnnlTensorDescriptor_t x_desc,      \
       const void *x, const cnnlTensorDescriptor_t diff_y_desc,               \
       const void *diff_y, const cnnlTensorDescriptor_t wbmv_desc,            \
       const void *weight, const void *saved_mean, const void *saved_invstd,  \
       float eps, const cnnlTensorDescriptor_t diff_x_desc, void *diff_x,     \
       void *diff_weight, void *diff_bias))

#define MLU_CNNL_TRAIN_FUNCS(X)                                               \
    MLU_CNNL_ADAM_FUNCS(X) MLU_CNNL_LN_FUNCS(X) MLU_CNNL_LNG_FUNCS(X)         \
    MLU_CNNL_NHWC_FUNCS(X) MLU_CNNL_BN_FUNCS(X) MLU_CNNL_BNG_FUNCS(X)

#endif /* KEEL_MLU_CNNL_TRAIN_API_H */
