/*
 * keel conform — summary table, JUnit XML, certification report (JSON).
 */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "conform.h"

#define KEEL_STR_(x) #x
#define KEEL_STR(x) KEEL_STR_(x)
#define KEEL_ABI_STRING                                                      \
    KEEL_STR(KEEL_ABI_VERSION_MAJOR) "." KEEL_STR(KEEL_ABI_VERSION_MINOR)

void cf_count(int *pass, int *fail, int *skip, int *known, int *notrun)
{
    *pass = *fail = *skip = *known = *notrun = 0;
    for (int i = 0; i < cf_ntests; i++) {
        const struct cf_test *t = &cf_tests[i];
        if (!t->selected)
            continue;
        switch (t->outcome) {
        case CF_PASS:
            (*pass)++;
            break;
        case CF_FAIL:
            (*fail)++;
            break;
        case CF_SKIP:
            (*skip)++;
            break;
        case CF_KNOWN:
        case CF_XFAIL:
        case CF_XPASS:
            (*known)++;
            break;
        default:
            (*notrun)++;
        }
    }
}

int cf_count_suite_failures(void)
{
    int n = 0;

    for (int s = 0; s < cf_nsuites; s++)
        if (cf_suites[s].exit_failure[0])
            n++;
    return n;
}

/* ---- summary --------------------------------------------------------------- */

static void suite_counts(const struct cf_suite *s, int c[5], double *ms)
{
    memset(c, 0, 5 * sizeof(int));
    *ms = 0;
    for (int i = 0; i < cf_ntests; i++) {
        const struct cf_test *t = &cf_tests[i];
        if (!t->selected || strcmp(t->suite, s->name))
            continue;
        *ms += t->ms;
        switch (t->outcome) {
        case CF_PASS:
            c[0]++;
            break;
        case CF_FAIL:
            c[1]++;
            break;
        case CF_SKIP:
            c[2]++;
            break;
        case CF_KNOWN:
        case CF_XFAIL:
        case CF_XPASS:
            c[3]++;
            break;
        default:
            c[4]++;
        }
    }
}

/* "  id:" then each line of the message indented below it. */
static void print_indented(FILE *out, const char *id, const char *msg)
{
    fprintf(out, "  %s:\n", id);
    while (*msg) {
        int len = (int)strcspn(msg, "\n");
        fprintf(out, "      %.*s\n", len, msg);
        msg += len;
        if (*msg)
            msg++;
    }
}

void cf_print_summary(FILE *out, const struct cf_run_info *ri)
{
    int tot[5] = {0}, nsf, ntf;
    double total_ms = 0;
    bool any_detail = false;

    fprintf(out, "\nSummary\n  %-26s %6s %6s %6s %6s %9s\n", "suite", "pass",
            "fail", "skip", "known", "time");
    for (int s = 0; s < cf_nsuites; s++) {
        int c[5];
        double ms;

        suite_counts(&cf_suites[s], c, &ms);
        if (c[0] + c[1] + c[2] + c[3] + c[4] == 0)
            continue;
        if (cf_suites[s].exit_failure[0])
            c[1]++; /* the suite's own failure (its process's exit) */
        fprintf(out, "  %-26s %6d %6d %6d %6d %8.2fs\n", cf_suites[s].name,
                c[0], c[1] + c[4], c[2], c[3], cf_suites[s].seconds);
        for (int k = 0; k < 5; k++)
            tot[k] += c[k];
        total_ms += ms;
    }
    fprintf(out, "  %-26s %6d %6d %6d %6d %8.2fs\n", "total", tot[0],
            tot[1] + tot[4], tot[2], tot[3], ri->seconds);
    for (int i = 0; i < cf_ntests; i++) {
        const struct cf_test *t = &cf_tests[i];
        if (!t->selected || (t->outcome != CF_FAIL && t->outcome != CF_NOT_RUN))
            continue;
        if (!any_detail)
            fprintf(out, "\nFailures\n");
        any_detail = true;
        print_indented(out, t->id,
                       t->message && *t->message ? t->message : "not run");
    }
    for (int s = 0; s < cf_nsuites; s++) {
        char id[96];

        if (!cf_suites[s].exit_failure[0])
            continue;
        if (!any_detail)
            fprintf(out, "\nFailures\n");
        any_detail = true;
        snprintf(id, sizeof(id), "%s (suite)", cf_suites[s].name);
        print_indented(out, id, cf_suites[s].exit_failure);
    }
    any_detail = false;
    for (int i = 0; i < cf_ntests; i++) {
        const struct cf_test *t = &cf_tests[i];
        if (!t->selected || t->outcome != CF_XPASS)
            continue;
        if (!any_detail)
            fprintf(out, "\nDeclared known failures that passed (remove "
                         "their entries)\n");
        any_detail = true;
        fprintf(out, "  %s (%s)\n", t->id,
                ri->cfg->known[t->known].issue);
    }
    (void)total_ms;
    fprintf(out, "\n");
    nsf = cf_count_suite_failures();
    ntf = tot[1] + tot[4] - nsf;
    if (ri->certified)
        fprintf(out, "Result: PASS: plugin %s %s certified at level %s\n",
                ri->probe->name, ri->probe->version, ri->certified);
    else if (ntf + nsf == 0 && ri->opt->nfilters)
        fprintf(out, "Result: PASS (filtered run: not a certification)\n");
    else if (nsf == 0)
        fprintf(out, "Result: FAIL: %d test%s failed\n", ntf,
                ntf == 1 ? "" : "s");
    else
        fprintf(out, "Result: FAIL: %d test%s failed, and the test process "
                     "of %d suite%s ended abnormally\n",
                ntf, ntf == 1 ? "" : "s", nsf, nsf == 1 ? "" : "s");
    fflush(out);
}

