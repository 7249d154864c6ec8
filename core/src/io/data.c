/*
 * Datasets and the batching loader.
 *
 * Loader threading: one producer thread makes batches in epoch order into
 * a ring of `prefetch` slots; keel_dataloader_next pops them in order.
 * Shared state is guarded by one mutex with one condition variable (both
 * sides broadcast on every change). The producer marks itself busy while
 * it builds a batch outside the lock; a restart (reset, set_epoch, the
 * automatic move to the next epoch) stops new work, waits until the
 * producer is idle, swaps in the new epoch's order and empties the ring,
 * so the producer never sees an order change under it.
 *
 * Shuffle: Fisher-Yates from the last index down; the draw for position i
 * of epoch e is 64 bits of Philox-4x32-10 with key = seed and counter =
 * (i, e), reduced modulo i + 1 (bias below 2^-30 for any dataset under
 * 2^34 samples).
 *
 * Sharding (num_replicas R > 1): paddle.io.DistributedBatchSampler's
 * __iter__ with the shuffle above in place of numpy's. The N indices are
 * padded to T = ceil(N / R) * R, the padded list is shuffled with the
 * permutation of length T, and the rank takes its batch_size slices from
 * each group of R batches, then its share of the short tail. With R = 1
 * that is the plain epoch order, computed without the detour.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/data.h>
#include <keel/philox.h>

#include "tensor/tensor_internal.h"

#define PREFETCH_MAX 64
#define REPLICAS_MAX (1 << 20)

/* ==== datasets =========================================================== */

struct keel_dataset {
    atomic_int refcount;
    keel_dataset_ops ops;
    int num_fields;
    void *ctx;
};

keel_status keel_dataset_create(const keel_dataset_ops *ops, int num_fields,
                                void *ctx, keel_dataset **out)
{
    keel_dataset *ds;
    size_t n;

    if (!out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_dataset_create: out is NULL");
    *out = NULL;
    if (!ops)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_dataset_create: ops is NULL");
    n = ops->struct_size < sizeof(*ops) ? ops->struct_size : sizeof(*ops);
    if (n < offsetof(keel_dataset_ops, destroy))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_dataset_create: ops->struct_size %u is "
                           "too small (length and get are required)",
                           ops->struct_size);
    if (num_fields < 1 || num_fields > KEEL_DATASET_MAX_FIELDS)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_dataset_create: num_fields %d is outside "
                           "[1, %d]", num_fields, KEEL_DATASET_MAX_FIELDS);
    ds = calloc(1, sizeof(*ds));
    if (!ds)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_dataset_create: out of host memory");
    memcpy(&ds->ops, ops, n);
    ds->ops.struct_size = sizeof(ds->ops);
    if (!ds->ops.length || !ds->ops.get) {
        free(ds);
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_dataset_create: ops->%s is NULL",
                           ops->length ? "get" : "length");
    }
    atomic_init(&ds->refcount, 1);
    ds->num_fields = num_fields;
    ds->ctx = ctx;
    *out = ds;
    return KEEL_STATUS_OK;
}

keel_dataset *keel_dataset_ref(keel_dataset *ds)
{
    if (ds)
        atomic_fetch_add(&ds->refcount, 1);
    return ds;
}

void keel_dataset_free(keel_dataset *ds)
{
    if (!ds || atomic_fetch_sub(&ds->refcount, 1) != 1)
        return;
    if (ds->ops.destroy)
        ds->ops.destroy(ds->ctx);
    free(ds);
}

int64_t keel_dataset_length(const keel_dataset *ds)
{
    int64_t n;

    if (!ds)
        return 0;
    n = ds->ops.length(ds->ctx);
    return n > 0 ? n : 0;
}

int keel_dataset_num_fields(const keel_dataset *ds)
{
    return ds ? ds->num_fields : 0;
}

