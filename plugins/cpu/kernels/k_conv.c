/*
 * CPU kernels: convolution (conv2d, fused_conv2d, conv2d_transpose and
 * their grads) and pooling (max, avg, adaptive avg and their grads), NCHW.
 *
 * CONVOLUTION
 *
 * Every conv op is expressed with three primitives over one conv2d
 * geometry (struct cgeo: input [n, c, h, w], weight [o, c/g, kh, kw],
 * output [n, o, oh, ow]):
 *
 *   fwd          y = conv(x, w) (+ bias)        im2col + GEMM
 *   bwd_data     dx = conv^T(dy, w) (+ bias)    GEMM (W^T dy) + col2im
 *   bwd_filter   dw = sum_n dy col(x)^T         im2col + GEMM
 *
 *   conv2d                 fwd
 *   fused_conv2d           fwd with an epilogue: the activation
 *   conv2d_grad            bwd_data, bwd_filter, bias sum of dout
 *   conv2d_transpose       bwd_data with x as dy (the transposed conv is
 *                          the gradient of conv2d w.r.t. its input)
 *   conv2d_transpose_grad  dx = fwd(dout), dw = bwd_filter(dout, x)
 *
 * fused_conv2d computes conv2d's output exactly as conv2d does (the same
 * path: direct SIMD or im2col + GEMM) and applies its activation in place
 * to each image's output (or each image group's, on the GEMM path) right
 * after it is written, on the thread that wrote it, while it is in cache
 * (cpu_act_f32/_f64: the activation ops' own loops). float16/bfloat16 run
 * in float32 buffers: the values are rounded to their dtype before the
 * activation, so it reads what conv2d would have stored. The results
 * equal conv2d followed by the activation op, bit for bit.
 *
 * For a transposed conv the conv2d view swaps sides: its "input" is the
 * transposed conv's output, its "output" the transposed conv's input, and
 * the weight [C, O/g, kh, kw] is read as [o, c/g, kh, kw].
 *
 * Small stride-1 float32 convolutions skip all of this: run_prim hands
 * them to the direct AVX-512 kernels of k_conv_simd.c when those apply
 * (see there), and the rest of this file is their fallback.
 *
 * A 1x1 kernel with stride 1 and no padding needs no im2col: the image is
 * its own column matrix. Per image and group the GEMM is
 * [og x ckk] * [ckk x oh*ow] (ckk = c/g * kh * kw). A stride-1 forward
 * uses a "wide" column matrix instead (fwd_image_wide): output rows are
 * widened to the padded input width, which makes each column row one
 * contiguous slice of the padded image, at the price of some junk columns
 * the GEMM computes and the compaction drops. The backward primitives keep
 * the exact-width im2col, so that no junk column ever meets a gradient
 * (0 * inf would leak NaN into dw).
 *
 * POOLING: direct loops over one output row at a time (the window rows are
 * shared by the whole row; the inner loop runs along the output columns),
 * parallel over the N*C planes; float32 max pooling has AVX-512 paths for
 * dense rows and for whole planes of 2x2/2 windows (and that gradient's
 * dense write), see max_row_avx512_f32 and max_plane_2x2_avx512.
 * max_pool2d's index is iy * w + ix within the plane; the first maximum
 * in window order wins, NaN wins over numbers, positions in the padding
 * never take part. A window that lies
 * entirely in the padding (possible with ceil_mode or large padding) gives
 * -inf with index -1 for max and 0 for avg. avg divisor: the elements of
 * the window inside the input (exclusive) or inside the padded input
 * (exclusive = 0, Paddle's rule).
 *
 * DTYPES: float32 and float64 are computed in their own type; float16 and
 * bfloat16 are converted block-wise to float32 buffers, computed there and
 * converted back. Strided inputs are packed to contiguous buffers (conv) or
 * read through their strides (pooling, float32/float64).
 *
 * THREADS: with several images and per-group GEMMs that OpenBLAS runs on
 * one thread (og * ckk * oh*ow <= 262144, or OpenBLAS set to one thread;
 * see k_linalg.c) or that can be cut into such pieces of >= 64 columns,
 * images are shared out over the plugin pool, one column buffer per share
 * (slot); bwd_filter gives each slot its own dw partial and sums them at
 * the end. Larger convs run image after image and let OpenBLAS thread
 * each GEMM, with im2col/col2im split over the pool.
 *
 * WORKSPACE: malloc'd at run time; impls cannot fail, so when it cannot be
 * had an allocation-free direct loop (double accumulation, any strides and
 * dtype) computes the same result. KEEL_CPU_NO_WORKSPACE=1 forces it (used
 * by the tests).
 */
#include "kblas.h"
#include "kconv_simd.h"
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "kern.h"

/* From k_linalg.c. */
bool cpu_blas_single(double mnk);

/* OpenBLAS runs a GEMM of up to this many multiply-adds on one thread. */
#define GEMM_SMALL_MNK (65536.0 * 4.0)

static void zero_bytes(void *p, size_t n)
{
    if (n)
        memset(p, 0, n);
}

static bool is_half(keel_dtype dt)
{
    return dt == KEEL_F16 || dt == KEEL_BF16;
}

/* The dtype computations run in. */
static keel_dtype compute_dt(keel_dtype dt)
{
    return dt == KEEL_F64 ? KEEL_F64 : KEEL_F32;
}

/* ---- conversion to/from contiguous compute buffers ----------------------- */

struct cvt {
    keel_dtype to, from;
};

/* p[0] (to) <- p[1] (from), byte strides st. */
static void cvt_row(void *ctx, char *const *p, const int64_t *st, int64_t n)
{
    const struct cvt *c = ctx;
    int64_t eo = keel_dtype_size(c->to), ei = keel_dtype_size(c->from);
    bool contig = st[0] == eo && st[1] == ei;
    char *d = p[0];
    const char *s = p[1];

    if (c->to == c->from) {
        if (contig) {
            memcpy(d, s, (size_t)(n * eo));
        } else if (eo == 4) {
            for (int64_t i = 0; i < n; i++)
                *(float *)(d + i * st[0]) = *(const float *)(s + i * st[1]);
        } else {
            for (int64_t i = 0; i < n; i++)
                *(double *)(d + i * st[0]) =
                    *(const double *)(s + i * st[1]);
        }
        return;
    }
    if (contig) {
        if (c->from == KEEL_F16)
            kf16_to_f32((const uint16_t *)s, (float *)d, n);
        else if (c->from == KEEL_BF16)
            kbf16_to_f32((const uint16_t *)s, (float *)d, n);
        else if (c->to == KEEL_F16)
            kf32_to_f16((const float *)s, (uint16_t *)d, n);
        else
            kf32_to_bf16((const float *)s, (uint16_t *)d, n);
        return;
    }
    if (c->from == KEEL_F16) {
        for (int64_t i = 0; i < n; i++)
            *(float *)(d + i * st[0]) =
                cpu_f16_to_f32(*(const uint16_t *)(s + i * st[1]));
    } else if (c->from == KEEL_BF16) {
        for (int64_t i = 0; i < n; i++)
            *(float *)(d + i * st[0]) =
                cpu_bf16_to_f32(*(const uint16_t *)(s + i * st[1]));
    } else if (c->to == KEEL_F16) {
        for (int64_t i = 0; i < n; i++)
            *(uint16_t *)(d + i * st[0]) =
                cpu_f32_to_f16(*(const float *)(s + i * st[1]));
    } else {
        for (int64_t i = 0; i < n; i++)
            *(uint16_t *)(d + i * st[0]) =
                cpu_f32_to_bf16(*(const float *)(s + i * st[1]));
    }
}

static void contig_strides(const keel_tensor_desc *d, int64_t *st)
{
    int64_t s = 1;

    for (int i = d->ndim - 1; i >= 0; i--) {
        st[i] = s;
        s *= d->shape[i];
    }
}

/* Copy tensor `d` at `src` into contiguous `dst` of dtype `to`. */
static void pack_to(void *dst, keel_dtype to, const keel_tensor_desc *d,
                    const void *src)
{
    int64_t st[2][KEEL_MAX_DIMS];
    void *base[2] = {dst, (void *)src};
    uint32_t es[2] = {keel_dtype_size(to), keel_dtype_size(d->dtype)};
    struct cvt c = {to, d->dtype};

    contig_strides(d, st[0]);
    memcpy(st[1], d->strides, sizeof(st[1]));
    kiter(2, base, (const int64_t(*)[KEEL_MAX_DIMS])st, es, d->ndim,
          d->shape, cvt_row, &c);
}

/* Contiguous compute buffer -> contiguous output `d` (a half dtype). */
static void unpack_to(const keel_tensor_desc *d, void *dst, const void *src)
{
    int64_t st[2][KEEL_MAX_DIMS];
    void *base[2] = {dst, (void *)src};
    uint32_t es[2] = {keel_dtype_size(d->dtype), sizeof(float)};
    struct cvt c = {d->dtype, KEEL_F32};

    contig_strides(d, st[0]);
    contig_strides(d, st[1]);
    kiter(2, base, (const int64_t(*)[KEEL_MAX_DIMS])st, es, d->ndim,
          d->shape, cvt_row, &c);
}

/*
 * Inputs and outputs in the compute dtype. An input already contiguous in
 * the compute dtype is used in place; anything else gets a slice of the
 * workspace. plan_* count bytes; bind_* hand out the slices.
 */
struct buf {
    const keel_tensor_desc *d;
    void *host;  /* the tensor's memory */
    void *data;  /* compute-dtype contiguous view */
    bool staged; /* data lives in the workspace */
    bool output;
};

static size_t align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

static size_t buf_plan(struct buf *b, const keel_tensor_desc *d, void *host,
                       bool output)
{
    keel_dtype cdt = compute_dt(d->dtype);

    b->d = d;
    b->host = host;
    b->output = output;
    b->staged = d->dtype != cdt || (!output && !kcontig(d));
    b->data = b->staged ? NULL : host;
    return b->staged ? align64((size_t)knumel(d) * keel_dtype_size(cdt)) : 0;
}

/* Give staged buffers their slice; pack staged inputs. */
static char *buf_bind(struct buf *b, char *ws)
{
    if (!b->staged)
        return ws;
    b->data = ws;
    if (!b->output)
        pack_to(ws, compute_dt(b->d->dtype), b->d, b->host);
    return ws + align64((size_t)knumel(b->d) *
                        keel_dtype_size(compute_dt(b->d->dtype)));
}

/* Convert a staged output back to the tensor's dtype. */
static void buf_finish(const struct buf *b)
{
    if (b->staged && b->output)
        unpack_to(b->d, b->host, b->data);
}

/* ---- per-dtype helpers (float and double) -------------------------------- */

/* Geometry of one convolution seen as conv2d. */
struct cgeo {
    int64_t n, c, h, w;  /* input */
    int64_t o, oh, ow;   /* output */
    int64_t kh, kw, sh, sw, pt, pl, dh, dw, g;
    int64_t cg, og, ckk, hw, ohw;
    bool direct_1x1; /* the input is its own column matrix */
    /* Stride-1 forward: output rows widened to the padded input's width
     * wp (hp rows), see fwd_image_wide. */
    bool wide;
    int64_t hp, wp;
};

/* Output positions o in [0, nout) whose input index o*s + off lies in
 * [0, nin): [*lo, *hi). */
static void out_span(int64_t nout, int64_t s, int64_t off, int64_t nin,
                     int64_t *lo, int64_t *hi)
{
    int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t b = nin - off <= 0 ? 0 : (nin - off + s - 1) / s;

    if (b > nout)
        b = nout;
    if (a > b)
        a = b;
    *lo = a;
    *hi = b;
}

/* The output spans of every kernel tap along y and x (out_span of tap i
 * or j), computed once per call instead of once per column row: integer
 * divisions per row were a large part of im2col on small images. Kernels
 * wider than TAP_MAX fall back to out_span per row. */
#define TAP_MAX 32
struct tap_spans {
    bool ok;
    int64_t y0[TAP_MAX], y1[TAP_MAX], x0[TAP_MAX], x1[TAP_MAX];
};

static void tap_spans_make(const struct cgeo *g, struct tap_spans *t)
{
    t->ok = g->kh <= TAP_MAX && g->kw <= TAP_MAX;
    for (int64_t i = 0; t->ok && i < g->kh; i++)
        out_span(g->oh, g->sh, i * g->dh - g->pt, g->h, &t->y0[i], &t->y1[i]);
    for (int64_t j = 0; t->ok && j < g->kw; j++)
        out_span(g->ow, g->sw, j * g->dw - g->pl, g->w, &t->x0[j], &t->x1[j]);
}

/* Spans of tap (i, j): [*y0, *y1) x [*x0, *x1). */
static inline void tap_span(const struct cgeo *g, const struct tap_spans *t,
                            int64_t i, int64_t j, int64_t *y0, int64_t *y1,
                            int64_t *x0, int64_t *x1)
{
    if (t->ok) {
        *y0 = t->y0[i], *y1 = t->y1[i], *x0 = t->x0[j], *x1 = t->x1[j];
        return;
    }
    out_span(g->oh, g->sh, i * g->dh - g->pt, g->h, y0, y1);
    out_span(g->ow, g->sw, j * g->dw - g->pl, g->w, x0, x1);
}

struct tops {
    size_t es;
    /* C (+)= op(A) op(B); split: keep every OpenBLAS call single-threaded
     * by cutting the image-column dim (N, or K when B is transposed) */
    void (*gemm)(bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                 const void *A, int64_t lda, const void *B, int64_t ldb,
                 bool acc, void *C, int64_t ldc, bool split);
    void (*im2col)(const struct cgeo *g, const void *src, void *col,
                   int64_t r0, int64_t r1);
    void (*col2im)(const struct cgeo *g, const void *col, void *dst,
                   int64_t c0, int64_t c1);
    /* rows x plane: row r set to bias[r] */
    void (*fill_rows)(void *y, const void *bias, int64_t rows, int64_t plane);
    /* rows x plane: row r += bias[r] */
    void (*add_rows)(void *y, const void *bias, int64_t rows, int64_t plane);
    void (*add)(void *dst, const void *src, int64_t n);
    double (*sum)(const void *p, int64_t n);
    void (*store)(void *p, int64_t i, double v);
    /* the wide forward: pad, column rows, compaction */
    void (*pad)(const struct cgeo *g, const void *src, void *dst);
    void (*wide_cols)(const struct cgeo *g, const void *xp, void *col,
                      int64_t r0, int64_t r1);
    void (*compact)(const struct cgeo *g, const void *wide, void *y);
};

