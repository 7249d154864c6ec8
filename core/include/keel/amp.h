/*
 * keel amp — automatic mixed precision with PaddlePaddle 3.x semantics:
 * auto_cast (levels O0, O1, O2, OD), decorate (O2 low-precision parameters
 * with float32 master weights) and GradScaler. See docs/amp.md, whose
 * per-op tables are generated from the op catalog.
 *
 * ---- auto_cast ------------------------------------------------------------
 *
 * An auto_cast scope is per thread and nests:
 *
 *   keel_amp_options o = keel_amp_default_options();   // Paddle's defaults
 *   o.dtype = KEEL_BF16;
 *   keel_amp_begin(&o);            // with paddle.amp.auto_cast(dtype=...):
 *   keel_layer_call(model, x, &y); //     every op casts as below
 *   keel_amp_end();
 *
 * Inside a scope every op call passes one step in dispatch before its shape
 * rule: the op's class (the AMP column of ops.def, changed by the custom
 * lists) and the scope's level pick the dtype the op computes in, and the
 * floating inputs of dtype float32, float16 or bfloat16 that differ from it
 * are cast (through the cast op, so autograd differentiates the casts).
 * float64 and integer inputs are never cast, nor is an input the op writes
 * in place. The norms (batch_norm, layer_norm, group_norm) decide from x
 * alone and keep float32 parameters, as Paddle's do. With use_promote
 * (always at O1, by option at O2):
 *
 *   white (matmul, linear, conv2d)     the low dtype ("amp dtype")
 *   black                              float32 at O1; at O2 promote as below
 *   fp32 (embedding, scatter)          float32 at every level
 *   promote (everything else floating) float32 when any floating input is
 *                                      float32, else the amp dtype
 *   none (comparisons, indices, casts, creation, optimizer updates)
 *                                      never cast
 *
 * O2 without use_promote runs every op that is not fp32 (or black at O1)
 * in the amp dtype. OD runs white ops in the amp dtype and every other
 * floating op in float32. O0, or enable = false, casts nothing (a disabled
 * scope inside an enabled one turns casting off until it ends).
 *
 * Paddle builds linear and conv2d with a bias from a white op and an add:
 * under O1 the matmul/convolution runs in the amp dtype and the add of the
 * float32 bias promotes the result to float32. keel's linear and conv2d
 * take the bias as an input, so when the bias is not already in the amp
 * dtype the step runs the op without it and adds it with the add op, which
 * gives Paddle's dtypes and roundings.
 *
 * A device whose plugin has no kernel of an op for the amp dtype runs that
 * op in float32 instead: counted per op (keel_amp_fallback_count) and
 * logged once per op and plugin, never computed in a dtype other than the
 * one reported.
 *
 * Casts of parameters (leaf tensors with stop_gradient false) are cached
 * per thread while a scope is open, keyed by the tensor, its version, the target dtype and whether
 * the cast was recorded for autograd: a weight used several times in one
 * forward pass is cast once. A backward pass, an in-place update of the
 * tensor, or the end of the outermost scope drops the entries.
 *
 * Backward passes never cast: gradient ops run in the dtypes the forward
 * pass chose, as in Paddle.
 */
#ifndef KEEL_AMP_H
#define KEEL_AMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <keel/ops.h>
#include <keel/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/** auto_cast levels (paddle.amp.auto_cast level=). */
typedef enum keel_amp_level {
    KEEL_AMP_O0 = 0, /* no casting                                       */
    KEEL_AMP_O1 = 1, /* white ops low, black ops float32, others promote  */
    KEEL_AMP_O2 = 2, /* nearly everything low (pure low precision)        */
    KEEL_AMP_OD = 3  /* white ops low, everything else float32            */
} keel_amp_level;

/** Most entries of each custom list. */
#define KEEL_AMP_MAX_CUSTOM 64

/**
 * An auto_cast scope's settings. keel_amp_default_options() gives
 * Paddle's defaults: enable true, level O1, dtype float16, no custom
 * lists, use_promote true.
 *
 * custom_white_list / custom_black_list: op names of the catalog
 * (docs/ops.md), num_custom_white / num_custom_black entries (at most
 * KEEL_AMP_MAX_CUSTOM each; the strings are copied). A white name runs in
 * the amp dtype, a black name in float32, whatever the catalog says; a
 * name in both lists, or one that is not an op of the catalog, is
 * INVALID_ARGUMENT (Paddle accepts unknown names silently).
 * use_promote matters at O2 only, as in Paddle: O1 always promotes.
 */
typedef struct keel_amp_options {
    bool enable;
    keel_amp_level level;
    keel_dtype dtype; /* KEEL_F16 or KEEL_BF16 */
    const char *const *custom_white_list;
    int num_custom_white;
    const char *const *custom_black_list;
    int num_custom_black;
    bool use_promote;
} keel_amp_options;

