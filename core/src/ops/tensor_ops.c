/*
 * The tensor functions of keel/tensor.h that run ops: creation, views
 * (recorded for autograd), contiguous copies, moving data to the host or
 * another device, casts, item() and printing.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <keel/autograd.h>

#include "dispatch/dispatch_internal.h"

/* ---- creation ------------------------------------------------------------------ */

keel_status keel_tensor_from_host(const void *data, keel_dtype dtype,
                                  int ndim, const int64_t *shape,
                                  const char *device, keel_tensor **out)
{
    keel_place place;
    keel_tensor *t;
    keel_status st;
    uint64_t bytes = 0;

    if (!out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_tensor_from_host: out is NULL");
    *out = NULL;
    if ((st = keel__shape_check(__func__, ndim, shape, dtype)) ||
        (st = keel__place_of(device, &place)))
        return st;
    keel__shape_size(ndim, shape, keel_dtype_size(dtype), NULL, &bytes);
    if (bytes && !data)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_tensor_from_host: data is NULL");
    st = keel__tensor_new(place, dtype, ndim, shape, &t);
    if (st != KEEL_STATUS_OK)
        return st;
    st = keel_mem_copy_h2d(place, t->storage->data, data, bytes);
    if (st != KEEL_STATUS_OK) {
        keel_tensor_free(t);
        return st;
    }
    *out = t;
    return KEEL_STATUS_OK;
}

keel_status keel_empty(int ndim, const int64_t *shape, keel_dtype dtype,
                       const char *device, keel_tensor **out)
{
    keel_place place;
    keel_status st;

    if (!out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_empty: out is NULL");
    *out = NULL;
    if ((st = keel__shape_check(__func__, ndim, shape, dtype)) ||
        (st = keel__place_of(device, &place)))
        return st;
    return keel__tensor_new(place, dtype, ndim, shape, out);
}

/* Run a creation op with shape + dtype + extra attributes. */
static keel_status create(const char *what, keel_op_id op, int ndim,
                          const int64_t *shape, keel_dtype dtype,
                          const char *device, keel_attr *extra, int nextra,
                          keel_tensor **out)
{
    keel_attr attrs[KEEL_MAX_OP_ATTRS];
    keel_place place;
    keel_status st;
    int n = 0;

    if (!out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: out is NULL",
                           what);
    *out = NULL;
    if ((st = keel__shape_check(what, ndim, shape, dtype)) ||
        (st = keel__place_of(device, &place)))
        return st;
    attrs[n++] = keel_attr_ints("shape", shape, ndim);
    attrs[n++] = keel_attr_dtype("dtype", dtype);
    for (int i = 0; i < nextra; i++)
        attrs[n++] = extra[i];
    return keel__run_create(op, place, attrs, n, out);
}

static keel_status fill(const char *what, int ndim, const int64_t *shape,
                        keel_dtype dtype, double value, const char *device,
                        keel_tensor **out)
{
    keel_attr a = keel_attr_float("value", value);
    return create(what, KEEL_OP_FULL, ndim, shape, dtype, device, &a, 1, out);
}

keel_status keel_full(int ndim, const int64_t *shape, keel_dtype dtype,
                      double value, const char *device, keel_tensor **out)
{
    return fill(__func__, ndim, shape, dtype, value, device, out);
}

keel_status keel_zeros(int ndim, const int64_t *shape, keel_dtype dtype,
                       const char *device, keel_tensor **out)
{
    return fill(__func__, ndim, shape, dtype, 0.0, device, out);
}

keel_status keel_ones(int ndim, const int64_t *shape, keel_dtype dtype,
                      const char *device, keel_tensor **out)
{
    return fill(__func__, ndim, shape, dtype, 1.0, device, out);
}

keel_status keel_arange(double start, double end, double step,
                        keel_dtype dtype, const char *device,
                        keel_tensor **out)
{
    keel_attr a[2];
    double count;
    int64_t n;

    if (step == 0 || !isfinite(step) || !isfinite(start) || !isfinite(end))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_arange: start %g, end %g, step %g: step "
                           "must be non-zero and all finite",
                           start, end, step);
    /* The count is converted only when it fits: a double out of range of
     * int64_t has no defined conversion. 2^63 is exact in a double. */
    count = ceil((end - start) / step);
    if (!(count < 9223372036854775808.0))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_arange: start %g, end %g, step %g gives %g "
                           "elements, more than a tensor can hold (2^63-1)",
                           start, end, step, count);
    n = count > 0 ? (int64_t)count : 0;
    a[0] = keel_attr_float("start", start);
    a[1] = keel_attr_float("step", step);
    return create(__func__, KEEL_OP_ARANGE, 1, &n, dtype, device, a, 2, out);
}

