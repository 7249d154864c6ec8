/*
 * keel OpenCL plugin — memory group and the address table.
 *
 * ADDRESS TABLE (ocl_internal.h): allocation k owns [k << 40, (k << 40) +
 * size). The table is two-level (chunks of OCL_CHUNK slots, made on first
 * use and kept until finalize), read under a rwlock, so ocl_resolve is one
 * shared lock and one array read. Slots are handed out by a cursor that
 * only moves forward; after slot OCL_SLOT_MAX it wraps to 1 and takes the
 * next free one, so a stale address finds a freed slot long before the
 * slot is somebody else's.
 *
 * PINNED HOST: a CL_MEM_ALLOC_HOST_PTR buffer mapped once for the whole of
 * its life; the registry maps the host pointer back to the buffer.
 *
 * UNIFIED: the same kind of buffer, mapped persistently AND entered in the
 * address table, so kernels reach it by its keel address and the host by
 * the mapped pointer. OpenCL 1.2 leaves device use of a mapped buffer
 * undefined in general; on devices that share host memory (PoCL's CPU
 * devices, integrated GPUs) the mapping of an ALLOC_HOST_PTR buffer is the
 * buffer's own storage. The probe verifies exactly that on each device (a
 * host write seen by a device read, a device fill seen through the
 * mapping, on a scratch context); the feature bit and unified_alloc are
 * offered only where it holds, NOT_SUPPORTED elsewhere (and with
 * KEEL_OPENCL_UNIFIED=0). On PoCL's CPU devices it holds.
 *
 * Synchronous calls first finish every queue of the device (the ABI: they
 * wait for all earlier work), then run blocking on the default queue.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ocl_internal.h"

#define OCL_CHUNK_SHIFT 12
#define OCL_CHUNK (1u << OCL_CHUNK_SHIFT)
#define OCL_NCHUNKS ((OCL_SLOT_MAX >> OCL_CHUNK_SHIFT) + 1)
#define OCL_OFF_MASK ((UINT64_C(1) << OCL_SLOT_SHIFT) - 1)
#define OCL_PEER_CHUNK ((size_t)64 << 20)

enum { SLOT_FREE = 0, SLOT_DEVICE = 1, SLOT_UNIFIED = 2 };

struct ocl_slot {
    cl_mem mem;
    uint64_t size;
    int32_t device;
    int32_t kind;
    void *host; /* unified: the persistent mapping */
};

static pthread_rwlock_t tab_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct ocl_slot *tab[OCL_NCHUNKS];
static uint64_t tab_cursor = 1, tab_live;

struct ocl_pinned {
    void *host;
    cl_mem mem;
    uint64_t size;
    int32_t device;
    struct ocl_pinned *next;
};
static struct ocl_pinned *pinned_list;

/* ---- the table ----------------------------------------------------------- */

static struct ocl_slot *slot_at(uint64_t k)
{
    struct ocl_slot *c;

    if (k == 0 || k > OCL_SLOT_MAX)
        return NULL;
    c = tab[k >> OCL_CHUNK_SHIFT];
    return c ? &c[k & (OCL_CHUNK - 1)] : NULL;
}

/* Enter a buffer; returns the slot number or 0 (out of slots / memory). */
static uint64_t slot_add(cl_mem mem, uint64_t size, int32_t device, int kind,
                         void *host)
{
    uint64_t k = 0;

    pthread_rwlock_wrlock(&tab_lock);
    if (tab_live >= OCL_SLOT_MAX)
        goto out;
    for (uint64_t tries = 0; tries < OCL_SLOT_MAX; tries++) {
        uint64_t c = tab_cursor;
        struct ocl_slot *s;

        tab_cursor = c >= OCL_SLOT_MAX ? 1 : c + 1;
        if (!tab[c >> OCL_CHUNK_SHIFT]) {
            tab[c >> OCL_CHUNK_SHIFT] = calloc(OCL_CHUNK, sizeof(struct ocl_slot));
            if (!tab[c >> OCL_CHUNK_SHIFT])
                goto out;
        }
        s = slot_at(c);
        if (s->kind == SLOT_FREE) {
            s->mem = mem;
            s->size = size;
            s->device = device;
            s->kind = kind;
            s->host = host;
            tab_live++;
            k = c;
            break;
        }
    }
out:
    pthread_rwlock_unlock(&tab_lock);
    return k;
}

