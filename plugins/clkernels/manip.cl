/* keel OpenCL C kernels: manip family (see common.cl).
 *
 * concat, stack, split, gather, index_select, scatter, take_along_axis,
 * tile, flip and pad move elements without looking at their values, so
 * their kernels are written per element SIZE (1, 2, 4, 8 bytes as uchar,
 * ushort, uint, ulong: names end in _1, _2, _4, _8) and one instance
 * serves every dtype of that size; float64 moves as ulong. Only scatter's
 * accumulation computes, so it alone is instantiated per dtype.
 *
 * Every kernel runs one work item per element of its index space and
 * computes that element's source offset from the operands' strides
 * (struct kdesc), so strided views are read in place. Outputs are
 * row-major contiguous (the host checks) except the views of the copy
 * kernel, which carries the output's strides.
 *
 * Index values. A kernel cannot report a bad index to the host in time,
 * so they are checked per element: gather, index_select and
 * take_along_axis (which also accepts -size <= i < 0, counted from the
 * end) write zero bits for an index out of range, and scatter ignores an
 * update whose row is out of range.
 */

/* Index element at element offset `off` of an int32 or int64 index. */
static inline long mp_idx(__global const uchar *p, int is32, long off)
{
    return is32 ? (long)((__global const int *)p)[off]
                : ((__global const long *)p)[off];
}

/* Coordinate of *r in a dim of size s; *r becomes the index over the
 * dims before it. (One division: a separate % and / is what llvm-spirv
 * cannot translate once clang has fused them.) */
static inline long mp_coord(long *r, long s)
{
    long t = *r / s, q = *r - t * s;
    *r = t;
    return q;
}

#define MP_SIZES(M) M(uchar, 1) M(ushort, 2) M(uint, 4) M(ulong, 8)

/* ---- strided copy: concat, stack, split, flip ---------------------------
 *
 * out[od at i] = x[xd at i] over xd's shape (od: the output view's
 * strides, same shape); dims whose bit is set in `flip` are read from
 * the far end. */
#define MP_COPY(T, sz)                                                       \
    __kernel void mp_copy_##sz(BUF(x), kdesc xd, BUF(out), kdesc od,        \
                               uint flip, long n)                           \
    {                                                                        \
        long i = get_global_id(0);                                           \
        if (i >= n)                                                          \
            return;                                                          \
        long r = i, xo = 0, oo = 0;                                          \
        for (int d = xd.ndim - 1; d >= 0; d--) {                             \
            long s = xd.shape[d], q = mp_coord(&r, s);                       \
            oo += q * od.stride[d];                                          \
            xo += ((flip >> d) & 1u ? s - 1 - q : q) * xd.stride[d];         \
        }                                                                    \
        PTR(T, out)[oo] = PTR(T, x)[xo];                                     \
    }
MP_SIZES(MP_COPY)

/* ---- gather, index_select, take_along_axis ------------------------------
 *
 * Index space: xd.shape (the contiguous output seen with x's rank). x is
 * read at its strides xd.stride on every dim but `axis`, where the
 * position comes from the index, read at the strides id.stride (0 where
 * it is broadcast). wrap: negative indices count from the end. */
#define MP_TAKE(T, sz)                                                       \
    __kernel void mp_take_##sz(BUF(x), kdesc xd, BUF(ix), kdesc id,         \
                               BUF(out), int axis, long size, int is32,     \
                               int wrap, long n)                            \
    {                                                                        \
        long i = get_global_id(0);                                           \
        if (i >= n)                                                          \
            return;                                                          \
        long r = i, xo = 0, io = 0;                                          \
        for (int d = xd.ndim - 1; d >= 0; d--) {                             \
            long s = xd.shape[d], q = mp_coord(&r, s);                       \
            io += q * id.stride[d];                                          \
            if (d != axis)                                                   \
                xo += q * xd.stride[d];                                      \
        }                                                                    \
        long v = mp_idx(PTR(uchar, ix), is32, io);                           \
        if (wrap && v < 0)                                                   \
            v += size;                                                       \
        PTR(T, out)[i] =                                                     \
            v >= 0 && v < size ? PTR(T, x)[xo + v * xd.stride[axis]] : (T)0; \
    }
MP_SIZES(MP_TAKE)

/* ---- tile ---------------------------------------------------------------
 *
 * Index space: od.shape (the output's). xd: x right-aligned to the
 * output's rank (shape and strides); out[c] = x[c mod xd.shape]. */
