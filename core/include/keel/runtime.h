/*
 * keel runtime — plugin discovery, the device registry, device selection by
 * name, and thin checked wrappers over the device ABI.
 *
 * The runtime is initialised lazily by the first call that needs it (or
 * explicitly with keel_init()). Discovery searches, in order:
 *   1. KEEL_PLUGIN_PATH: colon-separated entries; a file is loaded as a
 *      plugin, a folder contributes every libkeel-*.so in it (sorted);
 *   2. the build tree, when this libkeel is the one in the build tree;
 *   3. the install directory (<libdir>/keel/plugins).
 * Setting KEEL_PLUGIN_DEFAULT_PATHS=0 disables 2 and 3. The current
 * directory is never searched implicitly.
 *
 * A plugin that fails a check is skipped and kept in the plugin list with
 * the check's name and a precise reason (keel_plugin_info). Every path is
 * resolved to an absolute path once and exactly that file is loaded; a
 * bare file name means a file in the current directory, never a search of
 * the library path. A plugin file or folder that another user could change
 * (writable by everyone, or owned by a user that is neither this one nor
 * root) loads with a warning on stderr, and is refused when
 * KEEL_PLUGIN_STRICT_PERMS=1 or in a setuid/setgid process.
 *
 * A plugin must not call libkeel's public functions from its constructors,
 * entry point, init, get_device_count or finalize (keel holds its registry
 * lock then): such a call fails with KEEL_STATUS_INVALID_STATE (functions
 * that return a count give 0, a pointer NULL) instead of deadlocking. Only
 * the host table is usable there. The check is per thread: plugin code
 * that waits there for another thread calling libkeel still deadlocks.
 *
 * Device names: "<type>", "<type>:<index>", "<plugin>", "<plugin>:<index>",
 * compared case-insensitively. A plugin name wins over a device type of the
 * same spelling. A bare type served by several plugins resolves to the first
 * plugin in discovery order that has at least one device (or, if none has
 * one, the first in discovery order). The index defaults to 0.
 *
 * Errors: every function returning keel_status leaves a thread-local message
 * readable with keel_last_error() when it fails (valid right after that
 * failure; successful calls do not clear it, see keel_last_error()).
 */
#ifndef KEEL_RUNTIME_H
#define KEEL_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <keel/device_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Marks the functions libkeel exports. */
#ifndef KEEL_API
#if defined(__GNUC__) || defined(__clang__)
#define KEEL_API __attribute__((visibility("default")))
#else
#define KEEL_API
#endif
#endif

/* ---- version and errors ------------------------------------------------ */

/** keel's own version ("0.1.0"). */
KEEL_API const char *keel_version(void);

/** Stable name of a status ("KEEL_STATUS_OUT_OF_MEMORY"); never NULL. */
KEEL_API const char *keel_status_name(keel_status status);

/**
 * The error of this thread, errno-style. A keel call that fails (returns a
 * status other than OK, or a NULL / NaN / -1 result documented as an
 * error) sets it to a message naming what was wrong; the message is
 * replaced whole, never appended to. A call that succeeds does not clear
 * it, so:
 *
 *   - read it right after a call that reported a failure, before any
 *     other keel call on this thread: it then describes that failure;
 *   - never use it to find out whether a call failed (after a success it
 *     may still hold the message of an earlier failure, or of a failure
 *     keel recovered from internally); test the returned status;
 *   - keel_clear_error() empties it, if you want a clean slate.
 *
 * The pointer stays valid until the next keel call on this thread. ""
 * when nothing failed since the thread started or the last clear.
 */
KEEL_API const char *keel_last_error(void);

/** Status that goes with keel_last_error(): valid at the same moments
 *  (OK when nothing failed since the thread started or the last clear). */
KEEL_API keel_status keel_last_status(void);

/** Forget this thread's last error: keel_last_error() returns "" and
 *  keel_last_status() OK until the next failure. */
KEEL_API void keel_clear_error(void);

/* ---- lifetime ---------------------------------------------------------- */

/**
 * The most devices one plugin may report. A larger count is taken as a
 * broken plugin (it is skipped, check "device-count"): the largest real
 * machines have a few dozen accelerators, or a few hundred partitions of
 * them, per vendor library, while every device costs the core per-device
 * state (allocator cache, default stream) and a line of `keel devices`.
 */
#define KEEL_MAX_DEVICES_PER_PLUGIN 4096

/**
 * Discover and load plugins. Idempotent and thread-safe; called implicitly
 * by every function below. Returns OK even when no plugin loads (then
 * keel_device_count() is 0 and device names fail with NOT_FOUND).
 */