keel_status keel_dataset_get(keel_dataset *ds, int64_t index,
                             keel_tensor **fields)
{
    int64_t n;
    keel_status st;

    if (!ds || !fields)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_dataset_get: %s is NULL",
                           ds ? "fields" : "dataset");
    n = keel_dataset_length(ds);
    if (index < 0 || index >= n)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_dataset_get: index %lld is outside [0, "
                           "%lld)", (long long)index, (long long)n);
    for (int k = 0; k < ds->num_fields; k++)
        fields[k] = NULL;
    keel_clear_error();
    st = ds->ops.get(ds->ctx, index, fields);
    if (st != KEEL_STATUS_OK) {
        for (int k = 0; k < ds->num_fields; k++) {
            keel_tensor_free(fields[k]);
            fields[k] = NULL;
        }
        if (keel_last_status() == KEEL_STATUS_OK)
            keel__error(st, "keel_dataset_get: the dataset failed on sample "
                        "%lld with %s (no message)", (long long)index,
                        keel_status_name(st));
        return st;
    }
    for (int k = 0; k < ds->num_fields; k++)
        if (!fields[k]) {
            for (int j = 0; j < ds->num_fields; j++) {
                keel_tensor_free(fields[j]);
                fields[j] = NULL;
            }
            return keel__error(KEEL_STATUS_INTERNAL,
                               "keel_dataset_get: the dataset returned OK "
                               "for sample %lld but left field %d NULL",
                               (long long)index, k);
        }
    return KEEL_STATUS_OK;
}

/* ---- the in-memory tensor dataset --------------------------------------- */

struct tensor_ds {
    int n;
    int64_t length;
    keel_tensor *t[KEEL_DATASET_MAX_FIELDS];
};

static int64_t tensor_ds_length(void *ctx)
{
    return ((struct tensor_ds *)ctx)->length;
}

static keel_status tensor_ds_get(void *ctx, int64_t index,
                                 keel_tensor **fields)
{
    struct tensor_ds *d = ctx;

    for (int k = 0; k < d->n; k++) {
        const keel_tensor *t = d->t[k];
        keel_status st;

        st = keel__tensor_view(t, t->ndim - 1, t->shape + 1, t->strides + 1,
                               t->offset + index * t->strides[0],
                               &fields[k]);
        if (st != KEEL_STATUS_OK)
            return st; /* keel_dataset_get frees the earlier fields */
    }
    return KEEL_STATUS_OK;
}

static void tensor_ds_destroy(void *ctx)
{
    struct tensor_ds *d = ctx;

    for (int k = 0; k < d->n; k++)
        keel_tensor_free(d->t[k]);
    free(d);
}

keel_status keel_tensor_dataset_create(keel_tensor *const *tensors, int n,
                                       keel_dataset **out)
{
    static const keel_dataset_ops ops = {
        .struct_size = sizeof(keel_dataset_ops),
        .length = tensor_ds_length,
        .get = tensor_ds_get,
        .destroy = tensor_ds_destroy,
    };
    static const char what[] = "keel_tensor_dataset_create";
    struct tensor_ds *d;
    keel_status st;

    if (!out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: out is NULL",
                           what);
    *out = NULL;
    if (!tensors || n < 1 || n > KEEL_DATASET_MAX_FIELDS)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: %d tensors; expected 1 to %d", what,
                           tensors ? n : 0, KEEL_DATASET_MAX_FIELDS);
    for (int k = 0; k < n; k++) {
        char a[128], b[128];

        if (!tensors[k])
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "%s: tensors[%d] is NULL", what, k);
        if (tensors[k]->ndim < 1)
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "%s: tensors[%d] is a scalar; samples are "
                               "taken along axis 0", what, k);
        if (tensors[k]->shape[0] != tensors[0]->shape[0])
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "%s: tensors[%d] %s and tensors[0] %s differ "
                               "in their leading size", what, k,
                               keel__tensor_str(tensors[k], a, sizeof(a)),
                               keel__tensor_str(tensors[0], b, sizeof(b)));
    }
    d = calloc(1, sizeof(*d));
    if (!d)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "%s: out of host memory", what);
    d->n = n;
    d->length = tensors[0]->shape[0];
    for (int k = 0; k < n; k++)
        d->t[k] = keel_tensor_ref(tensors[k]);
    st = keel_dataset_create(&ops, n, d, out);
    if (st != KEEL_STATUS_OK)
        tensor_ds_destroy(d);
    return st;
}

/* ==== collation ========================================================== */

