/*
 * The kit's nn rules: normalisations, losses, embedding, one_hot, dropout
 * and the optimizer updates. Each accepts a launch shaped as
 * core/src/shape_nn.c sends it and refuses each kind of inconsistency
 * with a message that names it; the norm geometry is checked against the
 * ops' documented splits.
 */
#include <math.h>
#include <string.h>

#include "kit_testlib.h"

#define S(...) ((const int64_t[]){__VA_ARGS__})

/* ---- batch_norm ---------------------------------------------------------- */

/* x [4, 3, 5] f16 with float32 parameters (the mixed-precision layout). */
static void bn_base(struct kt *k, keel_dtype xdt, keel_dtype pdt)
{
    kt_init(k, KEEL_OP_BATCH_NORM);
    kt_in(k, xdt, 3, S(4, 3, 5));
    for (int i = 0; i < 4; i++)
        kt_in(k, pdt, 1, S(3));
    kt_out(k, xdt, 3, S(4, 3, 5));
    kt_out(k, xdt == KEEL_F64 ? KEEL_F64 : KEEL_F32, 1, S(3));
    kt_out(k, xdt == KEEL_F64 ? KEEL_F64 : KEEL_F32, 1, S(3));
    kt_attr_b(k, "training", 1);
    kt_attr_f(k, "momentum", 0.9);
    kt_attr_f(k, "epsilon", 1e-5);
}

static void t_batch_norm(void)
{
    struct kt k;

    bn_base(&k, KEEL_F16, KEEL_F32);
    KT_OK(&k);
    bn_base(&k, KEEL_F16, KEEL_F16);
    KT_OK(&k);
    bn_base(&k, KEEL_F64, KEEL_F64);
    KT_OK(&k);

    bn_base(&k, KEEL_F32, KEEL_F32);
    k.nin = 4;
    KT_BAD(&k, "5 input");
    bn_base(&k, KEEL_I32, KEEL_F32);
    KT_BAD(&k, "x (input 0) must be a floating");
    bn_base(&k, KEEL_F32, KEEL_F32);
    k.in[0].ndim = 1;
    KT_BAD(&k, "at least 2 dims");
    bn_base(&k, KEEL_F16, KEEL_F64);
    KT_BAD(&k, "scale (input 1) must be float16 or float32");
    bn_base(&k, KEEL_F32, KEEL_F32);
    k.in[2].shape[0] = 4;
    KT_BAD(&k, "bias (input 2) must have shape [3]");
    bn_base(&k, KEEL_F32, KEEL_F32);
    k.in[3].strides[0] = 0;
    KT_BAD(&k, "running_mean (input 3) is updated in place");
    bn_base(&k, KEEL_F32, KEEL_F32);
    k.attr[2].v.f = -1;
    KT_BAD(&k, "epsilon");
    bn_base(&k, KEEL_F32, KEEL_F32);
    k.attr[1].v.f = NAN;
    KT_BAD(&k, "momentum");
    bn_base(&k, KEEL_F16, KEEL_F32);
    k.out[1].dtype = KEEL_F16;
    KT_BAD(&k, "output 1 is float16, expected float32");
    bn_base(&k, KEEL_F32, KEEL_F32);
    k.out[2].shape[0] = 4;
    KT_BAD(&k, "output 2 has shape [4], expected [3]");
    bn_base(&k, KEEL_F32, KEEL_F32);
    k.out[0].shape[2] = 6;
    KT_BAD(&k, "output 0 has shape");
}

/* (x, scale, saved_mean, saved_invstd, dy) -> (dx, dscale, dbias). */
static void bng_base(struct kt *k, keel_dtype xdt, keel_dtype pdt)
{
    kt_init(k, KEEL_OP_BATCH_NORM_GRAD);
    kt_in(k, xdt, 4, S(2, 3, 4, 4));
    for (int i = 0; i < 3; i++)
        kt_in(k, pdt, 1, S(3));
    kt_in(k, xdt, 4, S(2, 3, 4, 4));
    kt_out(k, xdt, 4, S(2, 3, 4, 4));
    kt_out(k, pdt, 1, S(3));
    kt_out(k, pdt, 1, S(3));
}

