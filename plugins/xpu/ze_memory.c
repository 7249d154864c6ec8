/*
 * keel Level Zero plugin — memory group: USM device memory (alloc), host
 * memory (host_alloc) and shared memory (unified_alloc), memset and copies
 * through command lists (see ze_internal.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ze_internal.h"

static const char *kind_name(int32_t kind)
{
    switch (kind) {
    case ZE_KIND_DEVICE_MEM: return "device memory";
    case ZE_KIND_SHARED_MEM: return "unified memory";
    case ZE_KIND_HOST_MEM: return "pinned host memory";
    default: return "memory";
    }
}

keel_status ze_mem_check(int32_t device, keel_dptr p, uint64_t size,
                         const char *what)
{
    struct ze_range r;

    if (p == 0)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: address 0 on xpu:%d",
                       what, (int)device);
    if (p > UINT64_MAX - size)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: range 0x%" PRIx64 " + %" PRIu64 " bytes overflows",
                       what, p, size);
    if (!ze_rs_find(&ze_g.mem, (uintptr_t)p, size ? size : 1, device, 0, &r))
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: [0x%" PRIx64 ", +%" PRIu64 " bytes) is not inside "
                       "a live allocation of xpu:%d",
                       what, p, size, (int)device);
    return KEEL_STATUS_OK;
}

static keel_status alloc_kind(int32_t device, uint64_t size, int32_t kind,
                              void **out, const char *call)
{
    struct ze_device *d = &ze_g.dev[device];
    ze_device_mem_alloc_desc_t dd = {
        .stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC};
    ze_host_mem_alloc_desc_t hd = {.stype = ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC};
    const char *fn = kind == ZE_KIND_DEVICE_MEM   ? "zeMemAllocDevice"
                     : kind == ZE_KIND_SHARED_MEM ? "zeMemAllocShared"
                                                  : "zeMemAllocHost";
    void *p = NULL;
    ze_result_t r;

    *out = NULL;
    if (size > (uint64_t)SIZE_MAX)
        return ze_fail(KEEL_STATUS_OUT_OF_MEMORY,
                       "%s: %" PRIu64 " bytes do not fit the address space",
                       call, size);
    if (kind != ZE_KIND_HOST_MEM && d->props.maxMemAllocSize &&
        size > d->props.maxMemAllocSize)
        return ze_fail(KEEL_STATUS_OUT_OF_MEMORY,
                       "%s(%" PRIu64 " bytes) on xpu:%d: larger than the "
                       "device's largest allocation (%" PRIu64 " bytes)",
                       fn, size, (int)device, d->props.maxMemAllocSize);
    if (kind == ZE_KIND_DEVICE_MEM)
        r = zeMemAllocDevice(d->ctx, &dd, (size_t)size, ZE_ALLOC_ALIGNMENT,
                             d->dev, &p);
    else if (kind == ZE_KIND_SHARED_MEM)
        r = zeMemAllocShared(d->ctx, &dd, &hd, (size_t)size,
                             ZE_ALLOC_ALIGNMENT, d->dev, &p);
    else
        r = zeMemAllocHost(d->ctx, &hd, (size_t)size, ZE_ALLOC_ALIGNMENT, &p);
    if (r != ZE_RESULT_SUCCESS || !p)
        return ze_check(r != ZE_RESULT_SUCCESS
                            ? r
                            : ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY,
                        device, "%s(%" PRIu64 " bytes)", fn, size);
    struct ze_range rg = {.base = (uintptr_t)p, .size = size,
                          .device = device, .kind = kind};
    if (ze_rs_add(&ze_g.mem, &rg)) {
        zeMemFree(d->ctx, p);
        return ze_fail(KEEL_STATUS_OUT_OF_MEMORY,
                       "%s: no host memory for the allocation registry", call);
    }
    if (kind != ZE_KIND_HOST_MEM)
        atomic_fetch_add(&ze_g.used[device], size);
    *out = p;
    return KEEL_STATUS_OK;
}

static keel_status free_kind(int32_t device, uintptr_t p, int32_t kind,
                             const char *call)
{
    struct ze_range r;
    ze_result_t zr;

    if (!ze_rs_take(&ze_g.mem, p, kind, device, &r)) {
        struct ze_range other;
        if (ze_rs_find(&ze_g.mem, p, 1, -1, kind, &other) ||
            ze_rs_find(&ze_g.mem, p, 1, -1, 0, &other))
            return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: %p is not the start of %s of xpu:%d (it lies "
                           "in %s of xpu:%d)",
                           call, (void *)p, kind_name(kind), (int)device,
                           kind_name(other.kind), (int)other.device);
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: %p is not %s allocated on xpu:%d (foreign or "
                       "already freed)",
                       call, (void *)p, kind_name(kind), (int)device);
    }
    if (kind != ZE_KIND_HOST_MEM)
        atomic_fetch_sub(&ze_g.used[device], r.size);
    zr = zeMemFree(ze_g.dev[device].ctx, (void *)p);
    return ze_check(zr, device, "zeMemFree(%p)", (void *)p);
}

static keel_status ze_alloc(int32_t device, uint64_t size, keel_dptr *ptr)
{
    keel_status st = ze_enter(device, "alloc");
    void *p;

    if (st)
        return st;
    if (!ptr)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT, "alloc: ptr is NULL");
    *ptr = 0;
    if (size == 0)
        return KEEL_STATUS_OK;
    st = alloc_kind(device, size, ZE_KIND_DEVICE_MEM, &p, "alloc");
    if (!st)
        *ptr = (keel_dptr)(uintptr_t)p;
    return st;
}

static keel_status ze_free(int32_t device, keel_dptr ptr)
{
    keel_status st = ze_enter(device, "free");

    if (st || ptr == 0)
        return st;
    return free_kind(device, (uintptr_t)ptr, ZE_KIND_DEVICE_MEM, "free");
}

static keel_status ze_host_alloc(int32_t device, uint64_t size, void **ptr)
{
    keel_status st = ze_enter(device, "host_alloc");

    if (st)
        return st;
    if (!ptr)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT, "host_alloc: ptr is NULL");
    *ptr = NULL;
    if (size == 0)
        return KEEL_STATUS_OK;
    return alloc_kind(device, size, ZE_KIND_HOST_MEM, ptr, "host_alloc");
}

static keel_status ze_host_free(int32_t device, void *ptr)
{
    keel_status st = ze_enter(device, "host_free");

    if (st || !ptr)
        return st;
    return free_kind(device, (uintptr_t)ptr, ZE_KIND_HOST_MEM, "host_free");
}

static keel_status ze_unified_alloc(int32_t device, uint64_t size,
                                    keel_dptr *dptr, void **hptr)
{
    keel_status st = ze_enter(device, "unified_alloc");
    void *p = NULL;

    if (st)
        return st;
    if (!dptr || !hptr)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "unified_alloc: %s is NULL", dptr ? "hptr" : "dptr");
    *dptr = 0;
    *hptr = NULL;
    if (size == 0)
        return KEEL_STATUS_OK;
    st = alloc_kind(device, size, ZE_KIND_SHARED_MEM, &p, "unified_alloc");
    if (!st) {
        *dptr = (keel_dptr)(uintptr_t)p;
        *hptr = p;
    }
    return st;
}

static keel_status ze_unified_free(int32_t device, keel_dptr dptr)
{
    keel_status st = ze_enter(device, "unified_free");

    if (st || dptr == 0)
        return st;
    return free_kind(device, (uintptr_t)dptr, ZE_KIND_SHARED_MEM,
                     "unified_free");
}

/* A synchronous append on the device's synchronous immediate list, after
 * every stream of the device has finished. */
