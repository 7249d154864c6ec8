/*
 * The mlu plugin's collective group: the KEEL_MLU_COLL switch and the CNCL
 * path, over the stand-in Neuware (meson tests mlu-cncl-*,
 * plugins/mlu/tests/meson.build).
 *
 *   test_mlu_cncl library-missing  KEEL_MLU_COLL=library, no libcncl.so:
 *                                  no collective is declared and the calls
 *                                  answer NOT_SUPPORTED naming libcncl.so.
 *   test_mlu_cncl library-incomplete  the same with a libcncl.so that
 *                                  lacks cnclGetCliqueId: the refusal names
 *                                  the missing function.
 *   test_mlu_cncl inprocess        KEEL_MLU_COLL=inprocess with the
 *                                  stand-in's CNCL at hand: the engine
 *                                  serves (128-byte ids, a 2-rank
 *                                  all_reduce) and CNCL is never called.
 *   test_mlu_cncl standin          over the stand-in's CNCL: what get_caps
 *                                  declares, injected CNCL failures as keel
 *                                  statuses naming the CNCL function,
 *                                  refusals before CNCL, and a 2-rank
 *                                  communicator's lifecycle with an exact
 *                                  all_reduce and nothing left behind.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>
#include <keel/runtime.h>

#include "cncl_api.h"

static const keel_plugin_api *api;
static const char *why_text = "could not be loaded";
static const keel_collective_ops *col;
static void (*arm)(const char *name, int code);
static int (*live_comms)(void);
static long (*cncl_calls)(void);

/* The plugin's messages, caught by a host table of the test's own (the
 * table calls below bypass the core, which keeps them otherwise). */
static char said[1024];

static void catch_error(keel_status status, const char *message)
{
    (void)status;
    snprintf(said, sizeof(said), "%s", message ? message : "");
}

static const char *plain_env(const char *name)
{
    return getenv(name);
}

static const keel_host_api catcher = {
    .header = KEEL_TABLE_HEADER(keel_host_api),
    .set_error = catch_error,
    .get_env = plain_env,
};

static bool catch_messages(void)
{
    const keel_plugin_api *(*get)(uint32_t, uint32_t, const keel_host_api *);
    Dl_info di;
    void *h;

    void *fn;

    /* the core keeps copies of the plugin's tables; the functions in them
     * are the plugin's */
    *(keel_status (**)(int32_t, keel_collective_caps *))&fn =
        api->collective->get_caps;
    if (!dladdr(fn, &di) || !di.dli_fname ||
        !(h = dlopen(di.dli_fname, RTLD_NOW | RTLD_NOLOAD)))
        return false;
    *(void **)&get = dlsym(h, "keel_plugin_get_api");
    dlclose(h);
    return get && get(KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
                      &catcher) != NULL;
}

static int setup(void)
{
    const char *lib = getenv("KEEL_MLU_CNRT_LIBRARY");
    keel_plugin_info info;
    void *h;

    if (keel_device_count("mlu") != 2)
        return -1;
    for (int i = 0; i < keel_plugin_count(); i++)
        if (keel_plugin_get_info(i, &info) == KEEL_STATUS_OK && info.name &&
            !strcmp(info.name, "mlu"))
            api = keel_plugin_table(i);
    if (!api || !api->collective || !lib ||
        !(h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD)))
        return -1;
    col = api->collective;
    *(void **)&arm = dlsym(h, "cnrt_standin_fail_next");
    *(void **)&live_comms = dlsym(h, "cncl_standin_live_comms");
    *(void **)&cncl_calls = dlsym(h, "cncl_standin_calls");
    dlclose(h);
    /* the plugin is initialised by the core's first use of a device */
    return arm && live_comms && cncl_calls && catch_messages() &&
                   api->device->init() == KEEL_STATUS_OK
               ? 0
               : -1;
}

