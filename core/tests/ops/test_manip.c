/*
 * Shape and indexing op tests: concat, stack, split, chunk, gather,
 * index_select, scatter, take_along_axis, tile, flip, pad, topk, sort and
 * argsort.
 *
 * Every reference is computed here, in double, from host copies of the
 * inputs, by plain index arithmetic over the output's elements. Data
 * movement must be bit exact (compared with the integer tolerance, 0);
 * only scatter's accumulation uses the float tolerances.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optest.h"

/* ---- helpers ------------------------------------------------------------- */

static bool ok_(keel_status st, const char *what)
{
    if (st != KEEL_STATUS_OK)
        fprintf(stderr, "\n  %s: %s\n", what, keel_last_error());
    return st == KEEL_STATUS_OK;
}
#define OK(call) CU_ASSERT_FATAL(ok_((call), #call))

/* Fails with `want`, the message names the op ("op(") and holds `part`. */
#define ERR(call, want, op, part)                                            \
    do {                                                                     \
        OT_EXPECT_ERROR(call, want, op "(");                                 \
        if (!strstr(keel_last_error(), part))                                \
            fprintf(stderr, "\n  %s: '%s' lacks '%s'\n", #call,             \
                    keel_last_error(), part);                                \
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), part));             \
    } while (0)

static const keel_dtype numeric_dtypes[8] = {KEEL_F32, KEEL_F64, KEEL_F16,
                                             KEEL_BF16, KEEL_I8,  KEEL_U8,
                                             KEEL_I32, KEEL_I64};

static int64_t numel(int nd, const int64_t *s)
{
    int64_t n = 1;

    for (int d = 0; d < nd; d++)
        n *= s[d];
    return n;
}

static void unravel(int64_t i, int nd, const int64_t *s, int64_t *idx)
{
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = s[d] ? i % s[d] : 0;
        i = s[d] ? i / s[d] : 0;
    }
}

static int64_t ravel(int nd, const int64_t *s, const int64_t *idx)
{
    int64_t off = 0;

    for (int d = 0; d < nd; d++)
        off = off * s[d] + idx[d];
    return off;
}

/* Random values that every dtype holds exactly. */
static keel_tensor *rnd(keel_dtype dt, int nd, const int64_t *shape)
{
    switch (dt) {
    case KEEL_BOOL:
        return ot_rand(dt, nd, shape, 0, 1);
    case KEEL_U8:
        return ot_rand(dt, nd, shape, 0, 250);
    case KEEL_I8:
        return ot_rand(dt, nd, shape, -100, 100);
    default:
        return ot_rand(dt, nd, shape, -60, 60);
    }
}

/* An index tensor from int64 values. */
static keel_tensor *ix(keel_dtype dt, int nd, const int64_t *shape,
                       const int64_t *v)
{
    int64_t n = numel(nd, shape);
    double *d = malloc((size_t)(n ? n : 1) * sizeof(double));
    keel_tensor *t;

    for (int64_t i = 0; i < n; i++)
        d[i] = (double)v[i];
    t = ot_from(dt, nd, shape, d);
    free(d);
    return t;
}

/* Bit-exact comparison (integer tolerance) plus dtype and shape. */
static void check_exact(const char *what, const keel_tensor *t, keel_dtype dt,
                        int nd, const int64_t *shape, const double *ref)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(keel_tensor_dtype(t), dt);
    if (ot_check_shape(what, t, nd, shape))
        ot_check(what, t, ref, KEEL_I64);
}

static const char *dn(keel_dtype dt)
{
    return keel_dtype_name(dt);
}

/* ---- concat -------------------------------------------------------------- */

/* ref of concatenating n host arrays (shapes[k], all nd dims) on axis. */
static void ref_concat(int n, double *const *h, const int64_t (*shapes)[8],
                       int nd, int axis, const int64_t *oshape, double *ref)
{
    int64_t idx[8];

    for (int64_t i = 0; i < numel(nd, oshape); i++) {
        int k = 0;
        unravel(i, nd, oshape, idx);
        while (idx[axis] >= shapes[k][axis]) {
            idx[axis] -= shapes[k][axis];
            k++;
        }
        ref[i] = h[k][ravel(nd, shapes[k], idx)];
    }
}

static void concat_case(keel_dtype dt, int n, const int64_t (*shapes)[8],
                        int nd, int axis, const enum ot_layout *layouts)
{
    keel_tensor *xs[4], *out = NULL;
    double *h[4], *ref;
    int64_t oshape[8];
    int a = axis < 0 ? axis + nd : axis;
    char what[96];

    memcpy(oshape, shapes[0], sizeof(oshape));
    oshape[a] = 0;
    for (int k = 0; k < n; k++) {
        keel_tensor *t = rnd(dt, nd, shapes[k]);
        xs[k] = ot_layout(t, layouts[k]);
        keel_tensor_free(t);
        h[k] = ot_host(xs[k]);
        oshape[a] += shapes[k][a];
    }
    ref = malloc((size_t)(numel(nd, oshape) + 1) * sizeof(double));
    ref_concat(n, h, shapes, nd, a, oshape, ref);
    snprintf(what, sizeof(what), "concat %s axis %d", dn(dt), axis);
    OK(keel_concat(xs, n, axis, &out));
    check_exact(what, out, dt, nd, oshape, ref);
    keel_tensor_free(out);
    for (int k = 0; k < n; k++) {
        keel_tensor_free(xs[k]);
        free(h[k]);
    }
    free(ref);
}

static void test_concat(void)
{
    static const int64_t s3[3][8] = {{2, 3, 4}, {2, 1, 4}, {2, 5, 4}};
    static const int64_t s0[3][8] = {{2, 3, 4}, {4, 3, 4}, {1, 3, 4}};
    static const int64_t sl[3][8] = {{3, 2, 1}, {3, 2, 6}, {3, 2, 2}};
    static const int64_t s1[2][8] = {{5}, {1}};
    const enum ot_layout contig[3] = {OT_CONTIG, OT_CONTIG, OT_CONTIG};
    const enum ot_layout mixed[3] = {OT_CONTIG, OT_TRANSPOSED, OT_STRIDED};
    const enum ot_layout mixed2[3] = {OT_STRIDED, OT_CONTIG, OT_TRANSPOSED};

    for (int k = 0; k < 9; k++) {
        keel_dtype dt = ot_all_dtypes[k];
        concat_case(dt, 3, s3, 3, 1, contig);
        concat_case(dt, 3, s3, 3, 1, mixed);
        concat_case(dt, 3, s0, 3, 0, mixed2);
        concat_case(dt, 3, sl, 3, -1, contig);
        concat_case(dt, 2, s1, 1, 0, contig);
    }
}

static void test_concat_large(void)
{
    /* Rows shared on the pool (outer > 1), and one long axis-0 copy. */
    static const int64_t wide[2][8] = {{300, 150}, {300, 100}};
    static const int64_t tall[2][8] = {{50000, 2}, {20000, 2}};
    const enum ot_layout c2[2] = {OT_CONTIG, OT_CONTIG};
    const enum ot_layout t2[2] = {OT_TRANSPOSED, OT_CONTIG};

    concat_case(KEEL_F32, 2, wide, 2, 1, c2);
    concat_case(KEEL_F16, 2, wide, 2, -1, t2);
    concat_case(KEEL_F64, 2, tall, 2, 0, c2);
}

/* Paddle refuses mixed dtypes in concat; so does keel. */
static void test_concat_promotion(void)
{
    static const struct {
        keel_dtype a, b;
    } cases[] = {
        {KEEL_I32, KEEL_F16}, {KEEL_I8, KEEL_U8}, {KEEL_BOOL, KEEL_I64},
        {KEEL_F16, KEEL_BF16}, {KEEL_F32, KEEL_F64},
    };
    int64_t sa[2] = {2, 2}, sb[2] = {2, 3};

    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        double va[4] = {1, 0, 3, 1}, vb[6] = {0, 1, 1, 4, 5, 0};
        keel_tensor *xs[2] = {ot_from(cases[c].a, 2, sa, va),
                              ot_from(cases[c].b, 2, sb, vb)};
        keel_tensor *out = NULL;
        ERR(keel_concat(xs, 2, 1, &out), KEEL_STATUS_INVALID_ARGUMENT,
            "concat", "must share one dtype");
        CU_ASSERT_PTR_NULL(out);
        keel_tensor_free(xs[0]);
        keel_tensor_free(xs[1]);
    }
}

static void test_concat_empty(void)
{
    static const int64_t se[2][8] = {{2, 0, 3}, {2, 2, 3}};
    static const int64_t sz[2][8] = {{0, 3}, {0, 3}};
    const enum ot_layout c2[2] = {OT_CONTIG, OT_CONTIG};
    keel_tensor *xs[2], *out = NULL;

    concat_case(KEEL_F32, 2, se, 3, 1, c2);
    concat_case(KEEL_U8, 2, sz, 2, 0, c2);
    /* Both empty along the axis: an empty output of the right shape. */
    xs[0] = rnd(KEEL_I32, 2, (int64_t[]){3, 0});
    xs[1] = rnd(KEEL_I32, 2, (int64_t[]){3, 0});
    OK(keel_concat(xs, 2, 1, &out));
    ot_check_shape("concat empty", out, 2, (int64_t[]){3, 0});
    keel_tensor_free(out);
    keel_tensor_free(xs[0]);
    keel_tensor_free(xs[1]);
}

