/*
 * keel OpenCL C kernels — nn family, host side (OpenCL C in
 * plugins/clkernels/nn.cl).
 *
 * The kernels compute in float (_f32: float32, float16 and bfloat16
 * launches) or double (_f64) and read every floating operand through its
 * dtype code, so auxiliary operands of another floating dtype (float32
 * scale of a float16 x, a float64 grad, soft labels, weights) need no cast.
 * Operands the kernels index as row-major are made contiguous first
 * (ok_contiguous_copy) when they are strided views; 1-D [C] parameters go
 * with their element stride, embedding's table with its two strides, the
 * optimizer operands (updated in place) with their descriptors.
 *
 * Losses reduced to a scalar: per-sample or per-group partial sums in a
 * scratch buffer, added by one work-group (nn_fin_*) in a fixed order, all
 * enqueued on the stream: deterministic, and nothing waits.
 *
 * embedding_grad sorts keys id << 32 | position on the device (bitonic),
 * finds each row's run by binary search, and sums each dtable element's
 * dout values in position order: no float atomics, deterministic, the same
 * order as the CPU plugin's.
 *
 * Index values (labels, ids, classes) are not range-checked before the
 * launch: that would need the values on the host, and a kernel cannot
 * report an error. As in the CUDA plugin, values out of range are treated
 * as ignored (zero loss and weight, zero rows), where the CPU plugin
 * refuses the launch with INVALID_ARGUMENT.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ok.h"

#define NN_WG 256   /* work-group size of the reducing kernels (nn.cl) */
#define NN_PARTS 64 /* partial sums of an elementwise loss */
#define NN_MAXM 12  /* scratch buffers of one launch */

struct nn_ctx {
    struct ok_launch l;
    const char *op;
    bool dbl; /* computes in double: the _f64 kernels */
    ok_mem m[NN_MAXM];
    int nm;
};

/* Kit check, queue, program; float64 operands need a float64 device
 * (the _f32 kernels do not read them). */
static keel_status nn_begin(const keel_kernel_args *a, const char *op,
                            struct nn_ctx *c)
{
    keel_status st;

    memset(c, 0, sizeof(*c));
    c->op = op;
    st = ok_begin(a, op, &c->l);
    if (st)
        return st;
    for (int i = 0; !c->l.fp64 && i < a->num_inputs + a->num_outputs; i++) {
        const keel_tensor_desc *d = i < a->num_inputs
                                        ? &a->inputs[i]
                                        : &a->outputs[i - a->num_inputs];
        if (d->dtype == KEEL_F64)
            return ok_fail(KEEL_STATUS_NOT_SUPPORTED,
                           "%s: a float64 operand on a device without "
                           "float64",
                           op);
    }
    return KEEL_STATUS_OK;
}

/* Release the launch's scratch buffers (the backend keeps them alive for
 * the work enqueued) and return st. */
static keel_status nn_end(struct nn_ctx *c, keel_status st)
{
    for (int i = 0; i < c->nm; i++)
        ok_scratch_release(&c->l, c->m[i]);
    c->nm = 0;
    return st;
}

static keel_status nn_scratch(struct nn_ctx *c, size_t bytes, ok_mem *m)
{
    keel_status st;

    if (c->nm >= NN_MAXM)
        return ok_fail(KEEL_STATUS_INTERNAL, "%s: too many scratch buffers",
                       c->op);
    st = ok_scratch(&c->l, bytes ? bytes : 1, m);
    if (!st)
        c->m[c->nm++] = *m;
    return st;
}

/* d as a row-major contiguous buffer argument: d itself when it is one
 * (or empty), else a contiguous copy. */
static keel_status nn_dense(struct nn_ctx *c, const keel_tensor_desc *d,
                            struct ok_arg *arg)
{
    ok_mem m;
    keel_status st;

    if (keel_kit_numel(d) == 0 || keel_kit_contiguous(d)) {
        *arg = OK_T(&c->l, d);
        return KEEL_STATUS_OK;
    }
    if (c->nm >= NN_MAXM)
        return ok_fail(KEEL_STATUS_INTERNAL, "%s: too many scratch buffers",
                       c->op);
    st = ok_contiguous_copy(&c->l, d, &m);
    if (st)
        return st;
    c->m[c->nm++] = m;
    *arg = OK_MEM(m);
    return KEEL_STATUS_OK;
}

/* Element stride of a 1-D [C] parameter. */
static int64_t nn_vstride(const keel_tensor_desc *d)
{
    return d->ndim > 0 ? d->strides[d->ndim - 1] : 0;
}

/* "<base>_f32" or "<base>_f64". */
static const char *nn_kname(const struct nn_ctx *c, char *buf, size_t size,
                            const char *base)
{
    snprintf(buf, size, "%s_%s", base, c->dbl ? "f64" : "f32");
    return buf;
}

/* A scalar of the compute type. */
#define NN_FT(c_, v_) ((c_)->dbl ? OK_F64(v_) : OK_F32(v_))
/* An absent buffer operand. */
#define NN_NONE ((struct ok_arg){.kind = OK_A_BUF, .ptr = 0, .bytes = 0})
/* The dtype code of the compute type (scratch partial sums). */
#define NN_TDT(c_) ((c_)->dbl ? KEEL_F64 : KEEL_F32)
#define NN_TSZ(c_) ((c_)->dbl ? sizeof(double) : sizeof(float))

