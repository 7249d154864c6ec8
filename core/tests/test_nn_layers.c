/*
 * nn layer tests: forward and backward of the layers against float64
 * references computed here, parameter names and counts, containers,
 * train/eval, state dict round trips through files, initializers.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include <keel/autograd.h>
#include <keel/io.h>
#include <keel/nn.h>

static bool ok_(keel_status st, const char *what)
{
    if (st != KEEL_STATUS_OK)
        fprintf(stderr, "\n  %s: %s: %s\n", what, keel_status_name(st),
                keel_last_error());
    return st == KEEL_STATUS_OK;
}
#define OK(call) CU_ASSERT_FATAL(ok_((call), #call))

/* float32 tensor from doubles */
static keel_tensor *mk(int ndim, const int64_t *shape, const double *v)
{
    int64_t n = 1;
    keel_tensor *t = NULL;

    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    float *f = malloc((size_t)(n ? n : 1) * sizeof(float));

    for (int64_t i = 0; i < n; i++)
        f[i] = (float)v[i];
    ok_(keel_tensor_from_host(f, KEEL_F32, ndim, shape, NULL, &t), "mk");
    free(f);
    return t;
}

static keel_tensor *mk_i64(int ndim, const int64_t *shape, const int64_t *v)
{
    keel_tensor *t = NULL;

    ok_(keel_tensor_from_host(v, KEEL_I64, ndim, shape, NULL, &t), "mki");
    return t;
}

/* values of t as doubles (caller frees) */
static double *rd(const keel_tensor *t)
{
    int64_t n = keel_tensor_numel(t);
    double *d = malloc((size_t)(n ? n : 1) * sizeof(double));
    keel_tensor *c = NULL;

    ok_(keel_cast(t, KEEL_F64, &c), "cast");
    ok_(keel_tensor_to_host(c, d, (size_t)n * sizeof(double)), "to_host");
    keel_tensor_free(c);
    return d;
}

static double max_err(const keel_tensor *t, const double *ref)
{
    double *d = rd(t), e = 0;

    for (int64_t i = 0; i < keel_tensor_numel(t); i++)
        e = fmax(e, fabs(d[i] - ref[i]) / (1 + fabs(ref[i])));
    free(d);
    return e;
}

static double *param(keel_layer *l, const char *name)
{
    return rd(keel_layer_parameter(l, name));
}

static double *grad_of(keel_layer *l, const char *name)
{
    keel_tensor *g = keel_tensor_grad(keel_layer_parameter(l, name));
    double *d = g ? rd(g) : NULL;

    keel_tensor_free(g);
    return d;
}

static void fill(double *v, int n, double scale, int seed)
{
    for (int i = 0; i < n; i++)
        v[i] = scale * sin(0.7 * i + seed) + 0.05 * (i % 3);
}

#define TOL 2e-5

/* ---- Linear ------------------------------------------------------------- */

static void test_linear(void)
{
    keel_layer *l = NULL;
    int64_t xs[2] = {3, 4};
    double x[12], ref[6], dw[8] = {0}, db[2] = {0}, dx[12] = {0};

    keel_seed(1);
    OK(keel_nn_linear(4, 2, NULL, NULL, &l));
    CU_ASSERT_EQUAL(keel_layer_num_parameters(l), 2);
    CU_ASSERT_FALSE(
        keel_tensor_stop_gradient(keel_layer_parameter(l, "weight")));
    fill(x, 12, 1.0, 0);
    keel_tensor *xt = mk(2, xs, x), *y = NULL, *loss = NULL, *sq = NULL;

    OK(keel_tensor_set_stop_gradient(xt, false));
    double *w = param(l, "weight"), *b = param(l, "bias");

    OK(keel_layer_call(l, xt, &y));
    CU_ASSERT_EQUAL(keel_tensor_shape(y)[1], 2);
    for (int i = 0; i < 3; i++)
        for (int o = 0; o < 2; o++) {
            ref[i * 2 + o] = b[o];
            for (int k = 0; k < 4; k++)
                ref[i * 2 + o] += x[i * 4 + k] * w[k * 2 + o];
        }
    CU_ASSERT(max_err(y, ref) < TOL);
    /* loss = sum(y^2): dy = 2y */
    OK(keel_square(y, &sq));
    OK(keel_sum(sq, 0, NULL, false, &loss));
    OK(keel_backward(loss, NULL, false));
    for (int i = 0; i < 3; i++)
        for (int o = 0; o < 2; o++) {
            double g = 2 * ref[i * 2 + o];

            db[o] += g;
            for (int k = 0; k < 4; k++) {
                dw[k * 2 + o] += x[i * 4 + k] * g;
                dx[i * 4 + k] += w[k * 2 + o] * g;
            }
        }
    double *gw = grad_of(l, "weight"), *gb = grad_of(l, "bias");
    keel_tensor *gx = keel_tensor_grad(xt);

    CU_ASSERT_FATAL(gw && gb && gx);
    for (int i = 0; i < 8; i++)
        CU_ASSERT(fabs(gw[i] - dw[i]) < 1e-4 * (1 + fabs(dw[i])));
    for (int i = 0; i < 2; i++)
        CU_ASSERT(fabs(gb[i] - db[i]) < 1e-4 * (1 + fabs(db[i])));
    CU_ASSERT(max_err(gx, dx) < 1e-4);
    free(w);
    free(b);
    free(gw);
    free(gb);
    keel_tensor_free(gx);
    keel_tensor_free(xt);
    keel_tensor_free(y);
    keel_tensor_free(sq);
    keel_tensor_free(loss);
    keel_layer_free(l);

    /* bias_attr=False and a custom weight initializer */
    keel_param_attr none = {KEEL_INIT_NONE, 0, 0};
    keel_param_attr c = {KEEL_INIT_CONSTANT, 0.25, 0};

    OK(keel_nn_linear(4, 2, &c, &none, &l));
    CU_ASSERT_EQUAL(keel_layer_num_parameters(l), 1);
    CU_ASSERT_PTR_NULL(keel_layer_parameter(l, "bias"));
    w = param(l, "weight");
    for (int i = 0; i < 8; i++)
        CU_ASSERT_EQUAL(w[i], 0.25);
    free(w);
    keel_layer_free(l);
}

/* ---- initializers ------------------------------------------------------- */

