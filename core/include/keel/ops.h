/*
 * keel ops — every operator of the catalog (device-api/include/keel/ops.def),
 * through one generic entry point and a typed C function per op.
 *
 * All inputs of one op must live on one device; outputs are allocated on
 * that device by the core. Binary elementwise ops broadcast numpy-style and
 * promote dtypes (docs/dtypes.md). Axes may be negative.
 *
 * When the device's plugin has no kernel for an (op, dtype), the core runs
 * the op on the CPU plugin and copies the result back: counted per op and
 * visible through keel_fallback_count() and `keel devices --fallbacks`, or
 * an error (KEEL_STATUS_NOT_SUPPORTED) in strict mode.
 */
#ifndef KEEL_OPS_H
#define KEEL_OPS_H

#include <stdio.h>

#include <keel/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- generic ------------------------------------------------------------------ */

/**
 * Run catalog op `op` on `inputs`. Attributes not given take the catalog's
 * defaults; unknown names, wrong types and missing required attributes are
 * errors. On success outputs[0..*num_outputs) hold new tensors; `max_outputs`
 * is the room in `outputs` (ops that write in place have no outputs).
 */
KEEL_API keel_status keel_op_run(keel_op_id op, keel_tensor *const *inputs,
                                 int num_inputs, const keel_attr *attrs,
                                 int num_attrs, keel_tensor **outputs,
                                 int max_outputs, int *num_outputs);

/** The catalog entry of an op (NULL for an id outside the catalog). */
KEEL_API const keel_op_info *keel_op_get_info(keel_op_id op);

/**
 * Kernel coverage of a loaded plugin: for every catalog op and every dtype
 * the op defines and device 0 of the plugin computes with, whether the
 * plugin has a kernel. Calls visit(op, dtype, has_kernel, ctx) for each
 * pair. Returns OK, INVALID_ARGUMENT (not a loaded plugin with devices).
 */
KEEL_API keel_status keel_kernel_coverage(int plugin,
                                          void (*visit)(keel_op_id op,
                                                        keel_dtype dtype,
                                                        bool has_kernel,
                                                        void *ctx),
                                          void *ctx);

/** Look an op up by catalog name. Returns OK or NOT_FOUND. */
KEEL_API keel_status keel_op_find(const char *name, keel_op_id *op);

/**
 * What a missing kernel does. OFF: the op runs on the CPU plugin (counted).
 * ON: the call fails with NOT_SUPPORTED, naming the op and dtype. REPORT:
 * the op falls back as with OFF, and at exit the core lists every (op,
 * dtype) that fell back, so one run of a workload shows every kernel it
 * still needs. Read once from KEEL_STRICT (unset, empty or "0": OFF;
 * "report": REPORT; anything else: ON) unless set here first.
 */
typedef enum keel_strict_mode {
    KEEL_STRICT_OFF = 0,
    KEEL_STRICT_ON = 1,
    KEEL_STRICT_REPORT = 2
} keel_strict_mode;

KEEL_API void keel_set_strict_mode(keel_strict_mode mode);
KEEL_API keel_strict_mode keel_get_strict_mode(void);
/** keel_set_strict(b) is keel_set_strict_mode(b ? ON : OFF); keel_get_strict()
 *  is true in mode ON only. */
KEEL_API void keel_set_strict(bool strict);
KEEL_API bool keel_get_strict(void);

/** How many times `op` fell back to the CPU plugin (all devices, dtypes). */
KEEL_API uint64_t keel_fallback_count(keel_op_id op);
/** The same for one dtype (the dtype that keys the kernel lookup). */
KEEL_API uint64_t keel_fallback_count_dtype(keel_op_id op, keel_dtype dtype);
/** Set every fallback count to zero. */
KEEL_API void keel_fallback_reset(void);
/**
 * One line saying how many calls of which ops ran on the CPU plugin and
 * from which plugins ("keel: CPU fallback: 120 calls of 3 ops from sample:
 * conv2d.float32 x40, ..."), most calls first, into buf (NUL-terminated,
 * cut to size). Returns the line's length, 0 when nothing fell back. The
 * core prints it to stderr at exit when it is not empty, unless
 * KEEL_FALLBACK_REPORT=0.
 */
KEEL_API int keel_fallback_summary(char *buf, size_t size);
/** One line per (op, dtype) that fell back, to f. Returns how many. */
KEEL_API int keel_fallback_report(FILE *f);

