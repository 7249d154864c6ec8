/*
 * keel OpenCL plugin — collectives in one process across the plugin's
 * devices (NCCL-shaped; several ranks may share a device).
 *
 * Communicators. comm_init_rank finds the clique of its 128-byte id among
 * those still joining (the first rank creates it). An ungrouped call
 * blocks until all nranks have joined; inside group_start/group_end the
 * wait happens at the outermost group_end. Waits are bounded by
 * KEEL_OPENCL_COLL_TIMEOUT_MS (default 60000; collective.get_caps reports
 * it) and end in TIMEOUT.
 *
 * Collectives. Each call takes a sequence number from its communicator
 * (send/recv: one counter per peer and direction) and is enqueued on its
 * stream as a host job (ocl_stream.c): once the stream's earlier work has
 * run, a plugin worker "arrives" at the clique's round of that number,
 * while the stream is held behind the job. The last party to arrive runs
 * the round for everybody: it reads the inputs into host memory through
 * the devices' private queues, reduces there (float16/bfloat16 through
 * float, integers wrapping) and writes the results back, then every
 * party's job returns and its stream goes on. The others wait for the
 * round, bounded from the moment their stream reached it; a round that
 * timed out is failed for latecomers too, and the error is the stream's
 * asynchronous error (TIMEOUT from its next synchronize). Staging
 * everything before writing makes in-place and aliased buffers safe.
 * Calls thus return at once, as with NCCL; argument errors are reported
 * by the call itself. comm_destroy waits for its communicator's queued
 * collectives.
 *
 * An ungrouped comm_init_rank blocks until every rank has joined, so one
 * host thread creating several ranks must bracket them with
 * group_start/group_end (as with NCCL); the collectives themselves never
 * block the caller. count 0 is validated and completes at once.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <keel/kit.h>

#include "ocl_internal.h"
#include "kernels/ok.h"

#define COLL_DEFAULT_TIMEOUT_MS 60000u
#define COLL_MAX_RANKS 4096
#define COLL_MSG 384

enum kind { C_ALL_REDUCE, C_BROADCAST, C_REDUCE, C_ALL_GATHER,
            C_REDUCE_SCATTER, C_ALL_TO_ALL, C_SEND, C_RECV };
static const char *const kind_name[] = {"all_reduce", "broadcast", "reduce",
                                        "all_gather", "reduce_scatter",
                                        "all_to_all", "send", "recv"};

struct clique;
struct round;

struct keel_comm_s {
    int32_t device, rank, nranks;
    struct clique *q;
    uint64_t seq;
    uint64_t *send_seq, *recv_seq;
    bool broken;
    int pending;              /* host jobs of this comm not yet run */
    struct keel_comm_s *next; /* registry */
};

struct clique {
    keel_comm_id id;
    int32_t nranks, joined, members;
    struct keel_comm_s **ranks;
    bool complete;
    struct round *rounds;
    struct clique *next; /* joining list */
};

struct op {
    struct keel_comm_s *c;
    cl_command_queue q;
    enum kind kind;
    cl_mem ms, mr;
    size_t os, orr;
    uint64_t count, bytes; /* bytes: per block */
    keel_dtype dt;
    keel_reduce_op rop;
    int32_t root, peer;
    uint64_t seq;
    struct round *r;
    bool async;       /* run by a host job on the stream (below) */
};

struct round {
    bool p2p;
    uint64_t seq;
    int32_t src, dst;
    int nparties, arrived, refs;
    bool executing, done;
    keel_status status;
    char msg[COLL_MSG];
    struct op **ops;
    struct round *next;
};

struct group {
    int depth;
    struct op **ops;
    size_t nops, capops;
    struct keel_comm_s **joins;
    size_t njoins, capjoins;
};

static _Thread_local struct group tls_group;
static pthread_mutex_t coll_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t coll_cv;
static pthread_once_t coll_once = PTHREAD_ONCE_INIT;
static struct clique *joining;
static struct keel_comm_s *comms;
static atomic_uint_fast64_t id_counter;

static void coll_init_once(void)
{
    pthread_condattr_t a;

    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&coll_cv, &a);
    pthread_condattr_destroy(&a);
}

static uint32_t coll_timeout_ms(void)
{
    const char *s = ocl_env("KEEL_OPENCL_COLL_TIMEOUT_MS");
    char *end;
    unsigned long v;

    if (!s || !*s)
        return COLL_DEFAULT_TIMEOUT_MS;
    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || *end || v > 86400000ul)
        return COLL_DEFAULT_TIMEOUT_MS;
    return (uint32_t)v;
}

static struct timespec deadline_in(uint32_t ms)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

/* Wait on coll_cv (lock held); false once the deadline has passed.
 * timeout 0: unbounded. */
static bool coll_wait(const struct timespec *dl, uint32_t timeout)
{
    if (!timeout) {
        pthread_cond_wait(&coll_cv, &coll_lock);
        return true;
    }
    return pthread_cond_timedwait(&coll_cv, &coll_lock, dl) != ETIMEDOUT;
}

/* ---- communicators ------------------------------------------------------- */

static struct keel_comm_s *comm_find(keel_comm h)
{
    struct keel_comm_s *c = comms;

    while (c && c != h)
        c = c->next;
    return c;
}

static void clique_free(struct clique *q)
{
    struct clique **pp;

    for (pp = &joining; *pp; pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            break;
        }
    while (q->rounds) {
        struct round *r = q->rounds;

        q->rounds = r->next;
        free(r->ops);
        free(r);
    }
    free(q->ranks);
    free(q);
}

