/*
 * Tensor objects: dtypes, descriptors, lifetime (storage and reference
 * counts) and properties. What builds tensors through ops (creation, views,
 * moving data, printing) is the ops layer's (ops/tensor_ops.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tensor/tensor_internal.h"

/* ---- dtypes ---------------------------------------------------------------- */

static const char *const dtype_names[KEEL_DTYPE_COUNT_] = {
    [KEEL_F32] = "float32", [KEEL_F64] = "float64", [KEEL_F16] = "float16",
    [KEEL_BF16] = "bfloat16", [KEEL_I8] = "int8",   [KEEL_U8] = "uint8",
    [KEEL_I32] = "int32",   [KEEL_I64] = "int64",   [KEEL_BOOL] = "bool",
};

const char *keel_dtype_name(keel_dtype dtype)
{
    if ((unsigned)dtype >= KEEL_DTYPE_COUNT_)
        return "unknown";
    return dtype_names[dtype];
}

keel_status keel_dtype_parse(const char *name, keel_dtype *dtype)
{
    static const struct {
        const char *alias;
        keel_dtype dt;
    } aliases[] = {{"float", KEEL_F32},  {"double", KEEL_F64},
                   {"half", KEEL_F16},   {"int", KEEL_I32},
                   {"long", KEEL_I64},   {"fp32", KEEL_F32},
                   {"fp16", KEEL_F16},   {"bf16", KEEL_BF16}};

    if (!name || !dtype)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_dtype_parse: %s is NULL",
                           name ? "dtype" : "name");
    for (int i = 0; i < KEEL_DTYPE_COUNT_; i++)
        if (!strcasecmp(name, dtype_names[i])) {
            *dtype = (keel_dtype)i;
            return KEEL_STATUS_OK;
        }
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
        if (!strcasecmp(name, aliases[i].alias)) {
            *dtype = aliases[i].dt;
            return KEEL_STATUS_OK;
        }
    return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                       "unknown dtype '%s' (expected float32, float64, "
                       "float16, bfloat16, int8, uint8, int32, int64 or bool)",
                       name);
}

static bool is_float(keel_dtype d)
{
    return d == KEEL_F32 || d == KEEL_F64 || d == KEEL_F16 || d == KEEL_BF16;
}

/* Rank within a category, for promotion. */
static int float_rank(keel_dtype d)
{
    switch (d) {
    case KEEL_F16:
    case KEEL_BF16:
        return 1;
    case KEEL_F32:
        return 2;
    default:
        return 3;
    }
}

keel_dtype keel_dtype_promote(keel_dtype a, keel_dtype b)
{
    if (a == b)
        return a;
    if (a == KEEL_BOOL)
        return b;
    if (b == KEEL_BOOL)
        return a;
    if (is_float(a) && is_float(b)) {
        if ((a == KEEL_F16 && b == KEEL_BF16) ||
            (a == KEEL_BF16 && b == KEEL_F16))
            return KEEL_F32;
        return float_rank(a) >= float_rank(b) ? a : b;
    }
    if (is_float(a))
        return a;
    if (is_float(b))
        return b;
    /* Two integer types. */
    if ((a == KEEL_U8 && b == KEEL_I8) || (a == KEEL_I8 && b == KEEL_U8))
        return KEEL_I32;
    return keel_dtype_size(a) >= keel_dtype_size(b) ? a : b;
}

/* ---- helpers --------------------------------------------------------------- */

int64_t keel__numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;

    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

int keel__axis(int64_t axis, int ndim)
{
    if (axis < -(int64_t)ndim || axis >= ndim)
        return -1;
    return (int)(axis < 0 ? axis + ndim : axis);
}

keel_dptr keel__tensor_dptr(const keel_tensor *t)
{
    return t->storage->data +
           (keel_dptr)(t->offset * (int64_t)keel_dtype_size(t->dtype));
}

void keel__desc(const keel_tensor *t, keel_tensor_desc *d)
{
    d->data = keel__tensor_dptr(t);
    d->dtype = t->dtype;
    d->ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++) {
        d->shape[i] = t->shape[i];
        d->strides[i] = t->strides[i];
    }
}

