/*
 * keel conform — streams and events.
 *
 * Work on one stream runs in order; work on two streams is ordered only
 * through events. To make "pending" observable without timing luck, a
 * gate (a host function that blocks its stream until the test opens it)
 * holds a stream back when the plugin has host callbacks. A plugin may run
 * asynchronous work eagerly: then the gate runs inside the launching call,
 * gives up after a short bound, and the tests note it.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "conform.h"

#define MEM (cf_env.api->memory)
#define STR (cf_env.api->stream)

/* How long a gate holds: long when the plugin claims asynchronous work,
 * short otherwise (an eager plugin runs the gate inside the call). */
static double gate_limit(int i)
{
    return cf_has_feature(i, KEEL_FEATURE_ASYNC_COPY) ? 10.0 : 0.05;
}

/* Launch a gate on s; returns true when the launch returned before the
 * gate finished (the stream is really held). */
static bool gate_launch(int i, keel_stream s, struct cf_gate *g)
{
    int32_t d = cf_env.dev[i];

    cf_gate_init(g, gate_limit(i));
    if (!CF_OK(STR->launch_host_func(d, s, cf_gate_fn, g),
               "stream.launch_host_func(%d)", (int)d))
        return false;
    return g->ran == 0;
}

static bool have_callbacks(int i)
{
    return cf_has_feature(i, KEEL_FEATURE_HOST_CALLBACK) &&
           STR->launch_host_func;
}

static void t_create_destroy(void)
{
    static const int32_t prios[] = {0, -1, 1, INT32_MIN, INT32_MAX};

    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];

        for (size_t k = 0; k < sizeof(prios) / sizeof(prios[0]); k++) {
            keel_stream s = NULL;
            if (CF_OK(STR->stream_create(d, prios[k], &s),
                      "stream.stream_create(%d, priority %d)", (int)d,
                      (int)prios[k])) {
                CF_CHECK(s != NULL, "stream_create gave a NULL stream");
                CF_OK(STR->stream_query(d, s), "stream.stream_query(new)");
                CF_OK(STR->stream_synchronize(d, s),
                      "stream.stream_synchronize(new)");
                CF_OK(STR->stream_destroy(d, s), "stream.stream_destroy");
            }
        }
        CF_OK(STR->stream_query(d, NULL), "stream.stream_query(default)");
        CF_OK(STR->stream_synchronize(d, NULL),
              "stream.stream_synchronize(default)");
    }
    CF_EXPECT(STR->stream_create(cf_env.dev[0], 0, NULL),
              KEEL_STATUS_INVALID_ARGUMENT, "stream.stream_create(NULL)");
    CF_EXPECT(STR->stream_create(cf_env.device_count, 0,
                                 &(keel_stream){NULL}),
              KEEL_STATUS_INVALID_DEVICE, "stream.stream_create on device %d",
              (int)cf_env.device_count);
    CF_EXPECT(STR->stream_synchronize(-1, NULL), KEEL_STATUS_INVALID_DEVICE,
              "stream.stream_synchronize on device -1");
    CF_EXPECT(STR->stream_query(-1, NULL), KEEL_STATUS_INVALID_DEVICE,
              "stream.stream_query on device -1");
}

static void t_many_streams(void)
{
    int n = cf_env.level >= CF_LEVEL_FULL ? 128 : 16;
    keel_stream *s = calloc((size_t)n, sizeof(*s));
    unsigned char *got = malloc((size_t)n * 256);

    if (!CF_CHECK(s && got, "out of host memory"))
        goto out;
    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];
        keel_dptr buf;
        int made = 0;

        if (!cf_alloc(d, (uint64_t)n * 256, &buf))
            continue;
        for (; made < n; made++)
            if (!CF_OK(STR->stream_create(d, 0, &s[made]),
                       "stream.stream_create #%d on device %d", made, (int)d))
                break;
        for (int k = 0; k < made; k++)
            CF_OK(MEM->memset_async(d, s[k], buf + (keel_dptr)k * 256,
                                    (uint8_t)(k + 1), 256),
                  "memory.memset_async on stream %d", k);
        for (int k = 0; k < made; k++)
            cf_sync(d, s[k]);
        if (made == n && cf_download(d, got, buf, (uint64_t)n * 256))
            for (int k = 0; k < n * 256; k++)
                if (!CF_CHECK(got[k] == (uint8_t)(k / 256 + 1),
                              "device %d: stream %d's memset is missing",
                              (int)d, k / 256))
                    break;
        for (int k = 0; k < made; k++)
            cf_stream_del(d, s[k]);
        cf_free(d, buf);
    }
