/*
 * keel Ascend NPU plugin — streams, events and host functions on ACL (see
 * npu_internal.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "npu_internal.h"

/* ---- streams ----------------------------------------------------------------- */

keel_status npu_stream_get(int32_t device, keel_stream stream,
                           const char *call, struct keel_stream_s **out)
{
    if (!stream) {
        *out = npu_g.dev[device].def;
        return KEEL_STATUS_OK;
    }
    if (!npu_reg_get(&npu_g.handles, (uintptr_t)stream, 1, device,
                     NPU_KIND_STREAM, NULL))
        return npu_fail(KEEL_STATUS_INVALID_HANDLE,
                        "%s: %p is not a live stream of npu:%d", call,
                        (void *)stream, (int)device);
    *out = stream;
    return KEEL_STATUS_OK;
}

static keel_status stream_make(int32_t device, struct keel_stream_s **out)
{
    struct keel_stream_s *s = calloc(1, sizeof(*s));
    keel_status st;

    *out = NULL;
    if (!s)
        return npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "npu:%d: no host memory for a stream", (int)device);
    s->device = device;
    st = npu_check(ACL.aclrtCreateStream(&s->s), device, "aclrtCreateStream");
    if (st) {
        free(s);
        return st;
    }
    pthread_mutex_init(&s->mu, NULL);
    *out = s;
    return KEEL_STATUS_OK;
}

/* Wait for the stream, stop its reporting thread, release it. The
 * device's context is current. */
static keel_status stream_unmake(struct keel_stream_s *s)
{
    keel_status st = npu_check(ACL.aclrtSynchronizeStream(s->s), s->device,
                               "aclrtSynchronizeStream");

    if (s->reporting) {
        atomic_store(&s->stop, true);
        pthread_join(s->reporter, NULL);
        ACL.aclrtUnSubscribeReport((uint64_t)s->reporter, s->s);
    }
    if (s->marker)
        ACL.aclrtDestroyEvent(s->marker);
    if (st == KEEL_STATUS_OK)
        st = npu_check(ACL.aclrtDestroyStream(s->s), s->device,
                       "aclrtDestroyStream");
    else
        ACL.aclrtDestroyStream(s->s);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return st;
}

keel_status npu_stream_device_init(int32_t device)
{
    return stream_make(device, &npu_g.dev[device].def);
}

static keel_status npu_stream_create(int32_t device, int32_t priority,
                                     keel_stream *stream)
{
    struct keel_stream_s *s;
    keel_status st;

    (void)priority; /* one level: ACL's stream priority is reserved */
    if (!stream)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "stream_create: stream is NULL");
    *stream = NULL;
    if ((st = npu_enter(device, "stream_create")) ||
        (st = stream_make(device, &s)))
        return st;
    struct npu_obj o = {.base = (uintptr_t)s, .size = 1, .device = device,
                        .kind = NPU_KIND_STREAM};
    if (npu_reg_put(&npu_g.handles, &o)) {
        stream_unmake(s);
        return npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "stream_create: no host memory to track the stream");
    }
    *stream = s;
    return KEEL_STATUS_OK;
}

static keel_status npu_stream_destroy(int32_t device, keel_stream stream)
{
    keel_status st = npu_enter(device, "stream_destroy");

    if (st)
        return st;
    if (!stream)
        return npu_fail(KEEL_STATUS_INVALID_HANDLE,
                        "stream_destroy: the default stream of npu:%d cannot "
                        "be destroyed",
                        (int)device);
    if (!npu_reg_drop(&npu_g.handles, (uintptr_t)stream, device,
                      NPU_KIND_STREAM, NULL))
        return npu_fail(KEEL_STATUS_INVALID_HANDLE,
                        "stream_destroy: %p is not a live stream of npu:%d",
                        (void *)stream, (int)device);
    return stream_unmake(stream);
}

void npu_stream_note(struct keel_stream_s *s)
{
    uint64_t t = atomic_fetch_add(&npu_g.dev[s->device].ticket, 1) + 1;

    pthread_mutex_lock(&s->mu);
    if (t > s->last)
        s->last = t;
    pthread_mutex_unlock(&s->mu);
}

static void note_done(struct keel_stream_s *s, uint64_t upto)
{
    pthread_mutex_lock(&s->mu);
    if (upto > s->done)
        s->done = upto;
    pthread_mutex_unlock(&s->mu);
}

