/*
 * Parity driver for the learning-rate schedulers: keel's half of
 * parity_lr.py.
 *
 * Reads the configurations as JSON on stdin (parity_lr.py writes them;
 * they are defined there only, so both sides run the same list):
 *
 *   {"configs": [{"name": "...", "scheduler": "StepDecay",
 *                 "args": {"learning_rate": 0.5, "step_size": 30},
 *                 "steps": 300, "metrics": [...]}, ...]}
 *
 * `args` uses Paddle's keyword names; a missing one takes Paddle's default
 * (filled in below, so a wrong default in keel's docs shows up as a
 * mismatch). LinearWarmup's learning_rate may be a nested
 * {"scheduler": ..., "args": ...}. ReduceOnPlateau is stepped with
 * metrics[k - 1] at step k.
 *
 * Writes one result per configuration on stdout:
 *
 *   {"results": [{"name": "...", "values": [lr0, lr1, ..., null, ...]},
 *                {"name": "...", "error": "message"}, ...]}
 *
 * values[0] is the rate after construction, values[k] the rate after step
 * k; a step that fails is null. "error" means construction failed.
 *
 * Exit status: 0 when every configuration was run (whatever keel
 * answered), 2 when the input is malformed (a bad configuration is a bug in
 * the test, not in keel).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <keel/optim.h>

/* A malformed configuration: message on stderr, exit 2. */
static int config_error(const char *name, const char *fmt, const char *what)
{
    fprintf(stderr, "parity_lr: configuration '%s': ", name);
    fprintf(stderr, fmt, what);
    fputc('\n', stderr);
    return -1;
}

struct args {
    const char *config; /* for messages */
    json_t *obj;
};

/* Every key of the object must be one of `known` (NULL-ended). */
static int check_keys(const struct args *a, const char *const *known)
{
    const char *key;
    json_t *v;

    json_object_foreach(a->obj, key, v) {
        int i;

        for (i = 0; known[i]; i++)
            if (!strcmp(key, known[i]))
                break;
        if (!known[i])
            return config_error(a->config, "unknown argument '%s'", key);
    }
    return 0;
}

static int get_num(const struct args *a, const char *key, bool required,
                   double def, double *out)
{
    json_t *v = json_object_get(a->obj, key);

    if (!v) {
        if (required)
            return config_error(a->config, "missing argument '%s'", key);
        *out = def;
        return 0;
    }
    if (!json_is_number(v))
        return config_error(a->config, "argument '%s' is not a number", key);
    *out = json_number_value(v);
    return 0;
}

static int get_int(const struct args *a, const char *key, bool required,
                   int64_t def, int64_t *out)
{
    json_t *v = json_object_get(a->obj, key);

    if (!v) {
        if (required)
            return config_error(a->config, "missing argument '%s'", key);
        *out = def;
        return 0;
    }
    if (!json_is_integer(v))
        return config_error(a->config, "argument '%s' is not an integer",
                            key);
    *out = (int64_t)json_integer_value(v);
    return 0;
}

static int get_bool(const struct args *a, const char *key, bool def,
                    bool *out)
{
    json_t *v = json_object_get(a->obj, key);

    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v))
        return config_error(a->config, "argument '%s' is not a boolean", key);
    *out = json_is_true(v);
    return 0;
}

static int get_str(const struct args *a, const char *key, const char *def,
                   const char **out)
{
    json_t *v = json_object_get(a->obj, key);

    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_is_string(v))
        return config_error(a->config, "argument '%s' is not a string", key);
    *out = json_string_value(v);
    return 0;
}

/*
 * Build the scheduler of `spec` ({"scheduler", "args"}). Returns 0 with
 * *st keel's answer (and *out on OK), or -1 for a malformed spec.
 */
static int build(const char *config, json_t *spec, keel_status *st,
                 keel_lr_scheduler **out);

