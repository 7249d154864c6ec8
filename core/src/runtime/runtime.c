/*
 * Checked wrappers over the device ABI: resolve the place, check that the
 * plugin provides the call, call it, and turn a failure into a message that
 * names the call, the device and the plugin.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime_internal.h"

keel_status keel__plugin_status(const struct keel_plugin *p, keel_place place,
                                const char *call, keel_status st,
                                bool not_ready_ok)
{
    char where[96];
    const char *msg;

    if (st == KEEL_STATUS_OK || (not_ready_ok && st == KEEL_STATUS_NOT_READY))
        return st;
    msg = keel__plugin_msg();
    keel__place_str(place, where, sizeof(where));
    return keel__error(st, "%s on %s (plugin %s): %s", call, where, p->name,
                       msg ? msg : keel_status_name(st));
}

keel_status keel__absent(const struct keel_plugin *p, const char *call)
{
    return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                       "plugin %s (%s) does not provide %s", p->name, p->path,
                       call);
}

/*
 * CALL(group, fn, args...): the body shared by every wrapper. Expects `p`
 * (resolved plugin) and `place` in scope; `ok_ready` says whether
 * NOT_READY is a normal answer.
 */
#define CALL_EX(ok_ready, grp, fn, ...)                                      \
    ((p)->grp.fn ? (keel__plugin_msg_clear(),                                \
                    keel__plugin_status(p, place, #grp "." #fn,             \
                                        (p)->grp.fn(__VA_ARGS__), ok_ready)) \
                 : keel__absent(p, #grp "." #fn))
#define CALL(grp, fn, ...) CALL_EX(false, grp, fn, __VA_ARGS__)

/*
 * TRACED_COPY / TRACED_SYNC: CALL, timed as one trace event when a trace
 * is recording (trace.c); otherwise one relaxed load more than CALL.
 */
#define TRACED_COPY(stream_, bytes_, grp, fn, ...)                          \
    do {                                                                     \
        uint64_t t0_ = keel__trace_begin();                                  \
        keel_status st_ = CALL(grp, fn, __VA_ARGS__);                        \
        if (t0_)                                                             \
            keel__trace_copy(#fn, place, (stream_), (bytes_), t0_);          \
        return st_;                                                          \
    } while (0)
#define TRACED_SYNC(stream_, grp, fn, ...)                                   \
    do {                                                                     \
        uint64_t t0_ = keel__trace_begin();                                  \
        keel_status st_ = CALL(grp, fn, __VA_ARGS__);                        \
        if (t0_)                                                             \
            keel__trace_sync(#fn, place, (stream_), t0_);                    \
        return st_;                                                          \
    } while (0)

#define RESOLVE()                                                            \
    struct keel_plugin *p = NULL;                                            \
    do {                                                                     \
        keel_status rs_ = keel__resolve(place, &p, __func__);               \
        if (rs_ != KEEL_STATUS_OK)                                           \
            return rs_;                                                      \
    } while (0)

#define NONNULL(arg)                                                         \
    do {                                                                     \
        if (!(arg))                                                          \
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,                 \
                               "%s: %s is NULL", __func__, #arg);            \
    } while (0)

/* ---- device -------------------------------------------------------------- */

/* Feature bits the plugin claims but whose calls it does not provide are
 * reported off: the core goes by what it can call. */
static uint32_t provided_features(const struct keel_plugin *p, uint32_t f)
{
    if (!p->memory.host_alloc || !p->memory.host_free)
        f &= ~(uint32_t)KEEL_FEATURE_PINNED_HOST;
    if (!p->memory.unified_alloc || !p->memory.unified_free)
        f &= ~(uint32_t)KEEL_FEATURE_UNIFIED_MEMORY;
    if (!p->memory.copy_peer)
        f &= ~(uint32_t)KEEL_FEATURE_PEER_ACCESS;
    if (!p->api.collective)
        f &= ~(uint32_t)KEEL_FEATURE_COLLECTIVES;
    if (!p->stream.event_elapsed_ms)
        f &= ~(uint32_t)KEEL_FEATURE_EVENT_TIMING;
    if (!p->stream.launch_host_func)
        f &= ~(uint32_t)KEEL_FEATURE_HOST_CALLBACK;
    if (!p->api.kernel)
        f &= ~(uint32_t)KEEL_FEATURE_KERNELS;
    return f;
}

keel_status keel_device_get_props(keel_place place, keel_device_props *props)
{
    keel_status st;

    RESOLVE();
    NONNULL(props);
    memset(props, 0, sizeof(*props));
    props->struct_size = sizeof(*props);
    st = CALL(device, get_device_props, place.device, props);
    if (st == KEEL_STATUS_OK)
        props->features = provided_features(p, props->features);
    return st;
}

keel_status keel_device_synchronize(keel_place place)
{
    RESOLVE();
    TRACED_SYNC(NULL, device, synchronize, place.device);
}

/* ---- memory -------------------------------------------------------------- */

keel_status keel_mem_alloc(keel_place place, uint64_t size, keel_dptr *ptr)
{
    RESOLVE();
    NONNULL(ptr);
    return CALL(memory, alloc, place.device, size, ptr);
}

keel_status keel_mem_free(keel_place place, keel_dptr ptr)
{
    RESOLVE();
    return CALL(memory, free, place.device, ptr);
}

keel_status keel_mem_register_host(keel_place place, void *host,
                                   uint64_t size, keel_dptr *dptr)
{
    RESOLVE();
    NONNULL(host);
    NONNULL(dptr);
    return CALL(memory, register_host, place.device, host, size, dptr);
}

keel_status keel_mem_unregister_host(keel_place place, keel_dptr dptr,
                                     uint64_t size)
{
    RESOLVE();
    return CALL(memory, unregister_host, place.device, dptr, size);
}

keel_status keel_mem_host_alloc(keel_place place, uint64_t size, void **ptr)
{
    RESOLVE();
    NONNULL(ptr);
    return CALL(memory, host_alloc, place.device, size, ptr);
}

keel_status keel_mem_host_free(keel_place place, void *ptr)
{
    RESOLVE();
    return CALL(memory, host_free, place.device, ptr);
}

keel_status keel_mem_unified_alloc(keel_place place, uint64_t size,
                                   keel_dptr *dptr, void **hptr)
{
    RESOLVE();
    NONNULL(dptr);
    NONNULL(hptr);
    return CALL(memory, unified_alloc, place.device, size, dptr, hptr);
}

keel_status keel_mem_unified_free(keel_place place, keel_dptr dptr)
{
    RESOLVE();
    return CALL(memory, unified_free, place.device, dptr);
}

keel_status keel_mem_set(keel_place place, keel_dptr dst, uint8_t value,
                         uint64_t size)
{
    RESOLVE();
    return CALL(memory, memset, place.device, dst, value, size);
}

keel_status keel_mem_set_async(keel_place place, keel_stream stream,
                               keel_dptr dst, uint8_t value, uint64_t size)
{
    RESOLVE();
    return CALL(memory, memset_async, place.device, stream, dst, value, size);
}

keel_status keel_mem_copy_h2d(keel_place place, keel_dptr dst,
                              const void *src, uint64_t size)
{
    RESOLVE();
    if (size)
        NONNULL(src);
    TRACED_COPY(NULL, size, memory, copy_h2d, place.device, dst, src, size);
}

keel_status keel_mem_copy_d2h(keel_place place, void *dst, keel_dptr src,
                              uint64_t size)
{
    RESOLVE();
    if (size)
        NONNULL(dst);
    TRACED_COPY(NULL, size, memory, copy_d2h, place.device, dst, src, size);
}

keel_status keel_mem_copy_d2d(keel_place place, keel_dptr dst, keel_dptr src,
                              uint64_t size)
{
    RESOLVE();
    TRACED_COPY(NULL, size, memory, copy_d2d, place.device, dst, src, size);
}

keel_status keel_mem_copy_h2d_async(keel_place place, keel_stream stream,
                                    keel_dptr dst, const void *src,
                                    uint64_t size)
{
    RESOLVE();
    if (size)
        NONNULL(src);
    TRACED_COPY(stream, size, memory, copy_h2d_async, place.device, stream,
                dst, src, size);
}

keel_status keel_mem_copy_d2h_async(keel_place place, keel_stream stream,
                                    void *dst, keel_dptr src, uint64_t size)
{
    RESOLVE();
    if (size)
        NONNULL(dst);
    TRACED_COPY(stream, size, memory, copy_d2h_async, place.device, stream,
                dst, src, size);
}

keel_status keel_mem_copy_d2d_async(keel_place place, keel_stream stream,
                                    keel_dptr dst, keel_dptr src,
                                    uint64_t size)
{
    RESOLVE();
    TRACED_COPY(stream, size, memory, copy_d2d_async, place.device, stream,
                dst, src, size);
}

/* Copy across plugins (or without peer support) through a host buffer. */
static keel_status copy_staged(keel_place dplace, keel_dptr dst,
                               keel_place splace, keel_dptr src,
                               uint64_t size)
{
    const uint64_t chunk = UINT64_C(4) << 20;
    uint64_t done = 0;
    keel_status st = KEEL_STATUS_OK;
    void *buf = malloc(size < chunk ? size : chunk);

    if (!buf)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_mem_copy_peer: no host memory for the "
                           "staging buffer");
    while (done < size && st == KEEL_STATUS_OK) {
        uint64_t n = size - done < chunk ? size - done : chunk;
        st = keel_mem_copy_d2h(splace, buf, src + done, n);
        if (st == KEEL_STATUS_OK)
            st = keel_mem_copy_h2d(dplace, dst + done, buf, n);
        done += n;
    }
    free(buf);
    return st;
}

keel_status keel_mem_copy_peer(keel_place dst_place, keel_dptr dst,
                               keel_place src_place, keel_dptr src,
                               uint64_t size)
{
    struct keel_plugin *dp = NULL, *p = NULL;
    keel_place place = src_place;
    keel_status st;

    st = keel__resolve(dst_place, &dp, __func__);
    if (st != KEEL_STATUS_OK)
        return st;
    st = keel__resolve(src_place, &p, __func__);
    if (st != KEEL_STATUS_OK)
        return st;
    if (size == 0)
        return KEEL_STATUS_OK;
    if (dp == p && dst_place.device == src_place.device)
        return keel_mem_copy_d2d(src_place, dst, src, size);
    if (dp == p && p->memory.copy_peer)
        TRACED_COPY(NULL, size, memory, copy_peer, dst_place.device, dst,
                    src_place.device, src, size);
    return copy_staged(dst_place, dst, src_place, src, size);
}

keel_status keel_mem_get_info(keel_place place, keel_memory_info *info)
{
    RESOLVE();
    NONNULL(info);
    return CALL(memory, get_memory_info, place.device, info);
}

/* ---- streams and events -------------------------------------------------- */

keel_status keel_stream_create(keel_place place, int32_t priority,
                               keel_stream *stream)
{
    RESOLVE();
    NONNULL(stream);
    return CALL(stream, stream_create, place.device, priority, stream);
}

keel_status keel_stream_destroy(keel_place place, keel_stream stream)
{
    RESOLVE();
    return CALL(stream, stream_destroy, place.device, stream);
}

keel_status keel_stream_synchronize(keel_place place, keel_stream stream)
{
    RESOLVE();
    TRACED_SYNC(stream, stream, stream_synchronize, place.device, stream);
}

keel_status keel_stream_query(keel_place place, keel_stream stream)
{
    RESOLVE();
    return CALL_EX(true, stream, stream_query, place.device, stream);
}

keel_status keel_stream_wait_event(keel_place place, keel_stream stream,
                                   keel_event event)
{
    RESOLVE();
    NONNULL(event);
    return CALL(stream, stream_wait_event, place.device, stream, event);
}

keel_status keel_stream_launch_host_func(keel_place place, keel_stream stream,
                                         keel_host_fn fn, void *user_data)
{
    RESOLVE();
    NONNULL(fn);
    return CALL(stream, launch_host_func, place.device, stream, fn, user_data);
}

keel_status keel_event_create(keel_place place, keel_event *event)
{
    RESOLVE();
    NONNULL(event);
    return CALL(stream, event_create, place.device, event);
}

keel_status keel_event_destroy(keel_place place, keel_event event)
{
    RESOLVE();
    NONNULL(event);
    return CALL(stream, event_destroy, place.device, event);
}

keel_status keel_event_record(keel_place place, keel_event event,
                              keel_stream stream)
{
    RESOLVE();
    NONNULL(event);
    return CALL(stream, event_record, place.device, event, stream);
}

keel_status keel_event_query(keel_place place, keel_event event)
{
    RESOLVE();
    NONNULL(event);
    return CALL_EX(true, stream, event_query, place.device, event);
}

keel_status keel_event_synchronize(keel_place place, keel_event event)
{
    RESOLVE();
    NONNULL(event);
    TRACED_SYNC(NULL, stream, event_synchronize, place.device, event);
}

keel_status keel_event_elapsed_ms(keel_place place, keel_event start,
                                  keel_event end, float *ms)
{
    RESOLVE();
    NONNULL(start);
    NONNULL(end);
    NONNULL(ms);
    return CALL(stream, event_elapsed_ms, place.device, start, end, ms);
}

/* ---- collectives --------------------------------------------------------- */

/* ---- ids of the plugin's size (ABI 1.3) ---------------------------------- */

/* The id size the plugin serving `p` states: 128 unless its get_caps
 * (ABI 1.3) says more. */
static keel_status id_bytes_of(struct keel_plugin *p, keel_place place,
                               uint32_t *bytes)
{
    keel_collective_caps caps;
    keel_status st;

    *bytes = KEEL_COMM_ID_BYTES;
    if (!p->collective.get_caps)
        return KEEL_STATUS_OK;
    memset(&caps, 0, sizeof(caps));
    caps.struct_size = sizeof(caps);
    st = CALL(collective, get_caps, place.device, &caps);
    if (st != KEEL_STATUS_OK)
        return st;
    if (caps.struct_size >= offsetof(keel_collective_caps, id_bytes) +
                                sizeof(caps.id_bytes) &&
        caps.id_bytes != 0) {
        if (caps.id_bytes < KEEL_COMM_ID_BYTES ||
            caps.id_bytes > KEEL_COMM_ID_MAX_BYTES)
            return keel__error(KEEL_STATUS_DEVICE_ERROR,
                               "plugin %s states a unique id of %u bytes; "
                               "the ABI allows %d to %d",
                               p->name, (unsigned)caps.id_bytes,
                               KEEL_COMM_ID_BYTES, KEEL_COMM_ID_MAX_BYTES);
        *bytes = caps.id_bytes;
    }
    return KEEL_STATUS_OK;
}

keel_status keel_comm_id_bytes(keel_place place, uint32_t *bytes)
{
    RESOLVE();
    NONNULL(bytes);
    return id_bytes_of(p, place, bytes);
}

/* An id of `size` bytes must be the plugin's size, or 128 when the plugin
 * states none. */
static keel_status id_size_check(struct keel_plugin *p, keel_place place,
                                 uint32_t size, const char *call,
                                 uint32_t *want)
{
    keel_status st = id_bytes_of(p, place, want);

    if (st != KEEL_STATUS_OK)
        return st;
    if (size != *want)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: an id of %u bytes, but plugin %s's ids have "
                           "%u (keel_comm_id_bytes)",
                           call, (unsigned)size, p->name, (unsigned)*want);
    return KEEL_STATUS_OK;
}

keel_status keel_comm_get_unique_id_bytes(keel_place place, void *id,
                                          uint32_t size)
{
    uint32_t want;
    keel_status st;

    RESOLVE();
    NONNULL(id);
    st = id_size_check(p, place, size, __func__, &want);
    if (st != KEEL_STATUS_OK)
        return st;
    if (p->collective.get_unique_id_bytes)
        return CALL(collective, get_unique_id_bytes, (uint8_t *)id, size);
    if (want > KEEL_COMM_ID_BYTES)
        return keel__absent(p, "collective.get_unique_id_bytes");
    return CALL(collective, get_unique_id, (keel_comm_id *)id);
}

struct keel_communicator {
    keel_place place;
    struct keel_plugin *plugin;
    keel_comm comm;
};

keel_status keel_comm_get_unique_id(keel_place place, keel_comm_id *id)
{
    uint32_t want;
    keel_status st;

    RESOLVE();
    NONNULL(id);
    st = id_bytes_of(p, place, &want);
    if (st != KEEL_STATUS_OK)
        return st;
    if (want > KEEL_COMM_ID_BYTES)
        return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                           "keel_comm_get_unique_id: plugin %s's ids have %u "
                           "bytes, more than a keel_comm_id holds; use "
                           "keel_comm_get_unique_id_bytes",
                           p->name, (unsigned)want);
    return CALL(collective, get_unique_id, id);
}

/* comm_init_rank with a fixed-size id (`fixed`) or one of `size` bytes. */
static keel_status init_rank(keel_place place, int32_t nranks,
                             const keel_comm_id *fixed, const uint8_t *id,
                             uint32_t size, int32_t rank,
                             keel_communicator **comm, const char *call)
{
    keel_communicator *c;
    keel_status st;
    uint32_t want = KEEL_COMM_ID_BYTES;

    RESOLVE();
    if (!fixed && !id)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: id is NULL",
                           call);
    if (!comm)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: comm is NULL",
                           call);
    *comm = NULL;
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: rank %d of %d ranks is out of range", call,
                           rank, nranks);
    st = id ? id_size_check(p, place, size, call, &want)
            : id_bytes_of(p, place, &want);
    if (st != KEEL_STATUS_OK)
        return st;
    if (fixed && want > KEEL_COMM_ID_BYTES)
        return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                           "%s: plugin %s's ids have %u bytes, more than a "
                           "keel_comm_id holds; use "
                           "keel_comm_get_unique_id_bytes and "
                           "keel_comm_init_rank_bytes",
                           call, p->name, (unsigned)want);
    c = calloc(1, sizeof(*c));
    if (!c)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "%s: out of host memory", call);
    if (id && p->collective.comm_init_rank_bytes)
        st = CALL(collective, comm_init_rank_bytes, place.device, nranks, id,
                  size, rank, &c->comm);
    else if (id && want > KEEL_COMM_ID_BYTES)
        st = keel__absent(p, "collective.comm_init_rank_bytes");
    else
        st = CALL(collective, comm_init_rank, place.device, nranks,
                  fixed ? fixed : (const keel_comm_id *)(const void *)id,
                  rank, &c->comm);
    if (st != KEEL_STATUS_OK) {
        free(c);
        return st;
    }
    c->place = place;
    c->plugin = p;
    *comm = c;
    return KEEL_STATUS_OK;
}

