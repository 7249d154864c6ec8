/*
 * The allocation interposer; see allocfail.h for what it does and why it
 * lives in the test program instead of the library.
 *
 * Real allocations go to glibc's __libc_* entry points, which every glibc
 * exports for this purpose, so no dlsym() bootstrap is needed and memory
 * from either side can be freed by the other (there is no header). Live
 * keel allocations are kept in a fixed open-addressing table (no malloc in
 * malloc), under one mutex.
 */
#include <errno.h>
#include <link.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocfail.h"

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);
extern void *__libc_memalign(size_t align, size_t n);

/* The interposed functions must be exported from the program although the
 * project builds with -fvisibility=hidden. */
#define AF_EXPORT __attribute__((visibility("default")))

/* Not declared by <stdlib.h> (it is in <malloc.h>). */
AF_EXPORT void *memalign(size_t align, size_t n);

#define AF_MAX_RANGES 32
#define AF_TABLE_BITS 18
#define AF_TABLE_SIZE (1u << AF_TABLE_BITS)

struct af_range {
    uintptr_t lo, hi;
};

struct af_entry {
    uintptr_t ptr; /* 0: empty */
    size_t size;
    uintptr_t caller;
    uint64_t gen;
};

static struct af_range af_ranges[AF_MAX_RANGES];
static int af_nranges;

static pthread_mutex_t af_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t af_counter;  /* keel allocations since arm */
static uint64_t af_fail_at;  /* 0: none */
static int af_persist;
static int af_fired;
static uintptr_t af_fired_caller; /* the first failed allocation's */
static uint64_t af_gen = 1, af_mark_gen = 1;
static uint64_t af_nlive;
static size_t af_live_bytes;
static struct af_entry af_table[AF_TABLE_SIZE];

/* ---- which objects are keel's ------------------------------------------ */

static int is_keel_object(const char *name)
{
    const char *base = strrchr(name, '/');

    base = base ? base + 1 : name;
    return !strncmp(base, "libkeel.so", 10) ||
           !strncmp(base, "libkeel-cpu.so", 14);
}

static int scan_one(struct dl_phdr_info *info, size_t size, void *data)
{
    int *found = data;

    (void)size;
    if (!info->dlpi_name || !is_keel_object(info->dlpi_name))
        return 0;
    ++*found;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) ||
            af_nranges == AF_MAX_RANGES)
            continue;
        af_ranges[af_nranges].lo = info->dlpi_addr + ph->p_vaddr;
        af_ranges[af_nranges].hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
        af_nranges++;
    }
    return 0;
}

int allocfail_scan_objects(void)
{
    int found = 0;

    pthread_mutex_lock(&af_lock);
    af_nranges = 0;
    dl_iterate_phdr(scan_one, &found);
    pthread_mutex_unlock(&af_lock);
    return found;
}

static int in_keel(uintptr_t ra)
{
    for (int i = 0; i < af_nranges; i++)
        if (ra >= af_ranges[i].lo && ra < af_ranges[i].hi)
            return 1;
    return 0;
}

/* ---- the live table (af_lock held) ------------------------------------- */

static size_t slot_of(uintptr_t p)
{
    uint64_t h = (uint64_t)p * 0x9E3779B97F4A7C15ull;

    return (size_t)(h >> (64 - AF_TABLE_BITS));
}

static void track(void *p, size_t n, uintptr_t caller)
{
    size_t i = slot_of((uintptr_t)p);

    if (af_nlive + 1 >= AF_TABLE_SIZE / 2)
        return; /* full: stop tracking rather than fail (reported below) */
    while (af_table[i].ptr)
        i = (i + 1) & (AF_TABLE_SIZE - 1);
    af_table[i] = (struct af_entry){(uintptr_t)p, n, caller, af_gen};
    af_nlive++;
    af_live_bytes += n;
}

/* Remove p; returns 1 when it was tracked (its caller and size in
 * *caller and *size, either may be NULL). */
