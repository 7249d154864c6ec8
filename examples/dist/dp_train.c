/*
 * keel-dp-train: data-parallel training across processes, Paddle's
 * init_parallel_env + DataParallel + DistributedBatchSampler loop in C.
 *
 *   mpirun -np 2 keel-dp-train [--model lenet|block] [--layers N] [--steps N]
 *          [--batch B] [--lr LR] [--recompute] [--bucket-mb MB]
 *          [--no-overlap]
 *          [--checkpoint PATH [--every K]] [--resume]
 *          [--data DIR] [--threads T]
 *
 * lenet  LeNet on Fashion-MNIST (DIR, default /usr/share/datasets/
 *        fashion-mnist; random images when it is missing), cross entropy,
 *        Momentum. B is the batch of each rank: the global batch is
 *        B x ranks, each rank reading its share of every epoch.
 * block  --layers N (default 1) pre-LayerNorm transformer blocks (hidden
 *        256, 4 heads, FFN 1024, sequence 64) on random inputs against a
 *        random target, MSE, AdamW. --recompute checkpoints each block
 *        (its activations are recomputed in backward).
 *
 * Every rank prints nothing but rank 0, which reports samples/s, the
 * share of step time inside the gradient all-reduces and the share that
 * backward did not hide (all of it with --no-overlap, which reduces the
 * buckets after backward instead of during it), the peak of allocated
 * memory during the loop above what was allocated before it (model, data,
 * optimizer state), and a checksum of the
 * parameters that must be the same on every rank (the program checks it
 * with an all_gather and fails otherwise). --checkpoint: rank 0 writes the
 * model and optimizer state every K steps (atomically: a crash leaves the
 * previous file); --resume: every rank loads it and goes on from its step.
 * Run alone (without mpirun) it trains as a world of one.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <keel/autograd.h>
#include <keel/data.h>
#include <keel/dist.h>
#include <keel/io.h>
#include <keel/nn.h>
#include <keel/ops.h>
#include <keel/optim.h>
#include <keel/runtime.h>
#include <keel/tensor.h>

struct options {
    const char *model, *checkpoint, *data;
    long steps, batch, every, threads, layers;
    double lr, bucket_mb;
    bool recompute, resume, no_overlap;
};

static int32_t R, W;

static int fail(const char *what)
{
    fprintf(stderr, "keel-dp-train (rank %d): %s: %s\n", (int)R, what,
            keel_last_error());
    return -1;
}

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int parse(int argc, char **argv, struct options *o)
{
    *o = (struct options){"lenet", NULL, "/usr/share/datasets/fashion-mnist",
                          200, 32, 50, 0, 1, 0.01, 25.0, false, false,
                          false};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;

        if (!strcmp(a, "--recompute")) {
            o->recompute = true;
            continue;
        }
        if (!strcmp(a, "--resume")) {
            o->resume = true;
            continue;
        }
        if (!strcmp(a, "--no-overlap")) {
            o->no_overlap = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "keel-dp-train: %s needs a value (see the "
                    "comment at the top of dp_train.c)\n", a);
            return -1;
        }
        i++;
        errno = 0;
        if (!strcmp(a, "--model"))
            o->model = v;
        else if (!strcmp(a, "--checkpoint"))
            o->checkpoint = v;
        else if (!strcmp(a, "--data"))
            o->data = v;
        else if (!strcmp(a, "--steps"))
            o->steps = strtol(v, &end, 10);
        else if (!strcmp(a, "--batch"))
            o->batch = strtol(v, &end, 10);
        else if (!strcmp(a, "--every"))
            o->every = strtol(v, &end, 10);
        else if (!strcmp(a, "--threads"))
            o->threads = strtol(v, &end, 10);
        else if (!strcmp(a, "--layers"))
            o->layers = strtol(v, &end, 10);
        else if (!strcmp(a, "--lr"))
            o->lr = strtod(v, &end);
        else if (!strcmp(a, "--bucket-mb"))
            o->bucket_mb = strtod(v, &end);
        else {
            fprintf(stderr, "keel-dp-train: unknown option %s\n", a);
            return -1;
        }
        if (end && (*end || errno)) {
            fprintf(stderr, "keel-dp-train: %s %s is not a number\n", a, v);
            return -1;
        }
    }
    if (strcmp(o->model, "lenet") && strcmp(o->model, "block")) {
        fprintf(stderr, "keel-dp-train: --model is lenet or block\n");
        return -1;
    }
    if (o->steps < 1 || o->batch < 1 || o->every < 1 || o->lr <= 0 ||
        o->bucket_mb <= 0 || o->threads < 0 || o->layers < 1 ||
        o->layers > 64) {
        fprintf(stderr, "keel-dp-train: --steps, --batch, --every, --lr, "
                "--bucket-mb and --layers (at most 64) must be positive\n");
        return -1;
    }
    return 0;
}

/* ---- models ---------------------------------------------------------------- */

