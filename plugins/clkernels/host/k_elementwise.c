/*
 * keel OpenCL C kernels — elementwise family, host side (OpenCL C in
 * plugins/clkernels/elementwise.cl): binary arithmetic, comparisons and
 * logical ops, where, the unary math and activation ops, cast, copy, and
 * the creation ops (full, arange, linspace, eye, uniform, normal,
 * randint, bernoulli).
 *
 * Every input is passed as (buffer, kdesc, mode) in the output's index
 * space, its dims merged with the other operands' (keel_kit_plan): mode 0
 * reads element i (contiguous), 1 element 0 (a broadcast scalar), 2
 * through the kdesc. Semantics follow the CPU plugin; see the .cl file.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ok.h"

/* Op codes: the EW_* numbers of elementwise.cl. */
enum { EW_ADD, EW_SUB, EW_MUL, EW_DIV, EW_POW, EW_MAX, EW_MIN,
       EW_FLOORDIV, EW_REM };
enum { EW_EQ, EW_NE, EW_LT, EW_LE, EW_GT, EW_GE, EW_AND, EW_OR, EW_XOR,
       EW_NOT };
enum { EW_NEG, EW_ABS, EW_SIGN, EW_EXP, EW_LOG, EW_LOG1P, EW_SQRT,
       EW_RSQRT, EW_SQUARE, EW_SIN, EW_COS, EW_FLOOR, EW_CEIL, EW_ROUND,
       EW_RELU, EW_RELU6, EW_LEAKY, EW_ELU, EW_GELU, EW_GELU_TANH, EW_SILU,
       EW_SIGMOID, EW_TANH, EW_SOFTPLUS, EW_HARDSWISH, EW_CLIP };
enum { EW_UNIFORM, EW_NORMAL, EW_RANDINT };

/* One input as the kernels read it. */
struct ew_in {
    struct ok_kdesc kd;
    int mode; /* 0 contiguous, 1 broadcast scalar, 2 strided */
};

/* The inputs in out's index space (right-aligned, size-1 dims stride 0),
 * their dims merged where every input allows it. */
static keel_status ew_plan(const char *op, const keel_tensor_desc *out,
                           const keel_tensor_desc *const *in, int nin,
                           struct ew_in *o)
{
    int64_t st[KEEL_KIT_PLAN_MAX][KEEL_MAX_DIMS];
    keel_kit_plan p;

    memset(st, 0, sizeof(st));
    for (int k = 0; k < nin; k++) {
        int lead = out->ndim - in[k]->ndim;
        for (int i = 0; i < out->ndim; i++) {
            int j = i - lead;
            st[k][i] = (j < 0 || in[k]->shape[j] == 1) ? 0
                                                       : in[k]->strides[j];
        }
    }
    if (keel_kit_plan_make(&p, nin, out->ndim, out->shape,
                           (const int64_t(*)[KEEL_MAX_DIMS])st) !=
        KEEL_STATUS_OK)
        return ok_fail(KEEL_STATUS_INTERNAL, "%s: no loop plan for %d dims",
                       op, (int)out->ndim);
    for (int k = 0; k < nin; k++) {
        bool contig = true, zero = true;
        int64_t want = 1;

        memset(&o[k].kd, 0, sizeof(o[k].kd));
        o[k].kd.ndim = p.ndim;
        for (int d = p.ndim - 1; d >= 0; d--) {
            o[k].kd.shape[d] = p.shape[d];
            o[k].kd.stride[d] = p.strides[k][d];
            contig = contig && p.strides[k][d] == want;
            zero = zero && p.strides[k][d] == 0;
            want *= p.shape[d];
        }
        o[k].mode = contig ? 0 : zero ? 1 : 2;
    }
    return KEEL_STATUS_OK;
}

/* ok_begin, then refuse a float64 operand on a device without float64
 * (the lookup already does; a direct call may not have looked up). */
static keel_status ew_begin(const keel_kernel_args *a, const char *op,
                            struct ok_launch *l)
{
    keel_status st = ok_begin(a, op, l);

    if (st)
        return st;
    if (!l->fp64) {
        for (int i = 0; i < a->num_inputs; i++)
            if (a->inputs[i].dtype == KEEL_F64)
                return ok_fail(KEEL_STATUS_NOT_SUPPORTED,
                               "%s: the device has no float64", op);
        for (int i = 0; i < a->num_outputs; i++)
            if (a->outputs[i].dtype == KEEL_F64)
                return ok_fail(KEEL_STATUS_NOT_SUPPORTED,
                               "%s: the device has no float64", op);
    }
    return KEEL_STATUS_OK;
}

