/*
 * The kit's in-process collective engine (kit_hostcoll.h) over a stand-in
 * backend: "devices" whose memory is host memory (a keel_dptr is a host
 * address), streams that are always idle, and a copy hook that can be made
 * to fail. Expected values are computed here, independently of the
 * engine, from the rank's index. The plugins that use the engine (the
 * Level Zero plugin over its mock driver, the GPU plugins without
 * NCCL/RCCL) are checked by `keel conform`; this test covers what conform
 * cannot force: a failing copy, a send before and after its recv, a
 * timed-out round that latecomers must not write into, integer wrapping.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>
#include <keel/kit_hostcoll.h>

#define NDEV 3

static char last_msg[512];
static keel_status last_status;
static _Atomic int fail_writes; /* > 0: the next writes fail */
static _Atomic int reads, writes;

static keel_status t_fail(keel_status st, const char *msg)
{
    last_status = st;
    snprintf(last_msg, sizeof(last_msg), "%s", msg);
    return st;
}

static keel_status t_enter(int32_t device, const char *call)
{
    if (device < 0 || device >= NDEV) {
        char m[128];
        snprintf(m, sizeof(m), "%s: no device %d", call, (int)device);
        return t_fail(KEEL_STATUS_INVALID_DEVICE, m);
    }
    return KEEL_STATUS_OK;
}

static keel_status t_stream_wait(int32_t device, keel_stream s,
                                 const char *call)
{
    (void)call;
    if (s)
        return t_fail(KEEL_STATUS_INVALID_HANDLE, "stream: not a stream");
    return t_enter(device, call);
}

static keel_status t_read(int32_t device, void *dst, keel_dptr src,
                          uint64_t n, char *msg, size_t msgn)
{
    (void)device, (void)msg, (void)msgn;
    atomic_fetch_add(&reads, 1);
    memcpy(dst, (const void *)(uintptr_t)src, (size_t)n);
    return KEEL_STATUS_OK;
}

static keel_status t_write(int32_t device, keel_dptr dst, const void *src,
                           uint64_t n, char *msg, size_t msgn)
{
    (void)device;
    atomic_fetch_add(&writes, 1);
    if (atomic_load(&fail_writes) > 0) {
        atomic_fetch_sub(&fail_writes, 1);
        snprintf(msg, msgn, "planted copy failure");
        return KEEL_STATUS_DEVICE_ERROR;
    }
    memcpy((void *)(uintptr_t)dst, src, (size_t)n);
    return KEEL_STATUS_OK;
}

static const char *t_env(const char *name)
{
    return strcmp(name, "T_HC_TIMEOUT") ? NULL : "400";
}

static const keel_kit_hostcoll B = {
    .plugin = "test",
    .device_type = "dev",
    .timeout_env = "T_HC_TIMEOUT",
    .env = t_env,
    .fail = t_fail,
    .enter = t_enter,
    .stream_wait = t_stream_wait,
    .read = t_read,
    .write = t_write,
};

#define P(x) ((keel_dptr)(uintptr_t)(x))

/* One group from one thread: NDEV communicators on one id. */
static void make_comms(keel_comm *c, int n)
{
    keel_comm_id id;

    CU_ASSERT_EQUAL_FATAL(keel_kit_hc_get_unique_id(&B, &id), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_kit_hc_group_start(&B), KEEL_STATUS_OK);
    for (int r = 0; r < n; r++)
        CU_ASSERT_EQUAL(keel_kit_hc_comm_init_rank(&B, r, n, &id, r, &c[r]),
                        KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_kit_hc_group_end(&B), KEEL_STATUS_OK);
}

static void free_comms(keel_comm *c, int n)
{
    for (int r = 0; r < n; r++)
        CU_ASSERT_EQUAL(keel_kit_hc_comm_destroy(&B, c[r]), KEEL_STATUS_OK);
}