static bool same_geometry(const keel_tensor *a, const keel_tensor *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

static bool same_place(keel_place a, keel_place b)
{
    return a.plugin == b.plugin && a.device == b.device;
}

/* The fields of one sample. */
typedef keel_tensor *sample_fields[KEEL_DATASET_MAX_FIELDS];

/* Stack samples[0..count)[field] into one new tensor on `place`. */
static keel_status stack_field(sample_fields *samples, int64_t count,
                               int field, keel_place place,
                               keel_tensor **out)
{
    const keel_tensor *s0 = samples[0][field];
    int64_t shape[KEEL_MAX_DIMS];
    uint64_t sbytes;
    bool all_here = true;
    unsigned char *host = NULL;
    keel_tensor *b = NULL;
    keel_tensor_desc bd;
    keel_status st = KEEL_STATUS_OK;

    *out = NULL;
    if (s0->ndim + 1 > KEEL_MAX_DIMS) {
        char a[128];

        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "collate: field %d samples are %s; a batch of "
                           "them would exceed %d dimensions", field,
                           keel__tensor_str(s0, a, sizeof(a)), KEEL_MAX_DIMS);
    }
    for (int64_t i = 0; i < count; i++) {
        const keel_tensor *s = samples[i][field];

        if (!same_geometry(s, s0)) {
            char a[128], c[128];

            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "collate: field %d of batch sample %lld is %s "
                               "but sample 0 is %s; samples must match to be "
                               "stacked", field, (long long)i,
                               keel__tensor_str(s, a, sizeof(a)),
                               keel__tensor_str(s0, c, sizeof(c)));
        }
        all_here = all_here && same_place(s->storage->place, place);
    }
    shape[0] = count;
    for (int i = 0; i < s0->ndim; i++)
        shape[i + 1] = s0->shape[i];
    sbytes = (uint64_t)keel__numel(s0->ndim, s0->shape) *
             keel_dtype_size(s0->dtype);
    st = keel__tensor_new(place, s0->dtype, s0->ndim + 1, shape, &b);
    if (st != KEEL_STATUS_OK || !sbytes)
        goto out;
    keel__desc(b, &bd);
    if (all_here) {
        /* Device to device, one sample at a time. */
        for (int64_t i = 0; i < count && st == KEEL_STATUS_OK; i++) {
            keel_tensor *c;
            keel_tensor_desc cd;

            st = keel_contiguous(samples[i][field], &c);
            if (st != KEEL_STATUS_OK)
                break;
            keel__desc(c, &cd);
            st = keel_mem_copy_d2d(place, bd.data + i * sbytes, cd.data,
                                   sbytes);
            keel_tensor_free(c);
        }
        goto out;
    }
    /* Elsewhere: gather on the host, then one copy to the device. */
    host = malloc((size_t)(sbytes * (uint64_t)count));
    if (!host) {
        st = keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                         "collate: out of host memory for a %llu-byte batch",
                         (unsigned long long)(sbytes * (uint64_t)count));
        goto out;
    }
    for (int64_t i = 0; i < count && st == KEEL_STATUS_OK; i++)
        st = keel_tensor_to_host(samples[i][field], host + i * sbytes,
                                 (size_t)sbytes);
    if (st == KEEL_STATUS_OK)
        st = keel_mem_copy_h2d(place, bd.data, host, sbytes * (uint64_t)count);
out:
    free(host);
    if (st != KEEL_STATUS_OK) {
        keel_tensor_free(b);
        return st;
    }
    *out = b;
    return KEEL_STATUS_OK;
}

/* ==== the loader ========================================================= */

struct slot {
    keel_batch batch;
    keel_status status;
    char *message; /* the producer's error text, when status != OK */
};

struct keel_dataloader {
    keel_dataset *ds;
    int64_t batch_size;
    bool shuffle;
    bool drop_last;
    uint64_t seed;
    keel_place place;
    int prefetch;
    int32_t num_replicas; /* >= 1 */
    int32_t rank;         /* in [0, num_replicas) */

    /* The epoch being served; both sides read these, only a restart
     * (with the producer idle) writes them. */
    uint64_t epoch;
    int64_t length;   /* samples of this rank in this epoch */
    int64_t nbatches; /* batches in this epoch */
    int64_t *order;   /* sample order of this epoch */

    /* Consumer side. */
    int64_t next_index; /* batch the consumer gets next */
    bool end_reported;  /* the end of this epoch was returned */

    /* Producer side, under `lock`. */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    bool have_thread;
    bool stop;
    bool busy;             /* building a batch outside the lock */
    int64_t produce_index; /* next batch to build */
    struct slot *ring;
    int head;  /* oldest filled slot */
    int count; /* filled slots */
};

