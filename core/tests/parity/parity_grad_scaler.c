// SPDX-License-Identifier: Apache-2.0
/*
 * Parity driver 'grad_scaler' (see parity_grad_scaler.py and run.py):
 * reads {"configs": [...]} on stdin and, for each, trains a float32
 * Linear(4, 3) (weight [4, 3], Paddle's layout, and bias [3] on cpu:0)
 * with keel's GradScaler, exactly as parity_grad_scaler.py describes:
 *
 *   keel_amp_begin(enable false, dtype amp_dtype)
 *   loss = mean(square(linear(x) - y)) [* inf | * nan]
 *   keel_amp_end()
 *   scale, backward, then step + update | minimize | unscale_ + step +
 *   update, clear_grad
 *
 * and writes {"results": [{"name", "values": [...]} or {"name",
 * "error"}]} on stdout. Values per step: the scale after the update, the
 * skip flag, the gradients left on W and b, W and b; a call of "misuse"
 * adds "refused" (INVALID_STATE) or "accepted" where it is made; at the
 * end the state dict's entry count and its STATE_KEYS entries ("absent"
 * when missing). A keel error elsewhere ends the configuration with
 * {"error": message}.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <keel/amp.h>
#include <keel/autograd.h>
#include <keel/io.h>
#include <keel/ops.h>
#include <keel/optim.h>
#include <keel/runtime.h>
#include <keel/tensor.h>

#define IN 4
#define OUT 3
#define BATCH 6

static const char *const state_keys[] = {
    "scale",      "incr_ratio", "decr_ratio", "incr_every_n_steps",
    "decr_every_n_nan_or_inf", "incr_count", "decr_count",
    "use_dynamic_loss_scaling",
};

static const char *config_name = "?";

/* A malformed configuration: the test is wrong, not keel. */
static void die(const char *what)
{
    fprintf(stderr, "parity_grad_scaler: configuration '%s': %s\n",
            config_name, what);
    exit(2);
}

static double num(json_t *obj, const char *key, double dflt)
{
    json_t *v = json_object_get(obj, key);

    if (!v || json_is_null(v))
        return dflt;
    if (!json_is_number(v))
        die("a number argument is not a number");
    return json_number_value(v);
}

static json_t *jnum(double v)
{
    if (isnan(v))
        return json_string("nan");
    if (isinf(v))
        return json_string(v > 0 ? "inf" : "-inf");
    return json_real(v);
}

/* A float32 tensor of `n` values from a JSON array. */
static keel_status load(json_t *cfg, const char *key, int ndim,
                        const int64_t *shape, keel_tensor **out)
{
    json_t *arr = json_object_get(cfg, key);
    float buf[BATCH * IN > IN * OUT ? BATCH * IN : IN * OUT];
    int64_t n = 1;

    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    if (!json_is_array(arr) || (int64_t)json_array_size(arr) != n ||
        n > (int64_t)(sizeof(buf) / sizeof(buf[0])))
        die("a data array has the wrong size");
    for (int64_t i = 0; i < n; i++)
        buf[i] = (float)json_number_value(json_array_get(arr, (size_t)i));
    return keel_tensor_from_host(buf, KEEL_F32, ndim, shape, "cpu:0", out);
}

/* Append t's values (float32, any count up to 64). */
static keel_status append(json_t *values, const keel_tensor *t)
{
    float buf[64];
    int64_t n = keel_tensor_numel(t);
    keel_status st;

    if (n > 64)
        die("a tensor is too large to report");
    st = keel_tensor_to_host(t, buf, (size_t)n * sizeof(float));
    for (int64_t i = 0; st == KEEL_STATUS_OK && i < n; i++)
        json_array_append_new(values, jnum(buf[i]));
    return st;
}

/* The gradient of p, or zeros when it has none (as Paddle reports). */
static keel_status append_grad(json_t *values, const keel_tensor *p)
{
    keel_tensor *g = keel_tensor_grad(p);
    keel_status st = KEEL_STATUS_OK;

    if (g)
        st = append(values, g);
    else
        for (int64_t i = 0; i < keel_tensor_numel(p); i++)
            json_array_append_new(values, json_real(0.0));
    keel_tensor_free(g);
    return st;
}

