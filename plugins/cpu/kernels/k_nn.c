/*
 * CPU kernels of the neural-network ops: batch/layer/group norm and their
 * grads, cross entropy (+grad), mse / bce-with-logits / nll losses,
 * embedding (+grad), dropout, one_hot, the in-place optimizer updates and
 * check_finite_and_unscale.
 *
 * DESIGN
 *
 * Every kernel walks its operands through "views" (struct kv): a subset of
 * a descriptor's dims, size-1 dims dropped and contiguous neighbours merged,
 * in row-major order. A view is read and written in chunks of NN_BLK
 * elements: get() returns a pointer straight into memory when the operand
 * is already contiguous in the compute type (the float32/float64 fast
 * path) and otherwise gathers the chunk into a stack buffer, converting
 * f16/bf16 to f32 in blocks; put() writes a chunk back the same way. The
 * arithmetic then runs on plain arrays in loops written as blocks of NN_VL
 * lanes with a fixed inner trip count (NN_LOOP), the shape gcc's -O2
 * vectoriser (the "very cheap" cost model) accepts; reductions keep NN_VL
 * partial sums per chunk and add chunk totals in double. Strided, permuted
 * and broadcast (stride 0) operands all go through the same path, and no
 * dtype switch or function pointer runs per element. Softmax exponentials
 * use a branch-free float e^x (nn_expf) so that those loops vectorise too;
 * sqrt in Adam goes through cpu_vsqrt_* (errno semantics at -O2).
 *
 * The compute routines are written once and compiled twice, for float
 * (f32, f16, bf16) and for double (f64): this file includes itself with
 * NN_T/NN_S defined (see the bottom of the first part). Kernels pick the
 * instance once per launch.
 *
 * Threads: rows, channels, (sample, group) pairs or element chunks are
 * shared with cpu_parallel_for, at least ~KGRAIN elements of work per
 * task. Reductions to one value (loss "mean"/"sum") split the work into a
 * fixed number of parts that depends only on the size, so results do not
 * depend on the number of threads.
 *
 * Arguments are checked from the descriptors and attributes by the kernel
 * kit (keel/kit.h) before a kernel runs; the norm geometry and the loss
 * reduction come from it too. Data-dependent validation (labels, ids and
 * classes out of range) happens in the kernels' check functions, before
 * anything runs: they read the index tensors on the host (waiting for the
 * device's queued work first in asynchronous mode) and name the first
 * offending value and its position.
 * The impls still treat an index outside its range as ignored, so a
 * tensor changed behind the check's back cannot cause a stray access.
 */
#ifndef NN_T

#include <stdatomic.h>
#include <stdlib.h>

#include "kern.h"

/* Elements per chunk buffer (several live on the stack at once). */
#define NN_BLK 512
/* Lanes of the blocked loops. */
#define NN_VL 8

/*
 * for (i = 0; i < n; i++) { body } as blocks of NN_VL iterations with a
 * constant trip count plus a scalar tail: vectorised by gcc at -O2.
 */
