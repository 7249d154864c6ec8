/*
 * The Predictor's IR passes. Each works on the predictor's own copy of
 * the graph: it marks nodes dead and rewires values; keel__passes_run
 * then rebuilds a compact graph. Every pass can be turned off by name.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference/inference_internal.h"

struct pass_ctx {
    keel_graph *g;
    bool *dead;    /* per node */
    int changed;   /* nodes this pass changed or removed */
    keel_dtype precision; /* the predictor's: float32, float16, bfloat16 */
};

typedef keel_status (*pass_fn)(struct pass_ctx *c);

static keel_status oom(void)
{
    return keel__error(KEEL_STATUS_OUT_OF_MEMORY, "predictor: out of memory");
}

/* How many live nodes read value v, and whether it is a graph output. */
static int readers(const struct pass_ctx *c, int v, bool *is_output)
{
    int n = 0;

    *is_output = false;
    for (int i = 0; i < c->g->nout; i++)
        *is_output |= c->g->out[i] == v;
    for (int k = 0; k < c->g->nnode; k++)
        if (!c->dead[k])
            for (int j = 0; j < c->g->node[k].nin; j++)
                n += c->g->node[k].in[j] == v;
    return n;
}

/* The live node reading v, when exactly one read of v exists and v is no
 * output; else -1. */
static int sole_reader(const struct pass_ctx *c, int v)
{
    int found = -1;

    for (int i = 0; i < c->g->nout; i++)
        if (c->g->out[i] == v)
            return -1;
    for (int k = 0; k < c->g->nnode; k++)
        if (!c->dead[k])
            for (int j = 0; j < c->g->node[k].nin; j++)
                if (c->g->node[k].in[j] == v) {
                    if (found >= 0)
                        return -1;
                    found = k;
                }
    return found;
}

/* Every read of `from` (live nodes, graph outputs) reads `to` instead. */
static void replace_uses(struct pass_ctx *c, int from, int to)
{
    for (int k = 0; k < c->g->nnode; k++)
        if (!c->dead[k])
            for (int j = 0; j < c->g->node[k].nin; j++)
                if (c->g->node[k].in[j] == from)
                    c->g->node[k].in[j] = to;
    for (int i = 0; i < c->g->nout; i++)
        if (c->g->out[i] == from)
            c->g->out[i] = to;
}

/* Give node n a third input (a bias), its first two kept. */
static keel_status with_bias_slot(struct jit_node *n)
{
    if (n->nin < 3) {
        int *in = realloc(n->in, 3 * sizeof(int));
        if (!in)
            return oom();
        n->in = in;
        n->nin = 3;
    }
    return KEEL_STATUS_OK;
}

/* Node n now makes what node r, its sole reader, made; r is dropped. */
static void absorb(struct pass_ctx *c, struct jit_node *n, int r)
{
    n->out[0] = c->g->node[r].out[0];
    c->dead[r] = true;
    c->changed += 2;
}

static bool all_static(const struct jit_value *v)
{
    for (int d = 0; d < v->ndim; d++)
        if (v->dim[d].sym != JIT_STATIC)
            return false;
    return true;
}

/* Make value v a constant holding t (a reference is taken). */
static keel_status make_const(keel_graph *g, int v, keel_tensor *t,
                              const char *prefix)
{
    char name[64];

    snprintf(name, sizeof(name), "%s.%d", prefix, v);
    free(g->val[v].name);
    g->val[v].name = strdup(name);
    if (!g->val[v].name)
        return oom();
    g->val[v].kind = JIT_CONST;
    g->val[v].data = keel_tensor_ref(t);
    return KEEL_STATUS_OK;
}

/* ---- constant folding ---------------------------------------------------- */

static bool random_op(keel_op_id op)
{
    return op == KEEL_OP_UNIFORM || op == KEEL_OP_NORMAL ||
           op == KEEL_OP_RANDINT || op == KEEL_OP_BERNOULLI ||
           op == KEEL_OP_DROPOUT;
}

