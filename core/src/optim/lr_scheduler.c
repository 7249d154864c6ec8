/*
 * Learning-rate schedulers with PaddlePaddle 3.3.1 semantics
 * (paddle.optimizer.lr); see keel/optim.h and docs/lr.md.
 *
 * Every kind computes its rate from (epoch, previous rate) in one pure
 * function, lr_eval(); stepping is "evaluate, then commit", so a failing
 * step leaves the scheduler as it was. The arithmetic follows Paddle's
 * Python expressions operation by operation (same order, same libm calls),
 * so that both agree to the last few bits; the parity suite
 * (core/tests/parity) checks it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <keel/optim.h>

#include "runtime/runtime_internal.h"

enum lr_kind {
    LR_STEP,
    LR_MULTI_STEP,
    LR_EXPONENTIAL,
    LR_COSINE,
    LR_POLYNOMIAL,
    LR_WARMUP,
    LR_ONE_CYCLE,
    LR_PLATEAU,
};

static const char *const kind_names[] = {
    [LR_STEP] = "StepDecay",
    [LR_MULTI_STEP] = "MultiStepDecay",
    [LR_EXPONENTIAL] = "ExponentialDecay",
    [LR_COSINE] = "CosineAnnealingDecay",
    [LR_POLYNOMIAL] = "PolynomialDecay",
    [LR_WARMUP] = "LinearWarmup",
    [LR_ONE_CYCLE] = "OneCycleLR",
    [LR_PLATEAU] = "ReduceOnPlateau",
};

/* Prefix of a wrapped scheduler's state fields (Paddle's nested key). */
#define WARMUP_PREFIX "LinearWarmup_LR."

struct keel_lr_scheduler {
    enum lr_kind kind;
    int64_t last_epoch;
    double last_lr;
    double base_lr;
    /* Owned by a LinearWarmup. */
    bool wrapped;
    union {
        struct {
            int64_t step_size;
            double gamma;
        } step;
        struct {
            int64_t *milestones;
            size_t count;
            double gamma;
        } multi;
        struct {
            double gamma;
        } exp;
        struct {
            int64_t t_max;
            double eta_min;
        } cos;
        struct {
            int64_t decay_steps;
            double end_lr;
            double power;
            bool cycle;
        } poly;
        struct {
            keel_lr_scheduler *inner; /* NULL: constant `lr` */
            double lr;
            int64_t warmup_steps;
            double start_lr;
            double end_lr;
            int depth; /* warm-ups in this chain, this one included */
        } warm;
        struct {
            int64_t total_steps;
            int phases;
            bool linear;
            /* Phase i runs from step_at[i] to step_at[i + 1] (fractional
             * step numbers, as Paddle computes them), over span[i] steps,
             * from rate_at[i] to rate_at[i + 1]. */
            double step_at[4];
            double span[3];
            double rate_at[4];
        } cycle;
        struct {
            bool max_mode;
            bool abs_threshold;
            double factor;
            int64_t patience;
            double threshold;
            int64_t cooldown;
            double min_lr;
            double epsilon;
            int64_t cooldown_counter;
            int64_t num_bad_epochs;
            bool has_best;
            double best;
        } plateau;
    } u;
};

/* ---- argument checks ----------------------------------------------------- */

static keel_status bad(const char *sched, const char *fmt, ...)
    KEEL_PRINTF(2, 3);

static keel_status bad(const char *sched, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: %s", sched, msg);
}

/* NaN is rejected everywhere (Paddle lets most of them through). */
static keel_status check_number(const char *sched, const char *param,
                                double v)
{
    if (isnan(v))
        return bad(sched, "%s must be a number, got NaN", param);
    return KEEL_STATUS_OK;
}

/* Paddle's LRScheduler.__init__: "Invalid learning rate" below 0. */
static keel_status check_base_lr(const char *sched, const char *param,
                                 double v)
{
    if (isnan(v) || v < 0)
        return bad(sched, "%s must be >= 0, got %g", param, v);
    return KEEL_STATUS_OK;
}

static keel_status check_out(const char *sched, keel_lr_scheduler **out)
{
    if (!out)
        return bad(sched, "out is NULL");
    *out = NULL;
    return KEEL_STATUS_OK;
}

static keel_lr_scheduler *alloc_sched(enum lr_kind kind, double base_lr)
{
    keel_lr_scheduler *s = calloc(1, sizeof(*s));

    if (!s) {
        keel__error(KEEL_STATUS_OUT_OF_MEMORY, "%s: out of host memory",
                    kind_names[kind]);
        return NULL;
    }
    s->kind = kind;
    s->base_lr = base_lr;
    s->last_lr = base_lr;
    s->last_epoch = -1;
    return s;
}

/* ---- formulas ------------------------------------------------------------ */

/* Python's a // b for b > 0. */
static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;

    if ((a % b != 0) && (a < 0))
        q--;
    return q;
}

static double step_lr(const keel_lr_scheduler *s, int64_t epoch)
{
    int64_t i = floor_div(epoch, s->u.step.step_size);

    return s->base_lr * pow(s->u.step.gamma, (double)i);
}

