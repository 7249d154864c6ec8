/*
 * keel GPU kernels, HIP build — the vendor GEMM backend: rocBLAS
 * (ck_gemm.h).
 *
 * rocBLAS is column-major: the row-major C = A B of ckl_gemm is computed as
 * the column-major C^T = B^T A^T, exactly as the cuBLAS backend does.
 * Compute types: float32 in float, float16/bfloat16 inputs and outputs
 * with float accumulation (rocblas_datatype_f32_r compute type), float64
 * in double. rocBLAS's _ex GEMMs write a separate D matrix; here D is C
 * itself (same pointer, leading dimension and stride), which rocBLAS
 * allows.
 *
 * Handles: one per device, created lazily the first time that device runs
 * a GEMM; rocblas_set_stream and the GEMM run under that device's mutex.
 * The handles live for the process.
 *
 * rocBLAS is not linked and there is no rocBLAS header at build time (the
 * distributions the HIP plugin is built on do not ship one): the few
 * types, enum values and entry points used are declared below from
 * rocBLAS's public API reference, and the first GEMM dlopens the library
 * (librocblas.so.4, .so.3, .so.2, .so.0, then the unversioned name: ROCm
 * releases differ in the soname; the calls used here have kept their
 * signatures across them). When it cannot be loaded, ckl_gemm runs the
 * plugin's own kernel (k_gemm.cu) instead.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ck.cuh"
#include "ck_gemm.h"

namespace {

/* ---- the rocBLAS API used (rocblas-types.h, rocblas-functions.h) --------
 *
 * rocBLAS's enums are plain C enums (int-sized); rocblas_int is a 32-bit
 * int in the default (LP64) library, rocblas_stride a 64-bit int. The
 * handle is an opaque pointer. */

typedef struct rb_handle_opaque *rb_handle; /* rocblas_handle */
typedef int32_t rb_int;                     /* rocblas_int */
typedef int64_t rb_stride;                  /* rocblas_stride */

/* rocblas_status */
enum rb_status : int {
    RB_SUCCESS = 0,
    RB_INVALID_HANDLE = 1,
    RB_NOT_IMPLEMENTED = 2,
    RB_INVALID_POINTER = 3,
    RB_INVALID_SIZE = 4,
    RB_MEMORY_ERROR = 5,
    RB_INTERNAL_ERROR = 6,
    RB_PERF_DEGRADED = 7,
    RB_SIZE_QUERY_MISMATCH = 8,
    RB_SIZE_INCREASED = 9,
    RB_SIZE_UNCHANGED = 10,
    RB_INVALID_VALUE = 11,
    RB_CONTINUE = 12,
    RB_CHECK_NUMERICS_FAIL = 13,
    RB_EXCLUDED_FROM_BUILD = 14, /* newer releases */
    RB_ARCH_MISMATCH = 15,       /* newer releases */
};

/* rocblas_operation */
enum rb_operation : int {
    RB_OP_NONE = 111,
    RB_OP_TRANSPOSE = 112,
};

/* rocblas_datatype (the real types used here) */
enum rb_datatype : int {
    RB_F16_R = 150,
    RB_F32_R = 151,
    RB_F64_R = 152,
    RB_BF16_R = 168,
};

/* rocblas_gemm_algo */
enum rb_gemm_algo : int {
    RB_GEMM_ALGO_STANDARD = 0,
};

/* rocblas_gemm_flags: none */
const uint32_t RB_GEMM_FLAGS_NONE = 0;

/* rocblas_create_handle, rocblas_destroy_handle, rocblas_set_stream */
typedef rb_status (*create_fn)(rb_handle *handle);
typedef rb_status (*destroy_fn)(rb_handle handle);
typedef rb_status (*set_stream_fn)(rb_handle handle, hipStream_t stream);

/* rocblas_gemm_ex: D = alpha op(A) op(B) + beta C, column-major. alpha and
 * beta are host pointers (the default pointer mode) of the compute type. */
