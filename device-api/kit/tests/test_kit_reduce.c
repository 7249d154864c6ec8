/*
 * Tests of the reduce family's rules (reduce, reduce_bool, reduce_arg,
 * cumsum, same_axis, same_axis_grad, sort, argsort, topk) and of the axis
 * helpers. Valid launches are shaped as core/src/shape_reduce.c and
 * shape_manip.c send them; the expected outputs follow the ops' documented
 * semantics (docs/ops.md).
 */
#include "kit_testlib.h"

#define S(...) ((const int64_t[]){__VA_ARGS__})

/* ---- reduce ---------------------------------------------------------------- */

static void test_reduce_ok(void)
{
    struct kt k;

    /* sum over axis 1 of [4, 6, 5]. */
    kt_init(&k, KEEL_OP_SUM);
    kt_in(&k, KEEL_F32, 3, S(4, 6, 5));
    kt_out(&k, KEEL_F32, 2, S(4, 5));
    kt_attr_ints(&k, "axis", 1, S(1));
    KT_OK(&k);

    /* Negative axes and keepdim. */
    kt_init(&k, KEEL_OP_MEAN);
    kt_in(&k, KEEL_F64, 3, S(4, 6, 5));
    kt_out(&k, KEEL_F64, 3, S(1, 6, 1));
    kt_attr_ints(&k, "axis", 2, S(0, -1));
    kt_attr_b(&k, "keepdim", 1);
    KT_OK(&k);

    /* Empty axis: every dim; no attributes at all takes the defaults. */
    kt_init(&k, KEEL_OP_MAX);
    kt_in(&k, KEEL_I32, 2, S(3, 2));
    kt_out(&k, KEEL_I32, 0, NULL);
    KT_OK(&k);

    /* sum of integers and bool is int64. */
    kt_init(&k, KEEL_OP_SUM);
    kt_in(&k, KEEL_BOOL, 2, S(3, 2));
    kt_out(&k, KEEL_I64, 1, S(3));
    kt_attr_ints(&k, "axis", 1, S(1));
    KT_OK(&k);

    /* A 0-d x accepts 0 and -1 and reduces nothing. */
    kt_init(&k, KEEL_OP_PROD);
    kt_in(&k, KEEL_F32, 0, NULL);
    kt_out(&k, KEEL_F32, 0, NULL);
    kt_attr_ints(&k, "axis", 1, S(-1));
    KT_OK(&k);

    /* An empty sum reaches the kernel (it writes 0). */
    kt_init(&k, KEEL_OP_SUM);
    kt_in(&k, KEEL_F32, 2, S(3, 0));
    kt_out(&k, KEEL_F32, 1, S(3));
    kt_attr_ints(&k, "axis", 1, S(1));
    KT_OK(&k);

    /* max over an empty axis with no outputs left is fine. */
    kt_init(&k, KEEL_OP_MAX);
    kt_in(&k, KEEL_F32, 2, S(0, 0));
    kt_out(&k, KEEL_F32, 1, S(0));
    kt_attr_ints(&k, "axis", 1, S(1));
    KT_OK(&k);
}

