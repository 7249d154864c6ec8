/*
 * keel Ascend NPU plugin — the aclnn entry points of npu_kernels_train.c.
 *
 * An X-macro list in the shape of NPU_OPAPI_FUNCS (acl_api.h): the plugin
 * resolves each one from libopapi.so with dlsym, and the stand-in
 * (tests/acl_standin_train.c) declares its exports from the same list, so
 * a signature that drifts does not compile. Where each declaration was
 * checked: docs/npu-plugin.md, "Training kernels".
 *
 * X(return type, name, parameters, group): `group` names the kernels that
 * need the entry point (a mask of NPU_TRAIN_NEED_*), so that a library
 * lacking one of them still offers the others.
 */
#ifndef KEEL_NPU_ACLNN_TRAIN_API_H
#define KEEL_NPU_ACLNN_TRAIN_API_H

#include "acl_api.h"

/* The kernels that need an entry point. */
#define NPU_TRAIN_NEED_SGD 0x1u
#define NPU_TRAIN_NEED_MOMENTUM 0x2u
#define NPU_TRAIN_NEED_ADAM 0x4u /* adam_update and adamw_update */
#define NPU_TRAIN_NEED_OPT                                                  \
    (NPU_TRAIN_NEED_SGD | NPU_TRAIN_NEED_MOMENTUM | NPU_TRAIN_NEED_ADAM)
#define NPU_TRAIN_NEED_LN 0x8u
#define NPU_TRAIN_NEED_LN_GRAD 0x10u
#define NPU_TRAIN_NEED_BN 0x20u
#define NPU_TRAIN_NEED_BN_GRAD 0x40u
#define NPU_TRAIN_NEED_SM_GRAD 0x80u
#define NPU_TRAIN_NEED_LSM_GRAD 0x100u
#define NPU_TRAIN_NEED_CE 0x200u
#define NPU_TRAIN_NEED_CE_GRAD 0x400u
#define NPU_TRAIN_NEED_ALL                                                  \
    (NPU_TRAIN_NEED_OPT | NPU_TRAIN_NEED_LN | NPU_TRAIN_NEED_LN_GRAD |      \
     NPU_TRAIN_NEED_BN | NPU_TRAIN_NEED_BN_GRAD | NPU_TRAIN_NEED_SM_GRAD |  \
     NPU_TRAIN_NEED_LSM_GRAD | NPU_TRAIN_NEED_CE | NPU_TRAIN_NEED_CE_GRAD)

#define NPU_ACLNN_PHASE2_PARAMS                                               \
    (void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,        \
     aclrtStream stream)

