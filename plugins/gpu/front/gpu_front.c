/*
 * keel GPU plugins — the front: libkeel-cuda.so and libkeel-hip.so.
 *
 * Discovery dlopens every plugin in every process, GPU or not. The GPU
 * plugins' real code (the backend: the runtime part, the kernels, the
 * statically linked CUDA runtime or libamdhip64, and the fat binaries the
 * kernels register from their constructors) is heavy, and its constructors
 * run as soon as it is mapped. So the file discovery loads is this small
 * front, plain C with no vendor library linked, built once for CUDA and
 * once for HIP (KEEL_GPU_HIP). At keel_plugin_get_api it asks the driver,
 * without the runtime, whether there is a device at all:
 *
 *   CUDA  dlopen("libcuda.so.1") (the driver, which the runtime would load
 *         anyway), cuInit(0), cuDeviceGetCount;
 *   HIP   no /dev/kfd: no device, and nothing is loaded; otherwise
 *         dlopen libamdhip64 and hipGetDeviceCount.
 *
 * With at least one device it dlopens the backend, KEEL_GPU_BACKEND_FILE
 * in the front's own folder (a name discovery does not take for a plugin:
 * it does not start with "libkeel-"), calls the backend's
 * keel_plugin_get_api with the same arguments and returns that table
 * unchanged: from then on the core talks to the backend only. Without a
 * device, or when the backend does not load, the front answers with its
 * own table: the same identity (gpu_identity.h), 0 devices and the reason,
 * and a status with a message for every required call, as the backend
 * itself answers with no device (init UNAVAILABLE, calls on a device
 * NOT_INITIALIZED, NULL out-parameters INVALID_ARGUMENT). It has no
 * kernel or collective group: both are optional and unusable without a
 * device.
 *
 * KEEL_GPU_BACKEND (read through the host table) overrides the probe:
 *   auto (or unset)  load the backend when the probe finds a device;
 *   always           load it whatever the probe would say (the tests use
 *                    this to reach the backend on a machine with no GPU,
 *                    where it reports 0 devices itself);
 *   never            never load it: 0 devices.
 *
 * The backend, once loaded, stays loaded until the process ends, like the
 * driver: the CUDA and HIP runtimes are not made to be unloaded, and the
 * front may be dlclosed and opened again by a later discovery, which then
 * finds the same backend. Likewise a driver library on which cuInit (or
 * hipGetDeviceCount) has run is never closed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr */
#endif
#include <dlfcn.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include <keel/device_api.h>

#include "gpu_identity.h"

#ifndef KEEL_GPU_BACKEND_FILE
#error "KEEL_GPU_BACKEND_FILE (the backend's file name) must be defined"
#endif

#ifdef KEEL_GPU_HIP
#define FRONT_API "HIP"
#else
#define FRONT_API "CUDA"
#endif

#define FRONT_MSG_MAX 768
#define FRONT_ENV "KEEL_GPU_BACKEND"

enum front_mode { MODE_AUTO, MODE_ALWAYS, MODE_NEVER };

static struct {
    pthread_mutex_t lock;
    const keel_host_api *host;
    bool decided;
    /* The backend, when loaded; its entry answers every get_api call. */
    void *backend;
    keel_plugin_get_api_fn entry;
    /* The driver library the probe opened and ran (kept, see above). */
    void *driver;
    /* Why there is no device: the reason the core shows. */
    char reason[FRONT_MSG_MAX];
    char description[FRONT_MSG_MAX];
} front = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* ---- host services ------------------------------------------------------- */

#define HOST_HAS(h, m)                                                       \
    ((h) && (h)->header.struct_size >=                                       \
                offsetof(keel_host_api, m) + sizeof((h)->m) &&               \
     (h)->m)

static void host_set_error(keel_status status, const char *msg)
{
    const keel_host_api *h = front.host;

    if (HOST_HAS(h, set_error))
        h->set_error(status, msg);
}

static void front_log(keel_log_level level, const char *fmt, ...)
{
    const keel_host_api *h = front.host;
    char msg[FRONT_MSG_MAX + 128];
    va_list ap;

    if (!HOST_HAS(h, log))
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    h->log(level, msg);
}

