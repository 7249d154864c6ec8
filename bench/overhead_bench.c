/*
 * Framework overhead of a small op: keel_add on two 4-element float32
 * tensors on cpu:0 (dispatch, output allocation from the caching
 * allocator, kernel launch, and freeing the result), in ns per op.
 *
 *   keel-bench-overhead [ITERATIONS] [REPEATS]
 *
 * Prints one line per repeat and the median; compare_torch.py runs the
 * same loop in PyTorch for the side-by-side figure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <keel/ops.h>

static double now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 200000;
    int reps = argc > 2 ? atoi(argv[2]) : 7;
    float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, out[4];
    int64_t shape[1] = {4};
    keel_tensor *x = NULL, *y = NULL, *z = NULL;
    double *res;

    if (iters < 1 || reps < 1 || reps > 1000) {
        fprintf(stderr, "usage: keel-bench-overhead [ITERATIONS] [REPEATS]\n");
        return 2;
    }
    res = malloc(sizeof(double) * (size_t)reps);
    if (!res || keel_set_device("cpu:0") ||
        keel_tensor_from_host(a, KEEL_F32, 1, shape, NULL, &x) ||
        keel_tensor_from_host(b, KEEL_F32, 1, shape, NULL, &y)) {
        fprintf(stderr, "setup failed: %s\n", keel_last_error());
        return 1;
    }
    /* Warm up: kernel cache, allocator cache, thread pool. */
    for (long i = 0; i < 10000; i++) {
        keel_add(x, y, &z);
        keel_tensor_free(z);
    }
    for (int r = 0; r < reps; r++) {
        double t0 = now_ns();
        for (long i = 0; i < iters; i++) {
            if (keel_add(x, y, &z) != KEEL_STATUS_OK) {
                fprintf(stderr, "keel_add: %s\n", keel_last_error());
                return 1;
            }
            keel_tensor_free(z);
        }
        res[r] = (now_ns() - t0) / (double)iters;
        printf("repeat %d: %.1f ns/op\n", r, res[r]);
    }
    /* The result is right. */
    keel_add(x, y, &z);
    keel_tensor_to_host(z, out, sizeof(out));
    if (out[0] != 6 || out[3] != 12) {
        fprintf(stderr, "wrong result %g %g\n", out[0], out[3]);
        return 1;
    }
    keel_tensor_free(z);
    qsort(res, (size_t)reps, sizeof(double), cmp);
    printf("keel add 4xf32: median %.1f ns/op over %d repeats of %ld\n",
           res[reps / 2], reps, iters);
    free(res);
    keel_tensor_free(x);
    keel_tensor_free(y);
    keel_shutdown();
    return 0;
}