static void test_reduce_bad(void)
{
    struct kt k;

    /* Axis out of range. */
    kt_init(&k, KEEL_OP_SUM);
    kt_in(&k, KEEL_F32, 2, S(4, 6));
    kt_out(&k, KEEL_F32, 1, S(4));
    kt_attr_ints(&k, "axis", 1, S(2));
    KT_BAD(&k, "out of range");
    kt_attr_ints(&k, "axis", 1, S(-3));
    KT_BAD(&k, "out of range");

    /* A 0-d x accepts only 0 and -1. */
    kt_init(&k, KEEL_OP_SUM);
    kt_in(&k, KEEL_F32, 0, NULL);
    kt_out(&k, KEEL_F32, 0, NULL);
    kt_attr_ints(&k, "axis", 1, S(1));
    KT_BAD(&k, "out of range");

    /* Repeated axis, also as a negative alias. */
    kt_init(&k, KEEL_OP_SUM);
    kt_in(&k, KEEL_F32, 2, S(4, 6));
    kt_out(&k, KEEL_F32, 1, S(6));
    kt_attr_ints(&k, "axis", 2, S(0, -2));
    KT_BAD(&k, "repeated");

    /* Wrong output shape: keepdim ignored, element count right but shape
     * wrong, wrong dtype. */
    kt_init(&k, KEEL_OP_SUM);
    kt_in(&k, KEEL_F32, 2, S(4, 6));
    kt_out(&k, KEEL_F32, 1, S(6));
    kt_attr_ints(&k, "axis", 1, S(1));
    KT_BAD(&k, "shape");
    kt_init(&k, KEEL_OP_SUM);
    kt_in(&k, KEEL_F32, 2, S(4, 6));
    kt_out(&k, KEEL_F32, 1, S(4));
    kt_attr_ints(&k, "axis", 1, S(1));
    kt_attr_b(&k, "keepdim", 1);
    KT_BAD(&k, "shape");
    kt_init(&k, KEEL_OP_SUM);
    kt_in(&k, KEEL_I32, 2, S(4, 6));
    kt_out(&k, KEEL_I32, 1, S(4));
    kt_attr_ints(&k, "axis", 1, S(1));
    KT_BAD(&k, "int64");

    /* max of an empty axis with outputs left has no identity. */
    kt_init(&k, KEEL_OP_MIN);
    kt_in(&k, KEEL_F32, 2, S(3, 0));
    kt_out(&k, KEEL_F32, 1, S(3));
    kt_attr_ints(&k, "axis", 1, S(1));
    KT_BAD(&k, "identity");

    /* A dtype outside the op's set: mean of integers. */
    kt_init(&k, KEEL_OP_MEAN);
    kt_in(&k, KEEL_I32, 1, S(4));
    kt_out(&k, KEEL_I32, 0, NULL);
    KT_BAD(&k, "int32");

    /* Operand counts. */
    kt_init(&k, KEEL_OP_SUM);
    kt_in(&k, KEEL_F32, 1, S(4));
    KT_BAD(&k, "output");
}

static void test_reduce_arg_bool(void)
{
    struct kt k;

    /* argmax: int64, one axis. */
    kt_init(&k, KEEL_OP_ARGMAX);
    kt_in(&k, KEEL_F32, 3, S(4, 6, 5));
    kt_out(&k, KEEL_I64, 2, S(4, 5));
    kt_attr_ints(&k, "axis", 1, S(1));
    KT_OK(&k);

    /* Empty axis: the flattened tensor; keepdim keeps every dim as 1. */
    kt_init(&k, KEEL_OP_ARGMIN);
    kt_in(&k, KEEL_I8, 2, S(4, 6));
    kt_out(&k, KEEL_I64, 2, S(1, 1));
    kt_attr_b(&k, "keepdim", 1);
    KT_OK(&k);

    kt_init(&k, KEEL_OP_ARGMAX);
    kt_in(&k, KEEL_F32, 3, S(4, 6, 5));
    kt_out(&k, KEEL_I64, 1, S(6));
    kt_attr_ints(&k, "axis", 2, S(0, 2));
    KT_BAD(&k, "one axis");

    kt_init(&k, KEEL_OP_ARGMAX);
    kt_in(&k, KEEL_F32, 2, S(4, 6));
    kt_out(&k, KEEL_I32, 1, S(4));
    kt_attr_ints(&k, "axis", 1, S(1));
    KT_BAD(&k, "int64");

    kt_init(&k, KEEL_OP_ARGMAX);
    kt_in(&k, KEEL_F32, 2, S(4, 0));
    kt_out(&k, KEEL_I64, 1, S(4));
    kt_attr_ints(&k, "axis", 1, S(1));
    KT_BAD(&k, "identity");

    /* all/any: bool of the reduced shape, any input dtype. */
    kt_init(&k, KEEL_OP_ALL);
    kt_in(&k, KEEL_F16, 3, S(4, 6, 5));
    kt_out(&k, KEEL_BOOL, 2, S(4, 6));
    kt_attr_ints(&k, "axis", 1, S(2));
    KT_OK(&k);

    kt_init(&k, KEEL_OP_ANY);
    kt_in(&k, KEEL_F16, 3, S(4, 6, 5));
    kt_out(&k, KEEL_F16, 2, S(4, 6));
    kt_attr_ints(&k, "axis", 1, S(2));
    KT_BAD(&k, "bool");
}

