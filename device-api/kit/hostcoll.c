/*
 * keel plugin kit — in-process collectives staged through host memory
 * (include/keel/kit_hostcoll.h says what they do and how a plugin uses
 * them).
 *
 * Locks: hc_lock guards the list of cliques and of live communicators; each
 * clique's mutex guards its ranks and rounds, and its condition variable
 * wakes every waiter of that clique. Device copies and reductions run with
 * the clique's mutex held by the last rank to arrive, so that no rank can
 * see a round half written.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <keel/kit.h>
#include <keel/kit_hostcoll.h>

#define HC_DEFAULT_TIMEOUT_MS 60000u
#define HC_MAX_TIMEOUT_MS 86400000ul
#define HC_MAX_RANKS 4096
#define HC_MSG 384
#define HC_MAGIC 0x6b68636fu /* "khco" */

enum hc_kind { HC_ALL_REDUCE, HC_BROADCAST, HC_REDUCE, HC_ALL_GATHER,
               HC_REDUCE_SCATTER, HC_ALL_TO_ALL, HC_SEND, HC_RECV,
               HC_ALL_TO_ALLV };

static const char *const hc_names[] = {"all_reduce", "broadcast", "reduce",
                                       "all_gather", "reduce_scatter",
                                       "all_to_all", "send", "recv",
                                       "all_to_allv"};

struct hc_round {
    bool p2p;
    uint64_t seq;
    int32_t src, dst;     /* p2p: sender and receiver rank */
    enum hc_kind kind;    /* collectives: the kind; p2p: HC_SEND */
    keel_dtype dtype;
    keel_reduce_op op;
    uint64_t count;
    int32_t root;
    int nparties, arrived, consumed;
    bool done;
    keel_status status;
    char msg[HC_MSG];
    void **buf;           /* per rank (p2p: [0]): staged send data */
    keel_dptr *recv;      /* per rank (p2p: [0]): receive buffer */
    int32_t *device;      /* per rank (p2p: [0]): the receiver's device */
    /* all_to_allv, per rank: its 4 x nranks counts (send counts, send
     * displacements, recv counts, recv displacements) and the element
     * of `send` its staged buffer starts at */
    uint64_t **v;
    uint64_t *soff;
    struct hc_round *next;
};

struct hc_clique {
    keel_comm_id id;
    int32_t nranks, joined, refs;
    struct hc_comm **ranks;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct hc_round *rounds;
    struct hc_clique *next;
};

struct hc_comm {
    uint32_t magic;
    struct hc_clique *g;
    int32_t rank, device;
    uint64_t seq;                 /* collectives issued */
    uint64_t *send_seq, *recv_seq; /* per peer */
    struct hc_comm *next_live;
};

static pthread_mutex_t hc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hc_clique *hc_cliques;
static struct hc_comm *hc_live;

/* Per thread: group depth and what the outermost group_end waits for. */
struct hc_pending {
    struct hc_clique *g;
    struct hc_round *r; /* NULL: a join */
    struct hc_comm *c;  /* a join: the joining communicator */
    int32_t rank;
};
static _Thread_local int hc_depth;
static _Thread_local struct hc_pending *hc_pend;
static _Thread_local size_t hc_npend, hc_cappend;

/* ---- helpers ------------------------------------------------------------- */

__attribute__((format(printf, 3, 4))) static keel_status
hc_fail(const keel_kit_hostcoll *b, keel_status st, const char *fmt, ...)
{
    char msg[HC_MSG];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return b->fail(st, msg);
}

uint32_t keel_kit_hc_timeout_ms(const keel_kit_hostcoll *b)
{
    const char *v = NULL;
    char *end = NULL;
    unsigned long n;

    if (b->timeout_env)
        v = b->env ? b->env(b->timeout_env) : getenv(b->timeout_env);
    if (!v || !*v)
        return HC_DEFAULT_TIMEOUT_MS;
    errno = 0;
    n = strtoul(v, &end, 10);
    if (errno || *end || n == 0 || n > HC_MAX_TIMEOUT_MS)
        return HC_DEFAULT_TIMEOUT_MS;
    return (uint32_t)n;
}

static void hc_deadline(const keel_kit_hostcoll *b, struct timespec *ts)
{
    uint32_t ms = keel_kit_hc_timeout_ms(b);

    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static keel_status hc_pend_add(const keel_kit_hostcoll *b,
                               struct hc_pending p)
{
    if (hc_npend == hc_cappend) {
        size_t cap = hc_cappend ? hc_cappend * 2 : 16;
        struct hc_pending *n = realloc(hc_pend, cap * sizeof(*n));
        if (!n)
            return hc_fail(b, KEEL_STATUS_OUT_OF_MEMORY,
                           "group: no host memory for pending collectives");
        hc_pend = n;
        hc_cappend = cap;
    }
    hc_pend[hc_npend++] = p;
    return KEEL_STATUS_OK;
}

/* The live communicator behind `comm`, or NULL after reporting why. */
static struct hc_comm *hc_resolve(const keel_kit_hostcoll *b, keel_comm comm,
                                  const char *call)
{
    struct hc_comm *c;

    pthread_mutex_lock(&hc_lock);
    for (c = hc_live; c; c = c->next_live)
        if ((void *)c == (void *)comm)
            break;
    pthread_mutex_unlock(&hc_lock);
    if (!c || c->magic != HC_MAGIC) {
        hc_fail(b, KEEL_STATUS_INVALID_HANDLE,
                "%s: %p is not a live communicator of the %s plugin", call,
                (void *)comm, b->plugin);
        return NULL;
    }
    return c;
}

static void hc_round_free(struct hc_round *r, int nbuf)
{
    if (r->v)
        for (int i = 0; i < nbuf; i++)
            free(r->v[i]);
    free(r->v);
    free(r->soff);
    if (r->buf)
        for (int i = 0; i < nbuf; i++)
            free(r->buf[i]);
    free(r->buf);
    free(r->recv);
    free(r->device);
    free(r);
}

static void hc_clique_unref(struct hc_clique *g)
{
    bool last;

    pthread_mutex_lock(&hc_lock);
    last = --g->refs == 0;
    if (last)
        for (struct hc_clique **p = &hc_cliques; *p; p = &(*p)->next)
            if (*p == g) {
                *p = g->next;
                break;
            }
    pthread_mutex_unlock(&hc_lock);
    if (!last)
        return;
    while (g->rounds) {
        struct hc_round *r = g->rounds;
        g->rounds = r->next;
        hc_round_free(r, r->p2p ? 1 : g->nranks);
    }
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->ranks);
    free(g);
}

