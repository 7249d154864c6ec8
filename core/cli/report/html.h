/*
 * keel report — the HTML page writer (see report.h).
 */
#ifndef KEEL_CLI_HTML_H
#define KEEL_CLI_HTML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#if defined(__GNUC__) || defined(__clang__)
#define HW_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define HW_PRINTF(a, b)
#endif

struct hw {
    FILE *f;
    const char *path;
    char *tmp;        /* path.tmp, renamed over path by hw_close */
    int ids;          /* counter for generated element ids        */
};

/** Open path.tmp and write the document head (title escaped) and the
 *  style sheet. Returns 0, or -1 with the reason in err. */
int hw_open(struct hw *w, const char *path, const char *title, char *err,
            size_t errsz);
/** Finish the document, flush, fsync and rename it over path. Returns 0,
 *  or -1 with the reason in err (path.tmp is removed). */
int hw_close(struct hw *w, char *err, size_t errsz);
/** Give up: close and remove path.tmp. */
void hw_discard(struct hw *w);

/** Raw markup. */
void hw_raw(struct hw *w, const char *fmt, ...) HW_PRINTF(2, 3);
/** Text, escaped for element content and attribute values. */
void hw_text(struct hw *w, const char *s);
/** Formatted text, escaped. */
void hw_textf(struct hw *w, const char *fmt, ...) HW_PRINTF(2, 3);

/** A number for people: 3 significant digits, SI-free, "-" for NaN. */
void hw_num(char *buf, size_t size, double v);

/* ---- SVG --------------------------------------------------------------- */

/** One segment of a stacked bar. */
struct hw_seg {
    const char *name;  /* legend text            */
    const char *cls;   /* CSS class (fill colour) */
    double value;
};

/** A stacked horizontal bar `width` px wide with a legend below it
 *  ("name count (pct%)"). */
void hw_svg_stacked(struct hw *w, const struct hw_seg *seg, int n,
                    int width, const char *label);
/** A small inline bar (no legend), for table cells. */
void hw_svg_mini(struct hw *w, const struct hw_seg *seg, int n, int width);

#endif /* KEEL_CLI_HTML_H */
