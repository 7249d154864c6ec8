/*
 * keel conform — kernels: every catalog op the plugin provides, in every
 * dtype, against the CPU plugin.
 *
 * For each (op, dtype) test and each recipe case (kernel_recipes.c):
 *
 *  1. seeded random inputs in the dtype under test (values rounded to it);
 *  2. the reference: the same values cast to float64 on cpu:0 and the op
 *     run there through keel_op_run (integer and bool ops run in their own
 *     dtype); a fused op (fused_linear, fused_conv2d) runs as the two ops
 *     it fuses, linear or conv2d and then its activation's op, so that it
 *     is not its own reference; a second run in the tested dtype on cpu:0
 *     gives the output dtypes and shapes the kernel must produce;
 *  3. the kernel under test, called directly: kernel.lookup, then fn with
 *     descriptors built here. Every buffer is allocated through the plugin
 *     with guard zones before and after, filled with a pattern; outputs
 *     start as all-ones bytes (NaN, -1), so an element never written shows;
 *     inputs are also laid out with a stride of 2 (gaps poisoned) in a
 *     second variant; binary ops also see stride-0 (broadcast) inputs;
 *  4. after a stream synchronize: the guards and the inputs must be
 *     untouched, float outputs must match by normalised mean squared error
 *     (NaN and infinity in the same places), integer outputs exactly.
 *
 * A kernel the plugin does not provide is "not provided" (skip); NOT_FOUND
 * from lookup is the only way to say so.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <keel/kit.h>

#include "conform.h"
#include "kernel_recipes.h"

#define KT_GUARD 256
#define KT_MAX_OUT 16

/* ---- suites ----------------------------------------------------------------- */

const char *cf_kernel_suite(int op)
{
    static const struct {
        const char *rule;
        const char *suite;
    } map[] = {
        {"broadcast", "kernels.elementwise"},
        {"compare", "kernels.elementwise"},
        {"logical", "kernels.elementwise"},
        {"logical_unary", "kernels.elementwise"},
        {"where", "kernels.elementwise"},
        {"same", "kernels.elementwise"},
        {"cast", "kernels.elementwise"},
        {"creation", "kernels.creation"},
        {"reduce", "kernels.reduce"},
        {"reduce_arg", "kernels.reduce"},
        {"reduce_bool", "kernels.reduce"},
        {"cumsum", "kernels.reduce"},
        {"matmul", "kernels.linalg"},
        {"linear", "kernels.linalg"},
        {"fused_linear", "kernels.linalg"},
        {"optimizer", "kernels.optimizer"},
        {"concat", "kernels.shape"},
        {"stack", "kernels.shape"},
        {"split", "kernels.shape"},
        {"gather", "kernels.shape"},
        {"scatter", "kernels.shape"},
        {"take_along_axis", "kernels.shape"},
        {"tile", "kernels.shape"},
        {"pad", "kernels.shape"},
        {"topk", "kernels.shape"},
        {"sort", "kernels.shape"},
        {"argsort", "kernels.shape"},
    };
    const char *rule = keel_op_get_info((keel_op_id)op)->shape_rule;

    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (!strcmp(map[i].rule, rule))
            return map[i].suite;
    return "kernels.nn";
}

bool cf_kernel_in_smoke(int op, int dtype)
{
    uint32_t mask = keel_op_get_info((keel_op_id)op)->dtype_mask;

    /* Smoke: float32, or the first dtype of an op without float32. */
    if (mask & KEEL_DTYPE_BIT(KEEL_F32))
        return dtype == KEEL_F32;
    for (int dt = 0; dt < KEEL_DTYPE_COUNT_; dt++)
        if (mask & KEEL_DTYPE_BIT(dt))
            return dt == dtype;
    return false;
}

/* ---- host tensors ------------------------------------------------------------- */

struct kt_tensor {
    int dtype;
    int ndim;
    int64_t shape[KEEL_MAX_DIMS];
    int64_t numel;
    double *v;
};

static void kt_free(struct kt_tensor *t)
{
    free(t->v);
    t->v = NULL;
}

static int64_t numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;

    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

static int role_dtype(char role, int dt)
{
    switch (role) {
    case 'L':
        return KEEL_I64;
    case 'B':
        return KEEL_BOOL;
    case 'U':
        return KEEL_U8;
    case 'F':
        return KEEL_F32;
    default:
        return dt;
    }
}

