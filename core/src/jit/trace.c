/*
 * keel_jit_trace: record a layer's forward as a graph.
 *
 * Dispatch and the ops layer hand every call and view of this thread to
 * the capture hook (dispatch_internal.h) while a trace runs. A tensor the
 * hook has not seen before is a constant: a parameter or buffer of the
 * layer (named by the state dict) or a value made some other way.
 *
 * The forward runs twice, with every dimension symbol at a different
 * size. Both runs must record the same nodes; a shape argument that
 * differs between them is rewritten in the symbols (see merge_*), and a
 * constant that is not a parameter must not differ at all: a difference
 * means it came from the inputs by a path keel did not see.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/autograd.h>

#include "jit/jit_internal.h"

/* Symbol sizes of the two runs: products of two symbols never look like a
 * multiple of one. */
static const int64_t sym_size[2][KEEL_JIT_MAX_SYMBOLS] = {
    {7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67},
    {8, 12, 14, 18, 20, 24, 30, 32, 38, 42, 44, 48, 54, 60, 62, 68},
};

struct named {
    const keel_tensor *t;
    const char *name;
};

struct tracer {
    keel_graph *g;
    /* tensor -> value id, open addressing (pointers stay unique: every
     * tensor seen is kept alive in `keep` until the trace ends). */
    const keel_tensor **key;
    int *id;
    size_t cap, n;
    keel_tensor **keep;
    size_t nkeep, capkeep;
    const struct named *params;
    int nparams;
    int anon;
};

static keel_status oom(void)
{
    return keel__error(KEEL_STATUS_OUT_OF_MEMORY, "jit trace: out of memory");
}