static void test_init_stats(void)
{
    keel_layer *l = NULL;
    int64_t in = 300, out = 200;
    double lim = sqrt(6.0 / (double)(in + out)), mx = 0, s2 = 0;

    keel_seed(7);
    OK(keel_nn_linear(in, out, NULL, NULL, &l));
    double *w = param(l, "weight"), *b = param(l, "bias");

    for (int64_t i = 0; i < in * out; i++) {
        mx = fmax(mx, fabs(w[i]));
        s2 += w[i] * w[i];
    }
    CU_ASSERT(mx <= lim);
    CU_ASSERT(mx > 0.98 * lim);
    /* U(-l, l) has variance l^2 / 3 */
    CU_ASSERT(fabs(s2 / (double)(in * out) / (lim * lim / 3) - 1) < 0.03);
    for (int64_t i = 0; i < out; i++)
        CU_ASSERT_EQUAL(b[i], 0.0);
    /* reproducible through keel_seed */
    keel_layer *l2 = NULL;

    keel_seed(7);
    OK(keel_nn_linear(in, out, NULL, NULL, &l2));
    double *w2 = param(l2, "weight");

    CU_ASSERT(memcmp(w, w2, (size_t)(in * out) * sizeof(double)) == 0);
    free(w);
    free(w2);
    free(b);
    keel_layer_free(l);
    keel_layer_free(l2);

    /* Conv2D: N(0, 2 / (in * kh * kw)) */
    keel_seed(3);
    OK(keel_nn_conv2d(16, 64, 3, 3, NULL, NULL, NULL, &l));
    const int64_t *ws = keel_tensor_shape(keel_layer_parameter(l, "weight"));
    CU_ASSERT(ws[0] == 64 && ws[1] == 16 && ws[2] == 3 && ws[3] == 3);
    w = param(l, "weight");
    s2 = 0;
    for (int i = 0; i < 64 * 16 * 9; i++)
        s2 += w[i] * w[i];
    CU_ASSERT(fabs(s2 / (64 * 16 * 9) / (2.0 / (16 * 9)) - 1) < 0.06);
    free(w);
    keel_layer_free(l);
}

/* ---- Conv2D forward and backward ---------------------------------------- */

static void test_conv2d(void)
{
    keel_layer *l = NULL;
    keel_conv2d_params p = keel_conv2d_default_params();
    int64_t xs[4] = {1, 2, 4, 4};
    double x[32], ref[3 * 4 * 4], dw[3 * 2 * 9] = {0}, db[3] = {0};

    p.padding[0] = p.padding[1] = 1;
    p.npadding = 2;
    keel_seed(5);
    OK(keel_nn_conv2d(2, 3, 3, 3, &p, NULL, NULL, &l));
    fill(x, 32, 1.0, 2);
    double *w = param(l, "weight"), *b = param(l, "bias");
    keel_tensor *xt = mk(4, xs, x), *y = NULL, *loss = NULL;

    OK(keel_layer_call(l, xt, &y));
    for (int o = 0; o < 3; o++)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) {
                double s = b[o];

                for (int c = 0; c < 2; c++)
                    for (int u = 0; u < 3; u++)
                        for (int v = 0; v < 3; v++) {
                            int ii = i + u - 1, jj = j + v - 1;

                            if (ii < 0 || ii >= 4 || jj < 0 || jj >= 4)
                                continue;
                            s += w[((o * 2 + c) * 3 + u) * 3 + v] *
                                 x[(c * 4 + ii) * 4 + jj];
                            /* loss = sum(y): dy = 1 */
                            dw[((o * 2 + c) * 3 + u) * 3 + v] +=
                                x[(c * 4 + ii) * 4 + jj];
                        }
                ref[(o * 4 + i) * 4 + j] = s;
                db[o] += 1;
            }
    CU_ASSERT(max_err(y, ref) < TOL);
    OK(keel_sum(y, 0, NULL, false, &loss));
    OK(keel_backward(loss, NULL, false));
    double *gw = grad_of(l, "weight"), *gb = grad_of(l, "bias");

    CU_ASSERT_FATAL(gw && gb);
    for (int i = 0; i < 54; i++)
        CU_ASSERT(fabs(gw[i] - dw[i]) < 1e-4);
    for (int i = 0; i < 3; i++)
        CU_ASSERT(fabs(gb[i] - db[i]) < 1e-4);
    free(w);
    free(b);
    free(gw);
    free(gb);
    keel_tensor_free(xt);
    keel_tensor_free(y);
    keel_tensor_free(loss);
    keel_layer_free(l);
}

/* ---- pools, flatten, activations ---------------------------------------- */

static void test_pools_acts(void)
{
    int64_t xs[4] = {1, 1, 4, 4};
    double x[16], rmax[4], ravg[4], r1[1] = {0};
    keel_layer *mp = NULL, *ap = NULL, *aap = NULL, *fl = NULL, *act = NULL;
    keel_tensor *xt, *y = NULL, *loss = NULL;

    fill(x, 16, 1.0, 1);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            double m = -1e30, s = 0;

            for (int u = 0; u < 2; u++)
                for (int v = 0; v < 2; v++) {
                    double e = x[(2 * i + u) * 4 + 2 * j + v];

                    m = fmax(m, e);
                    s += e;
                }
            rmax[i * 2 + j] = m;
            ravg[i * 2 + j] = s / 4;
        }
    for (int i = 0; i < 16; i++)
        r1[0] += x[i] / 16;
    xt = mk(4, xs, x);
    OK(keel_tensor_set_stop_gradient(xt, false));
    OK(keel_nn_max_pool2d(2, 0, 0, false, &mp));
    OK(keel_nn_avg_pool2d(2, 2, 0, false, true, &ap));
    OK(keel_nn_adaptive_avg_pool2d(1, 1, &aap));
    OK(keel_nn_flatten(1, -1, &fl));
    OK(keel_layer_call(mp, xt, &y));
    CU_ASSERT(max_err(y, rmax) < TOL);
    /* backward of max pool routes 1 to each argmax */
    OK(keel_sum(y, 0, NULL, false, &loss));
    OK(keel_backward(loss, NULL, false));
    keel_tensor *g = keel_tensor_grad(xt);
    double *gd = rd(g), tot = 0;

    for (int i = 0; i < 16; i++) {
        tot += gd[i];
        if (gd[i] != 0) {
            bool hit = false;

            for (int k = 0; k < 4; k++)
                hit = hit || fabs(x[i] - rmax[k]) < 1e-6;
            CU_ASSERT(hit);
        }
    }
    CU_ASSERT(fabs(tot - 4) < 1e-6);
    free(gd);
    keel_tensor_free(g);
    keel_tensor_free(loss);
    keel_tensor_free(y);
    OK(keel_layer_call(ap, xt, &y));
    CU_ASSERT(max_err(y, ravg) < TOL);
    keel_tensor_free(y);
    OK(keel_layer_call(aap, xt, &y));
    CU_ASSERT(max_err(y, r1) < TOL);
    keel_tensor *f = NULL;

    OK(keel_layer_call(fl, y, &f));
    CU_ASSERT(keel_tensor_ndim(f) == 2 && keel_tensor_shape(f)[1] == 1);
    keel_tensor_free(f);
    keel_tensor_free(y);

    /* activations against references */
    struct {
        keel_activation k;
        double (*fn)(double);
    } acts[] = {{KEEL_ACT_RELU, NULL}, {KEEL_ACT_SIGMOID, NULL},
                {KEEL_ACT_TANH, tanh}, {KEEL_ACT_LEAKY_RELU, NULL}};
    for (size_t a = 0; a < sizeof(acts) / sizeof(acts[0]); a++) {
        double ref[16];

        for (int i = 0; i < 16; i++) {
            switch (acts[a].k) {
            case KEEL_ACT_RELU:
                ref[i] = x[i] > 0 ? x[i] : 0;
                break;
            case KEEL_ACT_SIGMOID:
                ref[i] = 1 / (1 + exp(-x[i]));
                break;
            case KEEL_ACT_LEAKY_RELU:
                ref[i] = x[i] > 0 ? x[i] : 0.01 * x[i];
                break;
            default:
                ref[i] = acts[a].fn(x[i]);
            }
        }
        OK(keel_nn_activation_default(acts[a].k, &act));
        OK(keel_layer_call(act, xt, &y));
        CU_ASSERT(max_err(y, ref) < TOL);
        CU_ASSERT_EQUAL(keel_layer_num_parameters(act), 0);
        keel_tensor_free(y);
        keel_layer_free(act);
    }
    keel_tensor_free(xt);
    keel_layer_free(mp);
    keel_layer_free(ap);
    keel_layer_free(aap);
    keel_layer_free(fl);
}

