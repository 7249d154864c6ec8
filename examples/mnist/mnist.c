/*
 * keel-mnist: LeNet on Fashion-MNIST with Adam, checkpoints and resume.
 *
 *   keel-mnist [--device NAME] [--epochs N] [--data DIR] [--seed S]
 *              [--checkpoint PATH] [--resume] [--limit N]
 *              [--amp O0|O1|O2] [--amp-dtype bfloat16|float16]
 *              [--log-every N] [--export PREFIX]
 *
 * Within an epoch it reports the batch, the running mean loss, steps/s
 * and images/s: on a terminal as one line rewritten in place, otherwise
 * (a log file, a pipe) as one line every --log-every steps (default 100,
 * 0 for none), so that logs stay short and readable.
 *
 * --amp trains under auto_cast with a GradScaler, as Paddle's AMP loop
 * (O2 decorates the model and gives Adam float32 master weights); the
 * scaler's state goes into the checkpoint under "scaler.<name>".
 *
 * The checkpoint is one safetensors file: the model's state dict under
 * "model.<name>", the optimizer's state under "optim.<name>", and in the
 * metadata the completed epoch count, the seed and keel's RNG state. See
 * docs/examples.md.
 *
 * --export PREFIX then deploys the trained model as Paddle's jit.save +
 * create_predictor would: it traces the model with a dynamic batch,
 * saves PREFIX.keel.json + PREFIX.safetensors, loads them into a
 * Predictor (IR passes on) and evaluates the test set through it; the
 * accuracy must equal the trained model's.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <keel/amp.h>
#include <keel/autograd.h>
#include <keel/data.h>
#include <keel/inference.h>
#include <keel/io.h>
#include <keel/jit.h>
#include <keel/nn.h>
#include <keel/ops.h>
#include <keel/optim.h>
#include <keel/runtime.h>
#include <keel/tensor.h>

#define CKPT_FORMAT "keel-mnist-checkpoint/1"
#define MAX_PARAMS 64

struct options {
    const char *device;
    long epochs;
    const char *data;
    uint64_t seed;
    const char *checkpoint;
    bool resume;
    long limit;
    keel_amp_level amp;   /* O0: off */
    keel_dtype amp_dtype; /* float16 (Paddle's default) or bfloat16 */
    long log_every;       /* steps between progress lines off a terminal */
    const char *export_prefix; /* --export: jit.save + Predictor, or NULL */
};

/* The auto_cast settings of a run (NULL when --amp is O0). */
static const keel_amp_options *amp_opts(const struct options *o)
{
    static keel_amp_options a;

    if (o->amp == KEEL_AMP_O0)
        return NULL;
    a = keel_amp_default_options();
    a.level = o->amp;
    a.dtype = o->amp_dtype;
    return &a;
}

static int failed(const char *what)
{
    fprintf(stderr, "keel-mnist: %s failed: %s\n", what, keel_last_error());
    return -1;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: keel-mnist [--device NAME] [--epochs N] [--data DIR]\n"
            "                  [--seed S] [--checkpoint PATH] [--resume]\n"
            "                  [--limit N]\n"
            "  --device NAME      device to train on (default cpu)\n"
            "  --epochs N         total epochs to train (default 5)\n"
            "  --data DIR         Fashion-MNIST IDX files\n"
            "                     (default /usr/share/datasets/fashion-mnist)\n"
            "  --seed S           seed of init and shuffling (default 0)\n"
            "  --checkpoint PATH  checkpoint file\n"
            "                     (default keel-mnist-checkpoint.safetensors)\n"
            "  --resume           continue from the checkpoint\n"
            "  --limit N          train on the first N images only\n"
            "  --amp LEVEL        mixed precision: O0 (off, default), O1, "
            "O2\n"
            "  --amp-dtype DTYPE  bfloat16 or float16 (default float16)\n"
            "  --log-every N      when stdout is not a terminal, a progress\n"
            "                     line every N steps (default 100, 0: none)\n"
            "  --export PREFIX    save the trained model as a static graph\n"
            "                     (PREFIX.keel.json, PREFIX.safetensors) and\n"
            "                     evaluate it again in a Predictor\n");
}

