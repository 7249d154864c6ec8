/*
 * keel Cambricon MLU plugin — entry point, loading CNRT, status mapping,
 * the object list, the probe and the device group (see mlu_internal.h).
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlu_internal.h"

#define MLU_CNRT_SONAME "libcnrt.so"

struct mlu_state mlu = {
    .once = PTHREAD_ONCE_INIT,
    .init_mu = PTHREAD_MUTEX_INITIALIZER,
    .items_mu = PTHREAD_MUTEX_INITIALIZER,
};

/* ---- messages and status ------------------------------------------------- */

const char *mlu_code_name(cnrtRet_t r)
{
#define MLU_CODE_NAME(name, value) \
    if (r == (value))              \
        return #name;
    MLU_CNRT_CODES(MLU_CODE_NAME)
#undef MLU_CODE_NAME
    return "unknown cnrtRet_t";
}

keel_status mlu_status_of(cnrtRet_t r)
{
    static const struct {
        cnrtRet_t code;
        keel_status st;
    } map[] = {
        {cnrtSuccess, KEEL_STATUS_OK},
        {cnrtErrorNotReady, KEEL_STATUS_NOT_READY},
        {cnrtErrorInit, KEEL_STATUS_NOT_INITIALIZED},
        {cnrtErrorNoCnrtContext, KEEL_STATUS_NOT_INITIALIZED},
        {cnrtErrorNoDevice, KEEL_STATUS_INVALID_DEVICE},
        {cnrtErrorDeviceInvalid, KEEL_STATUS_INVALID_DEVICE},
        {cnrtErrorArgsInvalid, KEEL_STATUS_INVALID_ARGUMENT},
        {cnrtErrorMemcpyDirectionInvalid, KEEL_STATUS_INVALID_ARGUMENT},
        {cnrtErrorNoMem, KEEL_STATUS_OUT_OF_MEMORY},
        {cnrtErrorSysNoMem, KEEL_STATUS_OUT_OF_MEMORY},
        {cnrtErrorInvalidResourceHandle, KEEL_STATUS_INVALID_HANDLE},
        {cnrtErrorDevice, KEEL_STATUS_INVALID_HANDLE},
        {cnrtErrorIllegalState, KEEL_STATUS_INVALID_STATE},
        {cnrtErrorNotSupport, KEEL_STATUS_NOT_SUPPORTED},
        {cnrtErrorNoAttribute, KEEL_STATUS_NOT_SUPPORTED},
    };

    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (map[i].code == r)
            return map[i].st;
    return KEEL_STATUS_DEVICE_ERROR;
}

static keel_status say(keel_status st, const char *text)
{
    if (mlu.host && mlu.host->set_error)
        mlu.host->set_error(st, text);
    return st;
}

