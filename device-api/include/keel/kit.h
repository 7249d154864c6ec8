/*
 * keel kernel kit — what every plugin's kernels share.
 *
 * The ABI (device_api.h) says what a kernel receives; this library checks
 * it. For every op of the catalog, keel_kit_check() validates one launch's
 * keel_kernel_args at the descriptor level: the number of inputs and
 * outputs, every descriptor (dtype known, 0 <= ndim <= KEEL_MAX_DIMS, no
 * negative dimension, element count and byte span within int64_t), every
 * output row-major contiguous (the core allocates them so), the
 * attributes against the op's catalog spec (type, required ones present),
 * the dtypes the op's shape rule allows, the output shapes the rule implies,
 * and attribute ranges (axes in range, geometry that fits). After it
 * returns OK a kernel may rely on everything docs/ops.md ("What a kernel
 * receives") promises for that op's shape rule, and may multiply
 * dimensions without overflow. What stays the kernel's: data-dependent
 * checks (an index or label out of range), layouts or dtypes the kernel
 * itself does not handle (NOT_SUPPORTED), and device limits.
 *
 * The checks are driven by ops.def: each op's entry names its shape rule,
 * and the kit has one check per shape rule, so an op appended to the
 * catalog with an existing rule is checked the moment it exists, and a
 * new rule without a check does not link.
 *
 * Beside the check, the kit holds the helpers kernels keep needing:
 * attribute look-up with catalog defaults, descriptor predicates, the conv
 * and pool geometry, the batched-GEMM plan of matmul and linear (and
 * fused_linear), the activation of the fused ops, the
 * normalisations' geometry, float16/bfloat16 conversion, and a
 * dense/strided iteration plan. The Philox reference stays in philox.h.
 *
 * Use: link libkeel-kit (static, C11, no dependencies beyond libc and
 * libm):  cc $(pkg-config --cflags --libs keel-kit) ...
 * A plugin that does not link it still works: the core never requires it.
 * Thread-safe: the kit's only state is a name index of the catalog,
 * built once on first use (pthread_once) and read-only afterwards.
 */
#ifndef KEEL_KIT_H
#define KEEL_KIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <keel/device_api.h>
#include <keel/op_catalog.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Version of the kit's interface (bumped on additions). */
#define KEEL_KIT_VERSION 2

/** A check's explanation: the op's name first ("conv2d: ..."). */
typedef struct keel_kit_msg {
    char text[256];
} keel_kit_msg;

/* ---- the op catalog ------------------------------------------------------ */

/** The catalog id of op `name`, or -1 when the catalog has no such op. */
int keel_kit_op_id(const char *name);
/** Catalog facts of op `id` (NULL when out of range). */
const keel_op_info *keel_kit_op_info(int id);

/* ---- checks -------------------------------------------------------------- */

/**
 * Validate the launch `a` of catalog op `op` (a keel_op_id). Returns OK,
 * or INVALID_ARGUMENT (descriptors or attributes inconsistent with the op)
 * with the reason in `msg` (which may be NULL). Never reads tensor data;
 * never reads a descriptor's `data` field beyond storing it.
 */
keel_status keel_kit_check(int op, const keel_kernel_args *a,
                           keel_kit_msg *msg);
/** keel_kit_check by catalog name; NOT_FOUND for a name not in the
 *  catalog. */
keel_status keel_kit_check_name(const char *op, const keel_kernel_args *a,
                                keel_kit_msg *msg);

/* ---- attributes (catalog default when absent) ----------------------------- */

/** The attribute named `name`, or NULL. */
const keel_attr *keel_kit_attr(const keel_kernel_args *a, const char *name);
/** Integer value (INT, BOOL, DTYPE; a FLOAT is truncated), else `def`. */
int64_t keel_kit_attr_i(const keel_kernel_args *a, const char *name,
                        int64_t def);
/** Float value (FLOAT, or an integer converted), else `def`. */
double keel_kit_attr_f(const keel_kernel_args *a, const char *name,
                       double def);
