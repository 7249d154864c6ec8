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
    /* sum over axis 1 of [4, 6, 5]. */
    KT_CASES(KEEL_OP_SUM, KEEL_F32,
        "ok 4,6,5 > 4,5 | axis=[1]\n");

    /* Negative axes and keepdim. */
    KT_CASES(KEEL_OP_MEAN, KEEL_F64,
        "ok 4,6,5 > 1,6,1 | axis=[0,-1] keepdim=true\n");

    /* Empty axis: every dim; no attributes at all takes the defaults. */
    KT_CASES(KEEL_OP_MAX, KEEL_I32,
        "ok 3,2 > ()\n");

    /* sum of integers and bool is int64. */
    KT_CASES(KEEL_OP_SUM, KEEL_BOOL,
        "ok 3,2 > 3:i64 | axis=[1]\n");

    /* A 0-d x accepts 0 and -1 and reduces nothing. */
    KT_CASES(KEEL_OP_PROD, KEEL_F32,
        "ok () > () | axis=[-1]\n");

    /* An empty sum reaches the kernel (it writes 0). */
    KT_CASES(KEEL_OP_SUM, KEEL_F32,
        "ok 3,0 > 3 | axis=[1]\n");

    /* max over an empty axis with no outputs left is fine. */
    KT_CASES(KEEL_OP_MAX, KEEL_F32,
        "ok 0,0 > 0 | axis=[1]\n");
}

static void test_reduce_bad(void)
{
    /* Axis out of range. */
    KT_CASES(KEEL_OP_SUM, KEEL_F32,
        "bad 4,6 > 4 | axis=[2] ! out of range\n"
        "bad 4,6 > 4 | axis=[-3] ! out of range\n"
        /* A 0-d x accepts only 0 and -1. */
        "bad () > () | axis=[1] ! out of range\n"
        /* Repeated axis, also as a negative alias. */
        "bad 4,6 > 6 | axis=[0,-2] ! repeated\n"
        /* Wrong output shape: keepdim ignored, element count right but shape
         * wrong, wrong dtype. */
        "bad 4,6 > 6 | axis=[1] ! shape\n"
        "bad 4,6 > 4 | axis=[1] keepdim=true ! shape\n"
        "bad 4,6:i32 > 4:i32 | axis=[1] ! int64\n");

    /* max of an empty axis with outputs left has no identity. */
    KT_CASES(KEEL_OP_MIN, KEEL_F32,
        "bad 3,0 > 3 | axis=[1] ! identity\n");

    /* A dtype outside the op's set: mean of integers. */
    KT_CASES(KEEL_OP_MEAN, KEEL_I32,
        "bad 4 > () ! int32\n");

    /* Operand counts. */
    KT_CASES(KEEL_OP_SUM, KEEL_F32,
        "bad 4 > ! output\n");
}

static void test_reduce_arg_bool(void)
{
    /* argmax: int64, one axis. */
    KT_CASES(KEEL_OP_ARGMAX, KEEL_F32,
        "ok 4,6,5 > 4,5:i64 | axis=[1]\n");

    /* Empty axis: the flattened tensor; keepdim keeps every dim as 1. */
    KT_CASES(KEEL_OP_ARGMIN, KEEL_I8,
        "ok 4,6 > 1,1:i64 | keepdim=true\n");

    KT_CASES(KEEL_OP_ARGMAX, KEEL_F32,
        "bad 4,6,5 > 6:i64 | axis=[0,2] ! one axis\n"
        "bad 4,6 > 4:i32 | axis=[1] ! int64\n"
        "bad 4,0 > 4:i64 | axis=[1] ! identity\n");

    /* all/any: bool of the reduced shape, any input dtype. */
    KT_CASES(KEEL_OP_ALL, KEEL_F16,
        "ok 4,6,5 > 4,6:bool | axis=[2]\n");

    KT_CASES(KEEL_OP_ANY, KEEL_F16,
        "bad 4,6,5 > 4,6 | axis=[2] ! bool\n");
}

/* ---- cumsum ---------------------------------------------------------------- */

static void test_cumsum(void)
{
    KT_CASES(KEEL_OP_CUMSUM, KEEL_F32,
        "ok 4,7 > 4,7 | axis=[-1]\n"
        /* Empty axis: 1-D with x's element count; integers sum in int64. */
        "ok 4,7:i32 > 28:i64\n"
        "bad 4,7:i32 > 4,7:i64 ! shape\n"
        "bad 4,7:i32 > 4,7:i32 | axis=[0] ! int64\n"
        "bad 4,7 > 4,7 | axis=[0,1] ! one axis\n"
        "bad 4,7 > 4,7 | axis=[2] ! out of range\n"
        /* bool is not in cumsum's set. */
        "bad 4:bool > 4:i64 ! bool\n");
}

/* ---- softmax family ------------------------------------------------------------ */

static void test_same_axis(void)
{
    KT_CASES(KEEL_OP_SOFTMAX, KEEL_F32,
        "ok 5,9 > 5,9\n");

    KT_CASES(KEEL_OP_LOG_SOFTMAX, KEEL_BF16,
        "ok () > () | axis=0\n");

    KT_CASES(KEEL_OP_SOFTMAX, KEEL_F32,
        "bad 5,9 > 5,9 | axis=2 ! out of range\n"
        "bad 5,9 > 5,9:f64 ! float64\n"
        "bad 5,9:i32 > 5,9:i32 ! int32\n");

    /* grads: (out, dout) of one shape and dtype. */
    KT_CASES(KEEL_OP_SOFTMAX_GRAD, KEEL_F32,
        "ok 5,9 5,9 > 5,9 | axis=0\n");

    KT_CASES(KEEL_OP_LOG_SOFTMAX_GRAD, KEEL_F32,
        "bad 5,9 9,5 > 5,9 ! same shape\n");

    KT_CASES(KEEL_OP_SOFTMAX_GRAD, KEEL_F32,
        "bad 5,9 5,9:f64 > 5,9 ! one dtype\n"
        "bad 5,9 > 5,9 ! input\n");
}

/* ---- sort, argsort, topk ------------------------------------------------------- */

static void test_sorts(void)
{
    KT_CASES(KEEL_OP_SORT, KEEL_F32,
        "ok 4,9 > 4,9 4,9:i64 | axis=0 descending=true\n"
        "bad 4,9 > 4,9 4,9:i32 ! int64\n");

    KT_CASES(KEEL_OP_ARGSORT, KEEL_I64,
        "ok ():u8 > ()\n"
        "bad 4,9:u8 > 4,9 | axis=-3 ! out of range\n"
        "bad 4:bool > 4 ! bool\n");

    /* topk: axis resized to k. */
    KT_CASES(KEEL_OP_TOPK, KEEL_F32,
        "ok 4,9 > 4,3 4,3:i64 | k=3\n"
        "ok 4,9:i64 > 0,9:i64 0,9:i64 | k=0 axis=0\n"
        "bad 4,9 > 4,10 4,10:i64 | k=10 ! k = 10\n"
        "bad 4,9 > 4,9 4,9:i64 | k=-1 ! k = -1\n"
        /* 0-d x: k must be 1. */
        "ok () > () ():i64 | k=1\n"
        "bad () > () ():i64 | k=0 ! k = 0\n"
        /* The values output in x's dtype, shaped with k. */
        "bad 4,9 > 4,9 4,3:i64 | k=3 ! output 0\n"
        /* k is required. */
        "bad 9 > 1 1:i64 ! 'k'\n");
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
