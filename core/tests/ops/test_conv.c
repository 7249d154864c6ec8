/*
 * Convolution and pooling op tests against float64 references computed
 * here, from host copies of the inputs, with plain loops: the direct
 * 7-loop convolution, analytic scatter loops for its gradients, the
 * transposed convolution as a scatter, and windows for pooling.
 *
 * Most inputs hold small integers (stored in the dtype under test), so
 * float32 sums are exact and the per-dtype tolerances hold for long
 * reductions; float64 cases use real values.
 *
 * fused_conv2d is compared with conv2d followed by the activation op on
 * the same inputs: the same bits (within 1 ulp for float16/bfloat16, as
 * the catalog allows), on every conv path.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optest.h"

#define EXPECT_OP_ERROR(call, status, op, detail)                            \
    do {                                                                     \
        OT_EXPECT_ERROR(call, status, op "(");                               \
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), detail));           \
        if (!strstr(keel_last_error(), detail))                              \
            fprintf(stderr, "\n  want '%s' in '%s'\n", detail,               \
                    keel_last_error());                                      \
    } while (0)

static int64_t numel4(const int64_t *s)
{
    return s[0] * s[1] * s[2] * s[3];
}

/* Integer values in [lo, hi) (real values for float64 when `real`). */
static keel_tensor *rand_vals(keel_dtype dt, int nd, const int64_t *shape,
                              bool real)
{
    keel_tensor *i, *t;
    double *v;

    if (real)
        return ot_rand(dt, nd, shape, -1, 1);
    i = ot_rand(KEEL_I32, nd, shape, -3, 4);
    v = ot_host(i);
    t = ot_from(dt, nd, shape, v);
    free(v);
    keel_tensor_free(i);
    return t;
}

/* ---- convolution references ---------------------------------------------- */

struct conv_case {
    const char *name;
    int64_t n, c, h, w; /* x */
    int64_t o, kh, kw;  /* conv: weight [o, c/g, kh, kw]; transposed:
                           weight [c, o/g, kh, kw] */
    int64_t stride[2], dil[2], pad[4];
    int npad;
    const char *algo;
    int64_t groups, outpad[2];
    bool bias;
};

/* The test's own reading of the padding rules: (top, bottom, left, right). */
static void case_pads(const struct conv_case *cc, int64_t p[4])
{
    if (!strcmp(cc->algo, "VALID")) {
        memset(p, 0, 4 * sizeof(int64_t));
    } else if (!strcmp(cc->algo, "SAME")) {
        int64_t in[2] = {cc->h, cc->w}, k[2] = {cc->kh, cc->kw};
        for (int i = 0; i < 2; i++) {
            int64_t out = (in[i] + cc->stride[i] - 1) / cc->stride[i];
            int64_t tot = (out - 1) * cc->stride[i] +
                          (k[i] - 1) * cc->dil[i] + 1 - in[i];
            tot = tot > 0 ? tot : 0;
            p[2 * i] = tot / 2;
            p[2 * i + 1] = tot - tot / 2;
        }
    } else if (cc->npad == 1) {
        p[0] = p[1] = p[2] = p[3] = cc->pad[0];
    } else if (cc->npad == 2) {
        p[0] = p[1] = cc->pad[0];
        p[2] = p[3] = cc->pad[1];
    } else {
        memcpy(p, cc->pad, 4 * sizeof(int64_t));
    }
}

static int case_attrs(const struct conv_case *cc, keel_attr *a, bool tr,
                      int has_bias)
{
    int n = 0;

    a[n++] = keel_attr_ints("stride", cc->stride, 2);
    a[n++] = keel_attr_ints("dilation", cc->dil, 2);
    a[n++] = keel_attr_ints("padding", cc->pad, cc->npad);
    a[n++] = keel_attr_str("padding_algorithm", cc->algo);
    a[n++] = keel_attr_int("groups", cc->groups);
    if (tr)
        a[n++] = keel_attr_ints("output_padding", cc->outpad, 2);
    if (has_bias >= 0)
        a[n++] = keel_attr_bool("has_bias", has_bias);
    return n;
}

static void conv_out_dims(const struct conv_case *cc, const int64_t p[4],
                          int64_t *oh, int64_t *ow)
{
    *oh = (cc->h + p[0] + p[1] - (cc->kh - 1) * cc->dil[0] - 1) /
              cc->stride[0] +
          1;
    *ow = (cc->w + p[2] + p[3] - (cc->kw - 1) * cc->dil[1] - 1) /
              cc->stride[1] +
          1;
}

static void convt_out_dims(const struct conv_case *cc, const int64_t p[4],
                           int64_t *oh, int64_t *ow)
{
    *oh = (cc->h - 1) * cc->stride[0] - p[0] - p[1] +
          (cc->kh - 1) * cc->dil[0] + 1 + cc->outpad[0];
    *ow = (cc->w - 1) * cc->stride[1] - p[2] - p[3] +
          (cc->kw - 1) * cc->dil[1] + 1 + cc->outpad[1];
}

#define IDX4(a, b, c, d, s)                                                  \
    ((((a) * (s)[1] + (b)) * (s)[2] + (c)) * (s)[3] + (d))

/* Visit every (output position, kernel tap) pair of a conv2d whose input
 * position is inside the input: the heart of all references below. */
#define FOR_CONV_TAPS(cc, p, oh, ow, cgs, ogs)                                \
    for (int64_t n = 0; n < (cc)->n; n++)                                     \
        for (int64_t o = 0; o < (cc)->o; o++)                                 \
            for (int64_t oy = 0; oy < (oh); oy++)                             \
                for (int64_t ox = 0; ox < (ow); ox++)                         \
                    for (int64_t cl = 0; cl < (cgs); cl++)                    \
                        for (int64_t i = 0; i < (cc)->kh; i++)                \
                            for (int64_t j = 0; j < (cc)->kw; j++)            \
                                for (int64_t iy = oy * (cc)->stride[0] -      \
                                                  (p)[0] + i * (cc)->dil[0],  \
                                             ix = ox * (cc)->stride[1] -      \
                                                  (p)[2] + j * (cc)->dil[1],  \
                                             ci = (o / (ogs)) * (cgs) + cl,   \
                                             once = 1;                        \
                                     once && iy >= 0 && iy < (cc)->h &&       \
                                     ix >= 0 && ix < (cc)->w;                 \
                                     once = 0)

/* y = conv2d(x, w) + b */
static void ref_conv(const struct conv_case *cc, const int64_t p[4],
                     const double *x, const double *w, const double *b,
                     int64_t oh, int64_t ow, double *y)
{
    int64_t cg = cc->c / cc->groups, og = cc->o / cc->groups;
    int64_t xs[4] = {cc->n, cc->c, cc->h, cc->w};
    int64_t ws[4] = {cc->o, cg, cc->kh, cc->kw};
    int64_t ys[4] = {cc->n, cc->o, oh, ow};

    for (int64_t k = 0; k < numel4(ys); k++)
        y[k] = b ? b[(k / (oh * ow)) % cc->o] : 0;
    FOR_CONV_TAPS(cc, p, oh, ow, cg, og)
    y[IDX4(n, o, oy, ox, ys)] +=
        x[IDX4(n, ci, iy, ix, xs)] * w[IDX4(o, cl, i, j, ws)];
}

/* dx, dw, db of conv2d from dy */
static void ref_conv_grad(const struct conv_case *cc, const int64_t p[4],
                          const double *x, const double *w, const double *dy,
                          int64_t oh, int64_t ow, double *dx, double *dw,
                          double *db)
{
    int64_t cg = cc->c / cc->groups, og = cc->o / cc->groups;
    int64_t xs[4] = {cc->n, cc->c, cc->h, cc->w};
    int64_t ws[4] = {cc->o, cg, cc->kh, cc->kw};
    int64_t ys[4] = {cc->n, cc->o, oh, ow};

    memset(dx, 0, sizeof(double) * (size_t)numel4(xs));
    memset(dw, 0, sizeof(double) * (size_t)numel4(ws));
    memset(db, 0, sizeof(double) * (size_t)cc->o);
    for (int64_t k = 0; k < numel4(ys); k++)
        db[(k / (oh * ow)) % cc->o] += dy[k];
    FOR_CONV_TAPS(cc, p, oh, ow, cg, og)
    {
        double g = dy[IDX4(n, o, oy, ox, ys)];
        dx[IDX4(n, ci, iy, ix, xs)] += g * w[IDX4(o, cl, i, j, ws)];
        dw[IDX4(o, cl, i, j, ws)] += g * x[IDX4(n, ci, iy, ix, xs)];
    }
}

/* Transposed conv as a scatter: x [n, c, h, w], w [c, o/g, kh, kw],
 * y [n, o, oh, ow]: y[n, o, iy*s - p + i*d, ...] += x * w. With dy given
 * instead, the same taps give dx and dw. */
static void ref_convt(const struct conv_case *cc, const int64_t p[4],
                      const double *x, const double *w, const double *b,
                      int64_t oh, int64_t ow, double *y, const double *dy,
                      double *dx, double *dw, double *db)
{
    int64_t cg = cc->c / cc->groups, og = cc->o / cc->groups;
    int64_t xs[4] = {cc->n, cc->c, cc->h, cc->w};
    int64_t ws[4] = {cc->c, og, cc->kh, cc->kw};
    int64_t ys[4] = {cc->n, cc->o, oh, ow};

    if (y)
        for (int64_t k = 0; k < numel4(ys); k++)
            y[k] = b ? b[(k / (oh * ow)) % cc->o] : 0;
    if (dy) {
        memset(dx, 0, sizeof(double) * (size_t)numel4(xs));
        memset(dw, 0, sizeof(double) * (size_t)numel4(ws));
        memset(db, 0, sizeof(double) * (size_t)cc->o);
        for (int64_t k = 0; k < numel4(ys); k++)
            db[(k / (oh * ow)) % cc->o] += dy[k];
    }
    for (int64_t n = 0; n < cc->n; n++)
        for (int64_t c = 0; c < cc->c; c++)
            for (int64_t hy = 0; hy < cc->h; hy++)
                for (int64_t hx = 0; hx < cc->w; hx++)
                    for (int64_t ol = 0; ol < og; ol++)
                        for (int64_t i = 0; i < cc->kh; i++)
                            for (int64_t j = 0; j < cc->kw; j++) {
                                int64_t o = (c / cg) * og + ol;
                                int64_t yy = hy * cc->stride[0] - p[0] +
                                             i * cc->dil[0];
                                int64_t yx = hx * cc->stride[1] - p[2] +
                                             j * cc->dil[1];
                                int64_t xi = IDX4(n, c, hy, hx, xs);
                                int64_t wi = IDX4(c, ol, i, j, ws), yi;
                                if (yy < 0 || yy >= oh || yx < 0 || yx >= ow)
                                    continue;
                                yi = IDX4(n, o, yy, yx, ys);
                                if (y)
                                    y[yi] += x[xi] * w[wi];
                                if (dy) {
                                    dx[xi] += dy[yi] * w[wi];
                                    dw[wi] += dy[yi] * x[xi];
                                }
                            }
}

/* ---- running conv cases -------------------------------------------------- */

enum { L_CONTIG = 0, L_X_T = 1, L_X_S = 2, L_W_T = 4, L_D_S = 8 };