static double multi_step_lr(const keel_lr_scheduler *s, int64_t epoch)
{
    size_t i;

    for (i = 0; i < s->u.multi.count; i++)
        if (epoch < s->u.multi.milestones[i])
            break;
    return s->base_lr * pow(s->u.multi.gamma, (double)i);
}

static double cosine_closed_lr(const keel_lr_scheduler *s, int64_t epoch)
{
    double eta = s->u.cos.eta_min;
    double t = (double)s->u.cos.t_max;

    return eta + (s->base_lr - eta) * (1 + cos(M_PI * (double)epoch / t)) / 2;
}

/*
 * Paddle's recursive form: the rate at `epoch` from the rate one epoch
 * earlier. At the epochs where the ratio's denominator vanishes (one past
 * each minimum) it adds the first step of the rise instead.
 */
static double cosine_step_lr(const keel_lr_scheduler *s, int64_t epoch)
{
    double eta = s->u.cos.eta_min;
    int64_t t_max = s->u.cos.t_max;
    double t = (double)t_max;

    if (epoch == 0)
        return s->base_lr;
    if ((epoch - 1 - t_max) % (2 * t_max) == 0)
        return s->last_lr +
               (s->base_lr - eta) * (1 - cos(M_PI / t)) / 2;
    return (1 + cos(M_PI * (double)epoch / t)) /
               (1 + cos(M_PI * (double)(epoch - 1) / t)) *
               (s->last_lr - eta) +
           eta;
}

static double polynomial_lr(const keel_lr_scheduler *s, int64_t epoch)
{
    int64_t steps = s->u.poly.decay_steps;
    int64_t e = epoch;

    if (s->u.poly.cycle) {
        double div = ceil((double)epoch / (double)steps);

        if (epoch == 0)
            div = 1;
        steps = steps * (int64_t)div;
    } else if (e > steps) {
        e = steps;
    }
    return (s->base_lr - s->u.poly.end_lr) *
               pow(1 - (double)e / (double)steps, s->u.poly.power) +
           s->u.poly.end_lr;
}

static keel_status one_cycle_lr(const keel_lr_scheduler *s, int64_t epoch,
                                double *lr)
{
    const char *name = kind_names[LR_ONE_CYCLE];
    int last = s->u.cycle.phases - 1;
    double at = (double)epoch;
    double pct, from, to;
    int i;

    if (epoch > s->u.cycle.total_steps)
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "%s: tried to step to epoch %lld, past "
                           "total_steps %lld",
                           name, (long long)epoch,
                           (long long)s->u.cycle.total_steps);
    for (i = 0; i < last; i++)
        if (at <= s->u.cycle.step_at[i + 1])
            break;
    if (s->u.cycle.span[i] == 0)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: phase %d has zero length at epoch %lld "
                           "(total_steps %lld is too small for this "
                           "phase_pct)",
                           name, i + 1, (long long)epoch,
                           (long long)s->u.cycle.total_steps);
    pct = (at - s->u.cycle.step_at[i]) / s->u.cycle.span[i];
    from = s->u.cycle.rate_at[i];
    to = s->u.cycle.rate_at[i + 1];
    if (s->u.cycle.linear)
        *lr = (to - from) * pct + from;
    else
        *lr = to + (from - to) / 2.0 * (cos(M_PI * pct) + 1);
    return KEEL_STATUS_OK;
}

/*
 * The rate at `epoch`, without changing anything. `jump` is Paddle's
 * step(epoch) (closed form for the cosine schedule); otherwise `epoch` is
 * last_epoch + 1.
 */
static keel_status lr_eval(const keel_lr_scheduler *s, int64_t epoch,
                           bool jump, double *lr)
{
    switch (s->kind) {
    case LR_STEP:
        *lr = step_lr(s, epoch);
        return KEEL_STATUS_OK;
    case LR_MULTI_STEP:
        *lr = multi_step_lr(s, epoch);
        return KEEL_STATUS_OK;
    case LR_EXPONENTIAL:
        *lr = s->base_lr * pow(s->u.exp.gamma, (double)epoch);
        return KEEL_STATUS_OK;
    case LR_COSINE:
        *lr = jump ? cosine_closed_lr(s, epoch) : cosine_step_lr(s, epoch);
        return KEEL_STATUS_OK;
    case LR_POLYNOMIAL:
        *lr = polynomial_lr(s, epoch);
        return KEEL_STATUS_OK;
    case LR_WARMUP:
        if (epoch < s->u.warm.warmup_steps) {
            *lr = (s->u.warm.end_lr - s->u.warm.start_lr) * (double)epoch /
                      (double)s->u.warm.warmup_steps +
                  s->u.warm.start_lr;
            return KEEL_STATUS_OK;
        }
        if (!s->u.warm.inner) {
            *lr = s->u.warm.lr;
            return KEEL_STATUS_OK;
        }
        return lr_eval(s->u.warm.inner, epoch - s->u.warm.warmup_steps, true,
                       lr);
    case LR_ONE_CYCLE:
        return one_cycle_lr(s, epoch, lr);
    case LR_PLATEAU:
        break;
    }
    return keel__error(KEEL_STATUS_INTERNAL, "%s: no epoch formula",
                       kind_names[s->kind]);
}

