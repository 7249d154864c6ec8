// SPDX-License-Identifier: Apache-2.0
/*
 * keel_tensor_from_floats: a tensor of any floating-point dtype from host
 * float32 values (Paddle's to_tensor(data, dtype='float16')). The
 * conversion to float16 and bfloat16 is done here, in integer arithmetic,
 * so it rounds to nearest even whatever the FPU's rounding mode:
 *
 *   float16   normal and subnormal results rounded to nearest even,
 *             |x| >= 65520 gives +-inf, infinities stay infinite, NaN
 *             stays NaN (quiet, sign and the top payload bits kept);
 *   bfloat16  the top 16 bits rounded to nearest even, overflow to +-inf,
 *             NaN kept NaN (quiet, sign kept): plain rounding of a NaN
 *             could carry into the sign bit or give infinity.
 */
#include <stdlib.h>
#include <string.h>

#include <keel/tensor.h>

#include "runtime/runtime_internal.h"
#include "dispatch/dispatch_internal.h"

static uint16_t f32_to_f16_bits(float f)
{
    uint32_t x, ax, sign, mant, q, r, half;
    int e, shift;

    memcpy(&x, &f, sizeof(x));
    sign = (x >> 16) & 0x8000u;
    ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    e = (int)(ax >> 23);
    mant = ax & 0x7fffffu;
    if (e >= 143) /* >= 65536, or inf */
        return (uint16_t)(sign | 0x7c00u);
    if (e < 113) {
        /* below 2^-14: a float16 subnormal (unit 2^-24) or zero. float32
         * subnormals (e == 0) are far below half the unit. */
        if (e == 0)
            return (uint16_t)sign;
        mant |= 0x800000u;
        shift = 126 - e; /* value = mant * 2^(e - 150) = mant >> shift units */
        if (shift > 24)
            return (uint16_t)sign;
        q = mant >> shift;
        r = mant & ((1u << shift) - 1);
        half = 1u << (shift - 1);
        if (r > half || (r == half && (q & 1u)))
            q++; /* may become 0x400: the smallest normal, as it should */
        return (uint16_t)(sign | q);
    }
    q = ((uint32_t)(e - 112) << 10) | (mant >> 13);
    r = mant & 0x1fffu;
    if (r > 0x1000u || (r == 0x1000u && (q & 1u)))
        q++; /* a carry into the exponent is right, up to 0x7c00 (inf) */
    return (uint16_t)(sign | q);
}

static uint16_t f32_to_bf16_bits(float f)
{
    uint32_t x;

    memcpy(&x, &f, sizeof(x));
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x0040u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

keel_status keel_tensor_from_floats(const float *data, int ndim,
                                    const int64_t *shape, keel_dtype dtype,
                                    const char *device, keel_tensor **out)
{
    keel_tensor *t = NULL;
    void *buf = NULL;
    keel_status st;
    int64_t n, i;
    size_t bytes;

    if (!out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_tensor_from_floats: out is NULL");
    *out = NULL;
    if (dtype != KEEL_F32 && dtype != KEEL_F64 && dtype != KEEL_F16 &&
        dtype != KEEL_BF16)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_tensor_from_floats: dtype %s is not a "
                           "floating-point dtype (float32, float64, "
                           "float16, bfloat16); use keel_tensor_from_host",
                           keel_dtype_name(dtype));
    /* keel_empty checks the shape and the device name */
    st = keel_empty(ndim, shape, dtype, device, &t);
    if (st != KEEL_STATUS_OK)
        return st;
    n = keel_tensor_numel(t);
    if (n == 0) {
        *out = t;
        return KEEL_STATUS_OK;
    }
    if (!data) {
        keel_tensor_free(t);
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_tensor_from_floats: data is NULL");
    }
    bytes = (size_t)n * keel_dtype_size(dtype);
    if (dtype == KEEL_F32) {
        st = keel_mem_copy_h2d(t->storage->place, t->storage->data, data,
                               bytes);
        goto done;
    }
    buf = malloc(bytes);
    if (!buf) {
        st = keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                         "keel_tensor_from_floats: no memory for %zu bytes",
                         bytes);
        goto done;
    }
    for (i = 0; i < n; i++) {
        if (dtype == KEEL_F64)
            ((double *)buf)[i] = data[i];
        else if (dtype == KEEL_F16)
            ((uint16_t *)buf)[i] = f32_to_f16_bits(data[i]);
        else
            ((uint16_t *)buf)[i] = f32_to_bf16_bits(data[i]);
    }
    st = keel_mem_copy_h2d(t->storage->place, t->storage->data, buf, bytes);
done:
    free(buf);
    if (st != KEEL_STATUS_OK) {
        keel_tensor_free(t);
        return st;
    }
    *out = t;
    return KEEL_STATUS_OK;
}
