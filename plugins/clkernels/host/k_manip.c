/*
 * keel OpenCL C kernels — manip family, host side (OpenCL C in
 * plugins/clkernels/manip.cl): concat, stack, split, gather, index_select,
 * scatter, take_along_axis, tile, flip, pad.
 *
 * Every op but scatter's accumulation moves elements, so the kernels are
 * chosen by element size (mp_<kernel>_<1|2|4|8>) and serve all dtypes.
 *
 *   concat/stack/split/flip  one strided copy per part between the part
 *                   and its view of the whole (mp_copy; flip: the dims to
 *                   reverse as a bit mask)
 *   gather, index_select, take_along_axis  mp_take, one work item per
 *                   output element; an index out of range gives zero bits
 *   tile, pad       one work item per output element
 *   scatter         the updates bucketed by target row on the device
 *                   (mp_scatter_rows), then one work item per output
 *                   element (mp_scatter_ow_<size>, mp_scatter_acc_<sfx>);
 *                   an update whose row is out of range is ignored
 *
 * Index values are not checked on the host: that would mean waiting for
 * the queued work that produces them, and the ABI has kernels enqueue
 * without waiting. They are checked per element on the device instead,
 * as the CUDA plugin does (the CPU plugin rejects such an index with
 * INVALID_ARGUMENT).
 *
 * ok_begin has run keel_kit_check (operand counts, dtypes, axes,
 * attributes, output shapes) and refused negative strides.
 */
#include <stdio.h>
#include <string.h>

#include "ok.h"

/* ---- helpers ------------------------------------------------------------- */

static int64_t numel(const keel_tensor_desc *d)
{
    return keel_kit_numel(d);
}

static int attr_axis(const keel_kernel_args *a, int ndim)
{
    return keel_kit_axis(keel_kit_attr_i(a, "axis", 0), ndim);
}

/* `base`_<element size of dt> into buf. */
static const char *size_name(char *buf, size_t n, const char *base,
                             keel_dtype dt)
{
    snprintf(buf, n, "%s_%u", base, (unsigned)keel_dtype_size(dt));
    return buf;
}

/* d's data moved by `elems` elements. */
static keel_dptr shifted(const keel_tensor_desc *d, int64_t elems)
{
    return d->data + (keel_dptr)(elems * (int64_t)keel_dtype_size(d->dtype));
}

/* The kernels that write their output by linear index need it row-major
 * contiguous, as the core allocates outputs. */
static keel_status out_contiguous(const keel_kernel_args *a, const char *op)
{
    for (int i = 0; i < a->num_outputs; i++)
        if (!keel_kit_contiguous(&a->outputs[i]))
            return ok_fail(KEEL_STATUS_NOT_SUPPORTED,
                           "%s: output %d is not row-major contiguous", op,
                           i);
    return KEEL_STATUS_OK;
}

/*
 * dst = src over src's shape: dst's data and strides name the output view
 * (its shape is ignored), src is read at its strides, from the far end
 * along the dims whose bit is set in `flip`.
 */
static keel_status view_copy(const struct ok_launch *l,
                             const keel_tensor_desc *dst,
                             const keel_tensor_desc *src, uint32_t flip)
{
    keel_tensor_desc v = *dst;
    struct ok_kdesc xd, od;
    int64_t n = numel(src);
    char name[32];

    if (n <= 0)
        return KEEL_STATUS_OK;
    v.ndim = src->ndim;
    for (int d = 0; d < src->ndim; d++)
        v.shape[d] = src->shape[d];
    ok_kdesc_of(&xd, src);
    ok_kdesc_of(&od, &v);
    return OK_RUN(l, size_name(name, sizeof(name), "mp_copy", src->dtype), n,
                  OK_T(l, src), OK_DESC(&xd), OK_T(l, &v), OK_DESC(&od),
                  OK_I32(flip), OK_I64(n));
}

/* ---- concat, stack, split, flip ----------------------------------------- */

static keel_status k_concat(void *kd, const keel_kernel_args *a)
{
    struct ok_launch l;
    keel_status st = ok_begin(a, "concat", &l);
    const keel_tensor_desc *o;
    int64_t at = 0;
    int axis;

    (void)kd;
    if (st)
        return st;
    o = &a->outputs[0];
    axis = attr_axis(a, o->ndim);
    if (numel(o) == 0)
        return KEEL_STATUS_OK;
    for (int i = 0; i < a->num_inputs; i++) {
        const keel_tensor_desc *x = &a->inputs[i];
        keel_tensor_desc v = *o;

        v.data = shifted(o, at * o->strides[axis]);
        if ((st = view_copy(&l, &v, x, 0)))
            return st;
        at += x->shape[axis];
    }
    return KEEL_STATUS_OK;
}

