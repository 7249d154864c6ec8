/*
 * keel report — the certification page (see report.h).
 *
 * Input: a `keel conform` report, JSON format 1 (docs/certify.md). Every
 * field is read defensively: a report from an older keel (without op,
 * dtype or nmse per result) still renders, with what it has; a file that
 * is not a certification report is refused with a message naming what is
 * missing.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "html.h"
#include "report.h"

static const char *js(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static const char *js_or(json_t *o, const char *key, const char *dflt)
{
    const char *s = js(o, key);

    return s ? s : dflt;
}

static double jd(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);

    return json_is_number(v) ? json_number_value(v) : NAN;
}

static long long ji(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);

    return json_is_integer(v) ? (long long)json_integer_value(v) : 0;
}

/* ---- outcomes ------------------------------------------------------------ */

enum kr_state {
    KR_PASS,
    KR_FAIL,     /* fail and not_run */
    KR_SKIP,
    KR_KNOWN,    /* known_failure*    */
    KR_FALLBACK, /* kernel skipped as "not provided": runs on the CPU plugin */
    KR_NSTATES,
    KR_NONE = -1
};

static const char *const state_cls[KR_NSTATES] = {"pass", "fail", "skip",
                                                  "known", "fallback"};

static enum kr_state result_state(json_t *r)
{
    const char *res = js_or(r, "result", "");
    const char *msg = js_or(r, "message", "");

    if (!strcmp(res, "pass"))
        return KR_PASS;
    if (!strcmp(res, "skip"))
        return !strncmp(msg, "not provided", 12) ? KR_FALLBACK : KR_SKIP;
    if (!strncmp(res, "known_failure", 13))
        return KR_KNOWN;
    return KR_FAIL; /* fail, not_run, anything unknown */
}

/* Counts of one area: pass, fail, skip (fallbacks included), known. */
struct area {
    const char *name;
    int c[4];
    double ms;
};

static void count_into(int c[4], enum kr_state s)
{
    c[s == KR_FALLBACK ? KR_SKIP : s]++;
}

/* ---- the coverage grid ---------------------------------------------------- */

static const char *const dtype_order[] = {
    "float32", "float64", "float16", "bfloat16", "int8", "uint8",
    "int16",   "int32",   "int64",   "bool",     "complex64"};
#define NDT_ORDER (sizeof(dtype_order) / sizeof(dtype_order[0]))
#define MAX_DT 24
#define GRID_ROWS 40

struct cell {
    json_t *r;
    enum kr_state st;
};

struct op_row {
    const char *op;
    const char *suite;
    struct cell c[MAX_DT];
};

/* op and dtype of a kernel test: fields, or the id "suite/op.dtype". */
static bool kernel_of(json_t *r, char *op, size_t opsz, char *dt, size_t dtsz)
{
    const char *o = js(r, "op"), *d = js(r, "dtype"), *id, *slash, *dot;

    if (o && d) {
        snprintf(op, opsz, "%s", o);
        snprintf(dt, dtsz, "%s", d);
        return true;
    }
    id = js(r, "id");
    if (!id || strncmp(id, "kernels.", 8))
        return false;
    slash = strchr(id, '/');
    dot = slash ? strrchr(slash, '.') : NULL;
    if (!dot || (size_t)(dot - slash - 1) >= opsz)
        return false;
    snprintf(op, opsz, "%.*s", (int)(dot - slash - 1), slash + 1);
    snprintf(dt, dtsz, "%s", dot + 1);
    return true;
}

static int dtype_rank(const char *d)
{
    for (size_t i = 0; i < NDT_ORDER; i++)
        if (!strcmp(d, dtype_order[i]))
            return (int)i;
    return (int)NDT_ORDER;
}

struct grid {
    const char *dt[MAX_DT];
    int ndt;
    struct op_row *rows;
    int nrows;
    char (*names)[96]; /* op names, owned */
};

