/*
 * libFuzzer target: the `keel conform --config` YAML reader
 * (conformance/cf_config.c), as the command calls it: defaults, load over
 * them, free. An error must come with a "file:line:column: message" text;
 * a success must leave every known-failure entry with its required fields
 * (test, reason, issue).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conform.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write_input(data, size);
    struct cf_config cfg;
    char err[1024];

    memset(err, 0, sizeof err);
    cf_config_defaults(&cfg);
    if (cf_config_load(&cfg, path, err, sizeof err) != 0) {
        if (!err[0] || memchr(err, 0, sizeof err) == NULL) {
            fprintf(stderr, "cf_config_load failed without a message\n");
            abort();
        }
    } else {
        if (cfg.nknown < 0 || (cfg.nknown > 0 && !cfg.known))
            abort();
        for (int i = 0; i < cfg.nknown; i++) {
            const struct cf_known_failure *k = &cfg.known[i];

            /* plugin, version and device may be absent (NULL: "*"). */
            if (!k->test || !k->reason || !*k->reason || !k->issue ||
                !*k->issue) {
                fprintf(stderr, "known failure %d lacks a field\n", i);
                abort();
            }
        }
        if (cfg.ndevices < 0 || cfg.ndevices > CF_MAX_DEVICES)
            abort();
    }
    cf_config_free(&cfg);
    return 0;
}
