/*
 * nn op tests: batch/layer/group norm (+grad), cross entropy (+grad),
 * mse / bce-with-logits / nll losses, embedding (+grad), dropout, one_hot,
 * the optimizer updates and check_finite_and_unscale.
 *
 * Every reference is computed here in float64 from the host copies of the
 * inputs. Gradients are checked against central differences of those
 * float64 forward references, so they do not share a formula with the
 * kernels; the optimizers are iterated against their update rules.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/philox.h>

#include "optest.h"

/* ---- bookkeeping: what a test allocates is released at its end ----------- */

#define MAXKEEP 1024
static keel_tensor *kept_t[MAXKEEP];
static int nkept_t;
static void *kept_h[MAXKEEP];
static int nkept_h;

static keel_tensor *K(keel_tensor *t)
{
    if (t && nkept_t < MAXKEEP)
        kept_t[nkept_t++] = t;
    return t;
}

static void *H(void *p)
{
    if (p && nkept_h < MAXKEEP)
        kept_h[nkept_h++] = p;
    return p;
}

static void drop_all(void)
{
    while (nkept_t > 0)
        keel_tensor_free(kept_t[--nkept_t]);
    while (nkept_h > 0)
        free(kept_h[--nkept_h]);
}

static double *dalloc(int64_t n)
{
    return H(calloc((size_t)(n > 0 ? n : 1), sizeof(double)));
}

static keel_tensor *rnd(keel_dtype dt, int nd, const int64_t *shape,
                        double lo, double hi)
{
    return K(ot_rand(dt, nd, shape, lo, hi));
}

static keel_tensor *from(keel_dtype dt, int nd, const int64_t *shape,
                         const double *v)
{
    return K(ot_from(dt, nd, shape, v));
}

static double *host(const keel_tensor *t)
{
    return H(ot_host(t));
}

static keel_tensor *lay(const keel_tensor *t, enum ot_layout l)
{
    return K(ot_layout(t, l));
}

static keel_status run(keel_op_id op, keel_tensor **in, int nin,
                       const keel_attr *at, int nat, keel_tensor **out,
                       int maxout)
{
    int n = 0;
    keel_status st = keel_op_run(op, in, nin, at, nat, out, maxout, &n);

    for (int i = 0; st == KEEL_STATUS_OK && i < n; i++)
        K(out[i]);
    return st;
}

#define RUN(op, in, nin, at, nat, out, maxout)                               \
    do {                                                                     \
        keel_status st__ = run(op, in, nin, at, nat, out, maxout);           \
        if (st__ != KEEL_STATUS_OK)                                          \
            fprintf(stderr, "\n  %s: %s\n", #op, keel_last_error());         \
        CU_ASSERT_EQUAL_FATAL(st__, KEEL_STATUS_OK);                         \
    } while (0)

/* |got - ref| <= atol + rtol |ref| for every element. */
static bool near(const char *what, const keel_tensor *got, const double *ref,
                 double rtol, double atol)
{
    int64_t n;
    double *g;
    bool ok = true;

    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    n = keel_tensor_numel(got);
    g = ot_host(got);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    for (int64_t i = 0; i < n && ok; i++) {
        if (!(fabs(g[i] - ref[i]) <= atol + rtol * fabs(ref[i]))) {
            fprintf(stderr, "\n  %s: element %lld is %.10g, reference %.10g\n",
                    what, (long long)i, g[i], ref[i]);
            ok = false;
        }
    }
    free(g);
    CU_ASSERT(ok);
    return ok;
}

/* Tolerances of gradients against central differences. */
static ot_tol grad_tol(keel_dtype dt)
{
    switch (dt) {
    case KEEL_F64:
        return (ot_tol){1e-6, 1e-8};
    case KEEL_F32:
        return (ot_tol){2e-4, 5e-5};
    case KEEL_F16:
        return (ot_tol){1e-2, 5e-3};
    default:
        return (ot_tol){4e-2, 3e-2};
    }
}

static bool near_grad(const char *what, const keel_tensor *got,
                      const double *ref, keel_dtype dt)
{
    ot_tol t = grad_tol(dt);
    return near(what, got, ref, t.rtol, t.atol);
}

/* The statistics dtype of a normalisation of x. */
static keel_dtype stat_dt(keel_dtype dt)
{
    return dt == KEEL_F64 ? KEEL_F64 : KEEL_F32;
}

/* Central differences of obj() with respect to v[0..n), in place. */
typedef double (*obj_fn)(void *ctx);

static void num_grad(obj_fn f, void *ctx, double *v, int64_t n, double *g)
{
    for (int64_t i = 0; i < n; i++) {
        double save = v[i], h = 1e-5 * fmax(1.0, fabs(save)), fp, fm;
        v[i] = save + h;
        fp = f(ctx);
        v[i] = save - h;
        fm = f(ctx);
        v[i] = save;
        g[i] = (fp - fm) / (2 * h);
    }
}

#define ERR_EXPECT(call, status, op, part)                                   \
    do {                                                                     \
        OT_EXPECT_ERROR(call, status, op);                                   \
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), part));             \
    } while (0)

/* ---- references: normalisations ------------------------------------------ */

/* x [N, C, S] row-major. */
static void ref_bn(const double *x, int64_t N, int64_t C, int64_t S,
                   const double *sc, const double *bi, const double *rm,
                   const double *rv, bool train, double eps, double *y,
                   double *mean, double *var)
{
    for (int64_t c = 0; c < C; c++) {
        double m = 0, v = 0, cnt = (double)(N * S), inv;
        if (train) {
            for (int64_t n = 0; n < N; n++)
                for (int64_t s = 0; s < S; s++)
                    m += x[(n * C + c) * S + s];
            m = cnt > 0 ? m / cnt : 0;
            for (int64_t n = 0; n < N; n++)
                for (int64_t s = 0; s < S; s++) {
                    double d = x[(n * C + c) * S + s] - m;
                    v += d * d;
                }
            v = cnt > 0 ? v / cnt : 0;
        } else {
            m = rm[c];
            v = rv[c];
        }
        inv = 1 / sqrt(v + eps);
        for (int64_t n = 0; n < N; n++)
            for (int64_t s = 0; s < S; s++) {
                int64_t i = (n * C + c) * S + s;
                y[i] = (x[i] - m) * inv * sc[c] + bi[c];
            }
        mean[c] = m;
        var[c] = v;
    }
}

/* x [M, N]; sc/bi may be NULL. */
static void ref_ln(const double *x, int64_t M, int64_t N, const double *sc,
                   const double *bi, double eps, double *y, double *mean,
                   double *inv)
{
    for (int64_t m = 0; m < M; m++) {
        double mu = 0, v = 0, r;
        for (int64_t j = 0; j < N; j++)
            mu += x[m * N + j];
        mu = N ? mu / (double)N : 0;
        for (int64_t j = 0; j < N; j++)
            v += (x[m * N + j] - mu) * (x[m * N + j] - mu);
        v = N ? v / (double)N : 0;
        r = 1 / sqrt(v + eps);
        for (int64_t j = 0; j < N; j++)
            y[m * N + j] = (x[m * N + j] - mu) * r * (sc ? sc[j] : 1) +
                           (bi ? bi[j] : 0);
        mean[m] = mu;
        inv[m] = r;
    }
}

/* x [N, C, S], G groups; sc/bi may be NULL. */
static void ref_gn(const double *x, int64_t N, int64_t C, int64_t S,
                   int64_t G, const double *sc, const double *bi, double eps,
                   double *y, double *mean, double *inv)
{
    int64_t cg = C / G, cnt = cg * S;

    for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < G; g++) {
            const double *xg = x + (n * C + g * cg) * S;
            double mu = 0, v = 0, r;
            for (int64_t i = 0; i < cnt; i++)
                mu += xg[i];
            mu /= (double)cnt;
            for (int64_t i = 0; i < cnt; i++)
                v += (xg[i] - mu) * (xg[i] - mu);
            v /= (double)cnt;
            r = 1 / sqrt(v + eps);
            for (int64_t c = g * cg; c < (g + 1) * cg; c++)
                for (int64_t s = 0; s < S; s++) {
                    int64_t i = (n * C + c) * S + s;
                    y[i] = (x[i] - mu) * r * (sc ? sc[c] : 1) +
                           (bi ? bi[c] : 0);
                }
            mean[n * G + g] = mu;
            inv[n * G + g] = r;
        }
}

/* ---- batch_norm ---------------------------------------------------------- */

static void bn_case(keel_dtype dt, keel_dtype pdt, int nd, const int64_t *shape,
                    enum ot_layout layout, bool train, double momentum,
                    double eps)
{
    int64_t N = shape[0], C = shape[1], S = 1, n;
    keel_tensor *x, *in[5], *out[3];
    double *xv, *sc, *bi, *rm, *rv, *y, *mean, *var;
    keel_attr at[3] = {keel_attr_bool("training", train),
                       keel_attr_float("momentum", momentum),
                       keel_attr_float("epsilon", eps)};
    char what[96];

    for (int i = 2; i < nd; i++)
        S *= shape[i];
    n = N * C * S;
    x = lay(rnd(dt, nd, shape, -2, 3), layout);
    in[0] = x;
    in[1] = rnd(pdt, 1, &C, 0.5, 1.5);
    in[2] = rnd(pdt, 1, &C, -1, 1);
    in[3] = rnd(pdt, 1, &C, -0.5, 0.5);
    in[4] = rnd(pdt, 1, &C, 0.5, 2);
    xv = host(x);
    sc = host(in[1]);
    bi = host(in[2]);
    rm = host(in[3]);
    rv = host(in[4]);
    y = dalloc(n);
    mean = dalloc(C);
    var = dalloc(C);
    ref_bn(xv, N, C, S, sc, bi, rm, rv, train, eps, y, mean, var);
    RUN(KEEL_OP_BATCH_NORM, in, 5, at, 3, out, 3);
    snprintf(what, sizeof(what), "batch_norm y %s layout %d train %d",
             keel_dtype_name(dt), (int)layout, (int)train);
    ot_check_shape(what, out[0], nd, shape);
    ot_check(what, out[0], y, dt);
    CU_ASSERT_EQUAL(keel_tensor_dtype(out[1]), stat_dt(dt));
    ot_check("batch_norm saved_mean", out[1], mean, stat_dt(dt));
    for (int64_t c = 0; c < C; c++)
        var[c] = 1 / sqrt(var[c] + eps);
    ot_check("batch_norm saved_invstd", out[2], var, stat_dt(dt));
    /* Running statistics: updated in place (biased variance) or kept. */
    ref_bn(xv, N, C, S, sc, bi, rm, rv, true, eps, y, mean, var);
    for (int64_t c = 0; c < C && train && N * S > 0; c++) {
        mean[c] = ot_round(momentum * rm[c] + (1 - momentum) * mean[c], pdt);
        var[c] = ot_round(momentum * rv[c] + (1 - momentum) * var[c], pdt);
    }
    ot_check("batch_norm running_mean", in[3],
             train && N * S > 0 ? mean : rm, pdt);
    ot_check("batch_norm running_var", in[4],
             train && N * S > 0 ? var : rv, pdt);
}

static void test_batch_norm_train(void)
{
    int64_t s4[4] = {4, 3, 5, 6}, s2[2] = {7, 4}, s3[3] = {2, 5, 9};

    for (int k = 0; k < 4; k++) {
        keel_dtype dt = ot_float_dtypes[k];
        bn_case(dt, dt, 4, s4, OT_CONTIG, true, 0.9, 1e-5);
        bn_case(dt, dt, 2, s2, OT_STRIDED, true, 0.8, 1e-3);
    }
    /* f16/bf16 activations with float32 parameters (mixed precision). */
    bn_case(KEEL_F16, KEEL_F32, 4, s4, OT_TRANSPOSED, true, 0.9, 1e-5);
    bn_case(KEEL_BF16, KEEL_F32, 3, s3, OT_CONTIG, true, 0.5, 1e-5);
    bn_case(KEEL_F32, KEEL_F32, 3, s3, OT_TRANSPOSED, true, 0.9, 1e-5);
    /* Large enough for the thread pool. */
    bn_case(KEEL_F32, KEEL_F32, 4, (int64_t[]){8, 16, 24, 24}, OT_CONTIG,
            true, 0.9, 1e-5);
    drop_all();
}

static void test_batch_norm_eval(void)
{
    int64_t s4[4] = {3, 4, 2, 5};

    for (int k = 0; k < 4; k++)
        bn_case(ot_float_dtypes[k], ot_float_dtypes[k], 4, s4,
                k == 1 ? OT_TRANSPOSED : OT_CONTIG, false, 0.9, 1e-5);
    drop_all();
}

