/*
 * The kit's linalg rules (matmul, linear, fused_linear) and the GEMM plan
 * both plugins
 * run: launches as core/src/shape_linalg.c sends them are accepted, each
 * kind of inconsistency is refused with a message that names it.
 */
#include <limits.h>
#include <string.h>

#include "kit_testlib.h"

#define S(...) ((const int64_t[]){__VA_ARGS__})

/* x [2, 3, 4] @ y [2, 4, 5] -> [2, 3, 5], as the core resolves it. */
static void mm_base(struct kt *k, keel_dtype dt)
{
    kt_init(k, KEEL_OP_MATMUL);
    kt_in(k, dt, 3, S(2, 3, 4));
    kt_in(k, dt, 3, S(2, 4, 5));
    kt_out(k, dt, 3, S(2, 3, 5));
    kt_attr_b(k, "transpose_x", 0);
    kt_attr_b(k, "transpose_y", 0);
}

static void t_matmul_ok(void)
{
    struct kt k;
    keel_tensor_desc *d;

    mm_base(&k, KEEL_F32);
    KT_OK(&k);
    mm_base(&k, KEEL_BF16);
    KT_OK(&k);

    /* transpose_y of a stored [2, 5, 4]: swapped strides, flag still
     * passed; the kernel sees [2, 4, 5]. */
    mm_base(&k, KEEL_F64);
    k.attr[1].v.i = 1;
    d = &k.in[1];
    d->strides[0] = 20;
    d->strides[1] = 1;
    d->strides[2] = 4;
    KT_OK(&k);

    /* Broadcast batch dims: y [4, 5] against x [2, 3, 4] arrives as
     * [2, 4, 5] with batch stride 0. */
    mm_base(&k, KEEL_F32);
    k.in[1].strides[0] = 0;
    KT_OK(&k);

    /* 1-D x [4] @ y [4, 5]: x as [1, 4] (row stride 0), output [5]. */
    kt_init(&k, KEEL_OP_MATMUL);
    d = kt_in(&k, KEEL_F32, 2, S(1, 4));
    d->strides[0] = 0;
    kt_in(&k, KEEL_F32, 2, S(4, 5));
    kt_out(&k, KEEL_F32, 1, S(5));
    KT_OK(&k);

    /* [2, 3, 4] @ 1-D y [4]: y as [2, 4, 1], output [2, 3]. */
    kt_init(&k, KEEL_OP_MATMUL);
    kt_in(&k, KEEL_F32, 3, S(2, 3, 4));
    d = kt_in(&k, KEEL_F32, 3, S(2, 4, 1));
    d->strides[0] = 0;
    d->strides[2] = 0;
    kt_out(&k, KEEL_F32, 2, S(2, 3));
    KT_OK(&k);

    /* 1-D @ 1-D: a 0-d output. */
    KT_CASES(KEEL_OP_MATMUL, KEEL_F32,
        "ok 1,7 7,1 > ()\n"
        /* K = 0 and empty batches reach the kernel. */
        "ok 0,3,0 0,0,5 > 0,3,5\n");
}

