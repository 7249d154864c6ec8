/*
 * keel plugin kit — collectives in one process, staged through host memory.
 *
 * For a plugin whose devices have no collective library of their own (or
 * whose library could not be loaded), this engine provides the whole
 * collective group (keel_collective_ops) over the plugin's own device
 * copies: communicators whose ranks are devices of THIS process, matched by
 * their 128-byte id; all_reduce, broadcast, reduce, all_gather,
 * reduce_scatter, all_to_all, all_to_allv (ABI 1.3), send and recv on
 * every dtype (reductions
 * without bool), with sum, prod, max, min and avg (avg on floating dtypes).
 *
 * A collective is a ROUND of its communicator: every rank's n-th collective
 * call joins round n (send/recv: the n-th send from a to b meets the n-th
 * recv on b from a). A rank's call waits for its stream, copies its send
 * buffer to host memory and deposits it. The LAST rank to arrive computes
 * every rank's result on the host (float16/bfloat16 and the narrow integer
 * types through double, int64 exactly, integer sums wrapping) and writes it
 * to each rank's receive buffer with the plugin's synchronous copy, then
 * marks the round done. Staging every input before writing makes in-place
 * and aliased buffers safe.
 *
 * Outside a group a call returns when its round is done (a send returns
 * once its data is staged, or delivered if the recv was already waiting).
 * Inside group_start/group_end (one host thread driving several ranks, as
 * NCCL requires) the calls only deposit, and the outermost group_end waits
 * for their rounds. Waits are bounded by the backend's timeout setting
 * (default 60000 ms) and end in TIMEOUT with a message saying how many
 * ranks arrived. Ranks in other processes can never join: such a
 * communicator times out in comm_init_rank.
 *
 * The calls are synchronous with respect to the host, which the ABI allows
 * ("a plugin may execute asynchronous work eagerly"); the stream's later
 * work is enqueued after the call returns, so ordering holds.
 *
 * Use: fill a keel_kit_hostcoll with the plugin's hooks (each plugin links
 * its own copy of the kit, so the engine's state is per plugin), and
 * expand KEEL_KIT_HOSTCOLL_OPS(prefix, &backend) once in a source file to
 * define `prefix_ops`, a keel_collective_ops table. Call
 * keel_kit_hc_finalize(&backend) from the plugin's finalize.
 */
#ifndef KEEL_KIT_HOSTCOLL_H
#define KEEL_KIT_HOSTCOLL_H

#include <keel/device_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The hooks a plugin gives the engine. All are required unless noted. */
typedef struct keel_kit_hostcoll {
    /* Plugin name and device type, for messages ("levelzero", "xpu"). */
    const char *plugin;
    const char *device_type;
    /* Environment variable holding the timeout in ms (1..86400000;
     * anything else: the default of 60000). */
    const char *timeout_env;
    /* Read an environment variable (the host table's getenv). NULL:
     * getenv(). */
    const char *(*env)(const char *name);
    /* Report a failure the engine found (host->set_error) and return
     * `status`. */
    keel_status (*fail)(keel_status status, const char *message);
    /* OK when the plugin is initialised and `device` exists; otherwise
     * reports why and returns the status. */
    keel_status (*enter)(int32_t device, const char *call);
    /* Optional: the same checks without side effects (get_caps, which the
     * ABI allows before init, uses it when given). NULL: enter. */
    keel_status (*check_device)(int32_t device, const char *call);
    /* Wait for the work enqueued so far on `stream` of `device` (NULL:
     * the default stream); a handle that is not a stream of `device`
     * gives INVALID_HANDLE. Reports its own failures. */
    keel_status (*stream_wait)(int32_t device, keel_stream stream,
                               const char *call);
    /* Optional: check that [ptr, ptr + bytes) is device memory of
     * `device` (bytes > 0). Reports its own failures. NULL: only a null
     * pointer is refused. */
    keel_status (*check_buffer)(int32_t device, keel_dptr ptr,
                                uint64_t bytes, const char *call);
    /* Synchronous copies. On failure: a status, and a one-line reason in
     * msg[msgn] (the engine hands it to every rank of the round). */
    keel_status (*read)(int32_t device, void *dst, keel_dptr src,
                        uint64_t bytes, char *msg, size_t msgn);
    keel_status (*write)(int32_t device, keel_dptr dst, const void *src,
                         uint64_t bytes, char *msg, size_t msgn);
} keel_kit_hostcoll;

