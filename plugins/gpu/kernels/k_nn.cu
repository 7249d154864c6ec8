/*
 * keel CUDA plugin — nn kernels: batch/layer/group norm and their grads,
 * cross entropy (+grad), mse / bce-with-logits / nll losses, embedding
 * (+grad), dropout, one_hot and the in-place optimizer updates.
 *
 * DESIGN
 *
 * Operands are walked through "views" (struct nv): a subset of a
 * descriptor's dims, size-1 dims dropped and contiguous neighbours merged,
 * row-major, strides in elements; nv_off maps a flat index of the walk to
 * an element offset. Element loads and stores switch on the dtype at run
 * time (the switch is uniform across a launch, so it costs little) and
 * compute in float (f32, f16, bf16) or double (f64): the kernels are
 * templates on that compute type only, so auxiliary operands (scale,
 * running statistics, weights) may have any floating dtype, as on the CPU.
 *
 * Parallelisation:
 *   - batch_norm(+grad): one block per channel (grid-stride over channels),
 *     two-pass moments with block reductions;
 *   - layer_norm(+grad), cross_entropy(+grad): one block per row / sample,
 *     block size picked from the row length; layer_norm_grad's dscale and
 *     dbias come from a column kernel (32 columns x 8 row lanes per block);
 *   - group_norm: one block per (sample, group); its grad adds one block
 *     per channel for dscale/dbias;
 *   - reductions to a scalar loss: per-block (or per-sample) partial sums
 *     in double scratch, then one single-block kernel adds them in a fixed
 *     order and stores the result, all on the stream (no host waits);
 *   - elementwise ops (dropout, optimizer updates, unreduced losses) use
 *     ck_iter / ck_for_each; embedding and one_hot use one thread per
 *     output element; embedding_grad sorts the ids stably (radix
 *     sort) and sums each dtable element's dout values in id order, so it
 *     is deterministic.
 *
 * Arguments are checked by the kernel kit (keel/kit.h) in ck_begin, from
 * the descriptors and attributes; the kernels below only read them.
 * Unlike the CPU plugin, labels and ids are not range-checked before the
 * launch (that would need the values on the host); out-of-range values are
 * treated as the CPU impls treat them: ignored (zero rows, zero loss).
 */
#include <math.h>
#include <string.h>


#include "ck.cuh"
#include "ck_sort.cuh"

namespace {

/* ---- views --------------------------------------------------------------- */

struct nv {
    int nd;
    int64_t n;
    int64_t shape[KEEL_MAX_DIMS];
    int64_t stride[KEEL_MAX_DIMS]; /* elements */
};

void nv_init(nv *v)
{
    memset(v, 0, sizeof(*v));
    v->n = 1;
}

/* Append an inner dim of n elements s apart. */
void nv_dim(nv *v, int64_t n, int64_t s)
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

nv nv_dims(const keel_tensor_desc *d, int from, int to)
{
    nv v;

    nv_init(&v);
    for (int i = from; i < to; i++)
        nv_dim(&v, d->shape[i], d->strides[i]);
    return v;
}

__device__ __forceinline__ int64_t nv_off(const nv &v, int64_t i)
{
    if (v.nd == 0)
        return 0;
    if (v.nd == 1)
        return i * v.stride[0];
    int64_t off = 0;
    for (int d = v.nd - 1; d >= 0; d--) {
        int64_t q = i / v.shape[d];
        off += (i - q * v.shape[d]) * v.stride[d];
        i = q;
    }
    return off;
}

/* An operand: address of its element 0, dtype and a walk. */
struct opd {
    char *p;
    int dt;
    nv v;
};

opd opd_of(const keel_tensor_desc *d, const nv &v)
{
    opd o;

    o.p = (char *)(uintptr_t)d->data;
    o.dt = (int)d->dtype;
    o.v = v;
    return o;
}

opd opd_all(const keel_tensor_desc *d)
{
    return opd_of(d, nv_dims(d, 0, d->ndim));
}

/* ---- element access ------------------------------------------------------ */

template <class C>
__device__ __forceinline__ C ldx(const char *p, int dt, int64_t off)
{
    switch (dt) {
    case KEEL_F32: return (C)((const float *)p)[off];
    case KEEL_F64: return (C)((const double *)p)[off];
    case KEEL_F16: return (C)ck_h2f(((const ck_half *)p)[off]);
    case KEEL_BF16:
        return (C)ck_bf2f(((const ck_bf16 *)p)[off]);
    default: return (C)0;
    }
}

template <class C>
__device__ __forceinline__ void stx(char *p, int dt, int64_t off, C v)
{
    switch (dt) {
    case KEEL_F32: ((float *)p)[off] = (float)v; break;
    case KEEL_F64: ((double *)p)[off] = (double)v; break;
    case KEEL_F16: ((ck_half *)p)[off] = ck_f2h((float)v); break;
    case KEEL_BF16:
        ((ck_bf16 *)p)[off] = ck_f2bf((float)v);
        break;
    default: break;
    }
}

/* Integer element (labels, ids) as int64. */
__device__ __forceinline__ int64_t ldi(const char *p, int dt, int64_t off)
{
    switch (dt) {
    case KEEL_I64: return ((const int64_t *)p)[off];
    case KEEL_I32: return ((const int32_t *)p)[off];
    case KEEL_I8: return ((const int8_t *)p)[off];
    case KEEL_U8:
    case KEEL_BOOL: return ((const uint8_t *)p)[off];
    default: return -1;
    }
}

/* Element i of an operand's walk. */
template <class C> __device__ __forceinline__ C ldv(const opd &o, int64_t i)
{
    return ldx<C>(o.p, o.dt, nv_off(o.v, i));
}

template <class C>
__device__ __forceinline__ void stv(const opd &o, int64_t i, C v)
{
    stx<C>(o.p, o.dt, nv_off(o.v, i), v);
}

__device__ __forceinline__ int64_t ldvi(const opd &o, int64_t i)
{
    return ldi(o.p, o.dt, nv_off(o.v, i));
}

__device__ __forceinline__ bool in_range(int64_t v, int64_t n)
{
    return (uint64_t)v < (uint64_t)n;
}

/* Math in the compute type. */
__device__ __forceinline__ float m_exp(float v) { return expf(v); }
__device__ __forceinline__ double m_exp(double v) { return exp(v); }
__device__ __forceinline__ float m_log(float v) { return logf(v); }
__device__ __forceinline__ double m_log(double v) { return log(v); }
__device__ __forceinline__ float m_log1p(float v) { return log1pf(v); }
__device__ __forceinline__ double m_log1p(double v) { return log1p(v); }
__device__ __forceinline__ float m_sqrt(float v) { return sqrtf(v); }
__device__ __forceinline__ double m_sqrt(double v) { return sqrt(v); }

/* Max over the block (blockDim.x a multiple of 32); all threads get it. */
template <class T> __device__ T blk_max(T v)
{
    __shared__ T part[32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int nw = (blockDim.x + 31) >> 5;

    v = ck_warp_max(v);
    __syncthreads();
    if (lane == 0)
        part[w] = v;
    __syncthreads();
    v = lane < nw ? part[lane] : part[0];
    return ck_warp_max(v);
}

/* ---- host helpers -------------------------------------------------------- */

/* Which input is which and how x splits (keel/kit.h); ck_begin checked
 * the launch, so this cannot fail. */
keel_kit_norm norm_of(const keel_kernel_args *a, int op)
{
    keel_kit_norm g;

    (void)keel_kit_norm_geometry(op, a, &g, NULL);
    return g;
}

/* Threads per block for rows of n elements (a multiple of 32). */
int row_block(int64_t n)
{
    return n <= 32 ? 32 : n <= 64 ? 64 : n <= 128 ? 128 : 256;
}

/* Blocks for `rows` rows handled by a grid-stride loop (rows > 0). */
unsigned row_grid(int64_t rows)
{
    return (unsigned)(rows < 65535 ? (rows > 0 ? rows : 1) : 65535);
}

/* ---- scalar finalisation ------------------------------------------------- */

enum { FIN_SUM, FIN_MEAN_W, FIN_MEAN_N };

/*
 * One block: adds the np pairs part[2k], part[2k + 1] in a fixed order and
 * stores, by mode, a, a / (b != 0 ? b : 1), or a / cnt (NaN when cnt is 0).
 */
__global__ void fin_kernel(const double *part, int64_t np, int mode,
                           int64_t cnt, char *out, int dt)
{
    double a = 0, b = 0;

    for (int64_t k = threadIdx.x; k < np; k += blockDim.x) {
        a += part[2 * k];
        b += part[2 * k + 1];
    }
    a = ck_block_sum(a);
    b = ck_block_sum(b);
    if (threadIdx.x != 0)
        return;
    double v;
    if (mode == FIN_SUM)
        v = a;
    else if (mode == FIN_MEAN_W)
        v = a / (b != 0 ? b : 1);
    else
        v = cnt ? a / (double)cnt : (double)NAN;
    stx<double>(out, dt, 0, v);
}

void fin_launch(const struct ck_launch *l, const double *part, int64_t np,
                int mode, int64_t cnt, const keel_tensor_desc *out)
{
    fin_kernel<<<1, 256, 0, l->stream>>>(part, np, mode, cnt,
                                         (char *)(uintptr_t)out->data,
                                         (int)out->dtype);
}

/* ---- batch_norm ---------------------------------------------------------- */

/* The walk over one channel of [N, C, ...]: dims 0, 2, 3, ... */
nv bn_walk(const keel_tensor_desc *d)
{
    nv v;

    nv_init(&v);
    nv_dim(&v, d->shape[0], d->strides[0]);
    for (int i = 2; i < d->ndim; i++)
        nv_dim(&v, d->shape[i], d->strides[i]);
    return v;
}

struct bn_args {
    opd x, y, dy;           /* channel walks at channel 0 */
    int64_t xcs, ycs, dycs; /* channel strides */
    opd scale, bias, rm, rv, mean, inv; /* [C] inputs */
    opd o1, o2;             /* [C] outputs */
    int64_t C;
    double momentum, eps;
    int training;
};

template <class C> __global__ void bn_fwd_kernel(bn_args a)
{
    const int64_t n = a.x.v.n;

    for (int64_t ch = blockIdx.x; ch < a.C; ch += gridDim.x) {
        const int64_t xo = ch * a.xcs, yo = ch * a.ycs;
        double mean, var;

        if (a.training) {
            C s = 0, q = 0;
            for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
                s += ldx<C>(a.x.p, a.x.dt, xo + nv_off(a.x.v, j));
            s = ck_block_sum(s);
            mean = n ? (double)s / (double)n : 0;
            const C m = (C)mean;
            for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
                C d = ldx<C>(a.x.p, a.x.dt, xo + nv_off(a.x.v, j)) - m;
                q += d * d;
            }
            q = ck_block_sum(q);
            var = n ? (double)q / (double)n : 0;
            /* An empty batch leaves the running statistics alone. */
            if (threadIdx.x == 0 && n > 0) {
                stv<double>(a.rm, ch, a.momentum * ldv<double>(a.rm, ch) +
                                          (1 - a.momentum) * mean);
                stv<double>(a.rv, ch, a.momentum * ldv<double>(a.rv, ch) +
                                          (1 - a.momentum) * var);
            }
        } else {
            mean = ldv<double>(a.rm, ch);
            var = ldv<double>(a.rv, ch);
        }
        const double inv = 1 / sqrt(var + a.eps);
        const C cm = (C)mean, ca = (C)(inv * ldv<double>(a.scale, ch));
        const C cb = (C)ldv<double>(a.bias, ch);
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            C v = ldx<C>(a.x.p, a.x.dt, xo + nv_off(a.x.v, j));
            stx<C>(a.y.p, a.y.dt, yo + nv_off(a.y.v, j), (v - cm) * ca + cb);
        }
        if (threadIdx.x == 0) {
            stv<double>(a.o1, ch, mean);
            stv<double>(a.o2, ch, inv);
        }
    }
}

