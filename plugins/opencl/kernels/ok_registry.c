/*
 * keel OpenCL plugin — kernel lookup over the family tables (ok.h).
 */
#include <string.h>

#include "ok.h"

static const struct ok_entry *const ok_tables[] = {
    ok_kernels_elementwise, ok_kernels_reduce, ok_kernels_linalg,
    ok_kernels_conv,        ok_kernels_nn,     ok_kernels_manip,
};

/* The dtypes a device computes with (keel_device_props.dtype_mask). */
static uint32_t device_dtypes(const struct ocl_device *d)
{
    uint32_t m = KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_BF16) |
                 KEEL_DTYPE_BIT(KEEL_I8) | KEEL_DTYPE_BIT(KEEL_U8) |
                 KEEL_DTYPE_BIT(KEEL_I32) | KEEL_DTYPE_BIT(KEEL_I64) |
                 KEEL_DTYPE_BIT(KEEL_BOOL);
    if (d->fp64)
        m |= KEEL_DTYPE_BIT(KEEL_F64);
    if (d->fp16)
        m |= KEEL_DTYPE_BIT(KEEL_F16);
    return m;
}

uint32_t ok_device_dtype_mask(int32_t device)
{
    if (device < 0 || device >= ocl_g.ndev)
        return 0;
    return device_dtypes(&ocl_g.dev[device]);
}

static keel_status ok_lookup(int32_t device, const char *op, keel_dtype dt,
                             keel_kernel *k)
{
    if (!op || !k)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "kernel lookup: %s is NULL", op ? "kernel" : "op");
    if (device < 0 || device >= ocl_g.ndev)
        return ocl_fail(KEEL_STATUS_INVALID_DEVICE,
                        "kernel lookup: device %d of %d", (int)device,
                        (int)ocl_g.ndev);
    if ((unsigned)dt >= KEEL_DTYPE_COUNT_ ||
        !(device_dtypes(&ocl_g.dev[device]) & KEEL_DTYPE_BIT(dt)))
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

const keel_kernel_ops ocl_kernel_ops = {
    .header = KEEL_TABLE_HEADER(keel_kernel_ops),
    .lookup = ok_lookup,
};
