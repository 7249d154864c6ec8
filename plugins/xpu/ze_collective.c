/*
 * keel Level Zero plugin — collective group: communicators in ONE process
 * across this plugin's devices, staged through host memory (the model is
 * the CPU plugin's cpu_collective.c).
 *
 * A collective is a ROUND of a communicator: every rank's n-th collective
 * call joins round n. A rank's call waits for its stream, copies its send
 * buffer to host memory and deposits it; the LAST rank to arrive computes
 * every rank's result on the host and writes it to each rank's recv buffer
 * (a synchronous copy on that rank's device), then marks the round done.
 * Outside a group a call returns when its round is done; inside
 * group_start/group_end (one thread driving several ranks) the calls only
 * deposit, and group_end waits for their rounds. Waits are bounded by
 * KEEL_XPU_COLL_TIMEOUT_MS (default 60000) and then return TIMEOUT.
 *
 * Provided: all_reduce, broadcast, reduce, all_gather, reduce_scatter,
 * all_to_all on every dtype (the reducing ones without bool), with sum,
 * prod, max, min, avg (avg on floating dtypes). Not provided: send/recv
 * (NOT_SUPPORTED, and absent from get_caps).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <keel/kit.h>

#include "ze_internal.h"

enum zc_kind { ZC_ALL_REDUCE, ZC_BROADCAST, ZC_REDUCE, ZC_ALL_GATHER,
               ZC_REDUCE_SCATTER, ZC_ALL_TO_ALL };

static const char *const zc_names[] = {"all_reduce", "broadcast", "reduce",
                                       "all_gather", "reduce_scatter",
                                       "all_to_all"};

struct zc_round {
    uint64_t seq;
    enum zc_kind kind;
    keel_dtype dtype;
    keel_reduce_op op;
    uint64_t count;
    int32_t root;
    int arrived, consumed;
    bool done;
    keel_status status;
    char msg[320];
    void **buf;          /* per rank: the send data on the host */
    keel_dptr *recv;     /* per rank */
    int32_t *device;     /* per rank */
    struct zc_round *next;
};

struct zc_group {
    keel_comm_id id;
    int32_t nranks;
    int32_t joined;
    int32_t refs;
    struct keel_comm_s **ranks;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct zc_round *rounds;
    struct zc_group *next;
};

struct keel_comm_s {
    struct zc_group *g;
    int32_t rank;
    int32_t device;
    uint64_t seq; /* collectives issued */
};

static pthread_mutex_t zc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct zc_group *zc_groups;

/* Per thread: group depth and what group_end must wait for. */
struct zc_pending {
    struct zc_group *g;
    struct zc_round *r; /* NULL: a join */
    struct keel_comm_s *c;
};
static _Thread_local int zc_depth;
static _Thread_local struct zc_pending *zc_pend;
static _Thread_local size_t zc_npend, zc_cappend;

static unsigned timeout_ms(void)
{
    const char *v = ze_env("KEEL_XPU_COLL_TIMEOUT_MS");
    char *end = NULL;
    unsigned long n;

    if (!v || !*v)
        return 60000;
    errno = 0;
    n = strtoul(v, &end, 10);
    if (errno || *end || n == 0 || n > 86400000ul)
        return 60000;
    return (unsigned)n;
}