static const char *front_env(const char *name)
{
    const keel_host_api *h = front.host;

    if (HOST_HAS(h, get_env))
        return h->get_env(name);
    return getenv(name);
}

static keel_status front_fail(keel_status status, const char *fmt, ...)
{
    char msg[FRONT_MSG_MAX + 256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    host_set_error(status, msg);
    return status;
}

static void set_reason(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(front.reason, sizeof(front.reason), fmt, ap);
    va_end(ap);
}

static const char *dl_error_text(void)
{
    const char *e = dlerror();

    return e ? e : "no dlerror text";
}

/* ---- the probe ------------------------------------------------------------ */

#ifdef KEEL_GPU_HIP

/* From HIP's public API: hipError_t is an int enum, hipSuccess is 0. */
typedef int front_hip_error;
typedef front_hip_error (*hip_get_device_count_fn)(int *count);
typedef const char *(*hip_get_error_name_fn)(front_hip_error err);

/* "; HIP_VISIBLE_DEVICES=..; ROCR_VISIBLE_DEVICES=.." when set. */
static void visible_suffix(char *buf, size_t size)
{
    const char *vis = getenv("HIP_VISIBLE_DEVICES");
    const char *rvis = getenv("ROCR_VISIBLE_DEVICES");

    snprintf(buf, size, "%s%s%s%s", vis ? "; HIP_VISIBLE_DEVICES=" : "",
             vis ? vis : "", rvis ? "; ROCR_VISIBLE_DEVICES=" : "",
             rvis ? rvis : "");
}

static int32_t probe_devices(void)
{
    static const char *const names[] = {"libamdhip64.so.5",
                                        "libamdhip64.so.6", "libamdhip64.so"};
    hip_get_device_count_fn count_fn = NULL;
    hip_get_error_name_fn name_fn = NULL;
    char vis[256], first_err[384] = "";
    void *h = NULL;
    front_hip_error err;
    int n = 0;

    visible_suffix(vis, sizeof(vis));
    /* The HIP runtime would find no /dev/kfd and report no device: say so
     * without loading it. */
    if (access("/dev/kfd", F_OK) != 0) {
        set_reason("no HIP device (no /dev/kfd: the amdgpu kernel driver is "
                   "not loaded or there is no AMD GPU%s; the HIP runtime was "
                   "not loaded)", vis);
        return 0;
    }
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !h; i++) {
        dlerror();
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h && !first_err[0])
            snprintf(first_err, sizeof(first_err), "%s", dl_error_text());
    }
    if (!h) {
        set_reason("HIP runtime unavailable (/dev/kfd is present, but "
                   "libamdhip64 could not be loaded: %s)", first_err);
        return 0;
    }
    *(void **)(&count_fn) = dlsym(h, "hipGetDeviceCount");
    *(void **)(&name_fn) = dlsym(h, "hipGetErrorName");
    if (!count_fn) {
        set_reason("HIP runtime unavailable (libamdhip64 has no "
                   "hipGetDeviceCount: %s)", dl_error_text());
        dlclose(h);
        return 0;
    }
    front.driver = h; /* about to run: never closed from here on */
    err = count_fn(&n);
    if (err == 0 && n > 0)
        return n;
    if (err == 0)
        set_reason("no HIP device (hipGetDeviceCount found none; /dev/kfd "
                   "is present%s)", vis);
    else
        set_reason("no HIP device (hipGetDeviceCount: %s (%d); /dev/kfd is "
                   "present%s)",
                   name_fn && name_fn(err) ? name_fn(err) : "error", err, vis);
    return 0;
}

#else /* CUDA */

/* From the CUDA driver API's documentation: CUresult is an int enum,
 * CUDA_SUCCESS is 0, CUDA_ERROR_NO_DEVICE is 100. */
typedef int front_cu_result;
#define FRONT_CUDA_SUCCESS 0
#define FRONT_CUDA_ERROR_NO_DEVICE 100
typedef front_cu_result (*cu_init_fn)(unsigned int flags);
typedef front_cu_result (*cu_device_get_count_fn)(int *count);
typedef front_cu_result (*cu_get_error_fn)(front_cu_result err,
                                           const char **str);

