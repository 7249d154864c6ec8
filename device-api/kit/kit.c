/*
 * keel kernel kit — the catalog table, the generic part of every check,
 * attributes, descriptors and iteration plans.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "kit_internal.h"

/* Slots of the name index below: a power of two, at least 4x the catalog. */
#define NAME_SLOTS 512

/* The kit's own copy of the catalog table: a plugin that links the kit
 * may define keel_op_table (KEEL_OP_CATALOG_DEFINE_TABLE) itself. */
_Static_assert(KEEL_OP_COUNT * 4 <= NAME_SLOTS, "grow NAME_SLOTS");
static const keel_op_info kit_table[KEEL_OP_COUNT] = {
#define KEEL_OP(ID, NAME, NIN, NOUT, DTYPES, SHAPE, GRAD, AMP, ATTRS, SEM)  \
    [KEEL_OP_##ID] = {NAME, NIN, NOUT, DTYPES, KEEL_AMP_##AMP, ATTRS, SEM,  \
                      #SHAPE, #GRAD},
#include <keel/ops.def>
#undef KEEL_OP
};

/* One check per op, from the op's shape rule in ops.def. */
static const kit_rule_fn rules[KEEL_OP_COUNT] = {
#define KEEL_OP(ID, NAME, NIN, NOUT, DTYPES, SHAPE, GRAD, AMP, ATTRS, SEM)  \
    [KEEL_OP_##ID] = kit_rule_##SHAPE,
#include <keel/ops.def>
#undef KEEL_OP
};

/* ---- catalog --------------------------------------------------------------- */

/* Name look-up runs on every kernel launch (the plugins' launchers check
 * by name), so it goes through a hash index of the catalog rather than a
 * scan of it: a scan cost about 0.7 us for the ops at the catalog's end.
 * The index is built once and never changes afterwards. */
static uint16_t name_index[NAME_SLOTS]; /* op id + 1; 0: empty */
static pthread_once_t name_once = PTHREAD_ONCE_INIT;

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */

    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static void build_name_index(void)
{
    for (int i = 0; i < KEEL_OP_COUNT; i++) {
        uint32_t k = name_hash(kit_table[i].name) & (NAME_SLOTS - 1);
        while (name_index[k])
            k = (k + 1) & (NAME_SLOTS - 1);
        name_index[k] = (uint16_t)(i + 1);
    }
}

int keel_kit_op_id(const char *name)
{
    uint32_t k;

    if (!name)
        return -1;
    pthread_once(&name_once, build_name_index);
    for (k = name_hash(name) & (NAME_SLOTS - 1); name_index[k];
         k = (k + 1) & (NAME_SLOTS - 1))
        if (!strcmp(kit_table[name_index[k] - 1].name, name))
            return name_index[k] - 1;
    return -1;
}

const keel_op_info *keel_kit_op_info(int id)
{
    if (id < 0 || id >= KEEL_OP_COUNT)
        return NULL;
    return &kit_table[id];
}

/* ---- messages ----------------------------------------------------------------- */

static keel_status vfail(keel_kit_msg *m, const char *op, keel_status st,
                         const char *fmt, va_list ap)
{
    if (m) {
        int n = op ? snprintf(m->text, sizeof(m->text), "%s: ", op) : 0;
        if (n < 0 || (size_t)n >= sizeof(m->text))
            n = 0;
        vsnprintf(m->text + n, sizeof(m->text) - (size_t)n, fmt, ap);
    }
    return st;
}

keel_status kit_bad(const struct kit_ctx *c, const char *fmt, ...)
{
    va_list ap;
    keel_status st;

    va_start(ap, fmt);
    st = vfail(c->msg, c->info->name, KEEL_STATUS_INVALID_ARGUMENT, fmt, ap);
    va_end(ap);
    return st;
}

keel_status kit_fail(const struct kit_ctx *c, keel_status st,
                     const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    st = vfail(c->msg, c->info->name, st, fmt, ap);
    va_end(ap);
    return st;
}

keel_status kit_bad_msg(keel_kit_msg *m, const char *fmt, ...)
{
    va_list ap;
    keel_status st;

    va_start(ap, fmt);
    st = vfail(m, NULL, KEEL_STATUS_INVALID_ARGUMENT, fmt, ap);
    va_end(ap);
    return st;
}

const char *kit_shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t at = 0;

    if (n == 0)
        return buf;
    buf[0] = 0;
    at += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", i ? ", " : "",
                               (long long)shape[i]);
    if (at < n)
        snprintf(buf + at, n - at, "]");
    return buf;
}

