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
    struct kt k;

    kt_init(&k, KEEL_OP_CONCAT);
    kt_in(&k, KEEL_F32, 2, S(2, 3));
    kt_in(&k, KEEL_F32, 2, S(2, 5));
    kt_in(&k, KEEL_F32, 2, S(2, 1));
    kt_out(&k, KEEL_F32, 2, S(2, 9));
    kt_attr_i(&k, "axis", -1);
    KT_OK(&k);

    /* The default axis 0; one input. */
    kt_init(&k, KEEL_OP_CONCAT);
    kt_in(&k, KEEL_BOOL, 2, S(2, 3));
    kt_out(&k, KEEL_BOOL, 2, S(2, 3));
    KT_OK(&k);

    kt_init(&k, KEEL_OP_CONCAT);
    kt_in(&k, KEEL_F32, 2, S(2, 3));
    kt_in(&k, KEEL_F32, 2, S(2, 5));
    kt_out(&k, KEEL_F32, 2, S(2, 7));
    kt_attr_i(&k, "axis", 1);
    KT_BAD(&k, "shape");

    kt_init(&k, KEEL_OP_CONCAT);
    kt_in(&k, KEEL_F32, 2, S(2, 3));
    kt_in(&k, KEEL_F32, 2, S(3, 3));
    kt_out(&k, KEEL_F32, 2, S(2, 6));
    kt_attr_i(&k, "axis", 1);
    KT_BAD(&k, "input 1 has size 3 in dim 0");

    kt_init(&k, KEEL_OP_CONCAT);
    kt_in(&k, KEEL_F32, 2, S(2, 3));
    kt_in(&k, KEEL_F16, 2, S(2, 3));
    kt_out(&k, KEEL_F32, 2, S(2, 6));
    kt_attr_i(&k, "axis", 1);
    KT_BAD(&k, "one dtype");

    kt_init(&k, KEEL_OP_CONCAT);
    kt_in(&k, KEEL_F32, 2, S(2, 3));
    kt_in(&k, KEEL_F32, 1, S(6));
    kt_out(&k, KEEL_F32, 2, S(2, 6));
    KT_BAD(&k, "dims");

    kt_init(&k, KEEL_OP_CONCAT);
    kt_in(&k, KEEL_F32, 2, S(2, 3));
    kt_out(&k, KEEL_F32, 2, S(2, 3));
    kt_attr_i(&k, "axis", 2);
    KT_BAD(&k, "axis 2");

    kt_init(&k, KEEL_OP_CONCAT);
    kt_in(&k, KEEL_F32, 0, NULL);
    kt_out(&k, KEEL_F32, 1, S(1));
    KT_BAD(&k, "0-d");

    kt_init(&k, KEEL_OP_CONCAT);
    kt_out(&k, KEEL_F32, 1, S(1));
    KT_BAD(&k, "at least one input");
}

static void test_stack(void)
{
    struct kt k;

    kt_init(&k, KEEL_OP_STACK);
    kt_in(&k, KEEL_I32, 2, S(2, 3));
    kt_in(&k, KEEL_I32, 2, S(2, 3));
    kt_in(&k, KEEL_I32, 2, S(2, 3));
    kt_out(&k, KEEL_I32, 3, S(2, 3, 3));
    kt_attr_i(&k, "axis", 1);
    KT_OK(&k);

    /* The axis counts in the output's dims: -1 is a new last dim. */
    kt_init(&k, KEEL_OP_STACK);
    kt_in(&k, KEEL_F32, 1, S(4));
    kt_in(&k, KEEL_F32, 1, S(4));
    kt_out(&k, KEEL_F32, 2, S(4, 2));
    kt_attr_i(&k, "axis", -1);
    KT_OK(&k);
    kt_attr_i(&k, "axis", 2);
    KT_BAD(&k, "axis 2");

    /* 0-d inputs stack into a 1-D output. */
    kt_init(&k, KEEL_OP_STACK);
    kt_in(&k, KEEL_F32, 0, NULL);
    kt_in(&k, KEEL_F32, 0, NULL);
    kt_out(&k, KEEL_F32, 1, S(2));
    KT_OK(&k);

    kt_init(&k, KEEL_OP_STACK);
    kt_in(&k, KEEL_F32, 1, S(4));
    kt_in(&k, KEEL_F32, 1, S(5));
    kt_out(&k, KEEL_F32, 2, S(2, 4));
    KT_BAD(&k, "input 1 has size 5");

    kt_init(&k, KEEL_OP_STACK);
    kt_in(&k, KEEL_F32, 1, S(4));
    kt_in(&k, KEEL_F32, 1, S(4));
    kt_out(&k, KEEL_F32, 2, S(3, 4));
    KT_BAD(&k, "shape");

    kt_init(&k, KEEL_OP_STACK);
    kt_in(&k, KEEL_F32, 8, S(1, 1, 1, 1, 1, 1, 1, 1));
    kt_out(&k, KEEL_F32, 8, S(1, 1, 1, 1, 1, 1, 1, 1));
    KT_BAD(&k, "more than 8 dims");
}

