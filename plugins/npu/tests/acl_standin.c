/*
 * A stand-in for libascendcl.so, for the npu plugin's tests only: it
 * exports the ACL functions the plugin resolves (plugins/npu/acl_api.h),
 * with the same C signatures, on the host. Never installed.
 *
 *   devices   ACL_STANDIN_DEVICES (default 2), each with
 *             ACL_STANDIN_MEM_MB MiB (default 256) of "device memory"
 *             (host memory, counted against that limit);
 *   contexts  one per device, made by aclrtSetDevice, current per thread
 *             as in ACL; calls that need a device refuse to run without
 *             a current context, and copies and memsets refuse device
 *             addresses of a device other than the current one;
 *   memory    every copy checks that its kind matches where the addresses
 *             are (a HOST_TO_DEVICE copy must write a live device
 *             allocation and read something that is not one, ...) and
 *             that destMax covers the count;
 *   streams   a worker thread per stream runs its queued work in order;
 *             there is no implicit NULL stream (the plugin must never
 *             rely on one), and a stream with queued work cannot be
 *             destroyed;
 *   events    records complete in stream order, with a timestamp; a
 *             stream waiting on an event waits for the record that was
 *             last enqueued when the wait was;
 *   callbacks aclrtLaunchCallback work is handed, in stream order, to the
 *             thread subscribed with aclrtSubscribeReport, which runs it
 *             from aclrtProcessReport; BLOCK holds the stream until then.
 *
 * Faults for the tests: ACL_STANDIN_FAIL=name:code[:n] makes the n-th
 * call (default 1st) of function `name` return `code`, once; the exported
 * acl_standin_fail_next(name, code) arms the same thing from a test.
 * ACL_STANDIN_FAULT plants a bug that conformance must catch: corrupt_d2h
 * flips a byte of every device-to-host copy, skip_wait makes
 * aclrtStreamWaitEvent wait for nothing, add_wrong puts 1 too much into
 * one element of every aclnnAdd result, sub_wrong likewise into every
 * aclnnSub result, matmul_wrong into the first
 * element of every aclnnMatmul result, allreduce_wrong likewise into
 * one element of every HcclAllReduce result.
 *
 * It serves as libhccl.so too (the HCCL section at the end): in-process
 * ranks on the stand-in's devices, host reductions.
 *
 * What it proves and what it cannot: docs/npu-plugin.md.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <keel/kit.h> /* float16 / bfloat16 conversions only */

#include "acl_api.h"
#include "hccl_api.h"
#include "acl_standin_internal.h"

#define MAX_DEV 16

/* Every export is declared from the plugin's own list, so a signature
 * that drifts from acl_api.h does not compile. */
#define STANDIN_PROTO(ret, name, params) API ret name params;
NPU_ACL_FUNCS(STANDIN_PROTO, STANDIN_PROTO)
NPU_OPAPI_FUNCS(STANDIN_PROTO)
NPU_OPAPI_EW_FUNCS(STANDIN_PROTO)
NPU_HCCL_FUNCS(STANDIN_PROTO, STANDIN_PROTO)
#undef STANDIN_PROTO
API void acl_standin_fail_next(const char *name, int code);
/* For the tests: how many aclrtSetDevice calls device `dev` holds, and
 * which device's memory `p` is (-1: none). */
API int acl_standin_device_sets(int dev);
API int acl_standin_device_of(const void *p);

/* ---- state ----------------------------------------------------------------- */

struct sctx {
    int device;
};

struct sblock {
    uintptr_t base;
    size_t size;
    int device;
    bool host; /* aclrtMallocHost */
    struct sblock *next;
};

struct sevent {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t enq, done; /* records enqueued / completed */
    double t_ms;        /* time of the last completed record */
    int refs;           /* the handle + queued work naming it */
};

enum task_kind { T_COPY, T_SET, T_RECORD, T_WAIT, T_CALLBACK, T_OP, T_FN };

struct aclOpExecutor;

struct task {
    enum task_kind kind;
    void *dst;
    const void *src;
    size_t n;
    int value;
    struct sevent *ev;
    uint64_t gen;
    aclrtCallback fn;
    void *user;
    bool block;
    struct aclOpExecutor *op;
    struct task *next;
};

struct sstream {
    int device;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct task *head, *tail;
    uint64_t enq, done;
    bool stop;
    uint64_t subscriber; /* thread id from aclrtSubscribeReport, 0: none */
    struct sstream *next;
};

/* A thread that runs callbacks (aclrtProcessReport). */
struct report {
    uint64_t tid;
    aclrtCallback fn;
    void *user;
    bool pending, ran;
    struct report *next;
};

static struct {
    pthread_mutex_t mu; /* everything here, and the lists */
    pthread_cond_t report_cv;
    bool inited;
    int ndev;
    uint64_t limit;
    uint64_t used[MAX_DEV];
    int refs[MAX_DEV];
    struct sctx ctx[MAX_DEV];
    struct sblock *blocks;
    struct sstream *streams;
    struct report *reports;
    bool corrupt_d2h, skip_wait, add_wrong, sub_wrong, matmul_wrong,
        allreduce_wrong;
    /* one armed failure */
    char fail_name[64];
    int fail_code;
    int fail_after;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .report_cv = PTHREAD_COND_INITIALIZER};

static _Thread_local struct sctx *cur;
static _Thread_local char errmsg[256];

aclError err(aclError code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
aclError err(aclError code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(errmsg, sizeof(errmsg), fmt, ap);
    va_end(ap);
    return code;
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- fault injection ------------------------------------------------------- */

API void acl_standin_fail_next(const char *name, int code)
{
    pthread_mutex_lock(&g.mu);
    snprintf(g.fail_name, sizeof(g.fail_name), "%s", name ? name : "");
    g.fail_code = code;
    g.fail_after = 1;
    pthread_mutex_unlock(&g.mu);
}

/* ACL_STANDIN_FAULT=conv_wrong (acl_standin_nn.c): see acl_standin_internal.h */
static bool nn_conv_wrong;
bool standin_conv_wrong(void) { return nn_conv_wrong; }

static void arm_from_env(void)
{
    const char *f = getenv("ACL_STANDIN_FAIL");
    const char *fault = getenv("ACL_STANDIN_FAULT");
    char name[64];
    int code = 0, nth = 1;

    if (f && sscanf(f, "%63[^:]:%d:%d", name, &code, &nth) >= 2) {
        snprintf(g.fail_name, sizeof(g.fail_name), "%s", name);
        g.fail_code = code;
        g.fail_after = nth > 0 ? nth : 1;
    }
    g.corrupt_d2h = fault && !strcmp(fault, "corrupt_d2h");
    g.skip_wait = fault && !strcmp(fault, "skip_wait");
    g.add_wrong = fault && !strcmp(fault, "add_wrong");
    g.sub_wrong = fault && !strcmp(fault, "sub_wrong");
    g.matmul_wrong = fault && !strcmp(fault, "matmul_wrong");
    g.allreduce_wrong = fault && !strcmp(fault, "allreduce_wrong");
    nn_conv_wrong = fault && !strcmp(fault, "conv_wrong");
    standin_train_fault(fault);
}

/* The armed code when this call of `name` is the one to fail, else 0. */
aclError injected(const char *name)
{
    aclError e = 0;

    pthread_mutex_lock(&g.mu);
    if (g.fail_after > 0 && !strcmp(g.fail_name, name) && --g.fail_after == 0) {
        e = g.fail_code;
        g.fail_name[0] = '\0';
    }
    pthread_mutex_unlock(&g.mu);
    if (e)
        err(e, "stand-in: injected failure of %s", name);
    return e;
}

#define INJECT(name)                     \
    do {                                 \
        aclError inj_ = injected(name);  \
        if (inj_)                        \
            return inj_;                 \
    } while (0)

/* ---- init, devices, contexts --------------------------------------------- */

API aclError aclInit(const char *configPath)
{
    const char *n = getenv("ACL_STANDIN_DEVICES");
    const char *m = getenv("ACL_STANDIN_MEM_MB");

    (void)configPath;
    INJECT("aclInit");
    pthread_mutex_lock(&g.mu);
    if (g.inited) {
        pthread_mutex_unlock(&g.mu);
        return err(ACL_ERROR_REPEAT_INITIALIZE, "aclInit called twice");
    }
    g.inited = true;
    g.ndev = n ? atoi(n) : 2;
    if (g.ndev < 0 || g.ndev > MAX_DEV)
        g.ndev = 2;
    g.limit = (uint64_t)(m ? atoi(m) : 256) << 20;
    for (int i = 0; i < MAX_DEV; i++)
        g.ctx[i].device = i;
    arm_from_env();
    pthread_mutex_unlock(&g.mu);
    return ACL_SUCCESS;
}

API aclError aclFinalize(void)
{
    pthread_mutex_lock(&g.mu);
    if (!g.inited) {
        pthread_mutex_unlock(&g.mu);
        return err(ACL_ERROR_REPEAT_FINALIZE, "aclFinalize without aclInit");
    }
    g.inited = false;
    pthread_mutex_unlock(&g.mu);
    return ACL_SUCCESS;
}

API const char *aclGetRecentErrMsg(void)
{
    return errmsg[0] ? errmsg : NULL;
}

API const char *aclrtGetSocName(void)
{
    return "Ascend-standin";
}

API aclError aclrtGetDeviceCount(uint32_t *count)
{
    INJECT("aclrtGetDeviceCount");
    if (!g.inited)
        return err(ACL_ERROR_UNINITIALIZE, "aclrtGetDeviceCount before aclInit");
    if (!count)
        return err(ACL_ERROR_INVALID_PARAM, "count is NULL");
    *count = (uint32_t)g.ndev;
    return ACL_SUCCESS;
}

API aclError aclGetDeviceCapability(uint32_t deviceId, aclDeviceInfo info,
                                    int64_t *value)
{
    if (!value || (int)deviceId >= g.ndev || info != ACL_DEVICE_INFO_AI_CORE_NUM)
        return err(ACL_ERROR_INVALID_PARAM, "aclGetDeviceCapability");
    *value = 20;
    return ACL_SUCCESS;
}

API aclError aclrtSetDevice(int32_t deviceId)
{
    INJECT("aclrtSetDevice");
    if (!g.inited)
        return err(ACL_ERROR_UNINITIALIZE, "aclrtSetDevice before aclInit");
    if (deviceId < 0 || deviceId >= g.ndev)
        return err(ACL_ERROR_INVALID_DEVICE, "no device %d", (int)deviceId);
    pthread_mutex_lock(&g.mu);
    g.refs[deviceId]++;
    pthread_mutex_unlock(&g.mu);
    cur = &g.ctx[deviceId];
    return ACL_SUCCESS;
}

API aclError aclrtResetDevice(int32_t deviceId)
{
    if (deviceId < 0 || deviceId >= g.ndev)
        return err(ACL_ERROR_INVALID_DEVICE, "no device %d", (int)deviceId);
    pthread_mutex_lock(&g.mu);
    if (g.refs[deviceId] > 0)
        g.refs[deviceId]--;
    pthread_mutex_unlock(&g.mu);
    if (cur == &g.ctx[deviceId])
        cur = NULL;
    return ACL_SUCCESS;
}

API aclError aclrtGetCurrentContext(aclrtContext *context)
{
    if (!context)
        return err(ACL_ERROR_INVALID_PARAM, "context is NULL");
    if (!cur)
        return err(ACL_ERROR_INVALID_PARAM, "no current context");
    *context = cur;
    return ACL_SUCCESS;
}

API aclError aclrtSetCurrentContext(aclrtContext context)
{
    struct sctx *c = context;

    INJECT("aclrtSetCurrentContext");
    if (!c || c < &g.ctx[0] || c >= &g.ctx[g.ndev] || g.refs[c->device] == 0)
        return err(ACL_ERROR_INVALID_PARAM, "%p is not a live context",
                   context);
    cur = c;
    return ACL_SUCCESS;
}

/* The current context's device, or -1 with the error set. */
int here(const char *call)
{
    if (!g.inited) {
        err(ACL_ERROR_UNINITIALIZE, "%s before aclInit", call);
        return -1;
    }
    if (!cur) {
        err(ACL_ERROR_INVALID_PARAM, "%s without a current context", call);
        return -1;
    }
    return cur->device;
}

#define HERE(call, dev)                                        \
    int dev = here(call);                                      \
    if (dev < 0)                                               \
        return !g.inited ? ACL_ERROR_UNINITIALIZE              \
                         : ACL_ERROR_INVALID_PARAM

/* ---- memory ------------------------------------------------------------------ */

/* The live block containing [p, p + n), or NULL. Called with g.mu held. */
static struct sblock *block_of(const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p;

    for (struct sblock *b = g.blocks; b; b = b->next)
        if (a >= b->base && a - b->base < b->size &&
            (n ? n : 1) <= b->size - (a - b->base))
            return b;
    return NULL;
}

static bool is_device(const void *p, size_t n, int *device)
{
    struct sblock *b;
    bool ok;

    pthread_mutex_lock(&g.mu);
    b = block_of(p, n);
    ok = b && !b->host;
    if (ok && device)
        *device = b->device;
    pthread_mutex_unlock(&g.mu);
    return ok;
}

static aclError take(void **out, size_t size, bool host, const char *call)
{
    struct sblock *b;
    void *p;

    HERE(call, dev);
    if (!out)
        return err(ACL_ERROR_INVALID_PARAM, "%s: out pointer is NULL", call);
    if (size == 0)
        return err(ACL_ERROR_INVALID_PARAM, "%s: size 0", call);
    pthread_mutex_lock(&g.mu);
    if (!host && (size > g.limit || g.used[dev] > g.limit - size)) {
        pthread_mutex_unlock(&g.mu);
        return err(ACL_ERROR_BAD_ALLOC, "%s: %zu bytes do not fit device %d",
                   call, size, dev);
    }
    pthread_mutex_unlock(&g.mu);
    p = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
    b = malloc(sizeof(*b));
    if (!p || !b) {
        free(p);
        free(b);
        return err(ACL_ERROR_BAD_ALLOC, "%s: host out of memory", call);
    }
    *b = (struct sblock){(uintptr_t)p, size, dev, host, NULL};
    pthread_mutex_lock(&g.mu);
    b->next = g.blocks;
    g.blocks = b;
    if (!host)
        g.used[dev] += size;
    pthread_mutex_unlock(&g.mu);
    *out = p;
    return ACL_SUCCESS;
}

static aclError give(void *p, bool host, const char *call)
{
    HERE(call, dev);
    (void)dev;
    pthread_mutex_lock(&g.mu);
    for (struct sblock **pp = &g.blocks; *pp; pp = &(*pp)->next) {
        struct sblock *b = *pp;
        if (b->base == (uintptr_t)p && b->host == host) {
            *pp = b->next;
            if (!host)
                g.used[b->device] -= b->size;
            pthread_mutex_unlock(&g.mu);
            free(p);
            free(b);
            return ACL_SUCCESS;
        }
    }
    pthread_mutex_unlock(&g.mu);
    return err(ACL_ERROR_INVALID_PARAM, "%s(%p): not allocated here", call, p);
}

API aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
    INJECT("aclrtMalloc");
    if (policy != ACL_MEM_MALLOC_HUGE_FIRST && policy != ACL_MEM_MALLOC_HUGE_ONLY &&
        policy != ACL_MEM_MALLOC_NORMAL_ONLY)
        return err(ACL_ERROR_INVALID_PARAM, "aclrtMalloc: policy %d", policy);
    return take(devPtr, size, false, "aclrtMalloc");
}

API aclError aclrtFree(void *devPtr)
{
    INJECT("aclrtFree");
    return give(devPtr, false, "aclrtFree");
}

API aclError aclrtMallocHost(void **hostPtr, size_t size)
{
    INJECT("aclrtMallocHost");
    return take(hostPtr, size, true, "aclrtMallocHost");
}

API aclError aclrtFreeHost(void *hostPtr)
{
    INJECT("aclrtFreeHost");
    return give(hostPtr, true, "aclrtFreeHost");
}

API aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *fr, size_t *total)
{
    HERE("aclrtGetMemInfo", dev);
    if (!fr || !total)
        return err(ACL_ERROR_INVALID_PARAM, "aclrtGetMemInfo: NULL out");
    if (attr != ACL_HBM_MEM) { /* a training part: all of it is HBM */
        *fr = *total = 0;
        return ACL_SUCCESS;
    }
    pthread_mutex_lock(&g.mu);
    *total = (size_t)g.limit;
    *fr = (size_t)(g.limit - g.used[dev]);
    pthread_mutex_unlock(&g.mu);
    return ACL_SUCCESS;
}