keel_status keel_comm_init_rank(keel_place place, int32_t nranks,
                                const keel_comm_id *id, int32_t rank,
                                keel_communicator **comm)
{
    if (!id)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_comm_init_rank: id is NULL");
    return init_rank(place, nranks, id, NULL, 0, rank, comm,
                     "keel_comm_init_rank");
}

keel_status keel_comm_init_rank_bytes(keel_place place, int32_t nranks,
                                      const void *id, uint32_t size,
                                      int32_t rank, keel_communicator **comm)
{
    if (!id)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_comm_init_rank_bytes: id is NULL");
    return init_rank(place, nranks, NULL, id, size, rank, comm,
                     "keel_comm_init_rank_bytes");
}

#define COMM_BEGIN(c)                                                        \
    NONNULL(c);                                                              \
    keel_place place = (c)->place;                                           \
    struct keel_plugin *p = (c)->plugin

keel_status keel_comm_destroy(keel_communicator *comm)
{
    keel_status st;

    if (!comm)
        return KEEL_STATUS_OK;
    {
        COMM_BEGIN(comm);
        st = CALL(collective, comm_destroy, comm->comm);
    }
    free(comm);
    return st;
}

keel_status keel_comm_rank(const keel_communicator *comm, int32_t *rank,
                           int32_t *nranks)
{
    COMM_BEGIN(comm);
    NONNULL(rank);
    NONNULL(nranks);
    return CALL(collective, comm_rank, comm->comm, rank, nranks);
}

