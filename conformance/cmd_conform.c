/*
 * keel conform — the command.
 *
 *   keel conform --plugin PATH_OR_NAME [--config vendor.yaml]
 *                [--level smoke|full|stress] [--filter GLOB]... [--list]
 *                [--junit out.xml] [--report cert.json] [--html cert.html]
 *                [--jobs N]
 *                [--also-run-known-failures]
 *
 * Exit status: 0 every test passed (skips and declared known failures
 * allowed), 1 a test failed, 2 bad usage or configuration, 3 no device.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "conform.h"
#include "report/report.h"

extern const keel_cli_command keel_cmd_conform;

static int usage(const char *fmt, const char *arg)
{
    char msg[512];

    snprintf(msg, sizeof(msg), fmt, arg ? arg : "");
    return keel_cli_usage_error(&keel_cmd_conform, "%s", msg);
}

static bool looks_like_path(const char *s)
{
    size_t n = strlen(s);

    return strchr(s, '/') || (n > 3 && !strcmp(s + n - 3, ".so"));
}

static int parse_args(int argc, char **argv, struct cf_options *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = true;

        if (!strcmp(a, "--list")) {
            o->list = true;
            takes = false;
        } else if (!strcmp(a, "--also-run-known-failures")) {
            o->also_known = true;
            takes = false;
        } else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) {
            o->verbose = true;
            takes = false;
        } else if (!v) {
            if (!strncmp(a, "--", 2) &&
                (!strcmp(a, "--plugin") || !strcmp(a, "--config") ||
                 !strcmp(a, "--level") || !strcmp(a, "--filter") ||
                 !strcmp(a, "--junit") || !strcmp(a, "--report") ||
                 !strcmp(a, "--html") || !strcmp(a, "--jobs")))
                return usage("option %s needs a value", a);
            return usage("unknown option '%s'", a);
        } else if (!strcmp(a, "--plugin")) {
            o->plugin_arg = v;
        } else if (!strcmp(a, "--config")) {
            o->config_path = v;
        } else if (!strcmp(a, "--level")) {
            if (cf_level_parse(v, &o->level))
                return usage("--level must be smoke, full or stress, not "
                             "'%s'",
                             v);
        } else if (!strcmp(a, "--filter")) {
            const char **nf = realloc(o->filters, (size_t)(o->nfilters + 1) *
                                                      sizeof(*nf));
            if (!nf)
                return KEEL_EXIT_ERROR;
            o->filters = nf;
            o->filters[o->nfilters++] = v;
        } else if (!strcmp(a, "--junit")) {
            o->junit_path = v;
        } else if (!strcmp(a, "--report")) {
            o->report_path = v;
        } else if (!strcmp(a, "--html")) {
            o->html_path = v;
        } else if (!strcmp(a, "--jobs")) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > 64)
                return usage("--jobs must be an integer from 1 to 64, not "
                             "'%s'",
                             v);
            o->jobs = (int)n;
        } else {
            return usage("unknown option '%s'", a);
        }
        if (takes)
            i++;
    }
    return 0;
}

static void list_tests(FILE *out)
{
    int n = 0;

    for (int i = 0; i < cf_ntests; i++) {
        const struct cf_test *t = &cf_tests[i];
        if (!t->selected)
            continue;
        fprintf(out, "%-52s %-6s %s\n", t->id, cf_level_name(t->level),
                t->doc ? t->doc : "");
        n++;
    }
    fprintf(out, "%d tests\n", n);
}

/* Known failures that apply to this plugin and its tested devices. */
static void apply_known(const struct cf_config *cfg, const struct cf_probe *p)
{
    for (int i = 0; i < cf_ntests; i++) {
        struct cf_test *t = &cf_tests[i];

        t->known = -1;
        for (int k = 0; k < cfg->nknown && t->known < 0; k++) {
            const struct cf_known_failure *kf = &cfg->known[k];
            bool dev = !kf->device || p->ndev == 0;

            if (!cf_glob(kf->test, t->id) ||
                (kf->plugin && !cf_glob(kf->plugin, p->name)) ||
                (kf->version && !cf_glob(kf->version, p->version)))
                continue;
            for (int d = 0; d < p->ndev && !dev; d++)
                dev = cf_glob(kf->device, p->props[d].name);
            if (dev)
                t->known = k;
        }
    }
}

