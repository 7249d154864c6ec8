/*
 * The dist layer across processes: run as `mpirun -np 2 test_dist` (the
 * core-dist-mpi test), or alone as a world of one (core-dist-single).
 *
 * collectives   every tensor collective against values each rank can
 *               work out by hand, sub-groups, and the refusals;
 * data parallel LeNet, 200 momentum steps: each rank starts from its own
 *               random weights (so the broadcast at wrap time matters),
 *               trains on its shard of every global batch (the loader's
 *               num_replicas/rank), and afterwards (a) every rank holds
 *               bit-identical parameters, (b) they match one model trained
 *               in this process on the whole global batch, within a
 *               float32 bound, with the max difference printed;
 * no_sync       backward with synchronisation off leaves the ranks'
 *               gradients their own;
 * timeout       (`--timeout-case`, 2 ranks): rank 1 stays away from an
 *               all_reduce; rank 0's call fails with TIMEOUT naming the
 *               collective and the rank, within the plugin's timeout;
 * killed        (`--kill-case`): rank 1 dies. Both fault cases run under
 *               dist_fault.py, which checks the job's output and that it
 *               ended in time (a lost peer leaves MPI unfinalized, so
 *               mpirun's own status is not the verdict there).
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include <keel/autograd.h>
#include <keel/data.h>
#include <keel/amp.h>
#include <keel/dist.h>
#include <keel/io.h>
#include <keel/nn.h>
#include <keel/ops.h>
#include <keel/optim.h>
#include <keel/runtime.h>
#include <keel/tensor.h>

#include "lenet.h"

#define OK(x) CU_ASSERT_EQUAL_FATAL((x), KEEL_STATUS_OK)

static int32_t R, W; /* rank, world size */

static keel_tensor *floats(int n, const float *v)
{
    int64_t shape[1] = {n};
    keel_tensor *t = NULL;

    if (keel_tensor_from_host(v, KEEL_F32, 1, shape, "cpu", &t))
        return NULL;
    return t;
}

static void host(const keel_tensor *t, void *dst, size_t bytes)
{
    CU_ASSERT_EQUAL_FATAL(keel_tensor_to_host(t, dst, bytes), KEEL_STATUS_OK);
}

static void test_env(void)
{
    keel_dist_env env;

    OK(keel_dist_get_env(&env));
    CU_ASSERT_EQUAL(env.rank, R);
    CU_ASSERT_EQUAL(env.world_size, W);
    CU_ASSERT(env.local_rank >= 0 && env.local_rank < env.local_size);
    CU_ASSERT_STRING_EQUAL(env.launcher, W > 1 ? "mpirun" : "none");
    CU_ASSERT_EQUAL(keel_dist_group_rank(NULL), R);
    CU_ASSERT_EQUAL(keel_dist_group_size(NULL), W);
    CU_ASSERT_TRUE(keel_dist_is_initialized());
}

