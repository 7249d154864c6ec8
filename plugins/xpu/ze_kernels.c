/*
 * keel Level Zero plugin — the Level Zero backend of the shared kernel host
 * code (plugins/clkernels/host/ok.h): SPIR-V modules, kernels, launches,
 * scratch buffers. The sibling of plugins/opencl/kernels/ok_program.c.
 *
 * MODULE. The OpenCL C of plugins/clkernels/ is compiled to SPIR-V at
 * build time, twice (meson.build): with KEEL_HAS_FP64 for devices whose
 * module properties have ZE_DEVICE_MODULE_FLAG_FP64, without it for the
 * others (Arc, Xe-LP). Both are embedded (xpu_spirv.c, generated); the one
 * that fits is built with zeModuleCreate on a device's first launch, the
 * build log going into the error when that fails.
 *
 * ARGUMENTS. A buffer is the pair (pointer, byte offset) of common.cl's
 * BUF(): the keel_dptr is the USM pointer itself, so the pointer argument
 * is the dptr and the offset 0, after checking that [dptr, dptr + bytes)
 * lies inside a live allocation of the device.
 *
 * KERNELS. One ze_kernel per name and device, created on first use and
 * cached. Setting arguments and appending the launch happen under the
 * device's kernel mutex: a ze_kernel's arguments are shared state.
 *
 * GROUP SIZES. With ok_run_nd's local sizes NULL, zeKernelSuggestGroupSize
 * picks group sizes that divide the global sizes exactly (kernels launched
 * this way need not bound their work items); with local sizes given, the
 * global sizes are rounded up to multiples of them.
 *
 * SCRATCH. zeMemFree frees at once, so ok_scratch_release appends a signal
 * event on the launch's stream and defers the free until that event has
 * signalled (checked at the next scratch allocation and stream or device
 * synchronize).
 *
 * GEMM. Level Zero has no BLAS: ok_backend_gemm returns NOT_SUPPORTED and
 * the kernels use their own tiled GEMM.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ok.h"
#include "ze_internal.h"

/* The embedded SPIR-V modules (generated xpu_spirv.c). */
extern const unsigned char keel_xpu_spv_fp64[];
extern const size_t keel_xpu_spv_fp64_size;
extern const unsigned char keel_xpu_spv_fp32[];
extern const size_t keel_xpu_spv_fp32_size;

#define ZK_TAB 512 /* kernel hash slots per device (power of 2) */

struct zk_slot {
    char *name;
    ze_kernel_handle_t k;
};

struct ze_kstate {
    pthread_mutex_t mu;
    ze_module_handle_t mod;
    keel_status build_status; /* a failed build is not retried */
    char build_msg[900];
    struct zk_slot kt[ZK_TAB];
};

struct ok_mem_s {
    void *ptr;
    size_t bytes;
};

static pthread_mutex_t kstate_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- errors and the lookup ---------------------------------------------- */

keel_status ok_fail(keel_status st, const char *fmt, ...)
{
    char buf[900];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return ze_fail(st, "%s", buf);
}

int32_t ok_backend_device_count(void)
{
    return atomic_load(&ze_g.initialized) ? ze_g.ndev : 0;
}

uint32_t ok_backend_dtype_mask(int32_t device)
{
    uint32_t m = KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_BF16) |
                 KEEL_DTYPE_BIT(KEEL_I8) | KEEL_DTYPE_BIT(KEEL_U8) |
                 KEEL_DTYPE_BIT(KEEL_I32) | KEEL_DTYPE_BIT(KEEL_I64) |
                 KEEL_DTYPE_BIT(KEEL_BOOL);

    if (device < 0 || device >= ze_g.ndev)
        return 0;
    if (ze_g.dev[device].fp64)
        m |= KEEL_DTYPE_BIT(KEEL_F64);
    if (ze_g.dev[device].fp16)
        m |= KEEL_DTYPE_BIT(KEEL_F16);
    return m;
}