/* "CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected", or the
 * number when the driver cannot name it. */
static void cu_describe(void *h, front_cu_result r, char *buf, size_t size)
{
    cu_get_error_fn name_fn = NULL, text_fn = NULL;
    const char *name = NULL, *text = NULL;

    *(void **)(&name_fn) = dlsym(h, "cuGetErrorName");
    *(void **)(&text_fn) = dlsym(h, "cuGetErrorString");
    if (!name_fn || name_fn(r, &name) != FRONT_CUDA_SUCCESS)
        name = NULL;
    if (!text_fn || text_fn(r, &text) != FRONT_CUDA_SUCCESS)
        text = NULL;
    if (name)
        snprintf(buf, size, "%s: %s", name, text ? text : "(no text)");
    else
        snprintf(buf, size, "CUresult %d", (int)r);
}

static int32_t probe_devices(void)
{
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    cu_init_fn init_fn = NULL;
    cu_device_get_count_fn count_fn = NULL;
    char what[256];
    front_cu_result r;
    void *h;
    int n = 0;

    dlerror();
    h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        set_reason("no CUDA driver (libcuda.so.1 could not be loaded: %s)",
                   dl_error_text());
        return 0;
    }
    *(void **)(&init_fn) = dlsym(h, "cuInit");
    *(void **)(&count_fn) = dlsym(h, "cuDeviceGetCount");
    if (!init_fn || !count_fn) {
        set_reason("no CUDA driver (libcuda.so.1 lacks cuInit or "
                   "cuDeviceGetCount: %s)", dl_error_text());
        dlclose(h);
        return 0;
    }
    front.driver = h; /* about to run: never closed from here on */
    r = init_fn(0);
    if (r == FRONT_CUDA_SUCCESS) {
        r = count_fn(&n);
        if (r == FRONT_CUDA_SUCCESS && n > 0)
            return n;
        if (r == FRONT_CUDA_SUCCESS) {
            set_reason("no CUDA device (cuDeviceGetCount found none%s%s)",
                       vis ? "; CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "");
            return 0;
        }
        cu_describe(h, r, what, sizeof(what));
        set_reason("CUDA driver unavailable (cuDeviceGetCount: %s)", what);
        return 0;
    }
    cu_describe(h, r, what, sizeof(what));
    if (r == FRONT_CUDA_ERROR_NO_DEVICE)
        set_reason("no CUDA device (cuInit: %s%s%s)", what,
                   vis ? "; CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "");
    else
        set_reason("CUDA driver unavailable (cuInit: %s)", what);
    return 0;
}

#endif

/* ---- the backend ---------------------------------------------------------- */

/* Any object of the front, for dladdr. */
static const char front_marker = 1;

/* KEEL_GPU_BACKEND_FILE in the folder the front was loaded from. */
static bool backend_path(char *buf, size_t size)
{
    char real[PATH_MAX];
    Dl_info info;
    char *slash;

    if (!dladdr(&front_marker, &info) || !info.dli_fname ||
        !realpath(info.dli_fname, real))
        return false;
    slash = strrchr(real, '/');
    if (!slash)
        return false;
    *slash = '\0';
    return (size_t)snprintf(buf, size, "%s/%s", real, KEEL_GPU_BACKEND_FILE) <
           size;
}

/* The core refuses a plugin file another user could change when
 * KEEL_PLUGIN_STRICT_PERMS=1 or in a setuid/setgid process; the backend
 * gets the same rule for the file (its folder is the front's, which the
 * core has checked already). Empty when it may be loaded. */
static void backend_unsafe(const char *path, char *why, size_t size)
{
    const char *strict = front_env("KEEL_PLUGIN_STRICT_PERMS");
    struct stat st;

    why[0] = '\0';
    if (!(strict && !strcmp(strict, "1")) && !getauxval(AT_SECURE))
        return;
    if (stat(path, &st) != 0)
        return; /* dlopen says what is wrong */
    if (st.st_mode & S_IWOTH)
        snprintf(why, size, "the file is writable by every user (mode %04o)",
                 (unsigned)(st.st_mode & 07777));
    else if (st.st_uid != 0 && st.st_uid != geteuid())
        snprintf(why, size, "the file is owned by uid %u, which is neither "
                 "this user nor root", (unsigned)st.st_uid);
}

/* Load the backend; on failure, the reason says why and false returns. */
static bool load_backend(const char *context)
{
    char path[PATH_MAX], why[256];
    keel_plugin_get_api_fn entry = NULL;
    void *h;

    if (!backend_path(path, sizeof(path))) {
        set_reason("%s, but the " FRONT_API " runtime was not loaded: the "
                   "folder of the plugin file is unknown, so its backend ("
                   KEEL_GPU_BACKEND_FILE ") cannot be found", context);
        return false;
    }
    backend_unsafe(path, why, sizeof(why));
    if (why[0]) {
        set_reason("%s, but the " FRONT_API " runtime was not loaded: its "
                   "backend %s is refused under strict plugin permissions: "
                   "%s", context, path, why);
        return false;
    }
    dlerror();
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        set_reason("%s, but the " FRONT_API " runtime was not loaded: "
                   "dlopen of its backend failed: %s", context,
                   dl_error_text());
        return false;
    }
    dlerror();
    *(void **)(&entry) = dlsym(h, KEEL_PLUGIN_ENTRY_SYMBOL);
    if (!entry) {
        set_reason("%s, but the " FRONT_API " runtime was not loaded: its "
                   "backend %s has no " KEEL_PLUGIN_ENTRY_SYMBOL " (%s)",
                   context, path, dl_error_text());
        dlclose(h);
        return false;
    }
    front.backend = h;
    front.entry = entry;
    front_log(KEEL_LOG_DEBUG, CUDA_PLUGIN_NAME ": backend %s loaded", path);
    return true;
}