keel_status mlu_err(keel_status st, const char *fmt, ...)
{
    char text[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    return say(st, text);
}

/* CNRT's text for a code: cnrtGetErrorStr when the library has it. */
static const char *cnrt_text(cnrtRet_t r)
{
    const char *t = mlu.rt.cnrtGetErrorStr ? mlu.rt.cnrtGetErrorStr(r) : NULL;

    return t ? t : "";
}

/* Clear CNRT's sticky per-thread error after a failure we report. */
static void clear_last(void)
{
    if (mlu.rt.cnrtGetLastError)
        (void)mlu.rt.cnrtGetLastError();
    else if (mlu.rt.cnrtGetLastErr)
        (void)mlu.rt.cnrtGetLastErr();
}

keel_status mlu_cnrt(cnrtRet_t r, bool oom, int32_t dev, const char *fmt, ...)
{
    char what[512], text[1024];
    keel_status st;
    const char *t;
    va_list ap;

    if (r == cnrtSuccess)
        return KEEL_STATUS_OK;
    st = mlu_status_of(r);
    if (oom && (st == KEEL_STATUS_INVALID_ARGUMENT ||
                st == KEEL_STATUS_DEVICE_ERROR))
        st = KEEL_STATUS_OUT_OF_MEMORY;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    t = cnrt_text(r);
    snprintf(text, sizeof(text), "%s on mlu:%d: %s (%d)%s%s", what, (int)dev,
             mlu_code_name(r), (int)r, *t ? ": " : "", t);
    clear_last();
    return say(st, text);
}

const char *mlu_getenv(const char *name)
{
    const keel_host_api *h = mlu.host;
    size_t need = offsetof(keel_host_api, get_env) + sizeof(h->get_env);

    if (h && h->header.struct_size >= need && h->get_env)
        return h->get_env(name);
    return getenv(name);
}

void mlu_note(keel_log_level lvl, const char *fmt, ...)
{
    char text[1024];
    va_list ap;

    if (!mlu.host || !mlu.host->log)
        return;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    mlu.host->log(lvl, text);
}

/* ---- the object list ------------------------------------------------------ */

/* The item holding [p, p + len) of that kind and device (dev < 0: any);
 * under items_mu. prev gets the link pointing at it. */
static struct mlu_item *lookup(uintptr_t p, uint64_t len, int32_t dev,
                               int32_t what, struct mlu_item ***prev)
{
    struct mlu_item **link = &mlu.items;

    if (len == 0)
        len = 1;
    for (; *link; link = &(*link)->next) {
        struct mlu_item *it = *link;
        if (it->what != what || (dev >= 0 && it->dev != dev))
            continue;
        if (p >= it->base && p - it->base < it->len &&
            len <= it->len - (p - it->base)) {
            if (prev)
                *prev = link;
            return it;
        }
    }
    return NULL;
}

bool mlu_track(uintptr_t base, uint64_t len, int32_t dev, int32_t what)
{
    struct mlu_item *it = malloc(sizeof(*it));

    if (!it)
        return false;
    it->base = base;
    it->len = len ? len : 1;
    it->dev = dev;
    it->what = what;
    pthread_mutex_lock(&mlu.items_mu);
    it->next = mlu.items;
    mlu.items = it;
    pthread_mutex_unlock(&mlu.items_mu);
    return true;
}

bool mlu_find(uintptr_t p, uint64_t len, int32_t dev, int32_t what,
              struct mlu_item *out)
{
    struct mlu_item *it;

    pthread_mutex_lock(&mlu.items_mu);
    it = lookup(p, len, dev, what, NULL);
    if (it && out)
        *out = *it;
    pthread_mutex_unlock(&mlu.items_mu);
    return it != NULL;
}

bool mlu_forget(uintptr_t base, int32_t dev, int32_t what,
                struct mlu_item *out)
{
    struct mlu_item *it, **link = NULL;

    pthread_mutex_lock(&mlu.items_mu);
    it = lookup(base, 1, dev, what, &link);
    if (it && it->base == base)
        *link = it->next;
    else
        it = NULL;
    pthread_mutex_unlock(&mlu.items_mu);
    if (!it)
        return false;
    if (out)
        *out = *it;
    free(it);
    return true;
}

bool mlu_take_any(int32_t what, struct mlu_item *out)
{
    struct mlu_item *it = NULL, **link;

    pthread_mutex_lock(&mlu.items_mu);
    for (link = &mlu.items; *link; link = &(*link)->next)
        if ((*link)->what == what) {
            it = *link;
            *link = it->next;
            break;
        }
    pthread_mutex_unlock(&mlu.items_mu);
    if (!it)
        return false;
    *out = *it;
    free(it);
    return true;
}

static void drop_all_items(void)
{
    pthread_mutex_lock(&mlu.items_mu);
    while (mlu.items) {
        struct mlu_item *it = mlu.items;
        mlu.items = it->next;
        free(it);
    }
    pthread_mutex_unlock(&mlu.items_mu);
}

/* ---- loading and probing --------------------------------------------------- */

void *mlu_dlopen(const char *var, const char *soname, const char **path,
                 const char **why)
{
    const char *p = mlu_getenv(var);
    void *h;

    *path = (p && *p) ? p : soname;
    h = dlopen(*path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        *why = e ? e : "dlopen failed";
    }
    return h;
}

static void unusable(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void unusable(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(mlu.why, sizeof(mlu.why), fmt, ap);
    va_end(ap);
    mlu.count = 0;
}

static bool open_cnrt(void)
{
    const char *path, *why, *gap = NULL;
    void *h = mlu_dlopen("KEEL_MLU_CNRT_LIBRARY", MLU_CNRT_SONAME, &path, &why);

    if (!h) {
        unusable("the Cambricon runtime %s could not be loaded (%s); install "
                 "Neuware and put its lib64 on the library path, or set "
                 "KEEL_MLU_CNRT_LIBRARY to the library",
                 MLU_CNRT_SONAME, why);
        return false;
    }
#define MLU_GET_OPT(ret, name, params) *(void **)&mlu.rt.name = dlsym(h, #name);
#define MLU_GET_REQ(ret, name, params)     \
    MLU_GET_OPT(ret, name, params)         \
    if (!mlu.rt.name && !gap)              \
        gap = #name;
    MLU_CNRT_FUNCS(MLU_GET_REQ, MLU_GET_OPT)
#undef MLU_GET_REQ
#undef MLU_GET_OPT
    if (gap) {
        unusable("%s (%s) has no %s: not a CNRT of the 5.x/6.x API",
                 MLU_CNRT_SONAME, path, gap);
        memset(&mlu.rt, 0, sizeof(mlu.rt));
        dlclose(h);
        return false;
    }
    mlu.rt.lib = h;
    return true;
}

static int attr(int ordinal, cnrtDeviceAttr_t a)
{
    int v = 0;

    if (!mlu.rt.cnrtDeviceGetAttribute ||
        mlu.rt.cnrtDeviceGetAttribute(&v, a, ordinal) != cnrtSuccess) {
        clear_last();
        return 0;
    }
    return v;
}

static bool describe_device(int32_t i, int ordinal)
{
    struct mlu_dev *d = &mlu.dev[i];
    size_t fr = 0, total = 0;
    int clusters, per, mb;
    cnrtRet_t r;

    d->ordinal = ordinal;
    pthread_mutex_init(&d->cnnl_mu, NULL);
    r = mlu.rt.cnrtSetDevice(ordinal);
    if (r != cnrtSuccess) {
        unusable("%s cnrtSetDevice(%d): %s (%d)", MLU_CNRT_SONAME, ordinal,
                 mlu_code_name(r), (int)r);
        clear_last();
        return false;
    }
    clusters = attr(ordinal, cnrtAttrClusterCount);
    per = attr(ordinal, cnrtAttrMcorePerCluster);
    d->cores = clusters > 0 && per > 0 ? (uint32_t)(clusters * per) : 1;
    d->clock_khz = (uint32_t)(attr(ordinal, cnrtAttrIpuClockRate) > 0
                                  ? attr(ordinal, cnrtAttrIpuClockRate)
                                  : 0);
    if (mlu.rt.cnrtMemGetInfo(&fr, &total) == cnrtSuccess && total)
        d->mem_bytes = total;
    else if ((mb = attr(ordinal, cnrtAttrTotalMemSize)) > 0)
        d->mem_bytes = (uint64_t)mb << 20;
    return true;
}

static void probe(void)
{
    unsigned int n = 0;
    cnrtRet_t r;
    const char *vis = getenv("MLU_VISIBLE_DEVICES");

    if (!open_cnrt())
        return;
    r = mlu.rt.cnrtGetDeviceCount(&n);
    if (r == cnrtErrorNoDevice || (r == cnrtSuccess && n == 0)) {
        unusable("%s found no Cambricon MLU device (cnrtGetDeviceCount: %s; "
                 "MLU_VISIBLE_DEVICES=%s)",
                 MLU_CNRT_SONAME, r == cnrtSuccess ? "0" : mlu_code_name(r),
                 vis ? vis : "(unset)");
        clear_last();
        return;
    }
    if (r != cnrtSuccess) {
        unusable("%s cnrtGetDeviceCount: %s (%d)%s%s", MLU_CNRT_SONAME,
                 mlu_code_name(r), (int)r, *cnrt_text(r) ? ": " : "",
                 cnrt_text(r));
        clear_last();
        return;
    }
    if (n > MLU_MAX_DEVICES) {
        mlu_note(KEEL_LOG_WARN, "mlu: %u devices, the plugin uses %d",
                 n, MLU_MAX_DEVICES);
        n = MLU_MAX_DEVICES;
    }
    mlu.count = (int32_t)n; /* before any restriction: set_visible_devices */
}

static void probe_once(void)
{
    pthread_once(&mlu.once, probe);
}

/* The devices as keel numbers them, described (first init). */
static bool describe_all(void)
{
    int32_t n = mlu.nvisible ? mlu.nvisible : mlu.count;

    for (int32_t i = 0; i < n; i++)
        if (!describe_device(i, mlu.nvisible ? mlu.visible[i] : i))
            return false;
    mlu.count = n;
    return true;
}

/* ---- the device group ------------------------------------------------------ */

keel_status mlu_bind(int32_t dev)
{
    return MLU_RT(mlu.rt.cnrtSetDevice(mlu.dev[dev].ordinal), dev,
                  "cnrtSetDevice(%d)", mlu.dev[dev].ordinal);
}

keel_status mlu_enter(int32_t dev, const char *call)
{
    if (!atomic_load(&mlu.up))
        return mlu_err(KEEL_STATUS_NOT_INITIALIZED,
                       "%s: the mlu plugin is not initialised", call);
    if (dev < 0 || dev >= mlu.count)
        return mlu_err(KEEL_STATUS_INVALID_DEVICE,
                       "%s: no device %d (mlu has %d)", call, (int)dev,
                       (int)mlu.count);
    return mlu_bind(dev);
}

static keel_status mlu_get_device_count(int32_t *count)
{
    if (!count)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "get_device_count: count is NULL");
    probe_once();
    *count = mlu.nvisible ? mlu.nvisible : mlu.count;
    if (*count == 0)
        mlu_err(KEEL_STATUS_UNAVAILABLE, "%s", mlu.why);
    return KEEL_STATUS_OK;
}

static bool described; /* describe_all ran: numbering fixed */

static keel_status mlu_set_visible_devices(const int32_t *devices,
                                           int32_t count)
{
    keel_status st = KEEL_STATUS_OK;

    probe_once();
    pthread_mutex_lock(&mlu.init_mu);
    if (atomic_load(&mlu.up) || mlu.nvisible || described) {
        st = mlu_err(KEEL_STATUS_INVALID_STATE,
                     "set_visible_devices: too late (after init or "
                     "get_device_props, or set already)");
        goto out;
    }
    if (!devices || count < 1 || count > mlu.count) {
        st = mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                     "set_visible_devices: %d devices of %d", (int)count,
                     (int)mlu.count);
        goto out;
    }
    for (int32_t i = 0; i < count && !st; i++) {
        if (devices[i] < 0 || devices[i] >= mlu.count)
            st = mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                         "set_visible_devices: no device %d (mlu has %d)",
                         (int)devices[i], (int)mlu.count);
        for (int32_t j = 0; j < i && !st; j++)
            if (devices[j] == devices[i])
                st = mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                             "set_visible_devices: %d listed twice",
                             (int)devices[i]);
    }
    if (!st) {
        memcpy(mlu.visible, devices, (size_t)count * sizeof(*devices));
        mlu.nvisible = count;
    }