/* ---- dtypes ---------------------------------------------------------------------- */

static const char *const dtype_names[KEEL_DTYPE_COUNT_] = {
    [KEEL_F32] = "float32", [KEEL_F64] = "float64", [KEEL_F16] = "float16",
    [KEEL_BF16] = "bfloat16", [KEEL_I8] = "int8",   [KEEL_U8] = "uint8",
    [KEEL_I32] = "int32",   [KEEL_I64] = "int64",   [KEEL_BOOL] = "bool",
};

const char *keel_kit_dtype_name(keel_dtype dt)
{
    if ((unsigned)dt < KEEL_DTYPE_COUNT_ && dtype_names[dt])
        return dtype_names[dt];
    return "unknown dtype";
}

bool keel_kit_float_dtype(keel_dtype dt)
{
    return dt == KEEL_F32 || dt == KEEL_F64 || dt == KEEL_F16 ||
           dt == KEEL_BF16;
}

/* ---- attributes -------------------------------------------------------------------- */

const keel_attr *keel_kit_attr(const keel_kernel_args *a, const char *name)
{
    if (!a || !a->attrs)
        return NULL;
    for (int i = 0; i < a->num_attrs; i++)
        if (a->attrs[i].name && !strcmp(a->attrs[i].name, name))
            return &a->attrs[i];
    return NULL;
}

int64_t keel_kit_attr_i(const keel_kernel_args *a, const char *name,
                        int64_t def)
{
    const keel_attr *t = keel_kit_attr(a, name);

    if (!t)
        return def;
    switch (t->type) {
    case KEEL_ATTR_FLOAT:
        /* Truncation of a value the generic check found in range. */
        if (!(t->v.f > -9.2e18 && t->v.f < 9.2e18))
            return def;
        return (int64_t)t->v.f;
    case KEEL_ATTR_INT:
    case KEEL_ATTR_BOOL:
    case KEEL_ATTR_DTYPE:
        return t->v.i;
    default:
        return def;
    }
}

double keel_kit_attr_f(const keel_kernel_args *a, const char *name,
                       double def)
{
    const keel_attr *t = keel_kit_attr(a, name);

    if (!t)
        return def;
    switch (t->type) {
    case KEEL_ATTR_FLOAT:
        return t->v.f;
    case KEEL_ATTR_INT:
    case KEEL_ATTR_BOOL:
    case KEEL_ATTR_DTYPE:
        return (double)t->v.i;
    default:
        return def;
    }
}

const char *keel_kit_attr_s(const keel_kernel_args *a, const char *name,
                            const char *def)
{
    const keel_attr *t = keel_kit_attr(a, name);

    return t && t->type == KEEL_ATTR_STRING && t->v.s ? t->v.s : def;
}

const int64_t *keel_kit_attr_ints(const keel_kernel_args *a,
                                  const char *name, int64_t *n)
{
    const keel_attr *t = keel_kit_attr(a, name);

    if (!t || t->type != KEEL_ATTR_INTS || t->v.ints.count <= 0 ||
        !t->v.ints.data) {
        *n = 0;
        return NULL;
    }
    *n = t->v.ints.count;
    return t->v.ints.data;
}

const double *keel_kit_attr_floats(const keel_kernel_args *a,
                                   const char *name, int64_t *n)
{
    const keel_attr *t = keel_kit_attr(a, name);

    if (!t || t->type != KEEL_ATTR_FLOATS || t->v.floats.count <= 0 ||
        !t->v.floats.data) {
        *n = 0;
        return NULL;
    }
    *n = t->v.floats.count;
    return t->v.floats.data;
}

