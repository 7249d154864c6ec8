/*
 * The graph file: PREFIX.keel.json (format in docs/inference.md) next to
 * PREFIX.safetensors. jansson reads and writes the JSON; the loader
 * checks everything it reads before a graph is returned.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <zlib.h>

#include "io/io_internal.h"
#include "jit/jit_internal.h"

#define MAX_GRAPH_FILE (1ull << 30)

static keel_status oom(void)
{
    return keel__error(KEEL_STATUS_OUT_OF_MEMORY, "jit: out of memory");
}

/* ---- shared -------------------------------------------------------------------- */

static char *join(const char *a, const char *b)
{
    return keel__asprintf("%s%s", a, b);
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Size and CRC-32 of a file. */
static keel_status file_crc(const char *path, const char *who,
                            uint64_t *bytes, uint32_t *crc)
{
    unsigned char buf[1 << 16];
    FILE *f = fopen(path, "rb");
    uLong c = crc32(0L, Z_NULL, 0);
    size_t n;

    *bytes = 0;
    if (!f)
        return keel__error(errno == ENOENT ? KEEL_STATUS_NOT_FOUND
                                           : KEEL_STATUS_IO_ERROR,
                           "%s: cannot open '%s': %s", who, path,
                           strerror(errno));
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
        c = crc32(c, buf, (uInt)n);
        *bytes += n;
    }
    if (ferror(f)) {
        fclose(f);
        return keel__error(KEEL_STATUS_IO_ERROR, "%s: reading '%s' failed",
                           who, path);
    }
    fclose(f);
    *crc = (uint32_t)c;
    return KEEL_STATUS_OK;
}

/* ---- saving -------------------------------------------------------------------- */

static json_t *dim_json(const keel_graph *g, struct jit_dim d)
{
    char buf[96];

    if (d.sym == JIT_STATIC)
        return json_integer(d.mul);
    if (d.sym == JIT_ANY)
        return json_integer(-1);
    if (d.mul == 1)
        return json_string(g->sym[d.sym]);
    snprintf(buf, sizeof(buf), "%" PRId64 "*%s", d.mul, g->sym[d.sym]);
    return json_string(buf);
}

static json_t *real_json(double v)
{
    if (isnan(v))
        return json_string("nan");
    if (isinf(v))
        return json_string(v > 0 ? "inf" : "-inf");
    return json_real(v);
}

static json_t *attr_json(const keel_attr *a)
{
    json_t *arr;

    switch (a->type) {
    case KEEL_ATTR_INT:
        return json_integer(a->v.i);
    case KEEL_ATTR_FLOAT:
        return real_json(a->v.f);
    case KEEL_ATTR_BOOL:
        return json_boolean(a->v.i);
    case KEEL_ATTR_STRING:
        return json_string(a->v.s);
    case KEEL_ATTR_DTYPE:
        return json_string(keel_dtype_name((keel_dtype)a->v.i));
    case KEEL_ATTR_INTS:
        arr = json_array();
        for (int64_t i = 0; arr && i < a->v.ints.count; i++)
            json_array_append_new(arr, json_integer(a->v.ints.data[i]));
        return arr;
    case KEEL_ATTR_FLOATS:
        arr = json_array();
        for (int64_t i = 0; arr && i < a->v.floats.count; i++)
            json_array_append_new(arr, real_json(a->v.floats.data[i]));
        return arr;
    }
    return json_null();
}

static json_t *ids_json(const int *ids, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    return a;
}

static json_t *node_json(const keel_graph *g, const struct jit_node *n)
{
    json_t *o = json_object(), *attrs = json_object(), *a;

    json_object_set_new(o, "op", json_string(keel_graph_node_op(
                                     g, (int)(n - g->node))));
    json_object_set_new(o, "inputs", ids_json(n->in, n->nin));
    json_object_set_new(o, "outputs", ids_json(n->out, n->nout));
    switch (n->kind) {
    case JIT_OP: {
        const struct keel_op_def *d = keel__op_def(n->op);
        for (int k = 0; k < n->nattrs; k++)
            json_object_set_new(attrs, d->attrs[k].name,
                                attr_json(&n->attrs[k]));
        break;
    }
    case JIT_RESHAPE:
    case JIT_EXPAND:
        a = json_array();
        for (int i = 0; i < n->np; i++)
            json_array_append_new(a, dim_json(g, n->pd[i]));
        json_object_set_new(attrs, "shape", a);
        break;
    case JIT_PERMUTE:
        a = json_array();
        for (int i = 0; i < n->np; i++)
            json_array_append_new(a, json_integer(n->p[i]));
        json_object_set_new(attrs, "perm", a);
        break;
    case JIT_SLICE:
        json_object_set_new(attrs, "axis", json_integer(n->p[0]));
        json_object_set_new(attrs, "start", json_integer(n->p[1]));
        json_object_set_new(attrs, "stop", json_integer(n->p[2]));
        json_object_set_new(attrs, "step", json_integer(n->p[3]));
        break;
    }
    json_object_set_new(o, "attrs", attrs);
    return o;
}

