/*
 * keel CLI — the live progress line (progress.h).
 */
#include "progress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_WIDTH 80
#define MAX_WIDTH 512

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int terminal_width(int fd)
{
    struct winsize ws;
    const char *c;

    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    c = getenv("COLUMNS");
    if (c && atoi(c) > 0)
        return atoi(c);
    return DEFAULT_WIDTH;
}

void keel_cli_progress_init(keel_cli_progress *p, FILE *out,
                            const char *label, uint64_t total)
{
    const char *env = getenv("KEEL_PROGRESS");
    const char *term = getenv("TERM");

    memset(p, 0, sizeof(*p));
    p->out = out;
    p->label = label ? label : "";
    p->total = total;
    p->t0 = now_s();
    p->last_draw = -1;
    p->live = out && isatty(fileno(out)) && !(env && !strcmp(env, "0")) &&
              !(term && !strcmp(term, "dumb"));
    if (p->live) {
        p->width = terminal_width(fileno(out));
        if (p->width > MAX_WIDTH)
            p->width = MAX_WIDTH;
    }
}

void keel_cli_progress_eta(char *buf, size_t size, double s)
{
    long t;

    if (!size)
        return;
    if (!(s >= 0) || s > 99.0 * 3600) {
        snprintf(buf, size, "--:--");
        return;
    }
    t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, size, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else
        snprintf(buf, size, "%ld:%02ld", t / 60, t % 60);
}

size_t keel_cli_progress_format(char *buf, size_t size, int width,
                                const char *label, uint64_t done,
                                uint64_t total, double elapsed,
                                const char *what)
{
    char eta[16], head[160];
    size_t cap, n, room, wl;
    int len;

    if (!buf || !size)
        return 0;
    buf[0] = '\0';
    if (width <= 0)
        return 0;
    cap = size - 1 < (size_t)width ? size - 1 : (size_t)width;
    if (done > 0 && done <= total && elapsed >= 0)
        keel_cli_progress_eta(eta, sizeof(eta),
                              elapsed / (double)done *
                                  (double)(total - done));
    else if (total && done >= total)
        keel_cli_progress_eta(eta, sizeof(eta), 0);
    else
        keel_cli_progress_eta(eta, sizeof(eta), -1);
    len = snprintf(head, sizeof(head), "%s%s[%llu/%llu] %3d%% ETA %s",
                   label && *label ? label : "", label && *label ? " " : "",
                   (unsigned long long)done, (unsigned long long)total,
                   total ? (int)(done >= total ? 100 : done * 100 / total)
                         : 0,
                   eta);
    n = len < 0 ? 0 : (size_t)len;
    if (n >= sizeof(head))
        n = sizeof(head) - 1;
    if (n > cap)
        n = cap;
    memcpy(buf, head, n);
    buf[n] = '\0';
    /* Then " what", shortened from the left: its end (the test's name)
     * says more than its start. */
    if (!what || !*what || n + 5 > cap)
        return n;
    room = cap - n - 1;
    wl = strlen(what);
    buf[n++] = ' ';
    if (wl <= room) {
        memcpy(buf + n, what, wl);
        n += wl;
    } else {
        memcpy(buf + n, "...", 3);
        memcpy(buf + n + 3, what + wl - (room - 3), room - 3);
        n += room;
    }
    buf[n] = '\0';
    return n;
}

static void draw(keel_cli_progress *p, const char *what, double t)
{
    char line[MAX_WIDTH + 1];

    /* One column spare: writing the last column wraps some terminals. */
    keel_cli_progress_format(line, sizeof(line), p->width - 1, p->label,
                             p->done, p->total, t - p->t0, what);
    fprintf(p->out, "\r%s\033[K", line);
    fflush(p->out);
    p->shown = true;
    p->last_draw = t;
}

void keel_cli_progress_update(keel_cli_progress *p, uint64_t done,
                              const char *what)
{
    double t;

    if (!p || !p->live)
        return;
    p->done = done;
    t = now_s();
    if (!p->shown || t - p->last_draw >= 0.1)
        draw(p, what, t);
}

void keel_cli_progress_clear(keel_cli_progress *p)
{
    if (!p || !p->live || !p->shown)
        return;
    fputs("\r\033[K", p->out);
    fflush(p->out);
    p->shown = false;
}
