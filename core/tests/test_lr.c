/*
 * Learning-rate schedulers (keel/optim.h) against Paddle's documented
 * formulas, each written out plainly here — never by calling the code under
 * test — over a few hundred epochs and several parameterisations per
 * scheduler; then checkpoint state round trips, argument errors and the
 * stepping rules (which call each kind accepts, what fails and leaves the
 * scheduler unchanged).
 *
 * Bit-for-bit agreement with Python's Paddle is the parity suite's job
 * (core/tests/parity); here a value passes when it is within 1e-12 + 1e-9
 * relative of the formula.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>

#include <keel/optim.h>

#define EPOCHS 300

/* ---- helpers ------------------------------------------------------------ */

static bool ok_(keel_status st, const char *what)
{
    if (st != KEEL_STATUS_OK)
        fprintf(stderr, "\n  %s: %s: %s\n", what, keel_status_name(st),
                keel_last_error());
    return st == KEEL_STATUS_OK;
}
#define OK(call) CU_ASSERT_FATAL(ok_((call), #call))

/* `st` is `want` and the message holds every one of parts (NULL-ended). */
static bool err_(keel_status st, keel_status want, const char *const *parts,
                 const char *what)
{
    bool good = st == want;

    for (int i = 0; good && parts[i]; i++)
        good = strstr(keel_last_error(), parts[i]) != NULL;
    if (!good)
        fprintf(stderr, "\n  %s: got %s '%s', wanted %s with '%s'\n", what,
                keel_status_name(st), keel_last_error(),
                keel_status_name(want), parts[0] ? parts[0] : "");
    return good;
}
#define ERR(call, want, ...)                                                  \
    CU_ASSERT(err_((call), (want), (const char *const[]){__VA_ARGS__, NULL},  \
                   #call))

static bool near(double got, double want)
{
    return fabs(got - want) <= 1e-12 + 1e-9 * fabs(want);
}

/* The rate at epoch e of some documented formula. */
typedef double (*ref_fn)(const void *params, int64_t e);

/*
 * Step `s` from epoch 0 to `epochs`, comparing every rate with ref(e).
 * Reports the first mismatch.
 */
static bool follows(keel_lr_scheduler *s, ref_fn ref, const void *params,
                    int64_t epochs, const char *what)
{
    for (int64_t e = 0; e <= epochs; e++) {
        double got, want = ref(params, e);

        if (e > 0 && keel_lr_scheduler_step(s) != KEEL_STATUS_OK) {
            fprintf(stderr, "\n  %s: step to epoch %lld failed: %s\n", what,
                    (long long)e, keel_last_error());
            return false;
        }
        got = keel_lr_scheduler_last_lr(s);
        if (keel_lr_scheduler_last_epoch(s) != e || !near(got, want)) {
            fprintf(stderr,
                    "\n  %s: epoch %lld (last_epoch %lld): got %.17g, "
                    "formula %.17g\n",
                    what, (long long)e,
                    (long long)keel_lr_scheduler_last_epoch(s), got, want);
            return false;
        }
    }
    return true;
}

/* ---- StepDecay ----------------------------------------------------------- */

struct step_p {
    double lr;
    int64_t step_size;
    double gamma;
};

/* lr * gamma^floor(epoch / step_size) */
static double step_ref(const void *p_, int64_t e)
{
    const struct step_p *p = p_;

    return p->lr * pow(p->gamma, floor((double)e / (double)p->step_size));
}

static void test_step_decay(void)
{
    static const struct step_p cases[] = {
        {0.5, 30, 0.1}, {0.5, 1, 0.1},  {0.1, 7, 0.9},   {1.0, 3, 0.0},
        {0.1, 2, -0.5}, {0.0, 5, 0.5},  {0.3, 300, 0.2}, {2.0, 1, 0.999},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        keel_lr_scheduler *s;
        char what[96];

        snprintf(what, sizeof(what), "StepDecay(%g, %lld, %g)", cases[i].lr,
                 (long long)cases[i].step_size, cases[i].gamma);
        OK(keel_lr_step_decay_create(cases[i].lr, cases[i].step_size,
                                     cases[i].gamma, &s));
        CU_ASSERT_STRING_EQUAL(keel_lr_scheduler_name(s), "StepDecay");
        CU_ASSERT(follows(s, step_ref, &cases[i], EPOCHS, what));
        keel_lr_scheduler_free(s);
    }
}

/* ---- MultiStepDecay ------------------------------------------------------ */

struct multi_p {
    double lr;
    int64_t milestones[6];
    size_t n;
    double gamma;
};

/* lr * gamma^(number of milestones <= epoch) */
static double multi_ref(const void *p_, int64_t e)
{
    const struct multi_p *p = p_;
    int passed = 0;

    for (size_t i = 0; i < p->n; i++)
        if (p->milestones[i] <= e)
            passed++;
    return p->lr * pow(p->gamma, passed);
}

static void test_multi_step_decay(void)
{
    static const struct multi_p cases[] = {
        {0.5, {30, 80}, 2, 0.1},
        {0.5, {0, 5, 10}, 3, 0.1},          /* a milestone at epoch 0 */
        {0.1, {1}, 1, 0.5},
        {0.1, {0}, 0, 0.5},                 /* no milestones: constant */
        {1.0, {-3, 2, 299, 300}, 4, 0.25},  /* before 0 and at the end */
        {0.2, {10, 20, 40, 80, 160, 320}, 6, 0.7},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        keel_lr_scheduler *s;
        char what[96];

        snprintf(what, sizeof(what), "MultiStepDecay case %zu", i);
        OK(keel_lr_multi_step_decay_create(cases[i].lr,
                                           cases[i].n ? cases[i].milestones
                                                      : NULL,
                                           cases[i].n, cases[i].gamma, &s));
        CU_ASSERT(follows(s, multi_ref, &cases[i], EPOCHS, what));
        keel_lr_scheduler_free(s);
    }
}

/* The milestones are copied. */
static void test_multi_step_copies(void)
{
    int64_t m[2] = {2, 4};
    keel_lr_scheduler *s;

    OK(keel_lr_multi_step_decay_create(1.0, m, 2, 0.5, &s));
    m[0] = 100;
    m[1] = 200;
    for (int e = 1; e <= 4; e++)
        OK(keel_lr_scheduler_step(s));
    CU_ASSERT_DOUBLE_EQUAL(keel_lr_scheduler_last_lr(s), 0.25, 0);
    keel_lr_scheduler_free(s);
}

/* ---- ExponentialDecay ---------------------------------------------------- */

struct exp_p {
    double lr;
    double gamma;
};

/* lr * gamma^epoch */
static double exp_ref(const void *p_, int64_t e)
{
    const struct exp_p *p = p_;

    return p->lr * pow(p->gamma, (double)e);
}

static void test_exponential_decay(void)
{
    static const struct exp_p cases[] = {
        {0.5, 0.9}, {1.0, 0.5}, {0.1, 0.999999}, {3.0, 1e-3}, {0.0, 0.5},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        keel_lr_scheduler *s;
        char what[96];

        snprintf(what, sizeof(what), "ExponentialDecay(%g, %g)", cases[i].lr,
                 cases[i].gamma);
        OK(keel_lr_exponential_decay_create(cases[i].lr, cases[i].gamma, &s));
        CU_ASSERT(follows(s, exp_ref, &cases[i], EPOCHS, what));
        keel_lr_scheduler_free(s);
    }
}

/* ---- CosineAnnealingDecay ------------------------------------------------ */

struct cos_p {
    double lr;
    int64_t t_max;
    double eta_min;
};

/* eta_min + (lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2: Paddle's
 * documented form; the scheduler steps by the equivalent recursion. */
static double cos_ref(const void *p_, int64_t e)
{
    const struct cos_p *p = p_;

    return p->eta_min +
           0.5 * (p->lr - p->eta_min) *
               (1 + cos((double)e / (double)p->t_max * M_PI));
}

static const struct cos_p cos_cases[] = {
    {0.5, 10, 0.0}, {0.5, 1, 0.0},    {0.1, 50, 0.01}, {1.0, 300, 0.0},
    {0.1, 7, 0.2},  {2.0, 3, 1e-4},   {0.05, 100, 0.05},
};

static void test_cosine_annealing(void)
{
    for (size_t i = 0; i < sizeof(cos_cases) / sizeof(cos_cases[0]); i++) {
        const struct cos_p *c = &cos_cases[i];
        keel_lr_scheduler *s;
        char what[96];

        snprintf(what, sizeof(what), "CosineAnnealingDecay(%g, %lld, %g)",
                 c->lr, (long long)c->t_max, c->eta_min);
        OK(keel_lr_cosine_annealing_decay_create(c->lr, c->t_max, c->eta_min,
                                                 &s));
        CU_ASSERT(follows(s, cos_ref, c, EPOCHS, what));
        keel_lr_scheduler_free(s);
    }
}

/* T_max 1 alternates lr, eta_min, lr, ... exactly; step_to uses the closed
 * form at any epoch. */
static void test_cosine_t_max_1_and_jumps(void)
{
    static const int64_t jumps[] = {7, 3, 0, 250, 10, 11};
    keel_lr_scheduler *s;

    OK(keel_lr_cosine_annealing_decay_create(0.5, 1, 0.1, &s));
    for (int e = 1; e <= 20; e++) {
        OK(keel_lr_scheduler_step(s));
        CU_ASSERT_DOUBLE_EQUAL(keel_lr_scheduler_last_lr(s),
                               e % 2 ? 0.1 : 0.5, 1e-15);
    }
    keel_lr_scheduler_free(s);

    OK(keel_lr_cosine_annealing_decay_create(0.5, 20, 0.01, &s));
    for (size_t i = 0; i < sizeof(jumps) / sizeof(jumps[0]); i++) {
        struct cos_p p = {0.5, 20, 0.01};

        OK(keel_lr_scheduler_step_to(s, jumps[i]));
        CU_ASSERT_EQUAL(keel_lr_scheduler_last_epoch(s), jumps[i]);
        CU_ASSERT(near(keel_lr_scheduler_last_lr(s), cos_ref(&p, jumps[i])));
        /* ... and the recursion continues from there. */
        OK(keel_lr_scheduler_step(s));
        CU_ASSERT(near(keel_lr_scheduler_last_lr(s),
                       cos_ref(&p, jumps[i] + 1)));
    }
    keel_lr_scheduler_free(s);
}

/* ---- PolynomialDecay ----------------------------------------------------- */

struct poly_p {
    double lr;
    int64_t decay_steps;
    double end_lr;
    double power;
    bool cycle;
};

/*
 * cycle:    decay_steps' = decay_steps * ceil(epoch / decay_steps)
 *           (decay_steps itself at epoch 0)
 * no cycle: epoch' = min(epoch, decay_steps)
 * lr = (lr - end_lr) * (1 - epoch' / decay_steps')^power + end_lr
 */
static double poly_ref(const void *p_, int64_t e)
{
    const struct poly_p *p = p_;
    double steps = (double)p->decay_steps;
    double epoch = (double)e;

    if (p->cycle)
        steps *= e == 0 ? 1 : ceil(epoch / steps);
    else
        epoch = fmin(epoch, steps);
    return (p->lr - p->end_lr) * pow(1 - epoch / steps, p->power) + p->end_lr;
}

static const struct poly_p poly_cases[] = {
    {0.5, 20, 1e-4, 1.0, false}, {0.5, 20, 1e-4, 1.0, true},
    {0.1, 1, 0.0, 2.0, false},   {0.1, 1, 0.0, 2.0, true},
    {1.0, 100, 0.01, 0.5, true}, {1.0, 37, 0.2, 3.0, false},
    {0.1, 7, 0.3, 1.5, true}, /* end_lr above lr: rises */
};

static void test_polynomial_decay(void)
{
    for (size_t i = 0; i < sizeof(poly_cases) / sizeof(poly_cases[0]); i++) {
        const struct poly_p *c = &poly_cases[i];
        keel_lr_scheduler *s;
        char what[96];

        snprintf(what, sizeof(what), "PolynomialDecay(%g, %lld, %g, %g, %d)",
                 c->lr, (long long)c->decay_steps, c->end_lr, c->power,
                 c->cycle);
        OK(keel_lr_polynomial_decay_create(c->lr, c->decay_steps, c->end_lr,
                                           c->power, c->cycle, &s));
        CU_ASSERT(follows(s, poly_ref, c, EPOCHS, what));
        keel_lr_scheduler_free(s);
    }
}

/* ---- LinearWarmup -------------------------------------------------------- */

struct warm_p {
    int64_t warmup_steps;
    double start_lr;
    double end_lr;
    /* After the warm-up: a constant, or `after` at epoch - warmup_steps. */
    double lr;
    ref_fn after;
    const void *after_p;
};

/* start_lr + (end_lr - start_lr) * epoch / warmup_steps while warming up,
 * then the wrapped rate. */
static double warm_ref(const void *p_, int64_t e)
{
    const struct warm_p *p = p_;

    if (e < p->warmup_steps)
        return p->start_lr +
               (p->end_lr - p->start_lr) * (double)e / (double)p->warmup_steps;
    return p->after ? p->after(p->after_p, e - p->warmup_steps) : p->lr;
}

static void test_linear_warmup_constant(void)
{
    static const struct warm_p cases[] = {
        {10, 0.0, 0.5, 0.5, NULL, NULL},
        {1, 0.0, 0.1, 0.1, NULL, NULL},   /* warmup_steps 1 */
        {50, 0.01, 0.2, 0.05, NULL, NULL}, /* lands below end_lr */
        {300, 0.0, 1.0, 2.0, NULL, NULL},
        {5, 0.1, 0.2, -0.5, NULL, NULL},   /* Paddle takes any constant */
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct warm_p *c = &cases[i];
        keel_lr_scheduler *s;
        char what[96];

        snprintf(what, sizeof(what), "LinearWarmup(%g, %lld, %g, %g)", c->lr,
                 (long long)c->warmup_steps, c->start_lr, c->end_lr);
        OK(keel_lr_linear_warmup_create(c->lr, c->warmup_steps, c->start_lr,
                                        c->end_lr, &s));
        CU_ASSERT_STRING_EQUAL(keel_lr_scheduler_name(s), "LinearWarmup");
        CU_ASSERT(follows(s, warm_ref, c, EPOCHS, what));
        keel_lr_scheduler_free(s);
    }
}

static void test_linear_warmup_wrapped(void)
{
    static const struct step_p st = {0.5, 20, 0.5};
    static const struct cos_p co = {0.5, 40, 0.01};
    static const struct poly_p po = {0.5, 30, 0.001, 2.0, true};
    static const struct exp_p ex = {0.3, 0.99};
    const struct warm_p cases[] = {
        {10, 0.0, 0.5, 0, step_ref, &st},
        {25, 0.0, 0.5, 0, cos_ref, &co},
        {1, 0.1, 0.5, 0, poly_ref, &po},
        {7, 0.05, 0.2, 0, exp_ref, &ex},
    };
    /* A warm-up inside a warm-up: 5 epochs 0 -> 0.1, then 10 more
     * 0.1 -> 0.5 (the inner warm-up), then the cosine. */
    const struct warm_p inner2 = {10, 0.1, 0.5, 0, cos_ref, &co};
    const struct warm_p outer2 = {5, 0.0, 0.1, 0, warm_ref, &inner2};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct warm_p *c = &cases[i];
        keel_lr_scheduler *inner, *s;
        char what[96];

        switch (i) {
        case 0:
            OK(keel_lr_step_decay_create(st.lr, st.step_size, st.gamma,
                                         &inner));
            break;
        case 1:
            OK(keel_lr_cosine_annealing_decay_create(co.lr, co.t_max,
                                                     co.eta_min, &inner));
            break;
        case 2:
            OK(keel_lr_polynomial_decay_create(po.lr, po.decay_steps,
                                               po.end_lr, po.power, po.cycle,
                                               &inner));
            break;
        default:
            OK(keel_lr_exponential_decay_create(ex.lr, ex.gamma, &inner));
            break;
        }
        snprintf(what, sizeof(what), "LinearWarmup(%s, %lld, %g, %g)",
                 keel_lr_scheduler_name(inner), (long long)c->warmup_steps,
                 c->start_lr, c->end_lr);
        OK(keel_lr_linear_warmup_wrap(inner, c->warmup_steps, c->start_lr,
                                      c->end_lr, &s));
        CU_ASSERT(follows(s, warm_ref, c, EPOCHS, what));
        keel_lr_scheduler_free(s); /* frees inner too (valgrind checks) */
    }

    {
        keel_lr_scheduler *cosine, *mid, *s;

        OK(keel_lr_cosine_annealing_decay_create(co.lr, co.t_max, co.eta_min,
                                                 &cosine));
        OK(keel_lr_linear_warmup_wrap(cosine, 10, 0.1, 0.5, &mid));
        OK(keel_lr_linear_warmup_wrap(mid, 5, 0.0, 0.1, &s));
        CU_ASSERT(follows(s, warm_ref, &outer2, EPOCHS, "nested warm-ups"));
        keel_lr_scheduler_free(s);
    }
}

/* ---- OneCycleLR ---------------------------------------------------------- */

struct cycle_p {
    double max_lr;
    int64_t total;
    double divide_factor;
    double end_lr;
    double pct;
    bool linear;
    bool three;
};

static double anneal(bool linear, double from, double to, double frac)
{
    if (linear)
        return from + (to - from) * frac;
    return to + (from - to) * (1 + cos(M_PI * frac)) / 2;
}

/*
 * Paddle's phases, as its docs describe them, with its boundary steps
 * (the rise ends at step pct * total - 1; with three phases the fall back
 * to the initial rate ends at 2 * pct * total - 2; the last phase ends at
 * total - 1 and runs on to step `total`).
 */
static double cycle_ref(const void *p_, int64_t e)
{
    const struct cycle_p *p = p_;
    double initial = p->max_lr / p->divide_factor;
    double t = (double)p->total, x = (double)e;
    double up_end = p->pct * t - 1;
    double back_end = 2 * p->pct * t - 2;

    if (x <= up_end)
        return anneal(p->linear, initial, p->max_lr, x / up_end);
    if (!p->three)
        return anneal(p->linear, p->max_lr, p->end_lr,
                      (x - up_end) / (t - 1 - up_end));
    if (x <= back_end)
        return anneal(p->linear, p->max_lr, initial,
                      (x - up_end) / (back_end - up_end));
    return anneal(p->linear, initial, p->end_lr,
                  (x - back_end) / (t - 1 - back_end));
}

static const struct cycle_p cycle_cases[] = {
    {0.1, 300, 25.0, 1e-4, 0.3, false, false},
    {0.1, 300, 25.0, 1e-4, 0.3, true, false},  /* linear anneal */
    {0.1, 300, 25.0, 1e-4, 0.3, false, true},  /* three_phase */
    {0.1, 300, 25.0, 1e-4, 0.3, true, true},
    {1.0, 400, 10.0, 0.0, 0.1, false, false},
    {0.5, 350, 4.0, 1e-3, 0.45, true, true},
    {0.5, 301, 1.0, 0.5, 0.25, false, false},  /* flat start, end = max */
};

static void test_one_cycle(void)
{
    for (size_t i = 0; i < sizeof(cycle_cases) / sizeof(cycle_cases[0]);
         i++) {
        const struct cycle_p *c = &cycle_cases[i];
        keel_lr_scheduler *s;
        char what[128];

        snprintf(what, sizeof(what),
                 "OneCycleLR(%g, %lld, %g, %g, %g, %s, three_phase=%d)",
                 c->max_lr, (long long)c->total, c->divide_factor, c->end_lr,
                 c->pct, c->linear ? "linear" : "cos", c->three);
        OK(keel_lr_one_cycle_create(c->max_lr, c->total, c->divide_factor,
                                    c->end_lr, c->pct,
                                    c->linear ? "linear" : "cos", c->three,
                                    &s));
        CU_ASSERT(follows(s, cycle_ref, c, c->total, what));
        keel_lr_scheduler_free(s);
    }
}

/* Epoch total_steps is the last valid one: one more step fails with
 * INVALID_STATE and changes nothing; so does a jump past it. */
static void test_one_cycle_end(void)
{
    keel_lr_scheduler *s;
    double lr;

    OK(keel_lr_one_cycle_create(0.1, 10, 25.0, 1e-4, 0.3, NULL, false, &s));
    for (int e = 1; e <= 10; e++)
        OK(keel_lr_scheduler_step(s));
    lr = keel_lr_scheduler_last_lr(s);
    ERR(keel_lr_scheduler_step(s), KEEL_STATUS_INVALID_STATE, "OneCycleLR",
        "total_steps 10");
    ERR(keel_lr_scheduler_step_to(s, 12), KEEL_STATUS_INVALID_STATE,
        "OneCycleLR");
    CU_ASSERT_EQUAL(keel_lr_scheduler_last_epoch(s), 10);
    CU_ASSERT_DOUBLE_EQUAL(keel_lr_scheduler_last_lr(s), lr, 0);
    /* A jump back is fine. */
    OK(keel_lr_scheduler_step_to(s, 0));
    CU_ASSERT(near(keel_lr_scheduler_last_lr(s), 0.1 / 25.0));
    keel_lr_scheduler_free(s);

    /* A zero-length phase fails where Paddle divides by zero: total 4 with
     * phase_pct 1 at step 4; total 2 with 0.5 at construction. */
    OK(keel_lr_one_cycle_create(0.1, 4, 25.0, 1e-4, 1.0, "cos", false, &s));
    for (int e = 1; e <= 3; e++)
        OK(keel_lr_scheduler_step(s));
    CU_ASSERT(near(keel_lr_scheduler_last_lr(s), 0.1));
    ERR(keel_lr_scheduler_step(s), KEEL_STATUS_INVALID_ARGUMENT,
        "OneCycleLR", "zero length");
    CU_ASSERT_EQUAL(keel_lr_scheduler_last_epoch(s), 3);
    keel_lr_scheduler_free(s);
    s = (keel_lr_scheduler *)&s; /* must be reset to NULL */
    ERR(keel_lr_one_cycle_create(0.1, 2, 25.0, 1e-4, 0.5, "cos", false, &s),
        KEEL_STATUS_INVALID_ARGUMENT, "OneCycleLR", "zero length");
    CU_ASSERT_PTR_NULL(s);
    /* phase_pct 0 is accepted (the rise is skipped), as in Paddle. */
    OK(keel_lr_one_cycle_create(0.1, 4, 25.0, 1e-4, 0.0, "cos", false, &s));
    CU_ASSERT(near(keel_lr_scheduler_last_lr(s),
                   1e-4 + (0.1 - 1e-4) / 2 * (1 + cos(M_PI * 0.25))));
    keel_lr_scheduler_free(s);
}

/* ---- ReduceOnPlateau ----------------------------------------------------- */

struct plateau_p {
    double lr;
    bool max_mode;
    double factor;
    int patience;
    double threshold;
    bool abs_mode;
    int cooldown;
    double min_lr;
    double epsilon;
};

/*
 * Paddle's documented algorithm, written out independently: after a
 * cooldown of `cooldown` steps following each reduction, a metric better
 * than the best so far (by `threshold`, relative to the best or absolute)
 * becomes the best; once more than `patience` steps in a row were not
 * better, lr becomes max(lr * factor, min_lr) — unless that changes it by
 * epsilon or less.
 */
static void plateau_ref(const struct plateau_p *p, const double *metrics,
                        int n, double *lrs)
{
    double lr = p->lr, best = 0;
    int bad = 0, cool = 0;
    bool seen = false;

    for (int i = 0; i < n; i++) {
        double m = metrics[i], margin;
        bool better;

        if (cool > 0) {
            cool--;
            lrs[i] = lr;
            continue;
        }
        margin = p->abs_mode ? p->threshold : fabs(best) * p->threshold;
        if (p->abs_mode || best >= 0)
            better = p->max_mode ? m > best + margin : m < best - margin;
        else /* rel with a negative best: Paddle's best * threshold */
            better = p->max_mode ? m > best - margin : m < best + margin;
        if (!seen || better) {
            seen = true;
            best = m;
            bad = 0;
        } else if (++bad > p->patience) {
            double next = lr * p->factor < p->min_lr ? p->min_lr
                                                     : lr * p->factor;

            bad = 0;
            cool = p->cooldown;
            if (lr - next > p->epsilon)
                lr = next;
        }
        lrs[i] = lr;
    }
}

#define METRICS 300

/* A loss curve: falls, then plateaus with small noise, then falls again. */
static void make_metrics(double *m, double sign, double offset)
{
    for (int i = 0; i < METRICS; i++) {
        double base = i < 60 ? 1.0 - i * 0.01
                             : i < 200 ? 0.4 + 1e-5 * sin(i * 1.7)
                                       : 0.4 - (i - 200) * 1e-3;

        m[i] = sign * base + offset;
    }
}

static void test_reduce_on_plateau(void)
{
    /* The metric curve is scaled by -1 in max mode and moved by
     * `offset`; `reduces`: whether the rate must change at least once. */
    static const struct {
        struct plateau_p p;
        double offset;
        bool reduces;
    } cases[] = {
        /* defaults */
        {{1.0, false, 0.1, 10, 1e-4, false, 0, 0.0, 1e-8}, 0, true},
        {{1.0, false, 0.5, 2, 1e-4, false, 0, 0.0, 1e-8}, 0, true},
        /* abs threshold, cooldown */
        {{1.0, false, 0.5, 3, 1e-3, true, 5, 0.0, 1e-8}, 0, true},
        /* max mode; max with an abs threshold and a cooldown */
        {{0.5, true, 0.5, 4, 1e-4, false, 0, 0.0, 1e-8}, 2, true},
        {{0.5, true, 0.2, 1, 1e-6, true, 2, 0.0, 1e-8}, 0, true},
        /* the min_lr floor stops the reductions */
        {{1.0, false, 0.1, 0, 0.0, false, 0, 1e-3, 1e-8}, 0, true},
        /* epsilon: every reduction (by 5e-7) is too small to apply */
        {{1e-6, false, 0.5, 1, 1e-4, false, 0, 0.0, 1e-6}, 0, false},
        /* rel with negative metrics: best - best * threshold lies above
         * the best, so noise counts as progress and nothing reduces */
        {{1.0, false, 0.5, 5, 1e-2, false, 1, 0.0, 1e-8}, -2, false},
        {{1.0, true, 0.5, 5, 1e-4, false, 0, 0.0, 1e-8}, 0, false},
    };
    double metrics[METRICS], want[METRICS];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct plateau_p *c = &cases[i].p;
        keel_lr_scheduler *s;
        int reductions = 0;

        make_metrics(metrics, c->max_mode ? -1.0 : 1.0, cases[i].offset);
        plateau_ref(c, metrics, METRICS, want);
        OK(keel_lr_reduce_on_plateau_create(
            c->lr, c->max_mode ? "max" : "min", c->factor, c->patience,
            c->threshold, c->abs_mode ? "abs" : "rel", c->cooldown,
            c->min_lr, c->epsilon, &s));
        CU_ASSERT_STRING_EQUAL(keel_lr_scheduler_name(s), "ReduceOnPlateau");
        CU_ASSERT_EQUAL(keel_lr_scheduler_last_epoch(s), 0);
        CU_ASSERT_DOUBLE_EQUAL(keel_lr_scheduler_last_lr(s), c->lr, 0);
        for (int e = 0; e < METRICS; e++) {
            OK(keel_lr_scheduler_step_metric(s, metrics[e]));
            if (keel_lr_scheduler_last_lr(s) != want[e] ||
                keel_lr_scheduler_last_epoch(s) != e + 1) {
                fprintf(stderr, "\n  ReduceOnPlateau case %zu, step %d: got "
                        "%.17g, wanted %.17g\n", i, e + 1,
                        keel_lr_scheduler_last_lr(s), want[e]);
                CU_FAIL("ReduceOnPlateau differs from the algorithm");
                break;
            }
            if (e > 0 && want[e] != want[e - 1])
                reductions++;
        }
        if (cases[i].reduces != (reductions > 0)) {
            fprintf(stderr, "\n  ReduceOnPlateau case %zu: %d reductions\n",
                    i, reductions);
            CU_FAIL("ReduceOnPlateau case does not test what it should");
        }
        keel_lr_scheduler_free(s);
    }
}