static int untrack(void *p, uintptr_t *caller, size_t *size)
{
    size_t i = slot_of((uintptr_t)p), j;

    while (af_table[i].ptr != (uintptr_t)p) {
        if (!af_table[i].ptr)
            return 0;
        i = (i + 1) & (AF_TABLE_SIZE - 1);
    }
    if (caller)
        *caller = af_table[i].caller;
    if (size)
        *size = af_table[i].size;
    af_nlive--;
    af_live_bytes -= af_table[i].size;
    af_table[i].ptr = 0;
    /* Backward-shift deletion keeps every probe chain unbroken. */
    j = i;
    for (;;) {
        size_t home;

        j = (j + 1) & (AF_TABLE_SIZE - 1);
        if (!af_table[j].ptr)
            break;
        home = slot_of(af_table[j].ptr);
        if (((j - home) & (AF_TABLE_SIZE - 1)) >=
            ((j - i) & (AF_TABLE_SIZE - 1))) {
            af_table[i] = af_table[j];
            af_table[j].ptr = 0;
            i = j;
        }
    }
    return 1;
}

/* ---- the decision ------------------------------------------------------- */

/* Count a keel allocation; 1 when this one is to fail. */
static int should_fail(uintptr_t ra)
{
    int fail;

    if (!in_keel(ra))
        return 0;
    pthread_mutex_lock(&af_lock);
    af_counter++;
    fail = af_fail_at &&
           (af_counter == af_fail_at || (af_persist && af_counter > af_fail_at));
    if (fail && !af_fired) {
        af_fired = 1;
        af_fired_caller = ra;
    }
    pthread_mutex_unlock(&af_lock);
    return fail;
}

static void note(void *p, size_t n, uintptr_t ra)
{
    if (!p || !in_keel(ra))
        return;
    pthread_mutex_lock(&af_lock);
    track(p, n, ra);
    pthread_mutex_unlock(&af_lock);
}

static void *af_malloc(size_t n, uintptr_t ra)
{
    void *p;

    if (should_fail(ra)) {
        errno = ENOMEM;
        return NULL;
    }
    p = __libc_malloc(n);
    note(p, n, ra);
    return p;
}

/* ---- the interposed functions ------------------------------------------ */

AF_EXPORT void *malloc(size_t n)
{
    return af_malloc(n, (uintptr_t)__builtin_return_address(0));
}

AF_EXPORT void *calloc(size_t count, size_t size)
{
    uintptr_t ra = (uintptr_t)__builtin_return_address(0);
    void *p;

    if (should_fail(ra)) {
        errno = ENOMEM;
        return NULL;
    }
    p = __libc_calloc(count, size);
    note(p, count * size, ra);
    return p;
}

AF_EXPORT void *realloc(void *old, size_t n)
{
    uintptr_t ra = (uintptr_t)__builtin_return_address(0), caller = ra;
    size_t old_size = 0;
    int was;
    void *p;

    if (!old)
        return af_malloc(n, ra);
    if (n == 0) {
        free(old);
        return NULL;
    }
    if (should_fail(ra)) {
        errno = ENOMEM;
        return NULL; /* old stays valid, as with a real failure */
    }
    pthread_mutex_lock(&af_lock);
    was = untrack(old, &caller, &old_size);
    pthread_mutex_unlock(&af_lock);
    p = __libc_realloc(old, n);
    pthread_mutex_lock(&af_lock);
    if (p && (was || in_keel(ra)))
        track(p, n, was ? caller : ra);
    else if (!p && was)
        track(old, old_size, caller); /* still live */
    pthread_mutex_unlock(&af_lock);
    return p;
}

AF_EXPORT void free(void *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&af_lock);
    untrack(p, NULL, NULL);
    pthread_mutex_unlock(&af_lock);
    __libc_free(p);
}

static void *af_memalign(size_t align, size_t n, uintptr_t ra)
{
    void *p;

    if (should_fail(ra)) {
        errno = ENOMEM;
        return NULL;
    }
    p = __libc_memalign(align, n);
    note(p, n, ra);
    return p;
}

AF_EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
    uintptr_t ra = (uintptr_t)__builtin_return_address(0);
    void *p;

    if (align < sizeof(void *) || (align & (align - 1)))
        return EINVAL;
    p = af_memalign(align, n, ra);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

AF_EXPORT void *aligned_alloc(size_t align, size_t n)
{
    return af_memalign(align, n, (uintptr_t)__builtin_return_address(0));
}

AF_EXPORT void *memalign(size_t align, size_t n)
{
    return af_memalign(align, n, (uintptr_t)__builtin_return_address(0));
}

