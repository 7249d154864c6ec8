/*
 * LeNet as the tests train it (conv 5x5 pad 2 -> 6, ReLU, max-pool 2,
 * conv 5x5 -> 16, ReLU, max-pool 2, flatten, linear 400-120-84-10 with
 * ReLUs), on the current device. Shared by test_train.c and
 * test_fallback.c; keel-mnist and keel conform's e2e suite build the same
 * net for their own programs.
 */
#ifndef KEEL_TEST_LENET_H
#define KEEL_TEST_LENET_H

#include <keel/nn.h>

static inline keel_status lenet(keel_layer **out)
{
    keel_layer *l[12] = {0};
    keel_conv2d_params p = keel_conv2d_default_params();
    keel_status st = KEEL_STATUS_OK;
    int n = 0;

    p.padding[0] = p.padding[1] = 2;
    p.npadding = 2;
#define ADD(call)                                                            \
    if (st == KEEL_STATUS_OK)                                                \
        st = (call)
    ADD(keel_nn_conv2d(1, 6, 5, 5, &p, NULL, NULL, &l[n++]));
    ADD(keel_nn_activation_default(KEEL_ACT_RELU, &l[n++]));
    ADD(keel_nn_max_pool2d(2, 2, 0, false, &l[n++]));
    ADD(keel_nn_conv2d(6, 16, 5, 5, NULL, NULL, NULL, &l[n++]));
    ADD(keel_nn_activation_default(KEEL_ACT_RELU, &l[n++]));
    ADD(keel_nn_max_pool2d(2, 2, 0, false, &l[n++]));
    ADD(keel_nn_flatten(1, -1, &l[n++]));
    ADD(keel_nn_linear(400, 120, NULL, NULL, &l[n++]));
    ADD(keel_nn_activation_default(KEEL_ACT_RELU, &l[n++]));
    ADD(keel_nn_linear(120, 84, NULL, NULL, &l[n++]));
    ADD(keel_nn_activation_default(KEEL_ACT_RELU, &l[n++]));
    ADD(keel_nn_linear(84, 10, NULL, NULL, &l[n++]));
#undef ADD
    if (st != KEEL_STATUS_OK) {
        for (int i = 0; i < n; i++)
            keel_layer_free(l[i]);
        return st;
    }
    return keel_sequential_create(l, n, out);
}

#endif
