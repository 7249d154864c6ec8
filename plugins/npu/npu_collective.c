/*
 * keel npu plugin — the collective group on HCCL (libhccl.so).
 *
 * Loading. libhccl.so (KEEL_NPU_HCCL_LIBRARY overrides the name) is
 * dlopen()ed by the first call that needs it: get_caps,
 * get_unique_id_bytes or comm_init_rank_bytes; every other call needs a
 * communicator and so comes later, so loading the plugin maps no HCCL.
 * The group and KEEL_FEATURE_COLLECTIVES are therefore always there (the
 * core reads the table when it loads the plugin, before anything says
 * whether libhccl.so exists). Without the library get_caps declares no
 * collective and every call answers NOT_SUPPORTED with the dlopen error:
 * conform's collective tests then fail, which is what they should say of
 * a device that cannot run collectives.
 *
 * Ids. HCCL's root info is HCCL_ROOT_INFO_BYTES (4,108) bytes, so get_caps
 * states id_bytes = 4108 (ABI 1.3): the fixed 128-byte get_unique_id and
 * comm_init_rank answer NOT_SUPPORTED, get_unique_id_bytes is
 * HcclGetRootInfo (with device 0's context current) and
 * comm_init_rank_bytes HcclCommInitRootInfo on the named device.
 *
 * Groups. HCCL's HcclCommInitRootInfo blocks until every rank has joined,
 * and HCCL has no NCCL-style group that would let one thread start several
 * ranks (the HcclGroupStart of recent headers is not relied on: which
 * HCCL versions have it and what it covers is not documented in the
 * headers). The plugin therefore makes groups itself: between the
 * outermost group_start and group_end of a thread, comm_init_rank_bytes
 * and the collectives are checked at once and queued; group_end runs the
 * queue with one host thread per communicator (each with its device's
 * context current), so each rank's blocking calls wait only for the other
 * ranks' threads, and returns the first failure; when a call inside the
 * group was refused, group_end runs none of it (the other ranks would
 * wait for that one forever). Consecutive send/recv of
 * one rank inside a group become one HcclBatchSendRecv, so that a ring of
 * sends does not wait on itself. Outside a group every call goes to HCCL
 * on the calling thread: one host thread per rank, as HCCL expects.
 *
 * Dtypes and ops. HCCL has no average: AVG is NOT_SUPPORTED and not
 * declared. The declared dtypes are those hccl.h lists for every
 * reducing collective (int8, int32, float16, float32, bfloat16) that the
 * device's dtype_mask also has: float32, float16, bfloat16, int32.
 * Reductions of dtypes outside hccl.h's list are refused before HCCL sees
 * them; int8 reductions and data movement in any dtype (bool as uint8)
 * are passed to HCCL but not declared.
 *
 * all_to_all and all_to_allv are HcclAlltoAllV (equal counts for
 * all_to_all), offered only when libhccl.so has it; reduce is HcclReduce,
 * likewise. broadcast is in place in HCCL: the root first copies send to
 * recv on the stream when they differ.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hccl_api.h"
#include "npu_internal.h"

#define NPU_HCCL_SONAME "libhccl.so"

static struct {
    pthread_once_t once;
    void *lib;
    char error[512];
#define NPU_HCCL_MEMBER(ret, name, params) ret(*name) params;
    NPU_HCCL_FUNCS(NPU_HCCL_MEMBER, NPU_HCCL_MEMBER)
#undef NPU_HCCL_MEMBER
} hccl = {.once = PTHREAD_ONCE_INIT};

#define HCCL hccl

static void hccl_open(void)
{
    const char *path, *why, *missing = NULL;
    void *h = npu_open("KEEL_NPU_HCCL_LIBRARY", NPU_HCCL_SONAME, &path, &why);

    if (!h) {
        snprintf(hccl.error, sizeof(hccl.error),
                 "%s could not be loaded (%s); it comes with the CANN "
                 "toolkit, or set KEEL_NPU_HCCL_LIBRARY",
                 NPU_HCCL_SONAME, why);
        return;
    }
#define NPU_HCCL_RESOLVE(ret, name, params) \
    *(void **)&hccl.name = dlsym(h, #name);
#define NPU_HCCL_RESOLVE_REQUIRED(ret, name, params) \
    NPU_HCCL_RESOLVE(ret, name, params)              \
    if (!hccl.name && !missing)                      \
        missing = #name;
    NPU_HCCL_FUNCS(NPU_HCCL_RESOLVE_REQUIRED, NPU_HCCL_RESOLVE)
#undef NPU_HCCL_RESOLVE_REQUIRED
#undef NPU_HCCL_RESOLVE
    if (missing) {
        snprintf(hccl.error, sizeof(hccl.error), "%s (%s) lacks %s",
                 NPU_HCCL_SONAME, path, missing);
        dlclose(h);
        return;
    }
    hccl.lib = h;
    npu_log(KEEL_LOG_DEBUG, "npu: loaded %s (%s) for the collective group",
            NPU_HCCL_SONAME, path);
}

static bool hccl_loaded(void)
{
    pthread_once(&hccl.once, hccl_open);
    return hccl.lib != NULL;
}

static keel_status hccl_ready(const char *call)
{
    if (hccl_loaded())
        return KEEL_STATUS_OK;
    return npu_fail(KEEL_STATUS_NOT_SUPPORTED, "%s: collectives need HCCL: %s",
                    call, hccl.error);
}

/* ---- HCCL or the in-process engine -------------------------------------------- */

/*
 * Decided once, by the first call that needs HCCL (or get_caps), as the
 * GPU plugins do with NCCL: KEEL_NPU_COLL unset or auto: HCCL when it
 * loads, else the kit's in-process engine (npu_hostcoll.c, 128-byte ids,
 * ranks of this process only); library: HCCL only (calls fail without
 * it); inprocess: the engine even when HCCL would load.
 */