static keel_status k_stack(void *kd, const keel_kernel_args *a)
{
    struct ok_launch l;
    keel_status st = ok_begin(a, "stack", &l);
    const keel_tensor_desc *o;
    int axis;

    (void)kd;
    if (st)
        return st;
    o = &a->outputs[0];
    axis = attr_axis(a, o->ndim);
    if (numel(o) == 0)
        return KEEL_STATUS_OK;
    for (int i = 0; i < a->num_inputs; i++) {
        keel_tensor_desc v = *o;

        /* The output without `axis`, at position i along it. */
        v.data = shifted(o, i * o->strides[axis]);
        for (int d = 0, s = 0; d < o->ndim; d++)
            if (d != axis)
                v.strides[s++] = o->strides[d];
        if ((st = view_copy(&l, &v, &a->inputs[i], 0)))
            return st;
    }
    return KEEL_STATUS_OK;
}

static keel_status k_split(void *kd, const keel_kernel_args *a)
{
    struct ok_launch l;
    keel_status st = ok_begin(a, "split", &l);
    const keel_tensor_desc *x;
    int64_t at = 0;
    int axis;

    (void)kd;
    if (st)
        return st;
    x = &a->inputs[0];
    axis = attr_axis(a, x->ndim);
    if (numel(x) == 0)
        return KEEL_STATUS_OK; /* every output is empty too */
    for (int i = 0; i < a->num_outputs; i++) {
        const keel_tensor_desc *o = &a->outputs[i];
        keel_tensor_desc v = *x;

        /* x's part: output i's shape, from position `at` along axis. */
        v.data = shifted(x, at * x->strides[axis]);
        for (int d = 0; d < x->ndim; d++)
            v.shape[d] = o->shape[d];
        if ((st = view_copy(&l, o, &v, 0)))
            return st;
        at += o->shape[axis];
    }
    return KEEL_STATUS_OK;
}

static keel_status k_flip(void *kd, const keel_kernel_args *a)
{
    struct ok_launch l;
    keel_status st = ok_begin(a, "flip", &l);
    uint32_t mask;

    (void)kd;
    if (st)
        return st;
    /* The axes are in range (the kit's check); a repeated one flips once. */
    mask = keel_kit_axes_bits(a, "axis", a->inputs[0].ndim);
    return view_copy(&l, &a->outputs[0], &a->inputs[0], mask);
}

/* ---- gather, index_select, take_along_axis ------------------------------- */

/*
 * mp_take over the contiguous output: xd holds the index space (shape) and
 * x's strides, id the index's strides in that space.
 */
static keel_status take_run(const struct ok_launch *l,
                            const keel_tensor_desc *x,
                            const keel_tensor_desc *ix,
                            const keel_tensor_desc *o,
                            const struct ok_kdesc *xd,
                            const struct ok_kdesc *id, int axis, bool wrap)
{
    int64_t n = numel(o);
    char name[32];

    if (n <= 0)
        return KEEL_STATUS_OK;
    return OK_RUN(l, size_name(name, sizeof(name), "mp_take", o->dtype), n,
                  OK_T(l, x), OK_DESC(xd), OK_T(l, ix), OK_DESC(id),
                  OK_T(l, o), OK_I32(axis), OK_I64(x->shape[axis]),
                  OK_I32(ix->dtype == KEEL_I32), OK_I32(wrap), OK_I64(n));
}

static keel_status gather_common(const keel_kernel_args *a, const char *op)
{
    struct ok_launch l;
    keel_status st = ok_begin(a, op, &l);
    const keel_tensor_desc *x, *ix, *o;
    struct ok_kdesc xd, id;
    keel_tensor_desc v;
    int axis;

    if (st)
        return st;
    if ((st = out_contiguous(a, op)))
        return st;
    x = &a->inputs[0];
    ix = &a->inputs[1];
    o = &a->outputs[0];
    axis = attr_axis(a, x->ndim);
    if (numel(o) == 0)
        return KEEL_STATUS_OK;
    /* The output seen with x's rank: the index's length along axis (1 for
     * a 0-d index, whose output dropped the axis). Same linear order. */
    keel_kit_gather_out(a, axis, &v);
    memset(&xd, 0, sizeof(xd));
    memset(&id, 0, sizeof(id));
    xd.ndim = id.ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++) {
        xd.shape[d] = id.shape[d] = v.shape[d];
        xd.stride[d] = x->strides[d];
        id.stride[d] = d == axis && ix->ndim > 0 ? ix->strides[0] : 0;
    }
    return take_run(&l, x, ix, o, &xd, &id, axis, false);
}