/* Make `epoch` and `lr` current; a warm-up past its end moves the
 * scheduler it wraps too (the rate is the wrapped one's). */
static void lr_commit(keel_lr_scheduler *s, int64_t epoch, double lr)
{
    s->last_epoch = epoch;
    s->last_lr = lr;
    if (s->kind == LR_WARMUP && s->u.warm.inner &&
        epoch >= s->u.warm.warmup_steps)
        lr_commit(s->u.warm.inner, epoch - s->u.warm.warmup_steps, lr);
}

static keel_status lr_advance(keel_lr_scheduler *s, int64_t epoch, bool jump)
{
    keel_status st;
    double lr;

    st = lr_eval(s, epoch, jump, &lr);
    if (st == KEEL_STATUS_OK)
        lr_commit(s, epoch, lr);
    return st;
}

/* The constructor's first step (Paddle's __init__ calls step()). */
static keel_status finish(keel_lr_scheduler *s, keel_lr_scheduler **out)
{
    keel_status st = lr_advance(s, 0, false);

    if (st != KEEL_STATUS_OK) {
        keel_lr_scheduler_free(s);
        return st;
    }
    *out = s;
    return KEEL_STATUS_OK;
}

/* ---- constructors -------------------------------------------------------- */

keel_status keel_lr_step_decay_create(double learning_rate, int64_t step_size,
                                      double gamma, keel_lr_scheduler **out)
{
    const char *n = kind_names[LR_STEP];
    keel_lr_scheduler *s;
    keel_status st;

    if ((st = check_out(n, out)) || (st = check_base_lr(n, "learning_rate",
                                                         learning_rate)))
        return st;
    if (step_size <= 0)
        return bad(n, "step_size must be a positive integer, got %lld",
                   (long long)step_size);
    if (isnan(gamma) || gamma >= 1.0)
        return bad(n, "gamma must be < 1.0, got %g", gamma);
    if (!(s = alloc_sched(LR_STEP, learning_rate)))
        return KEEL_STATUS_OUT_OF_MEMORY;
    s->u.step.step_size = step_size;
    s->u.step.gamma = gamma;
    return finish(s, out);
}

keel_status keel_lr_multi_step_decay_create(double learning_rate,
                                            const int64_t *milestones,
                                            size_t num_milestones,
                                            double gamma,
                                            keel_lr_scheduler **out)
{
    const char *n = kind_names[LR_MULTI_STEP];
    keel_lr_scheduler *s;
    keel_status st;
    size_t i;

    if ((st = check_out(n, out)) || (st = check_base_lr(n, "learning_rate",
                                                         learning_rate)))
        return st;
    if (num_milestones && !milestones)
        return bad(n, "milestones is NULL but num_milestones is %zu",
                   num_milestones);
    for (i = 1; i < num_milestones; i++)
        if (milestones[i - 1] >= milestones[i])
            return bad(n, "milestones must be strictly increasing, but "
                       "milestones[%zu] = %lld is followed by %lld",
                       i - 1, (long long)milestones[i - 1],
                       (long long)milestones[i]);
    if (isnan(gamma) || gamma >= 1.0)
        return bad(n, "gamma must be < 1.0, got %g", gamma);
    if (!(s = alloc_sched(LR_MULTI_STEP, learning_rate)))
        return KEEL_STATUS_OUT_OF_MEMORY;
    if (num_milestones) {
        s->u.multi.milestones = malloc(num_milestones * sizeof(int64_t));
        if (!s->u.multi.milestones) {
            free(s);
            return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                               "%s: out of host memory for %zu milestones",
                               n, num_milestones);
        }
        memcpy(s->u.multi.milestones, milestones,
               num_milestones * sizeof(int64_t));
    }
    s->u.multi.count = num_milestones;
    s->u.multi.gamma = gamma;
    return finish(s, out);
}

keel_status keel_lr_exponential_decay_create(double learning_rate,
                                             double gamma,
                                             keel_lr_scheduler **out)
{
    const char *n = kind_names[LR_EXPONENTIAL];
    keel_lr_scheduler *s;
    keel_status st;

    if ((st = check_out(n, out)) || (st = check_base_lr(n, "learning_rate",
                                                         learning_rate)))
        return st;
    if (!(gamma > 0.0 && gamma < 1.0))
        return bad(n, "gamma must be in (0.0, 1.0), got %g", gamma);
    if (!(s = alloc_sched(LR_EXPONENTIAL, learning_rate)))
        return KEEL_STATUS_OUT_OF_MEMORY;
    s->u.exp.gamma = gamma;
    return finish(s, out);
}

keel_status keel_lr_cosine_annealing_decay_create(double learning_rate,
                                                  int64_t T_max,
                                                  double eta_min,
                                                  keel_lr_scheduler **out)
{
    const char *n = kind_names[LR_COSINE];
    keel_lr_scheduler *s;
    keel_status st;

    if ((st = check_out(n, out)) ||
        (st = check_base_lr(n, "learning_rate", learning_rate)) ||
        (st = check_number(n, "eta_min", eta_min)))
        return st;
    if (T_max <= 0)
        return bad(n, "T_max must be a positive integer, got %lld",
                   (long long)T_max);
    if (!(s = alloc_sched(LR_COSINE, learning_rate)))
        return KEEL_STATUS_OUT_OF_MEMORY;
    s->u.cos.t_max = T_max;
    s->u.cos.eta_min = eta_min;
    return finish(s, out);
}