/* A float scalar of the kernels' ew_real type. */
static struct ok_arg ew_real_arg(const struct ok_launch *l, double v)
{
    return l->fp64 ? OK_F64(v) : OK_F32(v);
}

/* ---- binary, comparisons, logical ops ------------------------------------- */

static keel_status ew_binary(const keel_kernel_args *a, const char *op,
                             int code, bool cmp)
{
    struct ok_launch l;
    struct ew_in in[2];
    const keel_tensor_desc *x, *y, *out;
    char name[32];
    int64_t n;
    keel_status st = ew_begin(a, op, &l);

    if (st)
        return st;
    x = &a->inputs[0];
    y = a->num_inputs > 1 ? &a->inputs[1] : x; /* logical_not: x twice */
    out = &a->outputs[0];
    n = keel_kit_numel(out);
    if (n == 0)
        return KEEL_STATUS_OK;
    st = ew_plan(op, out, (const keel_tensor_desc *const[]){x, y}, 2, in);
    if (st)
        return st;
    snprintf(name, sizeof(name), "%s_%s", cmp ? "ew_cmp" : "ew_bin",
             ok_sfx(x->dtype));
    return OK_RUN(&l, name, n, OK_I32(code), OK_T(&l, x), OK_DESC(&in[0].kd),
                  OK_I32(in[0].mode), OK_T(&l, y), OK_DESC(&in[1].kd),
                  OK_I32(in[1].mode), OK_T(&l, out), OK_I64(n));
}

#define EW_BIN(fn, op, code, cmp)                                            \
    static keel_status fn(void *kd, const keel_kernel_args *a)               \
    {                                                                        \
        (void)kd;                                                            \
        return ew_binary(a, op, code, cmp);                                  \
    }
EW_BIN(k_add, "add", EW_ADD, false)
EW_BIN(k_subtract, "subtract", EW_SUB, false)
EW_BIN(k_multiply, "multiply", EW_MUL, false)
EW_BIN(k_divide, "divide", EW_DIV, false)
EW_BIN(k_pow, "pow", EW_POW, false)
EW_BIN(k_maximum, "maximum", EW_MAX, false)
EW_BIN(k_minimum, "minimum", EW_MIN, false)
EW_BIN(k_floor_divide, "floor_divide", EW_FLOORDIV, false)
EW_BIN(k_remainder, "remainder", EW_REM, false)
EW_BIN(k_equal, "equal", EW_EQ, true)
EW_BIN(k_not_equal, "not_equal", EW_NE, true)
EW_BIN(k_less, "less", EW_LT, true)
EW_BIN(k_less_equal, "less_equal", EW_LE, true)
EW_BIN(k_greater, "greater", EW_GT, true)
EW_BIN(k_greater_equal, "greater_equal", EW_GE, true)
EW_BIN(k_logical_and, "logical_and", EW_AND, true)
EW_BIN(k_logical_or, "logical_or", EW_OR, true)
EW_BIN(k_logical_xor, "logical_xor", EW_XOR, true)
EW_BIN(k_logical_not, "logical_not", EW_NOT, true)

/* ---- unary ------------------------------------------------------------------ */

/* An integer kernel's view of a float bound, as the CPU plugin: truncated
 * toward zero, saturated to the dtype's range. */
static int64_t ew_bound_i(double v, keel_dtype dt)
{
    double lo, hi;

    switch (dt) {
    case KEEL_I8: lo = -128; hi = 127; break;
    case KEEL_U8: lo = 0; hi = 255; break;
    case KEEL_I32: lo = -2147483648.0; hi = 2147483647.0; break;
    default: lo = -9223372036854775808.0; hi = 9223372036854774784.0; break;
    }
    if (v <= lo)
        return (int64_t)lo;
    if (v >= hi)
        return (int64_t)hi;
    return (int64_t)v;
}

/* Attribute names and catalog defaults of a unary op's p0, p1. */
struct ew_un_attrs {
    const char *n0, *n1;
    double d0, d1;
};