/* Take c out of its clique (lock held). */
static void comm_detach(struct keel_comm_s *c)
{
    struct clique *q = c->q;

    if (!q)
        return;
    if (q->ranks[c->rank] == c) {
        q->ranks[c->rank] = NULL;
        if (!q->complete)
            q->joined--;
    }
    c->q = NULL;
    if (--q->members == 0)
        clique_free(q);
}

static void comm_free(struct keel_comm_s *c)
{
    free(c->send_seq);
    free(c->recv_seq);
    free(c);
}

/* Remove c from the registry and free it (lock held). */
static void comm_drop(struct keel_comm_s *c)
{
    struct keel_comm_s **pp;

    for (pp = &comms; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    comm_detach(c);
    comm_free(c);
}

static keel_status join_wait(struct keel_comm_s *c, const struct timespec *dl,
                             uint32_t timeout)
{
    while (c->q && !c->q->complete)
        if (!coll_wait(dl, timeout) && !c->q->complete) {
            int32_t joined = c->q->joined;

            c->broken = true;
            return ocl_fail(KEEL_STATUS_TIMEOUT,
                            "comm_init_rank: rank %d of %d on opencl:%d timed "
                            "out after %u ms with %d of %d ranks joined "
                            "(KEEL_OPENCL_COLL_TIMEOUT_MS); one thread "
                            "driving several ranks must use "
                            "group_start/group_end",
                            (int)c->rank, (int)c->nranks, (int)c->device,
                            timeout, (int)joined, (int)c->nranks);
        }
    return KEEL_STATUS_OK;
}

static keel_status group_push(void ***arr, size_t *n, size_t *cap, void *item)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        void **p = realloc(*arr, nc * sizeof(*p));

        if (!p)
            return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                            "collectives: out of host memory in a group");
        *arr = p;
        *cap = nc;
    }
    (*arr)[(*n)++] = item;
    return KEEL_STATUS_OK;
}

static keel_status ocl_comm_init_rank(int32_t device, int32_t nranks,
                                      const keel_comm_id *id, int32_t rank,
                                      keel_comm *comm)
{
    keel_status st = ocl_device_ok(device);
    struct keel_comm_s *c;
    struct clique *q;
    uint32_t timeout = coll_timeout_ms();
    struct timespec dl;

    if (st)
        return st;
    if (!id || !comm)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "comm_init_rank: %s is NULL", id ? "comm" : "id");
    *comm = NULL;
    if (nranks < 1 || nranks > COLL_MAX_RANKS || rank < 0 || rank >= nranks)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "comm_init_rank: rank %d of %d ranks (nranks must be "
                        "1..%d, rank 0..nranks-1)",
                        (int)rank, (int)nranks, COLL_MAX_RANKS);
    pthread_once(&coll_once, coll_init_once);
    c = calloc(1, sizeof(*c));
    if (c) {
        c->send_seq = calloc((size_t)nranks, sizeof(uint64_t));
        c->recv_seq = calloc((size_t)nranks, sizeof(uint64_t));
    }
    if (!c || !c->send_seq || !c->recv_seq) {
        if (c)
            comm_free(c);
        return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "comm_init_rank: out of host memory");
    }
    c->device = device;
    c->rank = rank;
    c->nranks = nranks;
    pthread_mutex_lock(&coll_lock);
    for (q = joining; q; q = q->next)
        if (!memcmp(&q->id, id, sizeof(*id)))
            break;
    if (q && q->nranks != nranks) {
        pthread_mutex_unlock(&coll_lock);
        comm_free(c);
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "comm_init_rank: rank %d passes nranks %d, but ranks "
                        "already joined with this id passed %d",
                        (int)rank, (int)nranks, (int)q->nranks);
    }
    if (q && q->ranks[rank]) {
        pthread_mutex_unlock(&coll_lock);
        comm_free(c);
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "comm_init_rank: rank %d of this id has already "
                        "joined",
                        (int)rank);
    }
    if (!q) {
        q = calloc(1, sizeof(*q));
        if (q)
            q->ranks = calloc((size_t)nranks, sizeof(*q->ranks));
        if (!q || !q->ranks) {
            pthread_mutex_unlock(&coll_lock);
            free(q);
            comm_free(c);
            return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                            "comm_init_rank: out of host memory");
        }
        q->id = *id;
        q->nranks = nranks;
        q->next = joining;
        joining = q;
    }
    q->ranks[rank] = c;
    q->joined++;
    q->members++;
    c->q = q;
    if (q->joined == q->nranks) {
        struct clique **pp;

        q->complete = true;
        for (pp = &joining; *pp; pp = &(*pp)->next)
            if (*pp == q) {
                *pp = q->next;
                break;
            }
        q->next = NULL;
        pthread_cond_broadcast(&coll_cv);
    }
    c->next = comms;
    comms = c;
    if (tls_group.depth > 0) {
        st = group_push((void ***)&tls_group.joins, &tls_group.njoins,
                        &tls_group.capjoins, c);
        if (st) {
            comm_drop(c);
            pthread_mutex_unlock(&coll_lock);
            return st;
        }
        pthread_mutex_unlock(&coll_lock);
        *comm = c;
        return KEEL_STATUS_OK;
    }
    dl = deadline_in(timeout);
    st = join_wait(c, &dl, timeout);
    if (st) {
        comm_drop(c);
        pthread_mutex_unlock(&coll_lock);
        return st;
    }
    pthread_mutex_unlock(&coll_lock);
    *comm = c;
    return KEEL_STATUS_OK;
}

