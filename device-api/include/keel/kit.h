/*
 * keel kernel kit — what every plugin's kernels share.
 *
 * The ABI (device_api.h) says what a kernel receives; this library checks
 * it. For every op of the catalog, keel_kit_check() validates one launch's
 * keel_kernel_args at the descriptor level: the number of inputs and
 * outputs, every descriptor (dtype known, 0 <= ndim <= KEEL_MAX_DIMS, no
 * negative dimension, element count and byte span within int64_t), the
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
 * and pool geometry, float16/bfloat16 conversion, and a dense/strided
 * iteration plan. The Philox reference stays in philox.h.
 *
 * Use: link libkeel-kit (static, C11, no dependencies beyond libc and
 * libm):  cc $(pkg-config --cflags --libs keel-kit) ...
 * A plugin that does not link it still works: the core never requires it.
 * Thread-safe: the kit keeps no state.
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
#define KEEL_KIT_VERSION 1

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
 * Geometry of a conv2d view: `big` is the conv2d's input side (x of conv2d,
 * the output of a transposed conv), `small` its output side. Paddings are
 * resolved (SAME, VALID, 1/2/4 values); `pad` is top, bottom, left, right.
 */
typedef struct keel_kit_conv {
    int64_t n, c, h, w;    /* big side      */
    int64_t o, oh, ow;     /* small side    */
    int64_t kh, kw, sh, sw, dh, dw;
    int64_t pad[4];
    int64_t groups;
    int64_t output_padding[2]; /* transposed conv only, else 0 */
} keel_kit_conv;

/** Conv geometry of a conv2d (transpose false) or conv2d_transpose launch
 *  from its descriptors: x, weight and the output, or for the *_grad ops
 *  (x, weight, dout). Validates as keel_kit_check does. */
keel_status keel_kit_conv_geometry(const keel_kernel_args *a, bool transpose,
                                   const keel_tensor_desc *big,
                                   const keel_tensor_desc *weight,
                                   const keel_tensor_desc *small,
                                   keel_kit_conv *g, keel_kit_msg *msg);

/** Pooling geometry: window, stride and resolved paddings per spatial dim,
 *  plus the input and output planes. For adaptive pooling the window of
 *  output o along a dim of size in/out is [floor(o*in/out),
 *  ceil((o+1)*in/out)); kh, kw, sh, sw are then 0. */
typedef struct keel_kit_pool {
    int64_t n, c, h, w, oh, ow;
    int64_t kh, kw, sh, sw;
    int64_t pad[4]; /* top, bottom, left, right */
    bool ceil_mode, exclusive, adaptive;
} keel_kit_pool;

/** kind: 0 max_pool2d, 1 avg_pool2d, 2 adaptive_avg_pool2d. `x` and `out`
 *  are the forward input and output (for the *_grad ops: x and dx's
 *  counterpart dout). */
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

/* (end of reduce family) */

/* ---- manip family (rules_manip.c) -------------------------------------------- */

/* (end of manip family) */

/* ---- linalg family (rules_linalg.c) ------------------------------------------ */

/* (end of linalg family) */

/* ---- conv family (rules_conv.c) ------------------------------------------------ */

/* (end of conv family) */

/* ---- nn family (rules_nn.c) ---------------------------------------------------- */

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
