/*
 * keel bench — helpers shared by every benchmark group: the list of
 * registered contexts and their outcomes, failure reporting, the timer,
 * host data and reduced-precision conversions, reference comparison.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kb.h"

/* ---- registered contexts ------------------------------------------------ */

/* The suite's own list of contexts, for counting outcomes after the run.
 * The shim owns (and frees) the contexts themselves. */
static struct kb_bench **benches;
static size_t nbenches, capbenches;
static int register_failures;

void *kb_register(const struct kb_env *env, const char *name, size_t size,
                  keel_bm_fn fn, keel_bm_time time, keel_bm_unit unit)
{
    keel_bm_opts opts = {.time = time, .unit = unit, .iterations = 0};
    struct kb_bench *b;

    if (nbenches == capbenches) {
        size_t cap = capbenches ? 2 * capbenches : 64;
        struct kb_bench **p = realloc(benches, cap * sizeof(*p));
        if (!p)
            goto fail;
        benches = p;
        capbenches = cap;
    }
    b = calloc(1, size);
    if (!b)
        goto fail;
    b->env = env;
    if (keel_bm_register(name, fn, b, free, &opts) != 0) {
        free(b);
        goto fail;
    }
    b->name = keel_bm_name(keel_bm_count() - 1);
    benches[nbenches++] = b;
    return b;
fail:
    fprintf(stderr, "keel bench: could not register %s\n", name);
    register_failures++;
    return NULL;
}

int kb_register_failures(void)
{
    return register_failures;
}

void kb_count_outcomes(int counts[4])
{
    memset(counts, 0, 4 * sizeof(int));
    for (size_t i = 0; i < nbenches; i++)
        counts[benches[i]->outcome]++;
}

void kb_forget_all(void)
{
    free(benches);
    benches = NULL;
    nbenches = capbenches = 0;
    register_failures = 0;
}

/* ---- failures ----------------------------------------------------------- */

bool kb_fail(keel_bm_state *st, struct kb_bench *b, enum kb_outcome outcome,
             const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (outcome > b->outcome)
        b->outcome = outcome;
    if (!keel_bm_error_occurred(st))
        keel_bm_skip_with_error(st, msg);
    return false;
}

bool kb_fail_status(keel_bm_state *st, struct kb_bench *b, const char *what,
                    keel_status status)
{
    const char *msg = keel_last_error();

    if (status == KEEL_STATUS_NOT_SUPPORTED)
        return kb_fail(st, b, KB_SKIPPED, "no kernel: %s: %s", what,
                       msg && *msg ? msg : keel_status_name(status));
    return kb_fail(st, b, KB_ERROR, "%s: %s: %s", what,
                   keel_status_name(status), msg ? msg : "");
}

bool kb_need_kernels(keel_bm_state *st, struct kb_bench *b, int n,
                     const keel_op_id *ops, const keel_dtype *dtypes)
{
    const struct kb_env *env = b->env;
    const keel_kernel_ops *k = env->api->kernel;

    for (int i = 0; i < n; i++) {
        const keel_op_info *info = keel_op_get_info(ops[i]);
        keel_kernel kern;
        keel_status s;

        if (!info)
            return kb_fail(st, b, KB_ERROR, "op %d is not in the catalog",
                           (int)ops[i]);
        if (!k || !k->lookup)
            return kb_fail(st, b, KB_SKIPPED,
                           "no kernel: plugin '%s' has no kernel group",
                           env->api->name);
        s = k->lookup(env->place.device, info->name, dtypes[i], &kern);
        if (s == KEEL_STATUS_NOT_FOUND || (s == KEEL_STATUS_OK && !kern.fn))
            return kb_fail(st, b, KB_SKIPPED,
                           "no kernel: plugin '%s' has no %s kernel for %s",
                           env->api->name, info->name,
                           keel_dtype_name(dtypes[i]));
        if (s != KEEL_STATUS_OK)
            return kb_fail(st, b, KB_ERROR, "kernel lookup %s (%s): %s",
                           info->name, keel_dtype_name(dtypes[i]),
                           keel_status_name(s));
    }
    return true;
}

/* ---- timing ------------------------------------------------------------- */

double kb_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

keel_status kb_timer_init(struct kb_timer *t, const struct kb_env *env)
{
    keel_status s;

    memset(t, 0, sizeof(*t));
    t->place = env->place;
    t->events = env->events;
    if (!t->events)
        return KEEL_STATUS_OK;
    s = keel_event_create(t->place, &t->start);
    if (s == KEEL_STATUS_OK)
        s = keel_event_create(t->place, &t->stop);
    if (s != KEEL_STATUS_OK)
        kb_timer_destroy(t);
    return s;
}

