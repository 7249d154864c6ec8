/*
 * ONNX export and import of graphs (docs/inference.md, "ONNX").
 *
 * Export walks the graph's nodes in order and writes each as one or more
 * default-domain ONNX nodes: most catalog ops have one ONNX op of the same
 * meaning; a few are written as a short exact decomposition (gelu before
 * opset 20, silu, softplus, rsqrt); creation ops are evaluated once and
 * written as initializers; views become Reshape, Transpose, Slice and
 * Expand with constant shape inputs. Anything whose meaning ONNX cannot
 * state exactly is refused with the node and op named, and then nothing
 * is written. The model is built with protobuf-c's structures in an
 * arena, packed once and written atomically.
 *
 * Import reads a ModelProto with protobuf-c after a bounded scan of the
 * wire format (nesting depth, field framing), validates every initializer
 * against its dims and type, and converts the nodes in their (topological)
 * order into catalog ops and views, working out each value's dtype and
 * shape in the graph's dimension symbols (the graph inputs' dim_params).
 * Shape-like inputs (Reshape's shape, Slice's starts, ...) must be
 * constants. The result is an ordinary graph.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io_internal.h"
#include "jit/jit_internal.h"

#ifdef KEEL_NO_ONNX

static keel_status no_onnx(const char *who)
{
    return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: this keel was built without ONNX support; "
                       "install libprotobuf-c-dev protobuf-c-compiler "
                       "libonnx-dev and rebuild",
                       who);
}

keel_status keel_onnx_export(const keel_graph *graph, const char *path,
                             int opset)
{
    return no_onnx("keel_onnx_export");
}

keel_status keel_onnx_import(const char *path, const char *device,
                             keel_graph **out)
{
    if (out)
        *out = NULL;
    return no_onnx("keel_onnx_import");
}

#else /* ONNX support */

#include "onnx.pb-c.h"

/* The default-domain opsets the importer knows (the ops it maps keep
 * their meaning over this range; newer ones are refused). */
#define IMPORT_OPSET_MIN 11
#define IMPORT_OPSET_MAX 23
/* Protobuf messages are at most 2 GiB. */
#define MAX_MODEL_BYTES ((uint64_t)INT32_MAX)
/* Nested messages the importer accepts (a graph needs 6). */
#define MAX_WIRE_DEPTH 32

enum {
    T_FLOAT = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT,
    T_UINT8 = ONNX__TENSOR_PROTO__DATA_TYPE__UINT8,
    T_INT8 = ONNX__TENSOR_PROTO__DATA_TYPE__INT8,
    T_INT32 = ONNX__TENSOR_PROTO__DATA_TYPE__INT32,
    T_INT64 = ONNX__TENSOR_PROTO__DATA_TYPE__INT64,
    T_BOOL = ONNX__TENSOR_PROTO__DATA_TYPE__BOOL,
    T_FLOAT16 = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16,
    T_DOUBLE = ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE,
    T_BFLOAT16 = ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16,
};

static int onnx_type(keel_dtype dt)
{
    switch (dt) {
    case KEEL_F32:
        return T_FLOAT;
    case KEEL_F64:
        return T_DOUBLE;
    case KEEL_F16:
        return T_FLOAT16;
    case KEEL_BF16:
        return T_BFLOAT16;
    case KEEL_I8:
        return T_INT8;
    case KEEL_U8:
        return T_UINT8;
    case KEEL_I32:
        return T_INT32;
    case KEEL_I64:
        return T_INT64;
    case KEEL_BOOL:
        return T_BOOL;
    default:
        return 0;
    }
}

/* The keel dtype of an ONNX element type; false for types keel lacks. */
static bool keel_type(int64_t t, keel_dtype *dt)
{
    static const keel_dtype all[] = {KEEL_F32, KEEL_F64, KEEL_F16,
                                     KEEL_BF16, KEEL_I8,  KEEL_U8,
                                     KEEL_I32, KEEL_I64, KEEL_BOOL};

    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (onnx_type(all[i]) == t) {
            *dt = all[i];
            return true;
        }
    return false;
}

static const char *onnx_type_name(int64_t t)
{
    static const char *const names[] = {
        "UNDEFINED", "FLOAT",  "UINT8",     "INT8",       "UINT16",
        "INT16",     "INT32",  "INT64",     "STRING",     "BOOL",
        "FLOAT16",   "DOUBLE", "UINT32",    "UINT64",     "COMPLEX64",
        "COMPLEX128", "BFLOAT16"};

    if (t >= 0 && t < (int64_t)(sizeof(names) / sizeof(names[0])))
        return names[t];
    return "an unknown type";
}

static bool little_endian(void)
{
    const uint16_t one = 1;
    unsigned char b;

    memcpy(&b, &one, 1);
    return b == 1;
}

static keel_status oom(void)
{
    return keel__error(KEEL_STATUS_OUT_OF_MEMORY, "onnx: out of memory");
}

/* ---- an arena for the messages being built ----------------------------- */

struct arena_blk {
    struct arena_blk *next;
    size_t used, cap;
    max_align_t data[];
};

struct arena {
    struct arena_blk *head;
};

static void *arena_alloc(struct arena *a, size_t n)
{
    struct arena_blk *b = a->head;
    size_t need = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) *
                  sizeof(max_align_t);
    void *p;

    if (need < n)
        return NULL;
    if (!b || b->cap - b->used < need) {
        size_t cap = need > (1u << 16) ? need : (1u << 16);
        if (cap > SIZE_MAX - sizeof(*b))
            return NULL;
        b = malloc(sizeof(*b) + cap);
        if (!b)
            return NULL;
        b->used = 0;
        b->cap = cap;
        /* A big block goes behind the head so the head keeps its room. */
        if (a->head && need > (1u << 16)) {
            b->next = a->head->next;
            a->head->next = b;
        } else {
            b->next = a->head;
            a->head = b;
        }
    }
    p = (unsigned char *)b->data + b->used;
    b->used += need;
    memset(p, 0, n);
    return p;
}

static void arena_free(struct arena *a)
{
    while (a->head) {
        struct arena_blk *n = a->head->next;
        free(a->head);
        a->head = n;
    }
}

/* ======================================================================== */
/* Export                                                                   */
/* ======================================================================== */

#define MAX_NODE_ATTRS 12

struct ex {
    const keel_graph *g;
    int opset;
    keel_status st;
    int node; /* the graph node being written, for messages */
    struct arena a;
    Onnx__NodeProto **nodes;
    size_t nnodes, capnodes;
    Onnx__TensorProto **inits;
    size_t ninits, capinits;
    const char **vname; /* per value: its ONNX name once written */
    const char **set;   /* every name in use: open addressing */
    size_t nset, capset;
    unsigned counter;
    uint64_t bytes; /* initializer bytes so far */
};

static void *ex_alloc(struct ex *e, size_t n)
{
    void *p;

    if (e->st != KEEL_STATUS_OK)
        return NULL;
    p = arena_alloc(&e->a, n ? n : 1);
    if (!p)
        e->st = oom();
    return p;
}

static char *ex_strdup(struct ex *e, const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = ex_alloc(e, n);

    if (d)
        memcpy(d, s, n);
    return d;
}

static uint64_t str_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;

    while (*s)
        h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

static size_t set_slot(const struct ex *e, const char *s)
{
    size_t i = (size_t)str_hash(s) & (e->capset - 1);

    while (e->set[i] && strcmp(e->set[i], s))
        i = (i + 1) & (e->capset - 1);
    return i;
}

static bool name_used(const struct ex *e, const char *s)
{
    return e->capset && e->set[set_slot(e, s)];
}

/* Add s (arena-owned) to the set of names. */
static bool name_add(struct ex *e, const char *s)
{
    if (e->st != KEEL_STATUS_OK)
        return false;
    if ((e->nset + 1) * 2 > e->capset) {
        size_t ncap = e->capset ? e->capset * 2 : 256;
        const char **old = e->set;
        size_t ocap = e->capset;

        e->set = calloc(ncap, sizeof(*e->set));
        if (!e->set) {
            e->set = old;
            e->st = oom();
            return false;
        }
        e->capset = ncap;
        for (size_t i = 0; i < ocap; i++)
            if (old[i])
                e->set[set_slot(e, old[i])] = old[i];
        free(old);
    }
    e->set[set_slot(e, s)] = s;
    e->nset++;
    return true;
}

/* A new unique name: base itself when free, else base.N. */
static const char *fresh(struct ex *e, const char *base)
{
    char buf[160];
    const char *s = base;

    while (name_used(e, s)) {
        snprintf(buf, sizeof(buf), "%.120s.%u", base, e->counter++);
        s = buf;
    }
    s = ex_strdup(e, s);
    if (s && !name_add(e, s))
        return NULL;
    return s;
}

/* A name for an intermediate tensor of a decomposition. */
static const char *tmp(struct ex *e, const char *what)
{
    char buf[96];

    snprintf(buf, sizeof(buf), "%.60s.%u", what, e->counter++);
    return fresh(e, buf);
}

static bool push(struct ex *e, void ***arr, size_t *n, size_t *cap, void *p)
{
    if (e->st != KEEL_STATUS_OK)
        return false;
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        void *q = realloc(*arr, nc * sizeof(void *));
        if (!q) {
            e->st = oom();
            return false;
        }
        *arr = q;
        *cap = nc;
    }
    (*arr)[(*n)++] = p;
    return true;
}

static keel_status refuse(struct ex *e, const char *fmt, ...)
    KEEL_PRINTF(2, 3);
static keel_status refuse(struct ex *e, const char *fmt, ...)
{
    char msg[400];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    e->st = keel__error(KEEL_STATUS_NOT_SUPPORTED,
                        "keel_onnx_export: node %d (%s): %s; nothing was "
                        "written",
                        e->node, keel_graph_node_op(e->g, e->node), msg);
    return e->st;
}

/* ---- nodes, attributes, initializers ------------------------------------ */

static Onnx__NodeProto *emit(struct ex *e, const char *op, int nin,
                             const char *const *in, int nout,
                             const char *const *out)
{
    Onnx__NodeProto *n = ex_alloc(e, sizeof(*n));

    if (!n)
        return NULL;
    onnx__node_proto__init(n);
    n->op_type = (char *)op;
    n->input = ex_alloc(e, sizeof(char *) * (size_t)(nin ? nin : 1));
    n->output = ex_alloc(e, sizeof(char *) * (size_t)(nout ? nout : 1));
    n->attribute = ex_alloc(e, sizeof(*n->attribute) * MAX_NODE_ATTRS);
    if (!n->input || !n->output || !n->attribute)
        return NULL;
    for (int i = 0; i < nin; i++) {
        if (!in[i])
            return NULL; /* a failed step before: e->st says why */
        n->input[i] = (char *)in[i];
    }
    for (int i = 0; i < nout; i++) {
        if (!out[i])
            return NULL;
        n->output[i] = (char *)out[i];
    }
    n->n_input = (size_t)nin;
    n->n_output = (size_t)nout;
    if (!push(e, (void ***)&e->nodes, &e->nnodes, &e->capnodes, n))
        return NULL;
    return n;
}

static Onnx__AttributeProto *attr_new(struct ex *e, Onnx__NodeProto *n,
                                      const char *name,
                                      Onnx__AttributeProto__AttributeType t)
{
    Onnx__AttributeProto *a;

    if (!n || n->n_attribute >= MAX_NODE_ATTRS)
        return NULL;
    a = ex_alloc(e, sizeof(*a));
    if (!a)
        return NULL;
    onnx__attribute_proto__init(a);
    a->name = (char *)name;
    a->has_type = 1;
    a->type = t;
    n->attribute[n->n_attribute++] = a;
    return a;
}

static void attr_i(struct ex *e, Onnx__NodeProto *n, const char *name,
                   int64_t v)
{
    Onnx__AttributeProto *a =
        attr_new(e, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);

    if (a) {
        a->has_i = 1;
        a->i = v;
    }
}

static void attr_f(struct ex *e, Onnx__NodeProto *n, const char *name,
                   double v)
{
    Onnx__AttributeProto *a =
        attr_new(e, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);

    if (a) {
        a->has_f = 1;
        a->f = (float)v;
    }
}

static void attr_s(struct ex *e, Onnx__NodeProto *n, const char *name,
                   const char *s)
{
    Onnx__AttributeProto *a =
        attr_new(e, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);

    if (a) {
        a->has_s = 1;
        a->s.data = (uint8_t *)s;
        a->s.len = strlen(s);
    }
}

