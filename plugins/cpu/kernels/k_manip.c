/*
 * CPU kernels of the shape and indexing ops: concat, stack, split, gather,
 * index_select, scatter, take_along_axis, tile, flip, pad, topk, sort and
 * argsort.
 *
 * DESIGN
 *
 * Everything except sort/topk is pure data movement, so those kernels
 * work on element *sizes* (1, 2, 4 or 8 bytes), not dtypes: one code path
 * serves all nine dtypes. The building blocks are
 *
 *   copy_n / fill_n  one strided run of elements; memcpy / memset when the
 *                    run is contiguous, typed loops per element size else
 *   nd_copy          an N-d strided copy through kiter(), which merges
 *                    contiguous dims (a contiguous block becomes one
 *                    memcpy) and shares large copies on the thread pool
 *   struct geo       the same, serial and precomputed, for the many small
 *                    blocks of gather and scatter rows
 *
 * and each op reduces to them:
 *
 *   concat/stack/split  contiguous operands: one memcpy per (outer row,
 *                       part), rows shared on the pool; otherwise one
 *                       nd_copy per part into / out of a strided view
 *   gather              rows of >= 16 elements: one block copy per
 *                       (outer, index) pair; short rows: a kiter over the
 *                       output with the index broadcast (take_row)
 *   take_along_axis     kiter over (out, index, x with axis stride 0):
 *                       out[i] = x[i + index[i] * axis_stride]
 *   scatter             copy x, bucket the index by target row (counting
 *                       sort), then targets in parallel: overwrite copies
 *                       the last update of a row, accumulate sums a row's
 *                       updates in blocks of 256 in f32 (f16/bf16/f32),
 *                       f64 or int64 (integers wrap, bool ORs)
 *   tile                copy x into the corner, then double the filled
 *                       region along each axis (log2(repeat) copies)
 *   flip                nd_copy from a view with negated strides
 *   pad                 per output row: fill / copy / mirror the borders
 *
 * sort, argsort and topk load each row into (key, index) pairs, with the
 * key in float (f32, f16, bf16), double (f64) or int64 (integers), and
 * order them by a total order: the key order, then the index. That makes
 * the result deterministic and the sort stable. NaN sorts last ascending
 * and first descending (NaN is "largest"); topk(largest) therefore picks
 * NaNs first. A bottom-up merge sort orders a row; topk with k <= n/8
 * selects with a k-element heap first. Rows are shared on the pool. Values
 * are written by copying x's elements at the sorted indices, so they are
 * bit-exact. topk with sorted=0 returns the selected elements in index
 * order.
 *
 * Index values are checked before anything runs (the check function waits
 * for queued work on the device, then reads the index): gather and
 * index_select need 0 <= i < size, scatter 0 <= i < rows, take_along_axis
 * -size <= i < size (negative counts from the end, as Paddle).
 *
 * Impl functions cannot fail: scratch memory that cannot be allocated
 * falls back to slower paths that need none.
 */
#include <stdlib.h>

#include "kern.h"

/* Raw element types that may alias any tensor data. */
typedef uint16_t __attribute__((may_alias)) ku16;
typedef uint32_t __attribute__((may_alias)) ku32;
typedef uint64_t __attribute__((may_alias)) ku64;

#define KMANIP_MAX_PARTS 128

/* ---- element runs -------------------------------------------------------- */

/* dst[i * ds] = src[i * ss] for i < n; strides in elements of size es. */
static void copy_n(char *dst, int64_t ds, const char *src, int64_t ss,
                   int64_t n, int es)
{
    if (n <= 0)
        return;
    if (ds == 1 && ss == 1) {
        memcpy(dst, src, (size_t)(n * es));
        return;
    }
#define COPY_N(T)                                                            \
    for (int64_t i = 0; i < n; i++)                                          \
        ((T *)dst)[i * ds] = ((const T *)src)[i * ss]
    switch (es) {
    case 1:
        COPY_N(uint8_t);
        break;
    case 2:
        COPY_N(ku16);
        break;
    case 4:
        COPY_N(ku32);
        break;
    default:
        COPY_N(ku64);
        break;
    }
#undef COPY_N
}

/* dst[i * ds] = *pat for i < n. */
static void fill_n(char *dst, int64_t ds, const void *pat, int64_t n, int es)
{
    if (n <= 0)
        return;
    if (es == 1 && ds == 1) {
        memset(dst, *(const uint8_t *)pat, (size_t)n);
        return;
    }
#define FILL_N(T)                                                            \
    do {                                                                     \
        T v_;                                                                \
        memcpy(&v_, pat, sizeof(v_));                                        \
        for (int64_t i = 0; i < n; i++)                                      \
            ((T *)dst)[i * ds] = v_;                                         \
    } while (0)
    switch (es) {
    case 1:
        FILL_N(uint8_t);
        break;
    case 2:
        FILL_N(ku16);
        break;
    case 4:
        FILL_N(ku32);
        break;
    default:
        FILL_N(ku64);
        break;
    }
#undef FILL_N
}

/* ---- N-d copies ---------------------------------------------------------- */

static void copy_row(void *ctx, char *const *p, const int64_t *st, int64_t n)
{
    int es = *(const int *)ctx;

    copy_n(p[0], st[0] / es, p[1], st[1] / es, n, es);
}

/* Strided N-d copy (element strides), parallel when large. Both pointers
 * must be valid unless a dim is 0. */
static void nd_copy(char *dst, const int64_t *dst_st, const char *src,
                    const int64_t *src_st, int nd, const int64_t *shape,
                    int es)
{
    int64_t st[2][KEEL_MAX_DIMS] = {{0}};
    void *base[2] = {dst, (void *)src};
    uint32_t esz[2] = {(uint32_t)es, (uint32_t)es};

    for (int d = 0; d < nd; d++) {
        if (shape[d] == 0)
            return;
        st[0][d] = dst_st[d];
        st[1][d] = src_st[d];
    }
    kiter(2, base, (const int64_t(*)[KEEL_MAX_DIMS])st, esz, nd, shape,
          copy_row, &es);
}

/* A block geometry shared by a destination and a source, with size-1 dims
 * dropped and dims contiguous in both merged (row-major order kept). */
struct geo {
    int nd; /* >= 1 */
    int64_t numel;
    int64_t shape[KEEL_MAX_DIMS];
    int64_t ds[KEEL_MAX_DIMS], ss[KEEL_MAX_DIMS]; /* element strides */
};

static void geo_init(struct geo *g, int nd, const int64_t *shape,
                     const int64_t *ds, const int64_t *ss)
{
    g->nd = 0;
    g->numel = 1;
    for (int d = 0; d < nd; d++) {
        int k = g->nd - 1;
        g->numel *= shape[d];
        if (shape[d] == 1)
            continue;
        if (k >= 0 && g->ds[k] == ds[d] * shape[d] &&
            g->ss[k] == ss[d] * shape[d]) {
            g->shape[k] *= shape[d];
            g->ds[k] = ds[d];
            g->ss[k] = ss[d];
            continue;
        }
        g->shape[g->nd] = shape[d];
        g->ds[g->nd] = ds[d];
        g->ss[g->nd] = ss[d];
        g->nd++;
    }
    if (g->nd == 0) {
        g->nd = 1;
        g->shape[0] = 1;
        g->ds[0] = 1;
        g->ss[0] = 1;
    }
}

