/*
 * keel Cambricon MLU plugin — the memory group on CNRT. The copy direction
 * (cnrtMemTransDir_t) always follows from the ABI call, never from looking
 * at the addresses; synchronous calls first wait for the device
 * (cnrtSyncDevice), since the ABI orders them after all earlier work.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "mlu_internal.h"

static const char *dir_name(cnrtMemTransDir_t d)
{
    switch (d) {
    case cnrtMemcpyHostToDev: return "cnrtMemcpyHostToDev";
    case cnrtMemcpyDevToHost: return "cnrtMemcpyDevToHost";
    case cnrtMemcpyDevToDev: return "cnrtMemcpyDevToDev";
    default: return "cnrtMemTransDir_t";
    }
}

keel_status mlu_check_range(int32_t dev, keel_dptr p, uint64_t len,
                            const char *call)
{
    if (!p)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: null device address on mlu:%d", call, (int)dev);
    if (p + len < p)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: 0x%" PRIx64 " + %" PRIu64 " wraps", call, p, len);
    if (!mlu_find((uintptr_t)p, len, dev, MLU_DEV_MEM, NULL))
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: 0x%" PRIx64 " (+%" PRIu64 " bytes) is not in one "
                       "live allocation of mlu:%d",
                       call, p, len, (int)dev);
    return KEEL_STATUS_OK;
}

static keel_status wait_device(int32_t dev, const char *call)
{
    return MLU_RT(mlu.rt.cnrtSyncDevice(), dev, "cnrtSyncDevice (before %s)",
                  call);
}

static keel_status mlu_alloc(int32_t device, uint64_t size, keel_dptr *ptr)
{
    void *p = NULL;
    keel_status st;
    uint64_t cap;

    if (!ptr)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT, "alloc: ptr is NULL");
    *ptr = 0;
    if ((st = mlu_enter(device, "alloc")) || size == 0)
        return st;
    cap = mlu.dev[device].mem_bytes;
    if (size > SIZE_MAX || (cap && size > cap))
        return mlu_err(KEEL_STATUS_OUT_OF_MEMORY,
                       "alloc: %" PRIu64 " bytes is more than mlu:%d has "
                       "(%" PRIu64 ")",
                       size, (int)device, cap);
    st = MLU_RT_ALLOC(mlu.rt.cnrtMalloc(&p, (size_t)size), device,
                      "cnrtMalloc(%" PRIu64 " bytes)", size);
    if (st)
        return st;
    if (!p || (uintptr_t)p % MLU_ALLOC_ALIGNMENT) {
        if (p)
            mlu.rt.cnrtFree(p);
        return mlu_err(p ? KEEL_STATUS_INTERNAL : KEEL_STATUS_OUT_OF_MEMORY,
                       "cnrtMalloc on mlu:%d gave %p (NULL or not %u-byte "
                       "aligned)",
                       (int)device, p, MLU_ALLOC_ALIGNMENT);
    }
    if (!mlu_track((uintptr_t)p, size, device, MLU_DEV_MEM)) {
        mlu.rt.cnrtFree(p);
        return mlu_err(KEEL_STATUS_OUT_OF_MEMORY,
                       "alloc: no host memory to track the block");
    }
    atomic_fetch_add(&mlu.dev[device].in_use, size);
    *ptr = (keel_dptr)(uintptr_t)p;
    return KEEL_STATUS_OK;
}

static keel_status mlu_free(int32_t device, keel_dptr ptr)
{
    struct mlu_item it;
    keel_status st = mlu_enter(device, "free");

    if (st || !ptr)
        return st;
    if (!mlu_forget((uintptr_t)ptr, device, MLU_DEV_MEM, &it))
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "free: 0x%" PRIx64 " is not a live allocation of "
                       "mlu:%d",
                       ptr, (int)device);
    atomic_fetch_sub(&mlu.dev[device].in_use, it.len);
    return MLU_RT(mlu.rt.cnrtFree(MLU_PTR(ptr)), device, "cnrtFree(0x%" PRIx64
                  ")", ptr);
}

static keel_status mlu_host_alloc(int32_t device, uint64_t size, void **ptr)
{
    void *p = NULL;
    keel_status st;

    if (!ptr)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT, "host_alloc: ptr is NULL");
    *ptr = NULL;
    if ((st = mlu_enter(device, "host_alloc")) || size == 0)
        return st;
    if (size > SIZE_MAX)
        return mlu_err(KEEL_STATUS_OUT_OF_MEMORY, "host_alloc: too large");
    st = MLU_RT_ALLOC(mlu.rt.cnrtHostMalloc(&p, (size_t)size), device,
                      "cnrtHostMalloc(%" PRIu64 " bytes)", size);
    if (st)
        return st;
    if (!p)
        return mlu_err(KEEL_STATUS_OUT_OF_MEMORY, "cnrtHostMalloc gave NULL");
    if (!mlu_track((uintptr_t)p, size, device, MLU_HOST_MEM)) {
        mlu.rt.cnrtFreeHost(p);
        return mlu_err(KEEL_STATUS_OUT_OF_MEMORY,
                       "host_alloc: no host memory to track the block");
    }
    *ptr = p;
    return KEEL_STATUS_OK;
}

static keel_status mlu_host_free(int32_t device, void *ptr)
{
    keel_status st = mlu_enter(device, "host_free");

    if (st || !ptr)
        return st;
    if (!mlu_forget((uintptr_t)ptr, device, MLU_HOST_MEM, NULL))
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "host_free: %p is not pinned memory of mlu:%d", ptr,
                       (int)device);
    return MLU_RT(mlu.rt.cnrtFreeHost(ptr), device, "cnrtFreeHost(%p)", ptr);
}

/* One copy: on queue q, or synchronous (q NULL) after the device's work. */
static keel_status transfer(int32_t dev, struct keel_stream_s *q, void *dst,
                            const void *src, uint64_t n, cnrtMemTransDir_t dir,
                            const char *call)
{
    keel_status st;

    if (q)
        return MLU_RT(mlu.rt.cnrtMemcpyAsync(dst, (void *)src, (size_t)n, q->q,
                                             dir),
                      dev, "cnrtMemcpyAsync(%p <- %p, %" PRIu64 " bytes, %s)",
                      dst, src, n, dir_name(dir));
    if ((st = wait_device(dev, call)))
        return st;
    return MLU_RT(mlu.rt.cnrtMemcpy(dst, (void *)src, (size_t)n, dir), dev,
                  "cnrtMemcpy(%p <- %p, %" PRIu64 " bytes, %s)", dst, src, n,
                  dir_name(dir));
}