enum { MODE_UNDECIDED, MODE_HCCL, MODE_INPROCESS, MODE_NONE };
static _Atomic int coll_mode = MODE_UNDECIDED;
static pthread_once_t mode_once = PTHREAD_ONCE_INIT;

static void mode_pick(void)
{
    const char *e = npu_env("KEEL_NPU_COLL");

    if (e && !strcmp(e, "inprocess")) {
        atomic_store(&coll_mode, MODE_INPROCESS);
        return;
    }
    if (hccl_loaded())
        atomic_store(&coll_mode, MODE_HCCL);
    else if (e && !strcmp(e, "library"))
        atomic_store(&coll_mode, MODE_NONE);
    else {
        atomic_store(&coll_mode, MODE_INPROCESS);
        npu_log(KEEL_LOG_INFO, "npu: collectives in-process, staged through "
                "host memory: %s", hccl.error);
    }
}

/* The engine serves this process's collectives (deciding if need be).
 * Before init nothing is decided: the HCCL path answers, with its
 * NOT_INITIALIZED / NOT_SUPPORTED. */
static bool inproc(void)
{
    if (!atomic_load(&npu_g.initialized))
        return false;
    pthread_once(&mode_once, mode_pick);
    return atomic_load(&coll_mode) == MODE_INPROCESS;
}

/* ---- errors ------------------------------------------------------------------ */

static const char *hccl_name(HcclResult r)
{
    switch (r) {
#define NPU_HCCL_CASE(name, value) case name: return #name;
    NPU_HCCL_RESULTS(NPU_HCCL_CASE)
#undef NPU_HCCL_CASE
    default:
        return "HCCL error";
    }
}

static keel_status hccl_status_of(HcclResult r)
{
    switch (r) {
    case HCCL_SUCCESS: return KEEL_STATUS_OK;
    case HCCL_E_PARA:
    case HCCL_E_PTR: return KEEL_STATUS_INVALID_ARGUMENT;
    case HCCL_E_MEMORY: return KEEL_STATUS_OUT_OF_MEMORY;
    case HCCL_E_NOT_SUPPORT: return KEEL_STATUS_NOT_SUPPORTED;
    case HCCL_E_TIMEOUT: return KEEL_STATUS_TIMEOUT;
    default: return KEEL_STATUS_DEVICE_ERROR;
    }
}

/* A failure kept as status and text, for calls run on group threads
 * (set_error must be called on the thread of the ABI call). */
struct fault {
    keel_status st;
    char msg[512];
};

static void fault_set(struct fault *f, keel_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fault_set(struct fault *f, keel_status st, const char *fmt, ...)
{
    va_list ap;

    if (f->st)
        return;
    f->st = st;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof(f->msg), fmt, ap);
    va_end(ap);
}

static void fault_hccl(struct fault *f, HcclResult r, int32_t device,
                       const char *call)
{
    const char *s = hccl.HcclGetErrorString ? hccl.HcclGetErrorString(r) : NULL;

    fault_set(f, hccl_status_of(r), "%s on npu:%d: %s (%d)%s%s", call,
              (int)device, hccl_name(r), r, s && s[0] ? ": " : "",
              s ? s : "");
}

static keel_status fault_report(const struct fault *f)
{
    return f->st ? npu_fail(f->st, "%s", f->msg) : KEEL_STATUS_OK;
}

/* ---- communicators and the work they take ---------------------------------- */

struct keel_comm_s {
    int32_t device, rank, nranks;
    HcclComm h;        /* NULL until the (possibly queued) init ran */
    atomic_bool ready; /* h is valid */
    struct keel_comm_s *next, **prev; /* the live list (live_mu) */
};

/* Every registered HCCL communicator, so finalize can destroy those the
 * caller never did. */
static struct keel_comm_s *live;
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;

static void live_add(struct keel_comm_s *c)
{
    pthread_mutex_lock(&live_mu);
    c->next = live;
    if (live)
        live->prev = &c->next;
    c->prev = &live;
    live = c;
    pthread_mutex_unlock(&live_mu);
}

static void live_remove(struct keel_comm_s *c)
{
    pthread_mutex_lock(&live_mu);
    if (c->prev) {
        *c->prev = c->next;
        if (c->next)
            c->next->prev = c->prev;
        c->prev = NULL;
    }
    pthread_mutex_unlock(&live_mu);
}

enum job_kind {
    J_INIT, J_ALL_REDUCE, J_BROADCAST, J_REDUCE, J_ALL_GATHER,
    J_REDUCE_SCATTER, J_ALL_TO_ALLV, J_SEND, J_RECV
};

static const char *const job_names[] = {
    "comm_init_rank_bytes", "all_reduce", "broadcast", "reduce",
    "all_gather", "reduce_scatter", "all_to_allv", "send", "recv"};

struct job {
    enum job_kind kind;
    struct keel_comm_s *c;
    struct keel_stream_s *s;
    void *send, *recv;
    uint64_t count, bytes; /* elements; bytes of count for broadcast */
    HcclDataType dt;
    HcclReduceOp op;
    uint32_t root; /* root, or the peer of send/recv */
    uint64_t *v;   /* all_to_allv: 4 * nranks counts and displacements */
    HcclRootInfo *id;
    struct job *next;
};

static void job_free(struct job *j)
{
    free(j->v);
    free(j->id);
    free(j);
}