/*
 * dx = s invstd (dy - mean(dy) - xhat mean(dy xhat)) in training, s invstd
 * dy with global statistics; dscale = sum dy xhat, dbias = sum dy.
 */
template <class C> __global__ void bn_bwd_kernel(bn_args a)
{
    const int64_t n = a.x.v.n;

    for (int64_t ch = blockIdx.x; ch < a.C; ch += gridDim.x) {
        const int64_t xo = ch * a.xcs, yo = ch * a.ycs, go = ch * a.dycs;
        const double mean = ldv<double>(a.mean, ch);
        const double inv = ldv<double>(a.inv, ch);
        const double A = ldv<double>(a.scale, ch) * inv, m = (double)n;
        const C cm = (C)mean, cr = (C)inv;
        C sg = 0, sgx = 0;

        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            C x = ldx<C>(a.x.p, a.x.dt, xo + nv_off(a.x.v, j));
            C g = ldx<C>(a.dy.p, a.dy.dt, go + nv_off(a.dy.v, j));
            sg += g;
            sgx += g * ((x - cm) * cr);
        }
        sg = ck_block_sum(sg);
        sgx = ck_block_sum(sgx);
        if (n > 0) {
            const C ca = (C)A;
            const C cb = a.training ? (C)(-A * (double)sg / m) : (C)0;
            const C cc = a.training ? (C)(-A * (double)sgx / m) : (C)0;
            for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
                C x = ldx<C>(a.x.p, a.x.dt, xo + nv_off(a.x.v, j));
                C g = ldx<C>(a.dy.p, a.dy.dt, go + nv_off(a.dy.v, j));
                stx<C>(a.y.p, a.y.dt, yo + nv_off(a.y.v, j),
                       ca * g + cb + cc * ((x - cm) * cr));
            }
        }
        if (threadIdx.x == 0) {
            stv<double>(a.o1, ch, (double)sgx);
            stv<double>(a.o2, ch, (double)sg);
        }
    }
}

keel_status bn_run(const keel_kernel_args *a, bool grad)
{
    const char *op = grad ? "batch_norm_grad" : "batch_norm";
    struct ck_launch l;
    keel_status st = ck_begin(a, op, &l);

    if (st)
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *y = &a->outputs[0];
    bn_args b;
    memset(&b, 0, sizeof(b));
    b.x = opd_of(x, bn_walk(x));
    b.xcs = x->strides[1];
    b.y = opd_of(y, bn_walk(y));
    b.ycs = y->strides[1];
    b.o1 = opd_all(&a->outputs[1]);
    b.o2 = opd_all(&a->outputs[2]);
    b.C = x->shape[1];
    b.eps = ck_attr_f(a, "epsilon", 1e-5);
    b.training = ck_attr_i(a, "training", 1) != 0;
    b.scale = opd_all(&a->inputs[1]);
    if (grad) {
        b.mean = opd_all(&a->inputs[2]);
        b.inv = opd_all(&a->inputs[3]);
        b.dy = opd_of(&a->inputs[4], bn_walk(&a->inputs[4]));
        b.dycs = a->inputs[4].strides[1];
    } else {
        b.bias = opd_all(&a->inputs[2]);
        b.rm = opd_all(&a->inputs[3]);
        b.rv = opd_all(&a->inputs[4]);
        b.momentum = ck_attr_f(a, "momentum", 0.9);
    }
    if (b.C == 0)
        return KEEL_STATUS_OK;
    unsigned g = row_grid(b.C);
    int bs = row_block(b.x.v.n);
    bool dbl = x->dtype == KEEL_F64;
    if (grad) {
        if (dbl)
            bn_bwd_kernel<double><<<g, bs, 0, l.stream>>>(b);
        else
            bn_bwd_kernel<float><<<g, bs, 0, l.stream>>>(b);
    } else {
        if (dbl)
            bn_fwd_kernel<double><<<g, bs, 0, l.stream>>>(b);
        else
            bn_fwd_kernel<float><<<g, bs, 0, l.stream>>>(b);
    }
    return ck_end(&l);
}

keel_status k_batch_norm(void *, const keel_kernel_args *a)
{
    return bn_run(a, false);
}

keel_status k_batch_norm_grad(void *, const keel_kernel_args *a)
{
    return bn_run(a, true);
}

/* ---- layer_norm ---------------------------------------------------------- */

/*
 * Row m of x is at nv_off(xl, m) and its element j at nv_off(x.v, j) from
 * there (xl: the leading dims, x.v: the normalised dims); the same for the
 * other row operands.
 */
struct ln_args {
    opd x, y, dy;
    nv xl, yl, dyl;
    opd s, b, mean, inv; /* s, b: N values; mean, inv: M values */
    opd ds, db;          /* grad: N values each */
    int has_s, has_b;
    int64_t M, N;
    double eps;
};

template <class C> __global__ void ln_fwd_kernel(ln_args a)
{
    const int64_t N = a.N;

    for (int64_t m = blockIdx.x; m < a.M; m += gridDim.x) {
        const int64_t xo = nv_off(a.xl, m), yo = nv_off(a.yl, m);
        C s = 0, q = 0;

        for (int64_t j = threadIdx.x; j < N; j += blockDim.x)
            s += ldx<C>(a.x.p, a.x.dt, xo + nv_off(a.x.v, j));
        s = ck_block_sum(s);
        const double mean = N ? (double)s / (double)N : 0;
        const C cm = (C)mean;
        for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
            C d = ldx<C>(a.x.p, a.x.dt, xo + nv_off(a.x.v, j)) - cm;
            q += d * d;
        }
        q = ck_block_sum(q);
        const double var = N ? (double)q / (double)N : 0;
        const double inv = 1 / sqrt(var + a.eps);
        const C ca = (C)inv;
        for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
            C v = (ldx<C>(a.x.p, a.x.dt, xo + nv_off(a.x.v, j)) - cm) * ca;
            if (a.has_s)
                v = v * ldv<C>(a.s, j);
            v = v + (a.has_b ? ldv<C>(a.b, j) : (C)0);
            stx<C>(a.y.p, a.y.dt, yo + nv_off(a.y.v, j), v);
        }
        if (threadIdx.x == 0) {
            stv<double>(a.mean, m, mean);
            stv<double>(a.inv, m, inv);
        }
    }
}

