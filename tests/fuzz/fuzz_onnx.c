/*
 * libFuzzer target: the ONNX importer, keel_onnx_import(), then running
 * and exporting again what it accepts.
 *
 * The input is an ONNX model file (ModelProto). Any input must give OK or
 * an error with a message and no graph, never a crash, a sanitizer report
 * or a leak. An accepted graph is run once on small inputs
 * (fuzz_graph.h) and exported back to ONNX, each of which must again give
 * OK or an error with a message.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <keel/jit.h>

#include "fuzz_common.h"
#include "fuzz_graph.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char out_path[96];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *tmp = getenv("TMPDIR");

    (void)argc;
    (void)argv;
    fuzz_keel_setup();
    snprintf(out_path, sizeof(out_path), "%s/keel-fuzz-onnx-%ld.onnx",
             tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp", (long)getpid());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write_input(data, size);
    keel_graph *g = (keel_graph *)1;
    keel_status st;

    keel_clear_error();
    st = keel_onnx_import(path, NULL, &g);
    if (st != KEEL_STATUS_OK) {
        if (g || !*keel_last_error()) {
            fprintf(stderr, "refused without a message or with a graph\n");
            abort();
        }
        return 0;
    }
    if (!g || keel_graph_num_outputs(g) < 1)
        abort();
    fuzz_run_graph(g);
    keel_clear_error();
    st = keel_onnx_export(g, out_path, 0);
    if (st != KEEL_STATUS_OK && !*keel_last_error()) {
        fprintf(stderr, "export failed without a message\n");
        abort();
    }
    unlink(out_path);
    keel_graph_free(g);
    return 0;
}
