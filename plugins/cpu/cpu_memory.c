/*
 * keel CPU reference plugin — memory group.
 *
 * Each virtual device keeps two tables of live blocks, sorted by host
 * address: device memory (alloc and unified_alloc, accounted against
 * KEEL_CPU_MEM_LIMIT) and pinned host memory (host_alloc, not accounted).
 * Every block is aligned to CPU_ALIGNMENT. Copies and memsets check that
 * each device range lies inside one live block before touching it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

/* ------------------------------------------------------------------------ */
/* Allocation tables                                                        */
/* ------------------------------------------------------------------------ */

/* Index of the first block whose base is > addr. */
static size_t cpu_table_upper(const struct cpu_alloc_table *t, uintptr_t addr)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->v[mid].base <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int cpu_table_insert(struct cpu_alloc_table *t,
			    const struct cpu_alloc *a)
{
	size_t i;

	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		struct cpu_alloc *v = realloc(t->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		t->v = v;
		t->cap = cap;
	}
	i = cpu_table_upper(t, a->base);
	memmove(&t->v[i + 1], &t->v[i], (t->n - i) * sizeof(t->v[0]));
	t->v[i] = *a;
	t->n++;
	return 0;
}

/* The block that contains addr (or NULL). */
static struct cpu_alloc *cpu_table_containing(const struct cpu_alloc_table *t,
					      uintptr_t addr)
{
	size_t i = cpu_table_upper(t, addr);
	struct cpu_alloc *a;

	if (i == 0)
		return NULL;
	a = &t->v[i - 1];
	if (addr - a->base < a->size)
		return a;
	return NULL;
}

static void cpu_table_remove(struct cpu_alloc_table *t, struct cpu_alloc *a)
{
	size_t i = (size_t)(a - t->v);

	memmove(&t->v[i], &t->v[i + 1], (t->n - i - 1) * sizeof(t->v[0]));
	t->n--;
}

static void cpu_table_release(struct cpu_alloc_table *t)
{
	size_t i;

	for (i = 0; i < t->n; i++)
		free((void *)t->v[i].base);
	free(t->v);
	memset(t, 0, sizeof(*t));
}

void cpu_mem_device_init(struct cpu_device *dev)
{
	pthread_mutex_init(&dev->mem_lock, NULL);
	memset(&dev->dev_allocs, 0, sizeof(dev->dev_allocs));
	memset(&dev->host_allocs, 0, sizeof(dev->host_allocs));
	memset(&dev->registered, 0, sizeof(dev->registered));
	dev->used = 0;
}

void cpu_mem_device_release(struct cpu_device *dev)
{
	if (dev->dev_allocs.n || dev->host_allocs.n)
		cpu_log(KEEL_LOG_DEBUG,
			"cpu plugin: finalize frees %zu device and %zu pinned host blocks still live on cpu:%d",
			dev->dev_allocs.n, dev->host_allocs.n, (int)dev->index);
	cpu_table_release(&dev->dev_allocs);
	cpu_table_release(&dev->host_allocs);
	/* Registered ranges are the caller's memory: forgotten, not freed. */
	free(dev->registered.v);
	memset(&dev->registered, 0, sizeof(dev->registered));
	dev->used = 0;
	pthread_mutex_destroy(&dev->mem_lock);
}

static const char *cpu_alloc_kind_call(enum cpu_alloc_kind kind)
{
	switch (kind) {
	case CPU_ALLOC_DEVICE: return "alloc";
	case CPU_ALLOC_UNIFIED: return "unified_alloc";
	case CPU_ALLOC_HOST: return "host_alloc";
	}
	return "alloc";
}

/* ------------------------------------------------------------------------ */
/* Range checks                                                             */
/* ------------------------------------------------------------------------ */

/* True when [h, h + size) lies inside one live allocation or one
 * register_host range of dev. Called with mem_lock held; size > 0 and
 * h + size does not wrap. */
static bool cpu_range_known(const struct cpu_device *dev, uintptr_t h,
			    uint64_t size)
{
	const struct cpu_alloc *a = cpu_table_containing(&dev->dev_allocs, h);

	if (a && size <= a->size - (h - a->base))
		return true;
	for (size_t i = 0; i < dev->registered.n; i++) {
		a = &dev->registered.v[i];
		if (h >= a->base && h - a->base < a->size &&
		    size <= a->size - (h - a->base))
			return true;
	}
	return false;
}

