/*
 * The host BLAS yardstick of the benchmarks: cblas_sgemm from the library
 * the CPU plugin loads (KEEL_CPU_BLAS, default libopenblas.so.0).
 */
#ifndef KEEL_BENCH_HOST_BLAS_H
#define KEEL_BENCH_HOST_BLAS_H

#include <cblas.h>

typedef __typeof__(cblas_sgemm) host_sgemm_fn;

/* cblas_sgemm of that library, or NULL (then *why says why). Call it after
 * the CPU plugin is initialised: the library is then in the process
 * already and this returns the same instance, running the kernel set the
 * plugin settled on (see plugins/cpu/kernels/blas.c). */
host_sgemm_fn *host_sgemm(const char **why);

#endif
