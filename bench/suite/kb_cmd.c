/*
 * keel bench — the command.
 *
 *   keel bench --plugin PATH_OR_NAME [--device N] [--filter REGEX]
 *              [--format console|json|csv] [--out FILE] [--min-time S]
 *              [--repetitions N] [--timing auto|events|host] [--large]
 *              [--smoke] [--list] [--peak GFLOPS] [--benchmark_*=VALUE ...]
 *   keel bench compare A.json B.json [C.json ...] [--threshold PCT]
 *                      [--html FILE]
 *
 * The run: resolve the plugin and device, switch keel to strict mode (a
 * missing kernel is an error, never a CPU fallback), register every
 * benchmark (kb_register_*), measure the f32 matmul peak when a matmul
 * benchmark is selected, add keel's context (keel and plugin versions,
 * device properties, timing method, peak) to Google Benchmark's context,
 * and hand the options to the library as its own --benchmark_* flags, so
 * that the console, JSON and CSV reports are the library's.
 *
 * Exit status: 0 every selected benchmark ran or was skipped for a missing
 * kernel or feature; 1 a benchmark produced a wrong result or failed, or
 * the plugin could not be used; 2 bad usage (a filter that selects
 * nothing included); 3 the plugin has no device.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"
#include "kb.h"
#include "progress.h"

extern char **environ;
extern const keel_cli_command keel_cmd_bench;

enum timing_choice { TIMING_AUTO, TIMING_EVENTS, TIMING_HOST };

#define MAX_PASS 16

struct bench_opts {
    const char *plugin;
    long device;
    const char *filter;
    const char *format;
    const char *out;
    const char *min_time;
    double peak;                /* --peak: declared f32 GFLOP/s, 0 = measure */
    long repetitions;
    enum timing_choice timing;
    bool large, smoke, list;
    const char *pass[MAX_PASS]; /* --benchmark_* flags given as they are */
    int npass;
};

static int usage(const char *fmt, const char *arg)
{
    return keel_cli_usage_error(&keel_cmd_bench, fmt, arg ? arg : "");
}

static int parse_args(int argc, char **argv, struct bench_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->format = "console";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        static const char *const valued[] = {
            "--plugin", "--device",      "--filter", "--format",
            "--out",    "--min-time",    "--repetitions", "--timing",
            "--peak"};
        bool takes = false;

        for (size_t k = 0; k < sizeof(valued) / sizeof(valued[0]); k++) {
            size_t n = strlen(valued[k]);
            if (!strncmp(a, valued[k], n) && (a[n] == '=' || !a[n])) {
                takes = true;
                v = a[n] == '=' ? a + n + 1 : NULL;
                if (!v) {
                    if (i + 1 >= argc)
                        return usage("%s needs a value", valued[k]);
                    v = argv[++i];
                }
                break;
            }
        }
        if (!takes) {
            if (!strcmp(a, "--large"))
                o->large = true;
            else if (!strcmp(a, "--smoke"))
                o->smoke = true;
            else if (!strcmp(a, "--list"))
                o->list = true;
            else if (!strncmp(a, "--benchmark_", 12) && strchr(a, '=') &&
                     o->npass < MAX_PASS)
                o->pass[o->npass++] = a;
            else
                return usage("unknown argument '%s'", a);
            continue;
        }
        if (!strncmp(a, "--plugin", 8)) {
            o->plugin = v;
        } else if (!strncmp(a, "--device", 8)) {
            if (!keel_cli_parse_long(v, 0, INT32_MAX, &o->device))
                return usage("--device: '%s' is not a device index", v);
        } else if (!strncmp(a, "--filter", 8)) {
            o->filter = v;
        } else if (!strncmp(a, "--format", 8)) {
            if (strcmp(v, "console") && strcmp(v, "json") && strcmp(v, "csv"))
                return usage("--format: '%s' is not console, json or csv", v);
            o->format = v;
        } else if (!strncmp(a, "--out", 5)) {
            if (!*v)
                return usage("--out needs a file name%s", "");
            o->out = v;
        } else if (!strncmp(a, "--min-time", 10)) {
            char *end;
            double t;
            errno = 0;
            t = strtod(v, &end);
            if (errno || end == v || *end || !(t > 0) || t > 3600)
                return usage("--min-time: '%s' is not a time in seconds "
                             "(0, 3600]", v);
            o->min_time = v;
        } else if (!strncmp(a, "--repetitions", 13)) {
            if (!keel_cli_parse_long(v, 1, 1000, &o->repetitions))
                return usage("--repetitions: '%s' is not in [1, 1000]", v);
        } else if (!strncmp(a, "--peak", 6)) {
            char *end;
            errno = 0;
            o->peak = strtod(v, &end);
            if (errno || end == v || *end || !(o->peak > 0) || o->peak > 1e9)
                return usage("--peak: '%s' is not a peak in GFLOP/s "
                             "(0, 1e9]", v);
        } else {
            if (!strcmp(v, "auto"))
                o->timing = TIMING_AUTO;
            else if (!strcmp(v, "events"))
                o->timing = TIMING_EVENTS;
            else if (!strcmp(v, "host"))
                o->timing = TIMING_HOST;
            else
                return usage("--timing: '%s' is not auto, events or host", v);
        }
    }
    if (!o->plugin)
        return usage("--plugin PATH_OR_NAME is required%s", "");
    if (o->smoke && !o->min_time)
        o->min_time = "0.01";
    if (o->smoke && !o->repetitions)
        o->repetitions = 1;
    if (o->filter && strstr(o->filter, "1GiB"))
        o->large = true;
    return -1;
}

