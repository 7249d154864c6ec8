/*
 * Elementwise op tests: binary arithmetic, comparisons, logical ops,
 * where, and the unary math and activation ops, against float64
 * references computed here from host copies of the inputs.
 *
 * Every op runs on every dtype ops.def gives it, on shapes that exercise
 * each kernel path: same-shape contiguous, broadcast on both sides, a 0-d
 * scalar on either side, empty tensors, size-1 dimensions, transposed and
 * strided inputs, and tensors large enough for the thread pool. Hand-picked
 * values pin the Paddle semantics (integer division, floor division and
 * remainder signs, integer pow, NaN propagation, rounding, clip bounds),
 * and the error tests check the status and that the message names the op.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optest.h"

#define DT_FLOAT_MASK 0x0fu                            /* f32 f64 f16 bf16 */
#define DT_SIGNED_MASK (DT_FLOAT_MASK | 0x10u | 0xc0u) /* + i8 i32 i64 */
#define DT_NUMERIC_MASK 0xffu                          /* + u8 */
#define DT_ALL_MASK 0x1ffu                             /* + bool */

static bool is_int(keel_dtype dt)
{
    return dt == KEEL_I8 || dt == KEEL_U8 || dt == KEEL_I32 ||
           dt == KEEL_I64 || dt == KEEL_BOOL;
}

/* Integer results wrap to the dtype, as the kernels' arithmetic does. */
static double wrap(double v, keel_dtype dt)
{
    switch (dt) {
    case KEEL_I8:
        return (double)(int8_t)(uint8_t)(int64_t)v;
    case KEEL_U8:
        return (double)(uint8_t)(int64_t)v;
    case KEEL_I32:
        return (double)(int32_t)(uint32_t)(int64_t)v;
    case KEEL_BOOL:
        return v != 0;
    default:
        return v;
    }
}

static int64_t numel_of(int nd, const int64_t *shape)
{
    int64_t n = 1;

    for (int i = 0; i < nd; i++)
        n *= shape[i];
    return n;
}

/* Random tensor; unsigned dtypes get the range shifted to start at 0. */
static keel_tensor *rnd(keel_dtype dt, int nd, const int64_t *shape,
                        double lo, double hi)
{
    if (dt == KEEL_U8 && lo < 0) {
        hi -= lo;
        lo = 0;
    }
    if (dt == KEEL_BOOL) {
        lo = 0;
        hi = 2;
    }
    return ot_rand(dt, nd, shape, lo, hi);
}

/* Random values of magnitude in [lo, hi) with a random sign (divisors). */
static keel_tensor *rnd_away(keel_dtype dt, int nd, const int64_t *shape,
                             double lo, double hi)
{
    keel_tensor *u = ot_rand(KEEL_F64, nd, shape, -1, 1), *t;
    int64_t n = numel_of(nd, shape);
    double *v = ot_host(u);

    for (int64_t i = 0; i < n; i++) {
        double m = lo + fabs(v[i]) * (hi - lo);
        v[i] = v[i] < 0 ? -m : m;
    }
    t = ot_from(dt, nd, shape, v);
    free(v);
    keel_tensor_free(u);
    return t;
}

/* Random integer-valued elements in [lo, hi) (ties for comparisons,
 * zeros for logical ops) in any dtype; bool gets 0/1. */
static keel_tensor *rnd_intval(keel_dtype dt, int nd, const int64_t *shape,
                               double lo, double hi)
{
    keel_tensor *u, *t;
    int64_t n = numel_of(nd, shape);
    double *v;

    if (dt == KEEL_U8 && lo < 0) {
        hi -= lo;
        lo = 0;
    }
    if (dt == KEEL_BOOL) {
        lo = 0;
        hi = 2;
    }
    u = ot_rand(KEEL_F64, nd, shape, lo, hi);
    v = ot_host(u);
    for (int64_t i = 0; i < n; i++)
        v[i] = floor(v[i]);
    t = ot_from(dt, nd, shape, v);
    free(v);
    keel_tensor_free(u);
    return t;
}

/* Replace *t by a non-contiguous copy with the same values. */
static void relayout(keel_tensor **t, int layout)
{
    keel_tensor *n;

    if (layout == OT_CONTIG)
        return;
    n = ot_layout(*t, (enum ot_layout)layout);
    CU_ASSERT_PTR_NOT_NULL_FATAL(n);
    CU_ASSERT_FALSE(keel_tensor_is_contiguous(n) &&
                    keel_tensor_numel(n) > 1);
    keel_tensor_free(*t);
    *t = n;
}

/* Flat index into an input of shape[nd] for output element k
 * (numpy broadcasting, right-aligned). */
static int64_t bidx(int64_t k, int ond, const int64_t *oshape, int nd,
                    const int64_t *shape)
{
    int64_t idx = 0, stride = 1;

    for (int d = ond - 1; d >= 0; d--) {
        int64_t i = k % oshape[d];
        int j = d - (ond - nd);
        k /= oshape[d];
        if (j >= 0) {
            if (shape[j] != 1)
                idx += i * stride;
            stride *= shape[j];
        }
    }
    return idx;
}

static int bshape(int xnd, const int64_t *xs, int ynd, const int64_t *ys,
                  int64_t *out)
{
    int nd = xnd > ynd ? xnd : ynd;

    for (int d = 0; d < nd; d++) {
        int i = d - (nd - xnd), j = d - (nd - ynd);
        int64_t a = i >= 0 ? xs[i] : 1, b = j >= 0 ? ys[j] : 1;
        out[d] = a == 1 ? b : a;
    }
    return nd;
}

static char *what_buf(char *buf, size_t n, const char *op, keel_dtype dt,
                      const char *detail)
{
    snprintf(buf, n, "%s %s %s", op, keel_dtype_name(dt), detail);
    return buf;
}

/* ---- references ---------------------------------------------------------- */

static double r_add(double a, double b, bool i)
{
    (void)i;
    return a + b;
}

static double r_sub(double a, double b, bool i)
{
    (void)i;
    return a - b;
}

static double r_mul(double a, double b, bool i)
{
    (void)i;
    return a * b;
}

/* Integers divide as float32 (Paddle): the reference is the float32
 * quotient of the values. */
static double r_div(double a, double b, bool i)
{
    if (i)
        return (float)((float)a / (float)b);
    return a / b;
}

static double r_floordiv(double a, double b, bool i)
{
    if (i && b == 0)
        return 0;
    return floor(a / b);
}

static double r_rem(double a, double b, bool i)
{
    if (i && b == 0)
        return 0;
    return a - floor(a / b) * b;
}

static double ipow_ref(double a, double b)
{
    double r = 1;

    if (b < 0)
        return a == 1 ? 1 : a == -1 ? (fmod(b, 2) != 0 ? -1 : 1) : 0;
    for (int k = 0; k < (int)b; k++)
        r *= a;
    return r;
}

static double r_pow(double a, double b, bool i)
{
    return i ? ipow_ref(a, b) : pow(a, b);
}

static double r_max(double a, double b, bool i)
{
    (void)i;
    return isnan(a) || isnan(b) ? NAN : (a > b ? a : b);
}

static double r_min(double a, double b, bool i)
{
    (void)i;
    return isnan(a) || isnan(b) ? NAN : (a < b ? a : b);
}

static double r_eq(double a, double b, bool i)
{
    (void)i;
    return a == b;
}

static double r_ne(double a, double b, bool i)
{
    (void)i;
    return a != b;
}

static double r_lt(double a, double b, bool i)
{
    (void)i;
    return a < b;
}

static double r_le(double a, double b, bool i)
{
    (void)i;
    return a <= b;
}

static double r_gt(double a, double b, bool i)
{
    (void)i;
    return a > b;
}

static double r_ge(double a, double b, bool i)
{
    (void)i;
    return a >= b;
}

static double r_and(double a, double b, bool i)
{
    (void)i;
    return (a != 0) && (b != 0);
}

static double r_or(double a, double b, bool i)
{
    (void)i;
    return (a != 0) || (b != 0);
}

static double r_xor(double a, double b, bool i)
{
    (void)i;
    return (a != 0) != (b != 0);
}

/* ---- binary driver ------------------------------------------------------- */

typedef keel_status (*bin_api)(const keel_tensor *, const keel_tensor *,
                               keel_tensor **);
typedef double (*bin_ref)(double a, double b, bool integer);

struct bin_case {
    const char *name;
    bin_api fn;
    bin_ref ref;
    double xlo, xhi, ylo, yhi;
    bool y_away;  /* float divisors: |y| in [ylo, yhi), random sign */
    bool intval;  /* integer-valued inputs (comparisons, logical)   */
    bool bool_out;
};

struct geom {
    int xnd;
    int64_t xs[4];
    int ynd;
    int64_t ys[4];
    int xl, yl; /* layouts */
    const char *what;
};

static const struct geom bin_geoms[] = {
    {2, {3, 5}, 2, {3, 5}, OT_CONTIG, OT_CONTIG, "same shape"},
    {3, {4, 1, 3}, 2, {5, 1}, OT_CONTIG, OT_CONTIG, "broadcast both"},
    {2, {2, 3}, 0, {0}, OT_CONTIG, OT_CONTIG, "tensor op scalar"},
    {0, {0}, 1, {7}, OT_CONTIG, OT_CONTIG, "scalar op tensor"},
    {0, {0}, 0, {0}, OT_CONTIG, OT_CONTIG, "0-d"},
    {2, {0, 3}, 1, {3}, OT_CONTIG, OT_CONTIG, "empty"},
    {3, {1, 1, 1}, 2, {1, 1}, OT_CONTIG, OT_CONTIG, "size-1 dims"},
    {3, {2, 3, 4}, 3, {2, 3, 4}, OT_TRANSPOSED, OT_STRIDED, "non-contig"},
    {2, {4, 6}, 2, {1, 6}, OT_TRANSPOSED, OT_STRIDED, "strided bcast"},
    {2, {3, 4}, 2, {3, 1}, OT_TRANSPOSED, OT_CONTIG, "col bcast"},
    {1, {1300}, 1, {1300}, OT_STRIDED, OT_CONTIG, "long strided"},
    {1, {1300}, 0, {0}, OT_STRIDED, OT_CONTIG, "long strided, scalar"},
};
#define N_BIN_GEOMS (int)(sizeof(bin_geoms) / sizeof(bin_geoms[0]))

