/*
 * The parts of Cambricon Neuware the mlu plugin calls: the CNRT runtime
 * (libcnrt.so) and the CNNL operator library (libcnnl.so). They are
 * declared here so that the plugin builds without Neuware; nothing links
 * against either library. mlu_plugin.c and mlu_kernels.c dlopen() them and
 * look every function below up by name.
 *
 * WHERE EACH FACT WAS CHECKED (public sources only)
 *
 * CNRT, against a copy of Neuware's cnrt.h of CNRT 6.0.2 (CNRT_MAJOR_VERSION
 * 6, MINOR 0, PATCH 2) kept in a public repository (the search index used
 * names it by content only), cross-read with older cnrt.h copies
 * (LuoXukun/AI-homework chapter2/pycnml/env/neuware/include/cnrt.h, CNRT
 * 4.3) and with PaddlePaddle/PaddleCustomDevice backends/mlu/runtime/
 * runtime.cc:
 *   - cnrtRet_t and its values: cnrtSuccess 0, cnrtErrorNotReady 1,
 *     cnrtErrorInit 100002, cnrtErrorNoDevice 100004,
 *     cnrtErrorDeviceInvalid 100005, cnrtErrorArgsInvalid 100006,
 *     cnrtErrorSys 100007, cnrtErrorSysNoMem 100010,
 *     cnrtErrorInvalidResourceHandle 100014, cnrtErrorIllegalState 100015,
 *     cnrtErrorNotSupport 100050, cnrtErrorOpsNotPermitted 100051,
 *     cnrtErrorQueue 100060, cnrtErrorNoMem 100100, cnrtErrorDevice 632006,
 *     cnrtErrorNoAttribute 632009, cnrtErrorMemcpyDirectionInvalid 632013,
 *     cnrtErrorCndrvFuncCall 632015, cnrtErrorNoCnrtContext 632019,
 *     cnrtErrorUnknown 999991;
 *   - cnrtMemTransDir_t: cnrtMemcpyHostToDev 0, cnrtMemcpyDevToDev 1,
 *     cnrtMemcpyDevToHost 2, cnrtMemcpyHostToHost 3, cnrtMemcpyPeerToPeer 4,
 *     cnrtMemcpyNoDirection 5;
 *   - cnrtDeviceAttr_t: cnrtAttrIpuClockRate 0x402 (kHz),
 *     cnrtAttrTotalMemSize 0x405 (MB), cnrtAttrClusterCount 0x205,
 *     cnrtAttrMcorePerCluster 0x206;
 *   - cnrtQueue_t = struct cnrtQueue *, cnrtNotifier_t = struct
 *     cnrtNotifier * (opaque);
 *   - the prototypes of cnrtGetDeviceCount(unsigned int *), cnrtSetDevice,
 *     cnrtGetDevice, cnrtDeviceGetAttribute(int *, attr, int device),
 *     cnrtSyncDevice(void), cnrtMalloc, cnrtFree, cnrtHostMalloc,
 *     cnrtFreeHost, cnrtMemcpy(dst, src, bytes, dir),
 *     cnrtMemcpyAsync(dst, src, bytes, QUEUE, DIR) (the queue comes before
 *     the direction), cnrtMemset(ptr, int value, bytes),
 *     cnrtMemsetAsync(ptr, value, bytes, queue), cnrtMemGetInfo(free,
 *     total), cnrtQueueCreate/Destroy/Sync/Query, cnrtQueueWaitNotifier
 *     (notifier, queue, unsigned int flag), cnrtNotifierCreate/Destroy,
 *     cnrtPlaceNotifier(notifier, queue), cnrtWaitNotifier,
 *     cnrtQueryNotifier, cnrtNotifierElapsedTime(start, end, float *ms),
 *     cnrtInvokeHostFunc(queue, cnrtHostFn_t fn, void *userData) with
 *     cnrtHostFn_t = void (*)(void *), and const char
 *     *cnrtGetErrorStr(cnrtRet_t).
 *   - cnrtNotifierDuration(start, end, float *us): older cnrt.h copies
 *     (CNRT 4.x and 5.x); the plugin takes it when ElapsedTime is absent.
 *   - cnrtGetLastErr(void): older cnrt.h copies. cnrtGetLastError, the
 *     name the CNRT 6 documentation's examples use, was NOT found as a
 *     prototype in the copies read; both are optional below.
 *
 * CNNL, against a copy of Neuware's cnnl core header (CNNL_CORE_H_, from
 * a public repository, named by content only) for:
 *   - cnnlStatus_t: CNNL_STATUS_SUCCESS 0, NOT_INITIALIZED 1,
 *     ALLOC_FAILED 2, BAD_PARAM 3, INTERNAL_ERROR 4, ARCH_MISMATCH 5,
 *     EXECUTION_FAILED 6, NOT_SUPPORTED 7, NUMERICAL_OVERFLOW 8;
 *   - cnnlTensorLayout_t: CNNL_LAYOUT_ARRAY 4;
 *   - cnnlDataType_t: CNNL_DTYPE_HALF 1, FLOAT 2, INT32 6;
 *   - cnnlHandle_t, cnnlTensorDescriptor_t (opaque pointers), cnnlCreate,
 *     cnnlDestroy, cnnlSetQueue(handle, cnrtQueue_t), cnnlGetErrorString,
 *     cnnlCreateTensorDescriptor, cnnlDestroyTensorDescriptor;
 * and against its use in PaddlePaddle/PaddleCustomDevice
 * backends/mlu/kernels/funcs/mlu_baseop.cc and other public CNNL callers
 * for the argument order of cnnlSetTensorDescriptorEx(desc, layout, dtype,
 * int dimNb, const int dims[], const int strides[]),
 * cnnlSetOpTensorDescriptor(desc, op, compute dtype, nan propagation),
 * cnnlGetOpTensorWorkspaceSize(handle, a, b, c, size_t *),
 * cnnlOpTensor(handle, op, alpha1, a, a_ptr, alpha2, b, b_ptr, workspace,
 * workspace_size, beta, c, c_ptr), cnnlSetActivationDescriptor_v2(desc,
 * mode, preference, nan propagation, float coef) and
 * cnnlActivationForward(handle, desc, alpha, x, x_ptr, beta, y, y_ptr).
 *
 * NOT VERIFIED (no public header with these enums was found): the values
 * of cnnlOpTensorDesc_t other than CNNL_OP_TENSOR_ADD 0 (MUL taken as 1),
 * cnnlActivationMode_t (RELU taken as 1), cnnlActivationPreference_t
 * (HIGH_PRECISION taken as 1) and cnnlNanPropagation_t (NOT_PROPAGATE_NAN
 * taken as 0; PROPAGATE_NAN 1 was seen only in a third-party list).
 * Public callers confirm the names and their enum types but not the
 * values; Cambricon's mlu-ops mlu_op.h has MLUOP_NOT_PROPAGATE_NAN 0,
 * MLUOP_PROPAGATE_NAN 1 and MLUOP_COMPUTATION_HIGH_PRECISION 1, which
 * agree, but that is another library's header, not cnnl.h;
 * CNNL_DTYPE_BFLOAT16 and CNNL_DTYPE_INT64 (so the kernels do not take
 * bfloat16 or int64); whether cnnlOpTensor accepts a NULL workspace when
 * the size is 0; the alignment cnrtMalloc guarantees (the plugin declares
 * MLU_ALLOC_ALIGNMENT and checks every pointer); and whether
 * cnrtQueueWaitNotifier accepts a notifier of another device. A real
 * Neuware must be checked against these before the kernels are trusted.
 */
