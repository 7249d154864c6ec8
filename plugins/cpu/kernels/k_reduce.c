/*
 * CPU kernels of the reductions, cumsum and the softmax family:
 *
 *   sum mean max min prod argmax argmin var std logsumexp all any
 *   cumsum softmax log_softmax softmax_grad log_softmax_grad
 *
 * GEOMETRY. Every kernel first splits the input's dimensions into "kept"
 * dimensions (one output element, or one line, per index) and "reduced"
 * dimensions (folded into one output, or scanned along). Size-1 dimensions
 * are dropped and dimensions of one kind are merged whenever the strides of
 * every operand allow it (struct geom). A contiguous tensor reduced over a
 * block of adjacent axes thus becomes (outer, reduced, inner), and most
 * views (transposes, slices, broadcasts with stride 0) collapse to a few
 * dimensions. Merging keeps row-major order, so the linear index into the
 * reduced dimensions is the one argmax reports.
 *
 * PATHS.
 *   rows     The reduced dimensions are walked as runs along the innermost
 *            one; each run goes through a loop with VL independent lanes
 *            (constant-trip inner loops that gcc -O2 vectorises). A run
 *            with stride != 1, or float16/bfloat16 data, is first staged
 *            CH elements at a time into a contiguous buffer of the compute
 *            type. Last-axis reductions, full reductions and every layout
 *            the columns path does not take go this way.
 *   columns  The innermost kept dimension has stride 1: up to CW
 *            neighbouring outputs are reduced together, one vectorised
 *            lane-wise step per reduced position ("reduce outer, keep
 *            inner", e.g. a sum over the batch axis). Wide blocks read
 *            long contiguous pieces of each row.
 * cumsum and the softmax family use the same two layouts: lines along the
 * axis (staged CH at a time) or CW neighbouring lines advanced together.
 *
 * PASSES. An op is one or two passes of primitive accumulations (enum
 * rpass): sum = SUM, mean = SUM / n, var = SUM then SQDEV around the mean
 * (two-pass, no cancellation), logsumexp = MAX then SUMEXP, argmax = MAX
 * then FIND (the first index holding the maximum), all/any = NZ (count of
 * non-zeros). Each primitive exists for each compute type: float (float32
 * and staged float16/bfloat16), double, int8, uint8 (also bool), int32,
 * int64, and raw 16-bit words for NZ of half types.
 *
 * PRECISION. float32/float16/bfloat16 are read as float32 and summed (sum,
 * mean, var, std, logsumexp's exp-sum, cumsum) and multiplied (prod) in
 * double; float64 in double with VL-way partial sums. Integers and bool
 * sum and multiply in 64-bit two's complement (wrapping, never UB). max and
 * min propagate NaN; argmax/argmin report the first NaN when there is one
 * (numpy's rule), else the first occurrence of the extreme. The softmax
 * family computes in float32 (float64 for float64) after subtracting the
 * maximum, with its sums in double.
 *
 * THREADS. Work is shared over outputs (rows path) or over (outer, inner
 * chunk) units (columns path) with a grain of about KGRAIN input elements.
 * A few outputs over a long reduction (a full reduction, say) split each
 * reduction into up to RPARTS contiguous parts of the reduced index space,
 * combined in order. Partitions depend only on sizes, never on the thread
 * count, so results are reproducible. cumsum over one long line uses a
 * two-pass blocked scan (block totals, then each block from its carry).
 *
 * Empty tensors produce nothing (or the identity for an empty reduction:
 * sum 0, prod 1, mean/var NaN, logsumexp -inf, all true, any false); 0-d
 * tensors are one element.
 */

#include "kern.h"

#define CH 256    /* staging chunk, outputs per block */
#define CW 1024   /* widest columns block */
#define VL 16     /* accumulator lanes of a row loop */
#define RPARTS 64 /* most parts one reduction is split into */

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Tasks of `per_task` elements each that make up about KGRAIN. */
static int64_t grain_for(int64_t per_task)
{
    return per_task >= KGRAIN ? 1 : KGRAIN / (per_task > 0 ? per_task : 1);
}

static bool is_half(keel_dtype dt)
{
    return dt == KEEL_F16 || dt == KEEL_BF16;
}

static bool is_float(keel_dtype dt)
{
    return dt == KEEL_F32 || dt == KEEL_F64 || is_half(dt);
}

/* ---- geometry ------------------------------------------------------------ */

/*
 * Kept dims k* and reduced dims r* after dropping size-1 dims and merging.
 * Strides are in elements for input 0 (x), input 1 (y, grads only) and the
 * output (o: contiguous over the kept dims for reductions, over the whole
 * shape for cumsum and softmax). nr >= 1 always (a pseudo dim of size 1
 * when nothing is reduced).
 */
struct geom {
    int nk, nr;
    int64_t kshape[KEEL_MAX_DIMS], kx[KEEL_MAX_DIMS], ky[KEEL_MAX_DIMS],
        ko[KEEL_MAX_DIMS];
    int64_t rshape[KEEL_MAX_DIMS], rx[KEEL_MAX_DIMS], ry[KEEL_MAX_DIMS],
        ro[KEEL_MAX_DIMS];
    int64_t nout, nred;
};

static void geom_push(int *n, int64_t *shape, int64_t *sx, int64_t *sy,
                      int64_t *so, int64_t len, int64_t x, int64_t y,
                      int64_t o)
{
    int k = *n;

    if (k > 0 && sx[k - 1] == x * len && sy[k - 1] == y * len &&
        so[k - 1] == o * len) {
        shape[k - 1] *= len;
        sx[k - 1] = x;
        sy[k - 1] = y;
        so[k - 1] = o;
        return;
    }
    shape[k] = len;
    sx[k] = x;
    sy[k] = y;
    so[k] = o;
    *n = k + 1;
}

static void geom_build(struct geom *g, const keel_tensor_desc *x,
                       const keel_tensor_desc *y, uint32_t rmask,
                       bool full_out)
{
    int64_t os[KEEL_MAX_DIMS], acc = 1;

    for (int d = x->ndim - 1; d >= 0; d--) {
        if (full_out || !(rmask & (1u << d))) {
            os[d] = acc;
            acc *= x->shape[d];
        } else {
            os[d] = 0;
        }
    }
    g->nk = g->nr = 0;
    g->nout = g->nred = 1;
    for (int d = 0; d < x->ndim; d++) {
        int64_t len = x->shape[d], ys = y ? y->strides[d] : 0;
        if (rmask & (1u << d)) {
            g->nred *= len;
            if (len != 1)
                geom_push(&g->nr, g->rshape, g->rx, g->ry, g->ro, len,
                          x->strides[d], ys, os[d]);
        } else {
            g->nout *= len;
            if (len != 1)
                geom_push(&g->nk, g->kshape, g->kx, g->ky, g->ko, len,
                          x->strides[d], ys, os[d]);
        }
    }
    if (g->nr == 0) {
        g->nr = 1;
        g->rshape[0] = 1;
        g->rx[0] = g->ry[0] = g->ro[0] = 1;
    }
}

/* Offsets of kept index `o` restricted to kept dims [0, nk) . */
static void kept_offsets(const struct geom *g, int nk, int64_t o, int64_t *xo,
                         int64_t *yo, int64_t *oo)
{
    *xo = *yo = *oo = 0;
    for (int d = nk - 1; d >= 0; d--) {
        int64_t i = o % g->kshape[d];
        o /= g->kshape[d];
        *xo += i * g->kx[d];
        *yo += i * g->ky[d];
        *oo += i * g->ko[d];
    }
}

/* Incremental walk over the kept dims. */
struct kit {
    int64_t idx[KEEL_MAX_DIMS];
    int64_t xo, yo, oo;
};

static void kit_init(struct kit *it, const struct geom *g, int64_t o)
{
    int64_t rem = o;

    for (int d = g->nk - 1; d >= 0; d--) {
        it->idx[d] = rem % g->kshape[d];
        rem /= g->kshape[d];
    }
    kept_offsets(g, g->nk, o, &it->xo, &it->yo, &it->oo);
}

static void kit_next(struct kit *it, const struct geom *g)
{
    for (int d = g->nk - 1; d >= 0; d--) {
        it->xo += g->kx[d];
        it->yo += g->ky[d];
        it->oo += g->ko[d];
        if (++it->idx[d] < g->kshape[d])
            return;
        it->xo -= g->kshape[d] * g->kx[d];
        it->yo -= g->kshape[d] * g->ky[d];
        it->oo -= g->kshape[d] * g->ko[d];
        it->idx[d] = 0;
    }
}

/*
 * Visit the linear range [b, e) of the reduced index space as runs along
 * the innermost reduced dim: fn(ctx, x offset, output offset, run length,
 * linear index of the run's first element). fn returns true to stop.
 */
typedef bool (*walk_fn)(void *ctx, int64_t xo, int64_t oo, int64_t n,
                        int64_t lin);

