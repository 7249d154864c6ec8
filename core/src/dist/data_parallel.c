/*
 * keel dist layer: DataParallel (keel/dist.h).
 *
 * At creation every parameter and buffer is broadcast from the group's
 * rank 0, so all replicas start equal, and the trainable parameters are
 * planned into buckets as Paddle plans them: in reverse registration order
 * (the last layers' gradients are ready first in backward), one dtype per
 * bucket, the first bucket up to last_comm_buffer_size and the others up
 * to comm_buffer_size. Each bucket owns one flat device buffer.
 *
 * Overlap (the default). Every trainable parameter carries a grad-ready
 * hook (keel/autograd.h). During keel_data_parallel_backward the hook
 * packs the parameter's final gradient into its bucket's buffer (a device
 * copy on the default stream, behind the kernels that made it); when a
 * bucket's last gradient is in, an event is recorded on the default stream
 * and the bucket goes to the DataParallel's communication thread, which
 * makes its stream wait for the event, all-reduces the buffer with avg on
 * its own stream and waits for that stream — while backward goes on
 * computing the earlier layers' gradients on the calling thread. Buckets
 * are handed over strictly in bucket order, so every rank calls the
 * collectives in the same order whatever order its gradients finish in.
 * After backward, parameters that got no gradient are packed as zeros
 * (find_unused_parameters) or reported, the remaining buckets are handed
 * over, and the calling thread waits for the thread to finish, then
 * copies every mean back into its gradient.
 *
 * Without overlap (config.overlap false, and keel_data_parallel_sync_
 * gradients) the same packing, all-reduce and copy back run bucket after
 * bucket once backward has finished.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/dist_internal.h"

struct dp_slot {
    keel_tensor *param; /* borrowed from the state dict */
    const char *name;
    uint64_t offset; /* elements into the bucket */
    uint64_t numel;
    keel_data_parallel *dp;
    int bucket;
    bool ready;   /* packed in this backward */
    bool hooked;  /* carries this DataParallel's grad-ready hook */
};

struct dp_bucket {
    keel_dtype dtype;
    keel_tensor *buffer;
    struct dp_slot *slots;
    int nslots;
    uint64_t numel;
    int pending;        /* slots not yet packed in this backward */
    keel_event packed;  /* recorded on the default stream once packed */
};

/* The communication thread and what it shares with the caller (under
 * mu): buckets [0, queued) were handed over in this backward, [0, done)
 * are reduced. */
struct dp_comm {
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int queued, done;
    bool quit;
    keel_status st;      /* first failure, sticky */
    char msg[1024];
    keel_stream stream;
    double seconds;      /* inside the all-reduces */
};

struct keel_data_parallel {
    keel_layer *layer;
    keel_state_dict *params;
    keel_dist_group *group;
    bool find_unused;
    bool sync;
    struct dp_bucket *buckets;
    int nbuckets;
    int64_t reductions;
    double sync_seconds;
    bool overlap;
    bool armed;      /* inside keel_data_parallel_backward, synchronising */
    int next_launch; /* next bucket to hand to the thread */
    int64_t early;   /* buckets handed over while backward was running */
    struct dp_comm comm;
};

void keel_data_parallel_config_init(keel_data_parallel_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->struct_size = sizeof(*cfg);
    cfg->comm_buffer_size_mb = 25.0;
    cfg->last_comm_buffer_size_mb = 1.0;
    cfg->overlap = true;
}

static void *comm_main(void *arg);
static keel_status on_grad_ready(keel_tensor *leaf, void *ctx);
static keel_status comm_start(keel_data_parallel *dp);

static void comm_stop(keel_data_parallel *dp)
{
    struct dp_comm *c = &dp->comm;

    if (!c->started)
        return;
    pthread_mutex_lock(&c->mu);
    c->quit = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    c->started = false;
}

void keel_data_parallel_free(keel_data_parallel *dp)
{
    if (!dp)
        return;
    comm_stop(dp);
    if (dp->comm.stream && dp->nbuckets)
        keel_stream_destroy(keel_tensor_place(dp->buckets[0].buffer),
                            dp->comm.stream);
    for (int b = 0; b < dp->nbuckets; b++) {
        struct dp_bucket *bk = &dp->buckets[b];

        for (int s = 0; s < bk->nslots; s++)
            if (bk->slots[s].hooked)
                keel_tensor_remove_grad_ready_hook(bk->slots[s].param,
                                                   on_grad_ready,
                                                   &bk->slots[s]);
        if (bk->packed)
            keel_event_destroy(keel_tensor_place(bk->buffer), bk->packed);
        keel_tensor_free(bk->buffer);
        free(bk->slots);
    }
    free(dp->buckets);
    keel_state_dict_free(dp->params);
    free(dp);
}

