/*
 * The part of Huawei's AscendCL (ACL) runtime API the npu plugin uses,
 * declared here from CANN's public documentation so that the plugin builds
 * without the CANN toolkit. Nothing is linked against: npu_plugin.c
 * dlopen()s libascendcl.so and looks every function up by name (see
 * NPU_ACL_FUNCS below), so a missing toolkit is a run-time condition, not
 * a build failure.
 *
 * WHERE EACH FACT WAS CHECKED
 *
 * Against the ACL headers that Ascend's PyTorch adapter keeps, as copied
 * from CANN, in github.com/Ascend/pytorch, third_party/acl/inc/acl/:
 *
 *   acl_base.h  aclError is int; aclrtStream, aclrtEvent, aclrtContext are
 *               void *; the aclError values below (ACL_SUCCESS 0,
 *               ACL_ERROR_INVALID_PARAM 100000 ... ACL_ERROR_BAD_ALLOC
 *               200000 ... ACL_ERROR_INTERNAL_ERROR 500000 ...);
 *               const char *aclrtGetSocName(void); aclDeviceInfo
 *               (ACL_DEVICE_INFO_AI_CORE_NUM 0) and aclGetDeviceCapability
 *               (uint32_t deviceId, aclDeviceInfo, int64_t *value), the
 *               latter through the adapter's own wrapper of it.
 *   acl.h       aclInit(const char *configPath), aclFinalize(void),
 *               const char *aclGetRecentErrMsg(void).
 *   acl_rt.h    every aclrt* prototype below, and the enums
 *               aclrtMemcpyKind (HOST_TO_HOST 0, HOST_TO_DEVICE 1,
 *               DEVICE_TO_HOST 2, DEVICE_TO_DEVICE 3), aclrtMemMallocPolicy
 *               (HUGE_FIRST 0, HUGE_ONLY 1, NORMAL_ONLY 2, ...),
 *               aclrtMemAttr (DDR_MEM 0, HBM_MEM 1, ...),
 *               aclrtEventRecordedStatus (NOT_READY 0, COMPLETE 1),
 *               aclrtCallbackBlockType (NO_BLOCK 0, BLOCK 1), and
 *               aclrtCallback = void (*)(void *userData).
 *
 *
 * The aclnn part (bottom of this file) against the same tree:
 *
 *   acl_op_api.h       aclnnStatus is int; aclTensor, aclScalar and
 *                      aclOpExecutor are opaque structs; aclCreateTensor
 *                      (viewDims, viewDimsNum, dataType, stride, offset,
 *                      format, storageDims, storageDimsNum, tensorData),
 *                      aclCreateScalar(value, dataType), aclDestroyTensor,
 *                      aclDestroyScalar.
 *   op_api/aclnn_op.h  aclnnAdd / aclnnMul / aclnnRelu and their
 *                      *GetWorkspaceSize halves (argument order below).
 *
 * aclnnSoftmax and aclnnLogSoftmax (self, int64_t dim, out, then the
 * workspace size and executor; the launch half as for the others) against
 * CANN's open operator sources, github.com/hicann/ops-nn,
 * activation/softmax_v2/op_host/op_api/aclnn_softmax.h for the first; the
 * second's prototype as the op_api/aclnn_op.h declaration list of a public
 * adapter tree and ops-nn's implementation of it give it (same shape).
 * Whether a negative dim is accepted is not relied on: the plugin passes
 * the axis normalised.
 *
 * aclnnMatmul (self, mat2, out, int8_t cubeMathType, then the workspace
 * size and executor) against ops-nn's
 * matmul/mat_mul_v3/op_host/op_api/aclnn_matmul.h; cubeMathType 0 is
 * KEEP_DTYPE (compute in the inputs' dtype), as the aclnnMatmul pages of
 * the same operator sources list it.
 *
 * aclnnCast (self, const aclDataType dtype, out, then the workspace size
 * and executor) against github.com/hicann/ops-math,
 * math/cast/op_host/op_api/aclnn_cast.h. Some public write-ups give the
 * dtype as int64_t; that header, CANN's own, says aclDataType, and so do
 * the adapters' declaration lists.
 *   acl_base.h         aclDataType (ACL_FLOAT 0, ACL_FLOAT16 1,
 *                      ACL_INT8 2, ACL_INT32 3, ACL_UINT8 4, ACL_INT64 9,
 *                      ACL_DOUBLE 11, ACL_BOOL 12, ACL_BF16 27) and
 *                      aclFormat (ACL_FORMAT_ND 2).
 *
 * aclnnStatus codes are reported by number only: public sources disagree
 * on which value is ACLNN_ERR_PARAM_NULLPTR and which is
 * ACLNN_ERR_PARAM_INVALID (161001 / 161002).
 *
 * Not verified anywhere public: the alignment aclrtMalloc guarantees (the
 * plugin declares NPU_ALLOC_ALIGNMENT and checks every pointer it gets),
 * the unit of aclrtProcessReport's timeout (taken as milliseconds, as
 * CANN's prose documentation says), and whether aclrtStreamWaitEvent
 * accepts an event of another device. The enum values that were checked
 * are spelled out below, never left to the compiler's counting.
 */
