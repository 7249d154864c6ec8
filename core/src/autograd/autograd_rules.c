/*
 * Backward rules: one function per GRAD token of ops.def, and one per
 * recorded view. A rule reads the gradients of the node's outputs
 * (c->gout), the tensors it saved and the call's attributes, and puts the
 * gradient of every input that needs one into c->gin — computed with keel
 * ops on the device the forward ran on, never on the host.
 *
 * The helpers below keep every temporary in the context and stop at the
 * first error: after a failure they return NULL and do nothing, so a rule
 * reads as straight-line math and ends with `return c->st`.
 *
 * Conventions (docs/autograd.md repeats them):
 *  - broadcasting: the gradient of a broadcast operand is summed over the
 *    broadcast dimensions back to its shape;
 *  - maximum/minimum: ties split the gradient evenly (Paddle 3.x, as
 *    PyTorch);
 *  - max/min reductions: every element equal to the result receives the
 *    full gradient (Paddle's max/min; Paddle's amax and PyTorch split it);
 *  - kinks: relu, relu6, clip, leaky_relu, hardswish and abs use Paddle's
 *    one-sided choices (clip passes the gradient only strictly inside
 *    (min, max); abs and sign give 0 at 0);
 *  - prod divides by x: inputs with zeros give NaN/inf gradients, as in
 *    Paddle's prod_grad;
 *  - outputs that are integers (indices, masks) and the statistics outputs
 *    of the norm ops and cross_entropy's softmax carry no gradient.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_internal.h"

#define IN(...) ((const keel_tensor *const[]){__VA_ARGS__})
#define SI(i) (1u << (i))
#define SO(j) (1u << (j))

/* ---- context helpers ----------------------------------------------------- */

void keel__ag_ctx_release(struct ag_ctx *c)
{
    for (int i = 0; i < c->ntmp; i++)
        keel_tensor_free(c->tmp[i]);
    free(c->tmp);
    c->tmp = NULL;
    c->ntmp = c->captmp = 0;
}

static bool bad(const struct ag_ctx *c)
{
    return c->st != KEEL_STATUS_OK;
}

static void fail(struct ag_ctx *c, keel_status st)
{
    if (c->st == KEEL_STATUS_OK)
        c->st = st;
}

/* Keep *pt (the result of the call that returned st) as a temporary of
 * the rule; NULL (and the tensor freed) after an error. Taking its address
 * makes sure it is read after the call wrote it. */
static keel_tensor *keep(struct ag_ctx *c, keel_status st, keel_tensor **pt)
{
    keel_tensor *t = *pt;

    if (st != KEEL_STATUS_OK) {
        fail(c, st);
        keel_tensor_free(t);
        return NULL;
    }
    if (c->ntmp == c->captmp) {
        int nc = c->captmp ? c->captmp * 2 : 16;
        keel_tensor **p = realloc(c->tmp, sizeof(*p) * (size_t)nc);
        if (!p) {
            keel_tensor_free(t);
            fail(c, keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                                "autograd: out of host memory"));
            return NULL;
        }
        c->tmp = p;
        c->captmp = nc;
    }
    c->tmp[c->ntmp++] = t;
    return t;
}

/* false (and the context failed) when a previous step failed or an
 * operand is missing. */
static bool ready(struct ag_ctx *c, const keel_tensor *const *ts, int n)
{
    if (bad(c))
        return false;
    for (int i = 0; i < n; i++)
        if (!ts[i]) {
            fail(c, keel__error(KEEL_STATUS_INTERNAL,
                                "autograd: a rule lost an operand"));
            return false;
        }
    return true;
}

static bool need(const struct ag_ctx *c, int i)
{
    return i < c->n->nin && (c->n->next[i].node || c->n->next[i].leaf);
}

/* The gradient of input i. */
static void give(struct ag_ctx *c, int i, keel_tensor *g)
{
    if (!bad(c) && g && need(c, i))
        c->gin[i] = keel_tensor_ref(g);
}

static const struct ag_meta *im(const struct ag_ctx *c, int i)
{
    return &c->n->in_meta[i];
}

static keel_tensor *sin_(const struct ag_ctx *c, int i)
{
    return c->n->saved_in[i];
}

static keel_tensor *sout(const struct ag_ctx *c, int j)
{
    return c->n->saved_out[j];
}

static const keel_attr *attr(const struct ag_ctx *c, const char *name)
{
    const struct keel_op_def *d = c->n->def;

    for (int k = 0; d && k < c->n->nattrs; k++)
        if (!strcmp(d->attrs[k].name, name))
            return &c->n->attrs[k];
    return NULL;
}

static int64_t attr_i(const struct ag_ctx *c, const char *name)
{
    const keel_attr *a = attr(c, name);
    return a ? a->v.i : 0;
}

static double attr_f(const struct ag_ctx *c, const char *name)
{
    const keel_attr *a = attr(c, name);
    return a ? a->v.f : 0.0;
}

static const char *attr_s(const struct ag_ctx *c, const char *name)
{
    const keel_attr *a = attr(c, name);
    return a && a->type == KEEL_ATTR_STRING && a->v.s ? a->v.s : "";
}

/* The named attributes of the node, to pass on to a *_grad op. */
static int pick_attrs(const struct ag_ctx *c, const char *const *names,
                      keel_attr *out)
{
    int n = 0;

    for (int k = 0; names[k]; k++) {
        const keel_attr *a = attr(c, names[k]);
        if (a)
            out[n++] = *a;
    }
    return n;
}

static int axis_of(int64_t a, int ndim)
{
    int lim = ndim ? ndim : 1;
    return (int)(a < 0 ? a + lim : a);
}

/* ---- op helpers ---------------------------------------------------------- */

static keel_tensor *op(struct ag_ctx *c, keel_op_id id,
                       const keel_tensor *const *in, int nin,
                       const keel_attr *a, int na)
{
    keel_tensor *o = NULL;

    if (!ready(c, in, nin))
        return NULL;
    return keep(c, keel__run1(id, in, nin, a, na, &o), &o);
}

/* Several outputs, each kept; returns how many. */
static int opn(struct ag_ctx *c, keel_op_id id, const keel_tensor *const *in,
               int nin, const keel_attr *a, int na, keel_tensor **outs,
               int max)
{
    int n = 0;
    keel_status st;

    if (!ready(c, in, nin))
        return 0;
    st = keel_op_run(id, (keel_tensor *const *)in, nin, a, na, outs, max, &n);
    if (st != KEEL_STATUS_OK) {
        fail(c, st);
        return 0;
    }
    for (int i = 0; i < n; i++)
        if (!keep(c, KEEL_STATUS_OK, &outs[i])) {
            for (int k = i + 1; k < n; k++)
                keel_tensor_free(outs[k]);
            return 0;
        }
    return n;
}

static keel_tensor *add(struct ag_ctx *c, keel_tensor *a, keel_tensor *b)
{
    return op(c, KEEL_OP_ADD, IN(a, b), 2, NULL, 0);
}

static keel_tensor *sub(struct ag_ctx *c, keel_tensor *a, keel_tensor *b)
{
    return op(c, KEEL_OP_SUBTRACT, IN(a, b), 2, NULL, 0);
}

static keel_tensor *mul(struct ag_ctx *c, keel_tensor *a, keel_tensor *b)
{
    return op(c, KEEL_OP_MULTIPLY, IN(a, b), 2, NULL, 0);
}

static keel_tensor *dv(struct ag_ctx *c, keel_tensor *a, keel_tensor *b)
{
    return op(c, KEEL_OP_DIVIDE, IN(a, b), 2, NULL, 0);
}

static keel_tensor *un(struct ag_ctx *c, keel_op_id id, keel_tensor *a)
{
    return op(c, id, IN(a), 1, NULL, 0);
}

static keel_tensor *cmp(struct ag_ctx *c, keel_op_id id, keel_tensor *a,
                        keel_tensor *b)
{
    return op(c, id, IN(a, b), 2, NULL, 0);
}

static keel_tensor *where(struct ag_ctx *c, keel_tensor *cond, keel_tensor *a,
                          keel_tensor *b)
{
    return op(c, KEEL_OP_WHERE, IN(cond, a, b), 3, NULL, 0);
}

static keel_tensor *cast(struct ag_ctx *c, keel_tensor *a, keel_dtype dt)
{
    keel_tensor *o = NULL;

    if (!ready(c, IN(a), 1))
        return NULL;
    return keep(c, keel_cast(a, dt, &o), &o);
}