static void test_concat_errors(void)
{
    keel_tensor *a = rnd(KEEL_F32, 2, (int64_t[]){2, 3});
    keel_tensor *b = rnd(KEEL_F32, 2, (int64_t[]){3, 3});
    keel_tensor *c = rnd(KEEL_F32, 3, (int64_t[]){2, 3, 1});
    keel_tensor *s = rnd(KEEL_F32, 0, NULL), *out = NULL;
    keel_tensor *ab[2] = {a, b}, *ac[2] = {a, c}, *ss[2] = {s, s};

    ERR(keel_concat(ab, 2, 1, &out), KEEL_STATUS_INVALID_ARGUMENT, "concat",
        "input 1 has size 3 in dim 0");
    ERR(keel_concat(ab, 2, 2, &out), KEEL_STATUS_INVALID_ARGUMENT, "concat",
        "axis 2 is out of range");
    ERR(keel_concat(ab, 2, -3, &out), KEEL_STATUS_INVALID_ARGUMENT, "concat",
        "out of range");
    ERR(keel_concat(ac, 2, 0, &out), KEEL_STATUS_INVALID_ARGUMENT, "concat",
        "input 1 has 3 dims");
    ERR(keel_concat(ss, 2, 0, &out), KEEL_STATUS_INVALID_ARGUMENT, "concat",
        "0-d");
    ERR(keel_concat(ab, 0, 0, &out), KEEL_STATUS_INVALID_ARGUMENT, "concat",
        "at least one input");
    CU_ASSERT_PTR_NULL(out);
    keel_tensor_free(a);
    keel_tensor_free(b);
    keel_tensor_free(c);
    keel_tensor_free(s);
}

/* ---- stack --------------------------------------------------------------- */

static void stack_case(keel_dtype dt, int n, int nd, const int64_t *shape,
                       int axis, bool mixed_layouts)
{
    keel_tensor *xs[4], *out = NULL;
    double *h[4], *ref;
    int64_t oshape[8], idx[8], in[8];
    int a = axis < 0 ? axis + nd + 1 : axis;
    char what[96];

    for (int d = 0, s = 0; d <= nd; d++)
        oshape[d] = d == a ? n : shape[s++];
    for (int k = 0; k < n; k++) {
        keel_tensor *t = rnd(dt, nd, shape);
        xs[k] = ot_layout(t, mixed_layouts ? (enum ot_layout)(k % 3)
                                           : OT_CONTIG);
        keel_tensor_free(t);
        h[k] = ot_host(xs[k]);
    }
    ref = malloc((size_t)(numel(nd + 1, oshape) + 1) * sizeof(double));
    for (int64_t i = 0; i < numel(nd + 1, oshape); i++) {
        unravel(i, nd + 1, oshape, idx);
        for (int d = 0, s = 0; d <= nd; d++)
            if (d != a)
                in[s++] = idx[d];
        ref[i] = h[idx[a]][ravel(nd, shape, in)];
    }
    snprintf(what, sizeof(what), "stack %s axis %d", dn(dt), axis);
    OK(keel_stack(xs, n, axis, &out));
    check_exact(what, out, dt, nd + 1, oshape, ref);
    keel_tensor_free(out);
    for (int k = 0; k < n; k++) {
        keel_tensor_free(xs[k]);
        free(h[k]);
    }
    free(ref);
}

static void test_stack(void)
{
    int64_t s23[2] = {2, 3}, s4[1] = {4}, s1[3] = {1, 3, 1};

    for (int k = 0; k < 9; k++) {
        keel_dtype dt = ot_all_dtypes[k];
        stack_case(dt, 3, 2, s23, 0, false);
        stack_case(dt, 3, 2, s23, 1, true);
        stack_case(dt, 2, 2, s23, -1, true);
        stack_case(dt, 2, 1, s4, 1, false);
        stack_case(dt, 3, 0, NULL, 0, false); /* 0-d -> [3] */
        stack_case(dt, 2, 3, s1, 2, true);
    }
    /* Large: rows on the pool. */
    stack_case(KEEL_F32, 3, 2, (int64_t[]){200, 150}, 1, false);
    stack_case(KEEL_I64, 2, 2, (int64_t[]){200, 200}, -1, true);
}

static void test_stack_promotion_errors(void)
{
    double va[2] = {1, 2}, vb[2] = {0.5, -3};
    int64_t s2[1] = {2}, s3[1] = {3};
    keel_tensor *a = ot_from(KEEL_F32, 1, s2, va);
    keel_tensor *b = ot_from(KEEL_F32, 1, s2, vb);
    keel_tensor *i = ot_from(KEEL_I32, 1, s2, va);
    keel_tensor *c = rnd(KEEL_F32, 1, s3), *out = NULL;
    keel_tensor *ab[2] = {a, b}, *ac[2] = {a, c}, *ai[2] = {a, i};

    ERR(keel_stack(ai, 2, 0, &out), KEEL_STATUS_INVALID_ARGUMENT, "stack",
        "input 1 is int32 but input 0 is float32");
    ERR(keel_stack(ac, 2, 0, &out), KEEL_STATUS_INVALID_ARGUMENT, "stack",
        "input 1 has size 3 in dim 0");
    ERR(keel_stack(ab, 2, 2, &out), KEEL_STATUS_INVALID_ARGUMENT, "stack",
        "axis 2 is out of range");
    ERR(keel_stack(ab, 2, -3, &out), KEEL_STATUS_INVALID_ARGUMENT, "stack",
        "out of range");
    CU_ASSERT_PTR_NULL(out);
    keel_tensor_free(a);
    keel_tensor_free(b);
    keel_tensor_free(i);
    keel_tensor_free(c);
}

/* ---- split and chunk ----------------------------------------------------- */

/* Split x (host h, shape) on axis into pieces of `sizes`; check outs. */
static void check_pieces(const char *what, keel_tensor *const *outs, int n,
                         const double *h, keel_dtype dt, int nd,
                         const int64_t *shape, int axis, const int64_t *sizes)
{
    int64_t start = 0, idx[8], ps[8];

    for (int k = 0; k < n; k++) {
        double *ref;
        memcpy(ps, shape, sizeof(int64_t) * (size_t)nd);
        ps[axis] = sizes[k];
        ref = malloc((size_t)(numel(nd, ps) + 1) * sizeof(double));
        for (int64_t i = 0; i < numel(nd, ps); i++) {
            unravel(i, nd, ps, idx);
            idx[axis] += start;
            ref[i] = h[ravel(nd, shape, idx)];
        }
        check_exact(what, outs[k], dt, nd, ps, ref);
        free(ref);
        start += sizes[k];
    }
}

static void split_case(keel_dtype dt, int nd, const int64_t *shape, int n,
                       const int64_t *sections, const int64_t *sizes,
                       int axis, enum ot_layout layout)
{
    keel_tensor *t = rnd(dt, nd, shape), *x = ot_layout(t, layout);
    keel_tensor *outs[8] = {NULL};
    double *h = ot_host(x);
    char what[96];

    snprintf(what, sizeof(what), "split %s axis %d layout %d", dn(dt), axis,
             (int)layout);
    OK(keel_split(x, n, sections, axis, outs));
    check_pieces(what, outs, n, h, dt, nd, shape, axis < 0 ? axis + nd : axis,
                 sizes);
    for (int k = 0; k < n; k++)
        keel_tensor_free(outs[k]);
    keel_tensor_free(t);
    keel_tensor_free(x);
    free(h);
}

static void test_split(void)
{
    int64_t s[3] = {3, 6, 4};

    for (int k = 0; k < 9; k++) {
        keel_dtype dt = ot_all_dtypes[k];
        split_case(dt, 3, s, 3, (int64_t[]){1, -1, 2}, (int64_t[]){1, 3, 2},
                   1, OT_CONTIG);
        split_case(dt, 3, s, 2, (int64_t[]){3, 1}, (int64_t[]){3, 1}, -1,
                   OT_TRANSPOSED);
        split_case(dt, 3, s, 3, (int64_t[]){0, 2, 1}, (int64_t[]){0, 2, 1},
                   0, OT_STRIDED);
        split_case(dt, 1, (int64_t[]){5}, 2, (int64_t[]){-1, 5},
                   (int64_t[]){0, 5}, 0, OT_CONTIG);
    }
    /* Large: rows shared on the pool, and a strided input. */
    split_case(KEEL_F32, 2, (int64_t[]){400, 200}, 2, (int64_t[]){150, -1},
               (int64_t[]){150, 50}, 1, OT_CONTIG);
    split_case(KEEL_F16, 2, (int64_t[]){400, 200}, 3,
               (int64_t[]){100, 100, 200}, (int64_t[]){100, 100, 200}, 0,
               OT_TRANSPOSED);
}

static void test_chunk(void)
{
    int64_t s7[2] = {2, 7}, s6[1] = {6};
    keel_tensor *x = rnd(KEEL_I32, 2, s7), *y = rnd(KEEL_F64, 1, s6);
    keel_tensor *outs[4] = {NULL};
    double *hx = ot_host(x), *hy = ot_host(y);

    /* 7 in 3 pieces: 3, 3, 1 (the last is smaller). */
    OK(keel_chunk(x, 3, -1, outs));
    check_pieces("chunk uneven", outs, 3, hx, KEEL_I32, 2, s7, 1,
                 (int64_t[]){3, 3, 1});
    for (int k = 0; k < 3; k++)
        keel_tensor_free(outs[k]);
    /* More pieces than elements: the last ones are empty. */
    {
        keel_tensor *many[9] = {NULL};
        OK(keel_chunk(x, 9, 1, many));
        check_pieces("chunk many", many, 9, hx, KEEL_I32, 2, s7, 1,
                     (int64_t[]){1, 1, 1, 1, 1, 1, 1, 0, 0});
        for (int k = 0; k < 9; k++)
            keel_tensor_free(many[k]);
    }
    OK(keel_chunk(y, 3, 0, outs));
    check_pieces("chunk even", outs, 3, hy, KEEL_F64, 1, s6, 0,
                 (int64_t[]){2, 2, 2});
    for (int k = 0; k < 3; k++)
        keel_tensor_free(outs[k]);
    keel_tensor_free(x);
    keel_tensor_free(y);
    free(hx);
    free(hy);
}