#ifndef KEEL_NPU_ACL_API_H
#define KEEL_NPU_ACL_API_H

#include <stddef.h>
#include <stdint.h>

typedef int aclError;
typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtContext;
typedef void (*aclrtCallback)(void *userData);

/* aclError values (acl_base.h): the ones the plugin names in messages. */
#define NPU_ACL_ERRORS(X)                               \
    X(ACL_SUCCESS, 0)                                   \
    X(ACL_ERROR_INVALID_PARAM, 100000)                  \
    X(ACL_ERROR_UNINITIALIZE, 100001)                   \
    X(ACL_ERROR_REPEAT_INITIALIZE, 100002)              \
    X(ACL_ERROR_INVALID_FILE, 100003)                   \
    X(ACL_ERROR_REPEAT_SUBSCRIBE, 100033)               \
    X(ACL_ERROR_STREAM_NOT_SUBSCRIBE, 100034)           \
    X(ACL_ERROR_THREAD_NOT_SUBSCRIBE, 100035)           \
    X(ACL_ERROR_WAIT_CALLBACK_TIMEOUT, 100036)          \
    X(ACL_ERROR_REPEAT_FINALIZE, 100037)                \
    X(ACL_ERROR_BAD_ALLOC, 200000)                      \
    X(ACL_ERROR_API_NOT_SUPPORT, 200001)                \
    X(ACL_ERROR_INVALID_DEVICE, 200002)                 \
    X(ACL_ERROR_MEMORY_ADDRESS_UNALIGNED, 200003)       \
    X(ACL_ERROR_RESOURCE_NOT_MATCH, 200004)             \
    X(ACL_ERROR_INVALID_RESOURCE_HANDLE, 200005)        \
    X(ACL_ERROR_FEATURE_UNSUPPORTED, 200006)            \
    X(ACL_ERROR_STORAGE_OVER_LIMIT, 300000)             \
    X(ACL_ERROR_INTERNAL_ERROR, 500000)                 \
    X(ACL_ERROR_FAILURE, 500001)                        \
    X(ACL_ERROR_GE_FAILURE, 500002)                     \
    X(ACL_ERROR_RT_FAILURE, 500003)                     \
    X(ACL_ERROR_DRV_FAILURE, 500004)                    \
    X(ACL_ERROR_RT_DEVICE_MEM_ERROR, 507053)

enum npu_acl_error {
#define NPU_ACL_ERROR_ENUM(name, value) name = value,
    NPU_ACL_ERRORS(NPU_ACL_ERROR_ENUM)
#undef NPU_ACL_ERROR_ENUM
};

typedef enum aclrtMemcpyKind {
    ACL_MEMCPY_HOST_TO_HOST = 0,
    ACL_MEMCPY_HOST_TO_DEVICE = 1,
    ACL_MEMCPY_DEVICE_TO_HOST = 2,
    ACL_MEMCPY_DEVICE_TO_DEVICE = 3,
} aclrtMemcpyKind;

typedef enum aclrtMemMallocPolicy {
    ACL_MEM_MALLOC_HUGE_FIRST = 0,
    ACL_MEM_MALLOC_HUGE_ONLY = 1,
    ACL_MEM_MALLOC_NORMAL_ONLY = 2,
} aclrtMemMallocPolicy;

typedef enum aclrtMemAttr {
    ACL_DDR_MEM = 0,
    ACL_HBM_MEM = 1,
} aclrtMemAttr;

typedef enum aclrtEventRecordedStatus {
    ACL_EVENT_RECORDED_STATUS_NOT_READY = 0,
    ACL_EVENT_RECORDED_STATUS_COMPLETE = 1,
} aclrtEventRecordedStatus;

