/* Helpers of the kit tests (kit_testlib.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>

#include "kit_testlib.h"

void kt_init(struct kt *k, int op)
{
    memset(k, 0, sizeof(*k));
    k->op = op;
}

static keel_tensor_desc *desc(keel_tensor_desc *d, keel_dtype dt, int ndim,
                              const int64_t *shape)
{
    int64_t s = 1;

    memset(d, 0, sizeof(*d));
    d->dtype = dt;
    d->ndim = ndim;
    d->data = 0x1000;
    for (int i = ndim - 1; i >= 0; i--) {
        d->shape[i] = shape[i];
        d->strides[i] = s;
        if (__builtin_mul_overflow(s, shape[i] > 0 ? shape[i] : 1, &s))
            s = INT64_MAX;
    }
    return d;
}

keel_tensor_desc *kt_in(struct kt *k, keel_dtype dt, int ndim,
                        const int64_t *shape)
{
    return desc(&k->in[k->nin++], dt, ndim, shape);
}

keel_tensor_desc *kt_out(struct kt *k, keel_dtype dt, int ndim,
                         const int64_t *shape)
{
    keel_tensor_desc *d = desc(&k->out[k->nout], dt, ndim, shape);

    memcpy(k->out_made[k->nout++], d->strides, sizeof(d->strides));
    return d;
}

static keel_attr *attr(struct kt *k, const char *name, keel_attr_type t)
{
    keel_attr *a = NULL;

    for (int i = 0; i < k->nattr; i++)
        if (!strcmp(k->attr[i].name, name))
            a = &k->attr[i];
    if (!a)
        a = &k->attr[k->nattr++];
    memset(a, 0, sizeof(*a));
    a->name = name;
    a->type = t;
    return a;
}

void kt_attr_i(struct kt *k, const char *name, int64_t v)
{
    attr(k, name, KEEL_ATTR_INT)->v.i = v;
}

void kt_attr_b(struct kt *k, const char *name, int v)
{
    attr(k, name, KEEL_ATTR_BOOL)->v.i = v;
}

void kt_attr_f(struct kt *k, const char *name, double v)
{
    attr(k, name, KEEL_ATTR_FLOAT)->v.f = v;
}

void kt_attr_s(struct kt *k, const char *name, const char *v)
{
    attr(k, name, KEEL_ATTR_STRING)->v.s = v;
}

void kt_attr_dt(struct kt *k, const char *name, keel_dtype v)
{
    attr(k, name, KEEL_ATTR_DTYPE)->v.i = v;
}

void kt_attr_ints(struct kt *k, const char *name, int n, const int64_t *v)
{
    keel_attr *a = attr(k, name, KEEL_ATTR_INTS);
    int slot = (int)(a - k->attr);

    memcpy(k->ints[slot], v, sizeof(int64_t) * (size_t)n);
    a->v.ints.data = k->ints[slot];
    a->v.ints.count = n;
}

void kt_attr_floats(struct kt *k, const char *name, int n, const double *v)
{
    keel_attr *a = attr(k, name, KEEL_ATTR_FLOATS);
    int slot = (int)(a - k->attr);

    memcpy(k->floats[slot], v, sizeof(double) * (size_t)n);
    a->v.floats.data = k->floats[slot];
    a->v.floats.count = n;
}

/* ---- kt_spec: a launch in one line ---------------------------------------- */

static _Noreturn void spec_die(const char *spec, const char *at, const char *why)
{
    fprintf(stderr, "kt_spec: %s at \"%s\" in \"%s\"\n", why, at, spec);
    abort();
}

static keel_dtype spec_dtype(const char *spec, const char *s, size_t len)
{
    static const struct {
        const char *name;
        keel_dtype dt;
    } names[] = {{"f32", KEEL_F32}, {"f64", KEEL_F64}, {"f16", KEEL_F16},
                 {"bf16", KEEL_BF16}, {"i8", KEEL_I8},  {"u8", KEEL_U8},
                 {"i32", KEEL_I32}, {"i64", KEEL_I64}, {"bool", KEEL_BOOL}};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strlen(names[i].name) == len && !strncmp(s, names[i].name, len))
            return names[i].dt;
    spec_die(spec, s, "unknown dtype");
}

/* The comma-separated numbers at *s, up to `max`; *s moves past them. */
static int spec_ints(const char *spec, const char **s, int64_t *v, int max)
{
    int n = 0;
    char *end;

    for (;;) {
        if (n == max)
            spec_die(spec, *s, "too many numbers");
        v[n++] = strtoll(*s, &end, 10);
        if (end == *s)
            spec_die(spec, *s, "a number wanted");
        *s = end;
        if (**s != ',')
            return n;
        (*s)++;
    }
}

/* Whether the number (or [list]) of `len` chars at s is a float one: a
 * dot, an exponent, inf or nan. */