static keel_status k_gather(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return gather_common(a, "gather");
}

static keel_status k_index_select(void *kd, const keel_kernel_args *a)
{
    (void)kd;
    return gather_common(a, "index_select");
}

static keel_status k_take_along_axis(void *kd, const keel_kernel_args *a)
{
    const char *op = "take_along_axis";
    struct ok_launch l;
    keel_status st = ok_begin(a, op, &l);
    const keel_tensor_desc *x, *ix, *o;
    struct ok_kdesc xd, id;
    int axis;

    (void)kd;
    if (st)
        return st;
    if ((st = out_contiguous(a, op)))
        return st;
    x = &a->inputs[0];
    ix = &a->inputs[1];
    o = &a->outputs[0];
    axis = attr_axis(a, x->ndim);
    if (numel(o) == 0)
        return KEEL_STATUS_OK;
    /* x and index arrive re-expressed with the output's shape (x keeps its
     * own size along axis, which only `size` needs). */
    memset(&xd, 0, sizeof(xd));
    memset(&id, 0, sizeof(id));
    xd.ndim = id.ndim = o->ndim;
    for (int d = 0; d < o->ndim; d++) {
        xd.shape[d] = id.shape[d] = o->shape[d];
        xd.stride[d] = x->strides[d];
        id.stride[d] = ix->strides[d];
    }
    return take_run(&l, x, ix, o, &xd, &id, axis, true);
}

/* ---- tile ---------------------------------------------------------------- */

static keel_status k_tile(void *kd, const keel_kernel_args *a)
{
    struct ok_launch l;
    keel_status st = ok_begin(a, "tile", &l);
    const keel_tensor_desc *x, *o;
    struct ok_kdesc xd, od;
    int64_t n;
    char name[32];

    (void)kd;
    if (st)
        return st;
    if ((st = out_contiguous(a, "tile")))
        return st;
    x = &a->inputs[0];
    o = &a->outputs[0];
    n = numel(o);
    if (n == 0)
        return KEEL_STATUS_OK; /* else every x dim is > 0 */
    ok_kdesc_of(&od, o);
    memset(&xd, 0, sizeof(xd));
    xd.ndim = o->ndim;
    keel_kit_align_right(x, o->ndim, xd.shape, xd.stride);
    return OK_RUN(&l, size_name(name, sizeof(name), "mp_tile", o->dtype), n,
                  OK_T(&l, x), OK_DESC(&xd), OK_DESC(&od), OK_T(&l, o),
                  OK_I64(n));
}

/* ---- pad ----------------------------------------------------------------- */

/* Saturating conversion of the pad value, as the CPU plugin stores it
 * (NaN gives 0). */
static int64_t sat_i64(double v, double lo, double hi)
{
    if (v != v)
        return 0;
    if (v <= lo)
        return (int64_t)lo;
    if (v >= hi)
        return (int64_t)hi;
    return (int64_t)v;
}

/* The pad value as the bits of one element of dt, in the low bytes. */
static uint64_t pad_pattern(keel_dtype dt, double v)
{
    float f = (float)v;
    uint32_t u32;
    uint64_t u64;

    switch (dt) {
    case KEEL_F32:
        memcpy(&u32, &f, sizeof(u32));
        return u32;
    case KEEL_F64:
        memcpy(&u64, &v, sizeof(u64));
        return u64;
    case KEEL_F16:
        return keel_kit_f32_to_f16(f);
    case KEEL_BF16:
        return keel_kit_f32_to_bf16(f);
    case KEEL_BOOL:
        return v != 0;
    case KEEL_I8:
        return (uint8_t)(int8_t)sat_i64(v, -128, 127);
    case KEEL_U8:
        return (uint8_t)sat_i64(v, 0, 255);
    case KEEL_I32:
        return (uint32_t)(int32_t)sat_i64(v, -2147483648.0, 2147483647.0);
    default:
        return (uint64_t)sat_i64(v, -9223372036854775808.0,
                                 9223372036854774784.0);
    }
}

