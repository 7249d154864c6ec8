/*
 * The optim layer's private declarations: what amp decorate and the
 * GradScaler (optim/amp_train.c) need of an optimizer.
 */
#ifndef KEEL_OPTIM_INTERNAL_H
#define KEEL_OPTIM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <keel/optim.h>

#include "runtime/runtime_internal.h"
#include "tensor/tensor_internal.h"

/** Parameters of opt, in creation order (borrowed). */
size_t keel__optimizer_num_params(const keel_optimizer *opt);
keel_tensor *keel__optimizer_param(const keel_optimizer *opt, size_t i);
/** Whether the optimizer has stepped, or any parameter has accumulators
 *  or a master weight (loaded from a state dict). */
bool keel__optimizer_has_state(const keel_optimizer *opt);

#endif /* KEEL_OPTIM_INTERNAL_H */