const keel_kernel_ops ze_kernel_ops = {
    .header = KEEL_TABLE_HEADER(keel_kernel_ops),
    .lookup = ok_kernel_lookup,
};

const char *ok_backend_blas_name(void)
{
    return "";
}

keel_status ok_backend_gemm(const struct ok_launch *l, const struct ok_gemm *g)
{
    (void)l;
    (void)g;
    return KEEL_STATUS_NOT_SUPPORTED;
}

/* ---- the module ---------------------------------------------------------- */

static struct ze_kstate *kstate(int32_t device)
{
    struct ze_device *d = &ze_g.dev[device];
    struct ze_kstate *ks;

    pthread_mutex_lock(&kstate_lock);
    ks = d->kern;
    if (!ks) {
        ks = calloc(1, sizeof(*ks));
        if (ks) {
            pthread_mutex_init(&ks->mu, NULL);
            d->kern = ks;
        }
    }
    pthread_mutex_unlock(&kstate_lock);
    return ks;
}

/* Build the device's module. Called with ks->mu held. */
static keel_status module_make(struct ze_kstate *ks, int32_t device)
{
    struct ze_device *d = &ze_g.dev[device];
    ze_module_build_log_handle_t blog = NULL;
    ze_module_desc_t md = {
        .stype = ZE_STRUCTURE_TYPE_MODULE_DESC,
        .format = ZE_MODULE_FORMAT_IL_SPIRV,
        .inputSize = d->fp64 ? keel_xpu_spv_fp64_size : keel_xpu_spv_fp32_size,
        .pInputModule = d->fp64 ? keel_xpu_spv_fp64 : keel_xpu_spv_fp32,
        .pBuildFlags = "",
    };
    ze_result_t r;

    if (ks->build_status)
        return ze_fail(ks->build_status, "%s", ks->build_msg);
    /* SPIR-V header word 1: 0x00MMmm00; the device's supported version is
     * ZE_MAKE_VERSION(MM, mm) */
    if (md.inputSize >= 8 && d->module.spirvVersionSupported) {
        const unsigned char *w = md.pInputModule + 4;
        uint32_t v = (uint32_t)w[0] | (uint32_t)w[1] << 8 |
                     (uint32_t)w[2] << 16 | (uint32_t)w[3] << 24;
        uint32_t want = ZE_MAKE_VERSION((v >> 16) & 0xffu, (v >> 8) & 0xffu);
        if (want > d->module.spirvVersionSupported) {
            ks->build_status = KEEL_STATUS_NOT_SUPPORTED;
            snprintf(ks->build_msg, sizeof(ks->build_msg),
                     "zeModuleCreate on xpu:%d (%s): the kernels are SPIR-V "
                     "%u.%u, the driver accepts up to %u.%u",
                     (int)device, d->name, (unsigned)ZE_MAJOR_VERSION(want),
                     (unsigned)ZE_MINOR_VERSION(want),
                     (unsigned)ZE_MAJOR_VERSION(d->module.spirvVersionSupported),
                     (unsigned)ZE_MINOR_VERSION(d->module.spirvVersionSupported));
            return ze_fail(ks->build_status, "%s", ks->build_msg);
        }
    }
    r = zeModuleCreate(d->ctx, d->dev, &md, &ks->mod, &blog);
    if (r != ZE_RESULT_SUCCESS) {
        char *log = NULL;
        size_t n = 0;
        if (blog && zeModuleBuildLogGetString(blog, &n, NULL) ==
                        ZE_RESULT_SUCCESS &&
            n > 0 && (log = malloc(n + 1))) {
            if (zeModuleBuildLogGetString(blog, &n, log) != ZE_RESULT_SUCCESS)
                log[0] = '\0';
            log[n] = '\0';
            ze_log(KEEL_LOG_ERROR, "xpu:%d: SPIR-V module build log:\n%s",
                   (int)device, log);
        }
        ks->build_status = ze_status_of(r) == KEEL_STATUS_OUT_OF_MEMORY
                               ? KEEL_STATUS_OUT_OF_MEMORY
                               : KEEL_STATUS_DEVICE_ERROR;
        snprintf(ks->build_msg, sizeof(ks->build_msg),
                 "zeModuleCreate(SPIR-V %s, %zu bytes) on xpu:%d (%s): %s; "
                 "build log: %.500s",
                 d->fp64 ? "with float64" : "without float64", md.inputSize,
                 (int)device, d->name, ze_result_name(r),
                 log && log[0] ? log : "(none)");
        free(log);
        ks->mod = NULL;
        if (blog)
            zeModuleBuildLogDestroy(blog);
        return ze_fail(ks->build_status, "%s", ks->build_msg);
    }
    if (blog)
        zeModuleBuildLogDestroy(blog);
    ze_log(KEEL_LOG_INFO, "xpu:%d: SPIR-V module built (%s float64)",
           (int)device, d->fp64 ? "with" : "without");
    return KEEL_STATUS_OK;
}

