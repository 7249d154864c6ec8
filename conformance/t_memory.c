/*
 * keel conform — the memory group.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "conform.h"

#define MEM (cf_env.api->memory)

/* Write a pattern of `size` bytes, read it back, compare. */
static bool roundtrip(int32_t d, keel_dptr ptr, size_t size, uint32_t seed)
{
    unsigned char *in = malloc(size ? size : 1), *out = malloc(size ? size : 1);
    int64_t bad;
    bool ok = false;

    if (!CF_CHECK(in && out, "out of host memory"))
        goto out;
    cf_pattern(in, size, seed);
    memset(out, 0, size);
    if (!cf_upload(d, ptr, in, size) || !cf_download(d, out, ptr, size))
        goto out;
    bad = cf_pattern_check(out, size, seed);
    ok = CF_CHECK(bad < 0,
                  "device %d: %zu bytes written then read back differ at "
                  "byte %lld",
                  (int)d, size, (long long)bad);
out:
    free(in);
    free(out);
    return ok;
}

static void t_alloc_sizes(void)
{
    static const uint64_t sizes[] = {1,    2,    3,     7,     64,
                                     4095, 4097, 65537, (1u << 20) + 13};

    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];
        uint32_t align = cf_env.props[i].alloc_alignment;
        keel_dptr p = 1;

        if (CF_OK(MEM->alloc(d, 0, &p), "memory.alloc(%d, 0 bytes)", (int)d))
            CF_CHECK(p == 0, "device %d: alloc of 0 bytes gave %#llx, not 0",
                     (int)d, (unsigned long long)p);
        CF_OK(MEM->free(d, 0), "memory.free(%d, 0)", (int)d);
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            if (!cf_alloc(d, sizes[k], &p))
                continue;
            CF_CHECK(p != 0, "device %d: alloc(%llu) gave the null address",
                     (int)d, (unsigned long long)sizes[k]);
            CF_CHECK(align == 0 || p % align == 0,
                     "device %d: alloc(%llu) gave %#llx, not aligned to %u",
                     (int)d, (unsigned long long)sizes[k],
                     (unsigned long long)p, align);
            roundtrip(d, p, (size_t)sizes[k], (uint32_t)k);
            cf_free(d, p);
        }
    }
}

static void t_alloc_large(void)
{
    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];
        uint64_t size = cf_env.props[i].total_memory / 8;
        size_t chunk = 1 << 20;
        keel_dptr p;

        if (size > (UINT64_C(512) << 20))
            size = UINT64_C(512) << 20;
        size &= ~(uint64_t)(chunk - 1);
        if (size < 2 * chunk) {
            cf_skip("device %d has too little memory for a large block",
                    (int)d);
            continue;
        }
        if (!cf_alloc(d, size, &p))
            continue;
        roundtrip(d, p, chunk, 1);
        roundtrip(d, p + size / 2 + 3, chunk, 2);
        roundtrip(d, p + size - chunk, chunk, 3);
        cf_free(d, p);
    }
}

static void t_alloc_errors(void)
{
    int32_t d = cf_env.dev[0], n = cf_env.device_count;
    keel_dptr p = 0;

    CF_EXPECT(MEM->alloc(d, 64, NULL), KEEL_STATUS_INVALID_ARGUMENT,
              "memory.alloc(%d, 64, NULL)", (int)d);
    CF_EXPECT(MEM->alloc(n, 64, &p), KEEL_STATUS_INVALID_DEVICE,
              "memory.alloc(%d = device count)", (int)n);
    CF_EXPECT(MEM->alloc(-1, 64, &p), KEEL_STATUS_INVALID_DEVICE,
              "memory.alloc(-1)");
    if (cf_alloc(d, 256, &p)) {
        keel_status st;

        CF_EXPECT(MEM->free(n, p), KEEL_STATUS_INVALID_DEVICE,
                  "memory.free(%d = device count)", (int)n);
        /* "a pointer this device did not allocate, when detectable" */
        st = MEM->free(d, p + 64);
        if (st == KEEL_STATUS_OK)
            cf_note("memory.free of an interior pointer returned OK (not "
                    "detected)");
        else
            CF_EXPECT(st, KEEL_STATUS_INVALID_ARGUMENT,
                      "memory.free of a pointer inside an allocation");
        if (st != KEEL_STATUS_OK)
            cf_free(d, p);
    }
}

