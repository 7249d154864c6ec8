/*
 * keel OpenCL plugin — entry point, identity, probe, device group, errors.
 *
 * See ocl_internal.h for the design. The probe never fails: no ICD, no
 * platform or no device gives 0 devices and a remembered reason, which
 * get_device_count hands to the core with set_error(UNAVAILABLE).
 * init gives every device its own context, a default in-order queue (the
 * NULL stream) and a private queue for the plugin's worker jobs.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ocl_internal.h"
#include "kernels/ok.h"

#define OCL_PLUGIN_NAME "opencl"
#define OCL_PLUGIN_VERSION "0.1.0"
#define OCL_PLUGIN_DESCRIPTION \
    "OpenCL 1.2+ devices through the ICD loader (PoCL, Intel, Mali, ROCm)"
#define OCL_MSG_MAX 768

struct ocl_state ocl_g;
struct ocl_rt_device ocl_rt[OCL_MAX_DEVICES];
pthread_mutex_t ocl_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t ocl_probe_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- host services ------------------------------------------------------- */

#define HOST_HAS(h, m)                                                       \
    ((h) && (h)->header.struct_size >=                                       \
                offsetof(keel_host_api, m) + sizeof((h)->m) &&               \
     (h)->m)

const char *ocl_env(const char *name)
{
    const keel_host_api *h = ocl_g.host;

    if (HOST_HAS(h, get_env))
        return h->get_env(name);
    return getenv(name);
}

void ocl_log(keel_log_level level, const char *fmt, ...)
{
    const keel_host_api *h = ocl_g.host;
    char msg[OCL_MSG_MAX];
    va_list ap;

    if (!HOST_HAS(h, log))
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    h->log(level, msg);
}

/* ---- errors -------------------------------------------------------------- */

