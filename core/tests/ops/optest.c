/*
 * Op test helpers (see optest.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optest.h"

const keel_dtype ot_float_dtypes[4] = {KEEL_F32, KEEL_F64, KEEL_F16,
                                       KEEL_BF16};
const keel_dtype ot_all_dtypes[9] = {KEEL_F32, KEEL_F64, KEEL_F16,
                                     KEEL_BF16, KEEL_I8,  KEEL_U8,
                                     KEEL_I32, KEEL_I64, KEEL_BOOL};

ot_tol ot_tolerance(keel_dtype dt)
{
    switch (dt) {
    case KEEL_F64:
        return (ot_tol){1e-10, 1e-12};
    case KEEL_F32:
        return (ot_tol){2e-5, 1e-6};
    case KEEL_F16:
        return (ot_tol){5e-3, 1e-3};
    case KEEL_BF16:
        return (ot_tol){3e-2, 1e-2};
    default:
        return (ot_tol){0, 0};
    }
}

static bool is_float(keel_dtype dt)
{
    return dt == KEEL_F32 || dt == KEEL_F64 || dt == KEEL_F16 ||
           dt == KEEL_BF16;
}

keel_tensor *ot_rand(keel_dtype dt, int ndim, const int64_t *shape, double lo,
                     double hi)
{
    keel_tensor *t = NULL, *f = NULL;
    int64_t n = 1;
    double *v;

    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    /* Draw in float64 on the device, then build the dtype on the host so
     * integer ranges are exact. */
    if (keel_uniform(ndim, shape, KEEL_F64, lo, hi, NULL, &f) !=
        KEEL_STATUS_OK) {
        fprintf(stderr, "ot_rand: %s\n", keel_last_error());
        return NULL;
    }
    v = ot_host(f);
    keel_tensor_free(f);
    if (!v)
        return NULL;
    for (int64_t i = 0; i < n; i++) {
        if (dt == KEEL_BOOL)
            v[i] = v[i] >= (lo + hi) / 2 ? 1 : 0;
        else if (!is_float(dt))
            v[i] = floor(v[i]);
    }
    t = ot_from(dt, ndim, shape, v);
    free(v);
    return t;
}

static void store(void *p, keel_dtype dt, double v)
{
    switch (dt) {
    case KEEL_F32: {
        float f = (float)v;
        memcpy(p, &f, 4);
        break;
    }
    case KEEL_F64:
        memcpy(p, &v, 8);
        break;
    case KEEL_F16:
    case KEEL_BF16: {
        /* Convert through a keel cast on the host side: build f32 first. */
        float f = (float)v;
        memcpy(p, &f, 4);
        break;
    }
    case KEEL_I8: {
        /* Through int64: a double out of a narrow type's range (the -777
         * sentinel below) converted directly is undefined behaviour. */
        int8_t x = (int8_t)(int64_t)v;
        memcpy(p, &x, 1);
        break;
    }
    case KEEL_U8:
    case KEEL_BOOL: {
        uint8_t x = (uint8_t)(int64_t)v;
        memcpy(p, &x, 1);
        break;
    }
    case KEEL_I32: {
        int32_t x = (int32_t)(int64_t)v;
        memcpy(p, &x, 4);
        break;
    }
    case KEEL_I64: {
        int64_t x = (int64_t)v;
        memcpy(p, &x, 8);
        break;
    }
    default:
        break;
    }
}

keel_tensor *ot_from(keel_dtype dt, int ndim, const int64_t *shape,
                     const double *values)
{
    keel_dtype host_dt = (dt == KEEL_F16 || dt == KEEL_BF16) ? KEEL_F32 : dt;
    size_t es = keel_dtype_size(host_dt);
    int64_t n = 1;
    keel_tensor *t = NULL, *c = NULL;
    char *buf;

    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    buf = malloc((size_t)(n ? n : 1) * es);
    if (!buf)
        return NULL;
    for (int64_t i = 0; i < n; i++)
        store(buf + (size_t)i * es, host_dt, values[i]);
    if (keel_tensor_from_host(buf, host_dt, ndim, shape, NULL, &t) !=
        KEEL_STATUS_OK) {
        fprintf(stderr, "ot_from: %s\n", keel_last_error());
        free(buf);
        return NULL;
    }
    free(buf);
    if (host_dt == dt)
        return t;
    if (keel_cast(t, dt, &c) != KEEL_STATUS_OK)
        fprintf(stderr, "ot_from: cast: %s\n", keel_last_error());
    keel_tensor_free(t);
    return c;
}