static bool device_usable(int32_t d)
{
    keel_dptr p;
    bool ok;

    if (!cf_alloc(d, 4096, &p))
        return false;
    ok = roundtrip(d, p, 4096, 77);
    cf_free(d, p);
    return ok;
}

static void t_oom_huge(void)
{
    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];
        keel_dptr p = 0;
        keel_status st = MEM->alloc(d, UINT64_C(1) << 62, &p);

        if (st == KEEL_STATUS_OK)
            MEM->free(d, p);
        CF_EXPECT(st, KEEL_STATUS_OUT_OF_MEMORY,
                  "memory.alloc(%d, 2^62 bytes)", (int)d);
        CF_CHECK(device_usable(d),
                 "device %d is not usable after OUT_OF_MEMORY", (int)d);
    }
}

/* Fill the device until it refuses, then prove it still works. */
static void exhaust(int i)
{
    int32_t d = cf_env.dev[i];
    uint64_t total = cf_env.props[i].total_memory;
    uint64_t chunk = total / 8, sum = 0;
    keel_dptr blocks[64];
    keel_memory_info info;
    keel_status st = KEEL_STATUS_OK;
    int n = 0;

    if (chunk < (1u << 20))
        chunk = 1u << 20;
    while (n < 64 && sum <= 2 * total) {
        st = MEM->alloc(d, chunk, &blocks[n]);
        if (st != KEEL_STATUS_OK)
            break;
        sum += chunk;
        n++;
    }
    if (st == KEEL_STATUS_OK) {
        cf_skip("device %d allocated %llu bytes, more than its total_memory "
                "%llu, without OUT_OF_MEMORY (the host overcommits: set a "
                "memory limit to test exhaustion)",
                (int)d, (unsigned long long)sum, (unsigned long long)total);
    } else if (CF_EXPECT(st, KEEL_STATUS_OUT_OF_MEMORY,
                         "memory.alloc(%d) after %llu bytes", (int)d,
                         (unsigned long long)sum)) {
        CF_CHECK(sum <= total, "device %d allocated %llu bytes, more than "
                               "its total_memory %llu",
                 (int)d, (unsigned long long)sum, (unsigned long long)total);
        if (CF_OK(MEM->get_memory_info(d, &info), "memory.get_memory_info"))
            CF_CHECK(info.used >= sum,
                     "device %d: memory info says %llu bytes used while %llu "
                     "are allocated",
                     (int)d, (unsigned long long)info.used,
                     (unsigned long long)sum);
        if (n > 0) {
            cf_free(d, blocks[--n]);
            CF_CHECK(device_usable(d),
                     "device %d is not usable after running out of memory "
                     "and freeing a block",
                     (int)d);
        }
    }
    while (n > 0)
        cf_free(d, blocks[--n]);
}

static void t_oom_exhaustion(void)
{
    for (int i = 0; i < cf_env.ndev; i++)
        exhaust(i);
}

static void t_copy_sync(void)
{
    enum { N = 65537 };
    unsigned char *x = malloc(N), *y = malloc(N), *got = malloc(N);

    if (!CF_CHECK(x && y && got, "out of host memory"))
        goto out;
    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];
        keel_dptr a, b;

        cf_pattern(x, N, 5);
        cf_pattern(y, N, 6);
        if (!cf_alloc(d, N, &a))
            continue;
        if (!cf_alloc(d, N, &b)) {
            cf_free(d, a);
            continue;
        }
        cf_upload(d, a, x, N);
        cf_upload(d, b, y, N);
        /* partial writes at odd offsets, a d2d copy, size-0 no-ops */
        cf_upload(d, a + 3, y + 3, 1000);
        memcpy(x + 3, y + 3, 1000);
        CF_OK(MEM->copy_d2d(d, b + 5, a + 17, 333), "memory.copy_d2d(%d)",
              (int)d);
        memcpy(y + 5, x + 17, 333);
        CF_OK(MEM->copy_h2d(d, a, y, 0), "memory.copy_h2d of 0 bytes");
        CF_OK(MEM->copy_d2h(d, got, a, 0), "memory.copy_d2h of 0 bytes");
        CF_OK(MEM->copy_d2d(d, b, a, 0), "memory.copy_d2d of 0 bytes");
        if (cf_download(d, got, a, N))
            CF_CHECK(!memcmp(got, x, N),
                     "device %d: h2d + partial h2d read back wrong", (int)d);
        if (cf_download(d, got, b, N))
            CF_CHECK(!memcmp(got, y, N),
                     "device %d: d2d between offsets read back wrong",
                     (int)d);
        CF_OK(MEM->copy_d2d(d, b, a, N), "memory.copy_d2d(%d, %d bytes)",
              (int)d, N);
        if (cf_download(d, got, b, N))
            CF_CHECK(!memcmp(got, x, N), "device %d: full d2d copy wrong",
                     (int)d);
        cf_free(d, a);
        cf_free(d, b);
    }