static void deadline(struct timespec *ts)
{
    unsigned ms = timeout_ms();

    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static keel_status pend_add(struct zc_group *g, struct zc_round *r,
                            struct keel_comm_s *c)
{
    if (zc_npend == zc_cappend) {
        size_t cap = zc_cappend ? zc_cappend * 2 : 16;
        struct zc_pending *p = realloc(zc_pend, cap * sizeof(*p));
        if (!p)
            return ze_fail(KEEL_STATUS_OUT_OF_MEMORY,
                           "group: no host memory for pending collectives");
        zc_pend = p;
        zc_cappend = cap;
    }
    zc_pend[zc_npend++] = (struct zc_pending){g, r, c};
    return KEEL_STATUS_OK;
}

static keel_status comm_resolve(keel_comm comm, const char *call)
{
    struct ze_range r;

    if (!atomic_load(&ze_g.initialized))
        return ze_fail(KEEL_STATUS_NOT_INITIALIZED,
                       "%s: the levelzero plugin is not initialised", call);
    if (!comm || !ze_rs_find(&ze_g.handles, (uintptr_t)comm, 1, -1,
                             ZE_KIND_COMM, &r) ||
        r.base != (uintptr_t)comm)
        return ze_fail(KEEL_STATUS_INVALID_HANDLE,
                       "%s: %p is not a live communicator of the levelzero "
                       "plugin",
                       call, (void *)comm);
    return KEEL_STATUS_OK;
}

/* ---- communicators -------------------------------------------------------- */

static keel_status ze_get_unique_id(keel_comm_id *id)
{
    static _Atomic uint64_t counter;
    struct timespec ts;
    uint64_t v[3];

    if (!id)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "get_unique_id: id is NULL");
    memset(id, 0, sizeof(*id));
    clock_gettime(CLOCK_REALTIME, &ts);
    v[0] = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    v[1] = atomic_fetch_add(&counter, 1) + 1;
    v[2] = (uint64_t)(uintptr_t)&counter;
    memcpy(id->bytes, "keel-ze", 7);
    memcpy(id->bytes + 8, v, sizeof(v));
    return KEEL_STATUS_OK;
}

static void group_unref(struct zc_group *g)
{
    bool last;

    pthread_mutex_lock(&zc_lock);
    last = --g->refs == 0;
    if (last)
        for (struct zc_group **p = &zc_groups; *p; p = &(*p)->next)
            if (*p == g) {
                *p = g->next;
                break;
            }
    pthread_mutex_unlock(&zc_lock);
    if (!last)
        return;
    while (g->rounds) {
        struct zc_round *r = g->rounds;
        g->rounds = r->next;
        for (int i = 0; i < g->nranks; i++)
            free(r->buf[i]);
        free(r->buf);
        free(r->recv);
        free(r->device);
        free(r);
    }
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->ranks);
    free(g);
}

static keel_status wait_joined(struct zc_group *g, struct keel_comm_s *c)
{
    struct timespec ts;
    keel_status st = KEEL_STATUS_OK;

    deadline(&ts);
    pthread_mutex_lock(&g->mu);
    while (g->joined < g->nranks)
        if (pthread_cond_timedwait(&g->cv, &g->mu, &ts) == ETIMEDOUT) {
            st = ze_fail(KEEL_STATUS_TIMEOUT,
                         "comm_init_rank: rank %d of %d on xpu:%d timed out "
                         "after %u ms with %d of %d ranks joined "
                         "(KEEL_XPU_COLL_TIMEOUT_MS)",
                         (int)c->rank, (int)g->nranks, (int)c->device,
                         timeout_ms(), (int)g->joined, (int)g->nranks);
            break;
        }
    pthread_mutex_unlock(&g->mu);
    return st;
}