static void walk(const struct geom *g, int64_t b, int64_t e, walk_fn fn,
                 void *ctx)
{
    int64_t idx[KEEL_MAX_DIMS], rem = b, xo = 0, oo = 0, lin = b;
    int last = g->nr - 1;

    if (b >= e)
        return;
    for (int d = last; d >= 0; d--) {
        idx[d] = rem % g->rshape[d];
        rem /= g->rshape[d];
        xo += idx[d] * g->rx[d];
        oo += idx[d] * g->ro[d];
    }
    while (lin < e) {
        int64_t n = min64(g->rshape[last] - idx[last], e - lin);
        if (fn(ctx, xo, oo, n, lin))
            return;
        lin += n;
        idx[last] += n;
        xo += n * g->rx[last];
        oo += n * g->ro[last];
        for (int d = last; d > 0 && idx[d] == g->rshape[d]; d--) {
            xo += g->rx[d - 1] - g->rshape[d] * g->rx[d];
            oo += g->ro[d - 1] - g->rshape[d] * g->ro[d];
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

/* ---- compute types and staging ------------------------------------------- */

enum ct { CT_F32, CT_F64, CT_I8, CT_U8, CT_I32, CT_I64, CT_H16, CT_COUNT };

static int ct_of(keel_dtype dt)
{
    switch (dt) {
    case KEEL_F64:
        return CT_F64;
    case KEEL_F32:
    case KEEL_F16:
    case KEEL_BF16:
        return CT_F32;
    case KEEL_I8:
        return CT_I8;
    case KEEL_I32:
        return CT_I32;
    case KEEL_I64:
        return CT_I64;
    default:
        return CT_U8; /* uint8, bool */
    }
}

static bool ct_is_float(int ct)
{
    return ct == CT_F32 || ct == CT_F64;
}

static int64_t ct_min(int ct)
{
    switch (ct) {
    case CT_I8:
        return INT8_MIN;
    case CT_U8:
        return 0;
    case CT_I32:
        return INT32_MIN;
    default:
        return INT64_MIN;
    }
}

static int64_t ct_max(int ct)
{
    switch (ct) {
    case CT_I8:
        return INT8_MAX;
    case CT_U8:
        return UINT8_MAX;
    case CT_I32:
        return INT32_MAX;
    default:
        return INT64_MAX;
    }
}

/* Gather n elements of `es` bytes, element stride st, into dst. */
static void gather(void *dst, const char *src, int64_t es, int64_t n,
                   int64_t st)
{
    char *d = dst;
    int64_t bs = st * es;

    switch (es) {
    case 1:
        for (int64_t i = 0; i < n; i++)
            d[i] = src[i * bs];
        break;
    case 2:
        for (int64_t i = 0; i < n; i++)
            memcpy(d + 2 * i, src + i * bs, 2);
        break;
    case 4:
        for (int64_t i = 0; i < n; i++)
            memcpy(d + 4 * i, src + i * bs, 4);
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            memcpy(d + 8 * i, src + i * bs, 8);
        break;
    }
}

/*
 * n <= CW elements of dtype dt at src (element stride st) as a contiguous
 * array of compute type ct: src itself when it already is one, else a copy
 * in buf (room for n elements of 8 bytes).
 */
static const void *stage(void *buf, int ct, const char *src, keel_dtype dt,
                         int64_t n, int64_t st)
{
    if (is_half(dt) && ct == CT_F32) {
        uint16_t tmp[CW];
        const uint16_t *h = (const uint16_t *)src;
        if (st != 1) {
            gather(tmp, src, 2, n, st);
            h = tmp;
        }
        if (dt == KEEL_F16)
            kf16_to_f32(h, buf, n);
        else
            kbf16_to_f32(h, buf, n);
        return buf;
    }
    if (st == 1)
        return src;
    gather(buf, src, keel_dtype_size(dt), n, st);
    return buf;
}

/* ---- storing results ----------------------------------------------------- */

static void store_f(char *o, keel_dtype odt, int64_t os, const float *v,
                    int64_t n)
{
    int64_t es = keel_dtype_size(odt);

    if (odt == KEEL_F32) {
        float *p = (float *)o;
        for (int64_t i = 0; i < n; i++)
            p[i * os] = v[i];
    } else if (odt == KEEL_F64) {
        double *p = (double *)o;
        for (int64_t i = 0; i < n; i++)
            p[i * os] = v[i];
    } else if (is_half(odt)) {
        for (int64_t k = 0; k < n; k += CH) {
            int64_t m = min64(CH, n - k);
            uint16_t h[CH], *dst = os == 1 ? (uint16_t *)o + k : h;
            if (odt == KEEL_F16)
                kf32_to_f16(v + k, dst, m);
            else
                kf32_to_bf16(v + k, dst, m);
            if (os != 1)
                for (int64_t i = 0; i < m; i++)
                    memcpy(o + (k + i) * os * 2, &h[i], 2);
        }
    } else {
        for (int64_t i = 0; i < n; i++)
            kstore(o + i * os * es, odt, v[i]);
    }
}

static void store_d(char *o, keel_dtype odt, int64_t os, const double *v,
                    int64_t n)
{
    int64_t es = keel_dtype_size(odt);

    if (odt == KEEL_F64) {
        double *p = (double *)o;
        for (int64_t i = 0; i < n; i++)
            p[i * os] = v[i];
    } else if (odt == KEEL_F32 || is_half(odt)) {
        float f[CH];
        for (int64_t k = 0; k < n; k += CH) {
            int64_t m = min64(CH, n - k);
            for (int64_t i = 0; i < m; i++)
                f[i] = (float)v[k + i];
            store_f(o + k * os * es, odt, os, f, m);
        }
    } else {
        for (int64_t i = 0; i < n; i++)
            kstore(o + i * os * es, odt, v[i]);
    }
}

static void store_i(char *o, keel_dtype odt, int64_t os, const int64_t *v,
                    int64_t n)
{
    int64_t es = keel_dtype_size(odt);

    switch (odt) {
    case KEEL_I64:
        for (int64_t i = 0; i < n; i++)
            ((int64_t *)o)[i * os] = v[i];
        break;
    case KEEL_I32:
        for (int64_t i = 0; i < n; i++)
            ((int32_t *)o)[i * os] = (int32_t)v[i];
        break;
    case KEEL_I8:
        for (int64_t i = 0; i < n; i++)
            ((int8_t *)o)[i * os] = (int8_t)v[i];
        break;
    case KEEL_U8:
        for (int64_t i = 0; i < n; i++)
            ((uint8_t *)o)[i * os] = (uint8_t)v[i];
        break;
    case KEEL_BOOL:
        for (int64_t i = 0; i < n; i++)
            ((uint8_t *)o)[i * os] = v[i] != 0;
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            kstore(o + i * os * es, odt, (double)v[i]);
        break;
    }
}

/* ---- accumulation primitives --------------------------------------------- */

enum rpass {
    P_NONE = -1,
    P_SUM,    /* floats: d += x; integers: u += x (wrapping)        */
    P_PROD,   /* d *= x; u *= x                                     */
    P_MAX,    /* floats: d, nan; integers: i                        */
    P_MIN,    /*                                                    */
    P_NZ,     /* u += (x != 0)                                      */
    P_SQDEV,  /* d += (x - mean)^2, mean from the parameter's d      */
    P_SUMEXP, /* d += e^(x - m), m from the parameter's d            */
    P_FIND,   /* i = first linear index equal to the parameter's max */
    P_COUNT
};

/* The running result of one pass for one output. */
struct rstate {
    double d;
    uint64_t u;
    int64_t i;
    bool nan;
};

/* One pass over up to CW neighbouring outputs at once (columns path). */
struct rcols {
    union {
        double d[CW];
        uint64_t u[CW];
    } a;
    union {
        float f32[CW];
        double f64[CW];
        int8_t i8[CW];
        uint8_t u8[CW];
        int32_t i32[CW];
        int64_t i64[CW];
    } m;
    int64_t idx[CW];
    double p[CW]; /* pass parameter per output (mean or maximum) */
};

/* Contiguous run of n elements (compute type) into one state. */
typedef void (*row_fn)(struct rstate *s, const void *x, int64_t n,
                       const struct rstate *p, int64_t lin);
/* One reduced position r of w neighbouring outputs (contiguous). */
typedef void (*col_fn)(struct rcols *restrict c, const void *restrict x,
                       int64_t w, int64_t r);

#define NZ_PLAIN(v) ((v) != 0)
#define NZ_H16(v) (((v)&0x7fffu) != 0)

/* Sum (and product) with VL lanes in accumulator type A. */
#define ROW_ACC(NAME, T, A, F, OP, INIT)                                     \
    static void row_##NAME##_##T(struct rstate *s, const void *xv,           \
                                 int64_t n, const struct rstate *p,          \
                                 int64_t lin)                                \
    {                                                                        \
        const T *x = xv;                                                     \
        A a[VL], t = INIT;                                                   \
        int64_t i = 0;                                                       \
        (void)p;                                                             \
        (void)lin;                                                           \
        for (int j = 0; j < VL; j++)                                         \
            a[j] = INIT;                                                     \
        for (; i + VL <= n; i += VL)                                         \
            for (int j = 0; j < VL; j++)                                     \
                a[j] OP (A) x[i + j];                                        \
        for (; i < n; i++)                                                   \
            a[0] OP (A) x[i];                                                \
        for (int j = 0; j < VL; j++)                                         \
            t OP a[j];                                                       \
        s->F OP t;                                                           \
    }                                                                        \
    static void col_##NAME##_##T(struct rcols *restrict c,                   \
                                 const void *restrict xv, int64_t w,         \
                                 int64_t r)                                  \
    {                                                                        \
        const T *x = xv;                                                     \
        A *a = c->a.F;                                                       \
        int64_t j = 0;                                                       \
        (void)r;                                                             \
        for (; j + VL <= w; j += VL)                                         \
            for (int l = 0; l < VL; l++)                                     \
                a[j + l] OP (A) x[j + l];                                    \
        for (; j < w; j++)                                                   \
            a[j] OP (A) x[j];                                                \
    }

/* NaN-propagating extreme of floats: the select keeps a NaN once seen. */
#define ROW_EXTF(NAME, T, M, CMP)                                            \
    static void row_##NAME##_##T(struct rstate *s, const void *xv,           \
                                 int64_t n, const struct rstate *p,          \
                                 int64_t lin)                                \
    {                                                                        \
        const T *x = xv;                                                     \
        T m[VL];                                                             \
        int64_t i = 0;                                                       \
        (void)p;                                                             \
        (void)lin;                                                           \
        for (int j = 0; j < VL; j++)                                         \
            m[j] = (T)s->d;                                                  \
        for (; i + VL <= n; i += VL)                                         \
            for (int j = 0; j < VL; j++) {                                   \
                T v = x[i + j];                                              \
                m[j] = ((v CMP m[j]) | (v != v)) ? v : m[j];                 \
            }                                                                \
        for (; i < n; i++)                                                   \
            m[0] = ((x[i] CMP m[0]) | (x[i] != x[i])) ? x[i] : m[0];         \
        for (int j = 0; j < VL; j++) {                                       \
            if (m[j] != m[j])                                                \
                s->nan = true;                                               \
            else if (m[j] CMP s->d)                                          \
                s->d = m[j];                                                 \
        }                                                                    \
    }                                                                        \
    static void col_##NAME##_##T(struct rcols *restrict c,                   \
                                 const void *restrict xv, int64_t w,         \
                                 int64_t r)                                  \
    {                                                                        \
        const T *x = xv;                                                     \
        T *m = c->m.M;                                                       \
        int64_t j = 0;                                                       \
        (void)r;                                                             \
        for (; j + VL <= w; j += VL)                                         \
            for (int l = 0; l < VL; l++) {                                   \
                T v = x[j + l];                                              \
                m[j + l] = ((v CMP m[j + l]) | (v != v)) ? v : m[j + l];     \
            }                                                                \
        for (; j < w; j++)                                                   \
            m[j] = ((x[j] CMP m[j]) | (x[j] != x[j])) ? x[j] : m[j];         \
    }

