/*
 * keel CUDA plugin — stream and event group.
 *
 * A keel_stream is a struct keel_stream_s (the cudaStream_t and its
 * device); a keel_event a struct keel_event_s (the cudaEvent_t, its device
 * and whether it was ever recorded, which CUDA does not say but
 * event_elapsed_ms must: INVALID_STATE). Both are registered in
 * cuda_g.handles when created, and every call looks the handle up there
 * before touching it, so a destroyed handle, a handle of another device or
 * a pointer that never was a handle gives INVALID_HANDLE.
 *
 * NULL names the device's default stream, the legacy stream
 * (cudaStreamLegacy): one per device, shared by all host threads.
 * Created streams are cudaStreamNonBlocking (see cuda_internal.h).
 */
#include <inttypes.h>
#include <stdlib.h>

#include "cuda_internal.h"

/* ---- handle lookup ------------------------------------------------------- */

static keel_status bad_handle(const char *call, int32_t device,
                              const char *what, const void *h, int32_t kind)
{
    struct cuda_entry e;

    if (cuda_registry_find(&cuda_g.handles, (uintptr_t)h, &e) &&
        e.kind == kind)
        return cuda_fail(KEEL_STATUS_INVALID_HANDLE,
                         "%s(gpu:%d): %s %p belongs to gpu:%d", call,
                         (int)device, what, h, (int)e.device);
    return cuda_fail(KEEL_STATUS_INVALID_HANDLE,
                     "%s(gpu:%d): %s %p is not a live %s of this plugin", call,
                     (int)device, what, h, what);
}

/* A registered handle of `kind` on `device` (device < 0: any device). */
static bool handle_ok(const void *h, int32_t kind, int32_t device)
{
    struct cuda_entry e;

    if (!cuda_registry_find(&cuda_g.handles, (uintptr_t)h, &e))
        return false;
    return e.kind == kind && (device < 0 || e.device == device);
}

keel_status cuda_stream_resolve(int32_t device, keel_stream stream,
                                const char *call, cudaStream_t *out)
{
    if (!stream) {
        *out = cudaStreamLegacy;
        return KEEL_STATUS_OK;
    }
    if (!handle_ok(stream, CUDA_KIND_STREAM, device))
        return bad_handle(call, device, "stream", stream, CUDA_KIND_STREAM);
    *out = stream->cu;
    return KEEL_STATUS_OK;
}

static keel_status event_resolve(int32_t device, keel_event event,
                                 const char *call, bool any_device)
{
    if (!event)
        return cuda_fail(KEEL_STATUS_INVALID_HANDLE,
                         "%s(gpu:%d): event is NULL", call, (int)device);
    if (!handle_ok(event, CUDA_KIND_EVENT, any_device ? -1 : device))
        return bad_handle(call, device, "event", event, CUDA_KIND_EVENT);
    return KEEL_STATUS_OK;
}

static keel_status register_handle(const char *call, int32_t device,
                                   const void *h, int32_t kind)
{
    struct cuda_entry e = {
        .key = (uintptr_t)h, .device = device, .kind = kind};

    if (cuda_registry_add(&cuda_g.handles, &e) == 0)
        return KEEL_STATUS_OK;
    return cuda_fail(KEEL_STATUS_OUT_OF_MEMORY,
                     "%s(gpu:%d): out of host memory for the plugin's handle "
                     "table",
                     call, (int)device);
}

/* ---- streams ------------------------------------------------------------- */

static int clamp_priority(int32_t priority, int least, int greatest)
{
    /* CUDA: lower is higher priority, range [greatest, least]. */
    if (priority > least)
        return least;
    if (priority < greatest)
        return greatest;
    return (int)priority;
}

