/*
 * keel Cambricon MLU plugin — the collective group, on CNCL (libcncl.so)
 * or, without it, on the kit's in-process engine.
 *
 * Which. KEEL_MLU_COLL picks once, at the first collective call after
 * init (get_caps before init answers for the CNCL path): unset or auto:
 * CNCL when libcncl.so loads (KEEL_MLU_CNCL_LIBRARY overrides the name),
 * else the engine; library: CNCL only (without it get_caps declares no
 * collective and every call answers NOT_SUPPORTED naming the dlopen
 * error); inprocess: the engine, and libcncl.so is never opened. The
 * engine (keel/kit_hostcoll.h) stages every rank's data through host
 * memory with the synchronous CNRT copies below: 128-byte ids, ranks of
 * this process only, waits bounded by KEEL_MLU_COLL_TIMEOUT_MS (default
 * 60000).
 *
 * Ids. CNCL's clique id is struct cnclCliqueId, 136 bytes (128 data bytes
 * and a 64-bit hash), so get_caps states id_bytes = 136 (ABI 1.3): the
 * fixed 128-byte get_unique_id and comm_init_rank answer NOT_SUPPORTED,
 * get_unique_id_bytes is cnclGetCliqueId and comm_init_rank_bytes
 * cnclInitComms on the named device.
 *
 * Groups. cncl.h allows one cnclInitComms per clique id and process, and
 * documents cnclGroupStart/End for merging send/recv only. So the plugin
 * makes groups itself: between the outermost group_start and group_end of
 * a thread, comm_init_rank_bytes and the collectives are checked at once
 * and queued; group_end first initialises the queued ranks of each clique
 * id with ONE cnclInitComms (num_comm = the ranks of this process), then
 * runs the rest with one host thread per communicator, so that each
 * rank's blocking calls wait only for the other ranks' threads; a run of
 * send/recv of one communicator is bracketed by cnclGroupStart/End, so a
 * ring of sends does not wait on itself. When a call inside the group was
 * refused, group_end runs none of the group (the other ranks would wait
 * for it forever). Outside a group every call goes to CNCL on the calling
 * thread. A rank initialised outside a group by its own thread (one
 * cnclInitComms per rank, as with one process per rank) works over the
 * stand-in; whether real CNCL accepts several such calls with one clique
 * id in one process is not known (see docs/mlu-plugin.md).
 *
 * Dtypes and ops. CNCL has no average: AVG is NOT_SUPPORTED and not
 * declared. CNCL has no 64-bit float: float64 moves as uint64 (broadcast,
 * gathers, all-to-all, send/recv) and its reductions are refused. Declared
 * (get_caps) are float32, float16, bfloat16 and int32, whose reductions
 * cncl.h's callers use; int8, int64 and uint8 reductions are passed to
 * CNCL but not declared, bool moves as uint8 and is never reduced.
 *
 * Optional entry points. reduce needs cnclReduce, all_to_all cnclAlltoAll
 * (or cnclAlltoAllv), all_to_allv cnclAlltoAllv, send/recv cnclSend,
 * cnclRecv and the group calls: a libcncl.so without one does not declare
 * that collective and answers NOT_SUPPORTED, so that the core composes
 * it (all_to_allv from send/recv) or reports it. All-to-all in place and
 * all_to_allv blocks over 2^32 - 1 elements (CNCL's counts are uint32_t)
 * are refused with NOT_SUPPORTED.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/kit.h>
#include <keel/kit_hostcoll.h>

#include "cncl_api.h"
#include "mlu_internal.h"

/* ---- the in-process engine ------------------------------------------------- */

static keel_status hc_fail(keel_status st, const char *msg)
{
    return mlu_err(st, "%s", msg);
}

/* get_caps may come before init: only the device range. */
static keel_status hc_device(int32_t device, const char *call)
{
    int32_t n = mlu.nvisible ? mlu.nvisible : mlu.count;

    if (device >= 0 && device < n)
        return KEEL_STATUS_OK;
    return mlu_err(KEEL_STATUS_INVALID_DEVICE, "%s: no device %d (mlu has %d)",
                   call, (int)device, (int)n);
}

static keel_status hc_wait(int32_t device, keel_stream stream, const char *call)
{
    struct keel_stream_s *s;
    keel_status st = mlu_bind(device);

    if (!st)
        st = mlu_queue_of(device, stream, call, &s);
    return st ? st : MLU_RT(mlu.rt.cnrtQueueSync(s->q), device,
                            "cnrtQueueSync (%s)", call);
}

/* The engine may run a rank's copy on any thread: bind the device first. */
static keel_status hc_copy(int32_t device, void *dst, void *src,
                           uint64_t bytes, cnrtMemTransDir_t dir, char *msg,
                           size_t msgn)
{
    cnrtRet_t r = mlu.rt.cnrtSetDevice(mlu.dev[device].ordinal);

    if (r == cnrtSuccess)
        r = mlu.rt.cnrtSyncDevice();
    if (r == cnrtSuccess)
        r = mlu.rt.cnrtMemcpy(dst, src, (size_t)bytes, dir);
    if (r == cnrtSuccess)
        return KEEL_STATUS_OK;
    snprintf(msg, msgn, "cnrtMemcpy(%" PRIu64 " bytes) on mlu:%d: %s (%d)",
             bytes, (int)device, mlu_code_name(r), (int)r);
    return mlu_status_of(r) == KEEL_STATUS_OUT_OF_MEMORY
               ? KEEL_STATUS_OUT_OF_MEMORY
               : KEEL_STATUS_DEVICE_ERROR;
}

static keel_status hc_read(int32_t device, void *dst, keel_dptr src,
                           uint64_t bytes, char *msg, size_t msgn)
{
    return hc_copy(device, dst, MLU_PTR(src), bytes, cnrtMemcpyDevToHost, msg,
                   msgn);
}

static keel_status hc_write(int32_t device, keel_dptr dst, const void *src,
                            uint64_t bytes, char *msg, size_t msgn)
{
    return hc_copy(device, MLU_PTR(dst), (void *)src, bytes,
                   cnrtMemcpyHostToDev, msg, msgn);
}

static const keel_kit_hostcoll mlu_hc = {
    .plugin = "mlu",
    .device_type = "mlu",
    .timeout_env = "KEEL_MLU_COLL_TIMEOUT_MS",
    .env = mlu_getenv,
    .fail = hc_fail,
    .enter = mlu_enter,
    .check_device = hc_device,
    .stream_wait = hc_wait,
    .check_buffer = mlu_check_range,
    .read = hc_read,
    .write = hc_write,
};

