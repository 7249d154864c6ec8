/*
 * Shape rules of convolution and pooling (NCHW).
 *
 * Geometry, shared by every conv op (Paddle semantics):
 *   stride, dilation   1 or 2 values (>= 1)
 *   padding            1, 2 (h, w) or 4 (top, bottom, left, right) values
 *   padding_algorithm  EXPLICIT uses `padding`; VALID pads nothing; SAME
 *                      pads each spatial dim of the input `in` so that
 *                      out = ceil(in / stride): total = max((out - 1) *
 *                      stride + (k - 1) * dilation + 1 - in, 0), half on
 *                      top/left, the extra one on bottom/right
 *   conv2d             out = (in + pads - ((k - 1) * dilation + 1)) /
 *                      stride + 1, an error when the dilated kernel does
 *                      not fit the padded input
 *   conv2d_transpose   out = (in - 1) * stride - pads + (k - 1) *
 *                      dilation + 1 + output_padding, output_padding <
 *                      max(stride, dilation); SAME pads are computed from
 *                      the transposed conv's input as for conv2d
 *
 * fused_conv2d: conv2d's rule, after its `activation` is checked.
 *
 * The *_grad ops take (x, weight, dout) and give (dx, dweight[, dbias]):
 * with has_bias = 0 there are two outputs.
 *
 * Pooling: kernel_size 1 or 2 values, stride empty (= kernel_size) or 1 or
 * 2 values, padding as above; out = (in + pads - k) / stride + 1, rounded
 * up with ceil_mode. max_pool2d gives (out, int64 index of the maximum
 * within the H*W plane). adaptive_avg_pool2d's output_size has 1 or 2
 * values; -1 keeps that input dim.
 *
 * Inputs are promoted to their common floating dtype; non-floating inputs
 * are refused (the indices of max_pool2d_grad are int64 and stay so).
 */
#include <string.h>

#include "dispatch/dispatch_internal.h"

/* ---- helpers ------------------------------------------------------------- */

static bool is_float_dtype(keel_dtype dt)
{
    return dt == KEEL_F32 || dt == KEEL_F64 || dt == KEEL_F16 ||
           dt == KEEL_BF16;
}

/* Floating check and promotion of the inputs whose bit is in `mask`. */
static keel_status promote_mask(struct keel_op_call *c, uint32_t mask,
                                keel_dtype *out)
{
    keel_dtype dt = KEEL_BOOL;
    keel_status st;
    bool first = true;

    for (int i = 0; i < c->nin; i++) {
        if (!(mask & (1u << i)))
            continue;
        if (!is_float_dtype(c->in[i]->dtype))
            return keel__op_error(c, KEEL_STATUS_NOT_SUPPORTED,
                                  "input %d is %s; this op is defined for "
                                  "floating-point dtypes only",
                                  i, keel_dtype_name(c->in[i]->dtype));
        dt = first ? c->in[i]->dtype : keel_dtype_promote(dt, c->in[i]->dtype);
        first = false;
    }
    for (int i = 0; i < c->nin; i++)
        if ((mask & (1u << i)) && (st = keel__cast_input(c, i, dt)))
            return st;
    *out = dt;
    return KEEL_STATUS_OK;
}

static void set_out(struct keel_op_call *c, int k, keel_dtype dt, int ndim,
                    const int64_t *shape)
{
    c->out_dtype[k] = dt;
    c->out_ndim[k] = ndim;
    memcpy(c->out_shape[k], shape, sizeof(int64_t) * (size_t)ndim);
    if (c->nout < k + 1)
        c->nout = k + 1;
}

static keel_status need_4d(struct keel_op_call *c, int i, const char *what)
{
    if (c->in[i]->ndim != 4)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "%s must be 4-D, got %d dims", what,
                              c->in[i]->ndim);
    return KEEL_STATUS_OK;
}

static bool same_shape(const keel_tensor *t, const int64_t *shape)
{
    for (int i = 0; i < 4; i++)
        if (t->shape[i] != shape[i])
            return false;
    return true;
}

/* An (h, w) pair from an ints attribute of 1 or 2 values >= lo. An empty
 * list gives `def` when def is non-NULL. */