static void t_batch_norm_grad(void)
{
    struct kt k;

    bng_base(&k, KEEL_BF16, KEEL_F32);
    KT_OK(&k);
    /* A broadcast saved statistic is only read: fine. */
    bng_base(&k, KEEL_F32, KEEL_F32);
    k.in[2].strides[0] = 0;
    KT_OK(&k);

    bng_base(&k, KEEL_BF16, KEEL_F32);
    k.in[4].dtype = KEEL_F32;
    KT_BAD(&k, "dy (input 4) is float32, x bfloat16");
    bng_base(&k, KEEL_F32, KEEL_F32);
    k.in[4].shape[3] = 5;
    KT_BAD(&k, "dy (input 4) has shape");
    bng_base(&k, KEEL_F32, KEEL_F32);
    k.in[3].shape[0] = 2;
    KT_BAD(&k, "saved_invstd (input 3) must have shape [3]");
    bng_base(&k, KEEL_BF16, KEEL_F32);
    k.out[1].dtype = KEEL_BF16;
    KT_BAD(&k, "output 1 is bfloat16, expected float32");
    bng_base(&k, KEEL_F32, KEEL_F32);
    k.nout = 2;
    KT_BAD(&k, "3 output");
}

/* ---- layer_norm ---------------------------------------------------------- */

/* x [4, 6, 8], begin_norm_axis 1 (as -2): mean/invstd [4]. */
static void ln_base(struct kt *k, int nin, keel_dtype pdt)
{
    kt_init(k, KEEL_OP_LAYER_NORM);
    kt_in(k, KEEL_F16, 3, S(4, 6, 8));
    for (int i = 1; i < nin; i++)
        kt_in(k, pdt, 1, S(48));
    kt_out(k, KEEL_F16, 3, S(4, 6, 8));
    kt_out(k, KEEL_F32, 1, S(4));
    kt_out(k, KEEL_F32, 1, S(4));
    kt_attr_i(k, "begin_norm_axis", -2);
    kt_attr_f(k, "epsilon", 1e-5);
}

static void t_layer_norm(void)
{
    struct kt k;

    for (int n = 1; n <= 3; n++) {
        ln_base(&k, n, KEEL_F32);
        KT_OK(&k);
    }
    /* scale with the normalized shape instead of flat. */
    ln_base(&k, 2, KEEL_F16);
    k.in[1].ndim = 2;
    k.in[1].shape[0] = 6;
    k.in[1].shape[1] = 8;
    k.in[1].strides[0] = 8;
    k.in[1].strides[1] = 1;
    KT_OK(&k);
    /* Attributes absent: begin_norm_axis -1 normalises the last dim. */
    kt_init(&k, KEEL_OP_LAYER_NORM);
    kt_in(&k, KEEL_F64, 2, S(5, 7));
    kt_out(&k, KEEL_F64, 2, S(5, 7));
    kt_out(&k, KEEL_F64, 1, S(5));
    kt_out(&k, KEEL_F64, 1, S(5));
    KT_OK(&k);

    ln_base(&k, 2, KEEL_F32);
    k.attr[0].v.i = 3;
    KT_BAD(&k, "begin_norm_axis 3 is out of range");
    ln_base(&k, 2, KEEL_F32);
    k.in[1].shape[0] = 8;
    KT_BAD(&k, "scale (input 1) must match the normalized shape");
    ln_base(&k, 3, KEEL_F64);
    KT_BAD(&k, "scale (input 1) must be float16 or float32");
    ln_base(&k, 1, KEEL_F32);
    k.out[1].ndim = 2;
    k.out[1].shape[1] = 6;
    KT_BAD(&k, "output 1 has shape [4, 6], expected [4]");
    ln_base(&k, 1, KEEL_F32);
    k.out[2].dtype = KEEL_F16;
    KT_BAD(&k, "output 2 is float16");
    ln_base(&k, 1, KEEL_F32);
    k.attr[1].v.f = -0.5;
    KT_BAD(&k, "epsilon");
    KT_CASES(KEEL_OP_LAYER_NORM, KEEL_F32,
        "bad () > () () () ! begin_norm_axis\n");
}

/* (x [4, 6, 8], scale?, mean [4, 6], invstd [4, 6], dy), axis 2. */
static void lng_base(struct kt *k, bool scale)
{
    kt_init(k, KEEL_OP_LAYER_NORM_GRAD);
    kt_in(k, KEEL_F32, 3, S(4, 6, 8));
    if (scale)
        kt_in(k, KEEL_F32, 1, S(8));
    kt_in(k, KEEL_F32, 2, S(4, 6));
    kt_in(k, KEEL_F64, 1, S(24));
    kt_in(k, KEEL_F32, 3, S(4, 6, 8));
    kt_out(k, KEEL_F32, 3, S(4, 6, 8));
    kt_out(k, KEEL_F32, 1, S(8));
    kt_out(k, KEEL_F32, 1, S(8));
    kt_attr_i(k, "begin_norm_axis", 2);
}