keel_status ocl_fail(keel_status st, const char *fmt, ...)
{
    const keel_host_api *h = ocl_g.host;
    char msg[OCL_MSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (HOST_HAS(h, set_error))
        h->set_error(st, msg);
    return st;
}

const char *ocl_err_name(cl_int err)
{
    switch (err) {
#define E(x) case x: return #x;
    E(CL_SUCCESS) E(CL_DEVICE_NOT_FOUND) E(CL_DEVICE_NOT_AVAILABLE)
    E(CL_COMPILER_NOT_AVAILABLE) E(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    E(CL_OUT_OF_RESOURCES) E(CL_OUT_OF_HOST_MEMORY)
    E(CL_PROFILING_INFO_NOT_AVAILABLE) E(CL_MEM_COPY_OVERLAP)
    E(CL_IMAGE_FORMAT_MISMATCH) E(CL_IMAGE_FORMAT_NOT_SUPPORTED)
    E(CL_BUILD_PROGRAM_FAILURE) E(CL_MAP_FAILURE)
    E(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    E(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    E(CL_COMPILE_PROGRAM_FAILURE) E(CL_LINKER_NOT_AVAILABLE)
    E(CL_LINK_PROGRAM_FAILURE) E(CL_DEVICE_PARTITION_FAILED)
    E(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) E(CL_INVALID_VALUE)
    E(CL_INVALID_DEVICE_TYPE) E(CL_INVALID_PLATFORM) E(CL_INVALID_DEVICE)
    E(CL_INVALID_CONTEXT) E(CL_INVALID_QUEUE_PROPERTIES)
    E(CL_INVALID_COMMAND_QUEUE) E(CL_INVALID_HOST_PTR)
    E(CL_INVALID_MEM_OBJECT) E(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
    E(CL_INVALID_IMAGE_SIZE) E(CL_INVALID_SAMPLER) E(CL_INVALID_BINARY)
    E(CL_INVALID_BUILD_OPTIONS) E(CL_INVALID_PROGRAM)
    E(CL_INVALID_PROGRAM_EXECUTABLE) E(CL_INVALID_KERNEL_NAME)
    E(CL_INVALID_KERNEL_DEFINITION) E(CL_INVALID_KERNEL)
    E(CL_INVALID_ARG_INDEX) E(CL_INVALID_ARG_VALUE) E(CL_INVALID_ARG_SIZE)
    E(CL_INVALID_KERNEL_ARGS) E(CL_INVALID_WORK_DIMENSION)
    E(CL_INVALID_WORK_GROUP_SIZE) E(CL_INVALID_WORK_ITEM_SIZE)
    E(CL_INVALID_GLOBAL_OFFSET) E(CL_INVALID_EVENT_WAIT_LIST)
    E(CL_INVALID_EVENT) E(CL_INVALID_OPERATION) E(CL_INVALID_GL_OBJECT)
    E(CL_INVALID_BUFFER_SIZE) E(CL_INVALID_MIP_LEVEL)
    E(CL_INVALID_GLOBAL_WORK_SIZE) E(CL_INVALID_PROPERTY)
    E(CL_INVALID_IMAGE_DESCRIPTOR) E(CL_INVALID_COMPILER_OPTIONS)
    E(CL_INVALID_LINKER_OPTIONS) E(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef E
    case -1001:
        return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
        return "CL_UNKNOWN_ERROR";
    }
}

keel_status ocl_status_of(cl_int err)
{
    switch (err) {
    case CL_SUCCESS:
        return KEEL_STATUS_OK;
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_RESOURCES:
    case CL_OUT_OF_HOST_MEMORY:
    case CL_INVALID_BUFFER_SIZE:
        return KEEL_STATUS_OUT_OF_MEMORY;
    case CL_INVALID_VALUE:
    case CL_INVALID_MEM_OBJECT:
    case CL_INVALID_HOST_PTR:
    case CL_INVALID_ARG_VALUE:
    case CL_INVALID_ARG_SIZE:
    case CL_INVALID_GLOBAL_WORK_SIZE:
    case CL_INVALID_WORK_GROUP_SIZE:
    case CL_INVALID_WORK_ITEM_SIZE:
    case CL_MEM_COPY_OVERLAP:
        return KEEL_STATUS_INVALID_ARGUMENT;
    case CL_INVALID_COMMAND_QUEUE:
    case CL_INVALID_EVENT:
        return KEEL_STATUS_INVALID_HANDLE;
    case CL_INVALID_DEVICE:
        return KEEL_STATUS_INVALID_DEVICE;
    case CL_PROFILING_INFO_NOT_AVAILABLE:
        return KEEL_STATUS_NOT_READY;
    case -1001:
        return KEEL_STATUS_UNAVAILABLE;
    default:
        return KEEL_STATUS_DEVICE_ERROR;
    }
}

keel_status ocl_check(cl_int err, int32_t device, const char *what)
{
    if (err == CL_SUCCESS)
        return KEEL_STATUS_OK;
    return ocl_fail(ocl_status_of(err), "%s on opencl:%d: %s (%d)", what,
                    (int)device, ocl_err_name(err), (int)err);
}

void ocl_async_fail(int32_t device, keel_status st, const char *fmt, ...)
{
    va_list ap;

    if (device < 0 || device >= OCL_MAX_DEVICES || st == KEEL_STATUS_OK)
        return;
    pthread_mutex_lock(&ocl_reg_lock);
    if (ocl_g.dev[device].async_error == KEEL_STATUS_OK) {
        ocl_g.dev[device].async_error = st;
        va_start(ap, fmt);
        vsnprintf(ocl_rt[device].async_msg, sizeof(ocl_rt[device].async_msg),
                  fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&ocl_reg_lock);
}

keel_status ocl_async_take(int32_t device)
{
    char msg[sizeof(ocl_rt[0].async_msg)];
    keel_status st;

    pthread_mutex_lock(&ocl_reg_lock);
    st = ocl_g.dev[device].async_error;
    ocl_g.dev[device].async_error = KEEL_STATUS_OK;
    memcpy(msg, ocl_rt[device].async_msg, sizeof(msg));
    ocl_rt[device].async_msg[0] = '\0';
    pthread_mutex_unlock(&ocl_reg_lock);
    if (st != KEEL_STATUS_OK)
        return ocl_fail(st, "asynchronous work failed: %s", msg);
    return KEEL_STATUS_OK;
}

keel_status ocl_device_ok(int32_t device)
{
    if (device < 0 || device >= ocl_g.ndev)
        return ocl_fail(KEEL_STATUS_INVALID_DEVICE,
                        "device %d does not exist (the opencl plugin has %d "
                        "device%s)",
                        (int)device, (int)ocl_g.ndev,
                        ocl_g.ndev == 1 ? "" : "s");
    if (!ocl_g.inited)
        return ocl_fail(KEEL_STATUS_NOT_INITIALIZED,
                        "opencl:%d used before init or after finalize",
                        (int)device);
    return KEEL_STATUS_OK;
}

/* ---- probe --------------------------------------------------------------- */

static void info_str(cl_device_id d, cl_device_info what, char *dst, size_t n)
{
    size_t got = 0;

    dst[0] = '\0';
    if (clGetDeviceInfo(d, what, n, dst, &got) != CL_SUCCESS) {
        /* Too long for dst: read it whole, keep the head. */
        char *tmp;

        if (clGetDeviceInfo(d, what, 0, NULL, &got) != CL_SUCCESS || !got)
            return;
        tmp = malloc(got);
        if (!tmp)
            return;
        if (clGetDeviceInfo(d, what, got, tmp, NULL) == CL_SUCCESS)
            snprintf(dst, n, "%s", tmp);
        free(tmp);
    }
    dst[n - 1] = '\0';
}

static bool has_extension(cl_device_id d, const char *ext)
{
    size_t n = 0;
    char *s;
    bool found = false;

    if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, 0, NULL, &n) != CL_SUCCESS ||
        !n)
        return false;
    s = malloc(n + 1);
    if (!s)
        return false;
    if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, n, s, NULL) == CL_SUCCESS) {
        size_t len = strlen(ext);

        s[n] = '\0';
        for (char *p = strstr(s, ext); p; p = strstr(p + 1, ext))
            if ((p == s || p[-1] == ' ') && (p[len] == ' ' || !p[len])) {
                found = true;
                break;
            }
    }
    free(s);
    return found;
}

static void probe_device(struct ocl_device *d, cl_platform_id p,
                         cl_device_id id, const char *pname)
{
    cl_ulong u = 0;
    cl_uint v = 0;
    size_t wg = 0;
    cl_bool b = CL_FALSE;
    cl_device_fp_config fp = 0;
    cl_command_queue_properties qp = 0;

    memset(d, 0, sizeof(*d));
    d->platform = p;
    d->id = id;
    snprintf(d->platform_name, sizeof(d->platform_name), "%s", pname);
    info_str(id, CL_DEVICE_NAME, d->name, sizeof(d->name));
    info_str(id, CL_DEVICE_VENDOR, d->vendor, sizeof(d->vendor));
    info_str(id, CL_DEVICE_VERSION, d->version, sizeof(d->version));
    info_str(id, CL_DRIVER_VERSION, d->driver, sizeof(d->driver));
    if (clGetDeviceInfo(id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof(u), &u,
                        NULL) == CL_SUCCESS)
        d->global_mem = u;
    u = 0;
    if (clGetDeviceInfo(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof(u), &u,
                        NULL) == CL_SUCCESS)
        d->max_alloc = u;
    if (!d->max_alloc || d->max_alloc > d->global_mem)
        d->max_alloc = d->global_mem;
    if (clGetDeviceInfo(id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(v), &v,
                        NULL) == CL_SUCCESS)
        d->compute_units = v;
    v = 0;
    if (clGetDeviceInfo(id, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof(v), &v,
                        NULL) == CL_SUCCESS)
        d->clock_mhz = v;
    v = 0;
    if (clGetDeviceInfo(id, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof(v), &v,
                        NULL) == CL_SUCCESS)
        d->base_align_bytes = v / 8;
    if (clGetDeviceInfo(id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(wg), &wg,
                        NULL) == CL_SUCCESS)
        d->max_wg = wg;
    if (clGetDeviceInfo(id, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof(fp), &fp,
                        NULL) != CL_SUCCESS)
        fp = 0;
    d->fp64 = fp != 0 || has_extension(id, "cl_khr_fp64");
    d->fp16 = has_extension(id, "cl_khr_fp16");
    if (clGetDeviceInfo(id, CL_DEVICE_QUEUE_PROPERTIES, sizeof(qp), &qp,
                        NULL) == CL_SUCCESS)
        d->profiling = (qp & CL_QUEUE_PROFILING_ENABLE) != 0;
    if (clGetDeviceInfo(id, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof(b), &b,
                        NULL) == CL_SUCCESS)
        d->unified_host = b == CL_TRUE;
}

static void probe(void)
{
    cl_platform_id plats[16];
    cl_uint np = 0;
    cl_int err;
    const char *filter;
    int skipped = 0;

    pthread_mutex_lock(&ocl_probe_lock);
    if (ocl_g.probed) {
        pthread_mutex_unlock(&ocl_probe_lock);
        return;
    }
    ocl_g.ndev = 0;
    filter = ocl_env("KEEL_OPENCL_PLATFORM");
    if (filter && !*filter)
        filter = NULL;
    err = clGetPlatformIDs(16, plats, &np);
    if (err != CL_SUCCESS || np == 0) {
        snprintf(ocl_g.why_none, sizeof(ocl_g.why_none),
                 "no OpenCL platform (install an ICD such as "
                 "pocl-opencl-icd; clGetPlatformIDs: %s)",
                 err == CL_SUCCESS ? "0 platforms" : ocl_err_name(err));
        goto out;
    }
    if (np > 16)
        np = 16;
    for (cl_uint i = 0; i < np; i++) {
        char pname[64] = "";
        cl_device_id ids[OCL_MAX_DEVICES];
        cl_uint nd = 0;

        (void)clGetPlatformInfo(plats[i], CL_PLATFORM_NAME, sizeof(pname),
                                pname, NULL);
        pname[sizeof(pname) - 1] = '\0';
        if (filter && !strstr(pname, filter)) {
            skipped++;
            continue;
        }
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, OCL_MAX_DEVICES, ids,
                           &nd) != CL_SUCCESS)
            continue;
        if (nd > OCL_MAX_DEVICES)
            nd = OCL_MAX_DEVICES;
        for (cl_uint k = 0; k < nd && ocl_g.ndev < OCL_MAX_DEVICES; k++)
            probe_device(&ocl_g.dev[ocl_g.ndev++], plats[i], ids[k], pname);
    }
    /* Unified memory is verified here, on a scratch context, so that the
     * feature bit is the same before and after init. */
    for (int32_t i = 0; i < ocl_g.ndev; i++) {
        struct ocl_device *d = &ocl_g.dev[i];
        cl_context_properties cp[] = {CL_CONTEXT_PLATFORM,
                                      (cl_context_properties)d->platform, 0};

        ocl_rt[i].unified_ok = false;
        if (!d->unified_host)
            continue;
        d->ctx = clCreateContext(cp, 1, &d->id, NULL, NULL, &err);
        if (!d->ctx)
            continue;
        ocl_rt[i].xq = clCreateCommandQueue(d->ctx, d->id, 0, &err);
        if (ocl_rt[i].xq) {
            ocl_rt[i].unified_ok = ocl_unified_probe(i);
            clReleaseCommandQueue(ocl_rt[i].xq);
            ocl_rt[i].xq = NULL;
        }
        clReleaseContext(d->ctx);
        d->ctx = NULL;
    }
    if (ocl_g.ndev == 0 && skipped)
        snprintf(ocl_g.why_none, sizeof(ocl_g.why_none),
                 "no OpenCL device on a platform whose name contains \"%s\" "
                 "(KEEL_OPENCL_PLATFORM; %u platform(s) installed)",
                 filter, (unsigned)np);
    else if (ocl_g.ndev == 0)
        snprintf(ocl_g.why_none, sizeof(ocl_g.why_none),
                 "no OpenCL device on the %u installed platform(s)",
                 (unsigned)np);
    else
        ocl_g.why_none[0] = '\0';
out:
    ocl_g.probed = true;
    pthread_mutex_unlock(&ocl_probe_lock);
}

/* ---- device group -------------------------------------------------------- */

static void device_release(int32_t i)
{
    struct ocl_device *d = &ocl_g.dev[i];

    if (d->queue)
        clFinish(d->queue);
    if (ocl_rt[i].xq)
        clFinish(ocl_rt[i].xq);
    ocl_stream_release_device(i);
    ocl_mem_release_device(i);
    ok_device_release(d);
    if (d->dummy) {
        clReleaseMemObject(d->dummy);
        d->dummy = NULL;
    }
    if (ocl_rt[i].xq) {
        clReleaseCommandQueue(ocl_rt[i].xq);
        ocl_rt[i].xq = NULL;
    }
    if (d->queue) {
        clReleaseCommandQueue(d->queue);
        d->queue = NULL;
    }
    if (d->ctx) {
        clReleaseContext(d->ctx);
        d->ctx = NULL;
    }
    pthread_mutex_destroy(&d->mu);
}

static keel_status device_init_one(int32_t i)
{
    struct ocl_device *d = &ocl_g.dev[i];
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                     (cl_context_properties)d->platform, 0};
    cl_command_queue_properties qp =
        d->profiling ? CL_QUEUE_PROFILING_ENABLE : 0;
    cl_int err = CL_SUCCESS;

    pthread_mutex_init(&d->mu, NULL);
    atomic_store(&d->used, 0);
    d->async_error = KEEL_STATUS_OK;
    d->prog = NULL;
    ocl_rt[i].async_msg[0] = '\0';
    d->ctx = clCreateContext(props, 1, &d->id, NULL, NULL, &err);
    if (!d->ctx)
        return ocl_check(err ? err : CL_OUT_OF_HOST_MEMORY, i,
                         "init: clCreateContext");
    d->queue = clCreateCommandQueue(d->ctx, d->id, qp, &err);
    if (!d->queue)
        return ocl_check(err, i, "init: clCreateCommandQueue");
    ocl_rt[i].xq = clCreateCommandQueue(d->ctx, d->id, 0, &err);
    if (!ocl_rt[i].xq)
        return ocl_check(err, i, "init: clCreateCommandQueue (private)");
    d->dummy = clCreateBuffer(d->ctx, CL_MEM_READ_WRITE, 1, NULL, &err);
    if (!d->dummy)
        return ocl_check(err, i, "init: clCreateBuffer (1 byte)");
    return KEEL_STATUS_OK;
}

