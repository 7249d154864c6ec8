/* keel OpenCL C kernels: reduce family (see common.cl).
 *
 * DTYPES. To keep the program small, one kernel serves several dtypes,
 * told apart by a kind argument `dk`: the "_flt" kernels float32 (0),
 * float16 (1) and bfloat16 (2), computed in float; the "_f64" kernels
 * float64; the "_int" kernels int8 (0), uint8 and bool (1), int32 (2) and
 * int64 (3), computed in 64-bit two's complement (wrapping).
 *
 * REDUCTIONS (red_flt, red_f64, red_int). The host splits x's dims into
 * kept dims (one output each, row-major: the output index) and reduced
 * dims, size-1 dims dropped and mergeable neighbours merged; kk and kr
 * hold their shapes and x's strides. A work-group of RED_WG items serves
 * RED_WG >> lg outputs, 2^lg lanes each: every lane strides through the
 * reduced index space, then a __local tree combines the lanes. A second
 * pass over the same elements follows for the ops that need the first
 * result (argmax: the extreme; var: the mean; logsumexp: the maximum).
 * The host passes the first pass's lane combine (cb, CB_*) with the op.
 * A few long reductions are split (RM_*; no early return before the last
 * barrier: PoCL miscompiles that): np parts of plen elements of each
 * output reduce into partials (pa: values, pi: counts or indices), then
 * the partials; two-pass ops keep the first pass's result in pr between.
 * Float sums accumulate in double when the device has it (float
 * otherwise). max/min propagate NaN; argmax/argmin give the first NaN,
 * else the first index of the extreme.
 *
 * SOFTMAX family (red_softmax_*): the same lanes along one axis: the
 * maximum, the exp-sum (grads: the sum), then the outputs.
 *
 * CUMSUM (red_cumsum_*): one line per 2^lg lanes, each lane a chunk:
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
/* The kernels that assume a group of RED_WG (= RED_SB) items say so, so
 * that a compiler keeps them launchable at that size. */
#define RED_WG_ATTR __attribute__((reqd_work_group_size(RED_WG, 1, 1)))

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

static inline long red_off(const kdesc *d, long i)
{
    if (d->ndim == 0)
        return 0;
    if (d->ndim == 1)
        return i * d->stride[0];
    return kd_off(d, i);
}

/* ---- loads and stores by kind ------------------------------------------ */

static inline float red_ldf(__global const uchar *p, long i, int k)
{
    if (k == 1)
        return vload_half((size_t)i, (__global const half *)p);
    if (k == 2)
        return bf16_to_f32(((__global const ushort *)p)[i]);
    return ((__global const float *)p)[i];
}

static inline void red_stf(__global uchar *p, long i, int k, float v)
{
    if (k == 1)
        vstore_half_rte(v, (size_t)i, (__global half *)p);
    else if (k == 2)
        ((__global ushort *)p)[i] = f32_to_bf16(v);
    else
        ((__global float *)p)[i] = v;
}

static inline long red_ldi(__global const uchar *p, long i, int k)
{
    switch (k) {
    case 0:
        return ((__global const char *)p)[i];
    case 1:
        return p[i];
    case 2:
        return ((__global const int *)p)[i];
    default:
        return ((__global const long *)p)[i];
    }
}

static inline void red_sti(__global uchar *p, long i, int k, long v)
{
    switch (k) {
    case 0:
        ((__global char *)p)[i] = (char)v;
        break;
    case 1:
        p[i] = (uchar)v;
        break;
    case 2:
        ((__global int *)p)[i] = (int)v;
        break;
    default:
        ((__global long *)p)[i] = v;
        break;
    }
}

#define RLD_flt(p, i) red_ldf((p), (i), dk)
#define RST_flt(p, i, v) red_stf((p), (i), dk, (float)(v))
#ifdef KEEL_HAS_FP64
#define RLD_f64(p, i) (((__global const double *)(p))[i])
#define RST_f64(p, i, v) (((__global double *)(p))[i] = (double)(v))
#endif

/* ---- reductions -------------------------------------------------------- */

/* Lane combines: CB_* for the values, and for the 64-bit slots a sum
 * (ic 0: counts) or a minimum (ic 1: first indices). */
#define CB_ADD 0
#define CB_MUL 1
#define CB_MAX 2
#define CB_MIN 3

