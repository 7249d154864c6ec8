/*
 * The kit's generic part: the catalog table, the checks every op shares
 * (arity, descriptors, attribute types, required attributes), the
 * attribute and descriptor helpers, iteration plans, and float16/bfloat16
 * conversion (checked against an independent reference computed in
 * double, over every half and a sweep of floats).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kit_testlib.h"

static void t_catalog(void)
{
    CU_ASSERT_EQUAL(keel_kit_op_id("add"), KEEL_OP_ADD);
    CU_ASSERT_EQUAL(keel_kit_op_id("adamw_update"), KEEL_OP_ADAMW_UPDATE);
    CU_ASSERT_EQUAL(keel_kit_op_id("no_such_op"), -1);
    CU_ASSERT_EQUAL(keel_kit_op_id(NULL), -1);
    CU_ASSERT_PTR_NULL(keel_kit_op_info(-1));
    CU_ASSERT_PTR_NULL(keel_kit_op_info(KEEL_OP_COUNT));
    for (int i = 0; i < KEEL_OP_COUNT; i++)
        CU_ASSERT_EQUAL(keel_kit_op_id(keel_kit_op_info(i)->name), i);
}

static void t_generic(void)
{
    struct kt k;
    keel_kit_msg m;
    keel_kernel_args a;
    int64_t s4[1] = {4};

    /* NULL args, short struct, unknown op, unknown name. */
    CU_ASSERT_EQUAL(keel_kit_check(KEEL_OP_ADD, NULL, &m),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(m.text, "add"));
    CU_ASSERT_EQUAL(keel_kit_check(-3, NULL, NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(keel_kit_check_name("nope", NULL, &m),
                    KEEL_STATUS_NOT_FOUND);
    CU_ASSERT_PTR_NOT_NULL(strstr(m.text, "nope"));
    memset(&a, 0, sizeof(a));
    a.struct_size = 8;
    CU_ASSERT_EQUAL(keel_kit_check(KEEL_OP_ADD, &a, &m),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(m.text, "struct_size"));
    /* NULL arrays with counts, negative counts. */
    a.struct_size = sizeof(a);
    a.num_inputs = 2;
    CU_ASSERT_EQUAL(keel_kit_check(KEEL_OP_ADD, &a, &m),
                    KEEL_STATUS_INVALID_ARGUMENT);
    a.num_inputs = -1;
    CU_ASSERT_EQUAL(keel_kit_check(KEEL_OP_ADD, &a, &m),
                    KEEL_STATUS_INVALID_ARGUMENT);

    /* Too many inputs or outputs for the catalog. */
    kt_init(&k, KEEL_OP_RELU);
    kt_in(&k, KEEL_F32, 1, s4);
    kt_in(&k, KEEL_F32, 1, s4);
    kt_out(&k, KEEL_F32, 1, s4);
    KT_BAD(&k, "at most 1 input");
    kt_init(&k, KEEL_OP_RELU);
    kt_in(&k, KEEL_F32, 1, s4);
    kt_out(&k, KEEL_F32, 1, s4);
    kt_out(&k, KEEL_F32, 1, s4);
    KT_BAD(&k, "at most 1 output");

    /* Bad descriptors: dtype, ndim, negative dim, overflowing count and
     * byte span. */
    {
        static const struct {
            int what;
            const char *name;
        } cases[] = {{0, "dtype 99"}, {1, "ndim 9"}, {2, "negative dim"},
                     {3, "count overflow"}, {4, "span overflow"},
                     {5, "ndim -1"}};
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            keel_tensor_desc *d;
            kt_init(&k, KEEL_OP_RELU);
            d = kt_in(&k, KEEL_F32, 1, s4);
            kt_out(&k, KEEL_F32, 1, s4);
            switch (cases[i].what) {
            case 0: d->dtype = (keel_dtype)99; break;
            case 1: d->ndim = 9; break;
            case 2: d->shape[0] = -4; break;
            case 3:
                d->ndim = 3;
                d->shape[0] = d->shape[1] = d->shape[2] = (int64_t)1 << 30;
                break;
            case 4: d->strides[0] = INT64_MAX / 2; break;
            case 5: d->ndim = -1; break;
            }
            if (kt_run(&k) != KEEL_STATUS_INVALID_ARGUMENT ||
                !strstr(k.msg.text, "bad descriptor"))
                fprintf(stderr, "case %s: %s\n", cases[i].name, k.msg.text);
            KT_BAD(&k, "bad descriptor");
        }
    }
    /* An empty tensor's strides are not checked for span. */
    {
        keel_tensor_desc *d;
        kt_init(&k, KEEL_OP_COPY);
        d = kt_in(&k, KEEL_F32, 2, (int64_t[]){0, 4});
        d->strides[1] = INT64_MAX;
        kt_out(&k, KEEL_F32, 2, (int64_t[]){0, 4});
        KT_OK(&k);
    }

    /* Attribute types against the catalog spec. */
    kt_init(&k, KEEL_OP_LEAKY_RELU);
    kt_in(&k, KEEL_F32, 1, s4);
    kt_out(&k, KEEL_F32, 1, s4);
    KT_OK(&k);                         /* default used */
    kt_attr_f(&k, "negative_slope", 0.2);
    KT_OK(&k);
    kt_attr_i(&k, "negative_slope", 1); /* an int for a float: converted */
    KT_OK(&k);
    kt_attr_s(&k, "negative_slope", "0.2");
    KT_BAD(&k, "negative_slope");
    kt_attr_s(&k, "negative_slope", NULL);
    KT_BAD(&k, "negative_slope");
    /* A bool attribute takes 0 or 1 only. */
    kt_init(&k, KEEL_OP_GELU);
    kt_in(&k, KEEL_F32, 1, s4);
    kt_out(&k, KEEL_F32, 1, s4);
    kt_attr_b(&k, "approximate", 1);
    KT_OK(&k);
    kt_attr_i(&k, "approximate", 2);
    KT_BAD(&k, "approximate");
    /* Attributes the op does not know are ignored. */
    kt_attr_b(&k, "approximate", 0);
    kt_attr_s(&k, "vendor_hint", "fast");
    KT_OK(&k);
    /* An attribute with no name. */
    k.attr[k.nattr - 1].name = NULL;
    KT_BAD(&k, "no name");
}

