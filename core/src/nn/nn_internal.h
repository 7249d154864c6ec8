/*
 * The nn layer's private declarations: what amp decorate (optim layer)
 * needs of a layer.
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

#endif /* KEEL_NN_INTERNAL_H */
