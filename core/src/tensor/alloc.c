/*
 * Per-device caching allocator over the plugin's alloc/free.
 *
 * Sizes are rounded up to a size class: 512 bytes at the smallest, then
 * four classes per power of two (p, 1.25p, 1.5p, 1.75p), which bounds the
 * waste at 25%. A freed block goes to its class's free list and is handed
 * out again for any request of that class. When the plugin reports
 * OUT_OF_MEMORY, every cached block of that device goes back to the plugin
 * and the allocation is tried once more.
 *
 * Ordering: the core enqueues all its work on each device's default stream,
 * so a block freed by one op and reused by the next is used in stream
 * order. (Multi-stream use will need record-stream bookkeeping.)
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor_internal.h"

#define NUM_CLASSES 256
#define MIN_BLOCK 512

struct keel_block {
    struct keel_block *next;
    struct dev_cache *cache;
    keel_dptr ptr;
    uint64_t size; /* class size, as allocated from the plugin */
    int cls;
    unsigned generation;
};

struct dev_cache {
    pthread_mutex_t lock;
    keel_place place;
    struct keel_block *free_list[NUM_CLASSES];
    keel_memory_stats stats;
};

static pthread_mutex_t caches_lock = PTHREAD_MUTEX_INITIALIZER;
/* caches[plugin][device]: each cache is allocated once and never moves,
 * since threads hold pointers to it (and to its lock). */
static struct dev_cache ***caches;
static int *cache_counts; /* devices per plugin slot */
static int cache_plugins;
static atomic_uint generation = 1;

/* Lock-free lookup for the common case (small plugin and device indices):
 * a cache, once created, is published here and never moves. */
#define FAST_PLUGINS 16
#define FAST_DEVICES 64
static struct dev_cache *_Atomic fast[FAST_PLUGINS][FAST_DEVICES];

static int size_class(uint64_t size, uint64_t *class_size)
{
    uint64_t p;
    int lg = 0, q;

    if (size <= MIN_BLOCK) {
        *class_size = MIN_BLOCK;
        return 0;
    }
    p = size;
    while (p >>= 1)
        lg++;
    p = UINT64_C(1) << lg;
    /* Smallest quarter step q with p + q*p/4 >= size. */
    q = (int)((size - p + (p / 4) - 1) / (p / 4));
    if (q == 4) {
        lg++;
        p <<= 1;
        q = 0;
    }
    *class_size = p + (uint64_t)q * (p / 4);
    return (lg - 9) * 4 + q + 1;
}

static bool grow_plugins(int need)
{
    struct dev_cache ***nc;
    int *cnt;

    if (need <= cache_plugins)
        return true;
    nc = realloc(caches, (size_t)need * sizeof(*nc));
    if (!nc)
        return false;
    caches = nc;
    cnt = realloc(cache_counts, (size_t)need * sizeof(*cnt));
    if (!cnt)
        return false;
    cache_counts = cnt;
    for (int i = cache_plugins; i < need; i++) {
        caches[i] = NULL;
        cache_counts[i] = 0;
    }
    cache_plugins = need;
    return true;
}

static bool grow_devices(int plugin, int need)
{
    struct dev_cache **arr;

    if (need <= cache_counts[plugin])
        return true;
    arr = realloc(caches[plugin], (size_t)need * sizeof(*arr));
    if (!arr)
        return false;
    caches[plugin] = arr;
    for (int i = cache_counts[plugin]; i < need; i++)
        arr[i] = NULL;
    cache_counts[plugin] = need;
    return true;
}

static struct dev_cache *get_cache(keel_place place)
{
    struct dev_cache *c = NULL;
    bool fastable = place.plugin < FAST_PLUGINS && place.device < FAST_DEVICES;