out:
    free(s);
    free(got);
}

/* One round of dependent work on one stream. */
static void ordering_on(int i, keel_stream s, size_t n, int rounds)
{
    int32_t d = cf_env.dev[i];
    unsigned char **x = calloc((size_t)rounds, sizeof(*x));
    unsigned char **ob = calloc((size_t)rounds, sizeof(*ob));
    unsigned char **oc = calloc((size_t)rounds, sizeof(*oc));
    keel_dptr a = 0, b = 0, c = 0;

    if (!CF_CHECK(x && ob && oc, "out of host memory"))
        goto out;
    if (!cf_alloc(d, n, &a) || !cf_alloc(d, n, &b) || !cf_alloc(d, n, &c))
        goto out;
    for (int r = 0; r < rounds; r++) {
        x[r] = malloc(n);
        ob[r] = calloc(1, n);
        oc[r] = calloc(1, n);
        if (!CF_CHECK(x[r] && ob[r] && oc[r], "out of host memory"))
            goto out;
        cf_pattern(x[r], n, (uint32_t)(100 + r));
    }
    for (int r = 0; r < rounds; r++) {
        CF_OK(MEM->copy_h2d_async(d, s, a, x[r], n), "copy_h2d_async");
        CF_OK(MEM->copy_d2d_async(d, s, b, a, n), "copy_d2d_async");
        CF_OK(MEM->memset_async(d, s, a, (uint8_t)(r + 1), n),
              "memset_async");
        CF_OK(MEM->copy_d2d_async(d, s, c, a, n), "copy_d2d_async");
        CF_OK(MEM->copy_d2h_async(d, s, ob[r], b, n), "copy_d2h_async");
        CF_OK(MEM->copy_d2h_async(d, s, oc[r], c, n), "copy_d2h_async");
    }
    if (!cf_sync(d, s))
        goto out;
    for (int r = 0; r < rounds; r++) {
        int64_t bad = cf_pattern_check(ob[r], n, (uint32_t)(100 + r));
        size_t k;

        if (!CF_CHECK(bad < 0,
                      "device %d, %s stream, round %d: h2d(A), d2d(B <- A), "
                      "d2h(B) on one stream read back wrong at byte %lld: "
                      "later work ran before earlier work",
                      (int)d, s ? "a created" : "the default", r,
                      (long long)bad))
            break;
        for (k = 0; k < n && oc[r][k] == (uint8_t)(r + 1); k++)
            ;
        if (!CF_CHECK(k == n,
                      "device %d, %s stream, round %d: memset(A), d2d(C <- "
                      "A), d2h(C) read byte %zu as %#x, expected %#x: the "
                      "stream does not keep its order",
                      (int)d, s ? "a created" : "the default", r, k,
                      oc[r][k], r + 1))
            break;
    }
out:
    for (int r = 0; r < rounds && x; r++) {
        free(x[r]);
        free(ob ? ob[r] : NULL);
        free(oc ? oc[r] : NULL);
    }
    free(x);
    free(ob);
    free(oc);
    cf_free(d, a);
    cf_free(d, b);
    cf_free(d, c);
}

static void t_in_stream_ordering(void)
{
    int rounds = cf_env.level >= CF_LEVEL_FULL ? 8 : 3;

    for (int i = 0; i < cf_env.ndev; i++) {
        keel_stream s;

        ordering_on(i, NULL, 1 << 20, rounds);
        if (cf_stream_new(cf_env.dev[i], &s)) {
            ordering_on(i, s, (1 << 20) + 3, rounds);
            ordering_on(i, s, 1, rounds);
            cf_stream_del(cf_env.dev[i], s);
        }
    }
}

/* How long a completed stream's event may take to read as complete. */
#define EVENT_GRACE_S 2.0

static bool event_completes(int32_t d, keel_event e, const char *where)
{
    keel_status st = cf_event_wait(d, e, EVENT_GRACE_S);

    return CF_CHECK(st == KEEL_STATUS_OK,
                    "device %d: an event recorded on %s, which has since "
                    "been synchronized, is still %s after %.0f s of "
                    "event_query: the event never completes",
                    (int)d, where, keel_status_name(st), EVENT_GRACE_S);
}