/* ---- JUnit XML ------------------------------------------------------------------ */

static void xml_escape(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\n':
            fputs("&#10;", f);
            break;
        default:
            if (c < 0x20 && c != '\t')
                fputc('?', f);
            else
                fputc(c, f);
        }
    }
}

static void junit_case(FILE *f, const struct cf_test *t)
{
    fprintf(f, "    <testcase classname=\"keel.conform.%s\" name=\"", t->suite);
    xml_escape(f, t->name);
    fprintf(f, "\" time=\"%.4f\">", t->ms / 1e3);
    switch (t->outcome) {
    case CF_FAIL:
    case CF_NOT_RUN:
        fputs("<failure message=\"", f);
        xml_escape(f, t->message && *t->message ? t->message : "not run");
        fputs("\"/>", f);
        break;
    case CF_SKIP:
    case CF_KNOWN:
    case CF_XFAIL:
    case CF_XPASS:
        fputs("<skipped message=\"", f);
        if (t->outcome != CF_SKIP)
            fprintf(f, "%s: ", cf_outcome_name(t->outcome));
        xml_escape(f, t->message ? t->message : "");
        fputs("\"/>", f);
        break;
    default:
        if (t->message && *t->message) {
            fputs("<system-out>", f);
            xml_escape(f, t->message);
            fputs("</system-out>", f);
        }
        break;
    }
    fputs("</testcase>\n", f);
}

