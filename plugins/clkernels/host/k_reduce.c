/*
 * keel OpenCL C kernels — reduce family, host side (OpenCL C in
 * plugins/clkernels/reduce.cl): the reductions, cumsum, the softmax
 * family, sort, argsort and topk.
 *
 * Every kernel reads x through its strides (no copy): the host splits x's
 * dims into kept and reduced (scanned) ones, drops size-1 dims and merges
 * neighbours whose strides allow it for every operand, and passes each
 * part as a struct kdesc. Work-groups are RED_WG items, 2^lg lanes per
 * output (lg from the reduced length), so short reductions take one item
 * per output and long ones a whole group.
 */
#include <stdio.h>
#include <string.h>

#include "ok.h"

#define RED_WG 256 /* as in reduce.cl */
#define RED_SB 256

enum { RED_SUM, RED_MEAN, RED_MAX, RED_MIN, RED_PROD, RED_ARGMAX,
       RED_ARGMIN, RED_VAR, RED_STD, RED_LSE, RED_ALL, RED_ANY };

/* ---- geometry ------------------------------------------------------------ */

/* Kept dims k* and reduced dims r*, strides of x, y and the output. */
struct rgeom {
    int nk, nr;
    int64_t ks[KEEL_MAX_DIMS], kx[KEEL_MAX_DIMS], ky[KEEL_MAX_DIMS],
        ko[KEEL_MAX_DIMS];
    int64_t rs[KEEL_MAX_DIMS], rx[KEEL_MAX_DIMS], ry[KEEL_MAX_DIMS],
        ro[KEEL_MAX_DIMS];
    int64_t nout, nred;
};

static void push(int *n, int64_t *s, int64_t *sx, int64_t *sy, int64_t *so,
                 int64_t len, int64_t x, int64_t y, int64_t o)
{
    int k = *n;

    if (k > 0 && sx[k - 1] == x * len && sy[k - 1] == y * len &&
        so[k - 1] == o * len) {
        s[k - 1] *= len;
        sx[k - 1] = x;
        sy[k - 1] = y;
        so[k - 1] = o;
        return;
    }
    s[k] = len;
    sx[k] = x;
    sy[k] = y;
    so[k] = o;
    *n = k + 1;
}

/* full_out: the output has x's whole shape (row-major); else only the kept
 * dims. */
static void geom(struct rgeom *g, const keel_tensor_desc *x,
                 const keel_tensor_desc *y, uint32_t mask, bool full_out)
{
    int64_t os[KEEL_MAX_DIMS], acc = 1;

    for (int d = x->ndim - 1; d >= 0; d--) {
        if (full_out || !(mask & (1u << d))) {
            os[d] = acc;
            acc *= x->shape[d];
        } else {
            os[d] = 0;
        }
    }
    memset(g, 0, sizeof(*g));
    g->nout = g->nred = 1;
    for (int d = 0; d < x->ndim; d++) {
        int64_t len = x->shape[d], ys = y ? y->strides[d] : 0;
        if (mask & (1u << d)) {
            g->nred *= len;
            if (len != 1)
                push(&g->nr, g->rs, g->rx, g->ry, g->ro, len, x->strides[d],
                     ys, os[d]);
        } else {
            g->nout *= len;
            if (len != 1)
                push(&g->nk, g->ks, g->kx, g->ky, g->ko, len, x->strides[d],
                     ys, os[d]);
        }
    }
}

static void kd_make(struct ok_kdesc *kd, int n, const int64_t *shape,
                    const int64_t *stride)
{
    memset(kd, 0, sizeof(*kd));
    kd->ndim = n;
    for (int i = 0; i < n; i++) {
        kd->shape[i] = shape[i];
        kd->stride[i] = stride[i];
    }
}

/* Lanes per output: about 8 elements or more per lane, at most RED_WG. */
static int lanes_log2(int64_t n)
{
    int lg = 0;

    while (lg < 8 && ((int64_t)2 << lg) * 8 <= n)
        lg++;
    return lg;
}