static keel_tensor *relayout(keel_tensor *t, int want, int bit_t, int bit_s)
{
    keel_tensor *r;

    if (!(want & (bit_t | bit_s)))
        return t;
    r = ot_layout(t, (want & bit_t) ? OT_TRANSPOSED : OT_STRIDED);
    CU_ASSERT_FALSE(keel_tensor_is_contiguous(r));
    keel_tensor_free(t);
    return r;
}

/* The grad op again with need_dx = 0 (what autograd passes when x needs
 * no gradient): dweight and dbias must still match the reference; dx is
 * unspecified and not looked at. */
static void check_grad_without_dx(keel_op_id op, keel_tensor **in,
                                  keel_attr *a, int na, const char *what,
                                  const int64_t *ws, const double *rdw,
                                  const double *rdb,
                                  const struct conv_case *cc, keel_dtype dt)
{
    keel_tensor *out[3] = {NULL, NULL, NULL};
    char w2[200];
    int nout = 0;

    a[na++] = keel_attr_bool("need_dx", false);
    snprintf(w2, sizeof(w2), "%s, need_dx = 0", what);
    if (keel_op_run(op, in, 3, a, na, out, 3, &nout))
        fprintf(stderr, "\n  %s: %s\n", w2, keel_last_error());
    CU_ASSERT_EQUAL_FATAL(nout, cc->bias ? 3 : 2);
    if (ot_check_shape(w2, out[1], 4, ws))
        ot_check(w2, out[1], rdw, dt);
    if (cc->bias && ot_check_shape(w2, out[2], 1, &cc->o))
        ot_check(w2, out[2], rdb, dt);
    for (int i = 0; i < nout; i++)
        keel_tensor_free(out[i]);
}

/* One conv2d case: forward, then conv2d_grad. */
static void run_conv(const struct conv_case *cc, keel_dtype dt, int layout,
                     bool grads)
{
    int64_t p[4], oh, ow, cg = cc->c / cc->groups;
    int64_t xs[4] = {cc->n, cc->c, cc->h, cc->w};
    int64_t ws[4] = {cc->o, cg, cc->kh, cc->kw}, ys[4];
    bool real = dt == KEEL_F64;
    keel_tensor *x = rand_vals(dt, 4, xs, real);
    keel_tensor *w = rand_vals(dt, 4, ws, real);
    keel_tensor *b = cc->bias ? rand_vals(dt, 1, &cc->o, real) : NULL;
    keel_tensor *in[3], *out[3] = {NULL, NULL, NULL}, *dy = NULL;
    double *xv, *wv, *bv = NULL, *ref, *dyv, *rdx, *rdw, *rdb;
    keel_attr a[8];
    int na, nout = 0;
    char what[160];

    case_pads(cc, p);
    conv_out_dims(cc, p, &oh, &ow);
    ys[0] = cc->n, ys[1] = cc->o, ys[2] = oh, ys[3] = ow;
    x = relayout(x, layout, L_X_T, L_X_S);
    w = relayout(w, layout, L_W_T, 0);
    xv = ot_host(x);
    wv = ot_host(w);
    if (b)
        bv = ot_host(b);
    ref = calloc((size_t)numel4(ys) + 1, sizeof(double));
    ref_conv(cc, p, xv, wv, bv, oh, ow, ref);
    in[0] = x, in[1] = w, in[2] = b;
    na = case_attrs(cc, a, false, -1);
    snprintf(what, sizeof(what), "conv2d %s (layout %d)", cc->name, layout);
    if (keel_op_run(KEEL_OP_CONV2D, in, b ? 3 : 2, a, na, out, 1, &nout))
        fprintf(stderr, "\n  %s: %s\n", what, keel_last_error());
    CU_ASSERT_EQUAL_FATAL(nout, 1);
    if (ot_check_shape(what, out[0], 4, ys))
        ot_check(what, out[0], ref, dt);
    keel_tensor_free(out[0]);
    free(ref);
    if (grads) {
        dy = relayout(rand_vals(dt, 4, ys, real), layout, 0, L_D_S);
        dyv = ot_host(dy);
        rdx = calloc((size_t)numel4(xs) + 1, sizeof(double));
        rdw = calloc((size_t)numel4(ws) + 1, sizeof(double));
        rdb = calloc((size_t)cc->o + 1, sizeof(double));
        ref_conv_grad(cc, p, xv, wv, dyv, oh, ow, rdx, rdw, rdb);
        in[2] = dy;
        na = case_attrs(cc, a, false, cc->bias);
        snprintf(what, sizeof(what), "conv2d_grad %s (layout %d)", cc->name,
                 layout);
        if (keel_op_run(KEEL_OP_CONV2D_GRAD, in, 3, a, na, out, 3, &nout))
            fprintf(stderr, "\n  %s: %s\n", what, keel_last_error());
        CU_ASSERT_EQUAL_FATAL(nout, cc->bias ? 3 : 2);
        if (ot_check_shape(what, out[0], 4, xs))
            ot_check(what, out[0], rdx, dt);
        if (ot_check_shape(what, out[1], 4, ws))
            ot_check(what, out[1], rdw, dt);
        if (cc->bias && ot_check_shape(what, out[2], 1, &cc->o))
            ot_check(what, out[2], rdb, dt);
        for (int i = 0; i < nout; i++)
            keel_tensor_free(out[i]);
        check_grad_without_dx(KEEL_OP_CONV2D_GRAD, in, a, na, what, ws, rdw,
                              rdb, cc, dt);
        free(dyv);
        free(rdx);
        free(rdw);
        free(rdb);
        keel_tensor_free(dy);
    }
    free(xv);
    free(wv);
    free(bv);
    keel_tensor_free(x);
    keel_tensor_free(w);
    keel_tensor_free(b);
}

/* One conv2d_transpose case: forward, then conv2d_transpose_grad. */
static void run_convt(const struct conv_case *cc, keel_dtype dt, int layout,
                      bool grads)
{
    int64_t p[4], oh, ow, og = cc->o / cc->groups;
    int64_t xs[4] = {cc->n, cc->c, cc->h, cc->w};
    int64_t ws[4] = {cc->c, og, cc->kh, cc->kw}, ys[4];
    bool real = dt == KEEL_F64;
    keel_tensor *x = rand_vals(dt, 4, xs, real);
    keel_tensor *w = rand_vals(dt, 4, ws, real);
    keel_tensor *b = cc->bias ? rand_vals(dt, 1, &cc->o, real) : NULL;
    keel_tensor *in[3], *out[3] = {NULL, NULL, NULL}, *dy = NULL;
    double *xv, *wv, *bv = NULL, *ref, *dyv, *rdx, *rdw, *rdb;
    keel_attr a[8];
    int na, nout = 0;
    char what[160];

    case_pads(cc, p);
    convt_out_dims(cc, p, &oh, &ow);
    ys[0] = cc->n, ys[1] = cc->o, ys[2] = oh, ys[3] = ow;
    x = relayout(x, layout, L_X_T, L_X_S);
    w = relayout(w, layout, L_W_T, 0);
    xv = ot_host(x);
    wv = ot_host(w);
    if (b)
        bv = ot_host(b);
    ref = calloc((size_t)numel4(ys) + 1, sizeof(double));
    ref_convt(cc, p, xv, wv, bv, oh, ow, ref, NULL, NULL, NULL, NULL);
    in[0] = x, in[1] = w, in[2] = b;
    na = case_attrs(cc, a, true, -1);
    snprintf(what, sizeof(what), "conv2d_transpose %s (layout %d)", cc->name,
             layout);
    if (keel_op_run(KEEL_OP_CONV2D_TRANSPOSE, in, b ? 3 : 2, a, na, out, 1,
                    &nout))
        fprintf(stderr, "\n  %s: %s\n", what, keel_last_error());
    CU_ASSERT_EQUAL_FATAL(nout, 1);
    if (ot_check_shape(what, out[0], 4, ys))
        ot_check(what, out[0], ref, dt);
    keel_tensor_free(out[0]);
    free(ref);
    if (grads) {
        dy = relayout(rand_vals(dt, 4, ys, real), layout, 0, L_D_S);
        dyv = ot_host(dy);
        rdx = calloc((size_t)numel4(xs) + 1, sizeof(double));
        rdw = calloc((size_t)numel4(ws) + 1, sizeof(double));
        rdb = calloc((size_t)cc->o + 1, sizeof(double));
        ref_convt(cc, p, xv, wv, NULL, oh, ow, NULL, dyv, rdx, rdw, rdb);
        in[2] = dy;
        na = case_attrs(cc, a, true, cc->bias);
        snprintf(what, sizeof(what), "conv2d_transpose_grad %s (layout %d)",
                 cc->name, layout);
        if (keel_op_run(KEEL_OP_CONV2D_TRANSPOSE_GRAD, in, 3, a, na, out, 3,
                        &nout))
            fprintf(stderr, "\n  %s: %s\n", what, keel_last_error());
        CU_ASSERT_EQUAL_FATAL(nout, cc->bias ? 3 : 2);
        if (ot_check_shape(what, out[0], 4, xs))
            ot_check(what, out[0], rdx, dt);
        if (ot_check_shape(what, out[1], 4, ws))
            ot_check(what, out[1], rdw, dt);
        if (cc->bias && ot_check_shape(what, out[2], 1, &cc->o))
            ot_check(what, out[2], rdb, dt);
        for (int i = 0; i < nout; i++)
            keel_tensor_free(out[i]);
        check_grad_without_dx(KEEL_OP_CONV2D_TRANSPOSE_GRAD, in, a, na, what,
                              ws, rdw, rdb, cc, dt);
        free(dyv);
        free(rdx);
        free(rdw);
        free(rdb);
        keel_tensor_free(dy);
    }
    free(xv);
    free(wv);
    free(bv);
    keel_tensor_free(x);
    keel_tensor_free(w);
    keel_tensor_free(b);
}

/* name, n c h w, o kh kw, stride, dilation, padding, npad, algo, groups,
 * output_padding, bias */
