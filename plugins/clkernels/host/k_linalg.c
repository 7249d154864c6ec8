/*
 * keel OpenCL C kernels — linalg family, host side (OpenCL C in
 * plugins/clkernels/linalg.cl).
 */
#include "ok.h"

const struct ok_entry ok_kernels_linalg[] = {
    {NULL, 0, NULL},
};