/* ---- containers: LeNet, LayerList, C arrays ----------------------------- */

static keel_status lenet(keel_layer **out)
{
    keel_layer *ls[12] = {NULL};
    keel_conv2d_params p = keel_conv2d_default_params();
    keel_status st = KEEL_STATUS_OK;

    p.padding[0] = p.padding[1] = 2;
    p.npadding = 2;
    if (st == KEEL_STATUS_OK)
        st = keel_nn_conv2d(1, 6, 5, 5, &p, NULL, NULL, &ls[0]);
    if (st == KEEL_STATUS_OK)
        st = keel_nn_activation_default(KEEL_ACT_RELU, &ls[1]);
    if (st == KEEL_STATUS_OK)
        st = keel_nn_max_pool2d(2, 2, 0, false, &ls[2]);
    if (st == KEEL_STATUS_OK)
        st = keel_nn_conv2d(6, 16, 5, 5, NULL, NULL, NULL, &ls[3]);
    if (st == KEEL_STATUS_OK)
        st = keel_nn_activation_default(KEEL_ACT_RELU, &ls[4]);
    if (st == KEEL_STATUS_OK)
        st = keel_nn_max_pool2d(2, 2, 0, false, &ls[5]);
    if (st == KEEL_STATUS_OK)
        st = keel_nn_flatten(1, -1, &ls[6]);
    if (st == KEEL_STATUS_OK)
        st = keel_nn_linear(400, 120, NULL, NULL, &ls[7]);
    if (st == KEEL_STATUS_OK)
        st = keel_nn_linear(120, 84, NULL, NULL, &ls[8]);
    if (st == KEEL_STATUS_OK)
        st = keel_nn_linear(84, 10, NULL, NULL, &ls[9]);
    if (st != KEEL_STATUS_OK) {
        for (int i = 0; i < 10; i++)
            keel_layer_free(ls[i]);
        return st;
    }
    return keel_sequential_create(ls, 10, out);
}

