/*
 * keel Ascend NPU plugin — entry point, loading ACL, errors, registries,
 * probe and the device group (see npu_internal.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* tdestroy */
#endif
#include <dlfcn.h>
#include <inttypes.h>
#include <search.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npu_internal.h"

#define NPU_PLUGIN_VERSION "0.1.0"
#define NPU_PLUGIN_DESCRIPTION \
    "Huawei Ascend NPUs on AscendCL and aclnn (loaded at run time)"
#define NPU_ACL_SONAME "libascendcl.so"

struct npu_state npu_g = {
    .probe_once = PTHREAD_ONCE_INIT,
    .init_lock = PTHREAD_MUTEX_INITIALIZER,
    .mem = {.lock = PTHREAD_MUTEX_INITIALIZER},
    .handles = {.lock = PTHREAD_MUTEX_INITIALIZER},
};

/* ---- errors --------------------------------------------------------------- */

const char *npu_acl_name(aclError e)
{
    switch (e) {
#define NPU_ACL_ERROR_CASE(name, value) case name: return #name;
    NPU_ACL_ERRORS(NPU_ACL_ERROR_CASE)
#undef NPU_ACL_ERROR_CASE
    default:
        return "ACL error";
    }
}

keel_status npu_status_of(aclError e)
{
    switch (e) {
    case ACL_SUCCESS:
        return KEEL_STATUS_OK;
    case ACL_ERROR_INVALID_PARAM:
    case ACL_ERROR_MEMORY_ADDRESS_UNALIGNED:
        return KEEL_STATUS_INVALID_ARGUMENT;
    case ACL_ERROR_UNINITIALIZE:
        return KEEL_STATUS_NOT_INITIALIZED;
    case ACL_ERROR_BAD_ALLOC:
    case ACL_ERROR_STORAGE_OVER_LIMIT:
        return KEEL_STATUS_OUT_OF_MEMORY;
    case ACL_ERROR_API_NOT_SUPPORT:
    case ACL_ERROR_FEATURE_UNSUPPORTED:
        return KEEL_STATUS_NOT_SUPPORTED;
    case ACL_ERROR_INVALID_DEVICE:
        return KEEL_STATUS_INVALID_DEVICE;
    case ACL_ERROR_INVALID_RESOURCE_HANDLE:
    case ACL_ERROR_RESOURCE_NOT_MATCH:
        return KEEL_STATUS_INVALID_HANDLE;
    case ACL_ERROR_WAIT_CALLBACK_TIMEOUT:
        return KEEL_STATUS_TIMEOUT;
    default:
        return KEEL_STATUS_DEVICE_ERROR;
    }
}

static void report(keel_status st, const char *fmt, va_list ap)
{
    char msg[1024];

    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (npu_g.host && npu_g.host->set_error)
        npu_g.host->set_error(st, msg);
}

keel_status npu_fail(keel_status st, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    report(st, fmt, ap);
    va_end(ap);
    return st;
}

/* ACL's own explanation of the last failure on this thread, or "". */
static const char *recent_msg(void)
{
    const char *m = ACL.aclGetRecentErrMsg ? ACL.aclGetRecentErrMsg() : NULL;

    return m ? m : "";
}

static keel_status vcheck(aclError e, bool alloc, int32_t device,
                          const char *fmt, va_list ap)
{
    char what[512];
    const char *detail = recent_msg();
    keel_status st = npu_status_of(e);

    vsnprintf(what, sizeof(what), fmt, ap);
    /* An allocation refused for any reason but a bad device or state is,
     * to the caller, memory it cannot have. */
    if (alloc && (st == KEEL_STATUS_DEVICE_ERROR ||
                  st == KEEL_STATUS_INVALID_ARGUMENT))
        st = KEEL_STATUS_OUT_OF_MEMORY;
    return npu_fail(st, "%s on npu:%d: %s (%d)%s%s", what, (int)device,
                    npu_acl_name(e), e, detail[0] ? ": " : "", detail);
}

