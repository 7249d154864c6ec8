/*
 * Graphs in memory: building one, running it, asking about it, and the
 * layer that wraps one (Paddle's TranslatedLayer).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/jit_internal.h"

#define NEED(cond, ...)                                                     \
    do {                                                                    \
        if (!(cond))                                                        \
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT, __VA_ARGS__);  \
    } while (0)

static keel_status oom(void)
{
    return keel__error(KEEL_STATUS_OUT_OF_MEMORY, "jit: out of memory");
}

keel_status keel__graph_new(keel_graph **out)
{
    keel_graph *g = calloc(1, sizeof(*g));

    if (!g)
        return oom();
    atomic_init(&g->refs, 1);
    *out = g;
    return KEEL_STATUS_OK;
}

/* Grow an array of `n` elements of `size` bytes to room for n + 1: the
 * capacity is the next power of two, so it grows at powers of two. */
static void *grow(void *p, int n, size_t size)
{
    if (n == 0)
        return realloc(p, size);
    if (n & (n - 1))
        return p;
    return realloc(p, size * (size_t)n * 2);
}

int keel__graph_add_value(keel_graph *g, enum jit_value_kind kind,
                          keel_dtype dtype, int ndim,
                          const struct jit_dim *dim)
{
    struct jit_value *v;
    void *p;

    if (g->nval >= (1 << 24)) {
        keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                    "jit: more than %d values", 1 << 24);
        return -1;
    }
    p = grow(g->val, g->nval, sizeof(*g->val));
    if (!p) {
        oom();
        return -1;
    }
    g->val = p;
    v = &g->val[g->nval];
    memset(v, 0, sizeof(*v));
    v->kind = kind;
    v->dtype = dtype;
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        v->dim[i] = dim[i];
    return g->nval++;
}

int keel__graph_add_node(keel_graph *g, enum jit_node_kind kind,
                         keel_op_id op, const int *in, int nin,
                         const int *out, int nout)
{
    struct jit_node *n;
    void *p;

    if (g->nnode >= (1 << 24)) {
        keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                    "jit: more than %d nodes", 1 << 24);
        return -1;
    }
    p = grow(g->node, g->nnode, sizeof(*g->node));
    if (!p) {
        oom();
        return -1;
    }
    g->node = p;
    n = &g->node[g->nnode];
    memset(n, 0, sizeof(*n));
    n->kind = kind;
    n->op = op;
    n->in = malloc(sizeof(int) * (size_t)(nin > 0 ? nin : 1));
    n->out = malloc(sizeof(int) * (size_t)(nout > 0 ? nout : 1));
    if (!n->in || !n->out) {
        free(n->in);
        free(n->out);
        oom();
        return -1;
    }
    if (nin)
        memcpy(n->in, in, sizeof(int) * (size_t)nin);
    if (nout)
        memcpy(n->out, out, sizeof(int) * (size_t)nout);
    n->nin = nin;
    n->nout = nout;
    return g->nnode++;
}

keel_status keel__graph_set_attr(struct jit_node *n, int k, const keel_attr *a)
{
    keel_attr *d = &n->attrs[k];

    *d = *a;
    d->name = NULL;
    if (a->type == KEEL_ATTR_STRING) {
        d->v.s = strdup(a->v.s ? a->v.s : "");
        if (!d->v.s)
            return oom();
    } else if (a->type == KEEL_ATTR_INTS) {
        int64_t *c = malloc(sizeof(int64_t) *
                            (size_t)(a->v.ints.count ? a->v.ints.count : 1));
        if (!c)
            return oom();
        if (a->v.ints.count)
            memcpy(c, a->v.ints.data,
                   sizeof(int64_t) * (size_t)a->v.ints.count);
        d->v.ints.data = c;
    } else if (a->type == KEEL_ATTR_FLOATS) {
        double *c = malloc(sizeof(double) *
                           (size_t)(a->v.floats.count ? a->v.floats.count
                                                      : 1));
        if (!c)
            return oom();
        if (a->v.floats.count)
            memcpy(c, a->v.floats.data,
                   sizeof(double) * (size_t)a->v.floats.count);
        d->v.floats.data = c;
    }
    return KEEL_STATUS_OK;
}