/* A device range of the current device `dev`, as a copy or memset needs. */
aclError want_device(const void *p, size_t n, int dev, const char *call,
                     const char *which)
{
    int owner = -1;

    if (!is_device(p, n, &owner))
        return err(ACL_ERROR_INVALID_PARAM,
                   "%s: %s %p (+%zu) is not inside a device allocation", call,
                   which, p, n);
    if (owner != dev)
        return err(ACL_ERROR_INVALID_PARAM,
                   "%s: %s %p is memory of device %d, the current context is "
                   "device %d",
                   call, which, p, owner, dev);
    return ACL_SUCCESS;
}

static aclError want_host(const void *p, size_t n, const char *call,
                          const char *which)
{
    if (!p)
        return err(ACL_ERROR_INVALID_PARAM, "%s: %s is NULL", call, which);
    if (is_device(p, 1, NULL) || is_device((const char *)p + n - 1, 1, NULL))
        return err(ACL_ERROR_INVALID_PARAM,
                   "%s: %s %p is device memory, the copy kind says host", call,
                   which, p);
    return ACL_SUCCESS;
}

static aclError copy_args(void *dst, size_t destMax, const void *src,
                          size_t count, aclrtMemcpyKind kind, int dev,
                          const char *call)
{
    aclError e;

    if (count > destMax)
        return err(ACL_ERROR_INVALID_PARAM, "%s: count %zu > destMax %zu",
                   call, count, destMax);
    if (count == 0)
        return ACL_SUCCESS;
    switch (kind) {
    case ACL_MEMCPY_HOST_TO_HOST:
        if ((e = want_host(dst, count, call, "dst")) ||
            (e = want_host(src, count, call, "src")))
            return e;
        break;
    case ACL_MEMCPY_HOST_TO_DEVICE:
        if ((e = want_device(dst, count, dev, call, "dst")) ||
            (e = want_host(src, count, call, "src")))
            return e;
        break;
    case ACL_MEMCPY_DEVICE_TO_HOST:
        if ((e = want_host(dst, count, call, "dst")) ||
            (e = want_device(src, count, dev, call, "src")))
            return e;
        break;
    case ACL_MEMCPY_DEVICE_TO_DEVICE:
        if ((e = want_device(dst, count, dev, call, "dst")) ||
            (e = want_device(src, count, dev, call, "src")))
            return e;
        break;
    default:
        return err(ACL_ERROR_INVALID_PARAM, "%s: kind %d", call, (int)kind);
    }
    return ACL_SUCCESS;
}

static void do_copy(void *dst, const void *src, size_t n, bool d2h)
{
    memcpy(dst, src, n);
    if (d2h && g.corrupt_d2h && n)
        ((unsigned char *)dst)[n / 2] ^= 0x01;
}

API aclError aclrtMemcpy(void *dst, size_t destMax, const void *src,
                         size_t count, aclrtMemcpyKind kind)
{
    aclError e;

    INJECT("aclrtMemcpy");
    HERE("aclrtMemcpy", dev);
    if ((e = copy_args(dst, destMax, src, count, kind, dev, "aclrtMemcpy")))
        return e;
    do_copy(dst, src, count, kind == ACL_MEMCPY_DEVICE_TO_HOST);
    return ACL_SUCCESS;
}

API aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value,
                         size_t count)
{
    aclError e;

    INJECT("aclrtMemset");
    HERE("aclrtMemset", dev);
    if (count > maxCount)
        return err(ACL_ERROR_INVALID_PARAM, "aclrtMemset: count > maxCount");
    if (count && (e = want_device(devPtr, count, dev, "aclrtMemset", "devPtr")))
        return e;
    memset(devPtr, value, count);
    return ACL_SUCCESS;
}

/* ---- streams ----------------------------------------------------------------- */

static void event_unref(struct sevent *ev)
{
    bool last;

    pthread_mutex_lock(&ev->mu);
    last = --ev->refs == 0;
    pthread_mutex_unlock(&ev->mu);
    if (last) {
        pthread_mutex_destroy(&ev->mu);
        pthread_cond_destroy(&ev->cv);
        free(ev);
    }
}

static struct report *report_of(uint64_t tid, bool make)
{
    struct report *r;

    for (r = g.reports; r; r = r->next)
        if (r->tid == tid)
            return r;
    if (!make || !(r = calloc(1, sizeof(*r))))
        return NULL;
    r->tid = tid;
    r->next = g.reports;
    g.reports = r;
    return r;
}

/* Hand a callback to the subscribed thread; with `block`, wait for it. */
static void run_callback(struct sstream *s, struct task *t)
{
    struct report *r;

    pthread_mutex_lock(&g.mu);
    r = s->subscriber ? report_of(s->subscriber, false) : NULL;
    if (!r) { /* unsubscribed meanwhile: ACL would drop it too */
        pthread_mutex_unlock(&g.mu);
        return;
    }
    while (r->pending) /* one at a time per reporting thread */
        pthread_cond_wait(&g.report_cv, &g.mu);
    r->fn = t->fn;
    r->user = t->user;
    r->pending = true;
    r->ran = false;
    pthread_cond_broadcast(&g.report_cv);
    while (t->block && !r->ran)
        pthread_cond_wait(&g.report_cv, &g.mu);
    pthread_mutex_unlock(&g.mu);
}

static void op_run(struct aclOpExecutor *x);

static void run(struct sstream *s, struct task *t)
{
    switch (t->kind) {
    case T_COPY:
        do_copy(t->dst, t->src, t->n, t->value);
        break;
    case T_SET:
        memset(t->dst, t->value, t->n);
        break;
    case T_RECORD:
        pthread_mutex_lock(&t->ev->mu);
        if (t->gen > t->ev->done) {
            t->ev->done = t->gen;
            t->ev->t_ms = now_ms();
        }
        pthread_cond_broadcast(&t->ev->cv);
        pthread_mutex_unlock(&t->ev->mu);
        event_unref(t->ev);
        break;
    case T_WAIT:
        pthread_mutex_lock(&t->ev->mu);
        while (!g.skip_wait && t->ev->done < t->gen)
            pthread_cond_wait(&t->ev->cv, &t->ev->mu);
        pthread_mutex_unlock(&t->ev->mu);
        event_unref(t->ev);
        break;
    case T_CALLBACK:
        run_callback(s, t);
        break;
    case T_OP:
        op_run(t->op);
        break;
    case T_FN: /* HCCL work: fn(user) on the stream's thread */
        t->fn(t->user);
        break;
    }
}

static void *worker(void *arg)
{
    struct sstream *s = arg;

    pthread_mutex_lock(&s->mu);
    for (;;) {
        struct task *t;

        while (!s->head && !s->stop)
            pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head)
            break;
        t = s->head;
        pthread_mutex_unlock(&s->mu);
        run(s, t);
        pthread_mutex_lock(&s->mu);
        s->head = t->next;
        if (!s->head)
            s->tail = NULL;
        free(t);
        s->done++;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* A live stream of the current device, or NULL with the error set. */
static struct sstream *stream_of(aclrtStream stream, int dev, const char *call,
                                 aclError *e)
{
    struct sstream *s;

    *e = ACL_SUCCESS;
    if (!stream) {
        *e = err(ACL_ERROR_INVALID_PARAM,
                 "%s: the stand-in has no implicit NULL stream", call);
        return NULL;
    }
    pthread_mutex_lock(&g.mu);
    for (s = g.streams; s && s != stream; s = s->next)
        ;
    pthread_mutex_unlock(&g.mu);
    if (!s)
        *e = err(ACL_ERROR_INVALID_RESOURCE_HANDLE, "%s: %p is not a stream",
                 call, stream);
    else if (dev >= 0 && s->device != dev) {
        *e = err(ACL_ERROR_INVALID_PARAM,
                 "%s: stream of device %d used with device %d current", call,
                 s->device, dev);
        s = NULL;
    }
    return s;
}

static aclError enqueue(struct sstream *s, const struct task *proto)
{
    struct task *t = malloc(sizeof(*t));

    if (!t)
        return err(ACL_ERROR_BAD_ALLOC, "stand-in: no memory for a task");
    *t = *proto;
    t->next = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->tail)
        s->tail->next = t;
    else
        s->head = t;
    s->tail = t;
    s->enq++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return ACL_SUCCESS;
}

