/*
 * The CPU plugin's BLAS, loaded at run time (blas.c).
 *
 * The plugin does not link a BLAS: plugin init dlopen()s one (KEEL_CPU_BLAS,
 * default OpenBLAS's libopenblas.so.0) and calls it through this table.
 * Loading it ourselves lets the plugin see which kernel set OpenBLAS chose
 * for the CPU and correct a choice older OpenBLAS releases get wrong on CPUs
 * newer than themselves (see blas.c), and lets a user point the plugin at
 * any library with the CBLAS interface.
 *
 * cblas.h is used for its types and enums only.
 */
#ifndef KEEL_CPU_KBLAS_H
#define KEEL_CPU_KBLAS_H

#include <cblas.h>
#include <stdbool.h>
#include <stddef.h>

#include <keel/device_api.h>

struct cpu_blas {
    /* Required CBLAS entry points. */
    __typeof__(cblas_sgemm) *sgemm;
    __typeof__(cblas_dgemm) *dgemm;
    /* OpenBLAS extensions; NULL when the library lacks them. */
    void (*set_threads)(int);
    int (*get_threads)(void);
};

/* Valid between a successful cpu_blas_load() and cpu_blas_unload(). */
extern struct cpu_blas cpu_blas;

/* Loads the BLAS (idempotent). On failure writes why into msg. */
keel_status cpu_blas_load(char *msg, size_t cap);
/* Unloads it (plugin finalize). */
void cpu_blas_unload(void);
/* One line for logs and the device description: library, version and the
 * kernel set in use, e.g. "OpenBLAS 0.3.21 (Cooperlake kernels)". */
const char *cpu_blas_summary(void);

#endif
