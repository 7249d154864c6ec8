/*
 * keel data — IDX files (the MNIST format), datasets and a batching loader
 * with a background prefetch thread.
 *
 * IDX: a big-endian file of magic (two zero bytes, an element type code,
 * the number of dimensions), one 32-bit size per dimension, then the
 * elements row-major. keel_idx_load reads plain or gzip'd files (zlib
 * detects which), checks every field, and returns the array in host
 * memory. keel_mnist_load turns an image file and a label file into the
 * tensors a classifier trains on: float32 [N, 1, H, W] in [0, 1] and int64
 * [N].
 *
 * Datasets: a keel_dataset is an object with a small vtable (length, get a
 * sample as a fixed number of tensor fields, destroy), so any source —
 * tensors in memory, files, a generator — can feed a loader. A ready
 * in-memory implementation serves rows of tensors (keel_tensor_dataset).
 *
 * Loader: keel_dataloader cuts an epoch into batches (batch_size, shuffle
 * with a seed, drop_last), stacks the samples of each batch into one
 * tensor per field on a chosen device, and prepares the next batches on a
 * background thread while the caller trains. The order of epoch e is a pure
 * function of (seed, e), so a run is reproducible and can resume at any
 * epoch. For data-parallel training, num_replicas and rank give each rank
 * its own share of every epoch. See docs/data.md.
 */
#ifndef KEEL_DATA_H
#define KEEL_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <keel/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- IDX files ---------------------------------------------------------- */

/** Element type codes of the IDX format (the magic's third byte). */
typedef enum keel_idx_type {
    KEEL_IDX_U8 = 0x08,
    KEEL_IDX_I8 = 0x09,
    KEEL_IDX_I16 = 0x0B,
    KEEL_IDX_I32 = 0x0C,
    KEEL_IDX_F32 = 0x0D,
    KEEL_IDX_F64 = 0x0E,
} keel_idx_type;

/** An IDX array in host memory. */
typedef struct keel_idx_array {
    /** Element type in the file. */
    keel_idx_type type;
    /** dtype of `data`: U8, I8, I32 (int16 is widened to int32), I32, F32,
     *  F64 for the six types, in that order. */
    keel_dtype dtype;
    /** Dimensions (1 to KEEL_MAX_DIMS) and their sizes. */
    int ndim;
    int64_t dims[KEEL_MAX_DIMS];
    /** Elements, and bytes of `data` (numel * dtype size). */
    int64_t numel;
    size_t nbytes;
    /** Row-major elements in host byte order (malloc'd; NULL when empty). */
    void *data;
} keel_idx_array;

/**
 * Read an IDX file, gzip'd or plain, into *out (zeroed first). Checks the
 * magic's two zero bytes, the type code, 1 <= ndim <= KEEL_MAX_DIMS, that
 * the data is exactly as long as the dimensions say (neither truncated nor
 * followed by extra bytes) and the gzip stream's integrity. Returns OK,
 * INVALID_ARGUMENT, NOT_FOUND, IO_ERROR, CORRUPT (the message names the
 * file, the field or byte offset, and expected vs found), OUT_OF_MEMORY.
 * On failure *out holds nothing to free.
 */
KEEL_API keel_status keel_idx_load(const char *path, keel_idx_array *out);

/** Free an array's data and zero it (NULL is a no-op). */
KEEL_API void keel_idx_array_free(keel_idx_array *a);

/**
 * Write an IDX file: `type`, `ndim` dims (each 0 <= dim < 2^32) and
 * `data`, the row-major elements as C values of the type (uint8_t, int8_t,
 * int16_t, int32_t, float, double). gzip: compress with zlib (level 6).
 * A failed write removes the file. Returns OK, INVALID_ARGUMENT, IO_ERROR.
 */
KEEL_API keel_status keel_idx_save(const char *path, keel_idx_type type,
                                   int ndim, const int64_t *dims,
                                   const void *data, bool gzip);

/** The array as a tensor of its dtype and dims on `device` (NULL:
 *  current). Returns OK or the errors of keel_tensor_from_host. */
KEEL_API keel_status keel_idx_to_tensor(const keel_idx_array *a,
                                        const char *device,
                                        keel_tensor **out);

/**
 * Images and labels in the MNIST layout: `images_path` must hold uint8
 * [N, H, W] and `labels_path` uint8 [N] with the same N. Produces float32
 * [N, 1, H, W] scaled to [0, 1] (x / 255) and int64 [N] on `device`.
 * Either output pointer may be NULL to skip that file (its path may then
 * be NULL too). Returns OK, or the errors of keel_idx_load; CORRUPT when
 * the types, ranks or counts do not fit.
 */
KEEL_API keel_status keel_mnist_load(const char *images_path,
                                     const char *labels_path,
                                     const char *device, keel_tensor **images,
                                     keel_tensor **labels);

