/*
 * keel CUDA plugin — shape and indexing kernels: concat, stack, split,
 * gather, index_select, scatter, take_along_axis, tile, flip, pad, topk,
 * sort and argsort.
 *
 * DESIGN
 *
 * Everything except sort/topk moves elements without looking at their
 * values, so those kernels work on element sizes (1, 2, 4 or 8 bytes) and
 * one instantiation serves every dtype of that size.
 *
 *   concat/stack/split/flip  one strided copy per part between the part and
 *                   its view of the whole (flip: a view of x with negated
 *                   strides), through ck_iter (dims merged; a dense pair
 *                   becomes one cudaMemcpyAsync)
 *   gather, index_select, take_along_axis, tile, pad
 *                   one thread per output element (grid-stride) turns the
 *                   element's coordinates into the source offset
 *   scatter         the index is sorted by target row on the device
 *                   (stable radix sort of (row, position) pairs), each row's
 *                   bucket is found by binary search, then one thread per
 *                   output element either copies x (row not targeted), the
 *                   last update (overwrite) or sums the row's updates in
 *                   index order (float for f16/bf16/f32, double for f64,
 *                   int64 wrapping for integers, OR for bool), as the CPU
 *                   kernel does
 *   sort/argsort/topk  each row is loaded into a contiguous [rows, n]
 *                   buffer of radix keys (see sort_key) and positions, sorted
 *                   by the radix sort of ck_sort.cuh (one row, else
 *                   DeviceSegmentedRadixSort), and the first k positions
 *                   of each row are written out with the values copied from
 *                   x (bit-exact). topk with sorted=0 sorts the k selected
 *                   positions of each row once more.
 *
 * Index values cannot be checked on the host without waiting for the
 * device, so they are checked per element instead: gather, index_select
 * and take_along_axis write zero bits for an out-of-range index, scatter
 * ignores updates whose index is out of range. (The CPU kernel rejects
 * such an index with INVALID_ARGUMENT.)
 */
#include <string.h>


#include "ck.cuh"
#include "ck_sort.cuh"

namespace {

#define MP_MAX_PARTS 128

/* Run STMT with U bound to an unsigned type of `es` bytes. */
#define MP_SWITCH_SIZE(es, U, STMT)                                          \
    switch (es) {                                                            \
    case 1: {                                                                \
        typedef uint8_t U;                                                   \
        STMT;                                                                \
    } break;                                                                 \
    case 2: {                                                                \
        typedef uint16_t U;                                                  \
        STMT;                                                                \
    } break;                                                                 \
    case 4: {                                                                \
        typedef uint32_t U;                                                  \
        STMT;                                                                \
    } break;                                                                 \
    default: {                                                               \
        typedef uint64_t U;                                                  \
        STMT;                                                                \
    } break;                                                                 \
    }

#define BAD(...) ck_fail(KEEL_STATUS_INVALID_ARGUMENT, __VA_ARGS__)

/* ---- argument checks -----------------------------------------------------
 *
 * keel_kit_check (run by ck_begin) has checked operand counts, dtypes
 * (int32 or int64 indices included), axes, attributes and every output
 * shape; what is left here is this plugin's own limit on the parts.
 */

/* concat, stack and split handle at most MP_MAX_PARTS parts. */
keel_status parts_limit(int n, const char *op)
{
    if (n > MP_MAX_PARTS)
        return BAD("%s: %d parts, the CUDA kernel takes at most %d", op, n,
                   MP_MAX_PARTS);
    return KEEL_STATUS_OK;
}

/* ---- launching helpers --------------------------------------------------- */

#define MP_LOOP(i, n)                                                        \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;         \
         i < (n); i += (int64_t)blockDim.x * gridDim.x)

/* Grid for a grid-stride loop over n > 0 items. */
#define MP_GRID(n) ck_grid((n), CK_BLOCK), CK_BLOCK, 0, l->stream

/* Index element at element offset `off` (int32 or int64). */
__device__ __forceinline__ int64_t idx_at(const void *p, bool i32,
                                          int64_t off)
{
    return i32 ? (int64_t)((const int32_t *)p)[off]
               : ((const int64_t *)p)[off];
}

/* ---- strided copies (concat, stack, split, flip) ------------------------- */

template <class U> struct raw_copy {
    __device__ void operator()(char *const *p, int64_t) const
    {
        *(U *)p[0] = *(const U *)p[1];
    }
};

/*
 * dst = src, where both describe `src->ndim` dims of src's shape (dst's
 * shape is ignored; its strides and data are used).
 */
keel_status view_copy(const struct ck_launch *l, const keel_tensor_desc *dst,
                      const keel_tensor_desc *src)
{
    keel_tensor_desc v = *dst;
    const keel_tensor_desc *d[2] = {&v, src};
    ck_iter<2> it;

    v.ndim = src->ndim;
    for (int k = 0; k < src->ndim; k++)
        v.shape[k] = src->shape[k];
    ck_iter_make<2>(&it, d);
    if (it.numel <= 0)
        return KEEL_STATUS_OK;
    if (it.contig)
        return ck_check(cudaMemcpyAsync(it.base[0], it.base[1],
                                        (size_t)(it.numel * it.esize[0]),
                                        cudaMemcpyDeviceToDevice, l->stream),
                        l, "cudaMemcpyAsync");
    MP_SWITCH_SIZE(it.esize[0], U, ck_for_each<2>(l, it, raw_copy<U>()))
    return KEEL_STATUS_OK;
}