#define NN_LOOP(i, n, ...)                                                   \
    do {                                                                     \
        int64_t i##b_ = 0;                                                   \
        for (; i##b_ + NN_VL <= (n); i##b_ += NN_VL)                         \
            for (int i##k_ = 0; i##k_ < NN_VL; i##k_++) {                    \
                const int64_t i = i##b_ + i##k_;                             \
                __VA_ARGS__                                                  \
            }                                                                \
        for (int64_t i = i##b_; i < (n); i++) {                              \
            __VA_ARGS__                                                      \
        }                                                                    \
    } while (0)

/* Call the float or the double instance of a templated routine. */
#define NN_CALL(dbl, fn, ...)                                                \
    ((dbl) ? fn##_d(__VA_ARGS__) : fn##_f(__VA_ARGS__))

static inline int64_t nn_min(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static inline int64_t esz(keel_dtype dt)
{
    return (int64_t)keel_dtype_size(dt);
}

/*
 * e^x in float for x <= 88 (every caller passes x <= 0): Cephes' expf
 * (2^n e^r, |r| <= ln2 / 2, degree-6 polynomial, about 1.5 ulp), written
 * with integer selects and bit casts only so that loops calling it
 * vectorise; libm's expf is a call per element. Below -88 it gives 0,
 * -inf gives 0 and NaN stays NaN.
 */
static inline float nn_expf(float x)
{
    float xc, t, r, p = 1.9875691500e-4f, s;
    uint32_t b, lo, nan;

    memcpy(&b, &x, sizeof(b));
    lo = b < 0xC2B00000u ? b : 0xC2B00000u; /* -88.0f: larger is lower */
    nan = -(uint32_t)((int32_t)(b & 0x7FFFFFFFu) > 0x7F800000);
    b = (lo & ~nan) | (0x7FC00000u & nan);
    memcpy(&xc, &b, sizeof(xc));
    /* t holds n = round(x / ln2) in its low mantissa bits */
    t = xc * 1.44269504088896341f + 12582912.0f;
    r = xc - (t - 12582912.0f) * 0.693359375f +
        (t - 12582912.0f) * 2.12194440e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    memcpy(&b, &t, sizeof(b));
    b = (b - 0x4B400000u + 127u) << 23; /* 2^n; n = -127 gives 0 */
    memcpy(&s, &b, sizeof(s));
    return p * s;
}

/* ---- views --------------------------------------------------------------- */

/* Dims of a walk in row-major order, merged; n elements in all. */
struct kv {
    int nd;
    int64_t n;
    int64_t shape[KEEL_MAX_DIMS];
    int64_t stride[KEEL_MAX_DIMS]; /* elements */
};

static void kv_init(struct kv *v)
{
    v->nd = 0;
    v->n = 1;
}

/* Append an inner dim of n elements `s` apart. */
static void kv_dim(struct kv *v, int64_t n, int64_t s)
{
    v->n *= n;
    if (n == 1)
        return;
    if (v->nd > 0 && v->stride[v->nd - 1] == s * n) {
        v->shape[v->nd - 1] *= n;
        v->stride[v->nd - 1] = s;
        return;
    }
    v->shape[v->nd] = n;
    v->stride[v->nd] = s;
    v->nd++;
}

/* Dims [from, to) of a descriptor. */
static struct kv kv_dims(const keel_tensor_desc *d, int from, int to)
{
    struct kv v;

    kv_init(&v);
    for (int i = from; i < to; i++)
        kv_dim(&v, d->shape[i], d->strides[i]);
    return v;
}

static struct kv kv_line(int64_t n, int64_t stride)
{
    struct kv v;

    kv_init(&v);
    kv_dim(&v, n, stride);
    return v;
}

static bool kv_contig(const struct kv *v)
{
    return v->nd == 0 || (v->nd == 1 && v->stride[0] == 1);
}

/* Element offset of the i-th element of the walk. */
static int64_t kv_off(const struct kv *v, int64_t i)
{
    int64_t off = 0;

    for (int d = v->nd - 1; d >= 0; d--) {
        off += (i % v->shape[d]) * v->stride[d];
        i /= v->shape[d];
    }
    return off;
}

/*
 * Elements [start, start + cnt) of the walk as runs along the innermost
 * dim: fn(ctx, offset of the run, its stride, its length).
 */
typedef void (*kv_run_fn)(void *ctx, int64_t off, int64_t stride, int64_t n);

static void kv_walk(const struct kv *v, int64_t start, int64_t cnt,
                    kv_run_fn fn, void *ctx)
{
    int64_t idx[KEEL_MAX_DIMS], off = 0, rem = start;
    int last = v->nd - 1;

    if (cnt <= 0)
        return;
    if (v->nd == 0) {
        fn(ctx, 0, 1, cnt);
        return;
    }
    for (int d = last; d >= 0; d--) {
        idx[d] = rem % v->shape[d];
        rem /= v->shape[d];
        off += idx[d] * v->stride[d];
    }
    for (;;) {
        int64_t run = nn_min(v->shape[last] - idx[last], cnt);
        fn(ctx, off, v->stride[last], run);
        cnt -= run;
        if (cnt == 0)
            return;
        off += run * v->stride[last];
        idx[last] += run;
        for (int d = last; d > 0 && idx[d] == v->shape[d]; d--) {
            off += v->stride[d - 1] - idx[d] * v->stride[d];
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

/* An operand: host address of its element 0, dtype, the walk. */
struct vop {
    char *p;
    keel_dtype dt;
    struct kv v;
};

static struct vop vop_of(void *host, keel_dtype dt, struct kv v)
{
    struct vop o = {(char *)host, dt, v};
    return o;
}

static struct vop vop_all(void *host, const keel_tensor_desc *d)
{
    return vop_of(host, d->dtype, kv_dims(d, 0, d->ndim));
}

/* The same walk `off` elements further. */
static struct vop vop_at(const struct vop *o, int64_t off)
{
    struct vop r = *o;

    if (r.p) /* empty operands have no address */
        r.p += off * esz(o->dt);
    return r;
}

static double vop_get1(const struct vop *o, int64_t i)
{
    return kload(o->p + kv_off(&o->v, i) * esz(o->dt), o->dt);
}

/* ---- integer runs (labels, ids) ------------------------------------------ */

static void run_ids(const char *p, keel_dtype dt, int64_t s, int64_t n,
                    int64_t *d)
{
    switch (dt) {
    case KEEL_I64:
        for (int64_t i = 0; i < n; i++)
            d[i] = ((const int64_t *)p)[i * s];
        break;
    case KEEL_I32:
        for (int64_t i = 0; i < n; i++)
            d[i] = ((const int32_t *)p)[i * s];
        break;
    case KEEL_I8:
        for (int64_t i = 0; i < n; i++)
            d[i] = ((const int8_t *)p)[i * s];
        break;
    case KEEL_U8:
    case KEEL_BOOL:
        for (int64_t i = 0; i < n; i++)
            d[i] = ((const uint8_t *)p)[i * s];
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            d[i] = kload_i(p + i * s * esz(dt), dt);
        break;
    }
}

struct ids_io {
    const char *base;
    keel_dtype dt;
    int64_t *dst;
};

static void ids_cb(void *ctx, int64_t off, int64_t s, int64_t n)
{
    struct ids_io *io = ctx;

    run_ids(io->base + off * esz(io->dt), io->dt, s, n, io->dst);
    io->dst += n;
}

/* Elements [start, start + cnt) of an integer operand as int64. */
static void ids_load(const struct vop *o, int64_t start, int64_t cnt,
                     int64_t *dst)
{
    struct ids_io io = {o->p, o->dt, dst};

    kv_walk(&o->v, start, cnt, ids_cb, &io);
}

static int64_t ids_get1(const struct vop *o, int64_t i)
{
    int64_t v;

    ids_load(o, i, 1, &v);
    return v;
}

/*
 * Index values were validated by the kernel's check before launch; the
 * impls still skip values outside [0, n) (treated as ignored / padding) so
 * that a tensor rewritten concurrently can never cause a stray access.
 */
static inline bool nn_in(int64_t v, int64_t n)
{
    return (uint64_t)v < (uint64_t)n;
}

/* ---- deterministic parallel sums ----------------------------------------- */

#define NN_PARTS 128

/* Adds the contributions of items [b, e) to acc[0], acc[1]. */
typedef void (*nn_part_fn)(const void *ctx, int64_t b, int64_t e,
                           double acc[2]);

struct nn_red {
    nn_part_fn fn;
    const void *ctx;
    int64_t n, part;
    double acc[NN_PARTS][2];
};

static void nn_red_run(void *p, int64_t b, int64_t e)
{
    struct nn_red *r = p;

    for (int64_t k = b; k < e; k++) {
        r->acc[k][0] = r->acc[k][1] = 0;
        r->fn(r->ctx, k * r->part, nn_min(r->n, (k + 1) * r->part),
              r->acc[k]);
    }
}

/*
 * Two sums over n items costing `cost` elements each: the items are cut
 * into at most NN_PARTS parts by size alone and the part totals added in
 * order, so the result is the same for any number of threads.
 */
static void nn_reduce(int64_t n, int64_t cost, nn_part_fn fn, const void *ctx,
                      double out[2])
{
    struct nn_red r;
    int64_t parts, min_part = KGRAIN / (cost > 0 ? cost : 1);

    out[0] = out[1] = 0;
    if (n <= 0)
        return;
    r.fn = fn;
    r.ctx = ctx;
    r.n = n;
    r.part = (n + NN_PARTS - 1) / NN_PARTS;
    if (r.part < min_part)
        r.part = min_part;
    if (r.part < 1)
        r.part = 1;
    parts = (n + r.part - 1) / r.part;
    cpu_parallel_for(parts, 1, nn_red_run, &r);
    for (int64_t k = 0; k < parts; k++) {
        out[0] += r.acc[k][0];
        out[1] += r.acc[k][1];
    }
}

static int64_t nn_grain(int64_t work_per_item)
{
    int64_t g = KGRAIN / (work_per_item > 0 ? work_per_item : 1);
    return g > 0 ? g : 1;
}

/* ---- checks -------------------------------------------------------------- */

/* Host view of input i for a data check, after queued work has run. */
static struct vop nn_host_input(const keel_kernel_args *a, int i)
{
    struct cpu_device *dev;

    if (cpu_g.cfg.async && cpu_dev_get(a->device, "nn", &dev) == 0)
        cpu_device_wait_idle(dev);
    return vop_all((void *)cpu_dptr_to_host(a->inputs[i].data),
                   &a->inputs[i]);
}

/*
 * First element of integer input i outside [lo, hi) and != skip (when
 * has_skip), in row-major order: OK, or INVALID_ARGUMENT naming it.
 */
static keel_status nn_check_range(const keel_kernel_args *a, int i,
                                  int64_t lo, int64_t hi, bool has_skip,
                                  int64_t skip, const char *op,
                                  const char *what)
{
    struct vop o;
    int64_t buf[NN_BLK];

    if (knumel(&a->inputs[i]) == 0)
        return KEEL_STATUS_OK;
    o = nn_host_input(a, i);
    for (int64_t j = 0; j < o.v.n; j += NN_BLK) {
        int64_t n = nn_min(NN_BLK, o.v.n - j);
        ids_load(&o, j, n, buf);
        for (int64_t k = 0; k < n; k++)
            if ((buf[k] < lo || buf[k] >= hi) &&
                !(has_skip && buf[k] == skip))
                return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
                               "%s: %s %lld at flat position %lld is out "
                               "of range [%lld, %lld)",
                               op, what, (long long)buf[k],
                               (long long)(j + k), (long long)lo,
                               (long long)hi);
    }
    return KEEL_STATUS_OK;
}

/* ---- contexts of the templated routines ---------------------------------- */

/* layer_norm_grad: dscale/dbias by column blocks. */
struct lng_ctx {
    struct vop x, dy, s, dx; /* row walks at row 0 */
    struct kv lead_x, lead_dy; /* rows */
    struct vop mean, inv;     /* M values */
    struct vop ds, db;        /* outputs, N values */
    bool has_s, dbl;
    int64_t M, N;
};

/* Where the class values of one sample of a cross-entropy operand lie. */
struct ce_geo {
    struct kv outer, inner;
    int64_t ninner, cstride;
};

static struct ce_geo geo_of(const keel_tensor_desc *d, int axis)
{
    struct ce_geo g;

    g.outer = kv_dims(d, 0, axis);
    g.inner = kv_dims(d, axis + 1, d->ndim);
    g.ninner = g.inner.n;
    g.cstride = d->strides[axis];
    return g;
}

static struct vop geo_row(void *p, keel_dtype dt, const struct ce_geo *g,
                          int64_t s, int64_t classes)
{
    int64_t o = g->ninner ? s / g->ninner : 0;
    int64_t i = g->ninner ? s % g->ninner : 0;
    struct vop r = vop_of(p, dt, kv_line(classes, g->cstride));

    return vop_at(&r, kv_off(&g->outer, o) + kv_off(&g->inner, i));
}

struct ce_ctx {
    int64_t C, ns;          /* classes, samples */
    void *x, *sm, *lab, *dx;
    keel_dtype xdt, smdt, ldt, dxdt;
    struct ce_geo xg, smg, lg, dxg;
    struct vop hard;         /* hard labels in sample order */
    struct vop w;            /* class weights */
    struct vop dloss;        /* grad: upstream gradient */
    char *loss;              /* forward, reduction none */
    keel_dtype lossdt;
    bool soft, use_softmax, has_w, dbl;
    int red;
    int64_t ignore;
    double eps, wsum, g;     /* g: grad factor for mean/sum */
};

/* mse_loss and bce_with_logits. */
struct loss_ctx {
    struct vop x, y, pw, out;
    bool bce, has_pw, dbl;
};

struct drop_ctx {
    struct vop x, out;
    uint8_t *mask;
    uint64_t seed, offset;
    double p, scale;
    bool train;
};

enum { OPT_SGD, OPT_MOMENTUM, OPT_ADAM, OPT_ADAMW };

struct opt_ctx {
    int kind;
    struct vop p, g, s1, s2;
    double lr, wd, mu, b1, b2, lr_t, eps_t, decay;
    bool nesterov;
};

/* check_finite_and_unscale: x *= inv; found is set by any part that saw a
 * value that is not finite. */
struct unscale_ctx {
    struct vop x;
    double inv; /* float32's 1/scale, or float64's for a float64 x */
    atomic_int found;
};

struct embg_ctx {
    struct vop dy, out;      /* dout rows, dtable rows (D elements each) */
    struct kv lead;          /* dout's leading dims: the ids' order */
    int64_t V, D, pad;
    const int64_t *first;    /* bucket v holds order[first[v]..first[v+1]) */
    const int64_t *order;
};

/* Philox mask of n elements from counter c0: keep when u >= p. */
static void drop_mask(uint64_t seed, uint64_t c0, int64_t n, double p,
                      uint8_t *m)
{
    int64_t i = 0;

    while (i < n) {
        uint64_t c = c0 + (uint64_t)i;
        uint32_t w[4];
        keel_philox_block(seed, c >> 2, w);
        for (unsigned lane = (unsigned)(c & 3); lane < 4 && i < n;
             lane++, i++)
            m[i] = (double)keel_philox_u01(w[lane]) >= p;
    }
}

/* ---- the float and double instances -------------------------------------- */

#define NN_T float
#define NN_S(name) name##_f
#define NN_NATIVE KEEL_F32
#define NN_IS_FLOAT 1
#define NN_EXPN nn_expf
#define NN_LOG logf
#define NN_LOG1P log1pf
#define NN_VSQRT cpu_vsqrt_f32
#include "k_nn.c"
#undef NN_T
#undef NN_S
#undef NN_NATIVE
#undef NN_IS_FLOAT
#undef NN_EXPN
#undef NN_LOG
#undef NN_LOG1P
#undef NN_VSQRT

#define NN_T double
#define NN_S(name) name##_d
#define NN_NATIVE KEEL_F64
#define NN_IS_FLOAT 0
#define NN_EXPN exp
#define NN_LOG log
#define NN_LOG1P log1p
#define NN_VSQRT cpu_vsqrt_f64
#include "k_nn.c"
#undef NN_T
#undef NN_S
#undef NN_NATIVE
#undef NN_IS_FLOAT
#undef NN_EXPN
#undef NN_LOG
#undef NN_LOG1P
#undef NN_VSQRT

static void vop_set1(const struct vop *o, int64_t i, double v)
{
    kstore(o->p + kv_off(&o->v, i) * esz(o->dt), o->dt, v);
}

/* ---- batch_norm ---------------------------------------------------------- */

/* The walk over one channel of [N, C, ...]: dims 0, 2, 3, ... */
static struct kv bn_walk(const keel_tensor_desc *d)
{
    struct kv v;

    kv_init(&v);
    kv_dim(&v, d->shape[0], d->strides[0]);
    for (int i = 2; i < d->ndim; i++)
        kv_dim(&v, d->shape[i], d->strides[i]);
    return v;
}

struct bn_ctx {
    struct vop x, y, dy;      /* channel walks at channel 0 */
    int64_t xcs, ycs, dycs;   /* channel strides */
    struct vop scale, bias, rm, rv, mean, inv; /* [C] */
    struct vop o1, o2;        /* [C] outputs */
    double momentum, eps;
    bool training, dbl;
};

static void bn_part(void *ctx, int64_t b, int64_t e)
{
    const struct bn_ctx *c = ctx;

    for (int64_t ch = b; ch < e; ch++) {
        struct vop x = vop_at(&c->x, ch * c->xcs);
        struct vop y = vop_at(&c->y, ch * c->ycs);
        double mean, var, inv;

        if (c->training) {
            NN_CALL(c->dbl, v_moments, &x, &mean, &var);
            /* An empty batch leaves the running statistics alone. */
            if (x.v.n > 0) {
                vop_set1(&c->rm, ch, c->momentum * vop_get1(&c->rm, ch) +
                                         (1 - c->momentum) * mean);
                vop_set1(&c->rv, ch, c->momentum * vop_get1(&c->rv, ch) +
                                         (1 - c->momentum) * var);
            }
        } else {
            mean = vop_get1(&c->rm, ch);
            var = vop_get1(&c->rv, ch);
        }
        inv = 1 / sqrt(var + c->eps);
        NN_CALL(c->dbl, v_affine, &x, &y, NULL, NULL, mean,
                inv * vop_get1(&c->scale, ch), vop_get1(&c->bias, ch));
        vop_set1(&c->o1, ch, mean);
        vop_set1(&c->o2, ch, inv);
    }
}

static void bn_setup(const struct kcall *k, struct bn_ctx *c)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *x = &a->inputs[0];

    memset(c, 0, sizeof(*c));
    c->x = vop_of(k->in[0], x->dtype, bn_walk(x));
    c->xcs = x->strides[1];
    c->o1 = vop_all(k->out[1], &a->outputs[1]);
    c->o2 = vop_all(k->out[2], &a->outputs[2]);
    c->eps = kattr_f(a, "epsilon", 1e-5);
    c->training = kattr_i(a, "training", 1) != 0;
    c->dbl = x->dtype == KEEL_F64;
}

static void bn_impl(const struct kcall *k)
{
    const keel_kernel_args *a = k->a;
    struct bn_ctx c;

    bn_setup(k, &c);
    c.y = vop_of(k->out[0], a->outputs[0].dtype, bn_walk(&a->outputs[0]));
    c.ycs = a->outputs[0].strides[1];
    c.scale = vop_all(k->in[1], &a->inputs[1]);
    c.bias = vop_all(k->in[2], &a->inputs[2]);
    c.rm = vop_all(k->in[3], &a->inputs[3]);
    c.rv = vop_all(k->in[4], &a->inputs[4]);
    c.momentum = kattr_f(a, "momentum", 0.9);
    cpu_parallel_for(a->inputs[0].shape[1], nn_grain(c.x.v.n), bn_part, &c);
}

/* dx = s invstd (dy - mean(dy) - xhat mean(dy xhat)) in training,
 * s invstd dy with global statistics; dscale = sum dy xhat, dbias = sum dy. */
static void bng_part(void *ctx, int64_t b, int64_t e)
{
    const struct bn_ctx *c = ctx;

    for (int64_t ch = b; ch < e; ch++) {
        struct vop x = vop_at(&c->x, ch * c->xcs);
        struct vop dy = vop_at(&c->dy, ch * c->dycs);
        struct vop dx = vop_at(&c->y, ch * c->ycs);
        double mean = vop_get1(&c->mean, ch), inv = vop_get1(&c->inv, ch);
        double A = vop_get1(&c->scale, ch) * inv, m = (double)x.v.n;
        double sg, sgx;

        NN_CALL(c->dbl, v_dsums, &x, &dy, NULL, mean, inv, &sg, &sgx);
        if (m > 0)
            NN_CALL(c->dbl, v_dx, &x, &dy, NULL, &dx, mean, inv, A,
                    c->training ? -A * sg / m : 0,
                    c->training ? -A * sgx / m : 0);
        vop_set1(&c->o1, ch, sgx);
        vop_set1(&c->o2, ch, sg);
    }
}

static void bng_impl(const struct kcall *k)
{
    const keel_kernel_args *a = k->a;
    struct bn_ctx c;

    bn_setup(k, &c);
    c.y = vop_of(k->out[0], a->outputs[0].dtype, bn_walk(&a->outputs[0]));
    c.ycs = a->outputs[0].strides[1];
    c.dy = vop_of(k->in[4], a->inputs[4].dtype, bn_walk(&a->inputs[4]));
    c.dycs = a->inputs[4].strides[1];
    c.scale = vop_all(k->in[1], &a->inputs[1]);
    c.mean = vop_all(k->in[2], &a->inputs[2]);
    c.inv = vop_all(k->in[3], &a->inputs[3]);
    cpu_parallel_for(a->inputs[0].shape[1], nn_grain(2 * c.x.v.n), bng_part,
                     &c);
}

KERNEL(k_batch_norm, "batch_norm", bn_impl, NULL)
KERNEL(k_batch_norm_grad, "batch_norm_grad", bng_impl, NULL)

/* ---- layer_norm ---------------------------------------------------------- */

/* Which input is which and how x splits (keel/kit.h). The launch was
 * checked before the impl runs, so this cannot fail. */
static keel_kit_norm nn_norm(const keel_kernel_args *a, int op)
{
    keel_kit_norm g;

    (void)keel_kit_norm_geometry(op, a, &g, NULL);
    return g;
}

struct ln_ctx {
    struct vop x, y, s, b; /* row walks at row 0 */
    struct kv lead;
    int64_t N;
    struct vop mean, inv;
    double eps;
    bool has_s, has_b, dbl;
};

static void ln_part(void *ctx, int64_t b, int64_t e)
{
    const struct ln_ctx *c = ctx;

    for (int64_t m = b; m < e; m++) {
        struct vop x = vop_at(&c->x, kv_off(&c->lead, m));
        struct vop y = vop_at(&c->y, m * c->N);
        double mean, var, inv;

        NN_CALL(c->dbl, v_moments, &x, &mean, &var);
        inv = 1 / sqrt(var + c->eps);
        NN_CALL(c->dbl, v_affine, &x, &y, c->has_s ? &c->s : NULL,
                c->has_b ? &c->b : NULL, mean, inv, 0);
        vop_set1(&c->mean, m, mean);
        vop_set1(&c->inv, m, inv);
    }
}

static void ln_impl(const struct kcall *k)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *x = &a->inputs[0];
    keel_kit_norm g = nn_norm(a, KEEL_OP_LAYER_NORM);
    int b = g.axis;
    struct ln_ctx c;

    memset(&c, 0, sizeof(c));
    c.lead = kv_dims(x, 0, b);
    c.x = vop_of(k->in[0], x->dtype, kv_dims(x, b, x->ndim));
    c.N = c.x.v.n;
    c.y = vop_of(k->out[0], x->dtype, kv_line(c.N, 1));
    c.has_s = g.scale >= 0;
    c.has_b = g.bias >= 0;
    if (c.has_s)
        c.s = vop_all(k->in[g.scale], &a->inputs[g.scale]);
    if (c.has_b)
        c.b = vop_all(k->in[g.bias], &a->inputs[g.bias]);
    c.mean = vop_all(k->out[1], &a->outputs[1]);
    c.inv = vop_all(k->out[2], &a->outputs[2]);
    c.eps = kattr_f(a, "epsilon", 1e-5);
    c.dbl = x->dtype == KEEL_F64;
    cpu_parallel_for(c.lead.n, nn_grain(3 * c.N), ln_part, &c);
}

static void lng_rows(void *ctx, int64_t b, int64_t e)
{
    const struct lng_ctx *c = ctx;

    for (int64_t m = b; m < e; m++) {
        struct vop x = vop_at(&c->x, kv_off(&c->lead_x, m));
        struct vop dy = vop_at(&c->dy, kv_off(&c->lead_dy, m));
        struct vop dx = vop_at(&c->dx, m * c->N);
        double mean = vop_get1(&c->mean, m), inv = vop_get1(&c->inv, m);
        double sg, sgx, n = (double)c->N;
        const struct vop *s = c->has_s ? &c->s : NULL;

        NN_CALL(c->dbl, v_dsums, &x, &dy, s, mean, inv, &sg, &sgx);
        if (c->N > 0)
            NN_CALL(c->dbl, v_dx, &x, &dy, s, &dx, mean, inv, inv,
                    -inv * sg / n, -inv * sgx / n);
    }
}

static void lng_impl(const struct kcall *k)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *x = &a->inputs[0], *dy;
    keel_kit_norm g = nn_norm(a, KEEL_OP_LAYER_NORM_GRAD);
    int b = g.axis, mi = g.stat[0];
    struct lng_ctx c;

    memset(&c, 0, sizeof(c));
    dy = &a->inputs[g.dy];
    c.lead_x = kv_dims(x, 0, b);
    c.lead_dy = kv_dims(dy, 0, b);
    c.x = vop_of(k->in[0], x->dtype, kv_dims(x, b, x->ndim));
    c.dy = vop_of(k->in[g.dy], dy->dtype, kv_dims(dy, b, dy->ndim));
    c.M = c.lead_x.n;
    c.N = c.x.v.n;
    c.dx = vop_of(k->out[0], x->dtype, kv_line(c.N, 1));
    c.has_s = g.scale >= 0;
    if (c.has_s)
        c.s = vop_all(k->in[g.scale], &a->inputs[g.scale]);
    c.mean = vop_all(k->in[mi], &a->inputs[mi]);
    c.inv = vop_all(k->in[g.stat[1]], &a->inputs[g.stat[1]]);
    c.ds = vop_of(k->out[1], a->outputs[1].dtype, kv_line(c.N, 1));
    c.db = vop_of(k->out[2], a->outputs[2].dtype, kv_line(c.N, 1));
    c.dbl = x->dtype == KEEL_F64;
    cpu_parallel_for(c.M, nn_grain(3 * c.N), lng_rows, &c);
    cpu_parallel_for((c.N + NN_BLK - 1) / NN_BLK, nn_grain(2 * c.M * NN_BLK),
                     c.dbl ? lng_cols_d : lng_cols_f, &c);
}

KERNEL(k_layer_norm, "layer_norm", ln_impl, NULL)
KERNEL(k_layer_norm_grad, "layer_norm_grad", lng_impl, NULL)

/* ---- group_norm ---------------------------------------------------------- */

struct gn_ctx {
    struct vop xg;         /* x over one (n, group) at (0, 0) */
    struct vop xs, dys, ys; /* spatial walks at (0, 0) */
    int64_t xs0, xs1, dys0, dys1, ys0, ys1;
    int64_t N, C, G, cg;
    struct vop scale, bias, mean, inv, o1, o2;
    double eps;
    bool has_s, has_b, dbl;
};

static void gn_setup(const struct kcall *k, struct gn_ctx *c)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *x = &a->inputs[0], *y = &a->outputs[0];

    memset(c, 0, sizeof(*c));
    c->N = x->shape[0];
    c->C = x->shape[1];
    c->G = kattr_i(a, "groups", 1);
    c->cg = c->C / c->G;
    kv_init(&c->xg.v);
    kv_dim(&c->xg.v, c->cg, x->strides[1]);
    for (int i = 2; i < x->ndim; i++)
        kv_dim(&c->xg.v, x->shape[i], x->strides[i]);
    c->xg.p = k->in[0];
    c->xg.dt = x->dtype;
    c->xs = vop_of(k->in[0], x->dtype, kv_dims(x, 2, x->ndim));
    c->xs0 = x->strides[0];
    c->xs1 = x->strides[1];
    c->ys = vop_of(k->out[0], y->dtype, kv_dims(y, 2, y->ndim));
    c->ys0 = y->strides[0];
    c->ys1 = y->strides[1];
    c->o1 = vop_all(k->out[1], &a->outputs[1]);
    c->o2 = vop_all(k->out[2], &a->outputs[2]);
    c->eps = kattr_f(a, "epsilon", 1e-5);
    c->dbl = x->dtype == KEEL_F64;
}

static void gn_part(void *ctx, int64_t b, int64_t e)
{
    const struct gn_ctx *c = ctx;

    for (int64_t ng = b; ng < e; ng++) {
        int64_t n = ng / c->G, g = ng % c->G;
        struct vop xg = vop_at(&c->xg, n * c->xs0 + g * c->cg * c->xs1);
        double mean, var, inv;

        NN_CALL(c->dbl, v_moments, &xg, &mean, &var);
        inv = 1 / sqrt(var + c->eps);
        for (int64_t ch = g * c->cg; ch < (g + 1) * c->cg; ch++) {
            struct vop x = vop_at(&c->xs, n * c->xs0 + ch * c->xs1);
            struct vop y = vop_at(&c->ys, n * c->ys0 + ch * c->ys1);
            double s = c->has_s ? vop_get1(&c->scale, ch) : 1;
            NN_CALL(c->dbl, v_affine, &x, &y, NULL, NULL, mean, inv * s,
                    c->has_b ? vop_get1(&c->bias, ch) : 0);
        }
        vop_set1(&c->o1, ng, mean);
        vop_set1(&c->o2, ng, inv);
    }
}

static void gn_impl(const struct kcall *k)
{
    const keel_kernel_args *a = k->a;
    struct gn_ctx c;

    gn_setup(k, &c);
    c.has_s = a->num_inputs > 1;
    c.has_b = a->num_inputs > 2;
    if (c.has_s)
        c.scale = vop_all(k->in[1], &a->inputs[1]);
    if (c.has_b)
        c.bias = vop_all(k->in[2], &a->inputs[2]);
    cpu_parallel_for(c.N * c.G, nn_grain(3 * c.xg.v.n), gn_part, &c);
}

/* Per (n, group): dx = invstd (s dy - mean(s dy) - xhat mean(s dy xhat)). */
static void gng_groups(void *ctx, int64_t b, int64_t e)
{
    const struct gn_ctx *c = ctx;

    for (int64_t ng = b; ng < e; ng++) {
        int64_t n = ng / c->G, g = ng % c->G;
        double mean = vop_get1(&c->mean, ng), inv = vop_get1(&c->inv, ng);
        double A = 0, B = 0, cnt = (double)(c->cg * c->xs.v.n);

        for (int64_t ch = g * c->cg; ch < (g + 1) * c->cg; ch++) {
            struct vop x = vop_at(&c->xs, n * c->xs0 + ch * c->xs1);
            struct vop dy = vop_at(&c->dys, n * c->dys0 + ch * c->dys1);
            double s = c->has_s ? vop_get1(&c->scale, ch) : 1, sg, sgx;
            NN_CALL(c->dbl, v_dsums, &x, &dy, NULL, mean, inv, &sg, &sgx);
            A += s * sg;
            B += s * sgx;
        }
        if (cnt == 0)
            continue;
        for (int64_t ch = g * c->cg; ch < (g + 1) * c->cg; ch++) {
            struct vop x = vop_at(&c->xs, n * c->xs0 + ch * c->xs1);
            struct vop dy = vop_at(&c->dys, n * c->dys0 + ch * c->dys1);
            struct vop dx = vop_at(&c->ys, n * c->ys0 + ch * c->ys1);
            double s = c->has_s ? vop_get1(&c->scale, ch) : 1;
            NN_CALL(c->dbl, v_dx, &x, &dy, NULL, &dx, mean, inv, inv * s,
                    -inv * A / cnt, -inv * B / cnt);
        }
    }
}

/* Per channel: dscale = sum dy xhat, dbias = sum dy over n and space. */
static void gng_channels(void *ctx, int64_t b, int64_t e)
{
    const struct gn_ctx *c = ctx;

    for (int64_t ch = b; ch < e; ch++) {
        double ds = 0, db = 0;
        for (int64_t n = 0; n < c->N; n++) {
            int64_t ng = n * c->G + ch / c->cg;
            struct vop x = vop_at(&c->xs, n * c->xs0 + ch * c->xs1);
            struct vop dy = vop_at(&c->dys, n * c->dys0 + ch * c->dys1);
            double sg, sgx;
            NN_CALL(c->dbl, v_dsums, &x, &dy, NULL, vop_get1(&c->mean, ng),
                    vop_get1(&c->inv, ng), &sg, &sgx);
            ds += sgx;
            db += sg;
        }
        vop_set1(&c->o1, ch, ds);
        vop_set1(&c->o2, ch, db);
    }
}

static void gng_impl(const struct kcall *k)
{
    const keel_kernel_args *a = k->a;
    keel_kit_norm g = nn_norm(a, KEEL_OP_GROUP_NORM_GRAD);
    const keel_tensor_desc *dy = &a->inputs[g.dy];
    int mi = g.stat[0];
    struct gn_ctx c;

    gn_setup(k, &c);
    c.dys = vop_of(k->in[g.dy], dy->dtype, kv_dims(dy, 2, dy->ndim));
    c.dys0 = dy->strides[0];
    c.dys1 = dy->strides[1];
    c.has_s = g.scale >= 0;
    if (c.has_s)
        c.scale = vop_all(k->in[g.scale], &a->inputs[g.scale]);
    c.mean = vop_all(k->in[mi], &a->inputs[mi]);
    c.inv = vop_all(k->in[g.stat[1]], &a->inputs[g.stat[1]]);
    cpu_parallel_for(c.N * c.G, nn_grain(4 * c.xg.v.n), gng_groups, &c);
    cpu_parallel_for(c.C, nn_grain(2 * c.N * c.xs.v.n), gng_channels, &c);
}

KERNEL(k_group_norm, "group_norm", gn_impl, NULL)
KERNEL(k_group_norm_grad, "group_norm_grad", gng_impl, NULL)

/* ---- cross_entropy ------------------------------------------------------- */

/* The kit checked the launch; hard label values are data: each in
 * [0, C) or ignore_index. */
static keel_status ce_check_labels(const keel_kernel_args *a, const char *op)
{
    const keel_tensor_desc *x = &a->inputs[0];
    int axis = kaxis(kattr_i(a, "axis", -1), x->ndim);

    if (kattr_i(a, "soft_label", 0))
        return KEEL_STATUS_OK;
    return nn_check_range(a, 1, 0, x->shape[axis], true,
                          kattr_i(a, "ignore_index", -100), op, "label");
}

static keel_status ce_check(const keel_kernel_args *a)
{
    return ce_check_labels(a, "cross_entropy");
}

static keel_status ceg_check(const keel_kernel_args *a)
{
    return ce_check_labels(a, "cross_entropy_grad");
}

static void ce_setup(const struct kcall *k, struct ce_ctx *c, bool grad)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *x = &a->inputs[0];
    int axis = kaxis(kattr_i(a, "axis", -1), x->ndim), wi = grad ? 3 : 2;

    memset(c, 0, sizeof(*c));
    c->C = x->shape[axis];
    c->ns = knumel(x) / c->C;
    c->x = k->in[0];
    c->xdt = x->dtype;
    c->xg = geo_of(x, axis);
    c->soft = kattr_i(a, "soft_label", 0) != 0;
    c->use_softmax = kattr_i(a, "use_softmax", 1) != 0;
    c->ignore = kattr_i(a, "ignore_index", -100);
    c->eps = kattr_f(a, "label_smoothing", 0);
    c->red = keel_kit_reduction(a);
    c->dbl = x->dtype == KEEL_F64;
    if (c->soft) {
        c->lab = k->in[1];
        c->ldt = a->inputs[1].dtype;
        c->lg = geo_of(&a->inputs[1], axis);
    } else {
        c->hard = vop_all(k->in[1], &a->inputs[1]);
    }
    c->has_w = a->num_inputs > wi;
    if (c->has_w) {
        c->w = vop_all(k->in[wi], &a->inputs[wi]);
        for (int64_t i = 0; c->eps > 0 && i < c->C; i++)
            c->wsum += vop_get1(&c->w, i);
    }
    if (grad) {
        c->dx = k->out[0];
        c->dxdt = a->outputs[0].dtype;
        c->dxg = geo_of(&a->outputs[0], axis);
        c->dloss = vop_all(k->in[2], &a->inputs[2]);
    } else {
        c->sm = k->out[1];
        c->smdt = a->outputs[1].dtype;
        c->smg = geo_of(&a->outputs[1], axis);
        c->loss = k->out[0];
        c->lossdt = a->outputs[0].dtype;
    }
}

