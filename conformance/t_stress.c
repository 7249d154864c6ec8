/*
 * keel conform — stress level: long streams, allocation churn, large
 * buffers, many events. Only `--level stress` runs these.
 */
#include <stdlib.h>
#include <string.h>

#include "conform.h"

#define MEM (cf_env.api->memory)
#define STR (cf_env.api->stream)

static void t_long_stream(void)
{
    enum { OPS = 20000, N = 4096 };
    int32_t d = cf_env.dev[0];
    unsigned char got[N];
    keel_dptr a = 0, b = 0;
    keel_stream s = NULL;
    keel_event e = NULL;

    if (!cf_stream_new(d, &s) || !cf_alloc(d, N, &a) || !cf_alloc(d, N, &b) ||
        !CF_OK(STR->event_create(d, &e), "event_create"))
        goto out;
    for (int i = 0; i < OPS; i++) {
        keel_status st = (i & 1)
                             ? MEM->copy_d2d_async(d, s, b, a, N)
                             : MEM->memset_async(d, s, a, (uint8_t)i, N);
        if (!CF_OK(st, "operation %d of a long stream", i))
            goto out;
        if (i % 100 == 99 &&
            !CF_OK(STR->event_record(d, e, s), "event_record #%d", i / 100))
            goto out;
        if (i % 2000 == 1999 && !cf_sync(d, s))
            goto out;
    }
    if (!cf_sync(d, s) || !cf_download(d, got, b, N))
        goto out;
    for (int k = 0; k < N; k++)
        if (!CF_CHECK(got[k] == (uint8_t)(OPS - 2),
                      "after %d operations on one stream byte %d is %#x, "
                      "expected %#x",
                      OPS, k, got[k], (uint8_t)(OPS - 2)))
            break;
    CF_OK(cf_event_wait(d, e, 10), "the last event of a long stream");
out:
    if (e)
        STR->event_destroy(d, e);
    cf_free(d, a);
    cf_free(d, b);
    cf_stream_del(d, s);
}

static void t_alloc_churn(void)
{
    enum { LIVE = 256, ITERS = 50000 };
    keel_dptr *live = calloc(LIVE, sizeof(*live));
    int32_t d = cf_env.dev[0];
    keel_memory_info before, after;
    struct cf_rng r;

    if (!CF_CHECK(live, "out of host memory") ||
        !CF_OK(MEM->get_memory_info(d, &before), "get_memory_info"))
        goto out;
    cf_rng_seed(&r, 4242);
    for (int it = 0; it < ITERS; it++) {
        int k = (int)cf_rng_int(&r, 0, LIVE - 1);
        if (live[k]) {
            if (!CF_OK(MEM->free(d, live[k]), "free #%d", it))
                goto out;
            live[k] = 0;
        } else {
            uint64_t n = (uint64_t)cf_rng_int(&r, 1, 4 << 20);
            if (!CF_OK(MEM->alloc(d, n, &live[k]),
                       "alloc #%d of %llu bytes", it, (unsigned long long)n))
                goto out;
        }
    }
    for (int k = 0; k < LIVE; k++)
        if (live[k]) {
            MEM->free(d, live[k]);
            live[k] = 0;
        }
    if (CF_OK(MEM->get_memory_info(d, &after), "get_memory_info"))
        CF_CHECK(after.used == before.used,
                 "after %d allocations and frees, %llu bytes are used (%llu "
                 "before)",
                 ITERS, (unsigned long long)after.used,
                 (unsigned long long)before.used);
out:
    for (int k = 0; live && k < LIVE; k++)
        if (live[k])
            MEM->free(d, live[k]);
    free(live);
}

static void t_large_buffers(void)
{
    int32_t d = cf_env.dev[0];
    uint64_t size = cf_env.props[0].total_memory / 4, chunk = 4 << 20;
    unsigned char *h = malloc(chunk), *g = malloc(chunk);
    keel_dptr a = 0, b = 0;

    if (size > (UINT64_C(2) << 30))
        size = UINT64_C(2) << 30;
    size &= ~(chunk - 1);
    if (!CF_CHECK(h && g, "out of host memory") || size < 2 * chunk)
        goto out;
    if (!cf_alloc(d, size, &a) || !cf_alloc(d, size, &b))
        goto out;
    for (uint64_t off = 0; off < size; off += chunk) {
        cf_pattern(h, chunk, (uint32_t)(off / chunk));
        if (!cf_upload(d, a + off, h, chunk))
            goto out;
    }
    if (!CF_OK(MEM->copy_d2d(d, b, a, size), "copy_d2d of %llu bytes",
               (unsigned long long)size))
        goto out;
    for (uint64_t off = 0; off < size; off += chunk) {
        if (!cf_download(d, g, b + off, chunk))
            goto out;
        if (!CF_CHECK(cf_pattern_check(g, chunk, (uint32_t)(off / chunk)) < 0,
                      "a %llu-byte copy is wrong in the chunk at %llu",
                      (unsigned long long)size, (unsigned long long)off))
            goto out;
    }
out:
    cf_free(d, a);
    cf_free(d, b);
    free(h);
    free(g);
}

static void t_many_events(void)
{
    enum { N = 2000 };
    keel_event *e = calloc(N, sizeof(*e));
    int32_t d = cf_env.dev[0];
    keel_stream s = NULL;
    int made = 0;

    if (!CF_CHECK(e, "out of host memory") || !cf_stream_new(d, &s))
        goto out;
    for (; made < N; made++)
        if (!CF_OK(STR->event_create(d, &e[made]), "event_create #%d", made) ||
            !CF_OK(STR->event_record(d, e[made], s), "event_record #%d", made))
            break;
    cf_sync(d, s);
    for (int k = 0; k < made; k++)
        if (!CF_OK(cf_event_wait(d, e[k], 5), "event %d of %d", k, made))
            break;
out:
    for (int k = 0; k < made && e; k++)
        STR->event_destroy(d, e[k]);
    if (e && made < N && e[made])
        STR->event_destroy(d, e[made]);
    cf_stream_del(d, s);
    free(e);
}

const struct cf_test_spec cf_stress_tests[] = {
    {"stress", "long_stream", CF_LEVEL_STRESS, t_long_stream,
     "20000 dependent operations on one stream, events along the way"},
    {"stress", "alloc_churn", CF_LEVEL_STRESS, t_alloc_churn,
     "50000 random allocations and frees; usage returns to its start"},
    {"stress", "large_buffers", CF_LEVEL_STRESS, t_large_buffers,
     "a quarter of device memory (at most 2 GiB) copied and checked"},
    {"stress", "many_events", CF_LEVEL_STRESS, t_many_events,
     "2000 live events recorded on one stream"},
    {NULL, NULL, 0, NULL, NULL},
};
