/*
 * keel OpenCL C kernels — conv family, host side (OpenCL C in
 * plugins/clkernels/conv.cl).
 */
#include "ok.h"

const struct ok_entry ok_kernels_conv[] = {
    {NULL, 0, NULL},
};
