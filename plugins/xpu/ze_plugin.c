/*
 * keel Level Zero plugin — entry point, probe, device group, errors,
 * registries and the event allocator (see ze_internal.h).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ze_internal.h"

#define ZE_PLUGIN_NAME "levelzero"
#define ZE_PLUGIN_VERSION "0.1.0"
#define ZE_PLUGIN_DEVICE_TYPE "xpu"
#define ZE_PLUGIN_DESCRIPTION \
    "Intel GPUs on Level Zero (SPIR-V kernels from the shared OpenCL C)"

struct ze_state ze_g = {
    .probe_once = PTHREAD_ONCE_INIT,
    .init_lock = PTHREAD_MUTEX_INITIALIZER,
    .mem = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0},
    .handles = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0},
};

/* ---- errors ------------------------------------------------------------- */

const char *ze_result_name(ze_result_t r)
{
    switch (r) {
#define N(x) case x: return #x;
    N(ZE_RESULT_SUCCESS)
    N(ZE_RESULT_NOT_READY)
    N(ZE_RESULT_ERROR_DEVICE_LOST)
    N(ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY)
    N(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)
    N(ZE_RESULT_ERROR_MODULE_BUILD_FAILURE)
    N(ZE_RESULT_ERROR_MODULE_LINK_FAILURE)
    N(ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET)
    N(ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE)
    N(ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS)
    N(ZE_RESULT_ERROR_NOT_AVAILABLE)
    N(ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE)
    N(ZE_RESULT_ERROR_UNINITIALIZED)
    N(ZE_RESULT_ERROR_UNSUPPORTED_VERSION)
    N(ZE_RESULT_ERROR_UNSUPPORTED_FEATURE)
    N(ZE_RESULT_ERROR_INVALID_ARGUMENT)
    N(ZE_RESULT_ERROR_INVALID_NULL_HANDLE)
    N(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE)
    N(ZE_RESULT_ERROR_INVALID_NULL_POINTER)
    N(ZE_RESULT_ERROR_INVALID_SIZE)
    N(ZE_RESULT_ERROR_UNSUPPORTED_SIZE)
    N(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT)
    N(ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT)
    N(ZE_RESULT_ERROR_INVALID_ENUMERATION)
    N(ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION)
    N(ZE_RESULT_ERROR_INVALID_NATIVE_BINARY)
    N(ZE_RESULT_ERROR_INVALID_GLOBAL_NAME)
    N(ZE_RESULT_ERROR_INVALID_KERNEL_NAME)
    N(ZE_RESULT_ERROR_INVALID_FUNCTION_NAME)
    N(ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION)
    N(ZE_RESULT_ERROR_INVALID_GLOBAL_WIDTH_DIMENSION)
    N(ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX)
    N(ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE)
    N(ZE_RESULT_ERROR_INVALID_KERNEL_ATTRIBUTE_VALUE)
    N(ZE_RESULT_ERROR_INVALID_MODULE_UNLINKED)
    N(ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE)
    N(ZE_RESULT_ERROR_OVERLAPPING_REGIONS)
    N(ZE_RESULT_ERROR_UNKNOWN)
#undef N
    default:
        return "ZE_RESULT_(unknown)";
    }
}

keel_status ze_status_of(ze_result_t r)
{
    switch (r) {
    case ZE_RESULT_SUCCESS:
        return KEEL_STATUS_OK;
    case ZE_RESULT_NOT_READY:
        return KEEL_STATUS_NOT_READY;
    case ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY:
    case ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY:
        return KEEL_STATUS_OUT_OF_MEMORY;
    case ZE_RESULT_ERROR_UNINITIALIZED:
        return KEEL_STATUS_UNAVAILABLE;
    case ZE_RESULT_ERROR_UNSUPPORTED_FEATURE:
    case ZE_RESULT_ERROR_UNSUPPORTED_SIZE:
    case ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT:
    case ZE_RESULT_ERROR_UNSUPPORTED_VERSION:
        return KEEL_STATUS_NOT_SUPPORTED;
    case ZE_RESULT_ERROR_INVALID_ARGUMENT:
    case ZE_RESULT_ERROR_INVALID_NULL_POINTER:
    case ZE_RESULT_ERROR_INVALID_SIZE:
    case ZE_RESULT_ERROR_OVERLAPPING_REGIONS:
        return KEEL_STATUS_INVALID_ARGUMENT;
    default:
        return KEEL_STATUS_DEVICE_ERROR;
    }
}

