/*
 * The CPU fallback against a partial plugin: examples/plugin's sample
 * plugin, which has kernels for add, multiply, relu and matmul in float32
 * only, device memory the host cannot dereference and one worker thread
 * per stream. Every other op runs on cpu:0 through the fallback.
 *
 * Checks: creation ops (no tensor inputs) with the sample device current,
 * which used to recurse until the stack overflowed; non-contiguous inputs
 * of ops without a kernel, including the copy op itself; the four kernels
 * on transposed, broadcast and 1-D operands against the CPU plugin; a few
 * LeNet training steps whose losses match the CPU plugin's; an op that
 * writes its inputs in place (check_finite_and_unscale on a transposed
 * view); the fallback counts, the one-line summary and the KEEL_STRICT
 * modes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>

#include <keel/autograd.h>
#include <keel/nn.h>
#include <keel/ops.h>
#include <keel/optim.h>
#include <keel/runtime.h>
#include <keel/tensor.h>

#include "lenet.h"

#define OK(x) CU_ASSERT_EQUAL_FATAL((x), KEEL_STATUS_OK)
#define DEV "sample:0"

static keel_op_id op_id(const char *name)
{
    keel_op_id id = (keel_op_id)0;

    CU_ASSERT_EQUAL_FATAL(keel_op_find(name, &id), KEEL_STATUS_OK);
    return id;
}

/* Host copy of a tensor as doubles (any float dtype). */
static double *host_values(const keel_tensor *t, int64_t *n)
{
    keel_tensor *f = NULL;
    double *v;
    float *tmp;

    *n = keel_tensor_numel(t);
    CU_ASSERT_EQUAL_FATAL(keel_cast(t, KEEL_F32, &f), KEEL_STATUS_OK);
    tmp = malloc(sizeof(float) * (size_t)(*n ? *n : 1));
    v = malloc(sizeof(double) * (size_t)(*n ? *n : 1));
    CU_ASSERT_FATAL(tmp && v);
    CU_ASSERT_EQUAL_FATAL(
        keel_tensor_to_host(f, tmp, sizeof(float) * (size_t)*n),
        KEEL_STATUS_OK);
    for (int64_t i = 0; i < *n; i++)
        v[i] = tmp[i];
    free(tmp);
    keel_tensor_free(f);
    return v;
}

/* Max relative difference |a-b| / max(1, |b|); shapes must agree. */
static double rel_diff(const keel_tensor *a, const keel_tensor *b)
{
    int64_t na, nb;
    double *x, *y, worst = 0;

    CU_ASSERT_EQUAL_FATAL(keel_tensor_ndim(a), keel_tensor_ndim(b));
    for (int i = 0; i < keel_tensor_ndim(a); i++)
        CU_ASSERT_EQUAL_FATAL(keel_tensor_shape(a)[i], keel_tensor_shape(b)[i]);
    x = host_values(a, &na);
    y = host_values(b, &nb);
    CU_ASSERT_EQUAL_FATAL(na, nb);
    for (int64_t i = 0; i < na; i++) {
        double d = fabs(x[i] - y[i]) / fmax(1.0, fabs(y[i]));
        if (!(d <= worst))
            worst = isnan(d) ? INFINITY : d;
    }
    free(x);
    free(y);
    return worst;
}

static bool on_sample(const keel_tensor *t)
{
    char name[64];

    return keel_place_name(keel_tensor_place(t), name, sizeof(name)) ==
               KEEL_STATUS_OK &&
           !strcmp(name, DEV);
}

/* ---- creation ops with the sample device current -------------------------- */

