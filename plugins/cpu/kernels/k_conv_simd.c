/*
 * Direct AVX-512 convolution for small float32 convolutions.
 *
 * With few channels (LeNet's 1 -> 6 and 6 -> 16, 5x5) the per-image GEMMs
 * of im2col + GEMM are too small for a BLAS to run well, and building the
 * column matrix (im2col) and scattering it back (col2im) costs as much as
 * the GEMMs. These primitives compute the sums directly from the NCHW
 * tensors instead, vectorized along an image row: a vector holds 16
 * consecutive output (or input) columns, and each kernel tap (i, j) is one
 * masked, shifted load of a row times a broadcast scalar. Lanes whose
 * column lies in the padding or past the row are masked out of the loads,
 * so nothing outside the tensors is read, and the sums take exactly the
 * terms the definition has (no 0 * inf from a column that does not exist;
 * rows wholly in the padding are skipped, as their terms are zero).
 *
 * Masked loads cost time, though (a third on LeNet's second layer, whose
 * 10-column rows use 10 of 16 lanes). Without horizontal padding every
 * real output column reads real input columns, so forward and
 * bwd_filter load whole vectors instead: forward never stores the other
 * lanes; bwd_filter, when each lane is always or never a real column,
 * leaves those lanes' junk out of the final sum. Images whose loads could
 * run past the end of a tensor take the masked loads.
 *
 *   fwd          y[o][oy][ox..] = b[o] + sum_{c,i,j} w[o][c][i][j] *
 *                                 x[c][oy+i-pt][ox+j-pl ..]
 *                blocks of 4 output channels x 4 or 5 row vectors, or
 *                6 x 4, in registers
 *   bwd_data     dx[c][iy][ix..] = b[c] + sum_{o,i,j} w[o][c][i][j] *
 *                                  dy[o][iy+pt-i][ix+pl-j ..]
 *                the same blocks over input channels
 *   bwd_filter   dw[o][c][i][j] = sum_{n,oy,ox} dy[o][oy][ox] *
 *                                 x[c][oy+i-pt][ox+j-pl]
 *                one vector of partial sums per weight, B channels x kw taps
 *                in registers while a row pair streams by; the 16 lanes
 *                are added up once, at the end of the batch
 *
 * Where they apply: stride 1, dilation 1, kw <= 7, rows up to 128 wide,
 * padding smaller than the kernel, and small enough layers (per group: o/g <= 32 and (c/g)*kh*kw <= 256)
 * that GEMMs would be small; a CPU with AVX-512F; KEEL_CPU_CONV_SIMD not
 * set to 0 (the switch the tests use to compare both paths). Images are
 * shared over the plugin's pool; bwd_filter gives each share its own
 * partial sums and adds them at the end.
 *
 * Summation order differs from the GEMM path (float32 throughout), so the
 * two agree to rounding, not bit for bit.
 */
#include <stdlib.h>
#include <string.h>

#include "kconv_simd.h"
#include "kern.h"

#define KW_MAX 7
#define NCH_MAX 8 /* vectors per row: rows up to 128 columns */

struct sg {
    int64_t n, c, h, w, o, oh, ow, kh, kw, pt, pl, g;
    int64_t cg, og, hw, ohw, taps; /* taps = kh * kw */
};

static bool simd_wanted(const struct conv_simd_geo *in, struct sg *s)
{
    const char *e = cpu_getenv("KEEL_CPU_CONV_SIMD");

    if (e && !strcmp(e, "0"))
        return false;
    if (in->groups < 1 || in->c % in->groups || in->o % in->groups)
        return false;
    s->n = in->n, s->c = in->c, s->h = in->h, s->w = in->w;
    s->o = in->o, s->oh = in->oh, s->ow = in->ow;
    s->kh = in->kh, s->kw = in->kw, s->pt = in->pt, s->pl = in->pl;
    s->g = in->groups;
    s->cg = s->c / s->g, s->og = s->o / s->g;
    s->hw = s->h * s->w, s->ohw = s->oh * s->ow, s->taps = s->kh * s->kw;
    return s->n > 0 && s->cg > 0 && s->og > 0 && s->oh > 0 && s->ow > 0 &&
           s->h > 0 && s->w > 0 && s->kh > 0 && s->kw > 0 &&
           s->kw <= KW_MAX && s->ow <= 16 * NCH_MAX &&
           s->w <= 16 * NCH_MAX && s->og <= 32 && s->cg * s->taps <= 256 &&
           s->pt >= 0 && s->pl >= 0 && s->pt < s->kh && s->pl < s->kw;
}

