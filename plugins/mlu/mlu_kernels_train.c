/*
 * keel Cambricon MLU plugin — CNNL kernels for layer_norm, batch_norm, cross_entropy and the optimizer updates
 * (see mlu_internal.h; the shared parts are in mlu_kernels.c).
 *
 * Not written yet: lookup offers nothing, so these ops take the CPU
 * fallback.
 */
#include <keel/kit.h>

#include "mlu_internal.h"

void mlu_kernels_train_open(void *cnnl)
{
    (void)cnnl;
}

void mlu_kernels_train_close(void)
{
}

keel_status mlu_kernels_train_lookup(const char *op_name, keel_dtype dtype,
                                  keel_kernel *kernel)
{
    (void)op_name;
    (void)dtype;
    (void)kernel;
    return KEEL_STATUS_NOT_FOUND;
}