/** Paddle's auto_cast defaults. */
KEEL_API keel_amp_options keel_amp_default_options(void);

/**
 * Open an auto_cast scope on this thread (NULL: the defaults). Returns OK,
 * or INVALID_ARGUMENT naming the bad option (a level outside O0..OD, a
 * dtype other than float16/bfloat16 while enabled, a bad custom list);
 * on an error no scope is opened. Scopes nest up to KEEL_AMP_MAX_DEPTH.
 * Also records the dtype as the process's last auto_cast dtype (Paddle's
 * amp_global_state().amp_dtype, read by the GradScaler), even when
 * enable is false, as Paddle does.
 */
KEEL_API keel_status keel_amp_begin(const keel_amp_options *options);

/** Close the innermost scope. INVALID_STATE when none is open. */
KEEL_API keel_status keel_amp_end(void);

/** Deepest nesting of scopes. */
#define KEEL_AMP_MAX_DEPTH 32

/** true when this thread is inside an enabled scope of level O1, O2 or
 *  OD. */
KEEL_API bool keel_amp_is_enabled(void);

/** The innermost scope's effective level (O0 when none or disabled) and
 *  dtype (float32 when none or disabled). */
KEEL_API keel_amp_level keel_amp_current_level(void);
KEEL_API keel_dtype keel_amp_current_dtype(void);

/** The dtype of the last keel_amp_begin of any thread (float32 before the
 *  first): what Paddle's GradScaler consults. */
KEEL_API keel_dtype keel_amp_last_dtype(void);

/**
 * The dtype op would compute in under the innermost scope, given its
 * floating input dtypes in_dtypes[0..n) (float32 when no scope is
 * enabled or the op keeps its inputs). The device is not consulted.
 * Returns OK or INVALID_ARGUMENT.
 */
KEEL_API keel_status keel_amp_op_dtype(keel_op_id op, const keel_dtype *in_dtypes,
                                       int n, keel_dtype *out);

/** Ops that ran in float32 under auto_cast because the device had no
 *  kernel for the amp dtype (since the start or keel_amp_fallback_reset). */
KEEL_API uint64_t keel_amp_fallback_count(keel_op_id op);
KEEL_API void keel_amp_fallback_reset(void);

/* ---- operator statistics (paddle.amp.debugging) ----------------------------
 *
 * While collection is on, every op call that reaches a kernel is counted
 * per op and per the dtype it computed in (its kernel key), process-wide,
 * inside or outside auto_cast: Paddle's enable_operator_stats_collection.
 */
KEEL_API void keel_amp_op_stats_enable(bool on);
KEEL_API void keel_amp_op_stats_reset(void);
/** Calls of op computed in dtype since the last reset. */
KEEL_API uint64_t keel_amp_op_stats_get(keel_op_id op, keel_dtype dtype);
/** One line per op called: "op  float32 N  float16 N  bfloat16 N  other N". */
KEEL_API void keel_amp_op_stats_print(FILE *f);

/* ---- decorate (O2) ---------------------------------------------------------- */

typedef struct keel_layer keel_layer;
typedef struct keel_optimizer keel_optimizer;

/**
 * paddle.amp.decorate(models, optimizers, level, dtype, master_weight).
 *
 * level O1: nothing changes. level O2: every floating parameter and buffer
 * of every layer in models[0..num_models) (sublayers included) is cast to
 * dtype in place — the tensors stay the same objects, so optimizers and
 * other references keep working — except in the layers Paddle keeps in
 * float32: BatchNorm1D/2D, LayerNorm when dtype is float16, and layers
 * marked with keel_layer_set_keep_fp32() (keel/nn.h). Each optimizer in
 * optimizers[0..num_optimizers) gets multi_precision = master_weight
 * (master_weight < 0 means Paddle's None: true at O2): it then keeps a
 * float32 master copy and float32 accumulators of every low-precision
 * parameter, updates those in float32 and writes the rounded result back.
 * Returns OK or INVALID_ARGUMENT (level not O1/O2, dtype not
 * float16/bfloat16, NULL lists with counts, a parameter with a gradient
 * or with optimizer state already: decorate before training). On an error
 * nothing has changed.
 */
KEEL_API keel_status keel_amp_decorate(keel_layer *const *models,
                                       int num_models,
                                       keel_optimizer *const *optimizers,
                                       int num_optimizers,
                                       keel_amp_level level, keel_dtype dtype,
                                       int master_weight);

/* ---- GradScaler ------------------------------------------------------------- */

/** paddle.amp.GradScaler. */
typedef struct keel_grad_scaler keel_grad_scaler;

/** GradScaler arguments; keel_grad_scaler_default_options() holds Paddle
 *  3.3's defaults: enable true, init_loss_scaling 65536, incr_ratio 2,
 *  decr_ratio 0.5, incr_every_n_steps 2000, decr_every_n_nan_or_inf 1,
 *  use_dynamic_loss_scaling true. */