/* ---- split -------------------------------------------------------------------------- */

static void test_split(void)
{
    struct kt k;

    kt_init(&k, KEEL_OP_SPLIT);
    kt_in(&k, KEEL_F32, 2, S(7, 4));
    kt_out(&k, KEEL_F32, 2, S(2, 4));
    kt_out(&k, KEEL_F32, 2, S(2, 4));
    kt_out(&k, KEEL_F32, 2, S(3, 4));
    kt_attr_ints(&k, "sections", 3, S(2, 2, 3));
    KT_OK(&k);

    /* One -1 takes the rest; the outputs carry the resolved size. */
    kt_init(&k, KEEL_OP_SPLIT);
    kt_in(&k, KEEL_F32, 2, S(3, 8));
    kt_out(&k, KEEL_F32, 2, S(3, 3));
    kt_out(&k, KEEL_F32, 2, S(3, 5));
    kt_attr_ints(&k, "sections", 2, S(3, -1));
    kt_attr_i(&k, "axis", -1);
    KT_OK(&k);

    /* The -1 resolved wrongly in an output. */
    kt_init(&k, KEEL_OP_SPLIT);
    kt_in(&k, KEEL_F32, 2, S(3, 8));
    kt_out(&k, KEEL_F32, 2, S(3, 3));
    kt_out(&k, KEEL_F32, 2, S(3, 4));
    kt_attr_ints(&k, "sections", 2, S(3, -1));
    kt_attr_i(&k, "axis", 1);
    KT_BAD(&k, "output 1 has shape");

    kt_init(&k, KEEL_OP_SPLIT);
    kt_in(&k, KEEL_F32, 1, S(7));
    kt_out(&k, KEEL_F32, 1, S(3));
    kt_out(&k, KEEL_F32, 1, S(3));
    kt_attr_ints(&k, "sections", 2, S(3, 3));
    KT_BAD(&k, "add up to 6");

    kt_init(&k, KEEL_OP_SPLIT);
    kt_in(&k, KEEL_F32, 1, S(7));
    kt_out(&k, KEEL_F32, 1, S(3));
    kt_out(&k, KEEL_F32, 1, S(4));
    kt_attr_ints(&k, "sections", 3, S(3, 4, 0));
    KT_BAD(&k, "3 entries but there are 2 outputs");

    kt_init(&k, KEEL_OP_SPLIT);
    kt_in(&k, KEEL_F32, 1, S(7));
    kt_out(&k, KEEL_F32, 1, S(9));
    kt_out(&k, KEEL_F32, 1, S(-2));
    kt_attr_ints(&k, "sections", 2, S(9, -2));
    KT_BAD(&k, NULL); /* a negative output dim: the generic check */
    kt_init(&k, KEEL_OP_SPLIT);
    kt_in(&k, KEEL_F32, 1, S(7));
    kt_out(&k, KEEL_F32, 1, S(7));
    kt_out(&k, KEEL_F32, 1, S(0));
    kt_attr_ints(&k, "sections", 2, S(-1, -1));
    KT_BAD(&k, "at most one -1");

    kt_init(&k, KEEL_OP_SPLIT);
    kt_in(&k, KEEL_F32, 1, S(7));
    kt_out(&k, KEEL_F32, 1, S(7));
    kt_attr_ints(&k, "sections", 1, S(7));
    kt_attr_i(&k, "axis", 1);
    KT_BAD(&k, "axis 1");

    kt_init(&k, KEEL_OP_SPLIT);
    kt_in(&k, KEEL_F32, 1, S(7));
    kt_out(&k, KEEL_F32, 1, S(7));
    KT_BAD(&k, "'sections' is required");
}