static void attr_is(struct ex *e, Onnx__NodeProto *n, const char *name,
                    const int64_t *v, int count)
{
    Onnx__AttributeProto *a =
        attr_new(e, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    int64_t *c;

    if (!a)
        return;
    c = ex_alloc(e, sizeof(int64_t) * (size_t)(count ? count : 1));
    if (!c)
        return;
    if (count)
        memcpy(c, v, sizeof(int64_t) * (size_t)count);
    a->ints = c;
    a->n_ints = (size_t)count;
}

static Onnx__TensorProto *tensor_new(struct ex *e, const char *name,
                                     keel_dtype dt, int ndim,
                                     const int64_t *dims, const void *data,
                                     size_t bytes)
{
    Onnx__TensorProto *t = ex_alloc(e, sizeof(*t));
    int64_t *d = ex_alloc(e, sizeof(int64_t) * (size_t)(ndim ? ndim : 1));
    uint8_t *raw = ex_alloc(e, bytes);

    if (!t || !d || !raw)
        return NULL;
    onnx__tensor_proto__init(t);
    t->name = (char *)name;
    t->has_data_type = 1;
    t->data_type = onnx_type(dt);
    if (ndim)
        memcpy(d, dims, sizeof(int64_t) * (size_t)ndim);
    t->dims = d;
    t->n_dims = (size_t)ndim;
    if (bytes)
        memcpy(raw, data, bytes);
    t->has_raw_data = 1;
    t->raw_data.data = raw;
    t->raw_data.len = bytes;
    return t;
}

/* An initializer; its name (fresh from `base`) or NULL. */
static const char *init_add(struct ex *e, const char *base, keel_dtype dt,
                            int ndim, const int64_t *dims, const void *data,
                            size_t bytes)
{
    const char *name = fresh(e, base);
    Onnx__TensorProto *t = name ? tensor_new(e, name, dt, ndim, dims, data,
                                             bytes)
                                : NULL;

    if (!t || !push(e, (void ***)&e->inits, &e->ninits, &e->capinits, t))
        return NULL;
    e->bytes += bytes;
    return name;
}

static const char *init_i64(struct ex *e, const int64_t *v, int n)
{
    int64_t d = n;
    char base[32];

    snprintf(base, sizeof(base), "const.%u", e->counter++);
    return init_add(e, base, KEEL_I64, 1, &d, v, sizeof(int64_t) * (size_t)n);
}

static const char *init_i64_scalar(struct ex *e, int64_t v)
{
    char base[32];

    snprintf(base, sizeof(base), "const.%u", e->counter++);
    return init_add(e, base, KEEL_I64, 0, NULL, &v, sizeof(v));
}

/* A 0-d initializer of dtype dt holding v, converted as keel's full op
 * converts it. */
static const char *init_scalar(struct ex *e, keel_dtype dt, double v)
{
    unsigned char buf[8];
    keel_tensor *t = NULL;
    char base[32];
    keel_status st;

    if (e->st != KEEL_STATUS_OK)
        return NULL;
    st = keel_full(0, NULL, dt, v, NULL, &t);
    if (st == KEEL_STATUS_OK)
        st = keel_tensor_to_host(t, buf, keel_dtype_size(dt));
    keel_tensor_free(t);
    if (st != KEEL_STATUS_OK) {
        e->st = st;
        return NULL;
    }
    snprintf(base, sizeof(base), "const.%u", e->counter++);
    return init_add(e, base, dt, 0, NULL, buf, keel_dtype_size(dt));
}

/* Node helpers: one or two inputs, one new output named after `what`. */
static const char *op1(struct ex *e, const char *op, const char *a)
{
    const char *o = tmp(e, op);
    return emit(e, op, 1, &a, 1, &o) ? o : NULL;
}

static const char *op2(struct ex *e, const char *op, const char *a,
                       const char *b)
{
    const char *o = tmp(e, op);
    const char *in[2] = {a, b};
    return emit(e, op, 2, in, 1, &o) ? o : NULL;
}

/* x as dtype `to` (a Cast when it is another). */
static const char *as_dtype(struct ex *e, const char *x, keel_dtype from,
                            keel_dtype to)
{
    const char *o;
    Onnx__NodeProto *n;

    if (from == to || !x)
        return x;
    o = tmp(e, "Cast");
    n = emit(e, "Cast", 1, &x, 1, &o);
    attr_i(e, n, "to", onnx_type(to));
    return n ? o : NULL;
}

/* ---- one graph node ------------------------------------------------------ */

/* The node's attribute k (the catalog's spec order). */
static const keel_attr *kattr(const struct jit_node *nd, const char *name)
{
    const struct keel_op_def *d = keel__op_def(nd->op);

    for (int k = 0; k < d->nattrs && k < nd->nattrs; k++)
        if (!strcmp(d->attrs[k].name, name))
            return &nd->attrs[k];
    return NULL;
}

static int64_t kattr_i(const struct jit_node *nd, const char *name)
{
    const keel_attr *a = kattr(nd, name);
    return a ? a->v.i : 0;
}

static double kattr_f(const struct jit_node *nd, const char *name)
{
    const keel_attr *a = kattr(nd, name);
    return a ? a->v.f : 0;
}

static const char *kattr_s(const struct jit_node *nd, const char *name)
{
    const keel_attr *a = kattr(nd, name);
    return a && a->v.s ? a->v.s : "";
}

/* The node's output value j's ONNX name (named on first use). */
static const char *out_name(struct ex *e, const struct jit_node *nd, int j)
{
    int v = nd->out[j];
    char base[80];

    if (!e->vname[v]) {
        snprintf(base, sizeof(base), "%s.%d",
                 keel_graph_node_op(e->g, e->node), v);
        e->vname[v] = fresh(e, base);
    }
    return e->vname[v];
}

static bool used(const struct ex *e, int value)
{
    return e->g->last_use[value] >= 0;
}

static bool dim_static(const struct jit_value *v, int d, int64_t *n)
{
    if (d < 0 || d >= v->ndim || v->dim[d].sym != JIT_STATIC)
        return false;
    *n = v->dim[d].mul;
    return true;
}

/* 1 or 2 values (h, w) from an ints attribute; empty gives `dflt`. */
static bool pair2(const keel_attr *a, const int64_t *dflt, int64_t out[2])
{
    int64_t n = a ? a->v.ints.count : 0;

    if (n == 0 && dflt) {
        out[0] = dflt[0];
        out[1] = dflt[1];
        return true;
    }
    if (n != 1 && n != 2)
        return false;
    out[0] = a->v.ints.data[0];
    out[1] = a->v.ints.data[n - 1];
    return true;
}

/* keel's padding (1 value, (h, w) or (top, bottom, left, right)) as
 * ONNX pads (top, left, bottom, right). */
static bool pads4(const keel_attr *a, int64_t p[4])
{
    const int64_t *v = a ? a->v.ints.data : NULL;

    switch (a ? a->v.ints.count : 0) {
    case 1:
        p[0] = p[1] = p[2] = p[3] = v[0];
        return true;
    case 2:
        p[0] = p[2] = v[0];
        p[1] = p[3] = v[1];
        return true;
    case 4:
        p[0] = v[0];
        p[1] = v[2];
        p[2] = v[1];
        p[3] = v[3];
        return true;
    default:
        return false;
    }
}

/* Whether a pooling's ceil_mode can be written: 0 (no window differs
 * from floor mode: write 0), 1 (write 1: the extra windows start inside
 * the input, so ONNX's and keel's rules agree), -1 (refuse). */
static int pool_ceil(const struct jit_value *x, const int64_t k[2],
                     const int64_t s[2], const int64_t p[4], bool inclusive)
{
    int need = 0;

    for (int a = 0; a < 2; a++) {
        int64_t h, lo = p[a], hi = p[a + 2], fl, ce;

        if (!dim_static(x, 2 + a, &h))
            return -1;
        fl = (h + lo + hi - k[a]) / s[a] + 1;
        ce = (h + lo + hi - k[a] + s[a] - 1) / s[a] + 1;
        if (fl == ce)
            continue;
        if ((ce - 1) * s[a] >= h + lo || inclusive)
            return -1;
        need = 1;
    }
    return need;
}

enum red_kind { RED_SUM, RED_MEAN, RED_MAX, RED_MIN, RED_PROD, RED_LSE };

/* A reduction over keel's `axis` (empty: all). The axes are an input for
 * ReduceSum, and for the others from opset 18. */
static const char *reduce(struct ex *e, enum red_kind k, const char *x,
                          int ndim, const keel_attr *axis, bool keepdim,
                          const char *out)
{
    static const char *const names[] = {"ReduceSum",  "ReduceMean",
                                        "ReduceMax",  "ReduceMin",
                                        "ReduceProd", "ReduceLogSumExp"};
    const char *op = names[k];
    int64_t n = axis ? axis->v.ints.count : 0;
    bool as_input = k == RED_SUM || e->opset >= 18;
    const char *in[2] = {x, NULL};
    const char *o = out ? out : tmp(e, op);
    Onnx__NodeProto *nd;

    if (ndim == 0)
        return emit(e, "Identity", 1, in, 1, &o) ? o : NULL;
    if (n && as_input)
        in[1] = init_i64(e, axis->v.ints.data, (int)n);
    nd = emit(e, op, n && as_input ? 2 : 1, in, 1, &o);
    if (n && !as_input)
        attr_is(e, nd, "axes", axis->v.ints.data, (int)n);
    attr_i(e, nd, "keepdims", keepdim);
    return nd ? o : NULL;
}

/* The number of elements the reduction over `axis` takes, when static. */
static bool reduced_count(const struct jit_value *x, const keel_attr *axis,
                          int64_t *count)
{
    bool red[KEEL_MAX_DIMS] = {false};
    int64_t c = 1, d;

    for (int64_t i = 0; axis && i < axis->v.ints.count; i++) {
        int a = keel__axis(axis->v.ints.data[i], x->ndim);
        if (a < 0)
            return false;
        red[a] = true;
    }
    for (int i = 0; i < x->ndim; i++) {
        if (!(red[i] || !axis || axis->v.ints.count == 0))
            continue;
        if (!dim_static(x, i, &d) || __builtin_mul_overflow(c, d, &c))
            return false;
    }
    *count = c;
    return true;
}

/* A creation op, evaluated once by keel itself and written as an
 * initializer (or a ConstantOfShape for a large `full`). */
static keel_status write_creation(struct ex *e, const struct jit_node *nd)
{
    const struct keel_op_def *d = keel__op_def(nd->op);
    const struct jit_value *v = &e->g->val[nd->out[0]];
    keel_attr attrs[KEEL_MAX_OP_ATTRS];
    keel_tensor *t = NULL;
    const char *name;
    void *buf = NULL;
    size_t bytes;
    int64_t numel = 1, dims[KEEL_MAX_DIMS], one = 1;
    int got = 0, shape_k = -1;
    keel_status st;

    for (int k = 0; k < nd->nattrs; k++) {
        attrs[k] = nd->attrs[k];
        attrs[k].name = d->attrs[k].name;
        if (!strcmp(d->attrs[k].name, "shape"))
            shape_k = k;
    }
    for (int i = 0; i < v->ndim; i++) {
        if (!dim_static(v, i, &dims[i]))
            return refuse(e, "a creation op with a dynamic shape");
        numel *= dims[i];
    }
    name = out_name(e, nd, 0);
    if (!name)
        return e->st;
    if (nd->op == KEEL_OP_FULL && numel > 64 && shape_k >= 0 &&
        (v->dtype != KEEL_BF16 || e->opset >= 20)) {
        /* ConstantOfShape with the value keel's full makes. */
        attrs[shape_k].v.ints.data = &one;
        attrs[shape_k].v.ints.count = 1;
    }
    st = keel_op_run(nd->op, NULL, 0, attrs, nd->nattrs, &t, 1, &got);
    if (st != KEEL_STATUS_OK)
        return e->st = st;
    bytes = (size_t)keel_tensor_numel(t) * keel_dtype_size(t->dtype);
    buf = malloc(bytes ? bytes : 1);
    if (!buf) {
        keel_tensor_free(t);
        return e->st = oom();
    }
    st = keel_tensor_to_host(t, buf, bytes);
    if (st != KEEL_STATUS_OK) {
        e->st = st;
    } else if (keel_tensor_numel(t) != numel) {
        /* ConstantOfShape: shape input, value attribute. */
        const char *shape = init_i64(e, dims, v->ndim);
        Onnx__NodeProto *n = emit(e, "ConstantOfShape", 1, &shape, 1, &name);
        Onnx__TensorProto *val = tensor_new(e, NULL, v->dtype, 1, &one, buf,
                                            bytes);
        Onnx__AttributeProto *a = attr_new(
            e, n, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
        if (a)
            a->t = val;
    } else {
        /* The initializer takes the output's name: drop the fresh one. */
        Onnx__TensorProto *it = tensor_new(e, name, v->dtype, v->ndim, dims,
                                           buf, bytes);
        if (it && push(e, (void ***)&e->inits, &e->ninits, &e->capinits, it))
            e->bytes += bytes;
    }
    free(buf);
    keel_tensor_free(t);
    return e->st;
}

/* gelu before opset 20: exact x * 0.5 * (1 + erf(x / sqrt 2)), or the
 * tanh form when approximate. */
static void write_gelu(struct ex *e, const char *x, keel_dtype dt,
                       bool approx, const char *y)
{
    const char *t, *in[2];

    if (e->opset >= 20) {
        Onnx__NodeProto *n = emit(e, "Gelu", 1, &x, 1, &y);
        attr_s(e, n, "approximate", approx ? "tanh" : "none");
        return;
    }
    if (!approx) {
        t = op2(e, "Div", x, init_scalar(e, dt, sqrt(2.0)));
        t = op1(e, "Erf", t);
    } else {
        const char *x3 = op2(e, "Mul", op2(e, "Mul", x, x), x);
        t = op2(e, "Add", x, op2(e, "Mul", x3, init_scalar(e, dt, 0.044715)));
        t = op2(e, "Mul", t, init_scalar(e, dt, sqrt(2.0 / M_PI)));
        t = op1(e, "Tanh", t);
    }
    t = op2(e, "Add", t, init_scalar(e, dt, 1.0));
    in[0] = op2(e, "Mul", x, init_scalar(e, dt, 0.5));
    in[1] = t;
    emit(e, "Mul", 2, in, 1, &y);
}

/* keel.reshape: a Reshape with a constant shape. A dimension that is the
 * input's at the same position (in the symbols) is written 0 (copy); one
 * other dynamic dimension may be -1. */
static keel_status write_reshape(struct ex *e, const struct jit_node *nd,
                                 const char *x, const char *y)
{
    const struct jit_value *in = &e->g->val[nd->in[0]];
    int64_t shape[KEEL_MAX_DIMS];
    int infer = 0, copy = 0, zero = 0;
    const char *ins[2];
    Onnx__NodeProto *n;

    for (int i = 0; i < nd->np; i++) {
        struct jit_dim d = nd->pd[i];

        if (d.sym == JIT_STATIC && d.mul >= 0) {
            shape[i] = d.mul;
            zero += d.mul == 0;
        } else if (d.sym >= 0 && i < in->ndim && in->dim[i].sym == d.sym &&
                   in->dim[i].mul == d.mul) {
            shape[i] = 0;
            copy++;
        } else {
            shape[i] = -1;
            infer++;
        }
    }
    if (infer > 1)
        return refuse(e, "the new shape has %d dimensions that are neither "
                         "static nor the input's at the same position; "
                         "ONNX's Reshape can infer one",
                      infer);
    if (zero && copy)
        return refuse(e, "the new shape has an empty dimension and copies "
                         "another from the input, which one ONNX Reshape "
                         "cannot say");
    ins[0] = x;
    ins[1] = init_i64(e, shape, nd->np);
    n = emit(e, "Reshape", 2, ins, 1, &y);
    if (zero)
        attr_i(e, n, "allowzero", 1);
    return e->st;
}

/* keel.expand: Expand to a constant shape, 1 where the output keeps the
 * input's size. */
static keel_status write_expand(struct ex *e, const struct jit_node *nd,
                                const char *x, const char *y)
{
    const struct jit_value *in = &e->g->val[nd->in[0]];
    int64_t shape[KEEL_MAX_DIMS];
    const char *ins[2];

    for (int i = 0; i < nd->np; i++) {
        struct jit_dim d = nd->pd[i];
        int j = i - (nd->np - in->ndim);
        bool same = j >= 0 && in->dim[j].sym == d.sym &&
                    in->dim[j].mul == d.mul && d.sym != JIT_ANY;

        if (d.sym == JIT_ANY || (same && d.sym != JIT_STATIC))
            shape[i] = 1;
        else if (d.sym == JIT_STATIC && d.mul >= 0)
            shape[i] = d.mul;
        else
            return refuse(e, "dimension %d of the new shape is dynamic and "
                             "not the input's",
                          i);
    }
    ins[0] = x;
    ins[1] = init_i64(e, shape, nd->np);
    emit(e, "Expand", 2, ins, 1, &y);
    return e->st;
}

static keel_status write_view(struct ex *e, const struct jit_node *nd)
{
    const char *x = e->vname[nd->in[0]], *y = out_name(e, nd, 0);
    const char *ins[5];
    Onnx__NodeProto *n;

    switch (nd->kind) {
    case JIT_RESHAPE:
        return write_reshape(e, nd, x, y);
    case JIT_EXPAND:
        return write_expand(e, nd, x, y);
    case JIT_PERMUTE:
        n = emit(e, "Transpose", 1, &x, 1, &y);
        attr_is(e, n, "perm", nd->p, nd->np);
        return e->st;
    case JIT_SLICE: {
        /* Python and ONNX clamp alike, except a start before the first
         * element with a negative step (Python: empty; ONNX: from 0);
         * -1 is the last element of any non-empty axis. */
        const struct jit_value *in = &e->g->val[nd->in[0]];
        int64_t len;

        if (nd->p[3] < 0 && nd->p[1] < -1 &&
            (!dim_static(in, (int)nd->p[0], &len) || nd->p[1] < -len))
            return refuse(e, "a reversed slice whose start may lie before "
                             "the first element");
        ins[0] = x;
        ins[1] = init_i64(e, &nd->p[1], 1);
        ins[2] = init_i64(e, &nd->p[2], 1);
        ins[3] = init_i64(e, &nd->p[0], 1);
        ins[4] = init_i64(e, &nd->p[3], 1);
        emit(e, "Slice", 5, ins, 1, &y);
        return e->st;
    }
    case JIT_OP:
        break;
    }
    return e->st = keel__error(KEEL_STATUS_INTERNAL, "onnx: bad view");
}

/* Ops that are one ONNX op on inputs cast to the output's dtype. */
static const char *simple_op(keel_op_id op)
{
    switch (op) {
    case KEEL_OP_ADD:
        return "Add";
    case KEEL_OP_SUBTRACT:
        return "Sub";
    case KEEL_OP_MULTIPLY:
        return "Mul";
    case KEEL_OP_DIVIDE:
        return "Div";
    case KEEL_OP_POW:
        return "Pow";
    case KEEL_OP_MAXIMUM:
        return "Max";
    case KEEL_OP_MINIMUM:
        return "Min";
    case KEEL_OP_NEG:
        return "Neg";
    case KEEL_OP_ABS:
        return "Abs";
    case KEEL_OP_SIGN:
        return "Sign";
    case KEEL_OP_EXP:
        return "Exp";
    case KEEL_OP_LOG:
        return "Log";
    case KEEL_OP_SQRT:
        return "Sqrt";
    case KEEL_OP_SIN:
        return "Sin";
    case KEEL_OP_COS:
        return "Cos";
    case KEEL_OP_FLOOR:
        return "Floor";
    case KEEL_OP_CEIL:
        return "Ceil";
    case KEEL_OP_RELU:
        return "Relu";
    case KEEL_OP_SIGMOID:
        return "Sigmoid";
    case KEEL_OP_TANH:
        return "Tanh";
    case KEEL_OP_HARDSWISH:
        return "HardSwish";
    case KEEL_OP_COPY:
        return "Identity";
    case KEEL_OP_CONCAT:
        return "Concat";
    default:
        return NULL;
    }
}

static const char *compare_op(keel_op_id op, bool *negate)
{
    *negate = false;
    switch (op) {
    case KEEL_OP_EQUAL:
        return "Equal";
    case KEEL_OP_NOT_EQUAL:
        *negate = true;
        return "Equal";
    case KEEL_OP_LESS:
        return "Less";
    case KEEL_OP_LESS_EQUAL:
        return "LessOrEqual";
    case KEEL_OP_GREATER:
        return "Greater";
    case KEEL_OP_GREATER_EQUAL:
        return "GreaterOrEqual";
    case KEEL_OP_LOGICAL_AND:
        return "And";
    case KEEL_OP_LOGICAL_OR:
        return "Or";
    case KEEL_OP_LOGICAL_XOR:
        return "Xor";
    case KEEL_OP_LOGICAL_NOT:
        return "Not";
    default:
        return NULL;
    }
}

/* Refuse when one of outputs [from, nout) is read by anything. */
static bool extra_outputs_used(struct ex *e, const struct jit_node *nd,
                               int from, const char *what)
{
    for (int j = from; j < nd->nout; j++)
        if (used(e, nd->out[j])) {
            refuse(e, "its %s output is used, which ONNX's op does not "
                      "make",
                   what);
            return true;
        }
    return false;
}

static keel_status write_pool(struct ex *e, const struct jit_node *nd,
                              const char *x, const char *y)
{
    const struct jit_value *xv = &e->g->val[nd->in[0]];
    bool avg = nd->op == KEEL_OP_AVG_POOL2D;
    bool inclusive = avg && !kattr_i(nd, "exclusive");
    int64_t k[2], s[2], p[4];
    Onnx__NodeProto *n;
    int ceil;

    if (!avg && extra_outputs_used(e, nd, 1, "indices"))
        return e->st;
    if (!pair2(kattr(nd, "kernel_size"), NULL, k) ||
        !pair2(kattr(nd, "stride"), k, s) || !pads4(kattr(nd, "padding"), p))
        return refuse(e, "kernel_size, stride or padding has a count keel "
                         "does not take");
    for (int i = 0; i < 4; i++)
        if (p[i] >= k[i % 2])
            return refuse(e, "padding %" PRId64 " is not smaller than the "
                             "window (%" PRId64 "): windows all in padding",
                          p[i], k[i % 2]);
    ceil = kattr_i(nd, "ceil_mode") ? pool_ceil(xv, k, s, p, inclusive) : 0;
    if (ceil < 0)
        return refuse(e, "ceil_mode with %s: the last windows' rules "
                         "differ between keel and ONNX",
                      inclusive ? "padding counted in the divisor"
                                : "a dynamic or window-skipping size");
    n = emit(e, avg ? "AveragePool" : "MaxPool", 1, &x, 1, &y);
    attr_is(e, n, "kernel_shape", k, 2);
    attr_is(e, n, "strides", s, 2);
    attr_is(e, n, "pads", p, 4);
    attr_i(e, n, "ceil_mode", ceil);
    if (avg)
        attr_i(e, n, "count_include_pad", inclusive);
    return e->st;
}

static keel_status write_conv(struct ex *e, const struct jit_node *nd,
                              const char *const *in, const char *y)
{
    bool tr = nd->op == KEEL_OP_CONV2D_TRANSPOSE;
    const char *alg = kattr_s(nd, "padding_algorithm");
    int64_t s[2], d[2], p[4] = {0}, op[2];
    static const int64_t ones[2] = {1, 1}, zeros[2] = {0, 0};
    Onnx__NodeProto *n;

    if (!pair2(kattr(nd, "stride"), ones, s) ||
        !pair2(kattr(nd, "dilation"), ones, d))
        return refuse(e, "stride or dilation has a count keel does not "
                         "take");
    if (!strcmp(alg, "EXPLICIT")) {
        if (!pads4(kattr(nd, "padding"), p))
            return refuse(e, "padding has a count keel does not take");
    } else if (strcmp(alg, "VALID") && (strcmp(alg, "SAME") || tr)) {
        return refuse(e, "padding_algorithm %s has no exact ONNX form%s",
                      alg, tr ? " for a transposed convolution" : "");
    }
    n = emit(e, tr ? "ConvTranspose" : "Conv", nd->nin, in, 1, &y);
    attr_is(e, n, "strides", s, 2);
    attr_is(e, n, "dilations", d, 2);
    attr_i(e, n, "group", kattr_i(nd, "groups"));
    if (!strcmp(alg, "SAME"))
        attr_s(e, n, "auto_pad", "SAME_UPPER");
    else
        attr_is(e, n, "pads", p, 4);
    if (tr) {
        if (!pair2(kattr(nd, "output_padding"), zeros, op))
            return refuse(e, "output_padding has a count keel does not "
                             "take");
        attr_is(e, n, "output_padding", op, 2);
    }
    return e->st;
}

static keel_status write_layer_norm(struct ex *e, const struct jit_node *nd,
                                    const char *const *in, const char *y)
{
    const struct jit_value *x = &e->g->val[nd->in[0]];
    int b = keel__axis(kattr_i(nd, "begin_norm_axis"), x->ndim);
    int64_t dims[KEEL_MAX_DIMS], numel = 1;
    const char *ins[3] = {in[0], NULL, NULL};
    Onnx__NodeProto *n;
    int nin = 2;

    if (extra_outputs_used(e, nd, 1, "mean or invstd"))
        return e->st;
    if (b < 0)
        return refuse(e, "begin_norm_axis out of range");
    for (int i = b; i < x->ndim; i++) {
        if (!dim_static(x, i, &dims[i - b]))
            return refuse(e, "the normalised dimensions are dynamic");
        numel *= dims[i - b];
    }
    for (int j = 1; j < nd->nin; j++) {
        const struct jit_value *p = &e->g->val[nd->in[j]];

        if (p->dtype != x->dtype)
            return refuse(e, "a %s scale or bias for a %s input (ONNX's "
                             "LayerNormalization takes one type)",
                          keel_dtype_name(p->dtype),
                          keel_dtype_name(x->dtype));
        ins[j] = in[j];
        if (p->ndim != x->ndim - b) {
            const char *sh = init_i64(e, dims, x->ndim - b);
            ins[j] = op2(e, "Reshape", in[j], sh);
        }
        nin = j + 1;
    }
    if (nd->nin < 2) {
        /* No scale: ones. */
        keel_tensor *t = NULL;
        size_t bytes = (size_t)numel * keel_dtype_size(x->dtype);
        void *buf = malloc(bytes ? bytes : 1);
        keel_status st = buf ? keel_ones(x->ndim - b, dims, x->dtype, NULL,
                                         &t)
                             : oom();

        if (st == KEEL_STATUS_OK)
            st = keel_tensor_to_host(t, buf, bytes);
        if (st == KEEL_STATUS_OK)
            ins[1] = init_add(e, "layer_norm.scale", x->dtype, x->ndim - b,
                              dims, buf, bytes);
        else
            e->st = st;
        keel_tensor_free(t);
        free(buf);
    }
    n = emit(e, "LayerNormalization", nin, ins, 1, &y);
    attr_i(e, n, "axis", b);
    attr_f(e, n, "epsilon", kattr_f(nd, "epsilon"));
    return e->st;
}

static keel_status write_op(struct ex *e, const struct jit_node *nd)
{
    const keel_graph *g = e->g;
    const struct jit_value *x = nd->nin ? &g->val[nd->in[0]] : NULL;
    keel_dtype ydt = g->val[nd->out[0]].dtype;
    const char *in[KEEL_MAX_OP_INPUTS], *y, *t, *name;
    Onnx__NodeProto *n;
    bool negate;

    for (int i = 0; i < nd->nin; i++)
        in[i] = e->vname[nd->in[i]];
    if (keel_op_get_info(nd->op)->num_outputs == 0)
        return refuse(e, "an op that updates its inputs in place");
    y = out_name(e, nd, 0);
    if ((name = simple_op(nd->op))) {
        for (int i = 0; i < nd->nin; i++)
            in[i] = as_dtype(e, in[i], g->val[nd->in[i]].dtype, ydt);
        n = emit(e, name, nd->nin, in, 1, &y);
        if (nd->op == KEEL_OP_CONCAT)
            attr_i(e, n, "axis", kattr_i(nd, "axis"));
        return e->st;
    }
    if ((name = compare_op(nd->op, &negate))) {
        keel_dtype want = x->dtype;
        bool logical = !strcmp(name, "And") || !strcmp(name, "Or") ||
                       !strcmp(name, "Xor") || !strcmp(name, "Not");

        if (logical)
            want = KEEL_BOOL;
        else if (nd->nin == 2 && g->val[nd->in[1]].dtype != x->dtype)
            want = KEEL_F32; /* float16 with bfloat16 */
        for (int i = 0; i < nd->nin; i++)
            in[i] = as_dtype(e, in[i], g->val[nd->in[i]].dtype, want);
        if (negate) {
            t = op2(e, name, in[0], in[1]);
            emit(e, "Not", 1, &t, 1, &y);
        } else {
            emit(e, name, nd->nin, in, 1, &y);
        }
        return e->st;
    }
    switch (nd->op) {
    case KEEL_OP_FLOOR_DIVIDE:
    case KEEL_OP_REMAINDER:
        in[0] = as_dtype(e, in[0], x->dtype, ydt);
        in[1] = as_dtype(e, in[1], g->val[nd->in[1]].dtype, ydt);
        if (!keel__dtype_is_float(ydt)) {
            if (nd->op == KEEL_OP_FLOOR_DIVIDE)
                return refuse(e, "integer floor division (ONNX's Div "
                                 "truncates)");
            n = emit(e, "Mod", 2, in, 1, &y);
            attr_i(e, n, "fmod", 0);
            return e->st;
        }
        t = op1(e, "Floor", op2(e, "Div", in[0], in[1]));
        if (nd->op == KEEL_OP_FLOOR_DIVIDE) {
            emit(e, "Identity", 1, &t, 1, &y);
        } else {
            const char *ins[2] = {in[0], op2(e, "Mul", t, in[1])};
            emit(e, "Sub", 2, ins, 1, &y);
        }
        return e->st;
    case KEEL_OP_WHERE:
        in[0] = as_dtype(e, in[0], x->dtype, KEEL_BOOL);
        in[1] = as_dtype(e, in[1], g->val[nd->in[1]].dtype, ydt);
        in[2] = as_dtype(e, in[2], g->val[nd->in[2]].dtype, ydt);
        emit(e, "Where", 3, in, 1, &y);
        return e->st;
    case KEEL_OP_RSQRT:
        t = op1(e, "Sqrt", in[0]);
        emit(e, "Reciprocal", 1, &t, 1, &y);
        return e->st;
    case KEEL_OP_SQUARE: {
        const char *ins[2] = {in[0], in[0]};
        emit(e, "Mul", 2, ins, 1, &y);
        return e->st;
    }
    case KEEL_OP_RELU6: {
        const char *ins[3] = {in[0], init_scalar(e, ydt, 0),
                              init_scalar(e, ydt, 6)};
        emit(e, "Clip", 3, ins, 1, &y);
        return e->st;
    }
    case KEEL_OP_LEAKY_RELU:
        n = emit(e, "LeakyRelu", 1, in, 1, &y);
        attr_f(e, n, "alpha", kattr_f(nd, "negative_slope"));
        return e->st;
    case KEEL_OP_ELU:
        n = emit(e, "Elu", 1, in, 1, &y);
        attr_f(e, n, "alpha", kattr_f(nd, "alpha"));
        return e->st;
    case KEEL_OP_GELU:
        write_gelu(e, in[0], ydt, kattr_i(nd, "approximate"), y);
        return e->st;
    case KEEL_OP_SILU: {
        const char *ins[2] = {in[0], op1(e, "Sigmoid", in[0])};
        emit(e, "Mul", 2, ins, 1, &y);
        return e->st;
    }
    case KEEL_OP_SOFTPLUS: {
        /* x where beta*x > threshold, else Softplus(beta*x) / beta. */
        double beta = kattr_f(nd, "beta"), th = kattr_f(nd, "threshold");
        const char *bx = in[0], *sp, *ins[3];

        if (beta != 1.0)
            bx = op2(e, "Mul", in[0], init_scalar(e, ydt, beta));
        sp = op1(e, "Softplus", bx);
        if (beta != 1.0)
            sp = op2(e, "Div", sp, init_scalar(e, ydt, beta));
        ins[0] = op2(e, "Greater", bx, init_scalar(e, ydt, th));
        ins[1] = in[0];
        ins[2] = sp;
        emit(e, "Where", 3, ins, 1, &y);
        return e->st;
    }
    case KEEL_OP_CLIP: {
        double lo = kattr_f(nd, "min"), hi = kattr_f(nd, "max");
        const char *ins[3] = {in[0], "", ""};

        if (!keel__dtype_is_float(ydt) &&
            ((isfinite(lo) && lo != floor(lo)) ||
             (isfinite(hi) && hi != floor(hi))))
            return refuse(e, "fractional bounds on integers");
        if (isfinite(lo))
            ins[1] = init_scalar(e, ydt, lo);
        if (isfinite(hi))
            ins[2] = init_scalar(e, ydt, hi);
        emit(e, "Clip", isfinite(hi) ? 3 : isfinite(lo) ? 2 : 1, ins, 1, &y);
        return e->st;
    }
    case KEEL_OP_CAST:
        n = emit(e, "Cast", 1, in, 1, &y);
        attr_i(e, n, "to", onnx_type(ydt));
        return e->st;
    case KEEL_OP_FULL:
    case KEEL_OP_ARANGE:
    case KEEL_OP_LINSPACE:
    case KEEL_OP_EYE:
    case KEEL_OP_UNIFORM:
    case KEEL_OP_NORMAL:
    case KEEL_OP_RANDINT:
        return write_creation(e, nd);
    case KEEL_OP_SUM:
    case KEEL_OP_MEAN:
    case KEEL_OP_MAX:
    case KEEL_OP_MIN:
    case KEEL_OP_PROD:
    case KEEL_OP_LOGSUMEXP: {
        enum red_kind k = nd->op == KEEL_OP_SUM    ? RED_SUM
                          : nd->op == KEEL_OP_MEAN ? RED_MEAN
                          : nd->op == KEEL_OP_MAX  ? RED_MAX
                          : nd->op == KEEL_OP_MIN  ? RED_MIN
                          : nd->op == KEEL_OP_PROD ? RED_PROD
                                                   : RED_LSE;
        reduce(e, k, as_dtype(e, in[0], x->dtype, ydt), x->ndim,
               kattr(nd, "axis"), kattr_i(nd, "keepdim"), y);
        return e->st;
    }
    case KEEL_OP_VAR:
    case KEEL_OP_STD: {
        static const keel_attr no_axis = {.type = KEEL_ATTR_INTS};
        const keel_attr *axis = kattr(nd, "axis");
        int64_t cnt;
        const char *m, *dv, *s;

        if (x->ndim == 0)
            return refuse(e, "the variance of a 0-d tensor");
        if (!reduced_count(x, axis, &cnt))
            return refuse(e, "a variance over dynamic dimensions (the "
                             "count is not constant)");
        if (!axis)
            axis = &no_axis;
        m = reduce(e, RED_MEAN, in[0], x->ndim, axis, true, NULL);
        dv = op2(e, "Sub", in[0], m);
        s = reduce(e, RED_SUM, op2(e, "Mul", dv, dv), x->ndim, axis,
                   kattr_i(nd, "keepdim"), NULL);
        s = op2(e, "Div", s,
                init_scalar(e, ydt,
                            (double)(cnt - kattr_i(nd, "unbiased"))));
        emit(e, nd->op == KEEL_OP_STD ? "Sqrt" : "Identity", 1, &s, 1, &y);
        return e->st;
    }
    case KEEL_OP_ALL:
    case KEEL_OP_ANY: {
        /* all: min over 0/1 (empty: the maximum, true); any: sum (empty:
         * 0, false). */
        const char *b = as_dtype(e, in[0], x->dtype, KEEL_BOOL);
        const char *i64 = as_dtype(e, b, KEEL_BOOL, KEEL_I64);

        t = reduce(e, nd->op == KEEL_OP_ALL ? RED_MIN : RED_SUM, i64, x->ndim,
                   kattr(nd, "axis"), kattr_i(nd, "keepdim"), NULL);
        n = emit(e, "Cast", 1, &t, 1, &y);
        attr_i(e, n, "to", T_BOOL);
        return e->st;
    }
    case KEEL_OP_ARGMAX:
    case KEEL_OP_ARGMIN: {
        const keel_attr *axis = kattr(nd, "axis");
        bool keep = kattr_i(nd, "keepdim");
        const char *op = nd->op == KEEL_OP_ARGMAX ? "ArgMax" : "ArgMin";
        int64_t minus1 = -1, ones[KEEL_MAX_DIMS];

        if (axis && axis->v.ints.count > 1)
            return refuse(e, "more than one axis");
        if (axis && axis->v.ints.count == 1) {
            n = emit(e, op, 1, in, 1, &y);
            attr_i(e, n, "axis", axis->v.ints.data[0]);
            attr_i(e, n, "keepdims", keep);
            attr_i(e, n, "select_last_index", 0);
            return e->st;
        }
        t = op2(e, "Reshape", in[0], init_i64(e, &minus1, 1));
        {
            const char *o = keep && x->ndim > 0 ? tmp(e, op) : y;
            n = emit(e, op, 1, &t, 1, &o);
            attr_i(e, n, "axis", 0);
            attr_i(e, n, "keepdims", 0);
            attr_i(e, n, "select_last_index", 0);
            t = o;
        }
        if (t != y) {
            const char *ins[2];
            for (int i = 0; i < KEEL_MAX_DIMS; i++)
                ones[i] = 1;
            ins[0] = t;
            ins[1] = init_i64(e, ones, x->ndim);
            emit(e, "Reshape", 2, ins, 1, &y);
        }
        return e->st;
    }
    case KEEL_OP_CUMSUM: {
        const keel_attr *axis = kattr(nd, "axis");
        int64_t minus1 = -1;
        const char *ins[2];

        ins[0] = as_dtype(e, in[0], x->dtype, ydt);
        if (!axis || axis->v.ints.count == 0) {
            ins[0] = op2(e, "Reshape", ins[0], init_i64(e, &minus1, 1));
            ins[1] = init_i64_scalar(e, 0);
        } else if (axis->v.ints.count == 1) {
            ins[1] = init_i64_scalar(e, axis->v.ints.data[0]);
        } else {
            return refuse(e, "more than one axis");
        }
        emit(e, "CumSum", 2, ins, 1, &y);
        return e->st;
    }
    case KEEL_OP_MATMUL: {
        const char *ab[2];

        for (int i = 0; i < 2; i++) {
            const struct jit_value *v = &g->val[nd->in[i]];
            int64_t perm[KEEL_MAX_DIMS];

            ab[i] = as_dtype(e, in[i], v->dtype, ydt);
            if (!kattr_i(nd, i ? "transpose_y" : "transpose_x"))
                continue;
            if (v->ndim < 2)
                return refuse(e, "a transposed 1-D operand");
            for (int d = 0; d < v->ndim; d++)
                perm[d] = d;
            perm[v->ndim - 2] = v->ndim - 1;
            perm[v->ndim - 1] = v->ndim - 2;
            t = tmp(e, "Transpose");
            n = emit(e, "Transpose", 1, &ab[i], 1, &t);
            attr_is(e, n, "perm", perm, v->ndim);
            ab[i] = t;
        }
        emit(e, "MatMul", 2, ab, 1, &y);
        return e->st;
    }
    case KEEL_OP_LINEAR: {
        const char *ab[2];

        for (int i = 0; i < nd->nin; i++)
            in[i] = as_dtype(e, in[i], g->val[nd->in[i]].dtype, ydt);
        if (nd->nin < 3) {
            emit(e, "MatMul", 2, in, 1, &y);
            return e->st;
        }
        ab[0] = op2(e, "MatMul", in[0], in[1]);
        ab[1] = in[2];
        emit(e, "Add", 2, ab, 1, &y);
        return e->st;
    }
    case KEEL_OP_CONV2D:
    case KEEL_OP_CONV2D_TRANSPOSE:
        for (int i = 0; i < nd->nin; i++)
            in[i] = as_dtype(e, in[i], g->val[nd->in[i]].dtype, ydt);
        return write_conv(e, nd, in, y);
    case KEEL_OP_MAX_POOL2D:
    case KEEL_OP_AVG_POOL2D:
        return write_pool(e, nd, in[0], y);
    case KEEL_OP_ADAPTIVE_AVG_POOL2D: {
        const keel_attr *os = kattr(nd, "output_size");
        int64_t o[2], k[2], h;

        if (!pair2(os, NULL, o))
            return refuse(e, "output_size has a count keel does not take");
        if (o[0] == 1 && o[1] == 1) {
            emit(e, "GlobalAveragePool", 1, in, 1, &y);
            return e->st;
        }
        for (int a = 0; a < 2; a++) {
            if (!dim_static(x, 2 + a, &h))
                return refuse(e, "a dynamic input size with output size "
                                 "other than 1x1");
            if (o[a] < 0)
                o[a] = h;
            if (o[a] == 0 || h % o[a])
                return refuse(e, "input size %" PRId64 " is not a multiple "
                                 "of output size %" PRId64
                                 " (unequal windows)",
                              h, o[a]);
            k[a] = h / o[a];
        }
        n = emit(e, "AveragePool", 1, in, 1, &y);
        attr_is(e, n, "kernel_shape", k, 2);
        attr_is(e, n, "strides", k, 2);
        return e->st;
    }
    case KEEL_OP_BATCH_NORM:
        if (kattr_i(nd, "training"))
            return refuse(e, "batch_norm in training mode (call "
                             "keel_layer_eval before tracing)");
        if (extra_outputs_used(e, nd, 1, "saved statistics"))
            return e->st;
        n = emit(e, "BatchNormalization", 5, in, 1, &y);
        attr_f(e, n, "epsilon", kattr_f(nd, "epsilon"));
        attr_f(e, n, "momentum", kattr_f(nd, "momentum"));
        return e->st;
    case KEEL_OP_LAYER_NORM:
        return write_layer_norm(e, nd, in, y);
    case KEEL_OP_SOFTMAX:
    case KEEL_OP_LOG_SOFTMAX:
        if (x->ndim == 0)
            return refuse(e, "a 0-d input");
        n = emit(e, nd->op == KEEL_OP_SOFTMAX ? "Softmax" : "LogSoftmax", 1,
                 in, 1, &y);
        attr_i(e, n, "axis", kattr_i(nd, "axis"));
        return e->st;
    case KEEL_OP_EMBEDDING: {
        const char *ins[3], *ids = as_dtype(e, in[0], x->dtype, KEEL_I64);
        int64_t pad = kattr_i(nd, "padding_idx"), minus1 = -1;

        ins[0] = in[1];
        ins[1] = ids;
        if (pad < 0) {
            emit(e, "Gather", 2, ins, 1, &y);
            return e->st;
        }
        /* Rows of padding_idx give zeros. */
        t = op2(e, "Gather", in[1], ids);
        ins[0] = op2(e, "Unsqueeze",
                     op2(e, "Equal", ids, init_i64_scalar(e, pad)),
                     init_i64(e, &minus1, 1));
        ins[1] = init_scalar(e, ydt, 0);
        ins[2] = t;
        emit(e, "Where", 3, ins, 1, &y);
        return e->st;
    }
    case KEEL_OP_DROPOUT:
        if (kattr_i(nd, "training"))
            return refuse(e, "dropout in training mode (random)");
        if (extra_outputs_used(e, nd, 1, "mask"))
            return e->st;
        if (!strcmp(kattr_s(nd, "mode"), "downscale_in_infer")) {
            const char *ins[2] = {in[0],
                                  init_scalar(e, ydt, 1 - kattr_f(nd, "p"))};
            emit(e, "Mul", 2, ins, 1, &y);
        } else {
            emit(e, "Identity", 1, in, 1, &y);
        }
        return e->st;
    case KEEL_OP_ONE_HOT: {
        /* keel gives zeros for negative classes, where ONNX counts from
         * the end: such indices are moved out of range first. */
        int64_t depth = kattr_i(nd, "num_classes");
        const char *idx = as_dtype(e, in[0], x->dtype, KEEL_I64);
        const char *d = init_i64_scalar(e, depth), *ins[3];
        float vals[2] = {0, 1};
        int64_t two = 2;

        ins[0] = op2(e, "Less", idx, init_i64_scalar(e, 0));
        ins[1] = d;
        ins[2] = idx;
        t = tmp(e, "Where");
        emit(e, "Where", 3, ins, 1, &t);
        ins[0] = t;
        ins[1] = d;
        ins[2] = init_add(e, "one_hot.values", KEEL_F32, 1, &two, vals,
                          sizeof(vals));
        n = emit(e, "OneHot", 3, ins, 1, &y);
        attr_i(e, n, "axis", -1);
        return e->st;
    }
    case KEEL_OP_STACK: {
        const struct jit_value *o = &g->val[nd->out[0]];
        int64_t ax = keel__axis(kattr_i(nd, "axis"), o->ndim);
        const char *axes = init_i64(e, &ax, 1);

        for (int i = 0; i < nd->nin; i++)
            in[i] = op2(e, "Unsqueeze",
                        as_dtype(e, in[i], g->val[nd->in[i]].dtype, ydt),
                        axes);
        n = emit(e, "Concat", nd->nin, in, 1, &y);
        attr_i(e, n, "axis", ax);
        return e->st;
    }
    case KEEL_OP_SPLIT: {
        int ax = keel__axis(kattr_i(nd, "axis"), x->ndim);
        int64_t sizes[KEEL_MAX_OP_OUTPUTS];
        const char *outs[KEEL_MAX_OP_OUTPUTS], *ins[2];

        for (int j = 0; j < nd->nout; j++) {
            if (!dim_static(&g->val[nd->out[j]], ax, &sizes[j]))
                return refuse(e, "a piece with a dynamic size");
            outs[j] = out_name(e, nd, j);
        }
        ins[0] = in[0];
        ins[1] = init_i64(e, sizes, nd->nout);
        n = emit(e, "Split", 2, ins, nd->nout, outs);
        attr_i(e, n, "axis", ax);
        return e->st;
    }
    case KEEL_OP_GATHER:
    case KEEL_OP_INDEX_SELECT:
        n = emit(e, "Gather", 2, in, 1, &y);
        attr_i(e, n, "axis", kattr_i(nd, "axis"));
        return e->st;
    case KEEL_OP_TAKE_ALONG_AXIS: {
        const struct jit_value *ix = &g->val[nd->in[1]];
        int ax = keel__axis(kattr_i(nd, "axis"), x->ndim);

        for (int d = 0; d < x->ndim; d++)
            if (d != ax && (x->dim[d].sym != ix->dim[d].sym ||
                            x->dim[d].mul != ix->dim[d].mul ||
                            x->dim[d].sym == JIT_ANY))
                return refuse(e, "an index that broadcasts (ONNX's "
                                 "GatherElements does not)");
        n = emit(e, "GatherElements", 2, in, 1, &y);
        attr_i(e, n, "axis", ax);
        return e->st;
    }
    case KEEL_OP_TILE: {
        const keel_attr *r = kattr(nd, "repeat_times");
        int64_t reps[KEEL_MAX_DIMS], cnt = r->v.ints.count;
        int nd_out = cnt > x->ndim ? (int)cnt : x->ndim;
        const char *src = in[0], *ins[2];

        if (cnt > KEEL_MAX_DIMS)
            return refuse(e, "too many repeat_times");
        for (int i = 0; i < nd_out; i++) {
            int64_t k = i - (nd_out - cnt);
            reps[i] = k >= 0 ? r->v.ints.data[k] : 1;
        }
        if (nd_out > x->ndim) {
            int64_t axes[KEEL_MAX_DIMS];
            for (int i = 0; i < nd_out - x->ndim; i++)
                axes[i] = i;
            src = op2(e, "Unsqueeze", src,
                      init_i64(e, axes, nd_out - x->ndim));
        }
        ins[0] = src;
        ins[1] = init_i64(e, reps, nd_out);
        emit(e, "Tile", 2, ins, 1, &y);
        return e->st;
    }
    case KEEL_OP_FLIP: {
        const keel_attr *ax = kattr(nd, "axis");
        int64_t st[KEEL_MAX_DIMS], en[KEEL_MAX_DIMS], sp[KEEL_MAX_DIMS];
        int64_t c = ax->v.ints.count;
        const char *ins[5];

        if (c == 0 || c > KEEL_MAX_DIMS) {
            emit(e, "Identity", 1, in, 1, &y);
            return e->st;
        }
        for (int i = 0; i < c; i++) {
            st[i] = -1;
            en[i] = INT64_MIN;
            sp[i] = -1;
        }
        ins[0] = in[0];
        ins[1] = init_i64(e, st, (int)c);
        ins[2] = init_i64(e, en, (int)c);
        ins[3] = init_i64(e, ax->v.ints.data, (int)c);
        ins[4] = init_i64(e, sp, (int)c);
        emit(e, "Slice", 5, ins, 1, &y);
        return e->st;
    }
    case KEEL_OP_PAD: {
        const keel_attr *p = kattr(nd, "pad");
        const char *mode = kattr_s(nd, "mode"), *ins[3];
        int64_t pads[2 * KEEL_MAX_DIMS] = {0};

        if (p->v.ints.count > 2 * x->ndim)
            return refuse(e, "more pads than dimensions");
        for (int64_t i = 0; i < p->v.ints.count; i++)
            pads[(i % 2) * x->ndim + i / 2] = p->v.ints.data[i];
        ins[0] = in[0];
        ins[1] = init_i64(e, pads, 2 * x->ndim);
        if (!strcmp(mode, "constant")) {
            ins[2] = init_scalar(e, x->dtype, kattr_f(nd, "value"));
            n = emit(e, "Pad", 3, ins, 1, &y);
            attr_s(e, n, "mode", "constant");
        } else {
            n = emit(e, "Pad", 2, ins, 1, &y);
            attr_s(e, n, "mode", !strcmp(mode, "replicate") ? "edge"
                                                            : "reflect");
        }
        return e->st;
    }
    default:
        break;
    }
    return refuse(e, "ONNX has no op of this meaning that keel can write "
                     "exactly (docs/inference.md, \"ONNX\", lists what is "
                     "exported)");
}

/* ---- the model --------------------------------------------------------- */

static Onnx__ValueInfoProto *value_info(struct ex *e, const char *name,
                                        const struct jit_value *v)
{
    Onnx__ValueInfoProto *vi = ex_alloc(e, sizeof(*vi));
    Onnx__TypeProto *tp = ex_alloc(e, sizeof(*tp));
    Onnx__TypeProto__Tensor *tt = ex_alloc(e, sizeof(*tt));
    Onnx__TensorShapeProto *sh = ex_alloc(e, sizeof(*sh));
    Onnx__TensorShapeProto__Dimension **dims =
        ex_alloc(e, sizeof(*dims) * (size_t)(v->ndim ? v->ndim : 1));

    if (!vi || !tp || !tt || !sh || !dims)
        return NULL;
    onnx__value_info_proto__init(vi);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sh);
    for (int d = 0; d < v->ndim; d++) {
        Onnx__TensorShapeProto__Dimension *dm = ex_alloc(e, sizeof(*dm));
        struct jit_dim jd = v->dim[d];
        char buf[96];

        if (!dm)
            return NULL;
        onnx__tensor_shape_proto__dimension__init(dm);
        if (jd.sym == JIT_STATIC) {
            dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dm->dim_value = jd.mul;
        } else if (jd.sym >= 0) {
            if (jd.mul == 1)
                snprintf(buf, sizeof(buf), "%s", e->g->sym[jd.sym]);
            else
                snprintf(buf, sizeof(buf), "%" PRId64 "*%s", jd.mul,
                         e->g->sym[jd.sym]);
            dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dm->dim_param = ex_strdup(e, buf);
        }
        dims[d] = dm;
    }
    sh->dim = dims;
    sh->n_dim = (size_t)v->ndim;
    tt->has_elem_type = 1;
    tt->elem_type = onnx_type(v->dtype);
    tt->shape = sh;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->name = (char *)name;
    vi->type = tp;
    return vi;
}

/* Names of inputs, outputs and constants, before any node is written. */
static keel_status name_values(struct ex *e)
{
    const keel_graph *g = e->g;

    for (int i = 0; i < g->nin && e->st == KEEL_STATUS_OK; i++) {
        const char *s = g->val[g->in[i]].name;
        if (name_used(e, s))
            return refuse(e, "input name '%s' is used twice", s);
        e->vname[g->in[i]] = ex_strdup(e, s);
        if (e->vname[g->in[i]])
            name_add(e, e->vname[g->in[i]]);
    }
    for (int i = 0; i < g->nout && e->st == KEEL_STATUS_OK; i++) {
        const char *s = g->out_name[i];
        int v = g->out[i];
        if (name_used(e, s))
            return e->st = keel__error(
                       KEEL_STATUS_NOT_SUPPORTED,
                       "keel_onnx_export: output name '%s' is also the "
                       "name of an input or another output; ONNX names "
                       "must be unique; nothing was written",
                       s);
        /* The first output of a node's value takes the output's name;
         * others are written as an Identity at the end. */
        if (g->val[v].kind == JIT_NODE && !e->vname[v]) {
            e->vname[v] = ex_strdup(e, s);
            if (e->vname[v])
                name_add(e, e->vname[v]);
        } else {
            name_add(e, ex_strdup(e, s));
        }
    }
    for (int v = 0; v < g->nval && e->st == KEEL_STATUS_OK; v++)
        if (g->val[v].kind == JIT_CONST)
            e->vname[v] = fresh(e, g->val[v].name);
    return e->st;
}

static keel_status write_constants(struct ex *e)
{
    const keel_graph *g = e->g;

    for (int v = 0; v < g->nval && e->st == KEEL_STATUS_OK; v++) {
        const struct jit_value *val = &g->val[v];
        int64_t dims[KEEL_MAX_DIMS];
        size_t bytes;
        uint8_t *raw;
        Onnx__TensorProto *t;

        if (val->kind != JIT_CONST || g->last_use[v] < 0)
            continue;
        for (int d = 0; d < val->ndim; d++)
            dims[d] = val->data->shape[d];
        bytes = (size_t)keel_tensor_numel(val->data) *
                keel_dtype_size(val->data->dtype);
        t = tensor_new(e, e->vname[v], val->dtype, val->ndim, dims, NULL, 0);
        raw = ex_alloc(e, bytes);
        if (!t || !raw)
            break;
        if ((e->st = keel_tensor_to_host(val->data, raw, bytes)) !=
            KEEL_STATUS_OK)
            break;
        t->raw_data.data = raw;
        t->raw_data.len = bytes;
        e->bytes += bytes;
        push(e, (void ***)&e->inits, &e->ninits, &e->capinits, t);
    }
    return e->st;
}

static keel_status write_body(FILE *f, void *ctx, const char *tmpname,
                              const char *path)
{
    const ProtobufCBinaryData *b = ctx;

    if (fwrite(b->data, 1, b->len, f) != b->len)
        return keel__write_atomic_error("fwrite", tmpname, path);
    return KEEL_STATUS_OK;
}

static keel_status export_model(struct ex *e, const char *path)
{
    const keel_graph *g = e->g;
    Onnx__ModelProto model;
    Onnx__GraphProto graph;
    Onnx__OperatorSetIdProto opset, *opsets[1] = {&opset};
    Onnx__ValueInfoProto **ins = NULL, **outs = NULL;
    ProtobufCBinaryData buf = {0, NULL};
    char producer[64];
    size_t size;

    e->vname = calloc((size_t)(g->nval ? g->nval : 1), sizeof(*e->vname));
    if (!e->vname)
        return e->st = oom();
    if (name_values(e) != KEEL_STATUS_OK || write_constants(e))
        return e->st;
    for (int n = 0; n < g->nnode && e->st == KEEL_STATUS_OK; n++) {
        const struct jit_node *nd = &g->node[n];

        e->node = n;
        if (nd->kind == JIT_OP)
            write_op(e, nd);
        else
            write_view(e, nd);
        for (int j = 0; j < nd->nout && e->st == KEEL_STATUS_OK; j++)
            if (!e->vname[nd->out[j]])
                e->vname[nd->out[j]] = out_name(e, nd, j);
    }
    /* Outputs that are not a node's value under their own name. */
    for (int i = 0; i < g->nout && e->st == KEEL_STATUS_OK; i++) {
        const char *src = e->vname[g->out[i]];
        const char *dst = g->out_name[i];
        if (strcmp(src, dst))
            emit(e, "Identity", 1, &src, 1, &dst);
    }
    ins = ex_alloc(e, sizeof(*ins) * (size_t)(g->nin ? g->nin : 1));
    outs = ex_alloc(e, sizeof(*outs) * (size_t)(g->nout ? g->nout : 1));
    for (int i = 0; i < g->nin && ins; i++)
        ins[i] = value_info(e, e->vname[g->in[i]], &g->val[g->in[i]]);
    for (int i = 0; i < g->nout && outs; i++)
        outs[i] = value_info(e, g->out_name[i], &g->val[g->out[i]]);
    if (e->st != KEEL_STATUS_OK)
        return e->st;
    if (e->bytes >= MAX_MODEL_BYTES)
        return e->st = keel__error(
                   KEEL_STATUS_NOT_SUPPORTED,
                   "keel_onnx_export: %" PRIu64 " bytes of weights; a "
                   "protobuf model holds less than 2 GiB (external data is "
                   "not written); nothing was written",
                   e->bytes);
    onnx__graph_proto__init(&graph);
    graph.name = "keel";
    graph.node = e->nodes;
    graph.n_node = e->nnodes;
    graph.initializer = e->inits;
    graph.n_initializer = e->ninits;
    graph.input = ins;
    graph.n_input = (size_t)g->nin;
    graph.output = outs;
    graph.n_output = (size_t)g->nout;
    onnx__operator_set_id_proto__init(&opset);
    opset.domain = "";
    opset.has_version = 1;
    opset.version = e->opset;
    onnx__model_proto__init(&model);
    model.has_ir_version = 1;
    /* IR version 8 for opsets 17 and 18; newer opsets need the IR
     * version that introduced them. */
    model.ir_version = e->opset <= 18 ? 8 : e->opset <= 20 ? 9
                       : e->opset <= 22 ? 10 : 11;
    model.opset_import = opsets;
    model.n_opset_import = 1;
    snprintf(producer, sizeof(producer), "%s", keel_version());
    model.producer_name = "keel";
    model.producer_version = producer;
    model.graph = &graph;
    size = onnx__model_proto__get_packed_size(&model);
    if (size >= MAX_MODEL_BYTES)
        return e->st = keel__error(KEEL_STATUS_NOT_SUPPORTED,
                                   "keel_onnx_export: the model is %zu "
                                   "bytes; a protobuf model holds less "
                                   "than 2 GiB; nothing was written",
                                   size);
    buf.data = malloc(size ? size : 1);
    if (!buf.data)
        return e->st = oom();
    buf.len = onnx__model_proto__pack(&model, buf.data);
    if (buf.len != size)
        e->st = keel__error(KEEL_STATUS_INTERNAL,
                            "keel_onnx_export: packed %zu bytes of %zu",
                            buf.len, size);
    else
        e->st = keel__write_atomic(path, "keel_onnx_export", write_body,
                                   &buf);
    free(buf.data);
    return e->st;
}

keel_status keel_onnx_export(const keel_graph *graph, const char *path,
                             int opset)
{
    struct ex e;
    keel_status st;

    if (!graph || !path || !*path)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_onnx_export: %s",
                           !graph ? "graph is NULL" : "no path");
    if (opset == 0)
        opset = KEEL_ONNX_OPSET_MIN;
    if (opset < KEEL_ONNX_OPSET_MIN || opset > KEEL_ONNX_OPSET_MAX)
        return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                           "keel_onnx_export: opset %d; this keel writes "
                           "opsets %d to %d",
                           opset, KEEL_ONNX_OPSET_MIN, KEEL_ONNX_OPSET_MAX);
    if (!little_endian())
        return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                           "keel_onnx_export: ONNX stores little-endian "
                           "data; this host is big-endian");
    memset(&e, 0, sizeof(e));
    e.g = graph;
    e.opset = opset;
    st = export_model(&e, path);
    free(e.vname);
    free(e.set);
    free(e.nodes);
    free(e.inits);
    arena_free(&e.a);
    return st;
}

