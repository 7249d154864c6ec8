/*
 * keel jit — a layer's forward pass as a static graph of catalog ops
 * (Paddle's paddle.jit.to_static / jit.save / jit.load). See
 * docs/inference.md.
 *
 * keel_jit_trace runs a layer's forward on inputs made from input specs
 * and records every op call and view as a node. A graph is data: it is
 * saved as "PREFIX.keel.json" (the nodes, documented in
 * docs/inference.md) next to "PREFIX.safetensors" (the weights), read
 * back with full validation, and run on any device. A graph never
 * changes once made: several threads may run one graph at once.
 *
 * Dimensions given as -1 in a spec are dynamic. Each dynamic dimension
 * has a symbol (its name in the spec, or "<input>.<axis>"); inputs that
 * give one name must agree on its size when run. The trace runs the
 * forward twice with different sizes for the symbols and keeps, for every
 * shape argument, what stays true in both (a reshape to [batch, 400]
 * keeps "batch"); an argument it cannot express in the symbols is an
 * error naming the op. A value the forward computes without keel's ops
 * (from host data, say) is kept as a constant when it does not depend on
 * the inputs, and refused when it does.
 *
 * Functions return KEEL_STATUS_OK or an error status with a message in
 * keel_last_error().
 */
#ifndef KEEL_JIT_H
#define KEEL_JIT_H

#include <stdbool.h>
#include <stdint.h>

#include <keel/nn.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The graph file format's version (the "version" field). */
#define KEEL_GRAPH_FORMAT_VERSION 1

/** An input of a traced forward (Paddle's paddle.static.InputSpec). */
typedef struct keel_input_spec {
    const char *name;   /* NULL: "x0", "x1", ... */
    keel_dtype dtype;
    int ndim;
    int64_t shape[KEEL_MAX_DIMS]; /* -1: dynamic */
    /* Symbol of each dynamic dimension (NULL entries, or dim_names NULL:
     * "<name>.<axis>"). Equal names mean equal sizes. */
    const char *const *dim_names;
} keel_input_spec;

typedef struct keel_graph keel_graph;

/**
 * Trace layer's forward (keel_layer_forward with one input per spec) into
 * a new graph. The forward runs twice, on the current device, without
 * recording gradients; the layer should be in evaluation mode
 * (keel_layer_eval): a forward that writes a tensor in place (BatchNorm
 * in training mode) is refused, as is one that moves data between
 * devices or runs inside auto_cast. Parameters and buffers become the
 * graph's constants under their state-dict names; the graph keeps its own
 * references, so the layer may be freed afterwards (its weights stay
 * shared until then).
 */
KEEL_API keel_status keel_jit_trace(keel_layer *layer,
                                    const keel_input_spec *specs,
                                    int num_specs, keel_graph **out);

/** Free a graph (NULL: no-op). */
KEEL_API void keel_graph_free(keel_graph *graph);

/**
 * Run the graph on `inputs` (one per graph input, in order; all on one
 * device, where the constants live too). Input dtypes, ranks and static
 * dimensions must match, and every symbol must take one size; every
 * node's outputs are checked against the shapes the graph declares. On
 * success outputs[0..*num_outputs) hold new tensors.
 */
KEEL_API keel_status keel_graph_run(const keel_graph *graph,
                                    keel_tensor *const *inputs,
                                    int num_inputs, keel_tensor **outputs,
                                    int max_outputs, int *num_outputs);

/** Counts: inputs, outputs, nodes, constants. */
KEEL_API int keel_graph_num_inputs(const keel_graph *graph);
KEEL_API int keel_graph_num_outputs(const keel_graph *graph);
KEEL_API int keel_graph_num_nodes(const keel_graph *graph);
KEEL_API int keel_graph_num_constants(const keel_graph *graph);
/** Input or output i's name (NULL out of range). */
KEEL_API const char *keel_graph_input_name(const keel_graph *graph, int i);
KEEL_API const char *keel_graph_output_name(const keel_graph *graph, int i);
/**
 * Input or output i's dtype, rank and shape, dynamic dimensions as -1
 * (shape has room for KEEL_MAX_DIMS). Returns OK or INVALID_ARGUMENT.
 */
KEEL_API keel_status keel_graph_value_info(const keel_graph *graph,
                                           bool output, int i,
                                           keel_dtype *dtype, int *ndim,
                                           int64_t *shape);
/** Node i's op: a catalog name, or "keel.reshape", "keel.permute",
 *  "keel.slice", "keel.expand" for views (NULL out of range). */
KEEL_API const char *keel_graph_node_op(const keel_graph *graph, int i);
/** The constants as a new state dict sharing the graph's tensors. */
KEEL_API keel_status keel_graph_constants(const keel_graph *graph,
                                          keel_state_dict **out);

/**
 * Paddle's jit.save: write "PREFIX.keel.json" and "PREFIX.safetensors".
 * Each file is written to a temporary name and renamed over the target,
 * weights first; the graph file names the weights file with its size and
 * CRC-32, so a load never pairs a graph with other weights.
 */
KEEL_API keel_status keel_jit_save(const keel_graph *graph,
                                   const char *prefix);

/**
 * Paddle's jit.load: read "PREFIX.keel.json" and its weights onto
 * `device` (NULL: the current device). Everything read is checked before
 * a graph is returned: the format and catalog versions, every op and
 * attribute against the catalog, value references (each value defined
 * once, before its use: no cycles), shapes and dtypes of inputs, outputs
 * and weights, and the weights file against the graph file.
 */
KEEL_API keel_status keel_jit_load(const char *prefix, const char *device,
                                   keel_graph **out);
/** The same from a graph file's text and a weights file's path (the
 *  checks are the same; `json` need not be NUL-terminated). */
KEEL_API keel_status keel_jit_load_buffer(const char *json, size_t size,
                                          const char *weights_path,
                                          const char *device,
                                          keel_graph **out);

/**
 * A layer that runs the graph (Paddle's TranslatedLayer): its forward
 * takes the graph's inputs and returns its first output. The layer holds
 * its own reference to the graph (keel_graph_free stays the caller's).
 */
KEEL_API keel_status keel_jit_layer(keel_graph *graph, keel_layer **out);

/* ---- ONNX -------------------------------------------------------------------- */

/** The default-domain opsets keel_onnx_export writes. */
#define KEEL_ONNX_OPSET_MIN 17
#define KEEL_ONNX_OPSET_MAX 23

/**
 * Export graph to an ONNX model file (ModelProto, IR version 8,
 * default-domain opset `opset`, 17 or newer up to what the build
 * supports; 0: 17), weights as initializers, dynamic dimensions as named
 * dim_params (the graph's symbols). An op ONNX cannot express is an error
 * (NOT_SUPPORTED) naming the op and node; nothing is written then.
 * Written atomically. The op mapping and what is refused:
 * docs/inference.md, "ONNX".
 */
KEEL_API keel_status keel_onnx_export(const keel_graph *graph,
                                      const char *path, int opset);
/**
 * Import an ONNX model (ops listed in docs/inference.md) into a new graph
 * on `device` (NULL: current). Everything read is validated (CORRUPT with
 * a message naming the node/tensor); an ONNX op without a keel mapping is
 * NOT_SUPPORTED naming it. The graph runs with keel_graph_run and saves
 * with keel_jit_save like a traced one.
 */
KEEL_API keel_status keel_onnx_import(const char *path, const char *device,
                                      keel_graph **out);

#ifdef __cplusplus
}
#endif

#endif /* KEEL_JIT_H */