static keel_status pair_attr(struct keel_op_call *c, const char *name,
                             int64_t lo, const int64_t *def, int64_t out[2])
{
    const keel_attr *a = keel__attr(c, name);
    int64_t n = a->v.ints.count;

    if (n == 0 && def) {
        out[0] = def[0];
        out[1] = def[1];
        return KEEL_STATUS_OK;
    }
    if (n != 1 && n != 2)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "attribute '%s' needs 1 or 2 values, got %lld",
                              name, (long long)n);
    out[0] = a->v.ints.data[0];
    out[1] = a->v.ints.data[n - 1];
    if (out[0] < lo || out[1] < lo)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "attribute '%s' = [%lld, %lld] must be >= %lld",
                              name, (long long)out[0], (long long)out[1],
                              (long long)lo);
    return KEEL_STATUS_OK;
}

/* padding -> (top, bottom, left, right). */
static keel_status pad_attr(struct keel_op_call *c, int64_t pad[4])
{
    const keel_attr *a = keel__attr(c, "padding");
    const int64_t *v = a->v.ints.data;
    int64_t n = a->v.ints.count;

    if (n == 1) {
        pad[0] = pad[1] = pad[2] = pad[3] = v[0];
    } else if (n == 2) {
        pad[0] = pad[1] = v[0];
        pad[2] = pad[3] = v[1];
    } else if (n == 4) {
        memcpy(pad, v, 4 * sizeof(int64_t));
    } else {
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "attribute 'padding' needs 1, 2 or 4 values "
                              "(top, bottom, left, right), got %lld",
                              (long long)n);
    }
    for (int i = 0; i < 4; i++)
        if (pad[i] < 0)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "padding values must be >= 0, got %lld",
                                  (long long)pad[i]);
    return KEEL_STATUS_OK;
}

/* ---- convolution geometry ------------------------------------------------ */

/* Attributes are any int64_t, so the geometry is computed with checked
 * arithmetic; a result that does not fit is an error naming the dim. */
static keel_status geo_overflow(struct keel_op_call *c, int i)
{
    return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                          "the geometry of spatial dim %d (kernel, stride, "
                          "dilation, padding) overflows int64",
                          i + 2);
}

/* *r = a * b + d, false on overflow. */
static bool mul_add(int64_t a, int64_t b, int64_t d, int64_t *r)
{
    return !__builtin_mul_overflow(a, b, r) && !__builtin_add_overflow(*r, d, r);
}

struct conv_geo {
    int64_t stride[2], dil[2], pad[4], groups, outpad[2];
    int64_t k[2]; /* kernel h, w */
};

static keel_status conv_attrs(struct keel_op_call *c, bool transpose,
                              const int64_t in[2], struct conv_geo *g)
{
    const char *algo = keel__attr_s(c, "padding_algorithm");
    keel_status st;

    if ((st = pair_attr(c, "stride", 1, NULL, g->stride)) ||
        (st = pair_attr(c, "dilation", 1, NULL, g->dil)) ||
        (st = pad_attr(c, g->pad)))
        return st;
    g->groups = keel__attr_i(c, "groups");
    if (g->groups < 1)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "groups = %lld must be >= 1",
                              (long long)g->groups);
    g->outpad[0] = g->outpad[1] = 0;
    if (transpose) {
        static const int64_t zero[2] = {0, 0};
        if ((st = pair_attr(c, "output_padding", 0, zero, g->outpad)))
            return st;
        for (int i = 0; i < 2; i++)
            if (g->outpad[i] >= g->stride[i] && g->outpad[i] >= g->dil[i])
                return keel__op_error(
                    c, KEEL_STATUS_INVALID_ARGUMENT,
                    "output_padding %lld must be smaller than the stride "
                    "(%lld) or the dilation (%lld)",
                    (long long)g->outpad[i], (long long)g->stride[i],
                    (long long)g->dil[i]);
    }
    if (!strcmp(algo, "VALID")) {
        memset(g->pad, 0, sizeof(g->pad));
    } else if (!strcmp(algo, "SAME")) {
        for (int i = 0; i < 2; i++) {
            int64_t out = in[i] / g->stride[i] + (in[i] % g->stride[i] != 0);
            int64_t ek, total;
            /* (out - 1) * stride < in: only the dilated kernel can
             * overflow */
            if (!mul_add(g->k[i] - 1, g->dil[i], 1, &ek) ||
                __builtin_add_overflow((out - 1) * g->stride[i] - in[i], ek,
                                       &total))
                return geo_overflow(c, i);
            if (total < 0)
                total = 0;
            g->pad[2 * i] = total / 2;
            g->pad[2 * i + 1] = total - total / 2;
        }
    } else if (strcmp(algo, "EXPLICIT")) {
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "padding_algorithm must be EXPLICIT, SAME or "
                              "VALID, got '%s'",
                              algo);
    }
    return KEEL_STATUS_OK;
}

