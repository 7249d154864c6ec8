/*
 * The built-in layers and losses of keel/nn.h, Paddle 3.x defaults.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/autograd.h>
#include <keel/nn.h>

#include "runtime/runtime_internal.h"
#include "dispatch/dispatch_internal.h"

/* One private configuration struct for every built-in layer. */
struct nn_cfg {
    int kind;
    int64_t i[4];
    double a, b;
    bool flag, flag2;
    keel_conv2d_params conv;
    char reduction[8];
    keel_tensor *weight;     /* loss class weights */
    keel_tensor *pos_weight;
    keel_ce_options ce;
};

static void cfg_destroy(void *priv)
{
    struct nn_cfg *c = priv;

    if (!c)
        return;
    keel_tensor_free(c->weight);
    keel_tensor_free(c->pos_weight);
    free(c);
}

static struct nn_cfg *cfg_of(keel_layer *l)
{
    return keel_layer_priv(l);
}

static keel_status new_layer(const keel_layer_ops *ops, struct nn_cfg **cfg,
                             keel_layer **out)
{
    if (!out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    struct nn_cfg *c = calloc(1, sizeof(*c));

    if (!c)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY, "out of memory");
    keel_status st = keel_layer_create(ops, c, out);

    if (st != KEEL_STATUS_OK) {
        free(c);
        return st;
    }
    *cfg = c;
    return KEEL_STATUS_OK;
}

/* Create and register a parameter: attr (NULL: def) decides. */
static keel_status add_param(keel_layer *l, const char *name, int ndim,
                             const int64_t *shape, const keel_param_attr *attr,
                             keel_param_attr def)
{
    keel_tensor *t = NULL;
    keel_status st;

    if (attr && attr->kind == KEEL_INIT_NONE)
        return KEEL_STATUS_OK;
    if (!attr || attr->kind == KEEL_INIT_DEFAULT)
        attr = &def;
    keel_no_grad_begin();
    st = keel_init_param(ndim, shape, attr, &t);
    keel_no_grad_end();
    if (st == KEEL_STATUS_OK)
        st = keel_layer_add_parameter(l, name, t);
    keel_tensor_free(t);
    return st;
}

static keel_status add_buffer(keel_layer *l, const char *name, int64_t n,
                              double v)
{
    keel_tensor *t = NULL;
    keel_status st = keel_full(1, &n, KEEL_F32, v, NULL, &t);

    if (st == KEEL_STATUS_OK)
        st = keel_layer_add_buffer(l, name, t);
    keel_tensor_free(t);
    return st;
}

static const keel_param_attr init_zero = {KEEL_INIT_CONSTANT, 0, 0};
static const keel_param_attr init_one = {KEEL_INIT_CONSTANT, 1, 0};
static const keel_param_attr init_xavier = {KEEL_INIT_XAVIER_UNIFORM, 0, 0};

static keel_status bad(const char *layer, const char *msg)
{
    return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: %s", layer, msg);
}

static keel_status need_inputs(keel_layer *l, int nin, int want)
{
    if (nin != want)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: expects %d input(s), got %d",
                           keel_layer_type(l), want, nin);
    return KEEL_STATUS_OK;
}

/* Run an op, keep output 0, drop the others. */
static keel_status run_first(keel_op_id op, keel_tensor *const *in, int nin,
                             const keel_attr *attrs, int na,
                             keel_tensor **out)
{
    keel_tensor *outs[4] = {NULL, NULL, NULL, NULL};
    int nout = 0;
    keel_status st = keel_op_run(op, in, nin, attrs, na, outs, 4, &nout);

    if (st != KEEL_STATUS_OK)
        return st;
    for (int i = 1; i < nout; i++)
        keel_tensor_free(outs[i]);
    *out = outs[0];
    return KEEL_STATUS_OK;
}

/* ---- Linear ------------------------------------------------------------- */

static keel_status linear_fwd(keel_layer *l, keel_tensor *const *in, int nin,
                              keel_tensor **out)
{
    keel_status st = need_inputs(l, nin, 1);

    if (st != KEEL_STATUS_OK)
        return st;
    return keel_linear(in[0], keel_layer_parameter(l, "weight"),
                       keel_layer_parameter(l, "bias"), out);
}

static const keel_layer_ops linear_ops = {"Linear", linear_fwd, cfg_destroy};