/* ======================================================================== */
/* Import                                                                   */
/* ======================================================================== */

/* ---- the wire format, scanned before protobuf-c unpacks it -------------- */

static bool varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;

    for (int shift = 0; shift < 64; shift += 7) {
        if (*p >= end)
            return false;
        r |= (uint64_t)(**p & 0x7f) << shift;
        if (!(*(*p)++ & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

/* Whether bytes [p, p+n) are well-framed fields of message d (NULL: of
 * an unknown message), nested at most MAX_WIRE_DEPTH deep. protobuf-c
 * itself recurses without a bound. */
static bool wire_ok(const ProtobufCMessageDescriptor *d, const uint8_t *p,
                    size_t n, int depth)
{
    const uint8_t *end = p + n;

    if (depth > MAX_WIRE_DEPTH)
        return false;
    while (p < end) {
        uint64_t key, len;
        const ProtobufCFieldDescriptor *f;

        if (!varint(&p, end, &key) || (key >> 3) == 0 ||
            (key >> 3) > 536870911u)
            return false;
        switch (key & 7) {
        case 0:
            if (!varint(&p, end, &len))
                return false;
            break;
        case 1:
            if (end - p < 8)
                return false;
            p += 8;
            break;
        case 5:
            if (end - p < 4)
                return false;
            p += 4;
            break;
        case 2:
            if (!varint(&p, end, &len) || len > (uint64_t)(end - p))
                return false;
            f = d ? protobuf_c_message_descriptor_get_field(
                        d, (unsigned)(key >> 3))
                  : NULL;
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE &&
                !wire_ok(f->descriptor, p, (size_t)len, depth + 1))
                return false;
            p += len;
            break;
        default: /* groups: not in onnx.proto */
            return false;
        }
    }
    return true;
}

/* ---- the importer's state ------------------------------------------------- */

/* A named ONNX value: a graph value, or a constant (an initializer or a
 * Constant's output) kept on the host until a node reads it as a tensor. */
struct ent {
    const char *name;
    int value; /* -1: a constant not yet in the graph */
    bool is_const;
    keel_dtype dtype;
    int ndim;
    int64_t dims[KEEL_MAX_DIMS];
    void *data; /* owned */
    size_t bytes;
};

struct vinfo {
    keel_dtype dt;
    int ndim;
    struct jit_dim d[KEEL_MAX_DIMS];
};

struct im {
    const char *path;
    const char *device;
    keel_graph *g;
    int opset;
    struct ent *ents;
    size_t nents, capents;
    size_t *tab; /* name -> ent index + 1, open addressing */
    size_t captab;
    int node; /* the node being read, -1 none */
    const Onnx__NodeProto *nd;
};

static keel_status im_err(struct im *im, keel_status st, const char *fmt,
                          va_list ap)
{
    char msg[480], where[200] = "";

    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (im->nd)
        snprintf(where, sizeof(where), "node %d (%.40s%s%.60s%s): ",
                 im->node, im->nd->op_type ? im->nd->op_type : "?",
                 im->nd->name && *im->nd->name ? " '" : "",
                 im->nd->name ? im->nd->name : "",
                 im->nd->name && *im->nd->name ? "'" : "");
    return keel__error(st, "keel_onnx_import: %s: %s%s", im->path, where,
                       msg);
}

static keel_status corrupt(struct im *im, const char *fmt, ...)
    KEEL_PRINTF(2, 3);
static keel_status corrupt(struct im *im, const char *fmt, ...)
{
    va_list ap;
    keel_status st;

    va_start(ap, fmt);
    st = im_err(im, KEEL_STATUS_CORRUPT, fmt, ap);
    va_end(ap);
    return st;
}

static keel_status unsupported(struct im *im, const char *fmt, ...)
    KEEL_PRINTF(2, 3);
static keel_status unsupported(struct im *im, const char *fmt, ...)
{
    va_list ap;
    keel_status st;

    va_start(ap, fmt);
    st = im_err(im, KEEL_STATUS_NOT_SUPPORTED, fmt, ap);
    va_end(ap);
    return st;
}

static size_t tab_slot(const struct im *im, const char *name)
{
    size_t i = (size_t)str_hash(name) & (im->captab - 1);

    while (im->tab[i] && strcmp(im->ents[im->tab[i] - 1].name, name))
        i = (i + 1) & (im->captab - 1);
    return i;
}

static struct ent *lookup(struct im *im, const char *name)
{
    size_t i;

    if (!im->captab)
        return NULL;
    i = tab_slot(im, name);
    return im->tab[i] ? &im->ents[im->tab[i] - 1] : NULL;
}

/* A new entry for `name`, which must not be defined yet. */
static keel_status define(struct im *im, const char *name, const char *what,
                          struct ent **out)
{
    struct ent *e;

    if (!name || !*name)
        return corrupt(im, "%s has no name", what);
    if (lookup(im, name))
        return corrupt(im, "%s '%.80s' is defined a second time (ONNX "
                           "names are assigned once)",
                       what, name);
    if (im->nents >= (1u << 24))
        return unsupported(im, "more than %u named values", 1u << 24);
    if (im->nents == im->capents) {
        size_t nc = im->capents ? im->capents * 2 : 256;
        void *p = realloc(im->ents, nc * sizeof(*im->ents));
        if (!p)
            return oom();
        im->ents = p;
        im->capents = nc;
    }
    if ((im->nents + 1) * 2 > im->captab) {
        size_t nc = im->captab ? im->captab * 2 : 512;
        size_t *t = calloc(nc, sizeof(*t));
        if (!t)
            return oom();
        free(im->tab);
        im->tab = t;
        im->captab = nc;
        for (size_t i = 0; i < im->nents; i++)
            im->tab[tab_slot(im, im->ents[i].name)] = i + 1;
    }
    e = &im->ents[im->nents];
    memset(e, 0, sizeof(*e));
    e->name = name;
    e->value = -1;
    im->tab[tab_slot(im, name)] = ++im->nents;
    *out = e;
    return KEEL_STATUS_OK;
}

/* ---- tensors ---------------------------------------------------------------- */

static bool known_onnx_type(int64_t t)
{
    return t >= 1 && t <= 16;
}

/* Check tensor t against its dims and type and copy its data to the host
 * (into c). */
static keel_status decode_tensor_data(struct im *im,
                                      const Onnx__TensorProto *t,
                                      const char *what, struct ent *c)
{
    const char *nm = t->name && *t->name ? t->name : "(unnamed)";
    int64_t numel;
    uint64_t bytes;
    uint32_t es;
    int sources;

    if (!t->has_data_type || !keel_type(t->data_type, &c->dtype)) {
        if (t->has_data_type && known_onnx_type(t->data_type))
            return unsupported(im, "%s '%.80s' is %s, which keel has no "
                                   "dtype for",
                               what, nm, onnx_type_name(t->data_type));
        return corrupt(im, "%s '%.80s' has data type %d, which is not an "
                           "ONNX tensor type",
                       what, nm, t->has_data_type ? (int)t->data_type : 0);
    }
    if ((t->has_data_location &&
         t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) ||
        t->n_external_data)
        return unsupported(im, "%s '%.80s' keeps its data in an external "
                               "file",
                           what, nm);
    if (t->segment)
        return unsupported(im, "%s '%.80s' is a segment of a tensor", what,
                           nm);
    if (t->n_dims > KEEL_MAX_DIMS)
        return unsupported(im, "%s '%.80s' has %zu dimensions (keel: at "
                               "most %d)",
                           what, nm, t->n_dims, KEEL_MAX_DIMS);
    c->ndim = (int)t->n_dims;
    for (int i = 0; i < c->ndim; i++) {
        if (t->dims[i] < 0)
            return corrupt(im, "%s '%.80s' has dimension %" PRId64, what,
                           nm, t->dims[i]);
        c->dims[i] = t->dims[i];
    }
    es = keel_dtype_size(c->dtype);
    if (!keel__shape_size(c->ndim, c->dims, es, &numel, &bytes))
        return corrupt(im, "%s '%.80s': its dimensions multiply past the "
                           "size of memory",
                       what, nm);
    sources = (t->has_raw_data && t->raw_data.len) + (t->n_float_data > 0) +
              (t->n_int32_data > 0) + (t->n_int64_data > 0) +
              (t->n_double_data > 0) + (t->n_uint64_data > 0) +
              (t->n_string_data > 0);
    if (sources > 1)
        return corrupt(im, "%s '%.80s' holds its data in %d fields at once",
                       what, nm, sources);
    c->bytes = (size_t)bytes;
    c->data = malloc(bytes ? (size_t)bytes : 1);
    if (!c->data)
        return oom();
    if (t->has_raw_data && (t->raw_data.len || !sources)) {
        if (t->raw_data.len != bytes)
            return corrupt(im, "%s '%.80s': raw_data holds %zu bytes; %" PRId64
                               " elements of %s need %" PRIu64,
                           what, nm, t->raw_data.len, numel,
                           onnx_type_name(t->data_type), bytes);
        if (bytes)
            memcpy(c->data, t->raw_data.data, (size_t)bytes);
        return KEEL_STATUS_OK;
    }
    if (numel == 0 && !sources)
        return KEEL_STATUS_OK;
    switch (c->dtype) {
    case KEEL_F32:
        if (t->n_float_data != (size_t)numel)
            break;
        memcpy(c->data, t->float_data, (size_t)bytes);
        return KEEL_STATUS_OK;
    case KEEL_F64:
        if (t->n_double_data != (size_t)numel)
            break;
        memcpy(c->data, t->double_data, (size_t)bytes);
        return KEEL_STATUS_OK;
    case KEEL_I64:
        if (t->n_int64_data != (size_t)numel)
            break;
        memcpy(c->data, t->int64_data, (size_t)bytes);
        return KEEL_STATUS_OK;
    default: /* int32_data: int32, int8, uint8, bool, float16, bfloat16 */
        if (t->n_int32_data != (size_t)numel)
            break;
        for (int64_t i = 0; i < numel; i++) {
            int32_t v = t->int32_data[i];
            bool ok = true;
            switch (c->dtype) {
            case KEEL_I32:
                ((int32_t *)c->data)[i] = v;
                break;
            case KEEL_I8:
                ok = v >= INT8_MIN && v <= INT8_MAX;
                ((int8_t *)c->data)[i] = (int8_t)v;
                break;
            case KEEL_U8:
                ok = v >= 0 && v <= UINT8_MAX;
                ((uint8_t *)c->data)[i] = (uint8_t)v;
                break;
            case KEEL_BOOL:
                ok = v == 0 || v == 1;
                ((uint8_t *)c->data)[i] = (uint8_t)v;
                break;
            default: /* 16-bit floats as their bits */
                ok = v >= 0 && v <= UINT16_MAX;
                ((uint16_t *)c->data)[i] = (uint16_t)v;
                break;
            }
            if (!ok)
                return corrupt(im, "%s '%.80s': element %" PRId64 " (%d) "
                                   "does not fit %s",
                               what, nm, i, (int)v,
                               onnx_type_name(t->data_type));
        }
        return KEEL_STATUS_OK;
    }
    return corrupt(im, "%s '%.80s': %" PRId64 " elements of %s, but its "
                       "data field holds another count or is the wrong "
                       "field for the type",
                   what, nm, numel, onnx_type_name(t->data_type));
}

/* A tensor's dtype, dims and data into c (c->data malloc'd); on an error
 * nothing stays allocated. */
static keel_status decode_tensor(struct im *im, const Onnx__TensorProto *t,
                                 const char *what, struct ent *c)
{
    keel_status st;

    c->data = NULL;
    st = decode_tensor_data(im, t, what, c);
    if (st != KEEL_STATUS_OK) {
        free(c->data);
        c->data = NULL;
    }
    return st;
}

/* The constant's elements as int64 (int32 or int64, 0-d or 1-D). */
static keel_status const_ints(struct im *im, const struct ent *c,
                              const char *what, int64_t *buf, int max,
                              int *n)
{
    int64_t numel = c->bytes / (c->dtype == KEEL_I64   ? 8
                                : c->dtype == KEEL_I32 ? 4
                                                       : 1);

    if ((c->dtype != KEEL_I64 && c->dtype != KEEL_I32) || c->ndim > 1)
        return corrupt(im, "%s ('%.80s') must be a 1-D int64 or int32 "
                           "tensor",
                       what, c->name);
    if (numel > max)
        return unsupported(im, "%s ('%.80s') has %" PRId64 " elements (at "
                               "most %d)",
                           what, c->name, numel, max);
    for (int64_t i = 0; i < numel; i++)
        buf[i] = c->dtype == KEEL_I64 ? ((const int64_t *)c->data)[i]
                                      : ((const int32_t *)c->data)[i];
    *n = (int)numel;
    return KEEL_STATUS_OK;
}

/* The constant's single element as a double (exact or refused). */
static keel_status const_scalar(struct im *im, const struct ent *c,
                                const char *what, double *v)
{
    keel_tensor *t = NULL;
    keel_status st;
    int64_t numel = 1;

    for (int i = 0; i < c->ndim; i++)
        numel *= c->dims[i];
    if (numel != 1)
        return unsupported(im, "%s ('%.80s') must hold one element", what,
                           c->name);
    if (c->dtype == KEEL_I64) {
        int64_t i = *(const int64_t *)c->data;
        *v = (double)i;
        if (i < -(INT64_C(1) << 53) || i > (INT64_C(1) << 53))
            return unsupported(im, "%s ('%.80s') = %" PRId64 " is not "
                                   "exact as a double",
                               what, c->name, i);
        return KEEL_STATUS_OK;
    }
    st = keel_tensor_from_host(c->data, c->dtype, 0, NULL, im->device, &t);
    if (st == KEEL_STATUS_OK)
        st = keel_tensor_item(t, 0, v);
    keel_tensor_free(t);
    return st;
}

/* ---- attributes --------------------------------------------------------------- */

static const Onnx__AttributeProto *attr_find(const Onnx__NodeProto *n,
                                             const char *name)
{
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, name))
            return n->attribute[i];
    return NULL;
}

