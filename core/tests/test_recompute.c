/*
 * Recompute (keel_recompute) and the custom autograd node under it
 * (keel_autograd_attach):
 *
 *  - a stack of FFN blocks (Linear 64->256, GELU, dropout 0.1, Linear
 *    256->64, residual through the caller) trained one step with and
 *    without recompute from the same weights, seed and input: the loss,
 *    every parameter's gradient and the input's gradient are the same
 *    bits (dropout draws the same mask in the second forward);
 *  - peak allocated memory of that step with recompute is at most 60% of
 *    the plain step's (both printed);
 *  - a custom node alone: y = x + x + x with backward g + g + g gives
 *    x.grad = 3, and
 *    the refusals (an output already in a graph, NULL backward).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <CUnit/Basic.h>

#include <keel/autograd.h>
#include <keel/dist.h>
#include <keel/nn.h>
#include <keel/amp.h>
#include <keel/ops.h>
#include <keel/runtime.h>
#include <keel/tensor.h>

#define OK(x) CU_ASSERT_EQUAL_FATAL((x), KEEL_STATUS_OK)
#define NB 8

static keel_layer *block(void)
{
    keel_layer *l[4] = {0}, *seq = NULL;

    if (keel_nn_linear(64, 256, NULL, NULL, &l[0]) ||
        keel_nn_activation_default(KEEL_ACT_GELU, &l[1]) ||
        keel_nn_dropout(0.1, false, &l[2]) ||
        keel_nn_linear(256, 64, NULL, NULL, &l[3]) ||
        keel_sequential_create(l, 4, &seq))
        return NULL;
    return seq;
}

/* One step: x through NB blocks (residual), loss = mean(y^2); returns
 * the loss, leaves gradients in the blocks and x; *peak: peak bytes. */
static double run_amp(keel_layer **b, keel_tensor *x, bool rc, bool amp,
                      uint64_t *peak)
{
    keel_tensor *h = keel_tensor_ref(x), *y = NULL, *sq = NULL, *loss = NULL;
    keel_memory_stats ms;
    double lv = NAN;

    keel_seed(9);
    keel_memory_reset_peak("cpu");
    if (amp) {
        keel_amp_options o = keel_amp_default_options();

        o.level = KEEL_AMP_O1;
        o.dtype = KEEL_BF16;
        OK(keel_amp_begin(&o));
    }
    for (int i = 0; i < NB; i++) {
        keel_tensor *f = NULL, *r = NULL;

        if (rc)
            OK(keel_recompute(b[i], h, &f))
        else
            OK(keel_layer_call(b[i], h, &f));
        OK(keel_add(h, f, &r));
        keel_tensor_free(h);
        keel_tensor_free(f);
        h = r;
    }
    OK(keel_multiply(h, h, &sq));
    OK(keel_mean(sq, 0, NULL, false, &loss));
    if (amp)
        OK(keel_amp_end());
    keel_tensor_item(loss, 0, &lv);
    OK(keel_backward(loss, NULL, false));
    OK(keel_memory_stats_get("cpu", &ms));
    *peak = ms.peak_allocated;
    keel_tensor_free(h);
    keel_tensor_free(y);
    keel_tensor_free(sq);
    keel_tensor_free(loss);
    return lv;
}

static double run(keel_layer **b, keel_tensor *x, bool rc, uint64_t *peak)
{
    return run_amp(b, x, rc, false, peak);
}