static void t_layer_norm_grad(void)
{
    struct kt k;

    lng_base(&k, true);
    KT_OK(&k);
    lng_base(&k, false);
    KT_OK(&k);

    lng_base(&k, true);
    k.in[2].shape[1] = 5;
    KT_BAD(&k, "mean (input 2) must have 24 elements, got 20");
    lng_base(&k, false);
    k.in[2].dtype = KEEL_I64;
    KT_BAD(&k, "invstd (input 2) must be a floating");
    lng_base(&k, true);
    k.in[4].shape[0] = 3;
    KT_BAD(&k, "dy (input 4) has shape");
    lng_base(&k, true);
    k.in[1].shape[0] = 6;
    KT_BAD(&k, "scale (input 1)");
    /* Without a scale, dscale/dbias take x.shape[b:]: [8] in x's dtype. */
    lng_base(&k, false);
    k.out[1].dtype = KEEL_F64;
    KT_BAD(&k, "output 1 is float64, expected float32");
    lng_base(&k, true);
    k.nin = 3;
    KT_BAD(&k, "4 to 5 inputs");
}

/* ---- group_norm ---------------------------------------------------------- */

static void gn_base(struct kt *k, int nin)
{
    kt_init(k, KEEL_OP_GROUP_NORM);
    kt_in(k, KEEL_F32, 4, S(2, 6, 4, 4));
    for (int i = 1; i < nin; i++)
        kt_in(k, KEEL_F32, 1, S(6));
    kt_out(k, KEEL_F32, 4, S(2, 6, 4, 4));
    kt_out(k, KEEL_F32, 2, S(2, 3));
    kt_out(k, KEEL_F32, 2, S(2, 3));
    kt_attr_i(k, "groups", 3);
    kt_attr_f(k, "epsilon", 1e-5);
}

static void t_group_norm(void)
{
    struct kt k;

    for (int n = 1; n <= 3; n++) {
        gn_base(&k, n);
        KT_OK(&k);
    }
    gn_base(&k, 3);
    k.attr[0].v.i = 4;
    KT_BAD(&k, "groups = 4 must be positive and divide the 6 channels");
    gn_base(&k, 3);
    k.attr[0].v.i = 0;
    KT_BAD(&k, "groups = 0");
    gn_base(&k, 3);
    k.nattr = 0;
    KT_BAD(&k, "'groups' is required");
    gn_base(&k, 2);
    k.in[1].shape[0] = 3;
    KT_BAD(&k, "scale (input 1) must have shape [6]");
    gn_base(&k, 1);
    k.out[1].ndim = 1;
    k.out[1].shape[0] = 6;
    KT_BAD(&k, "output 1 has shape [6], expected [2, 3]");
    gn_base(&k, 1);
    k.in[0].ndim = 1;
    k.out[0].ndim = 1;
    KT_BAD(&k, "at least 2 dims");
}

static void gng_base(struct kt *k, bool scale)
{
    kt_init(k, KEEL_OP_GROUP_NORM_GRAD);
    kt_in(k, KEEL_F16, 4, S(2, 6, 4, 4));
    if (scale)
        kt_in(k, KEEL_F32, 1, S(6));
    kt_in(k, KEEL_F32, 2, S(2, 3));
    kt_in(k, KEEL_F32, 2, S(2, 3));
    kt_in(k, KEEL_F16, 4, S(2, 6, 4, 4));
    kt_out(k, KEEL_F16, 4, S(2, 6, 4, 4));
    kt_out(k, scale ? KEEL_F32 : KEEL_F16, 1, S(6));
    kt_out(k, scale ? KEEL_F32 : KEEL_F16, 1, S(6));
    kt_attr_i(k, "groups", 3);
}

static void t_group_norm_grad(void)
{
    struct kt k;

    gng_base(&k, true);
    KT_OK(&k);
    gng_base(&k, false);
    KT_OK(&k);
    gng_base(&k, true);
    k.in[3].shape[1] = 2;
    KT_BAD(&k, "invstd (input 3) must have 6 elements, got 4");
    gng_base(&k, false);
    k.out[2].dtype = KEEL_F32;
    KT_BAD(&k, "output 2 is float32, expected float16");
    gng_base(&k, true);
    k.attr[0].v.i = 5;
    KT_BAD(&k, "groups");
}

/* ---- cross_entropy ------------------------------------------------------- */

/* logits [6, 5], hard labels [6] int64, optional weight [5]. */
static void ce_base(struct kt *k, const char *red, bool weight)
{
    kt_init(k, KEEL_OP_CROSS_ENTROPY);
    kt_in(k, KEEL_F32, 2, S(6, 5));
    kt_in(k, KEEL_I64, 1, S(6));
    if (weight)
        kt_in(k, KEEL_F64, 1, S(5));
    if (!strcmp(red, "none"))
        kt_out(k, KEEL_F32, 1, S(6));
    else
        kt_out(k, KEEL_F32, 0, NULL);
    kt_out(k, KEEL_F32, 2, S(6, 5));
    kt_attr_b(k, "soft_label", 0);
    kt_attr_i(k, "ignore_index", -100);
    kt_attr_s(k, "reduction", red);
    kt_attr_i(k, "axis", -1);
    kt_attr_b(k, "use_softmax", 1);
    kt_attr_f(k, "label_smoothing", 0);
}

