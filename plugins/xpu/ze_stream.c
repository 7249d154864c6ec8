/*
 * keel Level Zero plugin — stream and event group (see ze_internal.h).
 *
 * A stream is an immediate, in-order command list. Its mutex is held only
 * while appending, so no enqueueing call ever waits for device work (the
 * promise of KEEL_FEATURE_ASYNC_COPY); waits happen on events with the
 * mutex released.
 *
 * A record takes a FRESH event from the allocator and appends a signal of
 * it: resetting the previous one on the host instead would race with a
 * command list still waiting on it (zeEventHostReset of an event in use is
 * undefined). The previous event is retired, destroyed at the next device
 * synchronize.
 *
 * Host functions: the stream signals event `before`, then waits on event
 * `after`; the stream's worker thread (started on the first host function)
 * waits for `before` on the host, runs fn, and signals `after`. User code
 * never runs on the enqueuing thread.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ze_internal.h"

void ze_async_error(int32_t device, keel_status st, const char *msg)
{
    struct ze_device *d = &ze_g.dev[device];

    pthread_mutex_lock(&d->mu);
    if (!d->async_error) {
        d->async_error = st;
        snprintf(d->async_msg, sizeof(d->async_msg), "%s", msg);
    }
    pthread_mutex_unlock(&d->mu);
}

void ze_stream_lock(struct keel_stream_s *s)
{
    pthread_mutex_lock(&s->mu);
    s->enq++;
}

void ze_stream_unlock(struct keel_stream_s *s)
{
    if (!ze_g.dev[s->device].in_order)
        zeCommandListAppendBarrier(s->list, NULL, 0, NULL);
    pthread_mutex_unlock(&s->mu);
}

static keel_status list_create(int32_t device, bool synchronous,
                               ze_command_list_handle_t *out)
{
    struct ze_device *d = &ze_g.dev[device];
    ze_command_queue_desc_t qd = {
        .stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
        .ordinal = d->compute_ordinal,
        .index = 0,
        .flags = d->in_order ? ZE_COMMAND_QUEUE_FLAG_IN_ORDER : 0,
        .mode = synchronous ? ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS
                            : ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
        .priority = ZE_COMMAND_QUEUE_PRIORITY_NORMAL,
    };

    *out = NULL;
    return ze_check(zeCommandListCreateImmediate(d->ctx, d->dev, &qd, out),
                    device, "zeCommandListCreateImmediate(%s, ordinal %u)",
                    synchronous ? "synchronous" : "asynchronous, in order",
                    (unsigned)d->compute_ordinal);
}

static keel_status stream_new(int32_t device, bool is_default,
                              struct keel_stream_s **out)
{
    struct keel_stream_s *s = calloc(1, sizeof(*s));
    keel_status st;

    *out = NULL;
    if (!s)
        return ze_fail(KEEL_STATUS_OUT_OF_MEMORY,
                       "stream_create: no host memory on xpu:%d", (int)device);
    s->device = device;
    s->is_default = is_default;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->hmu, NULL);
    pthread_cond_init(&s->hcv, NULL);
    st = list_create(device, false, &s->list);
    if (st) {
        pthread_mutex_destroy(&s->mu);
        pthread_mutex_destroy(&s->hmu);
        pthread_cond_destroy(&s->hcv);
        free(s);
        return st;
    }
    *out = s;
    return KEEL_STATUS_OK;
}

static void worker_stop(struct keel_stream_s *s)
{
    pthread_mutex_lock(&s->hmu);
    bool started = s->worker_started;
    s->worker_stop = true;
    pthread_cond_broadcast(&s->hcv);
    pthread_mutex_unlock(&s->hmu);
    if (started)
        pthread_join(s->worker, NULL);
    s->worker_started = false;
}

static void stream_free(struct keel_stream_s *s)
{
    worker_stop(s);
    if (s->marker)
        ze_ev_put(s->marker); /* the stream has been waited for */
    zeCommandListDestroy(s->list);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->hmu);
    pthread_cond_destroy(&s->hcv);
    free(s);
}

keel_status ze_stream_device_init(int32_t device)
{
    struct ze_device *d = &ze_g.dev[device];
    keel_status st = list_create(device, true, &d->sync_list);

    if (st)
        return st;
    st = stream_new(device, true, &d->def);
    if (st) {
        zeCommandListDestroy(d->sync_list);
        d->sync_list = NULL;
        return st;
    }
    d->streams = d->def;
    return KEEL_STATUS_OK;
}

