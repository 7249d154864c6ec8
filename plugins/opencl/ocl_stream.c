/*
 * keel OpenCL plugin — streams, events, host functions.
 *
 * A stream is an in-order command queue; the registry of live streams and
 * events (one list each, under ocl_reg_lock) lets every call tell a handle
 * of this plugin from anything else without dereferencing it.
 *
 * HOST JOBS (host functions, asynchronous peer copies, waits on another
 * device's event). On the queue: a marker M, then a barrier that waits for
 * a user event U. M's completion callback only hands the job to the
 * plugin's worker pool; a worker runs the job and then sets U complete,
 * which releases the queue. So the job runs after all earlier work, later
 * work waits for it, it never runs on the enqueuing thread, and no user
 * code runs on the OpenCL runtime's callback thread (where a blocking call
 * could stall the runtime itself). The pool grows so that every queued
 * job has a worker not busy with another (up to OCL_WORKERS_MAX), so a
 * host function that blocks, or a collective's job waiting for the other
 * devices' jobs of its round, does not stop the jobs of other streams.
 *
 * An event of another device (another context) cannot be in a wait list:
 * stream_wait_event then uses the same chain with the event itself as the
 * trigger and no job.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include "ocl_internal.h"

#define OCL_WORKERS_MAX 64

struct keel_stream_s {
    int32_t device;
    cl_command_queue q;
    struct keel_stream_s *next;
};

struct keel_event_s {
    int32_t device;
    cl_event ev; /* last record's marker, NULL: never recorded */
    struct keel_event_s *next;
};

static struct keel_stream_s *streams;
static struct keel_event_s *events;

/* ---- worker pool --------------------------------------------------------- */

struct job {
    void (*fn)(void *);
    void *arg;
    int32_t device;
    cl_event trigger; /* released when done */
    cl_event user;    /* set complete when done */
    cl_int trig_status;
    const char *what;
    struct job *next;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job *head, *tail;
    pthread_t th[OCL_WORKERS_MAX];
    int nthreads;
    int spare;  /* workers not running a job: waiting, or about to take one */
    int queued; /* jobs in the list */
    bool stop, started;
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *worker_main(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        struct job *j;

        while (!pool.head && !pool.stop)
            pthread_cond_wait(&pool.cv, &pool.mu);
        if (!pool.head)
            break;
        j = pool.head;
        pool.head = j->next;
        if (!pool.head)
            pool.tail = NULL;
        pool.queued--;
        pool.spare--;
        pthread_mutex_unlock(&pool.mu);
        if (j->trig_status < 0)
            ocl_async_fail(j->device, KEEL_STATUS_DEVICE_ERROR,
                           "work before %s on opencl:%d failed (%s)", j->what,
                           (int)j->device, ocl_err_name(j->trig_status));
        if (j->fn)
            j->fn(j->arg);
        clSetUserEventStatus(j->user, CL_COMPLETE);
        clReleaseEvent(j->user);
        if (j->trigger)
            clReleaseEvent(j->trigger);
        free(j);
        pthread_mutex_lock(&pool.mu);
        pool.spare++;
    }
    pool.spare--;
    pthread_mutex_unlock(&pool.mu);
    return NULL;
}

/* Queue a job for the workers; grows the pool so that every queued job has
 * a worker of its own. A job may block until a later one has run (the
 * collectives' jobs of one round, one per device), so a job must never
 * wait in the list behind a running one. Counting the workers blocked in
 * pthread_cond_wait is not enough: one that has been signalled but has not
 * yet taken its job still looks idle, and two jobs pushed in quick
 * succession (two queues' markers completing together) then both went to
 * that one worker, the second behind the first, which waited for it until
 * the collective timeout. `spare` counts those workers until they have
 * taken a job. */
static void pool_push(struct job *j)
{
    pthread_mutex_lock(&pool.mu);
    j->next = NULL;
    if (pool.tail)
        pool.tail->next = j;
    else
        pool.head = j;
    pool.tail = j;
    pool.queued++;
    if (pool.queued > pool.spare && pool.nthreads < OCL_WORKERS_MAX &&
        pthread_create(&pool.th[pool.nthreads], NULL, worker_main, NULL) == 0) {
        pool.nthreads++;
        pool.spare++;
    }
    pthread_cond_signal(&pool.cv);
    pthread_mutex_unlock(&pool.mu);
}

