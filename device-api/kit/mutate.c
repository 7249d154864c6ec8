/*
 * keel kernel kit — bad-argument cases: mutants of a valid launch
 * (kit.h, "bad-argument cases").
 *
 * One walk over the list of mutations serves both entry points: it counts
 * every mutation it passes, and builds only the one asked for. So the
 * count and the k-th mutant cannot disagree, and nothing is allocated.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <keel/kit.h>

struct gen {
    const keel_kernel_args *valid;
    int k;               /* the mutant wanted, -1 when only counting */
    int i;               /* mutations passed so far                  */
    keel_kit_mutant *m;  /* NULL when only counting                  */
    bool done;
};

/* The valid launch, copied into m, with args pointing at m's copies. */
static void base_copy(const keel_kernel_args *v, keel_kit_mutant *m)
{
    memset(m, 0, sizeof(*m));
    m->args = *v;
    if (v->num_inputs > 0)
        memcpy(m->in, v->inputs, sizeof(m->in[0]) * (size_t)v->num_inputs);
    if (v->num_outputs > 0)
        memcpy(m->out, v->outputs,
               sizeof(m->out[0]) * (size_t)v->num_outputs);
    if (v->num_attrs > 0)
        memcpy(m->attrs, v->attrs, sizeof(m->attrs[0]) * (size_t)v->num_attrs);
    m->args.inputs = m->in;
    m->args.outputs = m->out;
    m->args.attrs = m->attrs;
}

/* Whether this mutation is the one wanted; if so m holds the base launch
 * and the id, ready for the change. Counts it either way. */