static json_t *graph_json(const keel_graph *g, const char *weights,
                          uint64_t bytes, uint32_t crc)
{
    json_t *root = json_object(), *a, *w;

    json_object_set_new(root, "format", json_string("keel.graph"));
    json_object_set_new(root, "version",
                        json_integer(KEEL_GRAPH_FORMAT_VERSION));
    json_object_set_new(root, "catalog_version",
                        json_integer(KEEL_OP_CATALOG_VERSION));
    {
        char prod[64];
        snprintf(prod, sizeof(prod), "keel %s", keel_version());
        json_object_set_new(root, "producer", json_string(prod));
    }
    w = json_object();
    json_object_set_new(w, "file", json_string(weights));
    json_object_set_new(w, "bytes", json_integer((json_int_t)bytes));
    json_object_set_new(w, "crc32", json_integer(crc));
    json_object_set_new(root, "weights", w);
    a = json_array();
    for (int s = 0; s < g->nsym; s++)
        json_array_append_new(a, json_string(g->sym[s]));
    json_object_set_new(root, "symbols", a);
    a = json_array();
    for (int v = 0; v < g->nval; v++) {
        json_t *o = json_object(), *sh = json_array();
        json_object_set_new(o, "dtype",
                            json_string(keel_dtype_name(g->val[v].dtype)));
        for (int d = 0; d < g->val[v].ndim; d++)
            json_array_append_new(sh, dim_json(g, g->val[v].dim[d]));
        json_object_set_new(o, "shape", sh);
        json_array_append_new(a, o);
    }
    json_object_set_new(root, "values", a);
    a = json_array();
    for (int i = 0; i < g->nin; i++)
        json_array_append_new(a, json_pack("{s:s,s:i}", "name",
                                           g->val[g->in[i]].name, "value",
                                           g->in[i]));
    json_object_set_new(root, "inputs", a);
    a = json_array();
    for (int v = 0; v < g->nval; v++)
        if (g->val[v].kind == JIT_CONST)
            json_array_append_new(a, json_pack("{s:s,s:i}", "name",
                                               g->val[v].name, "value", v));
    json_object_set_new(root, "constants", a);
    a = json_array();
    for (int i = 0; i < g->nout; i++)
        json_array_append_new(a, json_pack("{s:s,s:i}", "name",
                                           g->out_name[i], "value",
                                           g->out[i]));
    json_object_set_new(root, "outputs", a);
    a = json_array();
    for (int n = 0; n < g->nnode; n++)
        json_array_append_new(a, node_json(g, &g->node[n]));
    json_object_set_new(root, "nodes", a);
    return root;
}

static keel_status write_text(FILE *f, void *ctx, const char *tmp,
                              const char *path)
{
    const char *text = ctx;
    size_t n = strlen(text);

    if (fwrite(text, 1, n, f) != n || fputc('\n', f) == EOF)
        return keel__write_atomic_error("fwrite", tmp, path);
    return KEEL_STATUS_OK;
}

keel_status keel_jit_save(const keel_graph *g, const char *prefix)
{
    char *jpath = NULL, *wpath = NULL, *text = NULL;
    keel_state_dict *sd = NULL;
    json_t *root = NULL;
    uint64_t bytes;
    uint32_t crc;
    keel_status st;

    if (!g || !prefix || !*prefix)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_jit_save: %s", !g ? "graph is NULL"
                                                   : "no path prefix");
    jpath = join(prefix, ".keel.json");
    wpath = join(prefix, ".safetensors");
    if (!jpath || !wpath) {
        st = oom();
        goto out;
    }
    st = keel_graph_constants(g, &sd);
    if (st == KEEL_STATUS_OK)
        st = keel_state_dict_set_metadata(sd, "format", "keel.graph.weights");
    if (st == KEEL_STATUS_OK && (st = keel_save(wpath, sd)) != KEEL_STATUS_OK) {
        char msg[600];
        snprintf(msg, sizeof(msg), "%s", keel_last_error());
        keel__error(st, "keel_jit_save: the weights: %s", msg);
    }
    if (st == KEEL_STATUS_OK)
        st = file_crc(wpath, "keel_jit_save", &bytes, &crc);
    if (st != KEEL_STATUS_OK)
        goto out;
    root = graph_json(g, base_name(wpath), bytes, crc);
    text = root ? json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER |
                                       JSON_REAL_PRECISION(17))
                : NULL;
    if (!text) {
        st = oom();
        goto out;
    }
    st = keel__write_atomic(jpath, "keel_jit_save", write_text, text);