keel_status npu_device_sync(int32_t device, const char *call)
{
    struct npu_device *d = &npu_g.dev[device];
    uint64_t upto = atomic_load(&d->ticket);
    keel_status st = npu_check(ACL.aclrtSynchronizeDevice(), device,
                               "aclrtSynchronizeDevice (%s)", call);

    if (st == KEEL_STATUS_OK) {
        uint64_t old = atomic_load(&d->synced);
        while (old < upto &&
               !atomic_compare_exchange_weak(&d->synced, &old, upto))
            ;
    }
    return st;
}

static keel_status npu_stream_synchronize(int32_t device, keel_stream stream)
{
    struct keel_stream_s *s;
    uint64_t upto;
    keel_status st = npu_enter(device, "stream_synchronize");

    if (st || (st = npu_stream_get(device, stream, "stream_synchronize", &s)))
        return st;
    pthread_mutex_lock(&s->mu);
    upto = s->last;
    pthread_mutex_unlock(&s->mu);
    st = npu_check(ACL.aclrtSynchronizeStream(s->s), device,
                   "aclrtSynchronizeStream");
    if (st == KEEL_STATUS_OK)
        note_done(s, upto);
    return st;
}

/* OK when the event has completed, NOT_READY when not, or the error. */
static keel_status event_done(int32_t device, aclrtEvent e)
{
    aclrtEventRecordedStatus rs = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    keel_status st = npu_check(ACL.aclrtQueryEventStatus(e, &rs), device,
                               "aclrtQueryEventStatus");

    if (st)
        return st;
    return rs == ACL_EVENT_RECORDED_STATUS_COMPLETE ? KEEL_STATUS_OK
                                                    : KEEL_STATUS_NOT_READY;
}

/* Nothing enqueued since the stream or the device was last known idle:
 * OK at once. Otherwise a marker event recorded after the latest work
 * (once per new work) says whether it has run. */