static void vfail(keel_status st, const char *fmt, va_list ap)
{
    char buf[1024];

    vsnprintf(buf, sizeof(buf), fmt, ap);
    if (ze_g.host && ze_g.host->set_error)
        ze_g.host->set_error(st, buf);
}

keel_status ze_fail(keel_status status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfail(status, fmt, ap);
    va_end(ap);
    return status;
}

keel_status ze_check(ze_result_t r, int32_t device, const char *fmt, ...)
{
    char what[768];
    va_list ap;
    keel_status st;

    if (r == ZE_RESULT_SUCCESS)
        return KEEL_STATUS_OK;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    st = ze_status_of(r);
    if (st == KEEL_STATUS_NOT_READY)
        st = KEEL_STATUS_DEVICE_ERROR;
    return ze_fail(st, "%s on xpu:%d: %s", what, (int)device,
                   ze_result_name(r));
}

void ze_log(keel_log_level level, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;

    if (!ze_g.host || !ze_g.host->log)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    ze_g.host->log(level, buf);
}

const char *ze_env(const char *name)
{
    const keel_host_api *h = ze_g.host;

    if (h && h->header.struct_size >=
                 offsetof(keel_host_api, get_env) + sizeof(h->get_env) &&
        h->get_env)
        return h->get_env(name);
    return getenv(name);
}

/* ---- registries ---------------------------------------------------------- */

