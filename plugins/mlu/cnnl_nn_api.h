/*
 * The CNNL operators mlu_kernels_nn.c calls (softmax, log_softmax, matmul,
 * linear, cast, conv2d, conv2d_grad, avg_pool2d, avg_pool2d_grad), declared here so that the plugin builds without Neuware.
 * The shared CNNL types (handle, tensor descriptor, status, dtype) are in
 * cnrt_api.h; the stand-in (tests/cnnl_standin_nn.c) declares its exports
 * from the list below, so a signature that drifts stops compiling there.
 *
 * WHERE EACH FACT WAS CHECKED (public sources only)
 *
 *   - cnnlComputationPreference_t: CNNL_COMPUTATION_FAST 0,
 *     CNNL_COMPUTATION_HIGH_PRECISION 1, against the copy of Neuware's
 *     cnnl core header (CNNL_CORE_H_) that cnrt_api.h cites;
 *   - the argument order of cnnlSoftmaxForward_v2(handle, algorithm, mode,
 *     prefer, alpha, x_desc, x, beta, y_desc, y): PaddlePaddle/
 *     PaddleCustomDevice backends/mlu (mlu_baseop.cc, impl/
 *     softmax_kernel_impl.h), oneflow's MLU log_softmax kernel, DIOPI's
 *     Cambricon softmax, and a copy of Cambricon's API documentation; and
 *     its 3-D view: CNNL_SOFTMAX_MODE_LOW_DIMENSION on [d1, 1, d2]
 *     normalises along the last dim, MEDIUM_DIMENSION on [d1, d2, d3]
 *     along the middle one, HIGH_DIMENSION along the first (the same
 *     callers pick the mode from the axis that way); CNNL_SOFTMAX_LOG is
 *     the algorithm those callers use for log_softmax;
 *   - cnnlMatMul(handle, is_trans_a, is_trans_b, alpha, a_desc, a, b_desc,
 *     b, beta, c_desc, c) with float alpha and beta: PaddleCustomDevice
 *     mlu_baseop.cc (MLUCnnl::Matmul) and DIOPI's Cambricon linear, which
 *     also shows the bias written first with cnnlExpand(handle, in_desc,
 *     in, out_desc, out) and then accumulated with beta 1;
 *   - cnnlGetBatchMatMulBCastWorkspaceSize(handle, a_desc, b_desc, c_desc,
 *     size_t *) and cnnlBatchMatMulBCast(handle, is_trans_a, is_trans_b,
 *     a_desc, a, b_desc, b, workspace, workspace_size, c_desc, c):
 *     PaddleCustomDevice mlu_baseop.cc (MLUCnnl::BatchMatmul), torch_mlu's
 *     bmm and Cambricon mlu-ops' wrapper of it;
 *   - cnnlCastDataType(handle, input_desc, input, cast_type, output_desc,
 *     output) and the names CNNL_CAST_FLOAT_TO_HALF, CNNL_CAST_HALF_TO_FLOAT,
 *     CNNL_CAST_INT32_TO_FLOAT, CNNL_CAST_INT32_TO_HALF (type
 *     cnnlCastDataType_t): PaddleCustomDevice's cast table, torch_mlu's
 *     cast_map and DIOPI's Cambricon cast table;
 *   - CNNL_LAYOUT_NHWC 1 (cnnlTensorLayout_t), against the core header,
 *     with cnnlSetTensorDescriptor(desc, layout, dtype, dimNb, dimSize[])
 *     from the same header;
 *   - for conv2d, against PaddleCustomDevice, torch_mlu, DIOPI's Cambricon
 *     convolution, InfiniCore's CNNL convolution and MegEngine's Cambricon
 *     backend: cnnlSetTransposeDescriptor(desc, dims, permute[]),
 *     cnnlGetTransposeWorkspaceSize(handle, x_desc, trans_desc, size_t *),
 *     cnnlTranspose_v2(handle, trans_desc, x_desc, x, y_desc, y,
 *     workspace, workspace_size), cnnlSetConvolutionDescriptor(desc, 4,
 *     pad[4] (top, bottom, left, right, as two callers fill it from (h, w)
 *     paddings), stride[2], dilation[2], group_count, compute dtype),
 *     cnnlGetConvolutionForwardAlgorithm(handle, conv, x, w, y,
 *     preference, &algo), cnnlGetConvolutionForwardWorkspaceSize(handle,
 *     x, w, y, bias, conv, algo, size_t *) and cnnlConvolutionForward(
 *     handle, conv, algo, alpha, x_desc, x, w_desc, w, bias_desc, bias,
 *     workspace, workspace_size, beta, y_desc, y) with NHWC x, y and an
 *     [O, kh, kw, C/g] filter; for conv2d_grad, against the same callers
 *     (PaddleCustomDevice MLUCnnl::ConvBackpropInput / ConvBackpropFilter,
 *     torch_mlu, oneflow, DIOPI): cnnlGetConvolutionBackwardDataAlgorithm(
 *     handle, w, dy, conv, dx, preference, &algo), its WorkspaceSize(
 *     handle, w, dy, conv, dx, algo, size_t *), cnnlConvolutionBackwardData(
 *     handle, alpha, w_desc, w, dy_desc, dy, conv, algo, workspace,
 *     workspace_size, beta, dx_desc, dx), the Filter trio with (handle,
 *     conv, x, dy, dw, preference, &algo), (handle, x, dy, dw, conv, algo,
 *     size_t *) and (handle, alpha, x_desc, x, dy_desc, dy, conv, algo,
 *     workspace, workspace_size, beta, dw_desc, dw), and cnnlFill(handle,
 *     float value, desc, ptr) (PaddleCustomDevice MLUCnnl::Fill, DIOPI);
 *   - for avg_pool2d, against PaddleCustomDevice (MLUCnnlPoolingDesc),
 *     torch_mlu's and oneflow's CnnlPoolingDescriptor and MegEngine's
 *     Cambricon backend: cnnlSetPooling2dDescriptor(desc, mode, nan,
 *     window_h, window_w, pad top, bottom, left, right, stride_h,
 *     stride_w), cnnlGetPoolingWorkspaceSize(handle, mode, out_w, out_h,
 *     size_t *) (width first), cnnlPoolingForward(handle, desc, alpha,
 *     x_desc, x, beta, y_desc, y, workspace, workspace_size) on NHWC
 *     descriptors, and the names of cnnlPoolingMode_t's values; for
 *     avg_pool2d_grad, against oneflow's and DIOPI's Cambricon kernels:
 *     cnnlPoolingBackward(handle, desc, alpha, y_desc, y (NULL for the
 *     average modes), diff_y_desc, diff_y, x_desc, x, beta, diff_x_desc,
 *     diff_x).
 *
 * NOT VERIFIED (no public header with these enums was found): the values
 * of cnnlSoftmaxAlgorithm_t (FAST 0, ACCURATE 1, LOG 2 taken, cuDNN's
 * order), cnnlSoftmaxMode_t (HIGH_DIMENSION 0, MEDIUM_DIMENSION 1,
 * LOW_DIMENSION 2 taken) and every cnnlCastDataType_t value below (the
 * public callers use the names only; the one value seen, in a comment,
 * CNNL_CAST_HALF_TO_FLOAT_INF 129, shows the enum is not numbered
 * 0, 1, 2, ..., so the numbers here are placeholders) and
 * cnnlConvolutionFwdPreference_t, cnnlConvolutionBwdDataPreference_t and
 * cnnlConvolutionBwdFilterPreference_t (each _FASTEST taken as 0),
 * cnnlPoolingMode_t (MAX 0, AVERAGE_COUNT_INCLUDE_PADDING 1,
 * AVERAGE_COUNT_EXCLUDE_PADDING 2 taken). Also not verified: which
 * divisor CNNL's INCLUDE_PADDING mode takes for a window that runs past
 * the padded input (the plugin refuses ceil_mode, where that happens),
 * whether cnnlMatMul with K = 0 writes beta * c (the plugin refuses K = 0),
 * how CNNL's float-to-integer casts round (the plugin takes none), and
 * that cnnlBatchMatMulBCast reads a batch dim of size 1 as broadcast.
 */