static keel_status ocl_comm_destroy(keel_comm comm)
{
    struct keel_comm_s *c;

    pthread_once(&coll_once, coll_init_once);
    pthread_mutex_lock(&coll_lock);
    c = comm ? comm_find(comm) : NULL;
    /* Its collectives still queued on streams run (or time out) first. */
    while (c && c->pending > 0) {
        pthread_cond_wait(&coll_cv, &coll_lock);
        c = comm_find(comm);
    }
    if (c)
        comm_drop(c);
    pthread_mutex_unlock(&coll_lock);
    if (!c)
        return ocl_fail(KEEL_STATUS_INVALID_HANDLE,
                        "comm_destroy: %p is not a live communicator of the "
                        "opencl plugin",
                        (void *)comm);
    return KEEL_STATUS_OK;
}

static keel_status ocl_comm_rank(keel_comm comm, int32_t *rank,
                                 int32_t *nranks)
{
    struct keel_comm_s *c;

    pthread_mutex_lock(&coll_lock);
    c = comm ? comm_find(comm) : NULL;
    if (c) {
        if (rank)
            *rank = c->rank;
        if (nranks)
            *nranks = c->nranks;
    }
    pthread_mutex_unlock(&coll_lock);
    if (!c)
        return ocl_fail(KEEL_STATUS_INVALID_HANDLE,
                        "comm_rank: %p is not a live communicator of the "
                        "opencl plugin",
                        (void *)comm);
    if (!rank || !nranks)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT, "comm_rank: %s is NULL",
                        rank ? "nranks" : "rank");
    return KEEL_STATUS_OK;
}

static keel_status ocl_get_unique_id(keel_comm_id *id)
{
    uint64_t n = atomic_fetch_add(&id_counter, 1) + 1;
    uint64_t pid = (uint64_t)getpid();
    struct timespec t;
    size_t got = 0;

    if (!id)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "get_unique_id: id is NULL");
    memset(id, 0, sizeof(*id));
    while (got < 32) {
        ssize_t r = getrandom(id->bytes + got, 32 - got, 0);

        if (r <= 0)
            break;
        got += (size_t)r;
    }
    clock_gettime(CLOCK_REALTIME, &t);
    memcpy(id->bytes + 32, &n, sizeof(n));
    memcpy(id->bytes + 40, &pid, sizeof(pid));
    memcpy(id->bytes + 48, &t.tv_sec, sizeof(t.tv_sec));
    memcpy(id->bytes + 56, &t.tv_nsec, sizeof(t.tv_nsec));
    memcpy(id->bytes + 64, "keel-opencl", 11);
    return KEEL_STATUS_OK;
}

/* ---- host-side reduction ------------------------------------------------- */

static bool is_float(keel_dtype dt)
{
    return dt == KEEL_F32 || dt == KEEL_F64 || dt == KEEL_F16 ||
           dt == KEEL_BF16;
}

static double load_f(const unsigned char *p, keel_dtype dt)
{
    uint16_t h;
    float f;
    double d;

    switch (dt) {
    case KEEL_F32:
        memcpy(&f, p, 4);
        return f;
    case KEEL_F64:
        memcpy(&d, p, 8);
        return d;
    case KEEL_F16:
        memcpy(&h, p, 2);
        return keel_kit_f16_to_f32(h);
    default:
        memcpy(&h, p, 2);
        return keel_kit_bf16_to_f32(h);
    }
}

static void store_f(unsigned char *p, keel_dtype dt, double v)
{
    uint16_t h;
    float f = (float)v;

    switch (dt) {
    case KEEL_F32:
        memcpy(p, &f, 4);
        break;
    case KEEL_F64:
        memcpy(p, &v, 8);
        break;
    case KEEL_F16:
        h = keel_kit_f32_to_f16(f);
        memcpy(p, &h, 2);
        break;
    default:
        h = keel_kit_f32_to_bf16(f);
        memcpy(p, &h, 2);
        break;
    }
}

/* Integers as int64 (signed types sign-extended). */
static int64_t load_i(const unsigned char *p, keel_dtype dt)
{
    int8_t i8;
    int32_t i32;
    int64_t i64;

    switch (dt) {
    case KEEL_I8:
        memcpy(&i8, p, 1);
        return i8;
    case KEEL_U8:
    case KEEL_BOOL:
        return p[0];
    case KEEL_I32:
        memcpy(&i32, p, 4);
        return i32;
    default:
        memcpy(&i64, p, 8);
        return i64;
    }
}

static void store_i(unsigned char *p, keel_dtype dt, uint64_t v)
{
    uint32_t u32 = (uint32_t)v;

    switch (dt) {
    case KEEL_I8:
    case KEEL_U8:
    case KEEL_BOOL:
        p[0] = (unsigned char)v;
        break;
    case KEEL_I32:
        memcpy(p, &u32, 4);
        break;
    default:
        memcpy(p, &v, 8);
        break;
    }
}

/* out[e] = op over k of in[k][e], e < count (element size es). */
static void reduce_host(unsigned char *out, unsigned char *const *in, int n,
                        uint64_t count, keel_dtype dt, keel_reduce_op op)
{
    size_t es = keel_dtype_size(dt);

    for (uint64_t e = 0; e < count; e++) {
        size_t off = (size_t)e * es;

        if (is_float(dt)) {
            double a = load_f(in[0] + off, dt);

            for (int k = 1; k < n; k++) {
                double b = load_f(in[k] + off, dt);

                switch (op) {
                case KEEL_REDUCE_PROD:
                    a *= b;
                    break;
                case KEEL_REDUCE_MAX:
                    a = b > a || a != a ? b : a;
                    break;
                case KEEL_REDUCE_MIN:
                    a = b < a || a != a ? b : a;
                    break;
                default:
                    a += b;
                    break;
                }
            }
            if (op == KEEL_REDUCE_AVG)
                a /= n;
            store_f(out + off, dt, a);
        } else {
            int64_t s = load_i(in[0] + off, dt);
            uint64_t u = (uint64_t)s;

            for (int k = 1; k < n; k++) {
                int64_t b = load_i(in[k] + off, dt);

                switch (op) {
                case KEEL_REDUCE_PROD:
                    u *= (uint64_t)b;
                    break;
                case KEEL_REDUCE_MAX:
                    if (b > s)
                        s = b;
                    u = (uint64_t)s;
                    break;
                case KEEL_REDUCE_MIN:
                    if (b < s)
                        s = b;
                    u = (uint64_t)s;
                    break;
                default:
                    u += (uint64_t)b;
                    break;
                }
            }
            store_i(out + off, dt, u);
        }
    }
}

