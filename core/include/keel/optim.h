/*
 * keel optim — optimizers and learning-rate schedulers with PaddlePaddle 3.x
 * semantics.
 *
 * This header has two sections. The learning-rate schedulers come first;
 * the optimizers (which read a scheduler's current value before each
 * update) will follow in their own section.
 *
 * ---- Learning-rate schedulers ---------------------------------------------
 *
 * A scheduler is an opaque keel_lr_scheduler made by one constructor per
 * kind. The constructors take Paddle's parameters, in Paddle's order and
 * under Paddle's names (paddle.optimizer.lr.<Name>); C has no default
 * arguments, so each parameter's Paddle default is written beside it and a
 * caller passes it explicitly. The formulas, and where they differ from
 * PyTorch's schedulers, are in docs/lr.md.
 *
 * Life cycle, as in Paddle (last_epoch = -1 at the start):
 *
 *   keel_lr_scheduler *s;
 *   keel_lr_step_decay_create(0.5, 30, 0.1, &s);  // last_epoch 0, lr 0.5
 *   for (epoch...) {
 *       train_one_epoch(keel_lr_scheduler_last_lr(s));
 *       keel_lr_scheduler_step(s);                 // last_epoch += 1
 *   }
 *   keel_lr_scheduler_free(s);
 *
 * A constructor performs the first step itself, so a new scheduler already
 * stands at last_epoch 0 with its first learning rate (Paddle calls step()
 * in LRScheduler.__init__). ReduceOnPlateau is the exception, exactly as in
 * Paddle: it starts at last_epoch 0 with lr = learning_rate and is stepped
 * only with a metric (keel_lr_scheduler_step_metric).
 *
 * Checkpoints: keel_lr_scheduler_state_get() returns the fields Paddle's
 * state_dict() holds, by the same names, as numbers ("last_epoch",
 * "last_lr", ...); keel_lr_scheduler_state_set() puts them back into a
 * scheduler built with the same arguments, which then continues exactly as
 * the saved one would have.
 *
 * Errors: every function returning keel_status leaves a message in
 * keel_last_error() when it fails. A bad constructor argument is
 * KEEL_STATUS_INVALID_ARGUMENT with a message that names the scheduler and
 * the parameter ("StepDecay: step_size must be a positive integer, got 0").
 * keel rejects every value Paddle 3.3.1 rejects, plus NaN in any floating
 * point parameter and NULL pointers. A failing call changes nothing.
 *
 * Thread safety: a scheduler is a plain value; use one from one thread at a
 * time. Different schedulers are independent.
 */
#ifndef KEEL_OPTIM_H
#define KEEL_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <keel/runtime.h>
#include <keel/tensor.h>
#include <keel/io.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ========================================================================
 * Learning-rate schedulers
 * ======================================================================== */

/** A learning-rate scheduler (any kind). */
typedef struct keel_lr_scheduler keel_lr_scheduler;

/* ---- constructors --------------------------------------------------------
 *
 * Each stores the new scheduler in *out (set to NULL on failure) and
 * returns OK, INVALID_ARGUMENT or OUT_OF_MEMORY. Free it with
 * keel_lr_scheduler_free().
 */

/**
 * StepDecay: lr = learning_rate * gamma^floor(epoch / step_size).
 *
 * learning_rate  initial rate, >= 0
 * step_size      epochs between decays, > 0
 * gamma          factor per decay, < 1 (Paddle default 0.1; gamma = 1 is
 *                rejected, as in Paddle)
 */
KEEL_API keel_status keel_lr_step_decay_create(double learning_rate,
                                               int64_t step_size, double gamma,
                                               keel_lr_scheduler **out);

/**
 * MultiStepDecay: lr = learning_rate * gamma^(number of milestones <= epoch).
 *
 * learning_rate   initial rate, >= 0
 * milestones      epochs at which the rate decays, strictly increasing;
 *                 copied. May be NULL when num_milestones is 0 (Paddle
 *                 accepts an empty list: the rate then never changes).
 * num_milestones  length of milestones
 * gamma           factor per milestone, < 1 (Paddle default 0.1)
 */
KEEL_API keel_status keel_lr_multi_step_decay_create(
    double learning_rate, const int64_t *milestones, size_t num_milestones,
    double gamma, keel_lr_scheduler **out);

/**
 * ExponentialDecay: lr = learning_rate * gamma^epoch.
 *
 * learning_rate  initial rate, >= 0
 * gamma          factor per epoch, 0 < gamma < 1 (no default in Paddle)
 */
