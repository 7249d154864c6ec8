/*
 * keel conform — the plugin conformance suite.
 *
 * DESIGN
 *
 * `keel conform --plugin X` certifies one plugin .so against the promises of
 * the device ABI (device-api/include/keel/device_api.h) and the op catalog.
 *
 *   cmd_conform.c   the CLI: options, the run, exit codes
 *   cf_config.c     the YAML configuration (libyaml), defaults table
 *   cf_registry.c   every test: id "suite/name", level, CUnit registration,
 *                   --filter and known-failure matching
 *   cf_runner.c     isolation: each suite runs in a forked child that loads
 *                   the plugin itself and reports test by test over a pipe;
 *                   a crash or hang fails the running test, and a new child
 *                   resumes the suite after it
 *   cf_report.c     live progress, summary table, JUnit XML, JSON report
 *   cf_env.c        what a child sets up (plugin, devices, CPU reference)
 *                   and the helpers tests share (checks, dtypes, buffers)
 *   t_*.c           the test areas; kernel_recipes.c holds the per-op input
 *                   recipes of the kernel area
 *
 * The parent process never calls into a plugin: it only forks, reads
 * results and writes reports. Every child starts from a fresh libkeel
 * runtime, so a plugin whose driver forbids use after fork (CUDA does) is
 * tested correctly, and a plugin that corrupts its own state harms one
 * suite only.
 *
 * Inside a child, tests run through CUnit (CU_run_test, one test at a time)
 * and report failures with CU_assertImplementation, so a failure carries its
 * file, line and a formatted message.
 */
#ifndef KEEL_CONFORM_H
#define KEEL_CONFORM_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <CUnit/CUnit.h>

#include <keel/ops.h>
#include <keel/runtime.h>
#include <keel/tensor.h>

#define CF_MAX_DEVICES 64
#define CF_MSG_MAX 1024

#if defined(__GNUC__) || defined(__clang__)
#define CF_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CF_PRINTF(a, b)
#endif

/* ---- levels and outcomes ------------------------------------------------ */

enum cf_level {
    CF_LEVEL_SMOKE = 0,
    CF_LEVEL_FULL = 1,
    CF_LEVEL_STRESS = 2
};

const char *cf_level_name(enum cf_level level);
int cf_level_parse(const char *s, enum cf_level *level);

enum cf_outcome {
    CF_NOT_RUN = 0,   /* not reached (the run stopped early)            */
    CF_PASS,
    CF_FAIL,
    CF_SKIP,          /* feature or kernel not provided, or not claimed   */
    CF_KNOWN,         /* a declared known failure, not run               */
    CF_XFAIL,         /* a declared known failure that ran and failed    */
    CF_XPASS          /* a declared known failure that ran and passed    */
};

const char *cf_outcome_name(enum cf_outcome o);

/* ---- configuration (cf_config.c) --------------------------------------- */

struct cf_known_failure {
    char *test;    /* glob over test ids                  */
    char *plugin;  /* glob over the plugin name            */
    char *version; /* glob over the plugin version         */
    char *device;  /* glob over device names               */
    char *reason;
    char *issue;
    int line;
};

struct cf_config {
    char *path;                       /* NULL: built-in defaults only     */
    bool all_devices;                 /* devices: all                     */
    int ndevices;
    int32_t devices[CF_MAX_DEVICES];
    bool kernels_all_devices;         /* kernels run on every device      */
    double tolerance[KEEL_DTYPE_COUNT_]; /* NMSE bound per float dtype    */
    bool dtypes_claimed;
    uint32_t claimed_dtypes;          /* KEEL_DTYPE_BIT mask              */
    uint32_t feature_given;           /* KEEL_FEATURE_* bits the file sets */
    uint32_t feature_value;           /* ... and their values             */
    struct cf_known_failure *known;
    int nknown;
    double test_timeout_s;
    double suite_timeout_s;
    uint32_t collective_timeout_ms;   /* 0: the plugin does not bound waits */
    uint64_t seed;
    int e2e_steps;                    /* MLP steps at full level          */
};

/** Fill the built-in defaults (see cf_config.c for the table). */
void cf_config_defaults(struct cf_config *cfg);
/** Load `path` over the defaults. On error returns -1 and writes
 *  "file:line:column: message" into err. */
int cf_config_load(struct cf_config *cfg, const char *path, char *err,
                   size_t errsz);