/* ---- running a round ----------------------------------------------------- */

/* The queue a round's transfers use: a host job holds its stream (the
 * barrier behind it), so it goes through the device's private queue. */
static cl_command_queue xfer_q(const struct op *o)
{
    return o->async ? ocl_rt[o->c->device].xq : o->q;
}

static cl_int rd(const struct op *o, size_t off, size_t n, void *dst)
{
    return n ? clEnqueueReadBuffer(xfer_q(o), o->ms, CL_TRUE, o->os + off, n, dst,
                                   0, NULL, NULL)
             : CL_SUCCESS;
}

static cl_int wr(const struct op *o, size_t off, size_t n, const void *src)
{
    return n ? clEnqueueWriteBuffer(xfer_q(o), o->mr, CL_TRUE, o->orr + off, n, src,
                                    0, NULL, NULL)
             : CL_SUCCESS;
}

static bool round_agree(struct round *r)
{
    const struct op *a = r->ops[0];

    if (r->p2p) {
        const struct op *s = r->ops[0], *v = r->ops[1];

        if (s->count != v->count || s->dt != v->dt) {
            r->status = KEEL_STATUS_INVALID_ARGUMENT;
            snprintf(r->msg, sizeof(r->msg),
                     "send from rank %d (%" PRIu64 " x dtype %d) does not "
                     "match recv of rank %d (%" PRIu64 " x dtype %d)",
                     (int)s->c->rank, s->count, (int)s->dt, (int)v->c->rank,
                     v->count, (int)v->dt);
            return false;
        }
        return true;
    }
    for (int i = 1; i < r->nparties; i++) {
        const struct op *b = r->ops[i];

        if (b->kind != a->kind || b->count != a->count || b->dt != a->dt ||
            b->rop != a->rop || b->root != a->root) {
            r->status = KEEL_STATUS_INVALID_ARGUMENT;
            snprintf(r->msg, sizeof(r->msg),
                     "collective #%" PRIu64 ": rank 0 issued %s (count %"
                     PRIu64 ", dtype %d, op %d, root %d) but rank %d issued "
                     "%s (count %" PRIu64 ", dtype %d, op %d, root %d)",
                     r->seq, kind_name[a->kind], a->count, (int)a->dt,
                     (int)a->rop, (int)a->root, i, kind_name[b->kind],
                     b->count, (int)b->dt, (int)b->rop, (int)b->root);
            return false;
        }
    }
    return true;
}

static void round_exec(struct round *r)
{
    int n = r->nparties;
    const struct op *o0 = r->ops[0];
    size_t bytes = (size_t)o0->bytes;
    unsigned char **buf = NULL, *acc = NULL;
    size_t in_bytes = bytes;
    cl_int err = CL_SUCCESS;
    int who = 0;

    r->status = KEEL_STATUS_OK;
    if (!round_agree(r))
        return;
    /* Every party's earlier stream work first (a host job runs only
     * after it). */
    for (int i = 0; i < n && err == CL_SUCCESS; i++) {
        who = i;
        if (!r->ops[i]->async)
            err = clFinish(r->ops[i]->q);
    }
    if (err != CL_SUCCESS)
        goto fail;
    if (r->p2p) {
        acc = malloc(bytes ? bytes : 1);
        if (!acc)
            goto oom;
        who = 0;
        err = rd(r->ops[0], 0, bytes, acc);
        if (err == CL_SUCCESS) {
            who = 1;
            err = wr(r->ops[1], 0, bytes, acc);
        }
        goto done;
    }
    if (o0->kind == C_REDUCE_SCATTER || o0->kind == C_ALL_TO_ALL)
        in_bytes = bytes * (size_t)n;
    buf = calloc((size_t)n, sizeof(*buf));
    if (!buf)
        goto oom;
    for (int i = 0; i < n; i++) {
        if (o0->kind == C_BROADCAST && i != o0->root)
            continue;
        buf[i] = malloc(in_bytes ? in_bytes : 1);
        if (!buf[i])
            goto oom;
        who = i;
        err = rd(r->ops[i], 0, in_bytes, buf[i]);
        if (err != CL_SUCCESS)
            goto fail;
    }
    switch (o0->kind) {
    case C_ALL_REDUCE:
    case C_REDUCE:
        acc = malloc(bytes ? bytes : 1);
        if (!acc)
            goto oom;
        reduce_host(acc, buf, n, o0->count, o0->dt, o0->rop);
        for (int i = 0; i < n && err == CL_SUCCESS; i++)
            if (o0->kind == C_ALL_REDUCE || i == o0->root) {
                who = i;
                err = wr(r->ops[i], 0, bytes, acc);
            }
        break;
    case C_BROADCAST:
        for (int i = 0; i < n && err == CL_SUCCESS; i++) {
            who = i;
            err = wr(r->ops[i], 0, bytes, buf[o0->root]);
        }
        break;
    case C_ALL_GATHER:
        for (int i = 0; i < n && err == CL_SUCCESS; i++)
            for (int k = 0; k < n && err == CL_SUCCESS; k++) {
                who = i;
                err = wr(r->ops[i], (size_t)k * bytes, bytes, buf[k]);
            }
        break;
    case C_REDUCE_SCATTER: {
        unsigned char **blk = calloc((size_t)n, sizeof(*blk));

        acc = malloc(bytes ? bytes : 1);
        if (!acc || !blk) {
            free(blk);
            goto oom;
        }
        for (int i = 0; i < n && err == CL_SUCCESS; i++) {
            for (int k = 0; k < n; k++)
                blk[k] = buf[k] + (size_t)i * bytes;
            reduce_host(acc, blk, n, o0->count, o0->dt, o0->rop);
            who = i;
            err = wr(r->ops[i], 0, bytes, acc);
        }
        free(blk);
        break;
    }
    case C_ALL_TO_ALL:
        /* block j of rank i's send -> block i of rank j's recv */
        for (int j = 0; j < n && err == CL_SUCCESS; j++)
            for (int i = 0; i < n && err == CL_SUCCESS; i++) {
                who = j;
                err = wr(r->ops[j], (size_t)i * bytes, bytes,
                         buf[i] + (size_t)j * bytes);
            }
        break;
    default:
        break;
    }
done:
    if (err != CL_SUCCESS)
        goto fail;
    goto out;
oom:
    r->status = KEEL_STATUS_OUT_OF_MEMORY;
    snprintf(r->msg, sizeof(r->msg),
             "%s: out of host memory staging %zu bytes per rank",
             kind_name[o0->kind], in_bytes);
    goto out;
fail:
    r->status = ocl_status_of(err);
    if (r->status == KEEL_STATUS_OK)
        r->status = KEEL_STATUS_DEVICE_ERROR;
    snprintf(r->msg, sizeof(r->msg), "%s: rank %d on opencl:%d: %s",
             r->p2p ? "send/recv" : kind_name[o0->kind],
             (int)r->ops[who]->c->rank, (int)r->ops[who]->c->device,
             ocl_err_name(err));
out:
    if (buf)
        for (int i = 0; i < n; i++)
            free(buf[i]);
    free(buf);
    free(acc);
}