static void test_lenet(void)
{
    keel_layer *net = NULL, *ce = NULL;
    keel_state_dict *ps = NULL;
    static const char *names[] = {"0.weight", "0.bias", "3.weight", "3.bias",
                                  "7.weight", "7.bias", "8.weight", "8.bias",
                                  "9.weight", "9.bias"};

    keel_seed(11);
    OK(lenet(&net));
    CU_ASSERT_EQUAL(keel_layer_num_parameters(net), 10);
    OK(keel_layer_parameters(net, &ps));
    CU_ASSERT_EQUAL_FATAL(keel_state_dict_count(ps), 10);
    for (int i = 0; i < 10; i++)
        CU_ASSERT_STRING_EQUAL(keel_state_dict_name(ps, i), names[i]);
    keel_state_dict_free(ps);

    /* a forward + CrossEntropyLoss + backward reaches every parameter */
    int64_t xs[4] = {2, 1, 28, 28}, ls[1] = {2}, lab[2] = {3, 7};
    keel_tensor *x = NULL, *y = NULL, *loss = NULL, *lt = mk_i64(1, ls, lab);

    OK(keel_randn(4, xs, KEEL_F32, NULL, &x));
    OK(keel_layer_call(net, x, &y));
    CU_ASSERT(keel_tensor_shape(y)[0] == 2 && keel_tensor_shape(y)[1] == 10);
    OK(keel_nn_cross_entropy_loss(NULL, &ce));
    OK(keel_layer_call2(ce, y, lt, &loss));
    CU_ASSERT_EQUAL(keel_tensor_ndim(loss), 0);
    OK(keel_backward(loss, NULL, false));
    OK(keel_layer_parameters(net, &ps));
    for (int i = 0; i < 10; i++) {
        keel_tensor *g = keel_tensor_grad(keel_state_dict_get(ps, names[i]));

        CU_ASSERT_PTR_NOT_NULL(g);
        keel_tensor_free(g);
    }
    /* Paddle's clear_gradients(): every gradient becomes zeros, kept */
    OK(keel_layer_clear_gradients(net));
    for (int i = 0; i < 10; i++) {
        keel_tensor *p = keel_state_dict_get(ps, names[i]);
        keel_tensor *g = keel_tensor_grad(p);
        int64_t n = keel_tensor_numel(p);
        double v = 1;

        CU_ASSERT_PTR_NOT_NULL_FATAL(g);
        CU_ASSERT_EQUAL(keel_tensor_numel(g), n);
        for (int64_t k = 0; k < n; k += 1 + n / 7) {
            OK(keel_tensor_item(g, k, &v));
            CU_ASSERT_EQUAL(v, 0.0);
        }
        OK(keel_tensor_item(g, n - 1, &v));
        CU_ASSERT_EQUAL(v, 0.0);
        keel_tensor_free(g);
    }
    /* set_to_zero = false drops them */
    OK(keel_layer_clear_gradients_ex(net, false));
    for (int i = 0; i < 10; i++)
        CU_ASSERT_PTR_NULL(keel_tensor_grad(keel_state_dict_get(ps, names[i])));
    keel_state_dict_free(ps);
    CU_ASSERT_EQUAL(keel_layer_clear_gradients(NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    keel_tensor_free(x);
    keel_tensor_free(y);
    keel_tensor_free(lt);
    keel_tensor_free(loss);
    keel_layer_free(ce);
    keel_layer_free(net);
}

struct holder {
    keel_layer *blocks[2]; /* a plain C array: not registered */
};

static keel_status holder_fwd(keel_layer *l, keel_tensor *const *in, int nin,
                              keel_tensor **out)
{
    return keel_layer_forward(keel_layer_sublayer(l, "list"), in, nin, out);
}

static void holder_destroy(void *priv)
{
    struct holder *h = priv;

    keel_layer_free(h->blocks[0]);
    keel_layer_free(h->blocks[1]);
    free(h);
}

static const keel_layer_ops holder_ops = {"Holder", holder_fwd,
                                          holder_destroy};

static void test_layer_list(void)
{
    keel_layer *list = NULL, *a = NULL, *top = NULL, *tmp = NULL;
    keel_state_dict *ps = NULL;
    struct holder *h = calloc(1, sizeof(*h));

    OK(keel_layer_list_create(&list));
    OK(keel_nn_linear(3, 3, NULL, NULL, &a));
    OK(keel_layer_list_append(list, a));
    OK(keel_nn_linear(3, 2, NULL, NULL, &a));
    OK(keel_layer_list_append(list, a));
    OK(keel_nn_linear(2, 2, NULL, NULL, &h->blocks[0]));
    OK(keel_nn_linear(2, 2, NULL, NULL, &h->blocks[1]));
    OK(keel_layer_create(&holder_ops, h, &top));
    OK(keel_layer_add_sublayer(top, "list", list));
    /* only the LayerList's four parameters */
    CU_ASSERT_EQUAL(keel_layer_num_parameters(top), 4);
    OK(keel_layer_parameters(top, &ps));
    CU_ASSERT_STRING_EQUAL(keel_state_dict_name(ps, 0), "list.0.weight");
    CU_ASSERT_STRING_EQUAL(keel_state_dict_name(ps, 3), "list.1.bias");
    keel_state_dict_free(ps);
    /* a LayerList is not callable; duplicate names are rejected */
    int64_t s[2] = {1, 3};
    double v[3] = {1, 2, 3};
    keel_tensor *x = mk(2, s, v), *y = NULL;

    CU_ASSERT_EQUAL(keel_layer_call(top, x, &y),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NULL(y);
    OK(keel_nn_flatten(1, -1, &tmp));
    CU_ASSERT_EQUAL(keel_layer_add_sublayer(top, "list", tmp),
                    KEEL_STATUS_INVALID_ARGUMENT);
    keel_tensor_free(x);
    keel_layer_free(top);
}

/* ---- train/eval: Dropout, BatchNorm ------------------------------------- */

static void test_dropout(void)
{
    keel_layer *d = NULL;
    int64_t s[1] = {4000};
    keel_tensor *x = NULL, *y = NULL, *y2 = NULL;

    OK(keel_ones(1, s, KEEL_F32, NULL, &x));
    OK(keel_nn_dropout(0.25, false, &d));
    keel_seed(9);
    OK(keel_layer_call(d, x, &y));
    keel_seed(9);
    OK(keel_layer_call(d, x, &y2));
    double *a = rd(y), *b = rd(y2);
    int zeros = 0;

    CU_ASSERT(memcmp(a, b, sizeof(double) * 4000) == 0);
    for (int i = 0; i < 4000; i++) {
        CU_ASSERT(a[i] == 0 || fabs(a[i] - 1 / 0.75) < 1e-6);
        zeros += a[i] == 0;
    }
    CU_ASSERT(zeros > 850 && zeros < 1150);
    free(a);
    free(b);
    keel_tensor_free(y);
    keel_tensor_free(y2);
    keel_layer_eval(d);
    CU_ASSERT_FALSE(keel_layer_is_training(d));
    OK(keel_layer_call(d, x, &y));
    a = rd(y);
    for (int i = 0; i < 4000; i++)
        CU_ASSERT_EQUAL(a[i], 1.0);
    free(a);
    keel_tensor_free(y);
    keel_tensor_free(x);
    keel_layer_free(d);
}

static void test_batch_norm(void)
{
    keel_layer *bn = NULL;
    int64_t s[2] = {4, 3};
    double x[12], mean[3] = {0}, var[3] = {0}, ref[12];
    keel_tensor *xt, *y = NULL, *loss = NULL;

    fill(x, 12, 2.0, 4);
    OK(keel_nn_batch_norm1d(3, 0.9, 1e-5, &bn));
    CU_ASSERT_EQUAL(keel_layer_num_parameters(bn), 2);
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < 3; c++)
            mean[c] += x[i * 3 + c] / 4;
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < 3; c++)
            var[c] += pow(x[i * 3 + c] - mean[c], 2) / 4;
    for (int i = 0; i < 12; i++)
        ref[i] = (x[i] - mean[i % 3]) / sqrt(var[i % 3] + 1e-5);
    xt = mk(2, s, x);
    OK(keel_layer_call(bn, xt, &y));
    CU_ASSERT(max_err(y, ref) < 1e-4);
    /* running stats: 0.9 * init + 0.1 * batch (biased variance) */
    double rm[3], rv[3];

    for (int c = 0; c < 3; c++) {
        rm[c] = 0.1 * mean[c];
        rv[c] = 0.9 + 0.1 * var[c];
    }
    CU_ASSERT(max_err(keel_layer_buffer(bn, "_mean"), rm) < 1e-5);
    CU_ASSERT(max_err(keel_layer_buffer(bn, "_variance"), rv) < 1e-5);
    /* backward: d sum(y * w) / d bias = 4 per channel */
    OK(keel_sum(y, 0, NULL, false, &loss));
    OK(keel_backward(loss, NULL, false));
    double *gb = grad_of(bn, "bias"), *gw = grad_of(bn, "weight");

    CU_ASSERT_FATAL(gb && gw);
    for (int c = 0; c < 3; c++) {
        CU_ASSERT(fabs(gb[c] - 4) < 1e-5);
        CU_ASSERT(fabs(gw[c]) < 1e-4); /* sum of normalised values */
    }
    free(gb);
    free(gw);
    keel_tensor_free(y);
    keel_tensor_free(loss);
    /* eval: running statistics, nothing updated */
    keel_layer_eval(bn);
    OK(keel_layer_call(bn, xt, &y));
    for (int i = 0; i < 12; i++)
        ref[i] = (x[i] - rm[i % 3]) / sqrt(rv[i % 3] + 1e-5);
    CU_ASSERT(max_err(y, ref) < 1e-4);
    CU_ASSERT(max_err(keel_layer_buffer(bn, "_mean"), rm) < 1e-5);
    keel_tensor_free(y);
    /* state dict names (Paddle) */
    keel_state_dict *sd = NULL;

    OK(keel_layer_state_dict(bn, &sd));
    CU_ASSERT_EQUAL_FATAL(keel_state_dict_count(sd), 4);
    CU_ASSERT_STRING_EQUAL(keel_state_dict_name(sd, 2), "_mean");
    CU_ASSERT_STRING_EQUAL(keel_state_dict_name(sd, 3), "_variance");
    keel_state_dict_free(sd);
    keel_tensor_free(xt);
    keel_layer_free(bn);

    /* BatchNorm2D rejects 2-D input */
    int64_t s4[4] = {2, 3, 2, 2};

    OK(keel_nn_batch_norm2d(3, 0.9, 1e-5, &bn));
    OK(keel_randn(4, s4, KEEL_F32, NULL, &xt));
    OK(keel_layer_call(bn, xt, &y));
    keel_tensor_free(y);
    keel_tensor *x2 = NULL;

    OK(keel_randn(2, s, KEEL_F32, NULL, &x2));
    CU_ASSERT_EQUAL(keel_layer_call(bn, x2, &y),
                    KEEL_STATUS_INVALID_ARGUMENT);
    keel_tensor_free(x2);
    keel_tensor_free(xt);
    keel_layer_free(bn);
}

/* ---- LayerNorm, GroupNorm, Embedding ------------------------------------ */

static void test_norms_embedding(void)
{
    keel_layer *ln = NULL, *gn = NULL, *em = NULL;
    int64_t s[2] = {2, 4}, ns[1] = {4}, s4[4] = {1, 4, 1, 2};
    double x[8], ref[8];
    keel_tensor *xt, *y = NULL;

    fill(x, 8, 1.5, 6);
    for (int r = 0; r < 2; r++) {
        double m = 0, v = 0;

        for (int i = 0; i < 4; i++)
            m += x[r * 4 + i] / 4;
        for (int i = 0; i < 4; i++)
            v += pow(x[r * 4 + i] - m, 2) / 4;
        for (int i = 0; i < 4; i++)
            ref[r * 4 + i] = (x[r * 4 + i] - m) / sqrt(v + 1e-5);
    }
    xt = mk(2, s, x);
    OK(keel_nn_layer_norm(1, ns, 1e-5, &ln));
    OK(keel_layer_call(ln, xt, &y));
    CU_ASSERT(max_err(y, ref) < 1e-4);
    keel_tensor_free(y);
    keel_tensor_free(xt);
    /* GroupNorm with 2 groups of 2 channels x 2 pixels: same numbers as
     * the rows above */
    xt = mk(4, s4, x);
    OK(keel_nn_group_norm(2, 4, 1e-5, &gn));
    OK(keel_layer_call(gn, xt, &y));
    CU_ASSERT(max_err(y, ref) < 1e-4);
    keel_tensor_free(y);
    keel_tensor_free(xt);

    /* Embedding: padding_idx -1 means the last row; zeros, no gradient */
    int64_t is[1] = {3}, ids[3] = {0, 4, 2};
    keel_tensor *it = mk_i64(1, is, ids), *loss = NULL;

    OK(keel_nn_embedding(5, 3, -1, NULL, &em));
    OK(keel_layer_call(em, it, &y));
    double *w = param(em, "weight"), *yd = rd(y);

    for (int j = 0; j < 3; j++) {
        CU_ASSERT_EQUAL(yd[j], w[0 * 3 + j]);
        CU_ASSERT_EQUAL(yd[3 + j], 0.0);
        CU_ASSERT_EQUAL(yd[6 + j], w[2 * 3 + j]);
        CU_ASSERT_EQUAL(w[4 * 3 + j], 0.0); /* padding row zeroed */
        CU_ASSERT(w[0 * 3 + j] != 0.0);
    }
    OK(keel_sum(y, 0, NULL, false, &loss));
    OK(keel_backward(loss, NULL, false));
    double *g = grad_of(em, "weight");

    CU_ASSERT_FATAL(g != NULL);
    for (int r = 0; r < 5; r++)
        for (int j = 0; j < 3; j++)
            CU_ASSERT_EQUAL(g[r * 3 + j], (r == 0 || r == 2) ? 1.0 : 0.0);
    keel_layer *e2 = NULL;

    CU_ASSERT_EQUAL(keel_nn_embedding(5, 3, 5, NULL, &e2),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NULL(e2);
    free(w);
    free(yd);
    free(g);
    keel_tensor_free(it);
    keel_tensor_free(y);
    keel_tensor_free(loss);
    keel_layer_free(em);
    keel_layer_free(ln);
    keel_layer_free(gn);
}

/* ---- losses ------------------------------------------------------------- */

static void test_losses(void)
{
    int64_t s[2] = {3, 4}, ls[1] = {3}, lab[3] = {1, 3, 0};
    double x[12], t[12], r;
    keel_layer *l = NULL;
    keel_tensor *xt, *tt, *lt, *y = NULL;

    fill(x, 12, 2.0, 8);
    fill(t, 12, 1.0, 3);
    xt = mk(2, s, x);
    tt = mk(2, s, t);
    lt = mk_i64(1, ls, lab);
    OK(keel_tensor_set_stop_gradient(xt, false));

    /* CrossEntropyLoss: mean of logsumexp - x[label]; grad (p - 1hot)/N */
    double ce = 0, dce[12];

    for (int i = 0; i < 3; i++) {
        double m = -1e30, z = 0;

        for (int c = 0; c < 4; c++)
            m = fmax(m, x[i * 4 + c]);
        for (int c = 0; c < 4; c++)
            z += exp(x[i * 4 + c] - m);
        ce += (m + log(z) - x[i * 4 + lab[i]]) / 3;
        for (int c = 0; c < 4; c++)
            dce[i * 4 + c] =
                (exp(x[i * 4 + c] - m) / z - (c == lab[i])) / 3;
    }
    OK(keel_nn_cross_entropy_loss(NULL, &l));
    OK(keel_layer_call2(l, xt, lt, &y));
    CU_ASSERT(max_err(y, &ce) < TOL);
    OK(keel_backward(y, NULL, false));
    keel_tensor *g = keel_tensor_grad(xt);

    CU_ASSERT(max_err(g, dce) < 1e-5);
    keel_tensor_free(g);
    keel_tensor_set_grad(xt, NULL);
    keel_tensor_free(y);
    keel_layer_free(l);

    /* NLLLoss on the same numbers as log-probabilities: mean -x[label] */
    r = -(x[1] + x[7] + x[8]) / 3;
    OK(keel_nn_nll_loss(NULL, -100, NULL, &l));
    OK(keel_layer_call2(l, xt, lt, &y));
    CU_ASSERT(max_err(y, &r) < TOL);
    keel_tensor_free(y);
    keel_layer_free(l);

    /* MSE, L1, SmoothL1 (mean and sum) with gradients */
    double mse = 0, l1 = 0, sl1 = 0, dmse[12], dl1[12], dsl1[12];

    for (int i = 0; i < 12; i++) {
        double d = x[i] - t[i];

        mse += d * d / 12;
        l1 += fabs(d) / 12;
        sl1 += fabs(d) < 1 ? 0.5 * d * d : fabs(d) - 0.5;
        dmse[i] = 2 * d / 12;
        dl1[i] = (d > 0 ? 1.0 : -1.0) / 12;
        dsl1[i] = fabs(d) < 1 ? d : (d > 0 ? 1 : -1);
    }
    struct {
        int kind;
        double *val, *grad;
    } cases[] = {{0, &mse, dmse}, {1, &l1, dl1}, {2, &sl1, dsl1}};
    for (int k = 0; k < 3; k++) {
        keel_status st;

        if (cases[k].kind == 0)
            st = keel_nn_mse_loss("mean", &l);
        else if (cases[k].kind == 1)
            st = keel_nn_l1_loss(NULL, &l);
        else
            st = keel_nn_smooth_l1_loss("sum", 1.0, &l);
        OK(st);
        OK(keel_layer_call2(l, xt, tt, &y));
        CU_ASSERT(keel_tensor_ndim(y) == 0);
        CU_ASSERT(max_err(y, cases[k].val) < TOL);
        OK(keel_backward(y, NULL, false));
        g = keel_tensor_grad(xt);
        CU_ASSERT(max_err(g, cases[k].grad) < 1e-5);
        keel_tensor_free(g);
        keel_tensor_set_grad(xt, NULL);
        keel_tensor_free(y);
        keel_layer_free(l);
    }

    /* BCEWithLogitsLoss, reduction none, labels in [0, 1] */
    double bce[12], lab01[12];

    for (int i = 0; i < 12; i++) {
        lab01[i] = 0.5 + 0.5 * sin(i);
        bce[i] = fmax(x[i], 0) - x[i] * lab01[i] + log1p(exp(-fabs(x[i])));
    }
    keel_tensor *bt = mk(2, s, lab01);

    OK(keel_nn_bce_with_logits_loss(NULL, "none", NULL, &l));
    OK(keel_layer_call2(l, xt, bt, &y));
    CU_ASSERT(max_err(y, bce) < TOL);
    keel_tensor_free(y);
    keel_layer_free(l);
    keel_tensor_free(bt);
    CU_ASSERT_EQUAL(keel_nn_mse_loss("avg", &l), KEEL_STATUS_INVALID_ARGUMENT);
    keel_tensor_free(xt);
    keel_tensor_free(tt);
    keel_tensor_free(lt);
}

/* ---- state dict round trip ---------------------------------------------- */

/* ---- keel_tensor_from_floats ---------------------------------------- */

static float f_bits(uint32_t u)
{
    float f;

    memcpy(&f, &u, sizeof(f));
    return f;
}

/* The 16-bit codes a float16 / bfloat16 tensor made from `v` holds. */
static void half_codes(const float *v, int64_t n, keel_dtype dt,
                       uint16_t *codes)
{
    keel_tensor *t = NULL;

    OK(keel_tensor_from_floats(v, 1, &n, dt, NULL, &t));
    CU_ASSERT_EQUAL(keel_tensor_dtype(t), dt);
    OK(keel_tensor_to_host(t, codes, (size_t)n * 2));
    keel_tensor_free(t);
}

static void test_from_floats(void)
{
    /* float16: ties to even, subnormals, overflow, signed zero, inf, NaN */
    const float hv[] = {
        1.0f, -2.0f, 65504.0f, 65519.0f, 65520.0f, 1e6f,
        1.0f + 0x1p-11f,          /* tie between 1 and 1+2^-10: even, 1  */
        1.0f + 3 * 0x1p-11f,      /* tie: up to the even 1+2^-9          */
        0x1p-24f, 0x1p-25f,       /* smallest subnormal; its half ties 0 */
        0x1.8p-25f, 0x1p-14f,     /* rounds up to 2^-24; smallest normal */
        0x1.ffcp-15f,             /* largest subnormal + a tie: normal   */
        -0.0f, INFINITY, -INFINITY, 1e-45f, f_bits(0x7f800001u)};
    const uint16_t hw[] = {0x3c00, 0xc000, 0x7bff, 0x7bff, 0x7c00, 0x7c00,
                           0x3c00, 0x3c02, 0x0001, 0x0000, 0x0001, 0x0400,
                           0x0400, 0x8000, 0x7c00, 0xfc00, 0x0000};
    /* bfloat16 */
    const float bv[] = {1.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -3.0f,
                        f_bits(0x7f7fffffu), INFINITY, f_bits(0xffffffffu),
                        f_bits(0x7f800001u)};
    const uint16_t bw[] = {0x3f80, 0x3f80, 0x3f82, 0xc040, 0x7f80, 0x7f80};
    const int nh = (int)(sizeof(hv) / sizeof(hv[0]));
    const int nb = (int)(sizeof(bv) / sizeof(bv[0]));
    uint16_t codes[32];
    float many[512];
    keel_tensor *t = NULL, *f32 = NULL, *ref = NULL;
    int64_t n = 512, two[2] = {2, 3};
    double v;

    half_codes(hv, nh, KEEL_F16, codes);
    for (int i = 0; i < nh - 1; i++)
        if (codes[i] != hw[i])
            CU_FAIL_FATAL("float16 code differs from IEEE rounding");
    /* a NaN stays NaN: exponent all ones and a non-zero mantissa */
    CU_ASSERT_EQUAL(codes[nh - 1] & 0x7c00, 0x7c00);
    CU_ASSERT(codes[nh - 1] & 0x03ff);

    half_codes(bv, nb, KEEL_BF16, codes);
    for (int i = 0; i < 6; i++)
        CU_ASSERT_EQUAL(codes[i], bw[i]);
    for (int i = 6; i < nb; i++) { /* NaNs, one with the sign bit */
        CU_ASSERT_EQUAL(codes[i] & 0x7f80, 0x7f80);
        CU_ASSERT(codes[i] & 0x007f);
    }
    CU_ASSERT(codes[6] & 0x8000);
    CU_ASSERT(!(codes[7] & 0x8000));

    /* against keel_cast of a float32 tensor (the plugin's conversion),
     * over values spread across float16's range */
    for (int i = 0; i < 512; i++)
        many[i] = (float)((i % 2 ? -1 : 1) * ldexp(1.0 + (i * 37 % 512) / 511.0,
                                                   i % 40 - 26));
    for (int d = 0; d < 2; d++) {
        keel_dtype dt = d ? KEEL_BF16 : KEEL_F16;
        uint16_t a[512], b[512];

        OK(keel_tensor_from_floats(many, 1, &n, dt, NULL, &t));
        OK(keel_tensor_from_host(many, KEEL_F32, 1, &n, NULL, &f32));
        OK(keel_cast(f32, dt, &ref));
        OK(keel_tensor_to_host(t, a, sizeof(a)));
        OK(keel_tensor_to_host(ref, b, sizeof(b)));
        CU_ASSERT(memcmp(a, b, sizeof(a)) == 0);
        keel_tensor_free(t);
        keel_tensor_free(f32);
        keel_tensor_free(ref);
    }

    /* float32 and float64, a 2-D shape, and an empty tensor */
    OK(keel_tensor_from_floats(many, 2, two, KEEL_F64, NULL, &t));
    CU_ASSERT_EQUAL(keel_tensor_ndim(t), 2);
    OK(keel_tensor_item(t, 5, &v));
    CU_ASSERT_EQUAL(v, (double)many[5]);
    keel_tensor_free(t);
    OK(keel_tensor_from_floats(many, 1, &n, KEEL_F32, NULL, &t));
    OK(keel_tensor_item(t, 511, &v));
    CU_ASSERT_EQUAL(v, (double)many[511]);
    keel_tensor_free(t);
    n = 0;
    OK(keel_tensor_from_floats(NULL, 1, &n, KEEL_F16, NULL, &t));
    CU_ASSERT_EQUAL(keel_tensor_numel(t), 0);
    keel_tensor_free(t);

    /* errors */
    n = 4;
    CU_ASSERT_EQUAL(keel_tensor_from_floats(many, 1, &n, KEEL_I32, NULL, &t),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "int32"));
    CU_ASSERT_PTR_NULL(t);
    CU_ASSERT_EQUAL(keel_tensor_from_floats(NULL, 1, &n, KEEL_F16, NULL, &t),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "data is NULL"));
    CU_ASSERT_NOT_EQUAL(
        keel_tensor_from_floats(many, 1, &n, KEEL_F16, "nosuchdevice:0", &t),
        KEEL_STATUS_OK);
    CU_ASSERT_PTR_NULL(t);
}