/* Serial copy of one block (g->numel > 0). */
static void geo_copy(const struct geo *g, char *dst, const char *src, int es)
{
    int last = g->nd - 1;
    int64_t idx[KEEL_MAX_DIMS] = {0}, doff = 0, soff = 0;
    int64_t rows = g->numel / g->shape[last];

    for (int64_t r = 0; r < rows; r++) {
        copy_n(dst + doff * es, g->ds[last], src + soff * es, g->ss[last],
               g->shape[last], es);
        for (int d = last - 1; d >= 0; d--) {
            doff += g->ds[d];
            soff += g->ss[d];
            if (++idx[d] < g->shape[d])
                break;
            doff -= g->ds[d] * g->shape[d];
            soff -= g->ss[d] * g->shape[d];
            idx[d] = 0;
        }
    }
}

/* Elements [start, start + m) of the source block, in row-major order,
 * into contiguous dst. */
static void geo_gather(const struct geo *g, const char *src, int64_t start,
                       int64_t m, char *dst, int es)
{
    int64_t idx[KEEL_MAX_DIMS], off = 0, rem = start;
    int last = g->nd - 1;

    for (int d = last; d >= 0; d--) {
        idx[d] = rem % g->shape[d];
        rem /= g->shape[d];
        off += idx[d] * g->ss[d];
    }
    while (m > 0) {
        int64_t run = g->shape[last] - idx[last];
        if (run > m)
            run = m;
        copy_n(dst, 1, src + off * es, g->ss[last], run, es);
        dst += run * es;
        m -= run;
        off += run * g->ss[last];
        idx[last] += run;
        for (int d = last; d > 0 && idx[d] == g->shape[d]; d--) {
            off += g->ss[d - 1] - g->shape[d] * g->ss[d];
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

/* ---- index values -------------------------------------------------------- */

static inline int64_t idx_at(const char *p, keel_dtype dt, int64_t i)
{
    return dt == KEEL_I32 ? ((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

/*
 * Validate every value of index input `which`: -size <= v < size when
 * negatives are allowed, else 0 <= v < size. Reads the index on the host
 * after waiting for the device's queued work (async streams).
 */
static keel_status check_index(const keel_kernel_args *a, int which,
                               int64_t size, bool allow_neg, const char *op,
                               int axis)
{
    const keel_tensor_desc *d = &a->inputs[which];
    int64_t n = knumel(d), lo = 0, hi = 0, off = 0, pos[KEEL_MAX_DIMS] = {0};
    int64_t es = keel_dtype_size(d->dtype), min = allow_neg ? -size : 0;
    struct cpu_device *dev;
    const char *base;
    void *h;
    keel_status st;

    if (n == 0)
        return KEEL_STATUS_OK;
    if ((st = cpu_dev_get(a->device, op, &dev)))
        return st;
    cpu_device_wait_idle(dev);
    for (int k = 0; k < d->ndim; k++) {
        int64_t span = (d->shape[k] - 1) * d->strides[k];
        if (span < 0)
            lo += span;
        else
            hi += span;
    }
    if ((st = cpu_mem_range(dev, d->data + (keel_dptr)(lo * es),
                            (uint64_t)((hi - lo + 1) * es), op, &h)))
        return st;
    base = (const char *)h - lo * es;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = idx_at(base, d->dtype, off);
        if (v < min || v >= size) {
            if (v < 0 && !allow_neg)
                return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
                               "%s: index %lld at position %lld is "
                               "negative (negative indices are not "
                               "allowed)",
                               op, (long long)v, (long long)i);
            return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: index %lld at position %lld is out of "
                           "range for axis %d of size %lld",
                           op, (long long)v, (long long)i, axis,
                           (long long)size);
        }
        for (int k = d->ndim - 1; k >= 0; k--) {
            off += d->strides[k];
            if (++pos[k] < d->shape[k])
                break;
            off -= d->strides[k] * d->shape[k];
            pos[k] = 0;
        }
    }
    return KEEL_STATUS_OK;
}

/* ---- argument checks -----------------------------------------------------
 *
 * keel_kit_check (run by cpu_kernel_launch) has checked operand counts,
 * dtypes, axes, attributes and every output shape; what is left here is
 * this kernel's own: the index values (data) and its limits.
 */

/* concat, stack and split handle at most KMANIP_MAX_PARTS parts. */
static keel_status parts_limit(int n, const char *op)
{
    if (n > KMANIP_MAX_PARTS)
        return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: %d parts, the CPU kernel takes at most %d", op,
                       n, KMANIP_MAX_PARTS);
    return KEEL_STATUS_OK;
}

/* ---- concat, stack, split ------------------------------------------------ */

/*
 * The contiguous case of all three: `whole` is [outer, sum of part rows]
 * bytes, part i is [outer, part_row[i]] bytes. to_whole: concat/stack,
 * else split.
 */
struct seg_job {
    int n;
    bool to_whole;
    char *whole;
    int64_t whole_row;
    char *part[KMANIP_MAX_PARTS];
    int64_t part_row[KMANIP_MAX_PARTS];
};

static void seg_rows(void *ctx, int64_t b, int64_t e)
{
    const struct seg_job *j = ctx;

    for (int64_t r = b; r < e; r++) {
        char *w = j->whole + r * j->whole_row;
        for (int i = 0; i < j->n; i++) {
            int64_t len = j->part_row[i];
            if (!len)
                continue;
            if (j->to_whole)
                memcpy(w, j->part[i] + r * len, (size_t)len);
            else
                memcpy(j->part[i] + r * len, w, (size_t)len);
            w += len;
        }
    }
}

static void seg_run(struct seg_job *j, int64_t outer, int es)
{
    int64_t row = j->whole_row / es; /* elements per outer row */
    int64_t grain = KGRAIN / (row > 0 ? row : 1);

    cpu_parallel_for(outer, grain > 0 ? grain : 1, seg_rows, j);
}

/* Whether a part's rows (len x inner elements) are long enough for one
 * memcpy each; short ones go through the strided typed loops instead. */
static bool seg_worth(const keel_tensor_desc *d, int64_t len, int64_t inner,
                      int es)
{
    return knumel(d) == 0 || len * inner * es >= 64;
}

/*
 * Join parts (inputs) into the output along `axis` of the output.
 * new_axis: stack (each part contributes one index along axis; parts have
 * one dim less).
 */
static void join_impl(const struct kcall *k, bool new_axis)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *o = &a->outputs[0];
    int axis = kaxis(kattr_i(a, "axis", 0), o->ndim);
    int es = keel_dtype_size(o->dtype);
    int64_t outer, inner;
    bool contig = kcontig(o);
    struct seg_job j;
    int64_t at = 0;

    keel_kit_outer_inner(o, axis, &outer, &inner);
    if (knumel(o) == 0)
        return;
    for (int i = 0; i < a->num_inputs && contig; i++) {
        const keel_tensor_desc *x = &a->inputs[i];
        contig = kcontig(x) &&
                 seg_worth(x, new_axis ? 1 : x->shape[axis], inner, es);
    }
    if (contig && outer > 1) {
        j.n = a->num_inputs;
        j.to_whole = true;
        j.whole = k->out[0];
        j.whole_row = o->shape[axis] * inner * es;
        for (int i = 0; i < j.n; i++) {
            int64_t len = new_axis ? 1 : a->inputs[i].shape[axis];
            j.part[i] = k->in[i];
            j.part_row[i] = knumel(&a->inputs[i]) ? len * inner * es : 0;
        }
        seg_run(&j, outer, es);
        return;
    }
    /* General: each part into its strided view of the output. */
    for (int i = 0; i < a->num_inputs; i++) {
        const keel_tensor_desc *x = &a->inputs[i];
        int64_t st[KEEL_MAX_DIMS];
        char *dst = (char *)k->out[0] + at * o->strides[axis] * es;
        for (int d = 0, s = 0; d < o->ndim; d++)
            if (!new_axis || d != axis)
                st[s++] = o->strides[d];
        if (knumel(x))
            nd_copy(dst, st, k->in[i], x->strides, x->ndim, x->shape, es);
        at += new_axis ? 1 : x->shape[axis];
    }
}

static void concat_impl(const struct kcall *k)
{
    join_impl(k, false);
}

static void stack_impl(const struct kcall *k)
{
    join_impl(k, true);
}

static keel_status concat_check(const keel_kernel_args *a)
{
    return parts_limit(a->num_inputs, "concat");
}

static keel_status stack_check(const keel_kernel_args *a)
{
    return parts_limit(a->num_inputs, "stack");
}

static void split_impl(const struct kcall *k)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *x = &a->inputs[0];
    int axis = kaxis(kattr_i(a, "axis", 0), x->ndim);
    int es = keel_dtype_size(x->dtype);
    int64_t outer, inner;
    bool contig = kcontig(x);
    struct seg_job j;
    int64_t at = 0;

    keel_kit_outer_inner(x, axis, &outer, &inner);
    if (knumel(x) == 0)
        return;
    for (int i = 0; i < a->num_outputs && contig; i++)
        contig = kcontig(&a->outputs[i]) &&
                 seg_worth(&a->outputs[i], a->outputs[i].shape[axis], inner,
                           es);
    if (contig && outer > 1) {
        j.n = a->num_outputs;
        j.to_whole = false;
        j.whole = k->in[0];
        j.whole_row = x->shape[axis] * inner * es;
        for (int i = 0; i < j.n; i++) {
            j.part[i] = k->out[i];
            j.part_row[i] = knumel(&a->outputs[i])
                                ? a->outputs[i].shape[axis] * inner * es
                                : 0;
        }
        seg_run(&j, outer, es);
        return;
    }
    for (int i = 0; i < a->num_outputs; i++) {
        const keel_tensor_desc *o = &a->outputs[i];
        if (knumel(o))
            nd_copy(k->out[i], o->strides,
                    (const char *)k->in[0] + at * x->strides[axis] * es,
                    x->strides, o->ndim, o->shape, es);
        at += o->shape[axis];
    }
}