#ifndef KEEL_MLU_CNRT_API_H
#define KEEL_MLU_CNRT_API_H

#include <stddef.h>
#include <stdint.h>

/* ---- CNRT ---------------------------------------------------------------- */

typedef int cnrtRet_t;
typedef struct cnrtQueue *cnrtQueue_t;
typedef struct cnrtNotifier *cnrtNotifier_t;
typedef void (*cnrtHostFn_t)(void *userData);

/* cnrtRet_t values the plugin names or maps. */
#define MLU_CNRT_CODES(X)                          \
    X(cnrtSuccess, 0)                              \
    X(cnrtErrorNotReady, 1)                        \
    X(cnrtErrorInit, 100002)                       \
    X(cnrtErrorNoDevice, 100004)                   \
    X(cnrtErrorDeviceInvalid, 100005)              \
    X(cnrtErrorArgsInvalid, 100006)                \
    X(cnrtErrorSys, 100007)                        \
    X(cnrtErrorSysNoMem, 100010)                   \
    X(cnrtErrorInvalidResourceHandle, 100014)      \
    X(cnrtErrorIllegalState, 100015)               \
    X(cnrtErrorNotSupport, 100050)                 \
    X(cnrtErrorOpsNotPermitted, 100051)            \
    X(cnrtErrorQueue, 100060)                      \
    X(cnrtErrorNoMem, 100100)                      \
    X(cnrtErrorDevice, 632006)                     \
    X(cnrtErrorNoAttribute, 632009)                \
    X(cnrtErrorMemcpyDirectionInvalid, 632013)     \
    X(cnrtErrorCndrvFuncCall, 632015)              \
    X(cnrtErrorNoCnrtContext, 632019)              \
    X(cnrtErrorUnknown, 999991)