static void test_batch_norm_edge(void)
{
    /* Size-1 dims, and an empty batch: y is empty, the statistics are
     * those of zero variance and the running ones stay as they were. */
    bn_case(KEEL_F64, KEEL_F64, 4, (int64_t[]){1, 2, 1, 1}, OT_CONTIG, true,
            0.9, 1e-5);
    bn_case(KEEL_F32, KEEL_F32, 4, (int64_t[]){0, 3, 2, 2}, OT_CONTIG, true,
            0.9, 1e-5);
    bn_case(KEEL_F32, KEEL_F32, 2, (int64_t[]){5, 0}, OT_CONTIG, true, 0.9,
            1e-5);
    drop_all();
}

struct bn_obj {
    double *x, *sc, *bi;
    const double *rm, *rv, *dy;
    int64_t N, C, S;
    bool train;
    double eps, *y, *m, *v;
};

static double bn_objective(void *p)
{
    struct bn_obj *o = p;
    double f = 0;

    ref_bn(o->x, o->N, o->C, o->S, o->sc, o->bi, o->rm, o->rv, o->train,
           o->eps, o->y, o->m, o->v);
    for (int64_t i = 0; i < o->N * o->C * o->S; i++)
        f += o->dy[i] * o->y[i];
    return f;
}

static void bng_case(keel_dtype dt, bool train, enum ot_layout layout)
{
    int64_t shape[4] = {3, 4, 2, 3}, C = 4, n = 72;
    struct bn_obj o = {0};
    keel_tensor *in[5], *out[3], *x, *dy;
    double *mean = dalloc(C), *inv = dalloc(C), *gx = dalloc(n),
           *gs = dalloc(C), *gb = dalloc(C), *rm, *rv;
    keel_attr at[2] = {keel_attr_bool("training", train),
                       keel_attr_float("epsilon", 1e-5)};
    char what[80];

    x = lay(rnd(dt, 4, shape, -2, 2), layout);
    dy = rnd(dt, 4, shape, -1, 1);
    o.x = host(x);
    o.dy = host(dy);
    o.sc = host(rnd(stat_dt(dt), 1, &C, 0.5, 1.5));
    o.bi = host(rnd(stat_dt(dt), 1, &C, -1, 1));
    rm = host(rnd(stat_dt(dt), 1, &C, -0.5, 0.5));
    rv = host(rnd(stat_dt(dt), 1, &C, 0.5, 1.5));
    o.rm = rm;
    o.rv = rv;
    o.N = 3;
    o.C = C;
    o.S = 6;
    o.train = train;
    o.eps = 1e-5;
    o.y = dalloc(n);
    o.m = dalloc(C);
    o.v = dalloc(C);
    bn_objective(&o);
    for (int64_t c = 0; c < C; c++) {
        mean[c] = ot_round(o.m[c], stat_dt(dt));
        inv[c] = ot_round(1 / sqrt(o.v[c] + o.eps), stat_dt(dt));
    }
    num_grad(bn_objective, &o, o.x, n, gx);
    num_grad(bn_objective, &o, o.sc, C, gs);
    num_grad(bn_objective, &o, o.bi, C, gb);
    in[0] = x;
    in[1] = from(stat_dt(dt), 1, &C, o.sc);
    in[2] = from(stat_dt(dt), 1, &C, mean);
    in[3] = from(stat_dt(dt), 1, &C, inv);
    in[4] = lay(dy, layout == OT_CONTIG ? OT_STRIDED : OT_CONTIG);
    RUN(KEEL_OP_BATCH_NORM_GRAD, in, 5, at, 2, out, 3);
    snprintf(what, sizeof(what), "batch_norm_grad dx %s train %d",
             keel_dtype_name(dt), (int)train);
    near_grad(what, out[0], gx, dt);
    near_grad("batch_norm_grad dscale", out[1], gs, stat_dt(dt));
    near_grad("batch_norm_grad dbias", out[2], gb, stat_dt(dt));
}

static void test_batch_norm_grad(void)
{
    for (int k = 0; k < 4; k++) {
        bng_case(ot_float_dtypes[k], true, k % 2 ? OT_TRANSPOSED : OT_CONTIG);
        bng_case(ot_float_dtypes[k], false, OT_CONTIG);
    }
    drop_all();
}

/* ---- layer_norm ---------------------------------------------------------- */

static void ln_case(keel_dtype dt, int nd, const int64_t *shape, int begin,
                    int nparams, bool shaped_params, enum ot_layout layout)
{
    int b = begin < 0 ? begin + nd : begin;
    int64_t M = 1, N = 1;
    keel_tensor *in[3], *out[3];
    double *xv, *sc = NULL, *bi = NULL, *y, *mean, *inv;
    keel_attr at[2] = {keel_attr_int("begin_norm_axis", begin),
                       keel_attr_float("epsilon", 1e-5)};
    char what[96];

    for (int i = 0; i < b; i++)
        M *= shape[i];
    for (int i = b; i < nd; i++)
        N *= shape[i];
    in[0] = lay(rnd(dt, nd, shape, -3, 2), layout);
    for (int i = 1; i <= nparams; i++) {
        if (shaped_params)
            in[i] = rnd(dt, nd - b, shape + b, i == 1 ? 0.5 : -1,
                        i == 1 ? 1.5 : 1);
        else
            in[i] = rnd(dt, 1, &N, i == 1 ? 0.5 : -1, i == 1 ? 1.5 : 1);
    }
    xv = host(in[0]);
    if (nparams > 0)
        sc = host(in[1]);
    if (nparams > 1)
        bi = host(in[2]);
    y = dalloc(M * N);
    mean = dalloc(M);
    inv = dalloc(M);
    ref_ln(xv, M, N, sc, bi, 1e-5, y, mean, inv);
    RUN(KEEL_OP_LAYER_NORM, in, 1 + nparams, at, 2, out, 3);
    snprintf(what, sizeof(what), "layer_norm %s begin %d params %d",
             keel_dtype_name(dt), begin, nparams);
    ot_check_shape(what, out[0], nd, shape);
    ot_check(what, out[0], y, dt);
    ot_check_shape("layer_norm mean shape", out[1], b, shape);
    ot_check("layer_norm mean", out[1], mean, stat_dt(dt));
    ot_check("layer_norm invstd", out[2], inv, stat_dt(dt));
}

static void test_layer_norm(void)
{
    int64_t s3[3] = {3, 4, 5}, s2[2] = {6, 7};

    for (int k = 0; k < 4; k++) {
        keel_dtype dt = ot_float_dtypes[k];
        ln_case(dt, 3, s3, -1, 2, false, OT_CONTIG);
        ln_case(dt, 3, s3, 1, 2, true, OT_TRANSPOSED);
        ln_case(dt, 3, s3, 0, 1, false, OT_STRIDED);
        ln_case(dt, 2, s2, 1, 0, false, OT_CONTIG);
    }
    ln_case(KEEL_F64, 3, s3, -2, 2, false, OT_STRIDED);
    /* Size-1 dims, an empty batch, a 1-D input. */
    ln_case(KEEL_F32, 3, (int64_t[]){1, 1, 4}, 2, 2, false, OT_CONTIG);
    ln_case(KEEL_F32, 2, (int64_t[]){0, 4}, 1, 2, false, OT_CONTIG);
    ln_case(KEEL_F32, 1, (int64_t[]){9}, 0, 2, false, OT_CONTIG);
    /* Rows longer than a chunk; many rows for the thread pool. */
    ln_case(KEEL_F32, 2, (int64_t[]){64, 1200}, 1, 2, false, OT_CONTIG);
    ln_case(KEEL_BF16, 2, (int64_t[]){3, 1500}, -1, 2, false, OT_STRIDED);
    /* float16 activations with float32 scale and bias. */
    {
        int64_t s[2] = {4, 6}, six = 6;
        keel_tensor *in[3] = {rnd(KEEL_F16, 2, s, -2, 2),
                              rnd(KEEL_F32, 1, &six, 0.5, 1.5),
                              rnd(KEEL_F32, 1, &six, -1, 1)},
                    *out[3];
        double *y = dalloc(24), m[4], r[4];
        ref_ln(host(in[0]), 4, 6, host(in[1]), host(in[2]), 1e-5, y, m, r);
        RUN(KEEL_OP_LAYER_NORM, in, 3, NULL, 0, out, 3);
        ot_check("layer_norm f16 x, f32 params", out[0], y, KEEL_F16);
        ot_check("layer_norm f16 x, f32 params: invstd", out[2], r,
                 KEEL_F32);
    }
    drop_all();
}

struct ln_obj {
    double *x, *sc, *bi;
    const double *dy;
    int64_t M, N;
    double *y, *m, *r;
};

static double ln_objective(void *p)
{
    struct ln_obj *o = p;
    double f = 0;

    ref_ln(o->x, o->M, o->N, o->sc, o->bi, 1e-5, o->y, o->m, o->r);
    for (int64_t i = 0; i < o->M * o->N; i++)
        f += o->dy[i] * o->y[i];
    return f;
}

static void lng_case(keel_dtype dt, int nd, const int64_t *shape, int begin,
                     bool has_scale, enum ot_layout layout)
{
    int b = begin < 0 ? begin + nd : begin;
    struct ln_obj o = {0};
    keel_tensor *in[5], *out[3], *x, *dy;
    double *gx, *gs, *gb;
    keel_attr at = keel_attr_int("begin_norm_axis", begin);
    int nin = 0;
    char what[96];

    o.M = o.N = 1;
    for (int i = 0; i < b; i++)
        o.M *= shape[i];
    for (int i = b; i < nd; i++)
        o.N *= shape[i];
    x = lay(rnd(dt, nd, shape, -2, 2), layout);
    dy = rnd(dt, nd, shape, -1, 1);
    o.x = host(x);
    o.dy = host(dy);
    o.sc = host(rnd(dt, 1, &o.N, 0.5, 1.5));
    o.bi = host(rnd(dt, 1, &o.N, -1, 1));
    if (!has_scale)
        for (int64_t j = 0; j < o.N; j++)
            o.sc[j] = 1;
    o.y = dalloc(o.M * o.N);
    o.m = dalloc(o.M);
    o.r = dalloc(o.M);
    gx = dalloc(o.M * o.N);
    gs = dalloc(o.N);
    gb = dalloc(o.N);
    ln_objective(&o);
    for (int64_t m = 0; m < o.M; m++) {
        o.m[m] = ot_round(o.m[m], stat_dt(dt));
        o.r[m] = ot_round(o.r[m], stat_dt(dt));
    }
    in[nin++] = x;
    if (has_scale)
        in[nin++] = from(dt, 1, &o.N, o.sc);
    in[nin++] = from(stat_dt(dt), b, shape, o.m);
    in[nin++] = from(stat_dt(dt), b, shape, o.r);
    in[nin++] = lay(dy, OT_TRANSPOSED);
    num_grad(ln_objective, &o, o.x, o.M * o.N, gx);
    num_grad(ln_objective, &o, o.sc, o.N, gs);
    num_grad(ln_objective, &o, o.bi, o.N, gb);
    RUN(KEEL_OP_LAYER_NORM_GRAD, in, nin, &at, 1, out, 3);
    snprintf(what, sizeof(what), "layer_norm_grad dx %s begin %d scale %d",
             keel_dtype_name(dt), begin, (int)has_scale);
    near_grad(what, out[0], gx, dt);
    near_grad("layer_norm_grad dscale", out[1], gs, dt);
    near_grad("layer_norm_grad dbias", out[2], gb, dt);
}

static void test_layer_norm_grad(void)
{
    int64_t s3[3] = {3, 4, 5};

    for (int k = 0; k < 4; k++) {
        lng_case(ot_float_dtypes[k], 3, s3, -1, true, OT_CONTIG);
        lng_case(ot_float_dtypes[k], 3, s3, 1, k != 2, OT_TRANSPOSED);
    }
    lng_case(KEEL_F64, 3, s3, 0, false, OT_STRIDED);
    lng_case(KEEL_F32, 2, (int64_t[]){2, 700}, 1, true, OT_STRIDED);
    drop_all();
}

/* ---- group_norm ---------------------------------------------------------- */

static void gn_case(keel_dtype dt, int nd, const int64_t *shape, int64_t G,
                    int nparams, enum ot_layout layout)
{
    int64_t N = shape[0], C = shape[1], S = 1, ms[2] = {shape[0], G};
    keel_tensor *in[3], *out[3];
    double *xv, *sc = NULL, *bi = NULL, *y, *mean, *inv;
    keel_attr at[2] = {keel_attr_int("groups", G),
                       keel_attr_float("epsilon", 1e-5)};
    char what[96];

    for (int i = 2; i < nd; i++)
        S *= shape[i];
    in[0] = lay(rnd(dt, nd, shape, -1, 3), layout);
    if (nparams > 0)
        in[1] = rnd(dt, 1, &C, 0.5, 1.5);
    if (nparams > 1)
        in[2] = rnd(dt, 1, &C, -1, 1);
    xv = host(in[0]);
    if (nparams > 0)
        sc = host(in[1]);
    if (nparams > 1)
        bi = host(in[2]);
    y = dalloc(N * C * S);
    mean = dalloc(N * G);
    inv = dalloc(N * G);
    ref_gn(xv, N, C, S, G, sc, bi, 1e-5, y, mean, inv);
    RUN(KEEL_OP_GROUP_NORM, in, 1 + nparams, at, 2, out, 3);
    snprintf(what, sizeof(what), "group_norm %s groups %lld params %d",
             keel_dtype_name(dt), (long long)G, nparams);
    ot_check(what, out[0], y, dt);
    ot_check_shape("group_norm mean shape", out[1], 2, ms);
    ot_check("group_norm mean", out[1], mean, stat_dt(dt));
    ot_check("group_norm invstd", out[2], inv, stat_dt(dt));
}