/* dx = inv g + B + C xhat per row, g = dy (* s). */
template <class C> __global__ void ln_bwd_rows(ln_args a)
{
    const int64_t N = a.N;

    for (int64_t m = blockIdx.x; m < a.M; m += gridDim.x) {
        const int64_t xo = nv_off(a.xl, m), go = nv_off(a.dyl, m);
        const int64_t yo = nv_off(a.yl, m);
        const double mean = ldv<double>(a.mean, m);
        const double inv = ldv<double>(a.inv, m);
        const C cm = (C)mean, cr = (C)inv;
        C sg = 0, sgx = 0;

        for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
            C x = ldx<C>(a.x.p, a.x.dt, xo + nv_off(a.x.v, j));
            C g = ldx<C>(a.dy.p, a.dy.dt, go + nv_off(a.dy.v, j));
            if (a.has_s)
                g = g * ldv<C>(a.s, j);
            sg += g;
            sgx += g * ((x - cm) * cr);
        }
        sg = ck_block_sum(sg);
        sgx = ck_block_sum(sgx);
        if (N == 0)
            continue;
        const C cb = (C)(-inv * (double)sg / (double)N);
        const C cc = (C)(-inv * (double)sgx / (double)N);
        for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
            C x = ldx<C>(a.x.p, a.x.dt, xo + nv_off(a.x.v, j));
            C g = cr * ldx<C>(a.dy.p, a.dy.dt, go + nv_off(a.dy.v, j));
            if (a.has_s)
                g = g * ldv<C>(a.s, j);
            stx<C>(a.y.p, a.y.dt, yo + nv_off(a.y.v, j),
                   g + cb + cc * ((x - cm) * cr));
        }
    }
}

/*
 * dscale[j] = sum_m dy xhat, dbias[j] = sum_m dy, in double. Blocks of
 * 32 x 8 threads: threadIdx.x picks the column, threadIdx.y strides over
 * the rows, and the 8 partial sums are added through shared memory.
 */
template <class C> __global__ void ln_bwd_cols(ln_args a)
{
    __shared__ double sds[8][33], sdb[8][33];
    const int tx = threadIdx.x, ty = threadIdx.y;

    for (int64_t j0 = (int64_t)blockIdx.x * 32; j0 < a.N;
         j0 += (int64_t)gridDim.x * 32) {
        const int64_t j = j0 + tx;
        const bool ok = j < a.N;
        double ads = 0, adb = 0;

        if (ok) {
            const int64_t xj = nv_off(a.x.v, j), gj = nv_off(a.dy.v, j);
            for (int64_t m = ty; m < a.M; m += 8) {
                const C cm = (C)ldv<double>(a.mean, m);
                const C cr = (C)ldv<double>(a.inv, m);
                C x = ldx<C>(a.x.p, a.x.dt, nv_off(a.xl, m) + xj);
                C g = ldx<C>(a.dy.p, a.dy.dt, nv_off(a.dyl, m) + gj);
                ads += (double)(g * ((x - cm) * cr));
                adb += (double)g;
            }
        }
        sds[ty][tx] = ads;
        sdb[ty][tx] = adb;
        __syncthreads();
        if (ty == 0 && ok) {
            for (int k = 1; k < 8; k++) {
                ads += sds[k][tx];
                adb += sdb[k][tx];
            }
            stv<double>(a.ds, j, ads);
            stv<double>(a.db, j, adb);
        }
        __syncthreads();
    }
}

keel_status k_layer_norm(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "layer_norm", &l);

    if (st)
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *y = &a->outputs[0];
    const keel_kit_norm g = norm_of(a, KEEL_OP_LAYER_NORM);
    const int b = g.axis;
    ln_args c;
    memset(&c, 0, sizeof(c));
    c.xl = nv_dims(x, 0, b);
    c.yl = nv_dims(y, 0, b);
    c.x = opd_of(x, nv_dims(x, b, x->ndim));
    c.y = opd_of(y, nv_dims(y, b, y->ndim));
    c.M = c.xl.n;
    c.N = c.x.v.n;
    c.has_s = g.scale >= 0;
    c.has_b = g.bias >= 0;
    if (c.has_s)
        c.s = opd_all(&a->inputs[g.scale]);
    if (c.has_b)
        c.b = opd_all(&a->inputs[g.bias]);
    c.mean = opd_all(&a->outputs[1]);
    c.inv = opd_all(&a->outputs[2]);
    c.eps = ck_attr_f(a, "epsilon", 1e-5);
    if (c.M == 0)
        return KEEL_STATUS_OK;
    if (x->dtype == KEEL_F64)
        ln_fwd_kernel<double>
            <<<row_grid(c.M), row_block(c.N), 0, l.stream>>>(c);
    else
        ln_fwd_kernel<float>
            <<<row_grid(c.M), row_block(c.N), 0, l.stream>>>(c);
    return ck_end(&l);
}

keel_status k_layer_norm_grad(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "layer_norm_grad", &l);

    if (st)
        return st;
    const keel_kit_norm g = norm_of(a, KEEL_OP_LAYER_NORM_GRAD);
    const keel_tensor_desc *x = &a->inputs[0], *dx = &a->outputs[0];
    const keel_tensor_desc *dy = &a->inputs[g.dy];
    const int b = g.axis;
    ln_args c;
    memset(&c, 0, sizeof(c));
    c.xl = nv_dims(x, 0, b);
    c.x = opd_of(x, nv_dims(x, b, x->ndim));
    c.M = c.xl.n;
    c.N = c.x.v.n;
    c.dyl = nv_dims(dy, 0, b);
    c.dy = opd_of(dy, nv_dims(dy, b, dy->ndim));
    c.yl = nv_dims(dx, 0, b);
    c.y = opd_of(dx, nv_dims(dx, b, dx->ndim));
    c.has_s = g.scale >= 0;
    if (c.has_s)
        c.s = opd_all(&a->inputs[g.scale]);
    c.mean = opd_all(&a->inputs[g.stat[0]]);
    c.inv = opd_all(&a->inputs[g.stat[1]]);
    c.ds = opd_all(&a->outputs[1]);
    c.db = opd_all(&a->outputs[2]);
    bool dbl = x->dtype == KEEL_F64;
    if (c.M > 0 && c.N > 0) {
        if (dbl)
            ln_bwd_rows<double>
                <<<row_grid(c.M), row_block(c.N), 0, l.stream>>>(c);
        else
            ln_bwd_rows<float>
                <<<row_grid(c.M), row_block(c.N), 0, l.stream>>>(c);
    }
    if (c.N > 0) {
        unsigned g = row_grid((c.N + 31) / 32);
        dim3 bs(32, 8);
        if (dbl)
            ln_bwd_cols<double><<<g, bs, 0, l.stream>>>(c);
        else
            ln_bwd_cols<float><<<g, bs, 0, l.stream>>>(c);
    }
    return ck_end(&l);
}

/* ---- group_norm ---------------------------------------------------------- */

/*
 * x is [N, C, spatial...]; element k of one (n, group) is channel
 * g * cg + k / S, spatial position k % S (S = spatial size), at
 * n * s0 + ch * s1 + nv_off(spatial walk, k % S).
 */
struct gn_args {
    opd x, y, dy;                 /* spatial walks */
    int64_t xs0, xs1, ys0, ys1, gs0, gs1;
    opd s, b, mean, inv, o1, o2;
    int has_s, has_b;
    int64_t N, C, G, cg, S;
    double eps;
};

__device__ __forceinline__ int64_t gn_off(const opd &o, int64_t s0,
                                          int64_t s1, int64_t n, int64_t ch,
                                          int64_t sp)
{
    return n * s0 + ch * s1 + nv_off(o.v, sp);
}

template <class C> __global__ void gn_fwd_kernel(gn_args a)
{
    const int64_t cnt = a.cg * a.S;

    for (int64_t ng = blockIdx.x; ng < a.N * a.G; ng += gridDim.x) {
        const int64_t n = ng / a.G, c0 = (ng % a.G) * a.cg;
        C s = 0, q = 0;

        for (int64_t k = threadIdx.x; k < cnt; k += blockDim.x) {
            int64_t ch = c0 + k / a.S, sp = k % a.S;
            s += ldx<C>(a.x.p, a.x.dt, gn_off(a.x, a.xs0, a.xs1, n, ch, sp));
        }
        s = ck_block_sum(s);
        const double mean = cnt ? (double)s / (double)cnt : 0;
        const C cm = (C)mean;
        for (int64_t k = threadIdx.x; k < cnt; k += blockDim.x) {
            int64_t ch = c0 + k / a.S, sp = k % a.S;
            C d = ldx<C>(a.x.p, a.x.dt,
                         gn_off(a.x, a.xs0, a.xs1, n, ch, sp)) - cm;
            q += d * d;
        }
        q = ck_block_sum(q);
        const double var = cnt ? (double)q / (double)cnt : 0;
        const double inv = 1 / sqrt(var + a.eps);
        for (int64_t k = threadIdx.x; k < cnt; k += blockDim.x) {
            int64_t ch = c0 + k / a.S, sp = k % a.S;
            double sc = a.has_s ? ldv<double>(a.s, ch) : 1;
            C ca = (C)(inv * sc);
            C cb = a.has_b ? (C)ldv<double>(a.b, ch) : (C)0;
            C v = ldx<C>(a.x.p, a.x.dt, gn_off(a.x, a.xs0, a.xs1, n, ch, sp));
            stx<C>(a.y.p, a.y.dt, gn_off(a.y, a.ys0, a.ys1, n, ch, sp),
                   (v - cm) * ca + cb);
        }
        if (threadIdx.x == 0) {
            stv<double>(a.o1, ng, mean);
            stv<double>(a.o2, ng, inv);
        }
    }
}