typedef enum aclDeviceInfo {
    ACL_DEVICE_INFO_AI_CORE_NUM = 0,
} aclDeviceInfo;

typedef enum aclrtCallbackBlockType {
    ACL_CALLBACK_NO_BLOCK = 0,
    ACL_CALLBACK_BLOCK = 1,
} aclrtCallbackBlockType;

/*
 * The functions, as X(return type, name, parameter list). Each becomes a
 * member of struct npu_acl (npu_internal.h) named after the function.
 * `required` ones must all resolve or the library is refused with the
 * missing name; `optional` ones may be absent (older or trimmed runtimes),
 * and the plugin then does without (NULL member).
 */
#define NPU_ACL_FUNCS(REQUIRED, OPTIONAL)                                     \
    REQUIRED(aclError, aclInit, (const char *configPath))                     \
    REQUIRED(aclError, aclFinalize, (void))                                   \
    REQUIRED(aclError, aclrtGetDeviceCount, (uint32_t *count))                \
    REQUIRED(aclError, aclrtSetDevice, (int32_t deviceId))                    \
    REQUIRED(aclError, aclrtResetDevice, (int32_t deviceId))                  \
    REQUIRED(aclError, aclrtGetCurrentContext, (aclrtContext *context))       \
    REQUIRED(aclError, aclrtSetCurrentContext, (aclrtContext context))        \
    REQUIRED(aclError, aclrtSynchronizeDevice, (void))                        \
    REQUIRED(aclError, aclrtMalloc,                                           \
             (void **devPtr, size_t size, aclrtMemMallocPolicy policy))       \
    REQUIRED(aclError, aclrtFree, (void *devPtr))                             \
    REQUIRED(aclError, aclrtMallocHost, (void **hostPtr, size_t size))        \
    REQUIRED(aclError, aclrtFreeHost, (void *hostPtr))                        \
    REQUIRED(aclError, aclrtMemcpy,                                           \
             (void *dst, size_t destMax, const void *src, size_t count,       \
              aclrtMemcpyKind kind))                                          \
    REQUIRED(aclError, aclrtMemcpyAsync,                                      \
             (void *dst, size_t destMax, const void *src, size_t count,       \
              aclrtMemcpyKind kind, aclrtStream stream))                      \
    REQUIRED(aclError, aclrtMemset,                                           \
             (void *devPtr, size_t maxCount, int32_t value, size_t count))    \
    REQUIRED(aclError, aclrtMemsetAsync,                                      \
             (void *devPtr, size_t maxCount, int32_t value, size_t count,     \
              aclrtStream stream))                                            \
    REQUIRED(aclError, aclrtGetMemInfo,                                       \
             (aclrtMemAttr attr, size_t *free, size_t *total))                \
    REQUIRED(aclError, aclrtCreateStream, (aclrtStream *stream))              \
    REQUIRED(aclError, aclrtDestroyStream, (aclrtStream stream))              \
    REQUIRED(aclError, aclrtSynchronizeStream, (aclrtStream stream))          \
    REQUIRED(aclError, aclrtCreateEvent, (aclrtEvent *event))                 \
    REQUIRED(aclError, aclrtDestroyEvent, (aclrtEvent event))                 \
    REQUIRED(aclError, aclrtRecordEvent,                                      \
             (aclrtEvent event, aclrtStream stream))                          \
    REQUIRED(aclError, aclrtSynchronizeEvent, (aclrtEvent event))             \
    REQUIRED(aclError, aclrtQueryEventStatus,                                 \
             (aclrtEvent event, aclrtEventRecordedStatus *status))            \
    REQUIRED(aclError, aclrtStreamWaitEvent,                                  \
             (aclrtStream stream, aclrtEvent event))                          \
    OPTIONAL(aclError, aclrtEventElapsedTime,                                 \
             (float *ms, aclrtEvent startEvent, aclrtEvent endEvent))         \
    OPTIONAL(aclError, aclrtSubscribeReport,                                  \
             (uint64_t threadId, aclrtStream stream))                         \
    OPTIONAL(aclError, aclrtUnSubscribeReport,                                \
             (uint64_t threadId, aclrtStream stream))                         \
    OPTIONAL(aclError, aclrtLaunchCallback,                                   \
             (aclrtCallback fn, void *userData,                               \
              aclrtCallbackBlockType blockType, aclrtStream stream))          \
    OPTIONAL(aclError, aclrtProcessReport, (int32_t timeout))                 \
    OPTIONAL(aclError, aclGetDeviceCapability,                                \
             (uint32_t deviceId, aclDeviceInfo deviceInfo, int64_t *value))   \
    OPTIONAL(const char *, aclrtGetSocName, (void))                           \
    OPTIONAL(const char *, aclGetRecentErrMsg, (void))

