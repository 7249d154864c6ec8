/*
 * keel CUDA plugin — the kernel group: lookup over the category tables, and
 * the host-side helpers of the kernel toolkit (ck.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../cuda_internal.h"
#include "ck.h"

static const struct ck_entry *const tables[] = {
    ck_kernels_core,   ck_kernels_elementwise, ck_kernels_reduce,
    ck_kernels_linalg, ck_kernels_conv,        ck_kernels_nn,
    ck_kernels_manip,
};

static const char *const dtype_names[KEEL_DTYPE_COUNT_] = {
    [KEEL_F32] = "float32", [KEEL_F64] = "float64", [KEEL_F16] = "float16",
    [KEEL_BF16] = "bfloat16", [KEEL_I8] = "int8",   [KEEL_U8] = "uint8",
    [KEEL_I32] = "int32",   [KEEL_I64] = "int64",   [KEEL_BOOL] = "bool",
};

const char *ck_dtype_name(keel_dtype dt)
{
    if ((unsigned)dt < KEEL_DTYPE_COUNT_)
        return dtype_names[dt];
    return "unknown dtype";
}

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
                     "kernel.lookup: no CUDA kernel for %s (%s)", op_name,
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
    if (a->struct_size < sizeof(keel_kernel_args))
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "%s: keel_kernel_args.struct_size %u < %zu", op,
                         (unsigned)a->struct_size, sizeof(keel_kernel_args));
    if ((a->num_inputs && !a->inputs) || (a->num_outputs && !a->outputs) ||
        (a->num_attrs && !a->attrs) || a->num_inputs < 0 ||
        a->num_outputs < 0 || a->num_attrs < 0)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "%s: inconsistent operand or attribute lists", op);
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

/* ---- attributes ------------------------------------------------------------ */

const keel_attr *ck_attr(const keel_kernel_args *a, const char *name)
{
    for (int32_t i = 0; i < a->num_attrs; i++)
        if (a->attrs[i].name && !strcmp(a->attrs[i].name, name))
            return &a->attrs[i];
    return NULL;
}

int64_t ck_attr_i(const keel_kernel_args *a, const char *name, int64_t def)
{
    const keel_attr *t = ck_attr(a, name);

    if (!t)
        return def;
    if (t->type == KEEL_ATTR_FLOAT)
        return (int64_t)t->v.f;
    if (t->type == KEEL_ATTR_INT || t->type == KEEL_ATTR_BOOL ||
        t->type == KEEL_ATTR_DTYPE)
        return t->v.i;
    return def;
}

double ck_attr_f(const keel_kernel_args *a, const char *name, double def)
{
    const keel_attr *t = ck_attr(a, name);

    if (!t)
        return def;
    if (t->type == KEEL_ATTR_FLOAT)
        return t->v.f;
    if (t->type == KEEL_ATTR_INT || t->type == KEEL_ATTR_BOOL)
        return (double)t->v.i;
    return def;
}

const char *ck_attr_s(const keel_kernel_args *a, const char *name,
                      const char *def)
{
    const keel_attr *t = ck_attr(a, name);

    return t && t->type == KEEL_ATTR_STRING && t->v.s ? t->v.s : def;
}

const int64_t *ck_attr_ints(const keel_kernel_args *a, const char *name,
                            int64_t *n)
{
    const keel_attr *t = ck_attr(a, name);

    if (!t || t->type != KEEL_ATTR_INTS) {
        *n = 0;
        return NULL;
    }
    *n = t->v.ints.count;
    return t->v.ints.data;
}

const double *ck_attr_floats(const keel_kernel_args *a, const char *name,
                             int64_t *n)
{
    const keel_attr *t = ck_attr(a, name);

    if (!t || t->type != KEEL_ATTR_FLOATS) {
        *n = 0;
        return NULL;
    }
    *n = t->v.floats.count;
    return t->v.floats.data;
}

/* ---- descriptors ------------------------------------------------------------ */

int64_t ck_numel(const keel_tensor_desc *d)
{
    int64_t n = 1;

    for (int i = 0; i < d->ndim; i++)
        n *= d->shape[i];
    return n;
}

bool ck_contig(const keel_tensor_desc *d)
{
    int64_t want = 1;

    for (int i = d->ndim - 1; i >= 0; i--) {
        if (d->shape[i] == 0)
            return true;
        if (d->shape[i] != 1 && d->strides[i] != want)
            return false;
        want *= d->shape[i];
    }
    return true;
}

int ck_axis(int64_t axis, int ndim)
{
    if (axis < 0)
        axis += ndim;
    return axis >= 0 && axis < ndim ? (int)axis : -1;
}

bool ck_desc_ok(const keel_tensor_desc *d)
{
    int64_t n = 1, lo = 0, hi = 0, es;

    if ((unsigned)d->dtype >= KEEL_DTYPE_COUNT_ || d->ndim < 0 ||
        d->ndim > KEEL_MAX_DIMS)
        return false;
    for (int i = 0; i < d->ndim; i++)
        if (d->shape[i] < 0 || __builtin_mul_overflow(n, d->shape[i], &n))
            return false;
    if (n == 0)
        return true;
    /* The byte span [lo, hi) of the elements must fit in int64_t. */
    for (int i = 0; i < d->ndim; i++) {
        int64_t span;
        if (__builtin_mul_overflow(d->shape[i] - 1, d->strides[i], &span) ||
            (span < 0 ? __builtin_add_overflow(lo, span, &lo)
                      : __builtin_add_overflow(hi, span, &hi)))
            return false;
    }
    es = keel_dtype_size(d->dtype);
    return !__builtin_mul_overflow(lo, es, &lo) &&
           !__builtin_add_overflow(hi, 1, &hi) &&
           !__builtin_mul_overflow(hi, es, &hi) &&
           !__builtin_sub_overflow(hi, lo, &hi);
}

bool ck_same_shape(const keel_tensor_desc *a, const keel_tensor_desc *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

bool ck_float_dtype(keel_dtype dt)
{
    return (unsigned)dt < KEEL_DTYPE_COUNT_ &&
           (KEEL_DT_FLOAT & KEEL_DTYPE_BIT(dt)) != 0;
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
