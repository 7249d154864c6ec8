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
 * Synchronising a bucket packs its gradients into the buffer (device
 * copies on the default stream), all-reduces it with avg on the plugin's
 * communicator, and copies the mean back into each gradient. The buckets
 * are reduced one after another once backward has finished: this version
 * does not yet start a bucket from inside the backward pass, so
 * communication does not overlap computation (docs/distributed.md).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/dist_internal.h"

struct dp_slot {
    keel_tensor *param; /* borrowed from the state dict */
    const char *name;
    uint64_t offset; /* elements into the bucket */
    uint64_t numel;
};

struct dp_bucket {
    keel_dtype dtype;
    keel_tensor *buffer;
    struct dp_slot *slots;
    int nslots;
    uint64_t numel;
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
};

void keel_data_parallel_config_init(keel_data_parallel_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->struct_size = sizeof(*cfg);
    cfg->comm_buffer_size_mb = 25.0;
    cfg->last_comm_buffer_size_mb = 1.0;
}

void keel_data_parallel_free(keel_data_parallel *dp)
{
    if (!dp)
        return;
    for (int b = 0; b < dp->nbuckets; b++) {
        keel_tensor_free(dp->buckets[b].buffer);
        free(dp->buckets[b].slots);
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
    st = broadcast_state(dp);
    if (!st)
        st = keel_layer_parameters(layer, &dp->params);
    if (!st)
        st = plan_buckets(dp, c.last_comm_buffer_size_mb,
                          c.comm_buffer_size_mb);
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

static keel_status sync_bucket(keel_data_parallel *dp, struct dp_bucket *bk)
{
    keel_place place = keel_tensor_place(bk->buffer);
    size_t es = keel_dtype_size(bk->dtype);
    keel_status st = KEEL_STATUS_OK;

    for (int s = 0; s < bk->nslots && !st; s++) {
        struct dp_slot *sl = &bk->slots[s];
        keel_tensor *g = keel_tensor_grad(sl->param), *gc = NULL;

        if (!g && !dp->find_unused)
            return keel__error(KEEL_STATUS_INVALID_STATE,
                               "keel_data_parallel: parameter \"%s\" got no "
                               "gradient in this backward pass on rank %d; "
                               "set find_unused_parameters if some "
                               "parameters are unused in some steps",
                               sl->name, (int)keel_dist_get_rank());
        if (!g) {
            st = keel_mem_set_async(place, NULL, slot_addr(bk, sl->offset),
                                    0, sl->numel * es);
            continue;
        }
        st = keel_contiguous(g, &gc);
        if (!st)
            st = keel_mem_copy_d2d_async(place, NULL,
                                         slot_addr(bk, sl->offset),
                                         keel__tensor_dptr(gc),
                                         sl->numel * es);
        keel_tensor_free(gc);
        keel_tensor_free(g);
    }
    if (!st)
        st = keel_dist_all_reduce(bk->buffer, KEEL_REDUCE_AVG, dp->group);
    if (st)
        return st;
    dp->reductions++;
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
    return st; /* the copies back finish in stream order (caller waits) */
}

keel_status keel_data_parallel_sync_gradients(keel_data_parallel *dp)
{
    keel_status st = KEEL_STATUS_OK;
    struct timespec t0, t1;

    if (!dp)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_data_parallel_sync_gradients: dp is NULL");
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int b = 0; b < dp->nbuckets && !st; b++)
        st = sync_bucket(dp, &dp->buckets[b]);
    /* One wait for every bucket's copies back into the gradients. */
    if (!st && dp->nbuckets)
        st = keel_stream_synchronize(keel_tensor_place(dp->buckets[0].buffer),
                                     NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    dp->sync_seconds += (double)(t1.tv_sec - t0.tv_sec) +
                        (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
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