static void test_creation_ops(void)
{
    int64_t shape[2] = {3, 5};
    const char *devs[2] = {DEV, "cpu:0"};
    keel_tensor *t[2][7] = {{0}};
    uint64_t full_before = keel_fallback_count(op_id("full"));

    for (int d = 0; d < 2; d++) {
        OK(keel_set_device(devs[d]));
        keel_seed(11);
        OK(keel_zeros(2, shape, KEEL_F32, NULL, &t[d][0]));
        OK(keel_full(2, shape, KEEL_F32, 2.5, NULL, &t[d][1]));
        OK(keel_arange(0, 15, 1, KEEL_F32, NULL, &t[d][2]));
        OK(keel_uniform(2, shape, KEEL_F32, -1, 1, NULL, &t[d][3]));
        OK(keel_normal(2, shape, KEEL_F32, 0, 2, NULL, &t[d][4]));
        OK(keel_linspace(-1, 1, 7, KEEL_F32, NULL, &t[d][5]));
        OK(keel_eye(4, -1, KEEL_F32, NULL, &t[d][6]));
    }
    OK(keel_set_device("cpu:0"));
    for (int i = 0; i < 7; i++) {
        CU_ASSERT(on_sample(t[0][i]));
        CU_ASSERT_EQUAL(rel_diff(t[0][i], t[1][i]), 0.0);
    }
    /* zeros and full are "full" ops; they ran on the CPU for the sample. */
    CU_ASSERT(keel_fallback_count(op_id("full")) >= full_before + 2);
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < 7; i++)
            keel_tensor_free(t[d][i]);
}

/* ---- non-contiguous inputs through the fallback ---------------------------- */

static void test_strided_fallback(void)
{
    int64_t shape[3] = {2, 3, 4};
    keel_tensor *x[2] = {0}, *v[2] = {0}, *e[2] = {0}, *c[2] = {0};
    const char *devs[2] = {DEV, "cpu:0"};
    uint64_t copies = keel_fallback_count(op_id("copy"));

    for (int d = 0; d < 2; d++) {
        keel_seed(5);
        OK(keel_uniform(3, shape, KEEL_F32, -2, 2, devs[d], &x[d]));
        OK(keel_transpose(x[d], 0, 2, &v[d])); /* [4, 3, 2], strided */
        CU_ASSERT_FALSE(keel_tensor_is_contiguous(v[d]));
        OK(keel_exp(v[d], &e[d]));        /* no sample kernel */
        OK(keel_contiguous(v[d], &c[d])); /* the copy op: no kernel either */
    }
    CU_ASSERT(on_sample(e[0]) && on_sample(c[0]));
    CU_ASSERT_EQUAL(rel_diff(e[0], e[1]), 0.0);
    CU_ASSERT_EQUAL(rel_diff(c[0], c[1]), 0.0);
    CU_ASSERT(keel_fallback_count(op_id("copy")) > copies);
    /* A negative step: the view reaches below its offset. */
    for (int d = 0; d < 2; d++) {
        keel_tensor_free(e[d]);
        keel_tensor_free(c[d]);
        keel_tensor_free(v[d]);
        OK(keel_slice(x[d], 2, 3, -5, -1, &v[d])); /* [2, 3, 4] reversed */
        OK(keel_exp(v[d], &e[d]));
        OK(keel_slice(v[d], 0, 1, -3, -1, &c[d])); /* two axes reversed */
        keel_tensor_free(v[d]);
        v[d] = c[d];
        OK(keel_contiguous(v[d], &c[d]));
    }
    CU_ASSERT_EQUAL(rel_diff(e[0], e[1]), 0.0);
    CU_ASSERT_EQUAL(rel_diff(c[0], c[1]), 0.0);
    for (int d = 0; d < 2; d++) {
        keel_tensor_free(x[d]);
        keel_tensor_free(v[d]);
        keel_tensor_free(e[d]);
        keel_tensor_free(c[d]);
    }
}

/* ---- the plugin's own kernels on the layouts the core hands them ----------- */

