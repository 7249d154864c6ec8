/*
 * Autograd tests.
 *
 * 1. A numerical gradient check of every differentiable op of the catalog
 *    (GRAD != NONE, not itself a *_grad op) and of the views: inputs in
 *    float64, a random linear functional L = sum_j <w_j, out_j> of the
 *    outputs, autograd's dL/dx (through keel_grad with w as the output
 *    gradients) against central differences of L computed from forward
 *    runs. Inputs keep away from kinks and ties. The catalog is iterated,
 *    so an op that gains a backward rule without a case here fails.
 * 2. Graph semantics: stop_gradient defaults, accumulation across
 *    backward calls, clear_grad, retain_graph and the error on reuse,
 *    detach, no_grad scopes, a diamond, in-place modification detection,
 *    non-scalar backward, keel_grad, views and devices in a graph, graph
 *    freeing (memory returns to where it was) and an MLP trained for a
 *    few steps.
 *
 * Runs with KEEL_CPU_DEVICES=2, with host-addressable memory and in
 * discrete mode (KEEL_CPU_DISCRETE=1).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>

#include <keel/autograd.h>
#include <keel/ops.h>

#include "check.h"

/* ---- helpers ------------------------------------------------------------- */

/* Shapes: SH(2, 3) expands to "ndim, shape". */
#define SH(...)                                                              \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),               \
        (const int64_t[])                                                    \
    {                                                                        \
        __VA_ARGS__                                                          \
    }

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static double urand(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (double)((rng * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
}

static double uniform(double lo, double hi)
{
    return lo + (hi - lo) * urand();
}

static int64_t numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;

    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

static keel_tensor *from_f64(int ndim, const int64_t *shape, const double *v)
{
    keel_tensor *t = NULL;

    if (!ok_(keel_tensor_from_host(v, KEEL_F64, ndim, shape, NULL, &t),
             "from_f64"))
        return NULL;
    return t;
}

static keel_tensor *from_i64(int ndim, const int64_t *shape, const int64_t *v)
{
    keel_tensor *t = NULL;

    if (!ok_(keel_tensor_from_host(v, KEEL_I64, ndim, shape, NULL, &t),
             "from_i64"))
        return NULL;
    return t;
}

/* Row-major float64 copy (caller frees). */
static double *to_f64(const keel_tensor *t)
{
    int64_t n = keel_tensor_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    keel_tensor *c = NULL;
    bool good;

    keel_no_grad_begin();
    good = v && ok_(keel_cast(t, KEEL_F64, &c), "to_f64 cast") &&
           ok_(keel_tensor_to_host(c, v, sizeof(double) * (size_t)n),
               "to_f64");
    keel_no_grad_end();
    keel_tensor_free(c);
    if (!good) {
        free(v);
        return NULL;
    }
    return v;
}

static double item(const keel_tensor *t)
{
    double v = NAN;

    keel_tensor_item(t, 0, &v);
    return v;
}

/* Uniform in [lo, hi), at least `margin` away from every kink. */
static keel_tensor *rnd_away(int ndim, const int64_t *shape, double lo,
                             double hi, const double *kinks, int nk,
                             double margin)
{
    int64_t n = numel(ndim, shape);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    keel_tensor *t;

    for (int64_t i = 0; i < n; i++) {
        bool near;
        do {
            v[i] = uniform(lo, hi);
            near = false;
            for (int k = 0; k < nk; k++)
                near = near || fabs(v[i] - kinks[k]) < margin;
        } while (near);
    }
    t = from_f64(ndim, shape, v);
    free(v);
    return t;
}

static keel_tensor *rnd(int ndim, const int64_t *shape, double lo, double hi)
{
    return rnd_away(ndim, shape, lo, hi, NULL, 0, 0);
}

/* Distinct values, at least `gap` apart, in a random order. */
static keel_tensor *distinct(int ndim, const int64_t *shape, double gap)
{
    int64_t n = numel(ndim, shape);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    keel_tensor *t;

    for (int64_t i = 0; i < n; i++)
        v[i] = ((double)i - (double)n / 2) * gap + uniform(0, gap / 4);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(urand() * (double)(i + 1));
        double s = v[i];
        v[i] = v[j];
        v[j] = s;
    }
    t = from_f64(ndim, shape, v);
    free(v);
    return t;
}

/* x + integer, with the fractional part in [flo, fhi]. */
static keel_tensor *fractional(int ndim, const int64_t *shape, double flo,
                               double fhi)
{
    int64_t n = numel(ndim, shape);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    keel_tensor *t;

    for (int64_t i = 0; i < n; i++)
        v[i] = floor(uniform(-3, 3)) + uniform(flo, fhi);
    t = from_f64(ndim, shape, v);
    free(v);
    return t;
}

/* ---- the gradient checker ------------------------------------------------ */

#define GC_MAX_IN 6
#define GC_MAX_OUT 8

struct gc;
typedef keel_status (*gc_fwd)(const struct gc *g, keel_tensor *const *in,
                              keel_tensor **out, int *nout);

struct gc {
    const char *label;
    int op;     /* catalog op, or -1 with fwd */
    gc_fwd fwd; /* NULL: run the op with attrs */
    int nin;
    keel_tensor *in[GC_MAX_IN];
    bool diff[GC_MAX_IN];
    int na;
    keel_attr attrs[12];
    int64_t ints[12][8];
    int nfun; /* outputs in the functional; 0: every floating one */
    double h, rtol, atol;
    int64_t p[8]; /* parameters of a fwd */
};

static bool covered[KEEL_OP_COUNT];
static int cases_run;

static struct gc *gc_init(struct gc *g, int op, const char *label)
{
    memset(g, 0, sizeof(*g));
    g->op = op;
    g->label = label;
    g->h = 1e-6;
    g->rtol = 1e-5;
    g->atol = 1e-6;
    return g;
}

#define GC(OP, label)                                                        \
    struct gc gc_store_;                                                     \
    struct gc *g = gc_init(&gc_store_, KEEL_OP_##OP, label)

static void in_(struct gc *g, keel_tensor *t, bool diff)
{
    CU_ASSERT_PTR_NOT_NULL(t);
    g->in[g->nin] = t;
    g->diff[g->nin++] = diff;
}

static void a_i(struct gc *g, const char *name, int64_t v)
{
    g->attrs[g->na++] = keel_attr_int(name, v);
}

static void a_f(struct gc *g, const char *name, double v)
{
    g->attrs[g->na++] = keel_attr_float(name, v);
}

static void a_b(struct gc *g, const char *name, bool v)
{
    g->attrs[g->na++] = keel_attr_bool(name, v);
}

static void a_s(struct gc *g, const char *name, const char *v)
{
    g->attrs[g->na++] = keel_attr_str(name, v);
}

static void a_ints(struct gc *g, const char *name, int n, const int64_t *v)
{
    if (n > 0)
        memcpy(g->ints[g->na], v, sizeof(int64_t) * (size_t)n);
    g->attrs[g->na] = keel_attr_ints(name, g->ints[g->na], n);
    g->na++;
}
#define A_INTS(g, name, ...)                                                 \
    a_ints(g, name, (int)(sizeof((int64_t[]){__VA_ARGS__}) / 8),             \
           (const int64_t[]){__VA_ARGS__})

static keel_status gc_forward(const struct gc *g, keel_tensor *const *in,
                              keel_tensor **out, int *nout)
{
    if (g->fwd)
        return g->fwd(g, in, out, nout);
    return keel_op_run((keel_op_id)g->op, in, g->nin, g->attrs, g->na, out,
                       GC_MAX_OUT, nout);
}

static bool is_float(keel_dtype dt)
{
    return dt == KEEL_F32 || dt == KEEL_F64 || dt == KEEL_F16 ||
           dt == KEEL_BF16;
}

/* Indices of the outputs in the functional. */
static int fun_outputs(const struct gc *g, keel_tensor **out, int nout,
                       int *sel)
{
    int n = 0;

    for (int j = 0; j < nout; j++) {
        if (g->nfun ? j >= g->nfun : !is_float(keel_tensor_dtype(out[j])))
            continue;
        sel[n++] = j;
    }
    return n;
}

/* L = sum_j <w_j, out_j> on the host, for the forward with `in`. */
static bool functional(const struct gc *g, keel_tensor *const *in,
                       double *const *w, double *L)
{
    keel_tensor *out[GC_MAX_OUT] = {0};
    int nout = 0, sel[GC_MAX_OUT], nf;
    bool good;

    *L = 0;
    keel_no_grad_begin();
    good = ok_(gc_forward(g, in, out, &nout), g->label);
    keel_no_grad_end();
    if (!good)
        return false;
    nf = fun_outputs(g, out, nout, sel);
    for (int k = 0; k < nf && good; k++) {
        keel_tensor *o = out[sel[k]];
        double *v = to_f64(o);
        good = v != NULL;
        for (int64_t i = 0; good && i < keel_tensor_numel(o); i++)
            *L += v[i] * w[k][i];
        free(v);
    }
    for (int j = 0; j < nout; j++)
        keel_tensor_free(out[j]);
    return good;
}

/* A tensor of `like`'s shape, dtype and device holding v. */
static keel_tensor *like_from(const keel_tensor *like, const double *v)
{
    keel_tensor *t = from_f64(keel_tensor_ndim(like), keel_tensor_shape(like),
                              v),
                *c = NULL, *d = NULL;
    char dev[64];

    if (!t)
        return NULL;
    keel_place_name(keel_tensor_place(like), dev, sizeof(dev));
    if (!ok_(keel_cast(t, keel_tensor_dtype(like), &c), "like_from cast") ||
        !ok_(keel_tensor_to(c, dev, &d), "like_from to"))
        d = NULL;
    keel_tensor_free(t);
    keel_tensor_free(c);
    return d;
}

static void gc_run(struct gc *g)
{
    keel_tensor *out[GC_MAX_OUT] = {0}, *fo[GC_MAX_OUT], *wt[GC_MAX_OUT] = {0};
    keel_tensor *din[GC_MAX_IN], *grads[GC_MAX_IN] = {0};
    double *w[GC_MAX_OUT] = {0};
    int nout = 0, sel[GC_MAX_OUT], nf = 0, nd = 0, dix[GC_MAX_IN];
    int bad = 0;

    for (int i = 0; i < g->nin; i++)
        if (!g->in[i])
            goto out;
    for (int i = 0; i < g->nin; i++)
        if (g->diff[i]) {
            OK(keel_tensor_set_stop_gradient(g->in[i], false));
            dix[nd] = i;
            din[nd++] = g->in[i];
        }
    if (!ok_(gc_forward(g, g->in, out, &nout), g->label)) {
        CU_FAIL("forward failed");
        goto out;
    }
    nf = fun_outputs(g, out, nout, sel);
    for (int k = 0; k < nf; k++) {
        keel_tensor *o = out[sel[k]];
        int64_t n = keel_tensor_numel(o);
        fo[k] = o;
        if (keel_tensor_stop_gradient(o)) {
            fprintf(stderr, "\n  %s: output %d has stop_gradient = true\n",
                    g->label, sel[k]);
            CU_FAIL("output without gradient");
            goto out;
        }
        w[k] = malloc(sizeof(double) * (size_t)(n ? n : 1));
        for (int64_t i = 0; i < n; i++)
            w[k][i] = uniform(-1, 1);
        wt[k] = like_from(o, w[k]);
    }
    if (!ok_(keel_grad(fo, nf, wt, din, nd, false, true, grads), g->label)) {
        CU_FAIL("keel_grad failed");
        goto out;
    }
    for (int i = 0; i < g->nin; i++)
        OK(keel_tensor_set_stop_gradient(g->in[i], true));
    if (g->op >= 0)
        covered[g->op] = true;
    cases_run++;
    for (int d = 0; d < nd && bad < 3; d++) {
        int i = dix[d];
        keel_tensor *x = g->in[i];
        int64_t n = keel_tensor_numel(x);
        double *v = to_f64(x), *an = NULL;
        keel_tensor *saved = x;

        if (grads[d]) {
            CU_ASSERT_EQUAL(keel_tensor_dtype(grads[d]), keel_tensor_dtype(x));
            CU_ASSERT_EQUAL(keel_tensor_ndim(grads[d]), keel_tensor_ndim(x));
            an = to_f64(grads[d]);
        }
        for (int64_t k = 0; v && k < n && bad < 3; k++) {
            double x0 = v[k], lp, lm, num, a = an ? an[k] : 0.0;
            keel_tensor *xp, *xm;
            keel_tensor *tmp[GC_MAX_IN];

            memcpy(tmp, g->in, sizeof(tmp));
            v[k] = x0 + g->h;
            xp = like_from(saved, v);
            v[k] = x0 - g->h;
            xm = like_from(saved, v);
            v[k] = x0;
            tmp[i] = xp;
            functional(g, tmp, w, &lp);
            tmp[i] = xm;
            functional(g, tmp, w, &lm);
            keel_tensor_free(xp);
            keel_tensor_free(xm);
            num = (lp - lm) / (2 * g->h);
            if (!(fabs(a - num) <=
                  g->atol + g->rtol * fmax(fabs(a), fabs(num)))) {
                fprintf(stderr,
                        "\n  %s: input %d element %lld: autograd %.10g, "
                        "numeric %.10g\n",
                        g->label, i, (long long)k, a, num);
                bad++;
            }
        }
        free(v);
        free(an);
    }
    CU_ASSERT_EQUAL(bad, 0);
out:
    for (int k = 0; k < nf; k++) {
        free(w[k]);
        keel_tensor_free(wt[k]);
    }
    for (int j = 0; j < nout; j++)
        keel_tensor_free(out[j]);
    for (int d = 0; d < nd; d++)
        keel_tensor_free(grads[d]);
    for (int i = 0; i < g->nin; i++)
        keel_tensor_free(g->in[i]);
}

/* ---- cases: elementwise -------------------------------------------------- */

static const double K0[] = {0.0};

static void cases_binary(void)
{
    {
        GC(ADD, "add broadcast [2,3]+[3]");
        in_(g, rnd(SH(2, 3), -1, 1), true);
        in_(g, rnd(SH(3), -1, 1), true);
        gc_run(g);
    }
    {
        GC(ADD, "add broadcast [2,1]+[1,3]");
        in_(g, rnd(SH(2, 1), -1, 1), true);
        in_(g, rnd(SH(1, 3), -1, 1), true);
        gc_run(g);
    }
    {
        GC(SUBTRACT, "subtract broadcast");
        in_(g, rnd(SH(2, 3), -1, 1), true);
        in_(g, rnd(SH(2, 1), -1, 1), true);
        gc_run(g);
    }
    {
        GC(MULTIPLY, "multiply broadcast");
        in_(g, rnd(SH(2, 3), -1, 1), true);
        in_(g, rnd(SH(3), -1, 1), true);
        gc_run(g);
    }
    {
        GC(DIVIDE, "divide broadcast");
        in_(g, rnd(SH(2, 3), -2, 2), true);
        in_(g, rnd_away(SH(3), -2, 2, K0, 1, 0.5), true);
        gc_run(g);
    }
    {
        GC(POW, "pow");
        in_(g, rnd(SH(2, 3), 0.5, 2), true);
        in_(g, rnd(SH(2, 3), -1.5, 1.5), true);
        gc_run(g);
    }
    {
        GC(POW, "pow broadcast exponent");
        in_(g, rnd(SH(2, 3), 0.5, 2), true);
        in_(g, rnd(SH(3), -1.5, 2.5), true);
        gc_run(g);
    }
    for (int m = 0; m < 2; m++) {
        /* Pairs at least 0.1 apart, either way round. */
        double x[6], y[6];
        GC(MAXIMUM, "maximum");
        if (m) {
            g->op = KEEL_OP_MINIMUM;
            g->label = "minimum";
        }
        for (int i = 0; i < 6; i++) {
            x[i] = uniform(-1, 1);
            y[i] = x[i] + (urand() < 0.5 ? -1 : 1) * uniform(0.1, 0.5);
        }
        in_(g, from_f64(SH(2, 3), x), true);
        in_(g, from_f64(SH(2, 3), y), true);
        gc_run(g);
    }
    {
        /* x / y stays between integers, away from the jumps. */
        double x[6], y[3];
        GC(REMAINDER, "remainder broadcast");
        for (int j = 0; j < 3; j++)
            y[j] = uniform(1, 2) * (j == 1 ? -1 : 1);
        for (int i = 0; i < 6; i++)
            x[i] = y[i % 3] * (floor(uniform(-2, 2)) + uniform(0.1, 0.9));
        in_(g, from_f64(SH(2, 3), x), true);
        in_(g, from_f64(SH(3), y), true);
        gc_run(g);
    }
    {
        bool cond[6] = {1, 0, 0, 1, 1, 0};
        keel_tensor *c = NULL;
        GC(WHERE, "where broadcast");
        OK(keel_tensor_from_host(cond, KEEL_BOOL, SH(2, 3), NULL, &c));
        in_(g, c, false);
        in_(g, rnd(SH(2, 3), -1, 1), true);
        in_(g, rnd(SH(3), -1, 1), true);
        gc_run(g);
    }
}

struct unary_case {
    keel_op_id op;
    const char *label;
    double lo, hi;
    double kinks[3];
    int nk;
};

static void cases_unary(void)
{
    static const struct unary_case u[] = {
        {KEEL_OP_NEG, "neg", -1, 1, {0}, 0},
        {KEEL_OP_ABS, "abs", -1, 1, {0}, 1},
        {KEEL_OP_SIGN, "sign", -1, 1, {0}, 1},
        {KEEL_OP_EXP, "exp", -1, 1, {0}, 0},
        {KEEL_OP_LOG, "log", 0.2, 2, {0}, 0},
        {KEEL_OP_LOG1P, "log1p", -0.5, 2, {0}, 0},
        {KEEL_OP_SQRT, "sqrt", 0.2, 2, {0}, 0},
        {KEEL_OP_RSQRT, "rsqrt", 0.2, 2, {0}, 0},
        {KEEL_OP_SQUARE, "square", -2, 2, {0}, 0},
        {KEEL_OP_SIN, "sin", -3, 3, {0}, 0},
        {KEEL_OP_COS, "cos", -3, 3, {0}, 0},
        {KEEL_OP_RELU, "relu", -1, 1, {0}, 1},
        {KEEL_OP_RELU6, "relu6", -2, 8, {0, 6}, 2},
        {KEEL_OP_SILU, "silu", -3, 3, {0}, 0},
        {KEEL_OP_SIGMOID, "sigmoid", -3, 3, {0}, 0},
        {KEEL_OP_TANH, "tanh", -2, 2, {0}, 0},
        {KEEL_OP_HARDSWISH, "hardswish", -5, 5, {-3, 3}, 2},
        {KEEL_OP_COPY, "copy", -1, 1, {0}, 0},
    };

    for (size_t k = 0; k < sizeof(u) / sizeof(u[0]); k++) {
        GC(NEG, u[k].label);
        g->op = u[k].op;
        in_(g, rnd_away(SH(3, 4), u[k].lo, u[k].hi, u[k].kinks, u[k].nk, 0.05),
            true);
        gc_run(g);
    }
    {
        GC(FLOOR, "floor");
        in_(g, fractional(SH(3, 4), 0.1, 0.9), true);
        gc_run(g);
    }
    {
        GC(CEIL, "ceil");
        in_(g, fractional(SH(3, 4), 0.1, 0.9), true);
        gc_run(g);
    }
    {
        GC(ROUND, "round");
        in_(g, fractional(SH(3, 4), 0.1, 0.4), true);
        gc_run(g);
    }
    {
        GC(LEAKY_RELU, "leaky_relu 0.2");
        in_(g, rnd_away(SH(3, 4), -1, 1, K0, 1, 0.05), true);
        a_f(g, "negative_slope", 0.2);
        gc_run(g);
    }
    {
        GC(ELU, "elu alpha 1.5");
        in_(g, rnd_away(SH(3, 4), -2, 2, K0, 1, 0.05), true);
        a_f(g, "alpha", 1.5);
        gc_run(g);
    }
    for (int a = 0; a < 2; a++) {
        GC(GELU, a ? "gelu approximate" : "gelu exact");
        in_(g, rnd(SH(3, 4), -3, 3), true);
        a_b(g, "approximate", a);
        gc_run(g);
    }
    {
        GC(SOFTPLUS, "softplus");
        in_(g, rnd(SH(3, 4), -3, 3), true);
        gc_run(g);
    }
    {
        static const double kink[] = {0.5};
        GC(SOFTPLUS, "softplus beta 2 threshold 1 (linear part)");
        in_(g, rnd_away(SH(3, 4), -2, 2, kink, 1, 0.05), true);
        a_f(g, "beta", 2.0);
        a_f(g, "threshold", 1.0);
        gc_run(g);
    }
    {
        static const double kink[] = {-0.5, 0.7};
        GC(CLIP, "clip [-0.5, 0.7]");
        in_(g, rnd_away(SH(3, 4), -1, 1, kink, 2, 0.05), true);
        a_f(g, "min", -0.5);
        a_f(g, "max", 0.7);
        gc_run(g);
    }
    {
        keel_tensor *x = rnd(SH(2, 3), -1, 1), *f = NULL;
        GC(CAST, "cast float32 -> float64");
        OK(keel_cast(x, KEEL_F32, &f));
        keel_tensor_free(x);
        in_(g, f, true);
        g->attrs[g->na++] = keel_attr_dtype("dtype", KEEL_F64);
        g->h = 1.0 / 1024;
        gc_run(g);
    }
}

/* ---- cases: reductions --------------------------------------------------- */

static void reduce_case(keel_op_id op, const char *label, keel_tensor *x,
                        int naxes, const int64_t *axes, bool keepdim,
                        int unbiased)
{
    GC(SUM, label);
    g->op = op;
    in_(g, x, true);
    a_ints(g, "axis", naxes, axes);
    if (op != KEEL_OP_CUMSUM)
        a_b(g, "keepdim", keepdim);
    if (unbiased >= 0)
        a_b(g, "unbiased", unbiased);
    gc_run(g);
}

static void cases_reduce(void)
{
    static const int64_t a1[] = {1}, a02[] = {0, 2}, am1[] = {-1}, a2[] = {2};

    reduce_case(KEEL_OP_SUM, "sum axis 1", rnd(SH(2, 3, 4), -1, 1), 1, a1,
                false, -1);
    reduce_case(KEEL_OP_SUM, "sum axes 0,2 keepdim", rnd(SH(2, 3, 4), -1, 1),
                2, a02, true, -1);
    reduce_case(KEEL_OP_SUM, "sum all", rnd(SH(2, 3), -1, 1), 0, NULL, false,
                -1);
    reduce_case(KEEL_OP_MEAN, "mean axis -1", rnd(SH(2, 3, 4), -1, 1), 1, am1,
                false, -1);
    reduce_case(KEEL_OP_MEAN, "mean all keepdim", rnd(SH(2, 3), -1, 1), 0,
                NULL, true, -1);
    reduce_case(KEEL_OP_MAX, "max axis 1", distinct(SH(2, 3, 4), 0.1), 1, a1,
                false, -1);
    reduce_case(KEEL_OP_MAX, "max all", distinct(SH(3, 4), 0.1), 0, NULL,
                false, -1);
    reduce_case(KEEL_OP_MIN, "min axes 0,2 keepdim",
                distinct(SH(2, 3, 4), 0.1), 2, a02, true, -1);
    /* prod divides by x: keep |x| >= 0.5 */
    reduce_case(KEEL_OP_PROD, "prod axis 2",
                rnd_away(SH(2, 3, 4), -1.5, 1.5, K0, 1, 0.5), 1, a2, false,
                -1);
    reduce_case(KEEL_OP_PROD, "prod all",
                rnd_away(SH(2, 3), -1.5, 1.5, K0, 1, 0.5), 0, NULL, false, -1);
    reduce_case(KEEL_OP_VAR, "var axis 1 unbiased", rnd(SH(2, 3, 4), -1, 1), 1,
                a1, false, 1);
    reduce_case(KEEL_OP_VAR, "var all biased keepdim", rnd(SH(3, 4), -1, 1),
                0, NULL, true, 0);
    reduce_case(KEEL_OP_STD, "std axis -1 unbiased", rnd(SH(2, 3, 4), -1, 1),
                1, am1, false, 1);
    reduce_case(KEEL_OP_STD, "std all biased", rnd(SH(3, 4), -1, 1), 0, NULL,
                false, 0);
    reduce_case(KEEL_OP_LOGSUMEXP, "logsumexp axis -1",
                rnd(SH(2, 3, 4), -2, 2), 1, am1, false, -1);
    reduce_case(KEEL_OP_LOGSUMEXP, "logsumexp all keepdim",
                rnd(SH(3, 4), -2, 2), 0, NULL, true, -1);
    reduce_case(KEEL_OP_CUMSUM, "cumsum axis 1", rnd(SH(2, 3, 4), -1, 1), 1,
                a1, false, -1);
    reduce_case(KEEL_OP_CUMSUM, "cumsum flattened", rnd(SH(3, 4), -1, 1), 0,
                NULL, false, -1);
}

/* ---- cases: linear algebra ----------------------------------------------- */

static void matmul_case(const char *label, keel_tensor *x, keel_tensor *y,
                        bool tx, bool ty)
{
    GC(MATMUL, label);
    in_(g, x, true);
    in_(g, y, true);
    a_b(g, "transpose_x", tx);
    a_b(g, "transpose_y", ty);
    gc_run(g);
}

static void cases_linalg(void)
{
    matmul_case("matmul 2-D", rnd(SH(3, 4), -1, 1), rnd(SH(4, 2), -1, 1), 0,
                0);
    matmul_case("matmul transpose_x", rnd(SH(4, 3), -1, 1),
                rnd(SH(4, 2), -1, 1), 1, 0);
    matmul_case("matmul transpose_y", rnd(SH(3, 4), -1, 1),
                rnd(SH(2, 4), -1, 1), 0, 1);
    matmul_case("matmul both transposed", rnd(SH(4, 3), -1, 1),
                rnd(SH(2, 4), -1, 1), 1, 1);
    matmul_case("matmul 1-D x", rnd(SH(4), -1, 1), rnd(SH(4, 2), -1, 1), 0, 0);
    matmul_case("matmul 1-D y", rnd(SH(3, 4), -1, 1), rnd(SH(4), -1, 1), 0, 0);
    matmul_case("matmul 1-D dot", rnd(SH(4), -1, 1), rnd(SH(4), -1, 1), 0, 0);
    matmul_case("matmul batch broadcast", rnd(SH(2, 1, 3, 4), -1, 1),
                rnd(SH(3, 4, 2), -1, 1), 0, 0);
    matmul_case("matmul batch transposed", rnd(SH(2, 4, 3), -1, 1),
                rnd(SH(2, 4), -1, 1), 1, 1);
    matmul_case("matmul 1-D x, batched y", rnd(SH(4), -1, 1),
                rnd(SH(2, 4, 3), -1, 1), 0, 0);
    {
        GC(LINEAR, "linear with bias");
        in_(g, rnd(SH(3, 4), -1, 1), true);
        in_(g, rnd(SH(4, 5), -1, 1), true);
        in_(g, rnd(SH(5), -1, 1), true);
        gc_run(g);
    }
    {
        GC(LINEAR, "linear 3-D x, no bias");
        in_(g, rnd(SH(2, 3, 4), -1, 1), true);
        in_(g, rnd(SH(4, 5), -1, 1), true);
        gc_run(g);
    }
    {
        GC(LINEAR, "linear 1-D x");
        in_(g, rnd(SH(4), -1, 1), true);
        in_(g, rnd(SH(4, 3), -1, 1), true);
        in_(g, rnd(SH(3), -1, 1), true);
        gc_run(g);
    }
}

/* ---- cases: neural network ops ------------------------------------------- */

static void conv_attrs(struct gc *g, int64_t stride, int64_t pad,
                       int64_t dil, int64_t groups)
{
    A_INTS(g, "stride", stride, stride);
    A_INTS(g, "padding", pad, pad);
    A_INTS(g, "dilation", dil, dil);
    a_i(g, "groups", groups);
}

static void cases_conv(void)
{
    {
        GC(CONV2D, "conv2d stride 2 padding 1 bias");
        in_(g, rnd(SH(2, 3, 5, 5), -1, 1), true);
        in_(g, rnd(SH(4, 3, 3, 3), -1, 1), true);
        in_(g, rnd(SH(4), -1, 1), true);
        conv_attrs(g, 2, 1, 1, 1);
        gc_run(g);
    }
    {
        GC(CONV2D, "conv2d groups 2 dilation 2 no bias");
        in_(g, rnd(SH(1, 4, 6, 6), -1, 1), true);
        in_(g, rnd(SH(4, 2, 2, 2), -1, 1), true);
        conv_attrs(g, 1, 1, 2, 2);
        gc_run(g);
    }
    {
        GC(CONV2D, "conv2d SAME stride 2");
        in_(g, rnd(SH(1, 2, 6, 5), -1, 1), true);
        in_(g, rnd(SH(2, 2, 3, 3), -1, 1), true);
        in_(g, rnd(SH(2), -1, 1), true);
        A_INTS(g, "stride", 2, 2);
        a_s(g, "padding_algorithm", "SAME");
        gc_run(g);
    }
    {
        GC(CONV2D_TRANSPOSE, "conv2d_transpose stride 2 output_padding 1");
        in_(g, rnd(SH(1, 2, 3, 3), -1, 1), true);
        in_(g, rnd(SH(2, 3, 3, 3), -1, 1), true);
        in_(g, rnd(SH(3), -1, 1), true);
        conv_attrs(g, 2, 1, 1, 1);
        A_INTS(g, "output_padding", 1, 1);
        gc_run(g);
    }
    {
        GC(CONV2D_TRANSPOSE, "conv2d_transpose groups 2 no bias");
        in_(g, rnd(SH(1, 4, 3, 3), -1, 1), true);
        in_(g, rnd(SH(4, 1, 2, 2), -1, 1), true);
        conv_attrs(g, 1, 0, 1, 2);
        gc_run(g);
    }
    {
        GC(MAX_POOL2D, "max_pool2d 2x2");
        in_(g, distinct(SH(1, 2, 4, 4), 0.05), true);
        A_INTS(g, "kernel_size", 2, 2);
        gc_run(g);
    }
    {
        GC(MAX_POOL2D, "max_pool2d 3x3 stride 2 padding 1 ceil");
        in_(g, distinct(SH(1, 2, 5, 5), 0.05), true);
        A_INTS(g, "kernel_size", 3, 3);
        A_INTS(g, "stride", 2, 2);
        A_INTS(g, "padding", 1, 1);
        a_b(g, "ceil_mode", true);
        gc_run(g);
    }
    for (int ex = 0; ex < 2; ex++) {
        GC(AVG_POOL2D, ex ? "avg_pool2d exclusive" : "avg_pool2d inclusive");
        in_(g, rnd(SH(1, 2, 5, 5), -1, 1), true);
        A_INTS(g, "kernel_size", 3, 3);
        A_INTS(g, "stride", 2, 2);
        A_INTS(g, "padding", 1, 1);
        a_b(g, "exclusive", ex);
        a_b(g, "ceil_mode", ex);
        gc_run(g);
    }
    {
        GC(ADAPTIVE_AVG_POOL2D, "adaptive_avg_pool2d 5x7 -> 2x3");
        in_(g, rnd(SH(1, 2, 5, 7), -1, 1), true);
        A_INTS(g, "output_size", 2, 3);
        gc_run(g);
    }
}

static void cases_norm(void)
{
    for (int tr = 0; tr < 2; tr++) {
        GC(BATCH_NORM, tr ? "batch_norm training" : "batch_norm eval");
        in_(g, rnd(SH(4, 3, 2, 2), -1, 1), true);
        in_(g, rnd(SH(3), 0.5, 1.5), true);
        in_(g, rnd(SH(3), -1, 1), true);
        in_(g, rnd(SH(3), -0.2, 0.2), false);
        in_(g, rnd(SH(3), 0.5, 1.5), false);
        a_b(g, "training", tr);
        g->nfun = 1;
        gc_run(g);
    }
    {
        GC(LAYER_NORM, "layer_norm last axis, scale and bias");
        in_(g, rnd(SH(3, 4, 5), -1, 1), true);
        in_(g, rnd(SH(5), 0.5, 1.5), true);
        in_(g, rnd(SH(5), -1, 1), true);
        a_i(g, "begin_norm_axis", 2);
        g->nfun = 1;
        gc_run(g);
    }
    {
        GC(LAYER_NORM, "layer_norm from axis 1, flat scale");
        in_(g, rnd(SH(3, 4, 2), -1, 1), true);
        in_(g, rnd(SH(8), 0.5, 1.5), true);
        a_i(g, "begin_norm_axis", 1);
        g->nfun = 1;
        gc_run(g);
    }
    {
        GC(LAYER_NORM, "layer_norm without parameters");
        in_(g, rnd(SH(3, 6), -1, 1), true);
        g->nfun = 1;
        gc_run(g);
    }
    {
        GC(GROUP_NORM, "group_norm 2 groups");
        in_(g, rnd(SH(2, 4, 2, 3), -1, 1), true);
        in_(g, rnd(SH(4), 0.5, 1.5), true);
        in_(g, rnd(SH(4), -1, 1), true);
        a_i(g, "groups", 2);
        g->nfun = 1;
        gc_run(g);
    }
    {
        GC(GROUP_NORM, "group_norm without parameters");
        in_(g, rnd(SH(2, 6, 3), -1, 1), true);
        a_i(g, "groups", 3);
        g->nfun = 1;
        gc_run(g);
    }
    for (int ax = 0; ax < 2; ax++) {
        GC(SOFTMAX, ax ? "softmax axis 0" : "softmax axis -1");
        in_(g, rnd(SH(3, 5), -2, 2), true);
        a_i(g, "axis", ax ? 0 : -1);
        gc_run(g);
    }
    {
        GC(LOG_SOFTMAX, "log_softmax axis 1");
        in_(g, rnd(SH(2, 4, 3), -2, 2), true);
        a_i(g, "axis", 1);
        gc_run(g);
    }
}

static void cases_loss(void)
{
    static const int64_t lab[4] = {1, 4, 0, 2}, lab_ig[4] = {1, -100, 3, 3};

    {
        GC(CROSS_ENTROPY, "cross_entropy hard mean");
        in_(g, rnd(SH(4, 5), -2, 2), true);
        in_(g, from_i64(SH(4), lab), false);
        g->nfun = 1;
        gc_run(g);
    }
    {
        GC(CROSS_ENTROPY, "cross_entropy weight, ignore_index, smoothing");
        in_(g, rnd(SH(4, 5), -2, 2), true);
        in_(g, from_i64(SH(4), lab_ig), false);
        in_(g, rnd(SH(5), 0.5, 2), false);
        a_f(g, "label_smoothing", 0.1);
        g->nfun = 1;
        gc_run(g);
    }
    {
        GC(CROSS_ENTROPY, "cross_entropy none, axis 1");
        int64_t l[8];
        for (int i = 0; i < 8; i++)
            l[i] = i % 3;
        in_(g, rnd(SH(2, 3, 4), -2, 2), true);
        in_(g, from_i64(SH(2, 4), l), false);
        a_i(g, "axis", 1);
        a_s(g, "reduction", "none");
        g->nfun = 1;
        gc_run(g);
    }
    {
        double p[15];
        GC(CROSS_ENTROPY, "cross_entropy soft labels, sum");
        for (int r = 0; r < 3; r++) {
            double s = 0;
            for (int k = 0; k < 5; k++)
                s += p[r * 5 + k] = uniform(0.1, 1);
            for (int k = 0; k < 5; k++)
                p[r * 5 + k] /= s;
        }
        in_(g, rnd(SH(3, 5), -2, 2), true);
        in_(g, from_f64(SH(3, 5), p), false);
        a_b(g, "soft_label", true);
        a_s(g, "reduction", "sum");
        g->nfun = 1;
        gc_run(g);
    }
    {
        GC(CROSS_ENTROPY, "cross_entropy use_softmax=0");
        in_(g, rnd(SH(4, 5), 0.1, 1), true);
        in_(g, from_i64(SH(4), lab), false);
        a_b(g, "use_softmax", false);
        g->nfun = 1;
        gc_run(g);
    }
    for (int r = 0; r < 3; r++) {
        static const char *const red[3] = {"mean", "sum", "none"};
        GC(MSE_LOSS, red[r]);
        in_(g, rnd(SH(3, 4), -1, 1), true);
        in_(g, rnd(SH(3, 4), -1, 1), true);
        a_s(g, "reduction", red[r]);
        gc_run(g);
    }
    for (int r = 0; r < 3; r++) {
        static const char *const red[3] = {"mean", "sum", "none"};
        GC(BCE_WITH_LOGITS, red[r]);
        in_(g, rnd(SH(3, 4), -3, 3), true);
        in_(g, rnd(SH(3, 4), 0, 1), true);
        if (r != 1)
            in_(g, rnd(SH(4), 0.5, 2), true);
        a_s(g, "reduction", red[r]);
        gc_run(g);
    }
    {
        GC(NLL_LOSS, "nll_loss mean, weight, ignore_index");
        in_(g, rnd(SH(4, 5), -3, 0), true);
        in_(g, from_i64(SH(4), lab_ig), false);
        in_(g, rnd(SH(5), 0.5, 2), false);
        gc_run(g);
    }
    {
        GC(NLL_LOSS, "nll_loss none [N,C,d]");
        int64_t l[8];
        for (int i = 0; i < 8; i++)
            l[i] = (i * 2) % 3;
        in_(g, rnd(SH(2, 3, 4), -3, 0), true);
        in_(g, from_i64(SH(2, 4), l), false);
        a_s(g, "reduction", "none");
        gc_run(g);
    }
    {
        static const int64_t l0 = 3;
        GC(NLL_LOSS, "nll_loss 1-D sum");
        in_(g, rnd(SH(5), -3, 0), true);
        in_(g, from_i64(0, NULL, &l0), false);
        a_s(g, "reduction", "sum");
        gc_run(g);
    }
    {
        static const int64_t ids[6] = {0, 2, 4, 2, 1, 2};
        GC(EMBEDDING, "embedding padding_idx 1");
        in_(g, from_i64(SH(2, 3), ids), false);
        in_(g, rnd(SH(5, 4), -1, 1), true);
        a_i(g, "padding_idx", 1);
        gc_run(g);
    }
    for (int m = 0; m < 4; m++) {
        static const char *const lab_[4] = {
            "dropout upscale train", "dropout downscale train",
            "dropout upscale eval", "dropout downscale eval"};
        GC(DROPOUT, lab_[m]);
        in_(g, rnd(SH(4, 5), -1, 1), true);
        a_f(g, "p", 0.3);
        a_s(g, "mode", m % 2 ? "downscale_in_infer" : "upscale_in_train");
        a_b(g, "training", m < 2);
        a_i(g, "seed", 7);
        a_i(g, "offset", 11);
        g->nfun = 1;
        gc_run(g);
    }
}

/* ---- cases: shape and indexing ------------------------------------------- */

static void cases_manip(void)
{
    {
        GC(CONCAT, "concat axis 1");
        in_(g, rnd(SH(2, 3), -1, 1), true);
        in_(g, rnd(SH(2, 1), -1, 1), true);
        in_(g, rnd(SH(2, 2), -1, 1), true);
        a_i(g, "axis", 1);
        gc_run(g);
    }
    {
        GC(STACK, "stack axis 1");
        in_(g, rnd(SH(2, 3), -1, 1), true);
        in_(g, rnd(SH(2, 3), -1, 1), true);
        in_(g, rnd(SH(2, 3), -1, 1), true);
        a_i(g, "axis", 1);
        gc_run(g);
    }
    {
        GC(SPLIT, "split [2, -1] axis 0");
        in_(g, rnd(SH(5, 3), -1, 1), true);
        A_INTS(g, "sections", 2, -1);
        gc_run(g);
    }
    {
        GC(SPLIT, "split [1, 1, 2] axis -1, one piece unused");
        in_(g, rnd(SH(3, 4), -1, 1), true);
        A_INTS(g, "sections", 1, 1, 2);
        a_i(g, "axis", -1);
        g->nfun = 2;
        gc_run(g);
    }
    {
        static const int64_t idx[5] = {3, 0, 3, 1, 3};
        GC(GATHER, "gather axis 0, repeated rows");
        in_(g, rnd(SH(4, 3), -1, 1), true);
        in_(g, from_i64(SH(5), idx), false);
        gc_run(g);
    }
    {
        static const int64_t i0 = 2;
        GC(GATHER, "gather 0-d index axis 1");
        in_(g, rnd(SH(4, 3), -1, 1), true);
        in_(g, from_i64(0, NULL, &i0), false);
        a_i(g, "axis", 1);
        gc_run(g);
    }
    {
        static const int64_t idx[3] = {2, 0, 2};
        GC(INDEX_SELECT, "index_select axis 1");
        in_(g, rnd(SH(2, 4, 3), -1, 1), true);
        in_(g, from_i64(SH(3), idx), false);
        a_i(g, "axis", 1);
        gc_run(g);
    }
    {
        static const int64_t idx[3] = {4, 0, 2};
        GC(SCATTER, "scatter overwrite");
        in_(g, rnd(SH(5, 3), -1, 1), true);
        in_(g, from_i64(SH(3), idx), false);
        in_(g, rnd(SH(3, 3), -1, 1), true);
        gc_run(g);
    }
    {
        static const int64_t idx[4] = {1, 3, 1, 0};
        GC(SCATTER, "scatter accumulate, repeated rows");
        in_(g, rnd(SH(5, 2), -1, 1), true);
        in_(g, from_i64(SH(4), idx), false);
        in_(g, rnd(SH(4, 2), -1, 1), true);
        a_b(g, "overwrite", false);
        gc_run(g);
    }
    {
        static const int64_t idx[6] = {3, 0, 1, 1, 2, 0};
        GC(TAKE_ALONG_AXIS, "take_along_axis axis 1");
        in_(g, rnd(SH(3, 4), -1, 1), true);
        in_(g, from_i64(SH(3, 2), idx), false);
        a_i(g, "axis", 1);
        gc_run(g);
    }
    {
        static const int64_t idx[6] = {3, 0, 1, 1, 2, 0};
        GC(TAKE_ALONG_AXIS, "take_along_axis broadcast x");
        in_(g, rnd(SH(1, 4), -1, 1), true);
        in_(g, from_i64(SH(3, 2), idx), false);
        a_i(g, "axis", 1);
        gc_run(g);
    }
    {
        GC(TILE, "tile [2, 1, 2] on [2, 3]");
        in_(g, rnd(SH(2, 3), -1, 1), true);
        A_INTS(g, "repeat_times", 2, 1, 2);
        gc_run(g);
    }
    {
        GC(FLIP, "flip axes 0, 2");
        in_(g, rnd(SH(2, 3, 2), -1, 1), true);
        A_INTS(g, "axis", 0, 2);
        gc_run(g);
    }
    for (int m = 0; m < 3; m++) {
        static const char *const mode[3] = {"constant", "reflect",
                                            "replicate"};
        GC(PAD, mode[m]);
        in_(g, rnd(SH(3, 4), -1, 1), true);
        A_INTS(g, "pad", 1, 2, 2, 1);
        a_s(g, "mode", mode[m]);
        a_f(g, "value", 0.5);
        gc_run(g);
    }
    for (int lg = 0; lg < 2; lg++) {
        GC(TOPK, lg ? "topk largest" : "topk smallest");
        in_(g, distinct(SH(3, 5), 0.1), true);
        a_i(g, "k", 2);
        a_b(g, "largest", lg);
        g->nfun = 1;
        gc_run(g);
    }
    {
        GC(SORT, "sort axis 0 descending");
        in_(g, distinct(SH(4, 3), 0.1), true);
        a_i(g, "axis", 0);
        a_b(g, "descending", true);
        g->nfun = 1;
        gc_run(g);
    }
}

/* ---- cases: views -------------------------------------------------------- */

static keel_status f_reshape(const struct gc *g, keel_tensor *const *in,
                             keel_tensor **out, int *n)
{
    *n = 1;
    return keel_reshape(in[0], 2, (const int64_t[]){4, -1}, out);
}

/* reshape of a non-contiguous view: a copy inside reshape. */
static keel_status f_reshape_copy(const struct gc *g, keel_tensor *const *in,
                                  keel_tensor **out, int *n)
{
    keel_tensor *t = NULL;
    keel_status st = keel_transpose(in[0], 0, 2, &t);

    *n = 1;
    if (st == KEEL_STATUS_OK)
        st = keel_reshape(t, 1, (const int64_t[]){-1}, out);
    keel_tensor_free(t);
    return st;
}

static keel_status f_permute(const struct gc *g, keel_tensor *const *in,
                             keel_tensor **out, int *n)
{
    *n = 1;
    return keel_permute(in[0], (const int[]){2, 0, 1}, out);
}

static keel_status f_slice(const struct gc *g, keel_tensor *const *in,
                           keel_tensor **out, int *n)
{
    *n = 1;
    return keel_slice(in[0], (int)g->p[0], g->p[1], g->p[2], g->p[3], out);
}

static keel_status f_expand(const struct gc *g, keel_tensor *const *in,
                            keel_tensor **out, int *n)
{
    *n = 1;
    return keel_expand(in[0], 3, (const int64_t[]){2, 3, 4}, out);
}

static keel_status f_squeeze(const struct gc *g, keel_tensor *const *in,
                             keel_tensor **out, int *n)
{
    keel_tensor *t = NULL;
    keel_status st = keel_squeeze(in[0], 0, NULL, &t);

    *n = 1;
    if (st == KEEL_STATUS_OK)
        st = keel_unsqueeze(t, -1, out);
    keel_tensor_free(t);
    return st;
}

static keel_status f_flatten(const struct gc *g, keel_tensor *const *in,
                             keel_tensor **out, int *n)
{
    *n = 1;
    return keel_flatten(in[0], 1, 2, out);
}

static keel_status f_to(const struct gc *g, keel_tensor *const *in,
                        keel_tensor **out, int *n)
{
    keel_tensor *t = NULL;
    keel_status st = keel_tensor_to(in[0], "cpu:1", &t);

    *n = 1;
    if (st == KEEL_STATUS_OK)
        st = keel_exp(t, out);
    keel_tensor_free(t);
    return st;
}

/* Views between ops: exp(x)[:, ::-2].T * y[None] */
static keel_status f_chain(const struct gc *g, keel_tensor *const *in,
                           keel_tensor **out, int *n)
{
    keel_tensor *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    keel_status st = keel_exp(in[0], &a);

    *n = 1;
    if (st == KEEL_STATUS_OK)
        st = keel_slice(a, 1, -1, -100, -2, &b);
    if (st == KEEL_STATUS_OK)
        st = keel_transpose(b, 0, 1, &c);
    if (st == KEEL_STATUS_OK)
        st = keel_unsqueeze(in[1], 0, &d);
    if (st == KEEL_STATUS_OK)
        st = keel_multiply(c, d, out);
    keel_tensor_free(a);
    keel_tensor_free(b);
    keel_tensor_free(c);
    keel_tensor_free(d);
    return st;
}

static void view_case(const char *label, gc_fwd fwd, keel_tensor *x)
{
    struct gc s, *g = gc_init(&s, -1, label);

    g->fwd = fwd;
    in_(g, x, true);
    gc_run(g);
}

static void test_gradcheck_views(void)
{
    view_case("reshape", f_reshape, rnd(SH(2, 3, 4), -1, 1));
    view_case("reshape of a transposed view (copies)", f_reshape_copy,
              rnd(SH(2, 3, 4), -1, 1));
    view_case("permute", f_permute, rnd(SH(2, 3, 4), -1, 1));
    view_case("expand", f_expand, rnd(SH(3, 1), -1, 1));
    view_case("squeeze + unsqueeze", f_squeeze, rnd(SH(2, 1, 3), -1, 1));
    view_case("flatten", f_flatten, rnd(SH(2, 3, 4), -1, 1));
    view_case("to cpu:1", f_to, rnd(SH(2, 3), -1, 1));
    {
        struct gc s, *g = gc_init(&s, -1, "slice step 2");
        g->fwd = f_slice;
        in_(g, rnd(SH(3, 7), -1, 1), true);
        g->p[0] = 1;
        g->p[1] = 1;
        g->p[2] = 6;
        g->p[3] = 2;
        gc_run(g);
    }
    {
        struct gc s, *g = gc_init(&s, -1, "slice negative step");
        g->fwd = f_slice;
        in_(g, rnd(SH(5, 2), -1, 1), true);
        g->p[0] = 0;
        g->p[1] = 4;
        g->p[2] = 0;
        g->p[3] = -1;
        gc_run(g);
    }
    {
        struct gc s, *g = gc_init(&s, -1, "views between ops");
        g->fwd = f_chain;
        in_(g, rnd(SH(3, 5), -1, 1), true);
        in_(g, rnd(SH(3), -1, 1), true);
        gc_run(g);
    }
}

static void test_gradcheck_catalog(void)
{
    int want = 0, got = 0;

    cases_binary();
    cases_unary();
    cases_reduce();
    cases_linalg();
    cases_conv();
    cases_norm();
    cases_loss();
    cases_manip();
    for (int op = 0; op < KEEL_OP_COUNT; op++) {
        const keel_op_info *info = keel_op_get_info((keel_op_id)op);
        size_t len = strlen(info->name);
        if (!strcmp(info->grad_rule, "NONE") ||
            (len > 5 && !strcmp(info->name + len - 5, "_grad")))
            continue;
        want++;
        if (covered[op]) {
            got++;
        } else {
            fprintf(stderr, "\n  no gradient check for '%s'\n", info->name);
            CU_FAIL("a differentiable op has no gradient check");
        }
    }
    printf("\n  gradient checks: %d cases, %d of %d differentiable ops ",
           cases_run, got, want);
    CU_ASSERT_EQUAL(got, want);
}

/* ---- graph semantics ----------------------------------------------------- */

static keel_tensor *param(int ndim, const int64_t *shape, double lo,
                          double hi)
{
    keel_tensor *t = rnd(ndim, shape, lo, hi);

    if (t)
        keel_tensor_set_stop_gradient(t, false);
    return t;
}

static bool close_to(const double *a, const double *b, int64_t n, double tol)
{
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(a[i] - b[i]) <= tol * (1 + fabs(b[i])))) {
            fprintf(stderr, "\n  element %lld: %.10g vs %.10g\n",
                    (long long)i, a[i], b[i]);
            return false;
        }
    return true;
}

