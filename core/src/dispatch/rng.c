/*
 * The global generator state: a seed and a counter. Each draw reserves a
 * range of counters; kernels compute element i from (seed, offset + i)
 * with Philox-4x32-10, so results do not depend on the device, the plugin
 * or the number of threads.
 */
#include "dispatch/dispatch_internal.h"

static pthread_mutex_t rng_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t rng_seed = 0x6b65656cu; /* until keel_seed() */
static uint64_t rng_counter;

void keel_seed(uint64_t seed)
{
    pthread_mutex_lock(&rng_lock);
    rng_seed = seed;
    rng_counter = 0;
    pthread_mutex_unlock(&rng_lock);
}

void keel_rng_get_state(uint64_t *seed, uint64_t *counter)
{
    pthread_mutex_lock(&rng_lock);
    if (seed)
        *seed = rng_seed;
    if (counter)
        *counter = rng_counter;
    pthread_mutex_unlock(&rng_lock);
}

void keel_rng_set_state(uint64_t seed, uint64_t counter)
{
    pthread_mutex_lock(&rng_lock);
    rng_seed = seed;
    rng_counter = counter;
    pthread_mutex_unlock(&rng_lock);
}

void keel__rng_next(uint64_t n, uint64_t *seed, uint64_t *offset)
{
    pthread_mutex_lock(&rng_lock);
    *seed = rng_seed;
    *offset = rng_counter;
    /* Keep draws aligned to Philox blocks of 4 outputs. */
    rng_counter += (n + 3) & ~UINT64_C(3);
    pthread_mutex_unlock(&rng_lock);
}
