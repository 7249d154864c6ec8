/*
 * keel CUDA plugin — memory group.
 *
 * Device memory is cudaMalloc, pinned host memory cudaMallocHost, unified
 * memory cudaMallocManaged (its device and host addresses are the same).
 * Every live allocation is in cuda_g.mem, so a free of a pointer the device
 * did not allocate is refused with INVALID_ARGUMENT instead of reaching
 * CUDA, and get_memory_info can say how many bytes the plugin holds.
 *
 * Synchronous calls (memset, copy_*) must first wait for all work enqueued
 * on the device, including the plugin's non-blocking streams, which the
 * legacy default stream does not order against. They therefore run
 *     cudaDeviceSynchronize(); cuda*Async(..., default stream);
 *     cudaStreamSynchronize(default stream);
 * The plain cudaMemset / cudaMemcpy are not used because they may return
 * before the bytes have arrived (device-to-device, pageable host-to-device).
 */
#include <inttypes.h>
#include <stdlib.h>

#include "cuda_internal.h"

_Static_assert(SIZE_MAX >= UINT64_MAX, "the cuda plugin needs a 64-bit size_t");

#define DEFAULT_STREAM cudaStreamLegacy

/* ---- argument checks ----------------------------------------------------- */

static keel_status check_dptr(const char *call, int32_t device,
                              const char *name, keel_dptr p, uint64_t size)
{
    if (!p)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "%s(gpu:%d): %s is 0 (the null device address) "
                         "with size %" PRIu64,
                         call, (int)device, name, size);
    if (p > UINT64_MAX - size)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "%s(gpu:%d): %s 0x%" PRIx64 " + size %" PRIu64
                         " overflows the address space",
                         call, (int)device, name, p, size);
    return KEEL_STATUS_OK;
}

static keel_status check_hptr(const char *call, int32_t device,
                              const char *name, const void *p, uint64_t size)
{
    if (!p)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "%s(gpu:%d): %s is NULL with size %" PRIu64, call,
                         (int)device, name, size);
    if ((uint64_t)(uintptr_t)p > UINT64_MAX - size)
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "%s(gpu:%d): %s %p + size %" PRIu64
                         " overflows the address space",
                         call, (int)device, name, p, size);
    return KEEL_STATUS_OK;
}

static keel_status check_out(const char *call, int32_t device,
                             const void *out, const char *name)
{
    if (out)
        return KEEL_STATUS_OK;
    return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s(gpu:%d): %s is NULL",
                     call, (int)device, name);
}

static keel_status check_no_overlap(const char *call, int32_t device,
                                    keel_dptr dst, keel_dptr src,
                                    uint64_t size)
{
    if (dst + size <= src || src + size <= dst)
        return KEEL_STATUS_OK;
    return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                     "%s(gpu:%d): ranges overlap: dst 0x%" PRIx64
                     ", src 0x%" PRIx64 ", size %" PRIu64,
                     call, (int)device, dst, src, size);
}

/* ---- bookkeeping --------------------------------------------------------- */

static const char *kind_call(int32_t kind)
{
    switch (kind) {
    case CUDA_KIND_DEVICE_MEM:
        return "alloc";
    case CUDA_KIND_UNIFIED_MEM:
        return "unified_alloc";
    case CUDA_KIND_HOST_MEM:
        return "host_alloc";
    default:
        return "?";
    }
}

static bool kind_counts(int32_t kind)
{
    return kind == CUDA_KIND_DEVICE_MEM || kind == CUDA_KIND_UNIFIED_MEM;
}

static keel_status track(const char *call, int32_t device, uintptr_t p,
                         uint64_t size, int32_t kind)
{
    struct cuda_entry e = {
        .key = p, .size = size, .device = device, .kind = kind};

    if (cuda_registry_add(&cuda_g.mem, &e) != 0)
        return cuda_fail(KEEL_STATUS_OUT_OF_MEMORY,
                         "%s(gpu:%d, size=%" PRIu64 "): out of host memory "
                         "for the plugin's allocation table",
                         call, (int)device, size);
    if (kind_counts(kind))
        atomic_fetch_add(&cuda_g.used[device], size);
    return KEEL_STATUS_OK;
}

