/*
 * keel CUDA plugin — reductions, cumsum and the softmax family:
 *
 *   sum mean max min prod argmax argmin var std logsumexp all any
 *   cumsum softmax log_softmax softmax_grad log_softmax_grad
 *
 * Operands, attributes, dtypes and numerics are those of the CPU plugin's
 * kernels (plugins/cpu/kernels/k_reduce.c), which the conformance suite
 * compares against.
 *
 * GEOMETRY. The host splits the input's dimensions into "kept" ones (the
 * output's index space, or one line per index) and "reduced" ones (folded
 * into one output, or scanned along), drops size-1 dimensions and merges
 * neighbours of one kind whose strides allow it (struct rgeo, struct
 * sgeo). Merging keeps row-major order, so the linear index over the
 * reduced dimensions is the one argmax reports and the order cumsum scans.
 * Offsets are found by unravelling a linear index (one division per extra
 * dimension; merged views usually leave one, and two reduced dimensions
 * are walked incrementally). Outputs may be strided; the one layout not
 * handled is a strided cumsum output of another shape than the input
 * (NOT_SUPPORTED).
 *
 * REDUCTIONS. An op is a small functor (init, acc, comb, fin) over a POD
 * state. red_kernel runs "tasks" on blocks of RB threads; a block holds
 * RB / tpo tasks of tpo threads each. Row-major blocks (tpo adjacent
 * threads per task) read a stride-1 reduced dimension coalesced and
 * combine with warp shuffles, then shared memory; column-major blocks
 * (neighbouring threads on neighbouring outputs) serve "reduce outer, keep
 * inner" layouts and combine through shared memory. A task is one output,
 * or, when a few outputs have long reductions (a full sum, say), one of P
 * contiguous parts of an output's reduced range: the parts' states go to
 * stream-ordered scratch and red_fin_kernel combines them in order.
 * var/std and logsumexp take two reductions, as the CPU does: the mean
 * (maximum) per output into scratch, then the squared deviations (the
 * exp-sum) around it.
 *
 * PRECISION (as the CPU): float32/float16/bfloat16 are read as float and
 * summed and multiplied in double, float64 in double, integers and bool in
 * wrapping 64-bit arithmetic. max/min propagate NaN; argmax/argmin report
 * the first NaN if there is one, else the first index of the extreme.
 * logsumexp's exponentials and the softmax family compute in float
 * (double for float64) after subtracting the maximum, with sums in double.
 *
 * CUMSUM. One thread per line when the lines are many and neighbouring
 * lines are neighbours in memory; otherwise one warp per line (or per part
 * of a long line) scanning 32 elements at a time with shuffles. Parts of a
 * split line get their carries from a totals pass and a per-line scan of
 * the totals.
 *
 * SOFTMAX. One group of tpl threads (a block, a warp or part of a warp,
 * by line length) per line along the axis: maximum, exp-sum, outputs
 * (grads: one sum, outputs); one thread per line for many lines whose
 * neighbours are neighbours in memory.
 *
 * Empty outputs launch nothing; an empty reduction gives the identity (sum
 * 0, prod 1, mean/var NaN, logsumexp -inf, all true, any false).
 */
#include <string.h>

#include "keel_gpu.h" /* CUDART_INF, CUDART_NAN in the HIP build */
#ifndef KEEL_GPU_HIP
#include <math_constants.h>
#endif

#include "ck.cuh"