static void binary_case(const char *op, int nx, const int64_t *sx, int ny,
                        const int64_t *sy, bool tx, bool ty)
{
    const char *devs[2] = {DEV, "cpu:0"};
    keel_tensor *x[2] = {0}, *y[2] = {0}, *o[2] = {0};
    uint64_t before = keel_fallback_count(op_id(op));

    for (int d = 0; d < 2; d++) {
        keel_seed(21);
        OK(keel_uniform(nx, sx, KEEL_F32, -1, 1, devs[d], &x[d]));
        OK(keel_uniform(ny, sy, KEEL_F32, -1, 1, devs[d], &y[d]));
        keel_status st;
        if (!strcmp(op, "matmul"))
            st = keel_matmul(x[d], y[d], tx, ty, &o[d]);
        else if (!strcmp(op, "add"))
            st = keel_add(x[d], y[d], &o[d]);
        else
            st = keel_multiply(x[d], y[d], &o[d]);
        OK(st);
    }
    CU_ASSERT(on_sample(o[0]));
    CU_ASSERT(rel_diff(o[0], o[1]) < 1e-5);
    /* It ran on the sample's kernel, not through the fallback. */
    CU_ASSERT_EQUAL(keel_fallback_count(op_id(op)), before);
    for (int d = 0; d < 2; d++) {
        keel_tensor_free(x[d]);
        keel_tensor_free(y[d]);
        keel_tensor_free(o[d]);
    }
}

static void test_sample_kernels(void)
{
    /* matmul: plain, either side transposed, both, batch broadcast, 1-D. */
    binary_case("matmul", 2, (int64_t[]){5, 7}, 2, (int64_t[]){7, 3}, false,
                false);
    binary_case("matmul", 2, (int64_t[]){7, 5}, 2, (int64_t[]){7, 3}, true,
                false);
    binary_case("matmul", 2, (int64_t[]){5, 7}, 2, (int64_t[]){3, 7}, false,
                true);
    binary_case("matmul", 2, (int64_t[]){7, 5}, 2, (int64_t[]){3, 7}, true,
                true);
    binary_case("matmul", 3, (int64_t[]){4, 5, 7}, 2, (int64_t[]){7, 3},
                false, false);
    binary_case("matmul", 4, (int64_t[]){2, 1, 5, 7}, 3,
                (int64_t[]){3, 3, 7}, false, true);
    binary_case("matmul", 1, (int64_t[]){7}, 2, (int64_t[]){7, 3}, false,
                false);
    binary_case("matmul", 2, (int64_t[]){5, 7}, 1, (int64_t[]){7}, false,
                false);
    /* add / multiply: same shape, broadcast both ways. */
    binary_case("add", 2, (int64_t[]){4, 6}, 2, (int64_t[]){4, 6}, false,
                false);
    binary_case("add", 2, (int64_t[]){4, 1}, 2, (int64_t[]){1, 6}, false,
                false);
    binary_case("multiply", 3, (int64_t[]){2, 4, 6}, 1, (int64_t[]){6}, false,
                false);

    /* relu on a transposed view. */
    {
        keel_tensor *x[2] = {0}, *v[2] = {0}, *o[2] = {0};
        const char *devs[2] = {DEV, "cpu:0"};
        uint64_t before = keel_fallback_count(op_id("relu"));
        for (int d = 0; d < 2; d++) {
            keel_seed(2);
            OK(keel_uniform(2, (int64_t[]){6, 9}, KEEL_F32, -1, 1, devs[d],
                            &x[d]));
            OK(keel_transpose(x[d], 0, 1, &v[d]));
            OK(keel_relu(v[d], &o[d]));
        }
        CU_ASSERT_EQUAL(rel_diff(o[0], o[1]), 0.0);
        CU_ASSERT_EQUAL(keel_fallback_count(op_id("relu")), before);
        for (int d = 0; d < 2; d++) {
            keel_tensor_free(x[d]);
            keel_tensor_free(v[d]);
            keel_tensor_free(o[d]);
        }
    }
}

