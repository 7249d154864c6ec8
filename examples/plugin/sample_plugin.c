/*
 * sample_plugin.c: a complete keel device plugin, written the way a port to
 * a new accelerator starts.
 *
 * It serves device type "sample" ("sample:0", "sample:1") and behaves like
 * a discrete accelerator in the two ways that matter to the core:
 *
 *   - Device memory cannot be touched by the host. Allocations live in host
 *     RAM, but the keel_dptr handed out carries a tag in its top byte, which
 *     makes it a non-canonical address on x86-64 and AArch64: a host
 *     dereference faults at once. Byte offsets that the core adds stay below
 *     the tag, so the plugin recovers the host address by masking.
 *   - Streams are asynchronous. Every stream has a worker thread and a FIFO
 *     of tasks; kernels, async copies, memsets, event records, event waits
 *     and host functions are queued and return at once. Errors raised by
 *     queued work are kept and reported by the next synchronising call.
 *
 * It provides kernels for four ops in float32 only: add, multiply, relu and
 * matmul. Everything else the core runs on the CPU plugin (its visible
 * fallback), which is the normal state of a new port. `keel conform` tells
 * what a plugin like this gets right; KEEL_STRICT=report lists every kernel
 * a workload still needs.
 *
 * Its kernels get their argument checks from the kernel kit (keel/kit.h,
 * libkeel-kit.a): one call checks a launch against the op catalog, so the
 * plugin keeps only what is its own (where memory lives, float32 only).
 *
 * Build outside the keel tree (against an installed keel):
 *
 *   cc -std=c11 -O2 -fPIC -shared -o libkeel-sample.so sample_plugin.c \
 *      $(pkg-config --cflags --libs keel-kit) -lpthread
 *
 * or with the Makefile / meson.build beside this file. Load it with
 * KEEL_PLUGIN_PATH=/path/to/libkeel-sample.so. SAMPLE_DEVICES=N (1..8)
 * sets the number of devices (default 2).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <keel/device_api.h>
#include <keel/kit.h>

#define SAMPLE_MAX_DEVICES 8
#define SAMPLE_MEMORY (UINT64_C(1) << 32) /* what each device claims */
#define SAMPLE_ALIGN 64
#define SAMPLE_HEADER 64 /* bytes before each allocation, keeps alignment */
#define SAMPLE_ALLOC_MAGIC UINT64_C(0x53414d504c45414c) /* "SAMPLEAL" */
/* Top byte of every device address: 0x80 | device. */
#define SAMPLE_TAG_SHIFT 56
#define SAMPLE_ADDR_MASK ((UINT64_C(1) << SAMPLE_TAG_SHIFT) - 1)

/* ------------------------------------------------------------------------ */
/* Errors and logging                                                        */
/* ------------------------------------------------------------------------ */

static const keel_host_api *host;