/* Work-group size of a kernel reducing rows of len elements: 32 for short
 * rows (class counts, small spatial sizes), else NN_WG. Two sizes only:
 * PoCL compiles a kernel once per work-group size it is launched with. */
static int64_t nn_wg(int64_t len)
{
    return len <= 32 ? 32 : NN_WG;
}

static int64_t nn_ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* ---- batch_norm ------------------------------------------------------------ */

static keel_status k_batch_norm(void *kd, const keel_kernel_args *a)
{
    struct nn_ctx c;
    struct ok_arg xa;
    char kn[48];
    keel_status st;
    (void)kd;

    if ((st = nn_begin(a, "batch_norm", &c)))
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *sc = &a->inputs[1],
                           *bi = &a->inputs[2], *rm = &a->inputs[3],
                           *rv = &a->inputs[4], *y = &a->outputs[0],
                           *om = &a->outputs[1], *oi = &a->outputs[2];
    int64_t N = x->shape[0], C = x->shape[1];
    int64_t S = keel_kit_prod(x->shape, 2, x->ndim), wg = nn_wg(N * S);

    c.dbl = x->dtype == KEEL_F64;
    if ((st = nn_dense(&c, x, &xa)))
        return nn_end(&c, st);
    st = OK_RUN_WG(&c.l, nn_kname(&c, kn, sizeof(kn), "nn_bn"), C * wg, wg, xa, OK_I32(x->dtype), OK_T(&c.l, sc),
                   OK_I32(sc->dtype), OK_I64(nn_vstride(sc)), OK_T(&c.l, bi),
                   OK_I32(bi->dtype), OK_I64(nn_vstride(bi)), OK_T(&c.l, rm),
                   OK_I32(rm->dtype), OK_I64(nn_vstride(rm)), OK_T(&c.l, rv),
                   OK_I32(rv->dtype), OK_I64(nn_vstride(rv)), OK_T(&c.l, y),
                   OK_T(&c.l, om), OK_I32(om->dtype), OK_T(&c.l, oi),
                   OK_I32(oi->dtype), OK_I64(N), OK_I64(C), OK_I64(S),
                   OK_I32(keel_kit_attr_i(a, "training", 1) != 0),
                   NN_FT(&c, keel_kit_attr_f(a, "momentum", 0.9)),
                   NN_FT(&c, keel_kit_attr_f(a, "epsilon", 1e-5)));
    return nn_end(&c, st);
}

static keel_status k_batch_norm_grad(void *kd, const keel_kernel_args *a)
{
    struct nn_ctx c;
    struct ok_arg xa, dya;
    char kn[48];
    keel_status st;
    (void)kd;

    if ((st = nn_begin(a, "batch_norm_grad", &c)))
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *sc = &a->inputs[1],
                           *sm = &a->inputs[2], *si = &a->inputs[3],
                           *dy = &a->inputs[4], *dx = &a->outputs[0],
                           *ds = &a->outputs[1], *db = &a->outputs[2];
    int64_t N = x->shape[0], C = x->shape[1];
    int64_t S = keel_kit_prod(x->shape, 2, x->ndim), wg = nn_wg(N * S);

    c.dbl = x->dtype == KEEL_F64;
    if ((st = nn_dense(&c, x, &xa)) || (st = nn_dense(&c, dy, &dya)))
        return nn_end(&c, st);
    st = OK_RUN_WG(&c.l, nn_kname(&c, kn, sizeof(kn), "nn_bng"), C * wg, wg, xa, OK_I32(x->dtype), OK_T(&c.l, sc),
                   OK_I32(sc->dtype), OK_I64(nn_vstride(sc)), OK_T(&c.l, sm),
                   OK_I32(sm->dtype), OK_I64(nn_vstride(sm)), OK_T(&c.l, si),
                   OK_I32(si->dtype), OK_I64(nn_vstride(si)), dya,
                   OK_I32(dy->dtype), OK_T(&c.l, dx), OK_T(&c.l, ds),
                   OK_I32(ds->dtype), OK_T(&c.l, db), OK_I32(db->dtype),
                   OK_I64(N), OK_I64(C), OK_I64(S),
                   OK_I32(keel_kit_attr_i(a, "training", 1) != 0));
    return nn_end(&c, st);
}

/* ---- layer_norm -------------------------------------------------------------- */

