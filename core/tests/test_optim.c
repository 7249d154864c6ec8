// SPDX-License-Identifier: Apache-2.0
/*
 * Optimizers: each kind's first 20 steps against the Paddle update formulas
 * evaluated here in double, gradient clips, L2 versus decoupled decay,
 * learning rates from a scheduler, state dict round trips and errors.
 *
 * Parameters are float64 so that the reference can be tight (the beta-power
 * accumulators then are float64 too, as in Paddle).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include <keel/autograd.h>
#include <keel/io.h>
#include <keel/nn.h>
#include <keel/ops.h>
#include <keel/optim.h>

#include "check.h"

#define STEPS 20
#define NP 3   /* parameters: w [3], bias [2], frozen [2] (never a grad) */
#define MAXN 3

static const int sizes[NP] = {3, 2, 2};
static const char *const names[NP] = {"w", "bias", "frozen"};
static const double init[NP][MAXN] = {
    {0.5, -1.25, 2.0}, {0.75, -0.3, 0}, {1.5, -2.5, 0}};

/* ---- the reference ------------------------------------------------------ */

struct ref {
    keel_optimizer_kind kind;
    keel_optimizer_options o;
    double p[NP][MAXN], a1[NP][MAXN], a2[NP][MAXN];
    double b1p[NP], b2p[NP];
    bool started[NP];
};

/* The gradient of step k from the current parameters (frozen: none). */
static void make_grad(int k, int i, const double *p, double *g)
{
    for (int j = 0; j < sizes[i]; j++)
        g[j] = 3.0 * (p[j] - 0.1 * (j + 1)) + 0.5 * sin(k + 2.0 * i + j);
}

static bool ref_decays(const char *name, void *user)
{
    (void)user;
    return strcmp(name, "bias") != 0;
}

static void ref_clip(const keel_grad_clip *c, double g[NP][MAXN])
{
    double total = 0;

    if (c->kind == KEEL_GRAD_CLIP_GLOBAL_NORM) {
        for (int i = 0; i < NP - 1; i++)
            for (int j = 0; j < sizes[i]; j++)
                total += g[i][j] * g[i][j];
        total = sqrt(total);
        for (int i = 0; i < NP - 1; i++)
            for (int j = 0; j < sizes[i]; j++)
                g[i][j] *= c->clip_norm / fmax(total, c->clip_norm);
        return;
    }
    for (int i = 0; i < NP - 1; i++) {
        double n = 0;

        for (int j = 0; j < sizes[i]; j++)
            n += g[i][j] * g[i][j];
        n = sqrt(n);
        for (int j = 0; j < sizes[i]; j++) {
            if (c->kind == KEEL_GRAD_CLIP_NORM && n > c->clip_norm)
                g[i][j] *= c->clip_norm / n;
            else if (c->kind == KEEL_GRAD_CLIP_VALUE)
                g[i][j] = fmin(fmax(g[i][j], c->min), c->max);
        }
    }
}

static void ref_step(struct ref *r, int k, double lr)
{
    const keel_optimizer_options *o = &r->o;
    double g[NP][MAXN];

    for (int i = 0; i < NP - 1; i++)
        make_grad(k, i, r->p[i], g[i]);
    ref_clip(&o->grad_clip, g);
    for (int i = 0; i < NP - 1; i++) {
        double *p = r->p[i], *m = r->a1[i], *v = r->a2[i];
        double wd = r->kind == KEEL_OPTIM_ADAMW ? 0 : o->weight_decay;

        if (!r->started[i]) {
            r->b1p[i] = o->beta1;
            r->b2p[i] = o->beta2;
            r->started[i] = true;
        }
        for (int j = 0; j < sizes[i]; j++) {
            double gj = g[i][j] + wd * p[j];
            double b1p = r->b1p[i], b2p = r->b2p[i], lr_t;

            switch (r->kind) {
            case KEEL_OPTIM_SGD:
                p[j] -= lr * gj;
                break;
            case KEEL_OPTIM_MOMENTUM:
                m[j] = o->momentum * m[j] + gj;
                p[j] -= o->use_nesterov ? lr * (gj + o->momentum * m[j])
                                        : lr * m[j];
                break;
            default:
                if (r->kind == KEEL_OPTIM_ADAMW &&
                    (!o->apply_decay_param_fun ||
                     o->apply_decay_param_fun(names[i], NULL)))
                    p[j] -= lr * o->weight_decay * p[j];
                m[j] = o->beta1 * m[j] + (1 - o->beta1) * gj;
                v[j] = o->beta2 * v[j] + (1 - o->beta2) * gj * gj;
                lr_t = lr * sqrt(1 - b2p) / (1 - b1p);
                p[j] -= lr_t * m[j] / (sqrt(v[j]) + o->epsilon * sqrt(1 - b2p));
                break;
            }
        }
        r->b1p[i] *= o->beta1;
        r->b2p[i] *= o->beta2;
    }
}