out:
    free(text);
    json_decref(root);
    keel_state_dict_free(sd);
    free(jpath);
    free(wpath);
    return st;
}

/* ---- loading -------------------------------------------------------------------- */

struct reader {
    const char *src; /* for messages */
    keel_graph *g;
    char *defined;   /* per value: defined yet */
};

static keel_status bad(const struct reader *r, const char *fmt, ...)
    KEEL_PRINTF(2, 3);
static keel_status bad(const struct reader *r, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return keel__error(KEEL_STATUS_CORRUPT, "keel_jit_load: %s: %s", r->src,
                       msg);
}

static const json_t *field(const json_t *o, const char *k, json_type t)
{
    const json_t *v = json_object_get(o, k);
    return v && json_typeof(v) == t ? v : NULL;
}

/* A dimension: an integer >= 0, -1 where `any` allows it, or "sym" /
 * "<k>*sym" with a declared symbol. */
static keel_status read_dim(const struct reader *r, const json_t *j,
                            bool any, const char *where,
                            struct jit_dim *d)
{
    if (json_is_integer(j)) {
        json_int_t v = json_integer_value(j);
        if (v == -1 && any) {
            d->sym = JIT_ANY;
            d->mul = 0;
            return KEEL_STATUS_OK;
        }
        if (v < 0)
            return bad(r, "%s: dimension %lld", where, (long long)v);
        d->sym = JIT_STATIC;
        d->mul = v;
        return KEEL_STATUS_OK;
    }
    if (json_is_string(j)) {
        const char *s = json_string_value(j), *star = strchr(s, '*');
        int64_t k = 1;

        if (star) {
            char *end;
            errno = 0;
            long long m = strtoll(s, &end, 10);
            if (end != star || errno || m < 1 || s[0] == '+' || s[0] == ' ')
                return bad(r, "%s: dimension '%s' is not <k>*<symbol>",
                           where, s);
            k = m;
            s = star + 1;
        }
        for (int i = 0; i < r->g->nsym; i++)
            if (!strcmp(r->g->sym[i], s)) {
                d->sym = i;
                d->mul = k;
                return KEEL_STATUS_OK;
            }
        return bad(r, "%s: dimension '%s' names no declared symbol", where,
                   json_string_value(j));
    }
    return bad(r, "%s: a dimension must be an integer or a symbol", where);
}

static keel_status read_shape(const struct reader *r, const json_t *j,
                              bool any, const char *where, int *ndim,
                              struct jit_dim *d)
{
    keel_status st;

    if (!json_is_array(j))
        return bad(r, "%s: the shape is not an array", where);
    if (json_array_size(j) > KEEL_MAX_DIMS)
        return bad(r, "%s: %zu dimensions (at most %d)", where,
                   json_array_size(j), KEEL_MAX_DIMS);
    *ndim = (int)json_array_size(j);
    for (int i = 0; i < *ndim; i++)
        if ((st = read_dim(r, json_array_get(j, (size_t)i), any, where,
                           &d[i])) != KEEL_STATUS_OK)
            return st;
    return KEEL_STATUS_OK;
}

static keel_status read_real(const struct reader *r, const json_t *j,
                             const char *where, double *v)
{
    if (json_is_number(j)) {
        *v = json_number_value(j);
        return KEEL_STATUS_OK;
    }
    if (json_is_string(j)) {
        const char *s = json_string_value(j);
        if (!strcmp(s, "nan")) {
            *v = NAN;
            return KEEL_STATUS_OK;
        }
        if (!strcmp(s, "inf") || !strcmp(s, "-inf")) {
            *v = s[0] == '-' ? -INFINITY : INFINITY;
            return KEEL_STATUS_OK;
        }
    }
    return bad(r, "%s: not a number", where);
}

/* Attribute k of op d from JSON into node n (payload copied). */
static keel_status read_attr(const struct reader *r,
                             const struct keel_op_def *d, int k,
                             const json_t *j, const char *where,
                             struct jit_node *n)
{
    const struct keel_attr_spec *s = &d->attrs[k];
    keel_attr a = {.name = s->name, .type = s->type};
    int64_t ints[64];
    double floats[64];
    keel_status st;
    keel_dtype dt;

