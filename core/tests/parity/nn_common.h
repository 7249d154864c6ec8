/*
 * Shared driver code for the nn parity cases (parity_layers,
 * parity_losses, parity_norm_stats, parity_dropout): keel's half of
 * nn_common.py. Each of those drivers is main() plus this header.
 *
 * A configuration names one layer by its Paddle class and keyword
 * arguments, the state to load into it, and a list of steps:
 *
 *   {"name": "...", "group": "...",
 *    "layer": {"type": "Conv2D", "args": {"in_channels": 4, ...}},
 *    "state": {"weight": T, "bias": T, ...},
 *    "steps": [{"mode": "train" | "eval",
 *               "inputs": [T, ...],
 *               "grad_out": T,          (absent: no backward)
 *               "report": ["out", "grad:0", "grad:weight", ...],
 *               "scaled": true}, ...]}          (optional)
 *
 * where T is {"shape": [...], "data": [...], "dtype": "float32"|"int64"}
 * (dtype float32 when absent). Tensor arguments of a layer (a loss's
 * weight, pos_weight) are T objects as well. Parameters and buffers
 * carry Paddle's names, so "state" is loaded with set_state_dict as it
 * stands. A float input is a leaf that needs a gradient; the backward is
 * that of sum(out * grad_out), i.e. grad_out is the upstream gradient
 * (for a scalar loss, a 0-D tensor). Gradients are cleared after each
 * step.
 *
 * The report items of a step, appended to the configuration's values in
 * order:
 *
 *   out             every output value
 *   grad:K          the gradient of input K (an integer)
 *   grad:NAME       the gradient of parameter NAME (zeros when none was
 *                   computed, as Paddle gives a parameter that did not
 *                   take part)
 *   buffer:NAME     the values of buffer NAME after the step
 *   distinct        the output's distinct values, ascending
 *   kept:Q          "ok" when the fraction of non-zero outputs is within
 *                   six standard deviations (plus one element) of Q,
 *                   else "kept F"
 *   rule:S          "ok" when, for every element, out == x * S and
 *                   grad == grad_out * S where out != 0, and out == 0,
 *                   grad == 0 elsewhere (relative 1e-6), else the first
 *                   offending index; the dropout rule, with input 0
 *
 * In a step with "scaled": true, every value v of a reported tensor t
 * (out, grad:, buffer:) is written as v + 3 * max|t|: the relative
 * comparison then bounds |difference| by about 3 * tolerance * max|t|,
 * an absolute bound at the tensor's own scale (nn_common.py says when
 * that is the right test).
 *
 * A failing keel call ends the configuration with {"error": message}.
 * A malformed configuration is a bug in the test: a message on stderr and
 * exit status 2.
 */
#ifndef PARITY_NN_COMMON_H
#define PARITY_NN_COMMON_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <keel/autograd.h>
#include <keel/io.h>
#include <keel/nn.h>
#include <keel/ops.h>
#include <keel/tensor.h>

#define PN_MAX_INPUTS 4
#define PN_MAX_NDIM 8

static const char *pn_driver = "parity_nn";
static const char *pn_config = "?";

/* A malformed configuration: the test is wrong, not keel. */
static void pn_die(const char *fmt, const char *what)
{
    fprintf(stderr, "%s: configuration '%s': ", pn_driver, pn_config);
    fprintf(stderr, fmt, what);
    fputc('\n', stderr);
    exit(2);
}

/* ---- tensors ------------------------------------------------------------- */

