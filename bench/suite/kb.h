/*
 * keel bench — the suite's shared declarations.
 *
 * `keel bench` registers C benchmarks with the keel_bm shim (Google
 * Benchmark underneath) and runs them against one device of one plugin.
 * The files:
 *
 *   kb_cmd.c         the command: options, plugin and device, JSON context
 *   kb_util.c        timers, tensors from host data, reference checks
 *   kb_memory.c      copy bandwidth, allocation latency, host memcpy
 *   kb_launch.c      empty-op round trip, small-op overhead, sync latency
 *   kb_kernels.c     catalog kernels: elementwise ... optimizer updates
 *   kb_collective.c  all-reduce, all-gather, reduce-scatter, broadcast
 *   kb_e2e.c         one LeNet training step, MLP inference
 *   kb_compare.c     `keel bench compare A.json B.json`
 *   anchors.py       anchor ratios and a Markdown table from a JSON report
 *                    (docs/benchmarks.md)
 *
 * Every benchmark follows one pattern:
 *
 *   1. set up inputs (untimed);
 *   2. warm up: run the work once;
 *   3. the first time only, compare the result with a reference computed
 *      on the host in double precision; a mismatch marks the benchmark
 *      "wrong result" and it reports no timings;
 *   4. time iterations: with the plugin's events when it has event timing
 *      (manual time), else with CLOCK_MONOTONIC around the work and a
 *      stream synchronize;
 *   5. report the figure of merit as a counter (GB/s, GFLOP/s, ...).
 *
 * Failures are reported through kb_fail(), which classifies them (missing
 * kernel or feature: a skip; wrong result or runtime error: a failure) so
 * that the command's exit status can tell them apart.
 */
#ifndef KEEL_BENCH_KB_H
#define KEEL_BENCH_KB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <keel/nn.h>
#include <keel/ops.h>

#include "keel_bm.h"

/* ---- the environment of a run ------------------------------------------ */

/** Everything a benchmark needs to know about the run. */
struct kb_env {
    int plugin;                    /* keel plugin index                  */
    const keel_plugin_api *api;    /* its table                          */
    keel_place place;              /* the device under test              */
    char device[64];               /* its canonical name ("cpu:0")       */
    keel_device_props props;
    int32_t ndevices;              /* devices of the plugin              */
    bool events;                   /* time with the plugin's events      */
    bool smoke;                    /* tiny sizes, for the test suite     */
    bool large;                    /* include the 1 GiB points           */
    const char *filter;            /* the run's filter (may be NULL)     */
    double peak_gflops;            /* f32 matmul peak (probe or --peak), */
                                   /* 0 when neither                     */
    bool peak_declared;            /* peak_gflops came from --peak       */
};

/* ---- one registered benchmark ------------------------------------------ */

/** How a benchmark ended (worst outcome over the calls). */
enum kb_outcome {
    KB_RAN = 0,
    KB_SKIPPED = 1, /* no kernel, no feature: not the benchmark's fault */
    KB_WRONG = 2,   /* the result did not match the reference           */
    KB_ERROR = 3    /* a call failed                                    */
};

/**
 * Head of every benchmark context; kb_register() allocates the whole
 * context (size bytes, zeroed) with this at the start.
 */
struct kb_bench {
    const struct kb_env *env;
    const char *name;       /* owned by the shim's registry */
    bool checked;           /* the reference check passed   */
    enum kb_outcome outcome;
};

/**
 * Register `name` with a zeroed context of `size` bytes (>= sizeof(struct
 * kb_bench)) whose head is filled in; `time` is the timing mode. Returns
 * the context for the caller to fill, or NULL (out of memory, duplicate
 * name), after which the suite reports the failure at the end.
 */
void *kb_register(const struct kb_env *env, const char *name, size_t size,
                  keel_bm_fn fn, keel_bm_time time, keel_bm_unit unit);

/** Registration failures so far (kb_register returned NULL). */
int kb_register_failures(void);

