/*
 * Host memory in place (ABI 1.4): keel_tensor_from_host_memory wraps the
 * caller's array without a copy, keel_tensor_host_address hands a
 * tensor's memory to host code. Runs twice: with host-addressable memory
 * and in discrete mode (KEEL_CPU_DISCRETE=1), where wrapping still works
 * (register_host) and host_address is refused.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>

#include <keel/ops.h>

#include "check.h"

static bool discrete;

static void count_release(void *ctx)
{
    (*(int *)ctx)++;
}

static void read_floats(const keel_tensor *t, float *out, size_t n)
{
    keel_tensor *c;

    OK(keel_contiguous(t, &c));
    OK(keel_tensor_to_host(c, out, n * sizeof(float)));
    keel_tensor_free(c);
}

/* A wrapped array computes like any tensor, sees the host's later writes,
 * and goes back (release, once) with the last view. */
static void test_wrap_compute(void)
{
    float a[6] = {1, 2, 3, 4, 5, 6}, got[6];
    int64_t shape[2] = {2, 3};
    int released = 0;
    keel_tensor *t, *y, *v;

    OK(keel_tensor_from_host_memory(a, KEEL_F32, 2, shape, NULL, "cpu",
                                    count_release, &released, &t));
    OK(keel_add(t, t, &y));
    read_floats(y, got, 6);
    for (int i = 0; i < 6; i++)
        CU_ASSERT_EQUAL(got[i], 2 * a[i]);
    keel_tensor_free(y);
    /* The host writes; keel reads the same bytes. */
    a[4] = 50;
    read_floats(t, got, 6);
    CU_ASSERT_EQUAL(got[4], 50);
    /* A view keeps the memory: release waits for it. */
    OK(keel_transpose(t, 0, 1, &v));
    keel_tensor_free(t);
    CU_ASSERT_EQUAL(released, 0);
    read_floats(v, got, 6);
    CU_ASSERT_EQUAL(got[1], 4); /* v[0][1] = a[1][0] */
    keel_tensor_free(v);
    CU_ASSERT_EQUAL(released, 1);
}

/* A kernel writes into the caller's array in place: GradScaler's
 * unscale (x *= 1 / scale) on the wrapped array. */
static void test_wrap_write_through(void)
{
    double a[4] = {1.5, -2, 3, 8};
    float half = 0.5f;
    int64_t shape[1] = {4}, one[1] = {1};
    int released = 0;
    keel_tensor *t, *scale, *found;

    OK(keel_tensor_from_host_memory(a, KEEL_F64, 1, shape, NULL, NULL,
                                    count_release, &released, &t));
    OK(keel_tensor_from_host(&half, KEEL_F32, 1, one, NULL, &scale));
    OK(keel_zeros(1, one, KEEL_BOOL, NULL, &found));
    OK(keel_check_finite_and_unscale(t, scale, found));
    OK(keel_device_synchronize(keel_tensor_place(t)));
    CU_ASSERT_EQUAL(a[0], 3);
    CU_ASSERT_EQUAL(a[1], -4);
    CU_ASSERT_EQUAL(a[3], 16);
    keel_tensor_free(found);
    keel_tensor_free(scale);
    keel_tensor_free(t);
    CU_ASSERT_EQUAL(released, 1);
}

/* Strides in elements: a column-major 3x2 array is the transpose of a
 * row-major 2x3 one. */
static void test_wrap_strided(void)
{
    int32_t a[6] = {1, 2, 3, 4, 5, 6}, got[6];
    int64_t shape[2] = {3, 2}, strides[2] = {1, 3};
    keel_tensor *t, *c;

    OK(keel_tensor_from_host_memory(a, KEEL_I32, 2, shape, strides, NULL,
                                    NULL, NULL, &t));
    CU_ASSERT_FALSE(keel_tensor_is_contiguous(t));
    OK(keel_contiguous(t, &c));
    OK(keel_tensor_to_host(c, got, sizeof(got)));
    /* row r of t is column r of the 2x3 array a */
    CU_ASSERT_EQUAL(got[0], 1);
    CU_ASSERT_EQUAL(got[1], 4);
    CU_ASSERT_EQUAL(got[2], 2);
    CU_ASSERT_EQUAL(got[5], 6);
    keel_tensor_free(c);
    keel_tensor_free(t);
}

/* Bad input is refused, names what was wrong, and takes nothing. */
static void test_wrap_errors(void)
{
    float a[8] = {0};
    char *bytes = (char *)a;
    int64_t shape[2] = {2, 2}, neg[2] = {-1, 1}, huge[2] = {INT64_MAX / 2, 1};
    int released = 0;
    keel_tensor *t = NULL;

    ERR(keel_tensor_from_host_memory(a, KEEL_F32, 2, shape, neg, NULL,
                                     count_release, &released, &t),
        KEEL_STATUS_INVALID_ARGUMENT, "strides[0] = -1 is negative");
    ERR(keel_tensor_from_host_memory(bytes + 1, KEEL_F32, 2, shape, NULL,
                                     NULL, count_release, &released, &t),
        KEEL_STATUS_INVALID_ARGUMENT, "not aligned to the 4-byte elements");
    ERR(keel_tensor_from_host_memory(NULL, KEEL_F32, 2, shape, NULL, NULL,
                                     count_release, &released, &t),
        KEEL_STATUS_INVALID_ARGUMENT, "data is NULL");
    ERR(keel_tensor_from_host_memory(a, KEEL_F32, 2, shape, huge, NULL,
                                     count_release, &released, &t),
        KEEL_STATUS_INVALID_ARGUMENT, "beyond 2^63-1 bytes");
    shape[0] = -3;
    ERR(keel_tensor_from_host_memory(a, KEEL_F32, 2, shape, NULL, NULL,
                                     count_release, &released, &t),
        KEEL_STATUS_INVALID_ARGUMENT, "negative");
    shape[0] = 2;
    ERR(keel_tensor_from_host_memory(a, KEEL_F32, 2, shape, NULL, "nodev:0",
                                     count_release, &released, &t),
        KEEL_STATUS_NOT_FOUND, "nodev");
    ERR(keel_tensor_from_host_memory(a, KEEL_F32, 2, shape, NULL, NULL,
                                     count_release, &released, NULL),
        KEEL_STATUS_INVALID_ARGUMENT, "out is NULL");
    CU_ASSERT_PTR_NULL(t);
    CU_ASSERT_EQUAL(released, 0);
}