static void test_group_norm(void)
{
    int64_t s4[4] = {2, 6, 3, 4};

    for (int k = 0; k < 4; k++) {
        keel_dtype dt = ot_float_dtypes[k];
        gn_case(dt, 4, s4, 2, 2, OT_CONTIG);
        gn_case(dt, 4, s4, 3, 1, OT_TRANSPOSED);
    }
    gn_case(KEEL_F64, 4, s4, 1, 0, OT_STRIDED);
    gn_case(KEEL_F64, 4, s4, 6, 2, OT_CONTIG);
    gn_case(KEEL_F32, 2, (int64_t[]){5, 4}, 2, 2, OT_STRIDED);
    gn_case(KEEL_F32, 4, (int64_t[]){4, 8, 48, 48}, 4, 2, OT_CONTIG);
    drop_all();
}

struct gn_obj {
    double *x, *sc, *bi;
    const double *dy;
    int64_t N, C, S, G;
    double *y, *m, *r;
};

static double gn_objective(void *p)
{
    struct gn_obj *o = p;
    double f = 0;

    ref_gn(o->x, o->N, o->C, o->S, o->G, o->sc, o->bi, 1e-5, o->y, o->m,
           o->r);
    for (int64_t i = 0; i < o->N * o->C * o->S; i++)
        f += o->dy[i] * o->y[i];
    return f;
}

static void gng_case(keel_dtype dt, int64_t G, bool has_scale,
                     enum ot_layout layout)
{
    int64_t shape[4] = {2, 4, 3, 2}, n = 48, ms[2] = {2, G};
    struct gn_obj o = {0};
    keel_tensor *in[5], *out[3], *x, *dy;
    double *gx = dalloc(n), *gs = dalloc(4), *gb = dalloc(4);
    keel_attr at = keel_attr_int("groups", G);
    int nin = 0;
    char what[96];

    o.N = 2;
    o.C = 4;
    o.S = 6;
    o.G = G;
    x = lay(rnd(dt, 4, shape, -2, 2), layout);
    dy = rnd(dt, 4, shape, -1, 1);
    o.x = host(x);
    o.dy = host(dy);
    o.sc = host(rnd(dt, 1, &o.C, 0.5, 1.5));
    o.bi = host(rnd(dt, 1, &o.C, -1, 1));
    if (!has_scale)
        for (int c = 0; c < 4; c++)
            o.sc[c] = 1;
    o.y = dalloc(n);
    o.m = dalloc(2 * G);
    o.r = dalloc(2 * G);
    gn_objective(&o);
    for (int64_t i = 0; i < 2 * G; i++) {
        o.m[i] = ot_round(o.m[i], stat_dt(dt));
        o.r[i] = ot_round(o.r[i], stat_dt(dt));
    }
    in[nin++] = x;
    if (has_scale)
        in[nin++] = from(dt, 1, &o.C, o.sc);
    in[nin++] = from(stat_dt(dt), 2, ms, o.m);
    in[nin++] = from(stat_dt(dt), 2, ms, o.r);
    in[nin++] = dy;
    num_grad(gn_objective, &o, o.x, n, gx);
    num_grad(gn_objective, &o, o.sc, 4, gs);
    num_grad(gn_objective, &o, o.bi, 4, gb);
    RUN(KEEL_OP_GROUP_NORM_GRAD, in, nin, &at, 1, out, 3);
    snprintf(what, sizeof(what), "group_norm_grad dx %s groups %lld",
             keel_dtype_name(dt), (long long)G);
    near_grad(what, out[0], gx, dt);
    near_grad("group_norm_grad dscale", out[1], gs, dt);
    near_grad("group_norm_grad dbias", out[2], gb, dt);
}

static void test_group_norm_grad(void)
{
    for (int k = 0; k < 4; k++)
        gng_case(ot_float_dtypes[k], 2, true, k == 1 ? OT_TRANSPOSED
                                                     : OT_CONTIG);
    gng_case(KEEL_F64, 1, false, OT_STRIDED);
    gng_case(KEEL_F64, 4, true, OT_CONTIG);
    drop_all();
}

/* ---- cross_entropy ------------------------------------------------------- */

enum { R_NONE, R_MEAN, R_SUM };
static const char *const red_names[3] = {"none", "mean", "sum"};

struct ce_case {
    int64_t outer, C, inner; /* logits [outer, C] or [outer, C, inner] */
    bool soft, use_softmax, has_w, label_keepdim, int32_label;
    int64_t ignore;
    double eps;
    int red;
};

/*
 * Paddle's cross entropy of sample (o, i) in float64: targets
 * t' = (1-eps) t + eps/C, weight sum_c t'_c w_c (0 when ignored); the
 * sample's softmax row goes to sm when sm is not NULL.
 */
static void ref_ce_sample(const struct ce_case *k, const double *x,
                          const double *lab, const double *w, int64_t o,
                          int64_t i, double *loss, double *wi, double *sm)
{
    int64_t C = k->C, in = k->inner, y = -1;
    double mx = -INFINITY, se = 0, ce = 0, ws = 0;

    for (int64_t c = 0; c < C; c++)
        mx = fmax(mx, x[(o * C + c) * in + i]);
    for (int64_t c = 0; c < C; c++)
        se += exp(x[(o * C + c) * in + i] - mx);
    if (!k->soft)
        y = (int64_t)lab[o * in + i];
    for (int64_t c = 0; c < C; c++) {
        int64_t j = (o * C + c) * in + i;
        double lp, t;
        if (k->use_softmax)
            lp = x[j] - mx - log(se);
        else
            lp = fmax(log(x[j]), -1e20);
        if (sm)
            sm[j] = k->use_softmax ? exp(lp) : x[j];
        t = k->soft ? lab[j] : (c == y ? 1.0 : 0.0);
        t = (1 - k->eps) * t + k->eps / (double)C;
        ce -= t * lp;
        ws += t * (k->has_w ? w[c] : 0);
    }
    if (!k->has_w)
        ws = 1;
    if (!k->soft && y == k->ignore)
        ce = ws = 0;
    *loss = ws * ce;
    *wi = ws;
}

/* Per-sample losses; returns the mean (over the selected weights, 1 if
 * they sum to 0) or the sum; *wsel receives the weight sum. */
static double ref_ce(const struct ce_case *k, const double *x,
                     const double *lab, const double *w, double *loss,
                     double *sm, double *wsel)
{
    double tot = 0, ws = 0, wi;

    for (int64_t o = 0; o < k->outer; o++)
        for (int64_t i = 0; i < k->inner; i++) {
            int64_t s = o * k->inner + i;
            ref_ce_sample(k, x, lab, w, o, i, &loss[s], &wi, sm);
            tot += loss[s];
            ws += wi;
        }
    if (wsel)
        *wsel = ws;
    if (k->red == R_SUM)
        return tot;
    return tot / (ws != 0 ? ws : 1);
}

/*
 * d/dx of sum_s g_s loss_s (none) or g * loss (mean, sum) by central
 * differences; perturbing x only changes its own sample's loss (the
 * 'mean' denominator does not depend on x).
 */
static void ce_num_grad(const struct ce_case *k, double *x, const double *lab,
                        const double *w, const double *g, double *gx)
{
    double *loss = dalloc(k->outer * k->inner), wsel;

    ref_ce(k, x, lab, w, loss, NULL, &wsel);
    for (int64_t o = 0; o < k->outer; o++)
        for (int64_t i = 0; i < k->inner; i++) {
            int64_t s = o * k->inner + i;
            double f = k->red == R_NONE ? g[s]
                       : k->red == R_SUM ? g[0]
                                         : g[0] / (wsel != 0 ? wsel : 1);
            for (int64_t c = 0; c < k->C; c++) {
                int64_t j = (o * k->C + c) * k->inner + i;
                double save = x[j], h = 1e-6 * fmax(1.0, fabs(save));
                double lp, lm, wi;
                x[j] = save + h;
                ref_ce_sample(k, x, lab, w, o, i, &lp, &wi, NULL);
                x[j] = save - h;
                ref_ce_sample(k, x, lab, w, o, i, &lm, &wi, NULL);
                x[j] = save;
                gx[j] = f * (lp - lm) / (2 * h);
            }
        }
}

/* Runs cross_entropy and cross_entropy_grad for one case. */
static void ce_case_run(const struct ce_case *k, keel_dtype dt,
                        enum ot_layout layout)
{
    int64_t ns = k->outer * k->inner, n = ns * k->C;
    int64_t xs[3] = {k->outer, k->C, k->inner}, ls[3], ones = 1;
    int nd = k->inner > 1 ? 3 : 2, lnd, axis = k->inner > 1 ? 1 : -1;
    keel_tensor *x, *lab, *w = NULL, *in[4], *out[2], *gin[4], *gout[1];
    double *xv, *labv, *wv = NULL, *loss = dalloc(ns), *sm = dalloc(n),
           *gx = dalloc(n), *g, ref;
    keel_attr at[6] = {keel_attr_bool("soft_label", k->soft),
                       keel_attr_int("ignore_index", k->ignore),
                       keel_attr_str("reduction", red_names[k->red]),
                       keel_attr_int("axis", axis),
                       keel_attr_bool("use_softmax", k->use_softmax),
                       keel_attr_float("label_smoothing", k->eps)};
    char what[128];
    int nin = 2;

    snprintf(what, sizeof(what),
             "cross_entropy %s soft %d softmax %d w %d ign %lld eps %g %s "
             "axis %d",
             keel_dtype_name(dt), k->soft, k->use_softmax, k->has_w,
             (long long)k->ignore, k->eps, red_names[k->red], axis);
    if (k->use_softmax) {
        x = rnd(dt, nd, xs, -3, 3);
    } else {
        /* Probabilities: positive rows that sum to 1. */
        double *p = dalloc(n);
        for (int64_t o2 = 0; o2 < k->outer; o2++)
            for (int64_t i = 0; i < k->inner; i++) {
                double s = 0;
                for (int64_t c = 0; c < k->C; c++)
                    s += p[(o2 * k->C + c) * k->inner + i] =
                        0.2 + (double)((o2 * 7 + c * 3 + i) % 5);
                for (int64_t c = 0; c < k->C; c++)
                    p[(o2 * k->C + c) * k->inner + i] /= s;
            }
        x = from(dt, nd, xs, p);
    }
    x = lay(x, layout);
    if (k->soft) {
        double *t = host(rnd(KEEL_F64, nd, xs, 0.05, 1));
        for (int64_t o2 = 0; o2 < k->outer; o2++)
            for (int64_t i = 0; i < k->inner; i++) {
                double s = 0;
                for (int64_t c = 0; c < k->C; c++)
                    s += t[(o2 * k->C + c) * k->inner + i];
                for (int64_t c = 0; c < k->C; c++)
                    t[(o2 * k->C + c) * k->inner + i] /= s;
            }
        lab = from(dt, nd, xs, t);
    } else {
        double *t = host(rnd(KEEL_F64, 1, &ns, 0, (double)k->C));
        for (int64_t s = 0; s < ns; s++) {
            t[s] = floor(t[s]);
            if (k->ignore >= 0 && s % 3 == 1)
                t[s] = (double)k->ignore;
        }
        lnd = 0;
        ls[lnd++] = k->outer;
        if (k->inner > 1)
            ls[lnd++] = k->inner;
        else if (k->label_keepdim)
            ls[lnd++] = 1;
        lab = from(k->int32_label ? KEEL_I32 : KEEL_I64, lnd, ls, t);
    }
    xv = host(x);
    labv = host(lab);
    if (k->has_w) {
        w = rnd(dt, 1, &xs[1], 0.2, 2);
        wv = host(w);
    }
    ref = ref_ce(k, xv, labv, wv, loss, sm, NULL);
    in[0] = x;
    in[1] = lab;
    if (w)
        in[nin++] = w;
    RUN(KEEL_OP_CROSS_ENTROPY, in, nin, at, 6, out, 2);
    ot_check_shape(what, out[1], nd, xs);
    ot_check(what, out[1], sm, dt);
    if (k->red == R_NONE) {
        /* Per-sample loss keeps the class axis as 1, squeezed for hard
         * labels given without it (Paddle). */
        int64_t want[3] = {k->outer, 1, k->inner};
        bool squeeze = !k->soft && (k->inner > 1 || !k->label_keepdim);
        if (squeeze && k->inner > 1)
            want[1] = k->inner;
        ot_check_shape(what, out[0], squeeze ? nd - 1 : nd, want);
        ot_check(what, out[0], loss, dt);
    } else {
        CU_ASSERT_EQUAL(keel_tensor_ndim(out[0]), 0);
        ot_check(what, out[0], &ref, dt);
    }
    /* Gradient: dloss with the loss' shape, against central differences
     * of the float64 loss over logits (or probabilities). */
    gin[0] = from(dt, nd, xs, sm);
    gin[1] = lab;
    if (k->red == R_NONE)
        gin[2] = lay(rnd(dt, keel_tensor_ndim(out[0]),
                         keel_tensor_shape(out[0]), -1, 1),
                     OT_TRANSPOSED);
    else
        gin[2] = rnd(dt, 0, &ones, 0.5, 2);
    if (w)
        gin[3] = w;
    g = host(gin[2]);
    ce_num_grad(k, k->use_softmax ? xv : host(gin[0]), labv, wv, g, gx);
    RUN(KEEL_OP_CROSS_ENTROPY_GRAD, gin, nin + 1, at, 6, gout, 1);
    ot_check_shape(what, gout[0], nd, xs);
    near_grad(what, gout[0], gx, dt);
}