keel_status ocl_resolve(int32_t device, keel_dptr ptr, uint64_t bytes,
                        cl_mem *mem, size_t *offset)
{
    uint64_t k = ptr >> OCL_SLOT_SHIFT, off = ptr & OCL_OFF_MASK;
    const struct ocl_slot *s;
    keel_status st = KEEL_STATUS_OK;

    if (ptr == 0) {
        if (bytes == 0 && device >= 0 && device < ocl_g.ndev &&
            ocl_g.dev[device].dummy) {
            *mem = ocl_g.dev[device].dummy;
            *offset = 0;
            return KEEL_STATUS_OK;
        }
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "address 0 (NULL) used for %" PRIu64
                        " bytes on opencl:%d",
                        bytes, (int)device);
    }
    pthread_rwlock_rdlock(&tab_lock);
    s = slot_at(k);
    if (!s || s->kind == SLOT_FREE || s->device != device) {
        st = ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                      "address 0x%" PRIx64 " is not memory of opencl:%d (%s)",
                      ptr, (int)device,
                      !s || s->kind == SLOT_FREE
                          ? "freed, or never allocated by this plugin"
                          : "it belongs to another device");
    } else if (off > s->size || bytes > s->size - off) {
        st = ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                      "address 0x%" PRIx64 " + %" PRIu64
                      " bytes runs past the allocation (size %" PRIu64
                      ") on opencl:%d",
                      ptr, bytes, s->size, (int)device);
    } else {
        *mem = s->mem;
        *offset = (size_t)off;
    }
    pthread_rwlock_unlock(&tab_lock);
    return st;
}

/* ocl_resolve with the call's name in the message. */
static keel_status resolve(const char *call, const char *which, int32_t device,
                           keel_dptr ptr, uint64_t bytes, cl_mem *mem,
                           size_t *off)
{
    uint64_t k = ptr >> OCL_SLOT_SHIFT, o = ptr & OCL_OFF_MASK;
    const struct ocl_slot *s;
    keel_status st = KEEL_STATUS_OK;

    if (ptr == 0)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "%s: %s is the NULL address (%" PRIu64
                        " bytes) on opencl:%d",
                        call, which, bytes, (int)device);
    pthread_rwlock_rdlock(&tab_lock);
    s = slot_at(k);
    if (!s || s->kind == SLOT_FREE || s->device != device)
        st = ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                      "%s: %s 0x%" PRIx64 " is not memory of opencl:%d (%s)",
                      call, which, ptr, (int)device,
                      !s || s->kind == SLOT_FREE
                          ? "freed, or never allocated by this plugin"
                          : "it belongs to another device");
    else if (o > s->size || bytes > s->size - o)
        st = ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                      "%s: %s 0x%" PRIx64 " + %" PRIu64
                      " bytes runs past the allocation (size %" PRIu64
                      ") on opencl:%d",
                      call, which, ptr, bytes, s->size, (int)device);
    else {
        *mem = s->mem;
        *off = (size_t)o;
    }
    pthread_rwlock_unlock(&tab_lock);
    return st;
}

/* ---- allocation ---------------------------------------------------------- */

static keel_status check_size(const char *call, int32_t device, uint64_t size)
{
    const struct ocl_device *d = &ocl_g.dev[device];
    uint64_t used = (uint64_t)atomic_load(&ocl_g.dev[device].used);

    if (size >= OCL_ALLOC_MAX)
        return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "%s: %" PRIu64 " bytes on opencl:%d: one allocation "
                        "must stay below 1 TiB (the address table's limit)",
                        call, size, (int)device);
    if (size > d->max_alloc)
        return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "%s: %" PRIu64 " bytes on opencl:%d: more than the "
                        "device's largest allocation "
                        "(CL_DEVICE_MAX_MEM_ALLOC_SIZE %" PRIu64 ")",
                        call, size, (int)device, d->max_alloc);
    if (size > d->global_mem - (used < d->global_mem ? used : d->global_mem))
        return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "%s: %" PRIu64 " bytes on opencl:%d: %" PRIu64
                        " of %" PRIu64 " bytes are already allocated",
                        call, size, (int)device, used, d->global_mem);
    return KEEL_STATUS_OK;
}

