/*
 * keel CPU reference plugin — dtype conversions and reduction kernels used
 * by the collective group.
 *
 * Accumulation rules (element by element, ranks in order 0..n-1):
 *   f32, f16, bf16   accumulate in float; f16/bf16 are widened exactly and
 *                    rounded to nearest even when stored back
 *   f64              accumulate in double
 *   i8, u8, i32, i64 accumulate in 64 bits with wrap-around (no UB on
 *                    overflow); stored back truncated to the element width,
 *                    AVG = sum / nranks truncated toward zero
 *   bool             SUM and MAX are logical or, PROD and MIN logical and;
 *                    AVG is NOT_SUPPORTED
 *   float AVG        sum / nranks in the accumulation type
 * MAX and MIN on floats use ordered comparisons, so a NaN operand may or
 * may not propagate.
 */
#include <string.h>

#include <keel/kit.h>

#include "cpu_internal.h"

/* ------------------------------------------------------------------------ */
/* f16 and bf16                                                             */
/* ------------------------------------------------------------------------ */

/* The kit's conversions (keel/kit.h): exact, round to nearest even, NaN
 * kept; checked there over every half and bfloat16 value. */
float cpu_f16_to_f32(uint16_t h)
{
	return keel_kit_f16_to_f32(h);
}

uint16_t cpu_f32_to_f16(float f)
{
	return keel_kit_f32_to_f16(f);
}

float cpu_bf16_to_f32(uint16_t h)
{
	return keel_kit_bf16_to_f32(h);
}

uint16_t cpu_f32_to_bf16(float f)
{
	return keel_kit_f32_to_bf16(f);
}

/* ------------------------------------------------------------------------ */
/* Names                                                                    */
/* ------------------------------------------------------------------------ */

const char *cpu_dtype_name(keel_dtype dt)
{
	static const char *const names[] = {
		"f32", "f64", "f16", "bf16", "i8", "u8", "i32", "i64", "bool",
	};

	if ((unsigned)dt < KEEL_DTYPE_COUNT_)
		return names[dt];
	return "unknown";
}

const char *cpu_reduce_op_name(keel_reduce_op op)
{
	static const char *const names[] = {
		"sum", "prod", "max", "min", "avg",
	};

	if ((unsigned)op < KEEL_REDUCE_OP_COUNT_)
		return names[op];
	return "unknown";
}

keel_status cpu_reduce_check(keel_dtype dt, keel_reduce_op op,
			     const char *call)
{
	if ((unsigned)dt >= KEEL_DTYPE_COUNT_)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "%s: dtype %d is not a keel_dtype", call,
			       (int)dt);
	if ((unsigned)op >= KEEL_REDUCE_OP_COUNT_)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "%s: reduce op %d is not a keel_reduce_op", call,
			       (int)op);
	if (dt == KEEL_BOOL && op == KEEL_REDUCE_AVG)
		return cpu_err(KEEL_STATUS_NOT_SUPPORTED,
			       "%s: reduce op avg is not defined for dtype bool",
			       call);
	return KEEL_STATUS_OK;
}

/* ------------------------------------------------------------------------ */
/* Kernels                                                                  */
/* ------------------------------------------------------------------------ */

#define CPU_LOAD_PLAIN(x) (x)
#define CPU_STORE_PLAIN(T, x) ((T)(x))
#define CPU_STORE_F16(T, x) cpu_f32_to_f16(x)
#define CPU_STORE_BF16(T, x) cpu_f32_to_bf16(x)

static inline float cpu_f_apply(keel_reduce_op op, float a, float b)
{
	switch (op) {
	case KEEL_REDUCE_PROD: return a * b;
	case KEEL_REDUCE_MAX: return b > a ? b : a;
	case KEEL_REDUCE_MIN: return b < a ? b : a;
	default: return a + b;
	}
}

static inline double cpu_d_apply(keel_reduce_op op, double a, double b)
{
	switch (op) {
	case KEEL_REDUCE_PROD: return a * b;
	case KEEL_REDUCE_MAX: return b > a ? b : a;
	case KEEL_REDUCE_MIN: return b < a ? b : a;
	default: return a + b;
	}
}

/* Wrapping 64-bit integer arithmetic (signed overflow would be UB). */
static inline int64_t cpu_i_apply(keel_reduce_op op, int64_t a, int64_t b)
{
	switch (op) {
	case KEEL_REDUCE_PROD: return (int64_t)((uint64_t)a * (uint64_t)b);
	case KEEL_REDUCE_MAX: return b > a ? b : a;
	case KEEL_REDUCE_MIN: return b < a ? b : a;
	default: return (int64_t)((uint64_t)a + (uint64_t)b);
	}
}

