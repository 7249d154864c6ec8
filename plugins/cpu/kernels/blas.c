/*
 * The CPU plugin's BLAS, loaded with dlopen at plugin init (kblas.h).
 *
 * WHICH LIBRARY. KEEL_CPU_BLAS names it (a soname or a path); by default
 * OpenBLAS as Debian installs it, libopenblas.so.0 (the alternatives link
 * picks the pthread, OpenMP or serial build), then libopenblas.so. The
 * library must export cblas_sgemm and cblas_dgemm; OpenBLAS's thread and
 * identification calls are used when present.
 *
 * KERNEL SET. A DYNAMIC_ARCH OpenBLAS picks its kernels from the CPU model
 * when it is loaded. A release older than the CPU does not know the model
 * and falls back to its most generic x86-64 kernels (OpenBLAS 0.3.21 picks
 * "Prescott", SSE3, on recent Xeons with AVX-512, which makes every GEMM
 * several times slower). So after loading, when the user has not chosen a
 * kernel set (OPENBLAS_CORETYPE) and nothing else in the process had loaded
 * the library already, the plugin compares OpenBLAS's choice with what the
 * CPU can do (CPUID, with the operating system's consent to the wide
 * registers, as GCC's __builtin_cpu_supports reports it). Only when
 * OpenBLAS took a pre-AVX2 kernel set on a CPU with AVX2 and FMA does it
 * step in: it unloads the library and loads it again with
 * OPENBLAS_CORETYPE set for that one load (then restores the environment):
 *
 *   AVX-512 F/CD/BW/DQ/VL with AVX512_BF16   Cooperlake
 *   AVX-512 F/CD/BW/DQ/VL                    SkylakeX
 *   AVX2 + FMA                               Haswell
 *
 * (what OpenBLAS itself selects for such CPUs when it knows them). A choice
 * OpenBLAS made at AVX2 level or above is never second-guessed. When the
 * library was already loaded by someone else, its choice stays and a
 * warning says how to get the faster kernels. The environment is touched
 * only during plugin init, which the core runs before handing out devices;
 * KEEL_CPU_BLAS_CORETYPE=keep switches the correction off.
 *
 * THE USER'S CHOICE is checked before the library is loaded: OpenBLAS
 * takes OPENBLAS_CORETYPE as given, and kernels for instructions the CPU
 * lacks die with SIGILL at the first GEMM. The plugin knows the
 * instructions each x86 kernel set needs (core_needs below) and asks
 * CPUID for them. A kernel set the CPU can run is honoured (logged at
 * info level); one it cannot run is left out of that one load, with a
 * warning naming the missing instructions, so that OpenBLAS detects the
 * CPU itself (and the correction above may apply); a name the table does
 * not know is passed on unchecked, and the log says so. The user's value
 * is put back in the environment as it was.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kblas.h"
#include "kern.h"

struct cpu_blas cpu_blas;

static struct {
    void *handle;
    char summary[192];
} blas_g;

static bool set(const char *v)
{
    return v && *v;
}

/* ISA level of a CPU or of an OpenBLAS kernel set. */
enum isa { ISA_OLD, ISA_AVX2, ISA_AVX512 };

static enum isa core_isa(const char *core)
{
    static const char *const avx512[] = {"SkylakeX", "Cooperlake",
                                         "SapphireRapids"};
    static const char *const avx2[] = {"Haswell", "Zen"};

    for (size_t i = 0; i < sizeof(avx512) / sizeof(avx512[0]); i++)
        if (!strcasecmp(core, avx512[i]))
            return ISA_AVX512;
    for (size_t i = 0; i < sizeof(avx2) / sizeof(avx2[0]); i++)
        if (!strcasecmp(core, avx2[i]))
            return ISA_AVX2;
    return ISA_OLD;
}

/* The OpenBLAS kernel set this CPU can run best, or NULL (not x86, or no
 * AVX2 + FMA). */