static void t_cross_entropy(void)
{
    struct kt k;

    ce_base(&k, "mean", false);
    KT_OK(&k);
    ce_base(&k, "sum", true);
    KT_OK(&k);
    ce_base(&k, "none", true);
    KT_OK(&k);
    /* A label with the class axis kept as 1: the loss keeps it too. */
    ce_base(&k, "none", false);
    k.in[1].ndim = 2;
    k.in[1].shape[1] = 1;
    k.out[0].ndim = 2;
    k.out[0].shape[1] = 1;
    KT_OK(&k);
    /* Soft labels, any floating dtype, class axis 0 of [5, 6]. */
    kt_init(&k, KEEL_OP_CROSS_ENTROPY);
    kt_in(&k, KEEL_F32, 2, S(5, 6));
    kt_in(&k, KEEL_F16, 2, S(5, 6));
    kt_out(&k, KEEL_F32, 2, S(1, 6));
    kt_out(&k, KEEL_F32, 2, S(5, 6));
    kt_attr_b(&k, "soft_label", 1);
    kt_attr_s(&k, "reduction", "none");
    kt_attr_i(&k, "axis", 0);
    kt_attr_f(&k, "label_smoothing", 0.1);
    KT_OK(&k);
    /* Any ignore_index: it only applies to label values. */
    ce_base(&k, "mean", false);
    k.attr[1].v.i = 3;
    KT_OK(&k);

    ce_base(&k, "mean", false);
    k.attr[2].v.s = "avg";
    KT_BAD(&k, "reduction must be 'none', 'mean' or 'sum', got 'avg'");
    ce_base(&k, "mean", false);
    k.attr[3].v.i = 2;
    KT_BAD(&k, "axis 2 is out of range");
    ce_base(&k, "mean", false);
    k.attr[5].v.f = 1.5;
    KT_BAD(&k, "label_smoothing");
    ce_base(&k, "mean", false);
    k.in[1].dtype = KEEL_F32;
    KT_BAD(&k, "a hard label must have an integer dtype");
    ce_base(&k, "mean", false);
    k.in[1].shape[0] = 5;
    KT_BAD(&k, "the hard label must have the logits' shape");
    ce_base(&k, "mean", false);
    k.attr[0].v.i = 1;
    KT_BAD(&k, "a soft label");
    ce_base(&k, "mean", true);
    k.in[2].shape[0] = 6;
    KT_BAD(&k, "weight (input 2) must have shape [5]");
    ce_base(&k, "none", false);
    k.out[0].ndim = 0;
    KT_BAD(&k, "output 0 has shape [], expected [6]");
    ce_base(&k, "mean", false);
    k.out[0].dtype = KEEL_F64;
    KT_BAD(&k, "output 0 is float64");
    ce_base(&k, "mean", false);
    k.out[1].shape[1] = 4;
    KT_BAD(&k, "output 1 has shape");
    KT_CASES(KEEL_OP_CROSS_ENTROPY, KEEL_F32,
        "bad 6,0 6:i64 > () 6,0 ! the class axis 1 is empty\n");
}

/* (softmax [6, 5], label [6], dloss, weight?) -> dlogits. */
static void ceg_base(struct kt *k, const char *red)
{
    kt_init(k, KEEL_OP_CROSS_ENTROPY_GRAD);
    kt_in(k, KEEL_F32, 2, S(6, 5));
    kt_in(k, KEEL_I32, 1, S(6));
    if (!strcmp(red, "none"))
        kt_in(k, KEEL_F64, 1, S(6));
    else
        kt_in(k, KEEL_F32, 0, NULL);
    kt_out(k, KEEL_F32, 2, S(6, 5));
    kt_attr_s(k, "reduction", red);
}

static void t_cross_entropy_grad(void)
{
    struct kt k;

    ceg_base(&k, "mean");
    KT_OK(&k);
    ceg_base(&k, "none");
    KT_OK(&k);
    ceg_base(&k, "none");
    kt_in(&k, KEEL_F32, 1, S(5));
    KT_OK(&k);

    ceg_base(&k, "sum");
    k.in[2].ndim = 1;
    k.in[2].shape[0] = 6;
    k.in[2].strides[0] = 1;
    KT_BAD(&k, "dloss (input 2) must have 1 elements");
    ceg_base(&k, "none");
    k.in[2].dtype = KEEL_I64;
    KT_BAD(&k, "dloss (input 2) must be a floating");
    ceg_base(&k, "mean");
    k.out[0].dtype = KEEL_F16;
    KT_BAD(&k, "output 0 is float16");
    ceg_base(&k, "mean");
    k.nin = 2;
    KT_BAD(&k, "3 to 4 inputs");
}