/* Say precisely why `p` cannot be freed by `call` on `device`. */
static keel_status not_ours(const char *call, int32_t device, uintptr_t p,
                            int32_t kind)
{
    struct cuda_entry e;

    if (!cuda_registry_find(&cuda_g.mem, p, &e))
        return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                         "%s(gpu:%d, %p): not a live allocation of %s "
                         "(never allocated, already freed, or not the start "
                         "of an allocation)",
                         call, (int)device, (void *)p, kind_call(kind));
    return cuda_fail(KEEL_STATUS_INVALID_ARGUMENT,
                     "%s(gpu:%d, %p): that pointer was allocated by %s on "
                     "gpu:%d",
                     call, (int)device, (void *)p, kind_call(e.kind),
                     (int)e.device);
}

static keel_status untrack(const char *call, int32_t device, uintptr_t p,
                           int32_t kind, int32_t owner)
{
    struct cuda_entry e;

    if (!cuda_registry_take(&cuda_g.mem, p, kind, owner, &e))
        return not_ours(call, device, p, kind);
    if (kind_counts(kind))
        atomic_fetch_sub(&cuda_g.used[e.device], e.size);
    return KEEL_STATUS_OK;
}

/* ---- allocation ---------------------------------------------------------- */

static keel_status cuda_mem_alloc(int32_t device, uint64_t size,
                                  keel_dptr *ptr)
{
    void *p = NULL;
    keel_status st;

    st = check_out("alloc", device, ptr, "ptr");
    if (st != KEEL_STATUS_OK)
        return st;
    *ptr = 0;
    st = cuda_enter(device, "alloc");
    if (st != KEEL_STATUS_OK || size == 0)
        return st;
    st = cuda_check(cudaMalloc(&p, size), device,
                    "cudaMalloc(size=%" PRIu64 ")", size);
    if (st != KEEL_STATUS_OK)
        return st;
    st = track("alloc", device, (uintptr_t)p, size, CUDA_KIND_DEVICE_MEM);
    if (st != KEEL_STATUS_OK)
        goto undo;
    *ptr = (keel_dptr)(uintptr_t)p;
    return KEEL_STATUS_OK;
undo:
    (void)cudaFree(p);
    (void)cudaGetLastError();
    return st;
}

static keel_status cuda_mem_free(int32_t device, keel_dptr ptr)
{
    keel_status st = cuda_enter(device, "free");

    if (st != KEEL_STATUS_OK || !ptr)
        return st;
    st = untrack("free", device, (uintptr_t)ptr, CUDA_KIND_DEVICE_MEM,
                 device);
    if (st != KEEL_STATUS_OK)
        return st;
    return cuda_check(cudaFree(CUDA_PTR(ptr)), device, "cudaFree(%p)",
                      CUDA_PTR(ptr));
}

static keel_status cuda_mem_host_alloc(int32_t device, uint64_t size,
                                       void **ptr)
{
    void *p = NULL;
    keel_status st;

    st = check_out("host_alloc", device, ptr, "ptr");
    if (st != KEEL_STATUS_OK)
        return st;
    *ptr = NULL;
    st = cuda_enter(device, "host_alloc");
    if (st != KEEL_STATUS_OK || size == 0)
        return st;
    st = cuda_check(cudaMallocHost(&p, size), device,
                    "cudaMallocHost(size=%" PRIu64 ")", size);
    if (st != KEEL_STATUS_OK)
        return st;
    st = track("host_alloc", device, (uintptr_t)p, size, CUDA_KIND_HOST_MEM);
    if (st != KEEL_STATUS_OK)
        goto undo;
    *ptr = p;
    return KEEL_STATUS_OK;
undo:
    (void)cudaFreeHost(p);
    (void)cudaGetLastError();
    return st;
}

/* Pinned memory is usable with every device (UVA): any device may free it. */
static keel_status cuda_mem_host_free(int32_t device, void *ptr)
{
    keel_status st = cuda_enter(device, "host_free");

    if (st != KEEL_STATUS_OK || !ptr)
        return st;
    st = untrack("host_free", device, (uintptr_t)ptr, CUDA_KIND_HOST_MEM, -1);
    if (st != KEEL_STATUS_OK)
        return st;
    return cuda_check(cudaFreeHost(ptr), device, "cudaFreeHost(%p)", ptr);
}