/* Index of the first range with base > p. */
static size_t rs_upper(const struct ze_rangeset *rs, uintptr_t p)
{
    size_t lo = 0, hi = rs->len;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (rs->v[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int ze_rs_add(struct ze_rangeset *rs, const struct ze_range *r)
{
    int rc = 0;

    pthread_mutex_lock(&rs->lock);
    if (rs->len == rs->cap) {
        size_t cap = rs->cap ? rs->cap * 2 : 64;
        struct ze_range *v = NULL;
        if (cap <= SIZE_MAX / sizeof(*v))
            v = realloc(rs->v, cap * sizeof(*v));
        if (!v) {
            rc = -1;
            goto out;
        }
        rs->v = v;
        rs->cap = cap;
    }
    size_t at = rs_upper(rs, r->base);
    memmove(&rs->v[at + 1], &rs->v[at], (rs->len - at) * sizeof(*rs->v));
    rs->v[at] = *r;
    rs->len++;
out:
    pthread_mutex_unlock(&rs->lock);
    return rc;
}

static bool kind_matches(int32_t have, int32_t want)
{
    if (want == 0)
        return have == ZE_KIND_DEVICE_MEM || have == ZE_KIND_SHARED_MEM;
    return have == want;
}

bool ze_rs_find(struct ze_rangeset *rs, uintptr_t p, uint64_t size,
                int32_t device, int32_t kind, struct ze_range *out)
{
    bool found = false;

    pthread_mutex_lock(&rs->lock);
    size_t at = rs_upper(rs, p);
    if (at > 0) {
        const struct ze_range *r = &rs->v[at - 1];
        uint64_t off = (uint64_t)(p - r->base);
        if (off < r->size && size <= r->size - off &&
            (device < 0 || r->device == device) && kind_matches(r->kind, kind)) {
            if (out)
                *out = *r;
            found = true;
        }
    }
    pthread_mutex_unlock(&rs->lock);
    return found;
}

bool ze_rs_take(struct ze_rangeset *rs, uintptr_t base, int32_t kind,
                int32_t device, struct ze_range *out)
{
    bool found = false;

    pthread_mutex_lock(&rs->lock);
    size_t at = rs_upper(rs, base);
    if (at > 0) {
        struct ze_range *r = &rs->v[at - 1];
        if (r->base == base && r->kind == kind &&
            (device < 0 || r->device == device)) {
            if (out)
                *out = *r;
            memmove(r, r + 1, (rs->len - at) * sizeof(*r));
            rs->len--;
            found = true;
        }
    }
    pthread_mutex_unlock(&rs->lock);
    return found;
}

bool ze_rs_pop(struct ze_rangeset *rs, int32_t kind, struct ze_range *out)
{
    bool found = false;

    pthread_mutex_lock(&rs->lock);
    for (size_t i = 0; i < rs->len; i++) {
        if (rs->v[i].kind != kind)
            continue;
        if (out)
            *out = rs->v[i];
        memmove(&rs->v[i], &rs->v[i + 1], (rs->len - i - 1) * sizeof(*rs->v));
        rs->len--;
        found = true;
        break;
    }
    pthread_mutex_unlock(&rs->lock);
    return found;
}

void ze_rs_release(struct ze_rangeset *rs)
{
    pthread_mutex_lock(&rs->lock);
    free(rs->v);
    rs->v = NULL;
    rs->len = rs->cap = 0;
    pthread_mutex_unlock(&rs->lock);
}

/* ---- the event allocator -------------------------------------------------- */

struct ze_pool {
    ze_event_pool_handle_t h;
    bool timing;
    int32_t device;
    uint32_t nfree;
    uint8_t used[ZE_POOL_EVENTS];
    struct ze_pool *next;
};

keel_status ze_ev_get(int32_t device, bool timing, struct ze_ev **out)
{
    struct ze_device *d = &ze_g.dev[device];
    struct ze_pool *p;
    struct ze_ev *ev;
    ze_result_t r;
    uint32_t idx = 0;

    *out = NULL;
    ev = calloc(1, sizeof(*ev));
    if (!ev)
        return ze_fail(KEEL_STATUS_OUT_OF_MEMORY,
                       "xpu:%d: no host memory for an event", (int)device);
    pthread_mutex_lock(&d->mu);
    for (p = d->pools; p; p = p->next)
        if (p->timing == timing && p->nfree > 0)
            break;
    if (!p) {
        ze_event_pool_desc_t pd = {
            .stype = ZE_STRUCTURE_TYPE_EVENT_POOL_DESC,
            .flags = ZE_EVENT_POOL_FLAG_HOST_VISIBLE |
                     (timing ? ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP : 0),
            .count = ZE_POOL_EVENTS,
        };
        p = calloc(1, sizeof(*p));
        if (!p) {
            pthread_mutex_unlock(&d->mu);
            free(ev);
            return ze_fail(KEEL_STATUS_OUT_OF_MEMORY,
                           "xpu:%d: no host memory for an event pool",
                           (int)device);
        }
        r = zeEventPoolCreate(d->ctx, &pd, 1, &d->dev, &p->h);
        if (r != ZE_RESULT_SUCCESS) {
            pthread_mutex_unlock(&d->mu);
            free(p);
            free(ev);
            return ze_check(r, device, "zeEventPoolCreate(%u events)",
                            ZE_POOL_EVENTS);
        }
        p->timing = timing;
        p->device = device;
        p->nfree = ZE_POOL_EVENTS;
        p->next = d->pools;
        d->pools = p;
    }
    while (p->used[idx])
        idx++;
    p->used[idx] = 1;
    p->nfree--;
    pthread_mutex_unlock(&d->mu);

    ze_event_desc_t ed = {
        .stype = ZE_STRUCTURE_TYPE_EVENT_DESC,
        .index = idx,
        .signal = ZE_EVENT_SCOPE_FLAG_HOST,
        .wait = ZE_EVENT_SCOPE_FLAG_HOST,
    };
    r = zeEventCreate(p->h, &ed, &ev->h);
    ev->pool = p;
    ev->index = idx;
    if (r != ZE_RESULT_SUCCESS) {
        ev->h = NULL;
        ze_ev_put(ev);
        return ze_check(r, device, "zeEventCreate");
    }
    *out = ev;
    return KEEL_STATUS_OK;
}

void ze_ev_put(struct ze_ev *ev)
{
    struct ze_device *d;

    if (!ev)
        return;
    d = &ze_g.dev[ev->pool->device];
    if (ev->h)
        zeEventDestroy(ev->h);
    pthread_mutex_lock(&d->mu);
    ev->pool->used[ev->index] = 0;
    ev->pool->nfree++;
    pthread_mutex_unlock(&d->mu);
    free(ev);
}

void ze_ev_retire(int32_t device, struct ze_ev *ev)
{
    struct ze_device *d = &ze_g.dev[device];

    if (!ev)
        return;
    pthread_mutex_lock(&d->mu);
    ev->next = d->retired;
    d->retired = ev;
    pthread_mutex_unlock(&d->mu);
}

static void pools_release(struct ze_device *d)
{
    while (d->pools) {
        struct ze_pool *p = d->pools;
        d->pools = p->next;
        zeEventPoolDestroy(p->h);
        free(p);
    }
}

/* ---- probe ---------------------------------------------------------------- */

static void reason(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void reason(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(ze_g.probe_reason, sizeof(ze_g.probe_reason), fmt, ap);
    va_end(ap);
    ze_g.probe_status = KEEL_STATUS_UNAVAILABLE;
}

static void fill_device(struct ze_device *d)
{
    ze_device_memory_properties_t mp[16];
    ze_command_queue_group_properties_t qg[16];
    uint32_t n = 16;
    ze_driver_properties_t dp = {.stype = ZE_STRUCTURE_TYPE_DRIVER_PROPERTIES};
    ze_pci_ext_properties_t pci = {.stype = ZE_STRUCTURE_TYPE_PCI_EXT_PROPERTIES};

    d->compute.stype = ZE_STRUCTURE_TYPE_DEVICE_COMPUTE_PROPERTIES;
    if (zeDeviceGetComputeProperties(d->dev, &d->compute) != ZE_RESULT_SUCCESS)
        memset(&d->compute, 0, sizeof(d->compute));
    d->module.stype = ZE_STRUCTURE_TYPE_DEVICE_MODULE_PROPERTIES;
    if (zeDeviceGetModuleProperties(d->dev, &d->module) != ZE_RESULT_SUCCESS)
        memset(&d->module, 0, sizeof(d->module));
    d->fp64 = (d->module.flags & ZE_DEVICE_MODULE_FLAG_FP64) != 0;
    d->fp16 = (d->module.flags & ZE_DEVICE_MODULE_FLAG_FP16) != 0;

    for (uint32_t i = 0; i < 16; i++)
        mp[i] = (ze_device_memory_properties_t){
            .stype = ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES};
    d->total_memory = 0;
    if (zeDeviceGetMemoryProperties(d->dev, &n, mp) == ZE_RESULT_SUCCESS)
        for (uint32_t i = 0; i < n && i < 16; i++)
            d->total_memory += mp[i].totalSize;

    n = 16;
    for (uint32_t i = 0; i < 16; i++)
        qg[i] = (ze_command_queue_group_properties_t){
            .stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES};
    d->compute_ordinal = 0;
    if (zeDeviceGetCommandQueueGroupProperties(d->dev, &n, qg) ==
        ZE_RESULT_SUCCESS)
        for (uint32_t i = 0; i < n && i < 16; i++)
            if (qg[i].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE) {
                d->compute_ordinal = i;
                break;
            }

    memcpy(d->name, d->props.name, sizeof(d->name) - 1);
    d->name[sizeof(d->name) - 1] = '\0';
    /* No architecture name is exposed by core Level Zero 1.4: the PCI
     * device id names the GPU model exactly. */
    snprintf(d->arch, sizeof(d->arch), "intel_gpu_0x%04" PRIx32,
             d->props.deviceId);
    d->driver_version[0] = '\0';
    if (zeDriverGetProperties(d->driver, &dp) == ZE_RESULT_SUCCESS)
        snprintf(d->driver_version, sizeof(d->driver_version),
                 "%" PRIu32 ".%" PRIu32 ".%" PRIu32,
                 (dp.driverVersion >> 24) & 0xffu,
                 (dp.driverVersion >> 16) & 0xffu, dp.driverVersion & 0xffffu);
    d->bus_id[0] = '\0';
    if (zeDevicePciGetPropertiesExt(d->dev, &pci) == ZE_RESULT_SUCCESS)
        snprintf(d->bus_id, sizeof(d->bus_id), "%04x:%02x:%02x.%x",
                 pci.address.domain & 0xffffu, pci.address.bus & 0xffu,
                 pci.address.device & 0xffu, pci.address.function & 0xfu);
}

/* In-order command lists (ZE_COMMAND_QUEUE_FLAG_IN_ORDER) are Level Zero
 * 1.7; an older driver gets a barrier after every command instead. */
static bool api_in_order(ze_driver_handle_t drv)
{
    ze_api_version_t v = 0;

    if (zeDriverGetApiVersion(drv, &v) != ZE_RESULT_SUCCESS)
        return false;
    return ZE_MAJOR_VERSION(v) > 1 ||
           (ZE_MAJOR_VERSION(v) == 1 && ZE_MINOR_VERSION(v) >= 7);
}

static void probe(void)
{
    ze_result_t r;
    uint32_t ndrv = 0;
    ze_driver_handle_t drv[ZE_MAX_DRIVERS];
    int skipped = 0;

    ze_g.ndev = 0;
    ze_g.probe_status = KEEL_STATUS_OK;
    r = zeInit(ZE_INIT_FLAG_GPU_ONLY);
    if (r != ZE_RESULT_SUCCESS) {
        reason("no Level Zero driver (zeInit: %s); install Intel's compute "
               "runtime (intel-level-zero-gpu)",
               ze_result_name(r));
        return;
    }
    r = zeDriverGet(&ndrv, NULL);
    if (r != ZE_RESULT_SUCCESS || ndrv == 0) {
        reason("no Level Zero driver (zeDriverGet: %s, %u drivers); install "
               "Intel's compute runtime (intel-level-zero-gpu)",
               ze_result_name(r), (unsigned)ndrv);
        return;
    }
    if (ndrv > ZE_MAX_DRIVERS)
        ndrv = ZE_MAX_DRIVERS;
    r = zeDriverGet(&ndrv, drv);
    if (r != ZE_RESULT_SUCCESS) {
        reason("zeDriverGet: %s", ze_result_name(r));
        return;
    }
    for (uint32_t di = 0; di < ndrv; di++) {
        uint32_t n = 0;
        ze_device_handle_t devs[ZE_MAX_DEVICES];
        ze_context_handle_t ctx = NULL;

        if (zeDeviceGet(drv[di], &n, NULL) != ZE_RESULT_SUCCESS || n == 0)
            continue;
        if (n > ZE_MAX_DEVICES)
            n = ZE_MAX_DEVICES;
        if (zeDeviceGet(drv[di], &n, devs) != ZE_RESULT_SUCCESS)
            continue;
        for (uint32_t i = 0; i < n; i++) {
            ze_device_properties_t p = {
                .stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES};
            if (zeDeviceGetProperties(devs[i], &p) != ZE_RESULT_SUCCESS ||
                p.type != ZE_DEVICE_TYPE_GPU)
                continue;
            if (ze_g.ndev >= ZE_MAX_DEVICES) {
                skipped++;
                continue;
            }
            if (!ctx) {
                ze_context_desc_t cd = {.stype = ZE_STRUCTURE_TYPE_CONTEXT_DESC};
                r = zeContextCreate(drv[di], &cd, &ctx);
                if (r != ZE_RESULT_SUCCESS) {
                    ze_log(KEEL_LOG_WARN,
                           "levelzero: zeContextCreate on driver %u: %s; its "
                           "devices are not used",
                           (unsigned)di, ze_result_name(r));
                    break;
                }
                ze_g.drivers[ze_g.ndrivers] = drv[di];
                ze_g.contexts[ze_g.ndrivers] = ctx;
                ze_g.ndrivers++;
            }
            struct ze_device *d = &ze_g.dev[ze_g.ndev];
            memset(d, 0, sizeof(*d));
            d->driver = drv[di];
            d->dev = devs[i];
            d->ctx = ctx;
            d->driver_index = ze_g.ndrivers - 1;
            d->props = p;
            d->in_order = api_in_order(drv[di]);
            pthread_mutex_init(&d->mu, NULL);
            pthread_mutex_init(&d->sync_mu, NULL);
            pthread_rwlock_init(&d->streams_lock, NULL);
            fill_device(d);
            ze_g.ndev++;
        }
    }
    if (skipped)
        ze_log(KEEL_LOG_WARN, "levelzero: %d GPUs beyond the first %d are not "
               "used", skipped, ZE_MAX_DEVICES);
    if (ze_g.ndev == 0)
        reason("the Level Zero loader found %u driver%s but no GPU device",
               (unsigned)ndrv, ndrv == 1 ? "" : "s");
}

static void probe_once(void)
{
    pthread_once(&ze_g.probe_once, probe);
}

/* ---- device group -------------------------------------------------------- */

keel_status ze_enter(int32_t device, const char *call)
{
    if (!atomic_load(&ze_g.initialized))
        return ze_fail(KEEL_STATUS_NOT_INITIALIZED,
                       "%s: the levelzero plugin is not initialised", call);
    if (device < 0 || device >= ze_g.ndev)
        return ze_fail(KEEL_STATUS_INVALID_DEVICE,
                       "%s: device %d does not exist (levelzero has %d)", call,
                       (int)device, (int)ze_g.ndev);
    return KEEL_STATUS_OK;
}

static void release_retired(struct ze_device *d)
{
    struct ze_ev *list;

    pthread_mutex_lock(&d->mu);
    list = d->retired;
    d->retired = NULL;
    pthread_mutex_unlock(&d->mu);
    while (list) {
        struct ze_ev *n = list->next;
        ze_ev_put(list);
        list = n;
    }
}

static void free_deferred(struct ze_device *d, bool all)
{
    struct ze_deferred *keep = NULL, *list;

    pthread_mutex_lock(&d->mu);
    list = d->deferred;
    d->deferred = NULL;
    pthread_mutex_unlock(&d->mu);
    while (list) {
        struct ze_deferred *n = list->next;
        if (all || !list->done ||
            zeEventQueryStatus(list->done->h) == ZE_RESULT_SUCCESS) {
            zeMemFree(d->ctx, list->ptr);
            ze_ev_put(list->done);
            free(list);
        } else {
            list->next = keep;
            keep = list;
        }
        list = n;
    }
    if (keep) {
        pthread_mutex_lock(&d->mu);
        struct ze_deferred *t = keep;
        while (t->next)
            t = t->next;
        t->next = d->deferred;
        d->deferred = keep;
        pthread_mutex_unlock(&d->mu);
    }
}

void ze_collect_deferred(int32_t device)
{
    free_deferred(&ze_g.dev[device], false);
}

keel_status ze_device_sync(int32_t device, const char *call)
{
    struct ze_device *d = &ze_g.dev[device];
    keel_status st = KEEL_STATUS_OK;

    pthread_rwlock_rdlock(&d->streams_lock);
    for (struct keel_stream_s *s = d->streams; s && !st; s = s->next)
        st = ze_stream_wait(s, call);
    pthread_rwlock_unlock(&d->streams_lock);
    if (st)
        return st;
    release_retired(d);
    free_deferred(d, false);
    pthread_mutex_lock(&d->mu);
    st = d->async_error;
    if (st) {
        char msg[512];
        memcpy(msg, d->async_msg, sizeof(msg));
        d->async_error = KEEL_STATUS_OK;
        d->async_msg[0] = '\0';
        pthread_mutex_unlock(&d->mu);
        return ze_fail(st, "%s", msg);
    }
    pthread_mutex_unlock(&d->mu);
    return KEEL_STATUS_OK;
}

static keel_status ze_get_device_count(int32_t *count)
{
    if (!count)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "get_device_count: count is NULL");
    probe_once();
    *count = ze_g.ndev;
    if (ze_g.ndev == 0 && ze_g.probe_reason[0])
        ze_fail(KEEL_STATUS_UNAVAILABLE, "%s", ze_g.probe_reason);
    return KEEL_STATUS_OK;
}

static keel_status ze_get_device_props(int32_t device, keel_device_props *out)
{
    keel_device_props p;
    struct ze_device *d;
    uint32_t n;

    if (!out)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "get_device_props: props is NULL");
    if (out->struct_size < sizeof(uint32_t))
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "get_device_props: props->struct_size %u is too small",
                       (unsigned)out->struct_size);
    probe_once();
    if (device < 0 || device >= ze_g.ndev)
        return ze_fail(KEEL_STATUS_INVALID_DEVICE,
                       "get_device_props: device %d does not exist (levelzero "
                       "has %d)",
                       (int)device, (int)ze_g.ndev);
    d = &ze_g.dev[device];
    memset(&p, 0, sizeof(p));
    snprintf(p.name, sizeof(p.name), "%s", d->name);
    snprintf(p.vendor, sizeof(p.vendor), "%s",
             d->props.vendorId == 0x8086 ? "Intel" : "unknown");
    snprintf(p.arch, sizeof(p.arch), "%s", d->arch);
    snprintf(p.driver_version, sizeof(p.driver_version), "%s",
             d->driver_version);
    snprintf(p.bus_id, sizeof(p.bus_id), "%s", d->bus_id);
    p.total_memory = d->total_memory ? d->total_memory : 1;
    n = d->props.numSlices * d->props.numSubslicesPerSlice *
        d->props.numEUsPerSubslice;
    p.compute_units = n ? n : 1;
    p.clock_khz = d->props.coreClockRate > UINT32_MAX / 1000u
                      ? 0
                      : d->props.coreClockRate * 1000u; /* MHz */
    p.dtype_mask = KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_BF16) |
                   KEEL_DTYPE_BIT(KEEL_I8) | KEEL_DTYPE_BIT(KEEL_U8) |
                   KEEL_DTYPE_BIT(KEEL_I32) | KEEL_DTYPE_BIT(KEEL_I64) |
                   KEEL_DTYPE_BIT(KEEL_BOOL);
    if (d->fp64)
        p.dtype_mask |= KEEL_DTYPE_BIT(KEEL_F64);
    if (d->fp16)
        p.dtype_mask |= KEEL_DTYPE_BIT(KEEL_F16);
    p.features = KEEL_FEATURE_ASYNC_COPY | KEEL_FEATURE_PINNED_HOST |
                 KEEL_FEATURE_UNIFIED_MEMORY | KEEL_FEATURE_COLLECTIVES |
                 KEEL_FEATURE_EVENT_TIMING | KEEL_FEATURE_HOST_CALLBACK |
                 KEEL_FEATURE_KERNELS;
    p.alloc_alignment = ZE_ALLOC_ALIGNMENT;
    p.stream_priorities = 1;
    n = out->struct_size < sizeof(p) ? out->struct_size : (uint32_t)sizeof(p);
    p.struct_size = n;
    memcpy(out, &p, n);
    return KEEL_STATUS_OK;
}