keel_status keel_linspace(double start, double stop, int64_t num,
                          keel_dtype dtype, const char *device,
                          keel_tensor **out)
{
    keel_attr a[2];

    if (num < 0)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_linspace: num %lld is negative",
                           (long long)num);
    if (!isfinite(start) || !isfinite(stop))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_linspace: start %g and stop %g must be "
                           "finite",
                           start, stop);
    a[0] = keel_attr_float("start", start);
    a[1] = keel_attr_float("stop", stop);
    return create(__func__, KEEL_OP_LINSPACE, 1, &num, dtype, device, a, 2,
                  out);
}

keel_status keel_eye(int64_t n, int64_t m, keel_dtype dtype,
                     const char *device, keel_tensor **out)
{
    int64_t shape[2] = {n, m < 0 ? n : m};
    return create(__func__, KEEL_OP_EYE, 2, shape, dtype, device, NULL, 0,
                  out);
}

/* ---- random -------------------------------------------------------------------- */

static keel_status random_op(const char *what, keel_op_id op, int ndim,
                             const int64_t *shape, keel_dtype dtype,
                             const char *device, keel_attr *extra, int nextra,
                             uint64_t per_element, keel_tensor **out)
{
    keel_attr attrs[6];
    uint64_t seed, offset;
    keel_status st;
    int n = 0;

    /* Before the generator advances: a refused draw consumes nothing. */
    if ((st = keel__shape_check(what, ndim, shape, dtype)))
        return st;
    keel__rng_next((uint64_t)keel__numel(ndim, shape) * per_element, &seed,
                   &offset);
    for (int i = 0; i < nextra; i++)
        attrs[n++] = extra[i];
    attrs[n++] = keel_attr_int("seed", (int64_t)seed);
    attrs[n++] = keel_attr_int("offset", (int64_t)offset);
    return create(what, op, ndim, shape, dtype, device, attrs, n, out);
}

keel_status keel_uniform(int ndim, const int64_t *shape, keel_dtype dtype,
                         double low, double high, const char *device,
                         keel_tensor **out)
{
    keel_attr a[2] = {keel_attr_float("low", low),
                      keel_attr_float("high", high)};
    if (!(low <= high) || !isfinite(low) || !isfinite(high))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_uniform: need finite low <= high, got "
                           "[%g, %g)",
                           low, high);
    return random_op(__func__, KEEL_OP_UNIFORM, ndim, shape, dtype, device,
                     a, 2, 1, out);
}

keel_status keel_rand(int ndim, const int64_t *shape, keel_dtype dtype,
                      const char *device, keel_tensor **out)
{
    return keel_uniform(ndim, shape, dtype, 0.0, 1.0, device, out);
}

keel_status keel_normal(int ndim, const int64_t *shape, keel_dtype dtype,
                        double mean, double std, const char *device,
                        keel_tensor **out)
{
    keel_attr a[2] = {keel_attr_float("mean", mean),
                      keel_attr_float("std", std)};
    if (!(std >= 0) || !isfinite(mean) || !isfinite(std))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_normal: need finite mean and std >= 0, got "
                           "mean %g, std %g",
                           mean, std);
    return random_op(__func__, KEEL_OP_NORMAL, ndim, shape, dtype, device, a,
                     2, 2, out);
}

keel_status keel_randn(int ndim, const int64_t *shape, keel_dtype dtype,
                       const char *device, keel_tensor **out)
{
    return keel_normal(ndim, shape, dtype, 0.0, 1.0, device, out);
}

keel_status keel_randint(int64_t low, int64_t high, int ndim,
                         const int64_t *shape, keel_dtype dtype,
                         const char *device, keel_tensor **out)
{
    keel_attr a[2] = {keel_attr_int("low", low), keel_attr_int("high", high)};
    if (high <= low)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_randint: need low < high, got [%lld, %lld)",
                           (long long)low, (long long)high);
    return random_op(__func__, KEEL_OP_RANDINT, ndim, shape, dtype, device, a,
                     2, 1, out);
}

keel_status keel_bernoulli(const keel_tensor *p, keel_tensor **out)
{
    keel_attr a[2];
    uint64_t seed, offset;

    if (!p || !out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_bernoulli: %s is NULL", p ? "out" : "p");
    keel__rng_next((uint64_t)keel_tensor_numel(p), &seed, &offset);
    a[0] = keel_attr_int("seed", (int64_t)seed);
    a[1] = keel_attr_int("offset", (int64_t)offset);
    return keel__run1(KEEL_OP_BERNOULLI, &p, 1, a, 2, out);
}

/* ---- views --------------------------------------------------------------------- */

#define NEED(cond, ...)                                                      \
    do {                                                                     \
        if (!(cond))                                                         \
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT, __VA_ARGS__);   \
    } while (0)

