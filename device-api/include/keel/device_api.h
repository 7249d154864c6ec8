/*
 * keel device ABI — the contract between the keel core and a device plugin.
 *
 * DESIGN
 *
 * A plugin is a shared library (libkeel-<name>.so) that exports exactly one
 * entry symbol, KEEL_PLUGIN_ENTRY_SYMBOL ("keel_plugin_get_api"). The core
 * dlopen()s the library with RTLD_NOW | RTLD_LOCAL, resolves that symbol and
 * calls it with the core's ABI version and a table of host services. The
 * plugin answers with a pointer to its own, static, read-only table of type
 * keel_plugin_api, or NULL (after reporting why through the host table).
 *
 * Versioning follows the struct_size pattern: every table begins with a
 * keel_table_header holding the size of the table as the plugin compiled it
 * and the ABI version it was compiled against. Within one major version a
 * minor version only appends members at the end of tables and values at the
 * end of enums. The core therefore reads a member only when the member lies
 * entirely inside header.struct_size bytes; a member beyond it, or a NULL
 * function pointer, means "not provided". A newer plugin is loaded by an
 * older core (the core simply never looks past its own sizeof), and an older
 * plugin by a newer core (the newer members are treated as absent). A
 * different major version is refused. See docs/device-abi.md.
 *
 * History: 1.0 the base tables; 1.1 appended keel_memory_ops.copy_peer_async
 * and keel_plugin_api.profiler; 1.2 appended keel_collective_ops.get_caps
 * (what a device's collectives support, keel_collective_caps); 1.3 appended
 * keel_device_ops.set_visible_devices, keel_kernel_args.workspace (scratch
 * memory from the core per launch), and to the collective group ids of a
 * size the plugin states (keel_collective_caps.id_bytes,
 * get_unique_id_bytes, comm_init_rank_bytes) and all_to_allv; 1.4 the
 * feature bit KEEL_FEATURE_HOST_ADDRESSES and keel_memory_ops.register_host
 * / unregister_host (the caller's host memory used in place, no copy).
 * Members are marked with the minor that added them when it is not 0.
 *
 * The calls are grouped in sub-tables, each with its own header so that a
 * group can grow independently and an optional group can be omitted whole:
 *
 *   device      required   count, properties, init/finalize, synchronize
 *   memory      required   device / pinned host / unified memory, memset,
 *                          sync and async copies in every direction, info
 *   stream      required   streams and events
 *   kernel      optional   kernel lookup by op name and dtype
 *   collective  optional   NCCL-shaped communicators and collectives
 *   profiler    optional   range markers and profiling start/stop
 *
 * Reserved for a later minor version: a whole-graph compile/execute group,
 * appended after `profiler`, used by the core only when present.
 *
 * RULES THAT HOLD FOR EVERY CALL
 *
 *  - No global "current device": every call names its device index or a
 *    handle that belongs to one device. Device indices are 0-based and local
 *    to the plugin.
 *  - Every call returns a keel_status. On failure a plugin may attach a
 *    human-readable message with keel_host_api.set_error() before returning;
 *    the core prefixes it with the plugin's name and surfaces both the status
 *    and the message to the user.
 *  - Device memory is addressed by keel_dptr, an integer. The core may add
 *    byte offsets to a keel_dptr and compare them, but never dereferences one;
 *    every access goes through the memory group. 0 is the null address.
 *  - Pointer and count arguments are validated by the plugin: a NULL out
 *    parameter or an out-of-range device gives KEEL_STATUS_INVALID_ARGUMENT or
 *    KEEL_STATUS_INVALID_DEVICE, never a crash.
 *  - Unless a call says otherwise, calls are thread-safe: different host
 *    threads may use the same device and different streams concurrently.
 *    Enqueueing work on one stream from two threads at once is allowed, but
 *    the relative order of their work is then unspecified.
 *  - A NULL keel_stream names the device's default stream, which always
 *    exists and cannot be destroyed.
 *  - "Asynchronous" means: the call enqueues work on the given stream and may
 *    return before the work has run. The work runs after everything enqueued
 *    earlier on the same stream, and source buffers must stay valid and
 *    unmodified until it has run (pinned host memory is recommended).
 *    A plugin may execute asynchronous work eagerly; callers must not rely on
 *    the difference.
 *
 * This header is plain C11 and uses fixed-width integers only.
 */
#ifndef KEEL_DEVICE_API_H
#define KEEL_DEVICE_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Versions and the entry symbol                                             */
/* ------------------------------------------------------------------------ */

/** ABI major version: a change here breaks compatibility. */
#define KEEL_ABI_VERSION_MAJOR 1
/** ABI minor version: a change here only appends. */
#define KEEL_ABI_VERSION_MINOR 4

/** The one symbol every plugin exports. */
#define KEEL_PLUGIN_ENTRY_SYMBOL "keel_plugin_get_api"

/** Visibility attribute for the entry symbol. */
#if defined(__GNUC__) || defined(__clang__)
#define KEEL_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define KEEL_PLUGIN_EXPORT
#endif

/** Maximum rank of a tensor descriptor. */
#define KEEL_MAX_DIMS 8

/** Size in bytes of a keel_comm_id, the fixed-size unique id (NCCL's). A
 *  plugin may state a larger one (keel_collective_caps.id_bytes, ABI 1.3). */
#define KEEL_COMM_ID_BYTES 128
/** Largest unique id a plugin may state (ABI 1.3). */
#define KEEL_COMM_ID_MAX_BYTES 65536

/* ------------------------------------------------------------------------ */
/* Status codes (append-only)                                                */
/* ------------------------------------------------------------------------ */

