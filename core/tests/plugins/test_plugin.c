/*
 * A small host-memory plugin used by the loader tests. One source, compiled
 * many times with different TP_* macros, gives the good and the broken
 * plugins the loader must tell apart:
 *
 *   TP_NAME, TP_TYPE     identity (strings)
 *   TP_DEVICES           device count (default 1)
 *   TP_MAJOR, TP_MINOR   ABI version claimed in every table header
 *   TP_NO_ENTRY          do not export the entry symbol
 *   TP_GET_API_NULL      the entry refuses (returns NULL with a message)
 *   TP_SMALL_API         plugin_api struct_size ends before `profiler`
 *   TP_SMALL_MEMORY      memory struct_size ends before `copy_peer_async`
 *   TP_BIG_TABLES        tables carry extra members past this ABI's end
 *   TP_NULL_D2H          memory.copy_d2h is NULL
 *   TP_INIT_FAILS        init returns DEVICE_ERROR
 *   TP_NO_DRIVER         init returns UNAVAILABLE
 *   TP_UNRESOLVED        references a symbol no library defines
 *   TP_NO_HOST_ALLOC     no pinned host memory
 *   TP_MEM_LIMIT         bytes per allocation before OUT_OF_MEMORY
 *   TP_REENTER           init calls back into libkeel (keel_plugin_count,
 *                        keel_device_count, keel_init) and reports, as its
 *                        init failure, what those calls returned
 *   TP_WORKSPACE         a kernel group with one kernel, add (float32),
 *                        that computes through two workspaces (ABI 1.3)
 *                        and checks what the core's workspace call does
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/device_api.h>

#ifdef TP_REENTER
#include <dlfcn.h>
#endif

#ifndef TP_NAME
#define TP_NAME "alpha"
#endif
#ifndef TP_TYPE
#define TP_TYPE "testdev"
#endif
#ifndef TP_DEVICES
#define TP_DEVICES 1
#endif
#ifndef TP_MAJOR
#define TP_MAJOR KEEL_ABI_VERSION_MAJOR
#endif
#ifndef TP_MINOR
#define TP_MINOR KEEL_ABI_VERSION_MINOR
#endif
#ifndef TP_MEM_LIMIT
#define TP_MEM_LIMIT (UINT64_C(1) << 30)
#endif

static const keel_host_api *host;

static keel_status fail(keel_status st, const char *msg)
{
    if (host && host->set_error)
        host->set_error(st, msg);
    return st;
}

#define CHECK_DEV(d)                                                         \
    do {                                                                     \
        if ((d) < 0 || (d) >= TP_DEVICES)                                    \
            return fail(KEEL_STATUS_INVALID_DEVICE, "no such test device");  \
    } while (0)

#ifdef TP_UNRESOLVED
extern int keel_test_symbol_nobody_defines(void);
#endif

/* ---- device -------------------------------------------------------------- */

#ifdef TP_REENTER
/* libkeel's own functions, found in the process that loads this plugin. */
static keel_status reenter(void)
{
    keel_status (*k_init)(void);
    int (*k_plugin_count)(void);
    int (*k_device_count)(const char *);
    const char *(*k_last_error)(void);
    char msg[1024];
    keel_status st;
    int np, nd;

    *(void **)&k_init = dlsym(RTLD_DEFAULT, "keel_init");
    *(void **)&k_plugin_count = dlsym(RTLD_DEFAULT, "keel_plugin_count");
    *(void **)&k_device_count = dlsym(RTLD_DEFAULT, "keel_device_count");
    *(void **)&k_last_error = dlsym(RTLD_DEFAULT, "keel_last_error");
    if (!k_init || !k_plugin_count || !k_device_count || !k_last_error)
        return fail(KEEL_STATUS_INTERNAL, "libkeel's functions not found");
    np = k_plugin_count();
    nd = k_device_count("testdev");
    st = k_init();
    snprintf(msg, sizeof(msg), "re-entry: plugin_count %d, device_count %d, "
             "keel_init status %d: %s", np, nd, (int)st, k_last_error());
    return fail(st == KEEL_STATUS_OK ? KEEL_STATUS_INTERNAL : st, msg);
}
#endif