/* A new tensor from a T object; a keel failure is returned. */
static keel_status pn_tensor(json_t *spec, keel_tensor **out)
{
    json_t *shape = json_object_get(spec, "shape");
    json_t *data = json_object_get(spec, "data");
    const char *dtype = json_string_value(json_object_get(spec, "dtype"));
    int64_t dims[PN_MAX_NDIM], n = 1;
    bool i64;
    void *buf;
    keel_status st;
    size_t k;

    if (!json_is_array(shape) || json_array_size(shape) > PN_MAX_NDIM ||
        !json_is_array(data))
        pn_die("%s", "a tensor needs \"shape\" and \"data\" arrays");
    if (dtype && strcmp(dtype, "float32") && strcmp(dtype, "int64"))
        pn_die("unsupported dtype '%s'", dtype);
    i64 = dtype && !strcmp(dtype, "int64");
    for (k = 0; k < json_array_size(shape); k++) {
        json_t *d = json_array_get(shape, k);

        if (!json_is_integer(d) || json_integer_value(d) < 0)
            pn_die("%s", "a shape entry is not a count");
        dims[k] = (int64_t)json_integer_value(d);
        n *= dims[k];
    }
    if ((int64_t)json_array_size(data) != n)
        pn_die("%s", "data does not match the shape");
    buf = malloc((size_t)(n ? n : 1) * (i64 ? sizeof(int64_t)
                                              : sizeof(float)));
    if (!buf)
        pn_die("%s", "out of memory");
    for (k = 0; k < (size_t)n; k++) {
        json_t *v = json_array_get(data, k);

        if (!json_is_number(v))
            pn_die("%s", "a data entry is not a number");
        if (i64)
            ((int64_t *)buf)[k] = (int64_t)json_number_value(v);
        else
            ((float *)buf)[k] = (float)json_number_value(v);
    }
    st = keel_tensor_from_host(buf, i64 ? KEEL_I64 : KEEL_F32,
                               (int)json_array_size(shape), dims, "cpu:0",
                               out);
    free(buf);
    return st;
}

/* A float32 copy of t's values on the host (free it); NULL on failure. */
static float *pn_values(const keel_tensor *t, int64_t *n, keel_status *st)
{
    keel_tensor *f = NULL;
    float *h;

    *n = keel_tensor_numel(t);
    h = malloc((size_t)(*n ? *n : 1) * sizeof(float));
    if (!h)
        pn_die("%s", "out of memory");
    *st = keel_tensor_dtype(t) == KEEL_F32 ? KEEL_STATUS_OK
                                           : keel_cast(t, KEEL_F32, &f);
    if (*st == KEEL_STATUS_OK)
        *st = keel_tensor_to_host(f ? f : t, h, (size_t)*n * sizeof(float));
    keel_tensor_free(f);
    if (*st != KEEL_STATUS_OK) {
        free(h);
        return NULL;
    }
    return h;
}

/* A float as JSON: jansson cannot hold NaN or infinities. */
static json_t *pn_num(double v)
{
    if (isnan(v))
        return json_string("nan");
    if (isinf(v))
        return json_string(v > 0 ? "inf" : "-inf");
    return json_real(v);
}

/* A step with "scaled": true reports each tensor value v as v + 3 M, M
 * the tensor's largest magnitude (see nn_common.py). */
static bool pn_scaled;

static keel_status pn_append(json_t *values, const keel_tensor *t)
{
    keel_status st;
    int64_t n;
    float *h = pn_values(t, &n, &st);
    double shift = 0;

    if (!h)
        return st;
    if (pn_scaled) {
        for (int64_t i = 0; i < n; i++)
            shift = fmax(shift, fabs((double)h[i]));
        shift *= 3;
    }
    for (int64_t i = 0; i < n; i++)
        json_array_append_new(values, pn_num((double)h[i] + shift));
    free(h);
    return KEEL_STATUS_OK;
}

static void pn_append_zeros(json_t *values, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        json_array_append_new(values, json_real(0.0));
}

/* ---- layer arguments (Paddle's keyword names) ---------------------------- */

static json_t *pn_args;

static bool pn_has(const char *key)
{
    json_t *v = json_object_get(pn_args, key);

    return v && !json_is_null(v);
}

static double pn_num_arg(const char *key, double def)
{
    json_t *v = json_object_get(pn_args, key);

    if (!v || json_is_null(v))
        return def;
    if (!json_is_number(v))
        pn_die("argument '%s' is not a number", key);
    return json_number_value(v);
}