static void test_cross_entropy_hard(void)
{
    struct ce_case k = {5, 4, 1, false, true, false, false, false,
                        -100, 0, R_MEAN};

    for (int d = 0; d < 4; d++)
        for (int r = 0; r < 3; r++) {
            k.red = r;
            ce_case_run(&k, ot_float_dtypes[d], r == 1 ? OT_TRANSPOSED
                                                       : OT_CONTIG);
        }
    /* [N, 1] int32 labels; ignore_index with class weights: 'mean'
     * divides by the sum of the selected weights. */
    k = (struct ce_case){6, 5, 1, false, true, true, true, true, 2, 0,
                         R_MEAN};
    ce_case_run(&k, KEEL_F64, OT_CONTIG);
    k.red = R_NONE;
    ce_case_run(&k, KEEL_F32, OT_STRIDED);
    k.red = R_SUM;
    ce_case_run(&k, KEEL_F32, OT_CONTIG);
    /* Class axis 1 of [N, C, d] (axis != -1). */
    k = (struct ce_case){3, 4, 5, false, true, true, false, false, 0, 0,
                         R_MEAN};
    ce_case_run(&k, KEEL_F64, OT_CONTIG);
    k.red = R_NONE;
    ce_case_run(&k, KEEL_F32, OT_TRANSPOSED);
    /* Label smoothing, with and without weights. */
    k = (struct ce_case){5, 6, 1, false, true, false, false, false, -100,
                         0.1, R_MEAN};
    ce_case_run(&k, KEEL_F64, OT_CONTIG);
    k.has_w = true;
    k.ignore = 1;
    ce_case_run(&k, KEEL_F32, OT_CONTIG);
    /* use_softmax = 0: the input holds probabilities. */
    k = (struct ce_case){4, 5, 1, false, false, false, false, false, -100, 0,
                         R_MEAN};
    ce_case_run(&k, KEEL_F64, OT_CONTIG);
    k.has_w = true;
    k.red = R_NONE;
    ce_case_run(&k, KEEL_F32, OT_CONTIG);
    /* Every label ignored: 'mean' is 0 (Paddle guards the division). */
    {
        int64_t s2[2] = {3, 4}, n3 = 3;
        double zeros[3] = {0, 0, 0}, *v;
        keel_tensor *in[2] = {rnd(KEEL_F32, 2, s2, -1, 1),
                              from(KEEL_I64, 1, &n3, zeros)},
                    *out[2];
        keel_attr ig = keel_attr_int("ignore_index", 0);
        RUN(KEEL_OP_CROSS_ENTROPY, in, 2, &ig, 1, out, 2);
        v = host(out[0]);
        CU_ASSERT_DOUBLE_EQUAL(v[0], 0, 0);
    }
    drop_all();
}

static void test_cross_entropy_soft(void)
{
    struct ce_case k = {4, 5, 1, true, true, false, false, false, -100, 0,
                        R_MEAN};

    for (int d = 0; d < 4; d++)
        ce_case_run(&k, ot_float_dtypes[d], OT_CONTIG);
    k.has_w = true;
    ce_case_run(&k, KEEL_F64, OT_TRANSPOSED);
    k.red = R_NONE;
    ce_case_run(&k, KEEL_F32, OT_CONTIG);
    k.red = R_SUM;
    k.eps = 0.2;
    ce_case_run(&k, KEEL_F64, OT_STRIDED);
    k = (struct ce_case){2, 3, 4, true, false, true, false, false, -100, 0,
                         R_MEAN};
    ce_case_run(&k, KEEL_F64, OT_CONTIG);
    drop_all();
}

static void test_cross_entropy_large(void)
{
    /* Many samples (parallel, chunked reduction) and long rows (more
     * classes than a chunk). */
    struct ce_case k = {600, 128, 1, false, true, true, false, false, 3, 0,
                        R_MEAN};
    int64_t s2[2] = {3, 1500}, n3 = 3;
    keel_tensor *in[2], *out[2];
    double *xv, lab[3] = {0, 1499, 700}, loss[3], *sm = dalloc(4500), ref;

    ce_case_run(&k, KEEL_F32, OT_CONTIG);
    in[0] = rnd(KEEL_F32, 2, s2, -4, 4);
    in[1] = from(KEEL_I64, 1, &n3, lab);
    xv = host(in[0]);
    k = (struct ce_case){3, 1500, 1, false, true, false, false, false, -100,
                         0, R_SUM};
    ref = ref_ce(&k, xv, lab, NULL, loss, sm, NULL);
    {
        keel_attr at = keel_attr_str("reduction", "sum");
        RUN(KEEL_OP_CROSS_ENTROPY, in, 2, &at, 1, out, 2);
    }
    ot_check("cross_entropy long rows loss", out[0], &ref, KEEL_F32);
    ot_check("cross_entropy long rows softmax", out[1], sm, KEEL_F32);
    drop_all();
}

/* ---- mse_loss, bce_with_logits ------------------------------------------- */

static double bce_ref(double x, double y, const double *pw)
{
    double l = log1p(exp(-fabs(x)));

    if (!pw)
        return fmax(x, 0) - x * y + l;
    return (1 - y) * x + (1 + (*pw - 1) * y) * (l + fmax(-x, 0));
}

static void loss_case(keel_op_id op, keel_dtype dt, int nd,
                      const int64_t *shape, int red, bool pos_weight,
                      enum ot_layout layout)
{
    int64_t n = 1, last = nd ? shape[nd - 1] : 1;
    keel_tensor *in[3], *out[1];
    double *x, *y, *pw = NULL, *l, tot = 0;
    keel_attr at = keel_attr_str("reduction", red_names[red]);
    bool bce = op == KEEL_OP_BCE_WITH_LOGITS;
    char what[96];

    for (int i = 0; i < nd; i++)
        n *= shape[i];
    in[0] = lay(rnd(dt, nd, shape, bce ? -8 : -2, bce ? 8 : 2), layout);
    in[1] = rnd(dt, nd, shape, bce ? 0 : -2, bce ? 1 : 2);
    if (pos_weight)
        in[2] = rnd(dt, 1, &last, 0.5, 3);
    x = host(in[0]);
    y = host(in[1]);
    if (pos_weight)
        pw = host(in[2]);
    l = dalloc(n);
    for (int64_t i = 0; i < n; i++) {
        l[i] = bce ? bce_ref(x[i], y[i], pw ? &pw[i % last] : NULL)
                   : (x[i] - y[i]) * (x[i] - y[i]);
        tot += l[i];
    }
    RUN(op, in, pos_weight ? 3 : 2, &at, 1, out, 1);
    snprintf(what, sizeof(what), "%s %s %s pw %d",
             bce ? "bce_with_logits" : "mse_loss", keel_dtype_name(dt),
             red_names[red], (int)pos_weight);
    if (red == R_NONE) {
        ot_check_shape(what, out[0], nd, shape);
        ot_check(what, out[0], l, dt);
    } else {
        double v = red == R_SUM ? tot : (n ? tot / (double)n : NAN);
        CU_ASSERT_EQUAL(keel_tensor_ndim(out[0]), 0);
        ot_check(what, out[0], &v, dt);
    }
}

static void test_mse_loss(void)
{
    int64_t s3[3] = {2, 3, 4};

    for (int d = 0; d < 4; d++)
        for (int r = 0; r < 3; r++)
            loss_case(KEEL_OP_MSE_LOSS, ot_float_dtypes[d], 3, s3, r, false,
                      (enum ot_layout)r);
    /* 0-d, empty (mean of nothing is NaN, sum 0), large. */
    loss_case(KEEL_OP_MSE_LOSS, KEEL_F64, 0, NULL, R_MEAN, false, OT_CONTIG);
    loss_case(KEEL_OP_MSE_LOSS, KEEL_F32, 2, (int64_t[]){0, 3}, R_MEAN,
              false, OT_CONTIG);
    loss_case(KEEL_OP_MSE_LOSS, KEEL_F32, 2, (int64_t[]){0, 3}, R_SUM, false,
              OT_CONTIG);
    loss_case(KEEL_OP_MSE_LOSS, KEEL_F32, 2, (int64_t[]){70, 1000}, R_MEAN,
              false, OT_TRANSPOSED);
    loss_case(KEEL_OP_MSE_LOSS, KEEL_F32, 1, (int64_t[]){70001}, R_NONE,
              false, OT_CONTIG);
    drop_all();
}

static void test_bce_with_logits(void)
{
    int64_t s2[2] = {4, 5};

    for (int d = 0; d < 4; d++)
        for (int r = 0; r < 3; r++) {
            loss_case(KEEL_OP_BCE_WITH_LOGITS, ot_float_dtypes[d], 2, s2, r,
                      false, OT_CONTIG);
            loss_case(KEEL_OP_BCE_WITH_LOGITS, ot_float_dtypes[d], 2, s2, r,
                      true, r == 1 ? OT_TRANSPOSED : OT_STRIDED);
        }
    loss_case(KEEL_OP_BCE_WITH_LOGITS, KEEL_F32, 2, (int64_t[]){300, 300},
              R_SUM, true, OT_CONTIG);
    /* Extreme logits stay finite: 100 with label 0 costs 100. */
    {
        int64_t two = 2;
        double xv[2] = {100, -100}, yv[2] = {0, 0}, ref[2] = {100, 0};
        keel_tensor *in[2] = {from(KEEL_F32, 1, &two, xv),
                              from(KEEL_F32, 1, &two, yv)},
                    *out[1];
        keel_attr at = keel_attr_str("reduction", "none");
        RUN(KEEL_OP_BCE_WITH_LOGITS, in, 2, &at, 1, out, 1);
        ot_check("bce_with_logits extreme", out[0], ref, KEEL_F32);
    }
    drop_all();
}

/* ---- nll_loss ------------------------------------------------------------ */

static void nll_case(keel_dtype dt, int nd, const int64_t *shape, int red,
                     bool has_w, int64_t ignore, enum ot_layout layout)
{
    int64_t C = nd == 1 ? shape[0] : shape[1], N = nd == 1 ? 1 : shape[0];
    int64_t Kd = 1, ls[KEEL_MAX_DIMS], ns;
    int lnd = 0;
    keel_tensor *in[3], *out[1];
    double *x, *lab, *w = NULL, *l, tot = 0, wt = 0;
    keel_attr at[2] = {keel_attr_str("reduction", red_names[red]),
                       keel_attr_int("ignore_index", ignore)};
    char what[96];

    for (int i = 2; i < nd; i++)
        Kd *= shape[i];
    if (nd > 1) {
        ls[lnd++] = shape[0];
        for (int i = 2; i < nd; i++)
            ls[lnd++] = shape[i];
    }
    ns = N * Kd;
    in[0] = lay(rnd(dt, nd, shape, -4, 0), layout);
    lab = host(rnd(KEEL_F64, 1, &ns, 0, (double)C));
    for (int64_t s = 0; s < ns; s++) {
        lab[s] = floor(lab[s]);
        if (s % 4 == 2 && ignore >= 0)
            lab[s] = (double)ignore;
    }
    in[1] = from(KEEL_I64, lnd, ls, lab);
    if (has_w) {
        in[2] = rnd(dt, 1, &C, 0.1, 2);
        w = host(in[2]);
    }
    x = host(in[0]);
    l = dalloc(ns);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < Kd; k++) {
            int64_t s = n * Kd + k, y = (int64_t)lab[s];
            double wy = y == ignore ? 0 : (w ? w[y] : 1);
            l[s] = y == ignore ? 0 : -wy * x[(n * C + y) * Kd + k];
            tot += l[s];
            wt += wy;
        }
    RUN(KEEL_OP_NLL_LOSS, in, has_w ? 3 : 2, at, 2, out, 1);
    snprintf(what, sizeof(what), "nll_loss %s %s w %d ignore %lld",
             keel_dtype_name(dt), red_names[red], (int)has_w,
             (long long)ignore);
    if (red == R_NONE) {
        ot_check_shape(what, out[0], lnd, ls);
        ot_check(what, out[0], l, dt);
    } else {
        double v = red == R_SUM ? tot : tot / (wt != 0 ? wt : 1);
        ot_check(what, out[0], &v, dt);
    }
}

