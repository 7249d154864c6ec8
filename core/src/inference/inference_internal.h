/*
 * The inference layer's private declarations: the IR passes.
 */
#ifndef KEEL_INFERENCE_INTERNAL_H
#define KEEL_INFERENCE_INTERNAL_H

#include <keel/inference.h>

#include "jit/jit_internal.h"

/**
 * Run the enabled passes (disabled[i] for pass i) on a copy of `in`, for
 * a predictor running in `precision`; *out is the compact result,
 * changed[i] the nodes pass i changed, `log` one line "pass n, ...".
 */
keel_status keel__passes_run(const keel_graph *in, const bool *disabled,
                             keel_dtype precision, keel_graph **out,
                             int *changed, char *log, size_t logsize);

#endif /* KEEL_INFERENCE_INTERNAL_H */