static bool looks_like_path(const char *s)
{
    size_t n = strlen(s);

    return strchr(s, '/') || (n > 3 && !strcmp(s + n - 3, ".so"));
}

/* The plugin index for --plugin, or -1 after printing why. */
static int resolve_plugin(const char *spec)
{
    keel_plugin_info info;
    keel_status s;
    int idx = -1;

    if (looks_like_path(spec)) {
        char want[PATH_MAX], have[PATH_MAX];
        if (!realpath(spec, want)) {
            fprintf(stderr, "keel bench: plugin '%s': %s\n", spec,
                    strerror(errno));
            return -1;
        }
        /* Already found by discovery (KEEL_PLUGIN_PATH, build tree)? */
        for (int i = 0; i < keel_plugin_count(); i++)
            if (keel_plugin_get_info(i, &info) == KEEL_STATUS_OK &&
                info.loaded && info.path && realpath(info.path, have) &&
                !strcmp(want, have))
                return i;
        s = keel_plugin_load(spec, &idx);
        if (s != KEEL_STATUS_OK || idx < 0) {
            if (idx >= 0 && keel_plugin_get_info(idx, &info) == KEEL_STATUS_OK)
                fprintf(stderr, "keel bench: plugin %s was refused [%s]: %s\n",
                        spec, info.failed_check ? info.failed_check : "?",
                        info.reason ? info.reason : keel_last_error());
            else
                fprintf(stderr, "keel bench: cannot load plugin %s: %s: %s\n",
                        spec, keel_status_name(s), keel_last_error());
            return -1;
        }
        return idx;
    }
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < keel_plugin_count(); i++) {
            const char *key;
            if (keel_plugin_get_info(i, &info) != KEEL_STATUS_OK)
                continue;
            key = pass == 0 ? info.name : info.device_type;
            if (!key || strcasecmp(key, spec))
                continue;
            if (!info.loaded) {
                fprintf(stderr, "keel bench: plugin %s (%s) was refused "
                                "[%s]: %s\n",
                        spec, info.path ? info.path : "?",
                        info.failed_check ? info.failed_check : "?",
                        info.reason ? info.reason : "");
                return -1;
            }
            return i;
        }
    fprintf(stderr,
            "keel bench: no plugin named '%s' was found (see 'keel "
            "devices'; pass a path to load one)\n",
            spec);
    return -1;
}