keel_status keel_lr_polynomial_decay_create(double learning_rate,
                                            int64_t decay_steps, double end_lr,
                                            double power, bool cycle,
                                            keel_lr_scheduler **out)
{
    const char *n = kind_names[LR_POLYNOMIAL];
    keel_lr_scheduler *s;
    keel_status st;

    if ((st = check_out(n, out)) ||
        (st = check_base_lr(n, "learning_rate", learning_rate)) ||
        (st = check_number(n, "end_lr", end_lr)))
        return st;
    if (decay_steps <= 0)
        return bad(n, "decay_steps must be a positive integer, got %lld",
                   (long long)decay_steps);
    if (!(power > 0.0))
        return bad(n, "power must be > 0.0, got %g", power);
    if (!(s = alloc_sched(LR_POLYNOMIAL, learning_rate)))
        return KEEL_STATUS_OUT_OF_MEMORY;
    s->u.poly.decay_steps = decay_steps;
    s->u.poly.end_lr = end_lr;
    s->u.poly.power = power;
    s->u.poly.cycle = cycle;
    return finish(s, out);
}

static keel_status check_warmup(int64_t warmup_steps, double start_lr,
                                double end_lr)
{
    const char *n = kind_names[LR_WARMUP];
    keel_status st;

    if (warmup_steps <= 0)
        return bad(n, "warmup_steps must be a positive integer, got %lld",
                   (long long)warmup_steps);
    if ((st = check_base_lr(n, "start_lr", start_lr)))
        return st;
    if (!(end_lr > start_lr))
        return bad(n, "end_lr %g must be greater than start_lr %g", end_lr,
                   start_lr);
    return KEEL_STATUS_OK;
}

static keel_status make_warmup(keel_lr_scheduler *inner, double learning_rate,
                               int64_t warmup_steps, double start_lr,
                               double end_lr, keel_lr_scheduler **out)
{
    keel_lr_scheduler *s = alloc_sched(LR_WARMUP, start_lr);

    if (!s)
        return KEEL_STATUS_OUT_OF_MEMORY;
    s->u.warm.inner = inner;
    s->u.warm.lr = learning_rate;
    s->u.warm.warmup_steps = warmup_steps;
    s->u.warm.start_lr = start_lr;
    s->u.warm.end_lr = end_lr;
    s->u.warm.depth = 1;
    if (inner && inner->kind == LR_WARMUP)
        s->u.warm.depth += inner->u.warm.depth;
    /* Epoch 0 is inside the warm-up (warmup_steps > 0): cannot fail, and
     * does not touch the wrapped scheduler. */
    s->last_epoch = 0;
    s->last_lr = start_lr;
    if (inner)
        inner->wrapped = true;
    *out = s;
    return KEEL_STATUS_OK;
}

keel_status keel_lr_linear_warmup_create(double learning_rate,
                                         int64_t warmup_steps, double start_lr,
                                         double end_lr,
                                         keel_lr_scheduler **out)
{
    const char *n = kind_names[LR_WARMUP];
    keel_status st;

    if ((st = check_out(n, out)) ||
        (st = check_number(n, "learning_rate", learning_rate)) ||
        (st = check_warmup(warmup_steps, start_lr, end_lr)))
        return st;
    return make_warmup(NULL, learning_rate, warmup_steps, start_lr, end_lr,
                       out);
}

keel_status keel_lr_linear_warmup_wrap(keel_lr_scheduler *learning_rate,
                                       int64_t warmup_steps, double start_lr,
                                       double end_lr, keel_lr_scheduler **out)
{
    const char *n = kind_names[LR_WARMUP];
    keel_lr_scheduler *inner = learning_rate;
    keel_status st;

    if ((st = check_out(n, out)))
        return st;
    if (!inner)
        return bad(n, "learning_rate (the scheduler to wrap) is NULL");
    if (inner->kind == LR_PLATEAU)
        return bad(n, "learning_rate cannot be a ReduceOnPlateau: it steps "
                   "with a metric, not an epoch");
    if (inner->wrapped)
        return bad(n, "learning_rate (a %s) is already wrapped by another "
                   "LinearWarmup", kind_names[inner->kind]);
    if (inner->kind == LR_WARMUP &&
        inner->u.warm.depth >= KEEL_LR_WARMUP_MAX_DEPTH)
        return bad(n, "learning_rate already nests %d LinearWarmup "
                   "schedulers; at most %d fit one state",
                   inner->u.warm.depth, KEEL_LR_WARMUP_MAX_DEPTH);
    if ((st = check_warmup(warmup_steps, start_lr, end_lr)))
        return st;
    return make_warmup(inner, 0.0, warmup_steps, start_lr, end_lr, out);
}