/* The leaf's .grad equals factor * f(x) elementwise. */
static void expect_grad(const keel_tensor *x, double (*f)(double),
                        double factor)
{
    keel_tensor *g = keel_tensor_grad(x);
    int64_t n = keel_tensor_numel(x);
    double *xv = to_f64(x), *gv, *want;

    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    gv = to_f64(g);
    want = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        want[i] = factor * f(xv[i]);
    CU_ASSERT(close_to(gv, want, n, 1e-12));
    free(xv);
    free(gv);
    free(want);
    keel_tensor_free(g);
}

static double twice(double x)
{
    return 2 * x;
}

static double one(double x)
{
    return 1;
}

static void test_stop_gradient(void)
{
    keel_tensor *x = rnd(SH(2, 3), -1, 1), *y = NULL, *z = NULL, *i = NULL;
    static const int64_t iv[2] = {1, 2};

    CU_ASSERT(keel_tensor_stop_gradient(x));
    CU_ASSERT(keel_tensor_is_leaf(x));
    OK(keel_exp(x, &y));
    CU_ASSERT(keel_tensor_stop_gradient(y));
    CU_ASSERT(keel_tensor_is_leaf(y));
    CU_ASSERT_PTR_NULL(keel_tensor_grad_fn_name(y));
    keel_tensor_free(y);
    OK(keel_zeros(SH(2), KEEL_F32, NULL, &y));
    CU_ASSERT(keel_tensor_stop_gradient(y));
    keel_tensor_free(y);

    OK(keel_tensor_set_stop_gradient(x, false));
    CU_ASSERT(!keel_tensor_stop_gradient(x));
    CU_ASSERT(keel_tensor_is_leaf(x));
    OK(keel_exp(x, &y));
    CU_ASSERT(!keel_tensor_stop_gradient(y));
    CU_ASSERT(!keel_tensor_is_leaf(y));
    CU_ASSERT_STRING_EQUAL(keel_tensor_grad_fn_name(y), "exp");
    OK(keel_transpose(y, 0, 1, &z));
    CU_ASSERT_STRING_EQUAL(keel_tensor_grad_fn_name(z), "permute");
    keel_tensor_free(z);
    /* Comparisons and indices never carry gradients. */
    OK(keel_greater(y, x, &z));
    CU_ASSERT(keel_tensor_stop_gradient(z));
    keel_tensor_free(z);
    OK(keel_argmax(y, 1, false, &z));
    CU_ASSERT(keel_tensor_stop_gradient(z));
    keel_tensor_free(z);
    /* A loss without gradient. */
    z = rnd(SH(2), 0, 1);
    OK(keel_sum(z, 0, NULL, false, &i));
    ERR(keel_backward(i, NULL, false), KEEL_STATUS_INVALID_ARGUMENT,
        "stop_gradient");
    keel_tensor_free(z);
    keel_tensor_free(i);
    /* Integers cannot require a gradient. */
    i = from_i64(SH(2), iv);
    ERR(keel_tensor_set_stop_gradient(i, false),
        KEEL_STATUS_INVALID_ARGUMENT, "floating-point");
    CU_ASSERT(keel_tensor_stop_gradient(i));
    OK(keel_tensor_set_stop_gradient(i, true));
    keel_tensor_free(i);
    /* Setting stop_gradient on an intermediate cuts the graph there. */
    OK(keel_tensor_set_stop_gradient(y, true));
    OK(keel_multiply(y, x, &z));
    OK(keel_sum(z, 0, NULL, false, &i));
    OK(keel_backward(i, NULL, false));
    {
        /* d/dx sum(c * x) with c constant = c = exp(x) */
        keel_tensor *g = keel_tensor_grad(x);
        double *gv = to_f64(g), *yv = to_f64(y);
        CU_ASSERT(close_to(gv, yv, 6, 1e-12));
        free(gv);
        free(yv);
        keel_tensor_free(g);
    }
    keel_tensor_free(i);
    keel_tensor_free(z);
    keel_tensor_free(y);
    keel_tensor_free(x);
    CU_ASSERT_PTR_NULL(keel_tensor_grad(NULL));
    CU_ASSERT(keel_tensor_stop_gradient(NULL));
}