static void CL_CALLBACK job_ready(cl_event ev, cl_int status, void *data)
{
    struct job *j = data;

    (void)ev;
    j->trig_status = status;
    pool_push(j);
}

keel_status ocl_stream_start(void)
{
    pthread_mutex_lock(&pool.mu);
    if (!pool.started) {
        pthread_condattr_t a;

        pthread_condattr_init(&a);
        pthread_cond_init(&pool.cv, &a);
        pthread_condattr_destroy(&a);
        pool.started = true;
    }
    pool.stop = false;
    pthread_mutex_unlock(&pool.mu);
    return KEEL_STATUS_OK;
}

void ocl_stream_stop(void)
{
    int n;

    pthread_mutex_lock(&pool.mu);
    pool.stop = true;
    pthread_cond_broadcast(&pool.cv);
    n = pool.nthreads;
    pthread_mutex_unlock(&pool.mu);
    for (int i = 0; i < n; i++)
        pthread_join(pool.th[i], NULL);
    pthread_mutex_lock(&pool.mu);
    pool.nthreads = 0;
    pool.spare = 0;
    pool.queued = 0;
    pthread_mutex_unlock(&pool.mu);
}

/* Make q wait for a user event that a worker completes after running
 * fn(arg), once `trigger` (owned by the chain) has completed. */
static keel_status chain(int32_t device, cl_command_queue q, cl_event trigger,
                         void (*fn)(void *), void *arg, const char *what)
{
    struct job *j = calloc(1, sizeof(*j));
    cl_int err = CL_SUCCESS;
    cl_event u;

    if (!j) {
        clReleaseEvent(trigger);
        return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "%s: out of host memory", what);
    }
    u = clCreateUserEvent(ocl_g.dev[device].ctx, &err);
    if (!u) {
        free(j);
        clReleaseEvent(trigger);
        return ocl_check(err, device, what);
    }
    err = clEnqueueBarrierWithWaitList(q, 1, &u, NULL);
    if (err != CL_SUCCESS) {
        clSetUserEventStatus(u, CL_COMPLETE);
        clReleaseEvent(u);
        clReleaseEvent(trigger);
        free(j);
        return ocl_check(err, device, what);
    }
    j->fn = fn;
    j->arg = arg;
    j->device = device;
    j->trigger = trigger;
    j->user = u;
    j->what = what;
    err = clSetEventCallback(trigger, CL_COMPLETE, job_ready, j);
    if (err != CL_SUCCESS) {
        /* The barrier is in the queue already: release it, and fail. */
        clSetUserEventStatus(u, CL_COMPLETE);
        clReleaseEvent(u);
        clReleaseEvent(trigger);
        free(j);
        return ocl_check(err, device, what);
    }
    clFlush(q);
    return KEEL_STATUS_OK;
}

keel_status ocl_enqueue_host_job(int32_t device, cl_command_queue q,
                                 void (*fn)(void *), void *arg,
                                 const char *what)
{
    cl_event m = NULL;
    cl_int err = clEnqueueMarkerWithWaitList(q, 0, NULL, &m);

    if (err != CL_SUCCESS)
        return ocl_check(err, device, what);
    return chain(device, q, m, fn, arg, what);
}

/* ---- registry ------------------------------------------------------------ */