KEEL_API keel_status keel_init(void);

/**
 * Finalize and unload every plugin. Tensors, streams and memory from the
 * runtime become invalid. A later call re-initialises. Not thread-safe
 * against other runtime calls.
 */
KEEL_API void keel_shutdown(void);

/* ---- plugins ----------------------------------------------------------- */

typedef struct keel_plugin_info {
    /** File the plugin was loaded from. */
    const char *path;
    /** Plugin name, version, device type, description (NULL if unknown). */
    const char *name;
    const char *version;
    const char *device_type;
    const char *description;
    /** ABI version the plugin was built against (0.0 if unknown). */
    uint32_t abi_major;
    uint32_t abi_minor;
    /** true when usable (it may still have 0 devices). */
    bool loaded;
    /** Number of devices (0 when skipped). */
    int32_t device_count;
    /** For a skipped plugin, the check that failed ("dlopen",
     *  "file", "permissions", "entry-symbol", "get-api", "abi-major",
     *  "table-size", "required-function", "identity", "duplicate-name",
     *  "init", "device-count"); NULL when loaded. */
    const char *failed_check;
    /** The status of the failure (OK when loaded). */
    keel_status status;
    /** For a skipped plugin, the whole reason; for a loaded plugin with no
     *  devices, why (e.g. "no CUDA driver"); otherwise NULL. */
    const char *reason;
} keel_plugin_info;

/** Number of plugins found, loaded or skipped. */
KEEL_API int keel_plugin_count(void);

/**
 * Describe plugin `index` (0 <= index < keel_plugin_count()). The strings
 * stay valid until keel_shutdown(). Returns OK, INVALID_ARGUMENT.
 */
KEEL_API keel_status keel_plugin_get_info(int index, keel_plugin_info *info);

/**
 * Load one more plugin from `path` after discovery. `path` is a file path
 * (relative ones are taken from the current directory; no library-path
 * search). Returns OK and its index in *index, or the failing check's
 * status (the plugin is still listed as skipped, and *index names it).
 */
KEEL_API keel_status keel_plugin_load(const char *path, int *index);

/** The raw table of a loaded plugin (normalised to this core's layout:
 *  members the plugin does not provide are NULL). NULL if not loaded. */
KEEL_API const keel_plugin_api *keel_plugin_table(int index);

/* ---- places and device selection --------------------------------------- */

/** A device: plugin index plus device index within the plugin. */
typedef struct keel_place {
    int32_t plugin;
    int32_t device;
} keel_place;

/**
 * Resolve a device name to a place. Returns OK, INVALID_ARGUMENT (NULL,
 * empty or malformed name), NOT_FOUND (no plugin serves the name),
 * INVALID_DEVICE (index out of range). The message says what was asked,
 * what exists, and which skipped plugins might have served it and why.
 */
KEEL_API keel_status keel_place_parse(const char *name, keel_place *place);

/**
 * Canonical name of a place ("cpu:0"; "<plugin>:<n>" when the plugin is not
 * the one the bare type resolves to). Returns OK, INVALID_ARGUMENT.
 */
KEEL_API keel_status keel_place_name(keel_place place, char *buf, size_t size);

/** Select the process-wide current device by name (Paddle's set_device). */
KEEL_API keel_status keel_set_device(const char *name);

/** Canonical name of the current device, or "" when no device exists.
 *  Until keel_set_device() is called the current device is KEEL_DEVICE when
 *  that names a device, else cpu:0 when a CPU device exists, else the first
 *  device found. The string is per thread and valid until the next call. */
KEEL_API const char *keel_get_device(void);

/** The current device as a place. Returns OK, NOT_FOUND (no device). */
KEEL_API keel_status keel_current_place(keel_place *place);

/** Devices served under a type or plugin name (0 for unknown names). */
KEEL_API int keel_device_count(const char *type_or_plugin);

/**
 * true when a loaded plugin serves this type or plugin name, even if it
 * found no device: Paddle's is_compiled_with_cuda(), "this build can use
 * CUDA". With the CUDA plugin installed on a machine without a GPU it is
 * true, so it is the wrong test before selecting a device; use
 * keel_is_available() for that:
 *
 *     if (keel_is_compiled_with("cuda"))   // plugin installed
 *         ...                              // maybe report it
 *     if (keel_is_available("gpu"))        // a GPU is there to use
 *         keel_set_device("gpu");          // cannot fail for lack of one
 */
KEEL_API bool keel_is_compiled_with(const char *type_or_plugin);