typedef enum keel_status {
    KEEL_STATUS_OK = 0,
    /** An argument is NULL, negative, too large or inconsistent. */
    KEEL_STATUS_INVALID_ARGUMENT = 1,
    /** A device index is outside [0, device_count). */
    KEEL_STATUS_INVALID_DEVICE = 2,
    /** A handle (stream, event, comm) is not one this plugin created. */
    KEEL_STATUS_INVALID_HANDLE = 3,
    /** An allocation could not be satisfied; the device remains usable. */
    KEEL_STATUS_OUT_OF_MEMORY = 4,
    /** The call, dtype, op or feature is not supported. */
    KEEL_STATUS_NOT_SUPPORTED = 5,
    /** Query only: the work is still pending. Not an error. */
    KEEL_STATUS_NOT_READY = 6,
    /** A bounded wait expired. */
    KEEL_STATUS_TIMEOUT = 7,
    /** The device or driver reported a failure. */
    KEEL_STATUS_DEVICE_ERROR = 8,
    /** The device was used before init or after finalize. */
    KEEL_STATUS_NOT_INITIALIZED = 9,
    /** The driver or runtime the plugin needs is not present. */
    KEEL_STATUS_UNAVAILABLE = 10,
    /** A named thing (device, plugin, kernel, file) does not exist. */
    KEEL_STATUS_NOT_FOUND = 11,
    /** Versions or table sizes are incompatible. */
    KEEL_STATUS_ABI_MISMATCH = 12,
    /** Reading or writing a file failed. */
    KEEL_STATUS_IO_ERROR = 13,
    /** A bug inside keel or the plugin. */
    KEEL_STATUS_INTERNAL = 14,
    /** Data is malformed (a corrupt file, a bad header). */
    KEEL_STATUS_CORRUPT = 15,
    /** The state does not allow the call (e.g. an event never recorded). */
    KEEL_STATUS_INVALID_STATE = 16,
    KEEL_STATUS_COUNT_ /* not a status; grows with the enum */
} keel_status;

/* ------------------------------------------------------------------------ */
/* Data types (append-only)                                                  */
/* ------------------------------------------------------------------------ */

typedef enum keel_dtype {
    KEEL_F32 = 0,
    KEEL_F64 = 1,
    KEEL_F16 = 2,
    KEEL_BF16 = 3,
    KEEL_I8 = 4,
    KEEL_U8 = 5,
    KEEL_I32 = 6,
    KEEL_I64 = 7,
    KEEL_BOOL = 8,
    KEEL_DTYPE_COUNT_ /* not a dtype */
} keel_dtype;

/** Bit for a dtype in keel_device_props.dtype_mask. */
#define KEEL_DTYPE_BIT(dt) (UINT32_C(1) << (uint32_t)(dt))

/* ------------------------------------------------------------------------ */
/* Common types                                                              */
/* ------------------------------------------------------------------------ */

/** An address in a device's memory. Never dereferenced by the core. */
typedef uint64_t keel_dptr;

/** Opaque handles. Each belongs to the device it was created on. */
typedef struct keel_stream_s *keel_stream;
typedef struct keel_event_s *keel_event;
typedef struct keel_comm_s *keel_comm;

/** Header at the start of every table. */
typedef struct keel_table_header {
    /** sizeof() the table as the plugin (or core) compiled it. */
    uint32_t struct_size;
    /** ABI major the table was compiled against. */
    uint16_t abi_major;
    /** ABI minor the table was compiled against. */
    uint16_t abi_minor;
} keel_table_header;

/** Fill a table header with this header's version. */
#define KEEL_TABLE_HEADER(type) \
    { (uint32_t)sizeof(type), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR }

/* ------------------------------------------------------------------------ */
/* Host services: the only way a plugin calls back into the core             */
/* ------------------------------------------------------------------------ */

typedef enum keel_log_level {
    KEEL_LOG_ERROR = 0,
    KEEL_LOG_WARN = 1,
    KEEL_LOG_INFO = 2,
    KEEL_LOG_DEBUG = 3
} keel_log_level;

typedef struct keel_host_api {
    keel_table_header header;
    /**
     * Attach a message to the status the current call is about to return.
     * Thread-safe; the message is copied and kept per host thread until the
     * core reads it. Call it on the thread that made the failing call.
     * For errors inside asynchronous work, record the message and report it
     * from the next synchronizing call on that stream.
     */
    void (*set_error)(keel_status status, const char *message);
    /** Write a log line (filtered by the core's KEEL_LOG_LEVEL). Thread-safe. */
    void (*log)(keel_log_level level, const char *message);
    /** Read an environment setting through the core (may return NULL). */
    const char *(*get_env)(const char *name);
} keel_host_api;

/* ------------------------------------------------------------------------ */
/* Device group (required)                                                   */
/* ------------------------------------------------------------------------ */

/**
 * Feature bits in keel_device_props.features (append-only).
 *
 * KEEL_FEATURE_ASYNC_COPY is a promise about the host thread, not about
 * speed: every call the rules above call asynchronous (the *_async memory
 * calls, memset_async, kernel launches, event_record, stream_wait_event and
 * launch_host_func) returns to its caller without waiting for the work it
 * enqueues, or for earlier work on that stream, to run. Concretely, with a
 * host function still running on a stream (it runs on a plugin thread,
 * never on the thread that enqueued it), the enqueuing calls for that
 * stream return, and stream_query/event_query for work behind it answer
 * NOT_READY, at once. Without the bit the plugin may run asynchronous work
 * eagerly, inside the call that enqueues it (so a host function that waits
 * for its caller would wait forever); callers must then not block a stream
 * on the host. The bit says nothing about synchronous calls, which always
 * wait (memory.copy_* first wait for all work on the device).
 */
