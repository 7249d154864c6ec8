/*
 * The CPU plugin's thread pool: KEEL_CPU_THREADS workers (default: the
 * online CPUs), started on first use. One parallel loop runs at a time;
 * the caller takes part, chunks are handed out by an atomic counter, and
 * a loop started while the pool is busy (or from inside a pool thread)
 * simply runs serially in its caller.
 *
 * The caller waits only for chunks that were claimed, never for a worker
 * to wake up: on a machine with more runnable threads than CPUs a worker
 * may not be scheduled for a whole time slice, and the caller then simply
 * runs every chunk itself. For that the claim counter carries the loop's
 * generation in its top bits, so a worker that wakes up late can never
 * claim a chunk of a later loop with the earlier loop's function.
 *
 * Waking a sleeping thread costs tens of microseconds on a virtual
 * machine, as long as a whole elementwise op; a training step is a stream
 * of such ops. So an idle worker polls for the next loop for SPIN_NS
 * before it sleeps on the condition variable, and a caller whose chunks
 * are done polls for the workers' claimed chunks as long before it
 * sleeps.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "kern.h"

#define POOL_MAX 256

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t busy_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cond = PTHREAD_COND_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static pthread_t workers[POOL_MAX];
static int nworkers = -1; /* -1: not started */
static bool stopping;

/* The current loop. job_next: generation (top 24 bits) | next index. */
#define GEN_SHIFT 40
#define IDX_MASK ((UINT64_C(1) << GEN_SHIFT) - 1)
static uint64_t job_gen;
static kpar_fn job_fn;
static void *job_ctx;
static int64_t job_n, job_chunk;
static _Atomic uint64_t job_next;
static atomic_llong job_done; /* items finished */
/* job_gen as polling workers see it (stored after the loop is set up) */
static _Atomic uint64_t job_seq;

#define SPIN_NS 50000

static uint64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Poll for up to SPIN_NS until ready(arg). (Yielding the CPU between
 * polls, for OpenBLAS's own workers, measured no better.) */
static void spin_until(bool (*ready)(uint64_t), uint64_t arg)
{
    uint64_t end = mono_ns() + SPIN_NS;

    for (unsigned i = 1; !ready(arg); i++) {
        relax();
        if (i % 64 == 0 && mono_ns() > end)
            return;
    }
}

/* A loop after generation `seen` is published (for idle workers). */
static bool new_loop(uint64_t seen)
{
    return atomic_load_explicit(&job_seq, memory_order_acquire) != seen;
}

/* n items of the current loop are done (for the caller). */
static bool loop_done(uint64_t n)
{
    return atomic_load(&job_done) >= (long long)n;
}

static _Thread_local bool in_pool;

static int configured_threads(void)
{
    const char *e = cpu_getenv("KEEL_CPU_THREADS");
    long n = e && *e ? strtol(e, NULL, 10) : 0;

    if (n <= 0)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > POOL_MAX)
        n = POOL_MAX;
    return (int)n;
}

/* Claim and run chunks of loop `gen` until none is left. */
static void run_chunks(uint64_t gen, kpar_fn fn, void *ctx, int64_t n,
                       int64_t chunk)
{
    uint64_t tag = (gen & 0xffffff) << GEN_SHIFT;

    for (;;) {
        uint64_t v = atomic_load(&job_next);
        int64_t b, e;

        do {
            if ((v & ~IDX_MASK) != tag || (int64_t)(v & IDX_MASK) >= n)
                return;
        } while (!atomic_compare_exchange_weak(&job_next, &v,
                                               v + (uint64_t)chunk));
        b = (int64_t)(v & IDX_MASK);
        e = b + chunk < n ? b + chunk : n;
        fn(ctx, b, e);
        if (atomic_fetch_add(&job_done, e - b) + (e - b) == n) {
            pthread_mutex_lock(&pool_lock);
            pthread_cond_broadcast(&done_cond);
            pthread_mutex_unlock(&pool_lock);
        }
    }
}