static size_t slot_of(const struct tracer *t, const keel_tensor *p)
{
    size_t h = ((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull;
    size_t i = h & (t->cap - 1);

    while (t->key[i] && t->key[i] != p)
        i = (i + 1) & (t->cap - 1);
    return i;
}

static int lookup(const struct tracer *t, const keel_tensor *p)
{
    size_t i = slot_of(t, p);
    return t->key[i] ? t->id[i] : -1;
}

static keel_status remember(struct tracer *t, keel_tensor *p, int id)
{
    size_t i;

    if ((t->n + 1) * 2 > t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 256;
        const keel_tensor **k = calloc(ncap, sizeof(*k));
        int *v = calloc(ncap, sizeof(*v));
        struct tracer old = *t;

        if (!k || !v) {
            free(k);
            free(v);
            return oom();
        }
        t->key = k;
        t->id = v;
        t->cap = ncap;
        for (size_t j = 0; j < old.cap; j++)
            if (old.key[j]) {
                size_t s = slot_of(t, old.key[j]);
                t->key[s] = old.key[j];
                t->id[s] = old.id[j];
            }
        free(old.key);
        free(old.id);
    }
    if (t->nkeep == t->capkeep) {
        size_t nc = t->capkeep ? t->capkeep * 2 : 256;
        void *q = realloc(t->keep, nc * sizeof(*t->keep));
        if (!q)
            return oom();
        t->keep = q;
        t->capkeep = nc;
    }
    t->keep[t->nkeep++] = keel_tensor_ref(p);
    i = slot_of(t, p);
    t->key[i] = p;
    t->id[i] = id;
    t->n++;
    return KEEL_STATUS_OK;
}

static void static_dims(const keel_tensor *x, struct jit_dim *d)
{
    for (int i = 0; i < x->ndim; i++) {
        d[i].sym = JIT_STATIC;
        d[i].mul = x->shape[i];
    }
}

static int new_value(struct tracer *t, enum jit_value_kind kind,
                     const keel_tensor *x)
{
    struct jit_dim d[KEEL_MAX_DIMS];
    int id;

    static_dims(x, d);
    id = keel__graph_add_value(t->g, kind, x->dtype, x->ndim, d);
    if (id >= 0 && remember(t, (keel_tensor *)x, id) != KEEL_STATUS_OK)
        return -1;
    return id;
}

/* The value of tensor x, a new constant when it was not seen before. */
static int value_of(struct tracer *t, const keel_tensor *x)
{
    int id = lookup(t, x);
    const char *name = NULL;
    char buf[32];
    struct jit_value *v;

    if (id >= 0)
        return id;
    for (int i = 0; i < t->nparams; i++)
        if (t->params[i].t == x)
            name = t->params[i].name;
    if (!name) {
        snprintf(buf, sizeof(buf), "const.%d", t->anon++);
        name = buf;
    }
    id = new_value(t, JIT_CONST, x);
    if (id < 0)
        return -1;
    v = &t->g->val[id];
    v->name = strdup(name);
    v->data = keel_tensor_ref((keel_tensor *)x);
    if (!v->name) {
        oom();
        return -1;
    }
    return id;
}

static keel_status on_call(void *ctx, const struct keel_op_call *c,
                           keel_tensor *const *outs)
{
    struct tracer *t = ctx;
    int in[KEEL_MAX_OP_INPUTS], out[KEEL_MAX_OP_OUTPUTS], n;
    struct jit_node *node;

    for (int i = 0; i < c->nin; i++) {
        if (keel__input_written(c->op, i) &&
            (c->op != KEEL_OP_BATCH_NORM || keel__attr_i(c, "training")))
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "jit trace: writes its input %d in place; "
                                  "a traced forward must not (call "
                                  "keel_layer_eval before tracing)",
                                  i);
        if ((in[i] = value_of(t, c->in[i])) < 0)
            return keel_last_status();
    }
    for (int i = 0; i < c->nout; i++)
        if ((out[i] = new_value(t, JIT_NODE, outs[i])) < 0)
            return keel_last_status();
    n = keel__graph_add_node(t->g, JIT_OP, c->op, in, c->nin, out, c->nout);
    if (n < 0)
        return keel_last_status();
    node = &t->g->node[n];
    for (int k = 0; k < c->def->nattrs; k++) {
        keel_status st = keel__graph_set_attr(node, k, &c->attrs[k]);
        if (st != KEEL_STATUS_OK)
            return st;
        node->nattrs = k + 1;
    }
    return KEEL_STATUS_OK;
}

static keel_status on_view(void *ctx, const char *kind, const keel_tensor *x,
                           const keel_tensor *outt, const int64_t *params,
                           int nparams)
{
    struct tracer *t = ctx;
    enum jit_node_kind k;
    int in, out, n;
    struct jit_node *node;

    if (!strcmp(kind, "reshape"))
        k = JIT_RESHAPE;
    else if (!strcmp(kind, "permute"))
        k = JIT_PERMUTE;
    else if (!strcmp(kind, "slice"))
        k = JIT_SLICE;
    else if (!strcmp(kind, "expand"))
        k = JIT_EXPAND;
    else
        return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                           "jit trace: the forward moves a tensor to "
                           "another device (%s), which a graph cannot "
                           "record",
                           kind);
    if (lookup(t, outt) >= 0)
        return KEEL_STATUS_OK; /* the same tensor again: nothing new */
    if ((in = value_of(t, x)) < 0 ||
        (out = new_value(t, JIT_NODE, outt)) < 0)
        return keel_last_status();
    n = keel__graph_add_node(t->g, k, KEEL_OP_COUNT, &in, 1, &out, 1);
    if (n < 0)
        return keel_last_status();
    node = &t->g->node[n];
    node->np = nparams;
    for (int i = 0; i < nparams; i++) {
        node->p[i] = params[i];
        node->pd[i].sym = JIT_STATIC;
        node->pd[i].mul = params[i];
    }
    return KEEL_STATUS_OK;
}

static void tracer_free(struct tracer *t)
{
    for (size_t i = 0; i < t->nkeep; i++)
        keel_tensor_free(t->keep[i]);
    free(t->keep);
    free(t->key);
    free(t->id);
    keel_graph_free(t->g);
}

