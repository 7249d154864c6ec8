/*
 * A host-memory stand-in for a Level Zero driver, LD_PRELOADed in front of
 * libze_loader so that the plugin's runtime (devices, memory, streams,
 * events, host functions, collectives) runs on a machine without an Intel
 * GPU. It is NOT a Level Zero implementation: memory is malloc, every
 * asynchronous command list has one worker thread executing its commands
 * in order, kernels are accepted and do nothing (so kernel results are
 * not checked with it), timestamps are CLOCK_MONOTONIC nanoseconds.
 *
 * ZE_MOCK_DEVICES (default 2) sets the number of GPUs. Each reports 1 GiB
 * of memory, and allocations (device, host and shared together) beyond
 * 1 GiB per process fail with ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY, so
 * that exhaustion is tested without touching much host memory.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <malloc.h>

#include <level_zero/ze_api.h>

#define MOCK_API __attribute__((visibility("default")))
#define MOCK_MEMORY (UINT64_C(1) << 30)

struct mdevice {
    int index;
};
static struct mdevice mdevs[16];
static int mndev = -1;
static int mdriver;

static void mock_init(void)
{
    const char *v = getenv("ZE_MOCK_DEVICES");
    if (mndev >= 0)
        return;
    mndev = v ? atoi(v) : 2;
    if (mndev < 0 || mndev > 16)
        mndev = 2;
    for (int i = 0; i < mndev; i++)
        mdevs[i].index = i;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

MOCK_API ze_result_t zeInit(ze_init_flags_t flags)
{
    (void)flags;
    mock_init();
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeDriverGet(uint32_t *count, ze_driver_handle_t *d)
{
    if (!d) {
        *count = 1;
        return ZE_RESULT_SUCCESS;
    }
    if (*count >= 1)
        d[0] = (ze_driver_handle_t)&mdriver;
    *count = 1;
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeDriverGetApiVersion(ze_driver_handle_t d,
                                           ze_api_version_t *v)
{
    (void)d;
    *v = ZE_MAKE_VERSION(1, 4); /* the barrier path */
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeDriverGetProperties(ze_driver_handle_t d,
                                           ze_driver_properties_t *p)
{
    (void)d;
    p->driverVersion = (1u << 24) | (2u << 16) | 3u;
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeDeviceGet(ze_driver_handle_t d, uint32_t *count,
                                 ze_device_handle_t *devs)
{
    (void)d;
    mock_init();
    if (!devs) {
        *count = (uint32_t)mndev;
        return ZE_RESULT_SUCCESS;
    }
    for (uint32_t i = 0; i < *count && i < (uint32_t)mndev; i++)
        devs[i] = (ze_device_handle_t)&mdevs[i];
    if (*count > (uint32_t)mndev)
        *count = (uint32_t)mndev;
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeDeviceGetProperties(ze_device_handle_t h,
                                           ze_device_properties_t *p)
{
    struct mdevice *d = (struct mdevice *)h;
    p->type = ZE_DEVICE_TYPE_GPU;
    p->vendorId = 0x8086;
    p->deviceId = 0x56a0;
    p->coreClockRate = 2400;
    p->maxMemAllocSize = MOCK_MEMORY / 2;
    p->numThreadsPerEU = 8;
    p->physicalEUSimdWidth = 8;
    p->numEUsPerSubslice = 16;
    p->numSubslicesPerSlice = 4;
    p->numSlices = 8;
    p->timerResolution = 1;
    p->timestampValidBits = 64;
    p->kernelTimestampValidBits = 64;
    snprintf(p->name, sizeof(p->name), "Level Zero mock GPU %d", d->index);
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeDeviceGetComputeProperties(
    ze_device_handle_t h, ze_device_compute_properties_t *p)
{
    (void)h;
    p->maxTotalGroupSize = 1024;
    p->maxGroupSizeX = p->maxGroupSizeY = p->maxGroupSizeZ = 1024;
    p->maxGroupCountX = p->maxGroupCountY = p->maxGroupCountZ = 0xffffffffu;
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeDeviceGetModuleProperties(
    ze_device_handle_t h, ze_device_module_properties_t *p)
{
    (void)h;
    p->flags = ZE_DEVICE_MODULE_FLAG_FP16 | ZE_DEVICE_MODULE_FLAG_FP64;
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeDeviceGetMemoryProperties(
    ze_device_handle_t h, uint32_t *count, ze_device_memory_properties_t *p)
{
    (void)h;
    if (p && *count >= 1)
        p[0].totalSize = MOCK_MEMORY;
    *count = 1;
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeDeviceGetCommandQueueGroupProperties(
    ze_device_handle_t h, uint32_t *count,
    ze_command_queue_group_properties_t *p)
{
    (void)h;
    if (p && *count >= 1) {
        p[0].flags = ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE |
                     ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY;
        p[0].numQueues = 1;
    }
    *count = 1;
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeDevicePciGetPropertiesExt(ze_device_handle_t h,
                                                 ze_pci_ext_properties_t *p)
{
    struct mdevice *d = (struct mdevice *)h;
    p->address.domain = 0;
    p->address.bus = 3u + (uint32_t)d->index;
    p->address.device = 0;
    p->address.function = 0;
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeContextCreate(ze_driver_handle_t d,
                                     const ze_context_desc_t *desc,
                                     ze_context_handle_t *ctx)
{
    (void)d, (void)desc;
    *ctx = (ze_context_handle_t)malloc(16);
    return *ctx ? ZE_RESULT_SUCCESS : ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
}

MOCK_API ze_result_t zeContextDestroy(ze_context_handle_t ctx)
{
    free(ctx);
    return ZE_RESULT_SUCCESS;
}

/* ---- memory ------------------------------------------------------------ */

static _Atomic uint64_t mock_used;

static ze_result_t mock_alloc(size_t size, size_t align, void **p)
{
    size_t a = align < 64 ? 64 : align;
    size_t n;

    *p = NULL;
    if (size > MOCK_MEMORY)
        return ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
    n = (size + a - 1) / a * a;
    *p = aligned_alloc(a, n ? n : a);
    if (!*p)
        return ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
    n = malloc_usable_size(*p);
    if (atomic_fetch_add(&mock_used, n) + n > MOCK_MEMORY) {
        atomic_fetch_sub(&mock_used, n);
        free(*p);
        *p = NULL;
        return ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
    }
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeMemAllocDevice(ze_context_handle_t c,
                                      const ze_device_mem_alloc_desc_t *d,
                                      size_t size, size_t align,
                                      ze_device_handle_t dev, void **p)
{
    (void)c, (void)d, (void)dev;
    return mock_alloc(size, align, p);
}

MOCK_API ze_result_t zeMemAllocHost(ze_context_handle_t c,
                                    const ze_host_mem_alloc_desc_t *d,
                                    size_t size, size_t align, void **p)
{
    (void)c, (void)d;
    return mock_alloc(size, align, p);
}

MOCK_API ze_result_t zeMemAllocShared(ze_context_handle_t c,
                                      const ze_device_mem_alloc_desc_t *dd,
                                      const ze_host_mem_alloc_desc_t *hd,
                                      size_t size, size_t align,
                                      ze_device_handle_t dev, void **p)
{
    (void)c, (void)dd, (void)hd, (void)dev;
    return mock_alloc(size, align, p);
}

MOCK_API ze_result_t zeMemFree(ze_context_handle_t c, void *p)
{
    (void)c;
    if (p)
        atomic_fetch_sub(&mock_used, malloc_usable_size(p));
    free(p);
    return ZE_RESULT_SUCCESS;
}

/* ---- events -------------------------------------------------------------- */

struct mevent {
    atomic_int signaled;
    _Atomic uint64_t ts;
};

MOCK_API ze_result_t zeEventPoolCreate(ze_context_handle_t c,
                                       const ze_event_pool_desc_t *d,
                                       uint32_t n, ze_device_handle_t *devs,
                                       ze_event_pool_handle_t *pool)
{
    (void)c, (void)d, (void)n, (void)devs;
    *pool = (ze_event_pool_handle_t)malloc(16);
    return *pool ? ZE_RESULT_SUCCESS : ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
}

MOCK_API ze_result_t zeEventPoolDestroy(ze_event_pool_handle_t p)
{
    free(p);
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeEventCreate(ze_event_pool_handle_t p,
                                   const ze_event_desc_t *d,
                                   ze_event_handle_t *e)
{
    (void)p, (void)d;
    struct mevent *ev = calloc(1, sizeof(*ev));
    *e = (ze_event_handle_t)ev;
    return ev ? ZE_RESULT_SUCCESS : ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
}

MOCK_API ze_result_t zeEventDestroy(ze_event_handle_t e)
{
    free(e);
    return ZE_RESULT_SUCCESS;
}

static void ev_signal(struct mevent *e)
{
    atomic_store(&e->ts, now_ns());
    atomic_store(&e->signaled, 1);
}

MOCK_API ze_result_t zeEventHostSignal(ze_event_handle_t e)
{
    ev_signal((struct mevent *)e);
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeEventHostReset(ze_event_handle_t e)
{
    atomic_store(&((struct mevent *)e)->signaled, 0);
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeEventQueryStatus(ze_event_handle_t e)
{
    return atomic_load(&((struct mevent *)e)->signaled) ? ZE_RESULT_SUCCESS
                                                        : ZE_RESULT_NOT_READY;
}

static void ev_wait(struct mevent *e)
{
    struct timespec ts = {0, 20000};
    while (!atomic_load(&e->signaled))
        nanosleep(&ts, NULL);
}

MOCK_API ze_result_t zeEventHostSynchronize(ze_event_handle_t e,
                                            uint64_t timeout)
{
    (void)timeout;
    ev_wait((struct mevent *)e);
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeEventQueryKernelTimestamp(
    ze_event_handle_t e, ze_kernel_timestamp_result_t *r)
{
    struct mevent *ev = (struct mevent *)e;
    if (!atomic_load(&ev->signaled))
        return ZE_RESULT_NOT_READY;
    uint64_t t = atomic_load(&ev->ts);
    r->global.kernelStart = r->global.kernelEnd = t;
    r->context.kernelStart = r->context.kernelEnd = t;
    return ZE_RESULT_SUCCESS;
}

/* ---- command lists ------------------------------------------------------ */

enum mkind { M_COPY, M_FILL, M_SIGNAL, M_WAIT, M_NOP };

struct mcmd {
    enum mkind kind;
    void *dst;
    const void *src;
    size_t n;
    uint8_t value;
    struct mevent *ev;
    struct mevent **waits;
    uint32_t nwaits;
    struct mcmd *next;
};

struct mlist {
    bool sync;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct mcmd *head, *tail;
    bool stop;
    pthread_t th;
};

static void run_cmd(struct mcmd *c)
{
    switch (c->kind) {
    case M_COPY: memmove(c->dst, c->src, c->n); break;
    case M_FILL: memset(c->dst, c->value, c->n); break;
    case M_SIGNAL: ev_signal(c->ev); break;
    case M_WAIT:
        for (uint32_t i = 0; i < c->nwaits; i++)
            ev_wait(c->waits[i]);
        break;
    case M_NOP: break;
    }
}

static void *list_main(void *arg)
{
    struct mlist *l = arg;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        while (!l->head && !l->stop)
            pthread_cond_wait(&l->cv, &l->mu);
        struct mcmd *c = l->head;
        if (!c) {
            pthread_mutex_unlock(&l->mu);
            return NULL;
        }
        l->head = c->next;
        if (!l->head)
            l->tail = NULL;
        pthread_mutex_unlock(&l->mu);
        run_cmd(c);
        free(c->waits);
        free(c);
    }
}

static ze_result_t push(ze_command_list_handle_t h, struct mcmd c,
                        ze_event_handle_t signal, uint32_t nwait,
                        ze_event_handle_t *waits)
{
    struct mlist *l = (struct mlist *)h;
    struct mcmd *cs[3] = {NULL, NULL, NULL};
    int n = 0;

    if (nwait) {
        struct mcmd *w = calloc(1, sizeof(*w));
        w->kind = M_WAIT;
        w->waits = malloc(nwait * sizeof(*w->waits));
        memcpy(w->waits, waits, nwait * sizeof(*w->waits));
        w->nwaits = nwait;
        cs[n++] = w;
    }
    struct mcmd *m = malloc(sizeof(*m));
    *m = c;
    m->next = NULL;
    cs[n++] = m;
    if (signal) {
        struct mcmd *s = calloc(1, sizeof(*s));
        s->kind = M_SIGNAL;
        s->ev = (struct mevent *)signal;
        cs[n++] = s;
    }
    if (l->sync) {
        for (int i = 0; i < n; i++) {
            run_cmd(cs[i]);
            free(cs[i]->waits);
            free(cs[i]);
        }
        return ZE_RESULT_SUCCESS;
    }
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i < n; i++) {
        cs[i]->next = NULL;
        if (l->tail)
            l->tail->next = cs[i];
        else
            l->head = cs[i];
        l->tail = cs[i];
    }
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeCommandListCreateImmediate(
    ze_context_handle_t c, ze_device_handle_t d,
    const ze_command_queue_desc_t *desc, ze_command_list_handle_t *out)
{
    (void)c, (void)d;
    struct mlist *l = calloc(1, sizeof(*l));
    if (!l)
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    l->sync = desc->mode == ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    if (!l->sync)
        pthread_create(&l->th, NULL, list_main, l);
    *out = (ze_command_list_handle_t)l;
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeCommandListDestroy(ze_command_list_handle_t h)
{
    struct mlist *l = (struct mlist *)h;
    if (!l->sync) {
        pthread_mutex_lock(&l->mu);
        l->stop = true;
        pthread_cond_signal(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->th, NULL);
    }
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeCommandListAppendMemoryCopy(
    ze_command_list_handle_t h, void *dst, const void *src, size_t n,
    ze_event_handle_t sig, uint32_t nw, ze_event_handle_t *w)
{
    return push(h, (struct mcmd){.kind = M_COPY, .dst = dst, .src = src,
                                 .n = n}, sig, nw, w);
}

MOCK_API ze_result_t zeCommandListAppendMemoryFill(
    ze_command_list_handle_t h, void *dst, const void *pattern, size_t psize,
    size_t n, ze_event_handle_t sig, uint32_t nw, ze_event_handle_t *w)
{
    if (psize != 1)
        return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
    return push(h, (struct mcmd){.kind = M_FILL, .dst = dst, .n = n,
                                 .value = *(const uint8_t *)pattern},
                sig, nw, w);
}

MOCK_API ze_result_t zeCommandListAppendSignalEvent(ze_command_list_handle_t h,
                                                    ze_event_handle_t e)
{
    return push(h, (struct mcmd){.kind = M_SIGNAL, .ev = (struct mevent *)e},
                NULL, 0, NULL);
}

MOCK_API ze_result_t zeCommandListAppendWaitOnEvents(
    ze_command_list_handle_t h, uint32_t n, ze_event_handle_t *e)
{
    return push(h, (struct mcmd){.kind = M_NOP}, NULL, n, e);
}

MOCK_API ze_result_t zeCommandListAppendBarrier(ze_command_list_handle_t h,
                                                ze_event_handle_t sig,
                                                uint32_t nw,
                                                ze_event_handle_t *w)
{
    return push(h, (struct mcmd){.kind = M_NOP}, sig, nw, w);
}

MOCK_API ze_result_t zeCommandListAppendLaunchKernel(
    ze_command_list_handle_t h, ze_kernel_handle_t k,
    const ze_group_count_t *g, ze_event_handle_t sig, uint32_t nw,
    ze_event_handle_t *w)
{
    (void)k, (void)g;
    return push(h, (struct mcmd){.kind = M_NOP}, sig, nw, w);
}

/* ---- modules and kernels (accepted, never run) --------------------------- */

MOCK_API ze_result_t zeModuleCreate(ze_context_handle_t c,
                                    ze_device_handle_t d,
                                    const ze_module_desc_t *desc,
                                    ze_module_handle_t *m,
                                    ze_module_build_log_handle_t *log)
{
    (void)c, (void)d;
    const uint32_t *w = (const uint32_t *)desc->pInputModule;
    if (log)
        *log = NULL;
    if (desc->format != ZE_MODULE_FORMAT_IL_SPIRV || desc->inputSize < 20 ||
        w[0] != 0x07230203u) /* the SPIR-V magic number */
        return ZE_RESULT_ERROR_INVALID_NATIVE_BINARY;
    *m = (ze_module_handle_t)malloc(16);
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeModuleDestroy(ze_module_handle_t m)
{
    free(m);
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeModuleBuildLogGetString(ze_module_build_log_handle_t l,
                                               size_t *n, char *s)
{
    (void)l;
    if (s && *n)
        s[0] = '\0';
    *n = 1;
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeModuleBuildLogDestroy(ze_module_build_log_handle_t l)
{
    (void)l;
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeKernelCreate(ze_module_handle_t m,
                                    const ze_kernel_desc_t *d,
                                    ze_kernel_handle_t *k)
{
    (void)m, (void)d;
    *k = (ze_kernel_handle_t)malloc(16);
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeKernelDestroy(ze_kernel_handle_t k)
{
    free(k);
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeKernelSetArgumentValue(ze_kernel_handle_t k,
                                              uint32_t i, size_t n,
                                              const void *v)
{
    (void)k, (void)i, (void)n, (void)v;
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeKernelSetGroupSize(ze_kernel_handle_t k, uint32_t x,
                                          uint32_t y, uint32_t z)
{
    (void)k, (void)x, (void)y, (void)z;
    return ZE_RESULT_SUCCESS;
}

MOCK_API ze_result_t zeKernelSuggestGroupSize(ze_kernel_handle_t k,
                                              uint32_t gx, uint32_t gy,
                                              uint32_t gz, uint32_t *x,
                                              uint32_t *y, uint32_t *z)
{
    (void)k;
    *x = gx % 64 == 0 ? 64 : 1;
    *y = gy ? 1 : 1;
    *z = gz ? 1 : 1;
    return ZE_RESULT_SUCCESS;
}