/* ---- LeNet through the fallback, against the CPU plugin --------------------- */

#define STEPS 4
#define BATCH 8


/* STEPS Adam steps on seeded random images; losses[] per step. */
static void train(const char *dev, double *losses)
{
    keel_layer *net = NULL, *ce = NULL;
    keel_optimizer *opt = NULL;
    keel_optimizer_options oo;

    OK(keel_set_device(dev));
    keel_seed(3);
    OK(lenet(&net));
    OK(keel_nn_cross_entropy_loss(NULL, &ce));
    oo = keel_optimizer_default_options(KEEL_OPTIM_ADAM);
    oo.learning_rate = 1e-3;
    OK(keel_optimizer_create_from_layer(KEEL_OPTIM_ADAM, net, &oo, &opt));
    for (int step = 0; step < STEPS; step++) {
        keel_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
        OK(keel_uniform(4, (int64_t[]){BATCH, 1, 28, 28}, KEEL_F32, 0, 1,
                        NULL, &x));
        OK(keel_randint(0, 10, 1, (int64_t[]){BATCH}, KEEL_I64, NULL, &y));
        CU_ASSERT(!strcmp(dev, DEV) ? on_sample(x) : !on_sample(x));
        OK(keel_layer_call(net, x, &logits));
        OK(keel_layer_call2(ce, logits, y, &loss));
        OK(keel_backward(loss, NULL, false));
        OK(keel_optimizer_step(opt));
        OK(keel_optimizer_clear_grad(opt));
        OK(keel_tensor_item(loss, 0, &losses[step]));
        keel_tensor_free(loss);
        keel_tensor_free(logits);
        keel_tensor_free(x);
        keel_tensor_free(y);
    }
    keel_optimizer_free(opt);
    keel_layer_free(ce);
    keel_layer_free(net);
    OK(keel_set_device("cpu:0"));
}

static void test_lenet_matches_cpu(void)
{
    double on_dev[STEPS], on_cpu[STEPS];
    uint64_t conv = keel_fallback_count(op_id("conv2d"));
    char line[4096];

    train(DEV, on_dev);
    CU_ASSERT(keel_fallback_count(op_id("conv2d")) >= conv + STEPS * 2);
    train("cpu:0", on_cpu);
    printf("\n  LeNet, %d Adam steps, loss on %s vs cpu:0:", STEPS, DEV);
    for (int i = 0; i < STEPS; i++) {
        printf(" %.6f/%.6f", on_dev[i], on_cpu[i]);
        CU_ASSERT(isfinite(on_dev[i]));
        /* Only the summation order of the sample's loops differs. */
        CU_ASSERT(fabs(on_dev[i] - on_cpu[i]) <= 1e-4 * fabs(on_cpu[i]));
    }
    printf("\n");
    /* Training moved the model: the losses are not one repeated value. */
    CU_ASSERT(on_cpu[0] != on_cpu[STEPS - 1]);
    CU_ASSERT(keel_fallback_summary(line, sizeof(line)) > 0);
    CU_ASSERT(strstr(line, "conv2d.float32") != NULL);
    CU_ASSERT(strstr(line, "from sample") != NULL);
    printf("  %s\n", line);
}

/* ---- an op that writes its inputs, through the fallback -------------------- */

/* check_finite_and_unscale updates x (here a transposed view) and
 * found_inf in place: the fallback must copy both back to the device. */
