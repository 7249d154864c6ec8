/*
 * keel dist layer: Fleet's collective strategy (keel/dist.h).
 *
 * keel_fleet_init keeps a deep copy of the strategy. The distributed
 * optimizer pairs the caller's optimizer with a GradScaler when the
 * strategy asks for amp. The distributed model applies the rest to a
 * layer: decorate at O2, a forward wrapper (nn_internal.h) on each
 * recompute checkpoint that routes one-input calls through keel_recompute,
 * and DataParallel with the strategy's bucket sizes. Forward opens the
 * strategy's auto_cast scope around the model's call; backward scales the
 * loss and runs DataParallel's backward. Gradients averaged by
 * DataParallel carry any inf/NaN of one rank to every rank, so every
 * rank's scaler skips the same steps.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <keel/optim.h>

#include "dist/dist_internal.h"

/* The strategy kept by keel_fleet_init, with its own copies of the name
 * lists. */
struct fleet_strategy {
    keel_distributed_strategy s;
    char **white, **black, **ckpt;
};

static struct {
    pthread_mutex_t lock;
    bool set;
    struct fleet_strategy st;
} fleet_g = {PTHREAD_MUTEX_INITIALIZER, false, {{0}, NULL, NULL, NULL}};

struct keel_fleet_optimizer {
    keel_optimizer *opt;
    keel_grad_scaler *scaler; /* NULL without amp */
};

struct keel_fleet_model {
    keel_layer *model;
    keel_fleet_optimizer *fo;
    keel_data_parallel *dp;
    keel_layer **wrapped; /* the recompute checkpoints */
    int nwrapped;
    struct fleet_strategy st;
};

void keel_distributed_strategy_init(keel_distributed_strategy *s)
{
    if (!s)
        return;
    memset(s, 0, sizeof(*s));
    s->struct_size = sizeof(*s);
    s->amp_level = KEEL_AMP_O1;
    s->amp_dtype = KEEL_F16;
    s->init_loss_scaling = 32768.0;
    s->incr_every_n_steps = 1000;
    s->decr_every_n_nan_or_inf = 2;
    s->incr_ratio = 2.0;
    s->decr_ratio = 0.8;
    s->use_dynamic_loss_scaling = true;
    s->fuse_grad_size_in_mb = 32.0;
    s->last_comm_group_size_mb = 1.0;
}

static void names_free(char **v, int n)
{
    for (int i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

static void strategy_free(struct fleet_strategy *f)
{
    names_free(f->white, f->s.num_custom_white);
    names_free(f->black, f->s.num_custom_black);
    names_free(f->ckpt, f->s.num_recompute_checkpoints);
    memset(f, 0, sizeof(*f));
}

static keel_status names_copy(const char *const *src, int n,
                              const char *field, char ***out)
{
    char **v;

    *out = NULL;
    if (n < 0 || n > 65536 || (n > 0 && !src))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_fleet_init: strategy.%s: %d names%s", field,
                           n, n > 0 ? " but the list is NULL" : "");
    if (!n)
        return KEEL_STATUS_OK;
    v = calloc((size_t)n, sizeof(*v));
    if (!v)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_fleet_init: out of host memory");
    for (int i = 0; i < n; i++) {
        if (!src[i] || !src[i][0]) {
            names_free(v, n);
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "keel_fleet_init: strategy.%s[%d] is %s",
                               field, i, src[i] ? "empty" : "NULL");
        }
        v[i] = strdup(src[i]);
        if (!v[i]) {
            names_free(v, n);
            return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                               "keel_fleet_init: out of host memory");
        }
    }
    *out = v;
    return KEEL_STATUS_OK;
}

/* A deep copy of src in *dst (which is left empty on failure). */
static keel_status strategy_copy(const struct fleet_strategy *src,
                                 struct fleet_strategy *dst)
{
    const keel_distributed_strategy *s = &src->s;
    keel_status st;

