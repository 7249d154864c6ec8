/*
 * keel bench — launch and synchronization latency, in ns per operation,
 * timed by the library with the wall clock over many iterations.
 *
 *   launch/empty_kernel/plugin   the plugin's add kernel called directly on
 *                                empty descriptors + stream synchronize:
 *                                the device's own round trip
 *   launch/empty_op/keel         keel_add on two empty tensors + free +
 *                                stream synchronize: the same through
 *                                keel's dispatch and allocator
 *   launch/small_op/add_4xf32    keel_add on 4-element float32 tensors and
 *                                freeing the result, no synchronize: the
 *                                framework overhead PyTorch eager is
 *                                compared with (bench/compare_torch.py)
 *   launch/small_op_sync/add_4xf32   the same + stream synchronize
 *   launch/stream_sync           synchronize an idle default stream
 *   launch/event_record_sync     record an event and wait for it
 *   launch/device_sync           synchronize the whole (idle) device
 */
#include <stdio.h>
#include <string.h>

#include "kb.h"

enum launch_kind {
    L_EMPTY_KERNEL,
    L_EMPTY_OP,
    L_SMALL_OP,
    L_SMALL_OP_SYNC,
    L_STREAM_SYNC,
    L_EVENT_SYNC,
    L_DEVICE_SYNC
};

struct launch_bench {
    struct kb_bench b;
    enum launch_kind kind;
};

/* The plugin's add kernel on empty descriptors, then a round trip. */
static void run_empty_kernel(keel_bm_state *st, struct launch_bench *l)
{
    const struct kb_env *env = l->b.env;
    keel_op_id op = KEEL_OP_ADD;
    keel_dtype dt = KEEL_F32;
    keel_kernel k;
    keel_tensor_desc d[3];
    keel_kernel_args a;
    keel_status s;

    if (!kb_need_kernels(st, &l->b, 1, &op, &dt))
        return;
    s = env->api->kernel->lookup(env->place.device, "add", KEEL_F32, &k);
    if (s != KEEL_STATUS_OK) {
        kb_fail(st, &l->b, KB_ERROR, "lookup add: %s", keel_status_name(s));
        return;
    }
    memset(d, 0, sizeof(d));
    for (int i = 0; i < 3; i++) {
        d[i].dtype = KEEL_F32;
        d[i].ndim = 1;
        d[i].shape[0] = 0;
        d[i].strides[0] = 1;
    }
    a = (keel_kernel_args){
        .struct_size = sizeof(a),
        .device = env->place.device,
        .stream = NULL,
        .inputs = d,
        .num_inputs = 2,
        .outputs = d + 2,
        .num_outputs = 1,
        .attrs = NULL,
        .num_attrs = 0,
    };
    for (int w = 0; w < 100; w++) {
        s = k.fn(k.kernel_data, &a);
        if (s == KEEL_STATUS_OK)
            s = keel_stream_synchronize(env->place, NULL);
        if (s != KEEL_STATUS_OK) {
            kb_fail(st, &l->b, KB_ERROR, "empty add kernel: %s",
                    keel_status_name(s));
            return;
        }
    }
    l->b.checked = true;
    while (keel_bm_keep_running(st)) {
        k.fn(k.kernel_data, &a);
        keel_stream_synchronize(env->place, NULL);
    }
}