static void drain(struct sstream *s)
{
    uint64_t target;

    pthread_mutex_lock(&s->mu);
    target = s->enq;
    while (s->done < target)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

API aclError aclrtCreateStream(aclrtStream *stream)
{
    struct sstream *s;

    INJECT("aclrtCreateStream");
    HERE("aclrtCreateStream", dev);
    if (!stream)
        return err(ACL_ERROR_INVALID_PARAM, "aclrtCreateStream: NULL out");
    s = calloc(1, sizeof(*s));
    if (!s)
        return err(ACL_ERROR_BAD_ALLOC, "aclrtCreateStream: no memory");
    s->device = dev;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->th, NULL, worker, s)) {
        free(s);
        return err(ACL_ERROR_BAD_ALLOC, "aclrtCreateStream: no thread");
    }
    pthread_mutex_lock(&g.mu);
    s->next = g.streams;
    g.streams = s;
    pthread_mutex_unlock(&g.mu);
    *stream = s;
    return ACL_SUCCESS;
}

API aclError aclrtDestroyStream(aclrtStream stream)
{
    struct sstream *s;
    aclError e;
    bool busy;

    INJECT("aclrtDestroyStream");
    HERE("aclrtDestroyStream", dev);
    if (!(s = stream_of(stream, dev, "aclrtDestroyStream", &e)))
        return e;
    pthread_mutex_lock(&s->mu);
    busy = s->done != s->enq;
    pthread_mutex_unlock(&s->mu);
    if (busy) /* ACL asks for aclrtSynchronizeStream first */
        return err(ACL_ERROR_INVALID_PARAM,
                   "aclrtDestroyStream: the stream still has queued work");
    pthread_mutex_lock(&g.mu);
    for (struct sstream **pp = &g.streams; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    pthread_mutex_unlock(&g.mu);
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    return ACL_SUCCESS;
}

API aclError aclrtSynchronizeStream(aclrtStream stream)
{
    struct sstream *s;
    aclError e;

    INJECT("aclrtSynchronizeStream");
    HERE("aclrtSynchronizeStream", dev);
    if (!(s = stream_of(stream, dev, "aclrtSynchronizeStream", &e)))
        return e;
    drain(s);
    return ACL_SUCCESS;
}

API aclError aclrtSynchronizeDevice(void)
{
    struct sstream *list[256];
    int n = 0;

    INJECT("aclrtSynchronizeDevice");
    HERE("aclrtSynchronizeDevice", dev);
    /* Streams are only destroyed by their owners, who do not race a
     * device sync of the same device in the tests. */
    pthread_mutex_lock(&g.mu);
    for (struct sstream *s = g.streams; s && n < 256; s = s->next)
        if (s->device == dev)
            list[n++] = s;
    pthread_mutex_unlock(&g.mu);
    for (int i = 0; i < n; i++)
        drain(list[i]);
    return ACL_SUCCESS;
}

API aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src,
                              size_t count, aclrtMemcpyKind kind,
                              aclrtStream stream)
{
    struct sstream *s;
    aclError e;

    INJECT("aclrtMemcpyAsync");
    HERE("aclrtMemcpyAsync", dev);
    if (!(s = stream_of(stream, dev, "aclrtMemcpyAsync", &e)))
        return e;
    if ((e = copy_args(dst, destMax, src, count, kind, dev, "aclrtMemcpyAsync")))
        return e;
    return enqueue(s, &(struct task){.kind = T_COPY, .dst = dst, .src = src,
                                     .n = count,
                                     .value = kind == ACL_MEMCPY_DEVICE_TO_HOST});
}

API aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value,
                              size_t count, aclrtStream stream)
{
    struct sstream *s;
    aclError e;

    INJECT("aclrtMemsetAsync");
    HERE("aclrtMemsetAsync", dev);
    if (!(s = stream_of(stream, dev, "aclrtMemsetAsync", &e)))
        return e;
    if (count > maxCount)
        return err(ACL_ERROR_INVALID_PARAM, "aclrtMemsetAsync: count > maxCount");
    if (count &&
        (e = want_device(devPtr, count, dev, "aclrtMemsetAsync", "devPtr")))
        return e;
    return enqueue(s, &(struct task){.kind = T_SET, .dst = devPtr, .n = count,
                                     .value = value});
}

/* ---- events ------------------------------------------------------------------- */

API aclError aclrtCreateEvent(aclrtEvent *event)
{
    struct sevent *ev;

    INJECT("aclrtCreateEvent");
    HERE("aclrtCreateEvent", dev);
    (void)dev;
    if (!event)
        return err(ACL_ERROR_INVALID_PARAM, "aclrtCreateEvent: NULL out");
    ev = calloc(1, sizeof(*ev));
    if (!ev)
        return err(ACL_ERROR_BAD_ALLOC, "aclrtCreateEvent: no memory");
    pthread_mutex_init(&ev->mu, NULL);
    pthread_cond_init(&ev->cv, NULL);
    ev->refs = 1;
    *event = ev;
    return ACL_SUCCESS;
}

API aclError aclrtDestroyEvent(aclrtEvent event)
{
    struct sevent *ev = event;

    INJECT("aclrtDestroyEvent");
    if (!ev)
        return err(ACL_ERROR_INVALID_PARAM, "aclrtDestroyEvent: NULL");
    event_unref(ev);
    return ACL_SUCCESS;
}

API aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream)
{
    struct sevent *ev = event;
    struct sstream *s;
    uint64_t gen;
    aclError e;

    INJECT("aclrtRecordEvent");
    HERE("aclrtRecordEvent", dev);
    if (!ev)
        return err(ACL_ERROR_INVALID_PARAM, "aclrtRecordEvent: NULL event");
    if (!(s = stream_of(stream, dev, "aclrtRecordEvent", &e)))
        return e;
    pthread_mutex_lock(&ev->mu);
    gen = ++ev->enq;
    ev->refs++;
    pthread_mutex_unlock(&ev->mu);
    e = enqueue(s, &(struct task){.kind = T_RECORD, .ev = ev, .gen = gen});
    if (e)
        event_unref(ev);
    return e;
}

API aclError aclrtQueryEventStatus(aclrtEvent event,
                                   aclrtEventRecordedStatus *status)
{
    struct sevent *ev = event;

    INJECT("aclrtQueryEventStatus");
    if (!ev || !status)
        return err(ACL_ERROR_INVALID_PARAM, "aclrtQueryEventStatus: NULL");
    pthread_mutex_lock(&ev->mu);
    *status = ev->done >= ev->enq ? ACL_EVENT_RECORDED_STATUS_COMPLETE
                                  : ACL_EVENT_RECORDED_STATUS_NOT_READY;
    pthread_mutex_unlock(&ev->mu);
    return ACL_SUCCESS;
}

API aclError aclrtSynchronizeEvent(aclrtEvent event)
{
    struct sevent *ev = event;

    INJECT("aclrtSynchronizeEvent");
    if (!ev)
        return err(ACL_ERROR_INVALID_PARAM, "aclrtSynchronizeEvent: NULL");
    pthread_mutex_lock(&ev->mu);
    uint64_t target = ev->enq;
    while (ev->done < target)
        pthread_cond_wait(&ev->cv, &ev->mu);
    pthread_mutex_unlock(&ev->mu);
    return ACL_SUCCESS;
}

API aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event)
{
    struct sevent *ev = event;
    struct sstream *s;
    uint64_t gen;
    aclError e;

    INJECT("aclrtStreamWaitEvent");
    HERE("aclrtStreamWaitEvent", dev);
    if (!ev)
        return err(ACL_ERROR_INVALID_PARAM, "aclrtStreamWaitEvent: NULL event");
    if (!(s = stream_of(stream, dev, "aclrtStreamWaitEvent", &e)))
        return e;
    pthread_mutex_lock(&ev->mu);
    gen = ev->enq;
    ev->refs++;
    pthread_mutex_unlock(&ev->mu);
    e = enqueue(s, &(struct task){.kind = T_WAIT, .ev = ev, .gen = gen});
    if (e)
        event_unref(ev);
    return e;
}

API aclError aclrtEventElapsedTime(float *ms, aclrtEvent startEvent,
                                   aclrtEvent endEvent)
{
    struct sevent *a = startEvent, *b = endEvent;
    double ta, tb;
    bool ok;

    INJECT("aclrtEventElapsedTime");
    if (!ms || !a || !b)
        return err(ACL_ERROR_INVALID_PARAM, "aclrtEventElapsedTime: NULL");
    pthread_mutex_lock(&a->mu);
    ok = a->done > 0 && a->done >= a->enq;
    ta = a->t_ms;
    pthread_mutex_unlock(&a->mu);
    pthread_mutex_lock(&b->mu);
    ok = ok && b->done > 0 && b->done >= b->enq;
    tb = b->t_ms;
    pthread_mutex_unlock(&b->mu);
    if (!ok)
        return err(ACL_ERROR_INVALID_PARAM,
                   "aclrtEventElapsedTime: an event is not complete");
    *ms = (float)(tb - ta);
    return ACL_SUCCESS;
}

/* ---- callbacks ------------------------------------------------------------------ */

API aclError aclrtSubscribeReport(uint64_t threadId, aclrtStream stream)
{
    struct sstream *s;
    aclError e;

    INJECT("aclrtSubscribeReport");
    if (!(s = stream_of(stream, -1, "aclrtSubscribeReport", &e)))
        return e;
    pthread_mutex_lock(&g.mu);
    if (s->subscriber) {
        pthread_mutex_unlock(&g.mu);
        return err(ACL_ERROR_REPEAT_SUBSCRIBE, "stream already subscribed");
    }
    if (!report_of(threadId, true)) {
        pthread_mutex_unlock(&g.mu);
        return err(ACL_ERROR_BAD_ALLOC, "aclrtSubscribeReport: no memory");
    }
    s->subscriber = threadId;
    pthread_mutex_unlock(&g.mu);
    return ACL_SUCCESS;
}

API aclError aclrtUnSubscribeReport(uint64_t threadId, aclrtStream stream)
{
    struct sstream *s;
    aclError e;

    if (!(s = stream_of(stream, -1, "aclrtUnSubscribeReport", &e)))
        return e;
    pthread_mutex_lock(&g.mu);
    if (s->subscriber != threadId) {
        pthread_mutex_unlock(&g.mu);
        return err(ACL_ERROR_STREAM_NOT_SUBSCRIBE, "not subscribed so");
    }
    s->subscriber = 0;
    pthread_mutex_unlock(&g.mu);
    return ACL_SUCCESS;
}

API aclError aclrtLaunchCallback(aclrtCallback fn, void *userData,
                                 aclrtCallbackBlockType blockType,
                                 aclrtStream stream)
{
    struct sstream *s;
    aclError e;

    INJECT("aclrtLaunchCallback");
    HERE("aclrtLaunchCallback", dev);
    if (!fn)
        return err(ACL_ERROR_INVALID_PARAM, "aclrtLaunchCallback: fn NULL");
    if (!(s = stream_of(stream, dev, "aclrtLaunchCallback", &e)))
        return e;
    if (!s->subscriber)
        return err(ACL_ERROR_STREAM_NOT_SUBSCRIBE,
                   "aclrtLaunchCallback: no thread subscribed to the stream");
    return enqueue(s, &(struct task){.kind = T_CALLBACK, .fn = fn,
                                     .user = userData,
                                     .block = blockType == ACL_CALLBACK_BLOCK});
}

API aclError aclrtProcessReport(int32_t timeout)
{
    uint64_t me = (uint64_t)pthread_self();
    struct timespec until;
    struct report *r;
    aclrtCallback fn;
    void *user;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout / 1000;
    until.tv_nsec += (long)(timeout % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&g.mu);
    r = report_of(me, false);
    if (!r) {
        pthread_mutex_unlock(&g.mu);
        return err(ACL_ERROR_THREAD_NOT_SUBSCRIBE, "thread not subscribed");
    }
    while (!r->pending) {
        if (pthread_cond_timedwait(&g.report_cv, &g.mu, &until) == ETIMEDOUT &&
            !r->pending) {
            pthread_mutex_unlock(&g.mu);
            return err(ACL_ERROR_WAIT_CALLBACK_TIMEOUT, "no callback");
        }
    }
    fn = r->fn;
    user = r->user;
    pthread_mutex_unlock(&g.mu);
    fn(user);
    pthread_mutex_lock(&g.mu);
    r->pending = false;
    r->ran = true;
    pthread_cond_broadcast(&g.report_cv);
    pthread_mutex_unlock(&g.mu);
    return ACL_SUCCESS;
}

/* ---- aclnn: add, mul, relu, softmax, log_softmax, matmul, cast (host) ---- */

/* The stand-in's view of a tensor: checked at creation against the live
 * device memory of the current device. */