    memset(dst, 0, sizeof(*dst));
    dst->s = *s;
    st = names_copy((const char *const *)src->white, s->num_custom_white,
                    "custom_white_list", &dst->white);
    if (!st)
        st = names_copy((const char *const *)src->black, s->num_custom_black,
                        "custom_black_list", &dst->black);
    if (!st)
        st = names_copy((const char *const *)src->ckpt,
                        s->num_recompute_checkpoints,
                        "recompute_checkpoints", &dst->ckpt);
    if (st) {
        names_free(dst->white, dst->white ? s->num_custom_white : 0);
        names_free(dst->black, dst->black ? s->num_custom_black : 0);
        memset(dst, 0, sizeof(*dst));
        return st;
    }
    dst->s.custom_white_list = (const char *const *)dst->white;
    dst->s.custom_black_list = (const char *const *)dst->black;
    dst->s.recompute_checkpoints = (const char *const *)dst->ckpt;
    return KEEL_STATUS_OK;
}

static keel_status strategy_check(const keel_distributed_strategy *s)
{
    static const char what[] = "keel_fleet_init";

    if (s->amp && s->amp_level != KEEL_AMP_O1 && s->amp_level != KEEL_AMP_O2)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: strategy.amp_level must be O1 or O2 (O2 is "
                           "amp_configs use_pure_fp16)", what);
    if (s->amp && s->amp_dtype != KEEL_F16 && s->amp_dtype != KEEL_BF16)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: strategy.amp_dtype must be float16 or "
                           "bfloat16", what);
    if (!(s->fuse_grad_size_in_mb > 0 && s->fuse_grad_size_in_mb <= 1048576) ||
        !(s->last_comm_group_size_mb > 0 &&
          s->last_comm_group_size_mb <= 1048576))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: strategy.fuse_grad_size_in_mb %g and "
                           "last_comm_group_size_mb %g must be in (0, "
                           "1048576]", what, s->fuse_grad_size_in_mb,
                           s->last_comm_group_size_mb);
    if (s->recompute && s->num_recompute_checkpoints < 1)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: strategy.recompute needs "
                           "recompute_checkpoints (the sublayers to "
                           "recompute)", what);
    return KEEL_STATUS_OK;
}

keel_status keel_fleet_init(bool is_collective,
                            const keel_distributed_strategy *strategy)
{
    static const char what[] = "keel_fleet_init";
    keel_distributed_strategy s;
    struct fleet_strategy in, copy;
    keel_status st;

    if (!is_collective)
        return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                           "%s: is_collective = false (parameter-server "
                           "training) is not provided; use collective "
                           "training", what);
    keel_distributed_strategy_init(&s);
    if (strategy) {
        if (strategy->struct_size <
                offsetof(keel_distributed_strategy, find_unused_parameters) ||
            strategy->struct_size > 4096)
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "%s: strategy struct_size %u is wrong (use "
                               "keel_distributed_strategy_init)", what,
                               strategy->struct_size);
        memcpy(&s, strategy, strategy->struct_size < sizeof(s)
                                 ? strategy->struct_size
                                 : sizeof(s));
        s.struct_size = sizeof(s);
    }
    st = strategy_check(&s);
    if (st)
        return st;
    in.s = s;
    in.white = (char **)s.custom_white_list;
    in.black = (char **)s.custom_black_list;
    in.ckpt = (char **)(s.recompute ? s.recompute_checkpoints : NULL);
    if (!s.recompute)
        in.s.num_recompute_checkpoints = 0;
    if (!s.amp)
        in.s.num_custom_white = in.s.num_custom_black = 0;
    st = strategy_copy(&in, &copy);
    if (st)
        return st;
    st = keel_dist_init();
    if (st) {
        strategy_free(&copy);
        return st;
    }
    pthread_mutex_lock(&fleet_g.lock);
    if (fleet_g.set)
        strategy_free(&fleet_g.st);
    fleet_g.st = copy;
    fleet_g.set = true;
    pthread_mutex_unlock(&fleet_g.lock);
    return KEEL_STATUS_OK;
}

void keel__fleet_reset(void)
{
    pthread_mutex_lock(&fleet_g.lock);
    if (fleet_g.set)
        strategy_free(&fleet_g.st);
    fleet_g.set = false;
    pthread_mutex_unlock(&fleet_g.lock);
}

/* A copy of the strategy keel_fleet_init kept. */
static keel_status current_strategy(const char *what,
                                    struct fleet_strategy *out)
{
    keel_status st;

    pthread_mutex_lock(&fleet_g.lock);
    if (!fleet_g.set)
        st = keel__error(KEEL_STATUS_INVALID_STATE,
                         "%s: call keel_fleet_init first", what);
    else
        st = strategy_copy(&fleet_g.st, out);
    pthread_mutex_unlock(&fleet_g.lock);
    return st;
}