static keel_status cpu_range_error(struct cpu_device *dev, keel_dptr ptr,
				   uint64_t size, const char *call)
{
	return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
		       "%s: range [0x%" PRIx64 ", 0x%" PRIx64
		       ") (%" PRIu64 " bytes) not inside a live allocation of cpu:%d",
		       call, ptr, ptr + size, size, (int)dev->index);
}

int cpu_mem_range_many(struct cpu_device *dev, int n, const keel_dptr *ptr,
		       const uint64_t *size, void **host)
{
	int bad = -1;

	pthread_mutex_lock(&dev->mem_lock);
	for (int i = 0; i < n && bad < 0; i++) {
		uintptr_t h = cpu_dptr_to_host(ptr[i]);

		if (size[i] == 0) {
			host[i] = NULL;
			continue;
		}
		if (ptr[i] == 0 || h + size[i] < h) {
			bad = i;
			break;
		}
		if (!cpu_range_known(dev, h, size[i]))
			bad = i;
		else
			host[i] = (void *)h;
	}
	pthread_mutex_unlock(&dev->mem_lock);
	return bad;
}

keel_status cpu_mem_range(struct cpu_device *dev, keel_dptr ptr,
			  uint64_t size, const char *call, void **host)
{
	uintptr_t h = cpu_dptr_to_host(ptr);
	bool ok;

	if (ptr == 0 || h + size < h)
		return cpu_range_error(dev, ptr, size, call);
	pthread_mutex_lock(&dev->mem_lock);
	ok = cpu_range_known(dev, h, size ? size : 1);
	pthread_mutex_unlock(&dev->mem_lock);
	if (!ok)
		return cpu_range_error(dev, ptr, size, call);
	*host = (void *)h;
	return KEEL_STATUS_OK;
}

/* ------------------------------------------------------------------------ */
/* Allocation                                                               */
/* ------------------------------------------------------------------------ */

/* Allocate and track one block; *out is its host address. */
static keel_status cpu_block_alloc(struct cpu_device *dev, uint64_t size,
				   enum cpu_alloc_kind kind, uintptr_t *out)
{
	struct cpu_alloc_table *t = kind == CPU_ALLOC_HOST ? &dev->host_allocs
							   : &dev->dev_allocs;
	const char *call = cpu_alloc_kind_call(kind);
	uint64_t limit = cpu_g.cfg.mem_limit;
	struct cpu_alloc a = { 0, size, kind };
	keel_status st = KEEL_STATUS_OK;
	void *p = NULL;

	pthread_mutex_lock(&dev->mem_lock);
	if (kind != CPU_ALLOC_HOST && limit &&
	    (size > limit || dev->used > limit - size)) {
		st = cpu_err(KEEL_STATUS_OUT_OF_MEMORY,
			     "%s: cannot allocate %" PRIu64
			     " bytes on cpu:%d: %" PRIu64 " bytes in use, limit %" PRIu64
			     " bytes (KEEL_CPU_MEM_LIMIT)",
			     call, size, (int)dev->index, dev->used, limit);
		goto out;
	}
	/* A single block larger than the machine's memory cannot succeed;
	 * say so without asking the allocator (sanitizer runtimes abort on
	 * absurd sizes instead of failing). */
	if (size > (uint64_t)SIZE_MAX - CPU_ALIGNMENT ||
	    (cpu_g.phys_mem && size > cpu_g.phys_mem) ||
	    posix_memalign(&p, CPU_ALIGNMENT,
			   (size + CPU_ALIGNMENT - 1) & ~(uint64_t)(CPU_ALIGNMENT - 1))) {
		st = cpu_err(KEEL_STATUS_OUT_OF_MEMORY,
			     "%s: cannot allocate %" PRIu64
			     " bytes on cpu:%d: the host is out of memory (%" PRIu64
			     " bytes in use on this device)",
			     call, size, (int)dev->index, dev->used);
		goto out;
	}
	a.base = (uintptr_t)p;
	if (cpu_table_insert(t, &a)) {
		free(p);
		st = cpu_err(KEEL_STATUS_OUT_OF_MEMORY,
			     "%s: cannot track a new block on cpu:%d: out of host memory",
			     call, (int)dev->index);
		goto out;
	}
	if (kind != CPU_ALLOC_HOST)
		dev->used += size;
	*out = a.base;
out:
	pthread_mutex_unlock(&dev->mem_lock);
	return st;
}

