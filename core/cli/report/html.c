/*
 * keel report — the HTML page writer: escaping, the style sheet, SVG
 * helpers and the atomic write (see report.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "html.h"

/* One style sheet for every page. Colours of outcomes are classes, used
 * both by HTML cells (background) and SVG shapes (fill). */
static const char style[] =
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,"
    "'DejaVu Sans',sans-serif;color:#1d2330;margin:0;background:#f6f7f9}\n"
    "main{max-width:1180px;margin:0 auto;padding:20px 28px 48px;"
    "background:#fff;min-height:100vh}\n"
    "h1{font-size:24px;margin:8px 0 4px}h2{font-size:18px;margin:28px 0 8px;"
    "border-bottom:1px solid #dde1e7;padding-bottom:4px}\n"
    "h3{font-size:15px;margin:18px 0 6px}\n"
    ".sub{color:#5b6577;margin:0 0 12px}\n"
    "table{border-collapse:collapse;margin:6px 0 10px}\n"
    "th,td{padding:3px 9px;border-bottom:1px solid #e6e9ee;text-align:left;"
    "vertical-align:top}\n"
    "th{background:#f0f2f5;font-weight:600}\n"
    "td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;"
    "white-space:nowrap}\n"
    "code,pre,.mono{font-family:'DejaVu Sans Mono',Menlo,Consolas,monospace;"
    "font-size:12.5px}\n"
    "pre{white-space:pre-wrap;word-break:break-word;background:#f6f7f9;"
    "padding:6px 8px;margin:4px 0}\n"
    ".verdict{display:inline-block;padding:6px 14px;border-radius:4px;"
    "font-weight:700;font-size:16px;color:#fff}\n"
    ".verdict.ok{background:#2e7d32}.verdict.bad{background:#c62828}\n"
    ".kv th{width:170px;background:none;color:#5b6577;font-weight:500}\n"
    ".grid td{width:18px;height:16px;padding:0;border:1px solid #fff;"
    "text-align:center;font-size:10px}\n"
    ".grid th{font-size:11px;padding:2px 4px;background:none;"
    "font-weight:500}\n"
    ".grid th.op{text-align:right;font-family:'DejaVu Sans Mono',monospace}\n"
    ".grid th.dt{writing-mode:vertical-rl;transform:rotate(180deg);"
    "height:66px;text-align:left}\n"
    ".legend span{display:inline-block;margin-right:14px}\n"
    ".grids{display:flex;flex-wrap:wrap;gap:6px 22px;align-items:flex-start}\n"
    ".grid caption{text-align:left;font-weight:600;padding:2px 0}\n"
    ".sw{display:inline-block;width:11px;height:11px;margin-right:4px;"
    "vertical-align:-1px;border:1px solid #0002}\n"
    "td.pass,span.pass{background:#43a047}td.fail,span.fail{background:"
    "#d32f2f}\n"
    "td.skip,span.skip{background:#b0b7c3}td.known,span.known{background:"
    "#f9a825}\n"
    "td.fallback,span.fallback{background:#90caf9}td.untested,"
    "span.untested{background:#eceff3}\n"
    "td.none,span.none{background:#fff}\n"
    "svg .pass{fill:#43a047}svg .fail{fill:#d32f2f}svg .skip{fill:#b0b7c3}\n"
    "svg .known{fill:#f9a825}svg .fallback{fill:#90caf9}"
    "svg .untested{fill:#eceff3}\n"
    "svg .s0{fill:#3366aa}svg .s1{fill:#ee8833}svg .s2{fill:#55aa55}"
    "svg .s3{fill:#aa4499}svg .s4{fill:#44aaaa}svg .s5{fill:#999933}"
    "svg .s6{fill:#cc6677}svg .s7{fill:#777777}\n"
    "span.s0{background:#3366aa}span.s1{background:#ee8833}"
    "span.s2{background:#55aa55}span.s3{background:#aa4499}"
    "span.s4{background:#44aaaa}span.s5{background:#999933}"
    "span.s6{background:#cc6677}span.s7{background:#777777}\n"
    "svg text{font:11px system-ui,'DejaVu Sans',sans-serif;fill:#1d2330}\n"
    "svg .tol{stroke:#c62828;stroke-width:1.5}svg .axis{stroke:#8a93a3;"
    "stroke-width:1}\n"
    "svg .grid{stroke:#e6e9ee;stroke-width:1}\n"
    "tr.regression td{background:#fdecea}tr.improved td{background:#edf7ee}\n"
    ".tag{display:inline-block;padding:0 6px;border-radius:3px;"
    "font-size:12px;font-weight:600}\n"
    ".tag.fail{color:#fff}.tag.pass{color:#fff}\n"
    "details{margin:6px 0}summary{cursor:pointer;color:#2a4f8a}\n"
    "footer{margin-top:36px;color:#7a8496;font-size:12px}\n";

void hw_raw(struct hw *w, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfprintf(w->f, fmt, ap);
    va_end(ap);
}

void hw_text(struct hw *w, const char *s)
{
    if (!s)
        return;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '&':
            fputs("&amp;", w->f);
            break;
        case '<':
            fputs("&lt;", w->f);
            break;
        case '>':
            fputs("&gt;", w->f);
            break;
        case '"':
            fputs("&quot;", w->f);
            break;
        case '\'':
            fputs("&#39;", w->f);
            break;
        default:
            /* Control characters other than tab and newline are not
             * allowed in HTML text: shown as U+FFFD. */
            if (c < 0x20 && c != '\t' && c != '\n')
                fputs("&#xFFFD;", w->f);
            else if (c == 0x7f)
                fputs("&#xFFFD;", w->f);
            else
                fputc(c, w->f);
        }
    }
}