#define RCOMBF(c, a, b)                                                      \
    ((c) == CB_ADD   ? (a) + (b)                                             \
     : (c) == CB_MUL ? (a) * (b)                                             \
     : (c) == CB_MAX ? (((b) > (a) || isnan(b)) ? (b) : (a))                 \
                     : (((b) < (a) || isnan(b)) ? (b) : (a)))

static inline long red_combi(int c, long a, long b)
{
    switch (c) {
    case CB_ADD:
        return (long)((ulong)a + (ulong)b);
    case CB_MUL:
        return (long)((ulong)a * (ulong)b);
    case CB_MAX:
        return b > a ? b : a;
    default:
        return b < a ? b : a;
    }
}

/* Tree over the 2^lg lanes of each segment; the segment's result lands in
 * its first slot. Every item of the group runs it (uniform barriers). */
#define RED_TREE_F(sa, si, cb, ic)                                           \
    for (int s_ = L >> 1; s_ > 0; s_ >>= 1) {                                \
        if (sub < s_) {                                                      \
            sa[slot] = RCOMBF(cb, sa[slot], sa[slot + s_]);                  \
            si[slot] = red_combi((ic) ? CB_MIN : CB_ADD, si[slot],           \
                                si[slot + s_]);                              \
        }                                                                    \
        barrier(CLK_LOCAL_MEM_FENCE);                                        \
    }

#define RED_TREE_I(si, cb)                                                   \
    for (int s_ = L >> 1; s_ > 0; s_ >>= 1) {                                \
        if (sub < s_)                                                        \
            si[slot] = red_combi(cb, si[slot], si[slot + s_]);               \
        barrier(CLK_LOCAL_MEM_FENCE);                                        \
    }

/* The work item's place: lane `sub` of output `o` (ok: o exists), its
 * slot in the group's __local arrays `slot` (the output's lanes are slots
 * first .. first + L - 1). `lanes` is lg, plus 16 for column-major lanes:
 * then neighbouring work items serve neighbouring outputs (coalesced when
 * the outputs' inputs are neighbours, as in a reduction over a leading
 * axis), else neighbouring lanes of one output. */
#define RED_PLACE(nout)                                                      \
    int lg = lanes & 15, L = 1 << lg, S = RED_WG >> lg;                      \
    int lid = (int)get_local_id(0);                                          \
    int sub = lanes >> 4 ? lid / S : lid & (L - 1);                          \
    int seg = lanes >> 4 ? lid - sub * S : lid >> lg;                        \
    int first = seg * L, slot = first + sub;                                 \
    long o = (long)get_group_id(0) * S + seg;                                \
    bool ok = o < (nout)

/* Modes of a split reduction (mode 0: not split): */
#define RM_PART1 1 /* pass 1 over a part: partials                   */
#define RM_FIN1 2  /* the pass 1 partials: the output                */
#define RM_MID 3   /* the pass 1 partials: the pass 1 result, in pr  */
#define RM_PART2 4 /* pass 2 over a part (pass 1 result from pr)     */
#define RM_FIN2 5  /* the pass 2 partials: the output                */
#define RM_PARTS(m) ((m) == RM_PART1 || (m) == RM_PART2)
#define RM_PARTIALS(m) ((m) == RM_FIN1 || (m) == RM_MID || (m) == RM_FIN2)

/* The reduced indices [j0, n) of unit o and its x offset (or partials'
 * base): mode 0 all of output o; a part mode part o % np of output
 * o / np; a partials mode output o's np partials. */
#define RED_RANGE()                                                          \
    long ou = RM_PARTS(mode) ? o / np : o;                                   \
    long j0 = RM_PARTS(mode) ? (o - ou * np) * plen : 0;                     \
    long n = !ok                ? 0                                          \
             : RM_PARTS(mode)    ? min(nred, j0 + plen)                      \
             : RM_PARTIALS(mode) ? np                                        \
                                 : nred;                                     \
    long base = !ok ? 0 : RM_PARTIALS(mode) ? ou * np : red_off(&kk, ou)

