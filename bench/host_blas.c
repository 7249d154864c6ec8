/* See host_blas.h. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "host_blas.h"

host_sgemm_fn *host_sgemm(const char **why)
{
    static host_sgemm_fn *fn;
    static const char *err;
    static void *handle;

    if (!fn && !err) {
        const char *name = getenv("KEEL_CPU_BLAS");
        void *p = NULL;

        handle = dlopen(name && *name ? name : "libopenblas.so.0",
                        RTLD_NOW | RTLD_LOCAL);
        if (handle)
            p = dlsym(handle, "cblas_sgemm");
        if (p)
            memcpy(&fn, &p, sizeof(p));
        else
            err = handle ? "the BLAS library has no cblas_sgemm"
                         : "cannot load the BLAS library (KEEL_CPU_BLAS, "
                           "default libopenblas.so.0)";
    }
    if (why)
        *why = err;
    return fn;
}