/* Run one job on this thread (the device's context made current). */
static void job_run(struct job *j, struct fault *f)
{
    struct keel_comm_s *c = j->c;
    aclrtStream s = j->s ? j->s->s : NULL;
    const char *call = job_names[j->kind];
    HcclResult r = HCCL_SUCCESS;
    aclError e;

    e = ACL.aclrtSetCurrentContext(npu_g.dev[c->device].ctx);
    if (e != ACL_SUCCESS) {
        fault_set(f, npu_status_of(e), "%s: aclrtSetCurrentContext on npu:%d: "
                  "%s (%d)", call, (int)c->device, npu_acl_name(e), e);
        return;
    }
    if (j->kind != J_INIT && !atomic_load(&c->ready)) {
        fault_set(f, KEEL_STATUS_INVALID_STATE,
                  "%s on npu:%d: the communicator's initialisation failed",
                  call, (int)c->device);
        return;
    }
    switch (j->kind) {
    case J_INIT:
        r = hccl.HcclCommInitRootInfo((uint32_t)c->nranks, j->id,
                                      (uint32_t)c->rank, &c->h);
        if (r == HCCL_SUCCESS)
            atomic_store(&c->ready, true);
        call = "HcclCommInitRootInfo";
        break;
    case J_ALL_REDUCE:
        r = hccl.HcclAllReduce(j->send, j->recv, j->count, j->dt, j->op, c->h,
                               s);
        call = "HcclAllReduce";
        break;
    case J_BROADCAST:
        if (c->rank == (int32_t)j->root && j->send != j->recv && j->bytes) {
            e = ACL.aclrtMemcpyAsync(j->recv, j->bytes, j->send, j->bytes,
                                     ACL_MEMCPY_DEVICE_TO_DEVICE, s);
            if (e != ACL_SUCCESS) {
                fault_set(f, npu_status_of(e),
                          "broadcast: aclrtMemcpyAsync(send to recv) on "
                          "npu:%d: %s (%d)",
                          (int)c->device, npu_acl_name(e), e);
                return;
            }
        }
        r = hccl.HcclBroadcast(j->recv, j->count, j->dt, j->root, c->h, s);
        call = "HcclBroadcast";
        break;
    case J_REDUCE:
        r = hccl.HcclReduce(j->send, j->recv, j->count, j->dt, j->op, j->root,
                            c->h, s);
        call = "HcclReduce";
        break;
    case J_ALL_GATHER:
        r = hccl.HcclAllGather(j->send, j->recv, j->count, j->dt, c->h, s);
        call = "HcclAllGather";
        break;
    case J_REDUCE_SCATTER:
        r = hccl.HcclReduceScatter(j->send, j->recv, j->count, j->dt, j->op,
                                   c->h, s);
        call = "HcclReduceScatter";
        break;
    case J_ALL_TO_ALLV: {
        uint64_t *v = j->v;
        int n = c->nranks;
        r = hccl.HcclAlltoAllV(j->send, v, v + n, j->dt, j->recv, v + 2 * n,
                               v + 3 * n, j->dt, c->h, s);
        call = "HcclAlltoAllV";
        break;
    }
    case J_SEND:
        r = hccl.HcclSend(j->send, j->count, j->dt, j->root, c->h, s);
        call = "HcclSend";
        break;
    case J_RECV:
        r = hccl.HcclRecv(j->recv, j->count, j->dt, j->root, c->h, s);
        call = "HcclRecv";
        break;
    }
    if (r != HCCL_SUCCESS)
        fault_hccl(f, r, c->device, call);
    else if (j->s)
        npu_stream_note(j->s);
}

/* Consecutive send/recv jobs of one rank (from *jp on) as one
 * HcclBatchSendRecv; *jp moves past them. */
static void batch_run(struct job **jp, struct fault *f)
{
    struct job *first = *jp, *j;
    uint32_t n = 0, i = 0;
    HcclSendRecvItem *items;
    HcclResult r;
    aclError e;

    for (j = first; j && (j->kind == J_SEND || j->kind == J_RECV) &&
                    j->s == first->s;
         j = j->next)
        n++;
    *jp = j;
    if (n == 1) {
        job_run(first, f);
        return;
    }
    items = calloc(n, sizeof(*items));
    if (!items) {
        fault_set(f, KEEL_STATUS_OUT_OF_MEMORY, "group_end: no host memory");
        return;
    }
    for (j = first; i < n; j = j->next, i++) {
        items[i].sendRecvType = j->kind == J_SEND ? HCCL_SEND : HCCL_RECV;
        items[i].buf = j->kind == J_SEND ? j->send : j->recv;
        items[i].count = j->count;
        items[i].dataType = j->dt;
        items[i].remoteRank = j->root;
    }
    e = ACL.aclrtSetCurrentContext(npu_g.dev[first->c->device].ctx);
    if (e != ACL_SUCCESS)
        fault_set(f, npu_status_of(e), "group_end: aclrtSetCurrentContext on "
                  "npu:%d: %s (%d)", (int)first->c->device, npu_acl_name(e), e);
    else if (!atomic_load(&first->c->ready))
        fault_set(f, KEEL_STATUS_INVALID_STATE,
                  "send/recv on npu:%d: the communicator's initialisation "
                  "failed", (int)first->c->device);
    else if ((r = hccl.HcclBatchSendRecv(items, n, first->c->h,
                                         first->s->s)) != HCCL_SUCCESS)
        fault_hccl(f, r, first->c->device, "HcclBatchSendRecv");
    else
        npu_stream_note(first->s);
    free(items);
}

/* One communicator's queued jobs, run by a thread of group_end. */
struct lane {
    struct keel_comm_s *c;
    struct job *head, *tail;
    struct fault f;
    pthread_t th;
    bool started;
};

static void lane_run_all(struct lane *l)
{
    struct job *j = l->head;

    while (j && !l->f.st) {
        if ((j->kind == J_SEND || j->kind == J_RECV) && hccl.HcclBatchSendRecv) {
            batch_run(&j, &l->f);
        } else {
            job_run(j, &l->f);
            j = j->next;
        }
    }
}

static void *lane_main(void *arg)
{
    lane_run_all(arg);
    return NULL;
}

/* ---- groups ------------------------------------------------------------------ */

static _Thread_local int group_depth;
static _Thread_local struct job *group_head, *group_tail;
/* A call inside the current group failed its checks: group_end then
 * runs none of the group's calls, since the other ranks' calls would wait
 * forever for the rank whose call was refused (communicators the group
 * was to initialise stay unusable: calls on them answer INVALID_STATE). */
static _Thread_local keel_status group_refused;