keel_status ze_stream_resolve(int32_t device, keel_stream stream,
                              const char *call, struct keel_stream_s **out)
{
    struct ze_range r;

    if (!stream) {
        *out = ze_g.dev[device].def;
        return KEEL_STATUS_OK;
    }
    if (!ze_rs_find(&ze_g.handles, (uintptr_t)stream, 1, -1, ZE_KIND_STREAM,
                    &r) ||
        r.base != (uintptr_t)stream)
        return ze_fail(KEEL_STATUS_INVALID_HANDLE,
                       "%s: %p is not a live stream of the levelzero plugin",
                       call, (void *)stream);
    if (r.device != device)
        return ze_fail(KEEL_STATUS_INVALID_HANDLE,
                       "%s: stream %p belongs to xpu:%d, not xpu:%d", call,
                       (void *)stream, (int)r.device, (int)device);
    *out = stream;
    return KEEL_STATUS_OK;
}

keel_status ze_stream_wait(struct keel_stream_s *s, const char *call)
{
    struct ze_ev *ev;
    keel_status st = ze_ev_get(s->device, false, &ev);
    ze_result_t r;

    if (st)
        return st;
    uint64_t mine;

    ze_stream_lock(s);
    mine = s->enq;
    r = zeCommandListAppendSignalEvent(s->list, ev->h);
    ze_stream_unlock(s);
    if (r != ZE_RESULT_SUCCESS) {
        ze_ev_put(ev);
        return ze_check(r, s->device, "%s: zeCommandListAppendSignalEvent",
                        call);
    }
    r = zeEventHostSynchronize(ev->h, UINT64_MAX);
    ze_ev_put(ev);
    if (r == ZE_RESULT_SUCCESS) {
        pthread_mutex_lock(&s->mu);
        if (s->done_enq < mine)
            s->done_enq = mine;
        pthread_mutex_unlock(&s->mu);
    }
    return ze_check(r, s->device, "%s: zeEventHostSynchronize", call);
}

static keel_status ze_stream_create(int32_t device, int32_t priority,
                                    keel_stream *stream)
{
    keel_status st = ze_enter(device, "stream_create");
    struct keel_stream_s *s;
    struct ze_device *d;

    (void)priority; /* one priority level (props.stream_priorities = 1) */
    if (st)
        return st;
    if (!stream)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "stream_create: stream is NULL");
    *stream = NULL;
    if ((st = stream_new(device, false, &s)))
        return st;
    struct ze_range r = {.base = (uintptr_t)s, .size = 1, .device = device,
                         .kind = ZE_KIND_STREAM};
    if (ze_rs_add(&ze_g.handles, &r)) {
        stream_free(s);
        return ze_fail(KEEL_STATUS_OUT_OF_MEMORY,
                       "stream_create: no host memory for the handle registry");
    }
    d = &ze_g.dev[device];
    pthread_rwlock_wrlock(&d->streams_lock);
    s->next = d->streams->next; /* keep the default stream first */
    d->streams->next = s;
    pthread_rwlock_unlock(&d->streams_lock);
    *stream = s;
    return KEEL_STATUS_OK;
}

