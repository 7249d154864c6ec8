/*
 * keel conform — the configuration file (YAML, read with libyaml).
 *
 * The whole schema is below (keel-conform.example.yaml shows every key).
 * Every key is optional; a missing one keeps its default. An unknown key, a
 * value of the wrong type or out of range is an error naming the file, the
 * line and the column.
 *
 *   devices:        all | [index, ...]
 *   kernel_devices: first | all
 *   seed:           integer
 *   tolerances:     {float64|float32|float16|bfloat16: number}
 *   features:       {dtypes: [name, ...], <feature>: bool, ...}
 *   timeouts:       {test: seconds, suite: seconds, collective_ms: ms}
 *   e2e:            {steps: integer}
 *   known_failures: [{test, plugin, version, device, reason, issue}, ...]
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "conform.h"

/* Default NMSE bounds, per dtype (docs/certify.md quotes this table). A
 * result passes when sum((got - ref)^2) / sum(ref^2) is at most the bound;
 * integer and bool results must match exactly. */
static const struct {
    keel_dtype dtype;
    double nmse;
} default_tolerances[] = {
    {KEEL_F64, 1e-20},
    {KEEL_F32, 1e-10},
    {KEEL_F16, 1e-5},
    {KEEL_BF16, 3e-4},
};

/* Feature names as in `keel devices` (bit order of KEEL_FEATURE_*). */
static const char *const feature_names[] = {
    "async_copy",    "pinned_host",   "unified_memory",
    "peer_access",   "collectives",   "event_timing",
    "host_callback", "kernels",       "stream_priority",
    "host_addresses",
};
#define NFEATURES (sizeof(feature_names) / sizeof(feature_names[0]))

const char *cf_feature_name(uint32_t bit)
{
    for (unsigned i = 0; i < NFEATURES; i++)
        if (bit == (1u << i))
            return feature_names[i];
    return NULL;
}

void cf_config_defaults(struct cf_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->all_devices = true;
    for (size_t i = 0; i < sizeof(default_tolerances) /
                               sizeof(default_tolerances[0]);
         i++)
        cfg->tolerance[default_tolerances[i].dtype] =
            default_tolerances[i].nmse;
    cfg->test_timeout_s = 300;
    cfg->suite_timeout_s = 3600;
    cfg->seed = 20240601;
    cfg->e2e_steps = 100;
}

void cf_config_free(struct cf_config *cfg)
{
    for (int i = 0; i < cfg->nknown; i++) {
        struct cf_known_failure *k = &cfg->known[i];
        free(k->test);
        free(k->plugin);
        free(k->version);
        free(k->device);
        free(k->reason);
        free(k->issue);
    }
    free(cfg->known);
    free(cfg->path);
    cfg->known = NULL;
    cfg->nknown = 0;
    cfg->path = NULL;
}

/* ---- parsing ------------------------------------------------------------- */

struct parse {
    yaml_document_t doc;
    const char *path;
    char *err;
    size_t errsz;
};

static int perr(struct parse *p, const yaml_node_t *n, const char *fmt, ...)
    CF_PRINTF(3, 4);

static int perr(struct parse *p, const yaml_node_t *n, const char *fmt, ...)
{
    va_list ap;
    int k;

    k = snprintf(p->err, p->errsz, "%s:%lu:%lu: ", p->path,
                 n ? (unsigned long)n->start_mark.line + 1 : 1UL,
                 n ? (unsigned long)n->start_mark.column + 1 : 1UL);
    if (k < 0 || (size_t)k >= p->errsz)
        return -1;
    va_start(ap, fmt);
    vsnprintf(p->err + k, p->errsz - (size_t)k, fmt, ap);
    va_end(ap);
    return -1;
}

static yaml_node_t *node(struct parse *p, int index)
{
    return yaml_document_get_node(&p->doc, index);
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value
                                            : NULL;
}

static const char *kind_name(const yaml_node_t *n)
{
    if (!n)
        return "nothing";
    switch (n->type) {
    case YAML_SCALAR_NODE:
        return "a scalar";
    case YAML_SEQUENCE_NODE:
        return "a list";
    case YAML_MAPPING_NODE:
        return "a mapping";
    default:
        return "nothing";
    }
}