static keel_tensor *full(struct ag_ctx *c, keel_dtype dt, int ndim,
                         const int64_t *shape, double v)
{
    keel_tensor *o = NULL;

    if (bad(c))
        return NULL;
    return keep(c, keel__ag_full(c->n->place, dt, ndim, shape, v, &o), &o);
}

/* 0-d constant of a's dtype. */
static keel_tensor *scal(struct ag_ctx *c, keel_tensor *like, double v)
{
    if (!ready(c, IN(like), 1))
        return NULL;
    return full(c, like->dtype, 0, NULL, v);
}

static keel_tensor *mulc(struct ag_ctx *c, keel_tensor *a, double v)
{
    return mul(c, a, scal(c, a, v));
}

static keel_tensor *addc(struct ag_ctx *c, keel_tensor *a, double v)
{
    return add(c, a, scal(c, a, v));
}

/* v - a */
static keel_tensor *rsubc(struct ag_ctx *c, double v, keel_tensor *a)
{
    return sub(c, scal(c, a, v), a);
}

/* Comparison with a constant, as 0/1 of a's dtype. */
static keel_tensor *maskc(struct ag_ctx *c, keel_op_id id, keel_tensor *a,
                          double v)
{
    if (!ready(c, IN(a), 1))
        return NULL;
    return cast(c, cmp(c, id, a, scal(c, a, v)), a->dtype);
}

static keel_tensor *zeros_of(struct ag_ctx *c, const struct ag_meta *m)
{
    return full(c, m->dtype, m->ndim, m->shape, 0.0);
}

static keel_tensor *reshape(struct ag_ctx *c, keel_tensor *a, int ndim,
                            const int64_t *shape)
{
    keel_tensor *o = NULL;

    if (!ready(c, IN(a), 1))
        return NULL;
    return keep(c, keel_reshape(a, ndim, shape, &o), &o);
}

static keel_tensor *reshape_to(struct ag_ctx *c, keel_tensor *a,
                               const struct ag_meta *m)
{
    return reshape(c, a, m->ndim, m->shape);
}

static keel_tensor *permute(struct ag_ctx *c, keel_tensor *a, const int *perm)
{
    keel_tensor *o = NULL;

    if (!ready(c, IN(a), 1))
        return NULL;
    return keep(c, keel_permute(a, perm, &o), &o);
}

static keel_tensor *unsqueeze(struct ag_ctx *c, keel_tensor *a, int axis)
{
    keel_tensor *o = NULL;

    if (!ready(c, IN(a), 1))
        return NULL;
    return keep(c, keel_unsqueeze(a, axis, &o), &o);
}

static keel_tensor *expand(struct ag_ctx *c, keel_tensor *a,
                           const struct ag_meta *m)
{
    keel_tensor *o = NULL;

    if (!ready(c, IN(a), 1))
        return NULL;
    return keep(c, keel_expand(a, m->ndim, m->shape, &o), &o);
}

static keel_tensor *slice(struct ag_ctx *c, keel_tensor *a, int axis,
                          int64_t start, int64_t stop)
{
    keel_tensor *o = NULL;

    if (!ready(c, IN(a), 1))
        return NULL;
    return keep(c, keel_slice(a, axis, start, stop, 1, &o), &o);
}

static keel_tensor *sum(struct ag_ctx *c, keel_tensor *a, int naxes,
                        const int *axes, bool keepdim)
{
    keel_tensor *o = NULL;

    if (!ready(c, IN(a), 1))
        return NULL;
    return keep(c, keel_sum(a, naxes, axes, keepdim, &o), &o);
}

static keel_tensor *matmul(struct ag_ctx *c, keel_tensor *a, keel_tensor *b,
                           bool ta, bool tb)
{
    keel_attr at[2] = {keel_attr_bool("transpose_x", ta),
                       keel_attr_bool("transpose_y", tb)};
    return op(c, KEEL_OP_MATMUL, IN(a, b), 2, at, 2);
}

static keel_tensor *flip(struct ag_ctx *c, keel_tensor *a, int axis)
{
    int64_t ax = axis;
    keel_attr at = keel_attr_ints("axis", &ax, 1);
    return op(c, KEEL_OP_FLIP, IN(a), 1, &at, 1);
}

/* int64 [n]: start, start + step, ... */
static keel_tensor *arange(struct ag_ctx *c, int64_t n, int64_t start,
                           int64_t step)
{
    keel_attr a[4] = {keel_attr_ints("shape", &n, 1),
                      keel_attr_dtype("dtype", KEEL_I64),
                      keel_attr_float("start", (double)start),
                      keel_attr_float("step", (double)step)};
    keel_tensor *o = NULL;

    if (bad(c))
        return NULL;
    return keep(c, keel__run_create(KEEL_OP_ARANGE, c->n->place, a, 4, &o), &o);
}

/* int64 [n] from host values (an index built from attributes). */
static keel_tensor *index_from(struct ag_ctx *c, const int64_t *v, int64_t n)
{
    keel_tensor *o = NULL;
    keel_status st;

    if (bad(c))
        return NULL;
    st = keel__tensor_new(c->n->place, KEEL_I64, 1, &n, &o);
    if (st == KEEL_STATUS_OK && n > 0)
        st = keel_mem_copy_h2d(c->n->place, o->storage->data, v,
                               (uint64_t)n * sizeof(int64_t));
    return keep(c, st, &o);
}

static struct ag_meta meta_of_t(const keel_tensor *t)
{
    struct ag_meta m;

    m.dtype = t->dtype;
    m.ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++)
        m.shape[i] = t->shape[i];
    return m;
}

static bool same_shape(const keel_tensor *t, const struct ag_meta *m)
{
    if (t->ndim != m->ndim)
        return false;
    for (int i = 0; i < m->ndim; i++)
        if (t->shape[i] != m->shape[i])
            return false;
    return true;
}

/* Sum g over the dimensions a broadcast added or stretched, back to m. */
static keel_tensor *reduce_to(struct ag_ctx *c, keel_tensor *g,
                              const struct ag_meta *m)
{
    int axes[KEEL_MAX_DIMS], na = 0, lead;

    if (!ready(c, IN(g), 1))
        return NULL;
    if (same_shape(g, m))
        return g;
    lead = g->ndim - m->ndim;
    if (lead < 0) {
        fail(c, keel__error(KEEL_STATUS_INTERNAL,
                            "autograd: cannot reduce a %d-d gradient to %d "
                            "dims",
                            g->ndim, m->ndim));
        return NULL;
    }
    for (int d = 0; d < g->ndim; d++)
        if (d < lead || (m->shape[d - lead] == 1 && g->shape[d] != 1))
            axes[na++] = d;
    if (na == 0)
        return reshape_to(c, g, m);
    return reshape_to(c, sum(c, g, na, axes, true), m);
}

/* Reduced dims of a reduction node (its "axis" attribute; empty: all). */
static uint32_t reduced_mask(const struct ag_ctx *c, const struct ag_meta *m)
{
    const keel_attr *ax = attr(c, "axis");
    uint32_t mask = 0;

    if (!ax || ax->v.ints.count == 0)
        return m->ndim ? (1u << m->ndim) - 1 : 0;
    for (int64_t i = 0; i < ax->v.ints.count; i++)
        if (m->ndim)
            mask |= 1u << axis_of(ax->v.ints.data[i], m->ndim);
    return mask;
}

static int64_t reduced_count(const struct ag_ctx *c, const struct ag_meta *m)
{
    uint32_t mask = reduced_mask(c, m);
    int64_t n = 1;

    for (int d = 0; d < m->ndim; d++)
        if (mask & (1u << d))
            n *= m->shape[d];
    return n;
}

/* A reduction's output (or its gradient) stretched back to x's shape. */
static keel_tensor *unreduce(struct ag_ctx *c, keel_tensor *g,
                             const struct ag_meta *m)
{
    uint32_t mask = reduced_mask(c, m);
    int64_t ks[KEEL_MAX_DIMS];

    for (int d = 0; d < m->ndim; d++)
        ks[d] = (mask & (1u << d)) ? 1 : m->shape[d];
    return expand(c, reshape(c, g, m->ndim, ks), m);
}

/*
 * The transpose of index_select along `axis`: a tensor shaped like m
 * whose slice idx[k] along axis accumulates g's slice k (duplicates add).
 * Expressed as scatter-add into zeros along axis 0 between permutations.
 */