static void t_matmul_bad(void)
{
    struct kt k;

    /* Arity. */
    kt_init(&k, KEEL_OP_MATMUL);
    kt_in(&k, KEEL_F32, 2, S(3, 4));
    kt_out(&k, KEEL_F32, 2, S(3, 4));
    KT_BAD(&k, "input");

    /* Dtypes: integer operands, a mix, the output's. */
    mm_base(&k, KEEL_I32);
    KT_BAD(&k, "floating");
    mm_base(&k, KEEL_F32);
    k.in[1].dtype = KEEL_F64;
    KT_BAD(&k, "one dtype");
    mm_base(&k, KEEL_F32);
    k.out[0].dtype = KEEL_F16;
    KT_BAD(&k, "output 0 is float16");

    /* Unresolved operands: ranks differ, or below 2. */
    KT_CASES(KEEL_OP_MATMUL, KEEL_F32,
        "bad 2,3,4 4,5 > 2,3,5 ! one rank\n");
    kt_init(&k, KEEL_OP_MATMUL);
    kt_in(&k, KEEL_F32, 1, S(4));
    kt_in(&k, KEEL_F32, 1, S(4));
    kt_out(&k, KEEL_F32, 0, NULL);
    KT_BAD(&k, "one rank");

    /* Batch dims not broadcast, inner dims that differ. */
    mm_base(&k, KEEL_F32);
    k.in[1].shape[0] = 1;
    KT_BAD(&k, "batch dim 0");
    mm_base(&k, KEEL_F32);
    k.in[1].shape[1] = 6;
    KT_BAD(&k, "inner dims");

    /* Output shapes: wrong N, wrong batch, a dropped dim that is not 1. */
    mm_base(&k, KEEL_F32);
    k.out[0].shape[2] = 6;
    KT_BAD(&k, "output 0 has shape [2, 3, 6]");
    mm_base(&k, KEEL_F32);
    k.out[0].shape[0] = 3;
    KT_BAD(&k, "output 0 has shape");
    mm_base(&k, KEEL_F32);
    kt_init(&k, KEEL_OP_MATMUL);
    kt_in(&k, KEEL_F32, 3, S(2, 3, 4));
    kt_in(&k, KEEL_F32, 3, S(2, 4, 5));
    kt_out(&k, KEEL_F32, 2, S(2, 3));
    KT_BAD(&k, "M = 3 and N = 5");

    /* A strided output. */
    mm_base(&k, KEEL_F32);
    k.out[0].strides[2] = 2;
    k.out[0].strides[1] = 10;
    k.out[0].strides[0] = 30;
    KT_BAD(&k, "contiguous");

    /* A transpose flag that is no bool. */
    mm_base(&k, KEEL_F32);
    k.attr[0].v.i = 2;
    KT_BAD(&k, "transpose_x");
}

/* x [2, 3, 8] @ weight [8, 6] + bias [6] -> [2, 3, 6]. */
static void lin_base(struct kt *k, bool bias)
{
    kt_init(k, KEEL_OP_LINEAR);
    kt_in(k, KEEL_F32, 3, S(2, 3, 8));
    kt_in(k, KEEL_F32, 2, S(8, 6));
    if (bias)
        kt_in(k, KEEL_F32, 1, S(6));
    kt_out(k, KEEL_F32, 3, S(2, 3, 6));
}

static void t_linear(void)
{
    struct kt k;

    lin_base(&k, true);
    KT_OK(&k);
    lin_base(&k, false);
    KT_OK(&k);
    /* A transposed weight view is fine: descriptors are not rewritten. */
    lin_base(&k, true);
    k.in[1].strides[0] = 1;
    k.in[1].strides[1] = 8;
    KT_OK(&k);
    /* 1-D x [8] -> [6]. */
    KT_CASES(KEEL_OP_LINEAR, KEEL_F16,
        "ok 8 8,6 > 6\n");

    kt_init(&k, KEEL_OP_LINEAR);
    kt_in(&k, KEEL_F32, 2, S(3, 8));
    kt_out(&k, KEEL_F32, 2, S(3, 6));
    KT_BAD(&k, "inputs");
    lin_base(&k, true);
    k.in[2].dtype = KEEL_F64;
    KT_BAD(&k, "one dtype");
    lin_base(&k, true);
    k.in[1].ndim = 3;
    k.in[1].shape[2] = 1;
    KT_BAD(&k, "weight must be 2-D");
    lin_base(&k, true);
    k.in[1].shape[0] = 7;
    k.in[1].strides[0] = 6;
    KT_BAD(&k, "input features");
    lin_base(&k, true);
    k.in[2].shape[0] = 5;
    KT_BAD(&k, "bias");
    lin_base(&k, false);
    k.out[0].shape[2] = 5;
    KT_BAD(&k, "output 0 has shape [2, 3, 5], expected [2, 3, 6]");
    KT_CASES(KEEL_OP_LINEAR, KEEL_F32,
        "bad () 1,6 > () ! at least 1 dimension\n");
}

/* ---- fused_linear ---------------------------------------------------------- */