static void test_all_reduce(void)
{
    float v[5], got[5];
    keel_tensor *t;

    /* rank r holds (r+1) * (1, 2, 3, 4, 5): the sum is W(W+1)/2 times. */
    for (int i = 0; i < 5; i++)
        v[i] = (float)((R + 1) * (i + 1));
    t = floats(5, v);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    OK(keel_dist_all_reduce(t, KEEL_REDUCE_SUM, NULL));
    host(t, got, sizeof(got));
    for (int i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(got[i], (float)(W * (W + 1) / 2 * (i + 1)));
    keel_tensor_free(t);

    t = floats(5, v);
    OK(keel_dist_all_reduce(t, KEEL_REDUCE_MAX, NULL));
    host(t, got, sizeof(got));
    for (int i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(got[i], (float)(W * (i + 1)));
    keel_tensor_free(t);

    /* avg of (r+1) over ranks: (W+1)/2. */
    t = floats(5, v);
    OK(keel_dist_all_reduce(t, KEEL_REDUCE_AVG, NULL));
    host(t, got, sizeof(got));
    for (int i = 0; i < 5; i++)
        CU_ASSERT_DOUBLE_EQUAL(got[i], (W + 1) / 2.0 * (i + 1), 1e-6);
    keel_tensor_free(t);

    /* int64 beyond float precision, and float16. */
    {
        int64_t big[2] = {((int64_t)1 << 53) + 1 + R, -7}, gb[2];
        int64_t shape[1] = {2};
        keel_tensor *ti = NULL, *th = NULL, *tf = NULL;
        float hv[3] = {0.5f, 1.5f, -2.0f}, hg[3];

        OK(keel_tensor_from_host(big, KEEL_I64, 1, shape, "cpu", &ti));
        OK(keel_dist_all_reduce(ti, KEEL_REDUCE_SUM, NULL));
        host(ti, gb, sizeof(gb));
        CU_ASSERT_EQUAL(gb[0], W * (((int64_t)1 << 53) + 1) +
                                   (int64_t)W * (W - 1) / 2);
        CU_ASSERT_EQUAL(gb[1], -7 * W);
        tf = floats(3, hv);
        OK(keel_cast(tf, KEEL_F16, &th));
        OK(keel_dist_all_reduce(th, KEEL_REDUCE_SUM, NULL));
        keel_tensor_free(tf);
        tf = NULL;
        OK(keel_cast(th, KEEL_F32, &tf));
        host(tf, hg, sizeof(hg));
        for (int i = 0; i < 3; i++)
            CU_ASSERT_EQUAL(hg[i], hv[i] * (float)W);
        keel_tensor_free(ti);
        keel_tensor_free(th);
        keel_tensor_free(tf);
    }
}

static void test_broadcast_reduce(void)
{
    int32_t src = W - 1;
    float v[3] = {(float)R, (float)R * 10, -1}, got[3];
    keel_tensor *t = floats(3, v);

    OK(keel_dist_broadcast(t, src, NULL));
    host(t, got, sizeof(got));
    CU_ASSERT_EQUAL(got[0], (float)src);
    CU_ASSERT_EQUAL(got[1], (float)src * 10);
    keel_tensor_free(t);

    t = floats(3, v);
    OK(keel_dist_reduce(t, 0, KEEL_REDUCE_SUM, NULL));
    host(t, got, sizeof(got));
    if (R == 0) {
        CU_ASSERT_EQUAL(got[0], (float)(W * (W - 1) / 2));
        CU_ASSERT_EQUAL(got[2], (float)-W);
    } else {
        CU_ASSERT_EQUAL(got[0], (float)R); /* left as it was */
    }
    keel_tensor_free(t);
}

static void test_gather_scatter(void)
{
    float v[2] = {(float)R, (float)R + 0.5f}, *got;
    keel_tensor *t = floats(2, v), *g = NULL, *in = NULL, *rs = NULL,
                *a2a = NULL;
    float *blk = calloc((size_t)(2 * W), sizeof(float));

    got = calloc((size_t)(2 * W), sizeof(float));
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    CU_ASSERT_PTR_NOT_NULL_FATAL(blk);
    OK(keel_dist_all_gather(t, NULL, &g));
    CU_ASSERT_EQUAL(keel_tensor_ndim(g), 2);
    CU_ASSERT_EQUAL(keel_tensor_shape(g)[0], W);
    host(g, got, (size_t)(2 * W) * sizeof(float));
    for (int r = 0; r < W; r++) {
        CU_ASSERT_EQUAL(got[2 * r], (float)r);
        CU_ASSERT_EQUAL(got[2 * r + 1], (float)r + 0.5f);
    }
    /* reduce_scatter of [W*2]: block j, element i = 100 j + i + R, so
     * rank j gets sum over r of (100 j + i + r). */
    for (int j = 0; j < W; j++)
        for (int i = 0; i < 2; i++)
            blk[2 * j + i] = (float)(100 * j + i + R);
    in = floats(2 * W, blk);
    OK(keel_dist_reduce_scatter(in, KEEL_REDUCE_SUM, NULL, &rs));
    CU_ASSERT_EQUAL(keel_tensor_shape(rs)[0], 2);
    host(rs, got, 2 * sizeof(float));
    for (int i = 0; i < 2; i++)
        CU_ASSERT_EQUAL(got[i], (float)(W * (100 * R + i) + W * (W - 1) / 2));
    /* all_to_all: rank R's block j = 100 j + i + R goes to rank j; rank R
     * receives block r = 100 R + i + r from rank r. */
    OK(keel_dist_all_to_all(in, NULL, &a2a));
    host(a2a, got, (size_t)(2 * W) * sizeof(float));
    for (int r = 0; r < W; r++)
        for (int i = 0; i < 2; i++)
            CU_ASSERT_EQUAL(got[2 * r + i], (float)(100 * R + i + r));
    keel_tensor_free(t);
    keel_tensor_free(g);
    keel_tensor_free(in);
    keel_tensor_free(rs);
    keel_tensor_free(a2a);
    free(got);
    free(blk);
}

static void test_send_recv_barrier(void)
{
    float v[4] = {1, 2, 3, (float)R}, got[4];
    keel_tensor *t = floats(4, v);

    OK(keel_dist_barrier(NULL));
    if (W < 2) {
        /* Nobody to talk to: sending to oneself is refused. */
        CU_ASSERT_EQUAL(keel_dist_send(t, 0, NULL),
                        KEEL_STATUS_INVALID_ARGUMENT);
        keel_tensor_free(t);
        return;
    }
    /* A ring: send to the next rank, receive from the previous; even
     * ranks send first so nothing waits on itself. */
    if (R % 2 == 0) {
        OK(keel_dist_send(t, (R + 1) % W, NULL));
        OK(keel_dist_recv(t, (R + W - 1) % W, NULL));
    } else {
        keel_tensor *r = floats(4, v);

        OK(keel_dist_recv(r, (R + W - 1) % W, NULL));
        OK(keel_dist_send(t, (R + 1) % W, NULL));
        keel_tensor_free(t);
        t = r;
    }
    host(t, got, sizeof(got));
    CU_ASSERT_EQUAL(got[3], (float)((R + W - 1) % W));
    CU_ASSERT_EQUAL(got[0], 1.0f);
    keel_tensor_free(t);
    OK(keel_dist_barrier(NULL));
}

static void test_groups_and_refusals(void)
{
    int32_t last[1] = {W - 1}, rev[2] = {W - 1, 0};
    keel_dist_group *g1 = NULL, *g2 = NULL;
    float v[2] = {(float)R + 1, 0}, got[2];
    keel_tensor *t = floats(2, v), *tt = NULL;

    OK(keel_dist_new_group(last, 1, &g1));
    CU_ASSERT_EQUAL(keel_dist_group_size(g1), 1);
    CU_ASSERT_EQUAL(keel_dist_group_rank(g1), R == W - 1 ? 0 : -1);
    if (R != W - 1) {
        CU_ASSERT_EQUAL(keel_dist_all_reduce(t, KEEL_REDUCE_SUM, g1),
                        KEEL_STATUS_INVALID_ARGUMENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "not a member"));
    } else {
        OK(keel_dist_all_reduce(t, KEEL_REDUCE_SUM, g1));
    }
    if (W >= 2) {
        /* Group rank 0 is global rank W-1: broadcast from it by its
         * global rank. */
        OK(keel_dist_new_group(rev, 2, &g2));
        CU_ASSERT_EQUAL(keel_dist_group_global_rank(g2, 0), W - 1);
        if (keel_dist_group_rank(g2) >= 0) {
            OK(keel_dist_broadcast(t, W - 1, g2));
            host(t, got, sizeof(got));
            CU_ASSERT_EQUAL(got[0], (float)W);
        }
    }
    /* Refusals: a rank not in the job, a listed-twice rank, a strided
     * tensor, a src outside the group. Nothing is sent. */
    {
        int32_t bad[2] = {0, W}, twice[2] = {0, 0};
        keel_dist_group *x = NULL;
        int64_t shape[2] = {2, 3};
        keel_tensor *m = NULL;

        CU_ASSERT_EQUAL(keel_dist_new_group(bad, 2, &x),
                        KEEL_STATUS_INVALID_ARGUMENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "not a rank"));
        CU_ASSERT_EQUAL(keel_dist_new_group(twice, 2, &x),
                        KEEL_STATUS_INVALID_ARGUMENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "twice"));
        OK(keel_zeros(2, shape, KEEL_F32, "cpu", &m));
        OK(keel_transpose(m, 0, 1, &tt));
        CU_ASSERT_EQUAL(keel_dist_all_reduce(tt, KEEL_REDUCE_SUM, NULL),
                        KEEL_STATUS_INVALID_ARGUMENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "contiguous"));
        CU_ASSERT_EQUAL(keel_dist_broadcast(t, W + 3, NULL),
                        KEEL_STATUS_INVALID_ARGUMENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "src"));
        keel_tensor_free(m);
    }
    keel_tensor_free(tt);
    keel_tensor_free(t);
}

