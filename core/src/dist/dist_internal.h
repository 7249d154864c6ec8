/*
 * keel dist layer, private: what dist.c and data_parallel.c share. The
 * layer sits above inference (src/README.md); it uses the tensor
 * internals for device addresses (keel__tensor_dptr) and the nn/autograd
 * public API.
 */
#ifndef KEEL_DIST_INTERNAL_H
#define KEEL_DIST_INTERNAL_H

#include <keel/amp.h>
#include <keel/autograd.h>
#include <keel/dist.h>
#include <keel/io.h>
#include <keel/ops.h>

#include "inference/inference_internal.h"
#include "nn/nn_internal.h"

/** keel_dist_all_reduce of t (in place) enqueued on `stream` of the
 *  group's device and waited for there: DataParallel's communication
 *  thread, which must not wait on the default stream the backward pass
 *  is filling. */
keel_status keel__dist_all_reduce_on(keel_tensor *t, keel_reduce_op op,
                                     keel_dist_group *group,
                                     keel_stream stream);

/** Drop the strategy keel_fleet_init kept (keel_dist_finalize). */
void keel__fleet_reset(void);

#endif /* KEEL_DIST_INTERNAL_H */