static keel_status npu_stream_query(int32_t device, keel_stream stream)
{
    struct keel_stream_s *s;
    keel_status st = npu_enter(device, "stream_query");

    if (st || (st = npu_stream_get(device, stream, "stream_query", &s)))
        return st;
    pthread_mutex_lock(&s->mu);
    if (s->last <= s->done || s->last <= atomic_load(&npu_g.dev[device].synced))
        goto out;
    if (!s->marker)
        st = npu_check(ACL.aclrtCreateEvent(&s->marker), device,
                       "aclrtCreateEvent (stream_query's marker)");
    if (!st && s->marker_at != s->last) {
        st = npu_check(ACL.aclrtRecordEvent(s->marker, s->s), device,
                       "aclrtRecordEvent (stream_query's marker)");
        if (!st)
            s->marker_at = s->last;
    }
    if (!st)
        st = event_done(device, s->marker);
    if (!st && s->marker_at > s->done)
        s->done = s->marker_at;
out:
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* ---- host functions --------------------------------------------------------- */

/* The stream's reporting thread: runs the callbacks ACL hands it. */
static void *reporter_main(void *arg)
{
    struct keel_stream_s *s = arg;

    if (npu_use(s->device) != KEEL_STATUS_OK)
        return NULL;
    while (!atomic_load(&s->stop)) {
        aclError e = ACL.aclrtProcessReport(NPU_REPORT_WAIT_MS);
        if (e != ACL_SUCCESS && e != ACL_ERROR_WAIT_CALLBACK_TIMEOUT) {
            /* e.g. not subscribed yet: do not spin */
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

static keel_status start_reporter(struct keel_stream_s *s)
{
    int rc;

    atomic_store(&s->stop, false);
    rc = pthread_create(&s->reporter, NULL, reporter_main, s);
    if (rc)
        return npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "launch_host_func on npu:%d: no thread for the "
                        "stream's host functions (%s)",
                        (int)s->device, strerror(rc));
    keel_status st = npu_check(
        ACL.aclrtSubscribeReport((uint64_t)s->reporter, s->s), s->device,
        "aclrtSubscribeReport");
    if (st) {
        atomic_store(&s->stop, true);
        pthread_join(s->reporter, NULL);
        return st;
    }
    s->reporting = true;
    return KEEL_STATUS_OK;
}

static keel_status npu_launch_host_func(int32_t device, keel_stream stream,
                                        keel_host_fn fn, void *user_data)
{
    struct keel_stream_s *s;
    keel_status st = npu_enter(device, "launch_host_func");

    if (st || (st = npu_stream_get(device, stream, "launch_host_func", &s)))
        return st;
    if (!fn)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "launch_host_func: fn is NULL");
    if (!npu_g.callbacks)
        return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                        "launch_host_func: this libascendcl.so lacks "
                        "aclrtLaunchCallback or its report calls");
    pthread_mutex_lock(&s->mu);
    if (!s->reporting)
        st = start_reporter(s);
    pthread_mutex_unlock(&s->mu);
    if (st)
        return st;
    st = npu_check(ACL.aclrtLaunchCallback(fn, user_data, ACL_CALLBACK_BLOCK,
                                           s->s),
                   device, "aclrtLaunchCallback(BLOCK)");
    if (!st)
        npu_stream_note(s);
    return st;
}

/* ---- events ------------------------------------------------------------------ */

/* The event of `device` (any device when < 0) behind a handle. */
static keel_status event_get(int32_t device, keel_event event,
                             const char *call, struct keel_event_s **out)
{
    if (!event || !npu_reg_get(&npu_g.handles, (uintptr_t)event, 1, device,
                               NPU_KIND_EVENT, NULL)) {
        if (device < 0)
            return npu_fail(KEEL_STATUS_INVALID_HANDLE,
                            "%s: %p is not a live event of the npu plugin",
                            call, (void *)event);
        return npu_fail(KEEL_STATUS_INVALID_HANDLE,
                        "%s: %p is not a live event of npu:%d", call,
                        (void *)event, (int)device);
    }
    *out = event;
    return KEEL_STATUS_OK;
}

static keel_status npu_event_create(int32_t device, keel_event *event)
{
    struct keel_event_s *ev;
    keel_status st;

    if (!event)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "event_create: event is NULL");
    *event = NULL;
    if ((st = npu_enter(device, "event_create")))
        return st;
    ev = calloc(1, sizeof(*ev));
    if (!ev)
        return npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "event_create: no host memory");
    ev->device = device;
    st = npu_check(ACL.aclrtCreateEvent(&ev->e), device, "aclrtCreateEvent");
    if (st) {
        free(ev);
        return st;
    }
    struct npu_obj o = {.base = (uintptr_t)ev, .size = 1, .device = device,
                        .kind = NPU_KIND_EVENT};
    if (npu_reg_put(&npu_g.handles, &o)) {
        ACL.aclrtDestroyEvent(ev->e);
        free(ev);
        return npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "event_create: no host memory to track the event");
    }
    *event = ev;
    return KEEL_STATUS_OK;
}

/* ACL asks that an event's work is done before it is destroyed. */
static keel_status event_unmake(struct keel_event_s *ev)
{
    keel_status st = KEEL_STATUS_OK;

    if (atomic_load(&ev->recorded))
        st = npu_check(ACL.aclrtSynchronizeEvent(ev->e), ev->device,
                       "aclrtSynchronizeEvent (before destroying it)");
    keel_status st2 = npu_check(ACL.aclrtDestroyEvent(ev->e), ev->device,
                                "aclrtDestroyEvent");
    free(ev);
    return st ? st : st2;
}

static keel_status npu_event_destroy(int32_t device, keel_event event)
{
    keel_status st = npu_enter(device, "event_destroy");

    if (st)
        return st;
    if (!event || !npu_reg_drop(&npu_g.handles, (uintptr_t)event, device,
                                NPU_KIND_EVENT, NULL))
        return npu_fail(KEEL_STATUS_INVALID_HANDLE,
                        "event_destroy: %p is not a live event of npu:%d",
                        (void *)event, (int)device);
    return event_unmake(event);
}

static keel_status npu_event_record(int32_t device, keel_event event,
                                    keel_stream stream)
{
    struct keel_event_s *ev;
    struct keel_stream_s *s;
    keel_status st = npu_enter(device, "event_record");

    if (st || (st = event_get(device, event, "event_record", &ev)) ||
        (st = npu_stream_get(device, stream, "event_record", &s)))
        return st;
    st = npu_check(ACL.aclrtRecordEvent(ev->e, s->s), device,
                   "aclrtRecordEvent");
    if (!st) {
        atomic_store(&ev->recorded, true);
        npu_stream_note(s);
    }
    return st;
}