/* A buffer of `size` bytes whose storage really exists: some platforms
 * (PoCL) allocate on first use, so a 1-byte fill on the private queue
 * makes the failure show here rather than in a later kernel. */
static keel_status make_buffer(const char *call, int32_t device, uint64_t size,
                               cl_mem_flags flags, cl_mem *out)
{
    struct ocl_device *d = &ocl_g.dev[device];
    cl_int err = CL_SUCCESS, es = CL_COMPLETE;
    cl_event ev = NULL;
    cl_uchar zero = 0;
    cl_mem m;

    m = clCreateBuffer(d->ctx, flags, (size_t)size, NULL, &err);
    if (!m) {
        keel_status st = ocl_status_of(err);

        if (st != KEEL_STATUS_OUT_OF_MEMORY && st != KEEL_STATUS_INVALID_ARGUMENT)
            return ocl_check(err, device, call);
        return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "%s: %" PRIu64 " bytes on opencl:%d: clCreateBuffer: "
                        "%s",
                        call, size, (int)device, ocl_err_name(err));
    }
    err = clEnqueueFillBuffer(ocl_rt[device].xq, m, &zero, 1, 0, 1, 0, NULL,
                              &ev);
    if (err == CL_SUCCESS) {
        err = clWaitForEvents(1, &ev);
        if (clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(es),
                           &es, NULL) == CL_SUCCESS &&
            es < 0)
            err = es;
        clReleaseEvent(ev);
    }
    if (err != CL_SUCCESS) {
        clReleaseMemObject(m);
        return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "%s: %" PRIu64 " bytes on opencl:%d: the device "
                        "could not back the buffer (%s)",
                        call, size, (int)device, ocl_err_name(err));
    }
    *out = m;
    return KEEL_STATUS_OK;
}

static keel_status ocl_alloc(int32_t device, uint64_t size, keel_dptr *ptr)
{
    keel_status st = ocl_device_ok(device);
    cl_mem m = NULL;
    uint64_t k;

    if (st)
        return st;
    if (!ptr)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT, "alloc: ptr is NULL");
    *ptr = 0;
    if (size == 0)
        return KEEL_STATUS_OK;
    st = check_size("alloc", device, size);
    if (st)
        return st;
    st = make_buffer("alloc", device, size, CL_MEM_READ_WRITE, &m);
    if (st)
        return st;
    k = slot_add(m, size, device, SLOT_DEVICE, NULL);
    if (!k) {
        clReleaseMemObject(m);
        return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "alloc: opencl:%d: the address table is full (%" PRIu64
                        " live allocations)",
                        (int)device, (uint64_t)OCL_SLOT_MAX);
    }
    atomic_fetch_add(&ocl_g.dev[device].used, (int_least64_t)size);
    *ptr = k << OCL_SLOT_SHIFT;
    return KEEL_STATUS_OK;
}

/* Take slot k (of `kind`, at offset 0) out of the table. */
static keel_status slot_remove(const char *call, int32_t device, keel_dptr ptr,
                               int kind, struct ocl_slot *out)
{
    struct ocl_slot *s;
    keel_status st = KEEL_STATUS_OK;

    pthread_rwlock_wrlock(&tab_lock);
    s = (ptr & OCL_OFF_MASK) ? NULL : slot_at(ptr >> OCL_SLOT_SHIFT);
    if (!s || s->kind != kind || s->device != device) {
        st = ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                      "%s: 0x%" PRIx64 " is not a live %s allocation of "
                      "opencl:%d%s",
                      call, ptr, kind == SLOT_UNIFIED ? "unified" : "device",
                      (int)device,
                      (ptr & OCL_OFF_MASK) ? " (it points inside one)" : "");
    } else {
        *out = *s;
        memset(s, 0, sizeof(*s));
        tab_live--;
    }
    pthread_rwlock_unlock(&tab_lock);
    return st;
}

static keel_status ocl_free(int32_t device, keel_dptr ptr)
{
    keel_status st = ocl_device_ok(device);
    struct ocl_slot s;

    if (st)
        return st;
    if (ptr == 0)
        return KEEL_STATUS_OK;
    st = slot_remove("free", device, ptr, SLOT_DEVICE, &s);
    if (st)
        return st;
    atomic_fetch_sub(&ocl_g.dev[device].used, (int_least64_t)s.size);
    /* OpenCL keeps the storage until the commands using it have run. */
    clReleaseMemObject(s.mem);
    return KEEL_STATUS_OK;
}