/* d's data moved by `elems` elements (may be negative). */
keel_dptr shifted(const keel_tensor_desc *d, int64_t elems)
{
    return d->data +
           (keel_dptr)(elems * (int64_t)keel_dtype_size(d->dtype));
}

/* ---- concat, stack, split ------------------------------------------------ */

keel_status k_concat(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "concat", &l);

    if (st || (st = parts_limit(a->num_inputs, "concat")))
        return st;
    const keel_tensor_desc *o = &a->outputs[0];
    int axis = ck_axis(ck_attr_i(a, "axis", 0), o->ndim);
    int64_t at = 0;

    if (ck_numel(o) == 0)
        return KEEL_STATUS_OK;
    for (int i = 0; i < a->num_inputs; i++) {
        const keel_tensor_desc *x = &a->inputs[i];
        keel_tensor_desc v = *o;

        v.data = shifted(o, at * o->strides[axis]);
        if ((st = view_copy(&l, &v, x)))
            return st;
        at += x->shape[axis];
    }
    return ck_end(&l);
}

keel_status k_stack(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "stack", &l);

    if (st || (st = parts_limit(a->num_inputs, "stack")))
        return st;
    const keel_tensor_desc *o = &a->outputs[0];
    int axis = ck_axis(ck_attr_i(a, "axis", 0), o->ndim);

    if (ck_numel(o) == 0)
        return KEEL_STATUS_OK;
    for (int i = 0; i < a->num_inputs; i++) {
        keel_tensor_desc v = *o;

        /* The output without `axis`, at index i along it. */
        v.data = shifted(o, i * o->strides[axis]);
        for (int d = 0, s = 0; d < o->ndim; d++)
            if (d != axis)
                v.strides[s++] = o->strides[d];
        if ((st = view_copy(&l, &v, &a->inputs[i])))
            return st;
    }
    return ck_end(&l);
}

keel_status k_split(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "split", &l);

    if (st || (st = parts_limit(a->num_outputs, "split")))
        return st;
    const keel_tensor_desc *x = &a->inputs[0];
    int axis = ck_axis(ck_attr_i(a, "axis", 0), x->ndim);
    int64_t at = 0;

    if (ck_numel(x) == 0)
        return KEEL_STATUS_OK;
    for (int i = 0; i < a->num_outputs; i++) {
        const keel_tensor_desc *o = &a->outputs[i];
        keel_tensor_desc v = *x;

        v.data = shifted(x, at * x->strides[axis]);
        for (int d = 0; d < x->ndim; d++)
            v.shape[d] = o->shape[d];
        if ((st = view_copy(&l, o, &v)))
            return st;
        at += o->shape[axis];
    }
    return ck_end(&l);
}

/* ---- flip ---------------------------------------------------------------- */

keel_status k_flip(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "flip", &l);

    if (st)
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *o = &a->outputs[0];
    /* The axes (in range: the kit's check of rule 'same'); a repeated
     * one flips once. */
    uint32_t mask = keel_kit_axes_bits(a, "axis", x->ndim);
    if (ck_numel(x) == 0)
        return KEEL_STATUS_OK;
    /* x seen from its far end along each flipped dim. */
    keel_tensor_desc v = *x;
    int64_t off = 0;
    for (int d = 0; d < x->ndim; d++)
        if (mask & (1u << d)) {
            off += (x->shape[d] - 1) * x->strides[d];
            v.strides[d] = -x->strides[d];
        }
    v.data = shifted(x, off);
    if ((st = view_copy(&l, o, &v)))
        return st;
    return ck_end(&l);
}

/* ---- per-element gathers: gather, index_select, take_along_axis ---------- */

/*
 * One geometry for the three: the output's index space `shape` (nd dims),
 * its strides `os`, x's strides `xs` and the index's strides `is`, all in
 * elements. Along `axis` the source position comes from the index (read
 * at sum(coord * is)); other dims use the output coordinate in x.
 */
struct take_geo {
    int nd, axis;
    bool i32, wrap; /* index dtype; negative indices count from the end */
    int64_t size;   /* x's length along axis */
    int64_t shape[KEEL_MAX_DIMS];
    int64_t os[KEEL_MAX_DIMS], xs[KEEL_MAX_DIMS], is[KEEL_MAX_DIMS];
};

template <class U>
__global__ void take_kernel(take_geo g, int64_t n, U *out, const U *x,
                            const void *idx)
{
    MP_LOOP(i, n)
    {
        int64_t r = i, oo = 0, xo = 0, io = 0;

        for (int d = g.nd - 1; d >= 0; d--) {
            int64_t q = r % g.shape[d];
            r /= g.shape[d];
            oo += q * g.os[d];
            io += q * g.is[d];
            if (d != g.axis)
                xo += q * g.xs[d];
        }
        int64_t v = idx_at(idx, g.i32, io);
        if (g.wrap && v < 0)
            v += g.size;
        /* Out of range: zero bits (the host cannot check it in time). */
        out[oo] = v >= 0 && v < g.size ? x[xo + v * g.xs[g.axis]] : (U)0;
    }
}

keel_status take_launch(const struct ck_launch *l, const take_geo &g,
                        const keel_tensor_desc *o, const keel_tensor_desc *x,
                        const keel_tensor_desc *ix)
{
    int64_t n = keel_kit_prod(g.shape, 0, g.nd);

    if (n <= 0)
        return KEEL_STATUS_OK;
    MP_SWITCH_SIZE(keel_dtype_size(o->dtype), U,
                   (take_kernel<U><<<MP_GRID(n)>>>(
                       g, n, (U *)(uintptr_t)o->data,
                       (const U *)(uintptr_t)x->data,
                       (const void *)(uintptr_t)ix->data)))
    return ck_end(l);
}