static const struct conv_case conv_cases[] = {
    {"basic pad 1", 2, 3, 7, 6, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, 2,
     "EXPLICIT", 1, {0, 0}, true},
    {"no bias, no pad", 2, 3, 6, 5, 2, 3, 2, {1, 1}, {1, 1}, {0, 0}, 2,
     "EXPLICIT", 1, {0, 0}, false},
    {"stride 2x1", 1, 2, 9, 7, 3, 3, 3, {2, 1}, {1, 1}, {1, 0}, 2,
     "EXPLICIT", 1, {0, 0}, true},
    {"dilation 2x1", 2, 2, 9, 8, 3, 3, 2, {1, 1}, {2, 1}, {1, 1}, 2,
     "EXPLICIT", 1, {0, 0}, true},
    {"asym pad t1 b2 l0 r3", 2, 2, 6, 5, 2, 3, 3, {2, 2}, {1, 1},
     {1, 2, 0, 3}, 4, "EXPLICIT", 1, {0, 0}, true},
    {"one padding value", 1, 2, 5, 5, 2, 3, 3, {1, 1}, {1, 1}, {2}, 1,
     "EXPLICIT", 1, {0, 0}, false},
    {"SAME stride 2 odd", 2, 2, 7, 6, 3, 3, 3, {2, 2}, {1, 1}, {9, 9}, 2,
     "SAME", 1, {0, 0}, true},
    {"SAME even kernel, dilation", 1, 2, 6, 7, 2, 2, 4, {1, 2}, {2, 1},
     {0, 0}, 2, "SAME", 1, {0, 0}, true},
    {"VALID ignores padding", 2, 2, 6, 6, 2, 3, 3, {1, 1}, {1, 1}, {5, 5}, 2,
     "VALID", 1, {0, 0}, true},
    {"groups 2", 2, 4, 6, 5, 6, 3, 3, {1, 1}, {1, 1}, {1, 1}, 2, "EXPLICIT",
     2, {0, 0}, true},
    {"depthwise", 2, 3, 6, 6, 3, 3, 3, {2, 2}, {1, 1}, {1, 1}, 2, "EXPLICIT",
     3, {0, 0}, true},
    {"depthwise x2 multiplier", 2, 3, 5, 6, 6, 3, 3, {1, 1}, {1, 1},
     {1, 1}, 2, "EXPLICIT", 3, {0, 0}, false},
    {"1x1", 3, 4, 5, 3, 5, 1, 1, {1, 1}, {1, 1}, {0, 0}, 2, "EXPLICIT", 1,
     {0, 0}, true},
    {"1x1 groups", 2, 4, 3, 3, 6, 1, 1, {1, 1}, {1, 1}, {0, 0}, 2,
     "EXPLICIT", 2, {0, 0}, false},
    {"1x1 stride 2 pad 1", 2, 3, 5, 4, 2, 1, 1, {2, 2}, {1, 1}, {1, 1}, 2,
     "EXPLICIT", 1, {0, 0}, true},
    {"size-1 dims", 1, 1, 1, 1, 1, 1, 1, {1, 1}, {1, 1}, {0, 0}, 2,
     "EXPLICIT", 1, {0, 0}, true},
    {"kernel as large as padded input", 1, 2, 3, 2, 2, 5, 4, {1, 1}, {1, 1},
     {1, 1}, 2, "EXPLICIT", 1, {0, 0}, true},
    {"many images (pool slots)", 9, 3, 8, 8, 4, 5, 5, {1, 1}, {1, 1},
     {2, 2}, 2, "EXPLICIT", 1, {0, 0}, true},
};

#define NCASES ((int)(sizeof(conv_cases) / sizeof(conv_cases[0])))

static void test_conv2d_cases(void)
{
    for (int i = 0; i < NCASES; i++) {
        run_conv(&conv_cases[i], KEEL_F32, L_CONTIG, false);
        run_conv(&conv_cases[i], KEEL_F64, L_CONTIG, false);
    }
}

static void test_conv2d_half(void)
{
    for (int i = 0; i < NCASES; i += 3) {
        run_conv(&conv_cases[i], KEEL_F16, L_CONTIG, false);
        run_conv(&conv_cases[i], KEEL_BF16, L_CONTIG, false);
    }
}

static void test_conv2d_grad_cases(void)
{
    for (int i = 0; i < NCASES; i++) {
        run_conv(&conv_cases[i], KEEL_F32, L_CONTIG, true);
        if (i % 2 == 0)
            run_conv(&conv_cases[i], KEEL_F64, L_CONTIG, true);
    }
    run_conv(&conv_cases[0], KEEL_F16, L_CONTIG, true);
    run_conv(&conv_cases[9], KEEL_BF16, L_CONTIG, true);
}

static void test_conv2d_noncontiguous(void)
{
    static const int layouts[] = {L_X_T, L_X_S, L_W_T, L_X_S | L_W_T | L_D_S};

    for (int l = 0; l < 4; l++) {
        run_conv(&conv_cases[0], KEEL_F32, layouts[l], true);
        run_conv(&conv_cases[9], KEEL_F16, layouts[l], true);
        run_conv(&conv_cases[12], KEEL_F64, layouts[l], true);
    }
}

static void test_conv2d_typed_api(void)
{
    /* keel_conv2d with default params is a VALID stride-1 conv. */
    double xv[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, wv[4] = {1, 0, 0, -1};
    double want[4] = {1 - 5, 2 - 6, 4 - 8, 5 - 9};
    double want_b[4] = {-4 + 10, -4 + 10, -4 + 10, -4 + 10};
    keel_tensor *x = ot_from(KEEL_F32, 4, (int64_t[]){1, 1, 3, 3}, xv);
    keel_tensor *w = ot_from(KEEL_F32, 4, (int64_t[]){1, 1, 2, 2}, wv);
    keel_tensor *b = ot_from(KEEL_F32, 1, (int64_t[]){1}, (double[]){10});
    keel_tensor *y = NULL;
    keel_conv2d_params prm = keel_conv2d_default_params();

    CU_ASSERT_EQUAL_FATAL(keel_conv2d(x, w, NULL, NULL, &y), KEEL_STATUS_OK);
    ot_check_shape("typed conv2d", y, 4, (int64_t[]){1, 1, 2, 2});
    ot_check("typed conv2d", y, want, KEEL_F32);
    keel_tensor_free(y);
    CU_ASSERT_EQUAL_FATAL(keel_conv2d(x, w, b, &prm, &y), KEEL_STATUS_OK);
    ot_check("typed conv2d bias", y, want_b, KEEL_F32);
    keel_tensor_free(y);
    /* transposed: a 1x1 input spreads the kernel */
    {
        double one[1] = {2}, wk[4] = {1, 2, 3, 4}, spread[4] = {2, 4, 6, 8};
        keel_tensor *s = ot_from(KEEL_F64, 4, (int64_t[]){1, 1, 1, 1}, one);
        keel_tensor *k = ot_from(KEEL_F64, 4, (int64_t[]){1, 1, 2, 2}, wk);
        CU_ASSERT_EQUAL_FATAL(keel_conv2d_transpose(s, k, NULL, NULL, &y),
                              KEEL_STATUS_OK);
        ot_check_shape("typed transpose", y, 4, (int64_t[]){1, 1, 2, 2});
        ot_check("typed transpose", y, spread, KEEL_F64);
        keel_tensor_free(y);
        keel_tensor_free(s);
        keel_tensor_free(k);
    }
    keel_tensor_free(x);
    keel_tensor_free(w);
    keel_tensor_free(b);
}

/* Empty batch / no input channels: outputs are empty, zero or the bias. */
static void test_conv2d_empty(void)
{
    struct conv_case n0 = {"N = 0", 0, 3, 5, 5, 2, 3, 3, {1, 1}, {1, 1},
                           {1, 1}, 2, "EXPLICIT", 1, {0, 0}, true};
    struct conv_case c0 = {"C = 0", 2, 0, 5, 5, 3, 3, 3, {1, 1}, {1, 1},
                           {1, 1}, 2, "EXPLICIT", 1, {0, 0}, true};
    struct conv_case o0 = {"O = 0", 2, 3, 4, 4, 0, 3, 3, {1, 1}, {1, 1},
                           {0, 0}, 2, "EXPLICIT", 1, {0, 0}, false};

    for (int k = 0; k < 4; k++) {
        keel_dtype dt = ot_float_dtypes[k];
        run_conv(&n0, dt, L_CONTIG, true);
        run_conv(&c0, dt, L_CONTIG, true);
        run_conv(&o0, dt, L_CONTIG, true);
        run_convt(&n0, dt, L_CONTIG, true);
    }
}

/* Per-image GEMMs above OpenBLAS's single-thread size: images one by
 * one, OpenBLAS threads, im2col/col2im over the pool; > 65536 outputs. */
static void test_conv2d_large(void)
{
    struct conv_case big = {"large", 4, 16, 20, 20, 32, 3, 3, {1, 1},
                            {1, 1}, {1, 1}, 2, "EXPLICIT", 1, {0, 0}, true};
    struct conv_case lenet = {"lenet conv2", 16, 6, 14, 14, 16, 5, 5,
                              {1, 1}, {1, 1}, {0, 0}, 2, "EXPLICIT", 1,
                              {0, 0}, true};

    /* few channels, large planes: GEMMs cut into single-thread pieces */
    struct conv_case wide = {"split GEMMs", 3, 4, 40, 40, 8, 3, 3, {1, 1},
                             {1, 1}, {1, 1}, 2, "EXPLICIT", 1, {0, 0}, true};

    run_conv(&big, KEEL_F32, L_CONTIG, true);
    run_conv(&lenet, KEEL_F32, L_CONTIG, true);
    run_conv(&lenet, KEEL_BF16, L_CONTIG, false);
    run_conv(&wide, KEEL_F32, L_CONTIG, true);
    run_conv(&wide, KEEL_F64, L_CONTIG, true);
}

/* name, n c h w, o kh kw, stride, dilation, padding, npad, algo, groups,
 * output_padding, bias (weight [c, o/g, kh, kw]) */
static const struct conv_case convt_cases[] = {
    {"basic", 2, 3, 4, 5, 2, 3, 3, {1, 1}, {1, 1}, {0, 0}, 2, "EXPLICIT", 1,
     {0, 0}, true},
    {"stride 2 pad 1 outpad 1", 2, 2, 4, 3, 3, 3, 3, {2, 2}, {1, 1},
     {1, 1}, 2, "EXPLICIT", 1, {1, 1}, true},
    {"stride 3x2 asym pad", 1, 2, 3, 4, 2, 4, 3, {3, 2}, {1, 1},
     {0, 2, 1, 0}, 4, "EXPLICIT", 1, {2, 0}, false},
    {"dilation 2, outpad < dilation", 2, 2, 4, 4, 2, 3, 2, {1, 1}, {2, 2},
     {1, 0}, 2, "EXPLICIT", 1, {1, 0}, true},
    {"groups 2", 2, 4, 3, 4, 6, 3, 3, {2, 1}, {1, 1}, {1, 1}, 2, "EXPLICIT",
     2, {0, 0}, true},
    {"depthwise", 2, 3, 4, 4, 3, 3, 3, {2, 2}, {1, 1}, {1, 1}, 2, "EXPLICIT",
     3, {1, 1}, false},
    {"SAME stride 2", 2, 2, 4, 5, 2, 3, 3, {2, 2}, {1, 1}, {0, 0}, 2, "SAME",
     1, {1, 0}, true},
    {"VALID", 1, 2, 3, 3, 2, 2, 2, {2, 2}, {1, 1}, {3, 3}, 2, "VALID", 1,
     {0, 0}, true},
    {"1x1", 2, 4, 3, 3, 5, 1, 1, {1, 1}, {1, 1}, {0, 0}, 2, "EXPLICIT", 1,
     {0, 0}, true},
    {"many images", 10, 4, 5, 5, 3, 4, 4, {2, 2}, {1, 1}, {1, 1}, 2,
     "EXPLICIT", 1, {0, 0}, true},
};

#define NTCASES ((int)(sizeof(convt_cases) / sizeof(convt_cases[0])))

static void test_conv2d_transpose(void)
{
    for (int i = 0; i < NTCASES; i++) {
        run_convt(&convt_cases[i], KEEL_F32, L_CONTIG, true);
        run_convt(&convt_cases[i], KEEL_F64, L_CONTIG, i % 2 == 0);
    }
    for (int i = 0; i < NTCASES; i += 4) {
        run_convt(&convt_cases[i], KEEL_F16, L_CONTIG, true);
        run_convt(&convt_cases[i], KEEL_BF16, L_CONTIG, false);
    }
    run_convt(&convt_cases[2], KEEL_BF16, L_CONTIG, true);
    run_convt(&convt_cases[1], KEEL_F32, L_X_T | L_W_T | L_D_S, true);
    run_convt(&convt_cases[4], KEEL_F16, L_X_S, true);
}

static void test_conv2d_transpose_large(void)
{
    struct conv_case big = {"large transpose", 3, 24, 12, 12, 16, 4, 4,
                            {2, 2}, {1, 1}, {1, 1}, 2, "EXPLICIT", 1,
                            {0, 0}, true};

    run_convt(&big, KEEL_F32, L_CONTIG, true);
}

static void test_conv_errors(void)
{
    int64_t p3[3] = {1, 1, 1}, s0[2] = {0, 1}, op[2] = {2, 0};
    keel_tensor *x = rand_vals(KEEL_F32, 4, (int64_t[]){1, 3, 5, 5}, false);
    keel_tensor *w = rand_vals(KEEL_F32, 4, (int64_t[]){4, 2, 3, 3}, false);
    keel_tensor *w3 = rand_vals(KEEL_F32, 4, (int64_t[]){4, 3, 3, 3}, false);
    keel_tensor *w1 = rand_vals(KEEL_F32, 4, (int64_t[]){3, 1, 3, 3}, false);
    keel_tensor *wbig = rand_vals(KEEL_F32, 4, (int64_t[]){4, 3, 8, 3}, false);
    keel_tensor *w7 = rand_vals(KEEL_F32, 4, (int64_t[]){7, 1, 3, 3}, false);
    keel_tensor *b5 = rand_vals(KEEL_F32, 1, (int64_t[]){5}, false);
    keel_tensor *x3 = rand_vals(KEEL_F32, 3, (int64_t[]){3, 5, 5}, false);
    keel_tensor *xi = ot_rand(KEEL_I32, 4, (int64_t[]){1, 3, 5, 5}, 0, 3);
    keel_tensor *wi = ot_rand(KEEL_I32, 4, (int64_t[]){4, 3, 3, 3}, 0, 3);
    keel_tensor *dy = rand_vals(KEEL_F32, 4, (int64_t[]){1, 4, 4, 4}, false);
    keel_tensor *y = NULL, *outs[3] = {NULL};
    keel_conv2d_params prm = keel_conv2d_default_params();
    keel_attr a[2];
    int n = 0;

    EXPECT_OP_ERROR(keel_conv2d(x, w, NULL, NULL, &y),
                    KEEL_STATUS_INVALID_ARGUMENT, "conv2d",
                    "channel mismatch");
    prm.groups = 2;
    EXPECT_OP_ERROR(keel_conv2d(x, w1, NULL, &prm, &y),
                    KEEL_STATUS_INVALID_ARGUMENT, "conv2d",
                    "does not divide the 3 input channels");
    prm.groups = 3;
    EXPECT_OP_ERROR(keel_conv2d(x, w7, NULL, &prm, &y),
                    KEEL_STATUS_INVALID_ARGUMENT, "conv2d",
                    "does not divide the 7 output channels");
    prm = keel_conv2d_default_params();
    EXPECT_OP_ERROR(keel_conv2d(x, wbig, NULL, &prm, &y),
                    KEEL_STATUS_INVALID_ARGUMENT, "conv2d",
                    "larger than the padded input");
    prm.dilation[0] = 3;
    EXPECT_OP_ERROR(keel_conv2d(x, w3, NULL, &prm, &y),
                    KEEL_STATUS_INVALID_ARGUMENT, "conv2d",
                    "larger than the padded input");
    prm = keel_conv2d_default_params();
    prm.padding_algorithm = "FULL";
    EXPECT_OP_ERROR(keel_conv2d(x, w3, NULL, &prm, &y),
                    KEEL_STATUS_INVALID_ARGUMENT, "conv2d",
                    "EXPLICIT, SAME or VALID");
    EXPECT_OP_ERROR(keel_conv2d(x, w3, b5, NULL, &y),
                    KEEL_STATUS_INVALID_ARGUMENT, "conv2d", "bias");
    EXPECT_OP_ERROR(keel_conv2d(x3, w3, NULL, NULL, &y),
                    KEEL_STATUS_INVALID_ARGUMENT, "conv2d", "must be 4-D");
    EXPECT_OP_ERROR(keel_conv2d(xi, wi, NULL, NULL, &y),
                    KEEL_STATUS_NOT_SUPPORTED, "conv2d", "int32");
    a[0] = keel_attr_ints("padding", p3, 3);
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_CONV2D, (keel_tensor *[]){x, w3}, 2,
                                a, 1, &y, 1, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "conv2d",
                    "1, 2 or 4 values");
    a[0] = keel_attr_ints("stride", s0, 2);
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_CONV2D, (keel_tensor *[]){x, w3}, 2,
                                a, 1, &y, 1, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "conv2d", "stride");
    a[0] = keel_attr_int("groups", 0);
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_CONV2D, (keel_tensor *[]){x, w3}, 2,
                                a, 1, &y, 1, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "conv2d", "groups");
    /* conv2d_grad: dout must have the output's shape [1, 4, 3, 3] */
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_CONV2D_GRAD,
                                (keel_tensor *[]){x, w3, dy}, 3, NULL, 0,
                                outs, 3, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "conv2d_grad",
                    "forward output's shape");
    /* transposed: weight [C=3, ...] for x with 3 channels; w has 4 */
    EXPECT_OP_ERROR(keel_conv2d_transpose(x, w3, NULL, NULL, &y),
                    KEEL_STATUS_INVALID_ARGUMENT, "conv2d_transpose",
                    "channel mismatch");
    prm = keel_conv2d_default_params();
    prm.output_padding[0] = 1;
    EXPECT_OP_ERROR(keel_conv2d_transpose(x, w1, NULL, &prm, &y),
                    KEEL_STATUS_INVALID_ARGUMENT, "conv2d_transpose",
                    "output_padding");
    a[0] = keel_attr_ints("output_padding", op, 2);
    a[1] = keel_attr_ints("stride", (int64_t[]){2, 2}, 2);
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_CONV2D_TRANSPOSE,
                                (keel_tensor *[]){x, w1}, 2, a, 2, &y, 1, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "conv2d_transpose",
                    "output_padding");
    prm = keel_conv2d_default_params();
    prm.padding[0] = prm.padding[1] = 4;
    EXPECT_OP_ERROR(keel_conv2d_transpose(x, w1, NULL, &prm, &y),
                    KEEL_STATUS_INVALID_ARGUMENT, "conv2d_transpose",
                    "padding too large");
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_CONV2D_TRANSPOSE_GRAD,
                                (keel_tensor *[]){x, w1, dy}, 3, NULL, 0,
                                outs, 3, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "conv2d_transpose_grad",
                    "forward output's shape");
    /* grads: unsupported dtype, groups not dividing, bad attribute type */
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_CONV2D_GRAD,
                                (keel_tensor *[]){xi, wi, dy}, 3, NULL, 0,
                                outs, 3, &n),
                    KEEL_STATUS_NOT_SUPPORTED, "conv2d_grad", "int32");
    a[0] = keel_attr_int("groups", 2);
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_CONV2D_GRAD,
                                (keel_tensor *[]){x, w1, dy}, 3, a, 1, outs,
                                3, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "conv2d_grad",
                    "does not divide");
    a[0] = keel_attr_str("dilation", "2");
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_CONV2D_TRANSPOSE_GRAD,
                                (keel_tensor *[]){x, w1, dy}, 3, a, 1, outs,
                                3, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "conv2d_transpose_grad",
                    "dilation");
    CU_ASSERT_PTR_NULL(outs[0]);
    CU_ASSERT_PTR_NULL(y);
    keel_tensor_free(x);
    keel_tensor_free(w);
    keel_tensor_free(w3);
    keel_tensor_free(w1);
    keel_tensor_free(wbig);
    keel_tensor_free(w7);
    keel_tensor_free(b5);
    keel_tensor_free(x3);
    keel_tensor_free(xi);
    keel_tensor_free(wi);
    keel_tensor_free(dy);
}