static void ce_none_part(void *ctx, int64_t b, int64_t e)
{
    const struct ce_ctx *c = ctx;
    double l, w;

    for (int64_t s = b; s < e; s++) {
        NN_CALL(c->dbl, ce_fwd, c, s, &l, &w);
        kstore(c->loss + s * esz(c->lossdt), c->lossdt, l);
    }
}

static void ce_sum_part(const void *ctx, int64_t b, int64_t e,
                        double acc[2])
{
    const struct ce_ctx *c = ctx;
    double l, w;

    for (int64_t s = b; s < e; s++) {
        NN_CALL(c->dbl, ce_fwd, c, s, &l, &w);
        acc[0] += l;
        acc[1] += w;
    }
}

/*
 * The divisor of reduction 'mean', as Paddle 3.x computes it
 * (paddle.nn.functional.cross_entropy): with class weights, the sum of the
 * kept samples' weights; without weights and with hard labels, the count
 * of kept samples when ignore_index >= 0, but all N samples when
 * ignore_index < 0 (the default -100: ignored samples then count as zero
 * loss in a plain mean); soft labels: N. `kept` is the reduced sum of the
 * per-sample weights (1 per kept sample without weights). 1 when 0.
 */
static double ce_mean_denom(const struct ce_ctx *c, double kept)
{
    double d = kept;

    if (!c->has_w && !c->soft && c->ignore < 0)
        d = (double)c->ns;
    return d != 0 ? d : 1;
}

