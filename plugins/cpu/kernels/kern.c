/*
 * CPU kernel toolkit: launching, attributes, conversions, iteration.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "kern.h"
#include "khalf.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define KEEL_X86 1
#endif

/* ---- launching -------------------------------------------------------------- */

#define KMAX_OPERANDS 130

/* Bytes spanned by a strided descriptor with elements: [lo, hi) relative
 * to data. False when the span does not fit in int64_t: a descriptor
 * from a core (or a test) is not trusted to stay within any limit. */
static bool extent(const keel_tensor_desc *d, int64_t *lo, int64_t *hi)
{
    int64_t es = keel_dtype_size(d->dtype), l = 0, h = 0;

    for (int i = 0; i < d->ndim; i++) {
        int64_t span;
        if (__builtin_mul_overflow(d->shape[i] - 1, d->strides[i], &span) ||
            (span < 0 ? __builtin_add_overflow(l, span, &l)
                      : __builtin_add_overflow(h, span, &h)))
            return false;
    }
    return !__builtin_mul_overflow(l, es, lo) &&
           !__builtin_add_overflow(h, 1, &h) &&
           !__builtin_mul_overflow(h, es, hi) &&
           !__builtin_sub_overflow(*hi, *lo, &h);
}

static keel_status check_desc(const keel_tensor_desc *d, const char *op,
                              const char *role, int i)
{
    int64_t n = 1;

    if ((unsigned)d->dtype >= KEEL_DTYPE_COUNT_ || d->ndim < 0 ||
        d->ndim > KEEL_MAX_DIMS)
        return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: %s %d has a bad descriptor (dtype %d, ndim %d)",
                       op, role, i, (int)d->dtype, (int)d->ndim);
    for (int k = 0; k < d->ndim; k++)
        if (d->shape[k] < 0)
            return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: %s %d has negative dim %d", op, role, i, k);
    /* Kernels multiply dimensions freely once this holds. */
    for (int k = 0; k < d->ndim; k++)
        if (__builtin_mul_overflow(n, d->shape[k], &n))
            return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: %s %d: the product of its dims overflows "
                           "int64 at dim %d (%lld)",
                           op, role, i, k, (long long)d->shape[k]);
    return KEEL_STATUS_OK;
}

/* Map every descriptor of a launch to host pointers, checking that each
 * strided extent lies inside one live allocation (one lock for all). */
static keel_status map_all(struct cpu_device *dev, const keel_kernel_args *a,
                           const char *op, void **in, void **out)
{
    int n = a->num_inputs + a->num_outputs, bad;
    keel_dptr ptr[KMAX_OPERANDS];
    uint64_t size[KMAX_OPERANDS];
    int64_t lo[KMAX_OPERANDS];
    void *host[KMAX_OPERANDS];
    keel_status st;

    for (int i = 0; i < n; i++) {
        bool is_in = i < a->num_inputs;
        const keel_tensor_desc *d =
            is_in ? &a->inputs[i] : &a->outputs[i - a->num_inputs];
        int64_t l = 0, h = 0;
        st = check_desc(d, op, is_in ? "input" : "output",
                        is_in ? i : i - a->num_inputs);
        if (st)
            return st;
        if (knumel(d) == 0) {
            ptr[i] = 0;
            size[i] = 0;
            lo[i] = 0;
            continue;
        }
        if (!extent(d, &l, &h))
            return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: %s %d: the byte span of its shape and strides "
                           "overflows int64",
                           op, is_in ? "input" : "output",
                           is_in ? i : i - a->num_inputs);
        ptr[i] = d->data + (keel_dptr)l;
        size[i] = (uint64_t)(h - l);
        lo[i] = l;
    }
    bad = cpu_mem_range_many(dev, n, ptr, size, host);
    if (bad >= 0) {
        bool is_in = bad < a->num_inputs;
        return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: %s %d (%llu bytes from 0x%llx) is not inside a "
                       "live allocation of cpu:%d",
                       op, is_in ? "input" : "output",
                       is_in ? bad : bad - a->num_inputs,
                       (unsigned long long)size[bad],
                       (unsigned long long)ptr[bad], (int)a->device);
    }
    for (int i = 0; i < n; i++) {
        void *p = host[i] ? (char *)host[i] - lo[i] : NULL;
        if (i < a->num_inputs)
            in[i] = p;
        else
            out[i - a->num_inputs] = p;
    }
    return KEEL_STATUS_OK;
}

