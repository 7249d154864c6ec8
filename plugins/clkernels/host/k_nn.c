/*
 * keel OpenCL C kernels — nn family, host side (OpenCL C in
 * plugins/clkernels/nn.cl).
 */
#include "ok.h"

const struct ok_entry ok_kernels_nn[] = {
    {NULL, 0, NULL},
};
