/*
 * The CPU plugin's kernel group: lookup over the category tables, and the
 * core kernels every tensor needs (copy, full, cast).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kblas.h"
#include "kern.h"
#include "kvmath.h"

static const struct cpu_kernel_entry *const tables[] = {
    cpu_kernels_core,   cpu_kernels_elementwise, cpu_kernels_reduce,
    cpu_kernels_linalg, cpu_kernels_conv,        cpu_kernels_nn,
    cpu_kernels_manip,
};

static keel_status cpu_kernel_lookup(int32_t device, const char *op_name,
                                     keel_dtype dtype, keel_kernel *kernel)
{
    struct cpu_device *dev;
    keel_status st;

    if (!op_name || !kernel)
        return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
                       "kernel.lookup: %s is NULL",
                       op_name ? "kernel" : "op_name");
    st = cpu_dev_get(device, "kernel.lookup", &dev);
    if (st)
        return st;
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
        for (const struct cpu_kernel_entry *e = tables[t]; e->op; e++)
            if (!strcmp(e->op, op_name) &&
                (e->dtypes & KEEL_DTYPE_BIT(dtype))) {
                kernel->fn = e->fn;
                kernel->kernel_data = NULL;
                return KEEL_STATUS_OK;
            }
    return cpu_err(KEEL_STATUS_NOT_FOUND,
                   "kernel.lookup: no CPU kernel for %s (%s)", op_name,
                   cpu_dtype_name(dtype));
}

const keel_kernel_ops cpu_kernel_ops = {
    .header = KEEL_TABLE_HEADER(keel_kernel_ops),
    .lookup = cpu_kernel_lookup,
};

/* ---- copy: strided input to contiguous output, same dtype ------------------ */

static void copy_row(void *ctx, char *const *p, const int64_t *st, int64_t n)
{
    int64_t es = *(const int64_t *)ctx;
    char *d = p[0];
    const char *s = p[1];

    if (st[0] == es && st[1] == es) {
        memcpy(d, s, (size_t)(n * es));
        return;
    }
    switch (es) {
    case 1:
        for (int64_t i = 0; i < n; i++)
            d[i * st[0]] = s[i * st[1]];
        break;
    case 2:
        for (int64_t i = 0; i < n; i++)
            memcpy(d + i * st[0], s + i * st[1], 2);
        break;
    case 4:
        for (int64_t i = 0; i < n; i++)
            memcpy(d + i * st[0], s + i * st[1], 4);
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            memcpy(d + i * st[0], s + i * st[1], 8);
        break;
    }
}

static void copy_impl(const struct kcall *k)
{
    int64_t es = keel_dtype_size(k->a->inputs[0].dtype);
    kiter_call(k, copy_row, &es);
}

/* The kit's checks are all the creation, copy and cast kernels need. */
KERNEL(k_copy, "copy", copy_impl, NULL)

/* ---- full ---------------------------------------------------------------------- */

struct fill {
    unsigned char pattern[8];
    int64_t es;
};

/* Typed stores of the pattern (a memcpy of a run-time size per element
 * was a library call per element: zeroing a gradient took microseconds). */
#define FILL_LOOP(T)                                                           \
    static void fill_##T(char *o, int64_t st, int64_t n, const void *pat)      \
    {                                                                          \
        T v;                                                                   \
        memcpy(&v, pat, sizeof(T));                                            \
        if (st == (int64_t)sizeof(T)) {                                        \
            T *restrict d = (T *)(void *)o;                                    \
            for (int64_t i = 0; i < n; i++)                                    \
                d[i] = v;                                                      \
            return;                                                            \
        }                                                                      \
        for (int64_t i = 0; i < n; i++)                                        \
            memcpy(o + i * st, &v, sizeof(T));                                 \
    }
FILL_LOOP(uint16_t)
FILL_LOOP(uint32_t)
FILL_LOOP(uint64_t)

static void fill_row(void *ctx, char *const *p, const int64_t *st, int64_t n)
{
    const struct fill *f = ctx;
    static const unsigned char zero[8];

    if (st[0] == f->es && !memcmp(f->pattern, zero, (size_t)f->es)) {
        memset(p[0], 0, (size_t)(n * f->es));
        return;
    }
    switch (f->es) {
    case 1:
        if (st[0] == 1)
            memset(p[0], f->pattern[0], (size_t)n);
        else
            for (int64_t i = 0; i < n; i++)
                p[0][i * st[0]] = (char)f->pattern[0];
        return;
    case 2:
        fill_uint16_t(p[0], st[0], n, f->pattern);
        return;
    case 4:
        fill_uint32_t(p[0], st[0], n, f->pattern);
        return;
    default:
        fill_uint64_t(p[0], st[0], n, f->pattern);
        return;
    }
}