#define DEF_CONV_HELPERS(T, S, BLAS)                                           \
    /* Copies and fills by fixed-size blocks (inline vector moves, no          \
     * library call for the short rows convolutions are made of); adds by      \
     * blocked loops over restrict pointers, whose constant-trip inner         \
     * loops vectorize even under gcc -O2's very-cheap cost model. */          \
    static inline void vcopy_##S(T *restrict d, const T *restrict s,           \
                                 int64_t n)                                    \
    {                                                                          \
        int64_t i = 0;                                                         \
        for (; i + 8 <= n; i += 8)                                             \
            memcpy(d + i, s + i, 8 * sizeof(T));                               \
        if (i + 4 <= n) {                                                      \
            memcpy(d + i, s + i, 4 * sizeof(T));                               \
            i += 4;                                                            \
        }                                                                      \
        if (i + 2 <= n) {                                                      \
            memcpy(d + i, s + i, 2 * sizeof(T));                               \
            i += 2;                                                            \
        }                                                                      \
        if (i < n)                                                             \
            d[i] = s[i];                                                       \
    }                                                                          \
                                                                               \
    static inline void vadd_##S(T *restrict d, const T *restrict s,            \
                                int64_t n)                                     \
    {                                                                          \
        int64_t i = 0;                                                         \
        for (; i + 16 <= n; i += 16)                                           \
            for (int l = 0; l < 16; l++)                                       \
                d[i + l] += s[i + l];                                          \
        for (; i + 4 <= n; i += 4)                                             \
            for (int l = 0; l < 4; l++)                                        \
                d[i + l] += s[i + l];                                          \
        for (; i < n; i++)                                                     \
            d[i] += s[i];                                                      \
    }                                                                          \
                                                                               \
    static inline void vset_##S(T *restrict d, T v, int64_t n)                 \
    {                                                                          \
        T blk[8] = {v, v, v, v, v, v, v, v};                                   \
        int64_t i = 0;                                                         \
        for (; i + 8 <= n; i += 8)                                             \
            memcpy(d + i, blk, sizeof(blk));                                   \
        if (i + 4 <= n) {                                                      \
            memcpy(d + i, blk, 4 * sizeof(T));                                 \
            i += 4;                                                            \
        }                                                                      \
        if (i + 2 <= n) {                                                      \
            memcpy(d + i, blk, 2 * sizeof(T));                                 \
            i += 2;                                                            \
        }                                                                      \
        if (i < n)                                                             \
            d[i] = v;                                                          \
    }                                                                          \
                                                                               \
    static inline void vinc_##S(T *restrict d, T v, int64_t n)                 \
    {                                                                          \
        int64_t i = 0;                                                         \
        for (; i + 16 <= n; i += 16)                                           \
            for (int l = 0; l < 16; l++)                                       \
                d[i + l] += v;                                                 \
        for (; i < n; i++)                                                     \
            d[i] += v;                                                         \
    }                                                                          \
                                                                               \
    static void blas_##S(bool ta, bool tb, int64_t M, int64_t N, int64_t K,    \
                         const T *A, int64_t lda, const T *B, int64_t ldb,     \
                         bool acc, T *C, int64_t ldc)                          \
    {                                                                          \
        BLAS(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,                    \
             tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, 1, A,     \
             (int)lda, B, (int)ldb, acc ? 1 : 0, C, (int)ldc);                 \
    }                                                                          \
                                                                               \
    static void gemm_##S(bool ta, bool tb, int64_t M, int64_t N, int64_t K,    \
                         const void *A_, int64_t lda, const void *B_,          \
                         int64_t ldb, bool acc, void *C_, int64_t ldc,         \
                         bool split)                                           \
    {                                                                          \
        const T *A = A_, *B = B_;                                              \
        T *C = C_;                                                             \
        if (M == 0 || N == 0)                                                  \
            return;                                                            \
        if (K == 0) {                                                          \
            if (!acc)                                                          \
                for (int64_t i = 0; i < M; i++)                                \
                    vset_##S(C + i * ldc, 0, N);                               \
            return;                                                            \
        }                                                                      \
        if (!split || (double)M * (double)N * (double)K <= GEMM_SMALL_MNK) {   \
            blas_##S(ta, tb, M, N, K, A, lda, B, ldb, acc, C, ldc);            \
            return;                                                            \
        }                                                                      \
        if (tb) { /* C += A[:, k0:k1] B[:, k0:k1]^T (A not transposed) */      \
            int64_t kc = (int64_t)(GEMM_SMALL_MNK / ((double)M * N));          \
            kc = kc > 32 ? kc : 32;                                            \
            for (int64_t k0 = 0; k0 < K; k0 += kc)                             \
                blas_##S(ta, tb, M, N, K - k0 < kc ? K - k0 : kc, A + k0,      \
                         lda, B + k0, ldb, acc || k0 > 0, C, ldc);             \
            return;                                                            \
        }                                                                      \
        {                                                                      \
            int64_t nc = (int64_t)(GEMM_SMALL_MNK / ((double)M * K));          \
            nc = nc > 32 ? nc : 32;                                            \
            for (int64_t n0 = 0; n0 < N; n0 += nc)                             \
                blas_##S(ta, tb, M, N - n0 < nc ? N - n0 : nc, K, A, lda,      \
                         B + n0, ldb, acc, C + n0, ldc);                       \
        }                                                                      \
    }                                                                          \
                                                                               \
    /* Rows [r0, r1) of the column matrix of one image group. Output rows      \
     * whose input row is in the padding are zeroed in one run. */             \
    static void im2col_##S(const struct cgeo *g, const void *src_, void *col_, \
                           int64_t r0, int64_t r1)                             \
    {                                                                          \
        const T *src = src_;                                                   \
        T *col = col_;                                                         \
        struct tap_spans ts;                                                   \
        /* row r is tap (c, i, j); stepped, not divided, per row */            \
        int64_t j = r0 % g->kw, i = (r0 / g->kw) % g->kh;                      \
        const T *s = src + (r0 / (g->kw * g->kh)) * g->hw;                     \
        tap_spans_make(g, &ts);                                                \
        for (int64_t r = r0; r < r1; r++) {                                    \
            T *d = col + r * g->ohw;                                           \
            int64_t offx = j * g->dw - g->pl, offy = i * g->dh - g->pt;        \
            int64_t x0, x1, y0, y1;                                            \
            tap_span(g, &ts, i, j, &y0, &y1, &x0, &x1);                        \
            if (x0 == x1)                                                      \
                y1 = y0;                                                       \
            vset_##S(d, 0, y0 * g->ow);                                        \
            for (int64_t oy = y0; oy < y1; oy++) {                             \
                const T *sr = s + (oy * g->sh + offy) * g->w + x0 * g->sw +    \
                              offx;                                            \
                T *dr = d + oy * g->ow;                                        \
                if (g->sw == 1 && x0 == 0 && x1 == g->ow) {                    \
                    vcopy_##S(dr, sr, g->ow); /* an interior tap */            \
                    continue;                                                  \
                }                                                              \
                vset_##S(dr, 0, x0);                                           \
                if (g->sw == 1)                                                \
                    vcopy_##S(dr + x0, sr, x1 - x0);                           \
                else                                                           \
                    for (int64_t t = 0; t < x1 - x0; t++)                      \
                        dr[x0 + t] = sr[t * g->sw];                            \
                vset_##S(dr + x1, 0, g->ow - x1);                              \
            }                                                                  \
            vset_##S(d + y1 * g->ow, 0, (g->oh - y1) * g->ow);                 \
            if (++j == g->kw) {                                                \
                j = 0;                                                         \
                if (++i == g->kh) {                                            \
                    i = 0;                                                     \
                    s += g->hw;                                                \
                }                                                              \
            }                                                                  \
        }                                                                      \
    }                                                                          \
                                                                               \
    /* Accumulate the column matrix into channels [c0, c1) of an image         \
     * group (zeroed by the caller). */                                        \
    static void col2im_##S(const struct cgeo *g, const void *col_,             \
                           void *dst_, int64_t c0, int64_t c1)                 \
    {                                                                          \
        const T *col = col_;                                                   \
        T *dst = dst_;                                                         \
        struct tap_spans ts;                                                   \
        tap_spans_make(g, &ts);                                                \
        for (int64_t c = c0; c < c1; c++) {                                    \
            T *dc = dst + c * g->hw;                                           \
            for (int64_t i = 0; i < g->kh; i++)                                \
                for (int64_t j = 0; j < g->kw; j++) {                          \
                    const T *s = col + ((c * g->kh + i) * g->kw + j) * g->ohw; \
                    int64_t offx = j * g->dw - g->pl;                          \
                    int64_t offy = i * g->dh - g->pt;                          \
                    int64_t x0, x1, y0, y1;                                    \
                    tap_span(g, &ts, i, j, &y0, &y1, &x0, &x1);                \
                    for (int64_t oy = y0; x0 < x1 && oy < y1; oy++) {          \
                        const T *sr = s + oy * g->ow + x0;                     \
                        T *dr = dc + (oy * g->sh + offy) * g->w +              \
                                x0 * g->sw + offx;                             \
                        if (g->sw == 1)                                        \
                            vadd_##S(dr, sr, x1 - x0);                         \
                        else                                                   \
                            for (int64_t t = 0; t < x1 - x0; t++)              \
                                dr[t * g->sw] += sr[t];                        \
                    }                                                          \
                }                                                              \
        }                                                                      \
    }                                                                          \
                                                                               \
    /* The cg planes of one image group, zero-padded to hp x wp, and           \
     * (kw - 1) * dw slack elements after the last one. */                     \
    static void pad_##S(const struct cgeo *g, const void *src_, void *dst_)    \
    {                                                                          \
        const T *src = src_;                                                   \
        T *dst = dst_;                                                         \
        int64_t lo = g->pl, hi = g->pl + g->w < g->wp ? g->pl + g->w : g->wp;  \
        for (int64_t c = 0; c < g->cg; c++)                                    \
            for (int64_t r = 0; r < g->hp; r++) {                              \
                T *d = dst + (c * g->hp + r) * g->wp;                          \
                int64_t iy = r - g->pt;                                        \
                if (iy < 0 || iy >= g->h || hi <= lo) {                        \
                    vset_##S(d, 0, g->wp);                                     \
                    continue;                                                  \
                }                                                              \
                vset_##S(d, 0, lo);                                            \
                vcopy_##S(d + lo, src + c * g->hw + iy * g->w, hi - lo);       \
                vset_##S(d + hi, 0, g->wp - hi);                               \
            }                                                                  \
        vset_##S(dst + g->cg * g->hp * g->wp, 0, (g->kw - 1) * g->dw);         \
    }                                                                          \
                                                                               \
    /* Rows [r0, r1) of the wide column matrix: each one slice of the          \
     * padded planes, oh * wp long. */                                         \
    static void wide_cols_##S(const struct cgeo *g, const void *xp_,           \
                              void *col_, int64_t r0, int64_t r1)              \
    {                                                                          \
        const T *xp = xp_;                                                     \
        T *col = col_;                                                         \
        int64_t n = g->oh * g->wp;                                             \
        int64_t j = r0 % g->kw, i = (r0 / g->kw) % g->kh;                      \
        int64_t c = r0 / (g->kw * g->kh);                                      \
        for (int64_t r = r0; r < r1; r++) {                                    \
            vcopy_##S(col + r * n,                                             \
                      xp + (c * g->hp + i * g->dh) * g->wp + j * g->dw, n);    \
            if (++j == g->kw) {                                                \
                j = 0;                                                         \
                if (++i == g->kh) {                                            \
                    i = 0;                                                     \
                    c++;                                                       \
                }                                                              \
            }                                                                  \
        }                                                                      \
    }                                                                          \
                                                                               \
    /* og wide output planes -> og output planes (drop the wp - ow junk        \
     * columns of every row). */                                               \
    static void compact_##S(const struct cgeo *g, const void *wide_,           \
                            void *y_)                                          \
    {                                                                          \
        const T *wide = wide_;                                                 \
        T *y = y_;                                                             \
        for (int64_t r = 0; r < g->og * g->oh; r++)                            \
            vcopy_##S(y + r * g->ow, wide + r * g->wp, g->ow);                 \
    }                                                                          \
                                                                               \
    static void fill_rows_##S(void *y_, const void *b_, int64_t rows,          \
                              int64_t plane)                                   \
    {                                                                          \
        T *y = y_;                                                             \
        const T *b = b_;                                                       \
        for (int64_t r = 0; r < rows; r++)                                     \
            vset_##S(y + r * plane, b[r], plane);                              \
    }                                                                          \
                                                                               \
    static void add_rows_##S(void *y_, const void *b_, int64_t rows,           \
                             int64_t plane)                                    \
    {                                                                          \
        T *y = y_;                                                             \
        const T *b = b_;                                                       \
        for (int64_t r = 0; r < rows; r++)                                     \
            vinc_##S(y + r * plane, b[r], plane);                              \
    }                                                                          \
                                                                               \
    static void add_##S(void *d, const void *s, int64_t n)                     \
    {                                                                          \
        vadd_##S(d, s, n);                                                     \
    }                                                                          \
                                                                               \
    /* Sum with 16 independent lanes (vectorizes without reassociating). */    \
    static double sum_##S(const void *p_, int64_t n)                           \
    {                                                                          \
        const T *p = p_;                                                       \
        T lane[16] = {0};                                                      \
        double s = 0;                                                          \
        int64_t i = 0;                                                         \
        for (; i + 16 <= n; i += 16)                                           \
            for (int l = 0; l < 16; l++)                                       \
                lane[l] += p[i + l];                                           \
        for (int l = 0; l < 16; l++)                                           \
            s += lane[l];                                                      \
        for (; i < n; i++)                                                     \
            s += p[i];                                                         \
        return s;                                                              \
    }                                                                          \
                                                                               \
    static void store_##S(void *p, int64_t i, double v)                        \
    {                                                                          \
        ((T *)p)[i] = (T)v;                                                    \
    }                                                                          \
                                                                               \
    static const struct tops tops_##S = {                                      \
        sizeof(T),    gemm_##S,      im2col_##S, col2im_##S, fill_rows_##S,    \
        add_rows_##S, add_##S,       sum_##S,    store_##S,  pad_##S,          \
        wide_cols_##S, compact_##S,                                            \
    };