static keel_status npu_group_start(void)
{
    if (inproc())
        return npu_hostcoll_ops.group_start();
    group_depth++;
    return KEEL_STATUS_OK;
}

static keel_status npu_group_end(void)
{
    if (inproc())
        return npu_hostcoll_ops.group_end();
    struct lane *lanes = NULL;
    int nl = 0, cap = 0;
    struct fault f = {0};
    struct job *j, *next;

    if (group_depth == 0)
        return npu_fail(KEEL_STATUS_INVALID_STATE,
                        "group_end without group_start");
    if (--group_depth > 0)
        return KEEL_STATUS_OK;
    if (group_refused)
        fault_set(&f, group_refused, "group_end: a call inside the group was "
                  "refused, so none of the group's calls were run (the "
                  "other ranks would have waited for it)");
    /* Split the queue by communicator, keeping each one's order. */
    for (j = group_head; j; j = next) {
        int i;

        next = j->next;
        j->next = NULL;
        if (group_refused) {
            job_free(j);
            continue;
        }
        for (i = 0; i < nl && lanes[i].c != j->c; i++)
            ;
        if (i == nl) {
            if (nl == cap) {
                struct lane *m = realloc(lanes, (size_t)(cap ? 2 * cap : 8) *
                                                    sizeof(*lanes));
                if (!m) {
                    fault_set(&f, KEEL_STATUS_OUT_OF_MEMORY,
                              "group_end: no host memory");
                    job_free(j);
                    continue;
                }
                lanes = m;
                cap = cap ? 2 * cap : 8;
            }
            memset(&lanes[nl], 0, sizeof(lanes[nl]));
            lanes[nl++].c = j->c;
        }
        if (lanes[i].tail)
            lanes[i].tail->next = j;
        else
            lanes[i].head = j;
        lanes[i].tail = j;
    }
    group_head = group_tail = NULL;
    group_refused = KEEL_STATUS_OK;
    /* One thread per communicator; a single one runs here. */
    if (nl == 1) {
        lane_run_all(&lanes[0]);
    } else if (nl > 1) {
        for (int i = 0; i < nl; i++)
            lanes[i].started = pthread_create(&lanes[i].th, NULL, lane_main,
                                              &lanes[i]) == 0;
        for (int i = 0; i < nl; i++) {
            if (lanes[i].started)
                pthread_join(lanes[i].th, NULL);
            else
                fault_set(&lanes[i].f, KEEL_STATUS_INTERNAL,
                          "group_end: could not start a thread for rank %d",
                          (int)lanes[i].c->rank);
        }
    }
    for (int i = 0; i < nl; i++) {
        if (lanes[i].f.st)
            fault_set(&f, lanes[i].f.st, "%s", lanes[i].f.msg);
        for (j = lanes[i].head; j; j = next) {
            next = j->next;
            job_free(j);
        }
    }
    free(lanes);
    return fault_report(&f);
}

/* Queue the job inside a group, else run it now on this thread. */
static keel_status submit(struct job *j)
{
    struct fault f = {0};

    if (group_depth > 0) {
        j->next = NULL;
        if (group_tail)
            group_tail->next = j;
        else
            group_head = j;
        group_tail = j;
        return KEEL_STATUS_OK;
    }
    job_run(j, &f);
    job_free(j);
    return fault_report(&f);
}

/* ---- checks ------------------------------------------------------------------ */

static keel_status comm_get(keel_comm comm, const char *call,
                            struct keel_comm_s **out)
{
    if (!comm || !npu_reg_get(&npu_g.handles, (uintptr_t)comm, 1, -1,
                              NPU_KIND_COMM, NULL))
        return npu_fail(KEEL_STATUS_INVALID_HANDLE,
                        "%s: %p is not a live communicator", call,
                        (void *)comm);
    *out = comm;
    return KEEL_STATUS_OK;
}

/* keel dtype -> HCCL's, for collectives that move data (bool as uint8). */
static bool dt_of(keel_dtype dt, HcclDataType *out)
{
    switch (dt) {
    case KEEL_F32: *out = HCCL_DATA_TYPE_FP32; return true;
    case KEEL_F64: *out = HCCL_DATA_TYPE_FP64; return true;
    case KEEL_F16: *out = HCCL_DATA_TYPE_FP16; return true;
    case KEEL_BF16: *out = HCCL_DATA_TYPE_BFP16; return true;
    case KEEL_I8: *out = HCCL_DATA_TYPE_INT8; return true;
    case KEEL_U8:
    case KEEL_BOOL: *out = HCCL_DATA_TYPE_UINT8; return true;
    case KEEL_I32: *out = HCCL_DATA_TYPE_INT32; return true;
    case KEEL_I64: *out = HCCL_DATA_TYPE_INT64; return true;
    default: return false;
    }
}

/* The dtypes hccl.h lists for all of AllReduce, Reduce and ReduceScatter. */
#define NPU_COLL_REDUCE_DTYPES                                         \
    (KEEL_DTYPE_BIT(KEEL_I8) | KEEL_DTYPE_BIT(KEEL_I32) |              \
     KEEL_DTYPE_BIT(KEEL_F16) | KEEL_DTYPE_BIT(KEEL_F32) |             \
     KEEL_DTYPE_BIT(KEEL_BF16))

static bool op_of(keel_reduce_op op, HcclReduceOp *out)
{
    switch (op) {
    case KEEL_REDUCE_SUM: *out = HCCL_REDUCE_SUM; return true;
    case KEEL_REDUCE_PROD: *out = HCCL_REDUCE_PROD; return true;
    case KEEL_REDUCE_MAX: *out = HCCL_REDUCE_MAX; return true;
    case KEEL_REDUCE_MIN: *out = HCCL_REDUCE_MIN; return true;
    default: return false;
    }
}

/* Everything a collective call checks before it is run or queued: the
 * communicator, the stream, the dtype (and op when reducing), and that
 * [send, send + nsend) and [recv, recv + nrecv) elements are memory of
 * the communicator's device. Fills the job. */