keel_status gather_common(const keel_kernel_args *a, const char *op)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, op, &l);

    if (st)
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *ix = &a->inputs[1];
    const keel_tensor_desc *o = &a->outputs[0];
    int axis = ck_axis(ck_attr_i(a, "axis", 0), x->ndim);
    if (ck_numel(o) == 0)
        return KEEL_STATUS_OK;

    /* The output as x's dims with the index's length along axis; an
     * output without the axis (index of length 1) has stride 0 there. */
    keel_tensor_desc v;
    take_geo g;
    keel_kit_gather_out(a, axis, &v);
    g.nd = x->ndim;
    g.axis = axis;
    g.i32 = ix->dtype == KEEL_I32;
    g.wrap = false;
    g.size = x->shape[axis];
    for (int d = 0; d < x->ndim; d++) {
        g.shape[d] = v.shape[d];
        g.os[d] = v.strides[d];
        g.xs[d] = x->strides[d];
        g.is[d] = d == axis ? ix->strides[0] : 0;
    }
    return take_launch(&l, g, o, x, ix);
}

keel_status k_gather(void *, const keel_kernel_args *a)
{
    return gather_common(a, "gather");
}

keel_status k_index_select(void *, const keel_kernel_args *a)
{
    return gather_common(a, "index_select");
}

keel_status k_take_along_axis(void *, const keel_kernel_args *a)
{
    const char *op = "take_along_axis";
    struct ck_launch l;
    keel_status st = ck_begin(a, op, &l);

    if (st)
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *ix = &a->inputs[1];
    const keel_tensor_desc *o = &a->outputs[0];
    int axis = ck_axis(ck_attr_i(a, "axis", 0), x->ndim);
    if (ck_numel(o) == 0)
        return KEEL_STATUS_OK;

    take_geo g;
    g.nd = o->ndim;
    g.axis = axis;
    g.i32 = ix->dtype == KEEL_I32;
    g.wrap = true;
    g.size = x->shape[axis];
    for (int d = 0; d < o->ndim; d++) {
        g.shape[d] = o->shape[d];
        g.os[d] = o->strides[d];
        g.xs[d] = x->strides[d];
        g.is[d] = ix->strides[d];
    }
    return take_launch(&l, g, o, x, ix);
}

/* ---- tile ---------------------------------------------------------------- */

struct tile_geo {
    int nd;
    int64_t oshape[KEEL_MAX_DIMS], os[KEEL_MAX_DIMS];
    int64_t xshape[KEEL_MAX_DIMS], xs[KEEL_MAX_DIMS]; /* right-aligned */
};

/* out[c] = x[c mod xshape], dim by dim. */
template <class U>
__global__ void tile_kernel(tile_geo g, int64_t n, U *out, const U *x)
{
    MP_LOOP(i, n)
    {
        int64_t r = i, oo = 0, xo = 0;

        for (int d = g.nd - 1; d >= 0; d--) {
            int64_t q = r % g.oshape[d];
            r /= g.oshape[d];
            oo += q * g.os[d];
            xo += (q % g.xshape[d]) * g.xs[d];
        }
        out[oo] = x[xo];
    }
}

keel_status k_tile(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "tile", &l);

    if (st)
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *o = &a->outputs[0];
    tile_geo g;
    g.nd = o->ndim;
    keel_kit_align_right(x, o->ndim, g.xshape, g.xs);
    for (int d = 0; d < o->ndim; d++) {
        g.oshape[d] = o->shape[d];
        g.os[d] = o->strides[d];
    }
    int64_t n = ck_numel(o);
    if (n == 0)
        return KEEL_STATUS_OK;
    /* n > 0 implies every x dim is > 0 (o dim = x dim * r). */
    MP_SWITCH_SIZE(keel_dtype_size(o->dtype), U,
                   (tile_kernel<U><<<ck_grid(n, CK_BLOCK), CK_BLOCK, 0,
                                     l.stream>>>(
                       g, n, (U *)(uintptr_t)o->data,
                       (const U *)(uintptr_t)x->data)))
    return ck_end(&l);
}

/* ---- pad ----------------------------------------------------------------- */

enum {
    PAD_CONSTANT = KEEL_KIT_PAD_CONSTANT,
    PAD_REFLECT = KEEL_KIT_PAD_REFLECT,
    PAD_REPLICATE = KEEL_KIT_PAD_REPLICATE
};

struct pad_geo {
    int nd, mode;
    int64_t oshape[KEEL_MAX_DIMS], os[KEEL_MAX_DIMS];
    int64_t xshape[KEEL_MAX_DIMS], xs[KEEL_MAX_DIMS];
    int64_t before[KEEL_MAX_DIMS];
};

/* Source index of padded position i (relative to the data's start) in a
 * dim of size n, or -1 for the constant. Reflect never repeats the edge:
 * x[-1] is x[1], x[n] is x[n - 2]. */
__device__ __forceinline__ int64_t pad_src(int64_t i, int64_t n, int mode)
{
    if (i >= 0 && i < n)
        return i;
    if (mode == PAD_CONSTANT)
        return -1;
    if (mode == PAD_REPLICATE)
        return i < 0 ? 0 : n - 1;
    return i < 0 ? -i : 2 * (n - 1) - i;
}

