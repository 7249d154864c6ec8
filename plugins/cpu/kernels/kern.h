/*
 * CPU kernel toolkit: what every CPU kernel uses.
 *
 * A kernel is written as an "impl" that runs with host pointers:
 *
 *     static void add_impl(const struct kcall *k) { ... k->in[0] ... }
 *     static keel_status add(void *data, const keel_kernel_args *a)
 *     {
 *         return cpu_kernel_launch(a, "add", add_impl, NULL);
 *     }
 *
 * cpu_kernel_launch checks the device and the stream, turns every
 * descriptor's device address into a host pointer after checking that the
 * whole strided extent lies inside one live allocation (an out-of-bounds
 * descriptor is an INVALID_ARGUMENT, never a stray write), runs the optional
 * check function (argument validation that may fail), and then runs the impl
 * at once (inline streams) or enqueues a deep copy of the arguments on the
 * stream (KEEL_CPU_ASYNC=1). Impls cannot fail: everything that can be
 * wrong is found by the check before anything runs.
 *
 * Kernels register in a table (struct cpu_kernel_entry) listed in
 * cpu_kernels.c; lookup matches the catalog name and the dtype mask.
 *
 * Hot loops: specialise per dtype with the KDT_* macros, keep inner loops
 * free of calls and of per-element dtype switches, and use cpu_parallel_for
 * for work large enough to share (see KGRAIN).
 */
#ifndef KEEL_CPU_KERN_H
#define KEEL_CPU_KERN_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <keel/device_api.h>
#include <keel/kit.h>
#include <keel/op_catalog.h>
#include <keel/philox.h>

/* Built against a header older than ABI 1.3: kernel args had no 1.3
 * members, so the whole struct is the minimum. */
#ifndef KEEL_KERNEL_ARGS_MIN_SIZE
#define KEEL_KERNEL_ARGS_MIN_SIZE sizeof(keel_kernel_args)
#endif

#include "../cpu_internal.h"

/* ---- instruction sets ------------------------------------------------------ */

/*
 * The SIMD level hand-written kernels may use: what the CPU and the
 * operating system support (CPUID, XGETBV), lowered by KEEL_CPU_ISA
 * (auto | avx512 | avx2 | sse2). Every kernel with an AVX-512 body also has
 * an AVX2 + FMA one and a portable C one, and picks by cpu_isa() at run
 * time, so a forced level exercises exactly the path such a CPU would take.
 *
 *   CPU_ISA_SSE2     the x86-64 baseline (and every non-x86 build)
 *   CPU_ISA_AVX2     AVX2, FMA and F16C, with YMM state enabled
 *   CPU_ISA_AVX512   AVX-512 F, CD, BW, DQ and VL, with ZMM state enabled
 */
enum cpu_isa { CPU_ISA_SSE2 = 0, CPU_ISA_AVX2 = 1, CPU_ISA_AVX512 = 2 };

/* Read KEEL_CPU_ISA (plugin init): INVALID_ARGUMENT with a message for a
 * value that is not one of the names above. A level above what the CPU
 * has is lowered to the CPU's, with a warning in the log. */
keel_status cpu_isa_configure(char *msg, size_t cap);
/* The level in use (detected and lowered as above; detected alone before
 * cpu_isa_configure has run). */
enum cpu_isa cpu_isa(void);
/* What the CPU itself supports. */
enum cpu_isa cpu_isa_detected(void);
/* "avx512", "avx2", "sse2". */
const char *cpu_isa_name(enum cpu_isa isa);
/* Append "; simd: avx512, gemm: ..., conv: ..." to the plugin's
 * description (after init): which implementation each op class uses and
 * why, as `keel devices` shows it. Writes at most cap bytes, always
 * terminated. */
void cpu_kernels_describe(char *buf, size_t cap);

/* ---- launching ------------------------------------------------------------ */

struct kcall {
    const keel_kernel_args *a;
    void *const *in;  /* host address of element [0..0] of each input  */
    void *const *out; /* ... of each output                            */
};

typedef void (*kimpl_fn)(const struct kcall *k);
/* Optional validation before anything runs; report with cpu_err(). */
typedef keel_status (*kcheck_fn)(const keel_kernel_args *a);

keel_status cpu_kernel_launch(const keel_kernel_args *a, const char *op,
                              kimpl_fn impl, kcheck_fn check);

/* A kernel registration. */
struct cpu_kernel_entry {
    const char *op;     /* catalog name                 */
    uint32_t dtypes;    /* KEEL_DTYPE_BIT mask it serves */
    keel_kernel_fn fn;
};

/* Category tables (each file defines one, ending with a {NULL} entry). */
extern const struct cpu_kernel_entry cpu_kernels_core[];
extern const struct cpu_kernel_entry cpu_kernels_elementwise[];
extern const struct cpu_kernel_entry cpu_kernels_reduce[];
extern const struct cpu_kernel_entry cpu_kernels_linalg[];
extern const struct cpu_kernel_entry cpu_kernels_conv[];
extern const struct cpu_kernel_entry cpu_kernels_nn[];
extern const struct cpu_kernel_entry cpu_kernels_manip[];

extern const keel_kernel_ops cpu_kernel_ops;

/* Define a kernel fn that launches `impl` with optional `check`. */
#define KERNEL(name, opname, impl, check)                                    \
    static keel_status name(void *data_, const keel_kernel_args *a_)         \
    {                                                                        \
        (void)data_;                                                         \
        return cpu_kernel_launch(a_, opname, impl, check);                   \
    }

/* ---- attributes ------------------------------------------------------------ */