static keel_status lenet(keel_layer **out)
{
    keel_layer *l[12] = {0};
    keel_conv2d_params p = keel_conv2d_default_params();
    keel_status st = KEEL_STATUS_OK;
    int n = 0;

    p.padding[0] = p.padding[1] = 2;
    p.npadding = 2;
    if (!st) st = keel_nn_conv2d(1, 6, 5, 5, &p, NULL, NULL, &l[n++]);
    if (!st) st = keel_nn_activation_default(KEEL_ACT_RELU, &l[n++]);
    if (!st) st = keel_nn_max_pool2d(2, 2, 0, false, &l[n++]);
    if (!st) st = keel_nn_conv2d(6, 16, 5, 5, NULL, NULL, NULL, &l[n++]);
    if (!st) st = keel_nn_activation_default(KEEL_ACT_RELU, &l[n++]);
    if (!st) st = keel_nn_max_pool2d(2, 2, 0, false, &l[n++]);
    if (!st) st = keel_nn_flatten(1, -1, &l[n++]);
    if (!st) st = keel_nn_linear(400, 120, NULL, NULL, &l[n++]);
    if (!st) st = keel_nn_activation_default(KEEL_ACT_RELU, &l[n++]);
    if (!st) st = keel_nn_linear(120, 84, NULL, NULL, &l[n++]);
    if (!st) st = keel_nn_activation_default(KEEL_ACT_RELU, &l[n++]);
    if (!st) st = keel_nn_linear(84, 10, NULL, NULL, &l[n++]);
    if (st) {
        for (int i = 0; i < n; i++)
            keel_layer_free(l[i]);
        return st;
    }
    return keel_sequential_create(l, n, out);
}

#define HID 256
#define HEADS 4
#define FFN 1024
#define SEQ 64

/* The block's forward: x + attn(ln1(x)), then h + ffn(ln2(h)). */
static keel_status block_forward(keel_layer *self, keel_tensor *const *in,
                                 int nin, keel_tensor **out)
{
    keel_tensor *x = in[0], *t[16] = {0}, *qkv[3] = {0};
    const int64_t *xs = keel_tensor_shape(x);
    int64_t B = xs[0], S = xs[1], dh = HID / HEADS;
    int64_t s5[5] = {B, S, 3, HEADS, dh}, s3[3] = {B, S, HID};
    int p5[5] = {2, 0, 3, 1, 4}, p4[4] = {0, 2, 1, 3}, ax0 = 0;
    float scale = 1.0f / sqrtf((float)dh);
    int64_t one[1] = {1};
    keel_status st;
    int k = 0;

    (void)nin;
#define L(name) keel_layer_sublayer(self, name)
    st = keel_layer_call(L("ln1"), x, &t[k++]);                  /* 0 */
    if (!st) st = keel_layer_call(L("qkv"), t[0], &t[k++]);      /* 1 */
    if (!st) st = keel_reshape(t[1], 5, s5, &t[k++]);            /* 2 */
    if (!st) st = keel_permute(t[2], p5, &t[k++]);               /* 3 */
    if (!st) st = keel_chunk(t[3], 3, 0, qkv);
    for (int i = 0; i < 3 && !st; i++) {
        keel_tensor *sq = NULL;

        st = keel_squeeze(qkv[i], 1, &ax0, &sq);
        keel_tensor_free(qkv[i]);
        qkv[i] = sq;
    }
    if (!st) st = keel_matmul(qkv[0], qkv[1], false, true, &t[k++]); /* 4 */
    if (!st) st = keel_tensor_from_host(&scale, KEEL_F32, 1, one, NULL,
                                        &t[k++]);                 /* 5 */
    if (!st) st = keel_multiply(t[4], t[5], &t[k++]);            /* 6 */
    if (!st) st = keel_softmax(t[6], -1, &t[k++]);               /* 7 */
    if (!st) st = keel_matmul(t[7], qkv[2], false, false, &t[k++]); /* 8 */
    if (!st) st = keel_permute(t[8], p4, &t[k++]);               /* 9 */
    if (!st) st = keel_reshape(t[9], 3, s3, &t[k++]);            /* 10 */
    if (!st) st = keel_layer_call(L("proj"), t[10], &t[k++]);    /* 11 */
    if (!st) st = keel_add(x, t[11], &t[k++]);                   /* 12 */
    if (!st) st = keel_layer_call(L("ln2"), t[12], &t[k++]);     /* 13 */
    if (!st) st = keel_layer_call(L("ffn"), t[13], &t[k++]);     /* 14 */
    if (!st) st = keel_add(t[12], t[14], out);
#undef L
    for (int i = 0; i < k; i++)
        keel_tensor_free(t[i]);
    for (int i = 0; i < 3; i++)
        keel_tensor_free(qkv[i]);
    (void)S;
    return st;
}