enum mlu_cnrt_code {
#define MLU_CNRT_CODE_ENUM(name, value) name = value,
    MLU_CNRT_CODES(MLU_CNRT_CODE_ENUM)
#undef MLU_CNRT_CODE_ENUM
};

typedef enum {
    cnrtMemcpyHostToDev = 0,
    cnrtMemcpyDevToDev = 1,
    cnrtMemcpyDevToHost = 2,
    cnrtMemcpyHostToHost = 3,
    cnrtMemcpyPeerToPeer = 4,
    cnrtMemcpyNoDirection = 5,
} cnrtMemTransDir_t;

typedef enum {
    cnrtAttrClusterCount = 0x205,
    cnrtAttrMcorePerCluster = 0x206,
    cnrtAttrIpuClockRate = 0x402,
    cnrtAttrTotalMemSize = 0x405,
} cnrtDeviceAttr_t;

/*
 * X(return type, name, parameters): REQUIRED ones must all resolve or the
 * library is refused naming the first missing one; OPTIONAL ones may be
 * absent and the plugin does without.
 */
#define MLU_CNRT_FUNCS(REQUIRED, OPTIONAL)                                   \
    REQUIRED(cnrtRet_t, cnrtGetDeviceCount, (unsigned int *pCount))          \
    REQUIRED(cnrtRet_t, cnrtSetDevice, (int ordinal))                        \
    REQUIRED(cnrtRet_t, cnrtGetDevice, (int *pOrdinal))                      \
    REQUIRED(cnrtRet_t, cnrtSyncDevice, (void))                              \
    REQUIRED(cnrtRet_t, cnrtMalloc, (void **pPtr, size_t bytes))             \
    REQUIRED(cnrtRet_t, cnrtFree, (void *ptr))                               \
    REQUIRED(cnrtRet_t, cnrtHostMalloc, (void **pPtr, size_t bytes))         \
    REQUIRED(cnrtRet_t, cnrtFreeHost, (void *ptr))                           \
    REQUIRED(cnrtRet_t, cnrtMemcpy,                                          \
             (void *dst, void *src, size_t bytes, cnrtMemTransDir_t dir))    \
    REQUIRED(cnrtRet_t, cnrtMemcpyAsync,                                     \
             (void *dst, void *src, size_t bytes, cnrtQueue_t queue,         \
              cnrtMemTransDir_t dir))                                        \
    REQUIRED(cnrtRet_t, cnrtMemset, (void *ptr, int value, size_t bytes))    \
    REQUIRED(cnrtRet_t, cnrtMemsetAsync,                                     \
             (void *ptr, int value, size_t bytes, cnrtQueue_t queue))        \
    REQUIRED(cnrtRet_t, cnrtMemGetInfo, (size_t *free, size_t *total))       \
    REQUIRED(cnrtRet_t, cnrtQueueCreate, (cnrtQueue_t *pQueue))              \
    REQUIRED(cnrtRet_t, cnrtQueueDestroy, (cnrtQueue_t queue))               \
    REQUIRED(cnrtRet_t, cnrtQueueSync, (cnrtQueue_t queue))                  \
    REQUIRED(cnrtRet_t, cnrtQueueQuery, (cnrtQueue_t queue))                 \
    REQUIRED(cnrtRet_t, cnrtQueueWaitNotifier,                               \
             (cnrtNotifier_t notifier, cnrtQueue_t queue, unsigned int flag)) \
    REQUIRED(cnrtRet_t, cnrtNotifierCreate, (cnrtNotifier_t *pNotifier))     \
    REQUIRED(cnrtRet_t, cnrtNotifierDestroy, (cnrtNotifier_t notifier))      \
    REQUIRED(cnrtRet_t, cnrtPlaceNotifier,                                   \
             (cnrtNotifier_t notifier, cnrtQueue_t queue))                   \
    REQUIRED(cnrtRet_t, cnrtWaitNotifier, (cnrtNotifier_t notifier))         \
    REQUIRED(cnrtRet_t, cnrtQueryNotifier, (cnrtNotifier_t notifier))        \
    OPTIONAL(cnrtRet_t, cnrtDeviceGetAttribute,                              \
             (int *pValue, cnrtDeviceAttr_t attr, int device))               \
    OPTIONAL(cnrtRet_t, cnrtNotifierElapsedTime,                             \
             (cnrtNotifier_t start, cnrtNotifier_t end, float *ms))          \
    OPTIONAL(cnrtRet_t, cnrtNotifierDuration,                                \
             (cnrtNotifier_t start, cnrtNotifier_t end, float *us))          \
    OPTIONAL(cnrtRet_t, cnrtInvokeHostFunc,                                  \
             (cnrtQueue_t queue, cnrtHostFn_t fn, void *userData))           \
    OPTIONAL(const char *, cnrtGetErrorStr, (cnrtRet_t err))                 \
    OPTIONAL(cnrtRet_t, cnrtGetLastError, (void))                            \
    OPTIONAL(cnrtRet_t, cnrtGetLastErr, (void))