/* Deterministic example input of spec s at run r (no draw from keel's
 * generator: tracing leaves the user's random stream alone). */
static keel_status make_input(const keel_input_spec *s, const int *dsym,
                              int r, keel_tensor **out)
{
    int64_t shape[KEEL_MAX_DIMS], n;
    float *buf;
    keel_tensor *f;
    keel_status st;

    for (int d = 0; d < s->ndim; d++)
        shape[d] = s->shape[d] < 0 ? sym_size[r][dsym[d]] : s->shape[d];
    if (!keel__shape_size(s->ndim, shape, sizeof(float), &n, NULL))
        return keel__shape_check("keel_jit_trace", s->ndim, shape,
                                 s->dtype);
    if (s->dtype != KEEL_F32 && s->dtype != KEEL_F64 &&
        s->dtype != KEEL_F16 && s->dtype != KEEL_BF16)
        return keel_zeros(s->ndim, shape, s->dtype, NULL, out);
    buf = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!buf)
        return oom();
    for (int64_t i = 0; i < n; i++)
        buf[i] = (float)((uint64_t)(i + 1 + r) * 2654435761u % 2001u) /
                     1000.0f -
                 1.0f;
    st = keel_tensor_from_host(buf, KEEL_F32, s->ndim, shape, NULL, &f);
    free(buf);
    if (st != KEEL_STATUS_OK)
        return st;
    st = keel_cast(f, s->dtype, out);
    keel_tensor_free(f);
    return st;
}

/* One run of the forward under capture into t->g. */
static keel_status trace_once(keel_layer *layer, const keel_input_spec *specs,
                              int nspecs, int dsym[][KEEL_MAX_DIMS], int r,
                              struct tracer *t)
{
    keel_tensor *x[64] = {0}, *y = NULL;
    struct keel_capture cap = {.ctx = t, .call = on_call, .view = on_view};
    keel_status st = keel__graph_new(&t->g);
    int id;

    for (int i = 0; st == KEEL_STATUS_OK && i < nspecs; i++) {
        st = make_input(&specs[i], dsym[i], r, &x[i]);
        if (st == KEEL_STATUS_OK) {
            id = new_value(t, JIT_INPUT, x[i]);
            st = id < 0 ? keel_last_status()
                        : keel__graph_add_input(t->g, id);
        }
    }
    if (st == KEEL_STATUS_OK) {
        keel_no_grad_begin();
        keel__capture = &cap;
        st = keel_layer_forward(layer, x, nspecs, &y);
        keel__capture = NULL;
        keel_no_grad_end();
    }
    if (st == KEEL_STATUS_OK) {
        id = value_of(t, y);
        st = id < 0 ? keel_last_status()
                    : keel__graph_add_output(t->g, id, "out0");
    }
    keel_tensor_free(y);
    for (int i = 0; i < nspecs; i++)
        keel_tensor_free(x[i]);
    return st;
}

/* ---- merging the two runs -------------------------------------------------- */

/* The dimension that is a in run 0 and b in run 1. */
static struct jit_dim merge_dim(const keel_graph *g, int64_t a, int64_t b)
{
    struct jit_dim d = {JIT_STATIC, a};

    if (a == b)
        return d;
    for (int s = 0; s < g->nsym; s++)
        if (a > 0 && a % sym_size[0][s] == 0 &&
            a / sym_size[0][s] * sym_size[1][s] == b) {
            d.sym = s;
            d.mul = a / sym_size[0][s];
            return d;
        }
    d.sym = JIT_ANY;
    d.mul = 0;
    return d;
}

static keel_status differ(const keel_graph *g, int n, const char *what)
{
    return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                       "keel_jit_trace: node %d (%s): %s differs between "
                       "input sizes, and cannot be written in the "
                       "dimension symbols; the forward cannot be traced "
                       "with these dynamic dimensions",
                       n, keel_graph_node_op(g, n), what);
}