static const char *cpu_best_core(void)
{
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        return NULL;
    if (__builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512cd") &&
        __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        return __builtin_cpu_supports("avx512bf16") ? "Cooperlake"
                                                    : "SkylakeX";
    return "Haswell";
#else
    return NULL;
#endif
}

/* ---- what an OpenBLAS kernel set needs from the CPU ----------------------- */

enum {
    NEED_SSE3 = 1u << 0,
    NEED_SSSE3 = 1u << 1,
    NEED_SSE41 = 1u << 2,
    NEED_SSE42 = 1u << 3,
    NEED_AVX = 1u << 4,
    NEED_AVX2 = 1u << 5,
    NEED_FMA = 1u << 6,
    NEED_FMA4 = 1u << 7,
    NEED_AVX512 = 1u << 8, /* F, CD, BW, DQ and VL */
    NEED_BF16 = 1u << 9,   /* AVX512_BF16 */
    NEED_AMX = 1u << 10,   /* AMX-BF16 with the OS's tile state */
};

static const char *const need_names[] = {
    "SSE3", "SSSE3", "SSE4.1", "SSE4.2", "AVX", "AVX2", "FMA", "FMA4",
    "AVX-512 (F/CD/BW/DQ/VL)", "AVX512_BF16", "AMX-BF16",
};

/* OpenBLAS's x86 kernel sets (the names OPENBLAS_CORETYPE takes) and the
 * instructions their kernels use. */
static const struct {
    const char *core;
    unsigned need;
} core_needs[] = {
    {"Katmai", 0},
    {"Coppermine", 0},
    {"Northwood", 0},
    {"Banias", 0},
    {"Opteron", 0},
    {"Prescott", NEED_SSE3},
    {"Opteron_SSE3", NEED_SSE3},
    {"Barcelona", NEED_SSE3},
    {"Nano", NEED_SSE3},
    {"Atom", NEED_SSSE3},
    {"Core2", NEED_SSSE3},
    {"Penryn", NEED_SSE41},
    {"Dunnington", NEED_SSE41},
    {"Nehalem", NEED_SSE42},
    {"SandyBridge", NEED_AVX},
    {"Bulldozer", NEED_AVX | NEED_FMA4},
    {"Piledriver", NEED_AVX | NEED_FMA | NEED_FMA4},
    {"Steamroller", NEED_AVX | NEED_FMA | NEED_FMA4},
    {"Excavator", NEED_AVX2 | NEED_FMA | NEED_FMA4},
    {"Haswell", NEED_AVX2 | NEED_FMA},
    {"Zen", NEED_AVX2 | NEED_FMA},
    {"SkylakeX", NEED_AVX2 | NEED_FMA | NEED_AVX512},
    {"Cooperlake", NEED_AVX2 | NEED_FMA | NEED_AVX512 | NEED_BF16},
    {"SapphireRapids",
     NEED_AVX2 | NEED_FMA | NEED_AVX512 | NEED_BF16 | NEED_AMX},
};

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>

/* AMX-BF16 (CPUID.7.0:EDX[22]) with the tile state enabled by the OS
 * (XCR0 bits 17 and 18). */
static bool cpu_has_amx_bf16(void)
{
    unsigned a, b, c, d, lo, hi;

    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)))
        return false;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) /* OSXSAVE */
        return false;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    return (lo & (3u << 17)) == (3u << 17);
}

/* The NEED_ bits this CPU provides (CPUID, and for the wide registers the
 * operating system's consent, as __builtin_cpu_supports checks it). */
static unsigned cpu_provides(void)
{
    unsigned have = 0;

    __builtin_cpu_init();
    have |= __builtin_cpu_supports("sse3") ? NEED_SSE3 : 0;
    have |= __builtin_cpu_supports("ssse3") ? NEED_SSSE3 : 0;
    have |= __builtin_cpu_supports("sse4.1") ? NEED_SSE41 : 0;
    have |= __builtin_cpu_supports("sse4.2") ? NEED_SSE42 : 0;
    have |= __builtin_cpu_supports("avx") ? NEED_AVX : 0;
    have |= __builtin_cpu_supports("avx2") ? NEED_AVX2 : 0;
    have |= __builtin_cpu_supports("fma") ? NEED_FMA : 0;
    have |= __builtin_cpu_supports("fma4") ? NEED_FMA4 : 0;
    if (__builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512cd") &&
        __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        have |= NEED_AVX512;
    have |= __builtin_cpu_supports("avx512bf16") ? NEED_BF16 : 0;
    have |= cpu_has_amx_bf16() ? NEED_AMX : 0;
    return have;
}
#define CPU_CAN_CHECK_CORES 1
#else
static unsigned cpu_provides(void)
{
    return 0;
}
#define CPU_CAN_CHECK_CORES 0
#endif

enum core_fit { CORE_UNKNOWN, CORE_RUNS, CORE_LACKS };

/* Whether this CPU can run OpenBLAS kernel set `core`; for CORE_LACKS,
 * `missing` receives the instructions it lacks. */
static enum core_fit core_fits(const char *core, char *missing, size_t cap)
{
    unsigned need = 0, lack;
    bool known = false;
    size_t len = 0;

    missing[0] = '\0';
    for (size_t i = 0; i < sizeof(core_needs) / sizeof(core_needs[0]); i++)
        if (!strcasecmp(core, core_needs[i].core)) {
            need = core_needs[i].need;
            known = true;
        }
    if (!known || !CPU_CAN_CHECK_CORES)
        return CORE_UNKNOWN;
    lack = need & ~cpu_provides();
    if (!lack)
        return CORE_RUNS;
    for (size_t i = 0; i < sizeof(need_names) / sizeof(need_names[0]); i++)
        if (lack & (1u << i) && len < cap)
            len += (size_t)snprintf(missing + len, cap - len, "%s%s",
                                    len ? ", " : "", need_names[i]);
    return CORE_LACKS;
}

/* Looks `name` up in `h` and stores it into the function pointer at fp
 * (NULL when absent): POSIX guarantees a data pointer from dlsym fits. */
static bool sym(void *h, const char *name, void *fp)
{
    void *p;

    dlerror();
    p = dlsym(h, name);
    if (dlerror())
        p = NULL;
    memcpy(fp, &p, sizeof(p));
    return p != NULL;
}

static const char *corename(void *h)
{
    char *(*fn)(void);
    const char *s = sym(h, "openblas_get_corename", &fn) ? fn() : NULL;

    return s && *s ? s : NULL;
}

/* dlopen with a message on failure. */
static void *open_lib(const char *name, char *msg, size_t cap)
{
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);

    if (!h) {
        const char *e = dlerror();
        snprintf(msg, cap, "cannot load the BLAS library %s: %s", name,
                 e ? e : "unknown error");
    }
    return h;
}

