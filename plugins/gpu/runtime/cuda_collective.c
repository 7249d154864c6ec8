/*
 * keel GPU plugins — collective group on NCCL (CUDA build) or RCCL (HIP
 * build; RCCL keeps NCCL's API and names, declared in plugins/hip/rccl_api.h
 * as Debian ships no RCCL header).
 *
 * Compiled only when meson found NCCL (KEEL_CUDA_HAVE_NCCL), and always in
 * the HIP build. A keel_comm is
 * a struct keel_comm_s (the ncclComm_t, its device, rank and size),
 * registered in cuda_g.handles like streams and events. Every collective
 * runs on a stream of the communicator's device (NULL: the default stream)
 * and makes that device current first.
 *
 * Dtypes map one to one, except bool (one byte, 0 = false): it travels as
 * ncclUint8, SUM and MAX become ncclMax (logical or) and PROD and MIN become
 * ncclMin (logical and), which stay right for any non-zero "true" byte;
 * AVG of bools is NOT_SUPPORTED.
 *
 * all_to_all is grouped ncclSend/ncclRecv (works on every NCCL 2.7+).
 *
 * NCCL is not linked: it is dlopened (libnccl.so.<NCCL_MAJOR>, through the
 * plugin's rpath; librccl.so.1 in the HIP build) by the first call that needs it, get_unique_id,
 * comm_init_rank or group_start/end; every other call needs a communicator
 * and so comes later. Loading the plugin therefore maps no NCCL and runs
 * none of its constructors. Without the library, the collectives run in
 * this process on the kit's engine (gpu_hostcoll.c), unless
 * KEEL_GPU_COLL=library asks for the library only: then those calls fail
 * with NOT_SUPPORTED and the dlopen error (see mode_pick below).
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

#ifdef KEEL_GPU_HIP
#include "rccl_api.h" /* RCCL_SONAME */
#define NCCL_SONAME RCCL_SONAME
#define NCCL_NAME "RCCL"
#else
#include <nccl.h>
#define NCCL_STR_(x) #x
#define NCCL_STR(x) NCCL_STR_(x)
#define NCCL_SONAME "libnccl.so." NCCL_STR(NCCL_MAJOR)
#define NCCL_NAME "NCCL"
#endif

/* ---- NCCL, loaded on first use ------------------------------------------- */

/* One pointer per NCCL function used, typed from nccl.h's declarations. */
#define NCCL_FUNCS(X)                                                        \
    X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy)                \
    X(ncclGetErrorString) X(ncclAllReduce)                                   \
    X(ncclBroadcast) X(ncclReduce) X(ncclAllGather) X(ncclReduceScatter)     \
    X(ncclSend) X(ncclRecv) X(ncclGroupStart) X(ncclGroupEnd)

static struct {
    pthread_once_t once;
    void *handle;
    char error[512];
#define NCCL_MEMBER(f) __typeof__(f) *f;
    NCCL_FUNCS(NCCL_MEMBER)
    /* Optional: NCCL 2.13 and later (older RCCLs lack it). */
    __typeof__(ncclGetLastError) *ncclGetLastError;
#undef NCCL_MEMBER
} nccl_lib = {.once = PTHREAD_ONCE_INIT};