static inline int64_t cpu_i_avg(int64_t sum, int n)
{
	return sum / n;
}

#define CPU_REDUCE_KERNEL(NAME, T, ACC, APPLY, LOAD, STORE, AVG)            \
	static void NAME(keel_reduce_op op, int n, const void *const *srcs, \
			 void *dst, uint64_t count)                         \
	{                                                                   \
		T *out = dst;                                               \
		uint64_t i;                                                 \
		int r;                                                      \
                                                                            \
		for (i = 0; i < count; i++) {                               \
			ACC acc = LOAD(((const T *)srcs[0])[i]);            \
                                                                            \
			for (r = 1; r < n; r++)                             \
				acc = APPLY(op, acc,                        \
					    LOAD(((const T *)srcs[r])[i])); \
			if (op == KEEL_REDUCE_AVG)                          \
				acc = AVG(acc, n);                          \
			out[i] = STORE(T, acc);                             \
		}                                                           \
	}

#define CPU_F_AVG(a, n) ((a) / (float)(n))
#define CPU_D_AVG(a, n) ((a) / (double)(n))

CPU_REDUCE_KERNEL(cpu_reduce_f32, float, float, cpu_f_apply, CPU_LOAD_PLAIN,
		  CPU_STORE_PLAIN, CPU_F_AVG)
CPU_REDUCE_KERNEL(cpu_reduce_f64, double, double, cpu_d_apply, CPU_LOAD_PLAIN,
		  CPU_STORE_PLAIN, CPU_D_AVG)
CPU_REDUCE_KERNEL(cpu_reduce_f16, uint16_t, float, cpu_f_apply,
		  cpu_f16_to_f32, CPU_STORE_F16, CPU_F_AVG)
CPU_REDUCE_KERNEL(cpu_reduce_bf16, uint16_t, float, cpu_f_apply,
		  cpu_bf16_to_f32, CPU_STORE_BF16, CPU_F_AVG)
CPU_REDUCE_KERNEL(cpu_reduce_i8, int8_t, int64_t, cpu_i_apply, CPU_LOAD_PLAIN,
		  CPU_STORE_PLAIN, cpu_i_avg)
CPU_REDUCE_KERNEL(cpu_reduce_u8, uint8_t, int64_t, cpu_i_apply,
		  CPU_LOAD_PLAIN, CPU_STORE_PLAIN, cpu_i_avg)
CPU_REDUCE_KERNEL(cpu_reduce_i32, int32_t, int64_t, cpu_i_apply,
		  CPU_LOAD_PLAIN, CPU_STORE_PLAIN, cpu_i_avg)
CPU_REDUCE_KERNEL(cpu_reduce_i64, int64_t, int64_t, cpu_i_apply,
		  CPU_LOAD_PLAIN, CPU_STORE_PLAIN, cpu_i_avg)

static void cpu_reduce_bool(keel_reduce_op op, int n, const void *const *srcs,
			    void *dst, uint64_t count)
{
	bool any = op == KEEL_REDUCE_SUM || op == KEEL_REDUCE_MAX;
	uint8_t *out = dst;
	uint64_t i;
	int r;

	for (i = 0; i < count; i++) {
		bool acc = ((const uint8_t *)srcs[0])[i] != 0;

		for (r = 1; r < n; r++) {
			bool v = ((const uint8_t *)srcs[r])[i] != 0;

			acc = any ? (acc || v) : (acc && v);
		}
		out[i] = acc;
	}
}

void cpu_reduce(keel_dtype dt, keel_reduce_op op, int nsrc,
		const void *const *srcs, void *dst, uint64_t count)
{
	switch (dt) {
	case KEEL_F32: cpu_reduce_f32(op, nsrc, srcs, dst, count); break;
	case KEEL_F64: cpu_reduce_f64(op, nsrc, srcs, dst, count); break;
	case KEEL_F16: cpu_reduce_f16(op, nsrc, srcs, dst, count); break;
	case KEEL_BF16: cpu_reduce_bf16(op, nsrc, srcs, dst, count); break;
	case KEEL_I8: cpu_reduce_i8(op, nsrc, srcs, dst, count); break;
	case KEEL_U8: cpu_reduce_u8(op, nsrc, srcs, dst, count); break;
	case KEEL_I32: cpu_reduce_i32(op, nsrc, srcs, dst, count); break;
	case KEEL_I64: cpu_reduce_i64(op, nsrc, srcs, dst, count); break;
	case KEEL_BOOL: cpu_reduce_bool(op, nsrc, srcs, dst, count); break;
	default: break;
	}
}