/** String value, else `def`. */
const char *keel_kit_attr_s(const keel_kernel_args *a, const char *name,
                            const char *def);
/** Integer list; *n receives its length (0 and NULL when absent). */
const int64_t *keel_kit_attr_ints(const keel_kernel_args *a,
                                  const char *name, int64_t *n);
/** Float list; *n receives its length (0 and NULL when absent). */
const double *keel_kit_attr_floats(const keel_kernel_args *a,
                                   const char *name, int64_t *n);

/* ---- descriptors ----------------------------------------------------------- */

/** Product of the dimensions (1 for a scalar). */
int64_t keel_kit_numel(const keel_tensor_desc *d);
/** Row-major contiguous; size-1 dimensions' strides are ignored and an
 *  empty tensor counts as contiguous. */
bool keel_kit_contiguous(const keel_tensor_desc *d);
/** dtype known, ndim in [0, KEEL_MAX_DIMS], no negative dimension, and the
 *  element count and byte span of shape and strides fit in int64_t. */
bool keel_kit_desc_ok(const keel_tensor_desc *d);
/** Same ndim and dimensions. */
bool keel_kit_same_shape(const keel_tensor_desc *a, const keel_tensor_desc *b);
/** Normalised axis in [0, ndim), or -1 when out of range. */
int keel_kit_axis(int64_t axis, int ndim);
/** float32, float64, float16 or bfloat16. */
bool keel_kit_float_dtype(keel_dtype dt);
/** "float32", ..., or "unknown dtype". */
const char *keel_kit_dtype_name(keel_dtype dt);
/** Product of shape[from..to). */
int64_t keel_kit_prod(const int64_t *shape, int from, int to);

/* ---- conv and pool geometry (NCHW) ------------------------------------------ */

/**
 * Geometry of a convolution seen as a conv2d (the core's rules,
 * core/src/shape_conv.c): `big` is the conv2d's input side (x of conv2d,
 * the output of a transposed conv), `small` its output side (conv2d's
 * output, a transposed conv's x); the weight is [o, c/groups, kh, kw] in
 * that view (conv2d's [O, C/g, kh, kw], a transposed conv's [C, O/g, kh,
 * kw]). Strides, dilations and paddings are resolved (1 or 2 values, SAME,
 * VALID, 1/2/4 paddings); `pad` is top, bottom, left, right. Once the
 * geometry is OK, every value is >= 0 (kh, kw, strides, dilations, groups
 * >= 1), groups divides c and o, the dilated kernel fits, and h * w,
 * oh * ow and cg * kh * kw fit in int64_t.
 */
typedef struct keel_kit_conv {
    int64_t n, c, h, w;    /* big side      */
    int64_t o, oh, ow;     /* small side    */
    int64_t kh, kw, sh, sw, dh, dw;
    int64_t pad[4];
    int64_t groups;
    int64_t output_padding[2]; /* transposed conv only, else 0 */
    int64_t cg, og;            /* c / groups, o / groups */
} keel_kit_conv;

/** Conv geometry of a conv2d or fused_conv2d (transpose false) or
 *  conv2d_transpose launch from its descriptors: x, weight and the output, or for the *_grad ops
 *  x, weight and dout (conv2d_grad: big = x, small = dout;
 *  conv2d_transpose_grad: big = dout, small = x). Checks what
 *  keel_kit_check checks of these three descriptors and the attributes
 *  (not dtypes, bias or the other outputs): INVALID_ARGUMENT with the
 *  reason in `msg` (may be NULL) when they disagree; `g` is then
 *  unspecified. */
keel_status keel_kit_conv_geometry(const keel_kernel_args *a, bool transpose,
                                   const keel_tensor_desc *big,
                                   const keel_tensor_desc *weight,
                                   const keel_tensor_desc *small,
                                   keel_kit_conv *g, keel_kit_msg *msg);

