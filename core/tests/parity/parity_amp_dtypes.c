// SPDX-License-Identifier: Apache-2.0
/*
 * Parity driver 'amp_dtypes' (see parity_amp_dtypes.py and run.py): runs a
 * model of keel nn layers eagerly on cpu:0 inside one auto_cast scope and
 * reports, per call, the dtype of its output and every op it ran with the
 * dtype that op computed in (keel's operator statistics, Paddle's
 * paddle.amp.debugging counterpart).
 *
 *   {"name", "level": "O1" | "O2", "dtype": "bfloat16" | "float16",
 *    "inputs": {NAME: {"tensor": T, "dtype": "float32" | "bfloat16" |
 *                      "float16"}, ...},
 *    "calls": [{"id", "layer": {"type", "args"}, "inputs": [NAME, ...]},
 *              {"id", "op": "add" | "mean", "inputs": [NAME, ...]}, ...]}
 *
 * T is nn_common.h's tensor spec; a float input is cast to its "dtype"
 * before the scope opens. Layers are built by nn_common.h's pn_build
 * (Paddle's class names and keyword arguments), put in evaluation mode
 * and, at O2, decorated together (keel_amp_decorate, like
 * paddle.amp.decorate of a LayerList of them). NAME is an input or the id
 * of an earlier call.
 *
 * The values, per call: "<id> out <dtype>", then one "<id> op <op> <dtype>"
 * per op call counted by keel_amp_op_stats (a cast is counted under its
 * source dtype) and one "<id> fallback <op>" per op that ran in float32
 * because the device had no kernel for the amp dtype, in catalog order.
 */
#include "nn_common.h"

#include <keel/amp.h>
#include <keel/runtime.h>

#define MAX_ENV 48

static struct {
    const char *name;
    keel_tensor *t;
} env[MAX_ENV];
static int n_env;

static keel_tensor *env_get(const char *name)
{
    for (int i = n_env - 1; i >= 0; i--)
        if (!strcmp(env[i].name, name))
            return env[i].t;
    pn_die("no input or earlier call '%s'", name);
    return NULL;
}

static void env_put(const char *name, keel_tensor *t)
{
    if (n_env == MAX_ENV)
        pn_die("%s", "too many inputs and calls");
    env[n_env].name = name;
    env[n_env++].t = t;
}

static void env_clear(void)
{
    for (int i = 0; i < n_env; i++)
        keel_tensor_free(env[i].t);
    n_env = 0;
}

static keel_dtype parse_dtype(const char *s)
{
    keel_dtype d;

    if (!s || keel_dtype_parse(s, &d) != KEEL_STATUS_OK)
        pn_die("unknown dtype '%s'", s ? s : "(none)");
    return d;
}

static keel_status load_inputs(json_t *inputs)
{
    const char *name;
    json_t *spec;

    if (!json_is_object(inputs))
        pn_die("%s", "no \"inputs\" object");
    json_object_foreach(inputs, name, spec) {
        const char *ds = json_string_value(json_object_get(spec, "dtype"));
        keel_tensor *t = NULL, *c = NULL;
        keel_status st = pn_tensor(json_object_get(spec, "tensor"), &t);

        if (st == KEEL_STATUS_OK && ds &&
            keel_tensor_dtype(t) != parse_dtype(ds)) {
            st = keel_cast(t, parse_dtype(ds), &c);
            keel_tensor_free(t);
            t = c;
        }
        if (st != KEEL_STATUS_OK)
            return st;
        env_put(name, t);
    }
    return KEEL_STATUS_OK;
}

static keel_status run_op(const char *op, keel_tensor **in, int nin,
                          keel_tensor **out)
{
    if (!strcmp(op, "add") && nin == 2)
        return keel_add(in[0], in[1], out);
    if (!strcmp(op, "mean") && nin == 1)
        return keel_mean(in[0], 0, NULL, false, out);
    pn_die("unknown op call '%s' (or wrong input count)", op);
    return KEEL_STATUS_INVALID_ARGUMENT;
}

/* The rows of one call, from the statistics since the last reset. */
static void append_rows(json_t *values, const char *id, const keel_tensor *out)
{
    keel_dtype dt = keel_tensor_dtype(out);

    json_array_append_new(values,
                          json_sprintf("%s out %s", id, keel_dtype_name(dt)));
    for (int op = 0; op < KEEL_OP_COUNT; op++) {
        const char *name = keel_op_get_info((keel_op_id)op)->name;

        for (int d = 0; d < KEEL_DTYPE_COUNT_; d++) {
            uint64_t n = keel_amp_op_stats_get((keel_op_id)op, (keel_dtype)d);

            for (uint64_t k = 0; k < n; k++)
                json_array_append_new(
                    values, json_sprintf("%s op %s %s", id, name,
                                         keel_dtype_name((keel_dtype)d)));
        }
        for (uint64_t k = 0; k < keel_amp_fallback_count((keel_op_id)op); k++)
            json_array_append_new(values,
                                  json_sprintf("%s fallback %s", id, name));
    }
}

