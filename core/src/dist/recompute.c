/*
 * keel dist layer: recompute (activation checkpointing; Paddle's
 * paddle.distributed.fleet.utils.recompute and the `recompute` strategy).
 *
 * keel_recompute runs a layer's forward under no_grad, so none of its
 * intermediate tensors are kept for backward, and makes the output
 * differentiable with one custom node (keel_autograd_attach) whose inputs
 * are the layer's input and trainable parameters. Its backward runs the
 * forward again from the kept input, with recording on and the random
 * generator set back to where the first forward found it (so dropout
 * draws the same mask), then differentiates that graph with keel_grad
 * for the input and every parameter; the engine adds the parameters'
 * gradients to their .grad as for any other node.
 *
 * Inside auto_cast the innermost scope is saved with the node, and the
 * second forward runs inside an equal scope with the AMP step on (backward
 * passes otherwise pause it), so it casts exactly as the first did.
 */
#include <stdlib.h>

#include "amp/amp_internal.h"
#include "dist/dist_internal.h"

struct rc_ctx {
    keel_layer *layer;  /* borrowed: must outlive the backward */
    keel_tensor *input; /* the one activation kept */
    keel_tensor **params;
    int nparams;
    uint64_t seed, counter;
    struct amp_scope *amp; /* the auto_cast scope of the first forward */
};

static void rc_free(void *p)
{
    struct rc_ctx *c = p;

    if (!c)
        return;
    keel_tensor_free(c->input);
    for (int i = 0; i < c->nparams; i++)
        keel_tensor_free(c->params[i]);
    free(c->params);
    keel__amp_scope_free(c->amp);
    free(c);
}

static keel_status rc_backward(void *p, keel_tensor *const *gout, int nout,
                               keel_tensor **gin, int nin)
{
    struct rc_ctx *c = p;
    keel_tensor *x = NULL, *y = NULL, **ins = NULL, **grads = NULL;
    uint64_t seed, counter;
    keel_status st;

    (void)nout;
    ins = calloc((size_t)nin, sizeof(*ins));
    grads = calloc((size_t)nin, sizeof(*grads));
    if (!ins || !grads) {
        free(ins);
        free(grads);
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "recompute: out of host memory in backward");
    }
    st = keel_detach(c->input, &x);
    if (!st)
        st = keel_tensor_set_stop_gradient(x, false);
    if (!st) {
        keel_rng_get_state(&seed, &counter);
        keel_rng_set_state(c->seed, c->counter);
        st = keel_enable_grad_begin();
        if (!st && c->amp) {
            st = keel__amp_scope_open(c->amp);
            if (st)
                keel_enable_grad_end();
        }
        if (!st) {
            st = keel__layer_forward_direct(c->layer, &x, 1, &y);
            if (c->amp)
                keel__amp_scope_close();
            keel_enable_grad_end();
        }
        keel_rng_set_state(seed, counter);
    }
    if (!st) {
        ins[0] = x;
        for (int i = 0; i < c->nparams; i++)
            ins[1 + i] = c->params[i];
        st = keel_grad(&y, 1, gout, ins, nin, false, true, grads);
    }
    if (!st) {
        /* The input's gradient only where the input wants one. */
        if (keel_tensor_stop_gradient(c->input)) {
            keel_tensor_free(grads[0]);
            grads[0] = NULL;
        }
        for (int i = 0; i < nin; i++)
            gin[i] = grads[i];
    }
    keel_tensor_free(x);
    keel_tensor_free(y);
    free(ins);
    free(grads);
    return st;
}

keel_status keel_recompute(keel_layer *layer, keel_tensor *x,
                           keel_tensor **out)
{
    static const char what[] = "keel_recompute";
    keel_state_dict *sd = NULL;
    struct rc_ctx *c = NULL;
    keel_tensor **ins = NULL, *y = NULL;
    keel_status st;
    int64_t n;

    if (!out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: out is NULL",
                           what);
    *out = NULL;
    if (!layer || !x)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: %s is NULL",
                           what, layer ? "x" : "layer");
    if (!keel_is_grad_enabled()) /* nothing to save memory for */
        return keel__layer_forward_direct(layer, &x, 1, out);
    st = keel_layer_parameters(layer, &sd);
    if (st)
        return st;
    n = keel_state_dict_count(sd);
    c = calloc(1, sizeof(*c));
    if (c)
        c->params = calloc((size_t)(n ? n : 1), sizeof(*c->params));
    ins = calloc((size_t)n + 1, sizeof(*ins));
    if (!c || !c->params || !ins) {
        st = keel__error(KEEL_STATUS_OUT_OF_MEMORY, "%s: out of host memory",
                         what);
        goto out;
    }
    c->layer = layer;
    c->input = keel_tensor_ref(x);
    if (keel_amp_is_enabled() && !(c->amp = keel__amp_scope_save())) {
        st = keel__error(KEEL_STATUS_OUT_OF_MEMORY, "%s: out of host memory",
                         what);
        goto out;
    }
    ins[0] = x;
    for (int64_t i = 0; i < n; i++) {
        keel_tensor *p = NULL;

        keel_state_dict_at(sd, i, NULL, &p);
        if (keel_tensor_stop_gradient(p))
            continue;
        c->params[c->nparams++] = keel_tensor_ref(p);
        ins[c->nparams] = p;
    }
    keel_rng_get_state(&c->seed, &c->counter);
    keel_no_grad_begin();
    st = keel__layer_forward_direct(layer, &x, 1, &y);
    keel_no_grad_end();
    if (!st)
        st = keel_autograd_attach(ins, 1 + c->nparams, &y, 1, "recompute",
                                  rc_backward, c, rc_free);
    if (!st) {
        c = NULL; /* the node owns it */
        *out = y;
        y = NULL;
    }
out:
    rc_free(c);
    keel_tensor_free(y);
    free(ins);
    keel_state_dict_free(sd);
    return st;
}
