/*
 * keel CPU reference plugin — internal declarations shared by its sources.
 *
 * DESIGN
 *
 * The plugin exposes KEEL_CPU_DEVICES (1..64) virtual devices that all live
 * in host memory. Everything is kept in one plugin-wide state, cpu_g,
 * because the ABI has no context argument. Settings are read through the
 * host table (host->get_env, else getenv) when the core calls get_api and
 * again at every init, so finalize + init picks up a changed environment.
 *
 *   cpu_plugin.c     entry point, settings, errors, handle registry and
 *                    the device group (init/finalize/props/synchronize)
 *   cpu_memory.c     allocation tables and the memory group
 *   cpu_stream.c     streams, the work queue, workers, events
 *   cpu_collective.c communicators, rendezvous rounds, group_start/end
 *   cpu_reduce.c     dtype conversions (f16/bf16) and reduction kernels
 *
 * Memory: every device keeps a sorted array of its live allocations
 * (binary-searched, guarded by mem_lock), so frees of unknown pointers and
 * copies outside an allocation are reported instead of crashing. In
 * discrete mode (KEEL_CPU_DISCRETE=1) a device address is the host address
 * plus CPU_DISCRETE_BIAS, a non-canonical x86-64 address: dereferencing it
 * on the host faults, which proves that the core never does.
 *
 * Streams: in inline mode (default) every "asynchronous" call runs in the
 * calling thread before it returns. In async mode (KEEL_CPU_ASYNC=1) each
 * stream owns a FIFO of work items and one worker thread, started at the
 * first submission and joined by stream_destroy/finalize. An error raised
 * by queued work is kept on the stream and returned (once) by the next
 * stream_synchronize or device synchronize.
 *
 * Collectives: see cpu_collective.c.
 */
#ifndef KEEL_CPU_INTERNAL_H
#define KEEL_CPU_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <keel/device_api.h>

/* A second build may name itself apart (the ABI 1.1 fixture of the
 * conformance tests: conformance/tests/meson.build). */
#ifndef CPU_PLUGIN_NAME
#define CPU_PLUGIN_NAME "cpu"
#endif
#ifndef CPU_PLUGIN_DEVICE_TYPE
#define CPU_PLUGIN_DEVICE_TYPE "cpu"
#endif
#define CPU_PLUGIN_VERSION "0.1.0"

#define CPU_MAX_DEVICES 64
#define CPU_ALIGNMENT 64u
#define CPU_MSG_MAX 512
#define CPU_DEFAULT_COLL_TIMEOUT_MS 60000u
#define CPU_MAX_COLL_TIMEOUT_MS 86400000u

/*
 * Discrete-mode offset between host and device addresses. Non-canonical on
 * x86-64 (bits 63..47 differ), so a host load from a device address raises
 * SIGSEGV; a multiple of CPU_ALIGNMENT, so device addresses keep the
 * alignment of the host block behind them.
 */
#define CPU_DISCRETE_BIAS UINT64_C(0x4000000000000000)

/* ---- settings ------------------------------------------------------------ */

struct cpu_config {
	int32_t ndevices;         /* KEEL_CPU_DEVICES, 1..64             */
	uint64_t mem_limit;       /* KEEL_CPU_MEM_LIMIT, 0 = no limit    */
	bool async;               /* KEEL_CPU_ASYNC                      */
	bool discrete;            /* KEEL_CPU_DISCRETE                   */
	uint32_t coll_timeout_ms; /* KEEL_CPU_COLL_TIMEOUT_MS            */
	uint32_t comm_id_bytes;   /* KEEL_CPU_COMM_ID_BYTES, 128..65536  */
};

/* ---- memory -------------------------------------------------------------- */

enum cpu_alloc_kind {
	CPU_ALLOC_DEVICE,
	CPU_ALLOC_UNIFIED,
	CPU_ALLOC_HOST,
};

struct cpu_alloc {
	uintptr_t base; /* host address of the block            */
	uint64_t size;  /* bytes requested (and accounted)      */
	enum cpu_alloc_kind kind;
};

/* Live allocations sorted by base; lookups are binary searches. */
struct cpu_alloc_table {
	struct cpu_alloc *v;
	size_t n;
	size_t cap;
};

/* ---- streams and events -------------------------------------------------- */

struct cpu_event;
struct cpu_coll_batch;

enum cpu_work_kind {
	CPU_WORK_COPY,
	CPU_WORK_MEMSET,
	CPU_WORK_HOST_FN,
	CPU_WORK_EVENT_RECORD,
	CPU_WORK_EVENT_WAIT,
	CPU_WORK_COLL,
};

struct cpu_work {
	struct cpu_work *next;
	enum cpu_work_kind kind;
	union {
		struct {
			void *dst;
			const void *src;
			size_t size;
		} copy;
		struct {
			void *dst;
			size_t size;
			uint8_t value;
		} set;
		struct {
			keel_host_fn fn;
			void *data;
		} host;
		struct {
			struct cpu_event *ev;
			uint64_t gen;
		} event;
		struct cpu_coll_batch *coll;
	} u;
};

