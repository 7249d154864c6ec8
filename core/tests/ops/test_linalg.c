/*
 * Linear algebra op tests: matmul and linear against float64 references
 * computed here from host copies of the inputs (numpy semantics for
 * matmul: 1-D promotion, transposes, broadcast batch dims); fused_linear
 * against linear followed by the activation op, which it must equal bit
 * for bit (within 1 ulp for float16/bfloat16, as the catalog allows).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/autograd.h>

#include "optest.h"

/* A call fails with `status`, names the op and says `detail`. */
#define EXPECT_OP_ERROR(call, status, op, detail)                            \
    do {                                                                     \
        OT_EXPECT_ERROR(call, status, op "(");                               \
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), detail));           \
    } while (0)

static int64_t numel(int nd, const int64_t *s)
{
    int64_t n = 1;

    for (int i = 0; i < nd; i++)
        n *= s[i];
    return n;
}

/*
 * numpy matmul on row-major doubles. Writes the result shape into
 * oshape/ond and returns the values (caller frees).
 */
static double *ref_matmul(const double *x, int xn, const int64_t *xs,
                          const double *y, int yn, const int64_t *ys, bool tx,
                          bool ty, int *ond, int64_t *oshape)
{
    int64_t M, K, N, xr, xc, yr, yc; /* element strides of the matrices */
    int xb = xn > 1 ? xn - 2 : 0, yb = yn > 1 ? yn - 2 : 0;
    int nb = xb > yb ? xb : yb, nd = 0;
    int64_t bshape[8], xbs[8] = {0}, ybs[8] = {0}, batches = 1;
    double *out;

    if (xn == 1) {
        M = 1, K = xs[0], xr = 0, xc = 1;
    } else {
        int64_t r = xs[xn - 2], c = xs[xn - 1];
        M = tx ? c : r;
        K = tx ? r : c;
        xr = tx ? 1 : c;
        xc = tx ? c : 1;
    }
    if (yn == 1) {
        N = 1, yr = 1, yc = 0;
    } else {
        int64_t r = ys[yn - 2], c = ys[yn - 1];
        N = ty ? r : c;
        yr = ty ? 1 : c;
        yc = ty ? c : 1;
    }
    /* batch dims, right aligned; strides in the row-major inputs */
    {
        int64_t sx = M * K, sy = K * N;
        for (int d = nb - 1; d >= 0; d--) {
            int i = d - (nb - xb), j = d - (nb - yb);
            int64_t a = i >= 0 ? xs[i] : 1, b = j >= 0 ? ys[j] : 1;
            bshape[d] = a == 1 ? b : a;
            xbs[d] = a == 1 ? 0 : sx;
            ybs[d] = b == 1 ? 0 : sy;
            sx *= a;
            sy *= b;
            batches *= bshape[d];
        }
    }
    for (int d = 0; d < nb; d++)
        oshape[nd++] = bshape[d];
    if (xn > 1)
        oshape[nd++] = M;
    if (yn > 1)
        oshape[nd++] = N;
    *ond = nd;
    out = calloc((size_t)(batches * M * N + 1), sizeof(double));
    for (int64_t b = 0; b < batches; b++) {
        int64_t ox = 0, oy = 0, rem = b;
        for (int d = nb - 1; d >= 0; d--) {
            int64_t i = rem % bshape[d];
            rem /= bshape[d];
            ox += i * xbs[d];
            oy += i * ybs[d];
        }
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double acc = 0;
                for (int64_t k = 0; k < K; k++)
                    acc += x[ox + m * xr + k * xc] * y[oy + k * yr + n * yc];
                out[(b * M + m) * N + n] = acc;
            }
    }
    return out;
}

/* Run keel_matmul on x, y and compare with the reference. */
static void check_matmul(const char *what, keel_tensor *x, keel_tensor *y,
                         bool tx, bool ty, keel_dtype dt)
{
    keel_tensor *z = NULL;
    double *xv = ot_host(x), *yv = ot_host(y), *ref;
    int64_t oshape[8];
    int ond;

    CU_ASSERT_PTR_NOT_NULL_FATAL(xv);
    CU_ASSERT_PTR_NOT_NULL_FATAL(yv);
    ref = ref_matmul(xv, keel_tensor_ndim(x), keel_tensor_shape(x), yv,
                     keel_tensor_ndim(y), keel_tensor_shape(y), tx, ty, &ond,
                     oshape);
    if (keel_matmul(x, y, tx, ty, &z) != KEEL_STATUS_OK)
        fprintf(stderr, "\n  %s: %s\n", what, keel_last_error());
    CU_ASSERT_PTR_NOT_NULL_FATAL(z);
    CU_ASSERT_EQUAL(keel_tensor_dtype(z), dt);
    if (ot_check_shape(what, z, ond, oshape))
        ot_check(what, z, ref, dt);
    keel_tensor_free(z);
    free(xv);
    free(yv);
    free(ref);
}

/* Integer values in [lo, hi) stored as dt: products and sums of the large
 * tests are then exact in float32, so the per-dtype tolerances apply to
 * long reductions too. */