static const char *attr_type_name(int t)
{
    switch (t) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
        return "FLOAT";
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
        return "INT";
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING:
        return "STRING";
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR:
        return "TENSOR";
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
        return "FLOATS";
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
        return "INTS";
    default:
        return "another type";
    }
}

/* Every attribute of the node must be one of `known` (NULL-terminated),
 * named once, typed, and not a reference into a function. */
static keel_status check_attrs(struct im *im, const char *const *known)
{
    const Onnx__NodeProto *n = im->nd;

    for (size_t i = 0; i < n->n_attribute; i++) {
        const Onnx__AttributeProto *a = n->attribute[i];
        bool ok = false;

        if (!a->name || !*a->name)
            return corrupt(im, "attribute %zu has no name", i);
        if (!a->has_type)
            return corrupt(im, "attribute '%.40s' has no type", a->name);
        if (a->ref_attr_name && *a->ref_attr_name)
            return corrupt(im, "attribute '%.40s' refers to a function's "
                               "attribute outside a function",
                           a->name);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(n->attribute[j]->name, a->name))
                return corrupt(im, "attribute '%.40s' is given twice",
                               a->name);
        for (int k = 0; known && known[k]; k++)
            ok = ok || !strcmp(known[k], a->name);
        if (!ok)
            return unsupported(im, "attribute '%.40s' is not one keel "
                                   "maps",
                               a->name);
    }
    return KEEL_STATUS_OK;
}

static keel_status attr_typed(struct im *im, const char *name, int type,
                              const Onnx__AttributeProto **out)
{
    const Onnx__AttributeProto *a = attr_find(im->nd, name);

    *out = a;
    if (a && (int)a->type != type)
        return corrupt(im, "attribute '%s' is %s; it must be %s", name,
                       attr_type_name(a->type), attr_type_name(type));
    return KEEL_STATUS_OK;
}

static keel_status get_int(struct im *im, const char *name, int64_t dflt,
                           int64_t *v)
{
    const Onnx__AttributeProto *a;
    keel_status st = attr_typed(
        im, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, &a);

    *v = a ? a->i : dflt;
    return st;
}

static keel_status get_float(struct im *im, const char *name, double dflt,
                             double *v)
{
    const Onnx__AttributeProto *a;
    keel_status st = attr_typed(
        im, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT, &a);

    *v = a ? a->f : dflt;
    return st;
}

/* *n = -1 when absent. */
static keel_status get_ints(struct im *im, const char *name, int64_t *buf,
                            int max, int *n)
{
    const Onnx__AttributeProto *a;
    keel_status st = attr_typed(
        im, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, &a);

    *n = -1;
    if (st != KEEL_STATUS_OK || !a)
        return st;
    if (a->n_ints > (size_t)max)
        return unsupported(im, "attribute '%s' has %zu values (at most %d)",
                           name, a->n_ints, max);
    for (size_t i = 0; i < a->n_ints; i++)
        buf[i] = a->ints[i];
    *n = (int)a->n_ints;
    return KEEL_STATUS_OK;
}

static keel_status get_str(struct im *im, const char *name, const char *dflt,
                           char *buf, size_t size)
{
    const Onnx__AttributeProto *a;
    keel_status st = attr_typed(
        im, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, &a);

    if (st != KEEL_STATUS_OK)
        return st;
    if (!a) {
        snprintf(buf, size, "%s", dflt);
        return KEEL_STATUS_OK;
    }
    if (a->s.len >= size || memchr(a->s.data, 0, a->s.len))
        return unsupported(im, "attribute '%s' is not a short string",
                           name);
    memcpy(buf, a->s.data, a->s.len);
    buf[a->s.len] = 0;
    return KEEL_STATUS_OK;
}

/* ---- dimensions in the symbols -------------------------------------------- */

static struct jit_dim dS(int64_t n)
{
    struct jit_dim d = {JIT_STATIC, n};
    return d;
}

static struct jit_dim dA(void)
{
    struct jit_dim d = {JIT_ANY, 0};
    return d;
}

static bool dsame(struct jit_dim a, struct jit_dim b)
{
    return a.sym != JIT_ANY && a.sym == b.sym && a.mul == b.mul;
}

static bool dstatic(struct jit_dim d, int64_t *n)
{
    if (d.sym != JIT_STATIC)
        return false;
    *n = d.mul;
    return true;
}

/* A product of dimensions: c * sym^pow, or `bad` when it is not one. */
struct mono {
    int64_t c;
    int sym, pow;
    bool bad;
};

static void mono_mul(struct mono *m, struct jit_dim d)
{
    if (d.sym == JIT_ANY || (d.sym >= 0 && m->pow && m->sym != d.sym) ||
        __builtin_mul_overflow(m->c, d.mul, &m->c)) {
        m->bad = true;
        return;
    }
    if (d.sym >= 0) {
        m->sym = d.sym;
        m->pow++;
    }
}

static struct jit_dim mono_dim(struct mono m)
{
    struct jit_dim d = {JIT_ANY, 0};

    if (m.bad || m.pow > 1 || m.c < 0)
        return d;
    if (m.pow == 0)
        return dS(m.c);
    if (m.c == 0)
        return dS(0);
    d.sym = m.sym;
    d.mul = m.c;
    return d;
}

static struct jit_dim mono_div(struct mono a, struct mono b)
{
    struct mono r = {0, -1, 0, false};

    if (a.bad || b.bad || b.c <= 0 || a.c % b.c ||
        (b.pow && (a.pow < b.pow || a.sym != b.sym)))
        return dA();
    r.c = a.c / b.c;
    r.pow = a.pow - b.pow;
    r.sym = r.pow ? a.sym : -1;
    return mono_dim(r);
}

static struct mono mono_of(const struct jit_dim *d, int from, int to)
{
    struct mono m = {1, -1, 0, false};

    for (int i = from; i < to; i++)
        mono_mul(&m, d[i]);
    return m;
}

/* ---- building the graph ----------------------------------------------------- */

static void vget(const struct im *im, int v, struct vinfo *o)
{
    const struct jit_value *val = &im->g->val[v];

    o->dt = val->dtype;
    o->ndim = val->ndim;
    for (int i = 0; i < val->ndim; i++)
        o->d[i] = val->dim[i];
}

/* A constant as a graph value (made on first use). */
static keel_status materialize(struct im *im, struct ent *c, int *value)
{
    struct jit_dim d[KEEL_MAX_DIMS];
    keel_tensor *t = NULL;
    keel_status st;
    int v;

    if (c->value >= 0) {
        *value = c->value;
        return KEEL_STATUS_OK;
    }
    for (int i = 0; i < c->ndim; i++)
        d[i] = dS(c->dims[i]);
    st = keel_tensor_from_host(c->data, c->dtype, c->ndim, c->dims,
                               im->device, &t);
    if (st != KEEL_STATUS_OK)
        return st;
    v = keel__graph_add_value(im->g, JIT_CONST, c->dtype, c->ndim, d);
    if (v < 0) {
        keel_tensor_free(t);
        return keel_last_status();
    }
    im->g->val[v].data = t;
    im->g->val[v].name = strdup(c->name);
    if (!im->g->val[v].name)
        return oom();
    c->value = *value = v;
    return KEEL_STATUS_OK;
}