static enum front_mode backend_mode(void)
{
    const char *v = front_env(FRONT_ENV);

    if (!v || !*v || !strcmp(v, "auto"))
        return MODE_AUTO;
    if (!strcmp(v, "always"))
        return MODE_ALWAYS;
    if (!strcmp(v, "never"))
        return MODE_NEVER;
    front_log(KEEL_LOG_WARN, CUDA_PLUGIN_NAME ": " FRONT_ENV "=%s is not "
              "auto, always or never; taken as auto", v);
    return MODE_AUTO;
}

/* Probe, and load the backend when there is something for it to drive. */
static void decide(void)
{
    enum front_mode mode = backend_mode();
    const char *shortly = "no device found";
    char context[96];
    int32_t n = 0;

    if (mode == MODE_NEVER) {
        set_reason(FRONT_API " runtime not loaded: " FRONT_ENV "=never");
        shortly = FRONT_ENV "=never";
    } else if (mode == MODE_AUTO && (n = probe_devices()) == 0) {
        /* probe_devices() gave the reason */
    } else {
        if (mode == MODE_ALWAYS)
            snprintf(context, sizeof(context), FRONT_ENV "=always");
        else
            snprintf(context, sizeof(context), "%d " FRONT_API " device%s "
                     "found", (int)n, n == 1 ? "" : "s");
        if (load_backend(context))
            return;
        shortly = "its backend did not load";
    }
    snprintf(front.description, sizeof(front.description),
             "%s [the runtime is not loaded: %s]", CUDA_PLUGIN_DESCRIPTION,
             shortly);
    front_log(KEEL_LOG_INFO, CUDA_PLUGIN_NAME ": 0 devices: %s",
              front.reason);
}

/* ---- the table without a backend ------------------------------------------ */

static keel_status not_initialised(const char *call, int32_t device)
{
    return front_fail(KEEL_STATUS_NOT_INITIALIZED,
                      "%s(gpu:%d): the " CUDA_PLUGIN_NAME " plugin is not "
                      "initialised: %s", call, (int)device, front.reason);
}

static keel_status null_out(const char *call, int32_t device,
                            const char *name)
{
    return front_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s(gpu:%d): %s is NULL",
                      call, (int)device, name);
}

static keel_status f_init(void)
{
    return front_fail(KEEL_STATUS_UNAVAILABLE, "%s", front.reason);
}

static keel_status f_finalize(void)
{
    return KEEL_STATUS_OK;
}