/* Untrack and free the block starting at host address h. */
static keel_status cpu_block_free(struct cpu_device *dev, uintptr_t h,
				  enum cpu_alloc_kind kind, const char *call,
				  const char *shown)
{
	struct cpu_alloc_table *t = kind == CPU_ALLOC_HOST ? &dev->host_allocs
							   : &dev->dev_allocs;
	keel_status st = KEEL_STATUS_OK;
	struct cpu_alloc *a;

	pthread_mutex_lock(&dev->mem_lock);
	a = cpu_table_containing(t, h);
	if (!a) {
		st = cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			     "%s: %s is not a live %s allocation of cpu:%d",
			     call, shown, cpu_alloc_kind_call(kind),
			     (int)dev->index);
		goto out;
	}
	if (a->base != h) {
		st = cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			     "%s: %s points %" PRIuPTR
			     " bytes into a block of cpu:%d; pass the address %s returned",
			     call, shown, h - a->base, (int)dev->index,
			     cpu_alloc_kind_call(a->kind));
		goto out;
	}
	if (a->kind != kind) {
		st = cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			     "%s: %s on cpu:%d came from %s, not %s",
			     call, shown, (int)dev->index,
			     cpu_alloc_kind_call(a->kind),
			     cpu_alloc_kind_call(kind));
		goto out;
	}
	if (kind != CPU_ALLOC_HOST)
		dev->used -= a->size;
	cpu_table_remove(t, a);
	free((void *)h);
out:
	pthread_mutex_unlock(&dev->mem_lock);
	return st;
}

static keel_status cpu_alloc(int32_t device, uint64_t size, keel_dptr *ptr)
{
	struct cpu_device *dev;
	keel_status st;
	uintptr_t h;

	st = cpu_dev_get(device, "alloc", &dev);
	if (st)
		return st;
	if (!ptr)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT, "alloc: ptr is NULL");
	*ptr = 0;
	if (!size)
		return KEEL_STATUS_OK;
	st = cpu_block_alloc(dev, size, CPU_ALLOC_DEVICE, &h);
	if (st)
		return st;
	*ptr = cpu_host_to_dptr(h);
	return KEEL_STATUS_OK;
}

static keel_status cpu_free(int32_t device, keel_dptr ptr)
{
	struct cpu_device *dev;
	char shown[32];
	keel_status st;

	st = cpu_dev_get(device, "free", &dev);
	if (st || !ptr)
		return st;
	snprintf(shown, sizeof(shown), "0x%" PRIx64, ptr);
	return cpu_block_free(dev, cpu_dptr_to_host(ptr), CPU_ALLOC_DEVICE,
			      "free", shown);
}

static keel_status cpu_host_alloc(int32_t device, uint64_t size, void **ptr)
{
	struct cpu_device *dev;
	keel_status st;
	uintptr_t h;

	st = cpu_dev_get(device, "host_alloc", &dev);
	if (st)
		return st;
	if (!ptr)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "host_alloc: ptr is NULL");
	*ptr = NULL;
	if (!size)
		return KEEL_STATUS_OK;
	st = cpu_block_alloc(dev, size, CPU_ALLOC_HOST, &h);
	if (st)
		return st;
	*ptr = (void *)h;
	return KEEL_STATUS_OK;
}

static keel_status cpu_host_free(int32_t device, void *ptr)
{
	struct cpu_device *dev;
	char shown[32];
	keel_status st;

	st = cpu_dev_get(device, "host_free", &dev);
	if (st || !ptr)
		return st;
	snprintf(shown, sizeof(shown), "%p", ptr);
	return cpu_block_free(dev, (uintptr_t)ptr, CPU_ALLOC_HOST, "host_free",
			      shown);
}

static keel_status cpu_unified_alloc(int32_t device, uint64_t size,
				     keel_dptr *dptr, void **hptr)
{
	struct cpu_device *dev;
	keel_status st;
	uintptr_t h;

	st = cpu_dev_get(device, "unified_alloc", &dev);
	if (st)
		return st;
	if (!dptr || !hptr)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "unified_alloc: %s is NULL",
			       !dptr ? "dptr" : "hptr");
	*dptr = 0;
	*hptr = NULL;
	if (!size)
		return KEEL_STATUS_OK;
	st = cpu_block_alloc(dev, size, CPU_ALLOC_UNIFIED, &h);
	if (st)
		return st;
	*dptr = cpu_host_to_dptr(h);
	*hptr = (void *)h;
	return KEEL_STATUS_OK;
}

