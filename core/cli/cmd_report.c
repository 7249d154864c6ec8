/*
 * keel report — a certification report and bench reports as one HTML page.
 *
 *   keel report CERT.json [BENCH.json ...] -o PAGE.html [--threshold PCT]
 *   keel report BENCH.json [BENCH.json ...] -o PAGE.html
 *
 * Each input is recognised by its content: a `keel conform --report`
 * document (format 1) or a Google Benchmark JSON report (`keel bench
 * --format json`). At most one certification report per page.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "report/report.h"

static int cmd_report_run(int argc, char **argv)
{
    const char *out = NULL, *cert_path = NULL;
    const char *files[KEEL_REPORT_MAX_RUNS + 1];
    struct kbj_report bench[KEEL_REPORT_MAX_RUNS];
    json_t *cert = NULL;
    double threshold = 10;
    int nfiles = 0, nbench = 0, rc = KEEL_EXIT_ERROR;
    char err[1024];

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-o") || !strcmp(a, "--out")) {
            if (i + 1 >= argc || !*argv[i + 1])
                return keel_cli_usage_error(&keel_cmd_report,
                                            "%s needs a file name", a);
            out = argv[++i];
        } else if (!strcmp(a, "--threshold")) {
            char *end;
            if (i + 1 >= argc)
                return keel_cli_usage_error(&keel_cmd_report,
                                            "--threshold needs a value");
            errno = 0;
            threshold = strtod(argv[++i], &end);
            if (errno || end == argv[i] || *end || threshold < 0 ||
                threshold >= 100)
                return keel_cli_usage_error(
                    &keel_cmd_report,
                    "--threshold: '%s' is not a percentage in [0, 100)",
                    argv[i]);
        } else if (a[0] == '-' && a[1]) {
            return keel_cli_usage_error(&keel_cmd_report,
                                        "unknown option '%s'", a);
        } else if (nfiles <= KEEL_REPORT_MAX_RUNS) {
            files[nfiles++] = a;
        } else {
            return keel_cli_usage_error(&keel_cmd_report,
                                        "too many files (at most one "
                                        "certification and %d bench reports)",
                                        KEEL_REPORT_MAX_RUNS);
        }
    }
    if (!nfiles)
        return keel_cli_usage_error(&keel_cmd_report,
                                    "give a certification JSON and/or bench "
                                    "JSON reports");
    if (!out)
        return keel_cli_usage_error(&keel_cmd_report,
                                    "-o PAGE.html is required");
    memset(bench, 0, sizeof(bench));
    for (int i = 0; i < nfiles; i++) {
        json_error_t je;
        json_t *j = json_load_file(files[i], 0, &je);

        /* A certification report is plain JSON with "format"; anything
         * else is read as a bench report, whose reader also copes with
         * Google Benchmark's bare NaN. */
        if (j && json_is_object(j) && json_object_get(j, "format") &&
            json_object_get(j, "results")) {
            if (cert) {
                json_decref(j);
                fprintf(stderr,
                        "keel report: %s: a second certification report "
                        "(one per page; %s is the first)\n",
                        files[i], cert_path);
                goto done;
            }
            cert = j;
            cert_path = files[i];
            continue;
        }
        if (nbench >= KEEL_REPORT_MAX_RUNS) {
            json_decref(j);
            fprintf(stderr, "keel report: at most %d bench reports\n",
                    KEEL_REPORT_MAX_RUNS);
            goto done;
        }
        /* Parsed already, unless it holds Google Benchmark's bare NaN,
         * which only the bench reader accepts. */
        if (j ? kbj_take(files[i], j, &bench[nbench], err, sizeof(err))
              : kbj_load(files[i], &bench[nbench], err, sizeof(err))) {
            kbj_free(&bench[nbench]);
            fprintf(stderr,
                    "keel report: %s (neither a certification report nor a "
                    "bench report)\n",
                    err);
            goto done;
        }
        nbench++;
    }
    if (cert ? keel_report_cert_html(out, cert, bench, (size_t)nbench,
                                     threshold, err, sizeof(err))
             : keel_report_bench_html(out, bench, (size_t)nbench, threshold,
                                      err, sizeof(err))) {
        fprintf(stderr, "keel report: %s%s%s\n", cert_path ? cert_path : "",
                cert_path ? ": " : "", err);
        goto done;
    }
    printf("wrote %s\n", out);
    rc = KEEL_EXIT_OK;
done:
    for (int i = 0; i < nbench; i++)
        kbj_free(&bench[i]);
    json_decref(cert);
    return rc;
}

const keel_cli_command keel_cmd_report = {
    .name = "report",
    .synopsis = "[CERT.json] [BENCH.json ...] -o PAGE.html "
                "[--threshold PCT]",
    .summary = "an HTML page of a certification and bench results",
    .help =
        "Write one self-contained HTML page (inline SVG charts; no scripts,\n"
        "fonts or network) from a certification report (`keel conform\n"
        "--report`) and/or Google Benchmark JSON reports (`keel bench\n"
        "--format json --out`). The certification page shows the plugin's\n"
        "identity, the devices, the verdict, a summary per area, the op x\n"
        "dtype coverage grid (provided, CPU fallback, failed) with every\n"
        "failure's message, and each kernel test's NMSE against its bound.\n"
        "Bench reports add bar charts of every benchmark across the\n"
        "reports, with speed relative to the first; a report slower than\n"
        "the first by more than PCT percent (default 10) is highlighted.\n"
        "Files are recognised by their content. See docs/certify.md.\n"
        "\n"
        "options:\n"
        "  -o, --out F      the page to write (written to F.tmp, renamed)\n"
        "  --threshold PCT  regression threshold for bench charts\n"
        "  -h, --help       show this help\n"
        "\n"
        "exit status: 0 written, 1 an input could not be read or the page\n"
        "             not written, 2 bad usage\n",
    .run = cmd_report_run,
};