/* y = sum(x * x): grad 2x per backward. */
static keel_tensor *sum_sq(keel_tensor *x)
{
    keel_tensor *s = NULL, *y = NULL;

    OK(keel_multiply(x, x, &s));
    OK(keel_sum(s, 0, NULL, false, &y));
    keel_tensor_free(s);
    return y;
}

static void test_accumulate(void)
{
    keel_tensor *x = param(SH(2, 3), -1, 1), *y, *g, *z = NULL;

    CU_ASSERT_PTR_NULL(keel_tensor_grad(x));
    y = sum_sq(x);
    OK(keel_backward(y, NULL, false));
    keel_tensor_free(y);
    expect_grad(x, twice, 1);
    y = sum_sq(x);
    OK(keel_backward(y, NULL, false));
    keel_tensor_free(y);
    expect_grad(x, twice, 2);
    /* Intermediate tensors keep no gradient. */
    OK(keel_exp(x, &z));
    y = sum_sq(z);
    OK(keel_backward(y, NULL, false));
    CU_ASSERT_PTR_NULL(keel_tensor_grad(z));
    keel_tensor_free(y);
    keel_tensor_free(z);
    /* clear_grad: zeros of the same shape (Paddle's set_to_zero). */
    g = keel_tensor_grad(x);
    OK(keel_tensor_clear_grad(x));
    {
        keel_tensor *c = keel_tensor_grad(x);
        double *v = to_f64(c), *old = to_f64(g);
        CU_ASSERT_PTR_NOT_NULL_FATAL(c);
        CU_ASSERT_EQUAL(keel_tensor_numel(c), 6);
        for (int i = 0; i < 6; i++) {
            CU_ASSERT_EQUAL(v[i], 0.0);
            CU_ASSERT(old[i] != 0.0); /* the earlier reference is kept */
        }
        free(v);
        free(old);
        keel_tensor_free(c);
    }
    keel_tensor_free(g);
    y = sum_sq(x);
    OK(keel_backward(y, NULL, false));
    keel_tensor_free(y);
    expect_grad(x, twice, 1);
    /* set_grad: replace and drop. */
    OK(keel_ones(SH(2, 3), KEEL_F32, NULL, &z));
    OK(keel_tensor_set_grad(x, z));
    g = keel_tensor_grad(x);
    CU_ASSERT_EQUAL(keel_tensor_dtype(g), KEEL_F64);
    CU_ASSERT_EQUAL(item(g), 1.0);
    keel_tensor_free(g);
    keel_tensor_free(z);
    OK(keel_zeros(SH(3), KEEL_F64, NULL, &z));
    ERR(keel_tensor_set_grad(x, z), KEEL_STATUS_INVALID_ARGUMENT, "shape");
    keel_tensor_free(z);
    OK(keel_tensor_set_grad(x, NULL));
    CU_ASSERT_PTR_NULL(keel_tensor_grad(x));
    OK(keel_tensor_clear_grad(x)); /* nothing to clear */
    CU_ASSERT_PTR_NULL(keel_tensor_grad(x));
    keel_tensor_free(x);
}