keel_status keel_nn_linear(int64_t in_features, int64_t out_features,
                           const keel_param_attr *weight_attr,
                           const keel_param_attr *bias_attr, keel_layer **out)
{
    struct nn_cfg *c = NULL;
    keel_layer *l = NULL;
    keel_status st;
    int64_t ws[2] = {in_features, out_features};

    if (in_features <= 0 || out_features <= 0)
        return bad("Linear", "features must be positive");
    if (weight_attr && weight_attr->kind == KEEL_INIT_NONE)
        return bad("Linear", "the weight cannot be absent");
    st = new_layer(&linear_ops, &c, &l);
    if (st != KEEL_STATUS_OK)
        return st;
    st = add_param(l, "weight", 2, ws, weight_attr, init_xavier);
    if (st == KEEL_STATUS_OK)
        st = add_param(l, "bias", 1, &out_features, bias_attr, init_zero);
    if (st != KEEL_STATUS_OK) {
        keel_layer_free(l);
        return st;
    }
    *out = l;
    return KEEL_STATUS_OK;
}

/* ---- Conv2D / Conv2DTranspose ------------------------------------------- */

static keel_status conv_fwd(keel_layer *l, keel_tensor *const *in, int nin,
                            keel_tensor **out)
{
    struct nn_cfg *c = cfg_of(l);
    keel_status st = need_inputs(l, nin, 1);

    if (st != KEEL_STATUS_OK)
        return st;
    if (c->kind)
        return keel_conv2d_transpose(in[0], keel_layer_parameter(l, "weight"),
                                     keel_layer_parameter(l, "bias"),
                                     &c->conv, out);
    return keel_conv2d(in[0], keel_layer_parameter(l, "weight"),
                       keel_layer_parameter(l, "bias"), &c->conv, out);
}

static const keel_layer_ops conv_ops = {"Conv2D", conv_fwd, cfg_destroy};
static const keel_layer_ops convt_ops = {"Conv2DTranspose", conv_fwd,
                                         cfg_destroy};

static keel_status make_conv(bool transpose, int64_t cin, int64_t cout,
                             int64_t kh, int64_t kw,
                             const keel_conv2d_params *p,
                             const keel_param_attr *wa,
                             const keel_param_attr *ba, keel_layer **out)
{
    const char *name = transpose ? "Conv2DTranspose" : "Conv2D";
    keel_conv2d_params cp = p ? *p : keel_conv2d_default_params();
    struct nn_cfg *c = NULL;
    keel_layer *l = NULL;
    keel_status st;

    if (cin <= 0 || cout <= 0 || kh <= 0 || kw <= 0 || cp.groups <= 0)
        return bad(name, "channels, kernel and groups must be positive");
    if (cin % cp.groups || cout % cp.groups)
        return bad(name, "channels must be divisible by groups");
    if (wa && wa->kind == KEEL_INIT_NONE)
        return bad(name, "the weight cannot be absent");
    st = new_layer(transpose ? &convt_ops : &conv_ops, &c, &l);
    if (st != KEEL_STATUS_OK)
        return st;
    c->kind = transpose;
    c->conv = cp;
    int64_t ws[4] = {transpose ? cin : cout,
                     transpose ? cout / cp.groups : cin / cp.groups, kh, kw};
    /* Paddle: N(0, sqrt(2 / (in_channels * kh * kw))). */
    keel_param_attr def = {KEEL_INIT_NORMAL, 0,
                           sqrt(2.0 / ((double)cin * (double)(kh * kw)))};

    st = add_param(l, "weight", 4, ws, wa, def);
    if (st == KEEL_STATUS_OK)
        st = add_param(l, "bias", 1, &cout, ba, init_zero);
    if (st != KEEL_STATUS_OK) {
        keel_layer_free(l);
        return st;
    }
    *out = l;
    return KEEL_STATUS_OK;
}

keel_status keel_nn_conv2d(int64_t in_channels, int64_t out_channels,
                           int64_t kh, int64_t kw, const keel_conv2d_params *p,
                           const keel_param_attr *weight_attr,
                           const keel_param_attr *bias_attr, keel_layer **out)
{
    return make_conv(false, in_channels, out_channels, kh, kw, p, weight_attr,
                     bias_attr, out);
}

keel_status keel_nn_conv2d_transpose(int64_t in_channels,
                                     int64_t out_channels, int64_t kh,
                                     int64_t kw, const keel_conv2d_params *p,
                                     const keel_param_attr *weight_attr,
                                     const keel_param_attr *bias_attr,
                                     keel_layer **out)
{
    return make_conv(true, in_channels, out_channels, kh, kw, p, weight_attr,
                     bias_attr, out);
}

/* ---- pooling and Flatten ------------------------------------------------ */