static void t_required_attrs(void)
{
    /* Every op whose spec has an attribute without a default refuses a
     * launch that leaves it out, whatever else is wrong or right. */
    int checked = 0;

    for (int op = 0; op < KEEL_OP_COUNT; op++) {
        const char *spec = keel_kit_op_info(op)->attrs, *p = spec;
        while (p && *p) {
            const char *end = strchr(p, ';');
            size_t seg = end ? (size_t)(end - p) : strlen(p);
            if (!memchr(p, '=', seg)) {
                struct kt k;
                kt_init(&k, op);
                kt_run(&k);
                if (!strstr(k.msg.text, "required"))
                    fprintf(stderr, "%s: %s\n", keel_kit_op_info(op)->name,
                            k.msg.text);
                KT_BAD(&k, "is required");
                checked++;
                break;
            }
            p = end ? end + 1 : NULL;
        }
    }
    CU_ASSERT(checked > 5);
}

static void t_helpers(void)
{
    keel_tensor_desc d;
    keel_attr at[3];
    int64_t iv[2] = {3, 4};
    double fv[1] = {0.5};
    keel_kernel_args a;
    int64_t n;

    memset(&d, 0, sizeof(d));
    d.dtype = KEEL_F32;
    d.ndim = 3;
    d.shape[0] = 2, d.shape[1] = 1, d.shape[2] = 3;
    d.strides[0] = 3, d.strides[1] = 99, d.strides[2] = 1;
    CU_ASSERT_EQUAL(keel_kit_numel(&d), 6);
    CU_ASSERT(keel_kit_contiguous(&d)); /* size-1 stride ignored */
    d.strides[0] = 4;
    CU_ASSERT(!keel_kit_contiguous(&d));
    CU_ASSERT_EQUAL(keel_kit_axis(-1, 3), 2);
    CU_ASSERT_EQUAL(keel_kit_axis(3, 3), -1);
    CU_ASSERT_EQUAL(keel_kit_axis(-4, 3), -1);
    CU_ASSERT_EQUAL(keel_kit_axis(INT64_MIN, 3), -1);
    CU_ASSERT_STRING_EQUAL(keel_kit_dtype_name(KEEL_BF16), "bfloat16");
    CU_ASSERT_STRING_EQUAL(keel_kit_dtype_name((keel_dtype)77),
                           "unknown dtype");

    memset(at, 0, sizeof(at));
    at[0].name = "k";
    at[0].type = KEEL_ATTR_INTS;
    at[0].v.ints.data = iv;
    at[0].v.ints.count = 2;
    at[1].name = "f";
    at[1].type = KEEL_ATTR_FLOATS;
    at[1].v.floats.data = fv;
    at[1].v.floats.count = 1;
    at[2].name = "x";
    at[2].type = KEEL_ATTR_FLOAT;
    at[2].v.f = 2.75;
    memset(&a, 0, sizeof(a));
    a.attrs = at;
    a.num_attrs = 3;
    CU_ASSERT_EQUAL(keel_kit_attr_ints(&a, "k", &n)[1], 4);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_PTR_NULL(keel_kit_attr_ints(&a, "f", &n));
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(keel_kit_attr_floats(&a, "f", &n)[0], 0.5);
    CU_ASSERT_EQUAL(keel_kit_attr_i(&a, "x", 7), 2);
    CU_ASSERT_EQUAL(keel_kit_attr_f(&a, "x", 7), 2.75);
    CU_ASSERT_EQUAL(keel_kit_attr_i(&a, "missing", 7), 7);
    CU_ASSERT_STRING_EQUAL(keel_kit_attr_s(&a, "x", "dflt"), "dflt");
}