void cf_config_free(struct cf_config *cfg);
/** Name of a feature bit as used in the configuration, or NULL. */
const char *cf_feature_name(uint32_t bit);

/* ---- command-line options ---------------------------------------------- */

struct cf_options {
    const char *plugin_arg;     /* --plugin as given                      */
    bool plugin_is_path;
    const char *config_path;
    enum cf_level level;
    const char **filters;
    int nfilters;
    bool list;
    const char *junit_path;
    const char *report_path;
    const char *html_path;
    int jobs;
    bool also_known;
    bool verbose;
};

/* ---- tests (cf_registry.c) --------------------------------------------- */

typedef void (*cf_test_fn)(void);

/** One entry of an area's static test table. */
struct cf_test_spec {
    const char *suite;
    const char *name;
    enum cf_level level;
    cf_test_fn fn;
    const char *doc;
};

/** How a suite's child prepares itself. */
enum cf_ctx_kind {
    CF_CTX_RAW,  /* dlopen the plugin directly; no libkeel runtime */
    CF_CTX_CORE  /* libkeel runtime with the plugin and the CPU reference */
};

struct cf_test {
    char id[128];
    const char *suite;       /* interned suite name                    */
    const char *name;        /* points into id, after the '/'          */
    enum cf_level level;
    cf_test_fn fn;
    const char *doc;
    int op;                  /* kernel tests: catalog op, else -1       */
    int dtype;               /* kernel tests: dtype, else -1            */
    bool selected;           /* by level and filter                     */
    int known;               /* index into cfg.known, or -1             */
    CU_pSuite cu_suite;
    CU_pTest cu_test;
    /* result */
    enum cf_outcome outcome;
    double ms;
    char *message;
    bool has_nmse;           /* a float comparison was made:            */
    double nmse, tol;        /* its worst NMSE (may be inf) and bound    */
};

struct cf_suite {
    const char *name;
    enum cf_ctx_kind ctx;
    int *tests;     /* indices into cf_tests, selected ones, in order */
    int ntests;
    double seconds;
    /* Set when a test process of the suite ended abnormally (a signal, a
     * nonzero status such as a sanitizer's, a kill) after its last test,
     * where no test is left to carry the failure: the suite fails. Empty
     * otherwise. */
    char exit_failure[320];
};

extern struct cf_test *cf_tests;
extern int cf_ntests;
extern struct cf_suite *cf_suites;
extern int cf_nsuites;

/** Build every test (static areas + one kernel test per catalog op and
 *  dtype) and register them with CUnit. Returns 0 or -1. */
int cf_registry_build(void);
/** Mark tests selected by level and filters; build the suite lists. */
void cf_registry_select(enum cf_level level, const char *const *filters,
                        int nfilters);
void cf_registry_free(void);
/** Glob match without special meaning for '/'. */
bool cf_glob(const char *pattern, const char *s);

/* The areas' tables, each ended by an entry with suite == NULL. */
extern const struct cf_test_spec cf_identity_tests[];
extern const struct cf_test_spec cf_device_tests[];
extern const struct cf_test_spec cf_memory_tests[];
extern const struct cf_test_spec cf_stream_tests[];
extern const struct cf_test_spec cf_kernel_static_tests[];
extern const struct cf_test_spec cf_collective_tests[];
extern const struct cf_test_spec cf_concurrency_tests[];
extern const struct cf_test_spec cf_e2e_tests[];
extern const struct cf_test_spec cf_stress_tests[];

/* Kernel area (t_kernel.c): the generated per-op tests. */
void cf_kernel_test(void);
/** Suite of an op's kernel tests ("kernels.elementwise", ...). */
const char *cf_kernel_suite(int op);
/** Whether (op, dtype) is in the smoke subset. */
bool cf_kernel_in_smoke(int op, int dtype);

/* ---- the child's environment (cf_env.c) -------------------------------- */

