/*
 * keel Level Zero plugin (libkeel-xpu.so, plugin "levelzero", device type
 * "xpu") — internal interfaces shared by the plugin's files.
 *
 * DESIGN
 *
 * The plugin implements the keel device ABI on Intel's Level Zero API
 * (ze_api.h, through the loader libze_loader.so.1) for Intel GPUs.
 *
 *   ze_plugin.c      entry point, identity, probe (zeInit, drivers,
 *                    devices), device group, errors, the allocation and
 *                    handle registries, the event allocator
 *   ze_memory.c      memory group (USM device / host / shared)
 *   ze_stream.c      stream and event group, host functions
 *   ze_collective.c  collective group: in one process, across this
 *                    plugin's devices, staged through host memory
 *   ze_kernels.c     the Level Zero backend of the shared OpenCL C kernels
 *                    (plugins/clkernels/host/ok.h): SPIR-V modules,
 *                    launches, scratch buffers
 *
 * Probe. zeInit(ZE_INIT_FLAG_GPU_ONLY) once per process; then every driver
 * (zeDriverGet) and its GPU devices (zeDeviceGet, type GPU). Without a
 * driver the loader answers ZE_RESULT_ERROR_UNINITIALIZED (or no driver):
 * the device count is 0 and the reason is reported with set_error
 * (UNAVAILABLE), which the core shows in `keel devices`.
 *
 * Contexts. One ze_context per driver, shared by that driver's devices.
 *
 * Addresses. A keel_dptr IS the USM device address (zeMemAllocDevice or
 * zeMemAllocShared): kernels receive it as a pointer, copies use it
 * directly. A registry of live allocations (sorted ranges) lets every call
 * check that [dptr, dptr + size) lies inside one allocation of the device,
 * so a foreign or freed pointer gives INVALID_ARGUMENT, never a fault.
 *
 * Streams. Every stream, the default one included, is an immediate command
 * list on the device's compute queue group, in order: with
 * ZE_COMMAND_QUEUE_FLAG_IN_ORDER on a driver of API 1.7 or later, else by
 * a barrier (zeCommandListAppendBarrier) after every command, as commands
 * of one Level Zero command list may otherwise overlap. Appending to a command list is not thread-safe, so each
 * stream has a mutex held only while appending (never while waiting).
 * Completion is observed through events appended on the stream: a sync
 * appends a fresh marker event and waits for it with the mutex released.
 * Synchronous memory calls first wait for every stream of the device, then
 * run on the device's synchronous immediate command list.
 *
 * Events. Level Zero events come from event pools (HOST_VISIBLE |
 * KERNEL_TIMESTAMP for keel events, HOST_VISIBLE for internal markers),
 * handed out by a per-device allocator (ze_ev_get / ze_ev_put). A Level
 * Zero event may still be waited on by a command list after the host is
 * done with it, so events that were exposed to waits are "retired" and
 * destroyed only when the device has been synchronised (ze_ev_retire).
 *
 * Tests. Without an Intel GPU the runtime runs only on a stand-in driver
 * (tests/ze_mock.c, test 'xpu-conform-mock'); see docs/xpu-plugin.md for
 * what has and has not run.
 *
 * Errors. ze_check() maps a ze_result_t and attaches
 *   "<call>(<args>) on xpu:<n>: ZE_RESULT_..."
 * through host->set_error(); ze_fail() attaches a plugin-side message.
 */
#ifndef KEEL_ZE_INTERNAL_H
#define KEEL_ZE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <level_zero/ze_api.h>

#include <keel/device_api.h>

/* Level Zero 1.7's in-order flag; the headers of older loaders (Debian's
 * 1.8.0 loader ships the 1.4 API) lack it. Used only when the driver
 * reports API 1.7 or later (struct ze_device.in_order). */
#ifndef ZE_COMMAND_QUEUE_FLAG_IN_ORDER
#define ZE_COMMAND_QUEUE_FLAG_IN_ORDER ((ze_command_queue_flags_t)ZE_BIT(1))
#endif

/* Devices beyond this are not exposed (logged at probe time). */
#define ZE_MAX_DEVICES 64
#define ZE_MAX_DRIVERS 8

/* Alignment of every allocation (USM allocations are page-aligned in
 * practice; this is what is asked of zeMemAlloc*). */
#define ZE_ALLOC_ALIGNMENT 256u

/* Events per event pool of the allocator. */
#define ZE_POOL_EVENTS 256u

/* ---- registries ---------------------------------------------------------- */

