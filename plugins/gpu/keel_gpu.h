/*
 * keel GPU plugins — the portability header of the sources shared by the
 * CUDA plugin (plugins/cuda) and the HIP plugin (plugins/hip).
 *
 * The runtime (plugins/gpu/runtime) and kernel (plugins/gpu/kernels)
 * sources are written once, against the CUDA runtime API's names. The CUDA
 * build compiles them as they are (gcc for the C runtime, nvcc for the
 * kernels). The HIP build defines KEEL_GPU_HIP and compiles the same files
 * (gcc for the C runtime against hip_runtime_api.h, hipcc for the kernels);
 * this header then maps every CUDA name the sources use to its HIP
 * counterpart. HIP mirrors the CUDA runtime call for call, with the same
 * arguments and meanings, so the mapping is a renaming; the few places
 * where the two differ are spelled out below, and the sources test
 * KEEL_GPU_HIP only where a difference is not a name (device properties,
 * libraries, warp width).
 *
 * A name missing here is a compile error in the HIP build, never a silent
 * fallback: add it here, next to its counterpart.
 *
 *   KEEL_GPU_API          "CUDA" or "HIP", for messages
 *   KEEL_GPU_VISIBLE_ENV  the variable that hides devices from the runtime
 *   KEEL_GPU_DRIVER_LIB   the driver library the runtime needs
 */
#ifndef KEEL_GPU_PORT_H
#define KEEL_GPU_PORT_H

#if defined(KEEL_GPU_HIP)

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>

#define KEEL_GPU_API "HIP"
#define KEEL_GPU_VISIBLE_ENV "HIP_VISIBLE_DEVICES"
#define KEEL_GPU_DRIVER_LIB "the amdgpu kernel driver (/dev/kfd)"

/* One name to one name. */
#define cudaDevAttrClockRate hipDeviceAttributeClockRate
#define cudaDevAttrManagedMemory hipDeviceAttributeManagedMemory
#define cudaDeviceCanAccessPeer hipDeviceCanAccessPeer
#define cudaDeviceEnablePeerAccess hipDeviceEnablePeerAccess
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaDeviceGetPCIBusId hipDeviceGetPCIBusId
#define cudaDeviceGetStreamPriorityRange hipDeviceGetStreamPriorityRange
#define cudaDeviceProp hipDeviceProp_t
#define cudaDeviceReset hipDeviceReset
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaDriverGetVersion hipDriverGetVersion
#define cudaErrorInsufficientDriver hipErrorInsufficientDriver
#define cudaErrorInvalidDevice hipErrorInvalidDevice
#define cudaErrorInvalidDevicePointer hipErrorInvalidDevicePointer
#define cudaErrorInvalidMemcpyDirection hipErrorInvalidMemcpyDirection
#define cudaErrorInvalidPitchValue hipErrorInvalidPitchValue
#define cudaErrorInvalidResourceHandle hipErrorInvalidResourceHandle
#define cudaErrorInvalidValue hipErrorInvalidValue
#define cudaErrorMemoryAllocation hipErrorMemoryAllocation
#define cudaErrorNoDevice hipErrorNoDevice
#define cudaErrorNotReady hipErrorNotReady
#define cudaErrorNotSupported hipErrorNotSupported
#define cudaErrorPeerAccessAlreadyEnabled hipErrorPeerAccessAlreadyEnabled
#define cudaError_t hipError_t
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventDefault hipEventDefault
#define cudaEventDestroy hipEventDestroy
#define cudaEventElapsedTime hipEventElapsedTime
#define cudaEventQuery hipEventQuery
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
#define cudaEvent_t hipEvent_t
#define cudaFree hipFree
#define cudaFreeAsync hipFreeAsync
#define cudaFreeHost hipHostFree
#define cudaGetDevice hipGetDevice
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaGetErrorName hipGetErrorName
#define cudaGetErrorString hipGetErrorString
#define cudaGetLastError hipGetLastError
#define cudaHostFn_t hipHostFn_t
#define cudaLaunchHostFunc hipLaunchHostFunc
#define cudaMalloc hipMalloc
#define cudaMallocAsync hipMallocAsync
#define cudaMallocManaged hipMallocManaged
#define cudaMemAttachGlobal hipMemAttachGlobal
#define cudaMemGetInfo hipMemGetInfo
#define cudaMemcpy hipMemcpy
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemcpyDefault hipMemcpyDefault
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyKind hipMemcpyKind
#define cudaMemcpyPeerAsync hipMemcpyPeerAsync
#define cudaMemset hipMemset
#define cudaMemset2DAsync hipMemset2DAsync
#define cudaMemsetAsync hipMemsetAsync
#define cudaRuntimeGetVersion hipRuntimeGetVersion
#define cudaSetDevice hipSetDevice
#define cudaStreamCreateWithPriority hipStreamCreateWithPriority
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaStreamQuery hipStreamQuery
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStreamWaitEvent hipStreamWaitEvent
#define cudaStream_t hipStream_t
#define cudaSuccess hipSuccess

/* Where HIP differs in more than the name. */
/* The legacy default stream: HIP's null stream has the legacy semantics
 * (it waits for, and is waited for by, every blocking stream). */
#define cudaStreamLegacy ((hipStream_t)0)
/* Pinned host memory takes a flags argument in HIP. */
#define cudaMallocHost(p, n) hipHostMalloc((p), (n), hipHostMallocDefault)

#else /* CUDA */

#include <cuda_runtime_api.h>

#define KEEL_GPU_API "CUDA"
#define KEEL_GPU_VISIBLE_ENV "CUDA_VISIBLE_DEVICES"
#define KEEL_GPU_DRIVER_LIB "libcuda.so.1"

#endif

#endif /* KEEL_GPU_PORT_H */