#define ROW_EXTI(NAME, T, M, CMP)                                            \
    static void row_##NAME##_##T(struct rstate *s, const void *xv,           \
                                 int64_t n, const struct rstate *p,          \
                                 int64_t lin)                                \
    {                                                                        \
        const T *x = xv;                                                     \
        T m[VL];                                                             \
        int64_t i = 0;                                                       \
        (void)p;                                                             \
        (void)lin;                                                           \
        for (int j = 0; j < VL; j++)                                         \
            m[j] = (T)s->i;                                                  \
        for (; i + VL <= n; i += VL)                                         \
            for (int j = 0; j < VL; j++) {                                   \
                T v = x[i + j];                                              \
                m[j] = v CMP m[j] ? v : m[j];                                \
            }                                                                \
        for (; i < n; i++)                                                   \
            m[0] = x[i] CMP m[0] ? x[i] : m[0];                              \
        for (int j = 0; j < VL; j++)                                         \
            if (m[j] CMP s->i)                                               \
                s->i = m[j];                                                 \
    }                                                                        \
    static void col_##NAME##_##T(struct rcols *restrict c,                   \
                                 const void *restrict xv, int64_t w,         \
                                 int64_t r)                                  \
    {                                                                        \
        const T *x = xv;                                                     \
        T *m = c->m.M;                                                       \
        int64_t j = 0;                                                       \
        (void)r;                                                             \
        for (; j + VL <= w; j += VL)                                         \
            for (int l = 0; l < VL; l++) {                                   \
                T v = x[j + l];                                              \
                m[j + l] = v CMP m[j + l] ? v : m[j + l];                    \
            }                                                                \
        for (; j < w; j++)                                                   \
            m[j] = x[j] CMP m[j] ? x[j] : m[j];                              \
    }

#define ROW_NZ(T, TEST)                                                      \
    static void row_nz_##T(struct rstate *s, const void *xv, int64_t n,      \
                           const struct rstate *p, int64_t lin)              \
    {                                                                        \
        const T *x = xv;                                                     \
        uint64_t a[VL] = {0}, t = 0;                                         \
        int64_t i = 0;                                                       \
        (void)p;                                                             \
        (void)lin;                                                           \
        for (; i + VL <= n; i += VL)                                         \
            for (int j = 0; j < VL; j++)                                     \
                a[j] += TEST(x[i + j]);                                      \
        for (; i < n; i++)                                                   \
            a[0] += TEST(x[i]);                                              \
        for (int j = 0; j < VL; j++)                                         \
            t += a[j];                                                       \
        s->u += t;                                                           \
    }                                                                        \
    static void col_nz_##T(struct rcols *restrict c,                         \
                              const void *restrict xv, int64_t w,            \
                           int64_t r)                                        \
    {                                                                        \
        const T *x = xv;                                                     \
        uint64_t *a = c->a.u;                                                \
        int64_t j = 0;                                                       \
        (void)r;                                                             \
        for (; j + VL <= w; j += VL)                                         \
            for (int l = 0; l < VL; l++)                                     \
                a[j + l] += TEST(x[j + l]);                                  \
        for (; j < w; j++)                                                   \
            a[j] += TEST(x[j]);                                              \
    }

/* Sum of squared deviations from the mean (parameter d), in double. */
#define ROW_SQDEV(T)                                                         \
    static void row_sqdev_##T(struct rstate *s, const void *xv, int64_t n,   \
                              const struct rstate *p, int64_t lin)           \
    {                                                                        \
        const T *x = xv;                                                     \
        const double mu = p->d;                                              \
        double a[VL] = {0}, t = 0;                                           \
        int64_t i = 0;                                                       \
        (void)lin;                                                           \
        for (; i + VL <= n; i += VL)                                         \
            for (int j = 0; j < VL; j++) {                                   \
                double d = (double)x[i + j] - mu;                            \
                a[j] += d * d;                                               \
            }                                                                \
        for (; i < n; i++) {                                                 \
            double d = (double)x[i] - mu;                                    \
            a[0] += d * d;                                                   \
        }                                                                    \
        for (int j = 0; j < VL; j++)                                         \
            t += a[j];                                                       \
        s->d += t;                                                           \
    }                                                                        \
    static void col_sqdev_##T(struct rcols *restrict c,                      \
                              const void *restrict xv, int64_t w,            \
                              int64_t r)                                     \
    {                                                                        \
        const T *x = xv;                                                     \
        double *a = c->a.d;                                                  \
        const double *mu = c->p;                                             \
        int64_t j = 0;                                                       \
        (void)r;                                                             \
        for (; j + VL <= w; j += VL)                                         \
            for (int l = 0; l < VL; l++) {                                   \
                double d = (double)x[j + l] - mu[j + l];                     \
                a[j + l] += d * d;                                           \
            }                                                                \
        for (; j < w; j++) {                                                 \
            double d = (double)x[j] - mu[j];                                 \
            a[j] += d * d;                                                   \
        }                                                                    \
    }

/* Sum of e^(x - m), m the parameter (the maximum). */
#define ROW_SUMEXP(T, EXP)                                                   \
    static void row_sumexp_##T(struct rstate *s, const void *xv, int64_t n,  \
                               const struct rstate *p, int64_t lin)          \
    {                                                                        \
        const T *x = xv;                                                     \
        const T m = (T)p->d;                                                 \
        double t = 0;                                                        \
        (void)lin;                                                           \
        for (int64_t i = 0; i < n; i++)                                      \
            t += EXP(x[i] - m);                                              \
        s->d += t;                                                           \
    }                                                                        \
    static void col_sumexp_##T(struct rcols *restrict c,                     \
                              const void *restrict xv, int64_t w,            \
                               int64_t r)                                    \
    {                                                                        \
        const T *x = xv;                                                     \
        (void)r;                                                             \
        for (int64_t j = 0; j < w; j++)                                      \
            c->a.d[j] += EXP(x[j] - (T)c->p[j]);                             \
    }