static keel_tensor *rand_ints(keel_dtype dt, int nd, const int64_t *shape,
                              int lo, int hi)
{
    keel_tensor *i = ot_rand(KEEL_I32, nd, shape, lo, hi), *t;
    double *v = ot_host(i);

    t = ot_from(dt, nd, shape, v);
    free(v);
    keel_tensor_free(i);
    return t;
}

static void run_matmul_ints(const char *what, keel_dtype dt, int xn,
                            const int64_t *xs, int yn, const int64_t *ys,
                            bool tx, bool ty)
{
    keel_tensor *x = rand_ints(dt, xn, xs, -4, 5);
    keel_tensor *y = rand_ints(dt, yn, ys, -4, 5);

    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    CU_ASSERT_PTR_NOT_NULL_FATAL(y);
    check_matmul(what, x, y, tx, ty, dt);
    keel_tensor_free(x);
    keel_tensor_free(y);
}

static void run_matmul(const char *what, keel_dtype dt, int xn,
                       const int64_t *xs, int yn, const int64_t *ys, bool tx,
                       bool ty)
{
    keel_tensor *x = ot_rand(dt, xn, xs, -1, 1);
    keel_tensor *y = ot_rand(dt, yn, ys, -1, 1);

    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    CU_ASSERT_PTR_NOT_NULL_FATAL(y);
    check_matmul(what, x, y, tx, ty, dt);
    keel_tensor_free(x);
    keel_tensor_free(y);
}

static void test_matmul_2d_all_dtypes(void)
{
    for (int k = 0; k < 4; k++) {
        keel_dtype dt = ot_float_dtypes[k];
        run_matmul("2-D", dt, 2, (int64_t[]){5, 7}, 2, (int64_t[]){7, 3},
                   false, false);
        run_matmul("row x col", dt, 2, (int64_t[]){1, 9}, 2,
                   (int64_t[]){9, 1}, false, false);
        run_matmul("size-1 K", dt, 2, (int64_t[]){4, 1}, 2,
                   (int64_t[]){1, 6}, false, false);
    }
}

static void test_matmul_exact_values(void)
{
    /* [[1, 2], [3, 4]] @ [[5, 6], [7, 8]] = [[19, 22], [43, 50]] */
    double a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
    double ab[4] = {19, 22, 43, 50}, atb[4] = {26, 30, 38, 44};
    double abt[4] = {17, 23, 39, 53};
    int64_t s[2] = {2, 2};

    for (int k = 0; k < 4; k++) {
        keel_dtype dt = ot_float_dtypes[k];
        keel_tensor *x = ot_from(dt, 2, s, a), *y = ot_from(dt, 2, s, b);
        keel_tensor *z = NULL;
        CU_ASSERT_EQUAL_FATAL(keel_matmul(x, y, false, false, &z),
                              KEEL_STATUS_OK);
        ot_check("exact", z, ab, dt);
        keel_tensor_free(z);
        CU_ASSERT_EQUAL_FATAL(keel_matmul(x, y, true, false, &z),
                              KEEL_STATUS_OK);
        ot_check("exact x^T", z, atb, dt);
        keel_tensor_free(z);
        CU_ASSERT_EQUAL_FATAL(keel_matmul(x, y, false, true, &z),
                              KEEL_STATUS_OK);
        ot_check("exact y^T", z, abt, dt);
        keel_tensor_free(z);
        keel_tensor_free(x);
        keel_tensor_free(y);
    }
}

static void test_matmul_transpose_flags(void)
{
    for (int k = 0; k < 4; k++) {
        keel_dtype dt = ot_float_dtypes[k];
        run_matmul("tx", dt, 2, (int64_t[]){6, 4}, 2, (int64_t[]){6, 5},
                   true, false);
        run_matmul("ty", dt, 2, (int64_t[]){4, 6}, 2, (int64_t[]){5, 6},
                   false, true);
        run_matmul("tx ty", dt, 2, (int64_t[]){6, 4}, 2, (int64_t[]){5, 6},
                   true, true);
        run_matmul("batched tx ty", dt, 3, (int64_t[]){3, 6, 4}, 3,
                   (int64_t[]){3, 5, 6}, true, true);
    }
    /* transpose of a 1-D operand is ignored */
    run_matmul("1-D tx", KEEL_F32, 1, (int64_t[]){6}, 2, (int64_t[]){6, 3},
               true, false);
    run_matmul("1-D ty", KEEL_F64, 2, (int64_t[]){3, 6}, 1, (int64_t[]){6},
               false, true);
}