/* Per (n, group): dx = invstd (s dy - mean(s dy) - xhat mean(s dy xhat)). */
template <class C> __global__ void gn_bwd_groups(gn_args a)
{
    const int64_t cnt = a.cg * a.S;

    for (int64_t ng = blockIdx.x; ng < a.N * a.G; ng += gridDim.x) {
        const int64_t n = ng / a.G, c0 = (ng % a.G) * a.cg;
        const double mean = ldv<double>(a.mean, ng);
        const double inv = ldv<double>(a.inv, ng);
        const C cm = (C)mean, cr = (C)inv;
        C sa = 0, sb = 0;

        for (int64_t k = threadIdx.x; k < cnt; k += blockDim.x) {
            int64_t ch = c0 + k / a.S, sp = k % a.S;
            C x = ldx<C>(a.x.p, a.x.dt, gn_off(a.x, a.xs0, a.xs1, n, ch, sp));
            C g = ldx<C>(a.dy.p, a.dy.dt,
                         gn_off(a.dy, a.gs0, a.gs1, n, ch, sp));
            C sg = a.has_s ? ldv<C>(a.s, ch) * g : g;
            sa += sg;
            sb += sg * ((x - cm) * cr);
        }
        sa = ck_block_sum(sa);
        sb = ck_block_sum(sb);
        if (cnt == 0)
            continue;
        const C cb = (C)(-inv * (double)sa / (double)cnt);
        const C cc = (C)(-inv * (double)sb / (double)cnt);
        for (int64_t k = threadIdx.x; k < cnt; k += blockDim.x) {
            int64_t ch = c0 + k / a.S, sp = k % a.S;
            double sc = a.has_s ? ldv<double>(a.s, ch) : 1;
            C x = ldx<C>(a.x.p, a.x.dt, gn_off(a.x, a.xs0, a.xs1, n, ch, sp));
            C g = ldx<C>(a.dy.p, a.dy.dt,
                         gn_off(a.dy, a.gs0, a.gs1, n, ch, sp));
            stx<C>(a.y.p, a.y.dt, gn_off(a.y, a.ys0, a.ys1, n, ch, sp),
                   (C)(inv * sc) * g + cb + cc * ((x - cm) * cr));
        }
    }
}

/* Per channel: dscale = sum dy xhat, dbias = sum dy over n and space. */
template <class C> __global__ void gn_bwd_channels(gn_args a)
{
    const int64_t cnt = a.N * a.S;

    for (int64_t ch = blockIdx.x; ch < a.C; ch += gridDim.x) {
        const int64_t grp = ch / a.cg;
        C ds = 0, db = 0;

        for (int64_t k = threadIdx.x; k < cnt; k += blockDim.x) {
            int64_t n = k / a.S, sp = k % a.S, ng = n * a.G + grp;
            C cm = (C)ldv<double>(a.mean, ng), cr = (C)ldv<double>(a.inv, ng);
            C x = ldx<C>(a.x.p, a.x.dt, gn_off(a.x, a.xs0, a.xs1, n, ch, sp));
            C g = ldx<C>(a.dy.p, a.dy.dt,
                         gn_off(a.dy, a.gs0, a.gs1, n, ch, sp));
            ds += g * ((x - cm) * cr);
            db += g;
        }
        ds = ck_block_sum(ds);
        db = ck_block_sum(db);
        if (threadIdx.x == 0) {
            stv<double>(a.o1, ch, (double)ds);
            stv<double>(a.o2, ch, (double)db);
        }
    }
}

void gn_setup(const keel_kernel_args *a, gn_args *c)
{
    const keel_tensor_desc *x = &a->inputs[0], *y = &a->outputs[0];

    memset(c, 0, sizeof(*c));
    c->N = x->shape[0];
    c->C = x->shape[1];
    c->G = ck_attr_i(a, "groups", 1);
    c->cg = c->C / c->G;
    c->x = opd_of(x, nv_dims(x, 2, x->ndim));
    c->S = c->x.v.n;
    c->xs0 = x->strides[0];
    c->xs1 = x->strides[1];
    c->y = opd_of(y, nv_dims(y, 2, y->ndim));
    c->ys0 = y->strides[0];
    c->ys1 = y->strides[1];
    c->o1 = opd_all(&a->outputs[1]);
    c->o2 = opd_all(&a->outputs[2]);
    c->eps = ck_attr_f(a, "epsilon", 1e-5);
}

keel_status k_group_norm(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "group_norm", &l);

    if (st)
        return st;
    const keel_tensor_desc *x = &a->inputs[0];
    const keel_kit_norm g = norm_of(a, KEEL_OP_GROUP_NORM);
    gn_args c;
    gn_setup(a, &c);
    c.has_s = g.scale >= 0;
    c.has_b = g.bias >= 0;
    if (c.has_s)
        c.s = opd_all(&a->inputs[g.scale]);
    if (c.has_b)
        c.b = opd_all(&a->inputs[g.bias]);
    if (c.N * c.G == 0)
        return KEEL_STATUS_OK;
    unsigned gr = row_grid(c.N * c.G);
    int bs = row_block(c.cg * c.S);
    if (x->dtype == KEEL_F64)
        gn_fwd_kernel<double><<<gr, bs, 0, l.stream>>>(c);
    else
        gn_fwd_kernel<float><<<gr, bs, 0, l.stream>>>(c);
    return ck_end(&l);
}

keel_status k_group_norm_grad(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "group_norm_grad", &l);

    if (st)
        return st;
    const keel_kit_norm g = norm_of(a, KEEL_OP_GROUP_NORM_GRAD);
    const keel_tensor_desc *x = &a->inputs[0];
    const keel_tensor_desc *dy = &a->inputs[g.dy];
    gn_args c;
    gn_setup(a, &c);
    c.dy = opd_of(dy, nv_dims(dy, 2, dy->ndim));
    c.gs0 = dy->strides[0];
    c.gs1 = dy->strides[1];
    c.has_s = g.scale >= 0;
    if (c.has_s)
        c.s = opd_all(&a->inputs[g.scale]);
    c.mean = opd_all(&a->inputs[g.stat[0]]);
    c.inv = opd_all(&a->inputs[g.stat[1]]);
    bool dbl = x->dtype == KEEL_F64;
    if (c.N * c.G > 0) {
        unsigned gr = row_grid(c.N * c.G);
        int bs = row_block(c.cg * c.S);
        if (dbl)
            gn_bwd_groups<double><<<gr, bs, 0, l.stream>>>(c);
        else
            gn_bwd_groups<float><<<gr, bs, 0, l.stream>>>(c);
    }
    if (c.C > 0) {
        unsigned gr = row_grid(c.C);
        int bs = row_block(c.N * c.S);
        if (dbl)
            gn_bwd_channels<double><<<gr, bs, 0, l.stream>>>(c);
        else
            gn_bwd_channels<float><<<gr, bs, 0, l.stream>>>(c);
    }
    return ck_end(&l);
}

/* ---- cross_entropy ------------------------------------------------------- */

/*
 * Where the class values of one sample lie: sample s is (o, i) with
 * o = s / ninner over the dims before the class axis and i = s % ninner
 * over the dims after it; class j is cs elements further per step.
 */
struct geo {
    char *p;
    int dt;
    nv outer, inner;
    int64_t ninner, cs;
};

geo geo_of(const keel_tensor_desc *d, int axis)
{
    geo g;

    g.p = (char *)(uintptr_t)d->data;
    g.dt = (int)d->dtype;
    g.outer = nv_dims(d, 0, axis);
    g.inner = nv_dims(d, axis + 1, d->ndim);
    g.ninner = g.inner.n;
    g.cs = d->strides[axis];
    return g;
}

__device__ __forceinline__ int64_t geo_row(const geo &g, int64_t s)
{
    int64_t o = g.ninner ? s / g.ninner : 0;
    int64_t i = g.ninner ? s - o * g.ninner : 0;

    return nv_off(g.outer, o) + nv_off(g.inner, i);
}

template <class C>
__device__ __forceinline__ C geo_ld(const geo &g, int64_t row, int64_t j)
{
    return ldx<C>(g.p, g.dt, row + j * g.cs);
}

struct ce_args {
    geo x, sm, lab, dx;
    opd hard, w, dloss;
    char *loss;
    int lossdt;
    int soft, use_softmax, has_w, red;
    int64_t C, ns, ignore;
    double eps;
    double *part;      /* forward: (loss, weight) per sample; grad: weights */
    const double *tot; /* grad, mean: the sum of the weights */
    int64_t denom_n;   /* mean divides by this when > 0 (see ce_mean_n) */
};