static void test_split_errors(void)
{
    keel_tensor *x = rnd(KEEL_F32, 2, (int64_t[]){4, 6});
    keel_tensor *s = rnd(KEEL_F32, 0, NULL), *outs[4] = {NULL};

    ERR(keel_split(x, 2, (int64_t[]){2, 3}, 1, outs),
        KEEL_STATUS_INVALID_ARGUMENT, "split", "add up to 5");
    ERR(keel_split(x, 2, (int64_t[]){5, 3}, 0, outs),
        KEEL_STATUS_INVALID_ARGUMENT, "split", "add up to 8");
    ERR(keel_split(x, 3, (int64_t[]){-1, -1, 2}, 1, outs),
        KEEL_STATUS_INVALID_ARGUMENT, "split", "at most one -1");
    ERR(keel_split(x, 2, (int64_t[]){-2, 8}, 1, outs),
        KEEL_STATUS_INVALID_ARGUMENT, "split", "sections[0] = -2");
    ERR(keel_split(x, 2, (int64_t[]){7, -1}, 1, outs),
        KEEL_STATUS_INVALID_ARGUMENT, "split", "before the -1");
    ERR(keel_split(x, 2, (int64_t[]){3, 3}, 2, outs),
        KEEL_STATUS_INVALID_ARGUMENT, "split", "axis 2 is out of range");
    ERR(keel_split(s, 1, (int64_t[]){1}, 0, outs),
        KEEL_STATUS_INVALID_ARGUMENT, "split", "out of range for 0 dims");
    {
        int64_t many[65] = {6};
        keel_tensor *mo[65] = {NULL};
        ERR(keel_split(x, 65, many, 1, mo), KEEL_STATUS_INVALID_ARGUMENT,
            "split", "sections has 65 entries");
        CU_ASSERT_PTR_NULL(mo[0]);
    }
    CU_ASSERT_PTR_NULL(outs[0]);
    keel_tensor_free(x);
    keel_tensor_free(s);
}

/* ---- gather and index_select --------------------------------------------- */

typedef keel_status (*gather_fn)(const keel_tensor *, const keel_tensor *,
                                 int, keel_tensor **);

static void gather_case(gather_fn fn, const char *name, keel_dtype dt, int nd,
                        const int64_t *shape, int axis, int n,
                        const int64_t *iv, keel_dtype idt,
                        enum ot_layout xl, enum ot_layout il)
{
    keel_tensor *t = rnd(dt, nd, shape), *x = ot_layout(t, xl);
    keel_tensor *i0 = ix(idt, 1, (int64_t[]){n}, iv), *index, *out = NULL;
    int a = axis < 0 ? axis + nd : axis;
    int64_t oshape[8], idx[8];
    double *h = ot_host(x), *ref;
    char what[96];

    index = ot_layout(i0, il);
    memcpy(oshape, shape, sizeof(int64_t) * (size_t)nd);
    oshape[a] = n;
    ref = malloc((size_t)(numel(nd, oshape) + 1) * sizeof(double));
    for (int64_t i = 0; i < numel(nd, oshape); i++) {
        unravel(i, nd, oshape, idx);
        idx[a] = iv[idx[a]];
        ref[i] = h[ravel(nd, shape, idx)];
    }
    snprintf(what, sizeof(what), "%s %s axis %d index %s", name, dn(dt), axis,
             dn(idt));
    OK(fn(x, index, axis, &out));
    check_exact(what, out, dt, nd, oshape, ref);
    keel_tensor_free(out);
    keel_tensor_free(t);
    keel_tensor_free(x);
    keel_tensor_free(i0);
    keel_tensor_free(index);
    free(h);
    free(ref);
}

static void test_gather(void)
{
    static const int64_t rep[6] = {4, 0, 4, 2, 0, 3};
    static const int64_t sm[4] = {2, 0, 2, 1};
    int64_t s520[2] = {5, 20}, s463[3] = {4, 6, 3};

    for (int k = 0; k < 9; k++) {
        keel_dtype dt = ot_all_dtypes[k];
        /* Long rows (block copies), repeated indices. */
        gather_case(keel_gather, "gather", dt, 2, s520, 0, 6, rep, KEEL_I64,
                    OT_CONTIG, OT_CONTIG);
        gather_case(keel_index_select, "index_select", dt, 2, s520, 0, 6, rep,
                    KEEL_I32, OT_TRANSPOSED, OT_STRIDED);
        /* Short rows (strided take), middle and last axis. */
        gather_case(keel_gather, "gather", dt, 3, s463, 1, 6, rep, KEEL_I32,
                    OT_STRIDED, OT_CONTIG);
        gather_case(keel_index_select, "index_select", dt, 3, s463, -1, 4, sm,
                    KEEL_I64, OT_CONTIG, OT_STRIDED);
        gather_case(keel_gather, "gather", dt, 3, s463, 2, 4, sm, KEEL_I64,
                    OT_TRANSPOSED, OT_CONTIG);
    }
    /* Empty index: [0, 20]. */
    gather_case(keel_gather, "gather", KEEL_F32, 2, s520, 0, 0, rep, KEEL_I64,
                OT_CONTIG, OT_CONTIG);
}

static void test_gather_large(void)
{
    int64_t big[2] = {2000, 64}, wide[2] = {64, 2000};
    int64_t *iv = malloc(1500 * sizeof(int64_t));

    for (int i = 0; i < 1500; i++)
        iv[i] = (i * 7919) % 2000;
    /* 96000 elements: rows shared on the pool. */
    gather_case(keel_gather, "gather", KEEL_F32, 2, big, 0, 1500, iv,
                KEEL_I64, OT_CONTIG, OT_CONTIG);
    gather_case(keel_index_select, "index_select", KEEL_BF16, 2, wide, 1,
                1500, iv, KEEL_I32, OT_TRANSPOSED, OT_CONTIG);
    free(iv);
}

static void test_gather_scalar_index(void)
{
    int64_t s[2] = {3, 4}, two = 2;
    keel_tensor *x = rnd(KEEL_I64, 2, s), *i0 = ix(KEEL_I32, 0, NULL, &two);
    keel_tensor *out = NULL;
    double *h = ot_host(x), ref[4];

    /* A 0-d index drops the axis, as Paddle. */
    OK(keel_gather(x, i0, 0, &out));
    for (int j = 0; j < 4; j++)
        ref[j] = h[2 * 4 + j];
    check_exact("gather 0-d index", out, KEEL_I64, 1, (int64_t[]){4}, ref);
    keel_tensor_free(out);
    OK(keel_gather(x, i0, 1, &out));
    for (int j = 0; j < 3; j++)
        ref[j] = h[j * 4 + 2];
    check_exact("gather 0-d index axis 1", out, KEEL_I64, 1, (int64_t[]){3},
                ref);
    keel_tensor_free(out);
    out = NULL;
    /* index_select wants a 1-D index. */
    ERR(keel_index_select(x, i0, 0, &out), KEEL_STATUS_INVALID_ARGUMENT,
        "index_select", "must be 1-D");
    keel_tensor_free(x);
    keel_tensor_free(i0);
    free(h);
}

static void test_gather_errors(void)
{
    int64_t s[2] = {3, 4}, n3[1] = {3}, n4[2] = {2, 2};
    keel_tensor *x = rnd(KEEL_F32, 2, s), *out = NULL;
    keel_tensor *big = ix(KEEL_I64, 1, n3, (int64_t[]){0, 2, 3});
    keel_tensor *neg = ix(KEEL_I32, 1, n3, (int64_t[]){1, -1, 0});
    keel_tensor *fl = ot_from(KEEL_F32, 1, n3, (double[]){0, 1, 2});
    keel_tensor *two = ix(KEEL_I64, 2, n4, (int64_t[]){0, 1, 1, 0});
    keel_tensor *okix = ix(KEEL_I64, 1, n3, (int64_t[]){0, 1, 2});

    ERR(keel_gather(x, big, 0, &out), KEEL_STATUS_INVALID_ARGUMENT, "gather",
        "index 3 at position 2 is out of range for axis 0 of size 3");
    ERR(keel_index_select(x, big, 0, &out), KEEL_STATUS_INVALID_ARGUMENT,
        "index_select", "index 3 at position 2");
    ERR(keel_gather(x, neg, 1, &out), KEEL_STATUS_INVALID_ARGUMENT, "gather",
        "index -1 at position 1 is negative");
    ERR(keel_index_select(x, fl, 0, &out), KEEL_STATUS_INVALID_ARGUMENT,
        "index_select", "must be int32 or int64");
    ERR(keel_gather(x, two, 0, &out), KEEL_STATUS_INVALID_ARGUMENT, "gather",
        "must be 1-D or 0-d");
    ERR(keel_gather(x, okix, 2, &out), KEEL_STATUS_INVALID_ARGUMENT, "gather",
        "axis 2 is out of range");
    ERR(keel_index_select(x, okix, -3, &out), KEEL_STATUS_INVALID_ARGUMENT,
        "index_select", "axis -3 is out of range");
    CU_ASSERT_PTR_NULL(out);
    keel_tensor_free(x);
    keel_tensor_free(big);
    keel_tensor_free(neg);
    keel_tensor_free(fl);
    keel_tensor_free(two);
    keel_tensor_free(okix);
}

