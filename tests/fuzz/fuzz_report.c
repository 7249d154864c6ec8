/*
 * libFuzzer target: `keel report`'s readers and page writers
 * (core/cli/report/). The input is read both ways the command reads a
 * file: as a certification report (parsed JSON handed to the page writer)
 * and as a Google Benchmark report (kbj_load, then the chart page). Each
 * either writes a page or fails with a message; a failure without a
 * message aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz_common.h"
#include "report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The page: hw_open writes PATH.tmp and renames it over PATH, so it needs
 * a real folder; one file per process under TMPDIR (or /tmp). */
static const char *page_path(void)
{
    static char path[96];

    if (!path[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/keel-fuzz-page-%d.html",
                 tmp && *tmp && strlen(tmp) < 48 ? tmp : "/tmp",
                 (int)getpid());
    }
    return path;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *in = fuzz_write_input(data, size);
    const char *out = page_path();
    char err[1024];
    json_error_t je;
    json_t *root;
    struct kbj_report r;

    root = json_loadb((const char *)data, size, 0, &je);
    if (root) {
        err[0] = '\0';
        if (keel_report_cert_html(out, root, NULL, 0, 10, err, sizeof err) &&
            !err[0]) {
            fprintf(stderr, "certification page failed without a message\n");
            abort();
        }
        json_decref(root);
    }
    err[0] = '\0';
    if (kbj_load(in, &r, err, sizeof err) == 0) {
        err[0] = '\0';
        if (keel_report_bench_html(out, &r, 1, 10, err, sizeof err) &&
            !err[0]) {
            fprintf(stderr, "bench page failed without a message\n");
            abort();
        }
    } else if (!err[0]) {
        fprintf(stderr, "kbj_load failed without a message\n");
        abort();
    }
    kbj_free(&r);
    unlink(out);
    return 0;
}
