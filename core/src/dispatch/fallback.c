/*
 * CPU fallback bookkeeping: what ran on the CPU plugin because a device's
 * plugin had no kernel, counted per (op, dtype) with the plugins it came
 * from, and the reports made of it.
 *
 *   - keel_fallback_summary(): one line, "keel: CPU fallback: ..." — also
 *     printed to stderr when the library is unloaded or the process exits,
 *     if anything fell back (KEEL_FALLBACK_REPORT=0 silences it).
 *   - keel_fallback_report(): one line per (op, dtype), most calls first;
 *     printed at exit instead of the summary under KEEL_STRICT=report, the
 *     mode that runs a whole workload and lists every missing kernel.
 *
 * Counting is one relaxed atomic add per fallback call; the plugin names
 * are copied on first use so that the reports outlive keel_shutdown().
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/ops.h>
#include <keel/runtime.h>

#include "dispatch/dispatch_internal.h"

#define FB_MAX_PLUGINS 32
#define FB_NAME 32

static _Atomic uint64_t counts[KEEL_OP_COUNT][KEEL_DTYPE_COUNT_];
static _Atomic uint32_t plugin_mask[KEEL_OP_COUNT][KEEL_DTYPE_COUNT_];
static char plugin_names[FB_MAX_PLUGINS][FB_NAME];
static atomic_bool name_set[FB_MAX_PLUGINS];
static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;

void keel__fallback_note(keel_op_id op, keel_dtype dtype, int plugin)
{
    if ((unsigned)op >= KEEL_OP_COUNT || (unsigned)dtype >= KEEL_DTYPE_COUNT_)
        return;
    atomic_fetch_add_explicit(&counts[op][dtype], 1, memory_order_relaxed);
    if (plugin < 0 || plugin >= FB_MAX_PLUGINS)
        return;
    atomic_fetch_or_explicit(&plugin_mask[op][dtype], UINT32_C(1) << plugin,
                             memory_order_relaxed);
    if (!atomic_load_explicit(&name_set[plugin], memory_order_acquire)) {
        keel_plugin_info info;
        pthread_mutex_lock(&names_lock);
        if (!atomic_load(&name_set[plugin]) &&
            keel_plugin_get_info(plugin, &info) == KEEL_STATUS_OK) {
            snprintf(plugin_names[plugin], FB_NAME, "%s",
                     info.name ? info.name : "?");
            atomic_store_explicit(&name_set[plugin], true,
                                  memory_order_release);
        }
        pthread_mutex_unlock(&names_lock);
    }
}

uint64_t keel_fallback_count(keel_op_id op)
{
    uint64_t n = 0;

    if ((unsigned)op >= KEEL_OP_COUNT)
        return 0;
    for (int d = 0; d < KEEL_DTYPE_COUNT_; d++)
        n += atomic_load_explicit(&counts[op][d], memory_order_relaxed);
    return n;
}

uint64_t keel_fallback_count_dtype(keel_op_id op, keel_dtype dtype)
{
    if ((unsigned)op >= KEEL_OP_COUNT || (unsigned)dtype >= KEEL_DTYPE_COUNT_)
        return 0;
    return atomic_load_explicit(&counts[op][dtype], memory_order_relaxed);
}

void keel_fallback_reset(void)
{
    for (int o = 0; o < KEEL_OP_COUNT; o++)
        for (int d = 0; d < KEEL_DTYPE_COUNT_; d++) {
            atomic_store(&counts[o][d], 0);
            atomic_store(&plugin_mask[o][d], 0);
        }
}

struct fb_entry {
    int op, dtype;
    uint64_t n;
};

static int by_count(const void *a, const void *b)
{
    const struct fb_entry *x = a, *y = b;

    if (x->n != y->n)
        return x->n < y->n ? 1 : -1;
    if (x->op != y->op)
        return x->op - y->op;
    return x->dtype - y->dtype;
}

/* Every (op, dtype) that fell back, most calls first. */
static int collect(struct fb_entry *e, uint64_t *total, uint32_t *plugins)
{
    int n = 0;

    *total = 0;
    *plugins = 0;
    for (int o = 0; o < KEEL_OP_COUNT; o++)
        for (int d = 0; d < KEEL_DTYPE_COUNT_; d++) {
            uint64_t c = atomic_load_explicit(&counts[o][d],
                                              memory_order_relaxed);
            if (!c)
                continue;
            e[n++] = (struct fb_entry){o, d, c};
            *total += c;
            *plugins |= atomic_load_explicit(&plugin_mask[o][d],
                                             memory_order_relaxed);
        }
    qsort(e, (size_t)n, sizeof(*e), by_count);
    return n;
}