static int need_kind(struct parse *p, const yaml_node_t *n,
                     yaml_node_type_t type, const char *what)
{
    static const char *const names[] = {"", "a scalar", "a list",
                                        "a mapping"};

    if (n && n->type == type)
        return 0;
    return perr(p, n, "%s must be %s, found %s", what, names[type],
                kind_name(n));
}

static int get_number(struct parse *p, const yaml_node_t *n, const char *what,
                      double lo, double hi, double *out)
{
    const char *s = scalar(n);
    char *end;
    double v;

    if (!s)
        return perr(p, n, "%s must be a number, found %s", what,
                    kind_name(n));
    errno = 0;
    v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v))
        return perr(p, n, "%s must be a number, found '%s'", what, s);
    if (v < lo || v > hi)
        return perr(p, n, "%s = %g is out of range [%g, %g]", what, v, lo, hi);
    *out = v;
    return 0;
}

static int get_int(struct parse *p, const yaml_node_t *n, const char *what,
                   long long lo, long long hi, long long *out)
{
    const char *s = scalar(n);
    char *end;
    long long v;

    if (!s)
        return perr(p, n, "%s must be an integer, found %s", what,
                    kind_name(n));
    errno = 0;
    v = strtoll(s, &end, 0);
    if (end == s || *end || errno)
        return perr(p, n, "%s must be an integer, found '%s'", what, s);
    if (v < lo || v > hi)
        return perr(p, n, "%s = %lld is out of range [%lld, %lld]", what, v,
                    lo, hi);
    *out = v;
    return 0;
}

static int get_bool(struct parse *p, const yaml_node_t *n, const char *what,
                    bool *out)
{
    static const char *const yes[] = {"true", "yes", "on", "True", "TRUE"};
    static const char *const no[] = {"false", "no", "off", "False", "FALSE"};
    const char *s = scalar(n);

    for (size_t i = 0; s && i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (!strcmp(s, yes[i])) {
            *out = true;
            return 0;
        }
        if (!strcmp(s, no[i])) {
            *out = false;
            return 0;
        }
    }
    return perr(p, n, "%s must be true or false, found %s%s%s", what,
                s ? "'" : "", s ? s : kind_name(n), s ? "'" : "");
}

static int get_string(struct parse *p, const yaml_node_t *n, const char *what,
                      char **out)
{
    const char *s = scalar(n);

    if (!s)
        return perr(p, n, "%s must be a string, found %s", what,
                    kind_name(n));
    free(*out);
    *out = strdup(s);
    if (!*out)
        return perr(p, n, "out of memory");
    return 0;
}

static int unknown_key(struct parse *p, const yaml_node_t *k,
                       const char *section, const char *known)
{
    return perr(p, k, "unknown key '%s' in %s (known keys: %s)",
                scalar(k) ? scalar(k) : "?", section, known);
}

/* YAML forbids a key twice in one mapping; a second `known_failures:` or
 * `devices:` would otherwise silently replace (or, for lists, merge with)
 * the first. Every mapping is checked before its keys are read. */
static int unique_keys(struct parse *p, const yaml_node_t *map,
                       const char *section)
{
    /* No section has more than a dozen keys: a longer mapping holds an
     * unknown or repeated key anyway, and is refused before the quadratic
     * scan below. */
    ptrdiff_t npairs = map->data.mapping.pairs.top -
                       map->data.mapping.pairs.start;

    if (npairs > 64)
        return perr(p, map, "%s has %td keys; the schema has at most a "
                            "dozen (see keel-conform.example.yaml)",
                    section, npairs);
    for (yaml_node_pair_t *a = map->data.mapping.pairs.start;
         a < map->data.mapping.pairs.top; a++) {
        const yaml_node_t *ka = node(p, a->key);
        const char *sa = scalar(ka);

        if (!ka || !node(p, a->value))
            return perr(p, ka ? ka : map, "malformed entry in %s", section);
        if (!sa)
            continue; /* reported as an unknown key by the caller */
        for (yaml_node_pair_t *b = map->data.mapping.pairs.start; b < a; b++) {
            const char *sb = scalar(node(p, b->key));

            if (sb && !strcmp(sa, sb))
                return perr(p, ka,
                            "key '%s' appears twice in %s (first at line "
                            "%lu); give each key once",
                            sa, section,
                            (unsigned long)node(p, b->key)->start_mark.line +
                                1);
        }
    }
    return 0;
}