void ze_kernels_release(int32_t device)
{
    struct ze_device *d = &ze_g.dev[device];
    struct ze_kstate *ks = d->kern;

    if (!ks)
        return;
    for (int i = 0; i < ZK_TAB; i++) {
        if (ks->kt[i].k)
            zeKernelDestroy(ks->kt[i].k);
        free(ks->kt[i].name);
    }
    if (ks->mod)
        zeModuleDestroy(ks->mod);
    pthread_mutex_destroy(&ks->mu);
    free(ks);
    d->kern = NULL;
}

keel_status ok_backend_begin(const keel_kernel_args *a, struct ok_launch *l)
{
    struct keel_stream_s *s;
    struct ze_kstate *ks;
    keel_status st = ze_enter(a->device, l->op ? l->op : "kernel");

    if (st)
        return st;
    if ((st = ze_stream_resolve(a->device, a->stream, l->op, &s)))
        return st;
    ks = kstate(a->device);
    if (!ks)
        return ok_fail(KEEL_STATUS_OUT_OF_MEMORY,
                       "%s: no host memory for the kernel state of xpu:%d",
                       l->op, (int)a->device);
    pthread_mutex_lock(&ks->mu);
    if (!ks->mod)
        st = module_make(ks, a->device);
    pthread_mutex_unlock(&ks->mu);
    if (st)
        return st;
    l->queue = s;
    l->dev = ks;
    l->fp64 = ze_g.dev[a->device].fp64;
    return KEEL_STATUS_OK;
}

/* ---- launches ------------------------------------------------------------ */

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u;
    while (*s)
        h = (h ^ (uint8_t)*s++) * 16777619u;
    return h;
}

/* The kernel `name` of the device's module. Called with ks->mu held. */
static keel_status get_kernel(struct ze_kstate *ks, int32_t device,
                              const char *name, ze_kernel_handle_t *out)
{
    uint32_t h = name_hash(name) & (ZK_TAB - 1);

    for (int probe = 0; probe < ZK_TAB; probe++) {
        struct zk_slot *s = &ks->kt[(h + (uint32_t)probe) & (ZK_TAB - 1)];
        if (s->name && !strcmp(s->name, name)) {
            *out = s->k;
            return KEEL_STATUS_OK;
        }
        if (s->name)
            continue;
        ze_kernel_desc_t kd = {.stype = ZE_STRUCTURE_TYPE_KERNEL_DESC,
                               .pKernelName = name};
        ze_kernel_handle_t k = NULL;
        ze_result_t r = zeKernelCreate(ks->mod, &kd, &k);
        if (r != ZE_RESULT_SUCCESS)
            return ok_fail(r == ZE_RESULT_ERROR_INVALID_KERNEL_NAME
                               ? KEEL_STATUS_INTERNAL
                               : KEEL_STATUS_DEVICE_ERROR,
                           "zeKernelCreate(%s) on xpu:%d: %s", name,
                           (int)device, ze_result_name(r));
        s->name = strdup(name);
        if (!s->name) {
            zeKernelDestroy(k);
            return ok_fail(KEEL_STATUS_OUT_OF_MEMORY,
                           "xpu:%d: no host memory", (int)device);
        }
        s->k = k;
        *out = k;
        return KEEL_STATUS_OK;
    }
    return ok_fail(KEEL_STATUS_INTERNAL, "xpu:%d: more than %d kernels in use",
                   (int)device, ZK_TAB);
}