template <class U>
__global__ void pad_kernel(pad_geo g, int64_t n, U *out, const U *x, U pat)
{
    MP_LOOP(i, n)
    {
        int64_t r = i, oo = 0, xo = 0;
        bool inside = true;

        for (int d = g.nd - 1; d >= 0; d--) {
            int64_t q = r % g.oshape[d], s;
            r /= g.oshape[d];
            oo += q * g.os[d];
            s = pad_src(q - g.before[d], g.xshape[d], g.mode);
            if (s < 0)
                inside = false;
            else
                xo += s * g.xs[d];
        }
        out[oo] = inside ? x[xo] : pat;
    }
}

/* The constant as dtype dt's bits, converted as the CPU plugin does
 * (through float for f16/bf16; integers saturate, NaN gives 0). */
uint64_t pad_pattern(keel_dtype dt, double v)
{
    union {
        uint64_t u;
        float f;
        double d;
        ck_half h;
        ck_bf16 b;
        int8_t i8;
        uint8_t u8;
        int32_t i32;
        int64_t i64;
    } p;
    double lo = 0, hi = 0;

    p.u = 0;
    switch (dt) {
    case KEEL_F32: p.f = (float)v; return p.u;
    case KEEL_F64: p.d = v; return p.u;
    case KEEL_F16: p.h = ck_f2h((float)v); return p.u;
    case KEEL_BF16: p.b = ck_f2bf((float)v); return p.u;
    case KEEL_BOOL: p.u8 = v != 0; return p.u;
    case KEEL_I8: lo = -128; hi = 127; break;
    case KEEL_U8: lo = 0; hi = 255; break;
    case KEEL_I32: lo = -2147483648.0; hi = 2147483647.0; break;
    default: lo = -9223372036854775808.0; hi = 9223372036854774784.0; break;
    }
    int64_t s = v != v ? 0 : v <= lo ? (int64_t)lo
                         : v >= hi   ? (int64_t)hi
                                     : (int64_t)v;
    switch (dt) {
    case KEEL_I8: p.i8 = (int8_t)s; break;
    case KEEL_U8: p.u8 = (uint8_t)s; break;
    case KEEL_I32: p.i32 = (int32_t)s; break;
    default: p.i64 = s; break;
    }
    return p.u;
}

keel_status k_pad(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "pad", &l);

    if (st)
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *o = &a->outputs[0];
    int64_t after[KEEL_MAX_DIMS];
    pad_geo g;
    g.nd = o->ndim;
    g.mode = keel_kit_pad_mode(a);
    keel_kit_pad_widths(a, x->ndim, g.before, after);
    for (int d = 0; d < x->ndim; d++) {
        g.oshape[d] = o->shape[d];
        g.os[d] = o->strides[d];
        g.xshape[d] = x->shape[d];
        g.xs[d] = x->strides[d];
    }
    int64_t n = ck_numel(o);
    if (n == 0)
        return KEEL_STATUS_OK;
    /* An empty x only yields constants (pad_src is -1 in a 0-size dim). */
    uint64_t pat = pad_pattern(o->dtype, ck_attr_f(a, "value", 0.0));
    MP_SWITCH_SIZE(keel_dtype_size(o->dtype), U,
                   (pad_kernel<U><<<ck_grid(n, CK_BLOCK), CK_BLOCK, 0,
                                    l.stream>>>(
                       g, n, (U *)(uintptr_t)o->data,
                       (const U *)(uintptr_t)x->data, (U)pat)))
    return ck_end(&l);
}

/* ---- scatter ------------------------------------------------------------- */

/* Accumulator of a storage type: float / double / int64 (wrapping). */
template <class T> struct sacc {
    typedef int64_t A;
    static __device__ __forceinline__ A add(A s, T v)
    {
        return (int64_t)((uint64_t)s + (uint64_t)(int64_t)v);
    }
    static __device__ __forceinline__ T out(A s) { return (T)s; }
};
template <> struct sacc<bool> {
    typedef int64_t A;
    static __device__ __forceinline__ A add(A s, bool v)
    {
        return s + (v ? 1 : 0);
    }
    static __device__ __forceinline__ bool out(A s) { return s != 0; }
};
template <> struct sacc<float> {
    typedef float A;
    static __device__ __forceinline__ A add(A s, float v) { return s + v; }
    static __device__ __forceinline__ float out(A s) { return s; }
};
template <> struct sacc<double> {
    typedef double A;
    static __device__ __forceinline__ A add(A s, double v) { return s + v; }
    static __device__ __forceinline__ double out(A s) { return s; }
};
template <> struct sacc<ck_half> {
    typedef float A;
    static __device__ __forceinline__ A add(A s, ck_half v)
    {
        return s + ck_h2f(v);
    }
    static __device__ __forceinline__ ck_half out(A s)
    {
        return ck_f2h(s);
    }
};
template <> struct sacc<ck_bf16> {
    typedef float A;
    static __device__ __forceinline__ A add(A s, ck_bf16 v)
    {
        return s + ck_bf2f(v);
    }
    static __device__ __forceinline__ ck_bf16 out(A s)
    {
        return ck_f2bf(s);
    }
};

/* keys[i] = target row of update i (rows when out of range), pos[i] = i. */
__global__ void scatter_keys(const void *idx, bool i32, int64_t ist,
                             int64_t nidx, int64_t rows, uint64_t *keys,
                             uint64_t *pos)
{
    MP_LOOP(i, nidx)
    {
        int64_t v = idx_at(idx, i32, i * ist);

        keys[i] = v >= 0 && v < rows ? (uint64_t)v : (uint64_t)rows;
        pos[i] = (uint64_t)i;
    }
}

