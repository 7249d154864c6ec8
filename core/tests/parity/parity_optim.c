// SPDX-License-Identifier: Apache-2.0
/*
 * Parity driver 'optim' (see parity_optim.py and run.py): reads
 *
 *   {"configs": [{"name", "optimizer", "args": {...}, "clip": {...},
 *                 "no_decay": [...], "params": [{"name", "init"}],
 *                 "grads": [[[...] per param] per step]}, ...]}
 *
 * on stdin, runs each with keel's optimizer on float32 parameters on
 * cpu:0, and writes {"results": [{"name", "values": [...]} or {"name",
 * "error"}]} on stdout, where values holds every parameter's weights
 * after every step (step-major, parameters in order), so that the Python
 * side can compare each step's update as well as the weights.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <keel/autograd.h>
#include <keel/optim.h>

#define MAXP 8
#define MAXN 64

static double num(json_t *obj, const char *key, double dflt)
{
    json_t *v = json_object_get(obj, key);

    return json_is_number(v) ? json_number_value(v) : dflt;
}

static bool no_decay(const char *name, void *user)
{
    json_t *list = user, *v;
    size_t i;

    json_array_foreach(list, i, v)
        if (json_is_string(v) && !strcmp(json_string_value(v), name))
            return false;
    return true;
}

static keel_status load_vec(json_t *arr, float *out, int64_t *n)
{
    size_t i;
    json_t *v;

    if (!json_is_array(arr) || json_array_size(arr) > MAXN)
        return KEEL_STATUS_INVALID_ARGUMENT;
    *n = (int64_t)json_array_size(arr);
    json_array_foreach(arr, i, v)
        out[i] = (float)json_number_value(v);
    return KEEL_STATUS_OK;
}

/* Append the weights of t[0..n) to values. */
static keel_status append_weights(keel_tensor **t, size_t n, json_t *values)
{
    float buf[MAXN];

    for (size_t i = 0; i < n; i++) {
        int64_t numel = keel_tensor_numel(t[i]);
        keel_status st;

        if (numel > MAXN)
            return KEEL_STATUS_INVALID_ARGUMENT;
        st = keel_tensor_to_host(t[i], buf, (size_t)numel * sizeof(float));
        if (st)
            return st;
        for (int64_t j = 0; j < numel; j++)
            if (json_array_append_new(values, json_real(buf[j])))
                return KEEL_STATUS_OUT_OF_MEMORY;
    }
    return KEEL_STATUS_OK;
}