/* A buffer mapped persistently for the host (pinned and unified). */
static keel_status map_host(const char *call, int32_t device, uint64_t size,
                            cl_mem *m, void **host)
{
    cl_int err = CL_SUCCESS;
    keel_status st;
    void *p;

    st = make_buffer(call, device, size, CL_MEM_READ_WRITE |
                                             CL_MEM_ALLOC_HOST_PTR, m);
    if (st)
        return st;
    p = clEnqueueMapBuffer(ocl_rt[device].xq, *m, CL_TRUE,
                           CL_MAP_READ | CL_MAP_WRITE, 0, (size_t)size, 0,
                           NULL, NULL, &err);
    if (!p) {
        clReleaseMemObject(*m);
        *m = NULL;
        return ocl_fail(err == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
                                err == CL_OUT_OF_RESOURCES ||
                                err == CL_OUT_OF_HOST_MEMORY ||
                                err == CL_MAP_FAILURE
                            ? KEEL_STATUS_OUT_OF_MEMORY
                            : ocl_status_of(err),
                        "%s: mapping %" PRIu64 " bytes on opencl:%d: %s",
                        call, size, (int)device, ocl_err_name(err));
    }
    *host = p;
    return KEEL_STATUS_OK;
}

static void unmap_release(int32_t device, cl_mem m, void *host)
{
    cl_event ev = NULL;

    if (host && clEnqueueUnmapMemObject(ocl_rt[device].xq, m, host, 0, NULL,
                                        &ev) == CL_SUCCESS) {
        clWaitForEvents(1, &ev);
        clReleaseEvent(ev);
    }
    clReleaseMemObject(m);
}

static keel_status ocl_host_alloc(int32_t device, uint64_t size, void **ptr)
{
    keel_status st = ocl_device_ok(device);
    struct ocl_pinned *p;
    cl_mem m = NULL;
    void *h = NULL;

    if (st)
        return st;
    if (!ptr)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "host_alloc: ptr is NULL");
    *ptr = NULL;
    if (size == 0)
        return KEEL_STATUS_OK;
    if (size >= OCL_ALLOC_MAX || size > SIZE_MAX / 2 ||
        size > ocl_g.dev[device].max_alloc)
        return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "host_alloc: %" PRIu64 " bytes of pinned memory for "
                        "opencl:%d: more than one buffer may hold (%" PRIu64
                        ")",
                        size, (int)device, ocl_g.dev[device].max_alloc);
    p = calloc(1, sizeof(*p));
    if (!p)
        return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "host_alloc: out of host memory");
    st = map_host("host_alloc", device, size, &m, &h);
    if (st) {
        free(p);
        return st;
    }
    p->host = h;
    p->mem = m;
    p->size = size;
    p->device = device;
    pthread_mutex_lock(&ocl_reg_lock);
    p->next = pinned_list;
    pinned_list = p;
    pthread_mutex_unlock(&ocl_reg_lock);
    *ptr = h;
    return KEEL_STATUS_OK;
}

static keel_status ocl_host_free(int32_t device, void *ptr)
{
    keel_status st = ocl_device_ok(device);
    struct ocl_pinned **pp, *p = NULL;

    if (st)
        return st;
    if (!ptr)
        return KEEL_STATUS_OK;
    pthread_mutex_lock(&ocl_reg_lock);
    for (pp = &pinned_list; *pp; pp = &(*pp)->next)
        if ((*pp)->host == ptr && (*pp)->device == device) {
            p = *pp;
            *pp = p->next;
            break;
        }
    pthread_mutex_unlock(&ocl_reg_lock);
    if (!p)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "host_free: %p is not pinned memory host_alloc gave "
                        "for opencl:%d",
                        ptr, (int)device);
    unmap_release(device, p->mem, p->host);
    free(p);
    return KEEL_STATUS_OK;
}

/* Does a persistently mapped ALLOC_HOST_PTR buffer behave as shared
 * storage on this device? Checked both ways on a small buffer. */
