/*
 * Tests of the kit's mutant generator (keel_kit_mutant_count,
 * keel_kit_mutate) over the valid launch of every catalog op: counts are
 * stable, ids unique, each mutant differs from the valid launch exactly
 * where its id says, points into its own storage, and nothing is written
 * outside the struct.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>

#include "kc.h"

static bool same_desc(const keel_tensor_desc *a, const keel_tensor_desc *b,
                      bool strides)
{
    if (a->data != b->data || a->dtype != b->dtype || a->ndim != b->ndim)
        return false;
    for (int k = 0; k < a->ndim; k++)
        if (a->shape[k] != b->shape[k] ||
            (strides && a->strides[k] != b->strides[k]))
            return false;
    return true;
}

static bool same_attr(const keel_attr *a, const keel_attr *b)
{
    if (strcmp(a->name, b->name) || a->type != b->type)
        return false;
    switch (a->type) {
    case KEEL_ATTR_FLOAT:
        return a->v.f == b->v.f || (a->v.f != a->v.f && b->v.f != b->v.f);
    case KEEL_ATTR_STRING:
        return !strcmp(a->v.s, b->v.s);
    case KEEL_ATTR_INTS:
        return a->v.ints.count == b->v.ints.count &&
               (!a->v.ints.count ||
                !memcmp(a->v.ints.data, b->v.ints.data,
                        sizeof(int64_t) * (size_t)a->v.ints.count));
    case KEEL_ATTR_FLOATS:
        return a->v.floats.count == b->v.floats.count &&
               (!a->v.floats.count ||
                !memcmp(a->v.floats.data, b->v.floats.data,
                        sizeof(double) * (size_t)a->v.floats.count));
    default:
        return a->v.i == b->v.i;
    }
}

static bool inside(const void *p, const keel_kit_mutant *m)
{
    const char *c = p, *lo = (const char *)m;
    return c >= lo && c < lo + sizeof(*m);
}

/* Why mutant m of launch v is not what its id says, or NULL. */
static const char *check_mutant(const keel_kernel_args *v,
                                const keel_kit_mutant *m)
{
    const keel_kernel_args *a = &m->args;
    char side[4] = "";
    int idx = -1, dim = -1, n = 0;
    bool is_t = false;
    static char why[160];

    if (a->inputs != m->in || a->outputs != m->out || a->attrs != m->attrs)
        return "args does not point into the mutant";
    if (a->device != v->device || a->stream != v->stream ||
        a->struct_size != v->struct_size)
        return "device, stream or struct_size changed";
    if (sscanf(m->what, "%3[a-z]%d.%n", side, &idx, &n) == 2 && n > 0 &&
        (!strcmp(side, "in") || !strcmp(side, "out")))
        is_t = true;
    if (is_t) {
        bool out = side[0] == 'o';
        const keel_tensor_desc *o = out ? &v->outputs[idx] : &v->inputs[idx];
        const keel_tensor_desc *d = out ? &m->out[idx] : &m->in[idx];
        const char *f = m->what + n;
        keel_tensor_desc want = *o;
        char dt[16];

        if (a->num_inputs != v->num_inputs ||
            a->num_outputs != v->num_outputs || a->num_attrs != v->num_attrs)
            return "a tensor mutant changed the counts";
        for (int i = 0; i < v->num_inputs; i++)
            if ((out || i != idx) && !same_desc(&v->inputs[i], &m->in[i], true))
                return "another input changed";
        for (int i = 0; i < v->num_outputs; i++)
            if ((!out || i != idx) &&
                !same_desc(&v->outputs[i], &m->out[i], true))
                return "another output changed";
        for (int i = 0; i < v->num_attrs; i++)
            if (!same_attr(&v->attrs[i], &m->attrs[i]))
                return "an attribute changed";
        if (sscanf(f, "dim%d", &dim) == 1 && strstr(f, "+1"))
            want.shape[dim]++;
        else if (sscanf(f, "dim%d", &dim) == 1 && strstr(f, "-1"))
            want.shape[dim]--;
        else if (!strcmp(f, "ndim+1"))
            want.shape[want.ndim++] = 1;
        else if (!strcmp(f, "ndim-1"))
            want.ndim--;
        else if (sscanf(f, "dtype=%15s", dt) == 1) {
            bool found = false;
            for (int t = 0; t < KEEL_DTYPE_COUNT_; t++)
                if (!strcmp(keel_kit_dtype_name((keel_dtype)t), dt)) {
                    want.dtype = (keel_dtype)t;
                    found = true;
                }
            if (!found || want.dtype == o->dtype)
                return "dtype mutant to an unknown or the same dtype";
        } else
            return "unknown tensor mutation";
        if (!same_desc(&want, d, false))
            return "the tensor is not changed as the id says";
        if (keel_kit_contiguous(o) && !keel_kit_contiguous(d))
            return "a contiguous tensor lost its contiguity";
        return NULL;
    }
    if (!strcmp(m->what, "drop last input") ||
        !strcmp(m->what, "add input") ||
        !strcmp(m->what, "drop last output") ||
        !strcmp(m->what, "add output")) {
        bool in = strstr(m->what, "input") != NULL;
        int dn = m->what[0] == 'd' ? -1 : 1;
        int nv = in ? v->num_inputs : v->num_outputs;
        int nm = in ? a->num_inputs : a->num_outputs;
        const keel_tensor_desc *tv = in ? v->inputs : v->outputs;
        const keel_tensor_desc *tm = in ? m->in : m->out;

        if (nm != nv + dn || (in ? a->num_outputs != v->num_outputs
                                 : a->num_inputs != v->num_inputs) ||
            a->num_attrs != v->num_attrs)
            return "the counts are not changed as the id says";
        for (int i = 0; i < (dn < 0 ? nm : nv); i++)
            if (!same_desc(&tv[i], &tm[i], true))
                return "a kept tensor changed";
        if (dn > 0 && !same_desc(&tv[nv - 1], &tm[nv], true))
            return "the added tensor is not a copy of the last";
        return NULL;
    }
    if (!strncmp(m->what, "attr ", 5)) {
        char name[32];
        int changed = 0;
        size_t nl = strcspn(m->what + 5, "+-=[");
        if (nl >= sizeof(name))
            return "attribute name too long";
        memcpy(name, m->what + 5, nl);
        name[nl] = 0;
        if (a->num_inputs != v->num_inputs ||
            a->num_outputs != v->num_outputs)
            return "an attribute mutant changed the tensor counts";
        for (int i = 0; i < v->num_inputs; i++)
            if (!same_desc(&v->inputs[i], &m->in[i], true))
                return "an attribute mutant changed an input";
        for (int i = 0; i < v->num_outputs; i++)
            if (!same_desc(&v->outputs[i], &m->out[i], true))
                return "an attribute mutant changed an output";
        if (a->num_attrs != v->num_attrs &&
            !(a->num_attrs == v->num_attrs + 1 &&
              !strcmp(m->attrs[v->num_attrs].name, name) &&
              !keel_kit_attr(v, name)))
            return "the attribute count changed other than by adding it";
        for (int i = 0; i < v->num_attrs; i++)
            if (!same_attr(&v->attrs[i], &m->attrs[i])) {
                if (strcmp(v->attrs[i].name, name))
                    return "another attribute changed";
                changed++;
            }
        if (a->num_attrs == v->num_attrs && changed != 1)
            return "the named attribute is unchanged";
        for (int i = 0; i < a->num_attrs; i++) {
            const keel_attr *t = &m->attrs[i];
            if (t->type == KEEL_ATTR_INTS && t->v.ints.count &&
                !same_attr(t, i < v->num_attrs ? &v->attrs[i] : t) &&
                !inside(t->v.ints.data, m))
                return "a mutated list points outside the mutant";
        }
        snprintf(why, sizeof(why), "%s", "");
        return NULL;
    }
    return "unknown mutation id";
}

