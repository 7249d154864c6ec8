/*
 * The conv family's rules (conv2d, fused_conv2d, conv2d_grad,
 * conv2d_transpose, conv2d_transpose_grad, pool2d, pool2d_grad,
 * adaptive_pool2d) and the conv and pool geometry. Expected shapes and
 * paddings are worked out by hand from the formulas of docs/ops.md ("What
 * a kernel receives") and core/src/shape_conv.c.
 */
#include <stdlib.h>
#include <string.h>

#include "kit_testlib.h"

#define S(...) ((const int64_t[]){__VA_ARGS__})
#define I2(k, name, a, b) kt_attr_ints((k), (name), 2, S(a, b))

/* ---- conv2d ---------------------------------------------------------------- */

/* conv2d x [2,3,9,9] * w [4,3,3,3] + b [4], padding 1 -> [2,4,9,9]. */
static void conv_base(struct kt *k, keel_dtype dt)
{
    kt_init(k, KEEL_OP_CONV2D);
    kt_in(k, dt, 4, S(2, 3, 9, 9));
    kt_in(k, dt, 4, S(4, 3, 3, 3));
    kt_in(k, dt, 1, S(4));
    kt_out(k, dt, 4, S(2, 4, 9, 9));
    I2(k, "padding", 1, 1);
}

static void t_conv2d_ok(void)
{
    struct kt k;

    conv_base(&k, KEEL_F32);
    KT_OK(&k);
    conv_base(&k, KEEL_BF16);
    KT_OK(&k);
    /* Without bias; attributes left out take the catalog defaults. */
    kt_spec(&k, KEEL_OP_CONV2D, KEEL_F64, "1,2,5,5 3,2,3,3 > 1,3,3,3");
    KT_OK(&k);
    /* groups 2, stride 2: (8 - 3) / 2 + 1 = 3. */
    kt_spec(&k, KEEL_OP_CONV2D, KEEL_F32, "2,4,8,8 6,2,3,3 > 2,6,3,3");
    I2(&k, "stride", 2, 2);
    kt_attr_i(&k, "groups", 2);
    KT_OK(&k);
    /* dilation 2 (kernel spans 5), padding 2: 7 + 4 - 5 + 1 = 7. */
    kt_spec(&k, KEEL_OP_CONV2D, KEEL_F32, "1,2,7,7 3,2,3,3 3 > 1,3,7,7");
    I2(&k, "dilation", 2, 2);
    I2(&k, "padding", 2, 2);
    KT_OK(&k);
    /* One value for stride/padding; four paddings (top, bottom, left,
     * right): h 5 + 1 + 0 - 3 + 1 = 4, w 5 + 2 + 0 - 3 + 1 = 5. */
    kt_spec(&k, KEEL_OP_CONV2D, KEEL_F32, "1,1,5,5 1,1,3,3 > 1,1,4,5");
    kt_attr_ints(&k, "padding", 4, S(1, 0, 2, 0));
    kt_attr_ints(&k, "stride", 1, S(1));
    KT_OK(&k);
    kt_attr_ints(&k, "padding", 1, S(1));
    k.out[0].shape[2] = k.out[0].shape[3] = 5;
    KT_OK(&k);
    /* SAME, stride 2 over 6: out 3, total pad (3-1)*2 + 3 - 6 = 1. */
    kt_spec(&k, KEEL_OP_CONV2D, KEEL_F32, "1,1,6,5 1,1,3,3 > 1,1,3,3");
    I2(&k, "stride", 2, 2);
    kt_attr_s(&k, "padding_algorithm", "SAME");
    KT_OK(&k);
    /* VALID ignores the padding: 5 - 3 + 1 = 3. */
    kt_spec(&k, KEEL_OP_CONV2D, KEEL_F32, "1,1,5,5 1,1,3,3 > 1,1,3,3");
    I2(&k, "padding", 4, 4);
    kt_attr_s(&k, "padding_algorithm", "VALID");
    KT_OK(&k);
    /* An empty batch and strided inputs reach the kernel. */
    conv_base(&k, KEEL_F32);
    k.in[0].shape[0] = 0;
    k.out[0].shape[0] = 0;
    k.in[1].strides[0] = 1; /* any view */
    KT_OK(&k);
}