/**
 * keel_mnist_load on the files of one split in a folder laid out as the
 * MNIST distribution: "<dir>/<split>-images-idx3-ubyte.gz" and
 * "<dir>/<split>-labels-idx1-ubyte.gz", or the same names without ".gz".
 * `split` is "train" or "t10k". Returns NOT_FOUND when neither exists.
 */
KEEL_API keel_status keel_mnist_load_dir(const char *dir, const char *split,
                                         const char *device,
                                         keel_tensor **images,
                                         keel_tensor **labels);

/* ---- datasets ----------------------------------------------------------- */

/** Most tensor fields per sample (image, label, ...). */
#define KEEL_DATASET_MAX_FIELDS 8

/**
 * A dataset's behaviour, SQLite-style: struct_size is sizeof() as the
 * implementer compiled it, so members added later read as absent.
 */
typedef struct keel_dataset_ops {
    /** sizeof(keel_dataset_ops). */
    uint32_t struct_size;
    /** Number of samples (>= 0); must not change while a loader runs. */
    int64_t (*length)(void *ctx);
    /**
     * Sample `index` (0 <= index < length): store a new tensor reference
     * per field in fields[0 .. num_fields). The tensors may live on any
     * device. On failure return a status (after keel-style error reporting
     * or not) and leave fields NULL or already released. A loader calls
     * this from its prefetch thread, one call at a time.
     */
    keel_status (*get)(void *ctx, int64_t index, keel_tensor **fields);
    /** Release ctx when the dataset is freed (NULL: nothing to do). */
    void (*destroy)(void *ctx);
} keel_dataset_ops;

/** A reference-counted dataset. */
typedef struct keel_dataset keel_dataset;

/**
 * New dataset over `ops` (copied) and `ctx`, with `num_fields` fields per
 * sample (1 to KEEL_DATASET_MAX_FIELDS). On success the dataset owns ctx
 * (ops->destroy runs when the last reference goes); on failure ctx is not
 * touched. Returns OK, INVALID_ARGUMENT, OUT_OF_MEMORY.
 */
KEEL_API keel_status keel_dataset_create(const keel_dataset_ops *ops,
                                         int num_fields, void *ctx,
                                         keel_dataset **out);

/** Take another reference; returns ds. */
KEEL_API keel_dataset *keel_dataset_ref(keel_dataset *ds);

/** Drop a reference (NULL is a no-op). */
KEEL_API void keel_dataset_free(keel_dataset *ds);

/** Number of samples (0 for NULL). */
KEEL_API int64_t keel_dataset_length(const keel_dataset *ds);

/** Fields per sample (0 for NULL). */
KEEL_API int keel_dataset_num_fields(const keel_dataset *ds);

/**
 * Sample `index` into fields[0 .. num_fields) as new references, after
 * checking the index and that the implementation filled every field.
 * Returns OK, INVALID_ARGUMENT, or the implementation's error.
 */
KEEL_API keel_status keel_dataset_get(keel_dataset *ds, int64_t index,
                                      keel_tensor **fields);

/**
 * A dataset over `n` tensors (1 to KEEL_DATASET_MAX_FIELDS) of equal
 * leading size N: sample i is (tensors[0][i], ..., tensors[n-1][i]), each
 * a view without copy. The dataset holds references to the tensors.
 * Returns OK, INVALID_ARGUMENT (no leading axis, sizes differ),
 * OUT_OF_MEMORY.
 */
KEEL_API keel_status keel_tensor_dataset_create(keel_tensor *const *tensors,
                                                int n, keel_dataset **out);

/* ---- the loader --------------------------------------------------------- */

/** How a loader batches. Start from keel_dataloader_config_init(). */
typedef struct keel_dataloader_config {
    /** sizeof(keel_dataloader_config). */
    uint32_t struct_size;
    /** Samples per batch (>= 1); default 1. */
    int64_t batch_size;
    /** Visit samples in a seeded random order; default false. */
    bool shuffle;
    /** Drop a last batch smaller than batch_size; default false. */
    bool drop_last;
    /** Seed of the shuffle; default 0. */
    uint64_t seed;
    /** Device the batches are put on (NULL: the current device when the
     *  loader is created); the string is not kept. */
    const char *device;
    /** Batches prepared ahead by a background thread (0: none, batches
     *  are made inside keel_dataloader_next); default 2, at most 64. */
    int prefetch;
    /** Data-parallel ranks sharing the dataset (1 to 1 << 20); default 1,
     *  and 0 also means 1. With more than one, each epoch is padded to a
     *  multiple of num_replicas and dealt out batch by batch, as Paddle's
     *  DistributedBatchSampler does (see keel_dataloader_rank_order). A
     *  config whose struct_size ends before `rank` reads as 1 and 0. */
    int32_t num_replicas;
    /** This rank (0 <= rank < num_replicas); default 0. */
    int32_t rank;
} keel_dataloader_config;

/** Fill *cfg with the defaults above. */
KEEL_API void keel_dataloader_config_init(keel_dataloader_config *cfg);