/* ---- data parallel -------------------------------------------------------- */

#define DP_STEPS 200
#define DP_LOCAL 16
#define DP_N (DP_STEPS * DP_LOCAL * 2)

static keel_dataset *synthetic(void)
{
    int64_t xs[4] = {DP_N, 1, 28, 28}, ys[1] = {DP_N};
    keel_tensor *f[2] = {NULL, NULL};
    keel_dataset *ds = NULL;

    keel_seed(11); /* the same data on every rank */
    if (keel_randn(4, xs, KEEL_F32, "cpu", &f[0]) ||
        keel_randint(0, 10, 1, ys, KEEL_I64, "cpu", &f[1]) ||
        keel_tensor_dataset_create(f, 2, &ds))
        ds = NULL;
    keel_tensor_free(f[0]);
    keel_tensor_free(f[1]);
    return ds;
}

/* An optimizer of `kind` at lr 0.01 over every parameter of net (*ps:
 * the parameters, for reading them back). */
static keel_optimizer *optimizer_for(keel_optimizer_kind kind,
                                     keel_layer *net, keel_state_dict **ps)
{
    keel_named_param np[16];
    keel_optimizer_options oo = keel_optimizer_default_options(kind);
    keel_optimizer *opt = NULL;
    int64_t n;

    if (keel_layer_parameters(net, ps))
        return NULL;
    n = keel_state_dict_count(*ps);
    for (int64_t i = 0; i < n && i < 16; i++)
        keel_state_dict_at(*ps, i, &np[i].name, &np[i].param);
    oo.learning_rate = 0.01;
    if (keel_optimizer_create(kind, np, (size_t)n, &oo, &opt))
        return NULL;
    return opt;
}

static keel_optimizer *momentum(keel_layer *net, keel_state_dict **ps)
{
    return optimizer_for(KEEL_OPTIM_MOMENTUM, net, ps);
}

/* The parameters, flattened in order, into a new host array. */
static float *flat_params(keel_state_dict *ps, int64_t *count)
{
    int64_t total = 0, at = 0;
    float *v;

    for (int64_t i = 0; i < keel_state_dict_count(ps); i++) {
        keel_tensor *t = NULL;

        keel_state_dict_at(ps, i, NULL, &t);
        total += keel_tensor_numel(t);
    }
    v = malloc((size_t)total * sizeof(float));
    for (int64_t i = 0; v && i < keel_state_dict_count(ps); i++) {
        keel_tensor *t = NULL;

        keel_state_dict_at(ps, i, NULL, &t);
        keel_tensor_to_host(t, v + at,
                            (size_t)keel_tensor_numel(t) * sizeof(float));
        at += keel_tensor_numel(t);
    }
    *count = total;
    return v;
}