DEF_CONV_HELPERS(float, f32, cpu_blas.sgemm)
DEF_CONV_HELPERS(double, f64, cpu_blas.dgemm)

static const struct tops *tops_for(keel_dtype dt)
{
    return dt == KEEL_F64 ? &tops_f64 : &tops_f32;
}

/* ---- conv primitives on contiguous compute buffers ----------------------- */

enum { PRIM_FWD, PRIM_BWD_DATA, PRIM_BWD_FILTER };

/* fused_conv2d's activation: KEEL_FUSED_ACT_NONE for every other op. */
struct cact {
    keel_fused_act act;
    double alpha;
    keel_dtype round_dt; /* the output's dtype (float16/bfloat16: rounded) */
};

/* The activation on n values of a compute buffer (float or double). */
static void act_apply(const struct cact *a, size_t es, void *y, int64_t n)
{
    if (a->act == KEEL_FUSED_ACT_NONE)
        return;
    if (es == sizeof(double))
        cpu_act_f64(a->act, a->alpha, y, n);
    else
        cpu_act_f32(a->act, a->alpha, y, n, a->round_dt);
}

/* The SIMD forward's per-image epilogue (kconv_simd.h). */
static void act_simd_epilogue(const void *ctx, float *y, int64_t n)
{
    act_apply(ctx, sizeof(float), y, n);
}

struct crun {
    const struct cgeo *g;
    const struct tops *t;
    const struct cact *act; /* PRIM_FWD's epilogue (NULL: none) */
    const char *x, *w, *bias, *dy; /* inputs (bias may be NULL) */
    char *y;                       /* output */
    char *ws;                      /* slots * slot_bytes */
    size_t slot_bytes;
    int64_t slots;
    bool split; /* GEMMs cut to stay single-threaded (pool slots) */
    bool solo;  /* one image per slot, OpenBLAS held to one thread */
    /* im2col/col2im over the pool (single-slot runs) */
    const char *src;
    char *dst;
};

static size_t col_bytes(const struct cgeo *g, const struct tops *t)
{
    return g->direct_1x1 ? 0 : align64((size_t)(g->ckk * g->ohw) * t->es);
}

/* The wide forward's slot: padded planes, column matrix, wide output. */
static size_t wide_bytes(const struct cgeo *g, const struct tops *t,
                         size_t *col_off, size_t *out_off)
{
    int64_t n = g->oh * g->wp;

    *col_off = align64(
        (size_t)(g->cg * g->hp * g->wp + (g->kw - 1) * g->dw) * t->es);
    *out_off = *col_off + align64((size_t)(g->ckk * n) * t->es);
    return *out_off + align64((size_t)(g->og * n) * t->es);
}

/*
 * How a primitive runs its images:
 *
 *  - solo: with at least one image per pool thread, the images are shared
 *    over the pool, one GEMM per image group on one thread each, with
 *    OpenBLAS held to one thread meanwhile (blas_solo_enter): its threads
 *    and the pool's would otherwise contend for the same cores. Measured
 *    on ResNet-18 training (batch 16, 2 threads, 5 interleaved rounds):
 *    255 ms a step against 336 with OpenBLAS threading each GEMM;
 *  - else shared over the pool (slots > 1) when each GEMM is one OpenBLAS
 *    runs single-threaded anyway, or can be cut into such pieces of >= 64
 *    image columns (og * ckk <= 4096: split);
 *  - else one by one on the caller, with OpenBLAS threading each GEMM.
 */
static int64_t conv_slots(const struct cgeo *g, int prim, bool *split,
                          bool *solo)
{
    double cols = prim == PRIM_FWD && g->wide ? (double)(g->oh * g->wp)
                                               : (double)g->ohw;
    double mk = (double)g->og * (double)g->ckk;
    int64_t s;

    *split = false;
    *solo = false;
    if (g->n < 2)
        return 1;
    s = cpu_pool_threads();
    if (s > 1 && g->n >= s && cpu_blas.set_threads && cpu_blas.get_threads) {
        *solo = true;
        return s;
    }
    if (!cpu_blas_single(mk * cols)) {
        if (mk > 4096)
            return 1;
        *split = true;
    }
    s = cpu_pool_threads();
    return s < g->n ? s : g->n;
}

static void im2col_part(void *ctx, int64_t r0, int64_t r1)
{
    const struct crun *r = ctx;
    r->t->im2col(r->g, r->src, r->dst, r0, r1);
}

static void col2im_part(void *ctx, int64_t c0, int64_t c1)
{
    const struct crun *r = ctx;
    r->t->col2im(r->g, r->src, r->dst, c0, c1);
}

/* im2col of one image group (rows over the pool unless nested). */
static const char *image_cols(const struct crun *r, const char *src,
                              char *col)
{
    const struct cgeo *g = r->g;
    struct crun sub = *r;
    int64_t grain = g->ohw > 0 ? KGRAIN / g->ohw : 1;

    if (g->direct_1x1)
        return src;
    sub.src = src;
    sub.dst = col;
    cpu_parallel_for(g->ckk, grain > 0 ? grain : 1, im2col_part, &sub);
    return col;
}

static void image_col2im(const struct crun *r, const char *col, char *dst)
{
    const struct cgeo *g = r->g;
    struct crun sub = *r;
    int64_t per = g->kh * g->kw * g->ohw;
    int64_t grain = per > 0 ? KGRAIN / per : 1;

    zero_bytes(dst, (size_t)(g->cg * g->hw) * r->t->es);
    sub.src = col;
    sub.dst = dst;
    cpu_parallel_for(g->cg, grain > 0 ? grain : 1, col2im_part, &sub);
}

static void wide_cols_part(void *ctx, int64_t r0, int64_t r1)
{
    const struct crun *r = ctx;
    r->t->wide_cols(r->g, r->src, r->dst, r0, r1);
}

/*
 * Stride-1 forward without a strided im2col. With the input planes padded
 * to hp x wp and every output row widened to wp columns, output (oy, ox)
 * of tap (i, j) reads padded element (oy + i*dh) * wp + ox + j*dw: a row
 * of the column matrix is one contiguous slice of the padded plane (long
 * copies instead of oh short ones). The GEMM then also computes wp - ow
 * junk columns per row (from wrapped-around input, each column depends on
 * its own inputs only), which the compaction drops; used when wp <= 2 ow.
 */
/* p + off, or NULL for an operand without elements (its data pointer is
 * NULL, and no offset may be applied to a null pointer). */
#define KOFF(p, off) ((p) ? (p) + (off) : (p))

static void fwd_image_wide(const struct crun *r, int64_t n, char *ws)
{
    const struct cgeo *g = r->g;
    size_t es = r->t->es, col_off, out_off;
    int64_t cols = g->oh * g->wp;
    int64_t grain = cols > 0 ? KGRAIN / cols : 1;
    char *xp = ws, *outw;
    struct crun sub = *r;

    wide_bytes(g, r->t, &col_off, &out_off);
    sub.src = xp;
    sub.dst = ws + col_off;
    outw = ws + out_off;
    for (int64_t gi = 0; gi < g->g; gi++) {
        const char *xg =
            KOFF(r->x, (size_t)((n * g->c + gi * g->cg) * g->hw) * es);
        const char *wg = KOFF(r->w, (size_t)(gi * g->og * g->ckk) * es);
        char *yg = KOFF(r->y, (size_t)((n * g->o + gi * g->og) * g->ohw) * es);
        r->t->pad(g, xg, xp);
        cpu_parallel_for(g->ckk, grain > 0 ? grain : 1, wide_cols_part,
                         &sub);
        if (r->bias)
            r->t->fill_rows(outw, r->bias + (size_t)(gi * g->og) * es, g->og,
                            cols);
        r->t->gemm(false, false, g->og, cols, g->ckk, wg, g->ckk, sub.dst,
                   cols, r->bias != NULL, outw, cols, r->split);
        r->t->compact(g, outw, yg);
        if (r->act)
            act_apply(r->act, es, yg, g->og * g->ohw);
    }
}

/* y[n] = conv(x[n], w) + bias. */
static void fwd_image(const struct crun *r, int64_t n, char *col)
{
    const struct cgeo *g = r->g;
    size_t es = r->t->es;

    if (g->wide) {
        fwd_image_wide(r, n, col);
        return;
    }
    for (int64_t gi = 0; gi < g->g; gi++) {
        const char *xg =
            KOFF(r->x, (size_t)((n * g->c + gi * g->cg) * g->hw) * es);
        const char *wg = KOFF(r->w, (size_t)(gi * g->og * g->ckk) * es);
        char *yg = KOFF(r->y, (size_t)((n * g->o + gi * g->og) * g->ohw) * es);
        const char *B = image_cols(r, xg, col);
        if (r->bias)
            r->t->fill_rows(yg, r->bias + (size_t)(gi * g->og) * es, g->og,
                            g->ohw);
        r->t->gemm(false, false, g->og, g->ohw, g->ckk, wg, g->ckk, B,
                   g->ohw, r->bias != NULL, yg, g->ohw, r->split);
        if (r->act)
            act_apply(r->act, es, yg, g->og * g->ohw);
    }
}

/* dx[n] = conv^T(dy[n], w) (+ bias over dx's channels). */
static void bwd_data_image(const struct crun *r, int64_t n, char *col)
{
    const struct cgeo *g = r->g;
    size_t es = r->t->es;

    for (int64_t gi = 0; gi < g->g; gi++) {
        const char *dyg =
            KOFF(r->dy, (size_t)((n * g->o + gi * g->og) * g->ohw) * es);
        const char *wg = KOFF(r->w, (size_t)(gi * g->og * g->ckk) * es);
        char *dxg = KOFF(r->y, (size_t)((n * g->c + gi * g->cg) * g->hw) * es);
        if (g->direct_1x1) {
            r->t->gemm(true, false, g->ckk, g->ohw, g->og, wg, g->ckk, dyg,
                       g->ohw, false, dxg, g->ohw, r->split);
        } else {
            r->t->gemm(true, false, g->ckk, g->ohw, g->og, wg, g->ckk, dyg,
                       g->ohw, false, col, g->ohw, r->split);
            image_col2im(r, col, dxg);
        }
        if (r->bias)
            r->t->add_rows(dxg, r->bias + (size_t)(gi * g->cg) * es, g->cg,
                           g->hw);
    }
}

/* dw_slot += sum over images of dy[n] col(x[n])^T. */
static void bwd_filter_image(const struct crun *r, int64_t n, char *col,
                             char *dw)
{
    const struct cgeo *g = r->g;
    size_t es = r->t->es;

    for (int64_t gi = 0; gi < g->g; gi++) {
        const char *xg =
            KOFF(r->x, (size_t)((n * g->c + gi * g->cg) * g->hw) * es);
        const char *dyg =
            KOFF(r->dy, (size_t)((n * g->o + gi * g->og) * g->ohw) * es);
        const char *B = image_cols(r, xg, col);
        r->t->gemm(false, true, g->og, g->ckk, g->ohw, dyg, g->ohw, B,
                   g->ohw, true, KOFF(dw, (size_t)(gi * g->og * g->ckk) * es),
                   g->ckk, r->split);
    }
}

struct prim_ctx {
    const struct crun *r;
    int prim;
};

static void prim_slot(void *ctx, int64_t s0, int64_t s1)
{
    const struct prim_ctx *p = ctx;
    const struct crun *r = p->r;
    const struct cgeo *g = r->g;
    size_t colb = col_bytes(g, r->t);

    for (int64_t s = s0; s < s1; s++) {
        char *slot = r->ws + (size_t)s * r->slot_bytes;
        int64_t n0 = g->n * s / r->slots, n1 = g->n * (s + 1) / r->slots;
        /* bwd_filter: slot 0 accumulates into dw itself. */
        char *dw = s == 0 ? r->y : slot + colb;
        for (int64_t n = n0; n < n1; n++) {
            if (p->prim == PRIM_FWD)
                fwd_image(r, n, slot);
            else if (p->prim == PRIM_BWD_DATA)
                bwd_data_image(r, n, slot);
            else
                bwd_filter_image(r, n, slot, dw);
        }
    }
}

/* Workspace a primitive needs for its slots. */
static size_t prim_ws(const struct cgeo *g, const struct tops *t, int prim,
                      int64_t *slots, size_t *slot_bytes, bool *split,
                      bool *solo)
{
    size_t a, b;

    *slots = conv_slots(g, prim, split, solo);
    *slot_bytes = col_bytes(g, t); /* every primitive but 1x1 needs a col */
    if (prim == PRIM_FWD && g->wide)
        *slot_bytes = wide_bytes(g, t, &a, &b);
    if (prim == PRIM_BWD_FILTER)
        *slot_bytes += align64((size_t)(g->o * g->ckk) * t->es);
    return *slot_bytes * (size_t)*slots;
}

/*
 * OpenBLAS held to one thread while pool threads call it (nested regions,
 * from several streams, count; the last to leave restores the count the
 * first found). openblas_set_num_threads is process-wide: a GEMM another
 * stream starts meanwhile also runs on one thread, which costs it speed,
 * never correctness.
 */
static atomic_int solo_depth;
static atomic_int solo_saved;

static void blas_solo_enter(void)
{
    if (atomic_fetch_add(&solo_depth, 1) == 0) {
        int n = cpu_blas.get_threads();
        atomic_store(&solo_saved, n);
        if (n > 1)
            cpu_blas.set_threads(1);
    }
}

static void blas_solo_leave(void)
{
    if (atomic_fetch_sub(&solo_depth, 1) == 1) {
        int n = atomic_load(&solo_saved);
        if (n > 1)
            cpu_blas.set_threads(n);
    }
}

