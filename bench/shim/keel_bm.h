/*
 * keel_bm — a small C interface over Google Benchmark.
 *
 * Google Benchmark is a C++ library; keel's benchmarks are written in C.
 * This header is the whole bridge: a benchmark is a C function
 *
 *     void fn(keel_bm_state *state, void *ctx);
 *
 * registered under a name with keel_bm_register(). The function sets up
 * its inputs, then loops
 *
 *     while (keel_bm_keep_running(state)) { ... timed work ... }
 *
 * exactly like `for (auto _ : state)` in C++, and reports throughput with
 * the accessors below. keel_bm_run() parses Google Benchmark's own
 * command-line flags (--benchmark_filter, --benchmark_format,
 * --benchmark_out, --benchmark_min_time, --benchmark_repetitions, ...) and
 * runs the selected benchmarks through the library's reporters, so the
 * console, JSON and CSV outputs are the library's unchanged (plus whatever
 * keel_bm_add_context() added to the "context" object).
 *
 * The library may call a benchmark function several times: once or more to
 * find an iteration count that fills the minimum time, then once per
 * repetition. Each call is independent; work that must happen only once
 * (a correctness check, say) should be remembered in ctx.
 *
 * Timing modes (keel_bm_opts.time):
 *   CPU     the library times the loop with the process CPU clock;
 *   REAL    the library times the loop with the wall clock;
 *   MANUAL  the function measures each iteration itself and reports it with
 *           keel_bm_set_iteration_time() (device timers, events).
 *
 * Errors: a benchmark that cannot run calls keel_bm_skip_with_error() and
 * returns (or leaves its loop at once); the reporters print the message in
 * place of the timings, and JSON carries "error_occurred": true with
 * "error_message". No function here aborts or exits the process, except
 * that the library itself exits on --help and on malformed values of its
 * own flags, which callers should validate first.
 *
 * Not thread-safe: register and run from one thread.
 */
#ifndef KEEL_BM_H
#define KEEL_BM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The running benchmark's state (wraps benchmark::State). */
typedef struct keel_bm_state keel_bm_state;

/** A benchmark body. ctx is the pointer given at registration. */
typedef void (*keel_bm_fn)(keel_bm_state *state, void *ctx);

/** Which clock measures an iteration. */
typedef enum keel_bm_time {
    KEEL_BM_TIME_CPU = 0,
    KEEL_BM_TIME_REAL = 1,
    KEEL_BM_TIME_MANUAL = 2
} keel_bm_time;

/** Unit the reporters print times in. */
typedef enum keel_bm_unit {
    KEEL_BM_UNIT_NS = 0,
    KEEL_BM_UNIT_US = 1,
    KEEL_BM_UNIT_MS = 2,
    KEEL_BM_UNIT_S = 3
} keel_bm_unit;

/** Per-benchmark options; zero-initialised means the library defaults. */
typedef struct keel_bm_opts {
    keel_bm_time time;
    keel_bm_unit unit;
    /** Fixed iteration count (> 0), or 0 to let the library choose. */
    int64_t iterations;
} keel_bm_opts;

/** Counter flags (combine with |); KEEL_BM_COUNTER_PLAIN reports as is. */
enum {
    KEEL_BM_COUNTER_PLAIN = 0,
    /** Divide by the measured time: a rate per second. */
    KEEL_BM_COUNTER_RATE = 1u << 0,
    /** Divide by the number of iterations. */
    KEEL_BM_COUNTER_AVG_ITERATIONS = 1u << 1,
    /** Report 1 / value (with RATE: seconds per unit). */
    KEEL_BM_COUNTER_INVERT = 1u << 2,
    /** Print with binary prefixes (Ki, Mi) instead of decimal (k, M). */
    KEEL_BM_COUNTER_BASE_1024 = 1u << 3
};

/* ---- registration ----------------------------------------------------- */

/**
 * Register benchmark `name` (copied) running fn(state, ctx). `opts` may be
 * NULL. `ctx_free`, when not NULL, is called on ctx by keel_bm_clear().
 * Returns 0, or -1 for a NULL/empty name or fn, a duplicate name, or an
 * out-of-memory condition (ctx is then not taken over).
 */
