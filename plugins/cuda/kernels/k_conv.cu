/*
 * keel CUDA plugin — convolution (conv2d, conv2d_transpose and their
 * grads) and pooling (max, avg, adaptive avg and their grads), NCHW, with
 * the semantics of the CPU plugin's k_conv.c.
 *
 * CONVOLUTION: implicit GEMM. Every conv op is built from three primitives
 * over one conv2d geometry (struct cgeo: input [n, c, h, w], weight
 * [o, c/g, kh, kw], output [n, o, oh, ow]):
 *
 *   fwd          y = conv(x, w) (+ bias)       im2col + GEMM
 *   bwd_data     dx = conv^T(dy, w) (+ bias)   GEMM (W^T dy) + col2im
 *   bwd_filter   dw = sum_n dy col(x)^T        im2col + GEMM
 *
 *   conv2d                 fwd
 *   conv2d_grad            bwd_data, bwd_filter, bias sum of dout
 *   conv2d_transpose       bwd_data with x as dy
 *   conv2d_transpose_grad  dx = fwd(dout), dw = bwd_filter(dout, x)
 *
 * For a transposed conv the conv2d view swaps sides: its "input" is the
 * transposed conv's output, its "output" the transposed conv's input, and
 * the weight [C, O/g, kh, kw] is read as [o, c/g, kh, kw].
 *
 * The images run in chunks of nl so that the column buffer stays within
 * COL_BUDGET bytes. The chunk's column matrix has one row per (channel,
 * tap), r = (c * kh + i) * kw + j, and one column per (image, output
 * position), q = n * oh*ow + oy * ow + ox (leading dimension nl * oh*ow).
 * Group gi owns rows [gi * ckk, (gi + 1) * ckk), ckk = c/g * kh * kw.
 *   fwd: per group one strided-batched GEMM over the chunk's images,
 *        y[n] (og x ohw) = W_g (og x ckk) col_g[:, n] (ckk x ohw); the
 *        bias is written into y first and the GEMM adds (beta = 1).
 *   bwd_data: per group, batched over images, col_g[:, n] = W_g^T dy[n];
 *        then col2im gathers: one thread per dx element sums the column
 *        entries of the taps that read it (no atomics).
 *   bwd_filter: dout is regrouped to [o, nl * ohw] so each group is one
 *        GEMM dw_g += dy_g col_g^T over the whole chunk (batched over
 *        groups), accumulating across chunks with beta = 1.
 * float16/bfloat16: GEMMs take the half operands and accumulate in float;
 * results that are summed further (bwd_data's columns, dw across chunks)
 * are kept in float32 and rounded once at the end.
 *
 * POOLING: one thread per output element (forward) reading the input
 * through its strides; for the avg grads one thread per input element
 * gathering from the outputs whose window contains it. max_pool2d_grad has
 * no geometry: a first pass records, per output row and column, the input
 * rows and columns its indices point at, so each input element only looks
 * at the output rows that can point at it. Index format: iy * w + ix in the
 * plane, first maximum in window order wins, NaN wins, a window all in the
 * padding gives -inf and -1.
 *
 * Accumulation: float for float16/bfloat16/float32, double for float64;
 * bias sums in double.
 */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "ck.cuh"

/* Row-major batched GEMM on cuBLAS, from k_linalg.cu. */
keel_status ckl_gemm(const struct ck_launch *l, keel_dtype dt,
                     keel_dtype cdt, bool ta, bool tb, int64_t M, int64_t N,
                     int64_t K, const void *A, int64_t lda, int64_t sa,
                     const void *B, int64_t ldb, int64_t sb, bool acc,
                     void *C, int64_t ldc, int64_t sc, int64_t batch);

