/*
 * keel tensors — dtypes, shapes, views, creation, readback, printing, the
 * seeded generator and per-device memory statistics.
 *
 * A keel_tensor is a reference-counted view (dtype, shape, strides in
 * elements, offset in elements) of a reference-counted storage block that
 * lives on one device (its place). Views (reshape when possible,
 * transpose/permute, slice, expand, squeeze/unsqueeze, flatten) share the
 * storage and never copy. Every function that returns a tensor returns a
 * new reference; release it with keel_tensor_free().
 *
 * Creation functions take a device name; NULL means the current device
 * (keel_set_device). Device memory comes from a per-device caching
 * allocator in the core (see keel_memory_stats).
 *
 * Random numbers come from a counter-based generator (Philox-4x32-10): the
 * generator state is a seed and a counter, and element i of a draw depends
 * only on (seed, counter + i), so keel_seed(42) yields the same numbers on
 * every device, plugin and thread count.
 */
#ifndef KEEL_TENSOR_H
#define KEEL_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <keel/op_catalog.h>
#include <keel/runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct keel_tensor keel_tensor;

/* ---- dtypes ---------------------------------------------------------------- */

/** "float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32",
 *  "int64", "bool"; "unknown" for other values. */
KEEL_API const char *keel_dtype_name(keel_dtype dtype);

/** Parse a dtype name (the names above, plus "float", "double", "half",
 *  "int", "long"). Returns OK or INVALID_ARGUMENT. */
KEEL_API keel_status keel_dtype_parse(const char *name, keel_dtype *dtype);

/** The common dtype of a and b by category (the wider float; a float over
 *  an integer; the wider integer). Ops promote only between floating
 *  dtypes, as Paddle does (see docs/tensors.md). */
KEEL_API keel_dtype keel_dtype_promote(keel_dtype a, keel_dtype b);

/* ---- lifetime and properties ----------------------------------------------- */

/** Drop a reference (NULL is a no-op). */
KEEL_API void keel_tensor_free(keel_tensor *t);

/** Take another reference; returns t. */
KEEL_API keel_tensor *keel_tensor_ref(keel_tensor *t);

KEEL_API keel_dtype keel_tensor_dtype(const keel_tensor *t);
KEEL_API int keel_tensor_ndim(const keel_tensor *t);
/** Shape and strides (in elements); valid while the tensor lives. */
KEEL_API const int64_t *keel_tensor_shape(const keel_tensor *t);
KEEL_API const int64_t *keel_tensor_strides(const keel_tensor *t);
/** Offset of element [0,...,0] into the storage, in elements. */
KEEL_API int64_t keel_tensor_offset(const keel_tensor *t);
KEEL_API int64_t keel_tensor_numel(const keel_tensor *t);
KEEL_API keel_place keel_tensor_place(const keel_tensor *t);
/** Row-major contiguous (size-1 dims may have any stride). */
KEEL_API bool keel_tensor_is_contiguous(const keel_tensor *t);
/** true when a and b share a storage block. */
KEEL_API bool keel_tensor_shares_storage(const keel_tensor *a,
                                         const keel_tensor *b);

/* ---- creation --------------------------------------------------------------- */

/**
 * The size limit of every tensor, checked where a shape enters (creation,
 * reshape, expand, op outputs, file headers): every dimension is >= 0 and
 * the product of the dimensions, a 0 counted as 1, times the element size
 * is at most KEEL_TENSOR_MAX_BYTES. The element count, the byte size and
 * every stride then fit in int64_t, empty tensors included. A larger shape
 * is INVALID_ARGUMENT, with a message that names it.
 */
#define KEEL_TENSOR_MAX_BYTES INT64_MAX

/** Copy `numel * sizeof(dtype)` bytes of row-major host data into a new
 *  tensor. ndim 0 makes a scalar. */
KEEL_API keel_status keel_tensor_from_host(const void *data, keel_dtype dtype,
                                           int ndim, const int64_t *shape,
                                           const char *device,
                                           keel_tensor **out);
/**
 * A tensor of a floating-point dtype (float32, float64, float16 or
 * bfloat16) from numel row-major host float32 values: Paddle's
 * to_tensor(data, dtype='float16'), without raw bits or a float32 tensor
 * plus a cast. float16 and bfloat16 round to nearest even (independent of
 * the FPU rounding mode); values beyond the dtype's range become +-inf,
 * infinities stay infinite and NaN stays a (quiet) NaN. data may be NULL
 * only when numel is 0. Returns OK, INVALID_ARGUMENT (a non-float dtype, a
 * bad shape, NULL data), INVALID_DEVICE / NOT_FOUND (device) or
 * OUT_OF_MEMORY.
 */
