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

#endif /* KEEL_DIST_INTERNAL_H */