enum {
    KEEL_FEATURE_ASYNC_COPY = 1u << 0,     /* async calls never wait: above */
    KEEL_FEATURE_PINNED_HOST = 1u << 1,    /* memory.host_alloc provided  */
    KEEL_FEATURE_UNIFIED_MEMORY = 1u << 2, /* memory.unified_alloc works  */
    KEEL_FEATURE_PEER_ACCESS = 1u << 3,    /* memory.copy_peer works      */
    KEEL_FEATURE_COLLECTIVES = 1u << 4,    /* collective group provided   */
    KEEL_FEATURE_EVENT_TIMING = 1u << 5,   /* event_elapsed_ms works      */
    KEEL_FEATURE_HOST_CALLBACK = 1u << 6,  /* stream.launch_host_func     */
    KEEL_FEATURE_KERNELS = 1u << 7,        /* kernel group provided       */
    KEEL_FEATURE_STREAM_PRIORITY = 1u << 8, /* priorities are honoured    */
    /* ABI 1.4: the device's keel_dptr values are this process's host
     * virtual addresses of the same bytes (a CPU device), so the core may
     * hand them to host code once the work that touches them has
     * finished (DLPack, NumPy views). Never set where an address is a
     * handle or lives in another address space. */
    KEEL_FEATURE_HOST_ADDRESSES = 1u << 9
};

typedef struct keel_device_props {
    /** Set by the caller to sizeof(keel_device_props) before the call;
     *  the plugin fills at most that many bytes and writes back how many. */
    uint32_t struct_size;
    /** Marketing name, NUL-terminated ("NVIDIA H200", "keel CPU 0"). */
    char name[128];
    /** Vendor, NUL-terminated. */
    char vendor[64];
    /** Architecture string ("sm_90", "x86_64", "gfx90a"). */
    char arch[32];
    /** Driver or runtime version string, may be empty. */
    char driver_version[64];
    /** PCI bus id or other stable location, may be empty. */
    char bus_id[32];
    /** Total device memory in bytes (> 0). */
    uint64_t total_memory;
    /** Compute units: SMs, CUs, cores, AI cores (> 0). */
    uint32_t compute_units;
    /** Clock rate in kHz, 0 if unknown. */
    uint32_t clock_khz;
    /** Bitmask of KEEL_DTYPE_BIT(dtype) the device computes with. */
    uint32_t dtype_mask;
    /** Bitmask of KEEL_FEATURE_* bits. */
    uint32_t features;
    /** Alignment in bytes of every pointer memory.alloc returns (power of 2). */
    uint32_t alloc_alignment;
    /** Number of stream priority levels; 1 if priorities are not supported. */
    int32_t stream_priorities;
} keel_device_props;

typedef struct keel_device_ops {
    keel_table_header header;
    /**
     * Initialise the plugin's runtime. Called once after loading, before any
     * other call except get_device_count/get_device_props. A second call
     * without finalize is a no-op returning OK. Not thread-safe against
     * other calls. Returns OK, UNAVAILABLE (no driver: the core keeps the
     * plugin and reports 0 devices), DEVICE_ERROR.
     */
    keel_status (*init)(void);
    /**
     * Release every resource the plugin holds. Handles and memory become
     * invalid. init() may be called again afterwards. Not thread-safe.
     * Returns OK.
     */
    keel_status (*finalize)(void);
    /**
     * Number of devices (>= 0). Callable before init. A plugin whose driver
     * is missing returns OK with *count = 0, and may call set_error (with
     * UNAVAILABLE) to say why: with a count of 0 the core keeps that message
     * as the reason it shows. Returns OK, INVALID_ARGUMENT.
     */
    keel_status (*get_device_count)(int32_t *count);
    /**
     * Fill *props (see keel_device_props.struct_size). Synchronous.
     * Returns OK, INVALID_DEVICE, INVALID_ARGUMENT.
     */
    keel_status (*get_device_props)(int32_t device, keel_device_props *props);
    /**
     * Block until every stream of the device has finished its work.
     * Returns OK, INVALID_DEVICE, NOT_INITIALIZED, or the first error
     * raised by asynchronous work on the device since the last sync.
     */
    keel_status (*synchronize)(int32_t device);
    /* ---- ABI 1.3 ---- */
    /**
     * Optional. Restrict the plugin to `count` of its devices, given by
     * their indices as the plugin numbers them without a restriction (what
     * a vendor's *_VISIBLE_DEVICES variable does): afterwards device i is
     * devices[i], get_device_count answers `count`, and the others are
     * never touched. The core calls it at most once, after loading and
     * before anything but get_device_count (which it uses to check the
     * list: indices in range, no repeats, count >= 1). Returns OK,
     * INVALID_ARGUMENT, INVALID_STATE (after init). A plugin without it
     * cannot be restricted: the core refuses the setting for it and says
     * why (KEEL_VISIBLE_DEVICES, docs/device-abi.md).
     */
    keel_status (*set_visible_devices)(const int32_t *devices, int32_t count);
} keel_device_ops;

/* ------------------------------------------------------------------------ */
/* Memory group (required)                                                   */
/* ------------------------------------------------------------------------ */

typedef struct keel_memory_info {
    uint64_t total; /* bytes the device has                    */
    uint64_t free;  /* bytes currently available to allocate   */
    uint64_t used;  /* bytes held by live plugin allocations   */
} keel_memory_info;