/* Lanes l of a vector whose column base + l lies in [lo, hi). */
static uint16_t span_mask(int64_t base, int64_t lo, int64_t hi)
{
    int64_t a = lo - base, b = hi - base;

    a = a < 0 ? 0 : a > 16 ? 16 : a;
    b = b < 0 ? 0 : b > 16 ? 16 : b;
    if (a >= b)
        return 0;
    return (uint16_t)(((1u << b) - 1u) & ~((1u << a) - 1u));
}

/* Images [n0, n1) of a batch of n shared into `parts` parts. */
static void share(int64_t n, int64_t parts, int64_t p, int64_t *n0,
                  int64_t *n1)
{
    *n0 = n * p / parts;
    *n1 = n * (p + 1) / parts;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define TGT __attribute__((target("avx512f")))
#define INL static inline __attribute__((always_inline, target("avx512f")))

struct job {
    struct sg s;
    const float *x, *bias, *dy;
    float *out;
    const float *wp;  /* repacked weights (fwd, bwd_data) */
    float *acc;       /* bwd_filter: parts x o*cg*taps vectors of 16 */
    int64_t parts;
    const float *xend, *dyend;     /* one past the last element */
    bool unmasked;                 /* no horizontal padding: see below */
    int nch;                       /* vectors per row */
    int rows;                      /* row vectors per block: 4 or 5 */
    uint16_t lm[NCH_MAX][KW_MAX];  /* load masks per (vector, tap column) */
    uint16_t sm[NCH_MAX];          /* store / row masks per vector */
};

/* A row of zeros that stands in for rows outside the tensor (padding, or
 * past the last row of a block), so that a block's loads all take the
 * same mask. Read at column offsets in [-KW_MAX, 16 * NCH_MAX). */
static const float zrow_[KW_MAX + 16 * NCH_MAX + KW_MAX];
#define ZROW (zrow_ + KW_MAX)

/* Rows for a block of n rows and nchan channels: 4 when the channels
 * take blocks of 6 (only those of 4 rows fit the registers), else blocks
 * of 4 or of 5 rows, whichever leaves fewer dead rows (LeNet: 28 = 7 x 4,
 * 10 = 2 x 5). */
static int pick_rows(int64_t n, int64_t nchan)
{
    int64_t d4 = (4 - n % 4) % 4, d5 = (5 - n % 5) % 5;

    if (nchan >= 6 && nchan % 4)
        return 4;
    return d5 < d4 ? 5 : 4;
}

/* ---- forward and backward data ------------------------------------------- */

/*
 * Both are sums of shifted rows times broadcast weights, mirror images of
 * each other; S = +1 is the forward, S = -1 backward data:
 *
 *   forward        out = y,  in = x:  in row  = out row + (i - pt),
 *                  in column = out column + (j - pl), summing the c/g
 *                  input channels, weights repacked [g][c/g][kh][kw][o/g]
 *   backward data  out = dx, in = dy: in row  = out row - (i - pt),
 *                  in column = out column - (j - pl), summing the o/g
 *                  output channels, weights repacked [g][o/g][kh][kw][c/g]
 *
 * struct rside holds the side's sizes.
 */
struct rside {
    int64_t nsum, nout;             /* channels summed / produced (a group) */
    int64_t in_h, in_w, in_plane;   /* rows read */
    int64_t out_h, out_w, out_plane; /* rows written */
};

/* Output rows [y0, y0 + R) of vector column v, channels [cb, cb + B), of
 * one image and group; rows outside the input read the zero row. */
INL void row_block(const struct job *J, const struct rside *d, int B, int R,
                   bool U, int S, const float *in, float *out,
                   const float *wg, const float *bg, int64_t cb, int64_t y0,
                   int v)
{
    const struct sg *s = &J->s;
    __m512 acc[6][5];

#pragma GCC unroll 8
    for (int b = 0; b < B; b++) {
        __m512 bv = bg ? _mm512_set1_ps(bg[cb + b]) : _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            acc[b][r] = bv;
    }
    for (int64_t i = 0; i < s->kh; i++) {
        const float *row[5];
        int64_t step[5];
        bool any = false;
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            int64_t y = y0 + r, iy = y + S * (i - s->pt);
            bool ok = y < d->out_h && iy >= 0 && iy < d->in_h;
            row[r] = (ok ? in + iy * d->in_w : ZROW) + v * 16 - S * s->pl;
            step[r] = ok ? d->in_plane : 0;
            any |= ok;
        }
        if (!any)
            continue;
        for (int64_t c = 0; c < d->nsum; c++) {
            const float *wc = wg + ((c * s->kh + i) * s->kw) * d->nout + cb;
            for (int64_t j = 0; j < s->kw; j++) {
                __mmask16 m = J->lm[v][j];
                __m512 xv[5];
#pragma GCC unroll 8
                for (int r = 0; r < R; r++)
                    xv[r] = U ? _mm512_loadu_ps(row[r] + S * j)
                              : _mm512_maskz_loadu_ps(m, row[r] + S * j);
#pragma GCC unroll 8
                for (int b = 0; b < B; b++) {
                    __m512 wv = _mm512_set1_ps(wc[j * d->nout + b]);
#pragma GCC unroll 8
                    for (int r = 0; r < R; r++)
                        acc[b][r] = _mm512_fmadd_ps(wv, xv[r], acc[b][r]);
                }
            }
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                row[r] += step[r];
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        if (y0 + r >= d->out_h)
            break;
#pragma GCC unroll 8
        for (int b = 0; b < B; b++)
            _mm512_mask_storeu_ps(out + (cb + b) * d->out_plane +
                                      (y0 + r) * d->out_w + v * 16,
                                  J->sm[v], acc[b][r]);
    }
}

typedef void (*blk_fn)(const struct job *, const struct rside *,
                       const float *, float *, const float *, const float *,
                       int64_t, int64_t, int);

/* fwd_B_R_U (S = +1) and bwd_B_R (S = -1, masked loads only) */
#define BLK_FN(NAME, B, R, U, S)                                               \
    TGT static void NAME(const struct job *J, const struct rside *d,           \
                         const float *in, float *out, const float *wg,         \
                         const float *bg, int64_t cb, int64_t y0, int v)       \
    {                                                                          \
        row_block(J, d, B, R, U, S, in, out, wg, bg, cb, y0, v);               \
    }
#define FWD_FNS(R, U)                                                          \
    BLK_FN(fwd_4_##R##_##U, 4, R, U, 1)                                        \
    BLK_FN(fwd_2_##R##_##U, 2, R, U, 1)                                        \
    BLK_FN(fwd_1_##R##_##U, 1, R, U, 1)
#define BWD_FNS(R)                                                             \
    BLK_FN(bwd_4_##R, 4, R, 0, -1)                                             \
    BLK_FN(bwd_2_##R, 2, R, 0, -1)                                             \
    BLK_FN(bwd_1_##R, 1, R, 0, -1)
FWD_FNS(4, 0)
FWD_FNS(5, 0)
FWD_FNS(4, 1)
FWD_FNS(5, 1)
BLK_FN(fwd_6_4_0, 6, 4, 0, 1)
BLK_FN(fwd_6_4_1, 6, 4, 1, 1)
BWD_FNS(4)
BWD_FNS(5)
BLK_FN(bwd_6_4, 6, 4, 0, -1)

/* [rows == 5][0: 4 channels, 1: 2, 2: 1, 3: 6 (4 rows only: 6 x 5
 * accumulators would not leave registers for the loads)] */
static const blk_fn fwd_table[2][2][4] = { /* [unmasked] first */
    {{fwd_4_4_0, fwd_2_4_0, fwd_1_4_0, fwd_6_4_0},
     {fwd_4_5_0, fwd_2_5_0, fwd_1_5_0, NULL}},
    {{fwd_4_4_1, fwd_2_4_1, fwd_1_4_1, fwd_6_4_1},
     {fwd_4_5_1, fwd_2_5_1, fwd_1_5_1, NULL}}};
static const blk_fn bwd_table[2][4] = {
    {bwd_4_4, bwd_2_4, bwd_1_4, bwd_6_4}, {bwd_4_5, bwd_2_5, bwd_1_5, NULL}};

/* Channel blocks over every (vector, row block): 6 at a time where that
 * leaves fewer blocks than 4 at a time would (LeNet's 6 channels: one
 * pass over the input rows instead of two), then 4, 2 and 1. */
static void run_blocks(const struct job *J, const struct rside *d,
                       const blk_fn *fn, const float *in, float *out,
                       const float *wg, const float *bg)
{
    const int64_t n = d->nout;

    for (int v = 0; v < J->nch; v++)
        for (int64_t y0 = 0; y0 < d->out_h; y0 += J->rows) {
            int64_t cb = 0;
            for (; fn[3] && n % 4 && cb + 6 <= n; cb += 6)
                fn[3](J, d, in, out, wg, bg, cb, y0, v);
            for (; cb + 4 <= n; cb += 4)
                fn[0](J, d, in, out, wg, bg, cb, y0, v);
            for (; cb + 2 <= n; cb += 2)
                fn[1](J, d, in, out, wg, bg, cb, y0, v);
            for (; cb < n; cb++)
                fn[2](J, d, in, out, wg, bg, cb, y0, v);
        }
}

static void fwd_images(void *ctx, int64_t n0, int64_t n1)
{
    const struct job *J = ctx;
    const struct sg *s = &J->s;
    const struct rside d = {s->cg, s->og, s->h, s->w, s->hw,
                            s->oh, s->ow, s->ohw};
    /* An unmasked load reads up to 16 + kw - 1 columns from a row's
     * first vector on: past the group's last plane by at most that. */
    const int64_t over = (J->nch - 1) * 16 + s->kw - 1 + 16 - s->w;

    for (int64_t n = n0; n < n1; n++)
        for (int64_t gi = 0; gi < s->g; gi++) {
            const float *xg = J->x + (n * s->c + gi * s->cg) * s->hw;
            bool u = J->unmasked && xg + s->cg * s->hw + over <= J->xend;
            run_blocks(J, &d, fwd_table[u][J->rows == 5], xg,
                       J->out + (n * s->o + gi * s->og) * s->ohw,
                       J->wp + gi * s->cg * s->taps * s->og,
                       J->bias ? J->bias + gi * s->og : NULL);
        }
}

static void bwd_data_images(void *ctx, int64_t n0, int64_t n1)
{
    const struct job *J = ctx;
    const struct sg *s = &J->s;
    const struct rside d = {s->og, s->cg, s->oh, s->ow, s->ohw,
                            s->h,  s->w,  s->hw};

    for (int64_t n = n0; n < n1; n++)
        for (int64_t gi = 0; gi < s->g; gi++)
            run_blocks(J, &d, bwd_table[J->rows == 5],
                       J->dy + (n * s->o + gi * s->og) * s->ohw,
                       J->out + (n * s->c + gi * s->cg) * s->hw,
                       J->wp + gi * s->og * s->taps * s->cg,
                       J->bias ? J->bias + gi * s->cg : NULL);
}

/* ---- backward filter ---------------------------------------------------- */

/* Images handled per pass of a bwd_filter block: enough work to pay for
 * loading and storing the block's partial sums, little enough data
 * (dy rows of the block's channels, one x plane) to stay in cache. */
#define FILTER_IMAGES 8

/* Partial sums of dw[oc][ci][i][0 .. KW) for output channels [ob, ob + B)
 * of one group over images [n0, n1): the dy rows of the B channels times
 * the KW shifted x rows, over every output row whose input row exists.
 * acc points at the group's vectors, [o/g][c/g][kh][kw] x 16 floats; xg
 * and dyg at the group's planes of image n0. */
INL void bwd_filter_block(const struct job *J, int B, int KW, bool U,
                          const float *xg, const float *dyg, float *acc,
                          int64_t n0, int64_t n1, int64_t ob, int64_t ci,
                          int64_t i)
{
    const struct sg *s = &J->s;
    __m512 a[4][KW_MAX];
    float *ap[4];
    const int64_t oy0 = s->pt - i > 0 ? s->pt - i : 0;
    const int64_t oy1 = s->h + s->pt - i < s->oh ? s->h + s->pt - i : s->oh;
    const int64_t xstep = s->c * s->hw, dstep = s->o * s->ohw;

#pragma GCC unroll 8
    for (int b = 0; b < B; b++) {
        ap[b] = acc + ((((ob + b) * s->cg + ci) * s->kh + i) * s->kw) * 16;
#pragma GCC unroll 8
        for (int j = 0; j < KW; j++)
            a[b][j] = _mm512_load_ps(ap[b] + j * 16);
    }
    for (int v = 0; v < J->nch; v++) {
        __mmask16 dm = J->sm[v], xm[KW_MAX];
#pragma GCC unroll 8
        for (int j = 0; j < KW; j++)
            xm[j] = J->lm[v][j];
        for (int64_t n = n0; n < n1; n++) {
            const float *xr = xg + (n - n0) * xstep + ci * s->hw +
                              (oy0 - s->pt + i) * s->w - s->pl + v * 16;
            const float *dr = dyg + (n - n0) * dstep + ob * s->ohw +
                              oy0 * s->ow + v * 16;
            for (int64_t oy = oy0; oy < oy1; oy++) {
                __m512 d[4];
#pragma GCC unroll 8
                for (int b = 0; b < B; b++)
                    d[b] = U ? _mm512_loadu_ps(dr + b * s->ohw)
                             : _mm512_maskz_loadu_ps(dm, dr + b * s->ohw);
#pragma GCC unroll 8
                for (int j = 0; j < KW; j++) {
                    __m512 xv = U ? _mm512_loadu_ps(xr + j)
                                  : _mm512_maskz_loadu_ps(xm[j], xr + j);
#pragma GCC unroll 8
                    for (int b = 0; b < B; b++)
                        a[b][j] = _mm512_fmadd_ps(d[b], xv, a[b][j]);
                }
                xr += s->w;
                dr += s->ow;
            }
        }
    }
#pragma GCC unroll 8
    for (int b = 0; b < B; b++)
#pragma GCC unroll 8
        for (int j = 0; j < KW; j++)
            _mm512_store_ps(ap[b] + j * 16, a[b][j]);
}

#define BWDF_FN(B, KW, U)                                                      \
    TGT static void bwdf_##B##_##KW##_##U(                                     \
        const struct job *J, const float *xg, const float *dyg, float *acc,    \
        int64_t n0, int64_t n1, int64_t ob, int64_t ci, int64_t i)             \
    {                                                                          \
        bwd_filter_block(J, B, KW, U, xg, dyg, acc, n0, n1, ob, ci, i);        \
    }
#define BWDF_KW(KW, U) BWDF_FN(4, KW, U) BWDF_FN(2, KW, U) BWDF_FN(1, KW, U)
#define BWDF_WIDE(KW, U) BWDF_FN(2, KW, U) BWDF_FN(1, KW, U)
#define BWDF_ALL(U)                                                            \
    BWDF_KW(1, U)                                                              \
    BWDF_KW(2, U)                                                              \
    BWDF_KW(3, U)                                                              \
    BWDF_KW(4, U)                                                              \
    BWDF_KW(5, U)                                                              \
    BWDF_WIDE(6, U)                                                            \
    BWDF_WIDE(7, U)
BWDF_ALL(0)
BWDF_ALL(1)

typedef void (*bwdf_fn)(const struct job *, const float *, const float *,
                        float *, int64_t, int64_t, int64_t, int64_t, int64_t);

/* [unmasked][kw - 1][0: widest block, 1: 2 channels, 2: 1]; 4 x 6 and
 * 4 x 7 accumulators would not leave registers for the loads, so the
 * widest block of a 6 or 7 wide kernel is 2 channels. */
#define BWDF_ROWS(U)                                                           \
    {                                                                          \
        {bwdf_4_1_##U, bwdf_2_1_##U, bwdf_1_1_##U},                            \
            {bwdf_4_2_##U, bwdf_2_2_##U, bwdf_1_2_##U},                        \
            {bwdf_4_3_##U, bwdf_2_3_##U, bwdf_1_3_##U},                        \
            {bwdf_4_4_##U, bwdf_2_4_##U, bwdf_1_4_##U},                        \
            {bwdf_4_5_##U, bwdf_2_5_##U, bwdf_1_5_##U},                        \
            {bwdf_2_6_##U, bwdf_2_6_##U, bwdf_1_6_##U},                        \
            {bwdf_2_7_##U, bwdf_2_7_##U, bwdf_1_7_##U},                        \
    }
static const bwdf_fn bwdf_table[2][KW_MAX][3] = {BWDF_ROWS(0), BWDF_ROWS(1)};

static void bwd_filter_part(void *ctx, int64_t p0, int64_t p1)
{
    const struct job *J = ctx;
    const struct sg *s = &J->s;
    const int64_t wide = s->kw > 5 ? 2 : 4;
    /* Unmasked loads read up to 16 + kw - 1 columns from a row's start:
     * past a plane by at most these many elements. */
    const int64_t xover = 16 + s->kw - 1 - s->w, dover = 16 - s->ow;
    const int64_t per = s->o * s->cg * s->taps * 16;

    for (int64_t p = p0; p < p1; p++) {
        float *acc = J->acc + p * per;
        int64_t n0, n1;
        memset(acc, 0, (size_t)per * sizeof(float));
        share(s->n, J->parts, p, &n0, &n1);
        for (int64_t m0 = n0; m0 < n1; m0 += FILTER_IMAGES) {
            int64_t m1 = m0 + FILTER_IMAGES < n1 ? m0 + FILTER_IMAGES : n1;
            for (int64_t gi = 0; gi < s->g; gi++) {
                const float *xg = J->x + (m0 * s->c + gi * s->cg) * s->hw;
                const float *dyg = J->dy + (m0 * s->o + gi * s->og) * s->ohw;
                float *ag = acc + gi * s->og * s->cg * s->taps * 16;
                const float *xl = xg + (m1 - 1 - m0) * s->c * s->hw;
                const float *dl = dyg + (m1 - 1 - m0) * s->o * s->ohw;
                bool u = J->unmasked &&
                         xl + s->cg * s->hw + xover <= J->xend &&
                         dl + s->og * s->ohw + dover <= J->dyend;
                const bwdf_fn *fn = bwdf_table[u][s->kw - 1];
                for (int64_t ci = 0; ci < s->cg; ci++)
                    for (int64_t i = 0; i < s->kh; i++) {
                        int64_t ob = 0;
                        for (; ob + wide <= s->og; ob += wide)
                            fn[0](J, xg, dyg, ag, m0, m1, ob, ci, i);
                        for (; ob + 2 <= s->og; ob += 2)
                            fn[1](J, xg, dyg, ag, m0, m1, ob, ci, i);
                        for (; ob < s->og; ob++)
                            fn[2](J, xg, dyg, ag, m0, m1, ob, ci, i);
                    }
            }
        }
    }
}

/* dw[k] = the lanes of every part's vector k, added up: the lanes of
 * real columns only, as unmasked blocks leave junk in the others. */
TGT static void bwd_filter_reduce(const struct job *J)
{
    const struct sg *s = &J->s;
    const int64_t nw = s->o * s->cg * s->taps;
    const __mmask16 lanes = J->nch == 1 ? J->sm[0] : 0xffff;

    for (int64_t k = 0; k < nw; k++) {
        __m512 v = _mm512_load_ps(J->acc + k * 16);
        for (int64_t p = 1; p < J->parts; p++)
            v = _mm512_add_ps(v, _mm512_load_ps(J->acc + (p * nw + k) * 16));
        J->out[k] = _mm512_mask_reduce_add_ps(lanes, v);
    }
}

/* ---- driver -------------------------------------------------------------- */

static void job_masks(struct job *J, int64_t cols, int64_t src_cols,
                      int64_t shift_sign)
{
    const struct sg *s = &J->s;

    J->nch = (int)((cols + 15) / 16);
    for (int v = 0; v < J->nch; v++) {
        J->sm[v] = span_mask(v * 16, 0, cols);
        for (int64_t j = 0; j < s->kw; j++)
            /* lane l reads source column v*16 + l + shift_sign*(j - pl) */
            J->lm[v][j] =
                J->sm[v] &
                span_mask(v * 16 + shift_sign * (j - s->pl), 0, src_cols);
    }
}

bool cpu_conv_simd(int prim, const struct conv_simd_geo *g, const float *x,
                   const float *w, const float *bias, const float *dy,
                   float *out)
{
    struct job J;
    struct sg *s = &J.s;
    char *ws;
    size_t wbytes, abytes = 0;
    int64_t macs, grain;
    bool nopad;

    memset(&J, 0, sizeof(J));
    if (!simd_wanted(g, s) || !__builtin_cpu_supports("avx512f"))
        return false;
    J.x = x, J.bias = bias, J.dy = dy, J.out = out;
    J.xend = x ? x + s->n * s->c * s->hw : NULL;
    J.dyend = dy ? dy + s->n * s->o * s->ohw : NULL;
    wbytes = (size_t)(s->o * s->cg * s->taps) * sizeof(float);
    macs = s->o * s->ohw * s->cg * s->taps;
    grain = macs > 0 && macs < (1 << 20) ? (1 << 20) / macs : 1;
    /* Without horizontal padding every real output column reads real
     * input columns: whole-vector loads can do (J.unmasked). */
    nopad = s->pl == 0 && s->ow + s->kw - 1 == s->w;
    if (prim == CONV_SIMD_BWD_FILTER) {
        int64_t threads = cpu_pool_threads();
        J.parts = threads < s->n ? threads : s->n;
        if (J.parts < 1)
            J.parts = 1;
        abytes = (size_t)J.parts * wbytes * 16;
    }
    ws = cpu_workspace(wbytes + abytes + 64);
    if (!ws)
        return false;
    if (prim == CONV_SIMD_FWD) {
        /* w [g][og][cg][kh][kw] -> [g][cg][kh][kw][og] */
        float *wp = (float *)ws;
        for (int64_t gi = 0; gi < s->g; gi++)
            for (int64_t oc = 0; oc < s->og; oc++)
                for (int64_t k = 0; k < s->cg * s->taps; k++)
                    wp[(gi * s->cg * s->taps + k) * s->og + oc] =
                        w[(gi * s->og + oc) * s->cg * s->taps + k];
        J.wp = wp;
        job_masks(&J, s->ow, s->w, 1);
        J.rows = pick_rows(s->oh, s->og);
        J.unmasked = nopad; /* the other lanes are never stored */
        cpu_parallel_for(s->n, grain, fwd_images, &J);
    } else if (prim == CONV_SIMD_BWD_DATA) {
        /* w [g][og][cg][kh][kw] -> [g][og][kh][kw][cg] */
        float *wp = (float *)ws;
        for (int64_t gi = 0; gi < s->g; gi++)
            for (int64_t oc = 0; oc < s->og; oc++)
                for (int64_t ci = 0; ci < s->cg; ci++)
                    for (int64_t t = 0; t < s->taps; t++)
                        wp[((gi * s->og + oc) * s->taps + t) * s->cg + ci] =
                            w[((gi * s->og + oc) * s->cg + ci) * s->taps + t];
        J.wp = wp;
        /* dx lane ix reads dy column ix + pl - j */
        job_masks(&J, s->w, s->ow, -1);
        J.rows = pick_rows(s->h, s->cg);
        cpu_parallel_for(s->n, grain, bwd_data_images, &J);
    } else {
        uintptr_t a = ((uintptr_t)ws + 63) & ~(uintptr_t)63;
        J.acc = (float *)a;
        job_masks(&J, s->ow, s->w, 1);
        /* And a lane is either always a real column (the only vector, or
         * rows of whole vectors) or never one, so that the final sum can
         * leave out the junk of unmasked loads. */
        J.unmasked = nopad && (J.nch == 1 || s->ow % 16 == 0);
        cpu_parallel_for(J.parts, 1, bwd_filter_part, &J);
        bwd_filter_reduce(&J);
    }
    free(ws);
    return true;
}

#else /* no AVX-512 code on this compiler / architecture */

bool cpu_conv_simd(int prim, const struct conv_simd_geo *g, const float *x,
                   const float *w, const float *bias, const float *dy,
                   float *out)
{
    (void)prim, (void)g, (void)x, (void)w, (void)bias, (void)dy, (void)out;
    return false;
}

#endif
