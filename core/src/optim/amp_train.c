/*
 * Training under mixed precision (keel/amp.h): decorate, which moves a
 * model to float16/bfloat16 parameters for O2 and gives its optimizers
 * float32 master weights, and the GradScaler, with Paddle 3.3's state
 * machine (python/paddle/amp/grad_scaler.py): scale -> unscale_ -> step ->
 * update, the inf/NaN check done on the device by the
 * check_finite_and_unscale op and read back once per step.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/amp.h>
#include <keel/autograd.h>
#include <keel/io.h>
#include <keel/nn.h>
#include <keel/ops.h>

#include "nn/nn_internal.h"
#include "optim/optim_internal.h"

/* ---- decorate ------------------------------------------------------------- */

struct cast_list {
    keel_tensor **t;    /* tensors to change (borrowed) */
    keel_tensor **cast; /* their casts (owned) */
    int n, cap;
};

static bool listed(const struct cast_list *l, const keel_tensor *t)
{
    for (int i = 0; i < l->n; i++)
        if (l->t[i] == t)
            return true;
    return false;
}

/* Paddle's need_keep_fp32: BatchNorm always, LayerNorm for float16. */
static bool keeps_fp32(const keel_layer *layer, keel_dtype dtype)
{
    const char *type = keel_layer_type(layer);

    if (keel__layer_keep_fp32(layer))
        return true;
    if (!strcmp(type, "BatchNorm1D") || !strcmp(type, "BatchNorm2D"))
        return true;
    return dtype == KEEL_F16 && !strcmp(type, "LayerNorm");
}

static keel_status collect(const keel_layer *layer, keel_dtype dtype,
                           struct cast_list *l)
{
    keel_status st;

    if (!keeps_fp32(layer, dtype)) {
        for (int i = 0; i < keel__layer_num_own(layer); i++) {
            keel_tensor *t = keel__layer_own_at(layer, i), *g;
            keel_dtype dt = keel_tensor_dtype(t);

            if (!t || dt == dtype || listed(l, t) ||
                (dt != KEEL_F32 && dt != KEEL_F64 && dt != KEEL_F16 &&
                 dt != KEEL_BF16))
                continue;
            g = keel_tensor_grad(t);
            if (g) {
                keel_tensor_free(g);
                return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                                   "amp decorate: a parameter of %s already "
                                   "has a gradient; decorate before "
                                   "training",
                                   keel_layer_type(layer));
            }
            if (l->n == l->cap) {
                int cap = l->cap ? 2 * l->cap : 16;
                keel_tensor **a = realloc(l->t, (size_t)cap * sizeof(*a));

                if (!a)
                    return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                                       "amp decorate: out of host memory");
                l->t = a;
                a = realloc(l->cast, (size_t)cap * sizeof(*a));
                if (!a)
                    return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                                       "amp decorate: out of host memory");
                l->cast = a;
                l->cap = cap;
            }
            l->t[l->n] = t;
            l->cast[l->n++] = NULL;
        }
    }
    for (int i = 0; i < keel_layer_num_sublayers(layer); i++) {
        st = collect(keel_layer_sublayer_at(layer, i), dtype, l);
        if (st != KEEL_STATUS_OK)
            return st;
    }
    return KEEL_STATUS_OK;
}

keel_status keel_amp_decorate(keel_layer *const *models, int num_models,
                              keel_optimizer *const *optimizers,
                              int num_optimizers, keel_amp_level level,
                              keel_dtype dtype, int master_weight)
{
    struct cast_list l = {0};
    keel_status st = KEEL_STATUS_OK;

    if (level != KEEL_AMP_O1 && level != KEEL_AMP_O2)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "amp decorate: level must be O1 or O2");
    if (dtype != KEEL_F16 && dtype != KEEL_BF16)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "amp decorate: dtype must be float16 or bfloat16");
    if (num_models < 0 || num_optimizers < 0 ||
        (num_models > 0 && !models) || (num_optimizers > 0 && !optimizers))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "amp decorate: bad model or optimizer list");
    for (int i = 0; i < num_models; i++)
        if (!models[i])
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "amp decorate: model %d is NULL", i);
    for (int i = 0; i < num_optimizers; i++) {
        if (!optimizers[i])
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "amp decorate: optimizer %d is NULL", i);
        if (level == KEEL_AMP_O2 && keel__optimizer_has_state(optimizers[i]))
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "amp decorate: optimizer %d has already "
                               "updated parameters; decorate before "
                               "training",
                               i);
    }
    if (level == KEEL_AMP_O1)
        return KEEL_STATUS_OK;
    for (int i = 0; i < num_models && st == KEEL_STATUS_OK; i++)
        st = collect(models[i], dtype, &l);
    /* Every cast first, so that a failure changes nothing. */
    keel_no_grad_begin();
    for (int i = 0; i < l.n && st == KEEL_STATUS_OK; i++)
        st = keel_cast(l.t[i], dtype, &l.cast[i]);
    keel_no_grad_end();
    if (st == KEEL_STATUS_OK) {
        for (int i = 0; i < l.n; i++)
            keel__tensor_adopt(l.t[i], l.cast[i]);
        /* cannot fail: no optimizer has updated (checked above) */
        for (int i = 0; i < num_optimizers && st == KEEL_STATUS_OK; i++)
            st = keel_optimizer_set_multi_precision(optimizers[i],
                                                    master_weight != 0);
    }
    for (int i = 0; i < l.n; i++)
        keel_tensor_free(l.cast[i]);
    free(l.t);
    free(l.cast);
    return st;
}