static keel_status f_get_device_count(int32_t *count)
{
    if (!count)
        return front_fail(KEEL_STATUS_INVALID_ARGUMENT,
                          "get_device_count: count is NULL");
    *count = 0;
    /* OK with 0 devices; the message is the reason the core shows. */
    host_set_error(KEEL_STATUS_UNAVAILABLE, front.reason);
    return KEEL_STATUS_OK;
}

static keel_status f_get_device_props(int32_t device,
                                      keel_device_props *props)
{
    if (!props)
        return null_out("get_device_props", device, "props");
    if (props->struct_size < sizeof(props->struct_size))
        return front_fail(KEEL_STATUS_INVALID_ARGUMENT,
                          "get_device_props(gpu:%d): props->struct_size is "
                          "%" PRIu32 ", set it to sizeof(keel_device_props)",
                          (int)device, props->struct_size);
    return front_fail(KEEL_STATUS_INVALID_DEVICE,
                      "get_device_props: gpu:%d does not exist: the plugin "
                      "has no device: %s", (int)device, front.reason);
}

static keel_status f_synchronize(int32_t device)
{
    return not_initialised("synchronize", device);
}

static keel_status f_alloc(int32_t device, uint64_t size, keel_dptr *ptr)
{
    (void)size;
    if (!ptr)
        return null_out("alloc", device, "ptr");
    *ptr = 0;
    return not_initialised("alloc", device);
}

static keel_status f_free(int32_t device, keel_dptr ptr)
{
    (void)ptr;
    return not_initialised("free", device);
}

static keel_status f_memset(int32_t device, keel_dptr dst, uint8_t value,
                            uint64_t size)
{
    (void)dst, (void)value, (void)size;
    return not_initialised("memset", device);
}

static keel_status f_memset_async(int32_t device, keel_stream stream,
                                  keel_dptr dst, uint8_t value, uint64_t size)
{
    (void)stream, (void)dst, (void)value, (void)size;
    return not_initialised("memset_async", device);
}

static keel_status f_copy_h2d(int32_t device, keel_dptr dst, const void *src,
                              uint64_t size)
{
    (void)dst, (void)src, (void)size;
    return not_initialised("copy_h2d", device);
}

static keel_status f_copy_d2h(int32_t device, void *dst, keel_dptr src,
                              uint64_t size)
{
    (void)dst, (void)src, (void)size;
    return not_initialised("copy_d2h", device);
}

static keel_status f_copy_d2d(int32_t device, keel_dptr dst, keel_dptr src,
                              uint64_t size)
{
    (void)dst, (void)src, (void)size;
    return not_initialised("copy_d2d", device);
}

static keel_status f_copy_h2d_async(int32_t device, keel_stream stream,
                                    keel_dptr dst, const void *src,
                                    uint64_t size)
{
    (void)stream, (void)dst, (void)src, (void)size;
    return not_initialised("copy_h2d_async", device);
}

static keel_status f_copy_d2h_async(int32_t device, keel_stream stream,
                                    void *dst, keel_dptr src, uint64_t size)
{
    (void)stream, (void)dst, (void)src, (void)size;
    return not_initialised("copy_d2h_async", device);
}

static keel_status f_copy_d2d_async(int32_t device, keel_stream stream,
                                    keel_dptr dst, keel_dptr src,
                                    uint64_t size)
{
    (void)stream, (void)dst, (void)src, (void)size;
    return not_initialised("copy_d2d_async", device);
}

static keel_status f_get_memory_info(int32_t device, keel_memory_info *info)
{
    if (!info)
        return null_out("get_memory_info", device, "info");
    return not_initialised("get_memory_info", device);
}

static keel_status f_stream_create(int32_t device, int32_t priority,
                                   keel_stream *stream)
{
    (void)priority;
    if (!stream)
        return null_out("stream_create", device, "stream");
    *stream = NULL;
    return not_initialised("stream_create", device);
}

static keel_status f_stream_destroy(int32_t device, keel_stream stream)
{
    (void)stream;
    return not_initialised("stream_destroy", device);
}

static keel_status f_stream_synchronize(int32_t device, keel_stream stream)
{
    (void)stream;
    return not_initialised("stream_synchronize", device);
}