/* ---- gather, index_select --------------------------------------------------------------- */

static void test_gather(void)
{
    struct kt k;
    keel_tensor_desc *ix;

    kt_init(&k, KEEL_OP_GATHER);
    kt_in(&k, KEEL_F32, 2, S(5, 4));
    kt_in(&k, KEEL_I64, 1, S(3));
    kt_out(&k, KEEL_F32, 2, S(3, 4));
    KT_OK(&k);

    kt_init(&k, KEEL_OP_INDEX_SELECT);
    kt_in(&k, KEEL_U8, 2, S(5, 4));
    kt_in(&k, KEEL_I32, 1, S(6));
    kt_out(&k, KEEL_U8, 2, S(5, 6));
    kt_attr_i(&k, "axis", -1);
    KT_OK(&k);

    /* gather of a 0-d index: it arrives as [1] (stride 0), the output
     * drops the axis. */
    kt_init(&k, KEEL_OP_GATHER);
    kt_in(&k, KEEL_F32, 2, S(5, 4));
    ix = kt_in(&k, KEEL_I64, 1, S(1));
    ix->strides[0] = 0;
    kt_out(&k, KEEL_F32, 1, S(5));
    kt_attr_i(&k, "axis", 1);
    KT_OK(&k);
    /* index_select has no 0-d form. */
    k.op = KEEL_OP_INDEX_SELECT;
    KT_BAD(&k, "shape");

    kt_init(&k, KEEL_OP_GATHER);
    kt_in(&k, KEEL_F32, 2, S(5, 4));
    kt_in(&k, KEEL_I64, 1, S(3));
    kt_out(&k, KEEL_F32, 2, S(5, 4));
    KT_BAD(&k, "shape");

    kt_init(&k, KEEL_OP_GATHER);
    kt_in(&k, KEEL_F32, 2, S(5, 4));
    kt_in(&k, KEEL_F32, 1, S(3));
    kt_out(&k, KEEL_F32, 2, S(3, 4));
    KT_BAD(&k, "int32 or int64");

    kt_init(&k, KEEL_OP_GATHER);
    kt_in(&k, KEEL_F32, 2, S(5, 4));
    kt_in(&k, KEEL_I64, 2, S(3, 1));
    kt_out(&k, KEEL_F32, 2, S(3, 4));
    KT_BAD(&k, "1-D");

    kt_init(&k, KEEL_OP_GATHER);
    kt_in(&k, KEEL_F32, 2, S(5, 4));
    kt_in(&k, KEEL_I64, 1, S(3));
    kt_out(&k, KEEL_F64, 2, S(3, 4));
    KT_BAD(&k, "float64");

    kt_init(&k, KEEL_OP_GATHER);
    kt_in(&k, KEEL_F32, 2, S(5, 4));
    kt_in(&k, KEEL_I64, 1, S(3));
    kt_out(&k, KEEL_F32, 2, S(3, 4));
    kt_attr_i(&k, "axis", 2);
    KT_BAD(&k, "axis 2");

    kt_init(&k, KEEL_OP_GATHER);
    kt_in(&k, KEEL_F32, 2, S(5, 4));
    kt_out(&k, KEEL_F32, 2, S(3, 4));
    KT_BAD(&k, "input");
}

/* ---- scatter ------------------------------------------------------------------------------ */