static void test_matmul_1d(void)
{
    for (int k = 0; k < 4; k++) {
        keel_dtype dt = ot_float_dtypes[k];
        run_matmul("vec @ mat", dt, 1, (int64_t[]){5}, 2,
                   (int64_t[]){5, 3}, false, false);
        run_matmul("mat @ vec", dt, 2, (int64_t[]){4, 5}, 1,
                   (int64_t[]){5}, false, false);
        run_matmul("dot", dt, 1, (int64_t[]){7}, 1, (int64_t[]){7}, false,
                   false);
        run_matmul("vec @ batch", dt, 1, (int64_t[]){5}, 3,
                   (int64_t[]){2, 5, 3}, false, false);
        run_matmul("batch @ vec", dt, 4, (int64_t[]){2, 3, 4, 5}, 1,
                   (int64_t[]){5}, false, false);
    }
    {
        /* the dot product is a 0-d tensor */
        double a[3] = {1, 2, 3}, b[3] = {4, -5, 6}, got = 0;
        keel_tensor *x = ot_from(KEEL_F32, 1, (int64_t[]){3}, a);
        keel_tensor *y = ot_from(KEEL_F32, 1, (int64_t[]){3}, b), *z = NULL;
        CU_ASSERT_EQUAL_FATAL(keel_matmul(x, y, false, false, &z),
                              KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(keel_tensor_ndim(z), 0);
        CU_ASSERT_EQUAL(keel_tensor_item(z, 0, &got), KEEL_STATUS_OK);
        CU_ASSERT_DOUBLE_EQUAL(got, 12.0, 0);
        keel_tensor_free(x);
        keel_tensor_free(y);
        keel_tensor_free(z);
    }
}

static void test_matmul_batched_broadcast(void)
{
    for (int k = 0; k < 4; k++) {
        keel_dtype dt = ot_float_dtypes[k];
        run_matmul("batched", dt, 3, (int64_t[]){4, 3, 5}, 3,
                   (int64_t[]){4, 5, 2}, false, false);
        run_matmul("broadcast both", dt, 4, (int64_t[]){2, 1, 4, 5}, 3,
                   (int64_t[]){3, 5, 6}, false, false);
        run_matmul("2-D x, batched y", dt, 2, (int64_t[]){4, 5}, 3,
                   (int64_t[]){3, 5, 6}, false, false);
        run_matmul("batched x, 2-D y (merged)", dt, 3, (int64_t[]){3, 4, 5},
                   2, (int64_t[]){5, 6}, false, false);
        run_matmul("size-1 batch", dt, 3, (int64_t[]){1, 4, 5}, 4,
                   (int64_t[]){2, 1, 5, 3}, false, false);
    }
}

/* Same values, other layouts: column-major operands take the BLAS
 * transpose flag, strided ones are packed. */
static void test_matmul_noncontiguous(void)
{
    for (int k = 0; k < 4; k++) {
        keel_dtype dt = ot_float_dtypes[k];
        keel_tensor *x = ot_rand(dt, 2, (int64_t[]){6, 5}, -1, 1);
        keel_tensor *y = ot_rand(dt, 2, (int64_t[]){5, 4}, -1, 1);
        keel_tensor *xb = ot_rand(dt, 3, (int64_t[]){3, 6, 5}, -1, 1);
        keel_tensor *yb = ot_rand(dt, 3, (int64_t[]){3, 5, 4}, -1, 1);
        keel_tensor *xt = ot_layout(x, OT_TRANSPOSED);
        keel_tensor *ys = ot_layout(y, OT_STRIDED);
        keel_tensor *xbt = ot_layout(xb, OT_TRANSPOSED);
        keel_tensor *ybs = ot_layout(yb, OT_STRIDED);
        keel_tensor *ybT = NULL, *xbT = NULL;

        CU_ASSERT_FALSE(keel_tensor_is_contiguous(xt));
        CU_ASSERT_FALSE(keel_tensor_is_contiguous(ys));
        check_matmul("col-major x", xt, y, false, false, dt);
        check_matmul("strided y", x, ys, false, false, dt);
        check_matmul("col-major x, strided y", xt, ys, false, false, dt);
        check_matmul("reversed-axes batch x", xbt, yb, false, false, dt);
        check_matmul("strided batch y", xb, ybs, false, false, dt);
        /* transposed views of contiguous batches: col-major per batch */
        CU_ASSERT_EQUAL_FATAL(keel_transpose(yb, 1, 2, &ybT), KEEL_STATUS_OK);
        CU_ASSERT_EQUAL_FATAL(keel_transpose(xb, 1, 2, &xbT), KEEL_STATUS_OK);
        check_matmul("transposed view y, ty", xb, ybT, false, true, dt);
        check_matmul("transposed view x, tx", xbT, yb, true, false, dt);
        check_matmul("transposed view y", xbT, xb, false, false, dt);
        keel_tensor_free(x);
        keel_tensor_free(y);
        keel_tensor_free(xb);
        keel_tensor_free(yb);
        keel_tensor_free(xt);
        keel_tensor_free(ys);
        keel_tensor_free(xbt);
        keel_tensor_free(ybs);
        keel_tensor_free(ybT);
        keel_tensor_free(xbT);
    }
}

static void test_matmul_empty(void)
{
    for (int k = 0; k < 4; k++) {
        keel_dtype dt = ot_float_dtypes[k];
        keel_tensor *x = ot_rand(dt, 2, (int64_t[]){3, 0}, -1, 1);
        keel_tensor *y = ot_rand(dt, 2, (int64_t[]){0, 4}, -1, 1);
        keel_tensor *z = NULL;
        double zeros[12] = {0};

        /* K = 0: a [3, 4] of zeros */
        CU_ASSERT_EQUAL_FATAL(keel_matmul(x, y, false, false, &z),
                              KEEL_STATUS_OK);
        if (ot_check_shape("K=0", z, 2, (int64_t[]){3, 4}))
            ot_check("K=0", z, zeros, dt);
        keel_tensor_free(z);
        keel_tensor_free(x);
        keel_tensor_free(y);
        run_matmul("M=0", dt, 2, (int64_t[]){0, 5}, 2, (int64_t[]){5, 4},
                   false, false);
        run_matmul("N=0", dt, 2, (int64_t[]){3, 5}, 2, (int64_t[]){5, 0},
                   false, false);
        run_matmul("batch 0", dt, 3, (int64_t[]){0, 3, 5}, 2,
                   (int64_t[]){5, 4}, false, false);
        run_matmul("batched K=0", dt, 3, (int64_t[]){2, 3, 0}, 3,
                   (int64_t[]){2, 0, 4}, false, false);
    }
}

/* Large enough for OpenBLAS threads, many small batches over the pool,
 * and > 65536 output elements converted from f32 in parallel. */
static void test_matmul_large(void)
{
    run_matmul_ints("big f32", KEEL_F32, 2, (int64_t[]){160, 200}, 2,
                    (int64_t[]){200, 420}, false, false);
    run_matmul_ints("big f32 ty", KEEL_F32, 2, (int64_t[]){150, 170}, 2,
                    (int64_t[]){190, 170}, false, true);
    run_matmul("big f64 tx", KEEL_F64, 2, (int64_t[]){130, 150}, 2,
               (int64_t[]){130, 170}, true, false);
    run_matmul("many small batches", KEEL_F32, 3, (int64_t[]){96, 12, 10}, 3,
               (int64_t[]){96, 10, 9}, false, false);
    run_matmul("many small batches f16", KEEL_F16, 3,
               (int64_t[]){40, 12, 10}, 3, (int64_t[]){40, 9, 10}, false,
               true);
    run_matmul("big bf16", KEEL_BF16, 2, (int64_t[]){260, 64}, 2,
               (int64_t[]){64, 270}, false, false);
}

static void test_matmul_mixed_dtypes(void)
{
    /* float32 @ float64 promotes to float64 */
    keel_tensor *x = ot_rand(KEEL_F32, 2, (int64_t[]){3, 4}, -1, 1);
    keel_tensor *y = ot_rand(KEEL_F64, 2, (int64_t[]){4, 2}, -1, 1);

    check_matmul("f32 @ f64", x, y, false, false, KEEL_F64);
    keel_tensor_free(x);
    keel_tensor_free(y);
}

static void test_matmul_errors(void)
{
    keel_tensor *a = ot_rand(KEEL_F32, 2, (int64_t[]){3, 4}, -1, 1);
    keel_tensor *b = ot_rand(KEEL_F32, 2, (int64_t[]){5, 2}, -1, 1);
    keel_tensor *c = ot_rand(KEEL_F32, 3, (int64_t[]){2, 4, 2}, -1, 1);
    keel_tensor *d = ot_rand(KEEL_F32, 3, (int64_t[]){3, 3, 4}, -1, 1);
    keel_tensor *i = ot_rand(KEEL_I32, 2, (int64_t[]){4, 2}, 0, 5);
    keel_tensor *s = ot_rand(KEEL_F32, 0, NULL, -1, 1), *z = NULL;

    EXPECT_OP_ERROR(keel_matmul(a, b, false, false, &z),
                    KEEL_STATUS_INVALID_ARGUMENT, "matmul",
                    "inner dimensions differ");
    EXPECT_OP_ERROR(keel_matmul(a, a, false, false, &z),
                    KEEL_STATUS_INVALID_ARGUMENT, "matmul",
                    "inner dimensions differ");
    EXPECT_OP_ERROR(keel_matmul(d, c, false, false, &z),
                    KEEL_STATUS_INVALID_ARGUMENT, "matmul",
                    "cannot be broadcast");
    EXPECT_OP_ERROR(keel_matmul(a, i, false, false, &z),
                    KEEL_STATUS_NOT_SUPPORTED, "matmul", "int32");
    EXPECT_OP_ERROR(keel_matmul(s, a, false, false, &z),
                    KEEL_STATUS_INVALID_ARGUMENT, "matmul",
                    "at least 1 dimension");
    {
        /* attribute of the wrong type, and an unknown one */
        keel_tensor *in[2] = {a, c};
        keel_attr bad = keel_attr_str("transpose_x", "yes");
        keel_attr unk = keel_attr_bool("adjoint", true);
        int n = 0;
        EXPECT_OP_ERROR(keel_op_run(KEEL_OP_MATMUL, in, 2, &bad, 1, &z, 1, &n),
                        KEEL_STATUS_INVALID_ARGUMENT, "matmul",
                        "transpose_x");
        EXPECT_OP_ERROR(keel_op_run(KEEL_OP_MATMUL, in, 2, &unk, 1, &z, 1, &n),
                        KEEL_STATUS_INVALID_ARGUMENT, "matmul", "adjoint");
    }
    CU_ASSERT_PTR_NULL(z);
    keel_tensor_free(a);
    keel_tensor_free(b);
    keel_tensor_free(c);
    keel_tensor_free(d);
    keel_tensor_free(i);
    keel_tensor_free(s);
}

/* ---- linear -------------------------------------------------------------- */

static void check_linear(const char *what, keel_tensor *x, keel_tensor *w,
                         keel_tensor *b, keel_dtype dt)
{
    int nd = keel_tensor_ndim(x);
    const int64_t *xs = keel_tensor_shape(x);
    int64_t in = keel_tensor_shape(w)[0], out = keel_tensor_shape(w)[1];
    int64_t rows = numel(nd - 1, xs), oshape[8];
    double *xv = ot_host(x), *wv = ot_host(w), *bv = b ? ot_host(b) : NULL;
    double *ref = calloc((size_t)(rows * out + 1), sizeof(double));
    keel_tensor *z = NULL;

    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < out; o++) {
            double acc = bv ? bv[o] : 0;
            for (int64_t k = 0; k < in; k++)
                acc += xv[r * in + k] * wv[k * out + o];
            ref[r * out + o] = acc;
        }
    memcpy(oshape, xs, sizeof(int64_t) * (size_t)nd);
    oshape[nd - 1] = out;
    CU_ASSERT_EQUAL_FATAL(keel_linear(x, w, b, &z), KEEL_STATUS_OK);
    if (ot_check_shape(what, z, nd, oshape))
        ot_check(what, z, ref, dt);
    keel_tensor_free(z);
    free(xv);
    free(wv);
    free(bv);
    free(ref);
}