static bool spec_is_float(const char *s, size_t len)
{
    const char *e = s + len;

    if (*s == '[')
        s++;
    for (const char *p = s; p < e; p++)
        if (*p == '.' || *p == 'e' || *p == 'E' || *p == 'i' || *p == 'n')
            return true;
    return false;
}

static char *spec_copy(struct kt *k, const char *spec, const char *s,
                       size_t len)
{
    char *p;

    if (k->npool == 2 * KT_MAX || len >= sizeof(k->pool[0]))
        spec_die(spec, s, "out of room for names");
    p = k->pool[k->npool++];
    memcpy(p, s, len);
    p[len] = 0;
    return p;
}

/* The attribute name=value of `len` chars at s. */
static void spec_attr(struct kt *k, const char *spec, const char *s,
                      size_t len)
{
    const char *eq = memchr(s, '=', len);
    const char *v, *e = s + len;
    char *name;
    size_t vl;

    if (!eq || eq == s)
        spec_die(spec, s, "name=value wanted");
    name = spec_copy(k, spec, s, (size_t)(eq - s));
    v = eq + 1;
    vl = (size_t)(e - v);
    if (vl == 0)
        spec_die(spec, s, "a value wanted");
    if (*v == '\'') {
        if (vl < 2 || v[vl - 1] != '\'')
            spec_die(spec, v, "an unclosed quote");
        kt_attr_s(k, name, spec_copy(k, spec, v + 1, vl - 2));
    } else if (*v == ':') {
        kt_attr_dt(k, name, spec_dtype(spec, v + 1, vl - 1));
    } else if (vl == 4 && !strncmp(v, "true", 4)) {
        kt_attr_b(k, name, 1);
    } else if (vl == 5 && !strncmp(v, "false", 5)) {
        kt_attr_b(k, name, 0);
    } else if (vl == 3 && !strncmp(v, "f[]", 3)) {
        kt_attr_floats(k, name, 0, NULL);
    } else if (*v == '[') {
        double f[KT_MAX];
        int64_t i[KT_MAX];
        const char *p = v + 1;
        int n = 0;
        bool fl = spec_is_float(v, vl);
        if (v[vl - 1] != ']')
            spec_die(spec, v, "an unclosed [");
        while (p < e - 1) {
            char *end;
            if (n == KT_MAX)
                spec_die(spec, v, "too many numbers");
            if (fl)
                f[n] = strtod(p, &end);
            else
                i[n] = strtoll(p, &end, 10);
            if (end == p)
                spec_die(spec, p, "a number wanted");
            n++;
            p = end;
            if (*p == ',')
                p++;
            else if (p != e - 1)
                spec_die(spec, p, "a comma wanted");
        }
        if (fl)
            kt_attr_floats(k, name, n, f);
        else
            kt_attr_ints(k, name, n, i);
    } else if ((*v == '-' || *v == '.' || (*v >= '0' && *v <= '9') ||
                !strncmp(v, "inf", 3) || !strncmp(v, "nan", 3)) &&
               spec_is_float(v, vl)) {
        char *end;
        double f = strtod(v, &end);
        if (end != e)
            spec_die(spec, v, "a float wanted");
        kt_attr_f(k, name, f);
    } else if (*v == '-' || (*v >= '0' && *v <= '9')) {
        char *end;
        int64_t i = strtoll(v, &end, 10);
        if (end != e)
            spec_die(spec, v, "an int wanted");
        kt_attr_i(k, name, i);
    } else {
        kt_attr_s(k, name, spec_copy(k, spec, v, vl));
    }
}

/* The tensor of `len` chars at s: an input or (out) an output. */
static void spec_tensor(struct kt *k, const char *spec, const char *s,
                        size_t len, keel_dtype dt, bool out)
{
    int64_t shape[KEEL_MAX_DIMS], strides[KEEL_MAX_DIMS];
    const char *p = s, *e = s + len;
    int n = 0, ns = -1;
    keel_tensor_desc *d;

    if (len >= 2 && !strncmp(p, "()", 2))
        p += 2;
    else
        n = spec_ints(spec, &p, shape, KEEL_MAX_DIMS);
    if (p < e && *p == '@') {
        p++;
        ns = spec_ints(spec, &p, strides, KEEL_MAX_DIMS);
        if (ns != n)
            spec_die(spec, s, "as many strides as dims wanted");
    }
    if (p < e && *p == ':') {
        dt = spec_dtype(spec, p + 1, (size_t)(e - p - 1));
        p = e;
    }
    if (p != e)
        spec_die(spec, p, "a tensor wanted");
    if ((out ? k->nout : k->nin) == KT_MAX)
        spec_die(spec, s, "too many tensors");
    d = out ? kt_out(k, dt, n, shape) : kt_in(k, dt, n, shape);
    if (ns >= 0)
        memcpy(d->strides, strides, sizeof(int64_t) * (size_t)ns);
}