static int grid_dtype(struct grid *g, const char *d)
{
    for (int i = 0; i < g->ndt; i++)
        if (!strcmp(g->dt[i], d))
            return i;
    return -1;
}

static void grid_free(struct grid *g)
{
    free(g->rows);
    free(g->names);
}

static int grid_build(struct grid *g, json_t *results, char dtnames[][32])
{
    size_t i, n = json_array_size(results);
    json_t *r;

    memset(g, 0, sizeof(*g));
    g->rows = calloc(n + 1, sizeof(*g->rows));
    g->names = calloc(n + 1, sizeof(*g->names));
    if (!g->rows || !g->names)
        return -1;
    /* dtypes seen, in the canonical order */
    json_array_foreach(results, i, r) {
        char op[96], dt[32];
        if (!kernel_of(r, op, sizeof(op), dt, sizeof(dt)))
            continue;
        if (grid_dtype(g, dt) < 0 && g->ndt < MAX_DT) {
            snprintf(dtnames[g->ndt], 32, "%s", dt);
            g->dt[g->ndt] = dtnames[g->ndt];
            g->ndt++;
        }
    }
    for (int a = 1; a < g->ndt; a++)
        for (int b = a; b > 0 && dtype_rank(g->dt[b]) < dtype_rank(g->dt[b - 1]);
             b--) {
            const char *t = g->dt[b];
            g->dt[b] = g->dt[b - 1];
            g->dt[b - 1] = t;
        }
    json_array_foreach(results, i, r) {
        char op[96], dt[32];
        int row = -1, col;
        if (!kernel_of(r, op, sizeof(op), dt, sizeof(dt)))
            continue;
        col = grid_dtype(g, dt);
        if (col < 0)
            continue;
        for (int k = 0; k < g->nrows; k++)
            if (!strcmp(g->rows[k].op, op)) {
                row = k;
                break;
            }
        if (row < 0) {
            row = g->nrows++;
            snprintf(g->names[row], sizeof(g->names[row]), "%s", op);
            g->rows[row].op = g->names[row];
            g->rows[row].suite = js_or(r, "suite", "");
            for (int c = 0; c < MAX_DT; c++)
                g->rows[row].c[c].st = KR_NONE;
        }
        g->rows[row].c[col].r = r;
        g->rows[row].c[col].st = result_state(r);
    }
    return 0;
}

static void legend(struct hw *w)
{
    static const char *const text[KR_NSTATES] = {
        "provided, passed", "failed", "skipped",
        "known failure", "not provided: falls back to the CPU plugin"};

    hw_raw(w, "<p class=\"legend\">");
    for (int s = 0; s < KR_NSTATES; s++)
        hw_raw(w, "<span><span class=\"sw %s\"></span>%s</span>",
               state_cls[s], text[s]);
    hw_raw(w, "<span><span class=\"sw none\"></span>not tested (not in the "
              "catalog for that dtype, or not at this level)</span></p>\n");
}