out:
    pthread_mutex_unlock(&mlu.init_mu);
    return st;
}

static keel_status mlu_get_device_props(int32_t device, keel_device_props *out)
{
    keel_device_props p;
    int32_t n;
    uint32_t size;

    if (!out || out->struct_size < sizeof(uint32_t))
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "get_device_props: props NULL or struct_size too small");
    probe_once();
    n = mlu.nvisible ? mlu.nvisible : mlu.count;
    if (device < 0 || device >= n)
        return mlu_err(KEEL_STATUS_INVALID_DEVICE,
                       "get_device_props: no device %d (mlu has %d)",
                       (int)device, (int)n);
    pthread_mutex_lock(&mlu.init_mu);
    if (!described)
        described = describe_all();
    pthread_mutex_unlock(&mlu.init_mu);
    memset(&p, 0, sizeof(p));
    snprintf(p.name, sizeof(p.name), "Cambricon MLU (cnrt device %d)",
             mlu.dev[device].ordinal);
    snprintf(p.vendor, sizeof(p.vendor), "Cambricon");
    snprintf(p.arch, sizeof(p.arch), "mlu");
    p.total_memory = mlu.dev[device].mem_bytes ? mlu.dev[device].mem_bytes : 1;
    p.compute_units = mlu.dev[device].cores ? mlu.dev[device].cores : 1;
    p.clock_khz = mlu.dev[device].clock_khz;
    /* Copies and the collectives carry every dtype; the kernels take
     * fewer and answer NOT_FOUND for the rest (mlu_kernels.c). */
    p.dtype_mask = (1u << KEEL_DTYPE_COUNT_) - 1u;
    p.features = KEEL_FEATURE_ASYNC_COPY | KEEL_FEATURE_PINNED_HOST |
                 KEEL_FEATURE_KERNELS | KEEL_FEATURE_COLLECTIVES;
    if (mlu.rt.cnrtNotifierElapsedTime || mlu.rt.cnrtNotifierDuration)
        p.features |= KEEL_FEATURE_EVENT_TIMING;
    if (mlu.rt.cnrtInvokeHostFunc)
        p.features |= KEEL_FEATURE_HOST_CALLBACK;
    p.alloc_alignment = MLU_ALLOC_ALIGNMENT;
    p.stream_priorities = 1;
    size = out->struct_size < sizeof(p) ? out->struct_size : (uint32_t)sizeof(p);
    p.struct_size = size;
    memcpy(out, &p, size);
    return KEEL_STATUS_OK;
}