static keel_status fail(keel_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static keel_status fail(keel_status st, const char *fmt, ...)
{
    char msg[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (host && host->set_error)
        host->set_error(st, msg);
    return st;
}

static const char *env(const char *name)
{
    return host && host->get_env ? host->get_env(name) : getenv(name);
}

/* ------------------------------------------------------------------------ */
/* State                                                                     */
/* ------------------------------------------------------------------------ */

struct task;
typedef keel_status (*task_fn)(struct task *t, char *msg, size_t msgsize);

struct task {
    task_fn run;
    struct task *next;
    union {
        struct {
            void *dst;
            const void *src;
            size_t n;
        } copy;
        struct {
            void *dst;
            int value;
            size_t n;
        } set;
        struct {
            int kind; /* enum sample_kernel */
            keel_tensor_desc in[2], out;
        } kern;
        struct {
            struct sample_event *ev;
            uint64_t gen;
        } event;
        struct {
            keel_host_fn fn;
            void *user;
        } hostfn;
    } u;
};

struct sample_stream {
    int device;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* a task arrived, or stop */
    pthread_cond_t idle; /* the queue drained */
    struct task *head, *tail;
    bool busy, stop;
    keel_status err; /* first error of queued work since the last sync */
    char errmsg[256];
    struct sample_stream *next; /* the device's list */
};

struct sample_event {
    int device;
    pthread_mutex_t lock;
    pthread_cond_t done;
    uint64_t recorded, completed; /* generations */
    struct timespec when;
    struct sample_event *next;
};

struct sample_device {
    struct sample_stream *streams; /* first is the default stream */
    _Atomic uint64_t used;
};

static struct {
    pthread_mutex_t lock; /* the stream and event lists */
    bool initialized;
    int ndevices;
    struct sample_device dev[SAMPLE_MAX_DEVICES];
    struct sample_event *events;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int device_count(void)
{
    const char *e = env("SAMPLE_DEVICES");
    char *end;
    long n;

    if (!e || !*e)
        return 2;
    n = strtol(e, &end, 10);
    if (*end || n < 1 || n > SAMPLE_MAX_DEVICES)
        return -1;
    return (int)n;
}

#define CHECK_DEVICE(d)                                                      \
    do {                                                                     \
        if (!g.initialized)                                                  \
            return fail(KEEL_STATUS_NOT_INITIALIZED, "sample: not initialised"); \
        if ((d) < 0 || (d) >= g.ndevices)                                    \
            return fail(KEEL_STATUS_INVALID_DEVICE,                          \
                        "sample: device %d does not exist (0..%d)", (int)(d), \
                        g.ndevices - 1);                                     \
    } while (0)

#define CHECK_ARG(cond)                                                      \
    do {                                                                     \
        if (!(cond))                                                         \
            return fail(KEEL_STATUS_INVALID_ARGUMENT,                        \
                        "sample: bad argument (%s)", #cond);                 \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Device addresses                                                          */
/* ------------------------------------------------------------------------ */

static keel_dptr to_dptr(int device, void *p)
{
    return (keel_dptr)(uintptr_t)p |
           ((keel_dptr)(0x80u | (unsigned)device) << SAMPLE_TAG_SHIFT);
}

/* Host address of device `device`'s range [p, p + n), or NULL if p is not
 * one of this device's addresses or the range overflows. */
static void *host_of(int device, keel_dptr p, uint64_t n)
{
    uint64_t a = p & SAMPLE_ADDR_MASK;

    if ((p >> SAMPLE_TAG_SHIFT) != (0x80u | (unsigned)device))
        return NULL;
    if (a + n < a || a + n > SAMPLE_ADDR_MASK)
        return NULL;
    return (void *)(uintptr_t)a;
}

#define HOST_RANGE(var, device, p, n)                                        \
    void *var = host_of((device), (p), (n));                                 \
    if (!var)                                                                \
        return fail(KEEL_STATUS_INVALID_ARGUMENT,                            \
                    "sample: 0x%llx is not a device %d address",             \
                    (unsigned long long)(p), (int)(device))

/* ------------------------------------------------------------------------ */
/* Streams: one worker thread each                                           */
/* ------------------------------------------------------------------------ */

static void *stream_main(void *arg)
{
    struct sample_stream *s = arg;

    pthread_mutex_lock(&s->lock);
    for (;;) {
        struct task *t;
        keel_status st;
        char msg[256] = "";

        while (!s->head && !s->stop)
            pthread_cond_wait(&s->wake, &s->lock);
        if (!s->head)
            break;
        t = s->head;
        s->head = t->next;
        if (!s->head)
            s->tail = NULL;
        s->busy = true;
        pthread_mutex_unlock(&s->lock);
        st = t->run(t, msg, sizeof(msg));
        free(t);
        pthread_mutex_lock(&s->lock);
        s->busy = false;
        if (st != KEEL_STATUS_OK && s->err == KEEL_STATUS_OK) {
            s->err = st;
            snprintf(s->errmsg, sizeof(s->errmsg), "%s", msg);
        }
        if (!s->head)
            pthread_cond_broadcast(&s->idle);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static keel_status stream_new(int device, struct sample_stream **out)
{
    struct sample_stream *s = calloc(1, sizeof(*s));

    if (!s)
        return fail(KEEL_STATUS_OUT_OF_MEMORY, "sample: no memory for a stream");
    s->device = device;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->idle, NULL);
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        pthread_cond_destroy(&s->idle);
        pthread_cond_destroy(&s->wake);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return fail(KEEL_STATUS_OUT_OF_MEMORY,
                    "sample: cannot start a stream thread");
    }
    *out = s;
    return KEEL_STATUS_OK;
}

/* Wait for the queue to drain; return and clear its first error. */
static keel_status stream_drain(struct sample_stream *s, bool report)
{
    keel_status st;
    char msg[256];

    pthread_mutex_lock(&s->lock);
    while (s->head || s->busy)
        pthread_cond_wait(&s->idle, &s->lock);
    st = s->err;
    snprintf(msg, sizeof(msg), "%s", s->errmsg);
    s->err = KEEL_STATUS_OK;
    s->errmsg[0] = '\0';
    pthread_mutex_unlock(&s->lock);
    if (st != KEEL_STATUS_OK && report)
        return fail(st, "sample: earlier asynchronous work failed: %s", msg);
    return st;
}

static void stream_stop(struct sample_stream *s)
{
    (void)stream_drain(s, false);
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* The stream a handle names on `device` (NULL: the default stream), or
 * NULL if it is not a live stream of that device. */
static struct sample_stream *stream_of(int device, keel_stream h)
{
    struct sample_stream *s;

    pthread_mutex_lock(&g.lock);
    s = g.dev[device].streams;
    if (h)
        while (s && s != (struct sample_stream *)h)
            s = s->next;
    pthread_mutex_unlock(&g.lock);
    return s;
}

#define STREAM(var, device, h)                                               \
    struct sample_stream *var = stream_of((device), (h));                    \
    if (!var)                                                                \
        return fail(KEEL_STATUS_INVALID_HANDLE,                              \
                    "sample: %p is not a stream of device %d", (void *)(h),  \
                    (int)(device))

static keel_status enqueue(struct sample_stream *s, const struct task *proto)
{
    struct task *t = malloc(sizeof(*t));

    if (!t)
        return fail(KEEL_STATUS_OUT_OF_MEMORY, "sample: no memory for a task");
    *t = *proto;
    t->next = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->tail)
        s->tail->next = t;
    else
        s->head = t;
    s->tail = t;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    return KEEL_STATUS_OK;
}

/* Every stream of the device, in turn; the first error wins. */
static keel_status device_drain(int device)
{
    keel_status first = KEEL_STATUS_OK;

    pthread_mutex_lock(&g.lock);
    for (struct sample_stream *s = g.dev[device].streams; s; s = s->next) {
        keel_status st = stream_drain(s, false);
        if (st != KEEL_STATUS_OK && first == KEEL_STATUS_OK)
            first = st;
    }
    pthread_mutex_unlock(&g.lock);
    if (first != KEEL_STATUS_OK)
        return fail(first, "sample: earlier asynchronous work on device %d "
                           "failed (%d)", device, (int)first);
    return KEEL_STATUS_OK;
}

/* ------------------------------------------------------------------------ */
/* Device group                                                              */
/* ------------------------------------------------------------------------ */

static keel_status sample_finalize(void);

static keel_status sample_init(void)
{
    int n;

    if (g.initialized)
        return KEEL_STATUS_OK;
    n = device_count();
    if (n < 0)
        return fail(KEEL_STATUS_INVALID_ARGUMENT,
                    "sample: SAMPLE_DEVICES must be 1..%d", SAMPLE_MAX_DEVICES);
    g.ndevices = n;
    g.initialized = true;
    for (int d = 0; d < n; d++) {
        keel_status st = stream_new(d, &g.dev[d].streams);
        if (st != KEEL_STATUS_OK) {
            sample_finalize();
            return st;
        }
        atomic_store(&g.dev[d].used, 0);
    }
    return KEEL_STATUS_OK;
}

static keel_status sample_finalize(void)
{
    if (!g.initialized)
        return KEEL_STATUS_OK;
    for (int d = 0; d < g.ndevices; d++) {
        struct sample_stream *s = g.dev[d].streams, *next;
        for (; s; s = next) {
            next = s->next;
            stream_stop(s);
        }
        g.dev[d].streams = NULL;
    }
    while (g.events) {
        struct sample_event *e = g.events;
        g.events = e->next;
        pthread_cond_destroy(&e->done);
        pthread_mutex_destroy(&e->lock);
        free(e);
    }
    g.initialized = false;
    return KEEL_STATUS_OK;
}

static keel_status sample_get_device_count(int32_t *count)
{
    int n = g.initialized ? g.ndevices : device_count();

    CHECK_ARG(count);
    if (n < 0)
        return fail(KEEL_STATUS_INVALID_ARGUMENT,
                    "sample: SAMPLE_DEVICES must be 1..%d", SAMPLE_MAX_DEVICES);
    *count = n;
    return KEEL_STATUS_OK;
}

static keel_status sample_get_device_props(int32_t device,
                                           keel_device_props *props)
{
    keel_device_props p;
    uint32_t n;
    int count = g.initialized ? g.ndevices : device_count();

    CHECK_ARG(props && props->struct_size >= sizeof(uint32_t));
    if (device < 0 || device >= count)
        return fail(KEEL_STATUS_INVALID_DEVICE,
                    "sample: device %d does not exist", (int)device);
    memset(&p, 0, sizeof(p));
    p.struct_size = sizeof(p);
    snprintf(p.name, sizeof(p.name), "keel sample device %d", (int)device);
    snprintf(p.vendor, sizeof(p.vendor), "keel example");
    snprintf(p.arch, sizeof(p.arch), "host");
    snprintf(p.bus_id, sizeof(p.bus_id), "sample:%d", (int)device);
    p.total_memory = SAMPLE_MEMORY;
    p.compute_units = 1;
    p.dtype_mask = KEEL_DTYPE_BIT(KEEL_F32);
    p.features = KEEL_FEATURE_ASYNC_COPY | KEEL_FEATURE_PEER_ACCESS |
                 KEEL_FEATURE_EVENT_TIMING | KEEL_FEATURE_HOST_CALLBACK |
                 KEEL_FEATURE_KERNELS;
    p.alloc_alignment = SAMPLE_ALIGN;
    p.stream_priorities = 1;
    n = props->struct_size < sizeof(p) ? props->struct_size : sizeof(p);
    memcpy(props, &p, n);
    props->struct_size = n;
    return KEEL_STATUS_OK;
}

static keel_status sample_synchronize(int32_t device)
{
    CHECK_DEVICE(device);
    return device_drain(device);
}

/* ------------------------------------------------------------------------ */
/* Memory group                                                              */
/* ------------------------------------------------------------------------ */

struct alloc_header {
    uint64_t magic;
    uint64_t size;
    int32_t device;
};

static keel_status sample_alloc(int32_t device, uint64_t size, keel_dptr *ptr)
{
    struct sample_device *d;
    void *block;

    CHECK_DEVICE(device);
    CHECK_ARG(ptr);
    *ptr = 0;
    if (size == 0)
        return KEEL_STATUS_OK;
    d = &g.dev[device];
    if (size > SAMPLE_MEMORY - SAMPLE_HEADER ||
        atomic_fetch_add(&d->used, size) + size > SAMPLE_MEMORY) {
        if (size <= SAMPLE_MEMORY - SAMPLE_HEADER)
            atomic_fetch_sub(&d->used, size);
        return fail(KEEL_STATUS_OUT_OF_MEMORY,
                    "sample: device %d cannot hold %llu more bytes",
                    (int)device, (unsigned long long)size);
    }
    if (posix_memalign(&block, SAMPLE_ALIGN, SAMPLE_HEADER + size) != 0) {
        atomic_fetch_sub(&d->used, size);
        return fail(KEEL_STATUS_OUT_OF_MEMORY,
                    "sample: host allocation of %llu bytes failed",
                    (unsigned long long)size);
    }
    *(struct alloc_header *)block =
        (struct alloc_header){SAMPLE_ALLOC_MAGIC, size, device};
    *ptr = to_dptr(device, (char *)block + SAMPLE_HEADER);
    return KEEL_STATUS_OK;
}

static keel_status sample_free(int32_t device, keel_dptr ptr)
{
    struct alloc_header *h;
    keel_status st;

    CHECK_DEVICE(device);
    if (ptr == 0)
        return KEEL_STATUS_OK;
    {
        HOST_RANGE(p, device, ptr, 0);
        if (((uintptr_t)p & (SAMPLE_ALIGN - 1)) != 0)
            return fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "sample: 0x%llx was not returned by alloc",
                        (unsigned long long)ptr);
        h = (struct alloc_header *)((char *)p - SAMPLE_HEADER);
    }
    if (h->magic != SAMPLE_ALLOC_MAGIC || h->device != device)
        return fail(KEEL_STATUS_INVALID_ARGUMENT,
                    "sample: 0x%llx was not returned by alloc on device %d",
                    (unsigned long long)ptr, (int)device);
    /* The ABI lets the caller free memory whose work it knows is done;
     * draining first also keeps a careless caller from a use after free. */
    st = device_drain(device);
    h->magic = 0;
    atomic_fetch_sub(&g.dev[device].used, h->size);
    free(h);
    return st;
}

static keel_status task_copy(struct task *t, char *msg, size_t n)
{
    (void)msg;
    (void)n;
    memmove(t->u.copy.dst, t->u.copy.src, t->u.copy.n);
    return KEEL_STATUS_OK;
}

static keel_status task_set(struct task *t, char *msg, size_t n)
{
    (void)msg;
    (void)n;
    memset(t->u.set.dst, t->u.set.value, t->u.set.n);
    return KEEL_STATUS_OK;
}

static keel_status sample_memset_async(int32_t device, keel_stream stream,
                                       keel_dptr dst, uint8_t value,
                                       uint64_t size)
{
    CHECK_DEVICE(device);
    STREAM(s, device, stream);
    HOST_RANGE(p, device, dst, size);
    if (size == 0)
        return KEEL_STATUS_OK;
    return enqueue(s, &(struct task){.run = task_set,
                                     .u.set = {p, value, (size_t)size}});
}

static keel_status sample_memset(int32_t device, keel_dptr dst, uint8_t value,
                                 uint64_t size)
{
    keel_status st;

    CHECK_DEVICE(device);
    if ((st = device_drain(device)) != KEEL_STATUS_OK)
        return st;
    HOST_RANGE(p, device, dst, size);
    memset(p, value, (size_t)size);
    return KEEL_STATUS_OK;
}

/* d2d copies must not overlap (the ABI says so; memmove would hide it). */
static bool overlap(keel_dptr a, keel_dptr b, uint64_t n)
{
    return a < b + n && b < a + n;
}

static keel_status sync_copy(int32_t device, void *dst, const void *src,
                             uint64_t size)
{
    keel_status st = device_drain(device);

    if (st == KEEL_STATUS_OK)
        memmove(dst, src, (size_t)size);
    return st;
}

static keel_status sample_copy_h2d(int32_t device, keel_dptr dst,
                                   const void *src, uint64_t size)
{
    CHECK_DEVICE(device);
    if (size == 0)
        return KEEL_STATUS_OK;
    CHECK_ARG(src);
    HOST_RANGE(d, device, dst, size);
    return sync_copy(device, d, src, size);
}

static keel_status sample_copy_d2h(int32_t device, void *dst, keel_dptr src,
                                   uint64_t size)
{
    CHECK_DEVICE(device);
    if (size == 0)
        return KEEL_STATUS_OK;
    CHECK_ARG(dst);
    HOST_RANGE(s, device, src, size);
    return sync_copy(device, dst, s, size);
}

static keel_status sample_copy_d2d(int32_t device, keel_dptr dst, keel_dptr src,
                                   uint64_t size)
{
    CHECK_DEVICE(device);
    if (size == 0)
        return KEEL_STATUS_OK;
    HOST_RANGE(d, device, dst, size);
    HOST_RANGE(s, device, src, size);
    if (overlap(dst, src, size))
        return fail(KEEL_STATUS_INVALID_ARGUMENT,
                    "sample: copy_d2d ranges overlap");
    return sync_copy(device, d, s, size);
}

static keel_status async_copy(struct sample_stream *s, void *dst,
                              const void *src, uint64_t size)
{
    if (size == 0)
        return KEEL_STATUS_OK;
    return enqueue(s, &(struct task){.run = task_copy,
                                     .u.copy = {dst, src, (size_t)size}});
}

static keel_status sample_copy_h2d_async(int32_t device, keel_stream stream,
                                         keel_dptr dst, const void *src,
                                         uint64_t size)
{
    CHECK_DEVICE(device);
    STREAM(s, device, stream);
    if (size == 0)
        return KEEL_STATUS_OK;
    CHECK_ARG(src);
    HOST_RANGE(d, device, dst, size);
    return async_copy(s, d, src, size);
}

static keel_status sample_copy_d2h_async(int32_t device, keel_stream stream,
                                         void *dst, keel_dptr src,
                                         uint64_t size)
{
    CHECK_DEVICE(device);
    STREAM(s, device, stream);
    if (size == 0)
        return KEEL_STATUS_OK;
    CHECK_ARG(dst);
    HOST_RANGE(p, device, src, size);
    return async_copy(s, dst, p, size);
}

static keel_status sample_copy_d2d_async(int32_t device, keel_stream stream,
                                         keel_dptr dst, keel_dptr src,
                                         uint64_t size)
{
    CHECK_DEVICE(device);
    STREAM(s, device, stream);
    if (size == 0)
        return KEEL_STATUS_OK;
    HOST_RANGE(d, device, dst, size);
    HOST_RANGE(p, device, src, size);
    if (overlap(dst, src, size))
        return fail(KEEL_STATUS_INVALID_ARGUMENT,
                    "sample: copy_d2d_async ranges overlap");
    return async_copy(s, d, p, size);
}

static keel_status sample_copy_peer(int32_t dst_device, keel_dptr dst,
                                    int32_t src_device, keel_dptr src,
                                    uint64_t size)
{
    keel_status st;

    CHECK_DEVICE(dst_device);
    CHECK_DEVICE(src_device);
    if (size == 0)
        return KEEL_STATUS_OK;
    HOST_RANGE(d, dst_device, dst, size);
    HOST_RANGE(s, src_device, src, size);
    if ((st = device_drain(src_device)) != KEEL_STATUS_OK ||
        (st = device_drain(dst_device)) != KEEL_STATUS_OK)
        return st;
    memmove(d, s, (size_t)size);
    return KEEL_STATUS_OK;
}

static keel_status sample_get_memory_info(int32_t device, keel_memory_info *info)
{
    uint64_t used;

    CHECK_DEVICE(device);
    CHECK_ARG(info);
    used = atomic_load(&g.dev[device].used);
    info->total = SAMPLE_MEMORY;
    info->used = used;
    info->free = used < SAMPLE_MEMORY ? SAMPLE_MEMORY - used : 0;
    return KEEL_STATUS_OK;
}

/* ------------------------------------------------------------------------ */
/* Stream and event group                                                    */
/* ------------------------------------------------------------------------ */

static keel_status sample_stream_create(int32_t device, int32_t priority,
                                        keel_stream *stream)
{
    struct sample_stream *s;
    keel_status st;

    (void)priority; /* one level: every priority is the default */
    CHECK_DEVICE(device);
    CHECK_ARG(stream);
    if ((st = stream_new(device, &s)) != KEEL_STATUS_OK)
        return st;
    pthread_mutex_lock(&g.lock);
    /* After the default stream, which stays first. */
    s->next = g.dev[device].streams->next;
    g.dev[device].streams->next = s;
    pthread_mutex_unlock(&g.lock);
    *stream = (keel_stream)s;
    return KEEL_STATUS_OK;
}

static keel_status sample_stream_destroy(int32_t device, keel_stream stream)
{
    struct sample_stream **pp, *s = NULL;

    CHECK_DEVICE(device);
    if (!stream)
        return fail(KEEL_STATUS_INVALID_HANDLE,
                    "sample: the default stream cannot be destroyed");
    pthread_mutex_lock(&g.lock);
    for (pp = &g.dev[device].streams->next; *pp; pp = &(*pp)->next)
        if (*pp == (struct sample_stream *)stream) {
            s = *pp;
            *pp = s->next;
            break;
        }
    pthread_mutex_unlock(&g.lock);
    if (!s)
        return fail(KEEL_STATUS_INVALID_HANDLE,
                    "sample: %p is not a stream of device %d", (void *)stream,
                    (int)device);
    stream_stop(s);
    return KEEL_STATUS_OK;
}

static keel_status sample_stream_synchronize(int32_t device, keel_stream stream)
{
    CHECK_DEVICE(device);
    STREAM(s, device, stream);
    return stream_drain(s, true);
}

static keel_status sample_stream_query(int32_t device, keel_stream stream)
{
    bool done;

    CHECK_DEVICE(device);
    STREAM(s, device, stream);
    pthread_mutex_lock(&s->lock);
    done = !s->head && !s->busy;
    pthread_mutex_unlock(&s->lock);
    return done ? KEEL_STATUS_OK : KEEL_STATUS_NOT_READY;
}

/* A live event of `device` (any device when device < 0), or NULL. */
static struct sample_event *event_of(int device, keel_event h)
{
    struct sample_event *e;

    pthread_mutex_lock(&g.lock);
    for (e = g.events; e && e != (struct sample_event *)h; e = e->next)
        ;
    if (e && device >= 0 && e->device != device)
        e = NULL;
    pthread_mutex_unlock(&g.lock);
    return e;
}

#define EVENT_OF(var, device, h)                                             \
    struct sample_event *var = (h) ? event_of((device), (h)) : NULL;         \
    if (!var)                                                                \
        return fail(KEEL_STATUS_INVALID_HANDLE,                              \
                    "sample: %p is not a live event of device %d",           \
                    (void *)(h), (int)(device))

#define EVENT(var, h) EVENT_OF(var, device, h)

static keel_status task_event_record(struct task *t, char *msg, size_t n)
{
    struct sample_event *e = t->u.event.ev;

    (void)msg;
    (void)n;
    pthread_mutex_lock(&e->lock);
    if (t->u.event.gen > e->completed) {
        e->completed = t->u.event.gen;
        clock_gettime(CLOCK_MONOTONIC, &e->when);
        pthread_cond_broadcast(&e->done);
    }
    pthread_mutex_unlock(&e->lock);
    return KEEL_STATUS_OK;
}

static keel_status task_event_wait(struct task *t, char *msg, size_t n)
{
    struct sample_event *e = t->u.event.ev;

    (void)msg;
    (void)n;
    pthread_mutex_lock(&e->lock);
    while (e->completed < t->u.event.gen)
        pthread_cond_wait(&e->done, &e->lock);
    pthread_mutex_unlock(&e->lock);
    return KEEL_STATUS_OK;
}

static keel_status sample_stream_wait_event(int32_t device, keel_stream stream,
                                            keel_event event)
{
    uint64_t gen;

    CHECK_DEVICE(device);
    STREAM(s, device, stream);
    EVENT_OF(e, -1, event); /* may belong to any device of the plugin */
    pthread_mutex_lock(&e->lock);
    gen = e->recorded;
    pthread_mutex_unlock(&e->lock);
    if (gen == 0)
        return KEEL_STATUS_OK; /* never recorded: complete */
    return enqueue(s, &(struct task){.run = task_event_wait,
                                     .u.event = {e, gen}});
}

static keel_status task_host_fn(struct task *t, char *msg, size_t n)
{
    (void)msg;
    (void)n;
    t->u.hostfn.fn(t->u.hostfn.user);
    return KEEL_STATUS_OK;
}

static keel_status sample_launch_host_func(int32_t device, keel_stream stream,
                                           keel_host_fn fn, void *user_data)
{
    CHECK_DEVICE(device);
    STREAM(s, device, stream);
    CHECK_ARG(fn);
    return enqueue(s, &(struct task){.run = task_host_fn,
                                     .u.hostfn = {fn, user_data}});
}

static keel_status sample_event_create(int32_t device, keel_event *event)
{
    struct sample_event *e;

    CHECK_DEVICE(device);
    CHECK_ARG(event);
    e = calloc(1, sizeof(*e));
    if (!e)
        return fail(KEEL_STATUS_OUT_OF_MEMORY, "sample: no memory for an event");
    e->device = device;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->done, NULL);
    pthread_mutex_lock(&g.lock);
    e->next = g.events;
    g.events = e;
    pthread_mutex_unlock(&g.lock);
    *event = (keel_event)e;
    return KEEL_STATUS_OK;
}

static keel_status sample_event_destroy(int32_t device, keel_event event)
{
    struct sample_event **pp, *e = NULL;
    uint64_t want;

    CHECK_DEVICE(device);
    pthread_mutex_lock(&g.lock);
    for (pp = &g.events; *pp; pp = &(*pp)->next)
        if (*pp == (struct sample_event *)event && (*pp)->device == device) {
            e = *pp;
            *pp = e->next;
            break;
        }
    pthread_mutex_unlock(&g.lock);
    if (!e)
        return fail(KEEL_STATUS_INVALID_HANDLE,
                    "sample: %p is not a live event of device %d",
                    (void *)event, (int)device);
    /* Queued records and waits still point at it: let them run first. */
    pthread_mutex_lock(&e->lock);
    want = e->recorded;
    while (e->completed < want)
        pthread_cond_wait(&e->done, &e->lock);
    pthread_mutex_unlock(&e->lock);
    for (int d = 0; d < g.ndevices; d++)
        (void)device_drain(d);
    pthread_cond_destroy(&e->done);
    pthread_mutex_destroy(&e->lock);
    free(e);
    return KEEL_STATUS_OK;
}

static keel_status sample_event_record(int32_t device, keel_event event,
                                       keel_stream stream)
{
    uint64_t gen;
    keel_status st;

    CHECK_DEVICE(device);
    STREAM(s, device, stream);
    EVENT(e, event);
    pthread_mutex_lock(&e->lock);
    gen = ++e->recorded;
    pthread_mutex_unlock(&e->lock);
    st = enqueue(s, &(struct task){.run = task_event_record,
                                   .u.event = {e, gen}});
    if (st != KEEL_STATUS_OK) {
        /* Nothing will complete this generation: complete it now. */
        struct task t = {.u.event = {e, gen}};
        task_event_record(&t, NULL, 0);
    }
    return st;
}

static keel_status sample_event_query(int32_t device, keel_event event)
{
    bool done;

    CHECK_DEVICE(device);
    EVENT(e, event);
    pthread_mutex_lock(&e->lock);
    done = e->completed >= e->recorded;
    pthread_mutex_unlock(&e->lock);
    return done ? KEEL_STATUS_OK : KEEL_STATUS_NOT_READY;
}

static keel_status sample_event_synchronize(int32_t device, keel_event event)
{
    uint64_t want;

    CHECK_DEVICE(device);
    EVENT(e, event);
    pthread_mutex_lock(&e->lock);
    want = e->recorded;
    while (e->completed < want)
        pthread_cond_wait(&e->done, &e->lock);
    pthread_mutex_unlock(&e->lock);
    return KEEL_STATUS_OK;
}

static keel_status sample_event_elapsed_ms(int32_t device, keel_event start,
                                           keel_event end, float *ms)
{
    struct timespec a, b;
    bool pending, never;

    CHECK_DEVICE(device);
    CHECK_ARG(ms);
    {
        EVENT(s, start);
        EVENT(e, end);
        pthread_mutex_lock(&s->lock);
        never = s->recorded == 0;
        pending = s->completed < s->recorded;
        a = s->when;
        pthread_mutex_unlock(&s->lock);
        pthread_mutex_lock(&e->lock);
        never = never || e->recorded == 0;
        pending = pending || e->completed < e->recorded;
        b = e->when;
        pthread_mutex_unlock(&e->lock);
    }
    if (never)
        return fail(KEEL_STATUS_INVALID_STATE,
                    "sample: elapsed time of an event never recorded");
    if (pending)
        return KEEL_STATUS_NOT_READY;
    *ms = (float)((double)(b.tv_sec - a.tv_sec) * 1e3 +
                  (double)(b.tv_nsec - a.tv_nsec) / 1e6);
    return KEEL_STATUS_OK;
}

/* ------------------------------------------------------------------------ */
/* Kernels: add, multiply, relu, matmul in float32                           */
/* ------------------------------------------------------------------------ */
/*
 * What the core hands these kernels (docs/device-abi.md, "What a kernel
 * receives"): for add and multiply both inputs already have the output's
 * shape, broadcasting expressed as stride 0, any strides; relu's input has
 * the output's shape, any strides; matmul's x is [B.., M, K] and y
 * [B.., K, N] with one batch shape (stride 0 where broadcast) and
 * transposes already expressed as swapped strides, so transpose_x /
 * transpose_y must not be applied again. Outputs are contiguous.
 */

enum sample_kernel { K_ADD, K_MULTIPLY, K_RELU, K_MATMUL };

static const char *const kernel_names[] = {"add", "multiply", "relu",
                                           "matmul"};

static int64_t numel(const keel_tensor_desc *d)
{
    int64_t n = 1;

    for (int i = 0; i < d->ndim; i++)
        n *= d->shape[i];
    return n;
}

/* Element offset of the i-th element (row-major order over d's shape). */
static int64_t offset_of(const keel_tensor_desc *d, int64_t i)
{
    int64_t off = 0;

    for (int k = d->ndim - 1; k >= 0 && i; k--) {
        off += (i % d->shape[k]) * d->strides[k];
        i /= d->shape[k];
    }
    return off;
}

static const float *fin(int device, const keel_tensor_desc *d)
{
    return host_of(device, d->data, 0);
}

static keel_status run_elementwise(struct task *t, int device)
{
    const keel_tensor_desc *x = &t->u.kern.in[0], *y = &t->u.kern.in[1];
    const float *px = fin(device, x), *py = NULL;
    float *po = (float *)fin(device, &t->u.kern.out);
    int64_t n = numel(&t->u.kern.out);

    if (t->u.kern.kind != K_RELU)
        py = fin(device, y);
    for (int64_t i = 0; i < n; i++) {
        float a = px[offset_of(x, i)];
        switch (t->u.kern.kind) {
        case K_ADD:
            po[i] = a + py[offset_of(y, i)];
            break;
        case K_MULTIPLY:
            po[i] = a * py[offset_of(y, i)];
            break;
        default:
            po[i] = a > 0.0f ? a : 0.0f;
            break;
        }
    }
    return KEEL_STATUS_OK;
}

static keel_status run_matmul(struct task *t, int device)
{
    const keel_tensor_desc *x = &t->u.kern.in[0], *y = &t->u.kern.in[1];
    const float *px = fin(device, x), *py = fin(device, y);
    float *po = (float *)fin(device, &t->u.kern.out);
    int nb = x->ndim - 2;
    int64_t M = x->shape[nb], K = x->shape[nb + 1], N = y->shape[nb + 1];
    int64_t xrs = x->strides[nb], xcs = x->strides[nb + 1];
    int64_t yrs = y->strides[nb], ycs = y->strides[nb + 1];
    int64_t batches = 1;

    for (int k = 0; k < nb; k++)
        batches *= x->shape[k];
    for (int64_t b = 0; b < batches; b++) {
        int64_t xo = 0, yo = 0, rest = b;
        for (int k = nb - 1; k >= 0; k--) {
            int64_t i = rest % x->shape[k];
            rest /= x->shape[k];
            xo += i * x->strides[k];
            yo += i * y->strides[k];
        }
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                float acc = 0.0f;
                for (int64_t k = 0; k < K; k++)
                    acc += px[xo + i * xrs + k * xcs] *
                           py[yo + k * yrs + j * ycs];
                po[(b * M + i) * N + j] = acc;
            }
    }
    return KEEL_STATUS_OK;
}

/* Queued kernels carry their device in the output's address tag. */
static keel_status task_kernel(struct task *t, char *msg, size_t n)
{
    int device = (int)((t->u.kern.out.data >> SAMPLE_TAG_SHIFT) & 0x7f);

    (void)msg;
    (void)n;
    if (t->u.kern.kind == K_MATMUL)
        return run_matmul(t, device);
    return run_elementwise(t, device);
}

/* Reachable from this device's memory: the part of the checks that is the
 * plugin's own (the kit knows nothing of where memory lives). Negative
 * strides are not handled by these simple loops. */
static keel_status reachable(int device, const char *op, const char *role,
                             int i, const keel_tensor_desc *d)
{
    int64_t hi = 0;

    for (int k = 0; k < d->ndim; k++) {
        if (d->shape[k] == 0)
            return KEEL_STATUS_OK; /* empty: nothing is read or written */
        if (d->strides[k] < 0)
            return fail(KEEL_STATUS_NOT_SUPPORTED,
                        "sample %s: %s %d has a negative stride", op, role, i);
        hi += (d->shape[k] - 1) * d->strides[k]; /* the kit bounds it */
    }
    if (!host_of(device, d->data, (uint64_t)(hi + 1) * 4))
        return fail(KEEL_STATUS_INVALID_ARGUMENT,
                    "sample %s: %s %d is not memory of device %d", op, role,
                    i, device);
    return KEEL_STATUS_OK;
}

static keel_status sample_kernel(void *kernel_data, const keel_kernel_args *a)
{
    int kind = (int)(intptr_t)kernel_data;
    const char *op = kernel_names[kind];
    struct task t = {.run = task_kernel};
    keel_kit_msg m;
    keel_status st;

    CHECK_ARG(a && a->struct_size >= KEEL_KERNEL_ARGS_MIN_SIZE);
    CHECK_DEVICE(a->device);
    STREAM(s, a->device, a->stream);
    /* Every argument check the catalog implies (counts, dtypes, shapes,
     * strides, attributes) comes from the kernel kit (keel/kit.h). After
     * it: inputs of the output's shape for add, multiply and relu; x
     * [B.., M, K] and y [B.., K, N] for matmul; one float dtype, which is
     * float32 here since lookup only hands out float32 kernels. */
    if ((st = keel_kit_check_name(op, a, &m)))
        return fail(st, "sample: %s", m.text);
    if (a->inputs[0].dtype != KEEL_F32)
        return fail(KEEL_STATUS_NOT_SUPPORTED, "sample %s: float32 only", op);
    for (int i = 0; i < a->num_inputs; i++)
        if ((st = reachable(a->device, op, "input", i, &a->inputs[i])))
            return st;
    if ((st = reachable(a->device, op, "output", 0, &a->outputs[0])))
        return st;
    t.u.kern.kind = kind;
    t.u.kern.out = a->outputs[0];
    for (int i = 0; i < a->num_inputs; i++)
        t.u.kern.in[i] = a->inputs[i];
    if (numel(&a->outputs[0]) == 0)
        return KEEL_STATUS_OK;
    return enqueue(s, &t);
}

static keel_status sample_lookup(int32_t device, const char *op_name,
                                 keel_dtype dtype, keel_kernel *kernel)
{
    CHECK_DEVICE(device);
    CHECK_ARG(op_name && kernel);
    if (dtype == KEEL_F32)
        for (int k = 0; k < (int)(sizeof(kernel_names) / sizeof(*kernel_names));
             k++)
            if (!strcmp(op_name, kernel_names[k])) {
                kernel->fn = sample_kernel;
                kernel->kernel_data = (void *)(intptr_t)k;
                return KEEL_STATUS_OK;
            }
    return KEEL_STATUS_NOT_FOUND;
}

/* ------------------------------------------------------------------------ */
/* Tables and the entry point                                                */
/* ------------------------------------------------------------------------ */

static const keel_device_ops device_ops = {
    .header = KEEL_TABLE_HEADER(keel_device_ops),
    .init = sample_init,
    .finalize = sample_finalize,
    .get_device_count = sample_get_device_count,
    .get_device_props = sample_get_device_props,
    .synchronize = sample_synchronize,
};

static const keel_memory_ops memory_ops = {
    .header = KEEL_TABLE_HEADER(keel_memory_ops),
    .alloc = sample_alloc,
    .free = sample_free,
    .memset = sample_memset,
    .memset_async = sample_memset_async,
    .copy_h2d = sample_copy_h2d,
    .copy_d2h = sample_copy_d2h,
    .copy_d2d = sample_copy_d2d,
    .copy_h2d_async = sample_copy_h2d_async,
    .copy_d2h_async = sample_copy_d2h_async,
    .copy_d2d_async = sample_copy_d2d_async,
    .copy_peer = sample_copy_peer,
    .get_memory_info = sample_get_memory_info,
};

static const keel_stream_ops stream_ops = {
    .header = KEEL_TABLE_HEADER(keel_stream_ops),
    .stream_create = sample_stream_create,
    .stream_destroy = sample_stream_destroy,
    .stream_synchronize = sample_stream_synchronize,
    .stream_query = sample_stream_query,
    .stream_wait_event = sample_stream_wait_event,
    .launch_host_func = sample_launch_host_func,
    .event_create = sample_event_create,
    .event_destroy = sample_event_destroy,
    .event_record = sample_event_record,
    .event_query = sample_event_query,
    .event_synchronize = sample_event_synchronize,
    .event_elapsed_ms = sample_event_elapsed_ms,
};

static const keel_kernel_ops kernel_ops = {
    .header = KEEL_TABLE_HEADER(keel_kernel_ops),
    .lookup = sample_lookup,
};

static const keel_plugin_api plugin_api = {
    .header = KEEL_TABLE_HEADER(keel_plugin_api),
    .name = "sample",
    .version = "1.0.0",
    .device_type = "sample",
    .description = "Example discrete device: 4 float32 kernels, async streams",
    .device = &device_ops,
    .memory = &memory_ops,
    .stream = &stream_ops,
    .kernel = &kernel_ops,
};

KEEL_PLUGIN_EXPORT const keel_plugin_api *keel_plugin_get_api(
    uint32_t core_abi_major, uint32_t core_abi_minor,
    const keel_host_api *host_api)
{
    (void)core_abi_minor; /* tables carry their sizes; older cores cope */
    if (host_api && host_api->header.struct_size >= sizeof(keel_host_api))
        host = host_api;
    if (core_abi_major != KEEL_ABI_VERSION_MAJOR) {
        fail(KEEL_STATUS_ABI_MISMATCH,
             "sample: built for keel ABI %d.x, the core speaks %u.x",
             KEEL_ABI_VERSION_MAJOR, (unsigned)core_abi_major);
        return NULL;
    }
    return &plugin_api;
}
