/*
 * keel conform — several host threads using the plugin at once, each on its
 * own stream. Worker threads never call CUnit: they record their first
 * failure, and the test thread reports it after joining them.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "conform.h"

#define MEM (cf_env.api->memory)
#define STR (cf_env.api->stream)

struct worker {
    int id;
    int32_t dev;
    int iters;
    bool failed;
    char err[512];
    keel_kernel kernel;
    uint64_t churn_bytes;
};

static void wfail(struct worker *w, const char *fmt, ...) CF_PRINTF(2, 3);

static void wfail(struct worker *w, const char *fmt, ...)
{
    va_list ap;

    if (w->failed)
        return;
    w->failed = true;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof(w->err), fmt, ap);
    va_end(ap);
}

#define WOK(w, expr, what)                                                   \
    do {                                                                     \
        keel_status st_ = (expr);                                            \
        if (st_ != KEEL_STATUS_OK) {                                         \
            wfail((w), "thread %d: %s returned %s", (w)->id, (what),         \
                  keel_status_name(st_));                                    \
            goto out;                                                        \
        }                                                                    \
    } while (0)

static int nthreads(void)
{
    int n = cf_env.level >= CF_LEVEL_FULL ? 2 * cf_env.ndev : 2;

    if (n < 4 && cf_env.level >= CF_LEVEL_FULL)
        n = 4;
    return n > 8 ? 8 : n;
}

static void run_workers(void *(*fn)(void *), int iters, keel_kernel *kernels)
{
    int n = nthreads(), started = 0;
    struct worker w[8];
    pthread_t th[8];

    for (int t = 0; t < n; t++) {
        memset(&w[t], 0, sizeof(w[t]));
        w[t].id = t;
        w[t].dev = cf_env.dev[t % cf_env.ndev];
        w[t].iters = iters;
        if (kernels)
            w[t].kernel = kernels[t % cf_env.ndev];
        if (pthread_create(&th[t], NULL, fn, &w[t]) != 0)
            break;
        started++;
    }
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    CF_CHECK(started == n, "could only start %d of %d threads", started, n);
    for (int t = 0; t < started; t++)
        if (w[t].failed)
            CF_FAIL("%s", w[t].err);
}

/* ---- copies ---------------------------------------------------------------- */

static void *copy_worker(void *arg)
{
    struct worker *w = arg;
    struct cf_rng r;
    keel_stream s = NULL;

    cf_rng_seed(&r, (uint64_t)w->id * 7919);
    WOK(w, STR->stream_create(w->dev, 0, &s), "stream_create");
    for (int it = 0; it < w->iters; it++) {
        size_t n = (size_t)cf_rng_int(&r, 1, 256 << 10);
        unsigned char *x = malloc(n), *y = malloc(n);
        keel_dptr a = 0, b = 0;
        int64_t bad;

        if (!x || !y) {
            free(x);
            free(y);
            wfail(w, "thread %d: out of host memory", w->id);
            break;
        }
        cf_pattern(x, n, (uint32_t)(w->id * 1000 + it));
        if (MEM->alloc(w->dev, n, &a) || MEM->alloc(w->dev, n, &b)) {
            wfail(w, "thread %d: alloc of %zu bytes failed", w->id, n);
        } else if (MEM->copy_h2d_async(w->dev, s, a, x, n) ||
                   MEM->copy_d2d_async(w->dev, s, b, a, n) ||
                   MEM->copy_d2h_async(w->dev, s, y, b, n) ||
                   STR->stream_synchronize(w->dev, s)) {
            wfail(w, "thread %d: an async copy of %zu bytes failed", w->id,
                  n);
        } else if ((bad = cf_pattern_check(y, n, (uint32_t)(w->id * 1000 +
                                                             it))) >= 0) {
            wfail(w,
                  "thread %d (device %d, own stream), iteration %d: %zu bytes "
                  "copied h2d -> d2d -> d2h came back wrong at byte %lld",
                  w->id, (int)w->dev, it, n, (long long)bad);
        }
        if (a)
            MEM->free(w->dev, a);
        if (b)
            MEM->free(w->dev, b);
        free(x);
        free(y);
        if (w->failed)
            break;
    }
out:
    if (s)
        STR->stream_destroy(w->dev, s);
    return NULL;
}

static void t_threads_copies(void)
{
    run_workers(copy_worker, cf_env.level >= CF_LEVEL_FULL ? 100 : 20, NULL);
}

/* ---- kernels ------------------------------------------------------------------ */

