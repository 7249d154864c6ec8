/*
 * Checks the %peak figures of a `keel bench --format json` report.
 *
 *   bench-peak-check REPORT measured|declared
 *
 * measured: the context says the peak was measured (keel_matmul_peak
 * "measured: ...", keel_matmul_peak_gflops > 0); every f32 matmul,
 * paired matmul and conv2d benchmark that ran reports %peak in (0, 100].
 * declared: the context says "declared"; a row above 100 is labelled
 * "above the declared peak", and at least one such row exists (the test
 * declares a peak far below any real figure).
 * Both: at least one row carries %peak; f16/bf16 matmuls, host/ rows and
 * benchmarks that were skipped (no kernel) carry none.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

static int fail(const char *what, const char *name)
{
    fprintf(stderr, "bench-peak-check: %s%s%s\n", what, name ? ": " : "",
            name ? name : "");
    return 1;
}

static int starts(const char *s, const char *prefix)
{
    return s && !strncmp(s, prefix, strlen(prefix));
}

int main(int argc, char **argv)
{
    json_error_t err;
    json_t *root, *ctx, *rows, *row;
    const char *how, *mode;
    double peak;
    size_t i;
    int with = 0, over = 0, bad = 0;

    if (argc != 3 || (strcmp(argv[2], "measured") && strcmp(argv[2], "declared")))
        return fail("usage: bench-peak-check REPORT measured|declared", NULL);
    mode = argv[2];
    root = json_load_file(argv[1], 0, &err);
    if (!root)
        return fail(err.text, argv[1]);
    ctx = json_object_get(root, "context");
    rows = json_object_get(root, "benchmarks");
    how = json_string_value(json_object_get(ctx, "keel_matmul_peak"));
    peak = json_number_value(json_object_get(ctx, "keel_matmul_peak_gflops"));
    if (!json_is_number(json_object_get(ctx, "keel_matmul_peak_gflops")))
        peak = 0;
    if (!peak) {
        /* Google Benchmark writes custom context values as strings. */
        const char *p = json_string_value(
            json_object_get(ctx, "keel_matmul_peak_gflops"));
        if (p)
            sscanf(p, "%lf", &peak);
    }
    if (!starts(how, mode))
        return fail("keel_matmul_peak does not say the peak was", mode);
    if (!(peak > 0))
        return fail("no keel_matmul_peak_gflops in the context", how);
    json_array_foreach(rows, i, row) {
        const char *name = json_string_value(json_object_get(row, "name"));
        const char *label = json_string_value(json_object_get(row, "label"));
        json_t *pc = json_object_get(row, "%peak");
        int expect = starts(name, "matmul/f32/") ||
                     starts(name, "paired/matmul_f32") ||
                     starts(name, "conv2d/f32/");
        double v = json_number_value(pc);

        /* Skipped (no kernel: the partial plugin) or failed; `keel bench`
         * itself exits 1 on a failure, so only the figures matter here. */
        if (json_is_true(json_object_get(row, "error_occurred"))) {
            if (pc)
                bad |= fail("%peak on a benchmark that did not run", name);
            continue;
        }
        if (!expect) {
            if (pc)
                bad |= fail("%peak on a row that must not have one", name);
            continue;
        }
        if (!json_is_number(pc)) {
            bad |= fail("no %peak", name);
            continue;
        }
        with++;
        if (!(v > 0))
            bad |= fail("%peak is not positive", name);
        if (!strcmp(mode, "measured") && v > 100.0 + 1e-9)
            bad |= fail("%peak above 100 against a measured peak", name);
        if (!strcmp(mode, "declared") && v > 100.0) {
            over++;
            if (!starts(label, "above the declared peak"))
                bad |= fail("%peak above the declared peak, unlabelled", name);
        }
    }
    if (!with)
        bad |= fail("no benchmark reported %peak", NULL);
    if (!strcmp(mode, "declared") && !over)
        bad |= fail("no row exceeded a declared peak set far too low", NULL);
    if (!bad)
        printf("bench-peak-check: %d rows with %%peak, %s peak %.2f GFLOP/s\n",
               with, mode, peak);
    json_decref(root);
    return bad;
}