keel_place keel_comm_place(const keel_communicator *comm)
{
    return comm ? comm->place : (keel_place){-1, -1};
}

static keel_status check_dtype_op(const char *what, keel_dtype dtype, int op)
{
    if ((unsigned)dtype >= KEEL_DTYPE_COUNT_)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: dtype %d is not a keel dtype", what,
                           (int)dtype);
    if (op >= 0 && op >= KEEL_REDUCE_OP_COUNT_)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: reduce op %d is not a keel reduce op", what,
                           op);
    return KEEL_STATUS_OK;
}

#define CHECK_DT(dt, op)                                                     \
    do {                                                                     \
        keel_status cs_ = check_dtype_op(__func__, dt, (int)(op));           \
        if (cs_ != KEEL_STATUS_OK)                                           \
            return cs_;                                                      \
    } while (0)

keel_status keel_all_reduce(keel_communicator *comm, keel_stream stream,
                            keel_dptr send, keel_dptr recv, uint64_t count,
                            keel_dtype dtype, keel_reduce_op op)
{
    COMM_BEGIN(comm);
    CHECK_DT(dtype, op);
    return CALL(collective, all_reduce, comm->comm, stream, send, recv, count,
                dtype, op);
}

keel_status keel_broadcast(keel_communicator *comm, keel_stream stream,
                           keel_dptr send, keel_dptr recv, uint64_t count,
                           keel_dtype dtype, int32_t root)
{
    COMM_BEGIN(comm);
    CHECK_DT(dtype, -1);
    return CALL(collective, broadcast, comm->comm, stream, send, recv, count, dtype,
                root);
}