enum ze_kind {
    ZE_KIND_NONE = 0,
    ZE_KIND_DEVICE_MEM,  /* memory.alloc          */
    ZE_KIND_SHARED_MEM,  /* memory.unified_alloc  */
    ZE_KIND_HOST_MEM,    /* memory.host_alloc     */
    ZE_KIND_STREAM,      /* stream_create         */
    ZE_KIND_EVENT,       /* event_create          */
};

struct ze_range {
    uintptr_t base;
    uint64_t size;
    int32_t device;
    int32_t kind; /* enum ze_kind */
};

/* Sorted array of non-overlapping ranges (allocations) or of handles
 * (size 1), with a lock. */
struct ze_rangeset {
    pthread_mutex_t lock;
    struct ze_range *v;
    size_t len, cap;
};

/* 0, or -1 when memory for the table is missing. */
int ze_rs_add(struct ze_rangeset *rs, const struct ze_range *r);
/* The range of `kind` (any memory kind when kind == 0) of `device` (any
 * when < 0) that contains [p, p + size); false when there is none. */
bool ze_rs_find(struct ze_rangeset *rs, uintptr_t p, uint64_t size,
                int32_t device, int32_t kind, struct ze_range *out);
/* Remove the range starting exactly at `base` when its kind and device
 * match (device < 0: any); false otherwise. */
bool ze_rs_take(struct ze_rangeset *rs, uintptr_t base, int32_t kind,
                int32_t device, struct ze_range *out);
/* Remove any one range of `kind`; false when none is left. */
bool ze_rs_pop(struct ze_rangeset *rs, int32_t kind, struct ze_range *out);
void ze_rs_release(struct ze_rangeset *rs);

/* ---- events ------------------------------------------------------------- */

struct ze_pool;

/* One Level Zero event from the allocator. */
struct ze_ev {
    ze_event_handle_t h;
    struct ze_pool *pool;
    uint32_t index;
    struct ze_ev *next; /* retired / deferred lists */
};

/* A fresh, unsignalled event of `device` (timestamp pool when `timing`). */
keel_status ze_ev_get(int32_t device, bool timing, struct ze_ev **out);
/* Destroy now: no command list may still refer to it. */
void ze_ev_put(struct ze_ev *ev);
/* Destroy at the next device synchronize (a command list may still wait
 * on it). */
void ze_ev_retire(int32_t device, struct ze_ev *ev);

/* ---- plugin state ------------------------------------------------------ */

struct keel_stream_s;

/* A scratch buffer released while work may still use it. */
struct ze_deferred {
    void *ptr;
    struct ze_ev *done; /* signalled after the last use */
    struct ze_deferred *next;
};

struct ze_device {
    ze_driver_handle_t driver;
    ze_device_handle_t dev;
    ze_context_handle_t ctx;
    int32_t driver_index;
    ze_device_properties_t props;
    ze_device_compute_properties_t compute;
    ze_device_module_properties_t module;
    uint64_t total_memory;
    uint32_t compute_ordinal; /* queue group with the COMPUTE flag */
    bool fp64, fp16;
    bool in_order; /* the driver has ZE_COMMAND_QUEUE_FLAG_IN_ORDER */
    char name[128];
    char arch[32];
    char driver_version[64];
    char bus_id[32];

    /* the stream list: read-held by a device sync for the whole wait,
     * write-held to link or unlink a stream */
    pthread_rwlock_t streams_lock;
    struct keel_stream_s *def;     /* default stream (made by init)   */
    struct keel_stream_s *streams; /* all live streams, default first */
    pthread_mutex_t mu;            /* everything below */
    ze_command_list_handle_t sync_list; /* synchronous immediate list */
    pthread_mutex_t sync_mu;       /* appends to sync_list            */
    struct ze_pool *pools;         /* event pools, newest first       */
    struct ze_ev *retired;         /* destroyed at the next sync      */
    struct ze_deferred *deferred;  /* scratch frees waiting on events */
    keel_status async_error;       /* first error of async work       */
    char async_msg[512];

    void *kern; /* ze_kernels.c state (struct ze_kstate *) */
};

struct ze_state {
    const keel_host_api *host;

    pthread_once_t probe_once;
    int32_t ndev;
    keel_status probe_status; /* OK, or UNAVAILABLE with probe_reason */
    char probe_reason[400];
    int32_t ndrivers;
    ze_driver_handle_t drivers[ZE_MAX_DRIVERS];
    ze_context_handle_t contexts[ZE_MAX_DRIVERS];
    struct ze_device dev[ZE_MAX_DEVICES];