static void test_state_dict(void)
{
    keel_layer *a = NULL, *b = NULL, *ls[2] = {NULL, NULL};
    keel_state_dict *sa = NULL, *loaded = NULL, *sb = NULL;
    char path[] = "/tmp/keel-test-nn-XXXXXX";
    int fd = mkstemp(path);

    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
    keel_seed(21);
    OK(keel_nn_linear(5, 3, NULL, NULL, &ls[0]));
    OK(keel_nn_batch_norm1d(3, 0.9, 1e-5, &ls[1]));
    OK(keel_sequential_create(ls, 2, &a));
    /* move the running statistics away from their initial values */
    int64_t s[2] = {4, 5};
    keel_tensor *x = NULL, *y = NULL;

    OK(keel_randn(2, s, KEEL_F32, NULL, &x));
    OK(keel_layer_call(a, x, &y));
    keel_tensor_free(y);
    OK(keel_layer_state_dict(a, &sa));
    CU_ASSERT_EQUAL(keel_state_dict_count(sa), 6);
    CU_ASSERT_STRING_EQUAL(keel_state_dict_name(sa, 4), "1._mean");
    OK(keel_save(path, sa));

    keel_seed(99);
    OK(keel_nn_linear(5, 3, NULL, NULL, &ls[0]));
    OK(keel_nn_batch_norm1d(3, 0.9, 1e-5, &ls[1]));
    OK(keel_sequential_create(ls, 2, &b));
    OK(keel_load(path, NULL, &loaded));
    OK(keel_layer_set_state_dict(b, loaded, true));
    OK(keel_layer_state_dict(b, &sb));
    for (int64_t i = 0; i < 6; i++) {
        keel_tensor *ta, *tb;
        const char *n = keel_state_dict_name(sa, i);

        ta = keel_state_dict_get(sa, n);
        tb = keel_state_dict_get(sb, n);
        CU_ASSERT_FATAL(ta && tb);
        double *da = rd(ta), *db = rd(tb);

        CU_ASSERT(memcmp(da, db, (size_t)keel_tensor_numel(ta) *
                                     sizeof(double)) == 0);
        free(da);
        free(db);
    }
    /* same outputs in eval */
    keel_tensor *ya = NULL, *yb = NULL;

    keel_layer_eval(a);
    keel_layer_eval(b);
    OK(keel_layer_call(a, x, &ya));
    OK(keel_layer_call(b, x, &yb));
    double *da = rd(ya), *db = rd(yb);

    CU_ASSERT(memcmp(da, db, 12 * sizeof(double)) == 0);
    free(da);
    free(db);
    keel_tensor_free(ya);
    keel_tensor_free(yb);

    /* a shape mismatch is refused and changes nothing */
    keel_tensor *bad = NULL;
    int64_t ws[2] = {3, 5};
    double *before = rd(keel_layer_buffer(keel_layer_sublayer(b, "1"),
                                          "_mean"));

    OK(keel_zeros(2, ws, KEEL_F32, NULL, &bad));
    keel_tensor *fresh = NULL;
    int64_t ms[1] = {3};

    OK(keel_full(1, ms, KEEL_F32, 42.0, NULL, &fresh));
    OK(keel_state_dict_set(loaded, "1._mean", fresh));
    OK(keel_state_dict_set(loaded, "0.weight", bad));
    CU_ASSERT_EQUAL(keel_layer_set_state_dict(b, loaded, true),
                    KEEL_STATUS_INVALID_ARGUMENT);
    double *after = rd(keel_layer_buffer(keel_layer_sublayer(b, "1"),
                                         "_mean"));

    CU_ASSERT(memcmp(before, after, 3 * sizeof(double)) == 0);
    /* missing keys in strict mode */
    OK(keel_state_dict_remove(loaded, "0.weight"));
    CU_ASSERT_EQUAL(keel_layer_set_state_dict(b, loaded, true),
                    KEEL_STATUS_INVALID_ARGUMENT);
    OK(keel_layer_set_state_dict(b, loaded, false));
    free(before);
    free(after);
    keel_tensor_free(bad);
    keel_tensor_free(fresh);
    keel_tensor_free(x);
    keel_state_dict_free(sa);
    keel_state_dict_free(sb);
    keel_state_dict_free(loaded);
    keel_layer_free(a);
    keel_layer_free(b);
    unlink(path);
}

