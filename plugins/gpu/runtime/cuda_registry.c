/*
 * keel CUDA plugin — a small pointer-keyed registry.
 *
 * Open addressing with linear probing; deletion shifts the following
 * cluster back (no tombstones), so lookups stay short however many
 * allocations come and go. The table doubles at 50% load. One mutex per
 * registry: the plugin keeps two (allocations, handles) and each call holds
 * the lock for one probe sequence only.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

#define REGISTRY_MIN_CAP 64u

static size_t slot_of(uintptr_t key, size_t cap)
{
    uint64_t h = (uint64_t)key;

    /* Fibonacci hashing spreads aligned pointers over the table. */
    h ^= h >> 29;
    h *= UINT64_C(0x9E3779B97F4A7C15);
    h ^= h >> 32;
    return (size_t)h & (cap - 1);
}

/* Index of key's slot, or of the empty slot where it would go. */
static size_t probe(const struct cuda_registry *reg, uintptr_t key)
{
    size_t i = slot_of(key, reg->cap);

    while (reg->slots[i].key && reg->slots[i].key != key)
        i = (i + 1) & (reg->cap - 1);
    return i;
}

static int grow(struct cuda_registry *reg)
{
    size_t cap = reg->cap ? reg->cap * 2 : REGISTRY_MIN_CAP;
    struct cuda_entry *old = reg->slots;
    size_t old_cap = reg->cap;
    struct cuda_entry *slots;

    if (cap < old_cap)
        return -1;
    slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return -1;
    reg->slots = slots;
    reg->cap = cap;
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i].key)
            reg->slots[probe(reg, old[i].key)] = old[i];
    }
    free(old);
    return 0;
}

/* Remove slot i and close the gap (Knuth, TAOCP 6.4, algorithm R). */
static void remove_at(struct cuda_registry *reg, size_t i)
{
    size_t mask = reg->cap - 1;
    size_t j = i;

    for (;;) {
        size_t home;

        j = (j + 1) & mask;
        if (!reg->slots[j].key)
            break;
        home = slot_of(reg->slots[j].key, reg->cap);
        /* Move j back to i unless its home lies cyclically in (i, j]. */
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
            continue;
        reg->slots[i] = reg->slots[j];
        i = j;
    }
    memset(&reg->slots[i], 0, sizeof(reg->slots[i]));
    reg->len--;
}

int cuda_registry_add(struct cuda_registry *reg, const struct cuda_entry *e)
{
    int ret = 0;
    size_t i;

    if (!e->key)
        return -1;
    pthread_mutex_lock(&reg->lock);
    if ((reg->len + 1) * 2 > reg->cap && grow(reg) != 0) {
        ret = -1;
        goto out;
    }
    i = probe(reg, e->key);
    if (!reg->slots[i].key)
        reg->len++;
    reg->slots[i] = *e;
out:
    pthread_mutex_unlock(&reg->lock);
    return ret;
}

bool cuda_registry_find(struct cuda_registry *reg, uintptr_t key,
                        struct cuda_entry *out)
{
    bool found = false;
    size_t i;

    if (!key)
        return false;
    pthread_mutex_lock(&reg->lock);
    if (!reg->cap)
        goto out;
    i = probe(reg, key);
    if (reg->slots[i].key) {
        found = true;
        if (out)
            *out = reg->slots[i];
    }
out:
    pthread_mutex_unlock(&reg->lock);
    return found;
}

bool cuda_registry_take(struct cuda_registry *reg, uintptr_t key, int32_t kind,
                        int32_t device, struct cuda_entry *out)
{
    bool taken = false;
    size_t i;

    if (!key)
        return false;
    pthread_mutex_lock(&reg->lock);
    if (!reg->cap)
        goto out;
    i = probe(reg, key);
    if (!reg->slots[i].key || reg->slots[i].kind != kind)
        goto out;
    if (device >= 0 && reg->slots[i].device != device)
        goto out;
    if (out)
        *out = reg->slots[i];
    remove_at(reg, i);
    taken = true;
out:
    pthread_mutex_unlock(&reg->lock);
    return taken;
}

bool cuda_registry_pop(struct cuda_registry *reg, int32_t kind,
                       struct cuda_entry *out)
{
    bool popped = false;

    pthread_mutex_lock(&reg->lock);
    for (size_t i = 0; i < reg->cap; i++) {
        if (reg->slots[i].key && reg->slots[i].kind == kind) {
            *out = reg->slots[i];
            remove_at(reg, i);
            popped = true;
            break;
        }
    }
    pthread_mutex_unlock(&reg->lock);
    return popped;
}

void cuda_registry_release(struct cuda_registry *reg)
{
    pthread_mutex_lock(&reg->lock);
    free(reg->slots);
    reg->slots = NULL;
    reg->cap = 0;
    reg->len = 0;
    pthread_mutex_unlock(&reg->lock);
}