void keel_dataloader_config_init(keel_dataloader_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->struct_size = sizeof(*cfg);
    cfg->batch_size = 1;
    cfg->prefetch = 2;
    cfg->num_replicas = 1;
    cfg->rank = 0;
}

void keel_batch_release(keel_batch *batch)
{
    if (!batch)
        return;
    for (int k = 0; k < KEEL_DATASET_MAX_FIELDS; k++)
        keel_tensor_free(batch->fields[k]);
    memset(batch, 0, sizeof(*batch));
}

static void slot_clear(struct slot *s)
{
    keel_batch_release(&s->batch);
    free(s->message);
    s->message = NULL;
    s->status = KEEL_STATUS_OK;
}

static uint64_t philox64(uint64_t seed, uint64_t i, uint64_t epoch)
{
    uint32_t c[4] = {(uint32_t)i, (uint32_t)(i >> 32), (uint32_t)epoch,
                     (uint32_t)(epoch >> 32)};

    keel_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
    return (uint64_t)c[1] << 32 | c[0];
}

static void fill_order(bool shuffle, uint64_t seed, uint64_t epoch,
                       int64_t *order, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    if (!shuffle)
        return;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(philox64(seed, (uint64_t)i, epoch) %
                              (uint64_t)(i + 1));
        int64_t t = order[i];

        order[i] = order[j];
        order[j] = t;
    }
}

keel_status keel_dataloader_epoch_order(const keel_dataloader *dl,
                                        uint64_t epoch, int64_t *order,
                                        int64_t n)
{
    int64_t len;

    if (!dl || !order)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_dataloader_epoch_order: %s is NULL",
                           dl ? "order" : "loader");
    len = keel_dataset_length(dl->ds);
    if (n < len)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_dataloader_epoch_order: room for %lld "
                           "indices, the dataset has %lld samples",
                           (long long)n, (long long)len);
    fill_order(dl->shuffle, dl->seed, epoch, order, len);
    return KEEL_STATUS_OK;
}

/* Samples per rank (num_samples) and the padded epoch length
 * (total_size) for a dataset of n samples. */
static keel_status shard_sizes(const keel_dataloader *dl, int64_t n,
                               int64_t *per_rank, int64_t *total)
{
    int64_t r = dl->num_replicas, s = n / r + (n % r != 0);

    if (s > INT64_MAX / r ||
        (uint64_t)(s * r) > SIZE_MAX / sizeof(int64_t))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_dataloader: %lld samples padded for %lld "
                           "replicas need more indices than this machine "
                           "can address", (long long)n, (long long)r);
    *per_rank = s;
    *total = s * r;
    return KEEL_STATUS_OK;
}

/* This rank's samples of `epoch` into out[0 .. per_rank), for a dataset
 * of n samples with the sizes shard_sizes gave; `what` names the caller
 * in errors. */
static keel_status fill_rank_order(const keel_dataloader *dl, uint64_t epoch,
                                   int64_t n, int64_t per_rank, int64_t total,
                                   int64_t *out, const char *what)
{
    int64_t bs = dl->batch_size, r = dl->num_replicas;
    int64_t tail, local_tail, got = 0, *padded;

    if (r == 1) {
        fill_order(dl->shuffle, dl->seed, epoch, out, n);
        return KEEL_STATUS_OK;
    }
    padded = malloc((size_t)(total ? total : 1) * sizeof(*padded));
    if (!padded)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "%s: out of host memory for the padded order of "
                           "%lld samples", what, (long long)total);
    /* Shuffling the padded list p (p[k] = k mod n: 0 .. n-1, then 0, 1,
     * ... again) with Fisher-Yates leaves p[perm[j]] at position j, perm
     * being the same swaps made on 0 .. total-1. */
    fill_order(dl->shuffle, dl->seed, epoch, padded, total);
    for (int64_t j = 0; j < total; j++)
        padded[j] %= n; /* total > 0 implies n > 0 */
    /* Paddle's _get_indices_by_batch_size. bs * r may overflow only when
     * it exceeds total, and then the whole list is the tail. */
    tail = bs > total / r ? total : total % (bs * r);
    local_tail = tail / r; /* tail = r * (per_rank mod bs): exact */
    if (tail < total)
        for (int64_t i = dl->rank * bs; i < total - tail; i += bs * r) {
            memcpy(out + got, padded + i, (size_t)bs * sizeof(*out));
            got += bs;
        }
    memcpy(out + got, padded + (total - tail) + dl->rank * local_tail,
           (size_t)local_tail * sizeof(*out));
    got += local_tail;
    free(padded);
    if (got != per_rank)
        return keel__error(KEEL_STATUS_INTERNAL,
                           "%s: rank %d of %d got %lld samples, not %lld",
                           what, (int)dl->rank, (int)r, (long long)got,
                           (long long)per_rank);
    return KEEL_STATUS_OK;
}