/** Pooling geometry: window, stride and resolved paddings per spatial dim,
 *  plus the input and output planes. The window of output o along a dim of
 *  input size `in` is [o * s - pad_before, o * s - pad_before + k) clipped
 *  to the input. For adaptive pooling the window of output o along a dim
 *  of size in/out is [floor(o*in/out), ceil((o+1)*in/out)), and (in + 1) *
 *  (out + 1) fits in int64_t; kh, kw, sh, sw and pad are then 0, as they
 *  are for KEEL_KIT_POOL_INDEXED. */
typedef struct keel_kit_pool {
    int64_t n, c, h, w, oh, ow;
    int64_t kh, kw, sh, sw;
    int64_t pad[4]; /* top, bottom, left, right */
    bool ceil_mode, exclusive, adaptive;
} keel_kit_pool;

/** What keel_kit_pool_geometry reads the attributes as. */
enum {
    KEEL_KIT_POOL_MAX = 0,      /* max_pool2d: kernel_size, stride, padding,
                                   ceil_mode */
    KEEL_KIT_POOL_AVG = 1,      /* avg_pool2d(_grad): the same, exclusive */
    KEEL_KIT_POOL_ADAPTIVE = 2, /* adaptive_avg_pool2d(_grad): output_size */
    KEEL_KIT_POOL_INDEXED = 3   /* max_pool2d_grad: no window attributes,
                                   the indices say where each output came
                                   from; only the planes */
};

/** Pool geometry for `kind` (KEEL_KIT_POOL_*). `x` and `out` are the
 *  forward input and output (for the *_grad ops: x and dout). Checks what
 *  keel_kit_check checks of the two descriptors and the attributes (not
 *  dtypes or indices); INVALID_ARGUMENT with the reason in `msg` (may be
 *  NULL), `g` then unspecified. */
keel_status keel_kit_pool_geometry(const keel_kernel_args *a, int kind,
                                   const keel_tensor_desc *x,
                                   const keel_tensor_desc *out,
                                   keel_kit_pool *g, keel_kit_msg *msg);

/* ---- iteration plans ---------------------------------------------------------- */

/** Up to this many operands in one plan. */
#define KEEL_KIT_PLAN_MAX 8

/**
 * A loop nest over one index space shared by `nops` operands, with the
 * dimensions that are contiguous for every operand merged and size-1
 * dimensions dropped: `ndim` (0 for a single element) dims, `shape` in
 * row-major order, `strides[op][d]` in elements. `dense` when every
 * operand is contiguous (then ndim <= 1).
 */
typedef struct keel_kit_plan {
    int nops, ndim;
    bool dense;
    int64_t numel;
    int64_t shape[KEEL_MAX_DIMS];
    int64_t strides[KEEL_KIT_PLAN_MAX][KEEL_MAX_DIMS];
} keel_kit_plan;

/** Plan a loop over `shape` (ndim dims) for operands with the given element
 *  strides. INVALID_ARGUMENT when nops is out of [1, KEEL_KIT_PLAN_MAX]. */
keel_status keel_kit_plan_make(keel_kit_plan *p, int nops, int ndim,
                               const int64_t *shape,
                               const int64_t (*strides)[KEEL_MAX_DIMS]);
/** Plan for descriptors of one shape (the first one's). */
keel_status keel_kit_plan_descs(keel_kit_plan *p, int nops,
                                const keel_tensor_desc *const *d);
/** Element offset of operand `op` at flat row-major index `i`. */
int64_t keel_kit_plan_offset(const keel_kit_plan *p, int op, int64_t i);

/* ---- float16 / bfloat16 ------------------------------------------------------- */

/** IEEE half to float (exact). */
static inline float keel_kit_f16_to_f32(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu, bits;
    float f;

    if (e == 0x1f) {
        bits = s | 0x7f800000u | (m << 13);
    } else if (e) {
        bits = s | ((e + 112u) << 23) | (m << 13);
    } else if (m) {
        /* subnormal: value m * 2^-24 */
        float v = (float)m * (1.0f / 16777216.0f);
        return s ? -v : v;
    } else {
        bits = s;
    }
    memcpy(&f, &bits, sizeof(f));
    return f;
}

