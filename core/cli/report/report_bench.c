/*
 * keel report — bar charts of bench reports across runs or plugins (see
 * report.h).
 *
 * Benchmarks are matched by name across the reports. Each group (the
 * name's first component: memory/, matmul/, e2e/, ...) gets one chart with
 * a row per benchmark and a bar per report, scaled to the row's largest
 * value, since figures differ by orders of magnitude between benchmarks.
 * The figure is the one `keel bench compare` uses (a rate, higher is
 * better, else the time, lower is better); each bar is labelled with its
 * value and, for later reports, its speed relative to the first (above 1
 * is faster). A later report slower than the first by more than the
 * threshold, or failing where the first ran, is a regression: its row is
 * tinted and its label says so.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "html.h"
#include "report.h"

struct brow {
    const char *name;
    const struct kbj_entry *e[KEEL_REPORT_MAX_RUNS];
    const char *key;
    bool higher_better;
    double v[KEEL_REPORT_MAX_RUNS];
    double speed[KEEL_REPORT_MAX_RUNS]; /* vs report 0; NAN when none */
    bool regress[KEEL_REPORT_MAX_RUNS];
    bool any_regress;
};

static size_t group_len(const char *name)
{
    const char *s = strchr(name, '/');

    return s ? (size_t)(s - name) : strlen(name);
}

static void fill_row(struct brow *r, const struct kbj_report *b, size_t n,
                     double threshold)
{
    const struct kbj_entry *base = NULL;

    for (size_t i = 0; i < n; i++) {
        r->e[i] = kbj_find(&b[i], r->name);
        if (!base && r->e[i] && !r->e[i]->error)
            base = r->e[i];
    }
    r->key = "real_time";
    r->higher_better = false;
    if (base)
        r->key = kbj_choose_key(base, r->e, n, &r->higher_better);
    for (size_t i = 0; i < n; i++) {
        r->v[i] = r->e[i] && !r->e[i]->error ? kbj_metric(r->e[i], r->key)
                                             : NAN;
        r->speed[i] = NAN;
        r->regress[i] = false;
    }
    for (size_t i = 1; i < n; i++) {
        double x = r->v[0], y = r->v[i];
        if (r->e[0] && !r->e[0]->error && r->e[i] && r->e[i]->error) {
            r->regress[i] = true; /* fails where the baseline ran */
        } else if (!isnan(x) && !isnan(y) && x > 0 && y > 0) {
            r->speed[i] = r->higher_better ? y / x : x / y;
            r->regress[i] = r->speed[i] < 1.0 - threshold / 100.0;
        }
        r->any_regress |= r->regress[i];
    }
}

static void draw_group(struct hw *w, const struct brow *rows, size_t nrows,
                       size_t n)
{
    const int label_w = 330, bars_w = 520, text_w = 250, bar_h = 13;
    const int row_h = (int)n * (bar_h + 2) + 10;
    const int width = label_w + bars_w + text_w, height = (int)nrows * row_h + 4;

    hw_raw(w,
           "<svg role=\"img\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d "
           "%d\">",
           width, height, width, height);
    for (size_t k = 0; k < nrows; k++) {
        const struct brow *r = &rows[k];
        int y0 = (int)k * row_h + 2;
        double max = 0;
        char nm[64];

        for (size_t i = 0; i < n; i++)
            if (!isnan(r->v[i]) && r->v[i] > max)
                max = r->v[i];
        if (r->any_regress)
            hw_raw(w,
                   "<rect x=\"0\" y=\"%d\" width=\"%d\" height=\"%d\" "
                   "fill=\"#fdecea\"/>",
                   y0 - 2, width, row_h - 2);
        else if (k % 2)
            hw_raw(w,
                   "<rect x=\"0\" y=\"%d\" width=\"%d\" height=\"%d\" "
                   "fill=\"#f6f7f9\"/>",
                   y0 - 2, width, row_h - 2);
        /* the label, shortened from the left when long */
        snprintf(nm, sizeof(nm), "%s",
                 strlen(r->name) > 52 ? r->name + strlen(r->name) - 52
                                      : r->name);
        hw_raw(w, "<text x=\"4\" y=\"%d\"><title>", y0 + bar_h);
        hw_text(w, r->name);
        hw_raw(w, "</title>%s", strlen(r->name) > 52 ? "&#8230;" : "");
        hw_text(w, nm);
        hw_raw(w, "</text><text x=\"4\" y=\"%d\" fill=\"#7a8496\">",
               y0 + 2 * bar_h + 1);
        hw_textf(w, "%s, %s", kbj_unit(r->key),
                 r->higher_better ? "higher is better" : "lower is better");
        hw_raw(w, "</text>");
        for (size_t i = 0; i < n; i++) {
            int y = y0 + (int)i * (bar_h + 2);
            double bw = max > 0 && !isnan(r->v[i]) ? bars_w * r->v[i] / max
                                                   : 0;
            char val[32], txt[160];

            hw_num(val, sizeof(val), r->v[i]);
            if (r->e[i] && r->e[i]->error)
                snprintf(txt, sizeof(txt), "error: %.100s", r->e[i]->error);
            else if (!r->e[i])
                snprintf(txt, sizeof(txt), "not in this report");
            else if (i > 0 && !isnan(r->speed[i]))
                snprintf(txt, sizeof(txt), "%s  %.3fx", val, r->speed[i]);
            else
                snprintf(txt, sizeof(txt), "%s", val);
            if (r->regress[i])
                strncat(txt, "  REGRESSION", sizeof(txt) - strlen(txt) - 1);
            hw_raw(w,
                   "<rect class=\"s%zu\" x=\"%d\" y=\"%d\" width=\"%.1f\" "
                   "height=\"%d\"><title>",
                   i % 8, label_w, y, bw, bar_h);
            hw_text(w, txt);
            hw_raw(w, "</title></rect><text x=\"%.1f\" y=\"%d\"%s>",
                   label_w + bw + 4, y + bar_h - 2,
                   r->regress[i] ? " fill=\"#c62828\" font-weight=\"bold\""
                                 : "");
            hw_text(w, txt);
            hw_raw(w, "</text>");
        }
    }
    hw_raw(w, "</svg>\n");
}