double *ot_host(const keel_tensor *t)
{
    int64_t n = keel_tensor_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof(double));
    keel_tensor *f = NULL;

    if (!v)
        return NULL;
    if (keel_cast(t, KEEL_F64, &f) != KEEL_STATUS_OK ||
        keel_tensor_to_host(f, v, (size_t)n * sizeof(double)) !=
            KEEL_STATUS_OK) {
        fprintf(stderr, "ot_host: %s\n", keel_last_error());
        keel_tensor_free(f);
        free(v);
        return NULL;
    }
    keel_tensor_free(f);
    return v;
}

keel_tensor *ot_layout(const keel_tensor *x, enum ot_layout layout)
{
    int nd = keel_tensor_ndim(x);
    const int64_t *shape = keel_tensor_shape(x);
    keel_dtype dt = keel_tensor_dtype(x);
    keel_tensor *base = NULL, *out = NULL;
    double *v = ot_host(x), *w = NULL;
    int64_t n = keel_tensor_numel(x);

    if (!v)
        return NULL;
    if (layout == OT_CONTIG || nd == 0 || n == 0) {
        out = ot_from(dt, nd, shape, v);
    } else if (layout == OT_TRANSPOSED) {
        int64_t rshape[KEEL_MAX_DIMS], idx[KEEL_MAX_DIMS] = {0};
        int perm[KEEL_MAX_DIMS];
        w = malloc((size_t)n * sizeof(double));
        for (int i = 0; i < nd; i++) {
            rshape[i] = shape[nd - 1 - i];
            perm[i] = nd - 1 - i;
        }
        /* w in reversed-axes row-major order holds x[idx]. */
        for (int64_t k = 0; k < n; k++) {
            int64_t off = 0;
            for (int i = 0; i < nd; i++)
                off = off * rshape[i] + idx[nd - 1 - i];
            w[off] = v[k];
            for (int i = nd - 1; i >= 0; i--) {
                if (++idx[i] < shape[i])
                    break;
                idx[i] = 0;
            }
        }
        base = ot_from(dt, nd, rshape, w);
        if (base && keel_permute(base, perm, &out) != KEEL_STATUS_OK)
            fprintf(stderr, "ot_layout: %s\n", keel_last_error());
    } else {
        int64_t bshape[KEEL_MAX_DIMS];
        memcpy(bshape, shape, sizeof(int64_t) * (size_t)nd);
        bshape[nd - 1] *= 2;
        w = malloc((size_t)n * 2 * sizeof(double));
        for (int64_t k = 0; k < n; k++) {
            w[2 * k] = v[k];
            w[2 * k + 1] = -777; /* must never be read */
        }
        base = ot_from(dt, nd, bshape, w);
        if (base && keel_slice(base, nd - 1, 0, bshape[nd - 1], 2, &out) !=
                        KEEL_STATUS_OK)
            fprintf(stderr, "ot_layout: %s\n", keel_last_error());
    }
    keel_tensor_free(base);
    free(v);
    free(w);
    return out;
}

/* Host-side rounding, independent of the kernels under test: through
 * float first (as the kernels convert), then to nearest even. */
static double round_f16(double v)
{
    float f = (float)v;
    double a = fabs((double)f), q;
    int e;

    if (isnan(f) || isinf(f))
        return f;
    if (a >= 65520.0)
        return f < 0 ? -INFINITY : INFINITY;
    if (a < ldexp(1.0, -14)) {
        q = ldexp(nearbyint(ldexp(a, 24)), -24);
    } else {
        frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
        q = ldexp(nearbyint(ldexp(a, 11 - e)), e - 11);
    }
    return f < 0 ? -q : q;
}

static double round_bf16(double v)
{
    float f = (float)v;
    uint32_t u;

    if (isnan(f))
        return f;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    u &= 0xFFFF0000u;
    memcpy(&f, &u, 4);
    return f;
}

double ot_round(double v, keel_dtype dt)
{
    switch (dt) {
    case KEEL_F32:
        return (float)v;
    case KEEL_F16:
        return round_f16(v);
    case KEEL_BF16:
        return round_bf16(v);
    default:
        return v;
    }
}

bool ot_check_shape(const char *what, const keel_tensor *t, int ndim,
                    const int64_t *shape)
{
    bool ok = t && keel_tensor_ndim(t) == ndim;

    for (int i = 0; ok && i < ndim; i++)
        ok = keel_tensor_shape(t)[i] == shape[i];
    if (!ok) {
        fprintf(stderr, "\n  %s: shape mismatch (ndim %d, want %d)\n", what,
                t ? keel_tensor_ndim(t) : -1, ndim);
    }
    CU_ASSERT(ok);
    return ok;
}