static void coverage_section(struct hw *w, json_t *results)
{
    struct grid g;
    char dtnames[MAX_DT][32];
    int tot[KR_NSTATES] = {0}, cells = 0;
    const char *suite = NULL;

    hw_raw(w, "<h2 id=\"coverage\">Kernel coverage: op &times; dtype</h2>\n");
    if (grid_build(&g, results, dtnames)) {
        hw_raw(w, "<p>Out of memory while building the grid.</p>\n");
        grid_free(&g);
        return;
    }
    if (g.nrows == 0) {
        hw_raw(w, "<p>No kernel test in this report.</p>\n");
        grid_free(&g);
        return;
    }
    for (int k = 0; k < g.nrows; k++)
        for (int c = 0; c < g.ndt; c++)
            if (g.rows[k].c[c].st != KR_NONE) {
                tot[g.rows[k].c[c].st]++;
                cells++;
            }
    hw_raw(w, "<p>%d (op, dtype) kernel tests over %d ops: "
              "<span id=\"cov-pass\">%d</span> provided and passed, "
              "<span id=\"cov-fail\">%d</span> failed, "
              "<span id=\"cov-fallback\">%d</span> not provided (CPU "
              "fallback), %d skipped, %d known failures. Hover a cell for "
              "its test id and message.</p>\n",
           cells, g.nrows, tot[KR_PASS], tot[KR_FAIL], tot[KR_FALLBACK],
           tot[KR_SKIP], tot[KR_KNOWN]);
    legend(w);
    /* One table per area, side by side; long areas split into columns of
     * at most GRID_ROWS ops. */
    hw_raw(w, "<div class=\"grids\">\n");
    for (int k = 0, in_col = 0; k < g.nrows; k++) {
        const struct op_row *row = &g.rows[k];
        if (!suite || strcmp(suite, row->suite) || in_col == GRID_ROWS) {
            bool cont = suite && !strcmp(suite, row->suite);
            if (suite)
                hw_raw(w, "</table>\n");
            suite = row->suite;
            in_col = 0;
            hw_raw(w, "<table class=\"grid\">\n<caption>");
            hw_text(w, suite);
            hw_raw(w, "%s</caption><tr><th></th>", cont ? " (cont.)" : "");
            for (int c = 0; c < g.ndt; c++) {
                hw_raw(w, "<th class=\"dt\">");
                hw_text(w, g.dt[c]);
                hw_raw(w, "</th>");
            }
            hw_raw(w, "</tr>\n");
        }
        in_col++;
        hw_raw(w, "<tr><th class=\"op\">");
        hw_text(w, row->op);
        hw_raw(w, "</th>");
        for (int c = 0; c < g.ndt; c++) {
            const struct cell *cl = &row->c[c];
            if (cl->st == KR_NONE) {
                hw_raw(w, "<td class=\"none\"></td>");
                continue;
            }
            hw_raw(w, "<td class=\"%s\" title=\"", state_cls[cl->st]);
            hw_text(w, js_or(cl->r, "id", ""));
            hw_raw(w, ": ");
            hw_text(w, js_or(cl->r, "result", ""));
            if (*js_or(cl->r, "message", "")) {
                hw_raw(w, " &#8212; ");
                hw_text(w, js(cl->r, "message"));
            }
            hw_raw(w, "\">%s</td>", cl->st == KR_FAIL ? "&#215;" : "");
        }
        hw_raw(w, "</tr>\n");
    }
    hw_raw(w, "</table>\n</div>\n");
    grid_free(&g);
}

/* ---- NMSE ----------------------------------------------------------------- */

struct acc {
    json_t *r;
    double nmse, tol, margin; /* margin: log10(nmse / tol) */
};

static int by_margin(const void *a, const void *b)
{
    const struct acc *x = a, *y = b;

    return (x->margin < y->margin) - (x->margin > y->margin);
}

/* Bins of log10(NMSE / tolerance). */
#define NBINS 9
static const char *const bin_name[NBINS] = {
    "exact (0)", "< -12", "-12..-10", "-10..-8", "-8..-6",
    "-6..-4",    "-4..-2", "-2..0",   "> 0: over the bound"};

static int bin_of(const struct acc *a)
{
    if (a->nmse == 0)
        return 0;
    if (!(a->margin <= 0))
        return NBINS - 1;
    if (a->margin < -12)
        return 1;
    return 2 + (int)floor((a->margin + 12) / 2 > 5 ? 5 : (a->margin + 12) / 2);
}