/* First index holding the extreme found by the previous pass. */
#define ROW_FINDF(T, M)                                                      \
    static void row_find_##T(struct rstate *s, const void *xv, int64_t n,    \
                             const struct rstate *p, int64_t lin)            \
    {                                                                        \
        const T *x = xv;                                                     \
        const T v = (T)p->d;                                                 \
        if (s->i >= 0)                                                       \
            return;                                                          \
        for (int64_t i = 0; i < n; i++)                                      \
            if (p->nan ? x[i] != x[i] : x[i] == v) {                         \
                s->i = lin + i;                                              \
                return;                                                      \
            }                                                                \
    }                                                                        \
    static void col_find_##T(struct rcols *restrict c,                       \
                              const void *restrict xv, int64_t w,            \
                             int64_t r)                                      \
    {                                                                        \
        const T *x = xv, *m = c->m.M;                                        \
        for (int64_t j = 0; j < w; j++) {                                    \
            bool hit = m[j] != m[j] ? x[j] != x[j] : x[j] == m[j];           \
            if (hit && c->idx[j] < 0)                                        \
                c->idx[j] = r;                                               \
        }                                                                    \
    }

#define ROW_FINDI(T, M)                                                      \
    static void row_find_##T(struct rstate *s, const void *xv, int64_t n,    \
                             const struct rstate *p, int64_t lin)            \
    {                                                                        \
        const T *x = xv;                                                     \
        const T v = (T)p->i;                                                 \
        if (s->i >= 0)                                                       \
            return;                                                          \
        for (int64_t i = 0; i < n; i++)                                      \
            if (x[i] == v) {                                                 \
                s->i = lin + i;                                              \
                return;                                                      \
            }                                                                \
    }                                                                        \
    static void col_find_##T(struct rcols *restrict c,                       \
                              const void *restrict xv, int64_t w,            \
                             int64_t r)                                      \
    {                                                                        \
        const T *x = xv, *m = c->m.M;                                        \
        for (int64_t j = 0; j < w; j++)                                      \
            if (x[j] == m[j] && c->idx[j] < 0)                               \
                c->idx[j] = r;                                               \
    }

#define FLOAT_PRIMS(T, M, EXP)                                               \
    ROW_ACC(sum, T, double, d, +=, 0)                                        \
    ROW_ACC(prod, T, double, d, *=, 1)                                       \
    ROW_EXTF(max, T, M, >)                                                   \
    ROW_EXTF(min, T, M, <)                                                   \
    ROW_NZ(T, NZ_PLAIN)                                                      \
    ROW_SQDEV(T)                                                             \
    ROW_SUMEXP(T, EXP)                                                       \
    ROW_FINDF(T, M)

#define INT_PRIMS(T, M)                                                      \
    ROW_ACC(sum, T, uint64_t, u, +=, 0)                                      \
    ROW_ACC(prod, T, uint64_t, u, *=, 1)                                     \
    ROW_EXTI(max, T, M, >)                                                   \
    ROW_EXTI(min, T, M, <)                                                   \
    ROW_NZ(T, NZ_PLAIN)                                                      \
    ROW_FINDI(T, M)

FLOAT_PRIMS(float, f32, expf)
FLOAT_PRIMS(double, f64, exp)
INT_PRIMS(int8_t, i8)
INT_PRIMS(uint8_t, u8)
INT_PRIMS(int32_t, i32)
INT_PRIMS(int64_t, i64)
ROW_NZ(uint16_t, NZ_H16)

static const row_fn row_tab[P_COUNT][CT_COUNT] = {
    [P_SUM] = {row_sum_float, row_sum_double, row_sum_int8_t,
               row_sum_uint8_t, row_sum_int32_t, row_sum_int64_t},
    [P_PROD] = {row_prod_float, row_prod_double, row_prod_int8_t,
                row_prod_uint8_t, row_prod_int32_t, row_prod_int64_t},
    [P_MAX] = {row_max_float, row_max_double, row_max_int8_t,
               row_max_uint8_t, row_max_int32_t, row_max_int64_t},
    [P_MIN] = {row_min_float, row_min_double, row_min_int8_t,
               row_min_uint8_t, row_min_int32_t, row_min_int64_t},
    [P_NZ] = {row_nz_float, row_nz_double, row_nz_int8_t, row_nz_uint8_t,
              row_nz_int32_t, row_nz_int64_t, row_nz_uint16_t},
    [P_SQDEV] = {row_sqdev_float, row_sqdev_double},
    [P_SUMEXP] = {row_sumexp_float, row_sumexp_double},
    [P_FIND] = {row_find_float, row_find_double, row_find_int8_t,
                row_find_uint8_t, row_find_int32_t, row_find_int64_t},
};

static const col_fn col_tab[P_COUNT][CT_COUNT] = {
    [P_SUM] = {col_sum_float, col_sum_double, col_sum_int8_t,
               col_sum_uint8_t, col_sum_int32_t, col_sum_int64_t},
    [P_PROD] = {col_prod_float, col_prod_double, col_prod_int8_t,
                col_prod_uint8_t, col_prod_int32_t, col_prod_int64_t},
    [P_MAX] = {col_max_float, col_max_double, col_max_int8_t,
               col_max_uint8_t, col_max_int32_t, col_max_int64_t},
    [P_MIN] = {col_min_float, col_min_double, col_min_int8_t,
               col_min_uint8_t, col_min_int32_t, col_min_int64_t},
    [P_NZ] = {col_nz_float, col_nz_double, col_nz_int8_t, col_nz_uint8_t,
              col_nz_int32_t, col_nz_int64_t, col_nz_uint16_t},
    [P_SQDEV] = {col_sqdev_float, col_sqdev_double},
    [P_SUMEXP] = {col_sumexp_float, col_sumexp_double},
    [P_FIND] = {col_find_float, col_find_double, col_find_int8_t,
                col_find_uint8_t, col_find_int32_t, col_find_int64_t},
};

/* Compute type of a pass over dtype dt (NZ reads half types raw). */
static int pass_ct(keel_dtype dt, int pass)
{
    return pass == P_NZ && is_half(dt) ? CT_H16 : ct_of(dt);
}

static void state_init(struct rstate *s, int pass, int ct)
{
    s->d = 0;
    s->u = 0;
    s->i = 0;
    s->nan = false;
    switch (pass) {
    case P_PROD:
        s->d = 1;
        s->u = 1;
        break;
    case P_MAX:
        s->d = -INFINITY;
        s->i = ct_min(ct);
        break;
    case P_MIN:
        s->d = INFINITY;
        s->i = ct_max(ct);
        break;
    case P_FIND:
        s->i = -1;
        break;
    default:
        break;
    }
}

/* s = s (+) p, p covering the reduced indices right after s's. */
static void state_combine(struct rstate *s, const struct rstate *p, int pass)
{
    switch (pass) {
    case P_PROD:
        s->d *= p->d;
        s->u *= p->u;
        break;
    case P_MAX:
        s->nan |= p->nan;
        s->d = p->d > s->d ? p->d : s->d;
        s->i = p->i > s->i ? p->i : s->i;
        break;
    case P_MIN:
        s->nan |= p->nan;
        s->d = p->d < s->d ? p->d : s->d;
        s->i = p->i < s->i ? p->i : s->i;
        break;
    case P_FIND:
        if (s->i < 0)
            s->i = p->i;
        break;
    default:
        s->d += p->d;
        s->u += p->u;
        break;
    }
}

static void cols_init(struct rcols *c, int pass, int ct, int64_t w)
{
    double fv = pass == P_MAX ? -INFINITY : INFINITY;
    int64_t iv = pass == P_MAX ? ct_min(ct) : ct_max(ct);

    switch (pass) {
    case P_PROD:
        for (int64_t j = 0; j < w; j++) {
            if (ct_is_float(ct))
                c->a.d[j] = 1;
            else
                c->a.u[j] = 1;
        }
        break;
    case P_MAX:
    case P_MIN:
        for (int64_t j = 0; j < w; j++) {
            switch (ct) {
            case CT_F32:
                c->m.f32[j] = (float)fv;
                break;
            case CT_F64:
                c->m.f64[j] = fv;
                break;
            case CT_I8:
                c->m.i8[j] = (int8_t)iv;
                break;
            case CT_U8:
                c->m.u8[j] = (uint8_t)iv;
                break;
            case CT_I32:
                c->m.i32[j] = (int32_t)iv;
                break;
            default:
                c->m.i64[j] = iv;
                break;
            }
        }
        break;
    case P_FIND:
        for (int64_t j = 0; j < w; j++)
            c->idx[j] = -1;
        break;
    default:
        memset(c->a.u, 0, sizeof(uint64_t) * (size_t)w);
        break;
    }
}

/* The columns' results of a pass as per-output states. */
static void cols_extract(const struct rcols *c, int pass, int ct,
                         struct rstate *s, int64_t first, int64_t w)
{
    for (int64_t k = 0; k < w; k++) {
        int64_t j = first + k;
        state_init(&s[k], pass, ct);
        switch (pass) {
        case P_MAX:
        case P_MIN:
            if (ct == CT_F32 || ct == CT_F64) {
                double v = ct == CT_F32 ? c->m.f32[j] : c->m.f64[j];
                s[k].nan = v != v;
                s[k].d = v;
            } else {
                s[k].i = ct == CT_I8    ? c->m.i8[j]
                         : ct == CT_U8  ? c->m.u8[j]
                         : ct == CT_I32 ? c->m.i32[j]
                                        : c->m.i64[j];
            }
            break;
        case P_FIND:
            s[k].i = c->idx[j];
            break;
        default:
            if (ct_is_float(ct) && pass != P_NZ)
                s[k].d = c->a.d[j];
            else
                s[k].u = c->a.u[j];
            break;
        }
    }
}