static void describe_shape(char *buf, size_t size, int dtype, int ndim,
                           const int64_t *shape)
{
    size_t n = (size_t)snprintf(buf, size, "%s[", cf_dtype_name(dtype));

    for (int i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? "," : "",
                              (long long)shape[i]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

static void describe_index(char *buf, size_t size, int64_t flat, int ndim,
                           const int64_t *shape)
{
    int64_t idx[KEEL_MAX_DIMS];
    size_t n;

    for (int d = ndim - 1; d >= 0; d--) {
        idx[d] = shape[d] ? flat % shape[d] : 0;
        flat = shape[d] ? flat / shape[d] : 0;
    }
    n = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? "," : "",
                              (long long)idx[d]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

/* ---- input generation ------------------------------------------------------------ */

static void int_range(const struct kr_input *in, int dtype, int64_t *lo,
                      int64_t *hi)
{
    if (in->has_irange) {
        *lo = in->ilo;
        *hi = in->ihi;
    } else if (in->role == 'L') {
        *lo = 0;
        *hi = 4;
    } else {
        *lo = -5;
        *hi = 5;
    }
    if (dtype == KEEL_U8 && *lo < 0)
        *lo = 0;
    if (dtype == KEEL_BOOL) {
        *lo = *lo < 0 ? 0 : (*lo > 1 ? 1 : *lo);
        *hi = *hi > 1 ? 1 : (*hi < 0 ? 0 : *hi);
    }
    if (dtype == KEEL_I8) {
        *lo = *lo < -128 ? -128 : *lo;
        *hi = *hi > 127 ? 127 : *hi;
    }
    if (*hi < *lo)
        *hi = *lo;
}

static double gen_value(const struct kr_input *in, int dtype, struct cf_rng *r)
{
    if (cf_dtype_is_float(dtype)) {
        double lo = in->has_range ? in->lo : -3, hi = in->has_range ? in->hi : 3;
        for (int tries = 0;; tries++) {
            double v = cf_rng_uniform(r, lo, hi);
            if (in->intval)
                v = nearbyint(v);
            if (!in->nonzero || fabs(v) >= 0.5 || tries > 100)
                return cf_quantize(dtype, v);
        }
    } else {
        int64_t lo, hi;
        int_range(in, dtype, &lo, &hi);
        for (int tries = 0;; tries++) {
            int64_t v = cf_rng_int(r, lo, hi);
            if (!in->nonzero || v != 0 || tries > 100)
                return (double)v;
        }
    }
}

static void gen_rowsum(struct kt_tensor *t, struct cf_rng *r)
{
    int64_t cols = t->ndim ? t->shape[t->ndim - 1] : 1;

    for (int64_t row = 0; cols > 0 && row < t->numel / cols; row++) {
        double sum = 0;
        for (int64_t c = 0; c < cols; c++) {
            t->v[row * cols + c] = cf_rng_uniform(r, 0.05, 1.0);
            sum += t->v[row * cols + c];
        }
        for (int64_t c = 0; c < cols; c++)
            t->v[row * cols + c] =
                cf_quantize(t->dtype, t->v[row * cols + c] / sum);
    }
}

static void gen_unique(struct kt_tensor *t, const struct kr_input *in,
                       struct cf_rng *r)
{
    int64_t lo, hi, n;

    int_range(in, t->dtype, &lo, &hi);
    n = hi - lo + 1;
    for (int64_t i = 0; i < t->numel; i++) {
        for (;;) {
            int64_t v = cf_rng_int(r, lo, hi);
            int64_t k;
            for (k = 0; k < i && t->v[k] != (double)v; k++)
                ;
            if (k == i || i >= n) {
                t->v[i] = (double)v;
                break;
            }
        }
    }
}

/* Max-pool indices: a position inside each output window of input 0. */
static void gen_window(struct kt_tensor *t, const struct kt_tensor *x,
                       struct cf_rng *r)
{
    int64_t H, W, oh, ow, kh, kw;

    if (t->ndim != 4 || x->ndim != 4)
        return;
    H = x->shape[2];
    W = x->shape[3];
    oh = t->shape[2];
    ow = t->shape[3];
    kh = oh ? H / oh : 1;
    kw = ow ? W / ow : 1;
    for (int64_t i = 0; i < t->numel; i++) {
        int64_t j = i % (oh * ow), y = j / ow, xx = j % ow;
        int64_t py = y * kh + cf_rng_int(r, 0, kh - 1);
        int64_t px = xx * kw + cf_rng_int(r, 0, kw - 1);
        t->v[i] = (double)(py * W + px);
    }
}

static int gen_inputs(const struct kr_case *c, int dt, uint64_t seed,
                      struct kt_tensor *in)
{
    struct cf_rng r;

    cf_rng_seed(&r, seed);
    for (int i = 0; i < c->nin; i++) {
        const struct kr_input *s = &c->in[i];
        struct kt_tensor *t = &in[i];

        t->dtype = role_dtype(s->role, dt);
        t->ndim = s->ndim;
        memcpy(t->shape, s->shape, sizeof(t->shape));
        t->numel = numel_of(s->ndim, s->shape);
        t->v = calloc((size_t)(t->numel ? t->numel : 1), sizeof(double));
        if (!t->v)
            return -1;
        if (s->rowsum)
            gen_rowsum(t, &r);
        else if (s->unique)
            gen_unique(t, s, &r);
        else if (s->window && i > 0)
            gen_window(t, &in[0], &r);
        else
            for (int64_t k = 0; k < t->numel; k++)
                t->v[k] = gen_value(s, t->dtype, &r);
        if (s->nonfinite && cf_dtype_is_float(t->dtype) && t->numel > 0) {
            static const double special[3] = {INFINITY, -INFINITY, NAN};
            for (int k = 0; k < 3; k++)
                t->v[cf_rng_int(&r, 0, t->numel - 1)] = special[k];
        }
    }
    return 0;
}

/* ---- attributes -------------------------------------------------------------------- */

struct kt_attrs {
    int n;
    keel_attr a[KR_MAX_ATTR];
    int64_t ints[KR_MAX_ATTR][8];
    double floats[KR_MAX_ATTR][8];
    char strs[KR_MAX_ATTR][96];
};

/* Type of attribute `name` in the catalog spec "name:type=default;...". */
static int spec_type(const char *spec, const char *name, keel_attr_type *type)
{
    static const struct {
        const char *n;
        keel_attr_type t;
    } types[] = {{"int", KEEL_ATTR_INT},     {"float", KEEL_ATTR_FLOAT},
                 {"bool", KEEL_ATTR_BOOL},   {"str", KEEL_ATTR_STRING},
                 {"ints", KEEL_ATTR_INTS},   {"floats", KEEL_ATTR_FLOATS},
                 {"dtype", KEEL_ATTR_DTYPE}};
    size_t nl = strlen(name);
    const char *s = spec;

    while (*s) {
        const char *colon = strchr(s, ':'), *semi = strchr(s, ';');
        if (!semi)
            semi = s + strlen(s);
        if (colon && colon < semi && (size_t)(colon - s) == nl &&
            !strncmp(s, name, nl)) {
            const char *t = colon + 1;
            size_t tl = strcspn(t, "=;");
            for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++)
                if (strlen(types[k].n) == tl && !strncmp(types[k].n, t, tl)) {
                    *type = types[k].t;
                    return 0;
                }
            return -1;
        }
        s = *semi ? semi + 1 : semi;
    }
    return -1;
}

static int list_parse(const char *v, int64_t *ints, double *fl, int max)
{
    int n = 0;
    char *end;

    while (*v && n < max) {
        if (ints)
            ints[n] = strtoll(v, &end, 10);
        else
            fl[n] = strtod(v, &end);
        if (end == v)
            return -1;
        n++;
        v = *end == ',' ? end + 1 : end;
    }
    return *v ? -1 : n;
}

static int build_attrs(int op, const struct kr_case *c, int tdt,
                       struct kt_attrs *at, char *err, size_t errsz)
{
    const keel_op_info *info = keel_op_get_info((keel_op_id)op);

    at->n = 0;
    for (int i = 0; i < c->nattr; i++) {
        keel_attr *a = &at->a[at->n];
        const char *v = c->attr_val[i];
        keel_attr_type type;
        int n;

        if (spec_type(info->attrs, c->attr_name[i], &type)) {
            snprintf(err, errsz, "recipe attribute '%s' is not in the "
                                 "catalog spec \"%s\"",
                     c->attr_name[i], info->attrs);
            return -1;
        }
        a->name = c->attr_name[i];
        a->type = type;
        switch (type) {
        case KEEL_ATTR_INT:
        case KEEL_ATTR_BOOL:
            a->v.i = strtoll(v, NULL, 10);
            break;
        case KEEL_ATTR_FLOAT:
            a->v.f = !strcmp(v, "inf") ? INFINITY
                     : !strcmp(v, "-inf") ? -INFINITY
                                          : strtod(v, NULL);
            break;
        case KEEL_ATTR_STRING:
            snprintf(at->strs[at->n], sizeof(at->strs[0]), "%s", v);
            a->v.s = at->strs[at->n];
            break;
        case KEEL_ATTR_INTS:
            n = list_parse(v, at->ints[at->n], NULL, 8);
            if (n < 0)
                goto bad;
            a->v.ints.data = at->ints[at->n];
            a->v.ints.count = n;
            break;
        case KEEL_ATTR_FLOATS:
            n = list_parse(v, NULL, at->floats[at->n], 8);
            if (n < 0)
                goto bad;
            a->v.floats.data = at->floats[at->n];
            a->v.floats.count = n;
            break;
        case KEEL_ATTR_DTYPE: {
            keel_dtype d;
            if (!strcmp(v, "T"))
                a->v.i = tdt;
            else if (keel_dtype_parse(v, &d) == KEEL_STATUS_OK)
                a->v.i = d;
            else
                goto bad;
            break;
        }
        }
        at->n++;
        continue;
    bad:
        snprintf(err, errsz, "recipe attribute %s=%s does not parse",
                 c->attr_name[i], v);
        return -1;
    }
    return 0;
}

static void set_dtype_attr(struct kt_attrs *at, const char *name, int dt)
{
    for (int i = 0; i < at->n; i++)
        if (!strcmp(at->a[i].name, name)) {
            at->a[i].v.i = dt;
            return;
        }
    at->a[at->n].name = name;
    at->a[at->n].type = KEEL_ATTR_DTYPE;
    at->a[at->n].v.i = dt;
    at->n++;
}

/* ---- the reference on cpu:0 -------------------------------------------------------- */

struct kt_result {
    int nout;
    struct kt_tensor out[KT_MAX_OUT];
    struct kt_tensor mut[KR_MAX_IN]; /* in-place inputs after the op */
};

static void result_free(struct kt_result *r)
{
    for (int i = 0; i < KT_MAX_OUT; i++)
        kt_free(&r->out[i]);
    for (int i = 0; i < KR_MAX_IN; i++)
        kt_free(&r->mut[i]);
    memset(r, 0, sizeof(*r));
}

static int tensor_read(keel_tensor *t, struct kt_tensor *h)
{
    size_t es;
    void *buf;

    h->dtype = keel_tensor_dtype(t);
    h->ndim = keel_tensor_ndim(t);
    memcpy(h->shape, keel_tensor_shape(t), sizeof(int64_t) * (size_t)h->ndim);
    h->numel = keel_tensor_numel(t);
    es = cf_dtype_size(h->dtype);
    buf = malloc((size_t)(h->numel ? h->numel : 1) * es);
    h->v = calloc((size_t)(h->numel ? h->numel : 1), sizeof(double));
    if (!buf || !h->v ||
        keel_tensor_to_host(t, buf, (size_t)h->numel * es) != KEEL_STATUS_OK) {
        free(buf);
        return -1;
    }
    for (int64_t i = 0; i < h->numel; i++)
        h->v[i] = cf_load(h->dtype, buf, i);
    free(buf);
    return 0;
}

/*
 * keel_op_run of op, or for a fused op its unfused composition: linear or
 * conv2d with the other attributes, then the op its `activation` names
 * (gelu with approximate 0 or 1; leaky_relu with negative_slope = alpha;
 * none: nothing more). One output.
 */
static keel_status op_run_ref(int op, keel_tensor *const *in, int nin,
                              const struct kt_attrs *at, keel_tensor **out,
                              int max_out, int *nout)
{
    static const keel_op_id act_ops[KEEL_FUSED_ACT_COUNT_] = {
        [KEEL_FUSED_ACT_RELU] = KEEL_OP_RELU,
        [KEEL_FUSED_ACT_RELU6] = KEEL_OP_RELU6,
        [KEEL_FUSED_ACT_GELU] = KEEL_OP_GELU,
        [KEEL_FUSED_ACT_GELU_TANH] = KEEL_OP_GELU,
        [KEEL_FUSED_ACT_SILU] = KEEL_OP_SILU,
        [KEEL_FUSED_ACT_SIGMOID] = KEEL_OP_SIGMOID,
        [KEEL_FUSED_ACT_TANH] = KEEL_OP_TANH,
        [KEEL_FUSED_ACT_LEAKY_RELU] = KEEL_OP_LEAKY_RELU,
        [KEEL_FUSED_ACT_HARDSWISH] = KEEL_OP_HARDSWISH};
    keel_attr base[KR_MAX_ATTR], aa;
    const char *name = "none";
    keel_tensor *y = NULL;
    double alpha = 0;
    int nb = 0, n1 = 0, act;
    keel_status st;

    if (op != KEEL_OP_FUSED_LINEAR && op != KEEL_OP_FUSED_CONV2D)
        return keel_op_run((keel_op_id)op, in, nin, at->a, at->n, out,
                           max_out, nout);
    for (int i = 0; i < at->n; i++)
        if (!strcmp(at->a[i].name, "activation"))
            name = at->a[i].v.s;
        else if (!strcmp(at->a[i].name, "alpha"))
            alpha = at->a[i].v.f;
        else
            base[nb++] = at->a[i];
    act = keel_fused_act_from_name(name);
    if (act < 0) /* the fused op itself says what is wrong */
        return keel_op_run((keel_op_id)op, in, nin, at->a, at->n, out,
                           max_out, nout);
    st = keel_op_run(op == KEEL_OP_FUSED_LINEAR ? KEEL_OP_LINEAR
                                                : KEEL_OP_CONV2D,
                     in, nin, base, nb, &y, 1, &n1);
    if (st != KEEL_STATUS_OK || act == KEEL_FUSED_ACT_NONE) {
        out[0] = y;
        *nout = st == KEEL_STATUS_OK ? 1 : 0;
        return st;
    }
    memset(&aa, 0, sizeof(aa));
    if (act == KEEL_FUSED_ACT_GELU || act == KEEL_FUSED_ACT_GELU_TANH) {
        aa.name = "approximate";
        aa.type = KEEL_ATTR_BOOL;
        aa.v.i = act == KEEL_FUSED_ACT_GELU_TANH;
    } else if (act == KEEL_FUSED_ACT_LEAKY_RELU) {
        aa.name = "negative_slope";
        aa.type = KEEL_ATTR_FLOAT;
        aa.v.f = alpha;
    }
    st = keel_op_run(act_ops[act], &y, 1, &aa, aa.name ? 1 : 0, out, max_out,
                     nout);
    keel_tensor_free(y);
    return st;
}

/* Run op on cpu:0 with the inputs' T-role dtype replaced by `tdt`. */
static int run_on_cpu(int op, const struct kr_case *c,
                      const struct kt_tensor *in, int dt, int tdt,
                      const struct kt_attrs *at, uint32_t mutated,
                      struct kt_result *res, char *err, size_t errsz)
{
    keel_tensor *ti[KR_MAX_IN] = {0}, *to[64] = {0};
    int nout = 0, rc = -1;
    keel_status st;

    memset(res, 0, sizeof(*res));
    for (int i = 0; i < c->nin; i++) {
        int hdt = in[i].dtype == dt && c->in[i].role == 'T' ? tdt : in[i].dtype;
        size_t es = cf_dtype_size(hdt);
        void *buf = malloc((size_t)(in[i].numel ? in[i].numel : 1) * es);

        if (!buf)
            goto out;
        for (int64_t k = 0; k < in[i].numel; k++)
            cf_store(hdt, buf, k, in[i].v[k]);
        st = keel_tensor_from_host(buf, (keel_dtype)hdt, in[i].ndim,
                                   in[i].shape, "cpu:0", &ti[i]);
        free(buf);
        if (st != KEEL_STATUS_OK) {
            snprintf(err, errsz, "keel_tensor_from_host: %s",
                     keel_last_error());
            goto out;
        }
    }
    st = op_run_ref(op, ti, c->nin, at, to, 64, &nout);
    if (st != KEEL_STATUS_OK) {
        snprintf(err, errsz, "%s", keel_last_error());
        goto out;
    }
    if (nout > KT_MAX_OUT) {
        snprintf(err, errsz, "%d outputs: too many for this test", nout);
        goto out;
    }
    res->nout = nout;
    for (int o = 0; o < nout; o++)
        if (tensor_read(to[o], &res->out[o])) {
            snprintf(err, errsz, "reading output %d: %s", o,
                     keel_last_error());
            goto out;
        }
    for (int i = 0; i < c->nin; i++)
        if ((mutated & (1u << i)) && tensor_read(ti[i], &res->mut[i])) {
            snprintf(err, errsz, "reading input %d: %s", i, keel_last_error());
            goto out;
        }
    rc = 0;
out:
    for (int i = 0; i < c->nin; i++)
        keel_tensor_free(ti[i]);
    for (int o = 0; o < nout && o < 64; o++)
        keel_tensor_free(to[o]);
    keel_clear_error();
    return rc;
}

/* ---- comparison ---------------------------------------------------------------------- */

static const char *fmt_val(char *buf, size_t n, double v)
{
    snprintf(buf, n, "%.9g", v);
    return buf;
}

/* Compare got with ref; on a mismatch write why into msg and return false. */
static bool compare(int dtype, const struct kt_tensor *ref, const double *got,
                    double tol, char *msg, size_t msgsz)
{
    char idx[96], a[40], b[40];
    double err = 0, den = 0, thr2, worst = -1;
    int64_t n = ref->numel, first = -1, wi = -1;

    if (!cf_dtype_is_float(dtype)) {
        for (int64_t i = 0; i < n; i++) {
            bool same = dtype == KEEL_BOOL ? ((got[i] != 0) == (ref->v[i] != 0))
                                           : got[i] == ref->v[i];
            if (!same) {
                describe_index(idx, sizeof(idx), i, ref->ndim, ref->shape);
                snprintf(msg, msgsz,
                         "first differing element %s: got %s, expected %s "
                         "(exact match required)",
                         idx, fmt_val(a, sizeof(a), got[i]),
                         fmt_val(b, sizeof(b), ref->v[i]));
                return false;
            }
        }
        return true;
    }
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], r = ref->v[i];
        if (isnan(g) != isnan(r) || (isinf(g) || isinf(r) ? g != r : false)) {
            if (!isnan(g) || !isnan(r)) {
                describe_index(idx, sizeof(idx), i, ref->ndim, ref->shape);
                snprintf(msg, msgsz,
                         "NaN/Inf mismatch at element %s: got %s, expected %s",
                         idx, fmt_val(a, sizeof(a), g),
                         fmt_val(b, sizeof(b), r));
                return false;
            }
        }
        if (!isfinite(g) || !isfinite(r))
            continue;
        err += (g - r) * (g - r);
        den += r * r;
    }
    cf_metric_nmse(den > 0 ? err / den : err, tol);
    if ((den > 0 ? err / den : err) <= tol)
        return true;
    thr2 = tol * (den > 0 && n > 0 ? den / (double)n : 1.0);
    for (int64_t i = 0; i < n; i++) {
        double d;
        if (!isfinite(got[i]) || !isfinite(ref->v[i]))
            continue;
        d = (got[i] - ref->v[i]) * (got[i] - ref->v[i]);
        if (first < 0 && d > thr2)
            first = i;
        if (d > worst) {
            worst = d;
            wi = i;
        }
    }
    if (first < 0)
        first = wi;
    describe_index(idx, sizeof(idx), first, ref->ndim, ref->shape);
    snprintf(msg, msgsz,
             "NMSE %.3g > %.3g; first differing element %s: got %s, expected "
             "%s",
             den > 0 ? err / den : err, tol, idx,
             fmt_val(a, sizeof(a), got[first]),
             fmt_val(b, sizeof(b), ref->v[first]));
    return false;
}