/* start[r] = first i with keys[i] >= r, r in [0, rows]: row r's updates
 * are pos[start[r] .. start[r + 1]). keys is sorted. */
__global__ void scatter_bounds(const uint64_t *keys, int64_t nidx,
                               int64_t rows, int64_t *start)
{
    MP_LOOP(r, rows + 1)
    {
        int64_t lo = 0, hi = nidx;

        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (keys[mid] < (uint64_t)r)
                lo = mid + 1;
            else
                hi = mid;
        }
        start[r] = lo;
    }
}

struct scatter_geo {
    int nd;
    bool overwrite;
    int64_t shape[KEEL_MAX_DIMS]; /* the output's */
    int64_t os[KEEL_MAX_DIMS], xs[KEEL_MAX_DIMS], us[KEEL_MAX_DIMS];
};

/* One thread per output element; start == NULL: no updates at all. */
template <class T>
__global__ void scatter_kernel(scatter_geo g, int64_t n, T *out,
                               const T *x, const T *up,
                               const int64_t *start, const uint64_t *pos)
{
    MP_LOOP(i, n)
    {
        int64_t rem = i, oo = 0, xo = 0, uo = 0, row = 0;

        for (int d = g.nd - 1; d >= 0; d--) {
            int64_t q = rem % g.shape[d];
            rem /= g.shape[d];
            oo += q * g.os[d];
            xo += q * g.xs[d];
            if (d)
                uo += q * g.us[d];
            else
                row = q;
        }
        int64_t lo = start ? start[row] : 0;
        int64_t hi = start ? start[row + 1] : 0;
        if (lo == hi) {
            out[oo] = x[xo];
        } else if (g.overwrite) {
            out[oo] = up[(int64_t)pos[hi - 1] * g.us[0] + uo];
        } else {
            /* The row's updates summed in index order from zero. */
            typename sacc<T>::A s = 0;
            for (int64_t c = lo; c < hi; c++)
                s = sacc<T>::add(s, up[(int64_t)pos[c] * g.us[0] + uo]);
            out[oo] = sacc<T>::out(s);
        }
    }
}

/* Bits needed for values in [0, v]. */
int bits_for(uint64_t v)
{
    int b = 1;

    while (b < 64 && (v >> b))
        b++;
    return b;
}

keel_status k_scatter(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "scatter", &l);

    if (st)
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *ix = &a->inputs[1];
    const keel_tensor_desc *u = &a->inputs[2], *o = &a->outputs[0];
    int64_t n = ck_numel(o), nidx = ix->shape[0], rows = o->shape[0];
    if (n == 0)
        return KEEL_STATUS_OK;

    scatter_geo g;
    g.nd = o->ndim;
    g.overwrite = ck_attr_i(a, "overwrite", 1) != 0;
    for (int d = 0; d < o->ndim; d++) {
        g.shape[d] = o->shape[d];
        g.os[d] = o->strides[d];
        g.xs[d] = x->strides[d];
        g.us[d] = u->strides[d];
    }

    /* Scratch: keys and positions (in and sorted), row starts, cub's. */
    void *mem = NULL, *tmp = NULL;
    uint64_t *k_in = NULL, *k_out = NULL, *p_in = NULL, *p_out = NULL;
    int64_t *start = NULL;
    int bits = bits_for((uint64_t)rows);
    if (nidx > 0) {
        size_t tbytes = 0;
        size_t nb = (size_t)nidx * sizeof(uint64_t);
        if ((st = ck_check(cks::sort_pairs(
                               NULL, tbytes, k_in, k_out, p_in, p_out, nidx,
                               0, bits, l.stream),
                           &l, "radix sort (size query)")))
            return st;
        size_t rb = (size_t)(rows + 1) * sizeof(int64_t);
        size_t total = 4 * nb + rb + tbytes + 256;
        if ((st = ck_scratch(&l, total, &mem)))
            return st;
        char *p = (char *)mem;
        k_in = (uint64_t *)p;
        k_out = (uint64_t *)(p + nb);
        p_in = (uint64_t *)(p + 2 * nb);
        p_out = (uint64_t *)(p + 3 * nb);
        start = (int64_t *)(p + 4 * nb);
        /* the sort.s storage 256-byte aligned after the row starts. */
        size_t toff = (4 * nb + rb + 255) & ~(size_t)255;
        tmp = p + toff;
        scatter_keys<<<ck_grid(nidx, CK_BLOCK), CK_BLOCK, 0, l.stream>>>(
            (const void *)(uintptr_t)ix->data, ix->dtype == KEEL_I32,
            ix->strides[0], nidx, rows, k_in, p_in);
        st = ck_check(cks::sort_pairs(tmp, tbytes, k_in,
                                                      k_out, p_in, p_out,
                                                      nidx, 0, bits,
                                                      l.stream),
                      &l, "radix sort");
        if (st) {
            ck_scratch_free(&l, mem);
            return st;
        }
        scatter_bounds<<<ck_grid(rows + 1, CK_BLOCK), CK_BLOCK, 0,
                         l.stream>>>(k_out, nidx, rows, start);
    }
    CK_SWITCH_ALL(o->dtype, T,
                  (scatter_kernel<T><<<ck_grid(n, CK_BLOCK), CK_BLOCK, 0,
                                       l.stream>>>(
                      g, n, (T *)(uintptr_t)o->data,
                      (const T *)(uintptr_t)x->data,
                      (const T *)(uintptr_t)u->data, start, p_out)),
                  st = BAD("scatter: unknown dtype"))
    ck_scratch_free(&l, mem);
    if (st)
        return st;
    return ck_end(&l);
}