/* Loads `name` and, when OpenBLAS took a kernel set below what the CPU
 * can do (see the top of the file), loads it again with the right one.
 * *note receives what was done, for the log. */
static void *open_blas_checked(const char *name, const char *user,
                               bool pre, char *msg, size_t cap, char *note,
                               size_t ncap);

/* Checks the user's OPENBLAS_CORETYPE against the CPU (see the top of the
 * file), then loads `name` through open_blas_checked, with the user's
 * choice left out of that load when the CPU cannot run it, and puts the
 * user's value back afterwards. */
static void *open_blas(const char *name, char *msg, size_t cap, char *note,
                       size_t ncap)
{
    const char *env = cpu_getenv("OPENBLAS_CORETYPE");
    void *pre = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
    char user[64] = "", missing[128];
    bool dropped = false;
    void *h;

    if (pre)
        dlclose(pre);
    if (env && *env)
        snprintf(user, sizeof(user), "%s", env);
    if (user[0]) {
        switch (core_fits(user, missing, sizeof(missing))) {
        case CORE_RUNS:
            cpu_log(KEEL_LOG_INFO,
                    "cpu plugin: OPENBLAS_CORETYPE=%s: this CPU has the "
                    "instructions those kernels need; honoured", user);
            break;
        case CORE_UNKNOWN:
            cpu_log(KEEL_LOG_INFO,
                    "cpu plugin: OPENBLAS_CORETYPE=%s: not a kernel set the "
                    "plugin can check against this CPU; passed on to "
                    "OpenBLAS unchecked", user);
            break;
        case CORE_LACKS:
            if (pre) {
                cpu_log(KEEL_LOG_WARN,
                        "cpu plugin: OPENBLAS_CORETYPE=%s asks for kernels "
                        "that need %s, which this CPU lacks, and %s was "
                        "loaded with it before the plugin: GEMMs may die "
                        "with an illegal instruction; unset it",
                        user, missing, name);
                break;
            }
            cpu_log(KEEL_LOG_WARN,
                    "cpu plugin: OPENBLAS_CORETYPE=%s ignored: those kernels "
                    "need %s, which this CPU lacks (CPUID); %s chooses its "
                    "kernels itself", user, missing, name);
            if (unsetenv("OPENBLAS_CORETYPE") == 0)
                dropped = true;
            break;
        }
    }
    h = open_blas_checked(name, dropped || !user[0] ? NULL : user, pre != NULL,
                          msg, cap, note, ncap);
    if (user[0] && setenv("OPENBLAS_CORETYPE", user, 1) != 0)
        cpu_log(KEEL_LOG_WARN, "cpu plugin: could not restore "
                "OPENBLAS_CORETYPE=%s in the environment", user);
    if (dropped) {
        size_t len = strlen(note);

        snprintf(note + len, ncap - len, "%sOPENBLAS_CORETYPE=%s ignored "
                 "(needs %s)", len ? "; " : "", user, missing);
    }
    return h;
}