static void nccl_open(void)
{
    const char *err;
    void *h;

    dlerror();
    h = dlopen(NCCL_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        err = dlerror();
        snprintf(nccl_lib.error, sizeof(nccl_lib.error), "dlopen(%s): %s",
                 NCCL_SONAME, err ? err : "failed");
        return;
    }
#define NCCL_LOOKUP(f)                                                       \
    if (!(*(void **)&nccl_lib.f = dlsym(h, #f))) {                           \
        snprintf(nccl_lib.error, sizeof(nccl_lib.error),                     \
                 "%s has no symbol %s", NCCL_SONAME, #f);                    \
        dlclose(h);                                                          \
        return;                                                              \
    }
    NCCL_FUNCS(NCCL_LOOKUP)
#undef NCCL_LOOKUP
    *(void **)&nccl_lib.ncclGetLastError = dlsym(h, "ncclGetLastError");
    nccl_lib.handle = h;
    cuda_log(KEEL_LOG_DEBUG, "gpu: loaded %s for the collective group",
             NCCL_SONAME);
}

static keel_status nccl_ready(const char *call)
{
    pthread_once(&nccl_lib.once, nccl_open);
    if (nccl_lib.handle)
        return KEEL_STATUS_OK;
    return cuda_fail(KEEL_STATUS_NOT_SUPPORTED,
                     "%s: collectives need " NCCL_NAME ", which could not be loaded: "
                     "%s", call, nccl_lib.error);
}

/* ---- NCCL or the in-process engine ---------------------------------------- */

/*
 * Decided once, by the first call that needs a library (get_unique_id,
 * comm_init_rank, group_start/end, get_caps). KEEL_GPU_COLL:
 *   unset / auto   the library when it loads, else in-process collectives
 *   library        the library only (calls fail when it cannot be loaded)
 *   inprocess      in-process collectives (gpu_hostcoll.c) even when the
 *                  library would load
 * Every communicator of a process then belongs to one of the two.
 */
enum { MODE_UNDECIDED, MODE_LIBRARY, MODE_INPROCESS, MODE_NONE };
static _Atomic int coll_mode = MODE_UNDECIDED;
static pthread_once_t mode_once = PTHREAD_ONCE_INIT;

static void mode_pick(void)
{
    const char *e = getenv("KEEL_GPU_COLL");
    bool lib_only = e && !strcmp(e, "library");

    if (e && *e && strcmp(e, "auto") && strcmp(e, "library") &&
        strcmp(e, "inprocess"))
        cuda_log(KEEL_LOG_WARN,
                 "gpu: KEEL_GPU_COLL=%s is not auto, library or inprocess; "
                 "using auto", e);
    if (e && !strcmp(e, "inprocess")) {
        atomic_store(&coll_mode, MODE_INPROCESS);
        cuda_log(KEEL_LOG_INFO,
                 "gpu: collectives in-process (KEEL_GPU_COLL=inprocess)");
        return;
    }
    pthread_once(&nccl_lib.once, nccl_open);
    if (nccl_lib.handle) {
        atomic_store(&coll_mode, MODE_LIBRARY);
    } else if (lib_only) {
        atomic_store(&coll_mode, MODE_NONE);
    } else {
        atomic_store(&coll_mode, MODE_INPROCESS);
        cuda_log(KEEL_LOG_INFO,
                 "gpu: collectives in-process, staged through host memory: "
                 NCCL_NAME " could not be loaded (%s)", nccl_lib.error);
    }
}

static int mode_get(void)
{
    pthread_once(&mode_once, mode_pick);
    return atomic_load(&coll_mode);
}

/* Calls on a communicator: it exists, so the mode is decided. */
static bool inprocess(void)
{
    return atomic_load(&coll_mode) == MODE_INPROCESS;
}

const char *gpu_coll_backend(void)
{
    switch (atomic_load(&coll_mode)) {
    case MODE_LIBRARY: return NCCL_NAME;
    case MODE_INPROCESS: return "in-process";
    case MODE_NONE: return "none";
    default: return NCCL_NAME "|in-process";
    }
}

/* From here on, every NCCL call goes through the loaded pointers. */
#define ncclGetUniqueId (*nccl_lib.ncclGetUniqueId)
#define ncclCommInitRank (*nccl_lib.ncclCommInitRank)
#define ncclCommDestroy (*nccl_lib.ncclCommDestroy)
#define ncclGetErrorString (*nccl_lib.ncclGetErrorString)
#define ncclGetLastError(c)                                                  \
    (nccl_lib.ncclGetLastError ? nccl_lib.ncclGetLastError(c) : "")
#define ncclAllReduce (*nccl_lib.ncclAllReduce)
#define ncclBroadcast (*nccl_lib.ncclBroadcast)
#define ncclReduce (*nccl_lib.ncclReduce)
#define ncclAllGather (*nccl_lib.ncclAllGather)
#define ncclReduceScatter (*nccl_lib.ncclReduceScatter)
#define ncclSend (*nccl_lib.ncclSend)
#define ncclRecv (*nccl_lib.ncclRecv)
#define ncclGroupStart (*nccl_lib.ncclGroupStart)
#define ncclGroupEnd (*nccl_lib.ncclGroupEnd)

_Static_assert(sizeof(ncclUniqueId) == KEEL_COMM_ID_BYTES,
               "ncclUniqueId and keel_comm_id must have the same size");
_Static_assert(sizeof(((keel_comm_id *)0)->bytes) == KEEL_COMM_ID_BYTES,
               "keel_comm_id holds KEEL_COMM_ID_BYTES bytes");

struct keel_comm_s {
    ncclComm_t nccl;
    int32_t device;
    int32_t rank;
    int32_t nranks;
};

/* ---- errors -------------------------------------------------------------- */

static keel_status nccl_status_of(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess:
        return KEEL_STATUS_OK;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
        return KEEL_STATUS_INVALID_ARGUMENT;
    case ncclInProgress:
        return KEEL_STATUS_NOT_READY;
    default: /* unhandled CUDA, system, internal, remote errors */
        return KEEL_STATUS_DEVICE_ERROR;
    }
}

static const char *nccl_result_name(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess:
        return "ncclSuccess";
    case ncclUnhandledCudaError:
        return "ncclUnhandledCudaError";
    case ncclSystemError:
        return "ncclSystemError";
    case ncclInternalError:
        return "ncclInternalError";
    case ncclInvalidArgument:
        return "ncclInvalidArgument";
    case ncclInvalidUsage:
        return "ncclInvalidUsage";
    case ncclRemoteError:
        return "ncclRemoteError";
    case ncclInProgress:
        return "ncclInProgress";
    default:
        return "ncclResult(?)";
    }
}

/*
 * OK for ncclSuccess; otherwise attach
 * "<what> on gpu:<n>: <name>: <string> (<ncclGetLastError>)"
 * (no "on gpu:<n>" when device < 0: calls that name no device).
 */
static keel_status nccl_check(ncclResult_t r, ncclComm_t comm, int32_t device,
                              const char *what)
{
    char where[32] = "";
    const char *last;

    if (r == ncclSuccess)
        return KEEL_STATUS_OK;
    (void)cudaGetLastError(); /* NCCL may leave a CUDA error behind */
    last = ncclGetLastError(comm);
    if (!last)
        last = "";
    if (device >= 0)
        snprintf(where, sizeof(where), " on gpu:%d", (int)device);
    return cuda_fail(nccl_status_of(r), "%s%s: %s: %s%s%s%s", what, where,
                     nccl_result_name(r), ncclGetErrorString(r),
                     *last ? " (" : "", last, *last ? ")" : "");
}

/* ---- argument maps ------------------------------------------------------- */

static keel_status map_dtype(const char *call, keel_dtype dt,
                             ncclDataType_t *out)
{
    switch (dt) {
    case KEEL_F32:
        *out = ncclFloat32;
        return KEEL_STATUS_OK;
    case KEEL_F64:
        *out = ncclFloat64;
        return KEEL_STATUS_OK;
    case KEEL_F16:
        *out = ncclFloat16;
        return KEEL_STATUS_OK;
    case KEEL_BF16:
        *out = ncclBfloat16;
        return KEEL_STATUS_OK;
    case KEEL_I8:
        *out = ncclInt8;
        return KEEL_STATUS_OK;
    case KEEL_U8:
    case KEEL_BOOL:
        *out = ncclUint8;
        return KEEL_STATUS_OK;
    case KEEL_I32:
        *out = ncclInt32;
        return KEEL_STATUS_OK;
    case KEEL_I64:
        *out = ncclInt64;
        return KEEL_STATUS_OK;
    default:
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "%s: dtype %d is not a keel dtype", call, (int)dt);
    }
}

