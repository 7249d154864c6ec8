/*
 * keel Cambricon MLU plugin — CNNL kernels for softmax, log_softmax, matmul, linear, cast, conv2d and conv2d_grad, the pooling ops
 * (see mlu_internal.h; the shared parts are in mlu_kernels.c).
 *
 * Not written yet: lookup offers nothing, so these ops take the CPU
 * fallback.
 */
#include <keel/kit.h>

#include "mlu_internal.h"

void mlu_kernels_nn_open(void *cnnl)
{
    (void)cnnl;
}

void mlu_kernels_nn_close(void)
{
}

keel_status mlu_kernels_nn_lookup(const char *op_name, keel_dtype dtype,
                                  keel_kernel *kernel)
{
    (void)op_name;
    (void)dtype;
    (void)kernel;
    return KEEL_STATUS_NOT_FOUND;
}
