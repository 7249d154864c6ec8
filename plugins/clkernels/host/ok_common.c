/*
 * keel OpenCL C kernels — host side shared by every family: the kernel
 * lookup over the family tables, ok_begin, descriptor helpers (ok.h).
 */
#include <stdio.h>
#include <string.h>

#include "ok.h"

static const struct ok_entry *const ok_tables[] = {
    ok_kernels_elementwise, ok_kernels_reduce, ok_kernels_linalg,
    ok_kernels_conv,        ok_kernels_nn,     ok_kernels_manip,
};

keel_status ok_kernel_lookup(int32_t device, const char *op, keel_dtype dt,
                             keel_kernel *k)
{
    if (!op || !k)
        return ok_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "kernel lookup: %s is NULL", op ? "kernel" : "op");
    if (device < 0 || device >= ok_backend_device_count())
        return ok_fail(KEEL_STATUS_INVALID_DEVICE,
                       "kernel lookup: device %d of %d", (int)device,
                       (int)ok_backend_device_count());
    if ((unsigned)dt >= KEEL_DTYPE_COUNT_ ||
        !(ok_backend_dtype_mask(device) & KEEL_DTYPE_BIT(dt)))
        return KEEL_STATUS_NOT_FOUND;
    for (size_t t = 0; t < sizeof(ok_tables) / sizeof(ok_tables[0]); t++)
        for (const struct ok_entry *e = ok_tables[t]; e->op; e++)
            if ((e->dtypes & KEEL_DTYPE_BIT(dt)) && !strcmp(e->op, op)) {
                k->fn = e->fn;
                k->kernel_data = NULL;
                return KEEL_STATUS_OK;
            }
    return KEEL_STATUS_NOT_FOUND;
}

const char *ok_sfx(keel_dtype dt)
{
    switch (dt) {
    case KEEL_F32: return "f32";
    case KEEL_F64: return "f64";
    case KEEL_F16: return "f16";
    case KEEL_BF16: return "bf16";
    case KEEL_I8: return "i8";
    case KEEL_U8: return "u8";
    case KEEL_I32: return "i32";
    case KEEL_I64: return "i64";
    case KEEL_BOOL: return "bool";
    default: return "";
    }
}

static bool has_negative_stride(const keel_tensor_desc *d)
{
    for (int i = 0; i < d->ndim; i++)
        if (d->strides[i] < 0 && d->shape[i] > 1)
            return true;
    return false;
}

keel_status ok_begin(const keel_kernel_args *a, const char *op,
                     struct ok_launch *l)
{
    keel_kit_msg msg;
    keel_status st;

    if (!a || !l)
        return ok_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: %s is NULL", op,
                       a ? "launch" : "args");
    st = keel_kit_check_name(op, a, &msg);
    if (st != KEEL_STATUS_OK)
        return ok_fail(st, "%s", msg.text);
    for (int i = 0; i < a->num_inputs; i++)
        if (has_negative_stride(&a->inputs[i]))
            return ok_fail(KEEL_STATUS_NOT_SUPPORTED,
                           "%s: input %d has a negative stride", op, i);
    memset(l, 0, sizeof(*l));
    l->device = a->device;
    l->op = op;
    return ok_backend_begin(a, l);
}

void ok_kdesc_of(struct ok_kdesc *kd, const keel_tensor_desc *d)
{
    memset(kd, 0, sizeof(*kd));
    kd->ndim = d->ndim;
    for (int i = 0; i < d->ndim; i++) {
        kd->shape[i] = d->shape[i];
        kd->stride[i] = d->strides[i];
    }
}

void ok_kdesc_bcast(struct ok_kdesc *kd, const keel_tensor_desc *x,
                    const keel_tensor_desc *out)
{
    int lead = out->ndim - x->ndim;

    memset(kd, 0, sizeof(*kd));
    kd->ndim = out->ndim;
    for (int i = 0; i < out->ndim; i++) {
        int j = i - lead;
        kd->shape[i] = out->shape[i];
        kd->stride[i] = (j < 0 || x->shape[j] == 1) ? 0 : x->strides[j];
    }
}

uint64_t ok_span_bytes(const keel_tensor_desc *d)
{
    uint64_t last = 0;

    for (int i = 0; i < d->ndim; i++) {
        if (d->shape[i] == 0)
            return 0;
        if (d->strides[i] > 0)
            last += (uint64_t)(d->shape[i] - 1) * (uint64_t)d->strides[i];
    }
    return (last + 1) * keel_dtype_size(d->dtype);
}

keel_status ok_contiguous_copy(const struct ok_launch *l,
                               const keel_tensor_desc *x, ok_mem *m)
{
    struct ok_kdesc kd;
    int64_t n = keel_kit_numel(x);
    uint32_t es = keel_dtype_size(x->dtype);
    char name[32];
    keel_status st;

    *m = NULL;
    if (n <= 0 || es == 0)
        return ok_fail(KEEL_STATUS_INTERNAL,
                       "%s: contiguous copy of an empty tensor", l->op);
    st = ok_scratch(l, (size_t)n * es, m);
    if (st)
        return st;
    ok_kdesc_of(&kd, x);
    snprintf(name, sizeof(name), "copy_strided_%u", (unsigned)es);
    st = OK_RUN(l, name, n, OK_T(l, x), OK_DESC(&kd), OK_MEM(*m), OK_I64(n));
    if (st) {
        ok_scratch_release(l, *m);
        *m = NULL;
    }
    return st;
}