static keel_status map_bool_op(const char *call, keel_reduce_op op,
                               ncclRedOp_t *out)
{
    switch (op) {
    case KEEL_REDUCE_SUM:
    case KEEL_REDUCE_MAX:
        *out = ncclMax; /* logical or */
        return KEEL_STATUS_OK;
    case KEEL_REDUCE_PROD:
    case KEEL_REDUCE_MIN:
        *out = ncclMin; /* logical and */
        return KEEL_STATUS_OK;
    default:
        return cuda_fail(KEEL_STATUS_NOT_SUPPORTED,
                         "%s: reduce op AVG is not defined for bool", call);
    }
}

static keel_status map_op(const char *call, keel_reduce_op op, keel_dtype dt,
                          ncclRedOp_t *out)
{
    if ((unsigned)op >= KEEL_REDUCE_OP_COUNT_)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "%s: reduce op %d is not a keel reduce op", call,
                         (int)op);
    if (dt == KEEL_BOOL)
        return map_bool_op(call, op, out);
    switch (op) {
    case KEEL_REDUCE_SUM:
        *out = ncclSum;
        break;
    case KEEL_REDUCE_PROD:
        *out = ncclProd;
        break;
    case KEEL_REDUCE_MAX:
        *out = ncclMax;
        break;
    case KEEL_REDUCE_MIN:
        *out = ncclMin;
        break;
    default:
        *out = ncclAvg;
        break;
    }
    return KEEL_STATUS_OK;
}

/* ---- prologue ------------------------------------------------------------ */

struct coll {
    struct keel_comm_s *comm;
    cudaStream_t stream;
    ncclDataType_t type;
    uint32_t elem; /* bytes per element */
};

static keel_status check_init(const char *call)
{
    if (atomic_load_explicit(&cuda_g.initialized, memory_order_acquire))
        return KEEL_STATUS_OK;
    return cuda_fail(KEEL_STATUS_NOT_INITIALIZED,
                     "%s: the cuda plugin is not initialised%s%s", call,
                     cuda_g.probe_reason[0] ? ": " : "", cuda_g.probe_reason);
}

static keel_status comm_resolve(keel_comm comm, const char *call)
{
    struct cuda_entry e;

    if (cuda_registry_find(&cuda_g.handles, (uintptr_t)comm, &e) &&
        e.kind == CUDA_KIND_COMM)
        return KEEL_STATUS_OK;
    return cuda_fail(KEEL_STATUS_INVALID_HANDLE,
                     "%s: comm %p is not a live communicator of this plugin",
                     call, (void *)comm);
}