static keel_status constant_folding(struct pass_ctx *c)
{
    keel_graph *g = c->g;
    keel_tensor **vals = calloc((size_t)g->nval, sizeof(*vals));
    keel_status st = KEEL_STATUS_OK;

    if (!vals)
        return oom();
    for (int k = 0; k < g->nnode && st == KEEL_STATUS_OK; k++) {
        struct jit_node *n = &g->node[k];
        keel_tensor *outs[KEEL_MAX_OP_OUTPUTS] = {0};
        bool foldable = !c->dead[k] &&
                        !(n->kind == JIT_OP && random_op(n->op));
        int got = 0;

        for (int j = 0; foldable && j < n->nin; j++)
            foldable = g->val[n->in[j]].kind == JIT_CONST;
        for (int j = 0; foldable && j < n->nout; j++)
            foldable = all_static(&g->val[n->out[j]]);
        if (!foldable)
            continue;
        for (int j = 0; j < n->nin; j++)
            vals[n->in[j]] = g->val[n->in[j]].data;
        st = keel__graph_run_node(g, n, vals, NULL, outs, &got);
        if (st == KEEL_STATUS_OK && got != n->nout)
            st = keel__error(KEEL_STATUS_INTERNAL,
                             "constant_folding: node %d made %d outputs", k,
                             got);
        for (int j = 0; j < got; j++) {
            if (st == KEEL_STATUS_OK)
                st = make_const(g, n->out[j], outs[j], "fold");
            keel_tensor_free(outs[j]);
        }
        if (st == KEEL_STATUS_OK) {
            c->dead[k] = true;
            c->changed++;
        }
    }
    free(vals);
    return st;
}

/* ---- dead code ------------------------------------------------------------- */

static keel_status dead_code_elimination(struct pass_ctx *c)
{
    /* Backwards: a node lives when a graph output or a live node reads
     * one of its outputs. */
    for (int k = c->g->nnode - 1; k >= 0; k--) {
        const struct jit_node *n = &c->g->node[k];
        bool used = false;

        if (c->dead[k])
            continue;
        for (int j = 0; j < n->nout && !used; j++) {
            bool out;
            used = readers(c, n->out[j], &out) > 0 || out;
        }
        if (!used) {
            c->dead[k] = true;
            c->changed++;
        }
    }
    return KEEL_STATUS_OK;
}

/* ---- BatchNorm folding ------------------------------------------------------- */

/* s = scale / sqrt(var + eps); w' = w * s (per output channel); b' = (b -
 * mean) * s + bias. Computed with keel's ops on the constants' device. */
static keel_status fold_bn(const keel_tensor *w, const keel_tensor *b,
                           keel_tensor *const *bn, double eps, bool conv,
                           keel_tensor **w2, keel_tensor **b2)
{
    keel_tensor *e = NULL, *t = NULL, *r = NULL, *s = NULL, *sv = NULL;
    keel_tensor *m = NULL;
    int64_t shape[4] = {1, 1, 1, 1};
    keel_status st;

    *w2 = *b2 = NULL;
    st = keel_full(0, NULL, bn[4]->dtype, eps, NULL, &e);
    if (st == KEEL_STATUS_OK)
        st = keel_add(bn[4], e, &t);
    if (st == KEEL_STATUS_OK)
        st = keel_rsqrt(t, &r);
    if (st == KEEL_STATUS_OK)
        st = keel_multiply(bn[1], r, &s);
    if (st == KEEL_STATUS_OK) {
        if (conv) {
            shape[0] = s->shape[0];
            st = keel_reshape(s, 4, shape, &sv);
        } else {
            shape[1] = s->shape[0];
            st = keel_reshape(s, 2, shape, &sv);
        }
    }
    if (st == KEEL_STATUS_OK)
        st = keel_multiply(w, sv, w2);
    keel_tensor_free(t);
    t = NULL;
    if (st == KEEL_STATUS_OK)
        st = b ? keel_subtract(b, bn[3], &m) : keel_neg(bn[3], &m);
    if (st == KEEL_STATUS_OK)
        st = keel_multiply(m, s, &t);
    if (st == KEEL_STATUS_OK)
        st = keel_add(t, bn[2], b2);
    keel_tensor_free(e);
    keel_tensor_free(t);
    keel_tensor_free(r);
    keel_tensor_free(s);
    keel_tensor_free(sv);
    keel_tensor_free(m);
    if (st != KEEL_STATUS_OK) {
        keel_tensor_free(*w2);
        keel_tensor_free(*b2);
        *w2 = *b2 = NULL;
    }
    return st;
}

/* ---- linear folding ----------------------------------------------------------- */

/*
 * matmul(x, W) whose only reader adds a bias b: W a constant [in, out]
 * and b a constant [out] of the same dtype, no transposes, becomes
 * linear(x, W, b) (what ONNX models from other frameworks carry as
 * MatMul + Add). The bias then enters the GEMM's sums before the last
 * block of the inner dimension is added rather than after it, so results
 * may differ from the pair by rounding.
 */
