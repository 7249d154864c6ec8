/*
 * keel OpenCL plugin — the kernel group's host side.
 *
 * PROGRAM. The OpenCL C sources of plugins/clkernels/ (common.cl first,
 * then one file per op family) are embedded in the plugin at build time
 * and built into ONE program per device on the first launch there, with
 * -DKEEL_HAS_FP64 / -DKEEL_HAS_FP16 when the device reports cl_khr_fp64 /
 * cl_khr_fp16. The built binary is cached on disk (ok_program.c):
 *   $KEEL_OPENCL_CACHE_DIR, else $XDG_CACHE_HOME/keel/opencl, else
 *   ~/.cache/keel/opencl;  KEEL_OPENCL_CACHE=0 turns the cache off.
 * A file is named by the SHA-256 of the sources, the build options, the
 * device's name and version, the driver version and the platform's name;
 * a file the driver refuses is rebuilt from source and replaced.
 *
 * KERNEL NAMES. An OpenCL kernel is named <name>_<sfx>, sfx the dtype's
 * suffix (ok_sfx: f32 f64 f16 bf16 i8 u8 i32 i64 bool). ok_run finds
 * kernels by name; each cl_kernel is created once per device.
 *
 * A kernel entry point (keel_kernel_fn) does:
 *
 *     struct ok_launch l;
 *     keel_status st = ok_begin(a, "add", &l);   kit check, queue, program
 *     if (st) return st;
 *     ... plugin-specific checks (NOT_SUPPORTED layouts) with ok_fail
 *     st = OK_RUN(&l, "add_f32", n, OK_BUF(&l, x->data, bytes_x), ...);
 *     return st;
 *
 * Arguments. OK_BUF(l, dptr, bytes) passes TWO kernel arguments, the
 * buffer and the byte offset of dptr in it (the address table of
 * ocl_internal.h); in OpenCL C declare it with BUF(name) and read it with
 * PTR(type, name) (common.cl). OK_MEM(m) passes a scratch buffer the same
 * way with offset 0. OK_DESC(&kd) passes a struct ok_kdesc by value
 * (struct kdesc in OpenCL C). Scalars: OK_I32, OK_I64, OK_U64, OK_F32,
 * OK_F64 (OK_F64 needs the device's fp64: pass float otherwise).
 *
 * Every launch is enqueued on l.q and nothing waits, as the ABI asks.
 * Scratch buffers (ok_scratch) are released with clReleaseMemObject right
 * after the last launch that uses them is enqueued: OpenCL keeps a buffer
 * alive until the commands that use it have finished.
 */
#ifndef KEEL_OCL_OK_H
#define KEEL_OCL_OK_H

#include "../ocl_internal.h"

#include <keel/kit.h>
#include <keel/op_catalog.h>

struct ok_entry {
    const char *op;  /* catalog name                  */
    uint32_t dtypes; /* KEEL_DTYPE_BIT mask it serves */
    keel_kernel_fn fn;
};

/* One table per family (k_*.c), each ending with {NULL}. */
extern const struct ok_entry ok_kernels_elementwise[];
extern const struct ok_entry ok_kernels_reduce[];
extern const struct ok_entry ok_kernels_linalg[];
extern const struct ok_entry ok_kernels_conv[];
extern const struct ok_entry ok_kernels_nn[];
extern const struct ok_entry ok_kernels_manip[];

struct ok_launch {
    int32_t device;
    struct ocl_device *dev;
    cl_command_queue q;
    const char *op;
};

/* Kit check (keel_kit_check_name), the stream's queue, the device's
 * program (built or loaded on first use). */
keel_status ok_begin(const keel_kernel_args *a, const char *op,
                     struct ok_launch *l);
