/*
 * keel — reading Google Benchmark JSON reports (see benchjson.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchjson.h"

/* Figures of merit, in order of preference; all higher-is-better. */
static const char *const rate_keys[] = {"GFLOP/s", "busbw_GB/s",
                                        "algbw_GB/s", "GB/s", "samples/s"};
#define NRATES (sizeof(rate_keys) / sizeof(rate_keys[0]))

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
    const struct kbj_entry *x = a, *y = b;

    return (x->order > y->order) - (x->order < y->order);
}

struct kbj_entry *kbj_find(const struct kbj_report *r, const char *name)
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

static json_t *load_json(const char *path, char *err, size_t errsz)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL, *clean = NULL;
    size_t len = 0, cap = 0, got;
    json_error_t jerr;
    json_t *root = NULL;

    if (!f) {
        snprintf(err, errsz, "%s: %s", path, strerror(errno));
        return NULL;
    }
    do {
        if (len == cap) {
            char *p;
            if (cap > ((size_t)1 << 40)) {
                snprintf(err, errsz, "%s: too large for a report", path);
                goto out;
            }
            p = realloc(text, cap ? 2 * cap : 65536);
            if (!p) {
                snprintf(err, errsz, "%s: out of memory", path);
                goto out;
            }
            text = p;
            cap = cap ? 2 * cap : 65536;
        }
        got = fread(text + len, 1, cap - len, f);
        len += got;
    } while (got > 0);
    if (ferror(f)) {
        snprintf(err, errsz, "%s: read error", path);
        goto out;
    }
    clean = malloc(2 * len + 1);
    if (!clean) {
        snprintf(err, errsz, "%s: out of memory", path);
        goto out;
    }
    len = nan_to_null(text, len, clean);
    root = json_loadb(clean, len, 0, &jerr);
    if (!root)
        snprintf(err, errsz, "%s:%d: %s", path, jerr.line, jerr.text);
out:
    free(clean);
    free(text);
    fclose(f);
    return root;
}

int kbj_load(const char *path, struct kbj_report *r, char *err, size_t errsz)
{
    json_t *root = load_json(path, err, errsz);

    if (!root) {
        memset(r, 0, sizeof(*r));
        return -1;
    }
    return kbj_take(path, root, r, err, errsz);
}

int kbj_take(const char *path, json_t *root, struct kbj_report *r, char *err,
             size_t errsz)
{
    json_t *list, *b;
    size_t i;

    memset(r, 0, sizeof(*r));
    r->path = path;
    r->root = root;
    list = json_object_get(r->root, "benchmarks");
    if (!json_is_array(list)) {
        snprintf(err, errsz,
                 "%s: no \"benchmarks\" array (not a Google Benchmark JSON "
                 "report)",
                 path);
        return -1;
    }
    r->e = calloc(json_array_size(list) + 1, sizeof(*r->e));
    if (!r->e) {
        snprintf(err, errsz, "%s: out of memory", path);
        return -1;
    }
    json_array_foreach(list, i, b) {
        const char *name = json_string_value(json_object_get(b, "run_name"));
        const char *type = json_string_value(json_object_get(b, "run_type"));
        const char *agg =
            json_string_value(json_object_get(b, "aggregate_name"));
        struct kbj_entry *e;

        if (!name)
            name = json_string_value(json_object_get(b, "name"));
        if (!name)
            continue;
        e = kbj_find(r, name);
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
        } else if (e->nruns < KBJ_MAX_RUNS) {
            e->runs[e->nruns++] = b;
        }
    }
    /* Registration order, whatever order the runs were interleaved in. */
    qsort(r->e, r->n, sizeof(*r->e), cmp_order);
    return 0;
}

void kbj_free(struct kbj_report *r)
{
    free(r->e);
    json_decref(r->root);
    r->e = NULL;
    r->root = NULL;
    r->n = 0;
}

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

double kbj_metric(const struct kbj_entry *e, const char *key)
{
    double v[KBJ_MAX_RUNS];
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

const char *kbj_choose_key(const struct kbj_entry *base,
                           const struct kbj_entry *const *others, size_t n,
                           bool *higher_better)
{
    for (size_t k = 0; k < NRATES; k++) {
        double x = kbj_metric(base, rate_keys[k]);
        bool all = !isnan(x) && x > 0;

        for (size_t i = 0; all && i < n; i++)
            if (others[i] && isnan(kbj_metric(others[i], rate_keys[k])))
                all = false;
        if (all) {
            *higher_better = true;
            return rate_keys[k];
        }
    }
    *higher_better = false;
    return "real_time";
}

const char *kbj_context(const struct kbj_report *r, const char *key)
{
    return json_string_value(
        json_object_get(json_object_get(r->root, "context"), key));
}

void kbj_label(const struct kbj_report *r, char *buf, size_t size)
{
    const char *plugin = kbj_context(r, "keel_plugin");
    const char *ver = kbj_context(r, "keel_plugin_version");
    const char *dev = kbj_context(r, "keel_device");
    const char *base = strrchr(r->path, '/');

    base = base ? base + 1 : r->path;
    if (plugin)
        snprintf(buf, size, "%s %s on %s (%s)", plugin, ver ? ver : "",
                 dev ? dev : "?", base);
    else
        snprintf(buf, size, "%s", base);
}

const char *kbj_unit(const char *key)
{
    if (!strcmp(key, "real_time"))
        return "ns";
    if (strstr(key, "GB/s"))
        return "GB/s";
    return key;
}