static bool attr_equal(const keel_attr *a, const keel_attr *b)
{
    if (a->type != b->type)
        return false;
    switch (a->type) {
    case KEEL_ATTR_FLOAT:
        return a->v.f == b->v.f || (a->v.f != a->v.f && b->v.f != b->v.f);
    case KEEL_ATTR_STRING:
        return !strcmp(a->v.s, b->v.s);
    case KEEL_ATTR_INTS:
        return a->v.ints.count == b->v.ints.count &&
               (!a->v.ints.count ||
                !memcmp(a->v.ints.data, b->v.ints.data,
                        sizeof(int64_t) * (size_t)a->v.ints.count));
    case KEEL_ATTR_FLOATS:
        return a->v.floats.count == b->v.floats.count &&
               (!a->v.floats.count ||
                !memcmp(a->v.floats.data, b->v.floats.data,
                        sizeof(double) * (size_t)a->v.floats.count));
    default:
        return a->v.i == b->v.i;
    }
}

/* Whether two constants hold the same bytes. */
static keel_status same_const(const keel_tensor *a, const keel_tensor *b,
                              bool *same)
{
    size_t n;
    void *ha, *hb;
    keel_status st;

    *same = a == b;
    if (*same)
        return KEEL_STATUS_OK;
    if (a->dtype != b->dtype || a->ndim != b->ndim ||
        memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim))
        return KEEL_STATUS_OK;
    n = (size_t)keel_tensor_numel(a) * keel_dtype_size(a->dtype);
    ha = malloc(n ? n : 1);
    hb = malloc(n ? n : 1);
    if (!ha || !hb) {
        free(ha);
        free(hb);
        return oom();
    }
    st = keel_tensor_to_host(a, ha, n);
    if (st == KEEL_STATUS_OK)
        st = keel_tensor_to_host(b, hb, n);
    *same = st == KEEL_STATUS_OK && !memcmp(ha, hb, n);
    free(ha);
    free(hb);
    return st;
}

static keel_status merge_node(keel_graph *g, const keel_graph *h, int n)
{
    struct jit_node *a = &g->node[n];
    const struct jit_node *b = &h->node[n];
    const struct jit_value *ia = &g->val[a->in[0]];
    const struct jit_value *ib = &h->val[a->in[0]];
    int any = 0;

    if (a->kind == JIT_OP) {
        const struct keel_op_def *d = keel__op_def(a->op);
        for (int k = 0; k < a->nattrs; k++)
            if (!attr_equal(&a->attrs[k], &b->attrs[k])) {
                char what[64];
                snprintf(what, sizeof(what), "attribute '%s'",
                         d->attrs[k].name);
                return differ(g, n, what);
            }
        return KEEL_STATUS_OK;
    }
    if (a->np != b->np)
        return differ(g, n, "the rank");
    for (int i = 0; i < a->np; i++) {
        int64_t pa = a->p[i], pb = b->p[i];
        int j;

        if (pa == pb)
            continue;
        switch (a->kind) {
        case JIT_RESHAPE:
            a->pd[i] = merge_dim(g, pa, pb);
            if (a->pd[i].sym == JIT_ANY && ++any > 1)
                return differ(g, n, "the new shape");
            break;
        case JIT_EXPAND:
            a->pd[i] = merge_dim(g, pa, pb);
            j = i - (a->np - ia->ndim);
            if (a->pd[i].sym == JIT_ANY &&
                !(j >= 0 && ia->dim[j].sym == JIT_STATIC &&
                  pa == ia->dim[j].mul && pb == ib->dim[j].mul))
                return differ(g, n, "the new shape");
            break;
        case JIT_SLICE:
            /* A slice to the end of a dynamic axis stays one. */
            if (i == 2 && pa == ia->dim[a->p[0]].mul &&
                pb == ib->dim[a->p[0]].mul) {
                a->p[2] = INT64_MAX;
                break;
            }
            return differ(g, n, "a slice bound");
        default:
            return differ(g, n, "the permutation");
        }
    }
    return KEEL_STATUS_OK;
}

