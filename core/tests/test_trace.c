/*
 * The trace recorder's API (keel_trace_start/stop): its errors, what one
 * small trace holds, that it is independent of the profiler switch, and
 * that a file that cannot be written is an IO_ERROR that leaves no
 * temporary file behind. The end-to-end trace of LeNet training, checked
 * as a viewer reads it, is the example-mnist-trace test.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include <keel/ops.h>

#include "check.h"

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;

    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
        fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
        if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        } else {
            buf[n] = '\0';
        }
    }
    fclose(f);
    return buf;
}

static void test_errors(void)
{
    ERR(keel_trace_stop(), KEEL_STATUS_INVALID_STATE, "no trace");
    ERR(keel_trace_start(NULL), KEEL_STATUS_INVALID_ARGUMENT, "NULL");
    ERR(keel_trace_start(""), KEEL_STATUS_INVALID_ARGUMENT, "empty");
}

static void test_small_trace(void)
{
    char path[] = "keel-trace-test.json";
    int64_t shape[2] = {3, 4};
    keel_tensor *a = NULL, *b = NULL, *c = NULL;
    float host[12];
    char tmp[64], *text;

    remove(path);
    OK(keel_trace_start(path));
    ERR(keel_trace_start(path), KEEL_STATUS_INVALID_STATE, "already");
    /* The profiler's switch shares the trace's: stopping it must not stop
     * the trace. */
    keel_profile_start(false);
    keel_profile_stop();
    OK(keel_ones(2, shape, KEEL_F32, "cpu:0", &a));
    OK(keel_ones(2, shape, KEEL_F32, "cpu:0", &b));
    OK(keel_add(a, b, &c));
    OK(keel_tensor_to_host(c, host, sizeof(host)));
    OK(keel_device_synchronize((keel_place){0, 0}));
    OK(keel_trace_stop());
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    CU_ASSERT_EQUAL(access(tmp, F_OK), -1);
    text = slurp(path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "{\"traceEvents\":["));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"name\":\"add\",\"cat\":\"op\","
                                        "\"ph\":\"X\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"shape\":\"[3,4]\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"dtype\":\"float32\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"cat\":\"sync\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"name\":\"synchronize\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"host thread 1\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"dropped_events\":0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"displayTimeUnit\":\"ms\""));
    free(text);
    ERR(keel_trace_stop(), KEEL_STATUS_INVALID_STATE, "no trace");
    keel_tensor_free(a);
    keel_tensor_free(b);
    keel_tensor_free(c);
    remove(path);
}

static void test_unwritable(void)
{
    const char *path = "no-such-folder-for-keel/trace.json";
    int64_t shape[1] = {2};
    keel_tensor *z = NULL;

    OK(keel_trace_start(path));
    OK(keel_zeros(1, shape, KEEL_F32, "cpu:0", &z));
    ERR(keel_trace_stop(), KEEL_STATUS_IO_ERROR, "no-such-folder-for-keel");
    keel_tensor_free(z);
    /* Recording stopped all the same: a new trace can start. */
    ERR(keel_trace_stop(), KEEL_STATUS_INVALID_STATE, "no trace");
}

int main(void)
{
    CU_pSuite suite;
    unsigned failed;

    if (keel_set_device("cpu:0") != KEEL_STATUS_OK) {
        fprintf(stderr, "cpu:0: %s\n", keel_last_error());
        return 1;
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    suite = CU_add_suite("trace", NULL, NULL);
    if (suite) {
        CU_add_test(suite, "errors", test_errors);
        CU_add_test(suite, "a small trace", test_small_trace);
        CU_add_test(suite, "an unwritable path", test_unwritable);
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return failed ? 1 : 0;
}