static void saw(const char *a, const char *b)
{
    const char *m = said;

    printf("\n    %s\n", m);
    CU_ASSERT_PTR_NOT_NULL(strstr(m, a));
    if (b)
        CU_ASSERT_PTR_NOT_NULL(strstr(m, b));
}

/* Device buffers of the 2 ranks holding `n` floats each. */
static bool upload(keel_dptr p[2], const float *v0, const float *v1, int n)
{
    for (int r = 0; r < 2; r++) {
        if (api->memory->alloc(r, (uint64_t)n * 4, &p[r]) != KEEL_STATUS_OK)
            return false;
        if (api->memory->copy_h2d(r, p[r], r ? v1 : v0, (uint64_t)n * 4) !=
            KEEL_STATUS_OK)
            return false;
    }
    return true;
}

/* A communicator of 2 ranks on mlu 0 and 1, from one thread. */
static bool two_ranks(keel_comm m[2], uint32_t id_bytes)
{
    uint8_t id[512];
    keel_status st;

    if (id_bytes > sizeof(id) ||
        col->get_unique_id_bytes(id, id_bytes) != KEEL_STATUS_OK)
        return false;
    CU_ASSERT_EQUAL(col->group_start(), KEEL_STATUS_OK);
    for (int r = 0; r < 2; r++)
        CU_ASSERT_EQUAL(col->comm_init_rank_bytes(r, 2, id, id_bytes, r,
                                                  &m[r]),
                        KEEL_STATUS_OK);
    st = col->group_end();
    CU_ASSERT_EQUAL(st, KEEL_STATUS_OK);
    return st == KEEL_STATUS_OK;
}

/* all_reduce (sum, float32) of {1,2,3,4.5} and {10,-20,0.25,40} on both
 * ranks, checked element by element. */