typedef struct keel_memory_ops {
    keel_table_header header;
    /**
     * Allocate `size` bytes of device memory, aligned to
     * props.alloc_alignment. size == 0 returns OK and *ptr == 0; freeing 0 is
     * a no-op. Contents are unspecified. Synchronous, thread-safe.
     * Returns OK, INVALID_DEVICE, INVALID_ARGUMENT, OUT_OF_MEMORY (after
     * which the device remains fully usable).
     */
    keel_status (*alloc)(int32_t device, uint64_t size, keel_dptr *ptr);
    /**
     * Free memory from alloc. Waits for no work: the caller guarantees no
     * pending work uses it. Returns OK, INVALID_DEVICE, INVALID_ARGUMENT
     * (a pointer this device did not allocate, when detectable).
     */
    keel_status (*free)(int32_t device, keel_dptr ptr);
    /**
     * Allocate page-locked host memory usable for fast asynchronous copies
     * to and from `device`. size == 0 gives *ptr == NULL. Optional (NULL if
     * KEEL_FEATURE_PINNED_HOST is off). Returns OK, INVALID_DEVICE,
     * INVALID_ARGUMENT, OUT_OF_MEMORY.
     */
    keel_status (*host_alloc)(int32_t device, uint64_t size, void **ptr);
    /** Free host_alloc memory. Returns OK, INVALID_ARGUMENT. Optional. */
    keel_status (*host_free)(int32_t device, void *ptr);
    /**
     * Allocate memory reachable both as a device address (*dptr) and from
     * the host (*hptr). Optional (KEEL_FEATURE_UNIFIED_MEMORY). Host access
     * must not race with device work. Returns OK, INVALID_DEVICE,
     * INVALID_ARGUMENT, OUT_OF_MEMORY.
     */
    keel_status (*unified_alloc)(int32_t device, uint64_t size, keel_dptr *dptr,
                                 void **hptr);
    /** Free unified_alloc memory (by its device address). Optional. */
    keel_status (*unified_free)(int32_t device, keel_dptr dptr);
    /**
     * Set `size` bytes at dst to `value`. Synchronous with respect to the
     * host: waits for the device's default ordering (all streams) to reach
     * this point. Returns OK, INVALID_DEVICE, INVALID_ARGUMENT.
     */
    keel_status (*memset)(int32_t device, keel_dptr dst, uint8_t value,
                          uint64_t size);
    /** Asynchronous memset on `stream`. Returns as memset plus INVALID_HANDLE. */
    keel_status (*memset_async)(int32_t device, keel_stream stream,
                                keel_dptr dst, uint8_t value, uint64_t size);
    /**
     * Synchronous copies: return when the bytes have arrived. They first wait
     * for all work previously enqueued on the device. size == 0 is a no-op.
     * Ranges must not overlap for d2d. Return OK, INVALID_DEVICE,
     * INVALID_ARGUMENT, DEVICE_ERROR.
     */
    keel_status (*copy_h2d)(int32_t device, keel_dptr dst, const void *src,
                            uint64_t size);
    keel_status (*copy_d2h)(int32_t device, void *dst, keel_dptr src,
                            uint64_t size);
    keel_status (*copy_d2d)(int32_t device, keel_dptr dst, keel_dptr src,
                            uint64_t size);
    /**
     * Asynchronous copies on `stream` (see the header comment). Also return
     * INVALID_HANDLE for a stream of another device.
     */
    keel_status (*copy_h2d_async)(int32_t device, keel_stream stream,
                                  keel_dptr dst, const void *src,
                                  uint64_t size);
    keel_status (*copy_d2h_async)(int32_t device, keel_stream stream, void *dst,
                                  keel_dptr src, uint64_t size);
    keel_status (*copy_d2d_async)(int32_t device, keel_stream stream,
                                  keel_dptr dst, keel_dptr src, uint64_t size);
    /**
     * Copy between two devices of this plugin, synchronous. Optional
     * (KEEL_FEATURE_PEER_ACCESS); without it the core stages through the
     * host. Returns OK, INVALID_DEVICE, INVALID_ARGUMENT, NOT_SUPPORTED.
     */
    keel_status (*copy_peer)(int32_t dst_device, keel_dptr dst,
                             int32_t src_device, keel_dptr src, uint64_t size);
    /** Memory totals. Synchronous, thread-safe. Returns OK, INVALID_DEVICE. */
    keel_status (*get_memory_info)(int32_t device, keel_memory_info *info);
    /* ---- ABI 1.1 ---- */
    /** Asynchronous peer copy, ordered on a stream of src_device. Optional. */
    keel_status (*copy_peer_async)(int32_t dst_device, keel_dptr dst,
                                   int32_t src_device, keel_dptr src,
                                   uint64_t size, keel_stream src_stream);
    /* ---- ABI 1.4 ---- */
    /**
     * Make `size` bytes (> 0) of the caller's host memory at `host` usable
     * as device memory of `device` in place, without a copy, until
     * unregister_host: *dptr addresses the first byte, in every call that
     * takes a keel_dptr (kernels, copies, memset), and with
     * KEEL_FEATURE_HOST_ADDRESSES *dptr == (keel_dptr)(uintptr_t)host. The
     * memory stays the caller's: the plugin never frees it, and `free`
     * refuses the address. The caller keeps it alive and waits for the
     * device's work on it before unregistering. Optional; synchronous.
     * Returns OK, INVALID_DEVICE, INVALID_ARGUMENT (NULL host or dptr, size
     * 0), NOT_SUPPORTED, OUT_OF_MEMORY.
     */
    keel_status (*register_host)(int32_t device, void *host, uint64_t size,
                                 keel_dptr *dptr);
    /** End one registration: the address register_host gave and the same
     *  size. Registrations may overlap and repeat (one host array used
     *  twice); each is ended by its own call. The plugin forgets the
     *  range; the memory is untouched. Returns OK, INVALID_DEVICE,
     *  INVALID_ARGUMENT (no such registration). */
    keel_status (*unregister_host)(int32_t device, keel_dptr dptr,
                                   uint64_t size);
} keel_memory_ops;