static int parse_long(const char *opt, const char *s, long min, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min) {
        fprintf(stderr, "keel-mnist: %s expects an integer >= %ld, got '%s'\n",
                opt, min, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, struct options *o)
{
    long v;

    o->device = "cpu";
    o->epochs = 5;
    o->data = "/usr/share/datasets/fashion-mnist";
    o->seed = 0;
    o->checkpoint = "keel-mnist-checkpoint.safetensors";
    o->resume = false;
    o->limit = 0;
    o->amp = KEEL_AMP_O0;
    o->amp_dtype = KEEL_F16;
    o->log_every = 100;
    o->export_prefix = NULL;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;

        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--resume")) {
            o->resume = true;
            continue;
        }
        if (strcmp(a, "--device") && strcmp(a, "--epochs") &&
            strcmp(a, "--data") && strcmp(a, "--seed") &&
            strcmp(a, "--checkpoint") && strcmp(a, "--limit") &&
            strcmp(a, "--amp") && strcmp(a, "--amp-dtype") &&
            strcmp(a, "--log-every") && strcmp(a, "--export")) {
            fprintf(stderr, "keel-mnist: unknown option '%s'\n", a);
            usage(stderr);
            return -1;
        }
        if (!val) {
            fprintf(stderr, "keel-mnist: %s needs a value\n", a);
            return -1;
        }
        i++;
        if (!strcmp(a, "--device")) {
            o->device = val;
        } else if (!strcmp(a, "--data")) {
            o->data = val;
        } else if (!strcmp(a, "--checkpoint")) {
            o->checkpoint = val;
        } else if (!strcmp(a, "--export")) {
            o->export_prefix = val;
        } else if (!strcmp(a, "--epochs")) {
            if (parse_long(a, val, 0, &o->epochs))
                return -1;
        } else if (!strcmp(a, "--amp")) {
            if (!strcmp(val, "O0"))
                o->amp = KEEL_AMP_O0;
            else if (!strcmp(val, "O1"))
                o->amp = KEEL_AMP_O1;
            else if (!strcmp(val, "O2"))
                o->amp = KEEL_AMP_O2;
            else {
                fprintf(stderr, "keel-mnist: --amp takes O0, O1 or O2, not "
                        "'%s'\n", val);
                return -1;
            }
        } else if (!strcmp(a, "--amp-dtype")) {
            if (!strcmp(val, "bfloat16"))
                o->amp_dtype = KEEL_BF16;
            else if (!strcmp(val, "float16"))
                o->amp_dtype = KEEL_F16;
            else {
                fprintf(stderr, "keel-mnist: --amp-dtype takes bfloat16 or "
                        "float16, not '%s'\n", val);
                return -1;
            }
        } else if (!strcmp(a, "--limit")) {
            if (parse_long(a, val, 1, &o->limit))
                return -1;
        } else if (!strcmp(a, "--log-every")) {
            if (parse_long(a, val, 0, &o->log_every))
                return -1;
        } else {
            if (parse_long(a, val, 0, &v))
                return -1;
            o->seed = (uint64_t)v;
        }
    }
    if (o->export_prefix && o->amp == KEEL_AMP_O2) {
        fprintf(stderr, "keel-mnist: --export takes a float32 model; with "
                        "--amp O2 the model itself is float16/bfloat16\n");
        return -1;
    }
    return 0;
}

/* ---- the model ----------------------------------------------------------- */

static int build_lenet(keel_layer **out)
{
    keel_layer *l[13] = {0};
    keel_conv2d_params p1 = keel_conv2d_default_params();
    int n = 0;

    p1.padding[0] = 2;
    p1.padding[1] = 2;
    p1.npadding = 2;
    if (keel_nn_conv2d(1, 6, 5, 5, &p1, NULL, NULL, &l[n++]) ||
        keel_nn_activation_default(KEEL_ACT_RELU, &l[n++]) ||
        keel_nn_max_pool2d(2, 2, 0, false, &l[n++]) ||
        keel_nn_conv2d(6, 16, 5, 5, NULL, NULL, NULL, &l[n++]) ||
        keel_nn_activation_default(KEEL_ACT_RELU, &l[n++]) ||
        keel_nn_max_pool2d(2, 2, 0, false, &l[n++]) ||
        keel_nn_flatten(1, -1, &l[n++]) ||
        keel_nn_linear(400, 120, NULL, NULL, &l[n++]) ||
        keel_nn_activation_default(KEEL_ACT_RELU, &l[n++]) ||
        keel_nn_linear(120, 84, NULL, NULL, &l[n++]) ||
        keel_nn_activation_default(KEEL_ACT_RELU, &l[n++]) ||
        keel_nn_linear(84, 10, NULL, NULL, &l[n++])) {
        failed("building LeNet");
        for (int i = 0; i < n; i++)
            keel_layer_free(l[i]);
        return -1;
    }
    if (keel_sequential_create(l, n, out))
        return failed("keel_sequential_create");
    return 0;
}

