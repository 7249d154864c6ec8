/* keel OpenCL C kernels: linalg family (see common.cl).
 *
 * GEMM for matmul, linear and the conv family (host: k_linalg.c,
 * okla_gemm). Per batch z:
 *
 *   C[z] (M x N) = A[z] (M x K) * B[z] (K x N) (+ bias) (+ C[z] when
 *   flags & 2)
 *
 * Every operand is read through element strides (A[m, k] at a + m * ars +
 * k * acs, B likewise, C[m, n] at c + m * ldc + n, bias[m, n] at bias +
 * m * bias_rs + n * bias_cs when flags & 1), so transposed and strided
 * views need no copy. Products and sums run in the dtype's accumulator
 * type (float for float16/bfloat16, which are rounded once on the store).
 *
 * The batch plan `bt` (a struct kdesc by value, filled by the host):
 *   ndim          number of batch dims, 0..2 (z = row-major index over them)
 *   shape[0..1]   the batch dims
 *   stride[0..1]  A's batch strides, stride[2..3] B's, stride[4..5] C's,
 *   stride[6..7]  bias's
 *   shape[2..5]   base element offsets of A, B, C and bias
 *
 * la_gemm_<sfx>: 64 x 64 tiles of C per work group of 16 x 16, K in steps
 * of LA_TK (8) through local memory, 4 x 4 results per work item (rows
 * 4 ty + i, columns 4 tx + j) in four 4-vectors: explicit vectors run as
 * SIMD on CPU drivers (PoCL) as well as on GPUs. la_gemv_<sfx>: one work
 * item per 4 rows (1 when M < 4) of a column of C, for thin problems (M
 * or N small) and K = 0.
 */

#define LA_TM 64
#define LA_TN 64
#define LA_TK 8
#define LA_V4_(T) T##4
#define LA_V4(T) LA_V4_(T)

static inline void la_boff(const kdesc *bt, long z, long *oa, long *ob,
                           long *oc, long *os)
{
    long a = bt->shape[2], b = bt->shape[3], c = bt->shape[4];
    long s = bt->shape[5];

    for (int d = bt->ndim - 1; d >= 0; d--) {
        long n = bt->shape[d];
        long q = z / n, i = z - q * n;
        a += i * bt->stride[d];
        b += i * bt->stride[2 + d];
        c += i * bt->stride[4 + d];
        s += i * bt->stride[6 + d];
        z = q;
    }
    *oa = a;
    *ob = b;
    *oc = c;
    *os = s;
}

/*
 * la_gemm16_<sfx> (float32, float64): the GEMM for CPU devices (PoCL),
 * where a barrier costs a pass over every work item of the group with its
 * registers saved to memory. No local memory and no barrier: each work
 * item keeps an 8 x 32 block of C in sixteen 16-vectors (AVX-512 registers
 * on PoCL) over the whole K, reading two 16-vectors of a row of B (unit
 * column stride required: bcs == 1) and 8 scalars of A per k. Rows past M
 * repeat row M - 1 (their results are not stored); columns past N are read
 * as 0 on the edge tiles only. Work items along dimension 0 take
 * consecutive row blocks of one column panel, so the panel of B they all
 * read stays in cache while they run.
 */
#define LA_G16_ROW(V, i)                                                      \
    {                                                                        \
        const V av = (V)A[ro[i] + ka];                                       \
        c0[i] = mad(av, b0, c0[i]);                                          \
        c1[i] = mad(av, b1, c1[i]);                                          \
    }