static keel_status ze_finalize(void);

static keel_status ze_init(void)
{
    keel_status st = KEEL_STATUS_OK;

    pthread_mutex_lock(&ze_g.init_lock);
    if (atomic_load(&ze_g.initialized))
        goto out;
    probe_once();
    if (ze_g.ndev == 0) {
        st = ze_fail(KEEL_STATUS_UNAVAILABLE, "%s",
                     ze_g.probe_reason[0] ? ze_g.probe_reason
                                          : "no Level Zero GPU");
        goto out;
    }
    atomic_store(&ze_g.initialized, true);
    for (int32_t i = 0; i < ze_g.ndev && !st; i++)
        st = ze_stream_device_init(i);
    if (st) {
        pthread_mutex_unlock(&ze_g.init_lock);
        ze_finalize();
        return st;
    }
out:
    pthread_mutex_unlock(&ze_g.init_lock);
    return st;
}

static keel_status ze_finalize(void)
{
    pthread_mutex_lock(&ze_g.init_lock);
    if (!atomic_load(&ze_g.initialized)) {
        pthread_mutex_unlock(&ze_g.init_lock);
        return KEEL_STATUS_OK;
    }
    ze_collective_finalize();
    ze_stream_finalize(); /* waits for every stream */
    for (int32_t i = 0; i < ze_g.ndev; i++) {
        struct ze_device *d = &ze_g.dev[i];
        ze_kernels_release(i);
        release_retired(d);
        free_deferred(d, true);
    }
    ze_memory_finalize();
    for (int32_t i = 0; i < ze_g.ndev; i++)
        pools_release(&ze_g.dev[i]);
    ze_rs_release(&ze_g.mem);
    ze_rs_release(&ze_g.handles);
    atomic_store(&ze_g.initialized, false);
    pthread_mutex_unlock(&ze_g.init_lock);
    return KEEL_STATUS_OK;
}