static keel_status ocl_finalize(void);

static keel_status ocl_init(void)
{
    keel_status st;
    int32_t i;

    probe();
    if (ocl_g.inited)
        return KEEL_STATUS_OK;
    if (ocl_g.ndev == 0)
        return ocl_fail(KEEL_STATUS_UNAVAILABLE, "%s", ocl_g.why_none);
    st = ocl_stream_start();
    if (st)
        return st;
    for (i = 0; i < ocl_g.ndev; i++) {
        st = device_init_one(i);
        if (st) {
            for (int32_t k = 0; k <= i; k++)
                device_release(k);
            ocl_stream_stop();
            return st;
        }
    }
    ocl_g.inited = true;
    return KEEL_STATUS_OK;
}

static keel_status ocl_finalize(void)
{
    if (!ocl_g.inited)
        return KEEL_STATUS_OK;
    /* Let work already enqueued (host functions and collectives included)
     * run out before the communicators, the worker pool and the objects
     * go. */
    for (int32_t i = 0; i < ocl_g.ndev; i++)
        (void)ocl_finish_all(i);
    ocl_coll_finalize();
    for (int32_t i = 0; i < ocl_g.ndev; i++)
        device_release(i);
    ocl_stream_stop();
    ocl_mem_finalize();
    ocl_g.inited = false;
    return KEEL_STATUS_OK;
}

