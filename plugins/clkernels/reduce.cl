/* keel OpenCL C kernels: reduce family (see common.cl).
 *
 * REDUCTIONS (red_<sfx>). The host splits x's dims into kept dims (one
 * output each, row-major: the output index) and reduced dims, size-1 dims
 * dropped and mergeable neighbours merged; kk and kr hold their shapes and
 * x's strides. A work-group of RED_WG items serves RED_WG >> lg outputs,
 * 2^lg lanes each: every lane strides through the reduced index space,
 * then a __local tree combines the lanes. Ops that need a first result
 * (argmax: the extreme; var: the mean; logsumexp: the maximum) run a
 * second pass over the same elements after it. Floats accumulate in
 * double when the device has it (float otherwise), integers in 64-bit
 * two's complement (wrapping). max/min propagate NaN; argmax/argmin give
 * the first NaN, else the first index of the extreme.
 *
 * SOFTMAX family (red_softmax_<sfx>): the same lanes along one axis: the
 * maximum, the exp-sum, then the outputs (grads: one sum, the outputs).
 *
 * CUMSUM (red_cumsum_<sfx>): one line per 2^lg lanes, each lane a chunk:
 * chunk totals, their exclusive scan in __local, then every chunk from its
 * carry.
 *
 * SORT (red_sort_*): each element becomes a 64-bit unsigned key whose
 * order is the value order (NaN largest, -0 == +0; descending: the key
 * complemented) and its index along the axis; pairs are ordered by key,
 * then index: a strict total order, so the result is the stable sort.
 * Blocks of RED_SB pairs are sorted in __local (bitonic), then runs are
 * merged in global memory, every element placing itself by a binary
 * search in the other run. Values are copied from x at the sorted indices.
 */

#define RED_WG 256
#define RED_SB 256

#define RED_SUM 0
#define RED_MEAN 1
#define RED_MAX 2
#define RED_MIN 3
#define RED_PROD 4
#define RED_ARGMAX 5
#define RED_ARGMIN 6
#define RED_VAR 7
#define RED_STD 8
#define RED_LSE 9
#define RED_ALL 10
#define RED_ANY 11

/* Accumulator of float32/float16/bfloat16 sums. */
#ifdef KEEL_HAS_FP64
#define RACC double
#else
#define RACC float
#endif
#define RA_f32 RACC
#define RA_f16 RACC
#define RA_bf16 RACC
#define RA_f64 double

static inline long red_off(const kdesc *d, long i)
{
    if (d->ndim == 0)
        return 0;
    if (d->ndim == 1)
        return i * d->stride[0];
    return kd_off(d, i);
}

/* ---- reductions -------------------------------------------------------- */

/* Tree over the 2^lg lanes of each segment of a[]; the segment's result
 * lands in its first slot. Every item of the group calls it. */
#define RED_TREE(a, lid, sub, lg, COMBINE)                                   \
    for (int s_ = (1 << (lg)) >> 1; s_ > 0; s_ >>= 1) {                      \
        if ((sub) < s_) {                                                    \
            COMBINE((a)[lid], (a)[(lid) + s_]);                              \
        }                                                                    \
        barrier(CLK_LOCAL_MEM_FENCE);                                        \
    }

#define RC_ADD(x, y) x = x + y
#define RC_MUL(x, y) x = x * y
#define RC_MAXF(x, y) x = ((y) > (x) || isnan(y)) ? (y) : (x)
#define RC_MINF(x, y) x = ((y) < (x) || isnan(y)) ? (y) : (x)
#define RC_MAXI(x, y) x = (y) > (x) ? (y) : (x)
#define RC_MINI(x, y) x = (y) < (x) ? (y) : (x)