static keel_status set_args(const struct ok_launch *l, ze_kernel_handle_t k,
                            const char *name, const struct ok_arg *args,
                            int nargs)
{
    uint32_t idx = 0;
    ze_result_t r = ZE_RESULT_SUCCESS;
    keel_status st;
    const uint64_t zero = 0;

    for (int i = 0; i < nargs && r == ZE_RESULT_SUCCESS; i++) {
        const struct ok_arg *g = &args[i];
        switch (g->kind) {
        case OK_A_BUF: {
            void *p = ZE_PTR(g->ptr);
            if (g->bytes > 0) {
                st = ze_mem_check(l->device, g->ptr, g->bytes, l->op);
                if (st)
                    return st;
            }
            r = zeKernelSetArgumentValue(k, idx++, sizeof(p), &p);
            if (r == ZE_RESULT_SUCCESS)
                r = zeKernelSetArgumentValue(k, idx++, sizeof(zero), &zero);
            break;
        }
        case OK_A_MEM: {
            void *p = g->mem ? g->mem->ptr : NULL;
            r = zeKernelSetArgumentValue(k, idx++, sizeof(p), &p);
            if (r == ZE_RESULT_SUCCESS)
                r = zeKernelSetArgumentValue(k, idx++, sizeof(zero), &zero);
            break;
        }
        case OK_A_I32: {
            int32_t v = (int32_t)g->i;
            r = zeKernelSetArgumentValue(k, idx++, sizeof(v), &v);
            break;
        }
        case OK_A_I64:
        case OK_A_U64: {
            int64_t v = g->i;
            r = zeKernelSetArgumentValue(k, idx++, sizeof(v), &v);
            break;
        }
        case OK_A_F32: {
            float v = (float)g->f;
            r = zeKernelSetArgumentValue(k, idx++, sizeof(v), &v);
            break;
        }
        case OK_A_F64: {
            double v = g->f;
            r = zeKernelSetArgumentValue(k, idx++, sizeof(v), &v);
            break;
        }
        case OK_A_DESC:
            r = zeKernelSetArgumentValue(k, idx++, sizeof(struct ok_kdesc),
                                         g->desc);
            break;
        case OK_A_LOCAL:
            if (g->bytes == 0 || g->bytes > SIZE_MAX)
                return ok_fail(KEEL_STATUS_INTERNAL,
                               "%s: local buffer of %" PRIu64 " bytes for %s",
                               l->op, g->bytes, name);
            r = zeKernelSetArgumentValue(k, idx++, (size_t)g->bytes, NULL);
            break;
        }
    }
    if (r != ZE_RESULT_SUCCESS)
        return ok_fail(KEEL_STATUS_INTERNAL,
                       "%s: zeKernelSetArgumentValue(argument %u of kernel "
                       "%s) on xpu:%d: %s",
                       l->op, (unsigned)(idx ? idx - 1 : 0), name,
                       (int)l->device, ze_result_name(r));
    return KEEL_STATUS_OK;
}