static keel_status make_optimizer(json_t *cfg, keel_tensor *w, keel_tensor *b,
                                  keel_optimizer **opt)
{
    const char *kind_s = json_string_value(json_object_get(cfg, "optimizer"));
    json_t *args = json_object_get(cfg, "opt_args");
    keel_named_param np[2] = {{"weight", w}, {"bias", b}};
    keel_optimizer_kind kind;
    keel_optimizer_options o;

    if (!kind_s)
        die("no optimizer");
    if (!strcmp(kind_s, "SGD"))
        kind = KEEL_OPTIM_SGD;
    else if (!strcmp(kind_s, "Momentum"))
        kind = KEEL_OPTIM_MOMENTUM;
    else if (!strcmp(kind_s, "Adam"))
        kind = KEEL_OPTIM_ADAM;
    else if (!strcmp(kind_s, "AdamW"))
        kind = KEEL_OPTIM_ADAMW;
    else
        die("unknown optimizer");
    o = keel_optimizer_default_options(kind);
    o.learning_rate = num(args, "learning_rate", o.learning_rate);
    o.weight_decay = num(args, "weight_decay", o.weight_decay);
    o.momentum = num(args, "momentum", o.momentum);
    o.beta1 = num(args, "beta1", o.beta1);
    o.beta2 = num(args, "beta2", o.beta2);
    o.epsilon = num(args, "epsilon", o.epsilon);
    if (json_object_get(args, "clip_global_norm")) {
        o.grad_clip.kind = KEEL_GRAD_CLIP_GLOBAL_NORM;
        o.grad_clip.clip_norm = num(args, "clip_global_norm", 0);
    }
    return keel_optimizer_create(kind, np, 2, &o, opt);
}

static keel_status make_scaler(json_t *cfg, keel_grad_scaler **s)
{
    json_t *a = json_object_get(cfg, "scaler");
    keel_grad_scaler_options o = keel_grad_scaler_default_options();
    json_t *v;

    o.init_loss_scaling = num(a, "init_loss_scaling", o.init_loss_scaling);
    o.incr_ratio = num(a, "incr_ratio", o.incr_ratio);
    o.decr_ratio = num(a, "decr_ratio", o.decr_ratio);
    o.incr_every_n_steps =
        (int64_t)num(a, "incr_every_n_steps", (double)o.incr_every_n_steps);
    o.decr_every_n_nan_or_inf = (int64_t)num(
        a, "decr_every_n_nan_or_inf", (double)o.decr_every_n_nan_or_inf);
    if ((v = json_object_get(a, "enable")))
        o.enable = json_is_true(v);
    if ((v = json_object_get(a, "use_dynamic_loss_scaling")))
        o.use_dynamic_loss_scaling = json_is_true(v);
    return keel_grad_scaler_create(&o, s);
}

/* The forward pass of step k: loss, optionally times inf or NaN. */
static keel_status forward(const keel_amp_options *amp, keel_tensor *x,
                           keel_tensor *y, keel_tensor *w, keel_tensor *b,
                           const char *inject, keel_tensor **loss)
{
    keel_tensor *out = NULL, *d = NULL, *sq = NULL, *m = NULL, *f = NULL;
    keel_status st;

    *loss = NULL;
    st = keel_amp_begin(amp);
    if (st != KEEL_STATUS_OK)
        return st;
    st = keel_linear(x, w, b, &out);
    if (st == KEEL_STATUS_OK)
        st = keel_subtract(out, y, &d);
    if (st == KEEL_STATUS_OK)
        st = keel_square(d, &sq);
    if (st == KEEL_STATUS_OK)
        st = keel_mean(sq, 0, NULL, false, &m);
    if (st == KEEL_STATUS_OK && inject) {
        double v = !strcmp(inject, "inf") ? INFINITY : NAN;

        st = keel_full(0, NULL, KEEL_F32, v, "cpu:0", &f);
        if (st == KEEL_STATUS_OK)
            st = keel_multiply(m, f, loss);
    } else if (st == KEEL_STATUS_OK) {
        *loss = keel_tensor_ref(m);
    }
    keel_amp_end();
    keel_tensor_free(out);
    keel_tensor_free(d);
    keel_tensor_free(sq);
    keel_tensor_free(m);
    keel_tensor_free(f);
    return st;
}