/* ------------------------------------------------------------------------ */
/* Stream and event group (required)                                         */
/* ------------------------------------------------------------------------ */

/** Host function run in stream order by launch_host_func. */
typedef void (*keel_host_fn)(void *user_data);

typedef struct keel_stream_ops {
    keel_table_header header;
    /**
     * Create a stream on `device`. priority: 0 is the default; a lower value
     * is a higher priority; values are clamped to the supported range.
     * Returns OK, INVALID_DEVICE, INVALID_ARGUMENT, OUT_OF_MEMORY.
     */
    keel_status (*stream_create)(int32_t device, int32_t priority,
                                 keel_stream *stream);
    /**
     * Destroy a stream after its pending work has finished (waits).
     * Returns OK, INVALID_DEVICE, INVALID_HANDLE.
     */
    keel_status (*stream_destroy)(int32_t device, keel_stream stream);
    /**
     * Block until all work on the stream has run. Returns OK, INVALID_DEVICE,
     * INVALID_HANDLE, or the first error of the stream's async work.
     */
    keel_status (*stream_synchronize)(int32_t device, keel_stream stream);
    /**
     * Non-blocking: OK when all work on the stream has run, NOT_READY
     * otherwise. Returns also INVALID_DEVICE, INVALID_HANDLE.
     */
    keel_status (*stream_query)(int32_t device, keel_stream stream);
    /**
     * Make future work on `stream` wait until `event` has completed (its
     * last record). An event never recorded is complete. The event may
     * belong to any device of this plugin. Does not block the host.
     * Returns OK, INVALID_DEVICE, INVALID_HANDLE.
     */
    keel_status (*stream_wait_event)(int32_t device, keel_stream stream,
                                     keel_event event);
    /**
     * Run fn(user_data) on a host thread after all earlier work on the
     * stream; later work waits for it. fn must not call into the plugin.
     * Each launched function runs exactly once. Optional
     * (KEEL_FEATURE_HOST_CALLBACK). Returns OK, INVALID_DEVICE,
     * INVALID_HANDLE, INVALID_ARGUMENT.
     */
    keel_status (*launch_host_func)(int32_t device, keel_stream stream,
                                    keel_host_fn fn, void *user_data);
    /**
     * Create an event. Returns OK, INVALID_DEVICE, INVALID_ARGUMENT,
     * OUT_OF_MEMORY.
     */
    keel_status (*event_create)(int32_t device, keel_event *event);
    /** Destroy an event (pending records may still complete). */
    keel_status (*event_destroy)(int32_t device, keel_event event);
    /**
     * Record the event on `stream`: it completes when all work enqueued on
     * the stream before it has run, and takes a timestamp then.
     * Re-recording replaces the previous record. Asynchronous.
     * Returns OK, INVALID_DEVICE, INVALID_HANDLE.
     */
    keel_status (*event_record)(int32_t device, keel_event event,
                                keel_stream stream);
    /**
     * Non-blocking: OK if the last record has completed (or there was none),
     * NOT_READY otherwise. Returns also INVALID_DEVICE, INVALID_HANDLE.
     */
    keel_status (*event_query)(int32_t device, keel_event event);
    /** Block until the last record completes. Returns OK, INVALID_*. */
    keel_status (*event_synchronize)(int32_t device, keel_event event);
    /**
     * Milliseconds between two completed records (end - start, >= 0 when
     * end was recorded after start on one stream). Optional
     * (KEEL_FEATURE_EVENT_TIMING). Returns OK, INVALID_DEVICE,
     * INVALID_HANDLE, NOT_READY (a record pending), INVALID_STATE (an event
     * never recorded), INVALID_ARGUMENT.
     */
    keel_status (*event_elapsed_ms)(int32_t device, keel_event start,
                                    keel_event end, float *ms);
} keel_stream_ops;

/* ------------------------------------------------------------------------ */
/* Kernel group (optional)                                                   */
/* ------------------------------------------------------------------------ */

/**
 * A tensor as a kernel sees it. data points at element [0,...,0] (the core
 * has applied the view's offset). Strides are in elements and may be 0
 * (broadcast) or, for views, any value; shape entries may be 0 (empty).
 * ndim == 0 is a scalar with one element.
 */
typedef struct keel_tensor_desc {
    keel_dptr data;
    keel_dtype dtype;
    int32_t ndim;
    int64_t shape[KEEL_MAX_DIMS];
    int64_t strides[KEEL_MAX_DIMS];
} keel_tensor_desc;

/** Attribute value types (append-only). */
typedef enum keel_attr_type {
    KEEL_ATTR_INT = 0,
    KEEL_ATTR_FLOAT = 1,
    KEEL_ATTR_BOOL = 2,
    KEEL_ATTR_STRING = 3,
    KEEL_ATTR_INTS = 4,
    KEEL_ATTR_FLOATS = 5,
    KEEL_ATTR_DTYPE = 6
} keel_attr_type;

