/*
 * keel bench — kernels from the op catalog, each through keel_op_run (the
 * path every framework call takes: dispatch, output allocation from the
 * caching allocator, the plugin's kernel), in strict mode so that a
 * missing kernel is reported as "no kernel" and never measured on the CPU
 * fallback.
 *
 *   elementwise/OP/DT/N          add, relu, exp, gelu; GB/s over inputs and
 *                                output (N elements, K/M = 2^10/2^20)
 *   reduce/OP/f32/{all,rows,cols}/SHAPE   sum and max; GB/s over the input
 *   matmul/DT/square/N           DT = f32, f16, bf16; GFLOP/s (2*M*N*K per
 *   matmul/DT/SHAPE/MxKxN        call); f32 also %peak (kb_peak_counter:
 *                                of the measured or declared f32 peak)
 *   host/sgemm/...               cblas_sgemm of the CPU plugin's BLAS
 *                                (bench/host_blas.h) called directly on
 *                                host memory, the same shapes as
 *                                matmul/f32: the yardstick for a CPU plugin
 *   paired/matmul_f32_vs_sgemm/...   both alternating within each
 *                                iteration: the anchor ratio keel/sgemm
 *   conv2d/f32/LAYER             ResNet-50 (batch 1) and LeNet (batch 64)
 *                                layers; GFLOP/s (2*N*O*OH*OW*C*KH*KW)
 *   softmax/f32/RxC              GB/s (read + write)
 *   layer_norm/f32/RxC           GB/s (read x + write y)
 *   cross_entropy/f32/NxC        hard int64 labels, mean reduction;
 *                                GB/s (read logits + write softmax)
 *   optimizer/OP/f32/N           sgd, momentum, adam, adamw updates in
 *                                place; GB/s over every state read and
 *                                written
 *
 * Every benchmark checks its first result against a float64 reference
 * computed here from the host copies of the inputs (all elements, or an
 * evenly spread sample for large outputs).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../host_blas.h"
#include "kb.h"

enum op_kind {
    K_ELEM,
    K_REDUCE,
    K_MATMUL,
    K_CONV,
    K_SOFTMAX,
    K_LAYER_NORM,
    K_CROSS_ENTROPY,
    K_OPTIM
};

enum { RED_ALL, RED_ROWS, RED_COLS };

struct conv_shape {
    int64_t n, c, h, w, o, kh, kw, stride, pad;
};

struct op_bench {
    struct kb_bench b;
    enum op_kind kind;
    keel_op_id op;
    keel_dtype dtype;
    int64_t m, k, n; /* elem: n; reduce/softmax/ln/ce: m x n; matmul m,k,n */
    int red;         /* reduce: RED_* */
    struct conv_shape cv;
};

#define MAX_IN 6
#define MAX_OUT 4

/* One call's operands. */
struct op_call {
    keel_tensor *in[MAX_IN];
    float *host[MAX_IN];
    int nin;
    keel_attr attrs[8];
    int nattrs;
    int64_t ints[2][2];
    int64_t *labels;
    keel_tensor *out[MAX_OUT];
    int nout;
    double bytes; /* bytes moved per call, for GB/s  */
    double flops; /* flops per call, for GFLOP/s      */
};

static void call_free(struct op_call *c)
{
    kb_free_tensors(c->in, MAX_IN);
    kb_free_tensors(c->out, MAX_OUT);
    for (int i = 0; i < MAX_IN; i++)
        free(c->host[i]);
    free(c->labels);
    memset(c, 0, sizeof(*c));
}

/* Input i: random values of the benchmark's dtype, with a host copy. */
static bool add_input(keel_bm_state *st, struct op_bench *o, struct op_call *c,
                      keel_dtype dt, int ndim, const int64_t *shape,
                      float lo, float hi)
{
    int i = c->nin;
    keel_status s = kb_tensor_random(o->b.env, dt, ndim, shape,
                                     (uint64_t)(i + 1) * 7919u, lo, hi,
                                     &c->in[i], &c->host[i]);

    if (s != KEEL_STATUS_OK)
        return kb_fail_status(st, &o->b, "input", s);
    c->nin++;
    return true;
}

/* ---- setup per kind ----------------------------------------------------- */