static void round_unref(struct clique *q, struct round *r)
{
    struct round **pp;

    if (--r->refs > 0)
        return;
    for (pp = &q->rounds; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    free(r->ops);
    free(r);
}

/* Deposit op in its round; the last party runs it. Lock held (released
 * while the round runs). */
static keel_status arrive(struct op *o, char *msg, size_t msgn)
{
    struct clique *q = o->c->q;
    bool p2p = o->kind == C_SEND || o->kind == C_RECV;
    int32_t src = p2p ? (o->kind == C_SEND ? o->c->rank : o->peer) : -1;
    int32_t dst = p2p ? (o->kind == C_SEND ? o->peer : o->c->rank) : -1;
    struct round *r;

    if (!q) {
        snprintf(msg, msgn, "%s: the communicator has left its clique",
                 kind_name[o->kind]);
        return KEEL_STATUS_INVALID_ARGUMENT;
    }
    for (r = q->rounds; r; r = r->next)
        if (r->p2p == p2p && r->seq == o->seq && r->src == src &&
            r->dst == dst && !(r->done && r->status == KEEL_STATUS_OK))
            break;
    if (r && r->done) {
        /* A round that failed (timed out) before we came. */
        o->r = NULL;
        snprintf(msg, msgn, "%s: %.300s", kind_name[o->kind], r->msg);
        return r->status;
    }
    if (!r) {
        r = calloc(1, sizeof(*r));
        if (r)
            r->ops = calloc(p2p ? 2 : (size_t)q->nranks, sizeof(*r->ops));
        if (!r || !r->ops) {
            free(r);
            snprintf(msg, msgn, "%s: out of host memory",
                     kind_name[o->kind]);
            return KEEL_STATUS_OUT_OF_MEMORY;
        }
        r->p2p = p2p;
        r->seq = o->seq;
        r->src = src;
        r->dst = dst;
        r->nparties = p2p ? 2 : q->nranks;
        r->next = q->rounds;
        q->rounds = r;
    }
    r->ops[p2p ? (o->kind == C_SEND ? 0 : 1) : o->c->rank] = o;
    r->arrived++;
    r->refs++;
    o->r = r;
    if (r->arrived == r->nparties) {
        r->executing = true;
        pthread_mutex_unlock(&coll_lock);
        round_exec(r);
        pthread_mutex_lock(&coll_lock);
        r->executing = false;
        r->done = true;
        pthread_cond_broadcast(&coll_cv);
    }
    return KEEL_STATUS_OK;
}

/* Wait for op's round (lock held). */
static keel_status await(struct op *o, const struct timespec *dl,
                         uint32_t timeout, char *msg, size_t n)
{
    struct round *r = o->r;
    struct clique *q = o->c->q;
    keel_status st;

    if (!r)
        return KEEL_STATUS_OK;
    while (!r->done)
        if (!coll_wait(dl, timeout) && !r->done && !r->executing) {
            r->done = true;
            r->status = KEEL_STATUS_TIMEOUT;
            snprintf(r->msg, sizeof(r->msg),
                     "rank %d timed out after %u ms: %d of %d parties "
                     "arrived (KEEL_OPENCL_COLL_TIMEOUT_MS); one thread "
                     "driving several ranks must use group_start/group_end",
                     (int)o->c->rank, timeout, r->arrived, r->nparties);
            pthread_cond_broadcast(&coll_cv);
        }
    st = r->status;
    if (st && msg)
        snprintf(msg, n, "%s: %.300s", kind_name[o->kind], r->msg);
    else if (st)
        st = ocl_fail(st, "%s: %s", kind_name[o->kind], r->msg);
    o->r = NULL;
    round_unref(q, r);
    return st;
}

static void op_free(struct op *o)
{
    if (o->ms)
        clReleaseMemObject(o->ms);
    if (o->mr)
        clReleaseMemObject(o->mr);
    free(o);
}

/* Collectives as one host job on a stream: it runs once the stream's
 * earlier work is done, arrives at each op's round, waits for them
 * (bounded from the moment the stream reached the job) and releases the
 * stream. A group's ops that share a stream are one job, as several ranks
 * may share a stream (several ranks per device, default streams): as
 * separate jobs, the second would wait behind the first forever. Errors
 * are the stream's asynchronous errors (reported by its next sync). */
struct batch {
    size_t n;
    struct op *ops[];
};

static void coll_job(void *arg)
{
    struct batch *b = arg;
    uint32_t timeout = coll_timeout_ms();
    struct timespec dl = deadline_in(timeout);
    keel_status first = KEEL_STATUS_OK;
    char msg[COLL_MSG] = "", m[COLL_MSG];
    int32_t rank = 0, nranks = 0, device = b->ops[0]->c->device;

    pthread_mutex_lock(&coll_lock);
    for (size_t i = 0; i < b->n; i++) {
        keel_status st = arrive(b->ops[i], m, sizeof(m));

        if (st && !first) {
            first = st;
            memcpy(msg, m, sizeof(msg));
            rank = b->ops[i]->c->rank;
            nranks = b->ops[i]->c->nranks;
        }
    }
    for (size_t i = 0; i < b->n; i++) {
        keel_status st = await(b->ops[i], &dl, timeout, m, sizeof(m));

        if (st && !first) {
            first = st;
            memcpy(msg, m, sizeof(msg));
            rank = b->ops[i]->c->rank;
            nranks = b->ops[i]->c->nranks;
        }
        b->ops[i]->c->pending--;
    }
    pthread_cond_broadcast(&coll_cv);
    pthread_mutex_unlock(&coll_lock);
    if (first)
        ocl_async_fail(device, first, "rank %d of %d: %.320s", (int)rank,
                       (int)nranks, msg);
    for (size_t i = 0; i < b->n; i++)
        op_free(b->ops[i]);
    free(b);
}

/* Enqueue ops[0..n) (one queue) as one job (lock held). The ops are the
 * job's on success, freed on failure. */
static keel_status launch_ops(struct op **ops, size_t n)
{
    struct batch *b = malloc(sizeof(*b) + n * sizeof(b->ops[0]));
    keel_status st;

    if (!b) {
        for (size_t i = 0; i < n; i++)
            op_free(ops[i]);
        return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "collectives: out of host memory");
    }
    b->n = n;
    for (size_t i = 0; i < n; i++) {
        b->ops[i] = ops[i];
        ops[i]->async = true;
        ops[i]->c->pending++;
    }
    st = ocl_enqueue_host_job(ops[0]->c->device, ops[0]->q, coll_job, b,
                              kind_name[ops[0]->kind]);
    if (st) {
        for (size_t i = 0; i < n; i++) {
            ops[i]->c->pending--;
            op_free(ops[i]);
        }
        free(b);
    }
    return st;
}

