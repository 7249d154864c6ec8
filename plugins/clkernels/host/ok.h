/*
 * keel OpenCL C kernels — the host side, shared by the OpenCL plugin and
 * the Level Zero (xpu) plugin.
 *
 * The kernel entry points (k_*.c, one file per op family) are written
 * once against this header; each plugin provides the BACKEND functions
 * declared at the end (OpenCL: plugins/opencl/kernels/ok_program.c, Level
 * Zero: plugins/xpu/ze_kernels.c): finding the stream's queue and the
 * device's program, enqueueing a kernel by name, scratch buffers.
 *
 * KERNEL NAMES. An OpenCL C kernel is named <name>_<sfx>, sfx the dtype's
 * suffix (ok_sfx: f32 f64 f16 bf16 i8 u8 i32 i64 bool).
 *
 * A kernel entry point (keel_kernel_fn) does:
 *
 *     struct ok_launch l;
 *     keel_status st = ok_begin(a, "add", &l);   kit check, queue, program
 *     if (st) return st;
 *     ... plugin-specific checks (NOT_SUPPORTED layouts) with ok_fail
 *     return OK_RUN(&l, "add_f32", n, OK_T(&l, x), OK_T(&l, y), OK_T(&l, out),
 *                   OK_I64(n));
 *
 * ok_begin refuses negative strides with NOT_SUPPORTED (the core then
 * runs the op on the CPU), so every descriptor's elements lie at or after
 * its data address.
 *
 * Arguments. OK_BUF(l, dptr, bytes) passes TWO kernel arguments, the
 * buffer and the byte offset of dptr in it; in OpenCL C declare the pair
 * with BUF(name) and read it with PTR(type, name) (common.cl). OK_T(l, d)
 * is OK_BUF for a whole descriptor. OK_MEM(m) passes a scratch buffer the
 * same way, offset 0. OK_DESC(&kd) passes a struct ok_kdesc by value
 * (struct kdesc in OpenCL C). Scalars: OK_I32, OK_I64, OK_U64, OK_F32,
 * OK_F64 (OK_F64 only on devices with float64: pass float otherwise),
 * OK_LOCAL(bytes) a __local buffer.
 *
 * Everything is enqueued on the launch's queue and nothing waits, as the
 * ABI asks. A scratch buffer is released with ok_scratch_release right
 * after the last launch that uses it is enqueued: the backend keeps it
 * alive until that work has finished.
 */
#ifndef KEEL_CLK_OK_H
#define KEEL_CLK_OK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <keel/device_api.h>
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

/* keel_kernel_ops.lookup over the family tables, for both plugins'
 * kernel groups (ok_common.c). */
keel_status ok_kernel_lookup(int32_t device, const char *op, keel_dtype dt,
                             keel_kernel *k);

/* An opaque scratch buffer of the backend. */
typedef struct ok_mem_s *ok_mem;

struct ok_launch {
    int32_t device;
    const char *op;
    void *queue; /* the backend's queue (cl_command_queue, ...) */
    void *dev;   /* the backend's device state                   */
    bool fp64;   /* the device computes float64                  */
    bool cpu;    /* the device is a CPU (PoCL): barriers are dear */
};

/* Kit check (keel_kit_check_name), negative strides refused, then the
 * backend's queue and program. */
keel_status ok_begin(const keel_kernel_args *a, const char *op,
                     struct ok_launch *l);

/* Suffix of a dtype in kernel names ("f32", ...); "" for a bad value. */
const char *ok_sfx(keel_dtype dt);

/* A kernel argument. */
enum ok_arg_kind { OK_A_BUF, OK_A_MEM, OK_A_I32, OK_A_I64, OK_A_U64,
                   OK_A_F32, OK_A_F64, OK_A_DESC, OK_A_LOCAL };
struct ok_arg {
    enum ok_arg_kind kind;
    keel_dptr ptr;    /* BUF */
    uint64_t bytes;   /* BUF: bytes used from ptr; LOCAL: local bytes */
    ok_mem mem;       /* MEM */
    int64_t i;        /* I32, I64, U64 */
    double f;         /* F32, F64 */
    const void *desc; /* DESC: a struct ok_kdesc */
};

#define OK_BUF(l_, p_, n_) \
    ((struct ok_arg){.kind = OK_A_BUF, .ptr = (p_), .bytes = (n_)})
#define OK_T(l_, d_) OK_BUF((l_), (d_)->data, ok_span_bytes(d_))
#define OK_MEM(m_) ((struct ok_arg){.kind = OK_A_MEM, .mem = (m_)})
#define OK_I32(v_) ((struct ok_arg){.kind = OK_A_I32, .i = (int64_t)(v_)})
#define OK_I64(v_) ((struct ok_arg){.kind = OK_A_I64, .i = (int64_t)(v_)})
#define OK_U64(v_) ((struct ok_arg){.kind = OK_A_U64, .i = (int64_t)(v_)})
#define OK_F32(v_) ((struct ok_arg){.kind = OK_A_F32, .f = (double)(v_)})
#define OK_F64(v_) ((struct ok_arg){.kind = OK_A_F64, .f = (double)(v_)})
#define OK_DESC(d_) ((struct ok_arg){.kind = OK_A_DESC, .desc = (d_)})
#define OK_LOCAL(n_) ((struct ok_arg){.kind = OK_A_LOCAL, .bytes = (n_)})