static void run_linear(const char *what, keel_dtype dt, int nd,
                       const int64_t *xs, int64_t out, bool bias)
{
    keel_tensor *x = ot_rand(dt, nd, xs, -1, 1);
    keel_tensor *w = ot_rand(dt, 2, (int64_t[]){xs[nd - 1], out}, -1, 1);
    keel_tensor *b = bias ? ot_rand(dt, 1, &out, -1, 1) : NULL;

    check_linear(what, x, w, b, dt);
    keel_tensor_free(x);
    keel_tensor_free(w);
    keel_tensor_free(b);
}

static void test_linear_dtypes(void)
{
    for (int k = 0; k < 4; k++) {
        keel_dtype dt = ot_float_dtypes[k];
        run_linear("bias", dt, 2, (int64_t[]){4, 6}, 5, true);
        run_linear("no bias", dt, 2, (int64_t[]){4, 6}, 5, false);
        run_linear("1-D x", dt, 1, (int64_t[]){6}, 3, true);
        run_linear("3-D x", dt, 3, (int64_t[]){2, 3, 6}, 4, true);
        run_linear("size-1 dims", dt, 3, (int64_t[]){1, 1, 6}, 1, true);
        run_linear("in = 0 gives the bias", dt, 2, (int64_t[]){3, 0}, 4,
                   true);
        run_linear("no rows", dt, 2, (int64_t[]){0, 6}, 4, true);
    }
}