static const keel_attr *attr_of(const struct jit_node *n, const char *name);

static bool is_bias_for(const struct jit_value *b, const struct jit_value *w,
                        keel_dtype dt)
{
    return b->kind == JIT_CONST && b->data && b->dtype == dt &&
           b->ndim == 1 && keel_tensor_ndim(b->data) == 1 &&
           keel_tensor_shape(b->data)[0] == keel_tensor_shape(w->data)[1];
}

static keel_status linear_folding(struct pass_ctx *c)
{
    keel_graph *g = c->g;

    for (int k = 0; k < g->nnode; k++) {
        struct jit_node *n = &g->node[k], *a;
        const struct jit_value *w;
        const keel_attr *tx, *ty;
        keel_dtype dt;
        int r, b;

        if (c->dead[k] || n->kind != JIT_OP || n->op != KEEL_OP_MATMUL ||
            n->nin != 2)
            continue;
        tx = attr_of(n, "transpose_x");
        ty = attr_of(n, "transpose_y");
        w = &g->val[n->in[1]];
        dt = g->val[n->out[0]].dtype;
        if ((tx && tx->v.i) || (ty && ty->v.i) || w->kind != JIT_CONST ||
            !w->data || keel_tensor_ndim(w->data) != 2 || w->dtype != dt ||
            g->val[n->in[0]].dtype != dt || g->val[n->in[0]].ndim < 2)
            continue;
        r = sole_reader(c, n->out[0]);
        if (r < 0)
            continue;
        a = &g->node[r];
        if (a->kind != JIT_OP || a->op != KEEL_OP_ADD || a->nin != 2 ||
            g->val[a->out[0]].dtype != dt)
            continue;
        b = a->in[0] == n->out[0] ? a->in[1] : a->in[0];
        if (a->in[0] == a->in[1] || !is_bias_for(&g->val[b], w, dt))
            continue;
        if (with_bias_slot(n) != KEEL_STATUS_OK)
            return keel_last_status();
        n->op = KEEL_OP_LINEAR;
        n->in[2] = b;
        keel__graph_clear_attrs(n); /* matmul's; linear has none */
        absorb(c, n, r);
    }
    return KEEL_STATUS_OK;
}

static keel_status batch_norm_folding(struct pass_ctx *c)
{
    keel_graph *g = c->g;

    for (int k = 0; k < g->nnode; k++) {
        struct jit_node *n = &g->node[k], *bn;
        keel_tensor *bt[5], *w2, *b2;
        const keel_tensor *b;
        const struct keel_op_def *d;
        double eps = 0;
        int r, training = 1, nw, nb;
        bool ok, out;
        keel_status st;

        if (c->dead[k] || n->kind != JIT_OP ||
            (n->op != KEEL_OP_CONV2D && n->op != KEEL_OP_LINEAR))
            continue;
        r = sole_reader(c, n->out[0]);
        if (r < 0)
            continue;
        bn = &g->node[r];
        if (bn->kind != JIT_OP || bn->op != KEEL_OP_BATCH_NORM ||
            bn->in[0] != n->out[0] || bn->nin != 5)
            continue;
        d = keel__op_def(KEEL_OP_BATCH_NORM);
        for (int a = 0; a < d->nattrs; a++) {
            if (!strcmp(d->attrs[a].name, "training"))
                training = (int)bn->attrs[a].v.i;
            if (!strcmp(d->attrs[a].name, "epsilon"))
                eps = bn->attrs[a].v.f;
        }
        ok = !training && g->val[n->in[1]].kind == JIT_CONST &&
             (n->nin < 3 || g->val[n->in[2]].kind == JIT_CONST);
        for (int j = 1; ok && j < 5; j++)
            ok = g->val[bn->in[j]].kind == JIT_CONST;
        for (int j = 1; ok && j < bn->nout; j++)
            ok = readers(c, bn->out[j], &out) == 0 && !out;
        /* BatchNorm1D after a linear normalises the last axis only for
         * 2-D inputs: [N, C]. */
        if (ok && n->op == KEEL_OP_LINEAR)
            ok = g->val[n->out[0]].ndim == 2;
        if (!ok)
            continue;
        for (int j = 0; j < 5; j++)
            bt[j] = g->val[bn->in[j]].data;
        b = n->nin >= 3 ? g->val[n->in[2]].data : NULL;
        st = fold_bn(g->val[n->in[1]].data, b, bt, eps,
                     n->op == KEEL_OP_CONV2D, &w2, &b2);
        if (st != KEEL_STATUS_OK)
            return st;
        {
            struct jit_dim wd[KEEL_MAX_DIMS];
            memcpy(wd, g->val[n->in[1]].dim, sizeof(wd));
            nw = keel__graph_add_value(g, JIT_CONST, w2->dtype, w2->ndim, wd);
        }
        nb = nw < 0 ? -1
                    : keel__graph_add_value(g, JIT_CONST, b2->dtype, 1,
                                            &(struct jit_dim){JIT_STATIC,
                                                              b2->shape[0]});
        n = &g->node[k]; /* values moved; nodes did not, but be plain */
        bn = &g->node[r];
        st = nw < 0 || nb < 0 ? keel_last_status()
                              : make_const(g, nw, w2, "fold.bn.weight");
        if (st == KEEL_STATUS_OK)
            st = make_const(g, nb, b2, "fold.bn.bias");
        keel_tensor_free(w2);
        keel_tensor_free(b2);
        if (st != KEEL_STATUS_OK)
            return st;
        if (with_bias_slot(n) != KEEL_STATUS_OK)
            return keel_last_status();
        n->in[1] = nw;
        n->in[2] = nb;
        /* The conv now makes what the BatchNorm made. */
        absorb(c, n, r);
    }
    return KEEL_STATUS_OK;
}