static void unlink_stream(struct ze_device *d, struct keel_stream_s *s)
{
    pthread_rwlock_wrlock(&d->streams_lock);
    for (struct keel_stream_s **p = &d->streams; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    pthread_rwlock_unlock(&d->streams_lock);
}

static keel_status ze_stream_destroy(int32_t device, keel_stream stream)
{
    keel_status st = ze_enter(device, "stream_destroy");
    struct keel_stream_s *s;

    if (st)
        return st;
    if (!stream)
        return ze_fail(KEEL_STATUS_INVALID_HANDLE,
                       "stream_destroy: the default stream cannot be "
                       "destroyed");
    if ((st = ze_stream_resolve(device, stream, "stream_destroy", &s)))
        return st;
    st = ze_stream_wait(s, "stream_destroy");
    if (!ze_rs_take(&ze_g.handles, (uintptr_t)s, ZE_KIND_STREAM, device, NULL))
        return ze_fail(KEEL_STATUS_INVALID_HANDLE,
                       "stream_destroy: stream %p was destroyed meanwhile",
                       (void *)s);
    unlink_stream(&ze_g.dev[device], s);
    stream_free(s);
    return st;
}

static keel_status ze_stream_synchronize(int32_t device, keel_stream stream)
{
    keel_status st = ze_enter(device, "stream_synchronize");
    struct keel_stream_s *s;

    if (st)
        return st;
    if ((st = ze_stream_resolve(device, stream, "stream_synchronize", &s)))
        return st;
    st = ze_stream_wait(s, "stream_synchronize");
    ze_collect_deferred(device);
    return st;
}

static keel_status ze_stream_query(int32_t device, keel_stream stream)
{
    keel_status st = ze_enter(device, "stream_query");
    struct keel_stream_s *s;
    ze_result_t r = ZE_RESULT_SUCCESS;
    struct ze_ev *old = NULL, *fresh = NULL;

    if (st)
        return st;
    if ((st = ze_stream_resolve(device, stream, "stream_query", &s)))
        return st;
    pthread_mutex_lock(&s->mu);
    if (s->done_enq == s->enq) { /* nothing appended since it all ran */
        pthread_mutex_unlock(&s->mu);
        return KEEL_STATUS_OK;
    }
    if (!s->marker || s->marker_enq != s->enq) {
        pthread_mutex_unlock(&s->mu);
        if ((st = ze_ev_get(device, false, &fresh)))
            return st;
        pthread_mutex_lock(&s->mu);
        s->enq++;
        r = zeCommandListAppendSignalEvent(s->list, fresh->h);
        if (r == ZE_RESULT_SUCCESS) {
            old = s->marker;
            s->marker = fresh;
            s->marker_enq = s->enq;
            fresh = NULL;
        }
    }
    if (r == ZE_RESULT_SUCCESS) {
        r = zeEventQueryStatus(s->marker->h);
        if (r == ZE_RESULT_SUCCESS && s->done_enq < s->marker_enq)
            s->done_enq = s->marker_enq;
    }
    pthread_mutex_unlock(&s->mu);
    if (fresh)
        ze_ev_put(fresh);
    /* No command list waits on a marker (it is only queried): once it has
     * signalled it can go at once; before, the stream still signals it. */
    if (old && zeEventQueryStatus(old->h) == ZE_RESULT_SUCCESS)
        ze_ev_put(old);
    else if (old)
        ze_ev_retire(device, old);
    if (r == ZE_RESULT_SUCCESS)
        return KEEL_STATUS_OK;
    if (r == ZE_RESULT_NOT_READY)
        return KEEL_STATUS_NOT_READY;
    return ze_check(r, device, "stream_query");
}

/* ---- events ---------------------------------------------------------------- */

static keel_status event_resolve(int32_t device, keel_event event,
                                 const char *call, bool any_device)
{
    struct ze_range r;

    if (!event)
        return ze_fail(KEEL_STATUS_INVALID_HANDLE, "%s: event is NULL", call);
    if (!ze_rs_find(&ze_g.handles, (uintptr_t)event, 1, -1, ZE_KIND_EVENT,
                    &r) ||
        r.base != (uintptr_t)event)
        return ze_fail(KEEL_STATUS_INVALID_HANDLE,
                       "%s: %p is not a live event of the levelzero plugin",
                       call, (void *)event);
    if (!any_device && r.device != device)
        return ze_fail(KEEL_STATUS_INVALID_HANDLE,
                       "%s: event %p belongs to xpu:%d, not xpu:%d", call,
                       (void *)event, (int)r.device, (int)device);
    return KEEL_STATUS_OK;
}

static keel_status ze_event_create(int32_t device, keel_event *event)
{
    keel_status st = ze_enter(device, "event_create");
    struct keel_event_s *e;

    if (st)
        return st;
    if (!event)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "event_create: event is NULL");
    *event = NULL;
    e = calloc(1, sizeof(*e));
    if (!e)
        return ze_fail(KEEL_STATUS_OUT_OF_MEMORY,
                       "event_create: no host memory on xpu:%d", (int)device);
    e->device = device;
    pthread_mutex_init(&e->mu, NULL);
    struct ze_range r = {.base = (uintptr_t)e, .size = 1, .device = device,
                         .kind = ZE_KIND_EVENT};
    if (ze_rs_add(&ze_g.handles, &r)) {
        pthread_mutex_destroy(&e->mu);
        free(e);
        return ze_fail(KEEL_STATUS_OUT_OF_MEMORY,
                       "event_create: no host memory for the handle registry");
    }
    *event = e;
    return KEEL_STATUS_OK;
}