keel_status keel_lr_one_cycle_create(double max_learning_rate,
                                     int64_t total_steps, double divide_factor,
                                     double end_learning_rate,
                                     double phase_pct,
                                     const char *anneal_strategy,
                                     bool three_phase,
                                     keel_lr_scheduler **out)
{
    const char *n = kind_names[LR_ONE_CYCLE];
    double initial, t = (double)total_steps;
    keel_lr_scheduler *s;
    bool linear = false;
    keel_status st;

    if ((st = check_out(n, out)) ||
        (st = check_base_lr(n, "max_learning_rate", max_learning_rate)) ||
        (st = check_base_lr(n, "end_learning_rate", end_learning_rate)))
        return st;
    if (total_steps <= 0)
        return bad(n, "total_steps must be a positive integer, got %lld",
                   (long long)total_steps);
    if (isnan(phase_pct) || phase_pct < 0 || phase_pct > 1)
        return bad(n, "phase_pct must be between 0 and 1, got %g",
                   phase_pct);
    if (isnan(divide_factor) || divide_factor == 0)
        return bad(n, "divide_factor must be a non-zero number, got %g",
                   divide_factor);
    if (three_phase && phase_pct >= 0.5)
        return bad(n, "phase_pct must be < 0.5 when three_phase is true, "
                   "got %g", phase_pct);
    if (anneal_strategy && !strcmp(anneal_strategy, "linear"))
        linear = true;
    else if (anneal_strategy && strcmp(anneal_strategy, "cos"))
        return bad(n, "anneal_strategy must be 'cos' or 'linear', got '%s'",
                   anneal_strategy);
    initial = max_learning_rate / divide_factor;
    if (initial < 0)
        return bad(n, "the initial rate max_learning_rate / divide_factor "
                   "= %g / %g must be >= 0", max_learning_rate,
                   divide_factor);
    if (!(s = alloc_sched(LR_ONE_CYCLE, initial)))
        return KEEL_STATUS_OUT_OF_MEMORY;
    s->u.cycle.total_steps = total_steps;
    s->u.cycle.linear = linear;
    s->u.cycle.step_at[0] = 0;
    s->u.cycle.step_at[1] = phase_pct * t - 1;
    s->u.cycle.rate_at[0] = initial;
    s->u.cycle.rate_at[1] = max_learning_rate;
    if (three_phase) {
        s->u.cycle.phases = 3;
        s->u.cycle.step_at[2] = 2 * phase_pct * t - 2;
        s->u.cycle.step_at[3] = t - 1;
        s->u.cycle.rate_at[2] = initial;
        s->u.cycle.rate_at[3] = end_learning_rate;
    } else {
        s->u.cycle.phases = 2;
        s->u.cycle.step_at[2] = t - 1;
        s->u.cycle.rate_at[2] = end_learning_rate;
    }
    for (int i = 0; i < s->u.cycle.phases; i++)
        s->u.cycle.span[i] = s->u.cycle.step_at[i + 1] - s->u.cycle.step_at[i];
    return finish(s, out);
}

/* "min"/"max", "rel"/"abs": Paddle lower-cases them first. */
static keel_status parse_choice(const char *n, const char *param,
                                const char *v, const char *a, const char *b,
                                bool *is_b)
{
    if (!v || !strcasecmp(v, a)) {
        *is_b = false;
        return KEEL_STATUS_OK;
    }
    if (!strcasecmp(v, b)) {
        *is_b = true;
        return KEEL_STATUS_OK;
    }
    return bad(n, "%s must be '%s' or '%s', got '%s'", param, a, b, v);
}

keel_status keel_lr_reduce_on_plateau_create(
    double learning_rate, const char *mode, double factor, int64_t patience,
    double threshold, const char *threshold_mode, int64_t cooldown,
    double min_lr, double epsilon, keel_lr_scheduler **out)
{
    const char *n = kind_names[LR_PLATEAU];
    bool max_mode, abs_threshold;
    keel_lr_scheduler *s;
    keel_status st;

    if ((st = check_out(n, out)) ||
        (st = parse_choice(n, "mode", mode, "min", "max", &max_mode)))
        return st;
    if (isnan(factor) || factor >= 1.0)
        return bad(n, "factor must be < 1.0 (new_lr = lr * factor), got %g",
                   factor);
    if ((st = parse_choice(n, "threshold_mode", threshold_mode, "rel", "abs",
                           &abs_threshold)) ||
        (st = check_number(n, "learning_rate", learning_rate)) ||
        (st = check_number(n, "threshold", threshold)) ||
        (st = check_number(n, "min_lr", min_lr)) ||
        (st = check_number(n, "epsilon", epsilon)))
        return st;
    if (!(s = alloc_sched(LR_PLATEAU, learning_rate)))
        return KEEL_STATUS_OUT_OF_MEMORY;
    s->u.plateau.max_mode = max_mode;
    s->u.plateau.abs_threshold = abs_threshold;
    s->u.plateau.factor = factor;
    s->u.plateau.patience = patience;
    s->u.plateau.threshold = threshold;
    s->u.plateau.cooldown = cooldown;
    s->u.plateau.min_lr = min_lr;
    s->u.plateau.epsilon = epsilon;
    /* Paddle's ReduceOnPlateau does not take the first step. */
    s->last_epoch = 0;
    *out = s;
    return KEEL_STATUS_OK;
}