/* ---- loading libcncl.so ---------------------------------------------------- */

#define MLU_CNCL_SONAME "libcncl.so"

static struct {
    pthread_once_t once;
    void *lib;
    char error[512];
#define MLU_CNCL_SLOT(ret, name, params) ret(*name) params;
    MLU_CNCL_FUNCS(MLU_CNCL_SLOT, MLU_CNCL_SLOT)
#undef MLU_CNCL_SLOT
} cncl = {.once = PTHREAD_ONCE_INIT};

static void cncl_open(void)
{
    const char *path, *why, *gap = NULL;
    void *h = mlu_dlopen("KEEL_MLU_CNCL_LIBRARY", MLU_CNCL_SONAME, &path, &why);

    if (!h) {
        snprintf(cncl.error, sizeof(cncl.error),
                 "%s could not be loaded (%s); it comes with Neuware, or set "
                 "KEEL_MLU_CNCL_LIBRARY", MLU_CNCL_SONAME, why);
        return;
    }
#define MLU_CNCL_OPT(ret, name, params) *(void **)&cncl.name = dlsym(h, #name);
#define MLU_CNCL_REQ(ret, name, params) \
    MLU_CNCL_OPT(ret, name, params)     \
    if (!cncl.name && !gap)             \
        gap = #name;
    MLU_CNCL_FUNCS(MLU_CNCL_REQ, MLU_CNCL_OPT)
#undef MLU_CNCL_REQ
#undef MLU_CNCL_OPT
    if (gap) {
        snprintf(cncl.error, sizeof(cncl.error), "%s (%s) has no %s",
                 MLU_CNCL_SONAME, path, gap);
        dlclose(h);
        return;
    }
    cncl.lib = h;
    mlu_note(KEEL_LOG_DEBUG, "mlu: loaded %s (%s) for the collective group",
             MLU_CNCL_SONAME, path);
}

static bool cncl_loaded(void)
{
    pthread_once(&cncl.once, cncl_open);
    return cncl.lib != NULL;
}

static keel_status cncl_ready(const char *call)
{
    if (cncl_loaded())
        return KEEL_STATUS_OK;
    return mlu_err(KEEL_STATUS_NOT_SUPPORTED, "%s: collectives need CNCL: %s",
                   call, cncl.error);
}

static bool have_p2p(void)
{
    return cncl.cnclSend && cncl.cnclRecv && cncl.cnclGroupStart &&
           cncl.cnclGroupEnd;
}

/* ---- CNCL or the engine ------------------------------------------------------ */

enum { MODE_CNCL = 1, MODE_INPROCESS, MODE_NONE };
static _Atomic int coll_mode;
static pthread_once_t mode_once = PTHREAD_ONCE_INIT;

static void mode_pick(void)
{
    const char *e = mlu_getenv("KEEL_MLU_COLL");

    if (e && !strcmp(e, "inprocess")) {
        atomic_store(&coll_mode, MODE_INPROCESS);
        return;
    }
    if (e && *e && strcmp(e, "auto") && strcmp(e, "library"))
        mlu_note(KEEL_LOG_WARN, "mlu: KEEL_MLU_COLL=%s is not auto, library "
                 "or inprocess; taken as auto", e);
    if (cncl_loaded())
        atomic_store(&coll_mode, MODE_CNCL);
    else if (e && !strcmp(e, "library"))
        atomic_store(&coll_mode, MODE_NONE);
    else {
        atomic_store(&coll_mode, MODE_INPROCESS);
        mlu_note(KEEL_LOG_INFO, "mlu: collectives in-process, staged through "
                 "host memory: %s", cncl.error);
    }
}

/* The engine serves this process's collectives (deciding if need be).
 * Before init nothing is decided: the CNCL path answers, with its
 * NOT_INITIALIZED / NOT_SUPPORTED. */
static bool inproc(void)
{
    const char *e = mlu_getenv("KEEL_MLU_COLL");

    if (e && !strcmp(e, "inprocess")) /* never opens libcncl.so */
        return true;
    if (!atomic_load(&mlu.up))
        return false;
    pthread_once(&mode_once, mode_pick);
    return atomic_load(&coll_mode) == MODE_INPROCESS;
}

/* ---- errors ------------------------------------------------------------------- */

static const char *cncl_name(cnclResult_t r)
{
    switch ((int)r) {
#define MLU_CNCL_CASE(name, value) case value: return #name;
    MLU_CNCL_RESULTS(MLU_CNCL_CASE)
#undef MLU_CNCL_CASE
    default:
        return "CNCL error";
    }
}

static keel_status cncl_status_of(cnclResult_t r)
{
    switch (r) {
    case CNCL_RET_SUCCESS: return KEEL_STATUS_OK;
    case CNCL_RET_ERR_ARGUMENTS:
    case CNCL_RET_ERR_NULL_POINTER: return KEEL_STATUS_INVALID_ARGUMENT;
    case CNCL_RET_ERR_UNSUPPORTED: return KEEL_STATUS_NOT_SUPPORTED;
    case CNCL_RET_ERR_SYS_MALLOC:
    case CNCL_RET_ERR_CNRT_MALLOC:
    case CNCL_RET_ERR_MLU_ALLOCATE: return KEEL_STATUS_OUT_OF_MEMORY;
    case CNCL_RET_ERR_NOT_INIT:
    case CNCL_RET_ERR_REINIT: return KEEL_STATUS_INVALID_STATE;
    case CNCL_RET_ASYNC_IN_PROGRESS: return KEEL_STATUS_NOT_READY;
    default: return KEEL_STATUS_DEVICE_ERROR;
    }
}

/* A failure kept as status and text, for calls run on group threads
 * (the host's set_error belongs to the thread of the ABI call). */
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

static void fault_cncl(struct fault *f, cnclResult_t r, int32_t device,
                       const char *call)
{
    const char *s = cncl.cnclGetErrorStr ? cncl.cnclGetErrorStr(r) : NULL;

    fault_set(f, cncl_status_of(r), "%s on mlu:%d: %s (%#x)%s%s", call,
              (int)device, cncl_name(r), (unsigned)r, s && s[0] ? ": " : "",
              s ? s : "");
}