namespace {

/* X if B, else Y (type selection without the standard library). */
template <bool B, class X, class Y> struct pick { typedef X type; };
template <class X, class Y> struct pick<false, X, Y> { typedef Y type; };

#define RB 256           /* threads per block of every kernel here */
#define TARGET (1 << 18) /* threads that keep a large GPU busy */
#define SPLIT_MIN 32768  /* shortest reduction (line) worth splitting */
#define PART_MIN 4096    /* fewest elements per part of a split */
#define PART_MAX 1024    /* most parts per output (line) */

/* ---- geometry ------------------------------------------------------------ */

/* A reduction: kept dims k*, reduced dims r* (input element strides), the
 * output's own dims o* (size-1 dims dropped) for its element offsets. */
struct rgeo {
    int nk, nr, ond, ocontig;
    int odt, oes;
    int64_t nout, nred;
    int64_t kshape[KEEL_MAX_DIMS], kx[KEEL_MAX_DIMS];
    int64_t rshape[KEEL_MAX_DIMS], rx[KEEL_MAX_DIMS];
    int64_t oshape[KEEL_MAX_DIMS], ost[KEEL_MAX_DIMS];
    const char *x;
    char *out;
    const double *param; /* per-output parameter of a second pass */
};

/* Lines along some dims (cumsum, softmax): strides for input x, input y
 * (grads only) and the output, which has x's index space. */
struct sgeo {
    int nk, nr;
    int xes, oes, odt;
    int64_t nout, nred;
    int64_t kshape[KEEL_MAX_DIMS], kx[KEEL_MAX_DIMS], ky[KEEL_MAX_DIMS],
        ko[KEEL_MAX_DIMS];
    int64_t rshape[KEEL_MAX_DIMS], rx[KEEL_MAX_DIMS], ry[KEEL_MAX_DIMS],
        ro[KEEL_MAX_DIMS];
    const char *x, *y;
    char *out;
};

/* Append a dim of length len to a list, merged into the last one when
 * every operand's stride allows (prev stride == stride * len). */
void push_dim(int *n, int64_t *shape, int64_t *const *st, const int64_t *v,
              int nst, int64_t len)
{
    int k = *n;
    bool merge = k > 0;

    for (int i = 0; i < nst && merge; i++)
        merge = st[i][k - 1] == v[i] * len;
    if (merge) {
        shape[k - 1] *= len;
        for (int i = 0; i < nst; i++)
            st[i][k - 1] = v[i];
        return;
    }
    shape[k] = len;
    for (int i = 0; i < nst; i++)
        st[i][k] = v[i];
    *n = k + 1;
}

/* Offset (in elements) of linear index i over n dims. */
__device__ __forceinline__ int64_t unravel(int64_t i, int n,
                                           const int64_t *shape,
                                           const int64_t *st)
{
    int64_t off = 0;

    for (int d = n - 1; d > 0; d--) {
        int64_t q = i / shape[d];
        off += (i - q * shape[d]) * st[d];
        i = q;
    }
    return n > 0 ? off + i * st[0] : off;
}

/* ---- storing ------------------------------------------------------------- */

/* Float to integer as C casts, saturating, NaN to 0 (the CPU's kstore). */
__device__ int64_t sat(double v, double lo, double hi)
{
    if (v != v)
        return 0;
    if (v <= lo)
        return (int64_t)lo;
    if (v >= hi)
        return (int64_t)hi;
    return (int64_t)v;
}

/* A double result into an element of dtype odt (half types via float). */
__device__ void store_d(char *p, int odt, double v)
{
    switch (odt) {
    case KEEL_F32: *(float *)p = (float)v; break;
    case KEEL_F64: *(double *)p = v; break;
    case KEEL_F16: *(ck_half *)p = ck_f2h((float)v); break;
    case KEEL_BF16:
        *(ck_bf16 *)p = ck_f2bf((float)v);
        break;
    case KEEL_I8: *(int8_t *)p = (int8_t)sat(v, -128.0, 127.0); break;
    case KEEL_U8: *(uint8_t *)p = (uint8_t)sat(v, 0.0, 255.0); break;
    case KEEL_I32:
        *(int32_t *)p = (int32_t)sat(v, -2147483648.0, 2147483647.0);
        break;
    case KEEL_I64:
        *(int64_t *)p =
            sat(v, -9223372036854775808.0, 9223372036854774784.0);
        break;
    default: *(uint8_t *)p = v != 0.0; break; /* bool */
    }
}

/* An integer result: integers wrap, bool is != 0, floats via double. */
__device__ void store_i(char *p, int odt, int64_t v)
{
    switch (odt) {
    case KEEL_I64: *(int64_t *)p = v; break;
    case KEEL_I32: *(int32_t *)p = (int32_t)v; break;
    case KEEL_I8: *(int8_t *)p = (int8_t)v; break;
    case KEEL_U8: *(uint8_t *)p = (uint8_t)v; break;
    case KEEL_BOOL: *(uint8_t *)p = v != 0; break;
    default: store_d(p, odt, (double)v); break;
    }
}

/* ---- group reductions ---------------------------------------------------- */

/* Shuffle any 4-byte-multiple POD between lanes (all 32 lanes active). */
template <class S> __device__ __forceinline__ S shfl_xor_pod(S v, int m)
{
    static_assert(sizeof(S) % 4 == 0, "state size must be 4k bytes");
    unsigned w[sizeof(S) / 4];

    memcpy(w, &v, sizeof(S));
    for (int i = 0; i < (int)(sizeof(S) / 4); i++)
        w[i] = ck_shfl_xor(w[i], m);
    memcpy(&v, w, sizeof(S));
    return v;
}

/*
 * Combine v over each task's tpo threads of an RB-thread block; every
 * thread gets its task's result. Row-major: thread tid serves task tid /
 * tpo (lanes of a task adjacent); column-major: task tid % (RB / tpo).
 * tpo is a power of two <= RB, uniform over the block, so every
 * __syncthreads below is reached by all threads. f.comb must be
 * commutative (up to rounding). sm: RB elements of shared memory.
 */
template <class S, class F>
__device__ S grp_reduce(S v, const F &f, int tpo, bool rowmaj, S *sm)
{
    int tid = threadIdx.x;

    if (tpo == 1)
        return v;
    if (rowmaj) {
        int w = tpo < 32 ? tpo : 32;
        /* xor offsets below tpo stay inside an aligned group of lanes */
        for (int m = w >> 1; m > 0; m >>= 1)
            v = f.comb(v, shfl_xor_pod(v, m));
        if (tpo <= 32)
            return v;
        __syncthreads();
        if ((tid & 31) == 0)
            sm[tid >> 5] = v;
        __syncthreads();
        int nw = tpo >> 5, w0 = (tid / tpo) * nw;
        S r = sm[w0];
        for (int k = 1; k < nw; k++)
            r = f.comb(r, sm[w0 + k]);
        return r;
    }
    int opb = RB / tpo, slot = tid % opb;
    __syncthreads();
    sm[tid] = v;
    __syncthreads();
    S r = sm[slot];
    for (int k = 1; k < tpo; k++)
        r = f.comb(r, sm[k * opb + slot]);
    return r;
}

/* ---- reduction ops ------------------------------------------------------- */

/* Result of an output: double for float results, int64 otherwise. */
struct res {
    double d;
    int64_t i;
};

template <class T> struct lim {
    typedef typename ck_compute<T>::C C;
    static __device__ C lo()
    {
        if constexpr (ck_is_float<T>::v)
            return (C)-CUDART_INF;
        else if constexpr (sizeof(T) == 1)
            return (C)((T)-1 < (T)0 ? INT8_MIN : 0);
        else if constexpr (sizeof(T) == 4)
            return (C)INT32_MIN;
        else
            return (C)INT64_MIN;
    }
    static __device__ C hi()
    {
        if constexpr (ck_is_float<T>::v)
            return (C)CUDART_INF;
        else if constexpr (sizeof(T) == 1)
            return (C)((T)-1 < (T)0 ? INT8_MAX : UINT8_MAX);
        else if constexpr (sizeof(T) == 4)
            return (C)INT32_MAX;
        else
            return (C)INT64_MAX;
    }
};

/* An element as double (floats) or as wrapping 64-bit (integers). */
template <class T> __device__ __forceinline__ double ld_d(const char *p)
{
    return (double)ck_ld<T>(p);
}
template <class T>
__device__ __forceinline__ unsigned long long ld_u(const char *p)
{
    return (unsigned long long)(long long)ck_ld<T>(p);
}

/* sum: floats in double, integers (bool as uint8) wrapping in 64 bits. */
template <class T> struct op_sum {
    typedef T elem;
    static const bool F = ck_is_float<T>::v;
    typedef typename pick<F, double, unsigned long long>::type S;
    __device__ S init() const { return 0; }
    __device__ void acc(S &s, const char *p, int64_t, double) const
    {
        if constexpr (F)
            s += ld_d<T>(p);
        else
            s += ld_u<T>(p);
    }
    __device__ S comb(S a, S b) const { return a + b; }
    __device__ res fin(S s, double, int64_t) const
    {
        if constexpr (F)
            return res{(double)s, 0};
        else
            return res{0.0, (int64_t)s};
    }
    static const bool is_int = !F;
};

/* mean (floats): sum / count, NaN for an empty reduction. */
template <class T> struct op_mean : op_sum<T> {
    __device__ res fin(double s, double, int64_t n) const
    {
        return res{n > 0 ? s / (double)n : CUDART_NAN, 0};
    }
};

template <class T> struct op_prod {
    typedef T elem;
    static const bool F = ck_is_float<T>::v;
    typedef typename pick<F, double, unsigned long long>::type S;
    __device__ S init() const { return 1; }
    __device__ void acc(S &s, const char *p, int64_t, double) const
    {
        if constexpr (F)
            s *= ld_d<T>(p);
        else
            s *= ld_u<T>(p);
    }
    __device__ S comb(S a, S b) const { return a * b; }
    __device__ res fin(S s, double, int64_t) const
    {
        if constexpr (F)
            return res{(double)s, 0};
        else
            return res{0.0, (int64_t)s};
    }
    static const bool is_int = !F;
};

/* max (MX) or min in the compute type; a NaN, once seen, stays. */
template <class T, bool MX> struct op_ext {
    typedef T elem;
    typedef typename ck_compute<T>::C S;
    static const bool is_int = !ck_is_float<T>::v;
    __device__ S init() const { return MX ? lim<T>::lo() : lim<T>::hi(); }
    __device__ S comb(S a, S b) const
    {
        bool take = MX ? b > a : b < a;
        if constexpr (!is_int)
            take = take || b != b;
        return take ? b : a;
    }
    __device__ void acc(S &s, const char *p, int64_t, double) const
    {
        s = comb(s, ck_ld<T>(p));
    }
    __device__ res fin(S s, double, int64_t) const
    {
        if constexpr (is_int)
            return res{0.0, (int64_t)s};
        else
            return res{(double)s, 0};
    }
};

/* argmax (MX) / argmin: (value, first index); i < 0 is "nothing yet". */
template <class C> struct argst {
    C v;
    long long i;
};

template <class T, bool MX> struct op_arg {
    typedef T elem;
    typedef typename ck_compute<T>::C C;
    typedef argst<C> S;
    static const bool is_int = true;
    __device__ S init() const { return S{(C)0, -1}; }
    /* The earlier of a and b (by index) unless the other one wins. */
    __device__ S comb(S a, S b) const
    {
        if (a.i < 0)
            return b;
        if (b.i < 0)
            return a;
        S first = a.i <= b.i ? a : b, second = a.i <= b.i ? b : a;
        if constexpr (ck_is_float<T>::v) {
            if (first.v != first.v)
                return first;
            if (second.v != second.v)
                return second;
        }
        bool wins = MX ? second.v > first.v : second.v < first.v;
        return wins ? second : first;
    }
    __device__ void acc(S &s, const char *p, int64_t r, double) const
    {
        s = comb(s, S{ck_ld<T>(p), (long long)r});
    }
    __device__ res fin(S s, double, int64_t) const
    {
        return res{0.0, (int64_t)s.i};
    }
};

/* all (AL) / any: a flag; half types test their bits (NaN true, -0
 * false), bool is read as its byte. */
template <class T, bool AL> struct op_nz {
    typedef T elem;
    typedef int S;
    static const bool is_int = true;
    __device__ S init() const { return AL ? 1 : 0; }
    __device__ S comb(S a, S b) const { return AL ? (a & b) : (a | b); }
    __device__ void acc(S &s, const char *p, int64_t, double) const
    {
        int nz;
        if constexpr (ck_is_float<T>::v && sizeof(T) == 2)
            nz = (*(const uint16_t *)p & 0x7fffu) != 0;
        else
            nz = *(const T *)p != (T)0;
        s = comb(s, nz);
    }
    __device__ res fin(S s, double, int64_t) const
    {
        return res{0.0, (int64_t)s};
    }
};

/* Second pass of var/std: squared deviations from the mean (param). */
template <class T> struct op_sqdev {
    typedef T elem;
    typedef double S;
    static const bool is_int = false;
    bool unbiased, root;
    __device__ S init() const { return 0.0; }
    __device__ S comb(S a, S b) const { return a + b; }
    __device__ void acc(S &s, const char *p, int64_t, double mu) const
    {
        double d = ld_d<T>(p) - mu;
        s += d * d;
    }
    __device__ res fin(S s, double, int64_t n) const
    {
        double den = (double)n - (unbiased ? 1.0 : 0.0);
        double v = den > 0 ? s / den : CUDART_NAN;
        return res{root ? sqrt(v) : v, 0};
    }
};

__device__ __forceinline__ float exp_c(float v) { return expf(v); }
__device__ __forceinline__ double exp_c(double v) { return exp(v); }

/* Second pass of logsumexp: sum of e^(x - m) around the maximum (param,
 * NaN when the input has one). */
template <class T> struct op_sumexp {
    typedef T elem;
    typedef typename ck_compute<T>::C C;
    typedef double S;
    static const bool is_int = false;
    __device__ S init() const { return 0.0; }
    __device__ S comb(S a, S b) const { return a + b; }
    __device__ void acc(S &s, const char *p, int64_t, double m) const
    {
        s += (double)exp_c(ck_ld<T>(p) - (C)m);
    }
    __device__ res fin(S s, double m, int64_t) const
    {
        if (m != m || isinf(m))
            return res{m, 0};
        return res{m + log(s), 0};
    }
};

/* ---- reduction kernels --------------------------------------------------- */

template <class Op>
__device__ __forceinline__ void red_store(const Op &op, const rgeo &g,
                                          int64_t o,
                                          const typename Op::S &s,
                                          double prm)
{
    res r = op.fin(s, prm, g.nred);
    int64_t off = g.ocontig ? o : unravel(o, g.ond, g.oshape, g.ost);
    char *p = g.out + off * g.oes;

    if (Op::is_int)
        store_i(p, g.odt, r.i);
    else
        store_d(p, g.odt, r.d);
}

/*
 * Task t = p * nout + o reduces the reduced indices [p * chunk, (p + 1) *
 * chunk) of output o (p = 0 and chunk = nred unless split). With part
 * set, the task's state goes to part[t]; else the output is written.
 * Tiles of RB / tpo tasks advance block-uniformly, so idle threads of the
 * last tile still take part in grp_reduce.
 */
template <class Op>
__global__ void __launch_bounds__(RB)
    red_kernel(const Op op, const __grid_constant__ rgeo g, int64_t tasks,
               int64_t chunk, int tpo, int rowmaj, typename Op::S *part)
{
    typedef typename Op::S S;
    __shared__ S sm[RB];
    const int64_t es = sizeof(typename Op::elem);
    int tid = threadIdx.x, opb = RB / tpo;
    int slot = rowmaj ? tid / tpo : tid % opb;
    int slice = rowmaj ? tid % tpo : tid / opb;

    for (int64_t tile = blockIdx.x; tile * opb < tasks; tile += gridDim.x) {
        int64_t t = tile * opb + slot, o = 0;
        double prm = 0.0;
        S s = op.init();

        if (t < tasks) {
            int64_t p = t / g.nout;
            int64_t r0 = p * chunk, r1 = r0 + chunk;
            o = t - p * g.nout;
            if (r1 > g.nred)
                r1 = g.nred;
            const char *base = g.x + unravel(o, g.nk, g.kshape, g.kx) * es;
            if (g.param)
                prm = g.param[o];
            if (g.nr == 1) {
                for (int64_t r = r0 + slice; r < r1; r += tpo)
                    op.acc(s, base + r * g.rx[0] * es, r, prm);
            } else if (g.nr == 2) {
                /* r = i0 * n1 + i1, advanced by tpo = q * n1 + d */
                int64_t n1 = g.rshape[1], q = tpo / n1, d = tpo - q * n1;
                int64_t r = r0 + slice, i0 = r / n1, i1 = r - i0 * n1;
                for (; r < r1; r += tpo) {
                    op.acc(s, base + (i0 * g.rx[0] + i1 * g.rx[1]) * es, r,
                           prm);
                    i0 += q;
                    i1 += d;
                    if (i1 >= n1) {
                        i1 -= n1;
                        i0++;
                    }
                }
            } else {
                for (int64_t r = r0 + slice; r < r1; r += tpo)
                    op.acc(s,
                           base + unravel(r, g.nr, g.rshape, g.rx) * es, r,
                           prm);
            }
        }
        s = grp_reduce(s, op, tpo, rowmaj != 0, sm);
        if (t < tasks && slice == 0) {
            if (part)
                part[t] = s;
            else
                red_store(op, g, o, s, prm);
        }
    }
}

/* Combine the parts of each output in order and write it. */
template <class Op>
__global__ void __launch_bounds__(RB)
    red_fin_kernel(const Op op, const __grid_constant__ rgeo g,
                   int64_t nparts, const typename Op::S *part)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;

    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         o < g.nout; o += step) {
        typename Op::S s = part[o];
        for (int64_t p = 1; p < nparts; p++)
            s = op.comb(s, part[p * g.nout + o]);
        red_store(op, g, o, s, g.param ? g.param[o] : 0.0);
    }
}

