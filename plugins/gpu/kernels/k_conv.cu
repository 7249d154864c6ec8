/*
 * keel CUDA plugin — convolution (conv2d, fused_conv2d, conv2d_transpose
 * and their grads) and pooling (max, avg, adaptive avg and their grads), NCHW, with
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
 *   fused_conv2d           fwd, then one elementwise epilogue kernel
 *                          applying the activation (ck_act.cuh) to the
 *                          output, bias already added
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
#include "ck_act.cuh"
#include "ck_gemm.h" /* ckl_gemm, from k_linalg.cu */

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

/* ---- geometry (the kit's) and this plugin's limits ----------------------- */

/* The kit's conv2d view (keel/kit.h: big side [n, c, h, w], small side
 * [n, o, oh, ow], pads, groups, cg, og) plus what only this plugin
 * derives from it. Passed to the kernels by value. */
struct cgeo : keel_kit_conv {
    int64_t ckk, hw, ohw;
    bool direct_1x1; /* the input is its own column matrix */
};

/*
 * Geometry of a conv op from the kit (keel_kit_conv_geometry resolves the
 * attributes as the core does) and cuBLAS's int range (NOT_SUPPORTED
 * beyond it). The view of (x, weight, out) or, for the grads (`grad`),
 * (x, weight, dout): a transposed conv's big side is its output (dout),
 * its small side x.
 */
keel_status conv_geo(const keel_kernel_args *a, const char *op,
                     bool transpose, bool grad, cgeo *g)
{
    const keel_tensor_desc *x = &a->inputs[0], *wt = &a->inputs[1];
    const keel_tensor_desc *y = grad ? &a->inputs[2] : &a->outputs[0];
    keel_kit_msg m;

    if (keel_kit_conv_geometry(a, transpose, transpose ? y : x, wt,
                               transpose ? x : y, g, &m))
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s", m.text);
    g->ckk = g->cg * g->kh * g->kw;
    g->hw = g->h * g->w;
    g->ohw = g->oh * g->ow;
    g->direct_1x1 = g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 &&
                    !g->pad[0] && !g->pad[1] && !g->pad[2] && !g->pad[3];
    if (g->og > INT_MAX || g->ckk > INT_MAX || g->ohw > INT_MAX ||
        g->hw > INT_MAX)
        return ck_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: a GEMM dim exceeds the BLAS int range", op);
    /* Outputs are written as contiguous buffers. */
    for (int i = 0; i < a->num_outputs; i++)
        if (!ck_contig(&a->outputs[i]))
            return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: output %d must be contiguous", op, i);
    return KEEL_STATUS_OK;
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
        int64_t iy = oy * g.sh - g.pad[0] + i * g.dh;
        int64_t ix = ox * g.sw - g.pad[2] + j * g.dw;
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
            int64_t oy = tap_out(iy, i, g.pad[0], g.dh, g.sh, g.oh);
            if (oy < 0)
                continue;
            for (int64_t j = 0; j < g.kw; j++) {
                int64_t ox = tap_out(ix, j, g.pad[2], g.dw, g.sw, g.ow);
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
                       g.groups, s);
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
                       ldc, nc, g.groups, s);
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
                      g.og * g.ckk, g.groups);
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

/* conv2d, or fused_conv2d (`fused`): the same forward, then for
 * fused_conv2d the activation over the whole output. */
keel_status conv2d_fwd(const keel_kernel_args *a, const char *op, bool fused)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, op, &l);
    double alpha = 0;
    int act = KEEL_FUSED_ACT_NONE;
    cgeo g;

    if (st)
        return st;
    if ((st = conv_geo(a, op, false, false, &g)))
        return st;
    if (ck_numel(&a->outputs[0]) == 0)
        return KEEL_STATUS_OK;
    if (fused)
        act = keel_kit_activation(a, &alpha); /* checked by ck_begin */
    CK_SWITCH_FLOAT(a->inputs[0].dtype, T, st = conv2d_run<T>(&l, a, g),
                    return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                                   "%s: needs floats", op))
    if (!st)
        st = ck_act_run(&l, a->outputs[0].dtype, act, alpha,
                        (void *)(uintptr_t)a->outputs[0].data,
                        ck_numel(&a->outputs[0]));
    return st ? st : ck_end(&l);
}

keel_status k_conv2d(void *, const keel_kernel_args *a)
{
    return conv2d_fwd(a, "conv2d", false);
}

keel_status k_fused_conv2d(void *, const keel_kernel_args *a)
{
    return conv2d_fwd(a, "fused_conv2d", true);
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
    if ((st = conv_geo(a, op, true, false, &g)))
        return st;
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
    const keel_tensor_desc *x = &a->inputs[0];
    cgeo g;

    if (st)
        return st;
    if ((st = conv_geo(a, op, transpose, true, &g)))
        return st;
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

/* The kit's kinds; max_pool2d_grad is POOL_MAX here, with its geometry
 * from KEEL_KIT_POOL_INDEXED (planes only). */
enum {
    POOL_MAX = KEEL_KIT_POOL_MAX,
    POOL_AVG = KEEL_KIT_POOL_AVG,
    POOL_ADAPTIVE = KEEL_KIT_POOL_ADAPTIVE
};

/* The kit's pooling geometry (keel/kit.h) and the kind; passed to the
 * kernels by value. */
struct pgeo : keel_kit_pool {
    int kind;
};

/* Window of output o along dim (0 rows, 1 columns): [*a, *b) inside the
 * input; *div is the count the avg divisor uses for that dim. */
__host__ __device__ inline void pool_win(const pgeo &g, int dim, int64_t o,
                                         int64_t *a, int64_t *b,
                                         int64_t *div)
{
    int64_t in = dim ? g.w : g.h, out = dim ? g.ow : g.oh;
    int64_t k = dim ? g.kw : g.kh, s = dim ? g.sw : g.sh;
    int64_t p0 = dim ? g.pad[2] : g.pad[0], p1 = dim ? g.pad[3] : g.pad[1];
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
    int64_t p0 = dim ? g.pad[2] : g.pad[0], a, b;

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

/* Pool geometry from the kit: attributes (max/avg) or output_size
 * (adaptive), the input x and the forward output (or dout); `grad` for
 * max_pool2d_grad's, which is the planes only. Outputs must be
 * contiguous: the kernels write them so. */
keel_status pool_geo(const keel_kernel_args *a, const char *op, int kind,
                     bool grad, const keel_tensor_desc *x,
                     const keel_tensor_desc *o, pgeo *g)
{
    keel_kit_msg m;

    if (keel_kit_pool_geometry(a, grad && kind == POOL_MAX
                                      ? KEEL_KIT_POOL_INDEXED
                                      : kind,
                               x, o, g, &m))
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s", m.text);
    g->kind = kind;
    for (int i = 0; i < a->num_outputs; i++)
        if (!ck_contig(&a->outputs[i]))
            return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: output %d must be contiguous", op, i);
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
    x = &a->inputs[0];
    o = &a->outputs[0];
    if (nout == 2)
        idx = (int64_t *)(uintptr_t)a->outputs[1].data;
    if ((st = pool_geo(a, op, kind, false, x, o, &g)))
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
    x = &a->inputs[0];
    dout = &a->inputs[nin - 1];
    od = &a->outputs[0];
    if ((st = pool_geo(a, op, kind, true, x, dout, &g)))
        return st;
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

#if CK_HOST_PASS
extern "C" const struct ck_entry ck_kernels_conv[] = {
    {"conv2d", KEEL_DT_FLOAT, k_conv2d},
    {"fused_conv2d", KEEL_DT_FLOAT, k_fused_conv2d},
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
#endif