/*
 * Paddle's 'mean' without class weights, hard labels and ignore_index < 0
 * divides by all N samples (ignored ones count as zero loss); otherwise by
 * the sum of the kept samples' weights (their count without weights).
 * Returns N for the first case, 0 for the second.
 */
static int64_t ce_mean_n(const ce_args &c)
{
    return !c.has_w && !c.soft && c.ignore < 0 ? c.ns : 0;
}

/* log p of one value: x - lse for logits; for probabilities ln x, clamped
 * at -1e20 (so 0 * ln 0 stays 0). */
template <class C>
__device__ __forceinline__ C ce_logp(C x, C lse, bool use_softmax)
{
    if (use_softmax)
        return x - lse;
    C v = m_log(x);
    return v < (C)-1e20 ? (C)-1e20 : v;
}

/* Sum of the class weights (only needed with label smoothing). Called by
 * the whole block. */
template <class C> __device__ double ce_wsum(const ce_args &a)
{
    if (!a.has_w || !(a.eps > 0))
        return 0;
    C s = 0;
    for (int64_t j = threadIdx.x; j < a.C; j += blockDim.x)
        s += ldv<C>(a.w, j);
    return (double)ck_block_sum(s);
}

/*
 * One block per sample: writes the softmax row (a copy of the input when
 * use_softmax is off) and the weighted loss; targets are
 * t' = (1 - eps) t + eps / C and the weight is sum t'_c w_c (w[y] for
 * plain hard labels).
 */
template <class C> __global__ void ce_fwd_kernel(ce_args a)
{
    const double e = a.eps, ec = a.eps / (double)a.C;
    const double wsum = ce_wsum<C>(a);

    for (int64_t s = blockIdx.x; s < a.ns; s += gridDim.x) {
        const int64_t xr = geo_row(a.x, s), yr = geo_row(a.sm, s);
        const int64_t tr = a.soft ? geo_row(a.lab, s) : 0;
        double lse = 0;

        if (a.use_softmax) {
            C m = (C)-INFINITY, se = 0;
            for (int64_t j = threadIdx.x; j < a.C; j += blockDim.x) {
                C v = geo_ld<C>(a.x, xr, j);
                m = v > m ? v : m;
            }
            m = blk_max(m);
            for (int64_t j = threadIdx.x; j < a.C; j += blockDim.x)
                se += m_exp(geo_ld<C>(a.x, xr, j) - m);
            se = ck_block_sum(se);
            lse = (double)m + log((double)se);
        }
        const C cl = (C)lse;
        C stl = 0, stw = 0, sl = 0;
        for (int64_t j = threadIdx.x; j < a.C; j += blockDim.x) {
            C v = geo_ld<C>(a.x, xr, j);
            C lp = ce_logp(v, cl, a.use_softmax);
            stx<C>(a.sm.p, a.sm.dt, yr + j * a.sm.cs,
                   a.use_softmax ? m_exp(lp) : v);
            if (a.soft) {
                C t = geo_ld<C>(a.lab, tr, j);
                stl += t * lp;
                if (a.has_w)
                    stw += t * ldv<C>(a.w, j);
            }
            sl += lp;
        }
        stl = ck_block_sum(stl);
        stw = ck_block_sum(stw);
        sl = e > 0 ? ck_block_sum(sl) : (C)0;
        if (threadIdx.x != 0)
            continue;
        double loss = 0, wi = 0;
        if (a.soft) {
            double ce = -(1 - e) * (double)stl - ec * (double)sl;
            wi = a.has_w ? (1 - e) * (double)stw + ec * wsum : 1;
            loss = wi * ce;
        } else {
            int64_t y = ldvi(a.hard, s);
            if (y != a.ignore && in_range(y, a.C)) {
                C lpy = ce_logp(geo_ld<C>(a.x, xr, y), cl, a.use_softmax);
                double ce = -(1 - e) * (double)lpy - ec * (double)sl;
                wi = a.has_w ? (1 - e) * ldv<double>(a.w, y) + ec * wsum : 1;
                loss = wi * ce;
            }
        }
        if (a.red == KEEL_KIT_RED_NONE) {
            stx<double>(a.loss, a.lossdt, s, loss);
        } else {
            a.part[2 * s] = loss;
            a.part[2 * s + 1] = wi;
        }
    }
}

/* The weight of sample s (0 when ignored) and, for soft labels, the sum of
 * its label row (*st; 1 for hard labels). Called by the whole block. */
template <class C>
__device__ double ce_weight(const ce_args &a, int64_t s, double wsum,
                            double *st)
{
    const double e = a.eps, ec = a.eps / (double)a.C;

    *st = 1;
    if (!a.soft) {
        int64_t y = ldvi(a.hard, s);
        if (y == a.ignore || !in_range(y, a.C))
            return 0;
        return a.has_w ? (1 - e) * ldv<double>(a.w, y) + ec * wsum : 1;
    }
    const int64_t tr = geo_row(a.lab, s);
    C ts = 0, tw = 0;
    for (int64_t j = threadIdx.x; j < a.C; j += blockDim.x) {
        C t = geo_ld<C>(a.lab, tr, j);
        ts += t;
        if (a.has_w)
            tw += t * ldv<C>(a.w, j);
    }
    ts = ck_block_sum(ts);
    tw = ck_block_sum(tw);
    *st = (double)ts;
    return a.has_w ? (1 - e) * (double)tw + ec * wsum : 1;
}

/* grad, reduction mean: per-sample weights into part (pairs, b = 0). */
template <class C> __global__ void ce_wts_kernel(ce_args a)
{
    const double wsum = ce_wsum<C>(a);

    for (int64_t s = blockIdx.x; s < a.ns; s += gridDim.x) {
        double st, wi = ce_weight<C>(a, s, wsum, &st);
        if (threadIdx.x == 0) {
            a.part[2 * s] = wi;
            a.part[2 * s + 1] = 0;
        }
    }
}

/*
 * dlogits of one sample. Logits: gw (p sum t' - t'); probabilities:
 * -gw t' / p; for a hard label the (1 - eps) one-hot part is taken off
 * at the label's class.
 */
template <class C> __global__ void ce_bwd_kernel(ce_args a)
{
    const double e = a.eps, ec = a.eps / (double)a.C;
    const double wsum = ce_wsum<C>(a);
    double g0 = 0;

    if (a.red != KEEL_KIT_RED_NONE) {
        g0 = ldv<double>(a.dloss, 0);
        if (a.red == KEEL_KIT_RED_MEAN)
            g0 /= a.denom_n > 0 ? (double)a.denom_n
                                : (*a.tot != 0 ? *a.tot : 1);
    }
    for (int64_t s = blockIdx.x; s < a.ns; s += gridDim.x) {
        const int64_t pr = geo_row(a.x, s), dr = geo_row(a.dx, s);
        const int64_t tr = a.soft ? geo_row(a.lab, s) : 0;
        double st, wi = ce_weight<C>(a, s, wsum, &st);
        double g = a.red == KEEL_KIT_RED_NONE ? ldv<double>(a.dloss, s) : g0;
        const double gwd = g * wi;
        const int64_t y = a.soft ? -1 : ldvi(a.hard, s);
        const bool zero = !a.soft && (y == a.ignore || !in_range(y, a.C));
        const C gw = (C)gwd, st1 = (C)((1 - e) * st + e), e1 = (C)(1 - e);
        const C cec = (C)ec, hy = (C)(gwd * (1 - e));

        for (int64_t j = threadIdx.x; j < a.C; j += blockDim.x) {
            C o = 0;
            if (!zero) {
                C p = geo_ld<C>(a.x, pr, j);
                if (a.use_softmax) {
                    if (a.soft)
                        o = gw * (p * st1 -
                                  (e1 * geo_ld<C>(a.lab, tr, j) + cec));
                    else
                        o = gw * (p - cec);
                    if (j == y)
                        o -= hy;
                } else {
                    if (a.soft)
                        o = -gw * (e1 * geo_ld<C>(a.lab, tr, j) + cec) / p;
                    else if (cec != (C)0)
                        o = -gw * cec / p;
                    if (j == y)
                        o -= hy / p;
                }
            }
            stx<C>(a.dx.p, a.dx.dt, dr + j * a.dx.cs, o);
        }
    }
}