keel_status keel_kit_hc_get_unique_id(const keel_kit_hostcoll *b,
                                      keel_comm_id *id);
keel_status keel_kit_hc_comm_init_rank(const keel_kit_hostcoll *b,
                                       int32_t device, int32_t nranks,
                                       const keel_comm_id *id, int32_t rank,
                                       keel_comm *comm);
keel_status keel_kit_hc_comm_destroy(const keel_kit_hostcoll *b,
                                     keel_comm comm);
keel_status keel_kit_hc_comm_rank(const keel_kit_hostcoll *b, keel_comm comm,
                                  int32_t *rank, int32_t *nranks);
keel_status keel_kit_hc_all_reduce(const keel_kit_hostcoll *b, keel_comm comm,
                                   keel_stream stream, keel_dptr send,
                                   keel_dptr recv, uint64_t count,
                                   keel_dtype dtype, keel_reduce_op op);
keel_status keel_kit_hc_broadcast(const keel_kit_hostcoll *b, keel_comm comm,
                                  keel_stream stream, keel_dptr send,
                                  keel_dptr recv, uint64_t count,
                                  keel_dtype dtype, int32_t root);
keel_status keel_kit_hc_reduce(const keel_kit_hostcoll *b, keel_comm comm,
                               keel_stream stream, keel_dptr send,
                               keel_dptr recv, uint64_t count,
                               keel_dtype dtype, keel_reduce_op op,
                               int32_t root);
keel_status keel_kit_hc_all_gather(const keel_kit_hostcoll *b, keel_comm comm,
                                   keel_stream stream, keel_dptr send,
                                   keel_dptr recv, uint64_t count,
                                   keel_dtype dtype);
keel_status keel_kit_hc_reduce_scatter(const keel_kit_hostcoll *b,
                                       keel_comm comm, keel_stream stream,
                                       keel_dptr send, keel_dptr recv,
                                       uint64_t count, keel_dtype dtype,
                                       keel_reduce_op op);
keel_status keel_kit_hc_all_to_all(const keel_kit_hostcoll *b, keel_comm comm,
                                   keel_stream stream, keel_dptr send,
                                   keel_dptr recv, uint64_t count,
                                   keel_dtype dtype);
keel_status keel_kit_hc_all_to_allv(const keel_kit_hostcoll *b, keel_comm comm,
                                    keel_stream stream, keel_dptr send,
                                    const uint64_t *send_counts,
                                    const uint64_t *send_displs,
                                    keel_dptr recv,
                                    const uint64_t *recv_counts,
                                    const uint64_t *recv_displs,
                                    keel_dtype dtype);
keel_status keel_kit_hc_send(const keel_kit_hostcoll *b, keel_comm comm,
                             keel_stream stream, keel_dptr buf,
                             uint64_t count, keel_dtype dtype, int32_t peer);
keel_status keel_kit_hc_recv(const keel_kit_hostcoll *b, keel_comm comm,
                             keel_stream stream, keel_dptr buf,
                             uint64_t count, keel_dtype dtype, int32_t peer);
keel_status keel_kit_hc_group_start(const keel_kit_hostcoll *b);
keel_status keel_kit_hc_group_end(const keel_kit_hostcoll *b);
keel_status keel_kit_hc_get_caps(const keel_kit_hostcoll *b, int32_t device,
                                 keel_collective_caps *caps);
/* The timeout in ms the backend's setting gives. */
uint32_t keel_kit_hc_timeout_ms(const keel_kit_hostcoll *b);
/* Destroy every communicator still alive (the plugin's finalize). */
void keel_kit_hc_finalize(const keel_kit_hostcoll *b);

/*
 * Defines `P##_ops`, a collective table whose calls go to the engine with
 * backend B (an expression naming a keel_kit_hostcoll object with static
 * storage).
 */
