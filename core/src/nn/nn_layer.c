/*
 * The layer framework: named parameters, buffers and sublayers,
 * train/eval, state dicts, Sequential and LayerList, initializers.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/autograd.h>
#include <keel/nn.h>

#include "nn/nn_internal.h"

struct nn_entry {
    char *name;
    keel_tensor *t;   /* parameters and buffers */
    keel_layer *sub;  /* sublayers */
};

struct nn_table {
    struct nn_entry *e;
    int n, cap;
};

struct keel_layer {
    const keel_layer_ops *ops;
    void *priv;
    bool training;
    bool keep_fp32; /* amp decorate leaves its own tensors in float32 */
    struct nn_table params, bufs, subs;
    keel__layer_wrap_fn wrap; /* NULL: none (nn_internal.h) */
    void *wrap_ctx;
};

static void table_free(struct nn_table *t)
{
    for (int i = 0; i < t->n; i++) {
        free(t->e[i].name);
        keel_tensor_free(t->e[i].t);
        keel_layer_free(t->e[i].sub);
    }
    free(t->e);
    t->e = NULL;
    t->n = t->cap = 0;
}

static struct nn_entry *table_find(const struct nn_table *t, const char *name)
{
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->e[i].name, name) == 0)
            return &t->e[i];
    return NULL;
}

static keel_status table_add(keel_layer *l, struct nn_table *t,
                             const char *name, keel_tensor *ten,
                             keel_layer *sub)
{
    if (!name || !*name || strchr(name, '.'))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: bad name '%s'", keel_layer_type(l),
                           name ? name : "(null)");
    if (table_find(&l->params, name) || table_find(&l->bufs, name) ||
        table_find(&l->subs, name))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: name '%s' already registered",
                           keel_layer_type(l), name);
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 4;
        struct nn_entry *e = realloc(t->e, (size_t)cap * sizeof(*e));

        if (!e)
            return keel__error(KEEL_STATUS_OUT_OF_MEMORY, "out of memory");
        t->e = e;
        t->cap = cap;
    }
    char *copy = strdup(name);

    if (!copy)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY, "out of memory");
    t->e[t->n].name = copy;
    t->e[t->n].t = ten ? keel_tensor_ref(ten) : NULL;
    t->e[t->n].sub = sub;
    t->n++;
    return KEEL_STATUS_OK;
}

keel_status keel_layer_create(const keel_layer_ops *ops, void *priv,
                              keel_layer **out)
{
    if (!out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    if (!ops)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "ops is NULL");
    keel_layer *l = calloc(1, sizeof(*l));

    if (!l)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY, "out of memory");
    l->ops = ops;
    l->priv = priv;
    l->training = true;
    *out = l;
    return KEEL_STATUS_OK;
}

void *keel_layer_priv(const keel_layer *layer)
{
    return layer ? layer->priv : NULL;
}

const char *keel_layer_type(const keel_layer *layer)
{
    return layer && layer->ops->type ? layer->ops->type : "Layer";
}

void keel_layer_free(keel_layer *layer)
{
    if (!layer)
        return;
    table_free(&layer->params);
    table_free(&layer->bufs);
    table_free(&layer->subs);
    if (layer->ops->destroy)
        layer->ops->destroy(layer->priv);
    free(layer);
}

keel_status keel_layer_add_parameter(keel_layer *layer, const char *name,
                                     keel_tensor *param)
{
    if (!layer || !param)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "add_parameter: NULL argument");
    keel_status st = keel_tensor_set_stop_gradient(param, false);

    if (st != KEEL_STATUS_OK)
        return st;
    return table_add(layer, &layer->params, name, param, NULL);
}

keel_status keel_layer_add_buffer(keel_layer *layer, const char *name,
                                  keel_tensor *buffer)
{
    if (!layer || !buffer)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "add_buffer: NULL argument");
    return table_add(layer, &layer->bufs, name, buffer, NULL);
}

keel_status keel_layer_add_sublayer(keel_layer *layer, const char *name,
                                    keel_layer *sub)
{
    if (!layer || !sub) {
        keel_layer_free(sub);
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "add_sublayer: NULL argument");
    }
    keel_status st = table_add(layer, &layer->subs, name, NULL, sub);

    if (st != KEEL_STATUS_OK)
        keel_layer_free(sub);
    else
        sub->training = layer->training;
    return st;
}