/* Initialised, live comm, its device current, stream of that device. */
static keel_status coll_enter(keel_comm comm, keel_stream stream,
                              keel_dtype dt, const char *call, struct coll *c)
{
    keel_status st = check_init(call);

    if (st == KEEL_STATUS_OK)
        st = comm_resolve(comm, call);
    if (st != KEEL_STATUS_OK)
        return st;
    c->comm = comm;
    st = map_dtype(call, dt, &c->type);
    if (st == KEEL_STATUS_OK)
        st = cuda_use_device(comm->device);
    if (st == KEEL_STATUS_OK)
        st = cuda_stream_resolve(comm->device, stream, call, &c->stream);
    c->elem = keel_dtype_size(dt);
    return st;
}

/* buf holds `blocks` x `count` elements: non-null, no overflow. */
static keel_status check_buf(const struct coll *c, const char *call,
                             const char *name, keel_dptr buf, uint64_t count,
                             uint64_t blocks)
{
    uint64_t n;

    if (count == 0)
        return KEEL_STATUS_OK;
    if (!c->elem || !blocks)
        return cuda_fail(KEEL_STATUS_INTERNAL, "%s: bad element size",
                         call);
    if (count > UINT64_MAX / c->elem / blocks)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "%s(gpu:%d): %s: %" PRIu64 " x %" PRIu64
                         " elements overflow",
                         call, (int)c->comm->device, name, blocks, count);
    n = count * c->elem * blocks;
    if (!buf || buf > UINT64_MAX - n)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "%s(gpu:%d): %s 0x%" PRIx64 " is not a valid "
                         "buffer of %" PRIu64 " bytes",
                         call, (int)c->comm->device, name, buf, n);
    return KEEL_STATUS_OK;
}

static keel_status check_rank(const struct coll *c, const char *call,
                              const char *name, int32_t r)
{
    if (r >= 0 && r < c->comm->nranks)
        return KEEL_STATUS_OK;
    return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                     "%s(gpu:%d): %s %d is outside [0, %d)", call,
                     (int)c->comm->device, name, (int)r,
                     (int)c->comm->nranks);
}

static keel_status coll_done(const struct coll *c, ncclResult_t r,
                             const char *what)
{
    return nccl_check(r, c->comm->nccl, c->comm->device, what);
}

/* ---- communicators ------------------------------------------------------- */

static keel_status cuda_get_unique_id(keel_comm_id *id)
{
    ncclUniqueId uid;
    keel_status st;

    if (!id)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "get_unique_id: id is NULL");
    st = check_init("get_unique_id");
    if (st == KEEL_STATUS_OK && mode_get() == MODE_INPROCESS)
        return gpu_hostcoll_ops.get_unique_id(id);
    if (st == KEEL_STATUS_OK)
        st = nccl_ready("get_unique_id");
    if (st != KEEL_STATUS_OK)
        return st;
    st = nccl_check(ncclGetUniqueId(&uid), NULL, -1, "ncclGetUniqueId()");
    if (st == KEEL_STATUS_OK)
        memcpy(id->bytes, uid.internal, sizeof(id->bytes));
    return st;
}

static keel_status check_init_args(int32_t device, int32_t nranks,
                                   const keel_comm_id *id, int32_t rank,
                                   keel_comm *comm)
{
    if (!id || !comm)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "comm_init_rank(gpu:%d): %s is NULL", (int)device,
                         !id ? "id" : "comm");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "comm_init_rank(gpu:%d): rank %d of %d ranks is "
                         "invalid",
                         (int)device, (int)rank, (int)nranks);
    return KEEL_STATUS_OK;
}

