/*
 * bfloat16 <-> float32 block conversions with hand-written AVX2 and
 * AVX-512 bodies, chosen at run time (khalf_isa). The rounding is the
 * kit's (keel_kit_f32_to_bf16): to nearest, ties to even, NaN kept quiet
 * and signed; every path gives the same bits for every input, which
 * tests/test_half_simd.c checks path against path.
 */
#ifndef KEEL_CPU_KHALF_H
#define KEEL_CPU_KHALF_H

#include <stdint.h>

enum khalf_isa { KHALF_SCALAR = 0, KHALF_AVX2 = 1, KHALF_AVX512 = 2 };

/* The best path this CPU and operating system support. */
enum khalf_isa khalf_isa(void);

void khalf_f32_to_bf16(const float *src, uint16_t *dst, int64_t n,
                       enum khalf_isa isa);
void khalf_bf16_to_f32(const uint16_t *src, float *dst, int64_t n,
                       enum khalf_isa isa);

#endif /* KEEL_CPU_KHALF_H */