out:
    free(x);
    free(y);
    free(got);
}

/* Host buffer for async copies: pinned when the plugin offers it. */
static void *host_buf(int i, size_t n, bool *pinned)
{
    void *p = NULL;

    *pinned = false;
    if (cf_has_feature(i, KEEL_FEATURE_PINNED_HOST) &&
        MEM->host_alloc(cf_env.dev[i], n, &p) == KEEL_STATUS_OK && p) {
        *pinned = true;
        return p;
    }
    return malloc(n);
}

static void host_buf_free(int i, void *p, bool pinned)
{
    if (pinned)
        MEM->host_free(cf_env.dev[i], p);
    else
        free(p);
}

static void async_chain(int i, keel_stream s, size_t n)
{
    int32_t d = cf_env.dev[i];
    bool p1, p2;
    unsigned char *src = host_buf(i, n, &p1), *dst = host_buf(i, n, &p2);
    keel_dptr a = 0, b = 0;
    int64_t bad;

    if (!CF_CHECK(src && dst, "out of host memory"))
        goto out;
    if (!cf_alloc(d, n, &a) || !cf_alloc(d, n, &b))
        goto out;
    cf_pattern(src, n, (uint32_t)n);
    memset(dst, 0, n);
    CF_OK(MEM->copy_h2d_async(d, s, a, src, n), "memory.copy_h2d_async");
    CF_OK(MEM->copy_d2d_async(d, s, b, a, n), "memory.copy_d2d_async");
    CF_OK(MEM->copy_d2h_async(d, s, dst, b, n), "memory.copy_d2h_async");
    CF_OK(MEM->copy_h2d_async(d, s, a, src, 0), "copy_h2d_async of 0 bytes");
    CF_OK(MEM->copy_d2h_async(d, s, dst, a, 0), "copy_d2h_async of 0 bytes");
    CF_OK(MEM->copy_d2d_async(d, s, b, a, 0), "copy_d2d_async of 0 bytes");
    if (!cf_sync(d, s))
        goto out;
    bad = cf_pattern_check(dst, n, (uint32_t)n);
    CF_CHECK(bad < 0,
             "device %d, %s stream: h2d -> d2d -> d2h (async, %zu bytes, %s "
             "host memory) read back wrong at byte %lld",
             (int)d, s ? "a created" : "the default", n,
             p1 ? "pinned" : "pageable", (long long)bad);
out:
    cf_free(d, a);
    cf_free(d, b);
    host_buf_free(i, src, p1);
    host_buf_free(i, dst, p2);
}

static void t_copy_async(void)
{
    for (int i = 0; i < cf_env.ndev; i++) {
        keel_stream s;

        async_chain(i, NULL, 4099);
        async_chain(i, NULL, 1 << 20);
        if (!cf_stream_new(cf_env.dev[i], &s))
            continue;
        async_chain(i, s, 1);
        async_chain(i, s, (1 << 20) + 7);
        cf_stream_del(cf_env.dev[i], s);
    }
}