static int64_t pn_int_arg(const char *key, int64_t def)
{
    json_t *v = json_object_get(pn_args, key);

    if (!v || json_is_null(v))
        return def;
    if (!json_is_integer(v))
        pn_die("argument '%s' is not an integer", key);
    return (int64_t)json_integer_value(v);
}

static bool pn_bool_arg(const char *key, bool def)
{
    json_t *v = json_object_get(pn_args, key);

    if (!v || json_is_null(v))
        return def;
    if (!json_is_boolean(v))
        pn_die("argument '%s' is not a boolean", key);
    return json_is_true(v);
}

static const char *pn_str_arg(const char *key, const char *def)
{
    json_t *v = json_object_get(pn_args, key);

    if (!v || json_is_null(v))
        return def;
    if (!json_is_string(v))
        pn_die("argument '%s' is not a string", key);
    return json_string_value(v);
}

/* An int or a list of ints (Paddle's int | list arguments); returns the
 * count, 1 for a plain int. */
static int pn_ints_arg(const char *key, int64_t def, int64_t *out, int max)
{
    json_t *v = json_object_get(pn_args, key);

    if (!v || json_is_null(v)) {
        out[0] = def;
        return 1;
    }
    if (json_is_integer(v)) {
        out[0] = (int64_t)json_integer_value(v);
        return 1;
    }
    if (!json_is_array(v) || json_array_size(v) == 0 ||
        (int)json_array_size(v) > max)
        pn_die("argument '%s' is not an int or a short list", key);
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i);

        if (!json_is_integer(e))
            pn_die("argument '%s' holds a non-integer", key);
        out[i] = (int64_t)json_integer_value(e);
    }
    return (int)json_array_size(v);
}

/* An int or [a, b] as a pair. */
static void pn_pair_arg(const char *key, int64_t def, int64_t out[2])
{
    int64_t v[2];
    int n = pn_ints_arg(key, def, v, 2);

    out[0] = v[0];
    out[1] = n == 2 ? v[1] : v[0];
}

/* A tensor argument (a loss's weight); *t stays NULL when absent. */
static keel_status pn_tensor_arg(const char *key, keel_tensor **t)
{
    *t = NULL;
    if (!pn_has(key))
        return KEEL_STATUS_OK;
    return pn_tensor(json_object_get(pn_args, key), t);
}

/* ---- building a layer ---------------------------------------------------- */

/* bias_attr=False (Paddle): no bias parameter; anything else: default. */
static const keel_param_attr *pn_bias_attr(void)
{
    static const keel_param_attr none = {KEEL_INIT_NONE, 0, 0};
    json_t *v = json_object_get(pn_args, "bias_attr");

    if (v && !json_is_false(v))
        pn_die("%s", "bias_attr may only be false here");
    return v ? &none : NULL;
}

static keel_status pn_conv(bool transpose, keel_layer **out)
{
    keel_conv2d_params p = keel_conv2d_default_params();
    int64_t k[2], pad[4];
    int np;
    const keel_param_attr *ba = pn_bias_attr();

    pn_pair_arg("kernel_size", 0, k);
    pn_pair_arg("stride", 1, p.stride);
    pn_pair_arg("dilation", 1, p.dilation);
    np = pn_ints_arg("padding", 0, pad, 4);
    if (np == 1) {
        p.padding[0] = p.padding[1] = pad[0];
        p.npadding = 2;
    } else if (np == 2 || np == 4) {
        memcpy(p.padding, pad, (size_t)np * sizeof(pad[0]));
        p.npadding = np;
    } else {
        pn_die("%s", "padding must be an int or 2 or 4 ints");
    }
    p.groups = pn_int_arg("groups", 1);
    if (transpose)
        pn_pair_arg("output_padding", 0, p.output_padding);
    if (transpose)
        return keel_nn_conv2d_transpose(pn_int_arg("in_channels", 0),
                                        pn_int_arg("out_channels", 0), k[0],
                                        k[1], &p, NULL, ba, out);
    return keel_nn_conv2d(pn_int_arg("in_channels", 0),
                          pn_int_arg("out_channels", 0), k[0], k[1], &p, NULL,
                          ba, out);
}