#define RED_FLOAT(K, C, RA)                                                  \
    __kernel RED_WG_ATTR void red_##K(                                       \
        BUF(x), kdesc kk, kdesc kr, BUF(out), long nout, long nred, int op,  \
        int cb, int lanes, int unbiased, int dk, BUF(pa), BUF(pi), BUF(pr),  \
        long plen, long np, int mode)                                        \
    {                                                                        \
        __local RA sa[RED_WG];                                               \
        __local long si[RED_WG];                                             \
        __global const uchar *xp = PTR(uchar, x);                            \
        __global RA *pap = PTR(RA, pa);                                      \
        __global long *pip = PTR(long, pi);                                  \
        __global RA *prp = PTR(RA, pr);                                      \
        RED_PLACE(RM_PARTS(mode) ? nout * np : nout);                        \
        RED_RANGE();                                                         \
        bool nz = op == RED_ALL || op == RED_ANY;                            \
        RA acc = cb == CB_MUL   ? (RA)1                                      \
                 : cb == CB_MAX ? (RA)(-INFINITY)                            \
                 : cb == CB_MIN ? (RA)INFINITY                               \
                                : (RA)0;                                     \
        long cnt = 0;                                                        \
        for (long j = j0 + sub; mode <= RM_MID && j < n; j += L) {           \
            if (RM_PARTIALS(mode)) {                                         \
                acc = RCOMBF(cb, acc, pap[base + j]);                        \
                cnt += pip[base + j];                                        \
                continue;                                                    \
            }                                                                \
            C v = RLD_##K(xp, base + red_off(&kr, j));                       \
            if (nz)                                                          \
                cnt += v != 0;                                               \
            else                                                             \
                acc = RCOMBF(cb, acc, (RA)v);                                \
        }                                                                    \
        sa[slot] = acc;                                                      \
        si[slot] = cnt;                                                      \
        barrier(CLK_LOCAL_MEM_FENCE);                                        \
        RED_TREE_F(sa, si, cb, 0)                                            \
        RA r1 = mode >= RM_PART2 ? (ok ? prp[ou] : 0) : sa[first];           \
        cnt = si[first];                                                     \
        barrier(CLK_LOCAL_MEM_FENCE);                                        \
        /* second pass: argmax/argmin, var/std, logsumexp */                 \
        bool arg = op == RED_ARGMAX || op == RED_ARGMIN;                     \
        bool fin = !isnan(r1) && !isinf(r1);                                 \
        bool two = (mode == 0 || mode == RM_PART2) &&                        \
                   (arg || op == RED_VAR || op == RED_STD ||                 \
                    (op == RED_LSE && fin));                                 \
        RA mean = r1 / (RA)nred;                                             \
        C m = (C)r1;                                                         \
        long idx = LONG_MAX;                                                 \
        acc = 0;                                                             \
        for (long j = j0 + sub; (two || mode == RM_FIN2) && j < n; j += L) { \
            if (mode == RM_FIN2) {                                           \
                acc += pap[base + j];                                        \
                idx = min(idx, pip[base + j]);                               \
                continue;                                                    \
            }                                                                \
            C v = RLD_##K(xp, base + red_off(&kr, j));                       \
            if (arg) {                                                       \
                if (isnan(m) ? isnan(v) : v == m) {                          \
                    idx = j;                                                 \
                    break;                                                   \
                }                                                            \
            } else if (op == RED_LSE) {                                      \
                acc += (RA)exp(v - m);                                       \
            } else {                                                         \
                RA d = (RA)v - mean;                                         \
                acc += d * d;                                                \
            }                                                                \
        }                                                                    \
        sa[slot] = acc;                                                      \
        si[slot] = idx;                                                      \
        barrier(CLK_LOCAL_MEM_FENCE);                                        \
        RED_TREE_F(sa, si, CB_ADD, 1)                                        \
        RA r2 = sa[first];                                                   \
        idx = si[first];                                                     \
        if (!ok || sub != 0)                                                 \
            return;                                                          \
        if (mode == RM_PART1 || mode == RM_PART2) { /* a part's partials */  \
            pap[o] = mode == RM_PART1 ? r1 : r2;                             \
            pip[o] = mode == RM_PART1 ? cnt : idx;                           \
            return;                                                          \
        }                                                                    \
        if (mode == RM_MID) {                                                \
            prp[o] = r1;                                                     \
            return;                                                          \
        }                                                                    \
        __global uchar *ob = PTR(uchar, out);                                \
        RA den = (RA)(nred - (unbiased ? 1 : 0));                            \
        switch (op) {                                                        \
        case RED_MEAN:                                                       \
            RST_##K(ob, o, mean);                                            \
            break;                                                           \
        case RED_ARGMAX:                                                     \
        case RED_ARGMIN:                                                     \
            PTR(long, out)[o] = idx;                                         \
            break;                                                           \
        case RED_VAR:                                                        \
            RST_##K(ob, o, den > 0 ? r2 / den : (RA)NAN);                    \
            break;                                                           \
        case RED_STD:                                                        \
            RST_##K(ob, o, den > 0 ? sqrt(r2 / den) : (RA)NAN);              \
            break;                                                           \
        case RED_LSE:                                                        \
            RST_##K(ob, o, fin ? r1 + log(r2) : r1);                         \
            break;                                                           \
        case RED_ALL:                                                        \
            ob[o] = cnt == nred;                                             \
            break;                                                           \
        case RED_ANY:                                                        \
            ob[o] = cnt != 0;                                                \
            break;                                                           \
        default: /* sum, prod, max, min */                                   \
            RST_##K(ob, o, r1);                                              \
            break;                                                           \
        }                                                                    \
    }