#define NPU_ACLNN_TRAIN_FUNCS(X)                                              \
    /* selfRef += alpha * other */                                            \
    X(aclnnStatus, aclnnInplaceAddGetWorkspaceSize,                           \
      (const aclTensor *selfRef, const aclTensor *other,                      \
       const aclScalar *alpha, uint64_t *workspaceSize,                       \
       aclOpExecutor **executor),                                             \
      NPU_TRAIN_NEED_OPT | NPU_TRAIN_NEED_BN)                                 \
    X(aclnnStatus, aclnnInplaceAdd, NPU_ACLNN_PHASE2_PARAMS,                  \
      NPU_TRAIN_NEED_OPT | NPU_TRAIN_NEED_BN)                                 \
    /* selfRef *= other (a scalar) */                                         \
    X(aclnnStatus, aclnnInplaceMulsGetWorkspaceSize,                          \
      (aclTensor *selfRef, const aclScalar *other, uint64_t *workspaceSize,   \
       aclOpExecutor **executor),                                             \
      NPU_TRAIN_NEED_OPT | NPU_TRAIN_NEED_BN | NPU_TRAIN_NEED_CE)             \
    X(aclnnStatus, aclnnInplaceMuls, NPU_ACLNN_PHASE2_PARAMS,                 \
      NPU_TRAIN_NEED_OPT | NPU_TRAIN_NEED_BN | NPU_TRAIN_NEED_CE)             \
    /* selfRef += alpha * other (both scalars) */                             \
    X(aclnnStatus, aclnnInplaceAddsGetWorkspaceSize,                          \
      (const aclTensor *selfRef, const aclScalar *other,                      \
       const aclScalar *alpha, uint64_t *workspaceSize,                       \
       aclOpExecutor **executor),                                             \
      NPU_TRAIN_NEED_ADAM | NPU_TRAIN_NEED_BN | NPU_TRAIN_NEED_CE |           \
          NPU_TRAIN_NEED_CE_GRAD)                                             \
    X(aclnnStatus, aclnnInplaceAdds, NPU_ACLNN_PHASE2_PARAMS,                 \
      NPU_TRAIN_NEED_ADAM | NPU_TRAIN_NEED_BN | NPU_TRAIN_NEED_CE |           \
          NPU_TRAIN_NEED_CE_GRAD)                                             \
    /* selfRef += value * tensor1 * tensor2 */                                \
    X(aclnnStatus, aclnnInplaceAddcmulGetWorkspaceSize,                       \
      (const aclTensor *selfRef, const aclTensor *tensor1,                    \
       const aclTensor *tensor2, const aclScalar *value,                      \
       uint64_t *workspaceSize, aclOpExecutor **executor),                    \
      NPU_TRAIN_NEED_ADAM)                                                    \
    X(aclnnStatus, aclnnInplaceAddcmul, NPU_ACLNN_PHASE2_PARAMS,              \
      NPU_TRAIN_NEED_ADAM)                                                    \
    /* selfRef += value * tensor1 / tensor2 */                                \
    X(aclnnStatus, aclnnInplaceAddcdivGetWorkspaceSize,                       \
      (const aclTensor *selfRef, const aclTensor *tensor1,                    \
       const aclTensor *tensor2, const aclScalar *value,                      \
       uint64_t *workspaceSize, aclOpExecutor **executor),                    \
      NPU_TRAIN_NEED_ADAM | NPU_TRAIN_NEED_BN)                                \
    X(aclnnStatus, aclnnInplaceAddcdiv, NPU_ACLNN_PHASE2_PARAMS,              \
      NPU_TRAIN_NEED_ADAM | NPU_TRAIN_NEED_BN)                                \
    /* out = sqrt(self) */                                                    \
    X(aclnnStatus, aclnnSqrtGetWorkspaceSize,                                 \
      (const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,        \
       aclOpExecutor **executor),                                             \
      NPU_TRAIN_NEED_ADAM)                                                    \
    X(aclnnStatus, aclnnSqrt, NPU_ACLNN_PHASE2_PARAMS, NPU_TRAIN_NEED_ADAM)  \
    /* out = (input - mean) rstd weight + bias over the trailing dims     \
     * normalizedShape; meanOut / rstdOut [A..., 1...] */                 \
    X(aclnnStatus, aclnnLayerNormGetWorkspaceSize,                            \
      (const aclTensor *input, const aclIntArray *normalizedShape,            \
       const aclTensor *weightOptional, const aclTensor *biasOptional,        \
       double eps, aclTensor *out, aclTensor *meanOutOptional,                \
       aclTensor *rstdOutOptional, uint64_t *workspaceSize,                   \
       aclOpExecutor **executor),                                             \
      NPU_TRAIN_NEED_LN)                                                      \
    X(aclnnStatus, aclnnLayerNorm, NPU_ACLNN_PHASE2_PARAMS,                   \
      NPU_TRAIN_NEED_LN)                                                      \
    X(aclnnStatus, aclnnLayerNormBackwardGetWorkspaceSize,                    \
      (const aclTensor *gradOut, const aclTensor *input,                      \
       const aclIntArray *normalizedShape, const aclTensor *mean,             \
       const aclTensor *rstd, const aclTensor *weightOptional,                \
       const aclTensor *biasOptional, const aclBoolArray *outputMask,         \
       aclTensor *gradInputOut, aclTensor *gradWeightOut,                     \
       aclTensor *gradBiasOut, uint64_t *workspaceSize,                       \
       aclOpExecutor **executor),                                             \
      NPU_TRAIN_NEED_LN_GRAD)                                                 \
    X(aclnnStatus, aclnnLayerNormBackward, NPU_ACLNN_PHASE2_PARAMS,           \
      NPU_TRAIN_NEED_LN_GRAD)                                                 \
    /* PyTorch's batch norm over dim 1; running statistics optional */       \
    X(aclnnStatus, aclnnBatchNormGetWorkspaceSize,                            \
      (const aclTensor *input, const aclTensor *weight,                       \
       const aclTensor *bias, aclTensor *runningMean, aclTensor *runningVar,  \
       bool training, double momentum, double eps, aclTensor *output,         \
       aclTensor *saveMean, aclTensor *saveInvstd, uint64_t *workspaceSize,   \
       aclOpExecutor **executor),                                             \
      NPU_TRAIN_NEED_BN)                                                      \
    X(aclnnStatus, aclnnBatchNorm, NPU_ACLNN_PHASE2_PARAMS,                   \
      NPU_TRAIN_NEED_BN)                                                      \
    X(aclnnStatus, aclnnBatchNormBackwardGetWorkspaceSize,                    \
      (const aclTensor *gradOut, const aclTensor *input,                      \
       const aclTensor *weight, const aclTensor *runningMean,                 \
       const aclTensor *runningVar, const aclTensor *saveMean,                \
       const aclTensor *saveInvstd, bool training, double eps,                \
       const aclBoolArray *outputMask, aclTensor *gradInput,                  \
       aclTensor *gradWeight, aclTensor *gradBias, uint64_t *workspaceSize,   \
       aclOpExecutor **executor),                                             \
      NPU_TRAIN_NEED_BN_GRAD)                                                 \
    X(aclnnStatus, aclnnBatchNormBackward, NPU_ACLNN_PHASE2_PARAMS,           \
      NPU_TRAIN_NEED_BN_GRAD)                                                 \
    /* out = output (gradOutput - sum(gradOutput output)) along dim */       \
    X(aclnnStatus, aclnnSoftmaxBackwardGetWorkspaceSize,                      \
      (const aclTensor *gradOutput, const aclTensor *output, int64_t dim,     \
       aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor),    \
      NPU_TRAIN_NEED_SM_GRAD)                                                 \
    X(aclnnStatus, aclnnSoftmaxBackward, NPU_ACLNN_PHASE2_PARAMS,             \
      NPU_TRAIN_NEED_SM_GRAD)                                                 \
    /* out = gradOutput - exp(output) sum(gradOutput) along dim */           \
    X(aclnnStatus, aclnnLogSoftmaxBackwardGetWorkspaceSize,                   \
      (const aclTensor *gradOutput, const aclTensor *output, int64_t dim,     \
       aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor),    \
      NPU_TRAIN_NEED_LSM_GRAD | NPU_TRAIN_NEED_CE_GRAD)                       \
    X(aclnnStatus, aclnnLogSoftmaxBackward, NPU_ACLNN_PHASE2_PARAMS,          \
      NPU_TRAIN_NEED_LSM_GRAD | NPU_TRAIN_NEED_CE_GRAD)                       \
    /* out = -weight[t] self[n, t] per sample (0 where t is ignoreIndex),    \
     * reduction 0 none, 1 mean (over the total weight), 2 sum */            \
    X(aclnnStatus, aclnnNLLLossGetWorkspaceSize,                              \
      (const aclTensor *self, const aclTensor *target,                        \
       const aclTensor *weight, int64_t reduction, int64_t ignoreIndex,       \
       aclTensor *out, aclTensor *totalWeightOut, uint64_t *workspaceSize,    \
       aclOpExecutor **executor),                                             \
      NPU_TRAIN_NEED_CE)                                                      \
    X(aclnnStatus, aclnnNLLLoss, NPU_ACLNN_PHASE2_PARAMS, NPU_TRAIN_NEED_CE)  \
    /* out[n, t] = -weight[t] gradOutput[n] (over totalWeight for mean),    \
     * 0 elsewhere and where t is ignoreIndex */                             \
    X(aclnnStatus, aclnnNLLLossBackwardGetWorkspaceSize,                      \
      (const aclTensor *gradOutput, const aclTensor *self,                    \
       const aclTensor *target, const aclTensor *weight, int64_t reduction,   \
       int64_t ignoreIndex, const aclTensor *totalWeight, aclTensor *out,     \
       uint64_t *workspaceSize, aclOpExecutor **executor),                    \
      NPU_TRAIN_NEED_CE_GRAD)                                                 \
    X(aclnnStatus, aclnnNLLLossBackward, NPU_ACLNN_PHASE2_PARAMS,             \
      NPU_TRAIN_NEED_CE_GRAD)                                                 \
    /* out = ln(self) */                                                      \
    X(aclnnStatus, aclnnLogGetWorkspaceSize,                                  \
      (const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,        \
       aclOpExecutor **executor),                                             \
      NPU_TRAIN_NEED_CE_GRAD)                                                 \
    X(aclnnStatus, aclnnLog, NPU_ACLNN_PHASE2_PARAMS, NPU_TRAIN_NEED_CE_GRAD)

#endif /* KEEL_NPU_ACLNN_TRAIN_API_H */