keel_status ce_run(const keel_kernel_args *a, bool grad)
{
    const char *op = grad ? "cross_entropy_grad" : "cross_entropy";
    struct ck_launch l;
    keel_status st = ck_begin(a, op, &l);

    if (st)
        return st;
    const int wi = grad ? 3 : 2;
    const keel_tensor_desc *x = &a->inputs[0], *lab = &a->inputs[1];
    const bool soft = ck_attr_i(a, "soft_label", 0) != 0;
    int axis = ck_axis(ck_attr_i(a, "axis", -1), x->ndim);
    int red = keel_kit_reduction(a);
    const int64_t C = x->shape[axis], ns = ck_numel(x) / C;
    const bool has_w = a->num_inputs > wi;
    const keel_tensor_desc *o = &a->outputs[grad ? 0 : 1];

    ce_args c;
    memset(&c, 0, sizeof(c));
    c.C = C;
    c.ns = ns;
    c.x = geo_of(x, axis);
    c.soft = soft;
    c.use_softmax = ck_attr_i(a, "use_softmax", 1) != 0;
    c.ignore = ck_attr_i(a, "ignore_index", -100);
    c.eps = ck_attr_f(a, "label_smoothing", 0);
    c.red = red;
    c.has_w = has_w;
    if (soft)
        c.lab = geo_of(lab, axis);
    else
        c.hard = opd_all(lab);
    if (has_w)
        c.w = opd_all(&a->inputs[wi]);
    const bool dbl = x->dtype == KEEL_F64;
    const int bs = row_block(C);
    void *scratch = NULL;

    if (!grad) {
        c.sm = geo_of(o, axis);
        c.loss = (char *)(uintptr_t)a->outputs[0].data;
        c.lossdt = (int)a->outputs[0].dtype;
        if (red != KEEL_KIT_RED_NONE &&
            (st = ck_scratch(&l, (size_t)(2 * ns) * sizeof(double),
                             &scratch)))
            return st;
        c.part = (double *)scratch;
        if (ns > 0) {
            if (dbl)
                ce_fwd_kernel<double>
                    <<<row_grid(ns), bs, 0, l.stream>>>(c);
            else
                ce_fwd_kernel<float><<<row_grid(ns), bs, 0, l.stream>>>(c);
        }
        c.denom_n = ce_mean_n(c);
        if (red != KEEL_KIT_RED_NONE)
            fin_launch(&l, c.part, ns,
                       red == KEEL_KIT_RED_SUM ? FIN_SUM
                       : c.denom_n > 0 ? FIN_MEAN_N : FIN_MEAN_W,
                       c.denom_n, &a->outputs[0]);
        ck_scratch_free(&l, scratch);
        return ck_end(&l);
    }

    c.dx = geo_of(o, axis);
    c.dloss = opd_all(&a->inputs[2]);
    c.denom_n = ce_mean_n(c);
    if (ns == 0)
        return KEEL_STATUS_OK;
    if (red == KEEL_KIT_RED_MEAN) {
        /* ns pairs of weights, then their sum (one more double). */
        if ((st = ck_scratch(&l, (size_t)(2 * ns + 1) * sizeof(double),
                             &scratch)))
            return st;
        c.part = (double *)scratch;
        c.tot = c.part + 2 * ns;
        if (dbl)
            ce_wts_kernel<double><<<row_grid(ns), bs, 0, l.stream>>>(c);
        else
            ce_wts_kernel<float><<<row_grid(ns), bs, 0, l.stream>>>(c);
        fin_kernel<<<1, 256, 0, l.stream>>>(c.part, ns, FIN_SUM, 0,
                                            (char *)(c.part + 2 * ns),
                                            KEEL_F64);
    }
    if (dbl)
        ce_bwd_kernel<double><<<row_grid(ns), bs, 0, l.stream>>>(c);
    else
        ce_bwd_kernel<float><<<row_grid(ns), bs, 0, l.stream>>>(c);
    ck_scratch_free(&l, scratch);
    return ck_end(&l);
}

keel_status k_cross_entropy(void *, const keel_kernel_args *a)
{
    return ce_run(a, false);
}

keel_status k_cross_entropy_grad(void *, const keel_kernel_args *a)
{
    return ce_run(a, true);
}

/* ---- mse_loss, bce_with_logits ------------------------------------------- */

/* Operands (out or x, x, y, pos_weight or x) over x's shape. */
struct loss_args {
    ck_iter<4> it;
    int dt[4];
    int bce, has_pw, none;
    double *part; /* reductions: one (sum, 0) pair per block */
};

template <class C>
__device__ __forceinline__ C loss_of(const loss_args &a, char *const *p)
{
    C x = ldx<C>(p[1], a.dt[1], 0), y = ldx<C>(p[2], a.dt[2], 0);

    if (!a.bce) {
        C d = x - y;
        return d * d;
    }
    C ax = x < 0 ? -x : x, l1 = m_log1p(m_exp(-ax));
    if (!a.has_pw)
        return (x > 0 ? x : (C)0) - x * y + l1;
    /* (1 - y) x + (1 + (pw - 1) y) (ln(1 + e^-|x|) + max(-x, 0)) */
    C pw = ldx<C>(p[3], a.dt[3], 0);
    return (1 - y) * x + (1 + (pw - 1) * y) * (l1 + (x < 0 ? -x : (C)0));
}

template <class C> __global__ void loss_kernel(loss_args a)
{
    const int64_t step = (int64_t)blockDim.x * gridDim.x;
    C acc = 0;

    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         i < a.it.numel; i += step) {
        int64_t off[4];
        char *p[4];

        if (a.it.contig)
            for (int k = 0; k < 4; k++)
                off[k] = i * a.it.esize[k];
        else
            ck_iter_offsets<4>(a.it, i, off);
        for (int k = 0; k < 4; k++)
            p[k] = a.it.base[k] + off[k];
        C v = loss_of<C>(a, p);
        if (a.none)
            stx<C>(p[0], a.dt[0], 0, v);
        else
            acc += v;
    }
    if (a.none)
        return;
    acc = ck_block_sum(acc);
    if (threadIdx.x == 0) {
        a.part[2 * blockIdx.x] = (double)acc;
        a.part[2 * blockIdx.x + 1] = 0;
    }
}

keel_status loss_run(const keel_kernel_args *a, bool bce)
{
    const char *op = bce ? "bce_with_logits" : "mse_loss";
    struct ck_launch l;
    keel_status st = ck_begin(a, op, &l);

    if (st)
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *out = &a->outputs[0];
    int red = keel_kit_reduction(a);
    loss_args c;
    memset(&c, 0, sizeof(c));
    const keel_tensor_desc *d[4] = {
        red == KEEL_KIT_RED_NONE ? out : x, x, &a->inputs[1],
        a->num_inputs > 2 ? &a->inputs[2] : x};
    ck_iter_make<4>(&c.it, d);
    for (int k = 0; k < 4; k++)
        c.dt[k] = (int)d[k]->dtype;
    c.bce = bce;
    c.has_pw = a->num_inputs > 2;
    c.none = red == KEEL_KIT_RED_NONE;
    const bool dbl = x->dtype == KEEL_F64;
    const int64_t n = c.it.numel;
    if (c.none) {
        if (n == 0)
            return KEEL_STATUS_OK;
        if (dbl)
            loss_kernel<double>
                <<<ck_grid(n, CK_BLOCK), CK_BLOCK, 0, l.stream>>>(c);
        else
            loss_kernel<float>
                <<<ck_grid(n, CK_BLOCK), CK_BLOCK, 0, l.stream>>>(c);
        return ck_end(&l);
    }
    /* Partial sums per block (at most 1024 blocks), then one block. */
    unsigned g = ck_grid(n, CK_BLOCK);
    if (g > 1024)
        g = 1024;
    void *scratch;
    if ((st = ck_scratch(&l, (size_t)g * 2 * sizeof(double), &scratch)))
        return st;
    c.part = (double *)scratch;
    if (dbl)
        loss_kernel<double><<<g, CK_BLOCK, 0, l.stream>>>(c);
    else
        loss_kernel<float><<<g, CK_BLOCK, 0, l.stream>>>(c);
    fin_launch(&l, c.part, g, red == KEEL_KIT_RED_SUM ? FIN_SUM : FIN_MEAN_N,
               n, out);
    ck_scratch_free(&l, scratch);
    return ck_end(&l);
}

keel_status k_mse_loss(void *, const keel_kernel_args *a)
{
    return loss_run(a, false);
}

keel_status k_bce_with_logits(void *, const keel_kernel_args *a)
{
    return loss_run(a, true);
}

/* ---- nll_loss ------------------------------------------------------------ */

/* Sample s = (n, k): n over dim 0 (nw), k over dims 2.. (kw); its class c
 * value is at nv_off(nw, n) + c * cs + nv_off(kw, k). 1-d logp: one
 * sample. */
struct nll_args {
    char *x;
    int xdt;
    nv nw, kw;
    int64_t C, cs, K, ns, ignore;
    opd lab, w;
    int has_w, none;
    char *out;
    int odt;
    double *part;
};

__global__ void nll_kernel(nll_args a)
{
    const int64_t step = (int64_t)blockDim.x * gridDim.x;
    double al = 0, aw = 0;

    for (int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         s < a.ns; s += step) {
        int64_t lb = ldvi(a.lab, s);
        bool skip = lb == a.ignore || !in_range(lb, a.C);
        double v = 0, wt = 0;

        if (!skip) {
            int64_t n = s / a.K, k = s - n * a.K;
            v = ldx<double>(a.x, a.xdt,
                            nv_off(a.nw, n) + lb * a.cs + nv_off(a.kw, k));
            wt = a.has_w ? ldv<double>(a.w, lb) : 1;
        }
        double loss = -wt * v;
        if (a.none) {
            stx<double>(a.out, a.odt, s, loss);
        } else {
            al += loss;
            aw += wt;
        }
    }
    if (a.none)
        return;
    al = ck_block_sum(al);
    aw = ck_block_sum(aw);
    if (threadIdx.x == 0) {
        a.part[2 * blockIdx.x] = al;
        a.part[2 * blockIdx.x + 1] = aw;
    }
}

