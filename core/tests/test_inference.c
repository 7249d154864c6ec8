/*
 * The Predictor: outputs against eager (bitwise with the IR passes off,
 * within a stated tolerance with BatchNorm folded), each pass on its own,
 * clones, handles, memory optimisation, reduced precision, refusals.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include <keel/inference.h>
#include <keel/runtime.h>

#include "jit_models.h"

static char dir[256];

/* Save m traced with a dynamic batch as dir/tag; returns the prefix. */
static const char *save_model(const char *tag, keel_layer *m, int ndim,
                              const int64_t *spec)
{
    static char prefix[300];
    keel_input_spec s = {.name = "x", .dtype = KEEL_F32, .ndim = ndim,
                         .dim_names = (const char *const[]){
                             "batch", ndim > 2 && spec[1] < 0 ? "seq" : NULL,
                             NULL, NULL}};
    keel_graph *g = NULL;

    memcpy(s.shape, spec, sizeof(int64_t) * (size_t)ndim);
    keel_layer_eval(m);
    if (keel_jit_trace(m, &s, 1, &g) != KEEL_STATUS_OK)
        fprintf(stderr, "trace: %s\n", keel_last_error());
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    snprintf(prefix, sizeof(prefix), "%s/%s", dir, tag);
    OK(keel_jit_save(g, prefix));
    keel_graph_free(g);
    return prefix;
}

static keel_predictor *make(const char *prefix, bool ir, const char *only)
{
    keel_inference_config *c;
    keel_predictor *p = NULL;

    OK(keel_inference_config_create(prefix, &c));
    OK(keel_inference_config_switch_ir_optim(c, ir));
    if (only)
        for (int i = 0; i < keel_inference_num_passes(); i++)
            if (strcmp(keel_inference_pass_name(i), only))
                OK(keel_inference_config_delete_pass(
                    c, keel_inference_pass_name(i)));
    if (keel_predictor_create(c, &p) != KEEL_STATUS_OK)
        fprintf(stderr, "create: %s\n", keel_last_error());
    keel_inference_config_free(c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    return p;
}

/* max |a - b| / max(1, max |b|) over all elements, float32. */
static double rel_diff(const keel_tensor *a, const keel_tensor *b,
                       bool *bitwise)
{
    int64_t n = keel_tensor_numel(a);
    float *x = malloc(sizeof(float) * (size_t)n),
          *y = malloc(sizeof(float) * (size_t)n);
    double worst = 0, scale = 1;

    CU_ASSERT_EQUAL_FATAL(n, keel_tensor_numel(b));
    OK(keel_tensor_to_host(a, x, sizeof(float) * (size_t)n));
    OK(keel_tensor_to_host(b, y, sizeof(float) * (size_t)n));
    *bitwise = !memcmp(x, y, sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs((double)y[i]));
    for (int64_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)x[i] - (double)y[i]));
    free(x);
    free(y);
    return worst / scale;
}

/* Run p on x and compare with the eager forward of m. */
static double versus_eager(keel_predictor *p, keel_layer *m, keel_tensor *x,
                           bool *bitwise)
{
    keel_tensor *eager;
    double d;

    KEEL_NO_GRAD {
        OK(keel_layer_call(m, x, &eager));
    }
    OK(keel_io_handle_share(keel_predictor_input_handle(p, "x"), x));
    OK(keel_predictor_run(p));
    d = rel_diff(keel_io_handle_tensor(keel_predictor_output_handle(p, "out0")),
                 eager, bitwise);
    keel_tensor_free(eager);
    return d;
}

static void check_model(const char *tag, keel_layer *m, int ndim,
                        const int64_t *spec, double tol)
{
    static const int64_t batches[] = {1, 7, 64};
    const char *prefix = save_model(tag, m, ndim, spec);
    keel_predictor *plain = make(prefix, false, NULL);
    keel_predictor *opt = make(prefix, true, NULL);
    char summary[512];
    double worst = 0;

    for (size_t b = 0; b < 3; b++) {
        int64_t shape[KEEL_MAX_DIMS];
        keel_tensor *x;
        bool bitwise;
        double d;

        memcpy(shape, spec, sizeof(int64_t) * (size_t)ndim);
        shape[0] = batches[b];
        if (ndim > 2 && spec[1] < 0)
            shape[1] = 5 + (int64_t)b;
        OK(keel_randn(ndim, shape, KEEL_F32, NULL, &x));
        d = versus_eager(plain, m, x, &bitwise);
        CU_ASSERT_TRUE(bitwise);
        CU_ASSERT_EQUAL(d, 0.0);
        d = versus_eager(opt, m, x, &bitwise);
        worst = fmax(worst, d);
        CU_ASSERT_TRUE(d <= tol);
        keel_tensor_free(x);
    }
    keel_predictor_summary(opt, summary, sizeof(summary));
    printf("\n  %s: optimised vs eager max rel diff %.3g (bound %.0e); %s",
           tag, worst, tol, summary);
    keel_predictor_free(plain);
    keel_predictor_free(opt);
}