static void ce_impl(const struct kcall *k)
{
    struct ce_ctx c;
    double tot[2];

    ce_setup(k, &c, false);
    if (c.red == KEEL_KIT_RED_NONE) {
        cpu_parallel_for(c.ns, nn_grain(3 * c.C), ce_none_part, &c);
        return;
    }
    nn_reduce(c.ns, 3 * c.C, ce_sum_part, &c, tot);
    kstore(c.loss, c.lossdt,
           c.red == KEEL_KIT_RED_SUM ? tot[0]
                                     : tot[0] / ce_mean_denom(&c, tot[1]));
}

static void ce_wsum_part(const void *ctx, int64_t b, int64_t e,
                         double acc[2])
{
    const struct ce_ctx *c = ctx;
    double st;

    for (int64_t s = b; s < e; s++)
        acc[0] += NN_CALL(c->dbl, ce_weight, c, s, &st);
}

static void ce_bwd_part(void *ctx, int64_t b, int64_t e)
{
    const struct ce_ctx *c = ctx;

    for (int64_t s = b; s < e; s++)
        NN_CALL(c->dbl, ce_bwd, c, s,
                c->red == KEEL_KIT_RED_NONE ? vop_get1(&c->dloss, s) : c->g);
}

static void ceg_impl(const struct kcall *k)
{
    struct ce_ctx c;
    double tot[2];

    ce_setup(k, &c, true);
    if (c.red != KEEL_KIT_RED_NONE)
        c.g = vop_get1(&c.dloss, 0);
    if (c.red == KEEL_KIT_RED_MEAN) {
        nn_reduce(c.ns, c.soft ? c.C : 1, ce_wsum_part, &c, tot);
        c.g /= ce_mean_denom(&c, tot[0]);
    }
    cpu_parallel_for(c.ns, nn_grain(2 * c.C), ce_bwd_part, &c);
}

KERNEL(k_cross_entropy, "cross_entropy", ce_impl, ce_check)
KERNEL(k_cross_entropy_grad, "cross_entropy_grad", ceg_impl, ceg_check)

/* ---- mse_loss, bce_with_logits ------------------------------------------- */

static void loss_run(const struct kcall *k, bool bce)
{
    const keel_kernel_args *a = k->a;
    int64_t n = knumel(&a->inputs[0]);
    struct loss_ctx c;
    double tot[2];

    memset(&c, 0, sizeof(c));
    c.x = vop_all(k->in[0], &a->inputs[0]);
    c.y = vop_all(k->in[1], &a->inputs[1]);
    c.bce = bce;
    c.has_pw = a->num_inputs > 2;
    if (c.has_pw)
        c.pw = vop_all(k->in[2], &a->inputs[2]);
    c.dbl = a->inputs[0].dtype == KEEL_F64;
    if (keel_kit_reduction(a) == KEEL_KIT_RED_NONE) {
        c.out = vop_of(k->out[0], a->outputs[0].dtype, kv_line(n, 1));
        cpu_parallel_for(n, KGRAIN, c.dbl ? loss_none_d : loss_none_f, &c);
        return;
    }
    nn_reduce(n, 1, c.dbl ? loss_sum_d : loss_sum_f, &c, tot);
    kstore(k->out[0], a->outputs[0].dtype,
           keel_kit_reduction(a) == KEEL_KIT_RED_SUM ? tot[0]
                                      : (n ? tot[0] / (double)n : NAN));
}

static void mse_impl(const struct kcall *k)
{
    loss_run(k, false);
}

static void bce_impl(const struct kcall *k)
{
    loss_run(k, true);
}

KERNEL(k_mse_loss, "mse_loss", mse_impl, NULL)
KERNEL(k_bce_with_logits, "bce_with_logits", bce_impl, NULL)

/* ---- nll_loss ------------------------------------------------------------ */

struct nll_ctx {
    const char *x;
    keel_dtype xdt;
    struct kv nv, kv;   /* sample s = (n, k): dims 0 and 2.. of logp */
    int64_t C, cs, K;   /* classes, class stride, samples per n */
    struct vop lab, w;
    bool has_w;
    int64_t ignore;
    char *out;
    keel_dtype odt;
};

/* dst[i] = base[off[i]] (off < 0: 0), one dtype switch per block. */
static void nll_gather(const char *base, keel_dtype dt, const int64_t *off,
                       int64_t n, double *dst)
{
    switch (dt) {
    case KEEL_F32:
        for (int64_t i = 0; i < n; i++)
            dst[i] = off[i] < 0 ? 0 : ((const float *)base)[off[i]];
        break;
    case KEEL_F64:
        for (int64_t i = 0; i < n; i++)
            dst[i] = off[i] < 0 ? 0 : ((const double *)base)[off[i]];
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            dst[i] = off[i] < 0 ? 0 : kload(base + off[i] * esz(dt), dt);
        break;
    }
}

/* Loss and weight of samples [s0, s0 + n). */
static void nll_blk(const struct nll_ctx *c, int64_t s0, int64_t n,
                    double *loss, double *wt)
{
    int64_t lb[NN_BLK], off[NN_BLK], woff[NN_BLK];

    ids_load(&c->lab, s0, n, lb);
    for (int64_t i = 0; i < n; i++) {
        int64_t s = s0 + i;
        bool skip = lb[i] == c->ignore || !nn_in(lb[i], c->C);
        off[i] = skip ? -1
                      : kv_off(&c->nv, s / c->K) + lb[i] * c->cs +
                            kv_off(&c->kv, s % c->K);
        woff[i] = skip ? -1 : (c->has_w ? kv_off(&c->w.v, lb[i]) : 0);
    }
    nll_gather(c->x, c->xdt, off, n, loss);
    if (c->has_w) {
        nll_gather(c->w.p, c->w.dt, woff, n, wt);
    } else {
        for (int64_t i = 0; i < n; i++)
            wt[i] = woff[i] < 0 ? 0 : 1;
    }
    for (int64_t i = 0; i < n; i++)
        loss[i] = -wt[i] * loss[i];
}

static void nll_none_part(void *ctx, int64_t b, int64_t e)
{
    const struct nll_ctx *c = ctx;
    double loss[NN_BLK], wt[NN_BLK];

    for (int64_t s = b; s < e; s += NN_BLK) {
        int64_t n = nn_min(NN_BLK, e - s);
        nll_blk(c, s, n, loss, wt);
        run_store_d(c->out + s * esz(c->odt), c->odt, 1, n, loss);
    }
}

