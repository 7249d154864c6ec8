/*
 * keel CUDA plugin — internal interfaces shared by the plugin's files.
 *
 * DESIGN
 *
 * The plugin implements the keel device ABI on the CUDA runtime API
 * (cudart, linked statically; see meson.build) and, when the toolkit ships
 * it, on NCCL for the collective group. It is plain C; kernels (nvcc) come
 * later and plug into the same helpers.
 *
 *   cuda_plugin.c      entry point, identity, device group, plugin state,
 *                      error mapping, current device, peer access
 *   cuda_registry.c    the pointer-keyed registry of handles/allocations
 *   cuda_memory.c      memory group
 *   cuda_stream.c      stream and event group
 *   cuda_collective.c  collective group (only with KEEL_CUDA_HAVE_NCCL)
 *
 * State. One process-wide struct cuda_state (the plugin is a singleton by
 * nature: one per dlopen). It holds the host table, the probe result
 * (device count, or why there are none), the init flag and two registries:
 * live allocations (device, unified, pinned host) and live handles
 * (streams, events, communicators). The registries let every call check a
 * pointer or handle without dereferencing it: a handle that is not live, or
 * that belongs to another device, gives INVALID_HANDLE; freeing a pointer
 * the device did not allocate gives INVALID_ARGUMENT. They also let
 * finalize() release everything the plugin created, and give
 * get_memory_info() its "used" figure.
 *
 * Current device. Every call that talks to a device first makes it current
 * with cuda_use_device(). It compares with cudaGetDevice() (a thread-local
 * lookup inside the runtime) rather than a private cache, so it stays right
 * when the application, NCCL or another CUDA runtime in the process changes
 * the current device behind the plugin's back.
 *
 * Streams. A NULL keel_stream is the device's legacy default stream
 * (cudaStreamLegacy), shared by all host threads, so work enqueued on it
 * from different threads is ordered. Streams made by stream_create are
 * cudaStreamNonBlocking: they never synchronise implicitly with the default
 * stream, which is what the ABI asks (streams are independent unless
 * events say otherwise). As a consequence the ABI's synchronous memory
 * calls, which must first wait for all work enqueued on the device, start
 * with cudaDeviceSynchronize() and then run their copy on the default
 * stream and wait for it.
 *
 * Errors. Every failure goes through cuda_check() (a cudaError_t) or
 * cuda_fail() (a plugin-side check): they map the status, clear the
 * runtime's non-sticky "last error" so that it cannot be blamed on a later
 * call, and attach a message through host->set_error():
 *   "<call>(<args>) on gpu:<n>: <cudaGetErrorName>: <cudaGetErrorString>".
 */
#ifndef KEEL_CUDA_INTERNAL_H
#define KEEL_CUDA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel_gpu.h"

#include <keel/device_api.h>

/* Devices beyond this are not exposed (logged at probe time). */
#define CUDA_MAX_DEVICES 64

/* Alignment cudaMalloc guarantees. */
#define CUDA_ALLOC_ALIGNMENT 256u

/* ---- registry ------------------------------------------------------------ */

enum cuda_kind {
    CUDA_KIND_NONE = 0,
    CUDA_KIND_DEVICE_MEM,  /* memory.alloc         key: device address */
    CUDA_KIND_UNIFIED_MEM, /* memory.unified_alloc key: device address */
    CUDA_KIND_HOST_MEM,    /* memory.host_alloc    key: host address   */
    CUDA_KIND_STREAM,      /* stream_create        key: keel_stream    */
    CUDA_KIND_EVENT,       /* event_create         key: keel_event     */
    CUDA_KIND_COMM,        /* comm_init_rank       key: keel_comm      */
};

struct cuda_entry {
    uintptr_t key;  /* 0 marks an empty slot */
    uint64_t size;  /* bytes, for memory */
    int32_t device;
    int32_t kind;   /* enum cuda_kind */
};

/* A pointer-keyed hash set (open addressing, linear probing) with a lock. */
struct cuda_registry {
    pthread_mutex_t lock;
    struct cuda_entry *slots;
    size_t cap; /* power of two, or 0 */
    size_t len;
};

#define CUDA_REGISTRY_INIT { PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0 }

/* 0 on success, -1 when memory for the table could not be allocated. */
int cuda_registry_add(struct cuda_registry *reg, const struct cuda_entry *e);
/* Copy the live entry for key into *out (may be NULL); false if absent. */
bool cuda_registry_find(struct cuda_registry *reg, uintptr_t key,
                        struct cuda_entry *out);
/*
 * Remove and return the entry for key, but only when its kind is `kind` and
 * (device >= 0) its device is `device`; false (nothing removed) otherwise.
 */
bool cuda_registry_take(struct cuda_registry *reg, uintptr_t key, int32_t kind,
                        int32_t device, struct cuda_entry *out);
/* Remove and return any one entry of `kind`; false when none is left. */
bool cuda_registry_pop(struct cuda_registry *reg, int32_t kind,
                       struct cuda_entry *out);
/* Free the table (entries must have been popped). */
void cuda_registry_release(struct cuda_registry *reg);

