/*
 * keel — data-parallel training across processes (Paddle's
 * paddle.distributed: init_parallel_env, new_group, the collectives on
 * tensors, DataParallel).
 *
 * A job is started by a launcher that runs one process per rank: Open
 * MPI's `mpirun -np N prog` (on one host, or on several with a hostfile).
 * keel_dist_init reads the rank, world size and local rank it sets, and
 * exchanges the communicator ids of the current device's plugin through
 * it. The collectives then run on the plugin's own engine (the cpu plugin:
 * Open MPI; cuda: NCCL; hip: RCCL; npu: HCCL; mlu: CNCL). Single-process
 * programs need no launcher: the world is one rank.
 *
 * Every call that creates or uses a group is collective over that group's
 * ranks, and new_group over ALL ranks, as in Paddle: each rank calls them
 * in the same order. Ranks in this API are global ranks (Paddle's `src`,
 * `dst`, and the `ranks` of new_group), except where a name says
 * otherwise.
 *
 * Tensors passed to the collectives must be contiguous and live on the
 * group's device; the collectives work in place where Paddle's do
 * (all_reduce, broadcast, reduce, recv) and return new tensors otherwise.
 * Failures (a peer that never arrives within the plugin's timeout, a dead
 * rank, a bad argument) come back as a status and keel_last_error(),
 * naming the collective and the rank.
 */
#ifndef KEEL_DIST_H
#define KEEL_DIST_H

#include <keel/amp.h>
#include <keel/nn.h>