static void t_every_op(void)
{
    static struct {
        unsigned char front[64];
        keel_kit_mutant m;
        unsigned char back[64];
    } box;
    static char ids[1024][96];
    int total = 0;

    for (int op = 0; op < KEEL_OP_COUNT; op++) {
        struct kc_case c;
        char err[256];
        int n, n2;

        if (kc_case_build(op, &c, err, sizeof(err))) {
            CU_FAIL(err);
            printf("\n  %s\n", err);
            continue;
        }
        n = keel_kit_mutant_count(op, &c.args);
        n2 = keel_kit_mutant_count(op, &c.args);
        CU_ASSERT(n > 0);
        CU_ASSERT_EQUAL(n, n2);
        for (int k = 0; k < n; k++) {
            const char *why;
            memset(box.front, 0xa5, sizeof(box.front));
            memset(box.back, 0x5a, sizeof(box.back));
            if (!keel_kit_mutate(op, &c.args, k, &box.m)) {
                CU_FAIL("keel_kit_mutate failed below the count");
                continue;
            }
            for (size_t b = 0; b < sizeof(box.front); b++)
                if (box.front[b] != 0xa5 || box.back[b] != 0x5a) {
                    CU_FAIL("written outside the mutant");
                    break;
                }
            why = check_mutant(&c.args, &box.m);
            if (why) {
                printf("\n  %s mutant %d '%s': %s\n",
                       keel_kit_op_info(op)->name, k, box.m.what, why);
                CU_FAIL("mutant differs from its id");
            }
            /* ids are unique within an op */
            for (int j = 0; j < k && j < 1024; j++)
                if (!strcmp(ids[j], box.m.what)) {
                    printf("\n  %s: id '%s' twice\n",
                           keel_kit_op_info(op)->name, ids[j]);
                    CU_FAIL("duplicate id");
                }
            if (k < 1024)
                memcpy(ids[k], box.m.what, sizeof(ids[k]));
            total++;
        }
        CU_ASSERT_FALSE(keel_kit_mutate(op, &c.args, n, &box.m));
        CU_ASSERT_FALSE(keel_kit_mutate(op, &c.args, -1, &box.m));
    }
    printf("\n  %d mutants over %d ops\n", total, (int)KEEL_OP_COUNT);
}