/* need_kind for a mapping, then unique_keys. */
static int need_mapping(struct parse *p, const yaml_node_t *n,
                        const char *what)
{
    if (need_kind(p, n, YAML_MAPPING_NODE, what))
        return -1;
    return unique_keys(p, n, what);
}

static int dtype_of(const char *s)
{
    keel_dtype dt;

    if (!s || keel_dtype_parse(s, &dt) != KEEL_STATUS_OK)
        return -1;
    return (int)dt;
}

/* ---- sections ---------------------------------------------------------------- */

static int parse_devices(struct parse *p, struct cf_config *cfg,
                         const yaml_node_t *v)
{
    const char *s = scalar(v);

    if (s && !strcmp(s, "all")) {
        cfg->all_devices = true;
        return 0;
    }
    if (v->type != YAML_SEQUENCE_NODE)
        return perr(p, v, "devices must be 'all' or a list of device "
                          "indices, found %s%s%s",
                    s ? "'" : "", s ? s : kind_name(v), s ? "'" : "");
    cfg->all_devices = false;
    cfg->ndevices = 0;
    for (yaml_node_item_t *it = v->data.sequence.items.start;
         it < v->data.sequence.items.top; it++) {
        yaml_node_t *e = node(p, *it);
        long long idx;

        if (get_int(p, e, "a device index", 0, CF_MAX_DEVICES - 1, &idx))
            return -1;
        if (cfg->ndevices >= CF_MAX_DEVICES)
            return perr(p, e, "too many devices (at most %d)",
                        CF_MAX_DEVICES);
        for (int i = 0; i < cfg->ndevices; i++)
            if (cfg->devices[i] == idx)
                return perr(p, e, "device %lld is listed twice", idx);
        cfg->devices[cfg->ndevices++] = (int32_t)idx;
    }
    if (cfg->ndevices == 0)
        return perr(p, v, "devices is an empty list");
    return 0;
}

static int parse_tolerances(struct parse *p, struct cf_config *cfg,
                            const yaml_node_t *v)
{
    if (need_mapping(p, v, "tolerances"))
        return -1;
    for (yaml_node_pair_t *pr = v->data.mapping.pairs.start;
         pr < v->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = node(p, pr->key), *val = node(p, pr->value);
        int dt = dtype_of(scalar(k));
        char what[64];

        if (dt < 0 || !cf_dtype_is_float(dt))
            return unknown_key(p, k, "tolerances",
                               "float64, float32, float16, bfloat16");
        snprintf(what, sizeof(what), "tolerances.%s", cf_dtype_name(dt));
        if (get_number(p, val, what, 0, 1, &cfg->tolerance[dt]))
            return -1;
    }
    return 0;
}

static int parse_dtype_list(struct parse *p, struct cf_config *cfg,
                            const yaml_node_t *v)
{
    if (need_kind(p, v, YAML_SEQUENCE_NODE, "features.dtypes"))
        return -1;
    cfg->dtypes_claimed = true;
    cfg->claimed_dtypes = 0;
    for (yaml_node_item_t *it = v->data.sequence.items.start;
         it < v->data.sequence.items.top; it++) {
        yaml_node_t *e = node(p, *it);
        int dt = dtype_of(scalar(e));

        if (dt < 0)
            return perr(p, e, "'%s' is not a dtype (float32, float64, "
                              "float16, bfloat16, int8, uint8, int32, "
                              "int64, bool)",
                        scalar(e) ? scalar(e) : kind_name(e));
        cfg->claimed_dtypes |= KEEL_DTYPE_BIT(dt);
    }
    return 0;
}

