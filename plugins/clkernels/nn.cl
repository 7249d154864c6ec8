/* keel OpenCL C kernels: nn family (see common.cl).
 *
 * Normalisations and their grads, cross entropy (+grad), mse /
 * bce-with-logits / nll losses, embedding (+grad), dropout, one_hot and the
 * in-place optimizer updates.
 *
 * COMPUTE TYPES. These ops mix dtypes within one launch (float16 x with
 * float32 scale and statistics, a grad of any floating dtype, soft labels
 * and weights of any floating dtype), so their kernels are instantiated per
 * COMPUTE type, not per operand dtype: the _f32 kernels compute in float
 * and serve float32, float16 and bfloat16 launches, the _f64 kernels
 * (KEEL_HAS_FP64 only) compute in double. Every floating operand comes with
 * its keel dtype code and is read and written through nn_ld* / nn_st*
 * (a switch that is uniform across the launch); integer operands likewise
 * through nn_ldi. Embedding copies table elements by their size, one_hot
 * has one kernel (its output is float32).
 *
 * LAYOUT. The host hands these kernels row-major contiguous operands (it
 * copies strided views first), except for 1-D [C] parameters (an element
 * stride), embedding's table (row and column strides) and the optimizer
 * operands, which are updated in place through their descriptors (kdesc).
 *
 * REDUCTIONS. One work-group (a power of two <= NN_WG work items) per row,
 * channel, (sample, group) or sample, with a __local tree; losses reduced
 * to a scalar write per-group partial sums that nn_fin_* adds in a fixed
 * order, so every result is deterministic. Every work item of a group
 * reaches every barrier: no barrier sits in a branch (PoCL got one wrong).
 * embedding_grad sorts (id, position) keys and adds each row's dout rows
 * in position order (no atomics).
 *
 * INDICES. Labels, ids and classes out of range (and ignore_index /
 * padding_idx) are treated as ignored: zero loss and weight, zero rows.
 */

/* Largest work-group of the reducing kernels (sizes the __local trees); the
 * host launches them with a power of two <= NN_WG that fits the row. */
#define NN_WG 256
#define NN_L ((long)get_local_size(0))

/* keel dtype codes (device_api.h keel_dtype) */
#define NN_F32 0
#define NN_F64 1
#define NN_F16 2
#define NN_BF16 3
#define NN_I8 4
#define NN_U8 5
#define NN_I32 6
#define NN_I64 7
#define NN_BOOL 8

static inline float nn_ldf(__global const uchar *p, int dt, long i)
{
    switch (dt) {
    case NN_F16:
        return vload_half((size_t)i, (__global const half *)p);
    case NN_BF16:
        return bf16_to_f32(((__global const ushort *)p)[i]);
#ifdef KEEL_HAS_FP64
    case NN_F64:
        return (float)((__global const double *)p)[i];
#endif
    default:
        return ((__global const float *)p)[i];
    }
}

static inline void nn_stf(__global uchar *p, int dt, long i, float v)
{
    switch (dt) {
    case NN_F16:
        vstore_half_rte(v, (size_t)i, (__global half *)p);
        break;
    case NN_BF16:
        ((__global ushort *)p)[i] = f32_to_bf16(v);
        break;
#ifdef KEEL_HAS_FP64
    case NN_F64:
        ((__global double *)p)[i] = (double)v;
        break;
#endif
    default:
        ((__global float *)p)[i] = v;
        break;
    }
}

#ifdef KEEL_HAS_FP64
static inline double nn_ldd(__global const uchar *p, int dt, long i)
{
    switch (dt) {
    case NN_F64:
        return ((__global const double *)p)[i];
    case NN_F16:
        return (double)vload_half((size_t)i, (__global const half *)p);
    case NN_BF16:
        return (double)bf16_to_f32(((__global const ushort *)p)[i]);
    default:
        return (double)((__global const float *)p)[i];
    }
}

static inline void nn_std(__global uchar *p, int dt, long i, double v)
{
    switch (dt) {
    case NN_F64:
        ((__global double *)p)[i] = v;
        break;
    case NN_F16:
        vstore_half_rte((float)v, (size_t)i, (__global half *)p);
        break;
    case NN_BF16:
        ((__global ushort *)p)[i] = f32_to_bf16((float)v);
        break;
    default:
        ((__global float *)p)[i] = (float)v;
        break;
    }
}
#endif

/* An integer element (labels, ids) as long. */
static inline long nn_ldi(__global const uchar *p, int dt, long i)
{
    switch (dt) {
    case NN_I64:
        return ((__global const long *)p)[i];
    case NN_I32:
        return (long)((__global const int *)p)[i];
    case NN_I8:
        return (long)((__global const char *)p)[i];
    default: /* u8, bool */
        return (long)p[i];
    }
}

static inline bool nn_in(long v, long n)
{
    return v >= 0 && v < n;
}

/*
 * The kernels of one compute type T: SFX its suffix, LD / ST the element
 * access of that type.
 */