struct cpu_device;

struct cpu_stream {
	struct cpu_device *dev;
	int32_t priority;
	bool is_default;
	pthread_mutex_t lock;
	pthread_cond_t work_cond; /* worker: work arrived or stop       */
	pthread_cond_t done_cond; /* waiters: an item completed         */
	struct cpu_work *head;
	struct cpu_work *tail;
	uint64_t submitted;
	uint64_t completed;
	bool worker_started;
	bool stopping;
	pthread_t worker;
	/* first error of queued work since the last synchronize */
	keel_status error;
	uint64_t error_seq;
	char error_msg[CPU_MSG_MAX];
};

struct cpu_event {
	int32_t device;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t record_gen; /* records issued                      */
	uint64_t done_gen;   /* highest record completed            */
	struct timespec stamp; /* CLOCK_MONOTONIC at done_gen       */
	int refs;            /* the handle + queued items            */
};

struct cpu_device {
	int32_t index;
	pthread_mutex_t mem_lock;
	struct cpu_alloc_table dev_allocs;  /* alloc + unified_alloc */
	struct cpu_alloc_table host_allocs; /* host_alloc            */
	/* register_host ranges: the caller's memory, never freed here. They
	 * may overlap each other and dev_allocs (one NumPy array imported
	 * twice; a view of a tensor's own memory), so they are a list of their
	 * own, searched in full after dev_allocs. */
	struct cpu_alloc_table registered;
	uint64_t used;                      /* bytes in dev_allocs   */
	pthread_mutex_t stream_lock;
	struct cpu_stream **streams; /* every stream, default first */
	size_t nstreams;
	size_t stream_cap;
	struct cpu_stream *default_stream;
};

/* ---- handle registry ----------------------------------------------------- */

enum cpu_handle_kind {
	CPU_HANDLE_STREAM = 1,
	CPU_HANDLE_EVENT = 2,
	CPU_HANDLE_COMM = 3,
};

struct cpu_handle {
	uintptr_t key;
	enum cpu_handle_kind kind;
	int32_t device;
};

/* ---- plugin-wide state --------------------------------------------------- */

struct cpu_state {
	const keel_host_api *host;
	struct cpu_config cfg;   /* last configuration read successfully */
	bool cfg_valid;
	bool initialized;
	/* device.set_visible_devices (ABI 1.3): device i is virtual device
	 * visible[i] of the KEEL_CPU_DEVICES configured; 0 = all of them */
	int32_t nvisible;
	int32_t visible[CPU_MAX_DEVICES];
	struct cpu_device *devs; /* cfg.ndevices entries while initialized */
	int32_t ndevs;
	/* probed once per load */
	char vendor[64];
	char arch[32];
	uint32_t compute_units;
	uint64_t phys_mem;
	/* live streams, events and comms, sorted by key */
	pthread_mutex_t reg_lock;
	struct cpu_handle *handles;
	size_t nhandles;
	size_t handle_cap;
};

extern struct cpu_state cpu_g;

extern const keel_device_ops cpu_device_ops;
extern const keel_memory_ops cpu_memory_ops;
extern const keel_stream_ops cpu_stream_ops;
extern const keel_collective_ops cpu_collective_ops;
extern const keel_kernel_ops cpu_kernel_ops; /* kernels/cpu_kernels.c */

/* kernels/pool.c: join the kernel thread pool (at finalize). */
void cpu_pool_shutdown(void);

/* ---- cpu_plugin.c -------------------------------------------------------- */

