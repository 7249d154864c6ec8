/*
 * keel conform — the test registry.
 *
 * Every test has an id "suite/name" (kernel tests: "kernels.<group>/<op>.
 * <dtype>"), a level (smoke < full < stress: a run at a level includes the
 * levels below) and a function. The areas list theirs in static tables; the
 * kernel area contributes one test per catalog op and catalog dtype, so a
 * new op in ops.def gets its tests without an edit here.
 */
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "conform.h"

struct cf_test *cf_tests;
int cf_ntests;
struct cf_suite *cf_suites;
int cf_nsuites;

static int cap_tests;

static const char *const level_names[] = {"smoke", "full", "stress"};

const char *cf_level_name(enum cf_level level)
{
    return (unsigned)level < 3 ? level_names[level] : "?";
}

int cf_level_parse(const char *s, enum cf_level *level)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, level_names[i])) {
            *level = (enum cf_level)i;
            return 0;
        }
    return -1;
}

const char *cf_outcome_name(enum cf_outcome o)
{
    switch (o) {
    case CF_PASS:
        return "pass";
    case CF_FAIL:
        return "fail";
    case CF_SKIP:
        return "skip";
    case CF_KNOWN:
        return "known_failure";
    case CF_XFAIL:
        return "known_failure_failed";
    case CF_XPASS:
        return "known_failure_passed";
    default:
        return "not_run";
    }
}

bool cf_glob(const char *pattern, const char *s)
{
    return fnmatch(pattern, s, 0) == 0;
}

/* ---- building ------------------------------------------------------------ */

static struct cf_suite *suite_find(const char *name)
{
    for (int i = 0; i < cf_nsuites; i++)
        if (!strcmp(cf_suites[i].name, name))
            return &cf_suites[i];
    return NULL;
}

static struct cf_suite *suite_get(const char *name)
{
    struct cf_suite *s = suite_find(name), *ns;

    if (s)
        return s;
    ns = realloc(cf_suites, (size_t)(cf_nsuites + 1) * sizeof(*ns));
    if (!ns)
        return NULL;
    cf_suites = ns;
    s = &cf_suites[cf_nsuites++];
    memset(s, 0, sizeof(*s));
    s->name = strdup(name);
    if (!s->name) {
        cf_nsuites--;
        return NULL;
    }
    s->ctx = !strcmp(name, "identity") ? CF_CTX_RAW : CF_CTX_CORE;
    return s;
}

static struct cf_test *test_add(const char *suite, const char *name,
                                enum cf_level level, cf_test_fn fn,
                                const char *doc)
{
    struct cf_suite *s = suite_get(suite);
    struct cf_test *t;

    if (!s)
        return NULL;
    if (cf_ntests == cap_tests) {
        int nc = cap_tests ? cap_tests * 2 : 256;
        struct cf_test *nt = realloc(cf_tests, (size_t)nc * sizeof(*nt));
        if (!nt)
            return NULL;
        cf_tests = nt;
        cap_tests = nc;
    }
    t = &cf_tests[cf_ntests++];
    memset(t, 0, sizeof(*t));
    snprintf(t->id, sizeof(t->id), "%s/%s", suite, name);
    t->suite = s->name;
    t->name = t->id + strlen(suite) + 1;
    t->level = level;
    t->fn = fn;
    t->doc = doc;
    t->op = -1;
    t->dtype = -1;
    t->known = -1;
    return t;
}

static int add_table(const struct cf_test_spec *spec)
{
    for (; spec->suite; spec++)
        if (!test_add(spec->suite, spec->name, spec->level, spec->fn,
                      spec->doc))
            return -1;
    return 0;
}

static int add_kernel_tests(void)
{
    for (int op = 0; op < KEEL_OP_COUNT; op++) {
        const keel_op_info *info = keel_op_get_info((keel_op_id)op);

        for (int dt = 0; dt < KEEL_DTYPE_COUNT_; dt++) {
            char name[96];
            struct cf_test *t;

            if (!(info->dtype_mask & KEEL_DTYPE_BIT(dt)))
                continue;
            snprintf(name, sizeof(name), "%s.%s", info->name,
                     cf_dtype_name(dt));
            t = test_add(cf_kernel_suite(op), name,
                         cf_kernel_in_smoke(op, dt) ? CF_LEVEL_SMOKE
                                                    : CF_LEVEL_FULL,
                         cf_kernel_test, info->semantics);
            if (!t)
                return -1;
            t->op = op;
            t->dtype = dt;
        }
    }
    return 0;
}

static int register_cunit(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return -1;
    for (int i = 0; i < cf_ntests; i++) {
        struct cf_test *t = &cf_tests[i];
        CU_pSuite s = CU_get_suite(t->suite);

        if (!s)
            s = CU_add_suite(t->suite, NULL, NULL);
        if (!s)
            return -1;
        t->cu_suite = s;
        t->cu_test = CU_add_test(s, t->name, t->fn);
        if (!t->cu_test)
            return -1;
    }
    return 0;
}

int cf_registry_build(void)
{
    static const struct cf_test_spec *const head[] = {
        cf_identity_tests, cf_device_tests, cf_memory_tests,
        cf_stream_tests,   cf_kernel_static_tests,
    };
    static const struct cf_test_spec *const tail[] = {
        cf_collective_tests, cf_concurrency_tests, cf_e2e_tests,
        cf_stress_tests,
    };

    for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
        if (add_table(head[i]))
            return -1;
    if (add_kernel_tests())
        return -1;
    for (size_t i = 0; i < sizeof(tail) / sizeof(tail[0]); i++)
        if (add_table(tail[i]))
            return -1;
    /* cf_tests moved while growing: point the names into the final ids. */
    for (int i = 0; i < cf_ntests; i++)
        cf_tests[i].name = cf_tests[i].id + strlen(cf_tests[i].suite) + 1;
    return register_cunit();
}

void cf_registry_select(enum cf_level level, const char *const *filters,
                        int nfilters)
{
    for (int s = 0; s < cf_nsuites; s++) {
        free(cf_suites[s].tests);
        cf_suites[s].tests = NULL;
        cf_suites[s].ntests = 0;
    }
    for (int i = 0; i < cf_ntests; i++) {
        struct cf_test *t = &cf_tests[i];
        bool match = nfilters == 0;
        struct cf_suite *s;

        for (int f = 0; f < nfilters && !match; f++)
            match = cf_glob(filters[f], t->id);
        t->selected = match && t->level <= level;
        if (!t->selected)
            continue;
        s = suite_find(t->suite);
        if (!s)
            continue;
        if (!s->tests)
            s->tests = calloc((size_t)cf_ntests, sizeof(int));
        if (s->tests)
            s->tests[s->ntests++] = i;
    }
}

void cf_registry_free(void)
{
    for (int i = 0; i < cf_ntests; i++)
        free(cf_tests[i].message);
    for (int s = 0; s < cf_nsuites; s++) {
        free(cf_suites[s].tests);
        free((char *)cf_suites[s].name);
    }
    free(cf_tests);
    free(cf_suites);
    cf_tests = NULL;
    cf_suites = NULL;
    cf_ntests = cf_nsuites = cap_tests = 0;
    if (CU_get_registry())
        CU_cleanup_registry();
}