static void test_linear_exact(void)
{
    double xv[2] = {1, 2}, wv[6] = {1, 0, -1, 2, 3, 4}, bv[3] = {10, 20, 30};
    double want[3] = {15, 26, 37};
    keel_tensor *x = ot_from(KEEL_F32, 1, (int64_t[]){2}, xv);
    keel_tensor *w = ot_from(KEEL_F32, 2, (int64_t[]){2, 3}, wv);
    keel_tensor *b = ot_from(KEEL_F32, 1, (int64_t[]){3}, bv), *z = NULL;

    CU_ASSERT_EQUAL_FATAL(keel_linear(x, w, b, &z), KEEL_STATUS_OK);
    ot_check("linear exact", z, want, KEEL_F32);
    keel_tensor_free(x);
    keel_tensor_free(w);
    keel_tensor_free(b);
    keel_tensor_free(z);
}

static void test_linear_noncontiguous(void)
{
    for (int k = 0; k < 4; k++) {
        keel_dtype dt = ot_float_dtypes[k];
        keel_tensor *x = ot_rand(dt, 3, (int64_t[]){2, 3, 6}, -1, 1);
        keel_tensor *w = ot_rand(dt, 2, (int64_t[]){6, 5}, -1, 1);
        keel_tensor *b = ot_rand(dt, 1, (int64_t[]){5}, -1, 1);
        keel_tensor *xt = ot_layout(x, OT_TRANSPOSED);
        keel_tensor *xs = ot_layout(x, OT_STRIDED);
        keel_tensor *wt = ot_layout(w, OT_TRANSPOSED);
        keel_tensor *bs = ot_layout(b, OT_STRIDED);

        check_linear("reversed-axes x", xt, w, b, dt);
        check_linear("strided x", xs, w, b, dt);
        check_linear("col-major weight", x, wt, b, dt);
        check_linear("strided bias", x, w, bs, dt);
        check_linear("all strided", xs, wt, bs, dt);
        keel_tensor_free(x);
        keel_tensor_free(w);
        keel_tensor_free(b);
        keel_tensor_free(xt);
        keel_tensor_free(xs);
        keel_tensor_free(wt);
        keel_tensor_free(bs);
    }
}

static void test_linear_large(void)
{
    keel_tensor *x = rand_ints(KEEL_F32, 3, (int64_t[]){8, 40, 96}, -4, 5);
    keel_tensor *w = rand_ints(KEEL_F32, 2, (int64_t[]){96, 300}, -4, 5);
    keel_tensor *b = rand_ints(KEEL_F32, 1, (int64_t[]){300}, -4, 5);

    check_linear("big f32", x, w, b, KEEL_F32);
    keel_tensor_free(x);
    keel_tensor_free(w);
    keel_tensor_free(b);
    run_linear("big f16", KEEL_F16, 2, (int64_t[]){300, 32}, 240, true);
}

