/*
 * keel CLI — a live progress line for long commands (keel conform at
 * full/stress level, keel bench).
 *
 * On a terminal the line is redrawn in place ("\r", then the text, then
 * an erase-to-end-of-line) at most ten times a second, and erased before
 * the command prints anything else, so the ordinary output reads the same
 * as without it. When the stream is not a terminal (a file, a pipe, a CI
 * log) nothing at all is written: the output stays byte for byte what it
 * was. KEEL_PROGRESS=0 turns the line off on a terminal too.
 *
 *     keel_cli_progress p;
 *     keel_cli_progress_init(&p, stdout, "conform", ntests);
 *     ... keel_cli_progress_update(&p, done, "suite/test");
 *     ... keel_cli_progress_clear(&p); printf("a result\n");
 *     keel_cli_progress_clear(&p);   (at the end)
 *
 * keel_cli_progress_format is the pure part (tested by cli-progress).
 */
#ifndef KEEL_CLI_PROGRESS_H
#define KEEL_CLI_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct keel_cli_progress {
    FILE *out;
    bool live;        /* out is a terminal and the line is wanted */
    bool shown;       /* a line is on the screen now              */
    int width;        /* the terminal's columns                   */
    const char *label;
    uint64_t total;
    uint64_t done;
    double t0;        /* seconds, monotonic clock                 */
    double last_draw;
} keel_cli_progress;

/** Start: live when `out` is a terminal and KEEL_PROGRESS is not "0". */
void keel_cli_progress_init(keel_cli_progress *p, FILE *out,
                            const char *label, uint64_t total);
/** `done` of `total` finished, `what` (may be NULL) running now. Draws
 *  when no line is shown, else at most every 0.1 s. */
void keel_cli_progress_update(keel_cli_progress *p, uint64_t done,
                              const char *what);
/** Erase the line, if one is shown (call before other output). */
void keel_cli_progress_clear(keel_cli_progress *p);

/** Remaining time as text: "0:42", "12:05", "1h07m"; "--:--" when
 *  unknown (negative, NaN or more than 99 hours). */
void keel_cli_progress_eta(char *buf, size_t size, double seconds);

/**
 * The line's text, without "\r" or escapes, at most `width` columns
 * (and size - 1 bytes): "label [done/total] pct% ETA m:ss what", `what`
 * shortened from the left ("...") to fit, dropped when nothing of it
 * fits. The ETA extrapolates the elapsed time over what is done; with
 * nothing done yet it is "--:--". Returns the length written.
 */
size_t keel_cli_progress_format(char *buf, size_t size, int width,
                                const char *label, uint64_t done,
                                uint64_t total, double elapsed,
                                const char *what);

#endif /* KEEL_CLI_PROGRESS_H */