static keel_status pn_loss(const char *type, keel_layer **out)
{
    const char *reduction = pn_str_arg("reduction", "mean");
    keel_tensor *w = NULL, *pw = NULL;
    keel_status st;

    st = pn_tensor_arg("weight", &w);
    if (st == KEEL_STATUS_OK)
        st = pn_tensor_arg("pos_weight", &pw);
    if (st != KEEL_STATUS_OK)
        goto done;
    if (!strcmp(type, "CrossEntropyLoss")) {
        keel_ce_options o = keel_ce_default_options();

        o.weight = w;
        o.ignore_index = pn_int_arg("ignore_index", -100);
        o.reduction = reduction;
        o.soft_label = pn_bool_arg("soft_label", false);
        o.axis = (int)pn_int_arg("axis", -1);
        o.use_softmax = pn_bool_arg("use_softmax", true);
        o.label_smoothing = pn_num_arg("label_smoothing", 0.0);
        st = keel_nn_cross_entropy_loss(&o, out);
    } else if (!strcmp(type, "MSELoss")) {
        st = keel_nn_mse_loss(reduction, out);
    } else if (!strcmp(type, "L1Loss")) {
        st = keel_nn_l1_loss(reduction, out);
    } else if (!strcmp(type, "SmoothL1Loss")) {
        st = keel_nn_smooth_l1_loss(reduction, pn_num_arg("delta", 1.0), out);
    } else if (!strcmp(type, "NLLLoss")) {
        st = keel_nn_nll_loss(w, pn_int_arg("ignore_index", -100), reduction,
                              out);
    } else if (!strcmp(type, "BCEWithLogitsLoss")) {
        st = keel_nn_bce_with_logits_loss(w, reduction, pw, out);
    } else {
        pn_die("unknown layer type '%s'", type);
    }
done:
    keel_tensor_free(w);
    keel_tensor_free(pw);
    return st;
}

static const struct {
    const char *type;
    keel_activation kind;
    const char *a, *b; /* Paddle argument names of a and b */
} pn_acts[] = {
    {"ReLU", KEEL_ACT_RELU, NULL, NULL},
    {"ReLU6", KEEL_ACT_RELU6, NULL, NULL},
    {"Sigmoid", KEEL_ACT_SIGMOID, NULL, NULL},
    {"Tanh", KEEL_ACT_TANH, NULL, NULL},
    {"Silu", KEEL_ACT_SILU, NULL, NULL},
    {"Hardswish", KEEL_ACT_HARDSWISH, NULL, NULL},
    {"GELU", KEEL_ACT_GELU, "approximate", NULL},
    {"LeakyReLU", KEEL_ACT_LEAKY_RELU, "negative_slope", NULL},
    {"ELU", KEEL_ACT_ELU, "alpha", NULL},
    {"Softplus", KEEL_ACT_SOFTPLUS, "beta", "threshold"},
    {"Softmax", KEEL_ACT_SOFTMAX, "axis", NULL},
    {"LogSoftmax", KEEL_ACT_LOG_SOFTMAX, "axis", NULL},
};

static keel_status pn_activation(int i, keel_layer **out)
{
    double a = 0, b = 0;

    if (!pn_acts[i].a)
        return keel_nn_activation_default(pn_acts[i].kind, out);
    /* Paddle's defaults where an argument is left out. */
    switch (pn_acts[i].kind) {
    case KEEL_ACT_GELU:
        a = pn_bool_arg("approximate", false) ? 1.0 : 0.0;
        break;
    case KEEL_ACT_LEAKY_RELU:
        a = pn_num_arg("negative_slope", 0.01);
        break;
    case KEEL_ACT_ELU:
        a = pn_num_arg("alpha", 1.0);
        break;
    case KEEL_ACT_SOFTPLUS:
        a = pn_num_arg("beta", 1.0);
        b = pn_num_arg("threshold", 20.0);
        break;
    default:
        a = (double)pn_int_arg("axis", -1);
        break;
    }
    return keel_nn_activation(pn_acts[i].kind, a, b, out);
}

