/*
 * The kit's before/after test (tests/kitcases): one valid launch per catalog
 * op, its mutants (keel_kit_mutate), and drivers that say what a checker
 * makes of each launch. The drivers need nothing of the kit to call a
 * plugin, so the same sources drive the binaries of a commit before the kit
 * existed (record-before.sh).
 */
#ifndef KEEL_KITCASES_KC_H
#define KEEL_KITCASES_KC_H

#include <stdbool.h>
#include <stdint.h>

#include <keel/kit.h>

#define KC_MAX_T 16
#define KC_MAX_A 12

/* A valid launch of one op, built from its line of the case table. */
struct kc_case {
    int op;
    const char *text;
    keel_tensor_desc in[KC_MAX_T], out[KC_MAX_T];
    keel_attr attrs[KC_MAX_A];
    char names[KC_MAX_A][32];
    char strs[KC_MAX_A][64];
    int64_t ints[KC_MAX_A][KEEL_MAX_DIMS];
    double floats[KC_MAX_A][KEEL_MAX_DIMS];
    keel_kernel_args args;
};

/* The case of `op` (its key dtype is the one its table line implies);
 * -1 with a message when the table has no line for op or it does not
 * parse. */
int kc_case_build(int op, struct kc_case *c, char *err, size_t errsz);
/* The key dtype the op's kernel is looked up with (docs/ops.md). */
keel_dtype kc_key_dtype(const struct kc_case *c);

/* Verdicts. */
enum kc_verdict {
    KC_ACCEPTED = 0, /* OK                                              */
    KC_REJECTED,     /* INVALID_ARGUMENT or NOT_SUPPORTED               */
    KC_PASSED,       /* the CUDA entry passed its checks, then failed for
                      * lack of a device                                 */
    KC_OTHER,        /* another status (code in the text)                */
    KC_CRASH,        /* the driver's process died (signal in the text)   */
    KC_NONE          /* not run: no such kernel, or no driver             */
};

struct kc_result {
    enum kc_verdict v;
    int status;
};

const char *kc_verdict_text(struct kc_result r, char *buf, size_t n);
/* Parse what kc_verdict_text wrote; false for garbage. */
bool kc_verdict_parse(const char *s, struct kc_result *r);

/* A driver: set up once, then one call per launch. `valid` is the op's
 * valid launch (for lookups and buffer sizes), `a` the launch to run. */
struct kc_driver {
    const char *name;
    bool isolate; /* each op in a child process (kitcases main.c) */
    int (*setup)(const char *arg, char *err, size_t errsz);
    /* Prepare the data pointers of the valid launch `c` (in place) so that
     * every mutant fits; 0 or -1. */
    int (*prepare)(struct kc_case *c);
    struct kc_result (*run)(const struct kc_case *c,
                            const keel_kernel_args *a);
    void (*release)(struct kc_case *c);
};

extern const struct kc_driver kc_driver_kit;
extern const struct kc_driver kc_driver_cpu;
extern const struct kc_driver kc_driver_cuda; /* kc_cuda.c, or a stub */
extern const bool kc_have_cuda;

/* Generous byte size of a buffer for every mutant of descriptor d: each
 * dim +1, the widest dtype, times 4, plus 4 KiB. */
uint64_t kc_buffer_bytes(const keel_tensor_desc *d);

#endif /* KEEL_KITCASES_KC_H */