static keel_status f_stream_query(int32_t device, keel_stream stream)
{
    (void)stream;
    return not_initialised("stream_query", device);
}

static keel_status f_stream_wait_event(int32_t device, keel_stream stream,
                                       keel_event event)
{
    (void)stream, (void)event;
    return not_initialised("stream_wait_event", device);
}

static keel_status f_event_create(int32_t device, keel_event *event)
{
    if (!event)
        return null_out("event_create", device, "event");
    *event = NULL;
    return not_initialised("event_create", device);
}

static keel_status f_event_destroy(int32_t device, keel_event event)
{
    (void)event;
    return not_initialised("event_destroy", device);
}

static keel_status f_event_record(int32_t device, keel_event event,
                                  keel_stream stream)
{
    (void)event, (void)stream;
    return not_initialised("event_record", device);
}

static keel_status f_event_query(int32_t device, keel_event event)
{
    (void)event;
    return not_initialised("event_query", device);
}

static keel_status f_event_synchronize(int32_t device, keel_event event)
{
    (void)event;
    return not_initialised("event_synchronize", device);
}

static const keel_device_ops front_device_ops = {
    .header = KEEL_TABLE_HEADER(keel_device_ops),
    .init = f_init,
    .finalize = f_finalize,
    .get_device_count = f_get_device_count,
    .get_device_props = f_get_device_props,
    .synchronize = f_synchronize,
};

static const keel_memory_ops front_memory_ops = {
    .header = KEEL_TABLE_HEADER(keel_memory_ops),
    .alloc = f_alloc,
    .free = f_free,
    .memset = f_memset,
    .memset_async = f_memset_async,
    .copy_h2d = f_copy_h2d,
    .copy_d2h = f_copy_d2h,
    .copy_d2d = f_copy_d2d,
    .copy_h2d_async = f_copy_h2d_async,
    .copy_d2h_async = f_copy_d2h_async,
    .copy_d2d_async = f_copy_d2d_async,
    .get_memory_info = f_get_memory_info,
};

static const keel_stream_ops front_stream_ops = {
    .header = KEEL_TABLE_HEADER(keel_stream_ops),
    .stream_create = f_stream_create,
    .stream_destroy = f_stream_destroy,
    .stream_synchronize = f_stream_synchronize,
    .stream_query = f_stream_query,
    .stream_wait_event = f_stream_wait_event,
    .event_create = f_event_create,
    .event_destroy = f_event_destroy,
    .event_record = f_event_record,
    .event_query = f_event_query,
    .event_synchronize = f_event_synchronize,
};

static const keel_plugin_api front_api = {
    .header = KEEL_TABLE_HEADER(keel_plugin_api),
    .name = CUDA_PLUGIN_NAME,
    .version = CUDA_PLUGIN_VERSION,
    .device_type = CUDA_PLUGIN_DEVICE_TYPE,
    .description = front.description,
    .device = &front_device_ops,
    .memory = &front_memory_ops,
    .stream = &front_stream_ops,
    .kernel = NULL,
    .collective = NULL,
    .profiler = NULL,
};

/* ---- entry point ---------------------------------------------------------- */

KEEL_PLUGIN_EXPORT const keel_plugin_api *
keel_plugin_get_api(uint32_t core_abi_major, uint32_t core_abi_minor,
                    const keel_host_api *host)
{
    const keel_plugin_api *api;

    pthread_mutex_lock(&front.lock);
    front.host = host;
    if (core_abi_major != KEEL_ABI_VERSION_MAJOR) {
        front_fail(KEEL_STATUS_ABI_MISMATCH,
                   "the " CUDA_PLUGIN_NAME " plugin implements keel device "
                   "ABI %d.%d; the core speaks %" PRIu32 ".%" PRIu32
                   " (major versions differ)",
                   KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
                   core_abi_major, core_abi_minor);
        pthread_mutex_unlock(&front.lock);
        return NULL;
    }
    if (!front.decided) {
        decide();
        front.decided = true;
    }
    api = front.entry ? front.entry(core_abi_major, core_abi_minor, host)
                      : &front_api;
    pthread_mutex_unlock(&front.lock);
    return api;
}