static keel_status cpu_unified_free(int32_t device, keel_dptr dptr)
{
	struct cpu_device *dev;
	char shown[32];
	keel_status st;

	st = cpu_dev_get(device, "unified_free", &dev);
	if (st || !dptr)
		return st;
	snprintf(shown, sizeof(shown), "0x%" PRIx64, dptr);
	return cpu_block_free(dev, cpu_dptr_to_host(dptr), CPU_ALLOC_UNIFIED,
			      "unified_free", shown);
}

#if KEEL_ABI_VERSION_MINOR >= 4
/* ABI 1.4: the caller's host memory used in place. The ranges go to a
 * list of their own (see struct cpu_device): kernels and copies accept
 * them, free/unified_free never see them. */
static keel_status cpu_register_host(int32_t device, void *host, uint64_t size,
				     keel_dptr *dptr)
{
	struct cpu_device *dev;
	struct cpu_alloc a = { (uintptr_t)host, size, CPU_ALLOC_DEVICE };
	keel_status st;
	int ret;

	st = cpu_dev_get(device, "register_host", &dev);
	if (st)
		return st;
	if (!host || !dptr || !size)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "register_host: %s", !host ? "host is NULL"
			       : !dptr ? "dptr is NULL" : "size is 0");
	if ((uintptr_t)host + size < (uintptr_t)host)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "register_host: %" PRIu64
			       " bytes at %p wrap around the address space",
			       size, host);
	pthread_mutex_lock(&dev->mem_lock);
	ret = cpu_table_insert(&dev->registered, &a);
	pthread_mutex_unlock(&dev->mem_lock);
	if (ret)
		return cpu_err(KEEL_STATUS_OUT_OF_MEMORY,
			       "register_host: out of host memory");
	*dptr = cpu_host_to_dptr((uintptr_t)host);
	return KEEL_STATUS_OK;
}

static keel_status cpu_unregister_host(int32_t device, keel_dptr dptr,
				       uint64_t size)
{
	struct cpu_device *dev;
	uintptr_t h = cpu_dptr_to_host(dptr);
	keel_status st;
	size_t i;

	st = cpu_dev_get(device, "unregister_host", &dev);
	if (st)
		return st;
	pthread_mutex_lock(&dev->mem_lock);
	/* One matching registration: equal ones may repeat and are
	 * interchangeable. */
	for (i = dev->registered.n; i > 0; i--)
		if (dev->registered.v[i - 1].base == h &&
		    dev->registered.v[i - 1].size == size)
			break;
	if (i > 0)
		cpu_table_remove(&dev->registered, &dev->registered.v[i - 1]);
	pthread_mutex_unlock(&dev->mem_lock);
	if (i == 0)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "unregister_host: 0x%" PRIx64 " (%" PRIu64
			       " bytes) is not a register_host range of cpu:%d",
			       dptr, size, (int)dev->index);
	return KEEL_STATUS_OK;
}
#endif

static keel_status cpu_get_memory_info(int32_t device, keel_memory_info *info)
{
	struct cpu_device *dev;
	keel_status st;
	uint64_t total;

	st = cpu_dev_get(device, "get_memory_info", &dev);
	if (st)
		return st;
	if (!info)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "get_memory_info: info is NULL");
	total = cpu_g.cfg.mem_limit ? cpu_g.cfg.mem_limit : cpu_g.phys_mem;
	pthread_mutex_lock(&dev->mem_lock);
	info->total = total;
	info->used = dev->used;
	info->free = total > dev->used ? total - dev->used : 0;
	pthread_mutex_unlock(&dev->mem_lock);
	return KEEL_STATUS_OK;
}

/* ------------------------------------------------------------------------ */
/* Memset and copies                                                        */
/* ------------------------------------------------------------------------ */

/*
 * One transfer, after validation. dst/src are host addresses. For async
 * calls `s` is the stream to order it on; sync calls pass NULL and have
 * already waited for the device(s).
 */