/* A bar on a log axis from 1e-16 to 1e+2 of the tolerance. */
static void margin_bar(struct hw *w, const struct acc *a)
{
    const double lo = -16, hi = 2, width = 180;
    double m = a->nmse == 0 ? lo : a->margin;
    double x, x1 = width * (0 - lo) / (hi - lo);

    if (isnan(m) || m > hi)
        m = hi;
    if (m < lo)
        m = lo;
    x = width * (m - lo) / (hi - lo);
    hw_raw(w,
           "<svg width=\"%.0f\" height=\"12\" viewBox=\"0 0 %.0f 12\">"
           "<rect class=\"%s\" x=\"0\" y=\"2\" width=\"%.1f\" height=\"8\"/>"
           "<line class=\"tol\" x1=\"%.1f\" y1=\"0\" x2=\"%.1f\" y2=\"12\"/>"
           "</svg>",
           width, width, a->margin > 0 || isnan(a->margin) ? "fail" : "pass",
           x < 1 ? 1 : x, x1, x1);
}

static void nmse_section(struct hw *w, json_t *results)
{
    size_t i, n = json_array_size(results), k = 0;
    struct acc *a = calloc(n + 1, sizeof(*a));
    int bins[NBINS] = {0}, maxbin = 1;
    json_t *r;

    hw_raw(w, "<h2 id=\"accuracy\">Numerical accuracy: NMSE against the "
              "bound</h2>\n");
    if (!a) {
        hw_raw(w, "<p>Out of memory.</p>\n");
        return;
    }
    json_array_foreach(results, i, r) {
        json_t *v = json_object_get(r, "nmse");
        if (!v)
            continue;
        a[k].r = r;
        a[k].nmse = json_is_number(v) ? json_number_value(v) : INFINITY;
        a[k].tol = jd(r, "tolerance");
        a[k].margin = a[k].nmse == 0 ? -INFINITY
                      : a[k].tol > 0 ? log10(a[k].nmse / a[k].tol)
                                     : INFINITY;
        bins[bin_of(&a[k])]++;
        k++;
    }
    if (k == 0) {
        hw_raw(w, "<p>This report carries no NMSE figures (kernel tests of "
                  "float dtypes record them; reports of older keel versions "
                  "do not).</p>\n");
        free(a);
        return;
    }
    for (int b = 0; b < NBINS; b++)
        maxbin = bins[b] > maxbin ? bins[b] : maxbin;
    hw_raw(w, "<p><span id=\"nmse-count\">%zu</span> float kernel tests "
              "compared their outputs with the CPU plugin's float64 "
              "reference. Each figure is the test's worst output: NMSE = "
              "&#931;(got &#8722; ref)&#178; / &#931;ref&#178;, bounded per "
              "dtype by the configuration. The margin is log10(NMSE / "
              "bound): below 0 passes, and every step of &#8722;1 is ten "
              "times further inside the bound.</p>\n",
           k);
    /* histogram */
    {
        const int bw = 96, gap = 8, h = 150, top = 16, base = top + h;
        int width = NBINS * (bw + gap) + 40;
        hw_raw(w,
               "<svg role=\"img\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d "
               "%d\"><title>Tests by margin log10(NMSE / bound)</title>",
               width, base + 36, width, base + 36);
        hw_raw(w, "<line class=\"axis\" x1=\"0\" y1=\"%d\" x2=\"%d\" "
                  "y2=\"%d\"/>",
               base, width, base);
        for (int b = 0; b < NBINS; b++) {
            double bh = (double)h * bins[b] / maxbin;
            int x = b * (bw + gap);
            hw_raw(w,
                   "<rect class=\"%s\" x=\"%d\" y=\"%.1f\" width=\"%d\" "
                   "height=\"%.1f\"><title>",
                   b == NBINS - 1 ? "fail" : "pass", x, base - bh, bw, bh);
            hw_textf(w, "%s: %d", bin_name[b], bins[b]);
            hw_raw(w, "</title></rect><text x=\"%d\" y=\"%.1f\" "
                      "text-anchor=\"middle\">%d</text>",
                   x + bw / 2, base - bh - 4, bins[b]);
            hw_raw(w, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">",
                   x + bw / 2, base + 16);
            hw_text(w, bin_name[b]);
            hw_raw(w, "</text>");
        }
        hw_raw(w, "<text x=\"0\" y=\"%d\">margin log10(NMSE / bound)</text>"
                  "</svg>\n",
               base + 32);
    }
    qsort(a, k, sizeof(*a), by_margin);
    hw_raw(w, "<details%s><summary>Every test, closest to its bound first "
              "(%zu)</summary>\n<table>\n<tr><th>test</th><th class=\"n\">"
              "NMSE</th><th class=\"n\">bound</th><th class=\"n\">margin"
              "</th><th>log scale, 1e-16 &#8230; 1e+2 of the bound (red "
              "line: the bound)</th></tr>\n",
           bins[NBINS - 1] ? " open" : "", k);
    for (size_t j = 0; j < k; j++) {
        char nb[32], tb[32], mb[32];
        hw_num(nb, sizeof(nb), a[j].nmse);
        hw_num(tb, sizeof(tb), a[j].tol);
        if (a[j].nmse == 0)
            snprintf(mb, sizeof(mb), "exact");
        else
            snprintf(mb, sizeof(mb), "%.1f", a[j].margin);
        hw_raw(w, "<tr><td class=\"mono\">");
        hw_text(w, js_or(a[j].r, "id", "?"));
        hw_raw(w, "</td><td class=\"n\">%s</td><td class=\"n\">%s</td>"
                  "<td class=\"n\">%s</td><td>",
               nb, tb, mb);
        margin_bar(w, &a[j]);
        hw_raw(w, "</td></tr>\n");
    }
    hw_raw(w, "</table>\n</details>\n");
    free(a);
}