static keel_status split_check(const keel_kernel_args *a)
{
    return parts_limit(a->num_outputs, "split");
}

KERNEL(k_concat, "concat", concat_impl, concat_check)
KERNEL(k_stack, "stack", stack_impl, stack_check)
KERNEL(k_split, "split", split_impl, split_check)

/* ---- take: out[i] = x[i + index[i] * axis_stride] ------------------------ */

struct take_ctx {
    int es;
    keel_dtype idt;
    int64_t axis_bytes; /* x's stride along the indexed axis, in bytes */
    int64_t size;       /* x's size along it (negative indices wrap) */
};

static void take_row(void *ctx, char *const *p, const int64_t *st, int64_t n)
{
    const struct take_ctx *t = ctx;
    char *o = p[0];
    const char *ip = p[1], *xp = p[2];
    int64_t os = st[0], is = st[1], xs = st[2], xa = t->axis_bytes;
    int64_t size = t->size;

#define TAKE(T, IT)                                                          \
    for (int64_t i = 0; i < n; i++) {                                        \
        int64_t v = *(const IT *)(ip + i * is);                              \
        v += v < 0 ? size : 0;                                               \
        *(T *)(o + i * os) = *(const T *)(xp + i * xs + v * xa);             \
    }
#define TAKE_ES(IT)                                                          \
    switch (t->es) {                                                         \
    case 1:                                                                  \
        TAKE(uint8_t, IT);                                                   \
        break;                                                               \
    case 2:                                                                  \
        TAKE(ku16, IT);                                                      \
        break;                                                               \
    case 4:                                                                  \
        TAKE(ku32, IT);                                                      \
        break;                                                               \
    default:                                                                 \
        TAKE(ku64, IT);                                                      \
        break;                                                               \
    }
    if (t->idt == KEEL_I32)
        TAKE_ES(int32_t)
    else
        TAKE_ES(int64_t)
#undef TAKE_ES
#undef TAKE
}

/* out, index and x all described over the output's shape; x's strides
 * along `axis` are replaced by 0 (the index moves along it). */
static void take_run(char *out, const int64_t *ost, const char *idx,
                     const int64_t *ist, keel_dtype idt, const char *x,
                     const int64_t *xst, int64_t xsize, int axis, int nd,
                     const int64_t *shape, int es)
{
    int64_t st[3][KEEL_MAX_DIMS] = {{0}};
    void *base[3] = {out, (void *)idx, (void *)x};
    uint32_t esz[3] = {(uint32_t)es, keel_dtype_size(idt), (uint32_t)es};
    struct take_ctx t = {es, idt, xst[axis] * es, xsize};

    for (int d = 0; d < nd; d++) {
        st[0][d] = ost[d];
        st[1][d] = ist[d];
        st[2][d] = d == axis ? 0 : xst[d];
    }
    kiter(3, base, (const int64_t(*)[KEEL_MAX_DIMS])st, esz, nd, shape,
          take_row, &t);
}

/* ---- gather, index_select ------------------------------------------------ */

struct gather_job {
    const char *x, *idx;
    char *out;
    keel_dtype idt;
    int64_t ist; /* index stride */
    int es, nouter;
    int64_t nidx;
    int64_t oshape[KEEL_MAX_DIMS], oxs[KEEL_MAX_DIMS], oos[KEEL_MAX_DIMS];
    int64_t xs_axis, os_axis;
    struct geo inner;
};

static void gather_rows(void *ctx, int64_t b, int64_t e)
{
    const struct gather_job *g = ctx;

    for (int64_t r = b; r < e; r++) {
        int64_t o = r / g->nidx, j = r % g->nidx, xoff = 0, ooff = 0;
        int64_t v = idx_at(g->idx, g->idt, j * g->ist);
        for (int d = g->nouter - 1; d >= 0; d--) {
            int64_t q = o % g->oshape[d];
            o /= g->oshape[d];
            xoff += q * g->oxs[d];
            ooff += q * g->oos[d];
        }
        geo_copy(&g->inner, g->out + (ooff + j * g->os_axis) * g->es,
                 g->x + (xoff + v * g->xs_axis) * g->es, g->es);
    }
}