/* ---- reductions ---------------------------------------------------------- */

enum rkind {
    R_SUM,
    R_MEAN,
    R_MAX,
    R_MIN,
    R_PROD,
    R_ARGMAX,
    R_ARGMIN,
    R_VAR,
    R_STD,
    R_LSE,
    R_ALL,
    R_ANY
};

static const struct rop {
    const char *name;
    int pass1, pass2;
} rops[] = {
    [R_SUM] = {"sum", P_SUM, P_NONE},
    [R_MEAN] = {"mean", P_SUM, P_NONE},
    [R_MAX] = {"max", P_MAX, P_NONE},
    [R_MIN] = {"min", P_MIN, P_NONE},
    [R_PROD] = {"prod", P_PROD, P_NONE},
    [R_ARGMAX] = {"argmax", P_MAX, P_FIND},
    [R_ARGMIN] = {"argmin", P_MIN, P_FIND},
    [R_VAR] = {"var", P_SUM, P_SQDEV},
    [R_STD] = {"std", P_SUM, P_SQDEV},
    [R_LSE] = {"logsumexp", P_MAX, P_SUMEXP},
    [R_ALL] = {"all", P_NZ, P_NONE},
    [R_ANY] = {"any", P_NZ, P_NONE},
};

struct rjob {
    struct geom g;
    int kind;
    const struct rop *op;
    keel_dtype dt, odt;
    int64_t es, oes;
    const char *x;
    char *out;
    bool unbiased, res_int;
    int64_t cw; /* columns width */
    /* split reductions */
    int pass;
    const char *xs;
    const struct rstate *prm;
    int64_t nparts;
    struct rstate part[RPARTS];
};

/* The parameter of the second pass, from the first pass's result. */
static struct rstate pass2_param(const struct rjob *j, const struct rstate *s1)
{
    struct rstate p = *s1;

    if (j->op->pass2 == P_SQDEV)
        p.d = j->g.nred > 0 ? s1->d / (double)j->g.nred : NAN;
    else if (j->op->pass2 == P_SUMEXP && s1->nan)
        p.d = NAN;
    return p;
}

/* Output values of w outputs from their pass results. */
static void finalize(const struct rjob *j, const struct rstate *s1,
                     const struct rstate *s2, int64_t w, double *vd,
                     int64_t *vi)
{
    double n = (double)j->g.nred, den = n - (j->unbiased ? 1 : 0);

    for (int64_t k = 0; k < w; k++) {
        switch (j->kind) {
        case R_SUM:
        case R_PROD:
            vd[k] = s1[k].d;
            vi[k] = (int64_t)s1[k].u;
            break;
        case R_MEAN:
            vd[k] = n > 0 ? s1[k].d / n : NAN;
            break;
        case R_VAR:
        case R_STD:
            vd[k] = den > 0 ? s2[k].d / den : NAN;
            if (j->kind == R_STD)
                vd[k] = sqrt(vd[k]);
            break;
        case R_MAX:
        case R_MIN:
            vd[k] = s1[k].nan ? NAN : s1[k].d;
            vi[k] = s1[k].i;
            break;
        case R_LSE:
            if (s1[k].nan)
                vd[k] = NAN;
            else if (isinf(s1[k].d))
                vd[k] = s1[k].d;
            else
                vd[k] = s1[k].d + log(s2[k].d);
            break;
        case R_ARGMAX:
        case R_ARGMIN:
            vi[k] = s2[k].i;
            break;
        case R_ALL:
            vi[k] = (int64_t)s1[k].u == j->g.nred;
            break;
        default: /* R_ANY */
            vi[k] = s1[k].u != 0;
            break;
        }
    }
}

static void store_results(const struct rjob *j, int64_t first,
                          const struct rstate *s1, const struct rstate *s2,
                          int64_t w)
{
    double vd[CH];
    int64_t vi[CH];

    finalize(j, s1, s2, w, vd, vi);
    if (j->res_int)
        store_i(j->out + first * j->oes, j->odt, 1, vi, w);
    else
        store_d(j->out + first * j->oes, j->odt, 1, vd, w);
}

/* Rows path: one run into a state, staged when needed. */
struct segctx {
    const struct rjob *j;
    const char *x;
    int pass, ct;
    row_fn f;
    struct rstate *s;
    const struct rstate *p;
};

static bool red_seg(void *ctx, int64_t xo, int64_t oo, int64_t n, int64_t lin)
{
    const struct segctx *c = ctx;
    const struct rjob *j = c->j;
    const char *p = c->x + xo * j->es;
    int64_t st = j->g.rx[j->g.nr - 1];
    _Alignas(64) unsigned char buf[CH * 8];

    (void)oo;
    if (st == 1 && !(is_half(j->dt) && c->ct == CT_F32)) {
        c->f(c->s, p, n, c->p, lin);
        return c->pass == P_FIND && c->s->i >= 0;
    }
    for (int64_t k = 0; k < n; k += CH) {
        int64_t m = min64(CH, n - k);
        c->f(c->s, stage(buf, c->ct, p + k * st * j->es, j->dt, m, st), m,
             c->p, lin + k);
        if (c->pass == P_FIND && c->s->i >= 0)
            return true;
    }
    return false;
}

/* Reduce the reduced indices [b, e) of the output whose input is at x. */
static void red_range(const struct rjob *j, int pass, const char *x,
                      int64_t b, int64_t e, struct rstate *s,
                      const struct rstate *p)
{
    struct segctx c = {j, x, pass, pass_ct(j->dt, pass), NULL, s, p};

    c.f = row_tab[pass][c.ct];
    walk(&j->g, b, e, red_seg, &c);
}

static void rows_block(const struct rjob *j, int64_t b, int64_t e)
{
    struct rstate s1[CH], s2[CH];
    const struct rop *op = j->op;
    struct kit it;

    kit_init(&it, &j->g, b);
    for (int64_t k = 0; k < e - b; k++, kit_next(&it, &j->g)) {
        /* NULL for an input without elements: no offset on it. */
        const char *x = j->x ? j->x + it.xo * j->es : NULL;
        state_init(&s1[k], op->pass1, pass_ct(j->dt, op->pass1));
        red_range(j, op->pass1, x, 0, j->g.nred, &s1[k], NULL);
        if (op->pass2 != P_NONE) {
            struct rstate p = pass2_param(j, &s1[k]);
            state_init(&s2[k], op->pass2, pass_ct(j->dt, op->pass2));
            red_range(j, op->pass2, x, 0, j->g.nred, &s2[k], &p);
        }
    }
    store_results(j, b, s1, s2, e - b);
}

static void rows_part(void *ctx, int64_t b, int64_t e)
{
    for (int64_t o = b; o < e; o += CH)
        rows_block(ctx, o, min64(o + CH, e));
}

/* Split reductions: part k covers the reduced indices of split_bounds. */
static void split_bounds(int64_t n, int64_t parts, int64_t k, int64_t *b,
                         int64_t *e)
{
    int64_t q = n / parts, r = n % parts;

    *b = k * q + min64(k, r);
    *e = *b + q + (k < r ? 1 : 0);
}

static void split_part(void *ctx, int64_t b, int64_t e)
{
    struct rjob *j = ctx;

    for (int64_t k = b; k < e; k++) {
        int64_t lo, hi;
        split_bounds(j->g.nred, j->nparts, k, &lo, &hi);
        state_init(&j->part[k], j->pass, pass_ct(j->dt, j->pass));
        red_range(j, j->pass, j->xs, lo, hi, &j->part[k], j->prm);
    }
}

static void split_pass(struct rjob *j, int pass, const char *x,
                       const struct rstate *p, struct rstate *s)
{
    j->pass = pass;
    j->xs = x;
    j->prm = p;
    cpu_parallel_for(j->nparts, 1, split_part, j);
    *s = j->part[0];
    for (int64_t k = 1; k < j->nparts; k++)
        state_combine(s, &j->part[k], pass);
}

/* A few outputs, each a long reduction shared by the pool. */
static void rows_split(struct rjob *j)
{
    struct kit it;

    j->nparts = min64(RPARTS, (j->g.nred + KGRAIN - 1) / KGRAIN);
    kit_init(&it, &j->g, 0);
    for (int64_t o = 0; o < j->g.nout; o++, kit_next(&it, &j->g)) {
        const char *x = j->x + it.xo * j->es;
        struct rstate s1, s2, p;
        split_pass(j, j->op->pass1, x, NULL, &s1);
        if (j->op->pass2 != P_NONE) {
            p = pass2_param(j, &s1);
            split_pass(j, j->op->pass2, x, &p, &s2);
        }
        store_results(j, o, &s1, &s2, 1);
    }
}