static int build_step(const struct args *a, keel_status *st,
                      keel_lr_scheduler **out)
{
    static const char *const known[] = {"learning_rate", "step_size",
                                        "gamma", NULL};
    double lr, gamma;
    int64_t step_size;

    if (check_keys(a, known) || get_num(a, "learning_rate", true, 0, &lr) ||
        get_int(a, "step_size", true, 0, &step_size) ||
        get_num(a, "gamma", false, 0.1, &gamma))
        return -1;
    *st = keel_lr_step_decay_create(lr, step_size, gamma, out);
    return 0;
}

static int build_multi_step(const struct args *a, keel_status *st,
                            keel_lr_scheduler **out)
{
    static const char *const known[] = {"learning_rate", "milestones",
                                        "gamma", NULL};
    json_t *ms = json_object_get(a->obj, "milestones");
    int64_t *m = NULL;
    double lr, gamma;
    size_t n, i;

    if (check_keys(a, known) || get_num(a, "learning_rate", true, 0, &lr) ||
        get_num(a, "gamma", false, 0.1, &gamma))
        return -1;
    if (!json_is_array(ms))
        return config_error(a->config, "argument '%s' is not an array",
                            "milestones");
    n = json_array_size(ms);
    if (n && !(m = calloc(n, sizeof(*m))))
        return config_error(a->config, "%s", "out of memory");
    for (i = 0; i < n; i++) {
        json_t *v = json_array_get(ms, i);

        if (!json_is_integer(v)) {
            free(m);
            return config_error(a->config, "%s", "a milestone is not an "
                                "integer");
        }
        m[i] = (int64_t)json_integer_value(v);
    }
    *st = keel_lr_multi_step_decay_create(lr, m, n, gamma, out);
    free(m);
    return 0;
}

static int build_exponential(const struct args *a, keel_status *st,
                             keel_lr_scheduler **out)
{
    static const char *const known[] = {"learning_rate", "gamma", NULL};
    double lr, gamma;

    if (check_keys(a, known) || get_num(a, "learning_rate", true, 0, &lr) ||
        get_num(a, "gamma", true, 0, &gamma))
        return -1;
    *st = keel_lr_exponential_decay_create(lr, gamma, out);
    return 0;
}

static int build_cosine(const struct args *a, keel_status *st,
                        keel_lr_scheduler **out)
{
    static const char *const known[] = {"learning_rate", "T_max", "eta_min",
                                        NULL};
    double lr, eta_min;
    int64_t t_max;

    if (check_keys(a, known) || get_num(a, "learning_rate", true, 0, &lr) ||
        get_int(a, "T_max", true, 0, &t_max) ||
        get_num(a, "eta_min", false, 0.0, &eta_min))
        return -1;
    *st = keel_lr_cosine_annealing_decay_create(lr, t_max, eta_min, out);
    return 0;
}

static int build_polynomial(const struct args *a, keel_status *st,
                            keel_lr_scheduler **out)
{
    static const char *const known[] = {"learning_rate", "decay_steps",
                                        "end_lr", "power", "cycle", NULL};
    double lr, end_lr, power;
    int64_t decay_steps;
    bool cycle;

    if (check_keys(a, known) || get_num(a, "learning_rate", true, 0, &lr) ||
        get_int(a, "decay_steps", true, 0, &decay_steps) ||
        get_num(a, "end_lr", false, 0.0001, &end_lr) ||
        get_num(a, "power", false, 1.0, &power) ||
        get_bool(a, "cycle", false, &cycle))
        return -1;
    *st = keel_lr_polynomial_decay_create(lr, decay_steps, end_lr, power,
                                          cycle, out);
    return 0;
}