/* The layer of a {"type", "args"} spec. */
static keel_status pn_build(json_t *spec, keel_layer **out)
{
    const char *type = json_string_value(json_object_get(spec, "type"));

    pn_args = json_object_get(spec, "args");
    if (!type)
        pn_die("%s", "the layer has no \"type\"");
    if (pn_args && !json_is_object(pn_args))
        pn_die("%s", "the layer's \"args\" is not an object");
    for (size_t i = 0; i < sizeof(pn_acts) / sizeof(pn_acts[0]); i++)
        if (!strcmp(type, pn_acts[i].type))
            return pn_activation((int)i, out);
    if (!strcmp(type, "Linear"))
        return keel_nn_linear(pn_int_arg("in_features", 0),
                              pn_int_arg("out_features", 0), NULL,
                              pn_bias_attr(), out);
    if (!strcmp(type, "Conv2D"))
        return pn_conv(false, out);
    if (!strcmp(type, "Conv2DTranspose"))
        return pn_conv(true, out);
    if (!strcmp(type, "BatchNorm1D") || !strcmp(type, "BatchNorm2D")) {
        int64_t n = pn_int_arg("num_features", 0);
        double m = pn_num_arg("momentum", 0.9);
        double e = pn_num_arg("epsilon", 1e-5);

        return type[9] == '1' ? keel_nn_batch_norm1d(n, m, e, out)
                              : keel_nn_batch_norm2d(n, m, e, out);
    }
    if (!strcmp(type, "LayerNorm")) {
        int64_t shape[PN_MAX_NDIM];
        int nd = pn_ints_arg("normalized_shape", 0, shape, PN_MAX_NDIM);

        return keel_nn_layer_norm(nd, shape, pn_num_arg("epsilon", 1e-5),
                                  out);
    }
    if (!strcmp(type, "GroupNorm"))
        return keel_nn_group_norm(pn_int_arg("num_groups", 0),
                                  pn_int_arg("num_channels", 0),
                                  pn_num_arg("epsilon", 1e-5), out);
    if (!strcmp(type, "Embedding"))
        return keel_nn_embedding(pn_int_arg("num_embeddings", 0),
                                 pn_int_arg("embedding_dim", 0),
                                 pn_int_arg("padding_idx",
                                            KEEL_NN_NO_PADDING),
                                 NULL, out);
    if (!strcmp(type, "MaxPool2D"))
        return keel_nn_max_pool2d(pn_int_arg("kernel_size", 0),
                                  pn_int_arg("stride", 0),
                                  pn_int_arg("padding", 0),
                                  pn_bool_arg("ceil_mode", false), out);
    if (!strcmp(type, "AvgPool2D"))
        return keel_nn_avg_pool2d(pn_int_arg("kernel_size", 0),
                                  pn_int_arg("stride", 0),
                                  pn_int_arg("padding", 0),
                                  pn_bool_arg("ceil_mode", false),
                                  pn_bool_arg("exclusive", true), out);
    if (!strcmp(type, "AdaptiveAvgPool2D")) {
        int64_t o[2];

        pn_pair_arg("output_size", 0, o);
        return keel_nn_adaptive_avg_pool2d(o[0], o[1], out);
    }
    if (!strcmp(type, "Flatten"))
        return keel_nn_flatten((int)pn_int_arg("start_axis", 1),
                               (int)pn_int_arg("stop_axis", -1), out);
    if (!strcmp(type, "Dropout")) {
        const char *mode = pn_str_arg("mode", "upscale_in_train");

        if (strcmp(mode, "upscale_in_train") &&
            strcmp(mode, "downscale_in_infer"))
            pn_die("unknown dropout mode '%s'", mode);
        return keel_nn_dropout(pn_num_arg("p", 0.5),
                               !strcmp(mode, "downscale_in_infer"), out);
    }
    return pn_loss(type, out);
}