static keel_status ew_unary(const keel_kernel_args *a, const char *op,
                            int code, struct ew_un_attrs at)
{
    struct ok_launch l;
    struct ew_in in;
    const keel_tensor_desc *x, *out;
    double p0, p1;
    struct ok_arg a0, a1;
    char name[32];
    int64_t n;
    keel_status st = ew_begin(a, op, &l);

    if (st)
        return st;
    x = &a->inputs[0];
    out = &a->outputs[0];
    n = keel_kit_numel(out);
    if (n == 0)
        return KEEL_STATUS_OK;
    if (code == EW_GELU && keel_kit_attr_i(a, "approximate", 0))
        code = EW_GELU_TANH;
    p0 = at.n0 ? keel_kit_attr_f(a, at.n0, at.d0) : 0;
    p1 = at.n1 ? keel_kit_attr_f(a, at.n1, at.d1) : 0;
    switch (x->dtype) {
    case KEEL_F64:
        a0 = OK_F64(p0);
        a1 = OK_F64(p1);
        break;
    case KEEL_F32:
    case KEEL_F16:
    case KEEL_BF16:
        a0 = OK_F32(p0);
        a1 = OK_F32(p1);
        break;
    default:
        a0 = OK_I64(ew_bound_i(p0, x->dtype));
        a1 = OK_I64(ew_bound_i(p1, x->dtype));
        break;
    }
    st = ew_plan(op, out, (const keel_tensor_desc *const[]){x}, 1, &in);
    if (st)
        return st;
    snprintf(name, sizeof(name), "ew_un_%s", ok_sfx(x->dtype));
    return OK_RUN(&l, name, n, OK_I32(code), OK_T(&l, x), OK_DESC(&in.kd),
                  OK_I32(in.mode), OK_T(&l, out), OK_I64(n), a0, a1);
}

#define EW_NOATTR ((struct ew_un_attrs){NULL, NULL, 0, 0})
#define EW_UN(fn, op, code, attrs)                                           \
    static keel_status fn(void *kd, const keel_kernel_args *a)               \
    {                                                                        \
        (void)kd;                                                            \
        return ew_unary(a, op, code, attrs);                                 \
    }
EW_UN(k_neg, "neg", EW_NEG, EW_NOATTR)
EW_UN(k_abs, "abs", EW_ABS, EW_NOATTR)
EW_UN(k_sign, "sign", EW_SIGN, EW_NOATTR)
EW_UN(k_exp, "exp", EW_EXP, EW_NOATTR)
EW_UN(k_log, "log", EW_LOG, EW_NOATTR)
EW_UN(k_log1p, "log1p", EW_LOG1P, EW_NOATTR)
EW_UN(k_sqrt, "sqrt", EW_SQRT, EW_NOATTR)
EW_UN(k_rsqrt, "rsqrt", EW_RSQRT, EW_NOATTR)
EW_UN(k_square, "square", EW_SQUARE, EW_NOATTR)
EW_UN(k_sin, "sin", EW_SIN, EW_NOATTR)
EW_UN(k_cos, "cos", EW_COS, EW_NOATTR)
EW_UN(k_floor, "floor", EW_FLOOR, EW_NOATTR)
EW_UN(k_ceil, "ceil", EW_CEIL, EW_NOATTR)
EW_UN(k_round, "round", EW_ROUND, EW_NOATTR)
EW_UN(k_relu, "relu", EW_RELU, EW_NOATTR)
EW_UN(k_relu6, "relu6", EW_RELU6, EW_NOATTR)
EW_UN(k_leaky_relu, "leaky_relu", EW_LEAKY,
      ((struct ew_un_attrs){"negative_slope", NULL, 0.01, 0}))
EW_UN(k_elu, "elu", EW_ELU, ((struct ew_un_attrs){"alpha", NULL, 1.0, 0}))
EW_UN(k_gelu, "gelu", EW_GELU, EW_NOATTR)
EW_UN(k_silu, "silu", EW_SILU, EW_NOATTR)
EW_UN(k_sigmoid, "sigmoid", EW_SIGMOID, EW_NOATTR)
EW_UN(k_tanh, "tanh", EW_TANH, EW_NOATTR)
EW_UN(k_softplus, "softplus", EW_SOFTPLUS,
      ((struct ew_un_attrs){"beta", "threshold", 1.0, 20.0}))
EW_UN(k_hardswish, "hardswish", EW_HARDSWISH, EW_NOATTR)
EW_UN(k_clip, "clip", EW_CLIP,
      ((struct ew_un_attrs){"min", "max", -INFINITY, INFINITY}))

/* ---- where, copy, cast -------------------------------------------------------- */