    if (place.plugin < 0 || place.device < 0)
        return NULL;
    if (fastable) {
        c = atomic_load_explicit(&fast[place.plugin][place.device],
                                 memory_order_acquire);
        if (c)
            return c;
    }
    pthread_mutex_lock(&caches_lock);
    if (!grow_plugins(place.plugin + 1) ||
        !grow_devices(place.plugin, place.device + 1))
        goto out;
    c = caches[place.plugin][place.device];
    if (!c) {
        c = calloc(1, sizeof(*c));
        if (!c)
            goto out;
        pthread_mutex_init(&c->lock, NULL);
        c->place = place;
        caches[place.plugin][place.device] = c;
    }
    if (fastable)
        atomic_store_explicit(&fast[place.plugin][place.device], c,
                              memory_order_release);
out:
    pthread_mutex_unlock(&caches_lock);
    return c;
}

/* Free every cached block of `c` (caller holds c->lock). A cached block
 * was released in stream order: work still queued on the device may use
 * it, and the ABI's memory.free leaves that to the caller, so the device
 * is synchronised first (the caller's error state is kept). */
static void release_cached(struct dev_cache *c)
{
    bool any = false;

    for (int k = 0; k < NUM_CLASSES && !any; k++)
        any = c->free_list[k] != NULL;
    if (!any)
        return;
    {
        keel_status saved = keel_last_status(), st;
        char msg[2048];

        char where[64] = "?";

        snprintf(msg, sizeof(msg), "%s", keel_last_error());
        st = keel_device_synchronize(c->place);
        if (st != KEEL_STATUS_OK) {
            keel_place_name(c->place, where, sizeof(where));
            keel__log(KEEL_LOG_WARN,
                      "allocator: synchronising %s before giving cached "
                      "memory back failed (%s); freeing it anyway", where,
                      keel_last_error());
        }
        keel__error(saved, "%s", msg);
    }
    for (int k = 0; k < NUM_CLASSES; k++) {
        struct keel_block *b = c->free_list[k];
        while (b) {
            struct keel_block *next = b->next;
            keel_mem_free(c->place, b->ptr);
            c->stats.reserved -= b->size;
            c->stats.plugin_frees++;
            free(b);
            b = next;
        }
        c->free_list[k] = NULL;
    }
}

static void note_alloc(struct dev_cache *c, uint64_t size)
{
    c->stats.allocated += size;
    c->stats.alloc_count++;
    if (c->stats.allocated > c->stats.peak_allocated)
        c->stats.peak_allocated = c->stats.allocated;
    if (c->stats.reserved > c->stats.peak_reserved)
        c->stats.peak_reserved = c->stats.reserved;
}

static atomic_bool shutdown_registered;

keel_status keel__alloc(keel_place place, uint64_t size,
                        struct keel_block **block, keel_dptr *ptr)
{
    struct dev_cache *c;
    struct keel_block *b;
    uint64_t csize;
    int cls;
    keel_status st;

    *block = NULL;
    *ptr = 0;
    if (size == 0)
        return KEEL_STATUS_OK;
    if (!atomic_load_explicit(&shutdown_registered, memory_order_relaxed)) {
        keel__at_shutdown(keel__alloc_shutdown);
        atomic_store_explicit(&shutdown_registered, true,
                              memory_order_relaxed);
    }
    cls = size_class(size, &csize);
    if (cls >= NUM_CLASSES)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "allocation of %llu bytes is too large",
                           (unsigned long long)size);
    c = get_cache(place);
    if (!c)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "out of host memory for the allocator");
    pthread_mutex_lock(&c->lock);
    b = c->free_list[cls];
    if (b) {
        c->free_list[cls] = b->next;
        b->next = NULL;
        c->stats.cache_hits++;
        note_alloc(c, b->size);
        pthread_mutex_unlock(&c->lock);
        *block = b;
        *ptr = b->ptr;
        return KEEL_STATUS_OK;
    }
    b = calloc(1, sizeof(*b));
    if (!b) {
        pthread_mutex_unlock(&c->lock);
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "out of host memory for the allocator");
    }
    st = keel_mem_alloc(place, csize, &b->ptr);
    if (st == KEEL_STATUS_OUT_OF_MEMORY) {
        /* Memory pressure: give the cache back and try once more. */
        release_cached(c);
        st = keel_mem_alloc(place, csize, &b->ptr);
    }
    if (st != KEEL_STATUS_OK) {
        pthread_mutex_unlock(&c->lock);
        free(b);
        return st;
    }
    b->cache = c;
    b->size = csize;
    b->cls = cls;
    b->generation = atomic_load(&generation);
    c->stats.plugin_allocs++;
    c->stats.reserved += csize;
    note_alloc(c, csize);
    pthread_mutex_unlock(&c->lock);
    *block = b;
    *ptr = b->ptr;
    return KEEL_STATUS_OK;
}