/**
 * A named, typed attribute. Kernels look attributes up by name, so an op
 * gaining an attribute never changes this struct; a kernel that does not
 * know an attribute ignores it, and one that misses an attribute uses the
 * catalog default.
 */
typedef struct keel_attr {
    const char *name;
    keel_attr_type type;
    union {
        int64_t i;      /* INT, BOOL (0/1), DTYPE (a keel_dtype) */
        double f;       /* FLOAT */
        const char *s;  /* STRING, NUL-terminated */
        struct {
            const int64_t *data;
            int64_t count;
        } ints;         /* INTS */
        struct {
            const double *data;
            int64_t count;
        } floats;       /* FLOATS */
    } v;
} keel_attr;

/** Everything one kernel launch needs. */
typedef struct keel_kernel_args {
    uint32_t struct_size; /* sizeof(keel_kernel_args) as the core built it;
                             at least KEEL_KERNEL_ARGS_MIN_SIZE */
    int32_t device;
    keel_stream stream;
    const keel_tensor_desc *inputs;
    int32_t num_inputs;
    const keel_tensor_desc *outputs;
    int32_t num_outputs;
    const keel_attr *attrs;
    int32_t num_attrs;
    /* ---- ABI 1.3 (read only when struct_size covers them) ---- */
    /**
     * Scratch device memory for this launch (the workspace aclnn or CNNL
     * ask for): `bytes` on args->device, for the work this launch enqueues
     * on args->stream. Call it from the kernel, with the args the kernel
     * was given. The core takes every workspace back when the kernel
     * returns, and hands that memory out again only for work enqueued
     * later on the same stream, so the enqueued work may still use it.
     * bytes 0 gives *ptr = 0. Each call gives a distinct block, aligned
     * like memory.alloc. NULL when the core offers none. Returns OK,
     * OUT_OF_MEMORY, INVALID_ARGUMENT (ptr NULL, or args not the launch's).
     */
    keel_status (*workspace)(const struct keel_kernel_args *args,
                             uint64_t bytes, keel_dptr *ptr);
    /** The core's, for workspace; a plugin never reads it. */
    void *core_data;
} keel_kernel_args;

/** sizeof(keel_kernel_args) before ABI 1.3: a kernel accepts any
 *  struct_size from this up, and reads the 1.3 members only when
 *  struct_size covers them (keel_kernel_workspace does that). */
#define KEEL_KERNEL_ARGS_MIN_SIZE offsetof(keel_kernel_args, workspace)

/** A workspace for this launch, or NOT_SUPPORTED when the core that
 *  launched it offers none (an older core). */
static inline keel_status keel_kernel_workspace(const keel_kernel_args *a,
                                                uint64_t bytes,
                                                keel_dptr *ptr)
{
    if (a->struct_size < offsetof(keel_kernel_args, core_data) +
                             sizeof(void *) ||
        !a->workspace)
        return KEEL_STATUS_NOT_SUPPORTED;
    return a->workspace(a, bytes, ptr);
}

/**
 * A kernel: enqueue the op on args->stream. Asynchronous. `args`, the
 * descriptors and the attributes (names and array payloads included) are
 * valid only during the call: a kernel that runs later must copy what it
 * needs. The device memory the descriptors point at stays valid until the
 * enqueued work has run. Returns OK,
 * INVALID_ARGUMENT (descriptors inconsistent with the op), NOT_SUPPORTED
 * (a layout or attribute value this kernel does not handle; the core may
 * fall back), DEVICE_ERROR.
 */
typedef keel_status (*keel_kernel_fn)(void *kernel_data,
                                      const keel_kernel_args *args);

typedef struct keel_kernel {
    keel_kernel_fn fn;
    /** Passed back to fn; owned by the plugin, valid until finalize. */
    void *kernel_data;
} keel_kernel;

typedef struct keel_kernel_ops {
    keel_table_header header;
    /**
     * Find the kernel for op `op_name` (a name from the op catalog) computing
     * in `dtype` (the catalog says which operand's dtype keys the lookup).
     * The result may be cached by the core for the plugin's lifetime.
     * Thread-safe. Returns OK, NOT_FOUND (no such kernel), INVALID_DEVICE,
     * INVALID_ARGUMENT.
     */
    keel_status (*lookup)(int32_t device, const char *op_name, keel_dtype dtype,
                          keel_kernel *kernel);
} keel_kernel_ops;

/* ------------------------------------------------------------------------ */
/* Collective group (optional)                                               */
/* ------------------------------------------------------------------------ */

/** Reduction operators (append-only). */
typedef enum keel_reduce_op {
    KEEL_REDUCE_SUM = 0,
    KEEL_REDUCE_PROD = 1,
    KEEL_REDUCE_MAX = 2,
    KEEL_REDUCE_MIN = 3,
    KEEL_REDUCE_AVG = 4,
    KEEL_REDUCE_OP_COUNT_
} keel_reduce_op;

/** Collectives, as bits of keel_collective_caps.collectives. */
enum {
    KEEL_COLL_ALL_REDUCE = 1u << 0,
    KEEL_COLL_BROADCAST = 1u << 1,
    KEEL_COLL_REDUCE = 1u << 2,
    KEEL_COLL_ALL_GATHER = 1u << 3,
    KEEL_COLL_REDUCE_SCATTER = 1u << 4,
    KEEL_COLL_ALL_TO_ALL = 1u << 5,
    KEEL_COLL_SEND_RECV = 1u << 6, /* send and recv, inside groups too */
    KEEL_COLL_ALL_TO_ALLV = 1u << 7 /* ABI 1.3 */
};