keel_status ocl_queue(int32_t device, keel_stream stream, cl_command_queue *q)
{
    keel_status st = KEEL_STATUS_OK;
    int32_t owner = -1;

    if (device < 0 || device >= ocl_g.ndev || !ocl_g.inited)
        return ocl_device_ok(device);
    if (!stream) {
        *q = ocl_g.dev[device].queue;
        return KEEL_STATUS_OK;
    }
    pthread_mutex_lock(&ocl_reg_lock);
    struct keel_stream_s *s = streams;
    while (s && s != stream)
        s = s->next;
    if (!s)
        st = KEEL_STATUS_INVALID_HANDLE;
    else if (s->device != device) {
        owner = s->device;
        st = KEEL_STATUS_INVALID_ARGUMENT;
    }
    else
        *q = s->q;
    pthread_mutex_unlock(&ocl_reg_lock);
    if (st == KEEL_STATUS_INVALID_HANDLE)
        return ocl_fail(st, "stream %p is not a live stream of the opencl "
                            "plugin",
                        (void *)stream);
    if (st)
        return ocl_fail(KEEL_STATUS_INVALID_HANDLE,
                        "stream %p belongs to opencl:%d, not opencl:%d",
                        (void *)stream, (int)owner, (int)device);
    return KEEL_STATUS_OK;
}

keel_status ocl_finish_all(int32_t device)
{
    cl_command_queue qs[64], *all = qs;
    size_t n = 0, cap = 64;
    keel_status st = KEEL_STATUS_OK;

    pthread_mutex_lock(&ocl_reg_lock);
    for (struct keel_stream_s *s = streams; s; s = s->next)
        if (s->device == device)
            n++;
    if (n + 1 > cap) {
        all = malloc((n + 1) * sizeof(*all));
        if (!all) {
            pthread_mutex_unlock(&ocl_reg_lock);
            return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                            "synchronize: out of host memory");
        }
    }
    n = 0;
    if (ocl_g.dev[device].queue)
        all[n++] = ocl_g.dev[device].queue;
    for (struct keel_stream_s *s = streams; s; s = s->next)
        if (s->device == device)
            all[n++] = s->q;
    for (size_t i = 0; i < n; i++)
        clRetainCommandQueue(all[i]);
    pthread_mutex_unlock(&ocl_reg_lock);
    for (size_t i = 0; i < n; i++) {
        cl_int err = clFinish(all[i]);

        if (err != CL_SUCCESS && st == KEEL_STATUS_OK)
            st = ocl_check(err, device, "clFinish");
        clReleaseCommandQueue(all[i]);
    }
    if (all != qs)
        free(all);
    return st;
}

void ocl_stream_release_device(int32_t device)
{
    struct keel_stream_s **sp = &streams;
    struct keel_event_s **ep = &events;

    pthread_mutex_lock(&ocl_reg_lock);
    while (*sp) {
        struct keel_stream_s *s = *sp;

        if (s->device != device) {
            sp = &s->next;
            continue;
        }
        *sp = s->next;
        clFinish(s->q);
        clReleaseCommandQueue(s->q);
        free(s);
    }
    while (*ep) {
        struct keel_event_s *e = *ep;

        if (e->device != device) {
            ep = &e->next;
            continue;
        }
        *ep = e->next;
        if (e->ev)
            clReleaseEvent(e->ev);
        free(e);
    }
    pthread_mutex_unlock(&ocl_reg_lock);
}

/* ---- streams ------------------------------------------------------------- */

static keel_status ocl_stream_create(int32_t device, int32_t priority,
                                     keel_stream *stream)
{
    keel_status st = ocl_device_ok(device);
    struct ocl_device *d;
    struct keel_stream_s *s;
    cl_int err = CL_SUCCESS;

    (void)priority; /* one level: every value clamps to it */
    if (st)
        return st;
    if (!stream)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "stream_create: stream is NULL");
    d = &ocl_g.dev[device];
    s = calloc(1, sizeof(*s));
    if (!s)
        return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "stream_create: out of host memory");
    s->device = device;
    s->q = clCreateCommandQueue(d->ctx, d->id,
                                d->profiling ? CL_QUEUE_PROFILING_ENABLE : 0,
                                &err);
    if (!s->q) {
        free(s);
        st = ocl_check(err, device, "stream_create: clCreateCommandQueue");
        return st == KEEL_STATUS_DEVICE_ERROR ? KEEL_STATUS_OUT_OF_MEMORY : st;
    }
    pthread_mutex_lock(&ocl_reg_lock);
    s->next = streams;
    streams = s;
    pthread_mutex_unlock(&ocl_reg_lock);
    *stream = s;
    return KEEL_STATUS_OK;
}