/* One step of `net` on (x, y): returns the loss value. */
static double step(keel_layer *net, keel_layer *ce, keel_tensor *x,
                   keel_tensor *y, keel_data_parallel *dp,
                   keel_optimizer *opt)
{
    keel_tensor *logits = NULL, *loss = NULL;
    double lv = NAN;

    CU_ASSERT_EQUAL_FATAL(keel_layer_call(net, x, &logits), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_layer_call2(ce, logits, y, &loss),
                          KEEL_STATUS_OK);
    keel_tensor_item(loss, 0, &lv);
    if (dp)
        CU_ASSERT_EQUAL_FATAL(keel_data_parallel_backward(dp, loss),
                              KEEL_STATUS_OK)
    else
        CU_ASSERT_EQUAL_FATAL(keel_backward(loss, NULL, false),
                              KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_optimizer_step(opt), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_optimizer_clear_grad(opt), KEEL_STATUS_OK);
    keel_tensor_free(logits);
    keel_tensor_free(loss);
    return lv;
}

static void test_data_parallel_lenet(void)
{
    keel_dataset *ds = synthetic();
    keel_dataloader_config cl, cg;
    keel_dataloader *dl = NULL, *dg = NULL;
    keel_layer *net = NULL, *ref = NULL, *ce = NULL;
    keel_state_dict *ps = NULL, *pr = NULL;
    keel_optimizer *opt = NULL, *oref = NULL;
    keel_data_parallel_config dc;
    keel_data_parallel *dp = NULL;
    float *mine, *theirs, *gathered;
    int64_t n = 0, nr = 0;
    double maxdiff = 0, maxabs = 0;
    keel_tensor *mt = NULL, *all = NULL;

    CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
    keel_dataloader_config_init(&cl);
    cl.batch_size = DP_LOCAL;
    cl.shuffle = true;
    cl.seed = 5;
    cl.drop_last = true;
    cl.prefetch = 0;
    cl.num_replicas = W;
    cl.rank = R;
    OK(keel_dataloader_create(ds, &cl, &dl));
    cg = cl;
    cg.batch_size = DP_LOCAL * W;
    cg.num_replicas = 1;
    cg.rank = 0;
    OK(keel_dataloader_create(ds, &cg, &dg));
    CU_ASSERT_EQUAL_FATAL(keel_dataloader_num_batches(dl), DP_N / W / DP_LOCAL);

    /* Each rank starts from its own weights; the reference from rank 0's. */
    keel_seed(100 + (uint64_t)R);
    OK(lenet(&net));
    keel_seed(100);
    OK(lenet(&ref));
    OK(keel_nn_cross_entropy_loss(NULL, &ce));
    keel_data_parallel_config_init(&dc);
    dc.comm_buffer_size_mb = 0.1; /* several buckets for LeNet's 0.24 MB */
    dc.last_comm_buffer_size_mb = 0.02;
    OK(keel_data_parallel_create(net, &dc, &dp));
    CU_ASSERT(keel_data_parallel_num_buckets(dp) >= 3);
    opt = momentum(net, &ps);
    oref = momentum(ref, &pr);
    CU_ASSERT_PTR_NOT_NULL_FATAL(opt);
    CU_ASSERT_PTR_NOT_NULL_FATAL(oref);

    for (int s = 0; s < DP_STEPS; s++) {
        keel_batch b = {0}, g = {0};
        bool end = false;

        OK(keel_dataloader_next(dl, &b, &end));
        CU_ASSERT_FALSE_FATAL(end);
        OK(keel_dataloader_next(dg, &g, &end));
        CU_ASSERT_FALSE_FATAL(end);
        step(net, ce, b.fields[0], b.fields[1], dp, opt);
        step(ref, ce, g.fields[0], g.fields[1], NULL, oref);
        keel_batch_release(&b);
        keel_batch_release(&g);
    }
    CU_ASSERT_EQUAL(keel_data_parallel_num_reductions(dp),
                    (int64_t)DP_STEPS * keel_data_parallel_num_buckets(dp));

    mine = flat_params(ps, &n);
    theirs = flat_params(pr, &nr);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mine);
    CU_ASSERT_PTR_NOT_NULL_FATAL(theirs);
    CU_ASSERT_EQUAL_FATAL(n, nr);
    /* (a) every rank's parameters are the same bits. */
    {
        int64_t shape[1] = {n};

        OK(keel_tensor_from_host(mine, KEEL_F32, 1, shape, "cpu", &mt));
        OK(keel_dist_all_gather(mt, NULL, &all));
        gathered = malloc((size_t)(n * W) * sizeof(float));
        CU_ASSERT_PTR_NOT_NULL_FATAL(gathered);
        host(all, gathered, (size_t)(n * W) * sizeof(float));
        for (int r = 0; r < W; r++)
            CU_ASSERT_EQUAL(memcmp(gathered + n * r, mine,
                                   (size_t)n * sizeof(float)), 0);
        free(gathered);
    }
    /* (b) they match the one-process run on the global batch. */
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)mine[i] - theirs[i]);

        if (d > maxdiff)
            maxdiff = d;
        if (fabs(theirs[i]) > maxabs)
            maxabs = fabs(theirs[i]);
    }
    if (R == 0)
        printf("\n  data parallel LeNet, %d ranks x batch %d, %d steps: "
               "max |dp - single| = %.3g (max |param| %.3g, %lld params, "
               "%d buckets)\n", (int)W, DP_LOCAL, DP_STEPS, maxdiff, maxabs,
               (long long)n, keel_data_parallel_num_buckets(dp));
    CU_ASSERT(maxdiff <= 1e-4 * (maxabs > 1 ? maxabs : 1));
    /* The models did move away from where they started. */
    CU_ASSERT(maxabs > 0);

    free(mine);
    free(theirs);
    keel_tensor_free(mt);
    keel_tensor_free(all);
    keel_optimizer_free(opt);
    keel_optimizer_free(oref);
    keel_state_dict_free(ps);
    keel_state_dict_free(pr);
    keel_data_parallel_free(dp);
    keel_layer_free(net);
    keel_layer_free(ref);
    keel_layer_free(ce);
    keel_dataloader_free(dl);
    keel_dataloader_free(dg);
    keel_dataset_free(ds);
}