/* Hand-checked: patience 2 on a constant metric reduces at steps 4, 7,
 * 10 (step 1 only sets the best); cooldown 2 spaces them by 2 more; the
 * floor stops them. */
static void test_plateau_by_hand(void)
{
    keel_lr_scheduler *s;
    double lr;

    OK(keel_lr_reduce_on_plateau_create(1.0, "MIN", 0.5, 2, 1e-4, "Rel", 0,
                                        0.2, 1e-8, &s));
    for (int e = 1; e <= 12; e++) {
        OK(keel_lr_scheduler_step_metric(s, 3.0));
        lr = e >= 7 ? 0.25 : e >= 4 ? 0.5 : 1.0;
        if (e >= 10)
            lr = 0.2; /* max(0.125, min_lr) */
        CU_ASSERT_DOUBLE_EQUAL(keel_lr_scheduler_last_lr(s), lr, 0);
    }
    keel_lr_scheduler_free(s);

    OK(keel_lr_reduce_on_plateau_create(1.0, NULL, 0.5, 2, 1e-4, NULL, 2, 0,
                                        1e-8, &s));
    for (int e = 1; e <= 12; e++) {
        OK(keel_lr_scheduler_step_metric(s, 3.0));
        /* 4; then 2 cooldown steps and 3 bad ones: 9; then 14. */
        lr = e >= 9 ? 0.25 : e >= 4 ? 0.5 : 1.0;
        CU_ASSERT_DOUBLE_EQUAL(keel_lr_scheduler_last_lr(s), lr, 0);
    }
    keel_lr_scheduler_free(s);

    /* An improvement by less than the threshold is not one: rel 10% of
     * best 1.0 is 0.1, so 0.95 is bad and 0.85 good; abs 0.1 alike. */
    for (int abs_mode = 0; abs_mode < 2; abs_mode++) {
        OK(keel_lr_reduce_on_plateau_create(1.0, "min", 0.5, 1, 0.1,
                                            abs_mode ? "abs" : "rel", 0, 0,
                                            1e-8, &s));
        OK(keel_lr_scheduler_step_metric(s, 1.0));  /* best 1.0 */
        OK(keel_lr_scheduler_step_metric(s, 0.95)); /* bad 1 */
        OK(keel_lr_scheduler_step_metric(s, 0.85)); /* best 0.85 */
        OK(keel_lr_scheduler_step_metric(s, 0.80)); /* bad 1 */
        CU_ASSERT_DOUBLE_EQUAL(keel_lr_scheduler_last_lr(s), 1.0, 0);
        OK(keel_lr_scheduler_step_metric(s, 0.80)); /* bad 2 > 1 */
        CU_ASSERT_DOUBLE_EQUAL(keel_lr_scheduler_last_lr(s), 0.5, 0);
        keel_lr_scheduler_free(s);
    }
}

