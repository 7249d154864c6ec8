/*
 * keel conform — the device group: counts, properties, synchronize, init
 * and finalize, and the optional profiler group.
 */
#include <string.h>

#include "conform.h"

#define DEV (cf_env.api->device)

static void t_count(void)
{
    int32_t n = -1;

    if (!CF_OK(DEV->get_device_count(&n), "device.get_device_count"))
        return;
    CF_CHECK(n == cf_env.device_count,
             "device.get_device_count gives %d, the core saw %d", (int)n,
             (int)cf_env.device_count);
    CF_EXPECT(DEV->get_device_count(NULL), KEEL_STATUS_INVALID_ARGUMENT,
              "device.get_device_count(NULL)");
}

static bool terminated(const char *field, size_t cap)
{
    return memchr(field, '\0', cap) != NULL;
}

static void check_props(int32_t d, const keel_device_props *p)
{
    CF_CHECK(p->struct_size <= sizeof(*p) && p->struct_size > 0,
             "device %d: struct_size written back is %u (asked %zu)", (int)d,
             p->struct_size, sizeof(*p));
    CF_CHECK(terminated(p->name, sizeof(p->name)) && p->name[0],
             "device %d: name is empty or not NUL-terminated", (int)d);
    CF_CHECK(terminated(p->vendor, sizeof(p->vendor)),
             "device %d: vendor is not NUL-terminated", (int)d);
    CF_CHECK(terminated(p->arch, sizeof(p->arch)),
             "device %d: arch is not NUL-terminated", (int)d);
    CF_CHECK(terminated(p->driver_version, sizeof(p->driver_version)),
             "device %d: driver_version is not NUL-terminated", (int)d);
    CF_CHECK(terminated(p->bus_id, sizeof(p->bus_id)),
             "device %d: bus_id is not NUL-terminated", (int)d);
    CF_CHECK(p->total_memory > 0, "device %d: total_memory is 0", (int)d);
    CF_CHECK(p->compute_units > 0, "device %d: compute_units is 0", (int)d);
    CF_CHECK(p->alloc_alignment > 0 &&
                 !(p->alloc_alignment & (p->alloc_alignment - 1)),
             "device %d: alloc_alignment %u is not a power of two", (int)d,
             p->alloc_alignment);
    CF_CHECK(p->stream_priorities >= 1,
             "device %d: stream_priorities is %d (1 when unsupported)",
             (int)d, (int)p->stream_priorities);
    CF_CHECK(p->dtype_mask != 0, "device %d: dtype_mask is empty", (int)d);
    CF_CHECK(!(p->dtype_mask & ~((1u << KEEL_DTYPE_COUNT_) - 1)),
             "device %d: unknown dtype bits %#x", (int)d, p->dtype_mask);
    CF_CHECK(!(p->features & KEEL_FEATURE_STREAM_PRIORITY) ||
                 p->stream_priorities > 1,
             "device %d claims stream_priority with %d priority level",
             (int)d, (int)p->stream_priorities);
}

static void t_props_sane(void)
{
    keel_device_props p;

    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];

        memset(&p, 0, sizeof(p));
        p.struct_size = sizeof(p);
        if (CF_OK(DEV->get_device_props(d, &p), "device.get_device_props(%d)",
                  (int)d))
            check_props(d, &p);
        CF_CHECK(!memcmp(&p, &cf_env.props[i], sizeof(p)),
                 "device %d: two get_device_props calls gave different "
                 "properties",
                 (int)d);
    }
    memset(&p, 0, sizeof(p));
    p.struct_size = sizeof(p);
    CF_EXPECT(DEV->get_device_props(cf_env.device_count, &p),
              KEEL_STATUS_INVALID_DEVICE, "device.get_device_props(%d = count)",
              (int)cf_env.device_count);
    CF_EXPECT(DEV->get_device_props(-1, &p), KEEL_STATUS_INVALID_DEVICE,
              "device.get_device_props(-1)");
    CF_EXPECT(DEV->get_device_props(0, NULL), KEEL_STATUS_INVALID_ARGUMENT,
              "device.get_device_props(0, NULL)");
}

static void t_synchronize(void)
{
    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];
        keel_dptr buf;

        CF_OK(DEV->synchronize(d), "device.synchronize(%d) when idle", (int)d);
        if (!cf_alloc(d, 1 << 20, &buf))
            continue;
        CF_OK(cf_env.api->memory->memset_async(d, NULL, buf, 7, 1 << 20),
              "memory.memset_async(device %d)", (int)d);
        CF_OK(DEV->synchronize(d), "device.synchronize(%d) after work",
              (int)d);
        cf_free(d, buf);
    }
    CF_EXPECT(DEV->synchronize(cf_env.device_count),
              KEEL_STATUS_INVALID_DEVICE, "device.synchronize(%d = count)",
              (int)cf_env.device_count);
    CF_EXPECT(DEV->synchronize(-1), KEEL_STATUS_INVALID_DEVICE,
              "device.synchronize(-1)");
}