#ifndef KEEL_MLU_CNNL_NN_API_H
#define KEEL_MLU_CNNL_NN_API_H

#include <stdbool.h>
#include <stddef.h>

#include "cnrt_api.h"

/* Values NOT verified (see above). */
typedef enum {
    CNNL_SOFTMAX_FAST = 0,
    CNNL_SOFTMAX_ACCURATE = 1,
    CNNL_SOFTMAX_LOG = 2,
} cnnlSoftmaxAlgorithm_t;

typedef enum {
    CNNL_SOFTMAX_MODE_HIGH_DIMENSION = 0,
    CNNL_SOFTMAX_MODE_MEDIUM_DIMENSION = 1,
    CNNL_SOFTMAX_MODE_LOW_DIMENSION = 2,
} cnnlSoftmaxMode_t;

/* Verified against the core header. */
typedef enum {
    CNNL_COMPUTATION_FAST = 0,
    CNNL_COMPUTATION_HIGH_PRECISION = 1,
} cnnlComputationPreference_t;

/* Names verified, values NOT (placeholders; see above). */
typedef enum {
    CNNL_CAST_FLOAT_TO_HALF = 1,
    CNNL_CAST_HALF_TO_FLOAT = 2,
    CNNL_CAST_INT32_TO_FLOAT = 3,
    CNNL_CAST_INT32_TO_HALF = 4,
} cnnlCastDataType_t;