static bool event_basic_on(int i)
{
    int32_t d = cf_env.dev[i];
    keel_event e = NULL;
    keel_stream s = NULL;
    keel_dptr buf = 0;
    bool ok = false;

    if (!CF_OK(STR->event_create(d, &e), "stream.event_create(%d)", (int)d))
        return false;
    CF_OK(STR->event_query(d, e), "event_query of a never-recorded event");
    CF_OK(STR->event_synchronize(d, e),
          "event_synchronize of a never-recorded event");
    if (!cf_stream_new(d, &s) || !cf_alloc(d, 4 << 20, &buf))
        goto out;
    for (int round = 0; round < 2; round++) {
        CF_OK(MEM->memset_async(d, s, buf, (uint8_t)round, 4 << 20),
              "memset_async");
        CF_OK(STR->event_record(d, e, s), "stream.event_record");
        if (!cf_sync(d, s) || !event_completes(d, e, "a created stream"))
            goto out;
        CF_OK(STR->event_synchronize(d, e),
              "event_synchronize of a completed event");
    }
    CF_OK(STR->event_record(d, e, NULL), "event_record on the default stream");
    CF_OK(STR->stream_synchronize(d, NULL), "stream_synchronize(default)");
    ok = event_completes(d, e, "the default stream");
out:
    cf_free(d, buf);
    cf_stream_del(d, s);
    CF_OK(STR->event_destroy(d, e), "stream.event_destroy");
    return ok;
}

static void t_event_basic(void)
{
    for (int i = 0; i < cf_env.ndev; i++)
        if (!event_basic_on(i))
            break;
    CF_EXPECT(STR->event_create(cf_env.dev[0], NULL),
              KEEL_STATUS_INVALID_ARGUMENT, "stream.event_create(NULL)");
    CF_EXPECT(STR->event_create(cf_env.device_count, &(keel_event){NULL}),
              KEEL_STATUS_INVALID_DEVICE, "stream.event_create on device %d",
              (int)cf_env.device_count);
}

static void t_cross_stream_event(void)
{
    enum { N = (2 << 20) + 5 };
    unsigned char *x = malloc(N), *got = malloc(N);

    if (!CF_CHECK(x && got, "out of host memory"))
        goto out;
    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];
        keel_stream s1 = NULL, s2 = NULL;
        keel_event e = NULL, never = NULL;
        keel_dptr a = 0, b = 0;
        struct cf_gate g;
        bool held = false;

        if (!cf_stream_new(d, &s1) || !cf_stream_new(d, &s2) ||
            !CF_OK(STR->event_create(d, &e), "event_create") ||
            !CF_OK(STR->event_create(d, &never), "event_create") ||
            !cf_alloc(d, N, &a) || !cf_alloc(d, N, &b))
            goto next;
        cf_pattern(x, N, (uint32_t)i + 40);
        memset(got, 0, N);
        CF_OK(MEM->memset(d, a, 0, N), "memset");
        CF_OK(MEM->memset(d, b, 0, N), "memset");
        if (have_callbacks(i))
            held = gate_launch(i, s1, &g);
        CF_OK(MEM->copy_h2d_async(d, s1, a, x, N), "copy_h2d_async on s1");
        CF_OK(STR->event_record(d, e, s1), "event_record on s1");
        CF_OK(STR->stream_wait_event(d, s2, e), "stream_wait_event(s2, e)");
        CF_OK(STR->stream_wait_event(d, s2, never),
              "stream_wait_event on a never-recorded event");
        CF_OK(MEM->copy_d2d_async(d, s2, b, a, N), "copy_d2d_async on s2");
        CF_OK(MEM->copy_d2h_async(d, s2, got, b, N), "copy_d2h_async on s2");
        if (held) {
            keel_status q = STR->stream_query(d, s2);
            CF_CHECK(q == KEEL_STATUS_NOT_READY,
                     "device %d: s2 waits on an event of the held stream s1 "
                     "but stream_query(s2) is %s",
                     (int)d, keel_status_name(q));
            g.open = 1;
        }
        if (cf_sync(d, s2))
            CF_CHECK(cf_pattern_check(got, N, (uint32_t)i + 40) < 0,
                     "device %d: work on s2 after stream_wait_event(e) did "
                     "not see the copy recorded before e on s1",
                     (int)d);
        cf_sync(d, s1);
    next:
        if (held)
            g.open = 1;
        cf_free(d, a);
        cf_free(d, b);
        if (e)
            STR->event_destroy(d, e);
        if (never)
            STR->event_destroy(d, never);
        cf_stream_del(d, s1);
        cf_stream_del(d, s2);
    }
out:
    free(x);
    free(got);
}