static keel_status ze_synchronize(int32_t device)
{
    keel_status st = ze_enter(device, "synchronize");

    if (st)
        return st;
    return ze_device_sync(device, "synchronize");
}

static const keel_device_ops ze_device_ops = {
    .header = KEEL_TABLE_HEADER(keel_device_ops),
    .init = ze_init,
    .finalize = ze_finalize,
    .get_device_count = ze_get_device_count,
    .get_device_props = ze_get_device_props,
    .synchronize = ze_synchronize,
};

/* The contexts are made once per process by the probe and outlive
 * finalize (init may follow again): they go when the library is unloaded,
 * before the Level Zero loader it depends on. */
__attribute__((destructor)) static void ze_unload(void)
{
    if (atomic_load(&ze_g.initialized))
        ze_finalize();
    for (int32_t i = 0; i < ze_g.ndrivers; i++)
        if (ze_g.contexts[i])
            zeContextDestroy(ze_g.contexts[i]);
    ze_g.ndrivers = 0;
}

/* ---- entry point --------------------------------------------------------- */

static const keel_plugin_api ze_plugin_api = {
    .header = KEEL_TABLE_HEADER(keel_plugin_api),
    .name = ZE_PLUGIN_NAME,
    .version = ZE_PLUGIN_VERSION,
    .device_type = ZE_PLUGIN_DEVICE_TYPE,
    .description = ZE_PLUGIN_DESCRIPTION,
    .device = &ze_device_ops,
    .memory = &ze_memory_ops,
    .stream = &ze_stream_ops,
    .kernel = &ze_kernel_ops,
    .collective = &ze_collective_ops,
    .profiler = NULL,
};

KEEL_PLUGIN_EXPORT const keel_plugin_api *
keel_plugin_get_api(uint32_t core_abi_major, uint32_t core_abi_minor,
                    const keel_host_api *host)
{
    ze_g.host = host;
    if (core_abi_major != KEEL_ABI_VERSION_MAJOR) {
        ze_fail(KEEL_STATUS_ABI_MISMATCH,
                "the levelzero plugin implements keel device ABI %d.%d; the "
                "core speaks %" PRIu32 ".%" PRIu32 " (major versions differ)",
                KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, core_abi_major,
                core_abi_minor);
        return NULL;
    }
    return &ze_plugin_api;
}