/*
 * Per-op profiler. While on, every op call made through the dispatcher
 * (ops, autograd's backward ops, optimizer updates) adds its wall time to
 * its op's counters: the whole call, i.e. argument and shape checks,
 * output allocation, the kernel and autograd recording. On a device whose
 * kernels run asynchronously that is the time to enqueue, unless `sync`
 * is true: then each op waits for its device before the clock stops
 * (slower, but it attributes device time to the op that spent it).
 * Nested calls are counted once, in the outermost op.
 *
 * KEEL_PROFILE=1 (or =sync) in the environment starts the profiler with
 * the first op and prints the table to stderr at process exit.
 */
typedef struct keel_op_profile {
    uint64_t calls;
    uint64_t total_ns;
    uint64_t max_ns;
} keel_op_profile;

KEEL_API void keel_profile_start(bool sync);
KEEL_API void keel_profile_stop(void);
/** Zero every counter (the profiler stays on or off). */
KEEL_API void keel_profile_reset(void);
/** Counters of one op. Returns OK or INVALID_ARGUMENT (not an op). */
KEEL_API keel_status keel_profile_get(keel_op_id op, keel_op_profile *out);
/** The table, most expensive op first: calls, total ms, share, mean and
 *  max us. Writes nothing for a NULL stream. */
KEEL_API void keel_profile_print(FILE *f);

/*
 * Trace recorder. While on, every op call made through the dispatcher,
 * every host<->device copy and every device, stream or event synchronize
 * of the runtime is kept as one event (begin time, duration, thread or
 * device stream, and for ops the first input's device, dtype and shape).
 * keel_trace_stop writes them to `path` as a Chrome trace-event JSON
 * object ({"traceEvents": [...], ...}) that Perfetto and chrome://tracing
 * open as is. Times are the host's monotonic clock: for asynchronous
 * kernels and copies an event is the time to enqueue (combine with
 * keel_profile_start(true) to wait for the device after each op).
 * At most 4194304 events are kept; later ones are counted in the file's
 * "otherData" as dropped_events.
 *
 * KEEL_TRACE=FILE in the environment starts a trace when the runtime
 * initializes and writes it at process exit (errors go to stderr).
 *
 * keel_trace_start: OK, INVALID_ARGUMENT (NULL or empty path),
 * INVALID_STATE (a trace is already recording), OUT_OF_MEMORY.
 * keel_trace_stop: OK, INVALID_STATE (none recording), IO_ERROR (the file
 * could not be written; it is written to PATH.tmp.<pid>, synced, then
 * renamed, so PATH is never left half written). Either way recording
 * stops and the events are freed.
 */
KEEL_API keel_status keel_trace_start(const char *path);
KEEL_API keel_status keel_trace_stop(void);

/* Attribute constructors, for keel_op_run. */
static inline keel_attr keel_attr_int(const char *name, int64_t v)
{
    keel_attr a;
    a.name = name;
    a.type = KEEL_ATTR_INT;
    a.v.i = v;
    return a;
}
static inline keel_attr keel_attr_float(const char *name, double v)
{
    keel_attr a;
    a.name = name;
    a.type = KEEL_ATTR_FLOAT;
    a.v.f = v;
    return a;
}
static inline keel_attr keel_attr_bool(const char *name, bool v)
{
    keel_attr a;
    a.name = name;
    a.type = KEEL_ATTR_BOOL;
    a.v.i = v ? 1 : 0;
    return a;
}
static inline keel_attr keel_attr_str(const char *name, const char *v)
{
    keel_attr a;
    a.name = name;
    a.type = KEEL_ATTR_STRING;
    a.v.s = v;
    return a;
}
static inline keel_attr keel_attr_ints(const char *name, const int64_t *v,
                                       int64_t n)
{
    keel_attr a;
    a.name = name;
    a.type = KEEL_ATTR_INTS;
    a.v.ints.data = v;
    a.v.ints.count = n;
    return a;
}
static inline keel_attr keel_attr_dtype(const char *name, keel_dtype v)
{
    keel_attr a;
    a.name = name;
    a.type = KEEL_ATTR_DTYPE;
    a.v.i = (int64_t)v;
    return a;
}

/* ---- typed functions ----------------------------------------------------------
 * Each returns a status and, on success, new tensors in its out parameters.
 */

