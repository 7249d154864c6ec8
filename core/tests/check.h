/*
 * What the core suites share to check a keel call: OK(call) stops the
 * test when the call fails, printing keel's message; ERR(call, status,
 * part) asserts a failure with that status whose message holds `part`.
 */
#ifndef KEEL_TESTS_CHECK_H
#define KEEL_TESTS_CHECK_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <CUnit/Basic.h>

#include <keel/runtime.h>

static inline bool ok_(keel_status st, const char *what)
{
    if (st != KEEL_STATUS_OK)
        fprintf(stderr, "\n  %s: %s: %s\n", what, keel_status_name(st),
                keel_last_error());
    return st == KEEL_STATUS_OK;
}

static inline bool err_(keel_status st, keel_status want, const char *part,
                        const char *what)
{
    bool good = st == want && strstr(keel_last_error(), part);

    if (!good)
        fprintf(stderr, "\n  %s: got %s '%s', wanted %s with '%s'\n", what,
                keel_status_name(st), keel_last_error(),
                keel_status_name(want), part);
    return good;
}

/* One CUnit suite of `n` named tests, run verbosely; the exit status for
 * main (0 when every test passed). keel_shutdown() at the end. */
struct check_test {
    const char *name;
    CU_TestFunc fn;
};

static inline int check_run(const char *suite_name,
                            const struct check_test *tests, size_t n)
{
    CU_pSuite suite;
    unsigned failed;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    suite = CU_add_suite(suite_name, NULL, NULL);
    for (size_t i = 0; suite && i < n; i++)
        CU_add_test(suite, tests[i].name, tests[i].fn);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed() +
             CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return failed ? 1 : 0;
}

#define OK(call) CU_ASSERT_FATAL(ok_((call), #call))
#define ERR(call, want, part)                                                \
    CU_ASSERT(err_((call), (want), (part), #call))

#endif /* KEEL_TESTS_CHECK_H */
