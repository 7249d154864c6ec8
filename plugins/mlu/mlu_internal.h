/*
 * keel Cambricon MLU plugin (libkeel-mlu.so, plugin "mlu", device type
 * "mlu") — what its source files share. The design in prose, with what was
 * and was not tested, is docs/mlu-plugin.md.
 *
 *   mlu_plugin.c      entry point, loading libcnrt.so, status mapping, the
 *                     handle registry, probe, device group, visible devices
 *   mlu_memory.c      cnrtMalloc / cnrtHostMalloc, copies, memsets, info
 *   mlu_queue.c       keel streams as CNRT queues, events as notifiers
 *   mlu_kernels.c     the elementwise ops and copy on CNNL (libcnnl.so)
 *   mlu_collective.c  the collective group on CNCL (libcncl.so), or on the
 *                     kit's in-process engine without it
 *
 * CNRT keeps a current device per host thread (cnrtSetDevice); the keel ABI
 * names the device in every call. mlu_bind() sets it at the start of every
 * call that touches a device, so a thread that called into the plugin is
 * left with the last device the plugin used.
 */
#ifndef KEEL_MLU_INTERNAL_H
#define KEEL_MLU_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <keel/device_api.h>

#include "cnrt_api.h"

#define MLU_MAX_DEVICES 64
/* Promised for every alloc and checked on every cnrtMalloc pointer (CNRT's
 * own alignment is not documented in what was read). */
#define MLU_ALLOC_ALIGNMENT 64u

struct mlu_cnrt {
    void *lib;
#define MLU_CNRT_SLOT(ret, name, params) ret(*name) params;
    MLU_CNRT_FUNCS(MLU_CNRT_SLOT, MLU_CNRT_SLOT)
#undef MLU_CNRT_SLOT
};

struct mlu_cnnl {
    void *lib;
#define MLU_CNNL_SLOT(ret, name, params) ret(*name) params;
    MLU_CNNL_FUNCS(MLU_CNNL_SLOT)
#undef MLU_CNNL_SLOT
};

/* ---- tracked objects --------------------------------------------------- */

enum mlu_what { MLU_DEV_MEM = 1, MLU_HOST_MEM, MLU_QUEUE, MLU_NOTIFIER };

/* One live allocation [base, base + len) or handle (len 1). */
struct mlu_item {
    uintptr_t base;
    uint64_t len;
    int32_t dev;
    int32_t what;
    struct mlu_item *next;
};

/* Track, find (a range inside one item), forget, and take any item of a
 * kind (finalize). Thread-safe. */
bool mlu_track(uintptr_t base, uint64_t len, int32_t dev, int32_t what);
bool mlu_find(uintptr_t p, uint64_t len, int32_t dev, int32_t what,
              struct mlu_item *out);
bool mlu_forget(uintptr_t base, int32_t dev, int32_t what,
                struct mlu_item *out);
bool mlu_take_any(int32_t what, struct mlu_item *out);

/* ---- handles ------------------------------------------------------------- */

struct keel_stream_s {
    int32_t dev;
    cnrtQueue_t q;
};

struct keel_event_s {
    int32_t dev;
    cnrtNotifier_t n;
    atomic_bool placed; /* ever recorded */
};

/* ---- state --------------------------------------------------------------- */

struct mlu_dev {
    int ordinal;            /* CNRT's index (after set_visible_devices) */
    uint64_t mem_bytes;
    uint32_t cores;
    uint32_t clock_khz;
    struct keel_stream_s *def; /* the default keel stream */
    cnnlHandle_t cnnl;          /* made on the first kernel */
    pthread_mutex_t cnnl_mu;    /* the handle's queue binding */
    _Atomic uint64_t in_use;
};

struct mlu_state {
    const keel_host_api *host;
    struct mlu_cnrt rt;
    struct mlu_cnnl nn; /* lib NULL: no kernels */
    char nn_why[400];

    pthread_once_t once;
    int32_t count;
    char why[512];
    int32_t visible[MLU_MAX_DEVICES];
    int32_t nvisible; /* 0: no restriction */
    struct mlu_dev dev[MLU_MAX_DEVICES];

    pthread_mutex_t init_mu;
    atomic_bool up;

    pthread_mutex_t items_mu;
    struct mlu_item *items;
};

extern struct mlu_state mlu;

/* ---- mlu_plugin.c ------------------------------------------------------ */