/* ---- mse_loss, bce_with_logits, nll_loss --------------------------------- */

static void t_loss(void)
{
    struct kt k;
    keel_tensor_desc *d;

    kt_init(&k, KEEL_OP_MSE_LOSS);
    kt_in(&k, KEEL_F32, 2, S(4, 7));
    kt_in(&k, KEEL_F64, 2, S(4, 7));
    kt_out(&k, KEEL_F32, 0, NULL);
    KT_OK(&k);
    kt_attr_s(&k, "reduction", "none");
    KT_BAD(&k, "output 0 has shape [], expected [4, 7]");
    k.out[0].ndim = 2;
    k.out[0].shape[0] = 4;
    k.out[0].shape[1] = 7;
    k.out[0].strides[0] = 7;
    k.out[0].strides[1] = 1;
    KT_OK(&k);
    k.in[1].shape[1] = 1;
    KT_BAD(&k, "the label (input 1) must have the input's shape");
    k.in[1].shape[1] = 7;
    k.in[1].dtype = KEEL_I64;
    KT_BAD(&k, "the label (input 1) must be a floating");
    k.in[1].dtype = KEEL_F32;
    kt_attr_s(&k, "reduction", "max");
    KT_BAD(&k, "reduction");

    /* bce_with_logits: pos_weight arrives broadcast to x's shape. */
    kt_init(&k, KEEL_OP_BCE_WITH_LOGITS);
    kt_in(&k, KEEL_F16, 2, S(4, 7));
    kt_in(&k, KEEL_F16, 2, S(4, 7));
    d = kt_in(&k, KEEL_F32, 2, S(4, 7));
    d->strides[0] = 0;
    kt_out(&k, KEEL_F16, 0, NULL);
    kt_attr_s(&k, "reduction", "sum");
    KT_OK(&k);
    d->shape[0] = 1;
    KT_BAD(&k, "pos_weight (input 2) must have the input's shape");
    /* mse_loss takes no third input. */
    KT_CASES(KEEL_OP_MSE_LOSS, KEEL_F32,
        "bad 4 4 4 > () ! at most 2 input\n");
}

static void t_nll_loss(void)
{
    struct kt k;

    /* logp [6, 5, 3] (class dim 1), label [6, 3]. */
    kt_init(&k, KEEL_OP_NLL_LOSS);
    kt_in(&k, KEEL_F32, 3, S(6, 5, 3));
    kt_in(&k, KEEL_U8, 2, S(6, 3));
    kt_in(&k, KEEL_F32, 1, S(5));
    kt_out(&k, KEEL_F32, 2, S(6, 3));
    kt_attr_i(&k, "ignore_index", -100);
    kt_attr_s(&k, "reduction", "none");
    KT_OK(&k);
    k.in[2].shape[0] = 3;
    KT_BAD(&k, "weight (input 2) must have shape [5]");
    k.in[2].shape[0] = 5;
    k.in[1].shape[1] = 5;
    KT_BAD(&k, "the label must have the input's shape without the class "
               "dim 1");
    k.in[1].shape[1] = 3;
    k.in[1].dtype = KEEL_F32;
    KT_BAD(&k, "the label (input 1) must have an integer dtype");
    k.in[1].dtype = KEEL_I64;
    k.out[0].ndim = 0;
    KT_BAD(&k, "output 0 has shape [], expected [6, 3]");

    /* 1-D logp [C]: a 0-d label, a 0-d loss. */
    KT_CASES(KEEL_OP_NLL_LOSS, KEEL_F64,
        "ok 5 ():i64 > ()\n"
        "bad 4,0 4:i64 > () ! the class dim is empty\n");
}

/* ---- embedding, one_hot, dropout ----------------------------------------- */