static void test_nll_loss(void)
{
    int64_t s2[2] = {6, 5}, s4[4] = {2, 3, 2, 4}, s1[1] = {7};

    for (int d = 0; d < 4; d++)
        for (int r = 0; r < 3; r++)
            nll_case(ot_float_dtypes[d], 2, s2, r, r == 1, r == 0 ? 1 : -100,
                     (enum ot_layout)r);
    nll_case(KEEL_F64, 4, s4, R_MEAN, true, 0, OT_TRANSPOSED);
    nll_case(KEEL_F32, 4, s4, R_NONE, false, -100, OT_STRIDED);
    nll_case(KEEL_F64, 1, s1, R_SUM, true, -100, OT_CONTIG);
    nll_case(KEEL_F32, 2, (int64_t[]){0, 4}, R_MEAN, false, -100, OT_CONTIG);
    nll_case(KEEL_F32, 2, (int64_t[]){20000, 4}, R_MEAN, true, 2, OT_CONTIG);
    drop_all();
}

/* ---- embedding ----------------------------------------------------------- */

static void emb_case(keel_dtype dt, keel_dtype idt, int ind,
                     const int64_t *ishape, int64_t V, int64_t D, int64_t pad,
                     enum ot_layout tlayout)
{
    int64_t n = 1, ts[2] = {V, D}, os[KEEL_MAX_DIMS];
    keel_tensor *in[2], *out[1];
    double *ids, *tab, *ref;
    keel_attr at = keel_attr_int("padding_idx", pad);
    char what[96];

    for (int i = 0; i < ind; i++) {
        n *= ishape[i];
        os[i] = ishape[i];
    }
    os[ind] = D;
    ids = host(rnd(KEEL_F64, 1, &n, 0, (double)V));
    for (int64_t i = 0; i < n; i++)
        ids[i] = i % 5 == 3 && pad >= 0 ? (double)pad : floor(ids[i]);
    in[0] = from(idt, ind, ishape, ids);
    in[1] = lay(rnd(dt, 2, ts, -1, 1), tlayout);
    tab = host(in[1]);
    ref = dalloc(n * D);
    for (int64_t i = 0; i < n; i++)
        for (int64_t d = 0; d < D; d++)
            ref[i * D + d] = (int64_t)ids[i] == pad
                                 ? 0
                                 : tab[(int64_t)ids[i] * D + d];
    RUN(KEEL_OP_EMBEDDING, in, 2, &at, 1, out, 1);
    snprintf(what, sizeof(what), "embedding %s ids %s pad %lld",
             keel_dtype_name(dt), keel_dtype_name(idt), (long long)pad);
    ot_check_shape(what, out[0], ind + 1, os);
    ot_check(what, out[0], ref, dt);
}

static void test_embedding(void)
{
    int64_t is[2] = {2, 3};

    for (int d = 0; d < 4; d++) {
        emb_case(ot_float_dtypes[d], KEEL_I64, 2, is, 7, 5, 2, OT_CONTIG);
        emb_case(ot_float_dtypes[d], KEEL_I32, 2, is, 7, 5, -1,
                 OT_TRANSPOSED);
    }
    emb_case(KEEL_F32, KEEL_I64, 0, NULL, 4, 6, -1, OT_STRIDED);
    emb_case(KEEL_F32, KEEL_I32, 1, (int64_t[]){0}, 4, 6, 1, OT_CONTIG);
    emb_case(KEEL_F32, KEEL_I64, 1, (int64_t[]){600}, 50, 128, 0, OT_CONTIG);
    drop_all();
}

static void embg_case(keel_dtype dt, keel_dtype idt, int64_t n, int64_t V,
                      int64_t D, int64_t pad, enum ot_layout layout)
{
    int64_t ds[2] = {n, D}, os[2] = {V, D};
    keel_tensor *in[2], *out[1];
    double *ids = dalloc(n), *dy, *ref = dalloc(V * D);
    keel_attr at[2] = {keel_attr_int("num_embeddings", V),
                       keel_attr_int("padding_idx", pad)};
    char what[96];

    /* Repeated ids accumulate; the padding row stays zero. */
    for (int64_t i = 0; i < n; i++)
        ids[i] = (double)((i * 3) % V);
    in[0] = from(idt, 1, &n, ids);
    in[1] = lay(rnd(dt, 2, ds, -1, 1), layout);
    dy = host(in[1]);
    for (int64_t i = 0; i < n; i++)
        for (int64_t d = 0; d < D && (int64_t)ids[i] != pad; d++)
            ref[(int64_t)ids[i] * D + d] += dy[i * D + d];
    RUN(KEEL_OP_EMBEDDING_GRAD, in, 2, at, 2, out, 1);
    snprintf(what, sizeof(what), "embedding_grad %s ids %s",
             keel_dtype_name(dt), keel_dtype_name(idt));
    ot_check_shape(what, out[0], 2, os);
    if (dt == KEEL_F32 || dt == KEEL_F64)
        ot_check(what, out[0], ref, dt);
    else
        near(what, out[0], ref, ot_tolerance(dt).rtol,
             3 * ot_tolerance(dt).atol);
}

static void test_embedding_grad(void)
{
    for (int d = 0; d < 4; d++)
        embg_case(ot_float_dtypes[d], d % 2 ? KEEL_I32 : KEEL_I64, 12, 5, 3,
                  d == 0 ? 1 : -1, d == 3 ? OT_TRANSPOSED : OT_CONTIG);
    embg_case(KEEL_F32, KEEL_I64, 0, 4, 3, -1, OT_CONTIG);
    embg_case(KEEL_F64, KEEL_I64, 40, 7, 600, 3, OT_STRIDED);
    embg_case(KEEL_F32, KEEL_I64, 700, 100, 100, 0, OT_CONTIG);
    drop_all();
}

/* ---- dropout ------------------------------------------------------------- */

static void drop_case(keel_dtype dt, int nd, const int64_t *shape, double p,
                      const char *mode, bool train, int64_t seed,
                      int64_t offset, enum ot_layout layout)
{
    int64_t n = 1;
    keel_tensor *in[1], *out[2];
    double *x, *ref, *mref;
    bool up = !strcmp(mode, "upscale_in_train");
    keel_attr at[5] = {keel_attr_float("p", p), keel_attr_str("mode", mode),
                       keel_attr_bool("training", train),
                       keel_attr_int("seed", seed),
                       keel_attr_int("offset", offset)};
    char what[96];

    for (int i = 0; i < nd; i++)
        n *= shape[i];
    in[0] = lay(rnd(dt, nd, shape, -2, 2), layout);
    x = host(in[0]);
    ref = dalloc(n);
    mref = dalloc(n);
    for (int64_t i = 0; i < n; i++) {
        /* philox.h: element i is kept when u(seed, offset + i) >= p. */
        bool keep = keel_philox_uniform((uint64_t)seed,
                                        (uint64_t)(offset + i)) >= p;
        mref[i] = train ? keep : 1;
        if (!train)
            ref[i] = up ? x[i] : x[i] * (1 - p);
        else if (!keep)
            ref[i] = 0;
        else
            ref[i] = up ? x[i] / (1 - p) : x[i];
    }
    RUN(KEEL_OP_DROPOUT, in, 1, at, 5, out, 2);
    snprintf(what, sizeof(what), "dropout %s p %g %s train %d",
             keel_dtype_name(dt), p, mode, (int)train);
    ot_check_shape(what, out[1], nd, shape);
    CU_ASSERT_EQUAL(keel_tensor_dtype(out[1]), KEEL_U8);
    ot_check(what, out[1], mref, KEEL_U8);
    ot_check(what, out[0], ref, dt);
}

static void test_dropout(void)
{
    int64_t s2[2] = {9, 13};

    for (int d = 0; d < 4; d++) {
        keel_dtype dt = ot_float_dtypes[d];
        drop_case(dt, 2, s2, 0.3, "upscale_in_train", true, 7, 0, OT_CONTIG);
        drop_case(dt, 2, s2, 0.3, "downscale_in_infer", true, 7, 5,
                  OT_TRANSPOSED);
        drop_case(dt, 2, s2, 0.3, "upscale_in_train", false, 7, 0,
                  OT_STRIDED);
        drop_case(dt, 2, s2, 0.3, "downscale_in_infer", false, 7, 0,
                  OT_CONTIG);
    }
    /* p = 0 keeps everything, p = 1 drops everything (out all 0). */
    drop_case(KEEL_F32, 2, s2, 0, "upscale_in_train", true, 3, 1, OT_CONTIG);
    drop_case(KEEL_F32, 2, s2, 1, "upscale_in_train", true, 3, 1, OT_CONTIG);
    drop_case(KEEL_F64, 2, s2, 1, "downscale_in_infer", false, 3, 1,
              OT_CONTIG);
    drop_case(KEEL_F32, 0, NULL, 0.5, "upscale_in_train", true, 11, 2,
              OT_CONTIG);
    drop_case(KEEL_F32, 2, (int64_t[]){0, 4}, 0.5, "upscale_in_train", true,
              11, 2, OT_CONTIG);
    /* Large, with an offset that is not a multiple of 4. */
    drop_case(KEEL_F32, 1, (int64_t[]){70001}, 0.25, "upscale_in_train",
              true, 123456789, 4099, OT_CONTIG);
    drop_all();
}

/* ---- one_hot ------------------------------------------------------------- */

static void test_one_hot(void)
{
    static const keel_dtype idts[4] = {KEEL_I64, KEEL_I32, KEEL_I8, KEEL_U8};
    int64_t s2[2] = {2, 3}, os[3] = {2, 3, 4}, n;
    double ids[6] = {0, 3, 1, 2, 3, 0}, ref[24];

    for (int d = 0; d < 4; d++) {
        keel_tensor *x = from(idts[d], 2, s2, ids), *out = NULL;
        CU_ASSERT_EQUAL_FATAL(keel_one_hot(x, 4, &out), KEEL_STATUS_OK);
        K(out);
        for (int i = 0; i < 24; i++)
            ref[i] = (int)ids[i / 4] == i % 4;
        CU_ASSERT_EQUAL(keel_tensor_dtype(out), KEEL_F32);
        ot_check_shape("one_hot", out, 3, os);
        ot_check("one_hot", out, ref, KEEL_F32);
    }
    {
        /* 0-d, empty, transposed and large inputs. */
        double two = 2, r3[3] = {0, 0, 1}, *v, *xv;
        keel_tensor *x = from(KEEL_I64, 0, NULL, &two), *out = NULL;
        CU_ASSERT_EQUAL_FATAL(keel_one_hot(x, 3, &out), KEEL_STATUS_OK);
        K(out);
        ot_check_shape("one_hot 0-d", out, 1, (int64_t[]){3});
        ot_check("one_hot 0-d", out, r3, KEEL_F32);
        x = from(KEEL_I32, 1, (int64_t[]){0}, NULL);
        CU_ASSERT_EQUAL_FATAL(keel_one_hot(x, 5, &out), KEEL_STATUS_OK);
        K(out);
        CU_ASSERT_EQUAL(keel_tensor_numel(out), 0);
        n = 20000;
        x = lay(rnd(KEEL_I64, 2, (int64_t[]){100, 200}, 0, 10),
                OT_TRANSPOSED);
        xv = host(x);
        CU_ASSERT_EQUAL_FATAL(keel_one_hot(x, 10, &out), KEEL_STATUS_OK);
        K(out);
        v = host(out);
        for (int64_t i = 0; i < n; i++)
            for (int c = 0; c < 10; c++)
                if (v[i * 10 + c] != ((int)xv[i] == c)) {
                    CU_FAIL("one_hot large");
                    i = n;
                    break;
                }
    }
    drop_all();
}

/* ---- optimizers ---------------------------------------------------------- */

enum { SGD, MOMENTUM, ADAM, ADAMW };
static const char *const opt_names[4] = {"sgd_update", "momentum_update",
                                         "adam_update", "adamw_update"};

struct opt_cfg {
    int kind;
    double lr, wd, mu, b1, b2, eps, coeff;
    bool nesterov;
};