static keel_status ocl_get_device_count(int32_t *count)
{
    if (!count)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "get_device_count: count is NULL");
    probe();
    *count = ocl_g.ndev;
    if (ocl_g.ndev == 0)
        (void)ocl_fail(KEEL_STATUS_UNAVAILABLE, "%s", ocl_g.why_none);
    return KEEL_STATUS_OK;
}

static const char *type_name(cl_device_id id)
{
    cl_device_type t = 0;

    if (clGetDeviceInfo(id, CL_DEVICE_TYPE, sizeof(t), &t, NULL) !=
        CL_SUCCESS)
        return "device";
    if (t & CL_DEVICE_TYPE_GPU)
        return "gpu";
    if (t & CL_DEVICE_TYPE_ACCELERATOR)
        return "accelerator";
    if (t & CL_DEVICE_TYPE_CPU)
        return "cpu";
    return "device";
}

static void bus_id_of(const struct ocl_device *d, char *dst, size_t n)
{
    /* cl_khr_pci_bus_info (OpenCL 3.0 extension), when present. */
    struct {
        cl_uint domain, bus, device, function;
    } pci;
    dst[0] = '\0';
    if (clGetDeviceInfo(d->id, 0x410F /* CL_DEVICE_PCI_BUS_INFO_KHR */,
                        sizeof(pci), &pci, NULL) == CL_SUCCESS)
        snprintf(dst, n, "%04x:%02x:%02x.%x", pci.domain & 0xffff,
                 pci.bus & 0xff, pci.device & 0xff, pci.function & 0xf);
}