/* ---- GradScaler --------------------------------------------------------------- */

enum opt_state { OPT_INIT = 0, OPT_UNSCALED, OPT_STEPPED };

#define SCALER_MAX_OPTS 16

struct keel_grad_scaler {
    bool enable;
    bool dynamic;
    double init_loss_scaling;
    double incr_ratio, decr_ratio;
    int64_t incr_every, decr_every;
    int64_t incr_count, decr_count;
    float scale;            /* Paddle keeps it in a float32 tensor */
    keel_tensor *scale_t;   /* float32 [1] on the device, = scale */
    keel_tensor *found_inf; /* bool [1] of the last unscale_ */
    bool found;             /* _found_inf read back */
    bool cache_found_inf;   /* the last step's outcome */
    keel_place place;
    char device[64];
    struct {
        const keel_optimizer *opt;
        enum opt_state state;
    } opts[SCALER_MAX_OPTS];
    int nopts;
};

keel_grad_scaler_options keel_grad_scaler_default_options(void)
{
    keel_grad_scaler_options o;

    o.enable = true;
    o.init_loss_scaling = 65536.0;
    o.incr_ratio = 2.0;
    o.decr_ratio = 0.5;
    o.incr_every_n_steps = 2000;
    o.decr_every_n_nan_or_inf = 1;
    o.use_dynamic_loss_scaling = true;
    return o;
}

static keel_status upload_scale(keel_grad_scaler *s)
{
    int64_t one = 1;
    keel_tensor *t = NULL;
    keel_status st;

    st = keel_tensor_from_host(&s->scale, KEEL_F32, 1, &one, s->device, &t);
    if (st != KEEL_STATUS_OK)
        return st;
    keel_tensor_free(s->scale_t);
    s->scale_t = t;
    return KEEL_STATUS_OK;
}

keel_status keel_grad_scaler_create(const keel_grad_scaler_options *options,
                                    keel_grad_scaler **out)
{
    keel_grad_scaler_options o =
        options ? *options : keel_grad_scaler_default_options();
    keel_grad_scaler *s;
    keel_status st;

    if (!out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "GradScaler: out is NULL");
    *out = NULL;
    if (o.enable) {
        if (!(o.incr_ratio > 1.0))
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "GradScaler: incr_ratio must be > 1.0, got %g",
                               o.incr_ratio);
        if (!(o.decr_ratio < 1.0) || !(o.decr_ratio > 0.0))
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "GradScaler: decr_ratio must be in (0, 1), "
                               "got %g",
                               o.decr_ratio);
        if (!(o.init_loss_scaling > 0.0) || !isfinite(o.init_loss_scaling) ||
            !((float)o.init_loss_scaling > 0.0f) ||
            isinf((float)o.init_loss_scaling))
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "GradScaler: init_loss_scaling must be a "
                               "positive float32 value, got %g",
                               o.init_loss_scaling);
        if (o.incr_every_n_steps < 1 || o.decr_every_n_nan_or_inf < 1)
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "GradScaler: incr_every_n_steps and "
                               "decr_every_n_nan_or_inf must be >= 1, got "
                               "%lld and %lld",
                               (long long)o.incr_every_n_steps,
                               (long long)o.decr_every_n_nan_or_inf);
    }
    s = calloc(1, sizeof(*s));
    if (!s)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "GradScaler: out of host memory");
    s->enable = o.enable;
    /* A disabled scaler keeps Paddle's inert values. */
    s->dynamic = o.enable && o.use_dynamic_loss_scaling;
    s->init_loss_scaling = o.enable ? o.init_loss_scaling : 1.0;
    s->incr_ratio = o.incr_ratio;
    s->decr_ratio = o.decr_ratio;
    s->incr_every = o.incr_every_n_steps;
    s->decr_every = o.decr_every_n_nan_or_inf;
    s->scale = (float)s->init_loss_scaling;
    st = keel_current_place(&s->place);
    if (st == KEEL_STATUS_OK)
        st = keel_place_name(s->place, s->device, sizeof(s->device));
    if (st == KEEL_STATUS_OK && s->enable)
        st = upload_scale(s);
    if (st != KEEL_STATUS_OK) {
        keel_grad_scaler_free(s);
        return st;
    }
    *out = s;
    return KEEL_STATUS_OK;
}