static void t_copy_errors(void)
{
    int32_t d = cf_env.dev[0], n = cf_env.device_count;
    unsigned char host[64];
    keel_dptr a;

    if (!cf_alloc(d, 64, &a))
        return;
    CF_EXPECT(MEM->copy_h2d(d, a, NULL, 8), KEEL_STATUS_INVALID_ARGUMENT,
              "memory.copy_h2d from NULL");
    CF_EXPECT(MEM->copy_d2h(d, NULL, a, 8), KEEL_STATUS_INVALID_ARGUMENT,
              "memory.copy_d2h to NULL");
    CF_EXPECT(MEM->copy_h2d(n, a, host, 8), KEEL_STATUS_INVALID_DEVICE,
              "memory.copy_h2d on device %d (= count)", (int)n);
    CF_EXPECT(MEM->copy_d2h(n, host, a, 8), KEEL_STATUS_INVALID_DEVICE,
              "memory.copy_d2h on device %d", (int)n);
    CF_EXPECT(MEM->copy_d2d(n, a, a + 32, 8), KEEL_STATUS_INVALID_DEVICE,
              "memory.copy_d2d on device %d", (int)n);
    CF_EXPECT(MEM->memset(n, a, 0, 8), KEEL_STATUS_INVALID_DEVICE,
              "memory.memset on device %d", (int)n);
    CF_EXPECT(MEM->copy_h2d_async(-1, NULL, a, host, 8),
              KEEL_STATUS_INVALID_DEVICE, "memory.copy_h2d_async on device -1");
    CF_EXPECT(MEM->copy_d2h_async(-1, NULL, host, a, 8),
              KEEL_STATUS_INVALID_DEVICE, "memory.copy_d2h_async on device -1");
    CF_EXPECT(MEM->copy_d2d_async(-1, NULL, a, a + 32, 8),
              KEEL_STATUS_INVALID_DEVICE, "memory.copy_d2d_async on device -1");
    CF_EXPECT(MEM->memset_async(-1, NULL, a, 0, 8), KEEL_STATUS_INVALID_DEVICE,
              "memory.memset_async on device -1");
    CF_EXPECT(MEM->memset(d, 0, 1, 8), KEEL_STATUS_INVALID_ARGUMENT,
              "memory.memset of the null address");
    CF_EXPECT(MEM->copy_d2d(d, a + 8, a, 32), KEEL_STATUS_INVALID_ARGUMENT,
              "memory.copy_d2d between overlapping ranges");
    if (MEM->copy_peer)
        CF_EXPECT(MEM->copy_peer(d, 0, d, a, 8), KEEL_STATUS_INVALID_ARGUMENT,
                  "memory.copy_peer to the null address");
    if (cf_env.ndev >= 2) {
        int32_t e = cf_env.dev[1];
        keel_stream other;

        if (cf_stream_new(e, &other)) {
            CF_EXPECT(MEM->copy_h2d_async(d, other, a, host, 8),
                      KEEL_STATUS_INVALID_HANDLE,
                      "memory.copy_h2d_async on device %d with a stream of "
                      "device %d",
                      (int)d, (int)e);
            CF_EXPECT(MEM->copy_d2h_async(d, other, host, a, 8),
                      KEEL_STATUS_INVALID_HANDLE,
                      "memory.copy_d2h_async with another device's stream");
            CF_EXPECT(MEM->copy_d2d_async(d, other, a, a + 32, 8),
                      KEEL_STATUS_INVALID_HANDLE,
                      "memory.copy_d2d_async with another device's stream");
            CF_EXPECT(MEM->memset_async(d, other, a, 1, 8),
                      KEEL_STATUS_INVALID_HANDLE,
                      "memory.memset_async with another device's stream");
            cf_stream_del(e, other);
        }
    } else {
        cf_note("one device: INVALID_HANDLE for another device's stream not "
                "tested");
    }
    cf_free(d, a);
}

static void t_memset(void)
{
    enum { N = 4099 };
    unsigned char want[N], got[N];

    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];
        keel_stream s;
        keel_dptr a;

        if (!cf_alloc(d, N, &a))
            continue;
        cf_pattern(want, N, 9);
        cf_upload(d, a, want, N);
        CF_OK(MEM->memset(d, a + 1, 0x5a, 1000), "memory.memset(%d)", (int)d);
        memset(want + 1, 0x5a, 1000);
        CF_OK(MEM->memset(d, a + 1, 0x11, 0), "memory.memset of 0 bytes");
        CF_OK(MEM->memset(d, a + N - 1, 0xee, 1), "memory.memset of 1 byte");
        want[N - 1] = 0xee;
        if (cf_stream_new(d, &s)) {
            CF_OK(MEM->memset_async(d, s, a + 2000, 0xc3, 7),
                  "memory.memset_async(%d)", (int)d);
            memset(want + 2000, 0xc3, 7);
            CF_OK(MEM->memset_async(d, s, a, 0x22, 0),
                  "memory.memset_async of 0 bytes");
            cf_sync(d, s);
            cf_stream_del(d, s);
        }
        if (cf_download(d, got, a, N)) {
            for (int k = 0; k < N; k++)
                if (!CF_CHECK(got[k] == want[k],
                              "device %d: after memsets byte %d is %#x, "
                              "expected %#x",
                              (int)d, k, got[k], want[k]))
                    break;
        }
        cf_free(d, a);
    }
}