struct cf_env {
    const struct cf_config *cfg;
    const struct cf_options *opt;
    enum cf_level level;
    const char *plugin_path;        /* resolved by the probe            */
    int plugin;                     /* libkeel plugin index             */
    const keel_plugin_api *api;     /* normalised table (core context)  */
    int32_t device_count;
    int ndev;                       /* devices under test               */
    int32_t dev[CF_MAX_DEVICES];
    keel_device_props props[CF_MAX_DEVICES];
    char place[CF_MAX_DEVICES][48]; /* canonical names ("cpu:1")        */
    bool have_ref;                  /* cpu:0 available as the reference */
    char ref_reason[256];
    /* What the tested devices' collectives declare (ABI 1.2 get_caps):
     * the intersection over the tested devices, the largest timeout.
     * coll_declared false: nothing declared, everything is tried and
     * NOT_SUPPORTED is accepted. */
    bool coll_declared;
    keel_collective_caps coll_caps;
};

extern struct cf_env cf_env;

/** Set up a core-context child. Returns 0, or -1 with a reason. */
int cf_env_core_setup(const struct cf_config *cfg,
                      const struct cf_options *opt, const char *plugin_path,
                      char *why, size_t whysz);
void cf_env_core_teardown(void);

/** Set up a raw-context child (t_identity.c): dlopen the plugin itself. */
int cf_identity_setup(const struct cf_config *cfg,
                      const struct cf_options *opt, const char *path,
                      char *why, size_t whysz);
void cf_identity_teardown(void);

/* The running test (set by the runner). */
extern struct cf_test *cf_current;
/* Called with every failure message as it happens (the runner streams
 * them to the parent, so a test killed later keeps its messages). */
extern void (*cf_fail_hook)(const char *msg);

/* ---- checks --------------------------------------------------------------- */

void cf_fail_at(const char *file, int line, const char *fmt, ...)
    CF_PRINTF(3, 4);
/** Mark the current test skipped (unless it also failed). */
void cf_skip(const char *fmt, ...) CF_PRINTF(1, 2);
/** Attach an informational note to the current test's result. */
void cf_note(const char *fmt, ...) CF_PRINTF(1, 2);
/** Record one output's comparison (NMSE and its bound); the test keeps
 *  its worst and the report shows it. */
void cf_metric_nmse(double nmse, double tol);
/** The worst comparison recorded since the test started, if any. */
bool cf_metric_get(double *nmse, double *tol);
bool cf_skipped(void);
const char *cf_skip_reason(void);
const char *cf_notes(void);
void cf_test_state_reset(void);

#define CF_FAIL(...) cf_fail_at(__FILE__, __LINE__, __VA_ARGS__)
#define CF_CHECK(cond, ...)                                                  \
    ((cond) ? true : (cf_fail_at(__FILE__, __LINE__, __VA_ARGS__), false))
/* Expect status `want` from `expr`; the message says what was called. */
#define CF_EXPECT(expr, want, ...)                                           \
    cf_expect_at(__FILE__, __LINE__, (expr), (want), __VA_ARGS__)
#define CF_OK(expr, ...)                                                     \
    cf_expect_at(__FILE__, __LINE__, (expr), KEEL_STATUS_OK, __VA_ARGS__)

bool cf_expect_at(const char *file, int line, keel_status got,
                  keel_status want, const char *fmt, ...) CF_PRINTF(5, 6);

/* ---- small utilities -------------------------------------------------------- */

double cf_now(void);
void cf_sleep_ms(double ms);
const char *cf_dtype_name(int dtype);
bool cf_dtype_is_float(int dtype);
uint32_t cf_dtype_size(int dtype);
/** Element i of a buffer of `dtype` as a double. */
double cf_load(int dtype, const void *buf, int64_t i);
/** Store v into element i, rounding/converting as the dtype does. */
void cf_store(int dtype, void *buf, int64_t i, double v);
/** v rounded to what `dtype` can hold (identity for f64). */
double cf_quantize(int dtype, double v);

/* A small deterministic generator (splitmix64). */
struct cf_rng {
    uint64_t s;
};
void cf_rng_seed(struct cf_rng *r, uint64_t seed);
uint64_t cf_rng_next(struct cf_rng *r);
double cf_rng_uniform(struct cf_rng *r, double lo, double hi);
int64_t cf_rng_int(struct cf_rng *r, int64_t lo, int64_t hi); /* [lo, hi] */
uint64_t cf_hash(const char *s, uint64_t h);

/** Fill `buf` with a byte pattern that depends on seed and position. */
void cf_pattern(void *buf, size_t size, uint32_t seed);
/** First offset where buf differs from the pattern, or -1. */
int64_t cf_pattern_check(const void *buf, size_t size, uint32_t seed);