static void test_retain_graph(void)
{
    keel_tensor *x = param(SH(4), -1, 1), *e = NULL, *y = NULL;

    OK(keel_exp(x, &e));
    OK(keel_sum(e, 0, NULL, false, &y));
    OK(keel_backward(y, NULL, true));
    OK(keel_backward(y, NULL, false));
    expect_grad(x, exp, 2);
    ERR(keel_backward(y, NULL, false), KEEL_STATUS_INVALID_ARGUMENT,
        "already freed");
    /* Nothing was added by the failed call. */
    expect_grad(x, exp, 2);
    /* Any part of the freed graph refuses, too. */
    {
        keel_tensor *y2 = NULL;
        OK(keel_sum(e, 0, NULL, false, &y2));
        ERR(keel_backward(y2, NULL, false), KEEL_STATUS_INVALID_ARGUMENT,
            "retain_graph");
        keel_tensor_free(y2);
    }
    keel_tensor_free(y);
    keel_tensor_free(e);
    keel_tensor_free(x);
}

static void test_detach(void)
{
    keel_tensor *x = param(SH(2, 2), -1, 1), *e = NULL, *d = NULL, *y = NULL;

    OK(keel_exp(x, &e));
    OK(keel_detach(e, &d));
    CU_ASSERT(keel_tensor_stop_gradient(d));
    CU_ASSERT(keel_tensor_is_leaf(d));
    CU_ASSERT(keel_tensor_shares_storage(d, e));
    OK(keel_exp(d, &y));
    CU_ASSERT(keel_tensor_stop_gradient(y));
    keel_tensor_free(y);
    /* y = sum(e * detach(e)): grad = e * e (the detached factor is a
     * constant), not 2 e^2. */
    {
        keel_tensor *p = NULL;
        OK(keel_multiply(e, d, &p));
        OK(keel_sum(p, 0, NULL, false, &y));
        OK(keel_backward(y, NULL, false));
        keel_tensor_free(p);
    }
    {
        keel_tensor *g = keel_tensor_grad(x);
        double *gv = to_f64(g), *ev = to_f64(e), want[4];
        for (int i = 0; i < 4; i++)
            want[i] = ev[i] * ev[i];
        CU_ASSERT(close_to(gv, want, 4, 1e-12));
        free(gv);
        free(ev);
        keel_tensor_free(g);
    }
    keel_tensor_free(y);
    keel_tensor_free(d);
    keel_tensor_free(e);
    keel_tensor_free(x);
}

