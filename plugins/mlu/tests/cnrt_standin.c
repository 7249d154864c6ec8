/*
 * Stand-in for Cambricon's libcnrt.so, for the mlu plugin's tests only:
 * the CNRT functions of plugins/mlu/cnrt_api.h with the same C signatures,
 * on the host. Never installed; nothing here has been compared with a real
 * CNRT beyond the declarations.
 *
 *   devices    CNRT_STANDIN_DEVICES (default 2), each with
 *              CNRT_STANDIN_MEM_MB MiB (default 256) of "device memory"
 *              (64-byte aligned host memory counted against the limit).
 *   current    cnrtSetDevice sets the calling thread's device; there is NO
 *              default device, so a call that needs one before any
 *              cnrtSetDevice fails with cnrtErrorNoCnrtContext. Copies,
 *              memsets and queue/notifier use check that the memory and
 *              handles belong to the current device.
 *   copies     the direction must match the addresses: HostToDev writes a
 *              live block and reads memory that is not one, DevToHost the
 *              reverse, DevToDev both blocks; anything else is
 *              cnrtErrorMemcpyDirectionInvalid.
 *   queues     a worker thread per queue runs its work in order (host
 *              functions from cnrtInvokeHostFunc too, on that thread); a
 *              queue with unfinished work cannot be destroyed.
 *   notifiers  a placed notifier completes when its queue reaches it (with
 *              a timestamp); cnrtQueueWaitNotifier holds the queue until
 *              the notifier's latest placement has completed.
 *   errors     cnrtGetErrorStr(code) gives the text of the calling thread's
 *              last failure when it had that code (a stand-in liberty: it
 *              is how the tests see what failed), else a generic text.
 *
 * For the tests: CNRT_STANDIN_FAIL=name:code[:n] fails the n-th call
 * (default 1st) of `name` with `code` once; cnrt_standin_fail_next(name,
 * code) arms the same from a test. CNRT_STANDIN_FAULT plants a bug the
 * conformance suite must catch: corrupt_d2h (a byte of every device-to-host
 * copy flipped), skip_wait (cnrtQueueWaitNotifier waits for nothing),
 * add_wrong (cnnlOpTensor ADD is one too large in its first element),
 * sub_wrong (the same for an ADD with alpha2 -1, which subtract is).
 * CNRT_STANDIN_JOB_DELAY_US makes every queued job take that long.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "standin.h"

#define SI_MAX_DEV 16

/* The exports are declared from the plugin's own list: a signature that
 * drifts from cnrt_api.h stops compiling here. */
#define SI_PROTO(ret, name, params) SI_API ret name params;
MLU_CNRT_FUNCS(SI_PROTO, SI_PROTO)
#undef SI_PROTO
SI_API void cnrt_standin_fail_next(const char *name, int code);

/* ---- state ----------------------------------------------------------------- */

struct block {
    char *p;
    size_t n;
    int dev;
    bool pinned;
    struct block *next;
};

struct cnrtNotifier {
    int dev;
    uint64_t placed, reached; /* placements made / completed */
    double when_ms;
};

struct job {
    void (*fn)(void *arg);
    void *arg;
    struct job *next;
};

struct cnrtQueue {
    int dev;
    pthread_t worker;
    struct job *first, *last;
    uint64_t queued, finished;
    bool closing;
    struct cnrtQueue *next;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t changed; /* any queue or notifier progressed */
    pthread_once_t once;
    int ndev;
    uint64_t cap;
    uint64_t used[SI_MAX_DEV];
    struct block *blocks;
    struct cnrtQueue *queues;
    char fail_name[64];
    int fail_code, fail_nth;
    char fault[32];
    long delay_us; /* CNRT_STANDIN_JOB_DELAY_US: what each job takes */
} S = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .changed = PTHREAD_COND_INITIALIZER,
    .once = PTHREAD_ONCE_INIT,
};