static keel_status tp_init(void)
{
#ifdef TP_REENTER
    return reenter();
#endif
#ifdef TP_UNRESOLVED
    if (keel_test_symbol_nobody_defines())
        return KEEL_STATUS_INTERNAL;
#endif
#ifdef TP_INIT_FAILS
    return fail(KEEL_STATUS_DEVICE_ERROR, "test device refused to start");
#elif defined(TP_NO_DRIVER)
    return fail(KEEL_STATUS_UNAVAILABLE, "no test driver installed");
#else
    return KEEL_STATUS_OK;
#endif
}

static keel_status tp_finalize(void)
{
    return KEEL_STATUS_OK;
}

static keel_status tp_count(int32_t *count)
{
    if (!count)
        return fail(KEEL_STATUS_INVALID_ARGUMENT, "count is NULL");
#ifdef TP_NO_DRIVER
    *count = 0;
#else
    *count = TP_DEVICES;
#endif
    return KEEL_STATUS_OK;
}

static keel_status tp_props(int32_t device, keel_device_props *props)
{
    keel_device_props p;
    uint32_t n;

    CHECK_DEV(device);
    if (!props)
        return fail(KEEL_STATUS_INVALID_ARGUMENT, "props is NULL");
    memset(&p, 0, sizeof(p));
    snprintf(p.name, sizeof(p.name), "%s test device %d", TP_NAME, device);
    snprintf(p.vendor, sizeof(p.vendor), "keel tests");
    snprintf(p.arch, sizeof(p.arch), "host");
    p.total_memory = TP_MEM_LIMIT;
    p.compute_units = 1;
    p.dtype_mask = KEEL_DTYPE_BIT(KEEL_F32);
    p.features = 0;
#ifndef TP_NO_HOST_ALLOC
    p.features |= KEEL_FEATURE_PINNED_HOST;
#endif
    p.alloc_alignment = 16;
    p.stream_priorities = 1;
    n = props->struct_size < sizeof(p) ? props->struct_size : sizeof(p);
    p.struct_size = n;
    memcpy(props, &p, n);
    return KEEL_STATUS_OK;
}

static keel_status tp_sync(int32_t device)
{
    CHECK_DEV(device);
    return KEEL_STATUS_OK;
}

/* ---- memory (host memory; every call is synchronous) --------------------- */

static keel_status tp_alloc(int32_t device, uint64_t size, keel_dptr *ptr)
{
    void *m;

    CHECK_DEV(device);
    if (!ptr)
        return fail(KEEL_STATUS_INVALID_ARGUMENT, "ptr is NULL");
    if (size > TP_MEM_LIMIT)
        return fail(KEEL_STATUS_OUT_OF_MEMORY, "test device memory exhausted");
    *ptr = 0;
    if (!size)
        return KEEL_STATUS_OK;
    m = malloc(size);
    if (!m)
        return fail(KEEL_STATUS_OUT_OF_MEMORY, "malloc failed");
    *ptr = (keel_dptr)(uintptr_t)m;
    return KEEL_STATUS_OK;
}

static keel_status tp_free(int32_t device, keel_dptr ptr)
{
    CHECK_DEV(device);
    free((void *)(uintptr_t)ptr);
    return KEEL_STATUS_OK;
}

static keel_status tp_host_alloc(int32_t device, uint64_t size, void **ptr)
{
    CHECK_DEV(device);
    if (!ptr)
        return fail(KEEL_STATUS_INVALID_ARGUMENT, "ptr is NULL");
    *ptr = size ? malloc(size) : NULL;
    return size && !*ptr ? KEEL_STATUS_OUT_OF_MEMORY : KEEL_STATUS_OK;
}

static keel_status tp_host_free(int32_t device, void *ptr)
{
    free(ptr);
    return KEEL_STATUS_OK;
}

static keel_status tp_memset(int32_t device, keel_dptr dst, uint8_t v,
                             uint64_t size)
{
    CHECK_DEV(device);
    if (size)
        memset((void *)(uintptr_t)dst, v, size);
    return KEEL_STATUS_OK;
}

static keel_status tp_memset_async(int32_t device, keel_stream s,
                                   keel_dptr dst, uint8_t v, uint64_t size)
{
    return tp_memset(device, dst, v, size);
}

static keel_status tp_h2d(int32_t device, keel_dptr dst, const void *src,
                          uint64_t size)
{
    CHECK_DEV(device);
    if (size)
        memcpy((void *)(uintptr_t)dst, src, size);
    return KEEL_STATUS_OK;
}