static void test_models(void)
{
    keel_layer *m;

    m = mlp();
    check_model("mlp", m, 2, (int64_t[]){-1, 16}, 0.0);
    keel_layer_free(m);
    m = lenet_model();
    check_model("lenet", m, 4, (int64_t[]){-1, 1, 28, 28}, 0.0);
    keel_layer_free(m);
    /* BatchNorm folded into the convs rounds differently. */
    m = resblock();
    check_model("resblock", m, 4, (int64_t[]){-1, 8, 6, 6}, 1e-5);
    keel_layer_free(m);
    m = encoder();
    check_model("encoder", m, 3, (int64_t[]){-1, -1, 32}, 0.0);
    keel_layer_free(m);
}

static int count_op(const keel_graph *g, const char *op)
{
    int n = 0;

    for (int i = 0; i < keel_graph_num_nodes(g); i++)
        n += !strcmp(keel_graph_node_op(g, i), op);
    return n;
}

/* Each pass alone, on a graph made to need it. */
static void test_passes_alone(void)
{
    keel_layer *m = resblock();
    const char *prefix = save_model("passes", m, 4, (int64_t[]){-1, 8, 6, 6});
    keel_predictor *off = make(prefix, false, NULL);
    keel_predictor *bn = make(prefix, true, "batch_norm_folding");
    keel_predictor *dce = make(prefix, true, "dead_code_elimination");
    const keel_graph *g0 = keel_predictor_graph(off);
    const keel_graph *g1 = keel_predictor_graph(bn);

    CU_ASSERT_EQUAL(count_op(g0, "batch_norm"), 2);
    CU_ASSERT_EQUAL(count_op(g1, "batch_norm"), 0);
    CU_ASSERT_EQUAL(count_op(g1, "conv2d"), 2);
    CU_ASSERT_EQUAL(keel_graph_num_nodes(g1), keel_graph_num_nodes(g0) - 2);
    /* Nothing dead in a traced resblock. */
    CU_ASSERT_EQUAL(keel_graph_num_nodes(keel_predictor_graph(dce)),
                    keel_graph_num_nodes(g0));
    keel_predictor_free(off);
    keel_predictor_free(bn);
    keel_predictor_free(dce);
    keel_layer_free(m);
}

/* A forward with a constant subexpression (the weight transposed twice
 * and scaled), a permute pair, and a value nothing reads. */
static keel_status odd_forward(keel_layer *self, keel_tensor *const *in,
                               int n, keel_tensor **out)
{
    keel_tensor *w = keel_layer_parameter(self, "w");
    keel_tensor *t1 = NULL, *t2 = NULL, *s = NULL, *ws = NULL, *y = NULL;
    keel_tensor *unused = NULL, *p1 = NULL, *p2 = NULL;
    keel_status st;

    (void)n;
    st = keel_transpose(w, 0, 1, &t1);
    if (st == KEEL_STATUS_OK)
        st = keel_transpose(t1, 0, 1, &t2);
    if (st == KEEL_STATUS_OK)
        st = keel_full(0, NULL, KEEL_F32, 0.5, NULL, &s);
    if (st == KEEL_STATUS_OK)
        st = keel_multiply(t2, s, &ws);
    if (st == KEEL_STATUS_OK)
        st = keel_exp(in[0], &unused); /* read by nothing */
    if (st == KEEL_STATUS_OK)
        st = keel_matmul(in[0], ws, false, false, &y);
    if (st == KEEL_STATUS_OK)
        st = keel_permute(y, (int[]){1, 0}, &p1);
    if (st == KEEL_STATUS_OK)
        st = keel_permute(p1, (int[]){1, 0}, &p2);
    if (st == KEEL_STATUS_OK)
        st = keel_relu(p2, out);
    keel_tensor_free(t1);
    keel_tensor_free(t2);
    keel_tensor_free(s);
    keel_tensor_free(ws);
    keel_tensor_free(y);
    keel_tensor_free(unused);
    keel_tensor_free(p1);
    keel_tensor_free(p2);
    return st;
}

