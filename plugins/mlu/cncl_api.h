/*
 * The parts of Cambricon's communication library CNCL (libcncl.so) the mlu
 * plugin's collective group calls. Declared here so that the plugin builds
 * without Neuware; nothing links against libcncl.so: mlu_collective.c
 * dlopen()s it on the first collective call that needs it and looks each
 * function below up by name.
 *
 * WHERE EACH FACT WAS CHECKED (public sources only)
 *
 * Against a copy of Neuware's cncl.h of CNCL 1.25.0 (CNCL_MAJOR_VERSION 1,
 * MINOR 25, PATCH 0) kept in a public repository (the search index used
 * names it by content only), cross-read with the calls in
 * PaddlePaddle/PaddleCustomDevice backends/mlu (runtime.cc: cnclInitComms
 * with one communicator per process, cnclFreeComm, the clique id read as
 * its data bytes and its hash), torch_mlu's ProcessGroupCNCL (cnclAlltoAllv
 * with per-peer pointer, uint32_t count and type arrays;
 * CNCL_CLIQUE_ID_BYTES_SIZE) and oneflow's cambricon backend (the clique id
 * serialised as CNCL_CLIQUE_ID_BYTES_SIZE data bytes plus the uint64_t
 * hash):
 *   - cnclResult_t: CNCL_RET_SUCCESS 0x0, ERR_INTERNAL 0x01,
 *     ERR_UNSUPPORTED 0x11, ERR_NULL_POINTER 0x21, ERR_BUILD_RING 0x31,
 *     ERR_BUILD_TREE 0x41, ERR_INIT 0x51, ERR_NOT_INIT 0x61, ERR_REINIT
 *     0x71, ERR_NO_ALGO 0x81, ERR_INVALID_VERSION 0x91, ERR_SYSTEM 0x02,
 *     ERR_SYS_MALLOC 0x12, ERR_SYS_SOCKET 0x22, ERR_SYS_IBV 0x32,
 *     ERR_MLU_RUNTIME 0x03, ERR_CNRT_DEVICE 0x13, ERR_CNRT_MEMCOPY 0x23,
 *     ERR_CNRT_MALLOC 0x33, ERR_MLU_DEVICE 0x04, ASYNC_IN_PROGRESS 0x06,
 *     ASYNC_ERROR 0x16, ASYNC_UNKNOWN_ERROR 0x26, ERR_ARGUMENTS 0x07,
 *     ERR_MLU_ALLOCATE 0x08, ERR_MLU_DEALLOCATE 0x18 (the in-network
 *     compute codes 0x05..0x35 and IB_RECV_NOTREADY 0x09 exist too and are
 *     not used);
 *   - cnclDataType_t: cnclInvalid 0x0, cnclFloat16 (cnclHalf) 0x10,
 *     cnclBfloat16 0x11, cnclFloat32 (cnclFloat) 0x12, cnclInt8 0x20,
 *     cnclInt16 0x21, cnclInt32 0x22, cnclInt64 0x23, cnclUint8 0x30,
 *     cnclUint16 0x31, cnclUint32 0x32, cnclUint64 0x33. There is NO
 *     64-bit floating type;
 *   - cnclReduceOp_t: cnclSum 0, cnclProd 1, cnclMax 2, cnclMin 3. There
 *     is NO average;
 *   - struct cnclCliqueId { char data[CNCL_CLIQUE_ID_BYTES_SIZE]; uint64_t
 *     hash; } with CNCL_CLIQUE_ID_BYTES_SIZE 128: 136 bytes in all;
 *     cnclCliqueId_t is a pointer to it, cnclComm_t a pointer to the opaque
 *     struct cnclComm;
 *   - the prototypes below, parameter by parameter (count parameters are
 *     size_t, roots and peers int, the queue a cnrtQueue_t last).
 *
 * Behaviour the header's comments state and the plugin relies on: a
 * clique id may be used by ONE cnclInitComms per process (so the ranks of
 * one process join in one call, num_comm > 1); cnclBroadcast is in place
 * when send == recv; cnclReduce may take a NULL receive buffer off the
 * root; cnclAlltoAll(v) must not run in place; cnclGroupStart/End merge
 * several send/recv into one operation. NOT verified anywhere: whether
 * cnclGroupStart/End also let one thread drive the collectives of several
 * ranks (the plugin does not rely on it, see mlu_collective.c), and
 * whether the CNCL versions without cnclAlltoAll, cnclAlltoAllv, cnclSend,
 * cnclRecv or the group calls exist (they are OPTIONAL below, so that an
 * older libcncl.so still serves what it has).
 */
