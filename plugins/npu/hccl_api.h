/*
 * The part of HCCL (Huawei Collective Communication Library, libhccl.so)
 * the npu plugin's collective group uses, declared here so that the plugin
 * builds without CANN. libhccl.so is dlopen()ed by the first collective
 * call that needs it (npu_collective.c) and every function below is looked
 * up by name.
 *
 * WHERE EACH FACT WAS CHECKED
 *
 * Against the HCCL headers Ascend's PyTorch adapter carries, as copied
 * from CANN, in github.com/Ascend/pytorch, third_party/hccl/inc/hccl/:
 *
 *   hccl_types.h  HcclResult (HCCL_SUCCESS 0, HCCL_E_PARA 1, HCCL_E_PTR 2,
 *                 HCCL_E_MEMORY 3, HCCL_E_INTERNAL 4, HCCL_E_NOT_SUPPORT 5,
 *                 HCCL_E_NOT_FOUND 6, HCCL_E_UNAVAIL 7, HCCL_E_SYSCALL 8,
 *                 HCCL_E_TIMEOUT 9, ... HCCL_E_RUNTIME 15, HCCL_E_DRV 16,
 *                 ... HCCL_E_AGAIN 20, HCCL_E_REMOTE 21); HcclComm is
 *                 void *; HcclReduceOp (SUM 0, PROD 1, MAX 2, MIN 3, no
 *                 average); HcclDataType (INT8 0, INT16 1, INT32 2,
 *                 FP16 3, FP32 4, INT64 5, UINT64 6, UINT8 7, UINT16 8,
 *                 UINT32 9, FP64 10, BFP16 11); HCCL_ROOT_INFO_BYTES 4108
 *                 and HcclRootInfo { char internal[4108]; };
 *                 HcclSendRecvType (SEND 0, RECV 1) and HcclSendRecvItem
 *                 { type, void *buf, uint64_t count, HcclDataType,
 *                 uint32_t remoteRank }.
 *   hccl.h        every prototype below, argument for argument, and the
 *                 dtypes each collective's comment lists (used by
 *                 npu_collective.c to decide what it declares):
 *                 AllReduce and Reduce int8, int16, int32, float16,
 *                 float32, bfloat16; ReduceScatter int8, int32, float16,
 *                 float32, bfloat16; Broadcast, AllGather, Send, Recv,
 *                 AlltoAllV every type.
 *
 * Not verified: the element type of HcclAlltoAllV's count and
 * displacement arrays (hccl.h has `const void *`; the plugin passes
 * uint64_t arrays, as for the uint64_t counts everywhere else in the
 * API), whether HcclGetRootInfo needs a current device (the plugin makes
 * one current), and anything about HCCL's run-time behaviour.
 */
#ifndef KEEL_NPU_HCCL_API_H
#define KEEL_NPU_HCCL_API_H

#include <stdint.h>

#include "acl_api.h" /* aclrtStream */

typedef int HcclResult;
typedef void *HcclComm;
typedef int HcclDataType;
typedef int HcclReduceOp;

#define NPU_HCCL_RESULTS(X)          \
    X(HCCL_SUCCESS, 0)               \
    X(HCCL_E_PARA, 1)                \
    X(HCCL_E_PTR, 2)                 \
    X(HCCL_E_MEMORY, 3)              \
    X(HCCL_E_INTERNAL, 4)            \
    X(HCCL_E_NOT_SUPPORT, 5)         \
    X(HCCL_E_NOT_FOUND, 6)           \
    X(HCCL_E_UNAVAIL, 7)             \
    X(HCCL_E_SYSCALL, 8)             \
    X(HCCL_E_TIMEOUT, 9)             \
    X(HCCL_E_OPEN_FILE_FAILURE, 10)  \
    X(HCCL_E_TCP_CONNECT, 11)        \
    X(HCCL_E_ROCE_CONNECT, 12)       \
    X(HCCL_E_TCP_TRANSFER, 13)       \
    X(HCCL_E_ROCE_TRANSFER, 14)      \
    X(HCCL_E_RUNTIME, 15)            \
    X(HCCL_E_DRV, 16)                \
    X(HCCL_E_PROFILING, 17)          \
    X(HCCL_E_CCE, 18)                \
    X(HCCL_E_NETWORK, 19)            \
    X(HCCL_E_AGAIN, 20)              \
    X(HCCL_E_REMOTE, 21)

enum {
#define NPU_HCCL_RESULT_ENUM(name, value) name = value,
    NPU_HCCL_RESULTS(NPU_HCCL_RESULT_ENUM)
#undef NPU_HCCL_RESULT_ENUM
};

