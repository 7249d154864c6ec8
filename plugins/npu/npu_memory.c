/*
 * keel Ascend NPU plugin — the memory group on ACL (see npu_internal.h):
 * aclrtMalloc for device memory, aclrtMallocHost for pinned host memory,
 * aclrtMemcpy(Async) and aclrtMemset(Async) with the copy kind named from
 * the ABI call, never guessed from the addresses.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "npu_internal.h"

keel_status npu_mem_check(int32_t device, keel_dptr p, uint64_t size,
                          const char *what)
{
    if (p == 0)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "%s: the null address on npu:%d", what, (int)device);
    if (p > UINT64_MAX - size)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "%s: 0x%" PRIx64 " + %" PRIu64 " bytes wraps around",
                        what, p, size);
    if (!npu_reg_get(&npu_g.mem, (uintptr_t)p, size, device,
                     NPU_KIND_DEVICE_MEM, NULL))
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "%s: [0x%" PRIx64 ", +%" PRIu64 ") is not inside one "
                        "live allocation of npu:%d",
                        what, p, size, (int)device);
    return KEEL_STATUS_OK;
}

static keel_status npu_alloc(int32_t device, uint64_t size, keel_dptr *ptr)
{
    keel_status st;
    void *p = NULL;
    uint64_t total;

    if (!ptr)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT, "alloc: ptr is NULL");
    *ptr = 0;
    if ((st = npu_enter(device, "alloc")))
        return st;
    if (size == 0)
        return KEEL_STATUS_OK;
    total = npu_g.dev[device].total_memory;
    if (size > (uint64_t)SIZE_MAX || (total && size > total))
        return npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "alloc(%" PRIu64 " bytes) on npu:%d: more than the "
                        "device has (%" PRIu64 " bytes)",
                        size, (int)device, total);
    st = npu_check_alloc(
        ACL.aclrtMalloc(&p, (size_t)size, ACL_MEM_MALLOC_HUGE_FIRST), device,
        "aclrtMalloc(%" PRIu64 " bytes, HUGE_FIRST)", size);
    if (st)
        return st;
    if (!p)
        return npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "aclrtMalloc(%" PRIu64 " bytes) on npu:%d returned "
                        "NULL",
                        size, (int)device);
    if ((uintptr_t)p % NPU_ALLOC_ALIGNMENT) {
        ACL.aclrtFree(p);
        return npu_fail(KEEL_STATUS_INTERNAL,
                        "aclrtMalloc on npu:%d returned %p, not %u-byte "
                        "aligned as the plugin promises",
                        (int)device, p, NPU_ALLOC_ALIGNMENT);
    }
    struct npu_obj o = {.base = (uintptr_t)p, .size = size, .device = device,
                        .kind = NPU_KIND_DEVICE_MEM};
    if (npu_reg_put(&npu_g.mem, &o)) {
        ACL.aclrtFree(p);
        return npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "alloc on npu:%d: no host memory to track it",
                        (int)device);
    }
    atomic_fetch_add(&npu_g.used[device], size);
    *ptr = (keel_dptr)(uintptr_t)p;
    return KEEL_STATUS_OK;
}

static keel_status npu_free(int32_t device, keel_dptr ptr)
{
    struct npu_obj o;
    keel_status st = npu_enter(device, "free");

    if (st || ptr == 0)
        return st;
    if (!npu_reg_drop(&npu_g.mem, (uintptr_t)ptr, device, NPU_KIND_DEVICE_MEM,
                      &o))
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "free(0x%" PRIx64 ") on npu:%d: not an address alloc "
                        "returned there",
                        ptr, (int)device);
    atomic_fetch_sub(&npu_g.used[device], o.size);
    return npu_check(ACL.aclrtFree(NPU_PTR(ptr)), device,
                     "aclrtFree(0x%" PRIx64 ")", ptr);
}

static keel_status npu_host_alloc(int32_t device, uint64_t size, void **ptr)
{
    keel_status st;
    void *p = NULL;

    if (!ptr)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT, "host_alloc: ptr is NULL");
    *ptr = NULL;
    if ((st = npu_enter(device, "host_alloc")) || size == 0)
        return st;
    if (size > (uint64_t)SIZE_MAX)
        return npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "host_alloc(%" PRIu64 " bytes): too large", size);
    st = npu_check_alloc(ACL.aclrtMallocHost(&p, (size_t)size), device,
                         "aclrtMallocHost(%" PRIu64 " bytes)", size);
    if (st)
        return st;
    if (!p)
        return npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "aclrtMallocHost(%" PRIu64 " bytes) returned NULL",
                        size);
    struct npu_obj o = {.base = (uintptr_t)p, .size = size, .device = device,
                        .kind = NPU_KIND_HOST_MEM};
    if (npu_reg_put(&npu_g.mem, &o)) {
        ACL.aclrtFreeHost(p);
        return npu_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "host_alloc: no host memory to track it");
    }
    *ptr = p;
    return KEEL_STATUS_OK;
}

static keel_status npu_host_free(int32_t device, void *ptr)
{
    keel_status st = npu_enter(device, "host_free");

    if (st || !ptr)
        return st;
    if (!npu_reg_drop(&npu_g.mem, (uintptr_t)ptr, device, NPU_KIND_HOST_MEM,
                      NULL))
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "host_free(%p): not memory host_alloc returned for "
                        "npu:%d",
                        ptr, (int)device);
    return npu_check(ACL.aclrtFreeHost(ptr), device, "aclrtFreeHost(%p)", ptr);
}

/* The device's earlier work, all streams: what every synchronous call of
 * the group waits for first. */