/** Float to IEEE half, round to nearest even; NaN stays NaN. */
static inline uint16_t keel_kit_f32_to_f16(float f)
{
    uint32_t x, s, e, m;

    memcpy(&x, &f, sizeof(x));
    s = (x >> 16) & 0x8000u;
    e = (x >> 23) & 0xffu;
    m = x & 0x7fffffu;
    if (e == 0xff)
        return (uint16_t)(s | 0x7c00u | (m ? 0x200u | (m >> 13) : 0));
    if (e > 142) /* >= 2^16: overflow to infinity */
        return (uint16_t)(s | 0x7c00u);
    if (e < 102) /* below half the smallest subnormal */
        return (uint16_t)s;
    if (e < 113) { /* subnormal half */
        uint32_t mm = m | 0x800000u, shift = 126 - e;
        uint32_t v = mm >> shift, rem = mm & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (v & 1)))
            v++;
        return (uint16_t)(s | v);
    }
    {
        uint32_t v = ((e - 112) << 10) | (m >> 13), rem = m & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (v & 1)))
            v++; /* may carry into the exponent, up to infinity */
        return (uint16_t)(s | v);
    }
}

/** bfloat16 to float (exact). */
static inline float keel_kit_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;

    memcpy(&f, &bits, sizeof(f));
    return f;
}