static void full_impl(const struct kcall *k)
{
    const keel_tensor_desc *o = &k->a->outputs[0];
    struct fill f;

    f.es = keel_dtype_size(o->dtype);
    kstore(f.pattern, o->dtype, kattr_f(k->a, "value", 0.0));
    kiter_call(k, fill_row, &f);
}

KERNEL(k_full, "full", full_impl, NULL)

/* ---- cast ------------------------------------------------------------------------ */

struct cast_ctx {
    keel_dtype from, to;
};

static void cast_row(void *ctx, char *const *p, const int64_t *st, int64_t n)
{
    const struct cast_ctx *c = ctx;
    char *d = p[0];
    const char *s = p[1];
    bool contig = st[0] == keel_dtype_size(c->to) &&
                  st[1] == keel_dtype_size(c->from);

    if (contig) {
        if (c->from == KEEL_F16 && c->to == KEEL_F32) {
            kf16_to_f32((const uint16_t *)s, (float *)d, n);
            return;
        }
        if (c->from == KEEL_F32 && c->to == KEEL_F16) {
            kf32_to_f16((const float *)s, (uint16_t *)d, n);
            return;
        }
        if (c->from == KEEL_BF16 && c->to == KEEL_F32) {
            kbf16_to_f32((const uint16_t *)s, (float *)d, n);
            return;
        }
        if (c->from == KEEL_F32 && c->to == KEEL_BF16) {
            kf32_to_bf16((const float *)s, (uint16_t *)d, n);
            return;
        }
        /* Masks and labels to float32 (autograd's ReLU and comparison
         * rules cast a bool mask on every backward pass). The value is
         * built from the bits of 1.0f: the plain `s[i] != 0` compiles
         * to a branch per element, mispredicted on a random mask. */
        if (c->to == KEEL_F32 && c->from == KEEL_BOOL) {
            const uint8_t *restrict sb = (const uint8_t *)s;
            char *restrict db = d;
            for (int64_t i = 0; i < n; i++) {
                uint32_t one = (0u - (uint32_t)(sb[i] != 0)) & 0x3f800000u;
                memcpy(db + i * (int64_t)sizeof(float), &one, sizeof(one));
            }
            return;
        }
        if (c->to == KEEL_F32 && c->from == KEEL_U8) {
            for (int64_t i = 0; i < n; i++)
                ((float *)d)[i] = (float)((const uint8_t *)s)[i];
            return;
        }
        if (c->to == KEEL_F32 && c->from == KEEL_I32) {
            for (int64_t i = 0; i < n; i++)
                ((float *)d)[i] = (float)((const int32_t *)s)[i];
            return;
        }
        if (c->to == KEEL_F32 && c->from == KEEL_I64) {
            for (int64_t i = 0; i < n; i++)
                ((float *)d)[i] = (float)(double)((const int64_t *)s)[i];
            return;
        }
        if (c->from == KEEL_F32 && c->to == KEEL_F64) {
            for (int64_t i = 0; i < n; i++)
                ((double *)d)[i] = ((const float *)s)[i];
            return;
        }
        if (c->from == KEEL_F64 && c->to == KEEL_F32) {
            for (int64_t i = 0; i < n; i++)
                ((float *)d)[i] = (float)((const double *)s)[i];
            return;
        }
    }
    /* Integer to integer keeps exact values (wrapping like C); anything
     * through floating point saturates. */
    if (c->from != KEEL_F32 && c->from != KEEL_F64 && c->from != KEEL_F16 &&
        c->from != KEEL_BF16 && c->to != KEEL_F32 && c->to != KEEL_F64 &&
        c->to != KEEL_F16 && c->to != KEEL_BF16) {
        for (int64_t i = 0; i < n; i++)
            kstore_i(d + i * st[0], c->to, kload_i(s + i * st[1], c->from));
        return;
    }
    for (int64_t i = 0; i < n; i++)
        kstore(d + i * st[0], c->to, kload(s + i * st[1], c->from));
}

static void cast_impl(const struct kcall *k)
{
    struct cast_ctx c = {k->a->inputs[0].dtype, k->a->outputs[0].dtype};
    kiter_call(k, cast_row, &c);
}