KEEL_API keel_status keel_lr_exponential_decay_create(double learning_rate,
                                                      double gamma,
                                                      keel_lr_scheduler **out);

/**
 * CosineAnnealingDecay: cosine from learning_rate down to eta_min over T_max
 * epochs, then back up, periodically. Stepping one epoch at a time uses
 * Paddle's recursive form (each value derived from the previous one);
 * keel_lr_scheduler_step_to() uses the closed form (docs/lr.md).
 *
 * learning_rate  initial (and maximum) rate, >= 0
 * T_max          half period in epochs, > 0
 * eta_min        minimum rate (Paddle default 0)
 */
KEEL_API keel_status keel_lr_cosine_annealing_decay_create(
    double learning_rate, int64_t T_max, double eta_min,
    keel_lr_scheduler **out);

/**
 * PolynomialDecay:
 *   lr = (learning_rate - end_lr) * (1 - epoch / decay_steps)^power + end_lr
 * with epoch capped at decay_steps; with cycle, decay_steps is instead
 * stretched to the next multiple of itself >= epoch.
 *
 * learning_rate  initial rate, >= 0
 * decay_steps    epochs of one decay, > 0
 * end_lr         final rate (Paddle default 0.0001)
 * power          exponent, > 0 (Paddle default 1.0)
 * cycle          restart after decay_steps (Paddle default false)
 */
KEEL_API keel_status keel_lr_polynomial_decay_create(
    double learning_rate, int64_t decay_steps, double end_lr, double power,
    bool cycle, keel_lr_scheduler **out);

/**
 * LinearWarmup around a constant rate: start_lr rising linearly to end_lr
 * over warmup_steps epochs, then learning_rate for ever.
 *
 * learning_rate  rate after the warm-up (any value, as in Paddle)
 * warmup_steps   epochs of warm-up, > 0
 * start_lr       first rate, >= 0
 * end_lr         rate the warm-up approaches, > start_lr
 */
KEEL_API keel_status keel_lr_linear_warmup_create(double learning_rate,
                                                  int64_t warmup_steps,
                                                  double start_lr,
                                                  double end_lr,
                                                  keel_lr_scheduler **out);

/**
 * LinearWarmup around another scheduler: the same warm-up, then at epoch
 * e >= warmup_steps the wrapped scheduler is moved to epoch
 * e - warmup_steps (as keel_lr_scheduler_step_to() does; a cosine schedule
 * therefore uses its closed form) and its rate is the rate.
 *
 * Ownership: on success the warm-up owns `learning_rate`: it is freed with
 * the warm-up, and the caller must neither use nor free it afterwards. On
 * failure nothing changes and the caller still owns it.
 *
 * Rejected (INVALID_ARGUMENT): a ReduceOnPlateau (Paddle would feed it the
 * epoch number as its metric), a scheduler already owned by another
 * warm-up, and nesting deeper than KEEL_LR_WARMUP_MAX_DEPTH warm-ups (so
 * that the state fits a keel_lr_state).
 */
KEEL_API keel_status keel_lr_linear_warmup_wrap(
    keel_lr_scheduler *learning_rate, int64_t warmup_steps, double start_lr,
    double end_lr, keel_lr_scheduler **out);

/** Most LinearWarmup schedulers one chain of wrapped schedulers may hold. */
#define KEEL_LR_WARMUP_MAX_DEPTH 3

/**
 * OneCycleLR: rises from max_learning_rate / divide_factor to
 * max_learning_rate over the first phase_pct of total_steps, then anneals
 * down to end_learning_rate; with three_phase, first back down to the
 * initial rate over the same number of steps, then to end_learning_rate.
 * Epochs 0 .. total_steps are valid; stepping past total_steps fails with
 * INVALID_STATE (Paddle raises ValueError) and changes nothing. A phase of
 * zero length (e.g. total_steps 2 with phase_pct 0.5) fails with
 * INVALID_ARGUMENT at the step that enters it (Paddle raises
 * ZeroDivisionError there), at construction if that is epoch 0.
 *
 * max_learning_rate  peak rate, >= 0
 * total_steps        steps of the whole cycle, > 0
 * divide_factor      initial rate = max_learning_rate / divide_factor;
 *                    not 0, and the initial rate must be >= 0
 *                    (Paddle default 25.0)
 * end_learning_rate  final rate, >= 0 (Paddle default 0.0001)
 * phase_pct          share of the rising phase, 0 <= phase_pct <= 1, and
 *                    < 0.5 with three_phase (Paddle default 0.3)
 * anneal_strategy    "cos" or "linear", case-sensitive as in Paddle; NULL
 *                    means "cos" (Paddle default 'cos')
 * three_phase        use three phases (Paddle default false)
 */