static keel_status k_pad(void *kd, const keel_kernel_args *a)
{
    struct ok_launch l;
    keel_status st = ok_begin(a, "pad", &l);
    const keel_tensor_desc *x, *o;
    struct ok_kdesc xd, od, bd;
    int64_t after[KEEL_MAX_DIMS], n;
    int mode;
    char name[32];

    (void)kd;
    if (st)
        return st;
    if ((st = out_contiguous(a, "pad")))
        return st;
    x = &a->inputs[0];
    o = &a->outputs[0];
    n = numel(o);
    if (n == 0)
        return KEEL_STATUS_OK;
    mode = keel_kit_pad_mode(a);
    if (mode != KEEL_KIT_PAD_CONSTANT && mode != KEEL_KIT_PAD_REFLECT &&
        mode != KEEL_KIT_PAD_REPLICATE)
        return ok_fail(KEEL_STATUS_INVALID_ARGUMENT, "pad: unknown mode");
    /* An empty x leaves only the constant (as the CPU plugin fills it). */
    if (numel(x) == 0)
        mode = KEEL_KIT_PAD_CONSTANT;
    ok_kdesc_of(&xd, x);
    ok_kdesc_of(&od, o);
    memset(&bd, 0, sizeof(bd));
    bd.ndim = x->ndim;
    keel_kit_pad_widths(a, x->ndim, bd.shape, after);
    return OK_RUN(&l, size_name(name, sizeof(name), "mp_pad", o->dtype), n,
                  OK_T(&l, x), OK_DESC(&xd), OK_DESC(&od), OK_DESC(&bd),
                  OK_T(&l, o), OK_I32(mode),
                  OK_U64(pad_pattern(o->dtype,
                                     keel_kit_attr_f(a, "value", 0.0))),
                  OK_I64(n));
}

/* ---- scatter ------------------------------------------------------------- */

static keel_status k_scatter(void *kd, const keel_kernel_args *a)
{
    struct ok_launch l;
    keel_status st = ok_begin(a, "scatter", &l);
    const keel_tensor_desc *x, *ix, *u, *o;
    struct ok_kdesc sd, ud;
    ok_mem start = NULL, order = NULL;
    int64_t n, nidx, rows;
    bool overwrite;
    char name[40];

    (void)kd;
    if (st)
        return st;
    if ((st = out_contiguous(a, "scatter")))
        return st;
    x = &a->inputs[0];
    ix = &a->inputs[1];
    u = &a->inputs[2];
    o = &a->outputs[0];
    n = numel(o);
    if (n == 0)
        return KEEL_STATUS_OK;
    nidx = numel(ix);
    rows = o->shape[0];
    overwrite = keel_kit_attr_i(a, "overwrite", 1) != 0;
    /* Index space: the output's shape; x at its strides, the updates'
     * inner dims at theirs (dim 0 picks the update row). */
    memset(&sd, 0, sizeof(sd));
    memset(&ud, 0, sizeof(ud));
    sd.ndim = ud.ndim = o->ndim;
    for (int d = 0; d < o->ndim; d++) {
        sd.shape[d] = ud.shape[d] = o->shape[d];
        sd.stride[d] = x->strides[d];
        ud.stride[d] = u->strides[d];
    }
    if (nidx > 0) {
        st = ok_scratch(&l, (size_t)(rows + 1) * sizeof(int64_t), &start);
        if (!st)
            st = ok_scratch(&l, (size_t)nidx * sizeof(int64_t), &order);
        if (!st)
            st = OK_RUN(&l, "mp_scatter_rows", 1, OK_T(&l, ix),
                        OK_I64(ix->ndim > 0 ? ix->strides[0] : 0),
                        OK_I32(ix->dtype == KEEL_I32), OK_I64(nidx),
                        OK_I64(rows), OK_MEM(start), OK_MEM(order));
        if (st)
            goto out;
    }
    if (overwrite)
        size_name(name, sizeof(name), "mp_scatter_ow", o->dtype);
    else
        snprintf(name, sizeof(name), "mp_scatter_acc_%s", ok_sfx(o->dtype));
    st = OK_RUN(&l, name, n, OK_T(&l, x), OK_DESC(&sd), OK_T(&l, u),
                OK_DESC(&ud), OK_MEM(start), OK_MEM(order), OK_T(&l, o),
                OK_I32(nidx > 0), OK_I64(n));
out:
    ok_scratch_release(&l, start);
    ok_scratch_release(&l, order);
    return st;
}

/* ---- registration -------------------------------------------------------- */

const struct ok_entry ok_kernels_manip[] = {
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
    {NULL, 0, NULL},
};