static keel_status ze_comm_init_rank(int32_t device, int32_t nranks,
                                     const keel_comm_id *id, int32_t rank,
                                     keel_comm *comm)
{
    keel_status st = ze_enter(device, "comm_init_rank");
    struct zc_group *g;
    struct keel_comm_s *c;

    if (st)
        return st;
    if (!id || !comm)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "comm_init_rank: %s is NULL", id ? "comm" : "id");
    *comm = NULL;
    if (nranks < 1 || nranks > 4096 || rank < 0 || rank >= nranks)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "comm_init_rank: rank %d of %d", (int)rank,
                       (int)nranks);
    c = calloc(1, sizeof(*c));
    if (!c)
        return ze_fail(KEEL_STATUS_OUT_OF_MEMORY, "comm_init_rank: no memory");
    c->rank = rank;
    c->device = device;

    pthread_mutex_lock(&zc_lock);
    for (g = zc_groups; g; g = g->next)
        if (!memcmp(&g->id, id, sizeof(*id)))
            break;
    if (!g) {
        g = calloc(1, sizeof(*g));
        if (g)
            g->ranks = calloc((size_t)nranks, sizeof(*g->ranks));
        if (!g || !g->ranks) {
            pthread_mutex_unlock(&zc_lock);
            if (g)
                free(g);
            free(c);
            return ze_fail(KEEL_STATUS_OUT_OF_MEMORY,
                           "comm_init_rank: no memory");
        }
        g->id = *id;
        g->nranks = nranks;
        pthread_mutex_init(&g->mu, NULL);
        pthread_cond_init(&g->cv, NULL);
        g->next = zc_groups;
        zc_groups = g;
    }
    if (g->nranks != nranks || g->ranks[rank]) {
        int32_t have = g->nranks;
        bool taken = g->nranks == nranks;
        pthread_mutex_unlock(&zc_lock);
        free(c);
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       taken ? "comm_init_rank: rank %d of this id has "
                               "already joined (%d ranks)"
                             : "comm_init_rank: rank %d asks for %d ranks "
                               "but the id's communicator has %d",
                       (int)rank, taken ? (int)have : (int)nranks, (int)have);
    }
    g->refs++;
    c->g = g;
    pthread_mutex_lock(&g->mu);
    g->ranks[rank] = c;
    g->joined++;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_mutex_unlock(&zc_lock);

    struct ze_range r = {.base = (uintptr_t)c, .size = 1, .device = device,
                         .kind = ZE_KIND_COMM};
    if (ze_rs_add(&ze_g.handles, &r))
        st = ze_fail(KEEL_STATUS_OUT_OF_MEMORY,
                     "comm_init_rank: no host memory for the registry");
    else if (zc_depth > 0)
        st = pend_add(g, NULL, c);
    else
        st = wait_joined(g, c);
    if (st) {
        ze_rs_take(&ze_g.handles, (uintptr_t)c, ZE_KIND_COMM, -1, NULL);
        pthread_mutex_lock(&g->mu);
        g->ranks[rank] = NULL;
        g->joined--;
        pthread_mutex_unlock(&g->mu);
        group_unref(g);
        free(c);
        return st;
    }
    *comm = c;
    return KEEL_STATUS_OK;
}

static keel_status ze_comm_destroy(keel_comm comm)
{
    keel_status st = comm_resolve(comm, "comm_destroy");
    struct zc_group *g;

    if (st)
        return st;
    if (!ze_rs_take(&ze_g.handles, (uintptr_t)comm, ZE_KIND_COMM, -1, NULL))
        return ze_fail(KEEL_STATUS_INVALID_HANDLE,
                       "comm_destroy: communicator destroyed meanwhile");
    g = comm->g;
    pthread_mutex_lock(&g->mu);
    g->ranks[comm->rank] = NULL;
    pthread_mutex_unlock(&g->mu);
    group_unref(g);
    free(comm);
    return KEEL_STATUS_OK;
}

static keel_status ze_comm_rank(keel_comm comm, int32_t *rank,
                                int32_t *nranks)
{
    keel_status st = comm_resolve(comm, "comm_rank");

    if (st)
        return st;
    if (!rank || !nranks)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "comm_rank: %s is NULL", rank ? "nranks" : "rank");
    *rank = comm->rank;
    *nranks = comm->g->nranks;
    return KEEL_STATUS_OK;
}

/* ---- host arithmetic ------------------------------------------------------ */