void hw_textf(struct hw *w, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    hw_text(w, buf);
}

void hw_num(char *buf, size_t size, double v)
{
    double a = fabs(v);

    if (isnan(v))
        snprintf(buf, size, "-");
    else if (isinf(v))
        snprintf(buf, size, v > 0 ? "inf" : "-inf");
    else if (v == 0)
        snprintf(buf, size, "0");
    else if (a >= 1e6 || a < 1e-3)
        snprintf(buf, size, "%.3g", v);
    else if (a >= 100)
        snprintf(buf, size, "%.0f", v);
    else if (a >= 10)
        snprintf(buf, size, "%.1f", v);
    else
        snprintf(buf, size, "%.3g", v);
}

int hw_open(struct hw *w, const char *path, const char *title, char *err,
            size_t errsz)
{
    size_t n = strlen(path);
    int fd;

    memset(w, 0, sizeof(*w));
    w->path = path;
    w->tmp = malloc(n + 5);
    if (!w->tmp) {
        snprintf(err, errsz, "%s: out of memory", path);
        return -1;
    }
    memcpy(w->tmp, path, n);
    memcpy(w->tmp + n, ".tmp", 5);
    fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || !(w->f = fdopen(fd, "w"))) {
        snprintf(err, errsz, "%s: cannot write: %s", w->tmp, strerror(errno));
        if (fd >= 0)
            close(fd);
        free(w->tmp);
        w->tmp = NULL;
        return -1;
    }
    hw_raw(w, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n"
              "<meta charset=\"utf-8\">\n"
              "<meta name=\"viewport\" content=\"width=device-width, "
              "initial-scale=1\">\n<title>");
    hw_text(w, title);
    hw_raw(w, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<main>\n",
           style);
    return 0;
}

void hw_discard(struct hw *w)
{
    if (w->f)
        fclose(w->f);
    if (w->tmp)
        unlink(w->tmp);
    free(w->tmp);
    w->f = NULL;
    w->tmp = NULL;
}

int hw_close(struct hw *w, char *err, size_t errsz)
{
    int rc = 0;

    hw_raw(w, "</main>\n</body>\n</html>\n");
    if (fflush(w->f) || ferror(w->f) || fsync(fileno(w->f))) {
        snprintf(err, errsz, "%s: write error: %s", w->tmp, strerror(errno));
        rc = -1;
    }
    if (fclose(w->f) && !rc) {
        snprintf(err, errsz, "%s: write error: %s", w->tmp, strerror(errno));
        rc = -1;
    }
    w->f = NULL;
    if (!rc && rename(w->tmp, w->path)) {
        snprintf(err, errsz, "%s: cannot rename to %s: %s", w->tmp, w->path,
                 strerror(errno));
        rc = -1;
    }
    if (rc)
        unlink(w->tmp);
    free(w->tmp);
    w->tmp = NULL;
    return rc;
}

/* ---- SVG --------------------------------------------------------------- */

static double seg_total(const struct hw_seg *seg, int n)
{
    double t = 0;

    for (int i = 0; i < n; i++)
        t += seg[i].value > 0 ? seg[i].value : 0;
    return t;
}

/* Segments of one bar at (x0, y), h high, `width` px for the total. */
static void bar_rects(struct hw *w, const struct hw_seg *seg, int n,
                      double x0, double y, double width, double h)
{
    double total = seg_total(seg, n), x = x0;

    for (int i = 0; i < n; i++) {
        double sw;
        if (seg[i].value <= 0 || total <= 0)
            continue;
        sw = width * seg[i].value / total;
        hw_raw(w,
               "<rect class=\"%s\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
               "height=\"%.2f\"><title>",
               seg[i].cls, x, y, sw, h);
        hw_textf(w, "%s: %.0f", seg[i].name, seg[i].value);
        hw_raw(w, "</title></rect>");
        x += sw;
    }
    if (total <= 0)
        hw_raw(w,
               "<rect class=\"untested\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
               "height=\"%.2f\"/>",
               x0, y, width, h);
}

void hw_svg_stacked(struct hw *w, const struct hw_seg *seg, int n, int width,
                    const char *label)
{
    double total = seg_total(seg, n), x = 0;
    int height = 58;

    hw_raw(w,
           "<svg role=\"img\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d "
           "%d\"><title>",
           width, height, width, height);
    hw_text(w, label);
    hw_raw(w, "</title>");
    bar_rects(w, seg, n, 0, 0, width, 26);
    for (int i = 0; i < n; i++) {
        char t[160];
        int tw;
        snprintf(t, sizeof(t), "%s %.0f (%.1f%%)", seg[i].name, seg[i].value,
                 total > 0 ? 100.0 * seg[i].value / total : 0.0);
        tw = (int)strlen(t) * 6 + 26;
        hw_raw(w,
               "<rect class=\"%s\" x=\"%.0f\" y=\"38\" width=\"11\" "
               "height=\"11\"/><text x=\"%.0f\" y=\"48\">",
               seg[i].cls, x, x + 15);
        hw_text(w, t);
        hw_raw(w, "</text>");
        x += tw;
    }
    hw_raw(w, "</svg>\n");
}

void hw_svg_mini(struct hw *w, const struct hw_seg *seg, int n, int width)
{
    hw_raw(w,
           "<svg width=\"%d\" height=\"12\" viewBox=\"0 0 %d 12\">", width,
           width);
    bar_rects(w, seg, n, 0, 0, width, 12);
    hw_raw(w, "</svg>");
}
