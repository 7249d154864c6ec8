/*
 * A stand-in BLAS for the CPU plugin's loader tests (KEEL_CPU_BLAS). It
 * exports what the plugin looks for in OpenBLAS: cblas_sgemm/dgemm (plain
 * loops, row- or column-major) and openblas_get_corename/get_config. Like a
 * DYNAMIC_ARCH OpenBLAS it settles on a kernel set when it is loaded: the
 * one OPENBLAS_CORETYPE names, else "Prescott" (the choice an old OpenBLAS
 * makes on a CPU it does not know). Every load appends that choice as one
 * line to the file FAKE_BLAS_TRACE names, so a test can see how often and
 * with what the plugin loaded it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

/* The project builds with hidden visibility; these are the exports. */
#define FAKE_API __attribute__((visibility("default")))

static char core[64] = "Prescott";

__attribute__((constructor)) static void fake_blas_load(void)
{
    const char *c = getenv("OPENBLAS_CORETYPE"), *trace;
    FILE *f;

    if (c && *c)
        snprintf(core, sizeof(core), "%s", c);
    trace = getenv("FAKE_BLAS_TRACE");
    if (trace && *trace && (f = fopen(trace, "a"))) {
        fprintf(f, "%s\n", c && *c ? c : "-");
        fclose(f);
    }
}

FAKE_API char *openblas_get_corename(void)
{
    return core;
}

FAKE_API char *openblas_get_config(void)
{
    static char cfg[] = "FakeBLAS 1.0 DYNAMIC_ARCH";
    return cfg;
}

/* Element (i, j) of an op(M) stored with leading dimension ld. */
#define AT(M, ld, tr, i, j, rowmajor)                                         \
    ((rowmajor) != ((tr) != CblasNoTrans) ? (M)[(i) * (ld) + (j)]            \
                                          : (M)[(j) * (ld) + (i)])

#define FAKE_GEMM(name, T)                                                    \
    FAKE_API void name(const enum CBLAS_ORDER o, const enum CBLAS_TRANSPOSE ta,        \
              const enum CBLAS_TRANSPOSE tb, const blasint m,                  \
              const blasint n, const blasint k, const T alpha, const T *a,     \
              const blasint lda, const T *b, const blasint ldb,                \
              const T beta, T *c, const blasint ldc)                           \
    {                                                                          \
        int rm = o == CblasRowMajor;                                           \
        for (blasint i = 0; i < m; i++)                                        \
            for (blasint j = 0; j < n; j++) {                                  \
                T s = 0;                                                       \
                T *cij = rm ? &c[i * ldc + j] : &c[j * ldc + i];               \
                for (blasint p = 0; p < k; p++)                                \
                    s += AT(a, lda, ta, i, p, rm) * AT(b, ldb, tb, p, j, rm);  \
                *cij = alpha * s + (beta == 0 ? 0 : beta * *cij);              \
            }                                                                  \
    }

FAKE_GEMM(cblas_sgemm, float)
FAKE_GEMM(cblas_dgemm, double)