static keel_status add_id(int **arr, int *n, int value)
{
    void *p = grow(*arr, *n, sizeof(int));

    if (!p)
        return oom();
    *arr = p;
    (*arr)[(*n)++] = value;
    return KEEL_STATUS_OK;
}

keel_status keel__graph_add_input(keel_graph *g, int value)
{
    return add_id(&g->in, &g->nin, value);
}

keel_status keel__graph_add_output(keel_graph *g, int value, const char *name)
{
    int n = g->nout;
    void *p = grow(g->out_name, n, sizeof(char *));
    char *s;

    if (!p)
        return oom();
    g->out_name = p;
    s = strdup(name);
    if (!s)
        return oom();
    if (add_id(&g->out, &g->nout, value) != KEEL_STATUS_OK) {
        free(s);
        return KEEL_STATUS_OUT_OF_MEMORY;
    }
    g->out_name[n] = s;
    return KEEL_STATUS_OK;
}

int keel__graph_add_symbol(keel_graph *g, const char *name)
{
    for (int i = 0; i < g->nsym; i++)
        if (!strcmp(g->sym[i], name))
            return i;
    if (g->nsym >= KEEL_JIT_MAX_SYMBOLS) {
        keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                    "jit: more than %d dimension symbols",
                    KEEL_JIT_MAX_SYMBOLS);
        return -1;
    }
    g->sym[g->nsym] = strdup(name);
    if (!g->sym[g->nsym]) {
        oom();
        return -1;
    }
    return g->nsym++;
}

keel_status keel__graph_finish(keel_graph *g)
{
    free(g->last_use);
    g->last_use = malloc(sizeof(int) * (size_t)(g->nval ? g->nval : 1));
    if (!g->last_use)
        return oom();
    g->nconst = 0;
    for (int i = 0; i < g->nval; i++) {
        g->last_use[i] = -1;
        g->nconst += g->val[i].kind == JIT_CONST;
    }
    for (int n = 0; n < g->nnode; n++)
        for (int j = 0; j < g->node[n].nin; j++)
            g->last_use[g->node[n].in[j]] = n;
    /* Outputs live to the end. */
    for (int i = 0; i < g->nout; i++)
        g->last_use[g->out[i]] = g->nnode;
    return KEEL_STATUS_OK;
}

const char *keel__graph_kind_name(enum jit_node_kind k)
{
    switch (k) {
    case JIT_RESHAPE:
        return "keel.reshape";
    case JIT_PERMUTE:
        return "keel.permute";
    case JIT_SLICE:
        return "keel.slice";
    case JIT_EXPAND:
        return "keel.expand";
    case JIT_OP:
        break;
    }
    return NULL;
}

static int dim_str(const keel_graph *g, struct jit_dim d, char *buf,
                   size_t size)
{
    if (d.sym == JIT_STATIC)
        return snprintf(buf, size, "%" PRId64, d.mul);
    if (d.sym == JIT_ANY || d.sym >= g->nsym)
        return snprintf(buf, size, "?");
    if (d.mul == 1)
        return snprintf(buf, size, "%s", g->sym[d.sym]);
    return snprintf(buf, size, "%" PRId64 "*%s", d.mul, g->sym[d.sym]);
}

const char *keel__graph_shape_str(const keel_graph *g,
                                  const struct jit_value *v, char *buf,
                                  size_t size)
{
    size_t n = 0;

    if (!size)
        return buf;
    buf[0] = 0;
    n += (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < v->ndim && n < size; i++) {
        n += (size_t)snprintf(buf + n, size - n, i ? ", " : "");
        if (n < size)
            n += (size_t)dim_str(g, v->dim[i], buf + n, size - n);
    }
    if (n < size)
        snprintf(buf + n, size - n, "]");
    return buf;
}

void keel__graph_clear_attrs(struct jit_node *n)
{
    for (int k = 0; k < n->nattrs; k++) {
        keel_attr *a = &n->attrs[k];
        if (a->type == KEEL_ATTR_STRING)
            free((char *)a->v.s);
        else if (a->type == KEEL_ATTR_INTS)
            free((int64_t *)a->v.ints.data);
        else if (a->type == KEEL_ATTR_FLOATS)
            free((double *)a->v.floats.data);
    }
    n->nattrs = 0;
}

