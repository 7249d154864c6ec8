/*
 * keel Cambricon MLU plugin — keel streams are CNRT queues, keel events are
 * CNRT notifiers. A device's default keel stream (NULL) is a queue the
 * plugin makes at init, never CNRT's own default queue. Host functions are
 * cnrtInvokeHostFunc, offered when the library has it.
 */
#include <stdlib.h>

#include "mlu_internal.h"

keel_status mlu_queue_of(int32_t dev, keel_stream s, const char *call,
                         struct keel_stream_s **out)
{
    if (!s) {
        *out = mlu.dev[dev].def;
        return KEEL_STATUS_OK;
    }
    if (!mlu_find((uintptr_t)s, 1, dev, MLU_QUEUE, NULL))
        return mlu_err(KEEL_STATUS_INVALID_HANDLE,
                       "%s: %p is not a live stream of mlu:%d", call, (void *)s,
                       (int)dev);
    *out = s;
    return KEEL_STATUS_OK;
}

static keel_status queue_new(int32_t dev, struct keel_stream_s **out)
{
    struct keel_stream_s *s = calloc(1, sizeof(*s));
    keel_status st;

    *out = NULL;
    if (!s)
        return mlu_err(KEEL_STATUS_OUT_OF_MEMORY, "stream: no host memory");
    s->dev = dev;
    st = MLU_RT(mlu.rt.cnrtQueueCreate(&s->q), dev, "cnrtQueueCreate");
    if (st) {
        free(s);
        return st;
    }
    *out = s;
    return KEEL_STATUS_OK;
}

/* Let the queue finish, then destroy it (the device is bound). */
static keel_status queue_end(struct keel_stream_s *s)
{
    keel_status st = MLU_RT(mlu.rt.cnrtQueueSync(s->q), s->dev,
                            "cnrtQueueSync (before destroying the queue)");
    keel_status st2 = MLU_RT(mlu.rt.cnrtQueueDestroy(s->q), s->dev,
                             "cnrtQueueDestroy");

    free(s);
    return st ? st : st2;
}

keel_status mlu_queue_default(int32_t dev)
{
    return queue_new(dev, &mlu.dev[dev].def);
}

static keel_status mlu_stream_create(int32_t device, int32_t priority,
                                     keel_stream *stream)
{
    struct keel_stream_s *s;
    keel_status st;

    (void)priority; /* one priority level */
    if (!stream)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "stream_create: stream is NULL");
    *stream = NULL;
    if ((st = mlu_enter(device, "stream_create")) ||
        (st = queue_new(device, &s)))
        return st;
    if (!mlu_track((uintptr_t)s, 1, device, MLU_QUEUE)) {
        queue_end(s);
        return mlu_err(KEEL_STATUS_OUT_OF_MEMORY,
                       "stream_create: no host memory to track the stream");
    }
    *stream = s;
    return KEEL_STATUS_OK;
}

static keel_status mlu_stream_destroy(int32_t device, keel_stream stream)
{
    keel_status st = mlu_enter(device, "stream_destroy");

    if (st)
        return st;
    if (!stream || !mlu_forget((uintptr_t)stream, device, MLU_QUEUE, NULL))
        return mlu_err(KEEL_STATUS_INVALID_HANDLE,
                       "stream_destroy: %p is not a stream mlu:%d made",
                       (void *)stream, (int)device);
    return queue_end(stream);
}

static keel_status mlu_stream_synchronize(int32_t device, keel_stream stream)
{
    struct keel_stream_s *s;
    keel_status st = mlu_enter(device, "stream_synchronize");

    if (st || (st = mlu_queue_of(device, stream, "stream_synchronize", &s)))
        return st;
    return MLU_RT(mlu.rt.cnrtQueueSync(s->q), device, "cnrtQueueSync");
}

static keel_status mlu_stream_query(int32_t device, keel_stream stream)
{
    struct keel_stream_s *s;
    cnrtRet_t r;
    keel_status st = mlu_enter(device, "stream_query");

    if (st || (st = mlu_queue_of(device, stream, "stream_query", &s)))
        return st;
    r = mlu.rt.cnrtQueueQuery(s->q);
    if (r == cnrtErrorNotReady)
        return KEEL_STATUS_NOT_READY;
    return MLU_RT(r, device, "cnrtQueueQuery");
}