static void t_embedding(void)
{
    struct kt k;

    kt_init(&k, KEEL_OP_EMBEDDING);
    kt_in(&k, KEEL_I32, 2, S(3, 4));
    kt_in(&k, KEEL_BF16, 2, S(10, 8));
    kt_out(&k, KEEL_BF16, 3, S(3, 4, 8));
    kt_attr_i(&k, "padding_idx", 9);
    KT_OK(&k);
    k.attr[0].v.i = -1;
    KT_OK(&k);
    k.attr[0].v.i = 10;
    KT_BAD(&k, "padding_idx 10 is out of range for 10 rows");
    k.attr[0].v.i = -1;
    k.in[0].dtype = KEEL_F32;
    KT_BAD(&k, "ids (input 0) must have an integer dtype");
    k.in[0].dtype = KEEL_I64;
    k.in[1].ndim = 1;
    KT_BAD(&k, "the table must be [V, D]");
    k.in[1].ndim = 2;
    k.out[0].shape[2] = 10;
    KT_BAD(&k, "output 0 has shape [3, 4, 10], expected [3, 4, 8]");
    k.out[0].shape[2] = 8;
    k.out[0].dtype = KEEL_F32;
    KT_BAD(&k, "output 0 is float32, expected bfloat16");

    kt_init(&k, KEEL_OP_EMBEDDING_GRAD);
    kt_in(&k, KEEL_I64, 2, S(3, 4));
    kt_in(&k, KEEL_F32, 3, S(3, 4, 8));
    kt_out(&k, KEEL_F32, 2, S(10, 8));
    kt_attr_i(&k, "num_embeddings", 10);
    kt_attr_i(&k, "padding_idx", 2);
    KT_OK(&k);
    k.in[1].shape[1] = 5;
    KT_BAD(&k, "dout must be [ids.shape..., D]");
    k.in[1].shape[1] = 4;
    k.out[0].shape[0] = 9;
    KT_BAD(&k, "output 0 has shape [9, 8], expected [10, 8]");
    k.out[0].shape[0] = 10;
    k.attr[1].v.i = 10;
    KT_BAD(&k, "padding_idx 10");
    k.attr[1].v.i = -1;
    k.attr[0].v.i = -3;
    KT_BAD(&k, "num_embeddings must be >= 0");
    k.nattr = 0;
    KT_BAD(&k, "'num_embeddings' is required");
}

static void t_one_hot(void)
{
    struct kt k;

    kt_init(&k, KEEL_OP_ONE_HOT);
    kt_in(&k, KEEL_I8, 2, S(2, 3));
    kt_out(&k, KEEL_F32, 3, S(2, 3, 5));
    kt_attr_i(&k, "num_classes", 5);
    KT_OK(&k);
    k.out[0].shape[2] = 4;
    KT_BAD(&k, "output 0 has shape [2, 3, 4], expected [2, 3, 5]");
    k.out[0].shape[2] = 5;
    k.out[0].dtype = KEEL_F64;
    KT_BAD(&k, "output 0 is float64, expected float32");
    k.out[0].dtype = KEEL_F32;
    k.in[0].dtype = KEEL_BOOL;
    KT_BAD(&k, "integer dtype");
    k.in[0].dtype = KEEL_I64;
    k.attr[0].v.i = 0;
    k.out[0].shape[2] = 0;
    KT_BAD(&k, "num_classes must be positive");
    /* A 0-d x gives [num_classes]. */
    KT_CASES(KEEL_OP_ONE_HOT, KEEL_I64,
        "ok () > 3:f32 | num_classes=3\n");
}

static void t_dropout(void)
{
    struct kt k;

    kt_init(&k, KEEL_OP_DROPOUT);
    kt_in(&k, KEEL_F32, 2, S(4, 33));
    kt_out(&k, KEEL_F32, 2, S(4, 33));
    kt_out(&k, KEEL_U8, 2, S(4, 33));
    kt_attr_f(&k, "p", 0.3);
    kt_attr_s(&k, "mode", "upscale_in_train");
    kt_attr_b(&k, "training", 1);
    kt_attr_i(&k, "seed", 7);
    kt_attr_i(&k, "offset", 0);
    KT_OK(&k);
    k.attr[0].v.f = 1;
    KT_OK(&k);
    k.attr[0].v.f = 1.25;
    KT_BAD(&k, "p must be in [0, 1], got 1.25");
    k.attr[0].v.f = -0.1;
    KT_BAD(&k, "p must be in [0, 1]");
    k.attr[0].v.f = 0.5;
    k.attr[1].v.s = "scale";
    KT_BAD(&k, "mode must be");
    k.attr[1].v.s = "downscale_in_infer";
    KT_OK(&k);
    k.out[1].dtype = KEEL_BOOL;
    KT_BAD(&k, "output 1 is bool, expected uint8");
    k.out[1].dtype = KEEL_U8;
    k.out[0].strides[0] = 1;
    k.out[0].strides[1] = 4;
    KT_BAD(&k, "output 0 is not row-major contiguous");
    k.out[0].strides[0] = 33;
    k.out[0].strides[1] = 1;
    k.nattr = 3;
    KT_BAD(&k, "'seed' is required");
}

/* ---- optimizer updates --------------------------------------------------- */

static void adam_base(struct kt *k, int op)
{
    kt_init(k, op);
    kt_in(k, KEEL_F16, 2, S(4, 9));
    kt_in(k, KEEL_F32, 2, S(4, 9));
    kt_in(k, KEEL_F16, 2, S(4, 9));
    kt_in(k, KEEL_F16, 2, S(4, 9));
    kt_attr_f(k, "lr", 0.01);
    kt_attr_f(k, "beta1", 0.9);
    kt_attr_f(k, "beta2", 0.999);
    kt_attr_f(k, "beta1_pow", 0.9);
    kt_attr_f(k, "beta2_pow", 0.999);
}