static keel_status cuda_mem_unified_alloc(int32_t device, uint64_t size,
                                          keel_dptr *dptr, void **hptr)
{
    void *p = NULL;
    keel_status st;

    st = check_out("unified_alloc", device, dptr, "dptr");
    if (st == KEEL_STATUS_OK)
        st = check_out("unified_alloc", device, hptr, "hptr");
    if (st != KEEL_STATUS_OK)
        return st;
    *dptr = 0;
    *hptr = NULL;
    st = cuda_enter(device, "unified_alloc");
    if (st != KEEL_STATUS_OK || size == 0)
        return st;
    st = cuda_check(cudaMallocManaged(&p, size, cudaMemAttachGlobal), device,
                    "cudaMallocManaged(size=%" PRIu64 ")", size);
    if (st != KEEL_STATUS_OK)
        return st;
    st = track("unified_alloc", device, (uintptr_t)p, size,
               CUDA_KIND_UNIFIED_MEM);
    if (st != KEEL_STATUS_OK)
        goto undo;
    *dptr = (keel_dptr)(uintptr_t)p;
    *hptr = p;
    return KEEL_STATUS_OK;
undo:
    (void)cudaFree(p);
    (void)cudaGetLastError();
    return st;
}

static keel_status cuda_mem_unified_free(int32_t device, keel_dptr dptr)
{
    keel_status st = cuda_enter(device, "unified_free");

    if (st != KEEL_STATUS_OK || !dptr)
        return st;
    st = untrack("unified_free", device, (uintptr_t)dptr,
                 CUDA_KIND_UNIFIED_MEM, device);
    if (st != KEEL_STATUS_OK)
        return st;
    return cuda_check(cudaFree(CUDA_PTR(dptr)), device, "cudaFree(%p)",
                      CUDA_PTR(dptr));
}

/* ---- memset -------------------------------------------------------------- */

static keel_status wait_default(int32_t device, const char *call)
{
    return cuda_check(cudaStreamSynchronize(DEFAULT_STREAM), device,
                      "cudaStreamSynchronize(default stream) in %s", call);
}

static keel_status cuda_mem_memset(int32_t device, keel_dptr dst,
                                   uint8_t value, uint64_t size)
{
    keel_status st = cuda_enter(device, "memset");

    if (st != KEEL_STATUS_OK || size == 0)
        return st;
    st = check_dptr("memset", device, "dst", dst, size);
    if (st == KEEL_STATUS_OK)
        st = cuda_device_sync(device, "memset");
    if (st != KEEL_STATUS_OK)
        return st;
    st = cuda_check(cudaMemsetAsync(CUDA_PTR(dst), value, size,
                                    DEFAULT_STREAM),
                    device,
                    "cudaMemsetAsync(dst=%p, value=%u, size=%" PRIu64 ")",
                    CUDA_PTR(dst), (unsigned)value, size);
    if (st != KEEL_STATUS_OK)
        return st;
    return wait_default(device, "memset");
}

static keel_status cuda_mem_memset_async(int32_t device, keel_stream stream,
                                         keel_dptr dst, uint8_t value,
                                         uint64_t size)
{
    cudaStream_t cs = NULL;
    keel_status st;

    st = cuda_enter(device, "memset_async");
    if (st == KEEL_STATUS_OK)
        st = cuda_stream_resolve(device, stream, "memset_async", &cs);
    if (st != KEEL_STATUS_OK || size == 0)
        return st;
    st = check_dptr("memset_async", device, "dst", dst, size);
    if (st != KEEL_STATUS_OK)
        return st;
    return cuda_check(cudaMemsetAsync(CUDA_PTR(dst), value, size, cs), device,
                      "cudaMemsetAsync(dst=%p, value=%u, size=%" PRIu64
                      ", stream=%p)",
                      CUDA_PTR(dst), (unsigned)value, size, (void *)stream);
}

/* ---- copies -------------------------------------------------------------- */