static keel_status mlu_launch_host_func(int32_t device, keel_stream stream,
                                        keel_host_fn fn, void *user_data)
{
    struct keel_stream_s *s;
    keel_status st = mlu_enter(device, "launch_host_func");

    if (st || (st = mlu_queue_of(device, stream, "launch_host_func", &s)))
        return st;
    if (!fn)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "launch_host_func: fn is NULL");
    if (!mlu.rt.cnrtInvokeHostFunc)
        return mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "launch_host_func: this libcnrt.so has no "
                       "cnrtInvokeHostFunc");
    return MLU_RT(mlu.rt.cnrtInvokeHostFunc(s->q, fn, user_data), device,
                  "cnrtInvokeHostFunc");
}

/* ---- events ------------------------------------------------------------- */

/* dev < 0: an event of any device (stream_wait_event). */
static keel_status event_of(int32_t dev, keel_event e, const char *call,
                            struct keel_event_s **out)
{
    if (!e || !mlu_find((uintptr_t)e, 1, dev, MLU_NOTIFIER, NULL))
        return mlu_err(KEEL_STATUS_INVALID_HANDLE,
                       "%s: %p is not a live event of %s", call, (void *)e,
                       dev < 0 ? "the mlu plugin" : "that device");
    *out = e;
    return KEEL_STATUS_OK;
}

static keel_status mlu_event_create(int32_t device, keel_event *event)
{
    struct keel_event_s *e;
    keel_status st;

    if (!event)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "event_create: event is NULL");
    *event = NULL;
    if ((st = mlu_enter(device, "event_create")))
        return st;
    if (!(e = calloc(1, sizeof(*e))))
        return mlu_err(KEEL_STATUS_OUT_OF_MEMORY, "event_create: no memory");
    e->dev = device;
    if ((st = MLU_RT(mlu.rt.cnrtNotifierCreate(&e->n), device,
                     "cnrtNotifierCreate"))) {
        free(e);
        return st;
    }
    if (!mlu_track((uintptr_t)e, 1, device, MLU_NOTIFIER)) {
        mlu.rt.cnrtNotifierDestroy(e->n);
        free(e);
        return mlu_err(KEEL_STATUS_OUT_OF_MEMORY,
                       "event_create: no host memory to track the event");
    }
    *event = e;
    return KEEL_STATUS_OK;
}

static keel_status event_end(struct keel_event_s *e)
{
    keel_status st = KEEL_STATUS_OK, st2;

    if (atomic_load(&e->placed))
        st = MLU_RT(mlu.rt.cnrtWaitNotifier(e->n), e->dev,
                    "cnrtWaitNotifier (before destroying the notifier)");
    st2 = MLU_RT(mlu.rt.cnrtNotifierDestroy(e->n), e->dev,
                 "cnrtNotifierDestroy");
    free(e);
    return st ? st : st2;
}

static keel_status mlu_event_destroy(int32_t device, keel_event event)
{
    keel_status st = mlu_enter(device, "event_destroy");

    if (st)
        return st;
    if (!event || !mlu_forget((uintptr_t)event, device, MLU_NOTIFIER, NULL))
        return mlu_err(KEEL_STATUS_INVALID_HANDLE,
                       "event_destroy: %p is not a live event of mlu:%d",
                       (void *)event, (int)device);
    return event_end(event);
}

static keel_status mlu_event_record(int32_t device, keel_event event,
                                    keel_stream stream)
{
    struct keel_event_s *e;
    struct keel_stream_s *s;
    keel_status st = mlu_enter(device, "event_record");

    if (st || (st = event_of(device, event, "event_record", &e)) ||
        (st = mlu_queue_of(device, stream, "event_record", &s)))
        return st;
    st = MLU_RT(mlu.rt.cnrtPlaceNotifier(e->n, s->q), device,
                "cnrtPlaceNotifier");
    if (!st)
        atomic_store(&e->placed, true);
    return st;
}

static keel_status mlu_event_query(int32_t device, keel_event event)
{
    struct keel_event_s *e;
    cnrtRet_t r;
    keel_status st = mlu_enter(device, "event_query");

    if (st || (st = event_of(device, event, "event_query", &e)) ||
        !atomic_load(&e->placed))
        return st; /* never recorded: complete */
    r = mlu.rt.cnrtQueryNotifier(e->n);
    if (r == cnrtErrorNotReady)
        return KEEL_STATUS_NOT_READY;
    return MLU_RT(r, device, "cnrtQueryNotifier");
}