static void t_query_nonblocking(void)
{
    bool tested = false;

    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];
        keel_event e0 = NULL, e1 = NULL;
        struct cf_gate g;
        keel_stream s;
        keel_status st;
        double t0, dt;
        float ms;

        if (!have_callbacks(i))
            continue;
        tested = true;
        if (!cf_stream_new(d, &s))
            continue;
        CF_OK(STR->event_create(d, &e0), "event_create");
        CF_OK(STR->event_create(d, &e1), "event_create");
        CF_OK(STR->event_record(d, e0, s), "event_record");
        if (!gate_launch(i, s, &g)) {
            cf_note("device %d runs host functions eagerly: NOT_READY is not "
                    "observable",
                    (int)d);
            CF_OK(STR->stream_query(d, s), "stream_query after eager work");
            goto done;
        }
        CF_OK(STR->event_record(d, e1, s), "event_record behind the gate");
        t0 = cf_now();
        st = STR->stream_query(d, s);
        dt = cf_now() - t0;
        CF_CHECK(st == KEEL_STATUS_NOT_READY,
                 "device %d: stream_query on a held stream returned %s, "
                 "expected NOT_READY",
                 (int)d, keel_status_name(st));
        CF_CHECK(dt < 1.0, "device %d: stream_query blocked for %.2f s",
                 (int)d, dt);
        t0 = cf_now();
        st = STR->event_query(d, e1);
        dt = cf_now() - t0;
        CF_CHECK(st == KEEL_STATUS_NOT_READY,
                 "device %d: event_query of a pending record returned %s",
                 (int)d, keel_status_name(st));
        CF_CHECK(dt < 1.0, "device %d: event_query blocked for %.2f s",
                 (int)d, dt);
        if (cf_has_feature(i, KEEL_FEATURE_EVENT_TIMING) &&
            STR->event_elapsed_ms)
            CF_EXPECT(STR->event_elapsed_ms(d, e0, e1, &ms),
                      KEEL_STATUS_NOT_READY,
                      "event_elapsed_ms with a pending end record");
        CF_CHECK(g.ran == 0, "the gate finished before it was opened");
        g.open = 1;
        cf_sync(d, s);
        CF_OK(STR->stream_query(d, s), "stream_query after synchronize");
        if (!CF_OK(cf_event_wait(d, e1, EVENT_GRACE_S),
                   "event_query after synchronize"))
            i = cf_env.ndev; /* one device says enough */
    done:
        g.open = 1;
        cf_sync(d, s);
        STR->event_destroy(d, e0);
        STR->event_destroy(d, e1);
        cf_stream_del(d, s);
    }
    if (!tested)
        cf_skip("host_callback is not claimed: no way to hold a stream");
}

struct order_log {
    atomic_int n;
    int seq[256];
    int runs[256];
};

struct order_arg {
    struct order_log *log;
    int id;
};

static void record_order(void *p)
{
    struct order_arg *a = p;
    int k = atomic_fetch_add(&a->log->n, 1);

    if (k < 256)
        a->log->seq[k] = a->id;
    if (a->id >= 0 && a->id < 256)
        a->log->runs[a->id]++;
}

struct seen_arg {
    const unsigned char *host;
    unsigned char value;
    volatile int *flag;
    int flag_seen;
};

static void read_host(void *p)
{
    struct seen_arg *a = p;

    a->value = a->host[0];
}

static void slow_set(void *p)
{
    cf_sleep_ms(20);
    *(volatile int *)p = 1;
}

static void read_flag(void *p)
{
    struct seen_arg *a = p;

    a->flag_seen = *a->flag;
}