static int parse_features(struct parse *p, struct cf_config *cfg,
                          const yaml_node_t *v)
{
    if (need_mapping(p, v, "features"))
        return -1;
    for (yaml_node_pair_t *pr = v->data.mapping.pairs.start;
         pr < v->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = node(p, pr->key), *val = node(p, pr->value);
        const char *key = scalar(k);
        unsigned i;
        bool b = false;
        char what[64];

        if (key && !strcmp(key, "dtypes")) {
            if (parse_dtype_list(p, cfg, val))
                return -1;
            continue;
        }
        for (i = 0; key && i < NFEATURES; i++)
            if (!strcmp(key, feature_names[i]))
                break;
        if (!key || i == NFEATURES)
            return unknown_key(p, k, "features",
                               "dtypes, async_copy, pinned_host, "
                               "unified_memory, peer_access, collectives, "
                               "event_timing, host_callback, kernels, "
                               "stream_priority, host_addresses");
        snprintf(what, sizeof(what), "features.%s", key);
        if (get_bool(p, val, what, &b))
            return -1;
        cfg->feature_given |= 1u << i;
        if (b)
            cfg->feature_value |= 1u << i;
        else
            cfg->feature_value &= ~(1u << i);
    }
    return 0;
}

static int parse_timeouts(struct parse *p, struct cf_config *cfg,
                          const yaml_node_t *v)
{
    if (need_mapping(p, v, "timeouts"))
        return -1;
    for (yaml_node_pair_t *pr = v->data.mapping.pairs.start;
         pr < v->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = node(p, pr->key), *val = node(p, pr->value);
        const char *key = scalar(k);
        long long ms;

        if (key && !strcmp(key, "test")) {
            if (get_number(p, val, "timeouts.test", 0.1, 86400,
                           &cfg->test_timeout_s))
                return -1;
        } else if (key && !strcmp(key, "suite")) {
            if (get_number(p, val, "timeouts.suite", 1, 7 * 86400,
                           &cfg->suite_timeout_s))
                return -1;
        } else if (key && !strcmp(key, "collective_ms")) {
            if (get_int(p, val, "timeouts.collective_ms", 0, 86400000, &ms))
                return -1;
            cfg->collective_timeout_ms = (uint32_t)ms;
        } else {
            return unknown_key(p, k, "timeouts", "test, suite, collective_ms");
        }
    }
    return 0;
}

static int parse_e2e(struct parse *p, struct cf_config *cfg,
                     const yaml_node_t *v)
{
    if (need_mapping(p, v, "e2e"))
        return -1;
    for (yaml_node_pair_t *pr = v->data.mapping.pairs.start;
         pr < v->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = node(p, pr->key), *val = node(p, pr->value);
        const char *key = scalar(k);
        long long n;

        if (!key || strcmp(key, "steps"))
            return unknown_key(p, k, "e2e", "steps");
        if (get_int(p, val, "e2e.steps", 2, 100000, &n))
            return -1;
        cfg->e2e_steps = (int)n;
    }
    return 0;
}

static int parse_known_entry(struct parse *p, struct cf_known_failure *kf,
                             const yaml_node_t *v)
{
    static const char *const keys =
        "test, plugin, version, device, reason, issue";

    if (need_mapping(p, v, "a known_failures entry"))
        return -1;
    kf->line = (int)v->start_mark.line + 1;
    for (yaml_node_pair_t *pr = v->data.mapping.pairs.start;
         pr < v->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = node(p, pr->key), *val = node(p, pr->value);
        const char *key = scalar(k);
        char **dst = NULL;

        if (!key)
            return unknown_key(p, k, "a known_failures entry", keys);
        if (!strcmp(key, "test"))
            dst = &kf->test;
        else if (!strcmp(key, "plugin"))
            dst = &kf->plugin;
        else if (!strcmp(key, "version"))
            dst = &kf->version;
        else if (!strcmp(key, "device"))
            dst = &kf->device;
        else if (!strcmp(key, "reason"))
            dst = &kf->reason;
        else if (!strcmp(key, "issue"))
            dst = &kf->issue;
        else
            return unknown_key(p, k, "a known_failures entry", keys);
        if (get_string(p, val, key, dst))
            return -1;
    }
    if (!kf->test)
        return perr(p, v, "a known_failures entry needs 'test' (a glob over "
                          "test ids, see keel conform --list)");
    if (!kf->reason || !*kf->reason)
        return perr(p, v, "known failure '%s' needs a 'reason'", kf->test);
    if (!kf->issue || !*kf->issue)
        return perr(p, v, "known failure '%s' needs an 'issue' link",
                    kf->test);
    return 0;
}