static keel_tensor *index_add(struct ag_ctx *c, keel_tensor *g,
                              keel_tensor *idx, int axis,
                              const struct ag_meta *m)
{
    int perm[KEEL_MAX_DIMS], inv[KEEL_MAX_DIMS], k = 0;
    int64_t zs[KEEL_MAX_DIMS];
    keel_attr ov = keel_attr_bool("overwrite", false);
    keel_tensor *z, *s;

    if (!ready(c, IN(g, idx), 2))
        return NULL;
    perm[k++] = axis;
    for (int d = 0; d < m->ndim; d++)
        if (d != axis)
            perm[k++] = d;
    for (int d = 0; d < m->ndim; d++) {
        inv[perm[d]] = d;
        zs[d] = m->shape[perm[d]];
    }
    z = full(c, g->dtype, m->ndim, zs, 0.0);
    s = op(c, KEEL_OP_SCATTER, IN(z, idx, permute(c, g, perm)), 3, &ov, 1);
    return permute(c, s, inv);
}

/*
 * The transpose of take_along_axis(x, idx, axis) for x shaped like m and
 * g shaped like the result (non-axis dims of x may be 1 and broadcast):
 * flat indices into x, then one scatter-add into zeros.
 */
static keel_tensor *take_grad(struct ag_ctx *c, keel_tensor *g,
                              keel_tensor *idx, int axis,
                              const struct ag_meta *m)
{
    int64_t xs[KEEL_MAX_DIMS], os[KEEL_MAX_DIMS] = {0}, one[KEEL_MAX_DIMS];
    int64_t n, nx;
    keel_attr ov = keel_attr_bool("overwrite", false);
    struct ag_meta om;
    keel_tensor *flat, *s;
    int nd = m->ndim;

    if (!ready(c, IN(g, idx), 2))
        return NULL;
    if (nd == 0 || g->ndim != nd)
        return reshape_to(c, g, m);
    xs[nd - 1] = 1;
    for (int d = nd - 2; d >= 0; d--)
        xs[d] = xs[d + 1] * m->shape[d + 1];
    om = meta_of_t(g);
    for (int d = 0; d < nd; d++)
        os[d] = g->shape[d];
    n = keel__numel(nd, os);
    nx = keel__numel(nd, m->shape);
    om.dtype = KEEL_I64;
    flat = cast(c, idx, KEEL_I64);
    flat = mul(c, flat, scal(c, flat, (double)xs[axis]));
    for (int d = 0; d < nd; d++) {
        keel_tensor *a;
        if (d == axis || m->shape[d] == 1)
            continue;
        for (int k = 0; k < nd; k++)
            one[k] = k == d ? os[d] : 1;
        a = reshape(c, arange(c, os[d], 0, xs[d]), nd, one);
        flat = add(c, flat, a);
    }
    flat = reshape(c, expand(c, flat, &om), 1, &n);
    s = op(c, KEEL_OP_SCATTER,
           IN(full(c, g->dtype, 1, &nx, 0.0), flat, reshape(c, g, 1, &n)), 3,
           &ov, 1);
    return reshape_to(c, s, m);
}

/* ---- elementwise binary -------------------------------------------------- */

static keel_status r_add(struct ag_ctx *c)
{
    give(c, 0, reduce_to(c, c->gout[0], im(c, 0)));
    give(c, 1, reduce_to(c, c->gout[0], im(c, 1)));
    return c->st;
}

static keel_status r_subtract(struct ag_ctx *c)
{
    give(c, 0, reduce_to(c, c->gout[0], im(c, 0)));
    if (need(c, 1))
        give(c, 1, reduce_to(c, un(c, KEEL_OP_NEG, c->gout[0]), im(c, 1)));
    return c->st;
}

static keel_status r_multiply(struct ag_ctx *c)
{
    keel_tensor *g = c->gout[0];

    if (need(c, 0))
        give(c, 0, reduce_to(c, mul(c, g, sin_(c, 1)), im(c, 0)));
    if (need(c, 1))
        give(c, 1, reduce_to(c, mul(c, g, sin_(c, 0)), im(c, 1)));
    return c->st;
}

static keel_status r_divide(struct ag_ctx *c)
{
    keel_tensor *t = dv(c, c->gout[0], sin_(c, 1));

    give(c, 0, reduce_to(c, t, im(c, 0)));
    if (need(c, 1)) {
        keel_tensor *q = dv(c, sin_(c, 0), sin_(c, 1));
        give(c, 1, reduce_to(c, un(c, KEEL_OP_NEG, mul(c, t, q)), im(c, 1)));
    }
    return c->st;
}

static keel_status r_pow(struct ag_ctx *c)
{
    keel_tensor *g = c->gout[0], *x = sin_(c, 0), *y = sin_(c, 1);

    if (need(c, 0)) {
        keel_tensor *p = op(c, KEEL_OP_POW, IN(x, addc(c, y, -1.0)), 2, NULL,
                            0);
        give(c, 0, reduce_to(c, mul(c, g, mul(c, y, p)), im(c, 0)));
    }
    if (need(c, 1)) {
        keel_tensor *l = un(c, KEEL_OP_LOG, x);
        give(c, 1, reduce_to(c, mul(c, g, mul(c, sout(c, 0), l)), im(c, 1)));
    }
    return c->st;
}

/* maximum (gt = GREATER) and minimum (gt = LESS): the selected operand
 * gets the gradient, ties give half to each. */
static keel_status minmax(struct ag_ctx *c, keel_op_id gt, keel_op_id lt)
{
    keel_tensor *g = c->gout[0], *x = sin_(c, 0), *y = sin_(c, 1), *half;

    if (!ready(c, IN(g, x, y), 3))
        return c->st;
    half = mulc(c, cast(c, cmp(c, KEEL_OP_EQUAL, x, y), g->dtype), 0.5);
    if (need(c, 0)) {
        keel_tensor *w = add(c, cast(c, cmp(c, gt, x, y), g->dtype), half);
        give(c, 0, reduce_to(c, mul(c, g, w), im(c, 0)));
    }
    if (need(c, 1)) {
        keel_tensor *w = add(c, cast(c, cmp(c, lt, x, y), g->dtype), half);
        give(c, 1, reduce_to(c, mul(c, g, w), im(c, 1)));
    }
    return c->st;
}

static keel_status r_maximum(struct ag_ctx *c)
{
    return minmax(c, KEEL_OP_GREATER, KEEL_OP_LESS);
}

static keel_status r_minimum(struct ag_ctx *c)
{
    return minmax(c, KEEL_OP_LESS, KEEL_OP_GREATER);
}

static keel_status r_remainder(struct ag_ctx *c)
{
    keel_tensor *g = c->gout[0];

    give(c, 0, reduce_to(c, g, im(c, 0)));
    if (need(c, 1)) {
        keel_tensor *q = op(c, KEEL_OP_FLOOR_DIVIDE, IN(sin_(c, 0), sin_(c, 1)),
                            2, NULL, 0);
        give(c, 1, reduce_to(c, un(c, KEEL_OP_NEG, mul(c, g, q)), im(c, 1)));
    }
    return c->st;
}

static keel_status r_where(struct ag_ctx *c)
{
    keel_tensor *g = c->gout[0], *cond = sin_(c, 0), *z = scal(c, g, 0.0);

    if (need(c, 1))
        give(c, 1, reduce_to(c, where(c, cond, g, z), im(c, 1)));
    if (need(c, 2))
        give(c, 2, reduce_to(c, where(c, cond, z, g), im(c, 2)));
    return c->st;
}

/* ---- elementwise unary --------------------------------------------------- */

/* gin[0] = gout[0] * d */
static keel_status chain(struct ag_ctx *c, keel_tensor *d)
{
    give(c, 0, mul(c, c->gout[0], d));
    return c->st;
}

static keel_status r_neg(struct ag_ctx *c)
{
    give(c, 0, un(c, KEEL_OP_NEG, c->gout[0]));
    return c->st;
}

static keel_status r_abs(struct ag_ctx *c)
{
    return chain(c, un(c, KEEL_OP_SIGN, sin_(c, 0)));
}

static keel_status r_zero(struct ag_ctx *c)
{
    give(c, 0, zeros_of(c, im(c, 0)));
    return c->st;
}

static keel_status r_exp(struct ag_ctx *c)
{
    return chain(c, sout(c, 0));
}

static keel_status r_log(struct ag_ctx *c)
{
    give(c, 0, dv(c, c->gout[0], sin_(c, 0)));
    return c->st;
}

static keel_status r_log1p(struct ag_ctx *c)
{
    give(c, 0, dv(c, c->gout[0], addc(c, sin_(c, 0), 1.0)));
    return c->st;
}

static keel_status r_sqrt(struct ag_ctx *c)
{
    give(c, 0, dv(c, mulc(c, c->gout[0], 0.5), sout(c, 0)));
    return c->st;
}

