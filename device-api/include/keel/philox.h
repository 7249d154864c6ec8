/*
 * keel's counter-based random numbers: Philox-4x32-10 (Salmon et al.,
 * "Parallel random numbers: as easy as 1, 2, 3", SC'11), and the mapping
 * from (seed, counter) to the values the catalog's random ops produce.
 * Every plugin must produce exactly these values, so that the same seed
 * gives the same numbers on every device; this header is the reference.
 *
 *   counter c -> block c / 4, lane c % 4
 *   words     = philox4x32_10(ctr = {block_lo, block_hi, 0, 0},
 *                             key = {seed_lo, seed_hi})
 *   u(seed,c) = (words[lane] >> 8) * 2^-24            in [0, 1)
 *
 * uniform element i:   low + (high - low) * u(seed, offset + i)
 * normal element i:    u1 = u(seed, offset + 2i), u2 = u(seed, offset+2i+1)
 *                      mean + std * sqrt(-2 ln(1 - u1)) * cos(2 pi u2)
 * randint element i:   low + floor(u(seed, offset + i) * (high - low))
 * bernoulli element i: u(seed, offset + i) < p[i]
 * dropout element i:   kept when u(seed, offset + i) >= p
 *
 * Plain C99; usable from CUDA/HIP device code by defining KEEL_PHILOX_QUAL
 * (e.g. as `__host__ __device__`) before including.
 */
#ifndef KEEL_PHILOX_H
#define KEEL_PHILOX_H

#include <stdint.h>

#ifndef KEEL_PHILOX_QUAL
#define KEEL_PHILOX_QUAL
#endif

#define KEEL_PHILOX_M0 UINT32_C(0xD2511F53)
#define KEEL_PHILOX_M1 UINT32_C(0xCD9E8D57)
#define KEEL_PHILOX_W0 UINT32_C(0x9E3779B9)
#define KEEL_PHILOX_W1 UINT32_C(0xBB67AE85)

static inline KEEL_PHILOX_QUAL void
keel_philox4x32_10(uint32_t ctr[4], uint32_t k0, uint32_t k1)
{
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)KEEL_PHILOX_M0 * ctr[0];
        uint64_t p1 = (uint64_t)KEEL_PHILOX_M1 * ctr[2];
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n0 = hi1 ^ ctr[1] ^ k0;
        uint32_t n2 = hi0 ^ ctr[3] ^ k1;

        ctr[0] = n0;
        ctr[1] = lo1;
        ctr[2] = n2;
        ctr[3] = lo0;
        k0 += KEEL_PHILOX_W0;
        k1 += KEEL_PHILOX_W1;
    }
}

/** The four 32-bit words of block `block` for `seed`. */
static inline KEEL_PHILOX_QUAL void keel_philox_block(uint64_t seed,
                                                      uint64_t block,
                                                      uint32_t out[4])
{
    out[0] = (uint32_t)block;
    out[1] = (uint32_t)(block >> 32);
    out[2] = 0;
    out[3] = 0;
    keel_philox4x32_10(out, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/** A 24-bit word mapped to [0, 1). */
static inline KEEL_PHILOX_QUAL float keel_philox_u01(uint32_t word)
{
    return (float)(word >> 8) * (1.0f / 16777216.0f);
}

/** u(seed, counter) in [0, 1). */
static inline KEEL_PHILOX_QUAL float keel_philox_uniform(uint64_t seed,
                                                         uint64_t counter)
{
    uint32_t w[4];

    keel_philox_block(seed, counter >> 2, w);
    return keel_philox_u01(w[counter & 3]);
}

#endif /* KEEL_PHILOX_H */
