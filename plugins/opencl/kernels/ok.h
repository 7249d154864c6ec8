/*
 * keel OpenCL plugin — its side of the shared kernel host code
 * (plugins/clkernels/host/ok.h): what the OpenCL backend (ok_program.c)
 * and the runtime share.
 */
#ifndef KEEL_OCL_OK_H
#define KEEL_OCL_OK_H

#include "../ocl_internal.h"
#include "../../clkernels/host/ok.h"

/* KEEL_DTYPE_BIT mask of the dtypes `device` has kernels for: float64 with
 * cl_khr_fp64, float16 with cl_khr_fp16, the others always. */
uint32_t ok_device_dtype_mask(int32_t device);

#endif /* KEEL_OCL_OK_H */
