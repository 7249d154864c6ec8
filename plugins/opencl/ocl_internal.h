/*
 * keel OpenCL plugin — internal interfaces shared by the plugin's files.
 *
 * DESIGN
 *
 * The plugin implements the keel device ABI on OpenCL 1.2+ through the ICD
 * loader (libOpenCL.so.1, ocl-icd on Debian), so it serves whatever OpenCL
 * platforms are installed: PoCL on a CPU, Intel's compute runtime, Mali,
 * Adreno, ROCm's OpenCL.
 *
 *   ocl_plugin.c      entry point, identity, probe, device group, errors
 *   ocl_memory.c      memory group and the address table (below)
 *   ocl_stream.c      streams (in-order command queues), events, host
 *                     functions
 *   ocl_collective.c  collectives in one process across the devices
 *   kernels/          kernel group: program build and cache, launch
 *                     helpers (ok.h), one host file per op family; the
 *                     OpenCL C sources live in plugins/clkernels/, shared
 *                     with the Level Zero plugin
 *
 * Devices. Every device of every platform (CL_DEVICE_TYPE_ALL), in
 * platform order, is one keel device; KEEL_OPENCL_PLATFORM=<substring>
 * keeps only platforms whose name contains it. Each device has its own
 * context (so a device can be finalised alone and a context failure stays
 * local); copies between devices go through the host.
 *
 * Addresses. keel addresses device memory with an integer to which the
 * core adds byte offsets, while OpenCL 1.2 names memory with cl_mem
 * objects. The plugin keeps an ADDRESS TABLE: allocation k (k >= 1) owns
 * the virtual range [k << OCL_SLOT_SHIFT, (k << OCL_SLOT_SHIFT) + size),
 * so keel_dptr = (slot << 40) | byte offset. Resolving an address is one
 * table read (ocl_resolve), with no search and no per-view object. The
 * alternative, a sub-buffer per view, fails for keel's arbitrary byte
 * offsets: a sub-buffer's origin must be a multiple of
 * CL_DEVICE_MEM_BASE_ADDR_ALIGN (128 bytes on PoCL, 4 KiB on some GPUs),
 * and each would be a driver object to create and release per launch.
 * Kernels therefore take every buffer as (cl_mem, byte offset), see
 * plugins/clkernels/common.cl. Limits: one allocation below 1 TiB, fewer
 * than 2^23 live allocations; both give OUT_OF_MEMORY with a message.
 * Freed slots are reused only after every other slot has been used once,
 * so a stale address reaches a freed slot (INVALID_ARGUMENT), not
 * somebody else's buffer.
 *
 * Streams. A keel stream is an in-order command queue of the stream's
 * device (with CL_QUEUE_PROFILING_ENABLE when the device offers it); the
 * NULL stream is the device's default queue. Events are the cl_event of a
 * marker enqueued on the stream.
 */
#ifndef KEEL_OCL_INTERNAL_H
#define KEEL_OCL_INTERNAL_H

#define CL_TARGET_OPENCL_VERSION 120
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <CL/cl.h>

#include <keel/device_api.h>

#define OCL_MAX_DEVICES 32
#define OCL_SLOT_SHIFT 40
#define OCL_SLOT_MAX ((UINT64_C(1) << 23) - 1)
#define OCL_ALLOC_MAX (UINT64_C(1) << OCL_SLOT_SHIFT)

struct ok_program; /* kernels/ok.h */

/* One OpenCL device. Immutable after probe except where noted. */
struct ocl_device {
    cl_platform_id platform;
    cl_device_id id;
    cl_context ctx;               /* made at init, NULL before      */
    cl_command_queue queue;       /* default stream, made at init   */
    char name[128], vendor[64], version[64], driver[64], platform_name[64];
    uint64_t global_mem, max_alloc;
    uint32_t compute_units, clock_mhz, base_align_bytes;
    size_t max_wg;
    bool fp64, fp16, profiling, unified_host; /* unified_host: the device
                                                 shares host memory */
    /* Kernel state (kernels/), built on the first launch; guarded by mu. */
    pthread_mutex_t mu;
    struct ok_program *prog;
    cl_mem dummy;                 /* 1-byte buffer for NULL addresses */
    atomic_int_least64_t used;    /* bytes allocated through memory.alloc */
    keel_status async_error;      /* first error of async work (callbacks) */
};