static keel_tensor *make_operand(const struct bin_case *c, keel_dtype dt,
                                 int nd, const int64_t *shape, bool is_y)
{
    double lo = is_y ? c->ylo : c->xlo, hi = is_y ? c->yhi : c->xhi;

    if (c->intval || dt == KEEL_BOOL)
        return rnd_intval(dt, nd, shape, lo, hi);
    if (is_y && c->y_away && !is_int(dt))
        return rnd_away(dt, nd, shape, lo, hi);
    if (is_y && c->y_away) /* integer divisors: zeros and both signs */
        return rnd(dt, nd, shape, -hi, hi);
    return rnd(dt, nd, shape, lo, hi);
}

/* Reference of a binary op on already-made operands; checks shape,
 * dtype and values. */
static void check_bin(const struct bin_case *c, keel_dtype dt,
                      keel_tensor *x, keel_tensor *y, const char *detail)
{
    int64_t oshape[8];
    int xnd = keel_tensor_ndim(x), ynd = keel_tensor_ndim(y);
    int ond = bshape(xnd, keel_tensor_shape(x), ynd, keel_tensor_shape(y),
                     oshape);
    int64_t n = numel_of(ond, oshape);
    keel_tensor *out = NULL;
    double *xv = ot_host(x), *yv = ot_host(y), *ref;
    keel_dtype odt = c->bool_out                            ? KEEL_BOOL
                     : c->fn == keel_divide && is_int(dt) ? KEEL_F32
                                                          : dt;
    char what[128];
    keel_status st;

    CU_ASSERT_PTR_NOT_NULL_FATAL(xv);
    CU_ASSERT_PTR_NOT_NULL_FATAL(yv);
    st = c->fn(x, y, &out);
    CU_ASSERT_EQUAL(st, KEEL_STATUS_OK);
    if (st != KEEL_STATUS_OK) {
        fprintf(stderr, "\n  %s %s: %s\n", c->name, keel_dtype_name(dt),
                keel_last_error());
        free(xv);
        free(yv);
        return;
    }
    what_buf(what, sizeof(what), c->name, dt, detail);
    ot_check_shape(what, out, ond, oshape);
    CU_ASSERT_EQUAL(keel_tensor_dtype(out), odt);
    ref = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t k = 0; k < n; k++) {
        double a = xv[bidx(k, ond, oshape, xnd, keel_tensor_shape(x))];
        double b = yv[bidx(k, ond, oshape, ynd, keel_tensor_shape(y))];
        ref[k] = c->bool_out || odt != dt ? c->ref(a, b, is_int(dt))
                                          : wrap(c->ref(a, b, is_int(dt)), dt);
    }
    ot_check(what, out, ref, odt);
    free(ref);
    free(xv);
    free(yv);
    keel_tensor_free(out);
}

static void run_bin_case(const struct bin_case *c, uint32_t mask)
{
    for (int d = 0; d < 9; d++) {
        keel_dtype dt = ot_all_dtypes[d];
        if (!(mask & (1u << dt)))
            continue;
        for (int g = 0; g < N_BIN_GEOMS; g++) {
            const struct geom *gm = &bin_geoms[g];
            keel_tensor *x = make_operand(c, dt, gm->xnd, gm->xs, false);
            keel_tensor *y = make_operand(c, dt, gm->ynd, gm->ys, true);
            CU_ASSERT_PTR_NOT_NULL_FATAL(x);
            CU_ASSERT_PTR_NOT_NULL_FATAL(y);
            relayout(&x, gm->xl);
            relayout(&y, gm->yl);
            check_bin(c, dt, x, y, gm->what);
            keel_tensor_free(x);
            keel_tensor_free(y);
        }
    }
}

static const struct bin_case arith_cases[] = {
    {"add", keel_add, r_add, -50, 50, -50, 50, false, false, false},
    {"subtract", keel_subtract, r_sub, -50, 50, -50, 50, false, false,
     false},
    {"multiply", keel_multiply, r_mul, -20, 20, -20, 20, false, false,
     false},
    {"divide", keel_divide, r_div, -50, 50, 0.5, 6, true, false, false},
    {"maximum", keel_maximum, r_max, -9, 9, -9, 9, false, false, false},
    {"minimum", keel_minimum, r_min, -9, 9, -9, 9, false, false, false},
    {"floor_divide", keel_floor_divide, r_floordiv, -50, 50, 0.5, 6, true,
     false, false},
    {"remainder", keel_remainder, r_rem, -50, 50, 0.5, 6, true, false,
     false},
};

static void test_binary_arithmetic(void)
{
    for (size_t i = 0; i < sizeof(arith_cases) / sizeof(arith_cases[0]);
         i++)
        run_bin_case(&arith_cases[i], DT_NUMERIC_MASK);
}

static void test_pow(void)
{
    /* Floats: positive bases, any exponent. Integers: small bases and
     * exponents from -2 (integer power, wrapping on overflow). */
    static const struct bin_case fcase = {"pow", keel_pow, r_pow, 0.5, 2.5,
                                          -2, 2, false, false, false};
    static const struct bin_case icase = {"pow", keel_pow, r_pow, -5, 6,
                                          -2, 6, false, true, false};

    run_bin_case(&fcase, DT_FLOAT_MASK);
    run_bin_case(&icase, DT_NUMERIC_MASK & ~DT_FLOAT_MASK);
}

static const struct bin_case cmp_cases[] = {
    {"equal", keel_equal, r_eq, -3, 3, -3, 3, false, true, true},
    {"not_equal", keel_not_equal, r_ne, -3, 3, -3, 3, false, true, true},
    {"less", keel_less, r_lt, -3, 3, -3, 3, false, true, true},
    {"less_equal", keel_less_equal, r_le, -3, 3, -3, 3, false, true, true},
    {"greater", keel_greater, r_gt, -3, 3, -3, 3, false, true, true},
    {"greater_equal", keel_greater_equal, r_ge, -3, 3, -3, 3, false, true,
     true},
    {"logical_and", keel_logical_and, r_and, -2, 2, -2, 2, false, true,
     true},
    {"logical_or", keel_logical_or, r_or, -2, 2, -2, 2, false, true, true},
    {"logical_xor", keel_logical_xor, r_xor, -2, 2, -2, 2, false, true,
     true},
};

static void test_compare_and_logical(void)
{
    for (size_t i = 0; i < sizeof(cmp_cases) / sizeof(cmp_cases[0]); i++)
        run_bin_case(&cmp_cases[i], DT_ALL_MASK);
}

/* ---- unary driver -------------------------------------------------------- */

typedef keel_status (*un_call)(const keel_tensor *x, const double *p,
                               keel_tensor **out);
typedef double (*un_ref)(double a, const double *p, keel_dtype dt);

struct un_case {
    const char *name;
    un_call call;
    un_ref ref;
    double lo, hi;
    uint32_t mask;
    double p[2];
    bool bool_out; /* logical_not */
};

#define CALL_PLAIN(op)                                                       \
    static keel_status call_##op(const keel_tensor *x, const double *p,     \
                                 keel_tensor **out)                          \
    {                                                                        \
        (void)p;                                                             \
        return keel_##op(x, out);                                            \
    }
CALL_PLAIN(neg)
CALL_PLAIN(abs)
CALL_PLAIN(sign)
CALL_PLAIN(exp)
CALL_PLAIN(log)
CALL_PLAIN(log1p)
CALL_PLAIN(sqrt)
CALL_PLAIN(rsqrt)
CALL_PLAIN(square)
CALL_PLAIN(sin)
CALL_PLAIN(cos)
CALL_PLAIN(floor)
CALL_PLAIN(ceil)
CALL_PLAIN(round)
CALL_PLAIN(relu)
CALL_PLAIN(relu6)
CALL_PLAIN(silu)
CALL_PLAIN(sigmoid)
CALL_PLAIN(tanh)
CALL_PLAIN(hardswish)
CALL_PLAIN(logical_not)

static keel_status call_leaky_relu(const keel_tensor *x, const double *p,
                                   keel_tensor **out)
{
    return keel_leaky_relu(x, p[0], out);
}

static keel_status call_elu(const keel_tensor *x, const double *p,
                            keel_tensor **out)
{
    return keel_elu(x, p[0], out);
}

static keel_status call_gelu(const keel_tensor *x, const double *p,
                             keel_tensor **out)
{
    return keel_gelu(x, p[0] != 0, out);
}

static keel_status call_softplus(const keel_tensor *x, const double *p,
                                 keel_tensor **out)
{
    return keel_softplus(x, p[0], p[1], out);
}

static keel_status call_clip(const keel_tensor *x, const double *p,
                             keel_tensor **out)
{
    return keel_clip(x, p[0], p[1], out);
}

static double u_neg(double a, const double *p, keel_dtype dt)
{
    (void)p;
    (void)dt;
    return -a;
}

