/*
 * matmul_bench: keel_matmul on cpu:0 against calling cblas_sgemm directly,
 * float32 n x n x n, in one process (one OpenBLAS instance).
 *
 *   matmul_bench [n=1024] [iterations=15]
 *
 * The tensors are created once; a keel iteration times the op plus a
 * device synchronize (the op's result is ready when it returns). The two
 * are interleaved so that drift in machine load hits both alike; the
 * medians are reported. Threads: KEEL_CPU_THREADS for the plugin and
 * OPENBLAS_NUM_THREADS for OpenBLAS (set both to the same value).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <keel/ops.h>

#include "host_blas.h"

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int fail(const char *what)
{
    fprintf(stderr, "matmul_bench: %s: %s\n", what, keel_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1024;
    int iters = argc > 2 ? atoi(argv[2]) : 15;
    int64_t shape[2] = {n, n};
    size_t nn = (size_t)n * (size_t)n;
    float *a = malloc(nn * sizeof(float)), *b = malloc(nn * sizeof(float));
    float *c = malloc(nn * sizeof(float)), *got = malloc(nn * sizeof(float));
    double *tk = calloc((size_t)iters, sizeof(double));
    double *tb = calloc((size_t)iters, sizeof(double));
    keel_tensor *x = NULL, *y = NULL, *z = NULL;
    keel_place place;
    double flop = 2.0 * n * (double)n * n, mk, mb, maxdiff = 0;
    host_sgemm_fn *sgemm;
    const char *why;

    if (n < 1 || iters < 1 || !a || !b || !c || !got || !tk || !tb)
        return 2;
    srand(1);
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)((double)rand() / RAND_MAX) - 0.5f;
        b[i] = (float)((double)rand() / RAND_MAX) - 0.5f;
    }
    if (keel_tensor_from_host(a, KEEL_F32, 2, shape, "cpu:0", &x) ||
        keel_tensor_from_host(b, KEEL_F32, 2, shape, "cpu:0", &y))
        return fail("inputs");
    place = keel_tensor_place(x);
    if (!(sgemm = host_sgemm(&why))) {
        fprintf(stderr, "matmul_bench: %s\n", why);
        return 1;
    }
    for (int w = 0; w < 3; w++) { /* warm up both */
        if (keel_matmul(x, y, false, false, &z))
            return fail("matmul");
        keel_device_synchronize(place);
        keel_tensor_free(z);
        sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n,
              b, n, 0.0f, c, n);
    }
    for (int i = 0; i < iters; i++) {
        double t0 = now_ms();
        if (keel_matmul(x, y, false, false, &z) ||
            keel_device_synchronize(place))
            return fail("matmul");
        tk[i] = now_ms() - t0;
        if (i == iters - 1 && keel_tensor_to_host(z, got, nn * sizeof(float)))
            return fail("readback");
        keel_tensor_free(z);
        t0 = now_ms();
        sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n,
              b, n, 0.0f, c, n);
        tb[i] = now_ms() - t0;
    }
    for (size_t i = 0; i < nn; i++)
        maxdiff = fmax(maxdiff, fabs((double)got[i] - c[i]));
    mk = median(tk, iters);
    mb = median(tb, iters);
    printf("f32 %dx%dx%d  keel_matmul %.2f ms (%.1f GFLOP/s)  cblas_sgemm "
           "%.2f ms (%.1f GFLOP/s)  keel/blas throughput %.1f%%  max|diff| "
           "%.2g\n",
           n, n, n, mk, flop / mk / 1e6, mb, flop / mb / 1e6, 100.0 * mb / mk,
           maxdiff);
    keel_tensor_free(x);
    keel_tensor_free(y);
    keel_shutdown();
    free(a);
    free(b);
    free(c);
    free(got);
    free(tk);
    free(tb);
    return 0;
}