static keel_status tp_d2h(int32_t device, void *dst, keel_dptr src,
                          uint64_t size)
{
    CHECK_DEV(device);
    if (size)
        memcpy(dst, (const void *)(uintptr_t)src, size);
    return KEEL_STATUS_OK;
}

static keel_status tp_d2d(int32_t device, keel_dptr dst, keel_dptr src,
                          uint64_t size)
{
    CHECK_DEV(device);
    if (size)
        memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, size);
    return KEEL_STATUS_OK;
}

static keel_status tp_h2d_async(int32_t device, keel_stream s, keel_dptr dst,
                                const void *src, uint64_t size)
{
    return tp_h2d(device, dst, src, size);
}

static keel_status tp_d2h_async(int32_t device, keel_stream s, void *dst,
                                keel_dptr src, uint64_t size)
{
    return tp_d2h(device, dst, src, size);
}

static keel_status tp_d2d_async(int32_t device, keel_stream s, keel_dptr dst,
                                keel_dptr src, uint64_t size)
{
    return tp_d2d(device, dst, src, size);
}

static keel_status tp_peer(int32_t dd, keel_dptr dst, int32_t sd,
                           keel_dptr src, uint64_t size)
{
    CHECK_DEV(dd);
    return tp_d2d(sd, dst, src, size);
}

static keel_status tp_peer_async(int32_t dd, keel_dptr dst, int32_t sd,
                                 keel_dptr src, uint64_t size, keel_stream s)
{
    return tp_peer(dd, dst, sd, src, size);
}

static keel_status tp_info(int32_t device, keel_memory_info *info)
{
    CHECK_DEV(device);
    if (!info)
        return fail(KEEL_STATUS_INVALID_ARGUMENT, "info is NULL");
    info->total = TP_MEM_LIMIT;
    info->free = TP_MEM_LIMIT;
    info->used = 0;
    return KEEL_STATUS_OK;
}

/* ---- streams and events (work is done eagerly, so all is complete) ------- */

static int stream_token;
static int event_token;

static keel_status tp_stream_create(int32_t device, int32_t prio,
                                    keel_stream *s)
{
    CHECK_DEV(device);
    if (!s)
        return fail(KEEL_STATUS_INVALID_ARGUMENT, "stream is NULL");
    *s = (keel_stream)(void *)&stream_token;
    return KEEL_STATUS_OK;
}

static keel_status tp_stream_op(int32_t device, keel_stream s)
{
    CHECK_DEV(device);
    return KEEL_STATUS_OK;
}

static keel_status tp_stream_wait(int32_t device, keel_stream s, keel_event e)
{
    CHECK_DEV(device);
    return KEEL_STATUS_OK;
}

static keel_status tp_event_create(int32_t device, keel_event *e)
{
    CHECK_DEV(device);
    if (!e)
        return fail(KEEL_STATUS_INVALID_ARGUMENT, "event is NULL");
    *e = (keel_event)(void *)&event_token;
    return KEEL_STATUS_OK;
}

static keel_status tp_event_op(int32_t device, keel_event e)
{
    CHECK_DEV(device);
    return KEEL_STATUS_OK;
}

static keel_status tp_event_record(int32_t device, keel_event e, keel_stream s)
{
    CHECK_DEV(device);
    return KEEL_STATUS_OK;
}

/* ---- tables -------------------------------------------------------------- */

#define TP_HEADER(type, size) {(uint32_t)(size), TP_MAJOR, TP_MINOR}

#ifdef TP_BIG_TABLES
/* As a plugin built against a future minor would see its tables. */
struct big_memory_ops {
    keel_memory_ops base;
    void *future_call_a;
    void *future_call_b;
};
struct big_plugin_api {
    keel_plugin_api base;
    const void *future_group;
};
#define MEMORY_SIZE sizeof(struct big_memory_ops)
#define API_SIZE sizeof(struct big_plugin_api)
#else
#define MEMORY_SIZE sizeof(keel_memory_ops)
#define API_SIZE sizeof(keel_plugin_api)
#endif

#ifdef TP_SMALL_MEMORY
#undef MEMORY_SIZE
#define MEMORY_SIZE offsetof(keel_memory_ops, copy_peer_async)
#endif
#ifdef TP_SMALL_API
#undef API_SIZE
#define API_SIZE offsetof(keel_plugin_api, profiler)
#endif