static void *kernel_worker(void *arg)
{
    struct worker *w = arg;
    enum { N = 4099 };
    float x[N], y[N], z[N];
    keel_tensor_desc in[2], o;
    keel_dptr a = 0, b = 0, c = 0;
    keel_stream s = NULL;

    WOK(w, STR->stream_create(w->dev, 0, &s), "stream_create");
    WOK(w, MEM->alloc(w->dev, sizeof(x), &a), "alloc");
    WOK(w, MEM->alloc(w->dev, sizeof(y), &b), "alloc");
    WOK(w, MEM->alloc(w->dev, sizeof(z), &c), "alloc");
    memset(in, 0, sizeof(in));
    for (int q = 0; q < 2; q++) {
        in[q].data = q ? b : a;
        in[q].dtype = KEEL_F32;
        in[q].ndim = 1;
        in[q].shape[0] = N;
        in[q].strides[0] = 1;
    }
    o = in[0];
    o.data = c;
    for (int it = 0; it < w->iters; it++) {
        keel_kernel_args args = {sizeof(args), w->dev, s, in, 2, &o, 1,
                                 NULL, 0, NULL, NULL};
        for (int i = 0; i < N; i++) {
            x[i] = (float)(w->id * 100 + it);
            y[i] = (float)i;
        }
        WOK(w, MEM->copy_h2d_async(w->dev, s, a, x, sizeof(x)),
            "copy_h2d_async");
        WOK(w, MEM->copy_h2d_async(w->dev, s, b, y, sizeof(y)),
            "copy_h2d_async");
        WOK(w, w->kernel.fn(w->kernel.kernel_data, &args), "add kernel");
        WOK(w, MEM->copy_d2h_async(w->dev, s, z, c, sizeof(z)),
            "copy_d2h_async");
        WOK(w, STR->stream_synchronize(w->dev, s), "stream_synchronize");
        for (int i = 0; i < N; i++)
            if (z[i] != x[i] + y[i]) {
                wfail(w,
                      "thread %d (device %d), iteration %d: add gave %g at "
                      "%d, expected %g",
                      w->id, (int)w->dev, it, z[i], i, x[i] + y[i]);
                goto out;
            }
    }
out:
    if (a)
        MEM->free(w->dev, a);
    if (b)
        MEM->free(w->dev, b);
    if (c)
        MEM->free(w->dev, c);
    if (s)
        STR->stream_destroy(w->dev, s);
    return NULL;
}

static void t_threads_kernels(void)
{
    keel_kernel k[CF_MAX_DEVICES];

    if (!cf_env.api->kernel) {
        cf_skip("the plugin has no kernel group");
        return;
    }
    for (int i = 0; i < cf_env.ndev; i++) {
        keel_status st = cf_env.api->kernel->lookup(cf_env.dev[i], "add",
                                                    KEEL_F32, &k[i]);
        if (st == KEEL_STATUS_NOT_FOUND) {
            cf_skip("add (float32) is not provided");
            return;
        }
        if (!CF_OK(st, "kernel.lookup(add, float32)"))
            return;
    }
    run_workers(kernel_worker, cf_env.level >= CF_LEVEL_FULL ? 50 : 10, k);
}

/* ---- events handed between threads ---------------------------------------------- */

enum { ROUNDS = 8, EV_BYTES = 1 << 18 };

struct handoff {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int32_t dev;
    keel_event ev[ROUNDS];
    keel_dptr a[ROUNDS];
    int ready;
    bool stop;
    char err[512];
};

static void *producer(void *arg)
{
    struct handoff *h = arg;
    unsigned char *x = malloc((size_t)ROUNDS * EV_BYTES);
    keel_stream s = NULL;

    if (!x || STR->stream_create(h->dev, 0, &s) != KEEL_STATUS_OK) {
        snprintf(h->err, sizeof(h->err), "producer: setup failed");
        goto out;
    }
    for (int k = 0; k < ROUNDS; k++) {
        cf_pattern(x + (size_t)k * EV_BYTES, EV_BYTES, (uint32_t)(500 + k));
        if (MEM->copy_h2d_async(h->dev, s, h->a[k], x + (size_t)k * EV_BYTES,
                                EV_BYTES) ||
            STR->event_record(h->dev, h->ev[k], s)) {
            snprintf(h->err, sizeof(h->err),
                     "producer: copy or event_record failed in round %d", k);
            break;
        }
        pthread_mutex_lock(&h->lock);
        h->ready = k + 1;
        pthread_cond_signal(&h->cond);
        pthread_mutex_unlock(&h->lock);
    }
    /* x must outlive the copies. */
    if (s)
        STR->stream_synchronize(h->dev, s);
out:
    pthread_mutex_lock(&h->lock);
    h->stop = true;
    pthread_cond_signal(&h->cond);
    pthread_mutex_unlock(&h->lock);
    if (s)
        STR->stream_destroy(h->dev, s);
    free(x);
    return NULL;
}

