/*
 * Reduction, cumsum and softmax-family tests: every op in every dtype it
 * claims, over axis sets (none, one, several, negative; keepdim both),
 * contiguous / transposed / strided / broadcast inputs, 0-d and size-1
 * shapes, empty tensors, NaN and infinities, sizes that take the
 * multi-threaded paths, the typed API, and the errors.
 *
 * Every reference is computed here in double from the host copies of the
 * inputs (ot_host), never by calling keel ops.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optest.h"

/* ---- the reductions and their float64 references ------------------------- */

enum rk {
    K_SUM,
    K_MEAN,
    K_MAX,
    K_MIN,
    K_PROD,
    K_ARGMAX,
    K_ARGMIN,
    K_VAR,
    K_STD,
    K_LSE,
    K_ALL,
    K_ANY,
    K_COUNT
};

static const struct {
    const char *name;
    keel_op_id id;
    uint32_t dtypes;
    int maxaxes;
} rk_info[K_COUNT] = {
    [K_SUM] = {"sum", KEEL_OP_SUM, KEEL_DT_ALL, 8},
    [K_MEAN] = {"mean", KEEL_OP_MEAN, KEEL_DT_FLOAT, 8},
    [K_MAX] = {"max", KEEL_OP_MAX, KEEL_DT_NUMERIC, 8},
    [K_MIN] = {"min", KEEL_OP_MIN, KEEL_DT_NUMERIC, 8},
    [K_PROD] = {"prod", KEEL_OP_PROD, KEEL_DT_NUMERIC, 8},
    [K_ARGMAX] = {"argmax", KEEL_OP_ARGMAX, KEEL_DT_NUMERIC, 1},
    [K_ARGMIN] = {"argmin", KEEL_OP_ARGMIN, KEEL_DT_NUMERIC, 1},
    [K_VAR] = {"var", KEEL_OP_VAR, KEEL_DT_FLOAT, 8},
    [K_STD] = {"std", KEEL_OP_STD, KEEL_DT_FLOAT, 8},
    [K_LSE] = {"logsumexp", KEEL_OP_LOGSUMEXP, KEEL_DT_FLOAT, 8},
    [K_ALL] = {"all", KEEL_OP_ALL, KEEL_DT_ALL, 8},
    [K_ANY] = {"any", KEEL_OP_ANY, KEEL_DT_ALL, 8},
};

static const char *const layout_names[3] = {"contiguous", "transposed",
                                            "strided"};

static bool is_float(keel_dtype dt)
{
    return dt == KEEL_F32 || dt == KEEL_F64 || dt == KEEL_F16 ||
           dt == KEEL_BF16;
}

static keel_dtype red_out_dtype(int kind, keel_dtype dt)
{
    switch (kind) {
    case K_SUM:
        return is_float(dt) ? dt : KEEL_I64;
    case K_ARGMAX:
    case K_ARGMIN:
        return KEEL_I64;
    case K_ALL:
    case K_ANY:
        return KEEL_BOOL;
    default:
        return dt;
    }
}

/* Integer results wrap to their dtype (products of small integers). */
static double wrap_to(keel_dtype dt, double v)
{
    int64_t i;

    if (is_float(dt) || isnan(v) || isinf(v))
        return v;
    i = (int64_t)v;
    switch (dt) {
    case KEEL_I8:
        return (int8_t)i;
    case KEEL_U8:
        return (uint8_t)i;
    case KEEL_I32:
        return (int32_t)i;
    case KEEL_BOOL:
        return i != 0;
    default:
        return (double)i;
    }
}

static double ref_extreme_index(const double *v, int64_t n, bool want_max)
{
    int64_t best = 0;

    for (int64_t i = 0; i < n; i++)
        if (isnan(v[i]))
            return (double)i;
    for (int64_t i = 1; i < n; i++)
        if (want_max ? v[i] > v[best] : v[i] < v[best])
            best = i;
    return (double)best;
}

/* One output of reduction `kind` over v[0..n). */
static double ref_apply(int kind, const double *v, int64_t n, bool unbiased)
{
    double s = 0, m, d;
    bool nan = false;

    switch (kind) {
    case K_SUM:
    case K_MEAN:
        for (int64_t i = 0; i < n; i++)
            s += v[i];
        return kind == K_SUM ? s : (n ? s / (double)n : NAN);
    case K_PROD:
        s = 1;
        for (int64_t i = 0; i < n; i++)
            s *= v[i];
        return s;
    case K_MAX:
    case K_MIN:
    case K_LSE:
        m = kind == K_MIN ? INFINITY : -INFINITY;
        for (int64_t i = 0; i < n; i++) {
            nan |= isnan(v[i]);
            if (kind == K_MIN ? v[i] < m : v[i] > m)
                m = v[i];
        }
        if (nan)
            return NAN;
        if (kind != K_LSE || isinf(m))
            return m;
        for (int64_t i = 0; i < n; i++)
            s += exp(v[i] - m);
        return m + log(s);
    case K_ARGMAX:
    case K_ARGMIN:
        return ref_extreme_index(v, n, kind == K_ARGMAX);
    case K_VAR:
    case K_STD:
        for (int64_t i = 0; i < n; i++)
            s += v[i];
        m = s / (double)n;
        s = 0;
        for (int64_t i = 0; i < n; i++) {
            d = v[i] - m;
            s += d * d;
        }
        d = (double)n - (unbiased ? 1 : 0);
        s = d > 0 ? s / d : NAN;
        return kind == K_STD ? sqrt(s) : s;
    case K_ALL:
        for (int64_t i = 0; i < n; i++)
            if (v[i] == 0)
                return 0;
        return 1;
    default: /* K_ANY */
        for (int64_t i = 0; i < n; i++)
            if (v[i] != 0)
                return 1;
        return 0;
    }
}

/* Reduced dims as a mask (axes empty: all); 0-d tensors reduce nothing. */
static uint32_t axes_to_mask(int naxes, const int64_t *axes, int ndim)
{
    uint32_t mask = 0;
    int lim = ndim ? ndim : 1;

    if (naxes == 0)
        return ndim ? (1u << ndim) - 1 : 0;
    for (int i = 0; i < naxes; i++)
        mask |= 1u << (axes[i] < 0 ? axes[i] + lim : axes[i]);
    return ndim ? mask : 0;
}

static int red_shape(int ndim, const int64_t *shape, uint32_t mask,
                     bool keepdim, int64_t *out)
{
    int nd = 0;

    for (int d = 0; d < ndim; d++) {
        if (!(mask & (1u << d)))
            out[nd++] = shape[d];
        else if (keepdim)
            out[nd++] = 1;
    }
    return nd;
}

/* ref[o] for every output o (row-major over the kept dims). */
static void ref_reduce(int kind, const double *x, int ndim,
                       const int64_t *shape, uint32_t mask, bool unbiased,
                       double *ref)
{
    int64_t stride[8], nout = 1, nred = 1;
    int kd[8], rd[8], nk = 0, nr = 0;
    double *v;

    for (int d = ndim - 1, s = 1; d >= 0; d--) {
        stride[d] = s;
        s *= (int)shape[d];
    }
    for (int d = 0; d < ndim; d++) {
        if (mask & (1u << d)) {
            rd[nr++] = d;
            nred *= shape[d];
        } else {
            kd[nk++] = d;
            nout *= shape[d];
        }
    }
    v = malloc(sizeof(double) * (size_t)(nred ? nred : 1));
    for (int64_t o = 0; o < nout; o++) {
        int64_t base = 0, rem = o;
        for (int k = nk - 1; k >= 0; k--) {
            base += (rem % shape[kd[k]]) * stride[kd[k]];
            rem /= shape[kd[k]];
        }
        for (int64_t r = 0; r < nred; r++) {
            int64_t off = base;
            rem = r;
            for (int k = nr - 1; k >= 0; k--) {
                off += (rem % shape[rd[k]]) * stride[rd[k]];
                rem /= shape[rd[k]];
            }
            v[r] = x[off];
        }
        ref[o] = ref_apply(kind, v, nred, unbiased);
    }
    free(v);
}

