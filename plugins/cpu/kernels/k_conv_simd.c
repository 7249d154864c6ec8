/*
 * Direct SIMD convolution for small float32 convolutions, with an
 * AVX-512 and an AVX2 + FMA body chosen at run time.
 *
 * With few channels (LeNet's 1 -> 6 and 6 -> 16, 5x5) the per-image GEMMs
 * of im2col + GEMM are too small for a BLAS to run well, and building the
 * column matrix (im2col) and scattering it back (col2im) costs as much as
 * the GEMMs. These primitives compute the sums directly from the NCHW
 * tensors instead, vectorized along an image row: a vector holds 16
 * (AVX-512) or 8 (AVX2) consecutive output (or input) columns, and each kernel tap (i, j) is one
 * masked, shifted load of a row times a broadcast scalar. Lanes whose
 * column lies in the padding or past the row are masked out of the loads,
 * so nothing outside the tensors is read, and the sums take exactly the
 * terms the definition has (no 0 * inf from a column that does not exist;
 * rows wholly in the padding are skipped, as their terms are zero).
 *
 * Masked loads cost time, though (a third on LeNet's second layer, whose
 * 10-column rows use 10 of 16 lanes). Without horizontal padding every
 * real output column reads real input columns, so forward and
 * bwd_filter load whole vectors instead: forward never stores the other
 * lanes; bwd_filter, when each lane is always or never a real column,
 * leaves those lanes' junk out of the final sum. Images whose loads could
 * run past the end of a tensor take the masked loads.
 *
 *   fwd          y[o][oy][ox..] = b[o] + sum_{c,i,j} w[o][c][i][j] *
 *                                 x[c][oy+i-pt][ox+j-pl ..]
 *                blocks of 4 output channels x 4 or 5 row vectors, or
 *                6 x 4, in registers (AVX2: 4 x 2 or 4 x 3)
 *   bwd_data     dx[c][iy][ix..] = b[c] + sum_{o,i,j} w[o][c][i][j] *
 *                                  dy[o][iy+pt-i][ix+pl-j ..]
 *                the same blocks over input channels
 *   bwd_filter   dw[o][c][i][j] = sum_{n,oy,ox} dy[o][oy][ox] *
 *                                 x[c][oy+i-pt][ox+j-pl]
 *                one vector of partial sums per weight, B channels x kw taps
 *                in registers while a row pair streams by; the lanes
 *                are added up once, at the end of the batch
 *
 * Where they apply: stride 1, dilation 1, kw <= 7, rows up to 128 wide,
 * padding smaller than the kernel, and small enough layers (per group:
 * o/g <= 32 and (c/g)*kh*kw <= 256) that GEMMs would be small; the
 * plugin's SIMD level (cpu_isa(): what the CPU has, lowered by
 * KEEL_CPU_ISA) at least AVX2; KEEL_CPU_CONV_SIMD not set to 0 (the
 * switch the tests use to compare both paths). The body is that of the
 * level (kconv_simd_body.h, instantiated in k_conv_simd_avx512.c and
 * k_conv_simd_avx2.c); on a CPU with neither the callers take the
 * im2col + GEMM path. Images are
 * shared over the plugin's pool; bwd_filter gives each share its own
 * partial sums and adds them at the end.
 *
 * Summation order differs from the GEMM path (float32 throughout), so the
 * two agree to rounding, not bit for bit.
 */
#include "kconv_simd.h"
#include "kern.h"

#if defined(__x86_64__) && defined(__GNUC__)

bool cpu_conv_simd_isa(int isa, int prim, const struct conv_simd_geo *g,
                       const float *x, const float *w, const float *bias,
                       const float *dy, float *out)
{
    __builtin_cpu_init();
    if (isa == CPU_ISA_AVX512 && __builtin_cpu_supports("avx512f"))
        return cpu_conv_simd_avx512(prim, g, x, w, bias, dy, out);
    if (isa == CPU_ISA_AVX2 && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma"))
        return cpu_conv_simd_avx2(prim, g, x, w, bias, dy, out);
    return false;
}

#else /* no x86 SIMD bodies on this compiler / architecture */

bool cpu_conv_simd_isa(int isa, int prim, const struct conv_simd_geo *g,
                       const float *x, const float *w, const float *bias,
                       const float *dy, float *out)
{
    (void)isa, (void)prim, (void)g, (void)x, (void)w, (void)bias, (void)dy;
    (void)out;
    return false;
}

#endif

bool cpu_conv_simd(int prim, const struct conv_simd_geo *g, const float *x,
                   const float *w, const float *bias, const float *dy,
                   float *out)
{
    return cpu_conv_simd_isa((int)cpu_isa(), prim, g, x, w, bias, dy, out);
}