/* ---- scatter ------------------------------------------------------------- */

/* Values that sum exactly in every dtype (small halves, small ints). */
static keel_tensor *sum_safe(keel_dtype dt, int nd, const int64_t *shape,
                             int salt)
{
    int64_t n = numel(nd, shape);
    double *v = malloc((size_t)(n ? n : 1) * sizeof(double));
    keel_tensor *t;

    for (int64_t i = 0; i < n; i++) {
        int64_t q = (i * 37 + salt) % 41;
        if (dt == KEEL_BOOL)
            v[i] = q % 3 == 0;
        else if (dt == KEEL_U8)
            v[i] = q;
        else if (dt == KEEL_I8 || dt == KEEL_I32 || dt == KEEL_I64)
            v[i] = q - 20;
        else
            v[i] = (q - 20) * 0.5;
    }
    t = ot_from(dt, nd, shape, v);
    free(v);
    return t;
}

/* Accumulation as the kernel stores it: integers wrap, bool ORs. */
static double wrap_to(double v, keel_dtype dt)
{
    switch (dt) {
    case KEEL_I8:
        return (double)(int8_t)(int64_t)v;
    case KEEL_U8:
        return (double)(uint8_t)(int64_t)v;
    case KEEL_I32:
        return (double)(int32_t)(int64_t)v;
    case KEEL_BOOL:
        return v != 0;
    default:
        return v;
    }
}

static void scatter_case(keel_dtype dt, int nd, const int64_t *shape, int n,
                         const int64_t *iv, bool overwrite, keel_dtype idt,
                         enum ot_layout xl, enum ot_layout ul)
{
    int64_t ushape[8], inner = numel(nd - 1, shape + 1);
    keel_tensor *t = sum_safe(dt, nd, shape, 3), *x = ot_layout(t, xl);
    keel_tensor *u0, *u, *index = ix(idt, 1, (int64_t[]){n}, iv), *out = NULL;
    double *hx = ot_host(x), *hu, *ref;
    char what[96];

    memcpy(ushape, shape, sizeof(int64_t) * (size_t)nd);
    ushape[0] = n;
    u0 = sum_safe(dt, nd, ushape, 11);
    u = ot_layout(u0, ul);
    hu = ot_host(u);
    ref = malloc((size_t)(numel(nd, shape) + 1) * sizeof(double));
    memcpy(ref, hx, (size_t)numel(nd, shape) * sizeof(double));
    /* Paddle: overwrite replaces rows in order (the last wins); else the
     * indexed rows are zeroed, then every update is added. */
    if (!overwrite)
        for (int i = 0; i < n; i++)
            for (int64_t j = 0; j < inner; j++)
                ref[iv[i] * inner + j] = 0;
    for (int i = 0; i < n; i++)
        for (int64_t j = 0; j < inner; j++) {
            double *r = &ref[iv[i] * inner + j], v = hu[i * inner + j];
            *r = overwrite ? v : *r + v;
        }
    for (int64_t j = 0; j < numel(nd, shape); j++)
        ref[j] = wrap_to(ref[j], dt);
    snprintf(what, sizeof(what), "scatter %s overwrite %d", dn(dt),
             (int)overwrite);
    OK(keel_scatter(x, index, u, overwrite, &out));
    CU_ASSERT_EQUAL(keel_tensor_dtype(out), dt);
    if (ot_check_shape(what, out, nd, shape))
        ot_check(what, out, ref, overwrite ? KEEL_I64 : dt);
    keel_tensor_free(out);
    keel_tensor_free(t);
    keel_tensor_free(x);
    keel_tensor_free(u0);
    keel_tensor_free(u);
    keel_tensor_free(index);
    free(hx);
    free(hu);
    free(ref);
}

static void test_scatter(void)
{
    static const int64_t rep[5] = {1, 3, 1, 0, 1};
    int64_t s2[2] = {5, 3}, s3[3] = {4, 2, 3}, s1[1] = {6};

    for (int k = 0; k < 9; k++) {
        keel_dtype dt = ot_all_dtypes[k];
        for (int ow = 0; ow < 2; ow++) {
            scatter_case(dt, 2, s2, 5, rep, ow, KEEL_I64, OT_CONTIG,
                         OT_CONTIG);
            scatter_case(dt, 3, s3, 5, rep, ow, KEEL_I32, OT_TRANSPOSED,
                         OT_TRANSPOSED);
            scatter_case(dt, 2, s2, 5, rep, ow, KEEL_I32, OT_STRIDED,
                         OT_STRIDED);
            scatter_case(dt, 1, s1, 5, rep, ow, KEEL_I64, OT_CONTIG,
                         OT_CONTIG);
        }
    }
    /* No index: a copy of x. */
    scatter_case(KEEL_F32, 2, s2, 0, rep, false, KEEL_I64, OT_TRANSPOSED,
                 OT_CONTIG);
}

static void test_scatter_large(void)
{
    int64_t s[2] = {3000, 40}, *iv = malloc(2500 * sizeof(int64_t));

    for (int i = 0; i < 2500; i++)
        iv[i] = (i * 613) % 2999;
    iv[7] = iv[1000] = iv[2400] = 17; /* repeats across chunks */
    scatter_case(KEEL_F32, 2, s, 2500, iv, false, KEEL_I64, OT_CONTIG,
                 OT_CONTIG);
    scatter_case(KEEL_F16, 2, s, 2500, iv, false, KEEL_I32, OT_CONTIG,
                 OT_TRANSPOSED);
    scatter_case(KEEL_I64, 2, s, 2500, iv, true, KEEL_I64, OT_CONTIG,
                 OT_TRANSPOSED);
    /* Rows longer than one accumulation block (256). */
    scatter_case(KEEL_BF16, 2, (int64_t[]){6, 600}, 5,
                 (int64_t[]){5, 0, 5, 2, 5}, false, KEEL_I64, OT_CONTIG,
                 OT_STRIDED);
    free(iv);
}

static void test_scatter_scalar_index_promotion(void)
{
    int64_t s[2] = {4, 3}, two = 2;
    double xv[12], uv[3] = {7, -8, 9}, ref[12];
    keel_tensor *x, *i0 = ix(KEEL_I64, 0, NULL, &two), *u, *out = NULL;

    for (int i = 0; i < 12; i++)
        xv[i] = ref[i] = i * 0.25;
    x = ot_from(KEEL_F32, 2, s, xv);
    u = ot_from(KEEL_I32, 1, (int64_t[]){3}, uv);
    /* updates of another dtype: an error, as in Paddle */
    ERR(keel_scatter(x, i0, u, true, &out), KEEL_STATUS_INVALID_ARGUMENT,
        "scatter", "updates is int32 but x is float32");
    keel_tensor_free(u);
    u = ot_from(KEEL_F32, 1, (int64_t[]){3}, uv);
    /* 0-d index: updates is one row. */
    for (int j = 0; j < 3; j++)
        ref[2 * 3 + j] = uv[j];
    OK(keel_scatter(x, i0, u, true, &out));
    check_exact("scatter 0-d index", out, KEEL_F32, 2, s, ref);
    keel_tensor_free(out);
    OK(keel_scatter(x, i0, u, false, &out));
    check_exact("scatter 0-d index add", out, KEEL_F32, 2, s, ref);
    keel_tensor_free(out);
    keel_tensor_free(x);
    keel_tensor_free(i0);
    keel_tensor_free(u);
}

static void test_scatter_errors(void)
{
    int64_t s[2] = {3, 2}, n2[1] = {2};
    keel_tensor *x = rnd(KEEL_F32, 2, s), *out = NULL;
    keel_tensor *u = rnd(KEEL_F32, 2, (int64_t[]){2, 2});
    keel_tensor *u3 = rnd(KEEL_F32, 2, (int64_t[]){3, 2});
    keel_tensor *uw = rnd(KEEL_F32, 2, (int64_t[]){2, 3});
    keel_tensor *big = ix(KEEL_I64, 1, n2, (int64_t[]){0, 3});
    keel_tensor *neg = ix(KEEL_I32, 1, n2, (int64_t[]){-2, 0});
    keel_tensor *okix = ix(KEEL_I64, 1, n2, (int64_t[]){0, 1});
    keel_tensor *fl = ot_from(KEEL_F64, 1, n2, (double[]){0, 1});

    ERR(keel_scatter(x, big, u, true, &out), KEEL_STATUS_INVALID_ARGUMENT,
        "scatter", "index 3 at position 1 is out of range");
    ERR(keel_scatter(x, neg, u, false, &out), KEEL_STATUS_INVALID_ARGUMENT,
        "scatter", "index -2 at position 0 is negative");
    ERR(keel_scatter(x, okix, u3, true, &out), KEEL_STATUS_INVALID_ARGUMENT,
        "scatter", "updates has 3 rows but the index has 2");
    ERR(keel_scatter(x, okix, uw, true, &out), KEEL_STATUS_INVALID_ARGUMENT,
        "scatter", "updates has size 3 in dim 1");
    ERR(keel_scatter(x, fl, u, true, &out), KEEL_STATUS_INVALID_ARGUMENT,
        "scatter", "must be int32 or int64");
    CU_ASSERT_PTR_NULL(out);
    keel_tensor_free(x);
    keel_tensor_free(u);
    keel_tensor_free(u3);
    keel_tensor_free(uw);
    keel_tensor_free(big);
    keel_tensor_free(neg);
    keel_tensor_free(okix);
    keel_tensor_free(fl);
}