/* Load the "state" object (Paddle names) into the layer. */
static keel_status pn_load_state(keel_layer *l, json_t *state)
{
    keel_state_dict *sd = NULL;
    const char *key;
    json_t *v;
    keel_status st;

    if (!state)
        return KEEL_STATUS_OK;
    if (!json_is_object(state))
        pn_die("%s", "\"state\" is not an object");
    st = keel_state_dict_create(&sd);
    json_object_foreach(state, key, v) {
        keel_tensor *t = NULL;

        if (st == KEEL_STATUS_OK)
            st = pn_tensor(v, &t);
        if (st == KEEL_STATUS_OK)
            st = keel_state_dict_set(sd, key, t);
        keel_tensor_free(t);
    }
    /* strict: a name the layer lacks is a mistake in the test */
    if (st == KEEL_STATUS_OK) {
        keel_state_dict *mine = NULL;

        st = keel_layer_state_dict(l, &mine);
        if (st == KEEL_STATUS_OK) {
            for (int64_t i = 0; i < keel_state_dict_count(sd); i++) {
                const char *name;

                keel_state_dict_at(sd, i, &name, NULL);
                if (!keel_state_dict_contains(mine, name))
                    pn_die("the layer has no parameter or buffer '%s'",
                           name);
            }
        }
        keel_state_dict_free(mine);
    }
    if (st == KEEL_STATUS_OK)
        st = keel_layer_set_state_dict(l, sd, false);
    keel_state_dict_free(sd);
    return st;
}

/* ---- running a configuration --------------------------------------------- */

/* The distinct values of t, ascending. */
static keel_status pn_distinct(json_t *values, const keel_tensor *t)
{
    keel_status st;
    int64_t n, m = 0;
    float *h = pn_values(t, &n, &st);

    if (!h)
        return st;
    for (int64_t i = 0; i < n; i++) {
        /* insertion into the sorted prefix h[0..m) */
        float v = h[i];
        int64_t j;
        bool seen = false;

        for (j = 0; j < m; j++) {
            if (h[j] == v) {
                seen = true;
                break;
            }
        }
        if (seen)
            continue;
        for (j = m; j > 0 && h[j - 1] > v; j--)
            h[j] = h[j - 1];
        h[j] = v;
        m++;
    }
    for (int64_t i = 0; i < m; i++)
        json_array_append_new(values, pn_num(h[i]));
    free(h);
    return KEEL_STATUS_OK;
}

static keel_status pn_kept(json_t *values, const keel_tensor *t, double q)
{
    keel_status st;
    int64_t n, kept = 0;
    float *h = pn_values(t, &n, &st);
    double f, bound;

    if (!h)
        return st;
    for (int64_t i = 0; i < n; i++)
        kept += h[i] != 0;
    free(h);
    f = n ? (double)kept / (double)n : 0;
    bound = 6 * sqrt(q * (1 - q) / (double)(n ? n : 1)) + 1.0 / (double)n;
    if (fabs(f - q) <= bound)
        json_array_append_new(values, json_string("ok"));
    else
        json_array_append_new(values, json_sprintf("kept %.6f", f));
    return KEEL_STATUS_OK;
}

static bool pn_close(double a, double b)
{
    return fabs(a - b) <= 1e-6 * fmax(fabs(a), fabs(b));
}