/* The k-th mutant is the same on every call (the ids the before-table
 * keys on). */
static void t_deterministic(void)
{
    static keel_kit_mutant a, b;
    struct kc_case c;
    char err[256];

    CU_ASSERT_EQUAL_FATAL(kc_case_build(KEEL_OP_CONV2D, &c, err, 256), 0);
    for (int k = 0; k < keel_kit_mutant_count(KEEL_OP_CONV2D, &c.args); k++) {
        memset(&a, 0x11, sizeof(a));
        memset(&b, 0x22, sizeof(b));
        CU_ASSERT(keel_kit_mutate(KEEL_OP_CONV2D, &c.args, k, &a));
        CU_ASSERT(keel_kit_mutate(KEEL_OP_CONV2D, &c.args, k, &b));
        CU_ASSERT_STRING_EQUAL(a.what, b.what);
        CU_ASSERT_EQUAL(a.args.num_inputs, b.args.num_inputs);
        CU_ASSERT_EQUAL(a.args.num_attrs, b.args.num_attrs);
        CU_ASSERT(!memcmp(a.in, b.in, sizeof(a.in)));
        CU_ASSERT(!memcmp(a.out, b.out, sizeof(a.out)));
    }
}

static int find(int op, const keel_kernel_args *v, const char *what,
                keel_kit_mutant *m)
{
    for (int k = 0; k < keel_kit_mutant_count(op, v); k++)
        if (keel_kit_mutate(op, v, k, m) && !strcmp(m->what, what))
            return k;
    printf("\n  no mutant '%s'\n", what);
    return -1;
}