/* ---- sort, argsort, topk ------------------------------------------------- */

/*
 * Radix keys. The CPU plugin orders float keys (f16/bf16 widened to
 * float) with NaN as the largest value, -0.0 equal to +0.0 and NaNs equal
 * to each other, ties broken by position. Canonicalising NaN and -0.0,
 * then mapping the IEEE bits to an unsigned integer of the same order,
 * gives exactly that order under a stable radix sort whose values are the
 * positions. Integers flip the sign bit. Descending inverts every bit,
 * which reverses the key order and keeps equal keys stable.
 */
__device__ __forceinline__ uint32_t key_f32(float f)
{
    uint32_t b = f != f ? 0x7fc00000u : f == 0.0f ? 0u : __float_as_uint(f);

    return b & 0x80000000u ? ~b : b | 0x80000000u;
}

__device__ __forceinline__ uint64_t key_f64(double f)
{
    uint64_t b = f != f     ? 0x7ff8000000000000ull
                 : f == 0.0 ? 0ull
                            : (uint64_t)__double_as_longlong(f);

    return b >> 63 ? ~b : b | 0x8000000000000000ull;
}

template <class T> struct sort_key {
    /* int8, uint8, int32: the value as int32 with the sign bit flipped. */
    typedef uint32_t K;
    static __device__ __forceinline__ K of(T v)
    {
        return (uint32_t)(int32_t)v ^ 0x80000000u;
    }
};
template <> struct sort_key<int64_t> {
    typedef uint64_t K;
    static __device__ __forceinline__ K of(int64_t v)
    {
        return (uint64_t)v ^ 0x8000000000000000ull;
    }
};
template <> struct sort_key<float> {
    typedef uint32_t K;
    static __device__ __forceinline__ K of(float v) { return key_f32(v); }
};
template <> struct sort_key<ck_half> {
    typedef uint32_t K;
    static __device__ __forceinline__ K of(ck_half v)
    {
        return key_f32(ck_h2f(v));
    }
};
template <> struct sort_key<ck_bf16> {
    typedef uint32_t K;
    static __device__ __forceinline__ K of(ck_bf16 v)
    {
        return key_f32(ck_bf2f(v));
    }
};
template <> struct sort_key<double> {
    typedef uint64_t K;
    static __device__ __forceinline__ K of(double v) { return key_f64(v); }
};

/*
 * Rows of the sort: the dims other than the axis ("outer", row-major)
 * with x's, the values output's and the indices output's strides; along
 * the axis n elements at stride xs in x, k at ovs / ois in the outputs.
 */
struct sort_geo {
    int nouter;
    int64_t n, k, xs, ovs, ois;
    int64_t oshape[KEEL_MAX_DIMS];
    int64_t oxs[KEEL_MAX_DIMS], oovs[KEEL_MAX_DIMS], oois[KEEL_MAX_DIMS];
};

/* Offsets of row r in x, the values and the indices. */
__device__ __forceinline__ void row_offsets(const sort_geo &g, int64_t r,
                                            int64_t *xo, int64_t *vo,
                                            int64_t *io)
{
    *xo = *vo = *io = 0;
    for (int d = g.nouter - 1; d >= 0; d--) {
        int64_t q = r % g.oshape[d];
        r /= g.oshape[d];
        *xo += q * g.oxs[d];
        *vo += q * g.oovs[d];
        *io += q * g.oois[d];
    }
}

/* keys[r * n + i], pos[r * n + i] for element i of row r. */
template <class T>
__global__ void sort_load(sort_geo g, int64_t total, const T *x, bool desc,
                          typename sort_key<T>::K *keys, uint64_t *pos)
{
    typedef typename sort_key<T>::K K;

    MP_LOOP(e, total)
    {
        int64_t r = e / g.n, i = e - r * g.n, xo, vo, io;

        row_offsets(g, r, &xo, &vo, &io);
        K key = sort_key<T>::of(x[xo + i * g.xs]);
        keys[e] = desc ? (K)~key : key;
        pos[e] = (uint64_t)i;
    }
}

/* sel[r * k + q] = pos[r * n + q]: the first k of each sorted row. */
__global__ void sort_pick(int64_t rows, int64_t n, int64_t k,
                          const uint64_t *pos, uint64_t *sel)
{
    MP_LOOP(e, rows * k)
    {
        int64_t r = e / k, q = e - r * k;

        sel[e] = pos[r * n + q];
    }
}

/* Outputs from positions src[r * stride + q], q < k; values (ov, may be
 * NULL) copied from x. */
template <class U>
__global__ void sort_write(sort_geo g, int64_t rows, const uint64_t *src,
                           int64_t stride, const U *x, U *ov, int64_t *oi)
{
    MP_LOOP(e, rows * g.k)
    {
        int64_t r = e / g.k, q = e - r * g.k, xo, vo, io;
        int64_t p = (int64_t)src[r * stride + q];

        row_offsets(g, r, &xo, &vo, &io);
        oi[io + q * g.ois] = p;
        if (ov)
            ov[vo + q * g.ovs] = x[xo + p * g.xs];
    }
}

__global__ void seg_offsets(int64_t count, int64_t len, int *off)
{
    MP_LOOP(i, count + 1)
    {
        off[i] = (int)(i * len);
    }
}