static int grads_equal(keel_layer *a, keel_layer *b)
{
    keel_state_dict *pa = NULL, *pb = NULL;
    int same = 1;

    keel_layer_parameters(a, &pa);
    keel_layer_parameters(b, &pb);
    for (int64_t i = 0; i < keel_state_dict_count(pa); i++) {
        keel_tensor *ta = NULL, *tb = NULL, *ga, *gb;
        static float va[256 * 64], vb[256 * 64];
        size_t n;

        keel_state_dict_at(pa, i, NULL, &ta);
        keel_state_dict_at(pb, i, NULL, &tb);
        ga = keel_tensor_grad(ta);
        gb = keel_tensor_grad(tb);
        n = (size_t)keel_tensor_numel(ta) * sizeof(float);
        if (!ga || !gb || keel_tensor_to_host(ga, va, n) ||
            keel_tensor_to_host(gb, vb, n) || memcmp(va, vb, n))
            same = 0;
        keel_tensor_free(ga);
        keel_tensor_free(gb);
    }
    keel_state_dict_free(pa);
    keel_state_dict_free(pb);
    return same;
}

static void test_recompute_same_gradients(void)
{
    keel_layer *a[NB], *b[NB];
    keel_tensor *xa = NULL, *xb = NULL, *ga, *gb;
    int64_t xs[3] = {8, 128, 64};
    static float va[8 * 128 * 64], vb[8 * 128 * 64];
    uint64_t peak_plain = 0, peak_rc = 0;
    double la, lb;

    for (int i = 0; i < NB; i++) {
        keel_seed(100 + (uint64_t)i);
        a[i] = block();
        keel_seed(100 + (uint64_t)i);
        b[i] = block();
        CU_ASSERT_PTR_NOT_NULL_FATAL(a[i]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(b[i]);
    }
    keel_seed(1);
    OK(keel_randn(3, xs, KEEL_F32, "cpu", &xa));
    OK(keel_tensor_set_stop_gradient(xa, false));
    OK(keel_detach(xa, &xb));
    OK(keel_tensor_set_stop_gradient(xb, false));

    la = run(a, xa, false, &peak_plain);
    lb = run(b, xb, true, &peak_rc);
    printf("\n  %d FFN blocks, x [8, 128, 64]: loss %.6f / %.6f; peak "
           "allocated %llu B plain, %llu B with recompute (%.0f%%)\n", NB,
           la, lb, (unsigned long long)peak_plain,
           (unsigned long long)peak_rc, 100.0 * peak_rc / peak_plain);
    CU_ASSERT_EQUAL(la, lb);
    for (int i = 0; i < NB; i++)
        CU_ASSERT_TRUE(grads_equal(a[i], b[i]));
    ga = keel_tensor_grad(xa);
    gb = keel_tensor_grad(xb);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ga);
    CU_ASSERT_PTR_NOT_NULL_FATAL(gb);
    OK(keel_tensor_to_host(ga, va, sizeof(va)));
    OK(keel_tensor_to_host(gb, vb, sizeof(vb)));
    CU_ASSERT_EQUAL(memcmp(va, vb, sizeof(va)), 0);
    CU_ASSERT(peak_rc <= peak_plain * 6 / 10);
    keel_tensor_free(ga);
    keel_tensor_free(gb);
    keel_tensor_free(xa);
    keel_tensor_free(xb);
    for (int i = 0; i < NB; i++) {
        keel_layer_free(a[i]);
        keel_layer_free(b[i]);
    }
}

/* Under auto_cast (O1, bfloat16) the second forward in backward casts as
 * the first did: the same loss and gradients as a plain AMP step, bit for
 * bit, and not those of a float32 step. */