static void prim_run(struct crun *r, int prim)
{
    const struct cgeo *g = r->g;
    struct prim_ctx p = {r, prim};
    size_t wbytes = (size_t)(g->o * g->ckk) * r->t->es;

    if (prim == PRIM_BWD_FILTER) {
        zero_bytes(r->y, wbytes);
        for (int64_t s = 1; s < r->slots; s++)
            zero_bytes(r->ws + (size_t)s * r->slot_bytes + col_bytes(g, r->t),
                       wbytes);
    }
    if (r->solo)
        blas_solo_enter();
    cpu_parallel_for(r->slots, 1, prim_slot, &p);
    if (r->solo)
        blas_solo_leave();
    if (prim == PRIM_BWD_FILTER)
        for (int64_t s = 1; s < r->slots; s++)
            r->t->add(r->y,
                      r->ws + (size_t)s * r->slot_bytes + col_bytes(g, r->t),
                      g->o * g->ckk);
}

/* db[c] = sum over n and the plane of t[n, c, :]. */
struct bsum {
    const struct tops *t;
    const char *p;
    char *db;
    int64_t n, ch, plane;
};

static void bias_sum_part(void *ctx, int64_t c0, int64_t c1)
{
    const struct bsum *b = ctx;

    for (int64_t c = c0; c < c1; c++) {
        double s = 0;
        for (int64_t n = 0; n < b->n; n++)
            s += b->t->sum(b->p + (size_t)((n * b->ch + c) * b->plane) *
                                      b->t->es,
                           b->plane);
        b->t->store(b->db, c, s);
    }
}

static void bias_sum(const struct tops *t, const char *p, int64_t n,
                     int64_t ch, int64_t plane, char *db)
{
    struct bsum b = {t, p, db, n, ch, plane};
    int64_t per = n * plane, grain = per > 0 ? KGRAIN / per : ch;

    cpu_parallel_for(ch, grain > 0 ? grain : 1, bias_sum_part, &b);
}

/* ---- direct (allocation-free) conv references ---------------------------- */

/* A 4-D (or 1-D) tensor read/written through its strides, any dtype. */
struct gten {
    char *p;
    keel_dtype dt;
    int64_t es, s[4];
};

static struct gten gten_of(const keel_tensor_desc *d, const void *p)
{
    struct gten t;

    t.p = (char *)p;
    t.dt = d->dtype;
    t.es = keel_dtype_size(d->dtype);
    for (int i = 0; i < 4; i++)
        t.s[i] = i < d->ndim ? d->strides[i] : 0;
    return t;
}

static char *gat(const struct gten *t, int64_t a, int64_t b, int64_t c,
                 int64_t d)
{
    return t->p + (a * t->s[0] + b * t->s[1] + c * t->s[2] + d * t->s[3]) *
                      t->es;
}

static double gld(const struct gten *t, int64_t a, int64_t b, int64_t c,
                  int64_t d)
{
    return kload(gat(t, a, b, c, d), t->dt);
}

static void direct_fwd(const struct cgeo *g, const struct gten *x,
                       const struct gten *w, const struct gten *b,
                       const struct gten *y)
{
    for (int64_t n = 0; n < g->n; n++)
        for (int64_t o = 0; o < g->o; o++)
            for (int64_t oy = 0; oy < g->oh; oy++)
                for (int64_t ox = 0; ox < g->ow; ox++) {
                    int64_t c0 = (o / g->og) * g->cg;
                    double acc = b ? gld(b, o, 0, 0, 0) : 0;
                    for (int64_t c = 0; c < g->cg; c++)
                        for (int64_t i = 0; i < g->kh; i++)
                            for (int64_t j = 0; j < g->kw; j++) {
                                int64_t iy = oy * g->sh - g->pt + i * g->dh;
                                int64_t ix = ox * g->sw - g->pl + j * g->dw;
                                if (iy < 0 || iy >= g->h || ix < 0 ||
                                    ix >= g->w)
                                    continue;
                                acc += gld(x, n, c0 + c, iy, ix) *
                                       gld(w, o, c, i, j);
                            }
                    kstore(gat(y, n, o, oy, ox), y->dt, acc);
                }
}

/* Output index along one dim reached from input index `in` by kernel tap
 * k, or -1. */
static int64_t tap_out(int64_t in, int64_t k, int64_t pad, int64_t dil,
                       int64_t s, int64_t nout)
{
    int64_t t = in + pad - k * dil;

    if (t < 0 || t % s)
        return -1;
    return t / s < nout ? t / s : -1;
}

static void direct_bwd_data(const struct cgeo *g, const struct gten *dy,
                            const struct gten *w, const struct gten *b,
                            const struct gten *dx)
{
    for (int64_t n = 0; n < g->n; n++)
        for (int64_t ci = 0; ci < g->c; ci++)
            for (int64_t iy = 0; iy < g->h; iy++)
                for (int64_t ix = 0; ix < g->w; ix++) {
                    int64_t o0 = (ci / g->cg) * g->og, cl = ci % g->cg;
                    double acc = b ? gld(b, ci, 0, 0, 0) : 0;
                    for (int64_t i = 0; i < g->kh; i++) {
                        int64_t oy = tap_out(iy, i, g->pt, g->dh, g->sh, g->oh);
                        for (int64_t j = 0; oy >= 0 && j < g->kw; j++) {
                            int64_t ox =
                                tap_out(ix, j, g->pl, g->dw, g->sw, g->ow);
                            for (int64_t o = 0; ox >= 0 && o < g->og; o++)
                                acc += gld(dy, n, o0 + o, oy, ox) *
                                       gld(w, o0 + o, cl, i, j);
                        }
                    }
                    kstore(gat(dx, n, ci, iy, ix), dx->dt, acc);
                }
}

static void direct_bwd_filter(const struct cgeo *g, const struct gten *x,
                              const struct gten *dy, const struct gten *dw)
{
    for (int64_t o = 0; o < g->o; o++)
        for (int64_t c = 0; c < g->cg; c++)
            for (int64_t i = 0; i < g->kh; i++)
                for (int64_t j = 0; j < g->kw; j++) {
                    int64_t c0 = (o / g->og) * g->cg;
                    double acc = 0;
                    for (int64_t n = 0; n < g->n; n++)
                        for (int64_t oy = 0; oy < g->oh; oy++)
                            for (int64_t ox = 0; ox < g->ow; ox++) {
                                int64_t iy = oy * g->sh - g->pt + i * g->dh;
                                int64_t ix = ox * g->sw - g->pl + j * g->dw;
                                if (iy < 0 || iy >= g->h || ix < 0 ||
                                    ix >= g->w)
                                    continue;
                                acc += gld(dy, n, o, oy, ox) *
                                       gld(x, n, c0 + c, iy, ix);
                            }
                    kstore(gat(dw, o, c, i, j), dw->dt, acc);
                }
}

/* db[c] = sum of t[:, c, :, :] (t 4-D). */
static void direct_bias_sum(const keel_tensor_desc *td, const struct gten *t,
                            const struct gten *db)
{
    for (int64_t c = 0; c < td->shape[1]; c++) {
        double acc = 0;
        for (int64_t n = 0; n < td->shape[0]; n++)
            for (int64_t y = 0; y < td->shape[2]; y++)
                for (int64_t x = 0; x < td->shape[3]; x++)
                    acc += gld(t, n, c, y, x);
        kstore(gat(db, c, 0, 0, 0), db->dt, acc);
    }
}

/* ---- conv geometry (the kit's) and this plugin's limits ------------------ */

/*
 * The geometry of a conv op in the conv2d view, from the kit
 * (keel_kit_conv_geometry resolves the attributes as the core does), plus
 * what only this plugin derives from it: the GEMM dims, the 1x1 and wide
 * shortcuts, and OpenBLAS's int range (NOT_SUPPORTED beyond it). The view
 * of (x, weight, out) or, for the grads (`grad`), (x, weight, dout): a
 * transposed conv's big side is its output (dout), its small side x.
 */
static keel_status conv_geo(const keel_kernel_args *a, bool transpose,
                            bool grad, struct cgeo *g)
{
    const keel_tensor_desc *x = &a->inputs[0], *wt = &a->inputs[1];
    const keel_tensor_desc *y = grad ? &a->inputs[2] : &a->outputs[0];
    keel_kit_conv k;
    keel_kit_msg m;

    if (keel_kit_conv_geometry(a, transpose, transpose ? y : x, wt,
                               transpose ? x : y, &k, &m))
        return cpu_err(KEEL_STATUS_INVALID_ARGUMENT, "%s", m.text);
    g->n = k.n, g->c = k.c, g->h = k.h, g->w = k.w;
    g->o = k.o, g->oh = k.oh, g->ow = k.ow;
    g->kh = k.kh, g->kw = k.kw, g->sh = k.sh, g->sw = k.sw;
    g->dh = k.dh, g->dw = k.dw, g->pt = k.pad[0], g->pl = k.pad[2];
    g->g = k.groups, g->cg = k.cg, g->og = k.og;
    g->ckk = g->cg * g->kh * g->kw;
    g->hw = g->h * g->w;
    g->ohw = g->oh * g->ow;
    g->direct_1x1 = g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 &&
                    !k.pad[0] && !k.pad[1] && !k.pad[2] && !k.pad[3];
    g->hp = g->oh + (g->kh - 1) * g->dh;
    g->wp = g->ow + (g->kw - 1) * g->dw;
    g->wide = g->sh == 1 && g->sw == 1 && !g->direct_1x1 &&
              g->wp <= 2 * g->ow && g->oh * g->wp <= INT_MAX;
    if (g->og > INT_MAX || g->ckk > INT_MAX || g->ohw > INT_MAX ||
        g->hw > INT_MAX)
        return cpu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "%s: a GEMM dim exceeds the BLAS int range",
                       transpose ? "conv2d_transpose" : "conv2d");
    return KEEL_STATUS_OK;
}

/* Every output is written as a contiguous buffer (in place, or unpacked
 * from a staged one). */
static keel_status outputs_contiguous(const keel_kernel_args *a,
                                      const char *op)
{
    for (int i = 0; i < a->num_outputs; i++)
        if (!kcontig(&a->outputs[i]))
            return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: output %d must be contiguous", op, i);
    return KEEL_STATUS_OK;
}

/* What the kit leaves to this plugin (keel_kit_check ran before). */
static keel_status conv_check(const keel_kernel_args *a, const char *op,
                              bool transpose, bool grad)
{
    struct cgeo g;
    keel_status st = conv_geo(a, transpose, grad, &g);

    return st ? st : outputs_contiguous(a, op);
}

/* ---- conv ops ------------------------------------------------------------ */

/*
 * One conv op invocation: up to 3 inputs and 3 outputs staged to the
 * compute dtype, then primitives run in order.
 */
struct conv_job {
    struct cgeo g;
    const struct tops *t;
    struct buf in[3], out[3];
    int nin, nout;
    char *ws;
    struct cact act; /* PRIM_FWD's epilogue (fused_conv2d) */
};

static bool job_stage(struct conv_job *j, const struct kcall *k,
                      size_t extra, char **rest)
{
    const keel_kernel_args *a = k->a;
    size_t bytes = extra;
    char *p;

    j->nin = a->num_inputs;
    j->nout = a->num_outputs;
    j->act.act = KEEL_FUSED_ACT_NONE;
    j->t = tops_for(a->inputs[0].dtype);
    for (int i = 0; i < j->nin; i++)
        bytes += buf_plan(&j->in[i], &a->inputs[i], k->in[i], false);
    for (int i = 0; i < j->nout; i++)
        bytes += buf_plan(&j->out[i], &a->outputs[i], k->out[i], true);
    j->ws = cpu_workspace(bytes);
    if (!j->ws)
        return false;
    p = j->ws;
    for (int i = 0; i < j->nin; i++)
        p = buf_bind(&j->in[i], p);
    for (int i = 0; i < j->nout; i++)
        p = buf_bind(&j->out[i], p);
    *rest = p;
    return true;
}

static void job_finish(struct conv_job *j)
{
    for (int i = 0; i < j->nout; i++)
        buf_finish(&j->out[i]);
    free(j->ws);
}

static void run_prim(struct conv_job *j, int prim, const void *x,
                     const void *w, const void *bias, const void *dy, void *y,
                     char *ws)
{
    struct crun r;
    size_t sb;
    const struct cgeo *g = &j->g;

    if (j->t == tops_for(KEEL_F32) && g->sh == 1 && g->sw == 1 &&
        g->dh == 1 && g->dw == 1 && !g->direct_1x1) {
        bool epi = prim == PRIM_FWD && j->act.act != KEEL_FUSED_ACT_NONE;
        struct conv_simd_geo sg = {g->n,  g->c,  g->h,  g->w,  g->o,
                                   g->oh, g->ow, g->kh, g->kw, g->pt,
                                   g->pl, g->g,
                                   epi ? act_simd_epilogue : NULL,
                                   epi ? &j->act : NULL};
        static const int sp[] = {CONV_SIMD_FWD, CONV_SIMD_BWD_DATA,
                                 CONV_SIMD_BWD_FILTER};
        if (cpu_conv_simd(sp[prim], &sg, x, w, bias, dy, y))
            return;
    }
    memset(&r, 0, sizeof(r));
    r.g = &j->g;
    r.t = j->t;
    if (prim == PRIM_FWD && j->act.act != KEEL_FUSED_ACT_NONE)
        r.act = &j->act;
    r.x = x;
    r.w = w;
    r.bias = bias;
    r.dy = dy;
    r.y = y;
    r.ws = ws;
    prim_ws(&j->g, j->t, prim, &r.slots, &sb, &r.split, &r.solo);
    r.slot_bytes = sb;
    prim_run(&r, prim);
}

/* The largest workspace any primitive of a job needs. */
static size_t job_prim_ws(const struct cgeo *g, const struct tops *t,
                          const int *prims, int n)
{
    size_t most = 0, sb;
    int64_t slots;
    bool split, solo;

    for (int i = 0; i < n; i++) {
        size_t b = prim_ws(g, t, prims[i], &slots, &sb, &split, &solo);
        most = b > most ? b : most;
    }
    return most;
}

/* conv2d (x, w[, b]) -> y */
static keel_status conv2d_check(const keel_kernel_args *a)
{
    return conv_check(a, "conv2d", false, false);
}