keel_status k_nll_loss(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "nll_loss", &l);

    if (st)
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *out = &a->outputs[0];
    int red = keel_kit_reduction(a);
    const int64_t C = x->shape[x->ndim == 1 ? 0 : 1];
    nll_args c;
    memset(&c, 0, sizeof(c));
    c.x = (char *)(uintptr_t)x->data;
    c.xdt = (int)x->dtype;
    if (x->ndim == 1) {
        nv_init(&c.nw);
        nv_init(&c.kw);
        c.cs = x->strides[0];
    } else {
        c.nw = nv_dims(x, 0, 1);
        c.kw = nv_dims(x, 2, x->ndim);
        c.cs = x->strides[1];
    }
    c.C = C;
    c.K = c.kw.n;
    c.ns = c.nw.n * c.K;
    c.lab = opd_all(&a->inputs[1]);
    c.has_w = a->num_inputs > 2;
    if (c.has_w)
        c.w = opd_all(&a->inputs[2]);
    c.ignore = ck_attr_i(a, "ignore_index", -100);
    c.out = (char *)(uintptr_t)out->data;
    c.odt = (int)out->dtype;
    c.none = red == KEEL_KIT_RED_NONE;
    if (c.none) {
        if (c.ns > 0)
            nll_kernel<<<ck_grid(c.ns, CK_BLOCK), CK_BLOCK, 0, l.stream>>>(c);
        return ck_end(&l);
    }
    unsigned g = ck_grid(c.ns, CK_BLOCK);
    if (g > 1024)
        g = 1024;
    void *scratch;
    if ((st = ck_scratch(&l, (size_t)g * 2 * sizeof(double), &scratch)))
        return st;
    c.part = (double *)scratch;
    nll_kernel<<<g, CK_BLOCK, 0, l.stream>>>(c);
    fin_launch(&l, c.part, g, red == KEEL_KIT_RED_SUM ? FIN_SUM : FIN_MEAN_W,
               0, out);
    ck_scratch_free(&l, scratch);
    return ck_end(&l);
}

/* ---- embedding ----------------------------------------------------------- */

/* out[r, d] = table[ids[r], d], zeros for padding or out-of-range ids;
 * one thread per output element, copied as raw bits. */
template <class E> struct emb_args {
    opd ids;
    const E *w;
    int64_t ws0, ws1, V, D, n, pad;
    E *out;
};

template <class E> __global__ void emb_kernel(emb_args<E> a)
{
    const int64_t step = (int64_t)blockDim.x * gridDim.x;

    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         i < a.n; i += step) {
        int64_t r = i / a.D, d = i - r * a.D, id = ldvi(a.ids, r);
        a.out[i] = id == a.pad || !in_range(id, a.V)
                       ? (E)0
                       : a.w[id * a.ws0 + d * a.ws1];
    }
}

template <class E>
void emb_launch(const struct ck_launch *l, const keel_kernel_args *a,
                int64_t n)
{
    const keel_tensor_desc *w = &a->inputs[1];
    emb_args<E> c;

    c.ids = opd_all(&a->inputs[0]);
    c.w = (const E *)(uintptr_t)w->data;
    c.ws0 = w->strides[0];
    c.ws1 = w->strides[1];
    c.V = w->shape[0];
    c.D = w->shape[1];
    c.n = n;
    c.pad = ck_attr_i(a, "padding_idx", -1);
    c.out = (E *)(uintptr_t)a->outputs[0].data;
    emb_kernel<E><<<ck_grid(n, CK_BLOCK), CK_BLOCK, 0, l->stream>>>(c);
}

keel_status k_embedding(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "embedding", &l);

    if (st)
        return st;
    const keel_tensor_desc *w = &a->inputs[1], *o = &a->outputs[0];
    const int64_t n = ck_numel(o);
    if (n == 0)
        return KEEL_STATUS_OK;
    switch (keel_dtype_size(w->dtype)) {
    case 2: emb_launch<uint16_t>(&l, a, n); break;
    case 4: emb_launch<uint32_t>(&l, a, n); break;
    default: emb_launch<uint64_t>(&l, a, n); break;
    }
    return ck_end(&l);
}

/*
 * embedding_grad, deterministic: the ids are stably radix-sorted (ck_sort.cuh) as
 * keys with their positions as values, padding and out-of-range ids
 * mapped to the key V so that they sort last and match no row. Then one
 * thread per dtable element (v, d) finds v's run in the sorted keys by
 * binary search and adds dout[r, d] over the run in increasing r: the
 * CPU plugin's order, so the sums match it bit for bit (up to fused
 * multiply-adds, which a plain sum does not have).
 */
__global__ void embg_keys(opd ids, int64_t n, int64_t V, int64_t pad,
                          uint64_t *keys, uint64_t *pos)
{
    const int64_t step = (int64_t)blockDim.x * gridDim.x;

    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < n;
         r += step) {
        int64_t id = ldvi(ids, r);
        keys[r] = (uint64_t)(id == pad || !in_range(id, V) ? V : id);
        pos[r] = (uint64_t)r;
    }
}

struct embg_args {
    const uint64_t *keys, *pos; /* sorted */
    opd dy;                     /* dy.v: the last dim of dout */
    nv lead;                    /* dout's leading dims, the ids' order */
    int64_t n, V, D;
    char *out;                  /* [V, D], contiguous */
    int odt;
};

template <class C> __global__ void embg_sum(embg_args a)
{
    const int64_t step = (int64_t)blockDim.x * gridDim.x;

    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         i < a.V * a.D; i += step) {
        const int64_t v = i / a.D, d = i - v * a.D;
        const int64_t dof = nv_off(a.dy.v, d);
        int64_t lo = 0, hi = a.n;

        while (lo < hi) { /* first sorted key >= v */
            int64_t mid = lo + (hi - lo) / 2;
            if (a.keys[mid] < (uint64_t)v)
                lo = mid + 1;
            else
                hi = mid;
        }
        C acc = 0;
        for (int64_t k = lo; k < a.n && a.keys[k] == (uint64_t)v; k++)
            acc += ldx<C>(a.dy.p, a.dy.dt,
                          nv_off(a.lead, (int64_t)a.pos[k]) + dof);
        stx<C>(a.out, a.odt, i, acc);
    }
}

/* Bits needed for keys 0..v. */
int key_bits(uint64_t v)
{
    int b = 1;

    while (b < 64 && (v >> b) != 0)
        b++;
    return b;
}

keel_status k_embedding_grad(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "embedding_grad", &l);

    if (st)
        return st;
    const keel_tensor_desc *ids = &a->inputs[0], *dy = &a->inputs[1],
                           *o = &a->outputs[0];
    const int64_t V = o->shape[0], D = o->shape[1];
    if (V == 0 || D == 0)
        return KEEL_STATUS_OK;
    const int64_t n = ck_numel(ids);
    embg_args c;
    memset(&c, 0, sizeof(c));
    c.dy = opd_of(dy, nv_dims(dy, dy->ndim - 1, dy->ndim));
    c.lead = nv_dims(dy, 0, dy->ndim - 1);
    c.n = n;
    c.V = V;
    c.D = D;
    c.out = (char *)(uintptr_t)o->data;
    c.odt = (int)o->dtype;

    void *mem = NULL, *tmp = NULL;
    if (n > 0) {
        const int bits = key_bits((uint64_t)V);
        const size_t nb = (size_t)n * sizeof(uint64_t);
        uint64_t *k_in = NULL, *k_out = NULL, *p_in = NULL, *p_out = NULL;
        size_t tbytes = 0;
        if ((st = ck_check(cks::sort_pairs(
                               NULL, tbytes, k_in, k_out, p_in, p_out, n, 0,
                               bits, l.stream),
                           &l, "radix sort (size query)")))
            return st;
        if ((st = ck_scratch(&l, 4 * nb, &mem)))
            return st;
        if ((st = ck_scratch(&l, tbytes ? tbytes : 1, &tmp))) {
            ck_scratch_free(&l, mem);
            return st;
        }
        k_in = (uint64_t *)mem;
        k_out = k_in + n;
        p_in = k_in + 2 * n;
        p_out = k_in + 3 * n;
        embg_keys<<<ck_grid(n, CK_BLOCK), CK_BLOCK, 0, l.stream>>>(
            opd_all(ids), n, V, ck_attr_i(a, "padding_idx", -1), k_in, p_in);
        st = ck_check(cks::sort_pairs(tmp, tbytes, k_in,
                                                      k_out, p_in, p_out, n,
                                                      0, bits, l.stream),
                      &l, "radix sort");
        if (st) {
            ck_scratch_free(&l, tmp);
            ck_scratch_free(&l, mem);
            return st;
        }
        c.keys = k_out;
        c.pos = p_out;
    }
    if (dy->dtype == KEEL_F64)
        embg_sum<double>
            <<<ck_grid(V * D, CK_BLOCK), CK_BLOCK, 0, l.stream>>>(c);
    else
        embg_sum<float>
            <<<ck_grid(V * D, CK_BLOCK), CK_BLOCK, 0, l.stream>>>(c);
    ck_scratch_free(&l, tmp);
    ck_scratch_free(&l, mem);
    return ck_end(&l);
}