int cf_write_junit(const char *path, const struct cf_run_info *ri, char *err,
                   size_t errsz)
{
    int pass, fail, skip, known, notrun;
    FILE *f = fopen(path, "w");

    if (!f) {
        snprintf(err, errsz, "%s: %s", path, strerror(errno));
        return -1;
    }
    cf_count(&pass, &fail, &skip, &known, &notrun);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<testsuites name=\"keel conform ");
    xml_escape(f, ri->probe->name);
    fprintf(f, "\" tests=\"%d\" failures=\"%d\" skipped=\"%d\" "
               "time=\"%.3f\">\n",
            pass + fail + skip + known + notrun + cf_count_suite_failures(),
            fail + notrun + cf_count_suite_failures(), skip + known,
            ri->seconds);
    for (int s = 0; s < cf_nsuites; s++) {
        int c[5], ex;
        double ms;

        suite_counts(&cf_suites[s], c, &ms);
        if (c[0] + c[1] + c[2] + c[3] + c[4] == 0)
            continue;
        ex = cf_suites[s].exit_failure[0] != '\0';
        fprintf(f, "  <testsuite name=\"%s\" tests=\"%d\" failures=\"%d\" "
                   "skipped=\"%d\" time=\"%.3f\">\n",
                cf_suites[s].name, c[0] + c[1] + c[2] + c[3] + c[4] + ex,
                c[1] + c[4] + ex, c[2] + c[3], cf_suites[s].seconds);
        for (int i = 0; i < cf_ntests; i++)
            if (cf_tests[i].selected &&
                !strcmp(cf_tests[i].suite, cf_suites[s].name))
                junit_case(f, &cf_tests[i]);
        if (ex) {
            fprintf(f, "    <testcase classname=\"keel.conform.%s\" "
                       "name=\"(suite process exit)\" time=\"0\">"
                       "<failure message=\"",
                    cf_suites[s].name);
            xml_escape(f, cf_suites[s].exit_failure);
            fputs("\"/></testcase>\n", f);
        }
        fprintf(f, "  </testsuite>\n");
    }
    fprintf(f, "</testsuites>\n");
    if (fclose(f) != 0) {
        snprintf(err, errsz, "%s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- sha256 ------------------------------------------------------------------------ */

int cf_sha256_file(const char *path, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE], buf[65536];
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx;
    FILE *f;
    size_t n;
    int rc = -1;

    out[0] = '\0';
    f = fopen(path, "rb");
    if (!f)
        return -1;
    ctx = EVP_MD_CTX_new();
    if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL))
        goto out;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        if (!EVP_DigestUpdate(ctx, buf, n))
            goto out;
    if (ferror(f) || !EVP_DigestFinal_ex(ctx, md, &mdlen))
        goto out;
    for (unsigned i = 0; i < mdlen && i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    rc = 0;
out:
    EVP_MD_CTX_free(ctx);
    fclose(f);
    return rc;
}

/* ---- JSON report ---------------------------------------------------------------------- */

static json_t *names_of_bits(uint32_t mask, bool dtypes)
{
    json_t *a = json_array();

    for (uint32_t b = 0; b < 32; b++) {
        const char *n;
        if (!(mask & (1u << b)))
            continue;
        n = dtypes ? (b < KEEL_DTYPE_COUNT_ ? cf_dtype_name((int)b) : NULL)
                   : cf_feature_name(1u << b);
        if (n)
            json_array_append_new(a, json_string(n));
        else
            json_array_append_new(a, json_integer(b));
    }
    return a;
}

static json_t *coll_caps_json(const struct cf_probe *p, int i)
{
    static const char *const colls[] = {"all_reduce",     "broadcast",
                                        "reduce",         "all_gather",
                                        "reduce_scatter", "all_to_all",
                                        "send_recv"};
    static const char *const ops[] = {"sum", "prod", "max", "min", "avg"};
    const keel_collective_caps *c = &p->coll_caps[i];
    json_t *a, *o;

    if (p->coll_declared[i] != 1)
        return json_pack("{s:b,s:s}", "declared", 0, "meaning",
                         p->coll_declared[i] < 0
                             ? p->coll_why[i]
                             : "not declared (no ABI 1.2 collective.get_caps):"
                               " every collective, dtype and op was tried; "
                               "NOT_SUPPORTED was accepted");
    o = json_pack("{s:b,s:o,s:I}", "declared", 1, "dtypes",
                  names_of_bits(c->dtype_mask, true), "timeout_ms",
                  (json_int_t)c->timeout_ms);
    a = json_array();
    for (unsigned b = 0; b < sizeof(colls) / sizeof(colls[0]); b++)
        if (c->collectives & (1u << b))
            json_array_append_new(a, json_string(colls[b]));
    json_object_set_new(o, "collectives", a);
    a = json_array();
    for (unsigned b = 0; b < sizeof(ops) / sizeof(ops[0]); b++)
        if (c->reduce_ops & (1u << b))
            json_array_append_new(a, json_string(ops[b]));
    json_object_set_new(o, "reduce_ops", a);
    return o;
}