/* Helpers for the scoped no-grad test: each leaves its block early. */
static int ng_return_inside(keel_tensor *x, bool *recorded)
{
    KEEL_NO_GRAD {
        keel_tensor *y = NULL;

        if (keel_exp(x, &y) != KEEL_STATUS_OK)
            return -1;
        *recorded = !keel_tensor_stop_gradient(y);
        keel_tensor_free(y);
        return 1; /* leaves the scope by return */
    }
    return 0;
}

static int ng_scope_function(bool fail)
{
    KEEL_NO_GRAD_SCOPE;

    if (fail)
        return keel_is_grad_enabled() ? -1 : 1;
    return keel_is_grad_enabled() ? -1 : 2;
}

static void test_no_grad_scoped(void)
{
    keel_tensor *x = param(SH(3), -1, 1), *y = NULL;
    bool recorded = true;
    int passes = 0;

    CU_ASSERT(keel_is_grad_enabled());
    KEEL_NO_GRAD {
        CU_ASSERT(!keel_is_grad_enabled());
        OK(keel_exp(x, &y));
        CU_ASSERT(keel_tensor_stop_gradient(y));
        KEEL_NO_GRAD {
            CU_ASSERT(!keel_is_grad_enabled());
            passes++;
        }
        CU_ASSERT(!keel_is_grad_enabled()); /* the outer one still open */
        passes++;
    }
    CU_ASSERT_EQUAL(passes, 2); /* each block ran exactly once */
    CU_ASSERT(keel_is_grad_enabled());
    keel_tensor_free(y);
    y = NULL;

    /* return from inside the block */
    CU_ASSERT_EQUAL(ng_return_inside(x, &recorded), 1);
    CU_ASSERT(!recorded);
    CU_ASSERT(keel_is_grad_enabled());

    /* break and goto out of the block */
    for (int i = 0; i < 3; i++) {
        KEEL_NO_GRAD {
            if (i == 1)
                break; /* leaves the KEEL_NO_GRAD block only */
            CU_ASSERT(!keel_is_grad_enabled());
        }
        CU_ASSERT(keel_is_grad_enabled());
    }
    KEEL_NO_GRAD {
        goto out;
    }
out:
    CU_ASSERT(keel_is_grad_enabled());

    /* the statement form lasts until its function returns */
    CU_ASSERT_EQUAL(ng_scope_function(true), 1);
    CU_ASSERT(keel_is_grad_enabled());
    CU_ASSERT_EQUAL(ng_scope_function(false), 2);
    CU_ASSERT(keel_is_grad_enabled());

    /* after the scopes, recording works again */
    OK(keel_exp(x, &y));
    CU_ASSERT(!keel_tensor_stop_gradient(y));
    keel_tensor_free(y);
    keel_tensor_free(x);
}

