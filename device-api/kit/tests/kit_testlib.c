/* Helpers of the kit tests (kit_testlib.h). */
#include <stdio.h>
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
                          k->nout, k->attr, k->nattr};

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