static keel_status fault_report(const struct fault *f)
{
    return f->st ? mlu_err(f->st, "%s", f->msg) : KEEL_STATUS_OK;
}

/* ---- communicators ------------------------------------------------------------ */

struct keel_comm_s {
    int32_t device, rank, nranks;
    cnclComm_t h;      /* NULL until the (possibly queued) init ran */
    atomic_bool ready; /* h is valid */
    struct keel_comm_s *next;
};

/* The live communicators of the CNCL path. */
static pthread_mutex_t comms_mu = PTHREAD_MUTEX_INITIALIZER;
static struct keel_comm_s *comms;

static void comm_keep(struct keel_comm_s *c)
{
    pthread_mutex_lock(&comms_mu);
    c->next = comms;
    comms = c;
    pthread_mutex_unlock(&comms_mu);
}

/* Unlink c; false when it was not live. */
static bool comm_drop(struct keel_comm_s *c)
{
    struct keel_comm_s **l;
    bool found = false;

    pthread_mutex_lock(&comms_mu);
    for (l = &comms; *l; l = &(*l)->next)
        if (*l == c) {
            *l = c->next;
            found = true;
            break;
        }
    pthread_mutex_unlock(&comms_mu);
    return found;
}

static keel_status comm_get(keel_comm comm, const char *call,
                            struct keel_comm_s **out)
{
    bool found = false;

    pthread_mutex_lock(&comms_mu);
    for (struct keel_comm_s *c = comms; c && !found; c = c->next)
        found = c == comm;
    pthread_mutex_unlock(&comms_mu);
    if (!comm || !found)
        return mlu_err(KEEL_STATUS_INVALID_HANDLE,
                       "%s: %p is not a live communicator", call,
                       (void *)comm);
    *out = comm;
    return KEEL_STATUS_OK;
}

/* ---- work ------------------------------------------------------------------- */

enum job_kind {
    J_INIT, J_ALL_REDUCE, J_BROADCAST, J_REDUCE, J_ALL_GATHER,
    J_REDUCE_SCATTER, J_ALL_TO_ALL, J_ALL_TO_ALLV, J_SEND, J_RECV
};

static const char *const job_names[] = {
    "comm_init_rank_bytes", "all_reduce", "broadcast", "reduce",
    "all_gather", "reduce_scatter", "all_to_all", "all_to_allv", "send",
    "recv"};

struct job {
    enum job_kind kind;
    struct keel_comm_s *c;
    struct keel_stream_s *s;
    char *send, *recv;
    uint64_t count;
    uint32_t es; /* element size */
    cnclDataType_t dt;
    cnclReduceOp_t op;
    int root; /* root, or the peer of send/recv */
    uint64_t *v; /* all_to_allv: 4 * nranks counts and displacements */
    struct cnclCliqueId id;
    struct job *next;
};

static struct job *job_new(enum job_kind k)
{
    struct job *j = calloc(1, sizeof(*j));

    if (j)
        j->kind = k;
    else
        mlu_err(KEEL_STATUS_OUT_OF_MEMORY, "%s: no host memory", job_names[k]);
    return j;
}

static void job_free(struct job *j)
{
    free(j->v);
    free(j);
}

static bool bind_device(int32_t device, const char *call, struct fault *f)
{
    cnrtRet_t r = mlu.rt.cnrtSetDevice(mlu.dev[device].ordinal);

    if (r == cnrtSuccess)
        return true;
    fault_set(f, mlu_status_of(r), "%s: cnrtSetDevice on mlu:%d: %s (%d)",
              call, (int)device, mlu_code_name(r), (int)r);
    return false;
}

/* all_to_allv as CNCL takes it: a pointer, count and type per peer. */
static cnclResult_t run_alltoallv(struct job *j)
{
    int n = j->c->nranks;
    const uint64_t *sc = j->v, *sd = j->v + n, *rc = j->v + 2 * n,
                   *rd = j->v + 3 * n;
    const void **sb = calloc((size_t)n, sizeof(*sb));
    void **rb = calloc((size_t)n, sizeof(*rb));
    uint32_t *scnt = calloc((size_t)n, sizeof(*scnt));
    uint32_t *rcnt = calloc((size_t)n, sizeof(*rcnt));
    cnclDataType_t *types = calloc((size_t)n, sizeof(*types));
    cnclResult_t r = CNCL_RET_ERR_SYS_MALLOC;

    if (sb && rb && scnt && rcnt && types) {
        for (int i = 0; i < n; i++) {
            sb[i] = j->send + sd[i] * j->es;
            rb[i] = j->recv + rd[i] * j->es;
            scnt[i] = (uint32_t)sc[i];
            rcnt[i] = (uint32_t)rc[i];
            types[i] = j->dt;
        }
        r = cncl.cnclAlltoAllv(sb, scnt, types, rb, rcnt, types, j->c->h,
                               j->s->q);
    }
    free(sb);
    free(rb);
    free(scnt);
    free(rcnt);
    free(types);
    return r;
}