/* One update of element arrays in float64, values rounded to dt after. */
static void ref_step(const struct opt_cfg *c, int t, double *p,
                     const double *g, double *s1, double *s2, int64_t n,
                     keel_dtype dt)
{
    double b1p = pow(c->b1, t), b2p = pow(c->b2, t);
    double lr_t = c->lr * sqrt(1 - b2p) / (1 - b1p);
    double eps_t = c->eps * sqrt(1 - b2p);

    for (int64_t i = 0; i < n; i++) {
        double gg = g[i] + (c->kind == ADAMW ? 0 : c->wd) * p[i];
        switch (c->kind) {
        case SGD:
            p[i] -= c->lr * gg;
            break;
        case MOMENTUM:
            s1[i] = c->mu * s1[i] + gg;
            p[i] -= c->nesterov ? c->lr * (gg + c->mu * s1[i])
                                : c->lr * s1[i];
            break;
        default:
            if (c->kind == ADAMW)
                p[i] -= c->lr * c->coeff * p[i];
            s1[i] = c->b1 * s1[i] + (1 - c->b1) * gg;
            s2[i] = c->b2 * s2[i] + (1 - c->b2) * gg * gg;
            p[i] -= lr_t * s1[i] / (sqrt(s2[i]) + eps_t);
            break;
        }
        p[i] = ot_round(p[i], dt);
        if (s1)
            s1[i] = ot_round(s1[i], dt);
        if (s2)
            s2[i] = ot_round(s2[i], dt);
    }
}

static void opt_case(const struct opt_cfg *c, keel_dtype dt, int nd,
                     const int64_t *shape, int steps, enum ot_layout layout)
{
    static const keel_op_id ops[4] = {KEEL_OP_SGD_UPDATE,
                                      KEEL_OP_MOMENTUM_UPDATE,
                                      KEEL_OP_ADAM_UPDATE,
                                      KEEL_OP_ADAMW_UPDATE};
    int nin = c->kind == SGD ? 2 : c->kind == MOMENTUM ? 3 : 4;
    int64_t n = 1;
    keel_tensor *in[4];
    double *p, *s1 = NULL, *s2 = NULL;
    char what[96];
    ot_tol tol = ot_tolerance(dt);

    for (int i = 0; i < nd; i++)
        n *= shape[i];
    in[0] = lay(rnd(dt, nd, shape, -1, 1), layout);
    p = host(in[0]);
    if (nin > 2) {
        in[2] = rnd(dt, nd, shape, -0.1, 0.1);
        s1 = host(in[2]);
    }
    if (nin > 3) {
        in[3] = rnd(dt, nd, shape, 0, 0.1);
        s2 = host(in[3]);
    }
    for (int t = 1; t <= steps; t++) {
        /* A fixed problem: the gradient of sum (p - 0.3)^2 / 2 plus a
         * deterministic perturbation. */
        double *g = dalloc(n);
        keel_attr at[8];
        int na = 0;
        for (int64_t i = 0; i < n; i++)
            g[i] = ot_round(p[i] - 0.3 + 0.05 * sin((double)(i + t)), dt);
        in[1] = from(dt, nd, shape, g);
        at[na++] = keel_attr_float("lr", c->lr);
        if (c->kind != ADAMW)
            at[na++] = keel_attr_float("weight_decay", c->wd);
        if (c->kind == MOMENTUM) {
            at[na++] = keel_attr_float("mu", c->mu);
            at[na++] = keel_attr_bool("use_nesterov", c->nesterov);
        }
        if (c->kind >= ADAM) {
            at[na++] = keel_attr_float("beta1", c->b1);
            at[na++] = keel_attr_float("beta2", c->b2);
            at[na++] = keel_attr_float("epsilon", c->eps);
            at[na++] = keel_attr_float("beta1_pow", pow(c->b1, t));
            at[na++] = keel_attr_float("beta2_pow", pow(c->b2, t));
        }
        if (c->kind == ADAMW)
            at[na++] = keel_attr_float("coeff", c->coeff);
        RUN(ops[c->kind], in, nin, at, na, NULL, 0);
        ref_step(c, t, p, g, s1, s2, n, dt);
    }
    snprintf(what, sizeof(what), "%s %s %d steps", opt_names[c->kind],
             keel_dtype_name(dt), steps);
    /* float32 drifts by rounding over the steps; low precision by ulps. */
    if (dt == KEEL_F32)
        tol = (ot_tol){1e-5, 1e-6};
    near(what, in[0], p, tol.rtol, tol.atol * 2);
    if (s1)
        near(what, in[2], s1, tol.rtol, tol.atol * 2);
    if (s2)
        near(what, in[3], s2, tol.rtol, tol.atol * 2);
}

static void test_optimizers(void)
{
    int64_t s2[2] = {6, 7}, big[1] = {70000};
    const struct opt_cfg cfgs[] = {
        {SGD, 0.1, 0, 0, 0, 0, 0, 0, false},
        {SGD, 0.05, 0.01, 0, 0, 0, 0, 0, false},
        {MOMENTUM, 0.1, 0, 0.9, 0, 0, 0, 0, false},
        {MOMENTUM, 0.05, 0.02, 0.8, 0, 0, 0, 0, true},
        {ADAM, 0.01, 0, 0, 0.9, 0.999, 1e-8, 0, false},
        {ADAM, 0.02, 0.01, 0, 0.8, 0.99, 1e-6, 0, false},
        {ADAMW, 0.01, 0, 0, 0.9, 0.999, 1e-8, 0.01, false},
        {ADAMW, 0.03, 0, 0, 0.85, 0.995, 1e-7, 0.1, false},
    };

    for (size_t i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++) {
        opt_case(&cfgs[i], KEEL_F64, 2, s2, 20, OT_CONTIG);
        opt_case(&cfgs[i], KEEL_F32, 2, s2, 20,
                 i % 2 ? OT_STRIDED : OT_TRANSPOSED);
        opt_case(&cfgs[i], KEEL_F16, 2, s2, 3, OT_CONTIG);
        opt_case(&cfgs[i], KEEL_BF16, 2, s2, 3, OT_CONTIG);
    }
    /* 0-d, empty and large (threaded) parameters. */
    opt_case(&cfgs[4], KEEL_F32, 0, NULL, 5, OT_CONTIG);
    opt_case(&cfgs[2], KEEL_F32, 1, (int64_t[]){0}, 2, OT_CONTIG);
    opt_case(&cfgs[6], KEEL_F32, 1, big, 2, OT_CONTIG);
    opt_case(&cfgs[3], KEEL_F32, 1, big, 2, OT_STRIDED);
    drop_all();
}

/* ---- check_finite_and_unscale -------------------------------------------- */

/* Element-wise equality, NaN equal to NaN (the values are exact). */
static bool same_vals(const char *what, const keel_tensor *got,
                      const double *want, int64_t n)
{
    double *g = ot_host(got);
    bool ok = g && keel_tensor_numel(got) == n;

    for (int64_t i = 0; ok && i < n; i++)
        if (!(g[i] == want[i] || (isnan(g[i]) && isnan(want[i])))) {
            fprintf(stderr, "\n  %s: element %lld is %.17g, expected %.17g\n",
                    what, (long long)i, g[i], want[i]);
            ok = false;
        }
    free(g);
    CU_ASSERT(ok);
    return ok;
}

static bool flag_of(const keel_tensor *found)
{
    double *v = ot_host(found);
    bool f = v && v[0] != 0;

    free(v);
    return f;
}

/* One call: x (dt, values xv) in `layout`, scale, found_inf starting as
 * found0; then x must hold want and found_inf want_found. */
static void unscale_case(const char *what, keel_dtype dt, int nd,
                         const int64_t *shape, const double *xv,
                         double scale, bool found0, const double *want,
                         bool want_found, enum ot_layout layout)
{
    int64_t n = 1, one = 1;
    keel_tensor *x, *s, *f;

    for (int i = 0; i < nd; i++)
        n *= shape[i];
    x = from(dt, nd, shape, xv);
    if (layout != OT_CONTIG && n > 0)
        x = lay(x, layout);
    s = from(KEEL_F32, 1, &one, &scale);
    f = from(KEEL_BOOL, 1, &one, (double[]){found0});
    CU_ASSERT_EQUAL_FATAL(keel_check_finite_and_unscale(x, s, f),
                          KEEL_STATUS_OK);
    same_vals(what, x, want, n);
    if (flag_of(f) != want_found)
        fprintf(stderr, "\n  %s: found_inf is %d, expected %d\n", what,
                !want_found, want_found);
    CU_ASSERT_EQUAL(flag_of(f), want_found);
    /* scale is only read */
    same_vals(what, s, &scale, 1);
}

static void test_unscale(void)
{
    int64_t s23[2] = {2, 3}, s4[1] = {4}, s6[1] = {6}, s0[2] = {0, 3};
    /* float32: inv = 1.0f / 3 = 0.3333333432674408, then the product in
     * float32 (5 / 3 in float32 would be 1.6666666269302368). */
    const double x32[6] = {5, -1, 7, 100, 0.5, -0.25};
    const double w32[6] = {1.6666667461395264, -0.3333333432674408,
                           2.3333334922790527, 33.333335876464844,
                           0.1666666716337204, -0.0833333358168602};
    /* float64: 5 * (1 / 3.0) = 1.6666666666666665, not 5 / 3. */
    const double x64[4] = {5, -7, 0.5, 11};
    const double w64[4] = {1.6666666666666665, -2.333333333333333,
                           0.16666666666666666, 3.6666666666666665};
    /* float16 and bfloat16: the float32 product rounded back. */
    const double x16[6] = {5, -1.5, 100, 0.300048828125, 7, 2048};
    const double w16[6] = {1.6669921875, -0.5, 33.34375, 0.10003662109375,
                           2.333984375, 682.5};
    const double xbf[6] = {5, -1.5, 100, 0.30078125, 7, 300};
    const double wbf[6] = {1.6640625, -0.5, 33.25, 0.10009765625, 2.328125,
                           100};
    /* non-finite values: found_inf set, every x still scaled */
    const double xinf[4] = {1, INFINITY, 2, -3};
    const double winf[4] = {0.5, INFINITY, 1, -1.5};
    const double xnan[4] = {NAN, 4, -INFINITY, 8};
    const double wnan[4] = {NAN, 1, -INFINITY, 2};

    unscale_case("f32 finite", KEEL_F32, 2, s23, x32, 3, false, w32, false,
                 OT_CONTIG);
    unscale_case("f32 finite, transposed x", KEEL_F32, 2, s23, x32, 3, false,
                 w32, false, OT_TRANSPOSED);
    unscale_case("f32 finite, strided x", KEEL_F32, 2, s23, x32, 3, false,
                 w32, false, OT_STRIDED);
    unscale_case("f64 finite", KEEL_F64, 1, s4, x64, 3, false, w64, false,
                 OT_CONTIG);
    unscale_case("f16 finite", KEEL_F16, 1, s6, x16, 3, false, w16, false,
                 OT_CONTIG);
    unscale_case("bf16 finite", KEEL_BF16, 1, s6, xbf, 3, false, wbf, false,
                 OT_STRIDED);
    unscale_case("f32 +inf", KEEL_F32, 1, s4, xinf, 2, false, winf, true,
                 OT_CONTIG);
    unscale_case("f32 nan and -inf", KEEL_F32, 1, s4, xnan, 4, false, wnan,
                 true, OT_CONTIG);
    unscale_case("f64 +inf", KEEL_F64, 1, s4, xinf, 2, false, winf, true,
                 OT_CONTIG);
    unscale_case("f16 nan", KEEL_F16, 1, s4, xnan, 4, false, wnan, true,
                 OT_CONTIG);
    unscale_case("bf16 +inf", KEEL_BF16, 1, s4, xinf, 2, false, winf, true,
                 OT_TRANSPOSED);
    /* found_inf already true stays true (finite x, still scaled) */
    unscale_case("f32 found_inf already true", KEEL_F32, 2, s23, x32, 3, true,
                 w32, true, OT_CONTIG);
    /* an empty x changes nothing */
    unscale_case("f32 empty x", KEEL_F32, 2, s0, NULL, 3, false, NULL, false,
                 OT_CONTIG);
    unscale_case("f32 empty x, found_inf true", KEEL_F32, 2, s0, NULL, 3,
                 true, NULL, true, OT_CONTIG);

    /* 0-d x, scale and found_inf */
    {
        double sv = 0.5, xv = 3, fv = 0;
        keel_tensor *x = from(KEEL_F32, 0, NULL, &xv);
        keel_tensor *s = from(KEEL_F32, 0, NULL, &sv);
        keel_tensor *f = from(KEEL_BOOL, 0, NULL, &fv);
        CU_ASSERT_EQUAL_FATAL(keel_check_finite_and_unscale(x, s, f),
                              KEEL_STATUS_OK);
        same_vals("0-d", x, (double[]){6}, 1);
        CU_ASSERT_FALSE(flag_of(f));
    }
    /* large (threaded) x with one inf near the end, another dtype */
    {
        int64_t n = 200003, one = 1;
        double *xv = dalloc(n), *w = dalloc(n), sv = 1024;
        keel_tensor *x, *s, *f;
        for (int64_t i = 0; i < n; i++) {
            xv[i] = ot_round(1000 * sin(0.001 * (double)i), KEEL_F16);
            w[i] = ot_round(ot_round(xv[i] * (double)(1.0f / 1024.0f),
                                     KEEL_F32),
                            KEEL_F16);
        }
        xv[n - 2] = w[n - 2] = INFINITY;
        x = lay(from(KEEL_F16, 1, &n, xv), OT_STRIDED);
        s = from(KEEL_F32, 1, &one, &sv);
        f = from(KEEL_BOOL, 1, &one, (double[]){0});
        CU_ASSERT_EQUAL_FATAL(keel_check_finite_and_unscale(x, s, f),
                              KEEL_STATUS_OK);
        same_vals("f16 large", x, w, n);
        CU_ASSERT_TRUE(flag_of(f));
        /* the same values without the inf: found_inf stays false */
        xv[n - 2] = 1;
        w[n - 2] = ot_round(1.0 / 1024, KEEL_F16);
        x = from(KEEL_F16, 1, &n, xv);
        f = from(KEEL_BOOL, 1, &one, (double[]){0});
        CU_ASSERT_EQUAL_FATAL(keel_check_finite_and_unscale(x, s, f),
                              KEEL_STATUS_OK);
        same_vals("f16 large finite", x, w, n);
        CU_ASSERT_FALSE(flag_of(f));
    }
    drop_all();
}