static const keel_layer_ops block_ops = {"TransformerBlock", block_forward,
                                         NULL};

static keel_status one_block(keel_layer **out)
{
    int64_t ln[1] = {HID};
    keel_layer *b = NULL, *sub = NULL, *f[3] = {0};
    keel_status st = keel_layer_create(&block_ops, NULL, &b);

#define SUB(name, call)                                                      \
    if (!st) {                                                               \
        st = (call);                                                         \
        if (!st) {                                                           \
            st = keel_layer_add_sublayer(b, name, sub);                      \
            if (st)                                                          \
                keel_layer_free(sub);                                        \
        }                                                                    \
    }
    SUB("ln1", keel_nn_layer_norm(1, ln, 1e-5, &sub));
    SUB("qkv", keel_nn_linear(HID, 3 * HID, NULL, NULL, &sub));
    SUB("proj", keel_nn_linear(HID, HID, NULL, NULL, &sub));
    SUB("ln2", keel_nn_layer_norm(1, ln, 1e-5, &sub));
    if (!st) st = keel_nn_linear(HID, FFN, NULL, NULL, &f[0]);
    if (!st) st = keel_nn_activation_default(KEEL_ACT_GELU, &f[1]);
    if (!st) st = keel_nn_linear(FFN, HID, NULL, NULL, &f[2]);
    SUB("ffn", keel_sequential_create(f, 3, &sub));
#undef SUB
    if (st) {
        keel_layer_free(b);
        return st;
    }
    *out = b;
    return KEEL_STATUS_OK;
}

/* `n` blocks in a Sequential. */
static keel_status blocks(long n, keel_layer **out)
{
    keel_layer *l[64] = {0};
    keel_status st = KEEL_STATUS_OK;
    long k = 0;

    for (; k < n && !st; k++)
        st = one_block(&l[k]);
    if (!st)
        return keel_sequential_create(l, (int)n, out);
    for (long i = 0; i < k; i++)
        keel_layer_free(l[i]);
    return st;
}

/* The model's forward; with recompute each block is checkpointed on its
 * own (the stack keeps only the blocks' inputs). */
static keel_status forward(const struct options *o, keel_layer *model,
                           keel_tensor *x, keel_tensor **out)
{
    keel_tensor *h;
    keel_status st = KEEL_STATUS_OK;

    if (!o->recompute)
        return keel_layer_call(model, x, out);
    if (!strcmp(o->model, "lenet"))
        return keel_recompute(model, x, out);
    h = keel_tensor_ref(x);
    for (int i = 0; i < keel_layer_num_sublayers(model) && !st; i++) {
        keel_tensor *next = NULL;

        st = keel_recompute(keel_layer_sublayer_at(model, i), h, &next);
        keel_tensor_free(h);
        h = next;
    }
    if (st) {
        keel_tensor_free(h);
        return st;
    }
    *out = h;
    return KEEL_STATUS_OK;
}

/* ---- data ------------------------------------------------------------------ */