/* Elementwise binary (broadcasting, promoting). */
KEEL_API keel_status keel_add(const keel_tensor *x, const keel_tensor *y,
                              keel_tensor **out);
KEEL_API keel_status keel_subtract(const keel_tensor *x, const keel_tensor *y,
                                   keel_tensor **out);
KEEL_API keel_status keel_multiply(const keel_tensor *x, const keel_tensor *y,
                                   keel_tensor **out);
KEEL_API keel_status keel_divide(const keel_tensor *x, const keel_tensor *y,
                                 keel_tensor **out);
KEEL_API keel_status keel_pow(const keel_tensor *x, const keel_tensor *y,
                              keel_tensor **out);
KEEL_API keel_status keel_maximum(const keel_tensor *x, const keel_tensor *y,
                                  keel_tensor **out);
KEEL_API keel_status keel_minimum(const keel_tensor *x, const keel_tensor *y,
                                  keel_tensor **out);
KEEL_API keel_status keel_floor_divide(const keel_tensor *x,
                                       const keel_tensor *y,
                                       keel_tensor **out);
KEEL_API keel_status keel_remainder(const keel_tensor *x, const keel_tensor *y,
                                    keel_tensor **out);
KEEL_API keel_status keel_equal(const keel_tensor *x, const keel_tensor *y,
                                keel_tensor **out);
KEEL_API keel_status keel_not_equal(const keel_tensor *x, const keel_tensor *y,
                                    keel_tensor **out);
KEEL_API keel_status keel_less(const keel_tensor *x, const keel_tensor *y,
                               keel_tensor **out);
KEEL_API keel_status keel_less_equal(const keel_tensor *x,
                                     const keel_tensor *y, keel_tensor **out);
KEEL_API keel_status keel_greater(const keel_tensor *x, const keel_tensor *y,
                                  keel_tensor **out);
KEEL_API keel_status keel_greater_equal(const keel_tensor *x,
                                        const keel_tensor *y,
                                        keel_tensor **out);
KEEL_API keel_status keel_logical_and(const keel_tensor *x,
                                      const keel_tensor *y, keel_tensor **out);
KEEL_API keel_status keel_logical_or(const keel_tensor *x,
                                     const keel_tensor *y, keel_tensor **out);
KEEL_API keel_status keel_logical_xor(const keel_tensor *x,
                                      const keel_tensor *y, keel_tensor **out);
KEEL_API keel_status keel_logical_not(const keel_tensor *x, keel_tensor **out);
KEEL_API keel_status keel_where(const keel_tensor *cond, const keel_tensor *x,
                                const keel_tensor *y, keel_tensor **out);

/* Elementwise unary. */
#define KEEL_UNARY_DECL(name)                                                \
    KEEL_API keel_status keel_##name(const keel_tensor *x, keel_tensor **out);
KEEL_UNARY_DECL(neg)
KEEL_UNARY_DECL(abs)
KEEL_UNARY_DECL(sign)
KEEL_UNARY_DECL(exp)
KEEL_UNARY_DECL(log)
KEEL_UNARY_DECL(log1p)
KEEL_UNARY_DECL(sqrt)
KEEL_UNARY_DECL(rsqrt)
KEEL_UNARY_DECL(square)
KEEL_UNARY_DECL(sin)
KEEL_UNARY_DECL(cos)
KEEL_UNARY_DECL(floor)
KEEL_UNARY_DECL(ceil)
KEEL_UNARY_DECL(round)
KEEL_UNARY_DECL(relu)
KEEL_UNARY_DECL(relu6)
KEEL_UNARY_DECL(silu)
KEEL_UNARY_DECL(sigmoid)
KEEL_UNARY_DECL(tanh)
KEEL_UNARY_DECL(hardswish)
#undef KEEL_UNARY_DECL
KEEL_API keel_status keel_leaky_relu(const keel_tensor *x,
                                     double negative_slope, keel_tensor **out);
KEEL_API keel_status keel_elu(const keel_tensor *x, double alpha,
                              keel_tensor **out);
KEEL_API keel_status keel_gelu(const keel_tensor *x, bool approximate,
                               keel_tensor **out);
KEEL_API keel_status keel_softplus(const keel_tensor *x, double beta,
                                   double threshold, keel_tensor **out);
KEEL_API keel_status keel_clip(const keel_tensor *x, double min, double max,
                               keel_tensor **out);