KERNEL(k_cast, "cast", cast_impl, NULL)

/* ---- arange, linspace, eye (contiguous outputs) ---------------------------------- */

struct seq {
    double start, step;
    keel_dtype dt;
    char *out;
};

static void seq_part(void *ctx, int64_t b, int64_t e)
{
    const struct seq *q = ctx;
    int64_t es = keel_dtype_size(q->dt);

    if (q->dt == KEEL_F32) {
        for (int64_t i = b; i < e; i++)
            ((float *)q->out)[i] = (float)(q->start + (double)i * q->step);
        return;
    }
    for (int64_t i = b; i < e; i++)
        kstore(q->out + i * es, q->dt, q->start + (double)i * q->step);
}

static void arange_impl(const struct kcall *k)
{
    struct seq q = {kattr_f(k->a, "start", 0), kattr_f(k->a, "step", 1),
                    k->a->outputs[0].dtype, k->out[0]};
    cpu_parallel_for(knumel(&k->a->outputs[0]), KGRAIN, seq_part, &q);
}

static void linspace_impl(const struct kcall *k)
{
    int64_t n = knumel(&k->a->outputs[0]);
    double start = kattr_f(k->a, "start", 0), stop = kattr_f(k->a, "stop", 0);
    struct seq q = {start, n > 1 ? (stop - start) / (double)(n - 1) : 0,
                    k->a->outputs[0].dtype, k->out[0]};
    cpu_parallel_for(n, KGRAIN, seq_part, &q);
    /* The last point is exactly `stop`. */
    if (n > 1)
        kstore((char *)k->out[0] +
                   (n - 1) * keel_dtype_size(k->a->outputs[0].dtype),
               k->a->outputs[0].dtype, stop);
}

static void eye_impl(const struct kcall *k)
{
    const keel_tensor_desc *o = &k->a->outputs[0];
    int64_t es = keel_dtype_size(o->dtype), n = o->shape[0], m = o->shape[1];
    char *p = k->out[0];

    memset(p, 0, (size_t)(n * m * es));
    for (int64_t i = 0; i < n && i < m; i++)
        kstore(p + (i * m + i) * es, o->dtype, 1.0);
}

KERNEL(k_arange, "arange", arange_impl, NULL)
KERNEL(k_linspace, "linspace", linspace_impl, NULL)
KERNEL(k_eye, "eye", eye_impl, NULL)

/* ---- random: Philox counters, see keel/philox.h ---------------------------------- */

struct rnd {
    uint64_t seed, offset;
    double a, b; /* low/high, mean/std */
    keel_dtype dt;
    char *out;
    const char *p; /* bernoulli probabilities (contiguous) */
    keel_dtype pdt;
};

static void uniform_part(void *ctx, int64_t b, int64_t e)
{
    const struct rnd *r = ctx;
    int64_t es = keel_dtype_size(r->dt);

    for (int64_t i = b; i < e; i++) {
        double u = keel_philox_uniform(r->seed, r->offset + (uint64_t)i);
        double v = r->a + (r->b - r->a) * u;
        if (r->dt == KEEL_F32)
            ((float *)r->out)[i] = (float)v;
        else
            kstore(r->out + i * es, r->dt, v);
    }
}

static void normal_part(void *ctx, int64_t b, int64_t e)
{
    const struct rnd *r = ctx;
    int64_t es = keel_dtype_size(r->dt);

    for (int64_t i = b; i < e; i++) {
        uint64_t c = r->offset + 2 * (uint64_t)i;
        double u1 = keel_philox_uniform(r->seed, c);
        double u2 = keel_philox_uniform(r->seed, c + 1);
        double z = sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
        kstore(r->out + i * es, r->dt, r->a + r->b * z);
    }
}

static void randint_part(void *ctx, int64_t b, int64_t e)
{
    const struct rnd *r = ctx;
    int64_t es = keel_dtype_size(r->dt);
    int64_t low = (int64_t)r->a, span = (int64_t)r->b - low;

    for (int64_t i = b; i < e; i++) {
        double u = keel_philox_uniform(r->seed, r->offset + (uint64_t)i);
        int64_t v = low + (int64_t)floor(u * (double)span);
        if (v >= low + span)
            v = low + span - 1;
        kstore_i(r->out + i * es, r->dt, v);
    }
}