static double ld(const void *p, keel_dtype dt, uint64_t i)
{
    switch (dt) {
    case KEEL_F32: return ((const float *)p)[i];
    case KEEL_F64: return ((const double *)p)[i];
    case KEEL_F16: return keel_kit_f16_to_f32(((const uint16_t *)p)[i]);
    case KEEL_BF16: return keel_kit_bf16_to_f32(((const uint16_t *)p)[i]);
    case KEEL_I8: return ((const int8_t *)p)[i];
    case KEEL_U8: return ((const uint8_t *)p)[i];
    case KEEL_I32: return ((const int32_t *)p)[i];
    default: return 0;
    }
}

static void st_(void *p, keel_dtype dt, uint64_t i, double v)
{
    switch (dt) {
    case KEEL_F32: ((float *)p)[i] = (float)v; break;
    case KEEL_F64: ((double *)p)[i] = v; break;
    case KEEL_F16: ((uint16_t *)p)[i] = keel_kit_f32_to_f16((float)v); break;
    case KEEL_BF16: ((uint16_t *)p)[i] = keel_kit_f32_to_bf16((float)v); break;
    case KEEL_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    case KEEL_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case KEEL_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    default: break;
    }
}

/* out[i] = op over ranks of in[r][off + i], i < n. int64 exactly, the
 * others through double (exact for every narrower dtype's sum order). */
static void reduce_block(void *out, void *const *in, int nr, keel_dtype dt,
                         keel_reduce_op op, uint64_t off, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        if (dt == KEEL_I64) {
            int64_t a = ((const int64_t *)in[0])[off + i];
            for (int r = 1; r < nr; r++) {
                int64_t b = ((const int64_t *)in[r])[off + i];
                switch (op) {
                case KEEL_REDUCE_SUM: a = (int64_t)((uint64_t)a + (uint64_t)b); break;
                case KEEL_REDUCE_PROD: a = (int64_t)((uint64_t)a * (uint64_t)b); break;
                case KEEL_REDUCE_MAX: a = b > a ? b : a; break;
                case KEEL_REDUCE_MIN: a = b < a ? b : a; break;
                default: break;
                }
            }
            ((int64_t *)out)[i] = a;
            continue;
        }
        double a = ld(in[0], dt, off + i);
        for (int r = 1; r < nr; r++) {
            double b = ld(in[r], dt, off + i);
            switch (op) {
            case KEEL_REDUCE_SUM:
            case KEEL_REDUCE_AVG: a += b; break;
            case KEEL_REDUCE_PROD: a *= b; break;
            case KEEL_REDUCE_MAX: a = b > a || b != b ? b : a; break;
            case KEEL_REDUCE_MIN: a = b < a || b != b ? b : a; break;
            default: break;
            }
        }
        if (op == KEEL_REDUCE_AVG)
            a /= nr;
        st_(out, dt, i, a);
    }
}

static void write_recv(struct zc_round *r, int rank, const void *src,
                       uint64_t bytes)
{
    struct ze_device *d = &ze_g.dev[r->device[rank]];
    ze_result_t zr;

    if (bytes == 0 || r->status)
        return;
    pthread_mutex_lock(&d->sync_mu);
    zr = zeCommandListAppendMemoryCopy(d->sync_list, ZE_PTR(r->recv[rank]),
                                       src, (size_t)bytes, NULL, 0, NULL);
    pthread_mutex_unlock(&d->sync_mu);
    if (zr != ZE_RESULT_SUCCESS) {
        r->status = ze_status_of(zr) == KEEL_STATUS_OUT_OF_MEMORY
                        ? KEEL_STATUS_OUT_OF_MEMORY
                        : KEEL_STATUS_DEVICE_ERROR;
        snprintf(r->msg, sizeof(r->msg),
                 "%s: zeCommandListAppendMemoryCopy(%" PRIu64 " bytes) to "
                 "rank %d on xpu:%d: %s",
                 zc_names[r->kind], bytes, rank, (int)r->device[rank],
                 ze_result_name(zr));
    }
}