bool ocl_unified_probe(int32_t device)
{
    enum { N = 4096 };
    struct ocl_device *d = &ocl_g.dev[device];
    unsigned char back[64];
    cl_uchar v = 0x5a;
    cl_mem m = NULL;
    void *h = NULL;
    bool ok = false;
    const char *env = ocl_env("KEEL_OPENCL_UNIFIED");

    if (env && !strcmp(env, "0"))
        return false;
    if (!d->unified_host)
        return false;
    if (map_host("unified probe", device, N, &m, &h) != KEEL_STATUS_OK)
        return false;
    memset(h, 0xa5, N);
    if (clEnqueueReadBuffer(ocl_rt[device].xq, m, CL_TRUE, 1000,
                            sizeof(back), back, 0, NULL, NULL) != CL_SUCCESS)
        goto out;
    for (size_t i = 0; i < sizeof(back); i++)
        if (back[i] != 0xa5)
            goto out;
    if (clEnqueueFillBuffer(ocl_rt[device].xq, m, &v, 1, 2048, 64, 0, NULL,
                            NULL) != CL_SUCCESS ||
        clFinish(ocl_rt[device].xq) != CL_SUCCESS)
        goto out;
    for (size_t i = 0; i < 64; i++)
        if (((unsigned char *)h)[2048 + i] != 0x5a)
            goto out;
    ok = ((unsigned char *)h)[2047] == 0xa5 &&
         ((unsigned char *)h)[2048 + 64] == 0xa5;
out:
    unmap_release(device, m, h);
    return ok;
}

static keel_status ocl_unified_alloc(int32_t device, uint64_t size,
                                     keel_dptr *dptr, void **hptr)
{
    keel_status st = ocl_device_ok(device);
    cl_mem m = NULL;
    void *h = NULL;
    uint64_t k;

    if (st)
        return st;
    if (!dptr || !hptr)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "unified_alloc: %s is NULL", dptr ? "hptr" : "dptr");
    *dptr = 0;
    *hptr = NULL;
    if (!ocl_rt[device].unified_ok)
        return ocl_fail(KEEL_STATUS_NOT_SUPPORTED,
                        "unified_alloc: opencl:%d does not share host memory "
                        "(CL_DEVICE_HOST_UNIFIED_MEMORY, verified at probe)",
                        (int)device);
    if (size == 0)
        return KEEL_STATUS_OK;
    st = check_size("unified_alloc", device, size);
    if (st)
        return st;
    st = map_host("unified_alloc", device, size, &m, &h);
    if (st)
        return st;
    k = slot_add(m, size, device, SLOT_UNIFIED, h);
    if (!k) {
        unmap_release(device, m, h);
        return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "unified_alloc: opencl:%d: the address table is full",
                        (int)device);
    }
    atomic_fetch_add(&ocl_g.dev[device].used, (int_least64_t)size);
    *dptr = k << OCL_SLOT_SHIFT;
    *hptr = h;
    return KEEL_STATUS_OK;
}

static keel_status ocl_unified_free(int32_t device, keel_dptr dptr)
{
    keel_status st = ocl_device_ok(device);
    struct ocl_slot s;

    if (st)
        return st;
    if (dptr == 0)
        return KEEL_STATUS_OK;
    st = slot_remove("unified_free", device, dptr, SLOT_UNIFIED, &s);
    if (st)
        return st;
    atomic_fetch_sub(&ocl_g.dev[device].used, (int_least64_t)s.size);
    unmap_release(device, s.mem, s.host);
    return KEEL_STATUS_OK;
}

/* ---- memset and copies --------------------------------------------------- */

static keel_status enq_check(cl_int err, int32_t device, const char *call)
{
    return ocl_check(err, device, call);
}

static keel_status do_memset(const char *call, int32_t device,
                             keel_stream stream, bool sync, keel_dptr dst,
                             uint8_t value, uint64_t size)
{
    keel_status st = ocl_device_ok(device);
    cl_command_queue q;
    cl_mem m;
    size_t off;
    cl_uchar v = value;

    if (st)
        return st;
    st = ocl_queue(device, stream, &q);
    if (st)
        return st;
    if (size == 0)
        return KEEL_STATUS_OK;
    st = resolve(call, "destination", device, dst, size, &m, &off);
    if (st)
        return st;
    if (sync) {
        st = ocl_finish_all(device);
        if (st)
            return st;
    }
    st = enq_check(clEnqueueFillBuffer(q, m, &v, 1, off, (size_t)size, 0, NULL,
                                       NULL),
                   device, call);
    if (st)
        return st;
    return enq_check(sync ? clFinish(q) : clFlush(q), device, call);
}