static void event_free(struct keel_event_s *e)
{
    if (e->ev)
        ze_ev_retire(e->device, e->ev);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

static keel_status ze_event_destroy(int32_t device, keel_event event)
{
    keel_status st = ze_enter(device, "event_destroy");

    if (st)
        return st;
    if ((st = event_resolve(device, event, "event_destroy", false)))
        return st;
    if (!ze_rs_take(&ze_g.handles, (uintptr_t)event, ZE_KIND_EVENT, device,
                    NULL))
        return ze_fail(KEEL_STATUS_INVALID_HANDLE,
                       "event_destroy: event %p was destroyed meanwhile",
                       (void *)event);
    event_free(event);
    return KEEL_STATUS_OK;
}

static keel_status ze_event_record(int32_t device, keel_event event,
                                   keel_stream stream)
{
    keel_status st = ze_enter(device, "event_record");
    struct keel_stream_s *s;
    struct ze_ev *ev, *old;
    ze_result_t r;

    if (st)
        return st;
    if ((st = event_resolve(device, event, "event_record", false)) ||
        (st = ze_stream_resolve(device, stream, "event_record", &s)))
        return st;
    if ((st = ze_ev_get(device, true, &ev)))
        return st;
    ze_stream_lock(s);
    r = zeCommandListAppendSignalEvent(s->list, ev->h);
    ze_stream_unlock(s);
    if (r != ZE_RESULT_SUCCESS) {
        ze_ev_put(ev);
        return ze_check(r, device, "event_record: "
                        "zeCommandListAppendSignalEvent");
    }
    pthread_mutex_lock(&event->mu);
    old = event->ev;
    event->ev = ev;
    pthread_mutex_unlock(&event->mu);
    ze_ev_retire(device, old);
    return KEEL_STATUS_OK;
}

static keel_status ze_event_query(int32_t device, keel_event event)
{
    keel_status st = ze_enter(device, "event_query");
    ze_result_t r = ZE_RESULT_SUCCESS;

    if (st)
        return st;
    if ((st = event_resolve(device, event, "event_query", false)))
        return st;
    pthread_mutex_lock(&event->mu);
    if (event->ev)
        r = zeEventQueryStatus(event->ev->h);
    pthread_mutex_unlock(&event->mu);
    if (r == ZE_RESULT_NOT_READY)
        return KEEL_STATUS_NOT_READY;
    return ze_check(r, device, "event_query: zeEventQueryStatus");
}

/* The current record's Level Zero event (NULL: never recorded). Retired
 * events live until a device synchronize, which cannot complete while the
 * caller still needs it for a wait it is about to start. */
static ze_event_handle_t event_handle(struct keel_event_s *e)
{
    ze_event_handle_t h;

    pthread_mutex_lock(&e->mu);
    h = e->ev ? e->ev->h : NULL;
    pthread_mutex_unlock(&e->mu);
    return h;
}

static keel_status ze_event_synchronize(int32_t device, keel_event event)
{
    keel_status st = ze_enter(device, "event_synchronize");
    ze_event_handle_t h;

    if (st)
        return st;
    if ((st = event_resolve(device, event, "event_synchronize", false)))
        return st;
    h = event_handle(event);
    if (!h)
        return KEEL_STATUS_OK;
    return ze_check(zeEventHostSynchronize(h, UINT64_MAX), device,
                    "event_synchronize: zeEventHostSynchronize");
}

static keel_status ze_stream_wait_event(int32_t device, keel_stream stream,
                                        keel_event event)
{
    keel_status st = ze_enter(device, "stream_wait_event");
    struct keel_stream_s *s;
    ze_event_handle_t h;
    ze_result_t r;

    if (st)
        return st;
    if ((st = ze_stream_resolve(device, stream, "stream_wait_event", &s)) ||
        (st = event_resolve(device, event, "stream_wait_event", true)))
        return st;
    h = event_handle(event);
    if (!h)
        return KEEL_STATUS_OK; /* never recorded: complete */
    if (event->device != device) {
        /* Event pools are made per device; a wait across devices is done
         * on the host (the only place the plugin blocks in an async call). */
        return ze_check(zeEventHostSynchronize(h, UINT64_MAX), device,
                        "stream_wait_event: zeEventHostSynchronize (event of "
                        "xpu:%d)", (int)event->device);
    }
    ze_stream_lock(s);
    r = zeCommandListAppendWaitOnEvents(s->list, 1, &h);
    ze_stream_unlock(s);
    return ze_check(r, device,
                    "stream_wait_event: zeCommandListAppendWaitOnEvents");
}

static keel_status ze_event_elapsed_ms(int32_t device, keel_event start,
                                       keel_event end, float *ms)
{
    keel_status st = ze_enter(device, "event_elapsed_ms");
    ze_event_handle_t hs, he;
    ze_kernel_timestamp_result_t ts, te;
    ze_result_t r;
    const struct ze_device *d;
    uint64_t mask, delta;

    if (st)
        return st;
    if ((st = event_resolve(device, start, "event_elapsed_ms", false)) ||
        (st = event_resolve(device, end, "event_elapsed_ms", false)))
        return st;
    if (!ms)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "event_elapsed_ms: ms is NULL");
    hs = event_handle(start);
    he = event_handle(end);
    if (!hs || !he)
        return ze_fail(KEEL_STATUS_INVALID_STATE,
                       "event_elapsed_ms: the %s event was never recorded",
                       hs ? "end" : "start");
    r = zeEventQueryStatus(hs);
    if (r == ZE_RESULT_SUCCESS)
        r = zeEventQueryStatus(he);
    if (r == ZE_RESULT_NOT_READY)
        return KEEL_STATUS_NOT_READY;
    if ((st = ze_check(r, device, "event_elapsed_ms: zeEventQueryStatus")))
        return st;
    if ((st = ze_check(zeEventQueryKernelTimestamp(hs, &ts), device,
                       "zeEventQueryKernelTimestamp (start)")) ||
        (st = ze_check(zeEventQueryKernelTimestamp(he, &te), device,
                       "zeEventQueryKernelTimestamp (end)")))
        return st;
    d = &ze_g.dev[device];
    mask = d->props.kernelTimestampValidBits >= 64 ||
                   d->props.kernelTimestampValidBits == 0
               ? UINT64_MAX
               : (UINT64_C(1) << d->props.kernelTimestampValidBits) - 1;
    delta = (te.global.kernelEnd - ts.global.kernelEnd) & mask;
    /* timerResolution: nanoseconds per tick (ZE_STRUCTURE_TYPE_DEVICE_
     * PROPERTIES); a wrap-around of end before start reads as 0 */
    if (delta > mask / 2)
        delta = 0;
    *ms = (float)((double)delta * (double)d->props.timerResolution / 1e6);
    return KEEL_STATUS_OK;
}