static json_t *device_json(const struct cf_probe *p, int i)
{
    const keel_device_props *d = &p->props[i];
    json_t *o;

    o = json_pack(
        "{s:i,s:s,s:s,s:s,s:s,s:s,s:I,s:i,s:i,s:o,s:o,s:i,s:i,s:{s:I,s:I,"
        "s:I}}",
        "index", (int)p->dev[i], "name", d->name, "vendor", d->vendor, "arch",
        d->arch, "driver_version", d->driver_version, "bus_id", d->bus_id,
        "total_memory", (json_int_t)d->total_memory, "compute_units",
        (int)d->compute_units, "clock_khz", (int)d->clock_khz, "dtypes",
        names_of_bits(d->dtype_mask, true), "features",
        names_of_bits(d->features, false), "alloc_alignment",
        (int)d->alloc_alignment, "stream_priorities",
        (int)d->stream_priorities, "memory", "total",
        (json_int_t)p->mem[i].total, "free", (json_int_t)p->mem[i].free,
        "used", (json_int_t)p->mem[i].used);
    if (o)
        json_object_set_new(o, "collective_caps", coll_caps_json(p, i));
    return o;
}

static json_t *known_json(const struct cf_known_failure *k)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "test", k->test, "plugin",
                     k->plugin ? k->plugin : "*", "version",
                     k->version ? k->version : "*", "device",
                     k->device ? k->device : "*", "reason", k->reason,
                     "issue", k->issue);
}

static json_t *config_json(const struct cf_config *cfg)
{
    json_t *o = json_object(), *tol = json_object(), *feat = json_object();
    json_t *devs, *known = json_array();

    json_object_set_new(o, "file", cfg->path ? json_string(cfg->path)
                                             : json_null());
    if (cfg->all_devices) {
        devs = json_string("all");
    } else {
        devs = json_array();
        for (int i = 0; i < cfg->ndevices; i++)
            json_array_append_new(devs, json_integer(cfg->devices[i]));
    }
    json_object_set_new(o, "devices", devs);
    json_object_set_new(o, "kernel_devices",
                        json_string(cfg->kernels_all_devices ? "all"
                                                             : "first"));
    json_object_set_new(o, "seed", json_integer((json_int_t)cfg->seed));
    for (int dt = 0; dt < KEEL_DTYPE_COUNT_; dt++)
        if (cf_dtype_is_float(dt))
            json_object_set_new(tol, cf_dtype_name(dt),
                                json_real(cfg->tolerance[dt]));
    json_object_set_new(o, "tolerances", tol);
    if (cfg->dtypes_claimed)
        json_object_set_new(feat, "dtypes",
                            names_of_bits(cfg->claimed_dtypes, true));
    for (uint32_t b = 0; b < 32; b++)
        if (cfg->feature_given & (1u << b) && cf_feature_name(1u << b))
            json_object_set_new(feat, cf_feature_name(1u << b),
                                json_boolean(cfg->feature_value & (1u << b)));
    json_object_set_new(o, "features", feat);
    json_object_set_new(o, "timeouts",
                        json_pack("{s:f,s:f,s:i}", "test", cfg->test_timeout_s,
                                  "suite", cfg->suite_timeout_s,
                                  "collective_ms",
                                  (int)cfg->collective_timeout_ms));
    json_object_set_new(o, "e2e", json_pack("{s:i}", "steps", cfg->e2e_steps));
    for (int i = 0; i < cfg->nknown; i++)
        json_array_append_new(known, known_json(&cfg->known[i]));
    json_object_set_new(o, "known_failures", known);
    return o;
}

static json_t *results_json(const struct cf_config *cfg)
{
    json_t *a = json_array();

    for (int i = 0; i < cf_ntests; i++) {
        const struct cf_test *t = &cf_tests[i];
        json_t *r;

        if (!t->selected)
            continue;
        r = json_pack("{s:s,s:s,s:s,s:s,s:f,s:s}", "id", t->id, "suite",
                      t->suite, "level", cf_level_name(t->level), "result",
                      cf_outcome_name(t->outcome), "time_ms", t->ms,
                      "message", t->message ? t->message : "");
        if (t->known >= 0)
            json_object_set_new(r, "known_failure",
                                known_json(&cfg->known[t->known]));
        if (t->op >= 0 && t->dtype >= 0) {
            json_object_set_new(
                r, "op", json_string(keel_op_get_info((keel_op_id)t->op)->name));
            json_object_set_new(r, "dtype", json_string(cf_dtype_name(t->dtype)));
        }
        /* The worst NMSE against its bound; a non-finite one is null. */
        if (t->has_nmse) {
            json_object_set_new(r, "nmse", isfinite(t->nmse)
                                               ? json_real(t->nmse)
                                               : json_null());
            json_object_set_new(r, "tolerance", json_real(t->tol));
        }
        json_array_append_new(a, r);
    }
    return a;
}