static keel_status dataset(const struct options *o, keel_dataset **out)
{
    keel_tensor *f[2] = {NULL, NULL};
    struct stat sb;
    keel_status st;
    int64_t n = o->steps * o->batch * W;

    keel_seed(11); /* the same data in every process */
    if (!strcmp(o->model, "lenet") && stat(o->data, &sb) == 0) {
        st = keel_mnist_load_dir(o->data, "train", "cpu", &f[0], &f[1]);
    } else if (!strcmp(o->model, "lenet")) {
        int64_t xs[4] = {n, 1, 28, 28}, ys[1] = {n};

        if (R == 0)
            printf("no %s (dataset-fashion-mnist): random images\n",
                   o->data);
        st = keel_randn(4, xs, KEEL_F32, "cpu", &f[0]);
        if (!st)
            st = keel_randint(0, 10, 1, ys, KEEL_I64, "cpu", &f[1]);
    } else {
        int64_t xs[3] = {n, SEQ, HID};

        st = keel_randn(3, xs, KEEL_F32, "cpu", &f[0]);
        if (!st)
            st = keel_randn(3, xs, KEEL_F32, "cpu", &f[1]);
    }
    if (!st)
        st = keel_tensor_dataset_create(f, 2, out);
    keel_tensor_free(f[0]);
    keel_tensor_free(f[1]);
    return st;
}

/* ---- checkpoints ------------------------------------------------------------ */

static int move_prefixed(keel_state_dict *dst, const keel_state_dict *src,
                         const char *prefix, bool add)
{
    size_t plen = strlen(prefix);

    for (int64_t i = 0; i < keel_state_dict_count(src); i++) {
        char name[KEEL_STATE_DICT_NAME_MAX + 1];
        const char *nm;
        keel_tensor *t;

        if (keel_state_dict_at(src, i, &nm, &t))
            return fail("keel_state_dict_at");
        if (add) {
            snprintf(name, sizeof(name), "%s%s", prefix, nm);
        } else {
            if (strncmp(nm, prefix, plen))
                continue;
            snprintf(name, sizeof(name), "%s", nm + plen);
        }
        if (keel_state_dict_set(dst, name, t))
            return fail("keel_state_dict_set");
    }
    return 0;
}

static int save(const char *path, keel_layer *m, keel_optimizer *opt,
                long step)
{
    keel_state_dict *sd = NULL, *msd = NULL, *osd = NULL;
    char buf[32];
    int rc = -1;

    if (keel_state_dict_create(&sd) || keel_state_dict_create(&osd) ||
        keel_layer_state_dict(m, &msd) || keel_optimizer_state_get(opt, osd))
        fail("collecting the state");
    else if (!move_prefixed(sd, msd, "model.", true) &&
             !move_prefixed(sd, osd, "optim.", true)) {
        snprintf(buf, sizeof(buf), "%ld", step);
        if (keel_state_dict_set_metadata(sd, "step", buf) ||
            keel_save(path, sd))
            fail("writing the checkpoint");
        else
            rc = 0;
    }
    keel_state_dict_free(sd);
    keel_state_dict_free(msd);
    keel_state_dict_free(osd);
    return rc;
}

static int load(const char *path, keel_layer *m, keel_optimizer *opt,
                long *step)
{
    keel_state_dict *sd = NULL, *msd = NULL, *osd = NULL;
    const char *s;
    int rc = -1;

    if (keel_load(path, "cpu", &sd))
        return fail(path);
    s = keel_state_dict_get_metadata(sd, "step");
    if (!s || (*step = strtol(s, NULL, 10)) < 0) {
        fprintf(stderr, "keel-dp-train: %s has no step\n", path);
    } else if (keel_state_dict_create(&msd) || keel_state_dict_create(&osd) ||
               move_prefixed(msd, sd, "model.", false) ||
               move_prefixed(osd, sd, "optim.", false)) {
        fail("splitting the checkpoint");
    } else if (keel_layer_set_state_dict(m, msd, true) ||
               keel_optimizer_state_set(opt, osd)) {
        fail("restoring the checkpoint");
    } else {
        rc = 0;
    }
    keel_state_dict_free(sd);
    keel_state_dict_free(msd);
    keel_state_dict_free(osd);
    return rc;
}

/* ---- training ----------------------------------------------------------------- */