/* d/dx x^(-1/2) = -out^3 / 2 */
static keel_status r_rsqrt(struct ag_ctx *c)
{
    keel_tensor *o = sout(c, 0);
    return chain(c, mulc(c, mul(c, o, mul(c, o, o)), -0.5));
}

static keel_status r_square(struct ag_ctx *c)
{
    return chain(c, mulc(c, sin_(c, 0), 2.0));
}

static keel_status r_sin(struct ag_ctx *c)
{
    return chain(c, un(c, KEEL_OP_COS, sin_(c, 0)));
}

static keel_status r_cos(struct ag_ctx *c)
{
    return chain(c, un(c, KEEL_OP_NEG, un(c, KEEL_OP_SIN, sin_(c, 0))));
}

/* Paddle: the gradient passes where out > 0 (a NaN output passes none).
 * One select instead of a mask cast to float and a multiply: two passes
 * over the activation fewer, and an infinite gradient stays infinite
 * where it passes and becomes 0, not NaN, where it does not. */
static keel_status r_relu(struct ag_ctx *c)
{
    keel_tensor *o = sout(c, 0), *g = c->gout[0];

    give(c, 0,
         where(c, cmp(c, KEEL_OP_GREATER, o, scal(c, o, 0.0)), g,
               scal(c, g, 0.0)));
    return c->st;
}

/* Paddle: strictly inside (0, 6). */
static keel_status r_relu6(struct ag_ctx *c)
{
    keel_tensor *x = sin_(c, 0);
    return chain(c, mul(c, maskc(c, KEEL_OP_GREATER, x, 0.0),
                        maskc(c, KEEL_OP_LESS, x, 6.0)));
}

static keel_status r_leaky_relu(struct ag_ctx *c)
{
    keel_tensor *x = sin_(c, 0);
    double s = attr_f(c, "negative_slope");

    if (!ready(c, IN(x), 1))
        return c->st;
    return chain(c, where(c, cmp(c, KEEL_OP_GREATER, x, scal(c, x, 0.0)),
                          scal(c, x, 1.0), scal(c, x, s)));
}

static keel_status r_elu(struct ag_ctx *c)
{
    keel_tensor *x = sin_(c, 0), *g = c->gout[0];
    double alpha = attr_f(c, "alpha");

    if (!ready(c, IN(x), 1))
        return c->st;
    give(c, 0, where(c, cmp(c, KEEL_OP_GREATER, x, scal(c, x, 0.0)), g,
                     mul(c, g, mulc(c, un(c, KEEL_OP_EXP, x), alpha))));
    return c->st;
}

/*
 * exact: d/dx x Phi(x) = Phi(x) + x phi(x). The catalog has no erf, so
 * Phi(x) is recovered from the saved output as out / x (0.5 at x = 0).
 * approximate: the derivative of 0.5 x (1 + tanh(k (x + 0.044715 x^3))).
 */
static keel_status r_gelu(struct ag_ctx *c)
{
    keel_tensor *x = sin_(c, 0), *d;

    if (!ready(c, IN(x), 1))
        return c->st;
    if (attr_i(c, "approximate")) {
        const double k = sqrt(2.0 / M_PI), a = 0.044715;
        keel_tensor *x2 = un(c, KEEL_OP_SQUARE, x);
        keel_tensor *u = mulc(c, add(c, x, mulc(c, mul(c, x2, x), a)), k);
        keel_tensor *t = un(c, KEEL_OP_TANH, u);
        keel_tensor *du = mulc(c, addc(c, mulc(c, x2, 3.0 * a), 1.0), k);
        keel_tensor *sech2 = rsubc(c, 1.0, un(c, KEEL_OP_SQUARE, t));
        d = add(c, mulc(c, addc(c, t, 1.0), 0.5),
                mulc(c, mul(c, x, mul(c, sech2, du)), 0.5));
    } else {
        keel_tensor *zero = cmp(c, KEEL_OP_EQUAL, x, scal(c, x, 0.0));
        keel_tensor *safe = where(c, zero, scal(c, x, 1.0), x);
        keel_tensor *cdf = where(c, zero, scal(c, x, 0.5),
                                 dv(c, sout(c, 0), safe));
        keel_tensor *pdf = mulc(
            c, un(c, KEEL_OP_EXP, mulc(c, un(c, KEEL_OP_SQUARE, x), -0.5)),
            1.0 / sqrt(2.0 * M_PI));
        d = add(c, cdf, mul(c, x, pdf));
    }
    return chain(c, d);
}

/* s (1 + x (1 - s)), s = sigmoid(x) */
static keel_status r_silu(struct ag_ctx *c)
{
    keel_tensor *x = sin_(c, 0), *s = un(c, KEEL_OP_SIGMOID, x);
    return chain(c, mul(c, s, addc(c, mul(c, x, rsubc(c, 1.0, s)), 1.0)));
}

static keel_status r_sigmoid(struct ag_ctx *c)
{
    keel_tensor *o = sout(c, 0);
    return chain(c, mul(c, o, rsubc(c, 1.0, o)));
}

static keel_status r_tanh(struct ag_ctx *c)
{
    return chain(c, rsubc(c, 1.0, un(c, KEEL_OP_SQUARE, sout(c, 0))));
}

/* sigmoid(beta x), 1 where the op is linear (beta x > threshold). */
static keel_status r_softplus(struct ag_ctx *c)
{
    keel_tensor *bx = mulc(c, sin_(c, 0), attr_f(c, "beta"));
    keel_tensor *lin;

    if (!ready(c, IN(bx), 1))
        return c->st;
    lin = cmp(c, KEEL_OP_GREATER, bx, scal(c, bx, attr_f(c, "threshold")));
    return chain(c, where(c, lin, scal(c, bx, 1.0),
                          un(c, KEEL_OP_SIGMOID, bx)));
}

/* Paddle: 0 for x <= -3, 1 for x >= 3, (2x + 3) / 6 between. */
static keel_status r_hardswish(struct ag_ctx *c)
{
    keel_tensor *x = sin_(c, 0), *mid;

    if (!ready(c, IN(x), 1))
        return c->st;
    mid = mulc(c, addc(c, mulc(c, x, 2.0), 3.0), 1.0 / 6.0);
    return chain(c, where(c, cmp(c, KEEL_OP_GREATER, x, scal(c, x, -3.0)),
                          where(c, cmp(c, KEEL_OP_LESS, x, scal(c, x, 3.0)),
                                mid, scal(c, x, 1.0)),
                          scal(c, x, 0.0)));
}

/* Paddle: the gradient passes strictly inside (min, max). */
static keel_status r_clip(struct ag_ctx *c)
{
    keel_tensor *x = sin_(c, 0);
    return chain(c, mul(c, maskc(c, KEEL_OP_GREATER, x, attr_f(c, "min")),
                        maskc(c, KEEL_OP_LESS, x, attr_f(c, "max"))));
}

static keel_status r_cast(struct ag_ctx *c)
{
    give(c, 0, cast(c, c->gout[0], im(c, 0)->dtype));
    return c->st;
}

static keel_status r_copy(struct ag_ctx *c)
{
    give(c, 0, c->gout[0]);
    return c->st;
}

/* ---- reductions ---------------------------------------------------------- */

static keel_status r_sum(struct ag_ctx *c)
{
    give(c, 0, unreduce(c, c->gout[0], im(c, 0)));
    return c->st;
}

static keel_status r_mean(struct ag_ctx *c)
{
    int64_t n = reduced_count(c, im(c, 0));

    give(c, 0, mulc(c, unreduce(c, c->gout[0], im(c, 0)),
                    n ? 1.0 / (double)n : 0.0));
    return c->st;
}

/* max and min: every element equal to the result gets the gradient. */
static keel_status r_max(struct ag_ctx *c)
{
    keel_tensor *x = sin_(c, 0);
    keel_tensor *hit = cmp(c, KEEL_OP_EQUAL, x,
                           unreduce(c, sout(c, 0), im(c, 0)));

    if (!ready(c, IN(x), 1))
        return c->st;
    give(c, 0, mul(c, unreduce(c, c->gout[0], im(c, 0)),
                   cast(c, hit, x->dtype)));
    return c->st;
}

static keel_status r_min(struct ag_ctx *c)
{
    return r_max(c);
}

static keel_status r_prod(struct ag_ctx *c)
{
    const struct ag_meta *m = im(c, 0);
    keel_tensor *go = mul(c, unreduce(c, c->gout[0], m),
                          unreduce(c, sout(c, 0), m));

    give(c, 0, dv(c, go, sin_(c, 0)));
    return c->st;
}