/* Every parameter and buffer = the group's rank 0's. */
static keel_status broadcast_state(keel_data_parallel *dp)
{
    int32_t root = keel_dist_group_global_rank(dp->group, 0);
    keel_state_dict *sd = NULL;
    keel_status st;

    st = keel_layer_state_dict(dp->layer, &sd);
    for (int64_t i = 0; !st && i < keel_state_dict_count(sd); i++) {
        keel_tensor *t = NULL;

        st = keel_state_dict_at(sd, i, NULL, &t);
        if (!st)
            st = keel_dist_broadcast(t, root, dp->group);
    }
    keel_state_dict_free(sd);
    return st;
}

static keel_status bucket_add(struct dp_bucket *bk, keel_tensor *p,
                              const char *name)
{
    struct dp_slot *v = realloc(bk->slots,
                                (size_t)(bk->nslots + 1) * sizeof(*v));

    if (!v)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_data_parallel_create: out of host memory");
    bk->slots = v;
    memset(&v[bk->nslots], 0, sizeof(v[0]));
    v[bk->nslots].param = p;
    v[bk->nslots].name = name;
    v[bk->nslots].offset = bk->numel;
    v[bk->nslots].numel = (uint64_t)keel_tensor_numel(p);
    bk->numel += (uint64_t)keel_tensor_numel(p);
    bk->nslots++;
    return KEEL_STATUS_OK;
}

static keel_status plan_buckets(keel_data_parallel *dp, double first_mb,
                                double other_mb)
{
    int64_t n = keel_state_dict_count(dp->params);
    struct dp_bucket *cur = NULL;
    uint64_t bytes = 0, limit = 0;
    keel_status st = KEEL_STATUS_OK;

    for (int64_t i = n - 1; i >= 0 && !st; i--) {
        const char *name = NULL;
        keel_tensor *p = NULL;
        keel_dtype dt;
        uint64_t pb;

        st = keel_state_dict_at(dp->params, i, &name, &p);
        if (st)
            break;
        if (keel_tensor_stop_gradient(p))
            continue;
        dt = keel_tensor_dtype(p);
        pb = (uint64_t)keel_tensor_numel(p) * keel_dtype_size(dt);
        if (!cur || cur->dtype != dt || (bytes && bytes + pb > limit)) {
            struct dp_bucket *v = realloc(dp->buckets,
                                          (size_t)(dp->nbuckets + 1) *
                                              sizeof(*v));

            if (!v)
                return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                                   "keel_data_parallel_create: out of host "
                                   "memory");
            dp->buckets = v;
            cur = &v[dp->nbuckets];
            memset(cur, 0, sizeof(*cur));
            cur->dtype = dt;
            limit = (uint64_t)((dp->nbuckets ? other_mb : first_mb) *
                               1048576.0);
            dp->nbuckets++;
            bytes = 0;
        }
        st = bucket_add(cur, p, name);
        bytes += pb;
    }
    for (int b = 0; b < dp->nbuckets && !st; b++) {
        int64_t shape[1] = {(int64_t)dp->buckets[b].numel};

        st = keel__tensor_new(keel_tensor_place(dp->buckets[b].slots[0].param),
                              dp->buckets[b].dtype, 1, shape,
                              &dp->buckets[b].buffer);
    }
    return st;
}