static keel_status pool_fwd(keel_layer *l, keel_tensor *const *in, int nin,
                            keel_tensor **out)
{
    struct nn_cfg *c = cfg_of(l);
    keel_status st = need_inputs(l, nin, 1);
    int64_t k[2] = {c->i[0], c->i[0]}, s[2] = {c->i[1], c->i[1]};
    int64_t p[2] = {c->i[2], c->i[2]};
    keel_attr a[5];

    if (st != KEEL_STATUS_OK)
        return st;
    if (c->kind == 2) {
        a[0] = keel_attr_ints("output_size", &c->i[0], 2);
        return run_first(KEEL_OP_ADAPTIVE_AVG_POOL2D, in, 1, a, 1, out);
    }
    a[0] = keel_attr_ints("kernel_size", k, 2);
    a[1] = keel_attr_ints("stride", s, 2);
    a[2] = keel_attr_ints("padding", p, 2);
    a[3] = keel_attr_bool("ceil_mode", c->flag);
    if (c->kind == 0)
        return run_first(KEEL_OP_MAX_POOL2D, in, 1, a, 4, out);
    a[4] = keel_attr_bool("exclusive", c->flag2);
    return run_first(KEEL_OP_AVG_POOL2D, in, 1, a, 5, out);
}

static const keel_layer_ops maxpool_ops = {"MaxPool2D", pool_fwd,
                                           cfg_destroy};
static const keel_layer_ops avgpool_ops = {"AvgPool2D", pool_fwd,
                                           cfg_destroy};
static const keel_layer_ops apool_ops = {"AdaptiveAvgPool2D", pool_fwd,
                                         cfg_destroy};

static keel_status make_pool(int kind, int64_t k, int64_t s, int64_t p,
                             bool ceil_mode, bool exclusive, keel_layer **out)
{
    const keel_layer_ops *ops = kind == 0 ? &maxpool_ops : &avgpool_ops;
    struct nn_cfg *c = NULL;
    keel_status st;

    if (k <= 0 || p < 0)
        return bad(ops->type, "kernel must be positive, padding >= 0");
    st = new_layer(ops, &c, out);
    if (st != KEEL_STATUS_OK)
        return st;
    c->kind = kind;
    c->i[0] = k;
    c->i[1] = s > 0 ? s : k;
    c->i[2] = p;
    c->flag = ceil_mode;
    c->flag2 = exclusive;
    return KEEL_STATUS_OK;
}

keel_status keel_nn_max_pool2d(int64_t kernel, int64_t stride,
                               int64_t padding, bool ceil_mode,
                               keel_layer **out)
{
    return make_pool(0, kernel, stride, padding, ceil_mode, true, out);
}

keel_status keel_nn_avg_pool2d(int64_t kernel, int64_t stride,
                               int64_t padding, bool ceil_mode,
                               bool exclusive, keel_layer **out)
{
    return make_pool(1, kernel, stride, padding, ceil_mode, exclusive, out);
}

keel_status keel_nn_adaptive_avg_pool2d(int64_t oh, int64_t ow,
                                        keel_layer **out)
{
    struct nn_cfg *c = NULL;
    keel_status st;

    if (oh <= 0 || ow <= 0)
        return bad("AdaptiveAvgPool2D", "output size must be positive");
    st = new_layer(&apool_ops, &c, out);
    if (st != KEEL_STATUS_OK)
        return st;
    c->kind = 2;
    c->i[0] = oh;
    c->i[1] = ow;
    return KEEL_STATUS_OK;
}

static keel_status flatten_fwd(keel_layer *l, keel_tensor *const *in, int nin,
                               keel_tensor **out)
{
    struct nn_cfg *c = cfg_of(l);
    keel_status st = need_inputs(l, nin, 1);

    if (st != KEEL_STATUS_OK)
        return st;
    return keel_flatten(in[0], (int)c->i[0], (int)c->i[1], out);
}

static const keel_layer_ops flatten_ops = {"Flatten", flatten_fwd,
                                           cfg_destroy};

keel_status keel_nn_flatten(int start_axis, int stop_axis, keel_layer **out)
{
    struct nn_cfg *c = NULL;
    keel_status st = new_layer(&flatten_ops, &c, out);

    if (st != KEEL_STATUS_OK)
        return st;
    c->i[0] = start_axis;
    c->i[1] = stop_axis;
    return KEEL_STATUS_OK;
}

/* ---- activations -------------------------------------------------------- */