static keel_status prepare(struct job *j, keel_comm comm, keel_stream stream,
                           keel_dptr send, uint64_t nsend, keel_dptr recv,
                           uint64_t nrecv, keel_dtype dtype, int op)
{
    const char *call = job_names[j->kind];
    struct keel_comm_s *c = NULL;
    keel_status st;
    uint32_t es;

    if ((st = comm_get(comm, call, &c)))
        return st;
    if ((st = npu_enter(c->device, call)))
        return st;
    if ((st = hccl_ready(call)))
        return st;
    es = keel_dtype_size(dtype);
    if (!es || !dt_of(dtype, &j->dt))
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: dtype %d is not a "
                        "keel dtype", call, (int)dtype);
    if (op >= 0) {
        if ((unsigned)op >= KEEL_REDUCE_OP_COUNT_)
            return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                            "%s: reduce op %d is not a keel op", call, op);
        if (!op_of((keel_reduce_op)op, &j->op))
            return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                            "%s: HCCL has no average (reduce op %d)", call, op);
        if (!(NPU_COLL_REDUCE_DTYPES & KEEL_DTYPE_BIT(dtype)))
            return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                            "%s: HCCL's reductions do not take %s "
                            "(dtype %d)", call,
                            dtype == KEEL_BOOL ? "bool" : "this dtype",
                            (int)dtype);
    }
    if ((st = npu_stream_get(c->device, stream, call, &j->s)))
        return st;
    if (nsend > UINT64_MAX / es || nrecv > UINT64_MAX / es)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: count too large",
                        call);
    if (nsend && (st = npu_mem_check(c->device, send, nsend * es, "send")))
        return st;
    if (nrecv && (st = npu_mem_check(c->device, recv, nrecv * es, "recv")))
        return st;
    j->c = c;
    j->send = NPU_PTR(send);
    j->recv = NPU_PTR(recv);
    return KEEL_STATUS_OK;
}

static struct job *job_new(enum job_kind k)
{
    struct job *j = calloc(1, sizeof(*j));

    if (j)
        j->kind = k;
    else
        npu_fail(KEEL_STATUS_OUT_OF_MEMORY, "%s: no host memory",
                 job_names[k]);
    return j;
}

/* A failure inside a group spoils the group (see group_refused). */
static keel_status refused(keel_status st)
{
    if (st && group_depth > 0 && !group_refused)
        group_refused = st;
    return st;
}

/* prepare, then submit; frees the job on failure. */
static keel_status go(struct job *j, keel_status st)
{
    if (st) {
        refused(st);
        job_free(j);
        return st;
    }
    return submit(j);
}

/* ---- ids and communicators ----------------------------------------------------- */

static keel_status npu_get_unique_id(keel_comm_id *id)
{
    if (inproc())
        return npu_hostcoll_ops.get_unique_id(id);
    (void)id;
    return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                    "get_unique_id: HCCL's ids are %d bytes; use "
                    "get_unique_id_bytes (ABI 1.3)", HCCL_ROOT_INFO_BYTES);
}

static keel_status npu_comm_init_rank(int32_t device, int32_t nranks,
                                      const keel_comm_id *id, int32_t rank,
                                      keel_comm *comm)
{
    if (inproc())
        return npu_hostcoll_ops.comm_init_rank(device, nranks, id, rank, comm);
    keel_status st = npu_enter(device, "comm_init_rank");

    (void)nranks, (void)id, (void)rank, (void)comm;
    if (st) /* not initialised, or no such device: that first */
        return st;
    return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                    "comm_init_rank: HCCL's ids are %d bytes; use "
                    "comm_init_rank_bytes (ABI 1.3)", HCCL_ROOT_INFO_BYTES);
}

static keel_status npu_get_unique_id_bytes(uint8_t *id, uint32_t size)
{
    HcclRootInfo ri;
    struct fault f = {0};
    keel_status st;
    HcclResult r;

    if (inproc()) {
        if (!id || size != KEEL_COMM_ID_BYTES)
            return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                            "get_unique_id_bytes: %s (in-process ids are %d "
                            "bytes)", id ? "wrong size" : "id is NULL",
                            KEEL_COMM_ID_BYTES);
        return npu_hostcoll_ops.get_unique_id((keel_comm_id *)(void *)id);
    }
    if (!id || size != HCCL_ROOT_INFO_BYTES)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "get_unique_id_bytes: %s (HCCL's ids are %d bytes)",
                        id ? "wrong size" : "id is NULL",
                        HCCL_ROOT_INFO_BYTES);
    if ((st = hccl_ready("get_unique_id_bytes")) ||
        (st = npu_enter(0, "get_unique_id_bytes")))
        return st;
    memset(&ri, 0, sizeof(ri));
    r = hccl.HcclGetRootInfo(&ri);
    if (r != HCCL_SUCCESS) {
        fault_hccl(&f, r, 0, "HcclGetRootInfo");
        return fault_report(&f);
    }
    memcpy(id, ri.internal, HCCL_ROOT_INFO_BYTES);
    return KEEL_STATUS_OK;
}

