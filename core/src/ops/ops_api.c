/*
 * The typed op functions of keel/ops.h: each packs its arguments into
 * inputs and attributes and goes through keel_op_run.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/dispatch_internal.h"

#define IN(...) ((const keel_tensor *const[]){__VA_ARGS__})

static keel_status run_attrs(keel_op_id op, const keel_tensor *const *in,
                             int nin, const keel_attr *a, int na,
                             keel_tensor **out)
{
    return keel__run1(op, in, nin, a, na, out);
}

/* axes[naxes] into buf, for an ints attribute. An axis can be named once,
 * so more than KEEL_MAX_DIMS is an error, not a list to cut short. */
static keel_status to_axes(const char *what, int naxes, const int *axes,
                           int64_t *buf)
{
    if (naxes < 0 || naxes > KEEL_MAX_DIMS)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: naxes = %d is outside [0, %d]", what, naxes,
                           KEEL_MAX_DIMS);
    if (naxes > 0 && !axes)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: axes is NULL with naxes = %d", what, naxes);
    for (int i = 0; i < naxes; i++)
        buf[i] = axes[i];
    return KEEL_STATUS_OK;
}

/* An int64 list argument: a count >= 0 and an array when it is > 0. */
static keel_status check_list(const char *what, const char *name, int n,
                              const void *v)
{
    if (n < 0)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: the length of %s is %d, negative", what,
                           name, n);
    if (n > 0 && !v)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: %s is NULL with length %d", what, name, n);
    return KEEL_STATUS_OK;
}

/* ---- elementwise ------------------------------------------------------------- */