/* ---- the page --------------------------------------------------------------- */

static void kv_row(struct hw *w, const char *k, const char *v, const char *id)
{
    hw_raw(w, "<tr><th>%s</th><td", k);
    if (id)
        hw_raw(w, " id=\"%s\"", id);
    hw_raw(w, ">");
    hw_text(w, v ? v : "-");
    hw_raw(w, "</td></tr>\n");
}

static void join_strings(json_t *arr, char *buf, size_t size)
{
    size_t i, n = 0;
    json_t *v;

    buf[0] = '\0';
    json_array_foreach(arr, i, v) {
        const char *s = json_string_value(v);
        int k;
        if (!s || n >= size)
            continue;
        k = snprintf(buf + n, size - n, "%s%s", n ? ", " : "", s);
        if (k < 0)
            break;
        n += (size_t)k;
    }
}

static void identity_section(struct hw *w, json_t *cert)
{
    json_t *p = json_object_get(cert, "plugin"),
           *tool = json_object_get(cert, "tool");
    char buf[256];

    hw_raw(w, "<h2 id=\"plugin\">Plugin</h2>\n<table class=\"kv\">\n");
    kv_row(w, "name", js(p, "name"), "plugin-name");
    kv_row(w, "version", js(p, "version"), "plugin-version");
    kv_row(w, "device ABI", js(p, "abi_version"), "plugin-abi");
    kv_row(w, "device type", js(p, "device_type"), NULL);
    kv_row(w, "description", js(p, "description"), NULL);
    kv_row(w, "file", js(p, "path"), NULL);
    kv_row(w, "sha256", js(p, "sha256"), "plugin-sha256");
    snprintf(buf, sizeof(buf), "%lld", ji(p, "device_count"));
    kv_row(w, "devices", buf, NULL);
    if (!json_is_true(json_object_get(p, "loaded"))) {
        snprintf(buf, sizeof(buf), "no: check %s: %s",
                 js_or(p, "failed_check", "?"), js_or(p, "reason", "?"));
        kv_row(w, "loaded", buf, NULL);
    }
    snprintf(buf, sizeof(buf), "%s %s, device ABI %s, op catalog version %lld",
             js_or(tool, "name", "keel conform"),
             js_or(tool, "keel_version", "?"), js_or(tool, "device_abi", "?"),
             ji(tool, "op_catalog_version"));
    kv_row(w, "certified by", buf, NULL);
    hw_raw(w, "</table>\n");
}