static const keel_layer_ops odd_ops = {"Odd", odd_forward, NULL};

static void test_passes_odd(void)
{
    keel_layer *m;
    keel_tensor *w, *x;
    const char *prefix;
    keel_predictor *off, *cf, *dce, *te, *all;
    bool bitwise;

    OK(keel_layer_create(&odd_ops, NULL, &m));
    OK(keel_randn(2, (int64_t[]){6, 4}, KEEL_F32, NULL, &w));
    OK(keel_layer_add_parameter(m, "w", w));
    keel_tensor_free(w);
    prefix = save_model("odd", m, 2, (int64_t[]){-1, 6});
    off = make(prefix, false, NULL);
    cf = make(prefix, true, "constant_folding");
    dce = make(prefix, true, "dead_code_elimination");
    te = make(prefix, true, "transpose_elimination");
    all = make(prefix, true, NULL);
    /* transpose, transpose, full, multiply, exp, matmul, permute x2, relu */
    CU_ASSERT_EQUAL(keel_graph_num_nodes(keel_predictor_graph(off)), 9);
    /* The four constant nodes run once at creation. */
    CU_ASSERT_EQUAL(keel_graph_num_nodes(keel_predictor_graph(cf)), 5);
    CU_ASSERT_EQUAL(count_op(keel_predictor_graph(cf), "multiply"), 0);
    /* exp is read by nothing. */
    CU_ASSERT_EQUAL(keel_graph_num_nodes(keel_predictor_graph(dce)), 8);
    CU_ASSERT_EQUAL(count_op(keel_predictor_graph(dce), "exp"), 0);
    /* The permute pair is the identity: both go; the transpose pair of
     * the weight too. */
    CU_ASSERT_EQUAL(count_op(keel_predictor_graph(te), "keel.permute"), 0);
    CU_ASSERT_EQUAL(keel_graph_num_nodes(keel_predictor_graph(te)), 5);
    /* All together: matmul and relu are left. */
    CU_ASSERT_EQUAL(keel_graph_num_nodes(keel_predictor_graph(all)), 2);
    OK(keel_randn(2, (int64_t[]){3, 6}, KEEL_F32, NULL, &x));
    CU_ASSERT_EQUAL(versus_eager(off, m, x, &bitwise), 0.0);
    CU_ASSERT_TRUE(bitwise);
    CU_ASSERT_EQUAL(versus_eager(all, m, x, &bitwise), 0.0);
    CU_ASSERT_TRUE(bitwise);
    keel_tensor_free(x);
    keel_predictor_free(off);
    keel_predictor_free(cf);
    keel_predictor_free(dce);
    keel_predictor_free(te);
    keel_predictor_free(all);
    keel_layer_free(m);
}

/* relu(x @ w + b), and with `twice` (x @ w + b) + x @ w: what ONNX
 * models from other frameworks hold as MatMul + Add. */
static keel_status mm_add_forward(keel_layer *self, keel_tensor *const *in,
                                  int n, keel_tensor **out)
{
    keel_tensor *z = NULL, *y = NULL;
    keel_status st;
    bool twice = keel_layer_parameter(self, "twice") != NULL;

    (void)n;
    st = keel_matmul(in[0], keel_layer_parameter(self, "w"), false, false,
                     &z);
    if (st == KEEL_STATUS_OK)
        st = keel_add(z, keel_layer_parameter(self, "b"), &y);
    if (st == KEEL_STATUS_OK)
        st = twice ? keel_add(y, z, out) : keel_relu(y, out);
    keel_tensor_free(z);
    keel_tensor_free(y);
    return st;
}

static const keel_layer_ops mm_add_ops = {"MatMulAdd", mm_add_forward, NULL};

static keel_layer *mm_add_layer(bool twice)
{
    keel_layer *m;
    keel_tensor *t;

    OK(keel_layer_create(&mm_add_ops, NULL, &m));
    OK(keel_randn(2, (int64_t[]){6, 4}, KEEL_F32, NULL, &t));
    OK(keel_layer_add_parameter(m, "w", t));
    keel_tensor_free(t);
    OK(keel_randn(1, (int64_t[]){4}, KEEL_F32, NULL, &t));
    OK(keel_layer_add_parameter(m, "b", t));
    keel_tensor_free(t);
    if (twice) {
        OK(keel_zeros(1, (int64_t[]){1}, KEEL_F32, NULL, &t));
        OK(keel_layer_add_parameter(m, "twice", t));
        keel_tensor_free(t);
    }
    return m;
}