/** Bit of a reduce op in keel_collective_caps.reduce_ops. */
#define KEEL_REDUCE_OP_BIT(op) (1u << (uint32_t)(op))

/**
 * What the collectives of one device support (ABI 1.2, collective.get_caps).
 * A combination inside the declaration must work: returning NOT_SUPPORTED
 * for it is a bug. Outside it the plugin returns NOT_SUPPORTED (or
 * INVALID_ARGUMENT for values no plugin accepts). A plugin without get_caps
 * declares nothing: callers must assume that any collective, dtype or op may
 * return NOT_SUPPORTED, and find out by calling.
 */
typedef struct keel_collective_caps {
    /** Set by the caller to sizeof(keel_collective_caps); the plugin fills
     *  at most that many bytes and writes back how many it filled. */
    uint32_t struct_size;
    /** KEEL_COLL_* bits of the collectives provided. */
    uint32_t collectives;
    /** KEEL_DTYPE_BIT of the dtypes every provided collective accepts. The
     *  reducing ones (all_reduce, reduce, reduce_scatter) accept each of
     *  them except bool, and KEEL_REDUCE_AVG only for floating dtypes. */
    uint32_t dtype_mask;
    /** KEEL_REDUCE_OP_BIT of the reduce ops the reducing collectives accept. */
    uint32_t reduce_ops;
    /** A collective or comm_init_rank waiting for a rank that never arrives
     *  returns TIMEOUT after about this many milliseconds; 0: waits are not
     *  bounded (they block until the rank arrives). */
    uint32_t timeout_ms;
    /* ---- ABI 1.3 ---- */
    /** Bytes of this plugin's unique id, KEEL_COMM_ID_BYTES (128) or more,
     *  at most KEEL_COMM_ID_MAX_BYTES; 0 or not filled: 128. Above 128
     *  the plugin provides get_unique_id_bytes and comm_init_rank_bytes,
     *  and its fixed-size get_unique_id/comm_init_rank return
     *  NOT_SUPPORTED (HCCL's root info, for one, is 4,108 bytes). */
    uint32_t id_bytes;
} keel_collective_caps;

/** Opaque bootstrap token shared by all ranks of one communicator. */
typedef struct keel_comm_id {
    uint8_t bytes[KEEL_COMM_ID_BYTES];
} keel_comm_id;

/*
 * Semantics follow NCCL: each rank issues the same collectives in the same
 * order; calls are asynchronous on the given stream of the rank's device.
 * One host thread driving several ranks must bracket their calls with
 * group_start/group_end, or the first call may wait for ranks that were
 * never reached. Counts are in elements of `dtype`; count 0 is allowed.
 * All calls return OK, INVALID_ARGUMENT, INVALID_HANDLE, NOT_SUPPORTED
 * (dtype or op), NOT_INITIALIZED (before init), TIMEOUT (a rank never
 * arrived, when the plugin bounds the wait), NOT_READY (a non-blocking
 * communicator still in progress), DEVICE_ERROR.
 */
typedef struct keel_collective_ops {
    keel_table_header header;
    /** Create a new unique id (rank 0 makes it and shares it). */
    keel_status (*get_unique_id)(keel_comm_id *id);
    /**
     * Join communicator `id` as `rank` of `nranks` on `device`. Blocks until
     * every rank has joined (unless inside a group, where group_end does).
     */
    keel_status (*comm_init_rank)(int32_t device, int32_t nranks,
                                  const keel_comm_id *id, int32_t rank,
                                  keel_comm *comm);
    /** Free a communicator. Waits for its pending work. */
    keel_status (*comm_destroy)(keel_comm comm);
    /** Rank and size of a communicator. */
    keel_status (*comm_rank)(keel_comm comm, int32_t *rank, int32_t *nranks);
    /** recv[i] = op over ranks of send[i]; in place allowed (send == recv). */
    keel_status (*all_reduce)(keel_comm comm, keel_stream stream,
                              keel_dptr send, keel_dptr recv, uint64_t count,
                              keel_dtype dtype, keel_reduce_op op);
    /** Every rank's buf receives root's buf. */
    keel_status (*broadcast)(keel_comm comm, keel_stream stream,
                             keel_dptr send, keel_dptr recv, uint64_t count,
                             keel_dtype dtype, int32_t root);
    /** root's recv receives the reduction; other ranks' recv is untouched. */
    keel_status (*reduce)(keel_comm comm, keel_stream stream, keel_dptr send,
                          keel_dptr recv, uint64_t count, keel_dtype dtype,
                          keel_reduce_op op, int32_t root);
    /** recv (nranks*count) = concat of every rank's send (count), rank order. */
    keel_status (*all_gather)(keel_comm comm, keel_stream stream,
                              keel_dptr send, keel_dptr recv, uint64_t count,
                              keel_dtype dtype);
    /** send has nranks*count; rank r's recv (count) = op over block r. */
    keel_status (*reduce_scatter)(keel_comm comm, keel_stream stream,
                                  keel_dptr send, keel_dptr recv,
                                  uint64_t count, keel_dtype dtype,
                                  keel_reduce_op op);
    /** send/recv have nranks*count; block j of rank i's send lands in block i
     *  of rank j's recv. */
    keel_status (*all_to_all)(keel_comm comm, keel_stream stream,
                              keel_dptr send, keel_dptr recv, uint64_t count,
                              keel_dtype dtype);
    /** Point to point; a send to peer matches that peer's recv from us. */
    keel_status (*send)(keel_comm comm, keel_stream stream, keel_dptr buf,
                        uint64_t count, keel_dtype dtype, int32_t peer);
    keel_status (*recv)(keel_comm comm, keel_stream stream, keel_dptr buf,
                        uint64_t count, keel_dtype dtype, int32_t peer);
    /** Bracket calls issued by one thread for several ranks. Nestable. */
    keel_status (*group_start)(void);
    keel_status (*group_end)(void);
    /* ---- ABI 1.2 ---- */
    /**
     * Describe what `device`'s collectives support (keel_collective_caps).
     * Synchronous, callable before init. Optional: absent (NULL, or past
     * the table's struct_size) means "not declared". Returns OK,
     * INVALID_DEVICE, INVALID_ARGUMENT (caps NULL or its struct_size
     * smaller than 4).
     */
    keel_status (*get_caps)(int32_t device, keel_collective_caps *caps);
    /* ---- ABI 1.3 ---- */
    /**
     * Unique ids of the size the plugin states (caps.id_bytes): fill
     * `size` bytes of `id`. `size` must equal the stated size (128 when
     * none is stated). Required when id_bytes > 128, optional otherwise.
     * Returns as get_unique_id, and INVALID_ARGUMENT for another size.
     */
    keel_status (*get_unique_id_bytes)(uint8_t *id, uint32_t size);
    /** comm_init_rank with an id of `size` bytes (as get_unique_id_bytes). */
    keel_status (*comm_init_rank_bytes)(int32_t device, int32_t nranks,
                                        const uint8_t *id, uint32_t size,
                                        int32_t rank, keel_comm *comm);
    /**
     * All-to-all with a count per peer (MPI's Alltoallv): rank i sends
     * send_counts[j] elements starting at element send_displs[j] of `send`
     * to rank j, and receives recv_counts[j] elements from rank j into
     * element recv_displs[j] onwards of `recv`. The arrays hold nranks
     * entries in host memory, read during the call only; send_counts[j]
     * on rank i must equal recv_counts[i] on rank j (else INVALID_ARGUMENT
     * on the ranks that can tell). Receive elements outside the blocks are
     * left alone. Optional (caps bit KEEL_COLL_ALL_TO_ALLV); without it the
     * core composes it from grouped send/recv.
     */
    keel_status (*all_to_allv)(keel_comm comm, keel_stream stream,
                               keel_dptr send, const uint64_t *send_counts,
                               const uint64_t *send_displs, keel_dptr recv,
                               const uint64_t *recv_counts,
                               const uint64_t *recv_displs, keel_dtype dtype);
} keel_collective_ops;