static keel_status k_layer_norm(void *kd, const keel_kernel_args *a)
{
    struct nn_ctx c;
    struct ok_arg xa, sa = NN_NONE, ba = NN_NONE;
    keel_kit_norm g;
    char kn[48];
    keel_status st;
    (void)kd;

    if ((st = nn_begin(a, "layer_norm", &c)))
        return st;
    if ((st = keel_kit_norm_geometry(KEEL_OP_LAYER_NORM, a, &g, NULL)))
        return ok_fail(st, "layer_norm: geometry");
    const keel_tensor_desc *x = &a->inputs[0], *y = &a->outputs[0],
                           *om = &a->outputs[1], *oi = &a->outputs[2];
    keel_dtype sdt = g.scale >= 0 ? a->inputs[g.scale].dtype : KEEL_F32;
    keel_dtype bdt = g.bias >= 0 ? a->inputs[g.bias].dtype : KEEL_F32;
    int64_t wg = nn_wg(g.inner);

    c.dbl = x->dtype == KEEL_F64;
    if ((st = nn_dense(&c, x, &xa)) ||
        (g.scale >= 0 && (st = nn_dense(&c, &a->inputs[g.scale], &sa))) ||
        (g.bias >= 0 && (st = nn_dense(&c, &a->inputs[g.bias], &ba))))
        return nn_end(&c, st);
    st = OK_RUN_WG(&c.l, nn_kname(&c, kn, sizeof(kn), "nn_ln"),
                   g.outer * wg, wg, xa, OK_I32(x->dtype), sa,
                   OK_I32(sdt), OK_I32(g.scale >= 0), ba, OK_I32(bdt),
                   OK_I32(g.bias >= 0), OK_T(&c.l, y), OK_T(&c.l, om),
                   OK_I32(om->dtype), OK_T(&c.l, oi), OK_I32(oi->dtype),
                   OK_I64(g.inner),
                   NN_FT(&c, keel_kit_attr_f(a, "epsilon", 1e-5)));
    return nn_end(&c, st);
}

static keel_status k_layer_norm_grad(void *kd, const keel_kernel_args *a)
{
    struct nn_ctx c;
    struct ok_arg xa, sa = NN_NONE, ma, ia, dya;
    keel_kit_norm g;
    char kn[48];
    keel_status st;
    (void)kd;

    if ((st = nn_begin(a, "layer_norm_grad", &c)))
        return st;
    if ((st = keel_kit_norm_geometry(KEEL_OP_LAYER_NORM_GRAD, a, &g, NULL)))
        return ok_fail(st, "layer_norm_grad: geometry");
    const keel_tensor_desc *x = &a->inputs[0], *mu = &a->inputs[g.stat[0]],
                           *iv = &a->inputs[g.stat[1]],
                           *dy = &a->inputs[g.dy], *dx = &a->outputs[0],
                           *ds = &a->outputs[1], *db = &a->outputs[2];
    keel_dtype sdt = g.scale >= 0 ? a->inputs[g.scale].dtype : KEEL_F32;
    int64_t wg = nn_wg(g.inner);

    c.dbl = x->dtype == KEEL_F64;
    if ((st = nn_dense(&c, x, &xa)) || (st = nn_dense(&c, mu, &ma)) ||
        (st = nn_dense(&c, iv, &ia)) || (st = nn_dense(&c, dy, &dya)) ||
        (g.scale >= 0 && (st = nn_dense(&c, &a->inputs[g.scale], &sa))))
        return nn_end(&c, st);
    st = OK_RUN_WG(&c.l, nn_kname(&c, kn, sizeof(kn), "nn_lng"),
                   g.outer * wg, wg, xa, OK_I32(x->dtype), sa,
                   OK_I32(sdt), OK_I32(g.scale >= 0), ma, OK_I32(mu->dtype),
                   ia, OK_I32(iv->dtype), dya, OK_I32(dy->dtype),
                   OK_T(&c.l, dx), OK_I64(g.inner));
    if (!st)
        st = OK_RUN(&c.l, nn_kname(&c, kn, sizeof(kn), "nn_lngc"), g.inner,
                    xa, OK_I32(x->dtype), ma, OK_I32(mu->dtype), ia,
                    OK_I32(iv->dtype), dya, OK_I32(dy->dtype),
                    OK_T(&c.l, ds), OK_I32(ds->dtype), OK_T(&c.l, db),
                    OK_I32(db->dtype), OK_I64(g.outer), OK_I64(g.inner));
    return nn_end(&c, st);
}

/* ---- group_norm -------------------------------------------------------------- */

static keel_status k_group_norm(void *kd, const keel_kernel_args *a)
{
    struct nn_ctx c;
    struct ok_arg xa;
    keel_kit_norm g;
    char kn[48];
    keel_status st;
    (void)kd;

    if ((st = nn_begin(a, "group_norm", &c)))
        return st;
    if ((st = keel_kit_norm_geometry(KEEL_OP_GROUP_NORM, a, &g, NULL)))
        return ok_fail(st, "group_norm: geometry");
    const keel_tensor_desc *x = &a->inputs[0], *y = &a->outputs[0],
                           *om = &a->outputs[1], *oi = &a->outputs[2];
    const keel_tensor_desc *sc = g.scale >= 0 ? &a->inputs[g.scale] : NULL;
    const keel_tensor_desc *bi = g.bias >= 0 ? &a->inputs[g.bias] : NULL;
    int64_t wg = nn_wg(g.inner);

    c.dbl = x->dtype == KEEL_F64;
    if ((st = nn_dense(&c, x, &xa)))
        return nn_end(&c, st);
    st = OK_RUN_WG(
        &c.l, nn_kname(&c, kn, sizeof(kn), "nn_gn"), g.n * g.groups * wg, wg, xa, OK_I32(x->dtype), sc ? OK_T(&c.l, sc) : NN_NONE,
        OK_I32(sc ? sc->dtype : KEEL_F32), OK_I64(sc ? nn_vstride(sc) : 0),
        OK_I32(sc != NULL), bi ? OK_T(&c.l, bi) : NN_NONE,
        OK_I32(bi ? bi->dtype : KEEL_F32), OK_I64(bi ? nn_vstride(bi) : 0),
        OK_I32(bi != NULL), OK_T(&c.l, y), OK_T(&c.l, om), OK_I32(om->dtype),
        OK_T(&c.l, oi), OK_I32(oi->dtype), OK_I64(g.c), OK_I64(g.groups),
        OK_I64(g.spatial), NN_FT(&c, keel_kit_attr_f(a, "epsilon", 1e-5)));
    return nn_end(&c, st);
}

