/*
 * keel-infer-models OUTDIR: the inference benchmark's models
 * (bench/infer/infer_ratio.py), traced and written once:
 *
 *   OUTDIR/lenet.keel.json + .safetensors, OUTDIR/lenet.onnx (opset 17)
 *       LeNet (core/tests/lenet.h), input image [batch, 1, 28, 28]
 *   OUTDIR/encoder.keel.json + .safetensors, OUTDIR/encoder.onnx (opset 20)
 *       a post-LayerNorm transformer encoder block, hidden 256, 4 heads
 *       of 64, FFN 1024, exact GELU (core/tests/jit_models.h), input x
 *       [batch, 64, 256]
 *
 * The batch is dynamic in both. Weights are random (seed 1): the same
 * file feeds keel's Predictor and onnxruntime.
 */
#include <stdio.h>
#include <stdlib.h>

#include <keel/jit.h>
#include <keel/ops.h>
#include <keel/runtime.h>

static void check(keel_status st, const char *what)
{
    if (st != KEEL_STATUS_OK) {
        fprintf(stderr, "keel-infer-models: %s: %s\n", what,
                keel_last_error());
        exit(1);
    }
}

/* The shared test models assert through OK; here a failure ends the
 * program with the error. */
#define OK(expr) check((expr), #expr)
#include "jit_models.h"

static void write_model(keel_layer *m, const keel_input_spec *spec,
                        const char *dir, const char *name, int opset)
{
    char prefix[1024], onnx[1100];
    keel_graph *g = NULL;

    snprintf(prefix, sizeof(prefix), "%s/%s", dir, name);
    snprintf(onnx, sizeof(onnx), "%s.onnx", prefix);
    keel_layer_eval(m);
    check(keel_jit_trace(m, spec, 1, &g), "keel_jit_trace");
    check(keel_jit_save(g, prefix), "keel_jit_save");
    check(keel_onnx_export(g, onnx, opset), "keel_onnx_export");
    printf("%s: %d nodes -> %s.keel.json, %s\n", name,
           keel_graph_num_nodes(g), prefix, onnx);
    keel_graph_free(g);
    keel_layer_free(m);
}

int main(int argc, char **argv)
{
    keel_input_spec img = {.name = "image", .dtype = KEEL_F32, .ndim = 4,
                           .shape = {-1, 1, 28, 28},
                           .dim_names = (const char *const[]){"batch", NULL,
                                                              NULL, NULL}};
    keel_input_spec seq = {.name = "x", .dtype = KEEL_F32, .ndim = 3,
                           .shape = {-1, 64, 256},
                           .dim_names = (const char *const[]){"batch", NULL,
                                                              NULL}};

    if (argc != 2) {
        fprintf(stderr, "usage: keel-infer-models OUTDIR\n");
        return 2;
    }
    keel_seed(1);
    write_model(lenet_model(), &img, argv[1], "lenet", 17);
    write_model(encoder_sized(256, 1024), &seq, argv[1], "encoder", 20);
    keel_shutdown();
    return 0;
}
