/*
 * keel report — self-contained HTML pages from keel's JSON outputs.
 *
 *   report_cert.c   the certification page: a `keel conform` report
 *                   (JSON, format 1), plus bench charts when bench
 *                   reports are given
 *   report_bench.c  bar charts of Google Benchmark reports (keel bench)
 *                   across runs or plugins, with ratios and regressions
 *   html.c          the page writer: escaping, the one inline style sheet,
 *                   SVG drawing helpers, atomic write (FILE.tmp, fsync,
 *                   rename)
 *
 * Pages need nothing outside themselves: no script, no font, no image
 * file, no network; charts are inline SVG drawn here. Every number a page
 * shows is read from the JSON it was given. Summary figures carry ids
 * (sum-total, sum-passed, ...) so that tests can check them against the
 * JSON in a real browser.
 */
#ifndef KEEL_CLI_REPORT_H
#define KEEL_CLI_REPORT_H

#include <stddef.h>

#include <jansson.h>

#include "benchjson.h"

/* Bench reports one page or command takes at most. */
#define KEEL_REPORT_MAX_RUNS 16

/** Write the certification page of `cert` (a parsed certification
 *  report) to `path`, with charts of the bench reports when nbench > 0.
 *  Returns 0, or -1 with the reason in err (the file is not touched). */
int keel_report_cert_html(const char *path, json_t *cert,
                          const struct kbj_report *bench, size_t nbench,
                          double threshold, char *err, size_t errsz);

/** Write a page of bar charts of nbench >= 1 bench reports, the first
 *  being the baseline of ratios; a benchmark slower than the baseline by
 *  more than threshold percent (or failing where it ran) is highlighted
 *  as a regression. Returns 0, or -1 with the reason in err. */
int keel_report_bench_html(const char *path, const struct kbj_report *bench,
                           size_t nbench, double threshold, char *err,
                           size_t errsz);

/* Shared by the two pages (report_bench.c). */
struct hw;
/** The bench charts, as sections of an open page; returns the number of
 *  regressions drawn. */
int kr_bench_charts(struct hw *w, const struct kbj_report *bench,
                    size_t nbench, double threshold);

#endif /* KEEL_CLI_REPORT_H */