static int build_warmup(const struct args *a, keel_status *st,
                        keel_lr_scheduler **out)
{
    static const char *const known[] = {"learning_rate", "warmup_steps",
                                        "start_lr", "end_lr", NULL};
    json_t *inner_spec = json_object_get(a->obj, "learning_rate");
    keel_lr_scheduler *inner;
    double lr, start_lr, end_lr;
    int64_t warmup_steps;

    if (check_keys(a, known) ||
        get_int(a, "warmup_steps", true, 0, &warmup_steps) ||
        get_num(a, "start_lr", true, 0, &start_lr) ||
        get_num(a, "end_lr", true, 0, &end_lr))
        return -1;
    if (!json_is_object(inner_spec)) {
        if (get_num(a, "learning_rate", true, 0, &lr))
            return -1;
        *st = keel_lr_linear_warmup_create(lr, warmup_steps, start_lr,
                                           end_lr, out);
        return 0;
    }
    if (build(a->config, inner_spec, st, &inner))
        return -1;
    if (*st != KEEL_STATUS_OK)
        return 0;
    *st = keel_lr_linear_warmup_wrap(inner, warmup_steps, start_lr, end_lr,
                                     out);
    if (*st != KEEL_STATUS_OK)
        keel_lr_scheduler_free(inner); /* still ours on failure */
    return 0;
}

static int build_one_cycle(const struct args *a, keel_status *st,
                           keel_lr_scheduler **out)
{
    static const char *const known[] = {
        "max_learning_rate", "total_steps", "divide_factor",
        "end_learning_rate", "phase_pct", "anneal_strategy", "three_phase",
        NULL};
    double max_lr, divide_factor, end_lr, phase_pct;
    const char *anneal;
    int64_t total_steps;
    bool three_phase;

    if (check_keys(a, known) ||
        get_num(a, "max_learning_rate", true, 0, &max_lr) ||
        get_int(a, "total_steps", true, 0, &total_steps) ||
        get_num(a, "divide_factor", false, 25.0, &divide_factor) ||
        get_num(a, "end_learning_rate", false, 0.0001, &end_lr) ||
        get_num(a, "phase_pct", false, 0.3, &phase_pct) ||
        get_str(a, "anneal_strategy", "cos", &anneal) ||
        get_bool(a, "three_phase", false, &three_phase))
        return -1;
    *st = keel_lr_one_cycle_create(max_lr, total_steps, divide_factor,
                                   end_lr, phase_pct, anneal, three_phase,
                                   out);
    return 0;
}

static int build_plateau(const struct args *a, keel_status *st,
                         keel_lr_scheduler **out)
{
    static const char *const known[] = {
        "learning_rate", "mode", "factor", "patience", "threshold",
        "threshold_mode", "cooldown", "min_lr", "epsilon", NULL};
    double lr, factor, threshold, min_lr, epsilon;
    const char *mode, *threshold_mode;
    int64_t patience, cooldown;

    if (check_keys(a, known) || get_num(a, "learning_rate", true, 0, &lr) ||
        get_str(a, "mode", "min", &mode) ||
        get_num(a, "factor", false, 0.1, &factor) ||
        get_int(a, "patience", false, 10, &patience) ||
        get_num(a, "threshold", false, 1e-4, &threshold) ||
        get_str(a, "threshold_mode", "rel", &threshold_mode) ||
        get_int(a, "cooldown", false, 0, &cooldown) ||
        get_num(a, "min_lr", false, 0.0, &min_lr) ||
        get_num(a, "epsilon", false, 1e-8, &epsilon))
        return -1;
    *st = keel_lr_reduce_on_plateau_create(lr, mode, factor, patience,
                                           threshold, threshold_mode,
                                           cooldown, min_lr, epsilon, out);
    return 0;
}

