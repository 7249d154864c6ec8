/*
 * keel bench compare — Google Benchmark JSON reports side by side.
 *
 *   keel bench compare A.json B.json [C.json ...] [--threshold PCT]
 *                      [--html FILE]
 *
 * With more than two reports each later one is compared with A in turn.
 * --html also writes one self-contained page of bar charts of every
 * benchmark across the reports (report/report_bench.c).
 *
 * A is the baseline, B the candidate: one plugin over time, or two plugins
 * run over the same benchmark set. Benchmarks are matched by run_name.
 * For each one the figure compared is the first of GFLOP/s, busbw_GB/s,
 * algbw_GB/s, GB/s, samples/s that A reports with a non-zero value
 * (higher is better), else real_time (lower is better, in ns). With
 * repetitions the median aggregate is used, or the median of the
 * repetitions when the report has no aggregates.
 *
 * "speed" is B relative to A with higher meaning B is better (B/A for a
 * rate, A/B for a time). A benchmark whose speed is below 1 - PCT/100 is a
 * regression, and so is one that ran in A but failed in B. Exit status: 0
 * no regression, 1 at least one regression (or a file that cannot be
 * read), 2 bad usage.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "benchjson.h"
#include "report.h"
#include "cli.h"
#include "kb.h"

extern const keel_cli_command keel_cmd_bench;

static void print_context(const char *label, const struct kbj_report *r)
{
    json_t *c = json_object_get(r->root, "context");
    const char *plugin = json_string_value(json_object_get(c, "keel_plugin"));
    const char *pver =
        json_string_value(json_object_get(c, "keel_plugin_version"));
    const char *dev = json_string_value(json_object_get(c, "keel_device"));
    const char *dname =
        json_string_value(json_object_get(c, "keel_device_name"));
    const char *date = json_string_value(json_object_get(c, "date"));
    const char *host = json_string_value(json_object_get(c, "host_name"));

    printf("%s: %s\n   ", label, r->path);
    if (plugin)
        printf(" plugin %s %s on %s (%s),", plugin, pver ? pver : "",
               dev ? dev : "?", dname ? dname : "?");
    printf(" host %s, %s\n", host ? host : "?", date ? date : "?");
}

static void format_value(double v, char *buf, size_t size)
{
    if (isnan(v))
        snprintf(buf, size, "-");
    else if (fabs(v) >= 1e6 || (v != 0 && fabs(v) < 1e-2))
        snprintf(buf, size, "%.3e", v);
    else
        snprintf(buf, size, "%.3f", v);
}

static int compare(struct kbj_report *a, struct kbj_report *b,
                   double threshold)
{
    int regressions = 0, improved = 0, compared = 0, only = 0;
    size_t width = 9;

    for (size_t i = 0; i < a->n; i++)
        width = strlen(a->e[i].name) > width ? strlen(a->e[i].name) : width;
    print_context("A", a);
    print_context("B", b);
    printf("\n%-*s  %-10s  %14s  %14s  %8s\n", (int)width, "benchmark",
           "metric", "A", "B", "speed B/A");
    for (size_t i = 0; i < a->n; i++) {
        struct kbj_entry *ea = &a->e[i], *eb = kbj_find(b, ea->name);
        char va[32], vb[32];
        const char *key, *verdict = "";
        bool hb;
        double x, y, speed;

        if (!eb) {
            printf("%-*s  only in A\n", (int)width, ea->name);
            only++;
            continue;
        }
        if (ea->error || eb->error) {
            bool broke = !ea->error && eb->error;
            printf("%-*s  %s%s%s\n", (int)width, ea->name,
                   broke ? "REGRESSION: fails in B: " : "",
                   ea->error ? "A: " : "", ea->error ? ea->error : eb->error);
            if (ea->error && eb->error)
                printf("%-*s  B: %s\n", (int)width, "", eb->error);
            regressions += broke;
            continue;
        }
        {
            const struct kbj_entry *other[1] = {eb};
            key = kbj_choose_key(ea, other, 1, &hb);
        }
        x = kbj_metric(ea, key);
        y = kbj_metric(eb, key);
        speed = hb ? y / x : x / y;
        if (!isnan(speed) && speed < 1.0 - threshold / 100.0) {
            verdict = "  REGRESSION";
            regressions++;
        } else if (!isnan(speed) && speed > 1.0 + threshold / 100.0) {
            verdict = "  improved";
            improved++;
        }
        compared++;
        format_value(x, va, sizeof(va));
        format_value(y, vb, sizeof(vb));
        printf("%-*s  %-10s  %14s  %14s  %8.3f%s\n", (int)width, ea->name,
               strcmp(key, "real_time") ? key : "time_ns", va, vb, speed,
               verdict);
    }
    for (size_t i = 0; i < b->n; i++)
        if (!kbj_find(a, b->e[i].name)) {
            printf("%-*s  only in B\n", (int)width, b->e[i].name);
            only++;
        }
    printf("\n%d compared, %d regression%s beyond %.1f%%, %d improved, %d "
           "unmatched\n",
           compared, regressions, regressions == 1 ? "" : "s", threshold,
           improved, only);
    return regressions ? KEEL_EXIT_ERROR : KEEL_EXIT_OK;
}

int kb_compare_main(int argc, char **argv)
{
    const char *files[KEEL_REPORT_MAX_RUNS];
    const char *html = NULL;
    double threshold = 10;
    struct kbj_report r[KEEL_REPORT_MAX_RUNS];
    char err[1024];
    int nfiles = 0, rc = KEEL_EXIT_OK;

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--threshold") || !strncmp(arg, "--threshold=", 12)) {
            const char *v = arg[11] == '=' ? arg + 12 : NULL;
            char *end;
            if (!v) {
                if (i + 1 >= argc)
                    return keel_cli_usage_error(&keel_cmd_bench,
                                                "--threshold needs a value");
                v = argv[++i];
            }
            errno = 0;
            threshold = strtod(v, &end);
            if (errno || end == v || *end || threshold < 0 ||
                threshold >= 100)
                return keel_cli_usage_error(
                    &keel_cmd_bench,
                    "--threshold: '%s' is not a percentage in [0, 100)", v);
        } else if (!strcmp(arg, "--html") || !strncmp(arg, "--html=", 7)) {
            html = arg[6] == '=' ? arg + 7 : NULL;
            if (!html) {
                if (i + 1 >= argc)
                    return keel_cli_usage_error(&keel_cmd_bench,
                                                "--html needs a file name");
                html = argv[++i];
            }
            if (!*html)
                return keel_cli_usage_error(&keel_cmd_bench,
                                            "--html needs a file name");
        } else if (arg[0] == '-' && arg[1]) {
            return keel_cli_usage_error(&keel_cmd_bench,
                                        "compare: unknown option '%s'", arg);
        } else if (nfiles < KEEL_REPORT_MAX_RUNS) {
            files[nfiles++] = arg;
        } else {
            return keel_cli_usage_error(&keel_cmd_bench,
                                        "compare takes at most %d files",
                                        KEEL_REPORT_MAX_RUNS);
        }
    }
    if (nfiles < 2)
        return keel_cli_usage_error(&keel_cmd_bench,
                                    "compare needs two JSON reports or more: "
                                    "compare A.json B.json [C.json ...]");
    memset(r, 0, sizeof(r));
    for (int i = 0; i < nfiles; i++)
        if (kbj_load(files[i], &r[i], err, sizeof(err)) != 0) {
            fprintf(stderr, "keel bench compare: %s\n", err);
            rc = KEEL_EXIT_ERROR;
            goto out;
        }
    /* Every later report against the first, as text. */
    for (int i = 1; i < nfiles; i++) {
        if (i > 1)
            printf("\n");
        if (compare(&r[0], &r[i], threshold) != KEEL_EXIT_OK)
            rc = KEEL_EXIT_ERROR;
    }
    if (html) {
        if (keel_report_bench_html(html, r, (size_t)nfiles, threshold, err,
                                   sizeof(err))) {
            fprintf(stderr, "keel bench compare: %s\n", err);
            rc = KEEL_EXIT_ERROR;
        } else {
            printf("\nwrote %s\n", html);
        }
    }
out:
    for (int i = 0; i < nfiles; i++)
        kbj_free(&r[i]);
    return rc;
}