static keel_status run_red(int kind, keel_tensor *x, int naxes,
                           const int64_t *axes, bool keepdim, int unbiased,
                           keel_tensor **out)
{
    keel_attr a[3];
    int na = 0, n = 0;

    a[na++] = keel_attr_ints("axis", axes, naxes);
    a[na++] = keel_attr_bool("keepdim", keepdim);
    if (unbiased >= 0)
        a[na++] = keel_attr_bool("unbiased", unbiased != 0);
    *out = NULL;
    return keel_op_run(rk_info[kind].id, &x, 1, a, na, out, 1, &n);
}

/* Run reduction `kind` on x and compare with the reference: shape, dtype
 * and values. Returns false on a mismatch. */
static bool check_red(int kind, keel_tensor *x, int naxes,
                      const int64_t *axes, bool keepdim, int unbiased,
                      const char *what)
{
    int ndim = keel_tensor_ndim(x);
    const int64_t *shape = keel_tensor_shape(x);
    keel_dtype dt = keel_tensor_dtype(x), odt = red_out_dtype(kind, dt);
    uint32_t mask = axes_to_mask(naxes, axes, ndim);
    int64_t oshape[8], nout = 1;
    int ond = red_shape(ndim, shape, mask, keepdim, oshape);
    keel_tensor *out = NULL;
    double *xv, *ref;
    char msg[256];
    bool ok;
    keel_status st;

    snprintf(msg, sizeof(msg), "%s %s [%s]", rk_info[kind].name,
             keel_dtype_name(dt), what);
    st = run_red(kind, x, naxes, axes, keepdim, unbiased, &out);
    CU_ASSERT_EQUAL(st, KEEL_STATUS_OK);
    if (st != KEEL_STATUS_OK) {
        fprintf(stderr, "\n  %s: %s\n", msg, keel_last_error());
        return false;
    }
    ok = ot_check_shape(msg, out, ond, oshape);
    CU_ASSERT_EQUAL(keel_tensor_dtype(out), odt);
    ok = ok && keel_tensor_dtype(out) == odt;
    for (int d = 0; d < ond; d++)
        nout *= oshape[d];
    xv = ot_host(x);
    ref = malloc(sizeof(double) * (size_t)(nout ? nout : 1));
    ref_reduce(kind, xv, ndim, shape, mask, unbiased != 0, ref);
    for (int64_t i = 0; i < nout; i++)
        ref[i] = ot_round(wrap_to(odt, ref[i]), odt);
    if (ok)
        ok = ot_check(msg, out, ref, odt);
    free(xv);
    free(ref);
    keel_tensor_free(out);
    return ok;
}

/* Input values suited to `kind` in dtype dt. */
static keel_tensor *make_input(int kind, keel_dtype dt, int ndim,
                               const int64_t *shape)
{
    keel_tensor *r, *t;
    double *v;
    int64_t n = 1;

    if (kind == K_ALL || kind == K_ANY) {
        /* About one zero in ten, so that both answers occur. */
        for (int d = 0; d < ndim; d++)
            n *= shape[d];
        r = ot_rand(KEEL_I32, ndim, shape, 0, 10);
        v = ot_host(r);
        for (int64_t i = 0; i < n; i++)
            v[i] = dt == KEEL_BOOL ? v[i] != 0
                                   : (is_float(dt) ? v[i] * 0.25 : v[i]);
        t = ot_from(dt, ndim, shape, v);
        free(v);
        keel_tensor_free(r);
        return t;
    }
    if (dt == KEEL_BOOL)
        return ot_rand(dt, ndim, shape, 0, 1);
    if (kind == K_PROD)
        return is_float(dt) ? ot_rand(dt, ndim, shape, 0.5, 1.5)
                            : ot_rand(dt, ndim, shape,
                                      dt == KEEL_U8 ? 0 : -2, 3);
    if (is_float(dt))
        return ot_rand(dt, ndim, shape, -2, 2);
    return ot_rand(dt, ndim, shape, dt == KEEL_U8 ? 0 : -50, 50);
}

static const struct {
    int n;
    int64_t ax[3];
} axis_sets[] = {
    {0, {0}}, {1, {0}}, {1, {-1}}, {1, {1}}, {2, {0, 2}}, {2, {-2, -1}},
    {3, {2, 0, 1}},
};
#define NAXIS_SETS ((int)(sizeof(axis_sets) / sizeof(axis_sets[0])))

/* Every reduction x every claimed dtype x axis sets x keepdim x layouts. */
static void reduce_matrix(int kind)
{
    const int64_t shape[3] = {3, 4, 5};

    for (int k = 0; k < 9; k++) {
        keel_dtype dt = ot_all_dtypes[k];
        keel_tensor *base;
        if (!(rk_info[kind].dtypes & KEEL_DTYPE_BIT(dt)))
            continue;
        base = make_input(kind, dt, 3, shape);
        CU_ASSERT_PTR_NOT_NULL_FATAL(base);
        for (int l = 0; l < 3; l++) {
            keel_tensor *x = ot_layout(base, (enum ot_layout)l);
            CU_ASSERT_PTR_NOT_NULL_FATAL(x);
            for (int s = 0; s < NAXIS_SETS; s++) {
                if (axis_sets[s].n > rk_info[kind].maxaxes)
                    continue;
                for (int kd = 0; kd < 2; kd++) {
                    char what[96];
                    snprintf(what, sizeof(what),
                             "%s, axis set %d, keepdim %d", layout_names[l],
                             s, kd);
                    check_red(kind, x, axis_sets[s].n, axis_sets[s].ax,
                              kd != 0, -1, what);
                }
            }
            keel_tensor_free(x);
        }
        keel_tensor_free(base);
    }
}

static void test_sum(void)
{
    reduce_matrix(K_SUM);
}

static void test_mean(void)
{
    reduce_matrix(K_MEAN);
}

static void test_max_min(void)
{
    reduce_matrix(K_MAX);
    reduce_matrix(K_MIN);
}

static void test_prod(void)
{
    reduce_matrix(K_PROD);
}

static void test_argmax_argmin(void)
{
    reduce_matrix(K_ARGMAX);
    reduce_matrix(K_ARGMIN);
}

static void test_var_std(void)
{
    reduce_matrix(K_VAR);
    reduce_matrix(K_STD);
}

static void test_logsumexp(void)
{
    reduce_matrix(K_LSE);
}

static void test_all_any(void)
{
    reduce_matrix(K_ALL);
    reduce_matrix(K_ANY);
}