static keel_status cuda_comm_init_rank(int32_t device, int32_t nranks,
                                       const keel_comm_id *id, int32_t rank,
                                       keel_comm *comm)
{
    struct cuda_entry e = {.device = device, .kind = CUDA_KIND_COMM};
    struct keel_comm_s *c;
    ncclUniqueId uid;
    char what[96];
    keel_status st;

    if (check_init("comm_init_rank") == KEEL_STATUS_OK &&
        mode_get() == MODE_INPROCESS)
        return gpu_hostcoll_ops.comm_init_rank(device, nranks, id, rank, comm);

    st = check_init_args(device, nranks, id, rank, comm);
    if (st != KEEL_STATUS_OK)
        return st;
    *comm = NULL;
    st = cuda_enter(device, "comm_init_rank");
    if (st == KEEL_STATUS_OK)
        st = nccl_ready("comm_init_rank");
    if (st != KEEL_STATUS_OK)
        return st;
    c = calloc(1, sizeof(*c));
    if (!c)
        return cuda_fail(KEEL_STATUS_OUT_OF_MEMORY,
                         "comm_init_rank(gpu:%d): out of host memory",
                         (int)device);
    c->device = device;
    c->rank = rank;
    c->nranks = nranks;
    memcpy(uid.internal, id->bytes, sizeof(uid.internal));
    snprintf(what, sizeof(what), "ncclCommInitRank(nranks=%d, rank=%d)",
             (int)nranks, (int)rank);
    st = nccl_check(ncclCommInitRank(&c->nccl, nranks, uid, rank), NULL,
                    device, what);
    if (st != KEEL_STATUS_OK)
        goto err_free;
    e.key = (uintptr_t)c;
    if (cuda_registry_add(&cuda_g.handles, &e) != 0) {
        st = cuda_fail(KEEL_STATUS_OUT_OF_MEMORY,
                       "comm_init_rank(gpu:%d): out of host memory for the "
                       "plugin's handle table",
                       (int)device);
        goto err_destroy;
    }
    *comm = c;
    return KEEL_STATUS_OK;

err_destroy:
    (void)ncclCommDestroy(c->nccl);
err_free:
    free(c);
    return st;
}

static keel_status comm_release(struct keel_comm_s *c)
{
    keel_status st = cuda_use_device(c->device);

    if (st == KEEL_STATUS_OK)
        st = nccl_check(ncclCommDestroy(c->nccl), NULL, c->device,
                        "ncclCommDestroy()");
    free(c);
    return st;
}

static keel_status cuda_comm_destroy(keel_comm comm)
{
    if (inprocess())
        return gpu_hostcoll_ops.comm_destroy(comm);
    keel_status st = check_init("comm_destroy");

    if (st != KEEL_STATUS_OK)
        return st;
    if (!cuda_registry_take(&cuda_g.handles, (uintptr_t)comm, CUDA_KIND_COMM,
                            -1, NULL))
        return comm_resolve(comm, "comm_destroy");
    return comm_release(comm);
}

static keel_status cuda_comm_rank(keel_comm comm, int32_t *rank,
                                  int32_t *nranks)
{
    if (inprocess())
        return gpu_hostcoll_ops.comm_rank(comm, rank, nranks);
    keel_status st = check_init("comm_rank");

    if (st == KEEL_STATUS_OK)
        st = comm_resolve(comm, "comm_rank");
    if (st != KEEL_STATUS_OK)
        return st;
    if (!rank || !nranks)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "comm_rank: %s is NULL", !rank ? "rank" : "nranks");
    *rank = comm->rank;
    *nranks = comm->nranks;
    return KEEL_STATUS_OK;
}

/* ---- collectives --------------------------------------------------------- */

static keel_status cuda_all_reduce(keel_comm comm, keel_stream stream,
                                   keel_dptr send, keel_dptr recv,
                                   uint64_t count, keel_dtype dtype,
                                   keel_reduce_op op)
{
    if (inprocess())
        return gpu_hostcoll_ops.all_reduce(comm, stream, send, recv, count, dtype, op);
    const char *call = "all_reduce";
    struct coll c;
    ncclRedOp_t nop = ncclSum;
    keel_status st;

    st = coll_enter(comm, stream, dtype, call, &c);
    if (st == KEEL_STATUS_OK)
        st = map_op(call, op, dtype, &nop);
    if (st == KEEL_STATUS_OK)
        st = check_buf(&c, call, "send", send, count, 1);
    if (st == KEEL_STATUS_OK)
        st = check_buf(&c, call, "recv", recv, count, 1);
    if (st != KEEL_STATUS_OK)
        return st;
    return coll_done(&c, ncclAllReduce(CUDA_PTR(send), CUDA_PTR(recv), count,
                                       c.type, nop, comm->nccl, c.stream),
                     "ncclAllReduce()");
}

static keel_status cuda_broadcast(keel_comm comm, keel_stream stream,
                                  keel_dptr send, keel_dptr recv,
                                  uint64_t count, keel_dtype dtype,
                                  int32_t root)
{
    if (inprocess())
        return gpu_hostcoll_ops.broadcast(comm, stream, send, recv, count, dtype, root);
    const char *call = "broadcast";
    struct coll c;
    keel_status st;

    st = coll_enter(comm, stream, dtype, call, &c);
    if (st == KEEL_STATUS_OK)
        st = check_rank(&c, call, "root", root);
    /* Only the root's send buffer is read. */
    if (st == KEEL_STATUS_OK && comm->rank == root)
        st = check_buf(&c, call, "send", send, count, 1);
    if (st == KEEL_STATUS_OK)
        st = check_buf(&c, call, "recv", recv, count, 1);
    if (st != KEEL_STATUS_OK)
        return st;
    return coll_done(&c, ncclBroadcast(CUDA_PTR(send), CUDA_PTR(recv), count,
                                       c.type, root, comm->nccl, c.stream),
                     "ncclBroadcast()");
}