static double u_abs(double a, const double *p, keel_dtype dt)
{
    (void)p;
    (void)dt;
    return fabs(a);
}

static double u_sign(double a, const double *p, keel_dtype dt)
{
    (void)p;
    (void)dt;
    return isnan(a) ? a : (a > 0) - (a < 0);
}

#define UREF(name, expr)                                                     \
    static double u_##name(double a, const double *p, keel_dtype dt)        \
    {                                                                        \
        (void)p;                                                             \
        (void)dt;                                                            \
        return (expr);                                                       \
    }
UREF(exp, exp(a))
UREF(log, log(a))
UREF(log1p, log1p(a))
UREF(sqrt, sqrt(a))
UREF(rsqrt, 1 / sqrt(a))
UREF(square, a * a)
UREF(sin, sin(a))
UREF(cos, cos(a))
UREF(floor, floor(a))
UREF(ceil, ceil(a))
UREF(round, round(a))
UREF(relu, isnan(a) ? a : a < 0 ? 0 : a)
UREF(relu6, isnan(a) ? a : a < 0 ? 0 : a > 6 ? 6 : a)
UREF(leaky_relu, a > 0 ? a : p[0] * a)
UREF(elu, a > 0 ? a : p[0] * (exp(a) - 1))
UREF(gelu, p[0] != 0 ? 0.5 * a *
                            (1 + tanh(sqrt(2 / M_PI) *
                                      (a + 0.044715 * a * a * a)))
                      : 0.5 * a * (1 + erf(a / sqrt(2.0))))
UREF(silu, a / (1 + exp(-a)))
UREF(sigmoid, 1 / (1 + exp(-a)))
UREF(tanh, tanh(a))
UREF(softplus, p[0] * a > p[1] ? a : log(1 + exp(p[0] * a)) / p[0])
UREF(hardswish, a * fmin(fmax(a + 3, 0), 6) / 6)
UREF(logical_not, a == 0)

/* Integer clip bounds: truncated toward zero and saturated to the dtype,
 * as Paddle converts its float bounds. */
static double int_bound(double v, keel_dtype dt)
{
    double lo = dt == KEEL_I8    ? -128
                : dt == KEEL_U8  ? 0
                : dt == KEEL_I32 ? -2147483648.0
                                 : -9223372036854775808.0;
    double hi = dt == KEEL_I8    ? 127
                : dt == KEEL_U8  ? 255
                : dt == KEEL_I32 ? 2147483647.0
                                 : 9223372036854775807.0;

    v = trunc(v);
    return v < lo ? lo : v > hi ? hi : v;
}

static double u_clip(double a, const double *p, keel_dtype dt)
{
    double lo = p[0], hi = p[1];

    if (is_int(dt)) {
        lo = int_bound(lo, dt);
        hi = int_bound(hi, dt);
    } else {
        /* the kernels compare in the dtype's compute type */
        lo = dt == KEEL_F64 ? lo : (float)lo;
        hi = dt == KEEL_F64 ? hi : (float)hi;
    }
    return isnan(a) ? a : a < lo ? lo : a > hi ? hi : a;
}

static const struct un_case un_cases[] = {
    {"neg", call_neg, u_neg, -50, 50, DT_SIGNED_MASK, {0, 0}, false},
    {"abs", call_abs, u_abs, -50, 50, DT_SIGNED_MASK, {0, 0}, false},
    {"sign", call_sign, u_sign, -3, 3, DT_SIGNED_MASK, {0, 0}, false},
    {"relu", call_relu, u_relu, -50, 50, DT_SIGNED_MASK, {0, 0}, false},
    {"square", call_square, u_square, -20, 20, DT_NUMERIC_MASK, {0, 0},
     false},
    {"exp", call_exp, u_exp, -5, 5, DT_FLOAT_MASK, {0, 0}, false},
    {"log", call_log, u_log, 0.05, 20, DT_FLOAT_MASK, {0, 0}, false},
    {"log1p", call_log1p, u_log1p, -0.9, 5, DT_FLOAT_MASK, {0, 0}, false},
    {"sqrt", call_sqrt, u_sqrt, 0, 50, DT_FLOAT_MASK, {0, 0}, false},
    {"rsqrt", call_rsqrt, u_rsqrt, 0.05, 50, DT_FLOAT_MASK, {0, 0}, false},
    {"sin", call_sin, u_sin, -6, 6, DT_FLOAT_MASK, {0, 0}, false},
    {"cos", call_cos, u_cos, -6, 6, DT_FLOAT_MASK, {0, 0}, false},
    {"floor", call_floor, u_floor, -6, 6, DT_FLOAT_MASK, {0, 0}, false},
    {"ceil", call_ceil, u_ceil, -6, 6, DT_FLOAT_MASK, {0, 0}, false},
    {"round", call_round, u_round, -6, 6, DT_FLOAT_MASK, {0, 0}, false},
    {"relu6", call_relu6, u_relu6, -9, 9, DT_FLOAT_MASK, {0, 0}, false},
    {"leaky_relu", call_leaky_relu, u_leaky_relu, -6, 6, DT_FLOAT_MASK,
     {0.2, 0}, false},
    {"elu", call_elu, u_elu, -6, 6, DT_FLOAT_MASK, {0.7, 0}, false},
    {"gelu", call_gelu, u_gelu, -6, 6, DT_FLOAT_MASK, {0, 0}, false},
    {"gelu(tanh)", call_gelu, u_gelu, -6, 6, DT_FLOAT_MASK, {1, 0}, false},
    {"silu", call_silu, u_silu, -8, 8, DT_FLOAT_MASK, {0, 0}, false},
    {"sigmoid", call_sigmoid, u_sigmoid, -8, 8, DT_FLOAT_MASK, {0, 0},
     false},
    {"tanh", call_tanh, u_tanh, -4, 4, DT_FLOAT_MASK, {0, 0}, false},
    {"softplus", call_softplus, u_softplus, -8, 8, DT_FLOAT_MASK, {1, 20},
     false},
    {"softplus(beta 2, threshold 3)", call_softplus, u_softplus, -4, 4,
     DT_FLOAT_MASK, {2, 3}, false},
    {"hardswish", call_hardswish, u_hardswish, -5, 5, DT_FLOAT_MASK, {0, 0},
     false},
    {"clip", call_clip, u_clip, -6, 6, DT_NUMERIC_MASK, {-2.5, 3.7}, false},
    {"logical_not", call_logical_not, u_logical_not, -2, 2, DT_ALL_MASK,
     {0, 0}, true},
};

struct ugeom {
    int nd;
    int64_t shape[4];
    int layout;
    const char *what;
};

static const struct ugeom un_geoms[] = {
    {3, {2, 3, 4}, OT_CONTIG, "contiguous"},
    {0, {0}, OT_CONTIG, "0-d"},
    {2, {0, 4}, OT_CONTIG, "empty"},
    {3, {1, 1, 5}, OT_CONTIG, "size-1 dims"},
    {2, {3, 4}, OT_TRANSPOSED, "transposed"},
    {2, {2, 5}, OT_STRIDED, "strided"},
    {1, {1300}, OT_STRIDED, "long strided"},
    {1, {1300}, OT_CONTIG, "long"},
};

static void check_un(const struct un_case *c, keel_dtype dt, keel_tensor *x,
                     const char *detail)
{
    int nd = keel_tensor_ndim(x);
    int64_t n = keel_tensor_numel(x);
    keel_dtype odt = c->bool_out ? KEEL_BOOL : dt;
    keel_tensor *out = NULL;
    double *xv = ot_host(x), *ref;
    char what[128];
    keel_status st;

    CU_ASSERT_PTR_NOT_NULL_FATAL(xv);
    st = c->call(x, c->p, &out);
    CU_ASSERT_EQUAL(st, KEEL_STATUS_OK);
    if (st != KEEL_STATUS_OK) {
        fprintf(stderr, "\n  %s %s: %s\n", c->name, keel_dtype_name(dt),
                keel_last_error());
        free(xv);
        return;
    }
    what_buf(what, sizeof(what), c->name, dt, detail);
    ot_check_shape(what, out, nd, keel_tensor_shape(x));
    CU_ASSERT_EQUAL(keel_tensor_dtype(out), odt);
    ref = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t k = 0; k < n; k++) {
        double r = c->ref(xv[k], c->p, dt);
        ref[k] = c->bool_out ? r : wrap(r, dt);
    }
    ot_check(what, out, ref, odt);
    free(ref);
    free(xv);
    keel_tensor_free(out);
}

static void run_un_case(const struct un_case *c)
{
    for (int d = 0; d < 9; d++) {
        keel_dtype dt = ot_all_dtypes[d];
        if (!(c->mask & (1u << dt)))
            continue;
        for (size_t g = 0; g < sizeof(un_geoms) / sizeof(un_geoms[0]);
             g++) {
            const struct ugeom *gm = &un_geoms[g];
            keel_tensor *x = c->bool_out
                                 ? rnd_intval(dt, gm->nd, gm->shape, c->lo,
                                              c->hi)
                                 : rnd(dt, gm->nd, gm->shape, c->lo, c->hi);
            CU_ASSERT_PTR_NOT_NULL_FATAL(x);
            relayout(&x, gm->layout);
            check_un(c, dt, x, gm->what);
            keel_tensor_free(x);
        }
    }
}

static void test_unary_ops(void)
{
    for (size_t i = 0; i < sizeof(un_cases) / sizeof(un_cases[0]); i++)
        run_un_case(&un_cases[i]);
}

/* ---- where --------------------------------------------------------------- */