static bool setup(keel_bm_state *st, struct op_bench *o, struct op_call *c)
{
    int64_t es = keel_dtype_size(o->dtype);
    int64_t s1[1], s2[2];

    switch (o->kind) {
    case K_ELEM: {
        int nin = o->op == KEEL_OP_ADD ? 2 : 1;
        s1[0] = o->n;
        for (int i = 0; i < nin; i++)
            if (!add_input(st, o, c, o->dtype, 1, s1, -2, 2))
                return false;
        c->bytes = (double)(nin + 1) * (double)(o->n * es);
        if (o->op == KEEL_OP_GELU)
            c->attrs[c->nattrs++] = keel_attr_bool("approximate", false);
        return true;
    }
    case K_REDUCE: {
        bool all = o->red == RED_ALL;
        s2[0] = o->m;
        s2[1] = o->n;
        if (all) {
            s1[0] = o->m * o->n;
            if (!add_input(st, o, c, o->dtype, 1, s1, 0, 1))
                return false;
        } else if (!add_input(st, o, c, o->dtype, 2, s2, 0, 1)) {
            return false;
        }
        if (!all) {
            c->ints[0][0] = o->red == RED_ROWS ? 1 : 0;
            c->attrs[c->nattrs++] = keel_attr_ints("axis", c->ints[0], 1);
        }
        c->bytes = (double)(o->m * o->n * es) +
                   (double)((all ? 1 : o->red == RED_ROWS ? o->m : o->n) * es);
        return true;
    }
    case K_MATMUL:
        s2[0] = o->m;
        s2[1] = o->k;
        if (!add_input(st, o, c, o->dtype, 2, s2, -1, 1))
            return false;
        s2[0] = o->k;
        s2[1] = o->n;
        if (!add_input(st, o, c, o->dtype, 2, s2, -1, 1))
            return false;
        c->flops = 2.0 * (double)o->m * (double)o->n * (double)o->k;
        c->bytes = (double)((o->m * o->k + o->k * o->n + o->m * o->n) * es);
        return true;
    case K_CONV: {
        const struct conv_shape *v = &o->cv;
        int64_t xs[4] = {v->n, v->c, v->h, v->w};
        int64_t ws[4] = {v->o, v->c, v->kh, v->kw};
        int64_t bs[1] = {v->o};
        int64_t oh = (v->h + 2 * v->pad - v->kh) / v->stride + 1;
        int64_t ow = (v->w + 2 * v->pad - v->kw) / v->stride + 1;
        if (!add_input(st, o, c, o->dtype, 4, xs, -1, 1) ||
            !add_input(st, o, c, o->dtype, 4, ws, -1, 1) ||
            !add_input(st, o, c, o->dtype, 1, bs, -1, 1))
            return false;
        c->ints[0][0] = c->ints[0][1] = v->stride;
        c->ints[1][0] = c->ints[1][1] = v->pad;
        c->attrs[c->nattrs++] = keel_attr_ints("stride", c->ints[0], 2);
        c->attrs[c->nattrs++] = keel_attr_ints("padding", c->ints[1], 2);
        c->flops = 2.0 * (double)(v->n * v->o * oh * ow) *
                   (double)(v->c * v->kh * v->kw);
        return true;
    }
    case K_SOFTMAX:
        s2[0] = o->m;
        s2[1] = o->n;
        if (!add_input(st, o, c, o->dtype, 2, s2, -4, 4))
            return false;
        c->attrs[c->nattrs++] = keel_attr_int("axis", -1);
        c->bytes = 2.0 * (double)(o->m * o->n * es);
        return true;
    case K_LAYER_NORM:
        s2[0] = o->m;
        s2[1] = o->n;
        s1[0] = o->n;
        if (!add_input(st, o, c, o->dtype, 2, s2, -2, 2) ||
            !add_input(st, o, c, o->dtype, 1, s1, 0.5f, 1.5f) ||
            !add_input(st, o, c, o->dtype, 1, s1, -0.5f, 0.5f))
            return false;
        c->attrs[c->nattrs++] = keel_attr_int("begin_norm_axis", 1);
        c->bytes = 2.0 * (double)(o->m * o->n * es);
        return true;
    case K_CROSS_ENTROPY: {
        keel_status s;
        s2[0] = o->m;
        s2[1] = o->n;
        s1[0] = o->m;
        if (!add_input(st, o, c, o->dtype, 2, s2, -4, 4))
            return false;
        c->labels = malloc((size_t)o->m * sizeof(int64_t));
        if (!c->labels)
            return kb_fail(st, &o->b, KB_ERROR, "out of host memory");
        for (int64_t i = 0; i < o->m; i++)
            c->labels[i] = (i * 7 + 3) % o->n;
        s = keel_tensor_from_host(c->labels, KEEL_I64, 1, s1,
                                  o->b.env->device, &c->in[c->nin]);
        if (s != KEEL_STATUS_OK)
            return kb_fail_status(st, &o->b, "labels", s);
        c->nin++;
        c->bytes = 2.0 * (double)(o->m * o->n * es);
        return true;
    }
    case K_OPTIM: {
        int nstate = o->op == KEEL_OP_SGD_UPDATE        ? 0
                     : o->op == KEEL_OP_MOMENTUM_UPDATE ? 1
                                                        : 2;
        s1[0] = o->n;
        if (!add_input(st, o, c, o->dtype, 1, s1, -1, 1) ||
            !add_input(st, o, c, o->dtype, 1, s1, -1, 1))
            return false;
        if (nstate >= 1 && !add_input(st, o, c, o->dtype, 1, s1, -0.1f, 0.1f))
            return false;
        if (nstate == 2 && !add_input(st, o, c, o->dtype, 1, s1, 0, 0.01f))
            return false;
        c->attrs[c->nattrs++] = keel_attr_float("lr", 1e-3);
        if (o->op == KEEL_OP_MOMENTUM_UPDATE)
            c->attrs[c->nattrs++] = keel_attr_float("mu", 0.9);
        if (nstate == 2) {
            c->attrs[c->nattrs++] = keel_attr_float("beta1_pow", 0.9);
            c->attrs[c->nattrs++] = keel_attr_float("beta2_pow", 0.999);
        }
        /* read param, grad, states; write param, states */
        c->bytes = (double)((2 + nstate) + (1 + nstate)) * (double)(o->n * es);
        return true;
    }
    }
    return kb_fail(st, &o->b, KB_ERROR, "unknown benchmark kind");
}

/* ---- references --------------------------------------------------------- */

/* Indices of at most `max` elements spread evenly over [0, n). */
static int64_t *spread(int64_t n, int64_t max, int64_t *count)
{
    int64_t k = n < max ? n : max;
    int64_t *idx = malloc((size_t)(k > 0 ? k : 1) * sizeof(int64_t));

    if (!idx)
        return NULL;
    for (int64_t i = 0; i < k; i++)
        idx[i] = k == n ? i : (int64_t)((double)i * (double)(n - 1) / (k - 1));
    *count = k;
    return idx;
}

static double gelu_ref(double x)
{
    return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
}