/* Enqueue one reduction (see the top comment for the layouts). */
template <class Op>
keel_status red_run(const struct ck_launch *l, const Op &op, const rgeo &g)
{
    typedef typename Op::S S;
    bool col = g.nk > 0 && g.kx[g.nk - 1] == 1 && g.rx[g.nr - 1] != 1;
    int64_t nparts = 1, chunk = g.nred, tasks;
    S *part = NULL;
    int tpo;
    keel_status st;

    if (g.nout <= 0)
        return KEEL_STATUS_OK;
    if (col)
        tpo = g.nred >= 64 ? 8 : 1;
    else if (g.nred <= 32)
        for (tpo = 1; tpo < g.nred; tpo <<= 1)
            ;
    else
        tpo = g.nred < 4096 ? 32 : RB;
    if (g.nred >= SPLIT_MIN && g.nout * tpo < TARGET) {
        nparts = TARGET / (g.nout * tpo);
        if (nparts > g.nred / PART_MIN)
            nparts = g.nred / PART_MIN;
        if (nparts > PART_MAX)
            nparts = PART_MAX;
        if (nparts < 2)
            nparts = 1;
        chunk = (g.nred + nparts - 1) / nparts;
    }
    tasks = g.nout * nparts;
    if (nparts > 1) {
        st = ck_scratch(l, (size_t)tasks * sizeof(S), (void **)&part);
        if (st)
            return st;
    }
    red_kernel<Op><<<ck_grid(tasks, RB / tpo), RB, 0, l->stream>>>(
        op, g, tasks, chunk, tpo, col ? 0 : 1, part);
    if (nparts > 1) {
        red_fin_kernel<Op><<<ck_grid(g.nout, RB), RB, 0, l->stream>>>(
            op, g, nparts, part);
        ck_scratch_free(l, part);
    }
    return KEEL_STATUS_OK;
}