static json_t *known_applied_json(const struct cf_config *cfg)
{
    json_t *a = json_array();

    for (int k = 0; k < cfg->nknown; k++) {
        json_t *tests = json_array(), *e;

        for (int i = 0; i < cf_ntests; i++)
            if (cf_tests[i].selected && cf_tests[i].known == k)
                json_array_append_new(tests, json_string(cf_tests[i].id));
        if (json_array_size(tests) == 0) {
            json_decref(tests);
            continue;
        }
        e = known_json(&cfg->known[k]);
        json_object_set_new(e, "tests", tests);
        json_array_append_new(a, e);
    }
    return a;
}

json_t *cf_build_report(const struct cf_run_info *ri, char *err, size_t errsz)
{
    const struct cf_probe *p = ri->probe;
    int pass, fail, skip, known, notrun;
    char when[64];
    time_t t0 = (time_t)ri->started;
    struct tm tm;
    json_t *root, *devs = json_array(), *filters = json_array();

    cf_count(&pass, &fail, &skip, &known, &notrun);
    gmtime_r(&t0, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    for (int i = 0; i < p->ndev; i++)
        json_array_append_new(devs, device_json(p, i));
    for (int i = 0; i < ri->opt->nfilters; i++)
        json_array_append_new(filters, json_string(ri->opt->filters[i]));
    root = json_pack(
        "{s:i,s:{s:s,s:s,s:s,s:i},s:{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:b,s:s?,"
        "s:s?,s:i},s:o,s:o,s:s,s:o,s:s,s:f,s:o,s:o,s:{s:i,s:i,s:i,s:i,s:i},"
        "s:{s:s?,s:b}}",
        "format", 1, "tool", "name", "keel conform", "keel_version",
        keel_version(), "device_abi", KEEL_ABI_STRING, "op_catalog_version",
        KEEL_OP_CATALOG_VERSION, "plugin", "path", p->path, "sha256",
        ri->sha256, "name", p->name, "version", p->version, "abi_version",
        "", "device_type", p->device_type, "description", p->description,
        "loaded", p->loaded, "failed_check",
        p->failed_check[0] ? p->failed_check : NULL, "reason",
        p->reason[0] ? p->reason : NULL, "device_count", (int)p->device_count,
        "devices", devs, "config", config_json(ri->cfg), "level",
        cf_level_name(ri->opt->level), "filters", filters, "started_at", when,
        "duration_s", ri->seconds, "results", results_json(ri->cfg),
        "known_failures_applied", known_applied_json(ri->cfg), "summary",
        "passed", pass, "failed", fail + notrun, "skipped", skip, "known",
        known, "total", pass + fail + skip + known + notrun, "certification",
        "level", ri->certified, "certified", ri->certified != NULL);
    if (!root) {
        snprintf(err, errsz, "cannot build the report (out of memory)");
        return NULL;
    }
    {
        json_t *sf = json_array();

        for (int s = 0; s < cf_nsuites; s++)
            if (cf_suites[s].exit_failure[0])
                json_array_append_new(
                    sf, json_pack("{s:s,s:s}", "suite", cf_suites[s].name,
                                  "message", cf_suites[s].exit_failure));
        json_object_set_new(root, "suite_failures", sf);
        json_object_set_new(json_object_get(root, "summary"),
                            "suite_failures",
                            json_integer(cf_count_suite_failures()));
    }
    {
        char abi[32];
        snprintf(abi, sizeof(abi), "%u.%u", p->abi_major, p->abi_minor);
        json_object_set_new(json_object_get(root, "plugin"), "abi_version",
                            json_string(abi));
    }
    return root;
}

int cf_write_report(const char *path, const struct cf_run_info *ri, char *err,
                    size_t errsz)
{
    json_t *root = cf_build_report(ri, err, errsz);
    int rc;

    if (!root)
        return -1;
    rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    if (rc) {
        snprintf(err, errsz, "%s: cannot write the report: %s", path,
                 strerror(errno));
        return -1;
    }
    return 0;
}