/* Fill ref[k] for element idx[k] of output 0 (and friends). */
static void reference(const struct op_bench *o, const struct op_call *c,
                      const int64_t *idx, int64_t cnt, double *ref)
{
    for (int64_t k = 0; k < cnt; k++) {
        int64_t i = idx[k];
        double r = 0;

        switch (o->kind) {
        case K_ELEM: {
            double x = c->host[0][i];
            if (o->op == KEEL_OP_ADD)
                r = x + c->host[1][i];
            else if (o->op == KEEL_OP_RELU)
                r = x > 0 ? x : 0;
            else if (o->op == KEEL_OP_EXP)
                r = exp(x);
            else
                r = gelu_ref(x);
            break;
        }
        case K_REDUCE: {
            const float *x = c->host[0];
            int64_t len = o->red == RED_ALL    ? o->m * o->n
                          : o->red == RED_ROWS ? o->n
                                               : o->m;
            int64_t base = o->red == RED_ROWS ? i * o->n
                           : o->red == RED_COLS ? i
                                                : 0;
            int64_t step = o->red == RED_COLS ? o->n : 1;
            bool is_max = o->op == KEEL_OP_MAX;
            r = is_max ? -INFINITY : 0;
            for (int64_t j = 0; j < len; j++) {
                double v = x[base + j * step];
                r = is_max ? (v > r ? v : r) : r + v;
            }
            break;
        }
        case K_MATMUL: {
            int64_t row = i / o->n, col = i % o->n;
            for (int64_t j = 0; j < o->k; j++)
                r += (double)c->host[0][row * o->k + j] *
                     (double)c->host[1][j * o->n + col];
            break;
        }
        case K_CONV: {
            const struct conv_shape *v = &o->cv;
            int64_t oh = (v->h + 2 * v->pad - v->kh) / v->stride + 1;
            int64_t ow = (v->w + 2 * v->pad - v->kw) / v->stride + 1;
            int64_t x_ = i % ow, y_ = (i / ow) % oh;
            int64_t oc = (i / (ow * oh)) % v->o, n = i / (ow * oh * v->o);
            r = c->host[2][oc];
            for (int64_t ci = 0; ci < v->c; ci++)
                for (int64_t a = 0; a < v->kh; a++)
                    for (int64_t b = 0; b < v->kw; b++) {
                        int64_t yy = y_ * v->stride - v->pad + a;
                        int64_t xx = x_ * v->stride - v->pad + b;
                        if (yy < 0 || yy >= v->h || xx < 0 || xx >= v->w)
                            continue;
                        r += (double)c->host[0][((n * v->c + ci) * v->h +
                                                 yy) * v->w + xx] *
                             (double)c->host[1][((oc * v->c + ci) * v->kh +
                                                 a) * v->kw + b];
                    }
            break;
        }
        case K_SOFTMAX: {
            const float *x = c->host[0] + (i / o->n) * o->n;
            double m = -INFINITY, s = 0;
            for (int64_t j = 0; j < o->n; j++)
                m = x[j] > m ? x[j] : m;
            for (int64_t j = 0; j < o->n; j++)
                s += exp(x[j] - m);
            r = exp(x[i % o->n] - m) / s;
            break;
        }
        case K_LAYER_NORM: {
            const float *x = c->host[0] + (i / o->n) * o->n;
            double mean = 0, var = 0;
            int64_t j = i % o->n;
            for (int64_t t = 0; t < o->n; t++)
                mean += x[t];
            mean /= (double)o->n;
            for (int64_t t = 0; t < o->n; t++)
                var += (x[t] - mean) * (x[t] - mean);
            var /= (double)o->n;
            r = (x[j] - mean) / sqrt(var + 1e-5) * c->host[1][j] +
                c->host[2][j];
            break;
        }
        default:
            break;
        }
        ref[k] = r;
    }
}

static double ce_reference(const struct op_bench *o, const struct op_call *c)
{
    double total = 0;

    for (int64_t i = 0; i < o->m; i++) {
        const float *x = c->host[0] + i * o->n;
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < o->n; j++)
            m = x[j] > m ? x[j] : m;
        for (int64_t j = 0; j < o->n; j++)
            s += exp(x[j] - m);
        total += m + log(s) - x[c->labels[i]];
    }
    return total / (double)o->m;
}

/* One step of the update on the host copies (double precision). */
static double optim_reference(const struct op_bench *o, const struct op_call *c,
                              int64_t i)
{
    const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    double p = c->host[0][i], g = c->host[1][i];

    switch (o->op) {
    case KEEL_OP_SGD_UPDATE:
        return p - lr * g;
    case KEEL_OP_MOMENTUM_UPDATE:
        return p - lr * (0.9 * c->host[2][i] + g);
    case KEEL_OP_ADAMW_UPDATE:
        p -= lr * 0.01 * p;
        /* fall through */
    default: {
        double m = b1 * c->host[2][i] + (1 - b1) * g;
        double v = b2 * c->host[3][i] + (1 - b2) * g * g;
        double lr_t = lr * sqrt(1 - b2) / (1 - b1);
        return p - lr_t * m / (sqrt(v) + eps * sqrt(1 - b2));
    }
    }
}

/* Compare the first result with the reference. The host copies still hold
 * the inputs as they were before the call (updates are in place on the
 * device only). */
static bool check(keel_bm_state *st, struct op_bench *o, struct op_call *c)
{
    keel_tensor *res = o->kind == K_OPTIM ? c->in[0] : c->out[0];
    float *got = NULL;
    double *ref = NULL, rtol, atol, scale = 1;
    int64_t n, cnt = 0, *idx = NULL;
    keel_status s;
    bool ok = false;

    if (!res)
        return kb_fail(st, &o->b, KB_ERROR, "the op returned no output");
    s = kb_tensor_read(res, &got);
    if (s != KEEL_STATUS_OK)
        return kb_fail_status(st, &o->b, "read result", s);
    n = keel_tensor_numel(res);
    kb_tolerance(o->dtype, 1, &rtol, &atol);
    if (o->kind == K_CROSS_ENTROPY) {
        double r = ce_reference(o, c);
        ok = kb_check(st, &o->b, "loss", got, &r, NULL, 1, 1e-4, 1e-5);
        goto out;
    }
    switch (o->kind) {
    case K_MATMUL:
        scale = sqrt((double)o->k);
        atol *= 10 * scale;
        rtol *= 10;
        break;
    case K_CONV:
        atol *= 10 * sqrt((double)(o->cv.c * o->cv.kh * o->cv.kw));
        rtol *= 10;
        break;
    case K_REDUCE:
        if (o->op != KEEL_OP_MAX) {
            scale = sqrt((double)(o->m * o->n) / (double)(n ? n : 1));
            rtol *= scale;
            atol *= scale;
        }
        break;
    case K_ELEM:
        if (o->op == KEEL_OP_EXP || o->op == KEEL_OP_GELU)
            rtol *= 5;
        break;
    case K_LAYER_NORM:
    case K_SOFTMAX:
        rtol *= 10;
        atol *= 10;
        break;
    default:
        break;
    }
    /* Rows of softmax / layer_norm are checked whole: 16 rows spread. */
    if (o->kind == K_SOFTMAX || o->kind == K_LAYER_NORM) {
        int64_t rows, *r = spread(o->m, 16, &rows);
        idx = malloc((size_t)(rows * o->n) * sizeof(int64_t) + 1);
        if (r && idx)
            for (int64_t a = 0; a < rows; a++)
                for (int64_t j = 0; j < o->n; j++)
                    idx[cnt++] = r[a] * o->n + j;
        free(r);
    } else {
        int64_t max = o->kind == K_MATMUL || o->kind == K_CONV ? 256 : 65536;
        idx = spread(n, max, &cnt);
    }
    ref = malloc((size_t)(cnt > 0 ? cnt : 1) * sizeof(double));
    if (!idx || !ref) {
        kb_fail(st, &o->b, KB_ERROR, "out of host memory");
        goto out;
    }
    if (o->kind == K_OPTIM)
        for (int64_t k = 0; k < cnt; k++)
            ref[k] = optim_reference(o, c, idx[k]);
    else
        reference(o, c, idx, cnt, ref);
    ok = kb_check(st, &o->b, keel_op_get_info(o->op)->name, got, ref, idx,
                  cnt, rtol, atol);
out:
    free(got);
    free(ref);
    free(idx);
    return ok;
}