static json_t *run_config(json_t *cfg)
{
    const char *name = json_string_value(json_object_get(cfg, "name"));
    const char *kind_s = json_string_value(json_object_get(cfg, "optimizer"));
    json_t *args = json_object_get(cfg, "args");
    json_t *clip = json_object_get(cfg, "clip");
    json_t *params = json_object_get(cfg, "params");
    json_t *grads = json_object_get(cfg, "grads");
    json_t *result = json_pack("{s:s}", "name", name ? name : "");
    json_t *values = NULL, *step;
    keel_tensor *t[MAXP] = {NULL};
    keel_named_param np[MAXP];
    keel_optimizer *opt = NULL;
    keel_optimizer_options o;
    keel_optimizer_kind kind;
    keel_status st = KEEL_STATUS_OK;
    size_t np_n = json_array_size(params), k, i;
    float buf[MAXN];
    int64_t n;

    if (!result)
        return NULL;
    if (!kind_s || np_n == 0 || np_n > MAXP || !json_is_array(grads))
        goto bad_config;
    if (!strcmp(kind_s, "SGD"))
        kind = KEEL_OPTIM_SGD;
    else if (!strcmp(kind_s, "Momentum"))
        kind = KEEL_OPTIM_MOMENTUM;
    else if (!strcmp(kind_s, "Adam"))
        kind = KEEL_OPTIM_ADAM;
    else if (!strcmp(kind_s, "AdamW"))
        kind = KEEL_OPTIM_ADAMW;
    else
        goto bad_config;
    o = keel_optimizer_default_options(kind);
    o.learning_rate = num(args, "learning_rate", o.learning_rate);
    o.weight_decay = num(args, "weight_decay", o.weight_decay);
    o.momentum = num(args, "momentum", o.momentum);
    o.use_nesterov = json_is_true(json_object_get(args, "use_nesterov"));
    o.beta1 = num(args, "beta1", o.beta1);
    o.beta2 = num(args, "beta2", o.beta2);
    o.epsilon = num(args, "epsilon", o.epsilon);
    if (json_is_array(json_object_get(cfg, "no_decay"))) {
        o.apply_decay_param_fun = no_decay;
        o.decay_user = json_object_get(cfg, "no_decay");
    }
    if (json_is_object(clip)) {
        const char *ck = json_string_value(json_object_get(clip, "kind"));

        if (!ck)
            goto bad_config;
        o.grad_clip.kind = !strcmp(ck, "value") ? KEEL_GRAD_CLIP_VALUE
                           : !strcmp(ck, "norm") ? KEEL_GRAD_CLIP_NORM
                                                 : KEEL_GRAD_CLIP_GLOBAL_NORM;
        o.grad_clip.clip_norm = num(clip, "clip_norm", 0);
        o.grad_clip.max = num(clip, "max", 0);
        o.grad_clip.min = num(clip, "min", -o.grad_clip.max);
    }
    for (i = 0; i < np_n; i++) {
        json_t *p = json_array_get(params, i);

        np[i].name = json_string_value(json_object_get(p, "name"));
        st = load_vec(json_object_get(p, "init"), buf, &n);
        if (!st)
            st = keel_tensor_from_host(buf, KEEL_F32, 1, &n, "cpu:0", &t[i]);
        if (!st)
            st = keel_tensor_set_stop_gradient(t[i], false);
        if (st)
            goto keel_error;
        np[i].param = t[i];
    }
    st = keel_optimizer_create(kind, np, np_n, &o, &opt);
    if (st)
        goto keel_error;
    values = json_array();
    if (!values) {
        st = KEEL_STATUS_OUT_OF_MEMORY;
        goto keel_error;
    }
    json_array_foreach(grads, k, step) {
        for (i = 0; i < np_n; i++) {
            keel_tensor *g = NULL;

            st = load_vec(json_array_get(step, i), buf, &n);
            if (!st)
                st = keel_tensor_from_host(buf, KEEL_F32, 1, &n, "cpu:0", &g);
            if (!st)
                st = keel_tensor_set_grad(t[i], g);
            keel_tensor_free(g);
            if (st)
                goto keel_error;
        }
        st = keel_optimizer_step(opt);
        if (!st)
            st = keel_optimizer_clear_grad(opt);
        if (!st)
            st = append_weights(t, np_n, values);
        if (st)
            goto keel_error;
    }
    json_object_set_new(result, "values", values);
    values = NULL;
    goto done;
bad_config:
    json_object_set_new(result, "error", json_string("bad configuration"));
    goto done;
keel_error:
    json_object_set_new(result, "error", json_string(keel_last_error()));
done:
    json_decref(values);
    keel_optimizer_free(opt);
    for (i = 0; i < MAXP; i++)
        keel_tensor_free(t[i]);
    return result;
}

int main(void)
{
    json_t *input, *configs, *results = NULL, *out = NULL;
    json_error_t jerr;
    int rc = 2;

    input = json_loadf(stdin, 0, &jerr);
    if (!input) {
        fprintf(stderr, "parity_optim: stdin is not JSON: line %d: %s\n",
                jerr.line, jerr.text);
        return 2;
    }
    configs = json_object_get(input, "configs");
    if (!json_is_array(configs)) {
        fprintf(stderr, "parity_optim: no \"configs\" array on stdin\n");
        goto done;
    }
    results = json_array();
    for (size_t i = 0; results && i < json_array_size(configs); i++) {
        json_t *r = run_config(json_array_get(configs, i));

        if (!r || json_array_append_new(results, r))
            goto done;
    }
    out = json_pack("{s:O}", "results", results);
    if (!out || json_dumpf(out, stdout, JSON_COMPACT | JSON_REAL_PRECISION(17)))
        goto done;
    fputc('\n', stdout);
    rc = fflush(stdout) ? 2 : 0;
done:
    json_decref(out);
    json_decref(results);
    json_decref(input);
    keel_shutdown();
    return rc;
}