/* ---- pooling ------------------------------------------------------------- */

struct pool_case {
    const char *name;
    int64_t n, c, h, w;
    int64_t k[2], s[2];
    int ns; /* 0: stride empty (= kernel) */
    int64_t pad[4];
    int npad;
    bool ceil_mode, exclusive;
};

static void pool_pads(const struct pool_case *pc, int64_t p[4])
{
    if (pc->npad == 2) {
        p[0] = p[1] = pc->pad[0];
        p[2] = p[3] = pc->pad[1];
    } else {
        memcpy(p, pc->pad, 4 * sizeof(int64_t));
    }
}

static void pool_dims(const struct pool_case *pc, int64_t *oh, int64_t *ow)
{
    int64_t p[4], s0 = pc->ns ? pc->s[0] : pc->k[0];
    int64_t s1 = pc->ns ? pc->s[1] : pc->k[1], e;

    pool_pads(pc, p);
    e = pc->h + p[0] + p[1] - pc->k[0];
    *oh = (e + (pc->ceil_mode ? s0 - 1 : 0)) / s0 + 1;
    e = pc->w + p[2] + p[3] - pc->k[1];
    *ow = (e + (pc->ceil_mode ? s1 - 1 : 0)) / s1 + 1;
}

/* Window of output o along one dim: [lo, hi) clipped to the input and the
 * divisor counts (exclusive: clipped; else clipped to the padded input). */
static void ref_win(int64_t o, int64_t k, int64_t s, int64_t p0, int64_t p1,
                    int64_t in, int64_t *lo, int64_t *hi, int64_t *cnt_ex,
                    int64_t *cnt_in)
{
    int64_t a = o * s - p0, b = a + k;

    *cnt_in = (b < in + p1 ? b : in + p1) - a;
    *lo = a < 0 ? 0 : a;
    *hi = b > in ? in : b;
    if (*hi < *lo)
        *hi = *lo;
    *cnt_ex = *hi - *lo;
}

static int pool_attrs(const struct pool_case *pc, keel_attr *a, bool avg)
{
    int n = 0;

    a[n++] = keel_attr_ints("kernel_size", pc->k, 2);
    a[n++] = keel_attr_ints("stride", pc->s, pc->ns);
    a[n++] = keel_attr_ints("padding", pc->pad, pc->npad);
    a[n++] = keel_attr_bool("ceil_mode", pc->ceil_mode);
    if (avg)
        a[n++] = keel_attr_bool("exclusive", pc->exclusive);
    return n;
}

/* max and avg forward references, and their grads for dout. */
static void ref_pool(const struct pool_case *pc, const double *x, int64_t oh,
                     int64_t ow, double *mx, double *idx, double *avg,
                     const double *dout, double *dmax, double *davg)
{
    int64_t p[4], s0 = pc->ns ? pc->s[0] : pc->k[0];
    int64_t s1 = pc->ns ? pc->s[1] : pc->k[1], plane = pc->h * pc->w;

    pool_pads(pc, p);
    memset(dmax, 0, sizeof(double) * (size_t)(pc->n * pc->c * plane));
    memset(davg, 0, sizeof(double) * (size_t)(pc->n * pc->c * plane));
    for (int64_t q = 0; q < pc->n * pc->c; q++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++) {
                int64_t y0, y1, x0, x1, ey, ex, iy_, ix_, best = -1;
                int64_t o = (q * oh + oy) * ow + ox;
                double m = -INFINITY, sum = 0, div;
                const double *xp = x + q * plane;
                ref_win(oy, pc->k[0], s0, p[0], p[1], pc->h, &y0, &y1, &ey,
                        &iy_);
                ref_win(ox, pc->k[1], s1, p[2], p[3], pc->w, &x0, &x1, &ex,
                        &ix_);
                for (int64_t yy = y0; yy < y1; yy++)
                    for (int64_t xx = x0; xx < x1; xx++) {
                        double v = xp[yy * pc->w + xx];
                        if (best < 0 || v > m) {
                            m = v;
                            best = yy * pc->w + xx;
                        }
                        sum += v;
                    }
                div = pc->exclusive ? (double)(ey * ex) : (double)(iy_ * ix_);
                mx[o] = m;
                idx[o] = (double)best;
                avg[o] = ey * ex > 0 ? sum / div : 0;
                if (best >= 0)
                    dmax[q * plane + best] += dout[o];
                for (int64_t yy = y0; ey * ex > 0 && yy < y1; yy++)
                    for (int64_t xx = x0; xx < x1; xx++)
                        davg[q * plane + yy * pc->w + xx] += dout[o] / div;
            }
}