/* ---- use ----------------------------------------------------------------- */

static keel_status check_steppable(const keel_lr_scheduler *s,
                                   const char *what)
{
    if (!s)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: s is NULL",
                           what);
    if (s->kind == LR_PLATEAU)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: ReduceOnPlateau steps with a metric; use "
                           "keel_lr_scheduler_step_metric",
                           what);
    return KEEL_STATUS_OK;
}

keel_status keel_lr_scheduler_step(keel_lr_scheduler *s)
{
    keel_status st = check_steppable(s, "keel_lr_scheduler_step");

    if (st)
        return st;
    if (s->last_epoch == INT64_MAX)
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "%s: last_epoch cannot grow past %lld",
                           kind_names[s->kind], (long long)INT64_MAX);
    return lr_advance(s, s->last_epoch + 1, false);
}

keel_status keel_lr_scheduler_step_to(keel_lr_scheduler *s, int64_t epoch)
{
    keel_status st = check_steppable(s, "keel_lr_scheduler_step_to");

    if (st)
        return st;
    if (epoch < 0)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_lr_scheduler_step_to: %s: epoch must be "
                           ">= 0, got %lld",
                           kind_names[s->kind], (long long)epoch);
    return lr_advance(s, epoch, true);
}

static bool plateau_better(const keel_lr_scheduler *s, double current)
{
    double best = s->u.plateau.best;
    double th = s->u.plateau.threshold;

    if (!s->u.plateau.max_mode)
        return s->u.plateau.abs_threshold ? current < best - th
                                          : current < best - best * th;
    return s->u.plateau.abs_threshold ? current > best + th
                                      : current > best + best * th;
}

keel_status keel_lr_scheduler_step_metric(keel_lr_scheduler *s, double metric)
{
    const char *what = "keel_lr_scheduler_step_metric";
    double new_lr;

    if (!s)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: s is NULL",
                           what);
    if (s->kind != LR_PLATEAU)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: a %s steps by epoch, not with a metric; use "
                           "keel_lr_scheduler_step",
                           what, kind_names[s->kind]);
    if (s->last_epoch == INT64_MAX)
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "%s: last_epoch cannot grow past %lld",
                           kind_names[s->kind], (long long)INT64_MAX);
    s->last_epoch++;
    if (s->u.plateau.cooldown_counter > 0) {
        s->u.plateau.cooldown_counter--;
        return KEEL_STATUS_OK;
    }
    if (!s->u.plateau.has_best || plateau_better(s, metric)) {
        s->u.plateau.has_best = true;
        s->u.plateau.best = metric;
        s->u.plateau.num_bad_epochs = 0;
    } else {
        s->u.plateau.num_bad_epochs++;
    }
    if (s->u.plateau.num_bad_epochs > s->u.plateau.patience) {
        s->u.plateau.cooldown_counter = s->u.plateau.cooldown;
        s->u.plateau.num_bad_epochs = 0;
        new_lr = s->last_lr * s->u.plateau.factor;
        if (s->u.plateau.min_lr > new_lr)
            new_lr = s->u.plateau.min_lr;
        if (s->last_lr - new_lr > s->u.plateau.epsilon)
            s->last_lr = new_lr;
    }
    return KEEL_STATUS_OK;
}

double keel_lr_scheduler_last_lr(const keel_lr_scheduler *s)
{
    return s ? s->last_lr : NAN;
}

double keel_lr_scheduler_get_lr(const keel_lr_scheduler *s)
{
    double lr;

    if (!s) {
        keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                    "keel_lr_scheduler_get_lr: s is NULL");
        return NAN;
    }
    if (s->kind == LR_PLATEAU) {
        keel__error(KEEL_STATUS_NOT_SUPPORTED,
                    "keel_lr_scheduler_get_lr: ReduceOnPlateau has no "
                    "epoch formula (Paddle raises NotImplementedError); "
                    "use keel_lr_scheduler_last_lr");
        return NAN;
    }
    /* Paddle's get_lr() at last_epoch: the recursive cosine form reads
     * last_lr, a warm-up past its end moves its inner scheduler by epoch
     * (closed form), as Paddle's LinearWarmup.get_lr() does. */
    if (lr_eval(s, s->last_epoch, false, &lr) != KEEL_STATUS_OK)
        return NAN;
    return lr;
}

int64_t keel_lr_scheduler_last_epoch(const keel_lr_scheduler *s)
{
    return s ? s->last_epoch : -1;
}

const char *keel_lr_scheduler_name(const keel_lr_scheduler *s)
{
    return s ? kind_names[s->kind] : "";
}

void keel_lr_scheduler_free(keel_lr_scheduler *s)
{
    while (s) {
        keel_lr_scheduler *next = NULL;

        if (s->kind == LR_MULTI_STEP)
            free(s->u.multi.milestones);
        else if (s->kind == LR_WARMUP)
            next = s->u.warm.inner;
        free(s);
        s = next;
    }
}