static void test_all_reduce_kinds(void)
{
    keel_comm c[NDEV];
    float f[NDEV][5];
    int8_t i8[NDEV][2];
    int32_t i32[NDEV][2];
    int64_t i64[NDEV][1];

    make_comms(c, NDEV);
    for (int r = 0; r < NDEV; r++) {
        for (int i = 0; i < 5; i++)
            f[r][i] = (float)(r + 1) * (float)(i + 1);
        i8[r][0] = 100;            /* 3 x 100 wraps to 44 */
        i8[r][1] = (int8_t)(-r);   /* min: -2 */
        i32[r][0] = 2000000000;    /* sum wraps */
        i32[r][1] = 65536;         /* product 2^48 wraps to 0 */
        i64[r][0] = INT64_MAX;     /* sum wraps to INT64_MAX - 2 */
    }
    CU_ASSERT_EQUAL(keel_kit_hc_group_start(&B), KEEL_STATUS_OK);
    for (int r = 0; r < NDEV; r++)
        keel_kit_hc_all_reduce(&B, c[r], NULL, P(f[r]), P(f[r]), 5, KEEL_F32,
                               KEEL_REDUCE_AVG);
    CU_ASSERT_EQUAL(keel_kit_hc_group_end(&B), KEEL_STATUS_OK);
    for (int r = 0; r < NDEV; r++)
        for (int i = 0; i < 5; i++)
            CU_ASSERT_DOUBLE_EQUAL(f[r][i], 2.0 * (i + 1), 1e-6);

    CU_ASSERT_EQUAL(keel_kit_hc_group_start(&B), KEEL_STATUS_OK);
    for (int r = 0; r < NDEV; r++) {
        keel_kit_hc_all_reduce(&B, c[r], NULL, P(&i8[r][0]), P(&i8[r][0]), 1,
                               KEEL_I8, KEEL_REDUCE_SUM);
        keel_kit_hc_all_reduce(&B, c[r], NULL, P(&i8[r][1]), P(&i8[r][1]), 1,
                               KEEL_I8, KEEL_REDUCE_MIN);
        keel_kit_hc_all_reduce(&B, c[r], NULL, P(&i32[r][0]), P(&i32[r][0]),
                               1, KEEL_I32, KEEL_REDUCE_SUM);
        keel_kit_hc_all_reduce(&B, c[r], NULL, P(&i32[r][1]), P(&i32[r][1]),
                               1, KEEL_I32, KEEL_REDUCE_PROD);
        keel_kit_hc_all_reduce(&B, c[r], NULL, P(i64[r]), P(i64[r]), 1,
                               KEEL_I64, KEEL_REDUCE_SUM);
    }
    CU_ASSERT_EQUAL(keel_kit_hc_group_end(&B), KEEL_STATUS_OK);
    for (int r = 0; r < NDEV; r++) {
        CU_ASSERT_EQUAL(i8[r][0], 44);
        CU_ASSERT_EQUAL(i8[r][1], -2);
        CU_ASSERT_EQUAL(i32[r][0], (int32_t)(uint32_t)(3ull * 2000000000ull));
        CU_ASSERT_EQUAL(i32[r][1], 0);
        CU_ASSERT_EQUAL(i64[r][0], INT64_MAX - 2);
    }
    free_comms(c, NDEV);
}

