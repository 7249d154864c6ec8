/*
 * Stand-in for Cambricon's libcncl.so, for the mlu plugin's tests only:
 * the CNCL functions of plugins/mlu/cncl_api.h with the same C signatures,
 * built into the stand-in Neuware library next to cnrt_standin.c, whose
 * device memory and queues it uses (standin.h). Nothing here has been
 * compared with a real CNCL beyond the declarations.
 *
 *   cliques    cnclGetCliqueId makes an id that carries a magic text, a
 *              serial number and a hash of its data bytes; cnclInitComms
 *              refuses (CNCL_RET_ERR_ARGUMENTS) an id that does not check
 *              out, accepts NULL only when one call makes every rank, and
 *              waits until all nrank ranks joined, from one call or
 *              several (threads), up to CNCL_STANDIN_TIMEOUT_MS (default
 *              30000; then CNCL_RET_ERR_INIT).
 *   work       every collective is checked when called (communicator,
 *              queue of the communicator's device, buffers inside live
 *              cnrtMalloc blocks of that device, data type) and runs on the
 *              queue's worker in queue order: the ranks of one collective
 *              (matched by their order of calls) meet there, the last to
 *              arrive computes on the host in double for every rank, and
 *              none leaves before the result is written. A rank that waits
 *              past the timeout leaves it unfinished with a message on
 *              stderr. Sends are buffered (a send completes once its data
 *              is copied), receives wait for the matching send, so
 *              cnclGroupStart/End only count.
 *   errors     cnclGetErrorStr(code) gives the text of the calling thread's
 *              last failure when it had that code, else the code's name.
 *
 * For the tests: CNRT_STANDIN_FAIL / cnrt_standin_fail_next arm a failure
 * of any cncl* function by name as for CNRT; CNRT_STANDIN_FAULT=
 * allreduce_wrong makes every cnclAllReduce one too large in rank 0's first
 * element. cncl_standin_live_comms() counts the communicators not
 * destroyed, cncl_standin_calls() the calls made into this file.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <keel/kit.h>

#include "cncl_api.h"
#include "standin.h"

#define SI_PROTO(ret, name, params) SI_API ret name params;
MLU_CNCL_FUNCS(SI_PROTO, SI_PROTO)
#undef SI_PROTO
SI_API int cncl_standin_live_comms(void);
SI_API long cncl_standin_calls(void);
/* cnrt_standin.c's, in this same library */
cnrtRet_t cnrtGetDeviceCount(unsigned int *pCount);

#define CS_MAGIC "keel cncl stand-in"

enum kind { K_ALL_REDUCE, K_BROADCAST, K_REDUCE, K_ALL_GATHER,
            K_REDUCE_SCATTER, K_ALL_TO_ALL, K_ALL_TO_ALLV, K_SEND, K_RECV };

/* One rank's share of one collective (the queued job's argument). */
struct part {
    enum kind k;
    struct cnclComm *c;
    uint64_t seq; /* collective order, or send/recv order with the peer */
    const char *send;
    char *recv;
    size_t count, es;
    cnclDataType_t dt;
    cnclReduceOp_t op;
    int root; /* root, or the peer */
    /* all-to-allv: per peer */
    const char **sb;
    char **rb;
    uint32_t *sc, *rc;
};

struct round {
    uint64_t seq;
    int arrived, left;
    bool done, abandoned;
    struct part **part;
    struct round *next;
};

struct mail {
    int src, dst;
    uint64_t seq;
    size_t bytes;
    struct mail *next;
    char data[];
};

struct clique {
    struct cnclCliqueId id;
    int nrank, joined, refs;
    struct cnclComm **member;
    struct round *rounds;
    struct mail *mail;
    struct clique *next;
};

struct cnclComm {
    int rank, dev;
    struct clique *cl;
    uint64_t seq;             /* collectives issued */
    uint64_t *sent, *recvd;   /* send / recv issued, per peer */
    struct cnclComm *next;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t serial;
    struct clique *cliques;
    struct cnclComm *live;
    int nlive;
    long calls;
} C = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static _Thread_local cnclResult_t last_code;
static _Thread_local char last_text[256];
static _Thread_local int group_depth;