static void devices_section(struct hw *w, json_t *cert)
{
    json_t *devs = json_object_get(cert, "devices"), *d;
    size_t i;

    hw_raw(w, "<h2 id=\"devices\">Devices tested</h2>\n");
    if (!json_array_size(devs)) {
        hw_raw(w, "<p>None.</p>\n");
        return;
    }
    hw_raw(w, "<table>\n<tr><th>#</th><th>name</th><th>vendor</th>"
              "<th>arch</th><th>driver</th><th class=\"n\">memory</th>"
              "<th class=\"n\">units</th><th>dtypes</th><th>features</th>"
              "</tr>\n");
    json_array_foreach(devs, i, d) {
        char dt[512], ft[512];
        join_strings(json_object_get(d, "dtypes"), dt, sizeof(dt));
        join_strings(json_object_get(d, "features"), ft, sizeof(ft));
        hw_raw(w, "<tr><td>%lld</td><td>", ji(d, "index"));
        hw_text(w, js_or(d, "name", "-"));
        hw_raw(w, "</td><td>");
        hw_text(w, js_or(d, "vendor", "-"));
        hw_raw(w, "</td><td>");
        hw_text(w, js_or(d, "arch", "-"));
        hw_raw(w, "</td><td>");
        hw_text(w, js_or(d, "driver_version", "-"));
        hw_raw(w, "</td><td class=\"n\">%.1f GiB</td><td class=\"n\">%lld"
                  "</td><td>",
               jd(d, "total_memory") / 1073741824.0, ji(d, "compute_units"));
        hw_text(w, dt);
        hw_raw(w, "</td><td>");
        hw_text(w, ft);
        hw_raw(w, "</td></tr>\n");
    }
    hw_raw(w, "</table>\n");
}

static void areas_section(struct hw *w, json_t *results)
{
    struct area *ar = calloc(json_array_size(results) + 1, sizeof(*ar));
    size_t i;
    int na = 0;
    json_t *r;

    hw_raw(w, "<h2 id=\"areas\">Results by area</h2>\n");
    if (!ar) {
        hw_raw(w, "<p>Out of memory.</p>\n");
        return;
    }
    json_array_foreach(results, i, r) {
        const char *s = js_or(r, "suite", "?");
        int k;
        for (k = 0; k < na; k++)
            if (!strcmp(ar[k].name, s))
                break;
        if (k == na)
            ar[na++].name = s;
        count_into(ar[k].c, result_state(r));
        if (!isnan(jd(r, "time_ms")))
            ar[k].ms += jd(r, "time_ms");
    }
    hw_raw(w, "<table>\n<tr><th>area</th><th class=\"n\">tests</th>"
              "<th class=\"n\">passed</th><th class=\"n\">failed</th>"
              "<th class=\"n\">skipped</th><th class=\"n\">known</th>"
              "<th class=\"n\">time</th><th></th></tr>\n");
    for (int k = 0; k < na; k++) {
        struct hw_seg seg[4] = {{"passed", "pass", ar[k].c[KR_PASS]},
                                {"failed", "fail", ar[k].c[KR_FAIL]},
                                {"skipped", "skip", ar[k].c[KR_SKIP]},
                                {"known failures", "known",
                                 ar[k].c[KR_KNOWN]}};
        char t[32];
        if (ar[k].ms >= 1000)
            snprintf(t, sizeof(t), "%.2f s", ar[k].ms / 1e3);
        else
            snprintf(t, sizeof(t), "%.1f ms", ar[k].ms);
        hw_raw(w, "<tr><td>");
        hw_text(w, ar[k].name);
        hw_raw(w, "</td><td class=\"n\">%d</td><td class=\"n\">%d</td>"
                  "<td class=\"n\">%d</td><td class=\"n\">%d</td>"
                  "<td class=\"n\">%d</td><td class=\"n\">%s</td><td>",
               ar[k].c[0] + ar[k].c[1] + ar[k].c[2] + ar[k].c[3],
               ar[k].c[KR_PASS], ar[k].c[KR_FAIL], ar[k].c[KR_SKIP],
               ar[k].c[KR_KNOWN], t);
        hw_svg_mini(w, seg, 4, 220);
        hw_raw(w, "</td></tr>\n");
    }
    hw_raw(w, "</table>\n");
    free(ar);
}

