/*
 * Running a graph a fuzz target accepted (fuzz_jit, fuzz_onnx): when its
 * inputs are few and small (dynamic dimensions 2, at most 4096 elements
 * each, at most 64 nodes), once on zeros of the declared shapes. The run
 * must give OK or an error with a message.
 */
#ifndef KEEL_FUZZ_GRAPH_H
#define KEEL_FUZZ_GRAPH_H

#include <stdio.h>
#include <stdlib.h>

#include <keel/jit.h>
#include <keel/ops.h>

static void fuzz_run_graph(const keel_graph *g)
{
    keel_tensor *in[8] = {0}, *out[8] = {0};
    int nin = keel_graph_num_inputs(g), nout = 0, made = 0;
    keel_status st = KEEL_STATUS_OK;

    if (nin > 8 || keel_graph_num_outputs(g) > 8 ||
        keel_graph_num_nodes(g) > 64)
        return;
    for (int i = 0; i < nin && st == KEEL_STATUS_OK; i++) {
        keel_dtype dt;
        int nd;
        int64_t shape[KEEL_MAX_DIMS], numel = 1;

        if (keel_graph_value_info(g, false, i, &dt, &nd, shape))
            abort();
        for (int d = 0; d < nd; d++) {
            if (shape[d] < 0)
                shape[d] = 2;
            numel *= shape[d] > 4096 ? 4097 : shape[d];
            if (numel > 4096)
                return; /* keep every run small */
        }
        st = keel_zeros(nd, shape, dt, NULL, &in[i]);
        made = i + 1;
    }
    if (st == KEEL_STATUS_OK)
        st = keel_graph_run(g, in, nin, out, 8, &nout);
    if (st != KEEL_STATUS_OK && !*keel_last_error()) {
        fprintf(stderr, "keel_graph_run failed without a message\n");
        abort();
    }
    for (int i = 0; i < made; i++)
        keel_tensor_free(in[i]);
    for (int i = 0; i < nout; i++)
        keel_tensor_free(out[i]);
}

#endif /* KEEL_FUZZ_GRAPH_H */