static keel_status pn_rule(json_t *values, const keel_tensor *x,
                           const keel_tensor *out, const keel_tensor *g,
                           const keel_tensor *xg, double s)
{
    keel_status st = KEEL_STATUS_OK;
    int64_t n[4];
    float *hx = pn_values(x, &n[0], &st);
    float *ho = hx ? pn_values(out, &n[1], &st) : NULL;
    float *hg = ho ? pn_values(g, &n[2], &st) : NULL;
    float *hxg = hg && xg ? pn_values(xg, &n[3], &st) : NULL;
    int64_t bad = -1;

    if (hg && !xg) {
        bad = -2;
        n[3] = n[0];
    }
    if (hg && bad == -1 && (n[1] != n[0] || n[2] != n[0] || n[3] != n[0]))
        bad = 0;
    for (int64_t i = 0; hxg && bad == -1 && i < n[0]; i++) {
        bool keep = ho[i] != 0;
        bool ok = keep ? pn_close(ho[i], hx[i] * s) &&
                             pn_close(hxg[i], hg[i] * s)
                       : hxg[i] == 0;

        if (!ok)
            bad = i;
    }
    if (hg)
        json_array_append_new(values,
                              bad == -1 ? json_string("ok")
                              : bad == -2
                                  ? json_string("no input gradient")
                                  : json_sprintf("broken at %lld",
                                                 (long long)bad));
    free(hx);
    free(ho);
    free(hg);
    free(hxg);
    return hg ? KEEL_STATUS_OK : st;
}

/* One step: forward, backward when asked, the report. */
static keel_status pn_step(keel_layer *l, json_t *step, json_t *values)
{
    json_t *ins = json_object_get(step, "inputs");
    json_t *gspec = json_object_get(step, "grad_out");
    json_t *report = json_object_get(step, "report");
    const char *mode = json_string_value(json_object_get(step, "mode"));
    keel_tensor *in[PN_MAX_INPUTS] = {NULL}, *out = NULL, *g = NULL;
    keel_status st = KEEL_STATUS_OK;
    int nin;

    if (!json_is_array(ins) || json_array_size(ins) == 0 ||
        json_array_size(ins) > PN_MAX_INPUTS)
        pn_die("%s", "a step needs 1 to 4 \"inputs\"");
    if (!json_is_array(report))
        pn_die("%s", "a step needs a \"report\" array");
    if (!mode || (strcmp(mode, "train") && strcmp(mode, "eval")))
        pn_die("%s", "a step's \"mode\" is \"train\" or \"eval\"");
    pn_scaled = json_is_true(json_object_get(step, "scaled"));
    if (!strcmp(mode, "train"))
        keel_layer_train(l);
    else
        keel_layer_eval(l);
    nin = (int)json_array_size(ins);
    for (int i = 0; st == KEEL_STATUS_OK && i < nin; i++) {
        st = pn_tensor(json_array_get(ins, i), &in[i]);
        /* The first input is differentiated; a label never is. */
        if (st == KEEL_STATUS_OK && i == 0 &&
            keel_tensor_dtype(in[i]) == KEEL_F32)
            st = keel_tensor_set_stop_gradient(in[i], false);
    }
    if (st == KEEL_STATUS_OK)
        st = keel_layer_forward(l, in, nin, &out);
    if (st == KEEL_STATUS_OK && gspec) {
        st = pn_tensor(gspec, &g);
        if (st == KEEL_STATUS_OK)
            st = keel_backward(out, g, false);
    }
    for (size_t r = 0; st == KEEL_STATUS_OK && r < json_array_size(report);
         r++) {
        const char *item = json_string_value(json_array_get(report, r));

        if (!item)
            pn_die("%s", "a report item is not a string");
        if (!strcmp(item, "out")) {
            st = pn_append(values, out);
        } else if (!strcmp(item, "distinct")) {
            st = pn_distinct(values, out);
        } else if (!strncmp(item, "kept:", 5)) {
            st = pn_kept(values, out, atof(item + 5));
        } else if (!strncmp(item, "rule:", 5)) {
            keel_tensor *xg = keel_tensor_grad(in[0]);

            if (!g)
                pn_die("%s", "\"rule\" needs a backward (grad_out)");
            st = pn_rule(values, in[0], out, g, xg, atof(item + 5));
            keel_tensor_free(xg);
        } else if (!strncmp(item, "grad:", 5) && item[5] >= '0' &&
                   item[5] <= '9') {
            int k = atoi(item + 5);
            keel_tensor *xg;

            if (k >= nin)
                pn_die("no input '%s'", item + 5);
            xg = keel_tensor_grad(in[k]);
            if (xg)
                st = pn_append(values, xg);
            else
                pn_append_zeros(values, keel_tensor_numel(in[k]));
            keel_tensor_free(xg);
        } else if (!strncmp(item, "grad:", 5)) {
            keel_tensor *p = keel_layer_parameter(l, item + 5);
            keel_tensor *pg;

            if (!p)
                pn_die("the layer has no parameter '%s'", item + 5);
            pg = keel_tensor_grad(p);
            if (pg)
                st = pn_append(values, pg);
            else
                pn_append_zeros(values, keel_tensor_numel(p));
            keel_tensor_free(pg);
        } else if (!strncmp(item, "buffer:", 7)) {
            keel_tensor *b = keel_layer_buffer(l, item + 7);

            if (!b)
                pn_die("the layer has no buffer '%s'", item + 7);
            st = pn_append(values, b);
        } else {
            pn_die("unknown report item '%s'", item);
        }
    }
    keel_layer_clear_gradients(l);
    for (int i = 0; i < nin; i++)
        keel_tensor_free(in[i]);
    keel_tensor_free(out);
    keel_tensor_free(g);
    return st;
}