static keel_status k_where(void *kd, const keel_kernel_args *a)
{
    struct ok_launch l;
    struct ew_in in[3];
    const keel_tensor_desc *c, *x, *y, *out;
    int64_t n;
    keel_status st = ew_begin(a, "where", &l);

    (void)kd;
    if (st)
        return st;
    c = &a->inputs[0];
    x = &a->inputs[1];
    y = &a->inputs[2];
    out = &a->outputs[0];
    n = keel_kit_numel(out);
    if (n == 0)
        return KEEL_STATUS_OK;
    st = ew_plan("where", out, (const keel_tensor_desc *const[]){c, x, y}, 3,
                 in);
    if (st)
        return st;
    return OK_RUN(&l, "ew_where", n, OK_T(&l, c), OK_DESC(&in[0].kd),
                  OK_I32(in[0].mode), OK_T(&l, x), OK_DESC(&in[1].kd),
                  OK_I32(in[1].mode), OK_T(&l, y), OK_DESC(&in[2].kd),
                  OK_I32(in[2].mode), OK_T(&l, out),
                  OK_I32(keel_dtype_size(out->dtype)), OK_I64(n));
}

static keel_status k_copy(void *kd, const keel_kernel_args *a)
{
    struct ok_launch l;
    struct ew_in in;
    const keel_tensor_desc *x, *out;
    int64_t n;
    keel_status st = ew_begin(a, "copy", &l);

    (void)kd;
    if (st)
        return st;
    x = &a->inputs[0];
    out = &a->outputs[0];
    n = keel_kit_numel(out);
    if (n == 0)
        return KEEL_STATUS_OK;
    st = ew_plan("copy", out, (const keel_tensor_desc *const[]){x}, 1, &in);
    if (st)
        return st;
    return OK_RUN(&l, "ew_copy", n, OK_T(&l, x), OK_DESC(&in.kd),
                  OK_I32(in.mode), OK_T(&l, out),
                  OK_I32(keel_dtype_size(out->dtype)), OK_I64(n));
}

static keel_status k_cast(void *kd, const keel_kernel_args *a)
{
    struct ok_launch l;
    struct ew_in in;
    const keel_tensor_desc *x, *out;
    int64_t n;
    keel_status st = ew_begin(a, "cast", &l);

    (void)kd;
    if (st)
        return st;
    x = &a->inputs[0];
    out = &a->outputs[0];
    n = keel_kit_numel(out);
    if (n == 0)
        return KEEL_STATUS_OK;
    st = ew_plan("cast", out, (const keel_tensor_desc *const[]){x}, 1, &in);
    if (st)
        return st;
    return OK_RUN(&l, "ew_cast", n, OK_T(&l, x), OK_DESC(&in.kd),
                  OK_I32(in.mode), OK_I32(x->dtype), OK_T(&l, out),
                  OK_I32(out->dtype), OK_I64(n));
}

/* ---- full, eye ------------------------------------------------------------------- */

/* Float to integer as the CPU plugin's stores: NaN 0, saturating. */
static int64_t ew_sat(double v, double lo, double hi)
{
    if (v != v)
        return 0;
    if (v <= lo)
        return (int64_t)lo;
    if (v >= hi)
        return (int64_t)hi;
    return (int64_t)v;
}

/* The bits of v stored as dt (low bytes of the result). */
static uint64_t ew_bits(keel_dtype dt, double v)
{
    switch (dt) {
    case KEEL_F32: {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, sizeof(u));
        return u;
    }
    case KEEL_F64: {
        uint64_t u;
        memcpy(&u, &v, sizeof(u));
        return u;
    }
    case KEEL_F16: return keel_kit_f32_to_f16((float)v);
    case KEEL_BF16: return keel_kit_f32_to_bf16((float)v);
    case KEEL_I8: return (uint8_t)(int8_t)ew_sat(v, -128, 127);
    case KEEL_U8: return (uint8_t)ew_sat(v, 0, 255);
    case KEEL_I32:
        return (uint32_t)(int32_t)ew_sat(v, -2147483648.0, 2147483647.0);
    case KEEL_I64:
        return (uint64_t)ew_sat(v, -9223372036854775808.0,
                                9223372036854774784.0);
    default: return v != 0;
    }
}