static void run_pool(const struct pool_case *pc, keel_dtype dt,
                     enum ot_layout lx, enum ot_layout ld)
{
    int64_t xs[4] = {pc->n, pc->c, pc->h, pc->w}, ys[4], oh, ow;
    keel_tensor *x = rand_vals(dt, 4, xs, dt == KEEL_F64), *dout;
    keel_tensor *in[3], *out[2] = {NULL, NULL}, *dx = NULL;
    double *xv, *dv, *mx, *idx, *avg, *dmax, *davg;
    keel_attr a[6];
    int na, n = 0;
    char what[160];

    pool_dims(pc, &oh, &ow);
    ys[0] = pc->n, ys[1] = pc->c, ys[2] = oh, ys[3] = ow;
    dout = rand_vals(dt, 4, ys, dt == KEEL_F64);
    if (lx != OT_CONTIG) {
        keel_tensor *t = ot_layout(x, lx);
        keel_tensor_free(x);
        x = t;
    }
    if (ld != OT_CONTIG) {
        keel_tensor *t = ot_layout(dout, ld);
        keel_tensor_free(dout);
        dout = t;
    }
    xv = ot_host(x);
    dv = ot_host(dout);
    mx = calloc((size_t)numel4(ys) + 1, sizeof(double));
    idx = calloc((size_t)numel4(ys) + 1, sizeof(double));
    avg = calloc((size_t)numel4(ys) + 1, sizeof(double));
    dmax = calloc((size_t)numel4(xs) + 1, sizeof(double));
    davg = calloc((size_t)numel4(xs) + 1, sizeof(double));
    ref_pool(pc, xv, oh, ow, mx, idx, avg, dv, dmax, davg);

    snprintf(what, sizeof(what), "max_pool2d %s", pc->name);
    na = pool_attrs(pc, a, false);
    in[0] = x;
    if (keel_op_run(KEEL_OP_MAX_POOL2D, in, 1, a, na, out, 2, &n))
        fprintf(stderr, "\n  %s: %s\n", what, keel_last_error());
    CU_ASSERT_EQUAL_FATAL(n, 2);
    CU_ASSERT_EQUAL(keel_tensor_dtype(out[1]), KEEL_I64);
    if (ot_check_shape(what, out[0], 4, ys)) {
        ot_check(what, out[0], mx, dt);
        ot_check(what, out[1], idx, KEEL_I64);
    }
    snprintf(what, sizeof(what), "max_pool2d_grad %s", pc->name);
    in[1] = out[1];
    in[2] = dout;
    CU_ASSERT_EQUAL(keel_op_run(KEEL_OP_MAX_POOL2D_GRAD, in, 3, NULL, 0, &dx,
                                1, &n),
                    KEEL_STATUS_OK);
    if (ot_check_shape(what, dx, 4, xs))
        ot_check(what, dx, dmax, dt);
    keel_tensor_free(dx);
    keel_tensor_free(out[0]);
    keel_tensor_free(out[1]);

    snprintf(what, sizeof(what), "avg_pool2d %s", pc->name);
    na = pool_attrs(pc, a, true);
    CU_ASSERT_EQUAL_FATAL(
        keel_op_run(KEEL_OP_AVG_POOL2D, in, 1, a, na, out, 1, &n),
        KEEL_STATUS_OK);
    if (ot_check_shape(what, out[0], 4, ys))
        ot_check(what, out[0], avg, dt);
    keel_tensor_free(out[0]);
    snprintf(what, sizeof(what), "avg_pool2d_grad %s", pc->name);
    in[1] = dout;
    CU_ASSERT_EQUAL_FATAL(
        keel_op_run(KEEL_OP_AVG_POOL2D_GRAD, in, 2, a, na, &dx, 1, &n),
        KEEL_STATUS_OK);
    if (ot_check_shape(what, dx, 4, xs))
        ot_check(what, dx, davg, dt);
    keel_tensor_free(dx);

    free(xv);
    free(dv);
    free(mx);
    free(idx);
    free(avg);
    free(dmax);
    free(davg);
    keel_tensor_free(x);
    keel_tensor_free(dout);
}

/* name, n c h w, kernel, stride, nstride, padding, npad, ceil, exclusive */
static const struct pool_case pool_cases[] = {
    {"k2 s2", 2, 3, 6, 8, {2, 2}, {2, 2}, 2, {0, 0}, 2, false, true},
    {"stride empty = kernel", 1, 2, 6, 6, {3, 2}, {0, 0}, 0, {0, 0}, 2,
     false, true},
    {"k3 s2 pad 1 (overlapping)", 2, 2, 7, 7, {3, 3}, {2, 2}, 2, {1, 1}, 2,
     false, true},
    {"k3 s1 pad 1 inclusive", 1, 2, 5, 6, {3, 3}, {1, 1}, 2, {1, 1}, 2,
     false, false},
    {"ceil_mode", 2, 2, 7, 5, {2, 2}, {2, 2}, 2, {0, 0}, 2, true, true},
    {"ceil_mode inclusive", 1, 2, 7, 5, {3, 3}, {2, 2}, 2, {1, 1}, 2, true,
     false},
    {"ceil_mode window in padding only", 1, 1, 5, 5, {2, 2}, {2, 2}, 2,
     {1, 1}, 2, true, true},
    {"asym padding", 2, 2, 6, 7, {3, 2}, {2, 1}, 2, {1, 0, 0, 1}, 4, false,
     false},
    {"size-1 dims", 1, 1, 1, 1, {1, 1}, {1, 1}, 2, {0, 0}, 2, false, true},
    {"kernel = padded input", 1, 3, 3, 4, {5, 4}, {1, 1}, 2, {1, 0}, 2,
     false, true},
};

#define NPCASES ((int)(sizeof(pool_cases) / sizeof(pool_cases[0])))

static void test_pool_cases(void)
{
    for (int i = 0; i < NPCASES; i++)
        for (int k = 0; k < 4; k++)
            run_pool(&pool_cases[i], ot_float_dtypes[k], OT_CONTIG,
                     OT_CONTIG);
}

static void test_pool_noncontiguous(void)
{
    for (int k = 0; k < 4; k++) {
        run_pool(&pool_cases[2], ot_float_dtypes[k], OT_TRANSPOSED,
                 OT_STRIDED);
        run_pool(&pool_cases[5], ot_float_dtypes[k], OT_STRIDED,
                 OT_TRANSPOSED);
    }
}

static void test_pool_large(void)
{
    struct pool_case big = {"large", 4, 8, 64, 64, {3, 3}, {2, 2}, 2,
                            {1, 1}, 2, false, true};
    run_pool(&big, KEEL_F32, OT_CONTIG, OT_CONTIG);
    run_pool(&big, KEEL_F16, OT_CONTIG, OT_CONTIG);
}

static void test_pool_exact(void)
{
    /* 4x4 plane 0..15, 2x2 windows: maxima 5, 7, 13, 15 at those
     * indices; means 2.5, 4.5, 10.5, 12.5 */
    double v[16], mx[4] = {5, 7, 13, 15}, av[4] = {2.5, 4.5, 10.5, 12.5};
    int64_t k[2] = {2, 2};
    keel_tensor *x, *out[2] = {NULL, NULL};
    keel_attr a = keel_attr_ints("kernel_size", k, 2);
    int n = 0;

    for (int i = 0; i < 16; i++)
        v[i] = i;
    x = ot_from(KEEL_F32, 4, (int64_t[]){1, 1, 4, 4}, v);
    CU_ASSERT_EQUAL_FATAL(
        keel_op_run(KEEL_OP_MAX_POOL2D, &x, 1, &a, 1, out, 2, &n),
        KEEL_STATUS_OK);
    ot_check("exact max", out[0], mx, KEEL_F32);
    ot_check("exact argmax", out[1], mx, KEEL_I64);
    keel_tensor_free(out[0]);
    keel_tensor_free(out[1]);
    CU_ASSERT_EQUAL_FATAL(
        keel_op_run(KEEL_OP_AVG_POOL2D, &x, 1, &a, 1, out, 1, &n),
        KEEL_STATUS_OK);
    ot_check("exact avg", out[0], av, KEEL_F32);
    keel_tensor_free(out[0]);
    keel_tensor_free(x);
    {
        /* ties: the first maximum wins; NaN wins; -inf is a value */
        double t[8] = {1, 3, 3, 1, -INFINITY, -INFINITY, NAN, 2};
        double tm[2] = {3, -INFINITY};
        keel_attr b = keel_attr_ints("kernel_size", (int64_t[]){1, 4}, 2);
        x = ot_from(KEEL_F64, 4, (int64_t[]){1, 2, 1, 4}, t);
        CU_ASSERT_EQUAL_FATAL(
            keel_op_run(KEEL_OP_MAX_POOL2D, &x, 1, &b, 1, out, 2, &n),
            KEEL_STATUS_OK);
        {
            double *g = ot_host(out[0]), *gi = ot_host(out[1]);
            CU_ASSERT_DOUBLE_EQUAL(g[0], tm[0], 0);
            CU_ASSERT(isnan(g[1]));
            CU_ASSERT_DOUBLE_EQUAL(gi[0], 1, 0); /* the first 3 */
            CU_ASSERT_DOUBLE_EQUAL(gi[1], 2, 0); /* index within the plane */
            free(g);
            free(gi);
        }
        keel_tensor_free(out[0]);
        keel_tensor_free(out[1]);
        keel_tensor_free(x);
        /* an all -inf window picks its first element */
        x = ot_from(KEEL_F32, 4, (int64_t[]){1, 1, 1, 2}, t + 4);
        b = keel_attr_ints("kernel_size", (int64_t[]){1, 2}, 2);
        CU_ASSERT_EQUAL_FATAL(
            keel_op_run(KEEL_OP_MAX_POOL2D, &x, 1, &b, 1, out, 2, &n),
            KEEL_STATUS_OK);
        ot_check("all -inf", out[0], tm + 1, KEEL_F32);
        ot_check("all -inf index", out[1], (double[]){0}, KEEL_I64);
        keel_tensor_free(out[0]);
        keel_tensor_free(out[1]);
        keel_tensor_free(x);
    }
}

/*
 * Max pooling over dense rows: full 16-column vector blocks, masked last
 * blocks and the scalar code (float64, stride 3), on data full of ties,
 * signed zeros, -inf and NaN. The rule: windows are visited row by row,
 * then column; the first maximum wins (so -0 before +0 stays -0); a NaN
 * beats every number and a later NaN does not replace an earlier one.
 */