/* Strides for viewing x with a new shape without copying, if possible
 * (the algorithm numpy uses: match runs of dims with equal products). */
static bool view_strides(const keel_tensor *x, int ndim, const int64_t *shape,
                         int64_t *strides)
{
    int oi = 0, ni = 0;

    if (keel__numel(x->ndim, x->shape) == 0) {
        keel__contiguous_strides(ndim, shape, strides);
        return true;
    }
    while (oi < x->ndim || ni < ndim) {
        int o0 = oi, n0 = ni;
        int64_t op = 1, np = 1;
        if (oi < x->ndim)
            op = x->shape[oi++];
        if (ni < ndim)
            np = shape[ni++];
        while (op != np) {
            if (op < np) {
                if (oi >= x->ndim)
                    return false;
                op *= x->shape[oi++];
            } else {
                if (ni >= ndim)
                    return false;
                np *= shape[ni++];
            }
        }
        /* Old dims o0..oi-1 must be contiguous among themselves. */
        for (int k = o0; k < oi - 1; k++)
            if (x->shape[k] != 1 && x->shape[k + 1] != 1 &&
                x->strides[k] != x->strides[k + 1] * x->shape[k + 1])
                return false;
        {
            int64_t s = oi > o0 ? x->strides[oi - 1] : 1;
            /* Skip trailing size-1 old dims for the base stride. */
            for (int k = oi - 1; k >= o0; k--)
                if (x->shape[k] != 1) {
                    s = x->strides[k];
                    break;
                }
            for (int k = ni - 1; k >= n0; k--) {
                strides[k] = s;
                s *= shape[k];
            }
        }
    }
    return true;
}

static keel_status reshape_impl(const keel_tensor *x, int ndim,
                                const int64_t *shape, keel_tensor **out)
{
    int64_t full[KEEL_MAX_DIMS], strides[KEEL_MAX_DIMS];
    int64_t known = 1, total;
    int infer = -1;
    keel_tensor *c;
    keel_status st;

    NEED(x && out, "keel_reshape: %s is NULL", x ? "out" : "x");
    NEED(ndim >= 0 && ndim <= KEEL_MAX_DIMS && (ndim == 0 || shape),
         "keel_reshape: bad target rank %d", ndim);
    total = keel__numel(x->ndim, x->shape);
    for (int i = 0; i < ndim; i++) {
        full[i] = shape[i];
        if (shape[i] == -1) {
            NEED(infer < 0, "keel_reshape: more than one -1 in the shape");
            infer = i;
        } else {
            NEED(shape[i] >= 0, "keel_reshape: shape[%d] = %lld", i,
                 (long long)shape[i]);
            if (__builtin_mul_overflow(known, shape[i], &known)) {
                char a[KEEL_MAX_DIMS * 22 + 4];
                return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                                   "keel_reshape: the dimensions of %s "
                                   "multiply past 2^63-1",
                                   keel__shape_str(ndim, shape, a, sizeof(a)));
            }
        }
    }
    if (infer >= 0) {
        NEED(known > 0 && total % known == 0,
             "keel_reshape: cannot infer -1 for %lld elements",
             (long long)total);
        full[infer] = total / known;
    }
    /* Equal element counts do not bound the strides of an empty shape. */
    if (!keel__shape_size(ndim, full, keel_dtype_size(x->dtype), NULL, NULL))
        return keel__shape_check("keel_reshape", ndim, full, x->dtype);
    if (keel__numel(ndim, full) != total) {
        char a[128];
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_reshape: %s has %lld elements, the new "
                           "shape has %lld",
                           keel__tensor_str(x, a, sizeof(a)),
                           (long long)total,
                           (long long)keel__numel(ndim, full));
    }
    if (view_strides(x, ndim, full, strides))
        return keel__tensor_view(x, ndim, full, strides, x->offset, out);
    /* The copy is part of this reshape: the caller records one node. */
    keel__no_record_begin();
    st = keel_contiguous(x, &c);
    keel__no_record_end();
    if (st != KEEL_STATUS_OK)
        return st;
    keel__contiguous_strides(ndim, full, strides);
    st = keel__tensor_view(c, ndim, full, strides, c->offset, out);
    keel_tensor_free(c);
    return st;
}