static void test_scatter(void)
{
    struct kt k;
    keel_tensor_desc *u;

    kt_init(&k, KEEL_OP_SCATTER);
    kt_in(&k, KEEL_F32, 2, S(5, 4));
    kt_in(&k, KEEL_I64, 1, S(3));
    kt_in(&k, KEEL_F32, 2, S(3, 4));
    kt_out(&k, KEEL_F32, 2, S(5, 4));
    kt_attr_b(&k, "overwrite", 0);
    KT_OK(&k);

    /* A 0-d index arrives as [1], updates with a leading dim 1 of
     * stride 0. */
    kt_init(&k, KEEL_OP_SCATTER);
    kt_in(&k, KEEL_I8, 2, S(5, 4));
    kt_in(&k, KEEL_I32, 1, S(1))->strides[0] = 0;
    u = kt_in(&k, KEEL_I8, 2, S(1, 4));
    u->strides[0] = 0;
    kt_out(&k, KEEL_I8, 2, S(5, 4));
    KT_OK(&k);

    kt_init(&k, KEEL_OP_SCATTER);
    kt_in(&k, KEEL_F32, 2, S(5, 4));
    kt_in(&k, KEEL_I64, 1, S(3));
    kt_in(&k, KEEL_F32, 2, S(2, 4));
    kt_out(&k, KEEL_F32, 2, S(5, 4));
    KT_BAD(&k, "updates has 2 rows");

    kt_init(&k, KEEL_OP_SCATTER);
    kt_in(&k, KEEL_F32, 2, S(5, 4));
    kt_in(&k, KEEL_I64, 1, S(3));
    kt_in(&k, KEEL_F32, 2, S(3, 5));
    kt_out(&k, KEEL_F32, 2, S(5, 4));
    KT_BAD(&k, "updates has size 5 in dim 1");

    kt_init(&k, KEEL_OP_SCATTER);
    kt_in(&k, KEEL_F32, 2, S(5, 4));
    kt_in(&k, KEEL_I64, 1, S(3));
    kt_in(&k, KEEL_F64, 2, S(3, 4));
    kt_out(&k, KEEL_F32, 2, S(5, 4));
    KT_BAD(&k, "one dtype");

    kt_init(&k, KEEL_OP_SCATTER);
    kt_in(&k, KEEL_F32, 2, S(5, 4));
    kt_in(&k, KEEL_U8, 1, S(3));
    kt_in(&k, KEEL_F32, 2, S(3, 4));
    kt_out(&k, KEEL_F32, 2, S(5, 4));
    KT_BAD(&k, "int32 or int64");

    kt_init(&k, KEEL_OP_SCATTER);
    kt_in(&k, KEEL_F32, 0, NULL);
    kt_in(&k, KEEL_I64, 1, S(1));
    kt_in(&k, KEEL_F32, 1, S(1));
    kt_out(&k, KEEL_F32, 0, NULL);
    KT_BAD(&k, "at least 1 dim");

    kt_init(&k, KEEL_OP_SCATTER);
    kt_in(&k, KEEL_F32, 2, S(5, 4));
    kt_in(&k, KEEL_I64, 1, S(3));
    kt_in(&k, KEEL_F32, 2, S(3, 4));
    kt_out(&k, KEEL_F32, 2, S(3, 4));
    KT_BAD(&k, "shape");
}

/* ---- take_along_axis ---------------------------------------------------------------------- */