RED_FLOAT(flt, float, RACC)
#ifdef KEEL_HAS_FP64
RED_FLOAT(f64, double, double)
#endif

__kernel RED_WG_ATTR void red_int(BUF(x), kdesc kk, kdesc kr, BUF(out),
                                  long nout, long nred, int op, int cb,
                                  int lanes, int unbiased, int dk, BUF(pa),
                                  BUF(pi), BUF(pr), long plen, long np,
                                  int mode)
{
    __local long si[RED_WG];
    __global const uchar *xp = PTR(uchar, x);
    __global long *pip = PTR(long, pi);
    __global long *prp = PTR(long, pr);
    RED_PLACE(RM_PARTS(mode) ? nout * np : nout);
    RED_RANGE();
    bool arg = op == RED_ARGMAX || op == RED_ARGMIN;
    bool nz = op == RED_ALL || op == RED_ANY;
    long acc = cb == CB_MUL   ? 1L
               : cb == CB_MAX ? LONG_MIN
               : cb == CB_MIN ? LONG_MAX
                              : 0L;
    (void)unbiased;
    (void)pa_b;
    (void)pa_o;
    for (long j = j0 + sub; mode <= RM_MID && j < n; j += L) {
        long v = RM_PARTIALS(mode) ? pip[base + j]
                                   : red_ldi(xp, base + red_off(&kr, j), dk);
        acc = red_combi(cb, acc,
                        nz && !RM_PARTIALS(mode) ? (long)(v != 0) : v);
    }
    si[slot] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    RED_TREE_I(si, cb)
    long r1 = mode >= RM_PART2 ? (ok ? prp[ou] : 0) : si[first];
    barrier(CLK_LOCAL_MEM_FENCE);
    long idx = LONG_MAX;
    bool two = arg && (mode == 0 || mode == RM_PART2);
    for (long j = j0 + sub; (two || mode == RM_FIN2) && j < n; j += L) {
        if (mode == RM_FIN2) {
            idx = min(idx, pip[base + j]);
            continue;
        }
        if (red_ldi(xp, base + red_off(&kr, j), dk) == r1) {
            idx = j;
            break;
        }
    }
    si[slot] = idx;
    barrier(CLK_LOCAL_MEM_FENCE);
    RED_TREE_I(si, CB_MIN)
    idx = si[first];
    if (!ok || sub != 0)
        return;
    if (mode == RM_PART1 || mode == RM_PART2) { /* a part's partials */
        pip[o] = mode == RM_PART1 ? r1 : idx;
        return;
    }
    if (mode == RM_MID) {
        prp[o] = r1;
        return;
    }
    switch (op) {
    case RED_SUM:
        PTR(long, out)[o] = r1;
        break;
    case RED_ARGMAX:
    case RED_ARGMIN:
        PTR(long, out)[o] = idx;
        break;
    case RED_ALL:
        PTR(uchar, out)[o] = r1 == nred;
        break;
    case RED_ANY:
        PTR(uchar, out)[o] = r1 != 0;
        break;
    default: /* prod, max, min */
        red_sti(PTR(uchar, out), o, dk, r1);
        break;
    }
}

/* ---- softmax, log_softmax and their grads ----------------------------- */

#define SM_SOFTMAX 0
#define SM_LOG_SOFTMAX 1
#define SM_GRAD 2
#define SM_LOG_GRAD 3

/* Rows: kept dims of x (kx), of y (ky) and of out (ko); n elements along
 * the axis with strides sx, sy, so. y is dout for the grads (x is out). */