static keel_status permute_impl(const keel_tensor *x, const int *perm,
                                keel_tensor **out)
{
    int64_t shape[KEEL_MAX_DIMS], strides[KEEL_MAX_DIMS];
    bool seen[KEEL_MAX_DIMS] = {false};

    NEED(x && out, "keel_permute: %s is NULL", x ? "out" : "x");
    NEED(x->ndim == 0 || perm, "keel_permute: perm is NULL");
    for (int i = 0; i < x->ndim; i++) {
        int a = keel__axis(perm[i], x->ndim);
        NEED(a >= 0 && !seen[a],
             "keel_permute: perm[%d] = %d is out of range or repeated for "
             "%d dims",
             i, perm[i], x->ndim);
        seen[a] = true;
        shape[i] = x->shape[a];
        strides[i] = x->strides[a];
    }
    return keel__tensor_view(x, x->ndim, shape, strides, x->offset, out);
}

keel_status keel_transpose(const keel_tensor *x, int axis0, int axis1,
                           keel_tensor **out)
{
    int perm[KEEL_MAX_DIMS], a, b;

    NEED(x && out, "keel_transpose: %s is NULL", x ? "out" : "x");
    a = keel__axis(axis0, x->ndim);
    b = keel__axis(axis1, x->ndim);
    NEED(a >= 0 && b >= 0, "keel_transpose: axes %d, %d out of range for %d "
                           "dims",
         axis0, axis1, x->ndim);
    for (int i = 0; i < x->ndim; i++)
        perm[i] = i;
    perm[a] = b;
    perm[b] = a;
    return keel_permute(x, perm, out);
}

/* p[4] receives (axis, start, length, step) for autograd. */
static keel_status slice_impl(const keel_tensor *x, int axis, int64_t start,
                              int64_t stop, int64_t step, keel_tensor **out,
                              int64_t *p)
{
    int64_t shape[KEEL_MAX_DIMS], strides[KEEL_MAX_DIMS], n, len;
    int a;

    NEED(x && out, "keel_slice: %s is NULL", x ? "out" : "x");
    a = keel__axis(axis, x->ndim);
    NEED(a >= 0, "keel_slice: axis %d out of range for %d dims", axis,
         x->ndim);
    NEED(step != 0, "keel_slice: step is 0");
    n = x->shape[a];
    /* Python slice semantics. Any int64_t start, stop and step (INT64_MIN
     * too): the distance is at most n and the step's magnitude is taken
     * unsigned, so nothing overflows. */
    if (step > 0) {
        start = start < 0 ? (start + n < 0 ? 0 : start + n)
                          : (start > n ? n : start);
        stop = stop < 0 ? (stop + n < 0 ? 0 : stop + n) : (stop > n ? n : stop);
        len = stop > start
                  ? (int64_t)((uint64_t)(stop - start - 1) / (uint64_t)step) + 1
                  : 0;
    } else {
        start = start < 0 ? (start + n < 0 ? -1 : start + n)
                          : (start >= n ? n - 1 : start);
        stop = stop < 0 ? (stop + n < 0 ? -1 : stop + n)
                        : (stop >= n ? n - 1 : stop);
        len = start > stop ? (int64_t)((uint64_t)(start - stop - 1) /
                                       (0 - (uint64_t)step)) +
                                 1
                           : 0;
    }
    for (int i = 0; i < x->ndim; i++) {
        shape[i] = x->shape[i];
        strides[i] = x->strides[i];
    }
    shape[a] = len;
    /* With two or more elements, |step| < n and the new stride stays
     * inside x's extent; with fewer, the stride is never used to address
     * anything, so keep x's. */
    if (len > 1)
        strides[a] = x->strides[a] * step;
    p[0] = a;
    p[1] = len ? start : 0;
    p[2] = len;
    p[3] = step;
    return keel__tensor_view(x, x->ndim, shape, strides,
                             x->offset + (len ? start * x->strides[a] : 0),
                             out);
}