/* ---- state --------------------------------------------------------------- */

/* Build scheduler number `which` of the state test's list. */
static keel_status make_sched(int which, keel_lr_scheduler **out)
{
    static const int64_t ms[] = {3, 50, 120, 200};
    keel_lr_scheduler *in, *mid;
    keel_status st;

    switch (which) {
    case 0:
        return keel_lr_step_decay_create(0.5, 7, 0.5, out);
    case 1:
        return keel_lr_multi_step_decay_create(0.5, ms, 4, 0.3, out);
    case 2:
        return keel_lr_exponential_decay_create(0.5, 0.98, out);
    case 3:
        return keel_lr_cosine_annealing_decay_create(0.5, 33, 0.01, out);
    case 4:
        return keel_lr_polynomial_decay_create(0.5, 40, 1e-3, 2.0, true, out);
    case 5:
        return keel_lr_linear_warmup_create(0.4, 20, 0.0, 0.5, out);
    case 6:
        if ((st = keel_lr_cosine_annealing_decay_create(0.5, 60, 0.0, &in)))
            return st;
        if ((st = keel_lr_linear_warmup_wrap(in, 30, 0.0, 0.5, out)))
            keel_lr_scheduler_free(in);
        return st;
    case 7:
        if ((st = keel_lr_exponential_decay_create(0.5, 0.99, &in)))
            return st;
        if ((st = keel_lr_linear_warmup_wrap(in, 100, 0.1, 0.5, &mid))) {
            keel_lr_scheduler_free(in);
            return st;
        }
        if ((st = keel_lr_linear_warmup_wrap(mid, 50, 0.0, 0.1, out)))
            keel_lr_scheduler_free(mid);
        return st;
    case 8:
        return keel_lr_one_cycle_create(0.5, 320, 25.0, 1e-4, 0.3, "cos",
                                        true, out);
    default:
        return keel_lr_reduce_on_plateau_create(1.0, "min", 0.5, 4, 1e-4,
                                                "rel", 3, 1e-3, 1e-8, out);
    }
}
#define NUM_STATE_SCHEDS 10