static const char *kind_name(enum cudaMemcpyKind kind)
{
    switch (kind) {
    case cudaMemcpyHostToDevice:
        return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost:
        return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice:
        return "cudaMemcpyDeviceToDevice";
    default:
        return "cudaMemcpyDefault";
    }
}

static keel_status copy_on(int32_t device, cudaStream_t cs, void *dst,
                           const void *src, uint64_t size,
                           enum cudaMemcpyKind kind)
{
    return cuda_check(cudaMemcpyAsync(dst, src, size, kind, cs), device,
                      "cudaMemcpyAsync(dst=%p, src=%p, size=%" PRIu64
                      ", %s, stream=%p)",
                      dst, src, size, kind_name(kind), (void *)cs);
}

/* Wait for the device, copy on the default stream, wait for the copy. */
static keel_status copy_sync(int32_t device, const char *call, void *dst,
                             const void *src, uint64_t size,
                             enum cudaMemcpyKind kind)
{
    keel_status st = cuda_device_sync(device, call);

    if (st == KEEL_STATUS_OK)
        st = copy_on(device, DEFAULT_STREAM, dst, src, size, kind);
    if (st == KEEL_STATUS_OK)
        st = wait_default(device, call);
    return st;
}

static keel_status cuda_mem_copy_h2d(int32_t device, keel_dptr dst,
                                     const void *src, uint64_t size)
{
    keel_status st = cuda_enter(device, "copy_h2d");

    if (st != KEEL_STATUS_OK || size == 0)
        return st;
    st = check_dptr("copy_h2d", device, "dst", dst, size);
    if (st == KEEL_STATUS_OK)
        st = check_hptr("copy_h2d", device, "src", src, size);
    if (st != KEEL_STATUS_OK)
        return st;
    return copy_sync(device, "copy_h2d", CUDA_PTR(dst), src, size,
                     cudaMemcpyHostToDevice);
}

static keel_status cuda_mem_copy_d2h(int32_t device, void *dst, keel_dptr src,
                                     uint64_t size)
{
    keel_status st = cuda_enter(device, "copy_d2h");

    if (st != KEEL_STATUS_OK || size == 0)
        return st;
    st = check_hptr("copy_d2h", device, "dst", dst, size);
    if (st == KEEL_STATUS_OK)
        st = check_dptr("copy_d2h", device, "src", src, size);
    if (st != KEEL_STATUS_OK)
        return st;
    return copy_sync(device, "copy_d2h", dst, CUDA_PTR(src), size,
                     cudaMemcpyDeviceToHost);
}

static keel_status check_d2d(const char *call, int32_t device, keel_dptr dst,
                             keel_dptr src, uint64_t size)
{
    keel_status st = check_dptr(call, device, "dst", dst, size);

    if (st == KEEL_STATUS_OK)
        st = check_dptr(call, device, "src", src, size);
    if (st == KEEL_STATUS_OK)
        st = check_no_overlap(call, device, dst, src, size);
    return st;
}

static keel_status cuda_mem_copy_d2d(int32_t device, keel_dptr dst,
                                     keel_dptr src, uint64_t size)
{
    keel_status st = cuda_enter(device, "copy_d2d");

    if (st != KEEL_STATUS_OK || size == 0)
        return st;
    st = check_d2d("copy_d2d", device, dst, src, size);
    if (st != KEEL_STATUS_OK)
        return st;
    return copy_sync(device, "copy_d2d", CUDA_PTR(dst), CUDA_PTR(src), size,
                     cudaMemcpyDeviceToDevice);
}

/* Prologue of the async copies: device, stream, size. */
static keel_status async_enter(int32_t device, keel_stream stream,
                               const char *call, cudaStream_t *cs)
{
    keel_status st = cuda_enter(device, call);

    if (st == KEEL_STATUS_OK)
        st = cuda_stream_resolve(device, stream, call, cs);
    return st;
}

static keel_status cuda_mem_copy_h2d_async(int32_t device, keel_stream stream,
                                           keel_dptr dst, const void *src,
                                           uint64_t size)
{
    cudaStream_t cs = NULL;
    keel_status st = async_enter(device, stream, "copy_h2d_async", &cs);

    if (st != KEEL_STATUS_OK || size == 0)
        return st;
    st = check_dptr("copy_h2d_async", device, "dst", dst, size);
    if (st == KEEL_STATUS_OK)
        st = check_hptr("copy_h2d_async", device, "src", src, size);
    if (st != KEEL_STATUS_OK)
        return st;
    return copy_on(device, cs, CUDA_PTR(dst), src, size,
                   cudaMemcpyHostToDevice);
}