/** Float to bfloat16, round to nearest even; NaN stays NaN. */
static inline uint16_t keel_kit_f32_to_bf16(float f)
{
    uint32_t x;

    memcpy(&x, &f, sizeof(x));
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* ---- elementwise family (rules_elementwise.c) ------------------------------ */

/* (end of elementwise family) */

/* ---- reduce family (rules_reduce.c) ------------------------------------------ */

/**
 * As keel_kit_axis, except that a 0-d tensor accepts 0 and -1 (both give
 * 0), as the reductions, cumsum, softmax and the sorts do: -1 when out of
 * range.
 */
int keel_kit_axis_0d(int64_t axis, int ndim);

/**
 * Bit mask (bit d: dim d) of the axes listed in the integer-list attribute
 * `name`, each normalised for `ndim` dims (0-d: 0 and -1 name no dim, so
 * give no bit). Empty or absent: 0. Entries out of range are skipped
 * (keel_kit_check refuses them for the ops whose rule checks the list).
 */
uint32_t keel_kit_axes_bits(const keel_kernel_args *a, const char *name,
                            int ndim);

/**
 * The dims a reduction (rules reduce, reduce_arg, reduce_bool) or a
 * cumsum scans, from its `axis` attribute, for its input of `ndim` dims:
 * the listed axes, or every dim when the list is empty (0 for a 0-d
 * input). After keel_kit_check the list has no repeat and no axis out of
 * range.
 */
uint32_t keel_kit_reduce_mask(const keel_kernel_args *a, int ndim);

/**
 * Element counts of reducing `x` over the dims in `mask`: *nout the kept
 * elements (outputs), *nred the elements folded into each (either may be
 * NULL).
 */
void keel_kit_reduce_counts(const keel_tensor_desc *x, uint32_t mask,
                            int64_t *nout, int64_t *nred);

/**
 * The axis of a sort, argsort or topk launch (attribute `axis`, default
 * -1) normalised for input `x`, 0 for a 0-d x; *len receives x's size
 * along it (1 for a 0-d x). -1 when the axis is out of range.
 */
int keel_kit_sort_axis(const keel_kernel_args *a, const keel_tensor_desc *x,
                       int64_t *len);

/* (end of reduce family) */

/* ---- manip family (rules_manip.c) -------------------------------------------- */

/** Element counts around dim `axis` of `d`: *outer = prod(shape[0, axis)),
 *  *inner = prod(shape[axis + 1, ndim)) (either may be NULL). */
void keel_kit_outer_inner(const keel_tensor_desc *d, int axis,
                          int64_t *outer, int64_t *inner);

/** `pad`'s modes. */
enum keel_kit_pad_mode {
    KEEL_KIT_PAD_CONSTANT = 0,
    KEEL_KIT_PAD_REFLECT = 1,
    KEEL_KIT_PAD_REPLICATE = 2
};

/** pad's `mode` attribute (absent: constant), or -1 for another string
 *  (which keel_kit_check refuses). */
int keel_kit_pad_mode(const keel_kernel_args *a);

/** pad's widths for each of `ndim` dims: before[d] = pad[2d], after[d] =
 *  pad[2d + 1], 0 past the attribute's entries. */
void keel_kit_pad_widths(const keel_kernel_args *a, int ndim,
                         int64_t *before, int64_t *after);

/**
 * `x`'s shape and element strides right-aligned to `nd` >= x->ndim dims,
 * the missing leading dims of size 1 and stride 0 (tile aligns x to its
 * output this way).
 */
void keel_kit_align_right(const keel_tensor_desc *x, int nd, int64_t *shape,
                          int64_t *strides);

/**
 * tile's repeat of dim d of its output of `ndim` dims: `repeat_times`
 * aligned to the output's dims from the right, 1 where it has no entry.
 */
int64_t keel_kit_tile_repeat(const keel_kernel_args *a, int ndim, int d);

/**
 * The output of a gather or index_select launch (x, index) seen with x's
 * rank: *v is the output's descriptor with x's shape resized to the
 * index's length along `axis`; when the output dropped the axis (gather of
 * a 0-d index, which arrives as [1]) v has stride 0 there.
 */
void keel_kit_gather_out(const keel_kernel_args *a, int axis,
                         keel_tensor_desc *v);

/* (end of manip family) */

/* ---- linalg family (rules_linalg.c) ------------------------------------------ */

/**
 * matmul and linear as one batched GEMM problem, in elements:
 *
 *   out[b] (M x N, contiguous) = X[b] (M x K) * Y[b] (K x N) (+ bias row)
 *
 * for b over the batch shape bshape[nb] (batches in all), X[b] at
 * offset sum_d b_d * xbs[d] with row/column strides xrs/xcs, Y[b] likewise
 * (ybs[d] is 0 along a broadcast batch dim, and always for linear's
 * weight). matmul's descriptors arrive resolved, so X and Y are its x and
 * y as given; linear reads x [d0, .., dn-2, in] as batches d0.. of
 * dn-2 x in rows (a 1-D x is one row) and weight [in, out] as Y.
 */
typedef struct keel_kit_matmul {
    int nb;
    int64_t bshape[KEEL_MAX_DIMS];
    int64_t xbs[KEEL_MAX_DIMS], ybs[KEEL_MAX_DIMS];
    int64_t batches, M, N, K;
    int64_t xrs, xcs, yrs, ycs;
    bool has_bias; /* linear with a bias [N] ...    */
    int64_t bs;    /* ... of this element stride    */
} keel_kit_matmul;

/** The GEMM plan of launch `a` of KEEL_OP_MATMUL, KEEL_OP_LINEAR or
 *  KEEL_OP_FUSED_LINEAR (planned as linear: the activation is the
 *  kernel's, see keel_kit_activation); validates as keel_kit_check
 *  does. */
keel_status keel_kit_matmul_plan(int op, const keel_kernel_args *a,
                                 keel_kit_matmul *p, keel_kit_msg *msg);

/** When Y is shared by every batch and X's batch dims continue its rows
 *  (a contiguous x, say), fold the batches into M: one tall GEMM. Leaves
 *  the plan alone otherwise. */
void keel_kit_matmul_merge_batches(keel_kit_matmul *p);

/** How a BLAS can read a matrix: row-major, column-major, or neither. */
enum { KEEL_KIT_MAT_ROW = 0, KEEL_KIT_MAT_COL = 1, KEEL_KIT_MAT_STRIDED = 2 };

/** Layout of a rows x cols matrix with element strides (rs, cs): ROW when
 *  columns are unit-stride (leading dim *ld = rs), COL when rows are (the
 *  transpose of a row-major matrix, *ld = cs), with size-1 dims free;
 *  STRIDED when neither fits or *ld would exceed max_ld (a BLAS's int
 *  range): such a matrix must be packed first. */
int keel_kit_mat_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                        int64_t max_ld, int64_t *ld);