static void check_where(keel_dtype dt, keel_tensor *c, keel_tensor *x,
                        keel_tensor *y, const char *detail)
{
    int64_t s1[8], os[8];
    int cnd = keel_tensor_ndim(c), xnd = keel_tensor_ndim(x),
        ynd = keel_tensor_ndim(y);
    int n1 = bshape(cnd, keel_tensor_shape(c), xnd, keel_tensor_shape(x), s1);
    int ond = bshape(n1, s1, ynd, keel_tensor_shape(y), os);
    int64_t n = numel_of(ond, os);
    double *cv = ot_host(c), *xv = ot_host(x), *yv = ot_host(y), *ref;
    keel_tensor *out = NULL;
    char what[128];

    CU_ASSERT_EQUAL_FATAL(keel_where(c, x, y, &out), KEEL_STATUS_OK);
    what_buf(what, sizeof(what), "where", dt, detail);
    ot_check_shape(what, out, ond, os);
    CU_ASSERT_EQUAL(keel_tensor_dtype(out), dt);
    ref = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t k = 0; k < n; k++)
        ref[k] = cv[bidx(k, ond, os, cnd, keel_tensor_shape(c))] != 0
                     ? xv[bidx(k, ond, os, xnd, keel_tensor_shape(x))]
                     : yv[bidx(k, ond, os, ynd, keel_tensor_shape(y))];
    ot_check(what, out, ref, dt);
    free(ref);
    free(cv);
    free(xv);
    free(yv);
    keel_tensor_free(out);
}

static void test_where(void)
{
    static const struct {
        int nd[3];
        int64_t s[3][3];
        int l[3];
        const char *what;
    } g[] = {
        {{2, 2, 2}, {{3, 4}, {3, 4}, {3, 4}}, {0, 0, 0}, "same shape"},
        {{2, 2, 0}, {{3, 1}, {1, 4}, {0}}, {0, 0, 0}, "broadcast, 0-d y"},
        {{2, 2, 0},
         {{3, 37}, {3, 37}, {0}},
         {0, 0, 0},
         "contiguous cond and x, 0-d y (relu's gradient)"},
        {{0, 1, 1}, {{0}, {5}, {5}}, {0, 0, 0}, "0-d cond"},
        {{2, 1, 1}, {{0, 2}, {2}, {2}}, {0, 0, 0}, "empty"},
        {{3, 3, 3},
         {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}},
         {OT_TRANSPOSED, OT_STRIDED, OT_TRANSPOSED},
         "non-contiguous"},
        {{1, 1, 1},
         {{1300}, {1300}, {1300}},
         {OT_STRIDED, OT_CONTIG, OT_STRIDED},
         "long strided"},
    };

    for (int d = 0; d < 9; d++) {
        keel_dtype dt = ot_all_dtypes[d];
        for (size_t i = 0; i < sizeof(g) / sizeof(g[0]); i++) {
            keel_tensor *c = rnd(KEEL_BOOL, g[i].nd[0], g[i].s[0], 0, 1);
            keel_tensor *x = rnd_intval(dt, g[i].nd[1], g[i].s[1], -50, 50);
            keel_tensor *y = rnd(dt, g[i].nd[2], g[i].s[2], -50, 50);
            relayout(&c, g[i].l[0]);
            relayout(&x, g[i].l[1]);
            relayout(&y, g[i].l[2]);
            check_where(dt, c, x, y, g[i].what);
            keel_tensor_free(c);
            keel_tensor_free(x);
            keel_tensor_free(y);
        }
    }
}

/* ---- large tensors: the thread pool paths -------------------------------- */

static const struct un_case *un_case_named(const char *name)
{
    for (size_t i = 0; i < sizeof(un_cases) / sizeof(un_cases[0]); i++)
        if (!strcmp(un_cases[i].name, name))
            return &un_cases[i];
    return NULL;
}

static void large_bin(const struct bin_case *c, keel_dtype dt, int xnd,
                      const int64_t *xs, int xl, int ynd, const int64_t *ys,
                      int yl, const char *what)
{
    keel_tensor *x = make_operand(c, dt, xnd, xs, false);
    keel_tensor *y = make_operand(c, dt, ynd, ys, true);

    relayout(&x, xl);
    relayout(&y, yl);
    check_bin(c, dt, x, y, what);
    keel_tensor_free(x);
    keel_tensor_free(y);
}

static void large_un(const char *name, keel_dtype dt, int nd,
                     const int64_t *shape, int layout)
{
    const struct un_case *c = un_case_named(name);
    keel_tensor *x;

    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    x = rnd(dt, nd, shape, c->lo, c->hi);
    relayout(&x, layout);
    check_un(c, dt, x, "large");
    keel_tensor_free(x);
}

static void test_large_tensors(void)
{
    static const int64_t m[2] = {300, 250}, row[1] = {250}, col[2] = {300, 1},
                         sq[2] = {260, 260}, flat[1] = {70001};

    /* flat, split over the pool */
    large_bin(&arith_cases[0], KEEL_F32, 2, m, 0, 2, m, 0, "large");
    /* rows through kiter, row broadcast */
    large_bin(&arith_cases[0], KEEL_F32, 2, m, 0, 1, row, 0, "large rows");
    /* rows with a column broadcast (vector-scalar rows) */
    large_bin(&arith_cases[2], KEEL_I32, 2, m, 0, 2, col, 0, "large cols");
    /* gathered blocks from transposed and strided operands */
    large_bin(&arith_cases[2], KEEL_F64, 2, sq, OT_TRANSPOSED, 2, sq,
              OT_STRIDED, "large non-contig");
    /* float16 through float32 blocks, scalar broadcast */
    large_bin(&arith_cases[3], KEEL_F16, 1, flat, 0, 0, NULL, 0,
              "large scalar");
    large_bin(&cmp_cases[2], KEEL_BF16, 1, flat, 0, 1, flat, OT_STRIDED,
              "large");
    large_bin(&arith_cases[7], KEEL_I64, 1, flat, 0, 1, flat, 0, "large");
    large_un("exp", KEEL_F32, 1, flat, OT_CONTIG);
    large_un("sigmoid", KEEL_BF16, 2, m, OT_TRANSPOSED);
    large_un("clip", KEEL_I64, 1, flat, OT_CONTIG);
    large_un("logical_not", KEEL_F64, 1, flat, OT_STRIDED);
    {
        keel_tensor *c = rnd(KEEL_BOOL, 2, col, 0, 1);
        keel_tensor *x = rnd(KEEL_F32, 2, m, -5, 5);
        keel_tensor *y = rnd(KEEL_F32, 0, NULL, -5, 5);
        check_where(KEEL_F32, c, x, y, "large");
        keel_tensor_free(c);
        keel_tensor_free(x);
        keel_tensor_free(y);
    }
}

/* ---- hand-picked semantics ----------------------------------------------- */

static keel_tensor *vec(keel_dtype dt, int n, const double *v)
{
    int64_t shape[1] = {n};
    keel_tensor *t = ot_from(dt, 1, shape, v);

    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    return t;
}

/* out = fn(x, y) must equal want[] exactly (or within dt's tolerance). */
static void expect_bin(const char *what, bin_api fn, keel_dtype dt, int n,
                       const double *x, const double *y, const double *want)
{
    keel_tensor *a = vec(dt, n, x), *b = vec(dt, n, y), *out = NULL;
    char buf[96];

    CU_ASSERT_EQUAL_FATAL(fn(a, b, &out), KEEL_STATUS_OK);
    ot_check(what_buf(buf, sizeof(buf), what, dt, "values"), out, want,
             keel_tensor_dtype(out));
    keel_tensor_free(a);
    keel_tensor_free(b);
    keel_tensor_free(out);
}

/* Integer divide: a float32 result holding the true quotient. */
static void expect_div_f32(keel_dtype dt, int n, const double *x,
                           const double *y, const double *want)
{
    keel_tensor *a = vec(dt, n, x), *b = vec(dt, n, y), *out = NULL;
    char buf[96];

    CU_ASSERT_EQUAL_FATAL(keel_divide(a, b, &out), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_dtype(out), KEEL_F32);
    ot_check(what_buf(buf, sizeof(buf), "divide", dt, "values"), out, want,
             KEEL_F32);
    keel_tensor_free(a);
    keel_tensor_free(b);
    keel_tensor_free(out);
}

static void expect_un(const char *what, un_call fn, const double *p,
                      keel_dtype dt, int n, const double *x,
                      const double *want)
{
    keel_tensor *a = vec(dt, n, x), *out = NULL;
    char buf[96];

    CU_ASSERT_EQUAL_FATAL(fn(a, p, &out), KEEL_STATUS_OK);
    ot_check(what_buf(buf, sizeof(buf), what, dt, "values"), out, want,
             keel_tensor_dtype(out));
    keel_tensor_free(a);
    keel_tensor_free(out);
}