keel_tensor *keel_layer_parameter(const keel_layer *layer, const char *name)
{
    struct nn_entry *e = layer && name ? table_find(&layer->params, name)
                                       : NULL;
    return e ? e->t : NULL;
}

keel_tensor *keel_layer_buffer(const keel_layer *layer, const char *name)
{
    struct nn_entry *e = layer && name ? table_find(&layer->bufs, name)
                                       : NULL;
    return e ? e->t : NULL;
}

keel_layer *keel_layer_sublayer(const keel_layer *layer, const char *name)
{
    struct nn_entry *e = layer && name ? table_find(&layer->subs, name)
                                       : NULL;
    return e ? e->sub : NULL;
}

int keel_layer_num_sublayers(const keel_layer *layer)
{
    return layer ? layer->subs.n : 0;
}

keel_layer *keel_layer_sublayer_at(const keel_layer *layer, int i)
{
    if (!layer || i < 0 || i >= layer->subs.n)
        return NULL;
    return layer->subs.e[i].sub;
}

static keel_status forward_checks(keel_layer *layer,
                                  keel_tensor *const *inputs, int num_inputs,
                                  keel_tensor **out)
{
    if (!out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    if (!layer || (num_inputs > 0 && !inputs))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "layer_forward: NULL argument");
    if (!layer->ops->forward)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s is not callable", keel_layer_type(layer));
    for (int i = 0; i < num_inputs; i++)
        if (!inputs[i])
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "%s: input %d is NULL",
                               keel_layer_type(layer), i);
    return KEEL_STATUS_OK;
}

keel_status keel__layer_forward_direct(keel_layer *layer,
                                       keel_tensor *const *inputs,
                                       int num_inputs, keel_tensor **out)
{
    keel_status st = forward_checks(layer, inputs, num_inputs, out);

    return st ? st : layer->ops->forward(layer, inputs, num_inputs, out);
}

keel_status keel_layer_forward(keel_layer *layer, keel_tensor *const *inputs,
                               int num_inputs, keel_tensor **out)
{
    keel_status st = forward_checks(layer, inputs, num_inputs, out);

    if (st)
        return st;
    if (layer->wrap)
        return layer->wrap(layer, inputs, num_inputs, out, layer->wrap_ctx);
    return layer->ops->forward(layer, inputs, num_inputs, out);
}

keel_status keel__layer_set_wrap(keel_layer *layer, keel__layer_wrap_fn fn,
                                 void *ctx)
{
    if (fn && layer->wrap && (layer->wrap != fn || layer->wrap_ctx != ctx))
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "%s: the layer's forward is already wrapped",
                           keel_layer_type(layer));
    layer->wrap = fn;
    layer->wrap_ctx = fn ? ctx : NULL;
    return KEEL_STATUS_OK;
}

keel_status keel_layer_call(keel_layer *layer, keel_tensor *x,
                            keel_tensor **out)
{
    return keel_layer_forward(layer, &x, 1, out);
}

keel_status keel_layer_call2(keel_layer *layer, keel_tensor *x,
                             keel_tensor *y, keel_tensor **out)
{
    keel_tensor *in[2] = {x, y};

    return keel_layer_forward(layer, in, 2, out);
}

static void set_mode(keel_layer *l, bool training)
{
    if (!l)
        return;
    l->training = training;
    for (int i = 0; i < l->subs.n; i++)
        set_mode(l->subs.e[i].sub, training);
}

void keel_layer_train(keel_layer *layer)
{
    set_mode(layer, true);
}

void keel_layer_eval(keel_layer *layer)
{
    set_mode(layer, false);
}

bool keel_layer_is_training(const keel_layer *layer)
{
    return layer ? layer->training : false;
}

