/*
 * What the IDX targets check on each input (fuzz_idx.c, fuzz_idx_gzip.c):
 * keel_idx_load gives OK or an error status with a message; on OK the array
 * is consistent (numel is the product of the dims, nbytes numel times the
 * element size, data present when nbytes > 0, and no more bytes than the
 * decoded stream can hold, int16 counting twice), it converts to a tensor, and a file the MNIST
 * loader could take (uint8, rank 3 or rank 1) goes through it as well.
 */
#ifndef KEEL_FUZZ_IDX_CHECK_H
#define KEEL_FUZZ_IDX_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <keel/data.h>
#include <keel/tensor.h>

/* Tensors are made only from arrays up to this size, to keep runs fast. */
#define FUZZ_IDX_TENSOR_MAX (1u << 20)

static void fuzz_idx_expect_error(keel_status st, const char *what)
{
    const char *msg = keel_last_error();

    if (st == KEEL_STATUS_OK)
        return;
    if (!msg || !*msg) {
        fprintf(stderr, "%s: status %s without a message\n", what,
                keel_status_name(st));
        abort();
    }
}

static void fuzz_idx_check(const char *path, uint64_t max_payload)
{
    keel_idx_array a;
    keel_status st;
    int64_t numel = 1, nonzero = 1;

    st = keel_idx_load(path, &a);
    if (st != KEEL_STATUS_OK) {
        fuzz_idx_expect_error(st, "keel_idx_load");
        if (a.data)
            abort(); /* "On failure *out holds nothing to free" */
        keel_clear_error();
        return;
    }
    if (a.ndim < 1 || a.ndim > KEEL_MAX_DIMS)
        abort();
    for (int i = 0; i < a.ndim; i++) {
        if (a.dims[i] < 0)
            abort();
        if (a.dims[i] > 0 && __builtin_mul_overflow(nonzero, a.dims[i],
                                                    &nonzero)) {
            /* Strides of such a shape overflow even when numel is 0. */
            fprintf(stderr, "accepted a shape whose nonzero dims overflow "
                            "int64\n");
            abort();
        }
        if (a.dims[i] == 0)
            numel = 0;
    }
    if (numel)
        numel = nonzero;
    if (numel != a.numel ||
        a.nbytes != (size_t)a.numel * keel_dtype_size(a.dtype) ||
        (a.nbytes > 0 && !a.data) ||
        /* int16 is widened to int32: twice the bytes of the file */
        a.nbytes > max_payload * (a.type == KEEL_IDX_I16 ? 2 : 1)) {
        fprintf(stderr, "inconsistent IDX array: numel %lld, nbytes %zu\n",
                (long long)a.numel, a.nbytes);
        abort();
    }
    if (a.nbytes <= FUZZ_IDX_TENSOR_MAX) {
        keel_tensor *t = NULL;

        st = keel_idx_to_tensor(&a, "cpu:0", &t);
        fuzz_idx_expect_error(st, "keel_idx_to_tensor");
        keel_tensor_free(t);
        if (a.type == KEEL_IDX_U8 && (a.ndim == 3 || a.ndim == 1)) {
            keel_tensor *x = NULL;

            st = a.ndim == 3
                     ? keel_mnist_load(path, NULL, "cpu:0", &x, NULL)
                     : keel_mnist_load(NULL, path, "cpu:0", NULL, &x);
            fuzz_idx_expect_error(st, "keel_mnist_load");
            keel_tensor_free(x);
        }
    }
    keel_idx_array_free(&a);
    keel_clear_error();
}

#endif /* KEEL_FUZZ_IDX_CHECK_H */
