/*
 * Models the jit, inference and ONNX tests trace: an MLP, LeNet, a
 * conv-BatchNorm residual block and a post-LayerNorm transformer encoder
 * block (4 heads of 8 on hidden 32, FFN 64; other sizes from
 * encoder_sized) whose forward reads the batch, sequence and hidden size
 * from its input. Each returns a new layer in training mode;
 * CUnit asserts on failure.
 */
#ifndef KEEL_TEST_JIT_MODELS_H
#define KEEL_TEST_JIT_MODELS_H

#include <math.h>

#include <CUnit/Basic.h>

#include <keel/autograd.h>
#include <keel/nn.h>

#include "lenet.h"

#ifndef OK
#define OK(expr) CU_ASSERT_EQUAL_FATAL((expr), KEEL_STATUS_OK)
#endif

static inline keel_layer *mlp(void)
{
    keel_layer *l[3], *m;

    OK(keel_nn_linear(16, 32, NULL, NULL, &l[0]));
    OK(keel_nn_activation_default(KEEL_ACT_RELU, &l[1]));
    OK(keel_nn_linear(32, 4, NULL, NULL, &l[2]));
    OK(keel_sequential_create(l, 3, &m));
    return m;
}

static inline keel_layer *lenet_model(void)
{
    keel_layer *m;

    OK(lenet(&m));
    return m;
}

/* conv-bn-relu-conv-bn, plus the input, relu. */
static inline keel_status resblock_forward(keel_layer *self,
                                           keel_tensor *const *in, int n,
                                           keel_tensor **out)
{
    keel_tensor *a = NULL, *b = NULL;
    keel_status st;
    static const char *const seq[] = {"conv1", "bn1", "relu", "conv2", "bn2"};

    (void)n;
    a = keel_tensor_ref(in[0]);
    for (int i = 0; i < 5; i++) {
        st = keel_layer_call(keel_layer_sublayer(self, seq[i]), a, &b);
        keel_tensor_free(a);
        if (st != KEEL_STATUS_OK)
            return st;
        a = b;
    }
    st = keel_add(a, in[0], &b);
    keel_tensor_free(a);
    if (st != KEEL_STATUS_OK)
        return st;
    st = keel_relu(b, out);
    keel_tensor_free(b);
    return st;
}

static const keel_layer_ops resblock_ops = {"ResBlock", resblock_forward,
                                            NULL};

static inline keel_layer *resblock(void)
{
    keel_layer *m, *s;
    keel_conv2d_params p = keel_conv2d_default_params();
    keel_tensor *x, *y;

    p.padding[0] = p.padding[1] = 1;
    p.npadding = 2;
    OK(keel_layer_create(&resblock_ops, NULL, &m));
    OK(keel_nn_conv2d(8, 8, 3, 3, &p, NULL, NULL, &s));
    OK(keel_layer_add_sublayer(m, "conv1", s));
    OK(keel_nn_batch_norm2d(8, 0.5, 1e-5, &s));
    OK(keel_layer_add_sublayer(m, "bn1", s));
    OK(keel_nn_activation_default(KEEL_ACT_RELU, &s));
    OK(keel_layer_add_sublayer(m, "relu", s));
    OK(keel_nn_conv2d(8, 8, 3, 3, &p, NULL, NULL, &s));
    OK(keel_layer_add_sublayer(m, "conv2", s));
    OK(keel_nn_batch_norm2d(8, 0.5, 1e-5, &s));
    OK(keel_layer_add_sublayer(m, "bn2", s));
    /* Running statistics that are not the initial ones. */
    OK(keel_randn(4, (int64_t[]){4, 8, 6, 6}, KEEL_F32, NULL, &x));
    KEEL_NO_GRAD {
        OK(keel_layer_call(m, x, &y));
    }
    keel_tensor_free(x);
    keel_tensor_free(y);
    return m;
}