/* ---- take_along_axis ----------------------------------------------------- */

static void take_case(keel_dtype dt, int nd, const int64_t *xs,
                      const int64_t *is, int axis, const int64_t *iv,
                      keel_dtype idt, enum ot_layout xl, enum ot_layout il)
{
    keel_tensor *t = rnd(dt, nd, xs), *x = ot_layout(t, xl);
    keel_tensor *i0 = ix(idt, nd, is, iv), *index = ot_layout(i0, il);
    keel_tensor *out = NULL;
    int a = axis < 0 ? axis + nd : axis;
    int64_t os[8], idx[8], ii[8];
    double *h = ot_host(x), *ref;
    char what[96];

    for (int d = 0; d < nd; d++)
        os[d] = d == a ? is[d] : (xs[d] == 1 ? is[d] : xs[d]);
    ref = malloc((size_t)(numel(nd, os) + 1) * sizeof(double));
    for (int64_t i = 0; i < numel(nd, os); i++) {
        int64_t v;
        unravel(i, nd, os, idx);
        for (int d = 0; d < nd; d++)
            ii[d] = is[d] == 1 ? 0 : idx[d];
        v = iv[ravel(nd, is, ii)];
        if (v < 0)
            v += xs[a];
        for (int d = 0; d < nd; d++)
            ii[d] = d == a ? v : (xs[d] == 1 ? 0 : idx[d]);
        ref[i] = h[ravel(nd, xs, ii)];
    }
    snprintf(what, sizeof(what), "take_along_axis %s axis %d", dn(dt), axis);
    OK(keel_take_along_axis(x, index, axis, &out));
    check_exact(what, out, dt, nd, os, ref);
    keel_tensor_free(out);
    keel_tensor_free(t);
    keel_tensor_free(x);
    keel_tensor_free(i0);
    keel_tensor_free(index);
    free(h);
    free(ref);
}

static void test_take_along_axis(void)
{
    static const int64_t iv6[6] = {4, 0, -1, 2, 2, -5};
    static const int64_t iv8[8] = {0, 2, 1, 1, 2, 0, -3, 2};
    static const int64_t iv8b[8] = {0, 1, 1, -1, 0, -2, 1, 0};
    int64_t x35[2] = {3, 5}, i32_[2] = {3, 2}, i12[2] = {1, 2};
    int64_t x15[2] = {1, 5}, x234[3] = {2, 3, 4}, i214[3] = {2, 1, 4};

    for (int k = 0; k < 9; k++) {
        keel_dtype dt = ot_all_dtypes[k];
        take_case(dt, 2, x35, i32_, 1, iv6, KEEL_I64, OT_CONTIG, OT_CONTIG);
        take_case(dt, 2, x35, i32_, -1, iv6, KEEL_I32, OT_TRANSPOSED,
                  OT_STRIDED);
        /* index broadcast on dim 0, x broadcast on dim 0 */
        take_case(dt, 2, x35, i12, 1, iv6, KEEL_I64, OT_STRIDED, OT_CONTIG);
        take_case(dt, 2, x15, i32_, 1, iv6, KEEL_I32, OT_CONTIG,
                  OT_TRANSPOSED);
        take_case(dt, 3, x234, i214, 0, iv8b, KEEL_I64, OT_TRANSPOSED,
                  OT_CONTIG);
        take_case(dt, 3, x234, (int64_t[]){2, 2, 1}, 1, iv8, KEEL_I32,
                  OT_CONTIG, OT_STRIDED);
    }
}

static void test_take_along_axis_large_errors(void)
{
    int64_t xs[2] = {400, 300}, is[2] = {400, 200}, *iv;
    keel_tensor *x = rnd(KEEL_F32, 2, (int64_t[]){3, 4}), *out = NULL;
    keel_tensor *bad = ix(KEEL_I64, 2, (int64_t[]){3, 1},
                          (int64_t[]){0, 4, 1});
    keel_tensor *neg = ix(KEEL_I64, 2, (int64_t[]){3, 1},
                          (int64_t[]){0, -5, 1});
    keel_tensor *r1 = ix(KEEL_I64, 1, (int64_t[]){3}, (int64_t[]){0, 1, 2});
    keel_tensor *nb = ix(KEEL_I32, 2, (int64_t[]){2, 1}, (int64_t[]){0, 1});
    keel_tensor *fl = ot_from(KEEL_F32, 2, (int64_t[]){3, 1},
                              (double[]){0, 1, 2});

    iv = malloc(400 * 200 * sizeof(int64_t));
    for (int i = 0; i < 400 * 200; i++)
        iv[i] = (i * 31) % 300 - (i % 3 == 0 ? 300 : 0);
    take_case(KEEL_F64, 2, xs, is, 1, iv, KEEL_I64, OT_CONTIG, OT_CONTIG);
    take_case(KEEL_I8, 2, xs, is, -1, iv, KEEL_I32, OT_TRANSPOSED,
              OT_CONTIG);
    free(iv);

    ERR(keel_take_along_axis(x, bad, 1, &out), KEEL_STATUS_INVALID_ARGUMENT,
        "take_along_axis", "index 4 at position 1 is out of range");
    ERR(keel_take_along_axis(x, neg, 1, &out), KEEL_STATUS_INVALID_ARGUMENT,
        "take_along_axis", "index -5 at position 1");
    ERR(keel_take_along_axis(x, r1, 1, &out), KEEL_STATUS_INVALID_ARGUMENT,
        "take_along_axis", "rank of x");
    ERR(keel_take_along_axis(x, nb, 1, &out), KEEL_STATUS_INVALID_ARGUMENT,
        "take_along_axis", "do not broadcast");
    ERR(keel_take_along_axis(x, bad, 2, &out), KEEL_STATUS_INVALID_ARGUMENT,
        "take_along_axis", "axis 2 is out of range");
    ERR(keel_take_along_axis(x, fl, 0, &out), KEEL_STATUS_INVALID_ARGUMENT,
        "take_along_axis", "must be int32 or int64");
    CU_ASSERT_PTR_NULL(out);
    keel_tensor_free(x);
    keel_tensor_free(bad);
    keel_tensor_free(neg);
    keel_tensor_free(r1);
    keel_tensor_free(nb);
    keel_tensor_free(fl);
}

/* ---- tile ---------------------------------------------------------------- */

static void tile_case(keel_dtype dt, int nd, const int64_t *xs, int nr,
                      const int64_t *rep, enum ot_layout xl)
{
    keel_tensor *t = rnd(dt, nd, xs), *x = ot_layout(t, xl), *out = NULL;
    int on = nr > nd ? nr : nd;
    int64_t os[8], ax[8], idx[8], xi[8];
    double *h = ot_host(x), *ref;
    char what[96];

    for (int d = 0; d < on; d++) {
        int ri = d - (on - nr), xd = d - (on - nd);
        ax[d] = xd >= 0 ? xs[xd] : 1;
        os[d] = ax[d] * (ri >= 0 ? rep[ri] : 1);
    }
    ref = malloc((size_t)(numel(on, os) + 1) * sizeof(double));
    for (int64_t i = 0; i < numel(on, os); i++) {
        unravel(i, on, os, idx);
        for (int d = 0; d < on; d++)
            xi[d] = idx[d] % ax[d];
        ref[i] = h[ravel(on, ax, xi)];
    }
    snprintf(what, sizeof(what), "tile %s %d repeats", dn(dt), nr);
    OK(keel_tile(x, nr, rep, &out));
    check_exact(what, out, dt, on, os, ref);
    keel_tensor_free(out);
    keel_tensor_free(t);
    keel_tensor_free(x);
    free(h);
    free(ref);
}

static void test_tile(void)
{
    int64_t s23[2] = {2, 3};

    for (int k = 0; k < 9; k++) {
        keel_dtype dt = ot_all_dtypes[k];
        tile_case(dt, 2, s23, 2, (int64_t[]){2, 3}, OT_CONTIG);
        tile_case(dt, 2, s23, 1, (int64_t[]){5}, OT_TRANSPOSED);
        tile_case(dt, 2, s23, 3, (int64_t[]){2, 1, 3}, OT_STRIDED);
        tile_case(dt, 0, NULL, 2, (int64_t[]){3, 2}, OT_CONTIG);
        tile_case(dt, 3, (int64_t[]){1, 2, 1}, 3, (int64_t[]){3, 1, 4},
                  OT_CONTIG);
        tile_case(dt, 2, s23, 0, NULL, OT_TRANSPOSED);
    }
    /* Zero repeats give an empty output; an empty x stays empty. */
    tile_case(KEEL_F32, 2, s23, 2, (int64_t[]){0, 2}, OT_CONTIG);
    tile_case(KEEL_I32, 2, (int64_t[]){0, 3}, 2, (int64_t[]){2, 2},
              OT_CONTIG);
    /* Large: 7 and 1000 repeats (doubling copies on the pool). */
    tile_case(KEEL_F32, 2, (int64_t[]){100, 100}, 2, (int64_t[]){7, 1},
              OT_TRANSPOSED);
    tile_case(KEEL_U8, 1, (int64_t[]){70}, 2, (int64_t[]){3, 1000},
              OT_CONTIG);
}