/**
 * The activation of a fused_linear or fused_conv2d launch (its
 * `activation` attribute; "none" when absent) and, in *alpha (may be
 * NULL), its `alpha` (leaky_relu's negative slope; 0 when absent). For a
 * launch keel_kit_check accepted the name is valid; otherwise an unknown
 * name gives -1. Each activation means the catalog op of its name
 * (keel/op_catalog.h, keel_fused_act).
 */
int keel_kit_activation(const keel_kernel_args *a, double *alpha);

/* (end of linalg family) */

/* ---- conv family (rules_conv.c) ------------------------------------------------ */

/* The conv2d, conv2d_grad, conv2d_transpose(_grad), pool2d, pool2d_grad
 * and adaptive_pool2d rules use the geometry above (keel_kit_conv_geometry,
 * keel_kit_pool_geometry): after keel_kit_check a kernel gets the same
 * geometry from them without a failure. Empty stride, dilation, padding or
 * output_padding lists take the catalog default. */

/* (end of conv family) */

/* ---- nn family (rules_nn.c) ---------------------------------------------------- */

/** reduction attribute of the losses ("mean" when absent). */
enum { KEEL_KIT_RED_NONE = 0, KEEL_KIT_RED_MEAN = 1, KEEL_KIT_RED_SUM = 2 };
/** KEEL_KIT_RED_* of the launch's `reduction`, or -1 for an unknown one. */
int keel_kit_reduction(const keel_kernel_args *a);

/**
 * Geometry of a normalisation launch (batch_norm, layer_norm, group_norm
 * and their grads): where each input is (an absent optional input moves
 * the later ones up) and how x splits into `outer` independent sets of
 * `inner` elements that are normalised together:
 *
 *   layer_norm  outer = prod(x.shape[:axis]) rows, inner = prod(x.shape[axis:])
 *   group_norm  outer = N * groups, inner = C / groups * spatial
 *   batch_norm  outer = C channels, inner = N * spatial
 *
 * with spatial = prod(x.shape[2:]) for the NC[HW] ops.
 */
typedef struct keel_kit_norm {
    int axis;        /* layer_norm: begin_norm_axis resolved; else 1 */
    int64_t outer, inner;
    int64_t n, c, groups, spatial; /* NC[HW] ops (0 for layer_norm);
                                      groups is 1 for batch_norm */
    int64_t params;  /* elements of scale, bias, dscale, dbias */
    /* Input indices, -1 when absent: scale, bias (forward ops), the two
     * statistics (running_mean/running_var of batch_norm; mean/invstd or
     * saved_mean/saved_invstd of the grads) and dy (grads). */
    int scale, bias, stat[2], dy;
} keel_kit_norm;

/** The geometry of launch `a` of normalisation op `op`; validates as
 *  keel_kit_check does (INVALID_ARGUMENT for any other op). */
keel_status keel_kit_norm_geometry(int op, const keel_kernel_args *a,
                                   keel_kit_norm *g, keel_kit_msg *msg);

/* (end of nn family) */

/* ---- bad-argument cases (mutate.c) -------------------------------------------- */