/* ---- the benchmark ------------------------------------------------------ */

static keel_status run_once(struct op_bench *o, struct op_call *c)
{
    kb_free_tensors(c->out, MAX_OUT);
    c->nout = 0;
    return keel_op_run(o->op, c->in, c->nin, c->attrs, c->nattrs, c->out,
                       MAX_OUT, &c->nout);
}

static void bm_op(keel_bm_state *st, void *ctx)
{
    struct op_bench *o = ctx;
    const struct kb_env *env = o->b.env;
    const char *opname = keel_op_get_info(o->op)->name;
    struct op_call c;
    struct kb_timer t;
    keel_status s;
    double secs, total, iters;

    memset(&c, 0, sizeof(c));
    if (!kb_need_kernels(st, &o->b, 1, &o->op, &o->dtype))
        return;
    if (kb_timer_init(&t, env) != KEEL_STATUS_OK) {
        kb_fail_status(st, &o->b, "event create", keel_last_status());
        return;
    }
    if (!setup(st, o, &c))
        goto out;
    /* Warm up, and check the first result once. */
    s = run_once(o, &c);
    if (s == KEEL_STATUS_OK)
        s = keel_stream_synchronize(env->place, NULL);
    if (s != KEEL_STATUS_OK) {
        kb_fail_status(st, &o->b, opname, s);
        goto out;
    }
    if (!o->b.checked) {
        if (!check(st, o, &c))
            goto out;
        o->b.checked = true;
    }
    while (keel_bm_keep_running(st)) {
        kb_free_tensors(c.out, MAX_OUT);
        s = kb_timer_start(&t);
        if (s == KEEL_STATUS_OK)
            s = run_once(o, &c);
        if (s == KEEL_STATUS_OK)
            s = kb_timer_stop(&t, &secs);
        if (s != KEEL_STATUS_OK) {
            kb_fail_status(st, &o->b, opname, s);
            goto out;
        }
        keel_bm_set_iteration_time(st, secs);
    }
    total = keel_bm_manual_time(st);
    iters = (double)keel_bm_iterations(st);
    if (c.flops > 0) {
        double gflops = c.flops * iters / total / 1e9;
        keel_bm_set_counter(st, "GFLOP/s", gflops, KEEL_BM_COUNTER_PLAIN);
        /* The peak is an f32 figure: f16/bf16 matmuls have their own. */
        if (o->dtype == KEEL_F32)
            kb_peak_counter(st, &o->b, gflops);
    } else {
        keel_bm_set_counter(st, "GB/s", c.bytes * iters / total / 1e9,
                            KEEL_BM_COUNTER_PLAIN);
        keel_bm_set_bytes_processed(st, (int64_t)(c.bytes * iters));
    }
out:
    call_free(&c);
    kb_timer_destroy(&t);
}

/* ---- OpenBLAS directly (host yardstick) --------------------------------- */

struct sgemm_bench {
    struct kb_bench b;
    int m, k, n;
};

static void bm_sgemm(keel_bm_state *st, void *ctx)
{
    struct sgemm_bench *g = ctx;
    size_t ma = (size_t)g->m * (size_t)g->k, mb = (size_t)g->k * (size_t)g->n;
    size_t mc = (size_t)g->m * (size_t)g->n;
    float *a = malloc(ma * sizeof(float)), *b = malloc(mb * sizeof(float));
    float *c = malloc(mc * sizeof(float));
    double flops = 2.0 * g->m * (double)g->n * g->k, gflops;
    host_sgemm_fn *sgemm;
    const char *why;

    if (!a || !b || !c) {
        kb_fail(st, &g->b, KB_ERROR, "out of host memory");
        goto out;
    }
    if (!(sgemm = host_sgemm(&why))) {
        kb_fail(st, &g->b, KB_ERROR, "%s", why);
        goto out;
    }
    kb_fill_uniform(a, ma, 1, -1, 1);
    kb_fill_uniform(b, mb, 2, -1, 1);
    sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->m, g->n, g->k,
                1.0f, a, g->k, b, g->n, 0.0f, c, g->n);
    if (!g->b.checked) {
        int64_t cnt = 0, *idx = spread((int64_t)mc, 64, &cnt);
        double ref[64];
        bool ok;
        if (!idx) {
            kb_fail(st, &g->b, KB_ERROR, "out of host memory");
            goto out;
        }
        for (int64_t q = 0; q < cnt; q++) {
            int64_t row = idx[q] / g->n, col = idx[q] % g->n;
            ref[q] = 0;
            for (int j = 0; j < g->k; j++)
                ref[q] += (double)a[row * g->k + j] * b[(size_t)j * g->n + col];
        }
        ok = kb_check(st, &g->b, "sgemm", c, ref, idx, cnt, 2e-4,
                      1e-4 * sqrt((double)g->k));
        free(idx);
        if (!ok)
            goto out;
        g->b.checked = true;
    }
    while (keel_bm_keep_running(st)) {
        double t0 = kb_now();
        sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->m, g->n, g->k,
              1.0f, a, g->k, b, g->n, 0.0f, c, g->n);
        keel_bm_set_iteration_time(st, kb_now() - t0);
    }
    gflops = flops * (double)keel_bm_iterations(st) /
             keel_bm_manual_time(st) / 1e9;
    /* The host's BLAS is not the device: no %peak. */
    keel_bm_set_counter(st, "GFLOP/s", gflops, KEEL_BM_COUNTER_PLAIN);