static keel_status cuda_stream_create(int32_t device, int32_t priority,
                                      keel_stream *stream)
{
    struct keel_stream_s *s = NULL;
    int least = 0, greatest = 0;
    keel_status st;

    if (!stream)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "stream_create(gpu:%d): stream is NULL", (int)device);
    *stream = NULL;
    st = cuda_enter(device, "stream_create");
    if (st == KEEL_STATUS_OK)
        st = cuda_priority_range(device, &least, &greatest);
    if (st != KEEL_STATUS_OK)
        return st;
    s = calloc(1, sizeof(*s));
    if (!s)
        return cuda_fail(KEEL_STATUS_OUT_OF_MEMORY,
                         "stream_create(gpu:%d): out of host memory",
                         (int)device);
    s->device = device;
    s->priority = clamp_priority(priority, least, greatest);
    st = cuda_check(cudaStreamCreateWithPriority(&s->cu, cudaStreamNonBlocking,
                                                 s->priority),
                    device,
                    "cudaStreamCreateWithPriority(cudaStreamNonBlocking, "
                    "priority=%d)",
                    s->priority);
    if (st != KEEL_STATUS_OK)
        goto err_free;
    st = register_handle("stream_create", device, s, CUDA_KIND_STREAM);
    if (st != KEEL_STATUS_OK)
        goto err_destroy;
    *stream = s;
    return KEEL_STATUS_OK;

err_destroy:
    (void)cudaStreamDestroy(s->cu);
    (void)cudaGetLastError();
err_free:
    free(s);
    return st;
}

/* Wait for the stream, destroy it, free the wrapper; first error wins. */
static keel_status stream_release(struct keel_stream_s *s)
{
    keel_status st, st2;

    st = cuda_check(cudaStreamSynchronize(s->cu), s->device,
                    "cudaStreamSynchronize(%p) before destroying it",
                    (void *)s);
    st2 = cuda_check(cudaStreamDestroy(s->cu), s->device,
                     "cudaStreamDestroy(%p)", (void *)s);
    free(s);
    return st != KEEL_STATUS_OK ? st : st2;
}

static keel_status cuda_stream_destroy(int32_t device, keel_stream stream)
{
    keel_status st = cuda_enter(device, "stream_destroy");

    if (st != KEEL_STATUS_OK)
        return st;
    if (!stream)
        return cuda_fail(KEEL_STATUS_INVALID_HANDLE,
                         "stream_destroy(gpu:%d): the default stream (NULL) "
                         "cannot be destroyed",
                         (int)device);
    if (!cuda_registry_take(&cuda_g.handles, (uintptr_t)stream,
                            CUDA_KIND_STREAM, device, NULL))
        return bad_handle("stream_destroy", device, "stream", stream,
                          CUDA_KIND_STREAM);
    return stream_release(stream);
}

static keel_status cuda_stream_synchronize(int32_t device, keel_stream stream)
{
    cudaStream_t cs = NULL;
    keel_status st = cuda_enter(device, "stream_synchronize");

    if (st == KEEL_STATUS_OK)
        st = cuda_stream_resolve(device, stream, "stream_synchronize", &cs);
    if (st != KEEL_STATUS_OK)
        return st;
    return cuda_check(cudaStreamSynchronize(cs), device,
                      "cudaStreamSynchronize(%p)", (void *)stream);
}

/* NOT_READY is an answer, not an error: no message for it. */
static keel_status query_result(cudaError_t err, int32_t device,
                                const char *what, const void *h)
{
    if (err == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return KEEL_STATUS_NOT_READY;
    }
    return cuda_check(err, device, "%s(%p)", what, h);
}

static keel_status cuda_stream_query(int32_t device, keel_stream stream)
{
    cudaStream_t cs = NULL;
    keel_status st = cuda_enter(device, "stream_query");

    if (st == KEEL_STATUS_OK)
        st = cuda_stream_resolve(device, stream, "stream_query", &cs);
    if (st != KEEL_STATUS_OK)
        return st;
    return query_result(cudaStreamQuery(cs), device, "cudaStreamQuery",
                        (void *)stream);
}

/*
 * The event may belong to another device of this plugin: CUDA orders
 * streams on events across devices, and cross-device waits are what peer
 * copies and multi-device work need.
 */
static keel_status cuda_stream_wait_event(int32_t device, keel_stream stream,
                                          keel_event event)
{
    cudaStream_t cs = NULL;
    keel_status st = cuda_enter(device, "stream_wait_event");

    if (st == KEEL_STATUS_OK)
        st = cuda_stream_resolve(device, stream, "stream_wait_event", &cs);
    if (st == KEEL_STATUS_OK)
        st = event_resolve(device, event, "stream_wait_event", true);
    if (st != KEEL_STATUS_OK)
        return st;
    return cuda_check(cudaStreamWaitEvent(cs, event->cu, 0), device,
                      "cudaStreamWaitEvent(stream=%p, event=%p)",
                      (void *)stream, (void *)event);
}