/* ---- activation fusion --------------------------------------------------------- */

struct act_map {
    keel_op_id op;
    const char *name;     /* the fused op's activation */
    const char *alt;      /* with the op's bool attribute set, or NULL */
    const char *attr;     /* that attribute, or the float one to carry */
};

static const struct act_map acts[] = {
    {KEEL_OP_RELU, "relu", NULL, NULL},
    {KEEL_OP_RELU6, "relu6", NULL, NULL},
    {KEEL_OP_GELU, "gelu", "gelu_tanh", "approximate"},
    {KEEL_OP_SILU, "silu", NULL, NULL},
    {KEEL_OP_SIGMOID, "sigmoid", NULL, NULL},
    {KEEL_OP_TANH, "tanh", NULL, NULL},
    {KEEL_OP_LEAKY_RELU, "leaky_relu", NULL, "negative_slope"},
    {KEEL_OP_HARDSWISH, "hardswish", NULL, NULL},
};

static const keel_attr *attr_of(const struct jit_node *n, const char *name)
{
    const struct keel_op_def *d = keel__op_def(n->op);

    for (int a = 0; a < n->nattrs; a++)
        if (!strcmp(d->attrs[a].name, name))
            return &n->attrs[a];
    return NULL;
}

static keel_status fuse_activation(struct pass_ctx *c)
{
    keel_graph *g = c->g;
    keel_op_id fl, fc;
    keel_place place;

    if (keel_op_find("fused_linear", &fl) != KEEL_STATUS_OK ||
        keel_op_find("fused_conv2d", &fc) != KEEL_STATUS_OK)
        return KEEL_STATUS_OK; /* a catalog without the fused ops */
    for (int k = 0; k < g->nnode; k++) {
        struct jit_node *n = &g->node[k], *a, fused;
        const struct act_map *m = NULL;
        const struct keel_op_def *fd;
        const char *act;
        double alpha = 0;
        keel_op_id f;
        int r;
        keel_status st = KEEL_STATUS_OK;

        if (c->dead[k] || n->kind != JIT_OP ||
            (n->op != KEEL_OP_LINEAR && n->op != KEEL_OP_CONV2D))
            continue;
        f = n->op == KEEL_OP_LINEAR ? fl : fc;
        r = sole_reader(c, n->out[0]);
        if (r < 0 || g->node[r].kind != JIT_OP)
            continue;
        a = &g->node[r];
        for (size_t i = 0; i < sizeof(acts) / sizeof(acts[0]); i++)
            if (acts[i].op == a->op)
                m = &acts[i];
        if (!m || a->nin != 1)
            continue;
        /* In reduced precision auto_cast runs linear and conv2d whose bias
         * is float32 as the op without the bias in the low dtype, then a
         * float32 add (amp.c, as Paddle composes them), and the
         * activation in float32; a fused kernel would apply bias and
         * activation in the low dtype, so the pair stays. */
        if (c->precision != KEEL_F32 && n->nin == 3 && n->in[2] >= 0 &&
            g->val[n->in[2]].dtype != c->precision)
            continue;
        /* Only where the device has the fused kernel. */
        if (!g->val[n->in[1]].data)
            continue;
        place = keel_tensor_place(g->val[n->in[1]].data);
        if (!keel__has_kernel(place, f, g->val[n->out[0]].dtype))
            continue;
        act = m->name;
        if (m->attr && m->alt) {
            const keel_attr *x = attr_of(a, m->attr);
            if (x && x->v.i)
                act = m->alt;
        } else if (m->attr) {
            const keel_attr *x = attr_of(a, m->attr);
            alpha = x ? x->v.f : 0;
        }
        /* The fused node: the op's own attributes by name, then the
         * activation's. */
        memset(&fused, 0, sizeof(fused));
        fd = keel__op_def(f);
        for (int j = 0; j < fd->nattrs && st == KEEL_STATUS_OK; j++) {
            const keel_attr *src = NULL;
            keel_attr tmp;

            if (!strcmp(fd->attrs[j].name, "activation")) {
                tmp = keel_attr_str("activation", act);
                src = &tmp;
            } else if (!strcmp(fd->attrs[j].name, "alpha")) {
                tmp = keel_attr_float("alpha", alpha);
                src = &tmp;
            } else {
                src = attr_of(n, fd->attrs[j].name);
                if (!src)
                    src = &fd->attrs[j].def;
            }
            st = keel__graph_set_attr(&fused, j, src);
            fused.nattrs = j + 1;
        }
        if (st != KEEL_STATUS_OK) {
            keel__graph_clear_attrs(&fused);
            return st;
        }
        /* Swap the attributes in: free the old payloads. */
        keel__graph_clear_attrs(n);
        memcpy(n->attrs, fused.attrs, sizeof(fused.attrs));
        n->nattrs = fused.nattrs;
        n->op = f;
        absorb(c, n, r);
    }
    return KEEL_STATUS_OK;
}