/* Enqueue kernel `name` over `dims` (1..3) global sizes with work-group
 * sizes `local` (NULL: the driver's choice; else each global size is
 * rounded up to a multiple of its local size, and the kernel must bound
 * its work items). A zero global size enqueues nothing and returns OK. */
keel_status ok_run_nd(const struct ok_launch *l, const char *name, int dims,
                      const size_t *global, const size_t *local,
                      const struct ok_arg *args, int nargs);

#define OK_NARGS_(...) \
    ((int)(sizeof((struct ok_arg[]){__VA_ARGS__}) / sizeof(struct ok_arg)))
/* 1-D, driver-chosen work-group size: one work item per element. */
#define OK_RUN(l_, name_, n_, ...)                                         \
    ok_run_nd((l_), (name_), 1, (size_t[]){(size_t)(n_)}, NULL,            \
              (struct ok_arg[]){__VA_ARGS__}, OK_NARGS_(__VA_ARGS__))
/* 1-D with work-group size wg (the global size is rounded up to wg). */
#define OK_RUN_WG(l_, name_, n_, wg_, ...)                                 \
    ok_run_nd((l_), (name_), 1, (size_t[]){(size_t)(n_)},                  \
              (size_t[]){(size_t)(wg_)}, (struct ok_arg[]){__VA_ARGS__},   \
              OK_NARGS_(__VA_ARGS__))

/* A device buffer of `bytes` (> 0) for temporaries. */
keel_status ok_scratch(const struct ok_launch *l, size_t bytes, ok_mem *m);
/* Release after the last launch using it is enqueued (NULL is a no-op). */
void ok_scratch_release(const struct ok_launch *l, ok_mem m);
/* A new scratch buffer holding `bytes` of host data (small tables:
 * indices, offsets); the host data may be freed when this returns. */
keel_status ok_scratch_upload(const struct ok_launch *l, const void *src,
                              size_t bytes, ok_mem *m);

/* Attach a printf-style message to `st` and return it. */
keel_status ok_fail(keel_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- descriptors (ok_common.c) ------------------------------------------ */

/* A descriptor passed by value: the layout of struct kdesc in common.cl. */
struct ok_kdesc {
    int64_t shape[KEEL_MAX_DIMS];
    int64_t stride[KEEL_MAX_DIMS];
    int32_t ndim;
    int32_t pad_;
};
/* kd from a tensor descriptor. */
void ok_kdesc_of(struct ok_kdesc *kd, const keel_tensor_desc *d);
/* kd reading x in the index space of `out` (out's ndim and shape), x
 * right-aligned, broadcast dims with stride 0. */
void ok_kdesc_bcast(struct ok_kdesc *kd, const keel_tensor_desc *x,
                    const keel_tensor_desc *out);
/* Bytes spanned from a descriptor's data address: 0 when empty, else
 * (max element offset + 1) * element size. */
uint64_t ok_span_bytes(const keel_tensor_desc *d);
/* Copy x, any strides, into a new row-major scratch buffer of x's dtype
 * (kernel copy_strided_<elem size> of common.cl). x must be non-empty. */
keel_status ok_contiguous_copy(const struct ok_launch *l,
                               const keel_tensor_desc *x, ok_mem *m);

/* ---- the backend (each plugin provides these) ------------------------- */

/* Number of devices and the dtypes a device has kernels for. */
int32_t ok_backend_device_count(void);
uint32_t ok_backend_dtype_mask(int32_t device);
/* Fill l->queue, l->dev, l->fp64 for a->device and a->stream, building or
 * loading the device's program on first use. */
keel_status ok_backend_begin(const keel_kernel_args *a, struct ok_launch *l);

/* A strided-batched GEMM for the backend's BLAS, row-major:
 *   C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b],  b < batch,
 * op(A) m x k, op(B) k x n, C m x n; A[b] at a + b * stride_a elements. */
struct ok_gemm {
    keel_dtype dtype;           /* F32, F64 or F16 */
    bool trans_a, trans_b;
    int64_t m, n, k, batch;
    double alpha, beta;
    keel_dptr a, b, c;          /* device addresses of batch 0 */
    int64_t lda, ldb, ldc;      /* leading dimensions, elements */
    int64_t stride_a, stride_b, stride_c;
};
/* Run g on the backend's BLAS (CLBlast for OpenCL). NOT_SUPPORTED, with
 * no message and nothing enqueued, when there is none or it has no such
 * routine: the caller then runs its own kernel. */
keel_status ok_backend_gemm(const struct ok_launch *l, const struct ok_gemm *g);
/* Name of the GEMM the backend uses ("CLBlast 1.5.3", or "" for none). */
const char *ok_backend_blas_name(void);

#endif /* KEEL_CLK_OK_H */