/* The last rank computes every rank's result. Called with g->mu held. */
static void complete(struct zc_group *g, struct zc_round *r)
{
    int nr = g->nranks;
    uint32_t es = keel_dtype_size(r->dtype);
    uint64_t blk = r->count * es;
    void *tmp = malloc(blk * (uint64_t)nr > 0 ? blk * (uint64_t)nr : 1);

    if (!tmp) {
        r->status = KEEL_STATUS_OUT_OF_MEMORY;
        snprintf(r->msg, sizeof(r->msg), "%s: no host memory for %" PRIu64
                 " bytes of staging", zc_names[r->kind], blk * (uint64_t)nr);
        return;
    }
    switch (r->kind) {
    case ZC_ALL_REDUCE:
    case ZC_REDUCE:
        reduce_block(tmp, r->buf, nr, r->dtype, r->op, 0, r->count);
        for (int i = 0; i < nr; i++)
            if (r->kind == ZC_ALL_REDUCE || i == r->root)
                write_recv(r, i, tmp, blk);
        break;
    case ZC_BROADCAST:
        for (int i = 0; i < nr; i++)
            write_recv(r, i, r->buf[r->root], blk);
        break;
    case ZC_ALL_GATHER:
        for (int i = 0; i < nr; i++)
            memcpy((char *)tmp + (uint64_t)i * blk, r->buf[i], blk);
        for (int i = 0; i < nr; i++)
            write_recv(r, i, tmp, blk * (uint64_t)nr);
        break;
    case ZC_REDUCE_SCATTER:
        for (int i = 0; i < nr; i++) {
            reduce_block(tmp, r->buf, nr, r->dtype, r->op,
                         (uint64_t)i * r->count, r->count);
            write_recv(r, i, tmp, blk);
        }
        break;
    case ZC_ALL_TO_ALL:
        for (int j = 0; j < nr; j++) {
            for (int i = 0; i < nr; i++)
                memcpy((char *)tmp + (uint64_t)i * blk,
                       (char *)r->buf[i] + (uint64_t)j * blk, blk);
            write_recv(r, j, tmp, blk * (uint64_t)nr);
        }
        break;
    }
    free(tmp);
}