/* Node input k, which must be given. */
static keel_status in_ent(struct im *im, size_t k, struct ent **out)
{
    const char *name = k < im->nd->n_input ? im->nd->input[k] : NULL;

    if (!name || !*name)
        return corrupt(im, "input %zu is missing", k);
    *out = lookup(im, name);
    if (!*out)
        return corrupt(im, "input %zu reads '%.80s', which no graph input, "
                           "initializer or earlier node defines",
                       k, name);
    return KEEL_STATUS_OK;
}

static bool has_in(const struct im *im, size_t k)
{
    return k < im->nd->n_input && im->nd->input[k] && *im->nd->input[k];
}

static keel_status in_val(struct im *im, size_t k, int *v, struct vinfo *vi)
{
    struct ent *e;
    keel_status st = in_ent(im, k, &e);

    if (st == KEEL_STATUS_OK && e->value < 0)
        st = materialize(im, e, v);
    if (st == KEEL_STATUS_OK) {
        *v = e->value;
        if (vi)
            vget(im, *v, vi);
    }
    return st;
}

static keel_status in_const(struct im *im, size_t k, struct ent **c)
{
    keel_status st = in_ent(im, k, c);

    if (st == KEEL_STATUS_OK && !(*c)->is_const)
        return unsupported(im, "input %zu ('%.80s') must be a constant (an "
                               "initializer or a Constant's output); a "
                               "value computed when the graph runs is not "
                               "supported there",
                           k, (*c)->name);
    return st;
}

/* Name node output k as value v (an empty name: an unused output). */
static keel_status bind(struct im *im, size_t k, int v)
{
    struct ent *e;
    keel_status st;

    if (k >= im->nd->n_output || !im->nd->output[k] || !*im->nd->output[k])
        return KEEL_STATUS_OK;
    st = define(im, im->nd->output[k], "output", &e);
    if (st == KEEL_STATUS_OK)
        e->value = v;
    return st;
}

/* Outputs past `n` must be absent (ONNX's optional outputs keel does not
 * make). */
static keel_status no_outputs_past(struct im *im, size_t n, const char *what)
{
    for (size_t k = n; k < im->nd->n_output; k++)
        if (im->nd->output[k] && *im->nd->output[k])
            return unsupported(im, "output %zu (%s) is asked for; keel "
                                   "does not make it",
                               k, what);
    return KEEL_STATUS_OK;
}

static int new_value(struct im *im, const struct vinfo *o)
{
    return keel__graph_add_value(im->g, JIT_NODE, o->dt, o->ndim, o->d);
}

/* A catalog op node: attributes by name (others take the catalog's
 * defaults), outputs described by outs; their ids into ids. */
static keel_status add_op(struct im *im, keel_op_id op, const int *in,
                          int nin, const keel_attr *attrs, int nattrs,
                          int nout, const struct vinfo *outs, int *ids)
{
    const struct keel_op_def *d = keel__op_def(op);
    int out[KEEL_MAX_OP_OUTPUTS], n;
    struct jit_node *node;
    keel_status st = KEEL_STATUS_OK;

    for (int j = 0; j < nout; j++)
        if ((out[j] = new_value(im, &outs[j])) < 0)
            return keel_last_status();
    n = keel__graph_add_node(im->g, JIT_OP, op, in, nin, out, nout);
    if (n < 0)
        return keel_last_status();
    node = &im->g->node[n];
    for (int k = 0; k < d->nattrs && st == KEEL_STATUS_OK; k++) {
        const keel_attr *a = &d->attrs[k].def;

        for (int i = 0; i < nattrs; i++)
            if (!strcmp(attrs[i].name, d->attrs[k].name))
                a = &attrs[i];
        if (a == &d->attrs[k].def && d->attrs[k].required)
            return keel__error(KEEL_STATUS_INTERNAL,
                               "keel_onnx_import: %s needs '%s'",
                               keel_op_get_info(op)->name, d->attrs[k].name);
        st = keel__graph_set_attr(node, k, a);
        node->nattrs = k + 1;
    }
    for (int j = 0; j < nout && ids; j++)
        ids[j] = out[j];
    return st;
}

/* One-output op; its value into *v. */
static keel_status op1v(struct im *im, keel_op_id op, const int *in, int nin,
                        const keel_attr *attrs, int nattrs,
                        const struct vinfo *o, int *v)
{
    return add_op(im, op, in, nin, attrs, nattrs, 1, o, v);
}

static keel_status add_view(struct im *im, enum jit_node_kind k, int in,
                            const int64_t *p, const struct jit_dim *pd,
                            int np, const struct vinfo *o, int *v)
{
    int out = new_value(im, o), n;
    struct jit_node *node;

    if (out < 0)
        return keel_last_status();
    n = keel__graph_add_node(im->g, k, KEEL_OP_COUNT, &in, 1, &out, 1);
    if (n < 0)
        return keel_last_status();
    node = &im->g->node[n];
    node->np = np;
    for (int i = 0; i < np; i++) {
        node->p[i] = p ? p[i] : 0;
        node->pd[i] = pd ? pd[i] : dS(p[i]);
    }
    *v = out;
    return KEEL_STATUS_OK;
}

/* A reshape of value v to dims d (at most one JIT_ANY, written -1). */
static keel_status reshape_to(struct im *im, int v, int ndim,
                              const struct jit_dim *d, int *out)
{
    struct vinfo in, o;
    int any = 0;

    vget(im, v, &in);
    for (int i = 0; i < ndim; i++)
        any += d[i].sym == JIT_ANY;
    if (any > 1)
        return unsupported(im, "the new shape has %d dimensions keel cannot "
                               "write in the input's symbols",
                           any);
    o.dt = in.dt;
    o.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        o.d[i] = d[i];
    if (any) {
        /* The inferred dimension, when the symbols can say it. */
        struct mono tot = mono_of(in.d, 0, in.ndim), known = {1, -1, 0, 0};
        int at = 0;
        for (int i = 0; i < ndim; i++) {
            if (d[i].sym == JIT_ANY)
                at = i;
            else
                mono_mul(&known, d[i]);
        }
        o.d[at] = mono_div(tot, known);
    }
    return add_view(im, JIT_RESHAPE, v, NULL, d, ndim, &o, out);
}

/* A new constant of dtype dt (0-d) holding v, as keel's full makes it. */
static keel_status scalar_value(struct im *im, keel_dtype dt, double v,
                                int *out)
{
    keel_tensor *t = NULL;
    char name[96];
    keel_status st;
    int id;

    snprintf(name, sizeof(name), "onnx.const.%d", im->g->nval);
    st = keel_full(0, NULL, dt, v, im->device, &t);
    if (st != KEEL_STATUS_OK)
        return st;
    id = keel__graph_add_value(im->g, JIT_CONST, dt, 0, NULL);
    if (id < 0) {
        keel_tensor_free(t);
        return keel_last_status();
    }
    im->g->val[id].data = t;
    im->g->val[id].name = strdup(name);
    if (!im->g->val[id].name)
        return oom();
    *out = id;
    return KEEL_STATUS_OK;
}

static keel_status cast_to(struct im *im, int v, keel_dtype dt, int *out)
{
    struct vinfo o;
    keel_attr a = {.name = "dtype", .type = KEEL_ATTR_DTYPE, .v.i = dt};

    vget(im, v, &o);
    if (o.dt == dt) {
        *out = v;
        return KEEL_STATUS_OK;
    }
    o.dt = dt;
    return op1v(im, KEEL_OP_CAST, &v, 1, &a, 1, &o, out);
}

static keel_status bcast(struct im *im, const struct vinfo *a,
                         const struct vinfo *b, struct vinfo *o)
{
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;

    o->ndim = n;
    for (int i = 0; i < n; i++) {
        int ia = i - (n - a->ndim), ib = i - (n - b->ndim);
        struct jit_dim x = ia >= 0 ? a->d[ia] : dS(1);
        struct jit_dim y = ib >= 0 ? b->d[ib] : dS(1);
        int64_t sx = 0, sy = 0;
        bool hx = dstatic(x, &sx), hy = dstatic(y, &sy);

        if (dsame(x, y) || (hy && sy == 1))
            o->d[i] = x;
        else if (hx && sx == 1)
            o->d[i] = y;
        else if (hx && hy)
            return corrupt(im, "the inputs' dimensions %" PRId64
                               " and %" PRId64 " do not broadcast",
                           sx, sy);
        else if (hx)
            o->d[i] = x;
        else if (hy)
            o->d[i] = y;
        else
            o->d[i] = dA();
    }
    return KEEL_STATUS_OK;
}

static keel_status need_float(struct im *im, const struct vinfo *v,
                              const char *what)
{
    if (!keel__dtype_is_float(v->dt))
        return unsupported(im, "%s is %s; keel's op takes floating types",
                           what, keel_dtype_name(v->dt));
    return KEEL_STATUS_OK;
}

/* ---- the ops ---------------------------------------------------------------- */

#define TRY(expr)                                                            \
    do {                                                                     \
        keel_status st_ = (expr);                                            \
        if (st_ != KEEL_STATUS_OK)                                           \
            return st_;                                                      \
    } while (0)

static const char *const no_attrs[] = {NULL};

/* Elementwise ops of two (or, for Where, three) inputs. */
static keel_status imp_elementwise(struct im *im, keel_op_id op)
{
    int nin = op == KEEL_OP_WHERE ? 3 : 2, v[3];
    struct vinfo a[3], o;
    bool cmp = op == KEEL_OP_EQUAL || op == KEEL_OP_LESS ||
               op == KEEL_OP_LESS_EQUAL || op == KEEL_OP_GREATER ||
               op == KEEL_OP_GREATER_EQUAL || op == KEEL_OP_LOGICAL_AND ||
               op == KEEL_OP_LOGICAL_OR || op == KEEL_OP_LOGICAL_XOR;

    TRY(check_attrs(im, no_attrs));
    for (int i = 0; i < nin; i++)
        TRY(in_val(im, (size_t)i, &v[i], &a[i]));
    if (op == KEEL_OP_POW && a[1].dt != a[0].dt) {
        /* ONNX's Pow keeps the base's type. */
        TRY(cast_to(im, v[1], a[0].dt, &v[1]));
        a[1].dt = a[0].dt;
    }
    if (a[nin - 1].dt != a[nin - 2].dt)
        return corrupt(im, "its inputs are %s and %s; the op takes one type",
                       keel_dtype_name(a[nin - 2].dt),
                       keel_dtype_name(a[nin - 1].dt));
    if (op == KEEL_OP_WHERE && a[0].dt != KEEL_BOOL)
        return corrupt(im, "the condition is %s, not bool",
                       keel_dtype_name(a[0].dt));
    if (op == KEEL_OP_DIVIDE && !keel__dtype_is_float(a[0].dt))
        return unsupported(im, "integer Div truncates; keel's divide is "
                               "true division");
    TRY(bcast(im, &a[0], &a[1], &o));
    if (nin == 3) {
        struct vinfo t = o;
        TRY(bcast(im, &t, &a[2], &o));
    }
    o.dt = cmp ? KEEL_BOOL : a[nin - 1].dt;
    TRY(op1v(im, op, v, nin, NULL, 0, &o, &v[0]));
    return bind(im, 0, v[0]);
}

/* Variadic Max / Min: a chain of maximum / minimum. */
static keel_status imp_minmax(struct im *im, keel_op_id op)
{
    int v, w;
    struct vinfo a, b, o;

    TRY(check_attrs(im, no_attrs));
    if (im->nd->n_input < 1)
        return corrupt(im, "no inputs");
    TRY(in_val(im, 0, &v, &a));
    for (size_t k = 1; k < im->nd->n_input; k++) {
        TRY(in_val(im, k, &w, &b));
        if (a.dt != b.dt)
            return corrupt(im, "its inputs are %s and %s",
                           keel_dtype_name(a.dt), keel_dtype_name(b.dt));
        TRY(bcast(im, &a, &b, &o));
        o.dt = a.dt;
        TRY(op1v(im, op, (int[]){v, w}, 2, NULL, 0, &o, &v));
        a = o;
    }
    return bind(im, 0, v);
}

/* One input, the output of its type and shape (bool for Not). */
static keel_status imp_unary(struct im *im, keel_op_id op,
                             const char *const *known)
{
    keel_attr attrs[2];
    int n = 0, v;
    struct vinfo a;
    double f;

    TRY(check_attrs(im, known));
    TRY(in_val(im, 0, &v, &a));
    switch (op) {
    case KEEL_OP_LEAKY_RELU:
        TRY(get_float(im, "alpha", 0.01, &f));
        attrs[n++] = (keel_attr){.name = "negative_slope",
                                 .type = KEEL_ATTR_FLOAT, .v.f = f};
        break;
    case KEEL_OP_ELU:
        TRY(get_float(im, "alpha", 1.0, &f));
        attrs[n++] = (keel_attr){.name = "alpha", .type = KEEL_ATTR_FLOAT,
                                 .v.f = f};
        break;
    case KEEL_OP_GELU: {
        char s[16];
        TRY(get_str(im, "approximate", "none", s, sizeof(s)));
        if (strcmp(s, "none") && strcmp(s, "tanh"))
            return corrupt(im, "approximate is '%s' (none or tanh)", s);
        attrs[n++] = (keel_attr){.name = "approximate",
                                 .type = KEEL_ATTR_BOOL,
                                 .v.i = !strcmp(s, "tanh")};
        break;
    }
    default:
        break;
    }
    if (op != KEEL_OP_LOGICAL_NOT && op != KEEL_OP_NEG &&
        op != KEEL_OP_ABS && op != KEEL_OP_RELU && op != KEEL_OP_SIGN)
        TRY(need_float(im, &a, "the input"));
    if (op == KEEL_OP_LOGICAL_NOT)
        a.dt = KEEL_BOOL;
    TRY(op1v(im, op, &v, 1, attrs, n, &a, &v));
    return bind(im, 0, v);
}

static keel_status imp_reciprocal(struct im *im)
{
    int v, one;
    struct vinfo a;

    TRY(check_attrs(im, no_attrs));
    TRY(in_val(im, 0, &v, &a));
    TRY(need_float(im, &a, "the input"));
    TRY(scalar_value(im, a.dt, 1.0, &one));
    TRY(op1v(im, KEEL_OP_DIVIDE, (int[]){one, v}, 2, NULL, 0, &a, &v));
    return bind(im, 0, v);
}

static keel_status imp_identity(struct im *im)
{
    struct ent *e, *o;

    TRY(in_ent(im, 0, &e));
    if (im->nd->n_output < 1 || !im->nd->output[0] || !*im->nd->output[0])
        return KEEL_STATUS_OK;
    /* The output names the same value (or the same constant). */
    {
        struct ent copy = *e;
        if (copy.is_const && copy.value < 0) {
            int v;
            TRY(materialize(im, e, &v));
            copy = *e;
        }
        TRY(define(im, im->nd->output[0], "output", &o));
        o->value = copy.value;
    }
    return KEEL_STATUS_OK;
}

static keel_status imp_dropout(struct im *im)
{
    static const char *const known[] = {"seed", "ratio", NULL};

    TRY(check_attrs(im, known));
    TRY(no_outputs_past(im, 1, "the mask"));
    if (has_in(im, 2)) {
        struct ent *c;
        double t;
        TRY(in_const(im, 2, &c));
        TRY(const_scalar(im, c, "training_mode", &t));
        if (t != 0)
            return unsupported(im, "training_mode is true (random)");
    }
    return imp_identity(im);
}

static keel_status imp_cast(struct im *im)
{
    static const char *const known[] = {"to", "saturate", NULL};
    int64_t to;
    keel_dtype dt;
    int v;

    TRY(check_attrs(im, known));
    TRY(get_int(im, "to", -1, &to));
    if (to < 0)
        return corrupt(im, "attribute 'to' is missing");
    if (!keel_type(to, &dt))
        return known_onnx_type(to)
                   ? unsupported(im, "a cast to %s, which keel has no "
                                     "dtype for",
                                 onnx_type_name(to))
                   : corrupt(im, "'to' = %" PRId64 " is not a type", to);
    TRY(in_val(im, 0, &v, NULL));
    TRY(cast_to(im, v, dt, &v));
    return bind(im, 0, v);
}

static keel_status imp_softmax(struct im *im, keel_op_id op)
{
    static const char *const known[] = {"axis", NULL};
    int64_t axis;
    int v, ax;
    struct vinfo a;
    keel_attr at = {.name = "axis", .type = KEEL_ATTR_INT};

    TRY(check_attrs(im, known));
    TRY(in_val(im, 0, &v, &a));
    TRY(need_float(im, &a, "the input"));
    TRY(get_int(im, "axis", im->opset >= 13 ? -1 : 1, &axis));
    ax = keel__axis(axis, a.ndim);
    if (ax < 0 || a.ndim == 0)
        return corrupt(im, "axis %" PRId64 " for %d dimensions", axis,
                       a.ndim);
    if (im->opset >= 13 || ax == a.ndim - 1) {
        at.v.i = ax;
        TRY(op1v(im, op, &v, 1, &at, 1, &a, &v));
        return bind(im, 0, v);
    }
    /* Before opset 13: over the input flattened to 2-D at axis. */
    {
        struct jit_dim d2[2] = {mono_dim(mono_of(a.d, 0, ax)),
                                mono_dim(mono_of(a.d, ax, a.ndim))};
        struct vinfo f;
        int w;

        TRY(reshape_to(im, v, 2, d2, &w));
        vget(im, w, &f);
        at.v.i = 1;
        TRY(op1v(im, op, &w, 1, &at, 1, &f, &w));
        {
            struct jit_dim back[KEEL_MAX_DIMS];
            int any = 0, copy = 0;
            for (int i = 0; i < a.ndim; i++) {
                back[i] = a.d[i];
                any += a.d[i].sym == JIT_ANY;
            }
            (void)copy;
            if (any > 1)
                return unsupported(im, "the input's shape cannot be "
                                       "restored in the symbols");
            TRY(reshape_to(im, w, a.ndim, back, &v));
        }
    }
    return bind(im, 0, v);
}

/* numpy's matmul shapes. */
static keel_status matmul_shape(struct im *im, const struct vinfo *a,
                                const struct vinfo *b, struct vinfo *o)
{
    struct vinfo ba = *a, bb = *b, bo;

    if (a->ndim < 1 || b->ndim < 1)
        return corrupt(im, "a 0-d operand");
    ba.ndim = a->ndim > 2 ? a->ndim - 2 : 0;
    bb.ndim = b->ndim > 2 ? b->ndim - 2 : 0;
    TRY(bcast(im, &ba, &bb, &bo));
    *o = bo;
    o->dt = a->dt;
    if (a->ndim >= 2)
        o->d[o->ndim++] = a->d[a->ndim - 2];
    if (b->ndim >= 2)
        o->d[o->ndim++] = b->d[b->ndim - 1];
    {
        struct jit_dim ka = a->d[a->ndim - 1];
        struct jit_dim kb = b->d[b->ndim >= 2 ? b->ndim - 2 : 0];
        int64_t x, y;
        if (dstatic(ka, &x) && dstatic(kb, &y) && x != y)
            return corrupt(im, "inner dimensions %" PRId64 " and %" PRId64
                               " differ",
                           x, y);
    }
    return KEEL_STATUS_OK;
}

static keel_status imp_matmul(struct im *im)
{
    int v[2];
    struct vinfo a, b, o;

    TRY(check_attrs(im, no_attrs));
    TRY(in_val(im, 0, &v[0], &a));
    TRY(in_val(im, 1, &v[1], &b));
    TRY(need_float(im, &a, "the input"));
    if (a.dt != b.dt)
        return corrupt(im, "its inputs are %s and %s",
                       keel_dtype_name(a.dt), keel_dtype_name(b.dt));
    TRY(matmul_shape(im, &a, &b, &o));
    TRY(op1v(im, KEEL_OP_MATMUL, v, 2, NULL, 0, &o, &v[0]));
    return bind(im, 0, v[0]);
}

static keel_status permute2(struct im *im, int v, int *out)
{
    struct vinfo a, o;
    int64_t p[2] = {1, 0};

    vget(im, v, &a);
    o = a;
    o.d[0] = a.d[1];
    o.d[1] = a.d[0];
    return add_view(im, JIT_PERMUTE, v, p, NULL, 2, &o, out);
}

/* Gemm: alpha * A' B' + beta * C as linear or matmul, with a multiply
 * only where alpha or beta is not 1. */
static keel_status imp_gemm(struct im *im)
{
    static const char *const known[] = {"alpha", "beta", "transA",
                                        "transB", NULL};
    double alpha, beta;
    int64_t ta, tb;
    int a, b, c = -1, y;
    struct vinfo va, vb, vc, o;

    TRY(check_attrs(im, known));
    TRY(get_float(im, "alpha", 1.0, &alpha));
    TRY(get_float(im, "beta", 1.0, &beta));
    TRY(get_int(im, "transA", 0, &ta));
    TRY(get_int(im, "transB", 0, &tb));
    TRY(in_val(im, 0, &a, &va));
    TRY(in_val(im, 1, &b, &vb));
    TRY(need_float(im, &va, "A"));
    if (va.ndim != 2 || vb.ndim != 2 || va.dt != vb.dt)
        return corrupt(im, "A and B must be 2-D of one type");
    if (ta)
        TRY(permute2(im, a, &a));
    if (tb)
        TRY(permute2(im, b, &b));
    vget(im, a, &va);
    vget(im, b, &vb);
    TRY(matmul_shape(im, &va, &vb, &o));
    if (has_in(im, 2) && beta != 0) {
        TRY(in_val(im, 2, &c, &vc));
        if (vc.dt != va.dt)
            return corrupt(im, "C is %s, A %s", keel_dtype_name(vc.dt),
                           keel_dtype_name(va.dt));
        {
            struct vinfo t = o;
            TRY(bcast(im, &t, &vc, &t));
            if (t.ndim != 2)
                return corrupt(im, "C does not broadcast to [M, N]");
        }
    }
    if (alpha == 1 && beta == 1 && c >= 0 && vc.ndim == 1) {
        TRY(op1v(im, KEEL_OP_LINEAR, (int[]){a, b, c}, 3, NULL, 0, &o, &y));
        return bind(im, 0, y);
    }
    TRY(op1v(im, KEEL_OP_LINEAR, (int[]){a, b}, 2, NULL, 0, &o, &y));
    if (alpha != 1) {
        int s;
        TRY(scalar_value(im, o.dt, alpha, &s));
        TRY(op1v(im, KEEL_OP_MULTIPLY, (int[]){y, s}, 2, NULL, 0, &o, &y));
    }
    if (c >= 0) {
        if (beta != 1) {
            int s;
            TRY(scalar_value(im, o.dt, beta, &s));
            TRY(op1v(im, KEEL_OP_MULTIPLY, (int[]){c, s}, 2, NULL, 0, &vc,
                     &c));
        }
        TRY(op1v(im, KEEL_OP_ADD, (int[]){y, c}, 2, NULL, 0, &o, &y));
    }
    return bind(im, 0, y);
}

/* Geometry of a 2-D window op over x [N, C, H, W]. */
struct win {
    int64_t k[2], s[2], dil[2], pads[4]; /* pads: ONNX (t, l, b, r) */
    bool same_upper;                      /* keel's SAME, for Conv */
};

static keel_status read_window(struct im *im, const struct vinfo *x,
                               const int64_t *kernel, bool conv,
                               struct win *w)
{
    char ap[24];
    int64_t buf[8];
    int n;

