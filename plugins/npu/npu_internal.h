/*
 * keel Ascend NPU plugin (libkeel-npu.so, plugin "npu", device type "npu")
 * — what the plugin's files share.
 *
 * DESIGN
 *
 *   npu_plugin.c  entry point, loading libascendcl.so, errors, the object
 *                 registries, probe, device group
 *   npu_memory.c  memory group: aclrtMalloc / aclrtMallocHost, copies and
 *                 memsets, memory info
 *   npu_stream.c  streams, events, host functions
 *   npu_kernels.c the kernel group on aclnn (libopapi.so): elementwise
 *                 ops, softmax, matmul, cast and copy, through the
 *                 two-phase aclnnXxxGetWorkspaceSize / aclnnXxx calls, and
 *                 the shared launch path; npu_kernels_nn.c (linear,
 *                 convolutions, pooling) and npu_kernels_train.c (norms,
 *                 cross_entropy, optimizer updates) hold the others
 *   npu_collective.c the collective group on HCCL (libhccl.so)
 *   npu_hostcoll.c   the in-process fallback when HCCL is missing
 *
 * Loading. libascendcl.so is dlopen()ed on the first call that needs it
 * (get_device_count, get_device_props or init), from KEEL_NPU_ACL_LIBRARY
 * when that is set, else by the name "libascendcl.so" through the dynamic
 * linker's search path (CANN's set_env.sh puts its lib64 directory on
 * LD_LIBRARY_PATH). Every function comes from dlsym (acl_api.h lists them),
 * so the plugin builds and loads without CANN; without the library it
 * reports 0 devices and says why. The aclnn operators come from
 * libopapi.so (KEEL_NPU_OPAPI_LIBRARY overrides the name), opened by the
 * probe when ACL has devices; without it the plugin has no kernels and the
 * core runs every op on its CPU fallback. HCCL (libhccl.so) carries the
 * collective group; it is opened by the first collective call that needs
 * it (npu_collective.c).
 *
 * ACL's current device. ACL binds a device (through its context) to the
 * calling host thread; the keel ABI names the device in every call. The
 * probe makes each device's default context once (aclrtSetDevice, then
 * aclrtGetCurrentContext), and every call that touches a device first
 * makes that context current on the calling thread (aclrtSetCurrentContext,
 * npu_use()). A thread that has called into the plugin is therefore left
 * with the context of the last device it used; code outside keel on the
 * same thread that relies on ACL's current device must set it again. ACL
 * itself applies ASCEND_RT_VISIBLE_DEVICES; on top of what ACL shows,
 * set_visible_devices (ABI 1.3, KEEL_VISIBLE_DEVICES) picks ACL device
 * ids: device i of the plugin is then ACL device list[i], and the probe
 * never sets the others.
 *
 * Lifetime. aclInit runs once per process, in the probe, and aclFinalize
 * and aclrtResetDevice when the library is unloaded: CANN documents
 * aclFinalize as final for the process, while keel's finalize may be
 * followed by init. keel's finalize releases what keel made (streams,
 * events, memory). When aclInit answers ACL_ERROR_REPEAT_INITIALIZE (ACL
 * already initialised by someone else in the process) the plugin uses it
 * and leaves aclFinalize to its owner.
 *
 * Addresses. A keel_dptr IS the device address aclrtMalloc returned.
 * A registry of live allocations lets every call check that
 * [dptr, dptr + size) lies inside one allocation of the named device, so a
 * foreign or freed address gives INVALID_ARGUMENT before ACL sees it. A
 * second registry holds the live stream and event handles.
 *
 * Streams. Each keel stream is an ACL stream made by aclrtCreateStream; a
 * device's default keel stream (NULL) is one made at init, never ACL's
 * implicit NULL stream. ACL has no stream query in the headers checked, so
 * stream_query records a private marker event and asks its status.
 * Synchronous copies and memsets first wait for the whole device
 * (aclrtSynchronizeDevice), as the ABI asks.
 *
 * Events. aclrtCreateEvent events; the plugin keeps whether an event was
 * ever recorded, since the ABI gives meaning to an unrecorded event
 * (complete; INVALID_STATE for timing) and ACL's answer for one is not
 * documented.
 *
 * Host functions. aclrtLaunchCallback with ACL_CALLBACK_BLOCK, run by a
 * reporting thread of the stream's own (aclrtSubscribeReport, then
 * aclrtProcessReport in a loop), made on the stream's first host function.
 * Offered only when the library has all four functions.
 *
 * Errors. npu_check() maps an aclError to a keel_status and attaches
 *   "<call>(<args>) on npu:<n>: ACL_ERROR_... (<code>): <recent message>"
 * through host->set_error(), the last part from aclGetRecentErrMsg().
 *
 * Tests run on a stand-in for libascendcl.so (tests/acl_standin.c), never
 * on CANN or Ascend hardware: see docs/npu-plugin.md.
 */