/* ---- dropout ------------------------------------------------------------- */

/* Operands (out, mask, x); i is the flat row-major index, so the mask is
 * the CPU plugin's: keep element i when u(seed, offset + i) >= p. */
template <class T> struct drop_op {
    typedef typename ck_compute<T>::C C;
    uint64_t seed, offset;
    double p;
    C sc;
    int train;
    __device__ void operator()(char *const *q, int64_t i) const
    {
        C x = ck_ld<T>(q[2]);
        if (!train) {
            *(uint8_t *)q[1] = 1;
            ck_st<T>(q[0], x * sc);
            return;
        }
        float u = keel_philox_uniform(seed, offset + (uint64_t)i);
        bool keep = (double)u >= p;
        *(uint8_t *)q[1] = keep;
        ck_st<T>(q[0], keep ? x * sc : (C)0);
    }
};

keel_status k_dropout(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "dropout", &l);

    if (st)
        return st;
    const keel_tensor_desc *x = &a->inputs[0];
    const char *mode = ck_attr_s(a, "mode", "upscale_in_train");
    const double p = ck_attr_f(a, "p", 0.5);
    const bool up = !strcmp(mode, "upscale_in_train");
    const bool train = ck_attr_i(a, "training", 1) != 0;
    double sc;
    if (train)
        sc = up ? (p < 1 ? 1 / (1 - p) : 0) : 1;
    else
        sc = up ? 1 : 1 - p;
    ck_iter<3> it;
    const keel_tensor_desc *d[3] = {&a->outputs[0], &a->outputs[1], x};
    ck_iter_make<3>(&it, d);
    const uint64_t seed = (uint64_t)ck_attr_i(a, "seed", 0);
    const uint64_t off = (uint64_t)ck_attr_i(a, "offset", 0);
    CK_SWITCH_FLOAT(x->dtype, T,
                    (ck_for_each<3>(&l, it,
                                    drop_op<T>{seed, off, p,
                                               (ck_compute<T>::C)sc,
                                               train ? 1 : 0})),
                    return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                                   "dropout: unknown dtype"))
    return ck_end(&l);
}

/* ---- one_hot ------------------------------------------------------------- */

struct oh_args {
    opd x;
    int64_t nc, n;
    float *out;
};

__global__ void oh_kernel(oh_args a)
{
    const int64_t step = (int64_t)blockDim.x * gridDim.x;

    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         i < a.n; i += step) {
        int64_t r = i / a.nc, c = i - r * a.nc;
        a.out[i] = ldvi(a.x, r) == c ? 1.0f : 0.0f;
    }
}

keel_status k_one_hot(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "one_hot", &l);

    if (st)
        return st;
    const keel_tensor_desc *x = &a->inputs[0], *o = &a->outputs[0];
    oh_args c;
    c.x = opd_all(x);
    c.nc = o->shape[x->ndim];
    c.n = ck_numel(o);
    c.out = (float *)(uintptr_t)o->data;
    if (c.n == 0)
        return KEEL_STATUS_OK;
    oh_kernel<<<ck_grid(c.n, CK_BLOCK), CK_BLOCK, 0, l.stream>>>(c);
    return ck_end(&l);
}

/* ---- optimizer updates --------------------------------------------------- */

enum { OPT_SGD, OPT_MOMENTUM, OPT_ADAM, OPT_ADAMW };

/*
 * One fused pass over (param, grad, state1, state2), updated in place in
 * the compute type of the param (float for f32/f16/bf16, double for f64)
 * as the CPU plugin does; absent states alias the param and are not used.
 */
template <class T> struct opt_op {
    typedef typename ck_compute<T>::C C;
    int kind, gdt, nesterov;
    C lr, wd, mu, b1, b2, decay, lr_t, eps_t;
    __device__ void operator()(char *const *q, int64_t) const
    {
        C p = ck_ld<T>(q[0]);
        const C g = ldx<C>(q[1], gdt, 0);

        if (kind == OPT_SGD) {
            p -= lr * (g + wd * p);
        } else if (kind == OPT_MOMENTUM) {
            C v = ck_ld<T>(q[2]), gg = g + wd * p;
            v = mu * v + gg;
            p -= nesterov ? lr * (gg + mu * v) : lr * v;
            ck_st<T>(q[2], v);
        } else {
            const C c1 = 1 - b1, c2 = 1 - b2;
            C m = ck_ld<T>(q[2]), v = ck_ld<T>(q[3]), gg = g + wd * p;
            p -= decay * p;
            m = b1 * m + c1 * gg;
            v = b2 * v + c2 * gg * gg;
            p -= lr_t * m / (m_sqrt(v) + eps_t);
            ck_st<T>(q[2], m);
            ck_st<T>(q[3], v);
        }
        ck_st<T>(q[0], p);
    }
};

template <class T>
void opt_launch(const struct ck_launch *l, const ck_iter<4> &it, int kind,
                int gdt, bool nesterov, const double h[8])
{
    typedef typename ck_compute<T>::C C;
    opt_op<T> f;

    f.kind = kind;
    f.gdt = gdt;
    f.nesterov = nesterov ? 1 : 0;
    f.lr = (C)h[0];
    f.wd = (C)h[1];
    f.mu = (C)h[2];
    f.b1 = (C)h[3];
    f.b2 = (C)h[4];
    f.decay = (C)h[5];
    f.lr_t = (C)h[6];
    f.eps_t = (C)h[7];
    ck_for_each<4>(l, it, f);
}

/* Square root on the host without libm (the plugin does not link it):
 * Newton's iteration from above, to the last bit. */
double host_sqrt(double v)
{
    if (!(v > 0))
        return v == 0 ? 0 : (double)NAN;
    if (v > 1.7e308) /* infinity */
        return v;
    double x = v > 1 ? v : 1, y;
    for (int i = 0; i < 2000; i++) {
        y = 0.5 * (x + v / x);
        if (y >= x)
            break;
        x = y;
    }
    return x;
}

keel_status opt_run(const keel_kernel_args *a, int kind)
{
    static const char *const names[] = {"sgd_update", "momentum_update",
                                        "adam_update", "adamw_update"};
    static const int nins[] = {2, 3, 4, 4};
    const char *op = names[kind];
    const int nin = nins[kind];
    struct ck_launch l;
    keel_status st = ck_begin(a, op, &l);

    if (st)
        return st;
    const keel_tensor_desc *p = &a->inputs[0];
    double h[8];
    const double b1 = ck_attr_f(a, "beta1", 0.9);
    const double b2 = ck_attr_f(a, "beta2", 0.999);
    const double b1p = ck_attr_f(a, "beta1_pow", b1);
    const double b2p = ck_attr_f(a, "beta2_pow", b2);
    const double eps = ck_attr_f(a, "epsilon", 1e-8);
    h[0] = ck_attr_f(a, "lr", 0);
    h[1] = kind == OPT_ADAMW ? 0 : ck_attr_f(a, "weight_decay", 0);
    h[2] = ck_attr_f(a, "mu", 0.9);
    h[3] = b1;
    h[4] = b2;
    h[5] = kind == OPT_ADAMW ? h[0] * ck_attr_f(a, "coeff", 0.01) : 0;
    h[6] = h[0] * host_sqrt(1 - b2p) / (1 - b1p);
    h[7] = eps * host_sqrt(1 - b2p);
    const bool nesterov = ck_attr_i(a, "use_nesterov", 0) != 0;
    ck_iter<4> it;
    const keel_tensor_desc *d[4] = {p, &a->inputs[1],
                                    nin > 2 ? &a->inputs[2] : p,
                                    nin > 3 ? &a->inputs[3] : p};
    ck_iter_make<4>(&it, d);
    const int gdt = (int)a->inputs[1].dtype;
    CK_SWITCH_FLOAT(p->dtype, T,
                    (opt_launch<T>(&l, it, kind, gdt, nesterov, h)),
                    return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                                   "%s: unknown dtype", op))
    return ck_end(&l);
}

keel_status k_sgd_update(void *, const keel_kernel_args *a)
{
    return opt_run(a, OPT_SGD);
}

keel_status k_momentum_update(void *, const keel_kernel_args *a)
{
    return opt_run(a, OPT_MOMENTUM);
}

keel_status k_adam_update(void *, const keel_kernel_args *a)
{
    return opt_run(a, OPT_ADAM);
}

keel_status k_adamw_update(void *, const keel_kernel_args *a)
{
    return opt_run(a, OPT_ADAMW);
}

} // namespace

#if CK_HOST_PASS
extern "C" const struct ck_entry ck_kernels_nn[] = {
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
    {NULL, 0, NULL},
};
#endif