keel_status keel_dataloader_rank_order(const keel_dataloader *dl,
                                       uint64_t epoch, int64_t *order,
                                       int64_t n)
{
    static const char what[] = "keel_dataloader_rank_order";
    int64_t len, per_rank = 0, total = 0;
    keel_status st;

    if (!dl || !order)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: %s is NULL",
                           what, dl ? "order" : "loader");
    len = keel_dataset_length(dl->ds);
    st = shard_sizes(dl, len, &per_rank, &total);
    if (st != KEEL_STATUS_OK)
        return st;
    if (n < per_rank)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: room for %lld indices, rank %d of %d has "
                           "%lld samples", what, (long long)n,
                           (int)dl->rank, (int)dl->num_replicas,
                           (long long)per_rank);
    return fill_rank_order(dl, epoch, len, per_rank, total, order, what);
}

static int64_t batches_of(int64_t length, int64_t bs, bool drop_last)
{
    return drop_last ? length / bs : (length + bs - 1) / bs;
}

/* Build batch `index` of the current epoch. Runs on the producer thread,
 * or on the caller's when there is none. */
static keel_status make_batch(keel_dataloader *dl, int64_t index,
                              keel_batch *batch)
{
    int64_t first = index * dl->batch_size, count = dl->batch_size;
    int nf = dl->ds->num_fields;
    sample_fields *samples;
    int64_t got = 0;
    keel_status st = KEEL_STATUS_OK;

    memset(batch, 0, sizeof(*batch));
    if (first + count > dl->length)
        count = dl->length - first;
    samples = calloc((size_t)count, sizeof(*samples));
    if (!samples)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_dataloader: out of host memory for a "
                           "batch of %lld samples", (long long)count);
    for (; got < count; got++) {
        int64_t sample = dl->order[first + got];

        st = keel_dataset_get(dl->ds, sample, samples[got]);
        if (st != KEEL_STATUS_OK) {
            char cause[768];

            snprintf(cause, sizeof(cause), "%s", keel_last_error());
            st = keel__error(st, "keel_dataloader: sample %lld (batch %lld "
                             "of epoch %llu): %s", (long long)sample,
                             (long long)index,
                             (unsigned long long)dl->epoch, cause);
            goto out;
        }
    }
    for (int k = 0; k < nf; k++) {
        st = stack_field(samples, count, k, dl->place, &batch->fields[k]);
        if (st != KEEL_STATUS_OK) {
            char cause[768];

            snprintf(cause, sizeof(cause), "%s", keel_last_error());
            st = keel__error(st, "keel_dataloader: batch %lld of epoch "
                             "%llu: %s", (long long)index,
                             (unsigned long long)dl->epoch, cause);
            goto out;
        }
    }
    batch->num_fields = nf;
    batch->size = count;
    batch->index = index;
    batch->epoch = dl->epoch;
out:
    for (int64_t i = 0; i < got; i++)
        for (int k = 0; k < nf; k++)
            keel_tensor_free(samples[i][k]);
    free(samples);
    if (st != KEEL_STATUS_OK)
        keel_batch_release(batch);
    return st;
}

static void *producer_main(void *arg)
{
    keel_dataloader *dl = arg;

    pthread_mutex_lock(&dl->lock);
    while (!dl->stop) {
        struct slot made = {{0}, KEEL_STATUS_OK, NULL};
        int64_t index;

        if (dl->produce_index >= dl->nbatches || dl->count == dl->prefetch) {
            pthread_cond_wait(&dl->cond, &dl->lock);
            continue;
        }
        index = dl->produce_index++;
        dl->busy = true;
        pthread_mutex_unlock(&dl->lock);

        made.status = make_batch(dl, index, &made.batch);
        if (made.status != KEEL_STATUS_OK) {
            made.message = keel__strdup(keel_last_error());
            made.batch.index = index;
        }

        pthread_mutex_lock(&dl->lock);
        dl->busy = false;
        /* A restart waiting for us empties the ring after this, so the
         * batch can go in even when it belongs to an abandoned epoch. */
        if (dl->stop) {
            slot_clear(&made);
        } else {
            dl->ring[(dl->head + dl->count) % dl->prefetch] = made;
            dl->count++;
        }
        pthread_cond_broadcast(&dl->cond);
    }
    pthread_mutex_unlock(&dl->lock);
    return NULL;
}