static void test_linear_folding(void)
{
    keel_layer *m = mm_add_layer(false), *m2 = mm_add_layer(true);
    const char *prefix = save_model("mmadd", m, 3, (int64_t[]){-1, 5, 6});
    keel_predictor *off = make(prefix, false, NULL);
    keel_predictor *lf = make(prefix, true, "linear_folding");
    keel_predictor *all = make(prefix, true, NULL), *lf2;
    keel_tensor *x;
    bool bitwise;
    double d;

    /* matmul, add, relu -> linear, relu -> fused_linear */
    CU_ASSERT_EQUAL(keel_graph_num_nodes(keel_predictor_graph(off)), 3);
    CU_ASSERT_EQUAL(keel_graph_num_nodes(keel_predictor_graph(lf)), 2);
    CU_ASSERT_EQUAL(count_op(keel_predictor_graph(lf), "linear"), 1);
    CU_ASSERT_EQUAL(count_op(keel_predictor_graph(lf), "add"), 0);
    CU_ASSERT_EQUAL(keel_graph_num_nodes(keel_predictor_graph(all)), 1);
    CU_ASSERT_EQUAL(count_op(keel_predictor_graph(all), "fused_linear"), 1);
    OK(keel_randn(3, (int64_t[]){7, 5, 6}, KEEL_F32, NULL, &x));
    d = versus_eager(lf, m, x, &bitwise);
    CU_ASSERT_TRUE(d <= 1e-6);
    d = versus_eager(all, m, x, &bitwise);
    CU_ASSERT_TRUE(d <= 1e-6);
    printf("\n  matmul + add -> linear: max rel diff %.3g from eager%s", d,
           bitwise ? " (bitwise)" : "");
    keel_tensor_free(x);
    /* The matmul's result is read again: nothing to fold. */
    keel_layer_eval(m2);
    prefix = save_model("mmadd2", m2, 3, (int64_t[]){-1, 5, 6});
    lf2 = make(prefix, true, "linear_folding");
    CU_ASSERT_EQUAL(count_op(keel_predictor_graph(lf2), "matmul"), 1);
    CU_ASSERT_EQUAL(count_op(keel_predictor_graph(lf2), "linear"), 0);
    keel_predictor_free(off);
    keel_predictor_free(lf);
    keel_predictor_free(all);
    keel_predictor_free(lf2);
    keel_layer_free(m);
    keel_layer_free(m2);
}

static void test_clone_handles(void)
{
    keel_layer *m = lenet_model();
    const char *prefix = save_model("clone", m, 4,
                                    (int64_t[]){-1, 1, 28, 28});
    keel_predictor *p = make(prefix, true, NULL), *q;
    float in[2 * 784], a[20], b[20];
    int64_t shape[4] = {2, 1, 28, 28};
    keel_dtype dt;
    int nd;
    int64_t sh[KEEL_MAX_DIMS];

    for (int i = 0; i < 2 * 784; i++)
        in[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    OK(keel_predictor_clone(p, &q));
    CU_ASSERT_PTR_EQUAL(keel_predictor_graph(p), keel_predictor_graph(q));
    CU_ASSERT_EQUAL(keel_predictor_num_inputs(q), 1);
    CU_ASSERT_STRING_EQUAL(keel_predictor_input_name(q, 0), "x");
    CU_ASSERT_STRING_EQUAL(keel_predictor_output_name(q, 0), "out0");
    OK(keel_io_handle_shape(keel_predictor_input_handle(p, "x"), &dt, &nd,
                            sh));
    CU_ASSERT_EQUAL(nd, 4);
    CU_ASSERT_EQUAL(sh[0], -1);
    OK(keel_io_handle_copy_from_host(keel_predictor_input_handle(p, "x"), in,
                                     KEEL_F32, 4, shape));
    OK(keel_io_handle_copy_from_host(keel_predictor_input_handle(q, "x"), in,
                                     KEEL_F32, 4, shape));
    OK(keel_predictor_run(p));
    OK(keel_predictor_run(q));
    OK(keel_io_handle_copy_to_host(keel_predictor_output_handle(p, "out0"),
                                   a, sizeof(a)));
    OK(keel_io_handle_copy_to_host(keel_predictor_output_handle(q, "out0"),
                                   b, sizeof(b)));
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof(a)), 0);
    /* Refusals. */
    CU_ASSERT_PTR_NULL(keel_predictor_input_handle(p, "image"));
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "'image'"));
    CU_ASSERT_EQUAL(keel_io_handle_copy_from_host(
                        keel_predictor_input_handle(p, "x"), in, KEEL_F64, 4,
                        shape),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(keel_io_handle_copy_from_host(
                        keel_predictor_output_handle(p, "out0"), in, KEEL_F32,
                        4, shape),
                    KEEL_STATUS_INVALID_ARGUMENT);
    keel_predictor_free(p);
    /* The clone holds the shared graph alone now. */
    OK(keel_predictor_run(q));
    keel_predictor_free(q);
    keel_layer_free(m);
}