keel_status keel_reduce(keel_communicator *comm, keel_stream stream,
                        keel_dptr send, keel_dptr recv, uint64_t count,
                        keel_dtype dtype, keel_reduce_op op, int32_t root)
{
    COMM_BEGIN(comm);
    CHECK_DT(dtype, op);
    return CALL(collective, reduce, comm->comm, stream, send, recv, count, dtype,
                op, root);
}

keel_status keel_all_gather(keel_communicator *comm, keel_stream stream,
                            keel_dptr send, keel_dptr recv, uint64_t count,
                            keel_dtype dtype)
{
    COMM_BEGIN(comm);
    CHECK_DT(dtype, -1);
    return CALL(collective, all_gather, comm->comm, stream, send, recv, count,
                dtype);
}

keel_status keel_reduce_scatter(keel_communicator *comm, keel_stream stream,
                                keel_dptr send, keel_dptr recv,
                                uint64_t count, keel_dtype dtype,
                                keel_reduce_op op)
{
    COMM_BEGIN(comm);
    CHECK_DT(dtype, op);
    return CALL(collective, reduce_scatter, comm->comm, stream, send, recv, count,
                dtype, op);
}

keel_status keel_all_to_all(keel_communicator *comm, keel_stream stream,
                            keel_dptr send, keel_dptr recv, uint64_t count,
                            keel_dtype dtype)
{
    COMM_BEGIN(comm);
    CHECK_DT(dtype, -1);
    return CALL(collective, all_to_all, comm->comm, stream, send, recv, count,
                dtype);
}