static void test_inplace_fallback(void)
{
    const float xv[6] = {1, -2, 3, INFINITY, 5, -6};
    int64_t shape[2] = {2, 3}, one = 1, n;
    keel_op_id id = op_id("check_finite_and_unscale");
    uint64_t before = keel_fallback_count(id);
    keel_tensor *x = NULL, *v = NULL, *s = NULL, *f = NULL;
    float sc = 4;
    uint8_t flag = 0;
    double *got;

    OK(keel_tensor_from_host(xv, KEEL_F32, 2, shape, DEV, &x));
    OK(keel_transpose(x, 0, 1, &v));
    OK(keel_tensor_from_host(&sc, KEEL_F32, 1, &one, DEV, &s));
    OK(keel_tensor_from_host(&flag, KEEL_BOOL, 1, &one, DEV, &f));
    OK(keel_check_finite_and_unscale(v, s, f));
    CU_ASSERT_EQUAL(keel_fallback_count(id), before + 1);
    OK(keel_tensor_to_host(f, &flag, 1));
    CU_ASSERT_EQUAL(flag, 1);
    got = host_values(x, &n);
    CU_ASSERT_EQUAL_FATAL(n, 6);
    for (int i = 0; i < 6; i++)
        CU_ASSERT_EQUAL(got[i], (double)xv[i] * 0.25);
    free(got);
    keel_tensor_free(x);
    keel_tensor_free(v);
    keel_tensor_free(s);
    keel_tensor_free(f);
}

/* ---- strict modes ---------------------------------------------------------- */

static void test_strict_modes(void)
{
    keel_tensor *x = NULL, *e = NULL;
    char buf[8192] = "";
    FILE *f;
    size_t n;
    int lines;

    OK(keel_ones(1, (int64_t[]){4}, KEEL_F32, DEV, &x));
    keel_set_strict_mode(KEEL_STRICT_ON);
    CU_ASSERT_TRUE(keel_get_strict());
    CU_ASSERT_EQUAL(keel_exp(x, &e), KEEL_STATUS_NOT_SUPPORTED);
    CU_ASSERT(strstr(keel_last_error(), "exp") != NULL);
    CU_ASSERT(strstr(keel_last_error(), "strict") != NULL);
    CU_ASSERT_PTR_NULL(e);
    /* The four kernels still run. */
    OK(keel_add(x, x, &e));
    keel_tensor_free(e);
    e = NULL;

    keel_set_strict_mode(KEEL_STRICT_REPORT);
    CU_ASSERT_FALSE(keel_get_strict());
    keel_fallback_reset();
    CU_ASSERT_EQUAL(keel_fallback_summary(buf, sizeof(buf)), 0);
    OK(keel_exp(x, &e));
    keel_tensor_free(e);
    OK(keel_sqrt(x, &e));
    keel_tensor_free(e);
    CU_ASSERT_EQUAL(keel_fallback_count(op_id("exp")), 1);
    f = tmpfile();
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    lines = keel_fallback_report(f);
    rewind(f);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    CU_ASSERT_EQUAL(lines, 2);
    CU_ASSERT(strstr(buf, "2 kernels missing") != NULL);
    CU_ASSERT(strstr(buf, "exp") && strstr(buf, "sqrt"));
    keel_set_strict_mode(KEEL_STRICT_OFF);
    keel_tensor_free(x);
}

int main(void)
{
    CU_pSuite s;
    unsigned fails;

    if (keel_set_device(DEV) != KEEL_STATUS_OK) {
        printf("test_fallback: %s is not available: %s\n", DEV,
               keel_last_error());
        return 1;
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    s = CU_add_suite("fallback-sample", NULL, NULL);
    if (!s ||
        !CU_add_test(s, "creation ops with the plugin's device current",
                     test_creation_ops) ||
        !CU_add_test(s, "non-contiguous inputs through the fallback",
                     test_strided_fallback) ||
        !CU_add_test(s, "the plugin's kernels on core layouts",
                     test_sample_kernels) ||
        !CU_add_test(s, "LeNet steps match the CPU plugin",
                     test_lenet_matches_cpu) ||
        !CU_add_test(s, "an in-place op through the fallback",
                     test_inplace_fallback) ||
        !CU_add_test(s, "strict and report modes", test_strict_modes)) {
        CU_cleanup_registry();
        return 2;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return fails ? 1 : 0;
}
