/*
 * End to end on real data: LeNet trained on Fashion-MNIST for 300 Adam
 * steps (lr 1e-3, batch 64, shuffled by seed) must drive the mean loss of
 * its last 50 steps under a fixed bound, starting from an untrained model
 * (the first 10 steps' mean above START_BOUND). Also checks, on the same
 * run, what the per-op profiler counts.
 *
 * Needs Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist,
 * or KEEL_MNIST_DATA); without it the program exits 77, which meson
 * reports as SKIP.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <CUnit/Basic.h>

#include <keel/autograd.h>
#include <keel/data.h>
#include <keel/nn.h>
#include <keel/ops.h>
#include <keel/optim.h>
#include <keel/runtime.h>
#include <keel/tensor.h>

#include "lenet.h"

#define STEPS 300
#define BATCH 64
/* Measured with seed 3: 2.00 over the first 10 steps, 0.51 over the last
 * 50; an untrained model sits at ln(10) = 2.30. */
#define LOSS_BOUND 0.80
#define START_BOUND 1.5

#define OK(x) CU_ASSERT_EQUAL_FATAL((x), KEEL_STATUS_OK)

static const char *data_dir(void)
{
    const char *d = getenv("KEEL_MNIST_DATA");
    return d && *d ? d : "/usr/share/datasets/fashion-mnist";
}


static void test_lenet_300_steps(void)
{
    keel_tensor *x = NULL, *y = NULL, *fields[2];
    keel_dataset *ds = NULL;
    keel_dataloader *dl = NULL;
    keel_dataloader_config cfg;
    keel_layer *net = NULL, *ce = NULL;
    keel_state_dict *ps = NULL;
    keel_named_param np[16];
    keel_optimizer *opt = NULL;
    keel_optimizer_options oo;
    keel_batch b = {0};
    double first = 0, last = 0;
    bool end = false;
    int64_t n;
    keel_op_id conv, adam;
    keel_op_profile pc, pa;

    OK(keel_mnist_load_dir(data_dir(), "train", "cpu", &x, &y));
    CU_ASSERT_EQUAL_FATAL(keel_tensor_shape(x)[0], 60000);
    fields[0] = x;
    fields[1] = y;
    OK(keel_tensor_dataset_create(fields, 2, &ds));
    keel_dataloader_config_init(&cfg);
    cfg.batch_size = BATCH;
    cfg.shuffle = true;
    cfg.seed = 3;
    cfg.drop_last = true;
    cfg.prefetch = 2;
    OK(keel_dataloader_create(ds, &cfg, &dl));

    keel_seed(3);
    OK(lenet(&net));
    OK(keel_nn_cross_entropy_loss(NULL, &ce));
    OK(keel_layer_parameters(net, &ps));
    n = keel_state_dict_count(ps);
    CU_ASSERT_EQUAL_FATAL(n, 10);
    for (int64_t i = 0; i < n; i++)
        OK(keel_state_dict_at(ps, i, &np[i].name, &np[i].param));
    oo = keel_optimizer_default_options(KEEL_OPTIM_ADAM);
    oo.learning_rate = 1e-3;
    OK(keel_optimizer_create(KEEL_OPTIM_ADAM, np, (size_t)n, &oo, &opt));

    keel_profile_reset();
    keel_profile_start(false);
    for (int step = 0; step < STEPS; step++) {
        keel_tensor *logits = NULL, *loss = NULL;
        double lv = NAN;

        OK(keel_dataloader_next(dl, &b, &end));
        CU_ASSERT_FALSE_FATAL(end);
        OK(keel_layer_call(net, b.fields[0], &logits));
        OK(keel_layer_call2(ce, logits, b.fields[1], &loss));
        OK(keel_backward(loss, NULL, false));
        OK(keel_optimizer_step(opt));
        OK(keel_optimizer_clear_grad(opt));
        OK(keel_tensor_item(loss, 0, &lv));
        CU_ASSERT_FATAL(isfinite(lv));
        if (step < 10)
            first += lv / 10;
        if (step >= STEPS - 50)
            last += lv / 50;
        keel_tensor_free(loss);
        keel_tensor_free(logits);
        keel_batch_release(&b);
    }
    keel_profile_stop();
    printf("\n  LeNet, %d Adam steps: mean loss %.4f over the first 10, "
           "%.4f over the last 50 (bound %.2f)\n", STEPS, first, last,
           LOSS_BOUND);
    CU_ASSERT(first > START_BOUND);
    CU_ASSERT(last < LOSS_BOUND);

    /* The profiler saw two convolutions and one fused Adam update per
     * parameter in every step, and nothing while stopped. */
    OK(keel_op_find("conv2d", &conv));
    OK(keel_op_find("adam_update", &adam));
    OK(keel_profile_get(conv, &pc));
    OK(keel_profile_get(adam, &pa));
    CU_ASSERT_EQUAL(pc.calls, 2 * STEPS);
    CU_ASSERT_EQUAL(pa.calls, (uint64_t)n * STEPS);
    CU_ASSERT(pc.total_ns > 0 && pc.max_ns > 0 &&
              pc.max_ns <= pc.total_ns);
    {
        keel_op_id full;
        keel_op_profile pf1, pf2;
        OK(keel_op_find("full", &full));
        OK(keel_profile_get(full, &pf1));
        keel_tensor *z = NULL;
        int64_t s1[1] = {4};
        OK(keel_zeros(1, s1, KEEL_F32, NULL, &z));
        keel_tensor_free(z);
        OK(keel_profile_get(full, &pf2));
        CU_ASSERT_EQUAL(pf1.calls, pf2.calls);
    }
    CU_ASSERT_EQUAL(keel_profile_get((keel_op_id)KEEL_OP_COUNT, &pa),
                    KEEL_STATUS_INVALID_ARGUMENT);
    keel_profile_print(stdout);
    keel_profile_reset();
    OK(keel_profile_get(conv, &pc));
    CU_ASSERT_EQUAL(pc.calls, 0);

    keel_optimizer_free(opt);
    keel_state_dict_free(ps);
    keel_layer_free(ce);
    keel_layer_free(net);
    keel_dataloader_free(dl);
    keel_dataset_free(ds);
    keel_tensor_free(x);
    keel_tensor_free(y);
}

int main(void)
{
    struct stat st;
    CU_pSuite s;
    unsigned fails;

    if (stat(data_dir(), &st) != 0) {
        printf("test_train: %s not found (Debian: dataset-fashion-mnist); "
               "skipped\n", data_dir());
        return 77;
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    s = CU_add_suite("train", NULL, NULL);
    if (!s || !CU_add_test(s, "LeNet, 300 Adam steps on Fashion-MNIST",
                           test_lenet_300_steps)) {
        CU_cleanup_registry();
        return 2;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return fails ? 1 : 0;
}