enum {
    HCCL_REDUCE_SUM = 0,
    HCCL_REDUCE_PROD = 1,
    HCCL_REDUCE_MAX = 2,
    HCCL_REDUCE_MIN = 3
};

enum {
    HCCL_DATA_TYPE_INT8 = 0,
    HCCL_DATA_TYPE_INT16 = 1,
    HCCL_DATA_TYPE_INT32 = 2,
    HCCL_DATA_TYPE_FP16 = 3,
    HCCL_DATA_TYPE_FP32 = 4,
    HCCL_DATA_TYPE_INT64 = 5,
    HCCL_DATA_TYPE_UINT64 = 6,
    HCCL_DATA_TYPE_UINT8 = 7,
    HCCL_DATA_TYPE_UINT16 = 8,
    HCCL_DATA_TYPE_UINT32 = 9,
    HCCL_DATA_TYPE_FP64 = 10,
    HCCL_DATA_TYPE_BFP16 = 11
};

#define HCCL_ROOT_INFO_BYTES 4108

typedef struct HcclRootInfoDef {
    char internal[HCCL_ROOT_INFO_BYTES];
} HcclRootInfo;

typedef int HcclSendRecvType;
enum { HCCL_SEND = 0, HCCL_RECV = 1 };

typedef struct HcclSendRecvItemDef {
    HcclSendRecvType sendRecvType;
    void *buf;
    uint64_t count;
    HcclDataType dataType;
    uint32_t remoteRank;
} HcclSendRecvItem;

/* REQUIRED: without one of them the plugin has no collectives. OPTIONAL:
 * the collective that needs it is left out (and not declared). */
#define NPU_HCCL_FUNCS(REQUIRED, OPTIONAL)                                    \
    REQUIRED(HcclResult, HcclGetRootInfo, (HcclRootInfo * rootInfo))          \
    REQUIRED(HcclResult, HcclCommInitRootInfo,                                \
             (uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank,   \
              HcclComm *comm))                                                \
    REQUIRED(HcclResult, HcclCommDestroy, (HcclComm comm))                    \
    REQUIRED(HcclResult, HcclAllReduce,                                       \
             (void *sendBuf, void *recvBuf, uint64_t count,                   \
              HcclDataType dataType, HcclReduceOp op, HcclComm comm,          \
              aclrtStream stream))                                            \
    REQUIRED(HcclResult, HcclBroadcast,                                       \
             (void *buf, uint64_t count, HcclDataType dataType,               \
              uint32_t root, HcclComm comm, aclrtStream stream))              \
    REQUIRED(HcclResult, HcclAllGather,                                       \
             (void *sendBuf, void *recvBuf, uint64_t sendCount,               \
              HcclDataType dataType, HcclComm comm, aclrtStream stream))      \
    REQUIRED(HcclResult, HcclReduceScatter,                                   \
             (void *sendBuf, void *recvBuf, uint64_t recvCount,               \
              HcclDataType dataType, HcclReduceOp op, HcclComm comm,          \
              aclrtStream stream))                                            \
    REQUIRED(HcclResult, HcclSend,                                            \
             (void *sendBuf, uint64_t count, HcclDataType dataType,           \
              uint32_t destRank, HcclComm comm, aclrtStream stream))          \
    REQUIRED(HcclResult, HcclRecv,                                            \
             (void *recvBuf, uint64_t count, HcclDataType dataType,           \
              uint32_t srcRank, HcclComm comm, aclrtStream stream))           \
    OPTIONAL(HcclResult, HcclReduce,                                          \
             (void *sendBuf, void *recvBuf, uint64_t count,                   \
              HcclDataType dataType, HcclReduceOp op, uint32_t root,          \
              HcclComm comm, aclrtStream stream))                             \
    OPTIONAL(HcclResult, HcclAlltoAllV,                                       \
             (const void *sendBuf, const void *sendCounts,                    \
              const void *sdispls, HcclDataType sendType,                     \
              const void *recvBuf, const void *recvCounts,                    \
              const void *rdispls, HcclDataType recvType, HcclComm comm,      \
              aclrtStream stream))                                            \
    OPTIONAL(HcclResult, HcclBatchSendRecv,                                   \
             (HcclSendRecvItem * sendRecvInfo, uint32_t itemNum,              \
              HcclComm comm, aclrtStream stream))                             \
    OPTIONAL(const char *, HcclGetErrorString, (HcclResult code))

#endif /* KEEL_NPU_HCCL_API_H */