/* Columns path: one pass over all reduced positions for w outputs. */
static void cols_pass(const struct rjob *j, int pass, const char *x,
                      int64_t w, struct rcols *c)
{
    const struct geom *g = &j->g;
    int ct = pass_ct(j->dt, pass), last = g->nr - 1;
    col_fn f = col_tab[pass][ct];
    bool conv = is_half(j->dt) && ct == CT_F32;
    int64_t idx[KEEL_MAX_DIMS] = {0}, off = 0;
    _Alignas(64) float buf[CW];

    cols_init(c, pass, ct, w);
    for (int64_t r = 0; r < g->nred; r++) {
        const char *p = x + off * j->es;
        if (conv) {
            if (j->dt == KEEL_F16)
                kf16_to_f32((const uint16_t *)p, buf, w);
            else
                kbf16_to_f32((const uint16_t *)p, buf, w);
            f(c, buf, w, r);
        } else {
            f(c, p, w, r);
        }
        for (int d = last; d >= 0; d--) {
            off += g->rx[d];
            if (++idx[d] < g->rshape[d])
                break;
            off -= g->rshape[d] * g->rx[d];
            idx[d] = 0;
        }
    }
}

/*
 * Columns path: w <= CW outputs of one unit. The pass results are turned
 * into per-output states CH at a time: the second pass's parameters (means,
 * maxima) before it runs, everything else at the end (a MAX/MIN first pass
 * leaves its lanes untouched by the second).
 */
static void cols_unit(const struct rjob *j, int64_t u, struct rcols *c)
{
    const struct geom *g = &j->g;
    const struct rop *op = j->op;
    int ct1 = pass_ct(j->dt, op->pass1), ct2 = pass_ct(j->dt, op->pass2);
    int64_t len = g->kshape[g->nk - 1], nch = (len + j->cw - 1) / j->cw;
    int64_t outer = u / nch, c0 = (u % nch) * j->cw;
    int64_t w = min64(j->cw, len - c0), xo, yo, oo;
    struct rstate s1[CH], s2[CH];
    const char *x;

    kept_offsets(g, g->nk - 1, outer, &xo, &yo, &oo);
    x = j->x + (xo + c0) * j->es;
    cols_pass(j, op->pass1, x, w, c);
    if (op->pass2 != P_NONE) {
        for (int64_t b = 0; b < w; b += CH) {
            int64_t m = min64(CH, w - b);
            cols_extract(c, op->pass1, ct1, s1, b, m);
            for (int64_t k = 0; k < m; k++)
                c->p[b + k] = pass2_param(j, &s1[k]).d;
        }
        cols_pass(j, op->pass2, x, w, c);
    }
    for (int64_t b = 0; b < w; b += CH) {
        int64_t m = min64(CH, w - b);
        cols_extract(c, op->pass1, ct1, s1, b, m);
        if (op->pass2 != P_NONE)
            cols_extract(c, op->pass2, ct2, s2, b, m);
        store_results(j, outer * len + c0 + b, s1, s2, m);
    }
}

static void cols_part(void *ctx, int64_t b, int64_t e)
{
    struct rcols c;

    for (int64_t u = b; u < e; u++)
        cols_unit(ctx, u, &c);
}

/* Columns width: CW (long contiguous pieces of each row), narrower (down
 * to VL) when that gives the pool more units to share. Results do not
 * depend on it. */
static int64_t cols_width(const struct geom *g, int64_t *units)
{
    int64_t len = g->kshape[g->nk - 1], outer = g->nout / len, cw = CW;
    int64_t want = 4 * (int64_t)cpu_pool_threads();

    if (g->nout * g->nred < 2 * KGRAIN)
        want = 1;
    while (cw > VL && outer * ((len + cw - 1) / cw) < want)
        cw /= 2;
    *units = outer * ((len + cw - 1) / cw);
    return cw;
}

/* keel_kit_check (run by cpu_kernel_launch) has checked the axes, the
 * output's shape and dtype and the empty reductions without an identity;
 * the layout is this kernel's. */
static keel_status reduce_check(const keel_kernel_args *a, int kind)
{
    if (!kcontig(&a->outputs[0]))
        return cpu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: the CPU kernel needs a contiguous output",
                       rops[kind].name);
    return KEEL_STATUS_OK;
}

static void reduce_run(const struct kcall *k, int kind)
{
    const keel_kernel_args *a = k->a;
    struct rjob j;
    const struct geom *g = &j.g;
    uint32_t mask = keel_kit_reduce_mask(a, a->inputs[0].ndim);
    int64_t units;

    geom_build(&j.g, &a->inputs[0], NULL, mask, false);
    j.kind = kind;
    j.op = &rops[kind];
    j.dt = a->inputs[0].dtype;
    j.odt = a->outputs[0].dtype;
    j.es = keel_dtype_size(j.dt);
    j.oes = keel_dtype_size(j.odt);
    j.x = k->in[0];
    j.out = k->out[0];
    j.unbiased = kattr_i(a, "unbiased", 1) != 0;
    j.res_int = kind == R_ARGMAX || kind == R_ARGMIN || kind == R_ALL ||
                kind == R_ANY || !is_float(j.dt);
    if (g->nout == 0)
        return;
    if (g->nk > 0 && g->kx[g->nk - 1] == 1 && g->kshape[g->nk - 1] >= VL &&
        g->rx[g->nr - 1] != 1) {
        j.cw = cols_width(g, &units);
        cpu_parallel_for(units, grain_for(g->nred * j.cw), cols_part, &j);
    } else if (g->nout <= 8 && g->nred >= 2 * KGRAIN) {
        rows_split(&j);
    } else {
        cpu_parallel_for(g->nout, grain_for(g->nred), rows_part, &j);
    }
}