/* struct aclTensor and struct aclScalar: acl_standin_internal.h */

enum op_kind { OP_ADD, OP_MUL, OP_RELU, OP_SOFTMAX, OP_LOG_SOFTMAX, OP_MATMUL,
               OP_CAST, OP_HOST,
               /* the elementwise set (NPU_OPAPI_EW_FUNCS) */
               OP_SUB, OP_DIV, OP_MAX, OP_MIN, OP_NEG, OP_ABS, OP_EXP, OP_LOG,
               OP_SQRT, OP_SIGMOID, OP_TANH, OP_SILU, OP_GELU, OP_COPY };

/* The ops with one operand. */
static bool op_unary(enum op_kind k)
{
    return k == OP_RELU || k == OP_SOFTMAX || k == OP_LOG_SOFTMAX ||
           k == OP_CAST || (k >= OP_NEG && k <= OP_COPY);
}

/* The ops that take integer dtypes too. */
static bool op_any_dtype(enum op_kind k)
{
    return k == OP_ADD || k == OP_MUL || k == OP_SUB || k == OP_MAX ||
           k == OP_MIN || k == OP_NEG || k == OP_ABS || k == OP_COPY;
}

struct aclOpExecutor {
    enum op_kind kind;
    struct aclTensor in[2], out;
    double alpha_f;
    int64_t alpha_i;
    int dim; /* the softmax pair: the axis, normalised (0 for 0-d) */
    int64_t approx; /* aclnnGeluV2's mode: 0 erf, 1 tanh */
    uint64_t ws; /* the workspace it asked for */
    int device;
    struct aclOpExecutor *next, **prev; /* planned, not yet launched */
    /* OP_HOST (standin_host_plan): host(priv, workspace) runs on the
     * stream's thread, then drop(priv) */
    void (*host)(void *priv, void *workspace);
    void (*drop)(void *priv);
    void *priv, *workspace;
};

/* Executors planned and never launched (a caller that gave up between the
 * phases): the library owns them, and frees them when it is unloaded. */
static struct aclOpExecutor *planned;

static void unplan(struct aclOpExecutor *e)
{
    pthread_mutex_lock(&g.mu);
    if (e->prev) {
        *e->prev = e->next;
        if (e->next)
            e->next->prev = e->prev;
        e->prev = NULL;
    }
    pthread_mutex_unlock(&g.mu);
}

/* Bytes of one element, 0 for a dtype the stand-in does not compute. */
size_t dt_size(aclDataType dt)
{
    switch (dt) {
    case ACL_FLOAT: case ACL_INT32: return 4;
    case ACL_FLOAT16: case ACL_BF16: return 2;
    case ACL_INT64: return 8;
    default: return 0;
    }
}

bool dt_float(aclDataType dt)
{
    return dt == ACL_FLOAT || dt == ACL_FLOAT16 || dt == ACL_BF16;
}

API aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum,
                               aclDataType dataType, const int64_t *stride,
                               int64_t offset, aclFormat format,
                               const int64_t *storageDims,
                               uint64_t storageDimsNum, void *tensorData)
{
    struct aclTensor *t;
    size_t es = dt_size(dataType);
    int64_t need = 1, have = 1;
    int dev = here("aclCreateTensor");

    if (dev < 0 || viewDimsNum > 8 || (viewDimsNum && (!viewDims || !stride)) ||
        !es || format != ACL_FORMAT_ND || offset < 0 || !storageDims ||
        storageDimsNum == 0 || storageDimsNum > 8) {
        err(ACL_ERROR_INVALID_PARAM, "aclCreateTensor: bad arguments");
        return NULL;
    }
    for (uint64_t i = 0; i < viewDimsNum; i++) {
        if (viewDims[i] <= 0 || stride[i] < 0) {
            err(ACL_ERROR_INVALID_PARAM, "aclCreateTensor: dim %d", (int)i);
            return NULL;
        }
        need += (viewDims[i] - 1) * stride[i];
    }
    for (uint64_t i = 0; i < storageDimsNum; i++)
        have *= storageDims[i];
    /* the view must lie inside the storage, and the storage inside one
     * allocation of the current device */
    if (offset + need > have ||
        want_device(tensorData, (size_t)have * es, dev, "aclCreateTensor",
                    "tensorData")) {
        err(ACL_ERROR_INVALID_PARAM,
            "aclCreateTensor: view of %lld elements at offset %lld outside "
            "a storage of %lld, or storage not device memory",
            (long long)need, (long long)offset, (long long)have);
        return NULL;
    }
    t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->dt = dataType;
    t->ndim = (int)viewDimsNum;
    for (int i = 0; i < t->ndim; i++) {
        t->dims[i] = viewDims[i];
        t->strides[i] = stride[i];
    }
    t->base = (char *)tensorData + offset * (int64_t)es;
    return t;
}

API aclnnStatus aclDestroyTensor(const aclTensor *tensor)
{
    free((void *)tensor);
    return 0;
}

API aclScalar *aclCreateScalar(void *value, aclDataType dataType)
{
    struct aclScalar *s;

    if (!value || (dataType != ACL_FLOAT && dataType != ACL_INT64))
        return NULL; /* the only two the stand-in reads */
    s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->dt = dataType;
    if (dataType == ACL_FLOAT)
        s->f = *(const float *)value;
    else
        s->i = *(const int64_t *)value;
    s->f = dataType == ACL_FLOAT ? s->f : (double)s->i;
    s->i = dataType == ACL_INT64 ? s->i : (int64_t)s->f;
    return s;
}

API aclnnStatus aclDestroyScalar(const aclScalar *scalar)
{
    free((void *)scalar);
    return 0;
}

/* The arrays copy their values, as aclnn's do. */
#define STANDIN_ARRAY(Type, elem)                                            \
    API acl##Type *aclCreate##Type(const elem *value, uint64_t size)         \
    {                                                                        \
        struct acl##Type *a;                                                 \
                                                                             \
        if ((size && !value) || size > 64)                                   \
            return NULL;                                                     \
        a = calloc(1, sizeof(*a));                                           \
        if (!a)                                                              \
            return NULL;                                                     \
        a->n = size;                                                         \
        if (size)                                                            \
            memcpy(a->v, value, size * sizeof(*value));                      \
        return a;                                                            \
    }                                                                        \
                                                                             \
    API aclnnStatus aclDestroy##Type(const acl##Type *array)                 \
    {                                                                        \
        free((void *)array);                                                 \
        return 0;                                                            \
    }
STANDIN_ARRAY(IntArray, int64_t)
STANDIN_ARRAY(BoolArray, bool)
STANDIN_ARRAY(FloatArray, float)
#undef STANDIN_ARRAY

aclnnStatus standin_host_plan(const char *call, uint64_t ws,
                              void (*host)(void *priv, void *workspace),
                              void (*drop)(void *priv), void *priv,
                              uint64_t *wsOut, aclOpExecutor **ex)
{
    struct aclOpExecutor *e;
    aclError inj = injected(call);

    if (inj || !wsOut || !ex || !host) {
        if (drop)
            drop(priv);
        return inj ? inj : err(161001, "%s: a NULL argument", call);
    }
    e = calloc(1, sizeof(*e));
    if (!e) {
        if (drop)
            drop(priv);
        return err(ACL_ERROR_BAD_ALLOC, "%s: no memory", call);
    }
    e->kind = OP_HOST;
    e->host = host;
    e->drop = drop;
    e->priv = priv;
    e->ws = ws;
    e->device = cur ? cur->device : -1;
    pthread_mutex_lock(&g.mu);
    e->next = planned;
    if (planned)
        planned->prev = &e->next;
    e->prev = &planned;
    planned = e;
    pthread_mutex_unlock(&g.mu);
    *wsOut = ws;
    *ex = e;
    return 0;
}

static bool same_view(const struct aclTensor *a, const struct aclTensor *b)
{
    if (a->ndim != b->ndim || a->dt != b->dt)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i])
            return false;
    return true;
}

/* cast's operands: one shape, any two dtypes the stand-in stores. */
static bool same_dims(const struct aclTensor *a, const struct aclTensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i])
            return false;
    return true;
}

/* matmul's operands: [m, k] @ [k, n] -> [m, n], one float dtype. */
static bool mm_views_ok(const struct aclTensor *x, const struct aclTensor *y,
                        const struct aclTensor *o)
{
    return x->ndim == 2 && y->ndim == 2 && o->ndim == 2 && x->dt == y->dt &&
           x->dt == o->dt && dt_float(x->dt) && x->dims[1] == y->dims[0] &&
           o->dims[0] == x->dims[0] && o->dims[1] == y->dims[1];
}

/* Phase 1 of every op: check, copy the views into a new executor. */
static aclnnStatus op_plan(enum op_kind kind, const aclTensor *x,
                           const aclTensor *y, const aclScalar *alpha,
                           const aclTensor *out, uint64_t *ws,
                           aclOpExecutor **ex, const char *call)
{
    struct aclOpExecutor *e;
    aclError inj = injected(call);

    if (inj)
        return inj;
    if (!x || !out || !ws || !ex || (!op_unary(kind) && !y) ||
        ((kind == OP_ADD || kind == OP_SUB) && !alpha))
        return err(161001, "%s: a NULL argument", call);
    if (kind == OP_MATMUL ? !mm_views_ok(x, y, out)
        : kind == OP_CAST ? !same_dims(x, out)
                          : (!same_view(x, out) || (y && !same_view(y, out)) ||
                             (!op_any_dtype(kind) && !dt_float(x->dt))))
        return err(161002, "%s: operands disagree (the stand-in does not "
                   "broadcast; keel sends operands already broadcast)", call);
    e = calloc(1, sizeof(*e));
    if (!e)
        return err(ACL_ERROR_BAD_ALLOC, "%s: no memory", call);
    e->kind = kind;
    e->in[0] = *x;
    if (y)
        e->in[1] = *y;
    e->out = *out;
    e->alpha_f = alpha ? alpha->f : 1.0;
    e->alpha_i = alpha ? alpha->i : 1;
    /* add asks for a workspace, so the plugin's workspace path runs */
    e->ws = kind == OP_ADD ? 512 : 0;
    e->device = cur ? cur->device : -1;
    pthread_mutex_lock(&g.mu);
    e->next = planned;
    if (planned)
        planned->prev = &e->next;
    e->prev = &planned;
    planned = e;
    pthread_mutex_unlock(&g.mu);
    *ws = e->ws;
    *ex = e;
    return 0;
}

/* Phase 2: the workspace must be device memory of the size asked for. */
static aclnnStatus op_check_launch(void *workspace, uint64_t wsSize,
                                   aclOpExecutor *ex, aclrtStream stream,
                                   const char *call, struct sstream **s)
{
    aclError e;
    int dev;

    if ((e = injected(call)))
        return e;
    dev = here(call);
    if (dev < 0 || dev != ex->device)
        return err(ACL_ERROR_INVALID_PARAM, "%s: not the executor's device",
                   call);
    if (wsSize < ex->ws || (ex->ws && !workspace))
        return err(161002, "%s: workspace of %llu bytes, %llu asked", call,
                   (unsigned long long)wsSize, (unsigned long long)ex->ws);
    if (ex->ws && (e = want_device(workspace, (size_t)ex->ws, dev, call,
                                   "workspace")))
        return e;
    if (!(*s = stream_of(stream, dev, call, &e)))
        return e;
    return 0;
}

/* Phase 2: the workspace must be device memory of the size asked for. The
 * executor is used up whether the launch is accepted or not. */
aclnnStatus op_launch(void *workspace, uint64_t wsSize,
                      aclOpExecutor *ex, aclrtStream stream,
                      const char *call)
{
    struct sstream *s = NULL;
    aclnnStatus e;

    if (!ex)
        return err(161001, "%s: executor NULL", call);
    unplan(ex);
    e = op_check_launch(workspace, wsSize, ex, stream, call, &s);
    ex->workspace = workspace;
    if (!e)
        e = enqueue(s, &(struct task){.kind = T_OP, .op = ex});
    if (e) {
        if (ex->drop)
            ex->drop(ex->priv);
        free(ex);
    }
    return e;
}

double ld_f(const struct aclTensor *t, const char *p)
{
    uint16_t h;

    switch (t->dt) {
    case ACL_FLOAT: { float f; memcpy(&f, p, 4); return f; }
    case ACL_FLOAT16: memcpy(&h, p, 2); return keel_kit_f16_to_f32(h);
    case ACL_BF16: memcpy(&h, p, 2); return keel_kit_bf16_to_f32(h);
    default: return 0;
    }
}