/* ---- the kernel under test ---------------------------------------------------------- */

struct kt_buf {
    keel_dptr base;
    size_t bytes;          /* whole allocation                      */
    unsigned char *image;  /* what was uploaded                     */
    keel_tensor_desc desc;
    int64_t extent;        /* elements covered by the layout        */
};

static void buf_free(int32_t d, struct kt_buf *b)
{
    if (b->base)
        cf_env.api->memory->free(d, b->base);
    free(b->image);
    memset(b, 0, sizeof(*b));
}

static size_t guard_bytes(int i)
{
    uint32_t a = cf_env.props[i].alloc_alignment;

    return a > KT_GUARD ? a : KT_GUARD;
}

/* How a test lays its inputs out in device memory. */
enum kt_layout {
    KT_CONTIGUOUS = 0,
    KT_STRIDED,    /* every stride doubled; the gaps are poisoned          */
    KT_TRANSPOSED, /* last two dims swapped in memory: a transposed view,
                    * dense but not row-major (strides [.., 1, rows])     */
    KT_NLAYOUTS
};

static const char *layout_name(int layout)
{
    switch (layout) {
    case KT_STRIDED:
        return "inputs strided (step 2)";
    case KT_TRANSPOSED:
        return "inputs as transposed views (last two dims swapped in "
               "memory)";
    default:
        return "contiguous";
    }
}

/* Allocate and upload a tensor laid out as `layout` says; guards carry a
 * pattern, gaps are all-ones bytes. */
static bool buf_make(int i, const struct kt_tensor *t, int layout,
                     uint32_t seed, struct kt_buf *b)
{
    int32_t d = cf_env.dev[i];
    size_t es = cf_dtype_size(t->dtype), g = guard_bytes(i);
    int64_t stride = 1;
    int nd = t->ndim;

    memset(b, 0, sizeof(*b));
    b->desc.dtype = (keel_dtype)t->dtype;
    b->desc.ndim = nd;
    if (layout == KT_TRANSPOSED && nd < 2)
        layout = KT_CONTIGUOUS;
    for (int k = nd - 1; k >= 0; k--) {
        /* memory order: dims 0..nd-3, then nd-1, then nd-2 (innermost) */
        int m = layout == KT_TRANSPOSED && k >= nd - 2 ? 2 * nd - 3 - k : k;
        int64_t s = layout == KT_STRIDED ? 2 * stride : stride;
        b->desc.shape[k] = t->shape[k];
        b->desc.strides[m] = s;
        stride *= t->shape[m] > 0 ? t->shape[m] : 1;
    }
    b->extent = t->numel ? (layout == KT_STRIDED ? 2 * t->numel : t->numel)
                         : 0;
    b->bytes = 2 * g + (size_t)b->extent * es;
    b->image = malloc(b->bytes);
    if (!CF_CHECK(b->image, "out of host memory"))
        return false;
    cf_pattern(b->image, g, seed);
    memset(b->image + g, 0xff, (size_t)b->extent * es);
    cf_pattern(b->image + g + (size_t)b->extent * es, g, seed + 1);
    for (int64_t k = 0; k < t->numel; k++) {
        int64_t rem = k, off = 0;
        for (int dd = t->ndim - 1; dd >= 0; dd--) {
            off += (rem % t->shape[dd]) * b->desc.strides[dd];
            rem /= t->shape[dd];
        }
        cf_store(t->dtype, b->image + g, off, t->v[k]);
    }
    if (!cf_alloc(d, b->bytes, &b->base))
        return false;
    b->desc.data = b->base + g;
    return cf_upload(d, b->base, b->image, b->bytes);
}

/* Allocate an output: contiguous, all-ones bytes between two guards. */
static bool out_make(int i, const struct kt_tensor *meta, uint32_t seed,
                     struct kt_buf *b)
{
    size_t es = cf_dtype_size(meta->dtype), g = guard_bytes(i), data;
    int64_t stride = 1;

