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
    int64_t ints[KT_MAX][KEEL_MAX_DIMS];
    double floats[KT_MAX][KEEL_MAX_DIMS];
    /* Output strides as kt_out made them: kt_run recomputes row-major
     * strides for an output whose strides a test did not touch, so that
     * changing an output's shape changes only its shape. */
    int64_t out_made[KT_MAX][KEEL_MAX_DIMS];
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