static void *worker_main(void *arg)
{
    uint64_t seen = 0;

    (void)arg;
    in_pool = true;
    pthread_mutex_lock(&pool_lock);
    for (;;) {
        if (!stopping && job_gen == seen) {
            pthread_mutex_unlock(&pool_lock);
            spin_until(new_loop, seen);
            pthread_mutex_lock(&pool_lock);
        }
        while (!stopping && job_gen == seen)
            pthread_cond_wait(&work_cond, &pool_lock);
        if (stopping)
            break;
        seen = job_gen;
        {
            kpar_fn fn = job_fn;
            void *ctx = job_ctx;
            int64_t n = job_n, chunk = job_chunk;
            pthread_mutex_unlock(&pool_lock);
            run_chunks(seen, fn, ctx, n, chunk);
            pthread_mutex_lock(&pool_lock);
        }
    }
    pthread_mutex_unlock(&pool_lock);
    return NULL;
}

/* Start the workers (caller holds pool_lock). */
static void pool_start(void)
{
    int want = configured_threads() - 1; /* the caller is one thread */

    nworkers = 0;
    stopping = false;
    for (int i = 0; i < want; i++) {
        if (pthread_create(&workers[i], NULL, worker_main, NULL))
            break;
        nworkers++;
    }
}

int cpu_pool_configured(void)
{
    return configured_threads();
}

int cpu_pool_threads(void)
{
    int n;

    pthread_mutex_lock(&pool_lock);
    if (nworkers < 0)
        pool_start();
    n = nworkers + 1;
    pthread_mutex_unlock(&pool_lock);
    return n;
}

void cpu_parallel_for(int64_t n, int64_t grain, kpar_fn fn, void *ctx)
{
    int64_t chunk;
    uint64_t gen;
    int threads;

    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    if (in_pool || n < 2 * grain || pthread_mutex_trylock(&busy_lock)) {
        fn(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&pool_lock);
    if (nworkers < 0)
        pool_start();
    threads = nworkers + 1;
    if (threads == 1) {
        pthread_mutex_unlock(&pool_lock);
        pthread_mutex_unlock(&busy_lock);
        fn(ctx, 0, n);
        return;
    }
    /* About 4 chunks per thread for balance, never below the grain. */
    chunk = (n + 4 * threads - 1) / (4 * threads);
    if (chunk < grain)
        chunk = grain;
    if (n > (int64_t)(IDX_MASK / 2)) { /* beyond the counter's range */
        pthread_mutex_unlock(&pool_lock);
        pthread_mutex_unlock(&busy_lock);
        fn(ctx, 0, n);
        return;
    }
    job_fn = fn;
    job_ctx = ctx;
    job_n = n;
    job_chunk = chunk;
    job_gen++;
    atomic_store(&job_done, 0);
    atomic_store(&job_next, (job_gen & 0xffffff) << GEN_SHIFT);
    gen = job_gen;
    atomic_store_explicit(&job_seq, gen, memory_order_release);
    pthread_cond_broadcast(&work_cond);
    pthread_mutex_unlock(&pool_lock);

    in_pool = true;
    run_chunks(gen, fn, ctx, n, chunk);
    in_pool = false;

    spin_until(loop_done, (uint64_t)n);
    pthread_mutex_lock(&pool_lock);
    while (atomic_load(&job_done) < n)
        pthread_cond_wait(&done_cond, &pool_lock);
    pthread_mutex_unlock(&pool_lock);
    pthread_mutex_unlock(&busy_lock);
}

void cpu_pool_shutdown(void)
{
    pthread_mutex_lock(&pool_lock);
    if (nworkers <= 0) {
        nworkers = -1;
        pthread_mutex_unlock(&pool_lock);
        return;
    }
    stopping = true;
    pthread_cond_broadcast(&work_cond);
    pthread_mutex_unlock(&pool_lock);
    for (int i = 0; i < nworkers; i++)
        pthread_join(workers[i], NULL);
    pthread_mutex_lock(&pool_lock);
    nworkers = -1;
    stopping = false;
    pthread_mutex_unlock(&pool_lock);
}