/* Column-major lanes (reduce.cl RED_PLACE): neighbouring work items on
 * neighbouring outputs, when the innermost kept dim is x's innermost
 * (stride 1) and the scanned one is not. */
static int lanes_arg(const struct rgeom *g, int lg, bool cols_ok)
{
    bool cm = cols_ok && g->nk > 0 && g->kx[g->nk - 1] == 1 &&
              (g->nr == 0 || g->rx[g->nr - 1] != 1);
    return lg | (cm ? 16 : 0);
}

static size_t groups_global(int64_t nout, int lg)
{
    int64_t per = RED_WG >> lg;
    return (size_t)((nout + per - 1) / per) * RED_WG;
}

/* The kernel family of a dtype ("flt", "f64", "int") and its kind code
 * (reduce.cl: float32 0, float16 1, bfloat16 2; int8 0, uint8 and bool 1,
 * int32 2, int64 3). */
static const char *kind_of(keel_dtype dt, int *dk)
{
    switch (dt) {
    case KEEL_F32: *dk = 0; return "flt";
    case KEEL_F16: *dk = 1; return "flt";
    case KEEL_BF16: *dk = 2; return "flt";
    case KEEL_F64: *dk = 0; return "f64";
    case KEEL_I8: *dk = 0; return "int";
    case KEEL_I32: *dk = 2; return "int";
    case KEEL_I64: *dk = 3; return "int";
    default: *dk = 1; return "int"; /* uint8, bool */
    }
}

/* ---- reductions ------------------------------------------------------------ */

/* The first pass's lane combine of an op (reduce.cl CB_*: add, multiply,
 * maximum, minimum). */
static int combine_of(int code)
{
    switch (code) {
    case RED_PROD: return 1;
    case RED_MAX: case RED_ARGMAX: case RED_LSE: return 2;
    case RED_MIN: case RED_ARGMIN: return 3;
    default: return 0;
    }
}

/* One launch of red_<kind> (reduce.cl) in `mode` over `units` units. */
struct rlaunch {
    const struct ok_launch *l;
    const keel_kernel_args *a;
    const char *name;
    struct ok_kdesc kk, kr;
    int64_t nout, nred, plen, np;
    int code, dk;
    ok_mem pa, pi, pr;
    const struct rgeom *g;
};

static keel_status red_launch(const struct rlaunch *r, int mode,
                              int64_t units, int64_t len)
{
    const struct ok_launch *l = r->l;
    const keel_tensor_desc *x = &r->a->inputs[0], *out = &r->a->outputs[0];
    int lg = lanes_log2(len);

    return OK_RUN_WG(l, r->name, groups_global(units, lg), RED_WG,
                     OK_T(l, x), OK_DESC(&r->kk), OK_DESC(&r->kr),
                     OK_T(l, out), OK_I64(r->nout), OK_I64(r->nred),
                     OK_I32(r->code), OK_I32(combine_of(r->code)),
                     OK_I32(lanes_arg(r->g, lg, mode == 0)),
                     OK_I32(keel_kit_attr_i(r->a, "unbiased", 1) != 0),
                     OK_I32(r->dk), OK_MEM(r->pa), OK_MEM(r->pi),
                     OK_MEM(r->pr), OK_I64(r->plen), OK_I64(r->np),
                     OK_I32(mode));
}

/* A long reduction into few outputs is split into parts of about SPLIT
 * elements, so more than one work-group shares it (reduce.cl RM_*). */
#define SPLIT 4096