/* Fold run 1 (h) into run 0 (g): same nodes, dimensions in symbols. */
static keel_status merge(keel_graph *g, const keel_graph *h)
{
    keel_status st;

    if (g->nnode != h->nnode || g->nval != h->nval)
        return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                           "keel_jit_trace: the forward records %d ops "
                           "for one input size and %d for another; it "
                           "cannot be traced with these dynamic dimensions",
                           g->nnode, h->nnode);
    for (int n = 0; n < g->nnode; n++) {
        const struct jit_node *a = &g->node[n], *b = &h->node[n];
        if (a->kind != b->kind || a->op != b->op || a->nin != b->nin ||
            a->nout != b->nout ||
            memcmp(a->in, b->in, sizeof(int) * (size_t)a->nin) ||
            memcmp(a->out, b->out, sizeof(int) * (size_t)a->nout))
            return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                               "keel_jit_trace: node %d is %s for one "
                               "input size and %s for another; the "
                               "forward cannot be traced with these "
                               "dynamic dimensions",
                               n, keel_graph_node_op(g, n),
                               keel_graph_node_op(h, n));
    }
    /* Nodes first: their checks read both runs' static dimensions. */
    for (int n = 0; n < g->nnode; n++)
        if ((st = merge_node(g, h, n)) != KEEL_STATUS_OK)
            return st;
    for (int v = 0; v < g->nval; v++) {
        struct jit_value *a = &g->val[v];
        const struct jit_value *b = &h->val[v];

        if (a->kind != b->kind || a->dtype != b->dtype ||
            a->ndim != b->ndim)
            return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                               "keel_jit_trace: value %d differs in kind, "
                               "dtype or rank between input sizes",
                               v);
        if (a->kind == JIT_CONST) {
            bool same;
            if (strcmp(a->name, b->name))
                return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                                   "keel_jit_trace: constant %s is %s "
                                   "for another input size",
                                   a->name, b->name);
            st = same_const(a->data, b->data, &same);
            if (st != KEEL_STATUS_OK)
                return st;
            if (!same)
                return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                                   "keel_jit_trace: %s, a tensor the "
                                   "forward made without keel's ops, "
                                   "depends on the inputs; a graph cannot "
                                   "record how",
                                   a->name);
            continue;
        }
        if (a->kind == JIT_INPUT)
            continue; /* set from the specs */
        for (int d = 0; d < a->ndim; d++)
            a->dim[d] = merge_dim(g, a->dim[d].mul, b->dim[d].mul);
    }
    return KEEL_STATUS_OK;
}

/* ---- the entry point ---------------------------------------------------------- */

static keel_status check_specs(const keel_input_spec *specs, int n)
{
    if (n < 1 || n > 64 || !specs)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_jit_trace: %d input specs (1 to 64)", n);
    for (int i = 0; i < n; i++) {
        const keel_input_spec *s = &specs[i];
        if (s->ndim < 0 || s->ndim > KEEL_MAX_DIMS ||
            (unsigned)s->dtype >= KEEL_DTYPE_COUNT_)
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "keel_jit_trace: spec %d has rank %d and "
                               "dtype %d",
                               i, s->ndim, (int)s->dtype);
        for (int d = 0; d < s->ndim; d++)
            if (s->shape[d] < -1)
                return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                                   "keel_jit_trace: spec %d dim %d is "
                                   "%" PRId64 " (-1: dynamic)",
                                   i, d, s->shape[d]);
        for (int j = 0; j < i; j++)
            if (s->name && specs[j].name && !strcmp(s->name, specs[j].name))
                return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                                   "keel_jit_trace: specs %d and %d are "
                                   "both named '%s'",
                                   j, i, s->name);
    }
    return KEEL_STATUS_OK;
}