/* Run one job on this thread. */
static void job_run(struct job *j, struct fault *f)
{
    struct keel_comm_s *c = j->c;
    cnrtQueue_t q = j->s ? j->s->q : NULL;
    const char *call = job_names[j->kind];
    cnclResult_t r = CNCL_RET_SUCCESS;

    if (!bind_device(c->device, call, f))
        return;
    if (j->kind != J_INIT && !atomic_load(&c->ready)) {
        fault_set(f, KEEL_STATUS_INVALID_STATE,
                  "%s on mlu:%d: the communicator's initialisation failed",
                  call, (int)c->device);
        return;
    }
    switch (j->kind) {
    case J_INIT: {
        int dev = mlu.dev[c->device].ordinal, rank = c->rank;
        r = cncl.cnclInitComms(&c->h, 1, &dev, &rank, c->nranks, &j->id);
        if (r == CNCL_RET_SUCCESS)
            atomic_store(&c->ready, true);
        call = "cnclInitComms";
        break;
    }
    case J_ALL_REDUCE:
        r = cncl.cnclAllReduce(j->send, j->recv, (size_t)j->count, j->dt,
                               j->op, c->h, q);
        call = "cnclAllReduce";
        break;
    case J_BROADCAST:
        /* off the root, send is not read: pass recv */
        r = cncl.cnclBroadcast(c->rank == j->root ? j->send : j->recv,
                               j->recv, (size_t)j->count, j->dt, j->root,
                               c->h, q);
        call = "cnclBroadcast";
        break;
    case J_REDUCE:
        r = cncl.cnclReduce(j->send, j->recv, (size_t)j->count, j->dt, j->op,
                            j->root, c->h, q);
        call = "cnclReduce";
        break;
    case J_ALL_GATHER:
        r = cncl.cnclAllGather(j->send, j->recv, (size_t)j->count, j->dt,
                               c->h, q);
        call = "cnclAllGather";
        break;
    case J_REDUCE_SCATTER:
        r = cncl.cnclReduceScatter(j->send, j->recv, (size_t)j->count, j->dt,
                                   j->op, c->h, q);
        call = "cnclReduceScatter";
        break;
    case J_ALL_TO_ALL:
        r = cncl.cnclAlltoAll(j->send, j->recv, (size_t)j->count, j->dt, c->h,
                              q);
        call = "cnclAlltoAll";
        break;
    case J_ALL_TO_ALLV:
        r = run_alltoallv(j);
        call = "cnclAlltoAllv";
        break;
    case J_SEND:
        r = cncl.cnclSend(j->send, (size_t)j->count, j->dt, j->root, c->h, q);
        call = "cnclSend";
        break;
    case J_RECV:
        r = cncl.cnclRecv(j->recv, (size_t)j->count, j->dt, j->root, c->h, q);
        call = "cnclRecv";
        break;
    }
    if (r != CNCL_RET_SUCCESS)
        fault_cncl(f, r, c->device, call);
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
        cnclResult_t r;

        if (j->kind != J_SEND && j->kind != J_RECV) {
            job_run(j, &l->f);
            j = j->next;
            continue;
        }
        /* a run of send/recv as one CNCL group */
        if (!bind_device(l->c->device, "group_end", &l->f))
            return;
        if ((r = cncl.cnclGroupStart()) != CNCL_RET_SUCCESS) {
            fault_cncl(&l->f, r, l->c->device, "cnclGroupStart");
            return;
        }
        for (; j && (j->kind == J_SEND || j->kind == J_RECV) && !l->f.st;
             j = j->next)
            job_run(j, &l->f);
        r = cncl.cnclGroupEnd();
        if (r != CNCL_RET_SUCCESS)
            fault_cncl(&l->f, r, l->c->device, "cnclGroupEnd");
    }
}

static void *lane_main(void *arg)
{
    lane_run_all(arg);
    return NULL;
}

/* The queued inits of one clique id in one cnclInitComms (cncl.h: one
 * call per id and process). */