/* ---- descriptors ---------------------------------------------------------------------- */

int64_t keel_kit_numel(const keel_tensor_desc *d)
{
    int64_t n = 1;

    for (int i = 0; i < d->ndim; i++)
        n *= d->shape[i];
    return n;
}

int64_t keel_kit_prod(const int64_t *shape, int from, int to)
{
    int64_t n = 1;

    for (int d = from; d < to; d++)
        n *= shape[d];
    return n;
}

bool keel_kit_contiguous(const keel_tensor_desc *d)
{
    int64_t s = 1;

    /* An empty tensor is contiguous whatever its other dims; test that
     * first, so that the running product below never overflows. */
    for (int i = 0; i < d->ndim; i++)
        if (d->shape[i] == 0)
            return true;
    for (int i = d->ndim - 1; i >= 0; i--) {
        if (d->shape[i] != 1 && d->strides[i] != s)
            return false;
        if (__builtin_mul_overflow(s, d->shape[i], &s))
            return false; /* beyond int64: no descriptor of that size */
    }
    return true;
}

bool keel_kit_same_shape(const keel_tensor_desc *a, const keel_tensor_desc *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

int keel_kit_axis(int64_t axis, int ndim)
{
    if (axis < -(int64_t)ndim || axis >= ndim)
        return -1;
    return (int)(axis < 0 ? axis + ndim : axis);
}

bool keel_kit_desc_ok(const keel_tensor_desc *d)
{
    int64_t n = 1, lo = 0, hi = 0, es;

    if ((unsigned)d->dtype >= KEEL_DTYPE_COUNT_ || d->ndim < 0 ||
        d->ndim > KEEL_MAX_DIMS)
        return false;
    for (int i = 0; i < d->ndim; i++)
        if (d->shape[i] < 0 || __builtin_mul_overflow(n, d->shape[i], &n))
            return false;
    if (n == 0)
        return true;
    /* The byte span [lo, hi) of the elements must fit in int64_t. */
    for (int i = 0; i < d->ndim; i++) {
        int64_t span;
        if (__builtin_mul_overflow(d->shape[i] - 1, d->strides[i], &span) ||
            (span < 0 ? __builtin_add_overflow(lo, span, &lo)
                      : __builtin_add_overflow(hi, span, &hi)))
            return false;
    }
    es = keel_dtype_size(d->dtype);
    return !__builtin_mul_overflow(lo, es, &lo) &&
           !__builtin_add_overflow(hi, 1, &hi) &&
           !__builtin_mul_overflow(hi, es, &hi) &&
           !__builtin_sub_overflow(hi, lo, &hi);
}

/* ---- rule helpers ------------------------------------------------------------------------ */

keel_status kit_arity(const struct kit_ctx *c, int nin, int nout)
{
    if ((nin >= 0 && KNIN(c) != nin) || (nout >= 0 && KNOUT(c) != nout))
        return kit_bad(c, "needs %d input(s) and %d output(s), got %d and %d",
                       nin, nout, (int)KNIN(c), (int)KNOUT(c));
    return KEEL_STATUS_OK;
}

keel_status kit_inputs_between(const struct kit_ctx *c, int lo, int hi)
{
    if (KNIN(c) < lo || KNIN(c) > hi)
        return kit_bad(c, "needs %d to %d inputs, got %d", lo, hi,
                       (int)KNIN(c));
    return KEEL_STATUS_OK;
}

keel_status kit_out_is(const struct kit_ctx *c, int k, keel_dtype dt,
                       int ndim, const int64_t *shape)
{
    const keel_tensor_desc *o = KOUT(c, k);
    char want[160], got[160];

    if (o->dtype != dt)
        return kit_bad(c, "output %d is %s, expected %s", k,
                       keel_kit_dtype_name(o->dtype),
                       keel_kit_dtype_name(dt));
    if (o->ndim != ndim ||
        (ndim > 0 && memcmp(o->shape, shape, sizeof(int64_t) * (size_t)ndim)))
        return kit_bad(c, "output %d has shape %s, expected %s", k,
                       kit_shape_str(got, sizeof(got), o->ndim, o->shape),
                       kit_shape_str(want, sizeof(want), ndim, shape));
    return KEEL_STATUS_OK;
}

keel_status kit_out_like(const struct kit_ctx *c, int k,
                         const keel_tensor_desc *d, keel_dtype dt)
{
    return kit_out_is(c, k, dt, d->ndim, d->shape);
}

keel_status kit_same_dtype(const struct kit_ctx *c, uint32_t mask, int ref)
{
    keel_dtype dt = KIN(c, ref)->dtype;

    for (int i = 0; i < KNIN(c) && i < 32; i++)
        if ((mask & (1u << i)) && KIN(c, i)->dtype != dt)
            return kit_bad(c, "input %d is %s, input %d %s: they must share "
                           "one dtype", i,
                           keel_kit_dtype_name(KIN(c, i)->dtype), ref,
                           keel_kit_dtype_name(dt));
    return KEEL_STATUS_OK;
}

keel_status kit_key_dtype(const struct kit_ctx *c, keel_dtype dt)
{
    if (!(c->info->dtype_mask & KEEL_DTYPE_BIT(dt)))
        return kit_bad(c, "dtype %s is not one of the op's dtypes",
                       keel_kit_dtype_name(dt));
    return KEEL_STATUS_OK;
}

keel_status kit_need_float(const struct kit_ctx *c, int i)
{
    if (!keel_kit_float_dtype(KIN(c, i)->dtype))
        return kit_bad(c, "input %d is %s; the op needs a floating dtype", i,
                       keel_kit_dtype_name(KIN(c, i)->dtype));
    return KEEL_STATUS_OK;
}

/* ---- the generic check -------------------------------------------------------------------- */

/* Is attribute value `t` acceptable for catalog type `type`? */
static bool attr_fits(const keel_attr *t, const char *type, size_t len)
{
#define IS(s) (len == sizeof(s) - 1 && !strncmp(type, s, len))
    switch (t->type) {
    case KEEL_ATTR_INT:
        if (IS("int"))
            return true;
        if (IS("float"))
            return true;
        if (IS("bool"))
            return t->v.i == 0 || t->v.i == 1;
        if (IS("dtype"))
            return t->v.i >= 0 && t->v.i < KEEL_DTYPE_COUNT_;
        return false;
    case KEEL_ATTR_BOOL:
        return (IS("bool") || IS("int")) && (t->v.i == 0 || t->v.i == 1);
    case KEEL_ATTR_FLOAT:
        return IS("float");
    case KEEL_ATTR_DTYPE:
        return (IS("dtype") || IS("int")) && t->v.i >= 0 &&
               t->v.i < KEEL_DTYPE_COUNT_;
    case KEEL_ATTR_STRING:
        return IS("str") && t->v.s;
    case KEEL_ATTR_INTS:
        return IS("ints") && t->v.ints.count >= 0 &&
               (t->v.ints.count == 0 || t->v.ints.data);
    case KEEL_ATTR_FLOATS:
        return IS("floats") && t->v.floats.count >= 0 &&
               (t->v.floats.count == 0 || t->v.floats.data);
    }
    return false;
#undef IS
}

/* Walk the catalog spec "name:type=default;...": each attribute given must
 * have its spec's type, and one without a default must be given. */
static keel_status check_attrs(const struct kit_ctx *c)
{
    const char *p = c->info->attrs;

    while (p && *p) {
        const char *end = strchr(p, ';'), *colon = strchr(p, ':');
        const char *eq;
        size_t seg = end ? (size_t)(end - p) : strlen(p);
        char name[64];
        const keel_attr *t;

        if (!colon || (size_t)(colon - p) >= seg ||
            (size_t)(colon - p) >= sizeof(name))
            break; /* a malformed spec is the catalog's bug, not the call's */
        memcpy(name, p, (size_t)(colon - p));
        name[colon - p] = 0;
        eq = memchr(colon, '=', seg - (size_t)(colon - p));
        t = keel_kit_attr(c->a, name);
        if (!t && !eq)
            return kit_bad(c, "attribute '%s' is required", name);
        if (t) {
            size_t tl = (eq ? (size_t)(eq - colon) : seg - (size_t)(colon - p)) - 1;
            if (!attr_fits(t, colon + 1, tl))
                return kit_bad(c, "attribute '%s' has the wrong type or "
                               "value for its catalog type '%.*s'",
                               name, (int)tl, colon + 1);
            if (t->type == KEEL_ATTR_FLOAT && t->v.f != t->v.f &&
                !(tl == 5 && !strncmp(colon + 1, "float", 5)))
                return kit_bad(c, "attribute '%s' is NaN", name);
        }
        p = end ? end + 1 : NULL;
    }
    return KEEL_STATUS_OK;
}

static keel_status check_descs(const struct kit_ctx *c)
{
    for (int i = 0; i < KNIN(c) + KNOUT(c); i++) {
        bool in = i < KNIN(c);
        int k = in ? i : i - KNIN(c);
        const keel_tensor_desc *d = in ? KIN(c, k) : KOUT(c, k);
        if (!keel_kit_desc_ok(d))
            return kit_bad(c, "%s %d has a bad descriptor (dtype %d, ndim "
                           "%d, a negative dimension, or an element count "
                           "or byte span beyond int64)",
                           in ? "input" : "output", k, (int)d->dtype,
                           (int)d->ndim);
        /* The core allocates every output new and row-major contiguous
         * (docs/ops.md, "What a kernel receives"). */
        if (!in && !keel_kit_contiguous(d))
            return kit_bad(c, "output %d is not row-major contiguous", k);
    }
    return KEEL_STATUS_OK;
}

keel_status keel_kit_check(int op, const keel_kernel_args *a,
                           keel_kit_msg *msg)
{
    struct kit_ctx c = {a, op, keel_kit_op_info(op), msg};
    keel_status st;

    if (msg)
        msg->text[0] = 0;
    if (!c.info)
        return kit_bad_msg(msg, "op id %d is not in the catalog", op);
    if (!a)
        return kit_bad(&c, "kernel args are NULL");
    if (a->struct_size < KEEL_KERNEL_ARGS_MIN_SIZE)
        return kit_bad(&c, "keel_kernel_args.struct_size %u < %zu",
                       (unsigned)a->struct_size,
                       (size_t)KEEL_KERNEL_ARGS_MIN_SIZE);
    if (a->num_inputs < 0 || a->num_outputs < 0 || a->num_attrs < 0 ||
        (a->num_inputs && !a->inputs) || (a->num_outputs && !a->outputs) ||
        (a->num_attrs && !a->attrs))
        return kit_bad(&c, "negative count or NULL array (%d inputs, %d "
                       "outputs, %d attributes)",
                       (int)a->num_inputs, (int)a->num_outputs,
                       (int)a->num_attrs);
    if (c.info->num_inputs >= 0 && a->num_inputs > c.info->num_inputs)
        return kit_bad(&c, "takes at most %d input(s), got %d",
                       (int)c.info->num_inputs, (int)a->num_inputs);
    /* The catalog's output count is the most an op has (a conv grad
     * without a bias has one less); the rule checks the exact count. */
    if (c.info->num_outputs >= 0 && a->num_outputs > c.info->num_outputs)
        return kit_bad(&c, "has at most %d output(s), got %d",
                       (int)c.info->num_outputs, (int)a->num_outputs);
    for (int i = 0; i < a->num_attrs; i++)
        if (!a->attrs[i].name)
            return kit_bad(&c, "attribute %d has no name", i);
    if ((st = check_descs(&c)) || (st = check_attrs(&c)))
        return st;
    return rules[op](&c);
}

keel_status keel_kit_check_name(const char *op, const keel_kernel_args *a,
                                keel_kit_msg *msg)
{
    int id = keel_kit_op_id(op);

    if (id < 0) {
        if (msg)
            snprintf(msg->text, sizeof(msg->text),
                     "'%s' is not an op of the catalog", op ? op : "(null)");
        return KEEL_STATUS_NOT_FOUND;
    }
    return keel_kit_check(id, a, msg);
}

/* ---- iteration plans ------------------------------------------------------------------------- */

keel_status keel_kit_plan_make(keel_kit_plan *p, int nops, int ndim,
                               const int64_t *shape,
                               const int64_t (*strides)[KEEL_MAX_DIMS])
{
    int n = 0;

    if (nops < 1 || nops > KEEL_KIT_PLAN_MAX || ndim < 0 ||
        ndim > KEEL_MAX_DIMS)
        return KEEL_STATUS_INVALID_ARGUMENT;
    memset(p, 0, sizeof(*p));
    p->nops = nops;
    p->numel = 1;
    for (int d = 0; d < ndim; d++)
        p->numel *= shape[d];
    if (p->numel == 0) {
        p->ndim = 1;
        p->shape[0] = 0;
        p->dense = true;
        for (int k = 0; k < nops; k++)
            p->strides[k][0] = 1;
        return KEEL_STATUS_OK;
    }
    /* Drop size-1 dims, then merge d into the kept inner one when every
     * operand steps by the inner extent. Work inner to outer. */
    for (int d = ndim - 1; d >= 0; d--) {
        bool merge = n > 0;
        if (shape[d] == 1)
            continue;
        for (int k = 0; merge && k < nops; k++)
            merge = strides[k][d] ==
                    p->strides[k][KEEL_MAX_DIMS - n] * p->shape[KEEL_MAX_DIMS - n];
        if (merge) {
            p->shape[KEEL_MAX_DIMS - n] *= shape[d];
            continue;
        }
        n++;
        p->shape[KEEL_MAX_DIMS - n] = shape[d];
        for (int k = 0; k < nops; k++)
            p->strides[k][KEEL_MAX_DIMS - n] = strides[k][d];
    }
    /* Move the kept dims (stored from the end) to the front. */
    memmove(p->shape, p->shape + KEEL_MAX_DIMS - n, sizeof(int64_t) * (size_t)n);
    for (int k = 0; k < nops; k++)
        memmove(p->strides[k], p->strides[k] + KEEL_MAX_DIMS - n,
                sizeof(int64_t) * (size_t)n);
    p->ndim = n;
    p->dense = n == 0;
    if (n == 1) {
        p->dense = true;
        for (int k = 0; k < nops; k++)
            p->dense = p->dense && p->strides[k][0] == 1;
    }
    return KEEL_STATUS_OK;
}

keel_status keel_kit_plan_descs(keel_kit_plan *p, int nops,
                                const keel_tensor_desc *const *d)
{
    int64_t st[KEEL_KIT_PLAN_MAX][KEEL_MAX_DIMS];

    if (nops < 1 || nops > KEEL_KIT_PLAN_MAX)
        return KEEL_STATUS_INVALID_ARGUMENT;
    for (int k = 0; k < nops; k++) {
        if (d[k]->ndim != d[0]->ndim)
            return KEEL_STATUS_INVALID_ARGUMENT;
        memcpy(st[k], d[k]->strides, sizeof(st[k]));
    }
    return keel_kit_plan_make(p, nops, d[0]->ndim, d[0]->shape,
                              (const int64_t(*)[KEEL_MAX_DIMS])st);
}

int64_t keel_kit_plan_offset(const keel_kit_plan *p, int op, int64_t i)
{
    int64_t off = 0;

    for (int d = p->ndim - 1; d >= 0; d--) {
        int64_t n = p->shape[d];
        off += (i % n) * p->strides[op][d];
        i /= n;
    }
    return off;
}