static void t_conv2d_bad(void)
{
    struct kt k;

    conv_base(&k, KEEL_F32);
    k.nin = 1;
    KT_BAD(&k, "2 to 3 inputs");
    conv_base(&k, KEEL_F32);
    k.nout = 0;
    KT_BAD(&k, "1 output");
    conv_base(&k, KEEL_F32);
    k.in[0].ndim = 3;
    KT_BAD(&k, "x [N, C, H, W] must be 4-D");
    conv_base(&k, KEEL_F32);
    k.in[1].ndim = 2;
    KT_BAD(&k, "weight");
    conv_base(&k, KEEL_I32);
    KT_BAD(&k, "floating");
    conv_base(&k, KEEL_F32);
    k.in[1].dtype = KEEL_F64;
    KT_BAD(&k, "one dtype");
    conv_base(&k, KEEL_F32);
    k.in[2].dtype = KEEL_F16;
    KT_BAD(&k, "one dtype");
    conv_base(&k, KEEL_F32);
    k.in[2].shape[0] = 3;
    KT_BAD(&k, "bias");
    conv_base(&k, KEEL_F32);
    k.in[2].ndim = 2;
    k.in[2].shape[1] = 1;
    KT_BAD(&k, "bias");
    conv_base(&k, KEEL_F32);
    k.out[0].shape[3] = 7;
    KT_BAD(&k, "output 0 has shape [2, 4, 9, 7], expected [2, 4, 9, 9]");
    conv_base(&k, KEEL_F32);
    k.out[0].shape[1] = 3;
    KT_BAD(&k, "output 0 has shape");
    conv_base(&k, KEEL_F32);
    k.out[0].dtype = KEEL_F64;
    KT_BAD(&k, "output 0 is float64");
    conv_base(&k, KEEL_F32);
    k.out[0].ndim = 3;
    KT_BAD(&k, "output 0 has shape");
    /* groups */
    conv_base(&k, KEEL_F32);
    kt_attr_i(&k, "groups", 0);
    KT_BAD(&k, "groups = 0");
    conv_base(&k, KEEL_F32);
    kt_attr_i(&k, "groups", 2); /* 3 channels */
    KT_BAD(&k, "does not divide x's 3 channels");
    kt_init(&k, KEEL_OP_CONV2D); /* 3 output channels in 2 groups */
    kt_in(&k, KEEL_F32, 4, S(1, 4, 5, 5));
    kt_in(&k, KEEL_F32, 4, S(3, 2, 3, 3));
    kt_out(&k, KEEL_F32, 4, S(1, 3, 3, 3));
    kt_attr_i(&k, "groups", 2);
    KT_BAD(&k, "3 output channels");
    conv_base(&k, KEEL_F32);
    k.in[1].shape[1] = 2;
    KT_BAD(&k, "channel mismatch");
    /* kernel */
    conv_base(&k, KEEL_F32);
    k.in[1].shape[2] = 0;
    k.out[0].shape[2] = 11;
    KT_BAD(&k, "at least 1x1");
    kt_spec(&k, KEEL_OP_CONV2D, KEEL_F32, "1,1,2,2 1,1,3,3 > 1,1,1,1");
    KT_BAD(&k, "larger than the padded input");
    I2(&k, "dilation", 1, 2); /* padding 1 fits 3, not 5 */
    I2(&k, "padding", 1, 1);
    KT_BAD(&k, "dilated 5");
    conv_base(&k, KEEL_F32);
    k.in[0].shape[3] = 0;
    k.out[0].shape[3] = 0;
    KT_BAD(&k, "must not be empty");
    /* attributes */
    conv_base(&k, KEEL_F32);
    I2(&k, "stride", 1, 0);
    KT_BAD(&k, "'stride' = [1, 0] must be >= 1");
    conv_base(&k, KEEL_F32);
    kt_attr_ints(&k, "stride", 3, S(1, 1, 1));
    KT_BAD(&k, "'stride' needs 1 or 2 values");
    conv_base(&k, KEEL_F32);
    I2(&k, "dilation", 0, 1);
    KT_BAD(&k, "'dilation'");
    conv_base(&k, KEEL_F32);
    kt_attr_ints(&k, "padding", 3, S(1, 1, 1));
    KT_BAD(&k, "'padding' needs 1, 2 or 4 values");
    conv_base(&k, KEEL_F32);
    kt_attr_ints(&k, "padding", 4, S(1, 1, -1, 1));
    KT_BAD(&k, "padding values must be >= 0");
    conv_base(&k, KEEL_F32);
    kt_attr_s(&k, "padding_algorithm", "same");
    KT_BAD(&k, "padding_algorithm must be EXPLICIT, SAME or VALID");
    conv_base(&k, KEEL_F32);
    kt_attr_ints(&k, "stride", 1, S(INT64_MAX));
    KT_BAD(&k, "output 0 has shape"); /* a stride that large is legal */
    conv_base(&k, KEEL_F32);
    I2(&k, "dilation", INT64_MAX / 2, 1); /* spans INT64_MAX: legal */
    KT_BAD(&k, "larger than the padded input");
    I2(&k, "dilation", INT64_MAX / 2 + 1, 1);
    KT_BAD(&k, "overflows int64");
    conv_base(&k, KEEL_F32);
    I2(&k, "padding", INT64_MAX, 0);
    KT_BAD(&k, "overflows int64");
    conv_base(&k, KEEL_F32);
    kt_attr_s(&k, "padding_algorithm", "SAME");
    I2(&k, "dilation", INT64_MAX / 2 + 1, 1);
    KT_BAD(&k, "overflows int64");
    /* attribute of the wrong type: the generic check */
    conv_base(&k, KEEL_F32);
    kt_attr_i(&k, "stride", 1);
    KT_BAD(&k, "'stride'");
    /* an empty batch does not bound the plane: h * w overflows */
    kt_spec(&k, KEEL_OP_CONV2D, KEEL_F32, "0,1,1,1 1,1,1,1 > 0,1,1,1");
    KT_OK(&k);
    k.in[0].shape[2] = k.out[0].shape[2] = (int64_t)1 << 40;
    k.in[0].shape[3] = k.out[0].shape[3] = (int64_t)1 << 30;
    KT_BAD(&k, "overflow int64");
}

/* ---- conv2d_transpose -------------------------------------------------------- */

/* x [2,4,5,5], w [4,3,3,3], b [3], stride 2, padding 1:
 * (5 - 1) * 2 - 2 + 3 = 9 -> [2,3,9,9]. */