static void init_batch(struct job **inits, int n, struct fault *f)
{
    cnclComm_t *hs = calloc((size_t)n, sizeof(*hs));
    int *devs = calloc((size_t)n, sizeof(*devs));
    int *ranks = calloc((size_t)n, sizeof(*ranks));
    cnclResult_t r;

    if (!hs || !devs || !ranks) {
        fault_set(f, KEEL_STATUS_OUT_OF_MEMORY, "group_end: no host memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        devs[i] = mlu.dev[inits[i]->c->device].ordinal;
        ranks[i] = inits[i]->c->rank;
    }
    if (!bind_device(inits[0]->c->device, "group_end", f))
        goto out;
    r = cncl.cnclInitComms(hs, n, devs, ranks, inits[0]->c->nranks,
                           &inits[0]->id);
    if (r != CNCL_RET_SUCCESS) {
        fault_cncl(f, r, inits[0]->c->device, "cnclInitComms");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        inits[i]->c->h = hs[i];
        atomic_store(&inits[i]->c->ready, true);
    }
out:
    free(hs);
    free(devs);
    free(ranks);
}

/* ---- groups ------------------------------------------------------------------ */

static _Thread_local int group_depth;
static _Thread_local struct job *group_head, *group_tail;
/* A call inside the current group failed its checks: group_end then runs
 * none of the group (communicators it was to initialise stay unusable:
 * calls on them answer INVALID_STATE). */
static _Thread_local keel_status group_refused;

static keel_status refused(keel_status st)
{
    if (st && group_depth > 0 && !group_refused)
        group_refused = st;
    return st;
}

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

/* checked (st OK) then submitted; freed on failure */
static keel_status go(struct job *j, keel_status st)
{
    if (st) {
        refused(st);
        job_free(j);
        return st;
    }
    return submit(j);
}

static keel_status mlu_group_start(void)
{
    if (inproc())
        return keel_kit_hc_group_start(&mlu_hc);
    group_depth++;
    return KEEL_STATUS_OK;
}

/* Run the queued inits, clique id by clique id; they leave the list. */
static void run_inits(struct job **list, struct fault *f)
{
    struct job **l = list, *inits_head = NULL, **it = &inits_head;

    while (*l) {
        struct job *j = *l;
        if (j->kind == J_INIT) {
            *l = j->next;
            j->next = NULL;
            *it = j;
            it = &j->next;
        } else {
            l = &j->next;
        }
    }
    while (inits_head) {
        struct job *batch[MLU_MAX_DEVICES * 4], **p = &inits_head;
        int n = 0;
        struct job *first = inits_head;

        while (*p) {
            struct job *j = *p;
            if (n < (int)(sizeof(batch) / sizeof(batch[0])) &&
                !memcmp(&j->id, &first->id, sizeof(j->id)) &&
                j->c->nranks == first->c->nranks) {
                *p = j->next;
                batch[n++] = j;
            } else {
                p = &j->next;
            }
        }
        if (!f->st)
            init_batch(batch, n, f);
        for (int i = 0; i < n; i++)
            job_free(batch[i]);
    }
}

static keel_status mlu_group_end(void)
{
    if (inproc())
        return keel_kit_hc_group_end(&mlu_hc);
    struct lane *lanes = NULL;
    int nl = 0, cap = 0;
    struct fault f = {0};
    struct job *j, *next, *list;

    if (group_depth == 0)
        return mlu_err(KEEL_STATUS_INVALID_STATE,
                       "group_end without group_start");
    if (--group_depth > 0)
        return KEEL_STATUS_OK;
    list = group_head;
    group_head = group_tail = NULL;
    if (group_refused) {
        fault_set(&f, group_refused, "group_end: a call inside the group was "
                  "refused, so none of the group's calls were run (the "
                  "other ranks would have waited for it)");
        group_refused = KEEL_STATUS_OK;
        for (j = list; j; j = next) {
            next = j->next;
            job_free(j);
        }
        return fault_report(&f);
    }
    run_inits(&list, &f);
    /* Split the rest by communicator, keeping each one's order. */
    for (j = list; j; j = next) {
        int i;

        next = j->next;
        j->next = NULL;
        if (f.st) {
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
    if (f.st) {
        /* an init failed: the lanes are freed below without running */
    } else if (nl == 1) {
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
    /* CNRT's current device is the calling thread's business */
    return fault_report(&f);
}

/* ---- checks ------------------------------------------------------------------ */

/* keel dtype -> CNCL's, for collectives that move data: float64 as uint64
 * and bool as uint8, which move the same bytes. */
static bool dt_of(keel_dtype dt, cnclDataType_t *out)
{
    switch (dt) {
    case KEEL_F32: *out = cnclFloat32; return true;
    case KEEL_F64: *out = cnclUint64; return true;
    case KEEL_F16: *out = cnclFloat16; return true;
    case KEEL_BF16: *out = cnclBfloat16; return true;
    case KEEL_I8: *out = cnclInt8; return true;
    case KEEL_U8:
    case KEEL_BOOL: *out = cnclUint8; return true;
    case KEEL_I32: *out = cnclInt32; return true;
    case KEEL_I64: *out = cnclInt64; return true;
    default: return false;
    }
}

/* Declared in get_caps (see the top). */
#define MLU_CNCL_DTYPES                                                  \
    (KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F16) |               \
     KEEL_DTYPE_BIT(KEEL_BF16) | KEEL_DTYPE_BIT(KEEL_I32))
/* Reductions passed to CNCL: those, and int8, uint8, int64. */
#define MLU_CNCL_REDUCE_DTYPES                                           \
    (MLU_CNCL_DTYPES | KEEL_DTYPE_BIT(KEEL_I8) | KEEL_DTYPE_BIT(KEEL_U8) | \
     KEEL_DTYPE_BIT(KEEL_I64))

static bool op_of(keel_reduce_op op, cnclReduceOp_t *out)
{
    switch (op) {
    case KEEL_REDUCE_SUM: *out = cnclSum; return true;
    case KEEL_REDUCE_PROD: *out = cnclProd; return true;
    case KEEL_REDUCE_MAX: *out = cnclMax; return true;
    case KEEL_REDUCE_MIN: *out = cnclMin; return true;
    default: return false;
    }
}

/* Everything a collective checks before it is run or queued: the
 * communicator, the stream, the dtype (and op when reducing, op >= 0), and
 * that [send, +nsend) and [recv, +nrecv) elements are memory of the
 * communicator's device. Fills the job. */
static keel_status prepare(struct job *j, keel_comm comm, keel_stream stream,
                           keel_dptr send, uint64_t nsend, keel_dptr recv,
                           uint64_t nrecv, keel_dtype dtype, int op)
{
    const char *call = job_names[j->kind];
    struct keel_comm_s *c = NULL;
    keel_status st;
    uint32_t es;

    if ((st = comm_get(comm, call, &c)) || (st = mlu_enter(c->device, call)) ||
        (st = cncl_ready(call)))
        return st;
    es = (unsigned)dtype < KEEL_DTYPE_COUNT_ ? keel_dtype_size(dtype) : 0;
    if (!es || !dt_of(dtype, &j->dt))
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: dtype %d is not a keel dtype", call, (int)dtype);
    if (op >= 0) {
        if ((unsigned)op >= KEEL_REDUCE_OP_COUNT_)
            return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: reduce op %d is not a keel op", call, op);
        if (!op_of((keel_reduce_op)op, &j->op))
            return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                           "%s: CNCL has no average (reduce op %d)", call, op);
        if (!(MLU_CNCL_REDUCE_DTYPES & KEEL_DTYPE_BIT(dtype)))
            return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                           "%s: CNCL does not reduce %s (dtype %d)", call,
                           dtype == KEEL_BOOL  ? "bool"
                           : dtype == KEEL_F64 ? "float64 (it has no 64-bit "
                                                 "float)"
                                               : "this dtype",
                           (int)dtype);
    }
    if ((st = mlu_queue_of(c->device, stream, call, &j->s)))
        return st;
    if (nsend > UINT64_MAX / es || nrecv > UINT64_MAX / es)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT, "%s: count too large",
                       call);
    if (nsend && (st = mlu_check_range(c->device, send, nsend * es, call)))
        return st;
    if (nrecv && (st = mlu_check_range(c->device, recv, nrecv * es, call)))
        return st;
    j->c = c;
    j->es = es;
    j->send = MLU_PTR(send);
    j->recv = MLU_PTR(recv);
    return KEEL_STATUS_OK;
}

static keel_status check_root(struct job *j, keel_comm comm, int32_t root)
{
    struct keel_comm_s *c = NULL;
    keel_status st = comm_get(comm, job_names[j->kind], &c);

    if (st)
        return st;
    if (root < 0 || root >= c->nranks)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT, "%s: root %d of %d ranks",
                       job_names[j->kind], (int)root, (int)c->nranks);
    j->root = root;
    return KEEL_STATUS_OK;
}

/* ---- ids and communicators ----------------------------------------------------- */

static keel_status mlu_get_unique_id(keel_comm_id *id)
{
    if (inproc())
        return keel_kit_hc_get_unique_id(&mlu_hc, id);
    (void)id;
    return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                   "get_unique_id: CNCL's clique ids are %u bytes; use "
                   "get_unique_id_bytes (ABI 1.3)", MLU_CNCL_ID_BYTES);
}

static keel_status mlu_comm_init_rank(int32_t device, int32_t nranks,
                                      const keel_comm_id *id, int32_t rank,
                                      keel_comm *comm)
{
    if (inproc())
        return keel_kit_hc_comm_init_rank(&mlu_hc, device, nranks, id, rank,
                                          comm);
    keel_status st = mlu_enter(device, "comm_init_rank");

    (void)nranks, (void)id, (void)rank, (void)comm;
    if (st)
        return st;
    return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                   "comm_init_rank: CNCL's clique ids are %u bytes; use "
                   "comm_init_rank_bytes (ABI 1.3)", MLU_CNCL_ID_BYTES);
}