keel_status keel_data_parallel_create(keel_layer *layer,
                                      const keel_data_parallel_config *cfg,
                                      keel_data_parallel **out)
{
    static const char what[] = "keel_data_parallel_create";
    keel_data_parallel_config c;
    keel_data_parallel *dp;
    keel_status st;

    if (!out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: out is NULL",
                           what);
    *out = NULL;
    if (!layer)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: layer is NULL",
                           what);
    keel_data_parallel_config_init(&c);
    if (cfg) {
        if (cfg->struct_size < offsetof(keel_data_parallel_config, group) ||
            cfg->struct_size > 4096)
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "%s: config struct_size %u is wrong (use "
                               "keel_data_parallel_config_init)", what,
                               cfg->struct_size);
        memcpy(&c, cfg, cfg->struct_size < sizeof(c) ? cfg->struct_size
                                                     : sizeof(c));
    }
    if (!(c.comm_buffer_size_mb > 0 && c.comm_buffer_size_mb <= 1048576) ||
        !(c.last_comm_buffer_size_mb > 0 &&
          c.last_comm_buffer_size_mb <= 1048576))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: comm_buffer_size_mb %g and "
                           "last_comm_buffer_size_mb %g must be in (0, "
                           "1048576]", what, c.comm_buffer_size_mb,
                           c.last_comm_buffer_size_mb);
    if (!keel_dist_is_initialized())
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "%s: call keel_dist_init first", what);
    if (keel_dist_group_rank(c.group) < 0)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: rank %d is not a member of the group",
                           what, (int)keel_dist_get_rank());
    dp = calloc(1, sizeof(*dp));
    if (!dp)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "%s: out of host memory", what);
    dp->layer = layer;
    dp->group = c.group;
    dp->find_unused = c.find_unused_parameters;
    dp->sync = true;
    dp->overlap = c.overlap;
    st = broadcast_state(dp);
    if (!st)
        st = keel_layer_parameters(layer, &dp->params);
    if (!st)
        st = plan_buckets(dp, c.last_comm_buffer_size_mb,
                          c.comm_buffer_size_mb);
    /* One bucket fills only when backward ends: nothing to overlap, and
     * the hand-over would only add a thread switch. */
    if (!st && dp->overlap && dp->nbuckets > 1)
        st = comm_start(dp);
    if (st) {
        keel_data_parallel_free(dp);
        return st;
    }
    *out = dp;
    return KEEL_STATUS_OK;
}

/* Element k of a bucket's buffer, as a device address. */
static keel_dptr slot_addr(const struct dp_bucket *bk, uint64_t k)
{
    return keel__tensor_dptr(bk->buffer) + k * keel_dtype_size(bk->dtype);
}

/* Copy a slot's gradient into its bucket (zeros when it has none and
 * unused parameters are allowed), in default-stream order. */
static keel_status pack_slot(keel_data_parallel *dp, struct dp_bucket *bk,
                             struct dp_slot *sl)
{
    keel_place place = keel_tensor_place(bk->buffer);
    size_t es = keel_dtype_size(bk->dtype);
    keel_tensor *g = keel_tensor_grad(sl->param), *gc = NULL;
    keel_status st;

    if (!g && !dp->find_unused)
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "keel_data_parallel: parameter \"%s\" got no "
                           "gradient in this backward pass on rank %d; set "
                           "find_unused_parameters if some parameters are "
                           "unused in some steps",
                           sl->name, (int)keel_dist_get_rank());
    if (!g)
        return keel_mem_set_async(place, NULL, slot_addr(bk, sl->offset), 0,
                                  sl->numel * es);
    st = keel_contiguous(g, &gc);
    if (!st)
        st = keel_mem_copy_d2d_async(place, NULL, slot_addr(bk, sl->offset),
                                     keel__tensor_dptr(gc), sl->numel * es);
    keel_tensor_free(gc);
    keel_tensor_free(g);
    return st;
}

/* Copy the bucket's means back into the gradients (default stream; the
 * caller waits). */
static keel_status unpack_bucket(struct dp_bucket *bk)
{
    keel_place place = keel_tensor_place(bk->buffer);
    size_t es = keel_dtype_size(bk->dtype);
    keel_status st = KEEL_STATUS_OK;

    for (int s = 0; s < bk->nslots && !st; s++) {
        struct dp_slot *sl = &bk->slots[s];
        keel_tensor *g = keel_tensor_grad(sl->param), *fresh = NULL;

        if (!g || !keel_tensor_is_contiguous(g)) {
            /* No gradient yet (unused here), or a strided one: give the
             * parameter a new contiguous gradient. */
            const int64_t *shape = keel_tensor_shape(sl->param);

            st = keel__tensor_new(place, bk->dtype,
                                  keel_tensor_ndim(sl->param), shape, &fresh);
            if (!st)
                st = keel_tensor_set_grad(sl->param, fresh);
            keel_tensor_free(fresh);
            keel_tensor_free(g);
            g = st ? NULL : keel_tensor_grad(sl->param);
            if (!g)
                break;
        }
        st = keel_mem_copy_d2d_async(place, NULL, keel__tensor_dptr(g),
                                     slot_addr(bk, sl->offset),
                                     sl->numel * es);
        keel_tensor_free(g);
    }
    return st;
}

/* One wait for every bucket's copies back into the gradients (they run in
 * default-stream order). */