    memset(b, 0, sizeof(*b));
    b->desc.dtype = (keel_dtype)meta->dtype;
    b->desc.ndim = meta->ndim;
    for (int k = meta->ndim - 1; k >= 0; k--) {
        b->desc.shape[k] = meta->shape[k];
        b->desc.strides[k] = stride;
        stride *= meta->shape[k] > 0 ? meta->shape[k] : 1;
    }
    b->extent = meta->numel;
    data = (size_t)b->extent * es;
    b->bytes = 2 * g + data;
    b->image = malloc(b->bytes);
    if (!CF_CHECK(b->image, "out of host memory"))
        return false;
    cf_pattern(b->image, g, seed);
    memset(b->image + g, 0xff, data);
    cf_pattern(b->image + g + data, g, seed + 1);
    if (!cf_alloc(cf_env.dev[i], b->bytes, &b->base))
        return false;
    b->desc.data = b->base + g;
    return cf_upload(cf_env.dev[i], b->base, b->image, b->bytes);
}

/* Element k (row-major) of a buffer's layout, read from `img`. */
static double buf_elem(const struct kt_buf *b, const unsigned char *img,
                       size_t g, int64_t k)
{
    int64_t rem = k, off = 0;

    for (int dd = b->desc.ndim - 1; dd >= 0; dd--) {
        off += (rem % b->desc.shape[dd]) * b->desc.strides[dd];
        rem /= b->desc.shape[dd];
    }
    return cf_load(b->desc.dtype, img + g, off);
}

/* Re-express input descriptors with stride 0 along broadcast dims. */
static void broadcast_descs(int kind, int nin, struct kt_buf *in)
{
    int64_t shape[KEEL_MAX_DIMS];
    int nd = 0;

    if (kind == 0 || nin == 0)
        return;
    if (kind == 1) {
        for (int i = 0; i < nin; i++)
            if (in[i].desc.ndim > nd)
                nd = in[i].desc.ndim;
        for (int k = 0; k < nd; k++)
            shape[k] = 1;
        for (int i = 0; i < nin; i++)
            for (int j = 0; j < in[i].desc.ndim; j++) {
                int k = nd - in[i].desc.ndim + j;
                if (in[i].desc.shape[j] != 1)
                    shape[k] = in[i].desc.shape[j];
            }
    } else {
        nd = in[0].desc.ndim;
        memcpy(shape, in[0].desc.shape, sizeof(int64_t) * (size_t)nd);
    }
    for (int i = kind == 2 ? 1 : 0; i < nin; i++) {
        keel_tensor_desc o = in[i].desc, *dsc = &in[i].desc;
        dsc->ndim = nd;
        for (int k = 0; k < nd; k++) {
            int j = k - (nd - o.ndim);
            dsc->shape[k] = shape[k];
            dsc->strides[k] = (j < 0 || o.shape[j] == 1) ? 0 : o.strides[j];
        }
    }
}

/* The value of integer/bool attribute `name`, or `def`. */
static int64_t attr_int(const struct kt_attrs *at, const char *name,
                        int64_t def)
{
    for (int i = 0; i < at->n; i++)
        if (!strcmp(at->a[i].name, name) &&
            (at->a[i].type == KEEL_ATTR_INT || at->a[i].type == KEEL_ATTR_BOOL))
            return at->a[i].v.i;
    return def;
}

/* matmul's inputs as the core resolves them (core/src/shape_linalg.c):
 * x [B.., M, K] and y [B.., K, N] with one batch shape (stride 0 where an
 * operand is broadcast), transposes as swapped strides of the stored
 * tensor, a 1-D x as [1, K] with row stride 0 and a 1-D y as [K, 1] with
 * column stride 0. Returns false when the shapes do not fit (a bad recipe). */
static bool matmul_resolve(const struct kt_attrs *at, struct kt_buf *in)
{
    bool tr[2] = {attr_int(at, "transpose_x", 0) != 0,
                  attr_int(at, "transpose_y", 0) != 0};
    int64_t rows[2], cols[2], rs[2], cs[2], bshape[KEEL_MAX_DIMS];
    int nbatch[2], nb;

    for (int q = 0; q < 2; q++) {
        const keel_tensor_desc *d = &in[q].desc;
        int nd = d->ndim;

        if (nd < 1)
            return false;
        if (nd == 1) {
            rows[q] = q == 0 ? 1 : d->shape[0];
            cols[q] = q == 0 ? d->shape[0] : 1;
            rs[q] = q == 0 ? 0 : d->strides[0];
            cs[q] = q == 0 ? d->strides[0] : 0;
            nbatch[q] = 0;
            continue;
        }
        rows[q] = d->shape[nd - 2];
        cols[q] = d->shape[nd - 1];
        rs[q] = d->strides[nd - 2];
        cs[q] = d->strides[nd - 1];
        if (tr[q]) {
            int64_t t = rows[q];
            rows[q] = cols[q];
            cols[q] = t;
            t = rs[q];
            rs[q] = cs[q];
            cs[q] = t;
        }
        nbatch[q] = nd - 2;
    }
    if (cols[0] != rows[1])
        return false;
    nb = nbatch[0] > nbatch[1] ? nbatch[0] : nbatch[1];
    if (nb + 2 > KEEL_MAX_DIMS)
        return false;
    for (int k = 0; k < nb; k++) {
        int64_t u = 1, v = 1;
        int i = k - (nb - nbatch[0]), j = k - (nb - nbatch[1]);
        if (i >= 0)
            u = in[0].desc.shape[i];
        if (j >= 0)
            v = in[1].desc.shape[j];
        if (u != v && u != 1 && v != 1)
            return false;
        bshape[k] = u == 1 ? v : u;
    }
    for (int q = 0; q < 2; q++) {
        keel_tensor_desc o = in[q].desc, *d = &in[q].desc;
        for (int k = 0; k < nb; k++) {
            int j = k - (nb - nbatch[q]);
            d->shape[k] = bshape[k];
            d->strides[k] = (j < 0 || o.shape[j] == 1) ? 0 : o.strides[j];
        }
        d->shape[nb] = rows[q];
        d->strides[nb] = rs[q];
        d->shape[nb + 1] = cols[q];
        d->strides[nb + 1] = cs[q];
        d->ndim = nb + 2;
    }
    return true;
}

struct kt_run {
    int op, dt, icase;
    int i;                   /* device slot                         */
    keel_kernel kernel;
    keel_stream stream;
    const struct kr_case *c;
    const struct kt_tensor *in;
    const struct kt_attrs *at;      /* attributes of the tested run    */
    const struct kt_attrs *at_ref;  /* ... of the reference run        */
    uint32_t mutated;
    int layout;              /* enum kt_layout                      */
    char what[512];          /* "op(inputs | attrs) case k, layout"  */
};

static bool check_guards(struct kt_run *r, const char *kind, int k,
                         const struct kt_buf *b, const unsigned char *img,
                         size_t g, uint32_t seed)
{
    size_t es = cf_dtype_size(b->desc.dtype);
    size_t data = (size_t)b->extent * es;
    int64_t front = cf_pattern_check(img, g, seed);
    int64_t back = cf_pattern_check(img + g + data, g, seed + 1);

    if (front >= 0)
        CF_FAIL("%s: out-of-bounds write: %zu bytes before %s %d were "
                "changed (first at byte %lld before its start)",
                r->what, g - (size_t)front, kind, k,
                (long long)(g - (size_t)front));
    if (back >= 0)
        CF_FAIL("%s: out-of-bounds write: %s %d (%zu bytes) was written "
                "past its end (byte %lld after the end changed)",
                r->what, kind, k, data, (long long)back);
    return front < 0 && back < 0;
}

/* An in-place input must hold the reference's updated values. */
static void check_mutated(struct kt_run *r, int k, const struct kt_buf *b,
                          const unsigned char *img, size_t g,
                          const struct kt_result *ref, double tol)
{
    struct kt_buf view = *b;
    char msg[600];
    double *got;

    check_guards(r, "input", k, b, img, g, (uint32_t)(1000 + 2 * k));
    got = malloc(sizeof(double) * (size_t)(r->in[k].numel + 1));
    if (!CF_CHECK(got, "out of host memory"))
        return;
    /* the layout as allocated, before any broadcast rewrite */
    view.desc.ndim = r->in[k].ndim;
    for (int dd = 0; dd < view.desc.ndim; dd++)
        view.desc.shape[dd] = r->in[k].shape[dd];
    for (int64_t e = 0; e < r->in[k].numel; e++)
        got[e] = buf_elem(&view, img, g, e);
    if (!compare(r->in[k].dtype, &ref->mut[k], got, tol, msg, sizeof(msg)))
        CF_FAIL("%s: input %d, updated in place, is wrong: %s", r->what, k,
                msg);
    free(got);
}

/* Inputs: byte for byte as uploaded, except the in-place ones. */
static void check_inputs(struct kt_run *r, const struct kt_buf *in, size_t g,
                         const struct kt_result *ref, double tol)
{
    int32_t d = cf_env.dev[r->i];

    for (int k = 0; k < r->c->nin; k++) {
        unsigned char *img = malloc(in[k].bytes);
        size_t at = 0;

        if (!CF_CHECK(img, "out of host memory") ||
            !cf_download(d, img, in[k].base, in[k].bytes)) {
            free(img);
            return;
        }
        if (r->mutated & (1u << k)) {
            check_mutated(r, k, &in[k], img, g, ref, tol);
        } else if (memcmp(img, in[k].image, in[k].bytes)) {
            while (img[at] == in[k].image[at])
                at++;
            CF_FAIL("%s: the kernel wrote into input %d (%s byte %lld of "
                    "its buffer), which it must only read",
                    r->what, k,
                    at < g                  ? "guard zone before,"
                    : at >= in[k].bytes - g ? "guard zone after,"
                                            : "data,",
                    (long long)at - (long long)g);
        }
        free(img);
    }
}