/* Output spatial dims of conv2d over `in` (error when the kernel does not
 * fit). */
static keel_status conv_out(struct keel_op_call *c, const struct conv_geo *g,
                            const int64_t in[2], int64_t out[2])
{
    for (int i = 0; i < 2; i++) {
        int64_t ek, span;
        if (!mul_add(g->k[i] - 1, g->dil[i], 1, &ek) ||
            __builtin_add_overflow(in[i], g->pad[2 * i], &span) ||
            __builtin_add_overflow(span, g->pad[2 * i + 1], &span))
            return geo_overflow(c, i);
        if (ek > span || in[i] < 1)
            return keel__op_error(
                c, KEEL_STATUS_INVALID_ARGUMENT,
                "the kernel %lldx%lld (dilated %lld along dim %d) is larger "
                "than the padded input (%lld)",
                (long long)g->k[0], (long long)g->k[1], (long long)ek, i + 2,
                (long long)span);
        out[i] = (span - ek) / g->stride[i] + 1;
    }
    return KEEL_STATUS_OK;
}

static keel_status convt_out(struct keel_op_call *c, const struct conv_geo *g,
                             const int64_t in[2], int64_t out[2])
{
    for (int i = 0; i < 2; i++) {
        int64_t ek;
        if (in[i] < 1)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "the transposed convolution's input dim "
                                  "%d is empty",
                                  i + 2);
        /* pads are >= 0 and outpad < max(stride, dilation) */
        if (!mul_add(g->k[i] - 1, g->dil[i], 1 + g->outpad[i], &ek) ||
            !mul_add(in[i] - 1, g->stride[i], -g->pad[2 * i], &out[i]) ||
            __builtin_sub_overflow(out[i], g->pad[2 * i + 1], &out[i]) ||
            __builtin_add_overflow(out[i], ek, &out[i]))
            return geo_overflow(c, i);
        if (out[i] < 1)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "the transposed convolution's output dim "
                                  "%d would be %lld (padding too large for "
                                  "the input)",
                                  i + 2, (long long)out[i]);
    }
    return KEEL_STATUS_OK;
}

/* Checks shared by conv2d and conv2d_transpose on (x, weight[, bias]):
 * fills the output shape [N, O, oh, ow] and the dtype. */
static keel_status conv_common(struct keel_op_call *c, bool transpose,
                               int nin_lo, int nin_hi, uint32_t float_mask,
                               int64_t out[4], keel_dtype *dt)
{
    const keel_tensor *x, *w;
    struct conv_geo g;
    int64_t in[2], sp[2], cin, cout;
    keel_status st;

    if (c->nin < nin_lo || c->nin > nin_hi)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "takes %d to %d inputs, got %d", nin_lo, nin_hi,
                              c->nin);
    if ((st = promote_mask(c, float_mask, dt)) ||
        (st = need_4d(c, 0, "x [N, C, H, W]")) ||
        (st = need_4d(c, 1, "weight")))
        return st;
    x = c->in[0];
    w = c->in[1];
    in[0] = x->shape[2];
    in[1] = x->shape[3];
    g.k[0] = w->shape[2];
    g.k[1] = w->shape[3];
    if (g.k[0] < 1 || g.k[1] < 1)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "the kernel must be at least 1x1");
    if ((st = conv_attrs(c, transpose, in, &g)))
        return st;
    if (x->shape[1] % g.groups)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "groups = %lld does not divide the %lld input "
                              "channels",
                              (long long)g.groups, (long long)x->shape[1]);
    if (!transpose) {
        cin = w->shape[1] * g.groups;
        cout = w->shape[0];
        if (cout % g.groups)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "groups = %lld does not divide the %lld "
                                  "output channels",
                                  (long long)g.groups, (long long)cout);
        if (cin != x->shape[1])
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "channel mismatch: x has %lld channels, "
                                  "weight [O, C/groups, kh, kw] expects "
                                  "%lld x %lld groups",
                                  (long long)x->shape[1],
                                  (long long)w->shape[1],
                                  (long long)g.groups);
        st = conv_out(c, &g, in, sp);
    } else {
        cin = w->shape[0];
        cout = w->shape[1] * g.groups;
        if (cin != x->shape[1])
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "channel mismatch: x has %lld channels, "
                                  "weight [C, O/groups, kh, kw] expects %lld",
                                  (long long)x->shape[1], (long long)cin);
        st = convt_out(c, &g, in, sp);
    }
    if (st)
        return st;
    out[0] = x->shape[0];
    out[1] = cout;
    out[2] = sp[0];
    out[3] = sp[1];
    return KEEL_STATUS_OK;
}

