/*
 * Helpers of the kit tests: build a launch in a few lines and assert what
 * keel_kit_check says of it.
 *
 *     struct kt k;
 *     kt_init(&k, KEEL_OP_CONCAT);
 *     kt_in(&k, KEEL_F32, 2, (int64_t[]){2, 3});
 *     kt_out(&k, KEEL_F32, 2, (int64_t[]){4, 3});
 *     kt_attr_i(&k, "axis", 0);
 *     KT_OK(&k);              accepted
 *     KT_BAD(&k, "axis");     refused, the message contains "axis"
 */
#ifndef KEEL_KIT_TESTLIB_H
#define KEEL_KIT_TESTLIB_H

#include <CUnit/CUnit.h>

#include <keel/kit.h>

#define KT_MAX 16

struct kt {
    int op;
    keel_tensor_desc in[KT_MAX], out[KT_MAX];
    int nin, nout, nattr;
    keel_attr attr[KT_MAX];
    int64_t ints[KT_MAX][KT_MAX];
    double floats[KT_MAX][KT_MAX];
    /* Output strides as kt_out made them: kt_run recomputes row-major
     * strides for an output whose strides a test did not touch, so that
     * changing an output's shape changes only its shape. */
    int64_t out_made[KT_MAX][KEEL_MAX_DIMS];
    /* Attribute names and strings that kt_spec copied out of a spec. */
    char pool[2 * KT_MAX][48];
    int npool;
    keel_kernel_args a;
    keel_kit_msg msg;
};

void kt_init(struct kt *k, int op);
/* A contiguous descriptor (row-major strides); returns it for tweaks. */
keel_tensor_desc *kt_in(struct kt *k, keel_dtype dt, int ndim,
                        const int64_t *shape);
keel_tensor_desc *kt_out(struct kt *k, keel_dtype dt, int ndim,
                         const int64_t *shape);
void kt_attr_i(struct kt *k, const char *name, int64_t v);
void kt_attr_b(struct kt *k, const char *name, int v);
void kt_attr_f(struct kt *k, const char *name, double v);
void kt_attr_s(struct kt *k, const char *name, const char *v);
void kt_attr_dt(struct kt *k, const char *name, keel_dtype v);
void kt_attr_ints(struct kt *k, const char *name, int n, const int64_t *v);
void kt_attr_floats(struct kt *k, const char *name, int n, const double *v);
/*
 * kt_init(k, op), then the launch that `spec` writes: inputs, then ">"
 * and the outputs, then "|" and the attributes, separated by spaces.
 *
 *     "2,3,9,9 4,3,3,3:i64 > 2,4,7,7 | axis=-1 keepdim=true"
 *
 * A tensor is its dims ("2,3"; "()" for 0-d), contiguous, of dtype dt
 * or of the one after a colon (f32 f64 f16 bf16 i8 u8 i32 i64 bool);
 * "@" and strides after the dims set them ("4,3@1,0"). An attribute is
 * name=value: an int (-1), a float (2.0, 1e-05, inf, nan: a dot, an
 * exponent or a name of a float), a bool (true, false), ints ([2,2,3],
 * [] empty), floats ([0.5,2.0], f[] empty), a dtype (:i64) or a string
 * (reflect, or 'quoted'). Unparsable specs abort the test program.
 */
void kt_spec(struct kt *k, int op, keel_dtype dt, const char *spec);

/*
 * One assert per line of `script`, each on a fresh launch:
 *
 *     "ok SPEC\n"           accepted
 *     "bad SPEC ! NEEDLE\n" refused, the message contains NEEDLE
 *     "bad SPEC\n"          refused
 *
 * SPEC as kt_spec's with op and dt. A failing case is printed with the
 * file and line of the call.
 */
void kt_cases(int op, keel_dtype dt, const char *script, const char *file,
              int line);
#define KT_CASES(op, dt, script)                                             \
    kt_cases((op), (dt), (script), __FILE__, __LINE__)

/* Run the check; the status. */
keel_status kt_run(struct kt *k);
/* Whether the check's status is `want` (for want == -1: anything but OK)
 * and its message contains `needle` (when not NULL). No CUnit side
 * effects. */
bool kt_verdict(struct kt *k, int want, const char *needle);
/* Print and register a failure naming the case when `st` is not `want`
 * (or, for want == -1, when it is OK) or when the message lacks `needle`. */
void kt_expect(struct kt *k, int want, const char *needle, const char *file,
               int line);

#define KT_OK(k) kt_expect((k), KEEL_STATUS_OK, NULL, __FILE__, __LINE__)
#define KT_BAD(k, needle)                                                    \
    kt_expect((k), KEEL_STATUS_INVALID_ARGUMENT, (needle), __FILE__, __LINE__)

/* Run the suite `name` of `tests` ({NULL, NULL}-terminated); the exit
 * status for main. */
int kt_main(const char *name, const CU_TestInfo *tests);

#endif /* KEEL_KIT_TESTLIB_H */