KEEL_API keel_status keel_lr_one_cycle_create(double max_learning_rate,
                                              int64_t total_steps,
                                              double divide_factor,
                                              double end_learning_rate,
                                              double phase_pct,
                                              const char *anneal_strategy,
                                              bool three_phase,
                                              keel_lr_scheduler **out);

/**
 * ReduceOnPlateau: multiplies the rate by `factor` when the metric passed
 * to keel_lr_scheduler_step_metric() has not improved for more than
 * `patience` steps; then waits `cooldown` steps before counting again.
 *
 * learning_rate   initial rate (Paddle does not check its sign)
 * mode            "min" (lower is better) or "max"; case-insensitive;
 *                 NULL means "min" (Paddle default 'min')
 * factor          multiplier on a reduction, < 1 (Paddle default 0.1)
 * patience        bad steps tolerated (Paddle default 10)
 * threshold       least change that counts as an improvement
 *                 (Paddle default 1e-4)
 * threshold_mode  "rel" (relative to the best) or "abs"; case-insensitive;
 *                 NULL means "rel" (Paddle default 'rel')
 * cooldown        steps skipped after a reduction (Paddle default 0)
 * min_lr          floor of the rate (Paddle default 0)
 * epsilon         a reduction smaller than this is not applied
 *                 (Paddle default 1e-8)
 */
KEEL_API keel_status keel_lr_reduce_on_plateau_create(
    double learning_rate, const char *mode, double factor, int64_t patience,
    double threshold, const char *threshold_mode, int64_t cooldown,
    double min_lr, double epsilon, keel_lr_scheduler **out);

/* ---- use ----------------------------------------------------------------- */

/**
 * Advance by one epoch: last_epoch += 1 and the rate is recomputed
 * (Paddle's scheduler.step()). Returns OK, INVALID_ARGUMENT (NULL, or a
 * ReduceOnPlateau, which needs keel_lr_scheduler_step_metric()),
 * INVALID_STATE (OneCycleLR past total_steps) or INVALID_ARGUMENT (a
 * OneCycleLR phase of zero length). On failure nothing changes.
 */
KEEL_API keel_status keel_lr_scheduler_step(keel_lr_scheduler *s);

/**
 * Jump to `epoch` (>= 0; keel does not take Paddle's negative epochs):
 * last_epoch = epoch and the rate is recomputed for it (Paddle's
 * scheduler.step(epoch)). CosineAnnealingDecay uses its closed form here.
 * Returns as keel_lr_scheduler_step(), plus INVALID_ARGUMENT for a negative
 * epoch.
 */
KEEL_API keel_status keel_lr_scheduler_step_to(keel_lr_scheduler *s,
                                               int64_t epoch);

/**
 * Advance a ReduceOnPlateau by one epoch with this epoch's metric
 * (Paddle's scheduler.step(metrics)). Returns OK, or INVALID_ARGUMENT for
 * NULL or a scheduler of another kind.
 */
KEEL_API keel_status keel_lr_scheduler_step_metric(keel_lr_scheduler *s,
                                                   double metric);

/**
 * Paddle's `last_lr` attribute, which `scheduler()` also returns: the rate
 * the last step (or the constructor) set, i.e. the rate the next optimizer
 * step uses. This is what an optimizer with this scheduler reads. NaN for
 * NULL.
 */
KEEL_API double keel_lr_scheduler_last_lr(const keel_lr_scheduler *s);

/**
 * Paddle's `scheduler.get_lr()`: the rate the scheduler's formula gives for
 * the current last_epoch, computed now without changing anything (Paddle's
 * step() is last_epoch += 1 followed by last_lr = get_lr()). For every
 * closed-form schedule this equals keel_lr_scheduler_last_lr(). It differs
 * where Paddle's get_lr() is recursive: CosineAnnealingDecay derives the
 * rate from last_lr, so calling get_lr() after a step applies the epoch's
 * ratio once more, exactly as Paddle's get_lr() does. ReduceOnPlateau has
 * no formula (Paddle raises NotImplementedError): NaN, with a message in
 * keel_last_error(). NaN for NULL.
 *
 * Earlier versions of keel returned last_lr here; code that wants the rate
 * of the next optimizer step should call keel_lr_scheduler_last_lr().
 */