/* Tests in one state, with their messages. */
static int list_tests(struct hw *w, json_t *results, enum kr_state want,
                      bool skips_too)
{
    size_t i;
    int n = 0;
    json_t *r;

    json_array_foreach(results, i, r) {
        enum kr_state s = result_state(r);
        if (s != want && !(skips_too && s == KR_FALLBACK))
            continue;
        if (!n++)
            hw_raw(w, "<table>\n<tr><th>test</th><th>result</th>"
                      "<th>message</th></tr>\n");
        hw_raw(w, "<tr><td class=\"mono\">");
        hw_text(w, js_or(r, "id", "?"));
        hw_raw(w, "</td><td>");
        hw_text(w, js_or(r, "result", "?"));
        hw_raw(w, "</td><td><pre>");
        hw_text(w, js_or(r, "message", ""));
        hw_raw(w, "</pre></td></tr>\n");
    }
    if (n)
        hw_raw(w, "</table>\n");
    return n;
}

static void config_section(struct hw *w, json_t *cert)
{
    json_t *cfg = json_object_get(cert, "config"), *tol, *v;
    const char *k;
    char buf[256];

    hw_raw(w, "<h2 id=\"config\">Configuration</h2>\n<table class=\"kv\">\n");
    kv_row(w, "file", js_or(cfg, "file", "(built-in defaults)"), NULL);
    snprintf(buf, sizeof(buf), "%lld", ji(cfg, "seed"));
    kv_row(w, "seed", buf, NULL);
    tol = json_object_get(cfg, "tolerances");
    json_object_foreach(tol, k, v) {
        char t[48];
        hw_num(t, sizeof(t), json_number_value(v));
        snprintf(buf, sizeof(buf), "NMSE bound, %s", k);
        hw_raw(w, "<tr><th>");
        hw_text(w, buf);
        hw_raw(w, "</th><td>%s</td></tr>\n", t);
    }
    hw_raw(w, "</table>\n");
}

