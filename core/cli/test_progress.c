/*
 * The progress line's formatter and ETA text (progress.h): counts,
 * percentage, the estimate, the width limit, and that nothing is drawn
 * when the stream is not a terminal.
 */
#include <stdio.h>
#include <string.h>

#include "progress.h"

static int failures;

#define EXPECT_STR(got, want)                                                \
    do {                                                                     \
        if (strcmp((got), (want))) {                                         \
            fprintf(stderr, "%s:%d: got '%s', wanted '%s'\n", __FILE__,      \
                    __LINE__, (got), (want));                                \
            failures++;                                                      \
        }                                                                    \
    } while (0)
#define EXPECT(cond)                                                         \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: %s is false\n", __FILE__, __LINE__,      \
                    #cond);                                                  \
            failures++;                                                      \
        }                                                                    \
    } while (0)

int main(void)
{
    char buf[256], eta[16];
    size_t n;
    keel_cli_progress p;
    FILE *f;
    long size;

    keel_cli_progress_eta(eta, sizeof(eta), 0);
    EXPECT_STR(eta, "0:00");
    keel_cli_progress_eta(eta, sizeof(eta), 42.4);
    EXPECT_STR(eta, "0:42");
    keel_cli_progress_eta(eta, sizeof(eta), 725);
    EXPECT_STR(eta, "12:05");
    keel_cli_progress_eta(eta, sizeof(eta), 3600 + 7 * 60 + 10);
    EXPECT_STR(eta, "1h07m");
    keel_cli_progress_eta(eta, sizeof(eta), -1);
    EXPECT_STR(eta, "--:--");
    keel_cli_progress_eta(eta, sizeof(eta), 1e9);
    EXPECT_STR(eta, "--:--");

    /* 10 of 40 done in 20 s: 30 left at 2 s each is one minute. */
    n = keel_cli_progress_format(buf, sizeof(buf), 80, "conform", 10, 40,
                                 20.0, "ops/add_f32");
    EXPECT_STR(buf, "conform [10/40]  25% ETA 1:00 ops/add_f32");
    EXPECT(n == strlen(buf));
    /* Nothing done: no estimate. */
    keel_cli_progress_format(buf, sizeof(buf), 80, "bench", 0, 7, 3.0, NULL);
    EXPECT_STR(buf, "bench [0/7]   0% ETA --:--");
    /* All done. */
    keel_cli_progress_format(buf, sizeof(buf), 80, "", 7, 7, 3.0, "");
    EXPECT_STR(buf, "[7/7] 100% ETA 0:00");
    /* The name is shortened from the left to fit the width. */
    n = keel_cli_progress_format(buf, sizeof(buf), 40, "conform", 10, 40,
                                 20.0, "kernels/conv2d_backward_f16_large");
    EXPECT(n == 40 && strlen(buf) == 40);
    EXPECT_STR(buf, "conform [10/40]  25% ETA 1:00 ...6_large");
    /* Too narrow for any of the name: the counts, cut to the width. */
    n = keel_cli_progress_format(buf, sizeof(buf), 12, "conform", 10, 40,
                                 20.0, "ops/add");
    EXPECT_STR(buf, "conform [10/");
    EXPECT(n == 12);
    /* The buffer's size bounds it as well as the width. */
    n = keel_cli_progress_format(buf, 8, 80, "conform", 1, 2, 1.0, "x");
    EXPECT(n == 7 && strlen(buf) == 7);
    EXPECT(keel_cli_progress_format(buf, sizeof(buf), 0, "a", 1, 2, 1.0,
                                    "x") == 0 && buf[0] == '\0');

    /* Not a terminal: update and clear write nothing at all. */
    f = tmpfile();
    EXPECT(f != NULL);
    if (f) {
        keel_cli_progress_init(&p, f, "conform", 5);
        EXPECT(!p.live);
        keel_cli_progress_update(&p, 1, "ops/add");
        keel_cli_progress_clear(&p);
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        EXPECT(size == 0);
        fclose(f);
    }
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    puts("progress line: all checks passed");
    return 0;
}