static void convt_base(struct kt *k)
{
    kt_spec(k, KEEL_OP_CONV2D_TRANSPOSE, KEEL_F32, "2,4,5,5 4,3,3,3 3 > 2,3,9,9");
    I2(k, "stride", 2, 2);
    I2(k, "padding", 1, 1);
}

static void t_convt(void)
{
    struct kt k;

    convt_base(&k);
    KT_OK(&k);
    /* output_padding 1: 8 */
    kt_spec(&k, KEEL_OP_CONV2D_TRANSPOSE, KEEL_F32, "1,4,4,4 4,3,3,3 > 1,3,8,8");
    I2(&k, "stride", 2, 2);
    I2(&k, "padding", 1, 1);
    I2(&k, "output_padding", 1, 1);
    KT_OK(&k);
    kt_attr_ints(&k, "output_padding", 1, S(1));
    KT_OK(&k);
    /* output_padding below the dilation although not the stride */
    I2(&k, "stride", 1, 1);
    I2(&k, "dilation", 2, 2); /* 3 - 2 + 5 + 1 = 7 */
    k.out[0].shape[2] = k.out[0].shape[3] = 7;
    KT_OK(&k);
    /* groups 2: O = 3 * 2; 5 - 1 + 3 = 7 */
    kt_spec(&k, KEEL_OP_CONV2D_TRANSPOSE, KEEL_F32, "1,4,5,5 4,3,3,3 6 > 1,6,7,7");
    kt_attr_i(&k, "groups", 2);
    KT_OK(&k);
    /* SAME from the transposed conv's input: 5 / 2 -> 3, total (3 - 1) *
     * 2 + 3 - 5 = 2, pads 1 and 1: (5 - 1) * 2 - 2 + 3 = 9 */
    convt_base(&k);
    kt_attr_s(&k, "padding_algorithm", "SAME");
    I2(&k, "padding", 7, 7);
    KT_OK(&k);

    convt_base(&k);
    I2(&k, "output_padding", 2, 0);
    KT_BAD(&k, "output_padding 2 must be smaller");
    convt_base(&k);
    I2(&k, "output_padding", -1, 0);
    KT_BAD(&k, "'output_padding'");
    convt_base(&k);
    k.in[1].shape[0] = 3;
    KT_BAD(&k, "channel mismatch");
    convt_base(&k);
    k.in[2].shape[0] = 4;
    KT_BAD(&k, "bias must be 1-D [3]");
    convt_base(&k);
    k.out[0].shape[2] = 10;
    KT_BAD(&k, "output 0 has shape");
    convt_base(&k);
    kt_attr_i(&k, "groups", 3); /* 4 channels */
    KT_BAD(&k, "does not divide");
    kt_spec(&k, KEEL_OP_CONV2D_TRANSPOSE, KEEL_F32, "1,4,1,1 4,3,1,1 > 1,3,1,1");
    I2(&k, "padding", 1, 1);
    KT_BAD(&k, "would be -1");
    convt_base(&k);
    k.in[0].shape[2] = 0;
    k.out[0].shape[2] = 0;
    KT_BAD(&k, "must not be empty");
    convt_base(&k);
    k.in[0].dtype = KEEL_BOOL;
    KT_BAD(&k, "floating");
    convt_base(&k);
    kt_attr_i(&k, "groups", INT64_MAX); /* 3 * groups overflows */
    k.in[0].shape[1] = 0;
    k.in[1].shape[0] = 0;
    KT_BAD(&k, "overflow");
}

/* ---- conv2d_grad, conv2d_transpose_grad ------------------------------------ */

static void grad_base(struct kt *k)
{
    kt_spec(k, KEEL_OP_CONV2D_GRAD, KEEL_F32,
       "2,3,9,9 4,3,3,3 2,4,9,9 > 2,3,9,9 4,3,3,3 4");
    I2(k, "padding", 1, 1);
}

static void t_conv_grad(void)
{
    struct kt k;

    grad_base(&k);
    KT_OK(&k);
    kt_attr_b(&k, "need_dx", 0);
    kt_attr_b(&k, "has_bias", 1);
    KT_OK(&k);
    /* has_bias = 0: (dx, dweight) */
    kt_spec(&k, KEEL_OP_CONV2D_GRAD, KEEL_F16,
       "2,4,8,8 6,2,3,3 2,6,3,3 > 2,4,8,8 6,2,3,3");
    I2(&k, "stride", 2, 2);
    kt_attr_i(&k, "groups", 2);
    kt_attr_b(&k, "has_bias", 0);
    KT_OK(&k);
    kt_out(&k, KEEL_F16, 1, S(6));
    KT_BAD(&k, "has_bias = 0, 2 outputs");
    grad_base(&k);
    k.nout = 2; /* has_bias defaults to 1 */
    KT_BAD(&k, "has_bias = 1, 3 outputs");
    grad_base(&k);
    k.nin = 2;
    KT_BAD(&k, "needs 3 inputs");
    grad_base(&k);
    k.in[2].shape[3] = 8;
    KT_BAD(&k, "dout (the forward output's gradient) has shape "
               "[2, 4, 9, 8], expected [2, 4, 9, 9]");
    grad_base(&k);
    k.in[2].dtype = KEEL_F64;
    KT_BAD(&k, "one dtype");
    grad_base(&k);
    k.out[0].shape[0] = 1;
    KT_BAD(&k, "output 0 has shape");
    grad_base(&k);
    k.out[1].shape[1] = 2;
    KT_BAD(&k, "output 1 has shape");
    grad_base(&k);
    k.out[2].shape[0] = 3;
    KT_BAD(&k, "output 2 has shape [3], expected [4]");
    grad_base(&k);
    k.out[1].dtype = KEEL_F16;
    KT_BAD(&k, "output 1 is float16");
    grad_base(&k);
    kt_attr_s(&k, "padding_algorithm", "FULL");
    KT_BAD(&k, "padding_algorithm");

    /* Transposed: x [2,4,5,5], w [4,3,3,3], dout [2,3,9,9] -> dx, dw,
     * db [3]. */
    kt_spec(&k, KEEL_OP_CONV2D_TRANSPOSE_GRAD, KEEL_F32,
       "2,4,5,5 4,3,3,3 2,3,9,9 > 2,4,5,5 4,3,3,3 3");
    I2(&k, "stride", 2, 2);
    I2(&k, "padding", 1, 1);
    KT_OK(&k);
    k.out[2].shape[0] = 4;
    KT_BAD(&k, "output 2 has shape [4], expected [3]");
    k.out[2].shape[0] = 3;
    k.in[2].shape[2] = 8;
    KT_BAD(&k, "dout");
    k.in[2].shape[2] = 9;
    I2(&k, "output_padding", 3, 3);
    KT_BAD(&k, "output_padding");
    I2(&k, "output_padding", 1, 1);
    KT_BAD(&k, "dout"); /* now 10x10 */
    k.in[2].shape[2] = k.in[2].shape[3] = 10;
    KT_OK(&k);
}