const char *mlu_code_name(cnrtRet_t r);
keel_status mlu_status_of(cnrtRet_t r);
keel_status mlu_err(keel_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* OK for cnrtSuccess, else the mapped status with
 * "<what> on mlu:<dev>: <name> (<code>): <CNRT's text>". `oom` turns
 * argument and device failures into OUT_OF_MEMORY (allocations). */
keel_status mlu_cnrt(cnrtRet_t r, bool oom, int32_t dev, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define MLU_RT(r, dev, ...) mlu_cnrt((r), false, (dev), __VA_ARGS__)
#define MLU_RT_ALLOC(r, dev, ...) mlu_cnrt((r), true, (dev), __VA_ARGS__)
const char *mlu_getenv(const char *name);
void mlu_note(keel_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void *mlu_dlopen(const char *var, const char *soname, const char **path,
                 const char **why);
/* Initialised, device in range, and CNRT's current device set to it. */
keel_status mlu_enter(int32_t dev, const char *call);
keel_status mlu_bind(int32_t dev);

/* ---- mlu_queue.c --------------------------------------------------------- */

keel_status mlu_queue_of(int32_t dev, keel_stream s, const char *call,
                         struct keel_stream_s **out);
keel_status mlu_queue_default(int32_t dev);
void mlu_queue_finalize(void);
extern const keel_stream_ops mlu_stream_ops;

/* ---- mlu_memory.c -------------------------------------------------------- */

keel_status mlu_check_range(int32_t dev, keel_dptr p, uint64_t len,
                            const char *call);
void mlu_memory_finalize(void);
extern const keel_memory_ops mlu_memory_ops;

/* ---- mlu_kernels.c ------------------------------------------------------- */

void mlu_kernels_open(void);
void mlu_kernels_release(void); /* the per-device handles (finalize) */
void mlu_kernels_close(void);
extern const keel_kernel_ops mlu_kernel_ops;

/* Shared by the kernel files (mlu_kernels.c, mlu_kernels_nn.c,
 * mlu_kernels_train.c). */
struct keel_stream_s;

/* A CNNL status as a keel one (BAD_PARAM / NOT_SUPPORTED / ARCH_MISMATCH
 * are NOT_SUPPORTED, so the core falls back). */
keel_status mlu_nn_check(cnnlStatus_t r, int32_t dev, const char *call);
/* CNNL's dtype for a keel one, CNNL_DTYPE_INVALID when it has none. */
cnnlDataType_t mlu_nn_dtype(keel_dtype dt);
/* A CNNL_LAYOUT_ARRAY descriptor with d's shape and element strides (a
 * rank-0 tensor as [1]); NOT_SUPPORTED for what does not fit an int. */
keel_status mlu_nn_describe(int32_t dev, const keel_tensor_desc *d,
                            cnnlTensorDescriptor_t *out);
/* The device's handle bound to s's queue, with the device's handle lock
 * held on success: call mlu_nn_unlock(dev) after the launch. */
keel_status mlu_nn_lock(int32_t dev, struct keel_stream_s *s,
                        cnnlHandle_t *h);
void mlu_nn_unlock(int32_t dev);
/* n bytes of workspace for a launch (n 0: *p NULL): the core's
 * stream-ordered memory, or, under a core that offers none, cnrtMalloc'd
 * (*ours true). Pass the launch's status to mlu_nn_workspace_done, which
 * waits for the queue and frees an own workspace, and returns the status
 * to report. */
keel_status mlu_nn_workspace(const keel_kernel_args *a, const char *name,
                             size_t n, void **p, bool *ours);
keel_status mlu_nn_workspace_done(const keel_kernel_args *a,
                                  struct keel_stream_s *s, const char *name,
                                  void *p, bool ours, keel_status st);
/* The kernel files' own tables. open resolves their CNNL entry points
 * one by one from the library's handle: a kernel missing one is not
 * offered. lookup answers NOT_FOUND for an op or dtype it does not take. */
void mlu_kernels_nn_open(void *cnnl);
void mlu_kernels_nn_close(void);
keel_status mlu_kernels_nn_lookup(const char *op_name, keel_dtype dtype,
                                  keel_kernel *kernel);
void mlu_kernels_train_open(void *cnnl);
void mlu_kernels_train_close(void);
keel_status mlu_kernels_train_lookup(const char *op_name, keel_dtype dtype,
                                     keel_kernel *kernel);

/* ---- mlu_collective.c ---------------------------------------------------- */

extern const keel_collective_ops mlu_coll_ops;
void mlu_collective_finalize(void);
void mlu_collective_unload(void); /* dlclose libcncl.so (unload) */

#define MLU_PTR(p) ((void *)(uintptr_t)(p))

#endif /* KEEL_MLU_INTERNAL_H */