/* ---- host functions ------------------------------------------------------ */

static void *worker_main(void *arg)
{
    struct keel_stream_s *s = arg;

    for (;;) {
        struct ze_hostjob *j;
        pthread_mutex_lock(&s->hmu);
        while (!s->jobs && !s->worker_stop)
            pthread_cond_wait(&s->hcv, &s->hmu);
        j = s->jobs;
        if (!j) {
            pthread_mutex_unlock(&s->hmu);
            break;
        }
        s->jobs = j->next;
        if (!s->jobs)
            s->jobs_tail = NULL;
        pthread_mutex_unlock(&s->hmu);

        ze_result_t r = zeEventHostSynchronize(j->before->h, UINT64_MAX);
        if (r != ZE_RESULT_SUCCESS) {
            char msg[256];
            snprintf(msg, sizeof(msg),
                     "launch_host_func on xpu:%d: zeEventHostSynchronize: %s "
                     "(the function ran anyway)",
                     (int)s->device, ze_result_name(r));
            ze_async_error(s->device, ze_status_of(r), msg);
        }
        j->fn(j->user_data);
        r = zeEventHostSignal(j->after->h);
        if (r != ZE_RESULT_SUCCESS) {
            char msg[256];
            snprintf(msg, sizeof(msg),
                     "launch_host_func on xpu:%d: zeEventHostSignal: %s",
                     (int)s->device, ze_result_name(r));
            ze_async_error(s->device, ze_status_of(r), msg);
        }
        ze_ev_put(j->before);
        ze_ev_retire(s->device, j->after); /* the stream may still wait */
        free(j);
    }
    return NULL;
}

