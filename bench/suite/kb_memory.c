/*
 * keel bench — memory: copy bandwidth and allocation latency.
 *
 *   memory/h2d/{pageable,pinned}/SIZE   host -> device copy, GB/s
 *   memory/d2h/{pageable,pinned}/SIZE   device -> host copy, GB/s
 *   memory/d2d/SIZE                     device -> device copy, GB/s
 *   host/memcpy/SIZE                    memcpy between two host buffers,
 *                                       the yardstick for d2d on a host
 *                                       device (same size accounting)
 *   memory/alloc_free/caching/SIZE      keel_empty + keel_tensor_free
 *                                       (keel's caching allocator), ns
 *   memory/alloc_free/plugin/SIZE       the plugin's own alloc + free, ns
 *   paired/d2d_vs_memcpy/SIZE           d2d and memcpy alternating within
 *                                       each iteration: the anchor ratio
 *
 * SIZE runs 4KiB .. 256MiB; 1GiB is added by --large (or a filter naming
 * 1GiB). Bandwidth counts each byte once (size / time), as CUDA's
 * bandwidthTest does, for copies and memcpy alike. Copies are the
 * asynchronous ABI calls on the default stream, timed with events when the
 * plugin has them. Pageable buffers come from malloc, pinned ones from the
 * plugin's host_alloc.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb.h"

enum mem_kind { MEM_H2D, MEM_D2H, MEM_D2D, MEM_MEMCPY };

struct copy_bench {
    struct kb_bench b;
    enum mem_kind kind;
    bool pinned;
    uint64_t size;
};

struct alloc_bench {
    struct kb_bench b;
    bool caching;
    uint64_t size;
};

/* Buffers of one copy benchmark call. */
struct copy_bufs {
    keel_place place;
    bool pinned;
    void *host;      /* source (h2d) or destination (d2h) on the host */
    void *host2;     /* the other host buffer (memcpy, checks)       */
    keel_dptr dev, dev2;
};

static void fill_pattern(void *p, uint64_t size, uint64_t seed)
{
    uint64_t *w = p, s = seed * 0x9e3779b97f4a7c15ull + 1;
    uint64_t n = size / 8;

    for (uint64_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        w[i] = s;
    }
    memset((char *)p + n * 8, (int)(seed & 0xff), size - n * 8);
}

static void bufs_free(struct copy_bufs *u)
{
    if (u->pinned && u->host)
        keel_mem_host_free(u->place, u->host);
    else
        free(u->host);
    free(u->host2);
    if (u->dev)
        keel_mem_free(u->place, u->dev);
    if (u->dev2)
        keel_mem_free(u->place, u->dev2);
    memset(u, 0, sizeof(*u));
}

static bool bufs_alloc(keel_bm_state *st, struct copy_bench *c,
                       struct copy_bufs *u)
{
    const struct kb_env *env = c->b.env;
    keel_status s = KEEL_STATUS_OK;

    memset(u, 0, sizeof(*u));
    u->place = env->place;
    u->pinned = c->pinned;
    if (c->pinned) {
        if (!(env->props.features & KEEL_FEATURE_PINNED_HOST) ||
            !env->api->memory->host_alloc)
            return kb_fail(st, &c->b, KB_SKIPPED,
                           "no pinned memory: plugin '%s' does not provide "
                           "host_alloc (KEEL_FEATURE_PINNED_HOST)",
                           env->api->name);
        s = keel_mem_host_alloc(env->place, c->size, &u->host);
    } else {
        u->host = malloc(c->size);
        if (!u->host)
            s = KEEL_STATUS_OUT_OF_MEMORY;
    }
    if (s != KEEL_STATUS_OK)
        return kb_fail_status(st, &c->b, "host buffer", s);
    u->host2 = malloc(c->size);
    if (!u->host2)
        return kb_fail(st, &c->b, KB_ERROR, "out of host memory");
    /* Touch every page before timing anything. */
    fill_pattern(u->host, c->size, 1);
    memset(u->host2, 0, c->size);
    if (c->kind == MEM_MEMCPY)
        return true;
    s = keel_mem_alloc(env->place, c->size, &u->dev);
    if (s == KEEL_STATUS_OK && c->kind == MEM_D2D)
        s = keel_mem_alloc(env->place, c->size, &u->dev2);
    if (s == KEEL_STATUS_OK)
        s = keel_mem_set(env->place, u->dev, 0, c->size);
    if (s != KEEL_STATUS_OK)
        return kb_fail_status(st, &c->b, "device buffer", s);
    return true;
}