static keel_status ocl_stream_destroy(int32_t device, keel_stream stream)
{
    keel_status st = ocl_device_ok(device);
    cl_command_queue q;
    struct keel_stream_s **pp;

    if (st)
        return st;
    if (!stream)
        return ocl_fail(KEEL_STATUS_INVALID_HANDLE,
                        "stream_destroy: the default stream (NULL) of "
                        "opencl:%d cannot be destroyed",
                        (int)device);
    st = ocl_queue(device, stream, &q);
    if (st)
        return st;
    clFinish(q);
    pthread_mutex_lock(&ocl_reg_lock);
    for (pp = &streams; *pp && *pp != stream; pp = &(*pp)->next)
        ;
    if (*pp)
        *pp = stream->next;
    else
        st = KEEL_STATUS_INVALID_HANDLE;
    pthread_mutex_unlock(&ocl_reg_lock);
    if (st)
        return ocl_fail(st, "stream_destroy: stream %p was destroyed "
                            "concurrently",
                        (void *)stream);
    clReleaseCommandQueue(stream->q);
    free(stream);
    return KEEL_STATUS_OK;
}

static keel_status ocl_stream_synchronize(int32_t device, keel_stream stream)
{
    cl_command_queue q;
    keel_status st = ocl_queue(device, stream, &q);
    cl_int err;

    if (st)
        return st;
    err = clFinish(q);
    if (err != CL_SUCCESS)
        return ocl_check(err, device, "stream_synchronize: clFinish");
    return ocl_async_take(device);
}

static keel_status event_status(int32_t device, cl_event ev, const char *what)
{
    cl_int es = CL_COMPLETE;
    cl_int err = clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS,
                                sizeof(es), &es, NULL);

    if (err != CL_SUCCESS)
        return ocl_check(err, device, what);
    if (es == CL_COMPLETE)
        return KEEL_STATUS_OK;
    if (es < 0)
        return ocl_fail(KEEL_STATUS_DEVICE_ERROR,
                        "%s on opencl:%d: the work failed (%s)", what,
                        (int)device, ocl_err_name(es));
    return KEEL_STATUS_NOT_READY;
}

static keel_status ocl_stream_query(int32_t device, keel_stream stream)
{
    cl_command_queue q;
    keel_status st = ocl_queue(device, stream, &q);
    cl_event m = NULL;
    cl_int err;

    if (st)
        return st;
    err = clEnqueueMarkerWithWaitList(q, 0, NULL, &m);
    if (err != CL_SUCCESS)
        return ocl_check(err, device, "stream_query: marker");
    clFlush(q);
    /* The marker completes asynchronously even on an idle queue: give the
     * runtime a moment (bounded, ~2 ms) before answering NOT_READY. */
    {
        struct timespec t0, t;

        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (;;) {
            st = event_status(device, m, "stream_query");
            if (st != KEEL_STATUS_NOT_READY)
                break;
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((t.tv_sec - t0.tv_sec) * 1000000000L +
                    (t.tv_nsec - t0.tv_nsec) > 2000000L)
                break;
            sched_yield();
        }
    }
    clReleaseEvent(m);
    return st;
}

/* ---- events -------------------------------------------------------------- */

/* The event `e` (locked registry): NULL if not live. */
static struct keel_event_s *event_find(keel_event e)
{
    struct keel_event_s *p = events;

    while (p && p != e)
        p = p->next;
    return p;
}

/* Look `e` up for device `device` (any device if device < 0) and return
 * its last record, retained (NULL: never recorded). */
static keel_status event_get(const char *call, int32_t device, keel_event e,
                             cl_event *ev, int32_t *owner)
{
    struct keel_event_s *p;
    keel_status st = KEEL_STATUS_OK;

    pthread_mutex_lock(&ocl_reg_lock);
    p = e ? event_find(e) : NULL;
    if (!p)
        st = ocl_fail(KEEL_STATUS_INVALID_HANDLE,
                      "%s: event %p is not a live event of the opencl plugin",
                      call, (void *)e);
    else if (device >= 0 && p->device != device)
        st = ocl_fail(KEEL_STATUS_INVALID_HANDLE,
                      "%s: event %p belongs to opencl:%d, not opencl:%d", call,
                      (void *)e, (int)p->device, (int)device);
    else {
        *ev = p->ev;
        if (*ev)
            clRetainEvent(*ev);
        if (owner)
            *owner = p->device;
    }
    pthread_mutex_unlock(&ocl_reg_lock);
    return st;
}