/* ---- Conv2DTranspose forward/backward ----------------------------------- */

static void test_conv2d_transpose(void)
{
    keel_layer *l = NULL;
    keel_conv2d_params p = keel_conv2d_default_params();
    int64_t xs[4] = {1, 2, 3, 3};
    double x[18], ref[2 * 5 * 5], dx[18] = {0};
    keel_tensor *xt, *y = NULL, *loss = NULL;

    p.stride[0] = p.stride[1] = 2;
    p.padding[0] = p.padding[1] = 1;
    p.npadding = 2;
    keel_seed(13);
    OK(keel_nn_conv2d_transpose(2, 2, 3, 3, &p, NULL, NULL, &l));
    const int64_t *ws = keel_tensor_shape(keel_layer_parameter(l, "weight"));

    CU_ASSERT(ws[0] == 2 && ws[1] == 2 && ws[2] == 3 && ws[3] == 3);
    fill(x, 18, 1.0, 5);
    double *w = param(l, "weight"), *b = param(l, "bias");

    for (int o = 0; o < 2; o++)
        for (int k = 0; k < 25; k++)
            ref[o * 25 + k] = b[o];
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++)
                for (int o = 0; o < 2; o++)
                    for (int u = 0; u < 3; u++)
                        for (int v = 0; v < 3; v++) {
                            int oi = 2 * i - 1 + u, oj = 2 * j - 1 + v;
                            double wv = w[((c * 2 + o) * 3 + u) * 3 + v];

                            if (oi < 0 || oi >= 5 || oj < 0 || oj >= 5)
                                continue;
                            ref[(o * 5 + oi) * 5 + oj] +=
                                x[(c * 3 + i) * 3 + j] * wv;
                            dx[(c * 3 + i) * 3 + j] += wv;
                        }
    xt = mk(4, xs, x);
    OK(keel_tensor_set_stop_gradient(xt, false));
    OK(keel_layer_call(l, xt, &y));
    CU_ASSERT_FATAL(keel_tensor_shape(y)[2] == 5 &&
                    keel_tensor_shape(y)[3] == 5);
    CU_ASSERT(max_err(y, ref) < TOL);
    OK(keel_sum(y, 0, NULL, false, &loss));
    OK(keel_backward(loss, NULL, false));
    keel_tensor *g = keel_tensor_grad(xt);
    double *gb = grad_of(l, "bias");

    CU_ASSERT(max_err(g, dx) < 1e-5);
    CU_ASSERT_FATAL(gb != NULL);
    CU_ASSERT(fabs(gb[0] - 25) < 1e-4 && fabs(gb[1] - 25) < 1e-4);
    free(w);
    free(b);
    free(gb);
    keel_tensor_free(g);
    keel_tensor_free(xt);
    keel_tensor_free(y);
    keel_tensor_free(loss);
    keel_layer_free(l);
}