/* ---- state --------------------------------------------------------------- */

static int state_find(const keel_lr_state *state, const char *name)
{
    int32_t count = state->count;

    if (count > KEEL_LR_STATE_MAX_FIELDS)
        count = KEEL_LR_STATE_MAX_FIELDS;
    for (int32_t i = 0; i < count; i++)
        if (!strncmp(state->fields[i].name, name, KEEL_LR_STATE_NAME_MAX))
            return (int)i;
    return -1;
}

keel_status keel_lr_state_get_field(const keel_lr_state *state,
                                    const char *name, double *value)
{
    int i;

    if (!state || !name || !value)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_lr_state_get_field: %s is NULL",
                           !state ? "state" : !name ? "name" : "value");
    i = state_find(state, name);
    if (i < 0)
        return keel__error(KEEL_STATUS_NOT_FOUND,
                           "keel_lr_state_get_field: no field '%s'", name);
    *value = state->fields[i].value;
    return KEEL_STATUS_OK;
}

keel_status keel_lr_state_set_field(keel_lr_state *state, const char *name,
                                    double value)
{
    const char *what = "keel_lr_state_set_field";
    int i;

    if (!state || !name)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: %s is NULL",
                           what, !state ? "state" : "name");
    if (strlen(name) >= KEEL_LR_STATE_NAME_MAX)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: name '%.40s...' is %zu bytes long; at most "
                           "%d fit",
                           what, name, strlen(name),
                           KEEL_LR_STATE_NAME_MAX - 1);
    if (state->count < 0 || state->count > KEEL_LR_STATE_MAX_FIELDS)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: state->count %d is outside 0..%d", what,
                           (int)state->count, KEEL_LR_STATE_MAX_FIELDS);
    i = state_find(state, name);
    if (i < 0) {
        if (state->count == KEEL_LR_STATE_MAX_FIELDS)
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "%s: the state is full (%d fields); no room "
                               "for '%s'",
                               what, KEEL_LR_STATE_MAX_FIELDS, name);
        i = state->count++;
        snprintf(state->fields[i].name, sizeof(state->fields[i].name), "%s",
                 name);
    }
    state->fields[i].value = value;
    return KEEL_STATUS_OK;
}

static void put(keel_lr_state *state, const char *prefix, const char *name,
                double value)
{
    keel_lr_state_field *f = &state->fields[state->count++];

    snprintf(f->name, sizeof(f->name), "%s%s", prefix, name);
    f->value = value;
}

/* Fits: at most KEEL_LR_WARMUP_MAX_DEPTH warm-ups of 2 fields, then a
 * leaf of 2 (a ReduceOnPlateau, 6, is never wrapped), and the longest name
 * is KEEL_LR_WARMUP_MAX_DEPTH prefixes + "last_epoch". */
_Static_assert(KEEL_LR_STATE_MAX_FIELDS >= 2 * KEEL_LR_WARMUP_MAX_DEPTH + 2 &&
               KEEL_LR_STATE_MAX_FIELDS >= 6,
               "keel_lr_state too small");
_Static_assert(KEEL_LR_STATE_NAME_MAX >
               KEEL_LR_WARMUP_MAX_DEPTH * (sizeof(WARMUP_PREFIX) - 1) +
                   sizeof("last_epoch") - 1,
               "state field names too short");

static void state_collect(const keel_lr_scheduler *s, keel_lr_state *state,
                          char *prefix, size_t prefix_len)
{
    if (s->kind == LR_PLATEAU) {
        put(state, prefix, "cooldown_counter",
            (double)s->u.plateau.cooldown_counter);
        put(state, prefix, "best", s->u.plateau.has_best ? s->u.plateau.best
                                                          : NAN);
        put(state, prefix, "num_bad_epochs",
            (double)s->u.plateau.num_bad_epochs);
    }
    put(state, prefix, "last_epoch", (double)s->last_epoch);
    put(state, prefix, "last_lr", s->last_lr);
    if (s->kind == LR_PLATEAU)
        put(state, prefix, "has_best", s->u.plateau.has_best ? 1.0 : 0.0);
    if (s->kind == LR_WARMUP && s->u.warm.inner) {
        memcpy(prefix + prefix_len, WARMUP_PREFIX, sizeof(WARMUP_PREFIX));
        state_collect(s->u.warm.inner, state, prefix,
                      prefix_len + sizeof(WARMUP_PREFIX) - 1);
        prefix[prefix_len] = '\0';
    }
}

keel_status keel_lr_scheduler_state_get(const keel_lr_scheduler *s,
                                        keel_lr_state *state)
{
    char prefix[KEEL_LR_STATE_NAME_MAX] = "";

    if (!s || !state)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_lr_scheduler_state_get: %s is NULL",
                           !s ? "s" : "state");
    memset(state, 0, sizeof(*state));
    state_collect(s, state, prefix, 0);
    return KEEL_STATUS_OK;
}

/* The values one scheduler in the chain takes from a state. */
struct level_values {
    int64_t last_epoch;
    double last_lr;
    int64_t cooldown_counter;
    int64_t num_bad_epochs;
    double best;
    bool has_best;
};