static void test_linear_errors(void)
{
    keel_tensor *x = ot_rand(KEEL_F32, 2, (int64_t[]){3, 4}, -1, 1);
    keel_tensor *w = ot_rand(KEEL_F32, 2, (int64_t[]){5, 2}, -1, 1);
    keel_tensor *w3 = ot_rand(KEEL_F32, 3, (int64_t[]){1, 4, 2}, -1, 1);
    keel_tensor *wok = ot_rand(KEEL_F32, 2, (int64_t[]){4, 2}, -1, 1);
    keel_tensor *b = ot_rand(KEEL_F32, 1, (int64_t[]){3}, -1, 1);
    keel_tensor *xi = ot_rand(KEEL_I64, 2, (int64_t[]){3, 4}, 0, 4);
    keel_tensor *s = ot_rand(KEEL_F32, 0, NULL, -1, 1), *z = NULL;

    EXPECT_OP_ERROR(keel_linear(x, w, NULL, &z),
                    KEEL_STATUS_INVALID_ARGUMENT, "linear",
                    "input features");
    EXPECT_OP_ERROR(keel_linear(x, w3, NULL, &z),
                    KEEL_STATUS_INVALID_ARGUMENT, "linear", "2-D");
    EXPECT_OP_ERROR(keel_linear(x, wok, b, &z),
                    KEEL_STATUS_INVALID_ARGUMENT, "linear", "bias");
    EXPECT_OP_ERROR(keel_linear(xi, wok, NULL, &z),
                    KEEL_STATUS_NOT_SUPPORTED, "linear", "int64");
    EXPECT_OP_ERROR(keel_linear(s, wok, NULL, &z),
                    KEEL_STATUS_INVALID_ARGUMENT, "linear",
                    "at least 1 dimension");
    {
        keel_tensor *in[2] = {x, wok};
        keel_attr unk = keel_attr_bool("transpose_weight", true);
        int n = 0;
        EXPECT_OP_ERROR(keel_op_run(KEEL_OP_LINEAR, in, 2, &unk, 1, &z, 1, &n),
                        KEEL_STATUS_INVALID_ARGUMENT, "linear",
                        "transpose_weight");
    }
    CU_ASSERT_PTR_NULL(z);
    keel_tensor_free(x);
    keel_tensor_free(w);
    keel_tensor_free(w3);
    keel_tensor_free(wok);
    keel_tensor_free(b);
    keel_tensor_free(xi);
    keel_tensor_free(s);
}

/* ---- fused_linear ----------------------------------------------------------- */

/* The ulps fused_linear may differ from the unfused pair by: none in
 * float32 and float64, 1 in float16/bfloat16. */
static int fused_ulps(keel_dtype dt)
{
    return dt == KEEL_F16 || dt == KEEL_BF16 ? 1 : 0;
}

/* keel_fused_linear(x, w, b, act) against keel_linear then the activation
 * op, on the same device. */
