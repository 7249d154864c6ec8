/*
 * keel CUDA plugin — entry point, identity, device group, error mapping.
 *
 * See cuda_internal.h for the design. This file owns the plugin state and
 * everything that concerns devices as a whole: probing (which never fails:
 * no driver or no device gives 0 devices and a remembered reason), init /
 * finalize, properties, device synchronisation, the current-device helper
 * and lazy peer access.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_internal.h"
#ifdef KEEL_CUDA_HAVE_KERNELS
#include "ck.h"
#include "ck_gemm.h"
#endif

/* Name, version, type and description: shared with the front
 * (plugins/gpu/front/gpu_front.c), which answers for the plugin when this
 * backend is not loaded. */
#include "gpu_identity.h"

#define CUDA_MSG_MAX 768

/* The nine dtypes of ABI 1.x, listed so that a dtype appended later is not
 * claimed by a plugin that has never heard of it. */
#define CUDA_DTYPE_MASK                                                      \
    (KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F64) |                   \
     KEEL_DTYPE_BIT(KEEL_F16) | KEEL_DTYPE_BIT(KEEL_BF16) |                  \
     KEEL_DTYPE_BIT(KEEL_I8) | KEEL_DTYPE_BIT(KEEL_U8) |                     \
     KEEL_DTYPE_BIT(KEEL_I32) | KEEL_DTYPE_BIT(KEEL_I64) |                   \
     KEEL_DTYPE_BIT(KEEL_BOOL))

struct cuda_state cuda_g = {
    .probe_once = PTHREAD_ONCE_INIT,
    .init_lock = PTHREAD_MUTEX_INITIALIZER,
    .mem = CUDA_REGISTRY_INIT,
    .handles = CUDA_REGISTRY_INIT,
};

/* ---- host services ------------------------------------------------------- */

/* True when the host table has member `m` (inside struct_size, non-NULL). */
#define HOST_HAS(h, m)                                                       \
    ((h) && (h)->header.struct_size >=                                       \
                offsetof(keel_host_api, m) + sizeof((h)->m) &&               \
     (h)->m)

static void host_set_error(keel_status status, const char *msg)
{
    const keel_host_api *h = cuda_g.host;

    if (HOST_HAS(h, set_error))
        h->set_error(status, msg);
}

void cuda_log(keel_log_level level, const char *fmt, ...)
{
    const keel_host_api *h = cuda_g.host;
    char msg[CUDA_MSG_MAX];
    va_list ap;

    if (!HOST_HAS(h, log))
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    h->log(level, msg);
}

/* ---- errors -------------------------------------------------------------- */

keel_status cuda_status_of(cudaError_t err)
{
    switch (err) {
    case cudaSuccess:
        return KEEL_STATUS_OK;
    case cudaErrorMemoryAllocation:
        return KEEL_STATUS_OUT_OF_MEMORY;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidMemcpyDirection:
    case cudaErrorInvalidPitchValue:
        return KEEL_STATUS_INVALID_ARGUMENT;
    case cudaErrorInvalidDevice:
    case cudaErrorNoDevice:
        return KEEL_STATUS_INVALID_DEVICE;
    case cudaErrorInsufficientDriver:
        return KEEL_STATUS_UNAVAILABLE;
    case cudaErrorInvalidResourceHandle:
        return KEEL_STATUS_INVALID_HANDLE;
    case cudaErrorNotReady:
        return KEEL_STATUS_NOT_READY;
    case cudaErrorNotSupported:
        return KEEL_STATUS_NOT_SUPPORTED;
    default:
        return KEEL_STATUS_DEVICE_ERROR;
    }
}