static keel_status npu_event_query(int32_t device, keel_event event)
{
    struct keel_event_s *ev;
    keel_status st = npu_enter(device, "event_query");

    if (st || (st = event_get(device, event, "event_query", &ev)))
        return st;
    if (!atomic_load(&ev->recorded))
        return KEEL_STATUS_OK;
    return event_done(device, ev->e);
}

static keel_status npu_event_synchronize(int32_t device, keel_event event)
{
    struct keel_event_s *ev;
    keel_status st = npu_enter(device, "event_synchronize");

    if (st || (st = event_get(device, event, "event_synchronize", &ev)))
        return st;
    if (!atomic_load(&ev->recorded))
        return KEEL_STATUS_OK;
    return npu_check(ACL.aclrtSynchronizeEvent(ev->e), device,
                     "aclrtSynchronizeEvent");
}

static keel_status npu_stream_wait_event(int32_t device, keel_stream stream,
                                         keel_event event)
{
    struct keel_stream_s *s;
    struct keel_event_s *ev;
    keel_status st = npu_enter(device, "stream_wait_event");

    if (st || (st = npu_stream_get(device, stream, "stream_wait_event", &s)) ||
        (st = event_get(-1, event, "stream_wait_event", &ev)))
        return st;
    if (!atomic_load(&ev->recorded))
        return KEEL_STATUS_OK; /* never recorded: complete */
    st = npu_check(ACL.aclrtStreamWaitEvent(s->s, ev->e), device,
                   "aclrtStreamWaitEvent (event of npu:%d)", (int)ev->device);
    if (!st)
        npu_stream_note(s);
    return st;
}

static keel_status npu_event_elapsed_ms(int32_t device, keel_event start,
                                        keel_event end, float *ms)
{
    struct keel_event_s *a, *b;
    keel_status st = npu_enter(device, "event_elapsed_ms");

    if (st || (st = event_get(device, start, "event_elapsed_ms", &a)) ||
        (st = event_get(device, end, "event_elapsed_ms", &b)))
        return st;
    if (!ms)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "event_elapsed_ms: ms is NULL");
    if (!ACL.aclrtEventElapsedTime)
        return npu_fail(KEEL_STATUS_NOT_SUPPORTED,
                        "event_elapsed_ms: this libascendcl.so lacks "
                        "aclrtEventElapsedTime");
    if (!atomic_load(&a->recorded) || !atomic_load(&b->recorded))
        return npu_fail(KEEL_STATUS_INVALID_STATE,
                        "event_elapsed_ms: the %s event was never recorded",
                        atomic_load(&a->recorded) ? "end" : "start");
    if ((st = event_done(device, a->e)) || (st = event_done(device, b->e)))
        return st;
    return npu_check(ACL.aclrtEventElapsedTime(ms, a->e, b->e), device,
                     "aclrtEventElapsedTime");
}

/* ---- finalize ------------------------------------------------------------------ */

void npu_stream_finalize(void)
{
    struct npu_obj o;

    while (npu_reg_pop(&npu_g.handles, NPU_KIND_STREAM, &o))
        if (npu_use(o.device) == KEEL_STATUS_OK)
            stream_unmake((struct keel_stream_s *)o.base);
    while (npu_reg_pop(&npu_g.handles, NPU_KIND_EVENT, &o))
        if (npu_use(o.device) == KEEL_STATUS_OK)
            event_unmake((struct keel_event_s *)o.base);
    for (int32_t i = 0; i < npu_g.ndev; i++) {
        if (npu_g.dev[i].def && npu_use(i) == KEEL_STATUS_OK)
            stream_unmake(npu_g.dev[i].def);
        npu_g.dev[i].def = NULL;
    }
}

const keel_stream_ops npu_stream_ops = {
    .header = KEEL_TABLE_HEADER(keel_stream_ops),
    .stream_create = npu_stream_create,
    .stream_destroy = npu_stream_destroy,
    .stream_synchronize = npu_stream_synchronize,
    .stream_query = npu_stream_query,
    .stream_wait_event = npu_stream_wait_event,
    .launch_host_func = npu_launch_host_func,
    .event_create = npu_event_create,
    .event_destroy = npu_event_destroy,
    .event_record = npu_event_record,
    .event_query = npu_event_query,
    .event_synchronize = npu_event_synchronize,
    .event_elapsed_ms = npu_event_elapsed_ms,
};