/* Few long rows: one device-wide sort per row (the segmented sort gives
 * each row a single thread block). */
bool sort_per_row(int64_t rows, int64_t len)
{
    return rows == 1 || (rows <= 16 && len >= (1 << 16));
}

/*
 * Stable ascending sort of `rows` segments of `len` items (keys, with
 * values when `pairs`) on stream s: row by row (sort_per_row), else in
 * chunks of `chunk` rows, at most INT_MAX items (the segmented sort's
 * sizes are int). `off` holds chunk + 1 offsets i * len. With tmp NULL
 * only *tbytes is computed.
 */
template <class K>
cudaError_t seg_sort(void *tmp, size_t *tbytes, bool pairs, const K *k_in,
                     K *k_out, const uint64_t *v_in, uint64_t *v_out,
                     int64_t rows, int64_t len, int64_t chunk,
                     const int *off, int bits, cudaStream_t s)
{
    cudaError_t err = cudaSuccess;

    if (sort_per_row(rows, len)) {
        for (int64_t r = 0; r < (tmp ? rows : 1) && !err; r++) {
            int64_t at = r * len;

            if (pairs)
                err = cks::sort_pairs(
                    tmp, *tbytes, k_in + at, k_out + at, v_in + at,
                    v_out + at, len, 0, bits, s);
            else
                err = cks::sort_keys(tmp, *tbytes, k_in + at,
                                                     k_out + at, len, 0,
                                                     bits, s);
        }
        return err;
    }
    size_t need = 0;
    for (int64_t r0 = 0; r0 < rows && !err; r0 += chunk) {
        int64_t c = rows - r0 < chunk ? rows - r0 : chunk;
        int64_t at = r0 * len;
        size_t b = tmp ? *tbytes : 0;

        /* Only the first and the last chunk differ in size. */
        if (!tmp && r0 != 0 && r0 + chunk < rows)
            continue;
        if (pairs)
            err = cks::seg_sort_pairs(
                tmp, b, k_in + at, k_out + at, v_in + at, v_out + at,
                (int)(c * len), (int)c, off, off + 1, 0, bits, s);
        else
            err = cks::seg_sort_keys(
                tmp, b, k_in + at, k_out + at, (int)(c * len), (int)c, off,
                off + 1, 0, bits, s);
        if (b > need)
            need = b;
    }
    if (!tmp)
        *tbytes = need;
    return err;
}

struct sort_req {
    const char *op;
    int vi; /* output index of the indices; values at 0 when vi == 1 */
    bool desc, sorted;
    int64_t k;
};

size_t align256(size_t v)
{
    return (v + 255) & ~(size_t)255;
}

/*
 * The shared body. Scratch layout (each part 256-byte aligned): keys in
 * and out, positions in and out, segment offsets for n and for k, the
 * picked positions in and out (topk, sorted = 0), the sort.s storage.
 */