static void test_tile_errors(void)
{
    keel_tensor *x = rnd(KEEL_F32, 2, (int64_t[]){2, 3}), *out = NULL;

    ERR(keel_tile(x, 2, (int64_t[]){2, -1}, &out),
        KEEL_STATUS_INVALID_ARGUMENT, "tile", "repeat_times[1] = -1");
    ERR(keel_tile(x, 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, &out),
        KEEL_STATUS_INVALID_ARGUMENT, "tile", "at most 8");
    CU_ASSERT_PTR_NULL(out);
    keel_tensor_free(x);
}

/* ---- flip ---------------------------------------------------------------- */

static void flip_case(keel_dtype dt, int nd, const int64_t *xs, int na,
                      const int *axes, enum ot_layout xl)
{
    keel_tensor *t = rnd(dt, nd, xs), *x = ot_layout(t, xl), *out = NULL;
    int64_t idx[8];
    bool fl[8] = {false};
    double *h = ot_host(x), *ref;
    char what[96];

    for (int i = 0; i < na; i++)
        fl[axes[i] < 0 ? axes[i] + nd : axes[i]] = true;
    ref = malloc((size_t)(numel(nd, xs) + 1) * sizeof(double));
    for (int64_t i = 0; i < numel(nd, xs); i++) {
        unravel(i, nd, xs, idx);
        for (int d = 0; d < nd; d++)
            if (fl[d])
                idx[d] = xs[d] - 1 - idx[d];
        ref[i] = h[ravel(nd, xs, idx)];
    }
    snprintf(what, sizeof(what), "flip %s %d axes", dn(dt), na);
    OK(keel_flip(x, na, axes, &out));
    check_exact(what, out, dt, nd, xs, ref);
    keel_tensor_free(out);
    keel_tensor_free(t);
    keel_tensor_free(x);
    free(h);
    free(ref);
}

static void test_flip(void)
{
    int64_t s[3] = {2, 3, 4};
    keel_tensor *x = rnd(KEEL_F32, 2, (int64_t[]){2, 3}), *out = NULL;

    for (int k = 0; k < 9; k++) {
        keel_dtype dt = ot_all_dtypes[k];
        flip_case(dt, 3, s, 1, (int[]){0}, OT_CONTIG);
        flip_case(dt, 3, s, 2, (int[]){-1, 1}, OT_TRANSPOSED);
        flip_case(dt, 3, s, 3, (int[]){0, 1, 2}, OT_STRIDED);
        flip_case(dt, 3, s, 2, (int[]){2, -1}, OT_CONTIG); /* repeated: once */
        flip_case(dt, 3, s, 0, NULL, OT_STRIDED);
        flip_case(dt, 0, NULL, 0, NULL, OT_CONTIG);
        flip_case(dt, 2, (int64_t[]){0, 4}, 1, (int[]){1}, OT_CONTIG);
    }
    flip_case(KEEL_F32, 2, (int64_t[]){300, 400}, 1, (int[]){-1}, OT_CONTIG);
    flip_case(KEEL_F16, 2, (int64_t[]){300, 400}, 2, (int[]){0, 1},
              OT_TRANSPOSED);
    ERR(keel_flip(x, 1, (int[]){2}, &out), KEEL_STATUS_INVALID_ARGUMENT,
        "flip", "axis 2 out of range");
    ERR(keel_flip(x, 2, (int[]){0, -3}, &out), KEEL_STATUS_INVALID_ARGUMENT,
        "flip", "axis -3 out of range");
    CU_ASSERT_PTR_NULL(out);
    keel_tensor_free(x);
}

/* ---- pad ----------------------------------------------------------------- */

static void pad_case(keel_dtype dt, int nd, const int64_t *xs, int np,
                     const int64_t *pad, const char *mode, double value,
                     enum ot_layout xl)
{
    keel_tensor *t = rnd(dt, nd, xs), *x = ot_layout(t, xl), *out = NULL;
    int64_t os[8], bf[8] = {0}, idx[8];
    double *h = ot_host(x), *ref, cv = value;
    char what[96];

    /* The constant as the dtype holds it. */
    if (dt == KEEL_BOOL)
        cv = value != 0;
    else if (dt != KEEL_F32 && dt != KEEL_F64 && dt != KEEL_F16 &&
             dt != KEEL_BF16)
        cv = dt == KEEL_U8   ? fmin(fmax(trunc(value), 0), 255)
             : dt == KEEL_I8 ? fmin(fmax(trunc(value), -128), 127)
                             : trunc(value); /* saturating, as kstore */
    else
        cv = ot_round(value, dt);
    for (int d = 0; d < nd; d++) {
        bf[d] = 2 * d < np ? pad[2 * d] : 0;
        os[d] = xs[d] + bf[d] + (2 * d + 1 < np ? pad[2 * d + 1] : 0);
    }
    ref = malloc((size_t)(numel(nd, os) + 1) * sizeof(double));
    for (int64_t i = 0; i < numel(nd, os); i++) {
        bool inside = true;
        unravel(i, nd, os, idx);
        for (int d = 0; d < nd; d++) {
            int64_t p = idx[d] - bf[d], n = xs[d];
            if (p < 0 || p >= n) {
                if (!strcmp(mode, "constant"))
                    inside = false;
                else if (!strcmp(mode, "replicate"))
                    p = p < 0 ? 0 : n - 1;
                else
                    p = p < 0 ? -p : 2 * (n - 1) - p;
            }
            idx[d] = p;
        }
        ref[i] = inside ? h[ravel(nd, xs, idx)] : cv;
    }
    snprintf(what, sizeof(what), "pad %s %s", dn(dt), mode);
    OK(keel_pad(x, np, pad, mode, value, &out));
    check_exact(what, out, dt, nd, os, ref);
    keel_tensor_free(out);
    keel_tensor_free(t);
    keel_tensor_free(x);
    free(h);
    free(ref);
}

static void test_pad(void)
{
    static const char *modes[3] = {"constant", "reflect", "replicate"};
    int64_t s[3] = {3, 4, 5}, s2[2] = {4, 3};

    for (int k = 0; k < 9; k++) {
        keel_dtype dt = ot_all_dtypes[k];
        for (int m = 0; m < 3; m++) {
            pad_case(dt, 3, s, 6, (int64_t[]){1, 2, 0, 3, 4, 1}, modes[m],
                     7.5, OT_CONTIG);
            pad_case(dt, 2, s2, 4, (int64_t[]){2, 1, 2, 2}, modes[m], -3,
                     OT_TRANSPOSED);
            /* Only the first axis padded (keel's first-axis convention). */
            pad_case(dt, 3, s, 2, (int64_t[]){2, 1}, modes[m], 1,
                     OT_STRIDED);
            pad_case(dt, 1, (int64_t[]){4}, 2, (int64_t[]){3, 0}, modes[m],
                     2, OT_CONTIG);
        }
        pad_case(dt, 0, NULL, 0, NULL, "constant", 1, OT_CONTIG);
        /* An empty x padded with a constant is all constant. */
        pad_case(dt, 2, (int64_t[]){0, 3}, 4, (int64_t[]){1, 1, 0, 2},
                 "constant", 5, OT_CONTIG);
    }
    /* Large: rows on the pool. */
    pad_case(KEEL_F32, 2, (int64_t[]){300, 250}, 4, (int64_t[]){3, 4, 10, 5},
             "reflect", 0, OT_TRANSPOSED);
    pad_case(KEEL_BF16, 2, (int64_t[]){300, 250}, 4, (int64_t[]){3, 4, 10, 5},
             "constant", -1.25, OT_CONTIG);
}

static void test_pad_errors(void)
{
    keel_tensor *x = rnd(KEEL_F32, 2, (int64_t[]){3, 4}), *out = NULL;
    keel_tensor *e = rnd(KEEL_F32, 2, (int64_t[]){0, 4});

    ERR(keel_pad(x, 2, (int64_t[]){1, -1}, "constant", 0, &out),
        KEEL_STATUS_INVALID_ARGUMENT, "pad", "pad[1] = -1 is negative");
    ERR(keel_pad(x, 3, (int64_t[]){1, 1, 1}, "constant", 0, &out),
        KEEL_STATUS_INVALID_ARGUMENT, "pad", "(before, after) pairs");
    ERR(keel_pad(x, 6, (int64_t[]){1, 1, 1, 1, 1, 1}, "constant", 0, &out),
        KEEL_STATUS_INVALID_ARGUMENT, "pad", "at most 2 dims");
    ERR(keel_pad(x, 4, (int64_t[]){0, 0, 4, 0}, "reflect", 0, &out),
        KEEL_STATUS_INVALID_ARGUMENT, "pad", "must be less than the size 4");
    ERR(keel_pad(x, 2, (int64_t[]){1, 3}, "reflect", 0, &out),
        KEEL_STATUS_INVALID_ARGUMENT, "pad", "reflect pad[1] = 3");
    ERR(keel_pad(x, 2, (int64_t[]){1, 1}, "circular", 0, &out),
        KEEL_STATUS_INVALID_ARGUMENT, "pad", "mode 'circular'");
    ERR(keel_pad(e, 2, (int64_t[]){1, 0}, "replicate", 0, &out),
        KEEL_STATUS_INVALID_ARGUMENT, "pad", "empty dim 0");
    CU_ASSERT_PTR_NULL(out);
    keel_tensor_free(x);
    keel_tensor_free(e);
}

/* ---- sort, argsort, topk ------------------------------------------------- */