/* conv2d, and fused_conv2d with its activation `act` (NULL for conv2d). */
static void fwd_impl(const struct kcall *k, const struct cact *act)
{
    const keel_kernel_args *a = k->a;
    struct conv_job j;
    const int prims[] = {PRIM_FWD};
    bool has_b = a->num_inputs == 3;
    char *ws;

    conv_geo(a, false, false, &j.g);
    if (knumel(&a->outputs[0]) == 0)
        return;
    if (!job_stage(&j, k, job_prim_ws(&j.g, tops_for(a->inputs[0].dtype),
                                      prims, 1),
                   &ws)) {
        struct gten x = gten_of(&a->inputs[0], k->in[0]);
        struct gten w = gten_of(&a->inputs[1], k->in[1]);
        struct gten y = gten_of(&a->outputs[0], k->out[0]);
        struct gten b = has_b ? gten_of(&a->inputs[2], k->in[2]) : y;
        direct_fwd(&j.g, &x, &w, has_b ? &b : NULL, &y);
        if (act) /* the output is contiguous (conv_check) */
            cpu_act(act->act, act->alpha, a->outputs[0].dtype, k->out[0],
                    knumel(&a->outputs[0]));
        return;
    }
    if (act)
        j.act = *act;
    run_prim(&j, PRIM_FWD, j.in[0].data, j.in[1].data,
             has_b ? j.in[2].data : NULL, NULL, j.out[0].data, ws);
    job_finish(&j);
}

static void conv2d_impl(const struct kcall *k)
{
    fwd_impl(k, NULL);
}

/* fused_conv2d (x, w[, b]) -> act(y) */
static keel_status fused_conv2d_check(const keel_kernel_args *a)
{
    return conv_check(a, "fused_conv2d", false, false);
}

static void fused_conv2d_impl(const struct kcall *k)
{
    struct cact act;

    act.act = (keel_fused_act)keel_kit_activation(k->a, &act.alpha); /* checked */
    act.round_dt = k->a->outputs[0].dtype;
    fwd_impl(k, &act);
}

/* conv2d_transpose (x, w[, b]) -> y: bwd_data of the conv view. */
static keel_status convt_check(const keel_kernel_args *a)
{
    return conv_check(a, "conv2d_transpose", true, false);
}

static void convt_impl(const struct kcall *k)
{
    const keel_kernel_args *a = k->a;
    struct conv_job j;
    const int prims[] = {PRIM_BWD_DATA};
    bool has_b = a->num_inputs == 3;
    char *ws;

    conv_geo(a, true, false, &j.g);
    if (knumel(&a->outputs[0]) == 0)
        return;
    if (!job_stage(&j, k, job_prim_ws(&j.g, tops_for(a->inputs[0].dtype),
                                      prims, 1),
                   &ws)) {
        struct gten x = gten_of(&a->inputs[0], k->in[0]);
        struct gten w = gten_of(&a->inputs[1], k->in[1]);
        struct gten y = gten_of(&a->outputs[0], k->out[0]);
        struct gten b = has_b ? gten_of(&a->inputs[2], k->in[2]) : y;
        direct_bwd_data(&j.g, &x, &w, has_b ? &b : NULL, &y);
        return;
    }
    run_prim(&j, PRIM_BWD_DATA, NULL, j.in[1].data,
             has_b ? j.in[2].data : NULL, j.in[0].data, j.out[0].data, ws);
    job_finish(&j);
}

/* conv2d_grad (x, w, dout) -> dx, dw[, db] and the transposed one. */
static keel_status conv2d_grad_check(const keel_kernel_args *a)
{
    return conv_check(a, "conv2d_grad", false, true);
}

static keel_status convt_grad_check(const keel_kernel_args *a)
{
    return conv_check(a, "conv2d_transpose_grad", true, true);
}

static void grad_direct(const struct kcall *k, const struct cgeo *g,
                        bool transpose)
{
    const keel_kernel_args *a = k->a;
    struct gten x = gten_of(&a->inputs[0], k->in[0]);
    struct gten w = gten_of(&a->inputs[1], k->in[1]);
    struct gten dy = gten_of(&a->inputs[2], k->in[2]);
    struct gten dx = gten_of(&a->outputs[0], k->out[0]);
    struct gten dw = gten_of(&a->outputs[1], k->out[1]);

    if (!transpose) {
        direct_bwd_data(g, &dy, &w, NULL, &dx);
        direct_bwd_filter(g, &x, &dy, &dw);
    } else {
        direct_fwd(g, &dy, &w, NULL, &dx);
        direct_bwd_filter(g, &dy, &x, &dw);
    }
    if (a->num_outputs == 3) {
        struct gten db = gten_of(&a->outputs[2], k->out[2]);
        direct_bias_sum(&a->inputs[2], &dy, &db);
    }
}

static void grad_impl(const struct kcall *k, bool transpose)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *x = &a->inputs[0], *dout = &a->inputs[2];
    const int prims[] = {PRIM_FWD, PRIM_BWD_DATA, PRIM_BWD_FILTER};
    bool need_dx = kattr_i(a, "need_dx", 1) != 0;
    struct conv_job j;
    char *ws;

    conv_geo(a, transpose, true, &j.g);
    if (!job_stage(&j, k, job_prim_ws(&j.g, tops_for(x->dtype), prims, 3),
                   &ws)) {
        grad_direct(k, &j.g, transpose);
        return;
    }
    /* in: x, w, dout; out: dx, dw[, db]. Without need_dx, dx is left as
     * zeros (the catalog leaves it unspecified; zeros keep it defined). */
    if (!need_dx)
        zero_bytes(j.out[0].data, (size_t)knumel(&a->outputs[0]) * j.t->es);
    if (!transpose) {
        if (need_dx)
            run_prim(&j, PRIM_BWD_DATA, NULL, j.in[1].data, NULL,
                     j.in[2].data, j.out[0].data, ws);
        run_prim(&j, PRIM_BWD_FILTER, j.in[0].data, NULL, NULL,
                 j.in[2].data, j.out[1].data, ws);
    } else {
        if (need_dx)
            run_prim(&j, PRIM_FWD, j.in[2].data, j.in[1].data, NULL, NULL,
                     j.out[0].data, ws);
        run_prim(&j, PRIM_BWD_FILTER, j.in[2].data, NULL, NULL,
                 j.in[0].data, j.out[1].data, ws);
    }
    if (j.nout == 3) {
        const keel_tensor_desc *d = dout;
        bias_sum(j.t, j.in[2].data, d->shape[0], d->shape[1],
                 d->shape[2] * d->shape[3], j.out[2].data);
    }
    job_finish(&j);
}

static void conv2d_grad_impl(const struct kcall *k)
{
    grad_impl(k, false);
}

static void convt_grad_impl(const struct kcall *k)
{
    grad_impl(k, true);
}

KERNEL(k_conv2d, "conv2d", conv2d_impl, conv2d_check)
KERNEL(k_fused_conv2d, "fused_conv2d", fused_conv2d_impl, fused_conv2d_check)
KERNEL(k_conv2d_grad, "conv2d_grad", conv2d_grad_impl, conv2d_grad_check)
KERNEL(k_convt, "conv2d_transpose", convt_impl, convt_check)
KERNEL(k_convt_grad, "conv2d_transpose_grad", convt_grad_impl,
       convt_grad_check)

/* ---- pooling ------------------------------------------------------------- */

/* The kit's kinds; max_pool2d_grad is POOL_MAX here, with its geometry
 * from KEEL_KIT_POOL_INDEXED (planes only). */
enum {
    POOL_MAX = KEEL_KIT_POOL_MAX,
    POOL_AVG = KEEL_KIT_POOL_AVG,
    POOL_ADAPTIVE = KEEL_KIT_POOL_ADAPTIVE
};

struct pgeo {
    int kind;
    int64_t n, c, h, w, oh, ow;
    int64_t kh, kw, sh, sw, pt, pb, pl, pr;
    bool exclusive;
};

/* Window rows of output row oy: [*a, *b) inside the input; *div_rows is
 * the count the avg divisor uses for that dim. Same for columns. */
static void pool_win(const struct pgeo *g, int dim, int64_t o, int64_t *a,
                     int64_t *b, int64_t *div)
{
    int64_t in = dim ? g->w : g->h, out = dim ? g->ow : g->oh;
    int64_t k = dim ? g->kw : g->kh, s = dim ? g->sw : g->sh;
    int64_t p0 = dim ? g->pl : g->pt, p1 = dim ? g->pr : g->pb;
    int64_t lo, hi;

    if (g->kind == POOL_ADAPTIVE) {
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
    if (g->exclusive)
        *div = *b - *a;
}

/* An input plane (read through strides) in the compute dtype. */
struct plane {
    const void *p;
    int64_t sy, sx;
};

/*
 * Max pooling over dense float32 rows, 16 output columns at a time, for
 * strides 1 and 2 (LeNet-style 2x2/2 pooling is the hot case). Lanes keep
 * the running maximum and the winning window offset (i * W + j, an int32
 * within the window's rows) and take a new value under the scalar rule:
 * v > m, or v is NaN while m is not. A row's last block (or its only one:
 * LeNet's rows are 14 and 5 outputs wide) runs with masked loads and
 * stores, which read nothing past the windows. Returns how many leading
 * output columns it wrote (all of them, or 0 where it does not apply);
 * the caller does the rest with the scalar code.
 */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx512f"))) static int64_t
max_row_avx512_f32(const struct pgeo *g, const struct plane *x, int64_t y0,
                   float *out, int64_t *idx)
{
    const float *xp = x->p;
    const int64_t kh = g->kh, kw = g->kw, sw = g->sw, W = g->w;
    const int64_t ow = g->ow, sy = x->sy;
    /* Even elements of the 32 loaded: columns 0, 2, ..., 30. */
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14,
                                          12, 10, 8, 6, 4, 2, 0);
    /* Each lane's column offset ox * sw from the block's first column. */
    const __m512i lane = _mm512_set_epi64(7 * sw, 6 * sw, 5 * sw, 4 * sw,
                                          3 * sw, 2 * sw, sw, 0);

    for (int64_t ox0 = 0; ox0 < ow; ox0 += 16) {
        const float *base = xp + y0 * sy + ox0 * sw;
        const int64_t nl = ow - ox0 < 16 ? ow - ox0 : 16;
        /* Lanes in use; for stride 2 the loaded columns 0 .. 2 nl - 2,
         * split over the two 16-float loads. */
        const __mmask16 lm = (__mmask16)((1u << nl) - 1);
        const uint32_t cm = (1u << (2 * nl - 1)) - 1;
        const __mmask16 lo_m = (__mmask16)cm, hi_m = (__mmask16)(cm >> 16);
        __m512 m = _mm512_setzero_ps();
        __m512i at = _mm512_setzero_si512();
        __m512i o0, o1;
        for (int64_t i = 0; i < kh; i++) {
            const float *row = base + i * sy;
            for (int64_t j = 0; j < kw; j++) {
                __m512 v;
                __mmask16 take;
                if (sw == 1) {
                    v = _mm512_maskz_loadu_ps(lm, row + j);
                } else {
                    __m512 lo = _mm512_maskz_loadu_ps(lo_m, row + j);
                    __m512 hi = _mm512_maskz_loadu_ps(hi_m, row + j + 16);
                    v = _mm512_permutex2var_ps(lo, even, hi);
                }
                if (i == 0 && j == 0) {
                    m = v;
                    continue;
                }
                take = _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ) |
                       (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) &
                        _mm512_cmp_ps_mask(m, m, _CMP_ORD_Q));
                m = _mm512_mask_blend_ps(take, m, v);
                at = _mm512_mask_blend_epi32(
                    take, at, _mm512_set1_epi32((int32_t)(i * W + j)));
            }
        }
        _mm512_mask_storeu_ps(out + ox0, lm, m);
        /* Index = y0 * W + ox * sw + (i * W + j) as int64. */
        o0 = _mm512_add_epi64(_mm512_set1_epi64(y0 * W + ox0 * sw), lane);
        o1 = _mm512_add_epi64(o0, _mm512_set1_epi64(8 * sw));
        _mm512_mask_storeu_epi64(
            idx + ox0, (__mmask8)lm,
            _mm512_add_epi64(
                o0, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(at))));
        _mm512_mask_storeu_epi64(
            idx + ox0 + 8, (__mmask8)(lm >> 8),
            _mm512_add_epi64(
                o1, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(at, 1))));
    }
    return ow;
}

/*
 * 2x2 windows with stride 2 (LeNet's pooling), whole float32 planes whose
 * windows all lie inside the input. A row pair gives the four candidates
 * of 16 windows (even and odd columns of both rows); the winner is the
 * first candidate, in window order, equal to the maximum, or the first
 * NaN when a window has one, which is the scalar rule's result (a later
 * equal value or NaN never replaces an earlier one) with a third of its
 * compares and blends. The output value is the winner itself, so -0 and
 * +0 keep their signs as in the scalar loop.
 */
static bool pool_2x2(const struct pgeo *g)
{
    return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 &&
           g->pt == 0 && g->pl == 0 && 2 * g->oh <= g->h &&
           2 * g->ow <= g->w && g->w + 1 <= INT32_MAX;
}

/* Lanes 0..15 from two 16-float loads: even or odd columns. */
#define EVEN_IDX                                                               \
    _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0)
#define ODD_IDX                                                                \
    _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1)