/* 30 LeNet steps with overlap on and off from the same start and data:
 * the same bits (averaging is the same arithmetic whenever it runs), and
 * with overlap some buckets start inside backward. */
static float *dp_run(bool overlap, int steps, int64_t *early, int64_t *n)
{
    keel_dataset *ds = synthetic();
    keel_dataloader_config cl;
    keel_dataloader *dl = NULL;
    keel_layer *net = NULL, *ce = NULL;
    keel_state_dict *ps = NULL;
    keel_optimizer *opt = NULL;
    keel_data_parallel_config dc;
    keel_data_parallel *dp = NULL;
    float *v = NULL;

    keel_dataloader_config_init(&cl);
    cl.batch_size = DP_LOCAL;
    cl.seed = 7;
    cl.shuffle = true;
    cl.prefetch = 0;
    cl.num_replicas = W;
    cl.rank = R;
    if (!ds || keel_dataloader_create(ds, &cl, &dl))
        goto out;
    keel_seed(300 + (uint64_t)R);
    OK(lenet(&net));
    OK(keel_nn_cross_entropy_loss(NULL, &ce));
    keel_data_parallel_config_init(&dc);
    dc.comm_buffer_size_mb = 0.05;
    dc.last_comm_buffer_size_mb = 0.01;
    dc.overlap = overlap;
    OK(keel_data_parallel_create(net, &dc, &dp));
    opt = momentum(net, &ps);
    CU_ASSERT_PTR_NOT_NULL_FATAL(opt);
    for (int s = 0; s < steps; s++) {
        keel_batch b = {0};
        bool end = false;

        OK(keel_dataloader_next(dl, &b, &end));
        step(net, ce, b.fields[0], b.fields[1], dp, opt);
        keel_batch_release(&b);
    }
    CU_ASSERT_EQUAL(keel_data_parallel_num_reductions(dp),
                    (int64_t)steps * keel_data_parallel_num_buckets(dp));
    *early = keel_data_parallel_num_early_reductions(dp);
    if (R == 0)
        printf("\n  overlap %s: %d buckets, %lld of %lld all-reduces started "
               "inside backward; %.3f s not hidden, %.3f s in all-reduce",
               overlap ? "on " : "off", keel_data_parallel_num_buckets(dp),
               (long long)*early,
               (long long)keel_data_parallel_num_reductions(dp),
               keel_data_parallel_sync_seconds(dp),
               keel_data_parallel_comm_seconds(dp));
    v = flat_params(ps, n);
out:
    keel_optimizer_free(opt);
    keel_state_dict_free(ps);
    keel_data_parallel_free(dp);
    keel_layer_free(net);
    keel_layer_free(ce);
    keel_dataloader_free(dl);
    keel_dataset_free(ds);
    return v;
}

static void test_overlap(void)
{
    int64_t early_on = -1, early_off = -1, n_on = 0, n_off = 0;
    float *on = dp_run(true, 30, &early_on, &n_on);
    float *off = dp_run(false, 30, &early_off, &n_off);

    if (R == 0)
        printf("\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(on);
    CU_ASSERT_PTR_NOT_NULL_FATAL(off);
    CU_ASSERT_EQUAL_FATAL(n_on, n_off);
    CU_ASSERT_EQUAL(memcmp(on, off, (size_t)n_on * sizeof(float)), 0);
    /* LeNet's 10 parameters in 0.01/0.05 MB buckets (4 of them): every
     * parameter gets a gradient, so every bucket, the last included,
     * starts from the grad-ready hooks, inside backward. */
    CU_ASSERT_EQUAL(early_on, 30 * 4);
    CU_ASSERT_EQUAL(early_off, 0);
    free(on);
    free(off);
}

/* A parameter forward never uses: an error naming it, or zeros with
 * find_unused_parameters; with and without overlap. */
static void test_find_unused(void)
{
    for (int mode = 0; mode < 4; mode++) {
        bool overlap = mode & 1, find = mode & 2;
        keel_layer *lin = NULL;
        keel_data_parallel_config dc;
        keel_data_parallel *dp = NULL;
        keel_tensor *x = NULL, *y = NULL, *loss = NULL, *extra = NULL,
                    *g = NULL, *all = NULL;
        int64_t xs[2] = {4, 3}, es[1] = {5};
        float ev[5], gv[6 * 8];
        keel_status st;

        keel_seed(3);
        OK(keel_nn_linear(3, 2, NULL, NULL, &lin));
        OK(keel_randn(1, es, KEEL_F32, "cpu", &extra));
        OK(keel_layer_add_parameter(lin, "extra", extra));
        keel_data_parallel_config_init(&dc);
        dc.overlap = overlap;
        dc.find_unused_parameters = find;
        OK(keel_data_parallel_create(lin, &dc, &dp));
        keel_seed(50 + (uint64_t)R);
        OK(keel_randn(2, xs, KEEL_F32, "cpu", &x));
        OK(keel_layer_call(lin, x, &y));
        OK(keel_sum(y, 0, NULL, false, &loss));
        st = keel_data_parallel_backward(dp, loss);
        if (!find) {
            CU_ASSERT_EQUAL(st, KEEL_STATUS_INVALID_STATE);
            CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "\"extra\""));
        } else {
            CU_ASSERT_EQUAL(st, KEEL_STATUS_OK);
            g = keel_tensor_grad(extra);
            CU_ASSERT_PTR_NOT_NULL_FATAL(g);
            host(g, ev, sizeof(ev));
            for (int i = 0; i < 5; i++)
                CU_ASSERT_EQUAL(ev[i], 0.0f);
            keel_tensor_free(g);
            g = keel_tensor_grad(keel_layer_parameter(lin, "weight"));
            OK(keel_dist_all_gather(g, NULL, &all));
            host(all, gv, (size_t)(6 * W) * sizeof(float));
            for (int r = 1; r < W && r < 8; r++)
                CU_ASSERT_EQUAL(memcmp(gv, gv + 6 * r, 6 * sizeof(float)),
                                0);
        }
        keel_tensor_free(all);
        keel_tensor_free(g);
        keel_tensor_free(x);
        keel_tensor_free(y);
        keel_tensor_free(loss);
        keel_tensor_free(extra);
        keel_data_parallel_free(dp);
        keel_layer_free(lin);
    }
}