/* conv2d x f32[2,4,9,9], w f32[6,2,3,3], b f32[6] -> f32[2,6,5,5]:
 * examples of each family, by value. */
static void t_conv2d_examples(void)
{
    static keel_kit_mutant m;
    struct kc_case c;
    char err[256];
    const keel_attr *t;
    int op = KEEL_OP_CONV2D;

    CU_ASSERT_EQUAL_FATAL(kc_case_build(op, &c, err, 256), 0);
    CU_ASSERT_FATAL(find(op, &c.args, "out0.dim1+1", &m) >= 0);
    CU_ASSERT_EQUAL(m.out[0].shape[1], 7);
    CU_ASSERT_EQUAL(m.out[0].strides[0], 7 * 5 * 5);
    CU_ASSERT_FATAL(find(op, &c.args, "in1.dtype=int32", &m) >= 0);
    CU_ASSERT_EQUAL(m.in[1].dtype, KEEL_I32);
    CU_ASSERT_FATAL(find(op, &c.args, "in0.dtype=float64", &m) >= 0);
    CU_ASSERT_FATAL(find(op, &c.args, "in2.ndim-1", &m) >= 0);
    CU_ASSERT_EQUAL(m.in[2].ndim, 0);
    CU_ASSERT_FATAL(find(op, &c.args, "drop last input", &m) >= 0);
    CU_ASSERT_EQUAL(m.args.num_inputs, 2);
    CU_ASSERT_FATAL(find(op, &c.args, "add output", &m) >= 0);
    CU_ASSERT_EQUAL(m.args.num_outputs, 2);
    CU_ASSERT_FATAL(find(op, &c.args, "attr groups=2^40", &m) >= 0);
    t = keel_kit_attr(&m.args, "groups");
    CU_ASSERT_FATAL(t != NULL);
    CU_ASSERT_EQUAL(t->v.i, INT64_C(1) << 40);
    /* an attribute the launch leaves out starts from its default */
    CU_ASSERT_FATAL(find(op, &c.args, "attr dilation[1]+1", &m) >= 0);
    t = keel_kit_attr(&m.args, "dilation");
    CU_ASSERT_FATAL(t != NULL && t->type == KEEL_ATTR_INTS);
    CU_ASSERT_EQUAL(t->v.ints.count, 2);
    CU_ASSERT_EQUAL(t->v.ints.data[0], 1);
    CU_ASSERT_EQUAL(t->v.ints.data[1], 2);
    CU_ASSERT_FATAL(find(op, &c.args, "attr stride+[last]", &m) >= 0);
    t = keel_kit_attr(&m.args, "stride");
    CU_ASSERT_EQUAL(t->v.ints.count, 3);
    CU_ASSERT_EQUAL(t->v.ints.data[2], 2);
    CU_ASSERT_FATAL(find(op, &c.args, "attr padding_algorithm=bogus", &m) >=
                    0);
    CU_ASSERT_STRING_EQUAL(keel_kit_attr_s(&m.args, "padding_algorithm", ""),
                           "bogus");
    /* the valid launch itself is untouched by all this */
    CU_ASSERT_EQUAL(c.out[0].shape[1], 6);
    CU_ASSERT_EQUAL(c.args.num_attrs, 3);
}