static keel_status cuda_mem_copy_d2h_async(int32_t device, keel_stream stream,
                                           void *dst, keel_dptr src,
                                           uint64_t size)
{
    cudaStream_t cs = NULL;
    keel_status st = async_enter(device, stream, "copy_d2h_async", &cs);

    if (st != KEEL_STATUS_OK || size == 0)
        return st;
    st = check_hptr("copy_d2h_async", device, "dst", dst, size);
    if (st == KEEL_STATUS_OK)
        st = check_dptr("copy_d2h_async", device, "src", src, size);
    if (st != KEEL_STATUS_OK)
        return st;
    return copy_on(device, cs, dst, CUDA_PTR(src), size,
                   cudaMemcpyDeviceToHost);
}

static keel_status cuda_mem_copy_d2d_async(int32_t device, keel_stream stream,
                                           keel_dptr dst, keel_dptr src,
                                           uint64_t size)
{
    cudaStream_t cs = NULL;
    keel_status st = async_enter(device, stream, "copy_d2d_async", &cs);

    if (st != KEEL_STATUS_OK || size == 0)
        return st;
    st = check_d2d("copy_d2d_async", device, dst, src, size);
    if (st != KEEL_STATUS_OK)
        return st;
    return copy_on(device, cs, CUDA_PTR(dst), CUDA_PTR(src), size,
                   cudaMemcpyDeviceToDevice);
}

/* ---- peer copies --------------------------------------------------------- */

static keel_status peer_on(int32_t dst_device, keel_dptr dst,
                           int32_t src_device, keel_dptr src, uint64_t size,
                           cudaStream_t cs)
{
    return cuda_check(cudaMemcpyPeerAsync(CUDA_PTR(dst), dst_device,
                                          CUDA_PTR(src), src_device, size, cs),
                      src_device,
                      "cudaMemcpyPeerAsync(dst=%p on gpu:%d, src=%p, "
                      "size=%" PRIu64 ", stream=%p)",
                      CUDA_PTR(dst), (int)dst_device, CUDA_PTR(src), size,
                      (void *)cs);
}

/* Devices valid, src_device current, arguments sane. */
static keel_status peer_enter(const char *call, int32_t dst_device,
                              keel_dptr dst, int32_t src_device, keel_dptr src,
                              uint64_t size)
{
    keel_status st = cuda_check_device(dst_device, call);

    if (st == KEEL_STATUS_OK)
        st = cuda_enter(src_device, call);
    if (st != KEEL_STATUS_OK || size == 0)
        return st;
    st = check_dptr(call, dst_device, "dst", dst, size);
    if (st == KEEL_STATUS_OK)
        st = check_dptr(call, src_device, "src", src, size);
    if (st == KEEL_STATUS_OK && dst_device == src_device)
        st = check_no_overlap(call, src_device, dst, src, size);
    return st;
}

/* Wait for all earlier work on both devices; leaves src_device current. */
static keel_status peer_wait_both(int32_t dst_device, int32_t src_device)
{
    keel_status st = cuda_use_device(dst_device);

    if (st == KEEL_STATUS_OK)
        st = cuda_device_sync(dst_device, "copy_peer");
    if (st == KEEL_STATUS_OK)
        st = cuda_use_device(src_device);
    if (st == KEEL_STATUS_OK)
        st = cuda_device_sync(src_device, "copy_peer");
    return st;
}

static keel_status cuda_mem_copy_peer(int32_t dst_device, keel_dptr dst,
                                      int32_t src_device, keel_dptr src,
                                      uint64_t size)
{
    keel_status st;

    st = peer_enter("copy_peer", dst_device, dst, src_device, src, size);
    if (st != KEEL_STATUS_OK || size == 0)
        return st;
    if (dst_device == src_device)
        return copy_sync(src_device, "copy_peer", CUDA_PTR(dst),
                         CUDA_PTR(src), size, cudaMemcpyDeviceToDevice);
    cuda_peer_enable(src_device, dst_device, src_device);
    st = peer_wait_both(dst_device, src_device);
    if (st == KEEL_STATUS_OK)
        st = peer_on(dst_device, dst, src_device, src, size, DEFAULT_STREAM);
    if (st == KEEL_STATUS_OK)
        st = wait_default(src_device, "copy_peer");
    return st;
}