/* A call Paddle refuses with RuntimeError: INVALID_STATE is "refused";
 * any other error ends the configuration. */
static keel_status refused(json_t *values, keel_status st)
{
    if (st == KEEL_STATUS_INVALID_STATE) {
        json_array_append_new(values, json_string("refused"));
        return KEEL_STATUS_OK;
    }
    if (st == KEEL_STATUS_OK)
        json_array_append_new(values, json_string("accepted"));
    return st;
}

static keel_status one_step(json_t *cfg, keel_grad_scaler *s,
                            keel_optimizer *opt, keel_tensor *loss,
                            const char *misuse, json_t *values)
{
    const char *mode = json_string_value(json_object_get(cfg, "mode"));
    keel_tensor *scaled = NULL;
    keel_status st;

    if (!mode)
        die("no mode");
    st = keel_grad_scaler_scale(s, loss, &scaled);
    if (st == KEEL_STATUS_OK)
        st = keel_backward(scaled, NULL, false);
    keel_tensor_free(scaled);
    if (st != KEEL_STATUS_OK)
        return st;
    if (!strcmp(mode, "minimize"))
        return keel_grad_scaler_minimize(s, opt);
    if (!strcmp(mode, "unscale_step")) {
        st = keel_grad_scaler_unscale(s, opt);
        if (st == KEEL_STATUS_OK && misuse && !strcmp(misuse, "unscale_twice"))
            st = refused(values, keel_grad_scaler_unscale(s, opt));
    } else if (strcmp(mode, "step")) {
        die("unknown mode");
    }
    if (st == KEEL_STATUS_OK)
        st = keel_grad_scaler_step(s, opt);
    if (st == KEEL_STATUS_OK && misuse &&
        !strcmp(misuse, "unscale_after_step"))
        st = refused(values, keel_grad_scaler_unscale(s, opt));
    if (st == KEEL_STATUS_OK && misuse && !strcmp(misuse, "step_twice"))
        st = refused(values, keel_grad_scaler_step(s, opt));
    if (st == KEEL_STATUS_OK)
        st = keel_grad_scaler_update(s);
    return st;
}

/* The state dict's entry count, then each of state_keys. */
static keel_status append_state(const keel_grad_scaler *s, json_t *values)
{
    keel_state_dict *sd = NULL;
    keel_status st = keel_state_dict_create(&sd);

    if (st == KEEL_STATUS_OK)
        st = keel_grad_scaler_state_get(s, NULL, sd);
    if (st == KEEL_STATUS_OK)
        json_array_append_new(values,
                              json_real((double)keel_state_dict_count(sd)));
    for (size_t i = 0;
         st == KEEL_STATUS_OK && i < sizeof(state_keys) / sizeof(*state_keys);
         i++) {
        keel_tensor *t = keel_state_dict_get(sd, state_keys[i]), *f = NULL;
        double v = 0;

        if (!t) {
            json_array_append_new(values, json_string("absent"));
            continue;
        }
        if (keel_tensor_numel(t) != 1) {
            json_array_append_new(values, json_string("not one element"));
            continue;
        }
        st = keel_cast(t, KEEL_F64, &f);
        if (st == KEEL_STATUS_OK)
            st = keel_tensor_to_host(f, &v, sizeof(v));
        if (st == KEEL_STATUS_OK && keel_tensor_dtype(t) == KEEL_BOOL)
            json_array_append_new(values, json_string(v != 0 ? "true"
                                                             : "false"));
        else if (st == KEEL_STATUS_OK)
            json_array_append_new(values, jnum(v));
        keel_tensor_free(f);
    }
    keel_state_dict_free(sd);
    return st;
}