static void node_free(struct jit_node *n)
{
    keel__graph_clear_attrs(n);
    free(n->in);
    free(n->out);
}

void keel_graph_free(keel_graph *g)
{
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1)
        return;
    for (int i = 0; i < g->nval; i++) {
        free(g->val[i].name);
        keel_tensor_free(g->val[i].data);
    }
    for (int i = 0; i < g->nnode; i++)
        node_free(&g->node[i]);
    for (int i = 0; i < g->nsym; i++)
        free(g->sym[i]);
    for (int i = 0; i < g->nout; i++)
        free(g->out_name[i]);
    free(g->val);
    free(g->node);
    free(g->in);
    free(g->out);
    free(g->out_name);
    free(g->last_use);
    free(g);
}

/* ---- running ------------------------------------------------------------ */

/* The size of d under the bound symbols; -1 when it has none. */
static int64_t dim_size(struct jit_dim d, const int64_t *sym)
{
    if (d.sym == JIT_STATIC)
        return d.mul;
    if (d.sym < 0 || sym[d.sym] < 0)
        return -1;
    return d.mul * sym[d.sym];
}

static keel_status bind_inputs(const keel_graph *g, keel_tensor *const *in,
                               int64_t *sym)
{
    char a[160], b[128];

    for (int s = 0; s < g->nsym; s++)
        sym[s] = -1;
    for (int i = 0; i < g->nin; i++) {
        const struct jit_value *v = &g->val[g->in[i]];
        const keel_tensor *t = in[i];

        NEED(t, "keel_graph_run: input %d ('%s') is NULL", i, v->name);
        NEED(t->dtype == v->dtype && t->ndim == v->ndim,
             "keel_graph_run: input %d ('%s') is %s, the graph takes %s %s",
             i, v->name, keel__tensor_str(t, a, sizeof(a)),
             keel_dtype_name(v->dtype),
             keel__graph_shape_str(g, v, b, sizeof(b)));
        for (int d = 0; d < v->ndim; d++) {
            struct jit_dim e = v->dim[d];
            int64_t n = t->shape[d];

            if (e.sym == JIT_ANY)
                continue;
            if (e.sym == JIT_STATIC) {
                NEED(n == e.mul,
                     "keel_graph_run: input %d ('%s') is %s, the graph "
                     "takes %s (dim %d)",
                     i, v->name, keel__tensor_str(t, a, sizeof(a)),
                     keel__graph_shape_str(g, v, b, sizeof(b)), d);
                continue;
            }
            NEED(e.mul > 0 && n % e.mul == 0 &&
                     (sym[e.sym] < 0 || sym[e.sym] == n / e.mul),
                 "keel_graph_run: input %d ('%s') dim %d is %" PRId64
                 ", which does not fit %s = %" PRId64 " from an earlier "
                 "input (the graph takes %s)",
                 i, v->name, d, n, g->sym[e.sym], sym[e.sym],
                 keel__graph_shape_str(g, v, b, sizeof(b)));
            sym[e.sym] = n / e.mul;
        }
    }
    return KEEL_STATUS_OK;
}

static keel_status check_output(const keel_graph *g, int n, int value,
                                const keel_tensor *t, const int64_t *sym,
                                bool any_float)
{
    const struct jit_value *v = &g->val[value];
    char a[160], b[128];
    bool ok = (t->dtype == v->dtype ||
               (any_float && keel__dtype_is_float(t->dtype) &&
                keel__dtype_is_float(v->dtype))) &&
              t->ndim == v->ndim;

    for (int d = 0; ok && d < v->ndim; d++) {
        int64_t want = dim_size(v->dim[d], sym);
        ok = want < 0 || want == t->shape[d];
    }
    if (ok)
        return KEEL_STATUS_OK;
    return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                       "keel_graph_run: node %d (%s) made %s, the graph "
                       "declares %s %s",
                       n, keel_graph_node_op(g, n),
                       keel__tensor_str(t, a, sizeof(a)),
                       keel_dtype_name(v->dtype),
                       keel__graph_shape_str(g, v, b, sizeof(b)));
}