/* The timed operation. */
static keel_status copy_once(const struct copy_bench *c, struct copy_bufs *u)
{
    keel_place p = u->place;

    switch (c->kind) {
    case MEM_H2D:
        return keel_mem_copy_h2d_async(p, NULL, u->dev, u->host, c->size);
    case MEM_D2H:
        return keel_mem_copy_d2h_async(p, NULL, u->host, u->dev, c->size);
    case MEM_D2D:
        return keel_mem_copy_d2d_async(p, NULL, u->dev2, u->dev, c->size);
    default:
        memcpy(u->host2, u->host, c->size);
        return KEEL_STATUS_OK;
    }
}

/* Once per benchmark: the bytes arrive intact. */
static bool copy_check(keel_bm_state *st, struct copy_bench *c,
                       struct copy_bufs *u)
{
    keel_place p = u->place;
    keel_status s = KEEL_STATUS_OK;
    void *expect = u->host, *got = u->host2;

    switch (c->kind) {
    case MEM_H2D:
        fill_pattern(u->host, c->size, 7);
        s = keel_mem_copy_h2d_async(p, NULL, u->dev, u->host, c->size);
        if (s == KEEL_STATUS_OK)
            s = keel_stream_synchronize(p, NULL);
        if (s == KEEL_STATUS_OK)
            s = keel_mem_copy_d2h(p, u->host2, u->dev, c->size);
        break;
    case MEM_D2H:
        fill_pattern(u->host2, c->size, 7);
        expect = u->host2;
        got = u->host;
        s = keel_mem_copy_h2d(p, u->dev, u->host2, c->size);
        if (s == KEEL_STATUS_OK)
            s = keel_mem_copy_d2h_async(p, NULL, u->host, u->dev, c->size);
        if (s == KEEL_STATUS_OK)
            s = keel_stream_synchronize(p, NULL);
        break;
    case MEM_D2D:
        fill_pattern(u->host, c->size, 7);
        s = keel_mem_copy_h2d(p, u->dev, u->host, c->size);
        if (s == KEEL_STATUS_OK)
            s = keel_mem_copy_d2d_async(p, NULL, u->dev2, u->dev, c->size);
        if (s == KEEL_STATUS_OK)
            s = keel_stream_synchronize(p, NULL);
        if (s == KEEL_STATUS_OK)
            s = keel_mem_copy_d2h(p, u->host2, u->dev2, c->size);
        break;
    default:
        memcpy(u->host2, u->host, c->size);
        break;
    }
    if (s != KEEL_STATUS_OK)
        return kb_fail_status(st, &c->b, "check copy", s);
    if (memcmp(expect, got, c->size) != 0)
        return kb_fail(st, &c->b, KB_WRONG,
                       "wrong result: the copied bytes differ from the "
                       "source");
    return true;
}

static void bm_copy(keel_bm_state *st, void *ctx)
{
    struct copy_bench *c = ctx;
    struct copy_bufs u;
    struct kb_timer t;
    keel_status s;
    bool host_only = c->kind == MEM_MEMCPY;
    double secs;

    if (kb_timer_init(&t, c->b.env) != KEEL_STATUS_OK) {
        kb_fail_status(st, &c->b, "event create", keel_last_status());
        return;
    }
    if (!bufs_alloc(st, c, &u))
        goto out;
    /* Warm up (page mappings, copy engines), then check once. */
    s = copy_once(c, &u);
    if (s == KEEL_STATUS_OK && !host_only)
        s = keel_stream_synchronize(u.place, NULL);
    if (s != KEEL_STATUS_OK) {
        kb_fail_status(st, &c->b, "copy", s);
        goto out;
    }
    if (!c->b.checked) {
        if (!copy_check(st, c, &u))
            goto out;
        c->b.checked = true;
    }
    while (keel_bm_keep_running(st)) {
        if (host_only) {
            double t0 = kb_now();
            copy_once(c, &u);
            secs = kb_now() - t0;
            s = KEEL_STATUS_OK;
        } else {
            s = kb_timer_start(&t);
            if (s == KEEL_STATUS_OK)
                s = copy_once(c, &u);
            if (s == KEEL_STATUS_OK)
                s = kb_timer_stop(&t, &secs);
        }
        if (s != KEEL_STATUS_OK) {
            kb_fail_status(st, &c->b, "copy", s);
            goto out;
        }
        keel_bm_set_iteration_time(st, secs > 0 ? secs : 1e-9);
    }
    keel_bm_set_bytes_processed(st, (int64_t)c->size * keel_bm_iterations(st));
    keel_bm_set_counter(st, "GB/s",
                        (double)c->size * (double)keel_bm_iterations(st) /
                            keel_bm_manual_time(st) / 1e9,
                        KEEL_BM_COUNTER_PLAIN);
out:
    bufs_free(&u);
    kb_timer_destroy(&t);
}