static keel_status mlu_get_unique_id_bytes(uint8_t *id, uint32_t size)
{
    struct cnclCliqueId ci;
    struct fault f = {0};
    keel_status st;
    cnclResult_t r;

    if (inproc()) {
        if (!id || size != KEEL_COMM_ID_BYTES)
            return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                           "get_unique_id_bytes: %s (in-process ids are %d "
                           "bytes)", id ? "wrong size" : "id is NULL",
                           KEEL_COMM_ID_BYTES);
        return keel_kit_hc_get_unique_id(&mlu_hc, (keel_comm_id *)(void *)id);
    }
    if (!id || size != MLU_CNCL_ID_BYTES)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "get_unique_id_bytes: %s (CNCL's clique ids are %u "
                       "bytes)", id ? "wrong size" : "id is NULL",
                       MLU_CNCL_ID_BYTES);
    if ((st = cncl_ready("get_unique_id_bytes")) ||
        (st = mlu_enter(0, "get_unique_id_bytes")))
        return st;
    memset(&ci, 0, sizeof(ci));
    if ((r = cncl.cnclGetCliqueId(&ci)) != CNCL_RET_SUCCESS) {
        fault_cncl(&f, r, 0, "cnclGetCliqueId");
        return fault_report(&f);
    }
    memcpy(id, &ci, MLU_CNCL_ID_BYTES);
    return KEEL_STATUS_OK;
}

static keel_status mlu_comm_init_rank_bytes(int32_t device, int32_t nranks,
                                            const uint8_t *id, uint32_t size,
                                            int32_t rank, keel_comm *comm)
{
    struct keel_comm_s *c;
    struct job *j;
    keel_status st;

    if (inproc()) {
        if (!id || size != KEEL_COMM_ID_BYTES)
            return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                           "comm_init_rank_bytes: %s (in-process ids are %d "
                           "bytes)", id ? "wrong size" : "id is NULL",
                           KEEL_COMM_ID_BYTES);
        return keel_kit_hc_comm_init_rank(
            &mlu_hc, device, nranks, (const keel_comm_id *)(const void *)id,
            rank, comm);
    }
    if (!comm || !id || size != MLU_CNCL_ID_BYTES || nranks < 1 || rank < 0 ||
        rank >= nranks)
        return refused(mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                               "comm_init_rank_bytes(device %d, %d ranks, "
                               "rank %d, %u-byte id%s): invalid (ids are %u "
                               "bytes)", (int)device, (int)nranks, (int)rank,
                               (unsigned)size, id ? "" : " NULL",
                               MLU_CNCL_ID_BYTES));
    *comm = NULL;
    if ((st = mlu_enter(device, "comm_init_rank_bytes")) ||
        (st = cncl_ready("comm_init_rank_bytes")))
        return refused(st);
    c = calloc(1, sizeof(*c));
    j = job_new(J_INIT);
    if (!c || !j) {
        free(c);
        if (j)
            job_free(j);
        return refused(mlu_err(KEEL_STATUS_OUT_OF_MEMORY,
                               "comm_init_rank_bytes: no host memory"));
    }
    memcpy(&j->id, id, MLU_CNCL_ID_BYTES);
    c->device = device;
    c->rank = rank;
    c->nranks = nranks;
    j->c = c;
    comm_keep(c);
    if (group_depth > 0) {
        *comm = c;
        return submit(j);
    }
    st = submit(j);
    if (st) {
        comm_drop(c);
        free(c);
        return st;
    }
    *comm = c;
    return KEEL_STATUS_OK;
}

static keel_status mlu_comm_destroy(keel_comm comm)
{
    if (inproc())
        return keel_kit_hc_comm_destroy(&mlu_hc, comm);
    struct keel_comm_s *c = NULL;
    struct fault f = {0};
    keel_status st;
    cnclResult_t r;

    if ((st = comm_get(comm, "comm_destroy", &c)))
        return st;
    /* the ABI: destroy waits for the communicator's pending work */
    if (atomic_load(&mlu.up) && atomic_load(&c->ready) &&
        ((st = mlu_enter(c->device, "comm_destroy")) ||
         (st = MLU_RT(mlu.rt.cnrtSyncDevice(), c->device,
                      "cnrtSyncDevice (comm_destroy)"))))
        return st;
    if (!comm_drop(c))
        return mlu_err(KEEL_STATUS_INVALID_HANDLE,
                       "comm_destroy: %p is not a live communicator",
                       (void *)comm);
    if (atomic_load(&c->ready) &&
        (r = cncl.cnclDestroyComms(&c->h, 1)) != CNCL_RET_SUCCESS)
        fault_cncl(&f, r, c->device, "cnclDestroyComms");
    free(c);
    return fault_report(&f);
}

static keel_status mlu_comm_rank(keel_comm comm, int32_t *rank,
                                 int32_t *nranks)
{
    if (inproc())
        return keel_kit_hc_comm_rank(&mlu_hc, comm, rank, nranks);
    struct keel_comm_s *c = NULL;
    keel_status st;

    if ((st = comm_get(comm, "comm_rank", &c)))
        return st;
    if (!rank || !nranks)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "comm_rank: rank or nranks is NULL");
    *rank = c->rank;
    *nranks = c->nranks;
    return KEEL_STATUS_OK;
}

/* ---- collectives -------------------------------------------------------------- */

static keel_status mlu_all_reduce(keel_comm comm, keel_stream stream,
                                  keel_dptr send, keel_dptr recv,
                                  uint64_t count, keel_dtype dtype,
                                  keel_reduce_op op)
{
    if (inproc())
        return keel_kit_hc_all_reduce(&mlu_hc, comm, stream, send, recv,
                                      count, dtype, op);
    struct job *j = job_new(J_ALL_REDUCE);

    if (!j)
        return refused(KEEL_STATUS_OUT_OF_MEMORY);
    j->count = count;
    return go(j, prepare(j, comm, stream, send, count, recv, count, dtype,
                         (int)op));
}

static keel_status mlu_broadcast(keel_comm comm, keel_stream stream,
                                 keel_dptr send, keel_dptr recv,
                                 uint64_t count, keel_dtype dtype,
                                 int32_t root)
{
    if (inproc())
        return keel_kit_hc_broadcast(&mlu_hc, comm, stream, send, recv, count,
                                     dtype, root);
    struct job *j = job_new(J_BROADCAST);
    keel_status st;

    if (!j)
        return refused(KEEL_STATUS_OUT_OF_MEMORY);
    j->count = count;
    st = check_root(j, comm, root);
    if (!st) {
        struct keel_comm_s *c = comm;
        st = prepare(j, comm, stream, send, c->rank == root ? count : 0, recv,
                     count, dtype, -1);
    }
    return go(j, st);
}