static void run_pool_dense(keel_dtype dt, int64_t h, int64_t w, int64_t k,
                           int64_t st, bool sliced)
{
    int64_t c = 3, pad = sliced ? 3 : 0, wide = w + pad;
    int64_t oh = (h - k) / st + 1, ow = (w - k) / st + 1;
    int64_t xs[4] = {1, c, h, wide}, ys[4] = {1, c, oh, ow};
    int64_t ks[2] = {k, k}, ss[2] = {st, st};
    double *v = malloc(sizeof(double) * (size_t)(c * h * wide));
    double *xv, *gv, *gi;
    keel_tensor *base, *x = NULL, *out[2] = {NULL, NULL};
    keel_attr a[2] = {keel_attr_ints("kernel_size", ks, 2),
                      keel_attr_ints("stride", ss, 2)};
    uint32_t r = 12345u + (uint32_t)(w * 31 + k * 7 + st);
    int n = 0, bad = 0;

    for (int64_t i = 0; i < c * h * wide; i++) {
        r = r * 1664525u + 1013904223u;
        switch ((r >> 24) % 16) {
        case 0:
            v[i] = NAN;
            break;
        case 1:
            v[i] = -INFINITY;
            break;
        case 2:
            v[i] = -0.0;
            break;
        case 3:
            v[i] = 0.0;
            break;
        default:
            v[i] = (double)((int)((r >> 16) % 4) - 2);
        }
    }
    base = ot_from(dt, 4, xs, v);
    if (sliced) {
        CU_ASSERT_EQUAL_FATAL(keel_slice(base, 3, 1, 1 + w, 1, &x),
                              KEEL_STATUS_OK);
    } else {
        x = base;
        base = NULL;
    }
    CU_ASSERT_EQUAL_FATAL(
        keel_op_run(KEEL_OP_MAX_POOL2D, &x, 1, a, 2, out, 2, &n),
        KEEL_STATUS_OK);
    CU_ASSERT_FATAL(ot_check_shape("dense max_pool2d", out[0], 4, ys));
    xv = ot_host(x);
    gv = ot_host(out[0]);
    gi = ot_host(out[1]);
    for (int64_t q = 0; q < c; q++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++) {
                const double *pl = xv + q * h * w;
                int64_t o = (q * oh + oy) * ow + ox, best = -1;
                double m = -INFINITY;
                for (int64_t i = 0; i < k; i++)
                    for (int64_t j = 0; j < k; j++) {
                        int64_t at = (oy * st + i) * w + ox * st + j;
                        double e = pl[at];
                        if (best < 0 || e > m || (isnan(e) && !isnan(m))) {
                            m = e;
                            best = at;
                        }
                    }
                if (gi[o] != (double)best ||
                    (isnan(m) ? !isnan(gv[o])
                              : gv[o] != m || signbit(gv[o]) != signbit(m))) {
                    if (!bad++)
                        fprintf(stderr,
                                "\n  dense max_pool2d %s w %lld k %lld "
                                "s %lld%s: [%lld] %g @%g, want %g @%lld\n",
                                keel_dtype_name(dt), (long long)w,
                                (long long)k, (long long)st,
                                sliced ? " sliced" : "", (long long)o, gv[o],
                                gi[o], m, (long long)best);
                }
            }
    CU_ASSERT_EQUAL(bad, 0);
    free(v);
    free(xv);
    free(gv);
    free(gi);
    keel_tensor_free(out[0]);
    keel_tensor_free(out[1]);
    keel_tensor_free(x);
    keel_tensor_free(base);
}

static void test_pool_dense_rows(void)
{
    /* {w, k, stride}: 2x2/2 whose last window ends the row (and, in the
     * last plane, the buffer); overlapping 3x3/2; stride 1 with one and
     * two 16-column blocks plus partial ones; an exact block; stride 3
     * (scalar only); LeNet's 28 -> 14 row; a row of 4 outputs. */
    static const int64_t cfg[][3] = {
        {42, 2, 2}, {43, 3, 2}, {64, 2, 2}, {40, 2, 1}, {18, 3, 1},
        {37, 3, 1}, {50, 2, 3}, {28, 2, 2}, {9, 2, 2},
    };
    const keel_dtype dts[3] = {KEEL_F32, KEEL_F64, KEEL_F16};

    for (int d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof(cfg) / sizeof(cfg[0]); i++) {
            run_pool_dense(dts[d], 5, cfg[i][0], cfg[i][1], cfg[i][2],
                           false);
            run_pool_dense(dts[d], 5, cfg[i][0], cfg[i][1], cfg[i][2], true);
        }
}

/* max_pool2d_grad of 2x2/2 windows (the CPU plugin writes dx densely
 * there instead of zeroing and scattering): rows and columns no window
 * covers, indices from the forward, and crafted indices the dense write
 * cannot express (another window's element, two outputs on one element,
 * out of the plane), all against a host scatter of dout by index. */
static void run_pool_grad_2x2(const int64_t xs[4], int craft)
{
    int64_t oh = xs[2] / 2, ow = xs[3] / 2, hw = xs[2] * xs[3];
    int64_t ys[4] = {xs[0], xs[1], oh, ow}, no = xs[0] * xs[1] * oh * ow;
    keel_tensor *x = rand_vals(KEEL_F32, 4, xs, false);
    keel_tensor *dy = rand_vals(KEEL_F32, 4, ys, false);
    keel_tensor *out[2] = {NULL, NULL}, *dx = NULL, *in[3], *idx;
    keel_attr a = keel_attr_ints("kernel_size", (int64_t[]){2, 2}, 2);
    double *iv, *dyv, *dxv, *ref;
    int n = 0, bad = 0;

    CU_ASSERT_EQUAL_FATAL(
        keel_op_run(KEEL_OP_MAX_POOL2D, &x, 1, &a, 1, out, 2, &n),
        KEEL_STATUS_OK);
    iv = ot_host(out[1]);
    if (craft == 1) /* the first output routes to its neighbour's window */
        iv[0] = 2;
    if (craft == 2) /* the last output joins the one before it */
        iv[no - 1] = iv[no - 2];
    if (craft == 3) /* out of the plane: dropped */
        iv[no / 2] = (double)hw;
    idx = ot_from(KEEL_I64, 4, ys, iv);
    in[0] = x, in[1] = idx, in[2] = dy;
    CU_ASSERT_EQUAL_FATAL(keel_op_run(KEEL_OP_MAX_POOL2D_GRAD, in, 3, NULL, 0,
                                      &dx, 1, &n),
                          KEEL_STATUS_OK);
    dyv = ot_host(dy);
    dxv = ot_host(dx);
    ref = calloc((size_t)(xs[0] * xs[1] * hw), sizeof(double));
    for (int64_t o = 0; o < no; o++) {
        int64_t plane = o / (oh * ow), i = (int64_t)iv[o];
        if (i >= 0 && i < hw)
            ref[plane * hw + i] += dyv[o];
    }
    for (int64_t e = 0; e < xs[0] * xs[1] * hw; e++)
        if (fabs(dxv[e] - ref[e]) > 1e-6 && !bad++)
            fprintf(stderr, "\n  max_pool2d_grad 2x2 [%lld,%lld,%lld,%lld] "
                            "craft %d: dx[%lld] %g, want %g\n",
                    (long long)xs[0], (long long)xs[1], (long long)xs[2],
                    (long long)xs[3], craft, (long long)e, dxv[e], ref[e]);
    CU_ASSERT_EQUAL(bad, 0);
    free(iv), free(dyv), free(dxv), free(ref);
    keel_tensor_free(x), keel_tensor_free(dy), keel_tensor_free(idx);
    keel_tensor_free(out[0]), keel_tensor_free(out[1]), keel_tensor_free(dx);
}

static void test_pool_grad_2x2(void)
{
    static const int64_t shapes[][4] = {
        {4, 6, 28, 28}, /* LeNet's first pooling */
        {3, 2, 9, 37},  /* odd sizes: last row and column uncovered */
        {2, 3, 6, 66},  /* 33 outputs a row: two full blocks and one lane */
    };

    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        for (int craft = 0; craft < 4; craft++)
            run_pool_grad_2x2(shapes[i], craft);
}

/* adaptive: window i spans [floor(i*H/oh), ceil((i+1)*H/oh)) */
static void run_adaptive(keel_dtype dt, const int64_t xs[4], int nos,
                         const int64_t *os, enum ot_layout lx)
{
    int64_t oh = os[0] == -1 ? xs[2] : os[0];
    int64_t ow = os[nos - 1] == -1 ? xs[3] : os[nos - 1];
    int64_t ys[4] = {xs[0], xs[1], oh, ow}, plane = xs[2] * xs[3];
    keel_tensor *x = rand_vals(dt, 4, xs, dt == KEEL_F64);
    keel_tensor *dout = rand_vals(dt, 4, ys, dt == KEEL_F64);
    keel_tensor *y = NULL, *dx = NULL, *in[2];
    keel_attr a = keel_attr_ints("output_size", os, nos);
    double *xv, *dv, *ref, *dref;
    int n = 0;

    if (lx != OT_CONTIG) {
        keel_tensor *t = ot_layout(x, lx);
        keel_tensor_free(x);
        x = t;
    }
    xv = ot_host(x);
    dv = ot_host(dout);
    ref = calloc((size_t)numel4(ys) + 1, sizeof(double));
    dref = calloc((size_t)numel4(xs) + 1, sizeof(double));
    for (int64_t q = 0; q < xs[0] * xs[1]; q++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                int64_t y0 = i * xs[2] / oh;
                int64_t y1 = (int64_t)ceil((double)((i + 1) * xs[2]) / oh);
                int64_t x0 = j * xs[3] / ow;
                int64_t x1 = (int64_t)ceil((double)((j + 1) * xs[3]) / ow);
                double s = 0, cnt = (double)((y1 - y0) * (x1 - x0));
                int64_t o = (q * oh + i) * ow + j;
                for (int64_t yy = y0; yy < y1; yy++)
                    for (int64_t xx = x0; xx < x1; xx++) {
                        s += xv[q * plane + yy * xs[3] + xx];
                        dref[q * plane + yy * xs[3] + xx] += dv[o] / cnt;
                    }
                ref[o] = s / cnt;
            }
    in[0] = x;
    in[1] = dout;
    CU_ASSERT_EQUAL_FATAL(
        keel_op_run(KEEL_OP_ADAPTIVE_AVG_POOL2D, in, 1, &a, 1, &y, 1, &n),
        KEEL_STATUS_OK);
    if (ot_check_shape("adaptive", y, 4, ys))
        ot_check("adaptive", y, ref, dt);
    CU_ASSERT_EQUAL_FATAL(keel_op_run(KEEL_OP_ADAPTIVE_AVG_POOL2D_GRAD, in, 2,
                                      &a, 1, &dx, 1, &n),
                          KEEL_STATUS_OK);
    if (ot_check_shape("adaptive grad", dx, 4, xs))
        ot_check("adaptive grad", dx, dref, dt);
    keel_tensor_free(y);
    keel_tensor_free(dx);
    keel_tensor_free(x);
    keel_tensor_free(dout);
    free(xv);
    free(dv);
    free(ref);
    free(dref);
}

static void test_adaptive_pool(void)
{
    for (int k = 0; k < 4; k++) {
        keel_dtype dt = ot_float_dtypes[k];
        run_adaptive(dt, (int64_t[]){2, 3, 7, 5}, 2, (int64_t[]){3, 2},
                     OT_CONTIG);
        run_adaptive(dt, (int64_t[]){1, 2, 6, 6}, 1, (int64_t[]){1},
                     OT_CONTIG);
        run_adaptive(dt, (int64_t[]){1, 2, 3, 4}, 2, (int64_t[]){5, 7},
                     OT_CONTIG); /* larger than the input: overlaps */
        run_adaptive(dt, (int64_t[]){2, 2, 5, 9}, 2, (int64_t[]){-1, 4},
                     OT_TRANSPOSED);
        run_adaptive(dt, (int64_t[]){1, 3, 6, 7}, 2, (int64_t[]){4, 3},
                     OT_STRIDED);
    }
    run_adaptive(KEEL_F32, (int64_t[]){4, 16, 33, 31}, 2, (int64_t[]){7, 7},
                 OT_CONTIG);
}