static void nll_sum_part(const void *ctx, int64_t b, int64_t e,
                         double acc[2])
{
    double loss[NN_BLK], wt[NN_BLK];

    for (int64_t s = b; s < e; s += NN_BLK) {
        int64_t n = nn_min(NN_BLK, e - s);
        nll_blk(ctx, s, n, loss, wt);
        for (int64_t i = 0; i < n; i++) {
            acc[0] += loss[i];
            acc[1] += wt[i];
        }
    }
}

/* The kit checked the launch; label values: [0, C) or ignore_index. */
static keel_status nll_check(const keel_kernel_args *a)
{
    const keel_tensor_desc *x = &a->inputs[0];

    return nn_check_range(a, 1, 0, x->shape[x->ndim == 1 ? 0 : 1], true,
                          kattr_i(a, "ignore_index", -100), "nll_loss",
                          "label");
}

static void nll_impl(const struct kcall *k)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *x = &a->inputs[0];
    struct nll_ctx c;
    int64_t ns;
    double tot[2];

    memset(&c, 0, sizeof(c));
    c.x = k->in[0];
    c.xdt = x->dtype;
    if (x->ndim == 1) {
        kv_init(&c.nv);
        kv_init(&c.kv);
        c.C = x->shape[0];
        c.cs = x->strides[0];
    } else {
        c.nv = kv_dims(x, 0, 1);
        c.kv = kv_dims(x, 2, x->ndim);
        c.C = x->shape[1];
        c.cs = x->strides[1];
    }
    c.K = c.kv.n;
    ns = c.nv.n * c.K;
    c.lab = vop_all(k->in[1], &a->inputs[1]);
    c.has_w = a->num_inputs > 2;
    if (c.has_w)
        c.w = vop_all(k->in[2], &a->inputs[2]);
    c.ignore = kattr_i(a, "ignore_index", -100);
    c.out = k->out[0];
    c.odt = a->outputs[0].dtype;
    if (keel_kit_reduction(a) == KEEL_KIT_RED_NONE) {
        cpu_parallel_for(ns, KGRAIN / 8, nll_none_part, &c);
        return;
    }
    nn_reduce(ns, 8, nll_sum_part, &c, tot);
    kstore(c.out, c.odt,
           keel_kit_reduction(a) == KEEL_KIT_RED_SUM
               ? tot[0]
               : tot[0] / (tot[1] != 0 ? tot[1] : 1));
}

KERNEL(k_nll_loss, "nll_loss", nll_impl, nll_check)

/* ---- embedding ----------------------------------------------------------- */

struct emb_ctx {
    struct vop ids;
    const char *w;
    int64_t ws0, ws1, V, D, es, pad;
    char *out;
};

static void emb_copy(char *o, const char *src, int64_t s, int64_t n,
                     int64_t es)
{
    if (s == 1) {
        memcpy(o, src, (size_t)(n * es));
        return;
    }
    switch (es) {
    case 2:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)o)[i] = ((const uint16_t *)src)[i * s];
        break;
    case 4:
        for (int64_t i = 0; i < n; i++)
            ((uint32_t *)o)[i] = ((const uint32_t *)src)[i * s];
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            ((uint64_t *)o)[i] = ((const uint64_t *)src)[i * s];
        break;
    }
}

static void emb_part(void *ctx, int64_t b, int64_t e)
{
    const struct emb_ctx *c = ctx;
    int64_t idb[NN_BLK];

    for (int64_t r0 = b; r0 < e; r0 += NN_BLK) {
        int64_t n = nn_min(NN_BLK, e - r0);
        ids_load(&c->ids, r0, n, idb);
        for (int64_t k = 0; k < n; k++) {
            char *o = c->out + (r0 + k) * c->D * c->es;
            if (idb[k] == c->pad || !nn_in(idb[k], c->V))
                memset(o, 0, (size_t)(c->D * c->es));
            else
                emb_copy(o, c->w + idb[k] * c->ws0 * c->es, c->ws1, c->D,
                         c->es);
        }
    }
}

/* The kit checked the launch; ids must index the table's rows. */
static keel_status emb_check(const keel_kernel_args *a)
{
    return nn_check_range(a, 0, 0, a->inputs[1].shape[0], false, 0,
                          "embedding", "id");
}

static void emb_impl(const struct kcall *k)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *w = &a->inputs[1];
    struct emb_ctx c;

    c.ids = vop_all(k->in[0], &a->inputs[0]);
    c.w = k->in[1];
    c.ws0 = w->strides[0];
    c.ws1 = w->strides[1];
    c.V = w->shape[0];
    c.D = w->shape[1];
    c.es = esz(w->dtype);
    c.pad = kattr_i(a, "padding_idx", -1);
    c.out = k->out[0];
    if (c.D == 0)
        return;
    cpu_parallel_for(c.ids.v.n, nn_grain(c.D), emb_part, &c);
}

static keel_status embg_check(const keel_kernel_args *a)
{
    return nn_check_range(a, 0, 0, a->outputs[0].shape[0], false, 0,
                          "embedding_grad", "id");
}

/* Bucket the ids by row (a counting sort): rows then sum their own dout
 * rows in id order, in parallel and deterministically. */
static void embg_impl(const struct kcall *k)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *dy = &a->inputs[1];
    int64_t V = a->outputs[0].shape[0], n, idb[NN_BLK];
    struct vop ids = vop_all(k->in[0], &a->inputs[0]);
    bool dbl = dy->dtype == KEEL_F64;
    int64_t *first, *order;
    struct embg_ctx c;

    c.D = dy->shape[dy->ndim - 1];
    if (V == 0 || c.D == 0)
        return;
    n = ids.v.n;
    c.dy = vop_of(k->in[1], dy->dtype, kv_line(c.D, dy->strides[dy->ndim - 1]));
    c.lead = kv_dims(dy, 0, dy->ndim - 1);
    c.out = vop_of(k->out[0], dy->dtype, kv_line(c.D, 1));
    c.pad = kattr_i(a, "padding_idx", -1);
    c.V = V;
    first = calloc((size_t)V + 1, sizeof(*first));
    order = malloc((size_t)(n ? n : 1) * sizeof(*order));
    if (!first || !order) {
        free(first);
        free(order);
        memset(k->out[0], 0, (size_t)(V * c.D * esz(dy->dtype)));
        NN_CALL(dbl, embg_serial, &c, &ids);
        return;
    }
    for (int64_t r = 0; r < n; r += NN_BLK) {
        int64_t m = nn_min(NN_BLK, n - r);
        ids_load(&ids, r, m, idb);
        for (int64_t i = 0; i < m; i++)
            if (nn_in(idb[i], V))
                first[idb[i] + 1]++;
    }
    for (int64_t v = 0; v < V; v++)
        first[v + 1] += first[v];
    for (int64_t r = 0; r < n; r += NN_BLK) {
        int64_t m = nn_min(NN_BLK, n - r);
        ids_load(&ids, r, m, idb);
        for (int64_t i = 0; i < m; i++)
            if (nn_in(idb[i], V))
                order[first[idb[i]]++] = r + i;
    }
    for (int64_t v = V; v > 0; v--)
        first[v] = first[v - 1];
    first[0] = 0;
    c.first = first;
    c.order = order;
    cpu_parallel_for(V, nn_grain(c.D + c.D * (n / V)),
                     dbl ? embg_part_d : embg_part_f, &c);
    free(first);
    free(order);
}

KERNEL(k_embedding, "embedding", emb_impl, emb_check)
KERNEL(k_embedding_grad, "embedding_grad", embg_impl, embg_check)

/* ---- dropout ------------------------------------------------------------- */

static void drop_impl(const struct kcall *k)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *x = &a->inputs[0];
    bool up = !strcmp(kattr_s(a, "mode", "upscale_in_train"),
                      "upscale_in_train");
    struct drop_ctx c;
    int64_t n = knumel(x);

    c.x = vop_all(k->in[0], x);
    c.out = vop_of(k->out[0], x->dtype, kv_line(n, 1));
    c.mask = k->out[1];
    c.seed = (uint64_t)kattr_i(a, "seed", 0);
    c.offset = (uint64_t)kattr_i(a, "offset", 0);
    c.p = kattr_f(a, "p", 0.5);
    c.train = kattr_i(a, "training", 1) != 0;
    if (c.train)
        c.scale = up ? (c.p < 1 ? 1 / (1 - c.p) : 0) : 1;
    else
        c.scale = up ? 1 : 1 - c.p;
    cpu_parallel_for(n, 8192, x->dtype == KEEL_F64 ? drop_part_d : drop_part_f,
                     &c);
}

KERNEL(k_dropout, "dropout", drop_impl, NULL)

/* ---- one_hot ------------------------------------------------------------- */

struct oh_ctx {
    struct vop x;
    int64_t nc;
    float *out;
};

static void oh_part(void *ctx, int64_t b, int64_t e)
{
    const struct oh_ctx *c = ctx;
    int64_t idb[NN_BLK];

    for (int64_t r0 = b; r0 < e; r0 += NN_BLK) {
        int64_t n = nn_min(NN_BLK, e - r0);
        memset(c->out + r0 * c->nc, 0, (size_t)(n * c->nc) * sizeof(float));
        ids_load(&c->x, r0, n, idb);
        for (int64_t k = 0; k < n; k++)
            if (nn_in(idb[k], c->nc))
                c->out[(r0 + k) * c->nc + idb[k]] = 1.0f;
    }
}

/* The kit checked the launch; classes must be in [0, num_classes). */
static keel_status oh_check(const keel_kernel_args *a)
{
    const keel_tensor_desc *o = &a->outputs[0];

    return nn_check_range(a, 0, 0, o->shape[o->ndim - 1], false, 0,
                          "one_hot", "class");
}

static void oh_impl(const struct kcall *k)
{
    const keel_tensor_desc *o = &k->a->outputs[0];
    struct oh_ctx c;

    c.x = vop_all(k->in[0], &k->a->inputs[0]);
    c.nc = o->shape[o->ndim - 1];
    c.out = k->out[0];
    cpu_parallel_for(c.x.v.n, nn_grain(c.nc), oh_part, &c);
}

KERNEL(k_one_hot, "one_hot", oh_impl, oh_check)

/* ---- optimizer updates --------------------------------------------------- */

static void opt_run(const struct kcall *k, int kind)
{
    const keel_kernel_args *a = k->a;
    struct opt_ctx c;
    double b1p, b2p, eps;

    memset(&c, 0, sizeof(c));
    c.kind = kind;
    c.p = vop_all(k->in[0], &a->inputs[0]);
    c.g = vop_all(k->in[1], &a->inputs[1]);
    if (a->num_inputs > 2)
        c.s1 = vop_all(k->in[2], &a->inputs[2]);
    if (a->num_inputs > 3)
        c.s2 = vop_all(k->in[3], &a->inputs[3]);
    c.lr = kattr_f(a, "lr", 0);
    c.wd = kind == OPT_ADAMW ? 0 : kattr_f(a, "weight_decay", 0);
    c.mu = kattr_f(a, "mu", 0.9);
    c.nesterov = kattr_i(a, "use_nesterov", 0) != 0;
    c.b1 = kattr_f(a, "beta1", 0.9);
    c.b2 = kattr_f(a, "beta2", 0.999);
    b1p = kattr_f(a, "beta1_pow", c.b1);
    b2p = kattr_f(a, "beta2_pow", c.b2);
    eps = kattr_f(a, "epsilon", 1e-8);
    c.lr_t = c.lr * sqrt(1 - b2p) / (1 - b1p);
    c.eps_t = eps * sqrt(1 - b2p);
    c.decay = kind == OPT_ADAMW ? c.lr * kattr_f(a, "coeff", 0.01) : 0;
    cpu_parallel_for(c.p.v.n, KGRAIN,
                     a->inputs[0].dtype == KEEL_F64 ? opt_part_d : opt_part_f,
                     &c);
}

static void sgd_impl(const struct kcall *k)
{
    opt_run(k, OPT_SGD);
}

static void momentum_impl(const struct kcall *k)
{
    opt_run(k, OPT_MOMENTUM);
}

static void adam_impl(const struct kcall *k)
{
    opt_run(k, OPT_ADAM);
}

static void adamw_impl(const struct kcall *k)
{
    opt_run(k, OPT_ADAMW);
}