static keel_status ew_fill(const keel_kernel_args *a, const char *op,
                           bool eye)
{
    struct ok_launch l;
    const keel_tensor_desc *out;
    int64_t n, m = 1;
    keel_status st = ew_begin(a, op, &l);

    if (st)
        return st;
    out = &a->outputs[0];
    n = keel_kit_numel(out);
    if (n == 0)
        return KEEL_STATUS_OK;
    if (eye)
        m = out->shape[1];
    return OK_RUN(&l, "ew_fill", n, OK_T(&l, out),
                  OK_I32(keel_dtype_size(out->dtype)),
                  OK_U64(ew_bits(out->dtype,
                                 eye ? 0 : keel_kit_attr_f(a, "value", 0))),
                  OK_I64(n), OK_I32(eye), OK_I64(m),
                  OK_U64(ew_bits(out->dtype, 1.0)));
}

static keel_status k_full(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return ew_fill(a, "full", false);
}

static keel_status k_eye(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return ew_fill(a, "eye", true);
}

/* ---- arange, linspace -------------------------------------------------------------- */

static keel_status ew_seq(const keel_kernel_args *a, const char *op,
                          bool linspace)
{
    struct ok_launch l;
    const keel_tensor_desc *out;
    double start, step, stop = 0;
    int64_t n, last = -1;
    keel_status st = ew_begin(a, op, &l);

    if (st)
        return st;
    out = &a->outputs[0];
    n = keel_kit_numel(out);
    if (n == 0)
        return KEEL_STATUS_OK;
    start = keel_kit_attr_f(a, "start", 0);
    if (linspace) {
        stop = keel_kit_attr_f(a, "stop", 0);
        step = n > 1 ? (stop - start) / (double)(n - 1) : 0;
        last = n > 1 ? n - 1 : -1; /* the last point is exactly stop */
    } else {
        step = keel_kit_attr_f(a, "step", 1);
    }
    return OK_RUN(&l, "ew_seq", n, OK_T(&l, out), OK_I32(out->dtype),
                  ew_real_arg(&l, start), ew_real_arg(&l, step), OK_I64(n),
                  OK_I64(last), ew_real_arg(&l, stop));
}

static keel_status k_arange(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return ew_seq(a, "arange", false);
}

static keel_status k_linspace(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return ew_seq(a, "linspace", true);
}

/* ---- random ------------------------------------------------------------------------ */

static keel_status ew_rand(const keel_kernel_args *a, const char *op,
                           int kind)
{
    struct ok_launch l;
    const keel_tensor_desc *out;
    double p0 = 0, p1 = 1;
    int64_t n, lo = 0, span = 1;
    keel_status st = ew_begin(a, op, &l);

    if (st)
        return st;
    out = &a->outputs[0];
    n = keel_kit_numel(out);
    if (n == 0)
        return KEEL_STATUS_OK;
    switch (kind) {
    case EW_UNIFORM:
        p0 = keel_kit_attr_f(a, "low", 0);
        p1 = keel_kit_attr_f(a, "high", 1);
        break;
    case EW_NORMAL:
        p0 = keel_kit_attr_f(a, "mean", 0);
        p1 = keel_kit_attr_f(a, "std", 1);
        break;
    default:
        lo = keel_kit_attr_i(a, "low", 0);
        span = (int64_t)((uint64_t)keel_kit_attr_i(a, "high", 1) -
                         (uint64_t)lo);
        break;
    }
    return OK_RUN(&l, "ew_rand", n, OK_I32(kind), OK_T(&l, out),
                  OK_I32(out->dtype),
                  OK_U64(keel_kit_attr_i(a, "seed", 0)),
                  OK_U64(keel_kit_attr_i(a, "offset", 0)),
                  ew_real_arg(&l, p0), ew_real_arg(&l, p1), OK_I64(lo),
                  OK_I64(span), OK_I64(n));
}

static keel_status k_uniform(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return ew_rand(a, "uniform", EW_UNIFORM);
}

static keel_status k_normal(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return ew_rand(a, "normal", EW_NORMAL);
}

static keel_status k_randint(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return ew_rand(a, "randint", EW_RANDINT);
}