KEEL_API keel_status keel_tensor_from_floats(const float *data, int ndim,
                                             const int64_t *shape,
                                             keel_dtype dtype,
                                             const char *device,
                                             keel_tensor **out);
/** Uninitialised contents. */
KEEL_API keel_status keel_empty(int ndim, const int64_t *shape,
                                keel_dtype dtype, const char *device,
                                keel_tensor **out);
KEEL_API keel_status keel_zeros(int ndim, const int64_t *shape,
                                keel_dtype dtype, const char *device,
                                keel_tensor **out);
KEEL_API keel_status keel_ones(int ndim, const int64_t *shape,
                               keel_dtype dtype, const char *device,
                               keel_tensor **out);
KEEL_API keel_status keel_full(int ndim, const int64_t *shape,
                               keel_dtype dtype, double value,
                               const char *device, keel_tensor **out);
/** [start, end) with `step` (non-zero), 1-D. All three must be finite and
 *  the count ceil((end - start) / step) at most 2^63 - 1. */
KEEL_API keel_status keel_arange(double start, double end, double step,
                                 keel_dtype dtype, const char *device,
                                 keel_tensor **out);
/** `num` points from start to stop inclusive, 1-D (num >= 0, start and
 *  stop finite). */
KEEL_API keel_status keel_linspace(double start, double stop, int64_t num,
                                   keel_dtype dtype, const char *device,
                                   keel_tensor **out);
/** n x m identity (m < 0: square). */
KEEL_API keel_status keel_eye(int64_t n, int64_t m, keel_dtype dtype,
                              const char *device, keel_tensor **out);

/* ---- random ------------------------------------------------------------------ */

/** Reset the global generator: seed, counter 0. */
KEEL_API void keel_seed(uint64_t seed);
/** Current generator state (for checkpoints). */
KEEL_API void keel_rng_get_state(uint64_t *seed, uint64_t *counter);
KEEL_API void keel_rng_set_state(uint64_t seed, uint64_t counter);

/** U[0, 1). */
KEEL_API keel_status keel_rand(int ndim, const int64_t *shape,
                               keel_dtype dtype, const char *device,
                               keel_tensor **out);
/** N(0, 1). */
KEEL_API keel_status keel_randn(int ndim, const int64_t *shape,
                                keel_dtype dtype, const char *device,
                                keel_tensor **out);
KEEL_API keel_status keel_uniform(int ndim, const int64_t *shape,
                                  keel_dtype dtype, double low, double high,
                                  const char *device, keel_tensor **out);
KEEL_API keel_status keel_normal(int ndim, const int64_t *shape,
                                 keel_dtype dtype, double mean, double std,
                                 const char *device, keel_tensor **out);
/** Integers in [low, high). */
KEEL_API keel_status keel_randint(int64_t low, int64_t high, int ndim,
                                  const int64_t *shape, keel_dtype dtype,
                                  const char *device, keel_tensor **out);
/** 1 with probability p[i], else 0 (same dtype and device as p). */
KEEL_API keel_status keel_bernoulli(const keel_tensor *p, keel_tensor **out);

/* ---- views (no copy) ------------------------------------------------------- */

/** New shape with the same number of elements; one entry may be -1. A view
 *  when the strides allow it, otherwise a contiguous copy. */
KEEL_API keel_status keel_reshape(const keel_tensor *x, int ndim,
                                  const int64_t *shape, keel_tensor **out);
/** Axes reordered: out.shape[i] = x.shape[perm[i]]. */
KEEL_API keel_status keel_permute(const keel_tensor *x, const int *perm,
                                  keel_tensor **out);
/** Swap two axes (negative axes count from the end). */
KEEL_API keel_status keel_transpose(const keel_tensor *x, int axis0,
                                    int axis1, keel_tensor **out);
/** x[start:stop:step] along `axis`; Python rules for negative and
 *  out-of-range bounds; step may be negative. */
KEEL_API keel_status keel_slice(const keel_tensor *x, int axis, int64_t start,
                                int64_t stop, int64_t step,
                                keel_tensor **out);
/** Broadcast to `shape` (size-1 dims stretch with stride 0; -1 keeps). */
KEEL_API keel_status keel_expand(const keel_tensor *x, int ndim,
                                 const int64_t *shape, keel_tensor **out);
/** Remove size-1 axes (naxes 0: all of them). */
KEEL_API keel_status keel_squeeze(const keel_tensor *x, int naxes,
                                  const int *axes, keel_tensor **out);
/** Insert a size-1 axis at `axis` (in [-ndim-1, ndim]). */
KEEL_API keel_status keel_unsqueeze(const keel_tensor *x, int axis,
                                    keel_tensor **out);
/** Merge axes start..stop (inclusive) into one. */
KEEL_API keel_status keel_flatten(const keel_tensor *x, int start_axis,
                                  int stop_axis, keel_tensor **out);