void keel_grad_scaler_free(keel_grad_scaler *s)
{
    if (!s)
        return;
    keel_tensor_free(s->scale_t);
    keel_tensor_free(s->found_inf);
    free(s);
}

/* Paddle's _optimizer_states[id(optimizer)]: INIT for one not seen since
 * the last update. */
static keel_status opt_state(keel_grad_scaler *s, const keel_optimizer *opt,
                             enum opt_state **out)
{
    for (int i = 0; i < s->nopts; i++)
        if (s->opts[i].opt == opt) {
            *out = &s->opts[i].state;
            return KEEL_STATUS_OK;
        }
    if (s->nopts == SCALER_MAX_OPTS)
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "GradScaler: more than %d optimizers between two "
                           "updates",
                           SCALER_MAX_OPTS);
    s->opts[s->nopts].opt = opt;
    s->opts[s->nopts].state = OPT_INIT;
    *out = &s->opts[s->nopts++].state;
    return KEEL_STATUS_OK;
}

static void reset_states(keel_grad_scaler *s)
{
    s->nopts = 0;
}

keel_status keel_grad_scaler_scale(keel_grad_scaler *s,
                                   const keel_tensor *loss, keel_tensor **out)
{
    if (!s || !loss || !out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "GradScaler.scale: NULL argument");
    *out = NULL;
    if (s->enable && s->dynamic && keel_amp_last_dtype() != KEEL_F16) {
        s->enable = false;
        s->dynamic = false;
        s->init_loss_scaling = 1.0;
        keel__log(KEEL_LOG_WARN,
                  "GradScaler: dynamic loss scaling is not recommended for "
                  "%s, so the GradScaler is disabled (as in Paddle)",
                  keel_dtype_name(keel_amp_last_dtype()));
    }
    if (!s->enable) {
        *out = keel_tensor_ref((keel_tensor *)loss);
        return KEEL_STATUS_OK;
    }
    return keel_multiply(loss, s->scale_t, out);
}

keel_status keel_grad_scaler_unscale(keel_grad_scaler *s, keel_optimizer *opt)
{
    enum opt_state *state;
    keel_status st = KEEL_STATUS_OK;
    bool no = false;
    int64_t one = 1;

    if (!s || !opt)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "GradScaler.unscale_: NULL argument");
    if (!s->enable)
        return KEEL_STATUS_OK;
    st = opt_state(s, opt, &state);
    if (st != KEEL_STATUS_OK)
        return st;
    if (*state == OPT_UNSCALED)
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "GradScaler: unscale_() has already been called "
                           "on this optimizer since the last update()");
    if (*state == OPT_STEPPED)
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "GradScaler: unscale_() is being called after "
                           "step()");
    keel_tensor_free(s->found_inf);
    s->found_inf = NULL;
    st = keel_tensor_from_host(&no, KEEL_BOOL, 1, &one, s->device,
                               &s->found_inf);
    keel_no_grad_begin();
    for (size_t i = 0; st == KEEL_STATUS_OK &&
                       i < keel__optimizer_num_params(opt);
         i++) {
        keel_tensor *g = keel_tensor_grad(keel__optimizer_param(opt, i));

        if (!g)
            continue;
        st = keel_check_finite_and_unscale(g, s->scale_t, s->found_inf);
        keel_tensor_free(g);
    }
    keel_no_grad_end();
    if (st != KEEL_STATUS_OK)
        return st;
    *state = OPT_UNSCALED;
    return KEEL_STATUS_OK;
}

/* Read the flag of the last unscale_ (the one sync of a step). */
static keel_status read_found(keel_grad_scaler *s)
{
    bool v = false;
    keel_status st;

    st = keel_tensor_to_host(s->found_inf, &v, sizeof(v));
    if (st == KEEL_STATUS_OK)
        s->found = v;
    return st;
}