#define RED_SOFTMAX(K, C, RA)                                                \
    __kernel RED_WG_ATTR void red_softmax_##K(                               \
        BUF(x), BUF(y), BUF(out), kdesc kx, kdesc ky, kdesc ko, long nrow,   \
        long n, long sx, long sy, long so, int op, int lanes, int dk)        \
    {                                                                        \
        __local RA sa[RED_WG];                                               \
        __local long si[RED_WG];                                             \
        __global const uchar *xp = PTR(uchar, x);                            \
        __global const uchar *yp = PTR(uchar, y);                            \
        __global uchar *opp = PTR(uchar, out);                               \
        RED_PLACE(nrow);                                                     \
        long bx = ok ? red_off(&kx, o) : 0;                                  \
        long by = ok ? red_off(&ky, o) : 0;                                  \
        long bo = ok ? red_off(&ko, o) : 0;                                  \
        long len = ok ? n : 0;                                               \
        RA acc = (RA)(-INFINITY);                                            \
        C m, sh;                                                             \
        for (long j = sub; op <= SM_LOG_SOFTMAX && j < len; j += L)          \
            acc = RCOMBF(CB_MAX, acc, (RA)RLD_##K(xp, bx + j * sx));         \
        sa[slot] = acc;                                                      \
        si[slot] = 0;                                                        \
        barrier(CLK_LOCAL_MEM_FENCE);                                        \
        RED_TREE_F(sa, si, CB_MAX, 0)                                        \
        m = (C)sa[first];                                                    \
        barrier(CLK_LOCAL_MEM_FENCE);                                        \
        acc = 0;                                                             \
        for (long j = sub; j < len; j += L) {                                \
            C v = RLD_##K(xp, bx + j * sx);                                  \
            if (op <= SM_LOG_SOFTMAX)                                        \
                acc += (RA)exp(v - m);                                       \
            else if (op == SM_GRAD)                                          \
                acc += (RA)v * (RA)RLD_##K(yp, by + j * sy);                 \
            else                                                             \
                acc += (RA)RLD_##K(yp, by + j * sy);                         \
        }                                                                    \
        sa[slot] = acc;                                                      \
        barrier(CLK_LOCAL_MEM_FENCE);                                        \
        RED_TREE_F(sa, si, CB_ADD, 0)                                        \
        acc = sa[first];                                                     \
        sh = op == SM_SOFTMAX       ? (C)(1 / acc)                           \
             : op == SM_LOG_SOFTMAX ? (C)log(acc)                            \
                                    : (C)acc;                                \
        for (long j = sub; j < len; j += L) {                                \
            C v = RLD_##K(xp, bx + j * sx), w;                               \
            switch (op) {                                                    \
            case SM_SOFTMAX:                                                 \
                w = exp(v - m) * sh;                                         \
                break;                                                       \
            case SM_LOG_SOFTMAX:                                             \
                w = (v - m) - sh;                                            \
                break;                                                       \
            case SM_GRAD:                                                    \
                w = v * (RLD_##K(yp, by + j * sy) - sh);                     \
                break;                                                       \
            default:                                                         \
                w = RLD_##K(yp, by + j * sy) - exp(v) * sh;                  \
                break;                                                       \
            }                                                                \
            RST_##K(opp, bo + j * so, w);                                    \
        }                                                                    \
    }

RED_SOFTMAX(flt, float, RACC)
#ifdef KEEL_HAS_FP64
RED_SOFTMAX(f64, double, double)
#endif

/* ---- cumsum ------------------------------------------------------------ */

/* Lines: kept dims of x (kk) and out (ko); the scanned index space kr (x's
 * strides), out stride os along it. Integers write int64. */
#define RLD_int(p, i) red_ldi((p), (i), dk)
#define RST_int(p, i, v) (((__global long *)(p))[i] = (long)(v))

#define RED_CUMSUM(K, AT)                                                    \
    __kernel RED_WG_ATTR void red_cumsum_##K(                                \
        BUF(x), kdesc kk, kdesc kr, kdesc ko, BUF(out), long nline, long n,  \
        long os, int lanes, int dk)                                          \
    {                                                                        \
        __local AT sc[RED_WG];                                               \
        __global const uchar *xp = PTR(uchar, x);                            \
        __global uchar *opp = PTR(uchar, out);                               \
        RED_PLACE(nline);                                                    \
        long bx = ok ? red_off(&kk, o) : 0;                                  \
        long bo = ok ? red_off(&ko, o) : 0;                                  \
        long chunk = (n + L - 1) / L;                                        \
        long lo = ok ? sub * chunk : 0, hi = ok ? min(n, lo + chunk) : 0;    \
        AT c = 0;                                                            \
        for (long j = lo; j < hi; j++)                                       \
            c += (AT)RLD_##K(xp, bx + red_off(&kr, j));                      \
        sc[slot] = c;                                                        \
        barrier(CLK_LOCAL_MEM_FENCE);                                        \
        c = 0;                                                               \
        for (int q = first; q < slot; q++)                                   \
            c += sc[q];                                                      \
        for (long j = lo; j < hi; j++) {                                     \
            c += (AT)RLD_##K(xp, bx + red_off(&kr, j));                      \
            RST_##K(opp, bo + j * os, c);                                    \
        }                                                                    \
    }

RED_CUMSUM(flt, RACC)
#ifdef KEEL_HAS_FP64
RED_CUMSUM(f64, double)
#endif
RED_CUMSUM(int, ulong)

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

/* (ka, ia) after (kb, ib) */
#define RED_GT(ka, ia, kb, ib) ((ka) > (kb) || ((ka) == (kb) && (ia) > (ib)))

/* Keys and indices of rows of n elements of x (kx: x with the sort axis
 * last); dk: float32 0, float16 1, bfloat16 2, float64 3, int8 4, uint8
 * 5, int32 6, int64 7. */
__kernel void red_sort_keys(BUF(x), kdesc kx, long n, long total, int desc,
                            BUF(key), BUF(idx), int dk)
{
    long e = get_global_id(0);
    if (e >= total)
        return;
    __global const uchar *xp = PTR(uchar, x);
    long i = red_off(&kx, e);
    ulong k;
    if (dk < 3)
        k = red_fkey(red_ldf(xp, i, dk));
#ifdef KEEL_HAS_FP64
    else if (dk == 3)
        k = red_dkey(((__global const double *)xp)[i]);
#endif
    else
        k = red_ikey(red_ldi(xp, i, dk - 4));
    PTR(ulong, key)[e] = desc ? ~k : k;
    PTR(long, idx)[e] = e % n;
}

/* One group per RED_SB-pair block of a row of n: the block sorted in
 * place (bitonic, padded with pairs after every real one). */
__kernel RED_WG_ATTR void red_sort_block(BUF(key), BUF(idx), long n, long nblk)
{
    __local ulong sk[RED_SB];
    __local long sv[RED_SB];
    int lid = (int)get_local_id(0);
    long g = get_group_id(0), row = g / nblk;
    long i = (g - row * nblk) * RED_SB + lid;
    __global ulong *kp = PTR(ulong, key) + row * n;
    __global long *ip = PTR(long, idx) + row * n;
    sk[lid] = i < n ? kp[i] : ~0UL;
    sv[lid] = i < n ? ip[i] : LONG_MAX;
    barrier(CLK_LOCAL_MEM_FENCE);
    /* fully unrolled: the loops clang -O2 leaves come out of llvm-spirv
     * with blocks before their dominators */
#pragma unroll
    for (int w = 2; w <= RED_SB; w <<= 1) {
#pragma unroll
        for (int s = w >> 1; s > 0; s >>= 1) {
            int p = lid ^ s;
            if (p > lid) {
                ulong ka = sk[lid], kb = sk[p];
                long ia = sv[lid], ib = sv[p];
                bool up = (lid & w) == 0;
                if (RED_GT(ka, ia, kb, ib) == up) {
                    sk[lid] = kb;
                    sk[p] = ka;
                    sv[lid] = ib;
                    sv[p] = ia;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    if (i < n) {
        kp[i] = sk[lid];
        ip[i] = sv[lid];
    }
}

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
 * es > 0, the element size) copied from x. kx: x with the axis last (rows
 * of xn); kv, ki: the outputs with the axis last. */
__kernel void red_sort_out(BUF(x), kdesc kx, BUF(idx), BUF(val), kdesc kv,
                           BUF(oi), kdesc ki, long xn, long n, long k,
                           long total, int es)
{
    long e = get_global_id(0);
    if (e >= total)
        return;
    long row = e / k, q = e - row * k;
    long id = PTR(long, idx)[row * n + q];
    PTR(long, oi)[red_off(&ki, e)] = id;
    long s = red_off(&kx, row * xn + id), d = red_off(&kv, e);
    switch (es) {
    case 1:
        PTR(uchar, val)[d] = PTR(uchar, x)[s];
        break;
    case 2:
        PTR(ushort, val)[d] = PTR(ushort, x)[s];
        break;
    case 4:
        PTR(uint, val)[d] = PTR(uint, x)[s];
        break;
    case 8:
        PTR(ulong, val)[d] = PTR(ulong, x)[s];
        break;
    default:
        break;
    }
}