static void test_pool_empty(void)
{
    keel_tensor *x = rand_vals(KEEL_F32, 4, (int64_t[]){0, 3, 4, 4}, false);
    keel_tensor *out[2] = {NULL, NULL}, *dx = NULL, *in[3];
    keel_attr a = keel_attr_ints("kernel_size", (int64_t[]){2, 2}, 2);
    keel_attr o = keel_attr_ints("output_size", (int64_t[]){2, 2}, 2);
    int n = 0;

    CU_ASSERT_EQUAL_FATAL(
        keel_op_run(KEEL_OP_MAX_POOL2D, &x, 1, &a, 1, out, 2, &n),
        KEEL_STATUS_OK);
    ot_check_shape("empty max", out[0], 4, (int64_t[]){0, 3, 2, 2});
    in[0] = x, in[1] = out[1], in[2] = out[0];
    CU_ASSERT_EQUAL(keel_op_run(KEEL_OP_MAX_POOL2D_GRAD, in, 3, NULL, 0, &dx,
                                1, &n),
                    KEEL_STATUS_OK);
    ot_check_shape("empty max grad", dx, 4, (int64_t[]){0, 3, 4, 4});
    keel_tensor_free(dx);
    keel_tensor_free(out[0]);
    keel_tensor_free(out[1]);
    CU_ASSERT_EQUAL_FATAL(
        keel_op_run(KEEL_OP_ADAPTIVE_AVG_POOL2D, &x, 1, &o, 1, out, 1, &n),
        KEEL_STATUS_OK);
    ot_check_shape("empty adaptive", out[0], 4, (int64_t[]){0, 3, 2, 2});
    in[1] = out[0];
    CU_ASSERT_EQUAL(keel_op_run(KEEL_OP_ADAPTIVE_AVG_POOL2D_GRAD, in, 2, &o,
                                1, &dx, 1, &n),
                    KEEL_STATUS_OK);
    ot_check_shape("empty adaptive grad", dx, 4, (int64_t[]){0, 3, 4, 4});
    keel_tensor_free(dx);
    keel_tensor_free(out[0]);
    CU_ASSERT_EQUAL_FATAL(
        keel_op_run(KEEL_OP_AVG_POOL2D, &x, 1, &a, 1, out, 1, &n),
        KEEL_STATUS_OK);
    ot_check_shape("empty avg", out[0], 4, (int64_t[]){0, 3, 2, 2});
    in[1] = out[0];
    CU_ASSERT_EQUAL(
        keel_op_run(KEEL_OP_AVG_POOL2D_GRAD, in, 2, &a, 1, &dx, 1, &n),
        KEEL_STATUS_OK);
    ot_check_shape("empty avg grad", dx, 4, (int64_t[]){0, 3, 4, 4});
    keel_tensor_free(dx);
    keel_tensor_free(out[0]);
    keel_tensor_free(x);
}

static void test_pool_errors(void)
{
    keel_tensor *x = rand_vals(KEEL_F32, 4, (int64_t[]){1, 2, 4, 4}, false);
    keel_tensor *x3 = rand_vals(KEEL_F32, 3, (int64_t[]){2, 4, 4}, false);
    keel_tensor *xi = ot_rand(KEEL_I32, 4, (int64_t[]){1, 2, 4, 4}, 0, 3);
    keel_tensor *d = rand_vals(KEEL_F32, 4, (int64_t[]){1, 2, 3, 3}, false);
    keel_tensor *fi = rand_vals(KEEL_F32, 4, (int64_t[]){1, 2, 2, 2}, false);
    keel_tensor *out[2] = {NULL, NULL};
    keel_attr a[2];
    int n = 0;

    a[0] = keel_attr_ints("kernel_size", (int64_t[]){5, 2}, 2);
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_MAX_POOL2D, &x, 1, a, 1, out, 2, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "max_pool2d",
                    "larger than the padded input");
    a[0] = keel_attr_ints("kernel_size", (int64_t[]){2, 2, 2}, 3);
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_AVG_POOL2D, &x, 1, a, 1, out, 1, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "avg_pool2d",
                    "1 or 2 values");
    a[0] = keel_attr_ints("kernel_size", (int64_t[]){2, 2}, 2);
    a[1] = keel_attr_ints("stride", (int64_t[]){0, 1}, 2);
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_AVG_POOL2D, &x, 1, a, 2, out, 1, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "avg_pool2d", "stride");
    a[1] = keel_attr_ints("padding", (int64_t[]){1, 1, 1}, 3);
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_MAX_POOL2D, &x, 1, a, 2, out, 2, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "max_pool2d",
                    "1, 2 or 4 values");
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_MAX_POOL2D, &x, 1, NULL, 0, out, 2,
                                &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "max_pool2d",
                    "kernel_size");
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_MAX_POOL2D, &x3, 1, a, 1, out, 2, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "max_pool2d", "4-D");
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_AVG_POOL2D, &xi, 1, a, 1, out, 1, &n),
                    KEEL_STATUS_NOT_SUPPORTED, "avg_pool2d", "int32");
    /* avg grad: dout [1, 2, 3, 3] is not the k2 output [1, 2, 2, 2] */
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_AVG_POOL2D_GRAD,
                                (keel_tensor *[]){x, d}, 2, a, 1, out, 1, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "avg_pool2d_grad",
                    "forward output's shape");
    /* max grad: indices must be int64 */
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_MAX_POOL2D_GRAD,
                                (keel_tensor *[]){x, fi, fi}, 3, NULL, 0, out,
                                1, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "max_pool2d_grad", "int64");
    {
        /* int dout for max grad; a 0-d input; bool for ceil_mode */
        keel_tensor *di = ot_rand(KEEL_I32, 4, (int64_t[]){1, 2, 2, 2}, 0, 3);
        keel_tensor *s0 = rand_vals(KEEL_F32, 0, NULL, false);
        keel_tensor *idx = ot_rand(KEEL_I64, 4, (int64_t[]){1, 2, 2, 2}, 0, 3);
        keel_attr c = keel_attr_float("ceil_mode", 0.5);
        EXPECT_OP_ERROR(keel_op_run(KEEL_OP_MAX_POOL2D_GRAD,
                                    (keel_tensor *[]){x, idx, di}, 3, NULL, 0,
                                    out, 1, &n),
                        KEEL_STATUS_NOT_SUPPORTED, "max_pool2d_grad",
                        "int32");
        EXPECT_OP_ERROR(keel_op_run(KEEL_OP_MAX_POOL2D, &s0, 1, a, 1, out, 2,
                                    &n),
                        KEEL_STATUS_INVALID_ARGUMENT, "max_pool2d", "4-D");
        a[1] = c;
        EXPECT_OP_ERROR(keel_op_run(KEEL_OP_AVG_POOL2D, &x, 1, a, 2, out, 1,
                                    &n),
                        KEEL_STATUS_INVALID_ARGUMENT, "avg_pool2d",
                        "ceil_mode");
        keel_tensor_free(di);
        keel_tensor_free(s0);
        keel_tensor_free(idx);
    }
    a[0] = keel_attr_ints("output_size", (int64_t[]){0, 2}, 2);
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_ADAPTIVE_AVG_POOL2D, &x, 1, a, 1, out,
                                1, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "adaptive_avg_pool2d",
                    "output_size");
    a[0] = keel_attr_ints("output_size", (int64_t[]){2, 2}, 2);
    EXPECT_OP_ERROR(keel_op_run(KEEL_OP_ADAPTIVE_AVG_POOL2D_GRAD,
                                (keel_tensor *[]){x, d}, 2, a, 1, out, 1, &n),
                    KEEL_STATUS_INVALID_ARGUMENT, "adaptive_avg_pool2d_grad",
                    "forward output's shape");
    CU_ASSERT_PTR_NULL(out[0]);
    keel_tensor_free(x);
    keel_tensor_free(x3);
    keel_tensor_free(xi);
    keel_tensor_free(d);
    keel_tensor_free(fi);
}

/* KEEL_CPU_CONV_SIMD=0: stride-1 float32 convs that the CPU plugin's
 * direct AVX-512 kernels would take run through im2col + GEMM instead, so
 * both paths stay covered on any CPU. */
static void test_gemm_path(void)
{
    struct conv_case lenet = {"lenet conv2", 16, 6, 14, 14, 16, 5, 5,
                              {1, 1}, {1, 1}, {0, 0}, 2, "EXPLICIT", 1,
                              {0, 0}, true};

    setenv("KEEL_CPU_CONV_SIMD", "0", 1);
    for (int i = 0; i < NCASES; i++)
        run_conv(&conv_cases[i], KEEL_F32, L_CONTIG, true);
    for (int i = 0; i < (int)(sizeof(convt_cases) / sizeof(convt_cases[0]));
         i++)
        run_convt(&convt_cases[i], KEEL_F32, L_CONTIG, true);
    run_conv(&lenet, KEEL_F32, L_CONTIG, true);
    unsetenv("KEEL_CPU_CONV_SIMD");
}

/* ---- fused_conv2d ------------------------------------------------------------ */

/* fused_conv2d of case cc against conv2d then the activation op. Real
 * inputs, so that every activation sees both signs and fractions. */
static void run_fused_conv(const struct conv_case *cc, keel_dtype dt,
                           int layout, const char *act, double alpha)
{
    int64_t cg = cc->c / cc->groups;
    int64_t xs[4] = {cc->n, cc->c, cc->h, cc->w};
    int64_t ws[4] = {cc->o, cg, cc->kh, cc->kw};
    keel_tensor *x = relayout(ot_rand(dt, 4, xs, -1.5, 1.5), layout, L_X_T,
                              L_X_S);
    keel_tensor *w = relayout(ot_rand(dt, 4, ws, -1, 1), layout, L_W_T, 0);
    keel_tensor *b = cc->bias ? ot_rand(dt, 1, &cc->o, -2, 2) : NULL;
    keel_tensor *in[3] = {x, w, b}, *got = NULL, *y = NULL, *want = NULL;
    keel_attr a[10];
    int na = case_attrs(cc, a, false, -1), n1 = 0, n2 = 0;
    char what[200];

    snprintf(what, sizeof(what), "fused_conv2d %s, %s (layout %d)", act,
             cc->name, layout);
    if (keel_op_run(KEEL_OP_CONV2D, in, b ? 3 : 2, a, na, &y, 1, &n1))
        fprintf(stderr, "\n  %s: conv2d: %s\n", what, keel_last_error());
    a[na++] = keel_attr_str("activation", act);
    a[na++] = keel_attr_float("alpha", alpha);
    if (keel_op_run(KEEL_OP_FUSED_CONV2D, in, b ? 3 : 2, a, na, &got, 1, &n2))
        fprintf(stderr, "\n  %s: %s\n", what, keel_last_error());
    CU_ASSERT_EQUAL_FATAL(n1, 1);
    CU_ASSERT_EQUAL_FATAL(n2, 1);
    CU_ASSERT_EQUAL_FATAL(ot_activation(y, act, alpha, &want),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_dtype(got), dt);
    if (ot_check_shape(what, got, 4, keel_tensor_shape(want)))
        ot_check_ulp(what, got, want, dt,
                     dt == KEEL_F16 || dt == KEEL_BF16 ? 1 : 0);
    keel_tensor_free(got);
    keel_tensor_free(y);
    keel_tensor_free(want);
    keel_tensor_free(x);
    keel_tensor_free(w);
    keel_tensor_free(b);
}

