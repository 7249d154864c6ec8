/*
 * keel inference — a Predictor over a saved graph, as paddle.inference's
 * Config + create_predictor. See docs/inference.md.
 *
 *   keel_inference_config *cfg;
 *   keel_inference_config_create("out/lenet", &cfg); // PREFIX.keel.json
 *   keel_inference_config_set_device(cfg, "cpu");
 *   keel_predictor *p;
 *   keel_predictor_create(cfg, &p);
 *   keel_io_handle *in = keel_predictor_input_handle(p, "image");
 *   keel_io_handle_copy_from_host(in, data, KEEL_F32, 4, shape);
 *   keel_predictor_run(p);
 *   keel_io_handle_copy_to_host(keel_predictor_output_handle(p, "out0"),
 *                               buf, sizeof(buf));
 *
 * Creating a predictor loads the graph and its weights onto the device
 * and optimises a copy of the graph with the IR passes (unless turned
 * off). A predictor is used by one thread at a time; keel_predictor_clone
 * makes another that shares the weights and the optimised graph, for
 * another thread. Functions return KEEL_STATUS_OK or an error status with
 * a message in keel_last_error().
 */
#ifndef KEEL_INFERENCE_H
#define KEEL_INFERENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <keel/jit.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct keel_inference_config keel_inference_config;
typedef struct keel_predictor keel_predictor;
typedef struct keel_io_handle keel_io_handle;

/* ---- Config ------------------------------------------------------------- */

/** A config for the graph saved at `prefix` (keel_jit_save's PREFIX).
 *  Defaults: the current device when the predictor is created, float32,
 *  IR optimisation and memory optimisation on, every pass enabled. */
KEEL_API keel_status keel_inference_config_create(const char *prefix,
                                                  keel_inference_config **out);
KEEL_API void keel_inference_config_free(keel_inference_config *cfg);
/** The device by name ("cpu", "gpu:0", "npu:1"; Paddle's enable_use_gpu /
 *  disable_gpu / enable_custom_device). */
KEEL_API keel_status keel_inference_config_set_device(
    keel_inference_config *cfg, const char *device);
/**
 * Threads of the CPU plugin's kernel pool (Paddle's
 * set_cpu_math_library_num_threads). The pool is process-wide and starts
 * with the first CPU kernel: the value is applied (KEEL_CPU_THREADS) when
 * no pool has started yet and KEEL_CPU_THREADS is not set by the user;
 * keel_predictor_summary says whether it was. 0: leave it alone.
 */
KEEL_API keel_status keel_inference_config_set_threads(
    keel_inference_config *cfg, int threads);
/** Precision of the run: float32, or float16 / bfloat16 (the graph runs
 *  in an auto_cast O1 scope of that dtype: white-list ops in the reduced
 *  type; outputs are cast back to the graph's declared dtypes). */
KEEL_API keel_status keel_inference_config_set_precision(
    keel_inference_config *cfg, keel_dtype precision);
/** IR optimisation (Paddle's switch_ir_optim): the passes below. */
KEEL_API keel_status keel_inference_config_switch_ir_optim(
    keel_inference_config *cfg, bool on);
/** Free each intermediate value after its last use, and plan the
 *  buffers by liveness (Paddle's enable_memory_optim). Off: every value
 *  lives until the run ends. */
KEEL_API keel_status keel_inference_config_enable_memory_optim(
    keel_inference_config *cfg, bool on);
/** Turn one pass off by name (Paddle's pass_builder()->DeletePass);
 *  INVALID_ARGUMENT for a name that is no pass. */
KEEL_API keel_status keel_inference_config_delete_pass(
    keel_inference_config *cfg, const char *pass);

/** The IR passes, in the order they run ("constant_folding", ...), and a
 *  one-line description of each. NULL out of range. */
KEEL_API int keel_inference_num_passes(void);
KEEL_API const char *keel_inference_pass_name(int i);
KEEL_API const char *keel_inference_pass_doc(int i);

