/*
 * jit: tracing layers into graphs, running them, saving and loading them.
 *
 * Four models (an MLP, LeNet, a residual block with BatchNorm, a
 * transformer encoder block) are traced with a dynamic batch (and, for the
 * encoder, a dynamic sequence), then run at batch 1, 7 and 64 eagerly,
 * from the graph, and from the graph saved and loaded again: the CPU
 * results must be bitwise equal, since the graph runs the same kernels on
 * the same inputs. The loader is fed a corpus of broken files, each
 * refused with CORRUPT and a message naming the problem.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include <keel/autograd.h>
#include <keel/jit.h>
#include <keel/runtime.h>

#include "jit_models.h"

#define OK(expr) CU_ASSERT_EQUAL_FATAL((expr), KEEL_STATUS_OK)

/* The catalog version a saved graph names, as text ("3"). */
#define TEXT_OF_(x) #x
#define TEXT_OF(x) TEXT_OF_(x)
#define CATALOG_VERSION_TEXT TEXT_OF(KEEL_OP_CATALOG_VERSION)

static char dir[256];

/* ---- helpers ----------------------------------------------------------------- */

static bool bitwise_equal(const keel_tensor *a, const keel_tensor *b)
{
    int64_t n = keel_tensor_numel(a);
    size_t bytes;
    void *ha, *hb;
    bool eq;

    if (keel_tensor_dtype(a) != keel_tensor_dtype(b) ||
        keel_tensor_ndim(a) != keel_tensor_ndim(b) ||
        memcmp(keel_tensor_shape(a), keel_tensor_shape(b),
               sizeof(int64_t) * (size_t)keel_tensor_ndim(a)))
        return false;
    bytes = (size_t)n * keel_dtype_size(keel_tensor_dtype(a));
    ha = malloc(bytes + 1);
    hb = malloc(bytes + 1);
    eq = ha && hb && keel_tensor_to_host(a, ha, bytes) == KEEL_STATUS_OK &&
         keel_tensor_to_host(b, hb, bytes) == KEEL_STATUS_OK &&
         !memcmp(ha, hb, bytes);
    free(ha);
    free(hb);
    return eq;
}

static keel_graph *trace1(keel_layer *m, keel_dtype dt, int ndim,
                          const int64_t *shape, const char *const *names)
{
    keel_input_spec s = {.name = "x", .dtype = dt, .ndim = ndim,
                         .dim_names = names};
    keel_graph *g = NULL;

    memcpy(s.shape, shape, sizeof(int64_t) * (size_t)ndim);
    if (keel_jit_trace(m, &s, 1, &g) != KEEL_STATUS_OK)
        fprintf(stderr, "trace: %s\n", keel_last_error());
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    return g;
}

/* Eager vs graph vs saved-and-loaded graph vs TranslatedLayer, bitwise,
 * at each batch size. */
static void check_model(const char *tag, keel_layer *m, int ndim,
                        const int64_t *spec, const char *const *names,
                        int64_t seq)
{
    static const int64_t batches[] = {1, 7, 64};
    char prefix[300];
    keel_graph *g, *g2;
    keel_layer *tl;

    keel_layer_eval(m);
    g = trace1(m, KEEL_F32, ndim, spec, names);
    snprintf(prefix, sizeof(prefix), "%s/%s", dir, tag);
    OK(keel_jit_save(g, prefix));
    if (keel_jit_load(prefix, NULL, &g2) != KEEL_STATUS_OK)
        fprintf(stderr, "load: %s\n", keel_last_error());
    CU_ASSERT_PTR_NOT_NULL_FATAL(g2);
    CU_ASSERT_EQUAL(keel_graph_num_nodes(g2), keel_graph_num_nodes(g));
    CU_ASSERT_EQUAL(keel_graph_num_constants(g2),
                    keel_graph_num_constants(g));
    OK(keel_jit_layer(g2, &tl));
    for (size_t b = 0; b < sizeof(batches) / sizeof(batches[0]); b++) {
        int64_t shape[KEEL_MAX_DIMS];
        keel_tensor *x, *eager, *y1, *y2, *y3;
        int n;

        memcpy(shape, spec, sizeof(int64_t) * (size_t)ndim);
        shape[0] = batches[b];
        if (seq > 0)
            shape[1] = seq + (int64_t)b; /* a different length each time */
        OK(keel_randn(ndim, shape, KEEL_F32, NULL, &x));
        KEEL_NO_GRAD {
            OK(keel_layer_call(m, x, &eager));
        }
        OK(keel_graph_run(g, &x, 1, &y1, 1, &n));
        CU_ASSERT_EQUAL(n, 1);
        OK(keel_graph_run(g2, &x, 1, &y2, 1, &n));
        OK(keel_layer_call(tl, x, &y3));
        CU_ASSERT_TRUE(bitwise_equal(eager, y1));
        CU_ASSERT_TRUE(bitwise_equal(eager, y2));
        CU_ASSERT_TRUE(bitwise_equal(eager, y3));
        keel_tensor_free(x);
        keel_tensor_free(eager);
        keel_tensor_free(y1);
        keel_tensor_free(y2);
        keel_tensor_free(y3);
    }
    keel_layer_free(tl);
    keel_graph_free(g2);
    keel_graph_free(g);
}