/* Make `epoch` current and restart production. Caller holds no lock. */
static keel_status restart(keel_dataloader *dl, uint64_t epoch)
{
    int64_t n = keel_dataset_length(dl->ds), len = 0, total = 0, *order;
    keel_status st = shard_sizes(dl, n, &len, &total);

    if (st != KEEL_STATUS_OK)
        return st;
    order = malloc((size_t)(len ? len : 1) * sizeof(*order));
    if (!order)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_dataloader: out of host memory for the "
                           "order of %lld samples", (long long)len);
    st = fill_rank_order(dl, epoch, n, len, total, order, "keel_dataloader");
    if (st != KEEL_STATUS_OK) {
        free(order);
        return st;
    }

    pthread_mutex_lock(&dl->lock);
    dl->produce_index = dl->nbatches; /* no new work */
    while (dl->busy)
        pthread_cond_wait(&dl->cond, &dl->lock);
    while (dl->count) {
        slot_clear(&dl->ring[dl->head]);
        dl->head = (dl->head + 1) % dl->prefetch;
        dl->count--;
    }
    dl->head = 0;
    free(dl->order);
    dl->order = order;
    dl->epoch = epoch;
    dl->length = len;
    dl->nbatches = batches_of(len, dl->batch_size, dl->drop_last);
    dl->next_index = 0;
    dl->end_reported = false;
    dl->produce_index = 0;
    pthread_cond_broadcast(&dl->cond);
    pthread_mutex_unlock(&dl->lock);
    return KEEL_STATUS_OK;
}

keel_status keel_dataloader_create(keel_dataset *ds,
                                   const keel_dataloader_config *cfg,
                                   keel_dataloader **out)
{
    static const char what[] = "keel_dataloader_create";
    keel_dataloader_config c;
    keel_dataloader *dl;
    keel_status st;
    int rc;

    if (!out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: out is NULL",
                           what);
    *out = NULL;
    if (!ds || !cfg)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: %s is NULL",
                           what, ds ? "config" : "dataset");
    keel_dataloader_config_init(&c);
    if (cfg->struct_size < offsetof(keel_dataloader_config, prefetch) ||
        cfg->struct_size > 4096)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: config struct_size %u is wrong (use "
                           "keel_dataloader_config_init)", what,
                           cfg->struct_size);
    memcpy(&c, cfg, cfg->struct_size < sizeof(c) ? cfg->struct_size :
           sizeof(c));
    if (c.batch_size < 1)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: batch_size %lld must be at least 1", what,
                           (long long)c.batch_size);
    if (c.prefetch < 0 || c.prefetch > PREFETCH_MAX)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: prefetch %d is outside [0, %d]", what,
                           c.prefetch, PREFETCH_MAX);
    /* num_replicas and rank came together; a struct_size that ends before
     * rank's end is an older config (whose num_replicas bytes, if any,
     * were padding), so both keep their defaults. */
    if (cfg->struct_size < offsetof(keel_dataloader_config, rank) +
                           sizeof(c.rank)) {
        c.num_replicas = 1;
        c.rank = 0;
    }
    if (c.num_replicas == 0)
        c.num_replicas = 1;
    if (c.num_replicas < 0 || c.num_replicas > REPLICAS_MAX)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: num_replicas %d is outside [1, %d] (0 also "
                           "means 1)", what, (int)c.num_replicas,
                           REPLICAS_MAX);
    if (c.rank < 0 || c.rank >= c.num_replicas)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: rank %d is outside [0, %d) for num_replicas "
                           "%d", what, (int)c.rank, (int)c.num_replicas,
                           (int)c.num_replicas);
    dl = calloc(1, sizeof(*dl));
    if (!dl)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "%s: out of host memory", what);
    st = keel__place_of(c.device, &dl->place);
    if (st != KEEL_STATUS_OK) {
        free(dl);
        return st;
    }
    dl->batch_size = c.batch_size;
    dl->shuffle = c.shuffle;
    dl->drop_last = c.drop_last;
    dl->seed = c.seed;
    dl->prefetch = c.prefetch;
    dl->num_replicas = c.num_replicas;
    dl->rank = c.rank;
    dl->ring = calloc((size_t)(c.prefetch ? c.prefetch : 1),
                      sizeof(*dl->ring));
    if (!dl->ring) {
        free(dl);
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "%s: out of host memory", what);
    }
    pthread_mutex_init(&dl->lock, NULL);
    pthread_cond_init(&dl->cond, NULL);
    dl->ds = keel_dataset_ref(ds);
    st = restart(dl, 0);
    if (st != KEEL_STATUS_OK)
        goto fail;
    if (dl->prefetch) {
        rc = pthread_create(&dl->thread, NULL, producer_main, dl);
        if (rc) {
            st = keel__error(KEEL_STATUS_INTERNAL,
                             "%s: cannot start the prefetch thread: %s", what,
                             strerror(rc));
            goto fail;
        }
        dl->have_thread = true;
    }
    *out = dl;
    return KEEL_STATUS_OK;