/* ---- layout: transposes and reshapes -------------------------------------------- */

static keel_status transpose_elimination(struct pass_ctx *c)
{
    keel_graph *g = c->g;

    for (int k = 0; k < g->nnode; k++) {
        struct jit_node *n = &g->node[k];
        int r;

        if (c->dead[k] || (n->kind != JIT_PERMUTE && n->kind != JIT_RESHAPE))
            continue;
        r = sole_reader(c, n->out[0]);
        if (r >= 0 && g->node[r].kind == n->kind) {
            /* Two in a row: the second reads the first's input. */
            struct jit_node *b = &g->node[r];
            if (n->kind == JIT_PERMUTE) {
                int64_t p[KEEL_MAX_DIMS];
                for (int i = 0; i < b->np; i++)
                    p[i] = n->p[b->p[i]];
                memcpy(b->p, p, sizeof(int64_t) * (size_t)b->np);
            }
            b->in[0] = n->in[0];
            c->dead[k] = true;
            c->changed++;
            continue;
        }
        if (n->kind == JIT_PERMUTE) {
            bool identity = true;
            for (int i = 0; i < n->np; i++)
                identity &= n->p[i] == i;
            if (identity) {
                replace_uses(c, n->out[0], n->in[0]);
                c->dead[k] = true;
                c->changed++;
            }
        }
    }
    return KEEL_STATUS_OK;
}

/* ---- the list ------------------------------------------------------------------- */

static const struct {
    const char *name, *doc;
    pass_fn fn;
} passes[] = {
    {"constant_folding",
     "run nodes whose inputs are all constants once, at creation",
     constant_folding},
    {"linear_folding",
     "matmul by a constant weight + a constant bias add -> one linear",
     linear_folding},
    {"batch_norm_folding",
     "fold an inference BatchNorm into the conv2d or linear before it",
     batch_norm_folding},
    {"fuse_activation",
     "linear/conv2d + activation -> fused_linear/fused_conv2d where the "
     "device has the fused kernel",
     fuse_activation},
    {"transpose_elimination",
     "merge permute/reshape chains, drop identity permutes",
     transpose_elimination},
    {"dead_code_elimination", "drop nodes whose results nothing reads",
     dead_code_elimination},
};

int keel_inference_num_passes(void)
{
    return (int)(sizeof(passes) / sizeof(passes[0]));
}

const char *keel_inference_pass_name(int i)
{
    return i >= 0 && i < keel_inference_num_passes() ? passes[i].name : NULL;
}

