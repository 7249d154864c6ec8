/*
 * bfloat16 <-> float32 block conversions (khalf.h).
 *
 * float32 -> bfloat16 adds 0x7fff plus the lowest kept bit and keeps the
 * upper half (round to nearest even; a carry into the exponent rounds up
 * to the next binade or to infinity, as it should); a NaN instead keeps
 * its upper half with the quiet bit set, so that rounding cannot turn it
 * into infinity. bfloat16 -> float32 is exact: the bits move up by 16.
 */
#include <stdatomic.h>
#include <string.h>

#include <keel/kit.h>

#include "khalf.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KHALF_X86 1
#endif

static void to_bf16_scalar(const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = keel_kit_f32_to_bf16(src[i]);
}

static void from_bf16_scalar(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;

        memcpy(&dst[i], &u, sizeof(float));
    }
}

#ifdef KHALF_X86
__attribute__((target("avx2"))) static void to_bf16_avx2(const float *src,
                                                          uint16_t *dst,
                                                          int64_t n)
{
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i bias = _mm256_set1_epi32(0x7fff);
    const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
    const __m256i inf = _mm256_set1_epi32(0x7f800000);
    const __m256i quiet = _mm256_set1_epi32(0x40);
    int64_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i hi = _mm256_srli_epi32(x, 16);
        __m256i lsb = _mm256_and_si256(hi, one);
        __m256i r = _mm256_srli_epi32(
            _mm256_add_epi32(x, _mm256_add_epi32(bias, lsb)), 16);
        /* |x| > inf as signed 32-bit: both sides are non-negative */
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, absmask), inf);
        __m256i p;

        r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, quiet), nan);
        /* 8 x 32 -> 8 x 16: pack within lanes, then gather qwords 0, 2 */
        p = _mm256_packus_epi32(r, r);
        p = _mm256_permute4x64_epi64(p, 0x08);
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_castsi256_si128(p));
    }
    to_bf16_scalar(src + i, dst + i, n - i);
}

__attribute__((target("avx2"))) static void from_bf16_avx2(const uint16_t *src,
                                                            float *dst,
                                                            int64_t n)
{
    int64_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);

        _mm256_storeu_si256((__m256i *)(dst + i), w);
    }
    from_bf16_scalar(src + i, dst + i, n - i);
}

__attribute__((target("avx512f,avx512bw"))) static void
to_bf16_avx512(const float *src, uint16_t *dst, int64_t n)
{
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i bias = _mm512_set1_epi32(0x7fff);
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff);
    const __m512i inf = _mm512_set1_epi32(0x7f800000);
    const __m512i quiet = _mm512_set1_epi32(0x40);
    int64_t i = 0;

    for (; i + 16 <= n; i += 16) {
        __m512i x = _mm512_loadu_si512((const void *)(src + i));
        __m512i hi = _mm512_srli_epi32(x, 16);
        __m512i lsb = _mm512_and_si512(hi, one);
        __m512i r = _mm512_srli_epi32(
            _mm512_add_epi32(x, _mm512_add_epi32(bias, lsb)), 16);
        __mmask16 nan =
            _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, absmask), inf);

        r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(hi, quiet));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(r));
    }
    to_bf16_scalar(src + i, dst + i, n - i);
}

__attribute__((target("avx512f,avx512bw"))) static void
from_bf16_avx512(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;

    for (; i + 16 <= n; i += 16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(src + i));
        __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);

        _mm512_storeu_si512((void *)(dst + i), w);
    }
    from_bf16_scalar(src + i, dst + i, n - i);
}

static enum khalf_isa detect(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
        return KHALF_AVX512;
    if (__builtin_cpu_supports("avx2"))
        return KHALF_AVX2;
    return KHALF_SCALAR;
}
#else
static enum khalf_isa detect(void)
{
    return KHALF_SCALAR;
}
#endif

enum khalf_isa khalf_isa(void)
{
    static atomic_int cached = -1;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);

    if (v < 0) {
        v = (int)detect();
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return (enum khalf_isa)v;
}

void khalf_f32_to_bf16(const float *src, uint16_t *dst, int64_t n,
                       enum khalf_isa isa)
{
#ifdef KHALF_X86
    if (isa == KHALF_AVX512) {
        to_bf16_avx512(src, dst, n);
        return;
    }
    if (isa == KHALF_AVX2) {
        to_bf16_avx2(src, dst, n);
        return;
    }
#endif
    (void)isa;
    to_bf16_scalar(src, dst, n);
}

void khalf_bf16_to_f32(const uint16_t *src, float *dst, int64_t n,
                       enum khalf_isa isa)
{
#ifdef KHALF_X86
    if (isa == KHALF_AVX512) {
        from_bf16_avx512(src, dst, n);
        return;
    }
    if (isa == KHALF_AVX2) {
        from_bf16_avx2(src, dst, n);
        return;
    }
#endif
    (void)isa;
    from_bf16_scalar(src, dst, n);
}
