/*
 * Internal declarations shared by the core's source files. Nothing here is
 * part of the public API.
 */
#ifndef KEEL_INTERNAL_H
#define KEEL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>

#include <keel/runtime.h>

/* ---- errors (error.c) -------------------------------------------------- */

#if defined(__GNUC__) || defined(__clang__)
#define KEEL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define KEEL_PRINTF(a, b)
#endif

/** Set this thread's last error; returns `status` for tail calls. */
keel_status keel__error(keel_status status, const char *fmt, ...)
    KEEL_PRINTF(2, 3);

/** The host table handed to every plugin. */
const keel_host_api *keel__host_api(void);

/** Forget the message a plugin attached on this thread. */
void keel__plugin_msg_clear(void);

/** The message a plugin attached on this thread since the last clear, or
 *  NULL when none. */
const char *keel__plugin_msg(void);

/** Core logging, filtered by KEEL_LOG_LEVEL. */
void keel__log(keel_log_level level, const char *fmt, ...) KEEL_PRINTF(2, 3);

/** strdup that tolerates NULL (returns NULL). */
char *keel__strdup(const char *s);

/** Printf into a new heap string (NULL on allocation failure). */
char *keel__asprintf(const char *fmt, ...) KEEL_PRINTF(1, 2);

struct stat;

/**
 * Open `path` to read, refusing anything but a regular file without ever
 * blocking on it (a FIFO, a device): open(O_RDONLY | O_NONBLOCK |
 * O_CLOEXEC), fstat, then back to blocking. On success *fd is the open
 * descriptor and *sb (when not NULL) its fstat. Errors name `what` (the
 * calling API function) and the path: NOT_FOUND, IO_ERROR.
 */
keel_status keel__open_regular(const char *what, const char *path, int *fd,
                               struct stat *sb);

/* ---- plugins (loader.c) ------------------------------------------------ */

struct keel_plugin {
    char *path;
    char *realpath;
    void *handle;
    /* Identity, copied so that it survives dlclose of a skipped plugin. */
    char *name;
    char *version;
    char *device_type;
    char *description;
    uint32_t abi_major;
    uint32_t abi_minor;
    /* State. */
    bool loaded;
    bool initialized;
    int32_t device_count;
    const char *failed_check;
    keel_status status;
    char *reason;
    /* Tables normalised to this core's layout (absent members are NULL). */
    keel_plugin_api api;
    keel_device_ops device;
    keel_memory_ops memory;
    keel_stream_ops stream;
    keel_kernel_ops kernel;
    keel_collective_ops collective;
    keel_profiler_ops profiler;
};

struct keel_registry {
    struct keel_plugin **plugins;
    int count;
    int capacity;
    bool initialized;
    /* Current device (process-wide, like Paddle's set_device). */
    bool have_current;
    keel_place current;
};

/** Bracket plugin code run under the registry lock (see place.c): while
 *  open, keel_init() on this thread refuses with INVALID_STATE and the
 *  core's lock calls nest instead of waiting on themselves. */
void keel__plugin_code_begin(const char *path);
void keel__plugin_code_end(void);

/** Layers above the runtime that cache plugin objects (device memory,
 *  kernels) register how to drop them; keel_shutdown calls every one,
 *  latest first, while the plugins are still loaded. Registering the same
 *  function again does nothing. Thread-safe. */
typedef void (*keel_shutdown_fn)(void);
void keel__at_shutdown(keel_shutdown_fn fn);

/** The registry; callers must hold keel__lock() or be inside init. */
struct keel_registry *keel__registry(void);
void keel__lock(void);
void keel__unlock(void);

/** Load one plugin file and append it to the registry (loaded or skipped).
 *  Returns its index (the existing one when the same file was loaded
 *  before), or -1 when host memory ran out. */
int keel__load_plugin_file(struct keel_registry *reg, const char *path);

/** Discovery: every default location, in order. */
void keel__discover(struct keel_registry *reg);

/** Finalize and unload all plugins; free the registry's contents. */
void keel__unload_all(struct keel_registry *reg);

/* ---- places (place.c) -------------------------------------------------- */

/**
 * Validate a place and return its plugin. `what` names the calling API
 * function for the message. Initialises the runtime when needed.
 */
keel_status keel__resolve(keel_place place, struct keel_plugin **plugin,
                          const char *what);

/** "cpu:0" for a place, into a caller buffer (never fails: falls back to
 *  "plugin#N:M" for an invalid place). */
const char *keel__place_str(keel_place place, char *buf, size_t size);

/** Index of the plugin a bare device type resolves to, or -1. */
int keel__type_default_plugin(const struct keel_registry *reg,
                              const char *type);

/* ---- plugin calls (runtime.c) ------------------------------------------ */

/**
 * Turn a plugin call's status into the core's: on failure, record
 * "<call> on <place> (plugin <name>): <plugin message or status name>".
 * NOT_READY passes without a message when `not_ready_ok`.
 */
keel_status keel__plugin_status(const struct keel_plugin *p, keel_place place,
                                const char *call, keel_status st,
                                bool not_ready_ok);

/** Status for a call the plugin does not provide. */
keel_status keel__absent(const struct keel_plugin *p, const char *call);

/* ---- profiler switch and trace recording (trace.c) ---------------------- */

/** What is on, as bits: the op profiler's counters, its per-op device
 *  synchronize, and the trace. Read with one relaxed load on every op. */
#define KEEL__PROF_COUNT 1
#define KEEL__PROF_SYNC 2
#define KEEL__PROF_TRACE 4
extern atomic_int keel__prof_state;

/** CLOCK_MONOTONIC in ns: the clock of every trace event. */
uint64_t keel__trace_now(void);

/** When tracing, the time a traced call starts; 0 when off (one relaxed
 *  load). */
static inline uint64_t keel__trace_begin(void)
{
    if (!(atomic_load_explicit(&keel__prof_state, memory_order_relaxed) &
          KEEL__PROF_TRACE))
        return 0;
    return keel__trace_now();
}

#define KEEL__TRACE_SHAPE 6
/** What an op event shows besides its name: the first input's (or the
 *  hinted place's) device, dtype name (a static string) and shape. */
typedef struct keel__trace_args {
    bool have_place;
    keel_place place;
    const char *dtype;
    int ndim; /* -1: no shape */
    int64_t shape[KEEL__TRACE_SHAPE];
} keel__trace_args;

/** One op call, t0..t1 on the calling thread's track. `name` must be a
 *  static string (the catalog's). */
void keel__trace_op(const char *name, const keel__trace_args *args,
                    uint64_t t0, uint64_t t1);
/** One copy (name "copy_h2d", ...) that began at t0 and ends now, on the
 *  track of (place, stream); stream NULL is the default stream. */
void keel__trace_copy(const char *name, keel_place place, keel_stream stream,
                      uint64_t bytes, uint64_t t0);
/** One synchronize that began at t0 and ends now. */
void keel__trace_sync(const char *name, keel_place place, keel_stream stream,
                      uint64_t t0);
/** Start the trace KEEL_TRACE names (once per process; written at exit). */
void keel__trace_env(void);

#endif /* KEEL_INTERNAL_H */
