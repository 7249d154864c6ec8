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

#define OK(call) CU_ASSERT_FATAL(ok_((call), #call))
#define ERR(call, want, part)                                                \
    CU_ASSERT(err_((call), (want), (part), #call))

#endif /* KEEL_TESTS_CHECK_H */