bool ot_check(const char *what, const keel_tensor *got, const double *ref,
              keel_dtype dt)
{
    ot_tol tol = ot_tolerance(dt);
    int64_t n;
    double *g;
    bool ok = true;

    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    n = keel_tensor_numel(got);
    g = ot_host(got);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    for (int64_t i = 0; i < n; i++) {
        double a = g[i], r = ref[i];
        bool same;
        if (isnan(r) || isnan(a))
            same = isnan(r) && isnan(a);
        else if (isinf(r) || isinf(a))
            same = a == r;
        else
            same = fabs(a - r) <= tol.atol + tol.rtol * fabs(r);
        if (!same) {
            fprintf(stderr,
                    "\n  %s (%s): element %lld is %.10g, reference %.10g "
                    "(rtol %g, atol %g)\n",
                    what, keel_dtype_name(dt), (long long)i, a, r, tol.rtol,
                    tol.atol);
            ok = false;
            break;
        }
    }
    free(g);
    CU_ASSERT(ok);
    return ok;
}

keel_status ot_activation(const keel_tensor *y, const char *act, double alpha,
                          keel_tensor **out)
{
    switch (keel_fused_act_from_name(act)) {
    case KEEL_FUSED_ACT_NONE:
        *out = keel_tensor_ref((keel_tensor *)y);
        return KEEL_STATUS_OK;
    case KEEL_FUSED_ACT_RELU:
        return keel_relu(y, out);
    case KEEL_FUSED_ACT_RELU6:
        return keel_relu6(y, out);
    case KEEL_FUSED_ACT_GELU:
        return keel_gelu(y, false, out);
    case KEEL_FUSED_ACT_GELU_TANH:
        return keel_gelu(y, true, out);
    case KEEL_FUSED_ACT_SILU:
        return keel_silu(y, out);
    case KEEL_FUSED_ACT_SIGMOID:
        return keel_sigmoid(y, out);
    case KEEL_FUSED_ACT_TANH:
        return keel_tanh(y, out);
    case KEEL_FUSED_ACT_LEAKY_RELU:
        return keel_leaky_relu(y, alpha, out);
    case KEEL_FUSED_ACT_HARDSWISH:
        return keel_hardswish(y, out);
    default:
        return KEEL_STATUS_INVALID_ARGUMENT;
    }
}

/* |a - b| in units of the last place of dt at the larger magnitude; 0
 * for the same value (and sign of zero), HUGE_VAL when only one is NaN
 * or the infinities differ. */
static double ulps(double a, double b, keel_dtype dt)
{
    int mant = 52, emin = -1022, e;
    double m;

    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b) ? 0 : HUGE_VAL;
    if (a == b)
        return signbit(a) == signbit(b) ? 0 : 1;
    if (isinf(a) || isinf(b))
        return HUGE_VAL;
    switch (dt) {
    case KEEL_F32:
        mant = 23, emin = -126;
        break;
    case KEEL_F16:
        mant = 10, emin = -14;
        break;
    case KEEL_BF16:
        mant = 7, emin = -126;
        break;
    default:
        break;
    }
    m = fmax(fabs(a), fabs(b));
    e = ilogb(m);
    if (e < emin)
        e = emin;
    return fabs(a - b) / ldexp(1.0, e - mant);
}

bool ot_check_ulp(const char *what, const keel_tensor *got,
                  const keel_tensor *want, keel_dtype dt, int max_ulp)
{
    int64_t n = keel_tensor_numel(got), differ = 0;
    double *g, *w;
    bool ok = true;

    CU_ASSERT_EQUAL_FATAL(n, keel_tensor_numel(want));
    g = ot_host(got);
    w = ot_host(want);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    for (int64_t i = 0; i < n; i++) {
        double u = ulps(g[i], w[i], dt);
        differ += u > 0;
        if (u > max_ulp && ok) {
            fprintf(stderr,
                    "\n  %s (%s): element %lld is %.17g, expected %.17g "
                    "(%g ulp; at most %d)\n",
                    what, keel_dtype_name(dt), (long long)i, g[i], w[i], u,
                    max_ulp);
            ok = false;
        }
    }
    if (max_ulp > 0 && differ)
        printf("\n  %s (%s): %lld of %lld elements within %d ulp, not the "
               "same bits",
               what, keel_dtype_name(dt), (long long)differ, (long long)n,
               max_ulp);
    free(g);
    free(w);
    CU_ASSERT(ok);
    return ok;
}

int ot_main(const char *suite_name, const ot_test *tests, int n)
{
    CU_pSuite suite;
    unsigned failed;

    keel_seed(20261130);
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    suite = CU_add_suite(suite_name, NULL, NULL);
    for (int i = 0; suite && i < n; i++)
        CU_add_test(suite, tests[i].name, tests[i].fn);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return failed ? 1 : 0;
}