static keel_status cpu_do_copy(struct cpu_stream *s, void *dst,
			       const void *src, uint64_t size,
			       const char *call)
{
	struct cpu_work w = { .kind = CPU_WORK_COPY };

	if (!s) {
		memcpy(dst, src, size);
		return KEEL_STATUS_OK;
	}
	w.u.copy.dst = dst;
	w.u.copy.src = src;
	w.u.copy.size = size;
	return cpu_stream_submit(s, &w, call);
}

static keel_status cpu_check_host_ptr(const void *p, const char *call,
				      const char *what)
{
	if (p)
		return KEEL_STATUS_OK;
	return cpu_err(KEEL_STATUS_INVALID_ARGUMENT, "%s: %s is NULL", call,
		       what);
}

static keel_status cpu_check_overlap(void *dst, const void *src,
				     uint64_t size, const char *call)
{
	uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;

	if (d + size <= s || s + size <= d)
		return KEEL_STATUS_OK;
	return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
		       "%s: source and destination ranges of %" PRIu64
		       " bytes overlap (dst - src = %td bytes)",
		       call, size, (ptrdiff_t)(d - s));
}

/* Resolve device and, for async calls, the stream. */
static keel_status cpu_resolve(int32_t device, bool async, keel_stream stream,
			       const char *call, struct cpu_device **dev,
			       struct cpu_stream **s)
{
	keel_status st;

	*s = NULL;
	st = cpu_dev_get(device, call, dev);
	if (st || !async)
		return st;
	return cpu_stream_get(*dev, stream, call, s);
}

static keel_status cpu_memset_common(int32_t device, bool async,
				     keel_stream stream, keel_dptr dst,
				     uint8_t value, uint64_t size,
				     const char *call)
{
	struct cpu_work w = { .kind = CPU_WORK_MEMSET };
	struct cpu_device *dev;
	struct cpu_stream *s;
	keel_status st;
	void *h;

	st = cpu_resolve(device, async, stream, call, &dev, &s);
	if (st || !size)
		return st;
	st = cpu_mem_range(dev, dst, size, call, &h);
	if (st)
		return st;
	if (!async) {
		cpu_device_wait_idle(dev);
		memset(h, value, size);
		return KEEL_STATUS_OK;
	}
	w.u.set.dst = h;
	w.u.set.value = value;
	w.u.set.size = size;
	return cpu_stream_submit(s, &w, call);
}

static keel_status cpu_memset(int32_t device, keel_dptr dst, uint8_t value,
			      uint64_t size)
{
	return cpu_memset_common(device, false, NULL, dst, value, size,
				 "memset");
}

static keel_status cpu_memset_async(int32_t device, keel_stream stream,
				    keel_dptr dst, uint8_t value,
				    uint64_t size)
{
	return cpu_memset_common(device, true, stream, dst, value, size,
				 "memset_async");
}

static keel_status cpu_h2d_common(int32_t device, bool async,
				  keel_stream stream, keel_dptr dst,
				  const void *src, uint64_t size,
				  const char *call)
{
	struct cpu_device *dev;
	struct cpu_stream *s;
	keel_status st;
	void *h;

	st = cpu_resolve(device, async, stream, call, &dev, &s);
	if (st || !size)
		return st;
	st = cpu_check_host_ptr(src, call, "src");
	if (st)
		return st;
	st = cpu_mem_range(dev, dst, size, call, &h);
	if (st)
		return st;
	if (!async)
		cpu_device_wait_idle(dev);
	return cpu_do_copy(s, h, src, size, call);
}

static keel_status cpu_copy_h2d(int32_t device, keel_dptr dst, const void *src,
				uint64_t size)
{
	return cpu_h2d_common(device, false, NULL, dst, src, size, "copy_h2d");
}

static keel_status cpu_copy_h2d_async(int32_t device, keel_stream stream,
				      keel_dptr dst, const void *src,
				      uint64_t size)
{
	return cpu_h2d_common(device, true, stream, dst, src, size,
			      "copy_h2d_async");
}

static keel_status cpu_d2h_common(int32_t device, bool async,
				  keel_stream stream, void *dst, keel_dptr src,
				  uint64_t size, const char *call)
{
	struct cpu_device *dev;
	struct cpu_stream *s;
	keel_status st;
	void *h;

	st = cpu_resolve(device, async, stream, call, &dev, &s);
	if (st || !size)
		return st;
	st = cpu_check_host_ptr(dst, call, "dst");
	if (st)
		return st;
	st = cpu_mem_range(dev, src, size, call, &h);
	if (st)
		return st;
	if (!async)
		cpu_device_wait_idle(dev);
	return cpu_do_copy(s, dst, h, size, call);
}