static keel_status cuda_reduce(keel_comm comm, keel_stream stream,
                               keel_dptr send, keel_dptr recv, uint64_t count,
                               keel_dtype dtype, keel_reduce_op op,
                               int32_t root)
{
    if (inprocess())
        return gpu_hostcoll_ops.reduce(comm, stream, send, recv, count, dtype, op, root);
    const char *call = "reduce";
    struct coll c;
    ncclRedOp_t nop = ncclSum;
    keel_status st;

    st = coll_enter(comm, stream, dtype, call, &c);
    if (st == KEEL_STATUS_OK)
        st = map_op(call, op, dtype, &nop);
    if (st == KEEL_STATUS_OK)
        st = check_rank(&c, call, "root", root);
    if (st == KEEL_STATUS_OK)
        st = check_buf(&c, call, "send", send, count, 1);
    /* Only the root's receive buffer is written. */
    if (st == KEEL_STATUS_OK && comm->rank == root)
        st = check_buf(&c, call, "recv", recv, count, 1);
    if (st != KEEL_STATUS_OK)
        return st;
    return coll_done(&c, ncclReduce(CUDA_PTR(send), CUDA_PTR(recv), count,
                                    c.type, nop, root, comm->nccl, c.stream),
                     "ncclReduce()");
}

static keel_status cuda_all_gather(keel_comm comm, keel_stream stream,
                                   keel_dptr send, keel_dptr recv,
                                   uint64_t count, keel_dtype dtype)
{
    if (inprocess())
        return gpu_hostcoll_ops.all_gather(comm, stream, send, recv, count, dtype);
    const char *call = "all_gather";
    struct coll c;
    keel_status st;

    st = coll_enter(comm, stream, dtype, call, &c);
    if (st == KEEL_STATUS_OK)
        st = check_buf(&c, call, "send", send, count, 1);
    if (st == KEEL_STATUS_OK)
        st = check_buf(&c, call, "recv", recv, count,
                       (uint64_t)comm->nranks);
    if (st != KEEL_STATUS_OK)
        return st;
    return coll_done(&c, ncclAllGather(CUDA_PTR(send), CUDA_PTR(recv), count,
                                       c.type, comm->nccl, c.stream),
                     "ncclAllGather()");
}

static keel_status cuda_reduce_scatter(keel_comm comm, keel_stream stream,
                                       keel_dptr send, keel_dptr recv,
                                       uint64_t count, keel_dtype dtype,
                                       keel_reduce_op op)
{
    if (inprocess())
        return gpu_hostcoll_ops.reduce_scatter(comm, stream, send, recv, count, dtype, op);
    const char *call = "reduce_scatter";
    struct coll c;
    ncclRedOp_t nop = ncclSum;
    keel_status st;

    st = coll_enter(comm, stream, dtype, call, &c);
    if (st == KEEL_STATUS_OK)
        st = map_op(call, op, dtype, &nop);
    if (st == KEEL_STATUS_OK)
        st = check_buf(&c, call, "send", send, count,
                       (uint64_t)comm->nranks);
    if (st == KEEL_STATUS_OK)
        st = check_buf(&c, call, "recv", recv, count, 1);
    if (st != KEEL_STATUS_OK)
        return st;
    return coll_done(&c, ncclReduceScatter(CUDA_PTR(send), CUDA_PTR(recv),
                                           count, c.type, nop, comm->nccl,
                                           c.stream),
                     "ncclReduceScatter()");
}

/* Block j of our send goes to rank j; block j of our recv comes from j. */
static ncclResult_t all_to_all_p2p(const struct coll *c, keel_dptr send,
                                   keel_dptr recv, uint64_t count)
{
    uint64_t block = count * c->elem;
    ncclResult_t r, r2;

    r = ncclGroupStart();
    if (r != ncclSuccess)
        return r;
    for (int32_t p = 0; p < c->comm->nranks && r == ncclSuccess; p++) {
        r = ncclSend(CUDA_PTR(send + (uint64_t)p * block), count, c->type, p,
                     c->comm->nccl, c->stream);
        if (r == ncclSuccess)
            r = ncclRecv(CUDA_PTR(recv + (uint64_t)p * block), count, c->type,
                         p, c->comm->nccl, c->stream);
    }
    /* Always close the group, even after a failed enqueue. */
    r2 = ncclGroupEnd();
    return r != ncclSuccess ? r : r2;
}