/** x itself (a new reference) when contiguous, else a contiguous copy. */
KEEL_API keel_status keel_contiguous(const keel_tensor *x, keel_tensor **out);

/* ---- moving data ------------------------------------------------------------- */

/** Copy the elements, row-major, to host memory of `size` bytes (exactly
 *  numel * dtype size). Synchronises the device. */
KEEL_API keel_status keel_tensor_to_host(const keel_tensor *t, void *dst,
                                         size_t size);
/** Copy to another device (a new reference to t when already there). */
KEEL_API keel_status keel_tensor_to(const keel_tensor *t, const char *device,
                                    keel_tensor **out);
/** Convert to another dtype (a new reference to t when already that). */
KEEL_API keel_status keel_cast(const keel_tensor *t, keel_dtype dtype,
                               keel_tensor **out);
/** Element at a flat row-major index, as a double (reads from the device:
 *  slow, for tests and printing). */
KEEL_API keel_status keel_tensor_item(const keel_tensor *t, int64_t index,
                                      double *value);

/* ---- host memory in place: no copy (DLPack, NumPy) ---------------------------- */

/**
 * The host address of t's element [0,...,0], for host code that reads or
 * writes the tensor's memory in place (a DLPack export, a NumPy view).
 * Only on a device whose plugin sets KEEL_FEATURE_HOST_ADDRESSES (the CPU
 * plugin outside discrete mode); elsewhere NOT_SUPPORTED, naming the
 * device. Waits for the device's work first, so the values are current.
 * The address stays valid while t or any view of its storage lives; the
 * element at index i is at address + sum(i[k] * strides[k]) elements.
 */
KEEL_API keel_status keel_tensor_host_address(const keel_tensor *t,
                                              void **address);

/** Called once when the last tensor over the caller's memory goes. */
typedef void (*keel_host_memory_release_fn)(void *ctx);

/**
 * A tensor over the caller's host memory at `data`, without a copy: dtype,
 * shape, and strides in elements (NULL: row-major; every stride >= 0), on
 * `device` (NULL: the current one), whose plugin must provide
 * memory.register_host (ABI 1.4; the CPU plugin does). Writes through
 * either side are seen by the other once the device's work is done
 * (keel_tensor_host_address waits for it). data must be aligned to the
 * element size; the extent the shape and strides reach is overflow-checked.
 * When the last view goes, the core waits for the device, unregisters the
 * range and calls release(ctx) (NULL: nothing is called). An empty shape
 * (a 0 dimension) needs no memory: the tensor owns nothing and release
 * runs before this returns. On failure nothing was taken: release is not
 * called and the memory is still the caller's. Returns OK,
 * INVALID_ARGUMENT, NOT_SUPPORTED, INVALID_DEVICE / NOT_FOUND,
 * OUT_OF_MEMORY.
 */
KEEL_API keel_status keel_tensor_from_host_memory(
    void *data, keel_dtype dtype, int ndim, const int64_t *shape,
    const int64_t *strides, const char *device,
    keel_host_memory_release_fn release, void *ctx, keel_tensor **out);

/* ---- printing ---------------------------------------------------------------- */

/** Format like "Tensor(shape=[2, 3], dtype=float32, place=cpu:0,\n
 *  [[...]])", eliding the middle of dims longer than 6. Returns the length
 *  the full text needs (as snprintf). */
KEEL_API int keel_tensor_format(const keel_tensor *t, char *buf, size_t size);
/** keel_tensor_format to `f` (NULL: stdout) with a newline. A NULL tensor
 *  is INVALID_ARGUMENT. */
KEEL_API keel_status keel_tensor_print(const keel_tensor *t, FILE *f);

/* ---- memory statistics (the caching allocator) ------------------------------ */

typedef struct keel_memory_stats {
    uint64_t allocated;      /* bytes held by live tensors               */
    uint64_t reserved;       /* bytes obtained from the plugin            */
    uint64_t peak_allocated; /* maxima since start or the last reset      */
    uint64_t peak_reserved;
    uint64_t alloc_count;    /* allocations served                         */
    uint64_t cache_hits;     /* ... of which from the cache                */
    uint64_t plugin_allocs;  /* calls to the plugin's alloc                */
    uint64_t plugin_frees;   /* calls to the plugin's free                 */
} keel_memory_stats;

/** Statistics of a device (NULL: current). */
KEEL_API keel_status keel_memory_stats_get(const char *device,
                                           keel_memory_stats *stats);
/** Return every cached, unused block to the plugin. */
KEEL_API keel_status keel_memory_empty_cache(const char *device);
/** Peaks := current values. */
KEEL_API keel_status keel_memory_reset_peak(const char *device);

#ifdef __cplusplus
}
#endif

#endif /* KEEL_TENSOR_H */