#define LA_GEMM16(s, V)                                                      \
    __kernel void la_gemm16_##s(BUF(a), BUF(b), BUF(c), BUF(bias),           \
                                kdesc bt, long M, long N, long K, long ars,  \
                                long acs, long brs, long bcs, long ldc,      \
                                long bias_rs, long bias_cs, int flags)       \
    {                                                                        \
        const long m0 = (long)get_global_id(0) * 8;                          \
        const long n0 = (long)get_global_id(1) * 32;                         \
        long oa, ob, oc, os;                                                 \
        if (n0 >= N || m0 >= M)                                              \
            return;                                                          \
        la_boff(&bt, (long)get_global_id(2), &oa, &ob, &oc, &os);            \
        const __global S_##s *A = PTR(S_##s, a) + oa;                        \
        const __global S_##s *B = PTR(S_##s, b) + ob + n0;                   \
        const long rows = min(M - m0, 8L);                                   \
        long ro[8];                                                          \
        for (int i = 0; i < 8; i++)                                          \
            ro[i] = (m0 + min((long)i, rows - 1)) * ars;                     \
        V c0[8], c1[8];                                                      \
        for (int i = 0; i < 8; i++)                                          \
            c0[i] = c1[i] = (V)0;                                            \
        const bool full = n0 + 32 <= N;                                      \
        for (long k = 0; k < K; k++) {                                       \
            V b0, b1;                                                        \
            if (full) {                                                      \
                b0 = vload16(0, B + k * brs);                                \
                b1 = vload16(1, B + k * brs);                                \
            } else {                                                         \
                S_##s t[32];                                                 \
                for (int j = 0; j < 32; j++)                                 \
                    t[j] = n0 + j < N ? B[k * brs + j] : (S_##s)0;           \
                b0 = vload16(0, t);                                          \
                b1 = vload16(1, t);                                          \
            }                                                                \
            const long ka = k * acs;                                         \
            LA_G16_ROW(V, 0) LA_G16_ROW(V, 1) LA_G16_ROW(V, 2) LA_G16_ROW(V, 3)          \
            LA_G16_ROW(V, 4) LA_G16_ROW(V, 5) LA_G16_ROW(V, 6) LA_G16_ROW(V, 7)          \
        }                                                                    \
        __global S_##s *C = PTR(S_##s, c) + oc;                              \
        const __global S_##s *Sb = PTR(S_##s, bias) + os;                    \
        for (int i = 0; i < rows; i++) {                                     \
            S_##s r[32];                                                     \
            vstore16(c0[i], 0, r);                                           \
            vstore16(c1[i], 1, r);                                           \
            const long gm = m0 + i;                                          \
            for (int j = 0; j < 32 && n0 + j < N; j++) {                     \
                const long gn = n0 + j;                                      \
                S_##s v = r[j];                                              \
                if (flags & 1)                                               \
                    v += Sb[gm * bias_rs + gn * bias_cs];                    \
                if (flags & 2)                                               \
                    v += C[gm * ldc + gn];                                   \
                C[gm * ldc + gn] = v;                                        \
            }                                                                \
        }                                                                    \
    }
LA_GEMM16(f32, float16)
#ifdef KEEL_HAS_FP64
LA_GEMM16(f64, double16)
#endif

#define LA_GEMM(s)                                                           \
    __kernel __attribute__((reqd_work_group_size(16, 16, 1))) void          \
        la_gemm_##s(BUF(a), BUF(b), BUF(c), BUF(bias), kdesc bt, long M,     \
                    long N, long K, long ars, long acs, long brs, long bcs,  \
                    long ldc, long bias_rs, long bias_cs, int flags)         \
    {                                                                        \
        __local A_##s As[LA_TK][LA_TM];                                      \
        __local A_##s Bs[LA_TK][LA_TN];                                      \
        const int tx = get_local_id(0), ty = get_local_id(1);               \
        const int t = ty * 16 + tx;                                          \
        const long m0 = (long)get_group_id(1) * LA_TM;                       \
        const long n0 = (long)get_group_id(0) * LA_TN;                       \
        long oa, ob, oc, os;                                                 \
        la_boff(&bt, (long)get_group_id(2), &oa, &ob, &oc, &os);             \
        const __global S_##s *A = PTR(S_##s, a) + oa;                        \
        const __global S_##s *B = PTR(S_##s, b) + ob;                        \
        LA_V4(A_##s) acc[4];                                                 \
        for (int i = 0; i < 4; i++)                                          \
            acc[i] = (LA_V4(A_##s))0;                                        \
        for (long k0 = 0; k0 < K; k0 += LA_TK) {                             \
            for (int r = 0; r < LA_TK / 4; r++) {                           \
                const int e = t + 256 * r;                                   \
                int mm, ka, nn, kb;                                          \
                /* the unit-stride index fastest across work items */       \
                if (acs == 1) {                                              \
                    mm = e / LA_TK;                                          \
                    ka = e % LA_TK;                                          \
                } else {                                                     \
                    mm = e % LA_TM;                                          \
                    ka = e / LA_TM;                                          \
                }                                                            \
                if (brs == 1 && bcs != 1) {                                  \
                    nn = e / LA_TK;                                          \
                    kb = e % LA_TK;                                          \
                } else {                                                     \
                    nn = e % LA_TN;                                          \
                    kb = e / LA_TN;                                          \
                }                                                            \
                const long gm = m0 + mm, gka = k0 + ka;                      \
                const long gn = n0 + nn, gkb = k0 + kb;                      \
                As[ka][mm] = gm < M && gka < K                               \
                                 ? (A_##s)LD_##s(A, gm * ars + gka * acs)    \
                                 : (A_##s)0;                                 \
                Bs[kb][nn] = gn < N && gkb < K                               \
                                 ? (A_##s)LD_##s(B, gkb * brs + gn * bcs)    \
                                 : (A_##s)0;                                 \
            }                                                                \
            barrier(CLK_LOCAL_MEM_FENCE);                                    \
            for (int kk = 0; kk < LA_TK; kk++) {                             \
                const LA_V4(A_##s) av = vload4(0, &As[kk][ty * 4]);          \
                const LA_V4(A_##s) bv = vload4(0, &Bs[kk][tx * 4]);          \
                acc[0] += av.s0 * bv;                                        \
                acc[1] += av.s1 * bv;                                        \
                acc[2] += av.s2 * bv;                                        \
                acc[3] += av.s3 * bv;                                        \
            }                                                                \
            barrier(CLK_LOCAL_MEM_FENCE);                                    \
        }                                                                    \
        __global S_##s *C = PTR(S_##s, c) + oc;                              \
        const __global S_##s *Sb = PTR(S_##s, bias) + os;                    \
        for (int i = 0; i < 4; i++) {                                        \
            const long gm = m0 + ty * 4 + i;                                 \
            if (gm >= M)                                                     \
                break;                                                       \
            const A_##s r[4] = {acc[i].s0, acc[i].s1, acc[i].s2, acc[i].s3}; \
            for (int j = 0; j < 4; j++) {                                    \
                const long gn = n0 + tx * 4 + j;                             \
                if (gn >= N)                                                 \
                    break;                                                   \
                A_##s v = r[j];                                              \
                if (flags & 1)                                               \
                    v += (A_##s)LD_##s(Sb, gm * bias_rs + gn * bias_cs);     \
                if (flags & 2)                                               \
                    v += (A_##s)LD_##s(C, gm * ldc + gn);                    \
                ST_##s(C, gm * ldc + gn, v);                                 \
            }                                                                \
        }                                                                    \
    }                                                                        \
                                                                             \
    __kernel void la_gemv_##s(BUF(a), BUF(b), BUF(c), BUF(bias), kdesc bt,   \
                              long M, long N, long K, long ars, long acs,    \
                              long brs, long bcs, long ldc, long bias_rs,    \
                              long bias_cs, int flags)                       \
    {                                                                        \
        /* 4 rows per work item, 1 when M < 4 (the host sizes dim 1 so) */  \
        const int R = M >= 4 ? 4 : 1;                                        \
        const long n = get_global_id(0), m0 = get_global_id(1) * R;          \
        long oa, ob, oc, os, mr[4];                                          \
        if (n >= N || m0 >= M)                                               \
            return;                                                          \
        la_boff(&bt, (long)get_global_id(2), &oa, &ob, &oc, &os);            \
        const __global S_##s *A = PTR(S_##s, a) + oa;                        \
        const __global S_##s *B = PTR(S_##s, b) + ob + n * bcs;              \
        __global S_##s *C = PTR(S_##s, c) + oc;                              \
        A_##s v[4];                                                          \
        for (int r = 0; r < 4; r++) {                                        \
            /* rows past M repeat the last one and are not stored */        \
            mr[r] = m0 + r < M ? m0 + r : M - 1;                             \
            v[r] = (A_##s)0;                                                 \
        }                                                                    \
        for (long k = 0; k < K; k++) {                                       \
            const A_##s bk = (A_##s)LD_##s(B, k * brs);                      \
            for (int r = 0; r < R; r++)                                      \
                v[r] += (A_##s)LD_##s(A, mr[r] * ars + k * acs) * bk;        \
        }                                                                    \
        for (int r = 0; r < R && m0 + r < M; r++) {                          \
            const long m = m0 + r;                                           \
            A_##s w = v[r];                                                  \
            if (flags & 1)                                                   \
                w += (A_##s)LD_##s(PTR(S_##s, bias) + os,                    \
                                   m * bias_rs + n * bias_cs);               \
            if (flags & 2)                                                   \
                w += (A_##s)LD_##s(C, m * ldc + n);                          \
            ST_##s(C, m * ldc + n, w);                                       \
        }                                                                    \
    }

FOR_FLOAT(LA_GEMM)
