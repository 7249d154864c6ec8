/*
 * The body of the direct float32 convolution, for one vector width
 * (k_conv_simd.c describes the method). Included once per instruction set
 * by k_conv_simd_avx512.c and k_conv_simd_avx2.c, which define:
 *
 *   CS_ENTRY      the entry point's name (cpu_conv_simd_avx512, ...)
 *   CS_VL         floats per vector: 16 (AVX-512) or 8 (AVX2)
 *   CS_TARGET     the target attribute string ("avx512f", "avx2,fma")
 *   CS_RA, CS_RB  the two row-block heights of forward and backward data
 *   CS_SIX        1: blocks of 6 channels x CS_RA rows exist
 *   CS_BWDF_KW4   the widest kernel whose bwd_filter block takes 4 output
 *                 channels
 *
 * Register budgets set the block sizes: a block keeps B channels x R rows
 * of accumulators, R row vectors and one broadcast weight live at once, so
 * with AVX-512's 32 registers B x R goes up to 6 x 4 and 4 x 5; with
 * AVX2's 16, up to 4 x 3 and 2 x 5 would fit, and 4 x 2 / 4 x 3 are used.
 *
 * Lanes are described by bit masks (bit l: lane l) wherever the blocks are
 * planned; each ISA turns them into its own mask operand once per job
 * (V_MASK): an opmask register for AVX-512, a vector of all-ones lanes for
 * AVX2's maskload/maskstore, which neither read nor write masked lanes.
 */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "kconv_simd.h"
#include "kern.h"

#define VL CS_VL
/* UndefinedBehaviorSanitizer is off in these bodies: its checks of the
 * row pointer arithmetic of the unrolled blocks made LeNet's training
 * three times slower under the sanitizers (146 s against 47 s for
 * core-train-lenet) and the examples' tests time out. AddressSanitizer
 * still checks every load and store, masked lanes included. */
#define NO_UBSAN __attribute__((no_sanitize("undefined")))
#define TGT __attribute__((target(CS_TARGET))) NO_UBSAN
#define INL                                                                    \
    static inline __attribute__((always_inline, target(CS_TARGET))) NO_UBSAN

#if CS_VL == 16
#define VEC __m512
#define MASKV __mmask16
#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOADU(p) _mm512_loadu_ps(p)
#define V_LOAD(p) _mm512_load_ps(p)
#define V_STORE(p, v) _mm512_store_ps(p, v)
#define V_MLOADU(m, p) _mm512_maskz_loadu_ps(m, p)
#define V_MSTOREU(p, m, v) _mm512_mask_storeu_ps(p, m, v)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_ADD(a, b) _mm512_add_ps(a, b)
#define V_MASK(bits) ((__mmask16)(bits))

INL float v_reduce_lanes(unsigned bits, __m512 v)
{
    return _mm512_mask_reduce_add_ps((__mmask16)bits, v);
}
#elif CS_VL == 8
#define VEC __m256
#define MASKV __m256i
#define V_ZERO() _mm256_setzero_ps()
#define V_SET1(x) _mm256_set1_ps(x)
#define V_LOADU(p) _mm256_loadu_ps(p)
#define V_LOAD(p) _mm256_load_ps(p)
#define V_STORE(p, v) _mm256_store_ps(p, v)
#define V_MLOADU(m, p) _mm256_maskload_ps(p, m)
#define V_MSTOREU(p, m, v) _mm256_maskstore_ps(p, m, v)
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_ADD(a, b) _mm256_add_ps(a, b)
#define V_MASK(bits) mask_of(bits)

/* Lane l all ones where bit l of bits is set. */
INL __m256i mask_of(unsigned bits)
{
    const __m256i lane = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);

    return _mm256_cmpeq_epi32(
        _mm256_and_si256(_mm256_set1_epi32((int)bits), lane), lane);
}