static keel_status launch_op(struct op *o)
{
    return launch_ops(&o, 1);
}

/* ---- issuing ------------------------------------------------------------- */

static bool is_reducing(enum kind k)
{
    return k == C_ALL_REDUCE || k == C_REDUCE || k == C_REDUCE_SCATTER;
}

static keel_status issue(keel_comm comm, keel_stream stream, enum kind k,
                         keel_dptr send, keel_dptr recv, uint64_t count,
                         keel_dtype dt, keel_reduce_op rop, int32_t root,
                         int32_t peer)
{
    const char *name = kind_name[k];
    struct keel_comm_s *c;
    struct op *o;
    keel_status st;
    uint64_t es, blk, in_b, out_b;
    int32_t device, nranks;
    cl_command_queue q;

    pthread_once(&coll_once, coll_init_once);
    pthread_mutex_lock(&coll_lock);
    c = comm ? comm_find(comm) : NULL;
    device = c ? c->device : -1;
    nranks = c ? c->nranks : 0;
    pthread_mutex_unlock(&coll_lock);
    if (!c)
        return ocl_fail(KEEL_STATUS_INVALID_HANDLE,
                        "%s: %p is not a live communicator of the opencl "
                        "plugin",
                        name, (void *)comm);
    st = ocl_device_ok(device);
    if (st)
        return st;
    if ((unsigned)dt >= KEEL_DTYPE_COUNT_)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: dtype %d unknown",
                        name, (int)dt);
    if (is_reducing(k) && (unsigned)rop >= KEEL_REDUCE_OP_COUNT_)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "%s: reduce op %d unknown", name, (int)rop);
    if (is_reducing(k) && dt == KEEL_BOOL)
        return ocl_fail(KEEL_STATUS_NOT_SUPPORTED,
                        "%s: bool is not reduced (it moves only)", name);
    if (is_reducing(k) && rop == KEEL_REDUCE_AVG && !is_float(dt))
        return ocl_fail(KEEL_STATUS_NOT_SUPPORTED,
                        "%s: avg is for floating dtypes only", name);
    if ((k == C_BROADCAST || k == C_REDUCE) && (root < 0 || root >= nranks))
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "%s: root %d is not a rank of %d", name, (int)root,
                        (int)nranks);
    if ((k == C_SEND || k == C_RECV) && (peer < 0 || peer >= nranks))
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "%s: peer %d is not a rank of %d", name, (int)peer,
                        (int)nranks);
    st = ocl_queue(device, stream, &q);
    if (st)
        return st;
    es = keel_dtype_size(dt);
    if (count > (UINT64_C(1) << 62) / es / (uint64_t)nranks)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "%s: count %" PRIu64 " x %d ranks overflows", name,
                        count, (int)nranks);
    blk = count * es;
    in_b = (k == C_REDUCE_SCATTER || k == C_ALL_TO_ALL) ? blk * nranks : blk;
    out_b = (k == C_ALL_GATHER || k == C_ALL_TO_ALL) ? blk * nranks : blk;
    o = calloc(1, sizeof(*o));
    if (!o)
        return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY, "%s: out of host memory",
                        name);
    o->c = c;
    o->q = q;
    o->kind = k;
    o->count = count;
    o->bytes = blk;
    o->dt = dt;
    o->rop = is_reducing(k) ? rop : KEEL_REDUCE_SUM;
    o->root = (k == C_BROADCAST || k == C_REDUCE) ? root : 0;
    o->peer = peer;
    if (count) {
        bool reads = k != C_RECV, writes = k != C_SEND;

        /* The root's send for broadcast; every rank's otherwise. */
        if (reads && (k != C_BROADCAST || c->rank == root))
            st = ocl_resolve(device, send, in_b, &o->ms, &o->os);
        if (!st && writes && (k != C_REDUCE || c->rank == root))
            st = ocl_resolve(device, k == C_RECV ? send : recv, out_b, &o->mr,
                             &o->orr);
        if (st) {
            free(o); /* ocl_resolve named the address */
            return st;
        }
        if (o->ms)
            clRetainMemObject(o->ms);
        if (o->mr)
            clRetainMemObject(o->mr);
    }
    pthread_mutex_lock(&coll_lock);
    if (!comm_find(comm) || c->broken) {
        pthread_mutex_unlock(&coll_lock);
        op_free(o);
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "%s: rank %d never finished comm_init_rank",
                        name, (int)c->rank);
    }
    if (count == 0) {
        pthread_mutex_unlock(&coll_lock);
        op_free(o);
        return KEEL_STATUS_OK;
    }
    if (k == C_SEND)
        o->seq = c->send_seq[peer]++;
    else if (k == C_RECV)
        o->seq = c->recv_seq[peer]++;
    else
        o->seq = c->seq++;
    if (tls_group.depth > 0) {
        st = group_push((void ***)&tls_group.ops, &tls_group.nops,
                        &tls_group.capops, o);
        pthread_mutex_unlock(&coll_lock);
        if (st)
            op_free(o);
        return st;
    }
    if (c->q && !c->q->complete) {
        pthread_mutex_unlock(&coll_lock);
        op_free(o);
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "%s: rank %d's communicator is still joining",
                        name, (int)c->rank);
    }
    st = launch_op(o);
    pthread_mutex_unlock(&coll_lock);
    return st;
}