static int build(const char *config, json_t *spec, keel_status *st,
                 keel_lr_scheduler **out)
{
    static const struct {
        const char *name;
        int (*fn)(const struct args *a, keel_status *st,
                  keel_lr_scheduler **out);
    } kinds[] = {
        {"StepDecay", build_step},
        {"MultiStepDecay", build_multi_step},
        {"ExponentialDecay", build_exponential},
        {"CosineAnnealingDecay", build_cosine},
        {"PolynomialDecay", build_polynomial},
        {"LinearWarmup", build_warmup},
        {"OneCycleLR", build_one_cycle},
        {"ReduceOnPlateau", build_plateau},
    };
    const char *kind = json_string_value(json_object_get(spec, "scheduler"));
    struct args a = {config, json_object_get(spec, "args")};

    if (!kind)
        return config_error(config, "%s", "no \"scheduler\" string");
    if (!json_is_object(a.obj))
        return config_error(config, "%s", "no \"args\" object");
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (!strcmp(kind, kinds[i].name))
            return kinds[i].fn(&a, st, out);
    return config_error(config, "unknown scheduler '%s'", kind);
}

/* A rate as JSON; jansson cannot hold NaN or infinities: strings then. */
static json_t *lr_json(double v)
{
    if (isnan(v))
        return json_string("nan");
    if (isinf(v))
        return json_string(v > 0 ? "inf" : "-inf");
    return json_real(v);
}

/* Run one configuration into a new result object; NULL when malformed. */
static json_t *run_config(json_t *cfg)
{
    const char *name = json_string_value(json_object_get(cfg, "name"));
    json_t *steps_j = json_object_get(cfg, "steps");
    json_t *metrics = json_object_get(cfg, "metrics");
    json_t *result = NULL, *values = NULL;
    keel_lr_scheduler *s = NULL;
    keel_status st;
    json_int_t steps;
    bool plateau;

    if (!name) {
        fprintf(stderr, "parity_lr: a configuration has no name\n");
        return NULL;
    }
    if (!json_is_integer(steps_j) || json_integer_value(steps_j) < 0) {
        config_error(name, "%s", "\"steps\" is not a count");
        return NULL;
    }
    steps = json_integer_value(steps_j);
    if (build(name, cfg, &st, &s))
        return NULL;
    result = json_pack("{s:s}", "name", name);
    if (!result)
        goto fail;
    if (st != KEEL_STATUS_OK) {
        json_object_set_new(result, "error",
                            json_sprintf("%s: %s", keel_status_name(st),
                                         keel_last_error()));
        return result;
    }
    plateau = !strcmp(keel_lr_scheduler_name(s), "ReduceOnPlateau");
    if (plateau && (!json_is_array(metrics) ||
                    (json_int_t)json_array_size(metrics) < steps)) {
        config_error(name, "%s", "a ReduceOnPlateau needs \"metrics\" for "
                     "every step");
        goto fail;
    }
    values = json_array();
    if (!values || json_array_append_new(values,
                                         lr_json(keel_lr_scheduler_last_lr(s))))
        goto fail;
    for (json_int_t k = 1; k <= steps; k++) {
        json_t *v;

        if (plateau)
            st = keel_lr_scheduler_step_metric(
                s, json_number_value(json_array_get(metrics, k - 1)));
        else
            st = keel_lr_scheduler_step(s);
        v = st == KEEL_STATUS_OK ? lr_json(keel_lr_scheduler_last_lr(s))
                                 : json_null();
        if (json_array_append_new(values, v))
            goto fail;
    }
    if (json_object_set_new(result, "values", values))
        goto fail_result;
    keel_lr_scheduler_free(s);
    return result;

fail:
    json_decref(values);
fail_result:
    json_decref(result);
    keel_lr_scheduler_free(s);
    return NULL;
}

int main(void)
{
    json_t *input, *configs, *results = NULL, *out = NULL;
    json_error_t jerr;
    int rc = 2;

    input = json_loadf(stdin, 0, &jerr);
    if (!input) {
        fprintf(stderr, "parity_lr: stdin is not JSON: line %d: %s\n",
                jerr.line, jerr.text);
        return 2;
    }
    configs = json_object_get(input, "configs");
    if (!json_is_array(configs)) {
        fprintf(stderr, "parity_lr: no \"configs\" array on stdin\n");
        goto done;
    }
    results = json_array();
    if (!results)
        goto done;
    for (size_t i = 0; i < json_array_size(configs); i++) {
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
    return rc;
}