void st_f(const struct aclTensor *t, char *p, double v)
{
    float f = (float)v;
    uint16_t h;

    switch (t->dt) {
    case ACL_FLOAT: memcpy(p, &f, 4); break;
    case ACL_FLOAT16: h = keel_kit_f32_to_f16(f); memcpy(p, &h, 2); break;
    case ACL_BF16: h = keel_kit_f32_to_bf16(f); memcpy(p, &h, 2); break;
    default: break;
    }
}

int64_t ld_i(const struct aclTensor *t, const char *p)
{
    int32_t a;
    int64_t b;

    if (t->dt == ACL_INT32) {
        memcpy(&a, p, 4);
        return a;
    }
    memcpy(&b, p, 8);
    return b;
}

void st_i(const struct aclTensor *t, char *p, int64_t v)
{
    int32_t a = (int32_t)(uint32_t)v;

    if (t->dt == ACL_INT32)
        memcpy(p, &a, 4);
    else
        memcpy(p, &v, 8);
}

/* softmax / log_softmax: every line along x->dim in three passes (maximum,
 * exp-sum, outputs), all in double; a NaN in a line makes the line NaN. */
static void sm_run(struct aclOpExecutor *x)
{
    int nd = x->out.ndim, ax = x->dim;
    int64_t idx[8] = {0}, lines = 1;
    int64_t n = nd ? x->out.dims[ax] : 1;
    int64_t si = nd ? x->in[0].strides[ax] : 0, so = nd ? x->out.strides[ax] : 0;
    size_t es = dt_size(x->out.dt);

    for (int i = 0; i < nd; i++)
        if (i != ax)
            lines *= x->out.dims[i];
    for (int64_t l = 0; l < lines; l++) {
        int64_t oi = 0, oo = 0;
        double m = -INFINITY, sum = 0.0;
        for (int i = 0; i < nd; i++) {
            oi += idx[i] * x->in[0].strides[i];
            oo += idx[i] * x->out.strides[i];
        }
        const char *a = x->in[0].base + oi * (int64_t)es;
        char *c = x->out.base + oo * (int64_t)es;
        for (int64_t j = 0; j < n; j++) {
            double v = ld_f(&x->in[0], a + j * si * (int64_t)es);
            if (v != v || (m == m && v > m))
                m = v;
        }
        for (int64_t j = 0; j < n; j++)
            sum += exp(ld_f(&x->in[0], a + j * si * (int64_t)es) - m);
        for (int64_t j = 0; j < n; j++) {
            double v = ld_f(&x->in[0], a + j * si * (int64_t)es);
            double r = x->kind == OP_SOFTMAX ? exp(v - m) / sum
                                             : v - m - log(sum);
            st_f(&x->out, c + j * so * (int64_t)es, (double)(float)r);
        }
        for (int i = nd - 1; i >= 0; i--) {
            if (i == ax)
                continue;
            if (++idx[i] < x->out.dims[i])
                break;
            idx[i] = 0;
        }
    }
    free(x);
}

/* matmul: each output a double sum over k, rounded through float. */
static void mm_run(struct aclOpExecutor *x)
{
    const struct aclTensor *p = &x->in[0], *q = &x->in[1], *o = &x->out;
    int64_t es = (int64_t)dt_size(o->dt);

    for (int64_t i = 0; i < o->dims[0]; i++)
        for (int64_t j = 0; j < o->dims[1]; j++) {
            double acc = 0.0;
            for (int64_t k = 0; k < p->dims[1]; k++)
                acc += ld_f(p, p->base + (i * p->strides[0] +
                                          k * p->strides[1]) * es) *
                       ld_f(q, q->base + (k * q->strides[0] +
                                          j * q->strides[1]) * es);
            if (g.matmul_wrong && i == 0 && j == 0)
                acc += 1.0;
            st_f(o, o->base + (i * o->strides[0] + j * o->strides[1]) * es,
                 (double)(float)acc);
        }
    free(x);
}

/* A float as an integer of `bits` bits: toward zero, saturating, NaN 0. */
static int64_t to_int(double v, int bits)
{
    double hi = bits == 32 ? 2147483647.0 : 9223372036854775807.0;
    double lo = bits == 32 ? -2147483648.0 : -9223372036854775808.0;

    if (v != v)
        return 0;
    if (v <= lo)
        return bits == 32 ? INT32_MIN : INT64_MIN;
    if (v >= hi)
        return bits == 32 ? INT32_MAX : INT64_MAX;
    return (int64_t)trunc(v);
}

/* cast: element by element, through double for floats and int64 for
 * integers. */
static void cast_run(struct aclOpExecutor *x)
{
    const struct aclTensor *p = &x->in[0], *o = &x->out;
    int64_t idx[8] = {0}, total = 1;
    int64_t ei = (int64_t)dt_size(p->dt), eo = (int64_t)dt_size(o->dt);

    for (int i = 0; i < o->ndim; i++)
        total *= o->dims[i];
    for (int64_t n = 0; n < total; n++) {
        int64_t oi = 0, oo = 0;
        for (int i = 0; i < o->ndim; i++) {
            oi += idx[i] * p->strides[i];
            oo += idx[i] * o->strides[i];
        }
        const char *a = p->base + oi * ei;
        char *c = o->base + oo * eo;
        if (dt_float(p->dt) && dt_float(o->dt))
            st_f(o, c, ld_f(p, a));
        else if (dt_float(p->dt))
            st_i(o, c, to_int(ld_f(p, a), o->dt == ACL_INT32 ? 32 : 64));
        else if (dt_float(o->dt))
            st_f(o, c, (double)ld_i(p, a));
        else
            st_i(o, c, ld_i(p, a));
        for (int i = o->ndim - 1; i >= 0; i--) {
            if (++idx[i] < o->dims[i])
                break;
            idx[i] = 0;
        }
    }
    free(x);
}

/* One element of the elementwise float ops, in double, as aclnn
 * documents each: Sub is self - alpha * other, Maximum / Minimum give NaN
 * when either side is NaN, GeluV2 mode 0 is x * Phi(x) with the erf, mode
 * 1 the tanh form. */
static double ew_float(const struct aclOpExecutor *x, double p, double q)
{
    switch (x->kind) {
    case OP_RELU: return p > 0 ? p : (p != p ? p : 0.0);
    case OP_ADD: return p + x->alpha_f * q;
    case OP_SUB: return p - x->alpha_f * q;
    case OP_MUL: return p * q;
    case OP_DIV: return p / q;
    case OP_MAX: return p != p || q != q ? NAN : (p > q ? p : q);
    case OP_MIN: return p != p || q != q ? NAN : (p < q ? p : q);
    case OP_NEG: return -p;
    case OP_ABS: return fabs(p);
    case OP_EXP: return exp(p);
    case OP_LOG: return log(p);
    case OP_SQRT: return sqrt(p);
    case OP_SIGMOID: return 1.0 / (1.0 + exp(-p));
    case OP_TANH: return tanh(p);
    case OP_SILU: return p / (1.0 + exp(-p));
    case OP_GELU:
        if (x->approx)
            return 0.5 * p * (1.0 + tanh(sqrt(2.0 / M_PI) *
                                         (p + 0.044715 * p * p * p)));
        return 0.5 * p * (1.0 + erf(p / sqrt(2.0)));
    default: return p; /* OP_COPY */
    }
}

/* The integer ops: two's complement, wrapping as the device does. */
static int64_t ew_int(const struct aclOpExecutor *x, int64_t p, int64_t q)
{
    uint64_t u = (uint64_t)p, v = (uint64_t)q;

    switch (x->kind) {
    case OP_ADD: return (int64_t)(u + (uint64_t)x->alpha_i * v);
    case OP_SUB: return (int64_t)(u - (uint64_t)x->alpha_i * v);
    case OP_MUL: return (int64_t)(u * v);
    case OP_MAX: return p > q ? p : q;
    case OP_MIN: return p < q ? p : q;
    case OP_NEG: return (int64_t)(0 - u);
    case OP_ABS: return p < 0 ? (int64_t)(0 - u) : p;
    default: return p; /* OP_COPY */
    }
}

static void op_run(struct aclOpExecutor *x)
{
    int64_t idx[8] = {0}, total = 1;
    size_t es = dt_size(x->out.dt);
    bool fl = dt_float(x->out.dt);

    if (x->kind == OP_HOST) {
        x->host(x->priv, x->workspace);
        if (x->drop)
            x->drop(x->priv);
        free(x);
        return;
    }
    if (x->kind == OP_SOFTMAX || x->kind == OP_LOG_SOFTMAX) {
        sm_run(x);
        return;
    }
    if (x->kind == OP_MATMUL) {
        mm_run(x);
        return;
    }
    if (x->kind == OP_CAST) {
        cast_run(x);
        return;
    }

    for (int i = 0; i < x->out.ndim; i++)
        total *= x->out.dims[i];
    for (int64_t n = 0; n < total; n++) {
        int64_t o[3] = {0, 0, 0};
        const struct aclTensor *v[3] = {&x->in[0], &x->in[1], &x->out};
        for (int k = 0; k < 3; k++)
            for (int i = 0; i < x->out.ndim; i++)
                o[k] += idx[i] * v[k]->strides[i];
        const char *a = x->in[0].base + o[0] * (int64_t)es;
        /* the unary ops have no second operand */
        const char *b = op_unary(x->kind) ? NULL
                                          : x->in[1].base + o[1] * (int64_t)es;
        char *c = x->out.base + o[2] * (int64_t)es;
        if (fl) {
            double p = ld_f(&x->in[0], a);
            double q = b ? ld_f(&x->in[1], b) : 0.0;
            double r = ew_float(x, p, q) +
                       (g.add_wrong && x->kind == OP_ADD && n == total / 2
                            ? 1.0 : 0.0) +
                       (g.sub_wrong && x->kind == OP_SUB && n == total / 2
                            ? 1.0 : 0.0);
            /* a float32 op: round through float, as the device would */
            st_f(&x->out, c, (double)(float)r);
        } else {
            int64_t p = ld_i(&x->in[0], a);
            int64_t q = b ? ld_i(&x->in[1], b) : 0;
            st_i(&x->out, c, ew_int(x, p, q));
        }
        for (int i = x->out.ndim - 1; i >= 0; i--) {
            if (++idx[i] < x->out.dims[i])
                break;
            idx[i] = 0;
        }
    }
    free(x);
}

API aclnnStatus aclnnAddGetWorkspaceSize(const aclTensor *self,
                                         const aclTensor *other,
                                         const aclScalar *alpha,
                                         aclTensor *out, uint64_t *workspaceSize,
                                         aclOpExecutor **executor)
{
    return op_plan(OP_ADD, self, other, alpha, out, workspaceSize, executor,
                   "aclnnAddGetWorkspaceSize");
}

API aclnnStatus aclnnAdd(void *workspace, uint64_t workspaceSize,
                         aclOpExecutor *executor, aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream, "aclnnAdd");
}

API aclnnStatus aclnnMulGetWorkspaceSize(const aclTensor *self,
                                         const aclTensor *other, aclTensor *out,
                                         uint64_t *workspaceSize,
                                         aclOpExecutor **executor)
{
    return op_plan(OP_MUL, self, other, NULL, out, workspaceSize, executor,
                   "aclnnMulGetWorkspaceSize");
}

API aclnnStatus aclnnMul(void *workspace, uint64_t workspaceSize,
                         aclOpExecutor *executor, aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream, "aclnnMul");
}

API aclnnStatus aclnnReluGetWorkspaceSize(const aclTensor *self,
                                          const aclTensor *out,
                                          uint64_t *workspaceSize,
                                          aclOpExecutor **executor)
{
    return op_plan(OP_RELU, self, NULL, NULL, out, workspaceSize, executor,
                   "aclnnReluGetWorkspaceSize");
}

API aclnnStatus aclnnRelu(void *workspace, uint64_t workspaceSize,
                          aclOpExecutor *executor, aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream, "aclnnRelu");
}

/* ---- the elementwise set (NPU_OPAPI_EW_FUNCS) ------------------------------ */