/* ---- context ------------------------------------------------------------ */

static void ctx_str(const char *key, const char *value)
{
    keel_bm_add_context(key, value ? value : "");
}

static void ctx_field(const char *key, const char *field, size_t cap)
{
    char buf[256];
    size_t n = keel_cli_field_len(field, cap);

    if (n >= sizeof(buf))
        n = sizeof(buf) - 1;
    memcpy(buf, field, n);
    buf[n] = '\0';
    ctx_str(key, buf);
}

static void ctx_num(const char *key, const char *fmt, double v)
{
    char buf[64];

    snprintf(buf, sizeof(buf), fmt, v);
    ctx_str(key, buf);
}

static void add_context(const struct kb_env *env, const keel_plugin_info *pi,
                        const char *peak_how, const struct bench_opts *o)
{
    const keel_device_props *p = &env->props;
    char buf[512];
    size_t len = 0;

    ctx_str("keel_version", keel_version());
    snprintf(buf, sizeof(buf), "%d.%d", KEEL_ABI_VERSION_MAJOR,
             KEEL_ABI_VERSION_MINOR);
    ctx_str("keel_abi", buf);
    ctx_str("keel_plugin", pi->name);
    ctx_str("keel_plugin_version", pi->version);
    ctx_str("keel_plugin_path", pi->path);
    ctx_str("keel_plugin_description", pi->description);
    snprintf(buf, sizeof(buf), "%u.%u", pi->abi_major, pi->abi_minor);
    ctx_str("keel_plugin_abi", buf);
    ctx_str("keel_device", env->device);
    ctx_field("keel_device_name", p->name, sizeof(p->name));
    ctx_field("keel_device_vendor", p->vendor, sizeof(p->vendor));
    ctx_field("keel_device_arch", p->arch, sizeof(p->arch));
    ctx_field("keel_device_driver", p->driver_version,
              sizeof(p->driver_version));
    ctx_num("keel_device_memory_bytes", "%.0f", (double)p->total_memory);
    ctx_num("keel_device_compute_units", "%.0f", p->compute_units);
    ctx_num("keel_device_clock_khz", "%.0f", p->clock_khz);
    buf[0] = '\0';
    for (unsigned bit = 0; bit < 32; bit++) {
        const char *f = keel_cli_feature_name(bit);
        if ((p->features & (1u << bit)) && f && len < sizeof(buf) - 40)
            len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%s",
                                    len ? "," : "", f);
    }
    ctx_str("keel_device_features", buf);
    ctx_num("keel_devices", "%.0f", env->ndevices);
    ctx_str("keel_timing", env->events
                               ? "device events (manual time)"
                               : "host monotonic clock + stream synchronize");
    ctx_str("keel_strict", "true");
    ctx_str("keel_suite", o->smoke ? "smoke" : o->large ? "full+1GiB" : "full");
    if (env->peak_gflops > 0)
        ctx_num("keel_matmul_peak_gflops", "%.2f", env->peak_gflops);
    ctx_str("keel_matmul_peak", peak_how);
    /* The settings that change what is measured. */
    for (char **e = environ; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq || (strncmp(*e, "KEEL_", 5) && strncmp(*e, "OPENBLAS_", 9) &&
                    strncmp(*e, "OMP_", 4)))
            continue;
        snprintf(buf, sizeof(buf), "env_%.*s", (int)(eq - *e), *e);
        ctx_str(buf, eq + 1);
    }
}

/* ---- run ---------------------------------------------------------------- */

/* The live line on a terminal (progress.h): benchmarks begun of those
 * selected, the running one named; erased whenever a benchmark function
 * returns, so the library's own report lines print on a clean line. */