keel_status ok_run_nd(const struct ok_launch *l, const char *name, int dims,
                      const size_t *global, const size_t *local,
                      const struct ok_arg *args, int nargs)
{
    struct ze_kstate *ks = l->dev;
    struct keel_stream_s *s = l->queue;
    const struct ze_device *d = &ze_g.dev[l->device];
    uint32_t gs[3] = {1, 1, 1}, gc[3] = {1, 1, 1};
    size_t g[3] = {1, 1, 1};
    const uint32_t maxc[3] = {d->compute.maxGroupCountX,
                              d->compute.maxGroupCountY,
                              d->compute.maxGroupCountZ};
    ze_kernel_handle_t k = NULL;
    ze_result_t r;
    keel_status st;

    if (dims < 1 || dims > 3)
        return ok_fail(KEEL_STATUS_INTERNAL, "%s: %d launch dimensions",
                       l->op, dims);
    for (int i = 0; i < dims; i++) {
        if (global[i] == 0)
            return KEEL_STATUS_OK;
        if (global[i] > UINT32_MAX)
            return ok_fail(KEEL_STATUS_NOT_SUPPORTED,
                           "%s: global size %zu of kernel %s exceeds 2^32 "
                           "work items in one dimension on xpu:%d",
                           l->op, global[i], name, (int)l->device);
        g[i] = global[i];
        if (local) {
            if (local[i] == 0 || local[i] > UINT32_MAX)
                return ok_fail(KEEL_STATUS_INTERNAL,
                               "%s: work-group size %zu", l->op, local[i]);
            gs[i] = (uint32_t)local[i];
        }
    }
    pthread_mutex_lock(&ks->mu);
    st = get_kernel(ks, l->device, name, &k);
    if (!st && !local) {
        r = zeKernelSuggestGroupSize(k, (uint32_t)g[0], (uint32_t)g[1],
                                     (uint32_t)g[2], &gs[0], &gs[1], &gs[2]);
        if (r != ZE_RESULT_SUCCESS)
            st = ok_fail(KEEL_STATUS_DEVICE_ERROR,
                         "%s: zeKernelSuggestGroupSize(%s) on xpu:%d: %s",
                         l->op, name, (int)l->device, ze_result_name(r));
    }
    if (!st) {
        for (int i = 0; i < 3; i++) {
            if (gs[i] == 0)
                gs[i] = 1;
            gc[i] = (uint32_t)((g[i] + gs[i] - 1) / gs[i]);
            if (maxc[i] && gc[i] > maxc[i])
                st = ok_fail(KEEL_STATUS_NOT_SUPPORTED,
                             "%s: %u groups of kernel %s in dimension %d "
                             "exceed xpu:%d's limit %u",
                             l->op, gc[i], name, i, (int)l->device, maxc[i]);
        }
    }
    if (!st) {
        r = zeKernelSetGroupSize(k, gs[0], gs[1], gs[2]);
        if (r != ZE_RESULT_SUCCESS)
            st = ok_fail(KEEL_STATUS_DEVICE_ERROR,
                         "%s: zeKernelSetGroupSize(%u, %u, %u) of kernel %s on "
                         "xpu:%d: %s",
                         l->op, gs[0], gs[1], gs[2], name, (int)l->device,
                         ze_result_name(r));
    }
    if (!st)
        st = set_args(l, k, name, args, nargs);
    if (!st) {
        ze_group_count_t cnt = {gc[0], gc[1], gc[2]};
        ze_stream_lock(s);
        r = zeCommandListAppendLaunchKernel(s->list, k, &cnt, NULL, 0, NULL);
        ze_stream_unlock(s);
        if (r != ZE_RESULT_SUCCESS)
            st = ok_fail(ze_status_of(r) == KEEL_STATUS_OUT_OF_MEMORY
                             ? KEEL_STATUS_OUT_OF_MEMORY
                             : KEEL_STATUS_DEVICE_ERROR,
                         "%s: zeCommandListAppendLaunchKernel(%s, %u x %u x "
                         "%u groups) on xpu:%d: %s",
                         l->op, name, gc[0], gc[1], gc[2], (int)l->device,
                         ze_result_name(r));
    }
    pthread_mutex_unlock(&ks->mu);
    return st;
}

/* ---- scratch ------------------------------------------------------------- */