static void test_no_grad(void)
{
    keel_tensor *x = param(SH(3), -1, 1), *y = NULL, *v = NULL;

    CU_ASSERT(keel_is_grad_enabled());
    keel_no_grad_begin();
    CU_ASSERT(!keel_is_grad_enabled());
    keel_no_grad_begin();
    OK(keel_exp(x, &y));
    OK(keel_reshape(x, 2, (const int64_t[]){3, 1}, &v));
    CU_ASSERT(keel_tensor_stop_gradient(y));
    CU_ASSERT(keel_tensor_stop_gradient(v));
    keel_no_grad_end();
    CU_ASSERT(!keel_is_grad_enabled());
    keel_no_grad_end();
    CU_ASSERT(keel_is_grad_enabled());
    keel_no_grad_end(); /* unmatched: a no-op */
    CU_ASSERT(keel_is_grad_enabled());
    keel_tensor_free(y);
    keel_tensor_free(v);
    OK(keel_exp(x, &y));
    CU_ASSERT(!keel_tensor_stop_gradient(y));
    keel_tensor_free(y);
    keel_tensor_free(x);
}

static double diamond_grad(double x)
{
    /* y = sin(a) * cos(a) with a = 2x  ->  dy/dx = 2 cos(2a) */
    return 2 * cos(4 * x);
}