static void t_pinned_host(void)
{
    bool any = false;

    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];
        void *p = (void *)1;

        if (!cf_has_feature(i, KEEL_FEATURE_PINNED_HOST) ||
            !MEM->host_alloc)
            continue;
        any = true;
        if (CF_OK(MEM->host_alloc(d, 0, &p), "memory.host_alloc(%d, 0)",
                  (int)d))
            CF_CHECK(p == NULL, "host_alloc of 0 bytes did not give NULL");
        CF_EXPECT(MEM->host_alloc(d, 64, NULL), KEEL_STATUS_INVALID_ARGUMENT,
                  "memory.host_alloc(%d, 64, NULL)", (int)d);
        CF_EXPECT(MEM->host_alloc(cf_env.device_count, 64, &p),
                  KEEL_STATUS_INVALID_DEVICE, "memory.host_alloc on device %d",
                  (int)cf_env.device_count);
        p = NULL;
        if (CF_EXPECT(MEM->host_alloc(d, UINT64_C(1) << 62, &p),
                      KEEL_STATUS_OUT_OF_MEMORY,
                      "memory.host_alloc(%d, 2^62 bytes)", (int)d) == false &&
            p)
            MEM->host_free(d, p);
        {
            static char not_pinned[64];
            CF_EXPECT(MEM->host_free(d, not_pinned),
                      KEEL_STATUS_INVALID_ARGUMENT,
                      "memory.host_free of memory host_alloc never gave");
        }
        if (!CF_OK(MEM->host_alloc(d, 1 << 20, &p), "memory.host_alloc(%d)",
                   (int)d))
            continue;
        memset(p, 0x3c, 1 << 20);
        CF_OK(MEM->host_free(d, p), "memory.host_free(%d)", (int)d);
        async_chain(i, NULL, (1 << 20) + 1);
    }
    if (!any)
        cf_skip("pinned_host is not claimed");
}

static void t_unified(void)
{
    enum { N = 8192 };
    unsigned char got[N];
    bool any = false;

    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];
        keel_dptr dp = 0;
        unsigned char *hp = NULL;

        if (!cf_has_feature(i, KEEL_FEATURE_UNIFIED_MEMORY))
            continue;
        any = true;
        CF_EXPECT(MEM->unified_alloc(cf_env.device_count, N, &dp, (void **)&hp),
                  KEEL_STATUS_INVALID_DEVICE, "memory.unified_alloc on device %d",
                  (int)cf_env.device_count);
        CF_EXPECT(MEM->unified_alloc(d, N, NULL, (void **)&hp),
                  KEEL_STATUS_INVALID_ARGUMENT,
                  "memory.unified_alloc(dptr NULL)");
        if (!CF_EXPECT(MEM->unified_alloc(d, UINT64_C(1) << 62, &dp,
                                          (void **)&hp),
                       KEEL_STATUS_OUT_OF_MEMORY,
                       "memory.unified_alloc(%d, 2^62 bytes)", (int)d) &&
            dp)
            MEM->unified_free(d, dp);
        dp = 0;
        hp = NULL;
        if (!CF_OK(MEM->unified_alloc(d, N, &dp, (void **)&hp),
                   "memory.unified_alloc(%d)", (int)d))
            continue;
        if (!CF_CHECK(dp && hp, "unified_alloc gave a null address"))
            continue;
        cf_pattern(hp, N, 21);
        if (cf_download(d, got, dp, N))
            CF_CHECK(cf_pattern_check(got, N, 21) < 0,
                     "device %d: bytes written through the host pointer of "
                     "unified memory read back wrong through its device "
                     "address",
                     (int)d);
        cf_pattern(got, N, 22);
        cf_upload(d, dp, got, N);
        CF_OK(MEM->memset(d, dp + 100, 0x77, 10), "memory.memset on unified");
        CF_OK(cf_env.api->device->synchronize(d), "device.synchronize");
        memset(got + 100, 0x77, 10);
        CF_CHECK(!memcmp(hp, got, N),
                 "device %d: bytes written through the device address of "
                 "unified memory read wrong through its host pointer",
                 (int)d);
        CF_OK(MEM->unified_free(d, dp), "memory.unified_free(%d)", (int)d);
    }
    if (!any)
        cf_skip("unified_memory is not claimed");
}

/* ABI 1.4 register_host / unregister_host, read through the table only
 * when the plugin's memory table is that new. */
static bool has_register_host(void)
{
    const keel_memory_ops *m = MEM;

    return m->header.abi_minor >= 4 &&
           m->header.struct_size >= offsetof(keel_memory_ops, unregister_host) +
                                        sizeof(m->unregister_host) &&
           m->register_host && m->unregister_host;
}

