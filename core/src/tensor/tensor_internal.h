/*
 * Internal tensor, storage, allocator and dispatch declarations.
 */
#ifndef KEEL_TENSOR_INTERNAL_H
#define KEEL_TENSOR_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <keel/ops.h>
#include <keel/tensor.h>

#include "internal.h"

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

struct keel_storage {
    atomic_int refcount;
    keel_place place;
    keel_dptr data;
    uint64_t nbytes;
    struct keel_block *block;
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
};

/** New contiguous tensor with uninitialised storage on `place`. */
keel_status keel__tensor_new(keel_place place, keel_dtype dtype, int ndim,
                             const int64_t *shape, keel_tensor **out);
/** New view of x's storage with the given geometry. */
keel_status keel__tensor_view(const keel_tensor *x, int ndim,
                              const int64_t *shape, const int64_t *strides,
                              int64_t offset, keel_tensor **out);
/** Number of elements of a shape (unchecked: for shapes already within
 *  the limits below, i.e. those of live tensors). */
int64_t keel__numel(int ndim, const int64_t *shape);

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
/** Fill a kernel descriptor from a tensor. */
void keel__desc(const keel_tensor *t, keel_tensor_desc *d);
/** "float32[2, 3]" into buf. */
const char *keel__tensor_str(const keel_tensor *t, char *buf, size_t size);
/** Resolve a device name (NULL: current). */
keel_status keel__place_of(const char *device, keel_place *place);
/** Normalise an axis into [0, ndim); returns -1 when out of range. */
int keel__axis(int64_t axis, int ndim);

/* ---- dispatch (dispatch.c) ---------------------------------------------- */

/** Count one CPU fallback of (op, dtype) from `plugin` (fallback.c). */
void keel__fallback_note(keel_op_id op, keel_dtype dtype, int plugin);

#define KEEL_MAX_OP_INPUTS 64
#define KEEL_MAX_OP_OUTPUTS 64
#define KEEL_MAX_OP_ATTRS 12

/** One attribute of an op's catalog spec. */
struct keel_attr_spec {
    char name[32];
    keel_attr_type type;
    bool required;
    keel_attr def; /* default (name points at `name`) */
    int64_t def_ints[8];
    double def_float;
};

struct keel_op_def;
struct keel_op_call;
typedef keel_status (*keel_shape_fn)(struct keel_op_call *c);

struct keel_op_def {
    const keel_op_info *info;
    keel_shape_fn shape;
    int nattrs;
    struct keel_attr_spec attrs[KEEL_MAX_OP_ATTRS];
};

/** An op call being prepared: inputs, resolved attributes, outputs. */
struct keel_op_call {
    keel_op_id op;
    const struct keel_op_def *def;
    keel_place place;
    int nin;
    keel_tensor *in[KEEL_MAX_OP_INPUTS];       /* owned references */
    keel_tensor_desc in_desc[KEEL_MAX_OP_INPUTS];
    keel_attr attrs[KEEL_MAX_OP_ATTRS];      /* in spec order, defaults in */
    /* Set by the shape rule. */
    keel_dtype key_dtype;
    int nout;
    keel_dtype out_dtype[KEEL_MAX_OP_OUTPUTS];
    int out_ndim[KEEL_MAX_OP_OUTPUTS];
    int64_t out_shape[KEEL_MAX_OP_OUTPUTS][KEEL_MAX_DIMS];
};

/** The catalog entry with parsed attribute specs. */
const struct keel_op_def *keel__op_def(keel_op_id op);

/** Attribute `name` of a prepared call (never NULL for a spec'd name). */
const keel_attr *keel__attr(const struct keel_op_call *c, const char *name);
int64_t keel__attr_i(const struct keel_op_call *c, const char *name);
double keel__attr_f(const struct keel_op_call *c, const char *name);
const char *keel__attr_s(const struct keel_op_call *c, const char *name);

/** Error naming the op, its inputs (dtype and shape) and the device. */
keel_status keel__op_error(const struct keel_op_call *c, keel_status st,
                           const char *fmt, ...) KEEL_PRINTF(3, 4);

/** Replace input i by a cast to `dtype` (no-op when already). */
keel_status keel__cast_input(struct keel_op_call *c, int i, keel_dtype dtype);

/** Single-output convenience over keel_op_run. */
keel_status keel__run1(keel_op_id op, const keel_tensor *const *in, int nin,
                       const keel_attr *attrs, int nattrs,
                       keel_tensor **out);

/** Creation ops on a place (no inputs). */
keel_status keel__run_create(keel_op_id op, keel_place place,
                             const keel_attr *attrs, int nattrs,
                             keel_tensor **out);

/** Shape rules, by catalog SHAPE token (shape.c). */
#define KEEL_OP(ID, NAME, NIN, NOUT, DTYPES, SHAPE, GRAD, AMP, ATTRS, SEM)  \
    keel_status keel__shape_##SHAPE(struct keel_op_call *c);
#include <keel/ops.def>
#undef KEEL_OP

/** Reset dispatch state tied to plugins (kernel caches). */
void keel__dispatch_shutdown(void);

/* ---- autograd hooks (autograd.c) ---------------------------------------- */

/** Whether this thread records graphs (no no_grad scope is open). */
bool keel__grad_enabled(void);

/** Whether op `op` has a backward rule in the catalog. */
bool keel__op_differentiable(keel_op_id op);

/** Record a graph node for a call that just ran: inputs c->in, outputs
 *  outs[c->nout]. Called by dispatch only when some input requires a
 *  gradient and grad mode is on. */
keel_status keel__ag_record(const struct keel_op_call *c, keel_tensor **outs);

/** Views recorded by tensor.c (the backward maps the grad back to x). */
enum keel_ag_view {
    KEEL_AG_VIEW_RESHAPE = 0, /* reshape, squeeze, unsqueeze, flatten */
    KEEL_AG_VIEW_PERMUTE,     /* params: perm[ndim]                    */
    KEEL_AG_VIEW_SLICE,       /* params: axis, start, len, step         */
    KEEL_AG_VIEW_EXPAND,      /* reduce back to x's shape              */
    KEEL_AG_VIEW_TO,          /* device copy: copy the grad back       */
    KEEL_AG_VIEW_COUNT_
};

/** Record view `kind` of x as out (x requires a gradient, grad mode on). */
keel_status keel__ag_record_view(enum keel_ag_view kind, const keel_tensor *x,
                                 keel_tensor *out, const int64_t *params,
                                 int nparams);

/** Whether a view of x must be recorded. */
static inline bool keel__ag_wants_view(const keel_tensor *x)
{
    return x->requires_grad && keel__grad_enabled();
}

/** Drop a tensor's graph references (its grad_fn and grad). */
void keel__ag_tensor_release(keel_tensor *t);

/** Next `n` counters of the global generator (rng.c). */
void keel__rng_next(uint64_t n, uint64_t *seed, uint64_t *offset);

/* profiler (profile.c) */
extern atomic_int keel__prof_state;
void keel__prof_env(void);
uint64_t keel__prof_now(void);
int keel__prof_enter(void);
void keel__prof_leave(keel_op_id op, int outer_depth, uint64_t ns);

#endif /* KEEL_TENSOR_INTERNAL_H */