#ifdef KEEL_GPU_HIP
struct host_call {
    keel_host_fn fn;
    void *user_data;
};

static void host_call_run(hipStream_t s, hipError_t status, void *arg)
{
    struct host_call *c = arg;

    (void)s;
    (void)status; /* as with CUDA's host functions: run in stream order */
    c->fn(c->user_data);
    free(c);
}
#endif

static keel_status cuda_launch_host_func(int32_t device, keel_stream stream,
                                         keel_host_fn fn, void *user_data)
{
    cudaStream_t cs = NULL;
    keel_status st;

    if (!fn)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "launch_host_func(gpu:%d): fn is NULL", (int)device);
    st = cuda_enter(device, "launch_host_func");
    if (st == KEEL_STATUS_OK)
        st = cuda_stream_resolve(device, stream, "launch_host_func", &cs);
    if (st != KEEL_STATUS_OK)
        return st;
#ifdef KEEL_GPU_HIP
    /* HIP 5.2 declares hipLaunchHostFunc but its library does not export
     * it: the stream callback it is built on is used instead, through a
     * trampoline that frees itself after the call. */
    {
        struct host_call *c = malloc(sizeof(*c));
        hipError_t err;

        if (!c)
            return cuda_fail(KEEL_STATUS_OUT_OF_MEMORY,
                             "launch_host_func(gpu:%d): out of host memory",
                             (int)device);
        c->fn = fn;
        c->user_data = user_data;
        err = hipStreamAddCallback(cs, host_call_run, c, 0);
        if (err != hipSuccess)
            free(c);
        return cuda_check(err, device, "hipStreamAddCallback(stream=%p)",
                          (void *)stream);
    }
#else
    /* keel_host_fn and cudaHostFn_t are both void (*)(void *). */
    return cuda_check(cudaLaunchHostFunc(cs, fn, user_data), device,
                      "cudaLaunchHostFunc(stream=%p)", (void *)stream);
#endif
}

/* ---- events -------------------------------------------------------------- */

static keel_status cuda_event_create(int32_t device, keel_event *event)
{
    struct keel_event_s *ev;
    keel_status st;

    if (!event)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "event_create(gpu:%d): event is NULL", (int)device);
    *event = NULL;
    st = cuda_enter(device, "event_create");
    if (st != KEEL_STATUS_OK)
        return st;
    ev = calloc(1, sizeof(*ev));
    if (!ev)
        return cuda_fail(KEEL_STATUS_OUT_OF_MEMORY,
                         "event_create(gpu:%d): out of host memory",
                         (int)device);
    ev->device = device;
    atomic_init(&ev->recorded, false);
    /* cudaEventDefault: timing enabled (event_elapsed_ms). */
    st = cuda_check(cudaEventCreateWithFlags(&ev->cu, cudaEventDefault),
                    device, "cudaEventCreateWithFlags(cudaEventDefault)");
    if (st != KEEL_STATUS_OK)
        goto err_free;
    st = register_handle("event_create", device, ev, CUDA_KIND_EVENT);
    if (st != KEEL_STATUS_OK)
        goto err_destroy;
    *event = ev;
    return KEEL_STATUS_OK;

err_destroy:
    (void)cudaEventDestroy(ev->cu);
    (void)cudaGetLastError();
err_free:
    free(ev);
    return st;
}

static keel_status event_release(struct keel_event_s *ev)
{
    keel_status st = cuda_check(cudaEventDestroy(ev->cu), ev->device,
                                "cudaEventDestroy(%p)", (void *)ev);

    free(ev);
    return st;
}

static keel_status cuda_event_destroy(int32_t device, keel_event event)
{
    keel_status st = cuda_enter(device, "event_destroy");

    if (st != KEEL_STATUS_OK)
        return st;
    if (!cuda_registry_take(&cuda_g.handles, (uintptr_t)event,
                            CUDA_KIND_EVENT, device, NULL))
        return bad_handle("event_destroy", device, "event", event,
                          CUDA_KIND_EVENT);
    return event_release(event);
}