static void *open_blas_checked(const char *name, const char *user,
                               bool pre, char *msg, size_t cap, char *note,
                               size_t ncap)
{
    const char *keep = cpu_getenv("KEEL_CPU_BLAS_CORETYPE");
    const char *best = cpu_best_core(), *core;
    void *h;

    h = open_lib(name, msg, cap);
    if (!h || !(core = corename(h)) || !best ||
        core_isa(core) != ISA_OLD || core_isa(best) == ISA_OLD)
        return h;
    if (user && *user)
        return h; /* the user's explicit choice */
    if (keep && !strcmp(keep, "keep"))
        return h;
    if (pre) {
        cpu_log(KEEL_LOG_WARN,
                "cpu plugin: %s was loaded before the plugin and runs its "
                "%s kernels on a CPU that supports %s's; set "
                "OPENBLAS_CORETYPE=%s before starting the program for "
                "faster GEMMs",
                name, core, best, best);
        return h;
    }
    snprintf(note, ncap, "OpenBLAS chose %s kernels on a CPU that runs %s; "
             "reloaded with %s", core, best, best);
    dlclose(h);
    if (setenv("OPENBLAS_CORETYPE", best, 1) != 0) {
        *note = '\0';
        return open_lib(name, msg, cap);
    }
    h = open_lib(name, msg, cap);
    unsetenv("OPENBLAS_CORETYPE");
    return h;
}

keel_status cpu_blas_load(char *msg, size_t cap)
{
    const char *want = cpu_getenv("KEEL_CPU_BLAS");
    const char *names[2] = {"libopenblas.so.0", "libopenblas.so"};
    char note[160] = "", first[CPU_MSG_MAX] = "";
    char *(*config)(void);
    const char *name = NULL, *core;
    int n = 2;
    void *h = NULL;

    if (blas_g.handle)
        return KEEL_STATUS_OK;
    if (want && *want) {
        names[0] = want;
        n = 1;
    }
    for (int i = 0; i < n && !h; i++) {
        name = names[i];
        h = open_blas(name, msg, cap, note, sizeof(note));
        if (!h && i == 0)
            snprintf(first, sizeof(first), "%s", msg);
    }
    if (!h) {
        snprintf(msg, cap, "%s (install libopenblas0, or set KEEL_CPU_BLAS "
                 "to a library with the CBLAS interface)",
                 first[0] ? first : "no BLAS library");
        return KEEL_STATUS_DEVICE_ERROR;
    }
    if (!sym(h, "cblas_sgemm", &cpu_blas.sgemm) ||
        !sym(h, "cblas_dgemm", &cpu_blas.dgemm)) {
        snprintf(msg, cap, "the BLAS library %s lacks cblas_%s", name,
                 cpu_blas.sgemm ? "dgemm" : "sgemm");
        memset(&cpu_blas, 0, sizeof(cpu_blas));
        dlclose(h);
        return KEEL_STATUS_DEVICE_ERROR;
    }
    sym(h, "openblas_set_num_threads", &cpu_blas.set_threads);
    sym(h, "openblas_get_num_threads", &cpu_blas.get_threads);
    blas_g.handle = h;
    /* One thread count for both pools unless the user set OpenBLAS's. */
    if (cpu_blas.set_threads && !set(cpu_getenv("OPENBLAS_NUM_THREADS")) &&
        !set(cpu_getenv("GOTO_NUM_THREADS")) &&
        !set(cpu_getenv("OMP_NUM_THREADS")))
        cpu_blas.set_threads(cpu_pool_configured());

    core = corename(h);
    if (sym(h, "openblas_get_config", &config) && config()) {
        /* "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY ..." -> first 2 words */
        const char *c = config(), *sp = strchr(c, ' ');
        int len = sp && strchr(sp + 1, ' ') ? (int)(strchr(sp + 1, ' ') - c)
                                            : (int)strlen(c);
        snprintf(blas_g.summary, sizeof(blas_g.summary), "%.*s%s%s%s", len,
                 c, core ? " (" : "", core ? core : "",
                 core ? " kernels)" : "");
    } else {
        snprintf(blas_g.summary, sizeof(blas_g.summary), "%s", name);
    }
    cpu_log(KEEL_LOG_INFO, "cpu plugin: BLAS %s from %s%s%s",
            blas_g.summary, name, note[0] ? "; " : "", note);
    return KEEL_STATUS_OK;
}

void cpu_blas_unload(void)
{
    if (!blas_g.handle)
        return;
    dlclose(blas_g.handle);
    blas_g.handle = NULL;
    blas_g.summary[0] = '\0';
    memset(&cpu_blas, 0, sizeof(cpu_blas));
}

const char *cpu_blas_summary(void)
{
    return blas_g.summary[0] ? blas_g.summary : "no BLAS loaded";
}