static keel_status conv_fwd(struct keel_op_call *c, bool transpose)
{
    int64_t out[4];
    keel_dtype dt;
    keel_status st = conv_common(c, transpose, 2, 3, 7u, out, &dt);

    if (st)
        return st;
    if (c->nin == 3 && (c->in[2]->ndim != 1 || c->in[2]->shape[0] != out[1]))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "bias must be 1-D with %lld elements (the "
                              "output channels)",
                              (long long)out[1]);
    c->key_dtype = dt;
    set_out(c, 0, dt, 4, out);
    return KEEL_STATUS_OK;
}

/* (x, weight, dout) -> (dx, dweight[, dbias]). */
static keel_status conv_bwd(struct keel_op_call *c, bool transpose)
{
    int64_t out[4];
    keel_dtype dt;
    keel_status st = conv_common(c, transpose, 3, 3, 7u, out, &dt);

    if (st)
        return st;
    if (c->in[2]->ndim != 4 || !same_shape(c->in[2], out))
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "dout must have the forward output's shape "
                              "[%lld, %lld, %lld, %lld]",
                              (long long)out[0], (long long)out[1],
                              (long long)out[2], (long long)out[3]);
    c->key_dtype = dt;
    set_out(c, 0, dt, 4, c->in[0]->shape);
    set_out(c, 1, dt, 4, c->in[1]->shape);
    if (keel__attr_i(c, "has_bias"))
        set_out(c, 2, dt, 1, &out[1]);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_conv2d(struct keel_op_call *c)
{
    return conv_fwd(c, false);
}

/* conv2d's rule after the activation's check (shape_linalg.c). */
keel_status keel__shape_fused_conv2d(struct keel_op_call *c)
{
    keel_status st = keel__check_activation(c);

    return st ? st : conv_fwd(c, false);
}

keel_status keel__shape_conv2d_transpose(struct keel_op_call *c)
{
    return conv_fwd(c, true);
}

keel_status keel__shape_conv2d_grad(struct keel_op_call *c)
{
    return conv_bwd(c, false);
}

keel_status keel__shape_conv2d_transpose_grad(struct keel_op_call *c)
{
    return conv_bwd(c, true);
}

/* ---- pooling ------------------------------------------------------------- */

/* Output shape of max/avg pooling of input 0 with the op's attributes. */
static keel_status pool_out(struct keel_op_call *c, int64_t out[4])
{
    const keel_tensor *x = c->in[0];
    int64_t k[2], s[2], pad[4];
    bool ceil_mode = keel__attr_i(c, "ceil_mode") != 0;
    keel_status st;

    if ((st = pair_attr(c, "kernel_size", 1, NULL, k)) ||
        (st = pair_attr(c, "stride", 1, k, s)) || (st = pad_attr(c, pad)))
        return st;
    out[0] = x->shape[0];
    out[1] = x->shape[1];
    for (int i = 0; i < 2; i++) {
        int64_t span;
        if (__builtin_add_overflow(x->shape[2 + i], pad[2 * i], &span) ||
            __builtin_add_overflow(span, pad[2 * i + 1], &span) ||
            (ceil_mode && __builtin_add_overflow(span, s[i], &out[2 + i])))
            return geo_overflow(c, i);
        span -= k[i];
        if (span < 0 || x->shape[2 + i] < 1)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "the kernel %lldx%lld is larger than the "
                                  "padded input (dim %d: %lld)",
                                  (long long)k[0], (long long)k[1], i + 2,
                                  (long long)(span + k[i]));
        out[2 + i] = (span + (ceil_mode ? s[i] - 1 : 0)) / s[i] + 1;
    }
    return KEEL_STATUS_OK;
}