/* One step of scheduler `which`; the ReduceOnPlateau gets metric `i`. */
static keel_status advance(keel_lr_scheduler *s, int which, int i)
{
    static double m[METRICS];
    static bool made;

    if (which != NUM_STATE_SCHEDS - 1)
        return keel_lr_scheduler_step(s);
    if (!made) {
        make_metrics(m, 1.0, 0.0);
        made = true;
    }
    return keel_lr_scheduler_step_metric(s, m[i % METRICS]);
}

/* Save mid-run, restore into a fresh scheduler built alike: the rest of
 * the curve is the same, bit for bit. */
static void test_state_round_trip(void)
{
    for (int which = 0; which < NUM_STATE_SCHEDS; which++) {
        for (int cut = 0; cut <= 150; cut += 75) {
            keel_lr_scheduler *a, *b;
            keel_lr_state st;

            OK(make_sched(which, &a));
            OK(make_sched(which, &b));
            for (int i = 0; i < cut; i++)
                OK(advance(a, which, i));
            OK(keel_lr_scheduler_state_get(a, &st));
            OK(keel_lr_scheduler_state_set(b, &st));
            CU_ASSERT_EQUAL(keel_lr_scheduler_last_epoch(b),
                            keel_lr_scheduler_last_epoch(a));
            for (int i = cut; i < cut + 150; i++) {
                double la, lb;

                OK(advance(a, which, i));
                OK(advance(b, which, i));
                la = keel_lr_scheduler_last_lr(a);
                lb = keel_lr_scheduler_last_lr(b);
                if (memcmp(&la, &lb, sizeof(la))) {
                    fprintf(stderr, "\n  %s (#%d), cut %d, step %d: %.17g "
                            "vs restored %.17g\n",
                            keel_lr_scheduler_name(a), which, cut, i, la, lb);
                    CU_FAIL("the restored scheduler diverges");
                    break;
                }
            }
            keel_lr_scheduler_free(a);
            keel_lr_scheduler_free(b);
        }
    }
}

