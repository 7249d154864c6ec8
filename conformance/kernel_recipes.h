/*
 * keel conform — input recipes of the kernel area (kernel_recipes.c).
 *
 * A recipe is one or more cases per op, each a line of text:
 *
 *   "<input> <input> ... | name=value;name=value"
 *
 * An input is ROLE[dims] with optional modifiers:
 *
 *   ROLE   T the dtype under test, L int64, B bool, U uint8, F float32
 *   (lo,hi)  uniform range for float values        (default (-3,3))
 *   {lo,hi}  inclusive range for integer values    (default {-5,5};
 *            uint8 and bool clamp to their range; L defaults to {0,4})
 *   z      integer-valued floats        n  no zeros (|x| >= 0.5 for floats)
 *   u      distinct values (L only)     p  positive rows summing to 1
 *   w      max-pool indices: a position inside each output's window of
 *          input 0 (window = input size / output size)
 *   i      floats only: +inf, -inf and NaN written over the random values
 *          at three seeded positions (some may coincide)
 *
 * Attribute values are typed by the op's catalog spec; a dtype attribute
 * of "T" is the dtype under test. Ops without a recipe get the default of
 * their shape rule.
 */
#ifndef KEEL_CONFORM_KERNEL_RECIPES_H
#define KEEL_CONFORM_KERNEL_RECIPES_H

#include <stdbool.h>
#include <stdint.h>

#include <keel/device_api.h>

#define KR_MAX_CASES 10
#define KR_MAX_IN 8
#define KR_MAX_ATTR 12

struct kr_input {
    char role;
    int ndim;
    int64_t shape[KEEL_MAX_DIMS];
    bool has_range, has_irange;
    double lo, hi;
    int64_t ilo, ihi;
    bool intval, nonzero, unique, rowsum, window, nonfinite;
};

struct kr_case {
    const char *text;
    int nin;
    struct kr_input in[KR_MAX_IN];
    int nattr;
    char attr_name[KR_MAX_ATTR][32];
    char attr_val[KR_MAX_ATTR][96];
};

/** Number of cases for `op` (at least 1). */
int kr_case_count(int op);
/** Parse case k of `op`. Returns 0 or -1 with a message. */
int kr_case_parse(int op, int k, struct kr_case *c, char *err, size_t errsz);
/** Bitmask of inputs the op updates in place. */
uint32_t kr_mutated_inputs(int op, const struct kr_case *c);
/** Whether the op's shape rule broadcasts inputs against each other
 *  (1: all inputs to a common shape; 2: inputs 1.. to input 0's shape). */
int kr_broadcast_kind(int op);

#endif /* KEEL_CONFORM_KERNEL_RECIPES_H */