static _Thread_local int cur_dev = -1;
static _Thread_local cnrtRet_t last_code;
static _Thread_local char last_text[256];

static void setup(void)
{
    const char *n = getenv("CNRT_STANDIN_DEVICES");
    const char *mb = getenv("CNRT_STANDIN_MEM_MB");
    const char *f = getenv("CNRT_STANDIN_FAIL");
    const char *fault = getenv("CNRT_STANDIN_FAULT");

    S.ndev = n ? atoi(n) : 2;
    if (S.ndev < 0 || S.ndev > SI_MAX_DEV)
        S.ndev = 2;
    S.cap = (uint64_t)(mb && atoi(mb) > 0 ? atoi(mb) : 256) << 20;
    if (f && sscanf(f, "%63[^:]:%d:%d", S.fail_name, &S.fail_code,
                    &S.fail_nth) < 3)
        S.fail_nth = 1;
    if (!f)
        S.fail_name[0] = '\0';
    snprintf(S.fault, sizeof(S.fault), "%s", fault ? fault : "");
    S.delay_us = getenv("CNRT_STANDIN_JOB_DELAY_US")
                     ? atol(getenv("CNRT_STANDIN_JOB_DELAY_US"))
                     : 0;
}

static void ready(void)
{
    pthread_once(&S.once, setup);
}