#define RED_FLOAT(sfx)                                                       \
    __kernel void red_##sfx(BUF(x), kdesc kk, kdesc kr, BUF(out), long nout, \
                            long nred, int op, int lg, int unbiased)         \
    {                                                                        \
        __local RA_##sfx sa[RED_WG];                                         \
        __local long si[RED_WG];                                             \
        __global const S_##sfx *xp = PTR(S_##sfx, x);                        \
        int lid = (int)get_local_id(0), L = 1 << lg;                         \
        int sub = lid & (L - 1), first = lid - sub;                          \
        long o = (long)get_group_id(0) * (RED_WG >> lg) + (lid >> lg);       \
        bool ok = o < nout;                                                  \
        long base = ok ? red_off(&kk, o) : 0;                                \
        long n = ok ? nred : 0;                                              \
        RA_##sfx acc;                                                        \
        long cnt = 0;                                                        \
        bool mx = op == RED_MAX || op == RED_ARGMAX || op == RED_LSE;        \
        bool mn = op == RED_MIN || op == RED_ARGMIN;                         \
        acc = op == RED_PROD ? (RA_##sfx)1                                   \
              : mx           ? (RA_##sfx)(-INFINITY)                         \
              : mn           ? (RA_##sfx)INFINITY                            \
                             : (RA_##sfx)0;                                  \
        for (long j = sub; j < n; j += L) {                                  \
            C_##sfx v = LD_##sfx(xp, base + red_off(&kr, j));                \
            RA_##sfx w = (RA_##sfx)v;                                        \
            if (op == RED_ALL || op == RED_ANY)                              \
                cnt += v != 0;                                               \
            else if (op == RED_PROD)                                         \
                acc *= w;                                                    \
            else if (mx)                                                     \
                RC_MAXF(acc, w);                                             \
            else if (mn)                                                     \
                RC_MINF(acc, w);                                             \
            else                                                             \
                acc += w;                                                    \
        }                                                                    \
        sa[lid] = acc;                                                       \
        si[lid] = cnt;                                                       \
        barrier(CLK_LOCAL_MEM_FENCE);                                        \
        if (op == RED_ALL || op == RED_ANY) {                                \
            RED_TREE(si, lid, sub, lg, RC_ADD)                               \
        } else if (op == RED_PROD) {                                         \
            RED_TREE(sa, lid, sub, lg, RC_MUL)                               \
        } else if (mx) {                                                     \
            RED_TREE(sa, lid, sub, lg, RC_MAXF)                              \
        } else if (mn) {                                                     \
            RED_TREE(sa, lid, sub, lg, RC_MINF)                              \
        } else {                                                             \
            RED_TREE(sa, lid, sub, lg, RC_ADD)                               \
        }                                                                    \
        RA_##sfx r1 = sa[first];                                             \
        cnt = si[first];                                                     \
        RA_##sfx r2 = 0;                                                     \
        long idx = LONG_MAX;                                                 \
        bool two = op == RED_ARGMAX || op == RED_ARGMIN || op == RED_VAR ||  \
                   op == RED_STD || op == RED_LSE;                           \
        if (two) {                                                           \
            RA_##sfx mean = r1 / (RA_##sfx)nred;                             \
            C_##sfx m = (C_##sfx)r1;                                         \
            bool arg = op == RED_ARGMAX || op == RED_ARGMIN;                 \
            bool skip = op == RED_LSE && (isnan(r1) || isinf(r1));           \
            acc = 0;                                                         \
            for (long j = sub; j < n && !skip; j += L) {                     \
                C_##sfx v = LD_##sfx(xp, base + red_off(&kr, j));            \
                if (arg) {                                                   \
                    if (isnan(m) ? isnan(v) : v == m) {                      \
                        idx = j;                                             \
                        break;                                               \
                    }                                                        \
                } else if (op == RED_LSE) {                                  \
                    acc += (RA_##sfx)exp(v - m);                             \
                } else {                                                     \
                    RA_##sfx d = (RA_##sfx)v - mean;                         \
                    acc += d * d;                                            \
                }                                                            \
            }                                                                \
            barrier(CLK_LOCAL_MEM_FENCE);                                    \
            sa[lid] = acc;                                                   \
            si[lid] = idx;                                                   \
            barrier(CLK_LOCAL_MEM_FENCE);                                    \
            if (arg) {                                                       \
                RED_TREE(si, lid, sub, lg, RC_MINI)                          \
            } else {                                                         \
                RED_TREE(sa, lid, sub, lg, RC_ADD)                           \
            }                                                                \
            r2 = sa[first];                                                  \
            idx = si[first];                                                 \
        }                                                                    \
        if (!ok || sub != 0)                                                 \
            return;                                                          \
        __global S_##sfx *op_ = PTR(S_##sfx, out);                           \
        RA_##sfx den = (RA_##sfx)(nred - (unbiased ? 1 : 0));                \
        switch (op) {                                                        \
        case RED_MEAN:                                                       \
            ST_##sfx(op_, o, r1 / (RA_##sfx)nred);                           \
            break;                                                           \
        case RED_ARGMAX:                                                     \
        case RED_ARGMIN:                                                     \
            PTR(long, out)[o] = idx;                                         \
            break;                                                           \
        case RED_VAR:                                                        \
            ST_##sfx(op_, o, den > 0 ? r2 / den : (RA_##sfx)NAN);            \
            break;                                                           \
        case RED_STD:                                                        \
            ST_##sfx(op_, o, den > 0 ? sqrt(r2 / den) : (RA_##sfx)NAN);      \
            break;                                                           \
        case RED_LSE:                                                        \
            ST_##sfx(op_, o,                                                 \
                     (isnan(r1) || isinf(r1)) ? r1 : r1 + log(r2));          \
            break;                                                           \
        case RED_ALL:                                                        \
            PTR(uchar, out)[o] = cnt == nred;                                \
            break;                                                           \
        case RED_ANY:                                                        \
            PTR(uchar, out)[o] = cnt != 0;                                   \
            break;                                                           \
        default: /* sum, prod, max, min */                                   \
            ST_##sfx(op_, o, r1);                                            \
            break;                                                           \
        }                                                                    \
    }

#define RED_INT(sfx)                                                         \
    __kernel void red_##sfx(BUF(x), kdesc kk, kdesc kr, BUF(out), long nout, \
                            long nred, int op, int lg, int unbiased)         \
    {                                                                        \
        __local long si[RED_WG];                                             \
        __global const S_##sfx *xp = PTR(S_##sfx, x);                        \
        int lid = (int)get_local_id(0), L = 1 << lg;                         \
        int sub = lid & (L - 1), first = lid - sub;                          \
        long o = (long)get_group_id(0) * (RED_WG >> lg) + (lid >> lg);       \
        bool ok = o < nout;                                                  \
        long base = ok ? red_off(&kk, o) : 0;                                \
        long n = ok ? nred : 0;                                              \
        bool mx = op == RED_MAX || op == RED_ARGMAX;                         \
        bool mn = op == RED_MIN || op == RED_ARGMIN;                         \
        ulong acc = op == RED_PROD ? 1UL                                     \
                    : mx           ? (ulong)LONG_MIN                         \
                    : mn           ? (ulong)LONG_MAX                         \
                                   : 0UL;                                    \
        (void)unbiased;                                                      \
        for (long j = sub; j < n; j += L) {                                  \
            long v = (long)LD_##sfx(xp, base + red_off(&kr, j));             \
            if (op == RED_ALL || op == RED_ANY)                              \
                acc += v != 0;                                               \
            else if (op == RED_PROD)                                         \
                acc *= (ulong)v;                                             \
            else if (mx)                                                     \
                acc = v > (long)acc ? (ulong)v : acc;                        \
            else if (mn)                                                     \
                acc = v < (long)acc ? (ulong)v : acc;                        \
            else                                                             \
                acc += (ulong)v;                                             \
        }                                                                    \
        si[lid] = (long)acc;                                                 \
        barrier(CLK_LOCAL_MEM_FENCE);                                        \
        if (op == RED_PROD) {                                                \
            for (int s_ = L >> 1; s_ > 0; s_ >>= 1) {                        \
                if (sub < s_)                                                \
                    si[lid] = (long)((ulong)si[lid] * (ulong)si[lid + s_]);  \
                barrier(CLK_LOCAL_MEM_FENCE);                                \
            }                                                                \
        } else if (mx) {                                                     \
            RED_TREE(si, lid, sub, lg, RC_MAXI)                              \
        } else if (mn) {                                                     \
            RED_TREE(si, lid, sub, lg, RC_MINI)                              \
        } else {                                                             \
            for (int s_ = L >> 1; s_ > 0; s_ >>= 1) {                        \
                if (sub < s_)                                                \
                    si[lid] = (long)((ulong)si[lid] + (ulong)si[lid + s_]);  \
                barrier(CLK_LOCAL_MEM_FENCE);                                \
            }                                                                \
        }                                                                    \
        long r1 = si[first];                                                 \
        long idx = LONG_MAX;                                                 \
        if (op == RED_ARGMAX || op == RED_ARGMIN) {                          \
            for (long j = sub; j < n; j += L) {                              \
                long v = (long)LD_##sfx(xp, base + red_off(&kr, j));         \
                if (v == r1) {                                               \
                    idx = j;                                                 \
                    break;                                                   \
                }                                                            \
            }                                                                \
            barrier(CLK_LOCAL_MEM_FENCE);                                    \
            si[lid] = idx;                                                   \
            barrier(CLK_LOCAL_MEM_FENCE);                                    \
            RED_TREE(si, lid, sub, lg, RC_MINI)                              \
            idx = si[first];                                                 \
        }                                                                    \
        if (!ok || sub != 0)                                                 \
            return;                                                          \
        switch (op) {                                                        \
        case RED_SUM:                                                        \
        case RED_ARGMAX:                                                     \
        case RED_ARGMIN:                                                     \
            PTR(long, out)[o] = op == RED_SUM ? r1 : idx;                    \
            break;                                                           \
        case RED_ALL:                                                        \
            PTR(uchar, out)[o] = r1 == nred;                                 \
            break;                                                           \
        case RED_ANY:                                                        \
            PTR(uchar, out)[o] = r1 != 0;                                    \
            break;                                                           \
        default: /* prod, max, min */                                        \
            ST_##sfx(PTR(S_##sfx, out), o, r1);                              \
            break;                                                           \
        }                                                                    \
    }

FOR_FLOAT(RED_FLOAT)
FOR_INT(RED_INT)
RED_INT(bool)

/* ---- softmax, log_softmax and their grads ----------------------------- */

#define SM_SOFTMAX 0
#define SM_LOG_SOFTMAX 1
#define SM_GRAD 2
#define SM_LOG_GRAD 3

/* Rows: kept dims of x (kx), of y (ky) and of out (ko); n elements along
 * the axis with strides sx, sy, so. y is dout for the grads (x is out). */
#define RED_SOFTMAX(sfx)                                                     \
    __kernel void red_softmax_##sfx(BUF(x), BUF(y), BUF(out), kdesc kx,      \
                                    kdesc ky, kdesc ko, long nrow, long n,   \
                                    long sx, long sy, long so, int op,       \
                                    int lg)                                  \
    {                                                                        \
        __local RA_##sfx sa[RED_WG];                                         \
        __global const S_##sfx *xp = PTR(S_##sfx, x);                        \
        __global const S_##sfx *yp = PTR(S_##sfx, y);                        \
        __global S_##sfx *opp = PTR(S_##sfx, out);                           \
        int lid = (int)get_local_id(0), L = 1 << lg;                         \
        int sub = lid & (L - 1), first = lid - sub;                          \
        long r = (long)get_group_id(0) * (RED_WG >> lg) + (lid >> lg);       \
        bool ok = r < nrow;                                                  \
        long bx = ok ? red_off(&kx, r) : 0;                                  \
        long by = ok ? red_off(&ky, r) : 0;                                  \
        long bo = ok ? red_off(&ko, r) : 0;                                  \
        long len = ok ? n : 0;                                               \
        RA_##sfx acc;                                                        \
        C_##sfx m = 0, sh = 0;                                               \
        if (op <= SM_LOG_SOFTMAX) {                                          \
            acc = (RA_##sfx)(-INFINITY);                                     \
            for (long j = sub; j < len; j += L) {                            \
                RA_##sfx v = (RA_##sfx)LD_##sfx(xp, bx + j * sx);            \
                RC_MAXF(acc, v);                                             \
            }                                                                \
            sa[lid] = acc;                                                   \
            barrier(CLK_LOCAL_MEM_FENCE);                                    \
            RED_TREE(sa, lid, sub, lg, RC_MAXF)                              \
            m = (C_##sfx)sa[first];                                          \
            barrier(CLK_LOCAL_MEM_FENCE);                                    \
        }                                                                    \
        acc = 0;                                                             \
        for (long j = sub; j < len; j += L) {                                \
            C_##sfx v = LD_##sfx(xp, bx + j * sx);                           \
            if (op <= SM_LOG_SOFTMAX)                                        \
                acc += (RA_##sfx)exp(v - m);                                 \
            else if (op == SM_GRAD)                                          \
                acc += (RA_##sfx)v * (RA_##sfx)LD_##sfx(yp, by + j * sy);    \
            else                                                             \
                acc += (RA_##sfx)LD_##sfx(yp, by + j * sy);                  \
        }                                                                    \
        sa[lid] = acc;                                                       \
        barrier(CLK_LOCAL_MEM_FENCE);                                        \
        RED_TREE(sa, lid, sub, lg, RC_ADD)                                   \
        acc = sa[first];                                                     \
        sh = op == SM_SOFTMAX       ? (C_##sfx)(1 / acc)                     \
             : op == SM_LOG_SOFTMAX ? (C_##sfx)log(acc)                      \
                                    : (C_##sfx)acc;                          \
        for (long j = sub; j < len; j += L) {                                \
            C_##sfx v = LD_##sfx(xp, bx + j * sx), w;                        \
            switch (op) {                                                    \
            case SM_SOFTMAX:                                                 \
                w = exp(v - m) * sh;                                         \
                break;                                                       \
            case SM_LOG_SOFTMAX:                                             \
                w = (v - m) - sh;                                            \
                break;                                                       \
            case SM_GRAD:                                                    \
                w = v * (LD_##sfx(yp, by + j * sy) - sh);                    \
                break;                                                       \
            default:                                                         \
                w = LD_##sfx(yp, by + j * sy) - exp(v) * sh;                 \
                break;                                                       \
            }                                                                \
            ST_##sfx(opp, bo + j * so, w);                                   \
        }                                                                    \
    }

FOR_FLOAT(RED_SOFTMAX)

/* ---- cumsum ------------------------------------------------------------ */

/* Lines: kept dims of x (kk) and out (ko); the scanned index space kr (x's
 * strides), out stride os along it. */
#define RED_CUMSUM(sfx, AT, STORE)                                           \
    __kernel void red_cumsum_##sfx(BUF(x), kdesc kk, kdesc kr, kdesc ko,     \
                                   BUF(out), long nline, long n, long os,    \
                                   int lg)                                   \
    {                                                                        \
        __local AT sc[RED_WG];                                               \
        __global const S_##sfx *xp = PTR(S_##sfx, x);                        \
        int lid = (int)get_local_id(0), L = 1 << lg;                         \
        int sub = lid & (L - 1), first = lid - sub;                          \
        long r = (long)get_group_id(0) * (RED_WG >> lg) + (lid >> lg);       \
        bool ok = r < nline;                                                 \
        long bx = ok ? red_off(&kk, r) : 0;                                  \
        long bo = ok ? red_off(&ko, r) : 0;                                  \
        long chunk = (n + L - 1) / L;                                        \
        long lo = ok ? sub * chunk : 0, hi = ok ? min(n, lo + chunk) : 0;    \
        AT c = 0;                                                            \
        for (long j = lo; j < hi; j++)                                       \
            c += (AT)LD_##sfx(xp, bx + red_off(&kr, j));                     \
        sc[lid] = c;                                                         \
        barrier(CLK_LOCAL_MEM_FENCE);                                        \
        c = 0;                                                               \
        for (int q = first; q < lid; q++)                                    \
            c += sc[q];                                                      \
        for (long j = lo; j < hi; j++) {                                     \
            c += (AT)LD_##sfx(xp, bx + red_off(&kr, j));                     \
            STORE(out, bo + j * os, c);                                      \
        }                                                                    \
    }

#define CS_ST_f32(o, i, c) ST_f32(PTR(S_f32, o), i, c)
#define CS_ST_f16(o, i, c) ST_f16(PTR(S_f16, o), i, c)
#define CS_ST_bf16(o, i, c) ST_bf16(PTR(S_bf16, o), i, c)
#define CS_ST_f64(o, i, c) ST_f64(PTR(S_f64, o), i, c)
#define CS_ST_I(o, i, c) (PTR(long, o)[i] = (long)(c))

RED_CUMSUM(f32, RACC, CS_ST_f32)
RED_CUMSUM(f16, RACC, CS_ST_f16)
RED_CUMSUM(bf16, RACC, CS_ST_bf16)
#ifdef KEEL_HAS_FP64
RED_CUMSUM(f64, double, CS_ST_f64)
#endif
RED_CUMSUM(i8, ulong, CS_ST_I)
RED_CUMSUM(u8, ulong, CS_ST_I)
RED_CUMSUM(i32, ulong, CS_ST_I)
RED_CUMSUM(i64, ulong, CS_ST_I)

/* ---- sort, argsort, topk ---------------------------------------------- */

static inline ulong red_fkey(float f)
{
    if (isnan(f))
        return 0xFFFFFFFFUL;
    if (f == 0.0f)
        f = 0.0f;
    uint u = as_uint(f);
    return (ulong)((u & 0x80000000u) ? ~u : (u | 0x80000000u));
}

#ifdef KEEL_HAS_FP64
static inline ulong red_dkey(double f)
{
    if (isnan(f))
        return ~0UL;
    if (f == 0.0)
        f = 0.0;
    ulong u = as_ulong(f);
    return (u & 0x8000000000000000UL) ? ~u : (u | 0x8000000000000000UL);
}
#endif

static inline ulong red_ikey(long v)
{
    return (ulong)v ^ 0x8000000000000000UL;
}

#define KEY_f32(v) red_fkey(v)
#define KEY_f16(v) red_fkey(v)
#define KEY_bf16(v) red_fkey(v)
#define KEY_f64(v) red_dkey(v)
#define KEY_i8(v) red_ikey((long)(v))
#define KEY_u8(v) red_ikey((long)(v))
#define KEY_i32(v) red_ikey((long)(v))
#define KEY_i64(v) red_ikey((long)(v))

/* (ka, ia) after (kb, ib) */
#define RED_GT(ka, ia, kb, ib) ((ka) > (kb) || ((ka) == (kb) && (ia) > (ib)))

/* Rows of n elements of x (kx: x with the sort axis last); one group per
 * RED_SB-element block of a row: keys and indices, the block sorted. */
#define RED_SORT_BLOCK(sfx)                                                  \
    __kernel void red_sort_block_##sfx(BUF(x), kdesc kx, long n,             \
                                       long nblk, int desc, BUF(key),        \
                                       BUF(idx))                             \
    {                                                                        \
        __local ulong sk[RED_SB];                                            \
        __local long sv[RED_SB];                                             \
        int lid = (int)get_local_id(0);                                      \
        long g = get_group_id(0), row = g / nblk;                            \
        long i = (g - row * nblk) * RED_SB + lid;                            \
        ulong k = ~0UL;                                                      \
        long id = LONG_MAX;                                                  \
        if (i < n) {                                                         \
            k = KEY_##sfx(                                                   \
                LD_##sfx(PTR(S_##sfx, x), red_off(&kx, row * n + i)));       \
            if (desc)                                                        \
                k = ~k;                                                      \
            id = i;                                                          \
        }                                                                    \
        sk[lid] = k;                                                         \
        sv[lid] = id;                                                        \
        barrier(CLK_LOCAL_MEM_FENCE);                                        \
        for (int w = 2; w <= RED_SB; w <<= 1)                                \
            for (int s = w >> 1; s > 0; s >>= 1) {                           \
                int p = lid ^ s;                                             \
                if (p > lid) {                                               \
                    ulong ka = sk[lid], kb = sk[p];                          \
                    long ia = sv[lid], ib = sv[p];                           \
                    bool up = (lid & w) == 0;                                \
                    if (RED_GT(ka, ia, kb, ib) == up) {                      \
                        sk[lid] = kb;                                        \
                        sk[p] = ka;                                          \
                        sv[lid] = ib;                                        \
                        sv[p] = ia;                                          \
                    }                                                        \
                }                                                            \
                barrier(CLK_LOCAL_MEM_FENCE);                                \
            }                                                                \
        if (i < n) {                                                         \
            PTR(ulong, key)[row * n + i] = sk[lid];                          \
            PTR(long, idx)[row * n + i] = sv[lid];                           \
        }                                                                    \
    }

FOR_NUMERIC(RED_SORT_BLOCK)

/* One merge pass over rows of n: runs of w sorted pairs merged in twos. */
__kernel void red_sort_merge(BUF(ki), BUF(ii), BUF(ko), BUF(io), long n,
                             long total, long w)
{
    long e = get_global_id(0);
    if (e >= total)
        return;
    long row = e / n, i = e - row * n;
    __global const ulong *kp = PTR(ulong, ki) + row * n;
    __global const long *ip = PTR(long, ii) + row * n;
    long run = i / w, start = run * w;
    long ps = (run ^ 1) * w;
    ulong k = kp[i];
    long id = ip[i], dest = i;
    if (ps < n) {
        long pe = min(ps + w, n);
        long lo = ps, hi = pe;
        while (lo < hi) { /* first partner element after (k, id) */
            long mid = lo + (hi - lo) / 2;
            if (RED_GT(kp[mid], ip[mid], k, id))
                hi = mid;
            else
                lo = mid + 1;
        }
        dest = min(start, ps) + (i - start) + (lo - ps);
    }
    PTR(ulong, ko)[row * n + dest] = k;
    PTR(long, io)[row * n + dest] = id;
}

/* topk unsorted: the first k pairs of each row, keyed by their index. */
__kernel void red_sort_take(BUF(ii), long n, long k, long total, BUF(ko),
                            BUF(io))
{
    long e = get_global_id(0);
    if (e >= total)
        return;
    long row = e / k, q = e - row * k;
    long id = PTR(long, ii)[row * n + q];
    PTR(ulong, ko)[e] = (ulong)id;
    PTR(long, io)[e] = id;
}

/* Outputs: the first k of each row of n sorted indices; values (when
 * vals) copied from x. kx: x with the axis last (rows of xn); kv, ki: the
 * outputs with the axis last. */
#define RED_SORT_OUT(T, sz)                                                  \
    __kernel void red_sort_out_##sz(BUF(x), kdesc kx, BUF(idx), BUF(val),    \
                                    kdesc kv, BUF(oi), kdesc ki, long xn,    \
                                    long n, long k, long total, int vals)    \
    {                                                                        \
        long e = get_global_id(0);                                           \
        if (e >= total)                                                      \
            return;                                                          \
        long row = e / k, q = e - row * k;                                   \
        long id = PTR(long, idx)[row * n + q];                               \
        PTR(long, oi)[red_off(&ki, e)] = id;                                 \
        if (vals)                                                            \
            PTR(T, val)[red_off(&kv, e)] =                                   \
                PTR(T, x)[red_off(&kx, row * xn + id)];                     \
    }

RED_SORT_OUT(uchar, 1)
RED_SORT_OUT(ushort, 2)
RED_SORT_OUT(uint, 4)
RED_SORT_OUT(ulong, 8)