/* linear's x [2, 3, 8] @ weight [8, 6] + bias [6] -> [2, 3, 6], with
 * `activation` = act (NULL: left out). */
static void fused_base(struct kt *k, const char *act)
{
    kt_init(k, KEEL_OP_FUSED_LINEAR);
    kt_in(k, KEEL_F32, 3, S(2, 3, 8));
    kt_in(k, KEEL_F32, 2, S(8, 6));
    kt_in(k, KEEL_F32, 1, S(6));
    kt_out(k, KEEL_F32, 3, S(2, 3, 6));
    if (act)
        kt_attr_s(k, "activation", act);
}

static void t_fused_linear(void)
{
    struct kt k;
    keel_kit_matmul p;
    keel_kit_msg m;
    double alpha = -1;

    /* Every activation, by name; left out it is none, alpha 0. */
    for (int a = 0; a < KEEL_FUSED_ACT_COUNT_; a++) {
        fused_base(&k, keel_fused_act_name((keel_fused_act)a));
        KT_OK(&k);
        CU_ASSERT_EQUAL(keel_kit_activation(&k.a, NULL), a);
    }
    fused_base(&k, NULL);
    KT_OK(&k);
    CU_ASSERT_EQUAL(keel_kit_activation(&k.a, &alpha), KEEL_FUSED_ACT_NONE);
    CU_ASSERT_EQUAL(alpha, 0.0);
    fused_base(&k, "leaky_relu");
    kt_attr_f(&k, "alpha", 0.2);
    KT_OK(&k);
    CU_ASSERT_EQUAL(keel_kit_activation(&k.a, &alpha), KEEL_FUSED_ACT_LEAKY_RELU);
    CU_ASSERT_EQUAL(alpha, 0.2);
    /* linear's shapes: no bias, a 1-D x, half dtypes. */
    KT_CASES(KEEL_OP_FUSED_LINEAR, KEEL_BF16,
        "ok 8 8,6 > 6 | activation=silu\n"
        "ok 4,8 8,6 6 > 4,6 | activation=relu6\n"
        "bad 4,8 8,6 5 > 4,6 | activation=relu ! bias\n"
        "bad () 1,6 > () ! at least 1 dimension\n");

    /* Names outside the list, exact and lower case only. */
    fused_base(&k, "swish");
    KT_BAD(&k, "activation 'swish' is not one of none, relu, relu6, gelu, "
               "gelu_tanh, silu, sigmoid, tanh, leaky_relu, hardswish");
    CU_ASSERT_EQUAL(keel_kit_activation(&k.a, NULL), -1);
    fused_base(&k, "ReLU");
    KT_BAD(&k, "activation 'ReLU'");
    fused_base(&k, "");
    KT_BAD(&k, "activation ''");
    fused_base(&k, NULL);
    kt_attr_i(&k, "activation", 1);
    KT_BAD(&k, "activation");
    /* linear's own checks still apply. */
    fused_base(&k, "gelu");
    k.in[1].shape[0] = 7;
    k.in[1].strides[0] = 6;
    KT_BAD(&k, "input features");

    /* The GEMM plan is linear's; it validates the activation too. */
    fused_base(&k, "gelu");
    CU_ASSERT_EQUAL(kt_run(&k), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_kit_matmul_plan(KEEL_OP_FUSED_LINEAR, &k.a, &p, &m),
                    KEEL_STATUS_OK);
    CU_ASSERT(p.nb == 1 && p.batches == 2 && p.M == 3 && p.K == 8 &&
              p.N == 6 && p.ybs[0] == 0 && p.has_bias && p.bs == 1);
    fused_base(&k, "gelu_erf");
    CU_ASSERT_EQUAL(kt_run(&k), KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(keel_kit_matmul_plan(KEEL_OP_FUSED_LINEAR, &k.a, &p, &m),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(m.text, "'gelu_erf'"));
}

static void t_plan(void)
{
    struct kt k;
    keel_kit_matmul p;
    keel_kit_msg m;
    int64_t ld;

    /* Broadcast y [4, 5] over x [2, 3, 4]. */
    mm_base(&k, KEEL_F32);
    k.in[1].strides[0] = 0;
    CU_ASSERT_EQUAL(kt_run(&k), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_kit_matmul_plan(KEEL_OP_MATMUL, &k.a, &p, &m),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(p.nb, 1);
    CU_ASSERT_EQUAL(p.bshape[0], 2);
    CU_ASSERT_EQUAL(p.batches, 2);
    CU_ASSERT(p.M == 3 && p.N == 5 && p.K == 4);
    CU_ASSERT(p.xbs[0] == 12 && p.ybs[0] == 0);
    CU_ASSERT(p.xrs == 4 && p.xcs == 1 && p.yrs == 5 && p.ycs == 1);
    CU_ASSERT(!p.has_bias);
    /* y shared and x contiguous: one [6, 4] x [4, 5] GEMM. */
    keel_kit_matmul_merge_batches(&p);
    CU_ASSERT(p.nb == 0 && p.batches == 1 && p.M == 6 && p.xrs == 4);

    /* y not shared: the batches stay. */
    mm_base(&k, KEEL_F32);
    CU_ASSERT_EQUAL(kt_run(&k), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_kit_matmul_plan(KEEL_OP_MATMUL, &k.a, &p, &m),
                    KEEL_STATUS_OK);
    keel_kit_matmul_merge_batches(&p);
    CU_ASSERT(p.batches == 2 && p.M == 3);

    /* linear: batches of rows sharing the weight, bias stride. */
    lin_base(&k, true);
    CU_ASSERT_EQUAL(kt_run(&k), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_kit_matmul_plan(KEEL_OP_LINEAR, &k.a, &p, &m),
                    KEEL_STATUS_OK);
    CU_ASSERT(p.nb == 1 && p.batches == 2 && p.M == 3 && p.K == 8 &&
              p.N == 6 && p.ybs[0] == 0 && p.has_bias && p.bs == 1);
    keel_kit_matmul_merge_batches(&p);
    CU_ASSERT(p.batches == 1 && p.M == 6);

    /* The plan validates, and only for matmul and the linear ops. */
    lin_base(&k, true);
    k.in[2].shape[0] = 5;
    CU_ASSERT_EQUAL(kt_run(&k), KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(keel_kit_matmul_plan(KEEL_OP_LINEAR, &k.a, &p, &m),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(m.text, "bias"));
    CU_ASSERT_EQUAL(keel_kit_matmul_plan(KEEL_OP_ADD, &k.a, &p, &m),
                    KEEL_STATUS_INVALID_ARGUMENT);

    /* Layouts. */
    CU_ASSERT_EQUAL(keel_kit_mat_layout(3, 4, 4, 1, INT_MAX, &ld),
                    KEEL_KIT_MAT_ROW);
    CU_ASSERT_EQUAL(ld, 4);
    CU_ASSERT_EQUAL(keel_kit_mat_layout(3, 4, 1, 3, INT_MAX, &ld),
                    KEEL_KIT_MAT_COL);
    CU_ASSERT_EQUAL(ld, 3);
    CU_ASSERT_EQUAL(keel_kit_mat_layout(3, 4, 8, 2, INT_MAX, &ld),
                    KEEL_KIT_MAT_STRIDED);
    /* A row with stride 0 (1-D x) is still a row. */
    CU_ASSERT_EQUAL(keel_kit_mat_layout(1, 4, 0, 1, INT_MAX, &ld),
                    KEEL_KIT_MAT_ROW);
    CU_ASSERT_EQUAL(ld, 4);
    /* A leading dim beyond the BLAS's range must be packed. */
    CU_ASSERT_EQUAL(keel_kit_mat_layout(3, 4, (int64_t)INT_MAX + 1, 1,
                                        INT_MAX, &ld),
                    KEEL_KIT_MAT_STRIDED);
}

static const CU_TestInfo tests[] = {
    {"matmul accepted", t_matmul_ok},
    {"matmul refused", t_matmul_bad},
    {"linear", t_linear},
    {"fused_linear", t_fused_linear},
    {"gemm plan and layouts", t_plan},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    return kt_main("kit-linalg", tests);
}