keel_status ok_fail(keel_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* KEEL_DTYPE_BIT mask of the dtypes `device` has kernels for: float64
 * with cl_khr_fp64, float16 with cl_khr_fp16, the others always. */
uint32_t ok_device_dtype_mask(int32_t device);

/* Suffix of a dtype in kernel names ("f32", ...). */
const char *ok_sfx(keel_dtype dt);

/* A kernel argument. */
enum ok_arg_kind { OK_A_BUF, OK_A_MEM, OK_A_I32, OK_A_I64, OK_A_U64,
                   OK_A_F32, OK_A_F64, OK_A_DESC, OK_A_LOCAL };
struct ok_arg {
    enum ok_arg_kind kind;
    keel_dptr ptr;   /* BUF */
    uint64_t bytes;  /* BUF: bytes used from ptr; LOCAL: local mem bytes */
    cl_mem mem;      /* MEM */
    int64_t i;       /* I32, I64, U64 */
    double f;        /* F32, F64 */
    const void *desc;/* DESC */
};

#define OK_BUF(l_, p_, n_) ((struct ok_arg){.kind = OK_A_BUF, .ptr = (p_), .bytes = (n_)})
#define OK_MEM(m_) ((struct ok_arg){.kind = OK_A_MEM, .mem = (m_)})
#define OK_I32(v_) ((struct ok_arg){.kind = OK_A_I32, .i = (int64_t)(v_)})
#define OK_I64(v_) ((struct ok_arg){.kind = OK_A_I64, .i = (int64_t)(v_)})
#define OK_U64(v_) ((struct ok_arg){.kind = OK_A_U64, .i = (int64_t)(v_)})
#define OK_F32(v_) ((struct ok_arg){.kind = OK_A_F32, .f = (double)(v_)})
#define OK_F64(v_) ((struct ok_arg){.kind = OK_A_F64, .f = (double)(v_)})
#define OK_DESC(d_) ((struct ok_arg){.kind = OK_A_DESC, .desc = (d_)})
/* __local scratch of n bytes (declare `__local T *name` in OpenCL C). */
#define OK_LOCAL(n_) ((struct ok_arg){.kind = OK_A_LOCAL, .bytes = (n_)})

/* Enqueue kernel `name` over `dims` (1..3) global sizes, work-group sizes
 * `local` (NULL: the driver's choice; else each global size is rounded up
 * to a multiple, and the kernel must bound-check). A zero global size
 * enqueues nothing and returns OK. */
keel_status ok_run_nd(const struct ok_launch *l, const char *name, int dims,
                      const size_t *global, const size_t *local,
                      const struct ok_arg *args, int nargs);
/* 1-D, driver-chosen work-group size: one work item per element. */
#define OK_RUN(l_, name_, n_, ...)                                         \
    ok_run_nd((l_), (name_), 1, (size_t[]){(size_t)(n_)}, NULL,            \
              (struct ok_arg[]){__VA_ARGS__},                              \
              (int)(sizeof((struct ok_arg[]){__VA_ARGS__}) /               \
                    sizeof(struct ok_arg)))
/* 1-D with a fixed work-group size wg (global rounded up to wg). */
#define OK_RUN_WG(l_, name_, n_, wg_, ...)                                 \
    ok_run_nd((l_), (name_), 1, (size_t[]){(size_t)(n_)},                  \
              (size_t[]){(size_t)(wg_)}, (struct ok_arg[]){__VA_ARGS__},   \
              (int)(sizeof((struct ok_arg[]){__VA_ARGS__}) /               \
                    sizeof(struct ok_arg)))

/* A device buffer of `bytes` (> 0) for temporaries. */
keel_status ok_scratch(const struct ok_launch *l, size_t bytes, cl_mem *m);
static inline void ok_scratch_release(cl_mem m)
{
    if (m)
        clReleaseMemObject(m);
}
/* Upload `bytes` from host memory into a new scratch buffer (small tables:
 * indices, shapes); the host data may be freed when this returns. */
keel_status ok_scratch_upload(const struct ok_launch *l, const void *src,
                              size_t bytes, cl_mem *m);

/* A descriptor passed by value: the layout of struct kdesc in common.cl. */
struct ok_kdesc {
    cl_long shape[KEEL_MAX_DIMS];
    cl_long stride[KEEL_MAX_DIMS];
    cl_int ndim;
    cl_int pad_;
};
/* kd from a tensor descriptor. */
void ok_kdesc_of(struct ok_kdesc *kd, const keel_tensor_desc *d);
/* kd for reading x in the index space of `out` (ndim/shape of out), with
 * x right-aligned and broadcast dims given stride 0. */
void ok_kdesc_bcast(struct ok_kdesc *kd, const keel_tensor_desc *x,
                    const keel_tensor_desc *out);
/* Bytes spanned by a descriptor's elements from its data address (what
 * OK_BUF needs): 0 for an empty tensor; max offset + 1 elements. Negative
 * strides are refused by ok_begin (NOT_SUPPORTED), so this is exact. */
uint64_t ok_span_bytes(const keel_tensor_desc *d);
/* OK_BUF for a whole descriptor. */
#define OK_T(l_, d_) OK_BUF((l_), (d_)->data, ok_span_bytes(d_))

/* Run the "strided to contiguous" copy of x into a new scratch buffer
 * (row-major, x's dtype). */
keel_status ok_contiguous_copy(const struct ok_launch *l,
                               const keel_tensor_desc *x, cl_mem *m);

#endif /* KEEL_OCL_OK_H */