/*
 * Mutants: from one valid launch of an op, a deterministic list of launches
 * that each differ from it in one place, for tests that want to know
 * whether a kernel refuses what it must (the conformance suite, the kit's
 * own before/after test). The generator does not judge: some mutants are
 * legal for some ops (a dim +1 of an input that broadcasts); ask
 * keel_kit_check which ones are bad.
 *
 * The list, in order, each mutant with a stable id in `what`:
 *  - for each output k, then each input k ("out0", "in1"): each dim +1
 *    ("out0.dim1+1"), each dim -1 when it is > 0 ("out0.dim1-1"), a
 *    trailing dim of 1 appended when ndim < KEEL_MAX_DIMS ("out0.ndim+1"),
 *    the last dim dropped when ndim > 0 ("out0.ndim-1"), the dtype changed
 *    across classes (a float to int32, an integer or bool to float32:
 *    "out0.dtype=int32") and within its class (another float, another
 *    integer; bool to int32). A descriptor that was contiguous gets
 *    row-major strides for its new shape, so that the mutant is about the
 *    shape and not the layout; otherwise the strides are kept (1 for an
 *    appended dim);
 *  - "drop last input", "add input" (a copy of the last), "drop last
 *    output", "add output" (a copy of the last), each when there is a last;
 *  - for each attribute of the op's catalog spec (ATTRS), whether the
 *    valid launch gives it or not (then its default is the base value):
 *    int: "attr N+1", "attr N-1", "attr N=-1", "attr N=2^40";
 *    bool: "attr N=2"; float: "attr N=nan", "attr N=-1.0", "attr N=0.0";
 *    ints: "attr N=[]", "attr N+[last]" (the last entry repeated, 1 for an
 *    empty list), "attr N[j]+1" and "attr N[j]=-1" for each entry j;
 *    floats: "attr N=[]", "attr N+[last]"; str: "attr N=bogus";
 *    dtype: "attr N=99". A value equal to the base one is left out (no
 *    "attr axis=-1" when axis is -1, no "attr N=[]" for an empty list).
 *
 * Data pointers are kept from the valid launch (an added tensor shares its
 * original's), so a caller that runs a mutant must give each tensor a
 * buffer large enough for every mutant of it: the dims grow by at most 1.
 */

/** Capacity of a mutant: tensors per side, attributes, list entries. */
#define KEEL_KIT_MUTANT_MAX_TENSORS 16
#define KEEL_KIT_MUTANT_MAX_ATTRS 16
#define KEEL_KIT_MUTANT_MAX_LIST 16

/** One mutated launch. `args` points into the struct's own storage (and,
 *  for names and lists not mutated, into the valid launch's), so the
 *  mutant lives as long as both. */
typedef struct keel_kit_mutant {
    keel_kernel_args args;
    keel_tensor_desc in[KEEL_KIT_MUTANT_MAX_TENSORS];
    keel_tensor_desc out[KEEL_KIT_MUTANT_MAX_TENSORS];
    keel_attr attrs[KEEL_KIT_MUTANT_MAX_ATTRS];
    char names[KEEL_KIT_MUTANT_MAX_ATTRS][32];
    int64_t ints[KEEL_KIT_MUTANT_MAX_ATTRS][KEEL_KIT_MUTANT_MAX_LIST];
    double floats[KEEL_KIT_MUTANT_MAX_ATTRS][KEEL_KIT_MUTANT_MAX_LIST];
    char what[96];
} keel_kit_mutant;

/** Number of mutants of the valid launch `valid` of catalog op `op` (0 for
 *  an op out of range, a NULL launch, or one larger than a mutant holds). */
int keel_kit_mutant_count(int op, const keel_kernel_args *valid);
/** Fill `m` with mutant k (0 <= k < keel_kit_mutant_count) of `valid`;
 *  false (and `m` untouched) when there is no such mutant. */
bool keel_kit_mutate(int op, const keel_kernel_args *valid, int k,
                     keel_kit_mutant *m);

/* (end of bad-argument cases) */

#ifdef __cplusplus
}
#endif

#endif /* KEEL_KIT_H */