static void test_take_along_axis(void)
{
    struct kt k;
    keel_tensor_desc *x;

    /* x [4, 1] broadcast against index [4, 3] along axis 0: x arrives as
     * [4, 3] with stride 0 in dim 1. */
    kt_init(&k, KEEL_OP_TAKE_ALONG_AXIS);
    x = kt_in(&k, KEEL_F32, 2, S(4, 3));
    x->strides[0] = 1;
    x->strides[1] = 0;
    kt_in(&k, KEEL_I64, 2, S(2, 3));
    kt_out(&k, KEEL_F32, 2, S(2, 3));
    kt_attr_i(&k, "axis", 0);
    KT_OK(&k);

    kt_init(&k, KEEL_OP_TAKE_ALONG_AXIS);
    kt_in(&k, KEEL_F32, 2, S(4, 3));
    kt_in(&k, KEEL_I32, 2, S(4, 7));
    kt_out(&k, KEEL_F32, 2, S(4, 7));
    kt_attr_i(&k, "axis", -1);
    KT_OK(&k);

    kt_init(&k, KEEL_OP_TAKE_ALONG_AXIS);
    kt_in(&k, KEEL_F32, 2, S(4, 3));
    kt_in(&k, KEEL_I32, 2, S(5, 7));
    kt_out(&k, KEEL_F32, 2, S(5, 7));
    kt_attr_i(&k, "axis", 1);
    KT_BAD(&k, "the index has size 5 in dim 0");

    kt_init(&k, KEEL_OP_TAKE_ALONG_AXIS);
    kt_in(&k, KEEL_F32, 2, S(4, 3));
    kt_in(&k, KEEL_I32, 1, S(4));
    kt_out(&k, KEEL_F32, 1, S(4));
    kt_attr_i(&k, "axis", 0);
    KT_BAD(&k, "dims");

    kt_init(&k, KEEL_OP_TAKE_ALONG_AXIS);
    kt_in(&k, KEEL_F32, 2, S(4, 3));
    kt_in(&k, KEEL_I32, 2, S(4, 7));
    kt_out(&k, KEEL_F32, 2, S(4, 3));
    kt_attr_i(&k, "axis", 1);
    KT_BAD(&k, "shape");

    kt_init(&k, KEEL_OP_TAKE_ALONG_AXIS);
    kt_in(&k, KEEL_F32, 2, S(4, 3));
    kt_in(&k, KEEL_BOOL, 2, S(4, 7));
    kt_out(&k, KEEL_F32, 2, S(4, 7));
    kt_attr_i(&k, "axis", 1);
    KT_BAD(&k, "int32 or int64");

    kt_init(&k, KEEL_OP_TAKE_ALONG_AXIS);
    kt_in(&k, KEEL_F32, 2, S(4, 3));
    kt_in(&k, KEEL_I32, 2, S(4, 7));
    kt_out(&k, KEEL_F32, 2, S(4, 7));
    KT_BAD(&k, "'axis' is required");
    kt_attr_i(&k, "axis", -3);
    KT_BAD(&k, "axis -3");
}

/* ---- tile and pad -------------------------------------------------------------------------- */

static void test_tile(void)
{
    struct kt k;

    kt_init(&k, KEEL_OP_TILE);
    kt_in(&k, KEEL_F32, 2, S(2, 3));
    kt_out(&k, KEEL_F32, 2, S(4, 3));
    kt_attr_ints(&k, "repeat_times", 2, S(2, 1));
    KT_OK(&k);

    /* More repeats than dims: x gains leading dims. */
    kt_init(&k, KEEL_OP_TILE);
    kt_in(&k, KEEL_F32, 1, S(3));
    kt_out(&k, KEEL_F32, 2, S(2, 9));
    kt_attr_ints(&k, "repeat_times", 2, S(2, 3));
    KT_OK(&k);

    /* Fewer repeats than dims: the missing ones are 1; 0 empties a dim. */
    kt_init(&k, KEEL_OP_TILE);
    kt_in(&k, KEEL_F32, 3, S(2, 3, 4));
    kt_out(&k, KEEL_F32, 3, S(2, 3, 0));
    kt_attr_ints(&k, "repeat_times", 1, S(0));
    KT_OK(&k);

    kt_init(&k, KEEL_OP_TILE);
    kt_in(&k, KEEL_F32, 2, S(2, 3));
    kt_out(&k, KEEL_F32, 2, S(4, 6));
    kt_attr_ints(&k, "repeat_times", 2, S(2, 1));
    KT_BAD(&k, "shape");

    /* The output's rank is max(len(repeat_times), x's rank). */
    kt_init(&k, KEEL_OP_TILE);
    kt_in(&k, KEEL_F32, 1, S(3));
    kt_out(&k, KEEL_F32, 2, S(1, 6));
    kt_attr_ints(&k, "repeat_times", 1, S(2));
    KT_BAD(&k, "shape");

    kt_init(&k, KEEL_OP_TILE);
    kt_in(&k, KEEL_F32, 1, S(3));
    kt_out(&k, KEEL_F32, 1, S(3));
    kt_attr_ints(&k, "repeat_times", 1, S(-1));
    KT_BAD(&k, "negative");

    kt_init(&k, KEEL_OP_TILE);
    kt_in(&k, KEEL_F32, 1, S(3));
    kt_out(&k, KEEL_F32, 1, S(3));
    kt_attr_ints(&k, "repeat_times", 9, S(1, 1, 1, 1, 1, 1, 1, 1, 1));
    KT_BAD(&k, "at most 8");

    kt_init(&k, KEEL_OP_TILE);
    kt_in(&k, KEEL_F32, 1, S(1LL << 40));
    kt_out(&k, KEEL_F32, 1, S(1));
    kt_attr_ints(&k, "repeat_times", 1, S(1LL << 40));
    KT_BAD(&k, "int64");
}