/* Per-output doubles from a first reduction (mean, maximum) into scratch,
 * then the second reduction around them. */
template <class Op1, class Op2>
keel_status red_two_pass(const struct ck_launch *l, const Op1 &op1,
                         const Op2 &op2, const rgeo &g)
{
    rgeo g1 = g, g2 = g;
    double *prm = NULL;
    keel_status st;

    if (g.nout <= 0)
        return KEEL_STATUS_OK;
    st = ck_scratch(l, (size_t)g.nout * sizeof(double), (void **)&prm);
    if (st)
        return st;
    g1.out = (char *)prm;
    g1.odt = KEEL_F64;
    g1.oes = 8;
    g1.ocontig = 1;
    g1.param = NULL;
    g2.param = prm;
    st = red_run(l, op1, g1);
    if (!st)
        st = red_run(l, op2, g2);
    ck_scratch_free(l, prm);
    return st;
}

/* ---- reduction entry points ---------------------------------------------- */

enum rkind {
    R_SUM,
    R_MEAN,
    R_MAX,
    R_MIN,
    R_PROD,
    R_ARGMAX,
    R_ARGMIN,
    R_VAR,
    R_STD,
    R_LSE,
    R_ALL,
    R_ANY
};

/* Names by kind (dtypes and empty reductions: the kit's check). */
const struct {
    const char *name;
} rinfo[] = {
    {"sum"}, {"mean"}, {"max"}, {"min"}, {"prod"}, {"argmax"},
    {"argmin"}, {"var"}, {"std"}, {"logsumexp"}, {"all"}, {"any"},
};

template <class T>
keel_status red_typed(const struct ck_launch *l, int kind, const rgeo &g,
                      bool unbiased)
{
    switch (kind) {
    case R_SUM: return red_run(l, op_sum<T>(), g);
    case R_PROD: return red_run(l, op_prod<T>(), g);
    case R_MAX: return red_run(l, op_ext<T, true>(), g);
    case R_MIN: return red_run(l, op_ext<T, false>(), g);
    case R_ARGMAX: return red_run(l, op_arg<T, true>(), g);
    case R_ARGMIN: return red_run(l, op_arg<T, false>(), g);
    case R_ALL: return red_run(l, op_nz<T, true>(), g);
    case R_ANY: return red_run(l, op_nz<T, false>(), g);
    default: break;
    }
    if constexpr (ck_is_float<T>::v) {
        switch (kind) {
        case R_MEAN: return red_run(l, op_mean<T>(), g);
        case R_VAR:
        case R_STD: {
            op_sqdev<T> sq;
            sq.unbiased = unbiased;
            sq.root = kind == R_STD;
            return red_two_pass(l, op_mean<T>(), sq, g);
        }
        case R_LSE:
            return red_two_pass(l, op_ext<T, true>(), op_sumexp<T>(), g);
        default: break;
        }
    }
    return ck_fail(KEEL_STATUS_INVALID_ARGUMENT, "%s: unsupported dtype",
                   rinfo[kind].name);
}