static void test_data_movement(void)
{
    keel_comm c[NDEV];
    int32_t send[NDEV][NDEV * 2], recv[NDEV][NDEV * 2];

    make_comms(c, NDEV);
    for (int r = 0; r < NDEV; r++)
        for (int i = 0; i < NDEV * 2; i++)
            send[r][i] = 100 * r + i;
    /* all_to_all, 2 elements per peer: block j of rank i -> block i of j */
    memset(recv, 0, sizeof(recv));
    CU_ASSERT_EQUAL(keel_kit_hc_group_start(&B), KEEL_STATUS_OK);
    for (int r = 0; r < NDEV; r++)
        keel_kit_hc_all_to_all(&B, c[r], NULL, P(send[r]), P(recv[r]), 2,
                               KEEL_I32);
    CU_ASSERT_EQUAL(keel_kit_hc_group_end(&B), KEEL_STATUS_OK);
    for (int j = 0; j < NDEV; j++)
        for (int i = 0; i < NDEV; i++)
            for (int k = 0; k < 2; k++)
                CU_ASSERT_EQUAL(recv[j][i * 2 + k], 100 * i + j * 2 + k);
    /* broadcast from the last rank; reduce to rank 1 leaves others alone */
    memset(recv, 0, sizeof(recv));
    CU_ASSERT_EQUAL(keel_kit_hc_group_start(&B), KEEL_STATUS_OK);
    for (int r = 0; r < NDEV; r++) {
        keel_kit_hc_broadcast(&B, c[r], NULL, P(send[r]), P(recv[r]), 2,
                              KEEL_I32, NDEV - 1);
        keel_kit_hc_reduce(&B, c[r], NULL, P(send[r]), P(&recv[r][2]), 2,
                           KEEL_I32, KEEL_REDUCE_MAX, 1);
    }
    CU_ASSERT_EQUAL(keel_kit_hc_group_end(&B), KEEL_STATUS_OK);
    for (int r = 0; r < NDEV; r++) {
        CU_ASSERT_EQUAL(recv[r][0], 100 * (NDEV - 1));
        CU_ASSERT_EQUAL(recv[r][1], 100 * (NDEV - 1) + 1);
        CU_ASSERT_EQUAL(recv[r][2], r == 1 ? 100 * (NDEV - 1) : 0);
        CU_ASSERT_EQUAL(recv[r][3], r == 1 ? 100 * (NDEV - 1) + 1 : 0);
    }
    free_comms(c, NDEV);
}

