/*
 * The GPU plugins' kernel tables against the op catalog, without a GPU
 * (built once with the CUDA plugin's objects, once with the HIP plugin's:
 * the same kernel sources, plugins/gpu/kernels):
 * every registration names a catalog op, claims only dtypes the op
 * defines (and the plugin's devices compute with), has a function, and no
 * (op, dtype) pair is registered twice. Prints the coverage: which
 * catalog (op, dtype) pairs have a CUDA kernel and which ops have none.
 * Linked with the plugin's own objects (the tables are not exported).
 *
 *   (no argument)      the CUnit suite
 *   --dump FILE        write every registered (op, dtype) pair, one
 *                      "op dtype" line each in catalog order, and exit
 *   --compare FILE     the suite, plus: every pair listed in FILE (another
 *                      build's --dump) is registered here; the pairs
 *                      missing and the extra ones are printed
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>

#define KEEL_OP_CATALOG_DEFINE_TABLE
#include <keel/op_catalog.h>

#include "ck.h"

#ifndef KEEL_TEST_GPU_NAME
#define KEEL_TEST_GPU_NAME "CUDA"
#endif

static const char *compare_file;

/* The dtypes the plugin reports in dtype_mask (cuda_plugin.c). */
#define PLUGIN_DTYPES ((UINT32_C(1) << KEEL_DTYPE_COUNT_) - 1)

static const struct {
    const char *name;
    const struct ck_entry *table;
} tables[] = {
    {"core", ck_kernels_core},     {"elementwise", ck_kernels_elementwise},
    {"reduce", ck_kernels_reduce}, {"linalg", ck_kernels_linalg},
    {"conv", ck_kernels_conv},     {"nn", ck_kernels_nn},
    {"manip", ck_kernels_manip},
};
#define NTABLES (sizeof(tables) / sizeof(tables[0]))

static int op_index(const char *name)
{
    for (int i = 0; i < KEEL_OP_COUNT; i++)
        if (!strcmp(keel_op_table[i].name, name))
            return i;
    return -1;
}

/* The dtypes registered for catalog op `op`, over every table. */
static uint32_t registered(int op)
{
    uint32_t m = 0;

    for (size_t t = 0; t < NTABLES; t++)
        for (const struct ck_entry *e = tables[t].table; e->op; e++)
            if (!strcmp(e->op, keel_op_table[op].name))
                m |= e->dtypes;
    return m;
}

static void test_entries_valid(void)
{
    uint32_t seen[KEEL_OP_COUNT] = {0};
    int entries = 0;

    for (size_t t = 0; t < NTABLES; t++)
        for (const struct ck_entry *e = tables[t].table; e->op; e++) {
            int op = op_index(e->op);

            entries++;
            if (op < 0) {
                printf("\n  %s table: \"%s\" is not a catalog op", tables[t].name,
                       e->op);
                CU_FAIL("registration names an op outside the catalog");
                continue;
            }
            CU_ASSERT_PTR_NOT_NULL(e->fn);
            CU_ASSERT_NOT_EQUAL(e->dtypes, 0);
            if (e->dtypes & ~keel_op_table[op].dtype_mask) {
                printf("\n  %s: dtype mask 0x%x claims dtypes the catalog "
                       "does not define (0x%x)", e->op, (unsigned)e->dtypes,
                       (unsigned)keel_op_table[op].dtype_mask);
                CU_FAIL("dtype outside the catalog's mask");
            }
            CU_ASSERT_EQUAL(e->dtypes & ~PLUGIN_DTYPES, 0);
            if (seen[op] & e->dtypes) {
                printf("\n  %s: dtypes 0x%x registered twice", e->op,
                       (unsigned)(seen[op] & e->dtypes));
                CU_FAIL("(op, dtype) registered twice");
            }
            seen[op] |= e->dtypes;
        }
    CU_ASSERT(entries > 0);
}

static void test_core_kernels_present(void)
{
    /* Every tensor needs these on its own device. */
    static const char *const need[] = {"copy", "full", "cast"};
    uint32_t all = 0;

    for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
        int op = op_index(need[i]);

        all = registered(op);
        CU_ASSERT_EQUAL(all, keel_op_table[op].dtype_mask & PLUGIN_DTYPES);
    }
}