namespace {

/* Column buffer budget per chunk of images. */
#define COL_BUDGET ((size_t)256 << 20)

/* The dtype float computations land in (GEMM results kept for later). */
keel_dtype acc_dt(keel_dtype dt)
{
    return dt == KEEL_F64 ? KEEL_F64 : KEEL_F32;
}

unsigned grid_for(int64_t n)
{
    return ck_grid(n, CK_BLOCK);
}

/* ---- geometry (mirrors core/src/shape_conv.c and the CPU plugin) --------- */

struct cgeo {
    int64_t n, c, h, w;  /* input */
    int64_t o, oh, ow;   /* output */
    int64_t kh, kw, sh, sw, pt, pl, dh, dw, g;
    int64_t cg, og, ckk, hw, ohw;
    bool direct_1x1; /* the input is its own column matrix */
};

bool kpair(const keel_kernel_args *a, const char *name, int64_t lo,
           const int64_t *def, int64_t out[2])
{
    int64_t n;
    const int64_t *v = ck_attr_ints(a, name, &n);

    if (n == 0 && def) {
        out[0] = def[0];
        out[1] = def[1];
        return true;
    }
    if (n != 1 && n != 2)
        return false;
    out[0] = v[0];
    out[1] = v[n - 1];
    return out[0] >= lo && out[1] >= lo;
}

/* padding -> top, bottom, left, right */
bool kpads(const keel_kernel_args *a, int64_t pad[4])
{
    int64_t n;
    const int64_t *v = ck_attr_ints(a, "padding", &n);

    if (n == 0) {
        pad[0] = pad[1] = pad[2] = pad[3] = 0;
    } else if (n == 1) {
        pad[0] = pad[1] = pad[2] = pad[3] = v[0];
    } else if (n == 2) {
        pad[0] = pad[1] = v[0];
        pad[2] = pad[3] = v[1];
    } else if (n == 4) {
        for (int i = 0; i < 4; i++)
            pad[i] = v[i];
    } else {
        return false;
    }
    return pad[0] >= 0 && pad[1] >= 0 && pad[2] >= 0 && pad[3] >= 0;
}

/*
 * Conv geometry for op `op`: `big` is the conv2d view's input side (x of
 * conv2d, the output of a transposed conv), `small` its output side, `wt`
 * the weight. Checks that every shape agrees with the attributes.
 */
keel_status conv_geo(const keel_kernel_args *a, const char *op,
                     bool transpose, const keel_tensor_desc *big,
                     const keel_tensor_desc *wt,
                     const keel_tensor_desc *small, struct cgeo *g)
{
    static const int64_t ones[2] = {1, 1}, zeros[2] = {0, 0};
    const char *algo = ck_attr_s(a, "padding_algorithm", "EXPLICIT");
    const keel_tensor_desc *x = transpose ? small : big;
    int64_t st[2], dil[2], pad[4], op_[2] = {0, 0}, k[2];

    if (big->ndim != 4 || wt->ndim != 4 || small->ndim != 4)
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: x, weight and the output must be 4-D", op);
    k[0] = wt->shape[2];
    k[1] = wt->shape[3];
    g->g = ck_attr_i(a, "groups", 1);
    if (!kpair(a, "stride", 1, ones, st) ||
        !kpair(a, "dilation", 1, ones, dil) || !kpads(a, pad) ||
        (transpose && !kpair(a, "output_padding", 0, zeros, op_)) ||
        g->g < 1 || k[0] < 1 || k[1] < 1)
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: bad stride, dilation, padding, groups or kernel",
                       op);
    if (!strcmp(algo, "VALID")) {
        pad[0] = pad[1] = pad[2] = pad[3] = 0;
    } else if (!strcmp(algo, "SAME")) {
        for (int i = 0; i < 2; i++) {
            int64_t in = x->shape[2 + i], out = (in + st[i] - 1) / st[i];
            int64_t tot = (out - 1) * st[i] + (k[i] - 1) * dil[i] + 1 - in;
            tot = tot < 0 ? 0 : tot;
            pad[2 * i] = tot / 2;
            pad[2 * i + 1] = tot - tot / 2;
        }
    } else if (strcmp(algo, "EXPLICIT")) {
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: unknown padding_algorithm '%s'", op, algo);
    }
    g->n = big->shape[0];
    g->c = big->shape[1];
    g->h = big->shape[2];
    g->w = big->shape[3];
    g->o = small->shape[1];
    g->oh = small->shape[2];
    g->ow = small->shape[3];
    g->kh = k[0];
    g->kw = k[1];
    g->sh = st[0];
    g->sw = st[1];
    g->dh = dil[0];
    g->dw = dil[1];
    g->pt = pad[0];
    g->pl = pad[2];
    g->cg = g->c / g->g;
    g->og = g->o / g->g;
    g->ckk = g->cg * g->kh * g->kw;
    g->hw = g->h * g->w;
    g->ohw = g->oh * g->ow;
    g->direct_1x1 = g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 &&
                    !pad[0] && !pad[1] && !pad[2] && !pad[3];
    if (small->shape[0] != g->n || g->c % g->g || g->o % g->g ||
        wt->shape[0] != g->o || wt->shape[1] != g->cg)
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: batch, channel or groups mismatch", op);
    for (int i = 0; i < 2; i++) {
        int64_t ek = (k[i] - 1) * dil[i] + 1, in = big->shape[2 + i];
        int64_t out = small->shape[2 + i], want;
        if (transpose)
            want = (out - 1) * st[i] - pad[2 * i] - pad[2 * i + 1] + ek +
                   op_[i];
        else
            want = in + pad[2 * i] + pad[2 * i + 1] >= ek
                       ? (in + pad[2 * i] + pad[2 * i + 1] - ek) / st[i] + 1
                       : -1;
        if ((transpose ? in : out) != want || want < 1)
            return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: spatial dims disagree with the attributes",
                           op);
    }
    if (g->og > INT_MAX || g->ckk > INT_MAX || g->ohw > INT_MAX ||
        g->hw > INT_MAX)
        return ck_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: a GEMM dim exceeds the cuBLAS int range", op);
    return KEEL_STATUS_OK;
}

/* Inputs of one float dtype, outputs contiguous of that dtype. */
keel_status same_float(const keel_kernel_args *a, const char *op)
{
    keel_dtype dt = a->inputs[0].dtype;

    if (!ck_float_dtype(dt))
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: needs floats, "
                       "got %s", op, ck_dtype_name(dt));
    for (int i = 0; i < a->num_inputs; i++)
        if (a->inputs[i].dtype != dt)
            return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: inputs must share one dtype", op);
    for (int i = 0; i < a->num_outputs; i++)
        if (a->outputs[i].dtype != dt || !ck_contig(&a->outputs[i]))
            return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: outputs must be contiguous %s", op,
                           ck_dtype_name(dt));
    return KEEL_STATUS_OK;
}

bool bias_ok(const keel_tensor_desc *b, int64_t n)
{
    return b->ndim == 1 && b->shape[0] == n;
}

/* ---- device kernels: conv ------------------------------------------------ */

/* Element strides of a 4-D tensor. */
struct st4 {
    int64_t s[4];
};

st4 st4_of(const keel_tensor_desc *d)
{
    st4 r;

    for (int i = 0; i < 4; i++)
        r.s[i] = i < d->ndim ? d->strides[i] : 0;
    return r;
}

/* col[r, q] for the chunk of images [n0, n0 + nl) of x (any strides):
 * r = (ch * kh + i) * kw + j over all channels, q = n * ohw + oy * ow + ox;
 * taps in the padding read 0. */
template <class T>
__global__ void im2col_kernel(const T *x, st4 xs, cgeo g, int64_t n0,
                              int64_t nl, T *col)
{
    int64_t cols = nl * g.ohw, total = g.c * g.kh * g.kw * cols;
    int64_t step = (int64_t)blockDim.x * gridDim.x;

    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         t < total; t += step) {
        int64_t r = t / cols, q = t - r * cols;
        int64_t j = r % g.kw, i = (r / g.kw) % g.kh, ch = r / (g.kw * g.kh);
        int64_t n = q / g.ohw, p = q - n * g.ohw;
        int64_t oy = p / g.ow, ox = p - oy * g.ow;
        int64_t iy = oy * g.sh - g.pt + i * g.dh;
        int64_t ix = ox * g.sw - g.pl + j * g.dw;
        T v = ck_cv<T>(0.0f);

        if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
            v = x[(n0 + n) * xs.s[0] + ch * xs.s[1] + iy * xs.s[2] +
                  ix * xs.s[3]];
        col[t] = v;
    }
}

/* Output index along one dim read by tap k from input index `in`, or -1
 * (in = o * s - pad + k * dil). */
__device__ __forceinline__ int64_t tap_out(int64_t in, int64_t k,
                                           int64_t pad, int64_t dil,
                                           int64_t s, int64_t nout)
{
    int64_t t = in + pad - k * dil;

    if (t < 0 || t % s)
        return -1;
    return t / s < nout ? t / s : -1;
}

/* dx (contiguous [nl, c, h, w]) = sum over the taps that read each element
 * of the column entries (col: CT, leading dim ldc) + bias[ch]. */