__attribute__((target("avx512f"))) static void
max_plane_2x2_avx512(const struct pgeo *g, const struct plane *x, float *out,
                     int64_t *idx)
{
    const float *xp = x->p;
    const int64_t W = g->w, ow = g->ow, sy = x->sy;
    const __m512i even = EVEN_IDX, odd = ODD_IDX;
    const __m512i lane = _mm512_set_epi64(14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i o_b = _mm512_set1_epi32(1), o_c = _mm512_set1_epi32((int)W),
                  o_d = _mm512_set1_epi32((int)W + 1);

    for (int64_t oy = 0; oy < g->oh; oy++) {
        const float *r0 = xp + 2 * oy * sy, *r1 = r0 + sy;
        for (int64_t ox0 = 0; ox0 < ow; ox0 += 16) {
            const int64_t nl = ow - ox0 < 16 ? ow - ox0 : 16;
            const __mmask16 lm = (__mmask16)((1u << nl) - 1);
            const uint32_t cm = nl == 16 ? 0xffffffffu : (1u << (2 * nl)) - 1;
            const __mmask16 lo_m = (__mmask16)cm, hi_m = (__mmask16)(cm >> 16);
            __m512 l0 = _mm512_maskz_loadu_ps(lo_m, r0 + 2 * ox0);
            __m512 h0 = _mm512_maskz_loadu_ps(hi_m, r0 + 2 * ox0 + 16);
            __m512 l1 = _mm512_maskz_loadu_ps(lo_m, r1 + 2 * ox0);
            __m512 h1 = _mm512_maskz_loadu_ps(hi_m, r1 + 2 * ox0 + 16);
            __m512 a = _mm512_permutex2var_ps(l0, even, h0);
            __m512 b = _mm512_permutex2var_ps(l0, odd, h0);
            __m512 c = _mm512_permutex2var_ps(l1, even, h1);
            __m512 d = _mm512_permutex2var_ps(l1, odd, h1);
            __m512 mx = _mm512_max_ps(_mm512_max_ps(a, b), _mm512_max_ps(c, d));
            __mmask16 na = _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
            __mmask16 nb = _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
            __mmask16 nc = _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q);
            __mmask16 nan = na | nb | nc | _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q);
            /* per lane: the first NaN, or the first equal to the max */
            __mmask16 sa = (nan & na) | (~nan & _mm512_cmp_ps_mask(a, mx, _CMP_EQ_OQ));
            __mmask16 sb = (nan & nb) | (~nan & _mm512_cmp_ps_mask(b, mx, _CMP_EQ_OQ));
            __mmask16 sc = (nan & nc) | (~nan & _mm512_cmp_ps_mask(c, mx, _CMP_EQ_OQ));
            __m512 v = _mm512_mask_blend_ps(sc, d, c);
            __m512i at = _mm512_mask_blend_epi32(sc, o_d, o_c);
            __m512i base = _mm512_add_epi64(
                _mm512_set1_epi64(2 * oy * W + 2 * ox0), lane);
            v = _mm512_mask_blend_ps(sb, v, b);
            at = _mm512_mask_blend_epi32(sb, at, o_b);
            v = _mm512_mask_blend_ps(sa, v, a);
            at = _mm512_maskz_mov_epi32((__mmask16)~sa, at);
            _mm512_mask_storeu_ps(out + oy * ow + ox0, lm, v);
            _mm512_mask_storeu_epi64(
                idx + oy * ow + ox0, (__mmask8)lm,
                _mm512_add_epi64(base, _mm512_cvtepi32_epi64(
                                           _mm512_castsi512_si256(at))));
            _mm512_mask_storeu_epi64(
                idx + oy * ow + ox0 + 8, (__mmask8)(lm >> 8),
                _mm512_add_epi64(
                    _mm512_add_epi64(base, _mm512_set1_epi64(16)),
                    _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(at, 1))));
        }
    }
}

/*
 * The gradient into a dense dx plane when every output's index lies in
 * its own 2x2 block at (2 oy, 2 ox), as 2x2/2 pooling's do: the blocks do
 * not overlap, so each input element is written once, dout where the
 * index points at it and 0 elsewhere (no zeroing pass, no scatter), and
 * the rows and columns no block covers are zeroed. Returns false, having
 * written only what the caller's fallback overwrites, when an index lies
 * elsewhere.
 */
/* The parts of a dense 2x2 gradient plane no block covers: the columns
 * past 2 ow of a block's two rows, and the rows past 2 oh. */
static void zero_row_tails(const struct pgeo *g, float *r0, float *r1)
{
    if (g->w > 2 * g->ow) {
        memset(r0 + 2 * g->ow, 0, (size_t)(g->w - 2 * g->ow) * sizeof(float));
        memset(r1 + 2 * g->ow, 0, (size_t)(g->w - 2 * g->ow) * sizeof(float));
    }
}

static void zero_bottom_rows(const struct pgeo *g, float *dx)
{
    if (g->h > 2 * g->oh)
        memset(dx + 2 * g->oh * g->w, 0,
               (size_t)((g->h - 2 * g->oh) * g->w) * sizeof(float));
}

__attribute__((target("avx512f"))) static bool
max_grad_2x2_avx512(const struct pgeo *g, const float *dp, int64_t dsy,
                    const int64_t *ip, int64_t isy, float *dx)
{
    const int64_t W = g->w, ow = g->ow;
    /* interleave a and b lanes: a0 b0 a1 b1 ... */
    const __m512i ilo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3,
                                         18, 2, 17, 1, 16, 0);
    const __m512i ihi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27,
                                         11, 26, 10, 25, 9, 24, 8);
    const __m512i lane = _mm512_set_epi64(14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i k1 = _mm512_set1_epi64(1), kw = _mm512_set1_epi64(W),
                  kw1 = _mm512_set1_epi64(W + 1);

    for (int64_t oy = 0; oy < g->oh; oy++) {
        float *r0 = dx + 2 * oy * W, *r1 = r0 + W;
        for (int64_t ox0 = 0; ox0 < ow; ox0 += 16) {
            const int64_t nl = ow - ox0 < 16 ? ow - ox0 : 16;
            const __mmask16 lm = (__mmask16)((1u << nl) - 1);
            const uint32_t cm = nl == 16 ? 0xffffffffu : (1u << (2 * nl)) - 1;
            const __mmask16 lo_m = (__mmask16)cm, hi_m = (__mmask16)(cm >> 16);
            __m512i base = _mm512_add_epi64(
                _mm512_set1_epi64(2 * oy * W + 2 * ox0), lane);
            __m512i i0 = _mm512_sub_epi64(
                _mm512_maskz_loadu_epi64((__mmask8)lm, ip + oy * isy + ox0),
                base);
            __m512i i1 = _mm512_sub_epi64(
                _mm512_maskz_loadu_epi64((__mmask8)(lm >> 8),
                                         ip + oy * isy + ox0 + 8),
                _mm512_add_epi64(base, _mm512_set1_epi64(16)));
            __m512 gv = _mm512_maskz_loadu_ps(lm, dp + oy * dsy + ox0);
            __mmask16 ea = (__mmask16)(_mm512_cmpeq_epi64_mask(i0, _mm512_setzero_si512()) |
                                       (_mm512_cmpeq_epi64_mask(i1, _mm512_setzero_si512()) << 8));
            __mmask16 eb = (__mmask16)(_mm512_cmpeq_epi64_mask(i0, k1) |
                                       (_mm512_cmpeq_epi64_mask(i1, k1) << 8));
            __mmask16 ec = (__mmask16)(_mm512_cmpeq_epi64_mask(i0, kw) |
                                       (_mm512_cmpeq_epi64_mask(i1, kw) << 8));
            __mmask16 ed = (__mmask16)(_mm512_cmpeq_epi64_mask(i0, kw1) |
                                       (_mm512_cmpeq_epi64_mask(i1, kw1) << 8));
            __m512 va, vb, vc, vd;
            if ((__mmask16)((ea | eb | ec | ed) & lm) != lm)
                return false;
            va = _mm512_maskz_mov_ps(ea, gv), vb = _mm512_maskz_mov_ps(eb, gv);
            vc = _mm512_maskz_mov_ps(ec, gv), vd = _mm512_maskz_mov_ps(ed, gv);
            _mm512_mask_storeu_ps(r0 + 2 * ox0, lo_m,
                                  _mm512_permutex2var_ps(va, ilo, vb));
            _mm512_mask_storeu_ps(r0 + 2 * ox0 + 16, hi_m,
                                  _mm512_permutex2var_ps(va, ihi, vb));
            _mm512_mask_storeu_ps(r1 + 2 * ox0, lo_m,
                                  _mm512_permutex2var_ps(vc, ilo, vd));
            _mm512_mask_storeu_ps(r1 + 2 * ox0 + 16, hi_m,
                                  _mm512_permutex2var_ps(vc, ihi, vd));
        }
        zero_row_tails(g, r0, r1);
    }
    zero_bottom_rows(g, dx);
    return true;
}

/* ---- the AVX2 bodies of the 2x2 stride-2 kernels -------------------------
 *
 * The same results as the AVX-512 ones, 8 output columns at a time: the
 * two input rows' 16 columns are split into even and odd ones with
 * shuffles, lanes are selected with vector masks (blendv), and tails use
 * maskload / maskstore, which neither read nor write masked lanes.
 */

/* Lanes 0 .. n-1 set (n in 0..8), as a maskload/maskstore operand. */
__attribute__((target("avx2"))) static inline __m256i lanes_upto(int64_t n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* 64-bit lanes 0 .. n-1 set (n in 0..4). */
__attribute__((target("avx2"))) static inline __m256i lanes64_upto(int64_t n)
{
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n),
                              _mm256_setr_epi64x(0, 1, 2, 3));
}

/* Even / odd columns of the 16 in (lo, hi), in order. */
__attribute__((target("avx2"))) static inline __m256 even8(__m256 lo,
                                                          __m256 hi)
{
    return _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0))),
        _MM_SHUFFLE(3, 1, 2, 0)));
}

__attribute__((target("avx2"))) static inline __m256 odd8(__m256 lo,
                                                         __m256 hi)
{
    return _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1))),
        _MM_SHUFFLE(3, 1, 2, 0)));
}

__attribute__((target("avx2"))) static void
max_plane_2x2_avx2(const struct pgeo *g, const struct plane *x, float *out,
                   int64_t *idx)
{
    const float *xp = x->p;
    const int64_t W = g->w, ow = g->ow, sy = x->sy;
    const __m256i o_b = _mm256_set1_epi32(1), o_c = _mm256_set1_epi32((int)W),
                  o_d = _mm256_set1_epi32((int)W + 1);
    const __m256i lane = _mm256_setr_epi64x(0, 2, 4, 6);

    for (int64_t oy = 0; oy < g->oh; oy++) {
        const float *r0 = xp + 2 * oy * sy, *r1 = r0 + sy;
        for (int64_t ox0 = 0; ox0 < ow; ox0 += 8) {
            const int64_t nl = ow - ox0 < 8 ? ow - ox0 : 8;
            const __m256i lm = lanes_upto(nl);
            const __m256i lo_m = lanes_upto(2 * nl),
                          hi_m = lanes_upto(2 * nl - 8);
            __m256 l0 = _mm256_maskload_ps(r0 + 2 * ox0, lo_m);
            __m256 h0 = _mm256_maskload_ps(r0 + 2 * ox0 + 8, hi_m);
            __m256 l1 = _mm256_maskload_ps(r1 + 2 * ox0, lo_m);
            __m256 h1 = _mm256_maskload_ps(r1 + 2 * ox0 + 8, hi_m);
            __m256 a = even8(l0, h0), b = odd8(l0, h0);
            __m256 c = even8(l1, h1), d = odd8(l1, h1);
            __m256 mx = _mm256_max_ps(_mm256_max_ps(a, b), _mm256_max_ps(c, d));
            __m256 na = _mm256_cmp_ps(a, a, _CMP_UNORD_Q);
            __m256 nb = _mm256_cmp_ps(b, b, _CMP_UNORD_Q);
            __m256 nc = _mm256_cmp_ps(c, c, _CMP_UNORD_Q);
            __m256 nan = _mm256_or_ps(
                _mm256_or_ps(na, nb),
                _mm256_or_ps(nc, _mm256_cmp_ps(d, d, _CMP_UNORD_Q)));
            /* per lane: the first NaN, or the first equal to the max */
            __m256 sa = _mm256_or_ps(
                _mm256_and_ps(nan, na),
                _mm256_andnot_ps(nan, _mm256_cmp_ps(a, mx, _CMP_EQ_OQ)));
            __m256 sb = _mm256_or_ps(
                _mm256_and_ps(nan, nb),
                _mm256_andnot_ps(nan, _mm256_cmp_ps(b, mx, _CMP_EQ_OQ)));
            __m256 sc = _mm256_or_ps(
                _mm256_and_ps(nan, nc),
                _mm256_andnot_ps(nan, _mm256_cmp_ps(c, mx, _CMP_EQ_OQ)));
            __m256 v = _mm256_blendv_ps(d, c, sc);
            __m256 at = _mm256_blendv_ps(_mm256_castsi256_ps(o_d),
                                         _mm256_castsi256_ps(o_c), sc);
            __m256i base = _mm256_add_epi64(
                _mm256_set1_epi64x(2 * oy * W + 2 * ox0), lane);
            __m256i off;

            v = _mm256_blendv_ps(v, b, sb);
            at = _mm256_blendv_ps(at, _mm256_castsi256_ps(o_b), sb);
            v = _mm256_blendv_ps(v, a, sa);
            off = _mm256_castps_si256(_mm256_andnot_ps(sa, at));
            _mm256_maskstore_ps(out + oy * ow + ox0, lm, v);
            _mm256_maskstore_epi64(
                (long long *)(idx + oy * ow + ox0), lanes64_upto(nl),
                _mm256_add_epi64(base, _mm256_cvtepi32_epi64(
                                           _mm256_castsi256_si128(off))));
            _mm256_maskstore_epi64(
                (long long *)(idx + oy * ow + ox0 + 4), lanes64_upto(nl - 4),
                _mm256_add_epi64(
                    _mm256_add_epi64(base, _mm256_set1_epi64x(8)),
                    _mm256_cvtepi32_epi64(_mm256_extracti128_si256(off, 1))));
        }
    }
}

/* Two masks of 4 64-bit lanes as one of 8 32-bit lanes, in order. */
__attribute__((target("avx2"))) static inline __m256 narrow_mask(__m256i m0,
                                                                __m256i m1)
{
    const __m256i pick = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    __m256i p0 = _mm256_permutevar8x32_epi32(m0, pick);
    __m256i p1 = _mm256_permutevar8x32_epi32(m1, pick);

    return _mm256_castsi256_ps(_mm256_permute2x128_si256(p0, p1, 0x20));
}