int kr_bench_charts(struct hw *w, const struct kbj_report *b, size_t n,
                    double threshold)
{
    size_t cap = 0, nrows = 0;
    struct brow *rows;
    int regressions = 0, improved = 0, compared = 0;

    if (n > KEEL_REPORT_MAX_RUNS)
        n = KEEL_REPORT_MAX_RUNS;
    for (size_t i = 0; i < n; i++)
        cap += b[i].n;
    rows = calloc(cap + 1, sizeof(*rows));
    hw_raw(w, "<h2 id=\"bench\">Benchmarks</h2>\n");
    if (!rows) {
        hw_raw(w, "<p>Out of memory.</p>\n");
        return 0;
    }
    /* every name, in the order of the first report that has it */
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < b[i].n; j++) {
            bool seen = false;
            for (size_t k = 0; k < nrows && !seen; k++)
                seen = !strcmp(rows[k].name, b[i].e[j].name);
            if (!seen)
                rows[nrows++].name = b[i].e[j].name;
        }
    /* groups made contiguous, in the order they first appear */
    for (size_t k = 0; k < nrows; k++) {
        size_t gl = group_len(rows[k].name), at = k + 1;
        for (size_t j = k + 1; j < nrows; j++)
            if (group_len(rows[j].name) == gl &&
                !strncmp(rows[j].name, rows[k].name, gl)) {
                const char *t = rows[j].name;
                memmove(&rows[at + 1], &rows[at], (j - at) * sizeof(*rows));
                rows[at++].name = t;
            }
    }
    for (size_t k = 0; k < nrows; k++) {
        fill_row(&rows[k], b, n, threshold);
        for (size_t i = 1; i < n; i++) {
            regressions += rows[k].regress[i];
            if (!isnan(rows[k].speed[i])) {
                compared++;
                improved += rows[k].speed[i] > 1.0 + threshold / 100.0;
            }
        }
    }
    hw_raw(w, "<table>\n<tr><th></th><th>report</th><th>host, date</th>"
              "<th class=\"n\">benchmarks</th></tr>\n");
    for (size_t i = 0; i < n; i++) {
        char label[512];
        kbj_label(&b[i], label, sizeof(label));
        hw_raw(w, "<tr><td><span class=\"sw s%zu\"></span>%s</td><td>",
               i % 8, i == 0 ? "baseline" : "");
        hw_text(w, label);
        hw_raw(w, "</td><td>");
        hw_textf(w, "%s, %s",
                 kbj_context(&b[i], "host_name")
                     ? kbj_context(&b[i], "host_name")
                     : "?",
                 kbj_context(&b[i], "date") ? kbj_context(&b[i], "date")
                                            : "?");
        hw_raw(w, "</td><td class=\"n\">%zu</td></tr>\n", b[i].n);
    }
    hw_raw(w, "</table>\n");
    if (n > 1)
        hw_raw(w,
               "<p><span id=\"bench-compared\">%d</span> comparisons with "
               "the baseline, <span id=\"bench-regressions\">%d</span> "
               "regression%s beyond %.1f%%, <span id=\"bench-improved\">%d"
               "</span> improved. Speed is relative to the baseline, above 1 "
               "faster (B/A for a rate, A/B for a time).</p>\n",
               compared, regressions, regressions == 1 ? "" : "s", threshold,
               improved);
    for (size_t k = 0; k < nrows;) {
        size_t gl = group_len(rows[k].name), end = k + 1;
        /* one chart per group, rows in first-seen order */
        while (end < nrows && group_len(rows[end].name) == gl &&
               !strncmp(rows[end].name, rows[k].name, gl))
            end++;
        hw_raw(w, "<h3>");
        hw_textf(w, "%.*s/", (int)gl, rows[k].name);
        hw_raw(w, "</h3>\n");
        draw_group(w, rows + k, end - k, n);
        k = end;
    }
    free(rows);
    return regressions;
}

int keel_report_bench_html(const char *path, const struct kbj_report *bench,
                           size_t nbench, double threshold, char *err,
                           size_t errsz)
{
    struct hw w;

    if (nbench == 0) {
        snprintf(err, errsz, "no bench report to draw");
        return -1;
    }
    if (hw_open(&w, path, "keel bench comparison", err, errsz))
        return -1;
    hw_raw(&w, "<h1>keel bench comparison</h1>\n<p class=\"sub\">%zu "
               "report%s; threshold %.1f%%.</p>\n",
           nbench, nbench > 1 ? "s" : "", threshold);
    kr_bench_charts(&w, bench, nbench, threshold);
    hw_raw(&w, "<footer id=\"end\">Written by keel bench compare from %zu "
               "Google Benchmark JSON report%s. Self-contained: no scripts, "
               "fonts or images are fetched.</footer>\n",
           nbench, nbench > 1 ? "s" : "");
    return hw_close(&w, err, errsz);
}
