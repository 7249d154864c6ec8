/* keel OpenCL C kernels: conv family (see common.cl; host: k_conv.c).
 *
 * Convolutions run in a compute dtype (float32, or float64 for float64):
 * float16/bfloat16 operands are packed to float32 first (cv_pack) and the
 * float32 results stored back (cv_unpack). The GEMMs are linalg.cl's;
 * here are the data movements around them:
 *
 *   cv_im2col   x (any strides) -> col, element (img, r, p) at
 *               img * cs_n + r * cs_r + p, r = (c * kh + i) * kw + j over
 *               all C channels, p = oy * ow + ox
 *   cv_col2im   the reverse, as a gather: each dx element sums its taps
 *               (+ bias of its channel), so no atomics and a fixed order
 *   cv_chsum    per channel sum over N, H, W (a bias gradient), one work
 *               group of 256 per channel
 *
 * Conv geometry `g` (struct kdesc): shape = n, c, h, w, o, oh, ow, groups;
 * stride = kh, kw, sh, sw, dh, dw, pad top, pad left (the conv2d view: x
 * [n, c, h, w] is the big side, [n, o, oh, ow] the small one).
 *
 * Pooling (any float dtype, read through strides, one work item per
 * output element or dx element; max_pool2d_grad one per plane): pool
 * geometry `pg`: shape = n, c, h, w, oh, ow, kh, kw; stride = sh, sw, pad
 * top, bottom, left, right, exclusive, kind (0 max, 1 avg, 2 adaptive).
 */

/* ---- packing ------------------------------------------------------------- */

/* dst[i] (compute type, contiguous) = src[base + kd_off(sd, i)]. */
#define CV_PACK(s)                                                           \
    __kernel void cv_pack_##s(BUF(src), long base, kdesc sd, BUF(dst),      \
                              long n)                                        \
    {                                                                        \
        long i = get_global_id(0);                                           \
        if (i >= n)                                                          \
            return;                                                          \
        PTR(A_##s, dst)[i] = (A_##s)LD_##s(PTR(S_##s, src) + base,           \
                                           kd_off(&sd, i));                  \
    }
FOR_FLOAT(CV_PACK)

/* dst[i] = src[i] (float32, contiguous) rounded to a half dtype. */
#define CV_UNPACK(s)                                                         \
    __kernel void cv_unpack_##s(BUF(src), BUF(dst), long n)                  \
    {                                                                        \
        long i = get_global_id(0);                                           \
        if (i >= n)                                                          \
            return;                                                          \
        ST_##s(PTR(S_##s, dst), i, PTR(float, src)[i]);                      \
    }
CV_UNPACK(f16)
CV_UNPACK(bf16)

/* ---- im2col, col2im, channel sums (compute dtypes) ----------------------- */

