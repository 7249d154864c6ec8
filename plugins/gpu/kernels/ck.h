/*
 * keel CUDA plugin — the kernel toolkit's host side, shared by the C files
 * and the .cu files (plain C declarations, extern "C" for nvcc).
 *
 * A kernel entry point (keel_kernel_fn) does, in order:
 *
 *     struct ck_launch l;
 *     keel_status st = ck_begin(a, "add", &l);   device current, stream
 *     if (st) return st;
 *     ... validate the descriptors; on a problem
 *         return ck_fail(KEEL_STATUS_INVALID_ARGUMENT, "add: ...");
 *     ... enqueue one or more kernels on l.stream
 *     return ck_end(&l);                          launch errors, if any
 *
 * Everything is enqueued on the launch's stream and nothing waits for the
 * device, as the ABI asks. Temporary device memory comes from the
 * stream-ordered allocator (ck_scratch / ck_scratch_free), so it needs no
 * synchronisation either.
 *
 * Registration: each category file defines one table of struct ck_entry
 * ending with a {NULL} entry; cuda_kernels.c looks ops up over all tables
 * (first match of name and dtype wins).
 */
#ifndef KEEL_CUDA_CK_H
#define KEEL_CUDA_CK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keel_gpu.h"

#include <keel/device_api.h>
#include <keel/kit.h>
#include <keel/op_catalog.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ck_entry {
    const char *op;  /* catalog name                  */
    uint32_t dtypes; /* KEEL_DTYPE_BIT mask it serves */
    keel_kernel_fn fn;
};

extern const struct ck_entry ck_kernels_core[];
extern const struct ck_entry ck_kernels_elementwise[];
extern const struct ck_entry ck_kernels_reduce[];
extern const struct ck_entry ck_kernels_linalg[];
extern const struct ck_entry ck_kernels_conv[];
extern const struct ck_entry ck_kernels_nn[];
extern const struct ck_entry ck_kernels_manip[];

extern const keel_kernel_ops cuda_kernel_ops;

/* ---- launching ------------------------------------------------------------ */

struct ck_launch {
    int32_t device;
    cudaStream_t stream;
    const char *op;
};

/* Make the device current and resolve the stream. */
keel_status ck_begin(const keel_kernel_args *a, const char *op,
                     struct ck_launch *l);
/* After the launches: report a launch error (bad configuration, no kernel
 * image for this GPU) with the op's name. */
keel_status ck_end(const struct ck_launch *l);
/* A CUDA error from a call made while launching `l`. */
keel_status ck_check(cudaError_t err, const struct ck_launch *l,
                     const char *what);
/* Attach a printf-style message to `st` and return it. */
keel_status ck_fail(keel_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Stream-ordered temporary memory (cudaMallocAsync on l->stream). Freed
 * with ck_scratch_free after the last kernel that uses it is enqueued. */
keel_status ck_scratch(const struct ck_launch *l, size_t bytes, void **p);
void ck_scratch_free(const struct ck_launch *l, void *p);

/* ---- attributes and descriptors: the kit's (keel/kit.h) ----------------- */

static inline const keel_attr *ck_attr(const keel_kernel_args *a,
                                       const char *name)
{
    return keel_kit_attr(a, name);
}
static inline int64_t ck_attr_i(const keel_kernel_args *a, const char *name,
                                int64_t def)
{
    return keel_kit_attr_i(a, name, def);
}
static inline double ck_attr_f(const keel_kernel_args *a, const char *name,
                               double def)
{
    return keel_kit_attr_f(a, name, def);
}
static inline const char *ck_attr_s(const keel_kernel_args *a,
                                    const char *name, const char *def)
{
    return keel_kit_attr_s(a, name, def);
}
static inline const int64_t *ck_attr_ints(const keel_kernel_args *a,
                                          const char *name, int64_t *n)
{
    return keel_kit_attr_ints(a, name, n);
}
static inline const double *ck_attr_floats(const keel_kernel_args *a,
                                           const char *name, int64_t *n)
{
    return keel_kit_attr_floats(a, name, n);
}
static inline int64_t ck_numel(const keel_tensor_desc *d)
{
    return keel_kit_numel(d);
}
static inline bool ck_contig(const keel_tensor_desc *d)
{
    return keel_kit_contiguous(d);
}
static inline int ck_axis(int64_t axis, int ndim)
{
    return keel_kit_axis(axis, ndim);
}
static inline const char *ck_dtype_name(keel_dtype dt)
{
    return keel_kit_dtype_name(dt);
}
static inline bool ck_desc_ok(const keel_tensor_desc *d)
{
    return keel_kit_desc_ok(d);
}
static inline bool ck_same_shape(const keel_tensor_desc *a,
                                 const keel_tensor_desc *b)
{
    return keel_kit_same_shape(a, b);
}
static inline bool ck_float_dtype(keel_dtype dt)
{
    return keel_kit_float_dtype(dt);
}

/* Check arity; on mismatch an INVALID_ARGUMENT naming the op. */
keel_status ck_arity(const keel_kernel_args *a, const char *op, int nin,
                     int nout);

#ifdef __cplusplus
}
#endif

#endif /* KEEL_CUDA_CK_H */