static keel_optimizer *optimizer(const struct options *o, keel_layer *m,
                                 keel_state_dict **ps)
{
    keel_optimizer_kind kind = strcmp(o->model, "lenet") ? KEEL_OPTIM_ADAMW
                                                     : KEEL_OPTIM_MOMENTUM;
    keel_optimizer_options oo = keel_optimizer_default_options(kind);
    keel_named_param *np;
    keel_optimizer *opt = NULL;
    int64_t n;

    if (keel_layer_parameters(m, ps))
        return NULL;
    n = keel_state_dict_count(*ps);
    np = calloc((size_t)n, sizeof(*np));
    for (int64_t i = 0; np && i < n; i++)
        keel_state_dict_at(*ps, i, &np[i].name, &np[i].param);
    oo.learning_rate = o->lr;
    if (np && keel_optimizer_create(kind, np, (size_t)n, &oo, &opt))
        opt = NULL;
    free(np);
    return opt;
}

/* Sum of |p| over the parameters, in double; and whether all ranks hold
 * the same bits of it. */
static int checksum(keel_state_dict *ps, double *sum, bool *same)
{
    double s = 0;
    int64_t one[1] = {1};
    keel_tensor *t = NULL, *all = NULL;
    double *v = NULL;

    for (int64_t i = 0; i < keel_state_dict_count(ps); i++) {
        keel_tensor *p = NULL;
        int64_t n;
        float *h;

        keel_state_dict_at(ps, i, NULL, &p);
        n = keel_tensor_numel(p);
        h = malloc((size_t)n * sizeof(*h));
        if (!h || keel_tensor_to_host(p, h, (size_t)n * sizeof(*h))) {
            free(h);
            return fail("reading the parameters");
        }
        for (int64_t j = 0; j < n; j++)
            s += fabs((double)h[j]);
        free(h);
    }
    *sum = s;
    *same = true;
    v = malloc((size_t)W * sizeof(*v));
    if (!v || keel_tensor_from_host(&s, KEEL_F64, 1, one, "cpu", &t) ||
        keel_dist_all_gather(t, NULL, &all) ||
        keel_tensor_to_host(all, v, (size_t)W * sizeof(*v))) {
        free(v);
        keel_tensor_free(t);
        keel_tensor_free(all);
        return fail("comparing the ranks");
    }
    for (int r = 0; r < W; r++)
        if (memcmp(&v[r], &s, sizeof(s)))
            *same = false;
    free(v);
    keel_tensor_free(t);
    keel_tensor_free(all);
    return 0;
}