static void t_host_callbacks(void)
{
    bool tested = false;

    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];
        static struct order_log log;
        struct order_arg args[100];
        struct seen_arg seen;
        unsigned char host[64];
        volatile int flag = 0;
        keel_stream s;
        keel_dptr buf;

        if (!have_callbacks(i))
            continue;
        tested = true;
        if (!cf_stream_new(d, &s))
            continue;
        memset(&log, 0, sizeof(log));
        for (int k = 0; k < 100; k++) {
            args[k].log = &log;
            args[k].id = k;
            CF_OK(STR->launch_host_func(d, s, record_order, &args[k]),
                  "launch_host_func #%d", k);
        }
        cf_sync(d, s);
        CF_CHECK(atomic_load(&log.n) == 100,
                 "device %d: 100 host functions launched, %d ran", (int)d,
                 atomic_load(&log.n));
        for (int k = 0; k < 100 && k < atomic_load(&log.n); k++) {
            if (!CF_CHECK(log.seq[k] == k,
                          "device %d: host function %d ran in position %d",
                          (int)d, log.seq[k], k))
                break;
        }
        for (int k = 0; k < 100; k++)
            if (!CF_CHECK(log.runs[k] == 1,
                          "device %d: host function %d ran %d times (exactly "
                          "once expected)",
                          (int)d, k, log.runs[k]))
                break;
        /* A host function sees earlier work, and later work waits for it. */
        memset(host, 0, sizeof(host));
        memset(&seen, 0, sizeof(seen));
        seen.host = host;
        seen.flag = &flag;
        if (cf_alloc(d, 64, &buf)) {
            CF_OK(MEM->memset_async(d, s, buf, 0x6b, 64), "memset_async");
            CF_OK(MEM->copy_d2h_async(d, s, host, buf, 64), "copy_d2h_async");
            CF_OK(STR->launch_host_func(d, s, read_host, &seen),
                  "launch_host_func");
            CF_OK(STR->launch_host_func(d, s, slow_set, (void *)&flag),
                  "launch_host_func");
            CF_OK(STR->launch_host_func(d, s, read_flag, &seen),
                  "launch_host_func");
            cf_sync(d, s);
            CF_CHECK(seen.value == 0x6b,
                     "device %d: a host function ran before the copy "
                     "enqueued ahead of it (saw %#x)",
                     (int)d, seen.value);
            CF_CHECK(seen.flag_seen == 1,
                     "device %d: a host function ran before the slow host "
                     "function enqueued ahead of it finished",
                     (int)d);
            cf_free(d, buf);
        }
        CF_EXPECT(STR->launch_host_func(d, s, NULL, NULL),
                  KEEL_STATUS_INVALID_ARGUMENT, "launch_host_func(fn NULL)");
        CF_EXPECT(STR->launch_host_func(-1, NULL, record_order, &args[0]),
                  KEEL_STATUS_INVALID_DEVICE, "launch_host_func on device -1");
        cf_stream_del(d, s);
    }
    if (!tested)
        cf_skip("host_callback is not claimed");
}

static void sleep_fn(void *p)
{
    cf_sleep_ms(*(const double *)p);
}

static void t_event_timing(void)
{
    bool tested = false;

    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];
        keel_event e[3] = {NULL, NULL, NULL}, never = NULL;
        static const double nap = 30;
        double wall0, wall;
        float t01 = -1, t02 = -1, t00 = -1, ms;
        keel_stream s;

        if (!cf_has_feature(i, KEEL_FEATURE_EVENT_TIMING) ||
            !STR->event_elapsed_ms)
            continue;
        tested = true;
        if (!cf_stream_new(d, &s))
            continue;
        for (int k = 0; k < 3; k++)
            CF_OK(STR->event_create(d, &e[k]), "event_create");
        CF_OK(STR->event_create(d, &never), "event_create");
        wall0 = cf_now();
        CF_OK(STR->event_record(d, e[0], s), "event_record");
        if (have_callbacks(i))
            CF_OK(STR->launch_host_func(d, s, sleep_fn, (void *)&nap),
                  "launch_host_func");
        CF_OK(STR->event_record(d, e[1], s), "event_record");
        CF_OK(STR->event_record(d, e[2], s), "event_record");
        cf_sync(d, s);
        wall = (cf_now() - wall0) * 1e3;
        if (CF_OK(STR->event_elapsed_ms(d, e[0], e[1], &t01),
                  "event_elapsed_ms(e0, e1)") &&
            CF_OK(STR->event_elapsed_ms(d, e[0], e[2], &t02),
                  "event_elapsed_ms(e0, e2)") &&
            CF_OK(STR->event_elapsed_ms(d, e[0], e[0], &t00),
                  "event_elapsed_ms(e0, e0)")) {
            CF_CHECK(t01 >= 0 && t02 >= t01,
                     "device %d: elapsed times are not monotonic: e0->e1 "
                     "%.3f ms, e0->e2 %.3f ms",
                     (int)d, t01, t02);
            CF_CHECK(t00 == 0, "device %d: elapsed(e0, e0) is %.3f ms",
                     (int)d, t00);
            CF_CHECK(t02 <= wall + 5,
                     "device %d: e0->e2 took %.3f ms by the events but only "
                     "%.3f ms of wall time passed",
                     (int)d, t02, wall);
            if (have_callbacks(i))
                CF_CHECK(t01 >= nap * 0.5,
                         "device %d: a %.0f ms host function between two "
                         "records measured %.3f ms",
                         (int)d, nap, t01);
        }
        CF_EXPECT(STR->event_elapsed_ms(d, e[0], never, &ms),
                  KEEL_STATUS_INVALID_STATE,
                  "event_elapsed_ms with a never-recorded event");
        CF_EXPECT(STR->event_elapsed_ms(d, e[0], e[1], NULL),
                  KEEL_STATUS_INVALID_ARGUMENT, "event_elapsed_ms(ms NULL)");
        for (int k = 0; k < 3; k++)
            STR->event_destroy(d, e[k]);
        STR->event_destroy(d, never);
        cf_stream_del(d, s);
    }
    if (!tested)
        cf_skip("event_timing is not claimed");
}