typedef rb_status (*gemm_fn)(rb_handle handle, rb_operation trans_a,
                             rb_operation trans_b, rb_int m, rb_int n,
                             rb_int k, const void *alpha, const void *a,
                             rb_datatype a_type, rb_int lda, const void *b,
                             rb_datatype b_type, rb_int ldb,
                             const void *beta, const void *c,
                             rb_datatype c_type, rb_int ldc, void *d,
                             rb_datatype d_type, rb_int ldd,
                             rb_datatype compute_type, rb_gemm_algo algo,
                             int32_t solution_index, uint32_t flags);

/* rocblas_gemm_strided_batched_ex: the same over batch_count matrices,
 * each operand with its own stride (elements) between matrices. */
typedef rb_status (*gemm_batched_fn)(
    rb_handle handle, rb_operation trans_a, rb_operation trans_b, rb_int m,
    rb_int n, rb_int k, const void *alpha, const void *a, rb_datatype a_type,
    rb_int lda, rb_stride stride_a, const void *b, rb_datatype b_type,
    rb_int ldb, rb_stride stride_b, const void *beta, const void *c,
    rb_datatype c_type, rb_int ldc, rb_stride stride_c, void *d,
    rb_datatype d_type, rb_int ldd, rb_stride stride_d, rb_int batch_count,
    rb_datatype compute_type, rb_gemm_algo algo, int32_t solution_index,
    uint32_t flags);

/* rocblas_status_to_string */
typedef const char *(*status_name_fn)(rb_status status);

/* ---- rocBLAS, loaded on first use ----------------------------------------- */

struct rocblas_api {
    create_fn create;
    destroy_fn destroy;
    set_stream_fn set_stream;
    gemm_fn gemm;
    gemm_batched_fn gemm_batched;
    status_name_fn status_name; /* optional: older releases lack it */
};

/* Newest first: a system with several ROCm releases installed gets the
 * most recent rocBLAS that its loader path offers. */
const char *const rb_sonames[] = {
    "librocblas.so.4", "librocblas.so.3", "librocblas.so.2",
    "librocblas.so.0", "librocblas.so",
};

rocblas_api g_rb;
bool g_rb_ok;
const char *g_rb_soname; /* the one that loaded */
char g_rb_error[320];
pthread_once_t g_rb_once = PTHREAD_ONCE_INIT;

template <class F> bool rb_sym(void *h, const char *name, F *fp)
{
    void *p = dlsym(h, name);
    memcpy(fp, &p, sizeof(p));
    return p != nullptr;
}

void rocblas_load(void)
{
    const char *missing = nullptr, *err = nullptr;
    void *h = nullptr;

    for (size_t i = 0; i < sizeof(rb_sonames) / sizeof(rb_sonames[0]); i++) {
        h = dlopen(rb_sonames[i], RTLD_NOW | RTLD_LOCAL);
        if (h) {
            g_rb_soname = rb_sonames[i];
            break;
        }
        err = dlerror(); /* keep the last one: the unversioned name's */
    }
    if (!h) {
        snprintf(g_rb_error, sizeof(g_rb_error),
                 "cannot load librocblas.so.*: %s",
                 err ? err : "unknown error");
        return;
    }
    if (!rb_sym(h, "rocblas_create_handle", &g_rb.create))
        missing = "rocblas_create_handle";
    else if (!rb_sym(h, "rocblas_destroy_handle", &g_rb.destroy))
        missing = "rocblas_destroy_handle";
    else if (!rb_sym(h, "rocblas_set_stream", &g_rb.set_stream))
        missing = "rocblas_set_stream";
    else if (!rb_sym(h, "rocblas_gemm_ex", &g_rb.gemm))
        missing = "rocblas_gemm_ex";
    else if (!rb_sym(h, "rocblas_gemm_strided_batched_ex",
                     &g_rb.gemm_batched))
        missing = "rocblas_gemm_strided_batched_ex";
    if (missing) {
        snprintf(g_rb_error, sizeof(g_rb_error), "%s lacks %s", g_rb_soname,
                 missing);
        dlclose(h);
        g_rb_soname = nullptr;
        return;
    }
    /* Only used for messages; fall back to our own names without it. */
    if (!rb_sym(h, "rocblas_status_to_string", &g_rb.status_name))
        g_rb.status_name = nullptr;
    g_rb_ok = true; /* h stays open for the process, like the handles */
}