static keel_status reduce_run(const keel_kernel_args *a, const char *op,
                              int code)
{
    struct ok_launch l;
    struct rgeom g;
    struct rlaunch r;
    char name[32];
    keel_status st = ok_begin(a, op, &l);

    if (st)
        return st;
    const keel_tensor_desc *x = &a->inputs[0];
    geom(&g, x, NULL, keel_kit_reduce_mask(a, x->ndim), false);
    if (g.nout == 0)
        return KEEL_STATUS_OK;
    memset(&r, 0, sizeof(r));
    r.l = &l;
    r.a = a;
    r.g = &g;
    r.name = name;
    kd_make(&r.kk, g.nk, g.ks, g.kx);
    kd_make(&r.kr, g.nr, g.rs, g.rx);
    r.nout = g.nout;
    r.nred = g.nred;
    r.code = code;
    r.plen = g.nred;
    r.np = 1;
    snprintf(name, sizeof(name), "red_%s", kind_of(x->dtype, &r.dk));
    bool single = code != RED_ARGMAX && code != RED_ARGMIN &&
                  code != RED_VAR && code != RED_STD && code != RED_LSE;
    if (g.nred < 2 * SPLIT || g.nout > 64)
        return red_launch(&r, 0, g.nout, g.nred);
    r.np = (g.nred + SPLIT - 1) / SPLIT;
    if (r.np > 1024)
        r.np = 1024;
    r.plen = (g.nred + r.np - 1) / r.np;
    r.np = (g.nred + r.plen - 1) / r.plen;
    size_t bytes = (size_t)(r.nout * r.np) * 8;
    st = ok_scratch(&l, bytes, &r.pa);
    if (!st)
        st = ok_scratch(&l, bytes, &r.pi);
    if (!st && !single)
        st = ok_scratch(&l, (size_t)r.nout * 8, &r.pr);
    /* modes (reduce.cl RM_*): parts, then their partials; two-pass ops
     * first keep the first pass's result, then do the same for the
     * second pass */
    if (!st)
        st = red_launch(&r, 1, r.nout * r.np, r.plen);
    if (!st)
        st = red_launch(&r, single ? 2 : 3, r.nout, r.np);
    if (!st && !single)
        st = red_launch(&r, 4, r.nout * r.np, r.plen);
    if (!st && !single)
        st = red_launch(&r, 5, r.nout, r.np);
    ok_scratch_release(&l, r.pa);
    ok_scratch_release(&l, r.pi);
    ok_scratch_release(&l, r.pr);
    return st;
}

#define REDUCE_KERNEL(fn, op, code)                                          \
    static keel_status fn(void *kdata, const keel_kernel_args *a)           \
    {                                                                        \
        (void)kdata;                                                         \
        return reduce_run(a, op, code);                                      \
    }

REDUCE_KERNEL(k_sum, "sum", RED_SUM)
REDUCE_KERNEL(k_mean, "mean", RED_MEAN)
REDUCE_KERNEL(k_max, "max", RED_MAX)
REDUCE_KERNEL(k_min, "min", RED_MIN)
REDUCE_KERNEL(k_prod, "prod", RED_PROD)
REDUCE_KERNEL(k_argmax, "argmax", RED_ARGMAX)
REDUCE_KERNEL(k_argmin, "argmin", RED_ARGMIN)
REDUCE_KERNEL(k_var, "var", RED_VAR)
REDUCE_KERNEL(k_std, "std", RED_STD)
REDUCE_KERNEL(k_logsumexp, "logsumexp", RED_LSE)
REDUCE_KERNEL(k_all, "all", RED_ALL)
REDUCE_KERNEL(k_any, "any", RED_ANY)

/* ---- cumsum ---------------------------------------------------------------- */