    TRY(get_str(im, "auto_pad", "NOTSET", ap, sizeof(ap)));
    for (int i = 0; i < 2; i++) {
        w->k[i] = kernel[i];
        w->s[i] = w->dil[i] = 1;
        w->pads[i] = w->pads[i + 2] = 0;
    }
    w->same_upper = false;
    TRY(get_ints(im, "strides", buf, 8, &n));
    if (n >= 0 && n != 2)
        return corrupt(im, "'strides' has %d values for 2 spatial "
                           "dimensions",
                       n);
    for (int i = 0; n == 2 && i < 2; i++)
        w->s[i] = buf[i];
    TRY(get_ints(im, "dilations", buf, 8, &n));
    if (n >= 0 && n != 2)
        return corrupt(im, "'dilations' has %d values", n);
    for (int i = 0; n == 2 && i < 2; i++)
        w->dil[i] = buf[i];
    TRY(get_ints(im, "pads", buf, 8, &n));
    if (n >= 0 && n != 4)
        return corrupt(im, "'pads' has %d values (4: top, left, bottom, "
                           "right)",
                       n);
    for (int i = 0; n == 4 && i < 4; i++)
        w->pads[i] = buf[i];
    for (int i = 0; i < 2; i++)
        if (w->s[i] < 1 || w->dil[i] < 1 || w->k[i] < 1)
            return corrupt(im, "a stride, dilation or kernel size below 1");
    for (int i = 0; i < 4; i++)
        if (w->pads[i] < 0)
            return unsupported(im, "negative pads");
    if (!strcmp(ap, "NOTSET"))
        return KEEL_STATUS_OK;
    if (n >= 0)
        return corrupt(im, "both 'pads' and auto_pad %s", ap);
    if (!strcmp(ap, "VALID"))
        return KEEL_STATUS_OK;
    if (strcmp(ap, "SAME_UPPER") && strcmp(ap, "SAME_LOWER"))
        return corrupt(im, "auto_pad '%s'", ap);
    if (conv && !strcmp(ap, "SAME_UPPER")) {
        w->same_upper = true;
        return KEEL_STATUS_OK;
    }
    /* Explicit pads from the static input size. */
    for (int i = 0; i < 2; i++) {
        int64_t h, o, total;
        if (!dstatic(x->d[2 + i], &h))
            return unsupported(im, "auto_pad %s on a dynamic size", ap);
        o = (h + w->s[i] - 1) / w->s[i];
        total = (o - 1) * w->s[i] + (w->k[i] - 1) * w->dil[i] + 1 - h;
        if (total < 0)
            total = 0;
        w->pads[i] = !strcmp(ap, "SAME_UPPER") ? total / 2
                                               : total - total / 2;
        w->pads[i + 2] = total - w->pads[i];
    }
    return KEEL_STATUS_OK;
}

/* Output size along spatial axis i. */
static struct jit_dim win_out(const struct vinfo *x, const struct win *w,
                              int i, bool ceil)
{
    int64_t h, span = (w->k[i] - 1) * w->dil[i] + 1, in;

    if (!dstatic(x->d[2 + i], &h))
        return dA();
    if (w->same_upper)
        return dS((h + w->s[i] - 1) / w->s[i]);
    in = h + w->pads[i] + w->pads[i + 2] - span;
    if (in < 0)
        return dS(-1);
    return dS((in + (ceil ? w->s[i] - 1 : 0)) / w->s[i] + 1);
}

static keel_status imp_conv(struct im *im)
{
    static const char *const known[] = {"auto_pad", "dilations", "group",
                                        "kernel_shape", "pads", "strides",
                                        NULL};
    int in[3], nin = 2, y;
    struct vinfo x, w, o;
    struct win win;
    int64_t group, ks[8], kernel[2], kw;
    int nks;
    keel_attr attrs[5];
    int64_t stride[2], pad[4], dil[2];

    TRY(check_attrs(im, known));
    TRY(in_val(im, 0, &in[0], &x));
    TRY(in_val(im, 1, &in[1], &w));
    TRY(need_float(im, &x, "X"));
    if (x.ndim != 4 || w.ndim != 4)
        return unsupported(im, "a convolution over %d spatial dimensions "
                               "(keel has conv2d)",
                           x.ndim - 2);
    if (w.dt != x.dt)
        return corrupt(im, "W is %s, X %s", keel_dtype_name(w.dt),
                       keel_dtype_name(x.dt));
    TRY(get_int(im, "group", 1, &group));
    TRY(get_ints(im, "kernel_shape", ks, 8, &nks));
    for (int i = 0; i < 2; i++) {
        if (!dstatic(w.d[2 + i], &kernel[i])) {
            if (nks != 2)
                return unsupported(im, "the kernel size is not known");
            kernel[i] = ks[i];
        }
        if (nks >= 0 && (nks != 2 || ks[i] != kernel[i]))
            return corrupt(im, "kernel_shape contradicts W's shape");
    }
    TRY(read_window(im, &x, kernel, true, &win));
    if (has_in(im, 2)) {
        struct vinfo b;
        TRY(in_val(im, 2, &in[2], &b));
        if (b.ndim != 1 || b.dt != x.dt)
            return corrupt(im, "B must be 1-D of X's type");
        nin = 3;
    }
    if (group < 1)
        return corrupt(im, "group %" PRId64, group);
    {
        int64_t c;
        if (dstatic(x.d[1], &c) && dstatic(w.d[1], &kw) &&
            c != kw * group)
            return corrupt(im, "X has %" PRId64 " channels; W takes %" PRId64
                               " in %" PRId64 " groups",
                           c, kw, group);
    }
    o.dt = x.dt;
    o.ndim = 4;
    o.d[0] = x.d[0];
    o.d[1] = w.d[0];
    for (int i = 0; i < 2; i++) {
        o.d[2 + i] = win_out(&x, &win, i, false);
        if (o.d[2 + i].sym == JIT_STATIC && o.d[2 + i].mul < 1)
            return corrupt(im, "the kernel does not fit the padded input");
    }
    for (int i = 0; i < 2; i++) {
        stride[i] = win.s[i];
        dil[i] = win.dil[i];
    }
    pad[0] = win.pads[0];
    pad[1] = win.pads[2];
    pad[2] = win.pads[1];
    pad[3] = win.pads[3];
    attrs[0] = (keel_attr){.name = "stride", .type = KEEL_ATTR_INTS,
                           .v.ints = {stride, 2}};
    attrs[1] = (keel_attr){.name = "padding", .type = KEEL_ATTR_INTS,
                           .v.ints = {pad, 4}};
    attrs[2] = (keel_attr){.name = "padding_algorithm",
                           .type = KEEL_ATTR_STRING,
                           .v.s = win.same_upper ? "SAME" : "EXPLICIT"};
    attrs[3] = (keel_attr){.name = "dilation", .type = KEEL_ATTR_INTS,
                           .v.ints = {dil, 2}};
    attrs[4] = (keel_attr){.name = "groups", .type = KEEL_ATTR_INT,
                           .v.i = group};
    TRY(op1v(im, KEEL_OP_CONV2D, in, nin, attrs, 5, &o, &y));
    return bind(im, 0, y);
}

static keel_status imp_pool(struct im *im, bool avg)
{
    static const char *const known_max[] = {"auto_pad", "ceil_mode",
                                            "dilations", "kernel_shape",
                                            "pads", "storage_order",
                                            "strides", NULL};
    static const char *const known_avg[] = {"auto_pad", "ceil_mode",
                                            "count_include_pad",
                                            "dilations", "kernel_shape",
                                            "pads", "strides", NULL};
    int v, ids[2], nks, ceil;
    struct vinfo x, o[2];
    struct win w;
    int64_t ks[8], ceil_mode, cip = 0, pad[4];
    keel_attr attrs[5];

    TRY(check_attrs(im, avg ? known_avg : known_max));
    TRY(no_outputs_past(im, 1, "the indices"));
    TRY(in_val(im, 0, &v, &x));
    TRY(need_float(im, &x, "X"));
    if (x.ndim != 4)
        return unsupported(im, "pooling over %d spatial dimensions (keel "
                               "pools 2)",
                           x.ndim - 2);
    TRY(get_ints(im, "kernel_shape", ks, 8, &nks));
    if (nks != 2)
        return corrupt(im, "kernel_shape must have 2 values");
    TRY(read_window(im, &x, ks, false, &w));
    if (w.dil[0] != 1 || w.dil[1] != 1)
        return unsupported(im, "dilated pooling");
    TRY(get_int(im, "ceil_mode", 0, &ceil_mode));
    if (avg)
        TRY(get_int(im, "count_include_pad", 0, &cip));
    for (int i = 0; i < 4; i++)
        if (w.pads[i] >= w.k[i % 2])
            return unsupported(im, "pads of %" PRId64 " are not smaller "
                                   "than the window: windows all in "
                                   "padding",
                               w.pads[i]);
    ceil = ceil_mode ? pool_ceil(&(struct jit_value){.ndim = 4,
                                                     .dim = {x.d[0], x.d[1],
                                                             x.d[2],
                                                             x.d[3]}},
                                 w.k, w.s, w.pads, cip != 0)
                     : 0;
    if (ceil < 0)
        return unsupported(im, "ceil_mode where the last windows' rules "
                               "differ between ONNX and keel");
    o[0].dt = x.dt;
    o[0].ndim = 4;
    o[0].d[0] = x.d[0];
    o[0].d[1] = x.d[1];
    for (int i = 0; i < 2; i++) {
        o[0].d[2 + i] = win_out(&x, &w, i, ceil);
        if (o[0].d[2 + i].sym == JIT_STATIC && o[0].d[2 + i].mul < 1)
            return corrupt(im, "the window does not fit the padded input");
    }
    o[1] = o[0];
    o[1].dt = KEEL_I64;
    pad[0] = w.pads[0];
    pad[1] = w.pads[2];
    pad[2] = w.pads[1];
    pad[3] = w.pads[3];
    attrs[0] = (keel_attr){.name = "kernel_size", .type = KEEL_ATTR_INTS,
                           .v.ints = {w.k, 2}};
    attrs[1] = (keel_attr){.name = "stride", .type = KEEL_ATTR_INTS,
                           .v.ints = {w.s, 2}};
    attrs[2] = (keel_attr){.name = "padding", .type = KEEL_ATTR_INTS,
                           .v.ints = {pad, 4}};
    attrs[3] = (keel_attr){.name = "ceil_mode", .type = KEEL_ATTR_BOOL,
                           .v.i = ceil};
    attrs[4] = (keel_attr){.name = "exclusive", .type = KEEL_ATTR_BOOL,
                           .v.i = !cip};
    TRY(add_op(im, avg ? KEEL_OP_AVG_POOL2D : KEEL_OP_MAX_POOL2D, &v, 1,
               attrs, avg ? 5 : 4, avg ? 1 : 2, o, ids));
    return bind(im, 0, ids[0]);
}

/* A reduction keel runs over `axes` (n of them; n = 0: all). */
static keel_status reduce_value(struct im *im, keel_op_id op, int v,
                                const int64_t *axes, int n, bool keep,
                                int *out)
{
    struct vinfo a, o;
    bool red[KEEL_MAX_DIMS] = {false};
    keel_attr attrs[2] = {
        {.name = "axis", .type = KEEL_ATTR_INTS, .v.ints = {axes, n}},
        {.name = "keepdim", .type = KEEL_ATTR_BOOL, .v.i = keep}};

    vget(im, v, &a);
    for (int i = 0; i < n; i++) {
        int ax = keel__axis(axes[i], a.ndim);
        if (ax < 0 || red[ax])
            return corrupt(im, "axis %" PRId64 " is out of range or "
                               "repeated for %d dimensions",
                           axes[i], a.ndim);
        red[ax] = true;
    }
    o.dt = a.dt;
    o.ndim = 0;
    for (int i = 0; i < a.ndim; i++) {
        if (!red[i] && n)
            o.d[o.ndim++] = a.d[i];
        else if (keep)
            o.d[o.ndim++] = dS(1);
    }
    if (op == KEEL_OP_SUM && !keel__dtype_is_float(a.dt))
        o.dt = KEEL_I64;
    if (op == KEEL_OP_ARGMAX || op == KEEL_OP_ARGMIN)
        o.dt = KEEL_I64;
    TRY(op1v(im, op, &v, 1, attrs, 2, &o, out));
    /* ONNX keeps the input's type where keel sums in int64. */
    if (o.dt != a.dt && op == KEEL_OP_SUM)
        TRY(cast_to(im, *out, a.dt, out));
    return KEEL_STATUS_OK;
}

static keel_status imp_reduce(struct im *im, keel_op_id op,
                              bool axes_input)
{
    static const char *const known[] = {"axes", "keepdims",
                                        "noop_with_empty_axes", NULL};
    int64_t axes[KEEL_MAX_DIMS], keep, noop;
    int n = 0, v;
    struct vinfo a;

    TRY(check_attrs(im, known));
    TRY(get_int(im, "keepdims", 1, &keep));
    TRY(get_int(im, "noop_with_empty_axes", 0, &noop));
    TRY(in_val(im, 0, &v, &a));
    if (axes_input) {
        if (attr_find(im->nd, "axes"))
            return corrupt(im, "axes as an attribute at opset %d",
                           im->opset);
        if (has_in(im, 1)) {
            struct ent *c;
            TRY(in_const(im, 1, &c));
            TRY(const_ints(im, c, "axes", axes, KEEL_MAX_DIMS, &n));
        }
    } else {
        TRY(get_ints(im, "axes", axes, KEEL_MAX_DIMS, &n));
        if (n < 0)
            n = 0;
    }
    if (n == 0 && noop)
        return imp_identity(im);
    if (op == KEEL_OP_MEAN)
        TRY(need_float(im, &a, "the input"));
    TRY(reduce_value(im, op, v, axes, n, keep != 0, &v));
    return bind(im, 0, v);
}

static keel_status imp_argmax(struct im *im, keel_op_id op)
{
    static const char *const known[] = {"axis", "keepdims",
                                        "select_last_index", NULL};
    int64_t axis, keep, last;
    int v;
    struct vinfo a;

    TRY(check_attrs(im, known));
    TRY(get_int(im, "axis", 0, &axis));
    TRY(get_int(im, "keepdims", 1, &keep));
    TRY(get_int(im, "select_last_index", 0, &last));
    if (last)
        return unsupported(im, "select_last_index (keel picks the first)");
    TRY(in_val(im, 0, &v, &a));
    TRY(reduce_value(im, op, v, &axis, 1, keep != 0, &v));
    return bind(im, 0, v);
}

static keel_status imp_global_pool(struct im *im, keel_op_id op)
{
    int64_t axes[KEEL_MAX_DIMS];
    int v;
    struct vinfo a;

    TRY(check_attrs(im, no_attrs));
    TRY(in_val(im, 0, &v, &a));
    TRY(need_float(im, &a, "X"));
    if (a.ndim < 3)
        return corrupt(im, "X has %d dimensions (N, C and at least one "
                           "more)",
                       a.ndim);
    for (int i = 2; i < a.ndim; i++)
        axes[i - 2] = i;
    TRY(reduce_value(im, op, v, axes, a.ndim - 2, true, &v));
    return bind(im, 0, v);
}

static keel_status imp_batch_norm(struct im *im)
{
    static const char *const known[] = {"epsilon", "momentum",
                                        "training_mode", "spatial", NULL};
    int in[5], ids[3];
    struct vinfo x, p, o[3];
    double eps, mom;
    int64_t training, spatial;
    keel_attr attrs[3];

    TRY(check_attrs(im, known));
    TRY(get_float(im, "epsilon", 1e-5, &eps));
    TRY(get_float(im, "momentum", 0.9, &mom));
    TRY(get_int(im, "training_mode", 0, &training));
    TRY(get_int(im, "spatial", 1, &spatial));
    if (training)
        return unsupported(im, "training_mode (batch statistics and "
                               "running-statistic updates)");
    if (!spatial)
        return unsupported(im, "spatial = 0");
    TRY(no_outputs_past(im, 1, "running statistics"));
    TRY(in_val(im, 0, &in[0], &x));
    TRY(need_float(im, &x, "X"));
    if (x.ndim < 2)
        return corrupt(im, "X has %d dimensions (N, C, ...)", x.ndim);
    for (int i = 1; i < 5; i++) {
        int64_t c, pc;
        TRY(in_val(im, (size_t)i, &in[i], &p));
        if (p.ndim != 1 || !keel__dtype_is_float(p.dt) ||
            (dstatic(x.d[1], &c) && dstatic(p.d[0], &pc) && c != pc))
            return corrupt(im, "input %d must be 1-D with X's %s channels",
                           i, "C");
    }
    o[0] = x;
    for (int j = 1; j < 3; j++) {
        o[j].dt = x.dt == KEEL_F64 ? KEEL_F64 : KEEL_F32;
        o[j].ndim = 1;
        o[j].d[0] = x.d[1];
    }
    attrs[0] = (keel_attr){.name = "training", .type = KEEL_ATTR_BOOL,
                           .v.i = 0};
    attrs[1] = (keel_attr){.name = "momentum", .type = KEEL_ATTR_FLOAT,
                           .v.f = mom};
    attrs[2] = (keel_attr){.name = "epsilon", .type = KEEL_ATTR_FLOAT,
                           .v.f = eps};
    TRY(add_op(im, KEEL_OP_BATCH_NORM, in, 5, attrs, 3, 3, o, ids));
    return bind(im, 0, ids[0]);
}

static keel_status imp_layer_norm(struct im *im)
{
    static const char *const known[] = {"axis", "epsilon", "stash_type",
                                        NULL};
    int in[3], nin = 2, ids[3], ax;
    struct vinfo x, p, o[3];
    double eps;
    int64_t axis, stash;
    keel_attr attrs[2];

    TRY(check_attrs(im, known));
    TRY(get_int(im, "axis", -1, &axis));
    TRY(get_float(im, "epsilon", 1e-5, &eps));
    TRY(get_int(im, "stash_type", 1, &stash));
    if (stash != 1)
        return unsupported(im, "stash_type %" PRId64 " (keel computes the "
                               "statistics in float32, float64 for "
                               "float64 inputs)",
                           stash);
    TRY(no_outputs_past(im, 1, "Mean or InvStdDev"));
    TRY(in_val(im, 0, &in[0], &x));
    TRY(need_float(im, &x, "X"));
    ax = keel__axis(axis, x.ndim);
    if (ax < 0)
        return corrupt(im, "axis %" PRId64 " for %d dimensions", axis,
                       x.ndim);
    for (int i = 1; i < 3 && has_in(im, (size_t)i); i++) {
        bool ok = p.ndim == x.ndim - ax;
        TRY(in_val(im, (size_t)i, &in[i], &p));
        ok = p.ndim == x.ndim - ax && p.dt == x.dt;
        for (int d = 0; ok && d < p.ndim; d++)
            ok = dsame(p.d[d], x.d[ax + d]);
        if (!ok)
            return unsupported(im, "%s does not have X's normalised shape "
                                   "and type (broadcasting it is not "
                                   "supported)",
                               i == 1 ? "Scale" : "B");
        nin = i + 1;
    }
    if (!has_in(im, 1))
        return corrupt(im, "Scale is missing");
    o[0] = x;
    for (int j = 1; j < 3; j++) {
        o[j].dt = x.dt == KEEL_F64 ? KEEL_F64 : KEEL_F32;
        o[j].ndim = ax;
        for (int d = 0; d < ax; d++)
            o[j].d[d] = x.d[d];
    }
    attrs[0] = (keel_attr){.name = "begin_norm_axis", .type = KEEL_ATTR_INT,
                           .v.i = ax};
    attrs[1] = (keel_attr){.name = "epsilon", .type = KEEL_ATTR_FLOAT,
                           .v.f = eps};
    TRY(add_op(im, KEEL_OP_LAYER_NORM, in, nin, attrs, 2, 3, o, ids));
    return bind(im, 0, ids[0]);
}

static keel_status imp_reshape(struct im *im)
{
    static const char *const known[] = {"allowzero", NULL};
    int64_t shape[KEEL_MAX_DIMS], allowzero;
    struct jit_dim d[KEEL_MAX_DIMS];
    struct ent *c;
    struct vinfo a;
    int n, v;

    TRY(check_attrs(im, known));
    TRY(get_int(im, "allowzero", 0, &allowzero));
    TRY(in_val(im, 0, &v, &a));
    TRY(in_const(im, 1, &c));
    TRY(const_ints(im, c, "the shape", shape, KEEL_MAX_DIMS, &n));
    for (int i = 0; i < n; i++) {
        if (shape[i] == -1) {
            for (int j = 0; j < i; j++)
                if (shape[j] == -1)
                    return corrupt(im, "the shape has two -1");
            d[i] = dA();
        } else if (shape[i] == 0 && !allowzero) {
            if (i >= a.ndim)
                return corrupt(im, "shape[%d] = 0 copies a dimension the "
                                   "input lacks",
                               i);
            d[i] = a.d[i];
        } else if (shape[i] < 0) {
            return corrupt(im, "shape[%d] = %" PRId64, i, shape[i]);
        } else {
            d[i] = dS(shape[i]);
        }
    }
    TRY(reshape_to(im, v, n, d, &v));
    return bind(im, 0, v);
}

static keel_status imp_flatten(struct im *im)
{
    static const char *const known[] = {"axis", NULL};
    int64_t axis;
    struct vinfo a;
    struct jit_dim d[2];
    int v, ax;

    TRY(check_attrs(im, known));
    TRY(get_int(im, "axis", 1, &axis));
    TRY(in_val(im, 0, &v, &a));
    ax = axis < 0 ? (int)(axis + a.ndim) : (int)axis;
    if (axis < -a.ndim || axis > a.ndim)
        return corrupt(im, "axis %" PRId64 " for %d dimensions", axis,
                       a.ndim);
    d[0] = mono_dim(mono_of(a.d, 0, ax));
    d[1] = mono_dim(mono_of(a.d, ax, a.ndim));
    TRY(reshape_to(im, v, 2, d, &v));
    return bind(im, 0, v);
}

static keel_status squeeze_axes(struct im *im, int64_t *axes, int *n,
                                bool *given)
{
    *given = false;
    *n = 0;
    if (im->opset >= 13) {
        struct ent *c;
        if (attr_find(im->nd, "axes"))
            return corrupt(im, "axes as an attribute at opset %d",
                           im->opset);
        if (!has_in(im, 1))
            return KEEL_STATUS_OK;
        TRY(in_const(im, 1, &c));
        TRY(const_ints(im, c, "axes", axes, KEEL_MAX_DIMS, n));
    } else {
        TRY(get_ints(im, "axes", axes, KEEL_MAX_DIMS, n));
        if (*n < 0) {
            *n = 0;
            return KEEL_STATUS_OK;
        }
    }
    *given = true;
    return KEEL_STATUS_OK;
}

static keel_status imp_squeeze(struct im *im, bool un)
{
    static const char *const known[] = {"axes", NULL};
    int64_t axes[KEEL_MAX_DIMS];
    bool pick[2 * KEEL_MAX_DIMS] = {false}, given;
    struct jit_dim d[KEEL_MAX_DIMS];
    struct vinfo a;
    int n, v, nd = 0, rank;

    TRY(check_attrs(im, known));
    TRY(in_val(im, 0, &v, &a));
    TRY(squeeze_axes(im, axes, &n, &given));
    if (un && !given)
        return corrupt(im, "axes are missing");
    rank = un ? a.ndim + n : a.ndim;
    if (rank > KEEL_MAX_DIMS)
        return unsupported(im, "%d dimensions (keel: at most %d)", rank,
                           KEEL_MAX_DIMS);
    for (int i = 0; i < n; i++) {
        int ax = keel__axis(axes[i], rank);
        if (ax < 0 || pick[ax])
            return corrupt(im, "axis %" PRId64 " is out of range or "
                               "repeated",
                           axes[i]);
        pick[ax] = true;
    }
    if (!un && !given)
        for (int i = 0; i < a.ndim; i++) {
            int64_t s;
            if (!dstatic(a.d[i], &s))
                return unsupported(im, "squeezing every size-1 dimension "
                                   "of a shape with dynamic ones");
            pick[i] = s == 1;
        }
    for (int i = 0, j = 0; i < rank; i++) {
        if (un) {
            d[nd++] = pick[i] ? dS(1) : a.d[j++];
        } else if (!pick[i]) {
            d[nd++] = a.d[i];
        } else {
            int64_t s;
            if (dstatic(a.d[i], &s) && s != 1)
                return corrupt(im, "axis %d has size %" PRId64 ", not 1", i,
                               s);
        }
    }
    TRY(reshape_to(im, v, nd, d, &v));
    return bind(im, 0, v);
}