static void hc_comm_free(struct hc_comm *c)
{
    c->magic = 0;
    free(c->send_seq);
    free(c->recv_seq);
    free(c);
}

/* Unlink c from the live list; false when it was not there. */
static bool hc_unlink(struct hc_comm *c)
{
    bool found = false;

    pthread_mutex_lock(&hc_lock);
    for (struct hc_comm **p = &hc_live; *p; p = &(*p)->next_live)
        if (*p == c) {
            *p = c->next_live;
            found = true;
            break;
        }
    pthread_mutex_unlock(&hc_lock);
    return found;
}

/* ---- communicators -------------------------------------------------------- */

keel_status keel_kit_hc_get_unique_id(const keel_kit_hostcoll *b,
                                      keel_comm_id *id)
{
    static _Atomic uint64_t counter;
    struct timespec ts;
    uint64_t v[3];

    if (!id)
        return hc_fail(b, KEEL_STATUS_INVALID_ARGUMENT,
                       "get_unique_id: id is NULL");
    memset(id, 0, sizeof(*id));
    clock_gettime(CLOCK_REALTIME, &ts);
    v[0] = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    v[1] = atomic_fetch_add(&counter, 1) + 1;
    v[2] = (uint64_t)(uintptr_t)&counter;
    memcpy(id->bytes, "keel-hc", 7);
    memcpy(id->bytes + 8, v, sizeof(v));
    return KEEL_STATUS_OK;
}

static keel_status hc_wait_joined(const keel_kit_hostcoll *b,
                                  struct hc_clique *g, struct hc_comm *c)
{
    struct timespec ts;
    keel_status st = KEEL_STATUS_OK;

    hc_deadline(b, &ts);
    pthread_mutex_lock(&g->mu);
    while (g->joined < g->nranks)
        if (pthread_cond_timedwait(&g->cv, &g->mu, &ts) == ETIMEDOUT) {
            st = hc_fail(b, KEEL_STATUS_TIMEOUT,
                         "comm_init_rank: rank %d of %d on %s:%d timed out "
                         "after %u ms with %d of %d ranks joined (%s); "
                         "the %s plugin's collectives join ranks of this "
                         "process only",
                         (int)c->rank, (int)g->nranks, b->device_type,
                         (int)c->device, keel_kit_hc_timeout_ms(b),
                         (int)g->joined, (int)g->nranks,
                         b->timeout_env ? b->timeout_env : "timeout",
                         b->plugin);
            break;
        }
    pthread_mutex_unlock(&g->mu);
    return st;
}

/* Undo a join that failed: the rank's slot is free again. */
static void hc_unjoin(struct hc_comm *c)
{
    struct hc_clique *g = c->g;

    hc_unlink(c);
    pthread_mutex_lock(&g->mu);
    if (g->ranks[c->rank] == c) {
        g->ranks[c->rank] = NULL;
        g->joined--;
    }
    pthread_mutex_unlock(&g->mu);
    hc_clique_unref(g);
    hc_comm_free(c);
}

keel_status keel_kit_hc_comm_init_rank(const keel_kit_hostcoll *b,
                                       int32_t device, int32_t nranks,
                                       const keel_comm_id *id, int32_t rank,
                                       keel_comm *comm)
{
    keel_status st = b->enter(device, "comm_init_rank");
    struct hc_clique *g;
    struct hc_comm *c;

    if (st)
        return st;
    if (!id || !comm)
        return hc_fail(b, KEEL_STATUS_INVALID_ARGUMENT,
                       "comm_init_rank: %s is NULL", id ? "comm" : "id");
    *comm = NULL;
    if (nranks < 1 || nranks > HC_MAX_RANKS || rank < 0 || rank >= nranks)
        return hc_fail(b, KEEL_STATUS_INVALID_ARGUMENT,
                       "comm_init_rank: rank %d of %d ranks (1 to %d ranks)",
                       (int)rank, (int)nranks, HC_MAX_RANKS);
    c = calloc(1, sizeof(*c));
    if (c) {
        c->send_seq = calloc((size_t)nranks, sizeof(*c->send_seq));
        c->recv_seq = calloc((size_t)nranks, sizeof(*c->recv_seq));
    }
    if (!c || !c->send_seq || !c->recv_seq) {
        if (c)
            hc_comm_free(c);
        return hc_fail(b, KEEL_STATUS_OUT_OF_MEMORY,
                       "comm_init_rank: no host memory");
    }
    c->magic = HC_MAGIC;
    c->rank = rank;
    c->device = device;

    pthread_mutex_lock(&hc_lock);
    for (g = hc_cliques; g; g = g->next)
        if (!memcmp(&g->id, id, sizeof(*id)))
            break;
    if (!g) {
        g = calloc(1, sizeof(*g));
        if (g)
            g->ranks = calloc((size_t)nranks, sizeof(*g->ranks));
        if (!g || !g->ranks) {
            pthread_mutex_unlock(&hc_lock);
            free(g);
            hc_comm_free(c);
            return hc_fail(b, KEEL_STATUS_OUT_OF_MEMORY,
                           "comm_init_rank: no host memory");
        }
        g->id = *id;
        g->nranks = nranks;
        pthread_mutex_init(&g->mu, NULL);
        pthread_cond_init(&g->cv, NULL);
        g->next = hc_cliques;
        hc_cliques = g;
    }
    if (g->nranks != nranks || g->ranks[rank]) {
        int32_t have = g->nranks;
        bool taken = g->nranks == nranks;
        pthread_mutex_unlock(&hc_lock);
        hc_comm_free(c);
        if (taken)
            return hc_fail(b, KEEL_STATUS_INVALID_ARGUMENT,
                           "comm_init_rank: rank %d of this id has already "
                           "joined (%d ranks)",
                           (int)rank, (int)have);
        return hc_fail(b, KEEL_STATUS_INVALID_ARGUMENT,
                       "comm_init_rank: rank %d asks for %d ranks but the "
                       "id's communicator has %d",
                       (int)rank, (int)nranks, (int)have);
    }
    g->refs++;
    c->g = g;
    pthread_mutex_lock(&g->mu);
    g->ranks[rank] = c;
    g->joined++;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    c->next_live = hc_live;
    hc_live = c;
    pthread_mutex_unlock(&hc_lock);

    if (hc_depth > 0)
        st = hc_pend_add(b, (struct hc_pending){g, NULL, c, c->rank});
    else
        st = hc_wait_joined(b, g, c);
    if (st) {
        hc_unjoin(c);
        return st;
    }
    *comm = (keel_comm)(void *)c;
    return KEEL_STATUS_OK;
}