__attribute__((target("avx2"))) static bool
max_grad_2x2_avx2(const struct pgeo *g, const float *dp, int64_t dsy,
                  const int64_t *ip, int64_t isy, float *dx)
{
    const int64_t W = g->w, ow = g->ow;
    const __m256i lane = _mm256_setr_epi64x(0, 2, 4, 6);
    const __m256i k0 = _mm256_setzero_si256(), k1 = _mm256_set1_epi64x(1),
                  kw = _mm256_set1_epi64x(W), kw1 = _mm256_set1_epi64x(W + 1);

    for (int64_t oy = 0; oy < g->oh; oy++) {
        float *r0 = dx + 2 * oy * W, *r1 = r0 + W;
        for (int64_t ox0 = 0; ox0 < ow; ox0 += 8) {
            const int64_t nl = ow - ox0 < 8 ? ow - ox0 : 8;
            const __m256i lm = lanes_upto(nl);
            const __m256i lo_m = lanes_upto(2 * nl),
                          hi_m = lanes_upto(2 * nl - 8);
            __m256i base = _mm256_add_epi64(
                _mm256_set1_epi64x(2 * oy * W + 2 * ox0), lane);
            __m256i i0 = _mm256_sub_epi64(
                _mm256_maskload_epi64((const long long *)(ip + oy * isy + ox0),
                                      lanes64_upto(nl)),
                base);
            __m256i i1 = _mm256_sub_epi64(
                _mm256_maskload_epi64(
                    (const long long *)(ip + oy * isy + ox0 + 4),
                    lanes64_upto(nl - 4)),
                _mm256_add_epi64(base, _mm256_set1_epi64x(8)));
            __m256 gv = _mm256_maskload_ps(dp + oy * dsy + ox0, lm);
            __m256 ea = narrow_mask(_mm256_cmpeq_epi64(i0, k0),
                                    _mm256_cmpeq_epi64(i1, k0));
            __m256 eb = narrow_mask(_mm256_cmpeq_epi64(i0, k1),
                                    _mm256_cmpeq_epi64(i1, k1));
            __m256 ec = narrow_mask(_mm256_cmpeq_epi64(i0, kw),
                                    _mm256_cmpeq_epi64(i1, kw));
            __m256 ed = narrow_mask(_mm256_cmpeq_epi64(i0, kw1),
                                    _mm256_cmpeq_epi64(i1, kw1));
            __m256 any = _mm256_or_ps(_mm256_or_ps(ea, eb),
                                      _mm256_or_ps(ec, ed));
            __m256 va, vb, vc, vd, lo, hi;

            /* every live lane's index in its block, or the general path */
            if (_mm256_movemask_ps(_mm256_andnot_ps(
                    any, _mm256_castsi256_ps(lm))) != 0)
                return false;
            va = _mm256_and_ps(ea, gv), vb = _mm256_and_ps(eb, gv);
            vc = _mm256_and_ps(ec, gv), vd = _mm256_and_ps(ed, gv);
            /* a0 b0 a1 b1 ... a7 b7 */
            lo = _mm256_unpacklo_ps(va, vb), hi = _mm256_unpackhi_ps(va, vb);
            _mm256_maskstore_ps(r0 + 2 * ox0, lo_m,
                                _mm256_permute2f128_ps(lo, hi, 0x20));
            _mm256_maskstore_ps(r0 + 2 * ox0 + 8, hi_m,
                                _mm256_permute2f128_ps(lo, hi, 0x31));
            lo = _mm256_unpacklo_ps(vc, vd), hi = _mm256_unpackhi_ps(vc, vd);
            _mm256_maskstore_ps(r1 + 2 * ox0, lo_m,
                                _mm256_permute2f128_ps(lo, hi, 0x20));
            _mm256_maskstore_ps(r1 + 2 * ox0 + 8, hi_m,
                                _mm256_permute2f128_ps(lo, hi, 0x31));
        }
        zero_row_tails(g, r0, r1);
    }
    zero_bottom_rows(g, dx);
    return true;
}

static int64_t max_row_simd_f32(const struct pgeo *g, const struct plane *x,
                                int64_t y0, float *out, int64_t *idx)
{
    /* Offsets inside the window rows must fit the int32 lanes. */
    if ((g->sw != 1 && g->sw != 2) || (g->kh - 1) * g->w + g->kw > INT32_MAX ||
        cpu_isa() < CPU_ISA_AVX512)
        return 0;
    return max_row_avx512_f32(g, x, y0, out, idx);
}

/* The 2x2 stride-2 plane kernels, where they apply (see above). */
static bool max_plane_simd_f32(const struct pgeo *g, const struct plane *x,
                               float *out, int64_t *idx)
{
    if (x->sx != 1 || !pool_2x2(g) || cpu_isa() < CPU_ISA_AVX2)
        return false;
    if (cpu_isa() >= CPU_ISA_AVX512)
        max_plane_2x2_avx512(g, x, out, idx);
    else
        max_plane_2x2_avx2(g, x, out, idx);
    return true;
}

static bool max_grad_simd_f32(const struct pgeo *g, const struct plane *d,
                              const int64_t *ip, int64_t isy, int64_t isx,
                              float *dx)
{
    /* The op has no window attributes: any index inside its own 2x2 block
     * at (2 oy, 2 ox) is what a dense write expresses, whatever pooling
     * produced it, and max_grad_2x2_avx512 / _avx2 check every one. */
    if (d->sx != 1 || isx != 1 || 2 * g->oh > g->h || 2 * g->ow > g->w ||
        g->w + 1 > INT32_MAX || cpu_isa() < CPU_ISA_AVX2)
        return false;
    if (cpu_isa() >= CPU_ISA_AVX512)
        return max_grad_2x2_avx512(g, d->p, d->sy, ip, isy, dx);
    return max_grad_2x2_avx2(g, d->p, d->sy, ip, isy, dx);
}
#else
static int64_t max_row_simd_f32(const struct pgeo *g, const struct plane *x,
                                int64_t y0, float *out, int64_t *idx)
{
    (void)g, (void)x, (void)y0, (void)out, (void)idx;
    return 0;
}

static bool max_plane_simd_f32(const struct pgeo *g, const struct plane *x,
                               float *out, int64_t *idx)
{
    (void)g, (void)x, (void)out, (void)idx;
    return false;
}

static bool max_grad_simd_f32(const struct pgeo *g, const struct plane *d,
                              const int64_t *ip, int64_t isy, int64_t isx,
                              float *dx)
{
    (void)g, (void)d, (void)ip, (void)isy, (void)isx, (void)dx;
    return false;
}
#endif

/* float64 pooling has no vector path. */
static int64_t max_row_simd_f64(const struct pgeo *g, const struct plane *x,
                                int64_t y0, double *out, int64_t *idx)
{
    (void)g, (void)x, (void)y0, (void)out, (void)idx;
    return 0;
}

/* take ? v : m through the bits: gcc turns a float ?: back into a branch,
 * and which way a max-pool comparison goes is unpredictable. */
static inline float pool_pick_f32(bool take, float v, float m)
{
    uint32_t k = 0u - (uint32_t)take, vb, mb;
    memcpy(&vb, &v, sizeof(vb));
    memcpy(&mb, &m, sizeof(mb));
    mb = (mb & ~k) | (vb & k);
    memcpy(&m, &mb, sizeof(m));
    return m;
}

static inline double pool_pick_f64(bool take, double v, double m)
{
    uint64_t k = 0u - (uint64_t)take, vb, mb;
    memcpy(&vb, &v, sizeof(vb));
    memcpy(&mb, &m, sizeof(mb));
    mb = (mb & ~k) | (vb & k);
    memcpy(&m, &mb, sizeof(m));
    return m;
}

#define DEF_POOL(T, S)                                                         \
    /* Max pooling of output columns [ox0, ow) of the output row whose         \
     * windows start at input row y0, when the rows are dense and every        \
     * window lies inside the input. Visits each window row by row, then       \
     * column, like the general loop below, and keeps its rule (the first      \
     * maximum wins; a NaN beats numbers and a later NaN does not replace      \
     * an earlier one), so results and indices are identical. The choice       \
     * is a select, not a branch: on real data whether a value is a new        \
     * maximum is unpredictable. */                                            \
    static void max_dense_##S(const struct pgeo *g, const struct plane *x,     \
                              int64_t y0, int64_t ox0, T *out, int64_t *idx)   \
    {                                                                          \
        const T *xp = x->p;                                                    \
        const int64_t kh = g->kh, kw = g->kw, sw = g->sw, W = g->w;            \
        const int64_t ow = g->ow, sy = x->sy;                                  \
        for (int64_t ox = ox0; ox < ow; ox++) {                                \
            const int64_t ix0 = ox * sw;                                       \
            const T *row = xp + y0 * sy + ix0;                                 \
            /* The window's first element is its first candidate. */          \
            T m = row[0];                                                      \
            int64_t best = y0 * W + ix0;                                       \
            for (int64_t i = 0; i < kh; i++) {                                 \
                row = xp + (y0 + i) * sy + ix0;                                \
                for (int64_t j = i == 0; j < kw; j++) {                        \
                    T v = row[j];                                              \
                    bool take = (v > m) | ((v != v) & (m == m));               \
                    m = pool_pick_##S(take, v, m);                             \
                    best ^= (best ^ ((y0 + i) * W + ix0 + j)) &                \
                            -(int64_t)take;                                    \
                }                                                              \
            }                                                                  \
            out[ox] = m;                                                       \
            idx[ox] = best;                                                    \
        }                                                                      \
    }                                                                          \
                                                                               \
    /* One output row of max pooling. */                                       \
    static void max_row_##S(const struct pgeo *g, const struct plane *x,       \
                            int64_t oy, void *out_, int64_t *idx)              \
    {                                                                          \
        const T *xp = x->p;                                                    \
        T *out = out_;                                                         \
        int64_t y0, y1, dv;                                                    \
        pool_win(g, 0, oy, &y0, &y1, &dv);                                     \
        if (x->sx == 1 && y1 - y0 == g->kh && g->pl == 0 &&                    \
            (g->ow - 1) * g->sw + g->kw <= g->w) {                             \
            int64_t done = max_row_simd_##S(g, x, y0, out, idx);               \
            max_dense_##S(g, x, y0, done, out, idx);                           \
            return;                                                            \
        }                                                                      \
        for (int64_t ox = 0; ox < g->ow; ox++) {                               \
            out[ox] = (T)-INFINITY;                                            \
            idx[ox] = -1;                                                      \
        }                                                                      \
        for (int64_t iy = y0; iy < y1; iy++)                                   \
            for (int64_t j = 0; j < g->kw; j++) {                              \
                int64_t off = j - g->pl, x0, x1;                               \
                const T *row = xp + iy * x->sy;                                \
                out_span(g->ow, g->sw, off, g->w, &x0, &x1);                   \
                for (int64_t ox = x0; ox < x1; ox++) {                         \
                    int64_t ix = ox * g->sw + off;                             \
                    T v = row[ix * x->sx];                                     \
                    bool take = v > out[ox] || idx[ox] < 0 ||                  \
                                (v != v && out[ox] == out[ox]);                \
                    out[ox] = take ? v : out[ox];                              \
                    idx[ox] = take ? iy * g->w + ix : idx[ox];                 \
                }                                                              \
            }                                                                  \
    }                                                                          \
                                                                               \
    /* One output row of avg pooling (not adaptive). */                       \
    static void avg_row_##S(const struct pgeo *g, const struct plane *x,      \
                            int64_t oy, void *out_)                            \
    {                                                                          \
        const T *xp = x->p;                                                    \
        T *out = out_;                                                         \
        int64_t y0, y1, dy;                                                    \
        pool_win(g, 0, oy, &y0, &y1, &dy);                                     \
        for (int64_t ox = 0; ox < g->ow; ox++)                                 \
            out[ox] = 0;                                                       \
        for (int64_t iy = y0; iy < y1; iy++)                                   \
            for (int64_t j = 0; j < g->kw; j++) {                              \
                int64_t off = j - g->pl, x0, x1;                               \
                const T *row = xp + iy * x->sy;                                \
                out_span(g->ow, g->sw, off, g->w, &x0, &x1);                   \
                for (int64_t ox = x0; ox < x1; ox++)                           \
                    out[ox] += row[(ox * g->sw + off) * x->sx];                \
            }                                                                  \
        for (int64_t ox = 0; ox < g->ow; ox++) {                               \
            int64_t a, b, dx;                                                  \
            pool_win(g, 1, ox, &a, &b, &dx);                                   \
            out[ox] = dy * dx > 0 && y1 > y0 && b > a                          \
                          ? out[ox] / (T)(dy * dx)                             \
                          : 0;                                                 \
        }                                                                      \
    }                                                                          \
                                                                               \
    /* One output row of adaptive avg pooling. */                             \
    static void adaptive_row_##S(const struct pgeo *g, const struct plane *x, \
                                 int64_t oy, void *out_)                       \
    {                                                                          \
        const T *xp = x->p;                                                    \
        T *out = out_;                                                         \
        int64_t y0, y1, dy;                                                    \
        pool_win(g, 0, oy, &y0, &y1, &dy);                                     \
        for (int64_t ox = 0; ox < g->ow; ox++) {                               \
            int64_t a, b, dx;                                                  \
            T s = 0;                                                           \
            pool_win(g, 1, ox, &a, &b, &dx);                                   \
            for (int64_t iy = y0; iy < y1; iy++)                               \
                for (int64_t ix = a; ix < b; ix++)                             \
                    s += xp[iy * x->sy + ix * x->sx];                          \
            out[ox] = s / (T)(dy * dx);                                        \
        }                                                                      \
    }                                                                          \
                                                                               \
    /* dx row band of output row oy += dout row / divisor (avg, adaptive). */ \
    static void avg_grad_row_##S(const struct pgeo *g, const struct plane *d, \
                                 int64_t oy, void *dx_)                        \
    {                                                                          \
        const T *dp = (const T *)d->p + oy * d->sy;                            \
        T *dx = dx_;                                                           \
        int64_t y0, y1, dy;                                                    \
        pool_win(g, 0, oy, &y0, &y1, &dy);                                     \
        for (int64_t ox = 0; ox < g->ow; ox++) {                               \
            int64_t a, b, dv;                                                  \
            T v;                                                               \
            pool_win(g, 1, ox, &a, &b, &dv);                                   \
            if (dy * dv <= 0 || y1 <= y0 || b <= a)                            \
                continue;                                                      \
            v = dp[ox * d->sx] / (T)(dy * dv);                                 \
            for (int64_t iy = y0; iy < y1; iy++)                               \
                for (int64_t ix = a; ix < b; ix++)                             \
                    dx[iy * g->w + ix] += v;                                   \
        }                                                                      \
    }                                                                          \
                                                                               \
    /* dx plane [idx] += dout (max). */                                       \
    static void max_grad_plane_##S(const struct pgeo *g,                      \
                                   const struct plane *d,                      \
                                   const int64_t *idx, int64_t isy,            \
                                   int64_t isx, void *dx_)                     \
    {                                                                          \
        const T *dp = d->p;                                                    \
        T *dx = dx_;                                                           \
        int64_t hw = g->h * g->w;                                              \
        for (int64_t oy = 0; oy < g->oh; oy++)                                 \
            for (int64_t ox = 0; ox < g->ow; ox++) {                           \
                int64_t i = idx[oy * isy + ox * isx];                          \
                if (i >= 0 && i < hw)                                          \
                    dx[i] += dp[oy * d->sy + ox * d->sx];                      \
            }                                                                  \
    }