static keel_status cpu_copy_d2h(int32_t device, void *dst, keel_dptr src,
				uint64_t size)
{
	return cpu_d2h_common(device, false, NULL, dst, src, size, "copy_d2h");
}

static keel_status cpu_copy_d2h_async(int32_t device, keel_stream stream,
				      void *dst, keel_dptr src, uint64_t size)
{
	return cpu_d2h_common(device, true, stream, dst, src, size,
			      "copy_d2h_async");
}

/*
 * Device-to-device copy on one device or between two (peer). The stream,
 * for async calls, belongs to src_device.
 */
static keel_status cpu_d2d_common(int32_t dst_device, keel_dptr dst,
				  int32_t src_device, keel_dptr src,
				  uint64_t size, bool async, keel_stream stream,
				  const char *call)
{
	struct cpu_device *sdev, *ddev;
	char what[64];
	struct cpu_stream *s;
	void *hs, *hd;
	keel_status st;

	st = cpu_resolve(src_device, async, stream, call, &sdev, &s);
	if (st)
		return st;
	st = cpu_dev_get(dst_device, call, &ddev);
	if (st || !size)
		return st;
	snprintf(what, sizeof(what), "%s: src", call);
	st = cpu_mem_range(sdev, src, size, what, &hs);
	if (st)
		return st;
	snprintf(what, sizeof(what), "%s: dst", call);
	st = cpu_mem_range(ddev, dst, size, what, &hd);
	if (st)
		return st;
	st = cpu_check_overlap(hd, hs, size, call);
	if (st)
		return st;
	if (!async) {
		cpu_device_wait_idle(sdev);
		if (ddev != sdev)
			cpu_device_wait_idle(ddev);
	}
	return cpu_do_copy(s, hd, hs, size, call);
}

static keel_status cpu_copy_d2d(int32_t device, keel_dptr dst, keel_dptr src,
				uint64_t size)
{
	return cpu_d2d_common(device, dst, device, src, size, false, NULL,
			      "copy_d2d");
}

static keel_status cpu_copy_d2d_async(int32_t device, keel_stream stream,
				      keel_dptr dst, keel_dptr src,
				      uint64_t size)
{
	return cpu_d2d_common(device, dst, device, src, size, true, stream,
			      "copy_d2d_async");
}

static keel_status cpu_copy_peer(int32_t dst_device, keel_dptr dst,
				 int32_t src_device, keel_dptr src,
				 uint64_t size)
{
	return cpu_d2d_common(dst_device, dst, src_device, src, size, false,
			      NULL, "copy_peer");
}

static keel_status cpu_copy_peer_async(int32_t dst_device, keel_dptr dst,
				       int32_t src_device, keel_dptr src,
				       uint64_t size, keel_stream src_stream)
{
	return cpu_d2d_common(dst_device, dst, src_device, src, size, true,
			      src_stream, "copy_peer_async");
}

const keel_memory_ops cpu_memory_ops = {
	.header = KEEL_TABLE_HEADER(keel_memory_ops),
	.alloc = cpu_alloc,
	.free = cpu_free,
	.host_alloc = cpu_host_alloc,
	.host_free = cpu_host_free,
	.unified_alloc = cpu_unified_alloc,
	.unified_free = cpu_unified_free,
	.memset = cpu_memset,
	.memset_async = cpu_memset_async,
	.copy_h2d = cpu_copy_h2d,
	.copy_d2h = cpu_copy_d2h,
	.copy_d2d = cpu_copy_d2d,
	.copy_h2d_async = cpu_copy_h2d_async,
	.copy_d2h_async = cpu_copy_d2h_async,
	.copy_d2d_async = cpu_copy_d2d_async,
	.copy_peer = cpu_copy_peer,
	.get_memory_info = cpu_get_memory_info,
	.copy_peer_async = cpu_copy_peer_async,
#if KEEL_ABI_VERSION_MINOR >= 4
	.register_host = cpu_register_host,
	.unregister_host = cpu_unregister_host,
#endif
};