    switch (s->type) {
    case KEEL_ATTR_INT:
        if (!json_is_integer(j))
            return bad(r, "%s: attribute '%s' must be an integer", where,
                       s->name);
        a.v.i = json_integer_value(j);
        break;
    case KEEL_ATTR_FLOAT:
        if ((st = read_real(r, j, where, &a.v.f)) != KEEL_STATUS_OK)
            return st;
        break;
    case KEEL_ATTR_BOOL:
        if (!json_is_boolean(j))
            return bad(r, "%s: attribute '%s' must be true or false", where,
                       s->name);
        a.v.i = json_is_true(j);
        break;
    case KEEL_ATTR_STRING:
        if (!json_is_string(j))
            return bad(r, "%s: attribute '%s' must be a string", where,
                       s->name);
        a.v.s = json_string_value(j);
        break;
    case KEEL_ATTR_DTYPE:
        if (!json_is_string(j) ||
            keel_dtype_parse(json_string_value(j), &dt) != KEEL_STATUS_OK)
            return bad(r, "%s: attribute '%s' must name a dtype", where,
                       s->name);
        a.v.i = dt;
        break;
    case KEEL_ATTR_INTS:
    case KEEL_ATTR_FLOATS:
        if (!json_is_array(j) || json_array_size(j) > 64)
            return bad(r, "%s: attribute '%s' must be an array of at most "
                          "64 numbers",
                       where, s->name);
        for (size_t i = 0; i < json_array_size(j); i++) {
            const json_t *e = json_array_get(j, i);
            if (s->type == KEEL_ATTR_INTS) {
                if (!json_is_integer(e))
                    return bad(r, "%s: attribute '%s' must hold integers",
                               where, s->name);
                ints[i] = json_integer_value(e);
            } else if ((st = read_real(r, e, where, &floats[i])) !=
                       KEEL_STATUS_OK) {
                return st;
            }
        }
        if (s->type == KEEL_ATTR_INTS) {
            a.v.ints.data = ints;
            a.v.ints.count = (int64_t)json_array_size(j);
        } else {
            a.v.floats.data = floats;
            a.v.floats.count = (int64_t)json_array_size(j);
        }
        break;
    }
    return keel__graph_set_attr(n, k, &a);
}

static keel_status read_ids(const struct reader *r, const json_t *j,
                            const char *where, const char *what, int *ids,
                            int max, int *n)
{
    if (!json_is_array(j))
        return bad(r, "%s: '%s' is not an array", where, what);
    if (json_array_size(j) > (size_t)max)
        return bad(r, "%s: %zu %s (at most %d)", where, json_array_size(j),
                   what, max);
    *n = (int)json_array_size(j);
    for (int i = 0; i < *n; i++) {
        const json_t *e = json_array_get(j, (size_t)i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 ||
            json_integer_value(e) >= r->g->nval)
            return bad(r, "%s: %s %d is not a value index (0..%d)", where,
                       what, i, r->g->nval - 1);
        ids[i] = (int)json_integer_value(e);
    }
    return KEEL_STATUS_OK;
}

static keel_status read_view(const struct reader *r, struct jit_node *n,
                             const json_t *attrs, const char *where)
{
    const struct jit_value *x = &r->g->val[n->in[0]];
    keel_status st;

    if (n->nin != 1 || n->nout != 1)
        return bad(r, "%s: a view takes one input and makes one output",
                   where);
    if (n->kind == JIT_RESHAPE || n->kind == JIT_EXPAND) {
        int any = 0;
        st = read_shape(r, json_object_get(attrs, "shape"), true, where,
                        &n->np, n->pd);
        if (st != KEEL_STATUS_OK)
            return st;
        for (int i = 0; i < n->np; i++)
            any += n->pd[i].sym == JIT_ANY;
        if (n->kind == JIT_RESHAPE && any > 1)
            return bad(r, "%s: more than one -1 in the new shape", where);
        if (n->kind == JIT_EXPAND && n->np < x->ndim)
            return bad(r, "%s: expands %d dimensions to %d", where, x->ndim,
                       n->np);
        return json_object_size(attrs) == 1
                   ? KEEL_STATUS_OK
                   : bad(r, "%s: attributes other than 'shape'", where);
    }
    if (n->kind == JIT_PERMUTE) {
        const json_t *p = json_object_get(attrs, "perm");
        bool seen[KEEL_MAX_DIMS] = {false};

        if (!json_is_array(p) || (int)json_array_size(p) != x->ndim ||
            json_object_size(attrs) != 1)
            return bad(r, "%s: 'perm' must be the only attribute, with %d "
                          "entries",
                       where, x->ndim);
        n->np = x->ndim;
        for (int i = 0; i < n->np; i++) {
            const json_t *e = json_array_get(p, (size_t)i);
            json_int_t v = json_is_integer(e) ? json_integer_value(e) : -1;
            if (v < 0 || v >= x->ndim || seen[v])
                return bad(r, "%s: 'perm' is not a permutation of 0..%d",
                           where, x->ndim - 1);
            seen[v] = true;
            n->p[i] = v;
        }
        return KEEL_STATUS_OK;
    }
    {
        static const char *const k[4] = {"axis", "start", "stop", "step"};
        for (int i = 0; i < 4; i++) {
            const json_t *e = json_object_get(attrs, k[i]);
            if (!json_is_integer(e))
                return bad(r, "%s: '%s' must be an integer", where, k[i]);
            n->p[i] = json_integer_value(e);
        }
        n->np = 4;
        if (json_object_size(attrs) != 4 || n->p[0] < 0 ||
            n->p[0] >= x->ndim || n->p[3] == 0)
            return bad(r, "%s: a slice needs exactly axis (0..%d), start, "
                          "stop and a step other than 0",
                       where, x->ndim - 1);
    }
    return KEEL_STATUS_OK;
}