static void gather_impl(const struct kcall *k)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *x = &a->inputs[0], *ix = &a->inputs[1];
    const keel_tensor_desc *o = &a->outputs[0];
    int axis = kaxis(kattr_i(a, "axis", 0), x->ndim), nd = x->ndim;
    int es = keel_dtype_size(x->dtype);
    int64_t ist[KEEL_MAX_DIMS];
    const int64_t *shape, *ost;
    keel_tensor_desc v;
    struct gather_job g;

    if (knumel(o) == 0)
        return;
    /* The output as [x dims with the index's length along axis]; a 0-d
     * index (output without the axis) gives length 1. */
    keel_kit_gather_out(a, axis, &v);
    shape = v.shape;
    ost = v.strides;
    for (int d = 0; d < nd; d++)
        ist[d] = d == axis ? ix->strides[0] : 0;
    geo_init(&g.inner, nd - axis - 1, shape + axis + 1, ost + axis + 1,
             x->strides + axis + 1);
    if (g.inner.numel < 16) {
        /* Short rows: one strided pass over the output. */
        take_run(k->out[0], ost, k->in[1], ist, ix->dtype, k->in[0],
                 x->strides, x->shape[axis], axis, nd, shape, es);
        return;
    }
    g.x = k->in[0];
    g.idx = k->in[1];
    g.out = k->out[0];
    g.idt = ix->dtype;
    g.ist = ix->strides[0];
    g.es = es;
    g.nouter = axis;
    g.nidx = ix->shape[0];
    for (int d = 0; d < axis; d++) {
        g.oshape[d] = shape[d];
        g.oxs[d] = x->strides[d];
        g.oos[d] = ost[d];
    }
    g.xs_axis = x->strides[axis];
    g.os_axis = ost[axis];
    {
        int64_t grain = KGRAIN / g.inner.numel;
        cpu_parallel_for(keel_kit_prod(shape, 0, axis) * g.nidx,
                         grain > 0 ? grain : 1, gather_rows, &g);
    }
}

/* The index values: 0 <= i < size along the axis. */
static keel_status gather_check_op(const keel_kernel_args *a, const char *op)
{
    const keel_tensor_desc *x = &a->inputs[0];
    int axis = kaxis(kattr_i(a, "axis", 0), x->ndim);

    return check_index(a, 1, x->shape[axis], false, op, axis);
}

static keel_status gather_check(const keel_kernel_args *a)
{
    return gather_check_op(a, "gather");
}

static keel_status index_select_check(const keel_kernel_args *a)
{
    return gather_check_op(a, "index_select");
}

KERNEL(k_gather, "gather", gather_impl, gather_check)
KERNEL(k_index_select, "index_select", gather_impl, index_select_check)

/* ---- take_along_axis ----------------------------------------------------- */

static void take_along_impl(const struct kcall *k)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *x = &a->inputs[0], *ix = &a->inputs[1];
    const keel_tensor_desc *o = &a->outputs[0];
    int axis = kaxis(kattr_i(a, "axis", 0), x->ndim);

    if (knumel(o) == 0)
        return;
    take_run(k->out[0], o->strides, k->in[1], ix->strides, ix->dtype,
             k->in[0], x->strides, x->shape[axis], axis, o->ndim, o->shape,
             keel_dtype_size(o->dtype));
}

/* The index values: -size <= i < size (negative counts from the end). */
static keel_status take_along_check(const keel_kernel_args *a)
{
    const keel_tensor_desc *x = &a->inputs[0];
    int axis = kaxis(kattr_i(a, "axis", 0), x->ndim);

    return check_index(a, 1, x->shape[axis], true, "take_along_axis", axis);
}

KERNEL(k_take_along_axis, "take_along_axis", take_along_impl,
       take_along_check)

/* ---- scatter ------------------------------------------------------------- */

#define ACC_B 256

union acc_buf {
    float f[ACC_B];
    double d[ACC_B];
    int64_t l[ACC_B];
};

/* acc[i] += p[i] for i < m, p contiguous elements of dtype dt. */
static void acc_add(union acc_buf *acc, keel_dtype dt, const char *p,
                    int64_t m)
{
    float t[ACC_B];

#define ACC_INT(T)                                                           \
    for (int64_t i = 0; i < m; i++)                                          \
        acc->l[i] = (int64_t)((uint64_t)acc->l[i] +                          \
                              (uint64_t)(int64_t)((const T *)p)[i])
    switch (dt) {
    case KEEL_F32:
        for (int64_t i = 0; i < m; i++)
            acc->f[i] += ((const float *)p)[i];
        break;
    case KEEL_F16:
    case KEEL_BF16:
        if (dt == KEEL_F16)
            kf16_to_f32((const uint16_t *)p, t, m);
        else
            kbf16_to_f32((const uint16_t *)p, t, m);
        for (int64_t i = 0; i < m; i++)
            acc->f[i] += t[i];
        break;
    case KEEL_F64:
        for (int64_t i = 0; i < m; i++)
            acc->d[i] += ((const double *)p)[i];
        break;
    case KEEL_I8:
        ACC_INT(int8_t);
        break;
    case KEEL_I32:
        ACC_INT(int32_t);
        break;
    case KEEL_I64:
        ACC_INT(int64_t);
        break;
    default: /* u8, bool */
        ACC_INT(uint8_t);
        break;
    }
#undef ACC_INT
}

/* Store m accumulated values as dtype dt (integers wrap, bool is != 0). */
static void acc_store(const union acc_buf *acc, keel_dtype dt, char *p,
                      int64_t m)
{
#define ST_INT(T)                                                            \
    for (int64_t i = 0; i < m; i++)                                          \
        ((T *)p)[i] = (T)acc->l[i]
    switch (dt) {
    case KEEL_F32:
        memcpy(p, acc->f, (size_t)m * sizeof(float));
        break;
    case KEEL_F16:
        kf32_to_f16(acc->f, (uint16_t *)p, m);
        break;
    case KEEL_BF16:
        kf32_to_bf16(acc->f, (uint16_t *)p, m);
        break;
    case KEEL_F64:
        memcpy(p, acc->d, (size_t)m * sizeof(double));
        break;
    case KEEL_I8:
        ST_INT(int8_t);
        break;
    case KEEL_U8:
        ST_INT(uint8_t);
        break;
    case KEEL_I32:
        ST_INT(int32_t);
        break;
    case KEEL_I64:
        ST_INT(int64_t);
        break;
    default:
        for (int64_t i = 0; i < m; i++)
            ((uint8_t *)p)[i] = acc->l[i] != 0;
        break;
    }
#undef ST_INT
}

struct scatter_job {
    const char *up, *idx;
    char *out;
    keel_dtype dt, idt;
    int es;
    bool overwrite, up_contig;
    int64_t ist, nidx, rows;
    int64_t os0, us0; /* row strides (elements) of out and updates */
    struct geo inner; /* out (contiguous) <- updates row */
    const int64_t *end, *order; /* buckets: CSR by target row */
};

/* out row (contiguous) = [out row if from_out] + sum of updates rows
 * list[0..cnt), accumulated blockwise. */
static void scatter_acc_row(const struct scatter_job *s, char *orow,
                            const int64_t *list, int64_t cnt, bool from_out)
{
    union acc_buf acc;
    char raw[ACC_B * 8];
    int64_t n = s->inner.numel;

    for (int64_t b = 0; b < n; b += ACC_B) {
        int64_t m = n - b < ACC_B ? n - b : ACC_B;
        memset(&acc, 0, (size_t)m * 8);
        if (from_out)
            acc_add(&acc, s->dt, orow + b * s->es, m);
        for (int64_t c = 0; c < cnt; c++) {
            const char *u = s->up + list[c] * s->us0 * s->es;
            if (s->up_contig) {
                acc_add(&acc, s->dt, u + b * s->es, m);
            } else {
                geo_gather(&s->inner, u, b, m, raw, s->es);
                acc_add(&acc, s->dt, raw, m);
            }
        }
        acc_store(&acc, s->dt, orow + b * s->es, m);
    }
}