/* Outputs: guards intact, values as the reference's. */
static void check_outputs(struct kt_run *r, const struct kt_buf *out,
                          size_t g, const struct kt_result *meta,
                          const struct kt_result *ref, double tol)
{
    int32_t d = cf_env.dev[r->i];
    char msg[600], shape[96];

    for (int o = 0; o < meta->nout; o++) {
        const struct kt_tensor *want = &ref->out[o];
        unsigned char *img = malloc(out[o].bytes);
        double *got = malloc(sizeof(double) * (size_t)(want->numel + 1));

        if (CF_CHECK(img && got, "out of host memory") &&
            cf_download(d, img, out[o].base, out[o].bytes)) {
            check_guards(r, "output", o, &out[o], img, g,
                         (uint32_t)(2000 + 2 * o));
            for (int64_t e = 0; e < want->numel; e++)
                got[e] = cf_load(meta->out[o].dtype, img + g, e);
            if (!compare(meta->out[o].dtype, want, got, tol, msg,
                         sizeof(msg))) {
                describe_shape(shape, sizeof(shape), meta->out[o].dtype,
                               meta->out[o].ndim, meta->out[o].shape);
                CF_FAIL("%s: wrong result in output %d (%s): %s", r->what,
                        o, shape, msg);
            }
        }
        free(img);
        free(got);
    }
}

/* kernels/args_lifetime: every argument the kernel got (descriptors,
 * attributes and their names and lists, the args struct) is overwritten as
 * soon as the launch returns, before the stream is synchronized. */
static bool kt_scribble;

struct kt_scratch {
    keel_attr a[KR_MAX_ATTR];
    char names[KR_MAX_ATTR][32];
    int64_t ints[KR_MAX_ATTR][8];
    double floats[KR_MAX_ATTR][8];
    char strs[KR_MAX_ATTR][96];
};

/* A deep copy of the attributes, so that scribbling over it leaves the
 * test's own copy intact. */
static void scratch_attrs(struct kt_scratch *sc, const struct kt_attrs *at)
{
    for (int i = 0; i < at->n && i < KR_MAX_ATTR; i++) {
        keel_attr *a = &sc->a[i];

        *a = at->a[i];
        snprintf(sc->names[i], sizeof(sc->names[i]), "%s", at->a[i].name);
        a->name = sc->names[i];
        if (a->type == KEEL_ATTR_STRING) {
            snprintf(sc->strs[i], sizeof(sc->strs[i]), "%s", at->a[i].v.s);
            a->v.s = sc->strs[i];
        } else if (a->type == KEEL_ATTR_INTS) {
            memcpy(sc->ints[i], at->a[i].v.ints.data,
                   sizeof(int64_t) * (size_t)at->a[i].v.ints.count);
            a->v.ints.data = sc->ints[i];
        } else if (a->type == KEEL_ATTR_FLOATS) {
            memcpy(sc->floats[i], at->a[i].v.floats.data,
                   sizeof(double) * (size_t)at->a[i].v.floats.count);
            a->v.floats.data = sc->floats[i];
        }
    }
}

/* kernels/bad_descriptors: the valid launch of each op's first case is
 * mutated by the kit (keel_kit_mutate), and every mutant the kit's check
 * refuses must be refused by the kernel too, writing nothing. */
static bool kt_mutants;
static int kt_mut_tried, kt_mut_total; /* for the note */

/* Whether mutant `what` only sets a bool or dtype attribute of op to a
 * value outside its catalog type ("attr training=2", "attr dtype=99"). */
static bool type_domain_only(int op, const char *what)
{
    const char *p = keel_op_get_info((keel_op_id)op)->attrs;
    size_t nl;

    if (strncmp(what, "attr ", 5))
        return false;
    what += 5;
    nl = strcspn(what, "=+-[");
    if (strcmp(what + nl, "=2") && strcmp(what + nl, "=99"))
        return false;
    while (p && *p) {
        const char *colon = strchr(p, ':');
        if (colon && (size_t)(colon - p) == nl && !strncmp(p, what, nl))
            return !strncmp(colon + 1, "bool", 4) ||
                   !strncmp(colon + 1, "dtype", 5);
        p = strchr(p, ';');
        p = p ? p + 1 : NULL;
    }
    return false;
}

/* The kit-refused mutants of `args` through the kernel: each must return
 * INVALID_ARGUMENT or NOT_SUPPORTED; then no byte of any buffer (inputs,
 * outputs, guards) may have changed. */
static void run_mutants(struct kt_run *r, const keel_kernel_args *args,
                        const struct kt_buf *in, int nin,
                        const struct kt_buf *out, int nout)
{
    static keel_kit_mutant m; /* large: not on the stack */
    int32_t d = cf_env.dev[r->i];
    int n = keel_kit_mutant_count(r->op, args), tried = 0, bad = 0;
    bool accepted = false;

    kt_mut_total += n;
    for (int k = 0; k < n; k++) {
        keel_kit_msg why;
        keel_status st;

        if (!keel_kit_mutate(r->op, args, k, &m) ||
            keel_kit_check(r->op, &m.args, &why) == KEEL_STATUS_OK)
            continue;
        tried++;
        st = r->kernel.fn(r->kernel.kernel_data, &m.args);
        if (st == KEEL_STATUS_INVALID_ARGUMENT ||
            st == KEEL_STATUS_NOT_SUPPORTED)
            continue;
        if (st == KEEL_STATUS_OK) {
            accepted = true;
            cf_env.api->stream->stream_synchronize(d, r->stream);
            if (type_domain_only(r->op, m.what)) {
                /* a bool of 2 or a dtype of 99: outside the attribute's
                 * catalog type, which the core never sends (dispatch
                 * converts to the catalog type), and harmless to a kernel
                 * that ignores the attribute (matmul's transposes arrive
                 * applied): noted, not failed */
                cf_note("%s: mutant '%s' accepted: the kernel does not "
                        "check the attribute's catalog type (the kit "
                        "refuses it: %s)", r->what, m.what, why.text);
                continue;
            }
        }
        if (++bad <= 8)
            CF_FAIL("%s: mutant '%s' returned %s, expected INVALID_ARGUMENT "
                    "or NOT_SUPPORTED (the kit refuses it: %s)",
                    r->what, m.what, keel_status_name(st), why.text);
    }
    if (bad > 8)
        CF_FAIL("%s: %d more kit-refused mutants not refused by the kernel",
                r->what, bad - 8);
    kt_mut_tried += tried;
    if (accepted || tried == 0 ||
        !CF_OK(cf_env.api->stream->stream_synchronize(d, r->stream),
               "%s: stream_synchronize after the refused mutants", r->what))
        return;
    for (int q = 0; q < nin + nout; q++) {
        const struct kt_buf *b = q < nin ? &in[q] : &out[q - nin];
        unsigned char *img = malloc(b->bytes);
        size_t at = 0;

        if (!CF_CHECK(img, "out of host memory") ||
            !cf_download(d, img, b->base, b->bytes)) {
            free(img);
            return;
        }
        if (memcmp(img, b->image, b->bytes)) {
            while (img[at] == b->image[at])
                at++;
            CF_FAIL("%s: refused mutants wrote into %s %d (byte %lld of "
                    "its buffer, guards included)",
                    r->what, q < nin ? "input" : "output",
                    q < nin ? q : q - nin, (long long)at);
        }
        free(img);
    }
}

/* Launch the kernel and check everything. Returns the kernel's status. */
/* ---- workspaces (ABI 1.3) ------------------------------------------------ */

/*
 * What the core offers kernels, offered here too, so that a kernel which
 * needs a workspace (aclnn, CNNL) runs under conform as it does under the
 * core: blocks from the plugin's memory.alloc, freed after the stream has
 * run the launch's work.
 */
#define KT_WS_MAX 16
struct kt_ws {
    int32_t device;
    int n;
    keel_dptr p[KT_WS_MAX];
    uint64_t bytes; /* total handed out, for the report */
};

static keel_status kt_workspace(const keel_kernel_args *a, uint64_t bytes,
                                keel_dptr *ptr)
{
    struct kt_ws *w = a ? a->core_data : NULL;
    keel_status st;

    if (!ptr || !w)
        return KEEL_STATUS_INVALID_ARGUMENT;
    *ptr = 0;
    if (bytes == 0)
        return KEEL_STATUS_OK;
    if (w->n == KT_WS_MAX)
        return KEEL_STATUS_OUT_OF_MEMORY;
    st = cf_env.api->memory->alloc(w->device, bytes, &w->p[w->n]);
    if (st != KEEL_STATUS_OK)
        return st;
    *ptr = w->p[w->n++];
    w->bytes += bytes;
    return KEEL_STATUS_OK;
}

/* After the launch's stream has been synchronised (or has failed). */
static void kt_ws_release(struct kt_ws *w)
{
    for (int i = 0; i < w->n; i++)
        (void)cf_env.api->memory->free(w->device, w->p[i]);
    w->n = 0;
}