/* Reductions: axes[naxes] (naxes 0: all axes; axes may then be NULL).
 * naxes < 0, naxes > KEEL_MAX_DIMS or a NULL axes with naxes > 0 is
 * INVALID_ARGUMENT; so is a repeated or out-of-range axis. */
#define KEEL_REDUCE_DECL(name)                                               \
    KEEL_API keel_status keel_##name(const keel_tensor *x, int naxes,        \
                                     const int *axes, bool keepdim,          \
                                     keel_tensor **out);
KEEL_REDUCE_DECL(sum)
KEEL_REDUCE_DECL(mean)
KEEL_REDUCE_DECL(max)
KEEL_REDUCE_DECL(min)
KEEL_REDUCE_DECL(prod)
KEEL_REDUCE_DECL(logsumexp)
KEEL_REDUCE_DECL(all)
KEEL_REDUCE_DECL(any)
#undef KEEL_REDUCE_DECL
/** Pass as the axis of argmax, argmin and cumsum to work on the flattened
 *  tensor. */
#define KEEL_AXIS_FLAT INT32_MIN

/** axis KEEL_AXIS_FLAT: over the flattened tensor. */
KEEL_API keel_status keel_argmax(const keel_tensor *x, int axis, bool keepdim,
                                 keel_tensor **out);
KEEL_API keel_status keel_argmin(const keel_tensor *x, int axis, bool keepdim,
                                 keel_tensor **out);
KEEL_API keel_status keel_var(const keel_tensor *x, int naxes,
                              const int *axes, bool keepdim, bool unbiased,
                              keel_tensor **out);
KEEL_API keel_status keel_std(const keel_tensor *x, int naxes,
                              const int *axes, bool keepdim, bool unbiased,
                              keel_tensor **out);
KEEL_API keel_status keel_cumsum(const keel_tensor *x, int axis,
                                 keel_tensor **out);

/* Linear algebra. */
KEEL_API keel_status keel_matmul(const keel_tensor *x, const keel_tensor *y,
                                 bool transpose_x, bool transpose_y,
                                 keel_tensor **out);
/** weight [in, out] (Paddle layout); bias may be NULL. */
KEEL_API keel_status keel_linear(const keel_tensor *x,
                                 const keel_tensor *weight,
                                 const keel_tensor *bias, keel_tensor **out);

/* Neural network ops. */
typedef struct keel_conv2d_params {
    int64_t stride[2];
    /* npadding values: 1 (all sides), 2 (symmetric h, w) or 4 (top,
     * bottom, left, right); any other npadding is INVALID_ARGUMENT. */
    int64_t padding[4];
    int npadding;
    /* "EXPLICIT", "SAME" or "VALID". */
    const char *padding_algorithm;
    int64_t dilation[2];
    int64_t groups;
    int64_t output_padding[2]; /* conv2d_transpose only */
} keel_conv2d_params;

/** Paddle defaults: stride 1, padding 0, dilation 1, groups 1. */
KEEL_API keel_conv2d_params keel_conv2d_default_params(void);
KEEL_API keel_status keel_conv2d(const keel_tensor *x,
                                 const keel_tensor *weight,
                                 const keel_tensor *bias,
                                 const keel_conv2d_params *p,
                                 keel_tensor **out);
KEEL_API keel_status keel_conv2d_transpose(const keel_tensor *x,
                                           const keel_tensor *weight,
                                           const keel_tensor *bias,
                                           const keel_conv2d_params *p,
                                           keel_tensor **out);
/* Fused inference ops: one kernel call for linear / conv2d and an
 * activation. */
/**
 * out = act(x @ weight + bias): keel_linear (weight [in, out], bias may be
 * NULL), then the activation `activation` names, as the op of that name
 * would compute it on linear's output: "none", "relu", "relu6", "gelu"
 * (exact, erf), "gelu_tanh" (gelu's tanh approximation), "silu",
 * "sigmoid", "tanh", "leaky_relu" (negative slope `alpha`; the others
 * ignore alpha) or "hardswish". NULL means "none". Not differentiable:
 * for inference (docs/ops.md, `fused_linear`). Returns OK, or
 * INVALID_ARGUMENT for a name not in that list (the message names it) and
 * for everything keel_linear refuses.
 */
KEEL_API keel_status keel_fused_linear(const keel_tensor *x,
                                       const keel_tensor *weight,
                                       const keel_tensor *bias,
                                       const char *activation, double alpha,
                                       keel_tensor **out);