const char *status_name(rb_status s)
{
    static const char *const names[] = {
        "rocblas_status_success",
        "rocblas_status_invalid_handle",
        "rocblas_status_not_implemented",
        "rocblas_status_invalid_pointer",
        "rocblas_status_invalid_size",
        "rocblas_status_memory_error",
        "rocblas_status_internal_error",
        "rocblas_status_perf_degraded",
        "rocblas_status_size_query_mismatch",
        "rocblas_status_size_increased",
        "rocblas_status_size_unchanged",
        "rocblas_status_invalid_value",
        "rocblas_status_continue",
        "rocblas_status_check_numerics_fail",
        "rocblas_status_excluded_from_build",
        "rocblas_status_arch_mismatch",
    };

    if (g_rb.status_name) {
        const char *n = g_rb.status_name(s);
        if (n)
            return n;
    }
    if ((int)s >= 0 && (size_t)s < sizeof(names) / sizeof(names[0]))
        return names[s];
    return "unknown rocblas_status";
}

/* ---- rocBLAS handles ------------------------------------------------------ */

#define LG_MAX_DEVICES 64

rb_handle g_handle[LG_MAX_DEVICES];
pthread_mutex_t g_lock[LG_MAX_DEVICES];
pthread_once_t g_once = PTHREAD_ONCE_INIT;

void locks_init(void)
{
    for (int i = 0; i < LG_MAX_DEVICES; i++)
        pthread_mutex_init(&g_lock[i], NULL);
}

keel_status blas_status(rb_status s, const struct ck_launch *l,
                        const char *what)
{
    keel_status st;

    switch (s) {
    case RB_SUCCESS:
    /* The result is computed; rocBLAS only reports that it had less
     * workspace memory than it wanted and took a slower path. */
    case RB_PERF_DEGRADED: return KEEL_STATUS_OK;
    case RB_MEMORY_ERROR: st = KEEL_STATUS_OUT_OF_MEMORY; break;
    case RB_INVALID_POINTER:
    case RB_INVALID_SIZE:
    case RB_INVALID_VALUE: st = KEEL_STATUS_INVALID_ARGUMENT; break;
    case RB_NOT_IMPLEMENTED:
    case RB_EXCLUDED_FROM_BUILD:
    case RB_ARCH_MISMATCH: st = KEEL_STATUS_NOT_SUPPORTED; break;
    case RB_INVALID_HANDLE: st = KEEL_STATUS_NOT_INITIALIZED; break;
    default: st = KEEL_STATUS_INTERNAL; break;
    }
    return ck_fail(st, "%s: %s failed: %s", l->op, what, status_name(s));
}

/* The device's handle, locked; release with handle_release. */
keel_status handle_acquire(const struct ck_launch *l, rb_handle *h)
{
    int d = l->device;
    rb_status s;

    if (d < 0 || d >= LG_MAX_DEVICES)
        return ck_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: device %d beyond the rocBLAS handle table",
                       l->op, d);
    pthread_once(&g_rb_once, rocblas_load);
    if (!g_rb_ok)
        return ck_fail(KEEL_STATUS_NOT_SUPPORTED, "%s: rocBLAS: %s", l->op,
                       g_rb_error);
    pthread_once(&g_once, locks_init);
    pthread_mutex_lock(&g_lock[d]);
    if (!g_handle[d]) {
        rb_handle nh = NULL;

        /* ck_begin made device d current: rocblas_create_handle binds the
         * handle to the current device. Default pointer mode (host
         * scalars) and default atomics are what the calls below expect. */
        s = g_rb.create(&nh);
        if (s != RB_SUCCESS) {
            pthread_mutex_unlock(&g_lock[d]);
            return blas_status(s, l, "rocblas_create_handle");
        }
        g_handle[d] = nh;
    }
    s = g_rb.set_stream(g_handle[d], l->stream);
    if (s != RB_SUCCESS) {
        pthread_mutex_unlock(&g_lock[d]);
        return blas_status(s, l, "rocblas_set_stream");
    }
    *h = g_handle[d];
    return KEEL_STATUS_OK;
}