/* ---- cumsum ---------------------------------------------------------------- */

static void test_cumsum(void)
{
    struct kt k;

    kt_init(&k, KEEL_OP_CUMSUM);
    kt_in(&k, KEEL_F32, 2, S(4, 7));
    kt_out(&k, KEEL_F32, 2, S(4, 7));
    kt_attr_ints(&k, "axis", 1, S(-1));
    KT_OK(&k);

    /* Empty axis: 1-D with x's element count; integers sum in int64. */
    kt_init(&k, KEEL_OP_CUMSUM);
    kt_in(&k, KEEL_I32, 2, S(4, 7));
    kt_out(&k, KEEL_I64, 1, S(28));
    KT_OK(&k);

    kt_init(&k, KEEL_OP_CUMSUM);
    kt_in(&k, KEEL_I32, 2, S(4, 7));
    kt_out(&k, KEEL_I64, 2, S(4, 7));
    KT_BAD(&k, "shape");

    kt_init(&k, KEEL_OP_CUMSUM);
    kt_in(&k, KEEL_I32, 2, S(4, 7));
    kt_out(&k, KEEL_I32, 2, S(4, 7));
    kt_attr_ints(&k, "axis", 1, S(0));
    KT_BAD(&k, "int64");

    kt_init(&k, KEEL_OP_CUMSUM);
    kt_in(&k, KEEL_F32, 2, S(4, 7));
    kt_out(&k, KEEL_F32, 2, S(4, 7));
    kt_attr_ints(&k, "axis", 2, S(0, 1));
    KT_BAD(&k, "one axis");

    kt_init(&k, KEEL_OP_CUMSUM);
    kt_in(&k, KEEL_F32, 2, S(4, 7));
    kt_out(&k, KEEL_F32, 2, S(4, 7));
    kt_attr_ints(&k, "axis", 1, S(2));
    KT_BAD(&k, "out of range");

    /* bool is not in cumsum's set. */
    kt_init(&k, KEEL_OP_CUMSUM);
    kt_in(&k, KEEL_BOOL, 1, S(4));
    kt_out(&k, KEEL_I64, 1, S(4));
    KT_BAD(&k, "bool");
}

/* ---- softmax family ------------------------------------------------------------ */

static void test_same_axis(void)
{
    struct kt k;

    kt_init(&k, KEEL_OP_SOFTMAX);
    kt_in(&k, KEEL_F32, 2, S(5, 9));
    kt_out(&k, KEEL_F32, 2, S(5, 9));
    KT_OK(&k);

    kt_init(&k, KEEL_OP_LOG_SOFTMAX);
    kt_in(&k, KEEL_BF16, 0, NULL);
    kt_out(&k, KEEL_BF16, 0, NULL);
    kt_attr_i(&k, "axis", 0);
    KT_OK(&k);

    kt_init(&k, KEEL_OP_SOFTMAX);
    kt_in(&k, KEEL_F32, 2, S(5, 9));
    kt_out(&k, KEEL_F32, 2, S(5, 9));
    kt_attr_i(&k, "axis", 2);
    KT_BAD(&k, "out of range");

    kt_init(&k, KEEL_OP_SOFTMAX);
    kt_in(&k, KEEL_F32, 2, S(5, 9));
    kt_out(&k, KEEL_F64, 2, S(5, 9));
    KT_BAD(&k, "float64");

    kt_init(&k, KEEL_OP_SOFTMAX);
    kt_in(&k, KEEL_I32, 2, S(5, 9));
    kt_out(&k, KEEL_I32, 2, S(5, 9));
    KT_BAD(&k, "int32");

    /* grads: (out, dout) of one shape and dtype. */
    kt_init(&k, KEEL_OP_SOFTMAX_GRAD);
    kt_in(&k, KEEL_F32, 2, S(5, 9));
    kt_in(&k, KEEL_F32, 2, S(5, 9));
    kt_out(&k, KEEL_F32, 2, S(5, 9));
    kt_attr_i(&k, "axis", 0);
    KT_OK(&k);

    kt_init(&k, KEEL_OP_LOG_SOFTMAX_GRAD);
    kt_in(&k, KEEL_F32, 2, S(5, 9));
    kt_in(&k, KEEL_F32, 2, S(9, 5));
    kt_out(&k, KEEL_F32, 2, S(5, 9));
    KT_BAD(&k, "same shape");

    kt_init(&k, KEEL_OP_SOFTMAX_GRAD);
    kt_in(&k, KEEL_F32, 2, S(5, 9));
    kt_in(&k, KEEL_F64, 2, S(5, 9));
    kt_out(&k, KEEL_F32, 2, S(5, 9));
    KT_BAD(&k, "one dtype");

    kt_init(&k, KEEL_OP_SOFTMAX_GRAD);
    kt_in(&k, KEEL_F32, 2, S(5, 9));
    kt_out(&k, KEEL_F32, 2, S(5, 9));
    KT_BAD(&k, "input");
}

