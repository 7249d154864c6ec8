/*
 * The Level Zero kernel backend (ze_kernels.c) on the stand-in driver
 * (ze_mock.c, linked in instead of the loader): the embedded SPIR-V module
 * reaches zeModuleCreate, buffer arguments are checked against the live
 * allocations, launches are appended, and scratch buffers released behind
 * pending work are freed only once that work has run. Kernels do not run
 * under the mock, so no result is checked here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>

#include "ok.h"
#include "ze_internal.h"

static char last_msg[1024];
static keel_status last_st;

static void set_error(keel_status st, const char *msg)
{
    last_st = st;
    snprintf(last_msg, sizeof(last_msg), "%s", msg);
}
static void log_fn(keel_log_level l, const char *m)
{
    (void)l, (void)m;
}
static const char *get_env(const char *n)
{
    return getenv(n);
}

static const keel_host_api host = {
    .header = KEEL_TABLE_HEADER(keel_host_api),
    .set_error = set_error,
    .log = log_fn,
    .get_env = get_env,
};
static const keel_plugin_api *api;

static size_t deferred_count(int32_t device)
{
    size_t n = 0;
    pthread_mutex_lock(&ze_g.dev[device].mu);
    for (struct ze_deferred *d = ze_g.dev[device].deferred; d; d = d->next)
        n++;
    pthread_mutex_unlock(&ze_g.dev[device].mu);
    return n;
}

static void test_launch(void)
{
    keel_dptr x = 0;
    keel_kernel_args a = {.struct_size = sizeof(a), .device = 0};
    struct ok_launch l = {.device = 0, .op = "test"};
    struct ok_kdesc kd = {.shape = {256}, .stride = {1}, .ndim = 1};
    ok_mem m = NULL;
    keel_kernel k;

    CU_ASSERT_EQUAL_FATAL(api->memory->alloc(0, 1024, &x), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(ok_backend_begin(&a, &l), KEEL_STATUS_OK);
    CU_ASSERT_PTR_NOT_NULL(l.queue);
    CU_ASSERT_PTR_NOT_NULL(l.dev);
    CU_ASSERT_EQUAL(l.fp64, true); /* the mock declares FP64 */
    CU_ASSERT_EQUAL_FATAL(ok_scratch(&l, 1024, &m), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(OK_RUN(&l, "copy_strided_4", 256, OK_BUF(&l, x, 1024),
                           OK_DESC(&kd), OK_MEM(m), OK_I64(256)),
                    KEEL_STATUS_OK);
    /* with a local size: rounded up, still fine */
    CU_ASSERT_EQUAL(OK_RUN_WG(&l, "copy_strided_4", 250, 64,
                              OK_BUF(&l, x, 1000), OK_DESC(&kd), OK_MEM(m),
                              OK_I64(250)),
                    KEEL_STATUS_OK);
    /* a zero global size enqueues nothing */
    CU_ASSERT_EQUAL(OK_RUN(&l, "copy_strided_4", 0, OK_BUF(&l, x, 0),
                           OK_DESC(&kd), OK_MEM(m), OK_I64(0)),
                    KEEL_STATUS_OK);

    /* a buffer running past its allocation is refused, with a message */
    last_msg[0] = '\0';
    CU_ASSERT_EQUAL(OK_RUN(&l, "copy_strided_4", 256, OK_BUF(&l, x, 1025),
                           OK_DESC(&kd), OK_MEM(m), OK_I64(256)),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(last_msg, "not inside a live allocation"));
    CU_ASSERT_PTR_NOT_NULL(strstr(last_msg, "xpu:0"));
    /* and so is a pointer this device did not allocate */
    CU_ASSERT_EQUAL(OK_RUN(&l, "copy_strided_4", 4,
                           OK_BUF(&l, (keel_dptr)(uintptr_t)&kd, 16),
                           OK_DESC(&kd), OK_MEM(m), OK_I64(4)),
                    KEEL_STATUS_INVALID_ARGUMENT);

    /* the scratch buffer is freed only after the stream's work */
    ok_scratch_release(&l, m);
    CU_ASSERT(deferred_count(0) <= 1);
    CU_ASSERT_EQUAL(api->device->synchronize(0), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(deferred_count(0), 0);

    /* tables: upload, then release */
    int64_t table[4] = {1, 2, 3, 4};
    CU_ASSERT_EQUAL_FATAL(ok_scratch_upload(&l, table, sizeof(table), &m),
                          KEEL_STATUS_OK);
    /* the mock's device memory is host memory, and a scratch buffer starts
     * with its pointer (struct ok_mem_s, ze_kernels.c) */
    CU_ASSERT_EQUAL(memcmp(*(void **)m, table, sizeof(table)), 0);
    ok_scratch_release(&l, m);
    CU_ASSERT_EQUAL(api->device->synchronize(0), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(deferred_count(0), 0);

    /* the lookup is the shared one; no BLAS */
    CU_ASSERT_EQUAL(api->kernel->lookup(0, "no_such_op", KEEL_F32, &k),
                    KEEL_STATUS_NOT_FOUND);
    CU_ASSERT_EQUAL(api->kernel->lookup(7, "add", KEEL_F32, &k),
                    KEEL_STATUS_INVALID_DEVICE);
    struct ok_gemm g = {.dtype = KEEL_F32, .m = 1, .n = 1, .k = 1, .batch = 1};
    CU_ASSERT_EQUAL(ok_backend_gemm(&l, &g), KEEL_STATUS_NOT_SUPPORTED);
    CU_ASSERT_STRING_EQUAL(ok_backend_blas_name(), "");

    CU_ASSERT_EQUAL(api->memory->free(0, x), KEEL_STATUS_OK);
}

static void test_bad_stream(void)
{
    keel_kernel_args a = {.struct_size = sizeof(a), .device = 0,
                          .stream = (keel_stream)(uintptr_t)0x1000};
    struct ok_launch l = {.device = 0, .op = "test"};

    CU_ASSERT_EQUAL(ok_backend_begin(&a, &l), KEEL_STATUS_INVALID_HANDLE);
    a.stream = NULL;
    a.device = 5;
    CU_ASSERT_EQUAL(ok_backend_begin(&a, &l), KEEL_STATUS_INVALID_DEVICE);
}

int main(void)
{
    CU_pSuite suite;
    unsigned failed;
    int32_t n = 0;

    api = keel_plugin_get_api(KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
                              &host);
    if (!api || api->device->get_device_count(&n) || n < 1 ||
        api->device->init()) {
        fprintf(stderr, "the plugin did not start on the mock: %s\n",
                last_msg);
        return 1;
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    suite = CU_add_suite("xpu-kernels-mock", NULL, NULL);
    CU_add_test(suite, "module, arguments, launches, scratch", test_launch);
    CU_add_test(suite, "bad stream and device", test_bad_stream);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    api->device->finalize();
    return failed ? 1 : 0;
}