/* ---- LayerNorm backward, Dropout downscale_in_infer --------------------- */

static void test_ln_backward_downscale(void)
{
    keel_layer *ln = NULL, *d = NULL;
    int64_t s[3] = {2, 3, 4}, ns[2] = {3, 4};
    keel_tensor *x = NULL, *y = NULL, *wx = NULL, *loss = NULL, *wt;
    double wv[24];

    keel_seed(17);
    OK(keel_randn(3, s, KEEL_F32, NULL, &x));
    OK(keel_nn_layer_norm(2, ns, 1e-5, &ln));
    CU_ASSERT_EQUAL(keel_tensor_shape(keel_layer_parameter(ln, "weight"))[0],
                    12);
    OK(keel_layer_call(ln, x, &y));
    double *yd = rd(y);

    /* loss = sum(y * wv): dbias = sum_n wv, dweight = sum_n y * wv */
    fill(wv, 24, 1.0, 9);
    wt = mk(3, s, wv);
    OK(keel_multiply(y, wt, &wx));
    OK(keel_sum(wx, 0, NULL, false, &loss));
    OK(keel_backward(loss, NULL, false));
    double *gb = grad_of(ln, "bias"), *gw = grad_of(ln, "weight");

    CU_ASSERT_FATAL(gb && gw);
    for (int k = 0; k < 12; k++) {
        CU_ASSERT(fabs(gb[k] - (wv[k] + wv[12 + k])) < 1e-5);
        CU_ASSERT(fabs(gw[k] - (wv[k] * yd[k] + wv[12 + k] * yd[12 + k])) <
                  1e-4);
    }
    free(gb);
    free(gw);
    free(yd);
    keel_tensor_free(y);
    keel_tensor_free(wx);
    keel_tensor_free(wt);
    keel_tensor_free(loss);
    keel_layer_free(ln);

    /* downscale_in_infer: training keeps values unscaled, eval * (1-p) */
    OK(keel_nn_dropout(0.5, true, &d));
    OK(keel_layer_call(d, x, &y));
    double *xd = rd(x);

    yd = rd(y);
    for (int i = 0; i < 24; i++)
        CU_ASSERT(yd[i] == 0 || fabs(yd[i] - xd[i]) < 1e-6);
    free(yd);
    keel_tensor_free(y);
    keel_layer_eval(d);
    OK(keel_layer_call(d, x, &y));
    yd = rd(y);
    for (int i = 0; i < 24; i++)
        CU_ASSERT(fabs(yd[i] - 0.5 * xd[i]) < 1e-6);
    free(yd);
    free(xd);
    keel_tensor_free(y);
    keel_tensor_free(x);
    keel_layer_free(d);
}

