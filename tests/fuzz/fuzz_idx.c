/*
 * libFuzzer target: IDX files as they are on disk, through keel_idx_load().
 * The seeds hold plain and gzip'd files, so mutations reach both the IDX
 * header checks and zlib's handling of damaged gzip streams (for the
 * header of a gzip'd file the mutator rarely gets past the CRC; see
 * fuzz_idx_gzip.c for that).
 */
#include <stdint.h>

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A gzip'd input can decompress to more than its size; the bound
     * only has to hold for plain files, and zlib's ratio is below 1032. */
    uint64_t bound = size >= 2 && data[0] == 0x1f && data[1] == 0x8b
                         ? (uint64_t)size * 1032 + 64
                         : size;

    fuzz_idx_check(fuzz_write_input(data, size), bound);
    return 0;
}