keel_status keel__graph_run_node(const keel_graph *g, const struct jit_node *n,
                                keel_tensor **vals, const int64_t *sym,
                                keel_tensor **outs, int *nout)
{
    keel_tensor *in[KEEL_MAX_OP_INPUTS];
    int64_t shape[KEEL_MAX_DIMS];
    int perm[KEEL_MAX_DIMS];

    (void)g;
    for (int j = 0; j < n->nin; j++)
        in[j] = vals[n->in[j]];
    *nout = 1;
    switch (n->kind) {
    case JIT_OP: {
        keel_attr attrs[KEEL_MAX_OP_ATTRS];
        const struct keel_op_def *d = keel__op_def(n->op);

        for (int k = 0; k < n->nattrs; k++) {
            attrs[k] = n->attrs[k];
            attrs[k].name = d->attrs[k].name;
        }
        return keel_op_run(n->op, in, n->nin, attrs, n->nattrs, outs,
                           n->nout, nout);
    }
    case JIT_RESHAPE:
    case JIT_EXPAND:
        for (int i = 0; i < n->np; i++)
            shape[i] = dim_size(n->pd[i], sym);
        return n->kind == JIT_RESHAPE
                   ? keel_reshape(in[0], n->np, shape, outs)
                   : keel_expand(in[0], n->np, shape, outs);
    case JIT_PERMUTE:
        for (int i = 0; i < n->np; i++)
            perm[i] = (int)n->p[i];
        return keel_permute(in[0], perm, outs);
    case JIT_SLICE:
        return keel_slice(in[0], (int)n->p[0], n->p[1], n->p[2], n->p[3],
                          outs);
    }
    return keel__error(KEEL_STATUS_INTERNAL, "jit: bad node kind");
}

keel_status keel__graph_run_ex(const keel_graph *g, keel_tensor *const *inputs,
                               int num_inputs, keel_tensor **outputs,
                               int max_outputs, int *num_outputs,
                               unsigned flags, uint64_t *value_bytes)
{
    int64_t sym[KEEL_JIT_MAX_SYMBOLS];
    keel_tensor **vals;
    keel_status st;

    if (num_outputs)
        *num_outputs = 0;
    NEED(g, "keel_graph_run: graph is NULL");
    NEED(num_inputs == g->nin && (num_inputs == 0 || inputs),
         "keel_graph_run: the graph takes %d inputs, got %d", g->nin,
         num_inputs);
    NEED(max_outputs >= g->nout && (g->nout == 0 || outputs),
         "keel_graph_run: the graph has %d outputs, room for %d", g->nout,
         max_outputs);
    st = bind_inputs(g, inputs, sym);
    if (st != KEEL_STATUS_OK)
        return st;
    vals = calloc((size_t)(g->nval ? g->nval : 1), sizeof(*vals));
    if (!vals)
        return oom();
    if (value_bytes)
        memset(value_bytes, 0, sizeof(uint64_t) * (size_t)g->nval);
    for (int i = 0; i < g->nin; i++)
        vals[g->in[i]] = keel_tensor_ref(inputs[i]);
    for (int i = 0; i < g->nval; i++)
        if (g->val[i].kind == JIT_CONST)
            vals[i] = keel_tensor_ref(g->val[i].data);
    for (int n = 0; n < g->nnode && st == KEEL_STATUS_OK; n++) {
        const struct jit_node *nd = &g->node[n];
        keel_tensor *outs[KEEL_MAX_OP_OUTPUTS] = {0};
        int got = 0;

        st = keel__graph_run_node(g, nd, vals, sym, outs, &got);
        if (st == KEEL_STATUS_OK && got != nd->nout)
            st = keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                             "keel_graph_run: node %d (%s) made %d "
                             "outputs, the graph declares %d",
                             n, keel_graph_node_op(g, n), got, nd->nout);
        for (int j = 0; j < got; j++) {
            if (st == KEEL_STATUS_OK)
                st = check_output(g, n, nd->out[j], outs[j], sym,
                                  (flags & KEEL__RUN_ANY_FLOAT) != 0);
            /* A view that shares its input's storage allocates nothing:
             * it is marked by the byte count UINT64_MAX. */
            if (value_bytes && outs[j])
                value_bytes[nd->out[j]] =
                    nd->kind != JIT_OP && nd->nin &&
                            outs[j]->storage == vals[nd->in[0]]->storage
                        ? UINT64_MAX
                        : (uint64_t)keel_tensor_numel(outs[j]) *
                              keel_dtype_size(outs[j]->dtype);
            if (st == KEEL_STATUS_OK &&
                (g->last_use[nd->out[j]] >= 0 ||
                 (flags & KEEL__RUN_KEEP_ALL)))
                vals[nd->out[j]] = outs[j];
            else
                keel_tensor_free(outs[j]);
        }
        /* Values no later node reads are freed now. */
        for (int j = 0; j < nd->nin && !(flags & KEEL__RUN_KEEP_ALL); j++)
            if (g->last_use[nd->in[j]] == n &&
                g->val[nd->in[j]].kind == JIT_NODE) {
                keel_tensor_free(vals[nd->in[j]]);
                vals[nd->in[j]] = NULL;
            }
    }
    if (st == KEEL_STATUS_OK) {
        for (int i = 0; i < g->nout; i++)
            outputs[i] = keel_tensor_ref(vals[g->out[i]]);
        if (num_outputs)
            *num_outputs = g->nout;
    }
    for (int i = 0; i < g->nval; i++)
        keel_tensor_free(vals[i]);
    free(vals);
    return st;
}