static keel_status cuda_all_to_all(keel_comm comm, keel_stream stream,
                                   keel_dptr send, keel_dptr recv,
                                   uint64_t count, keel_dtype dtype)
{
    if (inprocess())
        return gpu_hostcoll_ops.all_to_all(comm, stream, send, recv, count, dtype);
    const char *call = "all_to_all";
    uint64_t n;
    struct coll c;
    keel_status st;

    st = coll_enter(comm, stream, dtype, call, &c);
    if (st != KEEL_STATUS_OK)
        return st;
    n = (uint64_t)comm->nranks;
    st = check_buf(&c, call, "send", send, count, n);
    if (st == KEEL_STATUS_OK)
        st = check_buf(&c, call, "recv", recv, count, n);
    if (st == KEEL_STATUS_OK && count && send < recv + count * c.elem * n &&
        recv < send + count * c.elem * n)
        st = cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "all_to_all(gpu:%d): send and recv overlap",
                       (int)comm->device);
    if (st != KEEL_STATUS_OK || count == 0)
        return st;
    return coll_done(&c, all_to_all_p2p(&c, send, recv, count),
                     "all_to_all (grouped ncclSend/ncclRecv)");
}

/* Grouped ncclSend/ncclRecv with a count per peer (the rank itself too:
 * NCCL matches a send to oneself with the recv from oneself in a group). */
static keel_status cuda_all_to_allv(keel_comm comm, keel_stream stream,
                                    keel_dptr send, const uint64_t *scount,
                                    const uint64_t *sdispl, keel_dptr recv,
                                    const uint64_t *rcount,
                                    const uint64_t *rdispl, keel_dtype dtype)
{
    const char *call = "all_to_allv";
    struct coll c;
    keel_status st;
    ncclResult_t r, r2;

    if (inprocess())
        return gpu_hostcoll_ops.all_to_allv(comm, stream, send, scount, sdispl,
                                            recv, rcount, rdispl, dtype);
    st = coll_enter(comm, stream, dtype, call, &c);
    if (st != KEEL_STATUS_OK)
        return st;
    if (!scount || !sdispl || !rcount || !rdispl)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "all_to_allv(gpu:%d): a count or displacement array "
                         "is NULL",
                         (int)comm->device);
    for (int32_t p = 0; p < comm->nranks && st == KEEL_STATUS_OK; p++) {
        if (scount[p])
            st = check_buf(&c, call, "send block", send + sdispl[p] * c.elem,
                           scount[p], 1);
        if (st == KEEL_STATUS_OK && rcount[p])
            st = check_buf(&c, call, "recv block", recv + rdispl[p] * c.elem,
                           rcount[p], 1);
        if (st == KEEL_STATUS_OK &&
            (sdispl[p] > UINT64_MAX / c.elem || rdispl[p] > UINT64_MAX / c.elem))
            st = cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                           "all_to_allv(gpu:%d): displacement of peer %d "
                           "overflows",
                           (int)comm->device, (int)p);
    }
    if (st != KEEL_STATUS_OK)
        return st;
    r = ncclGroupStart();
    for (int32_t p = 0; p < comm->nranks && r == ncclSuccess; p++) {
        if (scount[p])
            r = ncclSend(CUDA_PTR(send + sdispl[p] * c.elem), scount[p], c.type,
                         p, comm->nccl, c.stream);
        if (r == ncclSuccess && rcount[p])
            r = ncclRecv(CUDA_PTR(recv + rdispl[p] * c.elem), rcount[p],
                         c.type, p, comm->nccl, c.stream);
    }
    r2 = ncclGroupEnd();
    return coll_done(&c, r != ncclSuccess ? r : r2,
                     "all_to_allv (grouped ncclSend/ncclRecv)");
}

static keel_status p2p_enter(keel_comm comm, keel_stream stream,
                             keel_dptr buf, uint64_t count, keel_dtype dtype,
                             int32_t peer, const char *call, struct coll *c)
{
    keel_status st = coll_enter(comm, stream, dtype, call, c);

    if (st == KEEL_STATUS_OK)
        st = check_rank(c, call, "peer", peer);
    if (st == KEEL_STATUS_OK)
        st = check_buf(c, call, "buf", buf, count, 1);
    return st;
}

static keel_status cuda_send(keel_comm comm, keel_stream stream, keel_dptr buf,
                             uint64_t count, keel_dtype dtype, int32_t peer)
{
    if (inprocess())
        return gpu_hostcoll_ops.send(comm, stream, buf, count, dtype, peer);
    struct coll c;
    keel_status st;

    st = p2p_enter(comm, stream, buf, count, dtype, peer, "send", &c);
    if (st != KEEL_STATUS_OK)
        return st;
    return coll_done(&c, ncclSend(CUDA_PTR(buf), count, c.type, peer,
                                  comm->nccl, c.stream),
                     "ncclSend()");
}