static keel_status collect(const keel_layer *l, const char *prefix,
                           bool buffers, keel_state_dict *sd)
{
    keel_status st = KEEL_STATUS_OK;
    char name[KEEL_STATE_DICT_NAME_MAX + 1];

    for (int pass = 0; pass < (buffers ? 2 : 1); pass++) {
        const struct nn_table *t = pass ? &l->bufs : &l->params;

        for (int i = 0; i < t->n; i++) {
            snprintf(name, sizeof(name), "%s%s", prefix, t->e[i].name);
            st = keel_state_dict_set(sd, name, t->e[i].t);
            if (st != KEEL_STATUS_OK)
                return st;
        }
    }
    for (int i = 0; i < l->subs.n; i++) {
        int n = snprintf(name, sizeof(name), "%s%s.", prefix,
                         l->subs.e[i].name);
        if (n < 0 || (size_t)n >= sizeof(name))
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "layer names nest too deep");
        char *p = strdup(name);

        if (!p)
            return keel__error(KEEL_STATUS_OUT_OF_MEMORY, "out of memory");
        st = collect(l->subs.e[i].sub, p, buffers, sd);
        free(p);
        if (st != KEEL_STATUS_OK)
            return st;
    }
    return st;
}

static keel_status gather(const keel_layer *layer, bool buffers,
                          keel_state_dict **out)
{
    if (!out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    if (!layer)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "layer is NULL");
    keel_state_dict *sd = NULL;
    keel_status st = keel_state_dict_create(&sd);

    if (st != KEEL_STATUS_OK)
        return st;
    st = collect(layer, "", buffers, sd);
    if (st != KEEL_STATUS_OK) {
        keel_state_dict_free(sd);
        return st;
    }
    *out = sd;
    return KEEL_STATUS_OK;
}

keel_status keel_layer_parameters(const keel_layer *layer,
                                  keel_state_dict **out)
{
    return gather(layer, false, out);
}

int64_t keel_layer_num_parameters(const keel_layer *layer)
{
    if (!layer)
        return 0;
    int64_t n = layer->params.n;

    for (int i = 0; i < layer->subs.n; i++)
        n += keel_layer_num_parameters(layer->subs.e[i].sub);
    return n;
}

keel_status keel_layer_state_dict(const keel_layer *layer,
                                  keel_state_dict **out)
{
    return gather(layer, true, out);
}

keel_status keel_layer_set_state_dict(keel_layer *layer,
                                      const keel_state_dict *sd, bool strict)
{
    if (!sd)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "sd is NULL");
    keel_state_dict *own = NULL;
    keel_status st = gather(layer, true, &own);

    if (st != KEEL_STATUS_OK)
        return st;
    keel_no_grad_begin();
    st = keel_state_dict_load_into(own, sd, strict);
    keel_no_grad_end();
    keel_state_dict_free(own);
    return st;
}

static keel_status clear_gradients(keel_layer *layer, bool set_to_zero)
{
    keel_status st;

    for (int i = 0; i < layer->params.n; i++) {
        keel_tensor *p = layer->params.e[i].t;

        st = set_to_zero ? keel_tensor_clear_grad(p)
                         : keel_tensor_set_grad(p, NULL);
        if (st != KEEL_STATUS_OK)
            return st;
    }
    for (int i = 0; i < layer->subs.n; i++) {
        st = clear_gradients(layer->subs.e[i].sub, set_to_zero);
        if (st != KEEL_STATUS_OK)
            return st;
    }
    return KEEL_STATUS_OK;
}

keel_status keel_layer_clear_gradients_ex(keel_layer *layer, bool set_to_zero)
{
    if (!layer)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_layer_clear_gradients: layer is NULL");
    return clear_gradients(layer, set_to_zero);
}

keel_status keel_layer_clear_gradients(keel_layer *layer)
{
    return keel_layer_clear_gradients_ex(layer, true);
}

/* ---- containers --------------------------------------------------------- */

static keel_status sequential_forward(keel_layer *l, keel_tensor *const *in,
                                      int nin, keel_tensor **out)
{
    keel_tensor *cur = NULL;
    keel_status st;

    if (l->subs.n == 0) {
        if (nin != 1)
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "Sequential: empty, needs one input");
        *out = keel_tensor_ref(in[0]);
        return KEEL_STATUS_OK;
    }
    st = keel_layer_forward(l->subs.e[0].sub, in, nin, &cur);
    for (int i = 1; st == KEEL_STATUS_OK && i < l->subs.n; i++) {
        keel_tensor *next = NULL;

        st = keel_layer_forward(l->subs.e[i].sub, &cur, 1, &next);
        keel_tensor_free(cur);
        cur = next;
    }
    if (st != KEEL_STATUS_OK) {
        keel_tensor_free(cur);
        return st;
    }
    *out = cur;
    return KEEL_STATUS_OK;
}

static const keel_layer_ops sequential_ops = {"Sequential",
                                              sequential_forward, NULL};