fail:
    keel_dataloader_free(dl);
    return st;
}

void keel_dataloader_free(keel_dataloader *dl)
{
    if (!dl)
        return;
    if (dl->have_thread) {
        pthread_mutex_lock(&dl->lock);
        dl->stop = true;
        pthread_cond_broadcast(&dl->cond);
        pthread_mutex_unlock(&dl->lock);
        pthread_join(dl->thread, NULL);
    }
    for (int i = 0; i < dl->count; i++)
        slot_clear(&dl->ring[(dl->head + i) % dl->prefetch]);
    pthread_cond_destroy(&dl->cond);
    pthread_mutex_destroy(&dl->lock);
    free(dl->ring);
    free(dl->order);
    keel_dataset_free(dl->ds);
    free(dl);
}

keel_status keel_dataloader_next(keel_dataloader *dl, keel_batch *batch,
                                 bool *end_of_epoch)
{
    struct slot s;
    keel_status st;

    if (end_of_epoch)
        *end_of_epoch = false;
    if (!dl || !batch)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_dataloader_next: %s is NULL",
                           dl ? "batch" : "loader");
    memset(batch, 0, sizeof(*batch));
    if (dl->end_reported) {
        st = restart(dl, dl->epoch + 1);
        if (st != KEEL_STATUS_OK)
            return st;
    }
    if (dl->next_index >= dl->nbatches) {
        dl->end_reported = true;
        if (end_of_epoch)
            *end_of_epoch = true;
        return KEEL_STATUS_OK;
    }
    if (!dl->have_thread) {
        st = make_batch(dl, dl->next_index, batch);
        dl->next_index++;
        return st;
    }
    pthread_mutex_lock(&dl->lock);
    while (!dl->count)
        pthread_cond_wait(&dl->cond, &dl->lock);
    s = dl->ring[dl->head];
    memset(&dl->ring[dl->head], 0, sizeof(s));
    dl->head = (dl->head + 1) % dl->prefetch;
    dl->count--;
    dl->next_index++;
    pthread_cond_broadcast(&dl->cond);
    pthread_mutex_unlock(&dl->lock);
    if (s.status != KEEL_STATUS_OK) {
        st = keel__error(s.status, "%s", s.message ? s.message :
                         "keel_dataloader_next: the prefetch thread failed "
                         "(no message)");
        slot_clear(&s);
        return st;
    }
    *batch = s.batch;
    return KEEL_STATUS_OK;
}

keel_status keel_dataloader_reset(keel_dataloader *dl)
{
    if (!dl)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_dataloader_reset: loader is NULL");
    return restart(dl, dl->epoch + 1);
}

keel_status keel_dataloader_set_epoch(keel_dataloader *dl, uint64_t epoch)
{
    if (!dl)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_dataloader_set_epoch: loader is NULL");
    return restart(dl, epoch);
}

uint64_t keel_dataloader_epoch(const keel_dataloader *dl)
{
    return dl ? dl->epoch : 0;
}

int64_t keel_dataloader_num_batches(const keel_dataloader *dl)
{
    return dl ? dl->nbatches : 0;
}