struct fake_handle {
    uint64_t junk[8];
};

static void t_foreign_handles(void)
{
    static struct fake_handle fake = {{0x5eed, 1, 2, 3, 4, 5, 6, 7}};
    keel_stream fs = (keel_stream)(void *)&fake;
    keel_event fe = (keel_event)(void *)&fake;
    int32_t d = cf_env.dev[0];

    CF_EXPECT(STR->stream_synchronize(d, fs), KEEL_STATUS_INVALID_HANDLE,
              "stream_synchronize with a handle the plugin never made");
    CF_EXPECT(STR->stream_query(d, fs), KEEL_STATUS_INVALID_HANDLE,
              "stream_query with a foreign handle");
    CF_EXPECT(STR->event_query(d, fe), KEEL_STATUS_INVALID_HANDLE,
              "event_query with a foreign handle");
    CF_EXPECT(STR->event_record(d, fe, NULL), KEEL_STATUS_INVALID_HANDLE,
              "event_record with a foreign handle");
    CF_EXPECT(STR->event_synchronize(d, fe), KEEL_STATUS_INVALID_HANDLE,
              "event_synchronize with a foreign handle");
    CF_EXPECT(STR->stream_wait_event(d, NULL, fe), KEEL_STATUS_INVALID_HANDLE,
              "stream_wait_event with a foreign event");
    CF_EXPECT(STR->stream_wait_event(d, fs, NULL), KEEL_STATUS_INVALID_HANDLE,
              "stream_wait_event on a foreign stream");
    CF_EXPECT(STR->stream_destroy(d, fs), KEEL_STATUS_INVALID_HANDLE,
              "stream_destroy with a foreign handle");
    CF_EXPECT(STR->event_destroy(d, fe), KEEL_STATUS_INVALID_HANDLE,
              "event_destroy with a foreign handle");
    if (STR->launch_host_func)
        CF_EXPECT(STR->launch_host_func(d, fs, cf_gate_fn, NULL),
                  KEEL_STATUS_INVALID_HANDLE,
                  "launch_host_func on a foreign stream");
    if (STR->event_elapsed_ms) {
        float ms;
        CF_EXPECT(STR->event_elapsed_ms(d, fe, fe, &ms),
                  KEEL_STATUS_INVALID_HANDLE,
                  "event_elapsed_ms with foreign events");
    }
    if (cf_env.ndev >= 2) {
        int32_t o = cf_env.dev[1];
        keel_stream s;
        keel_event e;

        if (cf_stream_new(o, &s)) {
            CF_EXPECT(STR->stream_synchronize(d, s),
                      KEEL_STATUS_INVALID_HANDLE,
                      "stream_synchronize(%d) with a stream of device %d",
                      (int)d, (int)o);
            CF_EXPECT(STR->stream_destroy(d, s), KEEL_STATUS_INVALID_HANDLE,
                      "stream_destroy(%d) with a stream of device %d", (int)d,
                      (int)o);
            cf_stream_del(o, s);
        }
        if (CF_OK(STR->event_create(o, &e), "event_create")) {
            CF_EXPECT(STR->event_query(d, e), KEEL_STATUS_INVALID_HANDLE,
                      "event_query(%d) with an event of device %d", (int)d,
                      (int)o);
            STR->event_destroy(o, e);
        }
    }
}

/* Every stream and event call names its device: an index out of range is
 * INVALID_DEVICE. */
