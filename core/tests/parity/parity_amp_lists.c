// SPDX-License-Identifier: Apache-2.0
/*
 * Parity driver 'amp_lists' (see parity_amp_lists.py and run.py): keel's
 * side of the AMP class of every catalog op. Reads {"configs": [...]} on
 * stdin, where a configuration is
 *
 *   {"name", "op": NAME}      -> {"values": [CLASS]}: the op's AMP class
 *                                (keel_op_get_info()->amp) as "white",
 *                                "black", "promote", "fp32" or "none"
 *   {"name", "catalog": true} -> {"values": [NAME, ...]}: every op of the
 *                                catalog, in catalog order
 *
 * and writes {"results": [...]} on stdout. An op that is not in the catalog
 * is {"error": ...} (keel_op_find's message).
 */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include <keel/ops.h>
#include <keel/runtime.h>

static json_t *run_config(json_t *cfg)
{
    const char *name = json_string_value(json_object_get(cfg, "name"));
    const char *op = json_string_value(json_object_get(cfg, "op"));
    json_t *result = json_pack("{s:s}", "name", name ? name : "");
    json_t *values = json_array();
    keel_op_id id;

    if (!result || !values || !name) {
        fprintf(stderr, "parity_amp_lists: a configuration without a name\n");
        return NULL;
    }
    if (json_is_true(json_object_get(cfg, "catalog"))) {
        for (int i = 0; i < KEEL_OP_COUNT; i++)
            json_array_append_new(
                values, json_string(keel_op_get_info((keel_op_id)i)->name));
    } else if (op && keel_op_find(op, &id) == KEEL_STATUS_OK) {
        keel_amp_class c = keel_op_get_info(id)->amp;

        json_array_append_new(values, json_string(keel_amp_class_name(c)));
    } else {
        json_decref(values);
        json_object_set_new(result, "error",
                            json_sprintf("no catalog op '%s': %s",
                                         op ? op : "(none)",
                                         keel_last_error()));
        return result;
    }
    json_object_set_new(result, "values", values);
    return result;
}

int main(void)
{
    json_t *input, *configs, *results, *out;
    json_error_t jerr;
    int rc = 2;

    input = json_loadf(stdin, 0, &jerr);
    if (!input) {
        fprintf(stderr, "parity_amp_lists: stdin is not JSON: line %d: %s\n",
                jerr.line, jerr.text);
        return 2;
    }
    configs = json_object_get(input, "configs");
    if (!json_is_array(configs)) {
        fprintf(stderr, "parity_amp_lists: no \"configs\" array on stdin\n");
        json_decref(input);
        return 2;
    }
    results = json_array();
    for (size_t i = 0; results && i < json_array_size(configs); i++) {
        json_t *r = run_config(json_array_get(configs, i));

        if (!r) {
            json_decref(results);
            json_decref(input);
            return 2;
        }
        json_array_append_new(results, r);
    }
    out = json_pack("{s:o}", "results", results);
    if (out &&
        !json_dumpf(out, stdout, JSON_COMPACT | JSON_REAL_PRECISION(17))) {
        fputc('\n', stdout);
        rc = fflush(stdout) ? 2 : 0;
    }
    json_decref(out);
    json_decref(input);
    keel_shutdown();
    return rc;
}