/* ---- sort, argsort, topk ------------------------------------------------------- */

static void test_sorts(void)
{
    struct kt k;

    kt_init(&k, KEEL_OP_SORT);
    kt_in(&k, KEEL_F32, 2, S(4, 9));
    kt_out(&k, KEEL_F32, 2, S(4, 9));
    kt_out(&k, KEEL_I64, 2, S(4, 9));
    kt_attr_i(&k, "axis", 0);
    kt_attr_b(&k, "descending", 1);
    KT_OK(&k);

    kt_init(&k, KEEL_OP_SORT);
    kt_in(&k, KEEL_F32, 2, S(4, 9));
    kt_out(&k, KEEL_F32, 2, S(4, 9));
    kt_out(&k, KEEL_I32, 2, S(4, 9));
    KT_BAD(&k, "int64");

    kt_init(&k, KEEL_OP_ARGSORT);
    kt_in(&k, KEEL_U8, 0, NULL);
    kt_out(&k, KEEL_I64, 0, NULL);
    KT_OK(&k);

    kt_init(&k, KEEL_OP_ARGSORT);
    kt_in(&k, KEEL_U8, 2, S(4, 9));
    kt_out(&k, KEEL_I64, 2, S(4, 9));
    kt_attr_i(&k, "axis", -3);
    KT_BAD(&k, "out of range");

    kt_init(&k, KEEL_OP_ARGSORT);
    kt_in(&k, KEEL_BOOL, 1, S(4));
    kt_out(&k, KEEL_I64, 1, S(4));
    KT_BAD(&k, "bool");

    /* topk: axis resized to k. */
    kt_init(&k, KEEL_OP_TOPK);
    kt_in(&k, KEEL_F32, 2, S(4, 9));
    kt_out(&k, KEEL_F32, 2, S(4, 3));
    kt_out(&k, KEEL_I64, 2, S(4, 3));
    kt_attr_i(&k, "k", 3);
    KT_OK(&k);

    kt_init(&k, KEEL_OP_TOPK);
    kt_in(&k, KEEL_I64, 2, S(4, 9));
    kt_out(&k, KEEL_I64, 2, S(0, 9));
    kt_out(&k, KEEL_I64, 2, S(0, 9));
    kt_attr_i(&k, "k", 0);
    kt_attr_i(&k, "axis", 0);
    KT_OK(&k);

    kt_init(&k, KEEL_OP_TOPK);
    kt_in(&k, KEEL_F32, 2, S(4, 9));
    kt_out(&k, KEEL_F32, 2, S(4, 10));
    kt_out(&k, KEEL_I64, 2, S(4, 10));
    kt_attr_i(&k, "k", 10);
    KT_BAD(&k, "k = 10");

    kt_init(&k, KEEL_OP_TOPK);
    kt_in(&k, KEEL_F32, 2, S(4, 9));
    kt_out(&k, KEEL_F32, 2, S(4, 9));
    kt_out(&k, KEEL_I64, 2, S(4, 9));
    kt_attr_i(&k, "k", -1);
    KT_BAD(&k, "k = -1");

    /* 0-d x: k must be 1. */
    kt_init(&k, KEEL_OP_TOPK);
    kt_in(&k, KEEL_F32, 0, NULL);
    kt_out(&k, KEEL_F32, 0, NULL);
    kt_out(&k, KEEL_I64, 0, NULL);
    kt_attr_i(&k, "k", 1);
    KT_OK(&k);
    kt_attr_i(&k, "k", 0);
    KT_BAD(&k, "k = 0");

    /* The values output in x's dtype, shaped with k. */
    kt_init(&k, KEEL_OP_TOPK);
    kt_in(&k, KEEL_F32, 2, S(4, 9));
    kt_out(&k, KEEL_F32, 2, S(4, 9));
    kt_out(&k, KEEL_I64, 2, S(4, 3));
    kt_attr_i(&k, "k", 3);
    KT_BAD(&k, "output 0");

    /* k is required. */
    kt_init(&k, KEEL_OP_TOPK);
    kt_in(&k, KEEL_F32, 1, S(9));
    kt_out(&k, KEEL_F32, 1, S(1));
    kt_out(&k, KEEL_I64, 1, S(1));
    KT_BAD(&k, "'k'");
}