static keel_status act_fwd(keel_layer *l, keel_tensor *const *in, int nin,
                           keel_tensor **out)
{
    struct nn_cfg *c = cfg_of(l);
    keel_status st = need_inputs(l, nin, 1);
    keel_tensor *x = in[0];

    if (st != KEEL_STATUS_OK)
        return st;
    switch ((keel_activation)c->kind) {
    case KEEL_ACT_RELU:
        return keel_relu(x, out);
    case KEEL_ACT_RELU6:
        return keel_relu6(x, out);
    case KEEL_ACT_SIGMOID:
        return keel_sigmoid(x, out);
    case KEEL_ACT_TANH:
        return keel_tanh(x, out);
    case KEEL_ACT_SILU:
        return keel_silu(x, out);
    case KEEL_ACT_HARDSWISH:
        return keel_hardswish(x, out);
    case KEEL_ACT_GELU:
        return keel_gelu(x, c->a != 0, out);
    case KEEL_ACT_LEAKY_RELU:
        return keel_leaky_relu(x, c->a, out);
    case KEEL_ACT_ELU:
        return keel_elu(x, c->a, out);
    case KEEL_ACT_SOFTPLUS:
        return keel_softplus(x, c->a, c->b, out);
    case KEEL_ACT_SOFTMAX:
        return keel_softmax(x, (int)c->a, out);
    case KEEL_ACT_LOG_SOFTMAX:
        return keel_log_softmax(x, (int)c->a, out);
    }
    return bad("activation", "unknown kind");
}

#define ACT_COUNT 12
static const keel_layer_ops act_ops_init[ACT_COUNT] = {
    {"ReLU", act_fwd, cfg_destroy},      {"ReLU6", act_fwd, cfg_destroy},
    {"Sigmoid", act_fwd, cfg_destroy},   {"Tanh", act_fwd, cfg_destroy},
    {"Silu", act_fwd, cfg_destroy},      {"Hardswish", act_fwd, cfg_destroy},
    {"GELU", act_fwd, cfg_destroy},      {"LeakyReLU", act_fwd, cfg_destroy},
    {"ELU", act_fwd, cfg_destroy},       {"Softplus", act_fwd, cfg_destroy},
    {"Softmax", act_fwd, cfg_destroy},   {"LogSoftmax", act_fwd, cfg_destroy},
};

keel_status keel_nn_activation(keel_activation kind, double a, double b,
                               keel_layer **out)
{
    struct nn_cfg *c = NULL;
    keel_status st;

    if ((int)kind < 0 || (int)kind >= ACT_COUNT)
        return bad("activation", "unknown kind");
    st = new_layer(&act_ops_init[kind], &c, out);
    if (st != KEEL_STATUS_OK)
        return st;
    c->kind = (int)kind;
    c->a = a;
    c->b = b;
    return KEEL_STATUS_OK;
}

keel_status keel_nn_activation_default(keel_activation kind, keel_layer **out)
{
    double a = 0, b = 0;

    switch (kind) {
    case KEEL_ACT_LEAKY_RELU:
        a = 0.01;
        break;
    case KEEL_ACT_ELU:
        a = 1.0;
        break;
    case KEEL_ACT_SOFTPLUS:
        a = 1.0;
        b = 20.0;
        break;
    case KEEL_ACT_SOFTMAX:
    case KEEL_ACT_LOG_SOFTMAX:
        a = -1;
        break;
    default:
        break;
    }
    return keel_nn_activation(kind, a, b, out);
}

/* ---- normalisation ------------------------------------------------------ */

static keel_status bn_fwd(keel_layer *l, keel_tensor *const *in, int nin,
                          keel_tensor **out)
{
    struct nn_cfg *c = cfg_of(l);
    keel_status st = need_inputs(l, nin, 1);
    int nd;

    if (st != KEEL_STATUS_OK)
        return st;
    nd = keel_tensor_ndim(in[0]);
    if (c->kind == 1 ? (nd != 2 && nd != 3) : nd != 4)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: input must be %s-D, got %d-D",
                           keel_layer_type(l), c->kind == 1 ? "2- or 3" : "4",
                           nd);
    keel_tensor *ins[5] = {in[0], keel_layer_parameter(l, "weight"),
                           keel_layer_parameter(l, "bias"),
                           keel_layer_buffer(l, "_mean"),
                           keel_layer_buffer(l, "_variance")};
    keel_attr a[3] = {keel_attr_bool("training", keel_layer_is_training(l)),
                      keel_attr_float("momentum", c->a),
                      keel_attr_float("epsilon", c->b)};

    return run_first(KEEL_OP_BATCH_NORM, ins, 5, a, 3, out);
}

static const keel_layer_ops bn1_ops = {"BatchNorm1D", bn_fwd, cfg_destroy};
static const keel_layer_ops bn2_ops = {"BatchNorm2D", bn_fwd, cfg_destroy};