/* Plugin calls used by many tests: each fails the test on error. */
bool cf_alloc(int32_t dev, uint64_t size, keel_dptr *ptr);
void cf_free(int32_t dev, keel_dptr ptr);
bool cf_upload(int32_t dev, keel_dptr dst, const void *src, uint64_t size);
bool cf_download(int32_t dev, void *dst, keel_dptr src, uint64_t size);
bool cf_stream_new(int32_t dev, keel_stream *s);
void cf_stream_del(int32_t dev, keel_stream s);
bool cf_sync(int32_t dev, keel_stream s);
/** Poll event_query until OK or `seconds` pass; returns the last status. */
keel_status cf_event_wait(int32_t dev, keel_event e, double seconds);
/** Poll stream_query until OK or `seconds` pass; returns the last status. */
keel_status cf_stream_wait(int32_t dev, keel_stream s, double seconds);

bool cf_has_feature(int i, uint32_t feature);
/** Query a device's collective declaration through `col` (NULL when the
 *  table or get_caps is absent). Returns 1 declared, 0 not declared, -1
 *  when get_caps failed (why says so). */
int cf_coll_caps_query(const keel_collective_ops *col, int32_t dev,
                       keel_collective_caps *caps, char *why, size_t whysz);
/** The collective bound in ms the tests use: timeouts.collective_ms when
 *  the configuration sets it, else the plugin's declared timeout_ms. */
uint32_t cf_collective_timeout_ms(void);
int cf_dev_index(int32_t dev);

/* A gate: a host function that blocks its stream until opened (bounded).
 * The flags are shared between the test's thread and whichever thread the
 * plugin runs host functions on, so they are atomics; limit_s is set
 * before the launch and only read after. Clear a gate with cf_gate_init. */
struct cf_gate {
    atomic_int open;
    atomic_int ran;
    atomic_int entered;
    double limit_s;
};
void cf_gate_init(struct cf_gate *g, double limit_s);
void cf_gate_fn(void *gate);

/* ---- runner (cf_runner.c) ------------------------------------------------ */

struct cf_probe {
    bool ok;               /* the probe child answered                 */
    bool loaded;
    char path[4096];
    char name[64];
    char version[64];
    char device_type[64];
    char description[256];
    uint32_t abi_major, abi_minor;
    int32_t device_count;
    char failed_check[64];
    char reason[CF_MSG_MAX];
    int ndev;
    int32_t dev[CF_MAX_DEVICES];
    keel_device_props props[CF_MAX_DEVICES];
    keel_memory_info mem[CF_MAX_DEVICES];
    int coll_declared[CF_MAX_DEVICES];  /* cf_coll_caps_query's answer */
    keel_collective_caps coll_caps[CF_MAX_DEVICES];
    char coll_why[CF_MAX_DEVICES][160];
    bool have_ref;
};

/** Load the plugin in a child and describe it. Returns 0, or -1 when the
 *  child could not run (why says so). */
int cf_probe_run(const struct cf_config *cfg, const struct cf_options *opt,
                 struct cf_probe *probe, char *why, size_t whysz);

/** Run every selected suite (the probe gives the plugin path); progress
 *  lines go to `out`. */
void cf_run_suites(const struct cf_config *cfg, const struct cf_options *opt,
                   const struct cf_probe *probe, FILE *out);

/* ---- reports (cf_report.c) ---------------------------------------------- */

struct cf_run_info {
    const struct cf_options *opt;
    const struct cf_config *cfg;
    const struct cf_probe *probe;
    char sha256[65];
    double started;        /* wall clock (time(NULL)) */
    double seconds;
    const char *certified; /* level name or NULL */
};

void cf_print_summary(FILE *out, const struct cf_run_info *ri);
int cf_write_junit(const char *path, const struct cf_run_info *ri,
                   char *err, size_t errsz);
/** The certification report as a JSON document (NULL with err set). */
struct json_t *cf_build_report(const struct cf_run_info *ri, char *err,
                               size_t errsz);
int cf_write_report(const char *path, const struct cf_run_info *ri,
                    char *err, size_t errsz);
int cf_sha256_file(const char *path, char out[65]);
void cf_count(int *pass, int *fail, int *skip, int *known, int *notrun);
/** Number of suites whose test process ended abnormally after its last
 *  test (cf_suite.exit_failure); each fails the run. */
int cf_count_suite_failures(void);

#endif /* KEEL_CONFORM_H */
