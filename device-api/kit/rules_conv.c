/*
 * keel kernel kit — checks of the conv shape rules (see docs/ops.md,
 * "What a kernel receives", for what each promises a kernel), and the conv
 * and pool geometry kernels get from keel_kit_conv_geometry and
 * keel_kit_pool_geometry.
 *
 * The geometry is the core's (core/src/shape_conv.c, whose header comment
 * states it): the rules below and the public geometry functions share one
 * resolution of the attributes, so that a launch the check accepted gives
 * a kernel its geometry without a second opinion. Attributes are any
 * int64_t, so everything is computed with checked arithmetic and a value
 * that does not fit is refused.
 */
#include <stdarg.h>
#include <stdio.h>

#include "kit_internal.h"

/* ---- helpers ------------------------------------------------------------- */

/* INVALID_ARGUMENT with "<op>: <message>" in m (which may be NULL): the
 * geometry functions have no kit_ctx, so the rules share this form. */
static keel_status bad(keel_kit_msg *m, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static keel_status bad(keel_kit_msg *m, const char *op, const char *fmt, ...)
{
    char text[sizeof(m->text)];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    return kit_bad_msg(m, "%s: %s", op, text);
}

static keel_status overflow(keel_kit_msg *m, const char *op, int dim)
{
    return bad(m, op, "the geometry of spatial dim %d (kernel, stride, "
               "dilation, padding) overflows int64", dim + 2);
}

/* *r = a * b + d, false on overflow. */
static bool mul_add(int64_t a, int64_t b, int64_t d, int64_t *r)
{
    return !__builtin_mul_overflow(a, b, r) &&
           !__builtin_add_overflow(*r, d, r);
}

/* An (h, w) pair from ints attribute `name`: 1 or 2 values >= lo. An
 * absent or empty list gives `def`, or is refused when def is NULL. */
static keel_status pair_attr(keel_kit_msg *m, const char *op,
                             const keel_kernel_args *a, const char *name,
                             int64_t lo, const int64_t *def, int64_t out[2])
{
    int64_t n;
    const int64_t *v = keel_kit_attr_ints(a, name, &n);

    if (n == 0 && def) {
        out[0] = def[0];
        out[1] = def[1];
        return KEEL_STATUS_OK;
    }
    if (n != 1 && n != 2)
        return bad(m, op, "attribute '%s' needs 1 or 2 values, got %lld",
                   name, (long long)n);
    out[0] = v[0];
    out[1] = v[n - 1];
    if (out[0] < lo || out[1] < lo)
        return bad(m, op, "attribute '%s' = [%lld, %lld] must be >= %lld",
                   name, (long long)out[0], (long long)out[1],
                   (long long)lo);
    return KEEL_STATUS_OK;
}

/* padding -> (top, bottom, left, right); absent or empty: zeros. */
static keel_status pad_attr(keel_kit_msg *m, const char *op,
                            const keel_kernel_args *a, int64_t pad[4])
{
    int64_t n;
    const int64_t *v = keel_kit_attr_ints(a, "padding", &n);

    if (n == 0) {
        memset(pad, 0, 4 * sizeof(int64_t));
    } else if (n == 1) {
        pad[0] = pad[1] = pad[2] = pad[3] = v[0];
    } else if (n == 2) {
        pad[0] = pad[1] = v[0];
        pad[2] = pad[3] = v[1];
    } else if (n == 4) {
        memcpy(pad, v, 4 * sizeof(int64_t));
    } else {
        return bad(m, op, "attribute 'padding' needs 1, 2 or 4 values "
                   "(top, bottom, left, right), got %lld", (long long)n);
    }
    for (int i = 0; i < 4; i++)
        if (pad[i] < 0)
            return bad(m, op, "padding values must be >= 0, got %lld",
                       (long long)pad[i]);
    return KEEL_STATUS_OK;
}

/* d is 4-D with exactly `want`'s dims. */
static keel_status match4(keel_kit_msg *m, const char *op, const char *what,
                          const keel_tensor_desc *d, const int64_t want[4])
{
    char got[160], exp[160];

    if (d->ndim != 4 || memcmp(d->shape, want, 4 * sizeof(int64_t)))
        return bad(m, op, "%s has shape %s, expected %s", what,
                   kit_shape_str(got, sizeof(got), d->ndim, d->shape),
                   kit_shape_str(exp, sizeof(exp), 4, want));
    return KEEL_STATUS_OK;
}

static keel_status need4(keel_kit_msg *m, const char *op, const char *what,
                         const keel_tensor_desc *d)
{
    if (d->ndim != 4)
        return bad(m, op, "%s must be 4-D, got %d dims", what, (int)d->ndim);
    return KEEL_STATUS_OK;
}

/* ---- convolution geometry ------------------------------------------------ */

/*
 * Resolve a conv2d (transpose false) or conv2d_transpose over the op's own
 * input x and weight w: fills g (in the conv2d view, see kit.h) and y, the
 * op's output shape [N, O, oh, ow].
 */
static keel_status conv_resolve(keel_kit_msg *m, const char *op,
                                const keel_kernel_args *a, bool transpose,
                                const keel_tensor_desc *x,
                                const keel_tensor_desc *w, keel_kit_conv *g,
                                int64_t y[4])
{
    static const int64_t ones[2] = {1, 1}, zeros[2] = {0, 0};
    const char *algo = keel_kit_attr_s(a, "padding_algorithm", "EXPLICIT");
    int64_t st[2], dil[2], pad[4], opad[2] = {0, 0}, k[2], in[2], out[2];
    int64_t groups, ch, oc;
    keel_status s;

    if ((s = need4(m, op, "x [N, C, H, W]", x)) ||
        (s = need4(m, op, transpose ? "weight [C, O/groups, kh, kw]"
                                    : "weight [O, C/groups, kh, kw]",
                   w)))
        return s;
    k[0] = w->shape[2];
    k[1] = w->shape[3];
    if (k[0] < 1 || k[1] < 1)
        return bad(m, op, "the kernel %lldx%lld must be at least 1x1",
                   (long long)k[0], (long long)k[1]);
    if ((s = pair_attr(m, op, a, "stride", 1, ones, st)) ||
        (s = pair_attr(m, op, a, "dilation", 1, ones, dil)) ||
        (s = pad_attr(m, op, a, pad)))
        return s;
    groups = keel_kit_attr_i(a, "groups", 1);
    if (groups < 1)
        return bad(m, op, "groups = %lld must be >= 1", (long long)groups);
    if (transpose) {
        if ((s = pair_attr(m, op, a, "output_padding", 0, zeros, opad)))
            return s;
        for (int i = 0; i < 2; i++)
            if (opad[i] >= st[i] && opad[i] >= dil[i])
                return bad(m, op, "output_padding %lld must be smaller than "
                           "the stride (%lld) or the dilation (%lld)",
                           (long long)opad[i], (long long)st[i],
                           (long long)dil[i]);
    }
    in[0] = x->shape[2];
    in[1] = x->shape[3];
    if (in[0] < 1 || in[1] < 1)
        return bad(m, op, "x's spatial dims %lldx%lld must not be empty",
                   (long long)in[0], (long long)in[1]);
    if (!strcmp(algo, "VALID")) {
        memset(pad, 0, sizeof(pad));
    } else if (!strcmp(algo, "SAME")) {
        for (int i = 0; i < 2; i++) {
            int64_t o = in[i] / st[i] + (in[i] % st[i] != 0), ek, total;
            /* (o - 1) * stride < in: only the dilated kernel can overflow */
            if (!mul_add(k[i] - 1, dil[i], 1, &ek) ||
                __builtin_add_overflow((o - 1) * st[i] - in[i], ek, &total))
                return overflow(m, op, i);
            if (total < 0)
                total = 0;
            pad[2 * i] = total / 2;
            pad[2 * i + 1] = total - total / 2;
        }
    } else if (strcmp(algo, "EXPLICIT")) {
        return bad(m, op, "padding_algorithm must be EXPLICIT, SAME or "
                   "VALID, got '%s'", algo);
    }

    /* Channels, in the op's own terms. */
    ch = x->shape[1];
    if (ch % groups)
        return bad(m, op, "groups = %lld does not divide x's %lld channels",
                   (long long)groups, (long long)ch);
    if (!transpose) {
        oc = w->shape[0];
        if (oc % groups)
            return bad(m, op, "groups = %lld does not divide the weight's "
                       "%lld output channels", (long long)groups,
                       (long long)oc);
        if (w->shape[1] != ch / groups)
            return bad(m, op, "channel mismatch: weight [O, C/groups, kh, "
                       "kw] has %lld channels per group, x's %lld channels "
                       "in %lld groups need %lld", (long long)w->shape[1],
                       (long long)ch, (long long)groups,
                       (long long)(ch / groups));
    } else {
        if (w->shape[0] != ch)
            return bad(m, op, "channel mismatch: weight [C, O/groups, kh, "
                       "kw] has %lld input channels, x has %lld",
                       (long long)w->shape[0], (long long)ch);
        if (__builtin_mul_overflow(w->shape[1], groups, &oc))
            return bad(m, op, "the output channels (weight dim 1 x groups "
                       "= %lld) overflow int64", (long long)groups);
    }

    /* Spatial dims. */
    for (int i = 0; i < 2; i++) {
        int64_t ek, span;
        if (!mul_add(k[i] - 1, dil[i], 1, &ek))
            return overflow(m, op, i);
        if (!transpose) {
            if (__builtin_add_overflow(in[i], pad[2 * i], &span) ||
                __builtin_add_overflow(span, pad[2 * i + 1], &span))
                return overflow(m, op, i);
            if (ek > span)
                return bad(m, op, "the kernel %lldx%lld (dilated %lld along "
                           "dim %d) is larger than the padded input (%lld)",
                           (long long)k[0], (long long)k[1], (long long)ek,
                           i + 2, (long long)span);
            out[i] = (span - ek) / st[i] + 1;
        } else {
            /* pads are >= 0 and output_padding < max(stride, dilation) */
            if (!mul_add(in[i] - 1, st[i], -pad[2 * i], &out[i]) ||
                __builtin_sub_overflow(out[i], pad[2 * i + 1], &out[i]) ||
                __builtin_add_overflow(out[i], ek, &out[i]) ||
                __builtin_add_overflow(out[i], opad[i], &out[i]))
                return overflow(m, op, i);
            if (out[i] < 1)
                return bad(m, op, "the transposed convolution's output dim "
                           "%d would be %lld (padding too large for the "
                           "input)", i + 2, (long long)out[i]);
        }
    }
    y[0] = x->shape[0];
    y[1] = oc;
    y[2] = out[0];
    y[3] = out[1];

    /* The conv2d view: a transposed conv swaps the sides. */
    memset(g, 0, sizeof(*g));
    g->n = x->shape[0];
    g->c = transpose ? oc : ch;
    g->h = transpose ? out[0] : in[0];
    g->w = transpose ? out[1] : in[1];
    g->o = transpose ? ch : oc;
    g->oh = transpose ? in[0] : out[0];
    g->ow = transpose ? in[1] : out[1];
    g->kh = k[0];
    g->kw = k[1];
    g->sh = st[0];
    g->sw = st[1];
    g->dh = dil[0];
    g->dw = dil[1];
    memcpy(g->pad, pad, sizeof(pad));
    g->groups = groups;
    g->output_padding[0] = opad[0];
    g->output_padding[1] = opad[1];
    g->cg = g->c / groups;
    g->og = g->o / groups;
    /* What kernels multiply beyond one descriptor's dims (an empty batch
     * or channel dim leaves the others unbounded). */
    {
        int64_t t;
        if (__builtin_mul_overflow(g->h, g->w, &t) ||
            __builtin_mul_overflow(g->oh, g->ow, &t) ||
            __builtin_mul_overflow(g->cg, g->kh, &t) ||
            __builtin_mul_overflow(t, g->kw, &t))
            return bad(m, op, "the planes or the kernel volume per group "
                       "overflow int64");
    }
    return KEEL_STATUS_OK;
}

keel_status keel_kit_conv_geometry(const keel_kernel_args *a, bool transpose,
                                   const keel_tensor_desc *big,
                                   const keel_tensor_desc *weight,
                                   const keel_tensor_desc *small,
                                   keel_kit_conv *g, keel_kit_msg *msg)
{
    const char *op = transpose ? "conv2d_transpose" : "conv2d";
    const keel_tensor_desc *x = transpose ? small : big;
    int64_t y[4];
    keel_status s;

    if (msg)
        msg->text[0] = 0;
    if (!a || !big || !weight || !small || !g)
        return bad(msg, op, "NULL argument to keel_kit_conv_geometry");
    if ((s = conv_resolve(msg, op, a, transpose, x, weight, g, y)))
        return s;
    return match4(msg, op, "the output side (output or dout)",
                  transpose ? big : small, y);
}

/* ---- conv rules -------------------------------------------------------------- */

/* (x, weight[, bias]) -> out */
static keel_status conv_fwd(const struct kit_ctx *c, bool transpose)
{
    const keel_tensor_desc *b;
    keel_kit_conv g;
    int64_t y[4];
    keel_status s;
    char got[160];

    if ((s = kit_inputs_between(c, 2, 3)) || (s = kit_arity(c, -1, 1)) ||
        (s = kit_need_float(c, 0)) || (s = kit_same_dtype(c, 7u, 0)) ||
        (s = conv_resolve(c->msg, c->info->name, c->a, transpose, KIN(c, 0),
                          KIN(c, 1), &g, y)))
        return s;
    b = KNIN(c) == 3 ? KIN(c, 2) : NULL;
    if (b && (b->ndim != 1 || b->shape[0] != y[1]))
        return kit_bad(c, "bias must be 1-D [%lld] (the output channels), "
                       "got %s", (long long)y[1],
                       kit_shape_str(got, sizeof(got), b->ndim, b->shape));
    return kit_out_is(c, 0, KIN(c, 0)->dtype, 4, y);
}

/* (x, weight, dout) -> (dx, dweight[, dbias]) */
static keel_status conv_bwd(const struct kit_ctx *c, bool transpose)
{
    bool has_bias = keel_kit_attr_i(c->a, "has_bias", 1) != 0;
    int nout = has_bias ? 3 : 2;
    keel_dtype dt;
    keel_kit_conv g;
    int64_t y[4];
    keel_status s;

    if (KNIN(c) != 3 || KNOUT(c) != nout)
        return kit_bad(c, "needs 3 inputs (x, weight, dout) and, with "
                       "has_bias = %d, %d outputs (dx, dweight%s), got %d "
                       "and %d", (int)has_bias, nout,
                       has_bias ? ", dbias" : "", (int)KNIN(c),
                       (int)KNOUT(c));
    if ((s = kit_need_float(c, 0)) || (s = kit_same_dtype(c, 7u, 0)) ||
        (s = conv_resolve(c->msg, c->info->name, c->a, transpose, KIN(c, 0),
                          KIN(c, 1), &g, y)) ||
        (s = match4(c->msg, c->info->name,
                    "dout (the forward output's gradient)", KIN(c, 2), y)))
        return s;
    dt = KIN(c, 0)->dtype;
    if ((s = kit_out_like(c, 0, KIN(c, 0), dt)) ||
        (s = kit_out_like(c, 1, KIN(c, 1), dt)))
        return s;
    return has_bias ? kit_out_is(c, 2, dt, 1, &y[1]) : KEEL_STATUS_OK;
}

keel_status kit_rule_conv2d(const struct kit_ctx *c)
{
    return conv_fwd(c, false);
}

keel_status kit_rule_fused_conv2d(const struct kit_ctx *c)
{
    keel_status s = kit_activation(c);

    return s ? s : conv_fwd(c, false);
}

keel_status kit_rule_conv2d_transpose(const struct kit_ctx *c)
{
    return conv_fwd(c, true);
}

keel_status kit_rule_conv2d_grad(const struct kit_ctx *c)
{
    return conv_bwd(c, false);
}

keel_status kit_rule_conv2d_transpose_grad(const struct kit_ctx *c)
{
    return conv_bwd(c, true);
}

/* ---- pooling geometry -------------------------------------------------------- */

static const char *pool_op(int kind)
{
    switch (kind) {
    case KEEL_KIT_POOL_MAX:
        return "max_pool2d";
    case KEEL_KIT_POOL_AVG:
        return "avg_pool2d";
    case KEEL_KIT_POOL_ADAPTIVE:
        return "adaptive_avg_pool2d";
    default:
        return "max_pool2d_grad";
    }
}

/*
 * Resolve the pooling of x for `kind` into g and y, the forward output's
 * shape. KEEL_KIT_POOL_INDEXED has no attributes to take the output's
 * spatial dims from: y[2] and y[3] are then -1 (any).
 */
static keel_status pool_resolve(keel_kit_msg *m, const char *op,
                                const keel_kernel_args *a, int kind,
                                const keel_tensor_desc *x, keel_kit_pool *g,
                                int64_t y[4])
{
    keel_status s;

    if ((s = need4(m, op, "x [N, C, H, W]", x)))
        return s;
    memset(g, 0, sizeof(*g));
    g->n = y[0] = x->shape[0];
    g->c = y[1] = x->shape[1];
    g->h = x->shape[2];
    g->w = x->shape[3];
    y[2] = y[3] = -1;
    if (kind == KEEL_KIT_POOL_INDEXED)
        return KEEL_STATUS_OK;
    if (g->h < 1 || g->w < 1)
        return bad(m, op, "x's spatial dims %lldx%lld must not be empty",
                   (long long)g->h, (long long)g->w);
    if (kind == KEEL_KIT_POOL_ADAPTIVE) {
        int64_t n, t, u;
        const int64_t *v = keel_kit_attr_ints(a, "output_size", &n);
        g->adaptive = true;
        if (n != 1 && n != 2)
            return bad(m, op, "attribute 'output_size' needs 1 or 2 values, "
                       "got %lld", (long long)n);
        for (int i = 0; i < 2; i++) {
            int64_t want = v[n == 1 ? 0 : i], in = x->shape[2 + i];
            int64_t o = want == -1 ? in : want;
            if (o < 1)
                return bad(m, op, "output_size values must be >= 1 (or -1 "
                           "to keep the input size), got %lld",
                           (long long)want);
            /* the window bounds (o + 1) * in / out stay in range */
            if (__builtin_add_overflow(in, 1, &t) ||
                __builtin_add_overflow(o, 1, &u) ||
                __builtin_mul_overflow(t, u, &t))
                return overflow(m, op, i);
            y[2 + i] = o;
        }
        g->oh = y[2];
        g->ow = y[3];
        return KEEL_STATUS_OK;
    }
    {
        int64_t k[2], st[2], pad[4];
        g->ceil_mode = keel_kit_attr_i(a, "ceil_mode", 0) != 0;
        g->exclusive =
            kind == KEEL_KIT_POOL_AVG && keel_kit_attr_i(a, "exclusive", 1);
        /* stride empty = kernel_size */
        if ((s = pair_attr(m, op, a, "kernel_size", 1, NULL, k)) ||
            (s = pair_attr(m, op, a, "stride", 1, k, st)) ||
            (s = pad_attr(m, op, a, pad)))
            return s;
        for (int i = 0; i < 2; i++) {
            int64_t span, t;
            if (__builtin_add_overflow(x->shape[2 + i], pad[2 * i], &span) ||
                __builtin_add_overflow(span, pad[2 * i + 1], &span) ||
                (g->ceil_mode && __builtin_add_overflow(span, st[i], &t)))
                return overflow(m, op, i);
            if (span < k[i])
                return bad(m, op, "the kernel %lldx%lld is larger than the "
                           "padded input (dim %d: %lld)", (long long)k[0],
                           (long long)k[1], i + 2, (long long)span);
            y[2 + i] = (span - k[i] + (g->ceil_mode ? st[i] - 1 : 0)) / st[i] +
                       1;
        }
        g->oh = y[2];
        g->ow = y[3];
        g->kh = k[0];
        g->kw = k[1];
        g->sh = st[0];
        g->sw = st[1];
        memcpy(g->pad, pad, sizeof(pad));
    }
    return KEEL_STATUS_OK;
}

/* out (the forward output or dout) against y; -1 entries match anything. */
static keel_status pool_match(keel_kit_msg *m, const char *op,
                              const char *what, const keel_tensor_desc *d,
                              const int64_t y[4])
{
    int64_t want[4];

    if (d->ndim == 4)
        for (int i = 0; i < 4; i++)
            want[i] = y[i] < 0 ? d->shape[i] : y[i];
    else
        memcpy(want, y, sizeof(want));
    return match4(m, op, what, d, want);
}

keel_status keel_kit_pool_geometry(const keel_kernel_args *a, int kind,
                                   const keel_tensor_desc *x,
                                   const keel_tensor_desc *out,
                                   keel_kit_pool *g, keel_kit_msg *msg)
{
    const char *op = pool_op(kind);
    int64_t y[4];
    keel_status s;

    if (msg)
        msg->text[0] = 0;
    if (!a || !x || !out || !g)
        return bad(msg, op, "NULL argument to keel_kit_pool_geometry");
    if (kind < KEEL_KIT_POOL_MAX || kind > KEEL_KIT_POOL_INDEXED)
        return bad(msg, op, "unknown pooling kind %d", kind);
    if ((s = pool_resolve(msg, op, a, kind, x, g, y)) ||
        (s = pool_match(msg, op, "the output side (output or dout)", out,
                        y)))
        return s;
    g->oh = out->shape[2];
    g->ow = out->shape[3];
    return KEEL_STATUS_OK;
}

/* ---- pooling rules ------------------------------------------------------------ */

/* max_pool2d x -> (out, int64 indices); avg_pool2d x -> out */
keel_status kit_rule_pool2d(const struct kit_ctx *c)
{
    bool is_max = c->op == KEEL_OP_MAX_POOL2D;
    keel_kit_pool g;
    int64_t y[4];
    keel_status s;

    if ((s = kit_arity(c, 1, is_max ? 2 : 1)) || (s = kit_need_float(c, 0)) ||
        (s = pool_resolve(c->msg, c->info->name, c->a,
                          is_max ? KEEL_KIT_POOL_MAX : KEEL_KIT_POOL_AVG,
                          KIN(c, 0), &g, y)) ||
        (s = kit_out_is(c, 0, KIN(c, 0)->dtype, 4, y)))
        return s;
    return is_max ? kit_out_is(c, 1, KEEL_I64, 4, y) : KEEL_STATUS_OK;
}

keel_status kit_rule_adaptive_pool2d(const struct kit_ctx *c)
{
    keel_kit_pool g;
    int64_t y[4];
    keel_status s;

    if ((s = kit_arity(c, 1, 1)) || (s = kit_need_float(c, 0)) ||
        (s = pool_resolve(c->msg, c->info->name, c->a,
                          KEEL_KIT_POOL_ADAPTIVE, KIN(c, 0), &g, y)))
        return s;
    return kit_out_is(c, 0, KIN(c, 0)->dtype, 4, y);
}

/* max_pool2d_grad (x, indices, dout); avg_pool2d_grad and
 * adaptive_avg_pool2d_grad (x, dout); -> dx */
keel_status kit_rule_pool2d_grad(const struct kit_ctx *c)
{
    int kind = c->op == KEEL_OP_MAX_POOL2D_GRAD   ? KEEL_KIT_POOL_INDEXED
               : c->op == KEEL_OP_AVG_POOL2D_GRAD ? KEEL_KIT_POOL_AVG
                                                  : KEEL_KIT_POOL_ADAPTIVE;
    bool is_max = kind == KEEL_KIT_POOL_INDEXED;
    int dout = is_max ? 2 : 1;
    keel_kit_pool g;
    int64_t y[4];
    keel_status s;

    if ((s = kit_arity(c, dout + 1, 1)) || (s = kit_need_float(c, 0)) ||
        (s = kit_same_dtype(c, 1u | (1u << dout), 0)) ||
        (s = pool_resolve(c->msg, c->info->name, c->a, kind, KIN(c, 0), &g,
                          y)) ||
        (s = pool_match(c->msg, c->info->name,
                        is_max ? "dout (x's N and C)"
                               : "dout (the forward output's gradient)",
                        KIN(c, dout), y)))
        return s;
    if (is_max) {
        const keel_tensor_desc *idx = KIN(c, 1);
        if (idx->dtype != KEEL_I64)
            return kit_bad(c, "indices must be int64, got %s",
                           keel_kit_dtype_name(idx->dtype));
        if ((s = match4(c->msg, c->info->name, "indices (dout's shape)", idx,
                        KIN(c, dout)->shape)))
            return s;
    }
    return kit_out_like(c, 0, KIN(c, 0), KIN(c, 0)->dtype);
}
