/*
 * keel bench — collectives over every device of the plugin (one rank per
 * device, driven by this thread inside group_start/group_end, as with
 * NCCL), float32 sum, on each device's default stream.
 *
 *   collective/{all_reduce,all_gather,reduce_scatter,broadcast}/f32/SIZE
 *
 * SIZE and the bandwidths follow nccl-tests (doc/PERFORMANCE.md there):
 * SIZE is the buffer of one rank for all_reduce and broadcast, the gathered
 * (receive) buffer for all_gather and the scattered (send) buffer for
 * reduce_scatter; algbw = SIZE / time; busbw = algbw * 2(n-1)/n for
 * all_reduce, (n-1)/n for all_gather and reduce_scatter, 1 for broadcast.
 * The time runs from the first call to the end of a synchronize of every
 * rank's stream, on the host clock (as nccl-tests does). With one device
 * the factors make busbw 0 for all but broadcast; run with more devices
 * (the CPU plugin: KEEL_CPU_DEVICES=N).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb.h"

enum coll_kind { C_ALL_REDUCE, C_ALL_GATHER, C_REDUCE_SCATTER, C_BROADCAST };

static const char *const coll_names[] = {"all_reduce", "all_gather",
                                         "reduce_scatter", "broadcast"};

struct coll_bench {
    struct kb_bench b;
    enum coll_kind kind;
    uint64_t size; /* nccl-tests size in bytes */
};

#define MAX_RANKS 64

struct coll_call {
    int n;
    keel_place place[MAX_RANKS];
    keel_communicator *comm[MAX_RANKS];
    keel_dptr send[MAX_RANKS], recv[MAX_RANKS];
    uint64_t count;            /* elements per rank block */
    uint64_t send_n, recv_n;   /* elements of each buffer */
};

static void coll_free(struct coll_call *c)
{
    for (int r = 0; r < c->n; r++) {
        if (c->comm[r])
            keel_comm_destroy(c->comm[r]);
        if (c->send[r])
            keel_mem_free(c->place[r], c->send[r]);
        if (c->recv[r])
            keel_mem_free(c->place[r], c->recv[r]);
    }
    memset(c, 0, sizeof(*c));
}

static float pattern(int rank, uint64_t i)
{
    return (float)((rank + 1) * (int)(i % 13 + 1));
}

static keel_status coll_setup(const struct coll_bench *cb, struct coll_call *c)
{
    const struct kb_env *env = cb->b.env;
    uint64_t elems = cb->size / 4;
    keel_comm_id id;
    keel_status s, s2;
    float *h = NULL;

    c->n = env->ndevices;
    for (int r = 0; r < c->n; r++)
        c->place[r] = (keel_place){env->plugin, r};
    switch (cb->kind) {
    case C_ALL_GATHER:
        c->count = elems / (uint64_t)c->n;
        c->send_n = c->count;
        c->recv_n = c->count * (uint64_t)c->n;
        break;
    case C_REDUCE_SCATTER:
        c->count = elems / (uint64_t)c->n;
        c->send_n = c->count * (uint64_t)c->n;
        c->recv_n = c->count;
        break;
    default:
        c->count = c->send_n = c->recv_n = elems;
        break;
    }
    if (c->count == 0)
        return KEEL_STATUS_INVALID_ARGUMENT;
    s = keel_comm_get_unique_id(c->place[0], &id);
    if (s != KEEL_STATUS_OK)
        return s;
    s = keel_group_start(c->place[0]);
    if (s != KEEL_STATUS_OK)
        return s;
    for (int r = 0; r < c->n && s == KEEL_STATUS_OK; r++)
        s = keel_comm_init_rank(c->place[r], c->n, &id, r, &c->comm[r]);
    s2 = keel_group_end(c->place[0]);
    if (s == KEEL_STATUS_OK)
        s = s2;
    h = malloc(c->send_n * sizeof(float));
    if (!h)
        s = KEEL_STATUS_OUT_OF_MEMORY;
    for (int r = 0; r < c->n && s == KEEL_STATUS_OK; r++) {
        s = keel_mem_alloc(c->place[r], c->send_n * 4, &c->send[r]);
        if (s == KEEL_STATUS_OK)
            s = keel_mem_alloc(c->place[r], c->recv_n * 4, &c->recv[r]);
        for (uint64_t i = 0; s == KEEL_STATUS_OK && i < c->send_n; i++)
            h[i] = pattern(r, i);
        if (s == KEEL_STATUS_OK)
            s = keel_mem_copy_h2d(c->place[r], c->send[r], h, c->send_n * 4);
        if (s == KEEL_STATUS_OK)
            s = keel_mem_set(c->place[r], c->recv[r], 0, c->recv_n * 4);
    }
    free(h);
    return s;
}

/* One collective on every rank, then wait for all of them. */
static keel_status coll_run(const struct coll_bench *cb, struct coll_call *c)
{
    keel_status s = keel_group_start(c->place[0]), s2;

    if (s != KEEL_STATUS_OK)
        return s;
    for (int r = 0; r < c->n && s == KEEL_STATUS_OK; r++) {
        switch (cb->kind) {
        case C_ALL_REDUCE:
            s = keel_all_reduce(c->comm[r], NULL, c->send[r], c->recv[r],
                                c->count, KEEL_F32, KEEL_REDUCE_SUM);
            break;
        case C_ALL_GATHER:
            s = keel_all_gather(c->comm[r], NULL, c->send[r], c->recv[r],
                                c->count, KEEL_F32);
            break;
        case C_REDUCE_SCATTER:
            s = keel_reduce_scatter(c->comm[r], NULL, c->send[r], c->recv[r],
                                    c->count, KEEL_F32, KEEL_REDUCE_SUM);
            break;
        case C_BROADCAST:
            s = keel_broadcast(c->comm[r], NULL, c->send[r], c->recv[r],
                               c->count, KEEL_F32, 0);
            break;
        }
    }
    s2 = keel_group_end(c->place[0]);
    if (s == KEEL_STATUS_OK)
        s = s2;
    for (int r = 0; r < c->n && s == KEEL_STATUS_OK; r++)
        s = keel_stream_synchronize(c->place[r], NULL);
    return s;
}