/* ---- the optimizer ------------------------------------------------------- */

keel_status keel_fleet_distributed_optimizer(keel_optimizer *opt,
                                             keel_fleet_optimizer **out)
{
    static const char what[] = "keel_fleet_distributed_optimizer";
    struct fleet_strategy fs;
    keel_fleet_optimizer *fo;
    keel_status st;

    if (!out || !opt)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: %s is NULL",
                           what, out ? "opt" : "out");
    *out = NULL;
    st = current_strategy(what, &fs);
    if (st)
        return st;
    fo = calloc(1, sizeof(*fo));
    if (!fo) {
        strategy_free(&fs);
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "%s: out of host memory", what);
    }
    fo->opt = opt;
    if (fs.s.amp) {
        keel_grad_scaler_options o = keel_grad_scaler_default_options();

        o.enable = true;
        o.init_loss_scaling = fs.s.init_loss_scaling;
        o.incr_ratio = fs.s.incr_ratio;
        o.decr_ratio = fs.s.decr_ratio;
        o.incr_every_n_steps = fs.s.incr_every_n_steps;
        o.decr_every_n_nan_or_inf = fs.s.decr_every_n_nan_or_inf;
        o.use_dynamic_loss_scaling = fs.s.use_dynamic_loss_scaling;
        st = keel_grad_scaler_create(&o, &fo->scaler);
    }
    strategy_free(&fs);
    if (st) {
        free(fo);
        return st;
    }
    *out = fo;
    return KEEL_STATUS_OK;
}

void keel_fleet_optimizer_free(keel_fleet_optimizer *fo)
{
    if (!fo)
        return;
    keel_grad_scaler_free(fo->scaler);
    free(fo);
}

keel_status keel_fleet_optimizer_step(keel_fleet_optimizer *fo)
{
    keel_status st;

    if (!fo)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_fleet_optimizer_step: fo is NULL");
    if (!fo->scaler)
        return keel_optimizer_step(fo->opt);
    st = keel_grad_scaler_step(fo->scaler, fo->opt);
    return st ? st : keel_grad_scaler_update(fo->scaler);
}

keel_status keel_fleet_optimizer_clear_grad(keel_fleet_optimizer *fo)
{
    if (!fo)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_fleet_optimizer_clear_grad: fo is NULL");
    return keel_optimizer_clear_grad(fo->opt);
}

keel_grad_scaler *keel_fleet_optimizer_scaler(const keel_fleet_optimizer *fo)
{
    return fo ? fo->scaler : NULL;
}

/* ---- the model ----------------------------------------------------------- */

static keel_status rc_wrap(keel_layer *layer, keel_tensor *const *inputs,
                           int num_inputs, keel_tensor **out, void *ctx)
{
    (void)ctx;
    if (num_inputs == 1)
        return keel_recompute(layer, inputs[0], out);
    return keel__layer_forward_direct(layer, inputs, num_inputs, out);
}

/* The sublayer of `model` at a dotted path, or NULL. */
static keel_layer *sublayer_at(keel_layer *model, const char *path)
{
    char part[256];
    keel_layer *l = model;

    while (l && *path) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path);

        if (n == 0 || n >= sizeof(part))
            return NULL;
        memcpy(part, path, n);
        part[n] = '\0';
        l = keel_layer_sublayer(l, part);
        path += n + (dot ? 1 : 0);
        if (dot && !*path)
            return NULL; /* a trailing dot */
    }
    return l;
}

static void unwrap(keel_fleet_model *fm)
{
    for (int i = 0; i < fm->nwrapped; i++)
        keel__layer_set_wrap(fm->wrapped[i], NULL, NULL);
    fm->nwrapped = 0;
}