#define REDUCE_KERNEL(fn, kind)                                              \
    static void fn##_impl(const struct kcall *k)                             \
    {                                                                        \
        reduce_run(k, kind);                                                 \
    }                                                                        \
    static keel_status fn##_check(const keel_kernel_args *a)                 \
    {                                                                        \
        return reduce_check(a, kind);                                        \
    }                                                                        \
    KERNEL(fn, rops[kind].name, fn##_impl, fn##_check)

REDUCE_KERNEL(k_sum, R_SUM)
REDUCE_KERNEL(k_mean, R_MEAN)
REDUCE_KERNEL(k_max, R_MAX)
REDUCE_KERNEL(k_min, R_MIN)
REDUCE_KERNEL(k_prod, R_PROD)
REDUCE_KERNEL(k_argmax, R_ARGMAX)
REDUCE_KERNEL(k_argmin, R_ARGMIN)
REDUCE_KERNEL(k_var, R_VAR)
REDUCE_KERNEL(k_std, R_STD)
REDUCE_KERNEL(k_logsumexp, R_LSE)
REDUCE_KERNEL(k_all, R_ALL)
REDUCE_KERNEL(k_any, R_ANY)

/* ---- cumsum -------------------------------------------------------------- */

/* Running sums of a contiguous run into out[], carry in and out. */
#define SCAN(T, A, R)                                                        \
    static void scan_##T(const void *xv, int64_t n, A *carry, R *out)        \
    {                                                                        \
        const T *x = xv;                                                     \
        A c = *carry;                                                        \
        for (int64_t i = 0; i < n; i++) {                                    \
            c += (A)x[i];                                                    \
            out[i] = (R)c;                                                   \
        }                                                                    \
        *carry = c;                                                          \
    }
SCAN(float, double, double)
SCAN(double, double, double)
SCAN(int8_t, uint64_t, int64_t)
SCAN(uint8_t, uint64_t, int64_t)
SCAN(int32_t, uint64_t, int64_t)
SCAN(int64_t, uint64_t, int64_t)

struct sjob {
    struct geom g;
    keel_dtype dt, odt;
    int64_t es, oes, cw;
    int ct;
    const char *x;
    char *out;
    int64_t nparts;
    struct rstate carry[RPARTS];
};

struct scanctx {
    const struct sjob *j;
    const char *x;
    char *o;
    double cd;
    uint64_t cu;
};

/* Scan one run (strided input and output) continuing the carry. */
static bool scan_seg(void *ctx, int64_t xo, int64_t oo, int64_t n,
                     int64_t lin)
{
    struct scanctx *s = ctx;
    const struct sjob *j = s->j;
    int64_t xs = j->g.rx[j->g.nr - 1], os = j->g.ro[j->g.nr - 1];
    _Alignas(64) unsigned char buf[CH * 8];
    double rd[CH];
    int64_t ri[CH];

    (void)lin;
    for (int64_t k = 0; k < n; k += CH) {
        int64_t m = min64(CH, n - k);
        const void *p = stage(buf, j->ct, s->x + (xo + k * xs) * j->es,
                              j->dt, m, xs);
        char *o = s->o + (oo + k * os) * j->oes;
        switch (j->ct) {
        case CT_F32:
            scan_float(p, m, &s->cd, rd);
            break;
        case CT_F64:
            scan_double(p, m, &s->cd, rd);
            break;
        case CT_I8:
            scan_int8_t(p, m, &s->cu, ri);
            break;
        case CT_U8:
            scan_uint8_t(p, m, &s->cu, ri);
            break;
        case CT_I32:
            scan_int32_t(p, m, &s->cu, ri);
            break;
        default:
            scan_int64_t(p, m, &s->cu, ri);
            break;
        }
        if (ct_is_float(j->ct))
            store_d(o, j->odt, os, rd, m);
        else
            store_i(o, j->odt, os, ri, m);
    }
    return false;
}

static void scan_lines(void *ctx, int64_t b, int64_t e)
{
    const struct sjob *j = ctx;
    struct kit it;

    kit_init(&it, &j->g, b);
    for (int64_t o = b; o < e; o++, kit_next(&it, &j->g)) {
        struct scanctx s = {j, j->x + it.xo * j->es, j->out + it.oo * j->oes,
                            0, 0};
        walk(&j->g, 0, j->g.nred, scan_seg, &s);
    }
}

/* One long line: block totals first, then each block from its carry. */
static void scan_totals(void *ctx, int64_t b, int64_t e)
{
    struct sjob *j = ctx;
    struct rjob r;

    r.g = j->g;
    r.dt = j->dt;
    r.es = j->es;
    for (int64_t k = b; k < e; k++) {
        int64_t lo, hi;
        split_bounds(j->g.nred, j->nparts, k, &lo, &hi);
        state_init(&j->carry[k], P_SUM, j->ct);
        red_range(&r, P_SUM, j->x, lo, hi, &j->carry[k], NULL);
    }
}

static void scan_blocks(void *ctx, int64_t b, int64_t e)
{
    const struct sjob *j = ctx;

    for (int64_t k = b; k < e; k++) {
        int64_t lo, hi;
        struct scanctx s = {j, j->x, j->out, j->carry[k].d, j->carry[k].u};
        split_bounds(j->g.nred, j->nparts, k, &lo, &hi);
        walk(&j->g, lo, hi, scan_seg, &s);
    }
}

static void scan_one_line(struct sjob *j)
{
    double cd = 0;
    uint64_t cu = 0;

    j->nparts = min64(RPARTS, (j->g.nred + KGRAIN - 1) / KGRAIN);
    cpu_parallel_for(j->nparts, 1, scan_totals, j);
    /* Exclusive prefix of the totals: the carry into each block. */
    for (int64_t k = 0; k < j->nparts; k++) {
        double td = j->carry[k].d;
        uint64_t tu = j->carry[k].u;
        j->carry[k].d = cd;
        j->carry[k].u = cu;
        cd += td;
        cu += tu;
    }
    cpu_parallel_for(j->nparts, 1, scan_blocks, j);
}

/* Axis scan with a contiguous inner kept dim: w lines advance together. */
static void scan_cols(void *ctx, int64_t b, int64_t e)
{
    const struct sjob *j = ctx;
    const struct geom *g = &j->g;
    int64_t len = g->kshape[g->nk - 1], nch = (len + j->cw - 1) / j->cw;
    int64_t n = g->rshape[0], xs = g->rx[0], os = g->ro[0];
    col_fn f = col_tab[P_SUM][j->ct];
    _Alignas(64) float buf[CW];
    struct rcols c;

    for (int64_t u = b; u < e; u++) {
        int64_t outer = u / nch, c0 = (u % nch) * j->cw, xo, yo, oo;
        int64_t w = min64(j->cw, len - c0);
        kept_offsets(g, g->nk - 1, outer, &xo, &yo, &oo);
        cols_init(&c, P_SUM, j->ct, w);
        for (int64_t i = 0; i < n; i++) {
            const char *p = j->x + (xo + c0 + i * xs) * j->es;
            char *o = j->out + (oo + c0 + i * os) * j->oes;
            f(&c, stage(buf, j->ct, p, j->dt, w, 1), w, i);
            if (ct_is_float(j->ct))
                store_d(o, j->odt, 1, c.a.d, w);
            else
                store_i(o, j->odt, 1, (const int64_t *)c.a.u, w);
        }
    }
}

static void cumsum_impl(const struct kcall *k)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *x = &a->inputs[0];
    struct sjob j;
    const struct geom *g = &j.g;
    int64_t units;
    /* One axis, or none: the flattened tensor, every dim scanned. */
    uint32_t mask = keel_kit_reduce_mask(a, x->ndim);

    geom_build(&j.g, x, NULL, mask, true);
    j.dt = x->dtype;
    j.odt = a->outputs[0].dtype;
    j.es = keel_dtype_size(j.dt);
    j.oes = keel_dtype_size(j.odt);
    j.ct = ct_of(j.dt);
    j.x = k->in[0];
    j.out = k->out[0];
    if (g->nout == 0 || g->nred == 0)
        return;
    if (g->nout == 1 && g->nred >= 2 * KGRAIN) {
        scan_one_line(&j);
    } else if (g->nk > 0 && g->kx[g->nk - 1] == 1 && g->ko[g->nk - 1] == 1 &&
               g->kshape[g->nk - 1] >= VL && g->nr == 1 && g->rx[0] != 1) {
        j.cw = cols_width(g, &units);
        cpu_parallel_for(units, grain_for(g->nred * j.cw), scan_cols, &j);
    } else {
        cpu_parallel_for(g->nout, grain_for(g->nred), scan_lines, &j);
    }
}

/* The kit has checked the axis and the output's shape and dtype; the
 * layout is this kernel's. */
static keel_status cumsum_check(const keel_kernel_args *a)
{
    if (!kcontig(&a->outputs[0]))
        return cpu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "cumsum: the CPU kernel needs a contiguous output");
    return KEEL_STATUS_OK;
}

KERNEL(k_cumsum, "cumsum", cumsum_impl, cumsum_check)

/* ---- softmax family ------------------------------------------------------ */

enum smkind { SM_SOFTMAX, SM_LOG_SOFTMAX, SM_GRAD, SM_LOG_GRAD };

static const char *const sm_names[] = {"softmax", "log_softmax",
                                       "softmax_grad", "log_softmax_grad"};

struct smjob {
    struct geom g;
    int kind;
    keel_dtype dt, odt;
    int64_t es, oes, cw;
    const char *x, *y; /* x: input (or out for grads); y: dout */
    char *out;
};

/* Sum of a[i] * b[i] in double, VL lanes. */
#define DOT(T)                                                               \
    static double dot_##T(const T *a, const T *b, int64_t n)                 \
    {                                                                        \
        double acc[VL] = {0}, t = 0;                                         \
        int64_t i = 0;                                                       \
        for (; i + VL <= n; i += VL)                                         \
            for (int j = 0; j < VL; j++)                                     \
                acc[j] += (double)a[i + j] * b[i + j];                       \
        for (; i < n; i++)                                                   \
            acc[0] += (double)a[i] * b[i];                                   \
        for (int j = 0; j < VL; j++)                                         \
            t += acc[j];                                                     \
        return t;                                                            \
    }
DOT(float)
DOT(double)

/*
 * One line of n elements along the axis, three passes for the forward ops
 * (maximum, exp-sum, outputs) and two for the grads (sum, outputs), CH
 * elements at a time through staging buffers of compute type T.
 */
#define SM_LINE(T, CTT, EXP, LOG, STORE)                                     \
    static void sm_line_##T(const struct smjob *j, const char *x,            \
                            const char *y, char *o)                          \
    {                                                                        \
        const struct geom *g = &j->g;                                        \
        int64_t n = g->rshape[0], xs = g->rx[0], ys = g->ry[0];              \
        int64_t os = g->ro[0];                                               \
        _Alignas(64) T bx[CH], by[CH], bo[CH];                               \
        struct rstate s;                                                     \
        T m = 0, sh = 0, inv = 0;                                            \
        const T *px, *py = NULL;                                             \
                                                                             \
        state_init(&s, j->kind <= SM_LOG_SOFTMAX ? P_MAX : P_SUM, CTT);      \
        for (int64_t k = 0; k < n; k += CH) {                                \
            int64_t c = min64(CH, n - k);                                    \
            px = stage(bx, CTT, x + k * xs * j->es, j->dt, c, xs);           \
            if (j->kind >= SM_GRAD)                                          \
                py = stage(by, CTT, y + k * ys * j->es, j->dt, c, ys);       \
            if (j->kind <= SM_LOG_SOFTMAX)                                   \
                row_max_##T(&s, px, c, NULL, 0);                             \
            else if (j->kind == SM_GRAD)                                     \
                s.d += dot_##T(px, py, c);                                   \
            else                                                             \
                row_sum_##T(&s, py, c, NULL, 0);                             \
        }                                                                    \
        if (j->kind <= SM_LOG_SOFTMAX) {                                     \
            struct rstate p = s, e;                                          \
            m = s.nan ? (T)NAN : (T)s.d;                                     \
            p.d = m;                                                         \
            state_init(&e, P_SUMEXP, CTT);                                   \
            for (int64_t k = 0; k < n; k += CH) {                            \
                int64_t c = min64(CH, n - k);                                \
                px = stage(bx, CTT, x + k * xs * j->es, j->dt, c, xs);       \
                row_sumexp_##T(&e, px, c, &p, 0);                            \
            }                                                                \
            sh = (T)LOG(e.d);                                                \
            inv = (T)(1.0 / e.d);                                            \
        } else {                                                             \
            sh = (T)s.d;                                                     \
        }                                                                    \
        for (int64_t k = 0; k < n; k += CH) {                                \
            int64_t c = min64(CH, n - k);                                    \
            px = stage(bx, CTT, x + k * xs * j->es, j->dt, c, xs);           \
            if (j->kind >= SM_GRAD)                                          \
                py = stage(by, CTT, y + k * ys * j->es, j->dt, c, ys);       \
            switch (j->kind) {                                               \
            case SM_SOFTMAX:                                                 \
                for (int64_t i = 0; i < c; i++)                              \
                    bo[i] = EXP(px[i] - m) * inv;                            \
                break;                                                       \
            case SM_LOG_SOFTMAX:                                             \
                for (int64_t i = 0; i < c; i++)                              \
                    bo[i] = (px[i] - m) - sh;                                \
                break;                                                       \
            case SM_GRAD:                                                    \
                for (int64_t i = 0; i < c; i++)                              \
                    bo[i] = px[i] * (py[i] - sh);                            \
                break;                                                       \
            default:                                                         \
                for (int64_t i = 0; i < c; i++)                              \
                    bo[i] = py[i] - EXP(px[i]) * sh;                         \
                break;                                                       \
            }                                                                \
            STORE(o + k * os * j->oes, j->odt, os, bo, c);                   \
        }                                                                    \
    }