static keel_status mlu_reduce(keel_comm comm, keel_stream stream,
                              keel_dptr send, keel_dptr recv, uint64_t count,
                              keel_dtype dtype, keel_reduce_op op,
                              int32_t root)
{
    if (inproc())
        return keel_kit_hc_reduce(&mlu_hc, comm, stream, send, recv, count,
                                  dtype, op, root);
    struct job *j;
    keel_status st;

    if (cncl_loaded() && !cncl.cnclReduce)
        return refused(mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                               "reduce: this libcncl.so has no cnclReduce"));
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

static keel_status mlu_all_gather(keel_comm comm, keel_stream stream,
                                  keel_dptr send, keel_dptr recv,
                                  uint64_t count, keel_dtype dtype)
{
    if (inproc())
        return keel_kit_hc_all_gather(&mlu_hc, comm, stream, send, recv, count,
                                      dtype);
    struct job *j = job_new(J_ALL_GATHER);
    struct keel_comm_s *c = NULL;
    keel_status st;

    if (!j)
        return refused(KEEL_STATUS_OUT_OF_MEMORY);
    j->count = count;
    st = comm_get(comm, "all_gather", &c);
    if (!st && count > UINT64_MAX / (uint64_t)c->nranks)
        st = mlu_err(KEEL_STATUS_INVALID_ARGUMENT, "all_gather: count too "
                     "large");
    if (!st)
        st = prepare(j, comm, stream, send, count, recv,
                     count * (uint64_t)c->nranks, dtype, -1);
    return go(j, st);
}

static keel_status mlu_reduce_scatter(keel_comm comm, keel_stream stream,
                                      keel_dptr send, keel_dptr recv,
                                      uint64_t count, keel_dtype dtype,
                                      keel_reduce_op op)
{
    if (inproc())
        return keel_kit_hc_reduce_scatter(&mlu_hc, comm, stream, send, recv,
                                          count, dtype, op);
    struct job *j = job_new(J_REDUCE_SCATTER);
    struct keel_comm_s *c = NULL;
    keel_status st;

    if (!j)
        return refused(KEEL_STATUS_OUT_OF_MEMORY);
    j->count = count;
    st = comm_get(comm, "reduce_scatter", &c);
    if (!st && count > UINT64_MAX / (uint64_t)c->nranks)
        st = mlu_err(KEEL_STATUS_INVALID_ARGUMENT, "reduce_scatter: count "
                     "too large");
    if (!st)
        st = prepare(j, comm, stream, send, count * (uint64_t)c->nranks, recv,
                     count, dtype, (int)op);
    return go(j, st);
}

/* [a, a + n) and [b, b + m) bytes overlap */
static bool overlap(keel_dptr a, uint64_t n, keel_dptr b, uint64_t m)
{
    return n && m && a < b + m && b < a + n;
}

static keel_status a2av_checked(keel_comm comm, keel_stream stream,
                                keel_dptr send, const uint64_t *sc,
                                const uint64_t *sd, keel_dptr recv,
                                const uint64_t *rc, const uint64_t *rd,
                                keel_dtype dtype)
{
    struct keel_comm_s *c = NULL;
    struct job *j;
    uint64_t send_end = 0, recv_end = 0;
    keel_status st;
    int n;

    if ((st = comm_get(comm, "all_to_allv", &c)))
        return st;
    if (cncl_loaded() && !cncl.cnclAlltoAllv)
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "all_to_allv: this libcncl.so has no cnclAlltoAllv");
    if (!sc || !sd || !rc || !rd)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "all_to_allv: a count or displacement array is NULL");
    n = c->nranks;
    for (int i = 0; i < n; i++) {
        if (sc[i] > UINT64_MAX - sd[i] || rc[i] > UINT64_MAX - rd[i])
            return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                           "all_to_allv: block %d overflows", i);
        if (sc[i] > UINT32_MAX || rc[i] > UINT32_MAX)
            return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                           "all_to_allv: block %d has more than 2^32 - 1 "
                           "elements (CNCL's counts are uint32_t)", i);
        if (sc[i] && sd[i] + sc[i] > send_end)
            send_end = sd[i] + sc[i];
        if (rc[i] && rd[i] + rc[i] > recv_end)
            recv_end = rd[i] + rc[i];
    }
    if (!(j = job_new(J_ALL_TO_ALLV)))
        return KEEL_STATUS_OUT_OF_MEMORY;
    st = prepare(j, comm, stream, send, send_end, recv, recv_end, dtype, -1);
    if (!st && overlap(send, send_end * j->es, recv, recv_end * j->es))
        st = mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                     "all_to_allv: CNCL's all-to-all does not run in place");
    if (!st && !(j->v = malloc(4 * (size_t)n * sizeof(uint64_t))))
        st = mlu_err(KEEL_STATUS_OUT_OF_MEMORY, "all_to_allv: no host memory");
    if (!st) {
        memcpy(j->v, sc, (size_t)n * sizeof(uint64_t));
        memcpy(j->v + n, sd, (size_t)n * sizeof(uint64_t));
        memcpy(j->v + 2 * n, rc, (size_t)n * sizeof(uint64_t));
        memcpy(j->v + 3 * n, rd, (size_t)n * sizeof(uint64_t));
    }
    return go(j, st);
}

static keel_status mlu_all_to_allv(keel_comm comm, keel_stream stream,
                                   keel_dptr send, const uint64_t *sc,
                                   const uint64_t *sd, keel_dptr recv,
                                   const uint64_t *rc, const uint64_t *rd,
                                   keel_dtype dtype)
{
    if (inproc())
        return keel_kit_hc_all_to_allv(&mlu_hc, comm, stream, send, sc, sd,
                                       recv, rc, rd, dtype);
    return refused(a2av_checked(comm, stream, send, sc, sd, recv, rc, rd,
                                dtype));
}