const char *keel_inference_pass_doc(int i)
{
    return i >= 0 && i < keel_inference_num_passes() ? passes[i].doc : NULL;
}

/* A compact copy of g without the dead nodes and unread values. */
static keel_status compact(const keel_graph *g, const bool *dead,
                           keel_graph **out)
{
    keel_graph *c = NULL;
    int *map = malloc(sizeof(int) * (size_t)(g->nval ? g->nval : 1));
    bool *keep = calloc((size_t)(g->nval ? g->nval : 1), 1);
    keel_status st = keel__graph_new(&c);

    if (!map || !keep) {
        free(map);
        free(keep);
        keel_graph_free(c);
        return oom();
    }
    for (int i = 0; i < g->nin; i++)
        keep[g->in[i]] = true;
    for (int i = 0; i < g->nout; i++)
        keep[g->out[i]] = true;
    for (int k = 0; k < g->nnode; k++)
        if (!dead[k]) {
            for (int j = 0; j < g->node[k].nin; j++)
                keep[g->node[k].in[j]] = true;
            for (int j = 0; j < g->node[k].nout; j++)
                keep[g->node[k].out[j]] = true;
        }
    for (int s = 0; st == KEEL_STATUS_OK && s < g->nsym; s++)
        if (keel__graph_add_symbol(c, g->sym[s]) < 0)
            st = keel_last_status();
    for (int v = 0; st == KEEL_STATUS_OK && v < g->nval; v++) {
        const struct jit_value *a = &g->val[v];
        map[v] = -1;
        if (!keep[v])
            continue;
        map[v] = keel__graph_add_value(c, a->kind, a->dtype, a->ndim, a->dim);
        if (map[v] < 0) {
            st = keel_last_status();
            break;
        }
        if (a->name && !(c->val[map[v]].name = strdup(a->name)))
            st = oom();
        if (a->data)
            c->val[map[v]].data = keel_tensor_ref(a->data);
    }
    for (int k = 0; st == KEEL_STATUS_OK && k < g->nnode; k++) {
        const struct jit_node *a = &g->node[k];
        int in[KEEL_MAX_OP_INPUTS], o[KEEL_MAX_OP_OUTPUTS];

        if (dead[k])
            continue;
        for (int j = 0; j < a->nin; j++)
            in[j] = map[a->in[j]];
        for (int j = 0; j < a->nout; j++)
            o[j] = map[a->out[j]];
        st = keel__graph_copy_node(c, a, in, o);
        if (st != KEEL_STATUS_OK)
            break;
    }
    for (int i = 0; st == KEEL_STATUS_OK && i < g->nin; i++)
        st = keel__graph_add_input(c, map[g->in[i]]);
    for (int i = 0; st == KEEL_STATUS_OK && i < g->nout; i++)
        st = keel__graph_add_output(c, map[g->out[i]], g->out_name[i]);
    if (st == KEEL_STATUS_OK)
        st = keel__graph_finish(c);
    free(map);
    free(keep);
    if (st != KEEL_STATUS_OK) {
        keel_graph_free(c);
        return st;
    }
    *out = c;
    return KEEL_STATUS_OK;
}

keel_status keel__passes_run(const keel_graph *in, const bool *disabled,
                             keel_dtype precision, keel_graph **out,
                             int *changed, char *log, size_t logsize)
{
    keel_graph *g = NULL;
    struct pass_ctx c = {0};
    keel_status st = keel__graph_clone(in, &g);
    size_t used = 0;

    if (st != KEEL_STATUS_OK)
        return st;
    c.g = g;
    c.precision = precision;
    c.dead = calloc((size_t)(g->nnode ? g->nnode : 1), sizeof(bool));
    if (!c.dead) {
        keel_graph_free(g);
        return oom();
    }
    if (logsize)
        log[0] = 0;
    for (int i = 0; i < keel_inference_num_passes(); i++) {
        changed[i] = 0;
        if (disabled[i])
            continue;
        c.changed = 0;
        st = passes[i].fn(&c);
        if (st != KEEL_STATUS_OK)
            break;
        changed[i] = c.changed;
        if (used < logsize)
            used += (size_t)snprintf(log + used, logsize - used, "%s%s %d",
                                     used ? ", " : "", passes[i].name,
                                     c.changed);
    }
    if (st == KEEL_STATUS_OK)
        st = compact(g, c.dead, out);
    free(c.dead);
    keel_graph_free(g);
    return st;
}