static keel_status k_bernoulli(void *kd, const keel_kernel_args *a)
{
    struct ok_launch l;
    struct ew_in in;
    const keel_tensor_desc *p, *out;
    char name[32];
    int64_t n;
    keel_status st = ew_begin(a, "bernoulli", &l);

    (void)kd;
    if (st)
        return st;
    p = &a->inputs[0];
    out = &a->outputs[0];
    n = keel_kit_numel(out);
    if (n == 0)
        return KEEL_STATUS_OK;
    st = ew_plan("bernoulli", out, (const keel_tensor_desc *const[]){p}, 1,
                 &in);
    if (st)
        return st;
    snprintf(name, sizeof(name), "ew_bernoulli_%s", ok_sfx(p->dtype));
    return OK_RUN(&l, name, n, OK_T(&l, p), OK_DESC(&in.kd), OK_I32(in.mode),
                  OK_T(&l, out), OK_U64(keel_kit_attr_i(a, "seed", 0)),
                  OK_U64(keel_kit_attr_i(a, "offset", 0)), OK_I64(n));
}

const struct ok_entry ok_kernels_elementwise[] = {
    {"add", KEEL_DT_NUMERIC, k_add},
    {"subtract", KEEL_DT_NUMERIC, k_subtract},
    {"multiply", KEEL_DT_NUMERIC, k_multiply},
    {"divide", KEEL_DT_FLOAT, k_divide},
    {"pow", KEEL_DT_NUMERIC, k_pow},
    {"maximum", KEEL_DT_NUMERIC, k_maximum},
    {"minimum", KEEL_DT_NUMERIC, k_minimum},
    {"floor_divide", KEEL_DT_NUMERIC, k_floor_divide},
    {"remainder", KEEL_DT_NUMERIC, k_remainder},
    {"equal", KEEL_DT_ALL, k_equal},
    {"not_equal", KEEL_DT_ALL, k_not_equal},
    {"less", KEEL_DT_ALL, k_less},
    {"less_equal", KEEL_DT_ALL, k_less_equal},
    {"greater", KEEL_DT_ALL, k_greater},
    {"greater_equal", KEEL_DT_ALL, k_greater_equal},
    {"logical_and", KEEL_DT_ALL, k_logical_and},
    {"logical_or", KEEL_DT_ALL, k_logical_or},
    {"logical_xor", KEEL_DT_ALL, k_logical_xor},
    {"logical_not", KEEL_DT_ALL, k_logical_not},
    {"where", KEEL_DT_ALL, k_where},
    {"neg", KEEL_DT_SIGNED, k_neg},
    {"abs", KEEL_DT_SIGNED, k_abs},
    {"sign", KEEL_DT_SIGNED, k_sign},
    {"exp", KEEL_DT_FLOAT, k_exp},
    {"log", KEEL_DT_FLOAT, k_log},
    {"log1p", KEEL_DT_FLOAT, k_log1p},
    {"sqrt", KEEL_DT_FLOAT, k_sqrt},
    {"rsqrt", KEEL_DT_FLOAT, k_rsqrt},
    {"square", KEEL_DT_NUMERIC, k_square},
    {"sin", KEEL_DT_FLOAT, k_sin},
    {"cos", KEEL_DT_FLOAT, k_cos},
    {"floor", KEEL_DT_FLOAT, k_floor},
    {"ceil", KEEL_DT_FLOAT, k_ceil},
    {"round", KEEL_DT_FLOAT, k_round},
    {"relu", KEEL_DT_SIGNED, k_relu},
    {"relu6", KEEL_DT_FLOAT, k_relu6},
    {"leaky_relu", KEEL_DT_FLOAT, k_leaky_relu},
    {"elu", KEEL_DT_FLOAT, k_elu},
    {"gelu", KEEL_DT_FLOAT, k_gelu},
    {"silu", KEEL_DT_FLOAT, k_silu},
    {"sigmoid", KEEL_DT_FLOAT, k_sigmoid},
    {"tanh", KEEL_DT_FLOAT, k_tanh},
    {"softplus", KEEL_DT_FLOAT, k_softplus},
    {"hardswish", KEEL_DT_FLOAT, k_hardswish},
    {"clip", KEEL_DT_NUMERIC, k_clip},
    {"cast", KEEL_DT_ALL, k_cast},
    {"copy", KEEL_DT_ALL, k_copy},
    {"full", KEEL_DT_ALL, k_full},
    {"arange", KEEL_DT_NUMERIC, k_arange},
    {"linspace", KEEL_DT_FLOAT, k_linspace},
    {"eye", KEEL_DT_ALL, k_eye},
    {"uniform", KEEL_DT_FLOAT, k_uniform},
    {"normal", KEEL_DT_FLOAT, k_normal},
    {"randint", KEEL_DT_INT, k_randint},
    {"bernoulli", KEEL_DT_FLOAT, k_bernoulli},
    {NULL, 0, NULL},
};
