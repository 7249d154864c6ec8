/*
 * The core's side of ABI 1.3, one part per run (argv[1]):
 *
 *   workspace   kernels get workspaces that work and go back to the cache
 *               (the wsk test plugin's add computes through two of them)
 *   ids         plugin-sized unique ids through the core API, with the CPU
 *               plugin stating 4,108-byte ids (KEEL_CPU_COMM_ID_BYTES)
 *   alltoallv   keel_all_to_allv on the plugin given as argv[2]: the CPU
 *               plugin (its own all_to_allv) or the CPU plugin built
 *               against the 1.1 header (composed by the core from
 *               send/recv); expected blocks are computed here
 *   visible     KEEL_VISIBLE_DEVICES=cpu:3,1 gives two devices, the
 *               plugin's 3 and 1, in that order
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>
#include <keel/ops.h>
#include <keel/runtime.h>
#include <keel/tensor.h>

static const char *plugin_arg = "cpu";

/* ---- workspace -------------------------------------------------------------- */

static void test_workspace(void)
{
    const int64_t shape[1] = {1000};
    float *x = malloc(1000 * sizeof(float)), *y = malloc(1000 * sizeof(float));
    float *o = malloc(1000 * sizeof(float));
    keel_tensor *tx = NULL, *ty = NULL, *t1 = NULL, *t2 = NULL;
    keel_memory_stats s0, s1, s2;

    CU_ASSERT_FATAL(x && y && o);
    for (int i = 0; i < 1000; i++) {
        x[i] = (float)i;
        y[i] = (float)(2 * i + 1);
    }
    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_host(x, KEEL_F32, 1, shape,
                                                "wsdev:0", &tx),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_host(y, KEEL_F32, 1, shape,
                                                "wsdev:0", &ty),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_memory_stats_get("wsdev:0", &s0), KEEL_STATUS_OK);
    /* the kernel fails the launch, with its reason, on any breach of the
     * workspace contract; a CPU fallback is forbidden */
    keel_set_strict(true);
    CU_ASSERT_EQUAL(keel_add(tx, ty, &t1), KEEL_STATUS_OK);
    if (!t1)
        printf("\n  keel_add: %s\n", keel_last_error());
    CU_ASSERT_EQUAL(keel_memory_stats_get("wsdev:0", &s1), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_add(tx, ty, &t2), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_memory_stats_get("wsdev:0", &s2), KEEL_STATUS_OK);
    keel_set_strict(false);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t1);
    CU_ASSERT_EQUAL(keel_tensor_to_host(t1, o, 1000 * sizeof(float)),
                    KEEL_STATUS_OK);
    for (int i = 0; i < 1000; i++)
        if (o[i] != (float)(3 * i + 1)) {
            CU_FAIL("add through the workspaces computed a wrong element");
            break;
        }
    /* after the first add only its output is still held: the two 4000-byte
     * workspaces went back to the cache (4096-byte class: 4000 rounds up) */
    CU_ASSERT_EQUAL(s1.allocated - s0.allocated, 4096);
    CU_ASSERT_EQUAL(s1.alloc_count - s0.alloc_count, 3);
    /* the second add's workspaces came from the cache */
    CU_ASSERT(s2.cache_hits - s1.cache_hits >= 2);
    CU_ASSERT_EQUAL(s2.plugin_allocs - s1.plugin_allocs, 1);
    keel_tensor_free(t2);
    keel_tensor_free(t1);
    keel_tensor_free(ty);
    keel_tensor_free(tx);
    free(x);
    free(y);
    free(o);
}

/* ---- ids --------------------------------------------------------------------- */