out:
    free(a);
    free(b);
    free(c);
}

/* ---- keel matmul and OpenBLAS, iteration by iteration ------------------- */

/*
 * paired/matmul_f32_vs_sgemm/SHAPE: each iteration runs keel's f32 matmul
 * and cblas_sgemm on the same host values in the order keel, sgemm, sgemm,
 * keel, and times each. The reported time (the mean of the two keel runs)
 * and GFLOP/s are keel's; sgemm_GFLOP/s and keel/sgemm (the ratio of the
 * two throughputs) come from the same iterations, so load that comes and
 * goes on a shared machine hits both alike.
 */
static void bm_pair_mm(keel_bm_state *st, void *ctx)
{
    struct sgemm_bench *g = ctx;
    const struct kb_env *env = g->b.env;
    size_t ma = (size_t)g->m * (size_t)g->k, mb = (size_t)g->k * (size_t)g->n;
    size_t mc = (size_t)g->m * (size_t)g->n;
    int64_t xs[2] = {g->m, g->k}, ys[2] = {g->k, g->n};
    float *a = malloc(ma * sizeof(float)), *b = malloc(mb * sizeof(float));
    float *c = malloc(mc * sizeof(float)), *got = NULL;
    double flops = 2.0 * g->m * (double)g->n * g->k, tk = 0, tb = 0;
    host_sgemm_fn *sgemm;
    const char *why;
    keel_tensor *x = NULL, *y = NULL, *z = NULL;
    keel_op_id op = KEEL_OP_MATMUL;
    keel_dtype dt = KEEL_F32;
    struct kb_timer t;
    keel_status s;

    if (kb_timer_init(&t, env) != KEEL_STATUS_OK) {
        kb_fail_status(st, &g->b, "event create", keel_last_status());
        goto out;
    }
    if (!a || !b || !c) {
        kb_fail(st, &g->b, KB_ERROR, "out of host memory");
        goto out;
    }
    if (!kb_need_kernels(st, &g->b, 1, &op, &dt))
        goto out;
    if (!(sgemm = host_sgemm(&why))) {
        kb_fail(st, &g->b, KB_ERROR, "%s", why);
        goto out;
    }
    kb_fill_uniform(a, ma, 1, -1, 1);
    kb_fill_uniform(b, mb, 2, -1, 1);
    s = kb_tensor_from_floats(env, a, KEEL_F32, 2, xs, &x);
    if (s == KEEL_STATUS_OK)
        s = kb_tensor_from_floats(env, b, KEEL_F32, 2, ys, &y);
    if (s == KEEL_STATUS_OK)
        s = keel_matmul(x, y, false, false, &z);
    if (s == KEEL_STATUS_OK)
        s = kb_tensor_read(z, &got);
    if (s != KEEL_STATUS_OK) {
        kb_fail_status(st, &g->b, "matmul", s);
        goto out;
    }
    sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->m, g->n, g->k, 1.0f,
          a, g->k, b, g->n, 0.0f, c, g->n);
    if (!g->b.checked) {
        int64_t cnt = 0, *idx = spread((int64_t)mc, 256, &cnt);
        double *ref = malloc(256 * sizeof(double));
        bool ok = idx && ref;
        for (int64_t q = 0; ok && q < cnt; q++)
            ref[q] = c[idx[q]];
        /* Both are float32 GEMMs of the same values: close agreement. */
        if (!ok)
            kb_fail(st, &g->b, KB_ERROR, "out of host memory");
        else
            ok = kb_check(st, &g->b, "keel matmul vs sgemm", got, ref, idx,
                          cnt, 1e-4, 1e-5 * sqrt((double)g->k));
        free(idx);
        free(ref);
        if (!ok)
            goto out;
        g->b.checked = true;
    }
    while (keel_bm_keep_running(st)) {
        double secs = 0, iter = 0, t0;
        /* keel, sgemm, sgemm, keel: drift within the iteration cancels. */
        for (int q = 0; q < 4; q++) {
            if (q == 0 || q == 3) {
                keel_tensor_free(z);
                z = NULL;
                s = kb_timer_start(&t);
                if (s == KEEL_STATUS_OK)
                    s = keel_matmul(x, y, false, false, &z);
                if (s == KEEL_STATUS_OK)
                    s = kb_timer_stop(&t, &secs);
                if (s != KEEL_STATUS_OK) {
                    kb_fail_status(st, &g->b, "matmul", s);
                    goto out;
                }
                tk += secs;
                iter += secs / 2;
            } else {
                t0 = kb_now();
                sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->m, g->n,
                      g->k, 1.0f, a, g->k, b, g->n, 0.0f, c, g->n);
                tb += kb_now() - t0;
            }
        }
        keel_bm_set_iteration_time(st, iter);
    }
    {
        double iters = 2.0 * (double)keel_bm_iterations(st);
        double gk = flops * iters / tk / 1e9, gb = flops * iters / tb / 1e9;
        keel_bm_set_counter(st, "GFLOP/s", gk, KEEL_BM_COUNTER_PLAIN);
        keel_bm_set_counter(st, "sgemm_GFLOP/s", gb, KEEL_BM_COUNTER_PLAIN);
        keel_bm_set_counter(st, "keel/sgemm", gk / gb, KEEL_BM_COUNTER_PLAIN);
        kb_peak_counter(st, &g->b, gk);
    }
out:
    keel_tensor_free(x);
    keel_tensor_free(y);
    keel_tensor_free(z);
    free(got);
    free(a);
    free(b);
    free(c);
    kb_timer_destroy(&t);
}

/* ---- the peak ----------------------------------------------------------- */

/* Time one f32 n x n matmul; the result is freed. */
static keel_status time_matmul(struct kb_timer *t, keel_tensor *x,
                               keel_tensor *y, double *secs)
{
    keel_tensor *z = NULL;
    keel_status s = kb_timer_start(t);

    if (s == KEEL_STATUS_OK)
        s = keel_matmul(x, y, false, false, &z);
    if (s == KEEL_STATUS_OK)
        s = kb_timer_stop(t, secs);
    keel_tensor_free(z);
    return s;
}