static void check_fused_linear(const char *what, keel_tensor *x,
                               keel_tensor *w, keel_tensor *b,
                               const char *act, double alpha, keel_dtype dt)
{
    keel_tensor *got = NULL, *lin = NULL, *want = NULL;
    char name[160];

    snprintf(name, sizeof(name), "fused_linear %s, %s", act, what);
    CU_ASSERT_EQUAL_FATAL(keel_fused_linear(x, w, b, act, alpha, &got),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_linear(x, w, b, &lin), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(ot_activation(lin, act, alpha, &want),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_dtype(got), dt);
    if (ot_check_shape(name, got, keel_tensor_ndim(want),
                       keel_tensor_shape(want)))
        ot_check_ulp(name, got, want, dt, fused_ulps(dt));
    keel_tensor_free(got);
    keel_tensor_free(lin);
    keel_tensor_free(want);
}

static void run_fused_linear(const char *what, keel_dtype dt, int nd,
                             const int64_t *xs, int64_t out, bool bias,
                             const char *act, double alpha)
{
    keel_tensor *x = ot_rand(dt, nd, xs, -1.5, 1.5);
    keel_tensor *w = ot_rand(dt, 2, (int64_t[]){xs[nd - 1], out}, -1, 1);
    keel_tensor *b = bias ? ot_rand(dt, 1, &out, -4, 4) : NULL;

    check_fused_linear(what, x, w, b, act, alpha, dt);
    keel_tensor_free(x);
    keel_tensor_free(w);
    keel_tensor_free(b);
}

/* Every activation, every float dtype, the shapes linear takes. */
static void test_fused_linear_activations(void)
{
    for (int k = 0; k < 4; k++) {
        keel_dtype dt = ot_float_dtypes[k];
        for (int a = 0; a < KEEL_FUSED_ACT_COUNT_; a++) {
            const char *act = keel_fused_act_name((keel_fused_act)a);
            double alpha = a == KEEL_FUSED_ACT_LEAKY_RELU ? 0.15 : 0;
            run_fused_linear("batched", dt, 3, (int64_t[]){3, 5, 24}, 17,
                             true, act, alpha);
            run_fused_linear("no bias", dt, 2, (int64_t[]){7, 9}, 6, false,
                             act, alpha);
            run_fused_linear("1-D x", dt, 1, (int64_t[]){9}, 5, true, act,
                             alpha);
            run_fused_linear("in = 0 gives act(bias)", dt, 2,
                             (int64_t[]){3, 0}, 4, true, act, alpha);
            run_fused_linear("no rows", dt, 2, (int64_t[]){0, 6}, 4, true,
                             act, alpha);
        }
    }
}

/* Views, large outputs (the activation over the pool) and the allocation-
 * free path. */
static void test_fused_linear_layouts(void)
{
    for (int a = 0; a < KEEL_FUSED_ACT_COUNT_; a++) {
        const char *act = keel_fused_act_name((keel_fused_act)a);
        double alpha = a == KEEL_FUSED_ACT_LEAKY_RELU ? 0.3 : 0;
        for (int k = 0; k < 4; k++) {
            keel_dtype dt = ot_float_dtypes[k];
            keel_tensor *x = ot_rand(dt, 3, (int64_t[]){2, 3, 6}, -2, 2);
            keel_tensor *w = ot_rand(dt, 2, (int64_t[]){6, 5}, -1, 1);
            keel_tensor *b = ot_rand(dt, 1, (int64_t[]){5}, -1, 1);
            keel_tensor *xt = ot_layout(x, OT_TRANSPOSED);
            keel_tensor *ws = ot_layout(w, OT_STRIDED);
            keel_tensor *bs = ot_layout(b, OT_STRIDED);

            check_fused_linear("reversed-axes x, strided weight and bias",
                               xt, ws, bs, act, alpha, dt);
            keel_tensor_free(x);
            keel_tensor_free(w);
            keel_tensor_free(b);
            keel_tensor_free(xt);
            keel_tensor_free(ws);
            keel_tensor_free(bs);
        }
        run_fused_linear("large f32", KEEL_F32, 3, (int64_t[]){8, 40, 96},
                         300, true, act, alpha);
        run_fused_linear("large bf16", KEEL_BF16, 2, (int64_t[]){300, 32},
                         240, true, act, alpha);
        setenv("KEEL_CPU_NO_WORKSPACE", "1", 1);
        run_fused_linear("no workspace f32", KEEL_F32, 3,
                         (int64_t[]){2, 3, 6}, 4, true, act, alpha);
        run_fused_linear("no workspace f16", KEEL_F16, 2, (int64_t[]){4, 6},
                         3, true, act, alpha);
        unsetenv("KEEL_CPU_NO_WORKSPACE");
    }
}

/* Hand-worked values: linear gives [-1, 3, 9] (from test_linear_exact's
 * [15, 26, 37] with another bias). */
static void test_fused_linear_exact(void)
{
    double xv[2] = {1, 2}, wv[6] = {1, 0, -1, 2, 3, 4}, bv[3] = {-6, -3, 0};
    keel_tensor *x = ot_from(KEEL_F32, 1, (int64_t[]){2}, xv);
    keel_tensor *w = ot_from(KEEL_F32, 2, (int64_t[]){2, 3}, wv);
    keel_tensor *b = ot_from(KEEL_F32, 1, (int64_t[]){3}, bv), *z = NULL;
    static const struct {
        const char *act;
        double alpha, want[3];
    } cases[] = {
        /* x @ w = {5, 6, 7}; + b = {-1, 3, 7} */
        {"none", 0, {-1, 3, 7}},
        {NULL, 0, {-1, 3, 7}},
        {"relu", 0, {0, 3, 7}},
        {"relu6", 0, {0, 3, 6}},
        {"leaky_relu", 0.5, {-0.5, 3, 7}},
        {"hardswish", 0, {-1.0 / 3.0, 3, 7}},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CU_ASSERT_EQUAL_FATAL(keel_fused_linear(x, w, b, cases[i].act,
                                                cases[i].alpha, &z),
                              KEEL_STATUS_OK);
        ot_check(cases[i].act ? cases[i].act : "NULL activation", z,
                 cases[i].want, KEEL_F32);
        keel_tensor_free(z);
        z = NULL;
    }
    keel_tensor_free(x);
    keel_tensor_free(w);
    keel_tensor_free(b);
}

static void test_fused_linear_errors(void)
{
    keel_tensor *x = ot_rand(KEEL_F32, 2, (int64_t[]){3, 4}, -1, 1);
    keel_tensor *w = ot_rand(KEEL_F32, 2, (int64_t[]){4, 2}, -1, 1);
    keel_tensor *wbad = ot_rand(KEEL_F32, 2, (int64_t[]){5, 2}, -1, 1);
    keel_tensor *xi = ot_rand(KEEL_I32, 2, (int64_t[]){3, 4}, 0, 4), *z = NULL;

    EXPECT_OP_ERROR(keel_fused_linear(x, w, NULL, "swish", 0, &z),
                    KEEL_STATUS_INVALID_ARGUMENT, "fused_linear",
                    "activation 'swish' is not one of none, relu, relu6, "
                    "gelu, gelu_tanh, silu, sigmoid, tanh, leaky_relu, "
                    "hardswish");
    EXPECT_OP_ERROR(keel_fused_linear(x, w, NULL, "RELU", 0, &z),
                    KEEL_STATUS_INVALID_ARGUMENT, "fused_linear",
                    "activation 'RELU'");
    EXPECT_OP_ERROR(keel_fused_linear(x, w, NULL, "", 0, &z),
                    KEEL_STATUS_INVALID_ARGUMENT, "fused_linear",
                    "activation ''");
    /* linear's own errors */
    EXPECT_OP_ERROR(keel_fused_linear(x, wbad, NULL, "relu", 0, &z),
                    KEEL_STATUS_INVALID_ARGUMENT, "fused_linear",
                    "input features");
    EXPECT_OP_ERROR(keel_fused_linear(xi, w, NULL, "relu", 0, &z),
                    KEEL_STATUS_NOT_SUPPORTED, "fused_linear", "int32");
    {
        keel_tensor *in[2] = {x, w};
        keel_attr a = keel_attr_int("activation", 1);
        int n = 0;
        EXPECT_OP_ERROR(keel_op_run(KEEL_OP_FUSED_LINEAR, in, 2, &a, 1, &z,
                                    1, &n),
                        KEEL_STATUS_INVALID_ARGUMENT, "fused_linear",
                        "activation");
    }
    CU_ASSERT_PTR_NULL(z);
    keel_tensor_free(x);
    keel_tensor_free(w);
    keel_tensor_free(wbad);
    keel_tensor_free(xi);
}

/* Inference only: inputs that require a gradient are fine, the output
 * records nothing. */
static void test_fused_linear_no_grad(void)
{
    keel_tensor *x = ot_rand(KEEL_F32, 2, (int64_t[]){3, 4}, -1, 1);
    keel_tensor *w = ot_rand(KEEL_F32, 2, (int64_t[]){4, 2}, -1, 1), *z = NULL;

    CU_ASSERT_EQUAL(keel_tensor_set_stop_gradient(w, false), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_fused_linear(x, w, NULL, "gelu", 0, &z),
                          KEEL_STATUS_OK);
    CU_ASSERT(keel_tensor_stop_gradient(z));
    CU_ASSERT_PTR_NULL(keel_tensor_grad_fn_name(z));
    keel_tensor_free(x);
    keel_tensor_free(w);
    keel_tensor_free(z);
}

/* With KEEL_CPU_NO_WORKSPACE the kernels cannot take a workspace and run
 * their allocation-free reference loops: same results. */
static void test_no_workspace_fallback(void)
{
    setenv("KEEL_CPU_NO_WORKSPACE", "1", 1);
    run_matmul("fallback f16", KEEL_F16, 3, (int64_t[]){2, 5, 7}, 2,
               (int64_t[]){3, 7}, false, true);
    run_matmul("fallback bf16 broadcast", KEEL_BF16, 3,
               (int64_t[]){2, 4, 7}, 4, (int64_t[]){3, 1, 7, 2}, false,
               false);
    {
        keel_tensor *x = ot_rand(KEEL_F32, 2, (int64_t[]){4, 6}, -1, 1);
        keel_tensor *y = ot_rand(KEEL_F64, 2, (int64_t[]){6, 3}, -1, 1);
        keel_tensor *xs = ot_layout(x, OT_STRIDED);
        keel_tensor *y32 = ot_rand(KEEL_F32, 2, (int64_t[]){6, 3}, -1, 1);
        check_matmul("fallback strided f32", xs, y32, false, false,
                     KEEL_F32);
        check_matmul("fallback f32 @ f64", x, y, false, false, KEEL_F64);
        keel_tensor_free(x);
        keel_tensor_free(y);
        keel_tensor_free(xs);
        keel_tensor_free(y32);
    }
    run_linear("fallback linear f16", KEEL_F16, 3, (int64_t[]){2, 3, 6}, 4,
               true);
    run_linear("fallback linear K=0", KEEL_BF16, 2, (int64_t[]){2, 0}, 3,
               true);
    unsetenv("KEEL_CPU_NO_WORKSPACE");
}

int main(void)
{
    static const ot_test tests[] = {
        {"matmul 2-D, every float dtype", test_matmul_2d_all_dtypes},
        {"matmul exact values", test_matmul_exact_values},
        {"matmul transpose flags", test_matmul_transpose_flags},
        {"matmul 1-D operands", test_matmul_1d},
        {"matmul batched and broadcast", test_matmul_batched_broadcast},
        {"matmul non-contiguous operands", test_matmul_noncontiguous},
        {"matmul empty dims", test_matmul_empty},
        {"matmul large (threads)", test_matmul_large},
        {"matmul mixed dtypes promote", test_matmul_mixed_dtypes},
        {"matmul errors", test_matmul_errors},
        {"linear every float dtype", test_linear_dtypes},
        {"linear exact values", test_linear_exact},
        {"linear non-contiguous", test_linear_noncontiguous},
        {"linear large", test_linear_large},
        {"linear errors", test_linear_errors},
        {"allocation-free fallback", test_no_workspace_fallback},
        {"fused_linear: every activation and dtype",
         test_fused_linear_activations},
        {"fused_linear: views, large, no workspace",
         test_fused_linear_layouts},
        {"fused_linear exact values", test_fused_linear_exact},
        {"fused_linear errors", test_fused_linear_errors},
        {"fused_linear is not differentiable", test_fused_linear_no_grad},
    };
    return ot_main("linalg", tests, (int)(sizeof(tests) / sizeof(tests[0])));
}