/* ---- tests ----------------------------------------------------------------------- */

static void test_mlp(void)
{
    keel_layer *m = mlp();

    check_model("mlp", m, 2, (int64_t[]){-1, 16}, NULL, 0);
    keel_layer_free(m);
}

static void test_lenet(void)
{
    keel_layer *m = lenet_model();
    keel_graph *g;
    keel_dtype dt;
    int64_t shape[KEEL_MAX_DIMS];
    int nd;

    check_model("lenet", m, 4, (int64_t[]){-1, 1, 28, 28},
                (const char *const[]){"batch", NULL, NULL, NULL}, 0);
    /* The flatten keeps the batch symbol: a reshape to [batch, 400]. */
    g = trace1(m, KEEL_F32, 4, (int64_t[]){-1, 1, 28, 28},
               (const char *const[]){"batch", NULL, NULL, NULL});
    CU_ASSERT_STRING_EQUAL(keel_graph_input_name(g, 0), "x");
    OK(keel_graph_value_info(g, false, 0, &dt, &nd, shape));
    CU_ASSERT_EQUAL(nd, 4);
    CU_ASSERT_EQUAL(shape[0], -1);
    CU_ASSERT_EQUAL(shape[1], 1);
    OK(keel_graph_value_info(g, true, 0, &dt, &nd, shape));
    CU_ASSERT_EQUAL(nd, 2);
    CU_ASSERT_EQUAL(shape[0], -1);
    CU_ASSERT_EQUAL(shape[1], 10);
    CU_ASSERT_EQUAL(keel_graph_num_constants(g), 10);
    keel_graph_free(g);
    keel_layer_free(m);
}

static void test_resblock(void)
{
    keel_layer *m = resblock();

    check_model("resblock", m, 4, (int64_t[]){-1, 8, 6, 6}, NULL, 0);
    keel_layer_free(m);
}

static void test_encoder(void)
{
    keel_layer *m = encoder();

    check_model("encoder", m, 3, (int64_t[]){-1, -1, 32},
                (const char *const[]){"batch", "seq", NULL}, 5);
    keel_layer_free(m);
}

/* What a graph refuses when it runs, and what a trace refuses. */
static void test_refusals(void)
{
    keel_layer *m = mlp(), *r = resblock();
    keel_graph *g;
    keel_tensor *x, *y;
    keel_input_spec s = {.dtype = KEEL_F32, .ndim = 4,
                         .shape = {-1, 8, 6, 6}};

    g = trace1(m, KEEL_F32, 2, (int64_t[]){-1, 16}, NULL);
    OK(keel_zeros(2, (int64_t[]){3, 15}, KEEL_F32, NULL, &x));
    CU_ASSERT_EQUAL(keel_graph_run(g, &x, 1, &y, 1, NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "[x.0, 16]"));
    keel_tensor_free(x);
    OK(keel_zeros(2, (int64_t[]){3, 16}, KEEL_F64, NULL, &x));
    CU_ASSERT_EQUAL(keel_graph_run(g, &x, 1, &y, 1, NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "float64"));
    CU_ASSERT_EQUAL(keel_graph_run(g, &x, 1, &y, 0, NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    keel_tensor_free(x);
    keel_graph_free(g);

    /* BatchNorm in training mode writes its running statistics. */
    keel_layer_train(r);
    CU_ASSERT_EQUAL(keel_jit_trace(r, &s, 1, &g), KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "keel_layer_eval"));
    /* Bad specs. */
    s.shape[1] = -3;
    CU_ASSERT_EQUAL(keel_jit_trace(r, &s, 1, &g), KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(keel_jit_trace(r, &s, 0, &g), KEEL_STATUS_INVALID_ARGUMENT);
    keel_layer_free(r);
    keel_layer_free(m);
}

/* A forward whose reshape the symbols cannot say: [a, b, c, d] ->
 * [a * b, c * d] has two dimensions that are products of symbols, and a
 * reshape can infer only one. */
static keel_status bad_forward(keel_layer *self, keel_tensor *const *in,
                               int n, keel_tensor **out)
{
    const int64_t *sh = keel_tensor_shape(in[0]);

    (void)self;
    (void)n;
    return keel_reshape(in[0], 2, (int64_t[]){sh[0] * sh[1], sh[2] * sh[3]},
                        out);
}

static const keel_layer_ops bad_ops = {"Bad", bad_forward, NULL};

static keel_status host_forward(keel_layer *self, keel_tensor *const *in,
                                int n, keel_tensor **out)
{
    /* A value built on the host from the input's data: keel cannot see. */
    float buf[4];
    keel_tensor *c;
    keel_status st;

    (void)self;
    (void)n;
    st = keel_tensor_to_host(in[0], buf, sizeof(buf));
    if (st == KEEL_STATUS_OK)
        st = keel_tensor_from_host(buf, KEEL_F32, 1, (int64_t[]){4}, NULL,
                                   &c);
    if (st != KEEL_STATUS_OK)
        return st;
    st = keel_add(in[0], c, out);
    keel_tensor_free(c);
    return st;
}

static const keel_layer_ops host_ops = {"Host", host_forward, NULL};

static void test_untraceable(void)
{
    keel_layer *m;
    keel_graph *g = NULL;
    keel_input_spec s = {.dtype = KEEL_F32, .ndim = 4,
                         .shape = {-1, -1, -1, -1}};
    keel_input_spec h = {.dtype = KEEL_F32, .ndim = 1, .shape = {4}};

    OK(keel_layer_create(&bad_ops, NULL, &m));
    CU_ASSERT_EQUAL(keel_jit_trace(m, &s, 1, &g), KEEL_STATUS_NOT_SUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "keel.reshape"));
    CU_ASSERT_PTR_NULL(g);
    keel_layer_free(m);
    OK(keel_layer_create(&host_ops, NULL, &m));
    CU_ASSERT_EQUAL(keel_jit_trace(m, &h, 1, &g), KEEL_STATUS_NOT_SUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "depends on the inputs"));
    keel_layer_free(m);
}

