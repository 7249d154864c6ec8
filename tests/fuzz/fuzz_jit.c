/*
 * libFuzzer target: the graph file reader, keel_jit_load_buffer(), and
 * running what it accepts.
 *
 * The input is a graph file. The weights are fixed: the harness writes
 * one safetensors file at start-up ("w" [4, 3] and "b" [3], float32) and
 * replaces the placeholders @BYTES@ and @CRC@ in each input with that
 * file's size and CRC-32, so inputs get past the weights check (one that
 * mangles a placeholder tests the check itself). Any input must give OK
 * or an error with a message, never a crash, a sanitizer report or a
 * leak. An accepted graph whose inputs are small is run once on inputs
 * of its declared shapes (dynamic dimensions 2), and must again give OK
 * or an error with a message.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <keel/jit.h>

#include "fuzz_common.h"
#include "fuzz_graph.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char weights[64];
static char bytes_s[32], crc_s[32];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    float w[15];
    keel_tensor *tw = NULL, *tb = NULL;
    keel_state_dict *sd;
    unsigned char buf[4096];
    size_t n, total = 0;
    uLong crc = crc32(0L, Z_NULL, 0);
    FILE *f;
    const char *tmp = getenv("TMPDIR");

    (void)argc;
    (void)argv;
    fuzz_keel_setup();
    for (int i = 0; i < 15; i++)
        w[i] = (float)i / 8.0f - 0.5f;
    snprintf(weights, sizeof(weights), "%s/keel-fuzz-jit-%ld.safetensors",
             tmp && *tmp && strlen(tmp) < 20 ? tmp : "/tmp", (long)getpid());
    if (keel_state_dict_create(&sd) ||
        keel_tensor_from_host(w, KEEL_F32, 2, (int64_t[]){4, 3}, NULL,
                              &tw) ||
        keel_tensor_from_host(w + 12, KEEL_F32, 1, (int64_t[]){3}, NULL,
                              &tb) ||
        keel_state_dict_set(sd, "w", tw) || keel_state_dict_set(sd, "b", tb) ||
        keel_save(weights, sd))
        fuzz_die("writing the weights");
    keel_tensor_free(tw);
    keel_tensor_free(tb);
    keel_state_dict_free(sd);
    f = fopen(weights, "rb");
    if (!f)
        fuzz_die("reading the weights");
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
        crc = crc32(crc, buf, (uInt)n);
        total += n;
    }
    fclose(f);
    snprintf(bytes_s, sizeof(bytes_s), "%zu", total);
    snprintf(crc_s, sizeof(crc_s), "%lu", (unsigned long)crc);
    return 0;
}

/* Replace every `from` in s (len *n) by `to`; returns a new buffer. */
static char *subst(char *s, size_t *n, const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to), cap = *n * 2 + 64, o = 0;
    char *out = malloc(cap + 1);

    if (!out)
        fuzz_die("malloc");
    for (size_t i = 0; i < *n;) {
        if (i + fl <= *n && !memcmp(s + i, from, fl)) {
            if (o + tl > cap)
                break;
            memcpy(out + o, to, tl);
            o += tl;
            i += fl;
        } else {
            if (o + 1 > cap)
                break;
            out[o++] = s[i++];
        }
    }
    free(s);
    *n = o;
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t n = size;
    char *text = malloc(size ? size : 1);
    keel_graph *g = NULL;
    keel_status st;

    if (!text)
        return 0;
    if (size)
        memcpy(text, data, size);
    text = subst(text, &n, "@BYTES@", bytes_s);
    text = subst(text, &n, "@CRC@", crc_s);
    keel_clear_error();
    st = keel_jit_load_buffer(text, n, weights, NULL, &g);
    free(text);
    if (st != KEEL_STATUS_OK) {
        if (g || !*keel_last_error()) {
            fprintf(stderr, "refused without a message or with a graph\n");
            abort();
        }
        return 0;
    }
    if (!g || keel_graph_num_outputs(g) < 1)
        abort();
    fuzz_run_graph(g);
    keel_graph_free(g);
    return 0;
}