/*
 * paired/d2d_vs_memcpy/SIZE: each iteration runs the device copy and a
 * host memcpy of the same size in the order d2d, memcpy, memcpy, d2d, and
 * times each; reports the d2d time (the mean of its two runs) and GB/s,
 * memcpy_GB/s and d2d/memcpy from the same iterations (robust to load
 * that comes and goes).
 */
static void bm_pair_copy(keel_bm_state *st, void *ctx)
{
    struct copy_bench *c = ctx;
    struct copy_bufs u;
    struct copy_bench mc = *c;
    struct kb_timer t;
    double td = 0, tm = 0, secs = 0, iters, gd, gm;
    keel_status s;

    memset(&u, 0, sizeof(u));
    if (kb_timer_init(&t, c->b.env) != KEEL_STATUS_OK) {
        kb_fail_status(st, &c->b, "event create", keel_last_status());
        return;
    }
    if (!bufs_alloc(st, c, &u))
        goto out;
    mc.kind = MEM_MEMCPY;
    s = copy_once(c, &u);
    if (s == KEEL_STATUS_OK)
        s = keel_stream_synchronize(u.place, NULL);
    if (s != KEEL_STATUS_OK) {
        kb_fail_status(st, &c->b, "copy", s);
        goto out;
    }
    copy_once(&mc, &u);
    if (!c->b.checked) {
        if (!copy_check(st, c, &u))
            goto out;
        c->b.checked = true;
    }
    while (keel_bm_keep_running(st)) {
        double iter = 0;
        /* d2d, memcpy, memcpy, d2d: drift within the iteration cancels. */
        for (int q = 0; q < 4; q++) {
            if (q == 0 || q == 3) {
                s = kb_timer_start(&t);
                if (s == KEEL_STATUS_OK)
                    s = copy_once(c, &u);
                if (s == KEEL_STATUS_OK)
                    s = kb_timer_stop(&t, &secs);
                if (s != KEEL_STATUS_OK) {
                    kb_fail_status(st, &c->b, "copy", s);
                    goto out;
                }
                td += secs;
                iter += secs / 2;
            } else {
                double t0 = kb_now();
                copy_once(&mc, &u);
                tm += kb_now() - t0;
            }
        }
        keel_bm_set_iteration_time(st, iter);
    }
    iters = 2.0 * (double)keel_bm_iterations(st);
    gd = (double)c->size * iters / td / 1e9;
    gm = (double)c->size * iters / tm / 1e9;
    keel_bm_set_bytes_processed(st, (int64_t)c->size * keel_bm_iterations(st));
    keel_bm_set_counter(st, "GB/s", gd, KEEL_BM_COUNTER_PLAIN);
    keel_bm_set_counter(st, "memcpy_GB/s", gm, KEEL_BM_COUNTER_PLAIN);
    keel_bm_set_counter(st, "d2d/memcpy", gd / gm, KEEL_BM_COUNTER_PLAIN);
out:
    bufs_free(&u);
    kb_timer_destroy(&t);
}