static int parse_known(struct parse *p, struct cf_config *cfg,
                       const yaml_node_t *v)
{
    struct cf_known_failure *grown;
    size_t n, total;

    if (need_kind(p, v, YAML_SEQUENCE_NODE, "known_failures"))
        return -1;
    n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    if (n == 0)
        return 0;
    /* Entries are appended to any already held, so the array always has
     * room for nknown entries whatever the caller did before. */
    if (n > (size_t)INT32_MAX - (size_t)cfg->nknown)
        return perr(p, v, "too many known_failures entries");
    total = (size_t)cfg->nknown + n;
    if (total > SIZE_MAX / sizeof(*cfg->known))
        return perr(p, v, "too many known_failures entries");
    grown = realloc(cfg->known, total * sizeof(*cfg->known));
    if (!grown)
        return perr(p, v, "out of memory");
    cfg->known = grown;
    memset(cfg->known + cfg->nknown, 0, n * sizeof(*cfg->known));
    for (yaml_node_item_t *it = v->data.sequence.items.start;
         it < v->data.sequence.items.top; it++) {
        struct cf_known_failure *kf = &cfg->known[cfg->nknown++];

        if (parse_known_entry(p, kf, node(p, *it)))
            return -1;
    }
    return 0;
}

static int parse_root(struct parse *p, struct cf_config *cfg,
                      const yaml_node_t *root)
{
    static const char *const keys =
        "devices, kernel_devices, seed, tolerances, features, timeouts, "
        "e2e, known_failures";

    if (need_mapping(p, root, "the configuration"))
        return -1;
    for (yaml_node_pair_t *pr = root->data.mapping.pairs.start;
         pr < root->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = node(p, pr->key), *v = node(p, pr->value);
        const char *key = scalar(k);
        long long seed;
        int rc;

        if (!key)
            return unknown_key(p, k, "the configuration", keys);
        if (!strcmp(key, "devices")) {
            rc = parse_devices(p, cfg, v);
        } else if (!strcmp(key, "kernel_devices")) {
            const char *s = scalar(v);
            if (s && !strcmp(s, "first"))
                cfg->kernels_all_devices = false;
            else if (s && !strcmp(s, "all"))
                cfg->kernels_all_devices = true;
            else
                return perr(p, v, "kernel_devices must be 'first' or 'all'");
            rc = 0;
        } else if (!strcmp(key, "seed")) {
            rc = get_int(p, v, "seed", 0, INT64_MAX, &seed);
            cfg->seed = (uint64_t)seed;
        } else if (!strcmp(key, "tolerances")) {
            rc = parse_tolerances(p, cfg, v);
        } else if (!strcmp(key, "features")) {
            rc = parse_features(p, cfg, v);
        } else if (!strcmp(key, "timeouts")) {
            rc = parse_timeouts(p, cfg, v);
        } else if (!strcmp(key, "e2e")) {
            rc = parse_e2e(p, cfg, v);
        } else if (!strcmp(key, "known_failures")) {
            rc = parse_known(p, cfg, v);
        } else {
            return unknown_key(p, k, "the configuration", keys);
        }
        if (rc)
            return -1;
    }
    return 0;
}

int cf_config_load(struct cf_config *cfg, const char *path, char *err,
                   size_t errsz)
{
    struct parse p = {.path = path, .err = err, .errsz = errsz};
    yaml_parser_t parser;
    yaml_node_t *root;
    FILE *f;
    int rc = -1;

    f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errsz, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errsz, "%s: cannot start the YAML parser", path);
        fclose(f);
        return -1;
    }
    yaml_parser_set_input_file(&parser, f);
    if (!yaml_parser_load(&parser, &p.doc)) {
        snprintf(err, errsz, "%s:%lu:%lu: YAML syntax error: %s%s%s", path,
                 (unsigned long)parser.problem_mark.line + 1,
                 (unsigned long)parser.problem_mark.column + 1,
                 parser.problem ? parser.problem : "malformed document",
                 parser.context ? " " : "",
                 parser.context ? parser.context : "");
        goto out_parser;
    }
    root = yaml_document_get_root_node(&p.doc);
    rc = root ? parse_root(&p, cfg, root) : 0;
    if (rc == 0) {
        cfg->path = strdup(path);
        if (!cfg->path) {
            snprintf(err, errsz, "out of memory");
            rc = -1;
        }
    }
    yaml_document_delete(&p.doc);
out_parser:
    yaml_parser_delete(&parser);
    fclose(f);
    return rc;
}