/* ---- conv2d ---- */

/* cnnlTensorLayout_t's NHWC (1), verified against the core header. */
#define MLU_CNNL_LAYOUT_NHWC ((cnnlTensorLayout_t)1)

typedef struct cnnlConvolutionStruct *cnnlConvolutionDescriptor_t;
typedef struct cnnlTransposeStruct *cnnlTransposeDescriptor_t;

/* Value NOT verified; the algorithm CNNL picks for it is passed back to
 * CNNL unread, so no value of cnnlConvolutionForwardAlgo_t is needed. */
typedef enum { CNNL_CONVOLUTION_FWD_FASTEST = 0 } cnnlConvolutionFwdPreference_t;
typedef enum { MLU_CNNL_CONV_FWD_ALGO_ANY = 0 } cnnlConvolutionForwardAlgo_t;
/* The same for the backward passes. */
typedef enum {
    CNNL_CONVOLUTION_BWD_DATA_FASTEST = 0
} cnnlConvolutionBwdDataPreference_t;
typedef enum { MLU_CNNL_CONV_BWD_DATA_ALGO_ANY = 0 } cnnlConvolutionBwdDataAlgo_t;
typedef enum {
    CNNL_CONVOLUTION_BWD_FILTER_FASTEST = 0
} cnnlConvolutionBwdFilterPreference_t;
typedef enum {
    MLU_CNNL_CONV_BWD_FILTER_ALGO_ANY = 0
} cnnlConvolutionBwdFilterAlgo_t;

/* ---- avg_pool2d ---- */

typedef struct cnnlPoolingStruct *cnnlPoolingDescriptor_t;

/* Names verified (public callers), values NOT (cuDNN's order taken). */
typedef enum {
    CNNL_POOLING_MAX = 0,
    CNNL_POOLING_AVERAGE_COUNT_INCLUDE_PADDING = 1,
    CNNL_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING = 2,
} cnnlPoolingMode_t;

/*
 * X(return type, name, parameters). Each kernel needs only its own entries
 * (mlu_kernels_nn.c says which): a library without one still offers the
 * others.
 */