/** A batch: one tensor per dataset field, [size, <sample shape>]. */
typedef struct keel_batch {
    int num_fields;
    keel_tensor *fields[KEEL_DATASET_MAX_FIELDS];
    /** Samples in the batch (batch_size, or fewer for a last batch). */
    int64_t size;
    /** Position of the batch in its epoch, and the epoch. */
    int64_t index;
    uint64_t epoch;
} keel_batch;

/** Drop a batch's tensors and zero it (NULL is a no-op). */
KEEL_API void keel_batch_release(keel_batch *batch);

typedef struct keel_dataloader keel_dataloader;

/**
 * New loader over `ds` (it takes a reference) configured by `cfg`. It
 * starts at epoch 0 and, when cfg->prefetch > 0, starts its prefetch
 * thread at once. Returns OK, INVALID_ARGUMENT, OUT_OF_MEMORY, NOT_FOUND
 * or INVALID_DEVICE (device name), INTERNAL (no thread).
 */
KEEL_API keel_status keel_dataloader_create(keel_dataset *ds,
                                            const keel_dataloader_config *cfg,
                                            keel_dataloader **out);

/** Stop the prefetch thread (waiting for a sample being read), drop the
 *  prepared batches and free the loader; fine mid-epoch (NULL: no-op). */
KEEL_API void keel_dataloader_free(keel_dataloader *dl);

/**
 * The next batch of the current epoch into *batch (release it with
 * keel_batch_release). After the last batch of an epoch, one call reports
 * the end: it returns OK with *end_of_epoch = true and an empty batch. The
 * call after that begins the next epoch (epoch + 1, a new order when
 * shuffling). end_of_epoch may be NULL only if the caller counts batches
 * (keel_dataloader_num_batches).
 *
 * A sample or collation error comes back as that status with the message
 * of the thread that made the batch; that batch is skipped and the next
 * call goes on with the following one. Collation requires every sample's
 * field k to have one dtype and shape.
 */
KEEL_API keel_status keel_dataloader_next(keel_dataloader *dl,
                                          keel_batch *batch,
                                          bool *end_of_epoch);

/** Abandon the rest of the current epoch and begin the next one (drops
 *  the prepared batches). Returns OK, INVALID_ARGUMENT. */
KEEL_API keel_status keel_dataloader_reset(keel_dataloader *dl);

/** Abandon the current epoch and begin epoch `epoch` (its order depends
 *  only on the seed and `epoch`). Returns OK, INVALID_ARGUMENT. */
KEEL_API keel_status keel_dataloader_set_epoch(keel_dataloader *dl,
                                               uint64_t epoch);

/** The epoch being iterated (or about to begin). */
KEEL_API uint64_t keel_dataloader_epoch(const keel_dataloader *dl);

/** Batches per epoch of this rank: ceil(S / batch_size), or floor with
 *  drop_last, where S = ceil(N / num_replicas) (S = N on one rank). */
KEEL_API int64_t keel_dataloader_num_batches(const keel_dataloader *dl);

/**
 * The sample order of an epoch on a single replica: the N = dataset length
 * indices into order[0 .. N). Without shuffle it is 0, 1, ..., N-1; with
 * shuffle a Fisher-Yates permutation driven by Philox-4x32-10 keyed by the
 * seed (see docs/data.md). It ignores num_replicas and rank: it is the
 * whole, unsharded order, which is what a loader with num_replicas = 1
 * serves (keel_dataloader_rank_order gives what this rank serves). `n` is
 * the room in `order`. Returns OK, INVALID_ARGUMENT (room too small).
 */
KEEL_API keel_status keel_dataloader_epoch_order(const keel_dataloader *dl,
                                                 uint64_t epoch,
                                                 int64_t *order, int64_t n);

/**
 * The samples this rank serves in epoch `epoch`, in order, into
 * order[0 .. S) with S = ceil(N / num_replicas); the loader's batches are
 * exactly these, cut into batch_size pieces. As Paddle's
 * DistributedBatchSampler: the list 0, 1, ..., N-1 is padded to
 * T = S * num_replicas entries by appending 0, 1, ..., T-N-1 (cyclically
 * when T-N > N), shuffled (when shuffling) by the Fisher-Yates permutation
 * of length T for (seed, epoch), then dealt out: rank r takes entries
 * [r*B + k*B*R, +B) for each k while they lie before the last
 * L = T mod (B*R) entries, then its share [r*L/R, (r+1)*L/R) of those
 * (B = batch_size, R = num_replicas). With num_replicas = 1 this equals
 * keel_dataloader_epoch_order. `n` is the room in `order` (at least S).
 * Returns OK, INVALID_ARGUMENT (room too small), OUT_OF_MEMORY.
 */
KEEL_API keel_status keel_dataloader_rank_order(const keel_dataloader *dl,
                                                uint64_t epoch,
                                                int64_t *order, int64_t n);

#ifdef __cplusplus
}
#endif

#endif /* KEEL_DATA_H */