static keel_status wrap_checkpoints(keel_fleet_model *fm)
{
    static const char what[] = "keel_fleet_distributed_model";
    int n = fm->st.s.num_recompute_checkpoints;

    if (!n)
        return KEEL_STATUS_OK;
    fm->wrapped = calloc((size_t)n, sizeof(*fm->wrapped));
    if (!fm->wrapped)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "%s: out of host memory", what);
    for (int i = 0; i < n; i++) {
        const char *name = fm->st.s.recompute_checkpoints[i];
        keel_layer *l = sublayer_at(fm->model, name);
        keel_status st;

        if (!l || l == fm->model)
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "%s: recompute checkpoint \"%s\" names no "
                               "sublayer of the model", what, name);
        for (int j = 0; j < fm->nwrapped; j++)
            if (fm->wrapped[j] == l)
                return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                                   "%s: recompute checkpoint \"%s\" is "
                                   "listed twice", what, name);
        st = keel__layer_set_wrap(l, rc_wrap, NULL);
        if (st)
            return st;
        fm->wrapped[fm->nwrapped++] = l;
    }
    return KEEL_STATUS_OK;
}

void keel_fleet_model_free(keel_fleet_model *fm)
{
    if (!fm)
        return;
    keel_data_parallel_free(fm->dp);
    unwrap(fm);
    free(fm->wrapped);
    strategy_free(&fm->st);
    free(fm);
}

keel_status keel_fleet_distributed_model(keel_layer *model,
                                         keel_fleet_optimizer *fo,
                                         keel_fleet_model **out)
{
    static const char what[] = "keel_fleet_distributed_model";
    keel_data_parallel_config dc;
    keel_fleet_model *fm;
    keel_status st;

    if (!out || !model)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: %s is NULL",
                           what, out ? "model" : "out");
    *out = NULL;
    fm = calloc(1, sizeof(*fm));
    if (!fm)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "%s: out of host memory", what);
    fm->model = model;
    fm->fo = fo;
    st = current_strategy(what, &fm->st);
    if (st) {
        free(fm);
        return st;
    }
    st = wrap_checkpoints(fm);
    if (!st && fm->st.s.amp && fm->st.s.amp_level == KEEL_AMP_O2) {
        keel_optimizer *opt = fo ? fo->opt : NULL;

        st = keel_amp_decorate(&model, 1, opt ? &opt : NULL, opt ? 1 : 0,
                               KEEL_AMP_O2, fm->st.s.amp_dtype, -1);
    }
    if (!st) {
        keel_data_parallel_config_init(&dc);
        dc.comm_buffer_size_mb = fm->st.s.fuse_grad_size_in_mb;
        dc.last_comm_buffer_size_mb = fm->st.s.last_comm_group_size_mb;
        dc.find_unused_parameters = fm->st.s.find_unused_parameters;
        st = keel_data_parallel_create(model, &dc, &fm->dp);
    }
    if (st) {
        keel_fleet_model_free(fm);
        return st;
    }
    *out = fm;
    return KEEL_STATUS_OK;
}

keel_status keel_fleet_model_forward(keel_fleet_model *fm,
                                     keel_tensor *const *inputs,
                                     int num_inputs, keel_tensor **out)
{
    keel_amp_options o;
    keel_status st;

    if (!fm)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_fleet_model_forward: fm is NULL");
    if (!fm->st.s.amp)
        return keel_layer_forward(fm->model, inputs, num_inputs, out);
    o = keel_amp_default_options();
    o.enable = true;
    o.level = fm->st.s.amp_level;
    o.dtype = fm->st.s.amp_dtype;
    o.custom_white_list = fm->st.s.custom_white_list;
    o.num_custom_white = fm->st.s.num_custom_white;
    o.custom_black_list = fm->st.s.custom_black_list;
    o.num_custom_black = fm->st.s.num_custom_black;
    st = keel_amp_begin(&o);
    if (st)
        return st;
    st = keel_layer_forward(fm->model, inputs, num_inputs, out);
    keel_amp_end();
    return st;
}

keel_status keel_fleet_model_backward(keel_fleet_model *fm, keel_tensor *loss)
{
    keel_tensor *scaled = NULL;
    keel_status st;

    if (!fm || !loss)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_fleet_model_backward: %s is NULL",
                           fm ? "loss" : "fm");
    if (!fm->fo || !fm->fo->scaler)
        return keel_data_parallel_backward(fm->dp, loss);
    st = keel_grad_scaler_scale(fm->fo->scaler, loss, &scaled);
    if (!st)
        st = keel_data_parallel_backward(fm->dp, scaled);
    keel_tensor_free(scaled);
    return st;
}

keel_data_parallel *keel_fleet_model_data_parallel(const keel_fleet_model *fm)
{
    return fm ? fm->dp : NULL;
}