#define BINARY(name, ID)                                                     \
    keel_status keel_##name(const keel_tensor *x, const keel_tensor *y,      \
                            keel_tensor **out)                               \
    {                                                                        \
        return keel__run1(KEEL_OP_##ID, IN(x, y), 2, NULL, 0, out);          \
    }
BINARY(add, ADD)
BINARY(subtract, SUBTRACT)
BINARY(multiply, MULTIPLY)
BINARY(divide, DIVIDE)
BINARY(pow, POW)
BINARY(maximum, MAXIMUM)
BINARY(minimum, MINIMUM)
BINARY(floor_divide, FLOOR_DIVIDE)
BINARY(remainder, REMAINDER)
BINARY(equal, EQUAL)
BINARY(not_equal, NOT_EQUAL)
BINARY(less, LESS)
BINARY(less_equal, LESS_EQUAL)
BINARY(greater, GREATER)
BINARY(greater_equal, GREATER_EQUAL)
BINARY(logical_and, LOGICAL_AND)
BINARY(logical_or, LOGICAL_OR)
BINARY(logical_xor, LOGICAL_XOR)
#undef BINARY

keel_status keel_where(const keel_tensor *cond, const keel_tensor *x,
                       const keel_tensor *y, keel_tensor **out)
{
    return keel__run1(KEEL_OP_WHERE, IN(cond, x, y), 3, NULL, 0, out);
}

#define UNARY(name, ID)                                                      \
    keel_status keel_##name(const keel_tensor *x, keel_tensor **out)         \
    {                                                                        \
        return keel__run1(KEEL_OP_##ID, IN(x), 1, NULL, 0, out);             \
    }
UNARY(logical_not, LOGICAL_NOT)
UNARY(neg, NEG)
UNARY(abs, ABS)
UNARY(sign, SIGN)
UNARY(exp, EXP)
UNARY(log, LOG)
UNARY(log1p, LOG1P)
UNARY(sqrt, SQRT)
UNARY(rsqrt, RSQRT)
UNARY(square, SQUARE)
UNARY(sin, SIN)
UNARY(cos, COS)
UNARY(floor, FLOOR)
UNARY(ceil, CEIL)
UNARY(round, ROUND)
UNARY(relu, RELU)
UNARY(relu6, RELU6)
UNARY(silu, SILU)
UNARY(sigmoid, SIGMOID)
UNARY(tanh, TANH)
UNARY(hardswish, HARDSWISH)
#undef UNARY

keel_status keel_leaky_relu(const keel_tensor *x, double negative_slope,
                            keel_tensor **out)
{
    keel_attr a = keel_attr_float("negative_slope", negative_slope);
    return run_attrs(KEEL_OP_LEAKY_RELU, IN(x), 1, &a, 1, out);
}

keel_status keel_elu(const keel_tensor *x, double alpha, keel_tensor **out)
{
    keel_attr a = keel_attr_float("alpha", alpha);
    return run_attrs(KEEL_OP_ELU, IN(x), 1, &a, 1, out);
}

keel_status keel_gelu(const keel_tensor *x, bool approximate,
                      keel_tensor **out)
{
    keel_attr a = keel_attr_bool("approximate", approximate);
    return run_attrs(KEEL_OP_GELU, IN(x), 1, &a, 1, out);
}

keel_status keel_softplus(const keel_tensor *x, double beta, double threshold,
                          keel_tensor **out)
{
    keel_attr a[2] = {keel_attr_float("beta", beta),
                      keel_attr_float("threshold", threshold)};
    return run_attrs(KEEL_OP_SOFTPLUS, IN(x), 1, a, 2, out);
}

keel_status keel_clip(const keel_tensor *x, double min, double max,
                      keel_tensor **out)
{
    keel_attr a[2] = {keel_attr_float("min", min),
                      keel_attr_float("max", max)};
    return run_attrs(KEEL_OP_CLIP, IN(x), 1, a, 2, out);
}

/* ---- reductions ---------------------------------------------------------------- */

#define REDUCE(name, ID)                                                     \
    keel_status keel_##name(const keel_tensor *x, int naxes, const int *axes, \
                            bool keepdim, keel_tensor **out)                 \
    {                                                                        \
        int64_t ax[KEEL_MAX_DIMS];                                           \
        keel_status st = to_axes("keel_" #name, naxes, axes, ax);            \
        keel_attr a[2] = {keel_attr_ints("axis", ax, naxes),                 \
                          keel_attr_bool("keepdim", keepdim)};               \
        if (st != KEEL_STATUS_OK)                                            \
            return st;                                                       \
        return run_attrs(KEEL_OP_##ID, IN(x), 1, a, 2, out);                 \
    }
REDUCE(sum, SUM)
REDUCE(mean, MEAN)
REDUCE(max, MAX)
REDUCE(min, MIN)
REDUCE(prod, PROD)
REDUCE(logsumexp, LOGSUMEXP)
REDUCE(all, ALL)
REDUCE(any, ANY)
#undef REDUCE

static keel_status arg_reduce(keel_op_id op, const keel_tensor *x, int axis,
                              bool keepdim, keel_tensor **out)
{
    int64_t ax = axis;
    int flat = axis == KEEL_AXIS_FLAT;
    keel_attr a[2] = {keel_attr_ints("axis", &ax, flat ? 0 : 1),
                      keel_attr_bool("keepdim", keepdim)};
    return run_attrs(op, IN(x), 1, a, 2, out);
}

keel_status keel_argmax(const keel_tensor *x, int axis, bool keepdim,
                        keel_tensor **out)
{
    return arg_reduce(KEEL_OP_ARGMAX, x, axis, keepdim, out);
}

keel_status keel_argmin(const keel_tensor *x, int axis, bool keepdim,
                        keel_tensor **out)
{
    return arg_reduce(KEEL_OP_ARGMIN, x, axis, keepdim, out);
}

static keel_status moments(const char *what, keel_op_id op,
                           const keel_tensor *x, int naxes, const int *axes,
                           bool keepdim, bool unbiased, keel_tensor **out)
{
    int64_t ax[KEEL_MAX_DIMS];
    keel_status st = to_axes(what, naxes, axes, ax);
    keel_attr a[3] = {keel_attr_ints("axis", ax, naxes),
                      keel_attr_bool("keepdim", keepdim),
                      keel_attr_bool("unbiased", unbiased)};

    if (st != KEEL_STATUS_OK)
        return st;
    return run_attrs(op, IN(x), 1, a, 3, out);
}

keel_status keel_var(const keel_tensor *x, int naxes, const int *axes,
                     bool keepdim, bool unbiased, keel_tensor **out)
{
    return moments(__func__, KEEL_OP_VAR, x, naxes, axes, keepdim, unbiased,
                   out);
}

keel_status keel_std(const keel_tensor *x, int naxes, const int *axes,
                     bool keepdim, bool unbiased, keel_tensor **out)
{
    return moments(__func__, KEEL_OP_STD, x, naxes, axes, keepdim, unbiased,
                   out);
}

keel_status keel_cumsum(const keel_tensor *x, int axis, keel_tensor **out)
{
    int64_t ax = axis;
    int flat = axis == KEEL_AXIS_FLAT;
    keel_attr a = keel_attr_ints("axis", &ax, flat ? 0 : 1);
    return run_attrs(KEEL_OP_CUMSUM, IN(x), 1, &a, 1, out);
}

/* ---- linear algebra ------------------------------------------------------------- */

keel_status keel_matmul(const keel_tensor *x, const keel_tensor *y,
                        bool transpose_x, bool transpose_y, keel_tensor **out)
{
    keel_attr a[2] = {keel_attr_bool("transpose_x", transpose_x),
                      keel_attr_bool("transpose_y", transpose_y)};
    return run_attrs(KEEL_OP_MATMUL, IN(x, y), 2, a, 2, out);
}

keel_status keel_linear(const keel_tensor *x, const keel_tensor *weight,
                        const keel_tensor *bias, keel_tensor **out)
{
    return keel__run1(KEEL_OP_LINEAR, IN(x, weight, bias), bias ? 3 : 2, NULL,
                      0, out);
}

/* ---- nn ---------------------------------------------------------------------------- */

keel_conv2d_params keel_conv2d_default_params(void)
{
    keel_conv2d_params p;

    memset(&p, 0, sizeof(p));
    p.stride[0] = p.stride[1] = 1;
    p.npadding = 2;
    p.padding_algorithm = "EXPLICIT";
    p.dilation[0] = p.dilation[1] = 1;
    p.groups = 1;
    return p;
}

/* The attributes of a conv2d call; *n receives their number. */
static keel_status conv_attrs(const char *what, const keel_conv2d_params *p,
                              keel_attr *a, bool tr, int *count)
{
    int n = 0;

    if (p->npadding != 1 && p->npadding != 2 && p->npadding != 4)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: npadding = %d: padding takes 1 value (all "
                           "sides), 2 (h, w) or 4 (top, bottom, left, right)",
                           what, p->npadding);
    a[n++] = keel_attr_ints("stride", p->stride, 2);
    a[n++] = keel_attr_ints("padding", p->padding, p->npadding);
    a[n++] = keel_attr_str("padding_algorithm",
                           p->padding_algorithm ? p->padding_algorithm
                                                : "EXPLICIT");
    a[n++] = keel_attr_ints("dilation", p->dilation, 2);
    a[n++] = keel_attr_int("groups", p->groups);
    if (tr)
        a[n++] = keel_attr_ints("output_padding", p->output_padding, 2);
    *count = n;
    return KEEL_STATUS_OK;
}

keel_status keel_conv2d(const keel_tensor *x, const keel_tensor *weight,
                        const keel_tensor *bias, const keel_conv2d_params *p,
                        keel_tensor **out)
{
    keel_conv2d_params d = keel_conv2d_default_params();
    keel_attr a[6];
    int n = 0;
    keel_status st = conv_attrs(__func__, p ? p : &d, a, false, &n);

    if (st != KEEL_STATUS_OK)
        return st;
    return keel__run1(KEEL_OP_CONV2D, IN(x, weight, bias), bias ? 3 : 2, a, n,
                      out);
}

keel_status keel_conv2d_transpose(const keel_tensor *x,
                                  const keel_tensor *weight,
                                  const keel_tensor *bias,
                                  const keel_conv2d_params *p,
                                  keel_tensor **out)
{
    keel_conv2d_params d = keel_conv2d_default_params();
    keel_attr a[6];
    int n = 0;
    keel_status st = conv_attrs(__func__, p ? p : &d, a, true, &n);

    if (st != KEEL_STATUS_OK)
        return st;
    return keel__run1(KEEL_OP_CONV2D_TRANSPOSE, IN(x, weight, bias),
                      bias ? 3 : 2, a, n, out);
}

/* ---- fused inference ops ---------------------------------------------------- */

keel_status keel_fused_linear(const keel_tensor *x, const keel_tensor *weight,
                              const keel_tensor *bias, const char *activation,
                              double alpha, keel_tensor **out)
{
    keel_attr a[2] = {keel_attr_str("activation",
                                    activation ? activation : "none"),
                      keel_attr_float("alpha", alpha)};

    return keel__run1(KEEL_OP_FUSED_LINEAR, IN(x, weight, bias), bias ? 3 : 2,
                      a, 2, out);
}

keel_status keel_fused_conv2d(const keel_tensor *x, const keel_tensor *weight,
                              const keel_tensor *bias,
                              const keel_conv2d_params *p,
                              const char *activation, double alpha,
                              keel_tensor **out)
{
    keel_conv2d_params d = keel_conv2d_default_params();
    keel_attr a[8];
    int n = 0;
    keel_status st = conv_attrs(__func__, p ? p : &d, a, false, &n);

    if (st != KEEL_STATUS_OK)
        return st;
    a[n++] = keel_attr_str("activation", activation ? activation : "none");
    a[n++] = keel_attr_float("alpha", alpha);
    return keel__run1(KEEL_OP_FUSED_CONV2D, IN(x, weight, bias), bias ? 3 : 2,
                      a, n, out);
}

keel_status keel_softmax(const keel_tensor *x, int axis, keel_tensor **out)
{
    keel_attr a = keel_attr_int("axis", axis);
    return run_attrs(KEEL_OP_SOFTMAX, IN(x), 1, &a, 1, out);
}

keel_status keel_log_softmax(const keel_tensor *x, int axis,
                             keel_tensor **out)
{
    keel_attr a = keel_attr_int("axis", axis);
    return run_attrs(KEEL_OP_LOG_SOFTMAX, IN(x), 1, &a, 1, out);
}

keel_status keel_one_hot(const keel_tensor *x, int64_t num_classes,
                         keel_tensor **out)
{
    keel_attr a = keel_attr_int("num_classes", num_classes);
    return run_attrs(KEEL_OP_ONE_HOT, IN(x), 1, &a, 1, out);
}

/* ---- shape and indexing -------------------------------------------------------------- */

keel_status keel_concat(keel_tensor *const *xs, int n, int axis,
                        keel_tensor **out)
{
    keel_attr a = keel_attr_int("axis", axis);
    return keel__run1(KEEL_OP_CONCAT, (const keel_tensor *const *)xs, n, &a, 1,
                      out);
}

keel_status keel_stack(keel_tensor *const *xs, int n, int axis,
                       keel_tensor **out)
{
    keel_attr a = keel_attr_int("axis", axis);
    return keel__run1(KEEL_OP_STACK, (const keel_tensor *const *)xs, n, &a, 1,
                      out);
}

keel_status keel_split(const keel_tensor *x, int n, const int64_t *sections,
                       int axis, keel_tensor **outs)
{
    keel_attr a[2] = {keel_attr_ints("sections", sections, n),
                      keel_attr_int("axis", axis)};
    int got = 0;
    keel_status st;

    if (!outs || n <= 0)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_split: need n > 0 pieces and an outs array");
    if (!sections)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_split: sections is NULL with n = %d", n);
    st = keel_op_run(KEEL_OP_SPLIT, (keel_tensor *const *)IN(x), 1, a, 2,
                     outs, n, &got);
    if (st == KEEL_STATUS_OK && got != n) {
        for (int i = 0; i < got; i++)
            keel_tensor_free(outs[i]);
        return keel__error(KEEL_STATUS_INTERNAL,
                           "keel_split: %d pieces, expected %d", got, n);
    }
    return st;
}

keel_status keel_chunk(const keel_tensor *x, int n, int axis,
                       keel_tensor **outs)
{
    int64_t sections[KEEL_MAX_OP_OUTPUTS], len, each;
    int a;

    if (!x || !outs || n <= 0 || n > KEEL_MAX_OP_OUTPUTS)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_chunk: need x, outs and 0 < n <= %d",
                           KEEL_MAX_OP_OUTPUTS);
    a = keel__axis(axis, keel_tensor_ndim(x));
    if (a < 0)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_chunk: axis %d out of range for %d dims",
                           axis, keel_tensor_ndim(x));
    len = keel_tensor_shape(x)[a];
    each = (len + n - 1) / n;
    for (int i = 0; i < n; i++) {
        int64_t left = len - each * i;
        sections[i] = left < 0 ? 0 : (left < each ? left : each);
    }
    return keel_split(x, n, sections, a, outs);
}

keel_status keel_gather(const keel_tensor *x, const keel_tensor *index,
                        int axis, keel_tensor **out)
{
    keel_attr a = keel_attr_int("axis", axis);
    return run_attrs(KEEL_OP_GATHER, IN(x, index), 2, &a, 1, out);
}

keel_status keel_index_select(const keel_tensor *x, const keel_tensor *index,
                              int axis, keel_tensor **out)
{
    keel_attr a = keel_attr_int("axis", axis);
    return run_attrs(KEEL_OP_INDEX_SELECT, IN(x, index), 2, &a, 1, out);
}

keel_status keel_scatter(const keel_tensor *x, const keel_tensor *index,
                         const keel_tensor *updates, bool overwrite,
                         keel_tensor **out)
{
    keel_attr a = keel_attr_bool("overwrite", overwrite);
    return run_attrs(KEEL_OP_SCATTER, IN(x, index, updates), 3, &a, 1, out);
}

keel_status keel_take_along_axis(const keel_tensor *x,
                                 const keel_tensor *index, int axis,
                                 keel_tensor **out)
{
    keel_attr a = keel_attr_int("axis", axis);
    return run_attrs(KEEL_OP_TAKE_ALONG_AXIS, IN(x, index), 2, &a, 1, out);
}

keel_status keel_tile(const keel_tensor *x, int n, const int64_t *repeat_times,
                      keel_tensor **out)
{
    keel_attr a = keel_attr_ints("repeat_times", repeat_times, n);
    keel_status st = check_list(__func__, "repeat_times", n, repeat_times);

    if (st != KEEL_STATUS_OK)
        return st;
    return run_attrs(KEEL_OP_TILE, IN(x), 1, &a, 1, out);
}

keel_status keel_flip(const keel_tensor *x, int naxes, const int *axes,
                      keel_tensor **out)
{
    int64_t ax[KEEL_MAX_DIMS];
    keel_status st = to_axes(__func__, naxes, axes, ax);
    keel_attr a = keel_attr_ints("axis", ax, naxes);

    if (st != KEEL_STATUS_OK)
        return st;
    return run_attrs(KEEL_OP_FLIP, IN(x), 1, &a, 1, out);
}

keel_status keel_pad(const keel_tensor *x, int npad, const int64_t *pad,
                     const char *mode, double value, keel_tensor **out)
{
    keel_attr a[3] = {keel_attr_ints("pad", pad, npad),
                      keel_attr_str("mode", mode ? mode : "constant"),
                      keel_attr_float("value", value)};
    keel_status st = check_list(__func__, "pad", npad, pad);

    if (st != KEEL_STATUS_OK)
        return st;
    return run_attrs(KEEL_OP_PAD, IN(x), 1, a, 3, out);
}

static keel_status two_outputs(keel_op_id op, const keel_tensor *x,
                               const keel_attr *a, int na, keel_tensor **o0,
                               keel_tensor **o1)
{
    keel_tensor *outs[2] = {NULL, NULL};
    int got = 0;
    keel_status st;

    st = keel_op_run(op, (keel_tensor *const *)IN(x), 1, a, na, outs, 2,
                     &got);
    if (st != KEEL_STATUS_OK)
        return st;
    if (o0)
        *o0 = outs[0];
    else
        keel_tensor_free(outs[0]);
    if (o1)
        *o1 = outs[1];
    else
        keel_tensor_free(outs[1]);
    return KEEL_STATUS_OK;
}

keel_status keel_topk(const keel_tensor *x, int64_t k, int axis, bool largest,
                      bool sorted, keel_tensor **values,
                      keel_tensor **indices)
{
    keel_attr a[4] = {keel_attr_int("k", k), keel_attr_int("axis", axis),
                      keel_attr_bool("largest", largest),
                      keel_attr_bool("sorted", sorted)};
    return two_outputs(KEEL_OP_TOPK, x, a, 4, values, indices);
}

keel_status keel_sort(const keel_tensor *x, int axis, bool descending,
                      keel_tensor **values, keel_tensor **indices)
{
    keel_attr a[2] = {keel_attr_int("axis", axis),
                      keel_attr_bool("descending", descending)};
    return two_outputs(KEEL_OP_SORT, x, a, 2, values, indices);
}

keel_status keel_argsort(const keel_tensor *x, int axis, bool descending,
                         keel_tensor **out)
{
    keel_attr a[2] = {keel_attr_int("axis", axis),
                      keel_attr_bool("descending", descending)};
    return run_attrs(KEEL_OP_ARGSORT, IN(x), 1, a, 2, out);
}

/* ---- mixed precision ------------------------------------------------------- */

keel_status keel_check_finite_and_unscale(keel_tensor *x,
                                          const keel_tensor *scale,
                                          keel_tensor *found_inf)
{
    return keel_op_run(KEEL_OP_CHECK_FINITE_AND_UNSCALE,
                       (keel_tensor *const[]){x, (keel_tensor *)scale,
                                              found_inf},
                       3, NULL, 0, NULL, 0, NULL);
}
