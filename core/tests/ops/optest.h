/*
 * Helpers for the op tests: seeded random inputs, float64 host copies,
 * non-contiguous variants of a tensor, and comparison against a float64
 * reference with the per-dtype tolerances below (the one place they are
 * defined; docs/testing.md quotes them).
 *
 * A reference is always computed here in the test tree, in double, from
 * the host copies of the inputs; it never calls the kernel under test.
 */
#ifndef KEEL_OPTEST_H
#define KEEL_OPTEST_H

#include <stdbool.h>
#include <stdint.h>

#include <CUnit/Basic.h>
#include <keel/ops.h>

/* Tolerances: |got - ref| <= atol + rtol * |ref|. Integers and bool must
 * match exactly. NaN matches NaN; infinities must match in sign. */
typedef struct ot_tol {
    double rtol, atol;
} ot_tol;

ot_tol ot_tolerance(keel_dtype dt);

/* The float dtypes, and every dtype, for loops. */
extern const keel_dtype ot_float_dtypes[4];
extern const keel_dtype ot_all_dtypes[9];

/* Random tensor on the current device: floats uniform in [lo, hi),
 * integers uniform in [lo, hi), bool 0/1. Uses the seeded generator. */
keel_tensor *ot_rand(keel_dtype dt, int ndim, const int64_t *shape, double lo,
                     double hi);

/* A tensor from double values (converted to dt). */
keel_tensor *ot_from(keel_dtype dt, int ndim, const int64_t *shape,
                     const double *values);

/* Row-major float64 copy of a tensor's elements (caller frees). Values
 * are the ones the tensor holds, after rounding to its dtype. */
double *ot_host(const keel_tensor *t);

/* Same values and shape, different layout:
 *   OT_CONTIG      a contiguous copy
 *   OT_TRANSPOSED  storage laid out with the axes reversed (a permuted
 *                  view of another tensor)
 *   OT_STRIDED     every other element of a larger tensor (a step-2 slice
 *                  of the last axis)
 * Returns a new reference. */
enum ot_layout { OT_CONTIG = 0, OT_TRANSPOSED = 1, OT_STRIDED = 2 };
keel_tensor *ot_layout(const keel_tensor *x, enum ot_layout layout);

/* Compare `got` (any dtype) with ref[numel] using tol(dt). Asserts with
 * CUnit and prints the first mismatch (index, got, ref, what). */
bool ot_check(const char *what, const keel_tensor *got, const double *ref,
              keel_dtype dt);

/* Check shape equality; asserts and prints on mismatch. */
bool ot_check_shape(const char *what, const keel_tensor *t, int ndim,
                    const int64_t *shape);

/* Round a double to what dtype dt can hold (for references of ops whose
 * inputs were first converted). */
double ot_round(double v, keel_dtype dt);

/* The fused ops' activation `act` (keel/op_catalog.h's names) applied to
 * y by the catalog op it means: relu, relu6, gelu (approximate 0),
 * gelu_tanh (gelu, approximate 1), silu, sigmoid, tanh, leaky_relu
 * (negative_slope alpha), hardswish; "none" gives a new reference to y.
 * INVALID_ARGUMENT for another name. */
keel_status ot_activation(const keel_tensor *y, const char *act, double alpha,
                          keel_tensor **out);

/* got holds want's values to within max_ulp units in the last place of
 * dt (0: the same bits, sign of zero included; NaN matches NaN). Asserts;
 * prints the first element beyond max_ulp and, when max_ulp > 0, how many
 * elements are not bit for bit the same. */
bool ot_check_ulp(const char *what, const keel_tensor *got,
                  const keel_tensor *want, keel_dtype dt, int max_ulp);

/* Register and run a suite of tests (name, fn pairs), print CUnit's
 * summary, return the process exit code. */
typedef struct ot_test {
    const char *name;
    CU_TestFunc fn;
} ot_test;
int ot_main(const char *suite, const ot_test *tests, int n);

/* Assert a call fails with `status` and a message containing `part`. */
#define OT_EXPECT_ERROR(call, status, part)                                  \
    do {                                                                     \
        keel_status st_ = (call);                                            \
        CU_ASSERT_EQUAL(st_, (status));                                      \
        if (st_ != (status) || !strstr(keel_last_error(), (part)))           \
            fprintf(stderr, "\n  %s: status %s, message '%s' (want '%s')\n", \
                    #call, keel_status_name(st_), keel_last_error(), part);  \
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), (part)));           \
    } while (0)

#endif