#define MP_TILE(T, sz)                                                       \
    __kernel void mp_tile_##sz(BUF(x), kdesc xd, kdesc od, BUF(out),        \
                               long n)                                      \
    {                                                                        \
        long i = get_global_id(0);                                           \
        if (i >= n)                                                          \
            return;                                                          \
        long r = i, xo = 0;                                                  \
        for (int d = od.ndim - 1; d >= 0; d--) {                             \
            long q = mp_coord(&r, od.shape[d]);                              \
            xo += (q % xd.shape[d]) * xd.stride[d];                          \
        }                                                                    \
        PTR(T, out)[i] = PTR(T, x)[xo];                                      \
    }
MP_SIZES(MP_TILE)

/* ---- pad ----------------------------------------------------------------
 *
 * Index space: od.shape (the output's); xd: x's shape and strides;
 * bd.shape: the pad before each dim. mode 0 constant (pat, the value's
 * bits), 1 reflect (the edge is not repeated: x[-1] is x[1]), 2
 * replicate. */

/* Source position of padded position p (relative to x's start) in a dim
 * of size s, or -1 for the constant. */
static inline long mp_pad_src(long p, long s, int mode)
{
    if (p >= 0 && p < s)
        return p;
    if (mode == 0)
        return -1;
    if (mode == 2)
        return p < 0 ? 0 : s - 1;
    return p < 0 ? -p : 2 * (s - 1) - p;
}

#define MP_PAD(T, sz)                                                        \
    __kernel void mp_pad_##sz(BUF(x), kdesc xd, kdesc od, kdesc bd,         \
                              BUF(out), int mode, ulong pat, long n)        \
    {                                                                        \
        long i = get_global_id(0);                                           \
        if (i >= n)                                                          \
            return;                                                          \
        long r = i, xo = 0;                                                  \
        for (int d = od.ndim - 1; d >= 0; d--) {                             \
            long q = mp_coord(&r, od.shape[d]);                              \
            long s = mp_pad_src(q - bd.shape[d], xd.shape[d], mode);         \
            if (s < 0) {                                                     \
                PTR(T, out)[i] = (T)pat;                                     \
                return;                                                      \
            }                                                                \
            xo += s * xd.stride[d];                                          \
        }                                                                    \
        PTR(T, out)[i] = PTR(T, x)[xo];                                      \
    }
MP_SIZES(MP_PAD)

/* ---- scatter ------------------------------------------------------------
 *
 * The updates are bucketed by target row first (mp_scatter_rows, one work
 * item: a counting sort, stable, so each bucket lists its updates in index
 * order): row r's updates are order[start[r] .. start[r + 1]), updates
 * whose row is out of range are dropped. Then one work item per output
 * element: a row without updates copies x; else overwrite takes the last
 * update of the row, accumulate sums the row's updates in index order
 * from zero (float for f32/f16/bf16, double for f64, wrapping int64 for
 * integers, bool: any non-zero). */
__kernel void mp_scatter_rows(BUF(ix), long ist, int is32, long nidx,
                              long rows, BUF(start), BUF(order))
{
    if (get_global_id(0) != 0)
        return;
    __global long *st = PTR(long, start), *ord = PTR(long, order);
    __global const uchar *ip = PTR(uchar, ix);
    for (long r = 0; r <= rows; r++)
        st[r] = 0;
    for (long i = 0; i < nidx; i++) {
        long v = mp_idx(ip, is32, i * ist);
        if (v >= 0 && v < rows)
            st[v + 1]++;
    }
    for (long r = 1; r <= rows; r++)
        st[r] += st[r - 1];
    /* Place by a running fill position per row, kept in st[r] (the start
     * of row r's bucket moves to its end), then shift back. */
    for (long i = 0; i < nidx; i++) {
        long v = mp_idx(ip, is32, i * ist);
        if (v >= 0 && v < rows)
            ord[st[v]++] = i;
    }
    for (long r = rows; r > 0; r--)
        st[r] = st[r - 1];
    st[0] = 0;
}

/* Offsets of output element i (index space sd.shape): x's (sd.stride),
 * the update row's inner part (ud.stride on dims >= 1) and the row. */
static inline long mp_scatter_pos(const kdesc *sd, const kdesc *ud, long i,
                                  long *xo, long *uo)
{
    long r = i, x = 0, u = 0, row = 0;
    for (int d = sd->ndim - 1; d >= 0; d--) {
        long q = mp_coord(&r, sd->shape[d]);
        x += q * sd->stride[d];
        if (d)
            u += q * ud->stride[d];
        else
            row = q;
    }
    *xo = x;
    *uo = u;
    return row;
}