keel_status keel_kit_hc_comm_destroy(const keel_kit_hostcoll *b,
                                     keel_comm comm)
{
    struct hc_comm *c = hc_resolve(b, comm, "comm_destroy");
    struct hc_clique *g;

    if (!c)
        return KEEL_STATUS_INVALID_HANDLE;
    if (!hc_unlink(c))
        return hc_fail(b, KEEL_STATUS_INVALID_HANDLE,
                       "comm_destroy: communicator destroyed meanwhile");
    g = c->g;
    pthread_mutex_lock(&g->mu);
    g->ranks[c->rank] = NULL;
    pthread_mutex_unlock(&g->mu);
    hc_clique_unref(g);
    hc_comm_free(c);
    return KEEL_STATUS_OK;
}

keel_status keel_kit_hc_comm_rank(const keel_kit_hostcoll *b, keel_comm comm,
                                  int32_t *rank, int32_t *nranks)
{
    struct hc_comm *c = hc_resolve(b, comm, "comm_rank");

    if (!c)
        return KEEL_STATUS_INVALID_HANDLE;
    if (!rank || !nranks)
        return hc_fail(b, KEEL_STATUS_INVALID_ARGUMENT,
                       "comm_rank: %s is NULL", rank ? "nranks" : "rank");
    *rank = c->rank;
    *nranks = c->g->nranks;
    return KEEL_STATUS_OK;
}

/* ---- host arithmetic ------------------------------------------------------ */

static double hc_ld(const void *p, keel_dtype dt, uint64_t i)
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

/* Integer results wrap as the device's own arithmetic would: the sum of
 * narrow integers is exact in double and reduced modulo 2^bits here. */
static void hc_st(void *p, keel_dtype dt, uint64_t i, double v)
{
    switch (dt) {
    case KEEL_F32: ((float *)p)[i] = (float)v; break;
    case KEEL_F64: ((double *)p)[i] = v; break;
    case KEEL_F16: ((uint16_t *)p)[i] = keel_kit_f32_to_f16((float)v); break;
    case KEEL_BF16: ((uint16_t *)p)[i] = keel_kit_f32_to_bf16((float)v); break;
    case KEEL_I8: ((int8_t *)p)[i] = (int8_t)(uint8_t)(int64_t)v; break;
    case KEEL_U8: ((uint8_t *)p)[i] = (uint8_t)(int64_t)v; break;
    case KEEL_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)(int64_t)v; break;
    default: break;
    }
}

/* out[i] = op over ranks of in[r][off + i], i < n. int64 and int32
 * exactly (products of int32 overflow double), the others through double
 * (exact for every narrower dtype's sum). */
static void hc_reduce(void *out, void *const *in, int nr, keel_dtype dt,
                      keel_reduce_op op, uint64_t off, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        if (dt == KEEL_I64 || dt == KEEL_I32) {
            bool wide = dt == KEEL_I64;
            int64_t a = wide ? ((const int64_t *)in[0])[off + i]
                             : ((const int32_t *)in[0])[off + i];
            for (int r = 1; r < nr; r++) {
                int64_t v = wide ? ((const int64_t *)in[r])[off + i]
                                 : ((const int32_t *)in[r])[off + i];
                switch (op) {
                case KEEL_REDUCE_SUM: a = (int64_t)((uint64_t)a + (uint64_t)v); break;
                case KEEL_REDUCE_PROD: a = (int64_t)((uint64_t)a * (uint64_t)v); break;
                case KEEL_REDUCE_MAX: a = v > a ? v : a; break;
                case KEEL_REDUCE_MIN: a = v < a ? v : a; break;
                default: break;
                }
                if (!wide)
                    a = (int32_t)(uint32_t)(uint64_t)a;
            }
            if (wide)
                ((int64_t *)out)[i] = a;
            else
                ((int32_t *)out)[i] = (int32_t)a;
            continue;
        }
        double a = hc_ld(in[0], dt, off + i);
        for (int r = 1; r < nr; r++) {
            double v = hc_ld(in[r], dt, off + i);
            switch (op) {
            case KEEL_REDUCE_SUM:
            case KEEL_REDUCE_AVG: a += v; break;
            case KEEL_REDUCE_PROD: a *= v; break;
            case KEEL_REDUCE_MAX: a = v > a || v != v ? v : a; break;
            case KEEL_REDUCE_MIN: a = v < a || v != v ? v : a; break;
            default: break;
            }
            /* narrow integer products leave double's exact range */
            if (op == KEEL_REDUCE_PROD && (dt == KEEL_I8 || dt == KEEL_U8))
                a = dt == KEEL_I8 ? (double)(int8_t)(uint8_t)(int64_t)a
                                  : (double)(uint8_t)(int64_t)a;
        }
        if (op == KEEL_REDUCE_AVG)
            a /= nr;
        hc_st(out, dt, i, a);
    }
}

/* ---- rounds --------------------------------------------------------------- */

static void hc_write(const keel_kit_hostcoll *b, struct hc_round *r, int slot,
                     int rank, const void *src, uint64_t bytes)
{
    char why[HC_MSG / 2];
    keel_status st;

    if (bytes == 0 || r->status)
        return;
    why[0] = 0;
    st = b->write(r->device[slot], r->recv[slot], src, bytes, why,
                  sizeof(why));
    if (st) {
        r->status = st;
        snprintf(r->msg, sizeof(r->msg),
                 "%s: writing %" PRIu64 " bytes to rank %d on %s:%d: %s",
                 hc_names[r->kind], bytes, rank, b->device_type,
                 (int)r->device[slot], why[0] ? why : "copy failed");
    }
}