static json_t *pn_run_config(json_t *cfg)
{
    json_t *steps = json_object_get(cfg, "steps");
    json_t *result, *values;
    keel_layer *l = NULL;
    keel_status st;

    pn_config = json_string_value(json_object_get(cfg, "name"));
    if (!pn_config)
        pn_die("%s", "a configuration has no name");
    if (!json_is_array(steps))
        pn_die("%s", "no \"steps\" array");
    result = json_pack("{s:s}", "name", pn_config);
    values = json_array();
    if (!result || !values)
        pn_die("%s", "out of memory");
    st = pn_build(json_object_get(cfg, "layer"), &l);
    if (st == KEEL_STATUS_OK)
        st = pn_load_state(l, json_object_get(cfg, "state"));
    for (size_t i = 0; st == KEEL_STATUS_OK && i < json_array_size(steps);
         i++)
        st = pn_step(l, json_array_get(steps, i), values);
    if (st == KEEL_STATUS_OK) {
        json_object_set_new(result, "values", values);
    } else {
        json_decref(values);
        json_object_set_new(result, "error",
                            json_sprintf("%s: %s", keel_status_name(st),
                                         keel_last_error()));
    }
    keel_layer_free(l);
    return result;
}

/* main() of every nn parity driver. */
static int pn_main(const char *driver)
{
    json_t *input, *configs, *results, *out;
    json_error_t jerr;
    int rc = 2;

    pn_driver = driver;
    input = json_loadf(stdin, 0, &jerr);
    if (!input) {
        fprintf(stderr, "%s: stdin is not JSON: line %d: %s\n", driver,
                jerr.line, jerr.text);
        return 2;
    }
    configs = json_object_get(input, "configs");
    if (!json_is_array(configs)) {
        fprintf(stderr, "%s: no \"configs\" array on stdin\n", driver);
        json_decref(input);
        return 2;
    }
    results = json_array();
    for (size_t i = 0; results && i < json_array_size(configs); i++)
        json_array_append_new(results,
                              pn_run_config(json_array_get(configs, i)));
    out = json_pack("{s:o}", "results", results);
    if (out &&
        !json_dumpf(out, stdout, JSON_COMPACT | JSON_REAL_PRECISION(17))) {
        fputc('\n', stdout);
        rc = fflush(stdout) ? 2 : 0;
    }
    json_decref(out);
    json_decref(input);
    keel_shutdown();
    return rc;
}

#endif /* PARITY_NN_COMMON_H */