/* Called with g->mu held: the round is consumed by one more rank. */
static void consume(struct zc_group *g, struct zc_round *r)
{
    if (++r->consumed < g->nranks)
        return;
    for (struct zc_round **p = &g->rounds; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    for (int i = 0; i < g->nranks; i++)
        free(r->buf[i]);
    free(r->buf);
    free(r->recv);
    free(r->device);
    free(r);
}

static keel_status wait_round(struct zc_group *g, struct zc_round *r,
                              struct keel_comm_s *c)
{
    struct timespec ts;
    keel_status st = KEEL_STATUS_OK;

    deadline(&ts);
    pthread_mutex_lock(&g->mu);
    while (!r->done)
        if (pthread_cond_timedwait(&g->cv, &g->mu, &ts) == ETIMEDOUT) {
            st = ze_fail(KEEL_STATUS_TIMEOUT,
                         "%s: rank %d timed out after %u ms with %d of %d "
                         "ranks arrived (KEEL_XPU_COLL_TIMEOUT_MS); one "
                         "thread driving several ranks must use "
                         "group_start/group_end",
                         zc_names[r->kind], (int)c->rank, timeout_ms(),
                         r->arrived, (int)g->nranks);
            break;
        }
    if (!st && r->status)
        st = ze_fail(r->status, "%s", r->msg);
    if (r->done)
        consume(g, r);
    pthread_mutex_unlock(&g->mu);
    return st;
}

static keel_status run(keel_comm comm, keel_stream stream, enum zc_kind kind,
                       keel_dptr send, keel_dptr recv, uint64_t count,
                       keel_dtype dtype, keel_reduce_op op, int32_t root)
{
    const char *call = zc_names[kind];
    keel_status st = comm_resolve(comm, call);
    struct keel_stream_s *s;
    struct zc_group *g;
    struct zc_round *r;
    uint32_t es;
    uint64_t sbytes, rbytes;
    bool reducing = kind == ZC_ALL_REDUCE || kind == ZC_REDUCE ||
                    kind == ZC_REDUCE_SCATTER;
    void *host = NULL;

    if (st)
        return st;
    g = comm->g;
    if ((st = ze_stream_resolve(comm->device, stream, call, &s)))
        return st;
    if ((unsigned)dtype >= KEEL_DTYPE_COUNT_)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: dtype %d", call,
                       (int)dtype);
    if (reducing && dtype == KEEL_BOOL)
        return ze_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: bool has no reduction", call);
    if (reducing && (unsigned)op >= KEEL_REDUCE_OP_COUNT_)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: reduce op %d", call,
                       (int)op);
    if (reducing && op == KEEL_REDUCE_AVG &&
        !(dtype == KEEL_F32 || dtype == KEEL_F64 || dtype == KEEL_F16 ||
          dtype == KEEL_BF16))
        return ze_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: avg needs a floating dtype", call);
    if ((kind == ZC_BROADCAST || kind == ZC_REDUCE) &&
        (root < 0 || root >= g->nranks))
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: root %d of %d ranks",
                       call, (int)root, (int)g->nranks);
    es = keel_dtype_size(dtype);
    if (count > UINT64_MAX / es / (uint64_t)g->nranks ||
        count * es * (uint64_t)g->nranks > (uint64_t)SIZE_MAX)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: %" PRIu64 " elements overflow", call, count);
    sbytes = count * es;
    rbytes = count * es;
    if (kind == ZC_REDUCE_SCATTER || kind == ZC_ALL_TO_ALL)
        sbytes *= (uint64_t)g->nranks;
    if (kind == ZC_ALL_GATHER || kind == ZC_ALL_TO_ALL)
        rbytes *= (uint64_t)g->nranks;
    bool sends = kind != ZC_BROADCAST || comm->rank == root;
    bool recvs = kind != ZC_REDUCE || comm->rank == root;
    if (sbytes && sends &&
        (st = ze_mem_check(comm->device, send, sbytes, call)))
        return st;
    if (rbytes && recvs &&
        (st = ze_mem_check(comm->device, recv, rbytes, call)))
        return st;

    /* stage this rank's send buffer after its stream's earlier work */
    if ((st = ze_stream_wait(s, call)))
        return st;
    host = malloc(sbytes ? sbytes : 1);
    if (!host)
        return ze_fail(KEEL_STATUS_OUT_OF_MEMORY,
                       "%s: no host memory for %" PRIu64 " bytes of staging",
                       call, sbytes);
    if (sbytes && sends) {
        struct ze_device *d = &ze_g.dev[comm->device];
        ze_result_t zr;
        pthread_mutex_lock(&d->sync_mu);
        zr = zeCommandListAppendMemoryCopy(d->sync_list, host, ZE_PTR(send),
                                           (size_t)sbytes, NULL, 0, NULL);
        pthread_mutex_unlock(&d->sync_mu);
        if ((st = ze_check(zr, comm->device,
                           "%s: zeCommandListAppendMemoryCopy(%" PRIu64
                           " bytes, staging)",
                           call, sbytes))) {
            free(host);
            return st;
        }
    }

    pthread_mutex_lock(&g->mu);
    uint64_t seq = comm->seq++;
    for (r = g->rounds; r; r = r->next)
        if (r->seq == seq)
            break;
    if (!r) {
        r = calloc(1, sizeof(*r));
        if (r) {
            r->buf = calloc((size_t)g->nranks, sizeof(*r->buf));
            r->recv = calloc((size_t)g->nranks, sizeof(*r->recv));
            r->device = calloc((size_t)g->nranks, sizeof(*r->device));
        }
        if (!r || !r->buf || !r->recv || !r->device) {
            if (r) {
                free(r->buf);
                free(r->recv);
                free(r->device);
                free(r);
            }
            comm->seq--;
            pthread_mutex_unlock(&g->mu);
            free(host);
            return ze_fail(KEEL_STATUS_OUT_OF_MEMORY, "%s: no host memory",
                           call);
        }
        r->seq = seq;
        r->kind = kind;
        r->dtype = dtype;
        r->op = op;
        r->count = count;
        r->root = root;
        r->next = g->rounds;
        g->rounds = r;
    } else if (r->kind != kind || r->dtype != dtype || r->count != count ||
               (reducing && r->op != op) || r->root != root) {
        r->status = KEEL_STATUS_INVALID_ARGUMENT;
        snprintf(r->msg, sizeof(r->msg),
                 "collective #%" PRIu64 ": rank %d called %s (%" PRIu64
                 " elements) where another rank called %s (%" PRIu64
                 " elements)",
                 seq, (int)comm->rank, call, count, zc_names[r->kind],
                 r->count);
    }
    r->buf[comm->rank] = host;
    r->recv[comm->rank] = recv;
    r->device[comm->rank] = comm->device;
    if (++r->arrived == g->nranks) {
        if (!r->status)
            complete(g, r);
        r->done = true;
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    if (zc_depth > 0)
        return pend_add(g, r, comm);
    return wait_round(g, r, comm);
}