static keel_status sync_fill(int32_t device, keel_dptr dst, uint8_t value,
                             uint64_t size)
{
    struct ze_device *d = &ze_g.dev[device];
    keel_status st = ze_device_sync(device, "memset");
    ze_result_t r;

    if (st)
        return st;
    pthread_mutex_lock(&d->sync_mu);
    r = zeCommandListAppendMemoryFill(d->sync_list, ZE_PTR(dst), &value, 1,
                                      (size_t)size, NULL, 0, NULL);
    pthread_mutex_unlock(&d->sync_mu);
    return ze_check(r, device, "zeCommandListAppendMemoryFill(%" PRIu64
                    " bytes, synchronous)", size);
}

static keel_status sync_copy(int32_t device, void *dst, const void *src,
                             uint64_t size, const char *call)
{
    struct ze_device *d = &ze_g.dev[device];
    keel_status st = ze_device_sync(device, call);
    ze_result_t r;

    if (st)
        return st;
    pthread_mutex_lock(&d->sync_mu);
    r = zeCommandListAppendMemoryCopy(d->sync_list, dst, src, (size_t)size,
                                      NULL, 0, NULL);
    pthread_mutex_unlock(&d->sync_mu);
    return ze_check(r, device,
                    "%s: zeCommandListAppendMemoryCopy(%" PRIu64 " bytes)",
                    call, size);
}