static void test_integer_division(void)
{
    static const keel_dtype dts[3] = {KEEL_I8, KEEL_I32, KEEL_I64};
    static const double mins[3] = {-128, -2147483648.0,
                                   -9223372036854775808.0};

    for (int i = 0; i < 3; i++) {
        double m = mins[i];
        double x[10] = {7, -7, 7, -7, 5, 0, m, m, -7, 6};
        double y[10] = {2, 2, -2, -2, 0, 0, -1, 1, 7, -3};
        /* divide: true division in float32 (Paddle) */
        double div[10] = {3.5, -3.5, -3.5, 3.5, INFINITY, NAN,
                          (float)-m, (float)m, -1, -2};
        double fdiv[10] = {3, -4, -4, 3, 0, 0, m, m, -1, -2};
        /* sign of the divisor; x % 0 = 0 */
        double rem[10] = {1, 1, -1, -1, 0, 0, 0, 0, 0, 0};
        expect_div_f32(dts[i], 10, x, y, div);
        expect_bin("floor_divide", keel_floor_divide, dts[i], 10, x, y,
                   fdiv);
        expect_bin("remainder", keel_remainder, dts[i], 10, x, y, rem);
    }
    {
        double x[5] = {7, 200, 200, 5, 0}, y[5] = {2, 7, 0, 9, 0};
        double fdiv[5] = {3, 28, 0, 0, 0}, rem[5] = {1, 4, 0, 5, 0};
        double div[5] = {3.5, (float)(200.0f / 7.0f), INFINITY,
                         (float)(5.0f / 9.0f), NAN};
        expect_div_f32(KEEL_U8, 5, x, y, div);
        expect_bin("floor_divide", keel_floor_divide, KEEL_U8, 5, x, y, fdiv);
        expect_bin("remainder", keel_remainder, KEEL_U8, 5, x, y, rem);
    }
}

static void test_float_division(void)
{
    double x[10] = {7, -7, 7, -7, 5.5, -5.5, 1, -1, 0, 6};
    double y[10] = {2, 2, -2, -2, 2, 2, 0, 0, 0, 3};
    double div[10] = {3.5,  -3.5,     -3.5,      3.5, 2.75,
                      -2.75, INFINITY, -INFINITY, NAN, 2};
    double fdiv[10] = {3, -4, -4, 3, 2, -3, INFINITY, -INFINITY, NAN, 2};
    double rem[10] = {1, 1, -1, -1, 1.5, 0.5, NAN, NAN, NAN, 0};

    for (int i = 0; i < 4; i++) {
        keel_dtype dt = ot_float_dtypes[i];
        expect_bin("divide", keel_divide, dt, 10, x, y, div);
        expect_bin("floor_divide", keel_floor_divide, dt, 10, x, y, fdiv);
        expect_bin("remainder", keel_remainder, dt, 10, x, y, rem);
    }
}