void keel__alloc_release(struct keel_block *b)
{
    struct dev_cache *c;

    if (!b)
        return;
    if (b->generation != atomic_load(&generation)) {
        /* The runtime was shut down under this block: its memory went with
         * the plugin. */
        free(b);
        return;
    }
    c = b->cache;
    pthread_mutex_lock(&c->lock);
    c->stats.allocated -= b->size;
    b->next = c->free_list[b->cls];
    c->free_list[b->cls] = b;
    pthread_mutex_unlock(&c->lock);
}

void keel__alloc_shutdown(void)
{
    pthread_mutex_lock(&caches_lock);
    for (int p = 0; p < cache_plugins; p++) {
        for (int d = 0; d < cache_counts[p]; d++) {
            struct dev_cache *c = caches[p][d];
            if (!c)
                continue;
            pthread_mutex_lock(&c->lock);
            release_cached(c);
            pthread_mutex_unlock(&c->lock);
            pthread_mutex_destroy(&c->lock);
            free(c);
        }
        free(caches[p]);
    }
    free(caches);
    free(cache_counts);
    caches = NULL;
    cache_counts = NULL;
    cache_plugins = 0;
    for (int p = 0; p < FAST_PLUGINS; p++)
        for (int d = 0; d < FAST_DEVICES; d++)
            atomic_store(&fast[p][d], NULL);
    atomic_fetch_add(&generation, 1);
    pthread_mutex_unlock(&caches_lock);
}

static keel_status cache_for(const char *device, struct dev_cache **out)
{
    keel_place place;
    keel_status st = keel__place_of(device, &place);

    if (st != KEEL_STATUS_OK)
        return st;
    *out = get_cache(place);
    if (!*out)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "out of host memory for the allocator");
    return KEEL_STATUS_OK;
}

keel_status keel_memory_stats_get(const char *device, keel_memory_stats *stats)
{
    struct dev_cache *c;
    keel_status st;

    if (!stats)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_memory_stats_get: stats is NULL");
    st = cache_for(device, &c);
    if (st != KEEL_STATUS_OK)
        return st;
    pthread_mutex_lock(&c->lock);
    *stats = c->stats;
    pthread_mutex_unlock(&c->lock);
    return KEEL_STATUS_OK;
}

keel_status keel_memory_empty_cache(const char *device)
{
    struct dev_cache *c;
    keel_status st = cache_for(device, &c);

    if (st != KEEL_STATUS_OK)
        return st;
    pthread_mutex_lock(&c->lock);
    release_cached(c);
    pthread_mutex_unlock(&c->lock);
    return KEEL_STATUS_OK;
}

keel_status keel_memory_reset_peak(const char *device)
{
    struct dev_cache *c;
    keel_status st = cache_for(device, &c);

    if (st != KEEL_STATUS_OK)
        return st;
    pthread_mutex_lock(&c->lock);
    c->stats.peak_allocated = c->stats.allocated;
    c->stats.peak_reserved = c->stats.reserved;
    pthread_mutex_unlock(&c->lock);
    return KEEL_STATUS_OK;
}