double kb_measure_peak(const struct kb_env *env, char *how, size_t how_size)
{
    int64_t n = env->smoke ? 128 : 512, first = n, best_n = 0;
    double best = 0, secs = 0;
    struct kb_timer t;
    keel_status s;

    snprintf(how, how_size, "unavailable");
    if (kb_timer_init(&t, env) != KEEL_STATUS_OK)
        return 0;
    for (;;) {
        int64_t shape[2] = {n, n};
        double flop = 2.0 * (double)n * (double)n * (double)n;
        keel_tensor *x = NULL, *y = NULL;
        bool grow;

        /* Host-filled inputs, uploaded: only the matmul kernel runs. */
        s = kb_tensor_random(env, KEEL_F32, 2, shape, 11, -1, 1, &x, NULL);
        if (s == KEEL_STATUS_OK)
            s = kb_tensor_random(env, KEEL_F32, 2, shape, 13, -1, 1, &y, NULL);
        /* A warm-up run, then one to see whether the size is big enough
         * to be a peak (>= 100 ms); every timed run counts. */
        if (s == KEEL_STATUS_OK)
            s = time_matmul(&t, x, y, &secs);
        if (s == KEEL_STATUS_OK)
            s = time_matmul(&t, x, y, &secs);
        grow = s == KEEL_STATUS_OK && !env->smoke && secs < 0.1 &&
               n < 16384;
        for (int r = 0; s == KEEL_STATUS_OK && r < (grow ? 3 : 5); r++) {
            if (r > 0)
                s = time_matmul(&t, x, y, &secs);
            if (s == KEEL_STATUS_OK && secs > 0 && flop / secs / 1e9 > best) {
                best = flop / secs / 1e9;
                best_n = n;
            }
        }
        keel_tensor_free(x);
        keel_tensor_free(y);
        if (s != KEEL_STATUS_OK) {
            snprintf(how, how_size, "unavailable: f32 matmul %lldx%lld: %s",
                     (long long)n, (long long)n, keel_last_error());
            best = 0;
            break;
        }
        if (!grow) {
            snprintf(how, how_size,
                     "measured: best f32 square matmul through the plugin "
                     "over sizes %lld to %lld (best at %lld), host-filled "
                     "inputs; %%peak <= 100, raised by any faster benchmark",
                     (long long)first, (long long)n, (long long)best_n);
            break;
        }
        n *= 2;
    }
    kb_timer_destroy(&t);
    return best;
}

/*
 * The run's %peak state. Benchmarks run one at a time on one thread.
 * Google Benchmark calls a benchmark several times while it settles the
 * iteration count and reports only the last call, so a figure raises the
 * measured peak only once its benchmark is over (the next benchmark's
 * first call, or the end of the run): short, noisy settling runs never
 * move the denominator.
 */
static struct {
    double peak;                 /* the committed denominator          */
    double start;                /* what the run started from          */
    bool declared;               /* --peak                             */
    const struct kb_bench *last; /* the benchmark of the pending figure */
    double pending;              /* its latest figure                  */
    int raised;                  /* benchmarks that raised the peak    */
    int exceeded;                /* benchmarks above a declared peak   */
} peak_run;

void kb_peak_begin(const struct kb_env *env)
{
    memset(&peak_run, 0, sizeof(peak_run));
    peak_run.peak = env->peak_gflops > 0 ? env->peak_gflops : 0;
    peak_run.start = peak_run.peak;
    peak_run.declared = env->peak_declared;
}

static void peak_commit(void)
{
    if (!peak_run.declared && peak_run.pending > peak_run.peak) {
        peak_run.peak = peak_run.pending;
        peak_run.raised++;
    } else if (peak_run.declared && peak_run.pending > peak_run.peak) {
        peak_run.exceeded++;
    }
    peak_run.pending = 0;
    peak_run.last = NULL;
}

void kb_peak_counter(keel_bm_state *st, const struct kb_bench *b,
                     double gflops)
{
    char label[96];
    double denom;

    if (!(peak_run.peak > 0) || !(gflops > 0))
        return;
    if (peak_run.last != b)
        peak_commit();
    peak_run.last = b;
    peak_run.pending = gflops;
    denom = peak_run.peak;
    if (gflops > denom && !peak_run.declared) {
        /* This row is the new peak: 100%, and the peak from now on. */
        denom = gflops;
        keel_bm_set_label(st, "new peak");
    } else if (gflops > denom) {
        snprintf(label, sizeof(label), "above the declared peak (%.1f)",
                 denom);
        keel_bm_set_label(st, label);
    }
    keel_bm_set_counter(st, "%peak", 100.0 * gflops / denom,
                        KEEL_BM_COUNTER_PLAIN);
}

void kb_peak_end(FILE *f)
{
    peak_commit();
    if (!(peak_run.peak > 0))
        return;
    if (peak_run.declared && !peak_run.exceeded)
        fprintf(f, "keel bench: %%peak against the declared %.2f GFLOP/s\n",
                peak_run.peak);
    else if (peak_run.declared)
        fprintf(f, "keel bench: %%peak against the declared %.2f GFLOP/s; "
                   "%d benchmark%s exceeded it (labelled): the declared "
                   "peak is too low\n",
                peak_run.peak, peak_run.exceeded,
                peak_run.exceeded == 1 ? "" : "s");
    else if (!peak_run.raised)
        fprintf(f, "keel bench: %%peak against the measured f32 matmul "
                   "peak, %.2f GFLOP/s (the probe's)\n",
                peak_run.peak);
    else
        fprintf(f, "keel bench: %%peak against the measured f32 matmul "
                   "peak: %.2f GFLOP/s from the probe, raised to %.2f by %d "
                   "benchmark%s (labelled 'new peak'; earlier rows are "
                   "relative to the lower figure)\n",
                peak_run.start, peak_run.peak, peak_run.raised,
                peak_run.raised == 1 ? "" : "s");
}

/* ---- registration ------------------------------------------------------- */

static struct op_bench *add_op(const struct kb_env *env, const char *name,
                               enum op_kind kind, keel_op_id op,
                               keel_dtype dtype, keel_bm_unit unit)
{
    struct op_bench *o = kb_register(env, name, sizeof(*o), bm_op,
                                     KEEL_BM_TIME_MANUAL, unit);

    if (o) {
        o->kind = kind;
        o->op = op;
        o->dtype = dtype;
    }
    return o;
}