static keel_status cuda_mem_copy_peer_async(int32_t dst_device, keel_dptr dst,
                                            int32_t src_device, keel_dptr src,
                                            uint64_t size,
                                            keel_stream src_stream)
{
    cudaStream_t cs = NULL;
    keel_status st;

    st = peer_enter("copy_peer_async", dst_device, dst, src_device, src, size);
    if (st == KEEL_STATUS_OK)
        st = cuda_stream_resolve(src_device, src_stream, "copy_peer_async",
                                 &cs);
    if (st != KEEL_STATUS_OK || size == 0)
        return st;
    if (dst_device == src_device)
        return copy_on(src_device, cs, CUDA_PTR(dst), CUDA_PTR(src), size,
                       cudaMemcpyDeviceToDevice);
    cuda_peer_enable(src_device, dst_device, src_device);
    return peer_on(dst_device, dst, src_device, src, size, cs);
}

/* ---- info ---------------------------------------------------------------- */

static keel_status cuda_mem_get_memory_info(int32_t device,
                                            keel_memory_info *info)
{
    size_t free_b = 0, total_b = 0;
    keel_status st;

    st = check_out("get_memory_info", device, info, "info");
    if (st == KEEL_STATUS_OK)
        st = cuda_enter(device, "get_memory_info");
    if (st != KEEL_STATUS_OK)
        return st;
    st = cuda_check(cudaMemGetInfo(&free_b, &total_b), device,
                    "cudaMemGetInfo()");
    if (st != KEEL_STATUS_OK)
        return st;
    info->total = total_b;
    info->free = free_b;
    info->used = atomic_load(&cuda_g.used[device]);
    return KEEL_STATUS_OK;
}

/* ---- finalize ------------------------------------------------------------ */

static void release(const struct cuda_entry *e)
{
    void *p = (void *)e->key;

    if (cuda_use_device(e->device) != KEEL_STATUS_OK)
        return;
    if (e->kind == CUDA_KIND_HOST_MEM)
        (void)cudaFreeHost(p);
    else
        (void)cudaFree(p);
    (void)cudaGetLastError();
}

void cuda_memory_finalize(void)
{
    static const int32_t kinds[] = {CUDA_KIND_UNIFIED_MEM,
                                    CUDA_KIND_DEVICE_MEM, CUDA_KIND_HOST_MEM};
    struct cuda_entry e;
    unsigned n = 0;

    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        while (cuda_registry_pop(&cuda_g.mem, kinds[k], &e)) {
            release(&e);
            n++;
        }
    }
    if (n)
        cuda_log(KEEL_LOG_DEBUG, "cuda: finalize freed %u live allocations",
                 n);
}

const keel_memory_ops cuda_memory_ops = {
    .header = KEEL_TABLE_HEADER(keel_memory_ops),
    .alloc = cuda_mem_alloc,
    .free = cuda_mem_free,
    .host_alloc = cuda_mem_host_alloc,
    .host_free = cuda_mem_host_free,
    .unified_alloc = cuda_mem_unified_alloc,
    .unified_free = cuda_mem_unified_free,
    .memset = cuda_mem_memset,
    .memset_async = cuda_mem_memset_async,
    .copy_h2d = cuda_mem_copy_h2d,
    .copy_d2h = cuda_mem_copy_d2h,
    .copy_d2d = cuda_mem_copy_d2d,
    .copy_h2d_async = cuda_mem_copy_h2d_async,
    .copy_d2h_async = cuda_mem_copy_d2h_async,
    .copy_d2d_async = cuda_mem_copy_d2d_async,
    .copy_peer = cuda_mem_copy_peer,
    .get_memory_info = cuda_mem_get_memory_info,
    .copy_peer_async = cuda_mem_copy_peer_async,
};