/* The kit's look-ups (keel/kit.h): the catalog default when absent. */
static inline const keel_attr *kattr(const keel_kernel_args *a,
                                     const char *name)
{
    return keel_kit_attr(a, name);
}
static inline int64_t kattr_i(const keel_kernel_args *a, const char *name,
                              int64_t def)
{
    return keel_kit_attr_i(a, name, def);
}
static inline double kattr_f(const keel_kernel_args *a, const char *name,
                             double def)
{
    return keel_kit_attr_f(a, name, def);
}
static inline const char *kattr_s(const keel_kernel_args *a,
                                  const char *name, const char *def)
{
    return keel_kit_attr_s(a, name, def);
}
/* Integer list; *n receives its length (0 when absent). */
static inline const int64_t *kattr_ints(const keel_kernel_args *a,
                                        const char *name, int64_t *n)
{
    return keel_kit_attr_ints(a, name, n);
}

/* ---- descriptors ------------------------------------------------------------ */

static inline int64_t knumel(const keel_tensor_desc *d)
{
    return keel_kit_numel(d);
}
static inline bool kcontig(const keel_tensor_desc *d)
{
    return keel_kit_contiguous(d);
}
/* Normalised axis in [0, ndim), or -1. */
static inline int kaxis(int64_t axis, int ndim)
{
    return keel_kit_axis(axis, ndim);
}

/* ---- dtype conversion -------------------------------------------------------- */

float cpu_f16_to_f32(uint16_t h);
uint16_t cpu_f32_to_f16(float f);
float cpu_bf16_to_f32(uint16_t h);
uint16_t cpu_f32_to_bf16(float f);
/* Block conversions (F16C when the CPU has it). */
void kf16_to_f32(const uint16_t *src, float *dst, int64_t n);
void kf32_to_f16(const float *src, uint16_t *dst, int64_t n);
void kbf16_to_f32(const uint16_t *src, float *dst, int64_t n);
void kf32_to_bf16(const float *src, uint16_t *dst, int64_t n);

/* Generic element access (slow path: tests, odd dtypes, tiny loops). */
double kload(const void *p, keel_dtype dt);
void kstore(void *p, keel_dtype dt, double v);
int64_t kload_i(const void *p, keel_dtype dt);
void kstore_i(void *p, keel_dtype dt, int64_t v);

/* ---- iteration ------------------------------------------------------------------ */

/*
 * Loop over `ndim`-d index space `shape` for `nops` operands with the given
 * element strides (in elements) and element sizes. Dimensions that are
 * contiguous for every operand are merged first. `row` receives base
 * pointers and byte strides of the innermost dimension and its length; it
 * is called in parallel for disjoint rows when the total is large.
 */
typedef void (*krow_fn)(void *ctx, char *const *p, const int64_t *stride,
                        int64_t n);
void kiter(int nops, void *const *base, const int64_t (*strides)[KEEL_MAX_DIMS],
           const uint32_t *esize, int ndim, const int64_t *shape, krow_fn row,
           void *ctx);

/* Elementwise over a kernel's inputs and outputs (all of one shape, which
 * the core guarantees for elementwise ops). Operand order: outputs first,
 * then inputs. */
void kiter_call(const struct kcall *k, krow_fn row, void *ctx);

/* ---- threads ---------------------------------------------------------------------- */

/* Elements per task below which work is not shared. */
#define KGRAIN 32768

/* fn(ctx, begin, end) over [0, n) in chunks of at least `grain`, on the
 * plugin's thread pool (KEEL_CPU_THREADS threads, default: online CPUs).
 * Runs serially when n < 2 * grain, when called from a pool thread, or when
 * another caller is using the pool. */
typedef void (*kpar_fn)(void *ctx, int64_t begin, int64_t end);
void cpu_parallel_for(int64_t n, int64_t grain, kpar_fn fn, void *ctx);
int cpu_pool_threads(void);
/* The thread count the pool uses (KEEL_CPU_THREADS), without starting it. */
int cpu_pool_configured(void);
void cpu_pool_shutdown(void);

/* malloc for kernel scratch (k_linalg.c); NULL when KEEL_CPU_NO_WORKSPACE
 * is set, so that the tests can drive the allocation-free fallbacks. */
void *cpu_workspace(size_t bytes);

/* o[i] = sqrt(x[i]), vectorised (k_elementwise.c: gcc keeps an errno
 * branch around sqrt() that blocks its own vectorisation). */
void cpu_vsqrt_f32(float *o, const float *x, int64_t n);
void cpu_vsqrt_f64(double *o, const double *x, int64_t n);

/*
 * The activation of fused_linear / fused_conv2d (keel_fused_act), in place on n
 * contiguous elements, over the pool, with the activation ops' own loops
 * (k_elementwise.c), so that a fused result equals the two ops in turn
 * bit for bit. alpha: leaky_relu's negative slope. KEEL_FUSED_ACT_NONE writes
 * nothing.
 *   cpu_act_f32  float32 values; with round_dt KEEL_F16 or KEEL_BF16 each
 *                is first rounded to that dtype (what the unfused op's
 *                float16/bfloat16 output would hold), KEEL_F32: as it is
 *   cpu_act_f64  float64 values
 *   cpu_act      values of any float dtype dt (float16/bfloat16 computed
 *                in float32 and rounded back)
 */
void cpu_act_f32(keel_fused_act act, double alpha, float *p, int64_t n,
                 keel_dtype round_dt);
void cpu_act_f64(keel_fused_act act, double alpha, double *p, int64_t n);
void cpu_act(keel_fused_act act, double alpha, keel_dtype dt, void *p, int64_t n);

#endif /* KEEL_CPU_KERN_H */
