/*
 * Direct SIMD convolution primitives for small float32 convolutions
 * (k_conv_simd.c; AVX-512 and AVX2 + FMA bodies), used by k_conv.c in
 * place of im2col + GEMM where they apply. See k_conv_simd.c for when that
 * is and how they work.
 */
#ifndef KEEL_CPU_KCONV_SIMD_H
#define KEEL_CPU_KCONV_SIMD_H

#include <stdbool.h>
#include <stdint.h>

/* One conv2d geometry, NCHW, stride 1, dilation 1: input [n, c, h, w],
 * weight [o, c/groups, kh, kw], output [n, o, oh, ow], top and left
 * padding pt, pl (the bottom and right ones follow from oh and ow). */
struct conv_simd_geo {
    int64_t n, c, h, w, o, oh, ow, kh, kw, pt, pl, groups;
    /* CONV_SIMD_FWD only, may be NULL: called with each image's output
     * (o * oh * ow floats) as soon as it is complete, on the thread that
     * computed it, while it is in cache (fused_conv2d's activation). */
    void (*epilogue)(const void *ctx, float *y, int64_t n);
    const void *epilogue_ctx;
};

enum { CONV_SIMD_FWD, CONV_SIMD_BWD_DATA, CONV_SIMD_BWD_FILTER };

/*
 * Runs one primitive over the whole batch, contiguous float32 buffers:
 *
 *   CONV_SIMD_FWD         out = y  = conv(x, w) (+ bias[o])
 *   CONV_SIMD_BWD_DATA    out = dx = conv^T(dy, w) (+ bias[c])
 *   CONV_SIMD_BWD_FILTER  out = dw = sum over images of dy (x) x
 *
 * Returns false, having written nothing, when the primitive does not
 * apply (geometry, SIMD level below AVX2, KEEL_CPU_CONV_SIMD=0, no
 * workspace); the caller then runs its general path. The body is the one
 * of the plugin's SIMD level, cpu_isa().
 */
bool cpu_conv_simd(int prim, const struct conv_simd_geo *g, const float *x,
                   const float *w, const float *bias, const float *dy,
                   float *out);
/* The same with the body of `isa` (enum cpu_isa), for tests: false as
 * well when the CPU lacks that instruction set. */
bool cpu_conv_simd_isa(int isa, int prim, const struct conv_simd_geo *g,
                       const float *x, const float *w, const float *bias,
                       const float *dy, float *out);
/* The bodies; the CPU must have the instruction set. */
bool cpu_conv_simd_avx512(int prim, const struct conv_simd_geo *g,
                          const float *x, const float *w, const float *bias,
                          const float *dy, float *out);
bool cpu_conv_simd_avx2(int prim, const struct conv_simd_geo *g,
                        const float *x, const float *w, const float *bias,
                        const float *dy, float *out);

#endif /* KEEL_CPU_KCONV_SIMD_H */
