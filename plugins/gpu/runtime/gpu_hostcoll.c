/*
 * keel GPU plugins — in-process collectives, the fallback when NCCL (CUDA
 * build) or RCCL (HIP build) cannot be loaded, or when KEEL_GPU_COLL=inprocess
 * asks for them. The kit's engine (keel/kit_hostcoll.h) does the rounds,
 * groups and host reductions; this file gives it the plugin's checks and
 * synchronous copies.
 *
 * Copies are cudaMemcpy/hipMemcpy with the rank's device made current.
 * They run on the legacy default stream, which waits for the device's
 * blocking streams; nothing there waits for the host, so a copy made while
 * another rank's thread waits for its round cannot deadlock.
 *
 * Waits are bounded by KEEL_GPU_COLL_TIMEOUT_MS (default 60000).
 * Not run on a GPU yet: the engine is tested over host memory and through
 * the Level Zero plugin's mock driver; these hooks only compile here.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <keel/kit_hostcoll.h>

#include "cuda_internal.h"

#ifdef KEEL_GPU_HIP
#define HC_PLUGIN "hip"
#define HC_MEMCPY "hipMemcpy"
#else
#define HC_PLUGIN "cuda"
#define HC_MEMCPY "cudaMemcpy"
#endif

static keel_status hc_fail(keel_status st, const char *msg)
{
    return cuda_fail(st, "%s", msg);
}

static keel_status hc_check_device(int32_t device, const char *call)
{
    return cuda_check_device(device, call);
}

static keel_status hc_stream_wait(int32_t device, keel_stream stream,
                                  const char *call)
{
    cudaStream_t s;
    keel_status st = cuda_enter(device, call);

    if (st == KEEL_STATUS_OK)
        st = cuda_stream_resolve(device, stream, call, &s);
    if (st == KEEL_STATUS_OK)
        st = cuda_check(cudaStreamSynchronize(s), device,
                        "cudaStreamSynchronize() before %s", call);
    return st;
}

static keel_status hc_copy(int32_t device, void *dst, const void *src,
                           uint64_t bytes, enum cudaMemcpyKind kind,
                           char *msg, size_t msgn)
{
    cudaError_t err;
    keel_status st = cuda_use_device(device);

    if (st != KEEL_STATUS_OK) {
        snprintf(msg, msgn, "could not make gpu:%d current", (int)device);
        return st;
    }
    err = cudaMemcpy(dst, src, (size_t)bytes, kind);
    if (err == cudaSuccess)
        return KEEL_STATUS_OK;
    (void)cudaGetLastError();
    snprintf(msg, msgn, HC_MEMCPY "(%" PRIu64 " bytes): %s: %s",
             bytes, cudaGetErrorName(err), cudaGetErrorString(err));
    return cuda_status_of(err);
}

static keel_status hc_read(int32_t device, void *dst, keel_dptr src,
                           uint64_t bytes, char *msg, size_t msgn)
{
    return hc_copy(device, dst, CUDA_PTR(src), bytes, cudaMemcpyDeviceToHost,
                   msg, msgn);
}

static keel_status hc_write(int32_t device, keel_dptr dst, const void *src,
                            uint64_t bytes, char *msg, size_t msgn)
{
    return hc_copy(device, CUDA_PTR(dst), src, bytes, cudaMemcpyHostToDevice,
                   msg, msgn);
}

static const keel_kit_hostcoll gpu_hc = {
    .plugin = HC_PLUGIN,
    .device_type = "gpu",
    .timeout_env = "KEEL_GPU_COLL_TIMEOUT_MS",
    .fail = hc_fail,
    .enter = cuda_enter,
    .check_device = hc_check_device,
    .stream_wait = hc_stream_wait,
    .read = hc_read,
    .write = hc_write,
};

KEEL_KIT_HOSTCOLL_OPS(gpu_hostcoll, &gpu_hc);

void gpu_hostcoll_finalize(void)
{
    keel_kit_hc_finalize(&gpu_hc);
}

#ifndef KEEL_CUDA_HAVE_NCCL
/* Built without NCCL's header: the in-process collectives are the group. */
const char *gpu_coll_backend(void)
{
    return "in-process";
}
#endif