void kb_timer_destroy(struct kb_timer *t)
{
    if (t->start)
        keel_event_destroy(t->place, t->start);
    if (t->stop)
        keel_event_destroy(t->place, t->stop);
    t->start = t->stop = NULL;
}

keel_status kb_timer_start(struct kb_timer *t)
{
    if (t->events)
        return keel_event_record(t->place, t->start, NULL);
    t->t0 = kb_now();
    return KEEL_STATUS_OK;
}

keel_status kb_timer_stop(struct kb_timer *t, double *seconds)
{
    keel_status s;
    float ms = 0;

    if (!t->events) {
        s = keel_stream_synchronize(t->place, NULL);
        *seconds = kb_now() - t->t0;
        return s;
    }
    s = keel_event_record(t->place, t->stop, NULL);
    if (s == KEEL_STATUS_OK)
        s = keel_event_synchronize(t->place, t->stop);
    if (s == KEEL_STATUS_OK)
        s = keel_event_elapsed_ms(t->place, t->start, t->stop, &ms);
    /* The library rejects a zero iteration time; a timer tick is the
     * honest lower bound. */
    *seconds = ms > 0 ? (double)ms * 1e-3 : 1e-9;
    return s;
}

/* ---- data --------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void kb_fill_uniform(float *dst, size_t n, uint64_t seed, float lo, float hi)
{
    uint64_t s = seed;

    for (size_t i = 0; i < n; i++) {
        double u = (double)(splitmix64(&s) >> 11) * 0x1.0p-53;
        dst[i] = (float)(lo + (hi - lo) * u);
    }
}

uint16_t kb_f32_to_f16(float f)
{
    uint32_t x, sign, exp, mant, h, rem;
    int e;

    memcpy(&x, &f, sizeof(x));
    sign = (x >> 16) & 0x8000u;
    exp = (x >> 23) & 0xffu;
    mant = x & 0x7fffffu;
    if (exp == 0xff)
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
    e = (int)exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        uint32_t shift, mid;
        if (e < -10)
            return (uint16_t)sign;
        mant |= 0x800000u;
        shift = (uint32_t)(14 - e);
        h = mant >> shift;
        rem = mant & ((1u << shift) - 1);
        mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    h = sign | ((uint32_t)e << 10) | (mant >> 13);
    rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++; /* a carry into the exponent is the right rounding */
    return (uint16_t)h;
}

float kb_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, x;
    float f;

    if (exp == 0x1f) {
        x = sign | 0x7f800000u | (mant << 13);
    } else if (exp == 0) {
        f = ldexpf((float)mant, -24);
        return sign ? -f : f;
    } else {
        x = sign | ((exp + 112) << 23) | (mant << 13);
    }
    memcpy(&f, &x, sizeof(f));
    return f;
}

uint16_t kb_f32_to_bf16(float f)
{
    uint32_t x;

    memcpy(&x, &f, sizeof(x));
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float kb_bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;

    memcpy(&f, &x, sizeof(f));
    return f;
}

int64_t kb_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;

    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

keel_status kb_tensor_from_floats(const struct kb_env *env, float *src,
                                  keel_dtype dtype, int ndim,
                                  const int64_t *shape, keel_tensor **out)
{
    size_t n = (size_t)kb_numel(ndim, shape);
    uint16_t *h;
    keel_status s;

    if (dtype == KEEL_F32)
        return keel_tensor_from_host(src, dtype, ndim, shape, env->device,
                                     out);
    if (dtype != KEEL_F16 && dtype != KEEL_BF16)
        return KEEL_STATUS_INVALID_ARGUMENT;
    h = malloc(n * sizeof(*h) + 1);
    if (!h)
        return KEEL_STATUS_OUT_OF_MEMORY;
    for (size_t i = 0; i < n; i++) {
        if (dtype == KEEL_F16) {
            h[i] = kb_f32_to_f16(src[i]);
            src[i] = kb_f16_to_f32(h[i]);
        } else {
            h[i] = kb_f32_to_bf16(src[i]);
            src[i] = kb_bf16_to_f32(h[i]);
        }
    }
    s = keel_tensor_from_host(h, dtype, ndim, shape, env->device, out);
    free(h);
    return s;
}