static keel_status mlu_finalize(void);

static keel_status mlu_init(void)
{
    keel_status st = KEEL_STATUS_OK;

    probe_once();
    pthread_mutex_lock(&mlu.init_mu);
    if (atomic_load(&mlu.up))
        goto out;
    if (mlu.count == 0) {
        st = mlu_err(KEEL_STATUS_UNAVAILABLE, "%s", mlu.why);
        goto out;
    }
    if (!described)
        described = describe_all();
    if (!described) {
        st = mlu_err(KEEL_STATUS_DEVICE_ERROR, "init: %s", mlu.why);
        goto out;
    }
    if (!mlu.nn.lib && !mlu.nn_why[0])
        mlu_kernels_open();
    atomic_store(&mlu.up, true);
    for (int32_t i = 0; i < mlu.count && !st; i++) {
        st = mlu_bind(i);
        if (!st)
            st = mlu_queue_default(i);
    }
out:
    pthread_mutex_unlock(&mlu.init_mu);
    if (st && atomic_load(&mlu.up))
        mlu_finalize();
    return st;
}

static keel_status mlu_finalize(void)
{
    pthread_mutex_lock(&mlu.init_mu);
    if (atomic_load(&mlu.up)) {
        mlu_collective_finalize();
        mlu_kernels_release();
        mlu_queue_finalize();
        mlu_memory_finalize();
        drop_all_items();
        for (int32_t i = 0; i < mlu.count; i++)
            atomic_store(&mlu.dev[i].in_use, 0);
        atomic_store(&mlu.up, false);
    }
    pthread_mutex_unlock(&mlu.init_mu);
    return KEEL_STATUS_OK;
}