static keel_status ocl_memset(int32_t device, keel_dptr dst, uint8_t value,
                              uint64_t size)
{
    return do_memset("memset", device, NULL, true, dst, value, size);
}

static keel_status ocl_memset_async(int32_t device, keel_stream stream,
                                    keel_dptr dst, uint8_t value,
                                    uint64_t size)
{
    return do_memset("memset_async", device, stream, false, dst, value, size);
}

static keel_status host_ptr_ok(const char *call, const char *which,
                               const void *p, uint64_t size)
{
    if (!p)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: %s is NULL", call,
                        which);
    if (size > SIZE_MAX || (uintptr_t)p > UINTPTR_MAX - (uintptr_t)size)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "%s: %s %p + %" PRIu64 " bytes wraps the address "
                        "space",
                        call, which, p, size);
    return KEEL_STATUS_OK;
}

enum dir { H2D, D2H, D2D };

static keel_status do_copy(const char *call, enum dir dir, int32_t device,
                           keel_stream stream, bool sync, keel_dptr dptr_dst,
                           void *hdst, keel_dptr dptr_src, const void *hsrc,
                           uint64_t size)
{
    keel_status st = ocl_device_ok(device);
    cl_command_queue q;
    cl_mem md = NULL, ms = NULL;
    size_t od = 0, os = 0;
    cl_bool blk = sync ? CL_TRUE : CL_FALSE;
    cl_int err;

    if (st)
        return st;
    st = ocl_queue(device, stream, &q);
    if (st)
        return st;
    if (size == 0)
        return KEEL_STATUS_OK;
    if (dir == H2D)
        st = host_ptr_ok(call, "source", hsrc, size);
    else if (dir == D2H)
        st = host_ptr_ok(call, "destination", hdst, size);
    if (st)
        return st;
    if (dir != D2H)
        st = resolve(call, "destination", device, dptr_dst, size, &md, &od);
    if (!st && dir != H2D)
        st = resolve(call, "source", device, dptr_src, size, &ms, &os);
    if (st)
        return st;
    if (dir == D2D && md == ms &&
        !(od + size <= os || os + size <= od))
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "%s: destination 0x%" PRIx64 " and source 0x%" PRIx64
                        " overlap (%" PRIu64 " bytes) on opencl:%d",
                        call, dptr_dst, dptr_src, size, (int)device);
    if (sync) {
        st = ocl_finish_all(device);
        if (st)
            return st;
    }
    switch (dir) {
    case H2D:
        err = clEnqueueWriteBuffer(q, md, blk, od, (size_t)size, hsrc, 0, NULL,
                                   NULL);
        break;
    case D2H:
        err = clEnqueueReadBuffer(q, ms, blk, os, (size_t)size, hdst, 0, NULL,
                                  NULL);
        break;
    default:
        err = clEnqueueCopyBuffer(q, ms, md, os, od, (size_t)size, 0, NULL,
                                  NULL);
        if (err == CL_SUCCESS && sync)
            err = clFinish(q);
        break;
    }
    if (err == CL_SUCCESS && !sync)
        err = clFlush(q);
    return enq_check(err, device, call);
}

static keel_status ocl_copy_h2d(int32_t device, keel_dptr dst, const void *src,
                                uint64_t size)
{
    return do_copy("copy_h2d", H2D, device, NULL, true, dst, NULL, 0, src,
                   size);
}

static keel_status ocl_copy_d2h(int32_t device, void *dst, keel_dptr src,
                                uint64_t size)
{
    return do_copy("copy_d2h", D2H, device, NULL, true, 0, dst, src, NULL,
                   size);
}

static keel_status ocl_copy_d2d(int32_t device, keel_dptr dst, keel_dptr src,
                                uint64_t size)
{
    return do_copy("copy_d2d", D2D, device, NULL, true, dst, NULL, src, NULL,
                   size);
}

static keel_status ocl_copy_h2d_async(int32_t device, keel_stream stream,
                                      keel_dptr dst, const void *src,
                                      uint64_t size)
{
    return do_copy("copy_h2d_async", H2D, device, stream, false, dst, NULL, 0,
                   src, size);
}

