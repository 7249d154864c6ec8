/*
 * Loading the CUDA plugin must not map its heavy vendor libraries: NCCL
 * is dlopened by the first collective call and cuBLAS by the first GEMM.
 * Read from /proc/self/maps after discovery has loaded and initialised the
 * plugin. Without a GPU (CI) that is all it can show, plus that a
 * collective call without a device answers with a status and still loads
 * nothing. With a GPU it also checks that the first collective call does
 * load NCCL, so the lazy path is exercised where it can be.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <CUnit/Basic.h>
#include <keel/runtime.h>

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

static int cuda_index(keel_plugin_info *info)
{
    for (int i = 0; i < keel_plugin_count(); i++)
        if (keel_plugin_get_info(i, info) == KEEL_STATUS_OK && info->name &&
            !strcmp(info->name, "cuda"))
            return i;
    return -1;
}

static void test_nothing_heavy_mapped_at_load(void)
{
    keel_plugin_info info;
    int idx = cuda_index(&info);

    CU_ASSERT_FATAL(idx >= 0);
    CU_ASSERT_TRUE_FATAL(info.loaded);
    CU_ASSERT_TRUE(mapped("libkeel-cuda"));
    CU_ASSERT_FALSE(mapped("libnccl"));
    CU_ASSERT_FALSE(mapped("libcublas"));
}

static void test_first_collective_loads_nccl(void)
{
    keel_plugin_info info;
    const keel_plugin_api *api;
    keel_comm_id id;
    keel_place pl;
    int idx = cuda_index(&info);

    CU_ASSERT_FATAL(idx >= 0);
    api = keel_plugin_table(idx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    if (!api->collective) {
        printf("SKIPPED (not counted): built without NCCL\n");
        return;
    }
    if (info.device_count == 0) {
        /* No device: refused before NCCL is needed. */
        CU_ASSERT_NOT_EQUAL(api->collective->get_unique_id(&id),
                            KEEL_STATUS_OK);
        CU_ASSERT_NOT_EQUAL(api->collective->group_start(), KEEL_STATUS_OK);
        CU_ASSERT_FALSE(mapped("libnccl"));
        printf("SKIPPED (not counted): no GPU, so the first collective "
               "call loading NCCL is not exercised\n");
        return;
    }
    CU_ASSERT_EQUAL_FATAL(keel_place_parse("cuda:0", &pl), KEEL_STATUS_OK);
    if (keel_comm_get_unique_id(pl, &id) != KEEL_STATUS_OK)
        fprintf(stderr, "\n  %s\n", keel_last_error());
    CU_ASSERT_EQUAL(keel_comm_get_unique_id(pl, &id), KEEL_STATUS_OK);
    CU_ASSERT_TRUE(mapped("libnccl"));
}

int main(void)
{
    CU_pSuite suite;
    unsigned failed;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    suite = CU_add_suite("cuda-lazy", NULL, NULL);
    CU_add_test(suite, "nothing heavy mapped at load",
                test_nothing_heavy_mapped_at_load);
    CU_add_test(suite, "the first collective call loads NCCL",
                test_first_collective_loads_nccl);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return failed ? 1 : 0;
}