/**
 * true when keel_set_device(type_or_plugin) would select a device: the
 * name resolves to a loaded plugin that found at least one device. The
 * same as keel_device_count(type_or_plugin) > 0.
 */
KEEL_API bool keel_is_available(const char *type_or_plugin);

/** Properties of a device (props->struct_size is set by this call). */
KEEL_API keel_status keel_device_get_props(keel_place place, keel_device_props *props);

/** Block until all work on the device has finished. */
KEEL_API keel_status keel_device_synchronize(keel_place place);

/* ---- memory ------------------------------------------------------------ */

KEEL_API keel_status keel_mem_alloc(keel_place place, uint64_t size, keel_dptr *ptr);
KEEL_API keel_status keel_mem_free(keel_place place, keel_dptr ptr);
KEEL_API keel_status keel_mem_host_alloc(keel_place place, uint64_t size, void **ptr);
KEEL_API keel_status keel_mem_host_free(keel_place place, void *ptr);
KEEL_API keel_status keel_mem_unified_alloc(keel_place place, uint64_t size,
                                   keel_dptr *dptr, void **hptr);
KEEL_API keel_status keel_mem_unified_free(keel_place place, keel_dptr dptr);
KEEL_API keel_status keel_mem_set(keel_place place, keel_dptr dst, uint8_t value,
                         uint64_t size);
KEEL_API keel_status keel_mem_set_async(keel_place place, keel_stream stream,
                               keel_dptr dst, uint8_t value, uint64_t size);
KEEL_API keel_status keel_mem_copy_h2d(keel_place place, keel_dptr dst,
                              const void *src, uint64_t size);
KEEL_API keel_status keel_mem_copy_d2h(keel_place place, void *dst, keel_dptr src,
                              uint64_t size);
KEEL_API keel_status keel_mem_copy_d2d(keel_place place, keel_dptr dst, keel_dptr src,
                              uint64_t size);
KEEL_API keel_status keel_mem_copy_h2d_async(keel_place place, keel_stream stream,
                                    keel_dptr dst, const void *src,
                                    uint64_t size);
KEEL_API keel_status keel_mem_copy_d2h_async(keel_place place, keel_stream stream,
                                    void *dst, keel_dptr src, uint64_t size);
KEEL_API keel_status keel_mem_copy_d2d_async(keel_place place, keel_stream stream,
                                    keel_dptr dst, keel_dptr src,
                                    uint64_t size);
/**
 * Copy between any two places, synchronous. Uses the plugin's peer copy
 * when both places belong to one plugin that provides it, else stages
 * through host memory.
 */
KEEL_API keel_status keel_mem_copy_peer(keel_place dst_place, keel_dptr dst,
                               keel_place src_place, keel_dptr src,
                               uint64_t size);
KEEL_API keel_status keel_mem_get_info(keel_place place, keel_memory_info *info);
/**
 * The caller's host memory used in place as device memory (the plugin's
 * memory.register_host, ABI 1.4): *dptr addresses `host` until
 * keel_mem_unregister_host with the same size. NOT_SUPPORTED when the
 * plugin does not provide it. keel_tensor_from_host_memory (tensor.h) is
 * the tensor-level form.
 */
KEEL_API keel_status keel_mem_register_host(keel_place place, void *host,
                                            uint64_t size, keel_dptr *dptr);
KEEL_API keel_status keel_mem_unregister_host(keel_place place, keel_dptr dptr,
                                              uint64_t size);

/* ---- streams and events ------------------------------------------------ */

KEEL_API keel_status keel_stream_create(keel_place place, int32_t priority,
                               keel_stream *stream);
KEEL_API keel_status keel_stream_destroy(keel_place place, keel_stream stream);
KEEL_API keel_status keel_stream_synchronize(keel_place place, keel_stream stream);
/** OK when idle, NOT_READY when busy (NOT_READY sets no error message). */
KEEL_API keel_status keel_stream_query(keel_place place, keel_stream stream);
KEEL_API keel_status keel_stream_wait_event(keel_place place, keel_stream stream,
                                   keel_event event);
KEEL_API keel_status keel_stream_launch_host_func(keel_place place, keel_stream stream,
                                         keel_host_fn fn, void *user_data);
KEEL_API keel_status keel_event_create(keel_place place, keel_event *event);
KEEL_API keel_status keel_event_destroy(keel_place place, keel_event event);
KEEL_API keel_status keel_event_record(keel_place place, keel_event event,
                              keel_stream stream);