/* Size-1 dims, and 0-d tensors with axis [], [0] and [-1]. */
static void test_scalars_and_size1(void)
{
    const int64_t s1[3] = {1, 5, 1};
    const int64_t ax0[1] = {0}, axm1[1] = {-1}, ax1[1] = {1}, ax2[1] = {2};
    double one = 2.5;

    for (int kind = 0; kind < K_COUNT; kind++) {
        keel_tensor *x = make_input(kind, KEEL_F32, 3, s1);
        keel_tensor *sc = ot_from(KEEL_F32, 0, NULL, &one);
        for (int kd = 0; kd < 2; kd++) {
            check_red(kind, x, 1, ax0, kd, -1, "[1,5,1] axis 0");
            check_red(kind, x, 1, ax1, kd, -1, "[1,5,1] axis 1");
            check_red(kind, x, 1, ax2, kd, -1, "[1,5,1] axis 2");
            check_red(kind, x, 0, NULL, kd, -1, "[1,5,1] all axes");
            check_red(kind, sc, 0, NULL, kd, -1, "0-d, axis []");
            check_red(kind, sc, 1, ax0, kd, -1, "0-d, axis [0]");
            check_red(kind, sc, 1, axm1, kd, -1, "0-d, axis [-1]");
        }
        keel_tensor_free(x);
        keel_tensor_free(sc);
    }
    /* The 0-d values themselves, not only agreement with the reference. */
    {
        keel_tensor *sc = ot_from(KEEL_F64, 0, NULL, &one), *o = NULL;
        double v = 0;
        CU_ASSERT_EQUAL_FATAL(run_red(K_SUM, sc, 1, axm1, true, -1, &o),
                              KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(keel_tensor_ndim(o), 0);
        CU_ASSERT_EQUAL(keel_tensor_item(o, 0, &v), KEEL_STATUS_OK);
        CU_ASSERT_DOUBLE_EQUAL(v, 2.5, 0);
        keel_tensor_free(o);
        CU_ASSERT_EQUAL_FATAL(run_red(K_VAR, sc, 0, NULL, false, 1, &o),
                              KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(keel_tensor_item(o, 0, &v), KEEL_STATUS_OK);
        CU_ASSERT(isnan(v)); /* n - 1 == 0 */
        keel_tensor_free(o);
        CU_ASSERT_EQUAL_FATAL(run_red(K_VAR, sc, 0, NULL, false, 0, &o),
                              KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(keel_tensor_item(o, 0, &v), KEEL_STATUS_OK);
        CU_ASSERT_DOUBLE_EQUAL(v, 0, 0);
        keel_tensor_free(o);
        CU_ASSERT_EQUAL_FATAL(run_red(K_ARGMAX, sc, 0, NULL, false, -1, &o),
                              KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(keel_tensor_dtype(o), KEEL_I64);
        CU_ASSERT_EQUAL(keel_tensor_item(o, 0, &v), KEEL_STATUS_OK);
        CU_ASSERT_DOUBLE_EQUAL(v, 0, 0);
        keel_tensor_free(o);
        keel_tensor_free(sc);
    }
}

/* Reductions of empty tensors: identities, NaN, empty outputs, errors. */
static void test_empty(void)
{
    const int64_t shape[2] = {0, 3};
    const int64_t ax0[1] = {0}, ax1[1] = {1};
    keel_tensor *x = NULL, *xi = NULL, *o = NULL;

    CU_ASSERT_EQUAL_FATAL(keel_zeros(2, shape, KEEL_F32, NULL, &x),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_zeros(2, shape, KEEL_I32, NULL, &xi),
                          KEEL_STATUS_OK);
    for (int kind = 0; kind < K_COUNT; kind++) {
        bool no_identity = kind == K_MAX || kind == K_MIN ||
                           kind == K_ARGMAX || kind == K_ARGMIN;
        for (int kd = 0; kd < 2; kd++) {
            /* Reducing the non-empty axis: empty output, fine for all. */
            check_red(kind, x, 1, ax1, kd, -1, "[0,3] axis 1");
            if (no_identity) {
                OT_EXPECT_ERROR(run_red(kind, x, 1, ax0, kd, -1, &o),
                                KEEL_STATUS_INVALID_ARGUMENT,
                                rk_info[kind].name);
                OT_EXPECT_ERROR(run_red(kind, x, 0, NULL, kd, -1, &o),
                                KEEL_STATUS_INVALID_ARGUMENT, "empty axis");
                CU_ASSERT_PTR_NULL(o);
                continue;
            }
            /* sum 0, prod 1, mean/var/std NaN, logsumexp -inf, all true,
             * any false: the reference says so too. */
            check_red(kind, x, 1, ax0, kd, -1, "[0,3] axis 0");
            check_red(kind, x, 0, NULL, kd, -1, "[0,3] all axes");
        }
    }
    check_red(K_SUM, xi, 1, ax0, false, -1, "int32 [0,3] axis 0");
    check_red(K_PROD, xi, 0, NULL, false, -1, "int32 [0,3] all");
    check_red(K_ALL, xi, 1, ax0, true, -1, "int32 [0,3] axis 0");
    /* The identities by value. */
    {
        double *v;
        CU_ASSERT_EQUAL_FATAL(run_red(K_PROD, x, 1, ax0, false, -1, &o),
                              KEEL_STATUS_OK);
        v = ot_host(o);
        CU_ASSERT(v[0] == 1 && v[1] == 1 && v[2] == 1);
        free(v);
        keel_tensor_free(o);
        CU_ASSERT_EQUAL_FATAL(run_red(K_MEAN, x, 1, ax0, false, -1, &o),
                              KEEL_STATUS_OK);
        v = ot_host(o);
        CU_ASSERT(isnan(v[0]) && isnan(v[2]));
        free(v);
        keel_tensor_free(o);
        CU_ASSERT_EQUAL_FATAL(run_red(K_LSE, x, 0, NULL, false, -1, &o),
                              KEEL_STATUS_OK);
        v = ot_host(o);
        CU_ASSERT(isinf(v[0]) && v[0] < 0);
        free(v);
        keel_tensor_free(o);
    }
    keel_tensor_free(x);
    keel_tensor_free(xi);
}

/* NaN propagation and infinities, through the rows and columns paths. */
static void test_nan_inf(void)
{
    const double small[12] = {1,         NAN,       3,         -INFINITY,
                              -INFINITY, -INFINITY, 2,         5,
                              INFINITY,  NAN,       7,         NAN};
    const int64_t s43[2] = {4, 3}, s5x32[2] = {5, 32}, s32x40[2] = {32, 40};
    const int64_t ax0[1] = {0}, ax1[1] = {1};

    for (int k = 0; k < 4; k++) {
        keel_dtype dt = ot_float_dtypes[k];
        keel_tensor *x = ot_from(dt, 2, s43, small);
        keel_tensor *cols = ot_rand(dt, 2, s5x32, -3, 3);
        keel_tensor *rows = ot_rand(dt, 2, s32x40, -3, 3), *t;
        double *v;

        /* Sprinkle NaN and inf into the larger ones. */
        v = ot_host(cols);
        v[3 * 32 + 4] = NAN;
        v[0 * 32 + 9] = NAN;
        v[4 * 32 + 9] = NAN;
        v[2 * 32 + 17] = INFINITY;
        v[1 * 32 + 20] = -INFINITY;
        t = ot_from(dt, 2, s5x32, v);
        keel_tensor_free(cols);
        cols = t;
        free(v);
        v = ot_host(rows);
        v[7 * 40 + 39] = NAN;
        v[8 * 40 + 0] = INFINITY;
        v[9 * 40 + 11] = -INFINITY;
        v[31 * 40 + 2] = NAN;
        v[31 * 40 + 30] = NAN;
        t = ot_from(dt, 2, s32x40, v);
        keel_tensor_free(rows);
        rows = t;
        free(v);

        for (int kind = 0; kind < K_COUNT; kind++) {
            check_red(kind, x, 1, ax1, false, -1, "nan/inf [4,3] axis 1");
            check_red(kind, x, 1, ax0, false, -1, "nan/inf [4,3] axis 0");
            check_red(kind, cols, 1, ax0, false, -1, "nan/inf columns");
            check_red(kind, rows, 1, ax1, false, -1, "nan/inf rows");
            check_red(kind, rows, 0, NULL, false, -1, "nan/inf all");
        }
        /* Spelled out for the small one. */
        {
            keel_tensor *o = NULL;
            double *r;
            CU_ASSERT_EQUAL_FATAL(run_red(K_MAX, x, 1, ax1, false, -1, &o),
                                  KEEL_STATUS_OK);
            r = ot_host(o);
            CU_ASSERT(isnan(r[0]) && r[1] == -INFINITY &&
                      r[2] == INFINITY && isnan(r[3]));
            free(r);
            keel_tensor_free(o);
            CU_ASSERT_EQUAL_FATAL(
                run_red(K_ARGMIN, x, 1, ax1, false, -1, &o), KEEL_STATUS_OK);
            r = ot_host(o);
            CU_ASSERT(r[0] == 1 && r[1] == 0 && r[2] == 0 && r[3] == 0);
            free(r);
            keel_tensor_free(o);
        }
        keel_tensor_free(x);
        keel_tensor_free(cols);
        keel_tensor_free(rows);
    }
}

/* First occurrence on ties, the flattened form and its keepdim shape. */
static void test_argmax_ties_and_flatten(void)
{
    const double v[12] = {3, 7, 7, 1, 5, 5, 5, 5, -1, -2, -2, -1};
    const int64_t s34[2] = {3, 4}, s6x32[2] = {6, 32}, one1[2] = {1, 1};
    const int64_t ax1[1] = {1}, ax0[1] = {0};
    keel_tensor *x = ot_from(KEEL_I32, 2, s34, v), *o = NULL, *c;
    double *r, item = -1, *cv;

    CU_ASSERT_EQUAL_FATAL(run_red(K_ARGMAX, x, 1, ax1, false, -1, &o),
                          KEEL_STATUS_OK);
    r = ot_host(o);
    CU_ASSERT(r[0] == 1 && r[1] == 0 && r[2] == 0);
    free(r);
    keel_tensor_free(o);
    CU_ASSERT_EQUAL_FATAL(run_red(K_ARGMIN, x, 1, ax1, false, -1, &o),
                          KEEL_STATUS_OK);
    r = ot_host(o);
    CU_ASSERT(r[0] == 3 && r[1] == 0 && r[2] == 1);
    free(r);
    keel_tensor_free(o);
    /* Flattened: index into the row-major elements. */
    CU_ASSERT_EQUAL_FATAL(keel_argmax(x, KEEL_AXIS_FLAT, false, &o), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_ndim(o), 0);
    CU_ASSERT_EQUAL(keel_tensor_item(o, 0, &item), KEEL_STATUS_OK);
    CU_ASSERT_DOUBLE_EQUAL(item, 1, 0);
    keel_tensor_free(o);
    CU_ASSERT_EQUAL_FATAL(keel_argmin(x, KEEL_AXIS_FLAT, true, &o), KEEL_STATUS_OK);
    ot_check_shape("argmin flattened keepdim", o, 2, one1);
    CU_ASSERT_EQUAL(keel_tensor_item(o, 0, &item), KEEL_STATUS_OK);
    CU_ASSERT_DOUBLE_EQUAL(item, 9, 0);
    keel_tensor_free(o);
    /* Flattened over a transposed view: the logical order counts. */
    c = ot_layout(x, OT_TRANSPOSED);
    CU_ASSERT_EQUAL_FATAL(keel_argmin(c, KEEL_AXIS_FLAT, false, &o), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_item(o, 0, &item), KEEL_STATUS_OK);
    CU_ASSERT_DOUBLE_EQUAL(item, 9, 0);
    keel_tensor_free(o);
    keel_tensor_free(c);
    /* Ties down columns (the columns path): rows 1, 3 and 4 tie. */
    {
        double w[6 * 32];
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 32; j++)
                w[i * 32 + j] = (i == 1 || i == 3 || i == 4) ? 9 : j % 5;
        for (int k = 0; k < 4; k++) {
            keel_tensor *f = ot_from(ot_float_dtypes[k], 2, s6x32, w);
            CU_ASSERT_EQUAL_FATAL(run_red(K_ARGMAX, f, 1, ax0, false, -1, &o),
                                  KEEL_STATUS_OK);
            cv = ot_host(o);
            for (int j = 0; j < 32; j++)
                CU_ASSERT_EQUAL(cv[j], 1);
            free(cv);
            keel_tensor_free(o);
            check_red(K_ARGMIN, f, 1, ax0, true, -1, "column ties");
            keel_tensor_free(f);
        }
    }
    keel_tensor_free(x);
}

static void test_var_unbiased(void)
{
    const int64_t s[3] = {4, 6, 3}, s31[2] = {3, 1};
    const int64_t ax1[1] = {1}, axs[2] = {0, 2};
    const double v3[3] = {1, 2, 4};

    for (int k = 0; k < 4; k++) {
        keel_tensor *x = ot_rand(ot_float_dtypes[k], 3, s, -1, 1);
        keel_tensor *n1 = ot_from(ot_float_dtypes[k], 2, s31, v3);
        for (int u = 0; u < 2; u++) {
            check_red(K_VAR, x, 1, ax1, false, u, "unbiased variants");
            check_red(K_STD, x, 2, axs, true, u, "unbiased variants");
            check_red(K_VAR, x, 0, NULL, false, u, "unbiased, all axes");
            /* n = 1: NaN when unbiased, 0 otherwise. */
            check_red(K_VAR, n1, 1, ax1, false, u, "n = 1");
            check_red(K_STD, n1, 1, ax1, true, u, "n = 1");
        }
        keel_tensor_free(x);
        keel_tensor_free(n1);
    }
}

/* Stride-0 (expanded) and other views. */
static void test_broadcast_views(void)
{
    const int64_t s140[2] = {1, 40}, s5040[2] = {50, 40};
    const int64_t ax0[1] = {0}, ax1[1] = {1};
    keel_tensor *b = ot_rand(KEEL_F32, 2, s140, -1, 1), *x = NULL;
    keel_tensor *bi = ot_rand(KEEL_I32, 2, s140, -9, 9), *xi = NULL;
    keel_tensor *bp = ot_rand(KEEL_I32, 2, s140, -1, 2), *xp = NULL;

    CU_ASSERT_EQUAL_FATAL(keel_expand(b, 2, s5040, &x), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_expand(bi, 2, s5040, &xi), KEEL_STATUS_OK);
    /* Products of 50 values stay within int64 only for small values. */
    CU_ASSERT_EQUAL_FATAL(keel_expand(bp, 2, s5040, &xp), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_strides(x)[0], 0);
    for (int kind = 0; kind < K_COUNT; kind++) {
        check_red(kind, x, 1, ax0, false, -1, "expanded, axis 0");
        check_red(kind, x, 1, ax1, true, -1, "expanded, axis 1");
        if (rk_info[kind].maxaxes > 1)
            check_red(kind, x, 0, NULL, false, -1, "expanded, all");
        if (rk_info[kind].dtypes & KEEL_DTYPE_BIT(KEEL_I32))
            check_red(kind, kind == K_PROD ? xp : xi, 1, ax0, false, -1,
                      "int expanded, axis 0");
    }
    keel_tensor_free(b);
    keel_tensor_free(x);
    keel_tensor_free(bi);
    keel_tensor_free(xi);
    keel_tensor_free(bp);
    keel_tensor_free(xp);
}

/* Sizes above the threading thresholds (> 65536 elements): the split
 * full reduction, columns and rows shared over the pool. */
static void test_large(void)
{
    const int64_t s[2] = {256, 384}, sl[2] = {3, 70000};
    const int64_t ax0[1] = {0}, ax1[1] = {1}, axm1[1] = {-1};
    keel_tensor *x = ot_rand(KEEL_F32, 2, s, -1, 1);
    keel_tensor *xt = ot_layout(x, OT_TRANSPOSED);
    keel_tensor *xl = ot_rand(KEEL_F32, 2, sl, -1, 1);
    keel_tensor *xi = ot_rand(KEEL_I32, 2, s, -1000, 1000);
    keel_tensor *xh = ot_rand(KEEL_F16, 2, s, -1, 1);
    keel_tensor *xd = ot_rand(KEEL_F64, 2, sl, -1, 1);
    keel_tensor *xp = ot_rand(KEEL_F64, 2, s, 0.999, 1.001);
    const int kinds[] = {K_SUM, K_MEAN, K_MAX, K_ARGMAX, K_ARGMIN,
                         K_VAR, K_STD, K_LSE, K_ANY};

    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        int kind = kinds[i];
        if (rk_info[kind].maxaxes > 1)
            check_red(kind, x, 0, NULL, false, -1, "large, all axes");
        check_red(kind, x, 1, ax0, false, -1, "large, axis 0");
        check_red(kind, x, 1, ax1, false, -1, "large, axis 1");
        check_red(kind, xt, 1, ax0, false, -1, "large transposed, axis 0");
        check_red(kind, xl, 1, axm1, false, -1, "large [3,70000], axis -1");
    }
    check_red(K_ARGMAX, x, 0, NULL, false, -1, "large flattened");
    check_red(K_ARGMIN, xd, 0, NULL, false, -1, "large f64 flattened");
    check_red(K_SUM, xi, 0, NULL, false, -1, "large int32, all");
    check_red(K_MAX, xi, 1, ax0, false, -1, "large int32, axis 0");
    check_red(K_MIN, xi, 1, ax1, false, -1, "large int32, axis 1");
    check_red(K_SUM, xh, 1, ax0, false, -1, "large f16, axis 0");
    check_red(K_MEAN, xh, 0, NULL, false, -1, "large f16, all");
    check_red(K_SUM, xd, 1, ax1, false, -1, "large f64, axis 1");
    check_red(K_VAR, xd, 1, ax0, true, -1, "large f64, axis 0");
    check_red(K_PROD, xp, 0, NULL, false, -1, "large prod, all");
    check_red(K_PROD, xp, 1, ax0, false, -1, "large prod, axis 0");
    check_red(K_ALL, xp, 0, NULL, false, -1, "large all, all");
    keel_tensor_free(x);
    keel_tensor_free(xt);
    keel_tensor_free(xl);
    keel_tensor_free(xi);
    keel_tensor_free(xh);
    keel_tensor_free(xd);
    keel_tensor_free(xp);
}

/* Outputs side by side wider than one block (columns of 600 and 1100). */
static void test_wide_columns(void)
{
    const int64_t s[2] = {3, 600}, s3[3] = {2, 5, 1100};
    const int64_t ax0[1] = {0}, ax1[1] = {1};
    const keel_dtype dts[3] = {KEEL_F32, KEEL_BF16, KEEL_I32};

    for (int k = 0; k < 3; k++) {
        for (int kind = 0; kind < K_COUNT; kind++) {
            keel_tensor *x, *y;
            if (!(rk_info[kind].dtypes & KEEL_DTYPE_BIT(dts[k])))
                continue;
            x = make_input(kind, dts[k], 2, s);
            y = make_input(kind, dts[k], 3, s3);
            check_red(kind, x, 1, ax0, false, -1, "wide columns");
            check_red(kind, y, 1, ax1, true, -1, "wide columns, 3-d");
            keel_tensor_free(x);
            keel_tensor_free(y);
        }
    }
}

/* The typed wrappers of keel/ops.h. */
static void test_typed_api(void)
{
    const int64_t s[3] = {2, 3, 4};
    const int axes[2] = {0, -1};
    const int64_t axes64[2] = {0, -1};
    keel_tensor *x = ot_rand(KEEL_F64, 3, s, -2, 2), *o = NULL;
    double *xv = ot_host(x), ref[24], *g;

    CU_ASSERT_EQUAL_FATAL(keel_sum(x, 2, axes, true, &o), KEEL_STATUS_OK);
    ref_reduce(K_SUM, xv, 3, s, axes_to_mask(2, axes64, 3), true, ref);
    ot_check("keel_sum", o, ref, KEEL_F64);
    CU_ASSERT_EQUAL(keel_tensor_ndim(o), 3);
    keel_tensor_free(o);
    CU_ASSERT_EQUAL_FATAL(keel_std(x, 2, axes, false, false, &o),
                          KEEL_STATUS_OK);
    ref_reduce(K_STD, xv, 3, s, axes_to_mask(2, axes64, 3), false, ref);
    ot_check("keel_std biased", o, ref, KEEL_F64);
    keel_tensor_free(o);
    CU_ASSERT_EQUAL_FATAL(keel_logsumexp(x, 0, NULL, false, &o),
                          KEEL_STATUS_OK);
    ref_reduce(K_LSE, xv, 3, s, 7, true, ref);
    ot_check("keel_logsumexp", o, ref, KEEL_F64);
    keel_tensor_free(o);
    CU_ASSERT_EQUAL_FATAL(keel_argmax(x, 1, true, &o), KEEL_STATUS_OK);
    ref_reduce(K_ARGMAX, xv, 3, s, 2, true, ref);
    ot_check("keel_argmax axis 1", o, ref, KEEL_I64);
    g = ot_host(o);
    CU_ASSERT(g[0] >= 0 && g[0] < 3);
    free(g);
    keel_tensor_free(o);
    keel_tensor_free(x);
    free(xv);
}

/* ---- cumsum -------------------------------------------------------------- */

/* Reference cumsum along `axis` (axis < 0: over the flattened tensor). */
static void ref_cumsum(const double *x, int ndim, const int64_t *shape,
                       int axis, double *out)
{
    int64_t n = 1, inner = 1, len;

    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    if (n == 0)
        return;
    if (axis < 0) {
        double s = 0;
        for (int64_t i = 0; i < n; i++)
            out[i] = s += x[i];
        return;
    }
    for (int d = axis + 1; d < ndim; d++)
        inner *= shape[d];
    len = ndim ? shape[axis] : 1;
    for (int64_t o = 0; o < n / (len * inner); o++)
        for (int64_t i = 0; i < inner; i++) {
            double s = 0;
            for (int64_t k = 0; k < len; k++) {
                int64_t at = (o * len + k) * inner + i;
                out[at] = s += x[at];
            }
        }
}

/* axis INT_MIN: flattened. */
static void check_cumsum(keel_tensor *x, int axis, const char *what)
{
    int ndim = keel_tensor_ndim(x);
    keel_dtype dt = keel_tensor_dtype(x);
    keel_dtype odt = is_float(dt) ? dt : KEEL_I64;
    int64_t n = keel_tensor_numel(x);
    keel_tensor *o = NULL;
    double *xv, *ref;
    char msg[160];
    int ax = axis == INT_MIN ? -1 : (axis < 0 ? axis + (ndim ? ndim : 1)
                                              : axis);

    int64_t ax64 = axis;
    keel_attr at = keel_attr_ints("axis", &ax64, axis == INT_MIN ? 0 : 1);
    int nout = 0;

    snprintf(msg, sizeof(msg), "cumsum %s axis %d [%s]", keel_dtype_name(dt),
             axis, what);
    CU_ASSERT_EQUAL_FATAL(
        keel_op_run(KEEL_OP_CUMSUM, &x, 1, &at, 1, &o, 1, &nout),
        KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_dtype(o), odt);
    if (axis == INT_MIN)
        ot_check_shape(msg, o, 1, &n);
    else
        ot_check_shape(msg, o, ndim, keel_tensor_shape(x));
    xv = ot_host(x);
    ref = malloc(sizeof(double) * (size_t)(n ? n : 1));
    ref_cumsum(xv, ndim, keel_tensor_shape(x), ndim ? ax : 0, ref);
    ot_check(msg, o, ref, odt);
    free(xv);
    free(ref);
    keel_tensor_free(o);
}

static void test_cumsum(void)
{
    const int64_t s[3] = {3, 4, 5}, s1[3] = {2, 1, 17};
    const int axes[] = {INT_MIN, 0, 1, 2, -1};

    for (int k = 0; k < 8; k++) {
        keel_dtype dt = ot_all_dtypes[k];
        keel_tensor *base = make_input(K_SUM, dt, 3, s);
        keel_tensor *b1 = make_input(K_SUM, dt, 3, s1);
        for (int l = 0; l < 3; l++) {
            keel_tensor *x = ot_layout(base, (enum ot_layout)l);
            for (size_t a = 0; a < sizeof(axes) / sizeof(axes[0]); a++)
                check_cumsum(x, axes[a], layout_names[l]);
            keel_tensor_free(x);
        }
        check_cumsum(b1, 1, "size-1 axis");
        check_cumsum(b1, 2, "[2,1,17]");
        check_cumsum(b1, 0, "[2,1,17]");
        keel_tensor_free(base);
        keel_tensor_free(b1);
    }
}

static void test_cumsum_edges(void)
{
    const int64_t e[2] = {0, 4}, big[2] = {300, 300}, wide[2] = {2, 40000};
    double v = -1.5;
    keel_tensor *sc = ot_from(KEEL_F32, 0, NULL, &v), *o = NULL, *x = NULL;
    keel_tensor *xl, *xi, *xt, *xw;

    /* 0-d: flattened gives [1], axis 0 / -1 keep 0-d. */
    check_cumsum(sc, INT_MIN, "0-d");
    check_cumsum(sc, 0, "0-d");
    check_cumsum(sc, -1, "0-d");
    CU_ASSERT_EQUAL_FATAL(keel_cumsum(sc, KEEL_AXIS_FLAT, &o), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_ndim(o), 1);
    CU_ASSERT_EQUAL(keel_tensor_numel(o), 1);
    keel_tensor_free(o);
    /* Empty. */
    CU_ASSERT_EQUAL_FATAL(keel_zeros(2, e, KEEL_I32, NULL, &x),
                          KEEL_STATUS_OK);
    check_cumsum(x, 0, "empty");
    check_cumsum(x, 1, "empty");
    check_cumsum(x, INT_MIN, "empty");
    keel_tensor_free(x);
    /* Large: blocked parallel scan, columns and lines. */
    xl = ot_rand(KEEL_F32, 2, big, -1, 1);
    xi = ot_rand(KEEL_I64, 2, big, -100000, 100000);
    xt = ot_layout(xl, OT_TRANSPOSED);
    xw = ot_rand(KEEL_F64, 2, wide, -1, 1);
    check_cumsum(xl, INT_MIN, "large flattened");
    check_cumsum(xl, 0, "large");
    check_cumsum(xl, 1, "large");
    check_cumsum(xt, 0, "large transposed");
    check_cumsum(xt, INT_MIN, "large transposed flattened");
    check_cumsum(xi, INT_MIN, "large int64 flattened");
    check_cumsum(xi, 0, "large int64");
    check_cumsum(xw, 1, "large [2,40000]");
    check_cumsum(xw, 0, "large [2,40000]");
    {
        const int64_t w[2] = {4, 900};
        keel_tensor *xc = ot_rand(KEEL_F16, 2, w, -1, 1);
        keel_tensor *xs = ot_rand(KEEL_I8, 2, w, -100, 100);
        check_cumsum(xc, 0, "wide columns");
        check_cumsum(xs, 0, "wide columns");
        keel_tensor_free(xc);
        keel_tensor_free(xs);
    }
    keel_tensor_free(xl);
    keel_tensor_free(xi);
    keel_tensor_free(xt);
    keel_tensor_free(xw);
    keel_tensor_free(sc);
}

/* ---- softmax family ------------------------------------------------------ */

enum smk { S_SOFTMAX, S_LOG_SOFTMAX, S_GRAD, S_LOG_GRAD };

/* Reference along `axis` of a row-major [outer, len, inner] view. */
static void ref_softmax(int kind, const double *x, const double *dy,
                        int ndim, const int64_t *shape, int axis,
                        double *out)
{
    int64_t n = 1, inner = 1, len = ndim ? shape[axis] : 1;

    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    if (n == 0)
        return;
    for (int d = axis + 1; d < ndim; d++)
        inner *= shape[d];
    for (int64_t o = 0; o < n / (len * inner); o++)
        for (int64_t i = 0; i < inner; i++) {
            double m = -INFINITY, s = 0;
            int64_t at0 = o * len * inner + i;
            bool nan = false;
            for (int64_t k = 0; k < len; k++) {
                double v = x[at0 + k * inner];
                nan |= isnan(v);
                m = v > m ? v : m;
            }
            m = nan ? NAN : m;
            for (int64_t k = 0; k < len; k++) {
                double v = x[at0 + k * inner], g = dy ? dy[at0 + k * inner]
                                                      : 0;
                s += kind == S_SOFTMAX || kind == S_LOG_SOFTMAX ? exp(v - m)
                     : kind == S_GRAD                           ? v * g
                                                                : g;
            }
            for (int64_t k = 0; k < len; k++) {
                int64_t at = at0 + k * inner;
                switch (kind) {
                case S_SOFTMAX:
                    out[at] = exp(x[at] - m) / s;
                    break;
                case S_LOG_SOFTMAX:
                    out[at] = (x[at] - m) - log(s);
                    break;
                case S_GRAD:
                    out[at] = x[at] * (dy[at] - s);
                    break;
                default:
                    out[at] = dy[at] - exp(x[at]) * s;
                    break;
                }
            }
        }
}

static const keel_op_id sm_ops[4] = {KEEL_OP_SOFTMAX, KEEL_OP_LOG_SOFTMAX,
                                     KEEL_OP_SOFTMAX_GRAD,
                                     KEEL_OP_LOG_SOFTMAX_GRAD};
static const char *const sm_names[4] = {"softmax", "log_softmax",
                                        "softmax_grad", "log_softmax_grad"};

static keel_status run_sm(int kind, keel_tensor *x, keel_tensor *dy,
                          int64_t axis, keel_tensor **out)
{
    keel_tensor *in[2] = {x, dy};
    keel_attr a = keel_attr_int("axis", axis);
    int n = 0;

    *out = NULL;
    return keel_op_run(sm_ops[kind], in, kind >= S_GRAD ? 2 : 1, &a, 1, out,
                       1, &n);
}

static void check_sm(int kind, keel_tensor *x, keel_tensor *dy, int axis,
                     const char *what)
{
    int ndim = keel_tensor_ndim(x);
    keel_dtype dt = keel_tensor_dtype(x);
    int64_t n = keel_tensor_numel(x);
    keel_tensor *o = NULL;
    double *xv = ot_host(x), *gv = dy ? ot_host(dy) : NULL, *ref;
    char msg[160];
    keel_status st;

    snprintf(msg, sizeof(msg), "%s %s axis %d [%s]", sm_names[kind],
             keel_dtype_name(dt), axis, what);
    st = run_sm(kind, x, dy, axis, &o);
    CU_ASSERT_EQUAL(st, KEEL_STATUS_OK);
    if (st == KEEL_STATUS_OK) {
        CU_ASSERT_EQUAL(keel_tensor_dtype(o), dt);
        ot_check_shape(msg, o, ndim, keel_tensor_shape(x));
        ref = malloc(sizeof(double) * (size_t)(n ? n : 1));
        ref_softmax(kind, xv, gv, ndim, keel_tensor_shape(x),
                    ndim ? (axis < 0 ? axis + ndim : axis) : 0, ref);
        ot_check(msg, o, ref, dt);
        free(ref);
    } else {
        fprintf(stderr, "\n  %s: %s\n", msg, keel_last_error());
    }
    keel_tensor_free(o);
    free(xv);
    free(gv);
}

/* A valid "out" operand for the grads: softmax (or log_softmax) of x,
 * computed on the host. */
static keel_tensor *host_softmax_of(int kind, keel_tensor *x, int axis)
{
    int ndim = keel_tensor_ndim(x);
    int64_t n = keel_tensor_numel(x);
    double *xv = ot_host(x), *y = malloc(sizeof(double) * (size_t)n);
    keel_tensor *t;

    ref_softmax(kind == S_GRAD ? S_SOFTMAX : S_LOG_SOFTMAX, xv, NULL, ndim,
                keel_tensor_shape(x), axis < 0 ? axis + ndim : axis, y);
    t = ot_from(keel_tensor_dtype(x), ndim, keel_tensor_shape(x), y);
    free(xv);
    free(y);
    return t;
}

static void test_softmax(void)
{
    const int64_t s[3] = {3, 4, 5}, s1[3] = {4, 1, 20};
    const int axes[] = {0, 1, 2, -1, -3};

    for (int k = 0; k < 4; k++) {
        keel_dtype dt = ot_float_dtypes[k];
        keel_tensor *base = ot_rand(dt, 3, s, -3, 3);
        keel_tensor *b1 = ot_rand(dt, 3, s1, -3, 3);
        for (int kind = S_SOFTMAX; kind <= S_LOG_SOFTMAX; kind++) {
            for (int l = 0; l < 3; l++) {
                keel_tensor *x = ot_layout(base, (enum ot_layout)l);
                for (size_t a = 0; a < sizeof(axes) / sizeof(axes[0]); a++)
                    check_sm(kind, x, NULL, axes[a], layout_names[l]);
                keel_tensor_free(x);
            }
            check_sm(kind, b1, NULL, 0, "[4,1,20]");
            check_sm(kind, b1, NULL, 1, "size-1 axis");
        }
        keel_tensor_free(base);
        keel_tensor_free(b1);
    }
}

static void test_softmax_grads(void)
{
    const int64_t s[3] = {3, 4, 5}, sc[2] = {6, 40};
    const int axes[] = {0, 1, -1};

    for (int k = 0; k < 4; k++) {
        keel_dtype dt = ot_float_dtypes[k];
        keel_tensor *x = ot_rand(dt, 3, s, -2, 2);
        keel_tensor *dyb = ot_rand(dt, 3, s, -1, 1);
        keel_tensor *xc = ot_rand(dt, 2, sc, -2, 2);
        keel_tensor *dyc = ot_rand(dt, 2, sc, -1, 1);
        for (int kind = S_GRAD; kind <= S_LOG_GRAD; kind++) {
            for (size_t a = 0; a < sizeof(axes) / sizeof(axes[0]); a++) {
                keel_tensor *y = host_softmax_of(kind, x, axes[a]);
                for (int l = 0; l < 3; l++) {
                    keel_tensor *dy = ot_layout(dyb, (enum ot_layout)l);
                    keel_tensor *yl = ot_layout(y, (enum ot_layout)(2 - l));
                    check_sm(kind, y, dy, axes[a], layout_names[l]);
                    check_sm(kind, yl, dy, axes[a], "mixed layouts");
                    keel_tensor_free(dy);
                    keel_tensor_free(yl);
                }
                keel_tensor_free(y);
            }
            /* The columns path: axis 0 of [6, 40]. */
            {
                keel_tensor *y = host_softmax_of(kind, xc, 0);
                check_sm(kind, y, dyc, 0, "columns");
                check_sm(kind, y, dyc, 1, "rows");
                keel_tensor_free(y);
            }
        }
        keel_tensor_free(x);
        keel_tensor_free(dyb);
        keel_tensor_free(xc);
        keel_tensor_free(dyc);
    }
}

/* Stability, infinities, 0-d, empty, large and the typed API. */
static void test_softmax_edges(void)
{
    const double hot[6] = {1000, 1001, 1002, -INFINITY, 0, 0};
    const int64_t s23[2] = {2, 3}, e[2] = {3, 0}, big[2] = {128, 600};
    double one = 4.0, *v;
    keel_tensor *x, *o = NULL, *sc, *ex = NULL, *xl, *dl, *yl;

    for (int k = 0; k < 4; k++) {
        x = ot_from(ot_float_dtypes[k], 2, s23, hot);
        check_sm(S_SOFTMAX, x, NULL, 1, "large and -inf logits");
        check_sm(S_LOG_SOFTMAX, x, NULL, 1, "large and -inf logits");
        keel_tensor_free(x);
    }
    x = ot_from(KEEL_F32, 2, s23, hot);
    CU_ASSERT_EQUAL_FATAL(keel_softmax(x, -1, &o), KEEL_STATUS_OK);
    v = ot_host(o);
    CU_ASSERT(fabs(v[2] - 0.66524096) < 1e-6 && v[3] == 0 &&
              fabs(v[4] - 0.5) < 1e-7);
    free(v);
    keel_tensor_free(o);
    CU_ASSERT_EQUAL_FATAL(keel_log_softmax(x, 1, &o), KEEL_STATUS_OK);
    v = ot_host(o);
    CU_ASSERT(isinf(v[3]) && v[3] < 0 && fabs(v[5] + log(2.0)) < 1e-6);
    free(v);
    keel_tensor_free(o);
    keel_tensor_free(x);
    /* 0-d: softmax 1, log_softmax 0. */
    sc = ot_from(KEEL_F64, 0, NULL, &one);
    check_sm(S_SOFTMAX, sc, NULL, 0, "0-d");
    check_sm(S_LOG_SOFTMAX, sc, NULL, -1, "0-d");
    CU_ASSERT_EQUAL_FATAL(keel_softmax(sc, 0, &o), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_item(o, 0, &one), KEEL_STATUS_OK);
    CU_ASSERT_DOUBLE_EQUAL(one, 1.0, 0);
    keel_tensor_free(o);
    keel_tensor_free(sc);
    /* Empty. */
    CU_ASSERT_EQUAL_FATAL(keel_zeros(2, e, KEEL_F32, NULL, &ex),
                          KEEL_STATUS_OK);
    check_sm(S_SOFTMAX, ex, NULL, 0, "empty");
    check_sm(S_LOG_SOFTMAX, ex, NULL, 1, "empty");
    check_sm(S_GRAD, ex, ex, 1, "empty");
    keel_tensor_free(ex);
    /* Large: lines and columns shared over the pool. */
    xl = ot_rand(KEEL_F32, 2, big, -4, 4);
    dl = ot_rand(KEEL_F32, 2, big, -1, 1);
    check_sm(S_SOFTMAX, xl, NULL, -1, "large");
    check_sm(S_SOFTMAX, xl, NULL, 0, "large");
    check_sm(S_LOG_SOFTMAX, xl, NULL, 0, "large");
    {
        const int64_t w[2] = {5, 700};
        keel_tensor *xw = ot_rand(KEEL_BF16, 2, w, -3, 3);
        keel_tensor *dw = ot_rand(KEEL_BF16, 2, w, -1, 1), *yw;
        check_sm(S_SOFTMAX, xw, NULL, 0, "wide columns");
        check_sm(S_LOG_SOFTMAX, xw, NULL, 0, "wide columns");
        yw = host_softmax_of(S_GRAD, xw, 0);
        check_sm(S_GRAD, yw, dw, 0, "wide columns");
        keel_tensor_free(yw);
        yw = host_softmax_of(S_LOG_GRAD, xw, 0);
        check_sm(S_LOG_GRAD, yw, dw, 0, "wide columns");
        keel_tensor_free(yw);
        keel_tensor_free(xw);
        keel_tensor_free(dw);
    }
    yl = host_softmax_of(S_GRAD, xl, 0);
    check_sm(S_GRAD, yl, dl, 0, "large");
    keel_tensor_free(yl);
    yl = host_softmax_of(S_LOG_GRAD, xl, -1);
    check_sm(S_LOG_GRAD, yl, dl, -1, "large");
    keel_tensor_free(yl);
    keel_tensor_free(xl);
    keel_tensor_free(dl);
}

/* ---- errors -------------------------------------------------------------- */

#define EXPECT_ERR(call, status, op, phrase)                                 \
    do {                                                                     \
        OT_EXPECT_ERROR(call, status, op);                                   \
        if (!strstr(keel_last_error(), (phrase)))                            \
            fprintf(stderr, "\n  %s: message '%s' lacks '%s'\n", #call,      \
                    keel_last_error(), phrase);                              \
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), (phrase)));         \
    } while (0)