static keel_kit_mutant *hit(struct gen *g, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static keel_kit_mutant *hit(struct gen *g, const char *fmt, ...)
{
    va_list ap;

    if (g->done || g->i++ != g->k || !g->m)
        return NULL;
    g->done = true;
    base_copy(g->valid, g->m);
    va_start(ap, fmt);
    vsnprintf(g->m->what, sizeof(g->m->what), fmt, ap);
    va_end(ap);
    return g->m;
}

/* ---- tensors ------------------------------------------------------------------ */

static void restride(keel_tensor_desc *d)
{
    int64_t s = 1;

    for (int k = d->ndim - 1; k >= 0; k--) {
        d->strides[k] = s;
        s *= d->shape[k] > 0 ? d->shape[k] : 1;
    }
}

/* Another dtype of the other class (cross) or of the same class. */
static keel_dtype other_dtype(keel_dtype dt, bool cross)
{
    if (keel_kit_float_dtype(dt)) {
        if (cross)
            return KEEL_I32;
        return dt == KEEL_F32 ? KEEL_F64 : KEEL_F32;
    }
    if (cross)
        return KEEL_F32;
    if (dt == KEEL_I32)
        return KEEL_I64;
    return KEEL_I32; /* int8, uint8, int64, bool */
}

static void tensor_mutants(struct gen *g, bool out, int idx)
{
    const keel_tensor_desc *o =
        out ? &g->valid->outputs[idx] : &g->valid->inputs[idx];
    const char *side = out ? "out" : "in";
    bool contig = keel_kit_contiguous(o);
    keel_kit_mutant *m;
    keel_tensor_desc *d;
    int nd = o->ndim < 0 ? 0 : o->ndim > KEEL_MAX_DIMS ? KEEL_MAX_DIMS
                                                          : o->ndim;

#define TARGET (out ? &m->out[idx] : &m->in[idx])
    for (int k = 0; k < nd; k++) {
        if ((m = hit(g, "%s%d.dim%d+1", side, idx, k))) {
            d = TARGET;
            d->shape[k]++;
            if (contig)
                restride(d);
        }
        if (o->shape[k] > 0 && (m = hit(g, "%s%d.dim%d-1", side, idx, k))) {
            d = TARGET;
            d->shape[k]--;
            if (contig)
                restride(d);
        }
    }
    if (nd < KEEL_MAX_DIMS && (m = hit(g, "%s%d.ndim+1", side, idx))) {
        d = TARGET;
        d->shape[d->ndim] = 1;
        d->strides[d->ndim] = 1;
        d->ndim++;
        if (contig)
            restride(d);
    }
    if (nd > 0 && (m = hit(g, "%s%d.ndim-1", side, idx))) {
        d = TARGET;
        d->ndim--;
        d->shape[d->ndim] = 0;
        d->strides[d->ndim] = 0;
        if (contig)
            restride(d);
    }
    for (int cross = 1; cross >= 0; cross--) {
        keel_dtype to = other_dtype(o->dtype, cross != 0);
        if ((m = hit(g, "%s%d.dtype=%s", side, idx, keel_kit_dtype_name(to))))
            TARGET->dtype = to;
    }
#undef TARGET
}

/* ---- attributes ----------------------------------------------------------------- */

enum spec_type { ST_INT, ST_FLOAT, ST_BOOL, ST_STR, ST_INTS, ST_FLOATS,
                 ST_DTYPE, ST_UNKNOWN };

struct spec {
    char name[32];
    enum spec_type type;
    bool has_default;
    char def[64];
};

/* The next "name:type=default" of a catalog spec; the rest, or NULL at
 * the end or on a malformed entry. */
static const char *spec_next(const char *p, struct spec *s)
{
    static const char *const types[] = {"int", "float", "bool", "str",
                                        "ints", "floats", "dtype"};
    const char *end, *colon, *eq;
    size_t seg, tl;

    while (p && *p == ';')
        p++;
    if (!p || !*p)
        return NULL;
    end = strchr(p, ';');
    seg = end ? (size_t)(end - p) : strlen(p);
    colon = memchr(p, ':', seg);
    if (!colon || (size_t)(colon - p) >= sizeof(s->name))
        return NULL;
    memset(s, 0, sizeof(*s));
    memcpy(s->name, p, (size_t)(colon - p));
    eq = memchr(colon, '=', seg - (size_t)(colon - p));
    tl = (size_t)((eq ? eq : p + seg) - colon) - 1;
    s->type = ST_UNKNOWN;
    for (int t = 0; t < (int)(sizeof(types) / sizeof(types[0])); t++)
        if (strlen(types[t]) == tl && !strncmp(colon + 1, types[t], tl))
            s->type = (enum spec_type)t;
    if (eq) {
        size_t dl = (size_t)(p + seg - eq - 1);
        s->has_default = true;
        if (dl >= sizeof(s->def))
            dl = sizeof(s->def) - 1;
        memcpy(s->def, eq + 1, dl);
    }
    return end ? end + 1 : p + seg;
}

/* The attribute to change in m: the valid launch's own, or a new one with
 * the spec's name appended. NULL when m has no room. */
static keel_attr *attr_slot(keel_kit_mutant *m, const struct spec *s,
                            int *slot)
{
    int n = m->args.num_attrs;

    for (int j = 0; j < n; j++)
        if (m->attrs[j].name && !strcmp(m->attrs[j].name, s->name)) {
            *slot = j;
            return &m->attrs[j];
        }
    if (n >= KEEL_KIT_MUTANT_MAX_ATTRS)
        return NULL;
    snprintf(m->names[n], sizeof(m->names[n]), "%s", s->name);
    m->attrs[n].name = m->names[n];
    m->args.num_attrs = n + 1;
    *slot = n;
    return &m->attrs[n];
}

static const keel_attr *given(const keel_kernel_args *v, const char *name)
{
    for (int j = 0; j < v->num_attrs; j++)
        if (v->attrs[j].name && !strcmp(v->attrs[j].name, name))
            return &v->attrs[j];
    return NULL;
}

/* The list a mutation starts from: the given one, or the default parsed. */
static int base_list(const keel_attr *a, const struct spec *s, int64_t *ints,
                     double *fl)
{
    int n = 0;

    if (a && a->type == KEEL_ATTR_INTS) {
        for (int64_t j = 0; j < a->v.ints.count && n < KEEL_KIT_MUTANT_MAX_LIST;
             j++)
            ints[n++] = a->v.ints.data[j];
        return a->v.ints.count > KEEL_KIT_MUTANT_MAX_LIST - 1 ? -1 : n;
    }
    if (a && a->type == KEEL_ATTR_FLOATS) {
        for (int64_t j = 0;
             j < a->v.floats.count && n < KEEL_KIT_MUTANT_MAX_LIST; j++)
            fl[n++] = a->v.floats.data[j];
        return a->v.floats.count > KEEL_KIT_MUTANT_MAX_LIST - 1 ? -1 : n;
    }
    if (!a && s->has_default) {
        const char *p = s->def;
        char *e;
        while (*p && n < KEEL_KIT_MUTANT_MAX_LIST - 1) {
            if (s->type == ST_FLOATS)
                fl[n] = strtod(p, &e);
            else
                ints[n] = strtoll(p, &e, 10);
            if (e == p)
                break;
            n++;
            p = *e == ',' ? e + 1 : e;
        }
    }
    return n;
}

/* Set attribute s of m to the list (ints or floats) of n entries. */
static void set_list(keel_kit_mutant *m, const struct spec *s,
                     const int64_t *ints, const double *fl, int n)
{
    int slot;
    keel_attr *a = attr_slot(m, s, &slot);

    if (!a)
        return;
    if (s->type == ST_FLOATS) {
        memcpy(m->floats[slot], fl, sizeof(double) * (size_t)n);
        a->type = KEEL_ATTR_FLOATS;
        a->v.floats.data = m->floats[slot];
        a->v.floats.count = n;
    } else {
        memcpy(m->ints[slot], ints, sizeof(int64_t) * (size_t)n);
        a->type = KEEL_ATTR_INTS;
        a->v.ints.data = m->ints[slot];
        a->v.ints.count = n;
    }
}

static void set_int(keel_kit_mutant *m, const struct spec *s,
                    keel_attr_type t, int64_t v)
{
    int slot;
    keel_attr *a = attr_slot(m, s, &slot);

    if (a) {
        a->type = t;
        a->v.i = v;
    }
}

static void set_float(keel_kit_mutant *m, const struct spec *s, double v)
{
    int slot;
    keel_attr *a = attr_slot(m, s, &slot);

    if (a) {
        a->type = KEEL_ATTR_FLOAT;
        a->v.f = v;
    }
}

static void attr_mutants(struct gen *g, const struct spec *s)
{
    const keel_attr *a = given(g->valid, s->name);
    const char *n = s->name;
    keel_kit_mutant *m;

    switch (s->type) {
    case ST_INT: {
        int64_t v = 0;
        if (a)
            v = a->type == KEEL_ATTR_FLOAT ? (int64_t)a->v.f : a->v.i;
        else if (s->has_default)
            v = strtoll(s->def, NULL, 10);
        if ((m = hit(g, "attr %s+1", n)))
            set_int(m, s, KEEL_ATTR_INT, v + 1);
        if ((m = hit(g, "attr %s-1", n)))
            set_int(m, s, KEEL_ATTR_INT, v - 1);
        if (v != -1 && (m = hit(g, "attr %s=-1", n)))
            set_int(m, s, KEEL_ATTR_INT, -1);
        if ((m = hit(g, "attr %s=2^40", n)))
            set_int(m, s, KEEL_ATTR_INT, INT64_C(1) << 40);
        break;
    }
    case ST_BOOL:
        if ((m = hit(g, "attr %s=2", n)))
            set_int(m, s, KEEL_ATTR_BOOL, 2);
        break;
    case ST_DTYPE:
        if ((m = hit(g, "attr %s=99", n)))
            set_int(m, s, KEEL_ATTR_DTYPE, 99);
        break;
    case ST_FLOAT: {
        /* a value equal to the base is no mutant: left out */
        double v = 0;
        if (a)
            v = a->type == KEEL_ATTR_FLOAT ? a->v.f : (double)a->v.i;
        else if (s->has_default)
            v = strtod(s->def, NULL);
        if (v == v && (m = hit(g, "attr %s=nan", n)))
            set_float(m, s, NAN);
        if (v != -1.0 && (m = hit(g, "attr %s=-1.0", n)))
            set_float(m, s, -1.0);
        if (v != 0.0 && (m = hit(g, "attr %s=0.0", n)))
            set_float(m, s, 0.0);
        break;
    }
    case ST_STR:
        if ((m = hit(g, "attr %s=bogus", n))) {
            int slot;
            keel_attr *t = attr_slot(m, s, &slot);
            if (t) {
                t->type = KEEL_ATTR_STRING;
                t->v.s = "bogus";
            }
        }
        break;
    case ST_INTS:
    case ST_FLOATS: {
        int64_t ints[KEEL_KIT_MUTANT_MAX_LIST];
        double fl[KEEL_KIT_MUTANT_MAX_LIST];
        int cnt = base_list(a, s, ints, fl);

        if (cnt < 0)
            break; /* longer than a mutant holds */
        if (cnt > 0 && (m = hit(g, "attr %s=[]", n)))
            set_list(m, s, ints, fl, 0);
        if ((m = hit(g, "attr %s+[last]", n))) {
            ints[cnt] = cnt ? ints[cnt - 1] : 1;
            fl[cnt] = cnt ? fl[cnt - 1] : 1.0;
            set_list(m, s, ints, fl, cnt + 1);
        }
        if (s->type == ST_FLOATS)
            break;
        for (int j = 0; j < cnt; j++) {
            if ((m = hit(g, "attr %s[%d]+1", n, j))) {
                int64_t save = ints[j];
                ints[j] = save + 1;
                set_list(m, s, ints, fl, cnt);
                ints[j] = save;
            }
            if (ints[j] != -1 && (m = hit(g, "attr %s[%d]=-1", n, j))) {
                int64_t save = ints[j];
                ints[j] = -1;
                set_list(m, s, ints, fl, cnt);
                ints[j] = save;
            }
        }
        break;
    }
    case ST_UNKNOWN:
        break;
    }
}

/* ---- the walk ------------------------------------------------------------------- */

static bool fits(const keel_kernel_args *v)
{
    return v && v->num_inputs >= 0 && v->num_outputs >= 0 &&
           v->num_attrs >= 0 &&
           v->num_inputs < KEEL_KIT_MUTANT_MAX_TENSORS &&
           v->num_outputs < KEEL_KIT_MUTANT_MAX_TENSORS &&
           v->num_attrs <= KEEL_KIT_MUTANT_MAX_ATTRS &&
           (v->num_inputs == 0 || v->inputs) &&
           (v->num_outputs == 0 || v->outputs) &&
           (v->num_attrs == 0 || v->attrs);
}

static void walk(int op, struct gen *g)
{
    const keel_op_info *info = keel_kit_op_info(op);
    const keel_kernel_args *v = g->valid;
    const char *p;
    struct spec s;
    keel_kit_mutant *m;

    for (int k = 0; k < v->num_outputs; k++)
        tensor_mutants(g, true, k);
    for (int k = 0; k < v->num_inputs; k++)
        tensor_mutants(g, false, k);
    if (v->num_inputs > 0) {
        if ((m = hit(g, "drop last input")))
            m->args.num_inputs--;
        if ((m = hit(g, "add input"))) {
            m->in[v->num_inputs] = m->in[v->num_inputs - 1];
            m->args.num_inputs++;
        }
    }
    if (v->num_outputs > 0) {
        if ((m = hit(g, "drop last output")))
            m->args.num_outputs--;
        if ((m = hit(g, "add output"))) {
            m->out[v->num_outputs] = m->out[v->num_outputs - 1];
            m->args.num_outputs++;
        }
    }
    p = info->attrs;
    while ((p = spec_next(p, &s)) != NULL)
        attr_mutants(g, &s);
}

int keel_kit_mutant_count(int op, const keel_kernel_args *valid)
{
    struct gen g = {valid, -1, 0, NULL, false};

    if (!keel_kit_op_info(op) || !fits(valid))
        return 0;
    walk(op, &g);
    return g.i;
}

bool keel_kit_mutate(int op, const keel_kernel_args *valid, int k,
                     keel_kit_mutant *m)
{
    struct gen g = {valid, k, 0, m, false};

    if (!m || k < 0 || !keel_kit_op_info(op) || !fits(valid))
        return false;
    walk(op, &g);
    return g.done;
}