static keel_status wait_copies_back(keel_data_parallel *dp)
{
    if (!dp->nbuckets)
        return KEEL_STATUS_OK;
    return keel_stream_synchronize(keel_tensor_place(dp->buckets[0].buffer),
                                   NULL);
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;

    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) +
           (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

static keel_status sync_bucket(keel_data_parallel *dp, struct dp_bucket *bk)
{
    keel_status st = KEEL_STATUS_OK;

    for (int s = 0; s < bk->nslots && !st; s++)
        st = pack_slot(dp, bk, &bk->slots[s]);
    if (!st)
        st = keel_dist_all_reduce(bk->buffer, KEEL_REDUCE_AVG, dp->group);
    if (st)
        return st;
    dp->reductions++;
    return unpack_bucket(bk);
}

keel_status keel_data_parallel_sync_gradients(keel_data_parallel *dp)
{
    keel_status st = KEEL_STATUS_OK;
    struct timespec t0;

    if (!dp)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_data_parallel_sync_gradients: dp is NULL");
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int b = 0; b < dp->nbuckets && !st; b++)
        st = sync_bucket(dp, &dp->buckets[b]);
    if (!st)
        st = wait_copies_back(dp);
    dp->sync_seconds += seconds_since(&t0);
    return st;
}

/* ---- overlap ------------------------------------------------------------- */

/* The communication thread: reduce each bucket handed over, in order. */
static void *comm_main(void *arg)
{
    keel_data_parallel *dp = arg;
    struct dp_comm *c = &dp->comm;

    pthread_mutex_lock(&c->mu);
    for (;;) {
        struct dp_bucket *bk;
        struct timespec t0;
        keel_status st = KEEL_STATUS_OK;
        bool skip;

        while (!c->quit && c->done == c->queued)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->done == c->queued)
            break; /* quit, nothing left */
        bk = &dp->buckets[c->done];
        skip = c->st != KEEL_STATUS_OK; /* the communicator is unusable */
        pthread_mutex_unlock(&c->mu);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (!skip) {
            keel_place place = keel_tensor_place(bk->buffer);

            st = keel_stream_wait_event(place, c->stream, bk->packed);
            if (!st)
                st = keel__dist_all_reduce_on(bk->buffer, KEEL_REDUCE_AVG,
                                              dp->group, c->stream);
        }
        pthread_mutex_lock(&c->mu);
        c->seconds += seconds_since(&t0);
        if (st && !c->st) {
            c->st = st;
            snprintf(c->msg, sizeof(c->msg), "%s", keel_last_error());
        }
        if (!skip && !st)
            dp->reductions++;
        c->done++;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Hand every bucket that is packed, in order, to the thread. */
static keel_status launch_ready(keel_data_parallel *dp)
{
    struct dp_comm *c = &dp->comm;
    int from = dp->next_launch;
    keel_status st = KEEL_STATUS_OK;

    while (!st && dp->next_launch < dp->nbuckets &&
           dp->buckets[dp->next_launch].pending == 0) {
        struct dp_bucket *bk = &dp->buckets[dp->next_launch];

        st = keel_event_record(keel_tensor_place(bk->buffer), bk->packed,
                               NULL);
        if (!st)
            dp->next_launch++;
    }
    if (dp->next_launch != from) {
        if (dp->armed)
            dp->early += dp->next_launch - from;
        pthread_mutex_lock(&c->mu);
        c->queued = dp->next_launch;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
    return st;
}

static keel_status pack_ready(keel_data_parallel *dp, struct dp_slot *sl)
{
    struct dp_bucket *bk = &dp->buckets[sl->bucket];
    keel_status st = pack_slot(dp, bk, sl);

    if (st)
        return st;
    sl->ready = true;
    if (--bk->pending == 0)
        return launch_ready(dp);
    return KEEL_STATUS_OK;
}

static keel_status on_grad_ready(keel_tensor *leaf, void *ctx)
{
    struct dp_slot *sl = ctx;

    (void)leaf;
    if (!sl->dp->armed || sl->ready)
        return KEEL_STATUS_OK;
    return pack_ready(sl->dp, sl);
}

static keel_status comm_start(keel_data_parallel *dp)
{
    struct dp_comm *c = &dp->comm;
    keel_place place;
    keel_status st = KEEL_STATUS_OK;

    if (!dp->nbuckets)
        return KEEL_STATUS_OK;
    place = keel_tensor_place(dp->buckets[0].buffer);
    st = keel_stream_create(place, 0, &c->stream);
    for (int b = 0; b < dp->nbuckets && !st; b++)
        st = keel_event_create(place, &dp->buckets[b].packed);
    for (int b = 0; b < dp->nbuckets && !st; b++)
        for (int s = 0; s < dp->buckets[b].nslots && !st; s++) {
            struct dp_slot *sl = &dp->buckets[b].slots[s];

            sl->dp = dp;
            sl->bucket = b;
            st = keel_tensor_add_grad_ready_hook(sl->param, on_grad_ready,
                                                 sl);
            sl->hooked = st == KEEL_STATUS_OK;
        }
    if (st)
        return st;
    if (pthread_mutex_init(&c->mu, NULL))
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_data_parallel_create: cannot make a mutex");
    if (pthread_cond_init(&c->cv, NULL)) {
        pthread_mutex_destroy(&c->mu);
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_data_parallel_create: cannot make a "
                           "condition variable");
    }
    if (pthread_create(&c->thread, NULL, comm_main, dp)) {
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_data_parallel_create: cannot start the "
                           "communication thread");
    }
    c->started = true;
    return KEEL_STATUS_OK;
}