static void test_recompute_amp(void)
{
    keel_layer *a[NB], *b[NB], *c[NB];
    keel_tensor *xa = NULL, *xb = NULL, *xc = NULL;
    int64_t xs[3] = {4, 32, 64};
    uint64_t pk;
    double la, lb, lc;

    for (int i = 0; i < NB; i++) {
        keel_seed(100 + (uint64_t)i);
        a[i] = block();
        keel_seed(100 + (uint64_t)i);
        b[i] = block();
        keel_seed(100 + (uint64_t)i);
        c[i] = block();
        CU_ASSERT_FATAL(a[i] && b[i] && c[i]);
    }
    keel_seed(1);
    OK(keel_randn(3, xs, KEEL_F32, "cpu", &xa));
    OK(keel_detach(xa, &xb));
    OK(keel_detach(xa, &xc));
    la = run_amp(a, xa, false, true, &pk);
    lb = run_amp(b, xb, true, true, &pk);
    lc = run_amp(c, xc, false, false, &pk);
    printf("\n  auto_cast O1 bfloat16: loss %.8f plain, %.8f recompute; "
           "float32 %.8f\n", la, lb, lc);
    CU_ASSERT_EQUAL(la, lb);
    CU_ASSERT_NOT_EQUAL(la, lc); /* the casts did happen */
    for (int i = 0; i < NB; i++) {
        CU_ASSERT_TRUE(grads_equal(a[i], b[i]));
        CU_ASSERT_FALSE(grads_equal(a[i], c[i]));
    }
    keel_tensor_free(xa);
    keel_tensor_free(xb);
    keel_tensor_free(xc);
    for (int i = 0; i < NB; i++) {
        keel_layer_free(a[i]);
        keel_layer_free(b[i]);
        keel_layer_free(c[i]);
    }
}

static keel_status triple_back(void *ctx, keel_tensor *const *gout, int nout,
                               keel_tensor **gin, int nin)
{
    (void)nout;
    (void)nin;
    keel_tensor *two = NULL;
    keel_status st;

    (*(int *)ctx)++;
    st = keel_add(gout[0], gout[0], &two);
    if (!st)
        st = keel_add(two, gout[0], &gin[0]);
    keel_tensor_free(two);
    return st;
}

static void test_custom_node(void)
{
    float v[3] = {1, 2, 3}, g[3];
    int64_t s[1] = {3};
    keel_tensor *x = NULL, *y = NULL, *l = NULL, *gx;
    int calls = 0;

    OK(keel_tensor_from_host(v, KEEL_F32, 1, s, "cpu", &x));
    OK(keel_tensor_set_stop_gradient(x, false));
    keel_no_grad_begin();
    {
        keel_tensor *two = NULL;

        OK(keel_add(x, x, &two));
        OK(keel_add(two, x, &y));
        keel_tensor_free(two);
    }
    keel_no_grad_end();
    CU_ASSERT_TRUE(keel_tensor_stop_gradient(y));
    CU_ASSERT_EQUAL(keel_autograd_attach(&x, 1, &y, 1, "t", NULL, NULL,
                                         NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    OK(keel_autograd_attach(&x, 1, &y, 1, "triple", triple_back, &calls,
                            NULL));
    CU_ASSERT_FALSE(keel_tensor_stop_gradient(y));
    CU_ASSERT_STRING_EQUAL(keel_tensor_grad_fn_name(y), "triple");
    /* y is in a graph now: attaching again is refused. */
    CU_ASSERT_EQUAL(keel_autograd_attach(&x, 1, &y, 1, "again", triple_back,
                                         &calls, NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    OK(keel_sum(y, 0, NULL, false, &l));
    OK(keel_backward(l, NULL, false));
    CU_ASSERT_EQUAL(calls, 1);
    gx = keel_tensor_grad(x);
    CU_ASSERT_PTR_NOT_NULL_FATAL(gx);
    OK(keel_tensor_to_host(gx, g, sizeof(g)));
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(g[i], 3.0f);
    keel_tensor_free(gx);
    keel_tensor_free(x);
    keel_tensor_free(y);
    keel_tensor_free(l);
}

int main(void)
{
    unsigned fails;
    CU_pSuite s;

    if (keel_init() != KEEL_STATUS_OK || keel_set_device("cpu") != KEEL_STATUS_OK) {
        fprintf(stderr, "keel: %s\n", keel_last_error());
        return 1;
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("recompute", NULL, NULL);
    CU_add_test(s, "custom autograd node", test_custom_node);
    CU_add_test(s, "recompute: same gradients, less memory",
                test_recompute_same_gradients);
    CU_add_test(s, "recompute under auto_cast", test_recompute_amp);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return fails ? 1 : 0;
}