static json_t *run_config(json_t *cfg)
{
    static const int64_t wshape[2] = {IN, OUT}, bshape[1] = {OUT},
                         xshape[2] = {BATCH, IN}, yshape[2] = {BATCH, OUT};
    json_t *inject = json_object_get(cfg, "inject");
    json_t *misuse = json_object_get(cfg, "misuse");
    const char *amp_dtype =
        json_string_value(json_object_get(cfg, "amp_dtype"));
    json_t *result, *values = json_array();
    keel_tensor *w = NULL, *b = NULL, *x = NULL, *y = NULL;
    keel_grad_scaler *s = NULL;
    keel_optimizer *opt = NULL;
    keel_amp_options amp = keel_amp_default_options();
    keel_status st;
    size_t k;
    json_t *what;

    config_name = json_string_value(json_object_get(cfg, "name"));
    if (!config_name)
        die("no name");
    result = json_pack("{s:s}", "name", config_name);
    if (!result || !values)
        die("out of memory");
    if (!json_is_array(inject) || !amp_dtype)
        die("no \"inject\" array or \"amp_dtype\"");
    amp.enable = false;
    if (keel_dtype_parse(amp_dtype, &amp.dtype) != KEEL_STATUS_OK)
        die("unknown amp_dtype");

    st = make_scaler(cfg, &s);
    if (st == KEEL_STATUS_OK)
        st = load(cfg, "weight", 2, wshape, &w);
    if (st == KEEL_STATUS_OK)
        st = load(cfg, "bias", 1, bshape, &b);
    if (st == KEEL_STATUS_OK)
        st = load(cfg, "x", 2, xshape, &x);
    if (st == KEEL_STATUS_OK)
        st = load(cfg, "y", 2, yshape, &y);
    if (st == KEEL_STATUS_OK)
        st = keel_tensor_set_stop_gradient(w, false);
    if (st == KEEL_STATUS_OK)
        st = keel_tensor_set_stop_gradient(b, false);
    if (st == KEEL_STATUS_OK)
        st = make_optimizer(cfg, w, b, &opt);
    json_array_foreach(inject, k, what) {
        keel_tensor *loss = NULL;
        const char *bad = NULL;

        if (st != KEEL_STATUS_OK)
            break;
        if (misuse &&
            (size_t)json_integer_value(json_object_get(misuse, "step")) == k)
            bad = json_string_value(json_object_get(misuse, "call"));
        st = forward(&amp, x, y, w, b, json_string_value(what), &loss);
        if (st == KEEL_STATUS_OK)
            st = one_step(cfg, s, opt, loss, bad, values);
        keel_tensor_free(loss);
        if (st != KEEL_STATUS_OK)
            break;
        json_array_append_new(values, json_real(keel_grad_scaler_get_scale(s)));
        json_array_append_new(values,
                              json_boolean(keel_grad_scaler_found_inf(s)));
        st = append_grad(values, w);
        if (st == KEEL_STATUS_OK)
            st = append_grad(values, b);
        if (st == KEEL_STATUS_OK)
            st = append(values, w);
        if (st == KEEL_STATUS_OK)
            st = append(values, b);
        if (st == KEEL_STATUS_OK)
            st = keel_optimizer_clear_grad(opt);
    }
    if (st == KEEL_STATUS_OK)
        st = append_state(s, values);
    if (st == KEEL_STATUS_OK) {
        json_object_set_new(result, "values", values);
    } else {
        json_decref(values);
        json_object_set_new(result, "error",
                            json_sprintf("%s: %s", keel_status_name(st),
                                         keel_last_error()));
    }
    keel_optimizer_free(opt);
    keel_grad_scaler_free(s);
    keel_tensor_free(w);
    keel_tensor_free(b);
    keel_tensor_free(x);
    keel_tensor_free(y);
    return result;
}

int main(void)
{
    json_t *input, *configs, *results, *out = NULL;
    json_error_t jerr;
    int rc = 2;

    input = json_loadf(stdin, 0, &jerr);
    if (!input) {
        fprintf(stderr, "parity_grad_scaler: stdin is not JSON: line %d: %s\n",
                jerr.line, jerr.text);
        return 2;
    }
    configs = json_object_get(input, "configs");
    if (!json_is_array(configs)) {
        fprintf(stderr, "parity_grad_scaler: no \"configs\" array on stdin\n");
        json_decref(input);
        return 2;
    }
    results = json_array();
    for (size_t i = 0; results && i < json_array_size(configs); i++)
        json_array_append_new(results, run_config(json_array_get(configs, i)));
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