static keel_status make_bn(int kind, int64_t n, double momentum, double eps,
                           keel_layer **out)
{
    const keel_layer_ops *ops = kind == 1 ? &bn1_ops : &bn2_ops;
    struct nn_cfg *c = NULL;
    keel_layer *l = NULL;
    keel_status st;

    if (n <= 0 || eps < 0)
        return bad(ops->type, "num_features must be positive, epsilon >= 0");
    st = new_layer(ops, &c, &l);
    if (st != KEEL_STATUS_OK)
        return st;
    c->kind = kind;
    c->a = momentum;
    c->b = eps;
    st = add_param(l, "weight", 1, &n, NULL, init_one);
    if (st == KEEL_STATUS_OK)
        st = add_param(l, "bias", 1, &n, NULL, init_zero);
    if (st == KEEL_STATUS_OK)
        st = add_buffer(l, "_mean", n, 0.0);
    if (st == KEEL_STATUS_OK)
        st = add_buffer(l, "_variance", n, 1.0);
    if (st != KEEL_STATUS_OK) {
        keel_layer_free(l);
        return st;
    }
    *out = l;
    return KEEL_STATUS_OK;
}

keel_status keel_nn_batch_norm1d(int64_t num_features, double momentum,
                                 double epsilon, keel_layer **out)
{
    return make_bn(1, num_features, momentum, epsilon, out);
}

keel_status keel_nn_batch_norm2d(int64_t num_features, double momentum,
                                 double epsilon, keel_layer **out)
{
    return make_bn(2, num_features, momentum, epsilon, out);
}

static keel_status ln_fwd(keel_layer *l, keel_tensor *const *in, int nin,
                          keel_tensor **out)
{
    struct nn_cfg *c = cfg_of(l);
    keel_status st = need_inputs(l, nin, 1);

    if (st != KEEL_STATUS_OK)
        return st;
    keel_tensor *ins[3] = {in[0], keel_layer_parameter(l, "weight"),
                           keel_layer_parameter(l, "bias")};
    keel_attr a[2];

    if (c->kind == 0) {
        int b = keel_tensor_ndim(in[0]) - (int)c->i[0];

        if (b < 0)
            return bad("LayerNorm", "input has too few axes");
        a[0] = keel_attr_int("begin_norm_axis", b);
    } else {
        a[0] = keel_attr_int("groups", c->i[0]);
    }
    a[1] = keel_attr_float("epsilon", c->b);
    return run_first(c->kind == 0 ? KEEL_OP_LAYER_NORM : KEEL_OP_GROUP_NORM,
                     ins, 3, a, 2, out);
}

static const keel_layer_ops ln_ops = {"LayerNorm", ln_fwd, cfg_destroy};
static const keel_layer_ops gn_ops = {"GroupNorm", ln_fwd, cfg_destroy};

static keel_status make_norm(int kind, int64_t groups, int64_t n, double eps,
                             keel_layer **out)
{
    struct nn_cfg *c = NULL;
    keel_layer *l = NULL;
    keel_status st = new_layer(kind ? &gn_ops : &ln_ops, &c, &l);

    if (st != KEEL_STATUS_OK)
        return st;
    c->kind = kind;
    c->i[0] = groups;
    c->b = eps;
    st = add_param(l, "weight", 1, &n, NULL, init_one);
    if (st == KEEL_STATUS_OK)
        st = add_param(l, "bias", 1, &n, NULL, init_zero);
    if (st != KEEL_STATUS_OK) {
        keel_layer_free(l);
        return st;
    }
    *out = l;
    return KEEL_STATUS_OK;
}

keel_status keel_nn_layer_norm(int ndim, const int64_t *shape, double epsilon,
                               keel_layer **out)
{
    int64_t n = 1;

    if (ndim <= 0 || !shape)
        return bad("LayerNorm", "normalized_shape is empty");
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0)
            return bad("LayerNorm", "normalized_shape must be positive");
        n *= shape[i];
    }
    return make_norm(0, ndim, n, epsilon, out);
}

keel_status keel_nn_group_norm(int64_t num_groups, int64_t num_channels,
                               double epsilon, keel_layer **out)
{
    if (num_groups <= 0 || num_channels <= 0 || num_channels % num_groups)
        return bad("GroupNorm",
                   "num_channels must be a positive multiple of num_groups");
    return make_norm(1, num_groups, num_channels, epsilon, out);
}

/* ---- Dropout ------------------------------------------------------------ */