template <class T>
keel_status sort_run(const struct ck_launch *l, const keel_kernel_args *a,
                     const sort_req &q, const sort_geo &g, int64_t rows)
{
    typedef typename sort_key<T>::K K;
    const keel_tensor_desc *x = &a->inputs[0];
    int64_t total = rows * g.n, ktot = rows * g.k;
    /* Rows per segmented-sort call (item counts are int there). */
    int64_t chunk = g.n > INT32_MAX ? 1 : INT32_MAX / g.n;
    bool resort = !q.sorted && rows * g.k > 0;
    int pbits = bits_for((uint64_t)(g.n - 1));
    size_t t1 = 0, t2 = 0;
    cudaError_t err;
    keel_status st;

    if (chunk > rows)
        chunk = rows;
    if (!sort_per_row(rows, g.n) && g.n > INT32_MAX)
        return ck_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: rows of %lld elements along the axis are too "
                       "long for the segmented sort (at most 2^31 - 1 when "
                       "there is more than one row)",
                       q.op, (long long)g.n);
    err = seg_sort<K>(NULL, &t1, true, (const K *)NULL, (K *)NULL,
                      (const uint64_t *)NULL, (uint64_t *)NULL, rows, g.n,
                      chunk, NULL, (int)sizeof(K) * 8, l->stream);
    if (!err && resort)
        err = seg_sort<uint64_t>(NULL, &t2, false, (const uint64_t *)NULL,
                                 (uint64_t *)NULL, (const uint64_t *)NULL,
                                 (uint64_t *)NULL, rows, g.k, chunk, NULL,
                                 pbits, l->stream);
    if ((st = ck_check(err, l, "radix sort (size query)")))
        return st;

    size_t sz[8] = {
        align256((size_t)total * sizeof(K)),
        align256((size_t)total * sizeof(K)),
        align256((size_t)total * sizeof(uint64_t)),
        align256((size_t)total * sizeof(uint64_t)),
        align256((size_t)(chunk + 1) * sizeof(int)),
        resort ? align256((size_t)(chunk + 1) * sizeof(int)) : 0,
        resort ? 2 * align256((size_t)ktot * sizeof(uint64_t)) : 0,
        align256(t1 > t2 ? t1 : t2),
    };
    size_t at[8], bytes = 0;
    for (int i = 0; i < 8; i++) {
        at[i] = bytes;
        bytes += sz[i];
    }
    void *mem;
    if ((st = ck_scratch(l, bytes, &mem)))
        return st;
    char *m = (char *)mem;
    K *k_in = (K *)(m + at[0]), *k_out = (K *)(m + at[1]);
    uint64_t *p_in = (uint64_t *)(m + at[2]);
    uint64_t *p_out = (uint64_t *)(m + at[3]);
    int *off_n = (int *)(m + at[4]), *off_k = (int *)(m + at[5]);
    uint64_t *s_in = (uint64_t *)(m + at[6]);
    uint64_t *s_out = s_in + (resort ? sz[6] / 2 / sizeof(uint64_t) : 0);
    void *tmp = m + at[7];
    size_t tb;

    sort_load<T><<<ck_grid(total, CK_BLOCK), CK_BLOCK, 0, l->stream>>>(
        g, total, (const T *)(uintptr_t)x->data, q.desc, k_in, p_in);
    if (!sort_per_row(rows, g.n))
        seg_offsets<<<ck_grid(chunk + 1, CK_BLOCK), CK_BLOCK, 0,
                      l->stream>>>(chunk, g.n, off_n);
    tb = sz[7];
    err = seg_sort<K>(tmp, &tb, true, k_in, k_out, p_in, p_out, rows, g.n,
                      chunk, off_n, (int)sizeof(K) * 8, l->stream);
    const uint64_t *src = p_out;
    int64_t stride = g.n;
    if (!err && resort) {
        /* topk, sorted = 0: the selected positions in index order. */
        sort_pick<<<ck_grid(ktot, CK_BLOCK), CK_BLOCK, 0, l->stream>>>(
            rows, g.n, g.k, p_out, s_in);
        if (!sort_per_row(rows, g.k))
            seg_offsets<<<ck_grid(chunk + 1, CK_BLOCK), CK_BLOCK, 0,
                          l->stream>>>(chunk, g.k, off_k);
        tb = sz[7];
        err = seg_sort<uint64_t>(tmp, &tb, false, s_in, s_out, NULL, NULL,
                                 rows, g.k, chunk, off_k, pbits, l->stream);
        src = s_out;
        stride = g.k;
    }
    if ((st = ck_check(err, l, "radix sort"))) {
        ck_scratch_free(l, mem);
        return st;
    }
    const keel_tensor_desc *io = &a->outputs[q.vi];
    const keel_tensor_desc *vo = q.vi ? &a->outputs[0] : NULL;
    MP_SWITCH_SIZE(sizeof(T), U,
                   (sort_write<U><<<ck_grid(ktot, CK_BLOCK), CK_BLOCK, 0,
                                    l->stream>>>(
                       g, rows, src, stride, (const U *)(uintptr_t)x->data,
                       vo ? (U *)(uintptr_t)vo->data : (U *)NULL,
                       (int64_t *)(uintptr_t)io->data)))
    ck_scratch_free(l, mem);
    return KEEL_STATUS_OK;
}

enum { SORT, ARGSORT, TOPK };

/* Outputs [values,] indices shaped as x with k along the axis. */
keel_status sort_common(const keel_kernel_args *a, int kind)
{
    static const char *const names[] = {"sort", "argsort", "topk"};
    struct ck_launch l;
    sort_req q;
    bool is_topk = kind == TOPK;

    q.op = names[kind];
    q.vi = kind == ARGSORT ? 0 : 1;
    keel_status st = ck_begin(a, q.op, &l);
    if (st)
        return st;
    q.desc = ck_attr_i(a, is_topk ? "largest" : "descending",
                       is_topk ? 1 : 0) != 0;
    q.sorted = !is_topk || ck_attr_i(a, "sorted", 1) != 0;
    q.k = is_topk ? ck_attr_i(a, "k", 1) : 0;
    const keel_tensor_desc *x = &a->inputs[0];
    int64_t n;
    int axis = keel_kit_sort_axis(a, x, &n);
    if (!is_topk)
        q.k = n;
    if (ck_numel(x) == 0 || q.k == 0)
        return KEEL_STATUS_OK;

    const keel_tensor_desc *io = &a->outputs[q.vi];
    const keel_tensor_desc *vo = q.vi ? &a->outputs[0] : NULL;
    sort_geo g;
    g.n = n;
    g.k = q.k;
    g.xs = x->ndim ? x->strides[axis] : 1;
    g.ovs = vo && x->ndim ? vo->strides[axis] : 1;
    g.ois = x->ndim ? io->strides[axis] : 1;
    g.nouter = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (d == axis)
            continue;
        g.oshape[g.nouter] = x->shape[d];
        g.oxs[g.nouter] = x->strides[d];
        g.oovs[g.nouter] = vo ? vo->strides[d] : 0;
        g.oois[g.nouter] = io->strides[d];
        g.nouter++;
    }
    int64_t rows = ck_numel(x) / n;
    CK_SWITCH_NUMERIC(x->dtype, T, (st = sort_run<T>(&l, a, q, g, rows)),
                      return ck_fail(KEEL_STATUS_NOT_SUPPORTED,
                                     "%s: no CUDA kernel for %s", q.op,
                                     ck_dtype_name(x->dtype)))
    if (st)
        return st;
    return ck_end(&l);
}

keel_status k_sort(void *, const keel_kernel_args *a)
{
    return sort_common(a, SORT);
}

keel_status k_argsort(void *, const keel_kernel_args *a)
{
    return sort_common(a, ARGSORT);
}

keel_status k_topk(void *, const keel_kernel_args *a)
{
    return sort_common(a, TOPK);
}

} // namespace

#if CK_HOST_PASS
extern "C" const struct ck_entry ck_kernels_manip[] = {
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
#endif

