/*
 * The tensor layer's private declarations: the caching allocator, storage
 * and tensor objects, descriptors and shape helpers. Everything above the
 * runtime uses them; they call only the runtime (runtime_internal.h).
 */
#ifndef KEEL_TENSOR_INTERNAL_H
#define KEEL_TENSOR_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <keel/ops.h>
#include <keel/tensor.h>

#include "runtime/runtime_internal.h"

/* ---- allocator (alloc.c) ------------------------------------------------ */

struct keel_block;

/** Allocate `size` bytes on `place` through the caching allocator. */
keel_status keel__alloc(keel_place place, uint64_t size,
                        struct keel_block **block, keel_dptr *ptr);
/** Return a block to the cache. */
void keel__alloc_release(struct keel_block *block);
/** Drop every cached block of every device (before plugins unload). */
void keel__alloc_shutdown(void);

/* ---- storage and tensors (tensor.c) ------------------------------------- */

/* Called by keel_tensor_free for a tensor that holds graph references
 * (grad_fn or grad): the autograd layer installs it before it attaches
 * any, so this layer never calls upward. */
typedef void (*keel_tensor_release_fn)(struct keel_tensor *t);
void keel__tensor_set_release_hook(keel_tensor_release_fn fn);

struct keel_storage {
    atomic_int refcount;
    keel_place place;
    keel_dptr data;
    uint64_t nbytes;
    struct keel_block *block;
    /* Host memory of the caller's (keel_tensor_from_host_memory): no
     * block; on release the device is synchronised, the range
     * unregistered and ext_release(ext_ctx) called. */
    keel_host_memory_release_fn ext_release;
    void *ext_ctx;
    uint64_t ext_bytes;
    bool external;
    /* Bumped by every op that writes the storage in place (optimizer
     * updates, batch_norm's running statistics); autograd compares it
     * with the value it saw when it saved a tensor for backward. */
    atomic_uint version;
};

struct keel_grad_node;

struct keel_tensor {
    atomic_int refcount;
    struct keel_storage *storage;
    keel_dtype dtype;
    int ndim;
    int64_t shape[KEEL_MAX_DIMS];
    int64_t strides[KEEL_MAX_DIMS];
    int64_t offset;
    /* Autograd (autograd.c). requires_grad is !stop_gradient. A tensor
     * owns a reference to the node that produced it (NULL for a leaf) and
     * to its accumulated gradient (leaves only). */
    bool requires_grad;
    int grad_slot; /* which output of grad_fn this tensor is */
    struct keel_grad_node *grad_fn;
    struct keel_tensor *grad;
    /* Grad-ready hooks of a leaf (autograd.c; NULL when none), and the
     * number of graph edges still to deliver into it in the backward pass
     * numbered hook_epoch. */
    struct ag_hooks *hooks;
    uint64_t hook_epoch;
    int hook_pending;
};

/** New contiguous tensor with uninitialised storage on `place`. */
keel_status keel__tensor_new(keel_place place, keel_dtype dtype, int ndim,
                             const int64_t *shape, keel_tensor **out);
/** New view of x's storage with the given geometry. */
keel_status keel__tensor_view(const keel_tensor *x, int ndim,
                              const int64_t *shape, const int64_t *strides,
                              int64_t offset, keel_tensor **out);
/** dst takes src's storage, dtype and geometry (its own storage is
 *  released); its identity, gradient flag and graph links stay. For the
 *  in-place dtype change of parameters (amp decorate). */
void keel__tensor_adopt(keel_tensor *dst, const keel_tensor *src);
/** dst's values = src's (same dtype, shape and device, both contiguous),
 *  by a device copy; dst's version advances (an in-place write). */
keel_status keel__tensor_copy_values(keel_tensor *dst, const keel_tensor *src);
/** Number of elements of a shape (unchecked: for shapes already within
 *  the limits below, i.e. those of live tensors). */
int64_t keel__numel(int ndim, const int64_t *shape);

/** Whether dt is one of the floating dtypes (float32, float64, float16,
 *  bfloat16): the catalog's KEEL_DT_FLOAT mask. */
static inline bool keel__dtype_is_float(keel_dtype dt)
{
    return (KEEL_DTYPE_BIT(dt) & KEEL_DT_FLOAT) != 0;
}

/*
 * Size limits, checked once where a shape enters: tensor creation, every
 * new storage (keel__tensor_new), reshape and expand, and file headers.
 * Every dimension is >= 0, and the product of the dimensions, a zero
 * dimension counted as 1, times the element size is at most INT64_MAX
 * (KEEL_TENSOR_MAX_BYTES). That one bound makes the element count, the
 * byte size and every row-major stride, in elements or bytes, representable
 * in int64_t, also for empty tensors, whose strides are computed from the
 * other dimensions.
 *
 * keel__shape_size() reports whether a shape is within the limits, without
 * a message (file loaders use it on header data); *numel and *nbytes, when
 * not NULL, receive the element count and the byte size. `esize` is the
 * element size in bytes (>= 1).
 */
static inline bool keel__shape_size(int ndim, const int64_t *shape,
                                    uint64_t esize, int64_t *numel,
                                    uint64_t *nbytes)
{
    int64_t span = 1, bytes;
    bool empty = false;

    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return false;
        if (shape[i] == 0)
            empty = true;
        else if (__builtin_mul_overflow(span, shape[i], &span))
            return false;
    }
    if (esize > (uint64_t)INT64_MAX ||
        __builtin_mul_overflow(span, (int64_t)esize, &bytes))
        return false;
#if SIZE_MAX < INT64_MAX
    if ((uint64_t)bytes > SIZE_MAX)
        return false;
#endif
    if (numel)
        *numel = empty ? 0 : span;
    if (nbytes)
        *nbytes = empty ? 0 : (uint64_t)bytes;
    return true;
}

/** keel__shape_size() with an INVALID_ARGUMENT naming `what`, the shape
 *  and the dtype when the shape is outside the limits (also checks ndim,
 *  a NULL shape and the dtype). */
keel_status keel__shape_check(const char *what, int ndim,
                              const int64_t *shape, keel_dtype dtype);
/** Device address of a tensor's first element (storage + offset). */
keel_dptr keel__tensor_dptr(const keel_tensor *t);
/** Fill a kernel descriptor from a tensor. */
void keel__desc(const keel_tensor *t, keel_tensor_desc *d);
/** "float32[2, 3]" into buf. */
const char *keel__tensor_str(const keel_tensor *t, char *buf, size_t size);
/** "[2, 3]" into buf. */
const char *keel__shape_str(int ndim, const int64_t *shape, char *buf,
                            size_t size);
/** Row-major strides of `shape` (empty dims counted as 1). */
void keel__contiguous_strides(int ndim, const int64_t *shape,
                              int64_t *strides);

/** Resolve a device name (NULL: current). */
keel_status keel__place_of(const char *device, keel_place *place);
/** Normalise an axis into [0, ndim); returns -1 when out of range. */
int keel__axis(int64_t axis, int ndim);

#endif /* KEEL_TENSOR_INTERNAL_H */