/* ---- CNNL ---------------------------------------------------------------- */

typedef int cnnlStatus_t;
typedef struct cnnlContext *cnnlHandle_t;
typedef struct cnnlTensorStruct *cnnlTensorDescriptor_t;
typedef struct cnnlOpTensorStruct *cnnlOpTensorDescriptor_t;
typedef struct cnnlActivationStruct *cnnlActivationDescriptor_t;

#define MLU_CNNL_CODES(X)                    \
    X(CNNL_STATUS_SUCCESS, 0)                \
    X(CNNL_STATUS_NOT_INITIALIZED, 1)        \
    X(CNNL_STATUS_ALLOC_FAILED, 2)           \
    X(CNNL_STATUS_BAD_PARAM, 3)              \
    X(CNNL_STATUS_INTERNAL_ERROR, 4)         \
    X(CNNL_STATUS_ARCH_MISMATCH, 5)          \
    X(CNNL_STATUS_EXECUTION_FAILED, 6)       \
    X(CNNL_STATUS_NOT_SUPPORTED, 7)          \
    X(CNNL_STATUS_NUMERICAL_OVERFLOW, 8)

enum mlu_cnnl_code {
#define MLU_CNNL_CODE_ENUM(name, value) name = value,
    MLU_CNNL_CODES(MLU_CNNL_CODE_ENUM)
#undef MLU_CNNL_CODE_ENUM
};

typedef enum { CNNL_LAYOUT_ARRAY = 4 } cnnlTensorLayout_t;

typedef enum {
    CNNL_DTYPE_INVALID = 0,
    CNNL_DTYPE_HALF = 1,
    CNNL_DTYPE_FLOAT = 2,
    CNNL_DTYPE_INT32 = 6,
} cnnlDataType_t;

