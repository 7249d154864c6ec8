/* The CUDA driver's place when the plugin's kernels are not built (no
 * nvcc): the cuda column is not computed, and the test says so. */
#include "kc.h"

const struct kc_driver kc_driver_cuda = {"cuda", true, NULL, NULL, NULL, NULL};
const bool kc_have_cuda = false;