static void print_header(FILE *out, const struct cf_options *o,
                         const struct cf_config *cfg,
                         const struct cf_probe *p, const char *sha)
{
    int n = 0, ns = 0;

    for (int i = 0; i < cf_ntests; i++)
        n += cf_tests[i].selected;
    for (int s = 0; s < cf_nsuites; s++)
        ns += cf_suites[s].ntests > 0;
    fprintf(out, "keel conform %s (device ABI %d.%d)\n", keel_version(),
            KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR);
    if (p->loaded || p->name[0])
        fprintf(out, "  plugin   %s %s, ABI %u.%u, type %s: %s\n", p->name,
                p->version, p->abi_major, p->abi_minor, p->device_type,
                p->description);
    else
        fprintf(out, "  plugin   not loaded by the core [%s]: %s\n",
                p->failed_check, p->reason);
    fprintf(out, "  file     %s\n  sha256   %s\n", p->path, sha);
    fprintf(out, "  devices  %d:", (int)p->device_count);
    for (int i = 0; i < p->ndev; i++)
        fprintf(out, "%s %d \"%s\"", i ? "," : "", (int)p->dev[i],
                p->props[i].name);
    if (!cfg->all_devices) {
        fprintf(out, "\n  tested  ");
        for (int i = 0; i < cfg->ndevices; i++)
            fprintf(out, "%s %d", i ? "," : "", (int)cfg->devices[i]);
        fprintf(out, " (from %s)", cfg->path ? cfg->path : "the configuration");
    }
    if (p->ndev > 0 && (p->props[0].features & KEEL_FEATURE_COLLECTIVES)) {
        const keel_collective_caps *c = &p->coll_caps[0];
        if (p->coll_declared[0] == 1)
            fprintf(out, "\n  collectives declared (device %d): mask %#x, "
                         "dtypes %#x, reduce ops %#x, timeout %u ms",
                    (int)p->dev[0], c->collectives, c->dtype_mask,
                    c->reduce_ops, c->timeout_ms);
        else
            fprintf(out, "\n  collectives not declared (%s): all are tried",
                    p->coll_declared[0] < 0 ? p->coll_why[0]
                                            : "no collective.get_caps");
    }
    fprintf(out, "\n  level    %s, %d tests in %d suites, %d job%s\n\n",
            cf_level_name(o->level), n, ns, o->jobs, o->jobs == 1 ? "" : "s");
    fflush(out);
}

static int check_device_selection(const struct cf_config *cfg,
                                  const struct cf_probe *p)
{
    if (cfg->all_devices)
        return 0;
    for (int i = 0; i < cfg->ndevices; i++)
        if (cfg->devices[i] >= p->device_count) {
            fprintf(stderr,
                    "keel conform: %s selects device %d, but plugin %s has "
                    "%d device%s\n",
                    cfg->path ? cfg->path : "the configuration",
                    (int)cfg->devices[i], p->name, (int)p->device_count,
                    p->device_count == 1 ? "" : "s");
            return -1;
        }
    return 0;
}

static int write_outputs(struct cf_run_info *ri)
{
    char err[512];
    int rc = 0;

    if (ri->opt->junit_path &&
        cf_write_junit(ri->opt->junit_path, ri, err, sizeof(err))) {
        fprintf(stderr, "keel conform: %s\n", err);
        rc = -1;
    }
    if (ri->opt->report_path &&
        cf_write_report(ri->opt->report_path, ri, err, sizeof(err))) {
        fprintf(stderr, "keel conform: %s\n", err);
        rc = -1;
    }
    if (ri->opt->html_path) {
        /* The page is drawn from the same document --report writes. */
        json_t *root = cf_build_report(ri, err, sizeof(err));

        if (!root || keel_report_cert_html(ri->opt->html_path, root, NULL, 0,
                                           10, err, sizeof(err))) {
            fprintf(stderr, "keel conform: %s: %s\n", ri->opt->html_path,
                    err);
            rc = -1;
        }
        json_decref(root);
    }
    return rc;
}