/** OK when complete, NOT_READY when pending (NOT_READY sets no message). */
KEEL_API keel_status keel_event_query(keel_place place, keel_event event);
KEEL_API keel_status keel_event_synchronize(keel_place place, keel_event event);
KEEL_API keel_status keel_event_elapsed_ms(keel_place place, keel_event start,
                                  keel_event end, float *ms);

/* ---- collectives --------------------------------------------------------- */

/** A communicator: one rank on one place. */
typedef struct keel_communicator keel_communicator;

/** New unique id from the plugin serving `place` (NOT_SUPPORTED when the
 *  plugin's ids are larger than a keel_comm_id: use the _bytes calls). */
KEEL_API keel_status keel_comm_get_unique_id(keel_place place, keel_comm_id *id);
/** Bytes of the unique ids of the plugin serving `place`: 128
 *  (KEEL_COMM_ID_BYTES) unless the plugin states more (ABI 1.3; HCCL's
 *  are 4,108). Allocate and broadcast that many bytes. */
KEEL_API keel_status keel_comm_id_bytes(keel_place place, uint32_t *bytes);
/** A new unique id of `size` bytes (size must be keel_comm_id_bytes'). */
KEEL_API keel_status keel_comm_get_unique_id_bytes(keel_place place, void *id,
                                                   uint32_t size);
/** keel_comm_init_rank with an id of `size` bytes. */
KEEL_API keel_status keel_comm_init_rank_bytes(keel_place place,
                                               int32_t nranks, const void *id,
                                               uint32_t size, int32_t rank,
                                               keel_communicator **comm);
/** Join as `rank` of `nranks` on `place` (blocks unless inside a group). */
KEEL_API keel_status keel_comm_init_rank(keel_place place, int32_t nranks,
                                const keel_comm_id *id, int32_t rank,
                                keel_communicator **comm);
/** Destroy a communicator (NULL is a no-op). */
KEEL_API keel_status keel_comm_destroy(keel_communicator *comm);
KEEL_API keel_status keel_comm_rank(const keel_communicator *comm, int32_t *rank,
                           int32_t *nranks);
/** The place a communicator's rank lives on. */
KEEL_API keel_place keel_comm_place(const keel_communicator *comm);
KEEL_API keel_status keel_all_reduce(keel_communicator *comm, keel_stream stream,
                            keel_dptr send, keel_dptr recv, uint64_t count,
                            keel_dtype dtype, keel_reduce_op op);
KEEL_API keel_status keel_broadcast(keel_communicator *comm, keel_stream stream,
                           keel_dptr send, keel_dptr recv, uint64_t count,
                           keel_dtype dtype, int32_t root);
KEEL_API keel_status keel_reduce(keel_communicator *comm, keel_stream stream,
                        keel_dptr send, keel_dptr recv, uint64_t count,
                        keel_dtype dtype, keel_reduce_op op, int32_t root);
KEEL_API keel_status keel_all_gather(keel_communicator *comm, keel_stream stream,
                            keel_dptr send, keel_dptr recv, uint64_t count,
                            keel_dtype dtype);
KEEL_API keel_status keel_reduce_scatter(keel_communicator *comm, keel_stream stream,
                                keel_dptr send, keel_dptr recv,
                                uint64_t count, keel_dtype dtype,
                                keel_reduce_op op);
KEEL_API keel_status keel_all_to_all(keel_communicator *comm, keel_stream stream,
                            keel_dptr send, keel_dptr recv, uint64_t count,
                            keel_dtype dtype);
/** All-to-all with a count per peer (MPI's Alltoallv; counts and
 *  displacements in elements, nranks entries each, host memory). On the
 *  plugin's all_to_allv when it has one (ABI 1.3), else composed from
 *  send/recv in one group. */
KEEL_API keel_status keel_all_to_allv(keel_communicator *comm,
                                      keel_stream stream, keel_dptr send,
                                      const uint64_t *send_counts,
                                      const uint64_t *send_displs,
                                      keel_dptr recv,
                                      const uint64_t *recv_counts,
                                      const uint64_t *recv_displs,
                                      keel_dtype dtype);
KEEL_API keel_status keel_send(keel_communicator *comm, keel_stream stream,
                      keel_dptr buf, uint64_t count, keel_dtype dtype,
                      int32_t peer);
KEEL_API keel_status keel_recv(keel_communicator *comm, keel_stream stream,
                      keel_dptr buf, uint64_t count, keel_dtype dtype,
                      int32_t peer);
/** Group brackets, forwarded to the plugin serving `place`. */
KEEL_API keel_status keel_group_start(keel_place place);
KEEL_API keel_status keel_group_end(keel_place place);

#ifdef __cplusplus
}
#endif

#endif /* KEEL_RUNTIME_H */