#define KEEL_KIT_HOSTCOLL_OPS(P, B)                                          \
    static keel_status P##_get_unique_id(keel_comm_id *id)                   \
    { return keel_kit_hc_get_unique_id(B, id); }                             \
    static keel_status P##_comm_init_rank(int32_t d, int32_t n,              \
                                          const keel_comm_id *id, int32_t r, \
                                          keel_comm *c)                      \
    { return keel_kit_hc_comm_init_rank(B, d, n, id, r, c); }                \
    static keel_status P##_comm_destroy(keel_comm c)                         \
    { return keel_kit_hc_comm_destroy(B, c); }                               \
    static keel_status P##_comm_rank(keel_comm c, int32_t *r, int32_t *n)    \
    { return keel_kit_hc_comm_rank(B, c, r, n); }                            \
    static keel_status P##_all_reduce(keel_comm c, keel_stream s,            \
                                      keel_dptr a, keel_dptr b, uint64_t n,  \
                                      keel_dtype t, keel_reduce_op o)        \
    { return keel_kit_hc_all_reduce(B, c, s, a, b, n, t, o); }               \
    static keel_status P##_broadcast(keel_comm c, keel_stream s,             \
                                     keel_dptr a, keel_dptr b, uint64_t n,   \
                                     keel_dtype t, int32_t root)             \
    { return keel_kit_hc_broadcast(B, c, s, a, b, n, t, root); }             \
    static keel_status P##_reduce(keel_comm c, keel_stream s, keel_dptr a,   \
                                  keel_dptr b, uint64_t n, keel_dtype t,     \
                                  keel_reduce_op o, int32_t root)            \
    { return keel_kit_hc_reduce(B, c, s, a, b, n, t, o, root); }             \
    static keel_status P##_all_gather(keel_comm c, keel_stream s,            \
                                      keel_dptr a, keel_dptr b, uint64_t n,  \
                                      keel_dtype t)                          \
    { return keel_kit_hc_all_gather(B, c, s, a, b, n, t); }                  \
    static keel_status P##_reduce_scatter(keel_comm c, keel_stream s,        \
                                          keel_dptr a, keel_dptr b,          \
                                          uint64_t n, keel_dtype t,          \
                                          keel_reduce_op o)                  \
    { return keel_kit_hc_reduce_scatter(B, c, s, a, b, n, t, o); }           \
    static keel_status P##_all_to_all(keel_comm c, keel_stream s,            \
                                      keel_dptr a, keel_dptr b, uint64_t n,  \
                                      keel_dtype t)                          \
    { return keel_kit_hc_all_to_all(B, c, s, a, b, n, t); }                  \
    static keel_status P##_all_to_allv(keel_comm c, keel_stream s,           \
                                       keel_dptr a, const uint64_t *sc,      \
                                       const uint64_t *sd, keel_dptr b,      \
                                       const uint64_t *rc,                   \
                                       const uint64_t *rd, keel_dtype t)     \
    { return keel_kit_hc_all_to_allv(B, c, s, a, sc, sd, b, rc, rd, t); }    \
    static keel_status P##_send(keel_comm c, keel_stream s, keel_dptr a,     \
                                uint64_t n, keel_dtype t, int32_t peer)      \
    { return keel_kit_hc_send(B, c, s, a, n, t, peer); }                     \
    static keel_status P##_recv(keel_comm c, keel_stream s, keel_dptr a,     \
                                uint64_t n, keel_dtype t, int32_t peer)      \
    { return keel_kit_hc_recv(B, c, s, a, n, t, peer); }                     \
    static keel_status P##_group_start(void)                                 \
    { return keel_kit_hc_group_start(B); }                                   \
    static keel_status P##_group_end(void)                                   \
    { return keel_kit_hc_group_end(B); }                                     \
    static keel_status P##_get_caps(int32_t d, keel_collective_caps *caps)   \
    { return keel_kit_hc_get_caps(B, d, caps); }                             \
    const keel_collective_ops P##_ops = {                                    \
        .header = KEEL_TABLE_HEADER(keel_collective_ops),                    \
        .get_unique_id = P##_get_unique_id,                                  \
        .comm_init_rank = P##_comm_init_rank,                                \
        .comm_destroy = P##_comm_destroy,                                    \
        .comm_rank = P##_comm_rank,                                          \
        .all_reduce = P##_all_reduce,                                        \
        .broadcast = P##_broadcast,                                          \
        .reduce = P##_reduce,                                                \
        .all_gather = P##_all_gather,                                        \
        .reduce_scatter = P##_reduce_scatter,                                \
        .all_to_all = P##_all_to_all,                                        \
        .send = P##_send,                                                    \
        .recv = P##_recv,                                                    \
        .group_start = P##_group_start,                                      \
        .group_end = P##_group_end,                                          \
        .get_caps = P##_get_caps,                                            \
        .all_to_allv = P##_all_to_allv,                                      \
    }

#ifdef __cplusplus
}
#endif

#endif /* KEEL_KIT_HOSTCOLL_H */