/** Count outcomes over every registered benchmark. */
void kb_count_outcomes(int counts[4]);

/** Forget the list of registered contexts (the shim frees them). */
void kb_forget_all(void);

/**
 * Skip the running benchmark with a message built from fmt, classified as
 * `outcome`; the shim prints it in the report. Returns false, so that
 * `return kb_fail(...)` reads naturally in helpers returning bool.
 */
bool kb_fail(keel_bm_state *st, struct kb_bench *b, enum kb_outcome outcome,
             const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/**
 * Skip after a failed keel call: "WHAT: STATUS: keel_last_error()". A
 * NOT_SUPPORTED status is reported as "no kernel: ..." and counted as a
 * skip (strict mode turns a missing kernel into exactly that status).
 */
bool kb_fail_status(keel_bm_state *st, struct kb_bench *b, const char *what,
                    keel_status status);

/**
 * Check that the plugin has kernels for (op, dtype) pairs: ops[i] with
 * dtypes[i], n pairs. On a missing one, skips the benchmark with "no
 * kernel: the plugin has no <op> kernel for <dtype>" and returns false.
 */
bool kb_need_kernels(keel_bm_state *st, struct kb_bench *b, int n,
                     const keel_op_id *ops, const keel_dtype *dtypes);

/* ---- timing ---------------------------------------------------------------- */

/** Monotonic clock in seconds. */
double kb_now(void);

/** Times one iteration of work on the default stream of a device. */
struct kb_timer {
    keel_place place;
    bool events;
    keel_event start, stop;
    double t0;
};

/** Create the timer (events when env->events). Returns a status. */
keel_status kb_timer_init(struct kb_timer *t, const struct kb_env *env);
void kb_timer_destroy(struct kb_timer *t);
/** Mark the start of the work (records an event or reads the clock). */
keel_status kb_timer_start(struct kb_timer *t);
/** Wait for the work and give its duration in seconds. */
keel_status kb_timer_stop(struct kb_timer *t, double *seconds);

/* ---- data -------------------------------------------------------------- */

/** Deterministic uniform floats in [lo, hi) from a 64-bit seed. */
void kb_fill_uniform(float *dst, size_t n, uint64_t seed, float lo, float hi);

/** float <-> float16 / bfloat16 bits (round to nearest even). */
uint16_t kb_f32_to_f16(float f);
float kb_f16_to_f32(uint16_t h);
uint16_t kb_f32_to_bf16(float f);
float kb_bf16_to_f32(uint16_t h);

/**
 * A tensor of `dtype` (f32, f16, bf16) on env's device holding the values
 * of `src` (n = product of shape floats), which are rounded to the dtype in
 * place so that a host reference sees exactly the tensor's values.
 */
keel_status kb_tensor_from_floats(const struct kb_env *env, float *src,
                                  keel_dtype dtype, int ndim,
                                  const int64_t *shape, keel_tensor **out);

/** A random tensor (uniform in [lo, hi)) plus its values on the host
 *  (malloc'd, rounded to dtype) when host is not NULL. */
keel_status kb_tensor_random(const struct kb_env *env, keel_dtype dtype,
                             int ndim, const int64_t *shape, uint64_t seed,
                             float lo, float hi, keel_tensor **out,
                             float **host);

/** Read a float tensor (f32/f16/bf16/f64) into a malloc'd float array. */
keel_status kb_tensor_read(const keel_tensor *t, float **out);

/** Number of elements of a shape. */
int64_t kb_numel(int ndim, const int64_t *shape);

/** Tolerances per dtype for results computed in the dtype (see
 *  docs/testing.md), loosened by `scale` for long reductions. */
void kb_tolerance(keel_dtype dtype, double scale, double *rtol, double *atol);

/**
 * Compare got[idx] with ref[k] for k < n where idx = index ? index[k] : k.
 * On the first mismatch, skips the benchmark as a wrong result naming the
 * element, and returns false.
 */
bool kb_check(keel_bm_state *st, struct kb_bench *b, const char *what,
              const float *got, const double *ref, const int64_t *index,
              int64_t n, double rtol, double atol);

/** Free a list of tensors (NULL entries allowed). */
void kb_free_tensors(keel_tensor **ts, int n);

/** "4KiB", "256MiB", "1GiB" (exact binary units) or plain bytes. */
void kb_format_size(uint64_t bytes, char *buf, size_t size);

/** Name of a float dtype as used in benchmark names: f32, f16, bf16. */
const char *kb_dtype_short(keel_dtype dtype);

/* ---- the groups ------------------------------------------------------------- */

void kb_register_memory(const struct kb_env *env);
void kb_register_launch(const struct kb_env *env);
void kb_register_kernels(const struct kb_env *env);
void kb_register_collectives(const struct kb_env *env);
void kb_register_e2e(const struct kb_env *env);
void kb_register_amp(const struct kb_env *env);
void kb_register_models(const struct kb_env *env);

/* ---- models (kb_models.c) ------------------------------------------------------ */

/** LeNet-5 for 1x28x28 inputs, 10 classes (a Sequential). */
keel_status kb_lenet_build(keel_layer **out);

/** A post-LayerNorm transformer encoder block on x [batch, seq, hidden]. */
struct kb_enc_dims {
    int64_t batch, seq, hidden, heads, ffn;
    double dropout; /* > 0: BERT's three dropouts (attention probabilities,
                     * attention output, FFN output) */
};
keel_status kb_encoder_build(const struct kb_enc_dims *d, keel_layer **out);
/** The block's output [batch, seq, hidden]; the 1/sqrt(head size) factor
 *  is scale_f32, or scale_bf16 (when not NULL) for bfloat16 scores. */
keel_status kb_encoder_forward(keel_layer *model, const struct kb_enc_dims *d,
                               keel_tensor *x, const keel_tensor *scale_f32,
                               const keel_tensor *scale_bf16,
                               keel_tensor **out);
/** ResNet-18 with `width` stem channels (64 is the standard one), for
 *  3-channel images; logits [N, classes]. */
keel_status kb_resnet18_build(int64_t width, int64_t classes,
                              keel_layer **out);
keel_status kb_resnet18_forward(keel_layer *model, keel_tensor *x,
                                keel_tensor **out);

/**
 * Measure the f32 matmul peak of the device: square matmuls of growing
 * size, from 512 (smoke: 128 only) doubling until one takes >= 100 ms, on
 * inputs filled on the host and uploaded with the memory ABI (no device
 * kernel other than matmul is needed, so strict mode does not get in the
 * way). Returns the best GFLOP/s over every size (best of 3 per size, of 5
 * at the last), or 0 on failure; `how` receives a one-line description for
 * the report's context.
 */
double kb_measure_peak(const struct kb_env *env, char *how, size_t how_size);

/**
 * %peak. kb_peak_begin() starts a run from env->peak_gflops. For each f32
 * matmul or conv2d figure, kb_peak_counter() sets the "%peak" counter:
 *
 *  - measured peak: the denominator is the probe's figure, raised by each
 *    benchmark `b` that beats it (that row reports 100 and is labelled
 *    "new peak"; later rows use the new figure), so %peak never exceeds
 *    100;
 *  - declared peak (--peak): the denominator is the declared figure; a
 *    benchmark above it reports more than 100 and is labelled so.
 *
 * Without a peak it sets nothing. kb_peak_end() prints a one-line summary
 * (final peak, how many benchmarks raised or exceeded it) to `f`.
 */
void kb_peak_begin(const struct kb_env *env);
void kb_peak_counter(keel_bm_state *st, const struct kb_bench *b,
                     double gflops);
void kb_peak_end(FILE *f);

/* ---- compare ----------------------------------------------------------------- */

/** `keel bench compare A.json B.json [--threshold PCT]`; argv[0] is
 *  "compare". Returns a KEEL_EXIT_* code (1 when a regression is found). */
int kb_compare_main(int argc, char **argv);

#endif /* KEEL_BENCH_KB_H */