static void test_state_fields(void)
{
    keel_lr_scheduler *s;
    keel_lr_state st;
    double v;

    /* A plain scheduler: Paddle's two keys. */
    OK(keel_lr_step_decay_create(0.5, 2, 0.5, &s));
    OK(keel_lr_scheduler_step(s));
    OK(keel_lr_scheduler_step(s));
    OK(keel_lr_scheduler_state_get(s, &st));
    CU_ASSERT_EQUAL(st.count, 2);
    OK(keel_lr_state_get_field(&st, "last_epoch", &v));
    CU_ASSERT_DOUBLE_EQUAL(v, 2, 0);
    OK(keel_lr_state_get_field(&st, "last_lr", &v));
    CU_ASSERT_DOUBLE_EQUAL(v, 0.25, 0);
    ERR(keel_lr_state_get_field(&st, "best", &v), KEEL_STATUS_NOT_FOUND,
        "best");
    keel_lr_scheduler_free(s);

    /* Warm-ups nest the wrapped scheduler's fields under a prefix. */
    OK(make_sched(7, &s));
    OK(keel_lr_scheduler_state_get(s, &st));
    CU_ASSERT_EQUAL(st.count, 6);
    OK(keel_lr_state_get_field(&st, "LinearWarmup_LR.last_epoch", &v));
    OK(keel_lr_state_get_field(
        &st, "LinearWarmup_LR.LinearWarmup_LR.last_lr", &v));
    CU_ASSERT_DOUBLE_EQUAL(v, 0.5, 0);
    keel_lr_scheduler_free(s);

    /* ReduceOnPlateau: Paddle's five keys plus has_best. */
    OK(make_sched(9, &s));
    OK(keel_lr_scheduler_state_get(s, &st));
    CU_ASSERT_EQUAL(st.count, 6);
    OK(keel_lr_state_get_field(&st, "has_best", &v));
    CU_ASSERT_DOUBLE_EQUAL(v, 0, 0);
    OK(keel_lr_scheduler_step_metric(s, 0.75));
    OK(keel_lr_scheduler_state_get(s, &st));
    OK(keel_lr_state_get_field(&st, "has_best", &v));
    CU_ASSERT_DOUBLE_EQUAL(v, 1, 0);
    OK(keel_lr_state_get_field(&st, "best", &v));
    CU_ASSERT_DOUBLE_EQUAL(v, 0.75, 0);
    OK(keel_lr_state_get_field(&st, "cooldown_counter", &v));
    OK(keel_lr_state_get_field(&st, "num_bad_epochs", &v));
    keel_lr_scheduler_free(s);
}

/* A state built by name (as a checkpoint reader would). */
static void test_state_by_name(void)
{
    keel_lr_scheduler *s;
    keel_lr_state st = {0};
    char longname[KEEL_LR_STATE_NAME_MAX + 1];
    double v;

    OK(keel_lr_state_set_field(&st, "last_lr", 0.3));
    OK(keel_lr_state_set_field(&st, "last_epoch", 9));
    OK(keel_lr_state_set_field(&st, "last_lr", 0.125)); /* replaces */
    OK(keel_lr_state_set_field(&st, "unrelated", 1));   /* ignored */
    CU_ASSERT_EQUAL(st.count, 3);
    OK(keel_lr_state_get_field(&st, "last_lr", &v));
    CU_ASSERT_DOUBLE_EQUAL(v, 0.125, 0);

    OK(keel_lr_step_decay_create(1.0, 5, 0.5, &s));
    OK(keel_lr_scheduler_state_set(s, &st));
    CU_ASSERT_EQUAL(keel_lr_scheduler_last_epoch(s), 9);
    CU_ASSERT_DOUBLE_EQUAL(keel_lr_scheduler_last_lr(s), 0.125, 0);
    OK(keel_lr_scheduler_step(s)); /* epoch 10: 1.0 * 0.5^2 */
    CU_ASSERT_DOUBLE_EQUAL(keel_lr_scheduler_last_lr(s), 0.25, 0);
    keel_lr_scheduler_free(s);

    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    ERR(keel_lr_state_set_field(&st, longname, 1),
        KEEL_STATUS_INVALID_ARGUMENT, "bytes long");
    for (int i = 0; st.count < KEEL_LR_STATE_MAX_FIELDS; i++) {
        char name[16];

        snprintf(name, sizeof(name), "f%d", i);
        OK(keel_lr_state_set_field(&st, name, i));
    }
    ERR(keel_lr_state_set_field(&st, "one_more", 1),
        KEEL_STATUS_INVALID_ARGUMENT, "full");
    ERR(keel_lr_state_set_field(NULL, "x", 1), KEEL_STATUS_INVALID_ARGUMENT,
        "NULL");
    ERR(keel_lr_state_get_field(&st, NULL, &v), KEEL_STATUS_INVALID_ARGUMENT,
        "NULL");
}