/* ---- the corrupt-file corpus -------------------------------------------------- */

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    char *b;
    long len;

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, 0, SEEK_SET);
    b = malloc((size_t)len + 1);
    CU_ASSERT_EQUAL_FATAL(fread(b, 1, (size_t)len, f), (size_t)len);
    b[len] = 0;
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* text with the first `from` replaced by `to` (must occur). */
static char *edit(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    size_t a, n;
    char *o;

    CU_ASSERT_PTR_NOT_NULL_FATAL(at);
    a = (size_t)(at - text);
    n = strlen(text) - strlen(from) + strlen(to);
    o = malloc(n + 1);
    memcpy(o, text, a);
    memcpy(o + a, to, strlen(to));
    strcpy(o + a + strlen(to), at + strlen(from));
    return o;
}

static void test_corrupt_files(void)
{
    keel_layer *m = lenet_model();
    char prefix[300], wpath[320], jpath[320];
    keel_graph *g;
    size_t n;
    char *text;
    int refused = 0;
    struct {
        const char *from, *to, *says;
    } cases[] = {
        {"\"keel.graph\"", "\"keel.grph\"", "not a keel graph file"},
        {"\"version\": 1", "\"version\": 2", "newer keel"},
        {"\"catalog_version\": " CATALOG_VERSION_TEXT,
         "\"catalog_version\": 99", "op catalog version 99"},
        {"\"op\": \"conv2d\"", "\"op\": \"conv3d\"", "unknown op"},
        {"\"op\": \"relu\"", "\"op\": \"keel.permute\"", "'perm'"},
        {"\"stride\": [", "\"strides\": [", "unknown attribute 'strides'"},
        {"\"groups\": 1", "\"groups\": \"one\"", "must be an integer"},
        {"\"ceil_mode\": false", "\"ceil_mode\": 0", "true or false"},
        {"\"EXPLICIT\"", "[\"EXPLICIT\"]", "must be a string"},
        /* conv2d reads relu's output, made later: a cycle */
        {"\"inputs\": [\n    0,", "\"inputs\": [\n    4,",
         "before any node defines it"},
        {"\"outputs\": [\n    4\n", "\"outputs\": [\n    3\n",
         "defined a second time"},
        {"\"name\": \"0.weight\"", "\"name\": \"0.weights\"",
         "not in the weights file"},
        {"\"float32\",\n   \"shape\": [\n    6,\n    1,",
         "\"float16\",\n   \"shape\": [\n    6,\n    1,",
         "in the weights file; the graph"},
        {"\"float32\"", "\"float33\"", "unknown"},
        {"\"batch\",\n    1,", "\"bat\",\n    1,", "no declared symbol"},
        {"\"batch\",\n    1,", "\"0*batch\",\n    1,", "<k>*<symbol>"},
        {"\"batch\",\n    1,", "-2,\n    1,", "dimension -2"},
        {"\"crc32\": ", "\"crc32\": 1", "not the one this graph"},
        {"\"symbols\": [", "\"symbols\": [\"batch\",", "declared twice"},
        {"{", "[", "not JSON"},
        {"\"nodes\"", "\"nodez\"", "'nodes' is missing"},
        {"\"outputs\": [\n  {", "\"outputs\": [\n  {\"name\": \"y\", "
                                "\"value\": 99999}, {",
         "'value' index"},
    };

    snprintf(prefix, sizeof(prefix), "%s/corrupt", dir);
    snprintf(jpath, sizeof(jpath), "%s.keel.json", prefix);
    snprintf(wpath, sizeof(wpath), "%s.safetensors", prefix);
    keel_layer_eval(m);
    g = trace1(m, KEEL_F32, 4, (int64_t[]){-1, 1, 28, 28},
               (const char *const[]){"batch", NULL, NULL, NULL});
    OK(keel_jit_save(g, prefix));
    keel_graph_free(g);
    text = slurp(jpath, &n);
    /* The file as saved loads. */
    OK(keel_jit_load_buffer(text, n, wpath, NULL, &g));
    keel_graph_free(g);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *bad = edit(text, cases[i].from, cases[i].to);
        keel_status st = keel_jit_load_buffer(bad, strlen(bad), wpath, NULL,
                                              &g);
        if (st == KEEL_STATUS_OK || !strstr(keel_last_error(), cases[i].says))
            fprintf(stderr, "case %zu (%s): status %d, '%s'\n", i,
                    cases[i].to, (int)st, keel_last_error());
        CU_ASSERT_EQUAL(st, KEEL_STATUS_CORRUPT);
        CU_ASSERT_PTR_NULL(g);
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), cases[i].says));
        refused += st == KEEL_STATUS_CORRUPT;
        free(bad);
    }
    /* Every cut of the file is refused cleanly too. */
    for (size_t cut = 0; cut < n; cut += 97) {
        keel_status st = keel_jit_load_buffer(text, cut, wpath, NULL, &g);
        CU_ASSERT_NOT_EQUAL(st, KEEL_STATUS_OK);
        CU_ASSERT_PTR_NULL(g);
    }
    printf("\n  corrupt graph files refused: %d of %zu\n", refused,
           sizeof(cases) / sizeof(cases[0]));
    /* Missing files name themselves. */
    snprintf(prefix, sizeof(prefix), "%s/absent", dir);
    CU_ASSERT_EQUAL(keel_jit_load(prefix, NULL, &g), KEEL_STATUS_NOT_FOUND);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "absent"));
    free(text);
    keel_layer_free(m);
}