/* x - mean(x) over the reduced axes (kept). */
static keel_tensor *centered(struct ag_ctx *c, keel_tensor *x)
{
    const keel_attr *ax = attr(c, "axis");
    keel_attr a[2];

    if (!ax)
        return NULL;
    a[0] = *ax;
    a[1] = keel_attr_bool("keepdim", true);
    return sub(c, x, op(c, KEEL_OP_MEAN, IN(x), 1, a, 2));
}

static keel_status r_var(struct ag_ctx *c)
{
    int64_t n = reduced_count(c, im(c, 0)) - (attr_i(c, "unbiased") ? 1 : 0);
    keel_tensor *d = centered(c, sin_(c, 0));

    give(c, 0, mul(c, unreduce(c, c->gout[0], im(c, 0)),
                   mulc(c, d, 2.0 / (double)n)));
    return c->st;
}

static keel_status r_std(struct ag_ctx *c)
{
    const struct ag_meta *m = im(c, 0);
    int64_t n = reduced_count(c, m) - (attr_i(c, "unbiased") ? 1 : 0);
    keel_tensor *d = mulc(c, centered(c, sin_(c, 0)), 1.0 / (double)n);

    give(c, 0, dv(c, mul(c, unreduce(c, c->gout[0], m), d),
                  unreduce(c, sout(c, 0), m)));
    return c->st;
}

static keel_status r_logsumexp(struct ag_ctx *c)
{
    const struct ag_meta *m = im(c, 0);
    keel_tensor *p = un(c, KEEL_OP_EXP,
                        sub(c, sin_(c, 0), unreduce(c, sout(c, 0), m)));

    give(c, 0, mul(c, unreduce(c, c->gout[0], m), p));
    return c->st;
}

/* The gradient of a prefix sum is the suffix sum. */
static keel_status r_cumsum(struct ag_ctx *c)
{
    const struct ag_meta *m = im(c, 0);
    const keel_attr *ax = attr(c, "axis");
    keel_tensor *g = c->gout[0];
    int axis = 0;
    int64_t a;
    keel_attr at;

    if (!ax || !ready(c, IN(g), 1))
        return c->st;
    if (ax->v.ints.count > 0 && m->ndim > 0)
        axis = axis_of(ax->v.ints.data[0], m->ndim);
    else if (g->ndim == 0) {
        give(c, 0, reshape_to(c, g, m));
        return c->st;
    }
    a = axis;
    at = keel_attr_ints("axis", &a, 1);
    g = flip(c, op(c, KEEL_OP_CUMSUM, IN(flip(c, g, axis)), 1, &at, 1), axis);
    give(c, 0, reshape_to(c, g, m));
    return c->st;
}

/* ---- linear algebra ------------------------------------------------------ */

static keel_status r_matmul(struct ag_ctx *c)
{
    bool tx = attr_i(c, "transpose_x") != 0, ty = attr_i(c, "transpose_y");
    keel_tensor *x = sin_(c, 0), *y = sin_(c, 1), *g = c->gout[0];
    struct ag_meta xm, ym;

    if (!ready(c, IN(x, y, g), 3))
        return c->st;
    /* 1-D operands as matrices: x [K] is [1, K], y [K] is [K, 1]; the
     * gradient gets the dims the result dropped. */
    if (y->ndim == 1) {
        y = unsqueeze(c, y, 1);
        g = unsqueeze(c, g, g->ndim);
        ty = false;
    }
    if (x->ndim == 1) {
        x = unsqueeze(c, x, 0);
        g = g ? unsqueeze(c, g, g->ndim - 1) : NULL;
        tx = false;
    }
    if (!ready(c, IN(x, y, g), 3))
        return c->st;
    xm = meta_of_t(x);
    ym = meta_of_t(y);
    if (need(c, 0)) {
        keel_tensor *dx;
        if (!tx)
            dx = ty ? matmul(c, g, y, false, false)
                    : matmul(c, g, y, false, true);
        else
            dx = ty ? matmul(c, y, g, true, true)
                    : matmul(c, y, g, false, true);
        give(c, 0, reshape_to(c, reduce_to(c, dx, &xm), im(c, 0)));
    }
    if (need(c, 1)) {
        keel_tensor *dy;
        if (!tx)
            dy = ty ? matmul(c, g, x, true, false)
                    : matmul(c, x, g, true, false);
        else
            dy = ty ? matmul(c, g, x, true, true)
                    : matmul(c, x, g, false, false);
        give(c, 1, reshape_to(c, reduce_to(c, dy, &ym), im(c, 1)));
    }
    return c->st;
}

/* out = x @ w + b with w [in, out]. */
static keel_status r_linear(struct ag_ctx *c)
{
    keel_tensor *x = sin_(c, 0), *w = sin_(c, 1), *g = c->gout[0], *g2;
    int64_t s[2];

    if (!ready(c, IN(x, w, g), 3))
        return c->st;
    if (need(c, 0))
        give(c, 0, matmul(c, g, w, false, true));
    s[0] = -1;
    s[1] = w->shape[1];
    g2 = reshape(c, g, 2, s);
    if (need(c, 1)) {
        s[1] = w->shape[0];
        give(c, 1, matmul(c, reshape(c, x, 2, s), g2, true, false));
    }
    if (need(c, 2))
        give(c, 2, sum(c, g2, 1, (const int[]){0}, false));
    return c->st;
}

/* ---- neural network ops (through their *_grad kernels) ------------------- */

static keel_status conv_common(struct ag_ctx *c, keel_op_id grad_op)
{
    keel_attr a[KEEL_MAX_OP_ATTRS];
    keel_tensor *outs[3] = {NULL, NULL, NULL};
    int na = c->n->nattrs, n;

    memcpy(a, c->n->attrs, sizeof(keel_attr) * (size_t)na);
    a[na++] = keel_attr_bool("has_bias", c->n->nin == 3);
    /* The first conv of a network sees data that needs no gradient: its
     * dx (a GEMM and a col2im per image) can be skipped. */
    a[na++] = keel_attr_bool("need_dx", need(c, 0));
    n = opn(c, grad_op, IN(sin_(c, 0), sin_(c, 1), c->gout[0]), 3, a, na,
            outs, 3);
    for (int i = 0; i < n; i++)
        give(c, i, outs[i]);
    return c->st;
}

static keel_status r_conv2d(struct ag_ctx *c)
{
    return conv_common(c, KEEL_OP_CONV2D_GRAD);
}

static keel_status r_conv2d_transpose(struct ag_ctx *c)
{
    return conv_common(c, KEEL_OP_CONV2D_TRANSPOSE_GRAD);
}

static keel_status r_max_pool2d(struct ag_ctx *c)
{
    give(c, 0, op(c, KEEL_OP_MAX_POOL2D_GRAD,
                  IN(sin_(c, 0), sout(c, 1), c->gout[0]), 3, NULL, 0));
    return c->st;
}

static keel_status pool_common(struct ag_ctx *c, keel_op_id grad_op)
{
    give(c, 0, op(c, grad_op, IN(sin_(c, 0), c->gout[0]), 2, c->n->attrs,
                  c->n->nattrs));
    return c->st;
}

static keel_status r_avg_pool2d(struct ag_ctx *c)
{
    return pool_common(c, KEEL_OP_AVG_POOL2D_GRAD);
}

static keel_status r_adaptive_avg_pool2d(struct ag_ctx *c)
{
    return pool_common(c, KEEL_OP_ADAPTIVE_AVG_POOL2D_GRAD);
}

/* The three gradients of a norm, each shaped like its input. */
static void give_norm(struct ag_ctx *c, keel_tensor **outs, int n)
{
    for (int i = 0; i < n && i < c->n->nin; i++)
        if (need(c, i))
            give(c, i, reshape_to(c, outs[i], im(c, i)));
}

static keel_status r_batch_norm(struct ag_ctx *c)
{
    static const char *const names[] = {"epsilon", "training", NULL};
    keel_attr a[2];
    keel_tensor *outs[3];
    int na = pick_attrs(c, names, a);
    int n = opn(c, KEEL_OP_BATCH_NORM_GRAD,
                IN(sin_(c, 0), sin_(c, 1), sout(c, 1), sout(c, 2),
                   c->gout[0]),
                5, a, na, outs, 3);

    give_norm(c, outs, n);
    return c->st;
}

/* layer_norm and group_norm: inputs (x, scale?, bias?); the grad op takes
 * (x, scale?, mean, invstd, dy). */