/* Values below past ADD are NOT verified (see the top of this file). */
typedef enum {
    CNNL_OP_TENSOR_ADD = 0,
    CNNL_OP_TENSOR_MUL = 1,
} cnnlOpTensorDesc_t;

typedef enum { CNNL_ACTIVATION_RELU = 1 } cnnlActivationMode_t;
typedef enum { CNNL_ACTIVATION_HIGH_PRECISION = 1 } cnnlActivationPreference_t;
typedef enum { CNNL_NOT_PROPAGATE_NAN = 0 } cnnlNanPropagation_t;

/* All required: a library missing one leaves the plugin without kernels. */
#define MLU_CNNL_FUNCS(X)                                                     \
    X(cnnlStatus_t, cnnlCreate, (cnnlHandle_t *handle))                       \
    X(cnnlStatus_t, cnnlDestroy, (cnnlHandle_t handle))                       \
    X(cnnlStatus_t, cnnlSetQueue, (cnnlHandle_t handle, cnrtQueue_t queue))   \
    X(const char *, cnnlGetErrorString, (cnnlStatus_t status))                \
    X(cnnlStatus_t, cnnlCreateTensorDescriptor,                               \
      (cnnlTensorDescriptor_t *desc))                                         \
    X(cnnlStatus_t, cnnlDestroyTensorDescriptor,                              \
      (cnnlTensorDescriptor_t desc))                                          \
    X(cnnlStatus_t, cnnlSetTensorDescriptorEx,                                \
      (cnnlTensorDescriptor_t desc, cnnlTensorLayout_t layout,                \
       cnnlDataType_t dtype, int dimNb, const int dimSize[],                  \
       const int dimStride[]))                                                \
    X(cnnlStatus_t, cnnlCreateOpTensorDescriptor,                             \
      (cnnlOpTensorDescriptor_t *desc))                                       \
    X(cnnlStatus_t, cnnlDestroyOpTensorDescriptor,                            \
      (cnnlOpTensorDescriptor_t desc))                                        \
    X(cnnlStatus_t, cnnlSetOpTensorDescriptor,                                \
      (cnnlOpTensorDescriptor_t desc, cnnlOpTensorDesc_t op,                  \
       cnnlDataType_t compute, cnnlNanPropagation_t nan))                     \
    X(cnnlStatus_t, cnnlGetOpTensorWorkspaceSize,                             \
      (cnnlHandle_t handle, const cnnlTensorDescriptor_t a,                   \
       const cnnlTensorDescriptor_t b, const cnnlTensorDescriptor_t c,        \
       size_t *size))                                                         \
    X(cnnlStatus_t, cnnlOpTensor,                                             \
      (cnnlHandle_t handle, const cnnlOpTensorDescriptor_t op,                \
       const void *alpha1, const cnnlTensorDescriptor_t a, const void *a_ptr, \
       const void *alpha2, const cnnlTensorDescriptor_t b, const void *b_ptr, \
       void *workspace, size_t workspace_size, const void *beta,              \
       const cnnlTensorDescriptor_t c, void *c_ptr))                          \
    X(cnnlStatus_t, cnnlCreateActivationDescriptor,                           \
      (cnnlActivationDescriptor_t *desc))                                     \
    X(cnnlStatus_t, cnnlDestroyActivationDescriptor,                          \
      (cnnlActivationDescriptor_t desc))                                      \
    X(cnnlStatus_t, cnnlSetActivationDescriptor_v2,                           \
      (cnnlActivationDescriptor_t desc, cnnlActivationMode_t mode,            \
       cnnlActivationPreference_t pref, cnnlNanPropagation_t nan,             \
       float coef))                                                           \
    X(cnnlStatus_t, cnnlActivationForward,                                    \
      (cnnlHandle_t handle, const cnnlActivationDescriptor_t desc,            \
       const void *alpha, const cnnlTensorDescriptor_t x, const void *x_ptr,  \
       const void *beta, const cnnlTensorDescriptor_t y, void *y_ptr))