static void test_errors(void)
{
    const int64_t s[3] = {2, 3, 4}, s2[2] = {3, 4}, s3[2] = {4, 3};
    const int64_t ax3[1] = {3}, axm4[1] = {-4}, dup[2] = {1, -2};
    const int64_t two[2] = {0, 1}, ax1[1] = {1};
    keel_tensor *x = ot_rand(KEEL_F32, 3, s, -1, 1);
    keel_tensor *xi = ot_rand(KEEL_I32, 3, s, -5, 5);
    keel_tensor *xb = ot_rand(KEEL_BOOL, 3, s, 0, 1);
    keel_tensor *a = ot_rand(KEEL_F32, 2, s2, -1, 1);
    keel_tensor *b = ot_rand(KEEL_F32, 2, s3, -1, 1), *o = NULL;
    double one = 1;
    keel_tensor *sc = ot_from(KEEL_F32, 0, NULL, &one);
    const char *mode = "mean";
    keel_attr bad_type = keel_attr_str("keepdim", mode);
    keel_attr bad_axis = keel_attr_float("axis", 1.0);
    keel_tensor *in2[2] = {a, b};
    int n = 0;

    /* Out-of-range and repeated axes, for every reduction. */
    for (int kind = 0; kind < K_COUNT; kind++) {
        EXPECT_ERR(run_red(kind, x, 1, ax3, false, -1, &o),
                   KEEL_STATUS_INVALID_ARGUMENT, rk_info[kind].name,
                   "out of range");
        EXPECT_ERR(run_red(kind, x, 1, axm4, true, -1, &o),
                   KEEL_STATUS_INVALID_ARGUMENT, rk_info[kind].name,
                   "out of range");
        EXPECT_ERR(run_red(kind, x, 2, dup, false, -1, &o),
                   KEEL_STATUS_INVALID_ARGUMENT, rk_info[kind].name,
                   "repeated");
        EXPECT_ERR(run_red(kind, sc, 1, ax1, false, -1, &o),
                   KEEL_STATUS_INVALID_ARGUMENT, rk_info[kind].name,
                   "0-d");
        CU_ASSERT_PTR_NULL(o);
    }
    /* Dtypes an op does not claim. */
    EXPECT_ERR(run_red(K_MEAN, xi, 0, NULL, false, -1, &o),
               KEEL_STATUS_NOT_SUPPORTED, "mean", "int32");
    EXPECT_ERR(run_red(K_VAR, xi, 0, NULL, false, 1, &o),
               KEEL_STATUS_NOT_SUPPORTED, "var", "not supported");
    EXPECT_ERR(run_red(K_LSE, xi, 0, NULL, false, -1, &o),
               KEEL_STATUS_NOT_SUPPORTED, "logsumexp", "not supported");
    EXPECT_ERR(run_red(K_MAX, xb, 0, NULL, false, -1, &o),
               KEEL_STATUS_NOT_SUPPORTED, "max", "bool");
    EXPECT_ERR(run_red(K_ARGMIN, xb, 0, NULL, false, -1, &o),
               KEEL_STATUS_NOT_SUPPORTED, "argmin", "bool");
    EXPECT_ERR(keel_cumsum(xb, 0, &o), KEEL_STATUS_NOT_SUPPORTED, "cumsum",
               "bool");
    EXPECT_ERR(keel_softmax(xi, -1, &o), KEEL_STATUS_NOT_SUPPORTED,
               "softmax", "int32");
    EXPECT_ERR(run_sm(S_LOG_GRAD, xi, xi, -1, &o), KEEL_STATUS_NOT_SUPPORTED,
               "log_softmax_grad", "not supported");
    /* Bad attribute values and types. */
    EXPECT_ERR(run_red(K_ARGMAX, x, 2, two, false, -1, &o),
               KEEL_STATUS_INVALID_ARGUMENT, "argmax", "one axis");
    EXPECT_ERR(keel_op_run(KEEL_OP_SUM, &x, 1, &bad_type, 1, &o, 1, &n),
               KEEL_STATUS_INVALID_ARGUMENT, "sum", "must be bool");
    EXPECT_ERR(keel_op_run(KEEL_OP_CUMSUM, &x, 1, &bad_axis, 1, &o, 1, &n),
               KEEL_STATUS_INVALID_ARGUMENT, "cumsum", "must be ints");
    {
        keel_attr ax = keel_attr_ints("axis", two, 2);
        EXPECT_ERR(keel_op_run(KEEL_OP_CUMSUM, &x, 1, &ax, 1, &o, 1, &n),
                   KEEL_STATUS_INVALID_ARGUMENT, "cumsum", "one axis");
    }
    EXPECT_ERR(keel_cumsum(x, 3, &o), KEEL_STATUS_INVALID_ARGUMENT, "cumsum",
               "out of range");
    EXPECT_ERR(keel_softmax(x, 3, &o), KEEL_STATUS_INVALID_ARGUMENT,
               "softmax", "out of range");
    EXPECT_ERR(keel_log_softmax(x, -4, &o), KEEL_STATUS_INVALID_ARGUMENT,
               "log_softmax", "out of range");
    EXPECT_ERR(run_sm(S_GRAD, a, a, 2, &o), KEEL_STATUS_INVALID_ARGUMENT,
               "softmax_grad", "out of range");
    /* Shape mismatches and input counts. */
    EXPECT_ERR(run_sm(S_GRAD, a, b, -1, &o), KEEL_STATUS_INVALID_ARGUMENT,
               "softmax_grad", "same shape");
    EXPECT_ERR(run_sm(S_LOG_GRAD, a, b, 0, &o), KEEL_STATUS_INVALID_ARGUMENT,
               "log_softmax_grad", "same shape");
    EXPECT_ERR(keel_op_run(KEEL_OP_SOFTMAX_GRAD, in2, 1, NULL, 0, &o, 1, &n),
               KEEL_STATUS_INVALID_ARGUMENT, "softmax_grad", "2 inputs");
    EXPECT_ERR(keel_op_run(KEEL_OP_SUM, in2, 2, NULL, 0, &o, 1, &n),
               KEEL_STATUS_INVALID_ARGUMENT, "sum", "at most 1");
    EXPECT_ERR(keel_op_run(KEEL_OP_SUM, NULL, 0, NULL, 0, &o, 1, &n),
               KEEL_STATUS_INVALID_ARGUMENT, "sum", "1 input");
    CU_ASSERT_PTR_NULL(o);
    keel_tensor_free(x);
    keel_tensor_free(xi);
    keel_tensor_free(xb);
    keel_tensor_free(a);
    keel_tensor_free(b);
    keel_tensor_free(sc);
}