static void t_other_families(void)
{
    static keel_kit_mutant m;
    struct kc_case c;
    char err[256];
    const keel_attr *t;

    CU_ASSERT_EQUAL_FATAL(kc_case_build(KEEL_OP_DROPOUT, &c, err, 256), 0);
    CU_ASSERT_FATAL(find(KEEL_OP_DROPOUT, &c.args, "attr p=nan", &m) >= 0);
    CU_ASSERT(isnan(keel_kit_attr_f(&m.args, "p", 0)));
    CU_ASSERT_FATAL(find(KEEL_OP_DROPOUT, &c.args, "attr training=2", &m) >=
                    0);
    t = keel_kit_attr(&m.args, "training");
    CU_ASSERT(t && t->type == KEEL_ATTR_BOOL && t->v.i == 2);
    CU_ASSERT_FATAL(find(KEEL_OP_DROPOUT, &c.args, "out1.dtype=float32",
                         &m) >= 0); /* the uint8 mask */
    CU_ASSERT_EQUAL_FATAL(kc_case_build(KEEL_OP_FULL, &c, err, 256), 0);
    CU_ASSERT_FATAL(find(KEEL_OP_FULL, &c.args, "attr dtype=99", &m) >= 0);
    CU_ASSERT_EQUAL(keel_kit_attr(&m.args, "dtype")->v.i, 99);
    CU_ASSERT_FATAL(find(KEEL_OP_FULL, &c.args, "attr shape=[]", &m) >= 0);
    CU_ASSERT_EQUAL(keel_kit_attr(&m.args, "shape")->v.ints.count, 0);
    CU_ASSERT_EQUAL(find(KEEL_OP_FULL, &c.args, "drop last input", &m), -1);
    CU_ASSERT_EQUAL_FATAL(kc_case_build(KEEL_OP_SUM, &c, err, 256), 0);
    CU_ASSERT_FATAL(find(KEEL_OP_SUM, &c.args, "attr axis[0]=-1", &m) >= 0);
    CU_ASSERT_EQUAL(keel_kit_attr(&m.args, "axis")->v.ints.data[0], -1);
    CU_ASSERT_EQUAL(keel_kit_attr(&c.args, "axis")->v.ints.data[0], 1);
    CU_ASSERT_EQUAL_FATAL(kc_case_build(KEEL_OP_TOPK, &c, err, 256), 0);
    CU_ASSERT_FATAL(find(KEEL_OP_TOPK, &c.args, "attr k-1", &m) >= 0);
    CU_ASSERT_EQUAL(keel_kit_attr_i(&m.args, "k", 0), 2);
    CU_ASSERT_FATAL(find(KEEL_OP_TOPK, &c.args, "out1.dtype=float32", &m) >=
                    0); /* int64 indices */
    CU_ASSERT_FATAL(find(KEEL_OP_TOPK, &c.args, "out1.dtype=int32", &m) >= 0);
}

static void t_bad_calls(void)
{
    static keel_kit_mutant m;
    struct kc_case c;
    char err[256];

    CU_ASSERT_EQUAL_FATAL(kc_case_build(KEEL_OP_ADD, &c, err, 256), 0);
    CU_ASSERT_EQUAL(keel_kit_mutant_count(-1, &c.args), 0);
    CU_ASSERT_EQUAL(keel_kit_mutant_count(KEEL_OP_COUNT, &c.args), 0);
    CU_ASSERT_EQUAL(keel_kit_mutant_count(KEEL_OP_ADD, NULL), 0);
    CU_ASSERT_FALSE(keel_kit_mutate(KEEL_OP_ADD, &c.args, 0, NULL));
    c.args.num_inputs = KEEL_KIT_MUTANT_MAX_TENSORS;
    CU_ASSERT_EQUAL(keel_kit_mutant_count(KEEL_OP_ADD, &c.args), 0);
    CU_ASSERT_FALSE(keel_kit_mutate(KEEL_OP_ADD, &c.args, 0, &m));
}

int main(void)
{
    CU_pSuite s;
    unsigned fails;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    s = CU_add_suite("kit-mutate", NULL, NULL);
    CU_add_test(s, "every op", t_every_op);
    CU_add_test(s, "deterministic", t_deterministic);
    CU_add_test(s, "conv2d examples", t_conv2d_examples);
    CU_add_test(s, "other families", t_other_families);
    CU_add_test(s, "bad calls", t_bad_calls);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    fails = CU_get_number_of_failures();
    CU_cleanup_registry();
    return fails ? 1 : 0;
}