#ifndef KEEL_NPU_INTERNAL_H
#define KEEL_NPU_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <keel/device_api.h>

#include "acl_api.h"

#define NPU_PLUGIN_NAME "npu"
#define NPU_MAX_DEVICES 64
/* What the plugin promises of every alloc (and checks of every pointer
 * aclrtMalloc returns): ACL's own guarantee is not documented publicly. */
#define NPU_ALLOC_ALIGNMENT 64u
/* aclrtProcessReport's wait, in milliseconds, between checks for a stop. */
#define NPU_REPORT_WAIT_MS 50

/* The resolved functions of libascendcl.so. */
struct npu_acl {
    void *lib;
#define NPU_ACL_MEMBER(ret, name, params) ret(*name) params;
    NPU_ACL_FUNCS(NPU_ACL_MEMBER, NPU_ACL_MEMBER)
#undef NPU_ACL_MEMBER
};

/* The resolved functions of libopapi.so (aclnn), when it loaded. */
struct npu_opapi {
    void *lib;
#define NPU_OPAPI_MEMBER(ret, name, params) ret(*name) params;
    NPU_OPAPI_FUNCS(NPU_OPAPI_MEMBER)
#undef NPU_OPAPI_MEMBER
};

/* ---- registries ----------------------------------------------------------- */

enum npu_kind {
    NPU_KIND_DEVICE_MEM = 1, /* memory.alloc      */
    NPU_KIND_HOST_MEM,       /* memory.host_alloc */
    NPU_KIND_STREAM,         /* stream_create     */
    NPU_KIND_EVENT,          /* event_create      */
    NPU_KIND_COMM,           /* comm_init_rank_bytes */
};

/* A live object: an allocation [base, base + size) or a handle (size 1). */
struct npu_obj {
    uintptr_t base;
    uint64_t size;
    int32_t device;
    int32_t kind;
};

/* A set of non-overlapping npu_obj, ordered by address (a tsearch tree). */
struct npu_reg {
    pthread_mutex_t lock;
    void *root;
};

/* 0, or -1 without host memory. */
int npu_reg_put(struct npu_reg *r, const struct npu_obj *o);
/* The object of `kind` and `device` (any when < 0) containing [p, p + size) (size 0 is
 * taken as 1); false when there is none. */
bool npu_reg_get(struct npu_reg *r, uintptr_t p, uint64_t size,
                 int32_t device, int32_t kind, struct npu_obj *out);
/* Remove the object starting exactly at `base` when kind and device
 * match; false otherwise. */
bool npu_reg_drop(struct npu_reg *r, uintptr_t base, int32_t device,
                  int32_t kind, struct npu_obj *out);
/* Remove some object of `kind`; false when none is left. */
bool npu_reg_pop(struct npu_reg *r, int32_t kind, struct npu_obj *out);

/* ---- state ------------------------------------------------------------------ */

struct keel_stream_s;