template <class T, class CT>
__global__ void col2im_kernel(const CT *col, int64_t ldc, cgeo g,
                              const T *bias, int64_t bs, int64_t total,
                              T *dx)
{
    typedef typename ck_compute<T>::C A;
    int64_t step = (int64_t)blockDim.x * gridDim.x;

    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         t < total; t += step) {
        int64_t ix = t % g.w, iy = (t / g.w) % g.h;
        int64_t ch = (t / g.hw) % g.c, n = t / (g.c * g.hw);
        A acc = 0;

        for (int64_t i = 0; i < g.kh; i++) {
            int64_t oy = tap_out(iy, i, g.pt, g.dh, g.sh, g.oh);
            if (oy < 0)
                continue;
            for (int64_t j = 0; j < g.kw; j++) {
                int64_t ox = tap_out(ix, j, g.pl, g.dw, g.sw, g.ow);
                if (ox < 0)
                    continue;
                acc += (A)col[((ch * g.kh + i) * g.kw + j) * ldc +
                              n * g.ohw + oy * g.ow + ox];
            }
        }
        if (bias)
            acc += ck_cv<A>(bias[ch * bs]);
        dx[t] = ck_cv<T>(acc);
    }
}

/* y (contiguous [.., o, plane]) element t = bias[((t / plane) % o) * bs]. */
template <class T>
__global__ void fill_bias_kernel(T *y, const T *bias, int64_t bs, int64_t o,
                                 int64_t plane, int64_t total)
{
    int64_t step = (int64_t)blockDim.x * gridDim.x;

    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         t < total; t += step)
        y[t] = bias[((t / plane) % o) * bs];
}

/* dst [o, nl * ohw] <- dy [n0 + n, o, oy, ox] (any strides). */
template <class T>
__global__ void regroup_kernel(const T *dy, st4 ds, cgeo g, int64_t n0,
                               int64_t nl, T *dst)
{
    int64_t cols = nl * g.ohw, total = g.o * cols;
    int64_t step = (int64_t)blockDim.x * gridDim.x;

    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         t < total; t += step) {
        int64_t ch = t / cols, q = t - ch * cols;
        int64_t n = q / g.ohw, p = q - n * g.ohw;
        int64_t oy = p / g.ow, ox = p - oy * g.ow;

        dst[t] = dy[(n0 + n) * ds.s[0] + ch * ds.s[1] + oy * ds.s[2] +
                    ox * ds.s[3]];
    }
}

/* dst[i] = src[i] converted, contiguous. */
template <class T, class S>
__global__ void convert_kernel(const S *src, T *dst, int64_t n)
{
    int64_t step = (int64_t)blockDim.x * gridDim.x;

    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n;
         t += step)
        dst[t] = ck_cv<T>(src[t]);
}

/* db[ch] = sum over n, y, x of t[n, ch, y, x] (any strides); one block per
 * channel (gridDim.x = channels), every thread takes part in the sum. */
template <class T>
__global__ void bias_sum_kernel(const T *t, st4 ts, int64_t n, int64_t h,
                                int64_t w, T *db, int64_t dbs)
{
    int64_t ch = blockIdx.x, per = n * h * w;
    double acc = 0;

    for (int64_t i = threadIdx.x; i < per; i += blockDim.x) {
        int64_t x = i % w, y = (i / w) % h, b = i / (h * w);
        acc += ck_cv<double>(t[b * ts.s[0] + ch * ts.s[1] + y * ts.s[2] +
                               x * ts.s[3]]);
    }
    acc = ck_block_sum<double>(acc);
    if (threadIdx.x == 0)
        db[ch * dbs] = ck_cv<T>(acc);
}

/* ---- conv primitives (host) ---------------------------------------------- */

template <class T> struct copy_op {
    __device__ void operator()(char *const *p, int64_t) const
    {
        *(T *)p[0] = *(const T *)p[1];
    }
};

/* A contiguous view of `d`: its own memory when already contiguous, else
 * a scratch copy (*scratch, to free after use). */
keel_status contiguous(const struct ck_launch *l, const keel_tensor_desc *d,
                       const void **out, void **scratch)
{
    size_t es = keel_dtype_size(d->dtype);
    int64_t n = ck_numel(d), acc = 1;
    keel_tensor_desc dd;
    const keel_tensor_desc *ds[2] = {&dd, d};
    keel_status st;

    *scratch = NULL;
    *out = (const void *)(uintptr_t)d->data;
    if (ck_contig(d) || n == 0)
        return KEEL_STATUS_OK;
    st = ck_scratch(l, (size_t)n * es, scratch);
    if (st)
        return st;
    dd = *d;
    for (int i = dd.ndim - 1; i >= 0; i--) {
        dd.strides[i] = acc;
        acc *= dd.shape[i];
    }
    dd.data = (keel_dptr)(uintptr_t)*scratch;
    ck_iter<2> it;
    ck_iter_make<2>(&it, ds);
    if (es == 2)
        ck_for_each<2>(l, it, copy_op<uint16_t>());
    else if (es == 4)
        ck_for_each<2>(l, it, copy_op<uint32_t>());
    else
        ck_for_each<2>(l, it, copy_op<uint64_t>());
    *out = *scratch;
    return KEEL_STATUS_OK;
}

/* Element offsets of the GEMM of group gi and image n in a chunk:
 * A at gi * ag + n * an, likewise B and C. */
struct gstride {
    int64_t ag, an, bg, bn, cg, cn;
};

/* The nc x ng GEMMs of a chunk (images x groups), as strided batches along
 * the longer of the two dims. */
keel_status gemm_grid(const struct ck_launch *l, keel_dtype dt,
                      keel_dtype cdt, bool ta, bool tb, int64_t M, int64_t N,
                      int64_t K, const void *A, int64_t lda, const void *B,
                      int64_t ldb, bool acc, void *C, int64_t ldc,
                      int64_t nc, int64_t ng, const gstride &s)
{
    size_t es = keel_dtype_size(dt), ces = keel_dtype_size(cdt);
    const char *a = (const char *)A, *b = (const char *)B;
    char *c = (char *)C;
    keel_status st = KEEL_STATUS_OK;

    if (ng > nc) {
        for (int64_t n = 0; n < nc && !st; n++)
            st = ckl_gemm(l, dt, cdt, ta, tb, M, N, K, a + n * s.an * es,
                          lda, s.ag, b + n * s.bn * es, ldb, s.bg, acc,
                          c + n * s.cn * ces, ldc, s.cg, ng);
        return st;
    }
    for (int64_t gi = 0; gi < ng && !st; gi++)
        st = ckl_gemm(l, dt, cdt, ta, tb, M, N, K, a + gi * s.ag * es, lda,
                      s.an, b + gi * s.bg * es, ldb, s.bn, acc,
                      c + gi * s.cg * ces, ldc, s.cn, nc);
    return st;
}

/* Images per chunk when each image needs `per` bytes of scratch, with the
 * chunk's column count nl * ohw kept in the cuBLAS int range. */