struct pr {
    double v;
    int64_t i;
};

static int sort_desc;

/* The documented order: NaN is the largest value; ties by index. */
static int cmp_pr(const void *a, const void *b)
{
    const struct pr *p = a, *q = b;
    bool pn = isnan(p->v), qn = isnan(q->v);
    int c;

    if (pn || qn)
        c = pn == qn ? 0 : (pn ? 1 : -1);
    else
        c = p->v < q->v ? -1 : p->v > q->v;
    if (sort_desc)
        c = -c;
    if (c)
        return c;
    return p->i < q->i ? -1 : p->i > q->i;
}

static int cmp_idx(const void *a, const void *b)
{
    const struct pr *p = a, *q = b;

    return p->i < q->i ? -1 : p->i > q->i;
}

/* Reference values and indices of the first k of each row along axis. */
static void ref_sort(const double *h, int nd, const int64_t *xs, int axis,
                     bool desc, int64_t k, bool sorted, double *rv,
                     double *ri)
{
    int64_t n = nd ? xs[axis] : 1, rs[8], os[8], idx[8];
    struct pr *row = malloc((size_t)(n ? n : 1) * sizeof(*row));

    memcpy(rs, xs, sizeof(int64_t) * (size_t)nd);
    memcpy(os, xs, sizeof(int64_t) * (size_t)nd);
    if (nd) {
        rs[axis] = 1;
        os[axis] = k;
    }
    sort_desc = desc;
    for (int64_t r = 0; r < numel(nd, rs); r++) {
        unravel(r, nd, rs, idx);
        for (int64_t j = 0; j < n; j++) {
            if (nd)
                idx[axis] = j;
            row[j].v = h[ravel(nd, xs, idx)];
            row[j].i = j;
        }
        qsort(row, (size_t)n, sizeof(*row), cmp_pr);
        if (!sorted)
            qsort(row, (size_t)k, sizeof(*row), cmp_idx);
        for (int64_t j = 0; j < k; j++) {
            if (nd)
                idx[axis] = j;
            rv[ravel(nd, os, idx)] = row[j].v;
            ri[ravel(nd, os, idx)] = (double)row[j].i;
        }
    }
    free(row);
}

enum { SORT_OP, ARGSORT_OP, TOPK_OP };

static void sort_case(int op, keel_tensor *x, int axis, bool desc, int64_t k,
                      bool sorted)
{
    keel_dtype dt = keel_tensor_dtype(x);
    int nd = keel_tensor_ndim(x);
    const int64_t *xs = keel_tensor_shape(x);
    int a = nd ? (axis < 0 ? axis + nd : axis) : 0;
    int64_t os[8], on;
    keel_tensor *v = NULL, *i = NULL;
    double *h = ot_host(x), *rv, *ri;
    char what[128];

    memcpy(os, xs, sizeof(int64_t) * (size_t)nd);
    if (op != TOPK_OP)
        k = nd ? xs[a] : 1;
    if (nd)
        os[a] = k;
    on = numel(nd, os);
    rv = malloc((size_t)(on + 1) * sizeof(double));
    ri = malloc((size_t)(on + 1) * sizeof(double));
    ref_sort(h, nd, xs, a, desc, k, sorted, rv, ri);
    snprintf(what, sizeof(what), "%s %s axis %d desc %d k %lld sorted %d",
             op == SORT_OP ? "sort" : op == ARGSORT_OP ? "argsort" : "topk",
             dn(dt), axis, (int)desc, (long long)k, (int)sorted);
    if (op == SORT_OP) {
        OK(keel_sort(x, axis, desc, &v, &i));
    } else if (op == ARGSORT_OP) {
        OK(keel_argsort(x, axis, desc, &i));
    } else {
        OK(keel_topk(x, k, axis, desc, sorted, &v, &i));
    }
    if (v)
        check_exact(what, v, dt, nd, os, rv);
    check_exact(what, i, KEEL_I64, nd, os, ri);
    keel_tensor_free(v);
    keel_tensor_free(i);
    free(h);
    free(rv);
    free(ri);
}

/* Values with many ties (small integers). */
static keel_tensor *ties(keel_dtype dt, int nd, const int64_t *shape)
{
    int64_t n = numel(nd, shape);
    double *v = malloc((size_t)(n ? n : 1) * sizeof(double));
    keel_tensor *t;

    for (int64_t i = 0; i < n; i++)
        v[i] = (double)((i * 7 + i / 5) % 4) + (dt == KEEL_U8 ? 0 : -1);
    t = ot_from(dt, nd, shape, v);
    free(v);
    return t;
}

static void test_sort(void)
{
    int64_t s[2] = {4, 9}, s3[3] = {3, 5, 2};

    for (int k = 0; k < 8; k++) {
        keel_dtype dt = numeric_dtypes[k];
        keel_tensor *x = rnd(dt, 2, s), *t = ties(dt, 3, s3);
        keel_tensor *xt = ot_layout(x, OT_TRANSPOSED);
        keel_tensor *ts = ot_layout(t, OT_STRIDED);
        for (int desc = 0; desc < 2; desc++) {
            sort_case(SORT_OP, x, -1, desc, 0, true);
            sort_case(SORT_OP, xt, 0, desc, 0, true);
            sort_case(SORT_OP, ts, 1, desc, 0, true); /* stable on ties */
            sort_case(ARGSORT_OP, t, -1, desc, 0, true);
            sort_case(ARGSORT_OP, xt, 1, desc, 0, true);
            sort_case(ARGSORT_OP, ts, 0, desc, 0, true);
        }
        keel_tensor_free(x);
        keel_tensor_free(t);
        keel_tensor_free(xt);
        keel_tensor_free(ts);
    }
}

static void test_sort_stable_ties(void)
{
    /* Explicit: equal keys keep their order, ascending and descending. */
    double v[8] = {2, 1, 2, 0, 1, 2, 0, 1};
    double ia[8] = {3, 6, 1, 4, 7, 0, 2, 5}, id[8] = {0, 2, 5, 1, 4, 7, 3, 6};
    double va[8] = {0, 0, 1, 1, 1, 2, 2, 2}, vd[8] = {2, 2, 2, 1, 1, 1, 0, 0};
    int64_t s[1] = {8};
    keel_tensor *x = ot_from(KEEL_I32, 1, s, v), *vo = NULL, *io = NULL;

    OK(keel_sort(x, 0, false, &vo, &io));
    check_exact("sort ties asc values", vo, KEEL_I32, 1, s, va);
    check_exact("sort ties asc indices", io, KEEL_I64, 1, s, ia);
    keel_tensor_free(vo);
    keel_tensor_free(io);
    OK(keel_sort(x, 0, true, &vo, &io));
    check_exact("sort ties desc values", vo, KEEL_I32, 1, s, vd);
    check_exact("sort ties desc indices", io, KEEL_I64, 1, s, id);
    keel_tensor_free(vo);
    keel_tensor_free(io);
    keel_tensor_free(x);
}

static void test_sort_nan_special(void)
{
    /* NaN last ascending, first descending; -0 and 0 tie. */
    double v[7] = {1, NAN, -INFINITY, 0, NAN, -0.0, INFINITY};
    double ia[7] = {2, 3, 5, 0, 6, 1, 4}, id[7] = {1, 4, 6, 0, 3, 5, 2};
    int64_t s[1] = {7};

    for (int k = 0; k < 4; k++) {
        keel_tensor *x = ot_from(ot_float_dtypes[k], 1, s, v), *io = NULL;
        OK(keel_argsort(x, -1, false, &io));
        check_exact("argsort nan asc", io, KEEL_I64, 1, s, ia);
        keel_tensor_free(io);
        OK(keel_argsort(x, -1, true, &io));
        check_exact("argsort nan desc", io, KEEL_I64, 1, s, id);
        keel_tensor_free(io);
        sort_case(SORT_OP, x, 0, false, 0, true);
        sort_case(TOPK_OP, x, 0, true, 3, true);
        sort_case(TOPK_OP, x, 0, false, 2, false);
        keel_tensor_free(x);
    }
}

static void test_sort_shapes(void)
{
    double one = 4.5;
    keel_tensor *s = ot_from(KEEL_F32, 0, NULL, &one);
    keel_tensor *e = rnd(KEEL_I32, 2, (int64_t[]){3, 0});
    keel_tensor *e2 = rnd(KEEL_F64, 2, (int64_t[]){0, 3});
    keel_tensor *c = rnd(KEEL_F16, 3, (int64_t[]){2, 1, 3});

    sort_case(SORT_OP, s, -1, false, 0, true); /* 0-d: itself, index 0 */
    sort_case(ARGSORT_OP, s, 0, true, 0, true);
    sort_case(TOPK_OP, s, -1, true, 1, true);
    sort_case(SORT_OP, e, -1, false, 0, true);
    sort_case(SORT_OP, e2, 1, true, 0, true);
    sort_case(TOPK_OP, e, 1, true, 0, true);
    sort_case(TOPK_OP, e2, 0, true, 0, true);
    sort_case(SORT_OP, c, 1, false, 0, true); /* size-1 axis */
    sort_case(TOPK_OP, c, 1, true, 1, true);
    keel_tensor_free(s);
    keel_tensor_free(e);
    keel_tensor_free(e2);
    keel_tensor_free(c);
}