static keel_status ze_launch_host_func(int32_t device, keel_stream stream,
                                       keel_host_fn fn, void *user_data)
{
    keel_status st = ze_enter(device, "launch_host_func");
    struct keel_stream_s *s;
    struct ze_hostjob *j;
    ze_result_t r;

    if (st)
        return st;
    if ((st = ze_stream_resolve(device, stream, "launch_host_func", &s)))
        return st;
    if (!fn)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "launch_host_func: fn is NULL");
    j = calloc(1, sizeof(*j));
    if (!j)
        return ze_fail(KEEL_STATUS_OUT_OF_MEMORY,
                       "launch_host_func: no host memory on xpu:%d",
                       (int)device);
    j->fn = fn;
    j->user_data = user_data;
    if ((st = ze_ev_get(device, false, &j->before)) ||
        (st = ze_ev_get(device, false, &j->after))) {
        ze_ev_put(j->before);
        free(j);
        return st;
    }
    pthread_mutex_lock(&s->hmu);
    if (!s->worker_started) {
        if (pthread_create(&s->worker, NULL, worker_main, s) != 0) {
            pthread_mutex_unlock(&s->hmu);
            ze_ev_put(j->before);
            ze_ev_put(j->after);
            free(j);
            return ze_fail(KEEL_STATUS_OUT_OF_MEMORY,
                           "launch_host_func: pthread_create failed on "
                           "xpu:%d",
                           (int)device);
        }
        s->worker_started = true;
    }
    pthread_mutex_unlock(&s->hmu);

    ze_stream_lock(s);
    r = zeCommandListAppendSignalEvent(s->list, j->before->h);
    if (r == ZE_RESULT_SUCCESS) {
        r = zeCommandListAppendWaitOnEvents(s->list, 1, &j->after->h);
        if (r != ZE_RESULT_SUCCESS) {
            /* the stream does not wait: run fn anyway, in order after the
             * work before it, and report the failure */
            ze_stream_unlock(s);
            st = ze_check(r, device, "launch_host_func: "
                          "zeCommandListAppendWaitOnEvents");
            goto queue;
        }
    }
    ze_stream_unlock(s);
    if (r != ZE_RESULT_SUCCESS) {
        ze_ev_put(j->before);
        ze_ev_put(j->after);
        free(j);
        return ze_check(r, device,
                        "launch_host_func: zeCommandListAppendSignalEvent");
    }
queue:
    pthread_mutex_lock(&s->hmu);
    if (s->jobs_tail)
        s->jobs_tail->next = j;
    else
        s->jobs = j;
    s->jobs_tail = j;
    pthread_cond_signal(&s->hcv);
    pthread_mutex_unlock(&s->hmu);
    return st;
}

void ze_stream_finalize(void)
{
    struct ze_range r;

    while (ze_rs_pop(&ze_g.handles, ZE_KIND_EVENT, &r))
        event_free((struct keel_event_s *)r.base);
    while (ze_rs_pop(&ze_g.handles, ZE_KIND_STREAM, &r))
        ; /* freed below, from the device lists */
    for (int32_t i = 0; i < ze_g.ndev; i++) {
        struct ze_device *d = &ze_g.dev[i];
        struct keel_stream_s *s;
        for (;;) {
            pthread_rwlock_wrlock(&d->streams_lock);
            s = d->streams;
            if (s)
                d->streams = s->next;
            pthread_rwlock_unlock(&d->streams_lock);
            if (!s)
                break;
            ze_stream_wait(s, "finalize");
            stream_free(s);
        }
        d->def = NULL;
        if (d->sync_list)
            zeCommandListDestroy(d->sync_list);
        d->sync_list = NULL;
    }
}

const keel_stream_ops ze_stream_ops = {
    .header = KEEL_TABLE_HEADER(keel_stream_ops),
    .stream_create = ze_stream_create,
    .stream_destroy = ze_stream_destroy,
    .stream_synchronize = ze_stream_synchronize,
    .stream_query = ze_stream_query,
    .stream_wait_event = ze_stream_wait_event,
    .launch_host_func = ze_launch_host_func,
    .event_create = ze_event_create,
    .event_destroy = ze_event_destroy,
    .event_record = ze_event_record,
    .event_query = ze_event_query,
    .event_synchronize = ze_event_synchronize,
    .event_elapsed_ms = ze_event_elapsed_ms,
};
