/*
 * libFuzzer target: the gzip path of keel_idx_load(). The input, less its
 * first byte, is an IDX file's decompressed content; the harness gzip's it
 * (so the mutator works on the IDX header and payload, not on deflate
 * bits), and the first byte picks a damage to the stream: none, a cut at
 * some point, or one flipped byte.
 */
#include <stdint.h>
#include <stdlib.h>

#include <zlib.h>

#include "fuzz_common.h"
#include "fuzz_idx_check.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_keel_setup();
    return 0;
}

/* gzip `in` into a malloc'd buffer; returns its length, 0 on failure. */
static size_t gzip_bytes(const uint8_t *in, size_t n, uint8_t **out)
{
    z_stream z = {0};
    size_t cap = compressBound((uLong)n) + 64;
    uint8_t *buf = malloc(cap);
    size_t len = 0;

    *out = NULL;
    if (!buf)
        return 0;
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
        Z_OK) {
        free(buf);
        return 0;
    }
    z.next_in = (Bytef *)in;
    z.avail_in = (uInt)n;
    z.next_out = buf;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) == Z_STREAM_END)
        len = z.total_out;
    deflateEnd(&z);
    if (!len) {
        free(buf);
        return 0;
    }
    *out = buf;
    return len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *gz;
    size_t len;
    unsigned damage;

    if (size < 1 || size > (1u << 20))
        return 0;
    damage = data[0];
    len = gzip_bytes(data + 1, size - 1, &gz);
    if (!len)
        return 0;
    switch (damage & 3) {
    case 1: /* cut the stream */
        len = len * (damage >> 2) / 64;
        break;
    case 2: /* flip one byte past the 10-byte gzip header */
        if (len > 10)
            gz[10 + (damage >> 2) % (len - 10)] ^= 0x5a;
        break;
    default:
        break;
    }
    fuzz_idx_check(fuzz_write_input(gz, len), (uint64_t)size);
    free(gz);
    return 0;
}