static bool coll_check(keel_bm_state *st, struct coll_bench *cb,
                       struct coll_call *c)
{
    float *got = malloc(c->recv_n * sizeof(float));
    double tri = (double)c->n * (c->n + 1) / 2;
    bool ok = true;

    if (!got)
        return kb_fail(st, &cb->b, KB_ERROR, "out of host memory");
    for (int r = 0; r < c->n && ok; r++) {
        keel_status s = keel_mem_copy_d2h(c->place[r], got, c->recv[r],
                                          c->recv_n * 4);
        if (s != KEEL_STATUS_OK) {
            ok = kb_fail_status(st, &cb->b, "read result", s);
            break;
        }
        for (uint64_t i = 0; i < c->recv_n && ok; i++) {
            double want;
            switch (cb->kind) {
            case C_ALL_REDUCE:
                want = (double)(i % 13 + 1) * tri;
                break;
            case C_ALL_GATHER:
                want = pattern((int)(i / c->count), i % c->count);
                break;
            case C_REDUCE_SCATTER:
                want = (double)(((uint64_t)r * c->count + i) % 13 + 1) * tri;
                break;
            default:
                want = pattern(0, i);
                break;
            }
            if ((double)got[i] != want)
                ok = kb_fail(st, &cb->b, KB_WRONG,
                             "wrong result: %s rank %d element %llu is %g, "
                             "expected %g",
                             coll_names[cb->kind], r, (unsigned long long)i,
                             (double)got[i], want);
        }
    }
    free(got);
    return ok;
}

static void bm_coll(keel_bm_state *st, void *ctx)
{
    struct coll_bench *cb = ctx;
    const struct kb_env *env = cb->b.env;
    struct coll_call c;
    keel_status s;
    double size, algbw, factor;

    memset(&c, 0, sizeof(c));
    if (!(env->props.features & KEEL_FEATURE_COLLECTIVES) ||
        !env->api->collective) {
        kb_fail(st, &cb->b, KB_SKIPPED,
                "no collectives: plugin '%s' has no collective group",
                env->api->name);
        return;
    }
    if (env->ndevices > MAX_RANKS) {
        kb_fail(st, &cb->b, KB_ERROR, "more than %d devices", MAX_RANKS);
        return;
    }
    s = coll_setup(cb, &c);
    if (s == KEEL_STATUS_OK)
        s = coll_run(cb, &c); /* warm up */
    if (s != KEEL_STATUS_OK) {
        kb_fail_status(st, &cb->b, coll_names[cb->kind], s);
        goto out;
    }
    if (!cb->b.checked) {
        if (!coll_check(st, cb, &c))
            goto out;
        cb->b.checked = true;
    }
    while (keel_bm_keep_running(st)) {
        double t0 = kb_now();
        s = coll_run(cb, &c);
        if (s != KEEL_STATUS_OK) {
            kb_fail_status(st, &cb->b, coll_names[cb->kind], s);
            goto out;
        }
        keel_bm_set_iteration_time(st, kb_now() - t0);
    }
    size = (double)(cb->kind == C_ALL_GATHER ? c.recv_n : c.send_n) * 4;
    algbw = size * (double)keel_bm_iterations(st) / keel_bm_manual_time(st) /
            1e9;
    switch (cb->kind) {
    case C_ALL_REDUCE:
        factor = 2.0 * (c.n - 1) / c.n;
        break;
    case C_BROADCAST:
        factor = 1;
        break;
    default:
        factor = (double)(c.n - 1) / c.n;
        break;
    }
    keel_bm_set_counter(st, "algbw_GB/s", algbw, KEEL_BM_COUNTER_PLAIN);
    keel_bm_set_counter(st, "busbw_GB/s", algbw * factor,
                        KEEL_BM_COUNTER_PLAIN);
    keel_bm_set_counter(st, "ranks", c.n, KEEL_BM_COUNTER_PLAIN);
    keel_bm_set_bytes_processed(st,
                                (int64_t)(size * keel_bm_iterations(st)));
out:
    coll_free(&c);
}

void kb_register_collectives(const struct kb_env *env)
{
    static const uint64_t KiB = 1024, MiB = 1024 * 1024;
    const uint64_t full[] = {4 * KiB, 64 * KiB, MiB, 16 * MiB, 64 * MiB};
    const uint64_t smoke[] = {4 * KiB, 64 * KiB};
    const uint64_t *sizes = env->smoke ? smoke : full;
    int n = env->smoke ? 2 : 5;

    for (int k = 0; k < 4; k++)
        for (int i = 0; i < n; i++) {
            char name[128], sz[32];
            struct coll_bench *cb;
            kb_format_size(sizes[i], sz, sizeof(sz));
            snprintf(name, sizeof(name), "collective/%s/f32/%s",
                     coll_names[k], sz);
            cb = kb_register(env, name, sizeof(*cb), bm_coll,
                             KEEL_BM_TIME_MANUAL, KEEL_BM_UNIT_US);
            if (cb) {
                cb->kind = (enum coll_kind)k;
                cb->size = sizes[i];
            }
        }
}