/* Backward with the buckets reduced as they fill (see the top). */
static keel_status backward_overlapped(keel_data_parallel *dp,
                                       keel_tensor *loss)
{
    struct dp_comm *c = &dp->comm;
    struct timespec t0;
    keel_status st, wait_st = KEEL_STATUS_OK;

    pthread_mutex_lock(&c->mu);
    st = c->st;
    c->queued = c->done = 0;
    pthread_mutex_unlock(&c->mu);
    if (st)
        return keel__error(st, "keel_data_parallel_backward: an earlier "
                               "gradient all-reduce failed, and the "
                               "communicator is unusable: %s", c->msg);
    dp->next_launch = 0;
    for (int b = 0; b < dp->nbuckets; b++) {
        dp->buckets[b].pending = dp->buckets[b].nslots;
        for (int s = 0; s < dp->buckets[b].nslots; s++)
            dp->buckets[b].slots[s].ready = false;
    }
    dp->armed = true;
    st = keel_backward(loss, NULL, false);
    dp->armed = false;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* What backward did not reach: unused parameters. */
    for (int b = dp->next_launch; !st && b < dp->nbuckets; b++)
        for (int s = 0; !st && s < dp->buckets[b].nslots; s++)
            if (!dp->buckets[b].slots[s].ready)
                st = pack_ready(dp, &dp->buckets[b].slots[s]);
    /* Whatever happened, wait for what was handed over. */
    pthread_mutex_lock(&c->mu);
    while (c->done < c->queued)
        pthread_cond_wait(&c->cv, &c->mu);
    wait_st = c->st;
    pthread_mutex_unlock(&c->mu);
    if (!st && wait_st)
        st = keel__error(wait_st, "keel_data_parallel_backward: %s", c->msg);
    for (int b = 0; !st && b < dp->nbuckets; b++)
        st = unpack_bucket(&dp->buckets[b]);
    if (!st)
        st = wait_copies_back(dp);
    dp->sync_seconds += seconds_since(&t0);
    return st;
}

keel_status keel_data_parallel_backward(keel_data_parallel *dp,
                                        keel_tensor *loss)
{
    keel_status st;

    if (!dp || !loss)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_data_parallel_backward: %s is NULL",
                           dp ? "loss" : "dp");
    if (dp->sync && dp->overlap && dp->comm.started)
        return backward_overlapped(dp, loss);
    st = keel_backward(loss, NULL, false);
    if (!st && dp->sync)
        st = keel_data_parallel_sync_gradients(dp);
    return st;
}

void keel_data_parallel_set_sync(keel_data_parallel *dp, bool sync)
{
    if (dp)
        dp->sync = sync;
}

int keel_data_parallel_num_buckets(const keel_data_parallel *dp)
{
    return dp ? dp->nbuckets : 0;
}

int64_t keel_data_parallel_num_reductions(const keel_data_parallel *dp)
{
    return dp ? dp->reductions : 0;
}

double keel_data_parallel_sync_seconds(const keel_data_parallel *dp)
{
    return dp ? dp->sync_seconds : 0.0;
}

int64_t keel_data_parallel_num_early_reductions(const keel_data_parallel *dp)
{
    return dp ? dp->early : 0;
}

double keel_data_parallel_comm_seconds(const keel_data_parallel *dp)
{
    double v;

    if (!dp)
        return 0.0;
    if (!dp->comm.started)
        return dp->sync_seconds;
    pthread_mutex_lock((pthread_mutex_t *)&dp->comm.mu);
    v = dp->comm.seconds;
    pthread_mutex_unlock((pthread_mutex_t *)&dp->comm.mu);
    return v;
}