const char *keel__tensor_str(const keel_tensor *t, char *buf, size_t size)
{
    size_t n;

    n = (size_t)snprintf(buf, size, "%s[", keel_dtype_name(t->dtype));
    for (int i = 0; i < t->ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "",
                              (long long)t->shape[i]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
    return buf;
}

keel_status keel__place_of(const char *device, keel_place *place)
{
    if (!device)
        return keel_current_place(place);
    return keel_place_parse(device, place);
}

/* "[2, 3]" into buf (a shape that may be outside the limits). */
const char *keel__shape_str(int ndim, const int64_t *shape, char *buf,
                            size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "[");

    for (int i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "",
                              (long long)shape[i]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
    return buf;
}

keel_status keel__shape_check(const char *what, int ndim,
                              const int64_t *shape, keel_dtype dtype)
{
    char a[KEEL_MAX_DIMS * 22 + 4];

    if ((unsigned)dtype >= KEEL_DTYPE_COUNT_)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: %d is not a keel dtype", what, (int)dtype);
    if (ndim < 0 || ndim > KEEL_MAX_DIMS)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: ndim %d is outside [0, %d]", what, ndim,
                           KEEL_MAX_DIMS);
    if (ndim > 0 && !shape)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: shape is NULL", what);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "%s: shape[%d] = %lld is negative", what, i,
                               (long long)shape[i]);
    if (!keel__shape_size(ndim, shape, keel_dtype_size(dtype), NULL, NULL))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: shape %s of %s is too large: the product of "
                           "its dimensions (a 0 counted as 1) times %u "
                           "bytes per element must be at most 2^63-1 bytes",
                           what, keel__shape_str(ndim, shape, a, sizeof(a)),
                           keel_dtype_name(dtype),
                           (unsigned)keel_dtype_size(dtype));
    return KEEL_STATUS_OK;
}

/* Row-major strides; cannot overflow for a shape within the limits of
 * keel__shape_size (zero dimensions count as 1 there and here). */
void keel__contiguous_strides(int ndim, const int64_t *shape,
                               int64_t *strides)
{
    int64_t s = 1;

    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i] > 0 ? shape[i] : 1;
    }
}

/* ---- lifetime ---------------------------------------------------------------- */

static void storage_release(struct keel_storage *s)
{
    if (!s || atomic_fetch_sub(&s->refcount, 1) != 1)
        return;
    if (s->external) {
        /* Work queued on the memory must finish before the caller gets it
         * back; a failure here cannot be returned, only logged. */
        if (keel_device_synchronize(s->place) != KEEL_STATUS_OK ||
            keel_mem_unregister_host(s->place, s->data, s->ext_bytes) !=
                KEEL_STATUS_OK)
            keel__log(KEEL_LOG_WARN,
                      "releasing host memory used in place: %s",
                      keel_last_error());
        if (s->ext_release)
            s->ext_release(s->ext_ctx);
    }
    keel__alloc_release(s->block);
    free(s);
}

static _Atomic(keel_tensor_release_fn) release_hook;

void keel__tensor_set_release_hook(keel_tensor_release_fn fn)
{
    atomic_store_explicit(&release_hook, fn, memory_order_release);
}

void keel_tensor_free(keel_tensor *t)
{
    if (!t || atomic_fetch_sub(&t->refcount, 1) != 1)
        return;
    /* Only autograd attaches graph references, and it installs the hook
     * before it does. */
    if (t->grad_fn || t->grad || t->hooks)
        atomic_load_explicit(&release_hook, memory_order_acquire)(t);
    storage_release(t->storage);
    free(t);
}

void keel__tensor_adopt(keel_tensor *dst, const keel_tensor *src)
{
    struct keel_storage *old = dst->storage;
    unsigned ver = atomic_load(&old->version);

    atomic_fetch_add(&src->storage->refcount, 1);
    dst->storage = src->storage;
    /* A version never seen before, so saved copies of dst fail their
     * check rather than read the new values as the old. */
    atomic_store(&dst->storage->version,
                 atomic_load(&dst->storage->version) + ver + 1);
    dst->dtype = src->dtype;
    dst->ndim = src->ndim;
    for (int i = 0; i < src->ndim; i++) {
        dst->shape[i] = src->shape[i];
        dst->strides[i] = src->strides[i];
    }
    dst->offset = src->offset;
    storage_release(old);
}

keel_status keel__tensor_copy_values(keel_tensor *dst, const keel_tensor *src)
{
    keel_tensor_desc dd, sd;
    keel_status st;

    if (dst->dtype != src->dtype || dst->ndim != src->ndim ||
        !keel_tensor_is_contiguous(dst) || !keel_tensor_is_contiguous(src) ||
        dst->storage->place.plugin != src->storage->place.plugin ||
        dst->storage->place.device != src->storage->place.device)
        return keel__error(KEEL_STATUS_INTERNAL,
                           "copy_values: tensors of different dtype, rank, "
                           "device or layout");
    for (int i = 0; i < dst->ndim; i++)
        if (dst->shape[i] != src->shape[i])
            return keel__error(KEEL_STATUS_INTERNAL,
                               "copy_values: shapes differ");
    keel__desc(dst, &dd);
    keel__desc(src, &sd);
    st = keel_mem_copy_d2d(dst->storage->place, dd.data, sd.data,
                           (uint64_t)keel__numel(dst->ndim, dst->shape) *
                               keel_dtype_size(dst->dtype));
    if (st == KEEL_STATUS_OK)
        atomic_fetch_add(&dst->storage->version, 1);
    return st;
}