static keel_status ocl_stream_wait_event(int32_t device, keel_stream stream,
                                         keel_event event)
{
    cl_command_queue q;
    keel_status st = ocl_queue(device, stream, &q);
    cl_event ev = NULL;
    int32_t owner = -1;
    cl_int err;

    if (st)
        return st;
    st = event_get("stream_wait_event", -1, event, &ev, &owner);
    if (st || !ev)
        return st;
    if (owner == device) {
        err = clEnqueueBarrierWithWaitList(q, 1, &ev, NULL);
        clReleaseEvent(ev);
        if (err == CL_SUCCESS)
            clFlush(q);
        return ocl_check(err, device, "stream_wait_event: barrier");
    }
    /* Another context: a user event of this one, completed by a worker
     * once the other device's event has completed. */
    return chain(device, q, ev, NULL, NULL, "stream_wait_event");
}

static keel_status ocl_launch_host_func(int32_t device, keel_stream stream,
                                        keel_host_fn fn, void *user_data)
{
    cl_command_queue q;
    keel_status st = ocl_queue(device, stream, &q);

    if (st)
        return st;
    if (!fn)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "launch_host_func: fn is NULL");
    return ocl_enqueue_host_job(device, q, fn, user_data, "launch_host_func");
}

static keel_status ocl_event_create(int32_t device, keel_event *event)
{
    keel_status st = ocl_device_ok(device);
    struct keel_event_s *e;

    if (st)
        return st;
    if (!event)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "event_create: event is NULL");
    e = calloc(1, sizeof(*e));
    if (!e)
        return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "event_create: out of host memory");
    e->device = device;
    pthread_mutex_lock(&ocl_reg_lock);
    e->next = events;
    events = e;
    pthread_mutex_unlock(&ocl_reg_lock);
    *event = e;
    return KEEL_STATUS_OK;
}

static keel_status ocl_event_destroy(int32_t device, keel_event event)
{
    keel_status st = ocl_device_ok(device);
    struct keel_event_s **pp, *e = NULL;

    if (st)
        return st;
    pthread_mutex_lock(&ocl_reg_lock);
    for (pp = &events; *pp; pp = &(*pp)->next)
        if (*pp == event) {
            e = *pp;
            if (e->device == device)
                *pp = e->next;
            break;
        }
    pthread_mutex_unlock(&ocl_reg_lock);
    if (!e || !event)
        return ocl_fail(KEEL_STATUS_INVALID_HANDLE,
                        "event_destroy: event %p is not a live event of the "
                        "opencl plugin",
                        (void *)event);
    if (e->device != device)
        return ocl_fail(KEEL_STATUS_INVALID_HANDLE,
                        "event_destroy: event %p belongs to opencl:%d, not "
                        "opencl:%d",
                        (void *)event, (int)e->device, (int)device);
    if (e->ev)
        clReleaseEvent(e->ev); /* a pending record still completes */
    free(e);
    return KEEL_STATUS_OK;
}

static keel_status ocl_event_record(int32_t device, keel_event event,
                                    keel_stream stream)
{
    cl_command_queue q;
    keel_status st = ocl_queue(device, stream, &q);
    cl_event m = NULL, old = NULL;
    struct keel_event_s *e;
    cl_int err;

    if (st)
        return st;
    st = event_get("event_record", device, event, &old, NULL);
    if (st)
        return st;
    if (old)
        clReleaseEvent(old);
    old = NULL;
    err = clEnqueueMarkerWithWaitList(q, 0, NULL, &m);
    if (err != CL_SUCCESS)
        return ocl_check(err, device, "event_record: marker");
    clFlush(q);
    pthread_mutex_lock(&ocl_reg_lock);
    e = event_find(event);
    if (e) {
        old = e->ev;
        e->ev = m;
        m = NULL;
    }
    pthread_mutex_unlock(&ocl_reg_lock);
    if (old)
        clReleaseEvent(old);
    if (m) {
        clReleaseEvent(m);
        return ocl_fail(KEEL_STATUS_INVALID_HANDLE,
                        "event_record: event %p was destroyed concurrently",
                        (void *)event);
    }
    return KEEL_STATUS_OK;
}