int keel_report_cert_html(const char *path, json_t *cert,
                          const struct kbj_report *bench, size_t nbench,
                          double threshold, char *err, size_t errsz)
{
    json_t *results = json_object_get(cert, "results");
    json_t *summary = json_object_get(cert, "summary");
    json_t *certif = json_object_get(cert, "certification");
    json_t *plugin = json_object_get(cert, "plugin");
    json_t *sf = json_object_get(cert, "suite_failures");
    struct hw w;
    char title[256];
    bool certified;
    long long s_pass, s_fail, s_skip, s_known, s_total, s_sf;

    if (!json_is_object(cert) || ji(cert, "format") != 1 ||
        !json_is_array(results) || !json_is_object(summary) ||
        !json_is_object(plugin)) {
        snprintf(err, errsz,
                 "not a keel conform certification report (format 1 with "
                 "\"plugin\", \"summary\" and \"results\")");
        return -1;
    }
    certified = json_is_true(json_object_get(certif, "certified"));
    s_pass = ji(summary, "passed");
    s_fail = ji(summary, "failed");
    s_skip = ji(summary, "skipped");
    s_known = ji(summary, "known");
    s_total = ji(summary, "total");
    s_sf = ji(summary, "suite_failures");
    snprintf(title, sizeof(title), "keel certification: %s %s (%s level)",
             js_or(plugin, "name", "?"), js_or(plugin, "version", "?"),
             js_or(cert, "level", "?"));
    if (hw_open(&w, path, title, err, errsz))
        return -1;
    hw_raw(&w, "<h1>");
    hw_text(&w, title);
    hw_raw(&w, "</h1>\n<p class=\"sub\">Run ");
    hw_text(&w, js_or(cert, "started_at", "?"));
    hw_textf(&w, ", %.1f s", jd(cert, "duration_s"));
    if (json_array_size(json_object_get(cert, "filters")))
        hw_raw(&w, "; filtered run (a filtered run never certifies)");
    hw_raw(&w, "</p>\n<p><span id=\"verdict\" class=\"verdict %s\">",
           certified ? "ok" : "bad");
    if (certified)
        hw_textf(&w, "Certified at level %s",
                 js_or(certif, "level", "?"));
    else
        hw_raw(&w, "Not certified");
    hw_raw(&w, "</span></p>\n");

    hw_raw(&w, "<h2 id=\"summary\">Summary</h2>\n<table>\n<tr>"
               "<th class=\"n\">tests</th><th class=\"n\">passed</th>"
               "<th class=\"n\">failed</th><th class=\"n\">skipped</th>"
               "<th class=\"n\">known failures</th><th class=\"n\">suite "
               "failures</th></tr>\n<tr>"
               "<td class=\"n\" id=\"sum-total\">%lld</td>"
               "<td class=\"n\" id=\"sum-passed\">%lld</td>"
               "<td class=\"n\" id=\"sum-failed\">%lld</td>"
               "<td class=\"n\" id=\"sum-skipped\">%lld</td>"
               "<td class=\"n\" id=\"sum-known\">%lld</td>"
               "<td class=\"n\" id=\"sum-suite-failures\">%lld</td></tr>\n"
               "</table>\n",
           s_total, s_pass, s_fail, s_skip, s_known, s_sf);
    {
        struct hw_seg seg[4] = {{"passed", "pass", (double)s_pass},
                                {"failed", "fail", (double)s_fail},
                                {"skipped", "skip", (double)s_skip},
                                {"known failures", "known", (double)s_known}};
        hw_svg_stacked(&w, seg, 4, 900, "Tests by outcome");
    }
    if (json_array_size(sf)) {
        size_t i;
        json_t *f;
        hw_raw(&w, "<h3>Suites whose test process ended abnormally</h3>\n"
                   "<table>\n");
        json_array_foreach(sf, i, f) {
            hw_raw(&w, "<tr><td>");
            hw_text(&w, js_or(f, "suite", "?"));
            hw_raw(&w, "</td><td><pre>");
            hw_text(&w, js_or(f, "message", ""));
            hw_raw(&w, "</pre></td></tr>\n");
        }
        hw_raw(&w, "</table>\n");
    }
    hw_raw(&w, "<h2 id=\"failures\">Failures</h2>\n");
    if (!list_tests(&w, results, KR_FAIL, false))
        hw_raw(&w, "<p>None.</p>\n");
    identity_section(&w, cert);
    devices_section(&w, cert);
    areas_section(&w, results);
    coverage_section(&w, results);
    nmse_section(&w, results);
    hw_raw(&w, "<h2 id=\"known\">Known failures</h2>\n");
    if (!list_tests(&w, results, KR_KNOWN, false))
        hw_raw(&w, "<p>None declared, or none applied.</p>\n");
    hw_raw(&w, "<h2 id=\"skips\">Skipped tests</h2>\n<details><summary>"
               "Every skip with its reason</summary>\n");
    if (!list_tests(&w, results, KR_SKIP, true))
        hw_raw(&w, "<p>None.</p>\n");
    hw_raw(&w, "</details>\n");
    config_section(&w, cert);
    if (nbench)
        kr_bench_charts(&w, bench, nbench, threshold);
    hw_raw(&w, "<footer id=\"end\">Written by keel report from the "
               "certification JSON");
    if (nbench)
        hw_raw(&w, " and %zu bench report%s", nbench, nbench > 1 ? "s" : "");
    hw_raw(&w, ". Self-contained: no scripts, fonts or images are fetched."
               "</footer>\n");
    return hw_close(&w, err, errsz);
}