struct ocl_state {
    const keel_host_api *host;
    int32_t ndev;
    struct ocl_device dev[OCL_MAX_DEVICES];
    bool probed, inited;
    char why_none[256];           /* reason for 0 devices */
};
extern struct ocl_state ocl_g;

/* ---- errors (ocl_plugin.c) ------------------------------------------------ */

/* Attach a printf-style message to `st` and return it. */
keel_status ocl_fail(keel_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* An OpenCL error code as a status with "<what> on opencl:<dev>: <name>". */
keel_status ocl_check(cl_int err, int32_t device, const char *what);
const char *ocl_err_name(cl_int err);
/* INVALID_DEVICE / NOT_INITIALIZED checks shared by every call. */
keel_status ocl_device_ok(int32_t device);

/* ---- addresses (ocl_memory.c) ------------------------------------------- */

/* Resolve [ptr, ptr + bytes) on `device` to its buffer and byte offset.
 * ptr 0 with bytes 0 resolves to the device's dummy buffer. Returns OK or
 * INVALID_ARGUMENT naming the address (not an allocation of this device,
 * freed, or the range runs past the allocation's end). */
keel_status ocl_resolve(int32_t device, keel_dptr ptr, uint64_t bytes,
                        cl_mem *mem, size_t *offset);

/* ---- streams (ocl_stream.c) -------------------------------------------- */

/* The queue of `stream` on `device` (NULL: the default queue). Returns OK
 * or INVALID_HANDLE. */
keel_status ocl_queue(int32_t device, keel_stream stream,
                      cl_command_queue *q);
/* Finish every queue of the device (synchronous memory calls). */
keel_status ocl_finish_all(int32_t device);

/* ---- tables ----------------------------------------------------------- */

extern const keel_device_ops ocl_device_ops;
extern const keel_memory_ops ocl_memory_ops;
extern const keel_stream_ops ocl_stream_ops;
extern const keel_collective_ops ocl_collective_ops;
extern const keel_kernel_ops ocl_kernel_ops;      /* kernels/ok_program.c */

/* Kernel state of a device: released at finalize (kernels/ok_program.c). */
void ok_device_release(struct ocl_device *d);


/* ---- runtime internals (appended; ocl_plugin.c, ocl_memory.c,
 *      ocl_stream.c, ocl_collective.c) ---------------------------------- */

/* Per-device runtime state beside struct ocl_device (same index).
 * struct ocl_device.dummy is made by init and released by finalize
 * (ocl_plugin.c) after ok_device_release; kernels only use it. */
struct ocl_rt_device {
    cl_command_queue xq;          /* plugin-private queue: worker jobs,
                                     allocation probes                  */
    bool unified_ok;              /* unified_alloc verified at probe
                                     (KEEL_OPENCL_UNIFIED=0: off)       */
    char async_msg[256];          /* message of ocl_g.dev[].async_error */
};
extern struct ocl_rt_device ocl_rt[OCL_MAX_DEVICES];
/* Serialises the registries of streams, events, pinned buffers and the
 * async-error slots. */
extern pthread_mutex_t ocl_reg_lock;

/* Read an environment setting through the host table (may be NULL). */
const char *ocl_env(const char *name);
void ocl_log(keel_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* keel status of an OpenCL error code. */
keel_status ocl_status_of(cl_int err);
/* Record the first error of asynchronous work on `device`; reported (and
 * cleared) by the next synchronize / stream_synchronize / event wait. */
void ocl_async_fail(int32_t device, keel_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
keel_status ocl_async_take(int32_t device);

/* Memory (ocl_memory.c): init/finalize of the address table and the pinned
 * registry; ocl_mem_release_device frees what a device still holds. */
void ocl_mem_release_device(int32_t device);
void ocl_mem_finalize(void);
bool ocl_unified_probe(int32_t device);

/* Streams (ocl_stream.c). */
keel_status ocl_stream_start(void);            /* worker pool          */
void ocl_stream_release_device(int32_t device);
void ocl_stream_stop(void);
/* Run fn(arg) on a plugin worker thread after all work enqueued so far on
 * q (a queue of `device`); later work on q waits until fn has returned.
 * fn never runs on the calling thread nor inside an OpenCL callback. */
keel_status ocl_enqueue_host_job(int32_t device, cl_command_queue q,
                                 void (*fn)(void *), void *arg,
                                 const char *what);

/* Collectives (ocl_collective.c): drop every communicator at finalize. */
void ocl_coll_finalize(void);

#endif /* KEEL_OCL_INTERNAL_H */
