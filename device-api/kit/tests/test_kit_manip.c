/*
 * Tests of the manip family's rules (concat, stack, split, gather,
 * scatter, take_along_axis, tile, pad) and of its geometry helpers. Valid
 * launches are shaped as core/src/shape_manip.c sends them (0-d indices
 * as [1], take_along_axis re-expressed with the output's shape); the
 * expected outputs follow the ops' documented semantics (docs/ops.md).
 */
#include "kit_testlib.h"

#define S(...) ((const int64_t[]){__VA_ARGS__})

/* ---- concat and stack --------------------------------------------------------- */

static void test_concat(void)
{
    KT_CASES(KEEL_OP_CONCAT, KEEL_F32,
        "ok 2,3 2,5 2,1 > 2,9 | axis=-1\n"
        /* The default axis 0; one input. */
        "ok 2,3:bool > 2,3:bool\n"
        "bad 2,3 2,5 > 2,7 | axis=1 ! shape\n"
        "bad 2,3 3,3 > 2,6 | axis=1 ! input 1 has size 3 in dim 0\n"
        "bad 2,3 2,3:f16 > 2,6 | axis=1 ! one dtype\n"
        "bad 2,3 6 > 2,6 ! dims\n"
        "bad 2,3 > 2,3 | axis=2 ! axis 2\n"
        "bad () > 1 ! 0-d\n"
        "bad > 1 ! at least one input\n");
}

static void test_stack(void)
{
    KT_CASES(KEEL_OP_STACK, KEEL_F32,
        "ok 2,3:i32 2,3:i32 2,3:i32 > 2,3,3:i32 | axis=1\n"
        /* The axis counts in the output's dims: -1 is a new last dim. */
        "ok 4 4 > 4,2 | axis=-1\n"
        "bad 4 4 > 4,2 | axis=2 ! axis 2\n"
        /* 0-d inputs stack into a 1-D output. */
        "ok () () > 2\n"
        "bad 4 5 > 2,4 ! input 1 has size 5\n"
        "bad 4 4 > 3,4 ! shape\n"
        "bad 1,1,1,1,1,1,1,1 > 1,1,1,1,1,1,1,1 ! more than 8 dims\n");
}

/* ---- split -------------------------------------------------------------------------- */

static void test_split(void)
{
    KT_CASES(KEEL_OP_SPLIT, KEEL_F32,
        "ok 7,4 > 2,4 2,4 3,4 | sections=[2,2,3]\n"
        /* One -1 takes the rest; the outputs carry the resolved size. */
        "ok 3,8 > 3,3 3,5 | sections=[3,-1] axis=-1\n"
        /* The -1 resolved wrongly in an output. */
        "bad 3,8 > 3,3 3,4 | sections=[3,-1] axis=1 ! output 1 has shape\n"
        "bad 7 > 3 3 | sections=[3,3] ! add up to 6\n"
        "bad 7 > 3 4 | sections=[3,4,0] ! 3 entries but there are 2 outputs\n"
        /* a negative output dim: the generic check */
        "bad 7 > 9 -2 | sections=[9,-2]\n"
        "bad 7 > 7 0 | sections=[-1,-1] ! at most one -1\n"
        "bad 7 > 7 | sections=[7] axis=1 ! axis 1\n"
        "bad 7 > 7 ! 'sections' is required\n");
}

/* ---- gather, index_select --------------------------------------------------------------- */

static void test_gather(void)
{
    KT_CASES(KEEL_OP_GATHER, KEEL_F32,
        "ok 5,4 3:i64 > 3,4\n");

    KT_CASES(KEEL_OP_INDEX_SELECT, KEEL_U8,
        "ok 5,4 6:i32 > 5,6 | axis=-1\n");

    /* gather of a 0-d index: it arrives as [1] (stride 0), the output
     * drops the axis. */
    KT_CASES(KEEL_OP_GATHER, KEEL_F32, "ok 5,4 1@0:i64 > 5 | axis=1\n");
    /* index_select has no 0-d form. */
    KT_CASES(KEEL_OP_INDEX_SELECT, KEEL_F32,
        "bad 5,4 1@0:i64 > 5 | axis=1 ! shape\n");

    KT_CASES(KEEL_OP_GATHER, KEEL_F32,
        "bad 5,4 3:i64 > 5,4 ! shape\n"
        "bad 5,4 3 > 3,4 ! int32 or int64\n"
        "bad 5,4 3,1:i64 > 3,4 ! 1-D\n"
        "bad 5,4 3:i64 > 3,4:f64 ! float64\n"
        "bad 5,4 3:i64 > 3,4 | axis=2 ! axis 2\n"
        "bad 5,4 > 3,4 ! input\n");
}