static void t_optimizer(void)
{
    struct kt k;

    kt_init(&k, KEEL_OP_SGD_UPDATE);
    kt_in(&k, KEEL_F32, 2, S(4, 9));
    kt_in(&k, KEEL_BF16, 2, S(4, 9));
    kt_attr_f(&k, "lr", 0.1);
    KT_OK(&k);
    /* A broadcast grad is only read. */
    k.in[1].strides[0] = 0;
    KT_OK(&k);
    k.in[0].strides[0] = 0;
    KT_BAD(&k, "param (input 0) is updated in place");
    k.in[0].strides[0] = 9;
    k.in[1].shape[1] = 8;
    KT_BAD(&k, "grad (input 1) must have the param's shape");
    k.in[1].shape[1] = 9;
    k.in[1].dtype = KEEL_I32;
    KT_BAD(&k, "grad (input 1) must be a floating");
    k.in[1].dtype = KEEL_F32;
    kt_out(&k, KEEL_F32, 2, S(4, 9));
    KT_BAD(&k, "output");
    k.nout = 0;
    k.nattr = 0;
    KT_BAD(&k, "'lr' is required");

    kt_init(&k, KEEL_OP_MOMENTUM_UPDATE);
    kt_in(&k, KEEL_F64, 1, S(7));
    kt_in(&k, KEEL_F64, 1, S(7));
    kt_in(&k, KEEL_F32, 1, S(7));
    kt_attr_f(&k, "lr", 0.1);
    KT_BAD(&k, "state 1 (input 2) must have the param's dtype float64");
    k.in[2].dtype = KEEL_F64;
    KT_OK(&k);
    k.in[2].strides[0] = 0;
    KT_BAD(&k, "state 1 (input 2) is updated in place");
    k.in[2].strides[0] = 1;
    k.nin = 2;
    KT_BAD(&k, "3 input");

    adam_base(&k, KEEL_OP_ADAM_UPDATE);
    KT_OK(&k);
    adam_base(&k, KEEL_OP_ADAMW_UPDATE);
    KT_OK(&k);
    adam_base(&k, KEEL_OP_ADAM_UPDATE);
    k.attr[3].v.f = 1;
    KT_BAD(&k, "beta1_pow = 1 must be in [0, 1)");
    adam_base(&k, KEEL_OP_ADAMW_UPDATE);
    k.attr[2].v.f = -0.5;
    KT_BAD(&k, "beta2 = -0.5 must be in [0, 1)");
    adam_base(&k, KEEL_OP_ADAM_UPDATE);
    k.in[3].shape[0] = 3;
    KT_BAD(&k, "state 2 (input 3) must have the param's shape");
}

/* ---- check_finite_and_unscale -------------------------------------------- */

static void t_unscale(void)
{
    struct kt k;

    kt_init(&k, KEEL_OP_CHECK_FINITE_AND_UNSCALE);
    kt_in(&k, KEEL_BF16, 2, S(4, 9));
    kt_in(&k, KEEL_F32, 1, S(1));
    kt_in(&k, KEEL_BOOL, 1, S(1));
    KT_OK(&k);
    /* 0-d scale and found_inf, a strided x, an empty x */
    k.in[1].ndim = 0;
    k.in[2].ndim = 0;
    KT_OK(&k);
    k.in[0].strides[0] = 18;
    k.in[0].strides[1] = 2;
    KT_OK(&k);
    k.in[0].shape[0] = 0;
    KT_OK(&k);
    k.in[0].shape[0] = 4;
    k.in[0].strides[0] = 0;
    KT_BAD(&k, "x (input 0) is updated in place");
    k.in[0].strides[0] = 18;
    k.in[0].dtype = KEEL_I32;
    KT_BAD(&k, "x (input 0) must be a floating dtype, got int32");
    k.in[0].dtype = KEEL_F64;
    KT_OK(&k);
    k.in[1].dtype = KEEL_F64;
    KT_BAD(&k, "scale (input 1) must be float32, got float64");
    k.in[1].dtype = KEEL_F32;
    k.in[1].ndim = 1;
    k.in[1].shape[0] = 2;
    KT_BAD(&k, "scale (input 1) must have one element (shape [1] or []), "
               "got [2]");
    k.in[1].shape[0] = 1;
    k.in[2].dtype = KEEL_U8;
    KT_BAD(&k, "found_inf (input 2) must be bool, got uint8");
    k.in[2].dtype = KEEL_BOOL;
    k.in[2].ndim = 1;
    k.in[2].shape[0] = 0;
    KT_BAD(&k, "found_inf (input 2) must have one element");
    k.in[2].shape[0] = 1;
    KT_OK(&k);
    kt_out(&k, KEEL_F64, 2, S(4, 9));
    KT_BAD(&k, "output");
    k.nout = 0;
    k.nin = 2;
    KT_BAD(&k, "3 input");
}