static keel_status state_value(const keel_lr_scheduler *s,
                               const keel_lr_state *state, const char *prefix,
                               const char *name, double *v, bool *used)
{
    char full[KEEL_LR_STATE_NAME_MAX * 2];
    int i;

    snprintf(full, sizeof(full), "%s%s", prefix, name);
    i = state_find(state, full);
    if (i < 0)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_lr_scheduler_state_set: %s: the state has "
                           "no field '%s'",
                           kind_names[s->kind], full);
    used[i] = true;
    *v = state->fields[i].value;
    return KEEL_STATUS_OK;
}

static keel_status state_int(const keel_lr_scheduler *s,
                             const keel_lr_state *state, const char *prefix,
                             const char *name, int64_t min, int64_t *out,
                             bool *used)
{
    keel_status st;
    double v;

    if ((st = state_value(s, state, prefix, name, &v, used)))
        return st;
    /* 2^53: every integer below it is exact in a double. */
    if (!(v == floor(v) && fabs(v) <= 9007199254740992.0 && v >= (double)min))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_lr_scheduler_state_set: %s: field '%s%s' "
                           "must be an integer >= %lld, got %g",
                           kind_names[s->kind], prefix, name, (long long)min,
                           v);
    *out = (int64_t)v;
    return KEEL_STATUS_OK;
}

static keel_status state_read(const keel_lr_scheduler *s,
                              const keel_lr_state *state, const char *prefix,
                              struct level_values *lv, bool *used)
{
    keel_status st;
    double v;

    if ((st = state_int(s, state, prefix, "last_epoch", -1, &lv->last_epoch,
                        used)) ||
        (st = state_value(s, state, prefix, "last_lr", &lv->last_lr, used)))
        return st;
    if (!isfinite(lv->last_lr))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_lr_scheduler_state_set: %s: field "
                           "'%slast_lr' must be finite, got %g",
                           kind_names[s->kind], prefix, lv->last_lr);
    if (s->kind != LR_PLATEAU)
        return KEEL_STATUS_OK;
    if ((st = state_int(s, state, prefix, "cooldown_counter", INT64_MIN / 2,
                        &lv->cooldown_counter, used)) ||
        (st = state_int(s, state, prefix, "num_bad_epochs", 0,
                        &lv->num_bad_epochs, used)) ||
        (st = state_value(s, state, prefix, "best", &lv->best, used)) ||
        (st = state_value(s, state, prefix, "has_best", &v, used)))
        return st;
    if (v != 0 && v != 1)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_lr_scheduler_state_set: %s: field "
                           "'%shas_best' must be 0 or 1, got %g",
                           kind_names[s->kind], prefix, v);
    lv->has_best = v == 1;
    return KEEL_STATUS_OK;
}

keel_status keel_lr_scheduler_state_set(keel_lr_scheduler *s,
                                        const keel_lr_state *state)
{
    struct level_values lv[KEEL_LR_WARMUP_MAX_DEPTH + 1];
    bool used[KEEL_LR_STATE_MAX_FIELDS] = {false};
    char prefix[KEEL_LR_STATE_NAME_MAX] = "";
    const keel_lr_scheduler *p;
    keel_lr_scheduler *q;
    size_t len = 0;
    keel_status st;
    int depth = 0;

    if (!s || !state)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_lr_scheduler_state_set: %s is NULL",
                           !s ? "s" : "state");
    if (state->count < 0 || state->count > KEEL_LR_STATE_MAX_FIELDS)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_lr_scheduler_state_set: state->count %d is "
                           "outside 0..%d",
                           (int)state->count, KEEL_LR_STATE_MAX_FIELDS);
    /* Read and check every level, then write. */
    for (p = s; p; depth++) {
        if ((st = state_read(p, state, prefix, &lv[depth], used)))
            return st;
        if (p->kind != LR_WARMUP || !p->u.warm.inner)
            break;
        memcpy(prefix + len, WARMUP_PREFIX, sizeof(WARMUP_PREFIX));
        len += sizeof(WARMUP_PREFIX) - 1;
        p = p->u.warm.inner;
    }
    for (int32_t i = 0; i < state->count; i++)
        if (!used[i])
            keel__log(KEEL_LOG_WARN,
                      "keel_lr_scheduler_state_set: %s: ignoring unknown "
                      "state field '%.*s'",
                      kind_names[s->kind], KEEL_LR_STATE_NAME_MAX - 1,
                      state->fields[i].name);
    depth = 0;
    for (q = s; q; q = q->kind == LR_WARMUP ? q->u.warm.inner : NULL) {
        const struct level_values *v = &lv[depth++];

        q->last_epoch = v->last_epoch;
        q->last_lr = v->last_lr;
        if (q->kind == LR_PLATEAU) {
            q->u.plateau.cooldown_counter = v->cooldown_counter;
            q->u.plateau.num_bad_epochs = v->num_bad_epochs;
            q->u.plateau.has_best = v->has_best;
            q->u.plateau.best = v->has_best ? v->best : 0.0;
        }
    }
    return KEEL_STATUS_OK;
}