static cnclResult_t fail(cnclResult_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static cnclResult_t fail(cnclResult_t code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(last_text, sizeof(last_text), fmt, ap);
    va_end(ap);
    last_code = code;
    return code;
}

/* Count the call; an armed failure of `name`, or 0. */
static cnclResult_t enter(const char *name)
{
    int code;

    pthread_mutex_lock(&C.mu);
    C.calls++;
    pthread_mutex_unlock(&C.mu);
    code = si_injected(name);
    if (code)
        return fail((cnclResult_t)code, "stand-in: injected failure of %s",
                    name);
    return CNCL_RET_SUCCESS;
}

#define CS_ENTER(name)                         \
    do {                                       \
        cnclResult_t cs_r_ = enter(name);      \
        if (cs_r_ != CNCL_RET_SUCCESS)         \
            return cs_r_;                      \
    } while (0)

static long timeout_ms(void)
{
    const char *e = getenv("CNCL_STANDIN_TIMEOUT_MS");
    long v = e ? atol(e) : 0;

    return v > 0 ? v : 30000;
}

static struct timespec deadline(void)
{
    struct timespec ts;
    long ms = timeout_ms();

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static uint64_t id_hash(const struct cnclCliqueId *id)
{
    uint64_t h = 1469598103934665603ull;

    for (size_t i = 0; i < sizeof(id->data); i++)
        h = (h ^ (unsigned char)id->data[i]) * 1099511628211ull;
    return h;
}

static bool id_ok(const struct cnclCliqueId *id)
{
    return !memcmp(id->data, CS_MAGIC, sizeof(CS_MAGIC)) &&
           id->hash == id_hash(id);
}

static size_t dt_size(cnclDataType_t dt)
{
    switch (dt) {
    case cnclInt8: case cnclUint8: return 1;
    case cnclFloat16: case cnclBfloat16: case cnclInt16: case cnclUint16:
        return 2;
    case cnclFloat32: case cnclInt32: case cnclUint32: return 4;
    case cnclInt64: case cnclUint64: return 8;
    default: return 0;
    }
}

static double ld(cnclDataType_t dt, const char *p, size_t i)
{
    switch (dt) {
    case cnclFloat16: { uint16_t v; memcpy(&v, p + 2 * i, 2);
                        return keel_kit_f16_to_f32(v); }
    case cnclBfloat16: { uint16_t v; memcpy(&v, p + 2 * i, 2);
                         return keel_kit_bf16_to_f32(v); }
    case cnclFloat32: { float v; memcpy(&v, p + 4 * i, 4); return v; }
    case cnclInt8: return ((const int8_t *)p)[i];
    case cnclUint8: return ((const uint8_t *)p)[i];
    case cnclInt16: { int16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case cnclUint16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case cnclInt32: { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case cnclUint32: { uint32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case cnclInt64: { int64_t v; memcpy(&v, p + 8 * i, 8); return (double)v; }
    case cnclUint64: { uint64_t v; memcpy(&v, p + 8 * i, 8);
                       return (double)v; }
    default: return 0;
    }
}

static void st(cnclDataType_t dt, char *p, size_t i, double x)
{
    switch (dt) {
    case cnclFloat16: { uint16_t v = keel_kit_f32_to_f16((float)x);
                        memcpy(p + 2 * i, &v, 2); break; }
    case cnclBfloat16: { uint16_t v = keel_kit_f32_to_bf16((float)x);
                         memcpy(p + 2 * i, &v, 2); break; }
    case cnclFloat32: { float v = (float)x; memcpy(p + 4 * i, &v, 4); break; }
    case cnclInt8: ((int8_t *)p)[i] = (int8_t)x; break;
    case cnclUint8: ((uint8_t *)p)[i] = (uint8_t)x; break;
    case cnclInt16: { int16_t v = (int16_t)x; memcpy(p + 2 * i, &v, 2); break; }
    case cnclUint16: { uint16_t v = (uint16_t)x; memcpy(p + 2 * i, &v, 2);
                       break; }
    case cnclInt32: { int32_t v = (int32_t)x; memcpy(p + 4 * i, &v, 4); break; }
    case cnclUint32: { uint32_t v = (uint32_t)x; memcpy(p + 4 * i, &v, 4);
                       break; }
    case cnclInt64: { int64_t v = (int64_t)x; memcpy(p + 8 * i, &v, 8); break; }
    case cnclUint64: { uint64_t v = (uint64_t)x; memcpy(p + 8 * i, &v, 8);
                       break; }
    default: break;
    }
}

static double red(cnclReduceOp_t op, double a, double b)
{
    switch (op) {
    case cnclProd: return a * b;
    case cnclMax: return a > b ? a : b;
    case cnclMin: return a < b ? a : b;
    default: return a + b;
    }
}

/* ---- cliques and communicators ---------------------------------------------- */

SI_API cnclResult_t cnclGetCliqueId(cnclCliqueId_t clique_id)
{
    uint64_t serial;

    CS_ENTER("cnclGetCliqueId");
    if (!clique_id)
        return fail(CNCL_RET_ERR_ARGUMENTS, "cnclGetCliqueId: NULL id");
    pthread_mutex_lock(&C.mu);
    serial = ++C.serial;
    pthread_mutex_unlock(&C.mu);
    memset(clique_id, 0, sizeof(*clique_id));
    memcpy(clique_id->data, CS_MAGIC, sizeof(CS_MAGIC));
    snprintf(clique_id->data + 32, sizeof(clique_id->data) - 32,
             "%ld/%llu/%lld", (long)getpid(), (unsigned long long)serial,
             (long long)time(NULL));
    clique_id->hash = id_hash(clique_id);
    return CNCL_RET_SUCCESS;
}

static void clique_free(struct clique *cl)
{
    struct clique **l;

    for (l = &C.cliques; *l && *l != cl; l = &(*l)->next)
        ;
    if (*l)
        *l = cl->next;
    while (cl->rounds) {
        struct round *r = cl->rounds;
        cl->rounds = r->next;
        free(r->part);
        free(r);
    }
    while (cl->mail) {
        struct mail *m = cl->mail;
        cl->mail = m->next;
        free(m);
    }
    free(cl->member);
    free(cl);
}

/* Under C.mu. */
static void comm_free(struct cnclComm *c)
{
    struct cnclComm **l;

    for (l = &C.live; *l && *l != c; l = &(*l)->next)
        ;
    if (*l) {
        *l = c->next;
        C.nlive--;
    }
    if (c->cl->member[c->rank] == c)
        c->cl->member[c->rank] = NULL;
    if (--c->cl->refs == 0)
        clique_free(c->cl);
    free(c->sent);
    free(c->recvd);
    free(c);
}

static bool live(const struct cnclComm *c)
{
    for (struct cnclComm *x = C.live; x; x = x->next)
        if (x == c)
            return true;
    return false;
}

SI_API cnclResult_t cnclInitComms(cnclComm_t *comms, int num_comm,
                                  const int *dev_list, const int *rank_list,
                                  int nrank, const cnclCliqueId_t clique_id)
{
    struct cnclCliqueId own;
    const struct cnclCliqueId *id = clique_id;
    struct clique *cl;
    unsigned ndev = 0;
    struct timespec until;
    int made = 0, rc = 0;

    CS_ENTER("cnclInitComms");
    if (!comms || !dev_list || !rank_list)
        return fail(CNCL_RET_ERR_NULL_POINTER, "cnclInitComms: NULL argument");
    if (num_comm < 1 || nrank < 1 || num_comm > nrank)
        return fail(CNCL_RET_ERR_ARGUMENTS, "cnclInitComms: %d communicators "
                    "of %d ranks", num_comm, nrank);
    if (!id) {
        if (num_comm != nrank)
            return fail(CNCL_RET_ERR_ARGUMENTS, "cnclInitComms: a NULL clique "
                        "id needs every rank in this call");
        if (cnclGetCliqueId(&own) != CNCL_RET_SUCCESS)
            return last_code;
        id = &own;
    } else if (!id_ok(id)) {
        return fail(CNCL_RET_ERR_ARGUMENTS, "cnclInitComms: not a clique id "
                    "of cnclGetCliqueId (magic or hash do not check out)");
    }
    cnrtGetDeviceCount(&ndev);
    for (int i = 0; i < num_comm; i++) {
        if (rank_list[i] < 0 || rank_list[i] >= nrank)
            return fail(CNCL_RET_ERR_ARGUMENTS, "cnclInitComms: rank %d of %d",
                        rank_list[i], nrank);
        if (dev_list[i] < 0 || (unsigned)dev_list[i] >= ndev)
            return fail(CNCL_RET_ERR_ARGUMENTS, "cnclInitComms: no device %d",
                        dev_list[i]);
        for (int k = 0; k < i; k++)
            if (rank_list[k] == rank_list[i])
                return fail(CNCL_RET_ERR_ARGUMENTS, "cnclInitComms: rank %d "
                            "twice", rank_list[i]);
    }
    pthread_mutex_lock(&C.mu);
    for (cl = C.cliques; cl && memcmp(&cl->id, id, sizeof(*id)); cl = cl->next)
        ;
    if (!cl) {
        cl = calloc(1, sizeof(*cl));
        if (cl && !(cl->member = calloc((size_t)nrank, sizeof(*cl->member)))) {
            free(cl);
            cl = NULL;
        }
        if (!cl) {
            pthread_mutex_unlock(&C.mu);
            return fail(CNCL_RET_ERR_SYS_MALLOC, "cnclInitComms: no memory");
        }
        cl->id = *id;
        cl->nrank = nrank;
        cl->next = C.cliques;
        C.cliques = cl;
    } else if (cl->nrank != nrank) {
        pthread_mutex_unlock(&C.mu);
        return fail(CNCL_RET_ERR_ARGUMENTS, "cnclInitComms: %d ranks, the "
                    "clique has %d", nrank, cl->nrank);
    }
    for (int i = 0; i < num_comm; i++)
        if (cl->member[rank_list[i]]) {
            if (cl->refs == 0)
                clique_free(cl);
            pthread_mutex_unlock(&C.mu);
            return fail(CNCL_RET_ERR_REINIT, "cnclInitComms: rank %d of this "
                        "clique exists already", rank_list[i]);
        }
    for (; made < num_comm; made++) {
        struct cnclComm *c = calloc(1, sizeof(*c));
        if (c) {
            c->sent = calloc((size_t)nrank, sizeof(uint64_t));
            c->recvd = calloc((size_t)nrank, sizeof(uint64_t));
        }
        if (!c || !c->sent || !c->recvd) {
            if (c) {
                free(c->sent);
                free(c->recvd);
                free(c);
            }
            rc = fail(CNCL_RET_ERR_SYS_MALLOC, "cnclInitComms: no memory");
            break;
        }
        c->rank = rank_list[made];
        c->dev = dev_list[made];
        c->cl = cl;
        cl->member[c->rank] = c;
        cl->refs++;
        cl->joined++;
        comms[made] = c;
    }
    pthread_cond_broadcast(&C.cv);
    until = deadline();
    while (!rc && cl->joined < cl->nrank)
        if (pthread_cond_timedwait(&C.cv, &C.mu, &until) == ETIMEDOUT &&
            cl->joined < cl->nrank)
            rc = fail(CNCL_RET_ERR_INIT, "cnclInitComms: %d of %d ranks "
                      "joined in %ld ms", cl->joined, cl->nrank, timeout_ms());
    if (rc) {
        for (int i = 0; i < made; i++) {
            struct cnclComm *c = comms[i];
            cl->member[c->rank] = NULL;
            cl->joined--;
            cl->refs--;
            free(c->sent);
            free(c->recvd);
            free(c);
            comms[i] = NULL;
        }
        if (cl->refs == 0)
            clique_free(cl);
        pthread_mutex_unlock(&C.mu);
        return (cnclResult_t)rc;
    }
    for (int i = 0; i < num_comm; i++) {
        comms[i]->next = C.live;
        C.live = comms[i];
        C.nlive++;
    }
    pthread_mutex_unlock(&C.mu);
    return CNCL_RET_SUCCESS;
}

static cnclResult_t destroy(cnclComm_t comm, const char *call)
{
    pthread_mutex_lock(&C.mu);
    if (!comm || !live(comm)) {
        pthread_mutex_unlock(&C.mu);
        return fail(CNCL_RET_ERR_ARGUMENTS, "%s: %p is not a live "
                    "communicator", call, (void *)comm);
    }
    comm_free(comm);
    pthread_mutex_unlock(&C.mu);
    return CNCL_RET_SUCCESS;
}

SI_API cnclResult_t cnclDestroyComms(cnclComm_t *comms, int num_comm)
{
    cnclResult_t r = CNCL_RET_SUCCESS;

    CS_ENTER("cnclDestroyComms");
    if (!comms || num_comm < 1)
        return fail(CNCL_RET_ERR_ARGUMENTS, "cnclDestroyComms: no "
                    "communicators");
    for (int i = 0; i < num_comm; i++) {
        cnclResult_t e = destroy(comms[i], "cnclDestroyComms");
        if (e != CNCL_RET_SUCCESS && r == CNCL_RET_SUCCESS)
            r = e;
    }
    return r;
}

SI_API cnclResult_t cnclAbortComm(cnclComm_t comm)
{
    CS_ENTER("cnclAbortComm");
    return destroy(comm, "cnclAbortComm");
}

SI_API int cncl_standin_live_comms(void)
{
    int n;

    pthread_mutex_lock(&C.mu);
    n = C.nlive;
    pthread_mutex_unlock(&C.mu);
    return n;
}

SI_API long cncl_standin_calls(void)
{
    long n;

    pthread_mutex_lock(&C.mu);
    n = C.calls;
    pthread_mutex_unlock(&C.mu);
    return n;
}

/* ---- the work on the queues ------------------------------------------------- */

static void say(const struct part *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void say(const struct part *p, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "cncl stand-in: rank %d: ", p->c->rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* Every rank's part is there: compute each rank's result. Under C.mu. */
static void compute(struct round *r, int n)
{
    struct part *p0 = r->part[0], **P = r->part;
    size_t cnt = p0->count, es = p0->es;
    double *acc = NULL;
    char *tmp = NULL;

    for (int i = 1; i < n; i++)
        if (P[i]->k != p0->k || P[i]->count != cnt || P[i]->dt != p0->dt ||
            P[i]->op != p0->op || P[i]->root != p0->root) {
            say(P[i], "collective %llu differs from rank 0's (kind %d/%d, "
                "count %zu/%zu, type %#x/%#x); nothing done",
                (unsigned long long)r->seq, (int)P[i]->k, (int)p0->k,
                P[i]->count, cnt, (unsigned)P[i]->dt, (unsigned)p0->dt);
            return;
        }
    switch (p0->k) {
    case K_ALL_REDUCE:
    case K_REDUCE:
    case K_REDUCE_SCATTER: {
        size_t total = p0->k == K_REDUCE_SCATTER ? cnt * (size_t)n : cnt;
        if (total && !(acc = malloc(total * sizeof(double))))
            break;
        for (size_t i = 0; i < total; i++) {
            acc[i] = ld(p0->dt, P[0]->send, i);
            for (int k = 1; k < n; k++)
                acc[i] = red(p0->op, acc[i], ld(p0->dt, P[k]->send, i));
        }
        for (int k = 0; k < n; k++) {
            if (p0->k == K_REDUCE && k != p0->root)
                continue;
            for (size_t i = 0; i < cnt; i++)
                st(p0->dt, P[k]->recv, i,
                   acc[p0->k == K_REDUCE_SCATTER ? (size_t)k * cnt + i : i]);
        }
        if (p0->k == K_ALL_REDUCE && cnt && si_fault("allreduce_wrong"))
            st(p0->dt, P[0]->recv, 0, ld(p0->dt, P[0]->recv, 0) + 1);
        break;
    }
    case K_BROADCAST:
        if (!cnt || !(tmp = malloc(cnt * es)))
            break;
        memcpy(tmp, P[p0->root]->send, cnt * es);
        for (int k = 0; k < n; k++)
            memcpy(P[k]->recv, tmp, cnt * es);
        break;
    case K_ALL_GATHER:
        if (!cnt || !(tmp = malloc(cnt * es * (size_t)n)))
            break;
        for (int k = 0; k < n; k++)
            memcpy(tmp + (size_t)k * cnt * es, P[k]->send, cnt * es);
        for (int k = 0; k < n; k++)
            memcpy(P[k]->recv, tmp, cnt * es * (size_t)n);
        break;
    case K_ALL_TO_ALL: {
        size_t blk = cnt * es, all = blk * (size_t)n;
        if (!cnt || !(tmp = malloc(all * (size_t)n)))
            break;
        /* rank k's block j lands in rank j's block k */
        for (int k = 0; k < n; k++)
            for (int j = 0; j < n; j++)
                memcpy(tmp + (size_t)j * all + (size_t)k * blk,
                       P[k]->send + (size_t)j * blk, blk);
        for (int j = 0; j < n; j++)
            memcpy(P[j]->recv, tmp + (size_t)j * all, all);
        break;
    }
    case K_ALL_TO_ALLV: {
        size_t total = 0, at = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                if (P[j]->sc[i] != P[i]->rc[j]) {
                    say(P[i], "AlltoAllv: rank %d sends %u elements to rank "
                        "%d, which receives %u; nothing done", j,
                        P[j]->sc[i], i, P[i]->rc[j]);
                    return;
                }
                total += (size_t)P[i]->rc[j] * es;
            }
        if (!total || !(tmp = malloc(total)))
            break;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                memcpy(tmp + at, P[j]->sb[i], (size_t)P[i]->rc[j] * es);
                at += (size_t)P[i]->rc[j] * es;
            }
        at = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                memcpy(P[i]->rb[j], tmp + at, (size_t)P[i]->rc[j] * es);
                at += (size_t)P[i]->rc[j] * es;
            }
        break;
    }
    default:
        break;
    }
    free(acc);
    free(tmp);
}

static void run_collective(struct part *p)
{
    struct clique *cl = p->c->cl;
    struct round *r, **l;
    struct timespec until = deadline();
    int n = cl->nrank;

    pthread_mutex_lock(&C.mu);
    for (r = cl->rounds; r && r->seq != p->seq; r = r->next)
        ;
    if (!r) {
        r = calloc(1, sizeof(*r));
        if (r && !(r->part = calloc((size_t)n, sizeof(*r->part)))) {
            free(r);
            r = NULL;
        }
        if (!r) {
            pthread_mutex_unlock(&C.mu);
            say(p, "no memory for collective %llu",
                (unsigned long long)p->seq);
            return;
        }
        r->seq = p->seq;
        r->next = cl->rounds;
        cl->rounds = r;
    }
    if (r->abandoned) {
        pthread_mutex_unlock(&C.mu);
        say(p, "collective %llu was given up by another rank",
            (unsigned long long)p->seq);
        return;
    }
    r->part[p->c->rank] = p;
    if (++r->arrived == n) {
        compute(r, n);
        r->done = true;
        pthread_cond_broadcast(&C.cv);
    }
    while (!r->done && !r->abandoned)
        if (pthread_cond_timedwait(&C.cv, &C.mu, &until) == ETIMEDOUT &&
            !r->done) {
            r->abandoned = true;
            say(p, "collective %llu: %d of %d ranks arrived in %ld ms; given "
                "up", (unsigned long long)p->seq, r->arrived, n, timeout_ms());
            pthread_cond_broadcast(&C.cv);
        }
    r->part[p->c->rank] = NULL;
    if (r->done && ++r->left == n) {
        for (l = &cl->rounds; *l != r; l = &(*l)->next)
            ;
        *l = r->next;
        free(r->part);
        free(r);
    }
    pthread_mutex_unlock(&C.mu);
}

static void run_send(struct part *p)
{
    struct clique *cl = p->c->cl;
    size_t bytes = p->count * p->es;
    struct mail *m = malloc(sizeof(*m) + bytes);

    if (!m) {
        say(p, "no memory for a send");
        return;
    }
    m->src = p->c->rank;
    m->dst = p->root;
    m->seq = p->seq;
    m->bytes = bytes;
    if (bytes)
        memcpy(m->data, p->send, bytes);
    pthread_mutex_lock(&C.mu);
    m->next = cl->mail;
    cl->mail = m;
    pthread_cond_broadcast(&C.cv);
    pthread_mutex_unlock(&C.mu);
}

static void run_recv(struct part *p)
{
    struct clique *cl = p->c->cl;
    struct timespec until = deadline();
    struct mail **l = NULL, *m = NULL;

    pthread_mutex_lock(&C.mu);
    for (;;) {
        for (l = &cl->mail; *l; l = &(*l)->next)
            if ((*l)->src == p->root && (*l)->dst == p->c->rank &&
                (*l)->seq == p->seq)
                break;
        if (*l)
            break;
        if (pthread_cond_timedwait(&C.cv, &C.mu, &until) == ETIMEDOUT) {
            pthread_mutex_unlock(&C.mu);
            say(p, "cnclRecv from rank %d: nothing came in %ld ms", p->root,
                timeout_ms());
            return;
        }
    }
    m = *l;
    *l = m->next;
    pthread_mutex_unlock(&C.mu);
    if (m->bytes != p->count * p->es)
        say(p, "cnclRecv from rank %d: %zu bytes sent, %zu expected; nothing "
            "done", p->root, m->bytes, p->count * p->es);
    else if (m->bytes)
        memcpy(p->recv, m->data, m->bytes);
    free(m);
}

static void run_part(void *arg)
{
    struct part *p = arg;

    if (p->k == K_SEND)
        run_send(p);
    else if (p->k == K_RECV)
        run_recv(p);
    else
        run_collective(p);
    free(p->sb);
    free(p->rb);
    free(p->sc);
    free(p->rc);
}

/* [p, p + n) lies in the communicator's device memory (n 0: anything). */
static bool buf_ok(const void *p, size_t n, int dev)
{
    return n == 0 || (p && si_device_mem(p, n, dev));
}

/* Checks common to every call, then queue the part (freed on failure). */
static cnclResult_t post(struct part *p, cnclComm_t comm, cnrtQueue_t queue,
                         size_t nsend, size_t nrecv, const char *call)
{
    cnclResult_t r = CNCL_RET_SUCCESS;

    pthread_mutex_lock(&C.mu);
    if (!comm || !live(comm))
        r = fail(CNCL_RET_ERR_ARGUMENTS, "%s: %p is not a live communicator",
                 call, (void *)comm);
    pthread_mutex_unlock(&C.mu);
    p->c = comm;
    p->es = dt_size(p->dt);
    if (!r && !p->es)
        r = fail(CNCL_RET_ERR_UNSUPPORTED, "%s: data type %#x", call,
                 (unsigned)p->dt);
    if (!r && (p->root < 0 || p->root >= comm->cl->nrank))
        r = fail(CNCL_RET_ERR_ARGUMENTS, "%s: rank %d of %d", call, p->root,
                 comm->cl->nrank);
    if (!r && (!queue || si_queue_device(queue) != comm->dev))
        r = fail(CNCL_RET_ERR_ARGUMENTS, "%s: %p is no queue of device %d",
                 call, (void *)queue, comm->dev);
    if (!r && p->count > SIZE_MAX / p->es / (size_t)comm->cl->nrank)
        r = fail(CNCL_RET_ERR_ARGUMENTS, "%s: count %zu", call, p->count);
    if (!r && (!buf_ok(p->send, nsend * p->es, comm->dev) ||
               !buf_ok(p->recv, nrecv * p->es, comm->dev)))
        r = fail(CNCL_RET_ERR_ARGUMENTS, "%s: a buffer is not memory of "
                 "device %d", call, comm->dev);
    if (r) {
        free(p->sb);
        free(p->rb);
        free(p->sc);
        free(p->rc);
        free(p);
        return r;
    }
    pthread_mutex_lock(&C.mu);
    if (p->k == K_SEND)
        p->seq = comm->sent[p->root]++;
    else if (p->k == K_RECV)
        p->seq = comm->recvd[p->root]++;
    else
        p->seq = comm->seq++;
    pthread_mutex_unlock(&C.mu);
    if (si_enqueue(queue, run_part, p) != cnrtSuccess)
        return fail(CNCL_RET_ERR_MLU_RUNTIME, "%s: the queue took no work",
                    call);
    return CNCL_RET_SUCCESS;
}

static struct part *part_new(enum kind k, const void *send, void *recv,
                             size_t count, cnclDataType_t dt,
                             cnclReduceOp_t op, int root)
{
    struct part *p = calloc(1, sizeof(*p));

    if (!p)
        return NULL;
    p->k = k;
    p->send = send;
    p->recv = recv;
    p->count = count;
    p->dt = dt;
    p->op = op;
    p->root = root;
    return p;
}

static bool op_ok(cnclReduceOp_t op)
{
    return op == cnclSum || op == cnclProd || op == cnclMax || op == cnclMin;
}

#define CS_NEW(p, ...)                                                   \
    do {                                                                 \
        if (!((p) = part_new(__VA_ARGS__)))                              \
            return fail(CNCL_RET_ERR_SYS_MALLOC, "stand-in: no memory"); \
    } while (0)

static int nranks_of(cnclComm_t comm)
{
    int n = 0;

    pthread_mutex_lock(&C.mu);
    if (comm && live(comm))
        n = comm->cl->nrank;
    pthread_mutex_unlock(&C.mu);
    return n;
}

SI_API cnclResult_t cnclAllReduce(const void *send_buffer, void *recv_buffer,
                                  size_t count, cnclDataType_t data_type,
                                  cnclReduceOp_t reduce_op, cnclComm_t comm,
                                  cnrtQueue_t queue)
{
    struct part *p;

    CS_ENTER("cnclAllReduce");
    if (!op_ok(reduce_op))
        return fail(CNCL_RET_ERR_UNSUPPORTED, "cnclAllReduce: op %d",
                    (int)reduce_op);
    CS_NEW(p, K_ALL_REDUCE, send_buffer, recv_buffer, count, data_type,
           reduce_op, 0);
    return post(p, comm, queue, count, count, "cnclAllReduce");
}

SI_API cnclResult_t cnclBroadcast(const void *send_buffer, void *recv_buffer,
                                  size_t count, cnclDataType_t data_type,
                                  int root, cnclComm_t comm, cnrtQueue_t queue)
{
    struct part *p;
    bool is_root;

    CS_ENTER("cnclBroadcast");
    pthread_mutex_lock(&C.mu);
    is_root = comm && live(comm) && comm->rank == root;
    pthread_mutex_unlock(&C.mu);
    CS_NEW(p, K_BROADCAST, send_buffer, recv_buffer, count, data_type,
           cnclSum, root);
    return post(p, comm, queue, is_root ? count : 0, count, "cnclBroadcast");
}

SI_API cnclResult_t cnclReduce(const void *send_buffer, void *recv_buffer,
                               size_t count, cnclDataType_t data_type,
                               cnclReduceOp_t reduce_op, int root,
                               cnclComm_t comm, cnrtQueue_t queue)
{
    struct part *p;
    bool is_root;

    CS_ENTER("cnclReduce");
    if (!op_ok(reduce_op))
        return fail(CNCL_RET_ERR_UNSUPPORTED, "cnclReduce: op %d",
                    (int)reduce_op);
    pthread_mutex_lock(&C.mu);
    is_root = comm && live(comm) && comm->rank == root;
    pthread_mutex_unlock(&C.mu);
    CS_NEW(p, K_REDUCE, send_buffer, recv_buffer, count, data_type, reduce_op,
           root);
    return post(p, comm, queue, count, is_root ? count : 0, "cnclReduce");
}

SI_API cnclResult_t cnclAllGather(const void *send_buffer, void *recv_buffer,
                                  size_t count, cnclDataType_t data_type,
                                  cnclComm_t comm, cnrtQueue_t queue)
{
    struct part *p;
    size_t n = (size_t)nranks_of(comm);

    CS_ENTER("cnclAllGather");
    CS_NEW(p, K_ALL_GATHER, send_buffer, recv_buffer, count, data_type,
           cnclSum, 0);
    return post(p, comm, queue, count, count * n, "cnclAllGather");
}

SI_API cnclResult_t cnclReduceScatter(const void *send_buffer,
                                      void *recv_buffer, size_t count,
                                      cnclDataType_t data_type,
                                      cnclReduceOp_t reduce_op,
                                      cnclComm_t comm, cnrtQueue_t queue)
{
    struct part *p;
    size_t n = (size_t)nranks_of(comm);

    CS_ENTER("cnclReduceScatter");
    if (!op_ok(reduce_op))
        return fail(CNCL_RET_ERR_UNSUPPORTED, "cnclReduceScatter: op %d",
                    (int)reduce_op);
    CS_NEW(p, K_REDUCE_SCATTER, send_buffer, recv_buffer, count, data_type,
           reduce_op, 0);
    return post(p, comm, queue, count * n, count, "cnclReduceScatter");
}

SI_API cnclResult_t cnclAlltoAll(const void *send_buffer, void *recv_buffer,
                                 size_t count, cnclDataType_t data_type,
                                 cnclComm_t comm, cnrtQueue_t queue)
{
    struct part *p;
    size_t n = (size_t)nranks_of(comm);

    CS_ENTER("cnclAlltoAll");
    CS_NEW(p, K_ALL_TO_ALL, send_buffer, recv_buffer, count, data_type,
           cnclSum, 0);
    return post(p, comm, queue, count * n, count * n, "cnclAlltoAll");
}

SI_API cnclResult_t cnclAlltoAllv(const void **send_buffers,
                                  uint32_t *send_counts,
                                  cnclDataType_t *send_types,
                                  void **recv_buffers, uint32_t *recv_counts,
                                  cnclDataType_t *recv_types, cnclComm_t comm,
                                  cnrtQueue_t queue)
{
    int n = nranks_of(comm), dev = -1;
    struct part *p;
    size_t es;

    CS_ENTER("cnclAlltoAllv");
    if (!n)
        return fail(CNCL_RET_ERR_ARGUMENTS, "cnclAlltoAllv: %p is not a live "
                    "communicator", (void *)comm);
    if (!send_buffers || !send_counts || !send_types || !recv_buffers ||
        !recv_counts || !recv_types)
        return fail(CNCL_RET_ERR_NULL_POINTER, "cnclAlltoAllv: NULL array");
    es = dt_size(send_types[0]);
    for (int i = 0; i < n; i++)
        if (send_types[i] != send_types[0] || recv_types[i] != send_types[0])
            return fail(CNCL_RET_ERR_UNSUPPORTED, "cnclAlltoAllv: the "
                        "stand-in takes one data type for every block");
    if (!es)
        return fail(CNCL_RET_ERR_UNSUPPORTED, "cnclAlltoAllv: data type %#x",
                    (unsigned)send_types[0]);
    dev = comm->dev;
    for (int i = 0; i < n; i++)
        if (!buf_ok(send_buffers[i], (size_t)send_counts[i] * es, dev) ||
            !buf_ok(recv_buffers[i], (size_t)recv_counts[i] * es, dev))
            return fail(CNCL_RET_ERR_ARGUMENTS, "cnclAlltoAllv: block %d is "
                        "not memory of device %d", i, dev);
    CS_NEW(p, K_ALL_TO_ALLV, NULL, NULL, 0, send_types[0], cnclSum, 0);
    p->sb = calloc((size_t)n, sizeof(*p->sb));
    p->rb = calloc((size_t)n, sizeof(*p->rb));
    p->sc = calloc((size_t)n, sizeof(*p->sc));
    p->rc = calloc((size_t)n, sizeof(*p->rc));
    if (!p->sb || !p->rb || !p->sc || !p->rc) {
        free(p->sb);
        free(p->rb);
        free(p->sc);
        free(p->rc);
        free(p);
        return fail(CNCL_RET_ERR_SYS_MALLOC, "cnclAlltoAllv: no memory");
    }
    for (int i = 0; i < n; i++) {
        p->sb[i] = send_buffers[i];
        p->rb[i] = recv_buffers[i];
        p->sc[i] = send_counts[i];
        p->rc[i] = recv_counts[i];
    }
    return post(p, comm, queue, 0, 0, "cnclAlltoAllv");
}

SI_API cnclResult_t cnclSend(void *buffer, const size_t count,
                             cnclDataType_t data_type, const int dest,
                             const cnclComm_t comm, cnrtQueue_t queue)
{
    struct part *p;

    CS_ENTER("cnclSend");
    CS_NEW(p, K_SEND, buffer, NULL, count, data_type, cnclSum, dest);
    return post(p, comm, queue, count, 0, "cnclSend");
}

SI_API cnclResult_t cnclRecv(void *buffer, const size_t count,
                             cnclDataType_t data_type, const int source,
                             const cnclComm_t comm, cnrtQueue_t queue)
{
    struct part *p;

    CS_ENTER("cnclRecv");
    CS_NEW(p, K_RECV, NULL, buffer, count, data_type, cnclSum, source);
    return post(p, comm, queue, 0, count, "cnclRecv");
}

SI_API cnclResult_t cnclGroupStart(void)
{
    CS_ENTER("cnclGroupStart");
    group_depth++;
    return CNCL_RET_SUCCESS;
}

SI_API cnclResult_t cnclGroupEnd(void)
{
    CS_ENTER("cnclGroupEnd");
    if (group_depth == 0)
        return fail(CNCL_RET_ERR_ARGUMENTS, "cnclGroupEnd without "
                    "cnclGroupStart");
    group_depth--;
    return CNCL_RET_SUCCESS;
}

SI_API const char *cnclGetErrorStr(cnclResult_t ret)
{
    if (ret == last_code && last_text[0])
        return last_text;
    switch ((int)ret) {
#define CS_CASE(name, value) case value: return #name;
    MLU_CNCL_RESULTS(CS_CASE)
#undef CS_CASE
    default:
        return "unknown CNCL result";
    }
}