/* ---- Predictor ------------------------------------------------------------ */

KEEL_API keel_status keel_predictor_create(const keel_inference_config *cfg,
                                           keel_predictor **out);
/** Another predictor sharing this one's weights and optimised graph, with
 *  its own input and output handles (for another thread). */
KEEL_API keel_status keel_predictor_clone(const keel_predictor *p,
                                          keel_predictor **out);
KEEL_API void keel_predictor_free(keel_predictor *p);

KEEL_API int keel_predictor_num_inputs(const keel_predictor *p);
KEEL_API int keel_predictor_num_outputs(const keel_predictor *p);
KEEL_API const char *keel_predictor_input_name(const keel_predictor *p,
                                               int i);
KEEL_API const char *keel_predictor_output_name(const keel_predictor *p,
                                                int i);
/** Handles by name (borrowed; they live as long as the predictor). NULL
 *  for a name the graph does not have (keel_last_error() says so). */
KEEL_API keel_io_handle *keel_predictor_input_handle(keel_predictor *p,
                                                     const char *name);
KEEL_API keel_io_handle *keel_predictor_output_handle(keel_predictor *p,
                                                      const char *name);

/** Run the graph on the inputs set through the handles. */
KEEL_API keel_status keel_predictor_run(keel_predictor *p);

/**
 * What the predictor did: device, precision, nodes before and after the
 * passes, each pass with the nodes it changed, and, after a run, the
 * device memory peak of the last run and the planned peak (memory
 * optimisation on) against the sum of every intermediate (off). Writes
 * at most `size` bytes (NUL-terminated); returns the full length.
 */
KEEL_API int keel_predictor_summary(const keel_predictor *p, char *buf,
                                    size_t size);

/** The optimised graph (borrowed), e.g. to save it or inspect its nodes. */
KEEL_API const keel_graph *keel_predictor_graph(const keel_predictor *p);

/**
 * Memory of the last run: the allocator's peak of device bytes during the
 * run (above what was allocated before it), the static plan's peak for
 * the run's shapes (buffers reused by liveness, 64-byte aligned), and the
 * sum of every intermediate value's bytes (nothing reused).
 */
typedef struct keel_predictor_memory_info {
    uint64_t run_peak_bytes;
    uint64_t planned_peak_bytes;
    uint64_t unplanned_bytes;
} keel_predictor_memory_info;
KEEL_API keel_status keel_predictor_memory(const keel_predictor *p,
                                           keel_predictor_memory_info *out);

/* ---- handles (Paddle's Tensor handles) ------------------------------------ */

/** Copy host data in as the input (its dtype must be the graph's). */
KEEL_API keel_status keel_io_handle_copy_from_host(keel_io_handle *h,
                                                   const void *data,
                                                   keel_dtype dtype, int ndim,
                                                   const int64_t *shape);
/** Use tensor t as the input without a copy (a reference is kept; it must
 *  be on the predictor's device). */
KEEL_API keel_status keel_io_handle_share(keel_io_handle *h, keel_tensor *t);
/** The handle's tensor (borrowed; NULL before an input is set or an
 *  output is made). */
KEEL_API keel_tensor *keel_io_handle_tensor(const keel_io_handle *h);
/** Name, dtype and current shape (shape has room for KEEL_MAX_DIMS;
 *  dynamic dims are -1 until a tensor is there). */
KEEL_API const char *keel_io_handle_name(const keel_io_handle *h);
KEEL_API keel_status keel_io_handle_shape(const keel_io_handle *h,
                                          keel_dtype *dtype, int *ndim,
                                          int64_t *shape);
/** Copy the tensor out; `size` must be its byte size exactly. */
KEEL_API keel_status keel_io_handle_copy_to_host(const keel_io_handle *h,
                                                 void *dst, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* KEEL_INFERENCE_H */
