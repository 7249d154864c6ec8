// Configure-time probes of plugins/hip/meson.build: does hipcc build for a
// target, and (with KEEL_HIP_PROBE_ROCPRIM) are rocPRIM's headers there.
#include <hip/hip_runtime.h>
#ifdef KEEL_HIP_PROBE_ROCPRIM
#include <rocprim/device/device_radix_sort.hpp>
#endif

__global__ void keel_hip_probe(int *p)
{
    p[threadIdx.x] = warpSize;
}