static keel_status ze_all_reduce(keel_comm comm, keel_stream stream,
                                 keel_dptr send, keel_dptr recv,
                                 uint64_t count, keel_dtype dtype,
                                 keel_reduce_op op)
{
    return run(comm, stream, ZC_ALL_REDUCE, send, recv, count, dtype, op, 0);
}

static keel_status ze_broadcast(keel_comm comm, keel_stream stream,
                                keel_dptr send, keel_dptr recv, uint64_t count,
                                keel_dtype dtype, int32_t root)
{
    return run(comm, stream, ZC_BROADCAST, send, recv, count, dtype,
               KEEL_REDUCE_SUM, root);
}

static keel_status ze_reduce(keel_comm comm, keel_stream stream,
                             keel_dptr send, keel_dptr recv, uint64_t count,
                             keel_dtype dtype, keel_reduce_op op, int32_t root)
{
    return run(comm, stream, ZC_REDUCE, send, recv, count, dtype, op, root);
}

static keel_status ze_all_gather(keel_comm comm, keel_stream stream,
                                 keel_dptr send, keel_dptr recv,
                                 uint64_t count, keel_dtype dtype)
{
    return run(comm, stream, ZC_ALL_GATHER, send, recv, count, dtype,
               KEEL_REDUCE_SUM, 0);
}

static keel_status ze_reduce_scatter(keel_comm comm, keel_stream stream,
                                     keel_dptr send, keel_dptr recv,
                                     uint64_t count, keel_dtype dtype,
                                     keel_reduce_op op)
{
    return run(comm, stream, ZC_REDUCE_SCATTER, send, recv, count, dtype, op,
               0);
}

static keel_status ze_all_to_all(keel_comm comm, keel_stream stream,
                                 keel_dptr send, keel_dptr recv,
                                 uint64_t count, keel_dtype dtype)
{
    return run(comm, stream, ZC_ALL_TO_ALL, send, recv, count, dtype,
               KEEL_REDUCE_SUM, 0);
}

static keel_status ze_send(keel_comm comm, keel_stream stream, keel_dptr buf,
                           uint64_t count, keel_dtype dtype, int32_t peer)
{
    keel_status st = comm_resolve(comm, "send");

    (void)stream, (void)buf, (void)count, (void)dtype, (void)peer;
    if (st)
        return st;
    return ze_fail(KEEL_STATUS_NOT_SUPPORTED,
                   "send: point-to-point is not provided by the levelzero "
                   "plugin's collectives");
}