struct npu_device {
    int32_t acl_id; /* ACL's device id (set_visible_devices maps them) */
    aclrtContext ctx;
    uint64_t total_memory;
    uint32_t ai_cores;
    struct keel_stream_s *def; /* default keel stream, made by init */
    /* Work tickets: every enqueue on a stream of the device takes the
     * next one; synced is the highest known to have run everywhere
     * (after aclrtSynchronizeDevice). stream_query uses them to answer
     * OK without ACL when nothing was enqueued since a sync. */
    _Atomic uint64_t ticket;
    _Atomic uint64_t synced;
};

struct npu_state {
    const keel_host_api *host;
    struct npu_acl acl;
    struct npu_opapi opapi; /* lib NULL: no kernels */
    char opapi_reason[400];
    bool acl_owned; /* aclInit succeeded here: aclFinalize at unload */

    pthread_once_t probe_once;
    int32_t ndev;
    char reason[512]; /* why there are no devices */
    char soc[64];     /* aclrtGetSocName, "" when unknown */
    bool callbacks;   /* the four host-function calls resolved */
    struct npu_device dev[NPU_MAX_DEVICES];
    /* set_visible_devices (ABI 1.3): ACL ids, applied by the probe */
    int32_t visible[NPU_MAX_DEVICES];
    int32_t nvisible; /* 0: every device ACL shows */
    atomic_bool probed; /* the probe has started: too late for a list */

    pthread_mutex_t init_lock;
    atomic_bool initialized;

    struct npu_reg mem;     /* DEVICE_MEM, HOST_MEM */
    struct npu_reg handles; /* STREAM, EVENT        */
    _Atomic uint64_t used[NPU_MAX_DEVICES];
};

extern struct npu_state npu_g;
#define ACL (npu_g.acl)

/* ---- handles ------------------------------------------------------------- */

struct keel_stream_s {
    int32_t device;
    aclrtStream s;
    pthread_mutex_t mu;  /* the fields below */
    uint64_t last;       /* ticket of the latest enqueue */
    uint64_t done;       /* tickets up to this one have run */
    aclrtEvent marker;   /* stream_query's event, made on first use */
    uint64_t marker_at;  /* `last` when the marker was recorded */
    /* host functions: a reporting thread, started on first use */
    bool reporting;
    atomic_bool stop;
    pthread_t reporter;
};

struct keel_event_s {
    int32_t device;
    aclrtEvent e;
    atomic_bool recorded;
};

/* ---- npu_plugin.c -------------------------------------------------------- */