static keel_status settle(int32_t device, const char *call)
{
    return npu_device_sync(device, call);
}

static keel_status npu_memset(int32_t device, keel_dptr dst, uint8_t value,
                              uint64_t size)
{
    keel_status st = npu_enter(device, "memset");

    if (st || size == 0)
        return st;
    if ((st = npu_mem_check(device, dst, size, "memset")) ||
        (st = settle(device, "memset")))
        return st;
    return npu_check(ACL.aclrtMemset(NPU_PTR(dst), (size_t)size, value,
                                     (size_t)size),
                     device, "aclrtMemset(0x%" PRIx64 ", %u, %" PRIu64 ")",
                     dst, (unsigned)value, size);
}

static keel_status npu_memset_async(int32_t device, keel_stream stream,
                                    keel_dptr dst, uint8_t value, uint64_t size)
{
    struct keel_stream_s *s;
    keel_status st = npu_enter(device, "memset_async");

    if (st || (st = npu_stream_get(device, stream, "memset_async", &s)))
        return st;
    if (size == 0)
        return KEEL_STATUS_OK;
    if ((st = npu_mem_check(device, dst, size, "memset_async")))
        return st;
    st = npu_check(ACL.aclrtMemsetAsync(NPU_PTR(dst), (size_t)size, value,
                                        (size_t)size, s->s),
                   device, "aclrtMemsetAsync(0x%" PRIx64 ", %u, %" PRIu64 ")",
                   dst, (unsigned)value, size);
    if (!st)
        npu_stream_note(s);
    return st;
}

/* One copy, sync (s == NULL) or on stream s; the ranges were checked. */
static keel_status copy(int32_t device, struct keel_stream_s *s, void *dst,
                        const void *src, uint64_t size, aclrtMemcpyKind kind)
{
    static const char *const kinds[] = {"HOST_TO_HOST", "HOST_TO_DEVICE",
                                        "DEVICE_TO_HOST", "DEVICE_TO_DEVICE"};
    aclError e;

    keel_status st;

    if (s)
        e = ACL.aclrtMemcpyAsync(dst, (size_t)size, src, (size_t)size, kind,
                                 s->s);
    else
        e = ACL.aclrtMemcpy(dst, (size_t)size, src, (size_t)size, kind);
    st = npu_check(e, device, "%s(%p <- %p, %" PRIu64 " bytes, %s)",
                   s ? "aclrtMemcpyAsync" : "aclrtMemcpy", dst, src, size,
                   kinds[kind]);
    if (!st && s)
        npu_stream_note(s);
    return st;
}

static keel_status npu_copy_h2d(int32_t device, keel_dptr dst, const void *src,
                                uint64_t size)
{
    keel_status st = npu_enter(device, "copy_h2d");

    if (st || size == 0)
        return st;
    if (!src)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT, "copy_h2d: src is NULL");
    if ((st = npu_mem_check(device, dst, size, "copy_h2d")) ||
        (st = settle(device, "copy_h2d")))
        return st;
    return copy(device, NULL, NPU_PTR(dst), src, size,
                ACL_MEMCPY_HOST_TO_DEVICE);
}

static keel_status npu_copy_d2h(int32_t device, void *dst, keel_dptr src,
                                uint64_t size)
{
    keel_status st = npu_enter(device, "copy_d2h");

    if (st || size == 0)
        return st;
    if (!dst)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT, "copy_d2h: dst is NULL");
    if ((st = npu_mem_check(device, src, size, "copy_d2h")) ||
        (st = settle(device, "copy_d2h")))
        return st;
    return copy(device, NULL, dst, NPU_PTR(src), size,
                ACL_MEMCPY_DEVICE_TO_HOST);
}

static keel_status d2d_check(int32_t device, keel_dptr dst, keel_dptr src,
                             uint64_t size, const char *call)
{
    keel_status st;

    if ((st = npu_mem_check(device, dst, size, call)) ||
        (st = npu_mem_check(device, src, size, call)))
        return st;
    if (dst < src + size && src < dst + size)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "%s: [0x%" PRIx64 ", +%" PRIu64 ") and [0x%" PRIx64
                        ", +%" PRIu64 ") overlap",
                        call, dst, size, src, size);
    return KEEL_STATUS_OK;
}