keel_status keel_graph_run(const keel_graph *g, keel_tensor *const *inputs,
                           int num_inputs, keel_tensor **outputs,
                           int max_outputs, int *num_outputs)
{
    return keel__graph_run_ex(g, inputs, num_inputs, outputs, max_outputs,
                              num_outputs, 0, NULL);
}

keel_status keel__graph_copy_node(keel_graph *c, const struct jit_node *a,
                                  const int *in, const int *out)
{
    struct jit_node *b;
    keel_status st = KEEL_STATUS_OK;
    int k = keel__graph_add_node(c, a->kind, a->op, in, a->nin, out, a->nout);

    if (k < 0)
        return keel_last_status();
    b = &c->node[k];
    b->np = a->np;
    memcpy(b->p, a->p, sizeof(a->p));
    memcpy(b->pd, a->pd, sizeof(a->pd));
    for (int j = 0; st == KEEL_STATUS_OK && j < a->nattrs; j++) {
        st = keel__graph_set_attr(b, j, &a->attrs[j]);
        b->nattrs = j + 1;
    }
    return st;
}

keel_status keel__graph_clone(const keel_graph *g, keel_graph **out)
{
    keel_graph *c = NULL;
    keel_status st = keel__graph_new(&c);

    for (int s = 0; st == KEEL_STATUS_OK && s < g->nsym; s++)
        if (keel__graph_add_symbol(c, g->sym[s]) < 0)
            st = keel_last_status();
    for (int v = 0; st == KEEL_STATUS_OK && v < g->nval; v++) {
        const struct jit_value *a = &g->val[v];
        struct jit_value *b;

        if (keel__graph_add_value(c, a->kind, a->dtype, a->ndim, a->dim) < 0) {
            st = keel_last_status();
            break;
        }
        b = &c->val[v];
        if (a->name && !(b->name = strdup(a->name)))
            st = oom();
        if (a->data)
            b->data = keel_tensor_ref(a->data);
    }
    for (int n = 0; st == KEEL_STATUS_OK && n < g->nnode; n++)
        st = keel__graph_copy_node(c, &g->node[n], g->node[n].in,
                                   g->node[n].out);
    for (int i = 0; st == KEEL_STATUS_OK && i < g->nin; i++)
        st = keel__graph_add_input(c, g->in[i]);
    for (int i = 0; st == KEEL_STATUS_OK && i < g->nout; i++)
        st = keel__graph_add_output(c, g->out[i], g->out_name[i]);
    if (st == KEEL_STATUS_OK)
        st = keel__graph_finish(c);
    if (st != KEEL_STATUS_OK) {
        keel_graph_free(c);
        return st;
    }
    *out = c;
    return KEEL_STATUS_OK;
}