/* A bad state is rejected whole: the scheduler keeps its old state. */
static void test_state_errors(void)
{
    static const struct {
        const char *field;
        double value;
        const char *part;
    } bads[] = {
        {"last_epoch", 2.5, "last_epoch"},
        {"last_epoch", -2, "last_epoch"},
        {"last_epoch", NAN, "last_epoch"},
        {"last_epoch", 1e300, "last_epoch"},
        {"last_lr", NAN, "last_lr"},
        {"last_lr", INFINITY, "last_lr"},
        {"LinearWarmup_LR.last_epoch", 0.5, "LinearWarmup_LR.last_epoch"},
        {"LinearWarmup_LR.last_lr", NAN, "LinearWarmup_LR.last_lr"},
    };
    keel_lr_scheduler *s, *p;
    keel_lr_state good, st;

    OK(make_sched(6, &s));
    for (int e = 0; e < 40; e++)
        OK(keel_lr_scheduler_step(s));
    OK(keel_lr_scheduler_state_get(s, &good));
    for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
        st = good;
        OK(keel_lr_state_set_field(&st, bads[i].field, bads[i].value));
        ERR(keel_lr_scheduler_state_set(s, &st), KEEL_STATUS_INVALID_ARGUMENT,
            bads[i].part);
    }
    /* A missing field, outer or inner. */
    st = good;
    st.count = 1;
    ERR(keel_lr_scheduler_state_set(s, &st), KEEL_STATUS_INVALID_ARGUMENT,
        "LinearWarmup", "no field 'last_lr'");
    st = good;
    st.count = 3;
    ERR(keel_lr_scheduler_state_set(s, &st), KEEL_STATUS_INVALID_ARGUMENT,
        "no field 'LinearWarmup_LR.last_lr'");
    st = good;
    st.count = KEEL_LR_STATE_MAX_FIELDS + 1;
    ERR(keel_lr_scheduler_state_set(s, &st), KEEL_STATUS_INVALID_ARGUMENT,
        "count");
    ERR(keel_lr_scheduler_state_set(s, NULL), KEEL_STATUS_INVALID_ARGUMENT,
        "NULL");
    ERR(keel_lr_scheduler_state_get(NULL, &st), KEEL_STATUS_INVALID_ARGUMENT,
        "NULL");
    OK(keel_lr_scheduler_state_get(s, &st));
    CU_ASSERT(!memcmp(&st, &good, sizeof(st)));
    keel_lr_scheduler_free(s);

    /* ReduceOnPlateau's own fields. */
    OK(make_sched(9, &p));
    OK(keel_lr_scheduler_step_metric(p, 1.0));
    OK(keel_lr_scheduler_state_get(p, &good));
    st = good;
    OK(keel_lr_state_set_field(&st, "has_best", 0.5));
    ERR(keel_lr_scheduler_state_set(p, &st), KEEL_STATUS_INVALID_ARGUMENT,
        "has_best");
    st = good;
    OK(keel_lr_state_set_field(&st, "num_bad_epochs", -1));
    ERR(keel_lr_scheduler_state_set(p, &st), KEEL_STATUS_INVALID_ARGUMENT,
        "num_bad_epochs");
    st = good;
    OK(keel_lr_state_set_field(&st, "cooldown_counter", 0.25));
    ERR(keel_lr_scheduler_state_set(p, &st), KEEL_STATUS_INVALID_ARGUMENT,
        "cooldown_counter");
    st = good;
    st.count = 2; /* cooldown_counter, best */
    ERR(keel_lr_scheduler_state_set(p, &st), KEEL_STATUS_INVALID_ARGUMENT,
        "ReduceOnPlateau", "no field");
    OK(keel_lr_scheduler_state_get(p, &st));
    CU_ASSERT(!memcmp(&st, &good, sizeof(st)));
    keel_lr_scheduler_free(p);
}

/* ---- argument errors ----------------------------------------------------- */

/*
 * Paddle's two readings of a scheduler: last_lr (what step() stored, what
 * scheduler() and the optimizer use) and get_lr() (the formula evaluated
 * now at last_epoch; for the recursive cosine it starts from last_lr).
 */
static void test_get_lr_and_last_lr(void)
{
    keel_lr_scheduler *s = NULL, *inner = NULL;
    const double pi = acos(-1.0);

    /* closed form: both agree with the formula, and reading changes
     * nothing */
    OK(keel_lr_step_decay_create(0.5, 3, 0.1, &s));
    for (int e = 0; e < 8; e++) {
        double want = 0.5 * pow(0.1, (double)(e / 3));

        CU_ASSERT(near(keel_lr_scheduler_last_lr(s), want));
        CU_ASSERT(near(keel_lr_scheduler_get_lr(s), want));
        CU_ASSERT(near(keel_lr_scheduler_get_lr(s), want));
        CU_ASSERT_EQUAL(keel_lr_scheduler_last_epoch(s), e);
        OK(keel_lr_scheduler_step(s));
    }
    keel_lr_scheduler_free(s);

    /* recursive cosine: get_lr() applies the epoch's ratio to last_lr
     * once more, as Paddle's CosineAnnealingDecay.get_lr() does */
    OK(keel_lr_cosine_annealing_decay_create(1.0, 10, 0.0, &s));
    CU_ASSERT(near(keel_lr_scheduler_get_lr(s), 1.0));
    CU_ASSERT(near(keel_lr_scheduler_last_lr(s), 1.0));
    for (int e = 1; e <= 12; e++) {
        double last, want_get;

        OK(keel_lr_scheduler_step(s));
        last = keel_lr_scheduler_last_lr(s);
        CU_ASSERT(near(last, (1 + cos(pi * e / 10)) / 2));
        if ((e - 1 - 10) % 20 == 0)
            want_get = last + 1.0 * (1 - cos(pi / 10)) / 2;
        else
            want_get = (1 + cos(pi * e / 10)) / (1 + cos(pi * (e - 1) / 10)) *
                       last;
        CU_ASSERT(near(keel_lr_scheduler_get_lr(s), want_get));
        if (e != 10) /* at the minimum both are 0 */
            CU_ASSERT(!near(keel_lr_scheduler_get_lr(s), last));
        /* and it is only a reading */
        CU_ASSERT_EQUAL(keel_lr_scheduler_last_lr(s), last);
        CU_ASSERT_EQUAL(keel_lr_scheduler_last_epoch(s), e);
    }
    keel_lr_scheduler_free(s);

    /* a warm-up around a cosine: the wrapped one is read in closed form */
    OK(keel_lr_cosine_annealing_decay_create(1.0, 10, 0.0, &inner));
    OK(keel_lr_linear_warmup_wrap(inner, 2, 0.0, 1.0, &s));
    for (int e = 0; e < 6; e++) {
        double want = e < 2 ? e / 2.0 : (1 + cos(pi * (e - 2) / 10)) / 2;

        CU_ASSERT(near(keel_lr_scheduler_last_lr(s), want));
        CU_ASSERT(near(keel_lr_scheduler_get_lr(s), want));
        OK(keel_lr_scheduler_step(s));
    }
    keel_lr_scheduler_free(s);

    /* ReduceOnPlateau has no get_lr formula */
    OK(keel_lr_reduce_on_plateau_create(0.3, NULL, 0.1, 10, 1e-4, NULL, 0,
                                        0.0, 1e-8, &s));
    keel_clear_error();
    CU_ASSERT(isnan(keel_lr_scheduler_get_lr(s)));
    CU_ASSERT_EQUAL(keel_last_status(), KEEL_STATUS_NOT_SUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "ReduceOnPlateau"));
    CU_ASSERT(near(keel_lr_scheduler_last_lr(s), 0.3));
    keel_lr_scheduler_free(s);

    CU_ASSERT(isnan(keel_lr_scheduler_get_lr(NULL)));
    CU_ASSERT(isnan(keel_lr_scheduler_last_lr(NULL)));
}

/* keel_last_error(): set whole by each failure, emptied by clear. */
static void test_last_error_contract(void)
{
    keel_lr_scheduler *s = NULL;

    keel_clear_error();
    CU_ASSERT_STRING_EQUAL(keel_last_error(), "");
    CU_ASSERT_EQUAL(keel_last_status(), KEEL_STATUS_OK);

    CU_ASSERT_EQUAL(keel_lr_step_decay_create(0.1, 0, 0.1, &s),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(keel_last_status(), KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "step_size"));

    /* a different failure replaces the whole message */
    CU_ASSERT_EQUAL(keel_lr_scheduler_step_to(NULL, 1),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "step_to"));
    CU_ASSERT_PTR_NULL(strstr(keel_last_error(), "step_size"));
    OK(keel_lr_step_decay_create(0.1, 2, 0.1, &s));
    CU_ASSERT_EQUAL(keel_lr_scheduler_step_metric(s, 1.0),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "StepDecay"));
    CU_ASSERT_PTR_NULL(strstr(keel_last_error(), "step_to"));

    keel_clear_error();
    CU_ASSERT_STRING_EQUAL(keel_last_error(), "");
    CU_ASSERT_EQUAL(keel_last_status(), KEEL_STATUS_OK);
    keel_lr_scheduler_free(s);
}