/* Run STMT with T bound to the storage type of dt; bool is read as its
 * byte (uint8_t), as the CPU plugin does. */
#define RED_SWITCH(dt, T, STMT, FALLBACK)                                    \
    switch (dt) {                                                            \
    case KEEL_F32: { typedef float T; STMT; } break;                         \
    case KEEL_F64: { typedef double T; STMT; } break;                        \
    case KEEL_F16: { typedef ck_half T; STMT; } break;                        \
    case KEEL_BF16: { typedef ck_bf16 T; STMT; } break;                \
    case KEEL_I8: { typedef int8_t T; STMT; } break;                         \
    case KEEL_U8:                                                            \
    case KEEL_BOOL: { typedef uint8_t T; STMT; } break;                      \
    case KEEL_I32: { typedef int32_t T; STMT; } break;                       \
    case KEEL_I64: { typedef int64_t T; STMT; } break;                       \
    default: FALLBACK;                                                       \
    }

/* A descriptor with elements has data: the kit checks shapes and dtypes
 * but never looks at the address. */
keel_status data_check(const keel_tensor_desc *d, const char *op,
                       const char *what)
{
    if (!d->data && ck_numel(d) > 0)
        return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: %s has elements but no data", op, what);
    return KEEL_STATUS_OK;
}

keel_status red_geom(const keel_kernel_args *a, const char *op, rgeo *g)
{
    const keel_tensor_desc *x = &a->inputs[0], *out = &a->outputs[0];
    int64_t *kst[1] = {g->kx}, *rst[1] = {g->rx}, *ost[1] = {g->ost};
    uint32_t mask = keel_kit_reduce_mask(a, x->ndim);
    keel_status st;

    if ((st = data_check(x, op, "the input")) ||
        (st = data_check(out, op, "the output")))
        return st;
    g->nk = g->nr = g->ond = 0;
    g->nout = g->nred = 1;
    for (int d = 0; d < x->ndim; d++) {
        int64_t len = x->shape[d], s = x->strides[d];
        if (mask & (1u << d)) {
            g->nred *= len;
            if (len != 1)
                push_dim(&g->nr, g->rshape, rst, &s, 1, len);
        } else {
            g->nout *= len;
            if (len != 1)
                push_dim(&g->nk, g->kshape, kst, &s, 1, len);
        }
    }
    if (g->nr == 0 || g->nred == 0) {
        /* nothing reduced (one pseudo element), or an empty reduction:
         * one dim, so the kernels never divide by a zero extent */
        g->nr = 1;
        g->rshape[0] = g->nred;
        g->rx[0] = 0;
    }
    for (int d = 0; d < out->ndim; d++)
        if (out->shape[d] != 1)
            push_dim(&g->ond, g->oshape, ost, &out->strides[d], 1,
                     out->shape[d]);
    g->ocontig = ck_contig(out);
    g->odt = out->dtype;
    g->oes = (int)keel_dtype_size(out->dtype);
    g->x = (const char *)(uintptr_t)x->data;
    g->out = (char *)(uintptr_t)out->data;
    g->param = NULL;
    return KEEL_STATUS_OK;
}

keel_status reduce_entry(const keel_kernel_args *a, int kind)
{
    const char *op = rinfo[kind].name;
    struct ck_launch l;
    keel_status st = ck_begin(a, op, &l);
    rgeo g;

    if (st)
        return st;
    /* keel_kit_check (in ck_begin) has checked the operand counts, the
     * dtype, the axes, the output's shape and dtype and the empty
     * reductions without an identity. */
    if ((st = red_geom(a, op, &g)))
        return st;
    keel_dtype dt = a->inputs[0].dtype;
    if (g.nout == 0)
        return KEEL_STATUS_OK;
    bool unbiased = ck_attr_i(a, "unbiased", 1) != 0;
    RED_SWITCH(dt, T, (st = red_typed<T>(&l, kind, g, unbiased)),
               return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                              "%s: unknown input dtype", op))
    if (st)
        return st;
    return ck_end(&l);
}

#define REDUCE_KERNEL(fn, kind)                                              \
    keel_status fn(void *, const keel_kernel_args *a)                        \
    {                                                                        \
        return reduce_entry(a, kind);                                        \
    }

REDUCE_KERNEL(k_sum, R_SUM)
REDUCE_KERNEL(k_mean, R_MEAN)
REDUCE_KERNEL(k_max, R_MAX)
REDUCE_KERNEL(k_min, R_MIN)
REDUCE_KERNEL(k_prod, R_PROD)
REDUCE_KERNEL(k_argmax, R_ARGMAX)
REDUCE_KERNEL(k_argmin, R_ARGMIN)
REDUCE_KERNEL(k_var, R_VAR)
REDUCE_KERNEL(k_std, R_STD)
REDUCE_KERNEL(k_logsumexp, R_LSE)
REDUCE_KERNEL(k_all, R_ALL)
REDUCE_KERNEL(k_any, R_ANY)

/* ---- lines (cumsum, softmax) --------------------------------------------- */

/*
 * Lines geometry of x (and y) with the output's strides os[] over x's
 * dims: dims in `mask` are along the line, the others index lines.
 */
void sgeo_build(sgeo *g, const keel_tensor_desc *x, const keel_tensor_desc *y,
                const int64_t *os, uint32_t mask)
{
    int64_t *kst[3] = {g->kx, g->ky, g->ko}, *rst[3] = {g->rx, g->ry, g->ro};

    g->nk = g->nr = 0;
    g->nout = g->nred = 1;
    for (int d = 0; d < x->ndim; d++) {
        int64_t len = x->shape[d];
        int64_t v[3] = {x->strides[d], y ? y->strides[d] : 0, os[d]};
        if (mask & (1u << d)) {
            g->nred *= len;
            if (len != 1)
                push_dim(&g->nr, g->rshape, rst, v, 3, len);
        } else {
            g->nout *= len;
            if (len != 1)
                push_dim(&g->nk, g->kshape, kst, v, 3, len);
        }
    }
    if (g->nr == 0) {
        g->nr = 1;
        g->rshape[0] = 1;
        g->rx[0] = g->ry[0] = g->ro[0] = 0;
    }
    g->x = (const char *)(uintptr_t)x->data;
    g->y = y ? (const char *)(uintptr_t)y->data : NULL;
    g->xes = (int)keel_dtype_size(x->dtype);
}