keel_status npu_check_as(aclError e, bool alloc, int32_t device,
                         const char *fmt, ...)
{
    keel_status st;
    va_list ap;

    if (e == ACL_SUCCESS)
        return KEEL_STATUS_OK;
    va_start(ap, fmt);
    st = vcheck(e, alloc, device, fmt, ap);
    va_end(ap);
    return st;
}

void npu_log(keel_log_level level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    if (!npu_g.host || !npu_g.host->log)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    npu_g.host->log(level, msg);
}

const char *npu_env(const char *name)
{
    const keel_host_api *h = npu_g.host;

    if (h && h->header.struct_size >=
                 offsetof(keel_host_api, get_env) + sizeof(h->get_env) &&
        h->get_env)
        return h->get_env(name);
    return getenv(name);
}

/* ---- registries ------------------------------------------------------------ */

/* Two objects compare equal when their ranges overlap: the tree holds
 * disjoint ranges, so a one-byte key finds the range around it. */
static int obj_cmp(const void *a, const void *b)
{
    const struct npu_obj *x = a, *y = b;

    if (x->base + x->size <= y->base)
        return -1;
    if (y->base + y->size <= x->base)
        return 1;
    return 0;
}

int npu_reg_put(struct npu_reg *r, const struct npu_obj *o)
{
    struct npu_obj *n = malloc(sizeof(*n));
    void *slot;

    if (!n)
        return -1;
    *n = *o;
    if (!n->size)
        n->size = 1;
    bool mine;

    pthread_mutex_lock(&r->lock);
    slot = tsearch(n, &r->root, obj_cmp);
    /* read the node under the lock: another thread's tdelete frees it */
    mine = slot && *(struct npu_obj **)slot == n;
    pthread_mutex_unlock(&r->lock);
    if (!mine) {
        free(n); /* no memory, or an overlap (a driver bug) */
        return -1;
    }
    return 0;
}

static struct npu_obj *lookup(struct npu_reg *r, uintptr_t p)
{
    struct npu_obj key = {.base = p, .size = 1};
    void *slot = tfind(&key, &r->root, obj_cmp);

    return slot ? *(struct npu_obj **)slot : NULL;
}

bool npu_reg_get(struct npu_reg *r, uintptr_t p, uint64_t size,
                 int32_t device, int32_t kind, struct npu_obj *out)
{
    struct npu_obj *o;
    bool ok = false;

    if (!size)
        size = 1;
    pthread_mutex_lock(&r->lock);
    o = lookup(r, p);
    if (o && o->kind == kind && (device < 0 || o->device == device) &&
        size <= o->size - (uint64_t)(p - o->base)) {
        ok = true;
        if (out)
            *out = *o;
    }
    pthread_mutex_unlock(&r->lock);
    return ok;
}

bool npu_reg_drop(struct npu_reg *r, uintptr_t base, int32_t device,
                  int32_t kind, struct npu_obj *out)
{
    struct npu_obj *o;
    bool ok = false;

    pthread_mutex_lock(&r->lock);
    o = lookup(r, base);
    if (o && o->base == base && o->kind == kind && o->device == device) {
        tdelete(o, &r->root, obj_cmp);
        if (out)
            *out = *o;
        free(o);
        ok = true;
    }
    pthread_mutex_unlock(&r->lock);
    return ok;
}

/* twalk has no user argument: the search below runs under the lock. */
static _Thread_local int32_t pop_kind;
static _Thread_local struct npu_obj *pop_hit;

static void pop_visit(const void *node, VISIT v, int depth)
{
    struct npu_obj *o = *(struct npu_obj *const *)node;

    (void)depth;
    if (!pop_hit && (v == postorder || v == leaf) && o->kind == pop_kind)
        pop_hit = o;
}

bool npu_reg_pop(struct npu_reg *r, int32_t kind, struct npu_obj *out)
{
    bool ok = false;

    pthread_mutex_lock(&r->lock);
    pop_kind = kind;
    pop_hit = NULL;
    twalk(r->root, pop_visit);
    if (pop_hit) {
        if (out)
            *out = *pop_hit;
        tdelete(pop_hit, &r->root, obj_cmp);
        free(pop_hit);
        ok = true;
    }
    pthread_mutex_unlock(&r->lock);
    return ok;
}