static void t_bad_devices(void)
{
    int32_t d = cf_env.dev[0], bad[2] = {-1, cf_env.device_count};
    keel_stream s = NULL;
    keel_event e = NULL;
    float ms;

    if (!cf_stream_new(d, &s) ||
        !CF_OK(STR->event_create(d, &e), "event_create"))
        goto out;
    for (int k = 0; k < 2; k++) {
        int32_t b = bad[k];
        CF_EXPECT(STR->stream_destroy(b, s), KEEL_STATUS_INVALID_DEVICE,
                  "stream_destroy on device %d", (int)b);
        CF_EXPECT(STR->stream_wait_event(b, s, e), KEEL_STATUS_INVALID_DEVICE,
                  "stream_wait_event on device %d", (int)b);
        CF_EXPECT(STR->event_record(b, e, s), KEEL_STATUS_INVALID_DEVICE,
                  "event_record on device %d", (int)b);
        CF_EXPECT(STR->event_query(b, e), KEEL_STATUS_INVALID_DEVICE,
                  "event_query on device %d", (int)b);
        CF_EXPECT(STR->event_synchronize(b, e), KEEL_STATUS_INVALID_DEVICE,
                  "event_synchronize on device %d", (int)b);
        CF_EXPECT(STR->event_destroy(b, e), KEEL_STATUS_INVALID_DEVICE,
                  "event_destroy on device %d", (int)b);
        if (STR->event_elapsed_ms)
            CF_EXPECT(STR->event_elapsed_ms(b, e, e, &ms),
                      KEEL_STATUS_INVALID_DEVICE,
                      "event_elapsed_ms on device %d", (int)b);
    }
out:
    if (e)
        CF_OK(STR->event_destroy(d, e), "event_destroy after the rejected "
                                        "calls");
    cf_stream_del(d, s);
}

static void t_destroy_waits(void)
{
    bool tested = false;

    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];
        volatile int flag = 0;
        keel_stream s;

        if (!have_callbacks(i))
            continue;
        tested = true;
        if (!cf_stream_new(d, &s))
            continue;
        CF_OK(STR->launch_host_func(d, s, slow_set, (void *)&flag),
              "launch_host_func");
        if (CF_OK(STR->stream_destroy(d, s), "stream_destroy with pending "
                                             "work"))
            CF_CHECK(flag == 1,
                     "device %d: stream_destroy returned before the stream's "
                     "pending host function ran",
                     (int)d);
    }
    if (!tested)
        cf_skip("host_callback is not claimed");
}

static void t_cross_device_event(void)
{
    static struct order_log log;
    struct order_arg a0 = {&log, 0}, a1 = {&log, 1};
    int32_t d0, d1;
    keel_stream s0 = NULL, s1 = NULL;
    keel_event e = NULL;
    struct cf_gate g;
    bool held;

    if (cf_env.ndev < 2 || !have_callbacks(0) || !have_callbacks(1)) {
        cf_skip("needs two devices with host callbacks");
        return;
    }
    d0 = cf_env.dev[0];
    d1 = cf_env.dev[1];
    memset(&log, 0, sizeof(log));
    if (!cf_stream_new(d0, &s0) || !cf_stream_new(d1, &s1) ||
        !CF_OK(STR->event_create(d0, &e), "event_create"))
        goto out;
    held = gate_launch(0, s0, &g);
    CF_OK(STR->launch_host_func(d0, s0, record_order, &a0),
          "launch_host_func");
    CF_OK(STR->event_record(d0, e, s0), "event_record on device %d", (int)d0);
    CF_OK(STR->stream_wait_event(d1, s1, e),
          "stream_wait_event(device %d) on an event of device %d", (int)d1,
          (int)d0);
    CF_OK(STR->launch_host_func(d1, s1, record_order, &a1),
          "launch_host_func");
    if (held)
        cf_sleep_ms(20);
    g.open = 1;
    cf_sync(d1, s1);
    cf_sync(d0, s0);
    CF_CHECK(atomic_load(&log.n) == 2 && log.seq[0] == 0 && log.seq[1] == 1,
             "device %d's work ran before the event of device %d it waits "
             "on completed",
             (int)d1, (int)d0);
out:
    if (e)
        STR->event_destroy(d0, e);
    cf_stream_del(d0, s0);
    cf_stream_del(d1, s1);
}

/* KEEL_FEATURE_ASYNC_COPY exactly as device_api.h defines it: with a host
 * function holding a stream, the enqueuing calls return at once, queries
 * answer NOT_READY, and the held function runs without help from the
 * caller (on a plugin thread). */