static keel_status ze_memset(int32_t device, keel_dptr dst, uint8_t value,
                             uint64_t size)
{
    keel_status st = ze_enter(device, "memset");

    if (st || size == 0)
        return st;
    if ((st = ze_mem_check(device, dst, size, "memset")))
        return st;
    return sync_fill(device, dst, value, size);
}

static keel_status ze_memset_async(int32_t device, keel_stream stream,
                                   keel_dptr dst, uint8_t value, uint64_t size)
{
    struct keel_stream_s *s;
    keel_status st = ze_enter(device, "memset_async");
    ze_result_t r;

    if (st)
        return st;
    if ((st = ze_stream_resolve(device, stream, "memset_async", &s)))
        return st;
    if (size == 0)
        return KEEL_STATUS_OK;
    if ((st = ze_mem_check(device, dst, size, "memset_async")))
        return st;
    ze_stream_lock(s);
    r = zeCommandListAppendMemoryFill(s->list, ZE_PTR(dst), &value, 1,
                                      (size_t)size, NULL, 0, NULL);
    ze_stream_unlock(s);
    return ze_check(r, device,
                    "zeCommandListAppendMemoryFill(%" PRIu64 " bytes)", size);
}

static keel_status host_arg(const void *p, const char *call, const char *name)
{
    if (!p)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: %s is NULL", call,
                       name);
    return KEEL_STATUS_OK;
}

static keel_status ze_copy_h2d(int32_t device, keel_dptr dst, const void *src,
                               uint64_t size)
{
    keel_status st = ze_enter(device, "copy_h2d");

    if (st || size == 0)
        return st;
    if ((st = host_arg(src, "copy_h2d", "src")) ||
        (st = ze_mem_check(device, dst, size, "copy_h2d")))
        return st;
    return sync_copy(device, ZE_PTR(dst), src, size, "copy_h2d");
}

static keel_status ze_copy_d2h(int32_t device, void *dst, keel_dptr src,
                               uint64_t size)
{
    keel_status st = ze_enter(device, "copy_d2h");

    if (st || size == 0)
        return st;
    if ((st = host_arg(dst, "copy_d2h", "dst")) ||
        (st = ze_mem_check(device, src, size, "copy_d2h")))
        return st;
    return sync_copy(device, dst, ZE_PTR(src), size, "copy_d2h");
}

static bool overlaps(keel_dptr a, keel_dptr b, uint64_t size)
{
    return a < b + size && b < a + size;
}

static keel_status ze_copy_d2d(int32_t device, keel_dptr dst, keel_dptr src,
                               uint64_t size)
{
    keel_status st = ze_enter(device, "copy_d2d");

    if (st || size == 0)
        return st;
    if ((st = ze_mem_check(device, dst, size, "copy_d2d (dst)")) ||
        (st = ze_mem_check(device, src, size, "copy_d2d (src)")))
        return st;
    if (overlaps(dst, src, size))
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "copy_d2d: the ranges overlap");
    return sync_copy(device, ZE_PTR(dst), ZE_PTR(src), size, "copy_d2d");
}

static keel_status async_copy(int32_t device, keel_stream stream, void *dst,
                              const void *src, uint64_t size, const char *call)
{
    struct keel_stream_s *s;
    keel_status st = ze_stream_resolve(device, stream, call, &s);
    ze_result_t r;

    if (st)
        return st;
    ze_stream_lock(s);
    r = zeCommandListAppendMemoryCopy(s->list, dst, src, (size_t)size, NULL,
                                      0, NULL);
    ze_stream_unlock(s);
    return ze_check(r, device,
                    "%s: zeCommandListAppendMemoryCopy(%" PRIu64 " bytes)",
                    call, size);
}