static const keel_layer_ops layer_list_ops = {"LayerList", NULL, NULL};

keel_status keel_layer_list_append(keel_layer *list, keel_layer *sub)
{
    if (!list || (list->ops != &sequential_ops &&
                  list->ops != &layer_list_ops)) {
        keel_layer_free(sub);
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "append: not a Sequential or LayerList");
    }
    char name[24];

    snprintf(name, sizeof(name), "%d", list->subs.n);
    return keel_layer_add_sublayer(list, name, sub);
}

keel_status keel_sequential_create(keel_layer *const *layers, int n,
                                   keel_layer **out)
{
    keel_layer *l = NULL;
    keel_status st = KEEL_STATUS_OK;
    int i = 0;

    if (n < 0 || (n > 0 && !layers)) {
        st = keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                         "Sequential: bad layer array");
        n = 0;
        goto fail;
    }
    st = keel_layer_create(&sequential_ops, NULL, &l);
    if (st != KEEL_STATUS_OK)
        goto fail;
    for (; i < n; i++) {
        st = keel_layer_list_append(l, layers[i]);
        if (st != KEEL_STATUS_OK) {
            i++;
            goto fail;
        }
    }
    *out = l;
    return KEEL_STATUS_OK;
fail:
    for (; i < n; i++)
        keel_layer_free(layers[i]);
    keel_layer_free(l);
    return st;
}

keel_status keel_layer_list_create(keel_layer **out)
{
    return keel_layer_create(&layer_list_ops, NULL, out);
}

/* ---- initializers ------------------------------------------------------- */

static void fans(int ndim, const int64_t *shape, double *fan_in,
                 double *fan_out)
{
    double rf = 1;

    for (int d = 2; d < ndim; d++)
        rf *= (double)shape[d];
    if (ndim < 2) {
        *fan_in = *fan_out = ndim == 1 ? (double)shape[0] : 1;
    } else if (ndim == 2) {
        *fan_in = (double)shape[0];
        *fan_out = (double)shape[1];
    } else {
        *fan_in = (double)shape[1] * rf;
        *fan_out = (double)shape[0] * rf;
    }
}

keel_status keel_init_param(int ndim, const int64_t *shape,
                            const keel_param_attr *attr, keel_tensor **out)
{
    double fi, fo, lim;
    keel_dtype f32 = KEEL_F32;

    if (!attr || !out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "init_param: NULL argument");
    *out = NULL;
    fans(ndim, shape, &fi, &fo);
    switch (attr->kind) {
    case KEEL_INIT_CONSTANT:
        return keel_full(ndim, shape, f32, attr->a, NULL, out);
    case KEEL_INIT_UNIFORM:
        return keel_uniform(ndim, shape, f32, attr->a, attr->b, NULL, out);
    case KEEL_INIT_NORMAL:
        return keel_normal(ndim, shape, f32, attr->a, attr->b, NULL, out);
    case KEEL_INIT_XAVIER_UNIFORM:
        lim = sqrt(6.0 / (fi + fo));
        return keel_uniform(ndim, shape, f32, -lim, lim, NULL, out);
    case KEEL_INIT_XAVIER_NORMAL:
        return keel_normal(ndim, shape, f32, 0, sqrt(2.0 / (fi + fo)), NULL,
                           out);
    case KEEL_INIT_KAIMING_NORMAL:
        return keel_normal(ndim, shape, f32, 0, sqrt(2.0 / fi), NULL, out);
    default:
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "init_param: no initializer (kind %d)",
                           (int)attr->kind);
    }
}

/* ---- amp decorate (nn_internal.h) ----------------------------------------- */

keel_status keel_layer_set_keep_fp32(keel_layer *layer, bool keep)
{
    if (!layer)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_layer_set_keep_fp32: layer is NULL");
    layer->keep_fp32 = keep;
    return KEEL_STATUS_OK;
}

bool keel__layer_keep_fp32(const keel_layer *layer)
{
    return layer->keep_fp32;
}

int keel__layer_num_own(const keel_layer *layer)
{
    return layer->params.n + layer->bufs.n;
}

keel_tensor *keel__layer_own_at(const keel_layer *layer, int i)
{
    if (i < layer->params.n)
        return layer->params.e[i].t;
    return layer->bufs.e[i - layer->params.n].t;
}