/* ---- scatter ------------------------------------------------------------------------------ */

static void test_scatter(void)
{
    KT_CASES(KEEL_OP_SCATTER, KEEL_F32,
        "ok 5,4 3:i64 3,4 > 5,4 | overwrite=false\n");

    /* A 0-d index arrives as [1], updates with a leading dim 1 of
     * stride 0. */
    KT_CASES(KEEL_OP_SCATTER, KEEL_I8, "ok 5,4 1@0:i32 1,4@0,1 > 5,4\n");

    KT_CASES(KEEL_OP_SCATTER, KEEL_F32,
        "bad 5,4 3:i64 2,4 > 5,4 ! updates has 2 rows\n"
        "bad 5,4 3:i64 3,5 > 5,4 ! updates has size 5 in dim 1\n"
        "bad 5,4 3:i64 3,4:f64 > 5,4 ! one dtype\n"
        "bad 5,4 3:u8 3,4 > 5,4 ! int32 or int64\n"
        "bad () 1:i64 1 > () ! at least 1 dim\n"
        "bad 5,4 3:i64 3,4 > 3,4 ! shape\n");
}

/* ---- take_along_axis ---------------------------------------------------------------------- */

static void test_take_along_axis(void)
{
    /* x [4, 1] broadcast against index [4, 3] along axis 0: x arrives as
     * [4, 3] with stride 0 in dim 1. */
    KT_CASES(KEEL_OP_TAKE_ALONG_AXIS, KEEL_F32,
        "ok 4,3@1,0 2,3:i64 > 2,3 | axis=0\n");

    KT_CASES(KEEL_OP_TAKE_ALONG_AXIS, KEEL_F32,
        "ok 4,3 4,7:i32 > 4,7 | axis=-1\n"
        "bad 4,3 5,7:i32 > 5,7 | axis=1 ! the index has size 5 in dim 0\n"
        "bad 4,3 4:i32 > 4 | axis=0 ! dims\n"
        "bad 4,3 4,7:i32 > 4,3 | axis=1 ! shape\n"
        "bad 4,3 4,7:bool > 4,7 | axis=1 ! int32 or int64\n"
        "bad 4,3 4,7:i32 > 4,7 ! 'axis' is required\n"
        "bad 4,3 4,7:i32 > 4,7 | axis=-3 ! axis -3\n");
}

/* ---- tile and pad -------------------------------------------------------------------------- */

static void test_tile(void)
{
    KT_CASES(KEEL_OP_TILE, KEEL_F32,
        "ok 2,3 > 4,3 | repeat_times=[2,1]\n"
        /* More repeats than dims: x gains leading dims. */
        "ok 3 > 2,9 | repeat_times=[2,3]\n"
        /* Fewer repeats than dims: the missing ones are 1; 0 empties a dim. */
        "ok 2,3,4 > 2,3,0 | repeat_times=[0]\n"
        "bad 2,3 > 4,6 | repeat_times=[2,1] ! shape\n"
        /* The output's rank is max(len(repeat_times), x's rank). */
        "bad 3 > 1,6 | repeat_times=[2] ! shape\n"
        "bad 3 > 3 | repeat_times=[-1] ! negative\n"
        "bad 3 > 3 | repeat_times=[1,1,1,1,1,1,1,1,1] ! at most 8\n"
        "bad 1099511627776 > 1 | repeat_times=[1099511627776] ! int64\n");
}