#define EW_LAUNCH(name)                                                     \
    API aclnnStatus name(void *workspace, uint64_t workspaceSize,           \
                         aclOpExecutor *executor, aclrtStream stream)       \
    {                                                                       \
        return op_launch(workspace, workspaceSize, executor, stream, #name); \
    }
#define EW_BINARY(name, kind)                                               \
    API aclnnStatus name##GetWorkspaceSize(                                 \
        const aclTensor *self, const aclTensor *other, aclTensor *out,      \
        uint64_t *workspaceSize, aclOpExecutor **executor)                  \
    {                                                                       \
        return op_plan(kind, self, other, NULL, out, workspaceSize,         \
                       executor, #name "GetWorkspaceSize");                 \
    }                                                                       \
    EW_LAUNCH(name)
#define EW_UNARY(name, kind)                                                \
    API aclnnStatus name##GetWorkspaceSize(                                 \
        const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,     \
        aclOpExecutor **executor)                                           \
    {                                                                       \
        return op_plan(kind, self, NULL, NULL, out, workspaceSize,          \
                       executor, #name "GetWorkspaceSize");                 \
    }                                                                       \
    EW_LAUNCH(name)

API aclnnStatus aclnnSubGetWorkspaceSize(const aclTensor *self,
                                         const aclTensor *other,
                                         const aclScalar *alpha,
                                         aclTensor *out, uint64_t *workspaceSize,
                                         aclOpExecutor **executor)
{
    return op_plan(OP_SUB, self, other, alpha, out, workspaceSize, executor,
                   "aclnnSubGetWorkspaceSize");
}
EW_LAUNCH(aclnnSub)

/* Div takes float operands only: the integer case (a true division to a
 * float output) is not computed here. */
EW_BINARY(aclnnDiv, OP_DIV)
EW_BINARY(aclnnMaximum, OP_MAX)
EW_BINARY(aclnnMinimum, OP_MIN)
EW_UNARY(aclnnNeg, OP_NEG)
EW_UNARY(aclnnAbs, OP_ABS)
EW_UNARY(aclnnExp, OP_EXP)
/* aclnnLog and aclnnSqrt: acl_standin_train.c's (the training kernels
 * use them too), which compute the same elementwise ln and sqrt. */
EW_UNARY(aclnnSigmoid, OP_SIGMOID)
EW_UNARY(aclnnTanh, OP_TANH)
EW_UNARY(aclnnSilu, OP_SILU)

/* GeluV2: approximate 0 (erf) or 1 (tanh); anything else is refused. */
API aclnnStatus aclnnGeluV2GetWorkspaceSize(const aclTensor *x,
                                            int64_t approximate, aclTensor *y,
                                            uint64_t *workspaceSize,
                                            aclOpExecutor **executor)
{
    aclnnStatus e;

    if (approximate != 0 && approximate != 1)
        return err(161002, "aclnnGeluV2GetWorkspaceSize: approximate %lld",
                   (long long)approximate);
    e = op_plan(OP_GELU, x, NULL, NULL, y, workspaceSize, executor,
                "aclnnGeluV2GetWorkspaceSize");
    if (!e) /* still planned, so no other thread holds it yet */
        (*executor)->approx = approximate;
    return e;
}
EW_LAUNCH(aclnnGeluV2)

/* InplaceCopy: src's view into selfRef's, one dtype and shape (aclnn
 * would also cast and broadcast; keel sends neither). */
API aclnnStatus aclnnInplaceCopyGetWorkspaceSize(aclTensor *selfRef,
                                                 const aclTensor *src,
                                                 uint64_t *workspaceSize,
                                                 aclOpExecutor **executor)
{
    return op_plan(OP_COPY, src, NULL, NULL, selfRef, workspaceSize, executor,
                   "aclnnInplaceCopyGetWorkspaceSize");
}
EW_LAUNCH(aclnnInplaceCopy)

/* Phase 1 of the softmax pair: dim in [-ndim, ndim), for 0-d 0 or -1. */
static aclnnStatus sm_plan(enum op_kind kind, const aclTensor *self,
                           int64_t dim, aclTensor *out, uint64_t *ws,
                           aclOpExecutor **ex, const char *call)
{
    int64_t nd = self ? self->ndim : 0, lim = nd ? nd : 1;
    aclnnStatus e;

    if (self && (dim < -lim || dim >= lim))
        return err(161002, "%s: dim %lld for a tensor of rank %d", call,
                   (long long)dim, (int)nd);
    e = op_plan(kind, self, NULL, NULL, out, ws, ex, call);
    if (!e) /* still planned, so no other thread holds it yet */
        (*ex)->dim = nd ? (int)(dim < 0 ? dim + nd : dim) : 0;
    return e;
}

API aclnnStatus aclnnSoftmaxGetWorkspaceSize(const aclTensor *self,
                                             int64_t dim, aclTensor *out,
                                             uint64_t *workspaceSize,
                                             aclOpExecutor **executor)
{
    return sm_plan(OP_SOFTMAX, self, dim, out, workspaceSize, executor,
                   "aclnnSoftmaxGetWorkspaceSize");
}

API aclnnStatus aclnnSoftmax(void *workspace, uint64_t workspaceSize,
                             aclOpExecutor *executor, aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnSoftmax");
}

API aclnnStatus aclnnLogSoftmaxGetWorkspaceSize(const aclTensor *self,
                                                int64_t dim, aclTensor *out,
                                                uint64_t *workspaceSize,
                                                aclOpExecutor **executor)
{
    return sm_plan(OP_LOG_SOFTMAX, self, dim, out, workspaceSize, executor,
                   "aclnnLogSoftmaxGetWorkspaceSize");
}

API aclnnStatus aclnnLogSoftmax(void *workspace, uint64_t workspaceSize,
                                aclOpExecutor *executor, aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream,
                     "aclnnLogSoftmax");
}

API aclnnStatus aclnnMatmulGetWorkspaceSize(const aclTensor *self,
                                            const aclTensor *mat2,
                                            aclTensor *out, int8_t cubeMathType,
                                            uint64_t *workspaceSize,
                                            aclOpExecutor **executor)
{
    /* 0 KEEP_DTYPE .. 3 USE_HF32; the stand-in computes in double anyway */
    if (cubeMathType < 0 || cubeMathType > 3)
        return err(161002, "aclnnMatmulGetWorkspaceSize: cubeMathType %d",
                   (int)cubeMathType);
    return op_plan(OP_MATMUL, self, mat2, NULL, out, workspaceSize, executor,
                   "aclnnMatmulGetWorkspaceSize");
}

API aclnnStatus aclnnMatmul(void *workspace, uint64_t workspaceSize,
                            aclOpExecutor *executor, aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream, "aclnnMatmul");
}

API aclnnStatus aclnnCastGetWorkspaceSize(const aclTensor *self,
                                          const aclDataType dtype,
                                          aclTensor *out,
                                          uint64_t *workspaceSize,
                                          aclOpExecutor **executor)
{
    if (self && out && dtype != out->dt)
        return err(161002, "aclnnCastGetWorkspaceSize: dtype %d, out %d",
                   (int)dtype, (int)out->dt);
    return op_plan(OP_CAST, self, NULL, NULL, out, workspaceSize, executor,
                   "aclnnCastGetWorkspaceSize");
}

API aclnnStatus aclnnCast(void *workspace, uint64_t workspaceSize,
                          aclOpExecutor *executor, aclrtStream stream)
{
    return op_launch(workspace, workspaceSize, executor, stream, "aclnnCast");
}

API int acl_standin_device_sets(int dev)
{
    int n;

    pthread_mutex_lock(&g.mu);
    n = dev >= 0 && dev < MAX_DEV ? g.refs[dev] : 0;
    pthread_mutex_unlock(&g.mu);
    return n;
}

API int acl_standin_device_of(const void *p)
{
    int dev = -1;

    return is_device(p, 1, &dev) ? dev : -1;
}

/* ---- HCCL ----------------------------------------------------------------------
 *
 * The collective entry points of libhccl.so (plugins/npu/hccl_api.h), for
 * ranks in this process on the stand-in's devices. HcclGetRootInfo makes
 * a 4,108-byte root info whose every byte is a function of a serial
 * number, and HcclCommInitRootInfo refuses one that does not check out
 * (an id cut to 128 bytes, say), then waits until all nRanks have joined
 * (HCCL_E_TIMEOUT after ACL_STANDIN_HCCL_TIMEOUT_S, default 60 s). A
 * communicator belongs to the device current when it was made, and every
 * call checks that this device is current, that the stream is one of its
 * streams (there is no NULL stream), that the buffers are its memory and
 * that the dtype is one hccl.h lists for that collective. The work runs
 * on the stream's thread: each rank posts its part and the last to arrive
 * computes everyone's result on the host. Sends wait until received.
 * ACL_STANDIN_FAULT=allreduce_wrong adds 1 to the first element of the
 * last rank's all_reduce result.
 */

#define ROOT_MAGIC 0x6b65656cu

enum ckind { K_ALL_REDUCE, K_BROADCAST, K_REDUCE, K_ALL_GATHER,
             K_REDUCE_SCATTER, K_ALL_TO_ALLV };

struct world;

struct scomm {
    struct world *w;
    int rank, device;
    struct scomm *next;
};

struct cpart {
    enum ckind kind;
    struct scomm *c;
    char *send, *recv;
    uint64_t count;
    HcclDataType dt;
    HcclReduceOp op;
    uint32_t root;
    uint64_t *v; /* all_to_allv: counts and displacements, 4 * n */
};

struct msg {
    int src, dst;
    char *buf;
    size_t bytes;
    bool done;
    struct msg *next;
};

struct world {
    uint32_t serial;
    int n, joined;
    bool taken[MAX_DEV * 4];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t gen;
    int arrived;
    struct cpart *part[MAX_DEV * 4];
    struct msg *mail;
    int refs;
    struct world *next;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t joined; /* with mu: a rank joined a world */
    uint32_t serial;
    struct world *worlds;
    struct scomm *comms;
} hc = {.mu = PTHREAD_MUTEX_INITIALIZER, .joined = PTHREAD_COND_INITIALIZER};

static uint8_t root_byte(uint32_t serial, size_t i)
{
    return (uint8_t)((serial * 131u + (uint32_t)i * 7u + (uint32_t)(i >> 8)) &
                     0xff);
}

API const char *HcclGetErrorString(HcclResult code)
{
    switch (code) {
#define HC_NAME(name, value) case name: return "stand-in: " #name;
    NPU_HCCL_RESULTS(HC_NAME)
#undef HC_NAME
    default: return "stand-in: unknown HCCL result";
    }
}

static HcclResult hfail(HcclResult r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static HcclResult hfail(HcclResult r, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(errmsg, sizeof(errmsg), fmt, ap);
    va_end(ap);
    if (getenv("ACL_STANDIN_VERBOSE"))
        fprintf(stderr, "hccl stand-in: %s\n", errmsg);
    return r;
}

API HcclResult HcclGetRootInfo(HcclRootInfo *rootInfo)
{
    uint32_t serial;
    int dev = here("HcclGetRootInfo");

    if (dev < 0)
        return hfail(HCCL_E_RUNTIME, "HcclGetRootInfo: %s", errmsg);
    if (!rootInfo)
        return hfail(HCCL_E_PTR, "HcclGetRootInfo: rootInfo is NULL");
    pthread_mutex_lock(&hc.mu);
    serial = ++hc.serial;
    pthread_mutex_unlock(&hc.mu);
    memcpy(rootInfo->internal, &(uint32_t){ROOT_MAGIC}, 4);
    memcpy(rootInfo->internal + 4, &serial, 4);
    for (size_t i = 8; i < HCCL_ROOT_INFO_BYTES; i++)
        rootInfo->internal[i] = (char)root_byte(serial, i);
    return HCCL_SUCCESS;
}

static int hc_timeout_s(void)
{
    const char *t = getenv("ACL_STANDIN_HCCL_TIMEOUT_S");
    int v = t ? atoi(t) : 0;

    return v > 0 ? v : 60;
}

API HcclResult HcclCommInitRootInfo(uint32_t nRanks,
                                    const HcclRootInfo *rootInfo,
                                    uint32_t rank, HcclComm *comm)
{
    uint32_t magic, serial;
    struct world *w;
    struct scomm *c;
    struct timespec until;
    int dev = here("HcclCommInitRootInfo");
    HcclResult r = HCCL_SUCCESS;

    if (dev < 0)
        return hfail(HCCL_E_RUNTIME, "HcclCommInitRootInfo: %s", errmsg);
    if (!rootInfo || !comm)
        return hfail(HCCL_E_PTR, "HcclCommInitRootInfo: NULL argument");
    if (nRanks < 1 || nRanks > MAX_DEV * 4 || rank >= nRanks)
        return hfail(HCCL_E_PARA, "HcclCommInitRootInfo: rank %u of %u",
                     rank, nRanks);
    memcpy(&magic, rootInfo->internal, 4);
    memcpy(&serial, rootInfo->internal + 4, 4);
    if (magic != ROOT_MAGIC)
        return hfail(HCCL_E_PARA, "HcclCommInitRootInfo: not a root info");
    for (size_t i = 8; i < HCCL_ROOT_INFO_BYTES; i++)
        if ((uint8_t)rootInfo->internal[i] != root_byte(serial, i))
            return hfail(HCCL_E_PARA,
                         "HcclCommInitRootInfo: root info damaged at byte %zu "
                         "of %d", i, HCCL_ROOT_INFO_BYTES);
    c = calloc(1, sizeof(*c));
    if (!c)
        return hfail(HCCL_E_MEMORY, "HcclCommInitRootInfo: no memory");
    pthread_mutex_lock(&hc.mu);
    for (w = hc.worlds; w && w->serial != serial; w = w->next)
        ;
    if (!w && (w = calloc(1, sizeof(*w))) != NULL) {
        w->serial = serial;
        w->n = (int)nRanks;
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, NULL);
        w->next = hc.worlds;
        hc.worlds = w;
    }
    if (!w)
        r = hfail(HCCL_E_MEMORY, "HcclCommInitRootInfo: no memory");
    else if (w->n != (int)nRanks || w->taken[rank] || w->joined == w->n)
        r = hfail(HCCL_E_PARA,
                  "HcclCommInitRootInfo: rank %u of %u does not fit the "
                  "communicator (%d ranks, rank taken: %d)",
                  rank, nRanks, w->n, (int)w->taken[rank]);
    else {
        w->taken[rank] = true;
        w->joined++;
        w->refs++;
        c->w = w;
        c->rank = (int)rank;
        c->device = dev;
        c->next = hc.comms;
        hc.comms = c;
    }
    pthread_mutex_unlock(&hc.mu);
    if (r != HCCL_SUCCESS) {
        free(c);
        return r;
    }
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += hc_timeout_s();
    pthread_mutex_lock(&hc.mu);
    pthread_cond_broadcast(&hc.joined);
    while (w->joined < w->n && r == HCCL_SUCCESS)
        if (pthread_cond_timedwait(&hc.joined, &hc.mu, &until) == ETIMEDOUT)
            r = hfail(HCCL_E_TIMEOUT,
                      "HcclCommInitRootInfo: %d of %d ranks joined",
                      w->joined, w->n);
    pthread_mutex_unlock(&hc.mu);
    *comm = c;
    return r;
}