void handle_release(const struct ck_launch *l)
{
    pthread_mutex_unlock(&g_lock[l->device]);
}

char g_what[400];

} // namespace

bool ckl_vendor_load(const char **what)
{
    pthread_once(&g_rb_once, rocblas_load);
    if (g_rb_ok)
        snprintf(g_what, sizeof(g_what), "rocBLAS (%s)", g_rb_soname);
    else
        snprintf(g_what, sizeof(g_what), "%s", g_rb_error);
    *what = g_what;
    return g_rb_ok;
}

keel_status ckl_gemm_vendor(CKL_GEMM_PARAMS)
{
    size_t es = keel_dtype_size(dt), ces = keel_dtype_size(cdt);
    rb_datatype ct, cct, comp;
    float f1 = 1.0f, fb = acc ? 1.0f : 0.0f;
    double d1 = 1.0, db = acc ? 1.0 : 0.0;
    const void *alpha = &f1, *beta = &fb;
    rb_handle h;
    keel_status st;

    switch (dt) {
    case KEEL_F32: ct = RB_F32_R; comp = RB_F32_R; break;
    case KEEL_F16: ct = RB_F16_R; comp = RB_F32_R; break;
    case KEEL_BF16: ct = RB_BF16_R; comp = RB_F32_R; break;
    case KEEL_F64:
        ct = RB_F64_R;
        comp = RB_F64_R;
        alpha = &d1;
        beta = &db;
        break;
    default: /* ckl_gemm admits no other */
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: GEMM on %s",
                       l->op, ck_dtype_name(dt));
    }
    cct = cdt != dt ? RB_F32_R : ct;
    if ((st = handle_acquire(l, &h)))
        return st;
    /* Column-major C^T (N x M) = op(B)^T (N x K) op(A)^T (K x M); D = C. */
    rb_operation opb = tb ? RB_OP_TRANSPOSE : RB_OP_NONE;
    rb_operation opa = ta ? RB_OP_TRANSPOSE : RB_OP_NONE;
    if (batch == 1) {
        rb_status s = g_rb.gemm(h, opb, opa, (rb_int)N, (rb_int)M, (rb_int)K,
                                alpha, B, ct, (rb_int)ldb, A, ct, (rb_int)lda,
                                beta, C, cct, (rb_int)ldc, C, cct,
                                (rb_int)ldc, comp, RB_GEMM_ALGO_STANDARD, 0,
                                RB_GEMM_FLAGS_NONE);
        handle_release(l);
        return blas_status(s, l, "rocblas_gemm_ex");
    }
    for (int64_t b0 = 0; b0 < batch; b0 += INT_MAX) {
        int64_t nb = batch - b0 < INT_MAX ? batch - b0 : INT_MAX;
        char *cb = (char *)C + b0 * sc * ces;
        rb_status s = g_rb.gemm_batched(
            h, opb, opa, (rb_int)N, (rb_int)M, (rb_int)K, alpha,
            (const char *)B + b0 * sb * es, ct, (rb_int)ldb, (rb_stride)sb,
            (const char *)A + b0 * sa * es, ct, (rb_int)lda, (rb_stride)sa,
            beta, cb, cct, (rb_int)ldc, (rb_stride)sc, cb, cct, (rb_int)ldc,
            (rb_stride)sc, (rb_int)nb, comp, RB_GEMM_ALGO_STANDARD, 0,
            RB_GEMM_FLAGS_NONE);
        if (s != RB_SUCCESS && s != RB_PERF_DEGRADED) {
            handle_release(l);
            return blas_status(s, l, "rocblas_gemm_strided_batched_ex");
        }
    }
    handle_release(l);
    return KEEL_STATUS_OK;
}