static keel_status ocl_all_reduce(keel_comm comm, keel_stream stream,
                                  keel_dptr send, keel_dptr recv,
                                  uint64_t count, keel_dtype dtype,
                                  keel_reduce_op op)
{
    return issue(comm, stream, C_ALL_REDUCE, send, recv, count, dtype, op, 0,
                 0);
}

static keel_status ocl_broadcast(keel_comm comm, keel_stream stream,
                                 keel_dptr send, keel_dptr recv,
                                 uint64_t count, keel_dtype dtype,
                                 int32_t root)
{
    return issue(comm, stream, C_BROADCAST, send, recv, count, dtype,
                 KEEL_REDUCE_SUM, root, 0);
}

static keel_status ocl_reduce(keel_comm comm, keel_stream stream,
                              keel_dptr send, keel_dptr recv, uint64_t count,
                              keel_dtype dtype, keel_reduce_op op,
                              int32_t root)
{
    return issue(comm, stream, C_REDUCE, send, recv, count, dtype, op, root,
                 0);
}

static keel_status ocl_all_gather(keel_comm comm, keel_stream stream,
                                  keel_dptr send, keel_dptr recv,
                                  uint64_t count, keel_dtype dtype)
{
    return issue(comm, stream, C_ALL_GATHER, send, recv, count, dtype,
                 KEEL_REDUCE_SUM, 0, 0);
}

static keel_status ocl_reduce_scatter(keel_comm comm, keel_stream stream,
                                      keel_dptr send, keel_dptr recv,
                                      uint64_t count, keel_dtype dtype,
                                      keel_reduce_op op)
{
    return issue(comm, stream, C_REDUCE_SCATTER, send, recv, count, dtype, op,
                 0, 0);
}

static keel_status ocl_all_to_all(keel_comm comm, keel_stream stream,
                                  keel_dptr send, keel_dptr recv,
                                  uint64_t count, keel_dtype dtype)
{
    return issue(comm, stream, C_ALL_TO_ALL, send, recv, count, dtype,
                 KEEL_REDUCE_SUM, 0, 0);
}

static keel_status ocl_send(keel_comm comm, keel_stream stream, keel_dptr buf,
                            uint64_t count, keel_dtype dtype, int32_t peer)
{
    return issue(comm, stream, C_SEND, buf, 0, count, dtype, KEEL_REDUCE_SUM,
                 0, peer);
}

static keel_status ocl_recv(keel_comm comm, keel_stream stream, keel_dptr buf,
                            uint64_t count, keel_dtype dtype, int32_t peer)
{
    return issue(comm, stream, C_RECV, buf, 0, count, dtype, KEEL_REDUCE_SUM,
                 0, peer);
}

/* ---- groups -------------------------------------------------------------- */

static keel_status ocl_group_start(void)
{
    pthread_once(&coll_once, coll_init_once);
    tls_group.depth++;
    return KEEL_STATUS_OK;
}