static keel_status read_node(struct reader *r, int idx, const json_t *j)
{
    char where[64];
    const char *op;
    const json_t *attrs;
    int in[KEEL_MAX_OP_INPUTS], out[KEEL_MAX_OP_OUTPUTS], nin, nout, n;
    enum jit_node_kind kind = JIT_OP;
    keel_op_id id = KEEL_OP_COUNT;
    struct jit_node *node;
    keel_status st;

    snprintf(where, sizeof(where), "node %d", idx);
    if (!json_is_object(j) || !field(j, "op", JSON_STRING))
        return bad(r, "%s: not an object with an 'op' string", where);
    op = json_string_value(json_object_get(j, "op"));
    snprintf(where, sizeof(where), "node %d (%.32s)", idx, op);
    if (!strcmp(op, "keel.reshape"))
        kind = JIT_RESHAPE;
    else if (!strcmp(op, "keel.permute"))
        kind = JIT_PERMUTE;
    else if (!strcmp(op, "keel.slice"))
        kind = JIT_SLICE;
    else if (!strcmp(op, "keel.expand"))
        kind = JIT_EXPAND;
    else if (keel_op_find(op, &id) != KEEL_STATUS_OK)
        return bad(r, "%s: unknown op (not in op catalog version %d)", where,
                   KEEL_OP_CATALOG_VERSION);
    st = read_ids(r, json_object_get(j, "inputs"), where, "inputs", in,
                  KEEL_MAX_OP_INPUTS, &nin);
    if (st == KEEL_STATUS_OK)
        st = read_ids(r, json_object_get(j, "outputs"), where, "outputs",
                      out, KEEL_MAX_OP_OUTPUTS, &nout);
    if (st != KEEL_STATUS_OK)
        return st;
    attrs = json_object_get(j, "attrs");
    if (attrs && !json_is_object(attrs))
        return bad(r, "%s: 'attrs' is not an object", where);
    for (int i = 0; i < nin; i++)
        if (!r->defined[in[i]])
            return bad(r, "%s: reads value %d before any node defines it "
                          "(a cycle, or nodes out of order)",
                       where, in[i]);
    for (int i = 0; i < nout; i++) {
        if (r->defined[out[i]])
            return bad(r, "%s: value %d is defined a second time", where,
                       out[i]);
        r->defined[out[i]] = 1;
    }
    if (kind == JIT_OP) {
        const keel_op_info *info = keel_op_get_info(id);
        if ((info->num_inputs >= 0 && nin > info->num_inputs) ||
            (info->num_outputs >= 0 && nout != info->num_outputs) ||
            nout < 1)
            return bad(r, "%s: %d inputs and %d outputs; the op takes at "
                          "most %d and makes %d",
                       where, nin, nout, info->num_inputs,
                       info->num_outputs);
    } else if (nin < 1) {
        return bad(r, "%s: a view takes one input", where);
    }
    n = keel__graph_add_node(r->g, kind, id, in, nin, out, nout);
    if (n < 0)
        return keel_last_status();
    node = &r->g->node[n];
    if (kind != JIT_OP)
        return read_view(r, node, attrs, where);
    {
        const struct keel_op_def *d = keel__op_def(id);
        const char *key;
        const json_t *v;

        json_object_foreach((json_t *)attrs, key, v) {
            int k = -1;
            for (int i = 0; i < d->nattrs; i++)
                if (!strcmp(d->attrs[i].name, key))
                    k = i;
            if (k < 0)
                return bad(r, "%s: unknown attribute '%.40s' (the op "
                              "takes: %s)",
                           where, key,
                           *d->info->attrs ? d->info->attrs : "none");
        }
        for (int k = 0; k < d->nattrs; k++) {
            v = attrs ? json_object_get(attrs, d->attrs[k].name) : NULL;
            if (v)
                st = read_attr(r, d, k, v, where, node);
            else if (d->attrs[k].required)
                return bad(r, "%s: required attribute '%s' is missing",
                           where, d->attrs[k].name);
            else
                st = keel__graph_set_attr(node, k, &d->attrs[k].def);
            node->nattrs = k + 1;
            if (st != KEEL_STATUS_OK)
                return st;
        }
    }
    return KEEL_STATUS_OK;
}