static void test_unscale_errors(void)
{
    int64_t s23[2] = {2, 3}, one = 1, two = 2;
    keel_tensor *x = rnd(KEEL_F32, 2, s23, -1, 1);
    keel_tensor *s = from(KEEL_F32, 1, &one, (double[]){2});
    keel_tensor *f = from(KEEL_BOOL, 1, &one, (double[]){0});
    keel_tensor *s64 = from(KEEL_F64, 1, &one, (double[]){2});
    keel_tensor *s2 = from(KEEL_F32, 1, &two, (double[]){2, 2});
    keel_tensor *fi = from(KEEL_I32, 1, &one, (double[]){0});
    keel_tensor *ff = from(KEEL_F32, 1, &one, (double[]){0});
    keel_tensor *f2 = from(KEEL_BOOL, 1, &two, (double[]){0, 0});
    keel_tensor *xi = rnd(KEEL_I32, 2, s23, 0, 3);
    keel_tensor *e = NULL, *s1 = NULL;
    double xv[6];

    {
        double *h = host(x);
        memcpy(xv, h, sizeof(xv));
    }
    ERR_EXPECT(keel_check_finite_and_unscale(x, s64, f),
               KEEL_STATUS_INVALID_ARGUMENT, "check_finite_and_unscale",
               "scale (input 1) must be float32, got float64");
    ERR_EXPECT(keel_check_finite_and_unscale(x, s2, f),
               KEEL_STATUS_INVALID_ARGUMENT, "check_finite_and_unscale",
               "scale (input 1) must have one element");
    ERR_EXPECT(keel_check_finite_and_unscale(x, s, fi),
               KEEL_STATUS_INVALID_ARGUMENT, "check_finite_and_unscale",
               "found_inf (input 2) must be bool, got int32");
    ERR_EXPECT(keel_check_finite_and_unscale(x, s, ff),
               KEEL_STATUS_INVALID_ARGUMENT, "check_finite_and_unscale",
               "found_inf (input 2) must be bool, got float32");
    ERR_EXPECT(keel_check_finite_and_unscale(x, s, f2),
               KEEL_STATUS_INVALID_ARGUMENT, "check_finite_and_unscale",
               "found_inf (input 2) must have one element");
    ERR_EXPECT(keel_check_finite_and_unscale(xi, s, f),
               KEEL_STATUS_NOT_SUPPORTED, "check_finite_and_unscale",
               "x must be a floating dtype, got int32");
    /* a broadcast x */
    CU_ASSERT_EQUAL_FATAL(keel_expand(s, 2, s23, &e), KEEL_STATUS_OK);
    K(e);
    ERR_EXPECT(keel_check_finite_and_unscale(e, s, f),
               KEEL_STATUS_INVALID_ARGUMENT, "check_finite_and_unscale",
               "broadcast view");
    /* the input count, and a NULL input */
    ERR_EXPECT(run(KEEL_OP_CHECK_FINITE_AND_UNSCALE, (keel_tensor *[]){x, s},
                   2, NULL, 0, NULL, 0),
               KEEL_STATUS_INVALID_ARGUMENT, "check_finite_and_unscale",
               "takes 3 inputs, got 2");
    ERR_EXPECT(keel_check_finite_and_unscale(x, NULL, f),
               KEEL_STATUS_INVALID_ARGUMENT, "check_finite_and_unscale",
               "input 1 is NULL");
    /* scale on another device */
    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_host((float[]){2}, KEEL_F32, 1,
                                                &one, "cpu:1", &s1),
                          KEEL_STATUS_OK);
    K(s1);
    ERR_EXPECT(keel_check_finite_and_unscale(x, s1, f),
               KEEL_STATUS_INVALID_ARGUMENT, "check_finite_and_unscale",
               "mismatched devices");
    /* nothing refused wrote anything */
    same_vals("x after the refused calls", x, xv, 6);
    CU_ASSERT_FALSE(flag_of(f));
    drop_all();
}

/* ---- errors -------------------------------------------------------------- */

static void test_norm_errors(void)
{
    int64_t s4[4] = {2, 4, 3, 3}, c4 = 4, c3 = 3, s1 = 5;
    keel_tensor *x = rnd(KEEL_F32, 4, s4, -1, 1);
    keel_tensor *v4 = rnd(KEEL_F32, 1, &c4, 1, 2);
    keel_tensor *v3 = rnd(KEEL_F32, 1, &c3, 1, 2), *out[3];
    keel_tensor *xi = rnd(KEEL_I32, 4, s4, 0, 3);
    keel_tensor *x1 = rnd(KEEL_F32, 1, &s1, 0, 1);
    keel_tensor *bn[5] = {x, v4, v4, v4, v4};
    keel_attr neg = keel_attr_float("epsilon", -1);
    keel_attr g3 = keel_attr_int("groups", 3), g0 = keel_attr_int("groups", 0);
    keel_attr b9 = keel_attr_int("begin_norm_axis", 9);

    /* batch_norm: x of one dim, a wrong parameter shape, an integer x, a
     * bad epsilon, too few inputs, a broadcast running statistic. */
    bn[0] = x1;
    ERR_EXPECT(run(KEEL_OP_BATCH_NORM, bn, 5, NULL, 0, out, 3),
               KEEL_STATUS_INVALID_ARGUMENT, "batch_norm", "at least 2 dims");
    bn[0] = x;
    bn[2] = v3;
    ERR_EXPECT(run(KEEL_OP_BATCH_NORM, bn, 5, NULL, 0, out, 3),
               KEEL_STATUS_INVALID_ARGUMENT, "batch_norm", "bias");
    bn[2] = v4;
    bn[0] = xi;
    ERR_EXPECT(run(KEEL_OP_BATCH_NORM, bn, 5, NULL, 0, out, 3),
               KEEL_STATUS_NOT_SUPPORTED, "batch_norm", "int32");
    bn[0] = x;
    ERR_EXPECT(run(KEEL_OP_BATCH_NORM, bn, 5, &neg, 1, out, 3),
               KEEL_STATUS_INVALID_ARGUMENT, "batch_norm", "epsilon");
    ERR_EXPECT(run(KEEL_OP_BATCH_NORM, bn, 3, NULL, 0, out, 3),
               KEEL_STATUS_INVALID_ARGUMENT, "batch_norm", "takes 5 inputs");
    {
        double one = 1;
        keel_tensor *s = from(KEEL_F32, 1, (int64_t[]){1}, &one), *e = NULL;
        CU_ASSERT_EQUAL_FATAL(keel_expand(s, 1, &c4, &e), KEEL_STATUS_OK);
        K(e);
        bn[3] = e;
        ERR_EXPECT(run(KEEL_OP_BATCH_NORM, bn, 5, NULL, 0, out, 3),
                   KEEL_STATUS_INVALID_ARGUMENT, "batch_norm",
                   "broadcast view");
        bn[3] = v4;
    }
    /* layer_norm: normalized shape mismatch, begin axis out of range, a
     * 0-d input. */
    {
        keel_tensor *ln[3] = {x, v4, v4};
        ERR_EXPECT(run(KEEL_OP_LAYER_NORM, ln, 3, NULL, 0, out, 3),
                   KEEL_STATUS_INVALID_ARGUMENT, "layer_norm",
                   "normalized shape");
        ERR_EXPECT(run(KEEL_OP_LAYER_NORM, ln, 1, &b9, 1, out, 3),
                   KEEL_STATUS_INVALID_ARGUMENT, "layer_norm",
                   "begin_norm_axis 9");
        ln[1] = rnd(KEEL_F64, 1, (int64_t[]){3}, 0, 1);
        ln[0] = rnd(KEEL_F16, 2, (int64_t[]){2, 3}, 0, 1);
        ERR_EXPECT(run(KEEL_OP_LAYER_NORM, ln, 2, NULL, 0, out, 3),
                   KEEL_STATUS_INVALID_ARGUMENT, "layer_norm",
                   "must be float16 or float32");
        ln[0] = from(KEEL_F32, 0, NULL, (double[]){1});
        ERR_EXPECT(run(KEEL_OP_LAYER_NORM, ln, 1, NULL, 0, out, 3),
                   KEEL_STATUS_INVALID_ARGUMENT, "layer_norm",
                   "out of range");
    }
    /* group_norm: groups not dividing the channels, zero groups, a
     * missing required attribute. */
    {
        keel_tensor *gn[3] = {x, v4, v4};
        ERR_EXPECT(run(KEEL_OP_GROUP_NORM, gn, 3, &g3, 1, out, 3),
                   KEEL_STATUS_INVALID_ARGUMENT, "group_norm",
                   "divide the 4 channels");
        ERR_EXPECT(run(KEEL_OP_GROUP_NORM, gn, 1, &g0, 1, out, 3),
                   KEEL_STATUS_INVALID_ARGUMENT, "group_norm", "groups = 0");
        ERR_EXPECT(run(KEEL_OP_GROUP_NORM, gn, 1, NULL, 0, out, 3),
                   KEEL_STATUS_INVALID_ARGUMENT, "group_norm", "groups");
    }
    /* grads: dy of another shape, statistics of the wrong size. */
    {
        keel_tensor *dy = rnd(KEEL_F32, 1, &s1, 0, 1);
        keel_tensor *lg[5] = {x, v4, v4, v4, dy};
        ERR_EXPECT(run(KEEL_OP_BATCH_NORM_GRAD, lg, 5, NULL, 0, out, 3),
                   KEEL_STATUS_INVALID_ARGUMENT, "batch_norm_grad", "dy");
        lg[4] = x;
        ERR_EXPECT(run(KEEL_OP_LAYER_NORM_GRAD, lg, 5, NULL, 0, out, 3),
                   KEEL_STATUS_INVALID_ARGUMENT, "layer_norm_grad", "mean");
        ERR_EXPECT(run(KEEL_OP_GROUP_NORM_GRAD, lg, 5, &g3, 1, out, 3),
                   KEEL_STATUS_INVALID_ARGUMENT, "group_norm_grad",
                   "divide");
    }
    drop_all();
}