/* 4096 -> "4K", 1048576 -> "1M", others as they are. */
static void format_count(int64_t n, char *buf, size_t size)
{
    if (n >= (1 << 20) && n % (1 << 20) == 0)
        snprintf(buf, size, "%lldM", (long long)(n >> 20));
    else if (n >= 1024 && n % 1024 == 0)
        snprintf(buf, size, "%lldK", (long long)(n >> 10));
    else
        snprintf(buf, size, "%lld", (long long)n);
}

static void register_elementwise(const struct kb_env *env)
{
    static const struct {
        keel_op_id op;
        keel_dtype dt;
    } list[] = {
        {KEEL_OP_ADD, KEEL_F32},  {KEEL_OP_ADD, KEEL_F16},
        {KEEL_OP_ADD, KEEL_BF16}, {KEEL_OP_RELU, KEEL_F32},
        {KEEL_OP_EXP, KEEL_F32},  {KEEL_OP_GELU, KEEL_F32},
    };
    const int64_t full[] = {1 << 20, 1 << 24}, smoke[] = {4096};
    const int64_t *sizes = env->smoke ? smoke : full;
    int nsizes = env->smoke ? 1 : 2;

    for (size_t i = 0; i < sizeof(list) / sizeof(list[0]); i++)
        for (int j = 0; j < nsizes; j++) {
            char name[128], cnt[32];
            struct op_bench *o;
            format_count(sizes[j], cnt, sizeof(cnt));
            snprintf(name, sizeof(name), "elementwise/%s/%s/%s",
                     keel_op_get_info(list[i].op)->name,
                     kb_dtype_short(list[i].dt), cnt);
            o = add_op(env, name, K_ELEM, list[i].op, list[i].dt,
                       KEEL_BM_UNIT_US);
            if (o)
                o->n = sizes[j];
        }
    /* --large: float32 add over 256 MiB operands (64M elements), the
     * bandwidth-bound point to set beside the device's copy bandwidth. */
    if (env->large && !env->smoke) {
        struct op_bench *o = add_op(env, "elementwise/add/f32/64M", K_ELEM,
                                    KEEL_OP_ADD, KEEL_F32, KEEL_BM_UNIT_US);
        if (o)
            o->n = (int64_t)1 << 26;
    }
}

static void register_reduce(const struct kb_env *env)
{
    static const struct {
        keel_op_id op;
        int red;
        const char *tag;
    } list[] = {
        {KEEL_OP_SUM, RED_ALL, "all"},
        {KEEL_OP_SUM, RED_ROWS, "rows"},
        {KEEL_OP_SUM, RED_COLS, "cols"},
        {KEEL_OP_MAX, RED_ROWS, "rows"},
    };
    int64_t side = env->smoke ? 64 : 4096;

    for (size_t i = 0; i < sizeof(list) / sizeof(list[0]); i++) {
        char name[128];
        struct op_bench *o;
        if (list[i].red == RED_ALL) {
            char cnt[32];
            format_count(side * side, cnt, sizeof(cnt));
            snprintf(name, sizeof(name), "reduce/%s/f32/all/%s",
                     keel_op_get_info(list[i].op)->name, cnt);
        } else {
            snprintf(name, sizeof(name), "reduce/%s/f32/%s/%lldx%lld",
                     keel_op_get_info(list[i].op)->name, list[i].tag,
                     (long long)side, (long long)side);
        }
        o = add_op(env, name, K_REDUCE, list[i].op, KEEL_F32, KEEL_BM_UNIT_US);
        if (o) {
            o->m = o->n = side;
            o->red = list[i].red;
        }
    }
}

struct mm_shape {
    const char *tag;
    int m, k, n;
};

static void add_sgemm(const struct kb_env *env, const struct mm_shape *sh)
{
    char name[128];
    struct sgemm_bench *g;

    if (!strcmp(sh->tag, "square"))
        snprintf(name, sizeof(name), "host/sgemm/square/%d", sh->m);
    else
        snprintf(name, sizeof(name), "host/sgemm/%s/%dx%dx%d", sh->tag, sh->m,
                 sh->k, sh->n);
    g = kb_register(env, name, sizeof(*g), bm_sgemm, KEEL_BM_TIME_MANUAL,
                    KEEL_BM_UNIT_US);
    if (g) {
        g->m = sh->m;
        g->k = sh->k;
        g->n = sh->n;
    }
}