/* A device works: allocate, write, read back. */
static bool device_works(int32_t d, const char *when)
{
    unsigned char in[4099], out[4099];
    keel_dptr buf;
    bool ok = false;

    if (!cf_alloc(d, sizeof(in), &buf))
        return false;
    cf_pattern(in, sizeof(in), 11);
    memset(out, 0, sizeof(out));
    if (cf_upload(d, buf, in, sizeof(in)) &&
        cf_download(d, out, buf, sizeof(out)))
        ok = CF_CHECK(!memcmp(in, out, sizeof(in)),
                      "device %d %s: the bytes read back differ from the "
                      "bytes written",
                      (int)d, when);
    cf_free(d, buf);
    return ok;
}

static void t_init_twice(void)
{
    if (!CF_OK(DEV->init(), "device.init while initialised (a no-op)"))
        return;
    for (int i = 0; i < cf_env.ndev; i++)
        device_works(cf_env.dev[i], "after a second init");
}

static void t_finalize_reinit(void)
{
    const keel_collective_ops *col = cf_env.api->collective;
    int32_t d = cf_env.dev[0], n = -1;
    keel_comm_id id;
    keel_comm comm = NULL;
    keel_dptr ptr = 0;
    bool have_id = col && col->get_unique_id(&id) == KEEL_STATUS_OK;

    if (!CF_OK(DEV->finalize(), "device.finalize"))
        return;
    if (have_id)
        CF_EXPECT(col->comm_init_rank(d, 1, &id, 0, &comm),
                  KEEL_STATUS_NOT_INITIALIZED,
                  "collective.comm_init_rank(%d) after finalize", (int)d);
    CF_OK(DEV->finalize(), "device.finalize a second time");
    CF_EXPECT(DEV->synchronize(d), KEEL_STATUS_NOT_INITIALIZED,
              "device.synchronize(%d) after finalize", (int)d);
    CF_EXPECT(cf_env.api->memory->alloc(d, 64, &ptr),
              KEEL_STATUS_NOT_INITIALIZED, "memory.alloc(%d) after finalize",
              (int)d);
    if (CF_OK(DEV->get_device_count(&n), "device.get_device_count after "
                                         "finalize"))
        CF_CHECK(n == cf_env.device_count,
                 "device count %d after finalize, %d before", (int)n,
                 (int)cf_env.device_count);
    if (!CF_OK(DEV->init(), "device.init after finalize"))
        return;
    for (int i = 0; i < cf_env.ndev; i++)
        device_works(cf_env.dev[i], "after finalize and init");
}

static void t_profiler(void)
{
    const keel_profiler_ops *p = cf_env.api->profiler;
    int32_t d = cf_env.dev[0];
    keel_status st;

    if (!p) {
        cf_skip("the optional profiler group is not provided");
        return;
    }
    st = p->start(d);
    if (st == KEEL_STATUS_NOT_SUPPORTED) {
        cf_note("profiler.start: NOT_SUPPORTED on device %d", (int)d);
    } else if (CF_OK(st, "profiler.start(%d)", (int)d)) {
        CF_OK(p->stop(d), "profiler.stop(%d)", (int)d);
        CF_EXPECT(p->stop(d), KEEL_STATUS_INVALID_STATE,
                  "profiler.stop(%d) without a start", (int)d);
    }
    CF_OK(p->range_push("keel-conform"), "profiler.range_push");
    CF_OK(p->range_pop(), "profiler.range_pop");
    CF_EXPECT(p->range_pop(), KEEL_STATUS_INVALID_STATE,
              "profiler.range_pop with no open range");
}

const struct cf_test_spec cf_device_tests[] = {
    {"device", "count", CF_LEVEL_SMOKE, t_count,
     "get_device_count after init matches the core; NULL is rejected"},
    {"device", "props_sane", CF_LEVEL_SMOKE, t_props_sane,
     "every property is sane and stable; bad device and NULL rejected"},
    {"device", "synchronize", CF_LEVEL_SMOKE, t_synchronize,
     "synchronize when idle and after work; bad devices rejected"},
    {"device", "profiler", CF_LEVEL_SMOKE, t_profiler,
     "profiler start/stop and ranges, INVALID_STATE when unbalanced"},
    {"device", "init_twice", CF_LEVEL_SMOKE, t_init_twice,
     "a second init is a no-op and the devices keep working"},
    {"device", "finalize_reinit", CF_LEVEL_SMOKE, t_finalize_reinit,
     "finalize twice, NOT_INITIALIZED after, init again and work"},
    {NULL, NULL, 0, NULL, NULL},
};
