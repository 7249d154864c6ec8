/*
 * The dispatch layer's private declarations: the catalog with parsed
 * attribute specs, an op call being prepared, shape rules, the run
 * entry points the layers above use, the CPU fallback's counters, the
 * random-number counters and the profiler. Dispatch calls the tensor and
 * runtime layers, and reaches plugins through the runtime's tables.
 */
#ifndef KEEL_DISPATCH_INTERNAL_H
#define KEEL_DISPATCH_INTERNAL_H

#include "tensor/tensor_internal.h"

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

/** fused_linear / fused_conv2d: INVALID_ARGUMENT naming an `activation`
 *  attribute that is not one of KEEL_FUSED_ACT_NAMES (shape_linalg.c). */
keel_status keel__check_activation(struct keel_op_call *c);

/** Reset dispatch state tied to plugins (kernel caches). */
void keel__dispatch_shutdown(void);

/* ---- the recorder: how autograd, the layer above, sees calls ------------- */

/* Dispatch records nothing itself. The autograd layer installs a recorder
 * the first time a tensor requires a gradient; until then, and for calls
 * dispatch makes on its own behalf (a CPU fallback's copies), nothing is
 * recorded. */
/** Views the ops layer records (the backward maps the grad back to x). */
enum keel_ag_view {
    KEEL_AG_VIEW_RESHAPE = 0, /* reshape, squeeze, unsqueeze, flatten */
    KEEL_AG_VIEW_PERMUTE,     /* params: perm[ndim]                    */
    KEEL_AG_VIEW_SLICE,       /* params: axis, start, len, step         */
    KEEL_AG_VIEW_EXPAND,      /* reduce back to x's shape              */
    KEEL_AG_VIEW_TO,          /* device copy: copy the grad back       */
    KEEL_AG_VIEW_COUNT_
};

struct keel_recorder {
    /* Whether this thread records now (no no_grad scope is open). */
    bool (*enabled)(void);
    /* Whether op `op` has a backward rule. */
    bool (*differentiable)(keel_op_id op);
    /* Record a graph node for a call that just ran: inputs c->in, outputs
     * outs[c->nout]; called only when some input requires a gradient. */
    keel_status (*record)(const struct keel_op_call *c, keel_tensor **outs);
    /* Record view `kind` of x as out (x requires a gradient). */
    keel_status (*record_view)(enum keel_ag_view kind, const keel_tensor *x,
                               keel_tensor *out, const int64_t *params,
                               int nparams);
};
void keel__dispatch_set_recorder(const struct keel_recorder *r);

/** Whether a view of x must be recorded now. */
bool keel__view_wants_record(const keel_tensor *x);
/** Record it (only after keel__view_wants_record said so). */
keel_status keel__view_record(enum keel_ag_view kind, const keel_tensor *x,
                              keel_tensor *out, const int64_t *params,
                              int nparams);
/** Calls between begin and end, on this thread, record nothing: copies and
 *  readbacks the core makes on its own behalf. Nests. */
void keel__no_record_begin(void);
void keel__no_record_end(void);

/* ---- graph capture: how jit/, a layer above, records a forward pass ---- */

/*
 * While a thread's keel__capture is set, dispatch hands it every call it
 * completes for the user (not the core's own copies: keel__no_record_*),
 * after the kernel ran and before the outputs are returned; the ops layer
 * hands it every view it makes, with the view's arguments as given (see
 * tensor_ops.c). An error from the hook fails the call. Capture is per
 * thread: other threads run as before.
 */
struct keel_capture {
    void *ctx;
    keel_status (*call)(void *ctx, const struct keel_op_call *c,
                        keel_tensor *const *outs);
    /* kind: "reshape" (params: the new shape), "permute" (perm),
     * "slice" (axis, start, stop, step as given), "expand" (the new
     * shape) or "to" (a copy to another device: no params). */
    keel_status (*view)(void *ctx, const char *kind, const keel_tensor *x,
                        const keel_tensor *out, const int64_t *params,
                        int nparams);
};
extern _Thread_local const struct keel_capture *keel__capture;
/** Hand a view to the capture hook when one is set (ops layer). */
keel_status keel__capture_view(const char *kind, const keel_tensor *x,
                               const keel_tensor *out, const int64_t *params,
                               int nparams);

/* ---- the AMP step: how amp/, the layer above, casts calls -------------- */

/*
 * Dispatch casts nothing itself. The amp layer installs two hooks the
 * first time a scope opens and sets keel__amp_on for the threads inside
 * an enabled scope; dispatch calls them only for calls the user made
 * (not for the core's own copies, nor while a backward pass runs):
 *   replace  before a call is prepared: may run the op another way
 *            (linear/conv2d with a float32 bias) and return true with
 *            *st and the outputs set; false lets the call go on;
 *   cast     after the attributes, before the shape rule: casts inputs
 *            of c (keel__call_set_input / keel__cast_input).
 */
typedef bool (*keel_amp_replace_fn)(keel_op_id op, keel_tensor *const *in,
                                    int nin, const keel_attr *attrs,
                                    int nattrs, keel_tensor **outs,
                                    int max_outputs, int *num_outputs,
                                    keel_status *st);
typedef keel_status (*keel_amp_cast_fn)(struct keel_op_call *c);
void keel__dispatch_set_amp(keel_amp_replace_fn replace, keel_amp_cast_fn cast);
/** Non-zero on a thread inside an enabled auto_cast scope (amp/ sets it). */
extern _Thread_local int keel__amp_on;
/** A backward pass runs on this thread: no AMP step (autograd calls these;
 *  nests). Each outermost begin also advances keel__amp_epoch. */
void keel__amp_pause_begin(void);
void keel__amp_pause_end(void);
/** Lift every pause of this thread (returns how many there were, for
 *  keel__amp_pause_restore): recompute's second forward inside backward
 *  casts as the first one did. */
int keel__amp_pause_lift(void);
void keel__amp_pause_restore(int pauses);
/** Counts backward passes started (cast-cache entries die with it). */
unsigned keel__amp_epoch(void);
/** Whether `place`'s plugin has a kernel of op for dtype. */
bool keel__has_kernel(keel_place place, keel_op_id op, keel_dtype dtype);
/** Whether op writes its input i in place (optimizer updates, running
 *  statistics): such an input is never replaced by a cast. */
bool keel__input_written(keel_op_id op, int i);
/** Replace input i of c by t (a new reference is taken). */
void keel__call_set_input(struct keel_op_call *c, int i, keel_tensor *t);

/* operator statistics (paddle.amp.debugging's op stats) */
void keel__op_stats_enable(bool on);
void keel__op_stats_reset(void);
uint64_t keel__op_stats_get(keel_op_id op, keel_dtype dtype);

/** Next `n` counters of the global generator (rng.c). */
void keel__rng_next(uint64_t n, uint64_t *seed, uint64_t *offset);

/* profiler (profile.c) */
void keel__prof_env(void);
int keel__prof_enter(void);
void keel__prof_leave(keel_op_id op, int outer_depth, uint64_t ns,
                      bool count);

#endif /* KEEL_DISPATCH_INTERNAL_H */