static int conform_main(struct cf_options *o, struct cf_config *cfg)
{
    struct cf_probe *probe = calloc(1, sizeof(*probe));
    struct cf_run_info ri = {.opt = o, .cfg = cfg, .probe = probe};
    int pass, fail, skip, known, notrun, rc;
    char why[CF_MSG_MAX] = "";
    double t0 = cf_now();

    if (!probe)
        return KEEL_EXIT_ERROR;
    ri.started = (double)time(NULL);
    rc = cf_probe_run(cfg, o, probe, why, sizeof(why));
    if (rc == -2) {
        fprintf(stderr, "keel conform: %s (see 'keel devices')\n", why);
        rc = KEEL_EXIT_USAGE;
        goto out;
    }
    if (rc) {
        /* Loading crashed or hung: the raw identity checks still run. */
        if (!o->plugin_is_path) {
            fprintf(stderr, "keel conform: %s\n", why);
            rc = KEEL_EXIT_ERROR;
            goto out;
        }
        memset(probe, 0, sizeof(*probe));
        snprintf(probe->path, sizeof(probe->path), "%s", o->plugin_arg);
        snprintf(probe->failed_check, sizeof(probe->failed_check), "load");
        snprintf(probe->reason, sizeof(probe->reason), "%s", why);
    }
    if (cf_sha256_file(probe->path, ri.sha256))
        snprintf(ri.sha256, sizeof(ri.sha256), "unavailable");
    if (probe->loaded && check_device_selection(cfg, probe)) {
        rc = KEEL_EXIT_USAGE;
        goto out;
    }
    print_header(stdout, o, cfg, probe, ri.sha256);
    if (probe->loaded && probe->device_count == 0) {
        fprintf(stdout, "No device: plugin %s loaded but found no device%s%s\n",
                probe->name, probe->reason[0] ? ": " : "", probe->reason);
        ri.seconds = cf_now() - t0;
        write_outputs(&ri);
        rc = KEEL_EXIT_NO_DEVICE;
        goto out;
    }
    apply_known(cfg, probe);
    cf_run_suites(cfg, o, probe, stdout);
    ri.seconds = cf_now() - t0;
    cf_count(&pass, &fail, &skip, &known, &notrun);
    fail += cf_count_suite_failures();
    if (fail + notrun == 0 && o->nfilters == 0 && probe->loaded)
        ri.certified = cf_level_name(o->level);
    cf_print_summary(stdout, &ri);
    rc = write_outputs(&ri) ? KEEL_EXIT_ERROR
         : fail + notrun   ? KEEL_EXIT_ERROR
                           : KEEL_EXIT_OK;
out:
    free(probe);
    return rc;
}

static int cmd_conform_run(int argc, char **argv)
{
    struct cf_options o = {.level = CF_LEVEL_FULL, .jobs = 1};
    struct cf_config cfg;
    char err[1024];
    int rc;

    cf_config_defaults(&cfg);
    rc = parse_args(argc, argv, &o);
    if (rc)
        goto out;
    if (o.config_path && cf_config_load(&cfg, o.config_path, err,
                                        sizeof(err))) {
        fprintf(stderr, "keel conform: configuration error: %s\n", err);
        rc = KEEL_EXIT_USAGE;
        goto out;
    }
    if (cf_registry_build()) {
        fprintf(stderr, "keel conform: cannot build the test list (out of "
                        "memory or CUnit failed)\n");
        rc = KEEL_EXIT_ERROR;
        goto out_registry;
    }
    cf_registry_select(o.level, o.filters, o.nfilters);
    if (o.list) {
        list_tests(stdout);
        rc = KEEL_EXIT_OK;
        goto out_registry;
    }
    if (!o.plugin_arg) {
        rc = usage("--plugin PATH_OR_NAME is required%s", "");
        goto out_registry;
    }
    o.plugin_is_path = looks_like_path(o.plugin_arg);
    if (o.plugin_is_path && access(o.plugin_arg, R_OK) != 0) {
        rc = usage("cannot read plugin file '%s'", o.plugin_arg);
        goto out_registry;
    }
    rc = conform_main(&o, &cfg);
out_registry:
    cf_registry_free();
out:
    cf_config_free(&cfg);
    free(o.filters);
    return rc;
}

const keel_cli_command keel_cmd_conform = {
    .name = "conform",
    .synopsis = "--plugin PATH_OR_NAME [--config FILE] "
                "[--level smoke|full|stress] [--filter GLOB]... [--list] "
                "[--junit FILE] [--report FILE] [--html FILE] [--jobs N] "
                "[--also-run-known-failures]",
    .summary = "certify a device plugin against the ABI (conformance suite)",
    .help =
        "Run the conformance suite against one plugin: its ABI identity and\n"
        "tables, devices, memory, streams and events, every catalog kernel\n"
        "it provides (against the CPU plugin in float64), collectives,\n"
        "concurrency, an end-to-end training run and, at stress level, long\n"
        "runs. Each suite runs in a child process: a crash or hang fails\n"
        "the test that caused it and the run goes on. See docs/certify.md.\n"
        "\n"
        "options:\n"
        "  --plugin P    the plugin: a .so path, or a loaded plugin's name\n"
        "  --config F    YAML configuration (see keel-conform.example.yaml)\n"
        "  --level L     smoke, full (default) or stress\n"
        "  --filter G    run only tests whose id matches the glob G\n"
        "                (repeatable), e.g. 'memory/*' or '*float16'\n"
        "  --list        list the selected tests and exit\n"
        "  --junit F     write JUnit XML for CI systems\n"
        "  --report F    write the certification report (JSON)\n"
        "  --html F      write the certification page (self-contained\n"
        "                HTML, as `keel report` draws it)\n"
        "  --jobs N      run N suites at once (default 1)\n"
        "  --also-run-known-failures\n"
        "                run tests declared as known failures too\n"
        "  -v, --verbose print every test's result\n"
        "  -h, --help    show this help\n"
        "\n"
        "exit status: 0 all tests passed, 1 a test failed,\n"
        "             2 bad usage or configuration, 3 no device found\n",
    .run = cmd_conform_run,
};