static keel_status cuda_recv(keel_comm comm, keel_stream stream, keel_dptr buf,
                             uint64_t count, keel_dtype dtype, int32_t peer)
{
    if (inprocess())
        return gpu_hostcoll_ops.recv(comm, stream, buf, count, dtype, peer);
    struct coll c;
    keel_status st;

    st = p2p_enter(comm, stream, buf, count, dtype, peer, "recv", &c);
    if (st != KEEL_STATUS_OK)
        return st;
    return coll_done(&c, ncclRecv(CUDA_PTR(buf), count, c.type, peer,
                                  comm->nccl, c.stream),
                     "ncclRecv()");
}

static keel_status cuda_group_start(void)
{
    keel_status st = check_init("group_start");

    if (st == KEEL_STATUS_OK && mode_get() == MODE_INPROCESS)
        return gpu_hostcoll_ops.group_start();

    if (st == KEEL_STATUS_OK)
        st = nccl_ready("group_start");
    if (st != KEEL_STATUS_OK)
        return st;
    return nccl_check(ncclGroupStart(), NULL, -1, "ncclGroupStart()");
}

static keel_status cuda_group_end(void)
{
    keel_status st = check_init("group_end");

    if (st == KEEL_STATUS_OK && mode_get() == MODE_INPROCESS)
        return gpu_hostcoll_ops.group_end();

    if (st == KEEL_STATUS_OK)
        st = nccl_ready("group_end");
    if (st != KEEL_STATUS_OK)
        return st;
    return nccl_check(ncclGroupEnd(), NULL, -1, "ncclGroupEnd()");
}

/* ---- capabilities --------------------------------------------------------- */

/*
 * In-process: the engine's declaration. Library: what this file maps for
 * NCCL/RCCL (every collective and dtype, bool reductions as logical or/and,
 * every op; waits unbounded). Library required but missing: nothing.
 */
static keel_status cuda_get_caps(int32_t device, keel_collective_caps *caps)
{
    keel_collective_caps c;
    keel_status st;
    uint32_t n;
    int mode = mode_get();

    if (mode == MODE_INPROCESS)
        return gpu_hostcoll_ops.get_caps(device, caps);
    if (!caps || caps->struct_size < 4)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "get_caps: caps is NULL or its struct_size is below 4");
    st = cuda_check_device(device, "get_caps");
    if (st != KEEL_STATUS_OK)
        return st;
    memset(&c, 0, sizeof(c));
    if (mode == MODE_LIBRARY) {
        c.collectives = KEEL_COLL_ALL_REDUCE | KEEL_COLL_BROADCAST |
                        KEEL_COLL_REDUCE | KEEL_COLL_ALL_GATHER |
                        KEEL_COLL_REDUCE_SCATTER | KEEL_COLL_ALL_TO_ALL |
                        KEEL_COLL_SEND_RECV | KEEL_COLL_ALL_TO_ALLV;
        for (int d = 0; d < KEEL_DTYPE_COUNT_; d++)
            c.dtype_mask |= KEEL_DTYPE_BIT(d);
        for (int o = 0; o < KEEL_REDUCE_OP_COUNT_; o++)
            c.reduce_ops |= KEEL_REDUCE_OP_BIT(o);
    }
    n = caps->struct_size < sizeof(c) ? caps->struct_size : (uint32_t)sizeof(c);
    c.struct_size = n;
    memcpy(caps, &c, n);
    return KEEL_STATUS_OK;
}

/* ---- finalize ------------------------------------------------------------ */

/*
 * Recent NCCL frees a communicator's shared resources when the last local
 * rank destroys its comm, so destroying the ranks of one process one after
 * the other from this thread does not wait on itself.
 */
void cuda_collective_finalize(void)
{
    struct cuda_entry e;
    unsigned n = 0;

    while (cuda_registry_pop(&cuda_g.handles, CUDA_KIND_COMM, &e)) {
        (void)comm_release((struct keel_comm_s *)e.key);
        n++;
    }
    if (n)
        cuda_log(KEEL_LOG_DEBUG,
                 "cuda: finalize destroyed %u live communicators", n);
    gpu_hostcoll_finalize();
}

const keel_collective_ops cuda_collective_ops = {
    .header = KEEL_TABLE_HEADER(keel_collective_ops),
    .get_unique_id = cuda_get_unique_id,
    .comm_init_rank = cuda_comm_init_rank,
    .comm_destroy = cuda_comm_destroy,
    .comm_rank = cuda_comm_rank,
    .all_reduce = cuda_all_reduce,
    .broadcast = cuda_broadcast,
    .reduce = cuda_reduce,
    .all_gather = cuda_all_gather,
    .reduce_scatter = cuda_reduce_scatter,
    .all_to_all = cuda_all_to_all,
    .send = cuda_send,
    .recv = cuda_recv,
    .group_start = cuda_group_start,
    .group_end = cuda_group_end,
    .get_caps = cuda_get_caps,
    .all_to_allv = cuda_all_to_allv,
};