static void test_no_sync(void)
{
    keel_layer *lin = NULL;
    keel_data_parallel *dp = NULL;
    keel_tensor *x = NULL, *y = NULL, *loss = NULL, *w = NULL, *g = NULL,
                *all = NULL;
    int64_t xs[2] = {4, 3};
    float gv[2 * 3 * 2];
    int64_t before;

    keel_seed(3);
    OK(keel_nn_linear(3, 2, NULL, NULL, &lin));
    OK(keel_data_parallel_create(lin, NULL, &dp));
    keel_seed(50 + (uint64_t)R); /* each rank its own input */
    OK(keel_randn(2, xs, KEEL_F32, "cpu", &x));
    keel_data_parallel_set_sync(dp, false);
    before = keel_data_parallel_num_reductions(dp);
    OK(keel_layer_call(lin, x, &y));
    OK(keel_sum(y, 0, NULL, false, &loss));
    OK(keel_data_parallel_backward(dp, loss));
    CU_ASSERT_EQUAL(keel_data_parallel_num_reductions(dp), before);
    w = keel_layer_parameter(lin, "weight");
    g = keel_tensor_grad(w);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    OK(keel_dist_all_gather(g, NULL, &all));
    host(all, gv, (size_t)(6 * W) * sizeof(float));
    if (W >= 2) /* different inputs, gradients left their own */
        CU_ASSERT_NOT_EQUAL(memcmp(gv, gv + 6, 6 * sizeof(float)), 0);
    /* Sync on again: now they agree. */
    keel_data_parallel_set_sync(dp, true);
    OK(keel_data_parallel_sync_gradients(dp));
    keel_tensor_free(all);
    keel_tensor_free(g);
    g = keel_tensor_grad(w);
    OK(keel_dist_all_gather(g, NULL, &all));
    host(all, gv, (size_t)(6 * W) * sizeof(float));
    for (int r = 1; r < W; r++)
        CU_ASSERT_EQUAL(memcmp(gv, gv + 6 * r, 6 * sizeof(float)), 0);
    keel_tensor_free(all);
    keel_tensor_free(g);
    keel_tensor_free(x);
    keel_tensor_free(y);
    keel_tensor_free(loss);
    keel_data_parallel_free(dp);
    keel_layer_free(lin);
}

/* ---- Fleet --------------------------------------------------------------- */

/* Two residual-free FFN blocks and a head: Sequential "0", "1", "2". */
static keel_layer *ffn_model(void)
{
    keel_layer *blk[2] = {NULL, NULL}, *all[3] = {NULL, NULL, NULL}, *m = NULL;

    for (int b = 0; b < 2; b++) {
        keel_layer *l[3] = {NULL, NULL, NULL};

        if (keel_nn_linear(16, 32, NULL, NULL, &l[0]) ||
            keel_nn_activation_default(KEEL_ACT_GELU, &l[1]) ||
            keel_nn_linear(32, 16, NULL, NULL, &l[2]) ||
            keel_sequential_create(l, 3, &blk[b]))
            return NULL;
        all[b] = blk[b];
    }
    if (keel_nn_linear(16, 4, NULL, NULL, &all[2]) ||
        keel_sequential_create(all, 3, &m))
        return NULL;
    return m;
}

/* Five steps of the strategy through Fleet, and the same steps written
 * out by hand (auto_cast, GradScaler, DataParallel, no recompute): the
 * same parameters bit for bit; the checkpoints' outputs come from the
 * recompute node. */