static void test_argument_errors(void)
{
    static const int64_t unsorted[] = {5, 3};
    static const int64_t repeated[] = {5, 5};
    keel_lr_scheduler *s = NULL, *inner;
#define BAD(call, ...)                                                        \
    do {                                                                      \
        s = (keel_lr_scheduler *)&s;                                          \
        ERR(call, KEEL_STATUS_INVALID_ARGUMENT, __VA_ARGS__);                 \
        CU_ASSERT_PTR_NULL(s);                                                \
    } while (0)

    /* StepDecay */
    BAD(keel_lr_step_decay_create(0.1, 0, 0.1, &s), "StepDecay", "step_size");
    BAD(keel_lr_step_decay_create(0.1, -3, 0.1, &s), "StepDecay",
        "step_size");
    BAD(keel_lr_step_decay_create(0.1, 2, 1.0, &s), "StepDecay", "gamma");
    BAD(keel_lr_step_decay_create(0.1, 2, NAN, &s), "StepDecay", "gamma");
    BAD(keel_lr_step_decay_create(-0.1, 2, 0.1, &s), "StepDecay",
        "learning_rate");
    BAD(keel_lr_step_decay_create(NAN, 2, 0.1, &s), "StepDecay",
        "learning_rate");
    ERR(keel_lr_step_decay_create(0.1, 2, 0.1, NULL),
        KEEL_STATUS_INVALID_ARGUMENT, "StepDecay", "out");
    /* MultiStepDecay */
    BAD(keel_lr_multi_step_decay_create(0.1, unsorted, 2, 0.1, &s),
        "MultiStepDecay", "milestones");
    BAD(keel_lr_multi_step_decay_create(0.1, repeated, 2, 0.1, &s),
        "MultiStepDecay", "strictly increasing");
    BAD(keel_lr_multi_step_decay_create(0.1, NULL, 2, 0.1, &s),
        "MultiStepDecay", "milestones");
    BAD(keel_lr_multi_step_decay_create(0.1, unsorted, 1, 1.5, &s),
        "MultiStepDecay", "gamma");
    BAD(keel_lr_multi_step_decay_create(-1, unsorted, 1, 0.5, &s),
        "MultiStepDecay", "learning_rate");
    /* ExponentialDecay */
    BAD(keel_lr_exponential_decay_create(0.1, 1.0, &s), "ExponentialDecay",
        "gamma");
    BAD(keel_lr_exponential_decay_create(0.1, 0.0, &s), "ExponentialDecay",
        "gamma");
    BAD(keel_lr_exponential_decay_create(0.1, -0.5, &s), "ExponentialDecay",
        "gamma");
    BAD(keel_lr_exponential_decay_create(-0.1, 0.5, &s), "ExponentialDecay",
        "learning_rate");
    /* CosineAnnealingDecay */
    BAD(keel_lr_cosine_annealing_decay_create(0.1, 0, 0, &s),
        "CosineAnnealingDecay", "T_max");
    BAD(keel_lr_cosine_annealing_decay_create(0.1, -1, 0, &s),
        "CosineAnnealingDecay", "T_max");
    BAD(keel_lr_cosine_annealing_decay_create(0.1, 5, NAN, &s),
        "CosineAnnealingDecay", "eta_min");
    BAD(keel_lr_cosine_annealing_decay_create(-0.1, 5, 0, &s),
        "CosineAnnealingDecay", "learning_rate");
    /* PolynomialDecay */
    BAD(keel_lr_polynomial_decay_create(0.1, 0, 1e-4, 1.0, false, &s),
        "PolynomialDecay", "decay_steps");
    BAD(keel_lr_polynomial_decay_create(0.1, 10, 1e-4, 0.0, false, &s),
        "PolynomialDecay", "power");
    BAD(keel_lr_polynomial_decay_create(0.1, 10, 1e-4, -1.0, true, &s),
        "PolynomialDecay", "power");
    BAD(keel_lr_polynomial_decay_create(0.1, 10, NAN, 1.0, true, &s),
        "PolynomialDecay", "end_lr");
    /* LinearWarmup */
    BAD(keel_lr_linear_warmup_create(0.1, -1, 0.0, 0.1, &s), "LinearWarmup",
        "warmup_steps");
    BAD(keel_lr_linear_warmup_create(0.1, 0, 0.0, 0.1, &s), "LinearWarmup",
        "warmup_steps");
    BAD(keel_lr_linear_warmup_create(0.1, 5, 0.1, 0.1, &s), "LinearWarmup",
        "end_lr", "start_lr");
    BAD(keel_lr_linear_warmup_create(0.1, 5, 0.2, 0.1, &s), "LinearWarmup",
        "end_lr");
    BAD(keel_lr_linear_warmup_create(0.1, 5, -0.1, 0.1, &s), "LinearWarmup",
        "start_lr");
    BAD(keel_lr_linear_warmup_create(NAN, 5, 0.0, 0.1, &s), "LinearWarmup",
        "learning_rate");
    BAD(keel_lr_linear_warmup_wrap(NULL, 5, 0.0, 0.1, &s), "LinearWarmup",
        "learning_rate");
    /* A failed wrap leaves the scheduler with the caller. */
    OK(keel_lr_step_decay_create(0.1, 2, 0.1, &inner));
    BAD(keel_lr_linear_warmup_wrap(inner, 0, 0.0, 0.1, &s), "LinearWarmup",
        "warmup_steps");
    OK(keel_lr_scheduler_step(inner));
    keel_lr_scheduler_free(inner);
    /* OneCycleLR */
    BAD(keel_lr_one_cycle_create(-0.1, 100, 25, 1e-4, 0.3, "cos", false, &s),
        "OneCycleLR", "max_learning_rate");
    BAD(keel_lr_one_cycle_create(0.1, 100, 25, -1e-4, 0.3, "cos", false, &s),
        "OneCycleLR", "end_learning_rate");
    BAD(keel_lr_one_cycle_create(0.1, 0, 25, 1e-4, 0.3, "cos", false, &s),
        "OneCycleLR", "total_steps");
    BAD(keel_lr_one_cycle_create(0.1, 100, 25, 1e-4, 1.5, "cos", false, &s),
        "OneCycleLR", "phase_pct");
    BAD(keel_lr_one_cycle_create(0.1, 100, 25, 1e-4, -0.1, "cos", false, &s),
        "OneCycleLR", "phase_pct");
    BAD(keel_lr_one_cycle_create(0.1, 100, 25, 1e-4, NAN, "cos", false, &s),
        "OneCycleLR", "phase_pct");
    BAD(keel_lr_one_cycle_create(0.1, 100, 25, 1e-4, 0.5, "cos", true, &s),
        "OneCycleLR", "phase_pct", "three_phase");
    BAD(keel_lr_one_cycle_create(0.1, 100, 25, 1e-4, 0.3, "Cos", false, &s),
        "OneCycleLR", "anneal_strategy", "'Cos'");
    BAD(keel_lr_one_cycle_create(0.1, 100, 25, 1e-4, 0.3, "exp", false, &s),
        "OneCycleLR", "anneal_strategy");
    BAD(keel_lr_one_cycle_create(0.1, 100, 0, 1e-4, 0.3, "cos", false, &s),
        "OneCycleLR", "divide_factor");
    BAD(keel_lr_one_cycle_create(0.1, 100, -2, 1e-4, 0.3, "cos", false, &s),
        "OneCycleLR", "divide_factor");
    /* ReduceOnPlateau */
    BAD(keel_lr_reduce_on_plateau_create(0.1, "mean", 0.1, 10, 1e-4, "rel",
                                         0, 0, 1e-8, &s),
        "ReduceOnPlateau", "mode", "'mean'");
    BAD(keel_lr_reduce_on_plateau_create(0.1, "min", 1.0, 10, 1e-4, "rel", 0,
                                         0, 1e-8, &s),
        "ReduceOnPlateau", "factor");
    BAD(keel_lr_reduce_on_plateau_create(0.1, "min", 0.1, 10, 1e-4, "pct", 0,
                                         0, 1e-8, &s),
        "ReduceOnPlateau", "threshold_mode", "'pct'");
    BAD(keel_lr_reduce_on_plateau_create(0.1, "min", 0.1, 10, NAN, "rel", 0,
                                         0, 1e-8, &s),
        "ReduceOnPlateau", "threshold");
    BAD(keel_lr_reduce_on_plateau_create(0.1, "min", 0.1, 10, 1e-4, "rel", 0,
                                         NAN, 1e-8, &s),
        "ReduceOnPlateau", "min_lr");
#undef BAD
}