static void reg_clear(struct npu_reg *r)
{
    pthread_mutex_lock(&r->lock);
    tdestroy(r->root, free);
    r->root = NULL;
    pthread_mutex_unlock(&r->lock);
}

/* ---- loading ACL and the probe --------------------------------------------- */

static void no_devices(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void no_devices(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(npu_g.reason, sizeof(npu_g.reason), fmt, ap);
    va_end(ap);
    npu_g.ndev = 0;
}

void *npu_open(const char *var, const char *soname, const char **path,
               const char **why)
{
    const char *p = npu_env(var);
    void *h;

    if (!p || !p[0])
        p = soname;
    *path = p;
    h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        *why = dlerror();
        if (!*why)
            *why = "dlopen failed";
    }
    return h;
}

static bool load_acl(void)
{
    const char *missing = NULL, *path, *why;
    void *h = npu_open("KEEL_NPU_ACL_LIBRARY", NPU_ACL_SONAME, &path, &why);

    if (!h) {
        no_devices("the AscendCL runtime %s could not be loaded (%s); install "
                   "the CANN toolkit and source its set_env.sh, or set "
                   "KEEL_NPU_ACL_LIBRARY to the library",
                   NPU_ACL_SONAME, why);
        return false;
    }
#define NPU_ACL_RESOLVE(ret, name, params) \
    *(void **)&ACL.name = dlsym(h, #name);
#define NPU_ACL_RESOLVE_REQUIRED(ret, name, params) \
    NPU_ACL_RESOLVE(ret, name, params)              \
    if (!ACL.name && !missing)                      \
        missing = #name;
    NPU_ACL_FUNCS(NPU_ACL_RESOLVE_REQUIRED, NPU_ACL_RESOLVE)
#undef NPU_ACL_RESOLVE_REQUIRED
#undef NPU_ACL_RESOLVE
    if (missing) {
        no_devices("%s (%s) lacks %s: a CANN runtime too old or not "
                   "AscendCL",
                   NPU_ACL_SONAME, path, missing);
        memset(&ACL, 0, sizeof(ACL));
        dlclose(h);
        return false;
    }
    ACL.lib = h;
    npu_g.callbacks = ACL.aclrtSubscribeReport && ACL.aclrtUnSubscribeReport &&
                      ACL.aclrtLaunchCallback && ACL.aclrtProcessReport;
    return true;
}

/* aclError as the reason's tail: "ACL_ERROR_X (code): message". */
static void reason_acl(const char *call, aclError e)
{
    const char *m = recent_msg();

    no_devices("%s %s: %s (%d)%s%s", NPU_ACL_SONAME, call, npu_acl_name(e),
               e, m[0] ? ": " : "", m);
}

static void probe_device(int32_t i)
{
    struct npu_device *d = &npu_g.dev[i];
    size_t fr = 0, total = 0;
    int64_t cores = 0;

    d->ai_cores = 1;
    if (ACL.aclGetDeviceCapability &&
        ACL.aclGetDeviceCapability((uint32_t)d->acl_id,
                                   ACL_DEVICE_INFO_AI_CORE_NUM,
                                   &cores) == ACL_SUCCESS &&
        cores > 0 && cores <= INT32_MAX)
        d->ai_cores = (uint32_t)cores;
    /* HBM on the training parts, DDR on the inference ones. */
    if (ACL.aclrtGetMemInfo(ACL_HBM_MEM, &fr, &total) != ACL_SUCCESS ||
        total == 0) {
        total = 0;
        if (ACL.aclrtGetMemInfo(ACL_DDR_MEM, &fr, &total) != ACL_SUCCESS)
            total = 0;
    }
    d->total_memory = total;
}

static void probe(void)
{
    uint32_t n = 0;
    aclError e;
    int32_t ok = 0;

    if (!load_acl())
        return;
    e = ACL.aclInit(NULL);
    if (e == ACL_SUCCESS)
        npu_g.acl_owned = true;
    else if (e != ACL_ERROR_REPEAT_INITIALIZE) {
        reason_acl("aclInit", e);
        return;
    }
    e = ACL.aclrtGetDeviceCount(&n);
    if (e != ACL_SUCCESS) {
        reason_acl("aclrtGetDeviceCount", e);
        return;
    }
    if (n == 0) {
        no_devices("%s found no Ascend device (aclrtGetDeviceCount: 0; "
                   "ASCEND_RT_VISIBLE_DEVICES=%s)",
                   NPU_ACL_SONAME,
                   getenv("ASCEND_RT_VISIBLE_DEVICES")
                       ? getenv("ASCEND_RT_VISIBLE_DEVICES")
                       : "(unset)");
        return;
    }
    /* A visible-device list names ACL ids, each of which must exist. */
    for (int32_t i = 0; i < npu_g.nvisible; i++)
        if ((uint32_t)npu_g.visible[i] >= n) {
            no_devices("set_visible_devices (KEEL_VISIBLE_DEVICES) names "
                       "ACL device %d, but %s shows %u device%s",
                       (int)npu_g.visible[i], NPU_ACL_SONAME, (unsigned)n,
                       n == 1 ? "" : "s");
            return;
        }
    if (npu_g.nvisible)
        n = (uint32_t)npu_g.nvisible;
    if (n > NPU_MAX_DEVICES) {
        npu_log(KEEL_LOG_WARN, "npu: %u devices, only the first %d are used",
                (unsigned)n, NPU_MAX_DEVICES);
        n = NPU_MAX_DEVICES;
    }
    for (uint32_t i = 0; i < n; i++) {
        struct npu_device *d = &npu_g.dev[ok];

        d->acl_id = npu_g.nvisible ? npu_g.visible[i] : (int32_t)i;
        e = ACL.aclrtSetDevice(d->acl_id);
        if (e == ACL_SUCCESS)
            e = ACL.aclrtGetCurrentContext(&d->ctx);
        if (e != ACL_SUCCESS) {
            reason_acl("aclrtSetDevice", e);
            npu_log(KEEL_LOG_WARN, "npu: ACL device %d is not used: %s",
                    (int)d->acl_id, npu_g.reason);
            break; /* keep indices equal to ACL's */
        }
        probe_device(ok);
        ok++;
    }
    if (ACL.aclrtGetSocName && ok > 0) {
        const char *s = ACL.aclrtGetSocName();
        snprintf(npu_g.soc, sizeof(npu_g.soc), "%s", s ? s : "");
    }
    npu_g.ndev = ok;
    if (ok > 0)
        npu_kernels_load();
}

static void probe_start(void)
{
    atomic_store(&npu_g.probed, true);
    probe();
}

static void probe_once(void)
{
    pthread_once(&npu_g.probe_once, probe_start);
}

/* ---- the device group ------------------------------------------------------ */

keel_status npu_use(int32_t device)
{
    return npu_check(ACL.aclrtSetCurrentContext(npu_g.dev[device].ctx),
                     device, "aclrtSetCurrentContext");
}

keel_status npu_enter(int32_t device, const char *call)
{
    if (!atomic_load(&npu_g.initialized))
        return npu_fail(KEEL_STATUS_NOT_INITIALIZED,
                        "%s: the npu plugin is not initialised", call);
    if (device < 0 || device >= npu_g.ndev)
        return npu_fail(KEEL_STATUS_INVALID_DEVICE,
                        "%s: device %d does not exist (npu has %d)", call,
                        (int)device, (int)npu_g.ndev);
    return npu_use(device);
}

static keel_status npu_get_device_count(int32_t *count)
{
    if (!count)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "get_device_count: count is NULL");
    probe_once();
    *count = npu_g.ndev;
    if (npu_g.ndev == 0)
        npu_fail(KEEL_STATUS_UNAVAILABLE, "%s", npu_g.reason);
    return KEEL_STATUS_OK;
}