static keel_status k_cumsum(void *kdata, const keel_kernel_args *a)
{
    (void)kdata;
    struct ok_launch l;
    struct rgeom g;
    struct ok_kdesc kk, kr, ko;
    char name[40];
    keel_status st = ok_begin(a, "cumsum", &l);

    if (st)
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *out = &a->outputs[0];
    /* One axis, or none: the flattened tensor (output offsets = the
     * row-major index, which the full-shape output strides give). */
    geom(&g, x, NULL, keel_kit_reduce_mask(a, x->ndim), true);
    if (g.nout == 0 || g.nred == 0)
        return KEEL_STATUS_OK;
    kd_make(&kk, g.nk, g.ks, g.kx);
    kd_make(&ko, g.nk, g.ks, g.ko);
    kd_make(&kr, g.nr, g.rs, g.rx);
    int64_t os = g.nr == 1 ? g.ro[0] : 1;
    int lg = lanes_log2(g.nred / 8), dk;
    snprintf(name, sizeof(name), "red_cumsum_%s", kind_of(x->dtype, &dk));
    return OK_RUN_WG(&l, name, groups_global(g.nout, lg), RED_WG,
                     OK_T(&l, x), OK_DESC(&kk), OK_DESC(&kr), OK_DESC(&ko),
                     OK_T(&l, out), OK_I64(g.nout), OK_I64(g.nred),
                     OK_I64(os), OK_I32(lanes_arg(&g, lg, true)),
                     OK_I32(dk));
}

/* ---- softmax family ------------------------------------------------------- */

enum { SM_SOFTMAX, SM_LOG_SOFTMAX, SM_GRAD, SM_LOG_GRAD };

static keel_status softmax_run(const keel_kernel_args *a, const char *op,
                               int code)
{
    struct ok_launch l;
    struct rgeom g;
    struct ok_kdesc kx, ky, ko;
    char name[40];
    keel_status st = ok_begin(a, op, &l);

    if (st)
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *out = &a->outputs[0];
    const keel_tensor_desc *y = code >= SM_GRAD ? &a->inputs[1] : x;
    int axis = keel_kit_axis_0d(keel_kit_attr_i(a, "axis", -1), x->ndim);
    if (axis < 0)
        return ok_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: axis out of range",
                       op);
    geom(&g, x, y, x->ndim ? 1u << axis : 0, true);
    if (g.nout == 0 || g.nred == 0)
        return KEEL_STATUS_OK;
    kd_make(&kx, g.nk, g.ks, g.kx);
    kd_make(&ky, g.nk, g.ks, g.ky);
    kd_make(&ko, g.nk, g.ks, g.ko);
    int64_t sx = g.nr ? g.rx[0] : 1, sy = g.nr ? g.ry[0] : 1;
    int64_t so = g.nr ? g.ro[0] : 1;
    int lg = lanes_log2(g.nred), dk;
    snprintf(name, sizeof(name), "red_softmax_%s", kind_of(x->dtype, &dk));
    return OK_RUN_WG(&l, name, groups_global(g.nout, lg), RED_WG,
                     OK_T(&l, x), OK_T(&l, y), OK_T(&l, out), OK_DESC(&kx),
                     OK_DESC(&ky), OK_DESC(&ko), OK_I64(g.nout),
                     OK_I64(g.nred), OK_I64(sx), OK_I64(sy), OK_I64(so),
                     OK_I32(code), OK_I32(lanes_arg(&g, lg, true)),
                     OK_I32(dk));
}

static keel_status k_softmax(void *kdata, const keel_kernel_args *a)
{
    (void)kdata;
    return softmax_run(a, "softmax", SM_SOFTMAX);
}
static keel_status k_log_softmax(void *kdata, const keel_kernel_args *a)
{
    (void)kdata;
    return softmax_run(a, "log_softmax", SM_LOG_SOFTMAX);
}
static keel_status k_softmax_grad(void *kdata, const keel_kernel_args *a)
{
    (void)kdata;
    return softmax_run(a, "softmax_grad", SM_GRAD);
}
static keel_status k_log_softmax_grad(void *kdata, const keel_kernel_args *a)
{
    (void)kdata;
    return softmax_run(a, "log_softmax_grad", SM_LOG_GRAD);
}

/* ---- sort, argsort, topk --------------------------------------------------- */