/* A fresh tensor header: one reference, no graph. */
static void header_init(keel_tensor *t)
{
    atomic_init(&t->refcount, 1);
    t->requires_grad = false;
    t->grad_slot = 0;
    t->grad_fn = NULL;
    t->grad = NULL;
    t->hooks = NULL;
    t->hook_epoch = 0;
    t->hook_pending = 0;
}

keel_tensor *keel_tensor_ref(keel_tensor *t)
{
    if (t)
        atomic_fetch_add(&t->refcount, 1);
    return t;
}

/* A tensor header and a storage block header, both or neither. */
static keel_status new_pair(keel_tensor **t, struct keel_storage **s)
{
    *t = malloc(sizeof(**t));
    *s = malloc(sizeof(**s));
    if (*t && *s)
        return KEEL_STATUS_OK;
    free(*t);
    free(*s);
    return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                       "out of host memory for a tensor");
}

/* t, a fresh header, as the one view of storage s (data and block or
 * external fields already set): counters, place, size and geometry;
 * strides NULL means row-major. Returns t. */
static keel_tensor *tensor_over(keel_tensor *t, struct keel_storage *s,
                                keel_place place, uint64_t bytes,
                                keel_dtype dtype, int ndim,
                                const int64_t *shape, const int64_t *strides)
{
    atomic_init(&s->refcount, 1);
    atomic_init(&s->version, 0);
    s->place = place;
    s->nbytes = bytes;
    header_init(t);
    t->storage = s;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        if (strides)
            t->strides[i] = strides[i];
    }
    if (!strides)
        keel__contiguous_strides(ndim, shape, t->strides);
    t->offset = 0;
    return t;
}

keel_status keel__tensor_new(keel_place place, keel_dtype dtype, int ndim,
                             const int64_t *shape, keel_tensor **out)
{
    keel_tensor *t;
    struct keel_storage *s;
    uint64_t bytes;
    keel_status st;

    /* Every storage is made here: op outputs, loaders, batching. */
    if (!keel__shape_size(ndim, shape, keel_dtype_size(dtype), NULL, &bytes))
        return keel__shape_check("new tensor", ndim, shape, dtype);
    if ((st = new_pair(&t, &s)) != KEEL_STATUS_OK)
        return st;
    st = keel__alloc(place, bytes, &s->block, &s->data);
    if (st != KEEL_STATUS_OK) {
        free(t);
        free(s);
        return st;
    }
    s->external = false;
    s->ext_release = NULL;
    s->ext_ctx = NULL;
    s->ext_bytes = 0;
    *out = tensor_over(t, s, place, bytes, dtype, ndim, shape, NULL);
    return KEEL_STATUS_OK;
}

/* ---- host memory in place ------------------------------------------------------ */

static bool host_addresses(keel_place place)
{
    keel_device_props props;

    return keel_device_get_props(place, &props) == KEEL_STATUS_OK &&
           (props.features & KEEL_FEATURE_HOST_ADDRESSES);
}

keel_status keel_tensor_host_address(const keel_tensor *t, void **address)
{
    char name[64];
    keel_status st;

    if (!t || !address)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_tensor_host_address: %s is NULL",
                           !t ? "t" : "address");
    *address = NULL;
    if (!host_addresses(t->storage->place)) {
        keel_place_name(t->storage->place, name, sizeof(name));
        return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                           "keel_tensor_host_address: the memory of %s is "
                           "not host memory the process can address "
                           "(its plugin does not set "
                           "KEEL_FEATURE_HOST_ADDRESSES); copy it with "
                           "keel_tensor_to_host instead", name);
    }
    if ((st = keel_device_synchronize(t->storage->place)) != KEEL_STATUS_OK)
        return st;
    if (t->storage->data == 0) /* nothing allocated: an empty tensor */
        return KEEL_STATUS_OK;
    *address = (char *)(uintptr_t)t->storage->data +
               t->offset * (int64_t)keel_dtype_size(t->dtype);
    return KEEL_STATUS_OK;
}

/* Bytes from element [0,...,0] to one past the farthest element the
 * geometry reaches; false on overflow. Every dimension > 0. */
static bool strided_extent(int ndim, const int64_t *shape,
                           const int64_t *strides, size_t esize,
                           uint64_t *bytes)
{
    int64_t last = 0, step;

    for (int i = 0; i < ndim; i++) {
        if (__builtin_mul_overflow(shape[i] - 1, strides[i], &step) ||
            __builtin_add_overflow(last, step, &last))
            return false;
    }
    if (__builtin_add_overflow(last, 1, &last) ||
        __builtin_mul_overflow(last, (int64_t)esize, &last))
        return false;
    *bytes = (uint64_t)last;
    return true;
}

