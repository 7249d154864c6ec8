/*
 * keel bench compare — two Google Benchmark JSON reports side by side.
 *
 *   keel bench compare A.json B.json [--threshold PCT]
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

#include "cli.h"
#include "kb.h"

extern const keel_cli_command keel_cmd_bench;

/* Figures of merit, in order of preference; all higher-is-better. */
static const char *const rate_keys[] = {"GFLOP/s", "busbw_GB/s",
                                        "algbw_GB/s", "GB/s", "samples/s"};
#define NRATES (sizeof(rate_keys) / sizeof(rate_keys[0]))

/* One benchmark of one report, reduced to what is compared. */
struct cmp_entry {
    const char *name;   /* run_name, borrowed from the JSON */
    long long order;    /* family_index: registration order */
    json_t *pick;       /* the entry compared (median aggregate or a run) */
    json_t *runs[64];   /* iteration entries, when there is no aggregate */
    int nruns;
    const char *error;  /* error_message of a failed run, or NULL */
};

struct cmp_report {
    const char *path;
    json_t *root;
    struct cmp_entry *e;
    size_t n;
};

static double time_to_ns(double v, const char *unit)
{
    if (!unit || !strcmp(unit, "ns"))
        return v;
    if (!strcmp(unit, "us"))
        return v * 1e3;
    if (!strcmp(unit, "ms"))
        return v * 1e6;
    if (!strcmp(unit, "s"))
        return v * 1e9;
    return v;
}

static int cmp_order(const void *a, const void *b)
{
    const struct cmp_entry *x = a, *y = b;

    return (x->order > y->order) - (x->order < y->order);
}

static struct cmp_entry *find(struct cmp_report *r, const char *name)
{
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->e[i].name, name))
            return &r->e[i];
    return NULL;
}

/*
 * Google Benchmark writes non-finite numbers as bare NaN / Infinity (a cv
 * of a counter whose mean is 0, for one), which is not JSON. Copy `t` to
 * `o` (room for 2 * n bytes) with every bare word outside strings and
 * numbers, other than true, false and null, replaced (with its sign) by
 * null. Returns the length written.
 */
static size_t nan_to_null(const char *t, size_t n, char *o)
{
    size_t i = 0, k = 0;
    bool in_str = false;

    while (i < n) {
        char c = t[i];
        if (in_str) {
            o[k++] = t[i++];
            if (c == '\\' && i < n)
                o[k++] = t[i++];
            else if (c == '"')
                in_str = false;
            continue;
        }
        if (c == '"') {
            in_str = true;
            o[k++] = t[i++];
            continue;
        }
        if ((c >= '0' && c <= '9') ||
            (c == '-' && i + 1 < n && t[i + 1] >= '0' && t[i + 1] <= '9')) {
            /* a number, exponent letters included */
            do
                o[k++] = t[i++];
            while (i < n && t[i] && strchr("0123456789+-.eE", t[i]));
            continue;
        }
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
            ((c == '-' || c == '+') && i + 1 < n &&
             ((t[i + 1] >= 'A' && t[i + 1] <= 'Z') ||
              (t[i + 1] >= 'a' && t[i + 1] <= 'z')))) {
            size_t j = i + (c == '-' || c == '+');
            while (j < n && ((t[j] >= 'A' && t[j] <= 'Z') ||
                             (t[j] >= 'a' && t[j] <= 'z')))
                j++;
            if ((j - i == 4 && (!strncmp(t + i, "true", 4) ||
                                !strncmp(t + i, "null", 4))) ||
                (j - i == 5 && !strncmp(t + i, "false", 5))) {
                memcpy(o + k, t + i, j - i);
                k += j - i;
            } else {
                memcpy(o + k, "null", 4);
                k += 4;
            }
            i = j;
            continue;
        }
        o[k++] = t[i++];
    }
    return k;
}

static json_t *load_json(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL, *clean = NULL;
    size_t len = 0, cap = 0, got;
    json_error_t err;
    json_t *root = NULL;

    if (!f) {
        fprintf(stderr, "keel bench compare: %s: %s\n", path,
                strerror(errno));
        return NULL;
    }
    do {
        if (len == cap) {
            char *p = realloc(text, cap ? 2 * cap : 65536);
            if (!p) {
                fprintf(stderr, "keel bench compare: out of memory\n");
                goto out;
            }
            text = p;
            cap = cap ? 2 * cap : 65536;
        }
        got = fread(text + len, 1, cap - len, f);
        len += got;
    } while (got > 0);
    if (ferror(f)) {
        fprintf(stderr, "keel bench compare: %s: read error\n", path);
        goto out;
    }
    clean = malloc(2 * len + 1);
    if (!clean) {
        fprintf(stderr, "keel bench compare: out of memory\n");
        goto out;
    }
    len = nan_to_null(text, len, clean);
    root = json_loadb(clean, len, 0, &err);
    if (!root)
        fprintf(stderr, "keel bench compare: %s:%d: %s\n", path, err.line,
                err.text);
out:
    free(clean);
    free(text);
    fclose(f);
    return root;
}