static void scatter_targets(void *ctx, int64_t b, int64_t e)
{
    const struct scatter_job *s = ctx;

    for (int64_t r = b; r < e; r++) {
        int64_t lo = r ? s->end[r - 1] : 0, hi = s->end[r];
        char *orow = s->out + r * s->os0 * s->es;
        if (lo == hi)
            continue;
        if (s->overwrite)
            geo_copy(&s->inner, orow,
                     s->up + s->order[hi - 1] * s->us0 * s->es, s->es);
        else
            scatter_acc_row(s, orow, s->order + lo, hi - lo, false);
    }
}

/* Without memory for the buckets: serial, in index order. */
static void scatter_serial(const struct scatter_job *s)
{
    if (!s->overwrite) {
        unsigned char zero[8] = {0};
        for (int64_t i = 0; i < s->nidx; i++) {
            int64_t v = idx_at(s->idx, s->idt, i * s->ist);
            fill_n(s->out + v * s->os0 * s->es, 1, zero, s->inner.numel,
                   s->es);
        }
    }
    for (int64_t i = 0; i < s->nidx; i++) {
        int64_t v = idx_at(s->idx, s->idt, i * s->ist);
        char *orow = s->out + v * s->os0 * s->es;
        if (s->overwrite)
            geo_copy(&s->inner, orow, s->up + i * s->us0 * s->es, s->es);
        else
            scatter_acc_row(s, orow, &i, 1, true);
    }
}

static void scatter_impl(const struct kcall *k)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *x = &a->inputs[0], *ix = &a->inputs[1];
    const keel_tensor_desc *u = &a->inputs[2], *o = &a->outputs[0];
    int64_t *end, *order;
    struct scatter_job s;

    if (knumel(o) == 0)
        return;
    s.es = keel_dtype_size(o->dtype);
    nd_copy(k->out[0], o->strides, k->in[0], x->strides, x->ndim, x->shape,
            s.es);
    s.nidx = ix->shape[0];
    if (s.nidx == 0)
        return;
    s.up = k->in[2];
    s.idx = k->in[1];
    s.out = k->out[0];
    s.dt = o->dtype;
    s.idt = ix->dtype;
    s.overwrite = kattr_i(a, "overwrite", 1) != 0;
    s.ist = ix->strides[0];
    s.rows = o->shape[0];
    s.os0 = o->strides[0];
    s.us0 = u->strides[0];
    geo_init(&s.inner, o->ndim - 1, o->shape + 1, o->strides + 1,
             u->strides + 1);
    s.up_contig = s.inner.nd == 1 && s.inner.ss[0] == 1;
    end = calloc((size_t)s.rows + 1, sizeof(int64_t));
    order = malloc((size_t)s.nidx * sizeof(int64_t));
    if (!end || !order) {
        scatter_serial(&s);
        goto out;
    }
    /* Counting sort of the updates by target row, stable. */
    for (int64_t i = 0; i < s.nidx; i++)
        end[idx_at(s.idx, s.idt, i * s.ist) + 1]++;
    for (int64_t r = 1; r <= s.rows; r++)
        end[r] += end[r - 1];
    for (int64_t i = 0; i < s.nidx; i++)
        order[end[idx_at(s.idx, s.idt, i * s.ist)]++] = i;
    /* end[r] is now the end of row r's bucket (and the start of r+1's). */
    s.end = end;
    s.order = order;
    {
        int64_t grain = KGRAIN / (s.inner.numel > 0 ? s.inner.numel : 1);
        cpu_parallel_for(s.rows, grain > 0 ? grain : 1, scatter_targets, &s);
    }
out:
    free(end);
    free(order);
}

/* A contiguous output (this kernel's layout), then the index values:
 * 0 <= i < rows. */
static keel_status scatter_check(const keel_kernel_args *a)
{
    const keel_tensor_desc *x = &a->inputs[0], *o = &a->outputs[0];

    if (!kcontig(o))
        return cpu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "scatter: the CPU kernel needs a contiguous output");
    return check_index(a, 1, x->shape[0], false, "scatter", 0);
}

KERNEL(k_scatter, "scatter", scatter_impl, scatter_check)

/* ---- tile ---------------------------------------------------------------- */

static void tile_impl(const struct kcall *k)
{
    const keel_tensor_desc *x = &k->a->inputs[0], *o = &k->a->outputs[0];
    int nd = o->ndim, es = keel_dtype_size(o->dtype);
    int64_t xs[KEEL_MAX_DIMS] = {0}, xst[KEEL_MAX_DIMS] = {0};
    int64_t reg[KEEL_MAX_DIMS];
    char *out = k->out[0];

    if (knumel(o) == 0)
        return;
    keel_kit_align_right(x, nd, xs, xst);
    nd_copy(out, o->strides, k->in[0], xst, nd, xs, es);
    /* Fill axis d by doubling the filled part; dims after d are full,
     * dims before d still hold only the corner. */
    memcpy(reg, xs, sizeof(reg));
    for (int d = nd - 1; d >= 0; d--) {
        int64_t m = xs[d];
        while (m < o->shape[d]) {
            int64_t c = o->shape[d] - m < m ? o->shape[d] - m : m;
            reg[d] = c;
            nd_copy(out + m * o->strides[d] * es, o->strides, out,
                    o->strides, nd, reg, es);
            m += c;
        }
        reg[d] = o->shape[d];
    }
}

KERNEL(k_tile, "tile", tile_impl, NULL)

/* ---- flip ---------------------------------------------------------------- */

static void flip_impl(const struct kcall *k)
{
    const keel_tensor_desc *x = &k->a->inputs[0], *o = &k->a->outputs[0];
    int es = keel_dtype_size(x->dtype);
    int64_t st[KEEL_MAX_DIMS];
    const char *src = k->in[0];
    /* The axes (in range: the kit's check of rule 'same'), as bits. */
    uint32_t mask = keel_kit_axes_bits(k->a, "axis", x->ndim);

    if (knumel(x) == 0)
        return;
    for (int d = 0; d < x->ndim; d++) {
        st[d] = x->strides[d];
        if (mask & (1u << d)) {
            src += (x->shape[d] - 1) * st[d] * es;
            st[d] = -st[d];
        }
    }
    nd_copy(k->out[0], o->strides, src, st, x->ndim, x->shape, es);
}

KERNEL(k_flip, "flip", flip_impl, NULL)

/* ---- pad ----------------------------------------------------------------- */

enum {
    PAD_CONSTANT = KEEL_KIT_PAD_CONSTANT,
    PAD_REFLECT = KEEL_KIT_PAD_REFLECT,
    PAD_REPLICATE = KEEL_KIT_PAD_REPLICATE
};