keel_status npu_device_count(int32_t *count)
{
    return npu_get_device_count(count);
}

static keel_status npu_get_device_props(int32_t device, keel_device_props *out)
{
    keel_device_props p;
    struct npu_device *d;
    uint32_t n;

    if (!out)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "get_device_props: props is NULL");
    if (out->struct_size < sizeof(uint32_t))
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "get_device_props: props->struct_size %u is too small",
                        (unsigned)out->struct_size);
    probe_once();
    if (device < 0 || device >= npu_g.ndev)
        return npu_fail(KEEL_STATUS_INVALID_DEVICE,
                        "get_device_props: device %d does not exist (npu has "
                        "%d)",
                        (int)device, (int)npu_g.ndev);
    d = &npu_g.dev[device];
    memset(&p, 0, sizeof(p));
    snprintf(p.name, sizeof(p.name), "%s",
             npu_g.soc[0] ? npu_g.soc : "Ascend NPU");
    snprintf(p.vendor, sizeof(p.vendor), "Huawei");
    snprintf(p.arch, sizeof(p.arch), "%.31s",
             npu_g.soc[0] ? npu_g.soc : "ascend");
    /* which ACL device this index is (set_visible_devices maps them) */
    snprintf(p.bus_id, sizeof(p.bus_id), "acl:%d", (int)d->acl_id);
    p.total_memory = d->total_memory ? d->total_memory : 1;
    p.compute_units = d->ai_cores;
    p.clock_khz = 0;
    /* What the aclnn kernels take (npu_kernels.c); copies carry any. */
    p.dtype_mask = NPU_DEVICE_DTYPES;
    /* KERNELS: the group is there; without libopapi.so its lookup finds
     * nothing and the core falls back. */
    p.features = KEEL_FEATURE_ASYNC_COPY | KEEL_FEATURE_PINNED_HOST |
                 KEEL_FEATURE_KERNELS | KEEL_FEATURE_COLLECTIVES;
    if (ACL.aclrtEventElapsedTime)
        p.features |= KEEL_FEATURE_EVENT_TIMING;
    if (npu_g.callbacks)
        p.features |= KEEL_FEATURE_HOST_CALLBACK;
    p.alloc_alignment = NPU_ALLOC_ALIGNMENT;
    p.stream_priorities = 1; /* aclrtCreateStreamWithConfig: priority reserved */
    n = out->struct_size < sizeof(p) ? out->struct_size : (uint32_t)sizeof(p);
    p.struct_size = n;
    memcpy(out, &p, n);
    return KEEL_STATUS_OK;
}

