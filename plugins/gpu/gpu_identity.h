/*
 * keel GPU plugins — the identity both halves of a plugin answer with.
 *
 * Each GPU plugin is two shared libraries (docs/cuda-plugin.md, "Front and
 * backend"): the front, libkeel-cuda.so / libkeel-hip.so, which discovery
 * loads, and the backend with the runtime and the kernels, which the front
 * loads only when there is a device to drive. Whichever of the two answers
 * the core, the plugin must look the same: name, device type, version and
 * description are defined here, once, for both.
 *
 * KEEL_GPU_HIP selects the HIP plugin; KEEL_CUDA_HAVE_KERNELS says whether
 * the backend was built with its kernels (the description says so).
 */
#ifndef KEEL_GPU_IDENTITY_H
#define KEEL_GPU_IDENTITY_H

#ifdef KEEL_GPU_HIP
/* The HIP build of these sources (plugins/hip): AMD Instinct GPUs and
 * Hygon DCUs. Named "hip", of type "gpu" like the CUDA plugin, so "hip:N"
 * always reaches it and "gpu:N" does when it is the gpu plugin with
 * devices. */
#define CUDA_PLUGIN_NAME "hip"
#define CUDA_PLUGIN_VERSION "0.1.0"
#define CUDA_PLUGIN_DEVICE_TYPE "gpu"
#ifdef KEEL_CUDA_HAVE_KERNELS
#define CUDA_PLUGIN_DESCRIPTION                                              \
    "AMD GPUs and Hygon DCUs through the HIP runtime; GEMM on rocBLAS and "  \
    "collectives on RCCL when they load (else the plugin's own)"
#else
#define CUDA_PLUGIN_DESCRIPTION                                              \
    "AMD GPUs and Hygon DCUs through the HIP runtime (built without hipcc: " \
    "no kernels)"
#endif
#else
#define CUDA_PLUGIN_NAME "cuda"
#define CUDA_PLUGIN_VERSION "0.1.0"
#define CUDA_PLUGIN_DEVICE_TYPE "gpu"
#ifdef KEEL_CUDA_HAVE_KERNELS
#define CUDA_PLUGIN_DESCRIPTION \
    "NVIDIA GPUs through the CUDA runtime, cuBLAS and NCCL"
#else
#define CUDA_PLUGIN_DESCRIPTION \
    "NVIDIA GPUs through the CUDA runtime (built without nvcc: no kernels)"
#endif
#endif

#endif /* KEEL_GPU_IDENTITY_H */