KEEL_API double keel_lr_scheduler_get_lr(const keel_lr_scheduler *s);

/** The current epoch (Paddle's last_epoch); -1 for NULL. */
KEEL_API int64_t keel_lr_scheduler_last_epoch(const keel_lr_scheduler *s);

/** Paddle's class name of the scheduler ("StepDecay", "LinearWarmup", ...);
 *  "" for NULL. */
KEEL_API const char *keel_lr_scheduler_name(const keel_lr_scheduler *s);

/** Free a scheduler and, for a LinearWarmup, the scheduler it wraps.
 *  NULL is a no-op. */
KEEL_API void keel_lr_scheduler_free(keel_lr_scheduler *s);

/* ---- state for checkpoints ---------------------------------------------- */

/** Longest state field name, including the terminating NUL. */
#define KEEL_LR_STATE_NAME_MAX 64
/** Most fields one state holds. */
#define KEEL_LR_STATE_MAX_FIELDS 16

/** One named number of a scheduler's state. */
typedef struct keel_lr_state_field {
    char name[KEEL_LR_STATE_NAME_MAX];
    double value;
} keel_lr_state_field;

/**
 * A scheduler's state: Paddle's state_dict() as named numbers.
 *
 *   every kind but ReduceOnPlateau:  last_epoch, last_lr
 *   LinearWarmup around a scheduler: also the wrapped scheduler's fields,
 *                                    each prefixed "LinearWarmup_LR."
 *                                    (Paddle nests them under that key)
 *   ReduceOnPlateau:                 cooldown_counter, best, num_bad_epochs,
 *                                    last_epoch, last_lr, and has_best
 *                                    (0 while no metric has been seen:
 *                                    Paddle's best is None then)
 *
 * Integer fields hold integral values. A plain struct: copy it, or write
 * the fields to a file by name and read them back into one.
 */
typedef struct keel_lr_state {
    int32_t count;
    keel_lr_state_field fields[KEEL_LR_STATE_MAX_FIELDS];
} keel_lr_state;

/**
 * Fill *state with the scheduler's state (overwriting all of it). Returns
 * OK or INVALID_ARGUMENT (NULL).
 */
KEEL_API keel_status keel_lr_scheduler_state_get(const keel_lr_scheduler *s,
                                                 keel_lr_state *state);

/**
 * Restore a state saved from a scheduler built with the same arguments.
 * Every field the kind needs must be present (a missing one is
 * INVALID_ARGUMENT naming it, like Paddle's "Can't find [ key ]"); fields
 * it does not know are ignored with a warning in the log, as Paddle warns.
 * Values are checked first (integral counters, last_epoch >= -1, a finite
 * last_lr, has_best 0 or 1), and nothing changes unless all pass.
 */
KEEL_API keel_status keel_lr_scheduler_state_set(keel_lr_scheduler *s,
                                                 const keel_lr_state *state);

/**
 * Look a field up by name. Returns OK and its value in *value, NOT_FOUND,
 * or INVALID_ARGUMENT (NULL).
 */
KEEL_API keel_status keel_lr_state_get_field(const keel_lr_state *state,
                                             const char *name, double *value);

/**
 * Set a field, replacing one of the same name or appending. Returns OK, or
 * INVALID_ARGUMENT (NULL, a name of KEEL_LR_STATE_NAME_MAX bytes or more,
 * or a full state).
 */
KEEL_API keel_status keel_lr_state_set_field(keel_lr_state *state,
                                             const char *name, double value);


/* ========================================================================
 * Optimizers
 * ========================================================================
 *
 * SGD, Momentum, Adam and AdamW with Paddle 3.x semantics (docs/optim.md).
 * An optimizer is made over a list of named parameters and updates them in
 * place with the fused ops sgd_update, momentum_update, adam_update and
 * adamw_update, run under no-grad on each parameter's device:
 *
 *   keel_optimizer_options o = keel_optimizer_default_options(KEEL_OPTIM_ADAM);
 *   o.lr_scheduler = sched;               // or o.learning_rate = 1e-3
 *   keel_optimizer_create(KEEL_OPTIM_ADAM, params, n, &o, &opt);
 *   for (...) {
 *       keel_backward(loss, NULL, false);
 *       keel_optimizer_step(opt);          // reads the scheduler's lr
 *       keel_optimizer_clear_grad(opt);
 *       keel_lr_scheduler_step(sched);     // the caller steps it
 *   }
 *   keel_optimizer_free(opt);
 */