/* The plan must visit the same offsets as a naive row-major walk. */
static void t_plans(void)
{
    static const struct {
        int ndim;
        int64_t shape[4];
        int64_t st[2][4];
        int want_ndim;
        bool dense;
    } cases[] = {
        {3, {2, 3, 4}, {{12, 4, 1}, {12, 4, 1}}, 1, true},
        {3, {2, 3, 4}, {{12, 4, 1}, {0, 1, 0}}, 3, false},    /* broadcast */
        {3, {2, 1, 4}, {{4, 77, 1}, {4, 5, 1}}, 1, true},     /* size-1 dim */
        {2, {3, 4}, {{1, 3}, {4, 1}}, 2, false},              /* transpose */
        {3, {2, 3, 4}, {{-12, 4, 1}, {12, 4, 1}}, 2, false},  /* reversed */
        {0, {0}, {{0}, {0}}, 0, true},                        /* scalar */
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        int64_t st[2][KEEL_MAX_DIMS] = {{0}};
        keel_kit_plan p;
        int64_t total = 1;

        for (int k = 0; k < 2; k++)
            memcpy(st[k], cases[c].st[k], sizeof(cases[c].st[k]));
        CU_ASSERT_EQUAL_FATAL(
            keel_kit_plan_make(&p, 2, cases[c].ndim, cases[c].shape,
                               (const int64_t(*)[KEEL_MAX_DIMS])st),
            KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(p.ndim, cases[c].want_ndim);
        CU_ASSERT_EQUAL(p.dense, cases[c].dense);
        for (int d = 0; d < cases[c].ndim; d++)
            total *= cases[c].shape[d];
        CU_ASSERT_EQUAL(p.numel, total);
        for (int64_t i = 0; i < total; i++) {
            for (int k = 0; k < 2; k++) {
                int64_t rem = i, off = 0;
                for (int d = cases[c].ndim - 1; d >= 0; d--) {
                    off += (rem % cases[c].shape[d]) * cases[c].st[k][d];
                    rem /= cases[c].shape[d];
                }
                CU_ASSERT_EQUAL(keel_kit_plan_offset(&p, k, i), off);
            }
        }
    }
    {
        keel_kit_plan p;
        int64_t shape[2] = {3, 0}, st[1][KEEL_MAX_DIMS] = {{0, 1}};
        CU_ASSERT_EQUAL(keel_kit_plan_make(&p, 1, 2, shape,
                                           (const int64_t(*)[KEEL_MAX_DIMS])st),
                        KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(p.numel, 0);
        CU_ASSERT_EQUAL(keel_kit_plan_make(&p, 0, 2, shape,
                                           (const int64_t(*)[KEEL_MAX_DIMS])st),
                        KEEL_STATUS_INVALID_ARGUMENT);
        CU_ASSERT_EQUAL(keel_kit_plan_make(&p, KEEL_KIT_PLAN_MAX + 1, 2, shape,
                                           (const int64_t(*)[KEEL_MAX_DIMS])st),
                        KEEL_STATUS_INVALID_ARGUMENT);
    }
}

/* Reference: the nearest half (ties to even) of x, computed in double by
 * scanning the two neighbours; independent of the kit's bit tricks. */
static double half_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;

    if (e == 0x1f)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(m, -24);
    else
        v = ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static void t_half(void)
{
    int bad = 0;

    /* Every half converts exactly and back. */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = keel_kit_f16_to_f32((uint16_t)h);
        double want = half_value((uint16_t)h);
        if (isnan(want)) {
            if (!isnan(f) || !isnan(keel_kit_f16_to_f32(
                                 keel_kit_f32_to_f16(f))))
                bad++;
            continue;
        }
        if ((double)f != want || keel_kit_f32_to_f16(f) != h)
            bad++;
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* Floats between halves round to nearest, ties to even: compare with
     * the reference's choice between the two neighbours. */
    bad = 0;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        double lo = half_value((uint16_t)h), hi = half_value((uint16_t)(h + 1));
        double probes[3] = {lo + (hi - lo) * 0.25, (lo + hi) / 2,
                            lo + (hi - lo) * 0.75};
        for (int q = 0; q < 3; q++) {
            float f = (float)probes[q];
            uint16_t want = q == 0 ? (uint16_t)h
                            : q == 2 ? (uint16_t)(h + 1)
                                     : (uint16_t)((h & 1) ? h + 1 : h);
            if ((double)f != probes[q])
                continue; /* not representable as a float: skip */
            if (keel_kit_f32_to_f16(f) != want ||
                keel_kit_f32_to_f16(-f) != (want | 0x8000))
                bad++;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(keel_kit_f32_to_f16(65520.0f), 0x7c00); /* rounds to inf */
    CU_ASSERT_EQUAL(keel_kit_f32_to_f16(65519.0f), 0x7bff);
    CU_ASSERT_EQUAL(keel_kit_f32_to_f16(1e-9f), 0);
    CU_ASSERT(isnan(keel_kit_f16_to_f32(keel_kit_f32_to_f16(NAN))));
}

static void t_bfloat(void)
{
    int bad = 0;

    for (uint32_t h = 0; h < 65536; h++) {
        float f = keel_kit_bf16_to_f32((uint16_t)h);
        if (isnan(f))
            continue;
        if (keel_kit_f32_to_bf16(f) != h)
            bad++;
        /* halfway up to the next value: ties to even */
        if ((h & 0x7fff) < 0x7f7f) {
            float nx = keel_kit_bf16_to_f32((uint16_t)(h + 1));
            double mid = ((double)f + (double)nx) / 2;
            uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
            if ((double)(float)mid == mid &&
                keel_kit_f32_to_bf16((float)mid) != want)
                bad++;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(isnan(keel_kit_bf16_to_f32(keel_kit_f32_to_bf16(NAN))));
}

/* The verdict helper can fail: wrong expectations are caught. */
static void t_selftest(void)
{
    struct kt k;
    int64_t s4[1] = {4};

    kt_init(&k, KEEL_OP_RELU);
    kt_in(&k, KEEL_F32, 1, s4);
    kt_out(&k, KEEL_F32, 1, s4);
    CU_ASSERT(kt_verdict(&k, KEEL_STATUS_OK, NULL));
    CU_ASSERT(!kt_verdict(&k, KEEL_STATUS_INVALID_ARGUMENT, NULL));
    CU_ASSERT(!kt_verdict(&k, -1, NULL));
    k.in[0].ndim = 9;
    CU_ASSERT(!kt_verdict(&k, KEEL_STATUS_OK, NULL));
    CU_ASSERT(kt_verdict(&k, KEEL_STATUS_INVALID_ARGUMENT, "bad descriptor"));
    CU_ASSERT(!kt_verdict(&k, KEEL_STATUS_INVALID_ARGUMENT, "not in text"));
}

static const CU_TestInfo tests[] = {
    {"catalog look-up", t_catalog},
    {"generic checks", t_generic},
    {"required attributes", t_required_attrs},
    {"attribute and descriptor helpers", t_helpers},
    {"iteration plans", t_plans},
    {"float16 conversion", t_half},
    {"bfloat16 conversion", t_bfloat},
    {"the expectation helper can fail", t_selftest},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    return kt_main("kit", tests);
}