static keel_status norm_common(struct ag_ctx *c, keel_op_id grad_op,
                               const char *attr_name)
{
    const char *const names[] = {attr_name, NULL};
    keel_attr a[1];
    keel_tensor *outs[3];
    int na = pick_attrs(c, names, a), n;

    if (c->n->nin >= 2)
        n = opn(c, grad_op,
                IN(sin_(c, 0), sin_(c, 1), sout(c, 1), sout(c, 2),
                   c->gout[0]),
                5, a, na, outs, 3);
    else
        n = opn(c, grad_op, IN(sin_(c, 0), sout(c, 1), sout(c, 2), c->gout[0]),
                4, a, na, outs, 3);
    give_norm(c, outs, n);
    return c->st;
}

static keel_status r_layer_norm(struct ag_ctx *c)
{
    return norm_common(c, KEEL_OP_LAYER_NORM_GRAD, "begin_norm_axis");
}

static keel_status r_group_norm(struct ag_ctx *c)
{
    return norm_common(c, KEEL_OP_GROUP_NORM_GRAD, "groups");
}

static keel_status r_softmax(struct ag_ctx *c)
{
    give(c, 0, op(c, KEEL_OP_SOFTMAX_GRAD, IN(sout(c, 0), c->gout[0]), 2,
                  c->n->attrs, c->n->nattrs));
    return c->st;
}

static keel_status r_log_softmax(struct ag_ctx *c)
{
    give(c, 0, op(c, KEEL_OP_LOG_SOFTMAX_GRAD, IN(sout(c, 0), c->gout[0]), 2,
                  c->n->attrs, c->n->nattrs));
    return c->st;
}

static keel_status r_cross_entropy(struct ag_ctx *c)
{
    keel_tensor *sm = sout(c, 1), *lb = sin_(c, 1), *g = c->gout[0];

    if (c->n->nin == 3)
        give(c, 0, op(c, KEEL_OP_CROSS_ENTROPY_GRAD, IN(sm, lb, g, sin_(c, 2)),
                      4, c->n->attrs, c->n->nattrs));
    else
        give(c, 0, op(c, KEEL_OP_CROSS_ENTROPY_GRAD, IN(sm, lb, g), 3,
                      c->n->attrs, c->n->nattrs));
    return c->st;
}

/* The gradient of a loss' reduction: per-element d times g, scaled by
 * 1/N for 'mean' (g is 0-d for 'mean' and 'sum'). */
static keel_tensor *loss_scale(struct ag_ctx *c, keel_tensor *d, int64_t n)
{
    keel_tensor *t = mul(c, d, c->gout[0]);

    if (!strcmp(attr_s(c, "reduction"), "mean"))
        t = mulc(c, t, n ? 1.0 / (double)n : 0.0);
    return t;
}

static keel_status r_mse_loss(struct ag_ctx *c)
{
    const struct ag_meta *m = im(c, 0);
    keel_tensor *d = mulc(c, sub(c, sin_(c, 0), sin_(c, 1)), 2.0);

    d = loss_scale(c, d, keel__numel(m->ndim, m->shape));
    give(c, 0, d);
    if (need(c, 1))
        give(c, 1, un(c, KEEL_OP_NEG, d));
    return c->st;
}

/*
 * loss = (1 - y) x + w softplus(-x), w = 1 + (pw - 1) y:
 *   dx  = (1 - y) - w sigmoid(-x)      (= sigmoid(x) - y without pw)
 *   dy  = -x + (pw - 1) softplus(-x)
 *   dpw = y softplus(-x)
 */
static keel_status r_bce_with_logits(struct ag_ctx *c)
{
    const struct ag_meta *m = im(c, 0);
    int64_t n = keel__numel(m->ndim, m->shape);
    keel_tensor *x = sin_(c, 0), *y = sin_(c, 1), *pw = NULL, *pm1 = NULL;
    keel_tensor *nx = un(c, KEEL_OP_NEG, x), *sp = NULL;
    bool has_pw = c->n->nin == 3;

    if (has_pw) {
        pw = sin_(c, 2);
        pm1 = addc(c, pw, -1.0);
    }
    if (has_pw || need(c, 1))
        sp = un(c, KEEL_OP_SOFTPLUS, nx);
    if (need(c, 0)) {
        keel_tensor *dx;
        if (has_pw) {
            keel_tensor *w = addc(c, mul(c, pm1, y), 1.0);
            dx = sub(c, rsubc(c, 1.0, y),
                     mul(c, w, un(c, KEEL_OP_SIGMOID, nx)));
        } else {
            dx = sub(c, un(c, KEEL_OP_SIGMOID, x), y);
        }
        give(c, 0, loss_scale(c, dx, n));
    }
    if (need(c, 1)) {
        keel_tensor *dy = has_pw ? add(c, nx, mul(c, pm1, sp)) : nx;
        give(c, 1, loss_scale(c, dy, n));
    }
    if (has_pw && need(c, 2))
        give(c, 2, reduce_to(c, loss_scale(c, mul(c, y, sp), n), im(c, 2)));
    return c->st;
}

/*
 * nll_loss: d logp[n, label[n]] = -w[label[n]] g (/ sum of the selected
 * weights for 'mean'); ignored labels get nothing. Built as a one-hot of
 * the labels moved to the class axis.
 */
static keel_status r_nll_loss(struct ag_ctx *c)
{
    const struct ag_meta *m = im(c, 0);
    keel_tensor *lb = sin_(c, 1), *g = c->gout[0];
    keel_tensor *valid, *l0, *wy, *coef, *oh;
    int cax = m->ndim == 1 ? 0 : 1;
    int64_t ncls = m->shape[cax];
    keel_attr nc = keel_attr_int("num_classes", ncls);
    keel_dtype dt = m->dtype;

    if (!ready(c, IN(lb, g), 2))
        return c->st;
    valid = cmp(c, KEEL_OP_NOT_EQUAL, lb,
                scal(c, lb, (double)attr_i(c, "ignore_index")));
    l0 = where(c, valid, lb, scal(c, lb, 0.0));
    wy = cast(c, valid, dt);
    if (c->n->nin == 3 && l0) {
        int64_t flat = -1;
        keel_tensor *w = op(c, KEEL_OP_GATHER,
                            IN(sin_(c, 2), reshape(c, l0, 1, &flat)), 2, NULL,
                            0);
        wy = mul(c, wy, cast(c, reshape(c, w, l0->ndim, l0->shape), dt));
    }
    coef = mul(c, wy, g);
    if (!strcmp(attr_s(c, "reduction"), "mean") && wy) {
        keel_tensor *den = sum(c, wy, 0, NULL, false);
        keel_tensor *zero = maskc(c, KEEL_OP_EQUAL, den, 0.0);
        coef = dv(c, coef, add(c, den, zero));
    }
    coef = un(c, KEEL_OP_NEG, coef);
    oh = cast(c, op(c, KEEL_OP_ONE_HOT, IN(l0), 1, &nc, 1), dt);
    if (m->ndim >= 2 && oh) {
        int perm[KEEL_MAX_DIMS], k = 0;
        perm[k++] = 0;
        perm[k++] = m->ndim - 1;
        for (int d = 1; d < m->ndim - 1; d++)
            perm[k++] = d;
        oh = permute(c, oh, perm);
        coef = unsqueeze(c, coef, 1);
    }
    give(c, 0, mul(c, oh, coef));
    return c->st;
}

static keel_status r_embedding(struct ag_ctx *c)
{
    keel_attr a[2] = {keel_attr_int("num_embeddings", im(c, 1)->shape[0]),
                      keel_attr_int("padding_idx",
                                    attr_i(c, "padding_idx"))};

    give(c, 1, op(c, KEEL_OP_EMBEDDING_GRAD, IN(sin_(c, 0), c->gout[0]), 2, a,
                  2));
    return c->st;
}

/* The same mask and scaling as the forward. */
static keel_status r_dropout(struct ag_ctx *c)
{
    keel_tensor *g = c->gout[0];
    double p = attr_f(c, "p");
    bool up = !strcmp(attr_s(c, "mode"), "upscale_in_train");

    if (!ready(c, IN(g), 1))
        return c->st;
    if (!attr_i(c, "training")) {
        give(c, 0, up ? g : mulc(c, g, 1.0 - p));
        return c->st;
    }
    g = mul(c, g, cast(c, sout(c, 1), g->dtype));
    if (up)
        g = mulc(c, g, p < 1.0 ? 1.0 / (1.0 - p) : 0.0);
    give(c, 0, g);
    return c->st;
}

/* ---- shape and indexing -------------------------------------------------- */

static keel_tensor *split_to(struct ag_ctx *c, keel_tensor *g, int axis,
                             const int64_t *sections, int n,
                             keel_tensor **outs)
{
    keel_attr a[2] = {keel_attr_ints("sections", sections, n),
                      keel_attr_int("axis", axis)};

    return opn(c, KEEL_OP_SPLIT, IN(g), 1, a, 2, outs, n) == n ? g : NULL;
}