int64_t chunk_images(const cgeo &g, size_t per)
{
    int64_t nl = per ? (int64_t)(COL_BUDGET / per) : g.n;

    if (nl > g.n)
        nl = g.n;
    if (g.ohw > 0 && nl > INT_MAX / g.ohw)
        nl = INT_MAX / g.ohw;
    return nl < 1 ? 1 : nl;
}

/* y (contiguous [n, o, oh, ow]) = conv(x, w) + bias. x: any strides; w:
 * contiguous; bias: NULL or [o] with stride bs. */
template <class T>
keel_status prim_fwd(const struct ck_launch *l, const cgeo &g, keel_dtype dt,
                     const T *x, st4 xs, bool x_contig, const T *w,
                     const T *bias, int64_t bs, T *y)
{
    bool direct = g.direct_1x1 && x_contig;
    size_t per = direct ? 0 : (size_t)(g.c * g.kh * g.kw * g.ohw) * sizeof(T);
    int64_t nl = chunk_images(g, per);
    void *colv = NULL;
    keel_status st = KEEL_STATUS_OK;

    if (g.n * g.o * g.ohw == 0)
        return KEEL_STATUS_OK;
    if (!direct && (st = ck_scratch(l, per * (size_t)nl, &colv)))
        return st;
    for (int64_t n0 = 0; n0 < g.n && !st; n0 += nl) {
        int64_t nc = g.n - n0 < nl ? g.n - n0 : nl, ldb = nc * g.ohw;
        T *yc = y + n0 * g.o * g.ohw;
        T *col = (T *)colv;

        if (bias)
            fill_bias_kernel<T><<<grid_for(nc * g.o * g.ohw), CK_BLOCK, 0,
                                  l->stream>>>(yc, bias, bs, g.o, g.ohw,
                                               nc * g.o * g.ohw);
        if (!direct && g.c > 0)
            im2col_kernel<T><<<grid_for(g.c * g.kh * g.kw * ldb), CK_BLOCK,
                               0, l->stream>>>(x, xs, g, n0, nc, col);
        /* B of image n: its columns of the chunk's matrix (direct: the
         * image's channels themselves, hw = ohw). */
        gstride s = {g.og * g.ckk, 0,
                     direct ? g.cg * g.hw : g.ckk * ldb,
                     direct ? g.c * g.hw : g.ohw, g.og * g.ohw, g.o * g.ohw};
        st = gemm_grid(l, dt, dt, false, false, g.og, g.ohw, g.ckk, w,
                       g.ckk, direct ? x + n0 * g.c * g.hw : col,
                       direct ? g.hw : ldb, bias != NULL, yc, g.ohw, nc,
                       g.g, s);
    }
    ck_scratch_free(l, colv);
    return st;
}

/* dx (contiguous [n, c, h, w]) = conv^T(dy, w) + bias. dy: contiguous
 * [n, o, oh, ow]; w contiguous; bias NULL or [c] with stride bs. */
template <class T>
keel_status prim_bwd_data(const struct ck_launch *l, const cgeo &g,
                          keel_dtype dt, const T *dy, const T *w,
                          const T *bias, int64_t bs, T *dx)
{
    typedef typename ck_compute<T>::C CT;
    size_t per = (size_t)(g.c * g.kh * g.kw * g.ohw) * sizeof(CT);
    int64_t nl = chunk_images(g, per);
    void *colv = NULL;
    keel_status st;

    if (g.n * g.c * g.hw == 0)
        return KEEL_STATUS_OK;
    if ((st = ck_scratch(l, per * (size_t)nl, &colv)))
        return st;
    for (int64_t n0 = 0; n0 < g.n && !st; n0 += nl) {
        int64_t nc = g.n - n0 < nl ? g.n - n0 : nl, ldc = nc * g.ohw;
        CT *col = (CT *)colv;

        gstride s = {g.og * g.ckk, 0, g.og * g.ohw, g.o * g.ohw,
                     g.ckk * ldc, g.ohw};
        st = gemm_grid(l, dt, acc_dt(dt), true, false, g.ckk, g.ohw, g.og,
                       w, g.ckk, dy + n0 * g.o * g.ohw, g.ohw, false, col,
                       ldc, nc, g.g, s);
        if (!st)
            col2im_kernel<T, CT><<<grid_for(nc * g.c * g.hw), CK_BLOCK, 0,
                                   l->stream>>>(col, ldc, g, bias, bs,
                                                nc * g.c * g.hw,
                                                dx + n0 * g.c * g.hw);
    }
    ck_scratch_free(l, colv);
    return st;
}

/* dw (contiguous [o, c/g, kh, kw]) = sum over images of dy col(x)^T. x,
 * dy: any strides. */
template <class T>
keel_status prim_bwd_filter(const struct ck_launch *l, const cgeo &g,
                            keel_dtype dt, const T *x, st4 xs, const T *dy,
                            st4 ds, T *dw)
{
    typedef typename ck_compute<T>::C CT;
    size_t per = (size_t)((g.c * g.kh * g.kw + g.o) * g.ohw) * sizeof(T);
    int64_t nl = chunk_images(g, per), nw = g.o * g.ckk;
    bool half = sizeof(T) != sizeof(CT);
    void *colv = NULL, *accv = NULL;
    keel_status st;

    if (nw == 0)
        return KEEL_STATUS_OK;
    if (half && (st = ck_scratch(l, (size_t)nw * sizeof(CT), &accv)))
        return st;
    CT *acc = half ? (CT *)accv : (CT *)(void *)dw;
    st = ck_check(cudaMemsetAsync(acc, 0, (size_t)nw * sizeof(CT),
                                  l->stream),
                  l, "cudaMemsetAsync");
    if (!st && g.n * g.ohw > 0)
        st = ck_scratch(l, per * (size_t)nl, &colv);
    for (int64_t n0 = 0; n0 < g.n && g.ohw > 0 && !st; n0 += nl) {
        int64_t nc = g.n - n0 < nl ? g.n - n0 : nl, k = nc * g.ohw;
        T *col = (T *)colv;
        T *dyt = col + g.c * g.kh * g.kw * k;

        if (g.c > 0)
            im2col_kernel<T><<<grid_for(g.c * g.kh * g.kw * k), CK_BLOCK,
                               0, l->stream>>>(x, xs, g, n0, nc, col);
        regroup_kernel<T><<<grid_for(g.o * k), CK_BLOCK, 0, l->stream>>>(
            dy, ds, g, n0, nc, dyt);
        /* dw_g (og x ckk) += dyt_g (og x k) col_g^T (col_g: ckk x k). */
        st = ckl_gemm(l, dt, acc_dt(dt), false, true, g.og, g.ckk, k, dyt,
                      k, g.og * k, col, k, g.ckk * k, true, acc, g.ckk,
                      g.og * g.ckk, g.g);
    }
    if (!st && half)
        convert_kernel<T, CT><<<grid_for(nw), CK_BLOCK, 0, l->stream>>>(
            acc, dw, nw);
    ck_scratch_free(l, colv);
    ck_scratch_free(l, accv);
    return st;
}

