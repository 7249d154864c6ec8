/*
 * train.py in C: Paddle's standard training loop (docs/examples.md).
 * An MLP classifies synthetic data (four Gaussian clusters in 16
 * dimensions) with CrossEntropyLoss and AdamW under cosine decay; then it
 * is evaluated under no-grad, its state dict saved, loaded into a fresh
 * MLP and evaluated again. Exit status 0 when the mean loss of the last
 * epoch is below the first's and the reloaded model's logits are
 * identical, 1 otherwise.
 *
 *   keel-paddle-port [CHECKPOINT]   (default paddle_port.safetensors)
 */
#include <stdio.h>
#include <string.h>

#include <keel/autograd.h>
#include <keel/data.h>
#include <keel/nn.h>
#include <keel/optim.h>

/* Paddle raises; here every call is checked and the first failure ends
 * the function at its cleanup label, with keel's message. */
#define TRY(call) do { if ((st = (call)) != KEEL_STATUS_OK) {                \
        fprintf(stderr, "%s: %s\n", #call, keel_last_error()); goto out; } \
    } while (0)

enum { N_TRAIN = 1024, N_TEST = 256, DIM = 16, CLASSES = 4, EPOCHS = 5 };

static keel_status mlp(keel_layer **model)
{
    keel_layer *l[5] = {NULL};
    keel_status st;

    TRY(keel_nn_linear(DIM, 64, NULL, NULL, &l[0]));
    TRY(keel_nn_activation_default(KEEL_ACT_RELU, &l[1]));
    TRY(keel_nn_linear(64, 64, NULL, NULL, &l[2]));
    TRY(keel_nn_activation_default(KEEL_ACT_RELU, &l[3]));
    TRY(keel_nn_linear(64, CLASSES, NULL, NULL, &l[4]));
    return keel_sequential_create(l, 5, model); /* owns l[] from here */
out:
    for (int i = 0; i < 5; i++)
        keel_layer_free(l[i]);
    return st;
}

/* n samples: N(0, 1) noise around the centre of a random class. */
static keel_status make_data(keel_tensor *centers, int64_t n, keel_tensor **x,
                             keel_tensor **y)
{
    keel_tensor *noise = NULL, *c = NULL;
    keel_status st;

    TRY(keel_randint(0, CLASSES, 1, &n, KEEL_I64, NULL, y));
    TRY(keel_randn(2, (int64_t[]){n, DIM}, KEEL_F32, NULL, &noise));
    TRY(keel_index_select(centers, *y, 0, &c));
    TRY(keel_add(noise, c, x));
out:
    keel_tensor_free(noise);
    keel_tensor_free(c);
    return st;
}