static keel_status ocl_event_query(int32_t device, keel_event event)
{
    cl_event ev = NULL;
    keel_status st = ocl_device_ok(device);

    if (st)
        return st;
    st = event_get("event_query", device, event, &ev, NULL);
    if (st || !ev)
        return st;
    st = event_status(device, ev, "event_query");
    clReleaseEvent(ev);
    return st;
}

static keel_status ocl_event_synchronize(int32_t device, keel_event event)
{
    cl_event ev = NULL;
    keel_status st = ocl_device_ok(device);
    cl_int err;

    if (st)
        return st;
    st = event_get("event_synchronize", device, event, &ev, NULL);
    if (st || !ev)
        return st;
    err = clWaitForEvents(1, &ev);
    st = err == CL_SUCCESS ? event_status(device, ev, "event_synchronize")
                           : ocl_check(err, device,
                                       "event_synchronize: clWaitForEvents");
    clReleaseEvent(ev);
    return st;
}

static keel_status ocl_event_elapsed_ms(int32_t device, keel_event start,
                                        keel_event end, float *ms)
{
    cl_event a = NULL, b = NULL;
    cl_ulong ta = 0, tb = 0;
    keel_status st = ocl_device_ok(device);
    cl_int err;

    if (st)
        return st;
    st = event_get("event_elapsed_ms", device, start, &a, NULL);
    if (st)
        return st;
    st = event_get("event_elapsed_ms", device, end, &b, NULL);
    if (st)
        goto out;
    if (!ms) {
        st = ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                      "event_elapsed_ms: ms is NULL");
        goto out;
    }
    if (!a || !b) {
        st = ocl_fail(KEEL_STATUS_INVALID_STATE,
                      "event_elapsed_ms: the %s event was never recorded",
                      !a ? "start" : "end");
        goto out;
    }
    if (!ocl_g.dev[device].profiling) {
        st = ocl_fail(KEEL_STATUS_NOT_SUPPORTED,
                      "event_elapsed_ms: opencl:%d has no profiling queues",
                      (int)device);
        goto out;
    }
    st = event_status(device, a, "event_elapsed_ms");
    if (!st)
        st = event_status(device, b, "event_elapsed_ms");
    if (st)
        goto out;
    err = clGetEventProfilingInfo(a, CL_PROFILING_COMMAND_END, sizeof(ta), &ta,
                                  NULL);
    if (err == CL_SUCCESS)
        err = clGetEventProfilingInfo(b, CL_PROFILING_COMMAND_END, sizeof(tb),
                                      &tb, NULL);
    if (err != CL_SUCCESS) {
        st = ocl_check(err, device,
                       "event_elapsed_ms: clGetEventProfilingInfo");
        goto out;
    }
    *ms = tb >= ta ? (float)((double)(tb - ta) / 1e6)
                   : -(float)((double)(ta - tb) / 1e6);
out:
    if (a)
        clReleaseEvent(a);
    if (b)
        clReleaseEvent(b);
    return st;
}

const keel_stream_ops ocl_stream_ops = {
    .header = KEEL_TABLE_HEADER(keel_stream_ops),
    .stream_create = ocl_stream_create,
    .stream_destroy = ocl_stream_destroy,
    .stream_synchronize = ocl_stream_synchronize,
    .stream_query = ocl_stream_query,
    .stream_wait_event = ocl_stream_wait_event,
    .launch_host_func = ocl_launch_host_func,
    .event_create = ocl_event_create,
    .event_destroy = ocl_event_destroy,
    .event_record = ocl_event_record,
    .event_query = ocl_event_query,
    .event_synchronize = ocl_event_synchronize,
    .event_elapsed_ms = ocl_event_elapsed_ms,
};