typedef struct keel_grad_scaler_options {
    bool enable;
    double init_loss_scaling;
    double incr_ratio;       /* > 1 */
    double decr_ratio;       /* < 1 */
    int64_t incr_every_n_steps;
    int64_t decr_every_n_nan_or_inf;
    bool use_dynamic_loss_scaling;
} keel_grad_scaler_options;

KEEL_API keel_grad_scaler_options keel_grad_scaler_default_options(void);

/**
 * Create a scaler (options NULL: the defaults). The scale lives on the
 * current device as a float32 [1] tensor. INVALID_ARGUMENT for
 * incr_ratio <= 1, decr_ratio >= 1 (Paddle asserts both), a
 * non-positive or non-finite init_loss_scaling, or step counts < 1.
 */
KEEL_API keel_status keel_grad_scaler_create(
    const keel_grad_scaler_options *options, keel_grad_scaler **out);
KEEL_API void keel_grad_scaler_free(keel_grad_scaler *s);

/**
 * scale(loss): *out = loss * scale (a new tensor, differentiable), or a
 * new reference to loss when the scaler is disabled. As in Paddle, the
 * first scale() with dynamic scaling on while the last auto_cast dtype
 * (keel_amp_last_dtype) is not float16 disables the scaler for good, with
 * a warning: bfloat16 needs no loss scaling.
 */
KEEL_API keel_status keel_grad_scaler_scale(keel_grad_scaler *s,
                                            const keel_tensor *loss,
                                            keel_tensor **out);

/**
 * unscale_(optimizer): divide every gradient of the optimizer's
 * parameters by the scale in place and find whether any is inf or NaN,
 * with the check_finite_and_unscale op, one launch per gradient, the flag
 * staying on the device (read once, by step or minimize). INVALID_STATE
 * when already unscaled since the last update, or after step().
 */
KEEL_API keel_status keel_grad_scaler_unscale(keel_grad_scaler *s,
                                              keel_optimizer *opt);

/**
 * step(optimizer): unscale_ unless done, then keel_optimizer_step() when
 * every gradient is finite; skipped otherwise. INVALID_STATE when step was
 * already called since the last update. With the scaler disabled it is
 * keel_optimizer_step().
 */
KEEL_API keel_status keel_grad_scaler_step(keel_grad_scaler *s,
                                           keel_optimizer *opt);

/** update(): with dynamic scaling, the scale follows the last step's
 *  result (Paddle's _update): found inf -> decr_count++, and at
 *  decr_every_n_nan_or_inf the scale *= decr_ratio; else incr_count++,
 *  and at incr_every_n_steps the scale *= incr_ratio. */
KEEL_API keel_status keel_grad_scaler_update(keel_grad_scaler *s);

/** minimize(optimizer, scaled_loss): step + update in one call. */
KEEL_API keel_status keel_grad_scaler_minimize(keel_grad_scaler *s,
                                               keel_optimizer *opt);

/** Whether the last step skipped the update (inf/NaN found). */
KEEL_API bool keel_grad_scaler_found_inf(const keel_grad_scaler *s);
KEEL_API bool keel_grad_scaler_is_enabled(const keel_grad_scaler *s);
KEEL_API bool keel_grad_scaler_is_dynamic(const keel_grad_scaler *s);
/** The current scale (1.0 when disabled, as Paddle's init_loss_scaling). */
KEEL_API double keel_grad_scaler_get_scale(const keel_grad_scaler *s);
KEEL_API int64_t keel_grad_scaler_incr_count(const keel_grad_scaler *s);
KEEL_API int64_t keel_grad_scaler_decr_count(const keel_grad_scaler *s);

/**
 * Paddle's state_dict(): adds "scale" (float32 [1]), "incr_ratio",
 * "decr_ratio" (float64 [1]), "incr_every_n_steps",
 * "decr_every_n_nan_or_inf", "incr_count", "decr_count" (int64 [1]) and
 * "use_dynamic_loss_scaling" (bool [1]) under prefix (NULL: none); nothing
 * when disabled, as Paddle returns {}.
 */
typedef struct keel_state_dict keel_state_dict;
KEEL_API keel_status keel_grad_scaler_state_get(const keel_grad_scaler *s,
                                                const char *prefix,
                                                keel_state_dict *sd);
/** load_state_dict(): every key must be present (INVALID_ARGUMENT naming
 *  the missing one, nothing changed); a disabled scaler ignores it. */
KEEL_API keel_status keel_grad_scaler_state_set(keel_grad_scaler *s,
                                                const char *prefix,
                                                const keel_state_dict *sd);

#ifdef __cplusplus
}
#endif

#endif /* KEEL_AMP_H */