#define NN_INST(SFX, T, LD, ST)                                               \
                                                                              \
    /* Sum of v over the work-group (every work item gets it). */            \
    static T nn_sum_##SFX(__local T *s, T v)                                  \
    {                                                                         \
        int t = (int)get_local_id(0);                                         \
        s[t] = v;                                                             \
        barrier(CLK_LOCAL_MEM_FENCE);                                         \
        for (int h = (int)get_local_size(0) / 2; h > 0; h >>= 1) {            \
            if (t < h)                                                        \
                s[t] += s[t + h];                                             \
            barrier(CLK_LOCAL_MEM_FENCE);                                     \
        }                                                                     \
        T r = s[0];                                                           \
        barrier(CLK_LOCAL_MEM_FENCE);                                         \
        return r;                                                             \
    }                                                                         \
                                                                              \
    /* Max of v over the work-group, NaN ignored (fmax). */                  \
    static T nn_max_##SFX(__local T *s, T v)                                  \
    {                                                                         \
        int t = (int)get_local_id(0);                                         \
        s[t] = v;                                                             \
        barrier(CLK_LOCAL_MEM_FENCE);                                         \
        for (int h = (int)get_local_size(0) / 2; h > 0; h >>= 1) {            \
            if (t < h)                                                        \
                s[t] = fmax(s[t], s[t + h]);                                  \
            barrier(CLK_LOCAL_MEM_FENCE);                                     \
        }                                                                     \
        T r = s[0];                                                           \
        barrier(CLK_LOCAL_MEM_FENCE);                                         \
        return r;                                                             \
    }                                                                         \
                                                                              \
    /* ---- batch_norm: one work-group per channel of x [N, C, S] ---- */    \
    __kernel void nn_bn_##SFX(                                                \
        BUF(x), int xdt, BUF(sc), int scdt, long scs, BUF(bi), int bidt,      \
        long bis, BUF(rm), int rmdt, long rms, BUF(rv), int rvdt, long rvs,   \
        BUF(y), BUF(om), int omdt, BUF(oi), int oidt, long N, long C,         \
        long S, int training, T momentum, T eps)                              \
    {                                                                         \
        __local T red[NN_WG];                                                 \
        __global const uchar *xp = PTR(uchar, x);                             \
        __global uchar *yp = PTR(uchar, y);                                   \
        __global uchar *rmp = PTR(uchar, rm), *rvp = PTR(uchar, rv);          \
        long c = (long)get_group_id(0), m = N * S;                            \
        int t = (int)get_local_id(0);                                         \
        T mean, var, inv, a, b, s = 0, q = 0;                                 \
        /* the reductions run in both modes: PoCL mishandled barriers       \
         * inside the training branch */                                      \
        for (long k = t; training && k < m; k += NN_L) {                      \
            long n = k / S;                                                   \
            s += LD(xp, xdt, (n * C + c) * S + (k - n * S));                  \
        }                                                                     \
        s = nn_sum_##SFX(red, s);                                             \
        mean = !training ? LD(rmp, rmdt, c * rms) : m ? s / (T)m : (T)0;      \
        for (long k = t; training && k < m; k += NN_L) {                      \
            long n = k / S;                                                   \
            T d = LD(xp, xdt, (n * C + c) * S + (k - n * S)) - mean;          \
            q += d * d;                                                       \
        }                                                                     \
        q = nn_sum_##SFX(red, q);                                             \
        var = !training ? LD(rvp, rvdt, c * rvs) : m ? q / (T)m : (T)0;       \
        inv = (T)1 / sqrt(var + eps);                                         \
        a = inv * LD(PTR(uchar, sc), scdt, c * scs);                          \
        b = LD(PTR(uchar, bi), bidt, c * bis);                                \
        for (long k = t; k < m; k += NN_L) {                                 \
            long n = k / S, o = (n * C + c) * S + (k - n * S);                \
            ST(yp, xdt, o, (LD(xp, xdt, o) - mean) * a + b);                  \
        }                                                                     \
        if (t == 0) {                                                         \
            ST(PTR(uchar, om), omdt, c, mean);                                \
            ST(PTR(uchar, oi), oidt, c, inv);                                 \
            if (training && m > 0) {                                          \
                T r0 = LD(rmp, rmdt, c * rms), r1 = LD(rvp, rvdt, c * rvs);   \
                ST(rmp, rmdt, c * rms,                                        \
                   momentum * r0 + ((T)1 - momentum) * mean);                 \
                ST(rvp, rvdt, c * rvs,                                        \
                   momentum * r1 + ((T)1 - momentum) * var);                  \
            }                                                                 \
        }                                                                     \
    }                                                                         \
                                                                              \
    /* ---- batch_norm_grad: one work-group per channel ---- */             \
    __kernel void nn_bng_##SFX(                                               \
        BUF(x), int xdt, BUF(sc), int scdt, long scs, BUF(sm), int smdt,      \
        long sms, BUF(si), int sidt, long sis, BUF(dy), int dydt, BUF(dx),    \
        BUF(ds), int dsdt, BUF(db), int dbdt, long N, long C, long S,         \
        int training)                                                         \
    {                                                                         \
        __local T red[NN_WG];                                                 \
        __global const uchar *xp = PTR(uchar, x), *dyp = PTR(uchar, dy);      \
        __global uchar *dxp = PTR(uchar, dx);                                 \
        long c = (long)get_group_id(0), m = N * S;                            \
        int t = (int)get_local_id(0);                                         \
        T mean = LD(PTR(uchar, sm), smdt, c * sms);                           \
        T inv = LD(PTR(uchar, si), sidt, c * sis);                            \
        T sg = 0, sgx = 0, A, B, Cc;                                          \
        for (long k = t; k < m; k += NN_L) {                                 \
            long n = k / S, o = (n * C + c) * S + (k - n * S);                \
            T g = LD(dyp, dydt, o);                                           \
            sg += g;                                                          \
            sgx += g * ((LD(xp, xdt, o) - mean) * inv);                       \
        }                                                                     \
        sg = nn_sum_##SFX(red, sg);                                           \
        sgx = nn_sum_##SFX(red, sgx);                                         \
        A = LD(PTR(uchar, sc), scdt, c * scs) * inv;                          \
        B = training && m ? -A * sg / (T)m : (T)0;                            \
        Cc = training && m ? -A * sgx / (T)m : (T)0;                          \
        for (long k = t; k < m; k += NN_L) {                                 \
            long n = k / S, o = (n * C + c) * S + (k - n * S);                \
            ST(dxp, xdt, o,                                                   \
               A * LD(dyp, dydt, o) + B +                                     \
                   Cc * ((LD(xp, xdt, o) - mean) * inv));                     \
        }                                                                     \
        if (t == 0) {                                                         \
            ST(PTR(uchar, ds), dsdt, c, sgx);                                 \
            ST(PTR(uchar, db), dbdt, c, sg);                                  \
        }                                                                     \
    }                                                                         \
                                                                              \
    /* ---- layer_norm: one work-group per row of N elements ---- */        \
    __kernel void nn_ln_##SFX(BUF(x), int xdt, BUF(sc), int scdt, int has_s,  \
                              BUF(bi), int bidt, int has_b, BUF(y), BUF(om),  \
                              int omdt, BUF(oi), int oidt, long N, T eps)     \
    {                                                                         \
        __local T red[NN_WG];                                                 \
        __global const uchar *xp = PTR(uchar, x);                             \
        __global const uchar *sp = PTR(uchar, sc), *bp = PTR(uchar, bi);      \
        __global uchar *yp = PTR(uchar, y);                                   \
        long row = (long)get_group_id(0), base = row * N;                     \
        int t = (int)get_local_id(0);                                         \
        T s = 0, q = 0, mean, inv;                                            \
        for (long k = t; k < N; k += NN_L)                                   \
            s += LD(xp, xdt, base + k);                                       \
        s = nn_sum_##SFX(red, s);                                             \
        mean = N ? s / (T)N : (T)0;                                           \
        for (long k = t; k < N; k += NN_L) {                                 \
            T d = LD(xp, xdt, base + k) - mean;                               \
            q += d * d;                                                       \
        }                                                                     \
        q = nn_sum_##SFX(red, q);                                             \
        inv = (T)1 / sqrt((N ? q / (T)N : (T)0) + eps);                       \
        for (long k = t; k < N; k += NN_L) {                                 \
            T v = (LD(xp, xdt, base + k) - mean) * inv;                       \
            if (has_s)                                                        \
                v *= LD(sp, scdt, k);                                         \
            if (has_b)                                                        \
                v += LD(bp, bidt, k);                                         \
            ST(yp, xdt, base + k, v);                                         \
        }                                                                     \
        if (t == 0) {                                                         \
            ST(PTR(uchar, om), omdt, row, mean);                              \
            ST(PTR(uchar, oi), oidt, row, inv);                               \
        }                                                                     \
    }                                                                         \
                                                                              \
    /* ---- layer_norm_grad dx: one work-group per row ---- */              \
    __kernel void nn_lng_##SFX(BUF(x), int xdt, BUF(sc), int scdt,            \
                               int has_s, BUF(mu), int mudt, BUF(iv),         \
                               int ivdt, BUF(dy), int dydt, BUF(dx), long N)  \
    {                                                                         \
        __local T red[NN_WG];                                                 \
        __global const uchar *xp = PTR(uchar, x), *dyp = PTR(uchar, dy);      \
        __global const uchar *sp = PTR(uchar, sc);                            \
        __global uchar *dxp = PTR(uchar, dx);                                 \
        long row = (long)get_group_id(0), base = row * N;                     \
        int t = (int)get_local_id(0);                                         \
        T mean = LD(PTR(uchar, mu), mudt, row);                               \
        T inv = LD(PTR(uchar, iv), ivdt, row);                                \
        T sg = 0, sgx = 0, B, Cc;                                             \
        for (long k = t; k < N; k += NN_L) {                                 \
            T g = LD(dyp, dydt, base + k);                                    \
            if (has_s)                                                        \
                g *= LD(sp, scdt, k);                                         \
            sg += g;                                                          \
            sgx += g * ((LD(xp, xdt, base + k) - mean) * inv);                \
        }                                                                     \
        sg = nn_sum_##SFX(red, sg);                                           \
        sgx = nn_sum_##SFX(red, sgx);                                         \
        B = N ? -inv * sg / (T)N : (T)0;                                      \
        Cc = N ? -inv * sgx / (T)N : (T)0;                                    \
        for (long k = t; k < N; k += NN_L) {                                 \
            T g = LD(dyp, dydt, base + k);                                    \
            if (has_s)                                                        \
                g *= LD(sp, scdt, k);                                         \
            ST(dxp, xdt, base + k,                                            \
               inv * g + B + Cc * ((LD(xp, xdt, base + k) - mean) * inv));    \
        }                                                                     \
    }                                                                         \
                                                                              \
    /* ---- layer_norm_grad dscale, dbias: one work item per column ---- */ \
    __kernel void nn_lngc_##SFX(BUF(x), int xdt, BUF(mu), int mudt,           \
                                BUF(iv), int ivdt, BUF(dy), int dydt,         \
                                BUF(ds), int dsdt, BUF(db), int dbdt, long M, \
                                long N)                                       \
    {                                                                         \
        __global const uchar *xp = PTR(uchar, x), *dyp = PTR(uchar, dy);      \
        __global const uchar *mp = PTR(uchar, mu), *ip = PTR(uchar, iv);      \
        long j = (long)get_global_id(0);                                      \
        T ads = 0, adb = 0;                                                   \
        if (j >= N)                                                           \
            return;                                                           \
        for (long r = 0; r < M; r++) {                                        \
            T g = LD(dyp, dydt, r * N + j);                                   \
            ads += g * ((LD(xp, xdt, r * N + j) - LD(mp, mudt, r)) *          \
                        LD(ip, ivdt, r));                                     \
            adb += g;                                                         \
        }                                                                     \
        ST(PTR(uchar, ds), dsdt, j, ads);                                     \
        ST(PTR(uchar, db), dbdt, j, adb);                                     \
    }                                                                         \
                                                                              \
    /* ---- group_norm: one work-group per (n, group) ---- */               \
    __kernel void nn_gn_##SFX(BUF(x), int xdt, BUF(sc), int scdt, long scs,   \
                              int has_s, BUF(bi), int bidt, long bis,         \
                              int has_b, BUF(y), BUF(om), int omdt, BUF(oi),  \
                              int oidt, long C, long G, long S, T eps)        \
    {                                                                         \
        __local T red[NN_WG];                                                 \
        __global const uchar *xp = PTR(uchar, x);                             \
        __global const uchar *sp = PTR(uchar, sc), *bp = PTR(uchar, bi);      \
        __global uchar *yp = PTR(uchar, y);                                   \
        long ng = (long)get_group_id(0), n = ng / G, g = ng - n * G;          \
        long cg = C / G, cnt = cg * S, base = (n * C + g * cg) * S;           \
        int t = (int)get_local_id(0);                                         \
        T s = 0, q = 0, mean, inv;                                            \
        for (long k = t; k < cnt; k += NN_L)                                 \
            s += LD(xp, xdt, base + k);                                       \
        s = nn_sum_##SFX(red, s);                                             \
        mean = cnt ? s / (T)cnt : (T)0;                                       \
        for (long k = t; k < cnt; k += NN_L) {                               \
            T d = LD(xp, xdt, base + k) - mean;                               \
            q += d * d;                                                       \
        }                                                                     \
        q = nn_sum_##SFX(red, q);                                             \
        inv = (T)1 / sqrt((cnt ? q / (T)cnt : (T)0) + eps);                   \
        for (long k = t; k < cnt; k += NN_L) {                               \
            long ch = g * cg + k / S;                                         \
            T a = has_s ? inv * LD(sp, scdt, ch * scs) : inv;                 \
            T b = has_b ? LD(bp, bidt, ch * bis) : (T)0;                      \
            ST(yp, xdt, base + k, (LD(xp, xdt, base + k) - mean) * a + b);    \
        }                                                                     \
        if (t == 0) {                                                         \
            ST(PTR(uchar, om), omdt, ng, mean);                               \
            ST(PTR(uchar, oi), oidt, ng, inv);                                \
        }                                                                     \
    }                                                                         \
                                                                              \
    /* ---- group_norm_grad dx: one work-group per (n, group) ---- */       \
    __kernel void nn_gng_##SFX(BUF(x), int xdt, BUF(sc), int scdt, long scs,  \
                               int has_s, BUF(mu), int mudt, BUF(iv),         \
                               int ivdt, BUF(dy), int dydt, BUF(dx), long C,  \
                               long G, long S)                                \
    {                                                                         \
        __local T red[NN_WG];                                                 \
        __global const uchar *xp = PTR(uchar, x), *dyp = PTR(uchar, dy);      \
        __global const uchar *sp = PTR(uchar, sc);                            \
        __global uchar *dxp = PTR(uchar, dx);                                 \
        long ng = (long)get_group_id(0), n = ng / G, g = ng - n * G;          \
        long cg = C / G, cnt = cg * S, base = (n * C + g * cg) * S;           \
        int t = (int)get_local_id(0);                                         \
        T mean = LD(PTR(uchar, mu), mudt, ng);                                \
        T inv = LD(PTR(uchar, iv), ivdt, ng);                                 \
        T A = 0, B = 0, b, c;                                                 \
        for (long k = t; k < cnt; k += NN_L) {                               \
            long ch = g * cg + k / S;                                         \
            T gg = LD(dyp, dydt, base + k);                                   \
            if (has_s)                                                        \
                gg *= LD(sp, scdt, ch * scs);                                 \
            A += gg;                                                          \
            B += gg * ((LD(xp, xdt, base + k) - mean) * inv);                 \
        }                                                                     \
        A = nn_sum_##SFX(red, A);                                             \
        B = nn_sum_##SFX(red, B);                                             \
        if (cnt == 0)                                                         \
            return;                                                           \
        b = -inv * A / (T)cnt;                                                \
        c = -inv * B / (T)cnt;                                                \
        for (long k = t; k < cnt; k += NN_L) {                               \
            long ch = g * cg + k / S;                                         \
            T a = has_s ? inv * LD(sp, scdt, ch * scs) : inv;                 \
            ST(dxp, xdt, base + k,                                            \
               a * LD(dyp, dydt, base + k) + b +                              \
                   c * ((LD(xp, xdt, base + k) - mean) * inv));               \
        }                                                                     \
    }                                                                         \
                                                                              \
    /* ---- group_norm_grad dscale, dbias: one work-group per channel ---- */\
    __kernel void nn_gngc_##SFX(BUF(x), int xdt, BUF(mu), int mudt,           \
                                BUF(iv), int ivdt, BUF(dy), int dydt,         \
                                BUF(ds), int dsdt, BUF(db), int dbdt, long N, \
                                long C, long G, long S)                       \
    {                                                                         \
        __local T red[NN_WG];                                                 \
        __global const uchar *xp = PTR(uchar, x), *dyp = PTR(uchar, dy);      \
        __global const uchar *mp = PTR(uchar, mu), *ip = PTR(uchar, iv);      \
        long ch = (long)get_group_id(0), cg = C / G, m = N * S;               \
        int t = (int)get_local_id(0);                                         \
        T ads = 0, adb = 0;                                                   \
        for (long k = t; k < m; k += NN_L) {                                 \
            long n = k / S, o = (n * C + ch) * S + (k - n * S);               \
            long ng = n * G + ch / cg;                                        \
            T g = LD(dyp, dydt, o);                                           \
            ads += g * ((LD(xp, xdt, o) - LD(mp, mudt, ng)) *                 \
                        LD(ip, ivdt, ng));                                    \
            adb += g;                                                         \
        }                                                                     \
        ads = nn_sum_##SFX(red, ads);                                         \
        adb = nn_sum_##SFX(red, adb);                                         \
        if (t == 0) {                                                         \
            ST(PTR(uchar, ds), dsdt, ch, ads);                                \
            ST(PTR(uchar, db), dbdt, ch, adb);                                \
        }                                                                     \
    }                                                                         \
                                                                              \
    /* log p of a class value: x - lse for logits, ln x (clamped at -1e20,  \
     * so that 0 ln 0 stays 0) for probabilities. */                          \
    static inline T nn_logp_##SFX(T x, T lse, int use_sm)                     \
    {                                                                         \
        T v;                                                                  \
        if (use_sm)                                                           \
            return x - lse;                                                   \
        v = log(x);                                                           \
        return v < (T)-1e20 ? (T)-1e20 : v;                                   \
    }                                                                         \
                                                                              \
    /* ---- cross_entropy: one work-group per sample. x [O, C, I]           \
     * contiguous, sample s = (o, i); loss[s] (reduction none) or the pair  \
     * (loss, weight) into part[2 s, 2 s + 1]. */                             \
    __kernel void nn_ce_##SFX(BUF(x), int xdt, BUF(lab), int ldt, BUF(w),     \
                              int wdt, long ws, int has_w, BUF(sm),           \
                              BUF(loss), int lossdt, BUF(part), long C,       \
                              long inner, int soft, int use_sm, long ignore,  \
                              T eps, int red_none)                            \
    {                                                                         \
        __local T red[NN_WG];                                                 \
        __global const uchar *xp = PTR(uchar, x), *lp = PTR(uchar, lab);      \
        __global const uchar *wp = PTR(uchar, w);                             \
        __global uchar *smp = PTR(uchar, sm);                                 \
        long s = (long)get_group_id(0), o = s / inner, i = s - o * inner;     \
        long base = o * C * inner + i;                                        \
        int t = (int)get_local_id(0);                                         \
        T lse = 0, stl = 0, stw = 0, sl = 0, wsum = 0;                        \
        T ec = eps / (T)C;                                                    \
        {                                                                     \
            T mx = -INFINITY, se = 0;                                         \
            for (long c = t; use_sm && c < C; c += NN_L)                      \
                mx = fmax(mx, LD(xp, xdt, base + c * inner));                 \
            mx = nn_max_##SFX(red, mx);                                       \
            for (long c = t; use_sm && c < C; c += NN_L)                      \
                se += exp(LD(xp, xdt, base + c * inner) - mx);                \
            se = nn_sum_##SFX(red, se);                                       \
            if (use_sm)                                                       \
                lse = mx + log(se);                                           \
        }                                                                     \
        for (long c = t; c < C; c += NN_L) {                                 \
            long off = base + c * inner;                                      \
            T xv = LD(xp, xdt, off), lpv = nn_logp_##SFX(xv, lse, use_sm);    \
            ST(smp, xdt, off, use_sm ? exp(lpv) : xv);                        \
            if (soft) {                                                       \
                T tv = LD(lp, ldt, off);                                      \
                stl += tv * lpv;                                              \
                if (has_w)                                                    \
                    stw += tv * LD(wp, wdt, c * ws);                          \
            }                                                                 \
            if (has_w)                                                        \
                wsum += LD(wp, wdt, c * ws);                                  \
            sl += lpv;                                                        \
        }                                                                     \
        stl = nn_sum_##SFX(red, stl);                                         \
        stw = nn_sum_##SFX(red, stw);                                         \
        sl = nn_sum_##SFX(red, sl);                                           \
        wsum = nn_sum_##SFX(red, wsum);                                       \
        if (t == 0) {                                                         \
            T ce = 0, wv = 0;                                                 \
            if (eps == (T)0)                                                  \
                sl = 0;                                                       \
            if (soft) {                                                       \
                ce = -((T)1 - eps) * stl - ec * sl;                           \
                wv = has_w ? ((T)1 - eps) * stw + ec * wsum : (T)1;           \
            } else {                                                          \
                long yv = nn_ldi(lp, ldt, s);                                 \
                if (yv != ignore && nn_in(yv, C)) {                           \
                    T lpy = nn_logp_##SFX(LD(xp, xdt, base + yv * inner),     \
                                          lse, use_sm);                       \
                    ce = -((T)1 - eps) * lpy - ec * sl;                       \
                    wv = has_w ? ((T)1 - eps) * LD(wp, wdt, yv * ws) +        \
                                     ec * wsum                                \
                               : (T)1;                                        \
                }                                                             \
            }                                                                 \
            if (red_none) {                                                   \
                ST(PTR(uchar, loss), lossdt, s, wv * ce);                     \
            } else {                                                          \
                PTR(T, part)[2 * s] = wv * ce;                                \
                PTR(T, part)[2 * s + 1] = wv;                                 \
            }                                                                 \
        }                                                                     \
    }                                                                         \
                                                                              \
    /* ---- cross_entropy_grad, first pass: per sample its weight and the  \
     * sum of its soft label row into part[2 s, 2 s + 1]. */                 \
    __kernel void nn_cew_##SFX(BUF(lab), int ldt, BUF(w), int wdt, long ws,   \
                               int has_w, BUF(part), long C, long inner,      \
                               int soft, long ignore, T eps)                  \
    {                                                                         \
        __local T red[NN_WG];                                                 \
        __global const uchar *lp = PTR(uchar, lab), *wp = PTR(uchar, w);      \
        long s = (long)get_group_id(0), o = s / inner, i = s - o * inner;     \
        long base = o * C * inner + i;                                        \
        int t = (int)get_local_id(0);                                         \
        T st = 0, stw = 0, wsum = 0, ec = eps / (T)C, wi = 1;                 \
        for (long c = t; c < C; c += NN_L) {                                 \
            T wc = has_w ? LD(wp, wdt, c * ws) : (T)0;                        \
            wsum += wc;                                                       \
            if (soft) {                                                       \
                T tv = LD(lp, ldt, base + c * inner);                         \
                st += tv;                                                     \
                stw += tv * wc;                                               \
            }                                                                 \
        }                                                                     \
        st = nn_sum_##SFX(red, st);                                           \
        stw = nn_sum_##SFX(red, stw);                                         \
        wsum = nn_sum_##SFX(red, wsum);                                       \
        if (t != 0)                                                           \
            return;                                                           \
        if (eps == (T)0)                                                      \
            wsum = 0;                                                         \
        if (soft) {                                                           \
            if (has_w)                                                        \
                wi = ((T)1 - eps) * stw + ec * wsum;                          \
        } else {                                                              \
            long yv = nn_ldi(lp, ldt, s);                                     \
            st = 1;                                                           \
            if (yv == ignore || !nn_in(yv, C))                                \
                wi = 0;                                                       \
            else if (has_w)                                                   \
                wi = ((T)1 - eps) * LD(wp, wdt, yv * ws) + ec * wsum;         \
        }                                                                     \
        PTR(T, part)[2 * s] = wi;                                             \
        PTR(T, part)[2 * s + 1] = st;                                         \
    }                                                                         \
                                                                              \
    /* ---- cross_entropy_grad: one work-group per sample. g = dloss[s]    \
     * (reduction none) or dloss[0] / den[0] (den 1 for sum). */             \
    __kernel void nn_ceg_##SFX(BUF(p), int pdt, BUF(lab), int ldt,            \
                               BUF(dl), int dldt, BUF(part), BUF(den),        \
                               BUF(dx), long C, long inner, int soft,         \
                               int use_sm, long ignore, T eps, int red_none)  \
    {                                                                         \
        __global const uchar *pp = PTR(uchar, p), *lp = PTR(uchar, lab);      \
        __global uchar *dxp = PTR(uchar, dx);                                 \
        long s = (long)get_group_id(0), o = s / inner, i = s - o * inner;     \
        long base = o * C * inner + i, yv = -1;                               \
        int t = (int)get_local_id(0);                                         \
        T e1 = (T)1 - eps, ec = eps / (T)C;                                   \
        T wi = PTR(T, part)[2 * s], st = PTR(T, part)[2 * s + 1];             \
        T g = red_none ? LD(PTR(uchar, dl), dldt, s)                          \
                       : LD(PTR(uchar, dl), dldt, 0) / PTR(T, den)[0];        \
        T gw = g * wi, st1 = e1 * st + eps;                                   \
        bool zero = false;                                                    \
        if (!soft) {                                                          \
            yv = nn_ldi(lp, ldt, s);                                          \
            zero = yv == ignore || !nn_in(yv, C);                             \
        }                                                                     \
        for (long c = t; c < C; c += NN_L) {                                 \
            long off = base + c * inner;                                      \
            T pv = LD(pp, pdt, off), r;                                       \
            if (zero) {                                                       \
                r = 0;                                                        \
            } else if (use_sm) {                                              \
                if (soft)                                                     \
                    r = gw * (pv * st1 - (e1 * LD(lp, ldt, off) + ec));       \
                else                                                          \
                    r = gw * (pv - ec);                                       \
                if (c == yv)                                                  \
                    r -= gw * e1;                                             \
            } else {                                                          \
                if (soft)                                                     \
                    r = -gw * (e1 * LD(lp, ldt, off) + ec) / pv;              \
                else                                                          \
                    r = ec != (T)0 ? -gw * ec / pv : (T)0;                    \
                if (c == yv)                                                  \
                    r -= gw * e1 / pv;                                        \
            }                                                                 \
            ST(dxp, pdt, off, r);                                             \
        }                                                                     \
    }                                                                         \
                                                                              \
    /* ---- mse_loss (kind 0), bce_with_logits (1; 2 with pos_weight pw), \
     * nll_loss (3: x = logp [N, C, K] contiguous, y = the labels, pw the  \
     * class weights [C] with element stride ws, absent when pwdt < 0,     \
     * item s = (n, k)): out[i] for reduction none, else per-group partial  \
     * sums (loss, weight) into part[2 g, 2 g + 1]. */                        \
    __kernel void nn_loss_##SFX(BUF(x), int xdt, BUF(y), int ydt, BUF(pw),    \
                                int pwdt, long ws, int kind, long n, long C,  \
                                long K, long ignore, int red_none, BUF(out),  \
                                int outdt, BUF(part))                         \
    {                                                                         \
        __local T red[NN_WG];                                                 \
        __global const uchar *xp = PTR(uchar, x), *yp = PTR(uchar, y);        \
        __global const uchar *pwp = PTR(uchar, pw);                           \
        T al = 0, aw = 0;                                                     \
        for (long i = (long)get_global_id(0); i < n;                          \
             i += (long)get_global_size(0)) {                                 \
            T l = 0, wt = 0;                                                  \
            if (kind == 3) {                                                  \
                long yv = nn_ldi(yp, ydt, i), nn = i / K;                     \
                if (yv != ignore && nn_in(yv, C)) {                           \
                    wt = pwdt >= 0 ? LD(pwp, pwdt, yv * ws) : (T)1;           \
                    l = -wt * LD(xp, xdt, (nn * C + yv) * K + (i - nn * K));  \
                }                                                             \
            } else {                                                          \
                T v = LD(xp, xdt, i), yv = LD(yp, ydt, i);                    \
                if (kind == 0) {                                              \
                    T d = v - yv;                                             \
                    l = d * d;                                                \
                } else {                                                      \
                    T sp = log1p(exp(-fabs(v)));                              \
                    if (kind == 1)                                            \
                        l = (v > 0 ? v : (T)0) - v * yv + sp;                 \
                    else                                                      \
                        l = ((T)1 - yv) * v +                                 \
                            ((T)1 + (LD(pwp, pwdt, i) - (T)1) * yv) *         \
                                (sp + (v < 0 ? -v : (T)0));                   \
                }                                                             \
            }                                                                 \
            if (red_none) {                                                   \
                ST(PTR(uchar, out), outdt, i, l);                             \
            } else {                                                          \
                al += l;                                                      \
                aw += wt;                                                     \
            }                                                                 \
        }                                                                     \
        al = nn_sum_##SFX(red, al);                                           \
        aw = nn_sum_##SFX(red, aw);                                           \
        if (!red_none) {                                                      \
            if (get_local_id(0) == 0) {                                       \
                PTR(T, part)[2 * get_group_id(0)] = al;                       \
                PTR(T, part)[2 * get_group_id(0) + 1] = aw;                   \
            }                                                                 \
        }                                                                     \
    }                                                                         \
                                                                              \
    /* ---- the scalar of a reduced loss from n partial pairs (a, b), one  \
     * work-group, fixed order. mode 0: sum a; 1: sum a / cnt (NaN for     \
     * cnt 0); 2: sum a / d, d = cnt if cnt >= 0 else sum b, 0 taken as 1; \
     * 3: that divisor of sum a alone (cross_entropy_grad's mean). */       \
    __kernel void nn_fin_##SFX(BUF(part), long n, int mode, long cnt,         \
                               BUF(out), int outdt)                           \
    {                                                                         \
        __local T red[NN_WG];                                                 \
        __global const T *pp = PTR(T, part);                                  \
        int t = (int)get_local_id(0);                                         \
        T sa = 0, sb = 0, r, d;                                               \
        for (long k = t; k < n; k += NN_L) {                                 \
            sa += pp[2 * k];                                                  \
            sb += pp[2 * k + 1];                                              \
        }                                                                     \
        sa = nn_sum_##SFX(red, sa);                                           \
        sb = nn_sum_##SFX(red, sb);                                           \
        if (t != 0)                                                           \
            return;                                                           \
        switch (mode) {                                                       \
        case 0:                                                               \
            r = sa;                                                           \
            break;                                                            \
        case 1:                                                               \
            r = cnt ? sa / (T)cnt : (T)NAN;                                   \
            break;                                                            \
        case 2:                                                               \
            d = cnt >= 0 ? (T)cnt : sb;                                       \
            r = sa / (d != (T)0 ? d : (T)1);                                  \
            break;                                                            \
        default:                                                              \
            d = cnt >= 0 ? (T)cnt : sa;                                       \
            r = d != (T)0 ? d : (T)1;                                         \
            break;                                                            \
        }                                                                     \
        ST(PTR(uchar, out), outdt, 0, r);                                     \
    }                                                                         \
                                                                              \
    /* ---- dropout: keep element i when u(seed, offset + i) >= p, i.e.    \
     * when its 24 Philox bits are >= thr = ceil(p 2^24) (exact). */         \
    __kernel void nn_drop_##SFX(BUF(x), int xdt, BUF(out), BUF(mask),         \
                                long n, ulong seed, ulong offset, long thr,   \
                                int train, T scale)                           \
    {                                                                         \
        long i = (long)get_global_id(0);                                      \
        T v;                                                                  \
        uchar keep = 1;                                                       \
        if (i >= n)                                                           \
            return;                                                           \
        v = LD(PTR(uchar, x), xdt, i);                                        \
        if (train) {                                                          \
            ulong c = offset + (ulong)i;                                      \
            uint4 w = keel_philox(c >> 2, seed);                              \
            bool odd = (c & 1) != 0;                                          \
            /* bit selects, not a 4-way choice: llvm-spirv refuses the      \
             * 2-bit switch -O2 makes of that */                              \
            uint r = (c & 2) ? (odd ? w.w : w.z) : (odd ? w.y : w.x);         \
            keep = (long)(r >> 8) >= thr;                                     \
        }                                                                     \
        PTR(uchar, mask)[i] = keep;                                           \
        ST(PTR(uchar, out), xdt, i, keep ? v * scale : (T)0);                 \
    }                                                                         \
                                                                              \
    /* ---- optimizer updates in place, one work item per element: kind 0  \
     * sgd, 1 momentum, 2 adam / adamw (decay = lr coeff, wd 0). */         \
    __kernel void nn_opt_##SFX(                                               \
        int kind, BUF(p), kdesc pd, int pdt, BUF(g), kdesc gd, int gdt,       \
        BUF(s1), kdesc s1d, BUF(s2), kdesc s2d, long n, T lr, T wd, T mu,     \
        int nesterov, T b1, T b2, T decay, T lr_t, T eps_t)                   \
    {                                                                         \
        __global uchar *pp = PTR(uchar, p);                                   \
        long i = (long)get_global_id(0), po, o1, o2;                          \
        T pv, gg;                                                             \
        if (i >= n)                                                           \
            return;                                                           \
        po = kd_off(&pd, i);                                                  \
        pv = LD(pp, pdt, po);                                                 \
        gg = LD(PTR(uchar, g), gdt, kd_off(&gd, i));                          \
        if (kind == 0) {                                                      \
            pv -= lr * (gg + wd * pv);                                        \
        } else if (kind == 1) {                                               \
            __global uchar *vp = PTR(uchar, s1);                              \
            T v;                                                              \
            o1 = kd_off(&s1d, i);                                             \
            gg += wd * pv;                                                    \
            v = mu * LD(vp, pdt, o1) + gg;                                    \
            ST(vp, pdt, o1, v);                                               \
            pv -= nesterov ? lr * (gg + mu * v) : lr * v;                     \
        } else {                                                              \
            __global uchar *mp = PTR(uchar, s1), *vp = PTR(uchar, s2);        \
            T m, v;                                                           \
            o1 = kd_off(&s1d, i);                                             \
            o2 = kd_off(&s2d, i);                                             \
            gg += wd * pv;                                                    \
            pv -= decay * pv;                                                 \
            m = b1 * LD(mp, pdt, o1) + ((T)1 - b1) * gg;                      \
            v = b2 * LD(vp, pdt, o2) + ((T)1 - b2) * gg * gg;                 \
            ST(mp, pdt, o1, m);                                               \
            ST(vp, pdt, o2, v);                                               \
            pv -= lr_t * m / (sqrt(v) + eps_t);                               \
        }                                                                     \
        ST(pp, pdt, po, pv);                                                  \
    }                                                                         \
                                                                              \
    /* ---- embedding_grad: dtable[v, j] = sum of dout[r, j] over the    \
     * positions r of id v, in increasing r (keys sorted by nn_embg_sort,   \
     * first[v] where v's keys begin); deterministic, no atomics. */        \
    __kernel void nn_embg_##SFX(BUF(keys), BUF(first), BUF(dy), int dydt,     \
                                BUF(out), long V, long D)                     \
    {                                                                         \
        __global const ulong *kp = PTR(ulong, keys);                          \
        __global const long *fp = PTR(long, first);                           \
        __global const uchar *dyp = PTR(uchar, dy);                           \
        long i = (long)get_global_id(0), v, j, e;                             \
        T acc = 0;                                                            \
        if (i >= V * D)                                                       \
            return;                                                           \
        v = i / D;                                                            \
        j = i - v * D;                                                        \
        e = fp[v + 1];                                                        \
        for (long k = fp[v]; k < e; k++)                                      \
            acc += LD(dyp, dydt, (long)(kp[k] & 0xffffffffUL) * D + j);       \
        ST(PTR(uchar, out), dydt, i, acc);                                    \
    }

