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
#define NPU_TRAIN_NEED_ALL                                                  \
    (NPU_TRAIN_NEED_OPT | NPU_TRAIN_NEED_LN | NPU_TRAIN_NEED_LN_GRAD)

#define NPU_ACLNN_PHASE2_PARAMS                                               \
    (void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,        \
     aclrtStream stream)

#define NPU_ACLNN_TRAIN_FUNCS(X)                                              \
    /* selfRef += alpha * other */                                            \
    X(aclnnStatus, aclnnInplaceAddGetWorkspaceSize,                           \
      (const aclTensor *selfRef, const aclTensor *other,                      \
       const aclScalar *alpha, uint64_t *workspaceSize,                       \
       aclOpExecutor **executor),                                             \
      NPU_TRAIN_NEED_OPT)                                                     \
    X(aclnnStatus, aclnnInplaceAdd, NPU_ACLNN_PHASE2_PARAMS,                  \
      NPU_TRAIN_NEED_OPT)                                                     \
    /* selfRef *= other (a scalar) */                                         \
    X(aclnnStatus, aclnnInplaceMulsGetWorkspaceSize,                          \
      (aclTensor *selfRef, const aclScalar *other, uint64_t *workspaceSize,   \
       aclOpExecutor **executor),                                             \
      NPU_TRAIN_NEED_OPT)                                                     \
    X(aclnnStatus, aclnnInplaceMuls, NPU_ACLNN_PHASE2_PARAMS,                 \
      NPU_TRAIN_NEED_OPT)                                                     \
    /* selfRef += alpha * other (both scalars) */                             \
    X(aclnnStatus, aclnnInplaceAddsGetWorkspaceSize,                          \
      (const aclTensor *selfRef, const aclScalar *other,                      \
       const aclScalar *alpha, uint64_t *workspaceSize,                       \
       aclOpExecutor **executor),                                             \
      NPU_TRAIN_NEED_ADAM)                                                    \
    X(aclnnStatus, aclnnInplaceAdds, NPU_ACLNN_PHASE2_PARAMS,                 \
      NPU_TRAIN_NEED_ADAM)                                                    \
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
      NPU_TRAIN_NEED_ADAM)                                                    \
    X(aclnnStatus, aclnnInplaceAddcdiv, NPU_ACLNN_PHASE2_PARAMS,              \
      NPU_TRAIN_NEED_ADAM)                                                    \
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
      NPU_TRAIN_NEED_LN_GRAD)

#endif /* KEEL_NPU_ACLNN_TRAIN_API_H */