/* has: the buckets exist (an index with elements). */
#define MP_SCATTER_OW(T, sz)                                                 \
    __kernel void mp_scatter_ow_##sz(BUF(x), kdesc xd, BUF(up), kdesc ud,   \
                                     BUF(start), BUF(order), BUF(out),      \
                                     int has, long n)                       \
    {                                                                        \
        long i = get_global_id(0);                                           \
        if (i >= n)                                                          \
            return;                                                          \
        long xo, uo, row = mp_scatter_pos(&xd, &ud, i, &xo, &uo);            \
        long lo = 0, hi = 0;                                                 \
        if (has) {                                                           \
            lo = PTR(long, start)[row];                                      \
            hi = PTR(long, start)[row + 1];                                  \
        }                                                                    \
        PTR(T, out)[i] =                                                     \
            lo == hi ? PTR(T, x)[xo]                                         \
                     : PTR(T, up)[PTR(long, order)[hi - 1] * ud.stride[0] +  \
                                  uo];                                       \
    }
MP_SIZES(MP_SCATTER_OW)

/* Accumulators: AC_<sfx> the type, ADD_<sfx>(acc, p, k) adds element k of
 * p, OUT_<sfx>(out, i, acc) stores. */
#define AC_f32 float
#define AC_f16 float
#define AC_bf16 float
#define AC_f64 double
#define AC_i8 ulong
#define AC_u8 ulong
#define AC_i32 ulong
#define AC_i64 ulong
#define AC_bool ulong
#define ADD_FLOAT(sfx, acc, p, k) ((acc) += LD_##sfx((p), (k)))
#define ADD_f32(acc, p, k) ADD_FLOAT(f32, acc, p, k)
#define ADD_f16(acc, p, k) ADD_FLOAT(f16, acc, p, k)
#define ADD_bf16(acc, p, k) ADD_FLOAT(bf16, acc, p, k)
#define ADD_f64(acc, p, k) ADD_FLOAT(f64, acc, p, k)
#define ADD_INT(acc, p, k) ((acc) += (ulong)(long)(p)[k])
#define ADD_i8(acc, p, k) ADD_INT(acc, p, k)
#define ADD_u8(acc, p, k) ADD_INT(acc, p, k)
#define ADD_i32(acc, p, k) ADD_INT(acc, p, k)
#define ADD_i64(acc, p, k) ADD_INT(acc, p, k)
#define ADD_bool(acc, p, k) ((acc) |= (p)[k] != 0)
#define OUT_FLOAT(sfx, o, i, acc) ST_##sfx((o), (i), (acc))
#define OUT_f32(o, i, acc) OUT_FLOAT(f32, o, i, acc)
#define OUT_f16(o, i, acc) OUT_FLOAT(f16, o, i, acc)
#define OUT_bf16(o, i, acc) OUT_FLOAT(bf16, o, i, acc)
#define OUT_f64(o, i, acc) OUT_FLOAT(f64, o, i, acc)
#define OUT_i8(o, i, acc) ((o)[i] = as_char((uchar)(acc)))
#define OUT_u8(o, i, acc) ((o)[i] = (uchar)(acc))
#define OUT_i32(o, i, acc) ((o)[i] = as_int((uint)(acc)))
#define OUT_i64(o, i, acc) ((o)[i] = as_long(acc))
#define OUT_bool(o, i, acc) ((o)[i] = (uchar)((acc) != 0))

/* The sum is a do-while (the row has at least one update): from a for
 * loop clang -O2 places the loop's exit block before its body, and
 * llvm-spirv keeps that order, which SPIR-V does not allow (spirv-val). */
#define MP_SCATTER_ACC(sfx)                                                  \
    __kernel void mp_scatter_acc_##sfx(BUF(x), kdesc xd, BUF(up), kdesc ud, \
                                       BUF(start), BUF(order), BUF(out),    \
                                       int has, long n)                     \
    {                                                                        \
        long i = get_global_id(0);                                           \
        if (i >= n)                                                          \
            return;                                                          \
        long xo, uo, row = mp_scatter_pos(&xd, &ud, i, &xo, &uo);            \
        long lo = 0, hi = 0;                                                 \
        __global S_##sfx *o = PTR(S_##sfx, out);                             \
        if (has) {                                                           \
            lo = PTR(long, start)[row];                                      \
            hi = PTR(long, start)[row + 1];                                  \
        }                                                                    \
        if (lo == hi) {                                                      \
            o[i] = PTR(S_##sfx, x)[xo];                                      \
            return;                                                          \
        }                                                                    \
        __global const S_##sfx *u = PTR(S_##sfx, up);                        \
        __global const long *ord = PTR(long, order);                         \
        AC_##sfx acc = 0;                                                    \
        long c = lo;                                                         \
        do                                                                   \
            ADD_##sfx(acc, u, ord[c] * ud.stride[0] + uo);                   \
        while (++c < hi);                                                    \
        OUT_##sfx(o, i, acc);                                                \
    }
FOR_ALL(MP_SCATTER_ACC)