static keel_status npu_comm_init_rank_bytes(int32_t device, int32_t nranks,
                                            const uint8_t *id, uint32_t size,
                                            int32_t rank, keel_comm *comm)
{
    struct keel_comm_s *c = NULL;
    struct job *j;
    struct npu_obj o;
    keel_status st;

    if (inproc()) {
        if (!id || size != KEEL_COMM_ID_BYTES)
            return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                            "comm_init_rank_bytes: %s (in-process ids are "
                            "%d bytes)", id ? "wrong size" : "id is NULL",
                            KEEL_COMM_ID_BYTES);
        return npu_hostcoll_ops.comm_init_rank(
            device, nranks, (const keel_comm_id *)(const void *)id, rank,
            comm);
    }
    if (!comm || !id || size != HCCL_ROOT_INFO_BYTES || nranks < 1 ||
        rank < 0 || rank >= nranks)
        return refused(npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "comm_init_rank_bytes(device %d, %d ranks, rank %d, "
                        "%u-byte id%s): invalid (ids are %d bytes)",
                        (int)device, (int)nranks, (int)rank, (unsigned)size,
                        id ? "" : " NULL", HCCL_ROOT_INFO_BYTES));
    *comm = NULL;
    if ((st = npu_enter(device, "comm_init_rank_bytes")) ||
        (st = hccl_ready("comm_init_rank_bytes")))
        return refused(st);
    c = calloc(1, sizeof(*c));
    j = job_new(J_INIT);
    if (j)
        j->id = malloc(sizeof(HcclRootInfo));
    if (!c || !j || !j->id) {
        free(c);
        if (j)
            job_free(j);
        return refused(npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                                "comm_init_rank_bytes: no host memory"));
    }
    memcpy(j->id->internal, id, HCCL_ROOT_INFO_BYTES);
    c->device = device;
    c->rank = rank;
    c->nranks = nranks;
    j->c = c;
    o = (struct npu_obj){.base = (uintptr_t)c, .size = 1, .device = device,
                         .kind = NPU_KIND_COMM};
    if (npu_reg_put(&npu_g.handles, &o) != 0) {
        free(c);
        job_free(j);
        return refused(npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                                "comm_init_rank_bytes: no host memory"));
    }
    live_add(c);
    if (group_depth > 0) {
        *comm = c;
        return submit(j);
    }
    st = submit(j);
    if (st) {
        npu_reg_drop(&npu_g.handles, (uintptr_t)c, device, NPU_KIND_COMM,
                     NULL);
        live_remove(c);
        free(c);
        return st;
    }
    *comm = c;
    return KEEL_STATUS_OK;
}

static keel_status npu_comm_destroy(keel_comm comm)
{
    if (inproc())
        return npu_hostcoll_ops.comm_destroy(comm);
    struct keel_comm_s *c = NULL;
    keel_status st;
    HcclResult r;
    struct fault f = {0};

    if ((st = comm_get(comm, "comm_destroy", &c)))
        return st;
    if (atomic_load(&npu_g.initialized) && atomic_load(&c->ready)) {
        if ((st = npu_enter(c->device, "comm_destroy")) ||
            (st = npu_device_sync(c->device, "comm_destroy")))
            return st;
    }
    npu_reg_drop(&npu_g.handles, (uintptr_t)c, c->device, NPU_KIND_COMM, NULL);
    live_remove(c);
    if (atomic_load(&c->ready) &&
        (r = hccl.HcclCommDestroy(c->h)) != HCCL_SUCCESS)
        fault_hccl(&f, r, c->device, "HcclCommDestroy");
    free(c);
    return fault_report(&f);
}

static keel_status npu_comm_rank(keel_comm comm, int32_t *rank,
                                 int32_t *nranks)
{
    if (inproc())
        return npu_hostcoll_ops.comm_rank(comm, rank, nranks);
    struct keel_comm_s *c = NULL;
    keel_status st;

    if ((st = comm_get(comm, "comm_rank", &c)))
        return st;
    if (!rank || !nranks)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "comm_rank: rank or nranks is NULL");
    *rank = c->rank;
    *nranks = c->nranks;
    return KEEL_STATUS_OK;
}

/* ---- collectives ---------------------------------------------------------------- */

static keel_status npu_all_reduce(keel_comm comm, keel_stream stream,
                                  keel_dptr send, keel_dptr recv,
                                  uint64_t count, keel_dtype dtype,
                                  keel_reduce_op op)
{
    if (inproc())
        return npu_hostcoll_ops.all_reduce(comm, stream, send, recv, count, dtype, op);
    struct job *j = job_new(J_ALL_REDUCE);

    if (!j)
        return KEEL_STATUS_OUT_OF_MEMORY;
    j->count = count;
    return go(j, prepare(j, comm, stream, send, count, recv, count, dtype,
                         (int)op));
}

static keel_status check_root(struct job *j, keel_comm comm, int32_t root)
{
    struct keel_comm_s *c = NULL;
    keel_status st = comm_get(comm, job_names[j->kind], &c);

    if (st)
        return st;
    if (root < 0 || root >= c->nranks)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "%s: root %d of %d ranks", job_names[j->kind],
                        (int)root, (int)c->nranks);
    j->root = (uint32_t)root;
    return KEEL_STATUS_OK;
}

static keel_status npu_broadcast(keel_comm comm, keel_stream stream,
                                 keel_dptr send, keel_dptr recv,
                                 uint64_t count, keel_dtype dtype,
                                 int32_t root)
{
    if (inproc())
        return npu_hostcoll_ops.broadcast(comm, stream, send, recv, count, dtype, root);
    struct job *j = job_new(J_BROADCAST);
    keel_status st;

    if (!j)
        return KEEL_STATUS_OUT_OF_MEMORY;
    j->count = count;
    st = check_root(j, comm, root);
    if (!st) {
        struct keel_comm_s *c = comm;
        st = prepare(j, comm, stream, send, c->rank == root ? count : 0, recv,
                     count, dtype, -1);
    }
    j->bytes = count * keel_dtype_size(dtype);
    return go(j, st);
}

static keel_status npu_reduce(keel_comm comm, keel_stream stream,
                              keel_dptr send, keel_dptr recv, uint64_t count,
                              keel_dtype dtype, keel_reduce_op op,
                              int32_t root)
{
    if (inproc())
        return npu_hostcoll_ops.reduce(comm, stream, send, recv, count, dtype, op, root);
    struct job *j;
    keel_status st;

    if (hccl_loaded() && !hccl.HcclReduce)
        return refused(npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                                "reduce: this libhccl.so has no HcclReduce"));
    if (!(j = job_new(J_REDUCE)))
        return refused(KEEL_STATUS_OUT_OF_MEMORY);
    j->count = count;
    st = check_root(j, comm, root);
    if (!st) {
        struct keel_comm_s *c = comm;
        st = prepare(j, comm, stream, send, count, recv,
                     c->rank == root ? count : 0, dtype, (int)op);
    }
    return go(j, st);
}