static void test_send_recv_orders(void)
{
    keel_comm c[2];
    double a[4] = {1, 2, 3, 4}, b[4] = {0}, d[4] = {0};

    make_comms(c, 2);
    /* send first, ungrouped: it returns once staged, before the recv */
    CU_ASSERT_EQUAL(keel_kit_hc_send(&B, c[0], NULL, P(a), 4, KEEL_F64, 1),
                    KEEL_STATUS_OK);
    a[0] = -1; /* staged already: the receiver must see 1 */
    CU_ASSERT_EQUAL(keel_kit_hc_recv(&B, c[1], NULL, P(b), 4, KEEL_F64, 0),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(b[0], 1);
    CU_ASSERT_EQUAL(b[3], 4);
    /* recv first, inside a group with the send after it */
    CU_ASSERT_EQUAL(keel_kit_hc_group_start(&B), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_kit_hc_recv(&B, c[0], NULL, P(d), 2, KEEL_F64, 1),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_kit_hc_send(&B, c[1], NULL, P(&b[2]), 2, KEEL_F64, 0),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_kit_hc_group_end(&B), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(d[0], 3);
    CU_ASSERT_EQUAL(d[1], 4);
    /* a count mismatch fails both sides that see it */
    CU_ASSERT_EQUAL(keel_kit_hc_group_start(&B), KEEL_STATUS_OK);
    keel_kit_hc_recv(&B, c[0], NULL, P(d), 3, KEEL_F64, 1);
    CU_ASSERT_EQUAL(keel_kit_hc_send(&B, c[1], NULL, P(b), 2, KEEL_F64, 0),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(keel_kit_hc_group_end(&B), KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(last_msg, "3 elements of float64 expected"));
    /* peer out of range, or the rank itself */
    CU_ASSERT_EQUAL(keel_kit_hc_send(&B, c[0], NULL, P(a), 1, KEEL_F64, 2),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(keel_kit_hc_recv(&B, c[0], NULL, P(a), 1, KEEL_F64, 0),
                    KEEL_STATUS_INVALID_ARGUMENT);
    free_comms(c, 2);
}

static void test_copy_failure_reaches_every_rank(void)
{
    keel_comm c[NDEV];
    float v[NDEV][2];

    make_comms(c, NDEV);
    atomic_store(&fail_writes, 1);
    CU_ASSERT_EQUAL(keel_kit_hc_group_start(&B), KEEL_STATUS_OK);
    for (int r = 0; r < NDEV; r++)
        keel_kit_hc_all_reduce(&B, c[r], NULL, P(v[r]), P(v[r]), 2, KEEL_F32,
                               KEEL_REDUCE_SUM);
    CU_ASSERT_EQUAL(keel_kit_hc_group_end(&B), KEEL_STATUS_DEVICE_ERROR);
    CU_ASSERT_PTR_NOT_NULL(strstr(last_msg, "planted copy failure"));
    CU_ASSERT_PTR_NOT_NULL(strstr(last_msg, "all_reduce"));
    atomic_store(&fail_writes, 0);
    free_comms(c, NDEV);
}

struct late {
    keel_comm c;
    float *buf;
    keel_status st;
};

static void *late_rank(void *arg)
{
    struct late *l = arg;
    l->st = keel_kit_hc_all_reduce(&B, l->c, NULL, P(l->buf), P(l->buf), 1,
                                   KEEL_F32, KEEL_REDUCE_SUM);
    return NULL;
}

static void test_timeout_then_latecomer(void)
{
    keel_comm c[2];
    float a = 1, b = 2;
    struct late l;
    pthread_t t;

    make_comms(c, 2);
    /* rank 0 alone: TIMEOUT within the 400 ms bound */
    CU_ASSERT_EQUAL(keel_kit_hc_all_reduce(&B, c[0], NULL, P(&a), P(&a), 1,
                                           KEEL_F32, KEEL_REDUCE_SUM),
                    KEEL_STATUS_TIMEOUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(last_msg, "1 of 2 parties"));
    /* the latecomer gets the round's failure and writes nothing: rank 0's
     * buffer keeps its value */
    l = (struct late){c[1], &b, KEEL_STATUS_OK};
    pthread_create(&t, NULL, late_rank, &l);
    pthread_join(t, NULL);
    CU_ASSERT_EQUAL(l.st, KEEL_STATUS_TIMEOUT);
    CU_ASSERT_EQUAL(a, 1);
    CU_ASSERT_EQUAL(b, 2);
    /* and the next round works again */
    CU_ASSERT_EQUAL(keel_kit_hc_group_start(&B), KEEL_STATUS_OK);
    keel_kit_hc_all_reduce(&B, c[0], NULL, P(&a), P(&a), 1, KEEL_F32,
                           KEEL_REDUCE_SUM);
    keel_kit_hc_all_reduce(&B, c[1], NULL, P(&b), P(&b), 1, KEEL_F32,
                           KEEL_REDUCE_SUM);
    CU_ASSERT_EQUAL(keel_kit_hc_group_end(&B), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(a, 3);
    CU_ASSERT_EQUAL(b, 3);
    free_comms(c, 2);
}

static void test_errors(void)
{
    keel_comm c[2], x;
    keel_comm_id id;
    keel_collective_caps caps = {.struct_size = sizeof(caps)};
    float v = 0;

    make_comms(c, 2);
    CU_ASSERT_EQUAL(keel_kit_hc_all_reduce(&B, (keel_comm)(void *)&v, NULL,
                                           P(&v), P(&v), 1, KEEL_F32,
                                           KEEL_REDUCE_SUM),
                    KEEL_STATUS_INVALID_HANDLE);
    CU_ASSERT_EQUAL(keel_kit_hc_all_reduce(&B, c[0], NULL, P(&v), P(&v), 1,
                                           KEEL_BOOL, KEEL_REDUCE_SUM),
                    KEEL_STATUS_NOT_SUPPORTED);
    CU_ASSERT_EQUAL(keel_kit_hc_all_reduce(&B, c[0], NULL, P(&v), P(&v), 1,
                                           KEEL_I32, KEEL_REDUCE_AVG),
                    KEEL_STATUS_NOT_SUPPORTED);
    CU_ASSERT_EQUAL(keel_kit_hc_broadcast(&B, c[0], NULL, P(&v), P(&v), 1,
                                          KEEL_F32, 2),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(keel_kit_hc_all_reduce(&B, c[0], NULL, 0, P(&v), 1,
                                           KEEL_F32, KEEL_REDUCE_SUM),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(keel_kit_hc_all_gather(&B, c[0], NULL, P(&v), P(&v),
                                           UINT64_MAX / 2, KEEL_F32),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(last_msg, "overflow"));
    CU_ASSERT_EQUAL(keel_kit_hc_all_reduce(&B, c[0], (keel_stream)(void *)&v,
                                           P(&v), P(&v), 1, KEEL_F32,
                                           KEEL_REDUCE_SUM),
                    KEEL_STATUS_INVALID_HANDLE);
    CU_ASSERT_EQUAL(keel_kit_hc_group_end(&B), KEEL_STATUS_INVALID_STATE);
    /* a rank joined twice, a different size, a bad device */
    keel_kit_hc_get_unique_id(&B, &id);
    CU_ASSERT_EQUAL(keel_kit_hc_comm_init_rank(&B, 0, 2, &id, 2, &x),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(keel_kit_hc_comm_init_rank(&B, NDEV, 1, &id, 0, &x),
                    KEEL_STATUS_INVALID_DEVICE);
    CU_ASSERT_EQUAL(keel_kit_hc_get_caps(&B, 0, &caps), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(caps.timeout_ms, 400);
    CU_ASSERT(caps.collectives & KEEL_COLL_SEND_RECV);
    free_comms(c, 2);
    CU_ASSERT_EQUAL(keel_kit_hc_comm_destroy(&B, c[0]),
                    KEEL_STATUS_INVALID_HANDLE);
}

struct joiner {
    keel_comm_id id;
    int rank;
    keel_comm c;
    keel_status st;
    int32_t send[4], recv[4];
};

static void *thread_rank(void *arg)
{
    struct joiner *j = arg;

    j->st = keel_kit_hc_comm_init_rank(&B, j->rank, NDEV, &j->id, j->rank,
                                       &j->c);
    if (j->st)
        return NULL;
    j->st = keel_kit_hc_all_gather(&B, j->c, NULL, P(j->send), P(j->recv), 1,
                                   KEEL_I32);
    if (!j->st)
        j->st = keel_kit_hc_comm_destroy(&B, j->c);
    return NULL;
}

static void test_thread_per_rank(void)
{
    struct joiner j[NDEV];
    pthread_t t[NDEV];
    keel_comm_id id;

    keel_kit_hc_get_unique_id(&B, &id);
    for (int r = 0; r < NDEV; r++) {
        memset(&j[r], 0, sizeof(j[r]));
        j[r].id = id;
        j[r].rank = r;
        j[r].send[0] = 7 * r + 1;
        pthread_create(&t[r], NULL, thread_rank, &j[r]);
    }
    for (int r = 0; r < NDEV; r++)
        pthread_join(t[r], NULL);
    for (int r = 0; r < NDEV; r++) {
        CU_ASSERT_EQUAL(j[r].st, KEEL_STATUS_OK);
        for (int i = 0; i < NDEV; i++)
            CU_ASSERT_EQUAL(j[r].recv[i], 7 * i + 1);
    }
}

static void test_finalize_frees(void)
{
    keel_comm c[2];
    float v = 1;

    make_comms(c, 2);
    keel_kit_hc_finalize(&B);
    CU_ASSERT_EQUAL(keel_kit_hc_all_reduce(&B, c[0], NULL, P(&v), P(&v), 1,
                                           KEEL_F32, KEEL_REDUCE_SUM),
                    KEEL_STATUS_INVALID_HANDLE);
}

int main(void)
{
    CU_pSuite s;
    unsigned fails;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("kit_hostcoll", NULL, NULL);
    CU_add_test(s, "all_reduce: avg, wrapping integers, min",
                test_all_reduce_kinds);
    CU_add_test(s, "all_to_all, broadcast, reduce", test_data_movement);
    CU_add_test(s, "send before / after recv, mismatch",
                test_send_recv_orders);
    CU_add_test(s, "a failed copy reaches every rank",
                test_copy_failure_reaches_every_rank);
    CU_add_test(s, "timeout: latecomers write nothing",
                test_timeout_then_latecomer);
    CU_add_test(s, "argument errors", test_errors);
    CU_add_test(s, "one thread per rank, ungrouped", test_thread_per_rank);
    CU_add_test(s, "finalize frees every communicator", test_finalize_frees);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return fails ? 1 : 0;
}