static keel_status k_group_norm_grad(void *kd, const keel_kernel_args *a)
{
    struct nn_ctx c;
    struct ok_arg xa, ma, ia, dya;
    keel_kit_norm g;
    char kn[48];
    keel_status st;
    (void)kd;

    if ((st = nn_begin(a, "group_norm_grad", &c)))
        return st;
    if ((st = keel_kit_norm_geometry(KEEL_OP_GROUP_NORM_GRAD, a, &g, NULL)))
        return ok_fail(st, "group_norm_grad: geometry");
    const keel_tensor_desc *x = &a->inputs[0], *mu = &a->inputs[g.stat[0]],
                           *iv = &a->inputs[g.stat[1]],
                           *dy = &a->inputs[g.dy], *dx = &a->outputs[0],
                           *ds = &a->outputs[1], *db = &a->outputs[2];
    const keel_tensor_desc *sc = g.scale >= 0 ? &a->inputs[g.scale] : NULL;
    int64_t wg = nn_wg(g.inner), wg2 = nn_wg(g.n * g.spatial);

    c.dbl = x->dtype == KEEL_F64;
    if ((st = nn_dense(&c, x, &xa)) || (st = nn_dense(&c, mu, &ma)) ||
        (st = nn_dense(&c, iv, &ia)) || (st = nn_dense(&c, dy, &dya)))
        return nn_end(&c, st);
    st = OK_RUN_WG(
        &c.l, nn_kname(&c, kn, sizeof(kn), "nn_gng"), g.n * g.groups * wg, wg, xa, OK_I32(x->dtype), sc ? OK_T(&c.l, sc) : NN_NONE,
        OK_I32(sc ? sc->dtype : KEEL_F32), OK_I64(sc ? nn_vstride(sc) : 0),
        OK_I32(sc != NULL), ma, OK_I32(mu->dtype), ia, OK_I32(iv->dtype),
        dya, OK_I32(dy->dtype), OK_T(&c.l, dx), OK_I64(g.c),
        OK_I64(g.groups), OK_I64(g.spatial));
    if (!st)
        st = OK_RUN_WG(&c.l, nn_kname(&c, kn, sizeof(kn), "nn_gngc"),
                       g.c * wg2, wg2, xa, OK_I32(x->dtype), ma,
                       OK_I32(mu->dtype), ia, OK_I32(iv->dtype), dya,
                       OK_I32(dy->dtype), OK_T(&c.l, ds), OK_I32(ds->dtype),
                       OK_T(&c.l, db), OK_I32(db->dtype), OK_I64(g.n),
                       OK_I64(g.c), OK_I64(g.groups), OK_I64(g.spatial));
    return nn_end(&c, st);
}

/* ---- cross_entropy --------------------------------------------------------- */

/* What both cross-entropy ops read of their launch. */
struct nn_ce {
    int64_t C, inner, ns, ignore, cnt;
    bool soft, use_sm;
    int red;
    double eps;
};

static void nn_ce_geo(const keel_kernel_args *a, bool has_w, struct nn_ce *e)
{
    const keel_tensor_desc *x = &a->inputs[0];
    int axis = keel_kit_axis(keel_kit_attr_i(a, "axis", -1), x->ndim);
    int64_t outer = 1;

    if (axis < 0)
        axis = 0; /* the kit refused it already */
    e->C = x->shape[axis];
    keel_kit_outer_inner(x, axis, &outer, &e->inner);
    e->ns = outer * e->inner;
    e->soft = keel_kit_attr_i(a, "soft_label", 0) != 0;
    e->use_sm = keel_kit_attr_i(a, "use_softmax", 1) != 0;
    e->ignore = keel_kit_attr_i(a, "ignore_index", -100);
    e->eps = keel_kit_attr_f(a, "label_smoothing", 0);
    e->red = keel_kit_reduction(a);
    /* Paddle's mean divisor: N without weights for hard labels when
     * ignore_index < 0, else the sum of the kept samples' weights. */
    e->cnt = !has_w && !e->soft && e->ignore < 0 ? e->ns : -1;
}