static keel_status ocl_copy_d2h_async(int32_t device, keel_stream stream,
                                      void *dst, keel_dptr src, uint64_t size)
{
    return do_copy("copy_d2h_async", D2H, device, stream, false, 0, dst, src,
                   NULL, size);
}

static keel_status ocl_copy_d2d_async(int32_t device, keel_stream stream,
                                      keel_dptr dst, keel_dptr src,
                                      uint64_t size)
{
    return do_copy("copy_d2d_async", D2D, device, stream, false, dst, NULL,
                   src, NULL, size);
}

/* ---- peer copies (through host memory: one context per device) ---------- */

struct peer_job {
    int32_t dd, sd;
    cl_mem md, ms;
    size_t od, os;
    uint64_t size;
};

/* Blocking transfer src -> host -> dst on the devices' private queues. */
static cl_int peer_move(const struct peer_job *j, int32_t *fail_dev)
{
    size_t chunk = j->size < OCL_PEER_CHUNK ? (size_t)j->size : OCL_PEER_CHUNK;
    unsigned char *buf = malloc(chunk ? chunk : 1);
    cl_int err = CL_SUCCESS;

    if (!buf)
        return CL_OUT_OF_HOST_MEMORY;
    for (uint64_t done = 0; done < j->size && err == CL_SUCCESS;) {
        size_t n = j->size - done < chunk ? (size_t)(j->size - done) : chunk;

        *fail_dev = j->sd;
        err = clEnqueueReadBuffer(ocl_rt[j->sd].xq, j->ms, CL_TRUE,
                                  j->os + (size_t)done, n, buf, 0, NULL, NULL);
        if (err == CL_SUCCESS) {
            *fail_dev = j->dd;
            err = clEnqueueWriteBuffer(ocl_rt[j->dd].xq, j->md, CL_TRUE,
                                       j->od + (size_t)done, n, buf, 0, NULL,
                                       NULL);
        }
        done += n;
    }
    free(buf);
    return err;
}

static keel_status peer_prepare(const char *call, int32_t dd, keel_dptr dst,
                                int32_t sd, keel_dptr src, uint64_t size,
                                struct peer_job *j)
{
    keel_status st = ocl_device_ok(dd);

    if (!st)
        st = ocl_device_ok(sd);
    if (st)
        return st;
    memset(j, 0, sizeof(*j));
    j->dd = dd;
    j->sd = sd;
    j->size = size;
    if (size == 0)
        return KEEL_STATUS_OK;
    st = resolve(call, "destination", dd, dst, size, &j->md, &j->od);
    if (!st)
        st = resolve(call, "source", sd, src, size, &j->ms, &j->os);
    if (!st && dd == sd && j->md == j->ms &&
        !(j->od + size <= j->os || j->os + size <= j->od))
        st = ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                      "%s: destination 0x%" PRIx64 " and source 0x%" PRIx64
                      " overlap (%" PRIu64 " bytes) on opencl:%d",
                      call, dst, src, size, (int)dd);
    return st;
}

static keel_status ocl_copy_peer(int32_t dst_device, keel_dptr dst,
                                 int32_t src_device, keel_dptr src,
                                 uint64_t size)
{
    struct peer_job j;
    keel_status st;
    int32_t fd = src_device;
    cl_int err;

    st = peer_prepare("copy_peer", dst_device, dst, src_device, src, size, &j);
    if (st || size == 0)
        return st;
    if (dst_device == src_device)
        return ocl_copy_d2d(dst_device, dst, src, size);
    st = ocl_finish_all(src_device);
    if (!st)
        st = ocl_finish_all(dst_device);
    if (st)
        return st;
    err = peer_move(&j, &fd);
    return ocl_check(err, fd, "copy_peer");
}

static void peer_job_run(void *arg)
{
    struct peer_job *j = arg;
    int32_t fd = j->sd;
    cl_int err = peer_move(j, &fd);

    if (err != CL_SUCCESS)
        ocl_async_fail(j->sd, ocl_status_of(err),
                       "copy_peer_async opencl:%d -> opencl:%d: %s on "
                       "opencl:%d",
                       (int)j->sd, (int)j->dd, ocl_err_name(err), (int)fd);
    clReleaseMemObject(j->md);
    clReleaseMemObject(j->ms);
    free(j);
}