static void t_async_promise(void)
{
    enum { N = 1 << 20 };
    unsigned char *x = malloc(N);
    int claimed = 0;

    if (!CF_CHECK(x, "out of host memory"))
        return;
    memset(x, 0x5a, N);
    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];
        struct cf_gate g;
        keel_stream s = NULL;
        keel_event e = NULL;
        keel_dptr a = 0;
        double t0, t_launch, t_enq, t_enter;
        keel_status q, eq;

        if (!cf_has_feature(i, KEEL_FEATURE_ASYNC_COPY))
            continue;
        claimed++;
        if (!have_callbacks(i)) {
            cf_note("device %d: without host callbacks the promise of "
                    "KEEL_FEATURE_ASYNC_COPY cannot be observed",
                    (int)d);
            continue;
        }
        cf_gate_init(&g, 10.0);
        if (!cf_stream_new(d, &s) || !cf_alloc(d, N, &a) ||
            !CF_OK(STR->event_create(d, &e), "event_create"))
            goto next;
        t0 = cf_now();
        if (!CF_OK(STR->launch_host_func(d, s, cf_gate_fn, &g),
                   "launch_host_func"))
            goto next;
        t_launch = cf_now() - t0;
        CF_CHECK(atomic_load(&g.ran) == 0 && t_launch < 5.0,
                 "device %d claims KEEL_FEATURE_ASYNC_COPY but "
                 "launch_host_func waited %.2f s for its host function",
                 (int)d, t_launch);
        t0 = cf_now();
        CF_OK(MEM->copy_h2d_async(d, s, a, x, N), "copy_h2d_async");
        CF_OK(MEM->memset_async(d, s, a, 0, 16), "memset_async");
        CF_OK(STR->event_record(d, e, s), "event_record");
        t_enq = cf_now() - t0;
        q = STR->stream_query(d, s);
        eq = STR->event_query(d, e);
        CF_CHECK(atomic_load(&g.ran) == 0 && t_enq < 5.0,
                 "device %d claims KEEL_FEATURE_ASYNC_COPY but enqueuing "
                 "behind a running host function took %.2f s",
                 (int)d, t_enq);
        CF_CHECK(q == KEEL_STATUS_NOT_READY && eq == KEEL_STATUS_NOT_READY,
                 "device %d: with its stream held by a host function, "
                 "stream_query is %s and event_query %s (expected "
                 "NOT_READY for both)",
                 (int)d, keel_status_name(q), keel_status_name(eq));
        t0 = cf_now();
        while (!atomic_load(&g.entered) && cf_now() - t0 < 5.0)
            cf_sleep_ms(1);
        t_enter = cf_now() - t0;
        CF_CHECK(atomic_load(&g.entered),
                 "device %d claims KEEL_FEATURE_ASYNC_COPY but its host "
                 "function had not started %.1f s after launch_host_func "
                 "returned: asynchronous work must progress without the "
                 "caller",
                 (int)d, t_enter);
    next:
        atomic_store(&g.open, 1);
        if (s)
            cf_sync(d, s);
        if (e)
            STR->event_destroy(d, e);
        cf_free(d, a);
        cf_stream_del(d, s);
    }
    free(x);
    if (claimed == 0)
        cf_skip("no tested device sets KEEL_FEATURE_ASYNC_COPY");
}

const struct cf_test_spec cf_stream_tests[] = {
    {"streams", "async_promise", CF_LEVEL_SMOKE, t_async_promise,
     "KEEL_FEATURE_ASYNC_COPY as defined: enqueuing behind a running host "
     "function returns at once, queries say NOT_READY, the work progresses "
     "on its own"},
    {"streams", "create_destroy", CF_LEVEL_SMOKE, t_create_destroy,
     "streams of every priority; default stream; bad arguments"},
    {"streams", "many_streams", CF_LEVEL_SMOKE, t_many_streams,
     "16 (full: 128) streams per device working at once"},
    {"streams", "in_stream_ordering", CF_LEVEL_SMOKE, t_in_stream_ordering,
     "dependent async copies and memsets on one stream keep their order"},
    {"streams", "event_basic", CF_LEVEL_SMOKE, t_event_basic,
     "events complete after the work before them; re-recording"},
    {"streams", "cross_stream_event", CF_LEVEL_SMOKE, t_cross_stream_event,
     "stream_wait_event orders work across streams"},
    {"streams", "query_nonblocking", CF_LEVEL_SMOKE, t_query_nonblocking,
     "queries return NOT_READY at once for held work, OK afterwards"},
    {"streams", "host_callbacks", CF_LEVEL_SMOKE, t_host_callbacks,
     "host functions run once each, in order, between stream work"},
    {"streams", "event_timing", CF_LEVEL_SMOKE, t_event_timing,
     "elapsed times monotonic and plausible; INVALID_STATE, NULL"},
    {"streams", "foreign_handles", CF_LEVEL_SMOKE, t_foreign_handles,
     "handles the plugin never made, or of another device: INVALID_HANDLE"},
    {"streams", "bad_devices", CF_LEVEL_SMOKE, t_bad_devices,
     "every stream and event call rejects an out-of-range device"},
    {"streams", "destroy_waits", CF_LEVEL_SMOKE, t_destroy_waits,
     "stream_destroy waits for pending work"},
    {"streams", "cross_device_event", CF_LEVEL_FULL, t_cross_device_event,
     "a stream waits on an event of another device"},
    {NULL, NULL, 0, NULL, NULL},
};
