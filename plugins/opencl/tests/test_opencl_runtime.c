/*
 * CUnit tests of the OpenCL plugin's runtime, through its ABI table
 * (dlopen of KEEL_TEST_OPENCL_PLUGIN): the address table, copies and their
 * errors, host functions (plugin thread, stream order, blocking later
 * work), events across devices, asynchronous peer copies, collectives
 * with 16-bit floats, the device type alias and re-initialisation.
 *
 * Without an OpenCL device (no ICD) the suite checks that the plugin loads
 * and reports 0 devices with a reason, and skips the rest (exit 77).
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include <keel/device_api.h>
#include <keel/kit.h>

static const keel_plugin_api *A;
static int32_t NDEV;
static _Thread_local char last_msg[1024];
static _Thread_local keel_status last_st;
static const char *env_gpu;

static void h_set_error(keel_status st, const char *m)
{
    last_st = st;
    snprintf(last_msg, sizeof(last_msg), "%s", m ? m : "");
}
static void h_log(keel_log_level l, const char *m)
{
    (void)l;
    (void)m;
}
static const char *h_get_env(const char *name)
{
    if (!strcmp(name, "KEEL_OPENCL_AS_GPU"))
        return env_gpu;
    if (!strcmp(name, "KEEL_OPENCL_COLL_TIMEOUT_MS"))
        return "800";
    return getenv(name);
}
static const keel_host_api HOST = {
    .header = KEEL_TABLE_HEADER(keel_host_api),
    .set_error = h_set_error,
    .log = h_log,
    .get_env = h_get_env,
};

#define OK(x) CU_ASSERT_EQUAL_FATAL((x), KEEL_STATUS_OK)
#define MEM (A->memory)
#define STR (A->stream)
#define COL (A->collective)

/* ---- identity ----------------------------------------------------------- */

/* dlsym's object pointer as the entry function (POSIX guarantees it). */
static keel_plugin_get_api_fn entry_of(void *h)
{
    void *sym = dlsym(h, KEEL_PLUGIN_ENTRY_SYMBOL);
    keel_plugin_get_api_fn f;

    memcpy(&f, &sym, sizeof(f));
    return f;
}

