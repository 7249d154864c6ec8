/*
 * libFuzzer target: the safetensors reader, through the public keel_load().
 *
 * Any input must give OK or an error status with a message, never a crash,
 * a sanitizer report or a leak. On OK the loaded dict must be consistent
 * with the input: every tensor's bytes lie inside the file, so their sum is
 * below its size, and every tensor can be read back to the host.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <keel/io.h>
#include <keel/tensor.h>

#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_keel_setup();
    return 0;
}

static void check_loaded(keel_state_dict *sd, size_t size)
{
    uint64_t total = 0;

    for (int64_t i = 0; i < keel_state_dict_count(sd); i++) {
        const char *name = NULL;
        keel_tensor *t = NULL;
        uint64_t nbytes;
        int64_t nonzero = 1;
        void *host;

        if (keel_state_dict_at(sd, i, &name, &t) != KEEL_STATUS_OK || !name ||
            !t)
            abort();
        for (int d = 0; d < keel_tensor_ndim(t); d++) {
            int64_t n = keel_tensor_shape(t)[d];

            if (n < 0 || (n > 0 && __builtin_mul_overflow(nonzero, n,
                                                          &nonzero))) {
                /* Strides of such a shape overflow even when numel is 0. */
                fprintf(stderr, "tensor '%s': accepted a shape whose nonzero "
                                "dims overflow int64\n", name);
                abort();
            }
        }
        nbytes = (uint64_t)keel_tensor_numel(t) *
                 keel_dtype_size(keel_tensor_dtype(t));
        total += nbytes;
        if (nbytes > size || total > size) {
            fprintf(stderr, "tensor '%s' holds %llu bytes, the file %zu\n",
                    name, (unsigned long long)nbytes, size);
            abort();
        }
        host = malloc(nbytes ? nbytes : 1);
        if (!host)
            continue;
        if (keel_tensor_to_host(t, host, nbytes) != KEEL_STATUS_OK) {
            fprintf(stderr, "tensor '%s' cannot be read back: %s\n", name,
                    keel_last_error());
            abort();
        }
        free(host);
    }
    for (int64_t i = 0; i < keel_state_dict_metadata_count(sd); i++) {
        const char *k = NULL, *v = NULL;

        if (keel_state_dict_metadata_at(sd, i, &k, &v) != KEEL_STATUS_OK ||
            !k || !v)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write_input(data, size);
    keel_state_dict *sd = NULL;
    keel_status st;

    st = keel_load(path, "cpu:0", &sd);
    if (st == KEEL_STATUS_OK) {
        if (!sd)
            abort();
        check_loaded(sd, size);
        keel_state_dict_free(sd);
    } else {
        const char *msg = keel_last_error();

        if (sd || !msg || !*msg) {
            fprintf(stderr, "keel_load: status %s without %s\n",
                    keel_status_name(st), sd ? "NULL *out" : "a message");
            abort();
        }
    }
    keel_clear_error();
    return 0;
}