static void test_diamond(void)
{
    keel_tensor *x = param(SH(5), -1, 1), *two = NULL, *a = NULL, *s = NULL,
                *c = NULL, *p = NULL, *y = NULL;

    OK(keel_full(0, NULL, KEEL_F64, 2.0, NULL, &two));
    OK(keel_multiply(x, two, &a));
    OK(keel_sin(a, &s));
    OK(keel_cos(a, &c));
    OK(keel_multiply(s, c, &p));
    OK(keel_sum(p, 0, NULL, false, &y));
    OK(keel_backward(y, NULL, false));
    expect_grad(x, diamond_grad, 1);
    keel_tensor_free(y);
    keel_tensor_free(p);
    keel_tensor_free(c);
    keel_tensor_free(s);
    keel_tensor_free(a);
    keel_tensor_free(two);
    /* One tensor twice in one op. */
    OK(keel_tensor_set_grad(x, NULL));
    y = sum_sq(x);
    OK(keel_backward(y, NULL, false));
    expect_grad(x, twice, 1);
    keel_tensor_free(y);
    keel_tensor_free(x);
}

/* What a grad-ready hook saw. */
struct hook_log {
    int calls;
    keel_tensor *seen; /* the .grad at the call (a reference) */
    bool fail;         /* make the hook fail */
};

static keel_status log_hook(keel_tensor *leaf, void *ctx)
{
    struct hook_log *h = ctx;

    h->calls++;
    keel_tensor_free(h->seen);
    h->seen = keel_tensor_grad(leaf);
    if (h->fail) /* any failing call, for its message */
        return keel_tensor_set_grad(NULL, NULL);
    return KEEL_STATUS_OK;
}

/* The hook runs once per backward, after the last of several edges into
 * the leaf has delivered: the .grad it sees is the one left at the end
 * (accumulation replaces the tensor, so identity proves it). */
static void test_grad_ready_hook(void)
{
    keel_tensor *x = param(SH(4), -1, 1), *u = param(SH(4), -1, 1);
    keel_tensor *s = NULL, *xx = NULL, *p = NULL, *y = NULL, *g = NULL;
    struct hook_log hx = {0}, hu = {0};

    OK(keel_tensor_add_grad_ready_hook(x, log_hook, &hx));
    OK(keel_tensor_add_grad_ready_hook(u, log_hook, &hu));
    /* y = sum(x*x + sin(x)): three edges into x; u is not used. */
    OK(keel_multiply(x, x, &xx));
    OK(keel_sin(x, &s));
    OK(keel_add(xx, s, &p));
    OK(keel_sum(p, 0, NULL, false, &y));
    OK(keel_backward(y, NULL, true));
    CU_ASSERT_EQUAL(hx.calls, 1);
    CU_ASSERT_EQUAL(hu.calls, 0);
    g = keel_tensor_grad(x);
    CU_ASSERT_PTR_NOT_NULL(g);
    CU_ASSERT_PTR_EQUAL(hx.seen, g);
    keel_tensor_free(g);
    /* A second backward accumulates and calls it again, at the end. */
    OK(keel_backward(y, NULL, true));
    CU_ASSERT_EQUAL(hx.calls, 2);
    g = keel_tensor_grad(x);
    CU_ASSERT_PTR_EQUAL(hx.seen, g);
    keel_tensor_free(g);
    /* keel_grad writes no .grad and calls no hook. */
    OK(keel_grad(&y, 1, NULL, &x, 1, true, false, &g));
    keel_tensor_free(g);
    CU_ASSERT_EQUAL(hx.calls, 2);
    /* A failing hook stops backward with its message. */
    hx.fail = true;
    CU_ASSERT_EQUAL(keel_backward(y, NULL, true),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "grad-ready hook"));
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "tensor is NULL"));
    CU_ASSERT_EQUAL(hx.calls, 3);
    /* Removed: not called any more. */
    keel_tensor_remove_grad_ready_hook(x, log_hook, &hx);
    OK(keel_backward(y, NULL, false));
    CU_ASSERT_EQUAL(hx.calls, 3);
    /* Only leaves take hooks. */
    CU_ASSERT_EQUAL(keel_tensor_add_grad_ready_hook(y, log_hook, &hx),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(keel_tensor_add_grad_ready_hook(x, NULL, &hx),
                    KEEL_STATUS_INVALID_ARGUMENT);
    keel_tensor_free(hx.seen);
    keel_tensor_free(y);
    keel_tensor_free(p);
    keel_tensor_free(s);
    keel_tensor_free(xx);
    keel_tensor_free(x);
    keel_tensor_free(u);
}

static void test_ties(void)
{
    static const double xv[3] = {1, 2, 3}, yv[3] = {1, 5, 0};
    static const double mv[4] = {2, 7, 7, 1};
    keel_tensor *x = from_f64(SH(3), xv), *y = from_f64(SH(3), yv), *m = NULL,
                *s = NULL;

    keel_tensor_set_stop_gradient(x, false);
    keel_tensor_set_stop_gradient(y, false);
    OK(keel_maximum(x, y, &m));
    OK(keel_sum(m, 0, NULL, false, &s));
    OK(keel_backward(s, NULL, false));
    {
        keel_tensor *gx = keel_tensor_grad(x), *gy = keel_tensor_grad(y);
        double *a = to_f64(gx), *b = to_f64(gy);
        static const double wa[3] = {0.5, 0, 1}, wb[3] = {0.5, 1, 0};
        CU_ASSERT(close_to(a, wa, 3, 0) && close_to(b, wb, 3, 0));
        free(a);
        free(b);
        keel_tensor_free(gx);
        keel_tensor_free(gy);
    }
    keel_tensor_free(s);
    keel_tensor_free(m);
    keel_tensor_free(x);
    keel_tensor_free(y);
    /* max: each tied maximum gets the full gradient (Paddle's max). */
    x = from_f64(SH(4), mv);
    keel_tensor_set_stop_gradient(x, false);
    OK(keel_max(x, 0, NULL, false, &m));
    OK(keel_backward(m, NULL, false));
    {
        keel_tensor *gx = keel_tensor_grad(x);
        double *a = to_f64(gx);
        static const double wa[4] = {0, 1, 1, 0};
        CU_ASSERT(close_to(a, wa, 4, 0));
        free(a);
        keel_tensor_free(gx);
    }
    keel_tensor_free(m);
    keel_tensor_free(x);
}

static void test_inplace_detection(void)
{
    keel_tensor *x = rnd(SH(2, 3), -1, 1), *w = param(SH(3, 2), -1, 1);
    keel_tensor *m = NULL, *y = NULL, *g = NULL;
    keel_attr lr = keel_attr_float("lr", 0.1);
    int n = 0;

    OK(keel_matmul(x, w, false, false, &m));
    OK(keel_sum(m, 0, NULL, false, &y));
    OK(keel_ones(SH(3, 2), KEEL_F64, NULL, &g));
    keel_no_grad_begin();
    OK(keel_op_run(KEEL_OP_SGD_UPDATE, (keel_tensor *const[]){w, g}, 2, &lr,
                   1, NULL, 0, &n));
    keel_no_grad_end();
    ERR(keel_backward(y, NULL, false), KEEL_STATUS_INVALID_ARGUMENT,
        "modified in place");
    ERR(keel_backward(y, NULL, false), KEEL_STATUS_INVALID_ARGUMENT,
        "matmul");
    CU_ASSERT_PTR_NULL(keel_tensor_grad(w));
    keel_tensor_free(y);
    keel_tensor_free(m);
    /* A fresh forward after the update is fine. */
    OK(keel_matmul(x, w, false, false, &m));
    OK(keel_sum(m, 0, NULL, false, &y));
    OK(keel_backward(y, NULL, false));
    keel_tensor_free(y);
    keel_tensor_free(m);
    keel_tensor_free(g);
    keel_tensor_free(w);
    keel_tensor_free(x);
}

