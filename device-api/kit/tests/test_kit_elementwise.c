/*
 * The elementwise family's rules: broadcast, compare, logical,
 * logical_unary, where, same (with flip's, clip's, softplus's, leaky_relu's
 * and elu's attribute ranges), cast and creation. Expected outcomes follow
 * docs/ops.md ("What a kernel receives") and the core's shape rules in
 * core/src/dispatch/shape_elementwise.c.
 */
#include <math.h>

#include "kit_testlib.h"

#define S(...) ((const int64_t[]){__VA_ARGS__})

/* x, y of [2, 3] in dt; output [2, 3] in out_dt. */
static void binary(struct kt *k, int op, keel_dtype dt, keel_dtype out_dt)
{
    kt_init(k, op);
    kt_in(k, dt, 2, S(2, 3));
    kt_in(k, dt, 2, S(2, 3));
    kt_out(k, out_dt, 2, S(2, 3));
}

static void t_broadcast(void)
{
    struct kt k;

    binary(&k, KEEL_OP_ADD, KEEL_F32, KEEL_F32);
    KT_OK(&k);
    /* A broadcast operand arrives with stride 0, the output's shape. */
    k.in[1].strides[0] = 0;
    KT_OK(&k);
    binary(&k, KEEL_OP_SUBTRACT, KEEL_I64, KEEL_I64);
    KT_OK(&k);
    /* Un-broadcast input: the core always expands first. */
    kt_init(&k, KEEL_OP_ADD);
    kt_in(&k, KEEL_F32, 2, S(2, 3));
    kt_in(&k, KEEL_F32, 1, S(3));
    kt_out(&k, KEEL_F32, 2, S(2, 3));
    KT_BAD(&k, "broadcast to the output's shape");
    /* Mixed dtypes: promotion happened before the launch. */
    binary(&k, KEEL_OP_MULTIPLY, KEEL_F32, KEEL_F32);
    k.in[1].dtype = KEEL_F64;
    KT_BAD(&k, "promoted to one dtype");
    /* The output has the key dtype. */
    binary(&k, KEEL_OP_ADD, KEEL_F32, KEEL_F64);
    KT_BAD(&k, "output 0 is float64, expected float32");
    /* Output shape. */
    binary(&k, KEEL_OP_ADD, KEEL_F32, KEEL_F32);
    k.out[0].shape[1] = 4;
    KT_BAD(&k, "broadcast to the output's shape");
    /* bool arithmetic and integer division never reach a kernel. */
    binary(&k, KEEL_OP_ADD, KEEL_BOOL, KEEL_BOOL);
    KT_BAD(&k, "not one of the op's dtypes");
    binary(&k, KEEL_OP_DIVIDE, KEEL_I32, KEEL_I32);
    KT_BAD(&k, "not one of the op's dtypes");
    /* Arity. */
    binary(&k, KEEL_OP_ADD, KEEL_F32, KEEL_F32);
    k.nin = 1;
    KT_BAD(&k, "needs 2 input(s)");
    binary(&k, KEEL_OP_ADD, KEEL_F32, KEEL_F32);
    k.nout = 0;
    KT_BAD(&k, "needs 2 input(s) and 1 output(s)");
}

static void t_compare_logical(void)
{
    struct kt k;

    binary(&k, KEEL_OP_LESS, KEEL_F16, KEEL_BOOL);
    KT_OK(&k);
    binary(&k, KEEL_OP_EQUAL, KEEL_BOOL, KEEL_BOOL);
    KT_OK(&k);
    binary(&k, KEEL_OP_LESS, KEEL_F16, KEEL_F16);
    KT_BAD(&k, "expected bool");
    binary(&k, KEEL_OP_LOGICAL_AND, KEEL_I32, KEEL_BOOL);
    KT_OK(&k);
    binary(&k, KEEL_OP_LOGICAL_XOR, KEEL_I32, KEEL_BOOL);
    k.in[0].dtype = KEEL_U8;
    KT_BAD(&k, "one dtype");

    kt_init(&k, KEEL_OP_LOGICAL_NOT);
    kt_in(&k, KEEL_F32, 1, S(5))->strides[0] = -1; /* any strides */
    kt_out(&k, KEEL_BOOL, 1, S(5));
    KT_OK(&k);
    k.out[0].dtype = KEEL_F32;
    KT_BAD(&k, "expected bool");
}