static void test_pow_semantics(void)
{
    double x[10] = {2, -2, 2, 1, -1, -1, 0, 0, 3, 7};
    double y[10] = {10, 3, -1, -5, -3, -4, 0, -1, 0, 2};
    double want[10] = {1024, -8, 0, 1, -1, 1, 1, 0, 1, 49};
    static const keel_dtype ints[3] = {KEEL_I8, KEEL_I32, KEEL_I64};

    /* Integer power, wrapping: 2^10 is 0 in int8. */
    for (int i = 0; i < 3; i++) {
        double w[10];
        for (int k = 0; k < 10; k++)
            w[k] = wrap(want[k], ints[i]);
        expect_bin("pow", keel_pow, ints[i], 10, x, y, w);
    }
    {
        double ux[4] = {2, 3, 0, 255}, uy[4] = {7, 5, 0, 2};
        double uw[4] = {128, 243, 1, 1}; /* 255^2 = 65025 = 1 mod 256 */
        expect_bin("pow", keel_pow, KEEL_U8, 4, ux, uy, uw);
    }
    {
        /* Exact beyond 2^53: read int64 back without going through
         * float64; and int32 wrap-around (3^21 mod 2^32). */
        double bx[2] = {3, -3}, by[2] = {39, 21};
        keel_tensor *a = vec(KEEL_I64, 2, bx), *b = vec(KEEL_I64, 2, by),
                    *o = NULL, *a32 = vec(KEEL_I32, 2, bx),
                    *b32 = vec(KEEL_I32, 2, by);
        int64_t got[2];
        int32_t got32[2];
        uint32_t w32 = 1;
        CU_ASSERT_EQUAL_FATAL(keel_pow(a, b, &o), KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(keel_tensor_to_host(o, got, sizeof(got)),
                        KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(got[0], INT64_C(4052555153018976267));
        CU_ASSERT_EQUAL(got[1], INT64_C(-10460353203));
        keel_tensor_free(o);
        CU_ASSERT_EQUAL_FATAL(keel_pow(a32, b32, &o), KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(keel_tensor_to_host(o, got32, sizeof(got32)),
                        KEEL_STATUS_OK);
        for (int k = 0; k < 39; k++)
            w32 *= 3u;
        CU_ASSERT_EQUAL(got32[0], (int32_t)w32);
        w32 = 1;
        for (int k = 0; k < 21; k++)
            w32 *= (uint32_t)-3;
        CU_ASSERT_EQUAL(got32[1], (int32_t)w32);
        keel_tensor_free(o);
        keel_tensor_free(a);
        keel_tensor_free(b);
        keel_tensor_free(a32);
        keel_tensor_free(b32);
    }
    {
        double fx[6] = {2, -2, -8, 0, 4, 2};
        double fy[6] = {0.5, 3, 1.0 / 3, -1, -0.5, 10};
        double fw[6] = {M_SQRT2, -8, NAN, INFINITY, 0.5, 1024};
        for (int i = 0; i < 4; i++)
            expect_bin("pow", keel_pow, ot_float_dtypes[i], 6, fx, fy, fw);
    }
}

static void test_nan_and_sign(void)
{
    static const double p0[2] = {0, 0};

    for (int i = 0; i < 4; i++) {
        keel_dtype dt = ot_float_dtypes[i];
        double x[4] = {NAN, 1, -1, 2}, y[4] = {1, NAN, -2, 2};
        double mx[4] = {NAN, NAN, -1, 2}, mn[4] = {NAN, NAN, -2, 2};
        double r[4] = {NAN, -1, 0, 2}, rw[4] = {NAN, 0, 0, 2};
        double r6[4] = {NAN, -1, 7, 3}, r6w[4] = {NAN, 0, 6, 3};
        double s[6] = {NAN, 0, -0.0, -3, 0.25, INFINITY};
        double sw[6] = {NAN, 0, 0, -1, 1, 1};
        double cl[2] = {-1, 1}, cx[3] = {NAN, -5, 5}, cw[3] = {NAN, -1, 1};
        double ab[3] = {-0.0, -INFINITY, -2.5}, abw[3] = {0, INFINITY, 2.5};
        expect_bin("maximum", keel_maximum, dt, 4, x, y, mx);
        expect_bin("minimum", keel_minimum, dt, 4, x, y, mn);
        expect_un("relu", call_relu, p0, dt, 4, r, rw);
        expect_un("relu6", call_relu6, p0, dt, 4, r6, r6w);
        expect_un("sign", call_sign, p0, dt, 6, s, sw);
        expect_un("clip", call_clip, cl, dt, 3, cx, cw);
        expect_un("abs", call_abs, p0, dt, 3, ab, abw);
    }
    {
        /* Integer sign, abs and neg; |INT_MIN| and -INT_MIN wrap. */
        double x[4] = {-128, 0, 5, -7};
        double sw[4] = {-1, 0, 1, -1}, aw[4] = {-128, 0, 5, 7},
               nw[4] = {-128, 0, -5, 7};
        expect_un("sign", call_sign, p0, KEEL_I8, 4, x, sw);
        expect_un("abs", call_abs, p0, KEEL_I8, 4, x, aw);
        expect_un("neg", call_neg, p0, KEEL_I8, 4, x, nw);
    }
    {
        double m = -9223372036854775808.0;
        double x[3] = {m, -3, 4}, aw[3] = {m, 3, 4}, nw[3] = {m, 3, -4};
        expect_un("abs", call_abs, p0, KEEL_I64, 3, x, aw);
        expect_un("neg", call_neg, p0, KEEL_I64, 3, x, nw);
    }
}

static void test_rounding(void)
{
    static const double p0[2] = {0, 0};
    double f[20] = {0.5,         1.5,         2.5,      -0.5,     -1.5,
                    -2.5,        0.49999997,  -0.49999997, 8388609, -8388609,
                    1e30,        -1e30,       INFINITY, -INFINITY, NAN,
                    -0.3,        0.3,         2.7,      -2.7,     -0.0};
    double d[8] = {4503599627370495.5, -4503599627370495.5,
                   2251799813685248.5, -2251799813685248.5,
                   0.49999999999999994, 1e300, -7.5, 7.5};
    double h[8] = {0.5, 1.5, 2.5, -2.5, -0.3, 1000.5, 65504, -INFINITY};

    for (int i = 0; i < 4; i++) {
        keel_dtype dt = ot_float_dtypes[i];
        const double *v = dt == KEEL_F64 ? d : dt == KEEL_F32 ? f : h;
        int n = dt == KEEL_F32 ? 20 : 8;
        keel_tensor *x = vec(dt, n, v);
        double *xv = ot_host(x), rw[20], fw[20], cw[20];
        /* references from the values the tensor holds */
        for (int k = 0; k < n; k++) {
            rw[k] = round(xv[k]);
            fw[k] = floor(xv[k]);
            cw[k] = ceil(xv[k]);
        }
        expect_un("round", call_round, p0, dt, n, xv, rw);
        expect_un("floor", call_floor, p0, dt, n, xv, fw);
        expect_un("ceil", call_ceil, p0, dt, n, xv, cw);
        free(xv);
        keel_tensor_free(x);
    }
    {
        /* half away from zero, spelled out */
        double x[6] = {0.5, 1.5, 2.5, -0.5, -1.5, -2.5};
        double w[6] = {1, 2, 3, -1, -2, -3};
        expect_un("round", call_round, p0, KEEL_F32, 6, x, w);
    }
}

static void test_logical_values(void)
{
    double x[6] = {0, -0.0, NAN, 1e-3, -2, INFINITY};
    double y[6] = {1, 1, 1, 0, -0.0, 1};
    double andw[6] = {0, 0, 1, 0, 0, 1}, orw[6] = {1, 1, 1, 1, 1, 1},
           xorw[6] = {1, 1, 0, 1, 1, 0}, notw[6] = {1, 1, 0, 0, 0, 0};
    double eq[6] = {0, 0, 0, 0, 0, 0}, ne[6] = {1, 1, 1, 1, 1, 1};
    double z0[2] = {-0.0, NAN}, z1[2] = {0, NAN};
    double eqz[2] = {1, 0}, nez[2] = {0, 1}, lez[2] = {1, 0};
    static const double p0[2] = {0, 0};

    for (int i = 0; i < 4; i++) {
        keel_dtype dt = ot_float_dtypes[i];
        expect_bin("logical_and", keel_logical_and, dt, 6, x, y, andw);
        expect_bin("logical_or", keel_logical_or, dt, 6, x, y, orw);
        expect_bin("logical_xor", keel_logical_xor, dt, 6, x, y, xorw);
        expect_un("logical_not", call_logical_not, p0, dt, 6, x, notw);
        expect_bin("equal", keel_equal, dt, 6, x, y, eq);
        expect_bin("not_equal", keel_not_equal, dt, 6, x, y, ne);
        /* -0 == 0; NaN compares false except != */
        expect_bin("equal", keel_equal, dt, 2, z0, z1, eqz);
        expect_bin("not_equal", keel_not_equal, dt, 2, z0, z1, nez);
        expect_bin("less_equal", keel_less_equal, dt, 2, z0, z1, lez);
    }
}

/* float32 exp, tanh and sigmoid are computed by the kernels' own
 * vectorisable polynomials: hold them to a few ulp over their whole range
 * (tighter than the float32 tolerance), and check the special values. */
static double max_rel_err(keel_tensor *x, keel_tensor *y,
                          double (*ref)(double), double floor_abs)
{
    int64_t n = keel_tensor_numel(x);
    double *xv = ot_host(x), *yv = ot_host(y), worst = 0;

    for (int64_t i = 0; i < n; i++) {
        double r = (float)ref(xv[i]);
        double e = fabs(yv[i] - r) / fmax(fabs(r), floor_abs);
        if (!(e <= worst))
            worst = e;
    }
    free(xv);
    free(yv);
    return worst;
}

static double ref_sigmoid(double a)
{
    return 1 / (1 + exp(-a));
}

static void test_f32_exp_tanh_accuracy(void)
{
    keel_tensor *x = NULL, *y = NULL;
    double e;

    CU_ASSERT_EQUAL_FATAL(keel_linspace(-87, 88.5, 40001, KEEL_F32, NULL, &x),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_exp(x, &y), KEEL_STATUS_OK);
    e = max_rel_err(x, y, exp, 0);
    CU_ASSERT(e < 3.0e-7); /* <= 2.5 ulp */
    if (!(e < 3.0e-7))
        fprintf(stderr, "\n  exp float32: max relative error %g\n", e);
    keel_tensor_free(y);
    keel_tensor_free(x);

    CU_ASSERT_EQUAL_FATAL(keel_linspace(-9, 9, 40001, KEEL_F32, NULL, &x),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tanh(x, &y), KEEL_STATUS_OK);
    e = max_rel_err(x, y, tanh, 1e-30);
    CU_ASSERT(e < 4.2e-7); /* <= 3.5 ulp */
    if (!(e < 4.2e-7))
        fprintf(stderr, "\n  tanh float32: max relative error %g\n", e);
    keel_tensor_free(y);
    CU_ASSERT_EQUAL_FATAL(keel_sigmoid(x, &y), KEEL_STATUS_OK);
    e = max_rel_err(x, y, ref_sigmoid, 0);
    CU_ASSERT(e < 4.2e-7);
    keel_tensor_free(y);
    keel_tensor_free(x);
    {
        double v[14] = {-INFINITY, -104, -103.9, -100, -88, -1e-8, 0,
                        1e-8,      0.5493, 0.55, 88.7, 88.73, INFINITY, NAN};
        double ew[14], tw[14], sw[14];
        static const double p0[2] = {0, 0};
        keel_tensor *t = vec(KEEL_F32, 14, v);
        double *tv = ot_host(t);
        for (int k = 0; k < 14; k++) {
            ew[k] = (float)exp(tv[k]);
            tw[k] = tanh(tv[k]);
            sw[k] = ref_sigmoid(tv[k]);
        }
        /* overflow to inf, underflow through the subnormals to 0 */
        CU_ASSERT(isinf(ew[11]) && ew[0] == 0 && ew[1] == 0 && ew[2] > 0);
        expect_un("exp", call_exp, p0, KEEL_F32, 14, tv, ew);
        expect_un("tanh", call_tanh, p0, KEEL_F32, 14, tv, tw);
        expect_un("sigmoid", call_sigmoid, p0, KEEL_F32, 14, tv, sw);
        free(tv);
        keel_tensor_free(t);
    }
}

/* Attributes: defaults through keel_op_run without attributes, explicit
 * values through the typed functions. */
static void test_attributes(void)
{
    double x[5] = {-3, -0.5, 0, 1, 25};
    keel_tensor *t = vec(KEEL_F64, 5, x), *o = NULL;
    keel_attr a;
    int n = 0;

    {
        double w[5] = {-0.03, -0.005, 0, 1, 25};
        CU_ASSERT_EQUAL_FATAL(
            keel_op_run(KEEL_OP_LEAKY_RELU, &t, 1, NULL, 0, &o, 1, &n),
            KEEL_STATUS_OK);
        ot_check("leaky_relu default slope", o, w, KEEL_F64);
        keel_tensor_free(o);
    }
    {
        double w[5];
        for (int k = 0; k < 5; k++)
            w[k] = x[k] > 0 ? x[k] : exp(x[k]) - 1;
        CU_ASSERT_EQUAL_FATAL(
            keel_op_run(KEEL_OP_ELU, &t, 1, NULL, 0, &o, 1, &n),
            KEEL_STATUS_OK);
        ot_check("elu default alpha", o, w, KEEL_F64);
        keel_tensor_free(o);
    }
    {
        /* gelu(1): exact 0.84134474606854293, tanh form 0.84119199060827 */
        double one = 1, ex = 0.8413447460685429, ap = 0.8411919906082768;
        keel_tensor *u = vec(KEEL_F64, 1, &one);
        CU_ASSERT_EQUAL_FATAL(
            keel_op_run(KEEL_OP_GELU, &u, 1, NULL, 0, &o, 1, &n),
            KEEL_STATUS_OK);
        ot_check("gelu default exact", o, &ex, KEEL_F64);
        keel_tensor_free(o);
        a = keel_attr_bool("approximate", true);
        CU_ASSERT_EQUAL_FATAL(
            keel_op_run(KEEL_OP_GELU, &u, 1, &a, 1, &o, 1, &n),
            KEEL_STATUS_OK);
        ot_check("gelu approximate", o, &ap, KEEL_F64);
        keel_tensor_free(o);
        keel_tensor_free(u);
    }
    {
        /* softplus defaults beta 1, threshold 20: 25 passes through */
        double w[5];
        for (int k = 0; k < 5; k++)
            w[k] = x[k] > 20 ? x[k] : log(1 + exp(x[k]));
        CU_ASSERT_EQUAL_FATAL(
            keel_op_run(KEEL_OP_SOFTPLUS, &t, 1, NULL, 0, &o, 1, &n),
            KEEL_STATUS_OK);
        ot_check("softplus defaults", o, w, KEEL_F64);
        keel_tensor_free(o);
        CU_ASSERT_EQUAL_FATAL(keel_softplus(t, 0.5, 0.4, &o),
                              KEEL_STATUS_OK);
        for (int k = 0; k < 5; k++)
            w[k] = 0.5 * x[k] > 0.4 ? x[k] : log(1 + exp(0.5 * x[k])) / 0.5;
        ot_check("softplus beta 0.5 threshold 0.4", o, w, KEEL_F64);
        keel_tensor_free(o);
    }
    {
        /* clip with one bound: the other stays open */
        double w[5] = {-0.5, -0.5, 0, 1, 25};
        a = keel_attr_float("min", -0.5);
        CU_ASSERT_EQUAL_FATAL(
            keel_op_run(KEEL_OP_CLIP, &t, 1, &a, 1, &o, 1, &n),
            KEEL_STATUS_OK);
        ot_check("clip min only", o, w, KEEL_F64);
        keel_tensor_free(o);
    }
    {
        /* integer clip: bounds truncated toward zero, saturated */
        double ix[11] = {-5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5};
        double iw[11] = {-2, -2, -2, -2, -1, 0, 1, 2, 3, 3, 3};
        double b1[2] = {-2.7, 3.9}, b2[2] = {-1, 300}, b3[2] = {9.9, 100.5};
        double ux[4] = {0, 10, 200, 255}, uw3[4] = {9, 10, 100, 100};
        double i8x[4] = {-128, -5, 100, 127}, i8w[4] = {-3, -3, 100, 127};
        keel_tensor *i8 = vec(KEEL_I8, 4, i8x);
        expect_un("clip", call_clip, b1, KEEL_I32, 11, ix, iw);
        expect_un("clip", call_clip, b1, KEEL_I64, 11, ix, iw);
        expect_un("clip", call_clip, b2, KEEL_U8, 4, ux, ux);
        expect_un("clip", call_clip, b3, KEEL_U8, 4, ux, uw3);
        a = keel_attr_int("min", -3); /* an int is accepted for a float */
        CU_ASSERT_EQUAL_FATAL(
            keel_op_run(KEEL_OP_CLIP, &i8, 1, &a, 1, &o, 1, &n),
            KEEL_STATUS_OK);
        ot_check("clip int8 min only", o, i8w, KEEL_I8);
        keel_tensor_free(o);
        keel_tensor_free(i8);
    }
    keel_tensor_free(t);
}

/* Mixed dtypes: floating dtypes promote (Paddle 3.x); any other mix is an
 * error asking for a cast. */
static void test_promotion(void)
{
    double a[3] = {1, 2, 3}, b[3] = {0.5, 0.5, -0.5};
    keel_tensor *i32 = vec(KEEL_I32, 3, a), *f32 = vec(KEEL_F32, 3, b),
                *f16 = vec(KEEL_F16, 3, a), *bf16 = vec(KEEL_BF16, 3, b),
                *f64 = vec(KEEL_F64, 3, b), *o = NULL;
    double prod[3] = {0.5, 1, -1.5}, lt[3] = {0, 0, 0};
    double sum64[3] = {1, 1, -1};

    CU_ASSERT_EQUAL_FATAL(keel_multiply(f16, bf16, &o), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_dtype(o), KEEL_F32);
    ot_check("multiply float16 * bfloat16", o, prod, KEEL_F32);
    keel_tensor_free(o);
    CU_ASSERT_EQUAL_FATAL(keel_less(f16, bf16, &o), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_dtype(o), KEEL_BOOL);
    ot_check("less float16 < bfloat16", o, lt, KEEL_BOOL);
    keel_tensor_free(o);
    CU_ASSERT_EQUAL_FATAL(keel_add(f32, f64, &o), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_dtype(o), KEEL_F64);
    ot_check("add float32 + float64", o, sum64, KEEL_F64);
    keel_tensor_free(o);
    OT_EXPECT_ERROR(keel_add(i32, f32, &o), KEEL_STATUS_INVALID_ARGUMENT,
                    "only floating dtypes promote");
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "add("));
    OT_EXPECT_ERROR(keel_logical_and(i32, f64, &o),
                    KEEL_STATUS_INVALID_ARGUMENT, "int32 and float64");
    {
        double u[1] = {200}, s[1] = {-100}, c[3] = {1, 0, 1};
        keel_tensor *u8 = vec(KEEL_U8, 1, u), *i8 = vec(KEEL_I8, 1, s);
        keel_tensor *cond = vec(KEEL_BOOL, 3, c);
        OT_EXPECT_ERROR(keel_add(u8, i8, &o), KEEL_STATUS_INVALID_ARGUMENT,
                        "cast one operand first");
        OT_EXPECT_ERROR(keel_add(cond, i32, &o),
                        KEEL_STATUS_INVALID_ARGUMENT, "bool and int32");
        OT_EXPECT_ERROR(keel_where(cond, i32, f64, &o),
                        KEEL_STATUS_INVALID_ARGUMENT, "where(");
        keel_tensor_free(u8);
        keel_tensor_free(i8);
        keel_tensor_free(cond);
    }
    keel_tensor_free(i32);
    keel_tensor_free(f32);
    keel_tensor_free(f16);
    keel_tensor_free(bf16);
    keel_tensor_free(f64);
}

/* ---- errors -------------------------------------------------------------- */

static void test_errors(void)
{
    int64_t s23[2] = {2, 3}, s4[1] = {4}, s3[1] = {3};
    keel_tensor *x = rnd(KEEL_F32, 2, s23, -1, 1),
                *y = rnd(KEEL_F32, 1, s4, -1, 1),
                *i = rnd(KEEL_I32, 2, s23, -5, 5),
                *u = rnd(KEEL_U8, 2, s23, 0, 5),
                *b = rnd(KEEL_BOOL, 2, s23, 0, 1),
                *c3 = rnd(KEEL_BOOL, 1, s4, 0, 1),
                *z = rnd(KEEL_F32, 1, s3, -1, 1), *o = NULL, *o2[2] = {0};
    keel_attr a;
    int n = 0;

    /* shape mismatch */
    OT_EXPECT_ERROR(keel_add(x, y, &o), KEEL_STATUS_INVALID_ARGUMENT,
                    "add(float32[2, 3], float32[4])");
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "broadcast"));
    OT_EXPECT_ERROR(keel_less(y, x, &o), KEEL_STATUS_INVALID_ARGUMENT,
                    "less(");
    OT_EXPECT_ERROR(keel_logical_or(x, y, &o), KEEL_STATUS_INVALID_ARGUMENT,
                    "logical_or(");
    OT_EXPECT_ERROR(keel_where(c3, x, z, &o), KEEL_STATUS_INVALID_ARGUMENT,
                    "where(");
    CU_ASSERT_PTR_NULL(o);
    /* unsupported dtypes */
    OT_EXPECT_ERROR(keel_exp(i, &o), KEEL_STATUS_NOT_SUPPORTED, "exp(int32");
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "not supported"));
    OT_EXPECT_ERROR(keel_sigmoid(i, &o), KEEL_STATUS_NOT_SUPPORTED,
                    "sigmoid(");
    OT_EXPECT_ERROR(keel_neg(u, &o), KEEL_STATUS_NOT_SUPPORTED, "neg(uint8");
    OT_EXPECT_ERROR(keel_relu6(i, &o), KEEL_STATUS_NOT_SUPPORTED, "relu6(");
    OT_EXPECT_ERROR(keel_round(u, &o), KEEL_STATUS_NOT_SUPPORTED, "round(");
    OT_EXPECT_ERROR(keel_square(b, &o), KEEL_STATUS_NOT_SUPPORTED,
                    "square(bool");
    OT_EXPECT_ERROR(keel_add(b, b, &o), KEEL_STATUS_NOT_SUPPORTED,
                    "add(bool");
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "bool"));
    OT_EXPECT_ERROR(keel_where(x, x, x, &o), KEEL_STATUS_INVALID_ARGUMENT,
                    "where(float32");
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "must be bool"));
    /* bad attribute values and types */
    OT_EXPECT_ERROR(keel_clip(x, 2, 1, &o), KEEL_STATUS_INVALID_ARGUMENT,
                    "clip(");
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "greater than max"));
    OT_EXPECT_ERROR(keel_clip(x, NAN, 1, &o), KEEL_STATUS_INVALID_ARGUMENT,
                    "clip(");
    OT_EXPECT_ERROR(keel_softplus(x, 0, 20, &o),
                    KEEL_STATUS_INVALID_ARGUMENT, "softplus(");
    a = keel_attr_str("negative_slope", "steep");
    OT_EXPECT_ERROR(
        keel_op_run(KEEL_OP_LEAKY_RELU, &x, 1, &a, 1, o2, 2, &n),
        KEEL_STATUS_INVALID_ARGUMENT, "leaky_relu(");
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "must be float"));
    a = keel_attr_float("alpha", 1);
    OT_EXPECT_ERROR(keel_op_run(KEEL_OP_GELU, &x, 1, &a, 1, o2, 2, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "gelu(");
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "unknown attribute"));
    /* wrong operand counts */
    OT_EXPECT_ERROR(keel_op_run(KEEL_OP_ADD, &x, 1, NULL, 0, o2, 2, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "add(");
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "takes 2 inputs"));
    {
        keel_tensor *three[3] = {x, x, x};
        OT_EXPECT_ERROR(
            keel_op_run(KEEL_OP_MULTIPLY, three, 3, NULL, 0, o2, 2, &n),
            KEEL_STATUS_INVALID_ARGUMENT, "multiply(");
        OT_EXPECT_ERROR(
            keel_op_run(KEEL_OP_EXP, three, 2, NULL, 0, o2, 2, &n),
            KEEL_STATUS_INVALID_ARGUMENT, "exp(");
    }
    /* out == NULL */
    OT_EXPECT_ERROR(keel_add(x, x, NULL), KEEL_STATUS_INVALID_ARGUMENT,
                    "add");
    CU_ASSERT_EQUAL(n, 0);
    keel_tensor_free(x);
    keel_tensor_free(y);
    keel_tensor_free(i);
    keel_tensor_free(u);
    keel_tensor_free(b);
    keel_tensor_free(c3);
    keel_tensor_free(z);
}