static keel_status run_calls(json_t *calls, keel_layer **layers,
                             const keel_amp_options *amp, json_t *values)
{
    keel_status st = keel_amp_begin(amp);
    int li = 0;

    for (size_t c = 0; st == KEEL_STATUS_OK && c < json_array_size(calls);
         c++) {
        json_t *call = json_array_get(calls, c);
        json_t *ins = json_object_get(call, "inputs");
        const char *id = json_string_value(json_object_get(call, "id"));
        const char *op = json_string_value(json_object_get(call, "op"));
        keel_tensor *in[PN_MAX_INPUTS], *out = NULL;
        int nin = (int)json_array_size(ins);

        if (!id || nin < 1 || nin > PN_MAX_INPUTS)
            pn_die("%s", "a call needs an \"id\" and 1 to 4 \"inputs\"");
        for (int i = 0; i < nin; i++)
            in[i] = env_get(json_string_value(json_array_get(ins, i)));
        keel_amp_op_stats_reset();
        keel_amp_fallback_reset();
        st = op ? run_op(op, in, nin, &out)
                : keel_layer_forward(layers[li++], in, nin, &out);
        if (st != KEEL_STATUS_OK)
            break;
        append_rows(values, id, out);
        env_put(id, out);
    }
    if (st == KEEL_STATUS_OK)
        st = keel_amp_end();
    else
        keel_amp_end();
    return st;
}

static json_t *run_config(json_t *cfg)
{
    json_t *calls = json_object_get(cfg, "calls");
    const char *level = json_string_value(json_object_get(cfg, "level"));
    json_t *result, *values = json_array();
    keel_layer *layers[MAX_ENV] = {NULL};
    keel_amp_options amp = keel_amp_default_options();
    keel_status st;
    int nl = 0;

    pn_config = json_string_value(json_object_get(cfg, "name"));
    if (!pn_config)
        pn_die("%s", "a configuration has no name");
    result = json_pack("{s:s}", "name", pn_config);
    if (!result || !values)
        pn_die("%s", "out of memory");
    if (!json_is_array(calls) || json_array_size(calls) > MAX_ENV / 2)
        pn_die("%s", "no \"calls\" array, or too many calls");
    if (!level || (strcmp(level, "O1") && strcmp(level, "O2")))
        pn_die("%s", "\"level\" is O1 or O2");
    amp.level = level[1] == '1' ? KEEL_AMP_O1 : KEEL_AMP_O2;
    amp.dtype = parse_dtype(json_string_value(json_object_get(cfg, "dtype")));

    st = load_inputs(json_object_get(cfg, "inputs"));
    for (size_t c = 0; st == KEEL_STATUS_OK && c < json_array_size(calls);
         c++) {
        json_t *spec = json_object_get(json_array_get(calls, c), "layer");

        if (spec)
            st = pn_build(spec, &layers[nl++]);
    }
    if (st == KEEL_STATUS_OK && amp.level == KEEL_AMP_O2 && nl)
        st = keel_amp_decorate(layers, nl, NULL, 0, KEEL_AMP_O2, amp.dtype,
                               -1);
    for (int i = 0; st == KEEL_STATUS_OK && i < nl; i++)
        keel_layer_eval(layers[i]);
    if (st == KEEL_STATUS_OK)
        st = run_calls(calls, layers, &amp, values);
    if (st == KEEL_STATUS_OK) {
        json_object_set_new(result, "values", values);
    } else {
        json_decref(values);
        json_object_set_new(result, "error",
                            json_sprintf("%s: %s", keel_status_name(st),
                                         keel_last_error()));
    }
    env_clear();
    for (int i = 0; i < nl; i++)
        keel_layer_free(layers[i]);
    return result;
}

int main(void)
{
    json_t *input, *configs, *results, *out;
    json_error_t jerr;
    int rc = 2;

    pn_driver = "parity_amp_dtypes";
    /* nn_common.h's configuration runner is not used here; only its
     * layer builder and tensor specs are. */
    (void)pn_main;
    input = json_loadf(stdin, 0, &jerr);
    if (!input) {
        fprintf(stderr, "%s: stdin is not JSON: line %d: %s\n", pn_driver,
                jerr.line, jerr.text);
        return 2;
    }
    configs = json_object_get(input, "configs");
    if (!json_is_array(configs)) {
        fprintf(stderr, "%s: no \"configs\" array on stdin\n", pn_driver);
        json_decref(input);
        return 2;
    }
    keel_amp_op_stats_enable(true);
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
