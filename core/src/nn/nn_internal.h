/*
 * The nn layer's private declarations: what amp decorate (optim layer)
 * needs of a layer, and the forward wrapper the dist layer's Fleet
 * strategy puts on the sublayers it recomputes.
 */
#ifndef KEEL_NN_INTERNAL_H
#define KEEL_NN_INTERNAL_H

#include <stdbool.h>

#include <keel/nn.h>

#include "runtime/runtime_internal.h"

/** Whether keel_layer_set_keep_fp32 marked the layer. */
bool keel__layer_keep_fp32(const keel_layer *layer);
/** The layer's own parameters then buffers (not its sublayers'). */
int keel__layer_num_own(const keel_layer *layer);
keel_tensor *keel__layer_own_at(const keel_layer *layer, int i);

/** A function keel_layer_forward calls instead of the layer's own
 *  forward; it runs the layer with keel__layer_forward_direct. */
typedef keel_status (*keel__layer_wrap_fn)(keel_layer *layer,
                                           keel_tensor *const *inputs,
                                           int num_inputs, keel_tensor **out,
                                           void *ctx);
/** Put (fn non-NULL) or take off (fn NULL) the layer's wrapper. Returns
 *  INVALID_STATE when putting one on a layer that already has another. */
keel_status keel__layer_set_wrap(keel_layer *layer, keel__layer_wrap_fn fn,
                                 void *ctx);
/** keel_layer_forward without the wrapper. */
keel_status keel__layer_forward_direct(keel_layer *layer,
                                       keel_tensor *const *inputs,
                                       int num_inputs, keel_tensor **out);

#endif /* KEEL_NN_INTERNAL_H */