/*
 * Every copy call, sync or async, in one place: check the device, the
 * stream (async only), the host pointer and the device ranges, then copy.
 */
static keel_status copy_call(int32_t dev, bool async, keel_stream stream,
                             void *dst, const void *src, keel_dptr ddst,
                             keel_dptr dsrc, uint64_t n, cnrtMemTransDir_t dir,
                             const char *call)
{
    struct keel_stream_s *q = NULL;
    keel_status st = mlu_enter(dev, call);

    if (st || (async && (st = mlu_queue_of(dev, stream, call, &q))) || !n)
        return st;
    if (dir != cnrtMemcpyDevToDev && !(dir == cnrtMemcpyHostToDev ? src : dst))
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT, "%s: the host pointer is "
                       "NULL", call);
    if (dir != cnrtMemcpyDevToHost && (st = mlu_check_range(dev, ddst, n, call)))
        return st;
    if (dir != cnrtMemcpyHostToDev && (st = mlu_check_range(dev, dsrc, n, call)))
        return st;
    if (dir == cnrtMemcpyDevToDev && ddst < dsrc + n && dsrc < ddst + n)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: source and destination overlap", call);
    return transfer(dev, q, dst, src, n, dir, call);
}

static keel_status mlu_copy_h2d(int32_t d, keel_dptr dst, const void *src,
                                uint64_t n)
{
    return copy_call(d, false, NULL, MLU_PTR(dst), src, dst, 0, n,
                     cnrtMemcpyHostToDev, "copy_h2d");
}

static keel_status mlu_copy_d2h(int32_t d, void *dst, keel_dptr src, uint64_t n)
{
    return copy_call(d, false, NULL, dst, MLU_PTR(src), 0, src, n,
                     cnrtMemcpyDevToHost, "copy_d2h");
}

static keel_status mlu_copy_d2d(int32_t d, keel_dptr dst, keel_dptr src,
                                uint64_t n)
{
    return copy_call(d, false, NULL, MLU_PTR(dst), MLU_PTR(src), dst, src, n,
                     cnrtMemcpyDevToDev, "copy_d2d");
}