/* inputs, constants or outputs: [{"name", "value"}] */
static keel_status read_list(struct reader *r, const json_t *root,
                             const char *key, enum jit_value_kind kind)
{
    const json_t *a = field(root, key, JSON_ARRAY);

    if (!a)
        return bad(r, "'%s' is missing or not an array", key);
    if (json_array_size(a) > (1u << 24))
        return bad(r, "'%s' has %zu entries", key, json_array_size(a));
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *e = json_array_get(a, i);
        const json_t *nm = field(e, "name", JSON_STRING);
        const json_t *vj = field(e, "value", JSON_INTEGER);
        json_int_t v = vj ? json_integer_value(vj) : -1;
        struct jit_value *val;
        keel_status st;

        if (!nm || !*json_string_value(nm) || v < 0 || v >= r->g->nval)
            return bad(r, "%s %zu: needs a non-empty 'name' and a 'value' "
                          "index (0..%d)",
                       key, i, r->g->nval - 1);
        val = &r->g->val[v];
        if (kind == JIT_NODE) {
            st = keel__graph_add_output(r->g, (int)v, json_string_value(nm));
            if (st != KEEL_STATUS_OK)
                return st;
            continue;
        }
        if (r->defined[v])
            return bad(r, "%s %zu ('%s'): value %lld is defined a second "
                          "time",
                       key, i, json_string_value(nm), (long long)v);
        r->defined[v] = 1;
        val->kind = kind;
        val->name = strdup(json_string_value(nm));
        if (!val->name)
            return oom();
        for (size_t j = 0; j < i; j++)
            if (!strcmp(json_string_value(json_object_get(
                            json_array_get(a, j), "name")),
                        val->name))
                return bad(r, "%s %zu: the name '%s' is used twice", key, i,
                           val->name);
        if (kind == JIT_INPUT &&
            (st = keel__graph_add_input(r->g, (int)v)) != KEEL_STATUS_OK)
            return st;
        if (kind == JIT_CONST)
            for (int d = 0; d < val->ndim; d++)
                if (val->dim[d].sym != JIT_STATIC)
                    return bad(r, "constant '%s' has a dynamic shape",
                               val->name);
    }
    return KEEL_STATUS_OK;
}