static void t_threads_events(void)
{
    struct handoff h;
    unsigned char *got = malloc(EV_BYTES);
    keel_dptr b = 0;
    keel_stream s = NULL;
    pthread_t th;
    int made = 0;
    bool started = false;

    memset(&h, 0, sizeof(h));
    pthread_mutex_init(&h.lock, NULL);
    pthread_cond_init(&h.cond, NULL);
    h.dev = cf_env.dev[0];
    if (!CF_CHECK(got, "out of host memory") || !cf_stream_new(h.dev, &s) ||
        !cf_alloc(h.dev, EV_BYTES, &b))
        goto out;
    for (; made < ROUNDS; made++)
        if (!CF_OK(STR->event_create(h.dev, &h.ev[made]), "event_create") ||
            !cf_alloc(h.dev, EV_BYTES, &h.a[made]))
            goto out;
    if (!CF_CHECK(pthread_create(&th, NULL, producer, &h) == 0,
                  "cannot start a thread"))
        goto out;
    started = true;
    for (int k = 0; k < ROUNDS; k++) {
        int ready;

        /* h.ready is the producer's: read it only under the lock. */
        pthread_mutex_lock(&h.lock);
        while (h.ready <= k && !h.stop)
            pthread_cond_wait(&h.cond, &h.lock);
        ready = h.ready;
        pthread_mutex_unlock(&h.lock);
        if (ready <= k)
            break;
        CF_OK(STR->stream_wait_event(h.dev, s, h.ev[k]),
              "stream_wait_event on an event recorded by another thread");
        CF_OK(MEM->copy_d2d_async(h.dev, s, b, h.a[k], EV_BYTES),
              "copy_d2d_async");
        CF_OK(MEM->copy_d2h_async(h.dev, s, got, b, EV_BYTES),
              "copy_d2h_async");
        if (!cf_sync(h.dev, s))
            break;
        if (!CF_CHECK(cf_pattern_check(got, EV_BYTES, (uint32_t)(500 + k)) < 0,
                      "round %d: work after stream_wait_event on an event "
                      "recorded by another thread did not see the copy "
                      "before it",
                      k))
            break;
    }
out:
    if (started)
        pthread_join(th, NULL);
    if (h.err[0])
        CF_FAIL("%s", h.err);
    for (int k = 0; k < made; k++) {
        STR->event_destroy(h.dev, h.ev[k]);
        cf_free(h.dev, h.a[k]);
    }
    if (made < ROUNDS && h.ev[made])
        STR->event_destroy(h.dev, h.ev[made]);
    cf_free(h.dev, b);
    cf_stream_del(h.dev, s);
    pthread_mutex_destroy(&h.lock);
    pthread_cond_destroy(&h.cond);
    free(got);
}

/* ---- allocation churn -------------------------------------------------------------- */

static void *churn_worker(void *arg)
{
    struct worker *w = arg;
    keel_dptr live[32] = {0};
    struct cf_rng r;

    cf_rng_seed(&r, (uint64_t)w->id + 99);
    for (int it = 0; it < w->iters; it++) {
        int k = (int)cf_rng_int(&r, 0, 31);
        if (live[k]) {
            WOK(w, MEM->free(w->dev, live[k]), "free");
            live[k] = 0;
        } else {
            uint64_t n = (uint64_t)cf_rng_int(&r, 1, 1 << 20);
            WOK(w, MEM->alloc(w->dev, n, &live[k]), "alloc");
            WOK(w, MEM->memset(w->dev, live[k], (uint8_t)k, n < 64 ? n : 64),
                "memset");
        }
    }
out:
    for (int k = 0; k < 32; k++)
        if (live[k])
            MEM->free(w->dev, live[k]);
    return NULL;
}

static void t_threads_alloc_churn(void)
{
    keel_memory_info before[CF_MAX_DEVICES], after;

    for (int i = 0; i < cf_env.ndev; i++)
        if (!CF_OK(MEM->get_memory_info(cf_env.dev[i], &before[i]),
                   "get_memory_info"))
            return;
    run_workers(churn_worker, cf_env.level >= CF_LEVEL_STRESS ? 20000 : 1000,
                NULL);
    for (int i = 0; i < cf_env.ndev; i++)
        if (CF_OK(MEM->get_memory_info(cf_env.dev[i], &after),
                  "get_memory_info"))
            CF_CHECK(after.used == before[i].used,
                     "device %d: %llu bytes used after every thread freed "
                     "its blocks, %llu before",
                     (int)cf_env.dev[i], (unsigned long long)after.used,
                     (unsigned long long)before[i].used);
}

const struct cf_test_spec cf_concurrency_tests[] = {
    {"concurrency", "threads_copies", CF_LEVEL_SMOKE, t_threads_copies,
     "threads allocating and copying on their own streams"},
    {"concurrency", "threads_kernels", CF_LEVEL_SMOKE, t_threads_kernels,
     "threads launching kernels on their own streams"},
    {"concurrency", "threads_events", CF_LEVEL_SMOKE, t_threads_events,
     "an event recorded by one thread orders another thread's stream"},
    {"concurrency", "threads_alloc_churn", CF_LEVEL_FULL,
     t_threads_alloc_churn, "threads allocating and freeing at once"},
    {NULL, NULL, 0, NULL, NULL},
};