/* Offsets of line o's first element in x, y and the output. */
__device__ __forceinline__ void line_offsets(const sgeo &g, int64_t o,
                                             int64_t *xo, int64_t *yo,
                                             int64_t *oo)
{
    *xo = *yo = *oo = 0;
    for (int d = g.nk - 1; d >= 0; d--) {
        int64_t q = d > 0 ? o / g.kshape[d] : 0, i = o - q * g.kshape[d];
        *xo += i * g.kx[d];
        *yo += i * g.ky[d];
        *oo += i * g.ko[d];
        o = q;
    }
}

/* ---- cumsum -------------------------------------------------------------- */

/* Carry type (double for floats, wrapping 64 bits for integers). */
template <class T> struct scan_t {
    static const bool F = ck_is_float<T>::v;
    typedef typename pick<F, double, unsigned long long>::type A;
    static __device__ __forceinline__ A ld(const char *p)
    {
        if constexpr (F)
            return ld_d<T>(p);
        else
            return ld_u<T>(p);
    }
    static __device__ __forceinline__ void st(char *p, int odt, A v)
    {
        if constexpr (F)
            store_d(p, odt, v);
        else
            store_i(p, odt, (int64_t)v);
    }
};

/* Element r of a line: offsets in x and the output. */
__device__ __forceinline__ void scan_offsets(const sgeo &g, int64_t r,
                                             int64_t *xo, int64_t *oo)
{
    if (g.nr == 1) {
        *xo = r * g.rx[0];
        *oo = r * g.ro[0];
        return;
    }
    *xo = unravel(r, g.nr, g.rshape, g.rx);
    *oo = unravel(r, g.nr, g.rshape, g.ro);
}

/* One thread per line, sequentially (lines with one reduced dim). */
template <class T>
__global__ void __launch_bounds__(RB)
    scan_line_kernel(const __grid_constant__ sgeo g)
{
    typedef typename scan_t<T>::A A;
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    const int64_t es = sizeof(T);

    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         o < g.nout; o += step) {
        int64_t xo, yo, oo;
        A c = 0;
        line_offsets(g, o, &xo, &yo, &oo);
        for (int64_t r = 0; r < g.nred; r++) {
            c += scan_t<T>::ld(g.x + (xo + r * g.rx[0]) * es);
            scan_t<T>::st(g.out + (oo + r * g.ro[0]) * g.oes, g.odt, c);
        }
    }
}

/* Warp w of the grid takes tasks t = line * nparts + p, part p being the
 * line's elements [p * chunk, (p + 1) * chunk). */
#define WARP_TASKS(t, ntasks)                                                \
    for (int64_t t = (int64_t)blockIdx.x * (RB / 32) + (threadIdx.x >> 5);   \
         t < (ntasks); t += (int64_t)gridDim.x * (RB / 32))

/* Totals of the parts of split lines (first pass). */
template <class T>
__global__ void __launch_bounds__(RB)
    scan_total_kernel(const __grid_constant__ sgeo g, int64_t nparts,
                      int64_t chunk, typename scan_t<T>::A *tot)
{
    typedef typename scan_t<T>::A A;
    const int64_t es = sizeof(T);
    int lane = threadIdx.x & 31;

    WARP_TASKS(t, g.nout * nparts)
    {
        int64_t line = t / nparts, p = t - line * nparts;
        int64_t r0 = p * chunk, r1 = r0 + chunk, xo, yo, oo, xr, orr;
        A s = 0;
        if (r1 > g.nred)
            r1 = g.nred;
        line_offsets(g, line, &xo, &yo, &oo);
        for (int64_t r = r0 + lane; r < r1; r += 32) {
            scan_offsets(g, r, &xr, &orr);
            s += scan_t<T>::ld(g.x + (xo + xr) * es);
        }
        s = ck_warp_sum(s);
        if (lane == 0)
            tot[t] = s;
    }
}

/* Part totals into each part's carry: an exclusive scan per line. */
template <class A>
__global__ void __launch_bounds__(RB)
    scan_carry_kernel(int64_t nlines, int64_t nparts, A *tot)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;

    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         o < nlines; o += step) {
        A c = 0;
        for (int64_t p = 0; p < nparts; p++) {
            A v = tot[o * nparts + p];
            tot[o * nparts + p] = c;
            c += v;
        }
    }
}

/* Scan each part 32 elements at a time from its carry (0 unless split). */
template <class T>
__global__ void __launch_bounds__(RB)
    scan_warp_kernel(const __grid_constant__ sgeo g, int64_t nparts,
                     int64_t chunk, const typename scan_t<T>::A *carry)
{
    typedef typename scan_t<T>::A A;
    const int64_t es = sizeof(T);
    int lane = threadIdx.x & 31;

    WARP_TASKS(t, g.nout * nparts)
    {
        int64_t line = t / nparts, p = t - line * nparts;
        int64_t r0 = p * chunk, r1 = r0 + chunk, xo, yo, oo, xr = 0, orr = 0;
        A c = carry ? carry[t] : (A)0;
        if (r1 > g.nred)
            r1 = g.nred;
        line_offsets(g, line, &xo, &yo, &oo);
        for (int64_t b = r0; b < r1; b += 32) {
            int64_t r = b + lane;
            A v = 0;
            if (r < r1) {
                scan_offsets(g, r, &xr, &orr);
                v = scan_t<T>::ld(g.x + (xo + xr) * es);
            }
            /* inclusive scan over the warp's 32 lanes */
            for (int k = 1; k < 32; k <<= 1) {
                A u = ck_shfl_up(v, k);
                if (lane >= k)
                    v += u;
            }
            v += c;
            if (r < r1)
                scan_t<T>::st(g.out + (oo + orr) * g.oes, g.odt, v);
            c = ck_shfl(v, 31);
        }
    }
}