static keel_status mlu_event_synchronize(int32_t device, keel_event event)
{
    struct keel_event_s *e;
    keel_status st = mlu_enter(device, "event_synchronize");

    if (st || (st = event_of(device, event, "event_synchronize", &e)) ||
        !atomic_load(&e->placed))
        return st;
    return MLU_RT(mlu.rt.cnrtWaitNotifier(e->n), device, "cnrtWaitNotifier");
}

static keel_status mlu_stream_wait_event(int32_t device, keel_stream stream,
                                         keel_event event)
{
    struct keel_stream_s *s;
    struct keel_event_s *e;
    keel_status st = mlu_enter(device, "stream_wait_event");

    if (st || (st = mlu_queue_of(device, stream, "stream_wait_event", &s)) ||
        (st = event_of(-1, event, "stream_wait_event", &e)) ||
        !atomic_load(&e->placed))
        return st;
    return MLU_RT(mlu.rt.cnrtQueueWaitNotifier(e->n, s->q, 0), device,
                  "cnrtQueueWaitNotifier (notifier of mlu:%d)", (int)e->dev);
}

static keel_status mlu_event_elapsed_ms(int32_t device, keel_event start,
                                        keel_event end, float *ms)
{
    struct keel_event_s *a, *b;
    float t = 0;
    keel_status st = mlu_enter(device, "event_elapsed_ms");

    if (st || (st = event_of(device, start, "event_elapsed_ms", &a)) ||
        (st = event_of(device, end, "event_elapsed_ms", &b)))
        return st;
    if (!ms)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "event_elapsed_ms: ms is NULL");
    if (!atomic_load(&a->placed) || !atomic_load(&b->placed))
        return mlu_err(KEEL_STATUS_INVALID_STATE,
                       "event_elapsed_ms: an event was never recorded");
    /* the ABI answers NOT_READY for unfinished events, without waiting */
    for (int i = 0; i < 2; i++) {
        cnrtRet_t r = mlu.rt.cnrtQueryNotifier(i ? b->n : a->n);
        if (r == cnrtErrorNotReady)
            return KEEL_STATUS_NOT_READY;
        if ((st = MLU_RT(r, device, "cnrtQueryNotifier")))
            return st;
    }
    if (mlu.rt.cnrtNotifierElapsedTime)
        st = MLU_RT(mlu.rt.cnrtNotifierElapsedTime(a->n, b->n, &t), device,
                    "cnrtNotifierElapsedTime");
    else if (mlu.rt.cnrtNotifierDuration) {
        st = MLU_RT(mlu.rt.cnrtNotifierDuration(a->n, b->n, &t), device,
                    "cnrtNotifierDuration");
        t /= 1000.0f; /* microseconds */
    } else
        st = mlu_err(KEEL_STATUS_NOT_SUPPORTED,
                     "event_elapsed_ms: this libcnrt.so has neither "
                     "cnrtNotifierElapsedTime nor cnrtNotifierDuration");
    if (!st)
        *ms = t;
    return st;
}

void mlu_queue_finalize(void)
{
    struct mlu_item it;

    while (mlu_take_any(MLU_QUEUE, &it))
        if (mlu_bind(it.dev) == KEEL_STATUS_OK)
            queue_end((struct keel_stream_s *)it.base);
    while (mlu_take_any(MLU_NOTIFIER, &it))
        if (mlu_bind(it.dev) == KEEL_STATUS_OK)
            event_end((struct keel_event_s *)it.base);
    for (int32_t i = 0; i < mlu.count; i++) {
        if (mlu.dev[i].def && mlu_bind(i) == KEEL_STATUS_OK)
            queue_end(mlu.dev[i].def);
        mlu.dev[i].def = NULL;
    }
}

const keel_stream_ops mlu_stream_ops = {
    .header = KEEL_TABLE_HEADER(keel_stream_ops),
    .stream_create = mlu_stream_create,
    .stream_destroy = mlu_stream_destroy,
    .stream_synchronize = mlu_stream_synchronize,
    .stream_query = mlu_stream_query,
    .stream_wait_event = mlu_stream_wait_event,
    .launch_host_func = mlu_launch_host_func,
    .event_create = mlu_event_create,
    .event_destroy = mlu_event_destroy,
    .event_record = mlu_event_record,
    .event_query = mlu_event_query,
    .event_synchronize = mlu_event_synchronize,
    .event_elapsed_ms = mlu_event_elapsed_ms,
};