/* ---- kernels through the device ABI ---------------------------------------- */

/* Every dtype ops.def gives an elementwise op has a CPU kernel. */
static const keel_op_id scope_ops[] = {
    KEEL_OP_ADD,         KEEL_OP_SUBTRACT,    KEEL_OP_MULTIPLY,
    KEEL_OP_DIVIDE,      KEEL_OP_POW,         KEEL_OP_MAXIMUM,
    KEEL_OP_MINIMUM,     KEEL_OP_FLOOR_DIVIDE, KEEL_OP_REMAINDER,
    KEEL_OP_EQUAL,       KEEL_OP_NOT_EQUAL,   KEEL_OP_LESS,
    KEEL_OP_LESS_EQUAL,  KEEL_OP_GREATER,     KEEL_OP_GREATER_EQUAL,
    KEEL_OP_LOGICAL_AND, KEEL_OP_LOGICAL_OR,  KEEL_OP_LOGICAL_XOR,
    KEEL_OP_LOGICAL_NOT, KEEL_OP_WHERE,       KEEL_OP_NEG,
    KEEL_OP_ABS,         KEEL_OP_SIGN,        KEEL_OP_EXP,
    KEEL_OP_LOG,         KEEL_OP_LOG1P,       KEEL_OP_SQRT,
    KEEL_OP_RSQRT,       KEEL_OP_SQUARE,      KEEL_OP_SIN,
    KEEL_OP_COS,         KEEL_OP_FLOOR,       KEEL_OP_CEIL,
    KEEL_OP_ROUND,       KEEL_OP_RELU,        KEEL_OP_RELU6,
    KEEL_OP_LEAKY_RELU,  KEEL_OP_ELU,         KEEL_OP_GELU,
    KEEL_OP_SILU,        KEEL_OP_SIGMOID,     KEEL_OP_TANH,
    KEEL_OP_SOFTPLUS,    KEEL_OP_HARDSWISH,   KEEL_OP_CLIP,
};
#define N_SCOPE (int)(sizeof(scope_ops) / sizeof(scope_ops[0]))