static int load_report(const char *path, struct cmp_report *r)
{
    json_t *list, *b;
    size_t i;

    memset(r, 0, sizeof(*r));
    r->path = path;
    r->root = load_json(path);
    if (!r->root)
        return -1;
    list = json_object_get(r->root, "benchmarks");
    if (!json_is_array(list)) {
        fprintf(stderr,
                "keel bench compare: %s: no \"benchmarks\" array (not a "
                "Google Benchmark JSON report)\n",
                path);
        return -1;
    }
    r->e = calloc(json_array_size(list) + 1, sizeof(*r->e));
    if (!r->e) {
        fprintf(stderr, "keel bench compare: out of memory\n");
        return -1;
    }
    json_array_foreach(list, i, b) {
        const char *name = json_string_value(json_object_get(b, "run_name"));
        const char *type = json_string_value(json_object_get(b, "run_type"));
        const char *agg =
            json_string_value(json_object_get(b, "aggregate_name"));
        struct cmp_entry *e;

        if (!name)
            name = json_string_value(json_object_get(b, "name"));
        if (!name)
            continue;
        e = find(r, name);
        if (!e) {
            json_t *fi = json_object_get(b, "family_index");
            json_t *pi = json_object_get(b, "per_family_instance_index");
            e = &r->e[r->n++];
            e->name = name;
            e->order = (long long)r->n;
            if (json_is_integer(fi))
                e->order = (long long)json_integer_value(fi) * 100000 +
                           (json_is_integer(pi) ? json_integer_value(pi) : 0);
        }
        if (json_is_true(json_object_get(b, "error_occurred"))) {
            e->error = json_string_value(json_object_get(b, "error_message"));
            if (!e->error)
                e->error = "error";
            continue;
        }
        if (type && !strcmp(type, "aggregate")) {
            if (agg && !strcmp(agg, "median"))
                e->pick = b;
        } else if (e->nruns < 64) {
            e->runs[e->nruns++] = b;
        }
    }
    /* Registration order, whatever order the runs were interleaved in. */
    qsort(r->e, r->n, sizeof(*r->e), cmp_order);
    return 0;
}

static void free_report(struct cmp_report *r)
{
    free(r->e);
    json_decref(r->root);
}

/* Value of `key` in entry e ("real_time" in ns), or NAN. With several runs
 * and no aggregate: their median. */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double value_of(json_t *b, const char *key)
{
    json_t *v = json_object_get(b, key);

    if (!json_is_number(v))
        return NAN;
    if (!strcmp(key, "real_time"))
        return time_to_ns(json_number_value(v),
                          json_string_value(json_object_get(b, "time_unit")));
    return json_number_value(v);
}

static double metric(const struct cmp_entry *e, const char *key)
{
    double v[64];
    int n = 0;

    if (e->pick)
        return value_of(e->pick, key);
    for (int i = 0; i < e->nruns; i++) {
        double x = value_of(e->runs[i], key);
        if (!isnan(x))
            v[n++] = x;
    }
    if (n == 0)
        return NAN;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The key compared for a benchmark present in both reports. */
static const char *choose_key(const struct cmp_entry *a,
                              const struct cmp_entry *b, bool *higher_better)
{
    for (size_t k = 0; k < NRATES; k++) {
        double x = metric(a, rate_keys[k]), y = metric(b, rate_keys[k]);
        if (!isnan(x) && x > 0 && !isnan(y)) {
            *higher_better = true;
            return rate_keys[k];
        }
    }
    *higher_better = false;
    return "real_time";
}

static void print_context(const char *label, const struct cmp_report *r)
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

static int compare(struct cmp_report *a, struct cmp_report *b,
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
        struct cmp_entry *ea = &a->e[i], *eb = find(b, ea->name);
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
        key = choose_key(ea, eb, &hb);
        x = metric(ea, key);
        y = metric(eb, key);
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
        if (!find(a, b->e[i].name)) {
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
    const char *files[2] = {NULL, NULL};
    double threshold = 10;
    struct cmp_report a, b;
    int nfiles = 0, rc;

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
        } else if (arg[0] == '-' && arg[1]) {
            return keel_cli_usage_error(&keel_cmd_bench,
                                        "compare: unknown option '%s'", arg);
        } else if (nfiles < 2) {
            files[nfiles++] = arg;
        } else {
            return keel_cli_usage_error(&keel_cmd_bench,
                                        "compare takes two files");
        }
    }
    if (nfiles != 2)
        return keel_cli_usage_error(&keel_cmd_bench,
                                    "compare needs two JSON reports: "
                                    "compare A.json B.json");
    if (load_report(files[0], &a) != 0) {
        free_report(&a);
        return KEEL_EXIT_ERROR;
    }
    if (load_report(files[1], &b) != 0) {
        free_report(&a);
        free_report(&b);
        return KEEL_EXIT_ERROR;
    }
    rc = compare(&a, &b, threshold);
    free_report(&a);
    free_report(&b);
    return rc;
}