/** Optimizer kinds. */
typedef enum keel_optimizer_kind {
    KEEL_OPTIM_SGD = 0,
    KEEL_OPTIM_MOMENTUM = 1,
    KEEL_OPTIM_ADAM = 2,
    KEEL_OPTIM_ADAMW = 3
} keel_optimizer_kind;

/** An optimizer (any kind). */
typedef struct keel_optimizer keel_optimizer;

/** One parameter: its name (used for state dict keys and the decay
 *  filter) and the tensor, which must be a floating-point leaf. */
typedef struct keel_named_param {
    const char *name;
    keel_tensor *param;
} keel_named_param;

/** Gradient clipping kinds (paddle.nn.ClipGradBy*). */
typedef enum keel_grad_clip_kind {
    KEEL_GRAD_CLIP_NONE = 0,
    KEEL_GRAD_CLIP_GLOBAL_NORM = 1, /* g *= c / max(global_norm, c) */
    KEEL_GRAD_CLIP_NORM = 2,        /* g *= c / norm(g) when norm(g) > c */
    KEEL_GRAD_CLIP_VALUE = 3        /* g = clip(g, min, max) */
} keel_grad_clip_kind;

/** A gradient clip. clip_norm for the norm kinds (> 0); max and min for
 *  VALUE (min <= max; Paddle's default min is -max). */
typedef struct keel_grad_clip {
    keel_grad_clip_kind kind;
    double clip_norm;
    double max;
    double min;
} keel_grad_clip;

/** AdamW's apply_decay_param_fun: return true to decay the parameter of
 *  this name. */
typedef bool (*keel_decay_param_fn)(const char *name, void *user);

/**
 * Optimizer options. Start from keel_optimizer_default_options(kind), which
 * holds Paddle's defaults, and change what you need.
 *
 * learning_rate     used when lr_scheduler is NULL; finite, >= 0
 *                   (Paddle default 0.001)
 * lr_scheduler      borrowed (not owned): its last_lr is read at every step;
 *                   it must outlive the optimizer
 * weight_decay      SGD/Momentum/Adam: L2 regularization coefficient,
 *                   coupled (added to the gradient), default 0;
 *                   AdamW: decoupled decay coefficient, default 0.01
 * grad_clip         applied to all parameters with a gradient before the
 *                   update (default NONE)
 * momentum          Momentum's mu, default 0.9
 * use_nesterov      Momentum only, default false
 * beta1, beta2      Adam/AdamW, in [0, 1), defaults 0.9 and 0.999
 * epsilon           Adam/AdamW, > 0, default 1e-8
 * apply_decay_param_fun, decay_user
 *                   AdamW only: NULL decays every parameter
 */
typedef struct keel_optimizer_options {
    double learning_rate;
    keel_lr_scheduler *lr_scheduler;
    double weight_decay;
    keel_grad_clip grad_clip;
    double momentum;
    bool use_nesterov;
    double beta1;
    double beta2;
    double epsilon;
    keel_decay_param_fn apply_decay_param_fun;
    void *decay_user;
} keel_optimizer_options;

/** Paddle's defaults for `kind`. */
KEEL_API keel_optimizer_options keel_optimizer_default_options(
    keel_optimizer_kind kind);

/**
 * Create an optimizer over params[0..num_params). Names are copied and
 * must be unique and non-empty; the tensors are referenced (kept alive by
 * the optimizer). options NULL means the defaults. Returns OK,
 * INVALID_ARGUMENT (a message naming the bad option) or OUT_OF_MEMORY;
 * *out is NULL on failure.
 */
KEEL_API keel_status keel_optimizer_create(keel_optimizer_kind kind,
                                           const keel_named_param *params,
                                           size_t num_params,
                                           const keel_optimizer_options *options,
                                           keel_optimizer **out);

/** A layer (keel/nn.h); declared here so that optimizers can take one. */
typedef struct keel_layer keel_layer;

/**
 * Create an optimizer over every parameter of `layer` (Paddle's
 * `parameters=model.parameters()`): the parameters of keel_layer_parameters(),
 * in its order and under its dotted names ("0.weight", "fc.bias", ...),
 * which then key the optimizer's state dict and AdamW's decay filter. The
 * optimizer references the tensors, not the layer: parameters registered
 * after this call are not updated. Returns as keel_optimizer_create(), plus
 * INVALID_ARGUMENT for a NULL layer or one without parameters.
 */