struct pad_job {
    const char *x;
    char *out;
    int es, nd, mode;
    bool x_empty;
    int64_t xshape[KEEL_MAX_DIMS], xst[KEEL_MAX_DIMS];
    int64_t oshape[KEEL_MAX_DIMS], ost[KEEL_MAX_DIMS];
    int64_t before[KEEL_MAX_DIMS], after[KEEL_MAX_DIMS];
    unsigned char pat[8];
};

/* Source index of padded position i (relative to the data's start) in a
 * dim of size n, or -1 for the constant. */
static int64_t pad_src(int64_t i, int64_t n, int mode)
{
    if (i >= 0 && i < n)
        return i;
    if (mode == PAD_CONSTANT)
        return -1;
    if (mode == PAD_REPLICATE)
        return i < 0 ? 0 : n - 1;
    return i < 0 ? -i : 2 * (n - 1) - i;
}

/* One output row (the last dim) from source row xr. */
static void pad_row(const struct pad_job *p, char *o, const char *xr)
{
    int last = p->nd - 1, es = p->es;
    int64_t os = p->ost[last], xs = p->xst[last], n = p->xshape[last];
    int64_t bf = p->before[last], af = p->after[last];
    char *tail = o + (bf + n) * os * es;

    copy_n(o + bf * os * es, os, xr, xs, n, es);
    switch (p->mode) {
    case PAD_CONSTANT:
        fill_n(o, os, p->pat, bf, es);
        fill_n(tail, os, p->pat, af, es);
        break;
    case PAD_REPLICATE:
        fill_n(o, os, xr, bf, es);
        fill_n(tail, os, xr + (n - 1) * xs * es, af, es);
        break;
    default: /* reflect: o[j] = x[bf - j], tail[t] = x[n - 2 - t] */
        if (bf)
            copy_n(o, os, xr + bf * xs * es, -xs, bf, es);
        if (af)
            copy_n(tail, os, xr + (n - 2) * xs * es, -xs, af, es);
        break;
    }
}

static void pad_rows(void *ctx, int64_t b, int64_t e)
{
    const struct pad_job *p = ctx;
    int last = p->nd - 1;

    for (int64_t r = b; r < e; r++) {
        int64_t rem = r, xoff = 0, ooff = 0;
        bool inside = !p->x_empty;
        for (int d = last - 1; d >= 0; d--) {
            int64_t q = rem % p->oshape[d], s;
            rem /= p->oshape[d];
            ooff += q * p->ost[d];
            s = pad_src(q - p->before[d], p->xshape[d], p->mode);
            if (s < 0)
                inside = false;
            else
                xoff += s * p->xst[d];
        }
        if (!inside)
            fill_n(p->out + ooff * p->es, p->ost[last], p->pat,
                   p->oshape[last], p->es);
        else
            pad_row(p, p->out + ooff * p->es, p->x + xoff * p->es);
    }
}

static void pad_impl(const struct kcall *k)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *x = &a->inputs[0], *o = &a->outputs[0];
    int64_t rows, grain;
    struct pad_job p;

    if (knumel(o) == 0)
        return;
    p.es = keel_dtype_size(o->dtype);
    if (o->ndim == 0) {
        memcpy(k->out[0], k->in[0], (size_t)p.es);
        return;
    }
    p.x = k->in[0];
    p.out = k->out[0];
    p.nd = o->ndim;
    p.mode = keel_kit_pad_mode(a);
    p.x_empty = knumel(x) == 0;
    for (int d = 0; d < p.nd; d++) {
        p.xshape[d] = x->shape[d];
        p.xst[d] = x->strides[d];
        p.oshape[d] = o->shape[d];
        p.ost[d] = o->strides[d];
    }
    keel_kit_pad_widths(a, p.nd, p.before, p.after);
    memset(p.pat, 0, sizeof(p.pat));
    kstore(p.pat, o->dtype, kattr_f(a, "value", 0.0));
    rows = knumel(o) / o->shape[p.nd - 1];
    grain = KGRAIN / o->shape[p.nd - 1];
    cpu_parallel_for(rows, grain > 0 ? grain : 1, pad_rows, &p);
}

KERNEL(k_pad, "pad", pad_impl, NULL)

/* ---- sort, argsort, topk ------------------------------------------------- */

struct kp_f {
    float k;
    int64_t i;
};
struct kp_d {
    double k;
    int64_t i;
};
struct kp_l {
    int64_t k;
    int64_t i;
};

/* Key orders: NaN is the largest value (last ascending, first
 * descending). */
#define F_ASC(a, b) ((a) < (b) || ((b) != (b) && (a) == (a)))
#define F_DESC(a, b) ((a) > (b) || ((a) != (a) && (b) == (b)))
#define I_ASC(a, b) ((a) < (b))
#define I_DESC(a, b) ((a) > (b))

/* Stable bottom-up merge sort of a[0, n) by LT, with tmp[n]. */
#define DEFINE_MSORT(NAME, PT, LT)                                           \
    static void NAME(PT *a, PT *tmp, int64_t n)                              \
    {                                                                        \
        enum { RUN = 16 };                                                   \
        PT *src = a, *dst = tmp, *sw;                                        \
        for (int64_t b = 0; b < n; b += RUN) {                               \
            int64_t e = b + RUN < n ? b + RUN : n;                           \
            for (int64_t i = b + 1; i < e; i++) {                            \
                PT v = a[i];                                                 \
                int64_t j = i;                                               \
                for (; j > b && LT(&v, &a[j - 1]); j--)                      \
                    a[j] = a[j - 1];                                         \
                a[j] = v;                                                    \
            }                                                                \
        }                                                                    \
        for (int64_t w = RUN; w < n; w *= 2) {                               \
            for (int64_t lo = 0; lo < n; lo += 2 * w) {                      \
                int64_t mid = lo + w < n ? lo + w : n;                       \
                int64_t hi = lo + 2 * w < n ? lo + 2 * w : n;                \
                int64_t i = lo, j = mid, o = lo;                             \
                while (i < mid && j < hi)                                    \
                    dst[o++] = LT(&src[j], &src[i]) ? src[j++] : src[i++];   \
                while (i < mid)                                              \
                    dst[o++] = src[i++];                                     \
                while (j < hi)                                               \
                    dst[o++] = src[j++];                                     \
            }                                                                \
            sw = src;                                                        \
            src = dst;                                                       \
            dst = sw;                                                        \
        }                                                                    \
        if (src != a)                                                        \
            memcpy(a, src, (size_t)n * sizeof(PT));                          \
    }

/* The k first elements of a[0, n) in LT order, into h[k] (unordered):
 * a heap whose root is the latest element kept. */
#define DEFINE_SELECT(NAME, PT, LT)                                          \
    static void NAME##_sift(PT *h, int64_t k, int64_t i)                     \
    {                                                                        \
        for (;;) {                                                           \
            int64_t l = 2 * i + 1, c = l;                                    \
            PT t;                                                            \
            if (l >= k)                                                      \
                return;                                                      \
            if (l + 1 < k && LT(&h[l], &h[l + 1]))                           \
                c = l + 1;                                                   \
            if (!LT(&h[i], &h[c]))                                           \
                return;                                                      \
            t = h[i];                                                        \
            h[i] = h[c];                                                     \
            h[c] = t;                                                        \
            i = c;                                                           \
        }                                                                    \
    }                                                                        \
    static void NAME(PT *h, int64_t k, const PT *a, int64_t n)               \
    {                                                                        \
        memcpy(h, a, (size_t)k * sizeof(PT));                                \
        for (int64_t i = k / 2 - 1; i >= 0; i--)                             \
            NAME##_sift(h, k, i);                                            \
        for (int64_t j = k; j < n; j++)                                      \
            if (LT(&a[j], &h[0])) {                                          \
                h[0] = a[j];                                                 \
                NAME##_sift(h, k, 0);                                        \
            }                                                                \
    }