static void test_fleet(void)
{
    static const char *const ckpt[] = {"0", "1"};
    static const char *const bad[] = {"0", "7"};
    keel_distributed_strategy ds;
    keel_layer *fm_net = NULL, *ref = NULL, *mse = NULL;
    keel_state_dict *pf = NULL, *pr = NULL;
    keel_optimizer *of = NULL, *oref = NULL;
    keel_fleet_optimizer *fo = NULL;
    keel_fleet_model *fm = NULL;
    keel_data_parallel *dp = NULL;
    keel_grad_scaler *sc = NULL;
    keel_grad_scaler_options so = keel_grad_scaler_default_options();
    keel_amp_options ao = keel_amp_default_options();
    int64_t xs[2] = {8, 16}, ys[2] = {8, 4}, n1 = 0, n2 = 0;
    float *a, *b;

    keel_seed(21);
    fm_net = ffn_model();
    keel_seed(21);
    ref = ffn_model();
    CU_ASSERT_PTR_NOT_NULL_FATAL(fm_net);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    OK(keel_nn_mse_loss(NULL, &mse));
    of = optimizer_for(KEEL_OPTIM_ADAMW, fm_net, &pf);
    oref = optimizer_for(KEEL_OPTIM_ADAMW, ref, &pr);
    CU_ASSERT_PTR_NOT_NULL_FATAL(of);
    CU_ASSERT_PTR_NOT_NULL_FATAL(oref);

    /* Refusals. */
    CU_ASSERT_EQUAL(keel_fleet_distributed_model(fm_net, NULL, &fm),
                    KEEL_STATUS_INVALID_STATE);
    CU_ASSERT_EQUAL(keel_fleet_init(false, NULL), KEEL_STATUS_NOT_SUPPORTED);
    keel_distributed_strategy_init(&ds);
    ds.recompute = true;
    CU_ASSERT_EQUAL(keel_fleet_init(true, &ds), KEEL_STATUS_INVALID_ARGUMENT);
    ds.recompute_checkpoints = bad;
    ds.num_recompute_checkpoints = 2;
    OK(keel_fleet_init(true, &ds));
    CU_ASSERT_EQUAL(keel_fleet_distributed_model(fm_net, NULL, &fm),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "\"7\""));
    CU_ASSERT_PTR_NULL(fm);

    /* The strategy: amp O1 float16 with a scaler, recompute both blocks. */
    keel_distributed_strategy_init(&ds);
    ds.amp = true;
    ds.init_loss_scaling = 1024;
    ds.recompute = true;
    ds.recompute_checkpoints = ckpt;
    ds.num_recompute_checkpoints = 2;
    ds.fuse_grad_size_in_mb = 0.002; /* several buckets */
    ds.last_comm_group_size_mb = 0.001;
    OK(keel_fleet_init(true, &ds));
    OK(keel_fleet_distributed_optimizer(of, &fo));
    OK(keel_fleet_distributed_model(fm_net, fo, &fm));
    CU_ASSERT_PTR_NOT_NULL(keel_fleet_optimizer_scaler(fo));
    CU_ASSERT(keel_data_parallel_num_buckets(
                  keel_fleet_model_data_parallel(fm)) > 1);

    /* The hand-written twin. */
    so.enable = true;
    so.init_loss_scaling = 1024;
    OK(keel_grad_scaler_create(&so, &sc));
    {
        keel_data_parallel_config dc;

        keel_data_parallel_config_init(&dc);
        dc.comm_buffer_size_mb = 0.002;
        dc.last_comm_buffer_size_mb = 0.001;
        OK(keel_data_parallel_create(ref, &dc, &dp));
    }
    ao.level = KEEL_AMP_O1;
    ao.dtype = KEEL_F16;

    for (int s = 0; s < 5; s++) {
        keel_tensor *x = NULL, *y = NULL, *o1 = NULL, *o2 = NULL,
                    *l1 = NULL, *l2 = NULL, *scaled = NULL, *h = NULL;

        keel_seed(1000 + 10 * (uint64_t)s + (uint64_t)R);
        OK(keel_randn(2, xs, KEEL_F32, "cpu", &x));
        OK(keel_randn(2, ys, KEEL_F32, "cpu", &y));
        OK(keel_fleet_model_forward(fm, &x, 1, &o1));
        OK(keel_layer_call2(mse, o1, y, &l1));
        OK(keel_fleet_model_backward(fm, l1));
        OK(keel_fleet_optimizer_step(fo));
        OK(keel_fleet_optimizer_clear_grad(fo));

        OK(keel_amp_begin(&ao));
        OK(keel_layer_call(ref, x, &o2));
        OK(keel_amp_end());
        OK(keel_layer_call2(mse, o2, y, &l2));
        OK(keel_grad_scaler_scale(sc, l2, &scaled));
        OK(keel_data_parallel_backward(dp, scaled));
        OK(keel_grad_scaler_step(sc, oref));
        OK(keel_grad_scaler_update(sc));
        OK(keel_optimizer_clear_grad(oref));
        if (s == 0) { /* a checkpoint's output comes from recompute */
            OK(keel_layer_call(keel_layer_sublayer(fm_net, "0"), x, &h));
            CU_ASSERT_STRING_EQUAL(keel_tensor_grad_fn_name(h), "recompute");
        }
        keel_tensor_free(h);
        keel_tensor_free(scaled);
        keel_tensor_free(l1);
        keel_tensor_free(l2);
        keel_tensor_free(o1);
        keel_tensor_free(o2);
        keel_tensor_free(x);
        keel_tensor_free(y);
    }
    a = flat_params(pf, &n1);
    b = flat_params(pr, &n2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL_FATAL(n1, n2);
    CU_ASSERT_EQUAL(memcmp(a, b, (size_t)n1 * sizeof(float)), 0);
    CU_ASSERT_EQUAL(keel_grad_scaler_get_scale(keel_fleet_optimizer_scaler(fo)),
                    keel_grad_scaler_get_scale(sc));
    free(a);
    free(b);
    /* Freed, the model's checkpoints are plain layers again. */
    keel_fleet_model_free(fm);
    {
        keel_tensor *x = NULL, *h = NULL;

        OK(keel_randn(2, xs, KEEL_F32, "cpu", &x));
        OK(keel_layer_call(keel_layer_sublayer(fm_net, "0"), x, &h));
        CU_ASSERT_STRING_NOT_EQUAL(keel_tensor_grad_fn_name(h), "recompute");
        keel_tensor_free(h);
        keel_tensor_free(x);
    }
    keel_fleet_optimizer_free(fo);
    keel_grad_scaler_free(sc);
    keel_data_parallel_free(dp);
    keel_optimizer_free(of);
    keel_optimizer_free(oref);
    keel_state_dict_free(pf);
    keel_state_dict_free(pr);
    keel_layer_free(fm_net);
    keel_layer_free(ref);
    keel_layer_free(mse);
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Rank 1 arrives late at an all_reduce: rank 0 gives up at the plugin's
 * timeout (KEEL_CPU_COLL_TIMEOUT_MS, set by the test to 1500). */
static void test_timeout(void)
{
    float v[1] = {1};
    keel_tensor *t = floats(1, v);

    CU_ASSERT_FATAL(W == 2);
    if (R == 0) {
        double t0 = now_s(), dt;
        keel_status st = keel_dist_all_reduce(t, KEEL_REDUCE_SUM, NULL);

        dt = now_s() - t0;
        printf("\n  rank 0: %s after %.2f s: %s\n", keel_status_name(st), dt,
               keel_last_error());
        CU_ASSERT_EQUAL(st, KEEL_STATUS_TIMEOUT);
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "all_reduce"));
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "rank 0"));
        CU_ASSERT(dt >= 1.4 && dt < 5.0);
        /* The communicator is unusable now, and finalize refuses to wait
         * for the missing rank. */
        CU_ASSERT_EQUAL(keel_dist_all_reduce(t, KEEL_REDUCE_SUM, NULL),
                        KEEL_STATUS_INVALID_STATE);
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "unusable"));
        CU_ASSERT_EQUAL(keel_dist_finalize(), KEEL_STATUS_INVALID_STATE);
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "left running"));
    } else {
        /* Hung for longer than the timeout; then it ends without ever
         * arriving. */
        sleep(3);
    }
    keel_tensor_free(t);
}