AF_EXPORT char *strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = af_malloc(n, (uintptr_t)__builtin_return_address(0));

    if (p)
        memcpy(p, s, n);
    return p;
}

AF_EXPORT char *strndup(const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    char *p = af_malloc(n + 1, (uintptr_t)__builtin_return_address(0));

    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

static int af_vasprintf(char **out, const char *fmt, va_list ap,
                        uintptr_t ra)
{
    va_list ap2;
    int n;
    char *p;

    va_copy(ap2, ap);
    n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return -1;
    p = af_malloc((size_t)n + 1, ra);
    if (!p)
        return -1;
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    *out = p;
    return n;
}

AF_EXPORT int vasprintf(char **out, const char *fmt, va_list ap)
{
    return af_vasprintf(out, fmt, ap, (uintptr_t)__builtin_return_address(0));
}

AF_EXPORT int asprintf(char **out, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = af_vasprintf(out, fmt, ap, (uintptr_t)__builtin_return_address(0));
    va_end(ap);
    return n;
}

/* ---- control ------------------------------------------------------------ */

void allocfail_arm(uint64_t n, int persist)
{
    pthread_mutex_lock(&af_lock);
    af_counter = 0;
    af_fail_at = n;
    af_persist = persist;
    af_fired = 0;
    pthread_mutex_unlock(&af_lock);
}

void allocfail_disarm(void)
{
    pthread_mutex_lock(&af_lock);
    af_fail_at = 0;
    pthread_mutex_unlock(&af_lock);
}

uint64_t allocfail_count(void)
{
    uint64_t n;

    pthread_mutex_lock(&af_lock);
    n = af_counter;
    pthread_mutex_unlock(&af_lock);
    return n;
}

int allocfail_fired(void)
{
    int f;

    pthread_mutex_lock(&af_lock);
    f = af_fired;
    pthread_mutex_unlock(&af_lock);
    return f;
}

static void describe(uintptr_t addr, char *buf, size_t size)
{
    Dl_info di;
    const char *obj;

    if (!dladdr((void *)addr, &di) || !di.dli_fname) {
        snprintf(buf, size, "0x%lx", (unsigned long)addr);
        return;
    }
    obj = strrchr(di.dli_fname, '/');
    obj = obj ? obj + 1 : di.dli_fname;
    if (di.dli_sname)
        snprintf(buf, size, "%s+0x%lx in %s", di.dli_sname,
                 (unsigned long)(addr - (uintptr_t)di.dli_saddr), obj);
    else /* a hidden function: `addr2line -f -e OBJECT OFFSET` names it */
        snprintf(buf, size, "%s+0x%lx", obj,
                 (unsigned long)(addr - (uintptr_t)di.dli_fbase));
}

void allocfail_describe_failed(char *buf, size_t size)
{
    uintptr_t ra;

    pthread_mutex_lock(&af_lock);
    ra = af_fired ? af_fired_caller : 0;
    pthread_mutex_unlock(&af_lock);
    if (ra)
        describe(ra, buf, size);
    else
        snprintf(buf, size, "nothing failed");
}

uint64_t allocfail_live(size_t *bytes)
{
    uint64_t n;

    pthread_mutex_lock(&af_lock);
    n = af_nlive;
    if (bytes)
        *bytes = af_live_bytes;
    pthread_mutex_unlock(&af_lock);
    return n;
}

void allocfail_mark(void)
{
    pthread_mutex_lock(&af_lock);
    af_mark_gen = ++af_gen;
    pthread_mutex_unlock(&af_lock);
}

uint64_t allocfail_report_new(int max)
{
    struct af_entry found[16];
    uint64_t n = 0;
    int shown = 0;

    if (max > 16)
        max = 16;
    pthread_mutex_lock(&af_lock);
    for (size_t i = 0; i < AF_TABLE_SIZE; i++) {
        if (!af_table[i].ptr || af_table[i].gen < af_mark_gen)
            continue;
        if (shown < max)
            found[shown++] = af_table[i];
        n++;
    }
    pthread_mutex_unlock(&af_lock);
    /* dladdr and printf may allocate: outside the lock. */
    for (int i = 0; i < shown; i++) {
        char where[512];

        describe(found[i].caller, where, sizeof where);
        printf("    live: %zu bytes from %s\n", found[i].size, where);
    }
    return n;
}