static void test_pad(void)
{
    KT_CASES(KEEL_OP_PAD, KEEL_F32,
        "ok 3,4 > 6,5 | pad=[1,2,0,1] value=2.0\n"
        /* Pairs for the first dims only; reflect below the size. */
        "ok 3,4:i32 > 7,4:i32 | pad=[2,2] mode=reflect\n"
        "bad 3 > 6 | pad=[0,3] mode=reflect ! less than the size 3\n"
        "ok 3 > 6 | pad=[0,3] mode=replicate\n"
        "bad 3 > 6 | pad=[0,3] mode=wrap ! mode 'wrap'\n"
        /* replicate cannot pad an empty dim; constant can. */
        "bad 0 > 2 | pad=[1,1] mode=replicate ! empty dim 0\n"
        "ok 0 > 2 | pad=[1,1] mode=constant\n"
        "bad 3 > 4 | pad=[1,0,0] ! pairs\n"
        "bad 3 > 4 | pad=[1,0,0,0] ! pairs\n"
        "bad 3 > 4 | pad=[2,-1] ! negative\n"
        "bad 3 > 4 | pad=[0,2] ! shape\n"
        "bad 3 > 3 ! 'pad' is required\n");
}

/* ---- helpers ------------------------------------------------------------------------------- */

static void test_helpers(void)
{
    struct kt k;
    int64_t outer, inner, shape[KEEL_MAX_DIMS], st[KEEL_MAX_DIMS];
    int64_t bf[KEEL_MAX_DIMS], af[KEEL_MAX_DIMS];
    keel_tensor_desc v;

    kt_init(&k, KEEL_OP_GATHER);
    kt_in(&k, KEEL_F32, 3, S(2, 3, 4));
    kt_in(&k, KEEL_I64, 1, S(1));
    kt_out(&k, KEEL_F32, 2, S(2, 4));
    keel_kit_outer_inner(&k.in[0], 1, &outer, &inner);
    CU_ASSERT_EQUAL(outer, 2);
    CU_ASSERT_EQUAL(inner, 4);
    keel_kit_outer_inner(&k.in[0], 0, &outer, NULL);
    CU_ASSERT_EQUAL(outer, 1);

    /* gather's output [2, 4] (axis 1 dropped) seen as [2, 1, 4]. */
    kt_run(&k);
    keel_kit_gather_out(&k.a, 1, &v);
    CU_ASSERT_EQUAL(v.ndim, 3);
    CU_ASSERT_EQUAL(v.shape[1], 1);
    CU_ASSERT_EQUAL(v.strides[0], 4);
    CU_ASSERT_EQUAL(v.strides[1], 0);
    CU_ASSERT_EQUAL(v.strides[2], 1);

    keel_kit_align_right(&k.in[0], 5, shape, st);
    CU_ASSERT_EQUAL(shape[0], 1);
    CU_ASSERT_EQUAL(st[1], 0);
    CU_ASSERT_EQUAL(shape[2], 2);
    CU_ASSERT_EQUAL(st[2], 12);
    CU_ASSERT_EQUAL(shape[4], 4);

    kt_init(&k, KEEL_OP_TILE);
    kt_attr_ints(&k, "repeat_times", 2, S(5, 6));
    kt_run(&k);
    CU_ASSERT_EQUAL(keel_kit_tile_repeat(&k.a, 3, 0), 1);
    CU_ASSERT_EQUAL(keel_kit_tile_repeat(&k.a, 3, 1), 5);
    CU_ASSERT_EQUAL(keel_kit_tile_repeat(&k.a, 3, 2), 6);

    kt_init(&k, KEEL_OP_PAD);
    kt_attr_ints(&k, "pad", 2, S(1, 2));
    kt_run(&k);
    CU_ASSERT_EQUAL(keel_kit_pad_mode(&k.a), KEEL_KIT_PAD_CONSTANT);
    keel_kit_pad_widths(&k.a, 2, bf, af);
    CU_ASSERT(bf[0] == 1 && af[0] == 2 && bf[1] == 0 && af[1] == 0);
    kt_attr_s(&k, "mode", "replicate");
    kt_run(&k);
    CU_ASSERT_EQUAL(keel_kit_pad_mode(&k.a), KEEL_KIT_PAD_REPLICATE);
    kt_attr_s(&k, "mode", "nope");
    kt_run(&k);
    CU_ASSERT_EQUAL(keel_kit_pad_mode(&k.a), -1);
}

int main(void)
{
    static const CU_TestInfo tests[] = {
        {"concat", test_concat},
        {"stack", test_stack},
        {"split", test_split},
        {"gather and index_select", test_gather},
        {"scatter", test_scatter},
        {"take_along_axis", test_take_along_axis},
        {"tile", test_tile},
        {"pad", test_pad},
        {"geometry helpers", test_helpers},
        CU_TEST_INFO_NULL,
    };

    return kt_main("kit-manip", tests);
}