static keel_status imp_transpose(struct im *im)
{
    static const char *const known[] = {"perm", NULL};
    int64_t perm[KEEL_MAX_DIMS];
    bool seen[KEEL_MAX_DIMS] = {false};
    struct vinfo a, o;
    int n, v;

    TRY(check_attrs(im, known));
    TRY(in_val(im, 0, &v, &a));
    TRY(get_ints(im, "perm", perm, KEEL_MAX_DIMS, &n));
    if (n < 0) {
        n = a.ndim;
        for (int i = 0; i < n; i++)
            perm[i] = n - 1 - i;
    }
    if (n != a.ndim)
        return corrupt(im, "perm has %d entries for %d dimensions", n,
                       a.ndim);
    o = a;
    for (int i = 0; i < n; i++) {
        if (perm[i] < 0 || perm[i] >= n || seen[perm[i]])
            return corrupt(im, "perm is not a permutation");
        seen[perm[i]] = true;
        o.d[i] = a.d[perm[i]];
    }
    TRY(add_view(im, JIT_PERMUTE, v, perm, NULL, n, &o, &v));
    return bind(im, 0, v);
}

static keel_status imp_gather(struct im *im)
{
    static const char *const known[] = {"axis", NULL};
    int64_t axis;
    int in[2], ax, y;
    struct vinfo x, idx, o;
    struct ent *ic = NULL;
    keel_attr at = {.name = "axis", .type = KEEL_ATTR_INT};

    TRY(check_attrs(im, known));
    TRY(get_int(im, "axis", 0, &axis));
    TRY(in_val(im, 0, &in[0], &x));
    TRY(in_ent(im, 1, &ic));
    ax = keel__axis(axis, x.ndim);
    if (ax < 0)
        return corrupt(im, "axis %" PRId64 " for %d dimensions", axis,
                       x.ndim);
    if (ic->dtype != KEEL_I64 && ic->dtype != KEEL_I32 && ic->is_const)
        return corrupt(im, "indices are %s", keel_dtype_name(ic->dtype));
    /* Constant negative indices count from the end, as ONNX says. */
    if (ic->is_const && ic->value < 0) {
        int64_t n, numel = 1;
        bool neg = false;
        for (int i = 0; i < ic->ndim; i++)
            numel *= ic->dims[i];
        for (int64_t i = 0; i < numel; i++) {
            int64_t k = ic->dtype == KEEL_I64 ? ((int64_t *)ic->data)[i]
                                              : ((int32_t *)ic->data)[i];
            neg = neg || k < 0;
        }
        if (neg) {
            if (!dstatic(x.d[ax], &n))
                return unsupported(im, "negative indices along a dynamic "
                                       "axis");
            for (int64_t i = 0; i < numel; i++) {
                if (ic->dtype == KEEL_I64) {
                    int64_t *k = &((int64_t *)ic->data)[i];
                    *k += *k < 0 ? n : 0;
                } else {
                    int32_t *k = &((int32_t *)ic->data)[i];
                    *k += *k < 0 ? (int32_t)n : 0;
                }
            }
        }
    }
    TRY(in_val(im, 1, &in[1], &idx));
    if (idx.dt != KEEL_I64 && idx.dt != KEEL_I32)
        return corrupt(im, "indices are %s", keel_dtype_name(idx.dt));
    o.dt = x.dt;
    o.ndim = 0;
    for (int i = 0; i < ax; i++)
        o.d[o.ndim++] = x.d[i];
    if (o.ndim + idx.ndim + x.ndim - ax - 1 > KEEL_MAX_DIMS)
        return unsupported(im, "an output of more than %d dimensions",
                           KEEL_MAX_DIMS);
    for (int i = 0; i < idx.ndim; i++)
        o.d[o.ndim++] = idx.d[i];
    for (int i = ax + 1; i < x.ndim; i++)
        o.d[o.ndim++] = x.d[i];
    if (idx.ndim <= 1) {
        at.v.i = ax;
        TRY(op1v(im, KEEL_OP_GATHER, in, 2, &at, 1, &o, &y));
    } else if (ax == 0 && x.ndim == 2 && keel__dtype_is_float(x.dt)) {
        /* Rows of a table for a batch of ids: an embedding. */
        TRY(op1v(im, KEEL_OP_EMBEDDING, (int[]){in[1], in[0]}, 2, NULL, 0,
                 &o, &y));
    } else {
        return unsupported(im, "%d-D indices (keel gathers with 0-D or "
                               "1-D indices, or rows of a 2-D float table)",
                           idx.ndim);
    }
    return bind(im, 0, y);
}

static keel_status imp_concat(struct im *im)
{
    static const char *const known[] = {"axis", NULL};
    int64_t axis = INT64_MIN;
    int in[KEEL_MAX_OP_INPUTS], ax = -1, y;
    struct vinfo a, o;
    struct mono sum = {0, -1, 0, false};
    bool anyd = false;
    keel_attr at = {.name = "axis", .type = KEEL_ATTR_INT};

    TRY(check_attrs(im, known));
    TRY(get_int(im, "axis", INT64_MIN, &axis));
    if (axis == INT64_MIN)
        return corrupt(im, "attribute 'axis' is missing");
    if (im->nd->n_input < 1 || im->nd->n_input > KEEL_MAX_OP_INPUTS)
        return unsupported(im, "%zu inputs (1 to %d)", im->nd->n_input,
                           KEEL_MAX_OP_INPUTS);
    for (size_t k = 0; k < im->nd->n_input; k++) {
        TRY(in_val(im, k, &in[k], &a));
        if (k == 0) {
            o = a;
            ax = keel__axis(axis, a.ndim);
            if (ax < 0)
                return corrupt(im, "axis %" PRId64 " for %d dimensions",
                               axis, a.ndim);
        } else if (a.ndim != o.ndim || a.dt != o.dt) {
            return corrupt(im, "input %zu's rank or type differs", k);
        }
        for (int d = 0; d < a.ndim; d++) {
            int64_t x, y2;
            if (d != ax && dstatic(a.d[d], &x) && dstatic(o.d[d], &y2) &&
                x != y2)
                return corrupt(im, "input %zu's dimension %d differs", k, d);
            if (d != ax && o.d[d].sym == JIT_ANY)
                o.d[d] = a.d[d];
        }
        /* The sum along axis, in the symbols when it stays one. */
        if (a.d[ax].sym == JIT_ANY ||
            (a.d[ax].sym >= 0 && sum.pow && sum.sym != a.d[ax].sym))
            anyd = true;
        else if (a.d[ax].sym >= 0) {
            sum.sym = a.d[ax].sym;
            sum.pow = 1;
        }
        if (!anyd && (a.d[ax].sym == JIT_STATIC || !sum.pow ||
                      a.d[ax].sym == sum.sym)) {
            /* static and symbolic parts cannot mix */
        }
    }
    /* Static sum, or a sum of multiples of one symbol. */
    {
        int64_t st = 0, sy = 0;
        bool mixed = false;
        for (size_t k = 0; k < im->nd->n_input; k++) {
            struct jit_dim dd = im->g->val[in[k]].dim[ax];
            if (dd.sym == JIT_STATIC)
                st += dd.mul;
            else if (dd.sym >= 0 && (sy == 0 || dd.sym == sum.sym))
                sy += dd.mul;
            else
                mixed = true;
        }
        if (anyd || mixed || (st && sy))
            o.d[ax] = dA();
        else if (sy)
            o.d[ax] = (struct jit_dim){sum.sym, sy};
        else
            o.d[ax] = dS(st);
    }
    at.v.i = ax;
    TRY(op1v(im, KEEL_OP_CONCAT, in, (int)im->nd->n_input, &at, 1, &o, &y));
    return bind(im, 0, y);
}

/* A constant entry for node output 0 from host data (taken). */
static keel_status define_const(struct im *im, keel_dtype dt, int ndim,
                                const int64_t *dims, void *data,
                                size_t bytes)
{
    struct ent *e;
    keel_status st;

    if (im->nd->n_output < 1 || !im->nd->output[0] || !*im->nd->output[0]) {
        free(data);
        return corrupt(im, "a constant without an output name");
    }
    st = define(im, im->nd->output[0], "output", &e);
    if (st != KEEL_STATUS_OK) {
        free(data);
        return st;
    }
    e->is_const = true;
    e->dtype = dt;
    e->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        e->dims[i] = dims[i];
    e->data = data;
    e->bytes = bytes;
    return KEEL_STATUS_OK;
}

static keel_status imp_constant(struct im *im)
{
    static const char *const known[] = {"value", "value_float",
                                        "value_floats", "value_int",
                                        "value_ints", NULL};
    const Onnx__AttributeProto *a;
    struct ent tmpc;
    void *data;
    int64_t n;

    if (im->nd->n_attribute != 1)
        return corrupt(im, "a Constant has exactly one attribute");
    a = im->nd->attribute[0];
    if (check_attrs(im, known) != KEEL_STATUS_OK)
        return unsupported(im, "a Constant of attribute '%.40s' (keel "
                               "takes tensors, floats and ints)",
                           a->name ? a->name : "");
    memset(&tmpc, 0, sizeof(tmpc));
    if (!strcmp(a->name, "value")) {
        if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR ||
            !a->t)
            return corrupt(im, "'value' is not a tensor");
        TRY(decode_tensor(im, a->t, "tensor", &tmpc));
        return define_const(im, tmpc.dtype, tmpc.ndim, tmpc.dims, tmpc.data,
                            tmpc.bytes);
    }
    if (!strcmp(a->name, "value_float") || !strcmp(a->name, "value_int")) {
        bool f = a->name[6] == 'f';
        if ((int)a->type != (f ? ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT
                               : ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT))
            return corrupt(im, "'%s' has the wrong type", a->name);
        data = malloc(8);
        if (!data)
            return oom();
        if (f)
            memcpy(data, &a->f, 4);
        else
            memcpy(data, &a->i, 8);
        return define_const(im, f ? KEEL_F32 : KEEL_I64, 0, NULL, data,
                            f ? 4 : 8);
    }
    {
        bool f = a->name[6] == 'f';
        if ((int)a->type !=
            (f ? ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS
               : ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS))
            return corrupt(im, "'%s' has the wrong type", a->name);
        n = f ? (int64_t)a->n_floats : (int64_t)a->n_ints;
        data = malloc(n ? (size_t)n * (f ? 4 : 8) : 1);
        if (!data)
            return oom();
        if (n)
            memcpy(data, f ? (void *)a->floats : (void *)a->ints,
                   (size_t)n * (f ? 4 : 8));
        return define_const(im, f ? KEEL_F32 : KEEL_I64, 1, &n, data,
                            (size_t)n * (f ? 4 : 8));
    }
}

static keel_status imp_constant_of_shape(struct im *im)
{
    static const char *const known[] = {"value", NULL};
    const Onnx__AttributeProto *a;
    int64_t shape[KEEL_MAX_DIMS];
    struct ent *c, val;
    double v = 0;
    keel_dtype dt = KEEL_F32;
    struct vinfo o;
    int n, y;
    keel_attr attrs[3];

    TRY(check_attrs(im, known));
    TRY(in_const(im, 0, &c));
    TRY(const_ints(im, c, "the shape", shape, KEEL_MAX_DIMS, &n));
    TRY(attr_typed(im, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR,
                   &a));
    if (a) {
        memset(&val, 0, sizeof(val));
        val.name = "value";
        if (!a->t)
            return corrupt(im, "'value' holds no tensor");
        TRY(decode_tensor(im, a->t, "value", &val));
        dt = val.dtype;
        {
            keel_status st = const_scalar(im, &val, "value", &v);
            free(val.data);
            if (st != KEEL_STATUS_OK)
                return st;
        }
    }
    o.dt = dt;
    o.ndim = n;
    for (int i = 0; i < n; i++) {
        if (shape[i] < 0)
            return corrupt(im, "shape[%d] = %" PRId64, i, shape[i]);
        o.d[i] = dS(shape[i]);
    }
    attrs[0] = (keel_attr){.name = "shape", .type = KEEL_ATTR_INTS,
                           .v.ints = {shape, n}};
    attrs[1] = (keel_attr){.name = "dtype", .type = KEEL_ATTR_DTYPE,
                           .v.i = dt};
    attrs[2] = (keel_attr){.name = "value", .type = KEEL_ATTR_FLOAT,
                           .v.f = v};
    TRY(op1v(im, KEEL_OP_FULL, NULL, 0, attrs, 3, &o, &y));
    return bind(im, 0, y);
}

static keel_status imp_shape(struct im *im)
{
    static const char *const known[] = {"start", "end", NULL};
    int64_t start, end, *data, n;
    struct vinfo a;
    int v;

    TRY(check_attrs(im, known));
    TRY(in_val(im, 0, &v, &a));
    TRY(get_int(im, "start", 0, &start));
    TRY(get_int(im, "end", INT64_MAX, &end));
    start = start < 0 ? start + a.ndim : start;
    end = end < 0 ? end + a.ndim : end;
    start = start < 0 ? 0 : start > a.ndim ? a.ndim : start;
    end = end < 0 ? 0 : end > a.ndim ? a.ndim : end;
    n = end > start ? end - start : 0;
    data = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!data)
        return oom();
    for (int64_t i = 0; i < n; i++)
        if (!dstatic(a.d[start + i], &data[i])) {
            free(data);
            return unsupported(im, "the shape of a value with dynamic "
                                   "dimensions (a shape computed when the "
                                   "graph runs)");
        }
    return define_const(im, KEEL_I64, 1, &n, data,
                        sizeof(int64_t) * (size_t)n);
}

static keel_status imp_pow(struct im *im)
{
    return imp_elementwise(im, KEEL_OP_POW);
}

static keel_status imp_clip(struct im *im)
{
    double lo = -INFINITY, hi = INFINITY;
    struct vinfo a;
    keel_attr attrs[2];
    int v;

    TRY(check_attrs(im, no_attrs));
    TRY(in_val(im, 0, &v, &a));
    for (size_t k = 1; k < 3; k++)
        if (has_in(im, k)) {
            struct ent *c;
            TRY(in_const(im, k, &c));
            if (c->dtype != a.dt)
                return corrupt(im, "bound %zu is %s, the input %s", k,
                               keel_dtype_name(c->dtype),
                               keel_dtype_name(a.dt));
            TRY(const_scalar(im, c, k == 1 ? "min" : "max",
                             k == 1 ? &lo : &hi));
        }
    if (isnan(lo) || isnan(hi) || lo > hi)
        return unsupported(im, "bounds min %g > max %g or NaN", lo, hi);
    attrs[0] = (keel_attr){.name = "min", .type = KEEL_ATTR_FLOAT,
                           .v.f = lo};
    attrs[1] = (keel_attr){.name = "max", .type = KEEL_ATTR_FLOAT,
                           .v.f = hi};
    TRY(op1v(im, KEEL_OP_CLIP, &v, 1, attrs, 2, &a, &v));
    return bind(im, 0, v);
}

static keel_status imp_slice(struct im *im)
{
    int64_t st[KEEL_MAX_DIMS], en[KEEL_MAX_DIMS], ax[KEEL_MAX_DIMS],
        sp[KEEL_MAX_DIMS];
    int n, n2, n3, n4, v;
    struct ent *c;
    struct vinfo a;

    TRY(check_attrs(im, no_attrs));
    TRY(in_val(im, 0, &v, &a));
    TRY(in_const(im, 1, &c));
    TRY(const_ints(im, c, "starts", st, KEEL_MAX_DIMS, &n));
    TRY(in_const(im, 2, &c));
    TRY(const_ints(im, c, "ends", en, KEEL_MAX_DIMS, &n2));
    n3 = n4 = n;
    for (int i = 0; i < n; i++) {
        ax[i] = i;
        sp[i] = 1;
    }
    if (has_in(im, 3)) {
        TRY(in_const(im, 3, &c));
        TRY(const_ints(im, c, "axes", ax, KEEL_MAX_DIMS, &n3));
    }
    if (has_in(im, 4)) {
        TRY(in_const(im, 4, &c));
        TRY(const_ints(im, c, "steps", sp, KEEL_MAX_DIMS, &n4));
    }
    if (n2 != n || n3 != n || n4 != n)
        return corrupt(im, "starts, ends, axes and steps differ in length");
    for (int i = 0; i < n; i++) {
        int axis = keel__axis(ax[i], a.ndim);
        int64_t len, h, s = st[i], e = en[i];
        struct vinfo o;
        int64_t p[4];

        if (axis < 0 || sp[i] == 0)
            return corrupt(im, "axis %" PRId64 " or step %" PRId64, ax[i],
                           sp[i]);
        for (int j = 0; j < i; j++)
            if (keel__axis(ax[j], a.ndim) == axis)
                return corrupt(im, "axis %d is sliced twice", axis);
        vget(im, v, &o);
        if (dstatic(o.d[axis], &h)) {
            /* ONNX clamps a start before the first element to it. */
            if (sp[i] < 0 && s < -h)
                s = 0;
            if (sp[i] > 0) {
                int64_t b = s < 0 ? (s + h < 0 ? 0 : s + h) : (s > h ? h : s);
                int64_t f = e < 0 ? (e + h < 0 ? 0 : e + h) : (e > h ? h : e);
                len = f > b ? (f - b - 1) / sp[i] + 1 : 0;
            } else {
                int64_t b = s < 0 ? s + h : (s >= h ? h - 1 : s);
                int64_t f = e < 0 ? (e + h < 0 ? -1 : e + h)
                                  : (e >= h ? h - 1 : e);
                len = b > f ? (b - f - 1) / (-sp[i]) + 1 : 0;
            }
            o.d[axis] = dS(len);
        } else if (sp[i] < 0 && s < 0) {
            return unsupported(im, "a reversed slice from a negative start "
                                   "along a dynamic axis");
        } else if (s == 0 && sp[i] == 1 && e >= INT32_MAX) {
            /* the whole axis: the dimension stays */
        } else {
            o.d[axis] = dA();
        }
        p[0] = axis;
        p[1] = s;
        p[2] = e;
        p[3] = sp[i];
        TRY(add_view(im, JIT_SLICE, v, p, NULL, 4, &o, &v));
    }
    if (n == 0)
        return imp_identity(im);
    return bind(im, 0, v);
}

static keel_status imp_expand(struct im *im)
{
    int64_t shape[KEEL_MAX_DIMS];
    struct jit_dim pd[KEEL_MAX_DIMS];
    struct ent *c;
    struct vinfo a, o;
    int n, v, r;

    TRY(check_attrs(im, no_attrs));
    TRY(in_val(im, 0, &v, &a));
    TRY(in_const(im, 1, &c));
    TRY(const_ints(im, c, "the shape", shape, KEEL_MAX_DIMS, &n));
    r = n > a.ndim ? n : a.ndim;
    o.dt = a.dt;
    o.ndim = r;
    for (int i = 0; i < r; i++) {
        int j = i - (r - a.ndim), k = i - (r - n);
        struct jit_dim in = j >= 0 ? a.d[j] : dS(1);
        int64_t t = k >= 0 ? shape[k] : 1, s;

        if (t < 0)
            return corrupt(im, "shape[%d] = %" PRId64, k, t);
        if (t == 1) {
            /* ONNX broadcasts: the input's size stays. */
            pd[i] = j >= 0 ? dA() : dS(1);
            o.d[i] = in;
        } else if (dstatic(in, &s) && s != 1 && s != t) {
            return corrupt(im, "dimension %d: %" PRId64 " does not "
                               "broadcast to %" PRId64,
                           i, s, t);
        } else {
            pd[i] = dS(t);
            o.d[i] = dS(t);
        }
    }
    TRY(add_view(im, JIT_EXPAND, v, NULL, pd, r, &o, &v));
    return bind(im, 0, v);
}

static keel_status imp_tile(struct im *im)
{
    int64_t reps[KEEL_MAX_DIMS];
    struct ent *c;
    struct vinfo a, o;
    keel_attr at = {.name = "repeat_times", .type = KEEL_ATTR_INTS};
    int n, v;

    TRY(check_attrs(im, no_attrs));
    TRY(in_val(im, 0, &v, &a));
    TRY(in_const(im, 1, &c));
    TRY(const_ints(im, c, "repeats", reps, KEEL_MAX_DIMS, &n));
    if (n != a.ndim)
        return corrupt(im, "%d repeats for %d dimensions", n, a.ndim);
    o = a;
    for (int i = 0; i < n; i++) {
        struct mono m = {1, -1, 0, false};
        if (reps[i] < 0)
            return corrupt(im, "repeats[%d] = %" PRId64, i, reps[i]);
        mono_mul(&m, a.d[i]);
        mono_mul(&m, dS(reps[i]));
        o.d[i] = mono_dim(m);
    }
    at.v.ints.data = reps;
    at.v.ints.count = n;
    TRY(op1v(im, KEEL_OP_TILE, &v, 1, &at, 1, &o, &v));
    return bind(im, 0, v);
}

static keel_status imp_pad(struct im *im)
{
    static const char *const known[] = {"mode", NULL};
    int64_t pads[2 * KEEL_MAX_DIMS], axes[KEEL_MAX_DIMS], kp[2 * KEEL_MAX_DIMS];
    char mode[16];
    double value = 0;
    struct ent *c;
    struct vinfo a, o;
    keel_attr attrs[3];
    int n, na, v;

    TRY(check_attrs(im, known));
    TRY(get_str(im, "mode", "constant", mode, sizeof(mode)));
    if (strcmp(mode, "constant") && strcmp(mode, "reflect") &&
        strcmp(mode, "edge"))
        return unsupported(im, "mode '%s'", mode);
    TRY(in_val(im, 0, &v, &a));
    TRY(in_const(im, 1, &c));
    TRY(const_ints(im, c, "pads", pads, 2 * KEEL_MAX_DIMS, &n));
    if (has_in(im, 2)) {
        TRY(in_const(im, 2, &c));
        if (c->dtype != a.dt)
            return corrupt(im, "constant_value is %s, the input %s",
                           keel_dtype_name(c->dtype), keel_dtype_name(a.dt));
        TRY(const_scalar(im, c, "constant_value", &value));
    }
    na = a.ndim;
    for (int i = 0; i < a.ndim; i++)
        axes[i] = i;
    if (has_in(im, 3)) {
        TRY(in_const(im, 3, &c));
        TRY(const_ints(im, c, "axes", axes, KEEL_MAX_DIMS, &na));
    }
    if (n != 2 * na)
        return corrupt(im, "%d pads for %d axes", n, na);
    for (int i = 0; i < 2 * a.ndim; i++)
        kp[i] = 0;
    o = a;
    for (int i = 0; i < na; i++) {
        int ax = keel__axis(axes[i], a.ndim);
        struct mono m = {0, -1, 0, false};
        if (ax < 0)
            return corrupt(im, "axis %" PRId64, axes[i]);
        if (pads[i] < 0 || pads[i + na] < 0)
            return unsupported(im, "negative pads (cropping)");
        kp[2 * ax] = pads[i];
        kp[2 * ax + 1] = pads[i + na];
        if (a.d[ax].sym == JIT_STATIC)
            o.d[ax] = dS(a.d[ax].mul + pads[i] + pads[i + na]);
        else if (pads[i] + pads[i + na] != 0)
            o.d[ax] = dA();
        (void)m;
    }
    attrs[0] = (keel_attr){.name = "pad", .type = KEEL_ATTR_INTS,
                           .v.ints = {kp, 2 * a.ndim}};
    attrs[1] = (keel_attr){.name = "mode", .type = KEEL_ATTR_STRING,
                           .v.s = !strcmp(mode, "edge") ? "replicate"
                                                        : mode};
    attrs[2] = (keel_attr){.name = "value", .type = KEEL_ATTR_FLOAT,
                           .v.f = value};
    TRY(op1v(im, KEEL_OP_PAD, &v, 1, attrs, 3, &o, &v));
    return bind(im, 0, v);
}