/* Each activation over the geometry cases: float32 and float64 on all of
 * them (float32 small stride-1 ones on the direct SIMD kernels), the
 * half dtypes on every third. */
static void test_fused_conv2d_activations(void)
{
    for (int a = 0; a < KEEL_FUSED_ACT_COUNT_; a++) {
        const char *act = keel_fused_act_name((keel_fused_act)a);
        double alpha = a == KEEL_FUSED_ACT_LEAKY_RELU ? 0.2 : 0;
        for (int i = 0; i < NCASES; i++) {
            run_fused_conv(&conv_cases[i], KEEL_F32, L_CONTIG, act, alpha);
            run_fused_conv(&conv_cases[i], KEEL_F64, L_CONTIG, act, alpha);
            if (i % 3 == a % 3) {
                run_fused_conv(&conv_cases[i], KEEL_F16, L_CONTIG, act,
                               alpha);
                run_fused_conv(&conv_cases[i], KEEL_BF16, L_CONTIG, act,
                               alpha);
            }
        }
    }
}

/* The other paths: im2col + GEMM for float32 (SIMD off), large convs
 * (OpenBLAS threads, pool slots, split GEMMs), views, empty tensors and
 * the allocation-free loops. */
static void test_fused_conv2d_paths(void)
{
    struct conv_case big = {"large", 4, 16, 20, 20, 32, 3, 3, {1, 1},
                            {1, 1}, {1, 1}, 2, "EXPLICIT", 1, {0, 0}, true};
    struct conv_case lenet = {"lenet conv2", 16, 6, 14, 14, 16, 5, 5,
                              {1, 1}, {1, 1}, {0, 0}, 2, "EXPLICIT", 1,
                              {0, 0}, true};
    struct conv_case wide = {"split GEMMs", 3, 4, 40, 40, 8, 3, 3, {1, 1},
                             {1, 1}, {1, 1}, 2, "EXPLICIT", 1, {0, 0}, true};
    struct conv_case c0 = {"C = 0 gives act(bias)", 2, 0, 5, 5, 3, 3, 3,
                           {1, 1}, {1, 1}, {1, 1}, 2, "EXPLICIT", 1, {0, 0},
                           true};
    struct conv_case n0 = {"N = 0", 0, 3, 5, 5, 2, 3, 3, {1, 1}, {1, 1},
                           {1, 1}, 2, "EXPLICIT", 1, {0, 0}, true};
    static const int layouts[] = {L_X_T, L_X_S | L_W_T};

    for (int a = 0; a < KEEL_FUSED_ACT_COUNT_; a++) {
        const char *act = keel_fused_act_name((keel_fused_act)a);
        double alpha = a == KEEL_FUSED_ACT_LEAKY_RELU ? 0.05 : 0;
        setenv("KEEL_CPU_CONV_SIMD", "0", 1);
        for (int i = 0; i < NCASES; i += 2)
            run_fused_conv(&conv_cases[i], KEEL_F32, L_CONTIG, act, alpha);
        run_fused_conv(&lenet, KEEL_F32, L_CONTIG, act, alpha);
        unsetenv("KEEL_CPU_CONV_SIMD");
        run_fused_conv(&lenet, a % 2 ? KEEL_BF16 : KEEL_F32, L_CONTIG, act,
                       alpha);
        run_fused_conv(&big, a % 2 ? KEEL_F32 : KEEL_F16, L_CONTIG, act,
                       alpha);
        run_fused_conv(&wide, a % 2 ? KEEL_F64 : KEEL_F32, L_CONTIG, act,
                       alpha);
        for (int l = 0; l < 2; l++) {
            run_fused_conv(&conv_cases[0], KEEL_F32, layouts[l], act, alpha);
            run_fused_conv(&conv_cases[9], KEEL_F16, layouts[l], act, alpha);
        }
        for (int k = 0; k < 4; k++) {
            run_fused_conv(&c0, ot_float_dtypes[k], L_CONTIG, act, alpha);
            run_fused_conv(&n0, ot_float_dtypes[k], L_CONTIG, act, alpha);
        }
        setenv("KEEL_CPU_NO_WORKSPACE", "1", 1);
        run_fused_conv(&conv_cases[4], KEEL_F32, L_CONTIG, act, alpha);
        run_fused_conv(&conv_cases[10], KEEL_F16, L_X_S, act, alpha);
        run_fused_conv(&conv_cases[6], KEEL_BF16, L_CONTIG, act, alpha);
        unsetenv("KEEL_CPU_NO_WORKSPACE");
    }
}

/* keel_fused_conv2d: default parameters, and values worked by hand (the
 * typed conv2d test's convolution). */
static void test_fused_conv2d_typed_api(void)
{
    double xv[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, wv[4] = {1, 0, 0, -1};
    double leaky[4] = {-2, -2, -2, -2}, clipped[4] = {6, 6, 6, 6};
    keel_tensor *x = ot_from(KEEL_F32, 4, (int64_t[]){1, 1, 3, 3}, xv);
    keel_tensor *w = ot_from(KEEL_F32, 4, (int64_t[]){1, 1, 2, 2}, wv);
    keel_tensor *b = ot_from(KEEL_F32, 1, (int64_t[]){1}, (double[]){10});
    keel_tensor *y = NULL;
    keel_conv2d_params prm = keel_conv2d_default_params();

    /* conv2d gives -4 everywhere; with the bias 6 */
    CU_ASSERT_EQUAL_FATAL(
        keel_fused_conv2d(x, w, NULL, NULL, "leaky_relu", 0.5, &y),
        KEEL_STATUS_OK);
    ot_check_shape("typed fused_conv2d", y, 4, (int64_t[]){1, 1, 2, 2});
    ot_check("typed fused_conv2d leaky_relu", y, leaky, KEEL_F32);
    keel_tensor_free(y);
    CU_ASSERT_EQUAL_FATAL(keel_fused_conv2d(x, w, b, &prm, "relu6", 0, &y),
                          KEEL_STATUS_OK);
    ot_check("typed fused_conv2d relu6", y, clipped, KEEL_F32);
    keel_tensor_free(y);
    prm.npadding = 3;
    OT_EXPECT_ERROR(keel_fused_conv2d(x, w, b, &prm, "relu", 0, &y),
                    KEEL_STATUS_INVALID_ARGUMENT,
                    "keel_fused_conv2d: npadding = 3");
    keel_tensor_free(x);
    keel_tensor_free(w);
    keel_tensor_free(b);
}

static void test_fused_conv2d_errors(void)
{
    keel_tensor *x = ot_rand(KEEL_F32, 4, (int64_t[]){1, 2, 5, 5}, -1, 1);
    keel_tensor *w = ot_rand(KEEL_F32, 4, (int64_t[]){3, 2, 3, 3}, -1, 1);
    keel_tensor *w3 = ot_rand(KEEL_F32, 4, (int64_t[]){3, 3, 3, 3}, -1, 1);
    keel_tensor *y = NULL;

    EXPECT_OP_ERROR(keel_fused_conv2d(x, w, NULL, NULL, "mish", 0, &y),
                    KEEL_STATUS_INVALID_ARGUMENT, "fused_conv2d",
                    "activation 'mish' is not one of none, relu, relu6, "
                    "gelu, gelu_tanh, silu, sigmoid, tanh, leaky_relu, "
                    "hardswish");
    EXPECT_OP_ERROR(keel_fused_conv2d(x, w, NULL, NULL, "Gelu", 0, &y),
                    KEEL_STATUS_INVALID_ARGUMENT, "fused_conv2d",
                    "activation 'Gelu'");
    EXPECT_OP_ERROR(keel_fused_conv2d(x, w3, NULL, NULL, "relu", 0, &y),
                    KEEL_STATUS_INVALID_ARGUMENT, "fused_conv2d",
                    "channel");
    CU_ASSERT_PTR_NULL(y);
    /* NULL means none: conv2d itself */
    CU_ASSERT_EQUAL(keel_fused_conv2d(x, w, NULL, NULL, NULL, 0, &y),
                    KEEL_STATUS_OK);
    keel_tensor_free(y);
    keel_tensor_free(x);
    keel_tensor_free(w);
    keel_tensor_free(w3);
}

/* KEEL_CPU_NO_WORKSPACE: the kernels run their allocation-free loops. */
static void test_no_workspace_fallback(void)
{
    setenv("KEEL_CPU_NO_WORKSPACE", "1", 1);
    run_conv(&conv_cases[4], KEEL_F32, L_CONTIG, true);
    run_conv(&conv_cases[10], KEEL_F16, L_X_S, true);
    run_conv(&conv_cases[6], KEEL_BF16, L_CONTIG, false);
    run_convt(&convt_cases[1], KEEL_F32, L_CONTIG, true);
    run_convt(&convt_cases[4], KEEL_F16, L_W_T, true);
    run_pool(&pool_cases[2], KEEL_F16, OT_TRANSPOSED, OT_STRIDED);
    run_pool(&pool_cases[6], KEEL_BF16, OT_CONTIG, OT_CONTIG);
    run_adaptive(KEEL_F16, (int64_t[]){2, 3, 7, 5}, 2, (int64_t[]){3, 2},
                 OT_STRIDED);
    unsetenv("KEEL_CPU_NO_WORKSPACE");
}

int main(void)
{
    static const ot_test tests[] = {
        {"conv2d geometry cases (f32, f64)", test_conv2d_cases},
        {"conv2d float16 / bfloat16", test_conv2d_half},
        {"conv2d_grad cases", test_conv2d_grad_cases},
        {"conv2d non-contiguous inputs", test_conv2d_noncontiguous},
        {"conv2d typed API and exact values", test_conv2d_typed_api},
        {"conv2d empty tensors", test_conv2d_empty},
        {"conv2d large (threads)", test_conv2d_large},
        {"conv f32 on the im2col + GEMM path", test_gemm_path},
        {"max_pool2d_grad 2x2/2, dense and crafted indices",
         test_pool_grad_2x2},
        {"conv2d_transpose and grad", test_conv2d_transpose},
        {"conv2d_transpose large", test_conv2d_transpose_large},
        {"conv errors", test_conv_errors},
        {"max/avg pool and grads", test_pool_cases},
        {"pool non-contiguous", test_pool_noncontiguous},
        {"pool large (threads)", test_pool_large},
        {"pool exact values, ties, NaN", test_pool_exact},
        {"max pool dense rows: ties, signed zeros, NaN", test_pool_dense_rows},
        {"adaptive avg pool and grad", test_adaptive_pool},
        {"pool empty batch", test_pool_empty},
        {"pool errors", test_pool_errors},
        {"allocation-free fallback", test_no_workspace_fallback},
        {"fused_conv2d: every activation, geometry cases",
         test_fused_conv2d_activations},
        {"fused_conv2d: GEMM path, large, views, empty, no workspace",
         test_fused_conv2d_paths},
        {"fused_conv2d typed API and exact values",
         test_fused_conv2d_typed_api},
        {"fused_conv2d errors", test_fused_conv2d_errors},
    };
    return ot_main("conv", tests, (int)(sizeof(tests) / sizeof(tests[0])));
}