int main(int argc, char **argv)
{
    struct options o;
    keel_dataset *ds = NULL;
    keel_dataloader *dl = NULL;
    keel_dataloader_config cfg;
    keel_layer *model = NULL, *loss_fn = NULL;
    keel_state_dict *ps = NULL;
    keel_optimizer *opt = NULL;
    keel_data_parallel_config dc;
    keel_data_parallel *dp = NULL;
    keel_memory_stats ms;
    long start = 0;
    uint64_t before = 0;
    double t0, t1, sum = 0, last = NAN;
    bool same = false;
    int rc = 1;

    if (parse(argc, argv, &o))
        return 2;
    if (o.threads > 0) {
        char v[24];

        snprintf(v, sizeof(v), "%ld", o.threads);
        setenv("KEEL_CPU_THREADS", v, 1);
        setenv("OPENBLAS_NUM_THREADS", v, 1);
    }
    if (keel_dist_init()) {
        fprintf(stderr, "keel-dp-train: %s\n", keel_last_error());
        return 1;
    }
    R = keel_dist_get_rank();
    W = keel_dist_get_world_size();
    if (dataset(&o, &ds))
        goto out;
    keel_dataloader_config_init(&cfg);
    cfg.batch_size = o.batch;
    cfg.shuffle = true;
    cfg.seed = 5;
    cfg.drop_last = true;
    cfg.num_replicas = W;
    cfg.rank = R;
    if (keel_dataloader_create(ds, &cfg, &dl)) {
        fail("keel_dataloader_create");
        goto out;
    }
    keel_seed(100 + (uint64_t)R); /* DataParallel makes them equal */
    if ((strcmp(o.model, "lenet") ? blocks(o.layers, &model)
                                  : lenet(&model)) ||
        (strcmp(o.model, "lenet")
             ? keel_nn_mse_loss("mean", &loss_fn)
             : keel_nn_cross_entropy_loss(NULL, &loss_fn))) {
        fail("building the model");
        goto out;
    }
    opt = optimizer(&o, model, &ps);
    if (!opt) {
        fail("keel_optimizer_create");
        goto out;
    }
    if (o.resume && o.checkpoint && load(o.checkpoint, model, opt, &start))
        goto out;
    keel_data_parallel_config_init(&dc);
    dc.comm_buffer_size_mb = o.bucket_mb;
    dc.overlap = !o.no_overlap;
    if (keel_data_parallel_create(model, &dc, &dp)) {
        fail("keel_data_parallel_create");
        goto out;
    }
    if (R == 0)
        printf("%d rank(s), model %s, batch %ld per rank, %d gradient "
               "bucket(s)%s%s\n", (int)W, o.model, o.batch,
               keel_data_parallel_num_buckets(dp),
               o.recompute ? ", recompute" : "",
               start ? ", resumed" : "");
    if (start) {
        /* Go on where the checkpoint's step left the data: its epoch,
         * then the batches already seen in it. */
        int64_t nb = keel_dataloader_num_batches(dl);

        if (keel_dataloader_set_epoch(dl, (uint64_t)(start / nb))) {
            fail("keel_dataloader_set_epoch");
            goto out;
        }
        for (int64_t i = 0; i < start % nb; i++) {
            keel_batch b = {0};

            if (keel_dataloader_next(dl, &b, NULL)) {
                fail("keel_dataloader_next");
                goto out;
            }
            keel_batch_release(&b);
        }
    }
    keel_memory_stats_get("cpu", &ms);
    before = ms.allocated;
    keel_memory_reset_peak("cpu");
    t0 = now();
    for (long step = start; step < o.steps; step++) {
        keel_batch b = {0};
        keel_tensor *y = NULL, *loss = NULL;
        bool end = false;

        if (keel_dataloader_next(dl, &b, &end) || end) {
            if (!end) {
                fail("keel_dataloader_next");
                goto out;
            }
            keel_dataloader_next(dl, &b, &end);
        }
        if (forward(&o, model, b.fields[0], &y) ||
            keel_layer_call2(loss_fn, y, b.fields[1], &loss) ||
            keel_data_parallel_backward(dp, loss) ||
            keel_optimizer_step(opt) || keel_optimizer_clear_grad(opt)) {
            fail("training step");
            keel_batch_release(&b);
            goto out;
        }
        keel_tensor_item(loss, 0, &last);
        keel_tensor_free(y);
        keel_tensor_free(loss);
        keel_batch_release(&b);
        if (o.checkpoint && (step + 1) % o.every == 0 && R == 0 &&
            save(o.checkpoint, model, opt, step + 1))
            goto out;
    }
    t1 = now();
    keel_memory_stats_get("cpu", &ms);
    if (checksum(ps, &sum, &same))
        goto out;
    if (R == 0) {
        long done = o.steps - start;

        printf("steps %ld  last loss %.4f  %.1f samples/s  all-reduce "
               "%.1f%% of step time, %.1f%% not hidden (overlap %s)  "
               "training peak %.1f MiB\n",
               done, last, (double)(done * o.batch * W) / (t1 - t0),
               100.0 * keel_data_parallel_comm_seconds(dp) / (t1 - t0),
               100.0 * keel_data_parallel_sync_seconds(dp) / (t1 - t0),
               keel_data_parallel_num_early_reductions(dp) > 0 ? "on" : "off",
               (double)(ms.peak_allocated - before) / 1048576.0);
        printf("parameter checksum %.9g  %s\n", sum,
               same ? "(identical on every rank)" : "(RANKS DIFFER)");
    }
    rc = same ? 0 : 1;
out:
    keel_data_parallel_free(dp);
    keel_optimizer_free(opt);
    keel_state_dict_free(ps);
    keel_layer_free(model);
    keel_layer_free(loss_fn);
    keel_dataloader_free(dl);
    keel_dataset_free(ds);
    if (keel_dist_finalize())
        fprintf(stderr, "keel-dp-train: %s\n", keel_last_error());
    keel_shutdown();
    return rc;
}