/* A live communicator made on the current device. */
static HcclResult comm_here(HcclComm comm, const char *call,
                            struct scomm **out)
{
    struct scomm *c;
    int dev = here(call);

    if (dev < 0)
        return hfail(HCCL_E_RUNTIME, "%s: %s", call, errmsg);
    pthread_mutex_lock(&hc.mu);
    for (c = hc.comms; c && c != comm; c = c->next)
        ;
    pthread_mutex_unlock(&hc.mu);
    if (!c)
        return hfail(HCCL_E_PARA, "%s: %p is not a live communicator", call,
                     comm);
    if (c->device != dev)
        return hfail(HCCL_E_PARA,
                     "%s: communicator of device %d used with device %d "
                     "current", call, c->device, dev);
    *out = c;
    return HCCL_SUCCESS;
}

API HcclResult HcclCommDestroy(HcclComm comm)
{
    struct scomm **pp, *c = NULL;
    struct world *w = NULL;

    pthread_mutex_lock(&hc.mu);
    for (pp = &hc.comms; *pp; pp = &(*pp)->next)
        if (*pp == comm) {
            c = *pp;
            *pp = c->next;
            break;
        }
    if (c && --c->w->refs == 0) {
        struct world **wp;
        w = c->w;
        for (wp = &hc.worlds; *wp; wp = &(*wp)->next)
            if (*wp == w) {
                *wp = w->next;
                break;
            }
    }
    pthread_mutex_unlock(&hc.mu);
    if (!c)
        return hfail(HCCL_E_PARA, "HcclCommDestroy: %p is not a live "
                     "communicator", comm);
    if (w) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
    }
    free(c);
    return HCCL_SUCCESS;
}

static size_t hdt_size(HcclDataType dt)
{
    switch (dt) {
    case HCCL_DATA_TYPE_INT8: case HCCL_DATA_TYPE_UINT8: return 1;
    case HCCL_DATA_TYPE_INT16: case HCCL_DATA_TYPE_UINT16:
    case HCCL_DATA_TYPE_FP16: case HCCL_DATA_TYPE_BFP16: return 2;
    case HCCL_DATA_TYPE_INT32: case HCCL_DATA_TYPE_UINT32:
    case HCCL_DATA_TYPE_FP32: return 4;
    case HCCL_DATA_TYPE_INT64: case HCCL_DATA_TYPE_UINT64:
    case HCCL_DATA_TYPE_FP64: return 8;
    default: return 0;
    }
}

/* The dtypes hccl.h's comments list: reducing collectives take fewer. */
static bool hdt_ok(enum ckind k, HcclDataType dt)
{
    switch (k) {
    case K_ALL_REDUCE:
    case K_REDUCE:
        return dt == HCCL_DATA_TYPE_INT8 || dt == HCCL_DATA_TYPE_INT16 ||
               dt == HCCL_DATA_TYPE_INT32 || dt == HCCL_DATA_TYPE_FP16 ||
               dt == HCCL_DATA_TYPE_FP32 || dt == HCCL_DATA_TYPE_BFP16;
    case K_REDUCE_SCATTER:
        return dt == HCCL_DATA_TYPE_INT8 || dt == HCCL_DATA_TYPE_INT32 ||
               dt == HCCL_DATA_TYPE_FP16 || dt == HCCL_DATA_TYPE_FP32 ||
               dt == HCCL_DATA_TYPE_BFP16;
    default:
        return hdt_size(dt) != 0;
    }
}

static double hld(HcclDataType dt, const char *p)
{
    switch (dt) {
    case HCCL_DATA_TYPE_INT8: return *(const int8_t *)p;
    case HCCL_DATA_TYPE_INT32: { int32_t v; memcpy(&v, p, 4); return v; }
    case HCCL_DATA_TYPE_INT16: { int16_t v; memcpy(&v, p, 2); return v; }
    case HCCL_DATA_TYPE_FP32: { float v; memcpy(&v, p, 4); return v; }
    case HCCL_DATA_TYPE_FP16: { uint16_t h; memcpy(&h, p, 2);
                                return keel_kit_f16_to_f32(h); }
    case HCCL_DATA_TYPE_BFP16: { uint16_t h; memcpy(&h, p, 2);
                                 return keel_kit_bf16_to_f32(h); }
    default: return 0;
    }
}

static void hst(HcclDataType dt, char *p, double v)
{
    switch (dt) {
    case HCCL_DATA_TYPE_INT8: *(int8_t *)p = (int8_t)v; break;
    case HCCL_DATA_TYPE_INT32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case HCCL_DATA_TYPE_INT16: { int16_t x = (int16_t)v; memcpy(p, &x, 2); break; }
    case HCCL_DATA_TYPE_FP32: { float x = (float)v; memcpy(p, &x, 4); break; }
    case HCCL_DATA_TYPE_FP16: { uint16_t h = keel_kit_f32_to_f16((float)v);
                                memcpy(p, &h, 2); break; }
    case HCCL_DATA_TYPE_BFP16: { uint16_t h = keel_kit_f32_to_bf16((float)v);
                                 memcpy(p, &h, 2); break; }
    default: break;
    }
}

static double hred(HcclReduceOp op, double a, double b)
{
    switch (op) {
    case HCCL_REDUCE_PROD: return a * b;
    case HCCL_REDUCE_MAX: return a > b ? a : b;
    case HCCL_REDUCE_MIN: return a < b ? a : b;
    default: return a + b;
    }
}

/* Element j of the reduction over ranks of part[r]->send + off. */
static double reduced(struct world *w, size_t off, uint64_t j)
{
    HcclDataType dt = w->part[0]->dt;
    size_t es = hdt_size(dt);
    double acc = hld(dt, w->part[0]->send + off + j * es);

    for (int r = 1; r < w->n; r++)
        acc = hred(w->part[0]->op, acc, hld(dt, w->part[r]->send + off + j * es));
    return acc;
}

/* Called by the last rank to arrive: everyone's result, on the host. */
static void compute(struct world *w)
{
    struct cpart *p0 = w->part[0];
    size_t es = hdt_size(p0->dt);
    uint64_t cnt = p0->count;
    int n = w->n;

    for (int r = 1; r < n; r++)
        if (w->part[r]->kind != p0->kind || w->part[r]->count != cnt ||
            w->part[r]->dt != p0->dt || w->part[r]->op != p0->op ||
            w->part[r]->root != p0->root) {
            fprintf(stderr, "hccl stand-in: ranks 0 and %d issued different "
                    "collectives; nothing computed\n", r);
            return;
        }
    switch (p0->kind) {
    case K_ALL_REDUCE:
    case K_REDUCE: {
        double *tmp = malloc((cnt ? cnt : 1) * sizeof(double));
        if (!tmp)
            return;
        for (uint64_t j = 0; j < cnt; j++)
            tmp[j] = reduced(w, 0, j);
        for (int r = 0; r < n; r++) {
            if (p0->kind == K_REDUCE && (uint32_t)r != p0->root)
                continue;
            for (uint64_t j = 0; j < cnt; j++)
                hst(p0->dt, w->part[r]->recv + j * es, tmp[j]);
        }
        if (p0->kind == K_ALL_REDUCE && g.allreduce_wrong && cnt)
            hst(p0->dt, w->part[n - 1]->recv,
                hld(p0->dt, w->part[n - 1]->recv) + 1);
        free(tmp);
        break;
    }
    case K_BROADCAST:
        for (int r = 0; r < n; r++)
            if ((uint32_t)r != p0->root && cnt)
                memcpy(w->part[r]->recv, w->part[p0->root]->recv, cnt * es);
        break;
    case K_ALL_GATHER:
        for (int r = 0; r < n; r++)
            for (int q = 0; q < n && cnt; q++)
                memmove(w->part[r]->recv + (size_t)q * cnt * es,
                        w->part[q]->send, cnt * es);
        break;
    case K_REDUCE_SCATTER: {
        double *tmp = malloc(((size_t)n * cnt + 1) * sizeof(double));
        if (!tmp)
            return;
        for (int r = 0; r < n; r++)
            for (uint64_t j = 0; j < cnt; j++)
                tmp[(size_t)r * cnt + j] = reduced(w, (size_t)r * cnt * es, j);
        for (int r = 0; r < n; r++)
            for (uint64_t j = 0; j < cnt; j++)
                hst(p0->dt, w->part[r]->recv + j * es,
                    tmp[(size_t)r * cnt + j]);
        free(tmp);
        break;
    }
    case K_ALL_TO_ALLV: {
        /* stage every block first: send and recv may overlap */
        char **blk = calloc((size_t)n * n, sizeof(char *));
        if (!blk)
            return;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                uint64_t *vi = w->part[i]->v, *vj = w->part[j]->v;
                if (vi[j] != vj[2 * n + i])
                    fprintf(stderr, "hccl stand-in: AlltoAllV: rank %d sends "
                            "%llu to %d, which expects %llu\n", i,
                            (unsigned long long)vi[j], j,
                            (unsigned long long)vj[2 * n + i]);
                else if (vi[j] && (blk[i * n + j] = malloc(vi[j] * es)))
                    memcpy(blk[i * n + j], w->part[i]->send + vi[n + j] * es,
                           vi[j] * es);
            }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                uint64_t *vi = w->part[i]->v, *vj = w->part[j]->v;
                if (blk[i * n + j])
                    memcpy(w->part[j]->recv + vj[3 * n + i] * es,
                           blk[i * n + j], vi[j] * es);
                free(blk[i * n + j]);
            }
        free(blk);
        break;
    }
    }
}