const char *npu_acl_name(aclError e);
keel_status npu_status_of(aclError e);
keel_status npu_fail(keel_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* OK for ACL_SUCCESS; otherwise the mapped status, with
 * "<what> on npu:<device>: <ACL name> (<code>)[: <recent message>]".
 * With `alloc`, a failure that is neither a bad device nor a bad state
 * becomes OUT_OF_MEMORY (the message keeps ACL's code). */
keel_status npu_check_as(aclError e, bool alloc, int32_t device,
                         const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define npu_check(e, device, ...) npu_check_as(e, false, device, __VA_ARGS__)
#define npu_check_alloc(e, device, ...) \
    npu_check_as(e, true, device, __VA_ARGS__)
/* dlopen the file environment setting `var` names, else `soname`; NULL
 * with dlerror()'s text in *why. *path: what was opened. */
void *npu_open(const char *var, const char *soname, const char **path,
               const char **why);
/* An environment setting through the core (getenv without one). */
const char *npu_env(const char *name);
void npu_log(keel_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Initialised and in range, with the device's context made current on
 * the calling thread; `call` names the ABI call for messages. */
keel_status npu_enter(int32_t device, const char *call);
/* Make the device's context current on this thread. */
keel_status npu_use(int32_t device);

/* ---- npu_stream.c -------------------------------------------------------- */

/* The stream behind a keel_stream of `device` (NULL: the default one);
 * INVALID_HANDLE for anything else. */
keel_status npu_stream_get(int32_t device, keel_stream stream,
                           const char *call, struct keel_stream_s **out);
keel_status npu_stream_device_init(int32_t device);
/* Note one successful enqueue on s (for stream_query). */
void npu_stream_note(struct keel_stream_s *s);
/* aclrtSynchronizeDevice on the device (its context current), keeping
 * the tickets up to date. */
keel_status npu_device_sync(int32_t device, const char *call);
void npu_stream_finalize(void);

/* ---- npu_memory.c -------------------------------------------------------- */

/* [p, p + size) inside one live allocation of `device`; INVALID_ARGUMENT
 * naming `what` otherwise. */
keel_status npu_mem_check(int32_t device, keel_dptr p, uint64_t size,
                          const char *what);
void npu_memory_finalize(void);

/* ---- npu_kernels.c ------------------------------------------------------ */

/* Load libopapi.so once (the probe); leaves npu_g.opapi.lib NULL and the
 * reason in npu_g.opapi_reason when it cannot. */
void npu_kernels_load(void);
void npu_kernels_unload(void);

/* Shared by the kernel files (npu_kernels.c, npu_kernels_nn.c,
 * npu_kernels_train.c). */

/* An aclTensor viewing d (NULL with *st set on failure). */
aclTensor *npu_describe(const keel_tensor_desc *d, keel_status *st);
/* An aclnn status as a keel one: a refusal in phase 1 (launch false) is
 * NOT_SUPPORTED, so the core falls back; a failed launch DEVICE_ERROR. */
keel_status npu_aclnn_check(aclnnStatus e, bool launch, int32_t device,
                            const char *call);
/* aclnn's phase 2: every aclnnXxx has this signature. */
typedef aclnnStatus (*npu_aclnn_phase2)(void *workspace, uint64_t ws,
                                        aclOpExecutor *executor,
                                        aclrtStream stream);
/* After a successful phase 1 that asked for `ws` bytes: take the
 * workspace (the core's, or aclrtMalloc'd under an older core), run
 * phase 2 (`fn`, named `call`) on s, note the stream. `name` is the keel
 * op, for messages. */
keel_status npu_aclnn_launch(const keel_kernel_args *a,
                             struct keel_stream_s *s, const char *name,
                             uint64_t ws, aclOpExecutor *ex,
                             npu_aclnn_phase2 fn, const char *call);
/* The kernel files' own tables. Each load resolves its aclnn entry points
 * from libopapi.so's handle one by one: a kernel whose entry points are
 * missing is not offered, the others are. lookup answers NOT_FOUND for
 * an op or dtype it does not take. */
void npu_kernels_nn_load(void *opapi);
void npu_kernels_nn_unload(void);
keel_status npu_kernels_nn_lookup(const char *op_name, keel_dtype dtype,
                                  keel_kernel *kernel);
void npu_kernels_train_load(void *opapi);
void npu_kernels_train_unload(void);
keel_status npu_kernels_train_lookup(const char *op_name, keel_dtype dtype,
                                     keel_kernel *kernel);

/* ---- npu_collective.c ---------------------------------------------------- */

/* At finalize: destroy the HCCL communicators the caller left alive. */
void npu_collective_finalize(void);
void npu_collective_unload(void);
/* npu_hostcoll.c: the in-process collectives, when HCCL is missing */
extern const keel_collective_ops npu_hostcoll_ops;
void npu_hostcoll_finalize(void);
/* The dtypes a device claims (props.dtype_mask): the aclnn kernels'. */
#define NPU_DEVICE_DTYPES                                                   \
    (KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F16) |                  \
     KEEL_DTYPE_BIT(KEEL_BF16) | KEEL_DTYPE_BIT(KEEL_I32) |                 \
     KEEL_DTYPE_BIT(KEEL_I64))
extern const keel_collective_ops npu_collective_ops;

/* get_device_count, for the other groups (probes on first use). */
keel_status npu_device_count(int32_t *count);

extern const keel_kernel_ops npu_kernel_ops;
extern const keel_memory_ops npu_memory_ops;
extern const keel_stream_ops npu_stream_ops;

#define NPU_PTR(p) ((void *)(uintptr_t)(p))

#endif /* KEEL_NPU_INTERNAL_H */
