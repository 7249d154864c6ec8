/*
 * keel Level Zero plugin — collective group: communicators in ONE process
 * across this plugin's devices, staged through host memory by the kit's
 * engine (include/keel/kit_hostcoll.h: rounds, groups, timeouts, the host
 * reductions). This file gives the engine the plugin's own checks and
 * synchronous copies (the device's synchronous command list).
 *
 * Waits are bounded by KEEL_XPU_COLL_TIMEOUT_MS (default 60000) and then
 * return TIMEOUT.
 */
#include <inttypes.h>
#include <stdio.h>

#include <keel/kit.h>
#include <keel/kit_hostcoll.h>

#include "ze_internal.h"

static keel_status zc_fail(keel_status st, const char *msg)
{
    return ze_fail(st, "%s", msg);
}

/* get_caps may come before init: only the range, as probed. */
static keel_status zc_check_device(int32_t device, const char *call)
{
    if (device < 0 || device >= ze_g.ndev)
        return ze_fail(KEEL_STATUS_INVALID_DEVICE,
                       "%s: device %d does not exist (levelzero has %d)", call,
                       (int)device, (int)ze_g.ndev);
    return KEEL_STATUS_OK;
}

static keel_status zc_stream_wait(int32_t device, keel_stream stream,
                                  const char *call)
{
    struct keel_stream_s *s;
    keel_status st = ze_stream_resolve(device, stream, call, &s);

    return st ? st : ze_stream_wait(s, call);
}

static keel_status zc_check_buffer(int32_t device, keel_dptr p,
                                   uint64_t bytes, const char *call)
{
    return ze_mem_check(device, p, bytes, call);
}

/* A synchronous copy on the device's synchronous list. */
static keel_status zc_copy(int32_t device, void *dst, const void *src,
                           uint64_t bytes, char *msg, size_t msgn)
{
    struct ze_device *d = &ze_g.dev[device];
    ze_result_t zr;

    pthread_mutex_lock(&d->sync_mu);
    zr = zeCommandListAppendMemoryCopy(d->sync_list, dst, src, (size_t)bytes,
                                       NULL, 0, NULL);
    pthread_mutex_unlock(&d->sync_mu);
    if (zr == ZE_RESULT_SUCCESS)
        return KEEL_STATUS_OK;
    snprintf(msg, msgn, "zeCommandListAppendMemoryCopy(%" PRIu64 " bytes): %s",
             bytes, ze_result_name(zr));
    return ze_status_of(zr) == KEEL_STATUS_OUT_OF_MEMORY
               ? KEEL_STATUS_OUT_OF_MEMORY
               : KEEL_STATUS_DEVICE_ERROR;
}

static keel_status zc_read(int32_t device, void *dst, keel_dptr src,
                           uint64_t bytes, char *msg, size_t msgn)
{
    return zc_copy(device, dst, ZE_PTR(src), bytes, msg, msgn);
}

static keel_status zc_write(int32_t device, keel_dptr dst, const void *src,
                            uint64_t bytes, char *msg, size_t msgn)
{
    return zc_copy(device, ZE_PTR(dst), src, bytes, msg, msgn);
}

static const keel_kit_hostcoll zc_backend = {
    .plugin = "levelzero",
    .device_type = "xpu",
    .timeout_env = "KEEL_XPU_COLL_TIMEOUT_MS",
    .env = ze_env,
    .fail = zc_fail,
    .enter = ze_enter,
    .check_device = zc_check_device,
    .stream_wait = zc_stream_wait,
    .check_buffer = zc_check_buffer,
    .read = zc_read,
    .write = zc_write,
};

KEEL_KIT_HOSTCOLL_OPS(ze_collective, &zc_backend);

void ze_collective_finalize(void)
{
    keel_kit_hc_finalize(&zc_backend);
}