static keel_status dropout_fwd(keel_layer *l, keel_tensor *const *in, int nin,
                               keel_tensor **out)
{
    struct nn_cfg *c = cfg_of(l);
    keel_status st = need_inputs(l, nin, 1);
    bool training = keel_layer_is_training(l);
    uint64_t seed = 0, offset = 0;

    if (st != KEEL_STATUS_OK)
        return st;
    if (!training && !c->flag) {
        *out = keel_tensor_ref(in[0]);
        return KEEL_STATUS_OK;
    }
    if (training)
        keel__rng_next((uint64_t)keel_tensor_numel(in[0]), &seed, &offset);
    keel_attr a[5] = {
        keel_attr_float("p", c->a),
        keel_attr_str("mode", c->flag ? "downscale_in_infer"
                                      : "upscale_in_train"),
        keel_attr_bool("training", training),
        keel_attr_int("seed", (int64_t)seed),
        keel_attr_int("offset", (int64_t)offset),
    };

    return run_first(KEEL_OP_DROPOUT, in, 1, a, 5, out);
}

static const keel_layer_ops dropout_ops = {"Dropout", dropout_fwd,
                                           cfg_destroy};

keel_status keel_nn_dropout(double p, bool downscale_in_infer,
                            keel_layer **out)
{
    struct nn_cfg *c = NULL;
    keel_status st;

    if (!(p >= 0 && p <= 1))
        return bad("Dropout", "p must be in [0, 1]");
    st = new_layer(&dropout_ops, &c, out);
    if (st != KEEL_STATUS_OK)
        return st;
    c->a = p;
    c->flag = downscale_in_infer;
    return KEEL_STATUS_OK;
}

/* ---- Embedding ---------------------------------------------------------- */

static keel_status emb_fwd(keel_layer *l, keel_tensor *const *in, int nin,
                           keel_tensor **out)
{
    struct nn_cfg *c = cfg_of(l);
    keel_status st = need_inputs(l, nin, 1);

    if (st != KEEL_STATUS_OK)
        return st;
    keel_tensor *ins[2] = {in[0], keel_layer_parameter(l, "weight")};
    keel_attr a = keel_attr_int("padding_idx", c->i[0]);

    return run_first(KEEL_OP_EMBEDDING, ins, 2, &a, 1, out);
}

static const keel_layer_ops emb_ops = {"Embedding", emb_fwd, cfg_destroy};