/* d with dim `axis` moved last (its length set to `len`). */
static void kd_axis_last(struct ok_kdesc *kd, const keel_tensor_desc *d,
                         int axis)
{
    int n = 0;

    memset(kd, 0, sizeof(*kd));
    if (d->ndim == 0)
        return;
    for (int i = 0; i < d->ndim; i++) {
        if (i == axis)
            continue;
        kd->shape[n] = d->shape[i];
        kd->stride[n] = d->strides[i];
        n++;
    }
    kd->shape[n] = d->shape[axis];
    kd->stride[n] = d->strides[axis];
    kd->ndim = n + 1;
}

/* Sort rows of n (key, index) pairs held in (k0, i0); the sorted rows end
 * in (*kr, *ir), one of the two buffer pairs. */
static keel_status merge_passes(const struct ok_launch *l, int64_t n,
                                int64_t rows, int64_t w, ok_mem *k0,
                                ok_mem *i0, ok_mem *k1, ok_mem *i1)
{
    int64_t total = n * rows;

    for (; w < n; w *= 2) {
        keel_status st =
            OK_RUN(l, "red_sort_merge", total, OK_MEM(*k0), OK_MEM(*i0),
                   OK_MEM(*k1), OK_MEM(*i1), OK_I64(n), OK_I64(total),
                   OK_I64(w));
        if (st)
            return st;
        ok_mem t = *k0;
        *k0 = *k1;
        *k1 = t;
        t = *i0;
        *i0 = *i1;
        *i1 = t;
    }
    return KEEL_STATUS_OK;
}

/* vi: the index output (0 argsort, 1 sort/topk); kk outputs per row. */
static keel_status sort_run(const keel_kernel_args *a, const char *op,
                            int vi, bool desc, bool sorted, int64_t kk)
{
    struct ok_launch l;
    struct ok_kdesc kx, kv, ki;
    ok_mem m[4] = {NULL, NULL, NULL, NULL};
    int64_t n;
    keel_status st = ok_begin(a, op, &l);

    if (st)
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *io = &a->outputs[vi];
    const keel_tensor_desc *vo = vi ? &a->outputs[0] : NULL;
    int axis = keel_kit_sort_axis(a, x, &n);
    int64_t numel = keel_kit_numel(x);
    if (axis < 0)
        return ok_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: axis out of range",
                       op);
    if (numel == 0 || kk <= 0 || n <= 0)
        return KEEL_STATUS_OK;
    int64_t rows = numel / n;
    size_t bytes = (size_t)numel * 8;
    for (int i = 0; i < 4 && !st; i++)
        st = ok_scratch(&l, bytes, &m[i]);
    if (st)
        goto out;
    kd_axis_last(&kx, x, axis);
    kd_axis_last(&ki, io, axis);
    if (vo)
        kd_axis_last(&kv, vo, axis);
    else
        memset(&kv, 0, sizeof(kv));
    int64_t nblk = (n + RED_SB - 1) / RED_SB;
    int dk;
    const char *fam = kind_of(x->dtype, &dk);
    /* red_sort_keys' kinds: the float kinds, float64 3, the int kinds + 4 */
    if (!strcmp(fam, "f64"))
        dk = 3;
    else if (!strcmp(fam, "int"))
        dk += 4;
    st = OK_RUN(&l, "red_sort_keys", numel, OK_T(&l, x), OK_DESC(&kx),
                OK_I64(n), OK_I64(numel), OK_I32(desc), OK_MEM(m[0]),
                OK_MEM(m[1]), OK_I32(dk));
    if (!st)
        st = OK_RUN_WG(&l, "red_sort_block", (size_t)(rows * nblk) * RED_SB,
                       RED_SB, OK_MEM(m[0]), OK_MEM(m[1]), OK_I64(n),
                       OK_I64(nblk));
    if (!st)
        st = merge_passes(&l, n, rows, RED_SB, &m[0], &m[1], &m[2], &m[3]);
    int64_t rn = n; /* row length of the sorted indices */
    if (!st && !sorted) {
        /* The selected k in index order: sort them by their index. */
        st = OK_RUN(&l, "red_sort_take", rows * kk, OK_MEM(m[1]), OK_I64(n),
                    OK_I64(kk), OK_I64(rows * kk), OK_MEM(m[2]),
                    OK_MEM(m[3]));
        if (!st)
            st = merge_passes(&l, kk, rows, 1, &m[2], &m[3], &m[0], &m[1]);
        if (!st) {
            ok_mem t = m[0];
            m[0] = m[2];
            m[2] = t;
            t = m[1];
            m[1] = m[3];
            m[3] = t;
        }
        rn = kk;
    }
    if (!st) {
        st = OK_RUN(&l, "red_sort_out", rows * kk, OK_T(&l, x), OK_DESC(&kx),
                    OK_MEM(m[1]),
                    vo ? OK_T(&l, vo) : OK_BUF(&l, (keel_dptr)0, 0),
                    OK_DESC(&kv), OK_T(&l, io), OK_DESC(&ki), OK_I64(n),
                    OK_I64(rn), OK_I64(kk), OK_I64(rows * kk),
                    OK_I32(vo ? (int)keel_dtype_size(x->dtype) : 0));
    }