static void test_pad(void)
{
    struct kt k;

    kt_init(&k, KEEL_OP_PAD);
    kt_in(&k, KEEL_F32, 2, S(3, 4));
    kt_out(&k, KEEL_F32, 2, S(6, 5));
    kt_attr_ints(&k, "pad", 4, S(1, 2, 0, 1));
    kt_attr_f(&k, "value", 2);
    KT_OK(&k);

    /* Pairs for the first dims only; reflect below the size. */
    kt_init(&k, KEEL_OP_PAD);
    kt_in(&k, KEEL_I32, 2, S(3, 4));
    kt_out(&k, KEEL_I32, 2, S(7, 4));
    kt_attr_ints(&k, "pad", 2, S(2, 2));
    kt_attr_s(&k, "mode", "reflect");
    KT_OK(&k);

    kt_init(&k, KEEL_OP_PAD);
    kt_in(&k, KEEL_F32, 1, S(3));
    kt_out(&k, KEEL_F32, 1, S(6));
    kt_attr_ints(&k, "pad", 2, S(0, 3));
    kt_attr_s(&k, "mode", "reflect");
    KT_BAD(&k, "less than the size 3");
    kt_attr_s(&k, "mode", "replicate");
    KT_OK(&k);
    kt_attr_s(&k, "mode", "wrap");
    KT_BAD(&k, "mode 'wrap'");

    /* replicate cannot pad an empty dim; constant can. */
    kt_init(&k, KEEL_OP_PAD);
    kt_in(&k, KEEL_F32, 1, S(0));
    kt_out(&k, KEEL_F32, 1, S(2));
    kt_attr_ints(&k, "pad", 2, S(1, 1));
    kt_attr_s(&k, "mode", "replicate");
    KT_BAD(&k, "empty dim 0");
    kt_attr_s(&k, "mode", "constant");
    KT_OK(&k);

    kt_init(&k, KEEL_OP_PAD);
    kt_in(&k, KEEL_F32, 1, S(3));
    kt_out(&k, KEEL_F32, 1, S(4));
    kt_attr_ints(&k, "pad", 3, S(1, 0, 0));
    KT_BAD(&k, "pairs");
    kt_attr_ints(&k, "pad", 4, S(1, 0, 0, 0));
    KT_BAD(&k, "pairs");
    kt_attr_ints(&k, "pad", 2, S(2, -1));
    KT_BAD(&k, "negative");
    kt_attr_ints(&k, "pad", 2, S(0, 2));
    KT_BAD(&k, "shape");

    kt_init(&k, KEEL_OP_PAD);
    kt_in(&k, KEEL_F32, 1, S(3));
    kt_out(&k, KEEL_F32, 1, S(3));
    KT_BAD(&k, "'pad' is required");
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