/*
 * The elementwise kernels past add, multiply and relu (mlu_kernels.c).
 * Optional, each resolved on its own: a library without one of them does
 * not get the kernels that call it offered, and keeps the others.
 * Checked against public callers (docs/mlu-plugin.md, "Kernels on CNNL"):
 *   - cnnlExp_v2(handle, prefer, x_desc, x, y_desc, y): PaddleCustomDevice
 *     backends/mlu mlu_baseop.cc (MLUCnnl::Exp), torch_mlu's exp, DeepLink
 *     and MegEngine's Cambricon elemwise;
 *   - cnnlLog_v2(handle, prefer, cnnlLogBase_t base, x_desc, x, y_desc,
 *     y): the same mlu_baseop.cc (MLUCnnl::Log, base CNNL_LOG_E), torch_mlu
 *     and MegEngine; CNNL_LOG_E 0 (with LOG_2 1, LOG_10 2) is given by a
 *     comment in PaddleCustomDevice's MLU activation kernels, not by a
 *     header;
 *   - cnnlNegTensor(handle, x_desc, x, y_desc, y) and cnnlAbs(handle,
 *     x_desc, x, y_desc, y): mlu_baseop.cc (MLUCnnl::Neg, MLUCnnl::Abs),
 *     Oneflow's cambricon unary primitive, and a copy of cnnl.h's cnnlAbs
 *     prototype in a public repository;
 *   - cnnlCopy(handle, x_desc, x, y_desc, y): mlu_baseop.cc
 *     (MLUCnnl::Assign), Oneflow's cambricon CopyNd (strided descriptors
 *     on both sides) and MegEngine;
 *   - the activation modes CNNL_ACTIVATION_SIGMOID and CNNL_ACTIVATION_TANH
 *     by name (PaddleCustomDevice's MLU activation kernels, DeepLink);
 *     their VALUES below are NOT verified.
 */
typedef enum { CNNL_LOG_E = 0 } cnnlLogBase_t;

/* NOT VERIFIED: taken in cuDNN's order around RELU 1; the kernels that
 * pass them are withheld unless KEEL_MLU_UNVERIFIED_KERNELS=1. */
#define MLU_CNNL_ACTIVATION_SIGMOID ((cnnlActivationMode_t)0)
#define MLU_CNNL_ACTIVATION_TANH ((cnnlActivationMode_t)2)

/* `prefer` is a cnnlComputationPreference_t (CNNL_COMPUTATION_FAST 0,
 * HIGH_PRECISION 1, verified: cnnl_train_api.h), passed as the int it is:
 * that enum is declared by cnnl_nn_api.h and cnnl_train_api.h, and a
 * second declaration here would clash with theirs. */
#define MLU_CNNL_EW_FUNCS(X)                                                  \
    X(cnnlStatus_t, cnnlExp_v2,                                               \
      (cnnlHandle_t handle, int prefer,                                       \
       const cnnlTensorDescriptor_t x_desc, const void *x,                    \
       const cnnlTensorDescriptor_t y_desc, void *y))                         \
    X(cnnlStatus_t, cnnlLog_v2,                                               \
      (cnnlHandle_t handle, int prefer, cnnlLogBase_t base,                   \
       const cnnlTensorDescriptor_t x_desc, const void *x,                    \
       const cnnlTensorDescriptor_t y_desc, void *y))                         \
    X(cnnlStatus_t, cnnlNegTensor,                                            \
      (cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc,              \
       const void *x, const cnnlTensorDescriptor_t y_desc, void *y))          \
    X(cnnlStatus_t, cnnlAbs,                                                  \
      (cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc,              \
       const void *x, const cnnlTensorDescriptor_t y_desc, void *y))          \
    X(cnnlStatus_t, cnnlCopy,                                                 \
      (cnnlHandle_t handle, const cnnlTensorDescriptor_t x_desc,              \
       const void *x, const cnnlTensorDescriptor_t y_desc, void *y))

#endif /* KEEL_MLU_CNRT_API_H */