static void sum_checked(keel_comm m[2])
{
    const float a[4] = {1, 2, 3, 4.5f}, b[4] = {10, -20, 0.25f, 40};
    const float want[4] = {11, -18, 3.25f, 44.5f};
    keel_dptr p[2] = {0, 0};
    float got[4];

    CU_ASSERT_TRUE_FATAL(upload(p, a, b, 4));
    CU_ASSERT_EQUAL(col->group_start(), KEEL_STATUS_OK);
    for (int r = 0; r < 2; r++)
        CU_ASSERT_EQUAL(col->all_reduce(m[r], NULL, p[r], p[r], 4, KEEL_F32,
                                        KEEL_REDUCE_SUM),
                        KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(col->group_end(), KEEL_STATUS_OK);
    for (int r = 0; r < 2; r++) {
        CU_ASSERT_EQUAL(api->stream->stream_synchronize(r, NULL),
                        KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(api->memory->copy_d2h(r, got, p[r], sizeof(got)),
                        KEEL_STATUS_OK);
        for (int i = 0; i < 4; i++)
            CU_ASSERT_EQUAL(got[i], want[i]);
        api->memory->free(r, p[r]);
    }
}

/* ---- KEEL_MLU_COLL=library without libcncl.so ------------------------------ */

static void t_library_missing(void)
{
    keel_collective_caps caps = {.struct_size = sizeof(caps)};
    uint8_t id[MLU_CNCL_ID_BYTES];
    keel_comm m = NULL;

    CU_ASSERT_EQUAL(col->get_caps(0, &caps), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(caps.collectives, 0);
    CU_ASSERT_EQUAL(caps.id_bytes, MLU_CNCL_ID_BYTES);
    CU_ASSERT_EQUAL(col->get_unique_id_bytes(id, sizeof(id)),
                    KEEL_STATUS_NOT_SUPPORTED);
    saw("libcncl.so", why_text);
    memset(id, 0, sizeof(id));
    CU_ASSERT_EQUAL(col->comm_init_rank_bytes(0, 1, id, sizeof(id), 0, &m),
                    KEEL_STATUS_NOT_SUPPORTED);
    CU_ASSERT_PTR_NULL(m);
    /* where the library was taken from, or how to say where it is */
    saw(why_text, strstr(why_text, "loaded") ? "KEEL_MLU_CNCL_LIBRARY"
                                             : "libkeel-cpu.so");
    CU_ASSERT_EQUAL(col->get_unique_id((keel_comm_id *)(void *)id),
                    KEEL_STATUS_NOT_SUPPORTED);
}

/* ---- KEEL_MLU_COLL=inprocess ------------------------------------------------ */

static void t_inprocess(void)
{
    keel_collective_caps caps = {.struct_size = sizeof(caps)};
    keel_comm m[2] = {NULL, NULL};

    CU_ASSERT_EQUAL(col->get_caps(0, &caps), KEEL_STATUS_OK);
    CU_ASSERT_TRUE(caps.id_bytes == 0 || caps.id_bytes == KEEL_COMM_ID_BYTES);
    CU_ASSERT_TRUE(caps.collectives & KEEL_COLL_ALL_REDUCE);
    CU_ASSERT_TRUE(caps.reduce_ops & KEEL_REDUCE_OP_BIT(KEEL_REDUCE_AVG));
    CU_ASSERT_TRUE_FATAL(two_ranks(m, KEEL_COMM_ID_BYTES));
    sum_checked(m);
    for (int r = 0; r < 2; r++)
        CU_ASSERT_EQUAL(col->comm_destroy(m[r]), KEEL_STATUS_OK);
    /* not one call went into the stand-in's CNCL */
    CU_ASSERT_EQUAL(cncl_calls(), 0);
    CU_ASSERT_EQUAL(live_comms(), 0);
}

/* ---- over the stand-in's CNCL ------------------------------------------------- */

static void t_caps(void)
{
    keel_collective_caps caps = {.struct_size = sizeof(caps)};
    uint32_t all = KEEL_COLL_ALL_REDUCE | KEEL_COLL_BROADCAST |
                   KEEL_COLL_REDUCE | KEEL_COLL_ALL_GATHER |
                   KEEL_COLL_REDUCE_SCATTER | KEEL_COLL_ALL_TO_ALL |
                   KEEL_COLL_SEND_RECV | KEEL_COLL_ALL_TO_ALLV;
    keel_comm_id id;

    CU_ASSERT_EQUAL(col->get_caps(1, &caps), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(caps.id_bytes, 136);
    CU_ASSERT_EQUAL(caps.collectives, all);
    CU_ASSERT_EQUAL(caps.dtype_mask,
                    KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F16) |
                        KEEL_DTYPE_BIT(KEEL_BF16) | KEEL_DTYPE_BIT(KEEL_I32));
    CU_ASSERT_FALSE(caps.reduce_ops & KEEL_REDUCE_OP_BIT(KEEL_REDUCE_AVG));
    CU_ASSERT_TRUE(caps.reduce_ops & KEEL_REDUCE_OP_BIT(KEEL_REDUCE_MAX));
    CU_ASSERT_EQUAL(col->get_caps(2, &caps), KEEL_STATUS_INVALID_DEVICE);
    CU_ASSERT_EQUAL(col->get_unique_id(&id), KEEL_STATUS_NOT_SUPPORTED);
    saw("136 bytes", "get_unique_id_bytes");
}

/* One injected CNCL failure per row: the call, the code, what keel says. */
static void t_failures(void)
{
    uint8_t id[MLU_CNCL_ID_BYTES];
    keel_comm m = NULL, bad = NULL;
    keel_dptr p = 0;
    float one = 1.0f;

    arm("cnclGetCliqueId", CNCL_RET_ERR_INTERNAL);
    CU_ASSERT_EQUAL(col->get_unique_id_bytes(id, sizeof(id)),
                    KEEL_STATUS_DEVICE_ERROR);
    saw("cnclGetCliqueId", "CNCL_RET_ERR_INTERNAL (0x1)");
    CU_ASSERT_EQUAL(col->get_unique_id_bytes(id, 128),
                    KEEL_STATUS_INVALID_ARGUMENT);
    saw("136 bytes", NULL);
    CU_ASSERT_EQUAL_FATAL(col->get_unique_id_bytes(id, sizeof(id)),
                          KEEL_STATUS_OK);

    arm("cnclInitComms", CNCL_RET_ERR_SYS_MALLOC);
    CU_ASSERT_EQUAL(col->comm_init_rank_bytes(0, 1, id, sizeof(id), 0, &m),
                    KEEL_STATUS_OUT_OF_MEMORY);
    CU_ASSERT_PTR_NULL(m);
    saw("cnclInitComms", "CNCL_RET_ERR_SYS_MALLOC");

    /* an id that does not check out is refused by CNCL */
    id[3] ^= 1;
    CU_ASSERT_EQUAL(col->comm_init_rank_bytes(0, 1, id, sizeof(id), 0, &bad),
                    KEEL_STATUS_INVALID_ARGUMENT);
    saw("cnclInitComms", "CNCL_RET_ERR_ARGUMENTS");
    id[3] ^= 1;

    CU_ASSERT_EQUAL_FATAL(col->comm_init_rank_bytes(0, 1, id, sizeof(id), 0,
                                                    &m),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(api->memory->alloc(0, 64, &p), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(api->memory->copy_h2d(0, p, &one, 4), KEEL_STATUS_OK);

    arm("cnclAllReduce", CNCL_RET_ERR_ARGUMENTS);
    CU_ASSERT_EQUAL(col->all_reduce(m, NULL, p, p, 1, KEEL_F32,
                                    KEEL_REDUCE_SUM),
                    KEEL_STATUS_INVALID_ARGUMENT);
    saw("cnclAllReduce on mlu:0", "CNCL_RET_ERR_ARGUMENTS (0x7)");
    arm("cnclAllReduce", CNCL_RET_ERR_UNSUPPORTED);
    CU_ASSERT_EQUAL(col->all_reduce(m, NULL, p, p, 1, KEEL_F32,
                                    KEEL_REDUCE_SUM),
                    KEEL_STATUS_NOT_SUPPORTED);
    saw("cnclAllReduce", "CNCL_RET_ERR_UNSUPPORTED");
    arm("cnclBroadcast", CNCL_RET_ERR_MLU_RUNTIME);
    CU_ASSERT_EQUAL(col->broadcast(m, NULL, p, p, 1, KEEL_F32, 0),
                    KEEL_STATUS_DEVICE_ERROR);
    saw("cnclBroadcast", "CNCL_RET_ERR_MLU_RUNTIME");

    /* refused before CNCL sees them */
    CU_ASSERT_EQUAL(col->all_reduce(m, NULL, p, p, 1, KEEL_F32,
                                    KEEL_REDUCE_AVG),
                    KEEL_STATUS_NOT_SUPPORTED);
    saw("no average", NULL);
    CU_ASSERT_EQUAL(col->all_reduce(m, NULL, p, p, 1, KEEL_F64,
                                    KEEL_REDUCE_SUM),
                    KEEL_STATUS_NOT_SUPPORTED);
    saw("float64", NULL);
    CU_ASSERT_EQUAL(col->all_reduce(m, NULL, p, p, 100, KEEL_F32,
                                    KEEL_REDUCE_SUM),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(col->all_to_all(m, NULL, p, p, 4, KEEL_F32),
                    KEEL_STATUS_NOT_SUPPORTED);
    saw("in place", NULL);

    /* and the communicator still works: 1 rank, sum = itself */
    CU_ASSERT_EQUAL(col->all_reduce(m, NULL, p, p, 1, KEEL_F32,
                                    KEEL_REDUCE_SUM),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(api->stream->stream_synchronize(0, NULL), KEEL_STATUS_OK);
    one = 0;
    CU_ASSERT_EQUAL(api->memory->copy_d2h(0, &one, p, 4), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(one, 1.0f);

    CU_ASSERT_EQUAL(col->comm_destroy(m), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(col->comm_destroy(m), KEEL_STATUS_INVALID_HANDLE);
    api->memory->free(0, p);
}

static void t_lifecycle(void)
{
    keel_comm m[2] = {NULL, NULL};
    int32_t rank = -1, n = -1;
    int before = live_comms();
    long calls = cncl_calls();

    CU_ASSERT_TRUE_FATAL(two_ranks(m, MLU_CNCL_ID_BYTES));
    CU_ASSERT_EQUAL(live_comms(), before + 2);
    CU_ASSERT_EQUAL(col->comm_rank(m[1], &rank, &n), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(rank, 1);
    CU_ASSERT_EQUAL(n, 2);
    sum_checked(m);
    CU_ASSERT_TRUE(cncl_calls() > calls); /* it did run on CNCL */
    /* a refusal inside a group: group_end runs none of the group (rank
     * 0's queued all_reduce would otherwise wait for rank 1 and put the
     * ranks' call orders out of step, which the next sum would show) */
    {
        keel_dptr p = 0;
        CU_ASSERT_EQUAL_FATAL(api->memory->alloc(0, 16, &p), KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(col->group_start(), KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(col->all_reduce(m[0], NULL, p, p, 4, KEEL_F32,
                                        KEEL_REDUCE_SUM),
                        KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(col->all_reduce(m[1], NULL, p, p, 4, KEEL_F32,
                                        KEEL_REDUCE_SUM),
                        KEEL_STATUS_INVALID_ARGUMENT); /* mlu:0's memory */
        CU_ASSERT_EQUAL(col->group_end(), KEEL_STATUS_INVALID_ARGUMENT);
        saw("none of the group's calls were run", NULL);
        api->memory->free(0, p);
    }
    sum_checked(m);
    for (int r = 0; r < 2; r++)
        CU_ASSERT_EQUAL(col->comm_destroy(m[r]), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(live_comms(), before);
    CU_ASSERT_EQUAL(col->comm_rank(m[0], &rank, &n),
                    KEEL_STATUS_INVALID_HANDLE);
}

/* every communicator of the tests above is gone */
static void t_nothing_left(void)
{
    CU_ASSERT_EQUAL(live_comms(), 0);
}

int main(int argc, char **argv)
{
    const char *mode = argc >= 2 ? argv[1] : "";
    CU_pSuite s;
    unsigned bad;

    if (strcmp(mode, "library-missing") &&
        strcmp(mode, "library-incomplete") && strcmp(mode, "inprocess") &&
        strcmp(mode, "standin")) {
        fprintf(stderr, "usage: %s library-missing | library-incomplete | "
                "inprocess | standin\n", argv[0]);
        return 2;
    }
    if (!strcmp(mode, "library-incomplete")) {
        why_text = "has no cnclGetCliqueId";
        mode = "library-missing";
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("mlu collectives", setup, NULL);
    if (!strcmp(mode, "library-missing")) {
        CU_add_test(s, "library: no libcncl.so, a clear refusal",
                    t_library_missing);
    } else if (!strcmp(mode, "inprocess")) {
        CU_add_test(s, "inprocess: the engine, CNCL never called",
                    t_inprocess);
    } else {
        CU_add_test(s, "what get_caps declares on CNCL", t_caps);
        CU_add_test(s, "CNCL failures map to keel statuses", t_failures);
        CU_add_test(s, "init, exact all_reduce, destroy", t_lifecycle);
        CU_add_test(s, "no communicator left", t_nothing_left);
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    bad = CU_get_number_of_failures() + CU_get_number_of_suites_failed() +
          CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return bad ? 1 : 0;
}