static keel_status k_cross_entropy(void *kd, const keel_kernel_args *a)
{
    struct nn_ctx c;
    struct ok_arg xa, la;
    struct nn_ce e;
    ok_mem part = NULL;
    char kn[48];
    keel_status st;
    (void)kd;

    if ((st = nn_begin(a, "cross_entropy", &c)))
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *lab = &a->inputs[1],
                           *loss = &a->outputs[0], *sm = &a->outputs[1];
    const keel_tensor_desc *w = a->num_inputs > 2 ? &a->inputs[2] : NULL;
    bool none;
    int64_t wg;

    nn_ce_geo(a, w != NULL, &e);
    none = e.red == KEEL_KIT_RED_NONE;
    wg = nn_wg(e.C);
    c.dbl = x->dtype == KEEL_F64;
    if ((st = nn_dense(&c, x, &xa)) || (st = nn_dense(&c, lab, &la)))
        return nn_end(&c, st);
    if (!none &&
        (st = nn_scratch(&c, (size_t)(2 * e.ns) * NN_TSZ(&c), &part)))
        return nn_end(&c, st);
    st = OK_RUN_WG(&c.l, nn_kname(&c, kn, sizeof(kn), "nn_ce"),
                   e.ns * wg, wg, xa, OK_I32(x->dtype), la,
                   OK_I32(lab->dtype), w ? OK_T(&c.l, w) : NN_NONE,
                   OK_I32(w ? w->dtype : KEEL_F32),
                   OK_I64(w ? nn_vstride(w) : 0), OK_I32(w != NULL),
                   OK_T(&c.l, sm), OK_T(&c.l, loss), OK_I32(loss->dtype),
                   OK_MEM(part), OK_I64(e.C), OK_I64(e.inner),
                   OK_I32(e.soft), OK_I32(e.use_sm), OK_I64(e.ignore),
                   NN_FT(&c, e.eps), OK_I32(none));
    if (!st && !none)
        st = OK_RUN_WG(&c.l, nn_kname(&c, kn, sizeof(kn), "nn_fin"), NN_WG,
                       NN_WG, OK_MEM(part), OK_I64(e.ns),
                       OK_I32(e.red == KEEL_KIT_RED_SUM ? 0 : 2),
                       OK_I64(e.cnt), OK_T(&c.l, loss), OK_I32(loss->dtype));
    return nn_end(&c, st);
}

static keel_status k_cross_entropy_grad(void *kd, const keel_kernel_args *a)
{
    struct nn_ctx c;
    struct ok_arg pa, la, dla;
    struct nn_ce e;
    ok_mem part = NULL, den = NULL;
    char kn[48];
    keel_status st;
    (void)kd;

    if ((st = nn_begin(a, "cross_entropy_grad", &c)))
        return st;
    const keel_tensor_desc *p = &a->inputs[0], *lab = &a->inputs[1],
                           *dl = &a->inputs[2], *dx = &a->outputs[0];
    const keel_tensor_desc *w = a->num_inputs > 3 ? &a->inputs[3] : NULL;
    bool none;
    int64_t wg;

    nn_ce_geo(a, w != NULL, &e);
    none = e.red == KEEL_KIT_RED_NONE;
    wg = nn_wg(e.C);
    c.dbl = p->dtype == KEEL_F64;
    if ((st = nn_dense(&c, p, &pa)) || (st = nn_dense(&c, lab, &la)) ||
        (st = nn_dense(&c, dl, &dla)) ||
        (st = nn_scratch(&c, (size_t)(2 * e.ns) * NN_TSZ(&c), &part)) ||
        (st = nn_scratch(&c, NN_TSZ(&c), &den)))
        return nn_end(&c, st);
    st = OK_RUN_WG(&c.l, nn_kname(&c, kn, sizeof(kn), "nn_cew"),
                   e.ns * wg, wg, la, OK_I32(lab->dtype),
                   w ? OK_T(&c.l, w) : NN_NONE,
                   OK_I32(w ? w->dtype : KEEL_F32),
                   OK_I64(w ? nn_vstride(w) : 0), OK_I32(w != NULL),
                   OK_MEM(part), OK_I64(e.C), OK_I64(e.inner),
                   OK_I32(e.soft), OK_I64(e.ignore), NN_FT(&c, e.eps));
    /* den: the mean's divisor, 1 for sum */
    if (!st && !none)
        st = OK_RUN_WG(&c.l, nn_kname(&c, kn, sizeof(kn), "nn_fin"), NN_WG,
                       NN_WG, OK_MEM(part), OK_I64(e.ns), OK_I32(3),
                       OK_I64(e.red == KEEL_KIT_RED_SUM ? 1 : e.cnt),
                       OK_MEM(den), OK_I32(NN_TDT(&c)));
    if (!st)
        st = OK_RUN_WG(&c.l, nn_kname(&c, kn, sizeof(kn), "nn_ceg"),
                       e.ns * wg, wg, pa, OK_I32(p->dtype), la,
                       OK_I32(lab->dtype), dla, OK_I32(dl->dtype),
                       OK_MEM(part), OK_MEM(den), OK_T(&c.l, dx),
                       OK_I64(e.C), OK_I64(e.inner), OK_I32(e.soft),
                       OK_I32(e.use_sm), OK_I64(e.ignore), NN_FT(&c, e.eps),
                       OK_I32(none));
    return nn_end(&c, st);
}

/* ---- mse_loss, bce_with_logits, nll_loss ------------------------------------ */

/* Groups of an elementwise loss over n items: one item per work item for
 * reduction none, else at most NN_PARTS groups (a count that depends on n
 * alone, so the sum's order does too). */
static int64_t nn_loss_groups(int64_t n, bool none)
{
    int64_t g = nn_ceil_div(n, NN_WG);
    return none || g < NN_PARTS ? g : NN_PARTS;
}