static keel_status run_kernel(struct kt_run *r, const struct kt_result *meta,
                              const struct kt_result *ref, double tol)
{
    struct kt_ws ws = {.device = cf_env.dev[r->i]};
    int32_t d = cf_env.dev[r->i];
    size_t g = guard_bytes(r->i);
    struct kt_buf in[KR_MAX_IN], out[KT_MAX_OUT];
    keel_tensor_desc idesc[KR_MAX_IN], odesc[KT_MAX_OUT];
    keel_kernel_args args;
    keel_status st = KEEL_STATUS_INTERNAL;
    int nin = r->c->nin, nout = meta->nout;

    memset(in, 0, sizeof(in));
    memset(out, 0, sizeof(out));
    for (int k = 0; k < nin; k++)
        if (!buf_make(r->i, &r->in[k],
                      r->in[k].ndim > 0 ? r->layout : KT_CONTIGUOUS,
                      (uint32_t)(1000 + 2 * k), &in[k]))
            goto out;
    for (int o = 0; o < nout; o++)
        if (!out_make(r->i, &meta->out[o], (uint32_t)(2000 + 2 * o), &out[o]))
            goto out;
    broadcast_descs(kr_broadcast_kind(r->op), nin, in);
    if (r->op == KEEL_OP_MATMUL && nin == 2 && !matmul_resolve(r->at, in)) {
        CF_FAIL("%s: bad recipe: the operands do not multiply", r->what);
        goto out;
    }
    for (int k = 0; k < nin; k++)
        idesc[k] = in[k].desc;
    for (int o = 0; o < nout; o++)
        odesc[o] = out[o].desc;
    args = (keel_kernel_args){
        .struct_size = sizeof(args),
        .device = d,
        .stream = r->stream,
        .inputs = idesc,
        .num_inputs = nin,
        .outputs = odesc,
        .num_outputs = nout,
        .attrs = r->at->a,
        .num_attrs = r->at->n,
        .workspace = kt_workspace,
        .core_data = &ws,
    };
    if (kt_mutants)
        run_mutants(r, &args, in, nin, out, nout);
    if (kt_scribble) {
        struct kt_scratch sc;

        memset(&sc, 0, sizeof(sc));
        scratch_attrs(&sc, r->at);
        args.attrs = sc.a;
        st = r->kernel.fn(r->kernel.kernel_data, &args);
        memset(&sc, 0xab, sizeof(sc));
        memset(idesc, 0xab, sizeof(idesc));
        memset(odesc, 0xab, sizeof(odesc));
        memset(&args, 0xab, sizeof(args));
    } else {
        st = r->kernel.fn(r->kernel.kernel_data, &args);
    }
    if (st != KEEL_STATUS_OK)
        goto out;
    if (!CF_OK(cf_env.api->stream->stream_synchronize(d, r->stream),
               "%s: stream_synchronize after the kernel", r->what))
        goto out;
    check_inputs(r, in, g, ref, tol);
    check_outputs(r, out, g, meta, ref, tol);
out:
    if (ws.n) {
        (void)cf_env.api->stream->stream_synchronize(d, r->stream);
        kt_ws_release(&ws);
    }
    for (int k = 0; k < nin; k++)
        buf_free(d, &in[k]);
    for (int o = 0; o < nout; o++)
        buf_free(d, &out[o]);
    return st;
}

/* ---- one case -------------------------------------------------------------------------- */

enum case_result { CASE_OK, CASE_FAILED, CASE_DECLINED, CASE_NO_REF };

static void describe_case(struct kt_run *r, const struct kt_tensor *in,
                          const char *extra)
{
    const keel_op_info *info = keel_op_get_info((keel_op_id)r->op);
    size_t n = (size_t)snprintf(r->what, sizeof(r->what), "%s(", info->name);
    const char *bar = strchr(r->c->text, '|');

    for (int k = 0; k < r->c->nin && n < sizeof(r->what); k++) {
        char s[96];
        describe_shape(s, sizeof(s), in[k].dtype, in[k].ndim, in[k].shape);
        n += (size_t)snprintf(r->what + n, sizeof(r->what) - n, "%s%s",
                              k ? ", " : "", s);
    }
    if (n < sizeof(r->what))
        n += (size_t)snprintf(r->what + n, sizeof(r->what) - n, "%s%s)%s%s",
                              bar ? " " : "", bar ? bar : "",
                              extra[0] ? " " : "", extra);
    if (n < sizeof(r->what))
        snprintf(r->what + n, sizeof(r->what) - n,
                 ", case %d, %s, device %d%s", r->icase + 1,
                 layout_name(r->layout), (int)cf_env.dev[r->i],
                 kt_scribble ? ", every argument overwritten as soon as the "
                               "launch returned"
                             : "");
}

/* Output dtypes and shapes for the tested dtype: a run on cpu:0 in that
 * dtype; when it cannot run, the float64 reference with float64 mapped to
 * the tested dtype. */
/* Output metadata from the reference run. A reference computed in
 * float64 for a tested dtype `dt` has float64 outputs that stand for dt;
 * one computed in dt itself (ref_in_dt) has the right dtypes already, such
 * as a cast's float64 target. */
static void meta_from_ref(const struct kt_result *ref, int dt, bool ref_in_dt,
                          struct kt_result *meta)
{
    memset(meta, 0, sizeof(*meta));
    meta->nout = ref->nout;
    for (int o = 0; o < ref->nout; o++) {
        meta->out[o] = ref->out[o];
        meta->out[o].v = NULL;
        if (!ref_in_dt && meta->out[o].dtype == KEEL_F64)
            meta->out[o].dtype = dt;
    }
}

static enum case_result run_case(struct kt_run *r, int tdt_ref,
                                 const char *extra, char *why, size_t whysz)
{
    struct kt_result ref, meta;
    double tol;
    keel_status st;
    char err[CF_MSG_MAX];
    enum case_result res = CASE_OK;

    describe_case(r, r->in, extra);
    if (run_on_cpu(r->op, r->c, r->in, r->dt, tdt_ref, r->at_ref,
                   r->mutated, &ref, err, sizeof(err))) {
        snprintf(why, whysz, "%.500s: no reference: %.400s", r->what, err);
        result_free(&ref);
        return CASE_NO_REF;
    }
    if (tdt_ref != r->dt) {
        if (run_on_cpu(r->op, r->c, r->in, r->dt, r->dt, r->at, 0, &meta, err,
                       sizeof(err))) {
            result_free(&meta);
            meta_from_ref(&ref, r->dt, false, &meta);
        }
    } else {
        meta_from_ref(&ref, r->dt, true, &meta);
    }
    tol = cf_dtype_is_float(r->dt) ? cf_env.cfg->tolerance[r->dt] : 0;
    for (int o = 0; o < meta.nout; o++)
        if (cf_dtype_is_float(meta.out[o].dtype) && !cf_dtype_is_float(r->dt))
            tol = cf_env.cfg->tolerance[meta.out[o].dtype];
    if (meta.nout != ref.nout) {
        snprintf(why, whysz, "%s: no reference: output counts differ", r->what);
        res = CASE_NO_REF;
        goto out;
    }
    st = run_kernel(r, &meta, &ref, tol);
    if (st == KEEL_STATUS_NOT_SUPPORTED) {
        snprintf(why, whysz, "%s: the kernel returned NOT_SUPPORTED", r->what);
        res = CASE_DECLINED;
    } else if (st != KEEL_STATUS_OK) {
        CF_FAIL("%s: the kernel returned %s", r->what, keel_status_name(st));
        res = CASE_FAILED;
    }
out:
    result_free(&ref);
    for (int o = 0; o < meta.nout; o++)
        if (meta.out[o].v)
            kt_free(&meta.out[o]);
    for (int k = 0; k < KR_MAX_IN; k++)
        kt_free(&meta.mut[k]);
    return res;
}

/* ---- one (op, dtype) on one device ------------------------------------------------ */

struct kt_tally {
    int ran, declined, noref;
    char first_why[CF_MSG_MAX];
};

static void tally(struct kt_tally *t, enum case_result res, const char *why)
{
    if (res == CASE_OK || res == CASE_FAILED)
        t->ran++;
    else if (res == CASE_DECLINED)
        t->declined++;
    else
        t->noref++;
    if (res != CASE_OK && res != CASE_FAILED && !t->first_why[0])
        snprintf(t->first_why, sizeof(t->first_why), "%s", why);
}

static void run_cases(int op, int dt, int i, keel_kernel k, keel_stream s,
                      struct kt_tally *t)
{
    const keel_op_info *info = keel_op_get_info((keel_op_id)op);
    bool is_cast = !strcmp(info->name, "cast");
    int ncases = kr_case_count(op);
    char err[CF_MSG_MAX], why[CF_MSG_MAX];

    for (int kc = 0; kc < ncases; kc++) {
        struct kt_tensor in[KR_MAX_IN];
        struct kr_case c;
        struct kt_attrs at, at_ref;
        struct kt_run r;
        uint64_t seed;
        int tref = cf_dtype_is_float(dt) && !is_cast ? KEEL_F64 : dt;

        memset(in, 0, sizeof(in));
        if (kr_case_parse(op, kc, &c, err, sizeof(err)) ||
            build_attrs(op, &c, dt, &at, err, sizeof(err)) ||
            build_attrs(op, &c, tref, &at_ref, err, sizeof(err))) {
            CF_FAIL("%s: bad recipe: %s", info->name, err);
            return;
        }
        seed = cf_hash(info->name, cf_env.cfg->seed) ^
               ((uint64_t)dt << 40) ^ ((uint64_t)kc << 48);
        if (gen_inputs(&c, dt, seed, in)) {
            CF_FAIL("out of host memory");
            goto next;
        }
        memset(&r, 0, sizeof(r));
        r.op = op;
        r.dt = dt;
        r.icase = kc;
        r.i = i;
        r.kernel = k;
        r.stream = s;
        r.c = &c;
        r.in = in;
        r.at = &at;
        r.at_ref = &at_ref;
        r.mutated = kr_mutated_inputs(op, &c);
        for (int layout = 0; layout < KT_NLAYOUTS; layout++) {
            int maxnd = 0;
            for (int q = 0; q < c.nin; q++)
                maxnd = c.in[q].ndim > maxnd ? c.in[q].ndim : maxnd;
            /* The first case also runs with strided inputs and, where an
             * input is a matrix or more, with transposed views. */
            if (layout != KT_CONTIGUOUS && (kc != 0 || kt_mutants))
                break;
            if ((layout == KT_STRIDED && maxnd < 1) ||
                (layout == KT_TRANSPOSED && maxnd < 2))
                continue;
            r.layout = layout;
            if (is_cast) {
                for (int tgt = 0; tgt < KEEL_DTYPE_COUNT_; tgt++) {
                    char extra[48];
                    if (kc == 1 && tgt == KEEL_U8)
                        continue; /* negative to unsigned is undefined */
                    set_dtype_attr(&at, "dtype", tgt);
                    set_dtype_attr(&at_ref, "dtype", tgt);
                    snprintf(extra, sizeof(extra), "to %s", cf_dtype_name(tgt));
                    tally(t, run_case(&r, dt, extra, why, sizeof(why)), why);
                    if (kt_mutants)
                        break;
                }
            } else {
                tally(t, run_case(&r, tref, "", why, sizeof(why)), why);
            }
        }
    next:
        for (int q = 0; q < c.nin; q++)
            kt_free(&in[q]);
        if (kt_mutants)
            break;
    }
}