static keel_status mlu_synchronize(int32_t device)
{
    keel_status st = mlu_enter(device, "synchronize");

    return st ? st : MLU_RT(mlu.rt.cnrtSyncDevice(), device, "cnrtSyncDevice");
}

static const keel_device_ops mlu_device_ops = {
    .header = KEEL_TABLE_HEADER(keel_device_ops),
    .init = mlu_init,
    .finalize = mlu_finalize,
    .get_device_count = mlu_get_device_count,
    .get_device_props = mlu_get_device_props,
    .synchronize = mlu_synchronize,
    .set_visible_devices = mlu_set_visible_devices,
};

__attribute__((destructor)) static void mlu_unload(void)
{
    if (!mlu.rt.lib)
        return;
    mlu_finalize();
    mlu_kernels_close();
    mlu_collective_unload();
    dlclose(mlu.rt.lib);
    memset(&mlu.rt, 0, sizeof(mlu.rt));
}

static const keel_plugin_api mlu_api = {
    .header = KEEL_TABLE_HEADER(keel_plugin_api),
    .name = "mlu",
    .version = "0.1.0",
    .device_type = "mlu",
    .description = "Cambricon MLUs on CNRT and CNNL (loaded at run time)",
    .device = &mlu_device_ops,
    .memory = &mlu_memory_ops,
    .stream = &mlu_stream_ops,
    .kernel = &mlu_kernel_ops,
    .collective = &mlu_coll_ops,
    .profiler = NULL,
};

KEEL_PLUGIN_EXPORT const keel_plugin_api *
keel_plugin_get_api(uint32_t core_abi_major, uint32_t core_abi_minor,
                    const keel_host_api *host)
{
    mlu.host = host;
    if (core_abi_major == KEEL_ABI_VERSION_MAJOR)
        return &mlu_api;
    mlu_err(KEEL_STATUS_ABI_MISMATCH,
            "the mlu plugin speaks keel device ABI %d.%d, the core %" PRIu32
            ".%" PRIu32,
            KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, core_abi_major,
            core_abi_minor);
    return NULL;
}
