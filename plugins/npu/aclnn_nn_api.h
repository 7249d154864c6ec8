/*
 * The aclnn operators of the npu plugin's nn kernels (npu_kernels_nn.c):
 * linear, conv2d, conv2d_transpose and their gradients, avg_pool2d,
 * adaptive_avg_pool2d and their gradients. Declared
 * here from public sources (docs/npu-plugin.md, "nn kernels", says which
 * declaration was checked against what); the plugin resolves each with
 * dlsym from libopapi.so's handle, and the stand-in (tests/acl_standin_nn.c)
 * defines its exports from this same list, so a signature that drifts
 * does not compile.
 *
 * Every entry is X(ret, name, params); NPU_NN_FUNCS lists the phase-1
 * and phase-2 halves of each operator.
 */
#ifndef KEEL_NPU_ACLNN_NN_API_H
#define KEEL_NPU_ACLNN_NN_API_H

#include <stdbool.h>
#include <stdint.h>

#include "acl_api.h"

#define NPU_NN_PHASE2(X, name)                                              \
    X(aclnnStatus, name,                                                    \
      (void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,    \
       aclrtStream stream))

#define NPU_NN_FUNCS(X)                                                     \
    X(aclnnStatus, aclnnAddmmGetWorkspaceSize,                              \
      (const aclTensor *self, const aclTensor *mat1, const aclTensor *mat2, \
       const aclScalar *beta, const aclScalar *alpha, aclTensor *out,       \
       int8_t cubeMathType, uint64_t *workspaceSize,                        \
       aclOpExecutor **executor))                                           \
    NPU_NN_PHASE2(X, aclnnAddmm)                                            \
    X(aclnnStatus, aclnnConvolutionGetWorkspaceSize,                        \
      (const aclTensor *input, const aclTensor *weight,                     \
       const aclTensor *bias, const aclIntArray *stride,                    \
       const aclIntArray *padding, const aclIntArray *dilation,             \
       bool transposed, const aclIntArray *outputPadding,                   \
       const int64_t groups, aclTensor *output, int8_t cubeMathType,        \
       uint64_t *workspaceSize, aclOpExecutor **executor))                  \
    NPU_NN_PHASE2(X, aclnnConvolution)                                      \
    X(aclnnStatus, aclnnConvolutionBackwardGetWorkspaceSize,                \
      (const aclTensor *gradOutput, const aclTensor *input,                 \
       const aclTensor *weight, const aclIntArray *biasSizes,               \
       const aclIntArray *stride, const aclIntArray *padding,               \
       const aclIntArray *dilation, bool transposed,                        \
       const aclIntArray *outputPadding, int groups,                        \
       const aclBoolArray *outputMask, int8_t cubeMathType,                 \
       aclTensor *gradInput, aclTensor *gradWeight, aclTensor *gradBias,    \
       uint64_t *workspaceSize, aclOpExecutor **executor))                  \
    NPU_NN_PHASE2(X, aclnnConvolutionBackward)                              \
    X(aclnnStatus, aclnnAvgPool2dGetWorkspaceSize,                          \
      (const aclTensor *self, const aclIntArray *kernelSize,                \
       const aclIntArray *strides, const aclIntArray *paddings,             \
       const bool ceilMode, const bool countIncludePad,                     \
       const int64_t divisorOverride, const int8_t cubeMathType,            \
       aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor))  \
    NPU_NN_PHASE2(X, aclnnAvgPool2d)                                        \
    X(aclnnStatus, aclnnAvgPool2dBackwardGetWorkspaceSize,                  \
      (const aclTensor *gradOutput, const aclTensor *self,                  \
       const aclIntArray *kernelSize, const aclIntArray *stride,            \
       const aclIntArray *padding, bool ceilMode, bool countIncludePad,     \
       int64_t divisorOverride, int8_t cubeMathType, aclTensor *gradInput,  \
       uint64_t *workspaceSize, aclOpExecutor **executor))                  \
    NPU_NN_PHASE2(X, aclnnAvgPool2dBackward)                                \
    X(aclnnStatus, aclnnAdaptiveAvgPool2dGetWorkspaceSize,                  \
      (const aclTensor *self, const aclIntArray *outputSize, aclTensor *out, \
       uint64_t *workspaceSize, aclOpExecutor **executor))                  \
    NPU_NN_PHASE2(X, aclnnAdaptiveAvgPool2d)                                \
    X(aclnnStatus, aclnnAdaptiveAvgPool2dBackwardGetWorkspaceSize,          \
      (const aclTensor *gradOutput, const aclTensor *self, aclTensor *out,  \
       uint64_t *workspaceSize, aclOpExecutor **executor))                  \
    NPU_NN_PHASE2(X, aclnnAdaptiveAvgPool2dBackward)

#endif /* KEEL_NPU_ACLNN_NN_API_H */
