/*
 * keel — the per-op profiler (keel_profile_*, KEEL_PROFILE).
 *
 * Counters are one relaxed atomic triple per catalog op, so profiling from
 * many threads needs no lock; the switch is one relaxed atomic load on the
 * dispatcher's path when off. Nesting (an op whose implementation runs
 * other ops, e.g. a CPU fallback) is tracked per thread so that time is
 * counted once. The switch, keel__prof_state, is shared with the trace
 * recorder (runtime/trace.c), which this file feeds from the same hook.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <keel/op_catalog.h>
#include <keel/ops.h>
#include <keel/runtime.h>

#include "dispatch/dispatch_internal.h"

static struct {
    _Atomic uint64_t calls, total_ns, max_ns;
} counters[KEEL_OP_COUNT];

static atomic_int env_checked;
static atomic_int exit_hooked;
static _Thread_local int depth;

static void print_at_exit(void)
{
    fputs("keel profile (KEEL_PROFILE):\n", stderr);
    keel_profile_print(stderr);
}

void keel__prof_env(void)
{
    const char *e;

    if (atomic_exchange(&env_checked, 1))
        return;
    e = getenv("KEEL_PROFILE");
    /* trace:FILE asks for a trace (runtime/trace.c), not the table */
    if (!e || !*e || !strcmp(e, "0") || !strncmp(e, "trace:", 6))
        return;
    keel_profile_start(!strcmp(e, "sync"));
    if (!atomic_exchange(&exit_hooked, 1))
        atexit(print_at_exit);
}

void keel_profile_start(bool sync)
{
    atomic_store(&env_checked, 1);
    atomic_fetch_and(&keel__prof_state, ~(KEEL__PROF_COUNT | KEEL__PROF_SYNC));
    atomic_fetch_or(&keel__prof_state,
                    KEEL__PROF_COUNT | (sync ? KEEL__PROF_SYNC : 0));
}

void keel_profile_stop(void)
{
    atomic_store(&env_checked, 1);
    atomic_fetch_and(&keel__prof_state, ~(KEEL__PROF_COUNT | KEEL__PROF_SYNC));
}

void keel_profile_reset(void)
{
    for (int i = 0; i < KEEL_OP_COUNT; i++) {
        atomic_store_explicit(&counters[i].calls, 0, memory_order_relaxed);
        atomic_store_explicit(&counters[i].total_ns, 0, memory_order_relaxed);
        atomic_store_explicit(&counters[i].max_ns, 0, memory_order_relaxed);
    }
}

keel_status keel_profile_get(keel_op_id op, keel_op_profile *out)
{
    if ((unsigned)op >= KEEL_OP_COUNT || !out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_profile_get: %s",
                           out ? "not an op of the catalog" : "out is NULL");
    out->calls = atomic_load_explicit(&counters[op].calls,
                                      memory_order_relaxed);
    out->total_ns = atomic_load_explicit(&counters[op].total_ns,
                                         memory_order_relaxed);
    out->max_ns = atomic_load_explicit(&counters[op].max_ns,
                                       memory_order_relaxed);
    return KEEL_STATUS_OK;
}

int keel__prof_enter(void)
{
    return depth++;
}

void keel__prof_leave(keel_op_id op, int outer_depth, uint64_t ns,
                      bool count)
{
    uint64_t m;

    depth = outer_depth;
    if (!count || outer_depth != 0 || (unsigned)op >= KEEL_OP_COUNT)
        return;
    atomic_fetch_add_explicit(&counters[op].calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&counters[op].total_ns, ns,
                              memory_order_relaxed);
    m = atomic_load_explicit(&counters[op].max_ns, memory_order_relaxed);
    while (ns > m && !atomic_compare_exchange_weak_explicit(
                         &counters[op].max_ns, &m, ns, memory_order_relaxed,
                         memory_order_relaxed))
        ;
}

static int by_total(const void *a, const void *b)
{
    const keel_op_profile *x = &((const struct { keel_op_id op;
                                                 keel_op_profile p; } *)a)->p;
    const keel_op_profile *y = &((const struct { keel_op_id op;
                                                 keel_op_profile p; } *)b)->p;

    return x->total_ns < y->total_ns ? 1 : x->total_ns > y->total_ns ? -1 : 0;
}

void keel_profile_print(FILE *f)
{
    struct row {
        keel_op_id op;
        keel_op_profile p;
    } rows[KEEL_OP_COUNT];
    int n = 0;
    uint64_t total = 0, calls = 0;

    if (!f)
        return;
    for (int i = 0; i < KEEL_OP_COUNT; i++) {
        keel_op_profile p;

        (void)keel_profile_get((keel_op_id)i, &p);
        if (!p.calls)
            continue;
        rows[n].op = (keel_op_id)i;
        rows[n].p = p;
        total += p.total_ns;
        calls += p.calls;
        n++;
    }
    qsort(rows, (size_t)n, sizeof(rows[0]), by_total);
    fprintf(f, "%-24s %10s %11s %7s %10s %10s\n", "op", "calls",
            "total ms", "share", "mean us", "max us");
    for (int i = 0; i < n; i++) {
        const keel_op_profile *p = &rows[i].p;

        fprintf(f, "%-24s %10llu %11.2f %6.1f%% %10.2f %10.1f\n",
                keel_op_get_info(rows[i].op)->name, (unsigned long long)p->calls,
                (double)p->total_ns / 1e6,
                total ? 100.0 * (double)p->total_ns / (double)total : 0.0,
                (double)p->total_ns / 1e3 / (double)p->calls,
                (double)p->max_ns / 1e3);
    }
    fprintf(f, "%-24s %10llu %11.2f\n", "all ops", (unsigned long long)calls,
            (double)total / 1e6);
}