/* ------------------------------------------------------------------------ */
/* Profiler group (optional)                                                 */
/* ------------------------------------------------------------------------ */

typedef struct keel_profiler_ops {
    keel_table_header header;
    /** Begin collecting device activity. Returns OK, NOT_SUPPORTED. */
    keel_status (*start)(int32_t device);
    /** Stop collecting. Returns OK, INVALID_STATE (not started). */
    keel_status (*stop)(int32_t device);
    /** Open a named range on the calling thread (NVTX/roctx style). */
    keel_status (*range_push)(const char *name);
    /** Close the innermost range. Returns OK, INVALID_STATE. */
    keel_status (*range_pop)(void);
} keel_profiler_ops;

/* ------------------------------------------------------------------------ */
/* The plugin table                                                          */
/* ------------------------------------------------------------------------ */

typedef struct keel_plugin_api {
    keel_table_header header;
    /** Short lower-case name, unique among plugins ("cpu", "cuda"). */
    const char *name;
    /** The plugin's own version string ("1.2.0"). */
    const char *version;
    /**
     * The device type it serves ("cpu", "gpu", "npu", "xpu", "mlu", or a
     * custom type). Users select "<type>:<index>" or "<name>:<index>".
     */
    const char *device_type;
    /** One line for humans ("Reference CPU backend on OpenBLAS"). */
    const char *description;
    /** Required groups. */
    const keel_device_ops *device;
    const keel_memory_ops *memory;
    const keel_stream_ops *stream;
    /** Optional groups (NULL when not provided). */
    const keel_kernel_ops *kernel;
    const keel_collective_ops *collective;
    /* ---- ABI 1.1 ---- */
    const keel_profiler_ops *profiler;
} keel_plugin_api;

/**
 * The entry point. The core passes its ABI version and its host table.
 * A plugin may refuse an ABI it does not support by calling
 * host->set_error(KEEL_STATUS_ABI_MISMATCH, ...) and returning NULL.
 * The returned table and everything it points to must stay valid until the
 * library is unloaded. Called once per load, from one thread.
 */
typedef const keel_plugin_api *(*keel_plugin_get_api_fn)(
    uint32_t core_abi_major, uint32_t core_abi_minor,
    const keel_host_api *host);

/** Prototype for plugins to implement. */
KEEL_PLUGIN_EXPORT const keel_plugin_api *keel_plugin_get_api(
    uint32_t core_abi_major, uint32_t core_abi_minor,
    const keel_host_api *host);

/** Size of a dtype in bytes (bool is 1 byte). 0 for an unknown value. */
static inline uint32_t keel_dtype_size(keel_dtype dt)
{
    switch (dt) {
    case KEEL_F64:
    case KEEL_I64:
        return 8;
    case KEEL_F32:
    case KEEL_I32:
        return 4;
    case KEEL_F16:
    case KEEL_BF16:
        return 2;
    case KEEL_I8:
    case KEEL_U8:
    case KEEL_BOOL:
        return 1;
    default:
        return 0;
    }
}

#ifdef __cplusplus
}
#endif

#endif /* KEEL_DEVICE_API_H */