static keel_status step_or_skip(keel_grad_scaler *s, keel_optimizer *opt)
{
    keel_status st = read_found(s);

    if (st != KEEL_STATUS_OK)
        return st;
    if (s->found) {
        s->cache_found_inf = true;
        return KEEL_STATUS_OK;
    }
    st = keel_optimizer_step(opt);
    s->cache_found_inf = false;
    return st;
}

keel_status keel_grad_scaler_step(keel_grad_scaler *s, keel_optimizer *opt)
{
    enum opt_state *state;
    keel_status st;

    if (!s || !opt)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "GradScaler.step: NULL argument");
    if (!s->enable)
        return keel_optimizer_step(opt);
    st = opt_state(s, opt, &state);
    if (st != KEEL_STATUS_OK)
        return st;
    if (*state == OPT_STEPPED)
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "GradScaler: step() has already been called "
                           "since the last update()");
    if (*state == OPT_INIT) {
        st = keel_grad_scaler_unscale(s, opt);
        if (st != KEEL_STATUS_OK)
            return st;
        st = opt_state(s, opt, &state);
        if (st != KEEL_STATUS_OK)
            return st;
    }
    st = step_or_skip(s, opt);
    if (st != KEEL_STATUS_OK)
        return st;
    *state = OPT_STEPPED;
    if (!s->dynamic)
        reset_states(s);
    return KEEL_STATUS_OK;
}

/* Paddle's AmpScaler._update, the scale kept in float32 arithmetic. */
static keel_status scale_update(keel_grad_scaler *s)
{
    float next = s->scale;

    if (s->cache_found_inf) {
        s->incr_count = 0;
        s->decr_count++;
        if (s->decr_count == s->decr_every) {
            next = s->scale * (float)s->decr_ratio;
            keel__log(KEEL_LOG_INFO,
                      "GradScaler: found inf or nan, current scale is: %g, "
                      "decrease to: %g*%g",
                      (double)s->scale, (double)s->scale, s->decr_ratio);
            s->decr_count = 0;
        }
    } else {
        s->decr_count = 0;
        s->incr_count++;
        if (s->incr_count == s->incr_every) {
            next = s->scale * (float)s->incr_ratio;
            s->incr_count = 0;
        }
    }
    if (next != s->scale) {
        s->scale = next;
        return upload_scale(s);
    }
    return KEEL_STATUS_OK;
}

keel_status keel_grad_scaler_update(keel_grad_scaler *s)
{
    keel_status st = KEEL_STATUS_OK;

    if (!s)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "GradScaler.update: s is NULL");
    if (!s->enable)
        return KEEL_STATUS_OK;
    if (s->dynamic) {
        st = scale_update(s);
        reset_states(s);
    }
    return st;
}

keel_status keel_grad_scaler_minimize(keel_grad_scaler *s, keel_optimizer *opt)
{
    enum opt_state *state;
    keel_status st;

    if (!s || !opt)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "GradScaler.minimize: NULL argument");
    if (!s->enable)
        return keel_optimizer_step(opt);
    st = opt_state(s, opt, &state);
    if (st != KEEL_STATUS_OK)
        return st;
    if (*state == OPT_INIT) {
        st = keel_grad_scaler_unscale(s, opt);
        if (st != KEEL_STATUS_OK)
            return st;
    }
    st = step_or_skip(s, opt);
    if (st == KEEL_STATUS_OK && s->dynamic)
        st = scale_update(s);
    reset_states(s);
    return st;
}

bool keel_grad_scaler_found_inf(const keel_grad_scaler *s)
{
    return s && s->cache_found_inf;
}

bool keel_grad_scaler_is_enabled(const keel_grad_scaler *s)
{
    return s && s->enable;
}

bool keel_grad_scaler_is_dynamic(const keel_grad_scaler *s)
{
    return s && s->dynamic;
}

double keel_grad_scaler_get_scale(const keel_grad_scaler *s)
{
    if (!s)
        return NAN;
    return s->enable ? (double)s->scale : s->init_loss_scaling;
}

int64_t keel_grad_scaler_incr_count(const keel_grad_scaler *s)
{
    return s ? s->incr_count : -1;
}

int64_t keel_grad_scaler_decr_count(const keel_grad_scaler *s)
{
    return s ? s->decr_count : -1;
}

/* ---- state dict --------------------------------------------------------------- */

static const char *key_of(char *buf, size_t n, const char *prefix,
                          const char *name)
{
    snprintf(buf, n, "%s%s", prefix ? prefix : "", name);
    return buf;
}