static const keel_device_ops device_ops = {
    .header = TP_HEADER(keel_device_ops, sizeof(keel_device_ops)),
    .init = tp_init,
    .finalize = tp_finalize,
    .get_device_count = tp_count,
    .get_device_props = tp_props,
    .synchronize = tp_sync,
};

#ifdef TP_BIG_TABLES
static const struct big_memory_ops big_memory = {
    .base = {
#else
static const keel_memory_ops memory_ops = {
#endif
    .header = TP_HEADER(keel_memory_ops, MEMORY_SIZE),
    .alloc = tp_alloc,
    .free = tp_free,
#ifndef TP_NO_HOST_ALLOC
    .host_alloc = tp_host_alloc,
    .host_free = tp_host_free,
#endif
    .memset = tp_memset,
    .memset_async = tp_memset_async,
    .copy_h2d = tp_h2d,
#ifndef TP_NULL_D2H
    .copy_d2h = tp_d2h,
#endif
    .copy_d2d = tp_d2d,
    .copy_h2d_async = tp_h2d_async,
    .copy_d2h_async = tp_d2h_async,
    .copy_d2d_async = tp_d2d_async,
    .copy_peer = tp_peer,
    .get_memory_info = tp_info,
    /* Present in the struct, but past struct_size for TP_SMALL_MEMORY: the
     * core must not see it. */
    .copy_peer_async = tp_peer_async,
#ifdef TP_BIG_TABLES
    },
    .future_call_a = NULL,
    .future_call_b = NULL,
};
#define MEMORY_TABLE (&big_memory.base)
#else
};
#define MEMORY_TABLE (&memory_ops)
#endif

static const keel_stream_ops stream_ops = {
    .header = TP_HEADER(keel_stream_ops, sizeof(keel_stream_ops)),
    .stream_create = tp_stream_create,
    .stream_destroy = tp_stream_op,
    .stream_synchronize = tp_stream_op,
    .stream_query = tp_stream_op,
    .stream_wait_event = tp_stream_wait,
    .event_create = tp_event_create,
    .event_destroy = tp_event_op,
    .event_record = tp_event_record,
    .event_query = tp_event_op,
    .event_synchronize = tp_event_op,
};

static keel_status tp_prof_dev(int32_t device)
{
    return KEEL_STATUS_OK;
}

static keel_status tp_range_push(const char *name)
{
    return KEEL_STATUS_OK;
}

static keel_status tp_range_pop(void)
{
    return KEEL_STATUS_OK;
}

static const keel_profiler_ops profiler_ops = {
    .header = TP_HEADER(keel_profiler_ops, sizeof(keel_profiler_ops)),
    .start = tp_prof_dev,
    .stop = tp_prof_dev,
    .range_push = tp_range_push,
    .range_pop = tp_range_pop,
};

#ifdef TP_WORKSPACE
/*
 * add(float32) through the core's workspaces: x and y are copied into two
 * workspaces and added from there, and the workspace call's contract is
 * checked on the way (0 bytes gives 0; NULL ptr and foreign args are
 * refused; two blocks do not overlap). Any breach fails the launch with a
 * message saying which. The test compares the results and the core's
 * allocator statistics.
 */