static keel_status nn_loss_run(const keel_kernel_args *a, const char *op,
                               bool bce)
{
    struct nn_ctx c;
    struct ok_arg xa, ya, pa = NN_NONE;
    ok_mem part = NULL;
    char kn[48];
    keel_status st;

    if ((st = nn_begin(a, op, &c)))
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *y = &a->inputs[1],
                           *out = &a->outputs[0];
    const keel_tensor_desc *pw = bce && a->num_inputs > 2 ? &a->inputs[2]
                                                          : NULL;
    int red = keel_kit_reduction(a);
    bool none = red == KEEL_KIT_RED_NONE;
    int64_t n = keel_kit_numel(x), groups = nn_loss_groups(n, none);

    c.dbl = x->dtype == KEEL_F64;
    if ((st = nn_dense(&c, x, &xa)) || (st = nn_dense(&c, y, &ya)) ||
        (pw && (st = nn_dense(&c, pw, &pa))))
        return nn_end(&c, st);
    if (!none &&
        (st = nn_scratch(&c, (size_t)(2 * groups) * NN_TSZ(&c), &part)))
        return nn_end(&c, st);
    st = OK_RUN_WG(&c.l, nn_kname(&c, kn, sizeof(kn), "nn_loss"),
                   groups * NN_WG, NN_WG, xa, OK_I32(x->dtype), ya,
                   OK_I32(y->dtype), pa, OK_I32(pw ? (int)pw->dtype : -1),
                   OK_I64(0), OK_I32(!bce ? 0 : pw ? 2 : 1), OK_I64(n),
                   OK_I64(0), OK_I64(1), OK_I64(0), OK_I32(none),
                   OK_T(&c.l, out), OK_I32(out->dtype), OK_MEM(part));
    if (!st && !none)
        st = OK_RUN_WG(&c.l, nn_kname(&c, kn, sizeof(kn), "nn_fin"), NN_WG,
                       NN_WG, OK_MEM(part), OK_I64(groups),
                       OK_I32(red == KEEL_KIT_RED_SUM ? 0 : 1), OK_I64(n),
                       OK_T(&c.l, out), OK_I32(out->dtype));
    return nn_end(&c, st);
}

static keel_status k_mse_loss(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return nn_loss_run(a, "mse_loss", false);
}

static keel_status k_bce_with_logits(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return nn_loss_run(a, "bce_with_logits", true);
}

static keel_status k_nll_loss(void *kd, const keel_kernel_args *a)
{
    struct nn_ctx c;
    struct ok_arg xa, la;
    ok_mem part = NULL;
    char kn[48];
    keel_status st;
    (void)kd;

    if ((st = nn_begin(a, "nll_loss", &c)))
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *lab = &a->inputs[1],
                           *out = &a->outputs[0];
    const keel_tensor_desc *w = a->num_inputs > 2 ? &a->inputs[2] : NULL;
    int red = keel_kit_reduction(a);
    bool none = red == KEEL_KIT_RED_NONE;
    int64_t C, K, ns, groups;

    if (x->ndim == 1) {
        C = x->shape[0];
        K = 1;
        ns = 1;
    } else {
        C = x->shape[1];
        K = keel_kit_prod(x->shape, 2, x->ndim);
        ns = x->shape[0] * K;
    }
    groups = nn_loss_groups(ns, none);
    c.dbl = x->dtype == KEEL_F64;
    if ((st = nn_dense(&c, x, &xa)) || (st = nn_dense(&c, lab, &la)))
        return nn_end(&c, st);
    if (!none &&
        (st = nn_scratch(&c, (size_t)(2 * groups) * NN_TSZ(&c), &part)))
        return nn_end(&c, st);
    st = OK_RUN_WG(&c.l, nn_kname(&c, kn, sizeof(kn), "nn_loss"),
                   groups * NN_WG, NN_WG, xa, OK_I32(x->dtype), la,
                   OK_I32(lab->dtype), w ? OK_T(&c.l, w) : NN_NONE,
                   OK_I32(w ? (int)w->dtype : -1),
                   OK_I64(w ? nn_vstride(w) : 0), OK_I32(3), OK_I64(ns),
                   OK_I64(C), OK_I64(K),
                   OK_I64(keel_kit_attr_i(a, "ignore_index", -100)),
                   OK_I32(none), OK_T(&c.l, out), OK_I32(out->dtype),
                   OK_MEM(part));
    if (!st && !none)
        st = OK_RUN_WG(&c.l, nn_kname(&c, kn, sizeof(kn), "nn_fin"), NN_WG,
                       NN_WG, OK_MEM(part), OK_I64(groups),
                       OK_I32(red == KEEL_KIT_RED_SUM ? 0 : 2), OK_I64(-1),
                       OK_T(&c.l, out), OK_I32(out->dtype));
    return nn_end(&c, st);
}

/* ---- embedding ----------------------------------------------------------------- */

static keel_status k_embedding(void *kd, const keel_kernel_args *a)
{
    struct nn_ctx c;
    struct ok_arg ia;
    char kn[48];
    keel_status st;
    (void)kd;

    if ((st = nn_begin(a, "embedding", &c)))
        return st;
    const keel_tensor_desc *ids = &a->inputs[0], *w = &a->inputs[1],
                           *out = &a->outputs[0];
    int64_t V = w->shape[0], D = w->shape[1];
    int64_t n = keel_kit_numel(ids) * D;

    if (n == 0)
        return KEEL_STATUS_OK;
    if ((st = nn_dense(&c, ids, &ia)))
        return nn_end(&c, st);
    c.dbl = w->dtype == KEEL_F64;
    st = OK_RUN(&c.l, nn_kname(&c, kn, sizeof(kn), "nn_embedding"), n, ia,
                OK_I32(ids->dtype), OK_T(&c.l, w),
                OK_I32(keel_dtype_size(w->dtype)), OK_I64(w->strides[0]), OK_I64(w->strides[1]), OK_I64(V),
                OK_I64(D), OK_I64(keel_kit_attr_i(a, "padding_idx", -1)),
                OK_T(&c.l, out), OK_I64(n));
    return nn_end(&c, st);
}