static void test_nonscalar(void)
{
    keel_tensor *x = param(SH(2, 3), -1, 1), *three = NULL, *y = NULL,
                *go = NULL, *bad = NULL;
    static const double gv[6] = {1, -2, 0.5, 3, 0, -1};

    OK(keel_full(0, NULL, KEEL_F64, 3.0, NULL, &three));
    OK(keel_multiply(x, three, &y));
    go = from_f64(SH(2, 3), gv);
    OK(keel_backward(y, go, true));
    {
        keel_tensor *g = keel_tensor_grad(x);
        double *a = to_f64(g), want[6];
        for (int i = 0; i < 6; i++)
            want[i] = 3 * gv[i];
        CU_ASSERT(close_to(a, want, 6, 1e-15));
        free(a);
        keel_tensor_free(g);
    }
    /* NULL: ones, for any shape (Paddle). */
    OK(keel_tensor_set_grad(x, NULL));
    OK(keel_backward(y, NULL, true));
    expect_grad(x, one, 3);
    bad = rnd(SH(3, 2), 0, 1);
    ERR(keel_backward(y, bad, true), KEEL_STATUS_INVALID_ARGUMENT, "shape");
    /* A leaf as the root. */
    OK(keel_tensor_set_grad(x, NULL));
    OK(keel_backward(x, NULL, false));
    expect_grad(x, one, 1);
    keel_tensor_free(bad);
    keel_tensor_free(go);
    keel_tensor_free(y);
    keel_tensor_free(three);
    keel_tensor_free(x);
}

static void test_grad_api(void)
{
    keel_tensor *x = param(SH(3), -1, 1), *u = param(SH(3), -1, 1);
    keel_tensor *e = NULL, *z, *grads[2] = {NULL, NULL};

    OK(keel_exp(x, &e));
    z = sum_sq(e);
    /* dz/de = 2e for an intermediate, dz/dx = 2 e^2; no .grad written. */
    OK(keel_grad(&z, 1, NULL, (keel_tensor *const[]){e, x}, 2, true, false,
                 grads));
    {
        double *a = to_f64(grads[0]), *b = to_f64(grads[1]), *ev = to_f64(e);
        double wa[3], wb[3];
        for (int i = 0; i < 3; i++) {
            wa[i] = 2 * ev[i];
            wb[i] = 2 * ev[i] * ev[i];
        }
        CU_ASSERT(close_to(a, wa, 3, 1e-12) && close_to(b, wb, 3, 1e-12));
        free(a);
        free(b);
        free(ev);
    }
    CU_ASSERT_PTR_NULL(keel_tensor_grad(x));
    keel_tensor_free(grads[0]);
    keel_tensor_free(grads[1]);
    /* An input the outputs do not depend on. */
    ERR(keel_grad(&z, 1, NULL, &u, 1, true, false, grads),
        KEEL_STATUS_INVALID_ARGUMENT, "does not influence");
    CU_ASSERT_PTR_NULL(grads[0]);
    OK(keel_grad(&z, 1, NULL, &u, 1, false, true, grads));
    CU_ASSERT_PTR_NULL(grads[0]);
    keel_tensor_free(z);
    keel_tensor_free(e);
    keel_tensor_free(u);
    keel_tensor_free(x);
}

/* Live bytes of both devices. */
static uint64_t live_bytes(void)
{
    keel_memory_stats a, b;

    keel_memory_stats_get("cpu:0", &a);
    keel_memory_stats_get("cpu:1", &b);
    return a.allocated + b.allocated;
}

static void test_graph_freeing(void)
{
    uint64_t before = live_bytes();
    keel_tensor *x = param(SH(16), -1, 1), *t, *y;
    double *gv;

    /* A long chain: built, differentiated, and freed without recursion. */
    t = keel_tensor_ref(x);
    for (int i = 0; i < 20000; i++) {
        keel_tensor *n = NULL;
        OK(i % 2 ? keel_neg(t, &n) : keel_reshape(t, 1, (int64_t[]){-1}, &n));
        keel_tensor_free(t);
        t = n;
    }
    OK(keel_sum(t, 0, NULL, false, &y));
    OK(keel_backward(y, NULL, false));
    {
        /* 10000 negations: the gradient is 1 */
        keel_tensor *g = keel_tensor_grad(x);
        gv = to_f64(g);
        CU_ASSERT(gv && gv[0] == 1.0 && gv[15] == 1.0);
        free(gv);
        keel_tensor_free(g);
    }
    keel_tensor_free(t);
    keel_tensor_free(y);
    keel_tensor_free(x);
    CU_ASSERT_EQUAL(live_bytes(), before);
    /* An unused graph goes away with its last output. */
    x = param(SH(8), -1, 1);
    OK(keel_exp(x, &t));
    OK(keel_sin(t, &y));
    keel_tensor_free(t);
    keel_tensor_free(x);
    keel_tensor_free(y);
    CU_ASSERT_EQUAL(live_bytes(), before);
}

/* logits = relu(x W1 + b1) W2 + b2; loss = cross_entropy(logits, labels) */
static keel_status mlp_loss(keel_tensor *const *p, keel_tensor *x,
                            keel_tensor *labels, keel_tensor **loss)
{
    keel_tensor *h = NULL, *r = NULL, *o = NULL, *outs[2] = {NULL, NULL};
    keel_status st;
    int n = 0;

    st = keel_linear(x, p[0], p[1], &h);
    if (st == KEEL_STATUS_OK)
        st = keel_relu(h, &r);
    if (st == KEEL_STATUS_OK)
        st = keel_linear(r, p[2], p[3], &o);
    if (st == KEEL_STATUS_OK)
        st = keel_op_run(KEEL_OP_CROSS_ENTROPY,
                         (keel_tensor *const[]){o, labels}, 2, NULL, 0, outs,
                         2, &n);
    keel_tensor_free(h);
    keel_tensor_free(r);
    keel_tensor_free(o);
    keel_tensor_free(outs[1]);
    *loss = outs[0];
    return st;
}

static keel_status f_mlp(const struct gc *g, keel_tensor *const *in,
                         keel_tensor **out, int *n)
{
    *n = 1;
    return mlp_loss(in, in[4], in[5], out);
}

static void test_mlp(void)
{
    int64_t lab[16];
    uint64_t before = live_bytes();
    double first = 0, last = 0;

    for (int i = 0; i < 16; i++)
        lab[i] = i % 3;
    /* Gradients of all parameters against central differences. */
    {
        struct gc s, *g = gc_init(&s, -1, "MLP 4-16-3 cross entropy");
        g->fwd = f_mlp;
        in_(g, rnd(SH(4, 16), -0.5, 0.5), true);
        in_(g, rnd(SH(16), -0.1, 0.1), true);
        in_(g, rnd(SH(16, 3), -0.5, 0.5), true);
        in_(g, rnd(SH(3), -0.1, 0.1), true);
        in_(g, rnd(SH(16, 4), -1, 1), false);
        in_(g, from_i64(SH(16), lab), false);
        g->atol = 1e-5;
        gc_run(g);
    }
    /* A few SGD steps with keel_backward lower the loss. */
    {
        keel_tensor *p[4], *x = rnd(SH(16, 4), -1, 1),
                    *labels = from_i64(SH(16), lab);
        keel_attr lr = keel_attr_float("lr", 0.5);

        p[0] = param(SH(4, 16), -0.5, 0.5);
        p[1] = param(SH(16), -0.1, 0.1);
        p[2] = param(SH(16, 3), -0.5, 0.5);
        p[3] = param(SH(3), -0.1, 0.1);
        for (int step = 0; step < 30; step++) {
            keel_tensor *loss = NULL;
            int n = 0;
            OK(mlp_loss(p, x, labels, &loss));
            if (step == 0)
                first = item(loss);
            last = item(loss);
            OK(keel_backward(loss, NULL, false));
            keel_tensor_free(loss);
            keel_no_grad_begin();
            for (int k = 0; k < 4; k++) {
                keel_tensor *gr = keel_tensor_grad(p[k]);
                OK(keel_op_run(KEEL_OP_SGD_UPDATE,
                               (keel_tensor *const[]){p[k], gr}, 2, &lr, 1,
                               NULL, 0, &n));
                keel_tensor_free(gr);
                OK(keel_tensor_clear_grad(p[k]));
            }
            keel_no_grad_end();
        }
        CU_ASSERT(last < 0.8 * first);
        for (int k = 0; k < 4; k++)
            keel_tensor_free(p[k]);
        keel_tensor_free(x);
        keel_tensor_free(labels);
    }
    CU_ASSERT_EQUAL(live_bytes(), before);
}

int main(void)
{
    static const struct {
        const char *name;
        CU_TestFunc fn;
    } tests[] = {
        {"gradcheck: every differentiable catalog op", test_gradcheck_catalog},
        {"gradcheck: views", test_gradcheck_views},
        {"stop_gradient defaults and flow", test_stop_gradient},
        {"accumulation, clear_grad, set_grad", test_accumulate},
        {"retain_graph and reuse of a freed graph", test_retain_graph},
        {"detach", test_detach},
        {"no_grad scopes", test_no_grad},
        {"KEEL_NO_GRAD and KEEL_NO_GRAD_SCOPE", test_no_grad_scoped},
        {"diamond graph", test_diamond},
        {"grad-ready hooks", test_grad_ready_hook},
        {"ties: maximum and max", test_ties},
        {"in-place modification detection", test_inplace_detection},
        {"non-scalar backward", test_nonscalar},
        {"keel_grad", test_grad_api},
        {"graph freeing", test_graph_freeing},
        {"MLP end to end", test_mlp},
    };
    CU_pSuite suite;
    unsigned failed;

    if (keel_set_device("cpu:0") != KEEL_STATUS_OK) {
        fprintf(stderr, "cpu:0: %s\n", keel_last_error());
        return 1;
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    suite = CU_add_suite("autograd", NULL, NULL);
    for (size_t i = 0; suite && i < sizeof(tests) / sizeof(tests[0]); i++)
        CU_add_test(suite, tests[i].name, tests[i].fn);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return failed ? 1 : 0;
}