static void t_register_host(void)
{
    enum { N = 4096 };
    unsigned char *host = NULL, got[N];

    if (!has_register_host()) {
        cf_skip("memory.register_host is not provided (optional, ABI 1.4)");
        return;
    }
    if (!CF_CHECK(posix_memalign((void **)&host, 64, N) == 0,
                  "out of host memory"))
        return;
    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];
        keel_dptr dp = 0, dp2 = 0, scratch = 0;

        CF_EXPECT(MEM->register_host(d, NULL, N, &dp),
                  KEEL_STATUS_INVALID_ARGUMENT, "memory.register_host(NULL)");
        CF_EXPECT(MEM->register_host(d, host, 0, &dp),
                  KEEL_STATUS_INVALID_ARGUMENT,
                  "memory.register_host(size 0)");
        CF_EXPECT(MEM->register_host(cf_env.device_count, host, N, &dp),
                  KEEL_STATUS_INVALID_DEVICE,
                  "memory.register_host on device %d",
                  (int)cf_env.device_count);
        if (!CF_OK(MEM->register_host(d, host, N, &dp),
                   "memory.register_host(%d, %d bytes)", (int)d, (int)N))
            continue;
        if (cf_has_feature(i, KEEL_FEATURE_HOST_ADDRESSES))
            CF_CHECK(dp == (keel_dptr)(uintptr_t)host,
                     "device %d claims host_addresses but register_host "
                     "gave 0x%llx for host address %p", (int)d,
                     (unsigned long long)dp, (void *)host);
        /* The device sees the host's bytes, and the host the device's. */
        cf_pattern(host, N, 31);
        if (cf_download(d, got, dp, N))
            CF_CHECK(cf_pattern_check(got, N, 31) < 0,
                     "device %d: host bytes read through register_host's "
                     "address differ", (int)d);
        CF_OK(MEM->memset(d, dp + 10, 0x5a, 20), "memory.memset on a "
              "registered range");
        CF_OK(cf_env.api->device->synchronize(d), "device.synchronize");
        {
            bool same = true;

            for (int k = 10; k < 30; k++)
                same &= host[k] == 0x5a;
            CF_CHECK(same, "device %d: memset through register_host's "
                     "address did not reach the host memory", (int)d);
        }
        /* Overlapping and repeated registrations are allowed. */
        if (CF_OK(MEM->register_host(d, host + 64, 128, &dp2),
                  "memory.register_host of a range inside a registered one"))
            CF_OK(MEM->unregister_host(d, dp2, 128),
                  "memory.unregister_host of the inner range");
        /* free refuses the caller's memory; device copies reach it. */
        CF_CHECK(MEM->free(d, dp) != KEEL_STATUS_OK,
                 "device %d: memory.free accepted a register_host address",
                 (int)d);
        if (cf_alloc(d, 64, &scratch)) {
            memset(got, 0x33, 64);
            if (cf_upload(d, scratch, got, 64) &&
                CF_OK(MEM->copy_d2d(d, dp + 128, scratch, 64),
                      "memory.copy_d2d into a registered range"))
                CF_CHECK(host[128] == 0x33 && host[191] == 0x33,
                         "device %d: copy_d2d into a registered range did "
                         "not reach the host memory", (int)d);
            cf_free(d, scratch);
        }
        CF_OK(MEM->unregister_host(d, dp, N), "memory.unregister_host");
        CF_EXPECT(MEM->unregister_host(d, dp, N),
                  KEEL_STATUS_INVALID_ARGUMENT,
                  "memory.unregister_host twice");
    }
    free(host);
}

