/*
 * keel OpenCL C kernels — the GEMM of k_linalg.c that the convolutions of
 * k_conv.c run too (host side; kernels in linalg.cl).
 */
#ifndef KEEL_CLK_OKLA_H
#define KEEL_CLK_OKLA_H

#include "ok.h"

/* An operand: a device address (bytes: its span) or a scratch buffer. */
struct okla_mat {
    keel_dptr p;
    uint64_t bytes;
    ok_mem m;
};

struct okla_gemm {
    keel_dtype dt;
    int64_t M, N, K;
    struct okla_mat a, b, c, bias;
    bool has_bias, accum;
    int64_t ars, acs, brs, bcs, ldc, bias_rs, bias_cs;
    int nb;                  /* batch dims, 0..2 */
    int64_t bshape[2];       /* their sizes */
    int64_t abs[2], bbs[2], cbs[2], sbs[2]; /* batch strides, elements */
    int64_t aoff, boff, coff, soff;         /* base offsets, elements */
};

keel_status okla_gemm(const struct ok_launch *l, const struct okla_gemm *g);

#endif /* KEEL_CLK_OKLA_H */