template <class T>
keel_status scan_run(const struct ck_launch *l, const sgeo &g)
{
    typedef typename scan_t<T>::A A;
    int64_t nparts = 1, chunk = g.nred;
    A *tot = NULL;
    keel_status st;

    if (g.nk > 0 && g.kx[g.nk - 1] == 1 && g.ko[g.nk - 1] == 1 &&
        g.nr == 1 && g.rx[0] != 1 && g.nout >= 4096) {
        scan_line_kernel<T><<<ck_grid(g.nout, RB), RB, 0, l->stream>>>(g);
        return KEEL_STATUS_OK;
    }
    if (g.nred >= SPLIT_MIN && g.nout * 32 < TARGET) {
        nparts = TARGET / (g.nout * 32);
        if (nparts > g.nred / PART_MIN)
            nparts = g.nred / PART_MIN;
        if (nparts > PART_MAX)
            nparts = PART_MAX;
        if (nparts < 2)
            nparts = 1;
        chunk = (g.nred + nparts - 1) / nparts;
    }
    int64_t tasks = g.nout * nparts;
    unsigned grid = ck_grid(tasks, RB / 32);
    if (nparts > 1) {
        st = ck_scratch(l, (size_t)tasks * sizeof(A), (void **)&tot);
        if (st)
            return st;
        scan_total_kernel<T><<<grid, RB, 0, l->stream>>>(g, nparts, chunk,
                                                         tot);
        scan_carry_kernel<A><<<ck_grid(g.nout, RB), RB, 0, l->stream>>>(
            g.nout, nparts, tot);
    }
    scan_warp_kernel<T><<<grid, RB, 0, l->stream>>>(g, nparts, chunk, tot);
    ck_scratch_free(l, tot);
    return KEEL_STATUS_OK;
}

keel_status k_cumsum(void *, const keel_kernel_args *a)
{
    struct ck_launch l;
    keel_status st = ck_begin(a, "cumsum", &l);
    int64_t os[KEEL_MAX_DIMS], acc = 1;
    uint32_t mask;
    sgeo g;

    if (st)
        return st;
    /* The kit has checked the axis (one or none: flattened, every dim
     * scanned) and the output's shape and dtype. */
    const keel_tensor_desc *x = &a->inputs[0], *out = &a->outputs[0];
    if ((st = data_check(x, "cumsum", "the input")) ||
        (st = data_check(out, "cumsum", "the output")))
        return st;
    mask = keel_kit_reduce_mask(a, x->ndim);
    /* The output in x's index space: its own strides when it has x's
     * shape, else (the flattened form) it must be dense. */
    bool same = out->ndim == x->ndim;
    for (int d = 0; d < x->ndim && same; d++)
        same = out->shape[d] == x->shape[d];
    if (!same && !ck_contig(out))
        return ck_fail(KEEL_STATUS_NOT_SUPPORTED,
                       "cumsum: a strided output of another shape than the "
                       "input is not supported");
    for (int d = x->ndim - 1; d >= 0; d--) {
        os[d] = same ? out->strides[d] : acc;
        acc *= x->shape[d];
    }
    sgeo_build(&g, x, NULL, os, mask);
    g.out = (char *)(uintptr_t)out->data;
    g.odt = out->dtype;
    g.oes = (int)keel_dtype_size(out->dtype);
    if (g.nout == 0 || g.nred == 0)
        return KEEL_STATUS_OK;
    CK_SWITCH_NUMERIC(x->dtype, T, (st = scan_run<T>(&l, g)),
                      return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                                     "cumsum: unknown input dtype"))
    if (st)
        return st;
    return ck_end(&l);
}

/* ---- softmax family ------------------------------------------------------ */

enum smkind { SM_SOFTMAX, SM_LOG_SOFTMAX, SM_GRAD, SM_LOG_GRAD };

const char *const sm_names[] = {"softmax", "log_softmax", "softmax_grad",
                                "log_softmax_grad"};

template <class C> struct comb_max_nan {
    __device__ C comb(C a, C b) const { return (b > a || b != b) ? b : a; }
};
struct comb_plus {
    __device__ double comb(double a, double b) const { return a + b; }
};

/* The output value of element (x, y) of a line, given the line's maximum
 * m and its shift sh (log-sum or sum) or inverse sum inv. */
template <class C>
__device__ __forceinline__ C sm_value(int kind, C x, C y, C m, C sh, C inv)
{
    switch (kind) {
    case SM_SOFTMAX: return exp_c(x - m) * inv;
    case SM_LOG_SOFTMAX: return (x - m) - sh;
    case SM_GRAD: return x * (y - sh);
    default: return y - exp_c(x) * sh;
    }
}

/* A line's element of x (or y) as the compute type. */
#define SM_LD(base, off) ((C)ck_ld<T>((base) + (off) * es))

/*
 * Lines of one reduced dim (stride rx, ry, ro), tpl threads per line
 * (row-major groups, see grp_reduce). Forward: the maximum, the exp-sum,
 * the outputs; grads: sum(x * y) or sum(y), the outputs.
 */
template <class T>
__global__ void __launch_bounds__(RB)
    sm_group_kernel(const __grid_constant__ sgeo g, int kind, int tpl)
{
    typedef typename ck_compute<T>::C C;
    __shared__ C smc[RB];
    __shared__ double smd[RB];
    const int64_t es = sizeof(T), n = g.nred;
    const int64_t rx = g.rx[0], ry = g.ry[0], ro = g.ro[0];
    int tid = threadIdx.x, lpb = RB / tpl, slot = tid / tpl;
    int slice = tid % tpl;

    for (int64_t tile = blockIdx.x; tile * lpb < g.nout;
         tile += gridDim.x) {
        int64_t line = tile * lpb + slot, xo = 0, yo = 0, oo = 0;
        bool act = line < g.nout;
        C m = 0, sh, inv = 0;
        double s = 0.0;

        if (act)
            line_offsets(g, line, &xo, &yo, &oo);
        if (kind <= SM_LOG_SOFTMAX) {
            C mt = (C)-CUDART_INF;
            for (int64_t r = slice; act && r < n; r += tpl)
                mt = comb_max_nan<C>().comb(mt, SM_LD(g.x, xo + r * rx));
            m = grp_reduce(mt, comb_max_nan<C>(), tpl, true, smc);
            for (int64_t r = slice; act && r < n; r += tpl)
                s += (double)exp_c(SM_LD(g.x, xo + r * rx) - m);
        } else if (kind == SM_GRAD) {
            for (int64_t r = slice; act && r < n; r += tpl)
                s += (double)SM_LD(g.x, xo + r * rx) *
                     (double)SM_LD(g.y, yo + r * ry);
        } else {
            for (int64_t r = slice; act && r < n; r += tpl)
                s += (double)SM_LD(g.y, yo + r * ry);
        }
        s = grp_reduce(s, comb_plus(), tpl, true, smd);
        if (kind <= SM_LOG_SOFTMAX) {
            sh = (C)log(s);
            inv = (C)(1.0 / s);
        } else {
            sh = (C)s;
        }
        for (int64_t r = slice; act && r < n; r += tpl) {
            C xv = SM_LD(g.x, xo + r * rx);
            C yv = kind >= SM_GRAD ? SM_LD(g.y, yo + r * ry) : (C)0;
            store_d(g.out + (oo + r * ro) * g.oes, g.odt,
                    (double)sm_value<C>(kind, xv, yv, m, sh, inv));
        }
    }
}