/* all_to_allv: check the pairing, then write each block where its
 * receiver wants it. Called with g->mu held. */
static void hc_complete_v(const keel_kit_hostcoll *b, struct hc_round *r,
                          int nr)
{
    size_t n = (size_t)nr, es = keel_dtype_size(r->dtype);
    char why[HC_MSG / 2];

    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            if (r->v[i][j] != r->v[j][2 * n + i]) {
                r->status = KEEL_STATUS_INVALID_ARGUMENT;
                snprintf(r->msg, sizeof(r->msg),
                         "all_to_allv #%" PRIu64 ": rank %zu sends %" PRIu64
                         " elements to rank %zu, which expects %" PRIu64,
                         r->seq, i, r->v[i][j], j, r->v[j][2 * n + i]);
                return;
            }
    for (size_t j = 0; j < n && !r->status; j++)
        for (size_t i = 0; i < n && !r->status; i++) {
            uint64_t cnt = r->v[i][j];
            const char *src;
            keel_dptr dst;
            keel_status st;

            if (!cnt) /* its displacement may lie outside the staged span */
                continue;
            src = (const char *)r->buf[i] + (r->v[i][n + j] - r->soff[i]) * es;
            dst = r->recv[j] + r->v[j][3 * n + i] * es;
            why[0] = 0;
            st = b->write(r->device[j], dst, src, cnt * es, why, sizeof(why));
            if (st) {
                r->status = st;
                snprintf(r->msg, sizeof(r->msg),
                         "all_to_allv: writing %" PRIu64 " elements from "
                         "rank %zu to rank %zu on %s:%d: %s",
                         cnt, i, j, b->device_type, (int)r->device[j],
                         why[0] ? why : "copy failed");
            }
        }
}

/* The last party computes every rank's result. Called with g->mu held. */
static void hc_complete(const keel_kit_hostcoll *b, struct hc_clique *g,
                        struct hc_round *r)
{
    int nr = g->nranks;
    uint64_t blk = r->count * keel_dtype_size(r->dtype);
    void *tmp;

    if (r->p2p) {
        hc_write(b, r, 0, r->dst, r->buf[0], blk);
        return;
    }
    if (r->kind == HC_ALL_TO_ALLV) {
        hc_complete_v(b, r, nr);
        return;
    }
    tmp = malloc(blk * (uint64_t)nr > 0 ? blk * (uint64_t)nr : 1);
    if (!tmp) {
        r->status = KEEL_STATUS_OUT_OF_MEMORY;
        snprintf(r->msg, sizeof(r->msg),
                 "%s: no host memory for %" PRIu64 " bytes of staging",
                 hc_names[r->kind], blk * (uint64_t)nr);
        return;
    }
    switch (r->kind) {
    case HC_ALL_REDUCE:
    case HC_REDUCE:
        hc_reduce(tmp, r->buf, nr, r->dtype, r->op, 0, r->count);
        for (int i = 0; i < nr; i++)
            if (r->kind == HC_ALL_REDUCE || i == r->root)
                hc_write(b, r, i, i, tmp, blk);
        break;
    case HC_BROADCAST:
        for (int i = 0; i < nr; i++)
            hc_write(b, r, i, i, r->buf[r->root], blk);
        break;
    case HC_ALL_GATHER:
        for (int i = 0; i < nr; i++)
            memcpy((char *)tmp + (uint64_t)i * blk, r->buf[i], blk);
        for (int i = 0; i < nr; i++)
            hc_write(b, r, i, i, tmp, blk * (uint64_t)nr);
        break;
    case HC_REDUCE_SCATTER:
        for (int i = 0; i < nr; i++) {
            hc_reduce(tmp, r->buf, nr, r->dtype, r->op, (uint64_t)i * r->count,
                      r->count);
            hc_write(b, r, i, i, tmp, blk);
        }
        break;
    case HC_ALL_TO_ALL:
        for (int j = 0; j < nr; j++) {
            for (int i = 0; i < nr; i++)
                memcpy((char *)tmp + (uint64_t)i * blk,
                       (char *)r->buf[i] + (uint64_t)j * blk, blk);
            hc_write(b, r, j, j, tmp, blk * (uint64_t)nr);
        }
        break;
    default:
        break;
    }
    free(tmp);
}