static keel_status k_embedding_grad(void *kd, const keel_kernel_args *a)
{
    struct nn_ctx c;
    struct ok_arg ia, da;
    ok_mem keys = NULL, first = NULL;
    char kn[48];
    keel_status st;
    (void)kd;

    if ((st = nn_begin(a, "embedding_grad", &c)))
        return st;
    const keel_tensor_desc *ids = &a->inputs[0], *dy = &a->inputs[1],
                           *out = &a->outputs[0];
    int64_t V = out->shape[0], D = out->shape[1], n = keel_kit_numel(ids);
    int64_t P = 1;

    if (V == 0 || D == 0)
        return KEEL_STATUS_OK;
    /* keys are id << 32 | position */
    if (n >= (INT64_C(1) << 32) || V >= (INT64_C(1) << 31))
        return ok_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "embedding_grad: %lld ids into %lld rows exceed the "
                       "sort keys' range",
                       (long long)n, (long long)V);
    while (P < n)
        P *= 2;
    c.dbl = dy->dtype == KEEL_F64;
    if ((st = nn_dense(&c, ids, &ia)) || (st = nn_dense(&c, dy, &da)) ||
        (st = nn_scratch(&c, (size_t)P * sizeof(uint64_t), &keys)) ||
        (st = nn_scratch(&c, (size_t)(V + 1) * sizeof(int64_t), &first)))
        return nn_end(&c, st);
    st = OK_RUN(&c.l, "nn_embg_keys", P, ia, OK_I32(ids->dtype), OK_I64(n),
                OK_I64(V), OK_I64(keel_kit_attr_i(a, "padding_idx", -1)),
                OK_MEM(keys), OK_I64(P));
    for (int64_t k = 2; !st && k <= P; k *= 2)
        for (int64_t j = k / 2; !st && j > 0; j /= 2)
            st = OK_RUN(&c.l, "nn_embg_sort", P, OK_MEM(keys), OK_I64(P),
                        OK_I64(j), OK_I64(k));
    if (!st)
        st = OK_RUN(&c.l, "nn_embg_first", V + 1, OK_MEM(keys), OK_I64(P),
                    OK_I64(V), OK_MEM(first));
    if (!st)
        st = OK_RUN(&c.l, nn_kname(&c, kn, sizeof(kn), "nn_embg"), V * D,
                    OK_MEM(keys), OK_MEM(first), da, OK_I32(dy->dtype),
                    OK_T(&c.l, out), OK_I64(V), OK_I64(D));
    return nn_end(&c, st);
}

/* ---- dropout ------------------------------------------------------------------- */

static keel_status k_dropout(void *kd, const keel_kernel_args *a)
{
    struct nn_ctx c;
    struct ok_arg xa;
    char kn[48];
    keel_status st;
    (void)kd;

    if ((st = nn_begin(a, "dropout", &c)))
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *out = &a->outputs[0],
                           *mask = &a->outputs[1];
    int64_t n = keel_kit_numel(x);
    bool up = !strcmp(keel_kit_attr_s(a, "mode", "upscale_in_train"),
                      "upscale_in_train");
    bool train = keel_kit_attr_i(a, "training", 1) != 0;
    double p = keel_kit_attr_f(a, "p", 0.5), scale;
    /* u = k 2^-24 >= p  <=>  k >= ceil(p 2^24), exactly in double */
    int64_t thr = (int64_t)ceil(p * 16777216.0);

    if (n == 0)
        return KEEL_STATUS_OK;
    if (train)
        scale = up ? (p < 1 ? 1 / (1 - p) : 0) : 1;
    else
        scale = up ? 1 : 1 - p;
    c.dbl = x->dtype == KEEL_F64;
    if ((st = nn_dense(&c, x, &xa)))
        return nn_end(&c, st);
    st = OK_RUN(&c.l, nn_kname(&c, kn, sizeof(kn), "nn_drop"), n, xa,
                OK_I32(x->dtype), OK_T(&c.l, out), OK_T(&c.l, mask),
                OK_I64(n), OK_U64(keel_kit_attr_i(a, "seed", 0)),
                OK_U64(keel_kit_attr_i(a, "offset", 0)), OK_I64(thr),
                OK_I32(train), NN_FT(&c, scale));
    return nn_end(&c, st);
}

/* ---- one_hot --------------------------------------------------------------------- */

static keel_status k_one_hot(void *kd, const keel_kernel_args *a)
{
    struct nn_ctx c;
    struct ok_arg xa;
    keel_status st;
    (void)kd;

    if ((st = nn_begin(a, "one_hot", &c)))
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *out = &a->outputs[0];
    int64_t nc = out->shape[out->ndim - 1], n = keel_kit_numel(out);

    if (n == 0)
        return KEEL_STATUS_OK;
    if ((st = nn_dense(&c, x, &xa)))
        return nn_end(&c, st);
    st = OK_RUN(&c.l, "nn_one_hot_f32", n, xa, OK_I32(x->dtype),
                OK_T(&c.l, out), OK_I64(nc), OK_I64(n));
    return nn_end(&c, st);
}