/* ---- data ---------------------------------------------------------------- */

static int check_data_dir(const char *dir)
{
    struct stat st;

    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        return 0;
    fprintf(stderr,
            "keel-mnist: data folder '%s' not found (%s).\n"
            "  Install Debian's Fashion-MNIST files with\n"
            "    apt-get install dataset-fashion-mnist\n"
            "  (they go to /usr/share/datasets/fashion-mnist), or point\n"
            "  --data at a folder holding train-images-idx3-ubyte.gz,\n"
            "  train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and\n"
            "  t10k-labels-idx1-ubyte.gz.\n",
            dir, strerror(errno));
    return -1;
}

static int load_split(const char *dir, const char *split, long limit,
                      keel_tensor **images, keel_tensor **labels)
{
    keel_tensor *x = NULL, *y = NULL, *xs = NULL, *ys = NULL;

    if (keel_mnist_load_dir(dir, split, "cpu", &x, &y)) {
        fprintf(stderr, "keel-mnist: loading the '%s' split of %s failed: "
                "%s\n  (Debian package: dataset-fashion-mnist)\n",
                split, dir, keel_last_error());
        return -1;
    }
    if (limit > 0 && limit < keel_tensor_shape(x)[0]) {
        if (keel_slice(x, 0, 0, limit, 1, &xs) ||
            keel_slice(y, 0, 0, limit, 1, &ys)) {
            failed("keel_slice");
            keel_tensor_free(xs);
            keel_tensor_free(x);
            keel_tensor_free(y);
            return -1;
        }
        keel_tensor_free(x);
        keel_tensor_free(y);
        x = xs;
        y = ys;
    }
    *images = x;
    *labels = y;
    return 0;
}

static int make_loader(keel_tensor *x, keel_tensor *y, int64_t batch,
                       bool shuffle, uint64_t seed, const char *device,
                       keel_dataloader **out)
{
    keel_tensor *fields[2] = {x, y};
    keel_dataloader_config cfg;
    keel_dataset *ds = NULL;
    int rc = -1;

    if (keel_tensor_dataset_create(fields, 2, &ds)) {
        failed("keel_tensor_dataset_create");
        goto out;
    }
    keel_dataloader_config_init(&cfg);
    cfg.batch_size = batch;
    cfg.shuffle = shuffle;
    cfg.seed = seed;
    cfg.device = device;
    cfg.prefetch = 2;
    if (keel_dataloader_create(ds, &cfg, out)) {
        failed("keel_dataloader_create");
        goto out;
    }
    rc = 0;
out:
    keel_dataset_free(ds);
    return rc;
}

/* ---- evaluation ---------------------------------------------------------- */

/* Add to *correct how many of the n rows of logits have their largest
 * value at the label's index. */
static int count_correct(const keel_tensor *logits, const keel_tensor *labels,
                         int64_t n, int64_t *correct)
{
    keel_tensor *pred = NULL;
    int64_t *ph = malloc((size_t)n * sizeof(*ph));
    int64_t *lh = malloc((size_t)n * sizeof(*lh));
    int rc = -1;

    if (!ph || !lh)
        fprintf(stderr, "keel-mnist: out of memory\n");
    else if (keel_argmax(logits, 1, false, &pred))
        failed("keel_argmax");
    else if (keel_tensor_to_host(pred, ph, (size_t)n * sizeof(*ph)) ||
             keel_tensor_to_host(labels, lh, (size_t)n * sizeof(*lh)))
        failed("keel_tensor_to_host");
    else
        rc = 0;
    for (int64_t i = 0; rc == 0 && i < n; i++)
        *correct += ph[i] == lh[i];
    keel_tensor_free(pred);
    free(ph);
    free(lh);
    return rc;
}