/* Pass a formatted message to host->set_error (when the host has one). */
void cpu_report(keel_status status, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Pass an already formatted message to host->set_error. */
void cpu_report_msg(keel_status status, const char *msg);
/* An environment variable as the host sees it (host->get_env when the host
 * has one, else getenv): every KEEL_CPU_* and BLAS setting is read here. */
const char *cpu_getenv(const char *name);

/*
 * Report and evaluate to `status` (a macro so that the compiler sees the
 * non-OK value flow into the caller's early returns). `status` is
 * evaluated twice: pass a constant or a plain variable.
 */
#define cpu_err(status, ...) (cpu_report((status), __VA_ARGS__), (status))
#define cpu_err_msg(status, msg) (cpu_report_msg((status), (msg)), (status))
void cpu_log(keel_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* The device for `device`, or NOT_INITIALIZED / INVALID_DEVICE reported. */
keel_status cpu_dev_get(int32_t device, const char *call,
			struct cpu_device **dev);

int cpu_handle_add(const void *p, enum cpu_handle_kind kind, int32_t device);
void cpu_handle_remove(const void *p);
/* true when p is a live handle of `kind`; *device receives its device. */
bool cpu_handle_find(const void *p, enum cpu_handle_kind kind,
		     int32_t *device);
/* Copy of every live handle of `kind` (caller frees); NULL when none. */
void **cpu_handle_list(enum cpu_handle_kind kind, size_t *n);

const char *cpu_handle_kind_name(enum cpu_handle_kind kind);

/* Monotonic time helpers. */
struct timespec cpu_now(void);
struct timespec cpu_deadline_ms(uint32_t ms);
double cpu_ts_ms(struct timespec a, struct timespec b); /* b - a */

/* ---- cpu_memory.c -------------------------------------------------------- */

static inline uintptr_t cpu_dptr_to_host(keel_dptr p)
{
	return (uintptr_t)(cpu_g.cfg.discrete ? p - CPU_DISCRETE_BIAS : p);
}

static inline keel_dptr cpu_host_to_dptr(uintptr_t h)
{
	return cpu_g.cfg.discrete ? (keel_dptr)h + CPU_DISCRETE_BIAS
				  : (keel_dptr)h;
}

/*
 * Check that [ptr, ptr + size) lies inside one live device (or unified)
 * allocation of dev; size must be > 0. On success *host is the host
 * address of ptr. Reports INVALID_ARGUMENT naming `call` otherwise.
 */
keel_status cpu_mem_range(struct cpu_device *dev, keel_dptr ptr,
			  uint64_t size, const char *call, void **host);
/*
 * The same check for n ranges under one lock (kernel launches). A size of
 * 0 maps to NULL. Returns -1 when all are inside live allocations (host[]
 * filled), else the index of the first that is not; reports nothing.
 */
int cpu_mem_range_many(struct cpu_device *dev, int n, const keel_dptr *ptr,
		       const uint64_t *size, void **host);
void cpu_mem_device_init(struct cpu_device *dev);
void cpu_mem_device_release(struct cpu_device *dev);

/* ---- cpu_stream.c -------------------------------------------------------- */

/* Resolve a stream handle of `dev` (NULL = default stream). */
keel_status cpu_stream_get(struct cpu_device *dev, keel_stream handle,
			   const char *call, struct cpu_stream **out);
/*
 * Run (inline mode) or enqueue (async mode) one work item; in async mode
 * the item is copied to the heap. The stream always takes ownership of the
 * item's event reference or collective batch, also when it fails (an event
 * record that cannot be queued is completed at once, so nothing waits on it
 * forever). Failures are reported with set_error.
 */
keel_status cpu_stream_submit(struct cpu_stream *s, const struct cpu_work *w,
			      const char *call);
/* Wait until every stream of dev is idle (errors are kept). */
void cpu_device_wait_idle(struct cpu_device *dev);
/* Wait, then take the first error of any stream of dev. */
keel_status cpu_device_sync(struct cpu_device *dev);
keel_status cpu_stream_device_init(struct cpu_device *dev);
/* Stop all workers of dev (draining their queues) and free its streams. */
void cpu_stream_device_release(struct cpu_device *dev);
void cpu_event_release_all(void);

/* ---- cpu_collective.c ---------------------------------------------------- */

/* The collectives, in the order of cpu_coll_names (cpu_collective.c);
 * cpu_coll_mpi.c runs them too. */
enum cpu_coll_kind {
	CPU_COLL_ALL_REDUCE,
	CPU_COLL_BROADCAST,
	CPU_COLL_REDUCE,
	CPU_COLL_ALL_GATHER,
	CPU_COLL_REDUCE_SCATTER,
	CPU_COLL_ALL_TO_ALL,
	CPU_COLL_SEND,
	CPU_COLL_RECV,
	CPU_COLL_ALL_TO_ALLV,
};

/* Run a batch: arrive every op, then wait for every op. */
keel_status cpu_coll_batch_run(struct cpu_coll_batch *b, char *msg,
			       size_t msg_size);
void cpu_coll_batch_free(struct cpu_coll_batch *b);
void cpu_coll_release_all(void);

/* ---- cpu_reduce.c -------------------------------------------------------- */

float cpu_f16_to_f32(uint16_t h);
uint16_t cpu_f32_to_f16(float f);
float cpu_bf16_to_f32(uint16_t h);
uint16_t cpu_f32_to_bf16(float f);

const char *cpu_dtype_name(keel_dtype dt);
const char *cpu_reduce_op_name(keel_reduce_op op);

/*
 * dst[i] = op over r of srcs[r][i], for i < count, in rank order, with the
 * accumulation rules of the collective group (see cpu_reduce.c). The
 * dtype/op pair must have passed cpu_reduce_check().
 */
void cpu_reduce(keel_dtype dt, keel_reduce_op op, int nsrc,
		const void *const *srcs, void *dst, uint64_t count);
/* OK, INVALID_ARGUMENT (unknown dtype/op) or NOT_SUPPORTED (bool AVG). */
keel_status cpu_reduce_check(keel_dtype dt, keel_reduce_op op,
			     const char *call);

#endif /* KEEL_CPU_INTERNAL_H */