static bool kernel_for(int i, int op, int dt, keel_kernel *k, bool *missing)
{
    const keel_op_info *info = keel_op_get_info((keel_op_id)op);
    int32_t d = cf_env.dev[i];
    keel_status st;

    *missing = false;
    memset(k, 0, sizeof(*k));
    st = cf_env.api->kernel->lookup(d, info->name, (keel_dtype)dt, k);
    if (st == KEEL_STATUS_NOT_FOUND) {
        *missing = true;
        return false;
    }
    if (!CF_OK(st, "kernel.lookup(%d, \"%s\", %s)", (int)d, info->name,
               cf_dtype_name(dt)))
        return false;
    return CF_CHECK(k->fn != NULL,
                    "kernel.lookup(%d, \"%s\", %s) returned OK and a NULL fn",
                    (int)d, info->name, cf_dtype_name(dt));
}

static void test_on_device(int i, int op, int dt, int *provided)
{
    struct kt_tally t;
    keel_kernel k;
    keel_stream s = NULL;
    bool missing;

    memset(&t, 0, sizeof(t));
    if (!kernel_for(i, op, dt, &k, &missing))
        return;
    (*provided)++;
    if (!cf_stream_new(cf_env.dev[i], &s))
        return;
    run_cases(op, dt, i, k, s, &t);
    cf_stream_del(cf_env.dev[i], s);
    if (t.ran == 0 && t.declined > 0)
        CF_FAIL("the plugin provides this kernel but it declined every case "
                "(NOT_SUPPORTED), e.g. %s",
                t.first_why);
    else if (t.ran == 0 && t.noref > 0)
        cf_skip("no reference result: %s", t.first_why);
    else if (t.declined || t.noref)
        cf_note("%d case(s) declined by the kernel, %d without reference; "
                "first: %s",
                t.declined, t.noref, t.first_why);
}

void cf_kernel_test(void)
{
    int op = cf_current->op, dt = cf_current->dtype, provided = 0, tried = 0;
    int ndev = cf_env.cfg->kernels_all_devices ? cf_env.ndev : 1;

    if (!cf_env.api->kernel) {
        cf_skip("not provided: the plugin has no kernel group");
        return;
    }
    if (!cf_env.have_ref) {
        cf_skip("%s", cf_env.ref_reason);
        return;
    }
    for (int i = 0; i < ndev; i++) {
        if (!(cf_env.props[i].dtype_mask & KEEL_DTYPE_BIT(dt)))
            continue;
        tried++;
        test_on_device(i, op, dt, &provided);
    }
    if (tried == 0)
        cf_skip("not provided: %s is not in the device's dtype_mask",
                cf_dtype_name(dt));
    else if (provided == 0 && !cf_skipped())
        cf_skip("not provided: kernel.lookup returns NOT_FOUND");
}

/* ---- kernel group tests --------------------------------------------------------------- */

static void t_lookup(void)
{
    const keel_kernel_ops *kops = cf_env.api->kernel;
    int32_t d = cf_env.dev[0];
    int pairs = 0, have = 0;
    keel_kernel k;

    if (!kops) {
        cf_skip("the plugin has no kernel group");
        return;
    }
    CF_EXPECT(kops->lookup(d, "no_such_op_in_the_catalog", KEEL_F32, &k),
              KEEL_STATUS_NOT_FOUND, "kernel.lookup of an unknown op name");
    CF_EXPECT(kops->lookup(d, NULL, KEEL_F32, &k),
              KEEL_STATUS_INVALID_ARGUMENT, "kernel.lookup(op_name NULL)");
    CF_EXPECT(kops->lookup(d, "add", KEEL_F32, NULL),
              KEEL_STATUS_INVALID_ARGUMENT, "kernel.lookup(kernel NULL)");
    CF_EXPECT(kops->lookup(cf_env.device_count, "add", KEEL_F32, &k),
              KEEL_STATUS_INVALID_DEVICE, "kernel.lookup on device %d",
              (int)cf_env.device_count);
    for (int op = 0; op < KEEL_OP_COUNT; op++)
        for (int dt = 0; dt < KEEL_DTYPE_COUNT_; dt++) {
            const keel_op_info *info = keel_op_get_info((keel_op_id)op);
            if (!(info->dtype_mask & KEEL_DTYPE_BIT(dt)) ||
                !(cf_env.props[0].dtype_mask & KEEL_DTYPE_BIT(dt)))
                continue;
            pairs++;
            if (kops->lookup(d, info->name, (keel_dtype)dt, &k) ==
                KEEL_STATUS_OK)
                have++;
        }
    cf_note("device %d provides %d of %d (op, dtype) kernels", (int)d, have,
            pairs);
}

/* A kernel between async copies on one stream sees and is seen in order. */
static void t_stream_order(void)
{
    enum { N = 1 << 16 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    float *z = malloc(N * sizeof(float));
    keel_dptr a = 0, b = 0, c = 0;
    keel_stream s = NULL;
    keel_kernel k;
    int32_t d = cf_env.dev[0];
    bool missing;

    if (!CF_CHECK(x && y && z, "out of host memory"))
        goto out;
    if (!cf_env.api->kernel) {
        cf_skip("the plugin has no kernel group");
        goto out;
    }
    if (!kernel_for(0, KEEL_OP_ADD, KEEL_F32, &k, &missing)) {
        if (missing)
            cf_skip("add (float32) is not provided");
        goto out;
    }
    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = (float)(2 * i + 1);
    }
    if (!cf_alloc(d, N * 4, &a) || !cf_alloc(d, N * 4, &b) ||
        !cf_alloc(d, N * 4, &c) || !cf_stream_new(d, &s))
        goto out;
    for (int round = 0; round < 3; round++) {
        keel_tensor_desc in[2], o;
        keel_kernel_args args;

        memset(in, 0, sizeof(in));
        for (int q = 0; q < 2; q++) {
            in[q].data = q ? b : a;
            in[q].dtype = KEEL_F32;
            in[q].ndim = 1;
            in[q].shape[0] = N;
            in[q].strides[0] = 1;
        }
        o = in[0];
        o.data = c;
        args = (keel_kernel_args){sizeof(args), d, s, in, 2, &o, 1, NULL, 0,
                                  NULL, NULL};
        x[0] = (float)round;
        CF_OK(cf_env.api->memory->copy_h2d_async(d, s, a, x, N * 4),
              "copy_h2d_async");
        CF_OK(cf_env.api->memory->copy_h2d_async(d, s, b, y, N * 4),
              "copy_h2d_async");
        CF_OK(k.fn(k.kernel_data, &args), "add kernel on a created stream");
        CF_OK(cf_env.api->memory->copy_d2h_async(d, s, z, c, N * 4),
              "copy_d2h_async");
        if (!cf_sync(d, s))
            break;
        for (int i = 0; i < N; i++)
            if (!CF_CHECK(z[i] == x[i] + y[i],
                          "round %d: add between async copies on one stream "
                          "gave z[%d] = %g, expected %g: the kernel did not "
                          "run in stream order",
                          round, i, z[i], x[i] + y[i]))
                break;
    }
out:
    cf_stream_del(d, s);
    cf_free(d, a);
    cf_free(d, b);
    cf_free(d, c);
    free(x);
    free(y);
    free(z);
}

/* The cases of `op` on the first device in float32, or the op's first
 * dtype the device has, with *mode (kt_scribble or kt_mutants) set during
 * the run. 1: ran (*t and *dtp filled); 0: not provided; -1: a failure,
 * already reported. */
static int run_first_dtype(int op, bool *mode, struct kt_tally *t, int *dtp)
{
    uint32_t mask = keel_op_get_info((keel_op_id)op)->dtype_mask &
                    cf_env.props[0].dtype_mask;
    int dt = (mask & KEEL_DTYPE_BIT(KEEL_F32)) ? KEEL_F32 : -1;
    keel_kernel k;
    keel_stream s = NULL;
    bool missing;

    for (int q = 0; dt < 0 && q < KEEL_DTYPE_COUNT_; q++)
        if (mask & KEEL_DTYPE_BIT(q))
            dt = q;
    if (dt < 0 || kr_case_count(op) == 0)
        return 0;
    if (!kernel_for(0, op, dt, &k, &missing))
        return missing ? 0 : -1;
    if (!cf_stream_new(cf_env.dev[0], &s))
        return -1;
    memset(t, 0, sizeof(*t));
    *mode = true;
    run_cases(op, dt, 0, k, s, t);
    *mode = false;
    cf_stream_del(cf_env.dev[0], s);
    *dtp = dt;
    return 1;
}