/* One party is finished with the round. Called with g->mu held. */
static void hc_consume(struct hc_clique *g, struct hc_round *r)
{
    if (++r->consumed < r->nparties)
        return;
    for (struct hc_round **p = &g->rounds; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    hc_round_free(r, r->p2p ? 1 : g->nranks);
}

static keel_status hc_wait_round(const keel_kit_hostcoll *b,
                                 struct hc_clique *g, struct hc_round *r,
                                 int32_t rank)
{
    struct timespec ts;
    keel_status st = KEEL_STATUS_OK;
    const char *call = r->p2p ? "recv" : hc_names[r->kind];

    hc_deadline(b, &ts);
    pthread_mutex_lock(&g->mu);
    while (!r->done && !r->status)
        if (pthread_cond_timedwait(&g->cv, &g->mu, &ts) == ETIMEDOUT) {
            if (r->done || r->status)
                break;
            /* Latecomers must not write to this rank's buffer any more:
             * the round fails for everybody. */
            r->status = KEEL_STATUS_TIMEOUT;
            snprintf(r->msg, sizeof(r->msg),
                     "%s #%" PRIu64 ": rank %d timed out after %u ms with "
                     "%d of %d parties arrived (%s); one thread driving "
                     "several ranks must use group_start/group_end, and "
                     "ranks of other processes cannot join",
                     call, r->seq, (int)rank, keel_kit_hc_timeout_ms(b),
                     r->arrived, r->nparties,
                     b->timeout_env ? b->timeout_env : "timeout");
            break;
        }
    if (r->status)
        st = r->status;
    if (st) {
        char msg[HC_MSG];
        memcpy(msg, r->msg, sizeof(msg));
        hc_consume(g, r);
        pthread_mutex_unlock(&g->mu);
        return b->fail(st, msg);
    }
    hc_consume(g, r);
    pthread_mutex_unlock(&g->mu);
    return KEEL_STATUS_OK;
}

static bool hc_reducing(enum hc_kind k)
{
    return k == HC_ALL_REDUCE || k == HC_REDUCE || k == HC_REDUCE_SCATTER;
}

static keel_status hc_check_args(const keel_kit_hostcoll *b,
                                 const struct hc_comm *c, enum hc_kind kind,
                                 uint64_t count, keel_dtype dtype,
                                 keel_reduce_op op, int32_t root)
{
    const char *call = hc_names[kind];
    int32_t n = c->g->nranks;

    if ((unsigned)dtype >= KEEL_DTYPE_COUNT_)
        return hc_fail(b, KEEL_STATUS_INVALID_ARGUMENT, "%s: dtype %d", call,
                       (int)dtype);
    if (hc_reducing(kind)) {
        if ((unsigned)op >= KEEL_REDUCE_OP_COUNT_)
            return hc_fail(b, KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: reduce op %d", call, (int)op);
        if (dtype == KEEL_BOOL)
            return hc_fail(b, KEEL_STATUS_NOT_SUPPORTED,
                           "%s: bool has no reduction in the %s plugin's "
                           "collectives",
                           call, b->plugin);
        if (op == KEEL_REDUCE_AVG && !keel_kit_float_dtype(dtype))
            return hc_fail(b, KEEL_STATUS_NOT_SUPPORTED,
                           "%s: avg needs a floating dtype, not %s", call,
                           keel_kit_dtype_name(dtype));
    }
    if ((kind == HC_BROADCAST || kind == HC_REDUCE || kind == HC_SEND ||
         kind == HC_RECV) &&
        (root < 0 || root >= n))
        return hc_fail(b, KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: %s %d is outside [0, %d)", call,
                       kind == HC_SEND || kind == HC_RECV ? "peer" : "root",
                       (int)root, (int)n);
    if ((kind == HC_SEND || kind == HC_RECV) && root == c->rank)
        return hc_fail(b, KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: peer %d is the calling rank itself", call,
                       (int)root);
    if (count > UINT64_MAX / keel_dtype_size(dtype) / (uint64_t)n ||
        count * keel_dtype_size(dtype) * (uint64_t)n > (uint64_t)SIZE_MAX)
        return hc_fail(b, KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: %" PRIu64 " elements x %d ranks overflow", call,
                       count, (int)n);
    return KEEL_STATUS_OK;
}

static keel_status hc_check_buf(const keel_kit_hostcoll *b,
                                const struct hc_comm *c, const char *call,
                                const char *name, keel_dptr p, uint64_t bytes)
{
    if (!bytes)
        return KEEL_STATUS_OK;
    if (!p || p > UINT64_MAX - bytes)
        return hc_fail(b, KEEL_STATUS_INVALID_ARGUMENT,
                       "%s(%s:%d): %s 0x%" PRIx64 " is not a buffer of %" PRIu64
                       " bytes",
                       call, b->device_type, (int)c->device, name, p, bytes);
    return b->check_buffer ? b->check_buffer(c->device, p, bytes, call)
                           : KEEL_STATUS_OK;
}

/* Stage `bytes` of `src` in host memory, after the stream's earlier work. */
static keel_status hc_stage(const keel_kit_hostcoll *b,
                            const struct hc_comm *c, keel_stream stream,
                            const char *call, keel_dptr src, uint64_t bytes,
                            void **out)
{
    keel_status st = b->stream_wait(c->device, stream, call);
    char why[HC_MSG / 2];
    void *host;

    *out = NULL;
    if (st)
        return st;
    host = malloc(bytes ? (size_t)bytes : 1);
    if (!host)
        return hc_fail(b, KEEL_STATUS_OUT_OF_MEMORY,
                       "%s: no host memory for %" PRIu64 " bytes of staging",
                       call, bytes);
    if (bytes && src) {
        why[0] = 0;
        st = b->read(c->device, host, src, bytes, why, sizeof(why));
        if (st) {
            free(host);
            return hc_fail(b, st, "%s: staging %" PRIu64 " bytes from %s:%d: %s",
                           call, bytes, b->device_type, (int)c->device,
                           why[0] ? why : "copy failed");
        }
    }
    *out = host;
    return KEEL_STATUS_OK;
}

static struct hc_round *hc_round_new(int nslots)
{
    struct hc_round *r = calloc(1, sizeof(*r));

    if (!r)
        return NULL;
    r->buf = calloc((size_t)nslots, sizeof(*r->buf));
    r->recv = calloc((size_t)nslots, sizeof(*r->recv));
    r->device = calloc((size_t)nslots, sizeof(*r->device));
    if (!r->buf || !r->recv || !r->device) {
        hc_round_free(r, 0);
        return NULL;
    }
    return r;
}

/*
 * The collective round `seq` of g (g->mu held): the one a rank made
 * already, or a new one of `kind` and `dtype` for every rank (*fresh set),
 * with the per-rank count arrays an all_to_allv round needs. NULL without
 * host memory.
 */
static struct hc_round *hc_round_get(struct hc_clique *g, uint64_t seq,
                                     enum hc_kind kind, keel_dtype dtype,
                                     bool *fresh)
{
    struct hc_round *r;

    *fresh = false;
    for (r = g->rounds; r; r = r->next)
        if (!r->p2p && r->seq == seq)
            return r;
    r = hc_round_new(g->nranks);
    if (r && kind == HC_ALL_TO_ALLV) {
        r->v = calloc((size_t)g->nranks, sizeof(*r->v));
        r->soff = calloc((size_t)g->nranks, sizeof(*r->soff));
        if (!r->v || !r->soff) {
            hc_round_free(r, g->nranks);
            return NULL;
        }
    }
    if (!r)
        return NULL;
    r->seq = seq;
    r->kind = kind;
    r->dtype = dtype;
    r->nparties = g->nranks;
    r->next = g->rounds;
    g->rounds = r;
    *fresh = true;
    return r;
}

/*
 * Deposit this rank's part of collective round r (g->mu held; released
 * here) and run the round when this rank is the last to arrive; then wait
 * for the round, or leave the wait to group_end inside a group.
 */
static keel_status hc_arrive(const keel_kit_hostcoll *b, struct hc_clique *g,
                             struct hc_round *r, const struct hc_comm *c,
                             void *host, keel_dptr recv)
{
    r->buf[c->rank] = host;
    r->recv[c->rank] = recv;
    r->device[c->rank] = c->device;
    if (++r->arrived == r->nparties) {
        if (!r->status)
            hc_complete(b, g, r);
        r->done = true;
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    if (hc_depth > 0)
        return hc_pend_add(b, (struct hc_pending){g, r, NULL, c->rank});
    return hc_wait_round(b, g, r, c->rank);
}

static keel_status hc_run(const keel_kit_hostcoll *b, keel_comm comm,
                          keel_stream stream, enum hc_kind kind,
                          keel_dptr send, keel_dptr recv, uint64_t count,
                          keel_dtype dtype, keel_reduce_op op, int32_t root)
{
    const char *call = hc_names[kind];
    struct hc_comm *c = hc_resolve(b, comm, call);
    struct hc_clique *g;
    struct hc_round *r;
    uint64_t sbytes, rbytes;
    keel_status st;
    void *host = NULL;

    if (!c)
        return KEEL_STATUS_INVALID_HANDLE;
    g = c->g;
    if ((st = hc_check_args(b, c, kind, count, dtype, op, root)))
        return st;
    sbytes = rbytes = count * keel_dtype_size(dtype);
    if (kind == HC_REDUCE_SCATTER || kind == HC_ALL_TO_ALL)
        sbytes *= (uint64_t)g->nranks;
    if (kind == HC_ALL_GATHER || kind == HC_ALL_TO_ALL)
        rbytes *= (uint64_t)g->nranks;
    bool sends = kind != HC_BROADCAST || c->rank == root;
    bool recvs = kind != HC_REDUCE || c->rank == root;
    if (!sends)
        sbytes = 0;
    if ((sends && (st = hc_check_buf(b, c, call, "send", send, sbytes))) ||
        (recvs && (st = hc_check_buf(b, c, call, "recv", recv, rbytes))))
        return st;
    if ((st = hc_stage(b, c, stream, call, send, sbytes, &host)))
        return st;

    pthread_mutex_lock(&g->mu);
    uint64_t seq = c->seq++;
    bool fresh;
    r = hc_round_get(g, seq, kind, dtype, &fresh);
    if (!r) {
        c->seq--;
        pthread_mutex_unlock(&g->mu);
        free(host);
        return hc_fail(b, KEEL_STATUS_OUT_OF_MEMORY, "%s: no host memory",
                       call);
    }
    if (fresh) {
        r->op = op;
        r->count = count;
        r->root = root;
    } else if (!r->status &&
               (r->kind != kind || r->dtype != dtype || r->count != count ||
                (hc_reducing(kind) && r->op != op) || r->root != root)) {
        r->status = KEEL_STATUS_INVALID_ARGUMENT;
        snprintf(r->msg, sizeof(r->msg),
                 "collective #%" PRIu64 ": rank %d called %s (%" PRIu64
                 " elements of %s, root %d) where another rank called %s "
                 "(%" PRIu64 " elements of %s, root %d)",
                 seq, (int)c->rank, call, count, keel_kit_dtype_name(dtype),
                 (int)root, hc_names[r->kind], r->count,
                 keel_kit_dtype_name(r->dtype), (int)r->root);
        pthread_cond_broadcast(&g->cv);
    }
    return hc_arrive(b, g, r, c, host, recvs ? recv : 0);
}

keel_status keel_kit_hc_all_reduce(const keel_kit_hostcoll *b, keel_comm comm,
                                   keel_stream stream, keel_dptr send,
                                   keel_dptr recv, uint64_t count,
                                   keel_dtype dtype, keel_reduce_op op)
{
    return hc_run(b, comm, stream, HC_ALL_REDUCE, send, recv, count, dtype, op,
                  0);
}

keel_status keel_kit_hc_broadcast(const keel_kit_hostcoll *b, keel_comm comm,
                                  keel_stream stream, keel_dptr send,
                                  keel_dptr recv, uint64_t count,
                                  keel_dtype dtype, int32_t root)
{
    return hc_run(b, comm, stream, HC_BROADCAST, send, recv, count, dtype,
                  KEEL_REDUCE_SUM, root);
}

keel_status keel_kit_hc_reduce(const keel_kit_hostcoll *b, keel_comm comm,
                               keel_stream stream, keel_dptr send,
                               keel_dptr recv, uint64_t count,
                               keel_dtype dtype, keel_reduce_op op,
                               int32_t root)
{
    return hc_run(b, comm, stream, HC_REDUCE, send, recv, count, dtype, op,
                  root);
}

keel_status keel_kit_hc_all_gather(const keel_kit_hostcoll *b, keel_comm comm,
                                   keel_stream stream, keel_dptr send,
                                   keel_dptr recv, uint64_t count,
                                   keel_dtype dtype)
{
    return hc_run(b, comm, stream, HC_ALL_GATHER, send, recv, count, dtype,
                  KEEL_REDUCE_SUM, 0);
}

keel_status keel_kit_hc_reduce_scatter(const keel_kit_hostcoll *b,
                                       keel_comm comm, keel_stream stream,
                                       keel_dptr send, keel_dptr recv,
                                       uint64_t count, keel_dtype dtype,
                                       keel_reduce_op op)
{
    return hc_run(b, comm, stream, HC_REDUCE_SCATTER, send, recv, count, dtype,
                  op, 0);
}

keel_status keel_kit_hc_all_to_all(const keel_kit_hostcoll *b, keel_comm comm,
                                   keel_stream stream, keel_dptr send,
                                   keel_dptr recv, uint64_t count,
                                   keel_dtype dtype)
{
    return hc_run(b, comm, stream, HC_ALL_TO_ALL, send, recv, count, dtype,
                  KEEL_REDUCE_SUM, 0);
}

/* ---- all_to_allv ---------------------------------------------------------- */

keel_status keel_kit_hc_all_to_allv(const keel_kit_hostcoll *b, keel_comm comm,
                                    keel_stream stream, keel_dptr send,
                                    const uint64_t *send_counts,
                                    const uint64_t *send_displs,
                                    keel_dptr recv,
                                    const uint64_t *recv_counts,
                                    const uint64_t *recv_displs,
                                    keel_dtype dtype)
{
    static const char *const names[4] = {"send_counts", "send_displs",
                                         "recv_counts", "recv_displs"};
    const char *call = "all_to_allv";
    struct hc_comm *c = hc_resolve(b, comm, call);
    const uint64_t *arr[4] = {send_counts, send_displs, recv_counts,
                              recv_displs};
    uint64_t lo[2] = {UINT64_MAX, UINT64_MAX}, hi[2] = {0, 0}, es;
    struct hc_clique *g;
    struct hc_round *r;
    uint64_t *v;
    keel_status st;
    void *host = NULL;
    size_t n;

    if (!c)
        return KEEL_STATUS_INVALID_HANDLE;
    g = c->g;
    n = (size_t)g->nranks;
    if ((unsigned)dtype >= KEEL_DTYPE_COUNT_)
        return hc_fail(b, KEEL_STATUS_INVALID_ARGUMENT, "%s: dtype %d", call,
                       (int)dtype);
    es = keel_dtype_size(dtype);
    for (int k = 0; k < 4; k++)
        if (!arr[k])
            return hc_fail(b, KEEL_STATUS_INVALID_ARGUMENT, "%s: %s is NULL",
                           call, names[k]);
    for (int side = 0; side < 2; side++)
        for (size_t j = 0; j < n; j++) {
            uint64_t cnt = arr[2 * side][j], dsp = arr[2 * side + 1][j];
            if (!cnt)
                continue;
            if (cnt > UINT64_MAX - dsp || cnt + dsp > UINT64_MAX / es ||
                (cnt + dsp) * es > (uint64_t)SIZE_MAX)
                return hc_fail(b, KEEL_STATUS_INVALID_ARGUMENT,
                               "%s: %s[%zu] + %s[%zu] = %" PRIu64 " + %" PRIu64
                               " elements overflow",
                               call, names[2 * side], j, names[2 * side + 1],
                               j, cnt, dsp);
            lo[side] = dsp < lo[side] ? dsp : lo[side];
            hi[side] = cnt + dsp > hi[side] ? cnt + dsp : hi[side];
        }
    for (int side = 0; side < 2; side++)
        if (hi[side] &&
            (st = hc_check_buf(b, c, call, side ? "recv" : "send",
                               (side ? recv : send) + lo[side] * es,
                               (hi[side] - lo[side]) * es)))
            return st;
    if (!hi[0])
        lo[0] = 0;
    v = malloc(4 * n * sizeof(*v));
    if (!v)
        return hc_fail(b, KEEL_STATUS_OUT_OF_MEMORY, "%s: no host memory",
                       call);
    for (int k = 0; k < 4; k++)
        memcpy(v + (size_t)k * n, arr[k], n * sizeof(*v));
    if ((st = hc_stage(b, c, stream, call, hi[0] ? send + lo[0] * es : 0,
                       (hi[0] - lo[0]) * es, &host))) {
        free(v);
        return st;
    }

    pthread_mutex_lock(&g->mu);
    uint64_t seq = c->seq++;
    bool fresh;
    r = hc_round_get(g, seq, HC_ALL_TO_ALLV, dtype, &fresh);
    if (!r) {
        c->seq--;
        pthread_mutex_unlock(&g->mu);
        free(host);
        free(v);
        return hc_fail(b, KEEL_STATUS_OUT_OF_MEMORY, "%s: no host memory",
                       call);
    }
    if (!fresh && !r->status &&
        (r->kind != HC_ALL_TO_ALLV || r->dtype != dtype)) {
        r->status = KEEL_STATUS_INVALID_ARGUMENT;
        snprintf(r->msg, sizeof(r->msg),
                 "collective #%" PRIu64 ": rank %d called all_to_allv (%s) "
                 "where another rank called %s (%s)",
                 seq, (int)c->rank, keel_kit_dtype_name(dtype),
                 hc_names[r->kind], keel_kit_dtype_name(r->dtype));
        pthread_cond_broadcast(&g->cv);
    }
    if (r->v) {
        r->v[c->rank] = v;
        r->soff[c->rank] = lo[0];
    } else {
        free(v); /* a mismatched round: nothing of it runs */
    }
    return hc_arrive(b, g, r, c, host, recv);
}

/* ---- point to point -------------------------------------------------------- */

/* The n-th send from src to dst meets the n-th recv on dst from src. */
static keel_status hc_p2p(const keel_kit_hostcoll *b, keel_comm comm,
                          keel_stream stream, bool sender, keel_dptr buf,
                          uint64_t count, keel_dtype dtype, int32_t peer)
{
    enum hc_kind kind = sender ? HC_SEND : HC_RECV;
    const char *call = hc_names[kind];
    struct hc_comm *c = hc_resolve(b, comm, call);
    struct hc_clique *g;
    struct hc_round *r;
    uint64_t bytes;
    keel_status st;
    void *host = NULL;
    int32_t src, dst;

    if (!c)
        return KEEL_STATUS_INVALID_HANDLE;
    g = c->g;
    if ((st = hc_check_args(b, c, kind, count, dtype, KEEL_REDUCE_SUM, peer)))
        return st;
    bytes = count * keel_dtype_size(dtype);
    if ((st = hc_check_buf(b, c, call, sender ? "send" : "recv", buf, bytes)))
        return st;
    if (sender) {
        if ((st = hc_stage(b, c, stream, call, buf, bytes, &host)))
            return st;
    } else if ((st = b->stream_wait(c->device, stream, call))) {
        return st;
    }
    src = sender ? c->rank : peer;
    dst = sender ? peer : c->rank;

    pthread_mutex_lock(&g->mu);
    uint64_t *counter = sender ? &c->send_seq[peer] : &c->recv_seq[peer];
    uint64_t seq = (*counter)++;
    for (r = g->rounds; r; r = r->next)
        if (r->p2p && r->seq == seq && r->src == src && r->dst == dst)
            break;
    if (!r) {
        r = hc_round_new(1);
        if (!r) {
            (*counter)--;
            pthread_mutex_unlock(&g->mu);
            free(host);
            return hc_fail(b, KEEL_STATUS_OUT_OF_MEMORY, "%s: no host memory",
                           call);
        }
        r->p2p = true;
        r->seq = seq;
        r->src = src;
        r->dst = dst;
        r->kind = HC_SEND;
        r->dtype = dtype;
        r->count = count;
        r->nparties = 2;
        r->next = g->rounds;
        g->rounds = r;
    } else if (!r->status && (r->dtype != dtype || r->count != count)) {
        r->status = KEEL_STATUS_INVALID_ARGUMENT;
        snprintf(r->msg, sizeof(r->msg),
                 "send/recv #%" PRIu64 " from rank %d to rank %d: %" PRIu64
                 " elements of %s sent, %" PRIu64 " elements of %s expected",
                 seq, (int)src, (int)dst,
                 sender ? count : r->count,
                 keel_kit_dtype_name(sender ? dtype : r->dtype),
                 sender ? r->count : count,
                 keel_kit_dtype_name(sender ? r->dtype : dtype));
        pthread_cond_broadcast(&g->cv);
    }
    if (sender) {
        r->buf[0] = host;
    } else {
        r->recv[0] = buf;
        r->device[0] = c->device;
    }
    if (++r->arrived == 2) {
        if (!r->status)
            hc_complete(b, g, r);
        r->done = true;
        pthread_cond_broadcast(&g->cv);
    }
    if (sender) {
        /* The data is staged: a send never waits for its receiver. */
        keel_status rs = r->done ? r->status : KEEL_STATUS_OK;
        char msg[HC_MSG];
        if (rs)
            memcpy(msg, r->msg, sizeof(msg));
        hc_consume(g, r);
        pthread_mutex_unlock(&g->mu);
        return rs ? b->fail(rs, msg) : KEEL_STATUS_OK;
    }
    pthread_mutex_unlock(&g->mu);
    if (hc_depth > 0)
        return hc_pend_add(b, (struct hc_pending){g, r, NULL, c->rank});
    return hc_wait_round(b, g, r, c->rank);
}

keel_status keel_kit_hc_send(const keel_kit_hostcoll *b, keel_comm comm,
                             keel_stream stream, keel_dptr buf,
                             uint64_t count, keel_dtype dtype, int32_t peer)
{
    return hc_p2p(b, comm, stream, true, buf, count, dtype, peer);
}

keel_status keel_kit_hc_recv(const keel_kit_hostcoll *b, keel_comm comm,
                             keel_stream stream, keel_dptr buf,
                             uint64_t count, keel_dtype dtype, int32_t peer)
{
    return hc_p2p(b, comm, stream, false, buf, count, dtype, peer);
}

/* ---- groups ---------------------------------------------------------------- */

keel_status keel_kit_hc_group_start(const keel_kit_hostcoll *b)
{
    (void)b;
    hc_depth++;
    return KEEL_STATUS_OK;
}

keel_status keel_kit_hc_group_end(const keel_kit_hostcoll *b)
{
    keel_status first = KEEL_STATUS_OK;

    if (hc_depth == 0)
        return hc_fail(b, KEEL_STATUS_INVALID_STATE,
                       "group_end without group_start");
    if (--hc_depth > 0)
        return KEEL_STATUS_OK;
    /* Every join first: a failed join takes its communicator away, and
     * the rounds that used it can then only time out. */
    for (size_t i = 0; i < hc_npend; i++) {
        struct hc_pending *p = &hc_pend[i];
        keel_status st;
        if (p->r)
            continue;
        st = hc_wait_joined(b, p->g, p->c);
        if (st) {
            hc_unjoin(p->c);
            if (!first)
                first = st;
        }
    }
    for (size_t i = 0; i < hc_npend; i++) {
        struct hc_pending *p = &hc_pend[i];
        keel_status st;
        if (!p->r)
            continue;
        st = hc_wait_round(b, p->g, p->r, p->rank);
        if (st && !first)
            first = st;
    }
    hc_npend = 0;
    free(hc_pend);
    hc_pend = NULL;
    hc_cappend = 0;
    return first;
}

keel_status keel_kit_hc_get_caps(const keel_kit_hostcoll *b, int32_t device,
                                 keel_collective_caps *caps)
{
    keel_collective_caps c;
    keel_status st;
    uint32_t n;

    if (!caps || caps->struct_size < 4)
        return hc_fail(b, KEEL_STATUS_INVALID_ARGUMENT,
                       "get_caps: caps is NULL or its struct_size is below 4");
    if ((st = (b->check_device ? b->check_device : b->enter)(device,
                                                            "get_caps")))
        return st;
    memset(&c, 0, sizeof(c));
    c.collectives = KEEL_COLL_ALL_REDUCE | KEEL_COLL_BROADCAST |
                    KEEL_COLL_REDUCE | KEEL_COLL_ALL_GATHER |
                    KEEL_COLL_REDUCE_SCATTER | KEEL_COLL_ALL_TO_ALL |
                    KEEL_COLL_SEND_RECV | KEEL_COLL_ALL_TO_ALLV;
    for (int d = 0; d < KEEL_DTYPE_COUNT_; d++)
        c.dtype_mask |= KEEL_DTYPE_BIT(d);
    c.reduce_ops = KEEL_REDUCE_OP_BIT(KEEL_REDUCE_SUM) |
                   KEEL_REDUCE_OP_BIT(KEEL_REDUCE_PROD) |
                   KEEL_REDUCE_OP_BIT(KEEL_REDUCE_MAX) |
                   KEEL_REDUCE_OP_BIT(KEEL_REDUCE_MIN) |
                   KEEL_REDUCE_OP_BIT(KEEL_REDUCE_AVG);
    c.timeout_ms = keel_kit_hc_timeout_ms(b);
    n = caps->struct_size < sizeof(c) ? caps->struct_size : (uint32_t)sizeof(c);
    c.struct_size = n;
    memcpy(caps, &c, n);
    return KEEL_STATUS_OK;
}

void keel_kit_hc_finalize(const keel_kit_hostcoll *b)
{
    (void)b;
    for (;;) {
        struct hc_comm *c;
        struct hc_clique *g;

        pthread_mutex_lock(&hc_lock);
        c = hc_live;
        if (c)
            hc_live = c->next_live;
        pthread_mutex_unlock(&hc_lock);
        if (!c)
            break;
        g = c->g;
        pthread_mutex_lock(&g->mu);
        g->ranks[c->rank] = NULL;
        pthread_mutex_unlock(&g->mu);
        hc_clique_unref(g);
        hc_comm_free(c);
    }
}