keel_status keel_jit_trace(keel_layer *layer, const keel_input_spec *specs,
                           int num_specs, keel_graph **out)
{
    struct tracer t[2];
    struct named *params = NULL;
    keel_state_dict *sd = NULL;
    keel_graph *g = NULL;
    int dsym[64][KEEL_MAX_DIMS];
    int64_t np = 0;
    keel_status st;

    if (!layer || !out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_jit_trace: %s is NULL",
                           layer ? "out" : "layer");
    *out = NULL;
    if ((st = check_specs(specs, num_specs)) != KEEL_STATUS_OK)
        return st;
    if (keel__amp_on)
        return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                           "keel_jit_trace: called inside auto_cast; trace "
                           "in float32 and choose the precision when the "
                           "graph runs");
    if (keel__capture)
        return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                           "keel_jit_trace: a trace is already running on "
                           "this thread");
    memset(t, 0, sizeof(t));
    /* The symbols, numbered in order of first appearance. */
    st = keel__graph_new(&g);
    for (int i = 0; st == KEEL_STATUS_OK && i < num_specs; i++)
        for (int d = 0; d < specs[i].ndim; d++) {
            char buf[80];
            const char *name = specs[i].dim_names ? specs[i].dim_names[d]
                                                  : NULL;
            dsym[i][d] = -1;
            if (specs[i].shape[d] >= 0)
                continue;
            if (!name || !*name) {
                if (specs[i].name)
                    snprintf(buf, sizeof(buf), "%.60s.%d", specs[i].name, d);
                else
                    snprintf(buf, sizeof(buf), "x%d.%d", i, d);
                name = buf;
            }
            dsym[i][d] = keel__graph_add_symbol(g, name);
            if (dsym[i][d] < 0)
                st = keel_last_status();
        }
    if (st == KEEL_STATUS_OK)
        st = keel_layer_state_dict(layer, &sd);
    if (st == KEEL_STATUS_OK) {
        np = keel_state_dict_count(sd);
        params = calloc((size_t)(np ? np : 1), sizeof(*params));
        if (!params)
            st = oom();
        for (int64_t i = 0; st == KEEL_STATUS_OK && i < np; i++) {
            keel_tensor *p = NULL;
            st = keel_state_dict_at(sd, i, &params[i].name, &p);
            params[i].t = p;
        }
    }
    for (int r = 0; r < 2 && st == KEEL_STATUS_OK; r++) {
        t[r].params = params;
        t[r].nparams = (int)np;
        st = trace_once(layer, specs, num_specs, dsym, r, &t[r]);
        if (st == KEEL_STATUS_OK) {
            /* Move the symbols in: merge_dim reads them from the graph. */
            for (int s = 0; s < g->nsym; s++) {
                t[r].g->sym[s] = strdup(g->sym[s]);
                if (!t[r].g->sym[s])
                    st = oom();
                t[r].g->nsym = s + 1;
            }
        }
    }
    if (st == KEEL_STATUS_OK)
        st = merge(t[0].g, t[1].g);
    if (st == KEEL_STATUS_OK) {
        keel_graph *a = t[0].g;
        for (int i = 0; i < num_specs; i++) {
            struct jit_value *v = &a->val[a->in[i]];
            char buf[16];
            for (int d = 0; d < v->ndim; d++)
                if (dsym[i][d] >= 0) {
                    v->dim[d].sym = dsym[i][d];
                    v->dim[d].mul = 1;
                }
            if (specs[i].name)
                v->name = strdup(specs[i].name);
            else {
                snprintf(buf, sizeof(buf), "x%d", i);
                v->name = strdup(buf);
            }
            if (!v->name)
                st = oom();
        }
        if (st == KEEL_STATUS_OK)
            st = keel__graph_finish(a);
        if (st == KEEL_STATUS_OK) {
            *out = a;
            t[0].g = NULL;
        }
    }
    tracer_free(&t[0]);
    tracer_free(&t[1]);
    keel_graph_free(g);
    keel_state_dict_free(sd);
    free(params);
    return st;
}