/* Every op the plugin provides, in float32 or its first dtype: the valid
 * launch of its first recipe case, and the kit's bad-argument cases of it
 * (run_mutants). Without the reference the valid launches cannot be made. */
static void bad_descriptors_every_op(void)
{
    int ops = 0;

    kt_mut_tried = kt_mut_total = 0;
    if (!cf_env.have_ref) {
        cf_note("no reference (%s): only the add cases were checked",
                cf_env.ref_reason);
        return;
    }
    for (int op = 0; op < KEEL_OP_COUNT; op++) {
        struct kt_tally t;
        int dt, st = run_first_dtype(op, &kt_mutants, &t, &dt);

        if (st < 0)
            return;
        ops += st;
    }
    cf_note("the kit's bad-argument cases on %d op(s): %d mutants, %d of "
            "them refused by the kit and run", ops, kt_mut_total,
            kt_mut_tried);
}

/* Descriptors inconsistent with the op are INVALID_ARGUMENT. */
static void t_bad_descriptors(void)
{
    int32_t d = cf_env.dev[0];
    keel_tensor_desc in[2], out;
    keel_dptr a = 0, b = 0, c = 0;
    keel_kernel k;
    bool missing;

    if (!cf_env.api->kernel) {
        cf_skip("the plugin has no kernel group");
        return;
    }
    if (!kernel_for(0, KEEL_OP_ADD, KEEL_F32, &k, &missing)) {
        if (missing)
            cf_skip("add (float32) is not provided");
        return;
    }
    if (!cf_alloc(d, 64, &a) || !cf_alloc(d, 64, &b) || !cf_alloc(d, 64, &c))
        goto out;
    memset(in, 0, sizeof(in));
    for (int q = 0; q < 2; q++) {
        in[q].data = q ? b : a;
        in[q].dtype = KEEL_F32;
        in[q].ndim = 1;
        in[q].shape[0] = 4;
        in[q].strides[0] = 1;
    }
    out = in[0];
    out.data = c;
    {
        keel_kernel_args args = {sizeof(args), d, NULL, in, 1, &out, 1,
                                 NULL, 0, NULL, NULL};
        CF_EXPECT(k.fn(k.kernel_data, &args), KEEL_STATUS_INVALID_ARGUMENT,
                  "add (float32) called with 1 input");
        args.num_inputs = 2;
        args.num_outputs = 0;
        CF_EXPECT(k.fn(k.kernel_data, &args), KEEL_STATUS_INVALID_ARGUMENT,
                  "add (float32) called with no output");
        args.num_outputs = 1;
        out.shape[0] = 5;
        CF_EXPECT(k.fn(k.kernel_data, &args), KEEL_STATUS_INVALID_ARGUMENT,
                  "add (float32) with inputs [4] and output [5]");
        out.shape[0] = 4;
        out.dtype = KEEL_I32;
        CF_EXPECT(k.fn(k.kernel_data, &args), KEEL_STATUS_INVALID_ARGUMENT,
                  "add (float32) with an int32 output");
        out.dtype = KEEL_F32;
        CF_OK(k.fn(k.kernel_data, &args),
              "add (float32) with consistent descriptors after the "
              "rejected calls");
        CF_OK(cf_env.api->stream->stream_synchronize(d, NULL),
              "stream_synchronize after the rejected calls");
    }
out:
    cf_free(d, a);
    cf_free(d, b);
    cf_free(d, c);
    bad_descriptors_every_op();
}

/* Arguments, descriptors and attributes are valid only during the call:
 * scribbling over them afterwards must not change what the kernel does. */
/* Without leaky_relu (float32): the same promise checked on any kernel the
 * plugin provides, through its recipes, the commonest ops first. */
static void args_lifetime_any(void)
{
    static const keel_op_id first[] = {KEEL_OP_ADD, KEEL_OP_MULTIPLY,
                                       KEEL_OP_RELU, KEEL_OP_MATMUL,
                                       KEEL_OP_EXP, KEEL_OP_SUM};
    int n = (int)(sizeof(first) / sizeof(first[0]));

    if (!cf_env.have_ref) {
        cf_skip("leaky_relu (float32) is not provided, and without the "
                "reference (%s) no other kernel can be checked",
                cf_env.ref_reason);
        return;
    }
    for (int q = 0; q < n + KEEL_OP_COUNT; q++) {
        int op = q < n ? (int)first[q] : q - n, dt, st;
        struct kt_tally t;

        if (keel_op_get_info((keel_op_id)op)->num_inputs == 0)
            continue;
        st = run_first_dtype(op, &kt_scribble, &t, &dt);
        if (st < 0)
            return; /* already reported */
        if (st == 0)
            continue;
        if (t.ran > 0) {
            cf_note("leaky_relu (float32) is not provided; checked with %s "
                    "(%s)",
                    keel_op_get_info((keel_op_id)op)->name, cf_dtype_name(dt));
            return;
        }
    }
    cf_skip("not provided: the plugin has no kernel the suite can check "
            "(kernel.lookup returned NOT_FOUND for every op with inputs)");
}

static void t_args_lifetime(void)
{
    enum { N = 1 << 18 };
    int32_t d = cf_env.dev[0];
    float *x = malloc(N * sizeof(float)), *z = malloc(N * sizeof(float));
    keel_dptr a = 0, c = 0;
    keel_stream s = NULL;
    keel_kernel k;
    bool missing;
    int op = KEEL_OP_LEAKY_RELU;

    if (!CF_CHECK(x && z, "out of host memory"))
        goto out;
    if (!cf_env.api->kernel) {
        cf_skip("the plugin has no kernel group");
        goto out;
    }
    if (!kernel_for(0, op, KEEL_F32, &k, &missing)) {
        if (missing)
            args_lifetime_any();
        goto out;
    }
    for (int i = 0; i < N; i++)
        x[i] = (float)((i % 17) - 8);
    if (!cf_alloc(d, N * 4, &a) || !cf_alloc(d, N * 4, &c) ||
        !cf_stream_new(d, &s) || !cf_upload(d, a, x, N * 4))
        goto out;
    {
        char name[32] = "negative_slope";
        keel_attr attr = {name, KEEL_ATTR_FLOAT, {.f = 0.25}};
        keel_tensor_desc in, o;
        keel_kernel_args args;

        memset(&in, 0, sizeof(in));
        in.data = a;
        in.dtype = KEEL_F32;
        in.ndim = 2;
        in.shape[0] = N / 64;
        in.shape[1] = 64;
        in.strides[0] = 64;
        in.strides[1] = 1;
        o = in;
        o.data = c;
        args = (keel_kernel_args){sizeof(args), d, s, &in, 1, &o, 1, &attr, 1,
                                  NULL, NULL};
        CF_OK(k.fn(k.kernel_data, &args), "leaky_relu (float32)");
        memset(name, 0xab, sizeof(name));
        memset(&attr, 0xab, sizeof(attr));
        memset(&in, 0xab, sizeof(in));
        memset(&o, 0xab, sizeof(o));
        memset(&args, 0xab, sizeof(args));
    }
    if (!cf_sync(d, s) || !cf_download(d, z, c, N * 4))
        goto out;
    for (int i = 0; i < N; i++) {
        float want = x[i] > 0 ? x[i] : 0.25f * x[i];
        if (!CF_CHECK(z[i] == want,
                      "leaky_relu(negative_slope=0.25) gave %g at %d, "
                      "expected %g: the kernel read its arguments after the "
                      "call returned",
                      z[i], i, want))
            break;
    }
out:
    cf_stream_del(d, s);
    cf_free(d, a);
    cf_free(d, c);
    free(x);
    free(z);
}

/* A few kernels on every device (the per-op tests use the first). */
static void t_all_devices(void)
{
    static const keel_op_id ops[] = {KEEL_OP_ADD, KEEL_OP_MATMUL,
                                     KEEL_OP_SUM, KEEL_OP_SOFTMAX};

    if (!cf_env.api->kernel) {
        cf_skip("the plugin has no kernel group");
        return;
    }
    if (cf_env.ndev < 2 || cf_env.cfg->kernels_all_devices) {
        cf_skip(cf_env.ndev < 2 ? "one device"
                                : "kernel_devices: all tests every device");
        return;
    }
    if (!cf_env.have_ref) {
        cf_skip("%s", cf_env.ref_reason);
        return;
    }
    for (int i = 1; i < cf_env.ndev; i++)
        for (size_t q = 0; q < sizeof(ops) / sizeof(ops[0]); q++) {
            int provided = 0;
            if (cf_env.props[i].dtype_mask & KEEL_DTYPE_BIT(KEEL_F32))
                test_on_device(i, ops[q], KEEL_F32, &provided);
        }
}

const struct cf_test_spec cf_kernel_static_tests[] = {
    {"kernels", "lookup", CF_LEVEL_SMOKE, t_lookup,
     "lookup: NOT_FOUND for unknown ops, bad arguments; coverage"},
    {"kernels", "stream_order", CF_LEVEL_SMOKE, t_stream_order,
     "a kernel between async copies on a stream runs in order"},
    {"kernels", "bad_descriptors", CF_LEVEL_SMOKE, t_bad_descriptors,
     "inconsistent descriptors (4 add calls, then the kit's bad-argument "
     "cases of every op) are refused, nothing is written"},
    {"kernels", "args_lifetime", CF_LEVEL_SMOKE, t_args_lifetime,
     "arguments scribbled after the call do not change the result"},
    {"kernels", "all_devices", CF_LEVEL_FULL, t_all_devices,
     "add, matmul, sum, softmax on every device"},
    {NULL, NULL, 0, NULL, NULL},
};