NN_INST(f32, float, nn_ldf, nn_stf)
#ifdef KEEL_HAS_FP64
NN_INST(f64, double, nn_ldd, nn_std)
#endif

/* embedding_grad, sort keys: id << 32 | position for each id that names a
 * row other than padding_idx, all ones for the others and for the padding
 * up to P (a power of two). */
__kernel void nn_embg_keys(BUF(ids), int idt, long nids, long V, long pad,
                           BUF(keys), long P)
{
    long i = (long)get_global_id(0), id;
    ulong k = ~(ulong)0;
    if (i >= P)
        return;
    if (i < nids) {
        id = nn_ldi(PTR(uchar, ids), idt, i);
        if (id != pad && nn_in(id, V))
            k = ((ulong)id << 32) | (ulong)i;
    }
    PTR(ulong, keys)[i] = k;
}

/* One step (j, k) of an ascending bitonic sort of P keys. The keys are
 * distinct (or all ones), so the result does not depend on the device. */
__kernel void nn_embg_sort(BUF(keys), long P, long j, long k)
{
    __global ulong *kp = PTR(ulong, keys);
    long i = (long)get_global_id(0), l = i ^ j;
    if (i >= P || l <= i)
        return;
    ulong a = kp[i], b = kp[l];
    if ((a > b) == ((i & k) == 0)) {
        kp[i] = b;
        kp[l] = a;
    }
}