/* ---- plugin state -------------------------------------------------------- */

enum cuda_peer_state {
    CUDA_PEER_UNKNOWN = 0,
    CUDA_PEER_ENABLED = 1, /* cudaDeviceEnablePeerAccess done (or already) */
    CUDA_PEER_NONE = 2,    /* no direct access: copies are staged by CUDA */
};

struct cuda_state {
    const keel_host_api *host;

    /* probe: cudaGetDeviceCount once per process */
    pthread_once_t probe_once;
    int32_t device_count;
    keel_status probe_status; /* OK, or UNAVAILABLE with probe_reason */
    char probe_reason[320];

    pthread_mutex_t init_lock;
    atomic_bool initialized;

    struct cuda_registry mem;     /* DEVICE_MEM, UNIFIED_MEM, HOST_MEM */
    struct cuda_registry handles; /* STREAM, EVENT, COMM */
    _Atomic uint64_t used[CUDA_MAX_DEVICES];

    /* [from][to]: may `from` access memory of `to` (enum cuda_peer_state) */
    atomic_uchar peer[CUDA_MAX_DEVICES][CUDA_MAX_DEVICES];

    /* stream priority range per device, queried once */
    atomic_bool prio_known[CUDA_MAX_DEVICES];
    int prio_least[CUDA_MAX_DEVICES];
    int prio_greatest[CUDA_MAX_DEVICES];
};

extern struct cuda_state cuda_g;

/* ---- handle wrappers ----------------------------------------------------- */

struct keel_stream_s {
    cudaStream_t cu;
    int32_t device;
    int32_t priority; /* the CUDA priority it was created with */
};

struct keel_event_s {
    cudaEvent_t cu;
    int32_t device;
    atomic_bool recorded; /* event_record has succeeded at least once */
};

/* ---- errors (cuda_plugin.c) ---------------------------------------------- */

/* Map a CUDA error to a keel status. */
keel_status cuda_status_of(cudaError_t err);

/* Attach a printf-style message to `status` and return it. */
keel_status cuda_fail(keel_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * OK for cudaSuccess. Otherwise clear the runtime's last error, attach
 * "<what> on gpu:<device>: <name>: <string>" (what is printf-formatted) and
 * return the mapped status.
 */
keel_status cuda_check(cudaError_t err, int32_t device, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Log through the host table (no-op without one). */
void cuda_log(keel_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- devices (cuda_plugin.c) --------------------------------------------- */

/* Make `device` current for this thread. */
keel_status cuda_use_device(int32_t device);

/*
 * Prologue of every device call: the plugin is initialised, `device` is in
 * range, and it is current. `call` names the ABI call for messages.
 */
keel_status cuda_enter(int32_t device, const char *call);

/* Only the checks of cuda_enter (initialised, in range); no device switch. */
keel_status cuda_check_device(int32_t device, const char *call);

/* Wait for all work on the (current) device; `call` is the reason. */
keel_status cuda_device_sync(int32_t device, const char *call);

/* Stream priority range of `device` (makes it current). */
keel_status cuda_priority_range(int32_t device, int *least, int *greatest);

/*
 * Enable peer access between two devices once per pair when the hardware
 * allows it. Never fails: without direct access CUDA stages peer copies.
 * Leaves `current` as the current device.
 */
void cuda_peer_enable(int32_t a, int32_t b, int32_t current);

/* ---- streams (cuda_stream.c) --------------------------------------------- */

/*
 * The CUDA stream behind a keel_stream of `device`: NULL gives the legacy
 * default stream; a handle that is not a live stream of `device` gives
 * INVALID_HANDLE.
 */
keel_status cuda_stream_resolve(int32_t device, keel_stream stream,
                                const char *call, cudaStream_t *out);

/* Destroy every stream and event (finalize). */
void cuda_stream_finalize(void);

/* ---- memory (cuda_memory.c) ---------------------------------------------- */

/* Free every allocation (finalize). */
void cuda_memory_finalize(void);

/* ---- tables -------------------------------------------------------------- */

extern const keel_memory_ops cuda_memory_ops;
extern const keel_stream_ops cuda_stream_ops;

#ifdef KEEL_CUDA_HAVE_NCCL
/* On NCCL/RCCL, or on the in-process engine when the library is missing
 * (cuda_collective.c). */
extern const keel_collective_ops cuda_collective_ops;
/* Destroy every communicator, of both kinds (finalize). */
void cuda_collective_finalize(void);
#endif
/* The in-process collectives alone (gpu_hostcoll.c): the group of a build
 * without NCCL's header, and the fallback of one with it. */
extern const keel_collective_ops gpu_hostcoll_ops;
void gpu_hostcoll_finalize(void);
/* Which collectives serve this process: "NCCL"/"RCCL", "in-process",
 * "none", or both names while undecided (first use decides). */
const char *gpu_coll_backend(void);

/* printf helpers */
#define CUDA_PTR(p) ((void *)(uintptr_t)(p))

#endif /* KEEL_CUDA_INTERNAL_H */