/* ---- keel side ---------------------------------------------------------- */

static void make_params(keel_tensor **t, keel_named_param *np)
{
    for (int i = 0; i < NP; i++) {
        int64_t n = sizes[i];

        OK(keel_tensor_from_host(init[i], KEEL_F64, 1, &n, NULL, &t[i]));
        OK(keel_tensor_set_stop_gradient(t[i], false));
        np[i].name = names[i];
        np[i].param = t[i];
    }
}

static void read_param(keel_tensor *t, double *out)
{
    OK(keel_tensor_to_host(t, out,
                           (size_t)keel_tensor_numel(t) * sizeof(double)));
}

static void set_grads(keel_tensor **t, int k)
{
    for (int i = 0; i < NP - 1; i++) {
        double p[MAXN], g[MAXN];
        int64_t n = sizes[i];
        keel_tensor *gt = NULL;

        read_param(t[i], p);
        make_grad(k, i, p, g);
        OK(keel_tensor_from_host(g, KEEL_F64, 1, &n, NULL, &gt));
        OK(keel_tensor_set_grad(t[i], gt));
        keel_tensor_free(gt);
    }
}

static bool close_rel(double got, double want)
{
    return fabs(got - want) <= 1e-12 + 1e-10 * fabs(want);
}

/* Run `kind` with `o` (a scheduler in o->lr_scheduler is stepped after
 * every step) for STEPS steps against the reference. */