static keel_status mlu_all_to_all(keel_comm comm, keel_stream stream,
                                  keel_dptr send, keel_dptr recv,
                                  uint64_t count, keel_dtype dtype)
{
    if (inproc())
        return keel_kit_hc_all_to_all(&mlu_hc, comm, stream, send, recv, count,
                                      dtype);
    struct keel_comm_s *c = NULL;
    struct job *j;
    uint64_t total;
    keel_status st;

    if ((st = comm_get(comm, "all_to_all", &c)))
        return refused(st);
    if (cncl_loaded() && !cncl.cnclAlltoAll)
        return refused(mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                               "all_to_all: this libcncl.so has no "
                               "cnclAlltoAll"));
    if (count > UINT64_MAX / (uint64_t)c->nranks)
        return refused(mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                               "all_to_all: count too large"));
    total = count * (uint64_t)c->nranks;
    if (!(j = job_new(J_ALL_TO_ALL)))
        return refused(KEEL_STATUS_OUT_OF_MEMORY);
    j->count = count;
    st = prepare(j, comm, stream, send, total, recv, total, dtype, -1);
    if (!st && overlap(send, total * j->es, recv, total * j->es))
        st = mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                     "all_to_all: CNCL's all-to-all does not run in place");
    return go(j, st);
}

static keel_status p2p(enum job_kind k, keel_comm comm, keel_stream stream,
                       keel_dptr buf, uint64_t count, keel_dtype dtype,
                       int32_t peer)
{
    struct keel_comm_s *c = NULL;
    struct job *j;
    keel_status st;

    if (cncl_loaded() && !have_p2p())
        return refused(mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                               "%s: this libcncl.so lacks cnclSend, cnclRecv "
                               "or the group calls", job_names[k]));
    if (!(j = job_new(k)))
        return refused(KEEL_STATUS_OUT_OF_MEMORY);
    j->count = count;
    st = comm_get(comm, job_names[k], &c);
    if (!st && (peer < 0 || peer >= c->nranks || peer == c->rank))
        st = mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                     "%s: peer %d (rank %d of %d)", job_names[k], (int)peer,
                     (int)c->rank, (int)c->nranks);
    if (!st)
        st = prepare(j, comm, stream, buf, k == J_SEND ? count : 0, buf,
                     k == J_RECV ? count : 0, dtype, -1);
    j->root = peer;
    return go(j, st);
}

static keel_status mlu_send(keel_comm comm, keel_stream stream, keel_dptr buf,
                            uint64_t count, keel_dtype dtype, int32_t peer)
{
    if (inproc())
        return keel_kit_hc_send(&mlu_hc, comm, stream, buf, count, dtype,
                                peer);
    return p2p(J_SEND, comm, stream, buf, count, dtype, peer);
}

static keel_status mlu_recv(keel_comm comm, keel_stream stream, keel_dptr buf,
                            uint64_t count, keel_dtype dtype, int32_t peer)
{
    if (inproc())
        return keel_kit_hc_recv(&mlu_hc, comm, stream, buf, count, dtype,
                                peer);
    return p2p(J_RECV, comm, stream, buf, count, dtype, peer);
}

/* ---- capabilities ------------------------------------------------------------ */

static keel_status mlu_get_caps(int32_t device, keel_collective_caps *caps)
{
    if (inproc())
        return keel_kit_hc_get_caps(&mlu_hc, device, caps);
    keel_collective_caps k;
    keel_status st;
    uint32_t size;

    if (!caps || caps->struct_size < 4)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "get_caps: caps is NULL or its struct_size < 4");
    if ((st = hc_device(device, "get_caps")))
        return st;
    memset(&k, 0, sizeof(k));
    if (cncl_loaded()) {
        k.collectives = KEEL_COLL_ALL_REDUCE | KEEL_COLL_BROADCAST |
                        KEEL_COLL_ALL_GATHER | KEEL_COLL_REDUCE_SCATTER;
        if (cncl.cnclReduce)
            k.collectives |= KEEL_COLL_REDUCE;
        if (cncl.cnclAlltoAll)
            k.collectives |= KEEL_COLL_ALL_TO_ALL;
        if (cncl.cnclAlltoAllv)
            k.collectives |= KEEL_COLL_ALL_TO_ALLV;
        if (have_p2p())
            k.collectives |= KEEL_COLL_SEND_RECV;
        k.dtype_mask = MLU_CNCL_DTYPES;
        k.reduce_ops = KEEL_REDUCE_OP_BIT(KEEL_REDUCE_SUM) |
                       KEEL_REDUCE_OP_BIT(KEEL_REDUCE_PROD) |
                       KEEL_REDUCE_OP_BIT(KEEL_REDUCE_MAX) |
                       KEEL_REDUCE_OP_BIT(KEEL_REDUCE_MIN);
    }
    k.timeout_ms = 0; /* CNCL declares no bound on its waits */
    k.id_bytes = MLU_CNCL_ID_BYTES;
    size = caps->struct_size < sizeof(k) ? caps->struct_size
                                         : (uint32_t)sizeof(k);
    k.struct_size = size;
    memcpy(caps, &k, size);
    return KEEL_STATUS_OK;
}

/* ---- finalize and unload ----------------------------------------------------- */

void mlu_collective_finalize(void)
{
    struct keel_comm_s *c, *next;

    keel_kit_hc_finalize(&mlu_hc);
    pthread_mutex_lock(&comms_mu);
    c = comms;
    comms = NULL;
    pthread_mutex_unlock(&comms_mu);
    for (; c; c = next) {
        next = c->next;
        if (atomic_load(&c->ready) && cncl.lib)
            (void)cncl.cnclDestroyComms(&c->h, 1);
        free(c);
    }
}

void mlu_collective_unload(void)
{
    if (cncl.lib)
        dlclose(cncl.lib);
    cncl.lib = NULL;
}

const keel_collective_ops mlu_coll_ops = {
    .header = KEEL_TABLE_HEADER(keel_collective_ops),
    .get_unique_id = mlu_get_unique_id,
    .comm_init_rank = mlu_comm_init_rank,
    .comm_destroy = mlu_comm_destroy,
    .comm_rank = mlu_comm_rank,
    .all_reduce = mlu_all_reduce,
    .broadcast = mlu_broadcast,
    .reduce = mlu_reduce,
    .all_gather = mlu_all_gather,
    .reduce_scatter = mlu_reduce_scatter,
    .all_to_all = mlu_all_to_all,
    .send = mlu_send,
    .recv = mlu_recv,
    .group_start = mlu_group_start,
    .group_end = mlu_group_end,
    .get_caps = mlu_get_caps,
    .get_unique_id_bytes = mlu_get_unique_id_bytes,
    .comm_init_rank_bytes = mlu_comm_init_rank_bytes,
    .all_to_allv = mlu_all_to_allv,
};