static keel_status r_concat(struct ag_ctx *c)
{
    int n = c->n->nin;
    int axis = axis_of(attr_i(c, "axis"), im(c, 0)->ndim);
    int64_t sec[KEEL_MAX_OP_INPUTS];
    keel_tensor *outs[KEEL_MAX_OP_INPUTS];

    for (int i = 0; i < n; i++)
        sec[i] = im(c, i)->shape[axis];
    if (split_to(c, c->gout[0], axis, sec, n, outs))
        for (int i = 0; i < n; i++)
            give(c, i, outs[i]);
    return c->st;
}

static keel_status r_stack(struct ag_ctx *c)
{
    int n = c->n->nin;
    int axis = axis_of(attr_i(c, "axis"), im(c, 0)->ndim + 1);
    int64_t sec[KEEL_MAX_OP_INPUTS];
    keel_tensor *outs[KEEL_MAX_OP_INPUTS];

    for (int i = 0; i < n; i++)
        sec[i] = 1;
    if (split_to(c, c->gout[0], axis, sec, n, outs))
        for (int i = 0; i < n; i++)
            if (need(c, i))
                give(c, i, reshape_to(c, outs[i], im(c, i)));
    return c->st;
}

static keel_status r_split(struct ag_ctx *c)
{
    keel_attr a = keel_attr_int("axis", attr_i(c, "axis"));

    if (c->n->nout == 1)
        give(c, 0, c->gout[0]);
    else
        give(c, 0, op(c, KEEL_OP_CONCAT, (const keel_tensor *const *)c->gout,
                      c->n->nout, &a, 1));
    return c->st;
}

static keel_status r_gather(struct ag_ctx *c)
{
    const struct ag_meta *m = im(c, 0);
    int axis = axis_of(attr_i(c, "axis"), m->ndim);
    keel_tensor *idx = sin_(c, 1), *g = c->gout[0];

    if (!ready(c, IN(idx, g), 2))
        return c->st;
    if (idx->ndim == 0) {
        int64_t one = 1;
        idx = reshape(c, idx, 1, &one);
        g = unsqueeze(c, g, axis);
    }
    give(c, 0, index_add(c, g, idx, axis, m));
    return c->st;
}

static keel_status r_index_select(struct ag_ctx *c)
{
    return r_gather(c);
}

/* Rows named by the index are replaced (or zeroed, then accumulated):
 * they get no gradient from x; updates get those rows of g. */
static keel_status r_scatter(struct ag_ctx *c)
{
    keel_tensor *idx = sin_(c, 1), *g = c->gout[0];
    keel_attr ov = keel_attr_bool("overwrite", true);

    if (need(c, 0))
        give(c, 0, op(c, KEEL_OP_SCATTER, IN(g, idx, zeros_of(c, im(c, 2))), 3,
                      &ov, 1));
    if (need(c, 2))
        give(c, 2, op(c, KEEL_OP_GATHER, IN(g, idx), 2, NULL, 0));
    return c->st;
}

static keel_status r_take_along_axis(struct ag_ctx *c)
{
    const struct ag_meta *m = im(c, 0);

    give(c, 0, take_grad(c, c->gout[0], sin_(c, 1),
                         axis_of(attr_i(c, "axis"), m->ndim), m));
    return c->st;
}

/* topk and sort: the values are x taken along the axis at the indices. */
static keel_status r_topk(struct ag_ctx *c)
{
    const struct ag_meta *m = im(c, 0);

    if (m->ndim == 0)
        give(c, 0, reshape_to(c, c->gout[0], m));
    else
        give(c, 0, take_grad(c, c->gout[0], sout(c, 1),
                             axis_of(attr_i(c, "axis"), m->ndim), m));
    return c->st;
}

static keel_status r_sort(struct ag_ctx *c)
{
    return r_topk(c);
}

/* Each tiled axis [r * s] is viewed as [r, s] and summed over r. */
static keel_status r_tile(struct ag_ctx *c)
{
    const struct ag_meta *m = im(c, 0);
    const keel_attr *rep = attr(c, "repeat_times");
    keel_tensor *g = c->gout[0];
    int64_t cur[KEEL_MAX_DIMS];
    int on, nr;

    if (!rep || !ready(c, IN(g), 1))
        return c->st;
    on = g->ndim;
    nr = (int)rep->v.ints.count;
    for (int d = 0; d < on; d++)
        cur[d] = g->shape[d];
    for (int d = 0; d < on; d++) {
        int ri = d - (on - nr), xi = d - (on - m->ndim);
        int64_t r = ri >= 0 ? rep->v.ints.data[ri] : 1;
        int64_t s = xi >= 0 ? m->shape[xi] : 1, pre = 1, post = 1, v[4];
        if (r == 1)
            continue;
        for (int k = 0; k < d; k++)
            pre *= cur[k];
        for (int k = d + 1; k < on; k++)
            post *= cur[k];
        v[0] = pre;
        v[1] = r;
        v[2] = s;
        v[3] = post;
        g = sum(c, reshape(c, g, 4, v), 1, (const int[]){1}, false);
        cur[d] = s;
        g = reshape(c, g, on, cur);
    }
    give(c, 0, reshape_to(c, g, m));
    return c->st;
}

static keel_status r_flip(struct ag_ctx *c)
{
    const keel_attr *ax = attr(c, "axis");

    if (ax)
        give(c, 0, op(c, KEEL_OP_FLIP, IN(c->gout[0]), 1, ax, 1));
    return c->st;
}

/* Source position along one axis of an output element of reflect or
 * replicate padding. */
static int64_t pad_source(int64_t j, int64_t before, int64_t len,
                          bool reflect)
{
    int64_t p = j - before;

    if (reflect) {
        if (p < 0)
            p = -p;
        if (p >= len)
            p = 2 * (len - 1) - p;
    } else {
        p = p < 0 ? 0 : (p >= len ? len - 1 : p);
    }
    return p;
}

static keel_status r_pad(struct ag_ctx *c)
{
    const struct ag_meta *m = im(c, 0);
    const keel_attr *pad = attr(c, "pad");
    const char *mode = attr_s(c, "mode");
    bool constant = !strcmp(mode, "constant");
    keel_tensor *g = c->gout[0];

    if (!pad)
        return c->st;
    for (int i = 0; i < (int)pad->v.ints.count / 2 && !bad(c); i++) {
        int64_t b = pad->v.ints.data[2 * i], a = pad->v.ints.data[2 * i + 1];
        int64_t len = m->shape[i], n = len + a + b, *src;
        struct ag_meta gm;

        if (a == 0 && b == 0)
            continue;
        if (constant) {
            g = slice(c, g, i, b, b + len);
            continue;
        }
        src = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
        if (!src) {
            fail(c, keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                                "autograd: out of host memory"));
            break;
        }
        for (int64_t j = 0; j < n; j++)
            src[j] = pad_source(j, b, len, !strcmp(mode, "reflect"));
        if (g) {
            gm = meta_of_t(g);
            gm.shape[i] = len;
            g = index_add(c, g, index_from(c, src, n), i, &gm);
        }
        free(src);
    }
    give(c, 0, g);
    return c->st;
}

/* ---- views --------------------------------------------------------------- */

static keel_status v_reshape(struct ag_ctx *c)
{
    give(c, 0, reshape_to(c, c->gout[0], im(c, 0)));
    return c->st;
}

static keel_status v_permute(struct ag_ctx *c)
{
    int inv[KEEL_MAX_DIMS];

    for (int i = 0; i < c->n->nvp; i++)
        inv[c->n->vp[i]] = i;
    give(c, 0, permute(c, c->gout[0], inv));
    return c->st;
}

/* vp: axis, start, length, step */
static keel_status v_slice(struct ag_ctx *c)
{
    const int64_t *p = c->n->vp;

    if (p[2] == 0)
        give(c, 0, zeros_of(c, im(c, 0)));
    else
        give(c, 0, index_add(c, c->gout[0], arange(c, p[2], p[1], p[3]),
                             (int)p[0], im(c, 0)));
    return c->st;
}

static keel_status v_expand(struct ag_ctx *c)
{
    give(c, 0, reduce_to(c, c->gout[0], im(c, 0)));
    return c->st;
}