/* Accuracy over one pass of `dl` (eval mode, no grad); *acc in [0, 1]. */
static int evaluate(keel_layer *model, keel_dataloader *dl,
                    const keel_amp_options *amp, double *acc)
{
    keel_batch b = {0};
    keel_tensor *logits = NULL;
    int64_t correct = 0, total = 0;
    bool end = false;
    int rc = -1;

    keel_layer_eval(model);
    keel_no_grad_begin();
    if (keel_dataloader_reset(dl)) {
        failed("keel_dataloader_reset");
        goto out;
    }
    /* reset moves to the next epoch; the order is fixed (no shuffle). */
    for (;;) {
        if (keel_dataloader_next(dl, &b, &end)) {
            failed("keel_dataloader_next");
            goto out;
        }
        if (end)
            break;
        if (amp && keel_amp_begin(amp)) {
            failed("keel_amp_begin");
            goto out;
        }
        if (keel_layer_call(model, b.fields[0], &logits)) {
            failed("forward");
            if (amp)
                keel_amp_end();
            goto out;
        }
        if (amp)
            keel_amp_end();
        if (count_correct(logits, b.fields[1], b.size, &correct))
            goto out;
        total += b.size;
        keel_tensor_free(logits);
        logits = NULL;
        keel_batch_release(&b);
    }
    *acc = total ? (double)correct / (double)total : 0.0;
    rc = 0;
out:
    keel_tensor_free(logits);
    keel_batch_release(&b);
    keel_no_grad_end();
    keel_layer_train(model);
    return rc;
}

/* ---- deployment: jit.save, then a Predictor ------------------------------- */

/* Trace the model ([batch, 1, 28, 28], batch dynamic) and save it. */
static int export_model(keel_layer *model, const char *prefix)
{
    keel_input_spec spec = {
        .name = "image", .dtype = KEEL_F32, .ndim = 4,
        .shape = {-1, 1, 28, 28},
        .dim_names = (const char *const[]){"batch", NULL, NULL, NULL},
    };
    keel_graph *g = NULL;
    int rc = -1;

    keel_layer_eval(model);
    if (keel_jit_trace(model, &spec, 1, &g))
        failed("keel_jit_trace");
    else if (keel_jit_save(g, prefix))
        failed("keel_jit_save");
    else
        rc = 0;
    if (rc == 0)
        printf("exported %s.keel.json (%d nodes) and %s.safetensors\n",
               prefix, keel_graph_num_nodes(g), prefix);
    keel_graph_free(g);
    keel_layer_train(model);
    return rc;
}

/* Accuracy of the saved graph at `prefix` in a Predictor on `device`
 * (precision: the auto_cast dtype the eager evaluation used, or float32),
 * over one pass of `dl`. */
static int evaluate_predictor(const char *prefix, const char *device,
                              keel_dtype precision, keel_dataloader *dl,
                              double *acc, double *images_per_s)
{
    keel_inference_config *cfg = NULL;
    keel_predictor *p = NULL;
    keel_batch b = {0};
    int64_t correct = 0, total = 0;
    double seconds = 0;
    bool end = false;
    int rc = -1;

    if (keel_inference_config_create(prefix, &cfg) ||
        keel_inference_config_set_device(cfg, device) ||
        keel_inference_config_set_precision(cfg, precision) ||
        keel_predictor_create(cfg, &p)) {
        failed("creating the predictor");
        goto out;
    }
    if (keel_dataloader_reset(dl)) {
        failed("keel_dataloader_reset");
        goto out;
    }
    for (;;) {
        keel_io_handle *out;
        double t0;

        if (keel_dataloader_next(dl, &b, &end)) {
            failed("keel_dataloader_next");
            goto out;
        }
        if (end)
            break;
        t0 = now_s();
        if (keel_io_handle_share(keel_predictor_input_handle(p, "image"),
                                 b.fields[0]) ||
            keel_predictor_run(p)) {
            failed("keel_predictor_run");
            goto out;
        }
        out = keel_predictor_output_handle(p, keel_predictor_output_name(p, 0));
        if (count_correct(keel_io_handle_tensor(out), b.fields[1], b.size,
                          &correct))
            goto out;
        seconds += now_s() - t0;
        total += b.size;
        keel_batch_release(&b);
    }
    *acc = total ? (double)correct / (double)total : 0.0;
    *images_per_s = seconds > 0 ? (double)total / seconds : 0.0;
    rc = 0;
out:
    keel_batch_release(&b);
    keel_predictor_free(p);
    keel_inference_config_free(cfg);
    return rc;
}

/* ---- checkpoints --------------------------------------------------------- */