static keel_status npu_all_gather(keel_comm comm, keel_stream stream,
                                  keel_dptr send, keel_dptr recv,
                                  uint64_t count, keel_dtype dtype)
{
    if (inproc())
        return npu_hostcoll_ops.all_gather(comm, stream, send, recv, count, dtype);
    struct job *j = job_new(J_ALL_GATHER);
    struct keel_comm_s *c = NULL;
    keel_status st;

    if (!j)
        return KEEL_STATUS_OUT_OF_MEMORY;
    j->count = count;
    st = comm_get(comm, "all_gather", &c);
    if (!st)
        st = prepare(j, comm, stream, send, count, recv,
                     count * (uint64_t)c->nranks, dtype, -1);
    return go(j, st);
}

static keel_status npu_reduce_scatter(keel_comm comm, keel_stream stream,
                                      keel_dptr send, keel_dptr recv,
                                      uint64_t count, keel_dtype dtype,
                                      keel_reduce_op op)
{
    if (inproc())
        return npu_hostcoll_ops.reduce_scatter(comm, stream, send, recv, count, dtype, op);
    struct job *j = job_new(J_REDUCE_SCATTER);
    struct keel_comm_s *c = NULL;
    keel_status st;

    if (!j)
        return KEEL_STATUS_OUT_OF_MEMORY;
    j->count = count;
    st = comm_get(comm, "reduce_scatter", &c);
    if (!st)
        st = prepare(j, comm, stream, send, count * (uint64_t)c->nranks, recv,
                     count, dtype, (int)op);
    return go(j, st);
}

static keel_status a2av_checked(keel_comm comm, keel_stream stream, keel_dptr send,
                        const uint64_t *sc, const uint64_t *sd,
                        keel_dptr recv, const uint64_t *rc,
                        const uint64_t *rd, keel_dtype dtype,
                        const char *call)
{
    struct keel_comm_s *c = NULL;
    struct job *j;
    uint64_t send_end = 0, recv_end = 0;
    keel_status st;
    int n;

    if ((st = comm_get(comm, call, &c)))
        return st;
    if (hccl_loaded() && !hccl.HcclAlltoAllV)
        return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                        "%s: this libhccl.so has no HcclAlltoAllV", call);
    if (!sc || !sd || !rc || !rd)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "%s: a count or displacement array is NULL", call);
    n = c->nranks;
    for (int i = 0; i < n; i++) {
        if (sc[i] > UINT64_MAX - sd[i] || rc[i] > UINT64_MAX - rd[i])
            return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                            "%s: block %d overflows", call, i);
        if (sc[i] && sd[i] + sc[i] > send_end)
            send_end = sd[i] + sc[i];
        if (rc[i] && rd[i] + rc[i] > recv_end)
            recv_end = rd[i] + rc[i];
    }
    if (!(j = job_new(J_ALL_TO_ALLV)))
        return KEEL_STATUS_OUT_OF_MEMORY;
    j->kind = J_ALL_TO_ALLV;
    st = prepare(j, comm, stream, send, send_end, recv, recv_end, dtype, -1);
    if (!st && !(j->v = malloc(4 * (size_t)n * sizeof(uint64_t))))
        st = npu_fail(KEEL_STATUS_OUT_OF_MEMORY, "%s: no host memory", call);
    if (!st) {
        memcpy(j->v, sc, (size_t)n * sizeof(uint64_t));
        memcpy(j->v + n, sd, (size_t)n * sizeof(uint64_t));
        memcpy(j->v + 2 * n, rc, (size_t)n * sizeof(uint64_t));
        memcpy(j->v + 3 * n, rd, (size_t)n * sizeof(uint64_t));
    }
    return go(j, st);
}

static keel_status a2av(keel_comm comm, keel_stream stream, keel_dptr send,
                        const uint64_t *sc, const uint64_t *sd,
                        keel_dptr recv, const uint64_t *rc,
                        const uint64_t *rd, keel_dtype dtype,
                        const char *call)
{
    return refused(a2av_checked(comm, stream, send, sc, sd, recv, rc, rd,
                                dtype, call));
}

static keel_status npu_all_to_allv(keel_comm comm, keel_stream stream,
                                   keel_dptr send, const uint64_t *sc,
                                   const uint64_t *sd, keel_dptr recv,
                                   const uint64_t *rc, const uint64_t *rd,
                                   keel_dtype dtype)
{
    if (inproc())
        return npu_hostcoll_ops.all_to_allv(comm, stream, send, sc, sd, recv, rc, rd, dtype);
    return a2av(comm, stream, send, sc, sd, recv, rc, rd, dtype,
                "all_to_allv");
}

static keel_status npu_all_to_all(keel_comm comm, keel_stream stream,
                                  keel_dptr send, keel_dptr recv,
                                  uint64_t count, keel_dtype dtype)
{
    if (inproc())
        return npu_hostcoll_ops.all_to_all(comm, stream, send, recv, count, dtype);
    struct keel_comm_s *c = NULL;
    uint64_t *v;
    keel_status st;
    int n;

    if ((st = comm_get(comm, "all_to_all", &c)))
        return refused(st);
    n = c->nranks;
    if (n > 1 && count > UINT64_MAX / (uint64_t)n)
        return refused(npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                                "all_to_all: count too large"));
    if (!(v = malloc(2 * (size_t)n * sizeof(uint64_t))))
        return refused(npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                                "all_to_all: no host memory"));
    for (int i = 0; i < n; i++) {
        v[i] = count;
        v[n + i] = count * (uint64_t)i;
    }
    st = a2av(comm, stream, send, v, v + n, recv, v, v + n, dtype,
              "all_to_all");
    free(v);
    return st;
}