static keel_status ze_copy_h2d_async(int32_t device, keel_stream stream,
                                     keel_dptr dst, const void *src,
                                     uint64_t size)
{
    keel_status st = ze_enter(device, "copy_h2d_async");
    struct keel_stream_s *s;

    if (st)
        return st;
    if ((st = ze_stream_resolve(device, stream, "copy_h2d_async", &s)) ||
        size == 0)
        return st;
    if ((st = host_arg(src, "copy_h2d_async", "src")) ||
        (st = ze_mem_check(device, dst, size, "copy_h2d_async")))
        return st;
    return async_copy(device, stream, ZE_PTR(dst), src, size,
                      "copy_h2d_async");
}

static keel_status ze_copy_d2h_async(int32_t device, keel_stream stream,
                                     void *dst, keel_dptr src, uint64_t size)
{
    keel_status st = ze_enter(device, "copy_d2h_async");
    struct keel_stream_s *s;

    if (st)
        return st;
    if ((st = ze_stream_resolve(device, stream, "copy_d2h_async", &s)) ||
        size == 0)
        return st;
    if ((st = host_arg(dst, "copy_d2h_async", "dst")) ||
        (st = ze_mem_check(device, src, size, "copy_d2h_async")))
        return st;
    return async_copy(device, stream, dst, ZE_PTR(src), size,
                      "copy_d2h_async");
}

static keel_status ze_copy_d2d_async(int32_t device, keel_stream stream,
                                     keel_dptr dst, keel_dptr src,
                                     uint64_t size)
{
    keel_status st = ze_enter(device, "copy_d2d_async");
    struct keel_stream_s *s;

    if (st)
        return st;
    if ((st = ze_stream_resolve(device, stream, "copy_d2d_async", &s)) ||
        size == 0)
        return st;
    if ((st = ze_mem_check(device, dst, size, "copy_d2d_async (dst)")) ||
        (st = ze_mem_check(device, src, size, "copy_d2d_async (src)")))
        return st;
    if (overlaps(dst, src, size))
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "copy_d2d_async: the ranges overlap");
    return async_copy(device, stream, ZE_PTR(dst), ZE_PTR(src), size,
                      "copy_d2d_async");
}

static keel_status ze_get_memory_info(int32_t device, keel_memory_info *info)
{
    keel_status st = ze_enter(device, "get_memory_info");
    uint64_t total, used;

    if (st)
        return st;
    if (!info)
        return ze_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "get_memory_info: info is NULL");
    /* Core Level Zero has no free-memory query (Sysman has one, and needs
     * ZES_ENABLE_SYSMAN): free is what this plugin has not allocated. */
    total = ze_g.dev[device].total_memory;
    used = atomic_load(&ze_g.used[device]);
    info->total = total;
    info->used = used;
    info->free = used < total ? total - used : 0;
    return KEEL_STATUS_OK;
}

void ze_memory_finalize(void)
{
    struct ze_range r;
    const int32_t kinds[] = {ZE_KIND_DEVICE_MEM, ZE_KIND_SHARED_MEM,
                             ZE_KIND_HOST_MEM};

    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
        while (ze_rs_pop(&ze_g.mem, kinds[k], &r))
            zeMemFree(ze_g.dev[r.device].ctx, (void *)r.base);
    for (int i = 0; i < ZE_MAX_DEVICES; i++)
        atomic_store(&ze_g.used[i], 0);
}

const keel_memory_ops ze_memory_ops = {
    .header = KEEL_TABLE_HEADER(keel_memory_ops),
    .alloc = ze_alloc,
    .free = ze_free,
    .host_alloc = ze_host_alloc,
    .host_free = ze_host_free,
    .unified_alloc = ze_unified_alloc,
    .unified_free = ze_unified_free,
    .memset = ze_memset,
    .memset_async = ze_memset_async,
    .copy_h2d = ze_copy_h2d,
    .copy_d2h = ze_copy_d2h,
    .copy_d2d = ze_copy_d2d,
    .copy_h2d_async = ze_copy_h2d_async,
    .copy_d2h_async = ze_copy_d2h_async,
    .copy_d2d_async = ze_copy_d2d_async,
    .copy_peer = NULL, /* the core stages peer copies through the host */
    .get_memory_info = ze_get_memory_info,
    .copy_peer_async = NULL,
};