KERNEL(k_sgd_update, "sgd_update", sgd_impl, NULL)
KERNEL(k_momentum_update, "momentum_update", momentum_impl, NULL)
KERNEL(k_adam_update, "adam_update", adam_impl, NULL)
KERNEL(k_adamw_update, "adamw_update", adamw_impl, NULL)

/* ---- check_finite_and_unscale -------------------------------------------- */

/*
 * As Paddle's kernel: inv = 1.0f / scale in float32 and x * inv in float32
 * (float16/bfloat16 x converted to float32 and the product rounded back);
 * a float64 x uses 1.0 / scale and the product in float64. found_inf is
 * only ever set, from the values before scaling; x is always written. The
 * kit has checked scale (float32) and found_inf (bool), one element each.
 */
static void unscale_impl(const struct kcall *k)
{
    const keel_kernel_args *a = k->a;
    bool dbl = a->inputs[0].dtype == KEEL_F64;
    struct unscale_ctx c;
    float scale;

    c.x = vop_all(k->in[0], &a->inputs[0]);
    if (c.x.v.n == 0)
        return;
    memcpy(&scale, k->in[1], sizeof(scale));
    c.inv = dbl ? 1.0 / (double)scale : (double)(1.0f / scale);
    atomic_init(&c.found, 0);
    cpu_parallel_for(c.x.v.n, KGRAIN, dbl ? unscale_part_d : unscale_part_f,
                     &c);
    if (atomic_load_explicit(&c.found, memory_order_relaxed))
        *(uint8_t *)k->in[2] = 1;
}

KERNEL(k_check_finite_and_unscale, "check_finite_and_unscale", unscale_impl,
       NULL)

const struct cpu_kernel_entry cpu_kernels_nn[] = {
    {"batch_norm", KEEL_DT_FLOAT, k_batch_norm},
    {"batch_norm_grad", KEEL_DT_FLOAT, k_batch_norm_grad},
    {"layer_norm", KEEL_DT_FLOAT, k_layer_norm},
    {"layer_norm_grad", KEEL_DT_FLOAT, k_layer_norm_grad},
    {"group_norm", KEEL_DT_FLOAT, k_group_norm},
    {"group_norm_grad", KEEL_DT_FLOAT, k_group_norm_grad},
    {"cross_entropy", KEEL_DT_FLOAT, k_cross_entropy},
    {"cross_entropy_grad", KEEL_DT_FLOAT, k_cross_entropy_grad},
    {"mse_loss", KEEL_DT_FLOAT, k_mse_loss},
    {"bce_with_logits", KEEL_DT_FLOAT, k_bce_with_logits},
    {"nll_loss", KEEL_DT_FLOAT, k_nll_loss},
    {"embedding", KEEL_DT_FLOAT, k_embedding},
    {"embedding_grad", KEEL_DT_FLOAT, k_embedding_grad},
    {"dropout", KEEL_DT_FLOAT, k_dropout},
    {"one_hot", KEEL_DT_INT, k_one_hot},
    {"sgd_update", KEEL_DT_FLOAT, k_sgd_update},
    {"momentum_update", KEEL_DT_FLOAT, k_momentum_update},
    {"adam_update", KEEL_DT_FLOAT, k_adam_update},
    {"adamw_update", KEEL_DT_FLOAT, k_adamw_update},
    {"check_finite_and_unscale", KEEL_DT_FLOAT, k_check_finite_and_unscale},
    {NULL, 0, NULL},
};

#else /* NN_T: the templated part, compiled once per compute type */

#define T NN_T
#define S NN_S

/* ---- runs and chunks ----------------------------------------------------- */

static void S(run_load)(const char *p, keel_dtype dt, int64_t s, int64_t n,
                        T *restrict d)
{
    switch (dt) {
    case KEEL_F32: {
        const float *q = (const float *)p;
        if (s == 1)
            NN_LOOP(i, n, d[i] = (T)q[i];);
        else
            for (int64_t i = 0; i < n; i++)
                d[i] = (T)q[i * s];
        break;
    }
    case KEEL_F64: {
        const double *q = (const double *)p;
        if (s == 1)
            NN_LOOP(i, n, d[i] = (T)q[i];);
        else
            for (int64_t i = 0; i < n; i++)
                d[i] = (T)q[i * s];
        break;
    }
    case KEEL_F16: {
        const uint16_t *q = (const uint16_t *)p;
#if NN_IS_FLOAT
        if (s == 1) {
            kf16_to_f32(q, d, n);
            break;
        }
#endif
        for (int64_t i = 0; i < n; i++)
            d[i] = (T)cpu_f16_to_f32(q[i * s]);
        break;
    }
    case KEEL_BF16: {
        const uint16_t *q = (const uint16_t *)p;
#if NN_IS_FLOAT
        if (s == 1) {
            kbf16_to_f32(q, d, n);
            break;
        }
#endif
        for (int64_t i = 0; i < n; i++)
            d[i] = (T)cpu_bf16_to_f32(q[i * s]);
        break;
    }
    default:
        for (int64_t i = 0; i < n; i++)
            d[i] = (T)kload(p + i * s * esz(dt), dt);
        break;
    }
}

static void S(run_store)(char *p, keel_dtype dt, int64_t s, int64_t n,
                         const T *restrict d)
{
    switch (dt) {
    case KEEL_F32: {
        float *q = (float *)p;
        if (s == 1)
            NN_LOOP(i, n, q[i] = (float)d[i];);
        else
            for (int64_t i = 0; i < n; i++)
                q[i * s] = (float)d[i];
        break;
    }
    case KEEL_F64: {
        double *q = (double *)p;
        if (s == 1)
            NN_LOOP(i, n, q[i] = (double)d[i];);
        else
            for (int64_t i = 0; i < n; i++)
                q[i * s] = (double)d[i];
        break;
    }
    case KEEL_F16: {
        uint16_t *q = (uint16_t *)p;
#if NN_IS_FLOAT
        if (s == 1) {
            kf32_to_f16(d, q, n);
            break;
        }
#endif
        for (int64_t i = 0; i < n; i++)
            q[i * s] = cpu_f32_to_f16((float)d[i]);
        break;
    }
    case KEEL_BF16: {
        uint16_t *q = (uint16_t *)p;
#if NN_IS_FLOAT
        if (s == 1) {
            kf32_to_bf16(d, q, n);
            break;
        }
#endif
        for (int64_t i = 0; i < n; i++)
            q[i * s] = cpu_f32_to_bf16((float)d[i]);
        break;
    }
    default:
        for (int64_t i = 0; i < n; i++)
            kstore(p + i * s * esz(dt), dt, (double)d[i]);
        break;
    }
}

struct S(io) {
    char *base;
    keel_dtype dt;
    T *buf;
};

static void S(load_cb)(void *ctx, int64_t off, int64_t s, int64_t n)
{
    struct S(io) *io = ctx;

    S(run_load)(io->base + off * esz(io->dt), io->dt, s, n, io->buf);
    io->buf += n;
}

static void S(store_cb)(void *ctx, int64_t off, int64_t s, int64_t n)
{
    struct S(io) *io = ctx;

    S(run_store)(io->base + off * esz(io->dt), io->dt, s, n, io->buf);
    io->buf += n;
}

/* True when chunks of o can be used in place. */
static inline bool S(direct)(const struct vop *o)
{
    return o->dt == NN_NATIVE && kv_contig(&o->v);
}

/* Elements [j, j + n) of o, read-only: in place or gathered into buf. */
static const T *S(get)(const struct vop *o, int64_t j, int64_t n, T *buf)
{
    struct S(io) io = {o->p, o->dt, buf};

    if (S(direct)(o))
        return (const T *)o->p + j;
    kv_walk(&o->v, j, n, S(load_cb), &io);
    return buf;
}

/* The same for reading and writing back with put(). */
static T *S(rw)(const struct vop *o, int64_t j, int64_t n, T *buf)
{
    return (T *)S(get)(o, j, n, buf);
}

/* Where to compute elements [j, ...) of an output chunk. */
static T *S(out)(const struct vop *o, int64_t j, T *buf)
{
    return S(direct)(o) ? (T *)o->p + j : buf;
}

/* Write a chunk computed at the address out()/rw() gave. */
static void S(put)(const struct vop *o, int64_t j, int64_t n, const T *src)
{
    struct S(io) io = {o->p, o->dt, (T *)src};

    if (!S(direct)(o))
        kv_walk(&o->v, j, n, S(store_cb), &io);
}

/* ---- block primitives (n <= NN_BLK) -------------------------------------- */

static double S(bsum)(const T *restrict x, int64_t n)
{
    T acc[NN_VL] = {0};
    double s = 0;
    int64_t i = 0;

    for (; i + NN_VL <= n; i += NN_VL)
        for (int k = 0; k < NN_VL; k++)
            acc[k] += x[i + k];
    for (int k = 0; k < NN_VL; k++)
        s += acc[k];
    for (; i < n; i++)
        s += x[i];
    return s;
}

static double S(bsqdev)(const T *restrict x, int64_t n, T m)
{
    T acc[NN_VL] = {0};
    double s = 0;
    int64_t i = 0;

    for (; i + NN_VL <= n; i += NN_VL)
        for (int k = 0; k < NN_VL; k++) {
            T d = x[i + k] - m;
            acc[k] += d * d;
        }
    for (int k = 0; k < NN_VL; k++)
        s += acc[k];
    for (; i < n; i++)
        s += (double)(x[i] - m) * (double)(x[i] - m);
    return s;
}

static double S(bdot)(const T *restrict a, const T *restrict b, int64_t n)
{
    T acc[NN_VL] = {0};
    double s = 0;
    int64_t i = 0;

    for (; i + NN_VL <= n; i += NN_VL)
        for (int k = 0; k < NN_VL; k++)
            acc[k] += a[i + k] * b[i + k];
    for (int k = 0; k < NN_VL; k++)
        s += acc[k];
    for (; i < n; i++)
        s += (double)a[i] * (double)b[i];
    return s;
}