/* Copy the entries of `src` into `dst` with `prefix` prepended. */
static int add_prefixed(keel_state_dict *dst, const keel_state_dict *src,
                        const char *prefix)
{
    char name[KEEL_STATE_DICT_NAME_MAX + 1];
    int64_t n = keel_state_dict_count(src);

    for (int64_t i = 0; i < n; i++) {
        const char *nm;
        keel_tensor *t;

        if (keel_state_dict_at(src, i, &nm, &t))
            return failed("keel_state_dict_at");
        snprintf(name, sizeof(name), "%s%s", prefix, nm);
        if (keel_state_dict_set(dst, name, t))
            return failed("keel_state_dict_set");
    }
    return 0;
}

/* The entries of `src` whose names start with `prefix`, prefix removed. */
static int take_prefixed(const keel_state_dict *src, const char *prefix,
                         keel_state_dict **out)
{
    size_t plen = strlen(prefix);
    int64_t n = keel_state_dict_count(src);

    if (keel_state_dict_create(out))
        return failed("keel_state_dict_create");
    for (int64_t i = 0; i < n; i++) {
        const char *nm;
        keel_tensor *t;

        if (keel_state_dict_at(src, i, &nm, &t))
            goto fail;
        if (strncmp(nm, prefix, plen))
            continue;
        if (keel_state_dict_set(*out, nm + plen, t))
            goto fail;
    }
    return 0;
fail:
    failed("splitting the checkpoint");
    keel_state_dict_free(*out);
    *out = NULL;
    return -1;
}

static const char *amp_name(const struct options *o)
{
    static char buf[32];

    snprintf(buf, sizeof(buf), "O%d %s", (int)o->amp,
             o->amp == KEEL_AMP_O0 ? "-" : keel_dtype_name(o->amp_dtype));
    return buf;
}

static int save_checkpoint(const char *path, keel_layer *model,
                           keel_optimizer *opt, keel_grad_scaler *scaler,
                           const struct options *o, long epoch,
                           uint64_t seed, double acc)
{
    keel_state_dict *sd = NULL, *msd = NULL, *osd = NULL;
    uint64_t rs, rc_;
    char buf[64];
    int rc = -1;

    keel_rng_get_state(&rs, &rc_);
    if (keel_state_dict_create(&sd) || keel_state_dict_create(&osd)) {
        failed("keel_state_dict_create");
        goto out;
    }
    if (keel_layer_state_dict(model, &msd)) {
        failed("keel_layer_state_dict");
        goto out;
    }
    if (keel_optimizer_state_get(opt, osd)) {
        failed("keel_optimizer_state_get");
        goto out;
    }
    if (add_prefixed(sd, msd, "model.") || add_prefixed(sd, osd, "optim."))
        goto out;
    if (scaler && keel_grad_scaler_state_get(scaler, "scaler.", sd)) {
        failed("keel_grad_scaler_state_get");
        goto out;
    }
#define META(k, fmt, v)                                                     \
    do {                                                                    \
        snprintf(buf, sizeof(buf), fmt, v);                                 \
        if (keel_state_dict_set_metadata(sd, k, buf)) {                     \
            failed("keel_state_dict_set_metadata");                         \
            goto out;                                                       \
        }                                                                   \
    } while (0)
    META("format", "%s", CKPT_FORMAT);
    META("epoch", "%ld", epoch);
    META("seed", "%" PRIu64, seed);
    META("rng_seed", "%" PRIu64, rs);
    META("rng_counter", "%" PRIu64, rc_);
    META("test_accuracy", "%.6f", acc);
    META("amp", "%s", amp_name(o));
#undef META
    if (keel_save(path, sd)) {
        failed("keel_save");
        goto out;
    }
    rc = 0;
out:
    keel_state_dict_free(sd);
    keel_state_dict_free(msd);
    keel_state_dict_free(osd);
    return rc;
}

static int meta_u64(const keel_state_dict *sd, const char *path,
                    const char *key, uint64_t *out)
{
    const char *v = keel_state_dict_get_metadata(sd, key);
    char *end;

    if (!v || !*v) {
        fprintf(stderr, "keel-mnist: %s: metadata '%s' missing\n", path,
                key);
        return -1;
    }
    errno = 0;
    *out = strtoull(v, &end, 10);
    if (errno || *end) {
        fprintf(stderr, "keel-mnist: %s: metadata '%s' = '%s' is not a "
                "number\n", path, key, v);
        return -1;
    }
    return 0;
}

/* Load the model part (always) and the optimizer part (opt != NULL) of a
 * checkpoint; *epoch, *seed and the RNG state are restored when asked. */
