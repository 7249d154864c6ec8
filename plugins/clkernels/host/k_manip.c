/*
 * keel OpenCL C kernels — manip family, host side (OpenCL C in
 * plugins/clkernels/manip.cl).
 */
#include "ok.h"

const struct ok_entry ok_kernels_manip[] = {
    {NULL, 0, NULL},
};
