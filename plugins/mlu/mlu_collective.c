/*
 * keel Cambricon MLU plugin — the collective group. CNCL (libcncl.so) is
 * not used yet: communicators span this process's MLUs and are served by
 * the kit's in-process engine (keel/kit_hostcoll.h), which stages every
 * rank's data through host memory with the synchronous CNRT copies below.
 * Waits end after KEEL_MLU_COLL_TIMEOUT_MS (default 60000) with TIMEOUT.
 */
#include <inttypes.h>
#include <stdio.h>

#include <keel/kit.h>
#include <keel/kit_hostcoll.h>

#include "mlu_internal.h"

static keel_status hc_fail(keel_status st, const char *msg)
{
    return mlu_err(st, "%s", msg);
}

/* get_caps may come before init: only the device range. */
static keel_status hc_device(int32_t device, const char *call)
{
    int32_t n = mlu.nvisible ? mlu.nvisible : mlu.count;

    if (device >= 0 && device < n)
        return KEEL_STATUS_OK;
    return mlu_err(KEEL_STATUS_INVALID_DEVICE, "%s: no device %d (mlu has %d)",
                   call, (int)device, (int)n);
}

static keel_status hc_wait(int32_t device, keel_stream stream, const char *call)
{
    struct keel_stream_s *s;
    keel_status st = mlu_bind(device);

    if (!st)
        st = mlu_queue_of(device, stream, call, &s);
    return st ? st : MLU_RT(mlu.rt.cnrtQueueSync(s->q), device,
                            "cnrtQueueSync (%s)", call);
}

/* The engine may run a rank's copy on any thread: bind the device first. */
static keel_status hc_copy(int32_t device, void *dst, void *src,
                           uint64_t bytes, cnrtMemTransDir_t dir, char *msg,
                           size_t msgn)
{
    cnrtRet_t r = mlu.rt.cnrtSetDevice(mlu.dev[device].ordinal);

    if (r == cnrtSuccess)
        r = mlu.rt.cnrtSyncDevice();
    if (r == cnrtSuccess)
        r = mlu.rt.cnrtMemcpy(dst, src, (size_t)bytes, dir);
    if (r == cnrtSuccess)
        return KEEL_STATUS_OK;
    snprintf(msg, msgn, "cnrtMemcpy(%" PRIu64 " bytes) on mlu:%d: %s (%d)",
             bytes, (int)device, mlu_code_name(r), (int)r);
    return mlu_status_of(r) == KEEL_STATUS_OUT_OF_MEMORY
               ? KEEL_STATUS_OUT_OF_MEMORY
               : KEEL_STATUS_DEVICE_ERROR;
}

static keel_status hc_read(int32_t device, void *dst, keel_dptr src,
                           uint64_t bytes, char *msg, size_t msgn)
{
    return hc_copy(device, dst, MLU_PTR(src), bytes, cnrtMemcpyDevToHost, msg,
                   msgn);
}

static keel_status hc_write(int32_t device, keel_dptr dst, const void *src,
                            uint64_t bytes, char *msg, size_t msgn)
{
    return hc_copy(device, MLU_PTR(dst), (void *)src, bytes,
                   cnrtMemcpyHostToDev, msg, msgn);
}

static const keel_kit_hostcoll mlu_hc = {
    .plugin = "mlu",
    .device_type = "mlu",
    .timeout_env = "KEEL_MLU_COLL_TIMEOUT_MS",
    .env = mlu_getenv,
    .fail = hc_fail,
    .enter = mlu_enter,
    .check_device = hc_device,
    .stream_wait = hc_wait,
    .check_buffer = mlu_check_range,
    .read = hc_read,
    .write = hc_write,
};

KEEL_KIT_HOSTCOLL_OPS(mlu_coll, &mlu_hc);

void mlu_collective_finalize(void)
{
    keel_kit_hc_finalize(&mlu_hc);
}