#define CV_CONV(s)                                                           \
    /* 3-D launch: (ox, oy, r + rows * img) */                             \
    __kernel void cv_im2col_##s(BUF(x), long xbase, kdesc xd, kdesc g,       \
                                long nimg, long cs_n, long cs_r, BUF(col))   \
    {                                                                        \
        const long H = g.shape[2], W = g.shape[3];                           \
        const long oh = g.shape[5], ow = g.shape[6];                         \
        const long kh = g.stride[0], kw = g.stride[1];                       \
        const long rows = g.shape[1] * kh * kw;                              \
        const long ox = get_global_id(0), oy = get_global_id(1);             \
        const long z = get_global_id(2);                                     \
        if (ox >= ow || oy >= oh || z >= nimg * rows)                        \
            return;                                                          \
        const long r = z % rows, img = z / rows;                             \
        const long kj = r % kw, ki = (r / kw) % kh, c = r / (kw * kh);       \
        const long iy = oy * g.stride[2] - g.stride[6] + ki * g.stride[4];   \
        const long ix = ox * g.stride[3] - g.stride[7] + kj * g.stride[5];   \
        S_##s v = (S_##s)0;                                                  \
        if (iy >= 0 && iy < H && ix >= 0 && ix < W)                          \
            v = PTR(S_##s, x)[xbase + img * xd.stride[0] +                   \
                              c * xd.stride[1] + iy * xd.stride[2] +         \
                              ix * xd.stride[3]];                            \
        PTR(S_##s, col)[img * cs_n + r * cs_r + oy * ow + ox] = v;           \
    }                                                                        \
                                                                             \
    /* dx[dxbase + ((img * C + c) * H + iy) * W + ix], contiguous; 3-D      \
     * launch: (ix, iy, c + C * img). */                                    \
    __kernel void cv_col2im_##s(BUF(col), kdesc g, long nimg, long cs_n,     \
                                long cs_r, BUF(bias), long bs, int has_bias, \
                                BUF(dx), long dxbase)                        \
    {                                                                        \
        const long C = g.shape[1], H = g.shape[2], W = g.shape[3];           \
        const long oh = g.shape[5], ow = g.shape[6];                         \
        const long kh = g.stride[0], kw = g.stride[1];                       \
        const long sh = g.stride[2], sw = g.stride[3];                       \
        const long dh = g.stride[4], dw = g.stride[5];                       \
        const long pt = g.stride[6], pl = g.stride[7];                       \
        const long ix = get_global_id(0), iy = get_global_id(1);             \
        const long z = get_global_id(2);                                     \
        if (ix >= W || iy >= H || z >= nimg * C)                             \
            return;                                                          \
        const long c = z % C, img = z / C;                                   \
        const __global S_##s *cp = PTR(S_##s, col) + img * cs_n;             \
        S_##s acc = has_bias ? PTR(S_##s, bias)[c * bs] : (S_##s)0;          \
        for (long ki = 0; ki < kh; ki++) {                                   \
            long ty = iy + pt - ki * dh, oy = ty;                            \
            if (ty < 0)                                                      \
                continue;                                                    \
            if (sh != 1) {                                                   \
                if (ty % sh)                                                 \
                    continue;                                                \
                oy = ty / sh;                                                \
            }                                                                \
            if (oy >= oh)                                                    \
                continue;                                                    \
            for (long kj = 0; kj < kw; kj++) {                               \
                long tx = ix + pl - kj * dw, ox = tx;                        \
                if (tx < 0)                                                  \
                    continue;                                                \
                if (sw != 1) {                                               \
                    if (tx % sw)                                             \
                        continue;                                            \
                    ox = tx / sw;                                            \
                }                                                            \
                if (ox >= ow)                                                \
                    continue;                                                \
                acc += cp[((c * kh + ki) * kw + kj) * cs_r + oy * ow + ox];  \
            }                                                                \
        }                                                                    \
        PTR(S_##s, dx)[dxbase + (z * H + iy) * W + ix] = acc;                \
    }                                                                        \
                                                                             \
    /* out[c] = sum over n, y, x of t[base + n*s0 + c*s1 + y*s2 + x*s3]     \
     * (td: shape and strides of t); work groups of 256, one per c. */      \
    __kernel __attribute__((reqd_work_group_size(256, 1, 1))) void          \
        cv_chsum_##s(BUF(t), long base, kdesc td, BUF(out))                  \
    {                                                                        \
        __local S_##s part[256];                                             \
        const long c = get_group_id(0);                                      \
        const int lid = get_local_id(0);                                     \
        const long N = td.shape[0], H = td.shape[2], W = td.shape[3];        \
        const long per = N * H * W;                                          \
        const __global S_##s *tp = PTR(S_##s, t) + base + c * td.stride[1];  \
        S_##s acc = (S_##s)0;                                                \
        for (long e = lid; e < per; e += 256) {                              \
            long x = e % W, q = e / W;                                       \
            long y = q % H, n = q / H;                                       \
            acc += tp[n * td.stride[0] + y * td.stride[2] +                  \
                      x * td.stride[3]];                                     \
        }                                                                    \
        part[lid] = acc;                                                     \
        barrier(CLK_LOCAL_MEM_FENCE);                                        \
        for (int h = 128; h > 0; h >>= 1) {                                  \
            if (lid < h)                                                     \
                part[lid] += part[lid + h];                                  \
            barrier(CLK_LOCAL_MEM_FENCE);                                    \
        }                                                                    \
        if (lid == 0)                                                        \
            PTR(S_##s, out)[c] = part[0];                                    \
    }

CV_CONV(f32)
#ifdef KEEL_HAS_FP64
CV_CONV(f64)
#endif

/* ---- pooling -------------------------------------------------------------- */

/* Window of output o along dim (0 rows, 1 columns): [*a, *b) inside the
 * input, *div the count the average divides by. */
static inline void cv_win(const kdesc *g, int dim, long o, long *a, long *b,
                          long *div)
{
    long in = dim ? g->shape[3] : g->shape[2];
    long out = dim ? g->shape[5] : g->shape[4];
    long k = dim ? g->shape[7] : g->shape[6];
    long s = dim ? g->stride[1] : g->stride[0];
    long p0 = dim ? g->stride[4] : g->stride[2];
    long p1 = dim ? g->stride[5] : g->stride[3];
    long lo, hi;

    if (g->stride[7] == 2) {
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
    if (g->stride[6])
        *div = *b - *a;
}

/* The outputs along dim whose windows may hold input index i: [*lo, *hi). */
static inline void cv_outs(const kdesc *g, int dim, long i, long *lo,
                           long *hi)
{
    long in = dim ? g->shape[3] : g->shape[2];
    long out = dim ? g->shape[5] : g->shape[4];
    long k = dim ? g->shape[7] : g->shape[6];
    long s = dim ? g->stride[1] : g->stride[0];
    long p0 = dim ? g->stride[4] : g->stride[2];
    long a, b;

    if (g->stride[7] == 2) {
        a = i * out / in - 1;
        b = (i + 1) * out / in + 2;
    } else {
        long t = i + p0 - k + 1;
        a = t <= 0 ? 0 : (t + s - 1) / s;
        b = (i + p0) / s + 1;
    }
    *lo = a < 0 ? 0 : a;
    *hi = b > out ? out : b;
}

#define CV_POOL(s)                                                           \
    /* max_pool2d, avg_pool2d, adaptive_avg_pool2d: one work item per      \
     * output; idx written for max only. */                                  \
    __kernel void cv_pool_##s(BUF(x), kdesc xd, kdesc pg, BUF(out),          \
                              BUF(idx), long total)                          \
    {                                                                        \
        long i = get_global_id(0);                                           \
        if (i >= total)                                                      \
            return;                                                          \
        const long C = pg.shape[1], W = pg.shape[3];                         \
        const long oh = pg.shape[4], ow = pg.shape[5];                       \
        long ox = i % ow, t = i / ow;                                        \
        long oy = t % oh;                                                    \
        t /= oh;                                                             \
        long c = t % C, n = t / C;                                           \
        long y0, y1, dy, x0, x1, dx;                                         \
        cv_win(&pg, 0, oy, &y0, &y1, &dy);                                   \
        cv_win(&pg, 1, ox, &x0, &x1, &dx);                                   \
        const __global S_##s *xp =                                           \
            PTR(S_##s, x) + n * xd.stride[0] + c * xd.stride[1];             \
        if (pg.stride[7] == 0) {                                             \
            A_##s m = (A_##s)(-INFINITY);                                    \
            long best = -1;                                                  \
            for (long iy = y0; iy < y1; iy++)                                \
                for (long ix = x0; ix < x1; ix++) {                          \
                    A_##s v = (A_##s)LD_##s(                                 \
                        xp, iy * xd.stride[2] + ix * xd.stride[3]);          \
                    if (v > m || best < 0 || (isnan(v) && !isnan(m))) {      \
                        m = v;                                               \
                        best = iy * W + ix;                                  \
                    }                                                        \
                }                                                            \
            ST_##s(PTR(S_##s, out), i, m);                                   \
            PTR(long, idx)[i] = best;                                        \
            return;                                                          \
        }                                                                    \
        A_##s acc = (A_##s)0;                                                \
        for (long iy = y0; iy < y1; iy++)                                    \
            for (long ix = x0; ix < x1; ix++)                                \
                acc += (A_##s)LD_##s(xp,                                     \
                                     iy * xd.stride[2] + ix * xd.stride[3]); \
        if (pg.stride[7] == 1 && (dy * dx <= 0 || y1 <= y0 || x1 <= x0))     \
            acc = (A_##s)0;                                                  \
        else                                                                 \
            acc = acc / (A_##s)(dy * dx);                                    \
        ST_##s(PTR(S_##s, out), i, acc);                                     \
    }                                                                        \
                                                                             \
    /* avg_pool2d_grad, adaptive_avg_pool2d_grad: one work item per dx     \
     * element, its windows in output order. */                             \
    __kernel void cv_avg_grad_##s(BUF(d), kdesc dd, kdesc pg, BUF(dxo),      \
                                  long total)                                \
    {                                                                        \
        long i = get_global_id(0);                                           \
        if (i >= total)                                                      \
            return;                                                          \
        const long C = pg.shape[1], H = pg.shape[2], W = pg.shape[3];        \
        long ix = i % W, t = i / W;                                          \
        long iy = t % H;                                                     \
        t /= H;                                                              \
        long c = t % C, n = t / C;                                           \
        long oy0, oy1, ox0, ox1;                                             \
        cv_outs(&pg, 0, iy, &oy0, &oy1);                                     \
        cv_outs(&pg, 1, ix, &ox0, &ox1);                                     \
        const __global S_##s *dp =                                           \
            PTR(S_##s, d) + n * dd.stride[0] + c * dd.stride[1];             \
        A_##s acc = (A_##s)0;                                                \
        for (long oy = oy0; oy < oy1; oy++) {                                \
            long y0, y1, dy;                                                 \
            cv_win(&pg, 0, oy, &y0, &y1, &dy);                               \
            if (iy < y0 || iy >= y1)                                         \
                continue;                                                    \
            for (long ox = ox0; ox < ox1; ox++) {                            \
                long x0, x1, dv;                                             \
                cv_win(&pg, 1, ox, &x0, &x1, &dv);                           \
                if (ix < x0 || ix >= x1 || dy * dv <= 0)                     \
                    continue;                                                \
                acc += (A_##s)LD_##s(dp, oy * dd.stride[2] +                 \
                                             ox * dd.stride[3]) /            \
                       (A_##s)(dy * dv);                                     \
            }                                                                \
        }                                                                    \
        ST_##s(PTR(S_##s, dxo), i, acc);                                     \
    }                                                                        \
                                                                             \
    /* max_pool2d_grad: one work item per plane; dx (compute type,         \
     * contiguous) zeroed, then dout added at each index in output order.   \
     * Indices outside the plane are skipped. */                             \
    __kernel void cv_max_grad_##s(BUF(d), kdesc dd, BUF(ix), kdesc id,       \
                                  kdesc pg, BUF(dxo), long planes)           \
    {                                                                        \
        long p = get_global_id(0);                                           \
        if (p >= planes)                                                     \
            return;                                                          \
        const long C = pg.shape[1], hw = pg.shape[2] * pg.shape[3];          \
        const long oh = pg.shape[4], ow = pg.shape[5];                       \
        long n = p / C, c = p % C;                                           \
        __global A_##s *dx = PTR(A_##s, dxo) + p * hw;                       \
        const __global S_##s *dp =                                           \
            PTR(S_##s, d) + n * dd.stride[0] + c * dd.stride[1];             \
        const __global long *ip =                                            \
            PTR(long, ix) + n * id.stride[0] + c * id.stride[1];             \
        for (long e = 0; e < hw; e++)                                        \
            dx[e] = (A_##s)0;                                                \
        for (long oy = 0; oy < oh; oy++)                                     \
            for (long ox = 0; ox < ow; ox++) {                               \
                long k = ip[oy * id.stride[2] + ox * id.stride[3]];          \
                if (k >= 0 && k < hw)                                        \
                    dx[k] += (A_##s)LD_##s(dp, oy * dd.stride[2] +           \
                                                   ox * dd.stride[3]);       \
            }                                                                \
    }

FOR_FLOAT(CV_POOL)