static void test_ids(void)
{
    keel_place pl[2];
    keel_communicator *c[2] = {NULL, NULL};
    keel_comm_id fixed;
    uint32_t nb = 0;
    uint8_t *id = malloc(4108), *bad = malloc(4108);
    keel_dptr p[2];
    float v[2] = {1.5f, 2.0f}, got = 0;

    CU_ASSERT_FATAL(id && bad);
    CU_ASSERT_EQUAL_FATAL(keel_place_parse("cpu:0", &pl[0]), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_place_parse("cpu:1", &pl[1]), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_comm_id_bytes(pl[0], &nb), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(nb, 4108);
    /* the fixed-size calls cannot carry such an id */
    CU_ASSERT_EQUAL(keel_comm_get_unique_id(pl[0], &fixed),
                    KEEL_STATUS_NOT_SUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "4108"));
    CU_ASSERT_EQUAL(keel_comm_init_rank(pl[0], 1, &fixed, 0, &c[0]),
                    KEEL_STATUS_NOT_SUPPORTED);
    /* sizes other than the plugin's are refused by the core */
    CU_ASSERT_EQUAL(keel_comm_get_unique_id_bytes(pl[0], id, 128),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(keel_comm_get_unique_id_bytes(pl[0], id, 4108),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_comm_init_rank_bytes(pl[0], 2, id, 4000, 0, &c[0]),
                    KEEL_STATUS_INVALID_ARGUMENT);
    /* an id damaged past byte 128 (what a broadcast of only 128 bytes
     * would leave) is caught by the plugin, not joined as another id */
    memcpy(bad, id, 4108);
    memset(bad + 128, 0, 4108 - 128);
    CU_ASSERT_EQUAL(keel_comm_init_rank_bytes(pl[0], 1, bad, 4108, 0, &c[0]),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "damaged"));
    /* the whole id joins two ranks, and they reduce */
    CU_ASSERT_EQUAL(keel_group_start(pl[0]), KEEL_STATUS_OK);
    for (int r = 0; r < 2; r++)
        CU_ASSERT_EQUAL(keel_comm_init_rank_bytes(pl[r], 2, id, 4108, r,
                                                  &c[r]),
                        KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_group_end(pl[0]), KEEL_STATUS_OK);
    for (int r = 0; r < 2; r++) {
        CU_ASSERT_EQUAL(keel_mem_alloc(pl[r], 4, &p[r]), KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(keel_mem_copy_h2d(pl[r], p[r], &v[r], 4),
                        KEEL_STATUS_OK);
    }
    CU_ASSERT_EQUAL(keel_group_start(pl[0]), KEEL_STATUS_OK);
    for (int r = 0; r < 2; r++)
        CU_ASSERT_EQUAL(keel_all_reduce(c[r], NULL, p[r], p[r], 1, KEEL_F32,
                                        KEEL_REDUCE_SUM),
                        KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_group_end(pl[0]), KEEL_STATUS_OK);
    for (int r = 0; r < 2; r++) {
        CU_ASSERT_EQUAL(keel_stream_synchronize(pl[r], NULL), KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(keel_mem_copy_d2h(pl[r], &got, p[r], 4),
                        KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(got, 3.5f);
        keel_mem_free(pl[r], p[r]);
        keel_comm_destroy(c[r]);
    }
    free(id);
    free(bad);
}

/* ---- all_to_allv --------------------------------------------------------------- */

#define NR 3
#define CNT(i, j) ((uint64_t)(((i) + 2 * (j)) % 4)) /* some blocks empty */

static void test_all_to_allv(void)
{
    keel_place pl[NR];
    keel_communicator *c[NR];
    keel_comm_id id;
    uint64_t sc[NR][NR], sd[NR][NR], rc[NR][NR], rd[NR][NR], slen[NR], rlen[NR];
    keel_dptr sb[NR], rb[NR];
    int32_t h[64];
    char name[64];

    for (int r = 0; r < NR; r++) {
        snprintf(name, sizeof(name), "%s:%d", plugin_arg, r);
        CU_ASSERT_EQUAL_FATAL(keel_place_parse(name, &pl[r]), KEEL_STATUS_OK);
    }
    CU_ASSERT_EQUAL_FATAL(keel_comm_get_unique_id(pl[0], &id), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_group_start(pl[0]), KEEL_STATUS_OK);
    for (int r = 0; r < NR; r++)
        CU_ASSERT_EQUAL(keel_comm_init_rank(pl[r], NR, &id, r, &c[r]),
                        KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_group_end(pl[0]), KEEL_STATUS_OK);
    /* send blocks in peer order after a 1-element gap; receive blocks in
     * reverse peer order after 2-element gaps */
    for (int i = 0; i < NR; i++) {
        uint64_t at = 0;
        for (int j = 0; j < NR; j++) {
            sc[i][j] = CNT(i, j);
            sd[i][j] = ++at;
            at += sc[i][j];
        }
        slen[i] = at;
        at = 0;
        for (int j = NR - 1; j >= 0; j--) {
            rc[i][j] = CNT(j, i);
            at += 2;
            rd[i][j] = at;
            at += rc[i][j];
        }
        rlen[i] = at + 1;
    }
    for (int i = 0; i < NR; i++) {
        CU_ASSERT_EQUAL_FATAL(keel_mem_alloc(pl[i], slen[i] * 4, &sb[i]),
                              KEEL_STATUS_OK);
        CU_ASSERT_EQUAL_FATAL(keel_mem_alloc(pl[i], rlen[i] * 4, &rb[i]),
                              KEEL_STATUS_OK);
        for (uint64_t k = 0; k < slen[i]; k++)
            h[k] = -1;
        for (int j = 0; j < NR; j++)
            for (uint64_t k = 0; k < sc[i][j]; k++)
                h[sd[i][j] + k] = 1000 * i + 100 * j + (int)k;
        keel_mem_copy_h2d(pl[i], sb[i], h, slen[i] * 4);
        for (uint64_t k = 0; k < rlen[i]; k++)
            h[k] = -9;
        keel_mem_copy_h2d(pl[i], rb[i], h, rlen[i] * 4);
    }
    CU_ASSERT_EQUAL(keel_group_start(pl[0]), KEEL_STATUS_OK);
    for (int i = 0; i < NR; i++) {
        keel_status st = keel_all_to_allv(c[i], NULL, sb[i], sc[i], sd[i],
                                          rb[i], rc[i], rd[i], KEEL_I32);
        CU_ASSERT_EQUAL(st, KEEL_STATUS_OK);
        if (st)
            printf("\n  rank %d: %s\n", i, keel_last_error());
    }
    CU_ASSERT_EQUAL(keel_group_end(pl[0]), KEEL_STATUS_OK);
    for (int i = 0; i < NR; i++) {
        uint64_t k = 0;
        bool ok = true;

        CU_ASSERT_EQUAL(keel_stream_synchronize(pl[i], NULL), KEEL_STATUS_OK);
        keel_mem_copy_d2h(pl[i], h, rb[i], rlen[i] * 4);
        for (int j = NR - 1; j >= 0; j--) {
            for (; k < rd[i][j]; k++)
                ok = ok && h[k] == -9;
            for (uint64_t e = 0; e < rc[i][j]; e++, k++)
                ok = ok && h[k] == 1000 * j + 100 * i + (int)e;
        }
        for (; k < rlen[i]; k++)
            ok = ok && h[k] == -9;
        CU_ASSERT(ok);
        if (!ok)
            printf("\n  rank %d received the wrong blocks\n", i);
    }
    /* a null array is the core's to refuse */
    CU_ASSERT_EQUAL(keel_all_to_allv(c[0], NULL, sb[0], NULL, sd[0], rb[0],
                                     rc[0], rd[0], KEEL_I32),
                    KEEL_STATUS_INVALID_ARGUMENT);
    for (int i = 0; i < NR; i++) {
        keel_mem_free(pl[i], sb[i]);
        keel_mem_free(pl[i], rb[i]);
        keel_comm_destroy(c[i]);
    }
}

/* ---- visible devices ------------------------------------------------------------ */

static void test_visible(void)
{
    keel_device_props p;
    keel_place pl;

    CU_ASSERT_EQUAL(keel_device_count("cpu"), 2);
    CU_ASSERT_EQUAL_FATAL(keel_place_parse("cpu:0", &pl), KEEL_STATUS_OK);
    p.struct_size = sizeof(p);
    CU_ASSERT_EQUAL(keel_device_get_props(pl, &p), KEEL_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(p.bus_id, "virtual:3");
    CU_ASSERT_EQUAL_FATAL(keel_place_parse("cpu:1", &pl), KEEL_STATUS_OK);
    p.struct_size = sizeof(p);
    CU_ASSERT_EQUAL(keel_device_get_props(pl, &p), KEEL_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(p.bus_id, "virtual:1");
    CU_ASSERT_NOT_EQUAL(keel_place_parse("cpu:2", &pl), KEEL_STATUS_OK);
}

int main(int argc, char **argv)
{
    const char *part = argc > 1 ? argv[1] : "";
    CU_pSuite s;
    unsigned fails;

    if (argc > 2)
        plugin_arg = argv[2];
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("abi13", NULL, NULL);
    if (!strcmp(part, "workspace"))
        CU_add_test(s, "kernel workspaces", test_workspace);
    else if (!strcmp(part, "ids"))
        CU_add_test(s, "4,108-byte ids", test_ids);
    else if (!strcmp(part, "alltoallv"))
        CU_add_test(s, "all_to_allv", test_all_to_allv);
    else if (!strcmp(part, "visible"))
        CU_add_test(s, "KEEL_VISIBLE_DEVICES", test_visible);
    else {
        fprintf(stderr, "usage: test_abi13 workspace|ids|alltoallv|visible "
                        "[plugin]\n");
        return 2;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return fails ? 1 : 0;
}
