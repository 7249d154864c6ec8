/*
 * Bad input to the public tensor and op API, and to the CPU plugin's
 * kernel entry points: shapes whose element count, byte size or strides do
 * not fit in int64_t, and arguments that used to be clamped or ignored.
 * Each call must fail with INVALID_ARGUMENT (or OUT_OF_MEMORY where the
 * shape is legal but cannot be allocated) and a message that names what
 * was wrong; nothing may crash, which the sanitizer build checks.
 *
 * Runs on the CPU plugin with a 64 MiB memory limit, so a legal but huge
 * shape is refused by the plugin before any host allocation is attempted.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>

#include <keel/ops.h>

#define P2(n) ((int64_t)1 << (n))

/* `st` is `want` and the message holds every one of parts (NULL-ended). */
static bool err_(keel_status st, keel_status want, const char *const *parts,
                 const char *what)
{
    bool good = st == want;

    for (int i = 0; good && parts[i]; i++)
        good = strstr(keel_last_error(), parts[i]) != NULL;
    if (!good)
        fprintf(stderr, "\n  %s: got %s '%s', wanted %s with '%s'\n", what,
                keel_status_name(st),
                st == KEEL_STATUS_OK ? "" : keel_last_error(),
                keel_status_name(want), parts[0] ? parts[0] : "");
    return good;
}
#define ERR(call, want, ...)                                                  \
    CU_ASSERT(err_((call), (want), (const char *const[]){__VA_ARGS__, NULL},  \
                   #call))
#define BAD(call, ...) ERR(call, KEEL_STATUS_INVALID_ARGUMENT, __VA_ARGS__)

static bool ok_(keel_status st, const char *what)
{
    if (st != KEEL_STATUS_OK)
        fprintf(stderr, "\n  %s: %s: %s\n", what, keel_status_name(st),
                keel_last_error());
    return st == KEEL_STATUS_OK;
}
#define OK(call) CU_ASSERT_FATAL(ok_((call), #call))

static keel_tensor *vec(int64_t n)
{
    keel_tensor *t = NULL;

    OK(keel_arange(0, (double)n, 1, KEEL_F32, NULL, &t));
    return t;
}

/* ---- element counts and byte sizes ----------------------------------------- */

static void test_creation_overflow(void)
{
    keel_tensor *t = (keel_tensor *)1;

    /* 2^80 elements: used to wrap to 0 and divide by it in the plugin. */
    BAD(keel_zeros(2, (int64_t[]){P2(40), P2(40)}, KEEL_F32, NULL, &t),
        "keel_zeros", "[1099511627776, 1099511627776]", "float32",
        "too large");
    CU_ASSERT_PTR_NULL(t);
    /* 2^64 elements: wrapped to exactly 0. */
    BAD(keel_ones(2, (int64_t[]){P2(32), P2(32)}, KEEL_F32, NULL, &t),
        "keel_ones", "[4294967296, 4294967296]");
    /* 2^62 elements fit int64, but not 2^64 bytes: used to get 0 bytes of
     * storage that later kernels read and wrote past. */
    BAD(keel_empty(1, (int64_t[]){P2(62)}, KEEL_F32, NULL, &t), "keel_empty",
        "[4611686018427387904]", "4 bytes per element");
    BAD(keel_full(1, (int64_t[]){P2(62)}, KEEL_F64, 1.0, NULL, &t),
        "keel_full", "float64");
    BAD(keel_tensor_from_host(&t, KEEL_I64, 2, (int64_t[]){P2(31), P2(31)},
                              NULL, &t),
        "keel_tensor_from_host", "int64");
    BAD(keel_eye(P2(40), P2(40), KEEL_F32, NULL, &t), "keel_eye");
    BAD(keel_rand(3, (int64_t[]){P2(21), P2(21), P2(21)}, KEEL_F32, NULL, &t),
        "keel_uniform", "[2097152, 2097152, 2097152]");
    CU_ASSERT_PTR_NULL(t);
}

/* The limit is on bytes: the largest legal float32 vector has
 * (2^63-1)/4 elements; one more is refused before any allocation. */
static void test_limit_boundary(void)
{
    keel_tensor *t = NULL;
    int64_t ok = INT64_MAX / 4, over = ok + 1;

    BAD(keel_empty(1, &over, KEEL_F32, NULL, &t), "too large");
    ERR(keel_empty(1, &ok, KEEL_F32, NULL, &t), KEEL_STATUS_OUT_OF_MEMORY,
        "cpu:0");
    BAD(keel_empty(1, (int64_t[]){INT64_MAX}, KEEL_F16, NULL, &t),
        "too large");
    ERR(keel_empty(1, (int64_t[]){INT64_MAX}, KEEL_U8, NULL, &t),
        KEEL_STATUS_OUT_OF_MEMORY, "cpu:0");
    CU_ASSERT_PTR_NULL(t);
}

/* A zero dimension makes the tensor empty but its strides still come
 * from the other dimensions, which must not overflow. */
static void test_empty_shapes(void)
{
    keel_tensor *t = NULL, *v = NULL;
    const int64_t *s;

    BAD(keel_empty(3, (int64_t[]){0, P2(62), P2(62)}, KEEL_F32, NULL, &t),
        "keel_empty", "[0, 4611686018427387904, 4611686018427387904]",
        "a 0 counted as 1");
    BAD(keel_tensor_from_host(NULL, KEEL_U8, 3,
                              (int64_t[]){0, P2(62), P2(62)}, NULL, &t),
        "keel_tensor_from_host", "[0, 4611686018427387904");
    /* Within the limit: exact strides, no storage. */
    OK(keel_empty(3, (int64_t[]){0, P2(31), P2(31)}, KEEL_U8, NULL, &t));
    s = keel_tensor_strides(t);
    CU_ASSERT(s[0] == P2(62) && s[1] == P2(31) && s[2] == 1);
    CU_ASSERT_EQUAL(keel_tensor_numel(t), 0);
    /* Reductions over it are well defined. */
    OK(keel_sum(t, 0, NULL, false, &v));
    CU_ASSERT_EQUAL(keel_tensor_numel(v), 1);
    keel_tensor_free(v);
    keel_tensor_free(t);
}

static void test_random_refused_consumes_nothing(void)
{
    uint64_t seed0, c0, seed1, c1;
    keel_tensor *t = NULL;

    keel_seed(7);
    keel_rng_get_state(&seed0, &c0);
    BAD(keel_randn(2, (int64_t[]){P2(40), P2(40)}, KEEL_F32, NULL, &t),
        "keel_normal", "too large");
    keel_rng_get_state(&seed1, &c1);
    CU_ASSERT(seed0 == seed1 && c0 == c1);
}

static void test_view_overflow(void)
{
    keel_tensor *x = vec(4), *e = NULL, *y = NULL, *z = NULL;

    /* reshape: a product that overflows before the -1 is inferred */
    BAD(keel_reshape(x, 3, (int64_t[]){P2(40), P2(40), -1}, &y),
        "keel_reshape", "[1099511627776, 1099511627776, -1]");
    /* reshape of an empty tensor: equal (zero) counts, huge strides */
    OK(keel_empty(1, (int64_t[]){0}, KEEL_F32, NULL, &e));
    BAD(keel_reshape(e, 3, (int64_t[]){0, P2(62), P2(62)}, &y),
        "keel_reshape", "[0, 4611686018427387904, 4611686018427387904]");
    OK(keel_reshape(e, 3, (int64_t[]){0, P2(20), P2(20)}, &y));
    CU_ASSERT_EQUAL(keel_tensor_strides(y)[0], P2(40));
    keel_tensor_free(y);
    y = NULL;
    /* expand: stride 0 costs no memory, but the count must fit */
    OK(keel_reshape(x, 2, (int64_t[]){4, 1}, &y));
    BAD(keel_expand(y, 3, (int64_t[]){P2(40), 4, P2(40)}, &z), "keel_expand",
        "[1099511627776, 4, 1099511627776]");
    CU_ASSERT_PTR_NULL(z);
    OK(keel_expand(y, 3, (int64_t[]){P2(20), 4, P2(20)}, &z));
    CU_ASSERT_EQUAL(keel_tensor_numel(z), P2(42));
    keel_tensor_free(z);
    keel_tensor_free(y);
    keel_tensor_free(e);
    keel_tensor_free(x);
}

/* Extreme steps address one element; the length used to overflow. */
static void test_slice_extreme_steps(void)
{
    keel_tensor *x = vec(5), *y = NULL;
    double v = -1;

    OK(keel_slice(x, 0, 0, INT64_MAX, INT64_MAX, &y));
    CU_ASSERT_EQUAL(keel_tensor_numel(y), 1);
    OK(keel_tensor_item(y, 0, &v));
    CU_ASSERT_EQUAL(v, 0);
    keel_tensor_free(y);
    OK(keel_slice(x, 0, -1, INT64_MIN, INT64_MIN, &y));
    CU_ASSERT_EQUAL(keel_tensor_numel(y), 1);
    OK(keel_tensor_item(y, 0, &v));
    CU_ASSERT_EQUAL(v, 4);
    keel_tensor_free(y);
    OK(keel_slice(x, 0, INT64_MAX, INT64_MIN, -2, &y));
    CU_ASSERT_EQUAL(keel_tensor_numel(y), 3);
    OK(keel_tensor_item(y, 2, &v));
    CU_ASSERT_EQUAL(v, 0);
    keel_tensor_free(y);
    keel_tensor_free(x);
}

static void test_op_output_overflow(void)
{
    keel_tensor *x = vec(2), *e = NULL, *y = NULL;

    BAD(keel_tile(x, 1, (int64_t[]){INT64_MAX}, &y), "tile",
        "repeat_times[0]", "does not fit");
    BAD(keel_pad(x, 2, (int64_t[]){0, INT64_MAX}, "constant", 0, &y), "pad",
        "does not fit");
    /* a legal count whose bytes do not fit: refused at allocation */
    BAD(keel_tile(x, 1, (int64_t[]){P2(61)}, &y), "[4611686018427387904]",
        "float32", "too large");
    /* an empty output whose strides would overflow */
    OK(keel_empty(2, (int64_t[]){0, 1}, KEEL_F32, NULL, &e));
    BAD(keel_tile(e, 3, (int64_t[]){P2(62), 1, P2(62)}, &y), "too large");
    CU_ASSERT_PTR_NULL(y);
    keel_tensor_free(e);
    keel_tensor_free(x);
}

/* Sums and products of attributes in the shape rules are checked too. */
static void test_shape_rule_overflow(void)
{
    keel_tensor *one = NULL, *big = NULL, *x = vec(4), *y = NULL;
    keel_tensor *img = NULL, *w = NULL, *outs[3] = {NULL, NULL, NULL};
    keel_conv2d_params p = keel_conv2d_default_params();

    /* concat of two 2^62-byte views (stride 0, no memory) */
    OK(keel_ones(1, (int64_t[]){1}, KEEL_U8, NULL, &one));
    OK(keel_expand(one, 1, (int64_t[]){P2(62)}, &big));
    BAD(keel_concat((keel_tensor *[]){big, big}, 2, 0, &y), "concat",
        "add up past int64");
    BAD(keel_split(x, 3, (int64_t[]){INT64_MAX, INT64_MAX, -1}, 0, outs),
        "split", "sections add up past int64");
    CU_ASSERT_PTR_NULL(outs[0]);
    /* convolution geometry */
    OK(keel_ones(4, (int64_t[]){1, 1, 4, 4}, KEEL_F32, NULL, &img));
    OK(keel_ones(4, (int64_t[]){1, 1, 3, 3}, KEEL_F32, NULL, &w));
    p.padding[0] = INT64_MAX;
    BAD(keel_conv2d(img, w, NULL, &p, &y), "conv2d", "dim 2", "overflows");
    p.padding[0] = 0;
    p.dilation[1] = INT64_MAX;
    BAD(keel_conv2d(img, w, NULL, &p, &y), "conv2d", "dim 3", "overflows");
    p.dilation[1] = 1;
    p.stride[0] = INT64_MAX;
    BAD(keel_conv2d_transpose(img, w, NULL, &p, &y), "conv2d_transpose",
        "dim 2", "overflows");
    p.padding_algorithm = "SAME";
    p.stride[0] = 1;
    p.dilation[0] = INT64_MAX;
    BAD(keel_conv2d(img, w, NULL, &p, &y), "conv2d", "dim 2", "overflows");
    CU_ASSERT_PTR_NULL(y);
    keel_tensor_free(w);
    keel_tensor_free(img);
    keel_tensor_free(big);
    keel_tensor_free(one);
    keel_tensor_free(x);
}

/* ---- the plugin's own checks (descriptors the core would never build) ---- */

static keel_status run_kernel(const keel_plugin_api *api, int32_t dev,
                              const char *op, const keel_tensor_desc *in,
                              const keel_tensor_desc *out)
{
    keel_kernel k;
    keel_kernel_args a;
    keel_status st = api->kernel->lookup(dev, op, in->dtype, &k);

    if (st != KEEL_STATUS_OK)
        return st;
    memset(&a, 0, sizeof(a));
    a.struct_size = sizeof(a);
    a.device = dev;
    a.inputs = in;
    a.num_inputs = 1;
    a.outputs = out;
    a.num_outputs = 1;
    st = k.fn(k.kernel_data, &a);
    if (st == KEEL_STATUS_OK)
        st = api->device->synchronize(dev);
    return st;
}

static void test_plugin_descriptor_overflow(void)
{
    const keel_plugin_api *api;
    keel_tensor_desc in, out;
    keel_dptr buf = 0, res = 0;
    keel_place pl;

    OK(keel_place_parse("cpu:0", &pl));
    api = keel_plugin_table(pl.plugin);
    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_EQUAL_FATAL(api->memory->alloc(pl.device, 64, &buf),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(api->memory->alloc(pl.device, 64, &res),
                          KEEL_STATUS_OK);
    memset(&in, 0, sizeof(in));
    memset(&out, 0, sizeof(out));
    out.data = res;
    out.dtype = KEEL_F32;
    out.ndim = 0;
    in.data = buf;
    in.dtype = KEEL_F32;
    /* The plugin's message goes to the core's per-call plugin slot, which
     * only the core's own wrappers read, so a direct call is checked by
     * its status; each of these used to pass the bounds check and then
     * read far outside the 64-byte buffer (or divide by zero). */
    /* 2^62 float32: the byte span 2^64 used to wrap to 0 */
    in.ndim = 1;
    in.shape[0] = P2(62);
    in.strides[0] = 1;
    CU_ASSERT_EQUAL(run_kernel(api, pl.device, "sum", &in, &out),
                    KEEL_STATUS_INVALID_ARGUMENT);
    /* 2^80 elements: the count used to wrap to 0 */
    in.ndim = 2;
    in.shape[0] = in.shape[1] = P2(40);
    in.strides[0] = P2(40);
    in.strides[1] = 1;
    CU_ASSERT_EQUAL(run_kernel(api, pl.device, "sum", &in, &out),
                    KEEL_STATUS_INVALID_ARGUMENT);
    /* 16 elements whose span 3 * s wraps to 2 elements, inside the buffer */
    in.shape[0] = in.shape[1] = 4;
    in.strides[0] = INT64_C(6148914691236517206);
    in.strides[1] = 1;
    CU_ASSERT_EQUAL(run_kernel(api, pl.device, "sum", &in, &out),
                    KEEL_STATUS_INVALID_ARGUMENT);
    /* and the same kernel still takes a sane descriptor */
    in.strides[0] = 4;
    CU_ASSERT_EQUAL(run_kernel(api, pl.device, "sum", &in, &out),
                    KEEL_STATUS_OK);
    api->memory->free(pl.device, buf);
    api->memory->free(pl.device, res);
}

/* ---- silent successes ------------------------------------------------------ */

static void test_range_parameters(void)
{
    keel_tensor *t = NULL;

    BAD(keel_arange(0, 1e300, 1, KEEL_F32, NULL, &t), "keel_arange", "1e+300",
        "2^63-1");
    BAD(keel_arange(-1e308, 1e308, 1e-308, KEEL_F64, NULL, &t),
        "keel_arange", "inf");
    BAD(keel_arange(0, NAN, 1, KEEL_F32, NULL, &t), "keel_arange", "finite");
    BAD(keel_linspace(0, INFINITY, 5, KEEL_F32, NULL, &t), "keel_linspace",
        "finite");
    BAD(keel_linspace(NAN, 1, 5, KEEL_F32, NULL, &t), "keel_linspace",
        "finite");
    CU_ASSERT_PTR_NULL(t);
    /* the generic entry point checks the same attributes */
    {
        int64_t n = 3;
        keel_attr a[4] = {keel_attr_ints("shape", &n, 1),
                          keel_attr_dtype("dtype", KEEL_F32),
                          keel_attr_float("start", 0),
                          keel_attr_float("step", NAN)};
        keel_tensor *o[1] = {NULL};
        BAD(keel_op_run(KEEL_OP_ARANGE, NULL, 0, a, 4, o, 1, NULL), "arange",
            "finite");
        CU_ASSERT_PTR_NULL(o[0]);
    }
    /* an empty range is still fine */
    OK(keel_arange(5, 0, 1, KEEL_F32, NULL, &t));
    CU_ASSERT_EQUAL(keel_tensor_numel(t), 0);
    keel_tensor_free(t);
}

static void test_axes_lists(void)
{
    keel_tensor *x = NULL, *y = NULL;
    int axes[9] = {0, 1, 0, 1, 0, 1, 0, 1, 0};

    OK(keel_ones(2, (int64_t[]){2, 3}, KEEL_F32, NULL, &x));
    BAD(keel_sum(x, -1, axes, false, &y), "keel_sum", "naxes = -1");
    BAD(keel_sum(x, 2, NULL, false, &y), "keel_sum", "axes is NULL",
        "naxes = 2");
    BAD(keel_sum(x, 9, axes, false, &y), "keel_sum", "naxes = 9");
    BAD(keel_mean(x, -3, axes, false, &y), "keel_mean", "naxes = -3");
    BAD(keel_max(x, 1, NULL, false, &y), "keel_max", "axes is NULL");
    BAD(keel_var(x, -1, axes, false, true, &y), "keel_var", "naxes = -1");
    BAD(keel_std(x, 1, NULL, false, true, &y), "keel_std", "axes is NULL");
    BAD(keel_flip(x, -1, axes, &y), "keel_flip", "naxes = -1");
    BAD(keel_flip(x, 1, NULL, &y), "keel_flip", "axes is NULL");
    BAD(keel_squeeze(x, -1, axes, &y), "keel_squeeze", "naxes = -1");
    CU_ASSERT_PTR_NULL(y);
    /* naxes 0 with NULL still means every axis */
    OK(keel_sum(x, 0, NULL, false, &y));
    CU_ASSERT_EQUAL(keel_tensor_ndim(y), 0);
    keel_tensor_free(y);
    keel_tensor_free(x);
}

static void test_list_lengths(void)
{
    keel_tensor *x = vec(4), *y = NULL, *w = NULL, *img = NULL;
    keel_conv2d_params p = keel_conv2d_default_params();

    BAD(keel_tile(x, -1, (int64_t[]){2}, &y), "keel_tile", "repeat_times",
        "-1", "negative");
    BAD(keel_tile(x, 1, NULL, &y), "keel_tile", "repeat_times is NULL");
    BAD(keel_pad(x, -2, (int64_t[]){1, 1}, NULL, 0, &y), "keel_pad", "pad",
        "negative");
    BAD(keel_pad(x, 2, NULL, NULL, 0, &y), "keel_pad", "pad is NULL");
    {
        keel_tensor *outs[2];
        BAD(keel_split(x, 2, NULL, 0, outs), "keel_split",
            "sections is NULL");
    }
    /* the generic entry point: a negative list length */
    {
        keel_attr a = keel_attr_ints("repeat_times", (int64_t[]){2}, -1);
        BAD(keel_op_run(KEEL_OP_TILE, &x, 1, &a, 1, &y, 1, NULL), "tile",
            "repeat_times", "negative length");
    }
    /* conv2d: padding takes 1, 2 or 4 values */
    OK(keel_ones(4, (int64_t[]){1, 1, 4, 4}, KEEL_F32, NULL, &img));
    OK(keel_ones(4, (int64_t[]){1, 1, 3, 3}, KEEL_F32, NULL, &w));
    for (int n = -1; n <= 5; n++) {
        p.npadding = n;
        if (n == 1 || n == 2 || n == 4)
            continue;
        BAD(keel_conv2d(img, w, NULL, &p, &y), "keel_conv2d", "npadding");
        BAD(keel_conv2d_transpose(img, w, NULL, &p, &y),
            "keel_conv2d_transpose", "npadding");
    }
    /* one value pads all four sides */
    p.npadding = 1;
    p.padding[0] = 1;
    p.padding[1] = 0;
    OK(keel_conv2d(img, w, NULL, &p, &y));
    CU_ASSERT(keel_tensor_shape(y)[2] == 4 && keel_tensor_shape(y)[3] == 4);
    keel_tensor_free(y);
    keel_tensor_free(w);
    keel_tensor_free(img);
    keel_tensor_free(x);
}

static void test_float_parameters(void)
{
    keel_tensor *x = vec(3), *y = NULL;

    BAD(keel_leaky_relu(x, NAN, &y), "leaky_relu", "negative_slope");
    BAD(keel_elu(x, INFINITY, &y), "elu", "alpha");
    BAD(keel_softplus(x, NAN, 20, &y), "softplus", "beta");
    BAD(keel_softplus(x, 1, NAN, &y), "softplus", "threshold");
    BAD(keel_clip(x, NAN, 1, &y), "clip", "NaN");
    CU_ASSERT_PTR_NULL(y);
    keel_tensor_free(x);
}

static void test_print_null(void)
{
    keel_tensor *x = vec(2);
    FILE *f = tmpfile();

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    BAD(keel_tensor_print(NULL, f), "keel_tensor_print", "NULL");
    CU_ASSERT_EQUAL(ftell(f), 0);
    OK(keel_tensor_print(x, f));
    CU_ASSERT(ftell(f) > 0);
    fclose(f);
    keel_tensor_free(x);
}

/* With an argument, only the tests whose name contains it. */
int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        CU_TestFunc fn;
    } tests[] = {
        {"creation overflow", test_creation_overflow},
        {"limit boundary", test_limit_boundary},
        {"empty shapes", test_empty_shapes},
        {"refused random draw", test_random_refused_consumes_nothing},
        {"view overflow", test_view_overflow},
        {"slice extreme steps", test_slice_extreme_steps},
        {"op output overflow", test_op_output_overflow},
        {"shape rule overflow", test_shape_rule_overflow},
        {"plugin descriptor overflow", test_plugin_descriptor_overflow},
        {"range parameters", test_range_parameters},
        {"axes lists", test_axes_lists},
        {"list lengths", test_list_lengths},
        {"float parameters", test_float_parameters},
        {"print NULL", test_print_null},
    };
    CU_pSuite s;
    unsigned failed;

    if (keel_set_device("cpu:0") != KEEL_STATUS_OK) {
        fprintf(stderr, "no cpu:0: %s\n", keel_last_error());
        return 1;
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("bad_input", NULL, NULL);
    for (size_t i = 0; s && i < sizeof(tests) / sizeof(tests[0]); i++)
        if ((argc < 2 || strstr(tests[i].name, argv[1])) &&
            !CU_add_test(s, tests[i].name, tests[i].fn))
            s = NULL;
    if (!s) {
        CU_cleanup_registry();
        return 1;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