/*
 * Columns: w neighbouring lines (inner stride 1 for every operand) go
 * through the passes together; m and s hold one value per line.
 */
#define SM_COLS(T, CTT, M, EXP, LOG, STORE)                                  \
    static void sm_cols_##T(const struct smjob *j, const char *x,            \
                            const char *y, char *o, int64_t w,               \
                            struct rcols *cs)                                \
    {                                                                        \
        const struct geom *g = &j->g;                                        \
        int64_t n = g->rshape[0], xs = g->rx[0], ys = g->ry[0];              \
        int64_t os = g->ro[0];                                               \
        _Alignas(64) T bx[CW], by[CW], bo[CW], sh[CW];                       \
        const T *px, *py = NULL, *m = cs->m.M;                               \
        double *s = cs->a.d;                                                 \
                                                                             \
        if (j->kind <= SM_LOG_SOFTMAX) {                                     \
            cols_init(cs, P_MAX, CTT, w);                                    \
            for (int64_t i = 0; i < n; i++)                                  \
                col_max_##T(cs, stage(bx, CTT, x + i * xs * j->es, j->dt, w, \
                                      1),                                    \
                            w, i);                                           \
        }                                                                    \
        cols_init(cs, P_SUM, CTT, w);                                        \
        for (int64_t i = 0; i < n; i++) {                                    \
            px = stage(bx, CTT, x + i * xs * j->es, j->dt, w, 1);            \
            if (j->kind >= SM_GRAD)                                          \
                py = stage(by, CTT, y + i * ys * j->es, j->dt, w, 1);        \
            switch (j->kind) {                                               \
            case SM_SOFTMAX:                                                 \
            case SM_LOG_SOFTMAX:                                             \
                for (int64_t l = 0; l < w; l++)                              \
                    s[l] += EXP(px[l] - m[l]);                               \
                break;                                                       \
            case SM_GRAD:                                                    \
                for (int64_t l = 0; l < w; l++)                              \
                    s[l] += (double)px[l] * py[l];                           \
                break;                                                       \
            default:                                                         \
                col_sum_##T(cs, py, w, i);                                   \
                break;                                                       \
            }                                                                \
        }                                                                    \
        for (int64_t l = 0; l < w; l++)                                      \
            sh[l] = j->kind == SM_SOFTMAX       ? (T)(1.0 / s[l])            \
                    : j->kind == SM_LOG_SOFTMAX ? (T)LOG(s[l])               \
                                                : (T)s[l];                   \
        for (int64_t i = 0; i < n; i++) {                                    \
            px = stage(bx, CTT, x + i * xs * j->es, j->dt, w, 1);            \
            if (j->kind >= SM_GRAD)                                          \
                py = stage(by, CTT, y + i * ys * j->es, j->dt, w, 1);        \
            switch (j->kind) {                                               \
            case SM_SOFTMAX:                                                 \
                for (int64_t l = 0; l < w; l++)                              \
                    bo[l] = EXP(px[l] - m[l]) * sh[l];                       \
                break;                                                       \
            case SM_LOG_SOFTMAX:                                             \
                for (int64_t l = 0; l < w; l++)                              \
                    bo[l] = (px[l] - m[l]) - sh[l];                          \
                break;                                                       \
            case SM_GRAD:                                                    \
                for (int64_t l = 0; l < w; l++)                              \
                    bo[l] = px[l] * (py[l] - sh[l]);                         \
                break;                                                       \
            default:                                                         \
                for (int64_t l = 0; l < w; l++)                              \
                    bo[l] = py[l] - EXP(px[l]) * sh[l];                      \
                break;                                                       \
            }                                                                \
            STORE(o + i * os * j->oes, j->odt, 1, bo, w);                    \
        }                                                                    \
    }

SM_LINE(float, CT_F32, expf, log, store_f)
SM_LINE(double, CT_F64, exp, log, store_d)
SM_COLS(float, CT_F32, f32, expf, log, store_f)
SM_COLS(double, CT_F64, f64, exp, log, store_d)

static void sm_lines(void *ctx, int64_t b, int64_t e)
{
    const struct smjob *j = ctx;
    struct kit it;

    kit_init(&it, &j->g, b);
    for (int64_t o = b; o < e; o++, kit_next(&it, &j->g)) {
        const char *x = j->x + it.xo * j->es;
        const char *y = j->y ? j->y + it.yo * j->es : NULL;
        char *out = j->out + it.oo * j->oes;
        if (j->dt == KEEL_F64)
            sm_line_double(j, x, y, out);
        else
            sm_line_float(j, x, y, out);
    }
}

static void sm_cols(void *ctx, int64_t b, int64_t e)
{
    const struct smjob *j = ctx;
    const struct geom *g = &j->g;
    int64_t len = g->kshape[g->nk - 1], nch = (len + j->cw - 1) / j->cw;
    struct rcols cs;

    for (int64_t u = b; u < e; u++) {
        int64_t outer = u / nch, c0 = (u % nch) * j->cw, xo, yo, oo;
        int64_t w = min64(j->cw, len - c0);
        const char *x, *y;
        char *o;
        kept_offsets(g, g->nk - 1, outer, &xo, &yo, &oo);
        x = j->x + (xo + c0) * j->es;
        y = j->y ? j->y + (yo + c0) * j->es : NULL;
        o = j->out + (oo + c0) * j->oes;
        if (j->dt == KEEL_F64)
            sm_cols_double(j, x, y, o, w, &cs);
        else
            sm_cols_float(j, x, y, o, w, &cs);
    }
}

static void softmax_run(const struct kcall *k, int kind)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *x = &a->inputs[0];
    const keel_tensor_desc *y = kind >= SM_GRAD ? &a->inputs[1] : NULL;
    int axis = keel_kit_axis_0d(kattr_i(a, "axis", -1), x->ndim);
    struct smjob j;
    int64_t units, total;
    const struct geom *g = &j.g;

    geom_build(&j.g, x, y, x->ndim ? 1u << axis : 0, true);
    j.kind = kind;
    j.dt = x->dtype;
    j.odt = a->outputs[0].dtype;
    j.es = keel_dtype_size(j.dt);
    j.oes = keel_dtype_size(j.odt);
    j.x = k->in[0];
    j.y = y ? k->in[1] : NULL;
    j.out = k->out[0];
    total = g->nout * g->nred;
    if (total == 0)
        return;
    if (g->nk > 0 && g->kx[g->nk - 1] == 1 && g->ko[g->nk - 1] == 1 &&
        (!y || g->ky[g->nk - 1] == 1) && g->kshape[g->nk - 1] >= VL / 4 &&
        g->rx[0] != 1) {
        j.cw = cols_width(g, &units);
        cpu_parallel_for(units, grain_for(g->nred * j.cw), sm_cols, &j);
    } else {
        cpu_parallel_for(g->nout, grain_for(g->nred), sm_lines, &j);
    }
}

/* The kit has checked the axis and that inputs and output share one
 * shape and dtype; the layout is this kernel's. */
static keel_status softmax_check(const keel_kernel_args *a, int kind)
{
    if (!kcontig(&a->outputs[0]))
        return cpu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: the CPU kernel needs a contiguous output",
                       sm_names[kind]);
    return KEEL_STATUS_OK;
}

#define SOFTMAX_KERNEL(fn, kind)                                             \
    static void fn##_impl(const struct kcall *k)                             \
    {                                                                        \
        softmax_run(k, kind);                                                \
    }                                                                        \
    static keel_status fn##_check(const keel_kernel_args *a)                 \
    {                                                                        \
        return softmax_check(a, kind);                                       \
    }                                                                        \
    KERNEL(fn, sm_names[kind], fn##_impl, fn##_check)

SOFTMAX_KERNEL(k_softmax, SM_SOFTMAX)
SOFTMAX_KERNEL(k_log_softmax, SM_LOG_SOFTMAX)
SOFTMAX_KERNEL(k_softmax_grad, SM_GRAD)
SOFTMAX_KERNEL(k_log_softmax_grad, SM_LOG_GRAD)

const struct cpu_kernel_entry cpu_kernels_reduce[] = {
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
    {NULL, 0, NULL},
};