/* On the stream's thread: post this rank's part, wait for the others. */
static void coll_task(void *arg)
{
    struct cpart *p = arg;
    struct world *w = p->c->w;
    uint64_t gen;

    pthread_mutex_lock(&w->mu);
    gen = w->gen;
    w->part[p->c->rank] = p;
    if (++w->arrived == w->n) {
        compute(w);
        w->arrived = 0;
        w->gen++;
        pthread_cond_broadcast(&w->cv);
    } else {
        while (w->gen == gen)
            pthread_cond_wait(&w->cv, &w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    free(p->v);
    free(p);
}

/* A buffer of `n` bytes on the communicator's device (n 0: anything). */
static HcclResult want_buf(const struct scomm *c, const void *p, size_t n,
                           const char *call, const char *which)
{
    int owner = -1;

    if (!n)
        return HCCL_SUCCESS;
    if (!is_device(p, n, &owner) || owner != c->device)
        return hfail(HCCL_E_PARA,
                     "%s: %s %p (+%zu) is not memory of device %d", call,
                     which, p, n, c->device);
    return HCCL_SUCCESS;
}

static HcclResult coll_post(enum ckind k, void *send, uint64_t nsend,
                            void *recv, uint64_t nrecv, uint64_t count,
                            HcclDataType dt, HcclReduceOp op, uint32_t root,
                            const uint64_t *v, HcclComm comm,
                            aclrtStream stream, const char *call)
{
    struct scomm *c = NULL;
    struct sstream *s;
    struct cpart *p;
    aclError e;
    HcclResult r;
    size_t es;

    if ((r = (HcclResult)injected(call)))
        return hfail(r, "%s: injected failure", call);
    if ((r = comm_here(comm, call, &c)))
        return r;
    if (!hdt_ok(k, dt))
        return hfail(HCCL_E_NOT_SUPPORT, "%s: data type %d not supported",
                     call, dt);
    if ((k == K_ALL_REDUCE || k == K_REDUCE || k == K_REDUCE_SCATTER) &&
        (op < HCCL_REDUCE_SUM || op > HCCL_REDUCE_MIN))
        return hfail(HCCL_E_PARA, "%s: reduce op %d", call, op);
    if ((k == K_BROADCAST || k == K_REDUCE) && root >= (uint32_t)c->w->n)
        return hfail(HCCL_E_PARA, "%s: root %u of %d", call, root, c->w->n);
    es = hdt_size(dt);
    if ((r = want_buf(c, send, nsend * es, call, "sendBuf")) ||
        (r = want_buf(c, recv, nrecv * es, call, "recvBuf")))
        return r;
    s = stream_of(stream, c->device, call, &e);
    if (!s)
        return hfail(HCCL_E_PARA, "%s: %s", call, errmsg);
    p = calloc(1, sizeof(*p));
    if (!p)
        return hfail(HCCL_E_MEMORY, "%s: no memory", call);
    *p = (struct cpart){.kind = k, .c = c, .send = send, .recv = recv,
                        .count = count, .dt = dt, .op = op, .root = root};
    if (v) {
        size_t nb = 4 * (size_t)c->w->n * sizeof(uint64_t);
        if (!(p->v = malloc(nb))) {
            free(p);
            return hfail(HCCL_E_MEMORY, "%s: no memory", call);
        }
        memcpy(p->v, v, nb);
    }
    if (enqueue(s, &(struct task){.kind = T_FN, .fn = coll_task, .user = p})) {
        free(p->v);
        free(p);
        return hfail(HCCL_E_MEMORY, "%s: no memory", call);
    }
    return HCCL_SUCCESS;
}

API HcclResult HcclAllReduce(void *sendBuf, void *recvBuf, uint64_t count,
                             HcclDataType dataType, HcclReduceOp op,
                             HcclComm comm, aclrtStream stream)
{
    return coll_post(K_ALL_REDUCE, sendBuf, count, recvBuf, count, count,
                     dataType, op, 0, NULL, comm, stream, "HcclAllReduce");
}

API HcclResult HcclBroadcast(void *buf, uint64_t count, HcclDataType dataType,
                             uint32_t root, HcclComm comm, aclrtStream stream)
{
    return coll_post(K_BROADCAST, NULL, 0, buf, count, count, dataType, 0,
                     root, NULL, comm, stream, "HcclBroadcast");
}

API HcclResult HcclReduce(void *sendBuf, void *recvBuf, uint64_t count,
                          HcclDataType dataType, HcclReduceOp op,
                          uint32_t root, HcclComm comm, aclrtStream stream)
{
    struct scomm *c = NULL;
    HcclResult r = comm_here(comm, "HcclReduce", &c);

    if (r)
        return r;
    return coll_post(K_REDUCE, sendBuf, count, recvBuf,
                     (uint32_t)c->rank == root ? count : 0, count, dataType,
                     op, root, NULL, comm, stream, "HcclReduce");
}

API HcclResult HcclAllGather(void *sendBuf, void *recvBuf, uint64_t sendCount,
                             HcclDataType dataType, HcclComm comm,
                             aclrtStream stream)
{
    struct scomm *c = NULL;
    HcclResult r = comm_here(comm, "HcclAllGather", &c);

    if (r)
        return r;
    return coll_post(K_ALL_GATHER, sendBuf, sendCount, recvBuf,
                     sendCount * (uint64_t)c->w->n, sendCount, dataType, 0, 0,
                     NULL, comm, stream, "HcclAllGather");
}

API HcclResult HcclReduceScatter(void *sendBuf, void *recvBuf,
                                 uint64_t recvCount, HcclDataType dataType,
                                 HcclReduceOp op, HcclComm comm,
                                 aclrtStream stream)
{
    struct scomm *c = NULL;
    HcclResult r = comm_here(comm, "HcclReduceScatter", &c);

    if (r)
        return r;
    return coll_post(K_REDUCE_SCATTER, sendBuf, recvCount * (uint64_t)c->w->n,
                     recvBuf, recvCount, recvCount, dataType, op, 0, NULL,
                     comm, stream, "HcclReduceScatter");
}

API HcclResult HcclAlltoAllV(const void *sendBuf, const void *sendCounts,
                             const void *sdispls, HcclDataType sendType,
                             const void *recvBuf, const void *recvCounts,
                             const void *rdispls, HcclDataType recvType,
                             HcclComm comm, aclrtStream stream)
{
    struct scomm *c = NULL;
    HcclResult r = comm_here(comm, "HcclAlltoAllV", &c);
    uint64_t *v, send_end = 0, recv_end = 0;
    int n;

    if (r)
        return r;
    if (!sendCounts || !sdispls || !recvCounts || !rdispls)
        return hfail(HCCL_E_PTR, "HcclAlltoAllV: NULL count array");
    if (sendType != recvType)
        return hfail(HCCL_E_PARA, "HcclAlltoAllV: send and receive types "
                     "differ");
    n = c->w->n;
    v = malloc(4 * (size_t)n * sizeof(uint64_t));
    if (!v)
        return hfail(HCCL_E_MEMORY, "HcclAlltoAllV: no memory");
    memcpy(v, sendCounts, (size_t)n * 8);
    memcpy(v + n, sdispls, (size_t)n * 8);
    memcpy(v + 2 * n, recvCounts, (size_t)n * 8);
    memcpy(v + 3 * n, rdispls, (size_t)n * 8);
    for (int i = 0; i < n; i++) {
        if (v[i] && v[n + i] + v[i] > send_end)
            send_end = v[n + i] + v[i];
        if (v[2 * n + i] && v[3 * n + i] + v[2 * n + i] > recv_end)
            recv_end = v[3 * n + i] + v[2 * n + i];
    }
    r = coll_post(K_ALL_TO_ALLV, (void *)(uintptr_t)sendBuf, send_end,
                  (void *)(uintptr_t)recvBuf, recv_end, 0, sendType, 0, 0, v,
                  comm, stream, "HcclAlltoAllV");
    free(v);
    return r;
}

/* ---- point to point -------------------------------------------------------- */

struct p2p_batch {
    struct scomm *c;
    uint32_t n;
    HcclSendRecvItem items[];
};

/* On the stream's thread: post the sends, take the receives (in order,
 * from the oldest matching send), then wait until the sends were taken. */
static void p2p_task(void *arg)
{
    struct p2p_batch *b = arg;
    struct world *w = b->c->w;
    struct msg **mine = calloc(b->n ? b->n : 1, sizeof(*mine));
    int me = b->c->rank;

    pthread_mutex_lock(&w->mu);
    for (uint32_t i = 0; i < b->n && mine; i++) {
        HcclSendRecvItem *it = &b->items[i];
        struct msg *m, **pp;
        if (it->sendRecvType != HCCL_SEND || !(m = calloc(1, sizeof(*m))))
            continue;
        *m = (struct msg){.src = me, .dst = (int)it->remoteRank,
                          .buf = it->buf,
                          .bytes = it->count * hdt_size(it->dataType)};
        for (pp = &w->mail; *pp; pp = &(*pp)->next)
            ;
        *pp = m;
        mine[i] = m;
    }
    pthread_cond_broadcast(&w->cv);
    for (uint32_t i = 0; i < b->n; i++) {
        HcclSendRecvItem *it = &b->items[i];
        struct msg *m = NULL;
        if (it->sendRecvType != HCCL_RECV)
            continue;
        for (;;) {
            for (m = w->mail; m; m = m->next)
                if (!m->done && m->src == (int)it->remoteRank && m->dst == me)
                    break;
            if (m)
                break;
            pthread_cond_wait(&w->cv, &w->mu);
        }
        memcpy(it->buf, m->buf,
               m->bytes < it->count * hdt_size(it->dataType)
                   ? m->bytes
                   : it->count * hdt_size(it->dataType));
        m->done = true;
        pthread_cond_broadcast(&w->cv);
    }
    for (uint32_t i = 0; i < b->n && mine; i++) {
        struct msg **pp;
        if (!mine[i])
            continue;
        while (!mine[i]->done)
            pthread_cond_wait(&w->cv, &w->mu);
        for (pp = &w->mail; *pp != mine[i]; pp = &(*pp)->next)
            ;
        *pp = mine[i]->next;
        free(mine[i]);
    }
    pthread_mutex_unlock(&w->mu);
    free(mine);
    free(b);
}

API HcclResult HcclBatchSendRecv(HcclSendRecvItem *sendRecvInfo,
                                 uint32_t itemNum, HcclComm comm,
                                 aclrtStream stream)
{
    struct scomm *c = NULL;
    struct p2p_batch *b;
    struct sstream *s;
    aclError e;
    HcclResult r;

    if ((r = comm_here(comm, "HcclBatchSendRecv", &c)))
        return r;
    if (!sendRecvInfo && itemNum)
        return hfail(HCCL_E_PTR, "HcclBatchSendRecv: NULL items");
    for (uint32_t i = 0; i < itemNum; i++) {
        HcclSendRecvItem *it = &sendRecvInfo[i];
        if ((it->sendRecvType != HCCL_SEND && it->sendRecvType != HCCL_RECV) ||
            !hdt_size(it->dataType) || it->remoteRank >= (uint32_t)c->w->n ||
            it->remoteRank == (uint32_t)c->rank)
            return hfail(HCCL_E_PARA, "HcclBatchSendRecv: item %u is invalid",
                         i);
        if ((r = want_buf(c, it->buf, it->count * hdt_size(it->dataType),
                          "HcclBatchSendRecv", "buf")))
            return r;
    }
    s = stream_of(stream, c->device, "HcclBatchSendRecv", &e);
    if (!s)
        return hfail(HCCL_E_PARA, "HcclBatchSendRecv: %s", errmsg);
    b = malloc(sizeof(*b) + (size_t)itemNum * sizeof(HcclSendRecvItem));
    if (!b)
        return hfail(HCCL_E_MEMORY, "HcclBatchSendRecv: no memory");
    b->c = c;
    b->n = itemNum;
    if (itemNum)
        memcpy(b->items, sendRecvInfo, (size_t)itemNum * sizeof(*b->items));
    if (enqueue(s, &(struct task){.kind = T_FN, .fn = p2p_task, .user = b})) {
        free(b);
        return hfail(HCCL_E_MEMORY, "HcclBatchSendRecv: no memory");
    }
    return HCCL_SUCCESS;
}

API HcclResult HcclSend(void *sendBuf, uint64_t count, HcclDataType dataType,
                        uint32_t destRank, HcclComm comm, aclrtStream stream)
{
    HcclSendRecvItem it = {HCCL_SEND, sendBuf, count, dataType, destRank};

    return HcclBatchSendRecv(&it, 1, comm, stream);
}

API HcclResult HcclRecv(void *recvBuf, uint64_t count, HcclDataType dataType,
                        uint32_t srcRank, HcclComm comm, aclrtStream stream)
{
    HcclSendRecvItem it = {HCCL_RECV, recvBuf, count, dataType, srcRank};

    return HcclBatchSendRecv(&it, 1, comm, stream);
}

__attribute__((destructor)) static void standin_unload(void)
{
    pthread_mutex_lock(&g.mu);
    while (planned) {
        struct aclOpExecutor *e = planned;
        planned = e->next;
        if (e->drop)
            e->drop(e->priv);
        free(e);
    }
    while (g.reports) {
        struct report *r = g.reports;
        g.reports = r->next;
        free(r);
    }
    pthread_mutex_unlock(&g.mu);
}