/* vp: plugin, device of the source */
static keel_status v_to(struct ag_ctx *c)
{
    keel_place src = {(int32_t)c->n->vp[0], (int32_t)c->n->vp[1]};
    keel_tensor *o = NULL;
    char dev[96];

    if (!ready(c, IN(c->gout[0]), 1))
        return c->st;
    keel__lock();
    keel__place_str(src, dev, sizeof(dev));
    keel__unlock();
    give(c, 0, keep(c, keel_tensor_to(c->gout[0], dev, &o), &o));
    return c->st;
}

/* ---- tables -------------------------------------------------------------- */

#define RULE(tok, in, out) {#tok, r_##tok, in, out}

#define AG_RULE_NONE {"NONE", NULL, 0, 0}
#define AG_RULE_add RULE(add, 0, 0)
#define AG_RULE_subtract RULE(subtract, 0, 0)
#define AG_RULE_multiply RULE(multiply, SI(0) | SI(1), 0)
#define AG_RULE_divide RULE(divide, SI(0) | SI(1), 0)
#define AG_RULE_pow RULE(pow, SI(0) | SI(1), SO(0))
#define AG_RULE_maximum RULE(maximum, SI(0) | SI(1), 0)
#define AG_RULE_minimum RULE(minimum, SI(0) | SI(1), 0)
#define AG_RULE_remainder RULE(remainder, SI(0) | SI(1), 0)
#define AG_RULE_where RULE(where, SI(0), 0)
#define AG_RULE_neg RULE(neg, 0, 0)
#define AG_RULE_abs RULE(abs, SI(0), 0)
#define AG_RULE_zero RULE(zero, 0, 0)
#define AG_RULE_exp RULE(exp, 0, SO(0))
#define AG_RULE_log RULE(log, SI(0), 0)
#define AG_RULE_log1p RULE(log1p, SI(0), 0)
#define AG_RULE_sqrt RULE(sqrt, 0, SO(0))
#define AG_RULE_rsqrt RULE(rsqrt, 0, SO(0))
#define AG_RULE_square RULE(square, SI(0), 0)
#define AG_RULE_sin RULE(sin, SI(0), 0)
#define AG_RULE_cos RULE(cos, SI(0), 0)
#define AG_RULE_relu RULE(relu, 0, SO(0))
#define AG_RULE_relu6 RULE(relu6, SI(0), 0)
#define AG_RULE_leaky_relu RULE(leaky_relu, SI(0), 0)
#define AG_RULE_elu RULE(elu, SI(0), 0)
#define AG_RULE_gelu RULE(gelu, SI(0), SO(0))
#define AG_RULE_silu RULE(silu, SI(0), 0)
#define AG_RULE_sigmoid RULE(sigmoid, 0, SO(0))
#define AG_RULE_tanh RULE(tanh, 0, SO(0))
#define AG_RULE_softplus RULE(softplus, SI(0), 0)
#define AG_RULE_hardswish RULE(hardswish, SI(0), 0)
#define AG_RULE_clip RULE(clip, SI(0), 0)
#define AG_RULE_cast RULE(cast, 0, 0)
#define AG_RULE_copy RULE(copy, 0, 0)
#define AG_RULE_sum RULE(sum, 0, 0)
#define AG_RULE_mean RULE(mean, 0, 0)
#define AG_RULE_max RULE(max, SI(0), SO(0))
#define AG_RULE_min RULE(min, SI(0), SO(0))
#define AG_RULE_prod RULE(prod, SI(0), SO(0))
#define AG_RULE_var RULE(var, SI(0), 0)
#define AG_RULE_std RULE(std, SI(0), SO(0))
#define AG_RULE_logsumexp RULE(logsumexp, SI(0), SO(0))
#define AG_RULE_cumsum RULE(cumsum, 0, 0)
#define AG_RULE_matmul RULE(matmul, SI(0) | SI(1), 0)
#define AG_RULE_linear RULE(linear, SI(0) | SI(1), 0)
#define AG_RULE_conv2d RULE(conv2d, SI(0) | SI(1), 0)
#define AG_RULE_conv2d_transpose RULE(conv2d_transpose, SI(0) | SI(1), 0)
#define AG_RULE_max_pool2d RULE(max_pool2d, SI(0), SO(1))
#define AG_RULE_avg_pool2d RULE(avg_pool2d, SI(0), 0)
#define AG_RULE_adaptive_avg_pool2d RULE(adaptive_avg_pool2d, SI(0), 0)
#define AG_RULE_batch_norm RULE(batch_norm, SI(0) | SI(1), SO(1) | SO(2))
#define AG_RULE_layer_norm RULE(layer_norm, SI(0) | SI(1), SO(1) | SO(2))
#define AG_RULE_group_norm RULE(group_norm, SI(0) | SI(1), SO(1) | SO(2))
#define AG_RULE_softmax RULE(softmax, 0, SO(0))
#define AG_RULE_log_softmax RULE(log_softmax, 0, SO(0))
#define AG_RULE_cross_entropy RULE(cross_entropy, SI(1) | SI(2), SO(1))
#define AG_RULE_mse_loss RULE(mse_loss, SI(0) | SI(1), 0)
#define AG_RULE_bce_with_logits                                              \
    RULE(bce_with_logits, SI(0) | SI(1) | SI(2), 0)
#define AG_RULE_nll_loss RULE(nll_loss, SI(1) | SI(2), 0)
#define AG_RULE_embedding RULE(embedding, SI(0), 0)
#define AG_RULE_dropout RULE(dropout, 0, SO(1))
#define AG_RULE_concat RULE(concat, 0, 0)
#define AG_RULE_stack RULE(stack, 0, 0)
#define AG_RULE_split RULE(split, 0, 0)
#define AG_RULE_gather RULE(gather, SI(1), 0)
#define AG_RULE_index_select RULE(index_select, SI(1), 0)
#define AG_RULE_scatter RULE(scatter, SI(1), 0)
#define AG_RULE_take_along_axis RULE(take_along_axis, SI(1), 0)
#define AG_RULE_tile RULE(tile, 0, 0)
#define AG_RULE_flip RULE(flip, 0, 0)
#define AG_RULE_pad RULE(pad, 0, 0)
#define AG_RULE_topk RULE(topk, 0, SO(1))
#define AG_RULE_sort RULE(sort, 0, SO(1))

/* One entry per catalog op, from its GRAD token: a token without a rule
 * above does not compile. */
static const struct ag_rule op_rules[KEEL_OP_COUNT] = {
#define KEEL_OP(ID, NAME, NIN, NOUT, DTYPES, SHAPE, GRAD, AMP, ATTRS, SEM)  \
    [KEEL_OP_##ID] = AG_RULE_##GRAD,
#include <keel/ops.def>
#undef KEEL_OP
};

static const struct ag_rule view_rules[KEEL_AG_VIEW_COUNT_] = {
    [KEEL_AG_VIEW_RESHAPE] = {"reshape", v_reshape, 0, 0},
    [KEEL_AG_VIEW_PERMUTE] = {"permute", v_permute, 0, 0},
    [KEEL_AG_VIEW_SLICE] = {"slice", v_slice, 0, 0},
    [KEEL_AG_VIEW_EXPAND] = {"expand", v_expand, 0, 0},
    [KEEL_AG_VIEW_TO] = {"to", v_to, 0, 0},
};

const struct ag_rule *keel__ag_op_rule(keel_op_id id)
{
    return (unsigned)id < KEEL_OP_COUNT ? &op_rules[id] : NULL;
}

const struct ag_rule *keel__ag_view_rule(enum keel_ag_view v)
{
    return &view_rules[v];
}

bool keel__op_differentiable(keel_op_id id)
{
    return (unsigned)id < KEEL_OP_COUNT && op_rules[id].fn;
}

bool keel__ag_input_diff(keel_op_id id, int i)
{
    switch (id) {
    case KEEL_OP_WHERE:
        return i > 0; /* not the condition */
    case KEEL_OP_GATHER:
    case KEEL_OP_INDEX_SELECT:
    case KEEL_OP_TAKE_ALONG_AXIS:
    case KEEL_OP_CROSS_ENTROPY: /* not labels or class weights */
    case KEEL_OP_NLL_LOSS:
        return i == 0;
    case KEEL_OP_SCATTER:
        return i != 1;
    case KEEL_OP_EMBEDDING:
        return i == 1;
    case KEEL_OP_BATCH_NORM: /* not the running statistics */
        return i < 3;
    default:
        return true;
    }
}

bool keel__ag_output_diff(keel_op_id id, int j)
{
    switch (id) {
    case KEEL_OP_BATCH_NORM: /* saved statistics */
    case KEEL_OP_LAYER_NORM:
    case KEEL_OP_GROUP_NORM:
    case KEEL_OP_CROSS_ENTROPY: /* the softmax it returns */
        return j == 0;
    default:
        return true;
    }
}