/* ---- conv geometry ------------------------------------------------------------ */

static void t_conv_geometry(void)
{
    struct kt k;
    keel_kit_conv g;
    keel_kit_msg m;

    /* SAME, stride 2 over 6 rows and 5 columns: rows out 3, total pad 1
     * (0 before, 1 after); columns out 3, total (3-1)*2 + 3 - 5 = 2. */
    kt_spec(&k, KEEL_OP_CONV2D, KEEL_F32, "1,1,6,5 1,1,3,3 > 1,1,3,3");
    I2(&k, "stride", 2, 2);
    kt_attr_s(&k, "padding_algorithm", "SAME");
    KT_OK(&k);
    CU_ASSERT_EQUAL(keel_kit_conv_geometry(&k.a, false, &k.in[0], &k.in[1],
                                           &k.out[0], &g, &m),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(g.h, 6);
    CU_ASSERT_EQUAL(g.w, 5);
    CU_ASSERT_EQUAL(g.oh, 3);
    CU_ASSERT_EQUAL(g.ow, 3);
    CU_ASSERT(g.pad[0] == 0 && g.pad[1] == 1 && g.pad[2] == 1 &&
              g.pad[3] == 1);
    CU_ASSERT(g.sh == 2 && g.sw == 2 && g.dh == 1 && g.dw == 1);
    CU_ASSERT(g.groups == 1 && g.cg == 1 && g.og == 1);
    /* The output side must agree; no message buffer is fine. */
    k.out[0].shape[2] = 4;
    CU_ASSERT_EQUAL(keel_kit_conv_geometry(&k.a, false, &k.in[0], &k.in[1],
                                           &k.out[0], &g, &m),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(m.text, "conv2d: the output side"));
    CU_ASSERT_EQUAL(keel_kit_conv_geometry(&k.a, false, &k.in[0], &k.in[1],
                                           &k.out[0], &g, NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(keel_kit_conv_geometry(&k.a, false, NULL, &k.in[1],
                                           &k.out[0], &g, &m),
                    KEEL_STATUS_INVALID_ARGUMENT);

    /* A grouped conv2d: c 4, o 6, groups 2 -> cg 2, og 3. */
    kt_spec(&k, KEEL_OP_CONV2D, KEEL_F32, "2,4,8,8 6,2,3,3 > 2,6,3,3");
    I2(&k, "stride", 2, 2);
    kt_attr_ints(&k, "padding", 4, S(1, 2, 3, 4));
    kt_attr_i(&k, "groups", 2);
    /* h: 8 + 3 - 3 = 8 / 2 + 1 = 5; w: 8 + 7 - 3 = 12 / 2 + 1 = 7 */
    k.out[0].shape[2] = 5;
    k.out[0].shape[3] = 7;
    KT_OK(&k);
    CU_ASSERT_EQUAL(keel_kit_conv_geometry(&k.a, false, &k.in[0], &k.in[1],
                                           &k.out[0], &g, &m),
                    KEEL_STATUS_OK);
    CU_ASSERT(g.n == 2 && g.c == 4 && g.o == 6 && g.cg == 2 && g.og == 3);
    CU_ASSERT(g.kh == 3 && g.kw == 3 && g.groups == 2);
    CU_ASSERT(g.pad[0] == 1 && g.pad[1] == 2 && g.pad[2] == 3 &&
              g.pad[3] == 4);
    CU_ASSERT(g.output_padding[0] == 0 && g.output_padding[1] == 0);

    /* conv2d_grad: big = x, small = dout. */
    grad_base(&k);
    KT_OK(&k);
    CU_ASSERT_EQUAL(keel_kit_conv_geometry(&k.a, false, &k.in[0], &k.in[1],
                                           &k.in[2], &g, &m),
                    KEEL_STATUS_OK);
    CU_ASSERT(g.c == 3 && g.o == 4 && g.oh == 9 && g.pad[0] == 1);

    /* The transposed conv's view: big = its output [1,6,7,7], small = x
     * [1,4,5,5]; weight [4,3,3,3] is [o, c/g]: c 6, o 4, cg 3, og 2. */
    kt_spec(&k, KEEL_OP_CONV2D_TRANSPOSE, KEEL_F32, "1,4,5,5 4,3,3,3 > 1,6,8,8");
    kt_attr_i(&k, "groups", 2);
    I2(&k, "dilation", 2, 2);
    I2(&k, "padding", 2, 2);
    I2(&k, "output_padding", 1, 1);
    /* (5 - 1) - 4 + 5 + 1 = 6 */
    k.out[0].shape[2] = k.out[0].shape[3] = 6;
    KT_OK(&k);
    CU_ASSERT_EQUAL(keel_kit_conv_geometry(&k.a, true, &k.out[0], &k.in[1],
                                           &k.in[0], &g, &m),
                    KEEL_STATUS_OK);
    CU_ASSERT(g.n == 1 && g.c == 6 && g.h == 6 && g.w == 6);
    CU_ASSERT(g.o == 4 && g.oh == 5 && g.ow == 5);
    CU_ASSERT(g.cg == 3 && g.og == 2 && g.dh == 2);
    CU_ASSERT(g.output_padding[0] == 1 && g.output_padding[1] == 1);
    /* Sides swapped by mistake: refused. */
    CU_ASSERT_EQUAL(keel_kit_conv_geometry(&k.a, true, &k.in[0], &k.in[1],
                                           &k.out[0], &g, &m),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(m.text, "conv2d_transpose:"));
}

/* ---- pooling ------------------------------------------------------------------ */

static void pool_base(struct kt *k, int op)
{
    kt_init(k, op);
    kt_in(k, KEEL_F32, 4, S(2, 3, 9, 9));
    kt_out(k, KEEL_F32, 4, S(2, 3, 5, 5));
    if (op == KEEL_OP_MAX_POOL2D)
        kt_out(k, KEEL_I64, 4, S(2, 3, 5, 5));
    I2(k, "kernel_size", 3, 3);
    I2(k, "stride", 2, 2);
    I2(k, "padding", 1, 1);
}

static void t_pool2d(void)
{
    struct kt k;

    /* (9 + 2 - 3) / 2 + 1 = 5 */
    pool_base(&k, KEEL_OP_MAX_POOL2D);
    KT_OK(&k);
    pool_base(&k, KEEL_OP_AVG_POOL2D);
    KT_OK(&k);
    kt_attr_b(&k, "exclusive", 0);
    KT_OK(&k);
    /* stride absent or empty = kernel_size: 9 / 3 = 3 */
    kt_spec(&k, KEEL_OP_MAX_POOL2D, KEEL_F64, "1,2,9,9 > 1,2,3,3 1,2,3,3:i64");
    kt_attr_ints(&k, "kernel_size", 1, S(3));
    KT_OK(&k);
    kt_attr_ints(&k, "stride", 0, S(0));
    KT_OK(&k);
    /* ceil_mode over 7 with 2/2: floor 3, ceil 4 */
    kt_spec(&k, KEEL_OP_MAX_POOL2D, KEEL_F16, "1,2,7,7 > 1,2,3,3 1,2,3,3:i64");
    I2(&k, "kernel_size", 2, 2);
    KT_OK(&k);
    kt_attr_b(&k, "ceil_mode", 1);
    KT_BAD(&k, "output 0 has shape [1, 2, 3, 3], expected [1, 2, 4, 4]");
    k.out[0].shape[2] = k.out[0].shape[3] = 4;
    k.out[1].shape[2] = k.out[1].shape[3] = 4;
    KT_OK(&k);
    /* four paddings: h (9 + 0 + 1 - 3) / 2 + 1 = 4, w (9 + 2 + 3 - 3) /
     * 2 + 1 = 6 */
    pool_base(&k, KEEL_OP_AVG_POOL2D);
    kt_attr_ints(&k, "padding", 4, S(0, 1, 2, 3));
    k.out[0].shape[2] = 4;
    k.out[0].shape[3] = 6;
    KT_OK(&k);
    /* empty batch */
    pool_base(&k, KEEL_OP_AVG_POOL2D);
    k.in[0].shape[0] = k.out[0].shape[0] = 0;
    KT_OK(&k);

    pool_base(&k, KEEL_OP_MAX_POOL2D);
    k.nout = 1;
    KT_BAD(&k, "needs 1 input(s) and 2 output(s)");
    pool_base(&k, KEEL_OP_AVG_POOL2D);
    kt_out(&k, KEEL_I64, 4, S(2, 3, 5, 5));
    KT_BAD(&k, "at most 1 output");
    pool_base(&k, KEEL_OP_MAX_POOL2D);
    k.out[1].dtype = KEEL_I32;
    KT_BAD(&k, "output 1 is int32, expected int64");
    pool_base(&k, KEEL_OP_MAX_POOL2D);
    k.out[1].shape[3] = 4;
    KT_BAD(&k, "output 1 has shape");
    pool_base(&k, KEEL_OP_MAX_POOL2D);
    k.out[0].shape[1] = 2;
    KT_BAD(&k, "output 0 has shape");
    pool_base(&k, KEEL_OP_AVG_POOL2D);
    k.out[0].dtype = KEEL_F64;
    KT_BAD(&k, "output 0 is float64");
    pool_base(&k, KEEL_OP_AVG_POOL2D);
    k.in[0].dtype = KEEL_I64;
    k.out[0].dtype = KEEL_I64;
    KT_BAD(&k, "floating");
    pool_base(&k, KEEL_OP_AVG_POOL2D);
    k.in[0].ndim = 3;
    KT_BAD(&k, "4-D");
    pool_base(&k, KEEL_OP_AVG_POOL2D);
    k.in[0].shape[2] = 0;
    KT_BAD(&k, "must not be empty");
    /* attributes */
    kt_spec(&k, KEEL_OP_MAX_POOL2D, KEEL_F32, "1,1,4,4 > 1,1,2,2 1,1,2,2:i64");
    KT_BAD(&k, "'kernel_size' is required");
    kt_attr_ints(&k, "kernel_size", 0, S(0));
    KT_BAD(&k, "'kernel_size' needs 1 or 2 values, got 0");
    kt_attr_ints(&k, "kernel_size", 3, S(2, 2, 2));
    KT_BAD(&k, "'kernel_size' needs 1 or 2 values, got 3");
    I2(&k, "kernel_size", 2, 0);
    KT_BAD(&k, "'kernel_size' = [2, 0] must be >= 1");
    I2(&k, "kernel_size", 2, 2);
    KT_OK(&k);
    I2(&k, "stride", 0, 2);
    KT_BAD(&k, "'stride'");
    I2(&k, "stride", 2, 2);
    kt_attr_ints(&k, "padding", 1, S(-1));
    KT_BAD(&k, "padding values must be >= 0");
    kt_attr_ints(&k, "padding", 1, S(0));
    I2(&k, "kernel_size", 5, 2);
    KT_BAD(&k, "larger than the padded input (dim 2: 4)");
    I2(&k, "kernel_size", 2, 2);
    kt_attr_ints(&k, "padding", 1, S(INT64_MAX));
    KT_BAD(&k, "overflows int64");
    kt_attr_ints(&k, "padding", 1, S(0));
    kt_attr_ints(&k, "stride", 1, S(INT64_MAX)); /* one window */
    KT_BAD(&k, "expected [1, 1, 1, 1]");
    kt_attr_b(&k, "ceil_mode", 1); /* span + stride does not fit */
    KT_BAD(&k, "overflows int64");
}

static void t_adaptive(void)
{
    struct kt k;

    kt_spec(&k, KEEL_OP_ADAPTIVE_AVG_POOL2D, KEEL_F32, "2,3,9,7 > 2,3,4,3");
    I2(&k, "output_size", 4, 3);
    KT_OK(&k);
    I2(&k, "output_size", -1, 3);
    KT_BAD(&k, "expected [2, 3, 9, 3]");
    k.out[0].shape[2] = 9;
    KT_OK(&k);
    kt_attr_ints(&k, "output_size", 1, S(2));
    KT_BAD(&k, "expected [2, 3, 2, 2]");
    k.out[0].shape[2] = k.out[0].shape[3] = 2;
    KT_OK(&k);
    /* larger than the input is fine: windows overlap */
    kt_attr_ints(&k, "output_size", 1, S(20));
    k.out[0].shape[2] = k.out[0].shape[3] = 20;
    KT_OK(&k);

    I2(&k, "output_size", 0, 20);
    KT_BAD(&k, "output_size values must be >= 1");
    I2(&k, "output_size", -2, 20);
    KT_BAD(&k, "got -2");
    kt_attr_ints(&k, "output_size", 3, S(20, 20, 20));
    KT_BAD(&k, "'output_size' needs 1 or 2 values");
    kt_attr_ints(&k, "output_size", 1, S(20));
    k.out[0].dtype = KEEL_F16;
    KT_BAD(&k, "output 0 is float16");
    k.out[0].dtype = KEEL_F32;
    k.in[0].shape[3] = 0;
    KT_BAD(&k, "must not be empty");
    k.in[0].shape[3] = 7;
    k.nout = 0;
    KT_BAD(&k, "1 output");
    k.nout = 1;
    kt_attr_ints(&k, "output_size", 1, S(INT64_MAX));
    KT_BAD(&k, "overflows int64");
}

static void t_pool_grad(void)
{
    struct kt k;

    /* max_pool2d_grad (x, indices, dout) */
    kt_spec(&k, KEEL_OP_MAX_POOL2D_GRAD, KEEL_F32,
       "2,3,8,8 2,3,4,4:i64 2,3,4,4 > 2,3,8,8");
    KT_OK(&k);
    k.in[1].shape[3] = k.in[2].shape[3] = 5; /* no window to agree with */
    KT_OK(&k);
    k.in[1].shape[3] = 4;
    KT_BAD(&k, "indices (dout's shape) has shape [2, 3, 4, 4], expected "
               "[2, 3, 4, 5]");
    k.in[1].shape[3] = 5;
    k.in[1].dtype = KEEL_I32;
    KT_BAD(&k, "indices must be int64, got int32");
    k.in[1].dtype = KEEL_I64;
    k.in[2].shape[1] = 2;
    k.in[1].shape[1] = 2;
    KT_BAD(&k, "dout (x's N and C) has shape");
    k.in[2].shape[1] = k.in[1].shape[1] = 3;
    k.in[2].dtype = KEEL_F64;
    KT_BAD(&k, "one dtype");
    k.in[2].dtype = KEEL_F32;
    k.out[0].shape[2] = 4;
    KT_BAD(&k, "output 0 has shape");
    k.out[0].shape[2] = 8;
    k.out[0].dtype = KEEL_BF16;
    KT_BAD(&k, "output 0 is bfloat16");
    k.out[0].dtype = KEEL_F32;
    k.nin = 2;
    KT_BAD(&k, "3 input(s)");
    k.nin = 3;
    k.in[1].ndim = 3;
    KT_BAD(&k, "indices");
    k.in[1].ndim = 4;
    KT_OK(&k);

    /* avg_pool2d_grad (x, dout) with the forward's attributes */
    kt_spec(&k, KEEL_OP_AVG_POOL2D_GRAD, KEEL_F32, "2,3,9,9 2,3,5,5 > 2,3,9,9");
    I2(&k, "kernel_size", 3, 3);
    I2(&k, "stride", 2, 2);
    I2(&k, "padding", 1, 1);
    KT_OK(&k);
    kt_attr_b(&k, "exclusive", 0);
    KT_OK(&k);
    k.in[1].shape[2] = 4;
    KT_BAD(&k, "dout (the forward output's gradient) has shape "
               "[2, 3, 4, 5], expected [2, 3, 5, 5]");
    k.in[1].shape[2] = 5;
    kt_attr_b(&k, "ceil_mode", 1); /* (8 + 1) / 2 + 1 = 5 still */
    KT_OK(&k);
    I2(&k, "kernel_size", 0, 3);
    KT_BAD(&k, "'kernel_size'");
    I2(&k, "kernel_size", 3, 3);
    k.in[0].dtype = KEEL_I32;
    KT_BAD(&k, "floating");
    k.in[0].dtype = KEEL_F32;
    k.out[0].shape[0] = 1;
    KT_BAD(&k, "output 0 has shape");
    k.out[0].shape[0] = 2;
    k.nin = 3;
    k.in[2] = k.in[1];
    KT_BAD(&k, "at most 2 input");

    /* adaptive_avg_pool2d_grad */
    kt_spec(&k, KEEL_OP_ADAPTIVE_AVG_POOL2D_GRAD, KEEL_F32,
       "2,3,9,7 2,3,4,3 > 2,3,9,7");
    I2(&k, "output_size", 4, 3);
    KT_OK(&k);
    k.in[1].shape[3] = 4;
    KT_BAD(&k, "dout");
    k.in[1].shape[3] = 3;
    k.in[1].dtype = KEEL_F16;
    KT_BAD(&k, "one dtype");
}

/* ---- pool geometry -------------------------------------------------------------- */

static void t_pool_geometry(void)
{
    struct kt k;
    keel_kit_pool g;
    keel_kit_msg m;

    pool_base(&k, KEEL_OP_AVG_POOL2D);
    kt_attr_ints(&k, "padding", 4, S(0, 1, 2, 3));
    k.out[0].shape[2] = 4;
    k.out[0].shape[3] = 6;
    KT_OK(&k);
    CU_ASSERT_EQUAL(keel_kit_pool_geometry(&k.a, KEEL_KIT_POOL_AVG, &k.in[0],
                                           &k.out[0], &g, &m),
                    KEEL_STATUS_OK);
    CU_ASSERT(g.n == 2 && g.c == 3 && g.h == 9 && g.w == 9);
    CU_ASSERT(g.oh == 4 && g.ow == 6);
    CU_ASSERT(g.kh == 3 && g.kw == 3 && g.sh == 2 && g.sw == 2);
    CU_ASSERT(g.pad[0] == 0 && g.pad[1] == 1 && g.pad[2] == 2 &&
              g.pad[3] == 3);
    CU_ASSERT(g.exclusive && !g.ceil_mode && !g.adaptive);
    kt_attr_b(&k, "exclusive", 0);
    kt_attr_b(&k, "ceil_mode", 1); /* (8 + 1) / 2 + 1 = 5: refused */
    KT_BAD(&k, "output 0");
    CU_ASSERT_EQUAL(keel_kit_pool_geometry(&k.a, KEEL_KIT_POOL_AVG, &k.in[0],
                                           &k.out[0], &g, &m),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(m.text, "avg_pool2d: the output side"));
    k.out[0].shape[2] = 5;
    k.out[0].shape[3] = 7; /* (11 + 1) / 2 + 1 */
    CU_ASSERT_EQUAL(keel_kit_pool_geometry(&k.a, KEEL_KIT_POOL_AVG, &k.in[0],
                                           &k.out[0], &g, NULL),
                    KEEL_STATUS_OK);
    CU_ASSERT(!g.exclusive && g.ceil_mode && g.oh == 5 && g.ow == 7);

    /* max: stride defaults to the kernel */
    kt_spec(&k, KEEL_OP_MAX_POOL2D, KEEL_F32, "1,1,6,4 > 1,1,3,2 1,1,3,2:i64");
    I2(&k, "kernel_size", 2, 2);
    KT_OK(&k);
    CU_ASSERT_EQUAL(keel_kit_pool_geometry(&k.a, KEEL_KIT_POOL_MAX, &k.in[0],
                                           &k.out[0], &g, &m),
                    KEEL_STATUS_OK);
    CU_ASSERT(g.sh == 2 && g.sw == 2 && g.oh == 3 && g.ow == 2);
    CU_ASSERT(!g.exclusive && !g.adaptive);

    /* adaptive */
    kt_spec(&k, KEEL_OP_ADAPTIVE_AVG_POOL2D, KEEL_F32, "2,3,9,7 > 2,3,4,7");
    I2(&k, "output_size", 4, -1);
    KT_OK(&k);
    CU_ASSERT_EQUAL(keel_kit_pool_geometry(&k.a, KEEL_KIT_POOL_ADAPTIVE,
                                           &k.in[0], &k.out[0], &g, &m),
                    KEEL_STATUS_OK);
    CU_ASSERT(g.adaptive && g.oh == 4 && g.ow == 7 && g.kh == 0 &&
              g.sh == 0 && g.pad[0] == 0);

    /* max_pool2d_grad: planes only */
    kt_spec(&k, KEEL_OP_MAX_POOL2D_GRAD, KEEL_F32,
       "2,3,8,8 2,3,4,5:i64 2,3,4,5 > 2,3,8,8");
    KT_OK(&k);
    CU_ASSERT_EQUAL(keel_kit_pool_geometry(&k.a, KEEL_KIT_POOL_INDEXED,
                                           &k.in[0], &k.in[2], &g, &m),
                    KEEL_STATUS_OK);
    CU_ASSERT(g.n == 2 && g.c == 3 && g.h == 8 && g.oh == 4 && g.ow == 5 &&
              g.kh == 0);
    k.in[2].shape[0] = 1;
    CU_ASSERT_EQUAL(keel_kit_pool_geometry(&k.a, KEEL_KIT_POOL_INDEXED,
                                           &k.in[0], &k.in[2], &g, &m),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(keel_kit_pool_geometry(&k.a, 7, &k.in[0], &k.in[2], &g,
                                           &m),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(m.text, "unknown pooling kind 7"));
}

/* ---- fused_conv2d ----------------------------------------------------------- */

static void t_fused_conv2d(void)
{
    struct kt k;
    keel_kit_conv g;
    keel_kit_msg m;
    double alpha = 0;

    /* conv2d's launches with each activation. */
    for (int a = 0; a < KEEL_FUSED_ACT_COUNT_; a++) {
        conv_base(&k, KEEL_F16);
        k.op = KEEL_OP_FUSED_CONV2D;
        kt_attr_s(&k, "activation", keel_fused_act_name((keel_fused_act)a));
        KT_OK(&k);
        CU_ASSERT_EQUAL(keel_kit_activation(&k.a, NULL), a);
    }
    KT_CASES(KEEL_OP_FUSED_CONV2D, KEEL_F32,
        "ok 2,4,8,8 6,2,3,3 > 2,6,3,3 | stride=[2,2] groups=2 "
        "activation=hardswish\n"
        "ok 1,1,6,5 1,1,3,3 > 1,1,3,3 | stride=[2,2] "
        "padding_algorithm=SAME\n"
        "ok 1,2,7,7 3,2,3,3 3 > 1,3,7,7 | dilation=[2,2] padding=[2,2] "
        "activation=leaky_relu alpha=0.1\n"
        "bad 2,4,8,8 6,2,3,3 > 2,6,3,3 | stride=[2,2] groups=2 "
        "activation=mish ! activation 'mish' is not one of\n"
        "bad 2,4,8,8 6,2,3,3 > 2,6,4,4 | stride=[2,2] groups=2 "
        "activation=relu ! output 0\n"
        "bad 1,2,7,7 3,2,3,3 3 > 1,3,7,7 | padding=[2,2] ! output 0\n");
    conv_base(&k, KEEL_F32);
    k.op = KEEL_OP_FUSED_CONV2D;
    kt_attr_s(&k, "activation", "leaky_relu");
    kt_attr_f(&k, "alpha", 0.25);
    KT_OK(&k);
    CU_ASSERT_EQUAL(keel_kit_activation(&k.a, &alpha), KEEL_FUSED_ACT_LEAKY_RELU);
    CU_ASSERT_EQUAL(alpha, 0.25);
    /* The geometry reads conv2d's attributes of a fused launch. */
    CU_ASSERT_EQUAL(keel_kit_conv_geometry(&k.a, false, &k.in[0], &k.in[1],
                                           &k.out[0], &g, &m),
                    KEEL_STATUS_OK);
    CU_ASSERT(g.o == 4 && g.oh == 9 && g.ow == 9 && g.pad[0] == 1 &&
              g.pad[3] == 1);
    /* A bad activation, and a bad bias with a good one. */
    kt_attr_s(&k, "activation", "Relu");
    KT_BAD(&k, "activation 'Relu'");
    conv_base(&k, KEEL_F32);
    k.op = KEEL_OP_FUSED_CONV2D;
    kt_attr_s(&k, "activation", "tanh");
    k.in[2].shape[0] = 3;
    KT_BAD(&k, "bias must be 1-D [4]");
}

static const CU_TestInfo tests[] = {
    {"conv2d accepted", t_conv2d_ok},
    {"conv2d refused", t_conv2d_bad},
    {"fused_conv2d", t_fused_conv2d},
    {"conv2d_transpose", t_convt},
    {"conv2d_grad and conv2d_transpose_grad", t_conv_grad},
    {"conv geometry", t_conv_geometry},
    {"max_pool2d and avg_pool2d", t_pool2d},
    {"adaptive_avg_pool2d", t_adaptive},
    {"pool grads", t_pool_grad},
    {"pool geometry", t_pool_geometry},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    return kt_main("kit-conv", tests);
}