static int load_checkpoint(const char *path, const struct options *o,
                           keel_layer *model, keel_optimizer *opt,
                           keel_grad_scaler *scaler, uint64_t *epoch,
                           uint64_t *seed, bool set_rng)
{
    const char *device = o->device, *amp;
    keel_state_dict *sd = NULL, *msd = NULL, *osd = NULL, *ssd = NULL;
    const char *fmt;
    uint64_t e, s, rs, rcnt;
    int rc = -1;

    if (keel_load(path, device, &sd)) {
        failed("keel_load");
        goto out;
    }
    fmt = keel_state_dict_get_metadata(sd, "format");
    if (!fmt || strcmp(fmt, CKPT_FORMAT)) {
        fprintf(stderr, "keel-mnist: %s is not a keel-mnist checkpoint "
                "(format '%s', expected '%s')\n", path, fmt ? fmt : "",
                CKPT_FORMAT);
        goto out;
    }
    if (meta_u64(sd, path, "epoch", &e) || meta_u64(sd, path, "seed", &s) ||
        meta_u64(sd, path, "rng_seed", &rs) ||
        meta_u64(sd, path, "rng_counter", &rcnt))
        goto out;
    amp = keel_state_dict_get_metadata(sd, "amp");
    if (strcmp(amp && *amp ? amp : "O0 -", amp_name(o))) {
        fprintf(stderr, "keel-mnist: %s was trained with --amp %s; this run "
                "asks for %s\n", path, amp && *amp ? amp : "O0 -",
                amp_name(o));
        goto out;
    }
    if (take_prefixed(sd, "model.", &msd))
        goto out;
    if (keel_layer_set_state_dict(model, msd, true)) {
        failed("keel_layer_set_state_dict");
        goto out;
    }
    if (opt) {
        if (take_prefixed(sd, "optim.", &osd))
            goto out;
        if (keel_optimizer_state_set(opt, osd)) {
            failed("keel_optimizer_state_set");
            goto out;
        }
    }
    if (scaler) {
        if (take_prefixed(sd, "scaler.", &ssd))
            goto out;
        if (keel_state_dict_count(ssd) &&
            keel_grad_scaler_state_set(scaler, NULL, ssd)) {
            failed("keel_grad_scaler_state_set");
            goto out;
        }
    }
    if (set_rng)
        keel_rng_set_state(rs, rcnt);
    if (epoch)
        *epoch = e;
    if (seed)
        *seed = s;
    rc = 0;
out:
    keel_state_dict_free(sd);
    keel_state_dict_free(msd);
    keel_state_dict_free(osd);
    keel_state_dict_free(ssd);
    return rc;
}

/* ---- training ------------------------------------------------------------ */