static keel_status mlu_copy_h2d_async(int32_t d, keel_stream s, keel_dptr dst,
                                      const void *src, uint64_t n)
{
    return copy_call(d, true, s, MLU_PTR(dst), src, dst, 0, n,
                     cnrtMemcpyHostToDev, "copy_h2d_async");
}

static keel_status mlu_copy_d2h_async(int32_t d, keel_stream s, void *dst,
                                      keel_dptr src, uint64_t n)
{
    return copy_call(d, true, s, dst, MLU_PTR(src), 0, src, n,
                     cnrtMemcpyDevToHost, "copy_d2h_async");
}

static keel_status mlu_copy_d2d_async(int32_t d, keel_stream s, keel_dptr dst,
                                      keel_dptr src, uint64_t n)
{
    return copy_call(d, true, s, MLU_PTR(dst), MLU_PTR(src), dst, src, n,
                     cnrtMemcpyDevToDev, "copy_d2d_async");
}

static keel_status fill(int32_t dev, bool async, keel_stream stream,
                        keel_dptr dst, uint8_t value, uint64_t n,
                        const char *call)
{
    struct keel_stream_s *q = NULL;
    keel_status st = mlu_enter(dev, call);

    if (st || (async && (st = mlu_queue_of(dev, stream, call, &q))) || !n)
        return st;
    if ((st = mlu_check_range(dev, dst, n, call)))
        return st;
    if (q)
        return MLU_RT(mlu.rt.cnrtMemsetAsync(MLU_PTR(dst), value, (size_t)n,
                                             q->q),
                      dev, "cnrtMemsetAsync(0x%" PRIx64 ", %u, %" PRIu64 ")",
                      dst, (unsigned)value, n);
    if ((st = wait_device(dev, call)))
        return st;
    return MLU_RT(mlu.rt.cnrtMemset(MLU_PTR(dst), value, (size_t)n), dev,
                  "cnrtMemset(0x%" PRIx64 ", %u, %" PRIu64 ")", dst,
                  (unsigned)value, n);
}

static keel_status mlu_memset(int32_t d, keel_dptr dst, uint8_t v, uint64_t n)
{
    return fill(d, false, NULL, dst, v, n, "memset");
}

static keel_status mlu_memset_async(int32_t d, keel_stream s, keel_dptr dst,
                                    uint8_t v, uint64_t n)
{
    return fill(d, true, s, dst, v, n, "memset_async");
}

static keel_status mlu_get_memory_info(int32_t device, keel_memory_info *info)
{
    size_t fr = 0, total = 0;
    keel_status st;

    if (!info)
        return mlu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "get_memory_info: info is NULL");
    if ((st = mlu_enter(device, "get_memory_info")) ||
        (st = MLU_RT(mlu.rt.cnrtMemGetInfo(&fr, &total), device,
                     "cnrtMemGetInfo")))
        return st;
    info->total = total;
    info->free = fr;
    info->used = atomic_load(&mlu.dev[device].in_use);
    return KEEL_STATUS_OK;
}

void mlu_memory_finalize(void)
{
    struct mlu_item it;

    while (mlu_take_any(MLU_DEV_MEM, &it))
        if (mlu_bind(it.dev) == KEEL_STATUS_OK)
            mlu.rt.cnrtFree(MLU_PTR(it.base));
    while (mlu_take_any(MLU_HOST_MEM, &it))
        if (mlu_bind(it.dev) == KEEL_STATUS_OK)
            mlu.rt.cnrtFreeHost(MLU_PTR(it.base));
}

const keel_memory_ops mlu_memory_ops = {
    .header = KEEL_TABLE_HEADER(keel_memory_ops),
    .alloc = mlu_alloc,
    .free = mlu_free,
    .host_alloc = mlu_host_alloc,
    .host_free = mlu_host_free,
    .memset = mlu_memset,
    .memset_async = mlu_memset_async,
    .copy_h2d = mlu_copy_h2d,
    .copy_d2h = mlu_copy_d2h,
    .copy_d2d = mlu_copy_d2d,
    .copy_h2d_async = mlu_copy_h2d_async,
    .copy_d2h_async = mlu_copy_d2h_async,
    .copy_d2d_async = mlu_copy_d2d_async,
    .get_memory_info = mlu_get_memory_info,
};