static uint32_t alignment_of(const struct ocl_device *d)
{
    uint32_t a = d->base_align_bytes;

    if (a < 8)
        a = 8;
    /* A power of two (it is one on every known platform). */
    while (a & (a - 1))
        a &= a - 1;
    return a;
}

static keel_status ocl_get_device_props(int32_t device,
                                        keel_device_props *props)
{
    keel_device_props p;
    const struct ocl_device *d;
    uint32_t want, fill;

    probe();
    if (!props)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "get_device_props: props is NULL");
    if (device < 0 || device >= ocl_g.ndev)
        return ocl_fail(KEEL_STATUS_INVALID_DEVICE,
                        "get_device_props: device %d does not exist (the "
                        "opencl plugin has %d)",
                        (int)device, (int)ocl_g.ndev);
    want = props->struct_size;
    if (want < sizeof(props->struct_size))
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "get_device_props(opencl:%d): props->struct_size is "
                        "%" PRIu32 ", set it to sizeof(keel_device_props)",
                        (int)device, want);
    d = &ocl_g.dev[device];
    memset(&p, 0, sizeof(p));
    snprintf(p.name, sizeof(p.name), "%s", d->name[0] ? d->name : "OpenCL device");
    snprintf(p.vendor, sizeof(p.vendor), "%s", d->vendor);
    {
        /* "OpenCL 3.0 PoCL ..." -> "opencl3.0-cpu" */
        unsigned maj = 0, min = 0;

        if (sscanf(d->version, "OpenCL %u.%u", &maj, &min) == 2)
            snprintf(p.arch, sizeof(p.arch), "opencl%u.%u-%s", maj % 100,
                     min % 100, type_name(d->id));
        else
            snprintf(p.arch, sizeof(p.arch), "opencl-%s", type_name(d->id));
    }
    snprintf(p.driver_version, sizeof(p.driver_version), "%s", d->driver);
    bus_id_of(d, p.bus_id, sizeof(p.bus_id));
    p.total_memory = d->global_mem ? d->global_mem : 1;
    p.compute_units = d->compute_units ? d->compute_units : 1;
    p.clock_khz = d->clock_mhz * 1000u;
    p.dtype_mask = ok_device_dtype_mask(device);
    p.features = KEEL_FEATURE_ASYNC_COPY | KEEL_FEATURE_PINNED_HOST |
                 KEEL_FEATURE_HOST_CALLBACK | KEEL_FEATURE_COLLECTIVES |
                 KEEL_FEATURE_KERNELS | KEEL_FEATURE_PEER_ACCESS;
    if (d->profiling)
        p.features |= KEEL_FEATURE_EVENT_TIMING;
    if (ocl_rt[device].unified_ok)
        p.features |= KEEL_FEATURE_UNIFIED_MEMORY;
    p.alloc_alignment = alignment_of(d);
    p.stream_priorities = 1;
    fill = want < sizeof(p) ? want : (uint32_t)sizeof(p);
    p.struct_size = fill;
    memcpy(props, &p, fill);
    return KEEL_STATUS_OK;
}