keel_status cuda_fail(keel_status status, const char *fmt, ...)
{
    char msg[CUDA_MSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    host_set_error(status, msg);
    return status;
}

keel_status cuda_check(cudaError_t err, int32_t device, const char *fmt, ...)
{
    char what[CUDA_MSG_MAX / 2];
    keel_status status;
    va_list ap;

    if (err == cudaSuccess)
        return KEEL_STATUS_OK;
    /* The runtime also keeps err as its "last error": clear it, so that a
     * later cudaGetLastError() (after a kernel launch) does not report it.
     * Sticky errors (a dead context) survive this and keep failing calls. */
    (void)cudaGetLastError();
    status = cuda_status_of(err);
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
#ifdef KEEL_GPU_HIP
    /* The shared sources name the CUDA call; the HIP build ran its HIP
     * counterpart (keel_gpu.h), so say that one. */
    if (!strncmp(what, "cuda", 4)) {
        memmove(what + 3, what + 4, strlen(what + 4) + 1);
        memcpy(what, "hip", 3);
    }
#endif
    return cuda_fail(status, "%s on gpu:%d: %s: %s", what, (int)device,
                     cudaGetErrorName(err), cudaGetErrorString(err));
}

/* ---- probe --------------------------------------------------------------- */

static void probe_no_driver(cudaError_t err)
{
    int drv = 0, rt = 0;

    (void)cudaDriverGetVersion(&drv);
    (void)cudaRuntimeGetVersion(&rt);
    (void)cudaGetLastError();
    if (drv == 0) {
        snprintf(cuda_g.probe_reason, sizeof(cuda_g.probe_reason),
                 "no CUDA driver (%s: %s; libcuda.so.1 could not be loaded)",
                 cudaGetErrorName(err), cudaGetErrorString(err));
        return;
    }
    snprintf(cuda_g.probe_reason, sizeof(cuda_g.probe_reason),
             "CUDA driver too old: it supports CUDA %d.%d, the plugin was "
             "built with CUDA runtime %d.%d (%s: %s)",
             drv / 1000, (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10,
             cudaGetErrorName(err), cudaGetErrorString(err));
}

#ifdef KEEL_GPU_HIP
/* Without an AMD GPU the HIP runtime finds no /dev/kfd (the amdgpu kernel
 * driver's compute interface) and reports hipErrorNoDevice. */
static void probe_no_device(cudaError_t err)
{
    const char *vis = getenv("HIP_VISIBLE_DEVICES");
    const char *rvis = getenv("ROCR_VISIBLE_DEVICES");
    bool kfd = access("/dev/kfd", F_OK) == 0;

    snprintf(cuda_g.probe_reason, sizeof(cuda_g.probe_reason),
             "no HIP device (%s: %s; %s%s%s%s%s)", cudaGetErrorName(err),
             cudaGetErrorString(err),
             kfd ? "/dev/kfd is present"
                 : "no /dev/kfd: the amdgpu kernel driver is not loaded or "
                   "there is no AMD GPU",
             vis ? "; HIP_VISIBLE_DEVICES=" : "", vis ? vis : "",
             rvis ? "; ROCR_VISIBLE_DEVICES=" : "", rvis ? rvis : "");
}
#else
static void probe_no_device(cudaError_t err)
{
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");

    snprintf(cuda_g.probe_reason, sizeof(cuda_g.probe_reason),
             "no CUDA device (%s: %s%s%s)", cudaGetErrorName(err),
             cudaGetErrorString(err),
             vis ? "; CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "");
}

#endif

static void probe_devices(void)
{
    cudaError_t err;
    int n = 0;

    err = cudaGetDeviceCount(&n);
    cuda_g.device_count = 0;
    cuda_g.probe_status = KEEL_STATUS_UNAVAILABLE;
    if (err == cudaSuccess && n > 0) {
        if (n > CUDA_MAX_DEVICES) {
            cuda_log(KEEL_LOG_WARN,
                     CUDA_PLUGIN_NAME ": %d devices found, only the first "
                     "%d are used", n,
                     CUDA_MAX_DEVICES);
            n = CUDA_MAX_DEVICES;
        }
        cuda_g.device_count = n;
        cuda_g.probe_status = KEEL_STATUS_OK;
        cuda_g.probe_reason[0] = '\0';
        return;
    }
    if (err == cudaSuccess)
        err = cudaErrorNoDevice;
    else
        (void)cudaGetLastError();

    switch (err) {
    case cudaErrorInsufficientDriver:
        probe_no_driver(err);
        break;
    case cudaErrorNoDevice:
        probe_no_device(err);
        break;
    default:
        snprintf(cuda_g.probe_reason, sizeof(cuda_g.probe_reason),
                 KEEL_GPU_API " runtime unavailable (cudaGetDeviceCount: "
                 "%s: %s)",
                 cudaGetErrorName(err), cudaGetErrorString(err));
        break;
    }
    cuda_log(KEEL_LOG_INFO, CUDA_PLUGIN_NAME ": 0 devices: %s",
             cuda_g.probe_reason);
}

/* The device count never changes during a process (CUDA reads
 * CUDA_VISIBLE_DEVICES once), so the probe runs once. */
static void probe(void)
{
    pthread_once(&cuda_g.probe_once, probe_devices);
}

/* Range check that works before init (count, properties). */
static keel_status device_exists(int32_t device, const char *call)
{
    probe();
    if (device >= 0 && device < cuda_g.device_count)
        return KEEL_STATUS_OK;
    if (cuda_g.device_count == 0)
        return cuda_fail(KEEL_STATUS_INVALID_DEVICE,
                         "%s: gpu:%d does not exist: the plugin has no "
                         "device: %s",
                         call, (int)device, cuda_g.probe_reason);
    return cuda_fail(KEEL_STATUS_INVALID_DEVICE,
                     "%s: gpu:%d does not exist (%d device%s: gpu:0..%d)", call,
                     (int)device, (int)cuda_g.device_count,
                     cuda_g.device_count == 1 ? "" : "s",
                     (int)cuda_g.device_count - 1);
}

/* ---- current device ------------------------------------------------------ */

static cudaError_t use_device_raw(int32_t device)
{
    int cur = -1;

    if (cudaGetDevice(&cur) == cudaSuccess && cur == device)
        return cudaSuccess;
    return cudaSetDevice(device);
}

keel_status cuda_use_device(int32_t device)
{
    return cuda_check(use_device_raw(device), device, "cudaSetDevice(%d)",
                      (int)device);
}

keel_status cuda_check_device(int32_t device, const char *call)
{
    if (!atomic_load_explicit(&cuda_g.initialized, memory_order_acquire)) {
        return cuda_fail(KEEL_STATUS_NOT_INITIALIZED,
                         "%s(gpu:%d): the " CUDA_PLUGIN_NAME " plugin is not initialised%s%s",
                         call, (int)device,
                         cuda_g.probe_reason[0] ? ": " : "",
                         cuda_g.probe_reason);
    }
    return device_exists(device, call);
}

keel_status cuda_enter(int32_t device, const char *call)
{
    keel_status st = cuda_check_device(device, call);

    if (st != KEEL_STATUS_OK)
        return st;
    return cuda_use_device(device);
}

keel_status cuda_device_sync(int32_t device, const char *call)
{
    return cuda_check(cudaDeviceSynchronize(), device,
                      "cudaDeviceSynchronize() before %s", call);
}

static cudaError_t priority_query(int32_t device, int *least, int *greatest)
{
    cudaError_t err;

    if (atomic_load_explicit(&cuda_g.prio_known[device],
                             memory_order_acquire)) {
        *least = cuda_g.prio_least[device];
        *greatest = cuda_g.prio_greatest[device];
        return cudaSuccess;
    }
    err = use_device_raw(device);
    if (err == cudaSuccess)
        err = cudaDeviceGetStreamPriorityRange(least, greatest);
    if (err != cudaSuccess)
        return err;
    /* Two racing threads store the same values. */
    cuda_g.prio_least[device] = *least;
    cuda_g.prio_greatest[device] = *greatest;
    atomic_store_explicit(&cuda_g.prio_known[device], true,
                          memory_order_release);
    return cudaSuccess;
}

keel_status cuda_priority_range(int32_t device, int *least, int *greatest)
{
    return cuda_check(priority_query(device, least, greatest), device,
                      "cudaDeviceGetStreamPriorityRange()");
}

/* Let `from` access memory of `to`; true if the current device changed. */
static bool peer_enable_one(int32_t from, int32_t to)
{
    atomic_uchar *state = &cuda_g.peer[from][to];
    cudaError_t err;
    int can = 0;

    if (atomic_load_explicit(state, memory_order_acquire) !=
        CUDA_PEER_UNKNOWN)
        return false;
    err = cudaDeviceCanAccessPeer(&can, from, to);
    if (err != cudaSuccess || !can) {
        (void)cudaGetLastError();
        atomic_store(state, CUDA_PEER_NONE);
        return false;
    }
    err = use_device_raw(from);
    if (err == cudaSuccess)
        err = cudaDeviceEnablePeerAccess(to, 0);
    if (err == cudaSuccess || err == cudaErrorPeerAccessAlreadyEnabled) {
        atomic_store(state, CUDA_PEER_ENABLED);
    } else {
        cuda_log(KEEL_LOG_DEBUG,
                 CUDA_PLUGIN_NAME ": peer access gpu:%d -> gpu:%d not enabled (%s); "
                 "peer copies are staged",
                 (int)from, (int)to, cudaGetErrorName(err));
        atomic_store(state, CUDA_PEER_NONE);
    }
    (void)cudaGetLastError();
    return true;
}

void cuda_peer_enable(int32_t a, int32_t b, int32_t current)
{
    bool moved;

    if (a == b)
        return;
    moved = peer_enable_one(a, b);
    moved |= peer_enable_one(b, a);
    if (moved && use_device_raw(current) != cudaSuccess)
        (void)cudaGetLastError(); /* the caller's next call reports it */
}

/* ---- device group -------------------------------------------------------- */

static keel_status cuda_init(void)
{
    keel_status st = KEEL_STATUS_OK;

    probe();
    pthread_mutex_lock(&cuda_g.init_lock);
    if (atomic_load(&cuda_g.initialized))
        goto out;
    if (cuda_g.device_count == 0) {
        st = cuda_fail(cuda_g.probe_status, "%s", cuda_g.probe_reason);
        goto out;
    }
    atomic_store_explicit(&cuda_g.initialized, true, memory_order_release);
out:
    pthread_mutex_unlock(&cuda_g.init_lock);
    return st;
}

static void reset_peer_state(void)
{
    for (int i = 0; i < CUDA_MAX_DEVICES; i++) {
        for (int j = 0; j < CUDA_MAX_DEVICES; j++)
            atomic_store(&cuda_g.peer[i][j], CUDA_PEER_UNKNOWN);
    }
}

/*
 * Release what the plugin created, in dependency order. The CUDA contexts
 * themselves stay: other code in the process may share them (no
 * cudaDeviceReset here).
 */
static keel_status cuda_finalize(void)
{
    pthread_mutex_lock(&cuda_g.init_lock);
    if (!atomic_load(&cuda_g.initialized))
        goto out;
#ifdef KEEL_CUDA_HAVE_NCCL
    cuda_collective_finalize();
#else
    gpu_hostcoll_finalize();
#endif
    cuda_stream_finalize();
    cuda_memory_finalize();
    cuda_registry_release(&cuda_g.handles);
    cuda_registry_release(&cuda_g.mem);
    for (int i = 0; i < CUDA_MAX_DEVICES; i++)
        atomic_store(&cuda_g.used[i], 0);
    reset_peer_state();
    atomic_store_explicit(&cuda_g.initialized, false, memory_order_release);
out:
    pthread_mutex_unlock(&cuda_g.init_lock);
    return KEEL_STATUS_OK;
}

static keel_status cuda_get_device_count(int32_t *count)
{
    if (!count)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "get_device_count: count is NULL");
    probe();
    *count = cuda_g.device_count;
    /* OK with 0 devices; the message says why (the core shows it). */
    if (cuda_g.device_count == 0)
        host_set_error(cuda_g.probe_status, cuda_g.probe_reason);
    return KEEL_STATUS_OK;
}

static void copy_str(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);

    if (n >= size)
        n = size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static uint32_t props_features(int32_t device, int32_t *priorities)
{
    uint32_t f = KEEL_FEATURE_ASYNC_COPY | KEEL_FEATURE_PINNED_HOST |
                 KEEL_FEATURE_EVENT_TIMING | KEEL_FEATURE_HOST_CALLBACK;
    int least = 0, greatest = 0, v = 0;

    if (cudaDeviceGetAttribute(&v, cudaDevAttrManagedMemory, device) ==
            cudaSuccess && v)
        f |= KEEL_FEATURE_UNIFIED_MEMORY;
    for (int32_t p = 0; p < cuda_g.device_count; p++) {
        if (p != device && cudaDeviceCanAccessPeer(&v, device, p) ==
                               cudaSuccess && v) {
            f |= KEEL_FEATURE_PEER_ACCESS;
            break;
        }
    }
    *priorities = 1;
    if (priority_query(device, &least, &greatest) == cudaSuccess &&
        least > greatest) {
        f |= KEEL_FEATURE_STREAM_PRIORITY;
        *priorities = least - greatest + 1;
    }
#ifdef KEEL_CUDA_HAVE_NCCL
    f |= KEEL_FEATURE_COLLECTIVES;
#endif
#ifdef KEEL_CUDA_HAVE_KERNELS
    f |= KEEL_FEATURE_KERNELS;
#endif
    (void)cudaGetLastError(); /* optional queries above may have failed */
    return f;
}

static keel_status props_fill(int32_t device, keel_device_props *p)
{
    struct cudaDeviceProp dp;
    int drv = 0, rt = 0, clock = 0;
    char drvstr[192];
    cudaError_t err;

    err = cudaGetDeviceProperties(&dp, device);
    if (err != cudaSuccess)
        return cuda_check(err, device, "cudaGetDeviceProperties(%d)",
                          (int)device);
    copy_str(p->name, sizeof(p->name), dp.name);
    (void)cudaDriverGetVersion(&drv);
    (void)cudaRuntimeGetVersion(&rt);
#ifdef KEEL_GPU_HIP
    /* Hygon's DCUs run the same HIP stack and name themselves. */
    copy_str(p->vendor, sizeof(p->vendor),
             strstr(dp.name, "Hygon") || strstr(dp.name, "DCU") ? "Hygon"
                                                                 : "AMD");
    /* "gfx90a:sramecc+:xnack-": the target without its feature flags. */
    snprintf(p->arch, sizeof(p->arch), "%.*s",
             (int)strcspn(dp.gcnArchName, ":"), dp.gcnArchName);
    /* HIP versions are major * 10^7 + minor * 10^5 + patch. */
    snprintf(drvstr, sizeof(drvstr), "HIP %d.%d; GEMM: %.22s; coll: %.15s", rt / 10000000,
             (rt / 100000) % 100,
#ifdef KEEL_CUDA_HAVE_KERNELS
             ckl_gemm_backend(),
#else
             "none",
#endif
             gpu_coll_backend());
#else
    copy_str(p->vendor, sizeof(p->vendor), "NVIDIA");
    snprintf(p->arch, sizeof(p->arch), "sm_%d%d", dp.major, dp.minor);
    snprintf(drvstr, sizeof(drvstr),
             "CUDA %d.%d driver, runtime %d.%d; coll: %.15s", drv / 1000,
             (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10,
             gpu_coll_backend());
#endif
    copy_str(p->driver_version, sizeof(p->driver_version), drvstr);
    if (cudaDeviceGetPCIBusId(p->bus_id, (int)sizeof(p->bus_id), device) !=
        cudaSuccess)
        p->bus_id[0] = '\0';
    if (cudaDeviceGetAttribute(&clock, cudaDevAttrClockRate, device) !=
            cudaSuccess || clock < 0)
        clock = 0;
    p->total_memory = (uint64_t)dp.totalGlobalMem;
    p->compute_units = (uint32_t)dp.multiProcessorCount;
    p->clock_khz = (uint32_t)clock;
    p->dtype_mask = CUDA_DTYPE_MASK;
    p->features = props_features(device, &p->stream_priorities);
    p->alloc_alignment = CUDA_ALLOC_ALIGNMENT;
    (void)cudaGetLastError();
    return KEEL_STATUS_OK;
}

static keel_status cuda_get_device_props(int32_t device,
                                         keel_device_props *props)
{
    keel_device_props p;
    uint32_t want, fill;
    keel_status st;

    if (!props)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "get_device_props(gpu:%d): props is NULL",
                         (int)device);
    want = props->struct_size;
    if (want < sizeof(props->struct_size))
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "get_device_props(gpu:%d): props->struct_size is "
                         "%" PRIu32 ", set it to sizeof(keel_device_props)",
                         (int)device, want);
    st = device_exists(device, "get_device_props");
    if (st != KEEL_STATUS_OK)
        return st;
    memset(&p, 0, sizeof(p));
    st = props_fill(device, &p);
    if (st != KEEL_STATUS_OK)
        return st;
    fill = want < sizeof(p) ? want : (uint32_t)sizeof(p);
    p.struct_size = fill;
    memcpy(props, &p, fill);
    return KEEL_STATUS_OK;
}

static keel_status cuda_synchronize(int32_t device)
{
    keel_status st = cuda_enter(device, "synchronize");

    if (st != KEEL_STATUS_OK)
        return st;
    return cuda_check(cudaDeviceSynchronize(), device,
                      "cudaDeviceSynchronize()");
}

static const keel_device_ops cuda_device_ops = {
    .header = KEEL_TABLE_HEADER(keel_device_ops),
    .init = cuda_init,
    .finalize = cuda_finalize,
    .get_device_count = cuda_get_device_count,
    .get_device_props = cuda_get_device_props,
    .synchronize = cuda_synchronize,
};

/* ---- entry point --------------------------------------------------------- */

static const keel_plugin_api cuda_plugin_api = {
    .header = KEEL_TABLE_HEADER(keel_plugin_api),
    .name = CUDA_PLUGIN_NAME,
    .version = CUDA_PLUGIN_VERSION,
    .device_type = CUDA_PLUGIN_DEVICE_TYPE,
    .description = CUDA_PLUGIN_DESCRIPTION,
    .device = &cuda_device_ops,
    .memory = &cuda_memory_ops,
    .stream = &cuda_stream_ops,
#ifdef KEEL_CUDA_HAVE_KERNELS
    .kernel = &cuda_kernel_ops,
#else
    .kernel = NULL, /* built without nvcc */
#endif
#ifdef KEEL_CUDA_HAVE_NCCL
    .collective = &cuda_collective_ops,
#else
    .collective = &gpu_hostcoll_ops, /* no NCCL header at build time */
#endif
    .profiler = NULL,
};

KEEL_PLUGIN_EXPORT const keel_plugin_api *
keel_plugin_get_api(uint32_t core_abi_major, uint32_t core_abi_minor,
                    const keel_host_api *host)
{
    cuda_g.host = host;
    if (core_abi_major != KEEL_ABI_VERSION_MAJOR) {
        cuda_fail(KEEL_STATUS_ABI_MISMATCH,
                  "the cuda plugin implements keel device ABI %d.%d; the core "
                  "speaks %" PRIu32 ".%" PRIu32 " (major versions differ)",
                  KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
                  core_abi_major, core_abi_minor);
        return NULL;
    }
    return &cuda_plugin_api;
}