static void test_memory(void)
{
    keel_layer *m = encoder();
    const char *prefix = save_model("memory", m, 3, (int64_t[]){-1, -1, 32});
    keel_inference_config *c;
    keel_predictor *on = make(prefix, true, NULL), *off;
    keel_predictor_memory_info mon, moff;
    keel_tensor *x;
    bool bitwise;

    OK(keel_inference_config_create(prefix, &c));
    OK(keel_inference_config_enable_memory_optim(c, false));
    OK(keel_predictor_create(c, &off));
    keel_inference_config_free(c);
    OK(keel_randn(3, (int64_t[]){16, 24, 32}, KEEL_F32, NULL, &x));
    versus_eager(on, m, x, &bitwise);
    versus_eager(off, m, x, &bitwise);
    OK(keel_predictor_memory(on, &mon));
    OK(keel_predictor_memory(off, &moff));
    printf("\n  encoder batch 16 x 24: run peak %llu bytes with memory "
           "optimisation, %llu without; plan %llu of %llu bytes",
           (unsigned long long)mon.run_peak_bytes,
           (unsigned long long)moff.run_peak_bytes,
           (unsigned long long)mon.planned_peak_bytes,
           (unsigned long long)mon.unplanned_bytes);
    CU_ASSERT_TRUE(mon.planned_peak_bytes > 0);
    CU_ASSERT_TRUE(mon.planned_peak_bytes < mon.unplanned_bytes / 2);
    CU_ASSERT_TRUE(mon.run_peak_bytes < moff.run_peak_bytes);
    keel_tensor_free(x);
    keel_predictor_free(on);
    keel_predictor_free(off);
    keel_layer_free(m);
}

static void test_precision(void)
{
    keel_layer *m = mlp();
    const char *prefix = save_model("bf16", m, 2, (int64_t[]){-1, 16});
    keel_inference_config *c;
    keel_predictor *p;
    keel_tensor *x;
    bool bitwise;
    double d;

    OK(keel_inference_config_create(prefix, &c));
    CU_ASSERT_EQUAL(keel_inference_config_set_precision(c, KEEL_I32),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(keel_inference_config_delete_pass(c, "no_such_pass"),
                    KEEL_STATUS_INVALID_ARGUMENT);
    OK(keel_inference_config_set_precision(c, KEEL_BF16));
    OK(keel_inference_config_set_threads(c, 1));
    OK(keel_predictor_create(c, &p));
    keel_inference_config_free(c);
    OK(keel_randn(2, (int64_t[]){8, 16}, KEEL_F32, NULL, &x));
    d = versus_eager(p, m, x, &bitwise);
    printf("\n  mlp in bfloat16: max rel diff %.3g from float32", d);
    CU_ASSERT_FALSE(bitwise); /* it did run in bfloat16 */
    CU_ASSERT_TRUE(d < 3e-2);
    CU_ASSERT_EQUAL(keel_tensor_dtype(keel_io_handle_tensor(
                        keel_predictor_output_handle(p, "out0"))),
                    KEEL_F32);
    keel_tensor_free(x);
    keel_predictor_free(p);
    keel_layer_free(m);
}

int main(void)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {
        {"four models against eager, batch 1/7/64", test_models},
        {"batch_norm_folding and dead code on a resblock",
         test_passes_alone},
        {"constant folding, dead code, transposes, alone and together",
         test_passes_odd},
        {"matmul + bias add folded into linear", test_linear_folding},
        {"clones and handles", test_clone_handles},
        {"memory optimisation", test_memory},
        {"bfloat16 precision", test_precision},
    };
    CU_pSuite s;
    unsigned failed;
    const char *tmp = getenv("TMPDIR");
    char cmd[300];

    snprintf(dir, sizeof(dir), "%s/keel-infer-XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(dir) || CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    keel_seed(11);
    s = CU_add_suite("inference", NULL, NULL);
    for (size_t i = 0; s && i < sizeof(tests) / sizeof(tests[0]); i++)
        CU_add_test(s, tests[i].name, tests[i].fn);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed() +
             CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    keel_shutdown();
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return failed ? 1 : 0;
}