INL float v_reduce_lanes(unsigned bits, __m256 v)
{
    float l[8], sum = 0;

    _mm256_storeu_ps(l, v);
    for (int i = 0; i < 8; i++)
        if (bits & (1u << i))
            sum += l[i];
    return sum;
}
#else
#error "CS_VL must be 16 or 8"
#endif

#define KW_MAX 7
#define NCH_MAX (128 / VL) /* vectors per row: rows up to 128 columns */

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
           s->kw <= KW_MAX && s->ow <= VL * NCH_MAX &&
           s->w <= VL * NCH_MAX && s->og <= 32 && s->cg * s->taps <= 256 &&
           s->pt >= 0 && s->pl >= 0 && s->pt < s->kh && s->pl < s->kw;
}

/* Lanes l of a vector whose column base + l lies in [lo, hi). */
static uint16_t span_mask(int64_t base, int64_t lo, int64_t hi)
{
    int64_t a = lo - base, b = hi - base;

    a = a < 0 ? 0 : a > VL ? VL : a;
    b = b < 0 ? 0 : b > VL ? VL : b;
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



struct job {
    struct sg s;
    const float *x, *bias, *dy;
    float *out;
    const float *wp;  /* repacked weights (fwd, bwd_data) */
    float *acc;       /* bwd_filter: parts x o*cg*taps vectors of VL */
    int64_t parts;
    const float *xend, *dyend;     /* one past the last element */
    bool unmasked;                 /* no horizontal padding: see below */
    int nch;                       /* vectors per row */
    int rows;                      /* row vectors per block: 4 or 5 */
    uint16_t lm[NCH_MAX][KW_MAX];  /* load masks per (vector, tap column) */
    uint16_t sm[NCH_MAX];          /* store / row masks per vector */
    MASKV lmv[NCH_MAX][KW_MAX];    /* the same as the ISA's mask operands */
    MASKV smv[NCH_MAX];
    void (*epi)(const void *ctx, float *y, int64_t n); /* fwd: per image */
    const void *epi_ctx;
};

/* A row of zeros that stands in for rows outside the tensor (padding, or
 * past the last row of a block), so that a block's loads all take the
 * same mask. Read at column offsets in [-KW_MAX, VL * NCH_MAX). */
static const float zrow_[KW_MAX + VL * NCH_MAX + KW_MAX];
#define ZROW (zrow_ + KW_MAX)

/* Rows for a block of n rows and nchan channels: CS_RA when the
 * channels take blocks of 6 (only those of CS_RA rows fit the
 * registers), else blocks of CS_RA or CS_RB rows, whichever leaves fewer
 * dead rows (AVX-512 on LeNet: 28 = 7 x 4, 10 = 2 x 5). */
static int pick_rows(int64_t n, int64_t nchan)
{
    int64_t da = (CS_RA - n % CS_RA) % CS_RA, db = (CS_RB - n % CS_RB) % CS_RB;

#if CS_SIX
    if (nchan >= 6 && nchan % 4)
        return CS_RA;
#else
    (void)nchan;
#endif
    return db < da ? CS_RB : CS_RA;
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
    VEC acc[6][5];

#pragma GCC unroll 8
    for (int b = 0; b < B; b++) {
        VEC bv = bg ? V_SET1(bg[cb + b]) : V_ZERO();
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
            row[r] = (ok ? in + iy * d->in_w : ZROW) + v * VL - S * s->pl;
            step[r] = ok ? d->in_plane : 0;
            any |= ok;
        }
        if (!any)
            continue;
        for (int64_t c = 0; c < d->nsum; c++) {
            const float *wc = wg + ((c * s->kh + i) * s->kw) * d->nout + cb;
            for (int64_t j = 0; j < s->kw; j++) {
                MASKV m = J->lmv[v][j];
                VEC xv[5];
#pragma GCC unroll 8
                for (int r = 0; r < R; r++)
                    xv[r] = U ? V_LOADU(row[r] + S * j)
                              : V_MLOADU(m, row[r] + S * j);
#pragma GCC unroll 8
                for (int b = 0; b < B; b++) {
                    VEC wv = V_SET1(wc[j * d->nout + b]);
#pragma GCC unroll 8
                    for (int r = 0; r < R; r++)
                        acc[b][r] = V_FMA(wv, xv[r], acc[b][r]);
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
            V_MSTOREU(out + (cb + b) * d->out_plane +
                                      (y0 + r) * d->out_w + v * VL,
                                  J->smv[v], acc[b][r]);
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
/* T names the row count: a for CS_RA rows, b for CS_RB. */
#define FWD_FNS(T, R, U)                                                       \
    BLK_FN(fwd_4_##T##_##U, 4, R, U, 1)                                        \
    BLK_FN(fwd_2_##T##_##U, 2, R, U, 1)                                        \
    BLK_FN(fwd_1_##T##_##U, 1, R, U, 1)
#define BWD_FNS(T, R)                                                          \
    BLK_FN(bwd_4_##T, 4, R, 0, -1)                                             \
    BLK_FN(bwd_2_##T, 2, R, 0, -1)                                             \
    BLK_FN(bwd_1_##T, 1, R, 0, -1)
FWD_FNS(a, CS_RA, 0)
FWD_FNS(b, CS_RB, 0)
FWD_FNS(a, CS_RA, 1)
FWD_FNS(b, CS_RB, 1)
BWD_FNS(a, CS_RA)
BWD_FNS(b, CS_RB)
#if CS_SIX
BLK_FN(fwd_6_a_0, 6, CS_RA, 0, 1)
BLK_FN(fwd_6_a_1, 6, CS_RA, 1, 1)
BLK_FN(bwd_6_a, 6, CS_RA, 0, -1)
#define FWD6_0 fwd_6_a_0
#define FWD6_1 fwd_6_a_1
#define BWD6 bwd_6_a
#else
#define FWD6_0 NULL
#define FWD6_1 NULL
#define BWD6 NULL
#endif

/* [rows == CS_RB][0: 4 channels, 1: 2, 2: 1, 3: 6 (CS_RA rows only:
 * 6 x CS_RB accumulators would not leave registers for the loads)] */
static const blk_fn fwd_table[2][2][4] = { /* [unmasked] first */
    {{fwd_4_a_0, fwd_2_a_0, fwd_1_a_0, FWD6_0},
     {fwd_4_b_0, fwd_2_b_0, fwd_1_b_0, NULL}},
    {{fwd_4_a_1, fwd_2_a_1, fwd_1_a_1, FWD6_1},
     {fwd_4_b_1, fwd_2_b_1, fwd_1_b_1, NULL}}};
static const blk_fn bwd_table[2][4] = {
    {bwd_4_a, bwd_2_a, bwd_1_a, BWD6}, {bwd_4_b, bwd_2_b, bwd_1_b, NULL}};

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
    /* An unmasked load reads up to VL + kw - 1 columns from a row's
     * first vector on: past the group's last plane by at most that. */
    const int64_t over = (J->nch - 1) * VL + s->kw - 1 + VL - s->w;

    for (int64_t n = n0; n < n1; n++) {
        for (int64_t gi = 0; gi < s->g; gi++) {
            const float *xg = J->x + (n * s->c + gi * s->cg) * s->hw;
            bool u = J->unmasked && xg + s->cg * s->hw + over <= J->xend;
            run_blocks(J, &d, fwd_table[u][J->rows == CS_RB], xg,
                       J->out + (n * s->o + gi * s->og) * s->ohw,
                       J->wp + gi * s->cg * s->taps * s->og,
                       J->bias ? J->bias + gi * s->og : NULL);
        }
        if (J->epi)
            J->epi(J->epi_ctx, J->out + n * s->o * s->ohw, s->o * s->ohw);
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
            run_blocks(J, &d, bwd_table[J->rows == CS_RB],
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
 * acc points at the group's vectors, [o/g][c/g][kh][kw] x VL floats; xg
 * and dyg at the group's planes of image n0. */
INL void bwd_filter_block(const struct job *J, int B, int KW, bool U,
                          const float *xg, const float *dyg, float *acc,
                          int64_t n0, int64_t n1, int64_t ob, int64_t ci,
                          int64_t i)
{
    const struct sg *s = &J->s;
    VEC a[4][KW_MAX];
    float *ap[4];
    const int64_t oy0 = s->pt - i > 0 ? s->pt - i : 0;
    const int64_t oy1 = s->h + s->pt - i < s->oh ? s->h + s->pt - i : s->oh;
    const int64_t xstep = s->c * s->hw, dstep = s->o * s->ohw;

#pragma GCC unroll 8
    for (int b = 0; b < B; b++) {
        ap[b] = acc + ((((ob + b) * s->cg + ci) * s->kh + i) * s->kw) * VL;
#pragma GCC unroll 8
        for (int j = 0; j < KW; j++)
            a[b][j] = V_LOAD(ap[b] + j * VL);
    }
    for (int v = 0; v < J->nch; v++) {
        MASKV dm = J->smv[v], xm[KW_MAX];
#pragma GCC unroll 8
        for (int j = 0; j < KW; j++)
            xm[j] = J->lmv[v][j];
        for (int64_t n = n0; n < n1; n++) {
            const float *xr = xg + (n - n0) * xstep + ci * s->hw +
                              (oy0 - s->pt + i) * s->w - s->pl + v * VL;
            const float *dr = dyg + (n - n0) * dstep + ob * s->ohw +
                              oy0 * s->ow + v * VL;
            for (int64_t oy = oy0; oy < oy1; oy++) {
                VEC d[4];
#pragma GCC unroll 8
                for (int b = 0; b < B; b++)
                    d[b] = U ? V_LOADU(dr + b * s->ohw)
                             : V_MLOADU(dm, dr + b * s->ohw);
#pragma GCC unroll 8
                for (int j = 0; j < KW; j++) {
                    VEC xv = U ? V_LOADU(xr + j)
                                  : V_MLOADU(xm[j], xr + j);
#pragma GCC unroll 8
                    for (int b = 0; b < B; b++)
                        a[b][j] = V_FMA(d[b], xv, a[b][j]);
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
            V_STORE(ap[b] + j * VL, a[b][j]);
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
#if CS_BWDF_KW4 == 5
#define BWDF_ALL(U)                                                            \
    BWDF_KW(1, U)                                                              \
    BWDF_KW(2, U)                                                              \
    BWDF_KW(3, U)                                                              \
    BWDF_KW(4, U)                                                              \
    BWDF_KW(5, U)                                                              \
    BWDF_WIDE(6, U)                                                            \
    BWDF_WIDE(7, U)
#define B4_3(U) bwdf_4_3_##U
#define B4_4(U) bwdf_4_4_##U
#define B4_5(U) bwdf_4_5_##U
#elif CS_BWDF_KW4 == 2
#define BWDF_ALL(U)                                                            \
    BWDF_KW(1, U)                                                              \
    BWDF_KW(2, U)                                                              \
    BWDF_WIDE(3, U)                                                            \
    BWDF_WIDE(4, U)                                                            \
    BWDF_WIDE(5, U)                                                            \
    BWDF_WIDE(6, U)                                                            \
    BWDF_WIDE(7, U)
#define B4_3(U) bwdf_2_3_##U
#define B4_4(U) bwdf_2_4_##U
#define B4_5(U) bwdf_2_5_##U
#else
#error "CS_BWDF_KW4 must be 5 or 2"
#endif
BWDF_ALL(0)
BWDF_ALL(1)

typedef void (*bwdf_fn)(const struct job *, const float *, const float *,
                        float *, int64_t, int64_t, int64_t, int64_t, int64_t);

/* [unmasked][kw - 1][0: widest block, 1: 2 channels, 2: 1]. Blocks of 4
 * channels x kw taps take kernels up to CS_BWDF_KW4 wide: wider ones
 * would not leave registers for the loads (32 of them with AVX-512, 16
 * with AVX2), so their widest block is 2 channels. */
#define BWDF_ROWS(U)                                                           \
    {                                                                          \
        {bwdf_4_1_##U, bwdf_2_1_##U, bwdf_1_1_##U},                            \
            {bwdf_4_2_##U, bwdf_2_2_##U, bwdf_1_2_##U},                        \
            {B4_3(U), bwdf_2_3_##U, bwdf_1_3_##U},                             \
            {B4_4(U), bwdf_2_4_##U, bwdf_1_4_##U},                             \
            {B4_5(U), bwdf_2_5_##U, bwdf_1_5_##U},                             \
            {bwdf_2_6_##U, bwdf_2_6_##U, bwdf_1_6_##U},                        \
            {bwdf_2_7_##U, bwdf_2_7_##U, bwdf_1_7_##U},                        \
    }
static const bwdf_fn bwdf_table[2][KW_MAX][3] = {BWDF_ROWS(0), BWDF_ROWS(1)};

static void bwd_filter_part(void *ctx, int64_t p0, int64_t p1)
{
    const struct job *J = ctx;
    const struct sg *s = &J->s;
    const int64_t wide = s->kw > CS_BWDF_KW4 ? 2 : 4;
    /* Unmasked loads read up to VL + kw - 1 columns from a row's start:
     * past a plane by at most these many elements. */
    const int64_t xover = VL + s->kw - 1 - s->w, dover = VL - s->ow;
    const int64_t per = s->o * s->cg * s->taps * VL;

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
                float *ag = acc + gi * s->og * s->cg * s->taps * VL;
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
    const unsigned lanes = J->nch == 1 ? J->sm[0] : (1u << VL) - 1;

    for (int64_t k = 0; k < nw; k++) {
        VEC v = V_LOAD(J->acc + k * VL);
        for (int64_t p = 1; p < J->parts; p++)
            v = V_ADD(v, V_LOAD(J->acc + (p * nw + k) * VL));
        J->out[k] = v_reduce_lanes(lanes, v);
    }
}

/* ---- driver -------------------------------------------------------------- */

TGT static void job_masks(struct job *J, int64_t cols, int64_t src_cols,
                          int64_t shift_sign)
{
    const struct sg *s = &J->s;

    J->nch = (int)((cols + VL - 1) / VL);
    for (int v = 0; v < J->nch; v++) {
        J->sm[v] = span_mask(v * VL, 0, cols);
        for (int64_t j = 0; j < s->kw; j++)
            /* lane l reads source column v*VL + l + shift_sign*(j - pl) */
            J->lm[v][j] =
                J->sm[v] &
                span_mask(v * VL + shift_sign * (j - s->pl), 0, src_cols);
        J->smv[v] = V_MASK(J->sm[v]);
        for (int64_t j = 0; j < s->kw; j++)
            J->lmv[v][j] = V_MASK(J->lm[v][j]);
    }
}

bool CS_ENTRY(int prim, const struct conv_simd_geo *g, const float *x,
              const float *w, const float *bias, const float *dy, float *out)
{
    struct job J;
    struct sg *s = &J.s;
    char *ws;
    size_t wbytes, abytes = 0;
    int64_t macs, grain;
    bool nopad;

    memset(&J, 0, sizeof(J));
    if (!simd_wanted(g, s))
        return false;
    J.x = x, J.bias = bias, J.dy = dy, J.out = out;
    if (prim == CONV_SIMD_FWD)
        J.epi = g->epilogue, J.epi_ctx = g->epilogue_ctx;
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
        abytes = (size_t)J.parts * wbytes * VL;
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
        J.unmasked = nopad && (J.nch == 1 || s->ow % VL == 0);
        cpu_parallel_for(J.parts, 1, bwd_filter_part, &J);
        bwd_filter_reduce(&J);
    }
    free(ws);
    return true;
}