static keel_status ocl_synchronize(int32_t device)
{
    keel_status st = ocl_device_ok(device);

    if (st)
        return st;
    st = ocl_finish_all(device);
    if (st)
        return st;
    return ocl_async_take(device);
}

const keel_device_ops ocl_device_ops = {
    .header = KEEL_TABLE_HEADER(keel_device_ops),
    .init = ocl_init,
    .finalize = ocl_finalize,
    .get_device_count = ocl_get_device_count,
    .get_device_props = ocl_get_device_props,
    .synchronize = ocl_synchronize,
};

/* ---- plugin table -------------------------------------------------------- */

static keel_plugin_api ocl_api = {
    .header = KEEL_TABLE_HEADER(keel_plugin_api),
    .name = OCL_PLUGIN_NAME,
    .version = OCL_PLUGIN_VERSION,
    .device_type = "opencl",
    .description = OCL_PLUGIN_DESCRIPTION,
    .device = &ocl_device_ops,
    .memory = &ocl_memory_ops,
    .stream = &ocl_stream_ops,
    .kernel = &ocl_kernel_ops,
    .collective = &ocl_collective_ops,
    .profiler = NULL,
};

KEEL_PLUGIN_EXPORT const keel_plugin_api *
keel_plugin_get_api(uint32_t core_abi_major, uint32_t core_abi_minor,
                    const keel_host_api *host)
{
    const char *gpu;

    ocl_g.host = host;
    if (core_abi_major != KEEL_ABI_VERSION_MAJOR) {
        (void)ocl_fail(KEEL_STATUS_ABI_MISMATCH,
                       "the opencl plugin implements keel ABI %d.%d; the "
                       "core speaks %" PRIu32 ".%" PRIu32,
                       KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
                       core_abi_major, core_abi_minor);
        return NULL;
    }
    /* An alias of "gpu" only when asked: OpenCL devices are often CPUs. */
    gpu = ocl_env("KEEL_OPENCL_AS_GPU");
    ocl_api.device_type = gpu && !strcmp(gpu, "1") ? "gpu" : "opencl";
    return &ocl_api;
}
