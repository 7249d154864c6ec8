/*
 * The CPU plugin's thread pool: KEEL_CPU_THREADS workers (default: the
 * online CPUs), started on first use. One parallel loop runs at a time;
 * the caller takes part, chunks are handed out by an atomic counter, and
 * a loop started while the pool is busy (or from inside a pool thread)
 * simply runs serially in its caller.
 */
#include <stdatomic.h>
#include <stdlib.h>
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

/* The current loop. */
static uint64_t job_gen;
static kpar_fn job_fn;
static void *job_ctx;
static int64_t job_n, job_chunk;
static atomic_llong job_next;
static int job_active; /* workers still inside the job */

static _Thread_local bool in_pool;

static int configured_threads(void)
{
    const char *e = cpu_g.host && cpu_g.host->get_env
                        ? cpu_g.host->get_env("KEEL_CPU_THREADS")
                        : getenv("KEEL_CPU_THREADS");
    long n = e && *e ? strtol(e, NULL, 10) : 0;

    if (n <= 0)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > POOL_MAX)
        n = POOL_MAX;
    return (int)n;
}

static void run_chunks(kpar_fn fn, void *ctx, int64_t n, int64_t chunk)
{
    for (;;) {
        int64_t b = atomic_fetch_add(&job_next, chunk);
        if (b >= n)
            break;
        fn(ctx, b, b + chunk < n ? b + chunk : n);
    }
}

static void *worker_main(void *arg)
{
    uint64_t seen = 0;

    (void)arg;
    in_pool = true;
    pthread_mutex_lock(&pool_lock);
    for (;;) {
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
            run_chunks(fn, ctx, n, chunk);
            pthread_mutex_lock(&pool_lock);
        }
        if (--job_active == 0)
            pthread_cond_broadcast(&done_cond);
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
    job_fn = fn;
    job_ctx = ctx;
    job_n = n;
    job_chunk = chunk;
    atomic_store(&job_next, 0);
    job_active = nworkers;
    job_gen++;
    pthread_cond_broadcast(&work_cond);
    pthread_mutex_unlock(&pool_lock);

    in_pool = true;
    run_chunks(fn, ctx, n, chunk);
    in_pool = false;

    pthread_mutex_lock(&pool_lock);
    while (job_active > 0)
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