/* ---- geometry ------------------------------------------------------------ */

static void t_norm_geometry(void)
{
    struct kt k;
    keel_kit_norm g;
    keel_kit_msg m;

    /* batch_norm: one set per channel of N * spatial elements. */
    bn_base(&k, KEEL_F32, KEEL_F32);
    CU_ASSERT_EQUAL(kt_run(&k), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_kit_norm_geometry(KEEL_OP_BATCH_NORM, &k.a, &g, &m),
                    KEEL_STATUS_OK);
    CU_ASSERT(g.outer == 3 && g.inner == 20 && g.n == 4 && g.c == 3 &&
              g.spatial == 5 && g.groups == 1 && g.params == 3);
    CU_ASSERT(g.scale == 1 && g.bias == 2 && g.stat[0] == 3 &&
              g.stat[1] == 4 && g.dy == -1);

    /* layer_norm_grad without a scale: (x, mean, invstd, dy). */
    lng_base(&k, false);
    CU_ASSERT_EQUAL(kt_run(&k), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(
        keel_kit_norm_geometry(KEEL_OP_LAYER_NORM_GRAD, &k.a, &g, &m),
        KEEL_STATUS_OK);
    CU_ASSERT(g.axis == 2 && g.outer == 24 && g.inner == 8 &&
              g.params == 8);
    CU_ASSERT(g.scale == -1 && g.stat[0] == 1 && g.stat[1] == 2 &&
              g.dy == 3);

    /* layer_norm with scale only; axis -2 of 3 dims. */
    ln_base(&k, 2, KEEL_F32);
    CU_ASSERT_EQUAL(kt_run(&k), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_kit_norm_geometry(KEEL_OP_LAYER_NORM, &k.a, &g, &m),
                    KEEL_STATUS_OK);
    CU_ASSERT(g.axis == 1 && g.outer == 4 && g.inner == 48 &&
              g.scale == 1 && g.bias == -1);

    /* group_norm_grad with a scale: sets of C/G * spatial per (n, g). */
    gng_base(&k, true);
    CU_ASSERT_EQUAL(kt_run(&k), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(
        keel_kit_norm_geometry(KEEL_OP_GROUP_NORM_GRAD, &k.a, &g, &m),
        KEEL_STATUS_OK);
    CU_ASSERT(g.groups == 3 && g.outer == 6 && g.inner == 32 &&
              g.n == 2 && g.c == 6 && g.spatial == 16 && g.params == 6);
    CU_ASSERT(g.scale == 1 && g.stat[0] == 2 && g.stat[1] == 3 &&
              g.dy == 4);

    /* It validates, and is for the norms only. */
    gn_base(&k, 1);
    k.attr[0].v.i = 4;
    CU_ASSERT_EQUAL(kt_run(&k), KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(keel_kit_norm_geometry(KEEL_OP_GROUP_NORM, &k.a, &g, &m),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(m.text, "groups"));
    CU_ASSERT_EQUAL(keel_kit_norm_geometry(KEEL_OP_SOFTMAX, &k.a, &g, &m),
                    KEEL_STATUS_INVALID_ARGUMENT);

    /* reduction strings. */
    ce_base(&k, "sum", false);
    CU_ASSERT_EQUAL(kt_run(&k), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_kit_reduction(&k.a), KEEL_KIT_RED_SUM);
    k.nattr = 0; /* absent: mean, which also gives a 0-d loss */
    CU_ASSERT_EQUAL(kt_run(&k), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_kit_reduction(&k.a), KEEL_KIT_RED_MEAN);
}

static const CU_TestInfo tests[] = {
    {"batch_norm", t_batch_norm},
    {"batch_norm_grad", t_batch_norm_grad},
    {"layer_norm", t_layer_norm},
    {"layer_norm_grad", t_layer_norm_grad},
    {"group_norm", t_group_norm},
    {"group_norm_grad", t_group_norm_grad},
    {"cross_entropy", t_cross_entropy},
    {"cross_entropy_grad", t_cross_entropy_grad},
    {"mse_loss and bce_with_logits", t_loss},
    {"nll_loss", t_nll_loss},
    {"embedding and embedding_grad", t_embedding},
    {"one_hot", t_one_hot},
    {"dropout", t_dropout},
    {"optimizer updates", t_optimizer},
    {"check_finite_and_unscale", t_unscale},
    {"norm geometry and reduction", t_norm_geometry},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    return kt_main("kit-nn", tests);
}