int main(void)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {
        {"Linear forward/backward, no bias, custom init", test_linear},
        {"initializer statistics and reproducibility", test_init_stats},
        {"Conv2D forward/backward", test_conv2d},
        {"Conv2DTranspose forward/backward", test_conv2d_transpose},
        {"LayerNorm backward, Dropout downscale_in_infer",
         test_ln_backward_downscale},
        {"pools, Flatten, activations", test_pools_acts},
        {"LeNet in a Sequential: names, forward, backward", test_lenet},
        {"LayerList registers, a C array does not", test_layer_list},
        {"Dropout: seeded, upscale, eval identity", test_dropout},
        {"BatchNorm: batch and running statistics, eval", test_batch_norm},
        {"LayerNorm, GroupNorm, Embedding padding_idx",
         test_norms_embedding},
        {"losses: values and gradients", test_losses},
        {"state dict save/load/set and mismatch", test_state_dict},
        {"keel_tensor_from_floats: float16/bfloat16 rounding",
         test_from_floats},
    };
    CU_pSuite suite;
    unsigned failed;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    suite = CU_add_suite("nn", NULL, NULL);
    for (size_t i = 0; suite && i < sizeof(tests) / sizeof(tests[0]); i++)
        CU_add_test(suite, tests[i].name, tests[i].fn);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed() +
             CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return failed ? 1 : 0;
}