static keel_status ocl_copy_peer_async(int32_t dst_device, keel_dptr dst,
                                       int32_t src_device, keel_dptr src,
                                       uint64_t size, keel_stream src_stream)
{
    struct peer_job j, *jp;
    cl_command_queue q;
    keel_status st;

    st = peer_prepare("copy_peer_async", dst_device, dst, src_device, src,
                      size, &j);
    if (st)
        return st;
    st = ocl_queue(src_device, src_stream, &q);
    if (st || size == 0)
        return st;
    if (dst_device == src_device)
        return ocl_copy_d2d_async(src_device, src_stream, dst, src, size);
    /* The stream's earlier work done, a worker moves the bytes; later work
     * on the stream waits for it. */
    jp = malloc(sizeof(*jp));
    if (!jp)
        return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "copy_peer_async: out of host memory");
    *jp = j;
    clRetainMemObject(jp->md);
    clRetainMemObject(jp->ms);
    st = ocl_enqueue_host_job(src_device, q, peer_job_run, jp,
                              "copy_peer_async");
    if (st) {
        clReleaseMemObject(jp->md);
        clReleaseMemObject(jp->ms);
        free(jp);
    }
    return st;
}

static keel_status ocl_get_memory_info(int32_t device, keel_memory_info *info)
{
    keel_status st = ocl_device_ok(device);
    uint64_t used, total;

    if (st)
        return st;
    if (!info)
        return ocl_fail(KEEL_STATUS_INVALID_ARGUMENT,
                        "get_memory_info: info is NULL");
    used = (uint64_t)atomic_load(&ocl_g.dev[device].used);
    total = ocl_g.dev[device].global_mem;
    info->total = total;
    info->used = used;
    info->free = used < total ? total - used : 0;
    return KEEL_STATUS_OK;
}

/* ---- finalize ------------------------------------------------------------ */

void ocl_mem_release_device(int32_t device)
{
    struct ocl_pinned **pp = &pinned_list;

    pthread_rwlock_wrlock(&tab_lock);
    for (size_t c = 0; c < OCL_NCHUNKS; c++) {
        if (!tab[c])
            continue;
        for (size_t i = 0; i < OCL_CHUNK; i++) {
            struct ocl_slot *s = &tab[c][i];

            if (s->kind == SLOT_FREE || s->device != device)
                continue;
            if (s->kind == SLOT_UNIFIED)
                unmap_release(device, s->mem, s->host);
            else
                clReleaseMemObject(s->mem);
            memset(s, 0, sizeof(*s));
            tab_live--;
        }
    }
    pthread_rwlock_unlock(&tab_lock);
    pthread_mutex_lock(&ocl_reg_lock);
    while (*pp) {
        struct ocl_pinned *p = *pp;

        if (p->device != device) {
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        unmap_release(device, p->mem, p->host);
        free(p);
    }
    pthread_mutex_unlock(&ocl_reg_lock);
    atomic_store(&ocl_g.dev[device].used, 0);
}

void ocl_mem_finalize(void)
{
    pthread_rwlock_wrlock(&tab_lock);
    for (size_t c = 0; c < OCL_NCHUNKS; c++) {
        free(tab[c]);
        tab[c] = NULL;
    }
    tab_cursor = 1;
    tab_live = 0;
    pthread_rwlock_unlock(&tab_lock);
}

const keel_memory_ops ocl_memory_ops = {
    .header = KEEL_TABLE_HEADER(keel_memory_ops),
    .alloc = ocl_alloc,
    .free = ocl_free,
    .host_alloc = ocl_host_alloc,
    .host_free = ocl_host_free,
    .unified_alloc = ocl_unified_alloc,
    .unified_free = ocl_unified_free,
    .memset = ocl_memset,
    .memset_async = ocl_memset_async,
    .copy_h2d = ocl_copy_h2d,
    .copy_d2h = ocl_copy_d2h,
    .copy_d2d = ocl_copy_d2d,
    .copy_h2d_async = ocl_copy_h2d_async,
    .copy_d2h_async = ocl_copy_d2h_async,
    .copy_d2d_async = ocl_copy_d2d_async,
    .copy_peer = ocl_copy_peer,
    .get_memory_info = ocl_get_memory_info,
    .copy_peer_async = ocl_copy_peer_async,
};