#ifndef KEEL_MLU_CNCL_API_H
#define KEEL_MLU_CNCL_API_H

#include <stddef.h>
#include <stdint.h>

#include "cnrt_api.h"

/* X(name, value) */
#define MLU_CNCL_RESULTS(X)                  \
    X(CNCL_RET_SUCCESS, 0x0)                 \
    X(CNCL_RET_ERR_INTERNAL, 0x01)           \
    X(CNCL_RET_ERR_UNSUPPORTED, 0x11)        \
    X(CNCL_RET_ERR_NULL_POINTER, 0x21)       \
    X(CNCL_RET_ERR_BUILD_RING, 0x31)         \
    X(CNCL_RET_ERR_BUILD_TREE, 0x41)         \
    X(CNCL_RET_ERR_INIT, 0x51)               \
    X(CNCL_RET_ERR_NOT_INIT, 0x61)           \
    X(CNCL_RET_ERR_REINIT, 0x71)             \
    X(CNCL_RET_ERR_NO_ALGO, 0x81)            \
    X(CNCL_RET_ERR_INVALID_VERSION, 0x91)    \
    X(CNCL_RET_ERR_SYSTEM, 0x02)             \
    X(CNCL_RET_ERR_SYS_MALLOC, 0x12)         \
    X(CNCL_RET_ERR_SYS_SOCKET, 0x22)         \
    X(CNCL_RET_ERR_SYS_IBV, 0x32)            \
    X(CNCL_RET_ERR_MLU_RUNTIME, 0x03)        \
    X(CNCL_RET_ERR_CNRT_DEVICE, 0x13)        \
    X(CNCL_RET_ERR_CNRT_MEMCOPY, 0x23)       \
    X(CNCL_RET_ERR_CNRT_MALLOC, 0x33)        \
    X(CNCL_RET_ERR_MLU_DEVICE, 0x04)         \
    X(CNCL_RET_ASYNC_IN_PROGRESS, 0x06)      \
    X(CNCL_RET_ASYNC_ERROR, 0x16)            \
    X(CNCL_RET_ASYNC_UNKNOWN_ERROR, 0x26)    \
    X(CNCL_RET_ERR_ARGUMENTS, 0x07)          \
    X(CNCL_RET_ERR_MLU_ALLOCATE, 0x08)       \
    X(CNCL_RET_ERR_MLU_DEALLOCATE, 0x18)

typedef enum {
#define MLU_CNCL_ENUM(name, value) name = value,
    MLU_CNCL_RESULTS(MLU_CNCL_ENUM)
#undef MLU_CNCL_ENUM
} cnclResult_t;

typedef enum {
    cnclInvalid = 0x0,
    cnclFloat16 = 0x10,
    cnclBfloat16 = 0x11,
    cnclFloat32 = 0x12,
    cnclInt8 = 0x20,
    cnclInt16 = 0x21,
    cnclInt32 = 0x22,
    cnclInt64 = 0x23,
    cnclUint8 = 0x30,
    cnclUint16 = 0x31,
    cnclUint32 = 0x32,
    cnclUint64 = 0x33,
} cnclDataType_t;

typedef enum {
    cnclSum = 0,
    cnclProd = 1,
    cnclMax = 2,
    cnclMin = 3,
} cnclReduceOp_t;

typedef struct cnclComm *cnclComm_t;