keel_status kb_tensor_random(const struct kb_env *env, keel_dtype dtype,
                             int ndim, const int64_t *shape, uint64_t seed,
                             float lo, float hi, keel_tensor **out,
                             float **host)
{
    size_t n = (size_t)kb_numel(ndim, shape);
    float *v = malloc(n * sizeof(float) + 1);
    keel_status s;

    *out = NULL;
    if (host)
        *host = NULL;
    if (!v)
        return KEEL_STATUS_OUT_OF_MEMORY;
    kb_fill_uniform(v, n, seed, lo, hi);
    s = kb_tensor_from_floats(env, v, dtype, ndim, shape, out);
    if (s == KEEL_STATUS_OK && host)
        *host = v;
    else
        free(v);
    return s;
}

keel_status kb_tensor_read(const keel_tensor *t, float **out)
{
    int64_t n = keel_tensor_numel(t);
    keel_dtype dt = keel_tensor_dtype(t);
    size_t es = keel_dtype_size(dt);
    void *raw;
    float *f;
    keel_status s;

    *out = NULL;
    if (dt != KEEL_F32 && dt != KEEL_F16 && dt != KEEL_BF16 && dt != KEEL_F64)
        return KEEL_STATUS_INVALID_ARGUMENT;
    raw = malloc((size_t)n * es + 1);
    f = malloc((size_t)n * sizeof(float) + 1);
    if (!raw || !f) {
        free(raw);
        free(f);
        return KEEL_STATUS_OUT_OF_MEMORY;
    }
    s = keel_tensor_to_host(t, raw, (size_t)n * es);
    for (int64_t i = 0; s == KEEL_STATUS_OK && i < n; i++) {
        if (dt == KEEL_F32)
            f[i] = ((const float *)raw)[i];
        else if (dt == KEEL_F16)
            f[i] = kb_f16_to_f32(((const uint16_t *)raw)[i]);
        else if (dt == KEEL_BF16)
            f[i] = kb_bf16_to_f32(((const uint16_t *)raw)[i]);
        else
            f[i] = (float)((const double *)raw)[i];
    }
    free(raw);
    if (s != KEEL_STATUS_OK) {
        free(f);
        return s;
    }
    *out = f;
    return KEEL_STATUS_OK;
}

void kb_tolerance(keel_dtype dtype, double scale, double *rtol, double *atol)
{
    switch (dtype) {
    case KEEL_F64:
        *rtol = 1e-10;
        *atol = 1e-12;
        break;
    case KEEL_F16:
        *rtol = 5e-3;
        *atol = 1e-3;
        break;
    case KEEL_BF16:
        *rtol = 3e-2;
        *atol = 1e-2;
        break;
    default:
        *rtol = 2e-5;
        *atol = 1e-6;
        break;
    }
    *rtol *= scale;
    *atol *= scale;
}

bool kb_check(keel_bm_state *st, struct kb_bench *b, const char *what,
              const float *got, const double *ref, const int64_t *index,
              int64_t n, double rtol, double atol)
{
    for (int64_t k = 0; k < n; k++) {
        int64_t i = index ? index[k] : k;
        double g = got[i], r = ref[k];
        bool ok;

        if (isnan(r))
            ok = isnan(g);
        else if (isinf(r))
            ok = g == r;
        else
            ok = fabs(g - r) <= atol + rtol * fabs(r);
        if (!ok)
            return kb_fail(st, b, KB_WRONG,
                           "wrong result: %s element %lld is %.8g, the "
                           "reference is %.8g (rtol %.1e, atol %.1e)",
                           what, (long long)i, g, r, rtol, atol);
    }
    return true;
}

void kb_free_tensors(keel_tensor **ts, int n)
{
    for (int i = 0; i < n; i++) {
        keel_tensor_free(ts[i]);
        ts[i] = NULL;
    }
}

void kb_format_size(uint64_t bytes, char *buf, size_t size)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;

    while (u < 4 && bytes >= 1024 && bytes % 1024 == 0) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, size, "%llu%s", (unsigned long long)bytes, units[u]);
}

const char *kb_dtype_short(keel_dtype dtype)
{
    switch (dtype) {
    case KEEL_F32:
        return "f32";
    case KEEL_F64:
        return "f64";
    case KEEL_F16:
        return "f16";
    case KEEL_BF16:
        return "bf16";
    default:
        return keel_dtype_name(dtype);
    }
}