static void peer_pair(int i, int j, size_t n)
{
    int32_t a = cf_env.dev[i], b = cf_env.dev[j];
    unsigned char *x = malloc(n), *got = malloc(n);
    keel_dptr pa = 0, pb = 0;
    keel_status st;

    if (!CF_CHECK(x && got, "out of host memory"))
        goto out;
    if (!cf_alloc(a, n, &pa) || !cf_alloc(b, n, &pb))
        goto out;
    cf_pattern(x, n, (uint32_t)(i * 8 + j));
    cf_upload(a, pa, x, n);
    st = MEM->copy_peer(b, pb, a, pa, n);
    if (st == KEEL_STATUS_NOT_SUPPORTED &&
        !cf_has_feature(i, KEEL_FEATURE_PEER_ACCESS)) {
        cf_note("copy_peer %d -> %d: NOT_SUPPORTED (peer_access off)",
                (int)a, (int)b);
        goto out;
    }
    if (CF_OK(st, "memory.copy_peer(%d <- %d, %zu bytes)", (int)b, (int)a,
              n) &&
        cf_download(b, got, pb, n))
        CF_CHECK(!memcmp(got, x, n),
                 "copy_peer %d -> %d: destination bytes differ", (int)a,
                 (int)b);
    if (MEM->copy_peer_async) {
        keel_stream s;
        memset(got, 0, n);
        cf_upload(b, pb, got, n);
        if (cf_stream_new(a, &s)) {
            if (CF_OK(MEM->copy_peer_async(b, pb, a, pa, n, s),
                      "memory.copy_peer_async(%d <- %d)", (int)b, (int)a) &&
                cf_sync(a, s) && cf_download(b, got, pb, n))
                CF_CHECK(!memcmp(got, x, n),
                         "copy_peer_async %d -> %d: destination bytes "
                         "differ after synchronizing the source stream",
                         (int)a, (int)b);
            cf_stream_del(a, s);
        }
    }
out:
    cf_free(a, pa);
    cf_free(b, pb);
    free(x);
    free(got);
}

static void t_peer(void)
{
    int n = cf_env.ndev < 4 ? cf_env.ndev : 4;

    if (cf_env.ndev < 2) {
        cf_skip("one device: no peer copies");
        return;
    }
    if (!MEM->copy_peer) {
        CF_CHECK(!cf_has_feature(0, KEEL_FEATURE_PEER_ACCESS),
                 "peer_access is claimed but memory.copy_peer is NULL");
        cf_skip("memory.copy_peer is not provided");
        return;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (i != j)
                peer_pair(i, j, i == 0 && j == 1 ? (1 << 20) + 3 : 4097);
    if (cf_has_feature(0, KEEL_FEATURE_PEER_ACCESS)) {
        keel_dptr p;
        if (cf_alloc(cf_env.dev[0], 64, &p)) {
            CF_EXPECT(MEM->copy_peer(cf_env.device_count, p, cf_env.dev[0],
                                     p, 8),
                      KEEL_STATUS_INVALID_DEVICE,
                      "memory.copy_peer to device %d (= count)",
                      (int)cf_env.device_count);
            cf_free(cf_env.dev[0], p);
        }
    }
}

/* Opens a gate after a delay, from another thread. */
struct opener {
    struct cf_gate *g;
    double delay_ms;
};

static void *open_later(void *arg)
{
    struct opener *o = arg;

    cf_sleep_ms(o->delay_ms);
    o->g->open = 1;
    return NULL;
}

/* Synchronous calls first wait for all work enqueued on the device. */
static void t_sync_waits(void)
{
    enum { N = 8 << 20 };
    unsigned char *got = malloc(N);

    if (!CF_CHECK(got, "out of host memory"))
        return;
    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];
        struct cf_gate g;
        struct opener o = {&g, 50};
        pthread_t th;
        bool held = false, thread = false;
        keel_stream s;
        keel_dptr a;
        size_t k;

        if (!cf_stream_new(d, &s))
            continue;
        if (!cf_alloc(d, N, &a)) {
            cf_stream_del(d, s);
            continue;
        }
        CF_OK(MEM->memset(d, a, 0, N), "memset");
        cf_gate_init(&g, cf_has_feature(i, KEEL_FEATURE_ASYNC_COPY) ? 10
                                                                     : 0.05);
        if (cf_has_feature(i, KEEL_FEATURE_HOST_CALLBACK) &&
            cf_env.api->stream->launch_host_func &&
            CF_OK(cf_env.api->stream->launch_host_func(d, s, cf_gate_fn, &g),
                  "launch_host_func"))
            held = g.ran == 0;
        CF_OK(MEM->memset_async(d, s, a, 0x42, N), "memset_async");
        if (held)
            thread = pthread_create(&th, NULL, open_later, &o) == 0;
        if (held && !thread)
            g.open = 1;
        if (cf_download(d, got, a, N)) {
            for (k = 0; k < N && got[k] == 0x42; k++)
                ;
            CF_CHECK(k == N,
                     "device %d: a synchronous copy_d2h read byte %zu as "
                     "%#x: it did not wait for a memset_async enqueued "
                     "before it on another stream",
                     (int)d, k, got[k]);
        }
        if (thread)
            pthread_join(th, NULL);
        g.open = 1;
        cf_sync(d, s);
        cf_free(d, a);
        cf_stream_del(d, s);
    }
    free(got);
}