/* ---- aclnn (libopapi.so; tensors from libnnopbase.so) -------------------- */

typedef int aclnnStatus;
typedef struct aclTensor aclTensor;
typedef struct aclScalar aclScalar;
typedef struct aclOpExecutor aclOpExecutor;
typedef struct aclIntArray aclIntArray;
typedef struct aclBoolArray aclBoolArray;
typedef struct aclFloatArray aclFloatArray;

typedef enum aclDataType {
    ACL_DT_UNDEFINED = -1,
    ACL_FLOAT = 0,
    ACL_FLOAT16 = 1,
    ACL_INT8 = 2,
    ACL_INT32 = 3,
    ACL_UINT8 = 4,
    ACL_INT64 = 9,
    ACL_DOUBLE = 11,
    ACL_BOOL = 12,
    ACL_BF16 = 27,
} aclDataType;

/* aclnnMatmul's cubeMathType: keep the inputs' dtype. */
#define NPU_CUBE_KEEP_DTYPE ((int8_t)0)

typedef enum aclFormat {
    ACL_FORMAT_ND = 2,
} aclFormat;

/* As NPU_ACL_FUNCS, for the operator library. All are required: a
 * library missing one leaves the plugin without kernels. */
#define NPU_OPAPI_FUNCS(X)                                                    \
    X(aclTensor *, aclCreateTensor,                                           \
      (const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,   \
       const int64_t *stride, int64_t offset, aclFormat format,               \
       const int64_t *storageDims, uint64_t storageDimsNum,                   \
       void *tensorData))                                                     \
    X(aclnnStatus, aclDestroyTensor, (const aclTensor *tensor))               \
    X(aclScalar *, aclCreateScalar, (void *value, aclDataType dataType))      \
    X(aclnnStatus, aclDestroyScalar, (const aclScalar *scalar))               \
    X(aclIntArray *, aclCreateIntArray, (const int64_t *value, uint64_t size))\
    X(aclnnStatus, aclDestroyIntArray, (const aclIntArray *array))            \
    X(aclBoolArray *, aclCreateBoolArray, (const bool *value, uint64_t size)) \
    X(aclnnStatus, aclDestroyBoolArray, (const aclBoolArray *array))          \
    X(aclFloatArray *, aclCreateFloatArray,                                   \
      (const float *value, uint64_t size))                                    \
    X(aclnnStatus, aclDestroyFloatArray, (const aclFloatArray *array))        \
    X(aclnnStatus, aclnnAddGetWorkspaceSize,                                  \
      (const aclTensor *self, const aclTensor *other, const aclScalar *alpha, \
       aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor))    \
    X(aclnnStatus, aclnnAdd,                                                  \
      (void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,      \
       aclrtStream stream))                                                   \
    X(aclnnStatus, aclnnMulGetWorkspaceSize,                                  \
      (const aclTensor *self, const aclTensor *other, aclTensor *out,         \
       uint64_t *workspaceSize, aclOpExecutor **executor))                    \
    X(aclnnStatus, aclnnMul,                                                  \
      (void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,      \
       aclrtStream stream))                                                   \
    X(aclnnStatus, aclnnReluGetWorkspaceSize,                                 \
      (const aclTensor *self, const aclTensor *out, uint64_t *workspaceSize,  \
       aclOpExecutor **executor))                                             \
    X(aclnnStatus, aclnnRelu,                                                 \
      (void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,      \
       aclrtStream stream))                                                   \
    X(aclnnStatus, aclnnSoftmaxGetWorkspaceSize,                              \
      (const aclTensor *self, int64_t dim, aclTensor *out,                    \
       uint64_t *workspaceSize, aclOpExecutor **executor))                    \
    X(aclnnStatus, aclnnSoftmax,                                              \
      (void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,      \
       aclrtStream stream))                                                   \
    X(aclnnStatus, aclnnLogSoftmaxGetWorkspaceSize,                           \
      (const aclTensor *self, int64_t dim, aclTensor *out,                    \
       uint64_t *workspaceSize, aclOpExecutor **executor))                    \
    X(aclnnStatus, aclnnLogSoftmax,                                           \
      (void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,      \
       aclrtStream stream))                                                   \
    X(aclnnStatus, aclnnMatmulGetWorkspaceSize,                               \
      (const aclTensor *self, const aclTensor *mat2, aclTensor *out,          \
       int8_t cubeMathType, uint64_t *workspaceSize,                          \
       aclOpExecutor **executor))                                             \
    X(aclnnStatus, aclnnMatmul,                                               \
      (void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,      \
       aclrtStream stream))                                                   \
    X(aclnnStatus, aclnnCastGetWorkspaceSize,                                 \
      (const aclTensor *self, const aclDataType dtype, aclTensor *out,        \
       uint64_t *workspaceSize, aclOpExecutor **executor))                    \
    X(aclnnStatus, aclnnCast,                                                 \
      (void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,      \
       aclrtStream stream))