int keel_bm_register(const char *name, keel_bm_fn fn, void *ctx,
                     void (*ctx_free)(void *ctx), const keel_bm_opts *opts);

/** Number of benchmarks registered since the last keel_bm_clear(). */
size_t keel_bm_count(void);

/** Name of registered benchmark i (in registration order), or NULL. */
const char *keel_bm_name(size_t i);

/**
 * Whether the library's filter `filter` (an extended regular expression
 * searched in the benchmark's reported name; a leading '-' negates it;
 * NULL, "", "." and "all" select everything) selects a registered benchmark
 * whose name starts with `prefix`. A filter that does not compile selects
 * nothing. Lets a caller skip expensive preparation for benchmarks that
 * will not run.
 */
bool keel_bm_any_selected(const char *filter, const char *prefix);

/** How many registered benchmarks `filter` selects among those whose name
 *  starts with `prefix` (the rules of keel_bm_any_selected). */
size_t keel_bm_count_selected(const char *filter, const char *prefix);

/**
 * Called around every call of a benchmark function: with begin true and
 * the registered name just before, with begin false just after. The
 * library calls a function several times per benchmark (to size the
 * iterations, then once per repetition), always before it reports that
 * benchmark. For a progress display; NULL removes the hook.
 */
typedef void (*keel_bm_hook_fn)(const char *name, bool begin, void *user);
void keel_bm_set_hook(keel_bm_hook_fn fn, void *user);

/**
 * Add "key": "value" to the "context" object of every report (and to the
 * console header). Call before keel_bm_run(). A key added twice keeps its
 * first value. Returns 0, or -1 for NULL arguments.
 */
int keel_bm_add_context(const char *key, const char *value);

/**
 * Run the selected benchmarks. argv[0] is a program name; the other
 * arguments are Google Benchmark flags (--benchmark_*=VALUE). Reports go
 * to stdout (--benchmark_format) and, with --benchmark_out, to a file.
 * Returns the number of benchmarks run (>= 0), or -1 when an argument is
 * not a flag the library knows (a message is printed on stderr).
 */
long keel_bm_run(int argc, const char *const *argv);

/** Forget every registered benchmark, freeing contexts (see register). */
void keel_bm_clear(void);

/* ---- inside a benchmark function -------------------------------------- */

/** Start the next iteration (true) or end the loop (false). */
bool keel_bm_keep_running(keel_bm_state *state);

/** Iterations completed so far in this call. */
int64_t keel_bm_iterations(const keel_bm_state *state);

/** MANUAL timing: the duration of the iteration just run, in seconds. */
void keel_bm_set_iteration_time(keel_bm_state *state, double seconds);

/** Sum of the times given to keel_bm_set_iteration_time() in this call. */
double keel_bm_manual_time(const keel_bm_state *state);

/** Total bytes / items the loop processed (reported as rates). */
void keel_bm_set_bytes_processed(keel_bm_state *state, int64_t bytes);
void keel_bm_set_items_processed(keel_bm_state *state, int64_t items);

/** Set (or replace) a user counter; flags are KEEL_BM_COUNTER_*. */
void keel_bm_set_counter(keel_bm_state *state, const char *name, double value,
                         unsigned flags);

/** A short label printed after the timings. */
void keel_bm_set_label(keel_bm_state *state, const char *label);

/**
 * Mark this benchmark failed with `message`; the loop ends (keep_running
 * returns false) and the reporters print the message instead of numbers.
 */
void keel_bm_skip_with_error(keel_bm_state *state, const char *message);

/** true once keel_bm_skip_with_error() has been called in this call. */
bool keel_bm_error_occurred(const keel_bm_state *state);

/** Exclude work from CPU/REAL timing (not needed with MANUAL). */
void keel_bm_pause_timing(keel_bm_state *state);
void keel_bm_resume_timing(keel_bm_state *state);

#ifdef __cplusplus
}
#endif

#endif /* KEEL_BM_H */