#define MLU_CNNL_NN_FUNCS(X)                                                  \
    X(cnnlStatus_t, cnnlSoftmaxForward_v2,                                    \
      (cnnlHandle_t handle, cnnlSoftmaxAlgorithm_t algorithm,                 \
       cnnlSoftmaxMode_t mode, cnnlComputationPreference_t prefer,            \
       const void *alpha, const cnnlTensorDescriptor_t x_desc, const void *x, \
       const void *beta, const cnnlTensorDescriptor_t y_desc, void *y))       \
    X(cnnlStatus_t, cnnlMatMul,                                               \
      (cnnlHandle_t handle, const bool is_trans_a, const bool is_trans_b,     \
       const void *alpha, const cnnlTensorDescriptor_t a_desc, const void *a, \
       const cnnlTensorDescriptor_t b_desc, const void *b, const void *beta,  \
       const cnnlTensorDescriptor_t c_desc, void *c))                         \
    X(cnnlStatus_t, cnnlGetBatchMatMulBCastWorkspaceSize,                     \
      (cnnlHandle_t handle, const cnnlTensorDescriptor_t a_desc,              \
       const cnnlTensorDescriptor_t b_desc,                                   \
       const cnnlTensorDescriptor_t c_desc, size_t *size))                    \
    X(cnnlStatus_t, cnnlBatchMatMulBCast,                                     \
      (cnnlHandle_t handle, const bool is_trans_a, const bool is_trans_b,     \
       const cnnlTensorDescriptor_t a_desc, const void *a,                    \
       const cnnlTensorDescriptor_t b_desc, const void *b, void *workspace,   \
       size_t workspace_size, const cnnlTensorDescriptor_t c_desc, void *c))  \
    X(cnnlStatus_t, cnnlExpand,                                               \
      (cnnlHandle_t handle, const cnnlTensorDescriptor_t input_desc,          \
       const void *input, const cnnlTensorDescriptor_t output_desc,           \
       void *output))                                                         \
    X(cnnlStatus_t, cnnlCastDataType,                                         \
      (cnnlHandle_t handle, const cnnlTensorDescriptor_t input_desc,          \
       const void *input, const cnnlCastDataType_t cast_type,                 \
       const cnnlTensorDescriptor_t output_desc, void *output))             \
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
       size_t workspace_size))                                                \
    X(cnnlStatus_t, cnnlCreateConvolutionDescriptor,                          \
      (cnnlConvolutionDescriptor_t *desc))                                    \
    X(cnnlStatus_t, cnnlDestroyConvolutionDescriptor,                         \
      (cnnlConvolutionDescriptor_t desc))                                     \
    X(cnnlStatus_t, cnnlSetConvolutionDescriptor,                             \
      (cnnlConvolutionDescriptor_t desc, int dimNb, const int pad[],          \
       const int stride[], const int dilation[], int group_count,             \
       cnnlDataType_t compute_type))                                          \
    X(cnnlStatus_t, cnnlGetConvolutionForwardAlgorithm,                       \
      (cnnlHandle_t handle, const cnnlConvolutionDescriptor_t conv_desc,      \
       const cnnlTensorDescriptor_t x_desc,                                   \
       const cnnlTensorDescriptor_t w_desc,                                   \
       const cnnlTensorDescriptor_t y_desc,                                   \
       const cnnlConvolutionFwdPreference_t preference,                       \
       cnnlConvolutionForwardAlgo_t *algo))                                   \
    X(cnnlStatus_t, cnnlGetConvolutionForwardWorkspaceSize,                   \
      (cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc,              \
       const cnnlTensorDescriptor_t w_desc,                                   \
       const cnnlTensorDescriptor_t y_desc,                                   \
       const cnnlTensorDescriptor_t bias_desc,                                \
       const cnnlConvolutionDescriptor_t conv_desc,                           \
       const cnnlConvolutionForwardAlgo_t algo, size_t *size))                \
    X(cnnlStatus_t, cnnlConvolutionForward,                                   \
      (cnnlHandle_t handle, const cnnlConvolutionDescriptor_t conv_desc,      \
       cnnlConvolutionForwardAlgo_t algo, const void *alpha,                  \
       const cnnlTensorDescriptor_t x_desc, const void *x,                    \
       const cnnlTensorDescriptor_t w_desc, const void *w,                    \
       const cnnlTensorDescriptor_t bias_desc, const void *bias,              \
       void *workspace, size_t workspace_size, const void *beta,              \
       const cnnlTensorDescriptor_t y_desc, void *y))                         \
    X(cnnlStatus_t, cnnlGetConvolutionBackwardDataAlgorithm,                  \
      (cnnlHandle_t handle, const cnnlTensorDescriptor_t w_desc,              \
       const cnnlTensorDescriptor_t dy_desc,                                  \
       const cnnlConvolutionDescriptor_t conv_desc,                           \
       const cnnlTensorDescriptor_t dx_desc,                                  \
       const cnnlConvolutionBwdDataPreference_t preference,                   \
       cnnlConvolutionBwdDataAlgo_t *algo))                                   \
    X(cnnlStatus_t, cnnlGetConvolutionBackwardDataWorkspaceSize,              \
      (cnnlHandle_t handle, const cnnlTensorDescriptor_t w_desc,              \
       const cnnlTensorDescriptor_t dy_desc,                                  \
       const cnnlConvolutionDescriptor_t conv_desc,                           \
       const cnnlTensorDescriptor_t dx_desc,                                  \
       const cnnlConvolutionBwdDataAlgo_t algo, size_t *size))                \
    X(cnnlStatus_t, cnnlConvolutionBackwardData,                              \
      (cnnlHandle_t handle, const void *alpha,                                \
       const cnnlTensorDescriptor_t w_desc, const void *w,                    \
       const cnnlTensorDescriptor_t dy_desc, const void *dy,                  \
       const cnnlConvolutionDescriptor_t conv_desc,                           \
       const cnnlConvolutionBwdDataAlgo_t algo, void *workspace,              \
       size_t workspace_size, const void *beta,                               \
       const cnnlTensorDescriptor_t dx_desc, void *dx))                       \
    X(cnnlStatus_t, cnnlGetConvolutionBackwardFilterAlgorithm,                \
      (cnnlHandle_t handle, const cnnlConvolutionDescriptor_t conv_desc,      \
       const cnnlTensorDescriptor_t x_desc,                                   \
       const cnnlTensorDescriptor_t dy_desc,                                  \
       const cnnlTensorDescriptor_t dw_desc,                                  \
       const cnnlConvolutionBwdFilterPreference_t preference,                 \
       cnnlConvolutionBwdFilterAlgo_t *algo))                                 \
    X(cnnlStatus_t, cnnlGetConvolutionBackwardFilterWorkspaceSize,            \
      (cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc,              \
       const cnnlTensorDescriptor_t dy_desc,                                  \
       const cnnlTensorDescriptor_t dw_desc,                                  \
       const cnnlConvolutionDescriptor_t conv_desc,                           \
       const cnnlConvolutionBwdFilterAlgo_t algo, size_t *size))              \
    X(cnnlStatus_t, cnnlConvolutionBackwardFilter,                            \
      (cnnlHandle_t handle, const void *alpha,                                \
       const cnnlTensorDescriptor_t x_desc, const void *x,                    \
       const cnnlTensorDescriptor_t dy_desc, const void *dy,                  \
       const cnnlConvolutionDescriptor_t conv_desc,                           \
       const cnnlConvolutionBwdFilterAlgo_t algo, void *workspace,            \
       size_t workspace_size, const void *beta,                               \
       const cnnlTensorDescriptor_t dw_desc, void *dw))                       \
    X(cnnlStatus_t, cnnlFill,                                                 \
      (cnnlHandle_t handle, float value,                                      \
       const cnnlTensorDescriptor_t output_desc, void *output))             \
    X(cnnlStatus_t, cnnlCreatePoolingDescriptor,                              \
      (cnnlPoolingDescriptor_t *desc))                                        \
    X(cnnlStatus_t, cnnlDestroyPoolingDescriptor,                             \
      (cnnlPoolingDescriptor_t desc))                                         \
    X(cnnlStatus_t, cnnlSetPooling2dDescriptor,                               \
      (cnnlPoolingDescriptor_t desc, cnnlPoolingMode_t mode,                  \
       cnnlNanPropagation_t nan, int window_height, int window_width,         \
       int top_padding, int bottom_padding, int left_padding,                 \
       int right_padding, int vertical_stride, int horizon_stride))           \
    X(cnnlStatus_t, cnnlGetPoolingWorkspaceSize,                              \
      (cnnlHandle_t handle, cnnlPoolingMode_t mode, int output_w,             \
       int output_h, size_t *size))                                           \
    X(cnnlStatus_t, cnnlPoolingForward,                                       \
      (cnnlHandle_t handle, const cnnlPoolingDescriptor_t desc,               \
       const void *alpha, const cnnlTensorDescriptor_t x_desc, const void *x, \
       const void *beta, const cnnlTensorDescriptor_t y_desc, void *y,        \
       void *workspace, size_t workspace_size))                               \
    X(cnnlStatus_t, cnnlPoolingBackward,                                      \
      (cnnlHandle_t handle, const cnnlPoolingDescriptor_t desc,               \
       const void *alpha, const cnnlTensorDescriptor_t y_desc, const void *y, \
       const cnnlTensorDescriptor_t diff_y_desc, const void *diff_y,          \
       const cnnlTensorDescriptor_t x_desc, const void *x, const void *beta,  \
       const cnnlTensorDescriptor_t diff_x_desc, void *diff_x))

#endif /* KEEL_MLU_CNNL_NN_API_H */