/**
 * out = act(conv2d(x, weight, bias)): keel_conv2d with parameters p (NULL:
 * the defaults), then the activation as for keel_fused_linear. Not
 * differentiable (docs/ops.md, `fused_conv2d`). Returns OK, or
 * INVALID_ARGUMENT for an unknown activation name and for everything
 * keel_conv2d refuses.
 */
KEEL_API keel_status keel_fused_conv2d(const keel_tensor *x,
                                       const keel_tensor *weight,
                                       const keel_tensor *bias,
                                       const keel_conv2d_params *p,
                                       const char *activation, double alpha,
                                       keel_tensor **out);
KEEL_API keel_status keel_softmax(const keel_tensor *x, int axis,
                                  keel_tensor **out);
KEEL_API keel_status keel_log_softmax(const keel_tensor *x, int axis,
                                      keel_tensor **out);
KEEL_API keel_status keel_one_hot(const keel_tensor *x, int64_t num_classes,
                                  keel_tensor **out);

/* Shape and indexing. */
KEEL_API keel_status keel_concat(keel_tensor *const *xs, int n, int axis,
                                 keel_tensor **out);
KEEL_API keel_status keel_stack(keel_tensor *const *xs, int n, int axis,
                                keel_tensor **out);
/** sections[n] sizes along axis (one may be -1); outs[n]. */
KEEL_API keel_status keel_split(const keel_tensor *x, int n,
                                const int64_t *sections, int axis,
                                keel_tensor **outs);
/** n nearly equal pieces (the last may be smaller), as Paddle's chunk. */
KEEL_API keel_status keel_chunk(const keel_tensor *x, int n, int axis,
                                keel_tensor **outs);
KEEL_API keel_status keel_gather(const keel_tensor *x,
                                 const keel_tensor *index, int axis,
                                 keel_tensor **out);
KEEL_API keel_status keel_index_select(const keel_tensor *x,
                                       const keel_tensor *index, int axis,
                                       keel_tensor **out);
KEEL_API keel_status keel_scatter(const keel_tensor *x,
                                  const keel_tensor *index,
                                  const keel_tensor *updates, bool overwrite,
                                  keel_tensor **out);
KEEL_API keel_status keel_take_along_axis(const keel_tensor *x,
                                          const keel_tensor *index, int axis,
                                          keel_tensor **out);
KEEL_API keel_status keel_tile(const keel_tensor *x, int n,
                               const int64_t *repeat_times, keel_tensor **out);
KEEL_API keel_status keel_flip(const keel_tensor *x, int naxes,
                               const int *axes, keel_tensor **out);
/** pad[2*k] (before, after) pairs from the first axis; mode "constant",
 *  "reflect" or "replicate". */
KEEL_API keel_status keel_pad(const keel_tensor *x, int npad,
                              const int64_t *pad, const char *mode,
                              double value, keel_tensor **out);
KEEL_API keel_status keel_topk(const keel_tensor *x, int64_t k, int axis,
                               bool largest, bool sorted,
                               keel_tensor **values, keel_tensor **indices);
KEEL_API keel_status keel_sort(const keel_tensor *x, int axis, bool descending,
                               keel_tensor **values, keel_tensor **indices);
KEEL_API keel_status keel_argsort(const keel_tensor *x, int axis,
                                  bool descending, keel_tensor **out);

/* Mixed precision. */
/**
 * A GradScaler's fused check (Paddle's check_finite_and_unscale, one
 * tensor): in place, found_inf[0] |= any value of x (before scaling) is
 * infinite or NaN, then x *= 1 / scale, every element, non-finite ones
 * too. x is any floating dtype, any shape (not a broadcast view); scale a
 * float32 and found_inf a bool tensor of one element ([1] or 0-d), all on
 * x's device. 1/scale is computed in float32 (float64 for a float64 x);
 * float16/bfloat16 x is multiplied in float32. An empty x changes nothing.
 * Returns OK, INVALID_ARGUMENT (scale or found_inf of another dtype or
 * size, devices that differ, a broadcast x) or NOT_SUPPORTED (x not
 * floating).
 */
KEEL_API keel_status keel_check_finite_and_unscale(keel_tensor *x,
                                                   const keel_tensor *scale,
                                                   keel_tensor *found_inf);

#ifdef __cplusplus
}
#endif

#endif /* KEEL_OPS_H */