static keel_status ze_recv(keel_comm comm, keel_stream stream, keel_dptr buf,
                           uint64_t count, keel_dtype dtype, int32_t peer)
{
    keel_status st = comm_resolve(comm, "recv");

    (void)stream, (void)buf, (void)count, (void)dtype, (void)peer;
    if (st)
        return st;
    return ze_fail(KEEL_STATUS_NOT_SUPPORTED,
                   "recv: point-to-point is not provided by the levelzero "
                   "plugin's collectives");
}

static keel_status ze_group_start(void)
{
    zc_depth++;
    return KEEL_STATUS_OK;
}

static keel_status ze_group_end(void)
{
    keel_status first = KEEL_STATUS_OK;

    if (zc_depth == 0)
        return ze_fail(KEEL_STATUS_INVALID_STATE,
                       "group_end without group_start");
    if (--zc_depth > 0)
        return KEEL_STATUS_OK;
    for (size_t i = 0; i < zc_npend; i++) {
        struct zc_pending *p = &zc_pend[i];
        keel_status st = p->r ? wait_round(p->g, p->r, p->c)
                              : wait_joined(p->g, p->c);
        if (st && !first)
            first = st;
    }
    zc_npend = 0;
    free(zc_pend);
    zc_pend = NULL;
    zc_cappend = 0;
    return first;
}

static keel_status ze_get_caps(int32_t device, keel_collective_caps *caps)
{
    keel_collective_caps c;
    uint32_t n;

    if (!caps || caps->struct_size < 4)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "get_caps: caps is NULL or its struct_size is below 4");
    if (device < 0 || device >= ze_g.ndev)
        return ze_fail(KEEL_STATUS_INVALID_DEVICE,
                       "get_caps: device %d does not exist (levelzero has %d)",
                       (int)device, (int)ze_g.ndev);
    memset(&c, 0, sizeof(c));
    c.collectives = KEEL_COLL_ALL_REDUCE | KEEL_COLL_BROADCAST |
                    KEEL_COLL_REDUCE | KEEL_COLL_ALL_GATHER |
                    KEEL_COLL_REDUCE_SCATTER | KEEL_COLL_ALL_TO_ALL;
    for (int d = 0; d < KEEL_DTYPE_COUNT_; d++)
        c.dtype_mask |= KEEL_DTYPE_BIT(d);
    c.reduce_ops = KEEL_REDUCE_OP_BIT(KEEL_REDUCE_SUM) |
                   KEEL_REDUCE_OP_BIT(KEEL_REDUCE_PROD) |
                   KEEL_REDUCE_OP_BIT(KEEL_REDUCE_MAX) |
                   KEEL_REDUCE_OP_BIT(KEEL_REDUCE_MIN) |
                   KEEL_REDUCE_OP_BIT(KEEL_REDUCE_AVG);
    c.timeout_ms = timeout_ms();
    n = caps->struct_size < sizeof(c) ? caps->struct_size : (uint32_t)sizeof(c);
    c.struct_size = n;
    memcpy(caps, &c, n);
    return KEEL_STATUS_OK;
}

void ze_collective_finalize(void)
{
    struct ze_range r;

    while (ze_rs_pop(&ze_g.handles, ZE_KIND_COMM, &r)) {
        struct keel_comm_s *c = (struct keel_comm_s *)r.base;
        group_unref(c->g);
        free(c);
    }
}

const keel_collective_ops ze_collective_ops = {
    .header = KEEL_TABLE_HEADER(keel_collective_ops),
    .get_unique_id = ze_get_unique_id,
    .comm_init_rank = ze_comm_init_rank,
    .comm_destroy = ze_comm_destroy,
    .comm_rank = ze_comm_rank,
    .all_reduce = ze_all_reduce,
    .broadcast = ze_broadcast,
    .reduce = ze_reduce,
    .all_gather = ze_all_gather,
    .reduce_scatter = ze_reduce_scatter,
    .all_to_all = ze_all_to_all,
    .send = ze_send,
    .recv = ze_recv,
    .group_start = ze_group_start,
    .group_end = ze_group_end,
    .get_caps = ze_get_caps,
};