static keel_status npu_finalize(void);

static keel_status npu_init(void)
{
    keel_status st = KEEL_STATUS_OK;

    pthread_mutex_lock(&npu_g.init_lock);
    if (atomic_load(&npu_g.initialized)) {
        pthread_mutex_unlock(&npu_g.init_lock);
        return KEEL_STATUS_OK;
    }
    probe_once();
    if (npu_g.ndev == 0) {
        pthread_mutex_unlock(&npu_g.init_lock);
        return npu_fail(KEEL_STATUS_UNAVAILABLE, "%s", npu_g.reason);
    }
    atomic_store(&npu_g.initialized, true);
    for (int32_t i = 0; i < npu_g.ndev && st == KEEL_STATUS_OK; i++) {
        st = npu_use(i);
        if (st == KEEL_STATUS_OK)
            st = npu_stream_device_init(i);
    }
    pthread_mutex_unlock(&npu_g.init_lock);
    if (st != KEEL_STATUS_OK)
        npu_finalize();
    return st;
}

static keel_status npu_finalize(void)
{
    pthread_mutex_lock(&npu_g.init_lock);
    if (atomic_load(&npu_g.initialized)) {
        npu_hostcoll_finalize();
        npu_collective_finalize(); /* before the streams go */
        npu_stream_finalize(); /* waits for every stream */
        npu_memory_finalize();
        reg_clear(&npu_g.mem);
        reg_clear(&npu_g.handles);
        for (int32_t i = 0; i < npu_g.ndev; i++)
            atomic_store(&npu_g.used[i], 0);
        atomic_store(&npu_g.initialized, false);
    }
    pthread_mutex_unlock(&npu_g.init_lock);
    return KEEL_STATUS_OK;
}