static void run_case(const char *label, keel_optimizer_kind kind,
                     keel_optimizer_options o)
{
    keel_tensor *t[NP] = {NULL};
    keel_named_param np[NP];
    keel_optimizer *opt = NULL;
    struct ref r;
    int bad = 0;

    memset(&r, 0, sizeof(r));
    r.kind = kind;
    r.o = o;
    memcpy(r.p, init, sizeof(r.p));
    make_params(t, np);
    OK(keel_optimizer_create(kind, np, NP, &o, &opt));
    for (int k = 0; k < STEPS; k++) {
        double lr = keel_optimizer_get_lr(opt);

        set_grads(t, k);
        OK(keel_optimizer_step(opt));
        ref_step(&r, k, lr);
        if (o.lr_scheduler)
            OK(keel_lr_scheduler_step(o.lr_scheduler));
        for (int i = 0; i < NP; i++) {
            double got[MAXN];

            read_param(t[i], got);
            for (int j = 0; j < sizes[i]; j++) {
                if (close_rel(got[j], r.p[i][j]))
                    continue;
                if (bad++ < 3)
                    fprintf(stderr, "\n  %s: step %d %s[%d]: %.17g vs %.17g",
                            label, k, names[i], j, got[j], r.p[i][j]);
            }
        }
        OK(keel_optimizer_clear_grad(opt));
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(keel_optimizer_step_count(opt), STEPS);
    /* the frozen parameter never had a gradient */
    {
        double f[MAXN];

        read_param(t[2], f);
        CU_ASSERT(f[0] == init[2][0] && f[1] == init[2][1]);
    }
    keel_optimizer_free(opt);
    for (int i = 0; i < NP; i++)
        keel_tensor_free(t[i]);
}

static void test_sgd(void)
{
    keel_optimizer_options o = keel_optimizer_default_options(KEEL_OPTIM_SGD);

    o.learning_rate = 0.05;
    run_case("sgd", KEEL_OPTIM_SGD, o);
    o.weight_decay = 0.1;
    run_case("sgd L2", KEEL_OPTIM_SGD, o);
}

/* Parameter groups: w at 0.1x the learning rate with its own decay,
 * bias with the optimizer's; one SGD step against the formula
 * p -= lr * scale * (g + wd * p). */
static void test_param_options(void)
{
    keel_optimizer_options o = keel_optimizer_default_options(KEEL_OPTIM_SGD);
    keel_tensor *t[NP] = {NULL};
    keel_named_param np[NP];
    keel_optimizer *opt = NULL;
    double p0[MAXN], g[MAXN], got[MAXN];

    o.learning_rate = 0.5;
    o.weight_decay = 0.2;
    make_params(t, np);
    OK(keel_optimizer_create(KEEL_OPTIM_SGD, np, NP, &o, &opt));
    OK(keel_optimizer_set_param_options(opt, "w", 0.1, 0.05));
    OK(keel_optimizer_set_param_options(opt, "bias", 1.0, NAN));
    set_grads(t, 0);
    OK(keel_optimizer_step(opt));
    for (int i = 0; i < 2; i++) {
        double scale = i == 0 ? 0.1 : 1.0, wd = i == 0 ? 0.05 : 0.2;

        memcpy(p0, init[i], sizeof(p0));
        make_grad(0, i, p0, g);
        read_param(t[i], got);
        for (int j = 0; j < sizes[i]; j++)
            CU_ASSERT(close_rel(got[j], p0[j] - 0.5 * scale *
                                                    (g[j] + wd * p0[j])));
    }
    ERR(keel_optimizer_set_param_options(opt, "nope", 1.0, NAN),
        KEEL_STATUS_INVALID_ARGUMENT, "no parameter named 'nope'");
    ERR(keel_optimizer_set_param_options(opt, "w", -1.0, NAN),
        KEEL_STATUS_INVALID_ARGUMENT, "learning-rate scale");
    ERR(keel_optimizer_set_param_options(opt, "w", 1.0, INFINITY),
        KEEL_STATUS_INVALID_ARGUMENT, "weight_decay must be finite");
    ERR(keel_optimizer_set_param_options(NULL, "w", 1.0, NAN),
        KEEL_STATUS_INVALID_ARGUMENT, "opt is NULL");
    keel_optimizer_free(opt);
    for (int i = 0; i < NP; i++)
        keel_tensor_free(t[i]);
}

static void test_momentum(void)
{
    keel_optimizer_options o =
        keel_optimizer_default_options(KEEL_OPTIM_MOMENTUM);

    o.learning_rate = 0.02;
    run_case("momentum", KEEL_OPTIM_MOMENTUM, o);
    o.use_nesterov = true;
    run_case("nesterov", KEEL_OPTIM_MOMENTUM, o);
    o.weight_decay = 0.05;
    o.momentum = 0.8;
    run_case("nesterov L2", KEEL_OPTIM_MOMENTUM, o);
}

static void test_adam(void)
{
    keel_optimizer_options o = keel_optimizer_default_options(KEEL_OPTIM_ADAM);

    CU_ASSERT(o.learning_rate == 1e-3 && o.beta1 == 0.9 &&
              o.beta2 == 0.999 && o.epsilon == 1e-8 && o.weight_decay == 0);
    o.learning_rate = 0.05;
    run_case("adam", KEEL_OPTIM_ADAM, o);
    o.weight_decay = 0.1; /* coupled L2 */
    o.beta1 = 0.8;
    o.beta2 = 0.95;
    o.epsilon = 1e-6;
    run_case("adam L2", KEEL_OPTIM_ADAM, o);
}

static void test_adamw(void)
{
    keel_optimizer_options o =
        keel_optimizer_default_options(KEEL_OPTIM_ADAMW);

    CU_ASSERT(o.weight_decay == 0.01);
    o.learning_rate = 0.05;
    run_case("adamw", KEEL_OPTIM_ADAMW, o);
    o.weight_decay = 0.2;
    o.apply_decay_param_fun = ref_decays;
    run_case("adamw no bias decay", KEEL_OPTIM_ADAMW, o);
}

/* Decoupled decay and L2 give different weights for the same coefficient. */
static void test_l2_vs_decoupled(void)
{
    keel_tensor *t1[NP], *t2[NP];
    keel_named_param n1[NP], n2[NP];
    keel_optimizer *a = NULL, *w = NULL;
    keel_optimizer_options o = keel_optimizer_default_options(KEEL_OPTIM_ADAM);
    double p1[MAXN], p2[MAXN];

    o.learning_rate = 0.05;
    o.weight_decay = 0.1;
    make_params(t1, n1);
    make_params(t2, n2);
    OK(keel_optimizer_create(KEEL_OPTIM_ADAM, n1, NP, &o, &a));
    OK(keel_optimizer_create(KEEL_OPTIM_ADAMW, n2, NP, &o, &w));
    for (int k = 0; k < 5; k++) {
        set_grads(t1, k);
        set_grads(t2, k);
        OK(keel_optimizer_step(a));
        OK(keel_optimizer_step(w));
    }
    read_param(t1[0], p1);
    read_param(t2[0], p2);
    CU_ASSERT(fabs(p1[0] - p2[0]) > 1e-6);
    /* the stored gradient is not changed by the L2 term or the step */
    {
        keel_tensor *g = keel_tensor_grad(t1[0]);
        double before[MAXN], after[MAXN];

        CU_ASSERT_PTR_NOT_NULL_FATAL(g);
        read_param(g, before);
        keel_tensor_free(g);
        OK(keel_optimizer_step(a));
        g = keel_tensor_grad(t1[0]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(g);
        read_param(g, after);
        keel_tensor_free(g);
        CU_ASSERT(memcmp(before, after, sizeof(double) * 3) == 0);
    }
    keel_optimizer_free(a);
    keel_optimizer_free(w);
    for (int i = 0; i < NP; i++) {
        keel_tensor_free(t1[i]);
        keel_tensor_free(t2[i]);
    }
}

static void test_scheduler(void)
{
    keel_optimizer_options o =
        keel_optimizer_default_options(KEEL_OPTIM_MOMENTUM);
    keel_lr_scheduler *s = NULL;

    OK(keel_lr_step_decay_create(0.1, 3, 0.5, &s));
    o.lr_scheduler = s;
    o.learning_rate = NAN; /* ignored with a scheduler */
    run_case("momentum+StepDecay", KEEL_OPTIM_MOMENTUM, o);
    keel_lr_scheduler_free(s);
    OK(keel_lr_step_decay_create(0.1, 3, 0.5, &s));
    o = keel_optimizer_default_options(KEEL_OPTIM_ADAMW);
    o.lr_scheduler = s;
    run_case("adamw+StepDecay", KEEL_OPTIM_ADAMW, o);
    keel_lr_scheduler_free(s);
}

static void test_clips(void)
{
    keel_optimizer_options o = keel_optimizer_default_options(KEEL_OPTIM_SGD);

    o.learning_rate = 0.05;
    o.grad_clip.kind = KEEL_GRAD_CLIP_GLOBAL_NORM;
    o.grad_clip.clip_norm = 0.5;
    run_case("sgd global norm", KEEL_OPTIM_SGD, o);
    o.grad_clip.clip_norm = 100; /* never binds: scale exactly 1 */
    run_case("sgd global norm loose", KEEL_OPTIM_SGD, o);
    o.grad_clip.kind = KEEL_GRAD_CLIP_NORM;
    o.grad_clip.clip_norm = 0.3;
    run_case("sgd norm", KEEL_OPTIM_SGD, o);
    o.grad_clip.kind = KEEL_GRAD_CLIP_VALUE;
    o.grad_clip.min = -0.2;
    o.grad_clip.max = 0.25;
    run_case("sgd value", KEEL_OPTIM_SGD, o);
    o = keel_optimizer_default_options(KEEL_OPTIM_ADAM);
    o.learning_rate = 0.05;
    o.grad_clip.kind = KEEL_GRAD_CLIP_GLOBAL_NORM;
    o.grad_clip.clip_norm = 1.0;
    run_case("adam global norm", KEEL_OPTIM_ADAM, o);
}

/* Save mid-run, restore into fresh objects, compare the rest bit for bit. */
static void resume_case(keel_optimizer_kind kind)
{
    keel_tensor *t[NP], *u[NP];
    keel_named_param n1[NP], n2[NP];
    keel_optimizer *a = NULL, *b = NULL;
    keel_lr_scheduler *s1 = NULL, *s2 = NULL;
    keel_state_dict *sd = NULL;
    keel_optimizer_options o = keel_optimizer_default_options(kind);
    char path[64];

    /* one file per process: the host and discrete runs share a folder */
    snprintf(path, sizeof(path), "test_optim_state_%ld.safetensors",
             (long)getpid());
    o.learning_rate = 0.05;
    o.weight_decay = 0.01;
    o.use_nesterov = true;
    o.grad_clip.kind = KEEL_GRAD_CLIP_GLOBAL_NORM;
    o.grad_clip.clip_norm = 2.0;
    OK(keel_lr_cosine_annealing_decay_create(0.05, 7, 0.001, &s1));
    OK(keel_lr_cosine_annealing_decay_create(0.05, 7, 0.001, &s2));
    make_params(t, n1);
    make_params(u, n2);
    o.lr_scheduler = s1;
    OK(keel_optimizer_create(kind, n1, NP, &o, &a));
    o.lr_scheduler = s2;
    OK(keel_optimizer_create(kind, n2, NP, &o, &b));
    for (int k = 0; k < 10; k++) {
        set_grads(t, k);
        OK(keel_optimizer_step(a));
        OK(keel_lr_scheduler_step(s1));
    }
    OK(keel_state_dict_create(&sd));
    OK(keel_optimizer_state_get(a, sd));
    if (kind == KEEL_OPTIM_ADAM) {
        CU_ASSERT(keel_state_dict_contains(sd, "w_moment1_0"));
        CU_ASSERT(keel_state_dict_contains(sd, "bias_beta2_pow_acc_0"));
        CU_ASSERT(!keel_state_dict_contains(sd, "frozen_moment1_0"));
    }
    if (kind == KEEL_OPTIM_MOMENTUM)
        CU_ASSERT(keel_state_dict_contains(sd, "w_velocity_0"));
    CU_ASSERT(keel_state_dict_contains(sd, "global_step"));
    CU_ASSERT(keel_state_dict_contains(sd, "LR_Scheduler.last_epoch"));
    for (int i = 0; i < NP; i++)
        OK(keel_state_dict_set(sd, names[i], t[i]));
    OK(keel_save(path, sd));
    keel_state_dict_free(sd);
    sd = NULL;
    OK(keel_load(path, NULL, &sd));
    remove(path);
    for (int i = 0; i < NP; i++) {
        double p[MAXN];

        read_param(keel_state_dict_get(sd, names[i]), p);
        keel_tensor_free(u[i]);
        {
            int64_t n = sizes[i];

            OK(keel_tensor_from_host(p, KEEL_F64, 1, &n, NULL, &u[i]));
        }
    }
    /* the optimizer holds the old tensors: rebuild it over the new ones */
    keel_optimizer_free(b);
    for (int i = 0; i < NP; i++)
        n2[i].param = u[i];
    OK(keel_optimizer_create(kind, n2, NP, &o, &b));
    OK(keel_optimizer_state_set(b, sd));
    CU_ASSERT_EQUAL(keel_optimizer_step_count(b), 10);
    CU_ASSERT_EQUAL(keel_lr_scheduler_last_epoch(s2), 10);
    CU_ASSERT(keel_optimizer_get_lr(a) == keel_optimizer_get_lr(b));
    for (int k = 10; k < STEPS; k++) {
        set_grads(t, k);
        set_grads(u, k);
        OK(keel_optimizer_step(a));
        OK(keel_optimizer_step(b));
        OK(keel_lr_scheduler_step(s1));
        OK(keel_lr_scheduler_step(s2));
        for (int i = 0; i < NP; i++) {
            double p[MAXN], q[MAXN];

            read_param(t[i], p);
            read_param(u[i], q);
            CU_ASSERT(memcmp(p, q, sizes[i] * sizeof(double)) == 0);
        }
    }
    keel_state_dict_free(sd);
    keel_optimizer_free(a);
    keel_optimizer_free(b);
    keel_lr_scheduler_free(s1);
    keel_lr_scheduler_free(s2);
    for (int i = 0; i < NP; i++) {
        keel_tensor_free(t[i]);
        keel_tensor_free(u[i]);
    }
}

static void test_resume(void)
{
    resume_case(KEEL_OPTIM_SGD);
    resume_case(KEEL_OPTIM_MOMENTUM);
    resume_case(KEEL_OPTIM_ADAM);
    resume_case(KEEL_OPTIM_ADAMW);
}

/* Gradients from keel_backward on a least-squares loss. */
static void test_backward(void)
{
    keel_tensor *t[NP], *x = NULL, *y = NULL, *d = NULL, *sq = NULL;
    keel_tensor *loss = NULL;
    keel_named_param np[NP];
    keel_optimizer *opt = NULL;
    keel_optimizer_options o = keel_optimizer_default_options(KEEL_OPTIM_SGD);
    const double target[3] = {1, 2, 3};
    int64_t n = 3;
    double first = 0, last = 0;

    make_params(t, np);
    o.learning_rate = 0.1;
    OK(keel_optimizer_create(KEEL_OPTIM_SGD, np, 1, &o, &opt));
    OK(keel_tensor_from_host(target, KEEL_F64, 1, &n, NULL, &y));
    for (int k = 0; k < STEPS; k++) {
        OK(keel_subtract(t[0], y, &d));
        OK(keel_square(d, &sq));
        OK(keel_sum(sq, 0, NULL, false, &loss));
        OK(keel_tensor_item(loss, 0, k ? &last : &first));
        OK(keel_backward(loss, NULL, false));
        OK(keel_optimizer_step(opt));
        OK(keel_optimizer_clear_grad(opt));
        keel_tensor_free(d);
        keel_tensor_free(sq);
        keel_tensor_free(loss);
    }
    /* SGD on |w - y|^2 with lr 0.1: each step multiplies w - y by 0.8 */
    CU_ASSERT(close_rel(last, first * pow(0.64, STEPS - 1)));
    keel_optimizer_free(opt);
    keel_tensor_free(x);
    keel_tensor_free(y);
    for (int i = 0; i < NP; i++)
        keel_tensor_free(t[i]);
}

/* Paddle's AdamW(parameters=model.parameters()): built from a layer, the
 * optimizer updates exactly what one built by hand over the same named
 * parameters updates, keys its state by the layer's names, and reads the
 * scheduler's last_lr (not get_lr). */
static void test_from_layer(void)
{
    keel_layer *a = NULL, *b = NULL, *relu = NULL;
    keel_optimizer *oa = NULL, *ob = NULL, *bad = NULL;
    keel_optimizer_options o = keel_optimizer_default_options(KEEL_OPTIM_ADAMW);
    keel_lr_scheduler *sa = NULL, *sb = NULL;
    keel_state_dict *pa = NULL, *pb = NULL, *st = NULL;
    keel_named_param np[2];
    keel_tensor *x = NULL;
    int64_t xs[2] = {4, 3};

    keel_seed(7);
    OK(keel_nn_linear(3, 2, NULL, NULL, &a));
    keel_seed(7);
    OK(keel_nn_linear(3, 2, NULL, NULL, &b));
    OK(keel_lr_cosine_annealing_decay_create(0.1, 5, 0.0, &sa));
    OK(keel_lr_cosine_annealing_decay_create(0.1, 5, 0.0, &sb));
    o.lr_scheduler = sa;
    OK(keel_optimizer_create_from_layer(KEEL_OPTIM_ADAMW, a, &o, &oa));
    OK(keel_layer_parameters(b, &pb));
    CU_ASSERT_EQUAL_FATAL(keel_state_dict_count(pb), 2);
    for (int i = 0; i < 2; i++)
        OK(keel_state_dict_at(pb, i, &np[i].name, &np[i].param));
    o.lr_scheduler = sb;
    OK(keel_optimizer_create(KEEL_OPTIM_ADAMW, np, 2, &o, &ob));
    OK(keel_randn(2, xs, KEEL_F32, NULL, &x));
    for (int k = 0; k < 4; k++) {
        keel_layer *m[2] = {a, b};
        keel_optimizer *opt[2] = {oa, ob};
        keel_lr_scheduler *sc[2] = {sa, sb};

        for (int j = 0; j < 2; j++) {
            keel_tensor *y = NULL, *sq = NULL, *loss = NULL;

            OK(keel_layer_call(m[j], x, &y));
            OK(keel_square(y, &sq));
            OK(keel_sum(sq, 0, NULL, false, &loss));
            OK(keel_backward(loss, NULL, false));
            OK(keel_optimizer_step(opt[j]));
            OK(keel_optimizer_clear_grad(opt[j]));
            OK(keel_lr_scheduler_step(sc[j]));
            keel_tensor_free(y);
            keel_tensor_free(sq);
            keel_tensor_free(loss);
        }
        /* the optimizer uses last_lr; after a cosine step get_lr differs */
        CU_ASSERT_EQUAL(keel_optimizer_get_lr(oa),
                        keel_lr_scheduler_last_lr(sa));
        CU_ASSERT(keel_optimizer_get_lr(oa) != keel_lr_scheduler_get_lr(sa));
    }
    OK(keel_layer_parameters(a, &pa));
    for (int i = 0; i < 2; i++) {
        keel_tensor *ta = NULL, *tb = NULL;
        const char *na = NULL;
        double va, vb, v0;

        OK(keel_state_dict_at(pa, i, &na, &ta));
        CU_ASSERT_STRING_EQUAL(na, np[i].name);
        tb = np[i].param;
        for (int64_t e = 0; e < keel_tensor_numel(ta); e++) {
            OK(keel_tensor_item(ta, e, &va));
            OK(keel_tensor_item(tb, e, &vb));
            CU_ASSERT_EQUAL(va, vb);
        }
        /* and they did move (bias starts at 0) */
        OK(keel_tensor_item(ta, 0, &v0));
        if (!strcmp(na, "bias"))
            CU_ASSERT(v0 != 0.0);
    }
    OK(keel_state_dict_create(&st));
    OK(keel_optimizer_state_get(oa, st));
    CU_ASSERT(keel_state_dict_contains(st, "weight_moment1_0"));
    CU_ASSERT(keel_state_dict_contains(st, "bias_moment2_0"));
    CU_ASSERT_EQUAL(keel_optimizer_step_count(oa), 4);

    /* errors */
    ERR(keel_optimizer_create_from_layer(KEEL_OPTIM_SGD, NULL, NULL, &bad),
        KEEL_STATUS_INVALID_ARGUMENT, "layer is NULL");
    CU_ASSERT_PTR_NULL(bad);
    OK(keel_nn_activation_default(KEEL_ACT_RELU, &relu));
    ERR(keel_optimizer_create_from_layer(KEEL_OPTIM_SGD, relu, NULL, &bad),
        KEEL_STATUS_INVALID_ARGUMENT, "no parameters");
    CU_ASSERT_PTR_NULL(bad);

    keel_state_dict_free(st);
    keel_state_dict_free(pa);
    keel_state_dict_free(pb);
    keel_tensor_free(x);
    keel_optimizer_free(oa);
    keel_optimizer_free(ob);
    keel_lr_scheduler_free(sa);
    keel_lr_scheduler_free(sb);
    keel_layer_free(relu);
    keel_layer_free(a);
    keel_layer_free(b);
}

static void test_errors(void)
{
    keel_tensor *t[NP];
    keel_named_param np[NP];
    keel_optimizer *opt = (keel_optimizer *)1;
    keel_optimizer_options o;
    const keel_optimizer_kind A = KEEL_OPTIM_ADAM;

    make_params(t, np);
    ERR(keel_optimizer_create(A, NULL, 2, NULL, &opt),
        KEEL_STATUS_INVALID_ARGUMENT, "params");
    CU_ASSERT_PTR_NULL(opt);
    ERR(keel_optimizer_create(A, np, 0, NULL, &opt),
        KEEL_STATUS_INVALID_ARGUMENT, "params");
    o = keel_optimizer_default_options(A);
    o.learning_rate = -1;
    ERR(keel_optimizer_create(A, np, NP, &o, &opt),
        KEEL_STATUS_INVALID_ARGUMENT, "learning_rate");
    o.learning_rate = NAN;
    ERR(keel_optimizer_create(A, np, NP, &o, &opt),
        KEEL_STATUS_INVALID_ARGUMENT, "learning_rate");
    o = keel_optimizer_default_options(A);
    o.beta1 = 1.0;
    ERR(keel_optimizer_create(A, np, NP, &o, &opt),
        KEEL_STATUS_INVALID_ARGUMENT, "beta1");
    o.beta1 = 0.9;
    o.beta2 = -0.1;
    ERR(keel_optimizer_create(KEEL_OPTIM_ADAMW, np, NP, &o, &opt),
        KEEL_STATUS_INVALID_ARGUMENT, "beta2");
    o = keel_optimizer_default_options(A);
    o.epsilon = 0;
    ERR(keel_optimizer_create(A, np, NP, &o, &opt),
        KEEL_STATUS_INVALID_ARGUMENT, "epsilon");
    o = keel_optimizer_default_options(A);
    o.grad_clip.kind = KEEL_GRAD_CLIP_GLOBAL_NORM;
    o.grad_clip.clip_norm = 0;
    ERR(keel_optimizer_create(A, np, NP, &o, &opt),
        KEEL_STATUS_INVALID_ARGUMENT, "clip_norm");
    o.grad_clip.kind = KEEL_GRAD_CLIP_VALUE;
    o.grad_clip.min = 1;
    o.grad_clip.max = -1;
    ERR(keel_optimizer_create(A, np, NP, &o, &opt),
        KEEL_STATUS_INVALID_ARGUMENT, "min <= max");
    np[1].param = NULL;
    ERR(keel_optimizer_create(A, np, NP, NULL, &opt),
        KEEL_STATUS_INVALID_ARGUMENT, "parameter 1");
    np[1].param = t[1];
    np[1].name = "w";
    ERR(keel_optimizer_create(A, np, NP, NULL, &opt),
        KEEL_STATUS_INVALID_ARGUMENT, "duplicate");
    np[1].name = "bias";
    ERR(keel_optimizer_step(NULL), KEEL_STATUS_INVALID_ARGUMENT, "NULL");
    CU_ASSERT(isnan(keel_optimizer_get_lr(NULL)));
    OK(keel_optimizer_create(A, np, NP, NULL, &opt));
    ERR(keel_optimizer_set_lr(opt, -2), KEEL_STATUS_INVALID_ARGUMENT,
        "learning_rate");
    OK(keel_optimizer_set_lr(opt, 0.5));
    CU_ASSERT(keel_optimizer_get_lr(opt) == 0.5);
    {
        keel_state_dict *sd = NULL;

        OK(keel_state_dict_create(&sd));
        ERR(keel_optimizer_state_set(opt, sd), KEEL_STATUS_INVALID_ARGUMENT,
            "global_step");
        keel_state_dict_free(sd);
    }
    keel_optimizer_free(opt);
    keel_optimizer_free(NULL);
    for (int i = 0; i < NP; i++)
        keel_tensor_free(t[i]);
}

int main(void)
{
    static const struct {
        const char *name;
        CU_TestFunc fn;
    } tests[] = {
        {"SGD vs formula", test_sgd},
        {"parameter groups: lr scale and weight decay", test_param_options},
        {"Momentum and Nesterov vs formula", test_momentum},
        {"Adam vs formula", test_adam},
        {"AdamW and apply_decay_param_fun", test_adamw},
        {"L2 vs decoupled decay", test_l2_vs_decoupled},
        {"learning rate from a scheduler", test_scheduler},
        {"gradient clips", test_clips},
        {"state dict save and resume", test_resume},
        {"gradients from keel_backward", test_backward},
        {"created from a layer; reads last_lr", test_from_layer},
        {"errors", test_errors},
    };
    CU_pSuite suite;
    unsigned failed;

    if (keel_set_device("cpu:0") != KEEL_STATUS_OK) {
        fprintf(stderr, "cpu:0: %s\n", keel_last_error());
        return 1;
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    suite = CU_add_suite("optim", NULL, NULL);
    for (size_t i = 0; suite && i < sizeof(tests) / sizeof(tests[0]); i++)
        CU_add_test(suite, tests[i].name, tests[i].fn);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return failed ? 1 : 0;
}