/* An empty shape needs no memory: release runs at once. */
static void test_wrap_empty(void)
{
    float a[1];
    int64_t shape[2] = {0, 3};
    int released = 0;
    keel_tensor *t;

    OK(keel_tensor_from_host_memory(a, KEEL_F32, 2, shape, NULL, NULL,
                                    count_release, &released, &t));
    CU_ASSERT_EQUAL(released, 1);
    CU_ASSERT_EQUAL(keel_tensor_numel(t), 0);
    keel_tensor_free(t);
    CU_ASSERT_EQUAL(released, 1);
}

/* One array wrapped twice, and a tensor's own memory wrapped again:
 * registrations may overlap. */
static void test_wrap_overlap(void)
{
    float a[4] = {1, 2, 3, 4}, got[4];
    int64_t shape[1] = {4}, two[1] = {2};
    int released = 0;
    keel_tensor *t1, *t2, *y;

    OK(keel_tensor_from_host_memory(a, KEEL_F32, 1, shape, NULL, NULL,
                                    count_release, &released, &t1));
    OK(keel_tensor_from_host_memory(a + 2, KEEL_F32, 1, two, NULL, NULL,
                                    count_release, &released, &t2));
    keel_tensor_free(t1);
    CU_ASSERT_EQUAL(released, 1);
    OK(keel_add(t2, t2, &y));
    read_floats(y, got, 2);
    CU_ASSERT_EQUAL(got[0], 6);
    CU_ASSERT_EQUAL(got[1], 8);
    keel_tensor_free(y);
    keel_tensor_free(t2);
    CU_ASSERT_EQUAL(released, 2);
}

/* host_address: the bytes of a tensor (and of a view: its offset) with
 * host-addressable memory; NOT_SUPPORTED, naming the device, in discrete
 * mode. */
static void test_host_address(void)
{
    float v[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[1] = {6};
    keel_tensor *t, *s;
    void *addr = (void *)1;

    OK(keel_tensor_from_host(v, KEEL_F32, 1, shape, NULL, &t));
    OK(keel_slice(t, 0, 2, 5, 1, &s));
    if (discrete) {
        ERR(keel_tensor_host_address(t, &addr), KEEL_STATUS_NOT_SUPPORTED,
            "cpu:0");
        CU_ASSERT_PTR_NULL(addr);
    } else {
        float *p, *q;

        OK(keel_tensor_host_address(t, &addr));
        p = addr;
        CU_ASSERT_EQUAL(memcmp(p, v, sizeof(v)), 0);
        OK(keel_tensor_host_address(s, &addr));
        q = addr;
        CU_ASSERT_PTR_EQUAL(q, p + 2);
        /* Writes through the address are the tensor's values. */
        q[0] = 30;
        {
            float got[6];

            read_floats(t, got, 6);
            CU_ASSERT_EQUAL(got[2], 30);
        }
    }
    ERR(keel_tensor_host_address(NULL, &addr), KEEL_STATUS_INVALID_ARGUMENT,
        "t is NULL");
    keel_tensor_free(s);
    keel_tensor_free(t);
}

/* A wrapped array's host_address is the array itself. */
static void test_host_address_of_wrapped(void)
{
    float a[3] = {1, 2, 3};
    int64_t shape[1] = {3};
    keel_tensor *t;
    void *addr;

    if (discrete)
        return; /* covered by test_host_address's refusal */
    OK(keel_tensor_from_host_memory(a, KEEL_F32, 1, shape, NULL, NULL, NULL,
                                    NULL, &t));
    OK(keel_tensor_host_address(t, &addr));
    CU_ASSERT_PTR_EQUAL(addr, a);
    keel_tensor_free(t);
}

int main(void)
{
    static const struct check_test tests[] = {
        {"wrap: compute, host writes seen, release with the last view",
         test_wrap_compute},
        {"wrap: keel writes into the array", test_wrap_write_through},
        {"wrap: strides", test_wrap_strided},
        {"wrap: bad input refused, nothing taken", test_wrap_errors},
        {"wrap: empty shape", test_wrap_empty},
        {"wrap: overlapping registrations", test_wrap_overlap},
        {"host_address", test_host_address},
        {"host_address of a wrapped array", test_host_address_of_wrapped},
    };
    const char *d = getenv("KEEL_CPU_DISCRETE");

    discrete = d && !strcmp(d, "1");
    return check_run("host-memory", tests, sizeof(tests) / sizeof(tests[0]));
}