/* What Paddle accepts, keel accepts. */
static void test_paddle_accepts(void)
{
    keel_lr_scheduler *s;

    /* Negative and zero gamma for the step decays. */
    OK(keel_lr_step_decay_create(0.1, 1, -2.0, &s));
    keel_lr_scheduler_free(s);
    OK(keel_lr_multi_step_decay_create(0.1, NULL, 0, 0.0, &s));
    keel_lr_scheduler_free(s);
    /* A ReduceOnPlateau with a negative rate, patience and cooldown. */
    OK(keel_lr_reduce_on_plateau_create(-1.0, "max", -0.5, -1, -1.0, "ABS",
                                        -2, -1.0, 0.0, &s));
    OK(keel_lr_scheduler_step_metric(s, 1.0));
    keel_lr_scheduler_free(s);
    /* OneCycleLR: max 0 with a negative divide_factor gives -0.0, which
     * Paddle lets through; phase_pct 1. */
    OK(keel_lr_one_cycle_create(0.0, 10, -1.0, 0.0, 0.3, "linear", false,
                                &s));
    keel_lr_scheduler_free(s);
    OK(keel_lr_one_cycle_create(0.1, 10, 25, 0.0, 1.0, "linear", false, &s));
    keel_lr_scheduler_free(s);
    /* Polynomial decay to a higher end_lr, cosine to a higher eta_min. */
    OK(keel_lr_polynomial_decay_create(0.1, 10, 1.0, 0.5, false, &s));
    keel_lr_scheduler_free(s);
    OK(keel_lr_cosine_annealing_decay_create(0.0, 10, 1.0, &s));
    keel_lr_scheduler_free(s);
}

/* ---- stepping rules ------------------------------------------------------ */

static void test_step_rules(void)
{
    keel_lr_scheduler *s, *p, *w, *w2, *w3, *w4, *in;

    OK(keel_lr_step_decay_create(1.0, 3, 0.5, &s));
    OK(keel_lr_reduce_on_plateau_create(1.0, "min", 0.1, 10, 1e-4, "rel", 0,
                                        0, 1e-8, &p));
    ERR(keel_lr_scheduler_step(p), KEEL_STATUS_INVALID_ARGUMENT,
        "ReduceOnPlateau", "step_metric");
    ERR(keel_lr_scheduler_step_to(p, 3), KEEL_STATUS_INVALID_ARGUMENT,
        "ReduceOnPlateau");
    ERR(keel_lr_scheduler_step_metric(s, 1.0), KEEL_STATUS_INVALID_ARGUMENT,
        "StepDecay", "metric");
    ERR(keel_lr_scheduler_step(NULL), KEEL_STATUS_INVALID_ARGUMENT, "NULL");
    ERR(keel_lr_scheduler_step_metric(NULL, 1), KEEL_STATUS_INVALID_ARGUMENT,
        "NULL");
    ERR(keel_lr_scheduler_step_to(s, -1), KEEL_STATUS_INVALID_ARGUMENT,
        "StepDecay", "epoch");
    CU_ASSERT_EQUAL(keel_lr_scheduler_last_epoch(s), 0);
    CU_ASSERT_EQUAL(keel_lr_scheduler_last_epoch(p), 0);
    CU_ASSERT(isnan(keel_lr_scheduler_last_lr(NULL)));
    CU_ASSERT_EQUAL(keel_lr_scheduler_last_epoch(NULL), -1);
    CU_ASSERT_STRING_EQUAL(keel_lr_scheduler_name(NULL), "");
    keel_lr_scheduler_free(NULL);

    /* step_to for an epoch formula. */
    OK(keel_lr_scheduler_step_to(s, 10));
    CU_ASSERT_DOUBLE_EQUAL(keel_lr_scheduler_last_lr(s), 0.125, 0);
    OK(keel_lr_scheduler_step(s));
    CU_ASSERT_EQUAL(keel_lr_scheduler_last_epoch(s), 11);

    /* Wrapping: not a ReduceOnPlateau, not twice, not too deep. */
    ERR(keel_lr_linear_warmup_wrap(p, 5, 0.0, 0.1, &w),
        KEEL_STATUS_INVALID_ARGUMENT, "LinearWarmup", "ReduceOnPlateau");
    OK(keel_lr_linear_warmup_wrap(s, 5, 0.0, 0.1, &w));
    ERR(keel_lr_linear_warmup_wrap(s, 5, 0.0, 0.1, &w2),
        KEEL_STATUS_INVALID_ARGUMENT, "LinearWarmup", "already wrapped");
    OK(keel_lr_linear_warmup_wrap(w, 5, 0.0, 0.1, &w2));
    OK(keel_lr_linear_warmup_wrap(w2, 5, 0.0, 0.1, &w3));
    ERR(keel_lr_linear_warmup_wrap(w3, 5, 0.0, 0.1, &w4),
        KEEL_STATUS_INVALID_ARGUMENT, "LinearWarmup", "nests 3");
    /* The inner schedulers follow the outer one: after 15 warm-up epochs
     * the step decay restarts at its epoch 0. */
    for (int e = 1; e <= 15; e++)
        OK(keel_lr_scheduler_step(w3));
    CU_ASSERT_DOUBLE_EQUAL(keel_lr_scheduler_last_lr(w3), 1.0, 0);
    CU_ASSERT_EQUAL(keel_lr_scheduler_last_epoch(s), 0);
    for (int e = 1; e <= 6; e++)
        OK(keel_lr_scheduler_step(w3));
    CU_ASSERT_DOUBLE_EQUAL(keel_lr_scheduler_last_lr(w3), 0.25, 0);
    CU_ASSERT_EQUAL(keel_lr_scheduler_last_epoch(s), 6);
    CU_ASSERT_EQUAL(keel_lr_scheduler_last_epoch(w), 11);
    keel_lr_scheduler_free(w3);
    keel_lr_scheduler_free(p);

    /* A wrapped OneCycleLR's end stops the warm-up too, unchanged. */
    OK(keel_lr_one_cycle_create(0.1, 5, 25, 1e-4, 0.3, "cos", false, &in));
    OK(keel_lr_linear_warmup_wrap(in, 2, 0.0, 0.1, &w));
    for (int e = 1; e <= 7; e++)
        OK(keel_lr_scheduler_step(w));
    ERR(keel_lr_scheduler_step(w), KEEL_STATUS_INVALID_STATE, "OneCycleLR");
    CU_ASSERT_EQUAL(keel_lr_scheduler_last_epoch(w), 7);
    CU_ASSERT_EQUAL(keel_lr_scheduler_last_epoch(in), 5);
    keel_lr_scheduler_free(w);
}

int main(void)
{
    static const struct {
        const char *name;
        CU_TestFunc fn;
    } tests[] = {
        {"StepDecay follows its formula", test_step_decay},
        {"MultiStepDecay follows its formula", test_multi_step_decay},
        {"MultiStepDecay copies its milestones", test_multi_step_copies},
        {"ExponentialDecay follows its formula", test_exponential_decay},
        {"CosineAnnealingDecay follows its formula", test_cosine_annealing},
        {"CosineAnnealingDecay: T_max 1, step_to",
         test_cosine_t_max_1_and_jumps},
        {"PolynomialDecay follows its formula (cycle and not)",
         test_polynomial_decay},
        {"LinearWarmup around a constant", test_linear_warmup_constant},
        {"LinearWarmup around schedulers", test_linear_warmup_wrapped},
        {"OneCycleLR follows its phases", test_one_cycle},
        {"OneCycleLR: the end, zero-length phases", test_one_cycle_end},
        {"ReduceOnPlateau follows its algorithm", test_reduce_on_plateau},
        {"ReduceOnPlateau by hand", test_plateau_by_hand},
        {"state: restored mid-run, the curve goes on",
         test_state_round_trip},
        {"state: the fields", test_state_fields},
        {"state: built by name", test_state_by_name},
        {"state: bad states change nothing", test_state_errors},
        {"argument errors name scheduler and parameter",
         test_argument_errors},
        {"what Paddle accepts is accepted", test_paddle_accepts},
        {"stepping rules and wrapping", test_step_rules},
        {"get_lr (formula now) and last_lr (stored)", test_get_lr_and_last_lr},
        {"keel_last_error: replaced whole, cleared", test_last_error_contract},
    };
    CU_pSuite suite;
    unsigned failed;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    suite = CU_add_suite("lr", NULL, NULL);
    for (size_t i = 0; suite && i < sizeof(tests) / sizeof(tests[0]); i++)
        CU_add_test(suite, tests[i].name, tests[i].fn);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed() +
             CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
