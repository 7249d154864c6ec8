/*
 * keel — reading Google Benchmark JSON reports (keel bench's output), for
 * `keel bench compare` and `keel report`.
 *
 * A report is reduced to one entry per benchmark (matched by run_name, in
 * registration order): its median aggregate when the run had
 * repetitions, else its iteration runs (whose median is taken), or the
 * error of a failed run. The figure compared is the first of GFLOP/s,
 * busbw_GB/s, algbw_GB/s, GB/s, samples/s with a non-zero value in the
 * baseline (higher is better), else real_time in ns (lower is better).
 */
#ifndef KEEL_CLI_BENCHJSON_H
#define KEEL_CLI_BENCHJSON_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#define KBJ_MAX_RUNS 64

struct kbj_entry {
    const char *name;   /* run_name, borrowed from the JSON */
    long long order;    /* family_index: registration order */
    json_t *pick;       /* the entry compared (median aggregate or a run) */
    json_t *runs[KBJ_MAX_RUNS]; /* iteration entries, without aggregates */
    int nruns;
    const char *error;  /* error_message of a failed run, or NULL */
};

struct kbj_report {
    const char *path;
    json_t *root;
    struct kbj_entry *e;
    size_t n;
};

/** Read one report. Returns 0, or -1 with a message naming the file in
 *  err. kbj_free must be called either way. */
int kbj_load(const char *path, struct kbj_report *r, char *err, size_t errsz);
/** The same from a document already parsed (r takes root). */
int kbj_take(const char *path, json_t *root, struct kbj_report *r, char *err,
             size_t errsz);
void kbj_free(struct kbj_report *r);
struct kbj_entry *kbj_find(const struct kbj_report *r, const char *name);
/** Value of `key` ("real_time" in ns), the median over runs when the
 *  report has no aggregate; NAN when absent. */
double kbj_metric(const struct kbj_entry *e, const char *key);
/** The figure compared between a baseline entry and others (n of them;
 *  NULL ones are ignored): a rate every one of them reports, when the
 *  baseline's is non-zero, else "real_time". */
const char *kbj_choose_key(const struct kbj_entry *base,
                           const struct kbj_entry *const *others, size_t n,
                           bool *higher_better);
/** A string of the report's "context" object, or NULL. */
const char *kbj_context(const struct kbj_report *r, const char *key);
/** "plugin VERSION on DEVICE" or the file name: a short label. */
void kbj_label(const struct kbj_report *r, char *buf, size_t size);
/** The unit a chart shows for `key`: "GFLOP/s", "GB/s", "samples/s" or
 *  "ns" (real_time). */
const char *kbj_unit(const char *key);

#endif /* KEEL_CLI_BENCHJSON_H */