/* "npu, mlu" for a plugin mask. */
static void names_of(uint32_t mask, char *buf, size_t size)
{
    size_t len = 0;

    buf[0] = '\0';
    for (int p = 0; p < FB_MAX_PLUGINS && len < size; p++)
        if ((mask & (UINT32_C(1) << p)) && atomic_load(&name_set[p]))
            len += (size_t)snprintf(buf + len, size - len, "%s%s",
                                    len ? ", " : "", plugin_names[p]);
    if (!buf[0])
        snprintf(buf, size, "?");
}

int keel_fallback_summary(char *buf, size_t size)
{
    static struct fb_entry e[KEEL_OP_COUNT * KEEL_DTYPE_COUNT_];
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    char names[256];
    uint64_t total;
    uint32_t plugins;
    size_t len = 0;
    int n;

    if (buf && size)
        buf[0] = '\0';
    pthread_mutex_lock(&lock);
    n = collect(e, &total, &plugins);
    if (n == 0) {
        pthread_mutex_unlock(&lock);
        return 0;
    }
    names_of(plugins, names, sizeof(names));
    char line[4096];
    len = (size_t)snprintf(line, sizeof(line),
                           "keel: CPU fallback: %llu calls of %d op%s from "
                           "%s:",
                           (unsigned long long)total, n, n == 1 ? "" : "s",
                           names);
    for (int i = 0; i < n && len < sizeof(line); i++)
        len += (size_t)snprintf(line + len, sizeof(line) - len,
                                "%s %s.%s x%llu", i ? "," : "",
                                keel_op_get_info((keel_op_id)e[i].op)->name,
                                keel_dtype_name((keel_dtype)e[i].dtype),
                                (unsigned long long)e[i].n);
    if (len >= sizeof(line))
        len = sizeof(line) - 1;
    pthread_mutex_unlock(&lock);
    if (buf && size)
        snprintf(buf, size, "%s", line);
    return (int)len;
}

int keel_fallback_report(FILE *f)
{
    static struct fb_entry e[KEEL_OP_COUNT * KEEL_DTYPE_COUNT_];
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    uint64_t total;
    uint32_t plugins;
    int n;

    if (!f)
        return 0;
    pthread_mutex_lock(&lock);
    n = collect(e, &total, &plugins);
    if (n)
        fprintf(f, "keel: %d kernel%s missing (%llu CPU fallback calls):\n", n,
                n == 1 ? "" : "s", (unsigned long long)total);
    for (int i = 0; i < n; i++) {
        char names[256];
        names_of(atomic_load(&plugin_mask[e[i].op][e[i].dtype]), names,
                 sizeof(names));
        fprintf(f, "keel:   %-24s %-8s %10llu calls  (%s)\n",
                keel_op_get_info((keel_op_id)e[i].op)->name,
                keel_dtype_name((keel_dtype)e[i].dtype),
                (unsigned long long)e[i].n, names);
    }
    pthread_mutex_unlock(&lock);
    return n;
}

/* At unload or exit: what a vendor ports next. */
__attribute__((destructor)) static void fallback_at_exit(void)
{
    const char *e = getenv("KEEL_FALLBACK_REPORT");
    char line[4096];

    if (e && !strcmp(e, "0"))
        return;
    if (keel_get_strict_mode() == KEEL_STRICT_REPORT) {
        keel_fallback_report(stderr);
        return;
    }
    if (keel_fallback_summary(line, sizeof(line)) > 0)
        fprintf(stderr, "%s\n", line);
}