void keel__graph_ref(keel_graph *g)
{
    atomic_fetch_add(&g->refs, 1);
}

/* ---- questions ------------------------------------------------------------ */

int keel_graph_num_inputs(const keel_graph *g) { return g ? g->nin : 0; }
int keel_graph_num_outputs(const keel_graph *g) { return g ? g->nout : 0; }
int keel_graph_num_nodes(const keel_graph *g) { return g ? g->nnode : 0; }
int keel_graph_num_constants(const keel_graph *g)
{
    return g ? g->nconst : 0;
}

const char *keel_graph_input_name(const keel_graph *g, int i)
{
    return g && i >= 0 && i < g->nin ? g->val[g->in[i]].name : NULL;
}

const char *keel_graph_output_name(const keel_graph *g, int i)
{
    return g && i >= 0 && i < g->nout ? g->out_name[i] : NULL;
}

keel_status keel_graph_value_info(const keel_graph *g, bool output, int i,
                                  keel_dtype *dtype, int *ndim,
                                  int64_t *shape)
{
    const struct jit_value *v;

    NEED(g && dtype && ndim && shape,
         "keel_graph_value_info: NULL argument");
    NEED(i >= 0 && i < (output ? g->nout : g->nin),
         "keel_graph_value_info: %s %d out of range (%d)",
         output ? "output" : "input", i, output ? g->nout : g->nin);
    v = &g->val[output ? g->out[i] : g->in[i]];
    *dtype = v->dtype;
    *ndim = v->ndim;
    for (int d = 0; d < v->ndim; d++)
        shape[d] = v->dim[d].sym == JIT_STATIC ? v->dim[d].mul : -1;
    return KEEL_STATUS_OK;
}

const char *keel_graph_node_op(const keel_graph *g, int i)
{
    if (!g || i < 0 || i >= g->nnode)
        return NULL;
    if (g->node[i].kind == JIT_OP)
        return keel_op_get_info(g->node[i].op)->name;
    return keel__graph_kind_name(g->node[i].kind);
}

keel_status keel_graph_constants(const keel_graph *g, keel_state_dict **out)
{
    keel_state_dict *sd;
    keel_status st;

    NEED(g && out, "keel_graph_constants: NULL argument");
    st = keel_state_dict_create(&sd);
    for (int i = 0; st == KEEL_STATUS_OK && i < g->nval; i++)
        if (g->val[i].kind == JIT_CONST)
            st = keel_state_dict_set(sd, g->val[i].name, g->val[i].data);
    if (st != KEEL_STATUS_OK) {
        keel_state_dict_free(sd);
        return st;
    }
    *out = sd;
    return KEEL_STATUS_OK;
}

/* ---- the layer ------------------------------------------------------------ */

static keel_status jit_layer_forward(keel_layer *layer,
                                     keel_tensor *const *inputs,
                                     int num_inputs, keel_tensor **out)
{
    const keel_graph *g = keel_layer_priv(layer);
    keel_tensor *outs[64];
    int n = 0;
    keel_status st;

    if (g->nout > 64)
        return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                           "TranslatedLayer: %d outputs, at most 64",
                           g->nout);
    NEED(g->nout >= 1, "TranslatedLayer: the graph has no outputs");
    st = keel_graph_run(g, inputs, num_inputs, outs, 64, &n);
    if (st != KEEL_STATUS_OK)
        return st;
    *out = outs[0];
    for (int i = 1; i < n; i++)
        keel_tensor_free(outs[i]);
    return KEEL_STATUS_OK;
}

static void jit_layer_destroy(void *priv)
{
    keel_graph_free(priv);
}

static const keel_layer_ops jit_layer_ops = {
    .type = "TranslatedLayer",
    .forward = jit_layer_forward,
    .destroy = jit_layer_destroy,
};

keel_status keel_jit_layer(keel_graph *g, keel_layer **out)
{
    keel_status st;

    NEED(g && out, "keel_jit_layer: %s is NULL", g ? "out" : "graph");
    keel__graph_ref(g);
    st = keel_layer_create(&jit_layer_ops, g, out);
    if (st != KEEL_STATUS_OK)
        keel_graph_free(g);
    return st;
}