static keel_status read_graph(struct reader *r, const json_t *root,
                              uint64_t wbytes, uint32_t wcrc)
{
    const json_t *a, *w;
    keel_status st;
    json_int_t ver;

    if (!json_is_object(root) || !field(root, "format", JSON_STRING) ||
        strcmp(json_string_value(json_object_get(root, "format")),
               "keel.graph"))
        return bad(r, "not a keel graph file (\"format\": \"keel.graph\" "
                      "is missing)");
    if (!field(root, "version", JSON_INTEGER))
        return bad(r, "'version' is missing");
    ver = json_integer_value(json_object_get(root, "version"));
    if (ver != KEEL_GRAPH_FORMAT_VERSION)
        return bad(r, "format version %lld; this keel reads version %d%s",
                   (long long)ver, KEEL_GRAPH_FORMAT_VERSION,
                   ver > KEEL_GRAPH_FORMAT_VERSION
                       ? " (written by a newer keel)"
                       : "");
    if (!field(root, "catalog_version", JSON_INTEGER))
        return bad(r, "'catalog_version' is missing");
    ver = json_integer_value(json_object_get(root, "catalog_version"));
    if (ver < 1 || ver > KEEL_OP_CATALOG_VERSION)
        return bad(r, "op catalog version %lld; this keel has version %d",
                   (long long)ver, KEEL_OP_CATALOG_VERSION);
    w = field(root, "weights", JSON_OBJECT);
    if (!w || !field(w, "bytes", JSON_INTEGER) ||
        !field(w, "crc32", JSON_INTEGER) || !field(w, "file", JSON_STRING))
        return bad(r, "'weights' must hold 'file', 'bytes' and 'crc32'");
    if ((uint64_t)json_integer_value(json_object_get(w, "bytes")) !=
            wbytes ||
        (uint32_t)json_integer_value(json_object_get(w, "crc32")) != wcrc ||
        json_integer_value(json_object_get(w, "crc32")) < 0)
        return bad(r, "the weights file is not the one this graph was "
                      "saved with (%llu bytes, CRC-32 %08x; the graph "
                      "expects %lld bytes, %08llx)",
                   (unsigned long long)wbytes, (unsigned)wcrc,
                   (long long)json_integer_value(json_object_get(w,
                                                                 "bytes")),
                   (unsigned long long)json_integer_value(
                       json_object_get(w, "crc32")));
    a = field(root, "symbols", JSON_ARRAY);
    if (!a || json_array_size(a) > KEEL_JIT_MAX_SYMBOLS)
        return bad(r, "'symbols' must be an array of at most %d names",
                   KEEL_JIT_MAX_SYMBOLS);
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *e = json_array_get(a, i);
        const char *s = json_is_string(e) ? json_string_value(e) : "";
        if (!*s || strchr(s, '*') || strlen(s) > 63)
            return bad(r, "symbol %zu is not a name (1 to 63 characters, "
                          "no '*')",
                       i);
        for (int j = 0; j < r->g->nsym; j++)
            if (!strcmp(r->g->sym[j], s))
                return bad(r, "symbol '%s' is declared twice", s);
        if (keel__graph_add_symbol(r->g, s) < 0)
            return keel_last_status();
    }
    a = field(root, "values", JSON_ARRAY);
    if (!a || json_array_size(a) > (1u << 24))
        return bad(r, "'values' is missing or too long");
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *e = json_array_get(a, i);
        const json_t *dt = field(e, "dtype", JSON_STRING);
        struct jit_dim d[KEEL_MAX_DIMS];
        char where[48];
        keel_dtype dtype;
        int ndim;

        snprintf(where, sizeof(where), "value %zu", i);
        if (!dt || keel_dtype_parse(json_string_value(dt), &dtype) !=
                       KEEL_STATUS_OK)
            return bad(r, "%s: 'dtype' is missing or unknown", where);
        st = read_shape(r, json_object_get(e, "shape"), true, where, &ndim,
                        d);
        if (st != KEEL_STATUS_OK)
            return st;
        if (keel__graph_add_value(r->g, JIT_NODE, dtype, ndim, d) < 0)
            return keel_last_status();
    }
    r->defined = calloc((size_t)(r->g->nval ? r->g->nval : 1), 1);
    if (!r->defined)
        return oom();
    if ((st = read_list(r, root, "inputs", JIT_INPUT)) != KEEL_STATUS_OK ||
        (st = read_list(r, root, "constants", JIT_CONST)) != KEEL_STATUS_OK)
        return st;
    a = field(root, "nodes", JSON_ARRAY);
    if (!a || json_array_size(a) > (1u << 24))
        return bad(r, "'nodes' is missing or too long");
    for (size_t i = 0; i < json_array_size(a); i++)
        if ((st = read_node(r, (int)i, json_array_get(a, i))) !=
            KEEL_STATUS_OK)
            return st;
    if ((st = read_list(r, root, "outputs", JIT_NODE)) != KEEL_STATUS_OK)
        return st;
    if (r->g->nout < 1)
        return bad(r, "the graph has no outputs");
    for (int i = 0; i < r->g->nout; i++)
        if (!r->defined[r->g->out[i]])
            return bad(r, "output '%s' is value %d, which nothing defines",
                       r->g->out_name[i], r->g->out[i]);
    for (int v = 0; v < r->g->nval; v++)
        if (!r->defined[v] && r->g->val[v].kind == JIT_NODE) {
            /* Declared, never made: harmless only if never read, which
             * read_node already guarantees; keep the file honest too. */
            return bad(r, "value %d is declared but nothing defines it", v);
        }
    return KEEL_STATUS_OK;
}

/* Give every constant its tensor from the weights, checked. */
static keel_status attach_weights(struct reader *r, keel_state_dict *sd)
{
    int64_t used = 0;

    for (int v = 0; v < r->g->nval; v++) {
        struct jit_value *val = &r->g->val[v];
        keel_tensor *t;
        bool ok;

        if (val->kind != JIT_CONST)
            continue;
        t = keel_state_dict_get(sd, val->name);
        if (!t)
            return bad(r, "constant '%s' is not in the weights file",
                       val->name);
        ok = t->dtype == val->dtype && t->ndim == val->ndim;
        for (int d = 0; ok && d < val->ndim; d++)
            ok = t->shape[d] == val->dim[d].mul;
        if (!ok) {
            char a[160], b[128];
            return bad(r, "constant '%s' is %s in the weights file; the "
                          "graph declares %s %s",
                       val->name, keel__tensor_str(t, a, sizeof(a)),
                       keel_dtype_name(val->dtype),
                       keel__graph_shape_str(r->g, val, b, sizeof(b)));
        }
        val->data = keel_tensor_ref(t);
        used++;
    }
    if (used != keel_state_dict_count(sd))
        return bad(r, "the weights file holds %lld tensors the graph does "
                      "not use",
                   (long long)(keel_state_dict_count(sd) - used));
    return KEEL_STATUS_OK;
}