void kt_spec(struct kt *k, int op, keel_dtype dt, const char *spec)
{
    const char *s = spec;
    int part = 0; /* 0 inputs, 1 outputs, 2 attributes */

    kt_init(k, op);
    while (*s) {
        size_t len;
        if (*s == ' ') {
            s++;
            continue;
        }
        if (*s == '>' || *s == '|') {
            int to = *s == '>' ? 1 : 2;
            if (to <= part)
                spec_die(spec, s, "'>' and '|' once each, in that order");
            part = to;
            s++;
            continue;
        }
        len = strcspn(s, " ");
        if (part == 2) {
            const char *q = memchr(s, '\'', len);
            if (q) { /* a quoted string may hold spaces */
                const char *c = strchr(q + 1, '\'');
                if (!c)
                    spec_die(spec, q, "an unclosed quote");
                len = (size_t)(c + 1 - s);
            }
            spec_attr(k, spec, s, len);
        } else {
            spec_tensor(k, spec, s, len, dt, part == 1);
        }
        s += len;
    }
}

void kt_cases(int op, keel_dtype dt, const char *script, const char *file,
              int line)
{
    const char *s = script;
    int n = 0;

    while (*s) {
        size_t len = strcspn(s, "\n");
        char text[512], *spec, *needle = NULL, *bang;
        int want;
        struct kt k;
        if (len == 0) {
            s++;
            continue;
        }
        if (len >= sizeof(text))
            spec_die(script, s, "a case too long");
        memcpy(text, s, len);
        text[len] = 0;
        s += len;
        n++;
        if (!strncmp(text, "ok ", 3)) {
            want = KEEL_STATUS_OK;
            spec = text + 3;
        } else if (!strncmp(text, "bad ", 4)) {
            want = KEEL_STATUS_INVALID_ARGUMENT;
            spec = text + 4;
        } else {
            spec_die(script, text, "'ok' or 'bad' wanted");
        }
        bang = strstr(spec, " ! ");
        if (bang) {
            if (want == KEEL_STATUS_OK)
                spec_die(script, text, "a needle on an ok case");
            *bang = 0;
            needle = bang + 3;
        }
        kt_spec(&k, op, dt, spec);
        if (!kt_verdict(&k, want, needle))
            fprintf(stderr, "%s:%d: case %d: %s%s%s\n", file, line, n, spec,
                    needle ? " ! " : "", needle ? needle : "");
        kt_expect(&k, want, needle, file, line);
    }
}

keel_status kt_run(struct kt *k)
{
    for (int i = 0; i < k->nout; i++) {
        keel_tensor_desc *d = &k->out[i];
        int64_t st = 1;
        if (memcmp(d->strides, k->out_made[i], sizeof(d->strides)))
            continue;
        for (int j = KEEL_MAX_DIMS - 1; j >= 0; j--) {
            bool in = j < d->ndim && d->ndim <= KEEL_MAX_DIMS;
            d->strides[j] = in ? st : 0;
            if (in && __builtin_mul_overflow(st, d->shape[j] > 0 ? d->shape[j] : 1,
                                             &st))
                st = INT64_MAX; /* overflow tests: any stride will do */
        }
        memcpy(k->out_made[i], d->strides, sizeof(d->strides));
    }
    keel_kernel_args a = {sizeof(a), 0, NULL, k->in, k->nin, k->out,
                          k->nout, k->attr, k->nattr, NULL, NULL};

    k->a = a;
    return keel_kit_check(k->op, &k->a, &k->msg);
}

bool kt_verdict(struct kt *k, int want, const char *needle)
{
    keel_status st = kt_run(k);
    bool ok = want < 0 ? st != KEEL_STATUS_OK : (int)st == want;

    return ok && (!needle || strstr(k->msg.text, needle));
}

void kt_expect(struct kt *k, int want, const char *needle, const char *file,
               int line)
{
    bool ok = kt_verdict(k, want, needle);
    keel_status st = kt_run(k);
    const keel_op_info *info = keel_kit_op_info(k->op);

    if (!ok)
        fprintf(stderr, "%s:%d: %s: status %d (wanted %d%s%s), message "
                "\"%s\"\n", file, line, info ? info->name : "?", (int)st,
                want, needle ? ", mentioning " : "", needle ? needle : "",
                k->msg.text);
    CU_assertImplementation(ok, (unsigned)line, "kit check verdict", file,
                            "", CU_FALSE);
}

int kt_main(const char *name, const CU_TestInfo *tests)
{
    CU_SuiteInfo suites[] = {{name, NULL, NULL, NULL, NULL,
                              (CU_TestInfo *)tests},
                             CU_SUITE_INFO_NULL};
    unsigned failed;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    if (CU_register_suites(suites) != CUE_SUCCESS) {
        CU_cleanup_registry();
        return 1;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