struct bench_progress {
    keel_cli_progress line;
    char last[256];
    uint64_t begun;
};

static void progress_hook(const char *name, bool begin, void *user)
{
    struct bench_progress *p = user;

    if (!begin) {
        keel_cli_progress_clear(&p->line);
        return;
    }
    if (strncmp(name, p->last, sizeof(p->last) - 1)) {
        snprintf(p->last, sizeof(p->last), "%s", name);
        p->begun++;
    }
    keel_cli_progress_update(&p->line, p->begun - 1, name);
}

static int run_bench(const struct bench_opts *o)
{
    struct kb_env env;
    keel_plugin_info pi;
    const char *args[32 + MAX_PASS];
    char flags[8][600];
    char peak_how[256] = "not measured (no f32 matmul or conv2d "
                         "benchmark selected)";
    int nargs = 0, nflags = 0, counts[4], rc = KEEL_EXIT_OK;
    long ran;
    keel_status s;
    struct bench_progress progress;

    memset(&env, 0, sizeof(env));
    memset(&progress, 0, sizeof(progress));
    s = keel_init();
    if (s != KEEL_STATUS_OK)
        return keel_cli_runtime_error(&keel_cmd_bench, "keel_init", s);
    env.plugin = resolve_plugin(o->plugin);
    if (env.plugin < 0)
        return KEEL_EXIT_ERROR;
    if (keel_plugin_get_info(env.plugin, &pi) != KEEL_STATUS_OK ||
        !(env.api = keel_plugin_table(env.plugin)))
        return keel_cli_runtime_error(&keel_cmd_bench, "plugin info",
                                      keel_last_status());
    env.ndevices = pi.device_count;
    if (env.ndevices <= 0) {
        fprintf(stderr, "keel bench: plugin %s has no device%s%s\n", pi.name,
                pi.reason ? ": " : "", pi.reason ? pi.reason : "");
        return KEEL_EXIT_NO_DEVICE;
    }
    if (o->device >= env.ndevices) {
        fprintf(stderr, "keel bench: --device %ld: plugin %s has %d device%s\n",
                o->device, pi.name, env.ndevices,
                env.ndevices == 1 ? "" : "s");
        return KEEL_EXIT_USAGE;
    }
    env.place = (keel_place){env.plugin, (int32_t)o->device};
    s = keel_place_name(env.place, env.device, sizeof(env.device));
    if (s == KEEL_STATUS_OK)
        s = keel_device_get_props(env.place, &env.props);
    if (s != KEEL_STATUS_OK)
        return keel_cli_runtime_error(&keel_cmd_bench, "device", s);
    env.events = (env.props.features & KEEL_FEATURE_EVENT_TIMING) &&
                 env.api->stream->event_elapsed_ms;
    if (o->timing == TIMING_HOST)
        env.events = false;
    if (o->timing == TIMING_EVENTS && !env.events) {
        fprintf(stderr, "keel bench: --timing events: plugin %s has no event "
                        "timing (KEEL_FEATURE_EVENT_TIMING)\n",
                pi.name);
        return KEEL_EXIT_USAGE;
    }
    env.smoke = o->smoke;
    env.large = o->large;
    env.filter = o->filter;
    /* Measure what the plugin computes, never a fallback. */
    keel_set_strict(true);

    kb_register_memory(&env);
    kb_register_launch(&env);
    kb_register_kernels(&env);
    kb_register_collectives(&env);
    kb_register_e2e(&env);
    kb_register_amp(&env);
    kb_register_models(&env);

    if (o->peak > 0) {
        env.peak_gflops = o->peak;
        env.peak_declared = true;
        snprintf(peak_how, sizeof(peak_how),
                 "declared: %.2f GFLOP/s (--peak); %%peak may exceed 100",
                 o->peak);
    } else if (!o->list && (keel_bm_any_selected(o->filter, "matmul/f32/") ||
                            keel_bm_any_selected(o->filter,
                                                 "paired/matmul") ||
                            keel_bm_any_selected(o->filter, "conv2d/"))) {
        fprintf(stderr, "keel bench: measuring the f32 matmul peak of %s...\n",
                env.device);
        env.peak_gflops = kb_measure_peak(&env, peak_how, sizeof(peak_how));
    }
    kb_peak_begin(&env);
    add_context(&env, &pi, peak_how, o);

    args[nargs++] = "keel bench";
#define FLAG(...)                                                            \
    do {                                                                     \
        snprintf(flags[nflags], sizeof(flags[nflags]), __VA_ARGS__);         \
        args[nargs++] = flags[nflags++];                                     \
    } while (0)
    if (o->filter)
        FLAG("--benchmark_filter=%s", o->filter);
    if (o->min_time)
        FLAG("--benchmark_min_time=%s", o->min_time);
    if (o->repetitions)
        FLAG("--benchmark_repetitions=%ld", o->repetitions);
    if (o->out) {
        FLAG("--benchmark_out=%s", o->out);
        FLAG("--benchmark_out_format=%s", o->format);
    } else {
        FLAG("--benchmark_format=%s", o->format);
    }
    if (o->repetitions > 1 && (o->out || !strcmp(o->format, "console")))
        args[nargs++] = "--benchmark_display_aggregates_only=true";
    if (o->list)
        args[nargs++] = "--benchmark_list_tests=true";
#undef FLAG
    for (int i = 0; i < o->npass; i++)
        args[nargs++] = o->pass[i];

    fflush(stdout);
    if (!o->list) {
        keel_cli_progress_init(&progress.line, stdout, "bench",
                               keel_bm_count_selected(o->filter, ""));
        if (progress.line.live)
            keel_bm_set_hook(progress_hook, &progress);
    }
    ran = keel_bm_run(nargs, args);
    keel_bm_set_hook(NULL, NULL);
    keel_cli_progress_clear(&progress.line);
    fflush(stdout);
    kb_count_outcomes(counts);
    if (ran < 0) {
        fprintf(stderr, "keel bench: Google Benchmark refused the options\n");
        rc = KEEL_EXIT_USAGE;
    } else if (!o->list) {
        fprintf(stderr,
                "keel bench: %ld benchmarks on %s (%s): %d skipped (no kernel "
                "or feature), %d wrong results, %d errors\n",
                ran, env.device, pi.name, counts[KB_SKIPPED], counts[KB_WRONG],
                counts[KB_ERROR]);
        kb_peak_end(stderr);
        if (counts[KB_WRONG] || counts[KB_ERROR] || kb_register_failures())
            rc = KEEL_EXIT_ERROR;
        if (ran == 0) {
            fprintf(stderr, "keel bench: the filter '%s' selects nothing "
                            "(see --list)\n",
                    o->filter ? o->filter : "");
            rc = KEEL_EXIT_USAGE;
        }
    }
    keel_bm_clear();
    kb_forget_all();
    keel_shutdown();
    return rc;
}