static void register_matmul(const struct kb_env *env)
{
    /* Square, and BERT-base at 512 tokens: QKV projection, FFN up, FFN
     * down, attention scores per head (seq x head_dim x seq). */
    static const struct mm_shape full[] = {
        {"square", 256, 256, 256},      {"square", 512, 512, 512},
        {"square", 1024, 1024, 1024},   {"square", 2048, 2048, 2048},
        {"bert_qkv", 512, 768, 2304},   {"bert_ffn_up", 512, 768, 3072},
        {"bert_ffn_down", 512, 3072, 768}, {"bert_scores", 512, 64, 512},
    };
    static const struct mm_shape smoke[] = {
        {"square", 64, 64, 64},
        {"bert_qkv", 16, 48, 144},
    };
    static const keel_dtype dts[] = {KEEL_F32, KEEL_F16, KEEL_BF16};
    const struct mm_shape *sh = env->smoke ? smoke : full;
    int nsh = env->smoke ? 2 : 8;

    for (int d = 0; d < 3; d++)
        for (int i = 0; i < nsh; i++) {
            char name[128];
            struct op_bench *o;
            /* Reduced precision: skip the smallest and the largest square
             * (the CPU computes them through float32 anyway). */
            if (d > 0 && !env->smoke && !strcmp(sh[i].tag, "square") &&
                (sh[i].m == 256 || sh[i].m == 2048))
                continue;
            if (!strcmp(sh[i].tag, "square"))
                snprintf(name, sizeof(name), "matmul/%s/square/%d",
                         kb_dtype_short(dts[d]), sh[i].m);
            else
                snprintf(name, sizeof(name), "matmul/%s/%s/%dx%dx%d",
                         kb_dtype_short(dts[d]), sh[i].tag, sh[i].m, sh[i].k,
                         sh[i].n);
            o = add_op(env, name, K_MATMUL, KEEL_OP_MATMUL, dts[d],
                       KEEL_BM_UNIT_US);
            if (o) {
                o->m = sh[i].m;
                o->k = sh[i].k;
                o->n = sh[i].n;
            }
            /* The yardstick right after its keel twin, so that both see
             * the same machine load. */
            if (dts[d] == KEEL_F32)
                add_sgemm(env, &sh[i]);
        }
    /* --large: the accelerator sizes, float32 and bfloat16. */
    if (env->large && !env->smoke)
        for (int d = 0; d < 3; d += 2)
            for (int e = 4096; e <= 8192; e *= 2) {
                char name[128];
                struct op_bench *o;
                snprintf(name, sizeof(name), "matmul/%s/square/%d",
                         kb_dtype_short(dts[d]), e);
                o = add_op(env, name, K_MATMUL, KEEL_OP_MATMUL, dts[d],
                           KEEL_BM_UNIT_MS);
                if (o)
                    o->m = o->k = o->n = e;
            }
    /* The anchor shapes, keel and OpenBLAS interleaved. */
    for (int i = 0; i < nsh; i++) {
        char name[128];
        struct sgemm_bench *g;
        if (!env->smoke && sh[i].m != 1024 && sh[i].m != 2048 &&
            strcmp(sh[i].tag, "bert_qkv"))
            continue;
        if (!strcmp(sh[i].tag, "square"))
            snprintf(name, sizeof(name),
                     "paired/matmul_f32_vs_sgemm/square/%d", sh[i].m);
        else
            snprintf(name, sizeof(name),
                     "paired/matmul_f32_vs_sgemm/%s/%dx%dx%d", sh[i].tag,
                     sh[i].m, sh[i].k, sh[i].n);
        g = kb_register(env, name, sizeof(*g), bm_pair_mm,
                        KEEL_BM_TIME_MANUAL, KEEL_BM_UNIT_US);
        if (g) {
            g->m = sh[i].m;
            g->k = sh[i].k;
            g->n = sh[i].n;
        }
    }
}

static void register_conv(const struct kb_env *env)
{
    static const struct {
        const char *tag;
        struct conv_shape s;
    } full[] = {
        {"resnet50_conv1/n1", {1, 3, 224, 224, 64, 7, 7, 2, 3}},
        {"resnet50_res2_1x1/n1", {1, 256, 56, 56, 64, 1, 1, 1, 0}},
        {"resnet50_res2_3x3/n1", {1, 64, 56, 56, 64, 3, 3, 1, 1}},
        {"resnet50_res3_3x3/n1", {1, 128, 28, 28, 128, 3, 3, 1, 1}},
        {"resnet50_res4_3x3/n1", {1, 256, 14, 14, 256, 3, 3, 1, 1}},
        {"resnet50_res5_3x3/n1", {1, 512, 7, 7, 512, 3, 3, 1, 1}},
        {"lenet_conv1/n64", {64, 1, 28, 28, 6, 5, 5, 1, 2}},
        {"lenet_conv2/n64", {64, 6, 14, 14, 16, 5, 5, 1, 0}},
    }, smoke[] = {
        {"resnet50_conv1/n1_16x16", {1, 3, 16, 16, 8, 7, 7, 2, 3}},
        {"lenet_conv2/n2", {2, 6, 14, 14, 16, 5, 5, 1, 0}},
    };
    int n = env->smoke ? 2 : 8;

    for (int i = 0; i < n; i++) {
        char name[128];
        struct op_bench *o;
        snprintf(name, sizeof(name), "conv2d/f32/%s",
                 env->smoke ? smoke[i].tag : full[i].tag);
        o = add_op(env, name, K_CONV, KEEL_OP_CONV2D, KEEL_F32,
                   KEEL_BM_UNIT_US);
        if (o)
            o->cv = env->smoke ? smoke[i].s : full[i].s;
    }
}

static void register_nn(const struct kb_env *env)
{
    static const struct {
        const char *prefix;
        enum op_kind kind;
        keel_op_id op;
        int64_t m, n, sm, sn;
    } list[] = {
        {"softmax/f32", K_SOFTMAX, KEEL_OP_SOFTMAX, 4096, 1024, 16, 64},
        {"layer_norm/f32", K_LAYER_NORM, KEEL_OP_LAYER_NORM, 4096, 768, 16,
         64},
        {"cross_entropy/f32", K_CROSS_ENTROPY, KEEL_OP_CROSS_ENTROPY, 256,
         1000, 8, 10},
        {"cross_entropy/f32", K_CROSS_ENTROPY, KEEL_OP_CROSS_ENTROPY, 512,
         32000, 0, 0},
    };

    for (size_t i = 0; i < sizeof(list) / sizeof(list[0]); i++) {
        int64_t m = env->smoke ? list[i].sm : list[i].m;
        int64_t n = env->smoke ? list[i].sn : list[i].n;
        char name[128];
        struct op_bench *o;
        if (m == 0)
            continue;
        snprintf(name, sizeof(name), "%s/%lldx%lld", list[i].prefix,
                 (long long)m, (long long)n);
        o = add_op(env, name, list[i].kind, list[i].op, KEEL_F32,
                   KEEL_BM_UNIT_US);
        if (o) {
            o->m = m;
            o->n = n;
        }
    }
}

static void register_optim(const struct kb_env *env)
{
    static const keel_op_id ops[] = {KEEL_OP_SGD_UPDATE,
                                     KEEL_OP_MOMENTUM_UPDATE,
                                     KEEL_OP_ADAM_UPDATE,
                                     KEEL_OP_ADAMW_UPDATE};
    int64_t n = env->smoke ? 4096 : 1 << 22;

    for (int i = 0; i < 4; i++) {
        char name[128], cnt[32];
        struct op_bench *o;
        format_count(n, cnt, sizeof(cnt));
        snprintf(name, sizeof(name), "optimizer/%s/f32/%s",
                 keel_op_get_info(ops[i])->name, cnt);
        o = add_op(env, name, K_OPTIM, ops[i], KEEL_F32, KEEL_BM_UNIT_US);
        if (o)
            o->n = n;
    }
}

void kb_register_kernels(const struct kb_env *env)
{
    register_elementwise(env);
    register_reduce(env);
    register_matmul(env);
    register_conv(env);
    register_nn(env);
    register_optim(env);
}
