/*
 * keel CUDA plugin — the kernel group: lookup over the category tables, and
 * the host-side helpers of the kernel toolkit (ck.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cuda_internal.h"
#include "ck.h"

static const struct ck_entry *const tables[] = {
    ck_kernels_core,   ck_kernels_elementwise, ck_kernels_reduce,
    ck_kernels_linalg, ck_kernels_conv,        ck_kernels_nn,
    ck_kernels_manip,
};

static keel_status cuda_kernel_lookup(int32_t device, const char *op_name,
                                      keel_dtype dtype, keel_kernel *kernel)
{
    keel_status st;

    if (!op_name || !kernel)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "kernel.lookup: %s is NULL",
                         op_name ? "kernel" : "op_name");
    if ((unsigned)dtype >= KEEL_DTYPE_COUNT_)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "kernel.lookup(%s): dtype %d is not a keel dtype",
                         op_name, (int)dtype);
    st = cuda_check_device(device, "kernel.lookup");
    if (st)
        return st;
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
        for (const struct ck_entry *e = tables[t]; e->op; e++)
            if (!strcmp(e->op, op_name) &&
                (e->dtypes & KEEL_DTYPE_BIT(dtype))) {
                kernel->fn = e->fn;
                kernel->kernel_data = NULL;
                return KEEL_STATUS_OK;
            }
    return cuda_fail(KEEL_STATUS_NOT_FOUND,
                     "kernel.lookup: no " KEEL_GPU_API " kernel for %s (%s)", op_name,
                     ck_dtype_name(dtype));
}

const keel_kernel_ops cuda_kernel_ops = {
    .header = KEEL_TABLE_HEADER(keel_kernel_ops),
    .lookup = cuda_kernel_lookup,
};

/* ---- launching ------------------------------------------------------------ */

keel_status ck_begin(const keel_kernel_args *a, const char *op,
                     struct ck_launch *l)
{
    keel_status st;

    if (!a)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: args is NULL",
                         op);
    if (a->struct_size < KEEL_KERNEL_ARGS_MIN_SIZE)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "%s: keel_kernel_args.struct_size %u < %zu", op,
                         (unsigned)a->struct_size,
                         (size_t)KEEL_KERNEL_ARGS_MIN_SIZE);
    if ((a->num_inputs && !a->inputs) || (a->num_outputs && !a->outputs) ||
        (a->num_attrs && !a->attrs) || a->num_inputs < 0 ||
        a->num_outputs < 0 || a->num_attrs < 0)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "%s: inconsistent operand or attribute lists", op);
    /* The kit's catalog check (keel/kit.h) before the device is touched:
     * after it the descriptors and attributes are what the op's shape
     * rule promises. */
    {
        keel_kit_msg m;
        st = keel_kit_check_name(op, a, &m);
        if (st == KEEL_STATUS_NOT_FOUND)
            return cuda_fail(KEEL_STATUS_INTERNAL, "%s", m.text);
        if (st)
            return cuda_fail(st, "%s", m.text);
    }
    st = cuda_enter(a->device, op);
    if (st)
        return st;
    l->device = a->device;
    l->op = op;
    return cuda_stream_resolve(a->device, a->stream, op, &l->stream);
}

keel_status ck_check(cudaError_t err, const struct ck_launch *l,
                     const char *what)
{
    if (err == cudaSuccess)
        return KEEL_STATUS_OK;
    return cuda_check(err, l->device, "%s: %s", l->op, what);
}

keel_status ck_end(const struct ck_launch *l)
{
    return ck_check(cudaGetLastError(), l, "kernel launch");
}

keel_status ck_fail(keel_status st, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return cuda_fail(st, "%s", msg);
}

keel_status ck_scratch(const struct ck_launch *l, size_t bytes, void **p)
{
    *p = NULL;
    if (!bytes)
        return KEEL_STATUS_OK;
    return ck_check(cudaMallocAsync(p, bytes, l->stream), l,
                    "cudaMallocAsync (scratch)");
}

void ck_scratch_free(const struct ck_launch *l, void *p)
{
    if (p)
        (void)cudaFreeAsync(p, l->stream);
}

keel_status ck_arity(const keel_kernel_args *a, const char *op, int nin,
                     int nout)
{
    if ((nin >= 0 && a->num_inputs != nin) ||
        (nout >= 0 && a->num_outputs != nout))
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "%s: needs %d input(s) and %d output(s), got %d "
                         "and %d",
                         op, nin, nout, (int)a->num_inputs,
                         (int)a->num_outputs);
    return KEEL_STATUS_OK;
}