static keel_status imp_split(struct im *im)
{
    static const char *const known[] = {"axis", "split", "num_outputs",
                                        NULL};
    int64_t axis, sizes[KEEL_MAX_OP_OUTPUTS], numo, h;
    int n = -1, v, ax, ids[KEEL_MAX_OP_OUTPUTS];
    size_t nout = im->nd->n_output;
    struct vinfo a, o[KEEL_MAX_OP_OUTPUTS];
    keel_attr attrs[2];

    TRY(check_attrs(im, known));
    TRY(get_int(im, "axis", 0, &axis));
    TRY(get_int(im, "num_outputs", 0, &numo));
    TRY(in_val(im, 0, &v, &a));
    ax = keel__axis(axis, a.ndim);
    if (ax < 0)
        return corrupt(im, "axis %" PRId64, axis);
    if (nout < 1 || nout > KEEL_MAX_OP_OUTPUTS)
        return unsupported(im, "%zu outputs", nout);
    if (has_in(im, 1)) {
        struct ent *c;
        TRY(in_const(im, 1, &c));
        TRY(const_ints(im, c, "split", sizes, KEEL_MAX_OP_OUTPUTS, &n));
    } else if (im->opset < 13) {
        TRY(get_ints(im, "split", sizes, KEEL_MAX_OP_OUTPUTS, &n));
    }
    if (n < 0) {
        /* Equal pieces (the last smaller with num_outputs). */
        int64_t chunk;
        if (!dstatic(a.d[ax], &h))
            return unsupported(im, "equal pieces of a dynamic axis");
        chunk = (h + (int64_t)nout - 1) / (int64_t)nout;
        if (!numo && h % (int64_t)nout)
            return corrupt(im, "%" PRId64 " does not split into %zu equal "
                               "pieces",
                           h, nout);
        for (size_t j = 0; j < nout; j++) {
            int64_t left = h - chunk * (int64_t)j;
            sizes[j] = left < chunk ? (left < 0 ? 0 : left) : chunk;
        }
        n = (int)nout;
    }
    if ((size_t)n != nout)
        return corrupt(im, "%d sizes for %zu outputs", n, nout);
    {
        int64_t tot = 0;
        for (int j = 0; j < n; j++) {
            if (sizes[j] < 0)
                return corrupt(im, "split size %" PRId64, sizes[j]);
            tot += sizes[j];
        }
        if (dstatic(a.d[ax], &h) && h != tot)
            return corrupt(im, "sizes add up to %" PRId64 ", the axis has %"
                               PRId64,
                           tot, h);
    }
    for (int j = 0; j < n; j++) {
        o[j] = a;
        o[j].d[ax] = dS(sizes[j]);
    }
    attrs[0] = (keel_attr){.name = "sections", .type = KEEL_ATTR_INTS,
                           .v.ints = {sizes, n}};
    attrs[1] = (keel_attr){.name = "axis", .type = KEEL_ATTR_INT,
                           .v.i = ax};
    TRY(add_op(im, KEEL_OP_SPLIT, &v, 1, attrs, 2, n, o, ids));
    for (int j = 0; j < n; j++)
        TRY(bind(im, (size_t)j, ids[j]));
    return KEEL_STATUS_OK;
}

static keel_status imp_node(struct im *im)
{
    static const char *const alpha[] = {"alpha", NULL};
    static const char *const approx[] = {"approximate", NULL};
    const char *op = im->nd->op_type ? im->nd->op_type : "";
    int o = im->opset;

    if (im->nd->domain && *im->nd->domain && strcmp(im->nd->domain, "ai.onnx"))
        return unsupported(im, "op '%.40s' of domain '%.60s' (keel maps the "
                               "default domain)",
                           op, im->nd->domain);
    if (!strcmp(op, "Conv"))
        return imp_conv(im);
    if (!strcmp(op, "Gemm"))
        return imp_gemm(im);
    if (!strcmp(op, "MatMul"))
        return imp_matmul(im);
    if (!strcmp(op, "Add"))
        return imp_elementwise(im, KEEL_OP_ADD);
    if (!strcmp(op, "Sub"))
        return imp_elementwise(im, KEEL_OP_SUBTRACT);
    if (!strcmp(op, "Mul"))
        return imp_elementwise(im, KEEL_OP_MULTIPLY);
    if (!strcmp(op, "Div"))
        return imp_elementwise(im, KEEL_OP_DIVIDE);
    if (!strcmp(op, "Pow"))
        return imp_pow(im);
    if (!strcmp(op, "Equal"))
        return imp_elementwise(im, KEEL_OP_EQUAL);
    if (!strcmp(op, "Less"))
        return imp_elementwise(im, KEEL_OP_LESS);
    if (!strcmp(op, "LessOrEqual"))
        return imp_elementwise(im, KEEL_OP_LESS_EQUAL);
    if (!strcmp(op, "Greater"))
        return imp_elementwise(im, KEEL_OP_GREATER);
    if (!strcmp(op, "GreaterOrEqual"))
        return imp_elementwise(im, KEEL_OP_GREATER_EQUAL);
    if (!strcmp(op, "And"))
        return imp_elementwise(im, KEEL_OP_LOGICAL_AND);
    if (!strcmp(op, "Or"))
        return imp_elementwise(im, KEEL_OP_LOGICAL_OR);
    if (!strcmp(op, "Xor"))
        return imp_elementwise(im, KEEL_OP_LOGICAL_XOR);
    if (!strcmp(op, "Where"))
        return imp_elementwise(im, KEEL_OP_WHERE);
    if (!strcmp(op, "Max"))
        return imp_minmax(im, KEEL_OP_MAXIMUM);
    if (!strcmp(op, "Min"))
        return imp_minmax(im, KEEL_OP_MINIMUM);
    if (!strcmp(op, "Relu"))
        return imp_unary(im, KEEL_OP_RELU, no_attrs);
    if (!strcmp(op, "Sigmoid"))
        return imp_unary(im, KEEL_OP_SIGMOID, no_attrs);
    if (!strcmp(op, "Tanh"))
        return imp_unary(im, KEEL_OP_TANH, no_attrs);
    if (!strcmp(op, "Sqrt"))
        return imp_unary(im, KEEL_OP_SQRT, no_attrs);
    if (!strcmp(op, "Exp"))
        return imp_unary(im, KEEL_OP_EXP, no_attrs);
    if (!strcmp(op, "Log"))
        return imp_unary(im, KEEL_OP_LOG, no_attrs);
    if (!strcmp(op, "Neg"))
        return imp_unary(im, KEEL_OP_NEG, no_attrs);
    if (!strcmp(op, "Abs"))
        return imp_unary(im, KEEL_OP_ABS, no_attrs);
    if (!strcmp(op, "Sign"))
        return imp_unary(im, KEEL_OP_SIGN, no_attrs);
    if (!strcmp(op, "Sin"))
        return imp_unary(im, KEEL_OP_SIN, no_attrs);
    if (!strcmp(op, "Cos"))
        return imp_unary(im, KEEL_OP_COS, no_attrs);
    if (!strcmp(op, "Floor"))
        return imp_unary(im, KEEL_OP_FLOOR, no_attrs);
    if (!strcmp(op, "Ceil"))
        return imp_unary(im, KEEL_OP_CEIL, no_attrs);
    if (!strcmp(op, "Not"))
        return imp_unary(im, KEEL_OP_LOGICAL_NOT, no_attrs);
    if (!strcmp(op, "HardSwish"))
        return imp_unary(im, KEEL_OP_HARDSWISH, no_attrs);
    if (!strcmp(op, "LeakyRelu"))
        return imp_unary(im, KEEL_OP_LEAKY_RELU, alpha);
    if (!strcmp(op, "Elu"))
        return imp_unary(im, KEEL_OP_ELU, alpha);
    if (!strcmp(op, "Gelu") && o >= 20)
        return imp_unary(im, KEEL_OP_GELU, approx);
    if (!strcmp(op, "Reciprocal"))
        return imp_reciprocal(im);
    if (!strcmp(op, "Softmax"))
        return imp_softmax(im, KEEL_OP_SOFTMAX);
    if (!strcmp(op, "LogSoftmax"))
        return imp_softmax(im, KEEL_OP_LOG_SOFTMAX);
    if (!strcmp(op, "MaxPool"))
        return imp_pool(im, false);
    if (!strcmp(op, "AveragePool"))
        return imp_pool(im, true);
    if (!strcmp(op, "GlobalAveragePool"))
        return imp_global_pool(im, KEEL_OP_MEAN);
    if (!strcmp(op, "GlobalMaxPool"))
        return imp_global_pool(im, KEEL_OP_MAX);
    if (!strcmp(op, "BatchNormalization"))
        return imp_batch_norm(im);
    if (!strcmp(op, "LayerNormalization") && o >= 17)
        return imp_layer_norm(im);
    if (!strcmp(op, "Reshape"))
        return imp_reshape(im);
    if (!strcmp(op, "Flatten"))
        return imp_flatten(im);
    if (!strcmp(op, "Transpose"))
        return imp_transpose(im);
    if (!strcmp(op, "Squeeze"))
        return imp_squeeze(im, false);
    if (!strcmp(op, "Unsqueeze"))
        return imp_squeeze(im, true);
    if (!strcmp(op, "Gather"))
        return imp_gather(im);
    if (!strcmp(op, "Concat"))
        return imp_concat(im);
    if (!strcmp(op, "Constant"))
        return imp_constant(im);
    if (!strcmp(op, "ConstantOfShape"))
        return imp_constant_of_shape(im);
    if (!strcmp(op, "Shape"))
        return imp_shape(im);
    if (!strcmp(op, "Identity"))
        return check_attrs(im, no_attrs) == KEEL_STATUS_OK
                   ? imp_identity(im)
                   : keel_last_status();
    if (!strcmp(op, "Dropout"))
        return imp_dropout(im);
    if (!strcmp(op, "Cast"))
        return imp_cast(im);
    if (!strcmp(op, "ReduceMean"))
        return imp_reduce(im, KEEL_OP_MEAN, o >= 18);
    if (!strcmp(op, "ReduceSum"))
        return imp_reduce(im, KEEL_OP_SUM, o >= 13);
    if (!strcmp(op, "ReduceMax"))
        return imp_reduce(im, KEEL_OP_MAX, o >= 18);
    if (!strcmp(op, "ReduceMin"))
        return imp_reduce(im, KEEL_OP_MIN, o >= 18);
    if (!strcmp(op, "ReduceProd"))
        return imp_reduce(im, KEEL_OP_PROD, o >= 18);
    if (!strcmp(op, "ArgMax"))
        return imp_argmax(im, KEEL_OP_ARGMAX);
    if (!strcmp(op, "ArgMin"))
        return imp_argmax(im, KEEL_OP_ARGMIN);
    if (!strcmp(op, "Clip"))
        return imp_clip(im);
    if (!strcmp(op, "Slice"))
        return imp_slice(im);
    if (!strcmp(op, "Expand"))
        return imp_expand(im);
    if (!strcmp(op, "Tile"))
        return imp_tile(im);
    if (!strcmp(op, "Pad"))
        return imp_pad(im);
    if (!strcmp(op, "Split"))
        return imp_split(im);
    return unsupported(im, "ONNX op '%.40s' has no keel mapping "
                           "(docs/inference.md, \"ONNX\", lists the ops "
                           "keel imports)",
                       op);
}

/* ---- the model ---------------------------------------------------------------- */

/* A graph input's dimension: a size, a dim_param ("name" or "k*name",
 * a symbol) or unknown. */
static keel_status input_dim(struct im *im, const char *in,
                             const Onnx__TensorShapeProto__Dimension *dm,
                             struct jit_dim *d)
{
    const char *s, *star;
    int64_t k = 1;
    int sym;

    *d = dA();
    if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
        if (dm->dim_value < 0)
            return corrupt(im, "input '%.80s' has dimension %" PRId64, in,
                           dm->dim_value);
        *d = dS(dm->dim_value);
        return KEEL_STATUS_OK;
    }
    if (dm->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM ||
        !dm->dim_param || !*dm->dim_param)
        return KEEL_STATUS_OK;
    s = dm->dim_param;
    star = strchr(s, '*');
    if (star) {
        char *end;
        errno = 0;
        long long m = strtoll(s, &end, 10);
        if (end != star || errno || m < 1 || !star[1] || strchr(star + 1, '*'))
            return unsupported(im, "input '%.80s': dim_param '%.60s' is not "
                                   "a name or <k>*<name>",
                               in, s);
        k = m;
        s = star + 1;
    }
    if (strlen(s) > 63)
        return unsupported(im, "input '%.80s': dim_param '%.60s...' is "
                               "longer than 63 characters",
                           in, s);
    sym = keel__graph_add_symbol(im->g, s);
    if (sym < 0)
        return unsupported(im, "more than %d dimension symbols",
                           KEEL_JIT_MAX_SYMBOLS);
    d->sym = sym;
    d->mul = k;
    return KEEL_STATUS_OK;
}

static keel_status read_tensor_type(struct im *im, const Onnx__ValueInfoProto *vi,
                                    const char *what, keel_dtype *dt,
                                    const Onnx__TensorShapeProto **shape)
{
    const Onnx__TypeProto *tp = vi->type;
    const Onnx__TypeProto__Tensor *tt;

    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ||
        !tp->tensor_type)
        return unsupported(im, "%s '%.80s' is not a tensor", what,
                           vi->name);
    tt = tp->tensor_type;
    if (!tt->has_elem_type || !keel_type(tt->elem_type, dt))
        return tt->has_elem_type && known_onnx_type(tt->elem_type)
                   ? unsupported(im, "%s '%.80s' is %s, which keel has no "
                                     "dtype for",
                                 what, vi->name,
                                 onnx_type_name(tt->elem_type))
                   : corrupt(im, "%s '%.80s' has no valid element type",
                             what, vi->name);
    *shape = tt->shape;
    if (tt->shape && tt->shape->n_dim > KEEL_MAX_DIMS)
        return unsupported(im, "%s '%.80s' has %zu dimensions (keel: at "
                               "most %d)",
                           what, vi->name, tt->shape->n_dim, KEEL_MAX_DIMS);
    return KEEL_STATUS_OK;
}

static keel_status read_inputs(struct im *im, const Onnx__GraphProto *gp)
{
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gp->input[i];
        const Onnx__TensorShapeProto *sh;
        struct jit_dim d[KEEL_MAX_DIMS];
        struct ent *e;
        keel_dtype dt;
        int v;

        if (!vi->name || !*vi->name)
            return corrupt(im, "graph input %zu has no name", i);
        e = lookup(im, vi->name);
        if (e && e->is_const && e->value < 0 && !e->ndim && false)
            continue;
        if (e && e->is_const)
            continue; /* an initializer's default: keel keeps the value */
        TRY(read_tensor_type(im, vi, "input", &dt, &sh));
        if (!sh)
            return unsupported(im, "input '%.80s' has no shape (keel needs "
                                   "the rank)",
                               vi->name);
        for (size_t k = 0; k < sh->n_dim; k++)
            TRY(input_dim(im, vi->name, sh->dim[k], &d[k]));
        TRY(define(im, vi->name, "graph input", &e));
        v = keel__graph_add_value(im->g, JIT_INPUT, dt, (int)sh->n_dim, d);
        if (v < 0)
            return keel_last_status();
        im->g->val[v].name = strdup(vi->name);
        if (!im->g->val[v].name)
            return oom();
        TRY(keel__graph_add_input(im->g, v));
        e->value = v;
    }
    if (im->g->nin < 1)
        return unsupported(im, "the graph has no inputs");
    return KEEL_STATUS_OK;
}

/* A graph output: defined, of the declared type, its static dimensions
 * agreeing with what the nodes make. */
static keel_status read_output(struct im *im, const Onnx__ValueInfoProto *vi,
                               size_t i)
{
    const Onnx__TensorShapeProto *sh;
    struct ent *e;
    keel_dtype dt;
    struct jit_value *val;
    int v;

    if (!vi->name || !*vi->name)
        return corrupt(im, "graph output %zu has no name", i);
    e = lookup(im, vi->name);
    if (!e)
        return corrupt(im, "graph output '%.80s' is not defined by any "
                           "node, input or initializer",
                       vi->name);
    TRY(read_tensor_type(im, vi, "output", &dt, &sh));
    if (e->value < 0)
        TRY(materialize(im, e, &v));
    v = e->value;
    val = &im->g->val[v];
    if (val->dtype != dt)
        return corrupt(im, "graph output '%.80s' is declared %s; the graph "
                           "makes %s",
                       vi->name, keel_dtype_name(dt),
                       keel_dtype_name(val->dtype));
    if (sh && (int)sh->n_dim != val->ndim)
        return corrupt(im, "graph output '%.80s' is declared with %zu "
                           "dimensions; the graph makes %d",
                       vi->name, sh->n_dim, val->ndim);
    for (size_t k = 0; sh && k < sh->n_dim; k++) {
        const Onnx__TensorShapeProto__Dimension *dm = sh->dim[k];
        int64_t n;

        if (dm->value_case !=
            ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
            continue;
        if (dstatic(val->dim[k], &n) && n != dm->dim_value)
            return corrupt(im, "graph output '%.80s' dimension %zu is "
                               "declared %" PRId64 "; the graph makes %" PRId64,
                           vi->name, k, dm->dim_value, n);
        if (val->dim[k].sym == JIT_ANY && dm->dim_value >= 0 &&
            val->kind == JIT_NODE)
            val->dim[k] = dS(dm->dim_value); /* checked when it runs */
    }
    for (size_t j = 0; j < i; j++)
        if (!strcmp(im->g->out_name[j], vi->name))
            return corrupt(im, "graph output '%.80s' is listed twice",
                           vi->name);
    return keel__graph_add_output(im->g, v, vi->name);
}

static keel_status read_model(struct im *im, const Onnx__ModelProto *m)
{
    const Onnx__GraphProto *gp = m->graph;
    bool have_default = false;

    if (!m->has_ir_version || m->ir_version < 3)
        return corrupt(im, "IR version %" PRId64 " (keel reads 3 and newer; "
                           "the field must be present)",
                       m->has_ir_version ? m->ir_version : (int64_t)0);
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        if (o->domain && *o->domain && strcmp(o->domain, "ai.onnx"))
            continue;
        if (have_default)
            return corrupt(im, "the default domain is imported twice");
        if (!o->has_version)
            return corrupt(im, "the default domain's opset has no version");
        if (o->version < IMPORT_OPSET_MIN || o->version > IMPORT_OPSET_MAX)
            return unsupported(im, "opset %" PRId64 " (keel imports opsets "
                                   "%d to %d)",
                               o->version, IMPORT_OPSET_MIN,
                               IMPORT_OPSET_MAX);
        im->opset = (int)o->version;
        have_default = true;
    }
    if (!have_default)
        return corrupt(im, "no default-domain opset is imported");
    if (!gp)
        return corrupt(im, "the model has no graph");
    if (gp->n_sparse_initializer)
        return unsupported(im, "sparse initializers");
    if (gp->n_node > (1u << 24) || gp->n_initializer > (1u << 24))
        return unsupported(im, "more than %u nodes or initializers",
                           1u << 24);
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *t = gp->initializer[i];
        struct ent *e;
        TRY(define(im, t->name, "initializer", &e));
        e->is_const = true;
        TRY(decode_tensor(im, t, "initializer", e));
    }
    TRY(read_inputs(im, gp));
    for (size_t i = 0; i < gp->n_node; i++) {
        im->node = (int)i;
        im->nd = gp->node[i];
        for (size_t k = 0; k < im->nd->n_input; k++)
            if (!im->nd->input[k])
                return corrupt(im, "input %zu has no name", k);
        TRY(imp_node(im));
    }
    im->nd = NULL;
    if (gp->n_output < 1)
        return corrupt(im, "the graph has no outputs");
    for (size_t i = 0; i < gp->n_output; i++)
        TRY(read_output(im, gp->output[i], i));
    return keel__graph_finish(im->g);
}

keel_status keel_onnx_import(const char *path, const char *device,
                             keel_graph **out)
{
    struct im im;
    Onnx__ModelProto *m = NULL;
    uint8_t *buf = NULL;
    FILE *f = NULL;
    long len = 0;
    keel_status st;

    if (!path || !*path || !out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_onnx_import: %s",
                           out ? "no path" : "out is NULL");
    *out = NULL;
    if (!little_endian())
        return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                           "keel_onnx_import: ONNX stores little-endian "
                           "data; this host is big-endian");
    memset(&im, 0, sizeof(im));
    im.path = path;
    im.device = device;
    im.node = -1;
    f = fopen(path, "rb");
    if (!f)
        return keel__error(errno == ENOENT ? KEEL_STATUS_NOT_FOUND
                                           : KEEL_STATUS_IO_ERROR,
                           "keel_onnx_import: cannot open '%s': %s", path,
                           strerror(errno));
    if (fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET)) {
        st = keel__error(KEEL_STATUS_IO_ERROR,
                         "keel_onnx_import: cannot size '%s'", path);
        goto done;
    }
    if ((uint64_t)len > MAX_MODEL_BYTES) {
        st = unsupported(&im, "%ld bytes; a protobuf model holds less than "
                              "2 GiB (external data is not read)",
                         len);
        goto done;
    }
    buf = malloc((size_t)len + 1);
    if (!buf) {
        st = oom();
        goto done;
    }
    if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
        st = keel__error(KEEL_STATUS_IO_ERROR,
                         "keel_onnx_import: reading '%s' failed", path);
        goto done;
    }
    if (!wire_ok(&onnx__model_proto__descriptor, buf, (size_t)len, 0) ||
        !(m = onnx__model_proto__unpack(NULL, (size_t)len, buf))) {
        st = corrupt(&im, "not an ONNX model: the protobuf data is "
                          "truncated or damaged (%ld bytes)",
                     len);
        goto done;
    }
    st = keel__graph_new(&im.g);
    if (st == KEEL_STATUS_OK)
        st = read_model(&im, m);
done:
    if (f)
        fclose(f);
    if (m)
        onnx__model_proto__free_unpacked(m, NULL);
    free(buf);
    for (size_t i = 0; i < im.nents; i++)
        free(im.ents[i].data);
    free(im.ents);
    free(im.tab);
    if (st != KEEL_STATUS_OK) {
        keel_graph_free(im.g);
        return st;
    }
    *out = im.g;
    return KEEL_STATUS_OK;
}

#endif /* KEEL_NO_ONNX */