/* Post-LayerNorm encoder block, 4 heads on the input's hidden size. */
static inline keel_status encoder_forward(keel_layer *self,
                                          keel_tensor *const *in, int n,
                                          keel_tensor **out)
{
    const int64_t *sh = keel_tensor_shape(in[0]);
    int64_t B = sh[0], S = sh[1], H = sh[2], D = H / 4;
    keel_tensor *h[3] = {0}, *t = NULL, *u = NULL, *sc = NULL, *x1 = NULL;
    static const char *const qkv[3] = {"q", "k", "v"};
    keel_status st = KEEL_STATUS_OK;

    (void)n;
#define DO(call)                                                             \
    if (st == KEEL_STATUS_OK)                                                \
    st = (call)
#define SWAP(dst)                                                            \
    do {                                                                     \
        keel_tensor_free(dst);                                               \
        dst = u;                                                             \
        u = NULL;                                                            \
    } while (0)
    for (int i = 0; i < 3; i++) {
        DO(keel_layer_call(keel_layer_sublayer(self, qkv[i]), in[0], &t));
        DO(keel_reshape(t, 4, (int64_t[]){B, S, 4, D}, &u));
        keel_tensor_free(t);
        t = NULL;
        DO(keel_permute(u, (int[]){0, 2, 1, 3}, &h[i]));
        keel_tensor_free(u);
        u = NULL;
    }
    DO(keel_matmul(h[0], h[1], false, true, &t));
    DO(keel_full(0, NULL, KEEL_F32, 1.0 / sqrt((double)D), NULL, &sc));
    DO(keel_multiply(t, sc, &u));
    SWAP(t);
    DO(keel_softmax(t, -1, &u));
    SWAP(t);
    DO(keel_matmul(t, h[2], false, false, &u));
    SWAP(t);
    DO(keel_permute(t, (int[]){0, 2, 1, 3}, &u));
    SWAP(t);
    DO(keel_reshape(t, 3, (int64_t[]){B, S, H}, &u));
    SWAP(t);
    DO(keel_layer_call(keel_layer_sublayer(self, "o"), t, &u));
    SWAP(t);
    DO(keel_add(in[0], t, &u));
    SWAP(t);
    DO(keel_layer_call(keel_layer_sublayer(self, "ln1"), t, &x1));
    DO(keel_layer_call(keel_layer_sublayer(self, "ff1"), x1, &u));
    SWAP(t);
    DO(keel_gelu(t, false, &u));
    SWAP(t);
    DO(keel_layer_call(keel_layer_sublayer(self, "ff2"), t, &u));
    SWAP(t);
    DO(keel_add(x1, t, &u));
    SWAP(t);
    DO(keel_layer_call(keel_layer_sublayer(self, "ln2"), t, out));
#undef DO
#undef SWAP
    for (int i = 0; i < 3; i++)
        keel_tensor_free(h[i]);
    keel_tensor_free(t);
    keel_tensor_free(sc);
    keel_tensor_free(x1);
    return st;
}

static const keel_layer_ops encoder_ops = {"Encoder", encoder_forward, NULL};

/* The block on hidden size `hidden` (a multiple of 4), FFN `ffn`. */
static inline keel_layer *encoder_sized(int64_t hidden, int64_t ffn)
{
    keel_layer *m, *s;
    static const char *const lin[] = {"q", "k", "v", "o"};

    OK(keel_layer_create(&encoder_ops, NULL, &m));
    for (int i = 0; i < 4; i++) {
        OK(keel_nn_linear(hidden, hidden, NULL, NULL, &s));
        OK(keel_layer_add_sublayer(m, lin[i], s));
    }
    OK(keel_nn_linear(hidden, ffn, NULL, NULL, &s));
    OK(keel_layer_add_sublayer(m, "ff1", s));
    OK(keel_nn_linear(ffn, hidden, NULL, NULL, &s));
    OK(keel_layer_add_sublayer(m, "ff2", s));
    OK(keel_nn_layer_norm(1, (int64_t[]){hidden}, 1e-5, &s));
    OK(keel_layer_add_sublayer(m, "ln1", s));
    OK(keel_nn_layer_norm(1, (int64_t[]){hidden}, 1e-5, &s));
    OK(keel_layer_add_sublayer(m, "ln2", s));
    return m;
}

static inline keel_layer *encoder(void) { return encoder_sized(32, 64); }

#endif /* KEEL_TEST_JIT_MODELS_H */