DEF_POOL(float, f32)
DEF_POOL(double, f64)

/* A pooling invocation. x: input (compute dtype, any strides); out: the
 * output planes (compute dtype, contiguous). For grads `x` is dout. */
struct prun {
    const struct pgeo *g;
    bool f64;
    const char *x;
    int64_t xs[4];
    char *out;
    int64_t *idx;         /* max: index output (contiguous) */
    const int64_t *iidx;  /* max grad: index input */
    int64_t is[4];
    bool grad;
};

static void pool_planes(void *ctx, int64_t p0, int64_t p1)
{
    const struct prun *r = ctx;
    const struct pgeo *g = r->g;
    size_t es = r->f64 ? sizeof(double) : sizeof(float);

    for (int64_t p = p0; p < p1; p++) {
        int64_t n = p / g->c, c = p % g->c;
        struct plane x = {r->x + (size_t)(n * r->xs[0] + c * r->xs[1]) * es,
                          r->xs[2], r->xs[3]};
        if (r->grad) {
            char *dx = r->out + (size_t)(p * g->h * g->w) * es;
            if (g->kind == POOL_MAX && !r->f64 &&
                max_grad_simd_f32(g, &x, r->iidx + n * r->is[0] + c * r->is[1],
                                  r->is[2], r->is[3], (float *)dx))
                continue;
            zero_bytes(dx, (size_t)(g->h * g->w) * es);
            if (g->kind == POOL_MAX) {
                const int64_t *ip = r->iidx + n * r->is[0] + c * r->is[1];
                if (r->f64)
                    max_grad_plane_f64(g, &x, ip, r->is[2], r->is[3], dx);
                else
                    max_grad_plane_f32(g, &x, ip, r->is[2], r->is[3], dx);
                continue;
            }
            for (int64_t oy = 0; oy < g->oh; oy++) {
                if (r->f64)
                    avg_grad_row_f64(g, &x, oy, dx);
                else
                    avg_grad_row_f32(g, &x, oy, dx);
            }
            continue;
        }
        if (g->kind == POOL_MAX && !r->f64 &&
            max_plane_simd_f32(g, &x,
                               (float *)(r->out + (size_t)(p * g->oh * g->ow) *
                                                      es),
                               r->idx + p * g->oh * g->ow))
            continue;
        for (int64_t oy = 0; oy < g->oh; oy++) {
            int64_t o = (p * g->oh + oy) * g->ow;
            char *orow = r->out + (size_t)o * es;
            if (g->kind == POOL_MAX) {
                if (r->f64)
                    max_row_f64(g, &x, oy, orow, r->idx + o);
                else
                    max_row_f32(g, &x, oy, orow, r->idx + o);
            } else if (g->kind == POOL_AVG) {
                if (r->f64)
                    avg_row_f64(g, &x, oy, orow);
                else
                    avg_row_f32(g, &x, oy, orow);
            } else {
                if (r->f64)
                    adaptive_row_f64(g, &x, oy, orow);
                else
                    adaptive_row_f32(g, &x, oy, orow);
            }
        }
    }
}

static void pool_run(struct prun *r)
{
    const struct pgeo *g = r->g;
    int64_t per = g->h * g->w + g->oh * g->ow;
    int64_t grain = per > 0 ? KGRAIN / per : 1;

    cpu_parallel_for(g->n * g->c, grain > 0 ? grain : 1, pool_planes, r);
}

/* Allocation-free reference for every pooling op, any dtype/strides. */
static void pool_direct(const struct pgeo *g, const keel_tensor_desc *xd,
                        const void *xp, const keel_tensor_desc *id,
                        const void *ip, const keel_tensor_desc *od,
                        void *op, int64_t *idx_out, bool grad)
{
    struct gten x = gten_of(xd, xp), o = gten_of(od, op);
    struct gten ix = id ? gten_of(id, ip) : x;

    if (grad)
        for (int64_t i = 0; i < knumel(od); i++)
            kstore((char *)op + i * o.es, o.dt, 0);
    for (int64_t n = 0; n < g->n; n++)
        for (int64_t c = 0; c < g->c; c++)
            for (int64_t oy = 0; oy < g->oh; oy++)
                for (int64_t ox = 0; ox < g->ow; ox++) {
                    int64_t y0, y1, x0, x1, dy, dx, best = -1;
                    double acc = 0, m = -INFINITY;
                    pool_win(g, 0, oy, &y0, &y1, &dy);
                    pool_win(g, 1, ox, &x0, &x1, &dx);
                    if (grad && g->kind == POOL_MAX) {
                        int64_t i =
                            *(const int64_t *)gat(&ix, n, c, oy, ox);
                        char *t;
                        if (i < 0 || i >= g->h * g->w)
                            continue;
                        t = gat(&o, n, c, i / g->w, i % g->w);
                        kstore(t, o.dt,
                               kload(t, o.dt) + gld(&x, n, c, oy, ox));
                        continue;
                    }
                    for (int64_t iy = y0; iy < y1; iy++)
                        for (int64_t jx = x0; jx < x1; jx++) {
                            if (grad) {
                                char *t = gat(&o, n, c, iy, jx);
                                kstore(t, o.dt,
                                       kload(t, o.dt) +
                                           gld(&x, n, c, oy, ox) /
                                               (double)(dy * dx));
                                continue;
                            }
                            double v = gld(&x, n, c, iy, jx);
                            if (v > m || best < 0 || (v != v && m == m)) {
                                m = v;
                                best = iy * g->w + jx;
                            }
                            acc += v;
                        }
                    if (grad)
                        continue;
                    if (g->kind == POOL_MAX) {
                        kstore(gat(&o, n, c, oy, ox), o.dt, m);
                        idx_out[((n * g->c + c) * g->oh + oy) * g->ow + ox] =
                            best;
                    } else {
                        bool empty = y1 <= y0 || x1 <= x0 || dy * dx <= 0;
                        kstore(gat(&o, n, c, oy, ox), o.dt,
                               empty ? 0 : acc / (double)(dy * dx));
                    }
                }
}

/* Pool geometry from the kit: attributes (max/avg) or output_size
 * (adaptive), the input x and the forward output (or dout); `grad` for
 * max_pool2d_grad's, which is the planes only. */
static keel_status pool_geo(const keel_kernel_args *a, int kind, bool grad,
                            const keel_tensor_desc *x,
                            const keel_tensor_desc *o, struct pgeo *g)
{
    keel_kit_pool k;
    keel_kit_msg m;

    if (keel_kit_pool_geometry(a, grad && kind == POOL_MAX
                                      ? KEEL_KIT_POOL_INDEXED
                                      : kind,
                               x, o, &k, &m))
        return cpu_err(KEEL_STATUS_INVALID_ARGUMENT, "%s", m.text);
    memset(g, 0, sizeof(*g));
    g->kind = kind;
    g->n = k.n, g->c = k.c, g->h = k.h, g->w = k.w, g->oh = k.oh;
    g->ow = k.ow, g->kh = k.kh, g->kw = k.kw, g->sh = k.sh, g->sw = k.sw;
    g->pt = k.pad[0], g->pb = k.pad[1], g->pl = k.pad[2], g->pr = k.pad[3];
    g->exclusive = k.exclusive;
    return KEEL_STATUS_OK;
}

/* What the kit leaves to this plugin: contiguous outputs (out and
 * max_pool2d's indices are written in place, a half out unpacked). */
static keel_status pool_check(const keel_kernel_args *a, const char *op,
                              int kind)
{
    struct pgeo g;
    keel_status st = pool_geo(a, kind, false, &a->inputs[0], &a->outputs[0],
                              &g);

    return st ? st : outputs_contiguous(a, op);
}

static keel_status max_pool_check(const keel_kernel_args *a)
{
    return pool_check(a, "max_pool2d", POOL_MAX);
}

static keel_status avg_pool_check(const keel_kernel_args *a)
{
    return pool_check(a, "avg_pool2d", POOL_AVG);
}

static keel_status adaptive_check(const keel_kernel_args *a)
{
    return pool_check(a, "adaptive_avg_pool2d", POOL_ADAPTIVE);
}

/* Forward pooling: stage a half input to f32 (f32/f64 are read in place
 * through their strides) and a half output. */
static void pool_fwd(const struct kcall *k, int kind)
{
    const keel_kernel_args *a = k->a;
    const keel_tensor_desc *xd = &a->inputs[0], *od = &a->outputs[0];
    struct buf xb, ob;
    struct pgeo g;
    struct prun r;
    char *ws = NULL, *p;
    size_t bytes;

    pool_geo(a, kind, false, xd, od, &g);
    if (knumel(od) == 0)
        return;
    memset(&r, 0, sizeof(r));
    bytes = buf_plan(&ob, od, k->out[0], true);
    bytes += is_half(xd->dtype) ? buf_plan(&xb, xd, k->in[0], false) : 0;
    if (bytes) {
        ws = cpu_workspace(bytes);
        if (!ws) {
            pool_direct(&g, xd, k->in[0], NULL, NULL, od, k->out[0],
                        kind == POOL_MAX ? k->out[1] : NULL, false);
            return;
        }
    }
    p = buf_bind(&ob, ws);
    if (is_half(xd->dtype)) {
        buf_bind(&xb, p);
        r.x = xb.data;
        contig_strides(xd, r.xs);
    } else {
        r.x = k->in[0];
        memcpy(r.xs, xd->strides, sizeof(r.xs));
    }
    r.g = &g;
    r.f64 = xd->dtype == KEEL_F64;
    r.out = ob.data;
    r.idx = kind == POOL_MAX ? k->out[1] : NULL;
    pool_run(&r);
    buf_finish(&ob);
    free(ws);
}

static void max_pool_impl(const struct kcall *k)
{
    pool_fwd(k, POOL_MAX);
}

static void avg_pool_impl(const struct kcall *k)
{
    pool_fwd(k, POOL_AVG);
}

static void adaptive_impl(const struct kcall *k)
{
    pool_fwd(k, POOL_ADAPTIVE);
}

/* Grads: (x, dout) or (x, indices, dout) -> dx. */
static keel_status pool_grad_check(const keel_kernel_args *a, const char *op,
                                   int kind)
{
    struct pgeo g;
    keel_status st = pool_geo(a, kind, true, &a->inputs[0],
                              &a->inputs[a->num_inputs - 1], &g);

    return st ? st : outputs_contiguous(a, op);
}

static keel_status max_grad_check(const keel_kernel_args *a)
{
    return pool_grad_check(a, "max_pool2d_grad", POOL_MAX);
}

static keel_status avg_grad_check(const keel_kernel_args *a)
{
    return pool_grad_check(a, "avg_pool2d_grad", POOL_AVG);
}

static keel_status adaptive_grad_check(const keel_kernel_args *a)
{
    return pool_grad_check(a, "adaptive_avg_pool2d_grad", POOL_ADAPTIVE);
}

static void pool_grad(const struct kcall *k, int kind)
{
    const keel_kernel_args *a = k->a;
    int nin = kind == POOL_MAX ? 3 : 2;
    const keel_tensor_desc *xd = &a->inputs[0], *dd = &a->inputs[nin - 1];
    const keel_tensor_desc *od = &a->outputs[0];
    const keel_tensor_desc *id = kind == POOL_MAX ? &a->inputs[1] : NULL;
    struct buf db, ob;
    struct pgeo g;
    struct prun r;
    char *ws = NULL, *p;
    size_t bytes;

    pool_geo(a, kind, true, xd, dd, &g);
    if (knumel(od) == 0)
        return;
    memset(&r, 0, sizeof(r));
    bytes = buf_plan(&ob, od, k->out[0], true);
    bytes += is_half(dd->dtype) ? buf_plan(&db, dd, k->in[nin - 1], false)
                                : 0;
    if (bytes) {
        ws = cpu_workspace(bytes);
        if (!ws) {
            pool_direct(&g, dd, k->in[nin - 1], id,
                        id ? k->in[1] : NULL, od, k->out[0], NULL, true);
            return;
        }
    }
    p = buf_bind(&ob, ws);
    if (is_half(dd->dtype)) {
        buf_bind(&db, p);
        r.x = db.data;
        contig_strides(dd, r.xs);
    } else {
        r.x = k->in[nin - 1];
        memcpy(r.xs, dd->strides, sizeof(r.xs));
    }
    if (id) {
        r.iidx = k->in[1];
        memcpy(r.is, id->strides, sizeof(r.is));
    }
    r.g = &g;
    r.f64 = xd->dtype == KEEL_F64;
    r.out = ob.data;
    r.grad = true;
    pool_run(&r);
    buf_finish(&ob);
    free(ws);
}

static void max_grad_impl(const struct kcall *k)
{
    pool_grad(k, POOL_MAX);
}

static void avg_grad_impl(const struct kcall *k)
{
    pool_grad(k, POOL_AVG);
}

static void adaptive_grad_impl(const struct kcall *k)
{
    pool_grad(k, POOL_ADAPTIVE);
}

KERNEL(k_max_pool, "max_pool2d", max_pool_impl, max_pool_check)
KERNEL(k_avg_pool, "avg_pool2d", avg_pool_impl, avg_pool_check)
KERNEL(k_adaptive, "adaptive_avg_pool2d", adaptive_impl, adaptive_check)
KERNEL(k_max_grad, "max_pool2d_grad", max_grad_impl, max_grad_check)
KERNEL(k_avg_grad, "avg_pool2d_grad", avg_grad_impl, avg_grad_check)
KERNEL(k_adaptive_grad, "adaptive_avg_pool2d_grad", adaptive_grad_impl,
       adaptive_grad_check)

const struct cpu_kernel_entry cpu_kernels_conv[] = {
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