struct coverage {
    int pairs[KEEL_OP_COUNT];
    int missing;
};

static void cover_visit(keel_op_id op, keel_dtype dt, bool has, void *ctx)
{
    struct coverage *c = ctx;

    for (int i = 0; i < N_SCOPE; i++) {
        if (scope_ops[i] != op)
            continue;
        c->pairs[op]++;
        if (!has) {
            c->missing++;
            fprintf(stderr, "\n  no CPU kernel for %s %s\n",
                    keel_op_get_info(op)->name, keel_dtype_name(dt));
        }
    }
}

static void test_kernel_coverage(void)
{
    struct coverage c;
    keel_place pl;

    memset(&c, 0, sizeof(c));
    CU_ASSERT_EQUAL_FATAL(keel_place_parse("cpu:0", &pl), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_kernel_coverage(pl.plugin, cover_visit, &c),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(c.missing, 0);
    for (int i = 0; i < N_SCOPE; i++) {
        const keel_op_info *info = keel_op_get_info(scope_ops[i]);
        int want = 0;
        for (int dt = 0; dt < KEEL_DTYPE_COUNT_; dt++)
            want += (info->dtype_mask >> dt) & 1;
        CU_ASSERT_EQUAL(c.pairs[scope_ops[i]], want);
    }
}

static keel_tensor_desc desc1(keel_dptr p, keel_dtype dt, int64_t n)
{
    keel_tensor_desc d;

    memset(&d, 0, sizeof(d));
    d.data = p;
    d.dtype = dt;
    d.ndim = 1;
    d.shape[0] = n;
    d.strides[0] = 1;
    return d;
}

static keel_status call_kernel(const keel_plugin_api *api, int32_t dev,
                               const char *op, keel_dtype key,
                               const keel_tensor_desc *in, int nin,
                               const keel_tensor_desc *out)
{
    keel_kernel k;
    keel_kernel_args a;
    keel_status st = api->kernel->lookup(dev, op, key, &k);

    if (st != KEEL_STATUS_OK)
        return st;
    memset(&a, 0, sizeof(a));
    a.struct_size = sizeof(a);
    a.device = dev;
    a.inputs = in;
    a.num_inputs = nin;
    a.outputs = out;
    a.num_outputs = 1;
    st = k.fn(k.kernel_data, &a);
    if (st == KEEL_STATUS_OK)
        st = api->device->synchronize(dev);
    return st;
}

/* The kernels' own argument checks, reached by calling them directly
 * with descriptors the core would never build. */
static void test_kernel_checks(void)
{
    keel_place pl;
    const keel_plugin_api *api;
    keel_dptr p[4] = {0};
    keel_tensor_desc in[3], out;
    float host[4] = {1, 2, 3, 4}, got[4] = {0};
    keel_kernel k;

    CU_ASSERT_EQUAL_FATAL(keel_place_parse("cpu:0", &pl), KEEL_STATUS_OK);
    api = keel_plugin_table(pl.plugin);
    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_PTR_NOT_NULL_FATAL(api->kernel);
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL_FATAL(api->memory->alloc(pl.device, 64, &p[i]),
                              KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(api->memory->copy_h2d(pl.device, p[0], host, 16),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(api->memory->copy_h2d(pl.device, p[1], host, 16),
                    KEEL_STATUS_OK);
    /* lookups follow the catalog's dtypes */
    CU_ASSERT_EQUAL(api->kernel->lookup(pl.device, "add", KEEL_BOOL, &k),
                    KEEL_STATUS_NOT_FOUND);
    CU_ASSERT_EQUAL(api->kernel->lookup(pl.device, "exp", KEEL_I32, &k),
                    KEEL_STATUS_NOT_FOUND);
    CU_ASSERT_EQUAL(api->kernel->lookup(pl.device, "where", KEEL_BOOL, &k),
                    KEEL_STATUS_OK);
    /* a valid launch */
    in[0] = desc1(p[0], KEEL_F32, 4);
    in[1] = desc1(p[1], KEEL_F32, 4);
    out = desc1(p[2], KEEL_F32, 4);
    CU_ASSERT_EQUAL(call_kernel(api, pl.device, "multiply", KEEL_F32, in, 2,
                                &out),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(api->memory->copy_d2h(pl.device, got, p[2], 16),
                    KEEL_STATUS_OK);
    CU_ASSERT(got[0] == 1 && got[1] == 4 && got[2] == 9 && got[3] == 16);
    /* strided outputs: the core never makes them, and the kernel kit's
     * check (which every CPU kernel runs first) refuses them, so nothing
     * is written */
    {
        float o8[8] = {-7, -7, -7, -7, -7, -7, -7, -7};
        CU_ASSERT_EQUAL(api->memory->copy_h2d(pl.device, p[2], o8, 32),
                        KEEL_STATUS_OK);
        out = desc1(p[2], KEEL_F32, 4);
        out.strides[0] = 2;
        CU_ASSERT_EQUAL(call_kernel(api, pl.device, "add", KEEL_F32, in, 2,
                                    &out),
                        KEEL_STATUS_INVALID_ARGUMENT);
        CU_ASSERT_EQUAL(api->memory->copy_d2h(pl.device, o8, p[2], 32),
                        KEEL_STATUS_OK);
        for (int i = 0; i < 8; i++)
            CU_ASSERT_EQUAL(o8[i], -7);
        out = desc1(p[2], KEEL_F32, 4);
    }
    /* wrong output dtype, operand count, shape */
    out.dtype = KEEL_F64;
    CU_ASSERT_EQUAL(call_kernel(api, pl.device, "add", KEEL_F32, in, 2, &out),
                    KEEL_STATUS_INVALID_ARGUMENT);
    out.dtype = KEEL_F32;
    CU_ASSERT_EQUAL(call_kernel(api, pl.device, "add", KEEL_F32, in, 1, &out),
                    KEEL_STATUS_INVALID_ARGUMENT);
    in[1].shape[0] = 3;
    CU_ASSERT_EQUAL(call_kernel(api, pl.device, "add", KEEL_F32, in, 2, &out),
                    KEEL_STATUS_INVALID_ARGUMENT);
    in[1].shape[0] = 4;
    in[1].dtype = KEEL_I32;
    CU_ASSERT_EQUAL(call_kernel(api, pl.device, "less", KEEL_F32, in, 2, &out),
                    KEEL_STATUS_INVALID_ARGUMENT);
    /* a dtype the op does not define, through a kernel of another: the
     * launch is inconsistent with the catalog */
    in[0].dtype = in[1].dtype = out.dtype = KEEL_BOOL;
    CU_ASSERT_EQUAL(call_kernel(api, pl.device, "add", KEEL_F32, in, 2, &out),
                    KEEL_STATUS_INVALID_ARGUMENT);
    in[0].dtype = in[1].dtype = KEEL_I32;
    out.dtype = KEEL_I32;
    CU_ASSERT_EQUAL(call_kernel(api, pl.device, "exp", KEEL_F32, in, 1, &out),
                    KEEL_STATUS_INVALID_ARGUMENT);
    /* where: the condition must be bool */
    in[0] = desc1(p[3], KEEL_F32, 4);
    in[1] = desc1(p[0], KEEL_F32, 4);
    in[2] = desc1(p[1], KEEL_F32, 4);
    out = desc1(p[2], KEEL_F32, 4);
    CU_ASSERT_EQUAL(call_kernel(api, pl.device, "where", KEEL_F32, in, 3,
                                &out),
                    KEEL_STATUS_INVALID_ARGUMENT);
    /* an extent outside the allocation never runs */
    in[0] = desc1(p[0], KEEL_F32, 100);
    in[1] = desc1(p[1], KEEL_F32, 100);
    out = desc1(p[2], KEEL_F32, 100);
    CU_ASSERT_EQUAL(call_kernel(api, pl.device, "add", KEEL_F32, in, 2, &out),
                    KEEL_STATUS_INVALID_ARGUMENT);
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(api->memory->free(pl.device, p[i]), KEEL_STATUS_OK);
}

int main(void)
{
    static const ot_test tests[] = {
        {"binary arithmetic, numeric dtypes, all layouts",
         test_binary_arithmetic},
        {"pow", test_pow},
        {"comparisons and logical ops, every dtype",
         test_compare_and_logical},
        {"unary ops, every claimed dtype, all layouts", test_unary_ops},
        {"where", test_where},
        {"large tensors (thread pool paths)", test_large_tensors},
        {"integer division semantics", test_integer_division},
        {"float division semantics", test_float_division},
        {"pow semantics", test_pow_semantics},
        {"NaN propagation and signs", test_nan_and_sign},
        {"floor, ceil, round", test_rounding},
        {"float32 exp/tanh/sigmoid accuracy", test_f32_exp_tanh_accuracy},
        {"logical ops on float values", test_logical_values},
        {"attribute defaults and variants", test_attributes},
        {"dtype promotion", test_promotion},
        {"errors", test_errors},
        {"a CPU kernel for every claimed dtype", test_kernel_coverage},
        {"kernel argument checks (device ABI)", test_kernel_checks},
    };
    return ot_main("elementwise", tests, sizeof(tests) / sizeof(tests[0]));
}