/* Max of n >= 1 values (NaN ignored unless all are NaN). */
static T S(bmax)(const T *restrict x, int64_t n)
{
    T acc[NN_VL], m;
    int64_t i = 0;

    for (int k = 0; k < NN_VL; k++)
        acc[k] = x[0];
    for (; i + NN_VL <= n; i += NN_VL)
        for (int k = 0; k < NN_VL; k++)
            acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
    m = acc[0];
    for (int k = 1; k < NN_VL; k++)
        m = acc[k] > m ? acc[k] : m;
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

/* ---- normalisation over a view ------------------------------------------- */

/* Mean and biased variance of o's elements (two passes; 0, 0 if empty). */
static void S(v_moments)(const struct vop *o, double *mean, double *var)
{
    T buf[NN_BLK];
    int64_t n = o->v.n;
    double s = 0, q = 0;

    for (int64_t j = 0; j < n; j += NN_BLK) {
        int64_t m = nn_min(NN_BLK, n - j);
        s += S(bsum)(S(get)(o, j, m, buf), m);
    }
    *mean = n ? s / (double)n : 0;
    for (int64_t j = 0; j < n; j += NN_BLK) {
        int64_t m = nn_min(NN_BLK, n - j);
        q += S(bsqdev)(S(get)(o, j, m, buf), m, (T)*mean);
    }
    *var = n ? q / (double)n : 0;
}

/* y = (x - mean) * a * s + b, with s, b per-element (NULL: 1 and bc). */
static void S(baffine)(T *restrict y, const T *restrict x, int64_t n, T mean,
                       T a, T bc, const T *restrict s, const T *restrict b)
{
    if (s && b)
        NN_LOOP(i, n, y[i] = (x[i] - mean) * a * s[i] + b[i];);
    else if (s)
        NN_LOOP(i, n, y[i] = (x[i] - mean) * a * s[i] + bc;);
    else if (b)
        NN_LOOP(i, n, y[i] = (x[i] - mean) * a + b[i];);
    else
        NN_LOOP(i, n, y[i] = (x[i] - mean) * a + bc;);
}

static void S(v_affine)(const struct vop *x, const struct vop *y,
                        const struct vop *s, const struct vop *b, double mean,
                        double a, double bc)
{
    T xb[NN_BLK], yb[NN_BLK], sb[NN_BLK], bb[NN_BLK];

    for (int64_t j = 0; j < x->v.n; j += NN_BLK) {
        int64_t n = nn_min(NN_BLK, x->v.n - j);
        const T *xs = S(get)(x, j, n, xb);
        const T *ss = s ? S(get)(s, j, n, sb) : NULL;
        const T *bs = b ? S(get)(b, j, n, bb) : NULL;
        T *ys = S(out)(y, j, yb);
        S(baffine)(ys, xs, n, (T)mean, (T)a, (T)bc, ss, bs);
        S(put)(y, j, n, ys);
    }
}

/* Sums of g and g * xhat over a block, g = dy (* s). */
static void S(bdsums)(const T *restrict x, const T *restrict g,
                      const T *restrict s, int64_t n, T m, T r, double *sg,
                      double *sgx)
{
    T a1[NN_VL] = {0}, a2[NN_VL] = {0};
    double t1 = 0, t2 = 0;
    int64_t i = 0;

    if (s) {
        for (; i + NN_VL <= n; i += NN_VL)
            for (int k = 0; k < NN_VL; k++) {
                T gg = g[i + k] * s[i + k];
                a1[k] += gg;
                a2[k] += gg * ((x[i + k] - m) * r);
            }
    } else {
        for (; i + NN_VL <= n; i += NN_VL)
            for (int k = 0; k < NN_VL; k++) {
                a1[k] += g[i + k];
                a2[k] += g[i + k] * ((x[i + k] - m) * r);
            }
    }
    for (int k = 0; k < NN_VL; k++) {
        t1 += a1[k];
        t2 += a2[k];
    }
    for (; i < n; i++) {
        T gg = s ? g[i] * s[i] : g[i];
        t1 += gg;
        t2 += (double)gg * (double)((x[i] - m) * r);
    }
    *sg += t1;
    *sgx += t2;
}

/* Sum of g and of g * xhat over a view, xhat = (x - mean) * invstd. */
static void S(v_dsums)(const struct vop *x, const struct vop *dy,
                       const struct vop *s, double mean, double invstd,
                       double *sg, double *sgx)
{
    T xb[NN_BLK], db[NN_BLK], sb[NN_BLK];

    *sg = *sgx = 0;
    for (int64_t j = 0; j < x->v.n; j += NN_BLK) {
        int64_t n = nn_min(NN_BLK, x->v.n - j);
        S(bdsums)(S(get)(x, j, n, xb), S(get)(dy, j, n, db),
                  s ? S(get)(s, j, n, sb) : NULL, n, (T)mean, (T)invstd, sg,
                  sgx);
    }
}

/* o = a * g + b + c * xhat over a block, g = dy (* s). */
static void S(bdx)(T *restrict o, const T *restrict x, const T *restrict g,
                   const T *restrict s, int64_t n, T m, T r, T a, T b, T c)
{
    if (s)
        NN_LOOP(i, n, o[i] = a * g[i] * s[i] + b + c * ((x[i] - m) * r););
    else
        NN_LOOP(i, n, o[i] = a * g[i] + b + c * ((x[i] - m) * r););
}

/* dx = A * g + B + C * xhat over a view. */
static void S(v_dx)(const struct vop *x, const struct vop *dy,
                    const struct vop *s, const struct vop *dx, double mean,
                    double invstd, double A, double B, double C)
{
    T xb[NN_BLK], db[NN_BLK], sb[NN_BLK], ob[NN_BLK];

    for (int64_t j = 0; j < x->v.n; j += NN_BLK) {
        int64_t n = nn_min(NN_BLK, x->v.n - j);
        T *o = S(out)(dx, j, ob);
        S(bdx)(o, S(get)(x, j, n, xb), S(get)(dy, j, n, db),
               s ? S(get)(s, j, n, sb) : NULL, n, (T)mean, (T)invstd, (T)A,
               (T)B, (T)C);
        S(put)(dx, j, n, o);
    }
}

/* ---- layer_norm_grad: dscale and dbias by column blocks ------------------ */

static void S(bcolacc)(double *restrict ads, double *restrict adb,
                       const T *restrict x, const T *restrict dy, int64_t n,
                       T m, T r)
{
    NN_LOOP(i, n, ads[i] += (double)(dy[i] * ((x[i] - m) * r));
            adb[i] += (double)dy[i];);
}

static void S(lng_cols)(void *ctx, int64_t b, int64_t e)
{
    const struct lng_ctx *c = ctx;
    double ads[NN_BLK], adb[NN_BLK];
    T xb[NN_BLK], db[NN_BLK], ob[NN_BLK];

    for (int64_t blk = b; blk < e; blk++) {
        int64_t j0 = blk * NN_BLK, n = nn_min(NN_BLK, c->N - j0);
        T *o;

        memset(ads, 0, sizeof(ads));
        memset(adb, 0, sizeof(adb));
        for (int64_t m = 0; m < c->M; m++) {
            struct vop xr = vop_at(&c->x, kv_off(&c->lead_x, m));
            struct vop dr = vop_at(&c->dy, kv_off(&c->lead_dy, m));
            S(bcolacc)(ads, adb, S(get)(&xr, j0, n, xb),
                       S(get)(&dr, j0, n, db), n, (T)vop_get1(&c->mean, m),
                       (T)vop_get1(&c->inv, m));
        }
        o = S(out)(&c->ds, j0, ob);
        NN_LOOP(i, n, o[i] = (T)ads[i];);
        S(put)(&c->ds, j0, n, o);
        o = S(out)(&c->db, j0, ob);
        NN_LOOP(i, n, o[i] = (T)adb[i];);
        S(put)(&c->db, j0, n, o);
    }
}

/* ---- cross entropy ------------------------------------------------------- */

/* Sum of e^(x - m) over a block, x <= m. */
static double S(bexpsum)(const T *restrict x, int64_t n, T m)
{
    T acc[NN_VL] = {0};
    double s = 0;
    int64_t i = 0;

    for (; i + NN_VL <= n; i += NN_VL)
        for (int k = 0; k < NN_VL; k++)
            acc[k] += NN_EXPN(x[i + k] - m);
    for (int k = 0; k < NN_VL; k++)
        s += acc[k];
    for (; i < n; i++)
        s += NN_EXPN(x[i] - m);
    return s;
}

/* ln sum e^x of a row: running max and sum in one pass. */
static double S(row_lse)(const struct vop *x)
{
    T xb[NN_BLK], m = -INFINITY;
    double sum = 0;

    for (int64_t j = 0; j < x->v.n; j += NN_BLK) {
        int64_t n = nn_min(NN_BLK, x->v.n - j);
        const T *xs = S(get)(x, j, n, xb);
        T cm = S(bmax)(xs, n);
        if (cm > m) {
            sum *= exp((double)m - (double)cm);
            m = cm;
        }
        sum += S(bexpsum)(xs, n, m);
    }
    return (double)m + log(sum);
}

/*
 * log p of a block: x - lse for logits; for probabilities ln x, clamped
 * at -1e20 as Paddle's TolerableValue does (so 0 * ln 0 stays 0).
 */
static void S(blogp)(T *restrict lp, const T *restrict x, int64_t n, T lse,
                     bool use_softmax)
{
    if (use_softmax) {
        NN_LOOP(i, n, lp[i] = x[i] - lse;);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        T v = NN_LOG(x[i]);
        lp[i] = v < (T)-1e20 ? (T)-1e20 : v;
    }
}

/* y = e^x, x <= 0 (log-probabilities). */
static void S(bexp)(T *restrict y, const T *restrict x, int64_t n)
{
    NN_LOOP(i, n, y[i] = NN_EXPN(x[i]););
}

static void S(bcopy)(T *restrict y, const T *restrict x, int64_t n)
{
    NN_LOOP(i, n, y[i] = x[i];);
}

/*
 * One sample: writes its softmax row (a copy of the input when
 * use_softmax is off) and returns its weighted loss and weight. Targets
 * are t' = (1 - eps) t + eps / C, t the one-hot or soft label; the weight
 * is sum t'_c w_c (Paddle's weight_gather), w[y] for plain hard labels.
 */
static void S(ce_fwd)(const struct ce_ctx *c, int64_t s, double *loss,
                      double *wi)
{
    T xb[NN_BLK], lb[NN_BLK], yb[NN_BLK], tb[NN_BLK], wb[NN_BLK];
    struct vop xr = geo_row(c->x, c->xdt, &c->xg, s, c->C);
    struct vop yr = geo_row(c->sm, c->smdt, &c->smg, s, c->C), tr;
    const double e = c->eps, ec = c->eps / (double)c->C;
    double lse = 0, stl = 0, stw = 0, sl = 0, ce, w;
    int64_t y = 0;

    if (c->soft)
        tr = geo_row(c->lab, c->ldt, &c->lg, s, c->C);
    else
        y = ids_get1(&c->hard, s);
    if (c->use_softmax)
        lse = S(row_lse)(&xr);
    for (int64_t j = 0; j < c->C; j += NN_BLK) {
        int64_t n = nn_min(NN_BLK, c->C - j);
        const T *xs = S(get)(&xr, j, n, xb);
        T *ys = S(out)(&yr, j, yb);

        S(blogp)(lb, xs, n, (T)lse, c->use_softmax);
        if (c->use_softmax)
            S(bexp)(ys, lb, n);
        else
            S(bcopy)(ys, xs, n);
        S(put)(&yr, j, n, ys);
        if (c->soft) {
            const T *ts = S(get)(&tr, j, n, tb);
            stl += S(bdot)(ts, lb, n);
            if (c->has_w)
                stw += S(bdot)(ts, S(get)(&c->w, j, n, wb), n);
        }
        if (e > 0)
            sl += S(bsum)(lb, n);
    }
    if (!c->soft && (y == c->ignore || !nn_in(y, c->C))) {
        *loss = *wi = 0;
        return;
    }
    if (c->soft) {
        ce = -(1 - e) * stl - ec * sl;
        w = c->has_w ? (1 - e) * stw + ec * c->wsum : 1;
    } else {
        T v = (T)vop_get1(&xr, y), lpy;
        S(blogp)(&lpy, &v, 1, (T)lse, c->use_softmax);
        ce = -(1 - e) * (double)lpy - ec * sl;
        w = c->has_w ? (1 - e) * vop_get1(&c->w, y) + ec * c->wsum : 1;
    }
    *loss = w * ce;
    *wi = w;
}

/* The weight of one sample (0 when ignored) and, for soft labels, the
 * sum of its label row. */
static double S(ce_weight)(const struct ce_ctx *c, int64_t s, double *st)
{
    T tb[NN_BLK], wb[NN_BLK];
    const double e = c->eps, ec = c->eps / (double)c->C;
    double stw = 0;

    *st = 1;
    if (!c->soft) {
        int64_t y = ids_get1(&c->hard, s);
        if (y == c->ignore || !nn_in(y, c->C))
            return 0;
        return c->has_w ? (1 - e) * vop_get1(&c->w, y) + ec * c->wsum : 1;
    }
    {
        struct vop tr = geo_row(c->lab, c->ldt, &c->lg, s, c->C);
        *st = 0;
        for (int64_t j = 0; j < c->C; j += NN_BLK) {
            int64_t n = nn_min(NN_BLK, c->C - j);
            const T *ts = S(get)(&tr, j, n, tb);
            *st += S(bsum)(ts, n);
            if (c->has_w)
                stw += S(bdot)(ts, S(get)(&c->w, j, n, wb), n);
        }
    }
    return c->has_w ? (1 - e) * stw + ec * c->wsum : 1;
}

/*
 * dlogits of a block. Logits: gw (p sum t' - t'); probabilities:
 * -gw t' / p. t NULL: a hard label, whose (1 - eps) one-hot part the
 * caller adds.
 */
static void S(bceg)(T *restrict o, const T *restrict p, const T *restrict t,
                    int64_t n, T gw, T st1, T e1, T ec, bool use_softmax)
{
    if (use_softmax) {
        if (t)
            NN_LOOP(i, n, o[i] = gw * (p[i] * st1 - (e1 * t[i] + ec)););
        else
            NN_LOOP(i, n, o[i] = gw * (p[i] - ec););
    } else if (t) {
        NN_LOOP(i, n, o[i] = -gw * (e1 * t[i] + ec) / p[i];);
    } else if (ec != 0) {
        NN_LOOP(i, n, o[i] = -gw * ec / p[i];);
    } else {
        NN_LOOP(i, n, o[i] = 0;);
    }
}

static void S(ce_bwd)(const struct ce_ctx *c, int64_t s, double g)
{
    T pb[NN_BLK], tb[NN_BLK], ob[NN_BLK];
    struct vop pr = geo_row(c->x, c->xdt, &c->xg, s, c->C);
    struct vop dr = geo_row(c->dx, c->dxdt, &c->dxg, s, c->C), tr;
    const double e = c->eps, ec = c->eps / (double)c->C;
    double st, wi = S(ce_weight)(c, s, &st), gw = g * wi;
    int64_t y = c->soft ? 0 : ids_get1(&c->hard, s);
    bool zero = !c->soft && (y == c->ignore || !nn_in(y, c->C));

    if (c->soft)
        tr = geo_row(c->lab, c->ldt, &c->lg, s, c->C);
    for (int64_t j = 0; j < c->C; j += NN_BLK) {
        int64_t n = nn_min(NN_BLK, c->C - j);
        const T *ps = S(get)(&pr, j, n, pb);
        T *o = S(out)(&dr, j, ob);

        if (zero) {
            NN_LOOP(i, n, o[i] = 0;);
        } else {
            S(bceg)(o, ps, c->soft ? S(get)(&tr, j, n, tb) : NULL, n, (T)gw,
                    (T)((1 - e) * st + e), (T)(1 - e), (T)ec,
                    c->use_softmax);
            if (!c->soft && y >= j && y < j + n)
                o[y - j] -= c->use_softmax ? (T)(gw * (1 - e))
                                           : (T)(gw * (1 - e)) / ps[y - j];
        }
        S(put)(&dr, j, n, o);
    }
}

/* ---- mse_loss, bce_with_logits ------------------------------------------- */

static void S(bmse)(T *restrict o, const T *restrict x, const T *restrict y,
                    int64_t n)
{
    NN_LOOP(i, n, T d = x[i] - y[i]; o[i] = d * d;);
}

/* max(x, 0) - x y + ln(1 + e^-|x|) */
static void S(bbce)(T *restrict o, const T *restrict x, const T *restrict y,
                    int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        T v = x[i], a = v < 0 ? -v : v;
        o[i] = (v > 0 ? v : 0) - v * y[i] + NN_LOG1P(NN_EXPN(-a));
    }
}