/* A failed save leaves the previous files as they were. */
static void test_save_atomic(void)
{
    keel_layer *m = mlp();
    keel_graph *g;
    char prefix[300], jpath[320];
    char *before, *after;
    size_t n1, n2;

    snprintf(prefix, sizeof(prefix), "%s/atomic", dir);
    snprintf(jpath, sizeof(jpath), "%s.keel.json", prefix);
    keel_layer_eval(m);
    g = trace1(m, KEEL_F32, 2, (int64_t[]){-1, 16}, NULL);
    OK(keel_jit_save(g, prefix));
    before = slurp(jpath, &n1);
    setenv("KEEL_TEST_FAIL_SAVE_AT", "rename", 1);
    CU_ASSERT_EQUAL(keel_jit_save(g, prefix), KEEL_STATUS_IO_ERROR);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "keel_jit_save"));
    unsetenv("KEEL_TEST_FAIL_SAVE_AT");
    after = slurp(jpath, &n2);
    CU_ASSERT_EQUAL(n1, n2);
    CU_ASSERT_EQUAL(memcmp(before, after, n1), 0);
    free(before);
    free(after);
    keel_graph_free(g);
    keel_layer_free(m);
}

int main(void)
{
    CU_pSuite s;
    int failures;
    const char *tmp = getenv("TMPDIR");

    snprintf(dir, sizeof(dir), "%s/keel-jit-XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        return 1;
    keel_seed(7);
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("jit", NULL, NULL);
    CU_add_test(s, "mlp: eager = graph = loaded, batch 1/7/64", test_mlp);
    CU_add_test(s, "lenet: eager = graph = loaded, batch 1/7/64", test_lenet);
    CU_add_test(s, "resblock with BatchNorm", test_resblock);
    CU_add_test(s, "encoder block, dynamic batch and sequence",
                test_encoder);
    CU_add_test(s, "refusals at run and trace", test_refusals);
    CU_add_test(s, "untraceable forwards", test_untraceable);
    CU_add_test(s, "corrupt graph files", test_corrupt_files);
    CU_add_test(s, "a failed save keeps the old files", test_save_atomic);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failures = (int)(CU_get_number_of_failures() +
                     CU_get_number_of_tests_failed() +
                     CU_get_number_of_suites_failed());
    CU_cleanup_registry();
    keel_shutdown();
    {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd)) {
        }
    }
    return failures ? 1 : 0;
}