/* Paddle zeros the padding row of a new table (dygraph). */
static keel_status emb_weight(keel_layer *l, const int64_t *ws, int64_t pad,
                              const keel_param_attr *attr)
{
    keel_tensor *t = NULL, *z = NULL;
    float *h = NULL;
    keel_status st;
    size_t bytes = (size_t)(ws[0] * ws[1]) * sizeof(float);

    if (!attr || attr->kind == KEEL_INIT_DEFAULT)
        attr = &init_xavier;
    st = keel_init_param(2, ws, attr, &t);
    if (st != KEEL_STATUS_OK || pad < 0)
        goto out;
    h = malloc(bytes);
    if (!h) {
        st = keel__error(KEEL_STATUS_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    st = keel_tensor_to_host(t, h, bytes);
    if (st != KEEL_STATUS_OK)
        goto out;
    memset(h + pad * ws[1], 0, (size_t)ws[1] * sizeof(float));
    st = keel_tensor_from_host(h, KEEL_F32, 2, ws, NULL, &z);
    if (st != KEEL_STATUS_OK)
        goto out;
    keel_tensor_free(t);
    t = z;
out:
    if (st == KEEL_STATUS_OK)
        st = keel_layer_add_parameter(l, "weight", t);
    keel_tensor_free(t);
    free(h);
    return st;
}

keel_status keel_nn_embedding(int64_t num, int64_t dim, int64_t padding_idx,
                              const keel_param_attr *weight_attr,
                              keel_layer **out)
{
    struct nn_cfg *c = NULL;
    keel_layer *l = NULL;
    keel_status st;
    int64_t ws[2] = {num, dim};

    if (num <= 0 || dim <= 0)
        return bad("Embedding", "sizes must be positive");
    if (padding_idx == KEEL_NN_NO_PADDING)
        padding_idx = -1;
    else if (padding_idx < -num || padding_idx >= num)
        return bad("Embedding", "padding_idx out of [-num, num)");
    else if (padding_idx < 0)
        padding_idx += num;
    if (weight_attr && weight_attr->kind == KEEL_INIT_NONE)
        return bad("Embedding", "the weight cannot be absent");
    st = new_layer(&emb_ops, &c, &l);
    if (st != KEEL_STATUS_OK)
        return st;
    c->i[0] = padding_idx;
    st = emb_weight(l, ws, padding_idx, weight_attr);
    if (st != KEEL_STATUS_OK) {
        keel_layer_free(l);
        return st;
    }
    *out = l;
    return KEEL_STATUS_OK;
}

/* ---- losses ------------------------------------------------------------- */

enum { LOSS_CE, LOSS_MSE, LOSS_L1, LOSS_SMOOTH_L1, LOSS_NLL, LOSS_BCE };

static keel_status reduce(const keel_tensor *x, const char *reduction,
                          keel_tensor **out)
{
    if (strcmp(reduction, "mean") == 0)
        return keel_mean(x, 0, NULL, false, out);
    if (strcmp(reduction, "sum") == 0)
        return keel_sum(x, 0, NULL, false, out);
    *out = keel_tensor_ref((keel_tensor *)x);
    return KEEL_STATUS_OK;
}

static keel_status scalar_like(const keel_tensor *x, double v,
                               keel_tensor **out)
{
    char dev[64];
    keel_place pl = keel_tensor_place(x);

    keel_place_name(pl, dev, sizeof(dev));
    return keel_full(0, NULL, keel_tensor_dtype(x), v, dev, out);
}

static keel_status smooth_l1(struct nn_cfg *c, keel_tensor *x, keel_tensor *y,
                             keel_tensor **out)
{
    keel_tensor *d = NULL, *ad = NULL, *sq = NULL, *half = NULL, *q = NULL;
    keel_tensor *delta = NULL, *hd = NULL, *m = NULL;
    keel_tensor *lin1 = NULL, *lin0 = NULL, *el = NULL;
    keel_status st;

    st = keel_subtract(x, y, &d);
    if (st == KEEL_STATUS_OK)
        st = keel_abs(d, &ad);
    if (st == KEEL_STATUS_OK)
        st = keel_square(d, &sq);
    if (st == KEEL_STATUS_OK)
        st = scalar_like(d, 0.5, &half);
    if (st == KEEL_STATUS_OK)
        st = keel_multiply(sq, half, &q);
    if (st == KEEL_STATUS_OK)
        st = scalar_like(d, c->a, &delta);
    if (st == KEEL_STATUS_OK)
        st = scalar_like(d, 0.5 * c->a * c->a, &hd);
    if (st == KEEL_STATUS_OK)
        st = keel_multiply(ad, delta, &lin0);
    if (st == KEEL_STATUS_OK)
        st = keel_subtract(lin0, hd, &lin1);
    if (st == KEEL_STATUS_OK)
        st = keel_less(ad, delta, &m);
    if (st == KEEL_STATUS_OK)
        st = keel_where(m, q, lin1, &el);
    if (st == KEEL_STATUS_OK)
        st = reduce(el, c->reduction, out);
    keel_tensor_free(d);
    keel_tensor_free(ad);
    keel_tensor_free(sq);
    keel_tensor_free(half);
    keel_tensor_free(q);
    keel_tensor_free(delta);
    keel_tensor_free(hd);
    keel_tensor_free(m);
    keel_tensor_free(lin1);
    keel_tensor_free(lin0);
    keel_tensor_free(el);
    return st;
}

static keel_status loss_fwd(keel_layer *l, keel_tensor *const *in, int nin,
                            keel_tensor **out)
{
    struct nn_cfg *c = cfg_of(l);
    keel_status st = need_inputs(l, nin, 2);
    keel_tensor *ins[3] = {in[0], in[1], c->weight};
    keel_tensor *t = NULL, *t2 = NULL;
    keel_attr a[6];

    if (st != KEEL_STATUS_OK)
        return st;
    switch (c->kind) {
    case LOSS_CE:
        a[0] = keel_attr_bool("soft_label", c->ce.soft_label);
        a[1] = keel_attr_int("ignore_index", c->ce.ignore_index);
        a[2] = keel_attr_str("reduction", c->reduction);
        a[3] = keel_attr_int("axis", c->ce.axis);
        a[4] = keel_attr_bool("use_softmax", c->ce.use_softmax);
        a[5] = keel_attr_float("label_smoothing", c->ce.label_smoothing);
        return run_first(KEEL_OP_CROSS_ENTROPY, ins, c->weight ? 3 : 2, a, 6,
                         out);
    case LOSS_NLL:
        a[0] = keel_attr_int("ignore_index", c->i[0]);
        a[1] = keel_attr_str("reduction", c->reduction);
        return run_first(KEEL_OP_NLL_LOSS, ins, c->weight ? 3 : 2, a, 2, out);
    case LOSS_MSE:
        a[0] = keel_attr_str("reduction", c->reduction);
        return run_first(KEEL_OP_MSE_LOSS, ins, 2, a, 1, out);
    case LOSS_L1:
        st = keel_subtract(in[0], in[1], &t);
        if (st == KEEL_STATUS_OK)
            st = keel_abs(t, &t2);
        if (st == KEEL_STATUS_OK)
            st = reduce(t2, c->reduction, out);
        break;
    case LOSS_SMOOTH_L1:
        return smooth_l1(c, in[0], in[1], out);
    case LOSS_BCE:
        ins[2] = c->pos_weight;
        a[0] = keel_attr_str("reduction", c->weight ? "none" : c->reduction);
        st = run_first(KEEL_OP_BCE_WITH_LOGITS, ins, c->pos_weight ? 3 : 2, a,
                       1, c->weight ? &t : out);
        if (st == KEEL_STATUS_OK && c->weight) {
            st = keel_multiply(t, c->weight, &t2);
            if (st == KEEL_STATUS_OK)
                st = reduce(t2, c->reduction, out);
        }
        break;
    default:
        st = bad("loss", "unknown kind");
    }
    keel_tensor_free(t);
    keel_tensor_free(t2);
    return st;
}

static const keel_layer_ops loss_ops[] = {
    {"CrossEntropyLoss", loss_fwd, cfg_destroy},
    {"MSELoss", loss_fwd, cfg_destroy},
    {"L1Loss", loss_fwd, cfg_destroy},
    {"SmoothL1Loss", loss_fwd, cfg_destroy},
    {"NLLLoss", loss_fwd, cfg_destroy},
    {"BCEWithLogitsLoss", loss_fwd, cfg_destroy},
};

static keel_status make_loss(int kind, const char *reduction,
                             const keel_tensor *weight,
                             const keel_tensor *pos_weight,
                             struct nn_cfg **cfg, keel_layer **out)
{
    struct nn_cfg *c = NULL;
    keel_status st;

    if (!reduction)
        reduction = "mean";
    if (strcmp(reduction, "mean") && strcmp(reduction, "sum") &&
        strcmp(reduction, "none"))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: reduction must be mean, sum or none, not "
                           "'%s'", loss_ops[kind].type, reduction);
    st = new_layer(&loss_ops[kind], &c, out);
    if (st != KEEL_STATUS_OK)
        return st;
    c->kind = kind;
    snprintf(c->reduction, sizeof(c->reduction), "%s", reduction);
    c->weight = weight ? keel_tensor_ref((keel_tensor *)weight) : NULL;
    c->pos_weight = pos_weight ? keel_tensor_ref((keel_tensor *)pos_weight)
                               : NULL;
    if (cfg)
        *cfg = c;
    return KEEL_STATUS_OK;
}

keel_ce_options keel_ce_default_options(void)
{
    keel_ce_options o;

    memset(&o, 0, sizeof(o));
    o.ignore_index = -100;
    o.reduction = "mean";
    o.axis = -1;
    o.use_softmax = true;
    return o;
}

keel_status keel_nn_cross_entropy_loss(const keel_ce_options *opts,
                                       keel_layer **out)
{
    keel_ce_options o = opts ? *opts : keel_ce_default_options();
    struct nn_cfg *c = NULL;
    keel_status st = make_loss(LOSS_CE, o.reduction, o.weight, NULL, &c, out);

    if (st != KEEL_STATUS_OK)
        return st;
    c->ce = o;
    c->ce.weight = NULL;
    c->ce.reduction = NULL;
    return KEEL_STATUS_OK;
}

keel_status keel_nn_mse_loss(const char *reduction, keel_layer **out)
{
    return make_loss(LOSS_MSE, reduction, NULL, NULL, NULL, out);
}

keel_status keel_nn_l1_loss(const char *reduction, keel_layer **out)
{
    return make_loss(LOSS_L1, reduction, NULL, NULL, NULL, out);
}

keel_status keel_nn_smooth_l1_loss(const char *reduction, double delta,
                                   keel_layer **out)
{
    struct nn_cfg *c = NULL;
    keel_status st;

    if (!(delta > 0))
        return bad("SmoothL1Loss", "delta must be positive");
    st = make_loss(LOSS_SMOOTH_L1, reduction, NULL, NULL, &c, out);
    if (st == KEEL_STATUS_OK)
        c->a = delta;
    return st;
}

keel_status keel_nn_nll_loss(const keel_tensor *weight, int64_t ignore_index,
                             const char *reduction, keel_layer **out)
{
    struct nn_cfg *c = NULL;
    keel_status st = make_loss(LOSS_NLL, reduction, weight, NULL, &c, out);

    if (st == KEEL_STATUS_OK)
        c->i[0] = ignore_index;
    return st;
}

keel_status keel_nn_bce_with_logits_loss(const keel_tensor *weight,
                                         const char *reduction,
                                         const keel_tensor *pos_weight,
                                         keel_layer **out)
{
    return make_loss(LOSS_BCE, reduction, weight, pos_weight, NULL, out);
}