int main(void)
{
    static const ot_test tests[] = {
        {"sum: dtypes x axes x keepdim x layouts", test_sum},
        {"mean", test_mean},
        {"max and min", test_max_min},
        {"prod", test_prod},
        {"argmax and argmin", test_argmax_argmin},
        {"var and std", test_var_std},
        {"logsumexp", test_logsumexp},
        {"all and any", test_all_any},
        {"0-d tensors and size-1 dims", test_scalars_and_size1},
        {"empty tensors", test_empty},
        {"NaN and infinities", test_nan_inf},
        {"argmax ties and flattening", test_argmax_ties_and_flatten},
        {"var/std unbiased", test_var_unbiased},
        {"broadcast (stride 0) inputs", test_broadcast_views},
        {"large inputs (threads)", test_large},
        {"wide columns", test_wide_columns},
        {"typed API", test_typed_api},
        {"cumsum", test_cumsum},
        {"cumsum: 0-d, empty, large", test_cumsum_edges},
        {"softmax and log_softmax", test_softmax},
        {"softmax_grad and log_softmax_grad", test_softmax_grads},
        {"softmax: stability, 0-d, empty, large", test_softmax_edges},
        {"errors", test_errors},
    };
    return ot_main("reduce", tests, sizeof(tests) / sizeof(tests[0]));
}