template <class T>
void bias_sum(const struct ck_launch *l, const keel_tensor_desc *t,
              const keel_tensor_desc *db)
{
    if (t->shape[1] <= 0)
        return;
    bias_sum_kernel<T><<<(unsigned)t->shape[1], CK_BLOCK, 0, l->stream>>>(
        (const T *)(uintptr_t)t->data, st4_of(t), t->shape[0], t->shape[2],
        t->shape[3], (T *)(uintptr_t)db->data, db->strides[0]);
}

template <class T> const T *cptr(const keel_tensor_desc *d)
{
    return (const T *)(uintptr_t)d->data;
}

template <class T> T *mptr(const keel_tensor_desc *d)
{
    return (T *)(uintptr_t)d->data;
}

/* ---- conv ops ------------------------------------------------------------ */

template <class T>
keel_status conv2d_run(const struct ck_launch *l, const keel_kernel_args *a,
                       const cgeo &g)
{
    const keel_tensor_desc *x = &a->inputs[0], *b = NULL;
    const void *w;
    void *ws;
    keel_status st;

    if (a->num_inputs == 3)
        b = &a->inputs[2];
    if ((st = contiguous(l, &a->inputs[1], &w, &ws)))
        return st;
    st = prim_fwd<T>(l, g, x->dtype, cptr<T>(x), st4_of(x), ck_contig(x),
                     (const T *)w, b ? cptr<T>(b) : NULL,
                     b ? b->strides[0] : 0, mptr<T>(&a->outputs[0]));
    ck_scratch_free(l, ws);
    return st;
}

keel_status k_conv2d(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "conv2d", &l);
    cgeo g;

    if (st)
        return st;
    if ((a->num_inputs != 2 && a->num_inputs != 3) || a->num_outputs != 1)
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "conv2d: needs 2 or 3 inputs and 1 output");
    if ((st = same_float(a, "conv2d")) ||
        (st = conv_geo(a, "conv2d", false, &a->inputs[0], &a->inputs[1],
                       &a->outputs[0], &g)))
        return st;
    if (a->num_inputs == 3 && !bias_ok(&a->inputs[2], g.o))
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "conv2d: bias must be [%lld]", (long long)g.o);
    if (ck_numel(&a->outputs[0]) == 0)
        return KEEL_STATUS_OK;
    CK_SWITCH_FLOAT(a->inputs[0].dtype, T, st = conv2d_run<T>(&l, a, g),
                    return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                                   "conv2d: needs floats"))
    return st ? st : ck_end(&l);
}

template <class T>
keel_status convt_run(const struct ck_launch *l, const keel_kernel_args *a,
                      const cgeo &g)
{
    const keel_tensor_desc *b = a->num_inputs == 3 ? &a->inputs[2] : NULL;
    const void *w, *x;
    void *ws, *xs = NULL;
    keel_status st;

    if ((st = contiguous(l, &a->inputs[1], &w, &ws)))
        return st;
    st = contiguous(l, &a->inputs[0], &x, &xs);
    if (!st)
        st = prim_bwd_data<T>(l, g, a->inputs[0].dtype, (const T *)x,
                              (const T *)w, b ? cptr<T>(b) : NULL,
                              b ? b->strides[0] : 0,
                              mptr<T>(&a->outputs[0]));
    ck_scratch_free(l, xs);
    ck_scratch_free(l, ws);
    return st;
}

keel_status k_convt(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    const char *op = "conv2d_transpose";
    keel_status st = ck_begin(a, op, &l);
    cgeo g;

    if (st)
        return st;
    if ((a->num_inputs != 2 && a->num_inputs != 3) || a->num_outputs != 1)
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: needs 2 or 3 inputs and 1 output", op);
    if ((st = same_float(a, op)) ||
        (st = conv_geo(a, op, true, &a->outputs[0], &a->inputs[1],
                       &a->inputs[0], &g)))
        return st;
    if (a->num_inputs == 3 && !bias_ok(&a->inputs[2], g.c))
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: bias must be [%lld]", op, (long long)g.c);
    if (ck_numel(&a->outputs[0]) == 0)
        return KEEL_STATUS_OK;
    CK_SWITCH_FLOAT(a->inputs[0].dtype, T, st = convt_run<T>(&l, a, g),
                    return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                                   "%s: needs floats", op))
    return st ? st : ck_end(&l);
}

/* (x, w, dout) -> dx, dw[, db]; transpose: the transposed conv's grads,
 * whose conv2d view has dout as its input side and x as its output. */
template <class T>
keel_status grad_run(const struct ck_launch *l, const keel_kernel_args *a,
                     const cgeo &g, bool transpose)
{
    const keel_tensor_desc *x = &a->inputs[0], *dout = &a->inputs[2];
    const keel_tensor_desc *dx = &a->outputs[0], *dw = &a->outputs[1];
    keel_dtype dt = x->dtype;
    const void *w, *dyc;
    void *ws, *dys = NULL;
    keel_status st;

    if ((st = contiguous(l, &a->inputs[1], &w, &ws)))
        return st;
    if (ck_numel(dx) > 0) {
        if (!transpose) {
            st = contiguous(l, dout, &dyc, &dys);
            if (!st)
                st = prim_bwd_data<T>(l, g, dt, (const T *)dyc,
                                      (const T *)w, NULL, 0, mptr<T>(dx));
        } else {
            st = prim_fwd<T>(l, g, dt, cptr<T>(dout), st4_of(dout),
                             ck_contig(dout), (const T *)w, NULL, 0,
                             mptr<T>(dx));
        }
    }
    if (!st && ck_numel(dw) > 0) {
        if (!transpose)
            st = prim_bwd_filter<T>(l, g, dt, cptr<T>(x), st4_of(x),
                                    cptr<T>(dout), st4_of(dout),
                                    mptr<T>(dw));
        else
            st = prim_bwd_filter<T>(l, g, dt, cptr<T>(dout), st4_of(dout),
                                    cptr<T>(x), st4_of(x), mptr<T>(dw));
    }
    if (!st && a->num_outputs == 3)
        bias_sum<T>(l, dout, &a->outputs[2]);
    ck_scratch_free(l, dys);
    ck_scratch_free(l, ws);
    return st;
}