/* A launch whose arguments outlive the call (asynchronous streams). */
struct klaunch {
    kimpl_fn impl;
    keel_kernel_args args;
    struct kcall call;
    /* variable parts follow in one allocation */
};

static void klaunch_run(void *p)
{
    struct klaunch *l = p;

    l->impl(&l->call);
    free(l);
}

/* Deep copy of args and host pointers in one block. */
static struct klaunch *klaunch_new(const keel_kernel_args *a, kimpl_fn impl,
                                   void *const *in, void *const *out)
{
    size_t nd = (size_t)(a->num_inputs + a->num_outputs);
    size_t size = sizeof(struct klaunch) + nd * sizeof(keel_tensor_desc) +
                  nd * sizeof(void *) +
                  (size_t)a->num_attrs * sizeof(keel_attr);
    struct klaunch *l;
    char *p;

    for (int i = 0; i < a->num_attrs; i++) {
        const keel_attr *t = &a->attrs[i];
        size += strlen(t->name) + 1 + 8;
        if (t->type == KEEL_ATTR_STRING)
            size += strlen(t->v.s) + 1 + 8;
        else if (t->type == KEEL_ATTR_INTS)
            size += (size_t)t->v.ints.count * sizeof(int64_t) + 8;
        else if (t->type == KEEL_ATTR_FLOATS)
            size += (size_t)t->v.floats.count * sizeof(double) + 8;
    }
    l = malloc(size);
    if (!l)
        return NULL;
    p = (char *)(l + 1);
    l->impl = impl;
    l->args = *a;
    {
        keel_tensor_desc *d = (keel_tensor_desc *)p;
        memcpy(d, a->inputs, (size_t)a->num_inputs * sizeof(*d));
        memcpy(d + a->num_inputs, a->outputs,
               (size_t)a->num_outputs * sizeof(*d));
        l->args.inputs = d;
        l->args.outputs = d + a->num_inputs;
        p += nd * sizeof(*d);
    }
    {
        void **ptrs = (void **)p;
        for (int i = 0; i < a->num_inputs; i++)
            ptrs[i] = in[i];
        for (int i = 0; i < a->num_outputs; i++)
            ptrs[a->num_inputs + i] = out[i];
        l->call.in = ptrs;
        l->call.out = ptrs + a->num_inputs;
        p += nd * sizeof(void *);
    }
    {
        keel_attr *at = (keel_attr *)p;
        p += (size_t)a->num_attrs * sizeof(keel_attr);
        for (int i = 0; i < a->num_attrs; i++) {
            const keel_attr *t = &a->attrs[i];
            size_t n = strlen(t->name) + 1;
            at[i] = *t;
            memcpy(p, t->name, n);
            at[i].name = p;
            p += (n + 7) & ~(size_t)7;
            if (t->type == KEEL_ATTR_STRING) {
                n = strlen(t->v.s) + 1;
                memcpy(p, t->v.s, n);
                at[i].v.s = p;
                p += (n + 7) & ~(size_t)7;
            } else if (t->type == KEEL_ATTR_INTS && t->v.ints.count > 0) {
                n = (size_t)t->v.ints.count * sizeof(int64_t);
                memcpy(p, t->v.ints.data, n);
                at[i].v.ints.data = (const int64_t *)p;
                p += n;
            } else if (t->type == KEEL_ATTR_FLOATS && t->v.floats.count > 0) {
                n = (size_t)t->v.floats.count * sizeof(double);
                memcpy(p, t->v.floats.data, n);
                at[i].v.floats.data = (const double *)p;
                p += n;
            }
        }
        l->args.attrs = at;
    }
    l->call.a = &l->args;
    return l;
}