#define MLU_CNCL_CLIQUE_DATA_BYTES 128
struct cnclCliqueId {
    char data[MLU_CNCL_CLIQUE_DATA_BYTES];
    uint64_t hash;
};
typedef struct cnclCliqueId *cnclCliqueId_t;
/* What a keel id of the CNCL path holds: the whole struct, hash included
 * (PaddleCustomDevice and oneflow pass both parts between processes). */
#define MLU_CNCL_ID_BYTES ((uint32_t)sizeof(struct cnclCliqueId))

/*
 * X(return type, name, parameters): REQUIRED ones must all resolve or
 * libcncl.so is refused naming the first missing one; OPTIONAL ones may
 * be absent and the collective they serve is then not offered.
 */
#define MLU_CNCL_FUNCS(REQUIRED, OPTIONAL)                                   \
    REQUIRED(cnclResult_t, cnclGetCliqueId, (cnclCliqueId_t clique_id))      \
    REQUIRED(cnclResult_t, cnclInitComms,                                    \
             (cnclComm_t * comms, int num_comm, const int *dev_list,         \
              const int *rank_list, int nrank,                               \
              const cnclCliqueId_t clique_id))                               \
    REQUIRED(cnclResult_t, cnclDestroyComms,                                 \
             (cnclComm_t * comms, int num_comm))                             \
    REQUIRED(cnclResult_t, cnclAllReduce,                                    \
             (const void *send_buffer, void *recv_buffer, size_t count,      \
              cnclDataType_t data_type, cnclReduceOp_t reduce_op,            \
              cnclComm_t comm, cnrtQueue_t queue))                           \
    REQUIRED(cnclResult_t, cnclBroadcast,                                    \
             (const void *send_buffer, void *recv_buffer, size_t count,      \
              cnclDataType_t data_type, int root, cnclComm_t comm,           \
              cnrtQueue_t queue))                                            \
    REQUIRED(cnclResult_t, cnclAllGather,                                    \
             (const void *send_buffer, void *recv_buffer, size_t count,      \
              cnclDataType_t data_type, cnclComm_t comm, cnrtQueue_t queue)) \
    REQUIRED(cnclResult_t, cnclReduceScatter,                                \
             (const void *send_buffer, void *recv_buffer, size_t count,      \
              cnclDataType_t data_type, cnclReduceOp_t reduce_op,            \
              cnclComm_t comm, cnrtQueue_t queue))                           \
    OPTIONAL(cnclResult_t, cnclReduce,                                       \
             (const void *send_buffer, void *recv_buffer, size_t count,      \
              cnclDataType_t data_type, cnclReduceOp_t reduce_op, int root,  \
              cnclComm_t comm, cnrtQueue_t queue))                           \
    OPTIONAL(cnclResult_t, cnclAlltoAll,                                     \
             (const void *send_buffer, void *recv_buffer, size_t count,      \
              cnclDataType_t data_type, cnclComm_t comm, cnrtQueue_t queue)) \
    OPTIONAL(cnclResult_t, cnclAlltoAllv,                                    \
             (const void **send_buffers, uint32_t *send_counts,              \
              cnclDataType_t *send_types, void **recv_buffers,               \
              uint32_t *recv_counts, cnclDataType_t *recv_types,             \
              cnclComm_t comm, cnrtQueue_t queue))                           \
    OPTIONAL(cnclResult_t, cnclSend,                                         \
             (void *buffer, const size_t count, cnclDataType_t data_type,    \
              const int dest, const cnclComm_t comm, cnrtQueue_t queue))     \
    OPTIONAL(cnclResult_t, cnclRecv,                                         \
             (void *buffer, const size_t count, cnclDataType_t data_type,    \
              const int source, const cnclComm_t comm, cnrtQueue_t queue))   \
    OPTIONAL(cnclResult_t, cnclGroupStart, (void))                           \
    OPTIONAL(cnclResult_t, cnclGroupEnd, (void))                             \
    OPTIONAL(cnclResult_t, cnclAbortComm, (cnclComm_t comm))                 \
    OPTIONAL(const char *, cnclGetErrorStr, (cnclResult_t ret))

#endif /* KEEL_MLU_CNCL_API_H */