/* ---- optimizer updates -------------------------------------------------------- */

enum { NN_SGD, NN_MOMENTUM, NN_ADAM, NN_ADAMW };

static keel_status nn_opt_run(const keel_kernel_args *a, const char *op,
                              int kind)
{
    struct nn_ctx c;
    struct ok_kdesc pd, gd, s1d, s2d;
    char kn[48];
    keel_status st;

    if ((st = nn_begin(a, op, &c)))
        return st;
    const keel_tensor_desc *p = &a->inputs[0], *g = &a->inputs[1];
    const keel_tensor_desc *s1 = a->num_inputs > 2 ? &a->inputs[2] : NULL;
    const keel_tensor_desc *s2 = a->num_inputs > 3 ? &a->inputs[3] : NULL;
    int64_t n = keel_kit_numel(p);
    double lr = keel_kit_attr_f(a, "lr", 0);
    double wd = kind == NN_ADAMW ? 0 : keel_kit_attr_f(a, "weight_decay", 0);
    double b1 = keel_kit_attr_f(a, "beta1", 0.9);
    double b2 = keel_kit_attr_f(a, "beta2", 0.999);
    double b1p = keel_kit_attr_f(a, "beta1_pow", b1);
    double b2p = keel_kit_attr_f(a, "beta2_pow", b2);
    double eps = keel_kit_attr_f(a, "epsilon", 1e-8);
    double lr_t = lr * sqrt(1 - b2p) / (1 - b1p), eps_t = eps * sqrt(1 - b2p);
    double decay = kind == NN_ADAMW ? lr * keel_kit_attr_f(a, "coeff", 0.01)
                                    : 0;

    if (n == 0)
        return KEEL_STATUS_OK;
    c.dbl = p->dtype == KEEL_F64;
    ok_kdesc_of(&pd, p);
    ok_kdesc_of(&gd, g);
    memset(&s1d, 0, sizeof(s1d));
    memset(&s2d, 0, sizeof(s2d));
    if (s1)
        ok_kdesc_of(&s1d, s1);
    if (s2)
        ok_kdesc_of(&s2d, s2);
    st = OK_RUN(&c.l, nn_kname(&c, kn, sizeof(kn), "nn_opt"), n,
                OK_I32(kind == NN_ADAMW ? NN_ADAM : kind), OK_T(&c.l, p),
                OK_DESC(&pd), OK_I32(p->dtype), OK_T(&c.l, g), OK_DESC(&gd),
                OK_I32(g->dtype), s1 ? OK_T(&c.l, s1) : NN_NONE,
                OK_DESC(&s1d), s2 ? OK_T(&c.l, s2) : NN_NONE, OK_DESC(&s2d),
                OK_I64(n), NN_FT(&c, lr), NN_FT(&c, wd),
                NN_FT(&c, keel_kit_attr_f(a, "mu", 0.9)),
                OK_I32(keel_kit_attr_i(a, "use_nesterov", 0) != 0),
                NN_FT(&c, b1), NN_FT(&c, b2), NN_FT(&c, decay),
                NN_FT(&c, lr_t), NN_FT(&c, eps_t));
    return nn_end(&c, st);
}

static keel_status k_sgd_update(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return nn_opt_run(a, "sgd_update", NN_SGD);
}

static keel_status k_momentum_update(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return nn_opt_run(a, "momentum_update", NN_MOMENTUM);
}

static keel_status k_adam_update(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return nn_opt_run(a, "adam_update", NN_ADAM);
}

static keel_status k_adamw_update(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return nn_opt_run(a, "adamw_update", NN_ADAMW);
}

const struct ok_entry ok_kernels_nn[] = {
    {"batch_norm", KEEL_DT_FLOAT, k_batch_norm},
    {"batch_norm_grad", KEEL_DT_FLOAT, k_batch_norm_grad},
    {"layer_norm", KEEL_DT_FLOAT, k_layer_norm},
    {"layer_norm_grad", KEEL_DT_FLOAT, k_layer_norm_grad},
    {"group_norm", KEEL_DT_FLOAT, k_group_norm},
    {"group_norm_grad", KEEL_DT_FLOAT, k_group_norm_grad},
    {"cross_entropy", KEEL_DT_FLOAT, k_cross_entropy},
    {"cross_entropy_grad", KEEL_DT_FLOAT, k_cross_entropy_grad},
    {"mse_loss", KEEL_DT_FLOAT, k_mse_loss},
    {"bce_with_logits", KEEL_DT_FLOAT, k_bce_with_logits},
    {"nll_loss", KEEL_DT_FLOAT, k_nll_loss},
    {"embedding", KEEL_DT_FLOAT, k_embedding},
    {"embedding_grad", KEEL_DT_FLOAT, k_embedding_grad},
    {"dropout", KEEL_DT_FLOAT, k_dropout},
    {"one_hot", KEEL_DT_INT, k_one_hot},
    {"sgd_update", KEEL_DT_FLOAT, k_sgd_update},
    {"momentum_update", KEEL_DT_FLOAT, k_momentum_update},
    {"adam_update", KEEL_DT_FLOAT, k_adam_update},
    {"adamw_update", KEEL_DT_FLOAT, k_adamw_update},
    {NULL, 0, NULL},
};