keel_status cpu_kernel_launch(const keel_kernel_args *a, const char *op,
                              kimpl_fn impl, kcheck_fn check)
{
    void *in[KMAX_OPERANDS], *out[KMAX_OPERANDS];
    struct cpu_device *dev;
    struct cpu_stream *s;
    struct kcall k;
    keel_status st;

    if (!a || a->struct_size < KEEL_KERNEL_ARGS_MIN_SIZE)
        return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: kernel arguments are missing or too small", op);
    if (a->num_inputs < 0 || a->num_outputs < 0 ||
        a->num_inputs + a->num_outputs > KMAX_OPERANDS ||
        (a->num_inputs && !a->inputs) || (a->num_outputs && !a->outputs) ||
        (a->num_attrs && !a->attrs))
        return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: bad operand lists (%d inputs, %d outputs)", op,
                       (int)a->num_inputs, (int)a->num_outputs);
    st = cpu_dev_get(a->device, op, &dev);
    if (st)
        return st;
    st = cpu_stream_get(dev, a->stream, op, &s);
    if (st)
        return st;
    /* The kit's catalog check (keel/kit.h) first: after it the descriptors
     * and attributes are what the op's shape rule promises. */
    {
        keel_kit_msg m;
        st = keel_kit_check_name(op, a, &m);
        if (st == KEEL_STATUS_NOT_FOUND)
            return cpu_err(KEEL_STATUS_INTERNAL, "%s", m.text);
        if (st)
            return cpu_err(st, "%s", m.text);
    }
    st = map_all(dev, a, op, in, out);
    if (st)
        return st;
    if (check && (st = check(a)))
        return st;
    if (!cpu_g.cfg.async) {
        k.a = a;
        k.in = in;
        k.out = out;
        impl(&k);
        return KEEL_STATUS_OK;
    }
    {
        struct klaunch *l = klaunch_new(a, impl, in, out);
        struct cpu_work w;
        if (!l)
            return cpu_err(KEEL_STATUS_OUT_OF_MEMORY,
                           "%s: no host memory to queue the kernel", op);
        memset(&w, 0, sizeof(w));
        w.kind = CPU_WORK_HOST_FN;
        w.u.host.fn = klaunch_run;
        w.u.host.data = l;
        st = cpu_stream_submit(s, &w, op);
        if (st)
            free(l);
        return st;
    }
}

/* ---- conversions -------------------------------------------------------------------- */

#ifdef KEEL_X86
__attribute__((target("f16c,avx"))) static void f16_to_f32_f16c(
    const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++)
        dst[i] = cpu_f16_to_f32(src[i]);
}

__attribute__((target("f16c,avx"))) static void f32_to_f16_f16c(
    const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m256 f = _mm256_loadu_ps(src + i);
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++)
        dst[i] = cpu_f32_to_f16(src[i]);
}

/* F16C and AVX, with the OS saving the YMM registers, read from CPUID
 * directly: clang (14) has no "f16c" for __builtin_cpu_supports. */
static int detect_f16c(void)
{
    unsigned a, b, c, d, lo, hi;

    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) ||
        !(c & bit_AVX) || !(c & bit_F16C))
        return 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6) == 6; /* XMM and YMM state enabled */
}

#endif

/* ---- instruction sets ---------------------------------------------------- */

static enum cpu_isa isa_detect(void)
{
#ifdef KEEL_X86
    unsigned a, b, c, d, lo, hi;
    enum cpu_isa isa = CPU_ISA_SSE2;

    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) ||
        !(c & bit_AVX) || !(c & bit_F16C) || !(c & bit_FMA))
        return CPU_ISA_SSE2;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 6) != 6) /* XMM and YMM state */
        return CPU_ISA_SSE2;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & bit_AVX2))
        return CPU_ISA_SSE2;
    isa = CPU_ISA_AVX2;
    if ((b & bit_AVX512F) && (b & bit_AVX512CD) && (b & bit_AVX512BW) &&
        (b & bit_AVX512DQ) && (b & bit_AVX512VL) &&
        (lo & 0xe6) == 0xe6) /* + opmask, ZMM_Hi256, Hi16_ZMM state */
        isa = CPU_ISA_AVX512;
    return isa;
#else
    return CPU_ISA_SSE2;
#endif
}