static keel_status expand_impl(const keel_tensor *x, int ndim,
                               const int64_t *shape, keel_tensor **out)
{
    int64_t nshape[KEEL_MAX_DIMS], strides[KEEL_MAX_DIMS];

    NEED(x && out, "keel_expand: %s is NULL", x ? "out" : "x");
    NEED(ndim >= x->ndim && ndim <= KEEL_MAX_DIMS && (ndim == 0 || shape),
         "keel_expand: cannot expand %d dims to %d", x->ndim, ndim);
    for (int i = ndim - 1, j = x->ndim - 1; i >= 0; i--, j--) {
        int64_t want = shape[i];
        if (j >= 0) {
            if (want == -1)
                want = x->shape[j];
            if (x->shape[j] == want) {
                nshape[i] = want;
                strides[i] = x->strides[j];
            } else if (x->shape[j] == 1 && want >= 0) {
                nshape[i] = want;
                strides[i] = 0;
            } else {
                char a[128];
                return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                                   "keel_expand: %s cannot be broadcast: "
                                   "dim %d is %lld, target %lld",
                                   keel__tensor_str(x, a, sizeof(a)), j,
                                   (long long)x->shape[j], (long long)want);
            }
        } else {
            NEED(want >= 0, "keel_expand: new leading dim %d is %lld", i,
                 (long long)want);
            nshape[i] = want;
            strides[i] = 0;
        }
    }
    /* Stride 0 costs no memory, but counts and strides still must fit. */
    if (!keel__shape_size(ndim, nshape, keel_dtype_size(x->dtype), NULL,
                          NULL))
        return keel__shape_check("keel_expand", ndim, nshape, x->dtype);
    return keel__tensor_view(x, ndim, nshape, strides, x->offset, out);
}

static keel_status squeeze_impl(const keel_tensor *x, int naxes,
                                const int *axes, keel_tensor **out)
{
    int64_t shape[KEEL_MAX_DIMS], strides[KEEL_MAX_DIMS];
    bool drop[KEEL_MAX_DIMS] = {false};
    int n = 0;

    NEED(x && out, "keel_squeeze: %s is NULL", x ? "out" : "x");
    NEED(naxes >= 0, "keel_squeeze: naxes = %d is negative", naxes);
    NEED(naxes == 0 || axes, "keel_squeeze: axes is NULL with naxes = %d",
         naxes);
    for (int i = 0; i < naxes; i++) {
        int a = keel__axis(axes[i], x->ndim);
        NEED(a >= 0, "keel_squeeze: axis %d out of range for %d dims",
             axes[i], x->ndim);
        drop[a] = x->shape[a] == 1; /* Paddle: non-1 axes are kept */
    }
    for (int i = 0; i < x->ndim; i++) {
        if (naxes == 0 ? x->shape[i] == 1 : drop[i])
            continue;
        shape[n] = x->shape[i];
        strides[n++] = x->strides[i];
    }
    return keel__tensor_view(x, n, shape, strides, x->offset, out);
}

static keel_status unsqueeze_impl(const keel_tensor *x, int axis,
                                  keel_tensor **out)
{
    int64_t shape[KEEL_MAX_DIMS], strides[KEEL_MAX_DIMS];
    int a;

    NEED(x && out, "keel_unsqueeze: %s is NULL", x ? "out" : "x");
    NEED(x->ndim < KEEL_MAX_DIMS, "keel_unsqueeze: already %d dims",
         x->ndim);
    a = keel__axis(axis, x->ndim + 1);
    NEED(a >= 0, "keel_unsqueeze: axis %d out of range for %d dims", axis,
         x->ndim);
    for (int i = 0, j = 0; i <= x->ndim; i++) {
        if (i == a) {
            shape[i] = 1;
            /* A size-1 dim's stride addresses nothing; 1 when the
             * natural one would not fit (a huge empty view). */
            if (j >= x->ndim ||
                __builtin_mul_overflow(x->strides[j], x->shape[j],
                                       &strides[i]))
                strides[i] = 1;
            continue;
        }
        shape[i] = x->shape[j];
        strides[i] = x->strides[j];
        j++;
    }
    return keel__tensor_view(x, x->ndim + 1, shape, strides, x->offset, out);
}

/*
 * The public view functions: the view itself, then, when x requires a
 * gradient and grad mode is on, a graph node whose backward maps the
 * gradient back to x's geometry (see autograd.c).
 */