/* The elementwise arithmetic, activations and copy (npu_kernels.c). Not
 * required: each is resolved on its own with dlsym, and a kernel is offered
 * only when both of its halves resolved, so a CANN without one of them
 * keeps the others. Every phase 2 has the signature of aclnnAdd. */
#define NPU_OPAPI_EW_PHASE2(X, name)                                          \
    X(aclnnStatus, name,                                                      \
      (void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,      \
       aclrtStream stream))
/* out = f(self, other) */
#define NPU_OPAPI_EW_BINARY(X, name, phase1)                                  \
    X(aclnnStatus, phase1,                                                    \
      (const aclTensor *self, const aclTensor *other, aclTensor *out,         \
       uint64_t *workspaceSize, aclOpExecutor **executor))                    \
    NPU_OPAPI_EW_PHASE2(X, name)
/* out = f(self) */
#define NPU_OPAPI_EW_UNARY(X, name, phase1)                                   \
    X(aclnnStatus, phase1,                                                    \
      (const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,        \
       aclOpExecutor **executor))                                             \
    NPU_OPAPI_EW_PHASE2(X, name)

#define NPU_OPAPI_EW_FUNCS(X)                                                 \
    X(aclnnStatus, aclnnSubGetWorkspaceSize,                                  \
      (const aclTensor *self, const aclTensor *other, const aclScalar *alpha, \
       aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor))    \
    NPU_OPAPI_EW_PHASE2(X, aclnnSub)                                          \
    NPU_OPAPI_EW_BINARY(X, aclnnDiv, aclnnDivGetWorkspaceSize)                \
    NPU_OPAPI_EW_BINARY(X, aclnnMaximum, aclnnMaximumGetWorkspaceSize)        \
    NPU_OPAPI_EW_BINARY(X, aclnnMinimum, aclnnMinimumGetWorkspaceSize)        \
    NPU_OPAPI_EW_UNARY(X, aclnnNeg, aclnnNegGetWorkspaceSize)                 \
    NPU_OPAPI_EW_UNARY(X, aclnnAbs, aclnnAbsGetWorkspaceSize)                 \
    NPU_OPAPI_EW_UNARY(X, aclnnExp, aclnnExpGetWorkspaceSize)                 \
    NPU_OPAPI_EW_UNARY(X, aclnnLog, aclnnLogGetWorkspaceSize)                 \
    NPU_OPAPI_EW_UNARY(X, aclnnSqrt, aclnnSqrtGetWorkspaceSize)               \
    NPU_OPAPI_EW_UNARY(X, aclnnSigmoid, aclnnSigmoidGetWorkspaceSize)         \
    NPU_OPAPI_EW_UNARY(X, aclnnTanh, aclnnTanhGetWorkspaceSize)               \
    NPU_OPAPI_EW_UNARY(X, aclnnSilu, aclnnSiluGetWorkspaceSize)               \
    X(aclnnStatus, aclnnGeluV2GetWorkspaceSize,                               \
      (const aclTensor *x, int64_t approximate, aclTensor *y,                 \
       uint64_t *workspaceSize, aclOpExecutor **executor))                    \
    NPU_OPAPI_EW_PHASE2(X, aclnnGeluV2)                                       \
    X(aclnnStatus, aclnnInplaceCopyGetWorkspaceSize,                          \
      (aclTensor *selfRef, const aclTensor *src, uint64_t *workspaceSize,     \
       aclOpExecutor **executor))                                             \
    NPU_OPAPI_EW_PHASE2(X, aclnnInplaceCopy)

#endif /* KEEL_NPU_ACL_API_H */