static void t_where(void)
{
    struct kt k;

    kt_init(&k, KEEL_OP_WHERE);
    kt_in(&k, KEEL_BOOL, 2, S(2, 3));
    kt_in(&k, KEEL_I64, 2, S(2, 3));
    kt_in(&k, KEEL_I64, 2, S(2, 3));
    kt_out(&k, KEEL_I64, 2, S(2, 3));
    KT_OK(&k);
    k.in[0].dtype = KEEL_U8;
    KT_BAD(&k, "condition");
    k.in[0].dtype = KEEL_BOOL;
    k.in[2].dtype = KEEL_I32;
    KT_BAD(&k, "one dtype");
    k.in[2].dtype = KEEL_I64;
    k.out[0].dtype = KEEL_BOOL; /* the value dtype, not the condition's */
    KT_BAD(&k, "expected int64");
    k.out[0].dtype = KEEL_I64;
    k.in[0].shape[0] = 1;
    KT_BAD(&k, "input 0 has shape [1, 3]");
}

static void unary(struct kt *k, int op, keel_dtype dt)
{
    kt_init(k, op);
    kt_in(k, dt, 3, S(2, 3, 4));
    kt_out(k, dt, 3, S(2, 3, 4));
}

static void t_same(void)
{
    struct kt k;

    unary(&k, KEEL_OP_RELU, KEEL_F32);
    k.in[0].strides[0] = 0; /* views of any strides */
    k.in[0].strides[2] = -1;
    KT_OK(&k);
    unary(&k, KEEL_OP_EXP, KEEL_I32);
    KT_BAD(&k, "not one of the op's dtypes");
    unary(&k, KEEL_OP_NEG, KEEL_F32);
    k.out[0].shape[2] = 5;
    KT_BAD(&k, "output's shape");
    unary(&k, KEEL_OP_COPY, KEEL_BOOL);
    KT_OK(&k);
    k.out[0].dtype = KEEL_U8;
    KT_BAD(&k, "output 0 is uint8, expected bool");
    /* A non-contiguous output is refused by the generic check. */
    unary(&k, KEEL_OP_COPY, KEEL_F32);
    k.out[0].strides[0] = 24;
    KT_BAD(&k, "not row-major contiguous");

    /* flip: axes in range for x; a repeat flips once and is allowed. */
    unary(&k, KEEL_OP_FLIP, KEEL_F32);
    kt_attr_ints(&k, "axis", 2, S(0, -1));
    KT_OK(&k);
    kt_attr_ints(&k, "axis", 2, S(1, 1));
    KT_OK(&k);
    kt_attr_ints(&k, "axis", 1, S(3));
    KT_BAD(&k, "axis 3 is out of range for 3 dims");
    kt_attr_ints(&k, "axis", 1, S(-4));
    KT_BAD(&k, "axis -4");
    unary(&k, KEEL_OP_FLIP, KEEL_F32);
    KT_BAD(&k, "'axis' is required");

    /* clip */
    unary(&k, KEEL_OP_CLIP, KEEL_I32);
    KT_OK(&k); /* -inf, inf */
    kt_attr_f(&k, "min", 2);
    kt_attr_f(&k, "max", 1);
    KT_BAD(&k, "min 2 is greater than max 1");
    kt_attr_f(&k, "max", NAN);
    KT_BAD(&k, "NaN");
    /* softplus */
    unary(&k, KEEL_OP_SOFTPLUS, KEEL_F32);
    KT_OK(&k);
    kt_attr_f(&k, "beta", 0);
    KT_BAD(&k, "non-zero");
    kt_attr_f(&k, "beta", INFINITY);
    KT_BAD(&k, "finite");
    kt_attr_f(&k, "beta", 2);
    kt_attr_f(&k, "threshold", NAN);
    KT_BAD(&k, "threshold");
    /* leaky_relu, elu */
    unary(&k, KEEL_OP_LEAKY_RELU, KEEL_F64);
    kt_attr_f(&k, "negative_slope", -INFINITY);
    KT_BAD(&k, "negative_slope");
    unary(&k, KEEL_OP_ELU, KEEL_BF16);
    kt_attr_f(&k, "alpha", NAN);
    KT_BAD(&k, "alpha");
    kt_attr_f(&k, "alpha", 0.5);
    KT_OK(&k);
    /* bernoulli: p is the input, float only. */
    unary(&k, KEEL_OP_BERNOULLI, KEEL_F32);
    kt_attr_i(&k, "seed", 1);
    kt_attr_i(&k, "offset", 0);
    KT_OK(&k);
    unary(&k, KEEL_OP_BERNOULLI, KEEL_I64);
    kt_attr_i(&k, "seed", 1);
    kt_attr_i(&k, "offset", 0);
    KT_BAD(&k, "not one of the op's dtypes");
}

