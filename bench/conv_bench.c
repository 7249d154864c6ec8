/*
 * conv_bench: LeNet's two convolution layers, forward (conv2d) and
 * backward (conv2d_grad: dx, dweight, dbias), batch 64, on cpu:0.
 *
 *   conv1  x [64, 1, 28, 28]  weight [6, 1, 5, 5]   padding 2
 *   conv2  x [64, 6, 14, 14]  weight [16, 6, 5, 5]  no padding
 *
 *   conv_bench [iterations=30]
 *
 * Inputs are created once; an iteration runs both layers forward and
 * backward and synchronizes the device. As in training, conv1's input
 * needs no gradient: its backward computes dweight and dbias only
 * (need_dx false); conv2's computes all three. Prints the median ms per
 * iteration and per phase. bench/conv_torch.py runs the same with
 * PyTorch; to compare at 1 and 2 threads:
 *
 *   for t in 1 2; do KEEL_CPU_THREADS=$t OPENBLAS_NUM_THREADS=$t \
 *     KEEL_PLUGIN_PATH=build/plugins/cpu build/bench/conv_bench; \
 *     .venv/bin/python bench/conv_torch.py $t; done
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <keel/ops.h>

#define NPHASE 4

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

struct layer {
    keel_tensor *x, *w, *b, *dy;
    int64_t pad[2];
    keel_attr attrs[3];
};

static keel_status rand_t(int nd, const int64_t *shape, keel_tensor **t)
{
    return keel_uniform(nd, shape, KEEL_F32, -1, 1, "cpu:0", t);
}

static keel_status layer_init(struct layer *l, const int64_t *xs,
                              const int64_t *ws, const int64_t *ys,
                              int64_t pad, bool need_dx)
{
    keel_status st;

    l->pad[0] = l->pad[1] = pad;
    l->attrs[0] = keel_attr_ints("padding", l->pad, 2);
    l->attrs[1] = keel_attr_bool("has_bias", true);
    l->attrs[2] = keel_attr_bool("need_dx", need_dx);
    if ((st = rand_t(4, xs, &l->x)) || (st = rand_t(4, ws, &l->w)) ||
        (st = rand_t(1, ws, &l->b)) || (st = rand_t(4, ys, &l->dy)))
        return st;
    return KEEL_STATUS_OK;
}

static keel_status forward(struct layer *l)
{
    keel_tensor *in[3] = {l->x, l->w, l->b}, *y = NULL;
    int n = 0;
    keel_status st = keel_op_run(KEEL_OP_CONV2D, in, 3, l->attrs, 1, &y, 1,
                                 &n);

    keel_tensor_free(y);
    return st;
}

static keel_status backward(struct layer *l)
{
    keel_tensor *in[3] = {l->x, l->w, l->dy}, *g[3] = {NULL, NULL, NULL};
    int n = 0;
    keel_status st = keel_op_run(KEEL_OP_CONV2D_GRAD, in, 3, l->attrs, 3, g,
                                 3, &n);

    for (int i = 0; i < n; i++)
        keel_tensor_free(g[i]);
    return st;
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 30;
    struct layer l1, l2;
    double *t[NPHASE + 1];
    keel_place place;
    const char *names[NPHASE] = {"conv1 fwd", "conv1 bwd", "conv2 fwd",
                                 "conv2 bwd"};
    const char *threads = getenv("KEEL_CPU_THREADS");

    if (iters < 1)
        return 2;
    if (layer_init(&l1, (int64_t[]){64, 1, 28, 28}, (int64_t[]){6, 1, 5, 5},
                   (int64_t[]){64, 6, 28, 28}, 2, false) ||
        layer_init(&l2, (int64_t[]){64, 6, 14, 14}, (int64_t[]){16, 6, 5, 5},
                   (int64_t[]){64, 16, 10, 10}, 0, true)) {
        fprintf(stderr, "conv_bench: %s\n", keel_last_error());
        return 1;
    }
    place = keel_tensor_place(l1.x);
    for (int p = 0; p <= NPHASE; p++)
        t[p] = calloc((size_t)iters, sizeof(double));
    for (int i = -5; i < iters; i++) { /* 5 warm-up iterations */
        double t0 = now_ms(), tp = t0, tn;
        keel_status st = KEEL_STATUS_OK;
        for (int p = 0; p < NPHASE && !st; p++) {
            struct layer *l = p < 2 ? &l1 : &l2;
            st = p % 2 ? backward(l) : forward(l);
            if (!st)
                st = keel_device_synchronize(place);
            tn = now_ms();
            if (i >= 0)
                t[p][i] = tn - tp;
            tp = tn;
        }
        if (st) {
            fprintf(stderr, "conv_bench: %s\n", keel_last_error());
            return 1;
        }
        if (i >= 0)
            t[NPHASE][i] = tp - t0;
    }
    printf("keel   LeNet convs fwd+bwd, batch 64, threads %s: %.2f ms/iter "
           "(median of %d;",
           threads ? threads : "default", median(t[NPHASE], iters), iters);
    for (int p = 0; p < NPHASE; p++)
        printf(" %s %.2f%s", names[p], median(t[p], iters),
               p + 1 < NPHASE ? "," : ")\n");
    for (int p = 0; p <= NPHASE; p++)
        free(t[p]);
    keel_tensor_free(l1.x), keel_tensor_free(l1.w), keel_tensor_free(l1.b);
    keel_tensor_free(l1.dy), keel_tensor_free(l2.x), keel_tensor_free(l2.w);
    keel_tensor_free(l2.b), keel_tensor_free(l2.dy);
    keel_shutdown();
    return 0;
}