out:
    for (int i = 0; i < 4; i++)
        ok_scratch_release(&l, m[i]);
    return st;
}

static int64_t axis_len(const keel_kernel_args *a)
{
    int64_t n = 0;

    keel_kit_sort_axis(a, &a->inputs[0], &n);
    return n;
}

static keel_status k_sort(void *kdata, const keel_kernel_args *a)
{
    (void)kdata;
    return sort_run(a, "sort", 1, keel_kit_attr_i(a, "descending", 0) != 0,
                    true, axis_len(a));
}

static keel_status k_argsort(void *kdata, const keel_kernel_args *a)
{
    (void)kdata;
    return sort_run(a, "argsort", 0,
                    keel_kit_attr_i(a, "descending", 0) != 0, true,
                    axis_len(a));
}

static keel_status k_topk(void *kdata, const keel_kernel_args *a)
{
    (void)kdata;
    return sort_run(a, "topk", 1, keel_kit_attr_i(a, "largest", 1) != 0,
                    keel_kit_attr_i(a, "sorted", 1) != 0,
                    keel_kit_attr_i(a, "k", 1));
}

const struct ok_entry ok_kernels_reduce[] = {
    {"sum", KEEL_DT_ALL, k_sum},
    {"mean", KEEL_DT_FLOAT, k_mean},
    {"max", KEEL_DT_NUMERIC, k_max},
    {"min", KEEL_DT_NUMERIC, k_min},
    {"prod", KEEL_DT_NUMERIC, k_prod},
    {"argmax", KEEL_DT_NUMERIC, k_argmax},
    {"argmin", KEEL_DT_NUMERIC, k_argmin},
    {"var", KEEL_DT_FLOAT, k_var},
    {"std", KEEL_DT_FLOAT, k_std},
    {"logsumexp", KEEL_DT_FLOAT, k_logsumexp},
    {"all", KEEL_DT_ALL, k_all},
    {"any", KEEL_DT_ALL, k_any},
    {"cumsum", KEEL_DT_NUMERIC, k_cumsum},
    {"softmax", KEEL_DT_FLOAT, k_softmax},
    {"log_softmax", KEEL_DT_FLOAT, k_log_softmax},
    {"softmax_grad", KEEL_DT_FLOAT, k_softmax_grad},
    {"log_softmax_grad", KEEL_DT_FLOAT, k_log_softmax_grad},
    {"sort", KEEL_DT_NUMERIC, k_sort},
    {"argsort", KEEL_DT_NUMERIC, k_argsort},
    {"topk", KEEL_DT_NUMERIC, k_topk},
    {NULL, 0, NULL},
};