static keel_status evaluate(keel_layer *model, keel_tensor *x, keel_tensor *y,
                            float *logits, double *acc)
{
    keel_tensor *t[5] = {NULL}; /* logits, argmax, ==, as float, mean */
    keel_status st;
    KEEL_NO_GRAD_SCOPE;

    keel_layer_eval(model);
    TRY(keel_layer_call(model, x, &t[0]));
    TRY(keel_tensor_to_host(t[0], logits, sizeof(float) * N_TEST * CLASSES));
    TRY(keel_argmax(t[0], 1, false, &t[1]));
    TRY(keel_equal(t[1], y, &t[2]));
    TRY(keel_cast(t[2], KEEL_F32, &t[3]));
    TRY(keel_mean(t[3], 0, NULL, false, &t[4]));
    TRY(keel_tensor_item(t[4], 0, acc));
out:
    for (int i = 0; i < 5; i++)
        keel_tensor_free(t[i]);
    return st;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "paddle_port.safetensors";
    keel_tensor *centers = NULL, *x = NULL, *y = NULL, *xt = NULL, *yt = NULL;
    keel_tensor *logits = NULL, *loss = NULL;
    keel_layer *model = NULL, *model2 = NULL, *loss_fn = NULL;
    keel_dataset *ds = NULL;
    keel_dataloader *loader = NULL;
    keel_dataloader_config cfg;
    keel_batch b = {0};
    keel_lr_scheduler *scheduler = NULL;
    keel_optimizer *optimizer = NULL;
    keel_optimizer_options o = keel_optimizer_default_options(KEEL_OPTIM_ADAMW);
    keel_state_dict *sd = NULL, *loaded = NULL;
    static float out1[N_TEST * CLASSES], out2[N_TEST * CLASSES];
    double losses[EPOCHS], v = 0, acc = 0, acc2 = 0;
    bool end = false;
    keel_status st;

    keel_seed(0);
    TRY(keel_randn(2, (int64_t[]){CLASSES, DIM}, KEEL_F32, NULL, &centers));
    TRY(make_data(centers, N_TRAIN, &x, &y));
    TRY(make_data(centers, N_TEST, &xt, &yt));
    TRY(keel_tensor_dataset_create((keel_tensor *[]){x, y}, 2, &ds));
    keel_dataloader_config_init(&cfg);
    cfg.batch_size = 64;
    cfg.shuffle = true;
    TRY(keel_dataloader_create(ds, &cfg, &loader));

    TRY(mlp(&model));
    TRY(keel_nn_cross_entropy_loss(NULL, &loss_fn));
    TRY(keel_lr_cosine_annealing_decay_create(3e-3, EPOCHS, 0.0, &scheduler));
    o.lr_scheduler = scheduler; /* weight_decay: AdamW's default, 0.01 */
    TRY(keel_optimizer_create_from_layer(KEEL_OPTIM_ADAMW, model, &o,
                                         &optimizer));
    keel_layer_train(model);
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        losses[epoch] = 0;
        while ((st = keel_dataloader_next(loader, &b, &end)) == 0 && !end) {
            TRY(keel_layer_call(model, b.fields[0], &logits));
            TRY(keel_layer_call2(loss_fn, logits, b.fields[1], &loss));
            TRY(keel_backward(loss, NULL, false));
            TRY(keel_optimizer_step(optimizer));
            TRY(keel_optimizer_clear_grad(optimizer));
            TRY(keel_tensor_item(loss, 0, &v));
            losses[epoch] += v / (double)keel_dataloader_num_batches(loader);
            keel_tensor_free(logits);
            keel_tensor_free(loss);
            logits = loss = NULL;
            keel_batch_release(&b);
        }
        TRY(st); /* the loader's error, if the loop ended on one */
        TRY(keel_lr_scheduler_step(scheduler));
        printf("epoch %d/%d  loss %.4f  lr %.6f\n", epoch + 1, EPOCHS,
               losses[epoch], keel_lr_scheduler_last_lr(scheduler));
    }
    TRY(evaluate(model, xt, yt, out1, &acc));

    TRY(keel_layer_state_dict(model, &sd));
    TRY(keel_save(path, sd));
    TRY(mlp(&model2));
    TRY(keel_load(path, NULL, &loaded));
    TRY(keel_layer_set_state_dict(model2, loaded, true));
    TRY(evaluate(model2, xt, yt, out2, &acc2));
    v = memcmp(out1, out2, sizeof(out1));
    printf("test accuracy %.2f%%, reloaded %.2f%% (%s)\n", 100 * acc,
           100 * acc2, v ? "DIFFERENT" : "identical");
    st = losses[EPOCHS - 1] < losses[0] && !v ? 0 : KEEL_STATUS_INTERNAL;
out:
    keel_batch_release(&b);
    keel_tensor *t[] = {centers, x, y, xt, yt, logits, loss};
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        keel_tensor_free(t[i]);
    keel_layer *l[] = {loss_fn, model, model2};
    for (size_t i = 0; i < sizeof(l) / sizeof(l[0]); i++)
        keel_layer_free(l[i]);
    keel_state_dict_free(sd);
    keel_state_dict_free(loaded);
    keel_optimizer_free(optimizer);
    keel_lr_scheduler_free(scheduler);
    keel_dataloader_free(loader);
    keel_dataset_free(ds);
    return st == KEEL_STATUS_OK ? 0 : 1;
}