/* Coverage report; asserts only that the counts are consistent. */
static void test_coverage(void)
{
    uint32_t have[KEEL_OP_COUNT] = {0};
    int pairs = 0, covered = 0, ops_full = 0, ops_none = 0;
    char none[2048] = "", part[4096] = "";

    for (int op = 0; op < KEEL_OP_COUNT; op++)
        have[op] = registered(op);
    for (int op = 0; op < KEEL_OP_COUNT; op++) {
        uint32_t want = keel_op_table[op].dtype_mask & PLUGIN_DTYPES;
        int n = __builtin_popcount(want), c = __builtin_popcount(have[op] &
                                                                 want);

        pairs += n;
        covered += c;
        if (c == n)
            ops_full++;
        else if (c == 0) {
            ops_none++;
            snprintf(none + strlen(none), sizeof(none) - strlen(none), " %s",
                     keel_op_table[op].name);
        } else {
            snprintf(part + strlen(part), sizeof(part) - strlen(part),
                     " %s(%d/%d)", keel_op_table[op].name, c, n);
        }
    }
    printf("\n  " KEEL_TEST_GPU_NAME " kernels: %d of %d catalog (op, dtype) pairs; %d of %d "
           "ops complete, %d without a kernel", covered, pairs, ops_full,
           KEEL_OP_COUNT, ops_none);
    if (*none)
        printf("\n  no kernel:%s", none);
    if (*part)
        printf("\n  some dtypes:%s", part);
    CU_ASSERT(covered <= pairs);
    CU_ASSERT(covered > 0);
}

static int dump(const char *path)
{
    FILE *f = fopen(path, "w");
    int bad;

    if (!f) {
        perror(path);
        return 1;
    }
    for (int op = 0; op < KEEL_OP_COUNT; op++) {
        uint32_t m = registered(op);

        for (int dt = 0; dt < KEEL_DTYPE_COUNT_; dt++)
            if (m & (UINT32_C(1) << dt))
                fprintf(f, "%s %s\n", keel_op_table[op].name,
                        keel_kit_dtype_name((keel_dtype)dt));
    }
    bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "%s: write failed\n", path);
        return 1;
    }
    return 0;
}

static int dtype_of(const char *name)
{
    for (int dt = 0; dt < KEEL_DTYPE_COUNT_; dt++)
        if (!strcmp(keel_kit_dtype_name((keel_dtype)dt), name))
            return dt;
    return -1;
}

/* Every pair of the other build's dump is registered here. */
static void test_same_as_other_build(void)
{
    FILE *f = fopen(compare_file, "r");
    uint32_t listed[KEEL_OP_COUNT] = {0};
    char opn[64], dtn[32];
    int pairs = 0, missing = 0, extra = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    while (fscanf(f, "%63s %31s", opn, dtn) == 2) {
        int op = op_index(opn), dt = dtype_of(dtn);

        pairs++;
        if (op < 0 || dt < 0) {
            printf("\n  %s: unknown pair \"%s %s\"", compare_file, opn, dtn);
            missing++;
            continue;
        }
        listed[op] |= UINT32_C(1) << dt;
    }
    fclose(f);
    for (int op = 0; op < KEEL_OP_COUNT; op++) {
        uint32_t have = registered(op);

        for (int dt = 0; dt < KEEL_DTYPE_COUNT_; dt++) {
            uint32_t b = UINT32_C(1) << dt;

            if ((listed[op] & b) && !(have & b)) {
                printf("\n  missing here: %s %s", keel_op_table[op].name,
                       keel_kit_dtype_name((keel_dtype)dt));
                missing++;
            } else if (!(listed[op] & b) && (have & b)) {
                printf("\n  only here: %s %s", keel_op_table[op].name,
                       keel_kit_dtype_name((keel_dtype)dt));
                extra++;
            }
        }
    }
    printf("\n  " KEEL_TEST_GPU_NAME " vs %s: %d pairs listed there, %d "
           "missing here, %d only here", compare_file, pairs, missing, extra);
    CU_ASSERT(pairs > 0);
    CU_ASSERT_EQUAL(missing, 0);
}

int main(int argc, char **argv)
{
    CU_pSuite s;
    unsigned fails;

    if (argc == 3 && !strcmp(argv[1], "--dump"))
        return dump(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--compare"))
        compare_file = argv[2];
    else if (argc != 1) {
        fprintf(stderr, "usage: %s [--dump FILE | --compare FILE]\n",
                argv[0]);
        return 2;
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    s = CU_add_suite("cuda_kernel_table", NULL, NULL);
    if (!s || !CU_add_test(s, "entries are valid", test_entries_valid) ||
        !CU_add_test(s, "copy/full/cast for every dtype",
                     test_core_kernels_present) ||
        !CU_add_test(s, "coverage", test_coverage) ||
        (compare_file && !CU_add_test(s, "same pairs as the other build",
                                      test_same_as_other_build))) {
        CU_cleanup_registry();
        return 2;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return fails ? 1 : 0;
}