static int make_optimizer(keel_layer *model, keel_state_dict **params,
                          keel_optimizer **out)
{
    keel_named_param np[MAX_PARAMS];
    keel_optimizer_options oo = keel_optimizer_default_options(KEEL_OPTIM_ADAM);
    int64_t n;

    if (keel_layer_parameters(model, params))
        return failed("keel_layer_parameters");
    n = keel_state_dict_count(*params);
    if (n > MAX_PARAMS) {
        fprintf(stderr, "keel-mnist: too many parameters (%" PRId64 ")\n",
                n);
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        if (keel_state_dict_at(*params, i, &np[i].name, &np[i].param))
            return failed("keel_state_dict_at");
    oo.learning_rate = 1e-3;
    if (keel_optimizer_create(KEEL_OPTIM_ADAM, np, (size_t)n, &oo, out))
        return failed("keel_optimizer_create");
    return 0;
}

static int train_epoch(keel_layer *model, keel_layer *loss_fn,
                       keel_optimizer *opt, keel_dataloader *dl,
                       const keel_amp_options *amp, keel_grad_scaler *scaler,
                       long epoch, long epochs, bool tty, long log_every,
                       double *avg_loss, double *ips)
{
    keel_batch b = {0};
    keel_tensor *logits = NULL, *loss = NULL, *scaled = NULL;
    int64_t nb = keel_dataloader_num_batches(dl), seen = 0, k = 0;
    double t0 = now_s(), sum = 0.0, lv;
    bool end = false;
    int rc = -1;

    keel_layer_train(model);
    if (keel_dataloader_set_epoch(dl, (uint64_t)epoch)) {
        failed("keel_dataloader_set_epoch");
        goto out;
    }
    for (;;) {
        if (keel_dataloader_next(dl, &b, &end)) {
            failed("keel_dataloader_next");
            goto out;
        }
        if (end)
            break;
        if (amp && keel_amp_begin(amp)) {
            failed("keel_amp_begin");
            goto out;
        }
        if (keel_layer_call(model, b.fields[0], &logits) ||
            keel_layer_call2(loss_fn, logits, b.fields[1], &loss)) {
            failed("forward");
            if (amp)
                keel_amp_end();
            goto out;
        }
        if (amp)
            keel_amp_end();
        if (scaler) {
            if (keel_grad_scaler_scale(scaler, loss, &scaled) ||
                keel_backward(scaled, NULL, false) ||
                keel_grad_scaler_step(scaler, opt) ||
                keel_grad_scaler_update(scaler)) {
                failed("the scaled step");
                goto out;
            }
            keel_tensor_free(scaled);
            scaled = NULL;
        } else {
            if (keel_backward(loss, NULL, false)) {
                failed("keel_backward");
                goto out;
            }
            if (keel_optimizer_step(opt)) {
                failed("keel_optimizer_step");
                goto out;
            }
        }
        if (keel_optimizer_clear_grad(opt)) {
            failed("keel_optimizer_clear_grad");
            goto out;
        }
        if (keel_tensor_item(loss, 0, &lv)) {
            failed("keel_tensor_item");
            goto out;
        }
        sum += lv;
        seen += b.size;
        k++;
        /* On a terminal, the line is rewritten every 10 steps; in a log,
         * one line every log_every steps. Both start "epoch N/M  batch",
         * which the scripts that read the log skip. */
        if ((tty && (k % 10 == 0 || k == nb)) ||
            (!tty && log_every > 0 && k % log_every == 0)) {
            double dt = now_s() - t0;

            printf("%sepoch %ld/%ld  batch %" PRId64 "/%" PRId64
                   "  loss %.4f  %.1f steps/s  %.0f images/s%s",
                   tty ? "\r" : "", epoch + 1, epochs, k, nb,
                   sum / (double)k, dt > 0 ? (double)k / dt : 0.0,
                   dt > 0 ? (double)seen / dt : 0.0, tty ? " " : "\n");
            fflush(stdout);
        }
        keel_tensor_free(loss);
        keel_tensor_free(logits);
        loss = logits = NULL;
        keel_batch_release(&b);
    }
    {
        double dt = now_s() - t0;

        *avg_loss = k ? sum / (double)k : 0.0;
        *ips = dt > 0 ? (double)seen / dt : 0.0;
    }
    if (tty)
        printf("\r\033[K");
    rc = 0;
out:
    keel_tensor_free(scaled);
    keel_tensor_free(loss);
    keel_tensor_free(logits);
    keel_batch_release(&b);
    return rc;
}

int main(int argc, char **argv)
{
    struct options o;
    keel_tensor *xtr = NULL, *ytr = NULL, *xte = NULL, *yte = NULL;
    keel_dataloader *train_dl = NULL, *test_dl = NULL;
    keel_layer *model = NULL, *fresh = NULL, *loss_fn = NULL;
    keel_state_dict *params = NULL;
    keel_optimizer *opt = NULL;
    keel_grad_scaler *scaler = NULL;
    const keel_amp_options *amp;
    uint64_t start = 0, ck_seed;
    double acc = -1.0, acc2 = -1.0, t_start = now_s();
    bool tty = isatty(STDOUT_FILENO);
    int rc = 1;

    if (parse_args(argc, argv, &o))
        return 2;
    amp = amp_opts(&o);
    if (keel_set_device(o.device)) {
        failed("keel_set_device");
        return 1;
    }
    if (check_data_dir(o.data))
        return 1;
    if (load_split(o.data, "train", o.limit, &xtr, &ytr) ||
        load_split(o.data, "t10k", 0, &xte, &yte))
        goto out;
    printf("keel-mnist: device %s, %" PRId64 " training and %" PRId64
           " test images from %s\n", keel_get_device(),
           keel_tensor_shape(xtr)[0], keel_tensor_shape(xte)[0], o.data);

    keel_seed(o.seed);
    if (build_lenet(&model) || make_optimizer(model, &params, &opt))
        goto out;
    if (amp) {
        if (o.amp == KEEL_AMP_O2 &&
            keel_amp_decorate(&model, 1, &opt, 1, KEEL_AMP_O2, o.amp_dtype,
                              -1)) {
            failed("keel_amp_decorate");
            goto out;
        }
        if (keel_grad_scaler_create(NULL, &scaler)) {
            failed("keel_grad_scaler_create");
            goto out;
        }
        printf("keel-mnist: auto_cast %s\n", amp_name(&o));
    }
    if (keel_nn_cross_entropy_loss(NULL, &loss_fn)) {
        failed("keel_nn_cross_entropy_loss");
        goto out;
    }
    if (o.resume) {
        if (load_checkpoint(o.checkpoint, &o, model, opt, scaler, &start,
                            &ck_seed, true))
            goto out;
        if (ck_seed != o.seed)
            printf("keel-mnist: using the checkpoint's seed %" PRIu64
                   " for shuffling\n", ck_seed);
        o.seed = ck_seed;
        printf("keel-mnist: resumed from %s after epoch %" PRIu64 "\n",
               o.checkpoint, start);
    }
    if (make_loader(xtr, ytr, 64, true, o.seed, o.device, &train_dl) ||
        make_loader(xte, yte, 1000, false, 0, o.device, &test_dl))
        goto out;

    for (long e = (long)start; e < o.epochs; e++) {
        double loss, ips, t0 = now_s();

        if (train_epoch(model, loss_fn, opt, train_dl, amp, scaler, e,
                        o.epochs, tty, o.log_every, &loss, &ips))
            goto out;
        if (evaluate(model, test_dl, amp, &acc))
            goto out;
        printf("epoch %ld/%ld  loss %.4f  %.0f images/s  test accuracy "
               "%.2f%%  (%.1f s)\n", e + 1, o.epochs, loss, ips,
               100.0 * acc, now_s() - t0);
        fflush(stdout);
        if (save_checkpoint(o.checkpoint, model, opt, scaler, &o, e + 1,
                            o.seed, acc))
            goto out;
    }
    if (acc < 0) {
        if (evaluate(model, test_dl, amp, &acc))
            goto out;
        printf("test accuracy %.2f%% (nothing left to train)\n",
               100.0 * acc);
        if (!o.resume &&
            save_checkpoint(o.checkpoint, model, opt, scaler, &o, o.epochs,
                            o.seed, acc))
            goto out;
    }

    /* Round trip: a new model, differently initialised, from the file. */
    keel_seed(o.seed + 1);
    if (build_lenet(&fresh))
        goto out;
    if (o.amp == KEEL_AMP_O2 &&
        keel_amp_decorate(&fresh, 1, NULL, 0, KEEL_AMP_O2, o.amp_dtype, -1)) {
        failed("keel_amp_decorate");
        goto out;
    }
    if (load_checkpoint(o.checkpoint, &o, fresh, NULL, NULL, NULL, NULL,
                        false))
        goto out;
    if (evaluate(fresh, test_dl, amp, &acc2))
        goto out;
    printf("checkpoint %s: trained model %.2f%%, reloaded model %.2f%% "
           "(%s)\n", o.checkpoint, 100.0 * acc, 100.0 * acc2,
           acc == acc2 ? "identical" : "MISMATCH");
    printf("total time %.1f s\n", now_s() - t_start);
    if (acc != acc2) {
        fprintf(stderr, "keel-mnist: the reloaded model disagrees\n");
        goto out;
    }
    if (o.export_prefix) {
        double acc3 = -1.0, ips = 0;

        if (export_model(model, o.export_prefix) ||
            evaluate_predictor(o.export_prefix, o.device,
                               amp ? o.amp_dtype : KEEL_F32, test_dl, &acc3,
                               &ips))
            goto out;
        printf("predictor %s: trained model %.2f%%, predictor %.2f%% (%s), "
               "%.0f images/s\n",
               o.export_prefix, 100.0 * acc, 100.0 * acc3,
               acc == acc3 ? "identical" : "MISMATCH", ips);
        if (acc != acc3) {
            fprintf(stderr, "keel-mnist: the predictor disagrees\n");
            goto out;
        }
    }
    rc = 0;
out:
    keel_dataloader_free(train_dl);
    keel_dataloader_free(test_dl);
    keel_grad_scaler_free(scaler);
    keel_optimizer_free(opt);
    keel_state_dict_free(params);
    keel_layer_free(loss_fn);
    keel_layer_free(model);
    keel_layer_free(fresh);
    keel_tensor_free(xtr);
    keel_tensor_free(ytr);
    keel_tensor_free(xte);
    keel_tensor_free(yte);
    return rc;
}