static keel_status put_value(keel_state_dict *sd, const char *prefix,
                             const char *name, const void *v, keel_dtype dt)
{
    char key[KEEL_STATE_DICT_NAME_MAX + 1];
    int64_t one = 1;
    keel_tensor *t = NULL;
    keel_status st;

    st = keel_tensor_from_host(v, dt, 1, &one, "cpu", &t);
    if (st == KEEL_STATUS_OK)
        st = keel_state_dict_set(sd, key_of(key, sizeof(key), prefix, name),
                                 t);
    keel_tensor_free(t);
    return st;
}

keel_status keel_grad_scaler_state_get(const keel_grad_scaler *s,
                                       const char *prefix, keel_state_dict *sd)
{
    keel_status st;
    bool dyn;

    if (!s || !sd)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "GradScaler.state_dict: NULL argument");
    if (!s->enable)
        return KEEL_STATUS_OK;
    dyn = s->dynamic;
    st = put_value(sd, prefix, "scale", &s->scale, KEEL_F32);
    if (!st)
        st = put_value(sd, prefix, "incr_ratio", &s->incr_ratio, KEEL_F64);
    if (!st)
        st = put_value(sd, prefix, "decr_ratio", &s->decr_ratio, KEEL_F64);
    if (!st)
        st = put_value(sd, prefix, "incr_every_n_steps", &s->incr_every,
                       KEEL_I64);
    if (!st)
        st = put_value(sd, prefix, "decr_every_n_nan_or_inf", &s->decr_every,
                       KEEL_I64);
    if (!st)
        st = put_value(sd, prefix, "incr_count", &s->incr_count, KEEL_I64);
    if (!st)
        st = put_value(sd, prefix, "decr_count", &s->decr_count, KEEL_I64);
    if (!st)
        st = put_value(sd, prefix, "use_dynamic_loss_scaling", &dyn,
                       KEEL_BOOL);
    return st;
}

static keel_status get_value(const keel_state_dict *sd, const char *prefix,
                             const char *name, double *v)
{
    char key[KEEL_STATE_DICT_NAME_MAX + 1];
    keel_tensor *t = keel_state_dict_get(sd, key_of(key, sizeof(key), prefix,
                                                    name));

    if (!t)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "GradScaler.load_state_dict: missing '%s'", key);
    if (keel_tensor_numel(t) != 1)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "GradScaler.load_state_dict: '%s' must hold one "
                           "value",
                           key);
    return keel_tensor_item(t, 0, v);
}

keel_status keel_grad_scaler_state_set(keel_grad_scaler *s,
                                       const char *prefix,
                                       const keel_state_dict *sd)
{
    static const char *const names[8] = {
        "scale",      "incr_ratio", "decr_ratio",
        "incr_every_n_steps", "decr_every_n_nan_or_inf", "incr_count",
        "decr_count", "use_dynamic_loss_scaling"};
    double v[8];
    keel_status st;

    if (!s || !sd)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "GradScaler.load_state_dict: NULL argument");
    if (!s->enable)
        return KEEL_STATUS_OK;
    if (keel_state_dict_count(sd) == 0)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "GradScaler.load_state_dict: the state dict is "
                           "empty, possibly because it was saved from a "
                           "disabled GradScaler");
    for (int i = 0; i < 8; i++) {
        st = get_value(sd, prefix, names[i], &v[i]);
        if (st != KEEL_STATUS_OK)
            return st;
    }
    if (!(v[0] > 0 && isfinite(v[0])) || !(v[1] > 1.0) ||
        !(v[2] > 0 && v[2] < 1.0) || v[3] < 1 || v[4] < 1 || v[5] < 0 ||
        v[6] < 0 || v[3] != floor(v[3]) || v[4] != floor(v[4]) ||
        v[5] != floor(v[5]) || v[6] != floor(v[6]))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "GradScaler.load_state_dict: values out of range "
                           "(scale %g, ratios %g/%g, steps %g/%g, counts "
                           "%g/%g)",
                           v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
    {
        float old = s->scale;

        s->scale = (float)v[0];
        st = upload_scale(s);
        if (st != KEEL_STATUS_OK) {
            s->scale = old;
            return st;
        }
    }
    s->init_loss_scaling = v[0];
    s->incr_ratio = v[1];
    s->decr_ratio = v[2];
    s->incr_every = (int64_t)v[3];
    s->decr_every = (int64_t)v[4];
    s->incr_count = (int64_t)v[5];
    s->decr_count = (int64_t)v[6];
    s->dynamic = v[7] != 0;
    return KEEL_STATUS_OK;
}
