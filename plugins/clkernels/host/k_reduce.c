/*
 * keel OpenCL C kernels — reduce family, host side (OpenCL C in
 * plugins/clkernels/reduce.cl).
 */
#include "ok.h"

const struct ok_entry ok_kernels_reduce[] = {
    {NULL, 0, NULL},
};