static keel_status adaptive_out(struct keel_op_call *c, int64_t out[4])
{
    const keel_attr *a = keel__attr(c, "output_size");
    const keel_tensor *x = c->in[0];
    int64_t n = a->v.ints.count;

    if (n != 1 && n != 2)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "attribute 'output_size' needs 1 or 2 values, "
                              "got %lld",
                              (long long)n);
    out[0] = x->shape[0];
    out[1] = x->shape[1];
    for (int i = 0; i < 2; i++) {
        int64_t v = a->v.ints.data[n == 1 ? 0 : i];
        if (v == -1)
            v = x->shape[2 + i];
        if (v < 1)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "output_size values must be >= 1 (or -1 "
                                  "to keep the input size), got %lld",
                                  (long long)a->v.ints.data[n == 1 ? 0 : i]);
        if (x->shape[2 + i] < 1)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "input spatial dim %d is empty", i + 2);
        out[2 + i] = v;
    }
    return KEEL_STATUS_OK;
}

keel_status keel__shape_pool2d(struct keel_op_call *c)
{
    int64_t out[4];
    keel_dtype dt;
    keel_status st;

    if (c->nin != 1)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "takes 1 input, got %d", c->nin);
    if ((st = promote_mask(c, 1u, &dt)) ||
        (st = need_4d(c, 0, "x [N, C, H, W]")) || (st = pool_out(c, out)))
        return st;
    c->key_dtype = dt;
    set_out(c, 0, dt, 4, out);
    if (c->op == KEEL_OP_MAX_POOL2D)
        set_out(c, 1, KEEL_I64, 4, out);
    return KEEL_STATUS_OK;
}

keel_status keel__shape_adaptive_pool2d(struct keel_op_call *c)
{
    int64_t out[4];
    keel_dtype dt;
    keel_status st;

    if (c->nin != 1)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "takes 1 input, got %d", c->nin);
    if ((st = promote_mask(c, 1u, &dt)) ||
        (st = need_4d(c, 0, "x [N, C, H, W]")) ||
        (st = adaptive_out(c, out)))
        return st;
    c->key_dtype = dt;
    set_out(c, 0, dt, 4, out);
    return KEEL_STATUS_OK;
}

/* max_pool2d_grad (x, indices, dout); avg_pool2d_grad and
 * adaptive_avg_pool2d_grad (x, dout). dout takes x's dtype. */
keel_status keel__shape_pool2d_grad(struct keel_op_call *c)
{
    bool is_max = c->op == KEEL_OP_MAX_POOL2D_GRAD;
    int want = is_max ? 3 : 2, dout = want - 1;
    int64_t out[4];
    keel_dtype dt;
    keel_status st;

    if (c->nin != want)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "takes %d inputs, got %d", want, c->nin);
    if ((st = promote_mask(c, 1u | (1u << dout), &dt)) ||
        (st = need_4d(c, 0, "x [N, C, H, W]")) ||
        (st = need_4d(c, dout, "dout")))
        return st;
    if (is_max) {
        const keel_tensor *idx = c->in[1];
        if (idx->dtype != KEEL_I64)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "indices must be int64, got %s",
                                  keel_dtype_name(idx->dtype));
        if ((st = need_4d(c, 1, "indices")))
            return st;
        memcpy(out, c->in[2]->shape, sizeof(out));
        if (!same_shape(idx, out) || out[0] != c->in[0]->shape[0] ||
            out[1] != c->in[0]->shape[1])
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "indices and dout must have one shape "
                                  "[N, C, oh, ow] with x's N and C");
    } else {
        st = c->op == KEEL_OP_AVG_POOL2D_GRAD ? pool_out(c, out)
                                              : adaptive_out(c, out);
        if (st)
            return st;
        if (!same_shape(c->in[1], out))
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "dout must have the forward output's shape "
                                  "[%lld, %lld, %lld, %lld]",
                                  (long long)out[0], (long long)out[1],
                                  (long long)out[2], (long long)out[3]);
    }
    c->key_dtype = dt;
    set_out(c, 0, dt, 4, c->in[0]->shape);
    return KEEL_STATUS_OK;
}