static void t_cast(void)
{
    struct kt k;

    kt_init(&k, KEEL_OP_CAST);
    kt_in(&k, KEEL_F32, 2, S(3, 1))->strides[0] = 2;
    kt_out(&k, KEEL_I8, 2, S(3, 1));
    kt_attr_dt(&k, "dtype", KEEL_I8);
    KT_OK(&k);
    kt_attr_dt(&k, "dtype", KEEL_F32); /* the same dtype is a copy */
    k.out[0].dtype = KEEL_F32;
    KT_OK(&k);
    kt_attr_dt(&k, "dtype", KEEL_BOOL);
    KT_BAD(&k, "output 0 is float32, expected bool");
    kt_attr_dt(&k, "dtype", KEEL_F32);
    k.out[0].shape[0] = 1;
    k.out[0].shape[1] = 3;
    KT_BAD(&k, "shape [1, 3], expected [3, 1]");
    KT_CASES(KEEL_OP_CAST, KEEL_F32,
        "bad 3 > 3 ! 'dtype' is required\n");
}

static void creation(struct kt *k, int op, keel_dtype dt, int n,
                     const int64_t *shape)
{
    kt_init(k, op);
    kt_attr_ints(k, "shape", n, shape);
    kt_attr_dt(k, "dtype", dt);
    kt_out(k, dt, n, shape);
}

static void t_creation(void)
{
    struct kt k;

    creation(&k, KEEL_OP_FULL, KEEL_I64, 2, S(2, 0));
    KT_OK(&k);
    creation(&k, KEEL_OP_FULL, KEEL_F32, 0, S(0));
    KT_OK(&k); /* a 0-d tensor */
    creation(&k, KEEL_OP_FULL, KEEL_F32, 2, S(2, 3));
    k.out[0].shape[1] = 4;
    KT_BAD(&k, "expected [2, 3]");
    creation(&k, KEEL_OP_FULL, KEEL_F32, 2, S(2, 3));
    k.out[0].dtype = KEEL_F16;
    KT_BAD(&k, "expected float32");
    creation(&k, KEEL_OP_FULL, KEEL_F32, 1, S(3));
    kt_in(&k, KEEL_F32, 1, S(3));
    KT_BAD(&k, "at most 0 input");
    creation(&k, KEEL_OP_FULL, KEEL_F32, 1, S(3));
    kt_attr_ints(&k, "shape", 1, S(-3));
    KT_BAD(&k, "negative");
    creation(&k, KEEL_OP_FULL, KEEL_F32, 1, S(3));
    kt_attr_ints(&k, "shape", 9, S(1, 1, 1, 1, 1, 1, 1, 1, 1));
    KT_BAD(&k, "at most 8");

    creation(&k, KEEL_OP_EYE, KEEL_F32, 2, S(3, 4));
    KT_OK(&k);
    creation(&k, KEEL_OP_EYE, KEEL_F32, 1, S(3));
    KT_BAD(&k, "2-D");
    creation(&k, KEEL_OP_ARANGE, KEEL_I32, 1, S(5));
    KT_OK(&k);
    kt_attr_f(&k, "step", INFINITY);
    KT_BAD(&k, "finite");
    creation(&k, KEEL_OP_ARANGE, KEEL_BOOL, 1, S(5));
    KT_BAD(&k, "not one of the op's dtypes");
    creation(&k, KEEL_OP_LINSPACE, KEEL_F32, 2, S(5, 1));
    kt_attr_f(&k, "start", 0);
    kt_attr_f(&k, "stop", 1);
    KT_BAD(&k, "1-D");
    creation(&k, KEEL_OP_LINSPACE, KEEL_F32, 1, S(5));
    KT_BAD(&k, "'start' is required");

    creation(&k, KEEL_OP_RANDINT, KEEL_I64, 1, S(4));
    kt_attr_i(&k, "seed", 3);
    kt_attr_i(&k, "offset", 0);
    kt_attr_i(&k, "high", 10);
    KT_OK(&k);
    kt_attr_i(&k, "low", 10);
    KT_BAD(&k, "low < high");
    creation(&k, KEEL_OP_UNIFORM, KEEL_F32, 1, S(4));
    kt_attr_i(&k, "seed", 3);
    kt_attr_i(&k, "offset", 0);
    KT_OK(&k);
    kt_attr_f(&k, "low", 2);
    KT_BAD(&k, "low <= high");
    creation(&k, KEEL_OP_NORMAL, KEEL_F64, 1, S(4));
    kt_attr_i(&k, "seed", 3);
    kt_attr_i(&k, "offset", 0);
    kt_attr_f(&k, "std", -1);
    KT_BAD(&k, "std >= 0");
    kt_attr_f(&k, "std", 0);
    KT_OK(&k);
}

static const CU_TestInfo tests[] = {
    {"broadcast", t_broadcast},
    {"compare, logical, logical_unary", t_compare_logical},
    {"where", t_where},
    {"same and its per-op attributes", t_same},
    {"cast", t_cast},
    {"creation", t_creation},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    return kt_main("kit-elementwise", tests);
}