keel_status keel_tensor_from_host_memory(void *data, keel_dtype dtype,
                                         int ndim, const int64_t *shape,
                                         const int64_t *strides,
                                         const char *device,
                                         keel_host_memory_release_fn release,
                                         void *ctx, keel_tensor **out)
{
    static const char what[] = "keel_tensor_from_host_memory";
    size_t esize = keel_dtype_size(dtype);
    keel_place place;
    keel_tensor *t;
    struct keel_storage *s;
    uint64_t bytes = 0;
    keel_dptr dptr;
    keel_status st;
    char name[64];
    bool empty = false;

    if (!out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: out is NULL",
                           what);
    *out = NULL;
    if ((st = keel__shape_check(what, ndim, shape, dtype)) ||
        (st = keel__place_of(device, &place)))
        return st;
    for (int i = 0; i < ndim; i++) {
        empty |= shape[i] == 0;
        if (strides && strides[i] < 0)
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "%s: strides[%d] = %lld is negative", what,
                               i, (long long)strides[i]);
    }
    if (empty) {
        /* Nothing to point at: a plain empty tensor, the memory is not
         * needed and goes back at once. */
        st = keel__tensor_new(place, dtype, ndim, shape, out);
        if (st == KEEL_STATUS_OK && release)
            release(ctx);
        return st;
    }
    if (!data)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: data is NULL",
                           what);
    if ((uintptr_t)data % esize)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: data %p is not aligned to the %zu-byte "
                           "elements of %s", what, data, esize,
                           keel_dtype_name(dtype));
    if (strides) {
        if (!strided_extent(ndim, shape, strides, esize, &bytes))
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "%s: the strides reach beyond 2^63-1 bytes",
                               what);
    } else {
        keel__shape_size(ndim, shape, esize, NULL, &bytes);
    }
    if ((uintptr_t)data + bytes < (uintptr_t)data)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: %llu bytes at %p wrap around the address "
                           "space", what, (unsigned long long)bytes, data);
    if ((st = new_pair(&t, &s)) != KEEL_STATUS_OK)
        return st;
    st = keel_mem_register_host(place, data, bytes, &dptr);
    if (st != KEEL_STATUS_OK) {
        free(t);
        free(s);
        if (st == KEEL_STATUS_NOT_SUPPORTED) {
            keel_place_name(place, name, sizeof(name));
            return keel__error(st, "%s: %s cannot use host memory in place "
                               "(its plugin has no memory.register_host, "
                               "ABI 1.4); copy with keel_tensor_from_host",
                               what, name);
        }
        return st;
    }
    s->data = dptr;
    s->block = NULL;
    s->external = true;
    s->ext_release = release;
    s->ext_ctx = ctx;
    s->ext_bytes = bytes;
    *out = tensor_over(t, s, place, bytes, dtype, ndim, shape, strides);
    return KEEL_STATUS_OK;
}

keel_status keel__tensor_view(const keel_tensor *x, int ndim,
                              const int64_t *shape, const int64_t *strides,
                              int64_t offset, keel_tensor **out)
{
    keel_tensor *t = malloc(sizeof(*t));

    if (!t)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "out of host memory for a tensor view");
    header_init(t);
    atomic_fetch_add(&x->storage->refcount, 1);
    t->storage = x->storage;
    t->dtype = x->dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        t->strides[i] = strides[i];
    }
    t->offset = offset;
    *out = t;
    return KEEL_STATUS_OK;
}

/* ---- properties -------------------------------------------------------------- */

keel_dtype keel_tensor_dtype(const keel_tensor *t)
{
    return t ? t->dtype : KEEL_DTYPE_COUNT_;
}

int keel_tensor_ndim(const keel_tensor *t)
{
    return t ? t->ndim : -1;
}

const int64_t *keel_tensor_shape(const keel_tensor *t)
{
    return t ? t->shape : NULL;
}

const int64_t *keel_tensor_strides(const keel_tensor *t)
{
    return t ? t->strides : NULL;
}

int64_t keel_tensor_offset(const keel_tensor *t)
{
    return t ? t->offset : 0;
}

int64_t keel_tensor_numel(const keel_tensor *t)
{
    return t ? keel__numel(t->ndim, t->shape) : 0;
}

keel_place keel_tensor_place(const keel_tensor *t)
{
    return t ? t->storage->place : (keel_place){-1, -1};
}

bool keel_tensor_is_contiguous(const keel_tensor *t)
{
    int64_t s = 1;

    if (!t)
        return false;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] == 0)
            return true;
        if (t->shape[i] != 1 && t->strides[i] != s)
            return false;
        s *= t->shape[i];
    }
    return true;
}

bool keel_tensor_shares_storage(const keel_tensor *a, const keel_tensor *b)
{
    return a && b && a->storage == b->storage;
}