keel_status ok_scratch(const struct ok_launch *l, size_t bytes, ok_mem *m)
{
    struct ze_device *d = &ze_g.dev[l->device];
    ze_device_mem_alloc_desc_t dd = {
        .stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC};
    struct ok_mem_s *mm;
    void *p = NULL;
    ze_result_t r;

    *m = NULL;
    if (bytes == 0)
        bytes = 1;
    ze_collect_deferred(l->device);
    if (d->props.maxMemAllocSize && (uint64_t)bytes > d->props.maxMemAllocSize)
        return ok_fail(KEEL_STATUS_OUT_OF_MEMORY,
                       "%s: zeMemAllocDevice(%zu bytes of scratch) on xpu:%d: "
                       "larger than the device's largest allocation (%" PRIu64
                       " bytes)",
                       l->op, bytes, (int)l->device, d->props.maxMemAllocSize);
    mm = calloc(1, sizeof(*mm));
    if (!mm)
        return ok_fail(KEEL_STATUS_OUT_OF_MEMORY, "%s: no host memory",
                       l->op);
    r = zeMemAllocDevice(d->ctx, &dd, bytes, ZE_ALLOC_ALIGNMENT, d->dev, &p);
    if (r != ZE_RESULT_SUCCESS || !p) {
        free(mm);
        return ok_fail(KEEL_STATUS_OUT_OF_MEMORY,
                       "%s: zeMemAllocDevice(%zu bytes of scratch) on xpu:%d: "
                       "%s",
                       l->op, bytes, (int)l->device,
                       ze_result_name(r ? r
                                        : ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY));
    }
    mm->ptr = p;
    mm->bytes = bytes;
    *m = mm;
    return KEEL_STATUS_OK;
}

void ok_scratch_release(const struct ok_launch *l, ok_mem m)
{
    struct ze_device *d;
    struct keel_stream_s *s;
    struct ze_deferred *df;
    struct ze_ev *ev = NULL;
    ze_result_t r = ZE_RESULT_ERROR_UNKNOWN;

    if (!m)
        return;
    d = &ze_g.dev[l->device];
    s = l->queue;
    df = calloc(1, sizeof(*df));
    if (df && ze_ev_get(l->device, false, &ev) == KEEL_STATUS_OK) {
        ze_stream_lock(s);
        r = zeCommandListAppendSignalEvent(s->list, ev->h);
        ze_stream_unlock(s);
    }
    if (!df || r != ZE_RESULT_SUCCESS) {
        /* no event to wait on: wait for the stream before freeing */
        if (ev)
            ze_ev_put(ev);
        free(df);
        ze_stream_wait(s, l->op);
        zeMemFree(d->ctx, m->ptr);
        free(m);
        return;
    }
    df->ptr = m->ptr;
    df->done = ev;
    free(m);
    pthread_mutex_lock(&d->mu);
    df->next = d->deferred;
    d->deferred = df;
    pthread_mutex_unlock(&d->mu);
}

keel_status ok_scratch_upload(const struct ok_launch *l, const void *src,
                              size_t bytes, ok_mem *m)
{
    struct ze_device *d = &ze_g.dev[l->device];
    keel_status st = ok_scratch(l, bytes ? bytes : 1, m);
    ze_result_t r;

    if (st || bytes == 0)
        return st;
    /* The new buffer is used by nothing yet: copy on the synchronous list,
     * so that `src` may be freed when this returns. */
    pthread_mutex_lock(&d->sync_mu);
    r = zeCommandListAppendMemoryCopy(d->sync_list, (*m)->ptr, src, bytes,
                                      NULL, 0, NULL);
    pthread_mutex_unlock(&d->sync_mu);
    if (r != ZE_RESULT_SUCCESS) {
        zeMemFree(d->ctx, (*m)->ptr);
        free(*m);
        *m = NULL;
        return ok_fail(ze_status_of(r) == KEEL_STATUS_OUT_OF_MEMORY
                           ? KEEL_STATUS_OUT_OF_MEMORY
                           : KEEL_STATUS_DEVICE_ERROR,
                       "%s: zeCommandListAppendMemoryCopy(%zu bytes of table) "
                       "on xpu:%d: %s",
                       l->op, bytes, (int)l->device, ze_result_name(r));
    }
    return KEEL_STATUS_OK;
}