keel_status conv_grad(const keel_kernel_args *a, const char *op,
                      bool transpose)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, op, &l);
    const keel_tensor_desc *x, *dout;
    cgeo g;

    if (st)
        return st;
    if (a->num_inputs != 3 || (a->num_outputs != 2 && a->num_outputs != 3))
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: needs 3 inputs and 2 or 3 outputs", op);
    x = &a->inputs[0];
    dout = &a->inputs[2];
    if ((st = same_float(a, op)) ||
        (st = conv_geo(a, op, transpose, transpose ? dout : x,
                       &a->inputs[1], transpose ? x : dout, &g)))
        return st;
    for (int d = 0; d < 4; d++)
        if (a->outputs[0].ndim != 4 || a->outputs[0].shape[d] != x->shape[d] ||
            a->outputs[1].ndim != 4 ||
            a->outputs[1].shape[d] != a->inputs[1].shape[d])
            return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: dx/dweight must match x/weight", op);
    if (a->num_outputs == 3 &&
        !bias_ok(&a->outputs[2], transpose ? g.c : g.o))
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: dbias must be [%lld]", op,
                       (long long)(transpose ? g.c : g.o));
    CK_SWITCH_FLOAT(x->dtype, T, st = grad_run<T>(&l, a, g, transpose),
                    return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                                   "%s: needs floats", op))
    return st ? st : ck_end(&l);
}

keel_status k_conv2d_grad(void *, const keel_kernel_args *a)
{
    return conv_grad(a, "conv2d_grad", false);
}

keel_status k_convt_grad(void *, const keel_kernel_args *a)
{
    return conv_grad(a, "conv2d_transpose_grad", true);
}

/* ---- pooling ------------------------------------------------------------- */

enum { POOL_MAX, POOL_AVG, POOL_ADAPTIVE };

struct pgeo {
    int kind;
    int64_t n, c, h, w, oh, ow;
    int64_t kh, kw, sh, sw, pt, pb, pl, pr;
    bool exclusive;
};

/* Window of output o along dim (0 rows, 1 columns): [*a, *b) inside the
 * input; *div is the count the avg divisor uses for that dim. */
__host__ __device__ inline void pool_win(const pgeo &g, int dim, int64_t o,
                                         int64_t *a, int64_t *b,
                                         int64_t *div)
{
    int64_t in = dim ? g.w : g.h, out = dim ? g.ow : g.oh;
    int64_t k = dim ? g.kw : g.kh, s = dim ? g.sw : g.sh;
    int64_t p0 = dim ? g.pl : g.pt, p1 = dim ? g.pr : g.pb;
    int64_t lo, hi;

    if (g.kind == POOL_ADAPTIVE) {
        lo = o * in / out;
        hi = ((o + 1) * in + out - 1) / out;
        *a = lo;
        *b = hi;
        *div = hi - lo;
        return;
    }
    lo = o * s - p0;
    hi = lo + k;
    *div = (hi < in + p1 ? hi : in + p1) - lo;
    *a = lo < 0 ? 0 : lo;
    *b = hi < in ? hi : in;
    if (*b < *a)
        *b = *a;
    if (g.exclusive)
        *div = *b - *a;
}

/* Forward: one thread per output element (n, c, oy, ox); x any strides,
 * out (and idx for max) contiguous. */
template <class T>
__global__ void pool_fwd_kernel(const T *x, st4 xs, pgeo g, T *out,
                                int64_t *idx)
{
    typedef typename ck_compute<T>::C A;
    int64_t total = g.n * g.c * g.oh * g.ow;
    int64_t step = (int64_t)blockDim.x * gridDim.x;

    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         t < total; t += step) {
        int64_t ox = t % g.ow, oy = (t / g.ow) % g.oh;
        int64_t c = (t / (g.ow * g.oh)) % g.c, n = t / (g.ow * g.oh * g.c);
        int64_t y0, y1, dy, x0, x1, dx;
        const T *p = x + n * xs.s[0] + c * xs.s[1];

        pool_win(g, 0, oy, &y0, &y1, &dy);
        pool_win(g, 1, ox, &x0, &x1, &dx);
        if (g.kind == POOL_MAX) {
            A m = (A)-INFINITY;
            int64_t best = -1;
            for (int64_t iy = y0; iy < y1; iy++)
                for (int64_t ix = x0; ix < x1; ix++) {
                    A v = ck_ld<T>(p + iy * xs.s[2] + ix * xs.s[3]);
                    if (v > m || best < 0 || (v != v && m == m)) {
                        m = v;
                        best = iy * g.w + ix;
                    }
                }
            out[t] = ck_cv<T>(m);
            idx[t] = best;
            continue;
        }
        A s = 0;
        for (int64_t iy = y0; iy < y1; iy++)
            for (int64_t ix = x0; ix < x1; ix++)
                s += ck_ld<T>(p + iy * xs.s[2] + ix * xs.s[3]);
        if (g.kind == POOL_ADAPTIVE)
            out[t] = ck_cv<T>(s / (A)(dy * dx));
        else
            out[t] = ck_cv<T>(dy * dx > 0 && y1 > y0 && x1 > x0
                                  ? s / (A)(dy * dx)
                                  : (A)0);
    }
}

/* Outputs along one dim whose window may contain input index i: a range
 * widened by one on each side (membership is tested exactly). */
__device__ inline void pool_cand(const pgeo &g, int dim, int64_t i,
                                 int64_t *lo, int64_t *hi)
{
    int64_t in = dim ? g.w : g.h, out = dim ? g.ow : g.oh;
    int64_t k = dim ? g.kw : g.kh, s = dim ? g.sw : g.sh;
    int64_t p0 = dim ? g.pl : g.pt, a, b;

    if (g.kind == POOL_ADAPTIVE) {
        /* window o starts at floor(o * in / out) <= i and ends at
         * ceil((o + 1) * in / out) > i */
        a = i * out / in;
        b = ((i + 1) * out + in - 1) / in - 1;
    } else {
        /* o * s - p0 <= i < o * s - p0 + k */
        int64_t t = i + p0 - k + 1;
        a = t <= 0 ? 0 : (t + s - 1) / s;
        b = (i + p0) / s;
    }
    a -= 1;
    b += 1;
    *lo = a < 0 ? 0 : a;
    *hi = b >= out ? out - 1 : b;
}

/* avg / adaptive grad: one thread per input element (n, c, iy, ix) summing
 * dout / divisor over the outputs whose window contains it, in output
 * order. dx contiguous; dout any strides. */
