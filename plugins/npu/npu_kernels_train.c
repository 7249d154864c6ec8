/*
 * keel Ascend NPU plugin — aclnn kernels for layer_norm, batch_norm, cross_entropy and the optimizer updates
 * (see npu_internal.h; the shared launch path is in npu_kernels.c).
 *
 * Not written yet: lookup offers nothing, so these ops take the CPU
 * fallback.
 */
#include <keel/kit.h>

#include "npu_internal.h"

void npu_kernels_train_load(void *opapi)
{
    (void)opapi;
}

void npu_kernels_train_unload(void)
{
}

keel_status npu_kernels_train_lookup(const char *op_name, keel_dtype dtype,
                                  keel_kernel *kernel)
{
    (void)op_name;
    (void)dtype;
    (void)kernel;
    return KEEL_STATUS_NOT_FOUND;
}