static keel_status npu_synchronize(int32_t device)
{
    keel_status st = npu_enter(device, "synchronize");

    if (st)
        return st;
    return npu_device_sync(device, "synchronize");
}

/* Before the probe only (it is what sets devices): the loader calls it
 * before anything else. Ids are ACL's; the probe checks that they exist. */
static keel_status npu_set_visible_devices(const int32_t *devices,
                                           int32_t count)
{
    if (atomic_load(&npu_g.probed))
        return npu_fail(KEEL_STATUS_INVALID_STATE,
                        "set_visible_devices: the plugin has probed its "
                        "devices already (after get_device_count, "
                        "get_device_props or init)");
    if (!devices || count < 1 || count > NPU_MAX_DEVICES)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "set_visible_devices: %d devices (1 to %d, list not "
                        "NULL)", (int)count, NPU_MAX_DEVICES);
    for (int32_t i = 0; i < count; i++) {
        if (devices[i] < 0)
            return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                            "set_visible_devices: device %d is negative",
                            (int)devices[i]);
        for (int32_t j = 0; j < i; j++)
            if (devices[j] == devices[i])
                return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                                "set_visible_devices: device %d is listed "
                                "twice", (int)devices[i]);
    }
    memcpy(npu_g.visible, devices, (size_t)count * sizeof(*devices));
    npu_g.nvisible = count;
    return KEEL_STATUS_OK;
}

static const keel_device_ops npu_device_ops = {
    .header = KEEL_TABLE_HEADER(keel_device_ops),
    .init = npu_init,
    .finalize = npu_finalize,
    .get_device_count = npu_get_device_count,
    .get_device_props = npu_get_device_props,
    .synchronize = npu_synchronize,
    .set_visible_devices = npu_set_visible_devices,
};

/* ACL is initialised once per process (see npu_internal.h): released when
 * the plugin is unloaded, before the library it came from. */
__attribute__((destructor)) static void npu_unload(void)
{
    if (!ACL.lib)
        return;
    npu_finalize();
    for (int32_t i = 0; i < npu_g.ndev; i++)
        ACL.aclrtResetDevice(npu_g.dev[i].acl_id);
    npu_kernels_unload();
    npu_collective_unload();
    if (npu_g.acl_owned)
        ACL.aclFinalize();
    dlclose(ACL.lib);
    memset(&ACL, 0, sizeof(ACL));
}

/* ---- entry point -------------------------------------------------------------- */

static const keel_plugin_api npu_plugin_api = {
    .header = KEEL_TABLE_HEADER(keel_plugin_api),
    .name = NPU_PLUGIN_NAME,
    .version = NPU_PLUGIN_VERSION,
    .device_type = "npu",
    .description = NPU_PLUGIN_DESCRIPTION,
    .device = &npu_device_ops,
    .memory = &npu_memory_ops,
    .stream = &npu_stream_ops,
    .kernel = &npu_kernel_ops,
    .collective = &npu_collective_ops,
    .profiler = NULL,
};

KEEL_PLUGIN_EXPORT const keel_plugin_api *
keel_plugin_get_api(uint32_t core_abi_major, uint32_t core_abi_minor,
                    const keel_host_api *host)
{
    npu_g.host = host;
    if (core_abi_major != KEEL_ABI_VERSION_MAJOR) {
        npu_fail(KEEL_STATUS_ABI_MISMATCH,
                 "the npu plugin implements keel device ABI %d.%d; the core "
                 "speaks %" PRIu32 ".%" PRIu32,
                 KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
                 core_abi_major, core_abi_minor);
        return NULL;
    }
    return &npu_plugin_api;
}