static void t_abi_and_alias(void)
{
    void *h = dlopen(getenv("KEEL_TEST_OPENCL_PLUGIN"), RTLD_NOW | RTLD_LOCAL);
    keel_plugin_get_api_fn get;

    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    get = entry_of(h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(get);
    last_st = KEEL_STATUS_OK;
    CU_ASSERT_PTR_NULL(get(KEEL_ABI_VERSION_MAJOR + 1, 0, &HOST));
    CU_ASSERT_EQUAL(last_st, KEEL_STATUS_ABI_MISMATCH);
    env_gpu = "1";
    CU_ASSERT_STRING_EQUAL(get(KEEL_ABI_VERSION_MAJOR, 2, &HOST)->device_type,
                           "gpu");
    env_gpu = NULL;
    CU_ASSERT_STRING_EQUAL(get(KEEL_ABI_VERSION_MAJOR, 2, &HOST)->device_type,
                           "opencl");
    /* The same library: A stays valid. */
}

/* ---- memory ------------------------------------------------------------- */

static void t_address_table(void)
{
    keel_dptr a = 0, b = 0;
    unsigned char buf[64];
    char want[64];

    OK(MEM->alloc(0, 1024, &a));
    OK(MEM->alloc(0, 1024, &b));
    CU_ASSERT(a != 0 && b != 0 && a != b);
    CU_ASSERT_EQUAL((a & ((UINT64_C(1) << 40) - 1)), 0);
    /* past the end, with the address in hex */
    CU_ASSERT_EQUAL(MEM->copy_h2d(0, a + 1000, buf, 64),
                    KEEL_STATUS_INVALID_ARGUMENT);
    snprintf(want, sizeof(want), "0x%" PRIx64, a + 1000);
    CU_ASSERT_PTR_NOT_NULL(strstr(last_msg, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(last_msg, "size 1024"));
    /* ptr + size wrapping */
    CU_ASSERT_EQUAL(MEM->memset(0, a + 8, 0, UINT64_MAX),
                    KEEL_STATUS_INVALID_ARGUMENT);
    /* overlapping d2d is refused (the ABI forbids it) */
    CU_ASSERT_EQUAL(MEM->copy_d2d(0, a + 8, a, 64),
                    KEEL_STATUS_INVALID_ARGUMENT);
    OK(MEM->copy_d2d(0, a + 64, a, 64));
    OK(MEM->free(0, a));
    /* stale address: freed slot, never reused at once */
    CU_ASSERT_EQUAL(MEM->copy_h2d(0, a, buf, 1), KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(MEM->free(0, a), KEEL_STATUS_INVALID_ARGUMENT);
    OK(MEM->alloc(0, 16, &a));
    CU_ASSERT(a >> 40 != b >> 40);
    OK(MEM->free(0, a));
    /* a pointer inside an allocation is not an allocation */
    CU_ASSERT_EQUAL(MEM->free(0, b + 8), KEEL_STATUS_INVALID_ARGUMENT);
    /* foreign */
    CU_ASSERT_EQUAL(MEM->free(0, UINT64_C(0x123456789)),
                    KEEL_STATUS_INVALID_ARGUMENT);
    OK(MEM->free(0, b));
    CU_ASSERT_EQUAL(MEM->alloc(0, UINT64_C(1) << 41, &a),
                    KEEL_STATUS_OUT_OF_MEMORY);
    OK(MEM->alloc(0, 0, &a));
    CU_ASSERT_EQUAL(a, 0);
}

static void t_pinned(void)
{
    void *p = NULL;
    int x;

    OK(MEM->host_alloc(0, 4096, &p));
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    memset(p, 7, 4096);
    CU_ASSERT_EQUAL(MEM->host_free(0, &x), KEEL_STATUS_INVALID_ARGUMENT);
    OK(MEM->host_free(0, p));
    CU_ASSERT_EQUAL(MEM->host_free(0, p), KEEL_STATUS_INVALID_ARGUMENT);
}

/* ---- host functions ----------------------------------------------------- */

struct hf {
    pthread_t caller;
    atomic_int order[8];
    atomic_int n;
    atomic_int on_caller;
    atomic_int release;
};

static void hf_fn(void *p)
{
    struct hf *h = p;
    int i = atomic_fetch_add(&h->n, 1);

    if (pthread_equal(pthread_self(), h->caller))
        atomic_store(&h->on_caller, 1);
    if (i < 8)
        atomic_store(&h->order[i], i + 1);
}

static void hf_block(void *p)
{
    struct hf *h = p;

    while (!atomic_load(&h->release))
        usleep(1000);
    hf_fn(p);
}

static void t_host_funcs(void)
{
    struct hf h;
    keel_stream s = NULL;
    keel_dptr d = 0;
    uint32_t v = 0x11223344, got = 0;
    double t0;
    struct timespec ts;

    memset(&h, 0, sizeof(h));
    h.caller = pthread_self();
    OK(STR->stream_create(0, 0, &s));
    OK(MEM->alloc(0, 64, &d));
    OK(MEM->memset(0, d, 0, 64));
    OK(STR->launch_host_func(0, s, hf_block, &h));
    /* work behind a blocked host function waits, and enqueuing returns */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t0 = ts.tv_sec + ts.tv_nsec / 1e9;
    OK(MEM->copy_h2d_async(0, s, d, &v, 4));
    OK(STR->launch_host_func(0, s, hf_fn, &h));
    CU_ASSERT_EQUAL(STR->stream_query(0, s), KEEL_STATUS_NOT_READY);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    CU_ASSERT(ts.tv_sec + ts.tv_nsec / 1e9 - t0 < 0.5);
    usleep(20000);
    CU_ASSERT_EQUAL(atomic_load(&h.n), 0);
    atomic_store(&h.release, 1);
    OK(STR->stream_synchronize(0, s));
    CU_ASSERT_EQUAL(atomic_load(&h.n), 2);
    CU_ASSERT_EQUAL(atomic_load(&h.order[0]), 1);
    CU_ASSERT_EQUAL(atomic_load(&h.order[1]), 2);
    CU_ASSERT_EQUAL(atomic_load(&h.on_caller), 0);
    OK(MEM->copy_d2h(0, &got, d, 4));
    CU_ASSERT_EQUAL(got, v);
    CU_ASSERT_EQUAL(STR->launch_host_func(0, s, NULL, NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    OK(MEM->free(0, d));
    OK(STR->stream_destroy(0, s));
    CU_ASSERT_EQUAL(STR->stream_destroy(0, s), KEEL_STATUS_INVALID_HANDLE);
}

static void t_event_timing(void)
{
    keel_event a = NULL, b = NULL;
    float ms = -1;
    struct hf h;

    memset(&h, 0, sizeof(h));
    h.caller = pthread_self();
    OK(STR->event_create(0, &a));
    OK(STR->event_create(0, &b));
    CU_ASSERT_EQUAL(STR->event_elapsed_ms(0, a, b, &ms),
                    KEEL_STATUS_INVALID_STATE);
    OK(STR->event_query(0, a)); /* never recorded: complete */
    OK(STR->event_record(0, a, NULL));
    OK(STR->launch_host_func(0, NULL, hf_block, &h));
    OK(STR->event_record(0, b, NULL));
    CU_ASSERT_EQUAL(STR->event_query(0, b), KEEL_STATUS_NOT_READY);
    CU_ASSERT_EQUAL(STR->event_elapsed_ms(0, a, b, &ms),
                    KEEL_STATUS_NOT_READY);
    usleep(30000);
    atomic_store(&h.release, 1);
    OK(STR->event_synchronize(0, b));
    OK(STR->event_elapsed_ms(0, a, b, &ms));
    CU_ASSERT(ms >= 20.0f && ms < 5000.0f);
    OK(STR->event_destroy(0, a));
    OK(STR->event_destroy(0, b));
    CU_ASSERT_EQUAL(STR->event_destroy(0, b), KEEL_STATUS_INVALID_HANDLE);
}

/* ---- two devices -------------------------------------------------------- */

static void t_cross_device(void)
{
    keel_dptr a = 0, b = 0;
    keel_event e = NULL;
    keel_stream s1 = NULL;
    unsigned char in[1000], out[1000];
    struct hf h;

    if (NDEV < 2) {
        fprintf(stderr, " (one device: skipped) ");
        return;
    }
    memset(&h, 0, sizeof(h));
    h.caller = pthread_self();
    for (int i = 0; i < 1000; i++)
        in[i] = (unsigned char)(i * 7);
    OK(MEM->alloc(0, 1000, &a));
    OK(MEM->alloc(1, 1000, &b));
    OK(MEM->memset(1, b, 0, 1000));
    OK(STR->stream_create(1, 0, &s1));
    /* device 1's stream waits on device 0's event behind a host function */
    OK(STR->launch_host_func(0, NULL, hf_block, &h));
    OK(MEM->copy_h2d_async(0, NULL, a, in, 1000));
    OK(STR->event_create(0, &e));
    OK(STR->event_record(0, e, NULL));
    OK(STR->stream_wait_event(1, s1, e));
    OK(MEM->memset_async(1, s1, b, 9, 1000));
    CU_ASSERT_EQUAL(STR->stream_query(1, s1), KEEL_STATUS_NOT_READY);
    atomic_store(&h.release, 1);
    OK(STR->stream_synchronize(1, s1));
    OK(STR->event_query(0, e));
    /* asynchronous peer copy ordered on the source stream */
    OK(MEM->copy_peer_async(1, b, 0, a, 1000, NULL));
    OK(STR->stream_synchronize(0, NULL));
    OK(MEM->copy_d2h(1, out, b, 1000));
    CU_ASSERT_EQUAL(memcmp(in, out, 1000), 0);
    OK(MEM->memset(1, b, 0, 1000));
    OK(MEM->copy_peer(1, b + 100, 0, a, 900));
    OK(MEM->copy_d2h(1, out, b, 1000));
    CU_ASSERT_EQUAL(memcmp(in, out + 100, 900), 0);
    /* another device's stream is an invalid handle */
    CU_ASSERT_EQUAL(MEM->memset_async(0, s1, a, 0, 4),
                    KEEL_STATUS_INVALID_HANDLE);
    OK(STR->event_destroy(0, e));
    OK(STR->stream_destroy(1, s1));
    OK(MEM->free(0, a));
    OK(MEM->free(1, b));
}

/* ---- collectives: 16-bit floats (conversion path), several ranks on one
 * device --------------------------------------------------------------- */

static void t_coll_half(void)
{
    enum { R = 3, N = 37 };
    keel_comm_id id;
    keel_comm c[R];
    keel_dptr p[R];
    uint16_t h[N], got[N];

    OK(COL->get_unique_id(&id));
    OK(COL->group_start());
    for (int r = 0; r < R; r++)
        OK(COL->comm_init_rank(r % NDEV, R, &id, r, &c[r]));
    OK(COL->group_end());
    for (int dt = KEEL_F16; dt <= KEEL_BF16; dt++) {
        for (int r = 0; r < R; r++) {
            for (int i = 0; i < N; i++)
                h[i] = dt == KEEL_F16
                           ? keel_kit_f32_to_f16((float)(r + 1) * 0.5f + i)
                           : keel_kit_f32_to_bf16((float)(r + 1) + i);
            OK(MEM->alloc(r % NDEV, N * 2, &p[r]));
            OK(MEM->copy_h2d(r % NDEV, p[r], h, sizeof(h)));
        }
        OK(COL->group_start());
        for (int r = 0; r < R; r++)
            OK(COL->all_reduce(c[r], NULL, p[r], p[r], N, (keel_dtype)dt,
                               KEEL_REDUCE_AVG));
        OK(COL->group_end());
        for (int r = 0; r < R; r++) {
            OK(MEM->copy_d2h(r % NDEV, got, p[r], sizeof(got)));
            for (int i = 0; i < N; i++) {
                float want = dt == KEEL_F16 ? 1.0f + i : 2.0f + i;
                float g = dt == KEEL_F16 ? keel_kit_f16_to_f32(got[i])
                                         : keel_kit_bf16_to_f32(got[i]);
                CU_ASSERT_DOUBLE_EQUAL(g, want, want * 0.01);
            }
            OK(MEM->free(r % NDEV, p[r]));
        }
        /* The round ran, not timed out (a timed-out round leaves the
         * inputs in place, and the middle rank's input is the average). */
        for (int d = 0; d < NDEV && d < R; d++)
            CU_ASSERT_EQUAL(STR->stream_synchronize(d, NULL),
                            KEEL_STATUS_OK);
    }
    /* int8 sum wraps, bool is not reduced, avg of ints is refused */
    CU_ASSERT_EQUAL(COL->all_reduce(c[0], NULL, 0, 0, 0, KEEL_BOOL,
                                    KEEL_REDUCE_SUM),
                    KEEL_STATUS_NOT_SUPPORTED);
    CU_ASSERT_EQUAL(COL->all_reduce(c[0], NULL, 0, 0, 0, KEEL_I32,
                                    KEEL_REDUCE_AVG),
                    KEEL_STATUS_NOT_SUPPORTED);
    /* a lone rank: the call returns at once, its stream times out (800 ms
     * here) and says so at the next synchronize, then works again */
    {
        keel_dptr q = 0;
        OK(MEM->alloc(0, 16, &q));
        OK(COL->all_reduce(c[0], NULL, q, q, 4, KEEL_F32, KEEL_REDUCE_SUM));
        CU_ASSERT_EQUAL(STR->stream_synchronize(0, NULL),
                        KEEL_STATUS_TIMEOUT);
        CU_ASSERT_PTR_NOT_NULL(strstr(last_msg, "timed out"));
        OK(STR->stream_synchronize(0, NULL));
        OK(MEM->free(0, q));
    }
    for (int r = 0; r < R; r++)
        OK(COL->comm_destroy(c[r]));
    CU_ASSERT_EQUAL(COL->comm_destroy(c[0]), KEEL_STATUS_INVALID_HANDLE);
}

/* ---- lifecycle ---------------------------------------------------------- */

static void t_reinit(void)
{
    keel_dptr d = 0;
    keel_stream s = NULL;

    OK(MEM->alloc(0, 128, &d));
    OK(STR->stream_create(0, 0, &s));
    OK(A->device->finalize());
    CU_ASSERT_EQUAL(MEM->alloc(0, 1, &d), KEEL_STATUS_NOT_INITIALIZED);
    OK(A->device->init());
    CU_ASSERT_EQUAL(STR->stream_synchronize(0, s), KEEL_STATUS_INVALID_HANDLE);
    OK(MEM->alloc(0, 128, &d));
    OK(MEM->memset(0, d, 1, 128));
    OK(MEM->free(0, d));
}

int main(void)
{
    const char *path = getenv("KEEL_TEST_OPENCL_PLUGIN");
    void *h;
    keel_plugin_get_api_fn get;
    CU_pSuite s;
    unsigned fails;

    if (!path) {
        fprintf(stderr, "KEEL_TEST_OPENCL_PLUGIN is not set\n");
        return 1;
    }
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return 1;
    }
    get = entry_of(h);
    A = get ? get(KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, &HOST)
            : NULL;
    if (!A) {
        fprintf(stderr, "no plugin table: %s\n", last_msg);
        return 1;
    }
    if (A->device->get_device_count(&NDEV) != KEEL_STATUS_OK)
        return 1;
    if (NDEV == 0) {
        printf("no OpenCL device (%s): skipped\n", last_msg);
        return last_msg[0] ? 77 : 1;
    }
    if (A->device->init() != KEEL_STATUS_OK) {
        fprintf(stderr, "init: %s\n", last_msg);
        return 1;
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("opencl-runtime", NULL, NULL);
    CU_add_test(s, "abi_and_alias", t_abi_and_alias);
    CU_add_test(s, "address_table", t_address_table);
    CU_add_test(s, "pinned", t_pinned);
    CU_add_test(s, "host_funcs", t_host_funcs);
    CU_add_test(s, "event_timing", t_event_timing);
    CU_add_test(s, "cross_device", t_cross_device);
    CU_add_test(s, "coll_half", t_coll_half);
    CU_add_test(s, "reinit", t_reinit);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures();
    CU_cleanup_registry();
    A->device->finalize();
    return fails ? 1 : 0;
}