#ifdef __cplusplus
extern "C" {
#endif

/** What the launcher said about this process. */
typedef struct keel_dist_env {
    int32_t rank;       /**< global rank, 0 .. world_size-1           */
    int32_t world_size; /**< processes in the job                     */
    int32_t local_rank; /**< rank among the processes of this host    */
    int32_t local_size; /**< processes on this host                   */
    /** "mpirun" (Open MPI's environment), or "none" (one process). */
    const char *launcher;
} keel_dist_env;

/** A set of ranks with a communicator on the current device. */
typedef struct keel_dist_group keel_dist_group;

/**
 * paddle.distributed.init_parallel_env(): read the launcher's environment,
 * start the bootstrap (MPI) when the job has more than one process, and
 * create the world group on the current device (keel_set_device before
 * this call picks it). Calling it again is a no-op. Returns OK,
 * NOT_SUPPORTED (a multi-process job but keel built without Open MPI; the
 * message says what to install), INVALID_STATE (the launcher's variables
 * contradict each other), or the plugin's error creating the
 * communicator.
 */
KEEL_API keel_status keel_dist_init(void);
/** Whether keel_dist_init has succeeded (and keel_dist_finalize not run). */
KEEL_API bool keel_dist_is_initialized(void);
/** The launcher's view of this process (valid after keel_dist_init;
 *  before it, rank 0 of 1). */
KEEL_API keel_status keel_dist_get_env(keel_dist_env *env);
/** paddle.distributed.get_rank() / get_world_size(): 0 / 1 before init. */
KEEL_API int32_t keel_dist_get_rank(void);
KEEL_API int32_t keel_dist_get_world_size(void);
/**
 * Destroy every group and, when keel_dist_init started MPI, finalize it.
 * Collective over all ranks (each must call it). After this, a new
 * keel_dist_init is refused when MPI was finalized (MPI cannot restart).
 */
KEEL_API keel_status keel_dist_finalize(void);

/** The group of all ranks (NULL before keel_dist_init). Functions taking
 *  a group accept NULL for it. */
KEEL_API keel_dist_group *keel_dist_world_group(void);
/**
 * paddle.distributed.new_group(ranks): a group of the given global ranks
 * (distinct, each in [0, world_size); its rank i is ranks[i]). Called by
 * every rank of the job, members or not, with the same list; *out is a
 * group on every rank, and for a non-member keel_dist_group_rank is -1
 * and collectives on it are INVALID_ARGUMENT. The group lives until
 * keel_dist_finalize.
 */
KEEL_API keel_status keel_dist_new_group(const int32_t *ranks, int nranks,
                                         keel_dist_group **out);
/** This process's rank in the group, or -1 when it is not a member. */
KEEL_API int32_t keel_dist_group_rank(const keel_dist_group *group);
/** Ranks in the group. */
KEEL_API int32_t keel_dist_group_size(const keel_dist_group *group);
/** The global rank of group rank `group_rank` (-1 when out of range). */
KEEL_API int32_t keel_dist_group_global_rank(const keel_dist_group *group,
                                             int32_t group_rank);

/** Wait until every rank of the group has arrived (a collective). */
KEEL_API keel_status keel_dist_barrier(keel_dist_group *group);
/** t = op over the group of every rank's t (in place). */
KEEL_API keel_status keel_dist_all_reduce(keel_tensor *t, keel_reduce_op op,
                                          keel_dist_group *group);
/** Every rank's t = global rank src's t. */
KEEL_API keel_status keel_dist_broadcast(keel_tensor *t, int32_t src,
                                         keel_dist_group *group);
/** Global rank dst's t = op over the group of every rank's t; the other
 *  ranks' t are left as they were. */
KEEL_API keel_status keel_dist_reduce(keel_tensor *t, int32_t dst,
                                      keel_reduce_op op,
                                      keel_dist_group *group);
/** *out = [group size, t's shape...]: every rank's t, in group-rank
 *  order. */
KEEL_API keel_status keel_dist_all_gather(const keel_tensor *t,
                                          keel_dist_group *group,
                                          keel_tensor **out);
/** t's first dimension is group size x k: *out = [k, ...] holding op over
 *  the ranks of this rank's block. */
KEEL_API keel_status keel_dist_reduce_scatter(const keel_tensor *t,
                                              keel_reduce_op op,
                                              keel_dist_group *group,
                                              keel_tensor **out);
/** t's first dimension is group size x k: block j goes to group rank j,
 *  and *out (t's shape) holds block i from group rank i. */
KEEL_API keel_status keel_dist_all_to_all(const keel_tensor *t,
                                          keel_dist_group *group,
                                          keel_tensor **out);
/** Send t to global rank dst / receive into t from global rank src. */
KEEL_API keel_status keel_dist_send(const keel_tensor *t, int32_t dst,
                                    keel_dist_group *group);
KEEL_API keel_status keel_dist_recv(keel_tensor *t, int32_t src,
                                    keel_dist_group *group);

/* ---- DataParallel -------------------------------------------------------- */

typedef struct keel_data_parallel_config {
    /** Set by keel_data_parallel_config_init. */
    uint32_t struct_size;
    /** Gradients are all-reduced in buckets of about this many MiB
     *  (Paddle's comm_buffer_size; default 25). */
    double comm_buffer_size_mb;
    /** The first bucket (the model's last parameters, whose gradients
     *  backward finishes first) holds about this many MiB (Paddle's
     *  last_comm_buffer_size; default 1). */
    double last_comm_buffer_size_mb;
    /** A parameter without a gradient after backward counts as a zero
     *  gradient (default false: that is an error naming it). */
    bool find_unused_parameters;
    /** Group the model is replicated over (NULL: the world). */
    keel_dist_group *group;
    /** Reduce each bucket on a communication thread and stream as soon as
     *  backward has finished its gradients, overlapping the rest of the
     *  backward pass (default true, as Paddle). false: every bucket is
     *  reduced after backward, one after another. A model whose gradients
     *  fit one bucket is reduced that way too: its one bucket fills only
     *  when backward ends. */
    bool overlap;
} keel_data_parallel_config;

KEEL_API void keel_data_parallel_config_init(keel_data_parallel_config *cfg);

typedef struct keel_data_parallel keel_data_parallel;

/**
 * paddle.DataParallel(layer): broadcast every parameter and buffer of
 * `layer` from the group's rank 0, and plan the gradient buckets
 * (parameters in reverse registration order, split by size and dtype).
 * The layer stays the caller's; run its forward as usual. A collective.
 */
KEEL_API keel_status keel_data_parallel_create(
    keel_layer *layer, const keel_data_parallel_config *cfg,
    keel_data_parallel **out);
KEEL_API void keel_data_parallel_free(keel_data_parallel *dp);
/**
 * loss.backward() under DataParallel: keel_backward(loss, NULL, false),
 * and, unless gradient synchronisation is off (no_sync), every parameter's
 * gradient becomes the mean of the ranks' gradients. With overlap (the
 * default) a bucket's all-reduce starts as soon as backward has finished
 * its gradients and runs on a communication thread while backward goes
 * on; buckets start in bucket order on every rank. The call returns when
 * every mean is in place. A collective. After a failed all-reduce (a
 * TIMEOUT) later calls fail at once: the communicator is unusable.
 */
KEEL_API keel_status keel_data_parallel_backward(keel_data_parallel *dp,
                                                 keel_tensor *loss);
/** Average the gradients now (what backward does after its pass). */
KEEL_API keel_status keel_data_parallel_sync_gradients(keel_data_parallel *dp);
/** Paddle's `with model.no_sync():` — false stops backward from
 *  averaging (gradients accumulate locally); true restores it. */
KEEL_API void keel_data_parallel_set_sync(keel_data_parallel *dp, bool sync);
/** Buckets planned, and all-reduce calls made so far. */
KEEL_API int keel_data_parallel_num_buckets(const keel_data_parallel *dp);
KEEL_API int64_t keel_data_parallel_num_reductions(
    const keel_data_parallel *dp);
/** Bucket all-reduces started while backward was still running (with
 *  overlap; 0 without): how many buckets had a chance to overlap. */
KEEL_API int64_t keel_data_parallel_num_early_reductions(
    const keel_data_parallel *dp);
/** Wall seconds the calling thread spent averaging gradients so far,
 *  outside backward's own computation: without overlap packing, the
 *  all-reduces (including waits for the slowest rank) and unpacking; with
 *  overlap only what is left after backward (the last buckets, waiting
 *  for the thread, unpacking): the communication time not hidden. */
KEEL_API double keel_data_parallel_sync_seconds(const keel_data_parallel *dp);
/** Wall seconds inside the bucket all-reduces so far (with overlap: on the
 *  communication thread, hidden or not; without: as sync_seconds). */
KEEL_API double keel_data_parallel_comm_seconds(const keel_data_parallel *dp);

/* ---- Fleet --------------------------------------------------------------- */

/**
 * paddle.distributed.fleet.DistributedStrategy, the collective part:
 * amp (+ amp_configs), recompute (+ recompute_configs["checkpoints"]) and
 * the data-parallel gradient fusion sizes. Pipeline, sharding, localsgd,
 * dgc and the other strategies are not provided (docs/distributed.md).
 */
typedef struct keel_distributed_strategy {
    /** Set by keel_distributed_strategy_init. */
    uint32_t struct_size;
    /** strategy.amp: forward under auto_cast, loss scaling in backward. */
    bool amp;
    /** amp_configs: level (use_pure_fp16 = O2; default O1), dtype
     *  (default float16), the custom lists (op names, may be NULL). */
    keel_amp_level amp_level;
    keel_dtype amp_dtype;
    const char *const *custom_white_list;
    int num_custom_white;
    const char *const *custom_black_list;
    int num_custom_black;
    /** amp_configs of the loss scaler (Paddle's defaults: 32768, 1000, 2,
     *  2.0, 0.8, true). */
    double init_loss_scaling;
    int64_t incr_every_n_steps;
    int64_t decr_every_n_nan_or_inf;
    double incr_ratio;
    double decr_ratio;
    bool use_dynamic_loss_scaling;
    /** strategy.recompute with recompute_configs["checkpoints"]: the
     *  dotted names of the sublayers ("blocks.0", ...) whose activations
     *  are recomputed in backward (keel_recompute). */
    bool recompute;
    const char *const *recompute_checkpoints;
    int num_recompute_checkpoints;
    /** fuse_grad_size_in_MB (default 32), last_comm_group_size_MB
     *  (default 1), find_unused_parameters (default false): the
     *  DataParallel buckets. */
    double fuse_grad_size_in_mb;
    double last_comm_group_size_mb;
    bool find_unused_parameters;
} keel_distributed_strategy;

KEEL_API void keel_distributed_strategy_init(keel_distributed_strategy *s);

/**
 * fleet.init(is_collective = true, strategy): keel_dist_init, then keep a
 * copy of the strategy (NULL: the defaults) for the distributed model and
 * optimizer made after it; a later call replaces it, keel_dist_finalize
 * drops it. Returns OK,
 * NOT_SUPPORTED (is_collective false: parameter-server training is not
 * provided), INVALID_ARGUMENT (a bad strategy: the message names the
 * field) or keel_dist_init's error.
 */
KEEL_API keel_status keel_fleet_init(bool is_collective,
                                     const keel_distributed_strategy *strategy);

typedef struct keel_fleet_optimizer keel_fleet_optimizer;
typedef struct keel_fleet_model keel_fleet_model;

/**
 * fleet.distributed_optimizer(optimizer): with strategy.amp, a GradScaler
 * from amp_configs goes with it. The optimizer stays the caller's (free
 * it after this object).
 */
KEEL_API keel_status keel_fleet_distributed_optimizer(
    keel_optimizer *opt, keel_fleet_optimizer **out);
KEEL_API void keel_fleet_optimizer_free(keel_fleet_optimizer *fo);
/** optimizer.step(): through the scaler (unscale, skip on inf/NaN,
 *  update the scale) with amp, else keel_optimizer_step. */
KEEL_API keel_status keel_fleet_optimizer_step(keel_fleet_optimizer *fo);
KEEL_API keel_status keel_fleet_optimizer_clear_grad(keel_fleet_optimizer *fo);
/** The scaler (borrowed), or NULL without amp. */
KEEL_API keel_grad_scaler *keel_fleet_optimizer_scaler(
    const keel_fleet_optimizer *fo);

/**
 * fleet.distributed_model(model): with amp at O2, keel_amp_decorate of
 * the model (and of fo's optimizer, which then keeps float32 master
 * weights); with recompute, every checkpoint sublayer's forward becomes
 * keel_recompute of it (one-input calls; others run as usual); then the
 * model is wrapped in DataParallel with the strategy's bucket sizes. fo
 * may be NULL (no loss scaling). The model must outlive the returned
 * object; free that first, which takes the recompute wrappers off.
 * Returns OK, INVALID_STATE (keel_fleet_init not called), INVALID_ARGUMENT
 * (a checkpoint naming no sublayer, or one listed twice) or the error of
 * decorate or DataParallel. On an error the recompute wrappers are off
 * again; a model decorated before DataParallel failed stays decorated.
 */
KEEL_API keel_status keel_fleet_distributed_model(keel_layer *model,
                                                  keel_fleet_optimizer *fo,
                                                  keel_fleet_model **out);
KEEL_API void keel_fleet_model_free(keel_fleet_model *fm);
/** model(inputs): keel_layer_forward inside the strategy's auto_cast
 *  scope (when amp), recomputing the checkpoints. */
KEEL_API keel_status keel_fleet_model_forward(keel_fleet_model *fm,
                                              keel_tensor *const *inputs,
                                              int num_inputs,
                                              keel_tensor **out);
/** scaler.scale(loss).backward() under DataParallel (just the latter
 *  without amp or without a distributed optimizer). A collective. */
KEEL_API keel_status keel_fleet_model_backward(keel_fleet_model *fm,
                                               keel_tensor *loss);
/** The model's DataParallel (borrowed): no_sync, counters. */
KEEL_API keel_data_parallel *keel_fleet_model_data_parallel(
    const keel_fleet_model *fm);

/* ---- recompute ----------------------------------------------------------- */

/**
 * Paddle's recompute(layer, x): y = layer(x), keeping none of the layer's
 * intermediate tensors for backward; backward runs the layer's forward
 * again from x (with the random generator as the first forward found it,
 * so dropout masks repeat) and differentiates that. Gradients equal the
 * plain call's; peak memory drops by the activations inside the layer.
 * The layer must stay alive until backward. Inside auto_cast the scope is
 * kept with the node and the second forward runs inside an equal one, so
 * it casts as the first did. Layers whose forward updates buffers (BatchNorm's
 * running statistics in training mode) update them again in backward, as
 * in Paddle. Under no_grad this is a plain call.
 */
KEEL_API keel_status keel_recompute(keel_layer *layer, keel_tensor *x,
                                    keel_tensor **out);

#ifdef __cplusplus
}
#endif

#endif /* KEEL_DIST_H */