/* first[v], v <= V: the first sorted key of id v or above. */
__kernel void nn_embg_first(BUF(keys), long P, long V, BUF(first))
{
    __global const ulong *kp = PTR(ulong, keys);
    long v = (long)get_global_id(0), lo = 0, hi = P;
    ulong key = (ulong)v << 32;
    if (v > V)
        return;
    while (lo < hi) {
        long mid = lo + (hi - lo) / 2;
        if (kp[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    PTR(long, first)[v] = lo;
}

/* embedding: out[r, j] = table[ids[r], j], zeros for padding_idx and ids
 * out of range: a copy of the table's elements by their size es (2 or 4
 * bytes for the _f32 kernel: float32, float16, bfloat16; 8 for _f64). */
#define NN_EMB(SFX, W)                                                        \
    __kernel void nn_embedding_##SFX(BUF(ids), int idt, BUF(w), int es,       \
                                     long ws0, long ws1, long V, long D,      \
                                     long pad, BUF(out), long n)              \
    {                                                                         \
        long i = (long)get_global_id(0), r, j, id, o = -1;                    \
        if (i >= n)                                                           \
            return;                                                           \
        r = i / D;                                                            \
        j = i - r * D;                                                        \
        id = nn_ldi(PTR(uchar, ids), idt, r);                                 \
        if (id != pad && nn_in(id, V))                                        \
            o = id * ws0 + j * ws1;                                           \
        if (es == 2)                                                          \
            PTR(ushort, out)[i] = o < 0 ? (ushort)0 : PTR(ushort, w)[o];      \
        else                                                                  \
            PTR(W, out)[i] = o < 0 ? (W)0 : PTR(W, w)[o];                     \
    }
NN_EMB(f32, uint)
#ifdef KEEL_HAS_FP64
NN_EMB(f64, ulong)
#endif

/* one_hot: out[r, c] = (x[r] == c) as float32, x of any integer dtype. */
__kernel void nn_one_hot_f32(BUF(x), int xdt, BUF(out), long nc, long n)
{
    long i = (long)get_global_id(0), r;
    if (i >= n)
        return;
    r = i / nc;
    PTR(float, out)[i] =
        nn_ldi(PTR(uchar, x), xdt, r) == i - r * nc ? 1.0f : 0.0f;
}