static keel_status tp_add_ws(void *data, const keel_kernel_args *a)
{
    const keel_tensor_desc *x, *y, *o;
    keel_kernel_args other;
    keel_dptr w1 = 1, w2 = 0, z = 7;
    uint64_t n = 1, bytes;
    float *fx, *fy, *fo;

    (void)data;
    if (!a || a->struct_size < KEEL_KERNEL_ARGS_MIN_SIZE ||
        a->num_inputs != 2 || a->num_outputs != 1)
        return fail(KEEL_STATUS_INVALID_ARGUMENT, "add: bad args");
    x = &a->inputs[0];
    y = &a->inputs[1];
    o = &a->outputs[0];
    for (int i = 0; i < o->ndim; i++)
        n *= (uint64_t)o->shape[i];
    if (x->ndim != o->ndim || y->ndim != o->ndim)
        return fail(KEEL_STATUS_NOT_SUPPORTED, "add: no broadcasting");
    for (int i = 0; i < o->ndim; i++)
        if (x->shape[i] != o->shape[i] || y->shape[i] != o->shape[i])
            return fail(KEEL_STATUS_NOT_SUPPORTED, "add: no broadcasting");
    bytes = n * sizeof(float);
    if (keel_kernel_workspace(a, 0, &z) != KEEL_STATUS_OK || z != 0)
        return fail(KEEL_STATUS_DEVICE_ERROR,
                    "add: a 0-byte workspace is not 0");
    if (keel_kernel_workspace(a, 16, NULL) != KEEL_STATUS_INVALID_ARGUMENT)
        return fail(KEEL_STATUS_DEVICE_ERROR,
                    "add: a NULL workspace pointer was accepted");
    other = *a;
    if (keel_kernel_workspace(&other, 16, &z) != KEEL_STATUS_INVALID_ARGUMENT)
        return fail(KEEL_STATUS_DEVICE_ERROR,
                    "add: args that are not the launch's were accepted");
    if (keel_kernel_workspace(a, bytes, &w1) != KEEL_STATUS_OK ||
        keel_kernel_workspace(a, bytes, &w2) != KEEL_STATUS_OK)
        return fail(KEEL_STATUS_DEVICE_ERROR, "add: no workspace");
    if (!w1 || !w2 || (w1 < w2 + bytes && w2 < w1 + bytes))
        return fail(KEEL_STATUS_DEVICE_ERROR,
                    "add: the two workspaces overlap or are null");
    memcpy((void *)(uintptr_t)w1, (const void *)(uintptr_t)x->data, bytes);
    memcpy((void *)(uintptr_t)w2, (const void *)(uintptr_t)y->data, bytes);
    fx = (float *)(uintptr_t)w1;
    fy = (float *)(uintptr_t)w2;
    fo = (float *)(uintptr_t)o->data;
    for (uint64_t i = 0; i < n; i++)
        fo[i] = fx[i] + fy[i];
    return KEEL_STATUS_OK;
}

static keel_status tp_lookup(int32_t device, const char *op, keel_dtype dt,
                             keel_kernel *k)
{
    if (device < 0 || device >= TP_DEVICES || !op || !k)
        return fail(KEEL_STATUS_INVALID_ARGUMENT, "lookup: bad arguments");
    if (strcmp(op, "add") || dt != KEEL_F32)
        return KEEL_STATUS_NOT_FOUND;
    k->fn = tp_add_ws;
    k->kernel_data = NULL;
    return KEEL_STATUS_OK;
}

static const keel_kernel_ops kernel_ops = {
    .header = TP_HEADER(keel_kernel_ops, sizeof(keel_kernel_ops)),
    .lookup = tp_lookup,
};
#define KERNEL_TABLE (&kernel_ops)
#else
#define KERNEL_TABLE NULL
#endif

#ifdef TP_BIG_TABLES
static const struct big_plugin_api big_api = {
    .base = {
#else
static const keel_plugin_api plugin_api = {
#endif
    .header = TP_HEADER(keel_plugin_api, API_SIZE),
    .name = TP_NAME,
    .version = "9.9.9",
    .device_type = TP_TYPE,
    .description = "loader test plugin",
    .device = &device_ops,
    .memory = MEMORY_TABLE,
    .stream = &stream_ops,
    .kernel = KERNEL_TABLE,
    .collective = NULL,
    /* Past struct_size for TP_SMALL_API: the core must not see it. */
    .profiler = &profiler_ops,
#ifdef TP_BIG_TABLES
    },
    .future_group = NULL,
};
#define API_TABLE (&big_api.base)
#else
};
#define API_TABLE (&plugin_api)
#endif

#ifndef TP_NO_ENTRY
KEEL_PLUGIN_EXPORT const keel_plugin_api *
keel_plugin_get_api(uint32_t core_major, uint32_t core_minor,
                    const keel_host_api *h)
{
    host = h;
#ifdef TP_GET_API_NULL
    fail(KEEL_STATUS_ABI_MISMATCH, "test plugin refuses to load");
    return NULL;
#else
    return API_TABLE;
#endif
}
#else
/* Exported, but under the wrong name. */
KEEL_PLUGIN_EXPORT int keel_plugin_wrong_entry(void);
KEEL_PLUGIN_EXPORT int keel_plugin_wrong_entry(void)
{
    return (int)sizeof(API_TABLE);
}
#endif