static int cmd_bench_run(int argc, char **argv)
{
    struct bench_opts o;
    int rc;

    if (argc > 1 && !strcmp(argv[1], "compare"))
        return kb_compare_main(argc - 1, argv + 1);
    rc = parse_args(argc, argv, &o);
    if (rc >= 0)
        return rc;
    return run_bench(&o);
}

const keel_cli_command keel_cmd_bench = {
    .name = "bench",
    .synopsis = "--plugin PATH_OR_NAME [--device N] [--filter REGEX] "
                "[--format console|json|csv] [--out FILE] [--min-time S] "
                "[--repetitions N] [--timing auto|events|host] [--large] "
                "[--smoke] [--list] [--peak GFLOPS]\n"
                "       keel bench compare A.json B.json [C.json ...] "
                "[--threshold PCT] [--html FILE]",
    .summary = "benchmark a plugin's memory, launch, kernels, collectives",
    .help =
        "Run keel's benchmark suite (Google Benchmark) on one device of one\n"
        "plugin: copy bandwidth and allocation latency (memory/), launch and\n"
        "synchronize latency (launch/), catalog kernels (elementwise/,\n"
        "reduce/, matmul/, conv2d/, softmax/, layer_norm/, cross_entropy/,\n"
        "optimizer/), collectives over all the plugin's devices\n"
        "(collective/), a LeNet training step and MLP inference (e2e/),\n"
        "model steps, training and batch-1 inference, of a BERT-base\n"
        "encoder layer, ResNet-18 and LeNet (e2e/model/),\n"
        "host yardsticks (host/memcpy, host/sgemm with OpenBLAS), and\n"
        "paired/ benchmarks that alternate d2d with memcpy and matmul with\n"
        "sgemm inside every iteration (ratios robust to machine load).\n"
        "Kernels run in strict mode: a kernel the plugin lacks is reported\n"
        "as 'no kernel', never measured on the CPU fallback. Each benchmark\n"
        "warms up and checks its first result against a float64 host\n"
        "reference; a wrong result is reported as an error, not timed.\n"
        "\n"
        "  --plugin P       a plugin .so path, or a loaded plugin's name\n"
        "  --device N       device index within the plugin (default 0)\n"
        "  --filter RE      run benchmarks whose name matches RE (extended\n"
        "                   regex; a leading '-' excludes)\n"
        "  --format F       console (default), json or csv\n"
        "  --out FILE       write the report in --format to FILE; the\n"
        "                   console report still goes to stdout\n"
        "  --min-time S     minimum seconds per benchmark (default 0.5)\n"
        "  --repetitions N  repeat each benchmark N times; reports add mean,\n"
        "                   median, stddev and cv\n"
        "  --timing T       auto (events when the plugin times events),\n"
        "                   events, or host (monotonic clock + synchronize)\n"
        "  --large          add the accelerator sizes: 1 GiB copies (also\n"
        "                   when --filter names 1GiB), f32 add over 64M\n"
        "                   elements, f32/bf16 matmul at 4096 and 8192\n"
        "  --smoke          tiny sizes, one repetition, min time 0.01 s\n"
        "  --list           list the benchmark names and exit\n"
        "  --peak GFLOPS    the device's f32 matmul peak, declared (e.g. the\n"
        "                   data sheet's); %peak of f32 matmul and conv2d is\n"
        "                   relative to it and exceeds 100 when a benchmark\n"
        "                   beats it (flagged). Without it the peak is\n"
        "                   measured: the best f32 matmul of the probe and\n"
        "                   of the run so far, so %peak <= 100\n"
        "  --benchmark_*=V  passed to Google Benchmark unchanged\n"
        "\n"
        "JSON is Google Benchmark's format; its \"context\" object also\n"
        "holds keel_version, keel_plugin*, keel_device*, keel_timing,\n"
        "keel_matmul_peak_gflops and the KEEL_*/OPENBLAS_* environment.\n"
        "\n"
        "compare prints two JSON reports side by side (per benchmark: the\n"
        "figure of merit in A and B and B's speed relative to A) and flags\n"
        "a regression when B is slower than A by more than PCT percent\n"
        "(default 10) or fails where A ran. With more reports, each is\n"
        "compared with A in turn. --html FILE also writes one\n"
        "self-contained HTML page of bar charts of every benchmark across\n"
        "the reports, regressions highlighted (docs/benchmarks.md).\n"
        "\n"
        "Exit status: 0 success (skips for missing kernels are not\n"
        "failures), 1 a wrong result, a failed benchmark or a regression,\n"
        "2 bad usage (also a filter that selects nothing), 3 the plugin\n"
        "has no device.\n",
    .run = cmd_bench_run,
};
