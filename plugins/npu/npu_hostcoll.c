/*
 * keel Ascend NPU plugin — in-process collectives, the fallback when
 * libhccl.so cannot be loaded (or KEEL_NPU_COLL=inprocess asks for them).
 * The kit's engine (keel/kit_hostcoll.h) stages every rank's data through
 * host memory; this file gives it the plugin's checks and synchronous ACL
 * copies. Communicators then span this process's NPUs only, with
 * 128-byte ids. Waits end after KEEL_NPU_COLL_TIMEOUT_MS (default 60000).
 */
#include <stdio.h>

#include <keel/kit_hostcoll.h>

#include "npu_internal.h"

static keel_status hc_fail(keel_status st, const char *msg)
{
    return npu_fail(st, "%s", msg);
}

/* get_caps may come before init: only the device range. */
static keel_status hc_device(int32_t device, const char *call)
{
    int32_t n = 0;

    npu_device_count(&n);
    if (device >= 0 && device < n)
        return KEEL_STATUS_OK;
    return npu_fail(KEEL_STATUS_INVALID_DEVICE,
                    "%s: device %d does not exist (npu has %d)", call,
                    (int)device, (int)n);
}

static keel_status hc_wait(int32_t device, keel_stream stream,
                           const char *call)
{
    struct keel_stream_s *s;
    keel_status st = npu_enter(device, call);

    if (!st)
        st = npu_stream_get(device, stream, call, &s);
    return st ? st : npu_check(ACL.aclrtSynchronizeStream(s->s), device,
                               "aclrtSynchronizeStream (%s)", call);
}

/* The plugin's own synchronous copies (context, range checks, messages). */
static keel_status hc_read(int32_t device, void *dst, keel_dptr src,
                           uint64_t bytes, char *msg, size_t msgn)
{
    keel_status st = npu_memory_ops.copy_d2h(device, dst, src, bytes);

    if (st)
        snprintf(msg, msgn, "copy_d2h of %llu bytes on npu:%d failed "
                 "(status %d)", (unsigned long long)bytes, (int)device,
                 (int)st);
    return st;
}

static keel_status hc_write(int32_t device, keel_dptr dst, const void *src,
                            uint64_t bytes, char *msg, size_t msgn)
{
    keel_status st = npu_memory_ops.copy_h2d(device, dst, src, bytes);

    if (st)
        snprintf(msg, msgn, "copy_h2d of %llu bytes on npu:%d failed "
                 "(status %d)", (unsigned long long)bytes, (int)device,
                 (int)st);
    return st;
}

static keel_status hc_buffer(int32_t device, keel_dptr p, uint64_t bytes,
                             const char *call)
{
    return npu_mem_check(device, p, bytes, call);
}

static const keel_kit_hostcoll npu_hc = {
    .plugin = "npu",
    .device_type = "npu",
    .timeout_env = "KEEL_NPU_COLL_TIMEOUT_MS",
    .env = npu_env,
    .fail = hc_fail,
    .enter = npu_enter,
    .check_device = hc_device,
    .stream_wait = hc_wait,
    .check_buffer = hc_buffer,
    .read = hc_read,
    .write = hc_write,
};

KEEL_KIT_HOSTCOLL_OPS(npu_hostcoll, &npu_hc);

void npu_hostcoll_finalize(void)
{
    keel_kit_hc_finalize(&npu_hc);
}