static atomic_int isa_detected = -1;
static atomic_int isa_in_use = -1;
static atomic_int isa_warned;

enum cpu_isa cpu_isa_detected(void)
{
    int v = atomic_load_explicit(&isa_detected, memory_order_relaxed);

    if (v < 0) {
        v = (int)isa_detect();
        atomic_store_explicit(&isa_detected, v, memory_order_relaxed);
    }
    return (enum cpu_isa)v;
}

enum cpu_isa cpu_isa(void)
{
    int v = atomic_load_explicit(&isa_in_use, memory_order_relaxed);

    return v < 0 ? cpu_isa_detected() : (enum cpu_isa)v;
}

const char *cpu_isa_name(enum cpu_isa isa)
{
    switch (isa) {
    case CPU_ISA_AVX512: return "avx512";
    case CPU_ISA_AVX2: return "avx2";
    default: return "sse2";
    }
}

keel_status cpu_isa_configure(char *msg, size_t cap)
{
    static const struct { const char *name; enum cpu_isa isa; } names[] = {
        {"avx512", CPU_ISA_AVX512}, {"avx2", CPU_ISA_AVX2},
        {"sse2", CPU_ISA_SSE2},     {"baseline", CPU_ISA_SSE2},
    };
    const char *e = cpu_getenv("KEEL_CPU_ISA");
    enum cpu_isa have = cpu_isa_detected(), want = have;
    size_t i;

    if (e && *e && strcasecmp(e, "auto")) {
        for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            if (!strcasecmp(e, names[i].name))
                break;
        if (i == sizeof(names) / sizeof(names[0])) {
            snprintf(msg, cap,
                     "KEEL_CPU_ISA='%s' is invalid: expected auto, avx512, "
                     "avx2 or sse2",
                     e);
            return KEEL_STATUS_INVALID_ARGUMENT;
        }
        want = names[i].isa;
        if (want > have && !atomic_exchange(&isa_warned, 1)) {
            cpu_log(KEEL_LOG_WARN,
                    "cpu plugin: KEEL_CPU_ISA=%s: this CPU supports only %s "
                    "(CPUID); using %s",
                    e, cpu_isa_name(have), cpu_isa_name(have));
        }
        if (want > have)
            want = have;
    }
    atomic_store_explicit(&isa_in_use, (int)want, memory_order_relaxed);
    cpu_log(KEEL_LOG_INFO, "cpu plugin: SIMD kernels: %s (CPU: %s)",
            cpu_isa_name(want), cpu_isa_name(have));
    return KEEL_STATUS_OK;
}

#ifdef KEEL_X86
static int have_f16c(void)
{
    static atomic_int cached = -1;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);

    if (v < 0) {
        v = detect_f16c();
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    /* A CPU with AVX2 also has F16C (see isa_detect); KEEL_CPU_ISA=sse2
     * turns the conversions off with the rest. */
    return v && (cpu_isa() >= CPU_ISA_AVX2 ||
                 cpu_isa_detected() == CPU_ISA_SSE2);
}
#endif