/*
 * all_to_allv: the plugin's own (ABI 1.3), or composed from send/recv in
 * one group: for each peer j, a send of send_counts[j] elements and a recv
 * of recv_counts[j] (the block for the rank itself is a device copy, as
 * send/recv to oneself is not allowed).
 */
keel_status keel_all_to_allv(keel_communicator *comm, keel_stream stream,
                             keel_dptr send, const uint64_t *send_counts,
                             const uint64_t *send_displs, keel_dptr recv,
                             const uint64_t *recv_counts,
                             const uint64_t *recv_displs, keel_dtype dtype)
{
    int32_t rank, nranks;
    keel_status st, st2;
    uint64_t es;

    COMM_BEGIN(comm);
    CHECK_DT(dtype, -1);
    NONNULL(send_counts);
    NONNULL(send_displs);
    NONNULL(recv_counts);
    NONNULL(recv_displs);
    if (p->collective.all_to_allv)
        return CALL(collective, all_to_allv, comm->comm, stream, send,
                    send_counts, send_displs, recv, recv_counts, recv_displs,
                    dtype);
    if (!p->collective.send || !p->collective.recv ||
        !p->collective.group_start || !p->collective.group_end)
        return keel__absent(p, "collective.all_to_allv");
    st = CALL(collective, comm_rank, comm->comm, &rank, &nranks);
    if (st != KEEL_STATUS_OK)
        return st;
    es = keel_dtype_size(dtype);
    for (int32_t j = 0; j < nranks; j++) {
        const uint64_t c[4] = {send_counts[j], send_displs[j], recv_counts[j],
                               recv_displs[j]};
        for (int k = 0; k < 4; k++)
            if (c[k] > UINT64_MAX / es ||
                (k % 2 && c[k] * es > UINT64_MAX - (k < 2 ? send : recv)))
                return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                                   "keel_all_to_allv: %s[%d] = %llu "
                                   "elements overflows",
                                   k == 0 ? "send_counts" : k == 1
                                   ? "send_displs" : k == 2 ? "recv_counts"
                                   : "recv_displs", (int)j,
                                   (unsigned long long)c[k]);
    }
    if (send_counts[rank] != recv_counts[rank])
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_all_to_allv: rank %d sends itself %llu "
                           "elements but expects %llu",
                           (int)rank, (unsigned long long)send_counts[rank],
                           (unsigned long long)recv_counts[rank]);
    keel__plugin_msg_clear();
    st = keel__plugin_status(p, place, "collective.group_start",
                             p->collective.group_start(), false);
    if (st != KEEL_STATUS_OK)
        return st;
    for (int32_t j = 0; j < nranks && st == KEEL_STATUS_OK; j++) {
        if (j == rank)
            continue;
        st = CALL(collective, send, comm->comm, stream,
                  send + send_displs[j] * es, send_counts[j], dtype, j);
        if (st == KEEL_STATUS_OK)
            st = CALL(collective, recv, comm->comm, stream,
                      recv + recv_displs[j] * es, recv_counts[j], dtype, j);
    }
    keel__plugin_msg_clear();
    st2 = keel__plugin_status(p, place, "collective.group_end",
                              p->collective.group_end(), false);
    if (st == KEEL_STATUS_OK)
        st = st2;
    if (st == KEEL_STATUS_OK && send_counts[rank])
        st = CALL(memory, copy_d2d_async, place.device, stream,
                  recv + recv_displs[rank] * es, send + send_displs[rank] * es,
                  send_counts[rank] * es);
    return st;
}

keel_status keel_send(keel_communicator *comm, keel_stream stream,
                      keel_dptr buf, uint64_t count, keel_dtype dtype,
                      int32_t peer)
{
    COMM_BEGIN(comm);
    CHECK_DT(dtype, -1);
    return CALL(collective, send, comm->comm, stream, buf, count, dtype, peer);
}

keel_status keel_recv(keel_communicator *comm, keel_stream stream,
                      keel_dptr buf, uint64_t count, keel_dtype dtype,
                      int32_t peer)
{
    COMM_BEGIN(comm);
    CHECK_DT(dtype, -1);
    return CALL(collective, recv, comm->comm, stream, buf, count, dtype, peer);
}

keel_status keel_group_start(keel_place place)
{
    RESOLVE();
    if (!p->collective.group_start)
        return keel__absent(p, "collective.group_start");
    keel__plugin_msg_clear();
    return keel__plugin_status(p, place, "collective.group_start",
                               p->collective.group_start(), false);
}

keel_status keel_group_end(keel_place place)
{
    RESOLVE();
    if (!p->collective.group_end)
        return keel__absent(p, "collective.group_end");
    keel__plugin_msg_clear();
    return keel__plugin_status(p, place, "collective.group_end",
                               p->collective.group_end(), false);
}