template <class T>
__global__ void avg_grad_kernel(const T *dout, st4 ds, pgeo g, T *dx)
{
    typedef typename ck_compute<T>::C A;
    int64_t total = g.n * g.c * g.h * g.w;
    int64_t step = (int64_t)blockDim.x * gridDim.x;

    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         t < total; t += step) {
        int64_t ix = t % g.w, iy = (t / g.w) % g.h;
        int64_t c = (t / (g.w * g.h)) % g.c, n = t / (g.w * g.h * g.c);
        const T *p = dout + n * ds.s[0] + c * ds.s[1];
        int64_t oy0, oy1, ox0, ox1;
        A acc = 0;

        pool_cand(g, 0, iy, &oy0, &oy1);
        pool_cand(g, 1, ix, &ox0, &ox1);
        for (int64_t oy = oy0; oy <= oy1; oy++) {
            int64_t y0, y1, dy;
            pool_win(g, 0, oy, &y0, &y1, &dy);
            if (iy < y0 || iy >= y1)
                continue;
            for (int64_t ox = ox0; ox <= ox1; ox++) {
                int64_t x0, x1, dv;
                pool_win(g, 1, ox, &x0, &x1, &dv);
                if (ix < x0 || ix >= x1 || dy * dv <= 0)
                    continue;
                acc += ck_ld<T>(p + oy * ds.s[2] + ox * ds.s[3]) /
                       (A)(dy * dv);
            }
        }
        dx[t] = ck_cv<T>(acc);
    }
}

/* max grad, pass 1: for each plane and output row (cols = false) or
 * column (cols = true), the range of input rows (columns) its valid
 * indices point at; an empty range is lo > hi. ranges: [plane][k][2]. */
__global__ void max_ranges_kernel(const int64_t *idx, st4 is, pgeo g,
                                  bool cols, int64_t *ranges)
{
    int64_t per = cols ? g.ow : g.oh, len = cols ? g.oh : g.ow;
    int64_t total = g.n * g.c * per, hw = g.h * g.w;
    int64_t step = (int64_t)blockDim.x * gridDim.x;

    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         t < total; t += step) {
        int64_t k = t % per, c = (t / per) % g.c, n = t / (per * g.c);
        int64_t lo = INT64_MAX, hi = -1;
        const int64_t *p = idx + n * is.s[0] + c * is.s[1];

        for (int64_t m = 0; m < len; m++) {
            int64_t oy = cols ? m : k, ox = cols ? k : m;
            int64_t i = p[oy * is.s[2] + ox * is.s[3]];
            if (i < 0 || i >= hw)
                continue;
            int64_t v = cols ? i % g.w : i / g.w;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        ranges[2 * t] = lo;
        ranges[2 * t + 1] = hi;
    }
}

/* max grad, pass 2: one thread per input element summing, in output
 * order, dout of the outputs whose index is this element. */
template <class T>
__global__ void max_grad_kernel(const T *dout, st4 ds, const int64_t *idx,
                                st4 is, pgeo g, const int64_t *rrow,
                                const int64_t *rcol, T *dx)
{
    typedef typename ck_compute<T>::C A;
    int64_t total = g.n * g.c * g.h * g.w;
    int64_t step = (int64_t)blockDim.x * gridDim.x;

    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         t < total; t += step) {
        int64_t ix = t % g.w, iy = (t / g.w) % g.h;
        int64_t pl = t / (g.w * g.h), c = pl % g.c, n = pl / g.c;
        int64_t me = iy * g.w + ix;
        const T *dp = dout + n * ds.s[0] + c * ds.s[1];
        const int64_t *ip = idx + n * is.s[0] + c * is.s[1];
        const int64_t *rr = rrow + 2 * pl * g.oh;
        const int64_t *rc = rcol + 2 * pl * g.ow;
        A acc = 0;

        for (int64_t oy = 0; oy < g.oh; oy++) {
            if (iy < rr[2 * oy] || iy > rr[2 * oy + 1])
                continue;
            for (int64_t ox = 0; ox < g.ow; ox++) {
                if (ix < rc[2 * ox] || ix > rc[2 * ox + 1])
                    continue;
                if (ip[oy * is.s[2] + ox * is.s[3]] == me)
                    acc += ck_ld<T>(dp + oy * ds.s[2] + ox * ds.s[3]);
            }
        }
        dx[t] = ck_cv<T>(acc);
    }
}

/* Pool geometry from attributes (max/avg) or output_size (adaptive), the
 * input x and the (forward) output o. */
keel_status pool_geo(const keel_kernel_args *a, const char *op, int kind,
                     const keel_tensor_desc *x, const keel_tensor_desc *o,
                     pgeo *g)
{
    int64_t k[2] = {1, 1}, s[2] = {1, 1}, pad[4] = {0, 0, 0, 0};
    bool ceil_mode = ck_attr_i(a, "ceil_mode", 0) != 0;

    if (x->ndim != 4 || o->ndim != 4 || o->shape[0] != x->shape[0] ||
        o->shape[1] != x->shape[1])
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: x and the output must be 4-D with one N, C", op);
    memset(g, 0, sizeof(*g));
    g->kind = kind;
    g->n = x->shape[0];
    g->c = x->shape[1];
    g->h = x->shape[2];
    g->w = x->shape[3];
    g->oh = o->shape[2];
    g->ow = o->shape[3];
    g->exclusive = ck_attr_i(a, "exclusive", 1) != 0;
    if (kind == POOL_ADAPTIVE)
        return g->h > 0 && g->w > 0
                   ? KEEL_STATUS_OK
                   : ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                             "%s: empty input plane", op);
    if (!kpair(a, "kernel_size", 1, NULL, k) || !kpair(a, "stride", 1, k, s) ||
        !kpads(a, pad))
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: bad kernel_size, stride or padding", op);
    g->kh = k[0];
    g->kw = k[1];
    g->sh = s[0];
    g->sw = s[1];
    g->pt = pad[0];
    g->pb = pad[1];
    g->pl = pad[2];
    g->pr = pad[3];
    for (int i = 0; i < 2; i++) {
        int64_t span = x->shape[2 + i] + pad[2 * i] + pad[2 * i + 1] - k[i];
        int64_t want = span < 0 ? -1
                                : (span + (ceil_mode ? s[i] - 1 : 0)) / s[i] +
                                      1;
        if (o->shape[2 + i] != want)
            return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: output dims disagree with the attributes", op);
    }
    return KEEL_STATUS_OK;
}