/* Rank 1 dies before the all_reduce; rank 0 must not wait forever (the
 * launcher or the timeout ends it). */
static void test_killed(void)
{
    float v[1] = {1};
    keel_tensor *t = floats(1, v);

    CU_ASSERT_FATAL(W == 2);
    if (R == 1) {
        fflush(stdout);
        raise(SIGKILL);
    }
    printf("\n  rank 0: %s: %s\n",
           keel_status_name(keel_dist_all_reduce(t, KEEL_REDUCE_SUM, NULL)),
           keel_last_error());
    keel_tensor_free(t);
}

int main(int argc, char **argv)
{
    bool timeout_case = argc > 1 && strcmp(argv[1], "--timeout-case") == 0;
    bool kill_case = argc > 1 && strcmp(argv[1], "--kill-case") == 0;
    /* --no-lenet: everything but the 200-step training, for runs under
     * valgrind. */
    bool no_lenet = argc > 1 && strcmp(argv[1], "--no-lenet") == 0;
    unsigned fails;
    CU_pSuite s;

    if (keel_dist_init() != KEEL_STATUS_OK) {
        fprintf(stderr, "keel_dist_init: %s\n", keel_last_error());
        return 1;
    }
    R = keel_dist_get_rank();
    W = keel_dist_get_world_size();
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("dist", NULL, NULL);
    if (timeout_case) {
        CU_add_test(s, "a late rank: all_reduce times out", test_timeout);
    } else if (kill_case) {
        CU_add_test(s, "a killed rank", test_killed);
    } else {
        CU_add_test(s, "launcher environment", test_env);
        CU_add_test(s, "all_reduce", test_all_reduce);
        CU_add_test(s, "broadcast and reduce", test_broadcast_reduce);
        CU_add_test(s, "all_gather, reduce_scatter, all_to_all",
                    test_gather_scatter);
        CU_add_test(s, "send, recv, barrier", test_send_recv_barrier);
        CU_add_test(s, "groups and refusals", test_groups_and_refusals);
        if (!no_lenet)
            CU_add_test(s, "data parallel LeNet against one process",
                        test_data_parallel_lenet);
        CU_add_test(s, "overlap: the same bits, buckets early",
                    test_overlap);
        CU_add_test(s, "find_unused_parameters", test_find_unused);
        CU_add_test(s, "no_sync", test_no_sync);
        CU_add_test(s, "fleet: amp + recompute strategy", test_fleet);
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    /* After a lost peer MPI is left running on purpose: the process ends
     * and the launcher ends the job. */
    if (!timeout_case && !kill_case) { /* --no-lenet ends normally too */
        keel_dist_finalize();
        keel_shutdown();
    }
    return fails ? 1 : 0;
}