    pthread_mutex_t init_lock;
    atomic_bool initialized;

    struct ze_rangeset mem;     /* DEVICE_MEM, SHARED_MEM, HOST_MEM */
    struct ze_rangeset handles; /* STREAM, EVENT, COMM (size 1)     */
    _Atomic uint64_t used[ZE_MAX_DEVICES];
};

extern struct ze_state ze_g;

/* ---- handles ------------------------------------------------------------ */

struct ze_hostjob {
    keel_host_fn fn;
    void *user_data;
    struct ze_ev *before; /* signalled on the stream before fn  */
    struct ze_ev *after;  /* signalled by the worker after fn   */
    struct ze_hostjob *next;
};

struct keel_stream_s {
    int32_t device;
    bool is_default;
    ze_command_list_handle_t list; /* immediate, in order */
    pthread_mutex_t mu;            /* appends, marker, enq */
    uint64_t enq;                  /* appends so far        */
    struct ze_ev *marker;          /* stream_query's marker */
    uint64_t marker_enq;           /* enq when it was appended */
    uint64_t done_enq;             /* appends known to have run */
    struct keel_stream_s *next;    /* the device's list     */

    /* host functions: a worker thread, made on first use */
    pthread_mutex_t hmu;
    pthread_cond_t hcv;
    struct ze_hostjob *jobs, *jobs_tail;
    bool worker_started, worker_stop;
    pthread_t worker;
};

struct keel_event_s {
    int32_t device;
    pthread_mutex_t mu;
    struct ze_ev *ev; /* the last record, NULL before the first */
};

/* ---- errors (ze_plugin.c) ---------------------------------------------- */

const char *ze_result_name(ze_result_t r);
keel_status ze_status_of(ze_result_t r);
keel_status ze_fail(keel_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* OK for ZE_RESULT_SUCCESS; otherwise "<what> on xpu:<device>: <name>". */
keel_status ze_check(ze_result_t r, int32_t device, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ze_log(keel_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *ze_env(const char *name);

/* ---- devices (ze_plugin.c) --------------------------------------------- */

/* Initialised and in range; `call` names the ABI call for messages. */
keel_status ze_enter(int32_t device, const char *call);
/* Wait for every stream of the device, then release retired events and
 * deferred frees; returns (and clears) the first async error. */
keel_status ze_device_sync(int32_t device, const char *call);
/* Free deferred scratch buffers whose work has finished (non-blocking). */
void ze_collect_deferred(int32_t device);

/* ---- streams (ze_stream.c) --------------------------------------------- */

/* The stream of `device` behind a keel_stream (NULL: the default stream);
 * INVALID_HANDLE for one that is not a live stream of `device`. */
keel_status ze_stream_resolve(int32_t device, keel_stream stream,
                              const char *call, struct keel_stream_s **out);
/* Lock / unlock a stream for appending (bumps enq). Exactly one command
 * is appended between the two: without in-order lists, unlock appends a
 * barrier after it. */
void ze_stream_lock(struct keel_stream_s *s);
void ze_stream_unlock(struct keel_stream_s *s);
/* Block until the stream's work so far has run. */
keel_status ze_stream_wait(struct keel_stream_s *s, const char *call);
/* Make the default stream and the synchronous list of a device (init). */
keel_status ze_stream_device_init(int32_t device);
/* Destroy every stream and event (finalize). */
void ze_stream_finalize(void);
/* Record an async error of a device (the first one is kept). */
void ze_async_error(int32_t device, keel_status st, const char *msg);

/* ---- memory (ze_memory.c) ---------------------------------------------- */

/* The allocation of `device` (device or shared memory) containing
 * [p, p + size); INVALID_ARGUMENT with a message naming `what`. */
keel_status ze_mem_check(int32_t device, keel_dptr p, uint64_t size,
                         const char *what);
void ze_memory_finalize(void);

/* ---- kernels (ze_kernels.c) ---------------------------------------------- */

void ze_kernels_release(int32_t device);

/* ---- tables ------------------------------------------------------------ */

extern const keel_memory_ops ze_memory_ops;
extern const keel_stream_ops ze_stream_ops;
extern const keel_kernel_ops ze_kernel_ops;
extern const keel_collective_ops ze_collective_ops;
void ze_collective_finalize(void);

#define ZE_PTR(p) ((void *)(uintptr_t)(p))

#endif /* KEEL_ZE_INTERNAL_H */