static void test_sort_large(void)
{
    /* Long rows (heap scratch), many rows (on the pool). */
    keel_tensor *a = ot_rand(KEEL_F32, 2, (int64_t[]){40, 2000}, -1e3, 1e3);
    keel_tensor *b = ties(KEEL_I64, 2, (int64_t[]){3000, 30});
    keel_tensor *c = ot_rand(KEEL_BF16, 2, (int64_t[]){600, 120}, -5, 5);

    sort_case(SORT_OP, a, -1, false, 0, true);
    sort_case(ARGSORT_OP, b, 1, true, 0, true);
    sort_case(SORT_OP, c, 0, true, 0, true);
    sort_case(TOPK_OP, a, -1, true, 50, true);   /* heap selection */
    sort_case(TOPK_OP, a, 1, false, 1500, false); /* full sort */
    sort_case(TOPK_OP, c, 0, true, 10, false);
    keel_tensor_free(a);
    keel_tensor_free(b);
    keel_tensor_free(c);
}

static void test_topk(void)
{
    int64_t s[2] = {3, 40}, s3[3] = {2, 17, 3};

    for (int k = 0; k < 8; k++) {
        keel_dtype dt = numeric_dtypes[k];
        keel_tensor *x = rnd(dt, 2, s), *t = ties(dt, 3, s3);
        keel_tensor *xt = ot_layout(x, OT_TRANSPOSED);
        for (int largest = 0; largest < 2; largest++)
            for (int sorted = 0; sorted < 2; sorted++) {
                sort_case(TOPK_OP, x, -1, largest, 4, sorted); /* heap */
                sort_case(TOPK_OP, xt, 1, largest, 25, sorted); /* sort */
                sort_case(TOPK_OP, t, 1, largest, 5, sorted);  /* ties */
                sort_case(TOPK_OP, t, 0, largest, 2, sorted);
                sort_case(TOPK_OP, x, 0, largest, 3, sorted);  /* k = n */
            }
        keel_tensor_free(x);
        keel_tensor_free(t);
        keel_tensor_free(xt);
    }
}

static void test_topk_ties_explicit(void)
{
    double v[6] = {3, 5, 3, 5, 1, 3};
    double vl[3] = {5, 5, 3}, il[3] = {1, 3, 0}, vs[3] = {1, 3, 3},
           is[3] = {4, 0, 2}, iu[3] = {0, 1, 3};
    int64_t s[1] = {6}, k3[1] = {3};
    keel_tensor *x = ot_from(KEEL_F32, 1, s, v), *vo = NULL, *io = NULL;

    OK(keel_topk(x, 3, 0, true, true, &vo, &io));
    check_exact("topk largest values", vo, KEEL_F32, 1, k3, vl);
    check_exact("topk largest ties: lower index first", io, KEEL_I64, 1, k3,
                il);
    keel_tensor_free(vo);
    keel_tensor_free(io);
    OK(keel_topk(x, 3, -1, false, true, &vo, &io));
    check_exact("topk smallest values", vo, KEEL_F32, 1, k3, vs);
    check_exact("topk smallest indices", io, KEEL_I64, 1, k3, is);
    keel_tensor_free(vo);
    keel_tensor_free(io);
    /* sorted = 0: the same elements, in index order. */
    OK(keel_topk(x, 3, 0, true, false, NULL, &io));
    check_exact("topk unsorted indices", io, KEEL_I64, 1, k3, iu);
    keel_tensor_free(io);
    keel_tensor_free(x);
}

static void test_sort_errors(void)
{
    keel_tensor *x = rnd(KEEL_F32, 2, (int64_t[]){3, 4});
    keel_tensor *b = rnd(KEEL_BOOL, 1, (int64_t[]){4});
    keel_tensor *s = rnd(KEEL_F32, 0, NULL), *v = NULL, *i = NULL;

    ERR(keel_sort(x, 2, false, &v, &i), KEEL_STATUS_INVALID_ARGUMENT, "sort",
        "axis 2 is out of range");
    ERR(keel_argsort(x, -3, false, &i), KEEL_STATUS_INVALID_ARGUMENT,
        "argsort", "axis -3 is out of range");
    ERR(keel_sort(b, 0, false, &v, &i), KEEL_STATUS_NOT_SUPPORTED, "sort",
        "dtype bool is not supported");
    ERR(keel_argsort(b, 0, true, &i), KEEL_STATUS_NOT_SUPPORTED, "argsort",
        "bool");
    ERR(keel_topk(b, 1, 0, true, true, &v, &i), KEEL_STATUS_NOT_SUPPORTED,
        "topk", "bool");
    ERR(keel_topk(x, 5, -1, true, true, &v, &i),
        KEEL_STATUS_INVALID_ARGUMENT, "topk", "k = 5 is out of range");
    ERR(keel_topk(x, -1, 0, true, true, &v, &i),
        KEEL_STATUS_INVALID_ARGUMENT, "topk", "k = -1");
    ERR(keel_topk(x, 1, 2, true, true, &v, &i), KEEL_STATUS_INVALID_ARGUMENT,
        "topk", "axis 2 is out of range");
    ERR(keel_topk(s, 2, 0, true, true, &v, &i), KEEL_STATUS_INVALID_ARGUMENT,
        "topk", "k = 2");
    ERR(keel_sort(s, 1, false, &v, &i), KEEL_STATUS_INVALID_ARGUMENT, "sort",
        "0-d");
    CU_ASSERT_PTR_NULL(v);
    CU_ASSERT_PTR_NULL(i);
    keel_tensor_free(x);
    keel_tensor_free(b);
    keel_tensor_free(s);
}

/* ---- negative strides (reversed views) ----------------------------------- */

static void test_negative_strides(void)
{
    int64_t s[2] = {4, 40};
    keel_tensor *x = rnd(KEEL_F32, 2, s), *r = NULL, *out = NULL;
    keel_tensor *xs[2], *index = ix(KEEL_I64, 1, (int64_t[]){3},
                                    (int64_t[]){3, 0, 3});
    double *h, *ref;

    /* r = x[:, ::-2], shape [4, 20], stride -2 along the last axis. */
    OK(keel_slice(x, 1, -1, -100, -2, &r));
    CU_ASSERT_EQUAL_FATAL(keel_tensor_strides(r)[1], -2);
    h = ot_host(r);
    ref = malloc(4 * 40 * 2 * sizeof(double));
    xs[0] = r;
    xs[1] = r;
    OK(keel_concat(xs, 2, 1, &out));
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 40; j++)
            ref[i * 40 + j] = h[i * 20 + j % 20];
    check_exact("concat reversed", out, KEEL_F32, 2, (int64_t[]){4, 40}, ref);
    keel_tensor_free(out);
    OK(keel_gather(r, index, 0, &out));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 20; j++)
            ref[i * 20 + j] = h[(i == 1 ? 0 : 3) * 20 + j];
    check_exact("gather reversed rows", out, KEEL_F32, 2, (int64_t[]){3, 20},
                ref);
    keel_tensor_free(out);
    OK(keel_flip(r, 1, (int[]){1}, &out));
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 20; j++)
            ref[i * 20 + j] = h[i * 20 + 19 - j];
    check_exact("flip reversed", out, KEEL_F32, 2, (int64_t[]){4, 20}, ref);
    keel_tensor_free(out);
    OK(keel_pad(r, 4, (int64_t[]){0, 0, 2, 1}, "reflect", 0, &out));
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 23; j++) {
            int p = j - 2;
            p = p < 0 ? -p : p >= 20 ? 38 - p : p;
            ref[i * 23 + j] = h[i * 20 + p];
        }
    check_exact("pad reversed", out, KEEL_F32, 2, (int64_t[]){4, 23}, ref);
    keel_tensor_free(out);
    sort_case(SORT_OP, r, -1, false, 0, true);
    sort_case(TOPK_OP, r, 1, true, 2, true);
    keel_tensor_free(r);
    keel_tensor_free(x);
    keel_tensor_free(index);
    free(h);
    free(ref);
}

/* ---- main ---------------------------------------------------------------- */

int main(void)
{
    static const ot_test tests[] = {
        {"concat", test_concat},
        {"concat large", test_concat_large},
        {"concat refuses mixed dtypes", test_concat_promotion},
        {"concat empty", test_concat_empty},
        {"concat errors", test_concat_errors},
        {"stack", test_stack},
        {"stack dtype and shape errors", test_stack_promotion_errors},
        {"split", test_split},
        {"chunk", test_chunk},
        {"split errors", test_split_errors},
        {"gather and index_select", test_gather},
        {"gather large", test_gather_large},
        {"gather 0-d index", test_gather_scalar_index},
        {"gather errors", test_gather_errors},
        {"scatter", test_scatter},
        {"scatter large", test_scatter_large},
        {"scatter 0-d index, dtype check", test_scatter_scalar_index_promotion},
        {"scatter errors", test_scatter_errors},
        {"take_along_axis", test_take_along_axis},
        {"take_along_axis large, errors", test_take_along_axis_large_errors},
        {"tile", test_tile},
        {"tile errors", test_tile_errors},
        {"flip", test_flip},
        {"pad", test_pad},
        {"pad errors", test_pad_errors},
        {"sort and argsort", test_sort},
        {"sort stable ties", test_sort_stable_ties},
        {"sort NaN and specials", test_sort_nan_special},
        {"sort shapes (0-d, empty, size 1)", test_sort_shapes},
        {"sort and topk large", test_sort_large},
        {"topk", test_topk},
        {"topk ties", test_topk_ties_explicit},
        {"sort errors", test_sort_errors},
        {"negative strides", test_negative_strides},
    };

    return ot_main("manip", tests, (int)(sizeof(tests) / sizeof(tests[0])));
}