static void bernoulli_part(void *ctx, int64_t b, int64_t e)
{
    const struct rnd *r = ctx;
    int64_t es = keel_dtype_size(r->dt), pes = keel_dtype_size(r->pdt);

    for (int64_t i = b; i < e; i++) {
        double u = keel_philox_uniform(r->seed, r->offset + (uint64_t)i);
        kstore(r->out + i * es, r->dt,
               u < kload(r->p + i * pes, r->pdt) ? 1.0 : 0.0);
    }
}

static struct rnd rnd_from(const struct kcall *k, const char *a, const char *b,
                           double da, double db)
{
    struct rnd r;

    r.seed = (uint64_t)kattr_i(k->a, "seed", 0);
    r.offset = (uint64_t)kattr_i(k->a, "offset", 0);
    r.a = kattr_f(k->a, a, da);
    r.b = kattr_f(k->a, b, db);
    r.dt = k->a->outputs[0].dtype;
    r.out = k->out[0];
    r.p = NULL;
    r.pdt = r.dt;
    return r;
}

static void uniform_impl(const struct kcall *k)
{
    struct rnd r = rnd_from(k, "low", "high", 0, 1);
    cpu_parallel_for(knumel(&k->a->outputs[0]), 8192, uniform_part, &r);
}

static void normal_impl(const struct kcall *k)
{
    struct rnd r = rnd_from(k, "mean", "std", 0, 1);
    cpu_parallel_for(knumel(&k->a->outputs[0]), 8192, normal_part, &r);
}

static void randint_impl(const struct kcall *k)
{
    struct rnd r = rnd_from(k, "low", "high", 0, 1);
    cpu_parallel_for(knumel(&k->a->outputs[0]), 8192, randint_part, &r);
}

static void bernoulli_impl(const struct kcall *k)
{
    struct rnd r = rnd_from(k, "low", "high", 0, 1);
    r.p = k->in[0];
    r.pdt = k->a->inputs[0].dtype;
    cpu_parallel_for(knumel(&k->a->outputs[0]), 8192, bernoulli_part, &r);
}

static keel_status bernoulli_check(const keel_kernel_args *a)
{
    if (!kcontig(&a->inputs[0]))
        return cpu_err(KEEL_STATUS_NOT_SUPPORTED,
                       "bernoulli: the CPU kernel needs a contiguous p");
    return KEEL_STATUS_OK;
}

KERNEL(k_uniform, "uniform", uniform_impl, NULL)
KERNEL(k_normal, "normal", normal_impl, NULL)
KERNEL(k_randint, "randint", randint_impl, NULL)
KERNEL(k_bernoulli, "bernoulli", bernoulli_impl, bernoulli_check)

const struct cpu_kernel_entry cpu_kernels_core[] = {
    {"copy", KEEL_DT_ALL, k_copy},
    {"full", KEEL_DT_ALL, k_full},
    {"cast", KEEL_DT_ALL, k_cast},
    {"arange", KEEL_DT_NUMERIC, k_arange},
    {"linspace", KEEL_DT_FLOAT, k_linspace},
    {"eye", KEEL_DT_ALL, k_eye},
    {"uniform", KEEL_DT_FLOAT, k_uniform},
    {"normal", KEEL_DT_FLOAT, k_normal},
    {"randint", KEEL_DT_INT, k_randint},
    {"bernoulli", KEEL_DT_FLOAT, k_bernoulli},
    {NULL, 0, NULL},
};

/* ---- the description --------------------------------------------------- */

void cpu_kernels_describe(char *buf, size_t cap)
{
    enum cpu_isa isa = cpu_isa(), cpu = cpu_isa_detected();
    char forced[64] = "";

    if (!cap)
        return;
    if (isa != cpu)
        snprintf(forced, sizeof(forced), " (KEEL_CPU_ISA; the CPU has %s)",
                 cpu_isa_name(cpu));
    snprintf(buf, cap,
             "; simd: %s%s; gemm: %s; math: %s; conv2d: %s",
             cpu_isa_name(isa), forced, cpu_blas_summary(), kvm_summary(),
             isa >= CPU_ISA_AVX2
                 ? (isa == CPU_ISA_AVX512
                        ? "direct avx512 kernels for small stride-1 layers, "
                          "else im2col + gemm"
                        : "direct avx2 kernels for small stride-1 layers, "
                          "else im2col + gemm")
                 : "im2col + gemm (direct kernels need avx2)");
}