static void run_ops(keel_bm_state *st, struct launch_bench *l)
{
    const struct kb_env *env = l->b.env;
    float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, got[4];
    int64_t shape[1] = {l->kind == L_EMPTY_OP ? 0 : 4};
    keel_tensor *x = NULL, *y = NULL, *z = NULL;
    keel_op_id op = KEEL_OP_ADD;
    keel_dtype dt = KEEL_F32;
    bool sync = l->kind != L_SMALL_OP;
    keel_status s;

    if (!kb_need_kernels(st, &l->b, 1, &op, &dt))
        return;
    s = keel_tensor_from_host(a, KEEL_F32, 1, shape, env->device, &x);
    if (s == KEEL_STATUS_OK)
        s = keel_tensor_from_host(b, KEEL_F32, 1, shape, env->device, &y);
    if (s != KEEL_STATUS_OK) {
        kb_fail_status(st, &l->b, "inputs", s);
        goto out;
    }
    /* Warm up the kernel cache, the allocator cache and the pool. */
    for (int w = 0; w < 1000; w++) {
        keel_tensor_free(z);
        z = NULL;
        s = keel_add(x, y, &z);
        if (s != KEEL_STATUS_OK) {
            kb_fail_status(st, &l->b, "keel_add", s);
            goto out;
        }
    }
    if (!l->b.checked && shape[0] == 4) {
        const double ref[4] = {6, 8, 10, 12};
        s = keel_tensor_to_host(z, got, sizeof(got));
        if (s != KEEL_STATUS_OK) {
            kb_fail_status(st, &l->b, "read result", s);
            goto out;
        }
        if (!kb_check(st, &l->b, "add", got, ref, NULL, 4, 0, 0))
            goto out;
    }
    l->b.checked = true;
    keel_tensor_free(z);
    z = NULL;
    keel_stream_synchronize(env->place, NULL);
    while (keel_bm_keep_running(st)) {
        s = keel_add(x, y, &z);
        if (s != KEEL_STATUS_OK) {
            kb_fail_status(st, &l->b, "keel_add", s);
            goto out;
        }
        keel_tensor_free(z);
        z = NULL;
        if (sync)
            keel_stream_synchronize(env->place, NULL);
    }
out:
    keel_tensor_free(z);
    keel_tensor_free(x);
    keel_tensor_free(y);
}

static void run_sync(keel_bm_state *st, struct launch_bench *l)
{
    const struct kb_env *env = l->b.env;
    keel_event ev = NULL;
    keel_status s = KEEL_STATUS_OK;

    if (l->kind == L_EVENT_SYNC) {
        s = keel_event_create(env->place, &ev);
        if (s != KEEL_STATUS_OK) {
            kb_fail_status(st, &l->b, "event create", s);
            return;
        }
    }
    for (int w = 0; w < 100 && s == KEEL_STATUS_OK; w++) {
        if (l->kind == L_STREAM_SYNC) {
            s = keel_stream_synchronize(env->place, NULL);
        } else if (l->kind == L_DEVICE_SYNC) {
            s = keel_device_synchronize(env->place);
        } else {
            s = keel_event_record(env->place, ev, NULL);
            if (s == KEEL_STATUS_OK)
                s = keel_event_synchronize(env->place, ev);
            if (s == KEEL_STATUS_OK && keel_event_query(env->place, ev))
                s = KEEL_STATUS_INVALID_STATE;
        }
    }
    if (s != KEEL_STATUS_OK) {
        kb_fail_status(st, &l->b, "synchronize", s);
        goto out;
    }
    l->b.checked = true;
    while (keel_bm_keep_running(st)) {
        if (l->kind == L_STREAM_SYNC) {
            keel_stream_synchronize(env->place, NULL);
        } else if (l->kind == L_DEVICE_SYNC) {
            keel_device_synchronize(env->place);
        } else {
            keel_event_record(env->place, ev, NULL);
            keel_event_synchronize(env->place, ev);
        }
    }
out:
    if (ev)
        keel_event_destroy(env->place, ev);
}

static void bm_launch(keel_bm_state *st, void *ctx)
{
    struct launch_bench *l = ctx;

    switch (l->kind) {
    case L_EMPTY_KERNEL:
        run_empty_kernel(st, l);
        break;
    case L_EMPTY_OP:
    case L_SMALL_OP:
    case L_SMALL_OP_SYNC:
        run_ops(st, l);
        break;
    default:
        run_sync(st, l);
        break;
    }
}

void kb_register_launch(const struct kb_env *env)
{
    static const struct {
        const char *name;
        enum launch_kind kind;
    } list[] = {
        {"launch/empty_kernel/plugin", L_EMPTY_KERNEL},
        {"launch/empty_op/keel", L_EMPTY_OP},
        {"launch/small_op/add_4xf32", L_SMALL_OP},
        {"launch/small_op_sync/add_4xf32", L_SMALL_OP_SYNC},
        {"launch/stream_sync", L_STREAM_SYNC},
        {"launch/event_record_sync", L_EVENT_SYNC},
        {"launch/device_sync", L_DEVICE_SYNC},
    };

    for (size_t i = 0; i < sizeof(list) / sizeof(list[0]); i++) {
        struct launch_bench *l =
            kb_register(env, list[i].name, sizeof(*l), bm_launch,
                        KEEL_BM_TIME_REAL, KEEL_BM_UNIT_NS);
        if (l)
            l->kind = list[i].kind;
    }
}