/* One thread per line, for many lines whose neighbours are adjacent. */
template <class T>
__global__ void __launch_bounds__(RB)
    sm_line_kernel(const __grid_constant__ sgeo g, int kind)
{
    typedef typename ck_compute<T>::C C;
    const int64_t es = sizeof(T), n = g.nred;
    const int64_t rx = g.rx[0], ry = g.ry[0], ro = g.ro[0];
    int64_t step = (int64_t)gridDim.x * blockDim.x;

    for (int64_t line = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         line < g.nout; line += step) {
        int64_t xo, yo, oo;
        C m = 0, sh, inv = 0;
        double s = 0.0;

        line_offsets(g, line, &xo, &yo, &oo);
        if (kind <= SM_LOG_SOFTMAX) {
            m = (C)-CUDART_INF;
            for (int64_t r = 0; r < n; r++)
                m = comb_max_nan<C>().comb(m, SM_LD(g.x, xo + r * rx));
            for (int64_t r = 0; r < n; r++)
                s += (double)exp_c(SM_LD(g.x, xo + r * rx) - m);
            sh = (C)log(s);
            inv = (C)(1.0 / s);
        } else {
            for (int64_t r = 0; r < n; r++)
                s += kind == SM_GRAD ? (double)SM_LD(g.x, xo + r * rx) *
                                           (double)SM_LD(g.y, yo + r * ry)
                                     : (double)SM_LD(g.y, yo + r * ry);
            sh = (C)s;
        }
        for (int64_t r = 0; r < n; r++) {
            C xv = SM_LD(g.x, xo + r * rx);
            C yv = kind >= SM_GRAD ? SM_LD(g.y, yo + r * ry) : (C)0;
            store_d(g.out + (oo + r * ro) * g.oes, g.odt,
                    (double)sm_value<C>(kind, xv, yv, m, sh, inv));
        }
    }
}

template <class T>
keel_status sm_run(const struct ck_launch *l, const sgeo &g, int kind)
{
    int last = g.nk - 1, tpl;

    if (g.nk > 0 && g.kx[last] == 1 && g.ko[last] == 1 &&
        (kind < SM_GRAD || g.ky[last] == 1) && g.rx[0] != 1 &&
        g.nout >= 4096) {
        sm_line_kernel<T><<<ck_grid(g.nout, RB), RB, 0, l->stream>>>(g,
                                                                     kind);
        return KEEL_STATUS_OK;
    }
    if (g.nred <= 32)
        for (tpl = 1; tpl < g.nred; tpl <<= 1)
            ;
    else
        tpl = g.nred < 2048 ? 32 : RB;
    sm_group_kernel<T><<<ck_grid(g.nout, RB / tpl), RB, 0, l->stream>>>(
        g, kind, tpl);
    return KEEL_STATUS_OK;
}

keel_status softmax_entry(const keel_kernel_args *a, int kind)
{
    const char *op = sm_names[kind];
    int nin = kind >= SM_GRAD ? 2 : 1;
    struct ck_launch l;
    keel_status st = ck_begin(a, op, &l);
    sgeo g;

    if (st)
        return st;
    /* The kit has checked the counts, the floating dtype, the axis and
     * that inputs and output share one shape and dtype. */
    const keel_tensor_desc *x = &a->inputs[0], *o = &a->outputs[0];
    const keel_tensor_desc *y = nin == 2 ? &a->inputs[1] : NULL;
    if ((st = data_check(o, op, "the output")))
        return st;
    for (int i = 0; i < nin; i++)
        if ((st = data_check(&a->inputs[i], op, "an input")))
            return st;
    int axis = keel_kit_axis_0d(ck_attr_i(a, "axis", -1), x->ndim);
    sgeo_build(&g, x, y, o->strides, x->ndim ? 1u << axis : 0);
    g.out = (char *)(uintptr_t)o->data;
    g.odt = o->dtype;
    g.oes = (int)keel_dtype_size(o->dtype);
    if (g.nout == 0 || g.nred == 0)
        return KEEL_STATUS_OK;
    CK_SWITCH_FLOAT(x->dtype, T, (st = sm_run<T>(&l, g, kind)),
                    return ck_fail(KEEL_STATUS_INVALID_ARGUMENT,
                                   "%s: unknown input dtype", op))
    if (st)
        return st;
    return ck_end(&l);
}

keel_status k_softmax(void *, const keel_kernel_args *a)
{
    return softmax_entry(a, SM_SOFTMAX);
}
keel_status k_log_softmax(void *, const keel_kernel_args *a)
{
    return softmax_entry(a, SM_LOG_SOFTMAX);
}
keel_status k_softmax_grad(void *, const keel_kernel_args *a)
{
    return softmax_entry(a, SM_GRAD);
}
keel_status k_log_softmax_grad(void *, const keel_kernel_args *a)
{
    return softmax_entry(a, SM_LOG_GRAD);
}

} // namespace

#if CK_HOST_PASS
extern "C" const struct ck_entry ck_kernels_reduce[] = {
    {"sum", KEEL_DT_ALL, k_sum},
    {"mean", KEEL_DT_FLOAT, k_mean},
    {"max", KEEL_DT_NUMERIC, k_max},
    {"min", KEEL_DT_NUMERIC, k_min},
    {"prod", KEEL_DT_NUMERIC, k_prod},
    {"argmax", KEEL_DT_NUMERIC, k_argmax},
    {"argmin", KEEL_DT_NUMERIC, k_argmin},
    {"var", KEEL_DT_FLOAT, k_var},
    {"std", KEEL_DT_FLOAT, k_std},
    {"logsumexp", KEEL_DT_FLOAT, k_logsumexp},
    {"all", KEEL_DT_ALL, k_all},
    {"any", KEEL_DT_ALL, k_any},
    {"cumsum", KEEL_DT_NUMERIC, k_cumsum},
    {"softmax", KEEL_DT_FLOAT, k_softmax},
    {"log_softmax", KEEL_DT_FLOAT, k_log_softmax},
    {"softmax_grad", KEEL_DT_FLOAT, k_softmax_grad},
    {"log_softmax_grad", KEEL_DT_FLOAT, k_log_softmax_grad},
    {NULL, 0, NULL},
};
#endif