static void bm_alloc(keel_bm_state *st, void *ctx)
{
    struct alloc_bench *a = ctx;
    const struct kb_env *env = a->b.env;
    const keel_memory_ops *mem = env->api->memory;
    int64_t shape[1] = {(int64_t)a->size};
    keel_memory_stats s0, s1;
    keel_status s;

    if (a->caching) {
        keel_tensor *t = NULL;
        /* Warm up: the first allocation fills the cache. */
        s = keel_empty(1, shape, KEEL_U8, env->device, &t);
        if (s == KEEL_STATUS_OK && keel_tensor_numel(t) != (int64_t)a->size)
            s = KEEL_STATUS_INTERNAL;
        keel_tensor_free(t);
        if (s == KEEL_STATUS_OK)
            s = keel_memory_stats_get(env->device, &s0);
        if (s != KEEL_STATUS_OK) {
            kb_fail_status(st, &a->b, "keel_empty", s);
            return;
        }
        while (keel_bm_keep_running(st)) {
            s = keel_empty(1, shape, KEEL_U8, env->device, &t);
            if (s != KEEL_STATUS_OK) {
                kb_fail_status(st, &a->b, "keel_empty", s);
                return;
            }
            keel_tensor_free(t);
        }
        /* How often the cache had to go to the plugin. */
        if (keel_memory_stats_get(env->device, &s1) == KEEL_STATUS_OK &&
            keel_bm_iterations(st) > 0)
            keel_bm_set_counter(st, "plugin_allocs_per_iter",
                                (double)(s1.plugin_allocs - s0.plugin_allocs) /
                                    (double)keel_bm_iterations(st),
                                KEEL_BM_COUNTER_PLAIN);
    } else {
        keel_dptr p = 0;
        s = mem->alloc(env->place.device, a->size, &p);
        if (s == KEEL_STATUS_OK && !p)
            s = KEEL_STATUS_INTERNAL;
        if (p)
            mem->free(env->place.device, p);
        if (s != KEEL_STATUS_OK) {
            kb_fail(st, &a->b, KB_ERROR, "plugin alloc of %llu bytes: %s",
                    (unsigned long long)a->size, keel_status_name(s));
            return;
        }
        while (keel_bm_keep_running(st)) {
            s = mem->alloc(env->place.device, a->size, &p);
            if (s != KEEL_STATUS_OK) {
                kb_fail(st, &a->b, KB_ERROR, "plugin alloc: %s",
                        keel_status_name(s));
                return;
            }
            mem->free(env->place.device, p);
        }
    }
    a->b.checked = true;
}

static void add_copy(const struct kb_env *env, const char *prefix,
                     enum mem_kind kind, bool pinned, uint64_t size)
{
    char name[128], sz[32];
    struct copy_bench *c;

    kb_format_size(size, sz, sizeof(sz));
    snprintf(name, sizeof(name), "%s/%s", prefix, sz);
    c = kb_register(env, name, sizeof(*c), bm_copy, KEEL_BM_TIME_MANUAL,
                    KEEL_BM_UNIT_US);
    if (!c)
        return;
    c->kind = kind;
    c->pinned = pinned;
    c->size = size;
}

void kb_register_memory(const struct kb_env *env)
{
    static const uint64_t KiB = 1024, MiB = 1024 * 1024;
    const uint64_t full[] = {4 * KiB, 64 * KiB, MiB, 16 * MiB, 256 * MiB,
                             1024 * MiB};
    const uint64_t smoke[] = {4 * KiB, 64 * KiB};
    const uint64_t *sizes = env->smoke ? smoke : full;
    int n = env->smoke ? 2 : env->large ? 6 : 5;
    const uint64_t asizes[] = {4 * KiB, MiB, 64 * MiB};
    int na = env->smoke ? 2 : 3;

    for (int dir = 0; dir < 2; dir++)
        for (int pinned = 0; pinned < 2; pinned++)
            for (int i = 0; i < n; i++)
                add_copy(env,
                         dir == 0 ? (pinned ? "memory/h2d/pinned"
                                            : "memory/h2d/pageable")
                                  : (pinned ? "memory/d2h/pinned"
                                            : "memory/d2h/pageable"),
                         dir == 0 ? MEM_H2D : MEM_D2H, pinned, sizes[i]);
    for (int i = 0; i < n; i++) {
        add_copy(env, "memory/d2d", MEM_D2D, false, sizes[i]);
        add_copy(env, "host/memcpy", MEM_MEMCPY, false, sizes[i]);
    }
    for (int i = env->smoke ? 1 : 3; i < n && i < 5; i++) {
        char name[128], sz[32];
        struct copy_bench *c;
        kb_format_size(sizes[i], sz, sizeof(sz));
        snprintf(name, sizeof(name), "paired/d2d_vs_memcpy/%s", sz);
        c = kb_register(env, name, sizeof(*c), bm_pair_copy,
                        KEEL_BM_TIME_MANUAL, KEEL_BM_UNIT_US);
        if (c) {
            c->kind = MEM_D2D;
            c->size = sizes[i];
        }
    }
    for (int caching = 1; caching >= 0; caching--)
        for (int i = 0; i < na; i++) {
            char name[128], sz[32];
            struct alloc_bench *a;
            kb_format_size(asizes[i], sz, sizeof(sz));
            snprintf(name, sizeof(name), "memory/alloc_free/%s/%s",
                     caching ? "caching" : "plugin", sz);
            a = kb_register(env, name, sizeof(*a), bm_alloc,
                            KEEL_BM_TIME_REAL, KEEL_BM_UNIT_NS);
            if (a) {
                a->caching = caching;
                a->size = asizes[i];
            }
        }
}