static void test_loss_errors(void)
{
    int64_t s2[2] = {4, 5}, n4 = 4, n3 = 3, s3[3] = {4, 5, 2};
    keel_tensor *x = rnd(KEEL_F32, 2, s2, -1, 1), *out[2];
    keel_tensor *lab = from(KEEL_I64, 1, &n4, (double[]){0, 1, 7, 2});
    keel_tensor *labf = rnd(KEEL_F32, 1, &n4, 0, 1);
    keel_tensor *lab3 = from(KEEL_I64, 1, &n3, (double[]){0, 1, 2});
    keel_tensor *in[3] = {x, lab3, NULL};
    keel_attr bad_red = keel_attr_str("reduction", "average");
    keel_attr ax = keel_attr_int("axis", 2);
    keel_attr ls = keel_attr_float("label_smoothing", 2);

    /* cross_entropy */
    ERR_EXPECT(run(KEEL_OP_CROSS_ENTROPY, in, 2, NULL, 0, out, 2),
               KEEL_STATUS_INVALID_ARGUMENT, "cross_entropy",
               "without axis 1");
    in[1] = labf;
    ERR_EXPECT(run(KEEL_OP_CROSS_ENTROPY, in, 2, NULL, 0, out, 2),
               KEEL_STATUS_INVALID_ARGUMENT, "cross_entropy",
               "integer dtype");
    in[1] = lab;
    ERR_EXPECT(run(KEEL_OP_CROSS_ENTROPY, in, 2, NULL, 0, out, 2),
               KEEL_STATUS_INVALID_ARGUMENT, "cross_entropy",
               "label 7 at flat position 2");
    ERR_EXPECT(run(KEEL_OP_CROSS_ENTROPY, in, 2, &ax, 1, out, 2),
               KEEL_STATUS_INVALID_ARGUMENT, "cross_entropy", "axis 2");
    ERR_EXPECT(run(KEEL_OP_CROSS_ENTROPY, in, 2, &bad_red, 1, out, 2),
               KEEL_STATUS_INVALID_ARGUMENT, "cross_entropy", "average");
    ERR_EXPECT(run(KEEL_OP_CROSS_ENTROPY, in, 2, &ls, 1, out, 2),
               KEEL_STATUS_INVALID_ARGUMENT, "cross_entropy",
               "label_smoothing");
    in[2] = rnd(KEEL_F32, 1, &n3, 0, 1);
    in[1] = from(KEEL_I64, 1, &n4, (double[]){0, 1, 1, 2});
    ERR_EXPECT(run(KEEL_OP_CROSS_ENTROPY, in, 3, NULL, 0, out, 2),
               KEEL_STATUS_INVALID_ARGUMENT, "cross_entropy", "weight");
    {
        keel_tensor *g[3] = {x, lab, from(KEEL_F32, 0, NULL, (double[]){1})};
        ERR_EXPECT(run(KEEL_OP_CROSS_ENTROPY_GRAD, g, 3, NULL, 0, out, 1),
                   KEEL_STATUS_INVALID_ARGUMENT, "cross_entropy_grad",
                   "label 7");
        g[1] = in[1];
        g[2] = rnd(KEEL_F32, 1, &n3, 0, 1);
        ERR_EXPECT(run(KEEL_OP_CROSS_ENTROPY_GRAD, g, 3, NULL, 0, out, 1),
                   KEEL_STATUS_INVALID_ARGUMENT, "cross_entropy_grad",
                   "dloss");
    }
    /* mse / bce: shape mismatch, non-broadcastable pos_weight, bad
     * reduction, integer inputs. */
    {
        keel_tensor *m[3] = {x, rnd(KEEL_F32, 1, &n4, 0, 1), NULL};
        ERR_EXPECT(run(KEEL_OP_MSE_LOSS, m, 2, NULL, 0, out, 1),
                   KEEL_STATUS_INVALID_ARGUMENT, "mse_loss", "shape");
        m[1] = x;
        m[2] = rnd(KEEL_F32, 1, &n3, 0, 1);
        ERR_EXPECT(run(KEEL_OP_BCE_WITH_LOGITS, m, 3, NULL, 0, out, 1),
                   KEEL_STATUS_INVALID_ARGUMENT, "bce_with_logits",
                   "pos_weight");
        ERR_EXPECT(run(KEEL_OP_MSE_LOSS, m, 2, &bad_red, 1, out, 1),
                   KEEL_STATUS_INVALID_ARGUMENT, "mse_loss", "reduction");
        m[0] = m[1] = rnd(KEEL_I32, 2, s2, 0, 3);
        ERR_EXPECT(run(KEEL_OP_MSE_LOSS, m, 2, NULL, 0, out, 1),
                   KEEL_STATUS_NOT_SUPPORTED, "mse_loss", "floating");
    }
    /* nll_loss: label out of range, wrong label shape, float labels. */
    {
        keel_tensor *nl[2] = {x, lab};
        ERR_EXPECT(run(KEEL_OP_NLL_LOSS, nl, 2, NULL, 0, out, 1),
                   KEEL_STATUS_INVALID_ARGUMENT, "nll_loss", "label 7");
        nl[0] = rnd(KEEL_F32, 3, s3, -1, 0);
        ERR_EXPECT(run(KEEL_OP_NLL_LOSS, nl, 2, NULL, 0, out, 1),
                   KEEL_STATUS_INVALID_ARGUMENT, "nll_loss",
                   "without the class dim");
        nl[0] = x;
        nl[1] = labf;
        ERR_EXPECT(run(KEEL_OP_NLL_LOSS, nl, 2, NULL, 0, out, 1),
                   KEEL_STATUS_INVALID_ARGUMENT, "nll_loss",
                   "integer dtype");
    }
    drop_all();
}

static void test_misc_errors(void)
{
    int64_t t2[2] = {5, 3}, n4 = 4, s2[2] = {2, 3}, n3 = 3;
    keel_tensor *tab = rnd(KEEL_F32, 2, t2, -1, 1), *out[2];
    keel_tensor *ids = from(KEEL_I64, 1, &n4, (double[]){0, 4, 5, 1});
    keel_tensor *in[4] = {ids, tab, NULL, NULL};
    keel_attr pad9 = keel_attr_int("padding_idx", 9);

    /* embedding: an id out of range (from the kernel), float ids, a 1-D
     * table, padding_idx past the table. */
    ERR_EXPECT(run(KEEL_OP_EMBEDDING, in, 2, NULL, 0, out, 1),
               KEEL_STATUS_INVALID_ARGUMENT, "embedding",
               "id 5 at flat position 2 is out of range [0, 5)");
    in[0] = rnd(KEEL_F32, 1, &n4, 0, 1);
    ERR_EXPECT(run(KEEL_OP_EMBEDDING, in, 2, NULL, 0, out, 1),
               KEEL_STATUS_INVALID_ARGUMENT, "embedding", "integer dtype");
    in[0] = from(KEEL_I64, 1, &n4, (double[]){0, 1, 2, 3});
    in[1] = rnd(KEEL_F32, 1, &n4, 0, 1);
    ERR_EXPECT(run(KEEL_OP_EMBEDDING, in, 2, NULL, 0, out, 1),
               KEEL_STATUS_INVALID_ARGUMENT, "embedding", "[V, D]");
    in[1] = tab;
    ERR_EXPECT(run(KEEL_OP_EMBEDDING, in, 2, &pad9, 1, out, 1),
               KEEL_STATUS_INVALID_ARGUMENT, "embedding", "padding_idx 9");
    {
        keel_attr ne = keel_attr_int("num_embeddings", 3);
        keel_tensor *g[2] = {ids, rnd(KEEL_F32, 2, (int64_t[]){4, 2}, 0, 1)};
        ERR_EXPECT(run(KEEL_OP_EMBEDDING_GRAD, g, 2, &ne, 1, out, 1),
                   KEEL_STATUS_INVALID_ARGUMENT, "embedding_grad",
                   "id 4 at flat position 1");
        g[1] = rnd(KEEL_F32, 2, (int64_t[]){3, 2}, 0, 1);
        ERR_EXPECT(run(KEEL_OP_EMBEDDING_GRAD, g, 2, &ne, 1, out, 1),
                   KEEL_STATUS_INVALID_ARGUMENT, "embedding_grad",
                   "dout must be");
    }
    /* dropout: p outside [0, 1], an unknown mode, missing seed. */
    {
        keel_attr at[4] = {keel_attr_float("p", 1.5), keel_attr_int("seed", 1),
                           keel_attr_int("offset", 0),
                           keel_attr_str("mode", "bogus")};
        keel_tensor *d[1] = {tab};
        ERR_EXPECT(run(KEEL_OP_DROPOUT, d, 1, at, 3, out, 2),
                   KEEL_STATUS_INVALID_ARGUMENT, "dropout", "p must be");
        at[0] = keel_attr_float("p", 0.5);
        ERR_EXPECT(run(KEEL_OP_DROPOUT, d, 1, at, 4, out, 2),
                   KEEL_STATUS_INVALID_ARGUMENT, "dropout", "bogus");
        ERR_EXPECT(run(KEEL_OP_DROPOUT, d, 1, at, 1, out, 2),
                   KEEL_STATUS_INVALID_ARGUMENT, "dropout", "seed");
    }
    /* one_hot: a class out of range, num_classes 0, a float input. */
    {
        keel_tensor *o = NULL;
        ERR_EXPECT(keel_one_hot(ids, 5, &o), KEEL_STATUS_INVALID_ARGUMENT,
                   "one_hot", "class 5 at flat position 2");
        ERR_EXPECT(keel_one_hot(ids, 0, &o), KEEL_STATUS_INVALID_ARGUMENT,
                   "one_hot", "num_classes");
        ERR_EXPECT(keel_one_hot(tab, 3, &o), KEEL_STATUS_NOT_SUPPORTED,
                   "one_hot", "float32");
    }
    /* optimizers: shape mismatch, state dtype, integer param, beta pow
     * of 1, a broadcast param, a missing lr. */
    {
        keel_tensor *p = rnd(KEEL_F32, 2, s2, 0, 1);
        keel_tensor *g3 = rnd(KEEL_F32, 1, &n3, 0, 1);
        keel_tensor *m64 = rnd(KEEL_F64, 2, s2, 0, 1);
        keel_tensor *pi = rnd(KEEL_I32, 2, s2, 0, 3);
        keel_tensor *o[4] = {p, g3, p, p}, *e = NULL;
        keel_attr lr = keel_attr_float("lr", 0.1);
        keel_attr ad[3] = {lr, keel_attr_float("beta1_pow", 1),
                           keel_attr_float("beta2_pow", 0.5)};
        ERR_EXPECT(run(KEEL_OP_SGD_UPDATE, o, 2, &lr, 1, NULL, 0),
                   KEEL_STATUS_INVALID_ARGUMENT, "sgd_update", "grad");
        o[1] = p;
        o[2] = m64;
        ERR_EXPECT(run(KEEL_OP_MOMENTUM_UPDATE, o, 3, &lr, 1, NULL, 0),
                   KEEL_STATUS_INVALID_ARGUMENT, "momentum_update",
                   "float64");
        o[2] = p;
        ERR_EXPECT(run(KEEL_OP_ADAM_UPDATE, o, 4, ad, 3, NULL, 0),
                   KEEL_STATUS_INVALID_ARGUMENT, "adam_update",
                   "beta1_pow");
        ERR_EXPECT(run(KEEL_OP_ADAMW_UPDATE, o, 4, &lr, 1, NULL, 0),
                   KEEL_STATUS_INVALID_ARGUMENT, "adamw_update",
                   "beta1_pow");
        o[0] = o[1] = pi;
        ERR_EXPECT(run(KEEL_OP_SGD_UPDATE, o, 2, &lr, 1, NULL, 0),
                   KEEL_STATUS_NOT_SUPPORTED, "sgd_update", "int32");
        CU_ASSERT_EQUAL_FATAL(keel_expand(K(ot_from(KEEL_F32, 1,
                                                    (int64_t[]){1},
                                                    (double[]){1})),
                                          1, &n3, &e),
                              KEEL_STATUS_OK);
        K(e);
        o[0] = e;
        o[1] = g3;
        ERR_EXPECT(run(KEEL_OP_SGD_UPDATE, o, 2, &lr, 1, NULL, 0),
                   KEEL_STATUS_INVALID_ARGUMENT, "sgd_update",
                   "broadcast view");
        o[0] = o[1] = p;
        ERR_EXPECT(run(KEEL_OP_SGD_UPDATE, o, 2, NULL, 0, NULL, 0),
                   KEEL_STATUS_INVALID_ARGUMENT, "sgd_update", "lr");
    }
    drop_all();
}

int main(void)
{
    static const ot_test tests[] = {
        {"batch_norm train", test_batch_norm_train},
        {"batch_norm eval", test_batch_norm_eval},
        {"batch_norm edge cases", test_batch_norm_edge},
        {"batch_norm_grad", test_batch_norm_grad},
        {"layer_norm", test_layer_norm},
        {"layer_norm_grad", test_layer_norm_grad},
        {"group_norm", test_group_norm},
        {"group_norm_grad", test_group_norm_grad},
        {"cross_entropy hard labels", test_cross_entropy_hard},
        {"cross_entropy soft labels", test_cross_entropy_soft},
        {"cross_entropy large", test_cross_entropy_large},
        {"mse_loss", test_mse_loss},
        {"bce_with_logits", test_bce_with_logits},
        {"nll_loss", test_nll_loss},
        {"embedding", test_embedding},
        {"embedding_grad", test_embedding_grad},
        {"dropout", test_dropout},
        {"one_hot", test_one_hot},
        {"optimizer updates", test_optimizers},
        {"check_finite_and_unscale", test_unscale},
        {"check_finite_and_unscale errors", test_unscale_errors},
        {"norm errors", test_norm_errors},
        {"loss errors", test_loss_errors},
        {"embedding, dropout, one_hot, optimizer errors", test_misc_errors},
    };

    return ot_main("nn", tests, sizeof(tests) / sizeof(tests[0]));
}