static void t_info(void)
{
    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];
        keel_memory_info a, b, c;
        uint64_t size = 8u << 20;
        keel_dptr p;

        if (size > cf_env.props[i].total_memory / 4)
            size = cf_env.props[i].total_memory / 4;
        if (!CF_OK(MEM->get_memory_info(d, &a), "memory.get_memory_info(%d)",
                   (int)d))
            continue;
        CF_CHECK(a.total == cf_env.props[i].total_memory,
                 "device %d: memory info total %llu differs from "
                 "props.total_memory %llu",
                 (int)d, (unsigned long long)a.total,
                 (unsigned long long)cf_env.props[i].total_memory);
        CF_CHECK(a.free <= a.total && a.used <= a.total,
                 "device %d: free %llu or used %llu exceeds total %llu",
                 (int)d, (unsigned long long)a.free,
                 (unsigned long long)a.used, (unsigned long long)a.total);
        if (!cf_alloc(d, size, &p))
            continue;
        if (CF_OK(MEM->get_memory_info(d, &b), "memory.get_memory_info"))
            CF_CHECK(b.used >= a.used + size,
                     "device %d: used went from %llu to %llu after "
                     "allocating %llu bytes",
                     (int)d, (unsigned long long)a.used,
                     (unsigned long long)b.used, (unsigned long long)size);
        cf_free(d, p);
        if (CF_OK(MEM->get_memory_info(d, &c), "memory.get_memory_info"))
            CF_CHECK(c.used == a.used,
                     "device %d: used is %llu after freeing, %llu before "
                     "allocating",
                     (int)d, (unsigned long long)c.used,
                     (unsigned long long)a.used);
    }
    CF_EXPECT(MEM->get_memory_info(cf_env.device_count, &(keel_memory_info){0}),
              KEEL_STATUS_INVALID_DEVICE, "memory.get_memory_info(%d = count)",
              (int)cf_env.device_count);
    CF_EXPECT(MEM->get_memory_info(cf_env.dev[0], NULL),
              KEEL_STATUS_INVALID_ARGUMENT, "memory.get_memory_info(NULL)");
}

const struct cf_test_spec cf_memory_tests[] = {
    {"memory", "alloc_sizes", CF_LEVEL_SMOKE, t_alloc_sizes,
     "sizes 0, 1, odd; alignment; contents survive a round trip"},
    {"memory", "alloc_large", CF_LEVEL_FULL, t_alloc_large,
     "a block of total/8 (at most 512 MiB) works at both ends"},
    {"memory", "alloc_errors", CF_LEVEL_SMOKE, t_alloc_errors,
     "NULL and bad devices are rejected"},
    {"memory", "oom_huge", CF_LEVEL_SMOKE, t_oom_huge,
     "2^62 bytes is OUT_OF_MEMORY and the device still works"},
    {"memory", "oom_exhaustion", CF_LEVEL_FULL, t_oom_exhaustion,
     "filling the device ends in OUT_OF_MEMORY; freeing recovers"},
    {"memory", "copy_sync", CF_LEVEL_SMOKE, t_copy_sync,
     "h2d, d2h, d2d at offsets, odd sizes, size 0"},
    {"memory", "copy_async", CF_LEVEL_SMOKE, t_copy_async,
     "async h2d/d2d/d2h on default and created streams"},
    {"memory", "copy_errors", CF_LEVEL_SMOKE, t_copy_errors,
     "NULL host pointers, bad devices, another device's stream"},
    {"memory", "memset", CF_LEVEL_SMOKE, t_memset,
     "memset and memset_async of ranges; neighbours untouched"},
    {"memory", "pinned_host", CF_LEVEL_SMOKE, t_pinned_host,
     "host_alloc/host_free and async copies from pinned memory"},
    {"memory", "unified", CF_LEVEL_SMOKE, t_unified,
     "unified memory is the same bytes from host and device"},
    {"memory", "register_host", CF_LEVEL_SMOKE, t_register_host,
     "host memory used in place: both sides see writes; free refuses it"},
    {"memory", "peer_copy", CF_LEVEL_SMOKE, t_peer,
     "copy_peer (and copy_peer_async) between every pair of devices"},
    {"memory", "sync_waits", CF_LEVEL_SMOKE, t_sync_waits,
     "synchronous copies wait for work enqueued on any stream"},
    {"memory", "info", CF_LEVEL_SMOKE, t_info,
     "memory info matches props and follows allocations"},
    {NULL, NULL, 0, NULL, NULL},
};