static keel_status view_done(keel_status st, enum keel_ag_view kind,
                             const keel_tensor *x, keel_tensor **out,
                             const int64_t *params, int nparams)
{
    if (st != KEEL_STATUS_OK || !keel__view_wants_record(x))
        return st;
    st = keel__view_record(kind, x, *out, params, nparams);
    if (st != KEEL_STATUS_OK) {
        keel_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

/* A finished view handed to a graph capture (jit/), when one is on. */
static keel_status view_capture(keel_status st, const char *kind,
                                const keel_tensor *x, keel_tensor **out,
                                const int64_t *params, int nparams)
{
    if (st != KEEL_STATUS_OK || !keel__capture)
        return st;
    st = keel__capture_view(kind, x, *out, params, nparams);
    if (st != KEEL_STATUS_OK) {
        keel_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

/* Reshape-like views are captured as a reshape to the result's shape. */
static keel_status reshape_capture(keel_status st, const keel_tensor *x,
                                   keel_tensor **out)
{
    if (st != KEEL_STATUS_OK || !keel__capture)
        return st;
    return view_capture(st, "reshape", x, out, (*out)->shape, (*out)->ndim);
}

keel_status keel_reshape(const keel_tensor *x, int ndim, const int64_t *shape,
                         keel_tensor **out)
{
    return reshape_capture(view_done(reshape_impl(x, ndim, shape, out),
                                     KEEL_AG_VIEW_RESHAPE, x, out, NULL, 0),
                           x, out);
}

keel_status keel_permute(const keel_tensor *x, const int *perm,
                         keel_tensor **out)
{
    int64_t p[KEEL_MAX_DIMS];
    keel_status st = permute_impl(x, perm, out);

    if (st != KEEL_STATUS_OK)
        return st;
    for (int i = 0; i < x->ndim; i++)
        p[i] = keel__axis(perm[i], x->ndim);
    return view_capture(view_done(st, KEEL_AG_VIEW_PERMUTE, x, out, p,
                                  x->ndim),
                        "permute", x, out, p, x->ndim);
}

keel_status keel_slice(const keel_tensor *x, int axis, int64_t start,
                       int64_t stop, int64_t step, keel_tensor **out)
{
    int64_t p[4] = {0};
    keel_status st;

    st = view_done(slice_impl(x, axis, start, stop, step, out, p),
                   KEEL_AG_VIEW_SLICE, x, out, p, 4);
    /* The arguments as given: a slice to the end stays one. */
    return view_capture(st, "slice", x, out,
                        (int64_t[]){p[0], start, stop, step}, 4);
}

keel_status keel_expand(const keel_tensor *x, int ndim, const int64_t *shape,
                        keel_tensor **out)
{
    keel_status st = view_done(expand_impl(x, ndim, shape, out),
                               KEEL_AG_VIEW_EXPAND, x, out, NULL, 0);

    if (st != KEEL_STATUS_OK || !keel__capture)
        return st;
    return view_capture(st, "expand", x, out, (*out)->shape, (*out)->ndim);
}

keel_status keel_squeeze(const keel_tensor *x, int naxes, const int *axes,
                         keel_tensor **out)
{
    return reshape_capture(view_done(squeeze_impl(x, naxes, axes, out),
                                     KEEL_AG_VIEW_RESHAPE, x, out, NULL, 0),
                           x, out);
}

keel_status keel_unsqueeze(const keel_tensor *x, int axis, keel_tensor **out)
{
    return reshape_capture(view_done(unsqueeze_impl(x, axis, out),
                                     KEEL_AG_VIEW_RESHAPE, x, out, NULL, 0),
                           x, out);
}

keel_status keel_flatten(const keel_tensor *x, int start_axis, int stop_axis,
                         keel_tensor **out)
{
    int64_t shape[KEEL_MAX_DIMS];
    int s, e, n = 0;

    NEED(x && out, "keel_flatten: %s is NULL", x ? "out" : "x");
    if (x->ndim == 0)
        return keel_reshape(x, 1, (int64_t[]){1}, out);
    s = keel__axis(start_axis, x->ndim);
    e = keel__axis(stop_axis, x->ndim);
    NEED(s >= 0 && e >= 0 && s <= e,
         "keel_flatten: axes %d..%d invalid for %d dims", start_axis,
         stop_axis, x->ndim);
    for (int i = 0; i < s; i++)
        shape[n++] = x->shape[i];
    shape[n] = 1;
    for (int i = s; i <= e; i++)
        shape[n] *= x->shape[i];
    n++;
    for (int i = e + 1; i < x->ndim; i++)
        shape[n++] = x->shape[i];
    return keel_reshape(x, n, shape, out);
}

keel_status keel_contiguous(const keel_tensor *x, keel_tensor **out)
{
    NEED(x && out, "keel_contiguous: %s is NULL", x ? "out" : "x");
    if (keel_tensor_is_contiguous(x)) {
        *out = keel_tensor_ref((keel_tensor *)x);
        return KEEL_STATUS_OK;
    }
    return keel__run1(KEEL_OP_COPY, &x, 1, NULL, 0, out);
}

/* ---- moving data ------------------------------------------------------------- */

keel_status keel_tensor_to_host(const keel_tensor *t, void *dst, size_t size)
{
    keel_tensor *c;
    keel_status st;
    uint64_t bytes;

    NEED(t, "keel_tensor_to_host: tensor is NULL");
    bytes = (uint64_t)keel_tensor_numel(t) * keel_dtype_size(t->dtype);
    if (size != bytes) {
        char a[128];
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_tensor_to_host: %s needs %llu bytes, the "
                           "buffer has %zu",
                           keel__tensor_str(t, a, sizeof(a)),
                           (unsigned long long)bytes, size);
    }
    if (!bytes)
        return KEEL_STATUS_OK;
    NEED(dst, "keel_tensor_to_host: dst is NULL");
    keel__no_record_begin(); /* a readback is not part of any graph */
    st = keel_contiguous(t, &c);
    keel__no_record_end();
    if (st != KEEL_STATUS_OK)
        return st;
    {
        keel_tensor_desc d;
        keel__desc(c, &d);
        st = keel_mem_copy_d2h(c->storage->place, dst, d.data, bytes);
    }
    keel_tensor_free(c);
    return st;
}

keel_status keel_tensor_to(const keel_tensor *t, const char *device,
                           keel_tensor **out)
{
    keel_place place;
    keel_tensor *c, *r;
    keel_status st;
    keel_tensor_desc d;

    NEED(t && out, "keel_tensor_to: %s is NULL", t ? "out" : "tensor");
    *out = NULL;
    st = keel__place_of(device, &place);
    if (st != KEEL_STATUS_OK)
        return st;
    if (place.plugin == t->storage->place.plugin &&
        place.device == t->storage->place.device) {
        *out = keel_tensor_ref((keel_tensor *)t);
        return KEEL_STATUS_OK;
    }
    keel__no_record_begin();
    st = keel_contiguous(t, &c);
    keel__no_record_end();
    if (st != KEEL_STATUS_OK)
        return st;
    st = keel__tensor_new(place, t->dtype, t->ndim, t->shape, &r);
    if (st == KEEL_STATUS_OK) {
        keel__desc(c, &d);
        st = keel_mem_copy_peer(place, r->storage->data, c->storage->place,
                                d.data, r->storage->nbytes);
        if (st != KEEL_STATUS_OK) {
            keel_tensor_free(r);
            r = NULL;
        }
    }
    keel_tensor_free(c);
    *out = r;
    return view_capture(view_done(st, KEEL_AG_VIEW_TO, t, out, NULL, 0), "to",
                        t, out, NULL, 0);
}

keel_status keel_cast(const keel_tensor *t, keel_dtype dtype,
                      keel_tensor **out)
{
    keel_attr a = keel_attr_dtype("dtype", dtype);

    NEED(t && out, "keel_cast: %s is NULL", t ? "out" : "tensor");
    if ((unsigned)dtype >= KEEL_DTYPE_COUNT_)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_cast: %d is not a keel dtype", (int)dtype);
    if (t->dtype == dtype) {
        *out = keel_tensor_ref((keel_tensor *)t);
        return KEEL_STATUS_OK;
    }
    return keel__run1(KEEL_OP_CAST, &t, 1, &a, 1, out);
}

/* Host conversions for printing and item(). */
static double half_to_double(uint16_t h)
{
    uint32_t sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
    double v;

    if (exp == 0)
        v = ldexp((double)man, -24);
    else if (exp == 31)
        v = man ? NAN : INFINITY;
    else
        v = ldexp((double)(man | 1024), (int)exp - 25);
    return sign ? -v : v;
}

static double bf16_to_double(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;

    memcpy(&f, &u, sizeof(f));
    return f;
}

static double load_double(const void *p, keel_dtype dt)
{
    switch (dt) {
    case KEEL_F32:
        return *(const float *)p;
    case KEEL_F64:
        return *(const double *)p;
    case KEEL_F16:
        return half_to_double(*(const uint16_t *)p);
    case KEEL_BF16:
        return bf16_to_double(*(const uint16_t *)p);
    case KEEL_I8:
        return *(const int8_t *)p;
    case KEEL_U8:
        return *(const uint8_t *)p;
    case KEEL_I32:
        return *(const int32_t *)p;
    case KEEL_I64:
        return (double)*(const int64_t *)p;
    case KEEL_BOOL:
        return *(const uint8_t *)p ? 1.0 : 0.0;
    default:
        return NAN;
    }
}

keel_status keel_tensor_item(const keel_tensor *t, int64_t index,
                             double *value)
{
    int64_t n, rem, off = 0;
    unsigned char buf[8];
    keel_tensor_desc d;
    keel_status st;
    uint32_t es;

    NEED(t && value, "keel_tensor_item: %s is NULL", t ? "value" : "tensor");
    n = keel_tensor_numel(t);
    NEED(index >= 0 && index < n,
         "keel_tensor_item: index %lld out of range for %lld elements",
         (long long)index, (long long)n);
    rem = index;
    for (int i = t->ndim - 1; i >= 0; i--) {
        off += (rem % t->shape[i]) * t->strides[i];
        rem /= t->shape[i];
    }
    keel__desc(t, &d);
    es = keel_dtype_size(t->dtype);
    st = keel_mem_copy_d2h(t->storage->place, buf,
                           d.data + (keel_dptr)(off * (int64_t)es), es);
    if (st != KEEL_STATUS_OK)
        return st;
    *value = load_double(buf, t->dtype);
    return KEEL_STATUS_OK;
}

/* ---- printing ------------------------------------------------------------------ */

struct fmt {
    char *buf;
    size_t size, len;
};

static void put(struct fmt *f, const char *fmt, ...) KEEL_PRINTF(2, 3);

static void put(struct fmt *f, const char *fmt, ...)
{
    va_list ap;
    int n;
    char *dst = f->len < f->size ? f->buf + f->len : NULL;
    size_t room = f->len < f->size ? f->size - f->len : 0;

    va_start(ap, fmt);
    n = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        f->len += (size_t)n;
}

static void put_value(struct fmt *f, double v, keel_dtype dt)
{
    if (dt == KEEL_BOOL)
        put(f, "%s", v != 0 ? "True" : "False");
    else if (dt == KEEL_I8 || dt == KEEL_U8 || dt == KEEL_I32 ||
             dt == KEEL_I64)
        put(f, "%lld", (long long)v);
    else
        put(f, "%.5g", v);
}

#define EDGE 3

static void put_dims(struct fmt *f, const unsigned char *data, keel_dtype dt,
                     int ndim, const int64_t *shape, int dim, int64_t base,
                     int indent)
{
    int64_t stride = 1;

    for (int i = dim + 1; i < ndim; i++)
        stride *= shape[i];
    put(f, "[");
    for (int64_t i = 0; i < shape[dim]; i++) {
        if (shape[dim] > 2 * EDGE && i == EDGE) {
            put(f, "...%s", dim == ndim - 1 ? ", " : ",\n");
            if (dim != ndim - 1)
                put(f, "%*s", indent + 1, "");
            i = shape[dim] - EDGE - 1;
            continue;
        }
        if (dim == ndim - 1)
            put_value(f, load_double(data + (base + i) * keel_dtype_size(dt),
                                     dt),
                      dt);
        else
            put_dims(f, data, dt, ndim, shape, dim + 1, base + i * stride,
                     indent + 1);
        if (i + 1 < shape[dim])
            put(f, dim == ndim - 1 ? ", " : ",\n%*s", indent + 1, "");
    }
    put(f, "]");
}

int keel_tensor_format(const keel_tensor *t, char *buf, size_t size)
{
    struct fmt f = {buf, size, 0};
    unsigned char *host = NULL;
    char place[96];
    uint64_t bytes;

    if (buf && size)
        buf[0] = '\0';
    if (!t) {
        put(&f, "Tensor(NULL)");
        return (int)f.len;
    }
    put(&f, "Tensor(shape=[");
    for (int i = 0; i < t->ndim; i++)
        put(&f, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    keel__lock();
    keel__place_str(t->storage->place, place, sizeof(place));
    keel__unlock();
    put(&f, "], dtype=%s, place=%s,\n       ", keel_dtype_name(t->dtype),
        place);
    bytes = (uint64_t)keel_tensor_numel(t) * keel_dtype_size(t->dtype);
    host = malloc(bytes ? bytes : 1);
    if (!host || keel_tensor_to_host(t, host, bytes) != KEEL_STATUS_OK) {
        put(&f, "<unreadable: %s>)", host ? keel_last_error() : "no memory");
        free(host);
        return (int)f.len;
    }
    if (t->ndim == 0)
        put_value(&f, load_double(host, t->dtype), t->dtype);
    else
        put_dims(&f, host, t->dtype, t->ndim, t->shape, 0, 0, 7);
    put(&f, ")");
    free(host);
    return (int)f.len;
}

keel_status keel_tensor_print(const keel_tensor *t, FILE *file)
{
    int n;
    char *buf;

    NEED(t, "keel_tensor_print: tensor is NULL");
    n = keel_tensor_format(t, NULL, 0);
    buf = malloc((size_t)n + 1);
    if (!buf)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_tensor_print: out of host memory");
    keel_tensor_format(t, buf, (size_t)n + 1);
    fprintf(file ? file : stdout, "%s\n", buf);
    free(buf);
    return KEEL_STATUS_OK;
}