/* Remember a failure for cnrtGetErrorStr / cnrtGetLastError; returns it. */
static cnrtRet_t fail(cnrtRet_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static cnrtRet_t fail(cnrtRet_t code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(last_text, sizeof(last_text), fmt, ap);
    va_end(ap);
    last_code = code;
    return code;
}

SI_API void cnrt_standin_fail_next(const char *name, int code)
{
    ready();
    pthread_mutex_lock(&S.mu);
    snprintf(S.fail_name, sizeof(S.fail_name), "%s", name ? name : "");
    S.fail_code = code;
    S.fail_nth = 1;
    pthread_mutex_unlock(&S.mu);
}

int si_injected(const char *name)
{
    int code = 0;

    ready();
    pthread_mutex_lock(&S.mu);
    if (S.fail_nth > 0 && !strcmp(S.fail_name, name) && --S.fail_nth == 0) {
        code = S.fail_code;
        S.fail_name[0] = '\0';
    }
    pthread_mutex_unlock(&S.mu);
    if (code)
        fail(code, "stand-in: injected failure of %s", name);
    return code;
}

bool si_fault(const char *name)
{
    ready();
    return !strcmp(S.fault, name);
}

#define SI_ARMED(name)                  \
    do {                                \
        int si_code_ = si_injected(name); \
        if (si_code_)                   \
            return si_code_;            \
    } while (0)

int si_current(void)
{
    return cur_dev;
}

/* The current device, or -1 with the failure recorded. */
static int need_device(const char *call)
{
    ready();
    if (cur_dev < 0)
        fail(cnrtErrorNoCnrtContext, "%s: no current device (cnrtSetDevice "
             "was never called on this thread)", call);
    return cur_dev;
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ---- errors and devices ------------------------------------------------------ */

SI_API const char *cnrtGetErrorStr(cnrtRet_t err)
{
    if (err == last_code && last_text[0])
        return last_text;
    return err == cnrtSuccess ? "no error" : "stand-in CNRT error";
}

SI_API cnrtRet_t cnrtGetLastError(void)
{
    cnrtRet_t r = last_code;

    last_code = cnrtSuccess;
    return r;
}

SI_API cnrtRet_t cnrtGetLastErr(void)
{
    return cnrtGetLastError();
}

SI_API cnrtRet_t cnrtGetDeviceCount(unsigned int *pCount)
{
    ready();
    SI_ARMED("cnrtGetDeviceCount");
    if (!pCount)
        return fail(cnrtErrorArgsInvalid, "cnrtGetDeviceCount: NULL");
    *pCount = (unsigned)S.ndev;
    return S.ndev ? cnrtSuccess
                  : fail(cnrtErrorNoDevice, "stand-in: no MLU device");
}

SI_API cnrtRet_t cnrtSetDevice(int ordinal)
{
    ready();
    SI_ARMED("cnrtSetDevice");
    if (ordinal < 0 || ordinal >= S.ndev)
        return fail(cnrtErrorDeviceInvalid, "cnrtSetDevice(%d): %d devices",
                    ordinal, S.ndev);
    cur_dev = ordinal;
    return cnrtSuccess;
}

SI_API cnrtRet_t cnrtGetDevice(int *pOrdinal)
{
    if (!pOrdinal)
        return fail(cnrtErrorArgsInvalid, "cnrtGetDevice: NULL");
    if (need_device("cnrtGetDevice") < 0)
        return last_code;
    *pOrdinal = cur_dev;
    return cnrtSuccess;
}

SI_API cnrtRet_t cnrtDeviceGetAttribute(int *pValue, cnrtDeviceAttr_t attr,
                                        int device)
{
    ready();
    if (!pValue || device < 0 || device >= S.ndev)
        return fail(cnrtErrorArgsInvalid, "cnrtDeviceGetAttribute");
    switch (attr) {
    case cnrtAttrClusterCount: *pValue = 8; break;
    case cnrtAttrMcorePerCluster: *pValue = 4; break;
    case cnrtAttrIpuClockRate: *pValue = 1000000; break;
    case cnrtAttrTotalMemSize: *pValue = (int)(S.cap >> 20); break;
    default: return fail(cnrtErrorNoAttribute, "attribute %#x", (int)attr);
    }
    return cnrtSuccess;
}

/* ---- memory -------------------------------------------------------------------- */

/* The live block containing [p, p + n), under S.mu. */
static struct block *block_at(const void *p, size_t n)
{
    const char *c = p;

    for (struct block *b = S.blocks; b; b = b->next)
        if (c >= b->p && c < b->p + b->n && n <= (size_t)(b->p + b->n - c))
            return b;
    return NULL;
}

bool si_device_mem(const void *p, size_t n, int dev)
{
    struct block *b;
    bool ok;

    pthread_mutex_lock(&S.mu);
    b = block_at(p, n ? n : 1);
    ok = b && !b->pinned && b->dev == dev;
    pthread_mutex_unlock(&S.mu);
    return ok;
}

static cnrtRet_t get_block(void **out, size_t n, bool pinned, const char *call)
{
    int dev = need_device(call);
    struct block *b;

    if (dev < 0)
        return last_code;
    if (!out || !n)
        return fail(cnrtErrorArgsInvalid, "%s: NULL or 0 bytes", call);
    pthread_mutex_lock(&S.mu);
    if (!pinned && S.used[dev] + n > S.cap) {
        pthread_mutex_unlock(&S.mu);
        return fail(cnrtErrorNoMem, "%s(%zu): device %d is full", call, n, dev);
    }
    b = calloc(1, sizeof(*b));
    if (b)
        b->p = aligned_alloc(64, (n + 63) & ~(size_t)63);
    if (!b || !b->p) {
        pthread_mutex_unlock(&S.mu);
        free(b);
        return fail(cnrtErrorSysNoMem, "%s: no host memory", call);
    }
    b->n = n;
    b->dev = dev;
    b->pinned = pinned;
    b->next = S.blocks;
    S.blocks = b;
    if (!pinned)
        S.used[dev] += n;
    pthread_mutex_unlock(&S.mu);
    *out = b->p;
    return cnrtSuccess;
}

static cnrtRet_t put_block(void *p, bool pinned, const char *call)
{
    struct block **l, *b = NULL;

    ready();
    pthread_mutex_lock(&S.mu);
    for (l = &S.blocks; *l; l = &(*l)->next)
        if ((*l)->p == p && (*l)->pinned == pinned) {
            b = *l;
            *l = b->next;
            break;
        }
    if (b && !pinned)
        S.used[b->dev] -= b->n;
    pthread_mutex_unlock(&S.mu);
    if (!b)
        return fail(cnrtErrorArgsInvalid, "%s(%p): not a live block", call, p);
    free(b->p);
    free(b);
    return cnrtSuccess;
}

/* cnrtMalloc, cnrtHostMalloc, cnrtFree, cnrtFreeHost: one shape each. */
#define SI_GET(fn, pinned)                                   \
    SI_API cnrtRet_t fn(void **pPtr, size_t bytes)           \
    {                                                        \
        SI_ARMED(#fn);                                       \
        return get_block(pPtr, bytes, pinned, #fn);          \
    }
#define SI_PUT(fn, pinned)                                   \
    SI_API cnrtRet_t fn(void *ptr)                           \
    {                                                        \
        SI_ARMED(#fn);                                       \
        return put_block(ptr, pinned, #fn);                  \
    }
SI_GET(cnrtMalloc, false)
SI_GET(cnrtHostMalloc, true)
SI_PUT(cnrtFree, false)
SI_PUT(cnrtFreeHost, true)

SI_API cnrtRet_t cnrtMemGetInfo(size_t *free_b, size_t *total)
{
    int dev = need_device("cnrtMemGetInfo");

    if (dev < 0)
        return last_code;
    if (!free_b || !total)
        return fail(cnrtErrorArgsInvalid, "cnrtMemGetInfo: NULL");
    pthread_mutex_lock(&S.mu);
    *total = (size_t)S.cap;
    *free_b = (size_t)(S.cap - S.used[dev]);
    pthread_mutex_unlock(&S.mu);
    return cnrtSuccess;
}

/* Where an address range is: a block of the current device (1), host
 * memory that is no device block (0), or something refused (-1). */
static int side(const void *p, size_t n, int dev)
{
    struct block *b;
    int r;

    pthread_mutex_lock(&S.mu);
    b = block_at(p, n);
    r = (!b || b->pinned) ? 0 : b->dev == dev ? 1 : -1;
    if (!b) {
        /* a range that starts outside but runs into a block is refused */
        for (struct block *x = S.blocks; x; x = x->next)
            if (!x->pinned && (const char *)p < x->p + x->n &&
                x->p < (const char *)p + n)
                r = -1;
    }
    pthread_mutex_unlock(&S.mu);
    return r;
}

static cnrtRet_t copy_check(void *dst, const void *src, size_t n,
                            cnrtMemTransDir_t dir, const char *call)
{
    int dev = need_device(call), want_dst, want_src;

    if (dev < 0)
        return last_code;
    if (!dst || !src || !n)
        return fail(cnrtErrorArgsInvalid, "%s: NULL or 0 bytes", call);
    switch (dir) {
    case cnrtMemcpyHostToDev: want_dst = 1; want_src = 0; break;
    case cnrtMemcpyDevToHost: want_dst = 0; want_src = 1; break;
    case cnrtMemcpyDevToDev: want_dst = 1; want_src = 1; break;
    default:
        return fail(cnrtErrorMemcpyDirectionInvalid, "%s: direction %d is "
                    "not one the stand-in takes", call, (int)dir);
    }
    if (side(dst, n, dev) != want_dst || side(src, n, dev) != want_src)
        return fail(cnrtErrorMemcpyDirectionInvalid,
                    "%s: %p <- %p (%zu bytes) does not match direction %d on "
                    "device %d",
                    call, dst, src, n, (int)dir, dev);
    return cnrtSuccess;
}

static void do_copy(void *dst, const void *src, size_t n,
                    cnrtMemTransDir_t dir)
{
    memmove(dst, src, n);
    if (dir == cnrtMemcpyDevToHost && si_fault("corrupt_d2h"))
        ((unsigned char *)dst)[n / 2] ^= 0x5a;
}

/* ---- queues ---------------------------------------------------------------- */

static void *worker(void *arg)
{
    struct cnrtQueue *q = arg;

    pthread_mutex_lock(&S.mu);
    for (;;) {
        struct job *j;
        while (!q->first && !q->closing)
            pthread_cond_wait(&S.changed, &S.mu);
        if (!q->first)
            break;
        j = q->first;
        pthread_mutex_unlock(&S.mu);
        if (S.delay_us > 0) {
            struct timespec ts = {S.delay_us / 1000000,
                                  (S.delay_us % 1000000) * 1000};
            nanosleep(&ts, NULL);
        }
        j->fn(j->arg);
        free(j->arg);
        pthread_mutex_lock(&S.mu);
        q->first = j->next;
        if (!q->first)
            q->last = NULL;
        q->finished++;
        free(j);
        pthread_cond_broadcast(&S.changed);
    }
    pthread_mutex_unlock(&S.mu);
    return NULL;
}

int si_queue_device(cnrtQueue_t q)
{
    int dev = -1;

    pthread_mutex_lock(&S.mu);
    for (struct cnrtQueue *x = S.queues; x; x = x->next)
        if (x == q)
            dev = x->dev;
    pthread_mutex_unlock(&S.mu);
    return dev;
}

/* The queue, live and of the current device, or NULL with the failure. */
static struct cnrtQueue *usable(cnrtQueue_t q, const char *call)
{
    int dev = need_device(call), qd;

    if (dev < 0)
        return NULL;
    qd = si_queue_device(q);
    if (qd < 0) {
        fail(cnrtErrorInvalidResourceHandle, "%s: %p is not a live queue",
             call, (void *)q);
        return NULL;
    }
    if (qd != dev) {
        fail(cnrtErrorDevice, "%s: the queue is of device %d, the current "
             "device is %d", call, qd, dev);
        return NULL;
    }
    return q;
}

cnrtRet_t si_enqueue(cnrtQueue_t q, void (*fn)(void *arg), void *arg)
{
    struct job *j = calloc(1, sizeof(*j));

    if (!j) {
        free(arg);
        return fail(cnrtErrorSysNoMem, "no host memory for the job");
    }
    j->fn = fn;
    j->arg = arg;
    pthread_mutex_lock(&S.mu);
    if (q->last)
        q->last->next = j;
    else
        q->first = j;
    q->last = j;
    q->queued++;
    pthread_cond_broadcast(&S.changed);
    pthread_mutex_unlock(&S.mu);
    return cnrtSuccess;
}

SI_API cnrtRet_t cnrtQueueCreate(cnrtQueue_t *pQueue)
{
    struct cnrtQueue *q;
    int dev;

    SI_ARMED("cnrtQueueCreate");
    if ((dev = need_device("cnrtQueueCreate")) < 0)
        return last_code;
    if (!pQueue || !(q = calloc(1, sizeof(*q))))
        return fail(cnrtErrorArgsInvalid, "cnrtQueueCreate");
    q->dev = dev;
    if (pthread_create(&q->worker, NULL, worker, q)) {
        free(q);
        return fail(cnrtErrorSys, "cnrtQueueCreate: no thread");
    }
    pthread_mutex_lock(&S.mu);
    q->next = S.queues;
    S.queues = q;
    pthread_mutex_unlock(&S.mu);
    *pQueue = q;
    return cnrtSuccess;
}

SI_API cnrtRet_t cnrtQueueDestroy(cnrtQueue_t queue)
{
    struct cnrtQueue **l, *q = usable(queue, "cnrtQueueDestroy");

    if (!q)
        return last_code;
    pthread_mutex_lock(&S.mu);
    if (q->first) {
        pthread_mutex_unlock(&S.mu);
        return fail(cnrtErrorIllegalState, "cnrtQueueDestroy: the queue still "
                    "has work (sync it first)");
    }
    for (l = &S.queues; *l != q; l = &(*l)->next)
        ;
    *l = q->next;
    q->closing = true;
    pthread_cond_broadcast(&S.changed);
    pthread_mutex_unlock(&S.mu);
    pthread_join(q->worker, NULL);
    free(q);
    return cnrtSuccess;
}

SI_API cnrtRet_t cnrtQueueSync(cnrtQueue_t queue)
{
    struct cnrtQueue *q;

    SI_ARMED("cnrtQueueSync");
    if (!(q = usable(queue, "cnrtQueueSync")))
        return last_code;
    pthread_mutex_lock(&S.mu);
    while (q->first)
        pthread_cond_wait(&S.changed, &S.mu);
    pthread_mutex_unlock(&S.mu);
    return cnrtSuccess;
}

SI_API cnrtRet_t cnrtQueueQuery(cnrtQueue_t queue)
{
    struct cnrtQueue *q = usable(queue, "cnrtQueueQuery");
    bool busy;

    if (!q)
        return last_code;
    pthread_mutex_lock(&S.mu);
    busy = q->first != NULL;
    pthread_mutex_unlock(&S.mu);
    return busy ? cnrtErrorNotReady : cnrtSuccess;
}

SI_API cnrtRet_t cnrtSyncDevice(void)
{
    int dev = need_device("cnrtSyncDevice");
    bool busy = true;

    if (dev < 0)
        return last_code;
    SI_ARMED("cnrtSyncDevice");
    pthread_mutex_lock(&S.mu);
    while (busy) {
        busy = false;
        for (struct cnrtQueue *q = S.queues; q; q = q->next)
            busy |= q->dev == dev && q->first;
        if (busy)
            pthread_cond_wait(&S.changed, &S.mu);
    }
    pthread_mutex_unlock(&S.mu);
    return cnrtSuccess;
}

/* ---- host functions ---------------------------------------------------------- */

struct host_job {
    cnrtHostFn_t fn;
    void *user;
};

static void run_host(void *arg)
{
    struct host_job *h = arg;

    h->fn(h->user);
}

SI_API cnrtRet_t cnrtInvokeHostFunc(cnrtQueue_t queue, cnrtHostFn_t fn,
                                    void *userData)
{
    struct host_job *h;

    SI_ARMED("cnrtInvokeHostFunc");
    if (!usable(queue, "cnrtInvokeHostFunc"))
        return last_code;
    if (!fn)
        return fail(cnrtErrorArgsInvalid, "cnrtInvokeHostFunc: fn is NULL");
    if (!(h = malloc(sizeof(*h))))
        return fail(cnrtErrorSysNoMem, "cnrtInvokeHostFunc: no host memory");
    h->fn = fn;
    h->user = userData;
    return si_enqueue(queue, run_host, h);
}

/* ---- copies and memsets ------------------------------------------------------ */

struct copy_job {
    void *dst;
    const void *src;
    size_t n;
    int value; /* memset when src is NULL */
    cnrtMemTransDir_t dir;
};

static void run_copy(void *arg)
{
    struct copy_job *c = arg;

    if (c->src)
        do_copy(c->dst, c->src, c->n, c->dir);
    else
        memset(c->dst, c->value, c->n);
}

SI_API cnrtRet_t cnrtMemcpy(void *dst, void *src, size_t bytes,
                            cnrtMemTransDir_t dir)
{
    cnrtRet_t r;

    SI_ARMED("cnrtMemcpy");
    if ((r = copy_check(dst, src, bytes, dir, "cnrtMemcpy")))
        return r;
    do_copy(dst, src, bytes, dir);
    return cnrtSuccess;
}

SI_API cnrtRet_t cnrtMemcpyAsync(void *dst, void *src, size_t bytes,
                                 cnrtQueue_t queue, cnrtMemTransDir_t dir)
{
    struct copy_job *c;
    cnrtRet_t r;

    SI_ARMED("cnrtMemcpyAsync");
    if ((r = copy_check(dst, src, bytes, dir, "cnrtMemcpyAsync")))
        return r;
    if (!usable(queue, "cnrtMemcpyAsync"))
        return last_code;
    if (!(c = malloc(sizeof(*c))))
        return fail(cnrtErrorSysNoMem, "cnrtMemcpyAsync: no host memory");
    *c = (struct copy_job){dst, src, bytes, 0, dir};
    return si_enqueue(queue, run_copy, c);
}

static cnrtRet_t set_check(void *ptr, size_t bytes, const char *call)
{
    int dev = need_device(call);

    if (dev < 0)
        return last_code;
    if (!ptr || !bytes || !si_device_mem(ptr, bytes, dev))
        return fail(cnrtErrorArgsInvalid, "%s: %p (+%zu) is not memory of "
                    "device %d", call, ptr, bytes, dev);
    return cnrtSuccess;
}

SI_API cnrtRet_t cnrtMemset(void *ptr, int value, size_t bytes)
{
    cnrtRet_t r;

    SI_ARMED("cnrtMemset");
    if ((r = set_check(ptr, bytes, "cnrtMemset")))
        return r;
    memset(ptr, value, bytes);
    return cnrtSuccess;
}

SI_API cnrtRet_t cnrtMemsetAsync(void *ptr, int value, size_t bytes,
                                 cnrtQueue_t queue)
{
    struct copy_job *c;
    cnrtRet_t r;

    SI_ARMED("cnrtMemsetAsync");
    if ((r = set_check(ptr, bytes, "cnrtMemsetAsync")))
        return r;
    if (!usable(queue, "cnrtMemsetAsync"))
        return last_code;
    if (!(c = malloc(sizeof(*c))))
        return fail(cnrtErrorSysNoMem, "cnrtMemsetAsync: no host memory");
    *c = (struct copy_job){ptr, NULL, bytes, value, cnrtMemcpyNoDirection};
    return si_enqueue(queue, run_copy, c);
}

/* ---- notifiers ----------------------------------------------------------------- */

struct mark_job {
    struct cnrtNotifier *n;
    uint64_t which; /* PLACE: this placement; WAIT: wait until reached */
    bool wait;
};

static void run_mark(void *arg)
{
    struct mark_job *m = arg;

    pthread_mutex_lock(&S.mu);
    if (m->wait) {
        while (m->n->reached < m->which)
            pthread_cond_wait(&S.changed, &S.mu);
    } else {
        m->n->reached = m->which;
        m->n->when_ms = now_ms();
        pthread_cond_broadcast(&S.changed);
    }
    pthread_mutex_unlock(&S.mu);
}

SI_API cnrtRet_t cnrtNotifierCreate(cnrtNotifier_t *pNotifier)
{
    int dev = need_device("cnrtNotifierCreate");

    if (dev < 0)
        return last_code;
    SI_ARMED("cnrtNotifierCreate");
    if (!pNotifier || !(*pNotifier = calloc(1, sizeof(**pNotifier))))
        return fail(cnrtErrorArgsInvalid, "cnrtNotifierCreate");
    (*pNotifier)->dev = dev;
    return cnrtSuccess;
}

SI_API cnrtRet_t cnrtNotifierDestroy(cnrtNotifier_t notifier)
{
    bool pending;

    if (!notifier)
        return fail(cnrtErrorArgsInvalid, "cnrtNotifierDestroy(NULL)");
    pthread_mutex_lock(&S.mu);
    pending = notifier->reached < notifier->placed;
    pthread_mutex_unlock(&S.mu);
    if (pending)
        return fail(cnrtErrorIllegalState, "cnrtNotifierDestroy: a placement "
                    "has not completed");
    free(notifier);
    return cnrtSuccess;
}

SI_API cnrtRet_t cnrtPlaceNotifier(cnrtNotifier_t notifier, cnrtQueue_t queue)
{
    struct mark_job *m;

    SI_ARMED("cnrtPlaceNotifier");
    if (!usable(queue, "cnrtPlaceNotifier"))
        return last_code;
    if (!notifier || notifier->dev != queue->dev)
        return fail(cnrtErrorDevice, "cnrtPlaceNotifier: the notifier is not "
                    "of the queue's device");
    if (!(m = malloc(sizeof(*m))))
        return fail(cnrtErrorSysNoMem, "cnrtPlaceNotifier: no host memory");
    pthread_mutex_lock(&S.mu);
    m->which = ++notifier->placed;
    pthread_mutex_unlock(&S.mu);
    m->n = notifier;
    m->wait = false;
    return si_enqueue(queue, run_mark, m);
}

SI_API cnrtRet_t cnrtQueueWaitNotifier(cnrtNotifier_t notifier,
                                       cnrtQueue_t queue, unsigned int flag)
{
    struct mark_job *m;

    SI_ARMED("cnrtQueueWaitNotifier");
    if (flag != 0)
        return fail(cnrtErrorArgsInvalid, "cnrtQueueWaitNotifier: flag %u",
                    flag);
    if (!usable(queue, "cnrtQueueWaitNotifier"))
        return last_code;
    if (!notifier)
        return fail(cnrtErrorArgsInvalid, "cnrtQueueWaitNotifier: NULL");
    if (si_fault("skip_wait"))
        return cnrtSuccess;
    if (!(m = malloc(sizeof(*m))))
        return fail(cnrtErrorSysNoMem, "cnrtQueueWaitNotifier: no memory");
    pthread_mutex_lock(&S.mu);
    m->which = notifier->placed;
    pthread_mutex_unlock(&S.mu);
    m->n = notifier;
    m->wait = true;
    return si_enqueue(queue, run_mark, m);
}

SI_API cnrtRet_t cnrtWaitNotifier(cnrtNotifier_t notifier)
{
    SI_ARMED("cnrtWaitNotifier");
    if (!notifier)
        return fail(cnrtErrorArgsInvalid, "cnrtWaitNotifier(NULL)");
    pthread_mutex_lock(&S.mu);
    while (notifier->reached < notifier->placed)
        pthread_cond_wait(&S.changed, &S.mu);
    pthread_mutex_unlock(&S.mu);
    return cnrtSuccess;
}

SI_API cnrtRet_t cnrtQueryNotifier(cnrtNotifier_t notifier)
{
    bool done;

    SI_ARMED("cnrtQueryNotifier");
    if (!notifier)
        return fail(cnrtErrorArgsInvalid, "cnrtQueryNotifier(NULL)");
    pthread_mutex_lock(&S.mu);
    done = notifier->reached >= notifier->placed;
    pthread_mutex_unlock(&S.mu);
    return done ? cnrtSuccess : cnrtErrorNotReady;
}

SI_API cnrtRet_t cnrtNotifierElapsedTime(cnrtNotifier_t start,
                                         cnrtNotifier_t end, float *ms)
{
    cnrtRet_t r = cnrtSuccess;

    if (!start || !end || !ms)
        return fail(cnrtErrorArgsInvalid, "cnrtNotifierElapsedTime: NULL");
    pthread_mutex_lock(&S.mu);
    if (!start->reached || !end->reached ||
        start->reached < start->placed || end->reached < end->placed)
        r = fail(cnrtErrorNotReady, "cnrtNotifierElapsedTime: not complete");
    else
        *ms = (float)(end->when_ms - start->when_ms);
    pthread_mutex_unlock(&S.mu);
    return r;
}

SI_API cnrtRet_t cnrtNotifierDuration(cnrtNotifier_t start, cnrtNotifier_t end,
                                      float *us)
{
    cnrtRet_t r = cnrtNotifierElapsedTime(start, end, us);

    if (r == cnrtSuccess)
        *us *= 1000.0f;
    return r;
}