/* Total orders: key order, then index. */
#define DEFINE_ORDER(S, PT, KEY_LT)                                          \
    static inline bool lt_##S(const PT *x, const PT *y)                      \
    {                                                                        \
        return KEY_LT(x->k, y->k) || (!KEY_LT(y->k, x->k) && x->i < y->i);   \
    }                                                                        \
    DEFINE_MSORT(msort_##S, PT, lt_##S)                                      \
    DEFINE_SELECT(select_##S, PT, lt_##S)

DEFINE_ORDER(f_asc, struct kp_f, F_ASC)
DEFINE_ORDER(f_desc, struct kp_f, F_DESC)
DEFINE_ORDER(d_asc, struct kp_d, F_ASC)
DEFINE_ORDER(d_desc, struct kp_d, F_DESC)
DEFINE_ORDER(l_asc, struct kp_l, I_ASC)
DEFINE_ORDER(l_desc, struct kp_l, I_DESC)

/* Index order (topk with sorted = 0). */
#define DEFINE_IDX_ORDER(S, PT)                                              \
    static inline bool lti_##S(const PT *x, const PT *y)                     \
    {                                                                        \
        return x->i < y->i;                                                  \
    }                                                                        \
    DEFINE_MSORT(msorti_##S, PT, lti_##S)

DEFINE_IDX_ORDER(f, struct kp_f)
DEFINE_IDX_ORDER(d, struct kp_d)
DEFINE_IDX_ORDER(l, struct kp_l)

struct sort_job {
    const char *x;
    char *ov;    /* values (NULL for argsort) */
    int64_t *oi; /* indices */
    keel_dtype dt;
    int es, nouter;
    bool desc, sorted;
    int64_t n, k;            /* row length, outputs per row */
    int64_t xs, ovs, ois;    /* strides along the axis (elements) */
    int64_t oshape[KEEL_MAX_DIMS];
    int64_t oxs[KEEL_MAX_DIMS], oovs[KEEL_MAX_DIMS], oois[KEEL_MAX_DIMS];
};

/* Row r's pointers (outer dims in row-major order). */
static void sort_row_ptrs(const struct sort_job *j, int64_t r,
                          const char **x, char **ov, int64_t **oi)
{
    int64_t xo = 0, vo = 0, io = 0;

    for (int d = j->nouter - 1; d >= 0; d--) {
        int64_t q = r % j->oshape[d];
        r /= j->oshape[d];
        xo += q * j->oxs[d];
        vo += q * j->oovs[d];
        io += q * j->oois[d];
    }
    *x = j->x + xo * j->es;
    *ov = j->ov ? j->ov + vo * j->es : NULL;
    *oi = j->oi + io;
}

/* Keys of one row. */
static void load_f(const struct sort_job *j, const char *x, struct kp_f *a)
{
    int64_t n = j->n, xs = j->xs;

    if (j->dt == KEEL_F32) {
        for (int64_t i = 0; i < n; i++) {
            a[i].k = ((const float *)x)[i * xs];
            a[i].i = i;
        }
        return;
    }
    for (int64_t b = 0; b < n; b += ACC_B) {
        uint16_t raw[ACC_B];
        float f[ACC_B];
        int64_t m = n - b < ACC_B ? n - b : ACC_B;
        copy_n((char *)raw, 1, x + b * xs * 2, xs, m, 2);
        if (j->dt == KEEL_F16)
            kf16_to_f32(raw, f, m);
        else
            kbf16_to_f32(raw, f, m);
        for (int64_t i = 0; i < m; i++) {
            a[b + i].k = f[i];
            a[b + i].i = b + i;
        }
    }
}

static void load_d(const struct sort_job *j, const char *x, struct kp_d *a)
{
    for (int64_t i = 0; i < j->n; i++) {
        a[i].k = ((const double *)x)[i * j->xs];
        a[i].i = i;
    }
}

static void load_l(const struct sort_job *j, const char *x, struct kp_l *a)
{
    int64_t n = j->n, xs = j->xs;

#define LOAD_L(T)                                                            \
    for (int64_t i = 0; i < n; i++) {                                        \
        a[i].k = ((const T *)x)[i * xs];                                     \
        a[i].i = i;                                                          \
    }
    switch (j->dt) {
    case KEEL_I8:
        LOAD_L(int8_t);
        break;
    case KEEL_I32:
        LOAD_L(int32_t);
        break;
    case KEEL_I64:
        LOAD_L(int64_t);
        break;
    default:
        LOAD_L(uint8_t);
        break;
    }
#undef LOAD_L
}

/* Outputs of one row from the first k ordered pairs. */
#define WRITE_ROW(j, x, ov, oi, res)                                         \
    do {                                                                     \
        for (int64_t q = 0; q < (j)->k; q++)                                 \
            (oi)[q * (j)->ois] = (res)[q].i;                                 \
        if (ov) {                                                            \
            int64_t vs_ = (j)->ovs, xs_ = (j)->xs;                           \
            switch ((j)->es) {                                               \
            case 1:                                                          \
                WRITE_VALS(uint8_t, j, x, ov, res, vs_, xs_);                \
                break;                                                       \
            case 2:                                                          \
                WRITE_VALS(ku16, j, x, ov, res, vs_, xs_);                   \
                break;                                                       \
            case 4:                                                          \
                WRITE_VALS(ku32, j, x, ov, res, vs_, xs_);                   \
                break;                                                       \
            default:                                                         \
                WRITE_VALS(ku64, j, x, ov, res, vs_, xs_);                   \
                break;                                                       \
            }                                                                \
        }                                                                    \
    } while (0)
#define WRITE_VALS(T, j, x, ov, res, vs, xs)                                 \
    for (int64_t q = 0; q < (j)->k; q++)                                     \
    ((T *)(ov))[q * (vs)] = ((const T *)(x))[(res)[q].i * (xs)]

static void sort_rows_slow(const struct sort_job *j, int64_t b, int64_t e);

#define SORT_STACK 256

/* Rows [b, e) for key type S (pairs PT): load, order, write. */
#define DEFINE_ROWS(S, PT)                                                   \
    static void rows_##S(void *ctx, int64_t b, int64_t e)                    \
    {                                                                        \
        const struct sort_job *j = ctx;                                      \
        int64_t n = j->n, k = j->k;                                          \
        PT stackbuf[2 * SORT_STACK], *a = stackbuf, *t, *res;                \
        if (n > SORT_STACK) {                                                \
            a = malloc((size_t)n * 2 * sizeof(PT));                          \
            if (!a) {                                                        \
                sort_rows_slow(j, b, e);                                     \
                return;                                                      \
            }                                                                \
        }                                                                    \
        t = a + n;                                                           \
        for (int64_t r = b; r < e; r++) {                                    \
            const char *x;                                                   \
            char *ov;                                                        \
            int64_t *oi;                                                     \
            sort_row_ptrs(j, r, &x, &ov, &oi);                               \
            load_##S(j, x, a);                                               \
            if (k < n && k * 8 <= n) {                                       \
                /* Select into t, then order t (a is free as tmp). */        \
                if (j->desc) {                                               \
                    select_##S##_desc(t, k, a, n);                           \
                    msort_##S##_desc(t, a, k);                               \
                } else {                                                     \
                    select_##S##_asc(t, k, a, n);                            \
                    msort_##S##_asc(t, a, k);                                \
                }                                                            \
                res = t;                                                     \
            } else {                                                         \
                if (j->desc)                                                 \
                    msort_##S##_desc(a, t, n);                               \
                else                                                         \
                    msort_##S##_asc(a, t, n);                                \
                res = a;                                                     \
            }                                                                \
            if (!j->sorted)                                                  \
                msorti_##S(res, res == a ? t : a, k);                        \
            WRITE_ROW(j, x, ov, oi, res);                                    \
        }                                                                    \
        if (a != stackbuf)                                                   \
            free(a);                                                         \
    }

DEFINE_ROWS(f, struct kp_f)
DEFINE_ROWS(d, struct kp_d)
DEFINE_ROWS(l, struct kp_l)

/* Without scratch memory: selection by repeated scans, O(n k) per row. */
static bool slow_before(const struct sort_job *j, const char *x, int64_t p,
                        int64_t q)
{
    const char *a = x + p * j->xs * j->es, *b = x + q * j->xs * j->es;
    bool pq, qp;

    if (j->dt == KEEL_F32 || j->dt == KEEL_F64 || j->dt == KEEL_F16 ||
        j->dt == KEEL_BF16) {
        double u = kload(a, j->dt), v = kload(b, j->dt);
        pq = j->desc ? F_DESC(u, v) : F_ASC(u, v);
        qp = j->desc ? F_DESC(v, u) : F_ASC(v, u);
    } else {
        int64_t u = kload_i(a, j->dt), v = kload_i(b, j->dt);
        pq = j->desc ? u > v : u < v;
        qp = j->desc ? v > u : v < u;
    }
    return pq || (!qp && p < q);
}

static void sort_rows_slow(const struct sort_job *j, int64_t b, int64_t e)
{
    for (int64_t r = b; r < e; r++) {
        const char *x;
        char *ov;
        int64_t *oi, prev = -1;
        sort_row_ptrs(j, r, &x, &ov, &oi);
        for (int64_t t = 0; t < j->k; t++) {
            int64_t best = -1;
            for (int64_t q = 0; q < j->n; q++) {
                if (prev >= 0 && !slow_before(j, x, prev, q))
                    continue;
                if (best < 0 || slow_before(j, x, q, best))
                    best = q;
            }
            oi[t * j->ois] = prev = best;
        }
        if (!j->sorted) /* insertion sort of the indices */
            for (int64_t t = 1; t < j->k; t++) {
                int64_t v = oi[t * j->ois], s = t;
                for (; s > 0 && oi[(s - 1) * j->ois] > v; s--)
                    oi[s * j->ois] = oi[(s - 1) * j->ois];
                oi[s * j->ois] = v;
            }
        for (int64_t t = 0; ov && t < j->k; t++)
            memcpy(ov + t * j->ovs * j->es,
                   x + oi[t * j->ois] * j->xs * j->es, (size_t)j->es);
    }
}

/* values: output 0 or NULL; indices: output vi. */
static void sort_common(const struct kcall *k, int vi, bool desc, bool sorted,
                        int64_t kk)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *x = &a->inputs[0], *io = &a->outputs[vi];
    const keel_tensor_desc *vo = vi ? &a->outputs[0] : NULL;
    int64_t n, rows, grain;
    int axis = keel_kit_sort_axis(a, x, &n);
    struct sort_job j;
    kpar_fn fn;

    if (knumel(x) == 0 || kk == 0)
        return;
    j.x = k->in[0];
    j.ov = vo ? k->out[0] : NULL;
    j.oi = k->out[vi];
    j.dt = x->dtype;
    j.es = keel_dtype_size(x->dtype);
    j.desc = desc;
    j.sorted = sorted;
    j.k = kk;
    j.n = n;
    j.xs = x->ndim ? x->strides[axis] : 1;
    j.ovs = vo && x->ndim ? vo->strides[axis] : 1;
    j.ois = x->ndim ? io->strides[axis] : 1;
    j.nouter = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (d == axis)
            continue;
        j.oshape[j.nouter] = x->shape[d];
        j.oxs[j.nouter] = x->strides[d];
        j.oovs[j.nouter] = vo ? vo->strides[d] : 0;
        j.oois[j.nouter] = io->strides[d];
        j.nouter++;
    }
    rows = knumel(x) / j.n;
    switch (x->dtype) {
    case KEEL_F32:
    case KEEL_F16:
    case KEEL_BF16:
        fn = rows_f;
        break;
    case KEEL_F64:
        fn = rows_d;
        break;
    default:
        fn = rows_l;
        break;
    }
    /* A row costs about n log n; share rows of at least ~KGRAIN/4. */
    grain = KGRAIN / (4 * j.n);
    cpu_parallel_for(rows, grain > 0 ? grain : 1, fn, &j);
}

/* Length along the sort axis: sort and argsort keep all of it. */
static int64_t axis_len(const keel_kernel_args *a)
{
    int64_t n;

    keel_kit_sort_axis(a, &a->inputs[0], &n);
    return n;
}

static void sort_impl(const struct kcall *k)
{
    sort_common(k, 1, kattr_i(k->a, "descending", 0) != 0, true,
                axis_len(k->a));
}

static void argsort_impl(const struct kcall *k)
{
    sort_common(k, 0, kattr_i(k->a, "descending", 0) != 0, true,
                axis_len(k->a));
}

static void topk_impl(const struct kcall *k)
{
    sort_common(k, 1, kattr_i(k->a, "largest", 1) != 0,
                kattr_i(k->a, "sorted", 1) != 0, kattr_i(k->a, "k", 1));
}

KERNEL(k_sort, "sort", sort_impl, NULL)
KERNEL(k_argsort, "argsort", argsort_impl, NULL)
KERNEL(k_topk, "topk", topk_impl, NULL)

/* ---- registration -------------------------------------------------------- */

const struct cpu_kernel_entry cpu_kernels_manip[] = {
    {"concat", KEEL_DT_ALL, k_concat},
    {"stack", KEEL_DT_ALL, k_stack},
    {"split", KEEL_DT_ALL, k_split},
    {"gather", KEEL_DT_ALL, k_gather},
    {"index_select", KEEL_DT_ALL, k_index_select},
    {"scatter", KEEL_DT_ALL, k_scatter},
    {"take_along_axis", KEEL_DT_ALL, k_take_along_axis},
    {"tile", KEEL_DT_ALL, k_tile},
    {"flip", KEEL_DT_ALL, k_flip},
    {"pad", KEEL_DT_ALL, k_pad},
    {"topk", KEEL_DT_NUMERIC, k_topk},
    {"sort", KEEL_DT_NUMERIC, k_sort},
    {"argsort", KEEL_DT_NUMERIC, k_argsort},
    {NULL, 0, NULL},
};