keel_status keel_jit_load_buffer(const char *json, size_t size,
                                 const char *weights_path, const char *device,
                                 keel_graph **out)
{
    struct reader r = {.src = "graph"};
    keel_state_dict *sd = NULL;
    json_error_t jerr;
    json_t *root;
    uint64_t wbytes;
    uint32_t wcrc;
    keel_status st;

    if (!out || !weights_path || (!json && size))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_jit_load: NULL argument");
    *out = NULL;
    if (size > MAX_GRAPH_FILE)
        return keel__error(KEEL_STATUS_CORRUPT,
                           "keel_jit_load: the graph file is %zu bytes "
                           "(at most 1 GiB)",
                           size);
    st = file_crc(weights_path, "keel_jit_load", &wbytes, &wcrc);
    if (st != KEEL_STATUS_OK)
        return st;
    root = json_loadb(json ? json : "", size, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return keel__error(KEEL_STATUS_CORRUPT,
                           "keel_jit_load: the graph file is not JSON: %s "
                           "(line %d, column %d)",
                           jerr.text, jerr.line, jerr.column);
    st = keel__graph_new(&r.g);
    if (st == KEEL_STATUS_OK)
        st = read_graph(&r, root, wbytes, wcrc);
    json_decref(root);
    if (st == KEEL_STATUS_OK)
        st = keel_load(weights_path, device, &sd);
    if (st == KEEL_STATUS_OK)
        st = attach_weights(&r, sd);
    if (st == KEEL_STATUS_OK)
        st = keel__graph_finish(r.g);
    keel_state_dict_free(sd);
    free(r.defined);
    if (st != KEEL_STATUS_OK) {
        keel_graph_free(r.g);
        return st;
    }
    *out = r.g;
    return KEEL_STATUS_OK;
}

keel_status keel_jit_load(const char *prefix, const char *device,
                          keel_graph **out)
{
    char *jpath, *wpath, *text = NULL;
    FILE *f = NULL;
    long len;
    keel_status st;

    if (!prefix || !*prefix || !out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_jit_load: %s", out ? "no path prefix"
                                                    : "out is NULL");
    *out = NULL;
    jpath = join(prefix, ".keel.json");
    wpath = join(prefix, ".safetensors");
    if (!jpath || !wpath) {
        st = oom();
        goto done;
    }
    f = fopen(jpath, "rb");
    if (!f) {
        st = keel__error(errno == ENOENT ? KEEL_STATUS_NOT_FOUND
                                         : KEEL_STATUS_IO_ERROR,
                         "keel_jit_load: cannot open '%s': %s", jpath,
                         strerror(errno));
        goto done;
    }
    if (fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET)) {
        st = keel__error(KEEL_STATUS_IO_ERROR,
                         "keel_jit_load: cannot size '%s'", jpath);
        goto done;
    }
    if ((unsigned long)len > MAX_GRAPH_FILE) {
        st = keel__error(KEEL_STATUS_CORRUPT,
                         "keel_jit_load: '%s' is %ld bytes (at most 1 GiB)",
                         jpath, len);
        goto done;
    }
    text = malloc((size_t)len + 1);
    if (!text) {
        st = oom();
        goto done;
    }
    if (fread(text, 1, (size_t)len, f) != (size_t)len) {
        st = keel__error(KEEL_STATUS_IO_ERROR,
                         "keel_jit_load: reading '%s' failed", jpath);
        goto done;
    }
    st = keel_jit_load_buffer(text, (size_t)len, wpath, device, out);
    if (st != KEEL_STATUS_OK && keel_last_status() == st) {
        /* Name the file in the message. */
        char msg[600];
        snprintf(msg, sizeof(msg), "%s", keel_last_error());
        if (!strncmp(msg, "keel_jit_load: graph: ", 22))
            keel__error(st, "keel_jit_load: %s: %s", jpath, msg + 22);
    }
done:
    if (f)
        fclose(f);
    free(text);
    free(jpath);
    free(wpath);
    return st;
}
