/*
 * keel Ascend NPU plugin — aclnn kernels for linear, conv2d and conv2d_grad, the pooling ops
 * (see npu_internal.h; the shared launch path is in npu_kernels.c).
 *
 * Not written yet: lookup offers nothing, so these ops take the CPU
 * fallback.
 */
#include <keel/kit.h>

#include "npu_internal.h"

void npu_kernels_nn_load(void *opapi)
{
    (void)opapi;
}

void npu_kernels_nn_unload(void)
{
}

keel_status npu_kernels_nn_lookup(const char *op_name, keel_dtype dtype,
                                  keel_kernel *kernel)
{
    (void)op_name;
    (void)dtype;
    (void)kernel;
    return KEEL_STATUS_NOT_FOUND;
}
