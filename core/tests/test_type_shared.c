/*
 * Two plugins claiming one device type ("xpu"): the Level Zero plugin
 * (plugin "levelzero", 0 devices on a machine without Intel's driver) and
 * a test plugin "kunlun_test" with one device (core/tests/xputype).
 *
 *   test_type_shared both   both on KEEL_PLUGIN_PATH, in either order:
 *                           "xpu:0" is kunlun_test's device 0,
 *                           "levelzero:0" fails naming levelzero's reason
 *                           for having no device, "kunlun_test:0" works
 *   test_type_shared only   only the Level Zero plugin: "xpu:0" fails
 *                           with the reason
 *
 * On a machine where the Level Zero plugin finds a GPU the premise does
 * not hold and the program exits 77 (skipped).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>
#include <keel/runtime.h>

static int lz = -1, other = -1; /* plugin indices */
static const char *lz_reason;

static void find_plugins(void)
{
    lz = other = -1;
    lz_reason = NULL;
    for (int i = 0; i < keel_plugin_count(); i++) {
        keel_plugin_info info;
        if (keel_plugin_get_info(i, &info) != KEEL_STATUS_OK || !info.name)
            continue;
        if (!strcmp(info.name, "levelzero")) {
            lz = i;
            lz_reason = info.reason;
        } else if (!strcmp(info.name, "kunlun_test")) {
            other = i;
        }
    }
}

static void test_both_loaded(void)
{
    keel_plugin_info a, b;

    CU_ASSERT_FATAL(lz >= 0);
    CU_ASSERT_FATAL(other >= 0);
    CU_ASSERT_FATAL(keel_plugin_get_info(lz, &a) == KEEL_STATUS_OK);
    CU_ASSERT_FATAL(keel_plugin_get_info(other, &b) == KEEL_STATUS_OK);
    CU_ASSERT(a.loaded);
    CU_ASSERT(b.loaded);
    CU_ASSERT_STRING_EQUAL(a.device_type, "xpu");
    CU_ASSERT_STRING_EQUAL(b.device_type, "xpu");
    CU_ASSERT_EQUAL(a.device_count, 0);
    CU_ASSERT_EQUAL(b.device_count, 1);
    /* the reason Level Zero gave for 0 devices is kept */
    CU_ASSERT_PTR_NOT_NULL_FATAL(a.reason);
    CU_ASSERT_PTR_NOT_NULL(strstr(a.reason, "Level Zero"));
}

static void test_type_lands_on_plugin_with_devices(void)
{
    keel_place pl = {-1, -1};
    char name[64];

    CU_ASSERT_FATAL(other >= 0);
    CU_ASSERT_EQUAL(keel_device_count("xpu"), 1);
    CU_ASSERT(keel_is_available("xpu"));
    CU_ASSERT_EQUAL_FATAL(keel_place_parse("xpu:0", &pl), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(pl.plugin, other); /* not the first loaded: levelzero */
    CU_ASSERT_NOT_EQUAL(pl.plugin, lz);
    CU_ASSERT_EQUAL(pl.device, 0);

    CU_ASSERT_EQUAL_FATAL(keel_set_device("xpu:0"), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_current_place(&pl), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(pl.plugin, other);
    CU_ASSERT_EQUAL(pl.device, 0);
    CU_ASSERT_STRING_EQUAL(keel_get_device(), "xpu:0");
    CU_ASSERT_EQUAL(keel_place_name(pl, name, sizeof(name)), KEEL_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(name, "xpu:0");

    /* the plugin stays reachable by its own name */
    CU_ASSERT_EQUAL_FATAL(keel_set_device("kunlun_test:0"), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_current_place(&pl), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(pl.plugin, other);
}

static void test_levelzero_by_name_says_why(void)
{
    keel_place pl;
    const char *err;

    CU_ASSERT_FATAL(lz >= 0);
    CU_ASSERT_EQUAL_FATAL(keel_set_device("xpu:0"), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_device_count("levelzero"), 0);
    CU_ASSERT(keel_is_compiled_with("levelzero"));
    CU_ASSERT(!keel_is_available("levelzero"));
    CU_ASSERT_EQUAL(keel_set_device("levelzero:0"), KEEL_STATUS_INVALID_DEVICE);
    err = keel_last_error();
    CU_ASSERT_PTR_NOT_NULL_FATAL(err);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "levelzero:0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "plugin levelzero"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(lz_reason);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, lz_reason));
    /* a failed selection leaves the current device alone */
    CU_ASSERT_EQUAL_FATAL(keel_current_place(&pl), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(pl.plugin, other);
    /* and the canonical name of levelzero's (absent) device is by plugin */
    char name[64];
    keel_place lzp = {lz, 0};
    CU_ASSERT_EQUAL(keel_place_name(lzp, name, sizeof(name)), KEEL_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(name, "levelzero:0");
}

static void test_only_levelzero(void)
{
    keel_place pl = {-1, -1};
    const char *err;

    CU_ASSERT_FATAL(lz >= 0);
    CU_ASSERT_EQUAL(other, -1);
    CU_ASSERT(keel_is_compiled_with("xpu"));
    CU_ASSERT(!keel_is_available("xpu"));
    CU_ASSERT_EQUAL(keel_device_count("xpu"), 0);
    CU_ASSERT_EQUAL(keel_place_parse("xpu:0", &pl), KEEL_STATUS_INVALID_DEVICE);
    CU_ASSERT_EQUAL(keel_set_device("xpu:0"), KEEL_STATUS_INVALID_DEVICE);
    err = keel_last_error();
    CU_ASSERT_PTR_NOT_NULL_FATAL(err);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "xpu:0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "plugin levelzero"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(lz_reason);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, lz_reason));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "Level Zero"));
}

int main(int argc, char **argv)
{
    bool both = argc > 1 && !strcmp(argv[1], "both");
    bool only = argc > 1 && !strcmp(argv[1], "only");
    CU_pSuite suite;
    unsigned failed;

    if (!both && !only) {
        fprintf(stderr, "usage: test_type_shared both|only\n");
        return 2;
    }
    if (keel_init() != KEEL_STATUS_OK)
        return 2;
    find_plugins();
    if (lz >= 0 && keel_device_count("levelzero") > 0) {
        printf("SKIP: the Level Zero plugin found %d device(s); this test "
               "needs a machine without Intel's driver\n",
               keel_device_count("levelzero"));
        keel_shutdown();
        return 77;
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    suite = CU_add_suite(both ? "type-shared" : "type-only-levelzero", NULL,
                         NULL);
    if (both) {
        CU_add_test(suite, "both plugins load", test_both_loaded);
        CU_add_test(suite, "xpu:0 lands on the plugin with devices",
                    test_type_lands_on_plugin_with_devices);
        CU_add_test(suite, "levelzero:0 says why it has no device",
                    test_levelzero_by_name_says_why);
    } else {
        CU_add_test(suite, "xpu:0 fails with the reason",
                    test_only_levelzero);
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return failed ? 1 : 0;
}