static keel_status cuda_event_record(int32_t device, keel_event event,
                                     keel_stream stream)
{
    cudaStream_t cs = NULL;
    keel_status st = cuda_enter(device, "event_record");

    if (st == KEEL_STATUS_OK)
        st = event_resolve(device, event, "event_record", false);
    if (st == KEEL_STATUS_OK)
        st = cuda_stream_resolve(device, stream, "event_record", &cs);
    if (st != KEEL_STATUS_OK)
        return st;
    st = cuda_check(cudaEventRecord(event->cu, cs), device,
                    "cudaEventRecord(event=%p, stream=%p)", (void *)event,
                    (void *)stream);
    if (st == KEEL_STATUS_OK)
        atomic_store(&event->recorded, true);
    return st;
}

static keel_status cuda_event_query(int32_t device, keel_event event)
{
    keel_status st = cuda_enter(device, "event_query");

    if (st == KEEL_STATUS_OK)
        st = event_resolve(device, event, "event_query", false);
    if (st != KEEL_STATUS_OK)
        return st;
    return query_result(cudaEventQuery(event->cu), device, "cudaEventQuery",
                        (void *)event);
}

static keel_status cuda_event_synchronize(int32_t device, keel_event event)
{
    keel_status st = cuda_enter(device, "event_synchronize");

    if (st == KEEL_STATUS_OK)
        st = event_resolve(device, event, "event_synchronize", false);
    if (st != KEEL_STATUS_OK)
        return st;
    return cuda_check(cudaEventSynchronize(event->cu), device,
                      "cudaEventSynchronize(%p)", (void *)event);
}

static keel_status check_recorded(int32_t device, keel_event event,
                                  const char *which)
{
    if (atomic_load(&event->recorded))
        return KEEL_STATUS_OK;
    return cuda_fail(KEEL_STATUS_INVALID_STATE,
                     "event_elapsed_ms(gpu:%d): the %s event %p was never "
                     "recorded",
                     (int)device, which, (void *)event);
}

static keel_status cuda_event_elapsed_ms(int32_t device, keel_event start,
                                         keel_event end, float *ms)
{
    cudaError_t err;
    keel_status st;

    if (!ms)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "event_elapsed_ms(gpu:%d): ms is NULL", (int)device);
    st = cuda_enter(device, "event_elapsed_ms");
    if (st == KEEL_STATUS_OK)
        st = event_resolve(device, start, "event_elapsed_ms", false);
    if (st == KEEL_STATUS_OK)
        st = event_resolve(device, end, "event_elapsed_ms", false);
    if (st == KEEL_STATUS_OK)
        st = check_recorded(device, start, "start");
    if (st == KEEL_STATUS_OK)
        st = check_recorded(device, end, "end");
    if (st != KEEL_STATUS_OK)
        return st;
    err = cudaEventElapsedTime(ms, start->cu, end->cu);
    if (err == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return KEEL_STATUS_NOT_READY;
    }
    return cuda_check(err, device, "cudaEventElapsedTime(start=%p, end=%p)",
                      (void *)start, (void *)end);
}

/* ---- finalize ------------------------------------------------------------ */

void cuda_stream_finalize(void)
{
    struct cuda_entry e;

    while (cuda_registry_pop(&cuda_g.handles, CUDA_KIND_STREAM, &e)) {
        struct keel_stream_s *s = (struct keel_stream_s *)e.key;

        if (cuda_use_device(s->device) != KEEL_STATUS_OK)
            (void)cudaGetLastError();
        (void)stream_release(s);
    }
    while (cuda_registry_pop(&cuda_g.handles, CUDA_KIND_EVENT, &e)) {
        struct keel_event_s *ev = (struct keel_event_s *)e.key;

        if (cuda_use_device(ev->device) != KEEL_STATUS_OK)
            (void)cudaGetLastError();
        (void)event_release(ev);
    }
}

const keel_stream_ops cuda_stream_ops = {
    .header = KEEL_TABLE_HEADER(keel_stream_ops),
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_synchronize = cuda_stream_synchronize,
    .stream_query = cuda_stream_query,
    .stream_wait_event = cuda_stream_wait_event,
    .launch_host_func = cuda_launch_host_func,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_synchronize = cuda_event_synchronize,
    .event_elapsed_ms = cuda_event_elapsed_ms,
};