void kf16_to_f32(const uint16_t *src, float *dst, int64_t n)
{
#ifdef KEEL_X86
    if (have_f16c()) {
        f16_to_f32_f16c(src, dst, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        dst[i] = cpu_f16_to_f32(src[i]);
}

void kf32_to_f16(const float *src, uint16_t *dst, int64_t n)
{
#ifdef KEEL_X86
    if (have_f16c()) {
        f32_to_f16_f16c(src, dst, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        dst[i] = cpu_f32_to_f16(src[i]);
}

/* The bfloat16 conversions' body is the plugin's SIMD level: the two
 * enums rank the same levels, and each level of cpu_isa() has what that
 * khalf body needs (avx2: AVX2; avx512: F and BW). */
void kbf16_to_f32(const uint16_t *src, float *dst, int64_t n)
{
    khalf_bf16_to_f32(src, dst, n, (enum khalf_isa)cpu_isa());
}

void kf32_to_bf16(const float *src, uint16_t *dst, int64_t n)
{
    khalf_f32_to_bf16(src, dst, n, (enum khalf_isa)cpu_isa());
}

double kload(const void *p, keel_dtype dt)
{
    switch (dt) {
    case KEEL_F32:
        return *(const float *)p;
    case KEEL_F64:
        return *(const double *)p;
    case KEEL_F16:
        return cpu_f16_to_f32(*(const uint16_t *)p);
    case KEEL_BF16:
        return cpu_bf16_to_f32(*(const uint16_t *)p);
    case KEEL_I8:
        return *(const int8_t *)p;
    case KEEL_U8:
        return *(const uint8_t *)p;
    case KEEL_I32:
        return *(const int32_t *)p;
    case KEEL_I64:
        return (double)*(const int64_t *)p;
    case KEEL_BOOL:
        return *(const uint8_t *)p != 0;
    default:
        return 0;
    }
}

/* Float to integer as C casts do, but defined for NaN and out-of-range
 * values (saturating; NaN gives 0). */
static int64_t sat_i64(double v, double lo, double hi)
{
    if (v != v)
        return 0;
    if (v <= lo)
        return (int64_t)lo;
    if (v >= hi)
        return (int64_t)hi;
    return (int64_t)v;
}

void kstore(void *p, keel_dtype dt, double v)
{
    switch (dt) {
    case KEEL_F32:
        *(float *)p = (float)v;
        break;
    case KEEL_F64:
        *(double *)p = v;
        break;
    case KEEL_F16:
        *(uint16_t *)p = cpu_f32_to_f16((float)v);
        break;
    case KEEL_BF16:
        *(uint16_t *)p = cpu_f32_to_bf16((float)v);
        break;
    case KEEL_I8:
        *(int8_t *)p = (int8_t)sat_i64(v, -128, 127);
        break;
    case KEEL_U8:
        *(uint8_t *)p = (uint8_t)sat_i64(v, 0, 255);
        break;
    case KEEL_I32:
        *(int32_t *)p = (int32_t)sat_i64(v, -2147483648.0, 2147483647.0);
        break;
    case KEEL_I64:
        *(int64_t *)p = sat_i64(v, -9223372036854775808.0,
                                9223372036854774784.0);
        break;
    case KEEL_BOOL:
        *(uint8_t *)p = v != 0;
        break;
    default:
        break;
    }
}

int64_t kload_i(const void *p, keel_dtype dt)
{
    switch (dt) {
    case KEEL_I8:
        return *(const int8_t *)p;
    case KEEL_U8:
    case KEEL_BOOL:
        return *(const uint8_t *)p;
    case KEEL_I32:
        return *(const int32_t *)p;
    case KEEL_I64:
        return *(const int64_t *)p;
    default:
        return sat_i64(kload(p, dt), -9223372036854775808.0,
                       9223372036854774784.0);
    }
}

void kstore_i(void *p, keel_dtype dt, int64_t v)
{
    switch (dt) {
    case KEEL_I8:
        *(int8_t *)p = (int8_t)v;
        break;
    case KEEL_U8:
        *(uint8_t *)p = (uint8_t)v;
        break;
    case KEEL_BOOL:
        *(uint8_t *)p = v != 0;
        break;
    case KEEL_I32:
        *(int32_t *)p = (int32_t)v;
        break;
    case KEEL_I64:
        *(int64_t *)p = v;
        break;
    default:
        kstore(p, dt, (double)v);
        break;
    }
}

/* ---- iteration ------------------------------------------------------------------------- */

struct kiter_state {
    int nops, ndim; /* ndim after merging; the last dim is the row */
    char *base[KMAX_OPERANDS];
    int64_t shape[KEEL_MAX_DIMS];
    int64_t bstride[KMAX_OPERANDS][KEEL_MAX_DIMS]; /* bytes */
    krow_fn row;
    void *ctx;
};

static void kiter_rows(void *p, int64_t begin, int64_t end)
{
    struct kiter_state *s = p;
    char *ptr[KMAX_OPERANDS];
    int64_t inner[KMAX_OPERANDS];
    int last = s->ndim - 1;

    for (int o = 0; o < s->nops; o++)
        inner[o] = s->bstride[o][last];
    for (int64_t r = begin; r < end; r++) {
        int64_t rem = r;
        for (int o = 0; o < s->nops; o++)
            ptr[o] = s->base[o];
        for (int d = last - 1; d >= 0; d--) {
            int64_t idx = rem % s->shape[d];
            rem /= s->shape[d];
            for (int o = 0; o < s->nops; o++)
                ptr[o] += idx * s->bstride[o][d];
        }
        s->row(s->ctx, ptr, inner, s->shape[last]);
    }
}

static void kiter_slices(void *p, int64_t begin, int64_t end)
{
    struct kiter_state *s = p;
    char *ptr[KMAX_OPERANDS];
    int64_t inner[KMAX_OPERANDS];

    for (int o = 0; o < s->nops; o++) {
        inner[o] = s->bstride[o][0];
        ptr[o] = s->base[o] + begin * inner[o];
    }
    s->row(s->ctx, ptr, inner, end - begin);
}

void kiter(int nops, void *const *base,
           const int64_t (*strides)[KEEL_MAX_DIMS], const uint32_t *esize,
           int ndim, const int64_t *shape, krow_fn row, void *ctx)
{
    struct kiter_state s;
    int64_t rows, total = 1;

    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 0)
            return;
        total *= shape[d];
    }
    s.nops = nops;
    s.row = row;
    s.ctx = ctx;
    for (int o = 0; o < nops; o++)
        s.base[o] = base[o];
    /* Drop size-1 dims, merge dims contiguous for every operand. */
    s.ndim = 0;
    for (int d = 0; d < ndim; d++) {
        bool merge;
        if (shape[d] == 1)
            continue;
        merge = s.ndim > 0;
        for (int o = 0; merge && o < nops; o++)
            if (s.bstride[o][s.ndim - 1] !=
                strides[o][d] * (int64_t)esize[o] * shape[d])
                merge = false;
        if (merge) {
            s.shape[s.ndim - 1] *= shape[d];
            for (int o = 0; o < nops; o++)
                s.bstride[o][s.ndim - 1] = strides[o][d] * (int64_t)esize[o];
            continue;
        }
        s.shape[s.ndim] = shape[d];
        for (int o = 0; o < nops; o++)
            s.bstride[o][s.ndim] = strides[o][d] * (int64_t)esize[o];
        s.ndim++;
    }
    if (s.ndim == 0) {
        s.ndim = 1;
        s.shape[0] = 1;
        for (int o = 0; o < nops; o++)
            s.bstride[o][0] = (int64_t)esize[o];
    }
    rows = total / s.shape[s.ndim - 1];
    if (total < 2 * KGRAIN) {
        kiter_rows(&s, 0, rows);
    } else if (rows > 1) {
        int64_t grain = KGRAIN / s.shape[s.ndim - 1];
        cpu_parallel_for(rows, grain > 0 ? grain : 1, kiter_rows, &s);
    } else {
        /* One long row: share slices of it. */
        cpu_parallel_for(s.shape[0], KGRAIN, kiter_slices, &s);
    }
}

void kiter_call(const struct kcall *k, krow_fn row, void *ctx)
{
    const keel_kernel_args *a = k->a;
    int64_t strides[KMAX_OPERANDS][KEEL_MAX_DIMS];
    void *base[KMAX_OPERANDS];
    uint32_t esize[KMAX_OPERANDS];
    const keel_tensor_desc *shape_of = a->num_outputs ? &a->outputs[0]
                                                      : &a->inputs[0];
    int n = 0;

    for (int i = 0; i < a->num_outputs; i++, n++) {
        base[n] = k->out[i];
        esize[n] = keel_dtype_size(a->outputs[i].dtype);
        memcpy(strides[n], a->outputs[i].strides, sizeof(strides[n]));
    }
    for (int i = 0; i < a->num_inputs; i++, n++) {
        base[n] = k->in[i];
        esize[n] = keel_dtype_size(a->inputs[i].dtype);
        memcpy(strides[n], a->inputs[i].strides, sizeof(strides[n]));
    }
    kiter(n, base, (const int64_t(*)[KEEL_MAX_DIMS])strides, esize,
          shape_of->ndim, shape_of->shape, row, ctx);
}