static keel_status npu_copy_d2d(int32_t device, keel_dptr dst, keel_dptr src,
                                uint64_t size)
{
    keel_status st = npu_enter(device, "copy_d2d");

    if (st || size == 0)
        return st;
    if ((st = d2d_check(device, dst, src, size, "copy_d2d")) ||
        (st = settle(device, "copy_d2d")))
        return st;
    return copy(device, NULL, NPU_PTR(dst), NPU_PTR(src), size,
                ACL_MEMCPY_DEVICE_TO_DEVICE);
}

static keel_status npu_copy_h2d_async(int32_t device, keel_stream stream,
                                      keel_dptr dst, const void *src,
                                      uint64_t size)
{
    struct keel_stream_s *s;
    keel_status st = npu_enter(device, "copy_h2d_async");

    if (st || (st = npu_stream_get(device, stream, "copy_h2d_async", &s)) ||
        size == 0)
        return st;
    if (!src)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "copy_h2d_async: src is NULL");
    if ((st = npu_mem_check(device, dst, size, "copy_h2d_async")))
        return st;
    return copy(device, s, NPU_PTR(dst), src, size, ACL_MEMCPY_HOST_TO_DEVICE);
}

static keel_status npu_copy_d2h_async(int32_t device, keel_stream stream,
                                      void *dst, keel_dptr src, uint64_t size)
{
    struct keel_stream_s *s;
    keel_status st = npu_enter(device, "copy_d2h_async");

    if (st || (st = npu_stream_get(device, stream, "copy_d2h_async", &s)) ||
        size == 0)
        return st;
    if (!dst)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "copy_d2h_async: dst is NULL");
    if ((st = npu_mem_check(device, src, size, "copy_d2h_async")))
        return st;
    return copy(device, s, dst, NPU_PTR(src), size, ACL_MEMCPY_DEVICE_TO_HOST);
}

static keel_status npu_copy_d2d_async(int32_t device, keel_stream stream,
                                      keel_dptr dst, keel_dptr src,
                                      uint64_t size)
{
    struct keel_stream_s *s;
    keel_status st = npu_enter(device, "copy_d2d_async");

    if (st || (st = npu_stream_get(device, stream, "copy_d2d_async", &s)) ||
        size == 0)
        return st;
    if ((st = d2d_check(device, dst, src, size, "copy_d2d_async")))
        return st;
    return copy(device, s, NPU_PTR(dst), NPU_PTR(src), size,
                ACL_MEMCPY_DEVICE_TO_DEVICE);
}

static keel_status npu_get_memory_info(int32_t device, keel_memory_info *info)
{
    size_t fr = 0, total = 0;
    keel_status st;

    if (!info)
        return npu_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "get_memory_info: info is NULL");
    if ((st = npu_enter(device, "get_memory_info")))
        return st;
    st = npu_check(ACL.aclrtGetMemInfo(ACL_HBM_MEM, &fr, &total), device,
                   "aclrtGetMemInfo(ACL_HBM_MEM)");
    if (st == KEEL_STATUS_OK && total == 0)
        st = npu_check(ACL.aclrtGetMemInfo(ACL_DDR_MEM, &fr, &total), device,
                       "aclrtGetMemInfo(ACL_DDR_MEM)");
    if (st)
        return st;
    info->total = total;
    info->free = fr;
    info->used = atomic_load(&npu_g.used[device]);
    return KEEL_STATUS_OK;
}

/* Free what the user left allocated (finalize). */
void npu_memory_finalize(void)
{
    struct npu_obj o;

    while (npu_reg_pop(&npu_g.mem, NPU_KIND_DEVICE_MEM, &o)) {
        if (npu_use(o.device) == KEEL_STATUS_OK)
            ACL.aclrtFree(NPU_PTR(o.base));
    }
    while (npu_reg_pop(&npu_g.mem, NPU_KIND_HOST_MEM, &o)) {
        if (npu_use(o.device) == KEEL_STATUS_OK)
            ACL.aclrtFreeHost(NPU_PTR(o.base));
    }
}

const keel_memory_ops npu_memory_ops = {
    .header = KEEL_TABLE_HEADER(keel_memory_ops),
    .alloc = npu_alloc,
    .free = npu_free,
    .host_alloc = npu_host_alloc,
    .host_free = npu_host_free,
    .unified_alloc = NULL,
    .unified_free = NULL,
    .memset = npu_memset,
    .memset_async = npu_memset_async,
    .copy_h2d = npu_copy_h2d,
    .copy_d2h = npu_copy_d2h,
    .copy_d2d = npu_copy_d2d,
    .copy_h2d_async = npu_copy_h2d_async,
    .copy_d2h_async = npu_copy_d2h_async,
    .copy_d2d_async = npu_copy_d2d_async,
    .copy_peer = NULL,
    .get_memory_info = npu_get_memory_info,
    .copy_peer_async = NULL,
};