KEEL_API keel_status keel_optimizer_create_from_layer(
    keel_optimizer_kind kind, const keel_layer *layer,
    const keel_optimizer_options *options, keel_optimizer **out);

/** Free an optimizer (NULL is a no-op). The scheduler is not freed. */
KEEL_API void keel_optimizer_free(keel_optimizer *opt);

/**
 * One update of every parameter that has a gradient (others are skipped,
 * and their accumulators do not advance): clip the gradients, then run the
 * fused update op under no-grad. L2 decay, clip by norm and clip by value
 * work on copies; the global-norm clip scales the stored gradients in
 * place, as Paddle 3.3's ClipGradByGlobalNorm does (a 0-d gradient is
 * left alone and clipped in a copy). Returns OK or the first error.
 */
KEEL_API keel_status keel_optimizer_step(keel_optimizer *opt);

/** Paddle's optimizer.clear_grad(set_to_zero=True): zero every existing
 *  gradient. */
KEEL_API keel_status keel_optimizer_clear_grad(keel_optimizer *opt);

/** The learning rate the next step will use. NaN for NULL. */
KEEL_API double keel_optimizer_get_lr(const keel_optimizer *opt);

/**
 * Paddle's parameter groups (parameters=[{'params': [...],
 * 'learning_rate': s, 'weight_decay': w}, ...]): the parameter `name`
 * updates with lr_scale times the optimizer's learning rate (Paddle's
 * per-parameter learning-rate ratio; finite, >= 0; 1 by default) and
 * with weight_decay instead of the optimizer's (SGD/Momentum/Adam: the
 * L2 coefficient; AdamW: the decoupled coefficient, still subject to
 * apply_decay_param_fun); NaN keeps the optimizer's. Returns OK or
 * INVALID_ARGUMENT (no such parameter, a bad value).
 */
KEEL_API keel_status keel_optimizer_set_param_options(keel_optimizer *opt,
                                                      const char *name,
                                                      double lr_scale,
                                                      double weight_decay);

/** Set a float learning rate (INVALID_STATE when a scheduler is used, as
 *  Paddle's set_lr raises). */
KEEL_API keel_status keel_optimizer_set_lr(keel_optimizer *opt, double lr);

/**
 * Paddle's multi_precision: a float16 or bfloat16 parameter is updated
 * through a float32 master copy (state dict key <name>_fp32_master_0) with
 * float32 accumulators, and the result rounded back into the parameter.
 * Off by default; keel_amp_decorate() at O2 turns it on (master_weight).
 * INVALID_STATE once any parameter has been updated.
 */
KEEL_API keel_status keel_optimizer_set_multi_precision(keel_optimizer *opt,
                                                        bool on);
KEEL_API bool keel_optimizer_multi_precision(const keel_optimizer *opt);

/** Number of completed steps. -1 for NULL. */
KEEL_API int64_t keel_optimizer_step_count(const keel_optimizer *opt);

/**
 * Add the optimizer's state to sd (tensors are copies, so the state dict
 * is a snapshot). Names, as in Paddle's optimizer.state_dict():
 *   <name>_velocity_0                      Momentum
 *   <name>_moment1_0, <name>_moment2_0     Adam/AdamW
 *   <name>_beta1_pow_acc_0, <name>_beta2_pow_acc_0   Adam/AdamW, [1] of the
 *                                          parameter's dtype
 *   global_step                            int64 [1], completed steps
 *   LR_Scheduler.<field>                   float64 [1] per scheduler field,
 *                                          when a scheduler is attached
 * Parameters not yet updated have no accumulators. Returns OK,
 * INVALID_ARGUMENT or OUT_OF_MEMORY.
 */
KEEL_API keel_status keel_optimizer_state_get(const keel_optimizer *opt,
                                              keel_state_dict *sd);

/**
 * Restore a state saved by keel_optimizer_state_get() from an optimizer of
 * the same kind over parameters of the same names and shapes. Accumulators
 * absent from sd are left unset (created at the parameter's next update);
 * the attached scheduler's state is restored too when present. Values are
 * copied onto each parameter's device and cast to its dtype. Everything is
 * read and checked (shapes, beta powers in [0, 1), an integral
 * global_step) before anything changes. Returns OK or INVALID_ARGUMENT.
 */
KEEL_API keel_status keel_optimizer_state_set(keel_optimizer *opt,
                                              const keel_state_dict *sd);

#ifdef __cplusplus
}
#endif

#endif /* KEEL_OPTIM_H */
