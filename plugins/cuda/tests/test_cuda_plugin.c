/*
 * The CUDA plugin on a machine without a GPU or driver (CI, developer
 * machines): it must load, report 0 devices with the reason, and answer
 * every call with a status instead of crashing. On a machine with a GPU the
 * same suite checks the devices it finds instead.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <CUnit/Basic.h>
#include <keel/runtime.h>

static int cuda_index(keel_plugin_info *info)
{
    for (int i = 0; i < keel_plugin_count(); i++)
        if (keel_plugin_get_info(i, info) == KEEL_STATUS_OK && info->name &&
            !strcmp(info->name, "cuda"))
            return i;
    return -1;
}

static void test_identity(void)
{
    keel_plugin_info info;
    int idx = cuda_index(&info);
    const keel_plugin_api *api;

    CU_ASSERT_FATAL(idx >= 0);
    CU_ASSERT_TRUE_FATAL(info.loaded);
    CU_ASSERT_STRING_EQUAL(info.device_type, "gpu");
    CU_ASSERT_STRING_EQUAL(info.version, "0.1.0");
    CU_ASSERT_EQUAL(info.abi_major, KEEL_ABI_VERSION_MAJOR);
    api = keel_plugin_table(idx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
#ifdef KEEL_CUDA_HAVE_KERNELS
    CU_ASSERT_PTR_NOT_NULL_FATAL(api->kernel);
    {
        /* Without a device, lookup answers with a status, never a kernel. */
        keel_kernel k = {0};
        keel_status st = api->kernel->lookup(0, "add", KEEL_F32, &k);
        CU_ASSERT_NOT_EQUAL(st, KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(api->kernel->lookup(0, NULL, KEEL_F32, &k),
                        KEEL_STATUS_INVALID_ARGUMENT);
    }
#else
    CU_ASSERT_PTR_NULL(api->kernel); /* built without nvcc */
#endif
    CU_ASSERT_PTR_NULL(api->profiler);
    CU_ASSERT_PTR_NOT_NULL(api->memory->copy_peer_async);
    CU_ASSERT_TRUE(keel_is_compiled_with("cuda"));
    CU_ASSERT_TRUE(keel_is_compiled_with("gpu"));
}

static void test_no_driver_or_devices(void)
{
    keel_plugin_info info;
    keel_place pl;
    int idx = cuda_index(&info);

    CU_ASSERT_FATAL(idx >= 0);
    if (info.device_count > 0) {
        keel_device_props props;
        /* A GPU is present: its properties must be sane. */
        CU_ASSERT_EQUAL_FATAL(keel_place_parse("gpu:0", &pl),
                              KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(keel_device_get_props(pl, &props), KEEL_STATUS_OK);
        CU_ASSERT(props.total_memory > 0 && props.compute_units > 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(props.arch, "sm_"));
        return;
    }
    CU_ASSERT_EQUAL(keel_device_count("gpu"), 0);
    CU_ASSERT_EQUAL(keel_device_count("cuda"), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(info.reason);
    /* "no CUDA driver (...)" or "no CUDA device (...)". */
    CU_ASSERT_PTR_NOT_NULL(strstr(info.reason, "CUDA"));
    CU_ASSERT_EQUAL(keel_place_parse("gpu:0", &pl),
                    KEEL_STATUS_INVALID_DEVICE);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), info.reason));
}

static void test_raw_calls_answer_with_status(void)
{
    keel_plugin_info info;
    int idx = cuda_index(&info);
    const keel_plugin_api *api = keel_plugin_table(idx);
    keel_device_props props;
    keel_dptr d = 1;
    keel_stream s = NULL;
    int32_t n = -1;

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    if (info.device_count > 0)
        return; /* the calls below assume no device */
    CU_ASSERT_EQUAL(api->device->get_device_count(&n), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(api->device->get_device_count(NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    props.struct_size = sizeof(props);
    CU_ASSERT_EQUAL(api->device->get_device_props(0, &props),
                    KEEL_STATUS_INVALID_DEVICE);
    CU_ASSERT_EQUAL(api->device->get_device_props(0, NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(api->memory->alloc(0, 16, &d),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(d, 0);
    CU_ASSERT_EQUAL(api->memory->alloc(0, 16, NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(api->device->synchronize(0), KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->stream->stream_create(0, 0, &s),
                    KEEL_STATUS_NOT_INITIALIZED);
    if (api->collective) {
        keel_comm_id id;
        CU_ASSERT_EQUAL(api->collective->get_unique_id(&id),
                        KEEL_STATUS_NOT_INITIALIZED);
    }
    /* finalize + init again: still unavailable, still no device. */
    CU_ASSERT_EQUAL(api->device->finalize(), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(api->device->init(), KEEL_STATUS_UNAVAILABLE);
    CU_ASSERT_EQUAL(api->device->get_device_count(&n), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(n, 0);
}

/* Loading and initialising the plugin must not load cuBLAS: it is
 * dlopened on the first GEMM (k_linalg.cu), since mapping it costs about
 * 150 MB of resident memory in every process, GPU or not. */
static bool mapped(const char *name)
{
    char line[512];
    bool found = false;
    FILE *f = fopen("/proc/self/maps", "r");

    while (f && !found && fgets(line, sizeof(line), f))
        found = strstr(line, name) != NULL;
    if (f)
        fclose(f);
    return found;
}

static void test_cublas_not_loaded_at_init(void)
{
    keel_plugin_info info;
    int idx = cuda_index(&info);

    CU_ASSERT_TRUE_FATAL(idx >= 0);
    CU_ASSERT_TRUE(mapped("libkeel-cuda"));
    if (info.device_count > 0)
        return; /* a GPU run may have run a GEMM already */
    CU_ASSERT_FALSE(mapped("libcublas"));
}

int main(void)
{
    CU_pSuite suite;
    unsigned failed;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    suite = CU_add_suite("cuda", NULL, NULL);
    CU_add_test(suite, "identity", test_identity);
    CU_add_test(suite, "no driver or devices", test_no_driver_or_devices);
    CU_add_test(suite, "raw calls answer with a status",
                test_raw_calls_answer_with_status);
    CU_add_test(suite, "cuBLAS not loaded at init",
                test_cublas_not_loaded_at_init);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return failed ? 1 : 0;
}