keel_status pool_fwd(const keel_kernel_args *a, const char *op, int kind)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, op, &l);
    int nout = kind == POOL_MAX ? 2 : 1;
    const keel_tensor_desc *x, *o;
    int64_t *idx = NULL;
    pgeo g;

    if (st)
        return st;
    if ((st = ck_arity(a, op, 1, nout)))
        return st;
    x = &a->inputs[0];
    o = &a->outputs[0];
    if (!ck_float_dtype(x->dtype) || o->dtype != x->dtype || !ck_contig(o))
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: the output must be contiguous %s", op,
                       ck_dtype_name(x->dtype));
    if (nout == 2) {
        const keel_tensor_desc *i = &a->outputs[1];
        if (i->dtype != KEEL_I64 || !ck_contig(i) ||
            ck_numel(i) != ck_numel(o))
            return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: indices must be contiguous int64 like out",
                           op);
        idx = (int64_t *)(uintptr_t)i->data;
    }
    if ((st = pool_geo(a, op, kind, x, o, &g)))
        return st;
    int64_t total = ck_numel(o);
    if (total == 0)
        return KEEL_STATUS_OK;
    CK_SWITCH_FLOAT(x->dtype, T,
                    (pool_fwd_kernel<T><<<grid_for(total), CK_BLOCK, 0,
                                          l.stream>>>(cptr<T>(x), st4_of(x),
                                                      g, mptr<T>(o), idx)),
                    return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                                   "%s: needs floats", op))
    return ck_end(&l);
}

keel_status k_max_pool(void *, const keel_kernel_args *a)
{
    return pool_fwd(a, "max_pool2d", POOL_MAX);
}

keel_status k_avg_pool(void *, const keel_kernel_args *a)
{
    return pool_fwd(a, "avg_pool2d", POOL_AVG);
}

keel_status k_adaptive(void *, const keel_kernel_args *a)
{
    return pool_fwd(a, "adaptive_avg_pool2d", POOL_ADAPTIVE);
}

template <class T>
keel_status max_grad_run(const struct ck_launch *l, const pgeo &g,
                         const keel_tensor_desc *dd,
                         const keel_tensor_desc *id,
                         const keel_tensor_desc *od)
{
    int64_t planes = g.n * g.c, total = ck_numel(od);
    const int64_t *idx = (const int64_t *)(uintptr_t)id->data;
    void *rv = NULL;
    keel_status st;

    st = ck_scratch(l, (size_t)(planes * (g.oh + g.ow) * 2) *
                           sizeof(int64_t), &rv);
    if (st)
        return st;
    int64_t *rrow = (int64_t *)rv, *rcol = rrow + 2 * planes * g.oh;
    if (planes * g.oh > 0)
        max_ranges_kernel<<<grid_for(planes * g.oh), CK_BLOCK, 0,
                            l->stream>>>(idx, st4_of(id), g, false, rrow);
    if (planes * g.ow > 0)
        max_ranges_kernel<<<grid_for(planes * g.ow), CK_BLOCK, 0,
                            l->stream>>>(idx, st4_of(id), g, true, rcol);
    max_grad_kernel<T><<<grid_for(total), CK_BLOCK, 0, l->stream>>>(
        cptr<T>(dd), st4_of(dd), idx, st4_of(id), g, rrow, rcol,
        mptr<T>(od));
    ck_scratch_free(l, rv);
    return KEEL_STATUS_OK;
}

/* Grads: (x, dout) or (x, indices, dout) -> dx. */
keel_status pool_grad(const keel_kernel_args *a, const char *op, int kind)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, op, &l);
    int nin = kind == POOL_MAX ? 3 : 2;
    const keel_tensor_desc *x, *dout, *od;
    pgeo g;

    if (st)
        return st;
    if ((st = ck_arity(a, op, nin, 1)))
        return st;
    x = &a->inputs[0];
    dout = &a->inputs[nin - 1];
    od = &a->outputs[0];
    if (!ck_float_dtype(x->dtype) || dout->dtype != x->dtype ||
        od->dtype != x->dtype || !ck_contig(od) ||
        ck_numel(od) != ck_numel(x))
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: dx must be contiguous like x; dout of x's dtype",
                       op);
    if (kind == POOL_MAX) {
        const keel_tensor_desc *i = &a->inputs[1];
        if (x->ndim != 4 || dout->ndim != 4 || i->dtype != KEEL_I64 ||
            i->ndim != 4)
            return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: needs 4-D x, int64 indices and dout", op);
        for (int d = 0; d < 4; d++)
            if (i->shape[d] != dout->shape[d] ||
                (d < 2 && dout->shape[d] != x->shape[d]))
                return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                               "%s: indices/dout shapes disagree", op);
        memset(&g, 0, sizeof(g));
        g.kind = POOL_MAX;
        g.n = x->shape[0];
        g.c = x->shape[1];
        g.h = x->shape[2];
        g.w = x->shape[3];
        g.oh = dout->shape[2];
        g.ow = dout->shape[3];
    } else if ((st = pool_geo(a, op, kind, x, dout, &g))) {
        return st;
    }
    int64_t total = ck_numel(od);
    if (total == 0)
        return KEEL_STATUS_OK;
    if (kind == POOL_MAX) {
        CK_SWITCH_FLOAT(x->dtype, T,
                        st = max_grad_run<T>(&l, g, dout, &a->inputs[1], od),
                        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                                       "%s: needs floats", op))
        if (st)
            return st;
    } else {
        CK_SWITCH_FLOAT(x->dtype, T,
                        (avg_grad_kernel<T><<<grid_for(total), CK_BLOCK, 0,
                                              l.stream>>>(
                            cptr<T>(dout), st4_of(dout), g, mptr<T>(od))),
                        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                                       "%s: needs floats", op))
    }
    return ck_end(&l);
}

keel_status k_max_grad(void *, const keel_kernel_args *a)
{
    return pool_grad(a, "max_pool2d_grad", POOL_MAX);
}

keel_status k_avg_grad(void *, const keel_kernel_args *a)
{
    return pool_grad(a, "avg_pool2d_grad", POOL_AVG);
}

keel_status k_adaptive_grad(void *, const keel_kernel_args *a)
{
    return pool_grad(a, "adaptive_avg_pool2d_grad", POOL_ADAPTIVE);
}

} // namespace

extern "C" const struct ck_entry ck_kernels_conv[] = {
    {"conv2d", KEEL_DT_FLOAT, k_conv2d},
    {"conv2d_grad", KEEL_DT_FLOAT, k_conv2d_grad},
    {"conv2d_transpose", KEEL_DT_FLOAT, k_convt},
    {"conv2d_transpose_grad", KEEL_DT_FLOAT, k_convt_grad},
    {"max_pool2d", KEEL_DT_FLOAT, k_max_pool},
    {"max_pool2d_grad", KEEL_DT_FLOAT, k_max_grad},
    {"avg_pool2d", KEEL_DT_FLOAT, k_avg_pool},
    {"avg_pool2d_grad", KEEL_DT_FLOAT, k_avg_grad},
    {"adaptive_avg_pool2d", KEEL_DT_FLOAT, k_adaptive},
    {"adaptive_avg_pool2d_grad", KEEL_DT_FLOAT, k_adaptive_grad},
    {NULL, 0, NULL},
};