static keel_status ocl_group_end(void)
{
    struct group g;
    keel_status first = KEEL_STATUS_OK, st;
    char msg[COLL_MSG] = "";
    uint32_t timeout = coll_timeout_ms();
    struct timespec dl;
    struct op **tmp;

    if (tls_group.depth <= 0)
        return ocl_fail(KEEL_STATUS_INVALID_STATE,
                        "group_end: no matching group_start on this thread");
    if (--tls_group.depth > 0)
        return KEEL_STATUS_OK;
    g = tls_group;
    memset(&tls_group, 0, sizeof(tls_group));
    dl = deadline_in(timeout);
    pthread_mutex_lock(&coll_lock);
    for (size_t i = 0; i < g.njoins; i++) {
        struct keel_comm_s *c = g.joins[i];

        if (!comm_find(c))
            continue;
        st = join_wait(c, &dl, timeout);
        if (st && !first) {
            first = st;
            snprintf(msg, sizeof(msg),
                     "group_end: rank %d of %d on opencl:%d: the other ranks "
                     "did not join within %u ms "
                     "(KEEL_OPENCL_COLL_TIMEOUT_MS)",
                     (int)c->rank, (int)c->nranks, (int)c->device, timeout);
        }
    }
    /* Drop the ops of broken communicators, then one job per queue, in
     * issue order within it. */
    for (size_t i = 0; i < g.nops; i++) {
        struct op *o = g.ops[i];

        if (comm_find(o->c) && !o->c->broken)
            continue;
        if (!first) {
            first = KEEL_STATUS_INVALID_ARGUMENT;
            snprintf(msg, sizeof(msg),
                     "group_end: %s of rank %d: its communicator never "
                     "finished comm_init_rank",
                     kind_name[o->kind], (int)o->c->rank);
        }
        op_free(o);
        g.ops[i] = NULL;
    }
    tmp = g.nops ? malloc(g.nops * sizeof(*tmp)) : NULL;
    for (size_t i = 0; i < g.nops; i++) {
        size_t n = 0;
        cl_command_queue q;

        if (!g.ops[i])
            continue;
        if (!tmp) {
            op_free(g.ops[i]);
            g.ops[i] = NULL;
            if (!first) {
                first = KEEL_STATUS_OUT_OF_MEMORY;
                snprintf(msg, sizeof(msg), "group_end: out of host memory");
            }
            continue;
        }
        q = g.ops[i]->q;
        for (size_t k = i; k < g.nops; k++)
            if (g.ops[k] && g.ops[k]->q == q) {
                tmp[n++] = g.ops[k];
                g.ops[k] = NULL;
            }
        {
            const char *what = kind_name[tmp[0]->kind];
            int32_t rank = tmp[0]->c->rank;

            st = launch_ops(tmp, n); /* frees the ops when it fails */
            if (st && !first) {
                first = st;
                snprintf(msg, sizeof(msg),
                         "group_end: enqueuing %s of rank %d failed", what,
                         (int)rank);
            }
        }
    }
    free(tmp);
    pthread_mutex_unlock(&coll_lock);
    free(g.ops);
    free(g.joins);
    if (first)
        return ocl_fail(first, "%s", msg);
    return KEEL_STATUS_OK;
}

static keel_status ocl_get_caps(int32_t device, keel_collective_caps *caps)
{
    keel_collective_caps c;
    uint32_t want, fill;
    int32_t n = 0;

    (void)ocl_device_ops.get_device_count(&n);
    if (device < 0 || device >= n)
        return ocl_fail(KEEL_STATUS_INVALID_DEVICE,
                        "collective.get_caps: device %d of %d", (int)device,
                        (int)n);
    if (!caps || caps->struct_size < 4)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "collective.get_caps: caps is NULL or its "
                        "struct_size is below 4");
    want = caps->struct_size;
    memset(&c, 0, sizeof(c));
    c.collectives = KEEL_COLL_ALL_REDUCE | KEEL_COLL_BROADCAST |
                    KEEL_COLL_REDUCE | KEEL_COLL_ALL_GATHER |
                    KEEL_COLL_REDUCE_SCATTER | KEEL_COLL_ALL_TO_ALL |
                    KEEL_COLL_SEND_RECV;
    c.dtype_mask = ok_device_dtype_mask(device);
    c.reduce_ops = KEEL_REDUCE_OP_BIT(KEEL_REDUCE_SUM) |
                   KEEL_REDUCE_OP_BIT(KEEL_REDUCE_PROD) |
                   KEEL_REDUCE_OP_BIT(KEEL_REDUCE_MAX) |
                   KEEL_REDUCE_OP_BIT(KEEL_REDUCE_MIN) |
                   KEEL_REDUCE_OP_BIT(KEEL_REDUCE_AVG);
    c.timeout_ms = coll_timeout_ms();
    fill = want < sizeof(c) ? want : (uint32_t)sizeof(c);
    c.struct_size = fill;
    memcpy(caps, &c, fill);
    return KEEL_STATUS_OK;
}

void ocl_coll_finalize(void)
{
    pthread_once(&coll_once, coll_init_once);
    pthread_mutex_lock(&coll_lock);
    while (comms)
        comm_drop(comms);
    pthread_mutex_unlock(&coll_lock);
}

const keel_collective_ops ocl_collective_ops = {
    .header = KEEL_TABLE_HEADER(keel_collective_ops),
    .get_unique_id = ocl_get_unique_id,
    .comm_init_rank = ocl_comm_init_rank,
    .comm_destroy = ocl_comm_destroy,
    .comm_rank = ocl_comm_rank,
    .all_reduce = ocl_all_reduce,
    .broadcast = ocl_broadcast,
    .reduce = ocl_reduce,
    .all_gather = ocl_all_gather,
    .reduce_scatter = ocl_reduce_scatter,
    .all_to_all = ocl_all_to_all,
    .send = ocl_send,
    .recv = ocl_recv,
    .group_start = ocl_group_start,
    .group_end = ocl_group_end,
    .get_caps = ocl_get_caps,
};