/* (1 - y) x + (1 + (pw - 1) y) (ln(1 + e^-|x|) + max(-x, 0)) */
static void S(bbce_pw)(T *restrict o, const T *restrict x,
                       const T *restrict y, const T *restrict pw, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        T v = x[i], a = v < 0 ? -v : v;
        o[i] = (1 - y[i]) * v + (1 + (pw[i] - 1) * y[i]) *
                                    (NN_LOG1P(NN_EXPN(-a)) + (v < 0 ? -v : 0));
    }
}

static void S(loss_blk)(const struct loss_ctx *c, int64_t j, int64_t n,
                        T *dst)
{
    T xb[NN_BLK], yb[NN_BLK], pb[NN_BLK];
    const T *x = S(get)(&c->x, j, n, xb), *y = S(get)(&c->y, j, n, yb);

    if (!c->bce)
        S(bmse)(dst, x, y, n);
    else if (c->has_pw)
        S(bbce_pw)(dst, x, y, S(get)(&c->pw, j, n, pb), n);
    else
        S(bbce)(dst, x, y, n);
}

/* reduction none: the loss of elements [b, e) */
static void S(loss_none)(void *ctx, int64_t b, int64_t e)
{
    const struct loss_ctx *c = ctx;
    T ob[NN_BLK];

    for (int64_t j = b; j < e; j += NN_BLK) {
        int64_t n = nn_min(NN_BLK, e - j);
        T *o = S(out)(&c->out, j, ob);
        S(loss_blk)(c, j, n, o);
        S(put)(&c->out, j, n, o);
    }
}

static void S(loss_sum)(const void *ctx, int64_t b, int64_t e, double acc[2])
{
    T ob[NN_BLK];

    for (int64_t j = b; j < e; j += NN_BLK) {
        int64_t n = nn_min(NN_BLK, e - j);
        S(loss_blk)(ctx, j, n, ob);
        acc[0] += S(bsum)(ob, n);
    }
}

/* ---- dropout ------------------------------------------------------------- */

static void S(bdrop)(T *restrict o, const T *restrict x,
                     const uint8_t *restrict m, int64_t n, T sc)
{
    for (int64_t i = 0; i < n; i++)
        o[i] = m[i] ? x[i] * sc : (T)0;
}

static void S(bscale)(T *restrict o, const T *restrict x, int64_t n, T sc)
{
    NN_LOOP(i, n, o[i] = x[i] * sc;);
}

static void S(drop_part)(void *ctx, int64_t b, int64_t e)
{
    const struct drop_ctx *c = ctx;
    T xb[NN_BLK], ob[NN_BLK];

    for (int64_t j = b; j < e; j += NN_BLK) {
        int64_t n = nn_min(NN_BLK, e - j);
        const T *xs = S(get)(&c->x, j, n, xb);
        T *o = S(out)(&c->out, j, ob);

        if (c->train) {
            drop_mask(c->seed, c->offset + (uint64_t)j, n, c->p, c->mask + j);
            S(bdrop)(o, xs, c->mask + j, n, (T)c->scale);
        } else {
            memset(c->mask + j, 1, (size_t)n);
            S(bscale)(o, xs, n, (T)c->scale);
        }
        S(put)(&c->out, j, n, o);
    }
}

/* ---- optimizer updates --------------------------------------------------- */

static void S(bsgd)(T *restrict p, const T *restrict g, int64_t n, T lr, T wd)
{
    NN_LOOP(i, n, p[i] -= lr * (g[i] + wd * p[i]););
}

static void S(bmomentum)(T *restrict p, const T *restrict g, T *restrict v,
                         int64_t n, T lr, T wd, T mu, bool nesterov)
{
    if (nesterov)
        NN_LOOP(i, n, T gg = g[i] + wd * p[i]; v[i] = mu * v[i] + gg;
                p[i] -= lr * (gg + mu * v[i]););
    else
        NN_LOOP(i, n, T gg = g[i] + wd * p[i]; v[i] = mu * v[i] + gg;
                p[i] -= lr * v[i];);
}

/*
 * Adam (wd: L2 added to the gradient) and AdamW (decay = lr * coeff,
 * applied to p first). The square roots get a loop of their own
 * (cpu_vsqrt_f32/f64): with errno semantics gcc does not vectorise sqrt().
 */
static void S(badam)(T *restrict p, const T *restrict g, T *restrict m,
                     T *restrict v, T *restrict d, int64_t n, T b1, T b2,
                     T wd, T decay, T lr_t, T eps_t)
{
    const T c1 = 1 - b1, c2 = 1 - b2;

    NN_LOOP(i, n, T gg = g[i] + wd * p[i]; p[i] -= decay * p[i];
            m[i] = b1 * m[i] + c1 * gg; v[i] = b2 * v[i] + c2 * gg * gg;);
    NN_VSQRT(d, v, n);
    NN_LOOP(i, n, p[i] -= lr_t * m[i] / (d[i] + eps_t););
}

static void S(opt_part)(void *ctx, int64_t b, int64_t e)
{
    const struct opt_ctx *c = ctx;
    T pb[NN_BLK], gb[NN_BLK], s1b[NN_BLK], s2b[NN_BLK], db[NN_BLK];

    for (int64_t j = b; j < e; j += NN_BLK) {
        int64_t n = nn_min(NN_BLK, e - j);
        T *p = S(rw)(&c->p, j, n, pb), *s1, *s2;
        const T *g = S(get)(&c->g, j, n, gb);

        switch (c->kind) {
        case OPT_SGD:
            S(bsgd)(p, g, n, (T)c->lr, (T)c->wd);
            break;
        case OPT_MOMENTUM:
            s1 = S(rw)(&c->s1, j, n, s1b);
            S(bmomentum)(p, g, s1, n, (T)c->lr, (T)c->wd, (T)c->mu,
                         c->nesterov);
            S(put)(&c->s1, j, n, s1);
            break;
        default:
            s1 = S(rw)(&c->s1, j, n, s1b);
            s2 = S(rw)(&c->s2, j, n, s2b);
            S(badam)(p, g, s1, s2, db, n, (T)c->b1, (T)c->b2, (T)c->wd,
                     (T)c->decay, (T)c->lr_t, (T)c->eps_t);
            S(put)(&c->s1, j, n, s1);
            S(put)(&c->s2, j, n, s2);
            break;
        }
        S(put)(&c->p, j, n, p);
    }
}

/* ---- check_finite_and_unscale -------------------------------------------- */

/* x *= inv; whether some x was not finite before. */
static bool S(bunscale)(T *restrict x, int64_t n, T inv)
{
    int bad = 0;

    NN_LOOP(i, n, bad |= !isfinite(x[i]); x[i] *= inv;);
    return bad != 0;
}

static void S(unscale_part)(void *ctx, int64_t b, int64_t e)
{
    struct unscale_ctx *c = ctx;
    const T inv = (T)c->inv;
    T xb[NN_BLK];
    bool bad = false;

    for (int64_t j = b; j < e; j += NN_BLK) {
        int64_t n = nn_min(NN_BLK, e - j);
        T *x = S(rw)(&c->x, j, n, xb);

        bad |= S(bunscale)(x, n, inv);
        S(put)(&c->x, j, n, x);
    }
    if (bad)
        atomic_store_explicit(&c->found, 1, memory_order_relaxed);
}

/* ---- embedding_grad ------------------------------------------------------ */

static void S(badd)(T *restrict acc, const T *restrict x, int64_t n)
{
    NN_LOOP(i, n, acc[i] += x[i];);
}

/* Rows [b, e) of dtable: each the sum of its bucket's dout rows. */
static void S(embg_part)(void *ctx, int64_t b, int64_t e)
{
    const struct embg_ctx *c = ctx;
    T rb[NN_BLK], ob[NN_BLK];

    for (int64_t v = b; v < e; v++) {
        struct vop orow = vop_at(&c->out, v * c->D);
        for (int64_t j = 0; j < c->D; j += NN_BLK) {
            int64_t n = nn_min(NN_BLK, c->D - j);
            T *o = S(out)(&orow, j, ob);

            NN_LOOP(i, n, o[i] = 0;);
            for (int64_t k = c->first[v]; v != c->pad && k < c->first[v + 1];
                 k++) {
                struct vop r = vop_at(&c->dy, kv_off(&c->lead, c->order[k]));
                S(badd)(o, S(get)(&r, j, n, rb), n);
            }
            S(put)(&orow, j, n, o);
        }
    }
}

/* Without scratch memory: serial scatter-add into the zeroed output. */
static void S(embg_serial)(const struct embg_ctx *c, const struct vop *ids)
{
    T rb[NN_BLK], ob[NN_BLK];
    int64_t idb[NN_BLK];

    for (int64_t r0 = 0; r0 < ids->v.n; r0 += NN_BLK) {
        int64_t nr = nn_min(NN_BLK, ids->v.n - r0);
        ids_load(ids, r0, nr, idb);
        for (int64_t k = 0; k < nr; k++) {
            struct vop orow, r;
            if (idb[k] == c->pad || !nn_in(idb[k], c->V))
                continue;
            orow = vop_at(&c->out, idb[k] * c->D);
            r = vop_at(&c->dy, kv_off(&c->lead, r0 + k));
            for (int64_t j = 0; j < c->D; j += NN_BLK) {
                int64_t n = nn_min(NN_BLK, c->D - j);
                T *o = S(rw)(&orow, j, n, ob);
                S(badd)(o, S(get)(&r, j, n, rb), n);
                S(put)(&orow, j, n, o);
            }
        }
    }
}


#undef T
#undef S

#endif /* NN_T */