/* ---- helpers ------------------------------------------------------------------- */

static void test_helpers(void)
{
    struct kt k;
    int64_t nout, nred, len;

    CU_ASSERT_EQUAL(keel_kit_axis_0d(-1, 0), 0);
    CU_ASSERT_EQUAL(keel_kit_axis_0d(0, 0), 0);
    CU_ASSERT_EQUAL(keel_kit_axis_0d(1, 0), -1);
    CU_ASSERT_EQUAL(keel_kit_axis_0d(-2, 3), 1);
    CU_ASSERT_EQUAL(keel_kit_axis_0d(3, 3), -1);

    /* kt_run fills k.a (the verdict does not matter here). */
    kt_init(&k, KEEL_OP_SUM);
    kt_in(&k, KEEL_F32, 3, S(4, 0, 5));
    kt_run(&k);
    CU_ASSERT_EQUAL(keel_kit_reduce_mask(&k.a, 3), 7u); /* no attribute */
    kt_attr_ints(&k, "axis", 2, S(-1, 0));
    kt_run(&k);
    CU_ASSERT_EQUAL(keel_kit_reduce_mask(&k.a, 3), 5u);
    CU_ASSERT_EQUAL(keel_kit_axes_bits(&k.a, "axis", 3), 5u);
    CU_ASSERT_EQUAL(keel_kit_reduce_mask(&k.a, 0), 0u);
    keel_kit_reduce_counts(&k.in[0], 5u, &nout, &nred);
    CU_ASSERT_EQUAL(nout, 0);
    CU_ASSERT_EQUAL(nred, 20);
    keel_kit_reduce_counts(&k.in[0], 2u, &nout, NULL);
    CU_ASSERT_EQUAL(nout, 20);

    kt_attr_i(&k, "axis", -2);
    kt_run(&k);
    CU_ASSERT_EQUAL(keel_kit_sort_axis(&k.a, &k.in[0], &len), 1);
    CU_ASSERT_EQUAL(len, 0);
    k.in[0].ndim = 0;
    CU_ASSERT_EQUAL(keel_kit_sort_axis(&k.a, &k.in[0], &len), -1);
    kt_attr_i(&k, "axis", -1);
    CU_ASSERT_EQUAL(keel_kit_sort_axis(&k.a, &k.in[0], &len), 0);
    CU_ASSERT_EQUAL(len, 1);
}

int main(void)
{
    static const CU_TestInfo tests[] = {
        {"reduce accepts what the core sends", test_reduce_ok},
        {"reduce refuses bad axes, shapes, dtypes", test_reduce_bad},
        {"reduce_arg and reduce_bool", test_reduce_arg_bool},
        {"cumsum", test_cumsum},
        {"same_axis and same_axis_grad", test_same_axis},
        {"sort, argsort, topk", test_sorts},
        {"axis helpers", test_helpers},
        CU_TEST_INFO_NULL,
    };

    return kt_main("kit-reduce", tests);
}