static keel_status p2p(enum job_kind k, keel_comm comm, keel_stream stream,
                       keel_dptr buf, uint64_t count, keel_dtype dtype,
                       int32_t peer)
{
    struct job *j = job_new(k);
    struct keel_comm_s *c = NULL;
    keel_status st;

    if (!j)
        return KEEL_STATUS_OUT_OF_MEMORY;
    j->count = count;
    st = comm_get(comm, job_names[k], &c);
    if (!st && (peer < 0 || peer >= c->nranks || peer == c->rank))
        st = npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                      "%s: peer %d (rank %d of %d)", job_names[k], (int)peer,
                      (int)c->rank, (int)c->nranks);
    if (!st)
        st = prepare(j, comm, stream, buf, k == J_SEND ? count : 0, buf,
                     k == J_RECV ? count : 0, dtype, -1);
    j->root = (uint32_t)peer;
    return go(j, st);
}

static keel_status npu_send(keel_comm comm, keel_stream stream, keel_dptr buf,
                            uint64_t count, keel_dtype dtype, int32_t peer)
{
    if (inproc())
        return npu_hostcoll_ops.send(comm, stream, buf, count, dtype, peer);
    return p2p(J_SEND, comm, stream, buf, count, dtype, peer);
}

static keel_status npu_recv(keel_comm comm, keel_stream stream, keel_dptr buf,
                            uint64_t count, keel_dtype dtype, int32_t peer)
{
    if (inproc())
        return npu_hostcoll_ops.recv(comm, stream, buf, count, dtype, peer);
    return p2p(J_RECV, comm, stream, buf, count, dtype, peer);
}

/* ---- capabilities ------------------------------------------------------------ */

static keel_status npu_get_caps(int32_t device, keel_collective_caps *caps)
{
    if (inproc()) {
        keel_status st = npu_hostcoll_ops.get_caps(device, caps);
        /* only the dtypes the device claims (its props) */
        if (!st && caps->struct_size >= offsetof(keel_collective_caps,
                                                 dtype_mask) + 4)
            caps->dtype_mask &= NPU_DEVICE_DTYPES;
        return st;
    }
    keel_collective_caps k;
    int32_t n = 0;
    uint32_t size;

    if (!caps || caps->struct_size < 4)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "get_caps: caps is NULL or its struct_size < 4");
    npu_device_count(&n);
    if (device < 0 || device >= n)
        return npu_fail(KEEL_STATUS_INVALID_DEVICE,
                        "get_caps: device %d does not exist (npu has %d)",
                        (int)device, (int)n);
    memset(&k, 0, sizeof(k));
    if (hccl_loaded()) {
        k.collectives = KEEL_COLL_ALL_REDUCE | KEEL_COLL_BROADCAST |
                        KEEL_COLL_ALL_GATHER | KEEL_COLL_REDUCE_SCATTER;
        if (hccl.HcclReduce)
            k.collectives |= KEEL_COLL_REDUCE;
        if (hccl.HcclAlltoAllV)
            k.collectives |= KEEL_COLL_ALL_TO_ALL | KEEL_COLL_ALL_TO_ALLV;
        /* a ring inside one group needs the batch call (see the top) */
        if (hccl.HcclBatchSendRecv)
            k.collectives |= KEEL_COLL_SEND_RECV;
        /* only what the device also computes with (device props) */
        k.dtype_mask = NPU_COLL_REDUCE_DTYPES & ~KEEL_DTYPE_BIT(KEEL_I8);
        k.reduce_ops = KEEL_REDUCE_OP_BIT(KEEL_REDUCE_SUM) |
                       KEEL_REDUCE_OP_BIT(KEEL_REDUCE_PROD) |
                       KEEL_REDUCE_OP_BIT(KEEL_REDUCE_MAX) |
                       KEEL_REDUCE_OP_BIT(KEEL_REDUCE_MIN);
    }
    k.timeout_ms = 0; /* HCCL's own connect timeout is not declared */
    k.id_bytes = HCCL_ROOT_INFO_BYTES;
    size = caps->struct_size < sizeof(k) ? caps->struct_size
                                         : (uint32_t)sizeof(k);
    k.struct_size = size;
    memcpy(caps, &k, size);
    return KEEL_STATUS_OK;
}

void npu_collective_finalize(void)
{
    pthread_mutex_lock(&live_mu);
    while (live) {
        struct keel_comm_s *c = live;
        live = c->next;
        if (live)
            live->prev = &live;
        if (atomic_load(&c->ready) && hccl.lib && npu_use(c->device) == 0) {
            HcclResult r = hccl.HcclCommDestroy(c->h);
            if (r != HCCL_SUCCESS)
                npu_log(KEEL_LOG_WARN,
                        "npu: finalize: HcclCommDestroy of a communicator "
                        "left alive (npu:%d, rank %d) returned %d",
                        (int)c->device, (int)c->rank, (int)r);
        }
        free(c);
    }
    pthread_mutex_unlock(&live_mu);
}

void npu_collective_unload(void)
{
    if (hccl.lib)
        dlclose(hccl.lib);
    hccl.lib = NULL;
}

const keel_collective_ops npu_collective_ops = {
    .header = KEEL_TABLE_HEADER(keel_collective_ops),
    .get_unique_id = npu_get_unique_id,
    .comm_init_rank = npu_comm_init_rank,
    .comm_destroy = npu_comm_destroy,
    .comm_rank = npu_comm_rank,
    .all_reduce = npu_all_reduce,
    .broadcast = npu_broadcast,
    .reduce = npu_reduce,
    .all_gather = npu_all_gather,
    .reduce_scatter = npu_reduce_scatter,
    .all_to_all = npu_all_to_all,
    .send = npu_send,
    .recv = npu_recv,
    .group_start = npu_group_start,
    .group_end = npu_group_end,
    .get_caps = npu_get_caps,
    .get_unique_id_bytes = npu_get_unique_id_bytes,
    .comm_init_rank_bytes = npu_comm_init_rank_bytes,
    .all_to_allv = npu_all_to_allv,
};
