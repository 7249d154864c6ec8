/*
 * One valid launch per catalog op, as the core would send it (docs/ops.md,
 * "What a kernel receives"; core/src/shape_*.c): every tensor contiguous,
 * inputs already broadcast where the rule says so, outputs with the shapes
 * and dtypes the rule computes. A line reads
 *
 *     "inputs -> outputs | name=value;name=value"
 *
 * with tensors as dtype[dims] (f32 f64 f16 bf16 i8 u8 i32 i64 bool) and
 * attributes typed by the op's catalog spec (ints and floats as a,b,c;
 * dtype by name). Attributes left out take the catalog default.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc.h"

struct kc_line {
    const char *op;
    const char *text;
};

#define UNARY "f32[3,4] -> f32[3,4]"
#define BIN "f32[3,4] f32[3,4] -> f32[3,4]"
#define CMP "f32[3,4] f32[3,4] -> bool[3,4]"
#define RED "f32[3,4,5] -> f32[3,5] | axis=1"

static const struct kc_line table[] = {
    /* broadcast: inputs arrive broadcast to the output's shape */
    {"add", BIN}, {"subtract", BIN}, {"multiply", BIN}, {"divide", BIN},
    {"pow", BIN}, {"maximum", BIN}, {"minimum", BIN},
    {"floor_divide", BIN}, {"remainder", BIN},
    /* compare, logical: bool out */
    {"equal", CMP}, {"not_equal", CMP}, {"less", CMP}, {"less_equal", CMP},
    {"greater", CMP}, {"greater_equal", CMP},
    {"logical_and", "bool[3,4] bool[3,4] -> bool[3,4]"},
    {"logical_or", "bool[3,4] bool[3,4] -> bool[3,4]"},
    {"logical_xor", "bool[3,4] bool[3,4] -> bool[3,4]"},
    {"logical_not", "bool[3,4] -> bool[3,4]"},
    {"where", "bool[3,4] f32[3,4] f32[3,4] -> f32[3,4]"},
    /* same */
    {"neg", UNARY}, {"abs", UNARY}, {"sign", UNARY}, {"exp", UNARY},
    {"log", UNARY}, {"log1p", UNARY}, {"sqrt", UNARY}, {"rsqrt", UNARY},
    {"square", UNARY}, {"sin", UNARY}, {"cos", UNARY}, {"floor", UNARY},
    {"ceil", UNARY}, {"round", UNARY}, {"relu", UNARY}, {"relu6", UNARY},
    {"leaky_relu", UNARY " | negative_slope=0.2"},
    {"elu", UNARY " | alpha=0.7"},
    {"gelu", UNARY},
    {"silu", UNARY}, {"sigmoid", UNARY}, {"tanh", UNARY},
    {"softplus", UNARY " | beta=2;threshold=4"},
    {"hardswish", UNARY},
    {"clip", UNARY " | min=-1;max=2"},
    {"cast", "f32[3,4] -> i32[3,4] | dtype=int32"},
    /* creation */
    {"full", "-> f32[3,4] | shape=3,4;dtype=float32;value=1.5"},
    {"arange", "-> f32[5] | shape=5;dtype=float32;start=1;step=2"},
    {"linspace", "-> f32[5] | shape=5;dtype=float32;start=0;stop=1"},
    {"eye", "-> f32[3,4] | shape=3,4;dtype=float32"},
    {"uniform", "-> f32[3,4] | shape=3,4;dtype=float32;seed=7;offset=0"},
    {"normal", "-> f32[3,4] | shape=3,4;dtype=float32;seed=7;offset=0"},
    {"randint",
     "-> i64[3,4] | shape=3,4;dtype=int64;low=0;high=9;seed=7;offset=0"},
    {"bernoulli", UNARY " | seed=7;offset=0"},
    {"copy", UNARY},
    /* reductions */
    {"sum", RED}, {"mean", RED}, {"max", RED}, {"min", RED}, {"prod", RED},
    {"argmax", "f32[3,4,5] -> i64[3,5] | axis=1"},
    {"argmin", "f32[3,4,5] -> i64[3,5] | axis=1"},
    {"var", RED}, {"std", RED}, {"logsumexp", RED},
    {"all", "bool[3,4,5] -> bool[3,5] | axis=1"},
    {"any", "bool[3,4,5] -> bool[3,5] | axis=1"},
    {"cumsum", "f32[3,4] -> f32[3,4] | axis=1"},
    /* linear algebra */
    {"matmul", "f32[3,5] f32[5,4] -> f32[3,4]"},
    {"linear", "f32[2,5] f32[5,3] f32[3] -> f32[2,3]"},
    /* convolution: oh = (9 + 2 - 3) / 2 + 1 = 5 */
    {"conv2d", "f32[2,4,9,9] f32[6,2,3,3] f32[6] -> f32[2,6,5,5] | "
               "groups=2;stride=2,2;padding=1,1"},
    {"conv2d_grad",
     "f32[2,4,9,9] f32[6,2,3,3] f32[2,6,5,5] -> "
     "f32[2,4,9,9] f32[6,2,3,3] f32[6] | groups=2;stride=2,2;padding=1,1"},
    /* transposed: oh = (5 - 1) * 2 - 2 + 2 + 1 = 9 */
    {"conv2d_transpose", "f32[2,4,5,5] f32[4,3,3,3] f32[3] -> f32[2,3,9,9] | "
                         "stride=2,2;padding=1,1"},
    {"conv2d_transpose_grad",
     "f32[2,4,5,5] f32[4,3,3,3] f32[2,3,9,9] -> "
     "f32[2,4,5,5] f32[4,3,3,3] f32[3] | stride=2,2;padding=1,1"},
    /* pooling */
    {"max_pool2d", "f32[2,3,8,8] -> f32[2,3,4,4] i64[2,3,4,4] | "
                   "kernel_size=2,2"},
    {"max_pool2d_grad",
     "f32[2,3,8,8] i64[2,3,4,4] f32[2,3,4,4] -> f32[2,3,8,8]"},
    {"avg_pool2d", "f32[2,3,9,9] -> f32[2,3,5,5] | "
                   "kernel_size=3,3;stride=2,2;padding=1,1"},
    {"avg_pool2d_grad", "f32[2,3,9,9] f32[2,3,5,5] -> f32[2,3,9,9] | "
                        "kernel_size=3,3;stride=2,2;padding=1,1"},
    {"adaptive_avg_pool2d", "f32[2,3,9,7] -> f32[2,3,4,3] | output_size=4,3"},
    {"adaptive_avg_pool2d_grad",
     "f32[2,3,9,7] f32[2,3,4,3] -> f32[2,3,9,7] | output_size=4,3"},
    /* normalisation */
    {"batch_norm", "f32[4,3,5,5] f32[3] f32[3] f32[3] f32[3] -> "
                   "f32[4,3,5,5] f32[3] f32[3] | training=1"},
    {"batch_norm_grad", "f32[4,3,5,5] f32[3] f32[3] f32[3] f32[4,3,5,5] -> "
                        "f32[4,3,5,5] f32[3] f32[3]"},
    {"layer_norm", "f32[4,6,8] f32[8] f32[8] -> f32[4,6,8] f32[4,6] f32[4,6]"},
    {"layer_norm_grad", "f32[4,6,8] f32[8] f32[4,6] f32[4,6] f32[4,6,8] -> "
                        "f32[4,6,8] f32[8] f32[8]"},
    {"group_norm", "f32[2,6,4,4] f32[6] f32[6] -> "
                   "f32[2,6,4,4] f32[2,3] f32[2,3] | groups=3"},
    {"group_norm_grad",
     "f32[2,6,4,4] f32[6] f32[2,3] f32[2,3] f32[2,6,4,4] -> "
     "f32[2,6,4,4] f32[6] f32[6] | groups=3"},
    /* softmax and losses */
    {"softmax", "f32[5,9] -> f32[5,9]"},
    {"softmax_grad", "f32[5,9] f32[5,9] -> f32[5,9]"},
    {"log_softmax", "f32[5,9] -> f32[5,9]"},
    {"log_softmax_grad", "f32[5,9] f32[5,9] -> f32[5,9]"},
    {"cross_entropy", "f32[6,5] i64[6] -> f32[] f32[6,5]"},
    {"cross_entropy_grad", "f32[6,5] i64[6] f32[] -> f32[6,5]"},
    {"mse_loss", "f32[4,7] f32[4,7] -> f32[]"},
    {"bce_with_logits", "f32[4,7] f32[4,7] -> f32[]"},
    {"nll_loss", "f32[6,5] i64[6] -> f32[]"},
    {"embedding", "i64[3,4] f32[10,8] -> f32[3,4,8]"},
    {"embedding_grad", "i64[3,4] f32[3,4,8] -> f32[10,8] | num_embeddings=10"},
    {"dropout", "f32[4,33] -> f32[4,33] u8[4,33] | p=0.3;seed=7;offset=0"},
    {"one_hot", "i64[5] -> f32[5,4] | num_classes=4"},
    /* shape and indexing */
    {"concat", "f32[2,3] f32[2,5] -> f32[2,8] | axis=1"},
    {"stack", "f32[2,3] f32[2,3] -> f32[2,2,3] | axis=0"},
    {"split", "f32[7,4] -> f32[2,4] f32[2,4] f32[3,4] | "
              "sections=2,2,3;axis=0"},
    {"gather", "f32[5,4] i64[3] -> f32[3,4] | axis=0"},
    {"index_select", "f32[5,4] i64[3] -> f32[3,4] | axis=0"},
    {"scatter", "f32[5,4] i64[3] f32[3,4] -> f32[5,4] | overwrite=0"},
    {"take_along_axis", "f32[4,5] i64[4,3] -> f32[4,3] | axis=1"},
    {"tile", "f32[2,3] -> f32[4,3] | repeat_times=2,1"},
    {"flip", UNARY " | axis=0"},
    {"pad", "f32[3,4] -> f32[6,5] | pad=1,2,0,1"},
    {"topk", "f32[4,9] -> f32[4,3] i64[4,3] | k=3"},
    {"sort", "f32[4,9] -> f32[4,9] i64[4,9]"},
    {"argsort", "f32[4,9] -> i64[4,9]"},
    /* optimizer updates: no outputs */
    {"sgd_update", "f32[4,9] f32[4,9] -> | lr=0.1"},
    {"momentum_update", "f32[4,9] f32[4,9] f32[4,9] -> | lr=0.1"},
    {"adam_update", "f32[4,9] f32[4,9] f32[4,9] f32[4,9] -> | "
                    "lr=0.01;beta1_pow=0.9;beta2_pow=0.999"},
    {"adamw_update", "f32[4,9] f32[4,9] f32[4,9] f32[4,9] -> | "
                     "lr=0.01;beta1_pow=0.9;beta2_pow=0.999"},
    /* check_finite_and_unscale: x and found_inf in place, no outputs */
    {"check_finite_and_unscale", "f32[4,9] f32[1] bool[1] ->"},
    /* fused inference ops (catalog version 3): linear's and conv2d's
     * launches with an activation */
    {"fused_linear", "f32[2,5] f32[5,3] f32[3] -> f32[2,3] | activation=relu"},
    {"fused_conv2d", "f32[2,4,9,9] f32[6,2,3,3] f32[6] -> f32[2,6,5,5] | "
                     "groups=2;stride=2,2;padding=1,1;activation=gelu"},
    {NULL, NULL},
};

static const struct {
    const char *tok;
    keel_dtype dt;
} dtypes[] = {
    {"f32", KEEL_F32}, {"f64", KEEL_F64}, {"f16", KEEL_F16},
    {"bf16", KEEL_BF16}, {"i8", KEEL_I8}, {"u8", KEEL_U8},
    {"i32", KEEL_I32}, {"i64", KEEL_I64}, {"bool", KEEL_BOOL},
    {"float32", KEEL_F32}, {"float64", KEEL_F64}, {"float16", KEEL_F16},
    {"bfloat16", KEEL_BF16}, {"int8", KEEL_I8}, {"uint8", KEEL_U8},
    {"int32", KEEL_I32}, {"int64", KEEL_I64},
};

static int dtype_of(const char *s, size_t n, keel_dtype *dt)
{
    for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
        if (strlen(dtypes[i].tok) == n && !strncmp(dtypes[i].tok, s, n)) {
            *dt = dtypes[i].dt;
            return 0;
        }
    return -1;
}

static const char *parse_tensor(const char *s, keel_tensor_desc *d)
{
    const char *br = strchr(s, '[');
    char *end;
    int64_t stride = 1;

    memset(d, 0, sizeof(*d));
    if (!br || dtype_of(s, (size_t)(br - s), &d->dtype))
        return NULL;
    s = br + 1;
    while (*s != ']') {
        if (d->ndim >= KEEL_MAX_DIMS)
            return NULL;
        d->shape[d->ndim++] = strtoll(s, &end, 10);
        if (end == s)
            return NULL;
        s = *end == ',' ? end + 1 : end;
    }
    for (int k = d->ndim - 1; k >= 0; k--) {
        d->strides[k] = stride;
        stride *= d->shape[k] > 0 ? d->shape[k] : 1;
    }
    return s + 1;
}

/* The catalog type of attribute `name` of op, into type (NULL: none). */
static int spec_type(int op, const char *name, char *type, size_t n)
{
    const char *p = keel_kit_op_info(op)->attrs;
    size_t nl = strlen(name);

    while (p && *p) {
        const char *colon = strchr(p, ':'), *end = strchr(p, ';');
        size_t seg = end ? (size_t)(end - p) : strlen(p);
        if (colon && (size_t)(colon - p) == nl && !strncmp(p, name, nl)) {
            size_t tl = strcspn(colon + 1, "=;");
            if (tl >= n)
                return -1;
            memcpy(type, colon + 1, tl);
            type[tl] = 0;
            return 0;
        }
        p = p[seg] ? p + seg + 1 : NULL;
    }
    return -1;
}

static int parse_attr(int op, struct kc_case *c, const char *s, size_t len,
                      char *err, size_t errsz)
{
    const char *eq = memchr(s, '=', len);
    int k = c->args.num_attrs;
    keel_attr *a = &c->attrs[k];
    char type[16], val[64];
    size_t vl;

    if (!eq || k >= KC_MAX_A || (size_t)(eq - s) >= sizeof(c->names[k])) {
        snprintf(err, errsz, "bad attribute '%.*s'", (int)len, s);
        return -1;
    }
    memcpy(c->names[k], s, (size_t)(eq - s));
    c->names[k][eq - s] = 0;
    vl = len - (size_t)(eq - s) - 1;
    if (vl >= sizeof(val) || spec_type(op, c->names[k], type, sizeof(type))) {
        snprintf(err, errsz, "attribute '%s' not in the catalog spec",
                 c->names[k]);
        return -1;
    }
    memcpy(val, eq + 1, vl);
    val[vl] = 0;
    a->name = c->names[k];
    if (!strcmp(type, "int") || !strcmp(type, "bool")) {
        a->type = type[0] == 'i' ? KEEL_ATTR_INT : KEEL_ATTR_BOOL;
        a->v.i = strtoll(val, NULL, 10);
    } else if (!strcmp(type, "float")) {
        a->type = KEEL_ATTR_FLOAT;
        a->v.f = strtod(val, NULL);
    } else if (!strcmp(type, "str")) {
        a->type = KEEL_ATTR_STRING;
        snprintf(c->strs[k], sizeof(c->strs[k]), "%s", val);
        a->v.s = c->strs[k];
    } else if (!strcmp(type, "dtype")) {
        keel_dtype dt;
        if (dtype_of(val, strlen(val), &dt)) {
            snprintf(err, errsz, "bad dtype '%s'", val);
            return -1;
        }
        a->type = KEEL_ATTR_DTYPE;
        a->v.i = dt;
    } else if (!strcmp(type, "ints") || !strcmp(type, "floats")) {
        bool fl = type[0] == 'f';
        const char *p = val;
        int n = 0;
        char *e;
        while (*p && n < KEEL_MAX_DIMS) {
            if (fl)
                c->floats[k][n] = strtod(p, &e);
            else
                c->ints[k][n] = strtoll(p, &e, 10);
            if (e == p)
                break;
            n++;
            p = *e == ',' ? e + 1 : e;
        }
        a->type = fl ? KEEL_ATTR_FLOATS : KEEL_ATTR_INTS;
        if (fl) {
            a->v.floats.data = c->floats[k];
            a->v.floats.count = n;
        } else {
            a->v.ints.data = c->ints[k];
            a->v.ints.count = n;
        }
    } else {
        snprintf(err, errsz, "attribute type '%s'", type);
        return -1;
    }
    c->args.num_attrs++;
    return 0;
}

int kc_case_build(int op, struct kc_case *c, char *err, size_t errsz)
{
    const keel_op_info *info = keel_kit_op_info(op);
    const char *s = NULL;
    bool outs = false;

    memset(c, 0, sizeof(*c));
    c->op = op;
    for (int i = 0; info && table[i].op; i++)
        if (!strcmp(table[i].op, info->name))
            s = table[i].text;
    if (!s) {
        snprintf(err, errsz, "no case for op %s", info ? info->name : "?");
        return -1;
    }
    c->text = s;
    c->args.struct_size = sizeof(c->args);
    c->args.inputs = c->in;
    c->args.outputs = c->out;
    c->args.attrs = c->attrs;
    for (;;) {
        while (*s == ' ')
            s++;
        if (!*s)
            return 0;
        if (*s == '|')
            break;
        if (s[0] == '-' && s[1] == '>') {
            outs = true;
            s += 2;
            continue;
        }
        if ((outs ? c->args.num_outputs : c->args.num_inputs) >= KC_MAX_T)
            goto bad;
        s = parse_tensor(s, outs ? &c->out[c->args.num_outputs++]
                                 : &c->in[c->args.num_inputs++]);
        if (!s)
            goto bad;
    }
    s++;
    while (*s == ' ')
        s++;
    while (*s) {
        size_t len = strcspn(s, ";");
        if (parse_attr(op, c, s, len, err, errsz))
            return -1;
        s += len;
        if (*s == ';')
            s++;
    }
    return 0;
bad:
    snprintf(err, errsz, "%s: bad case '%s'", info->name, c->text);
    return -1;
}

keel_dtype kc_key_dtype(const struct kc_case *c)
{
    const char *rule = keel_kit_op_info(c->op)->shape_rule;
    const char *name = keel_kit_op_info(c->op)->name;
    const keel_attr *a;

    if (!strcmp(rule, "creation")) {
        for (int i = 0; i < c->args.num_attrs; i++)
            if (!strcmp(c->attrs[i].name, "dtype"))
                return (keel_dtype)c->attrs[i].v.i;
    }
    if (!strcmp(rule, "where") || !strcmp(name, "embedding") ||
        !strcmp(name, "embedding_grad"))
        return c->in[1].dtype;
    (void)a;
    return c->args.num_inputs ? c->in[0].dtype : KEEL_F32;
}

uint64_t kc_buffer_bytes(const keel_tensor_desc *d)
{
    uint64_t n = 1;

    for (int k = 0; k < d->ndim && k < KEEL_MAX_DIMS; k++)
        n *= (uint64_t)(d->shape[k] + 1);
    return 4 * 8 * n + 4096;
}

static const char *const vnames[] = {"ACCEPTED", "REJECTED", "PASSED-CHECKS",
                                     "OTHER", "CRASH", "-"};

const char *kc_verdict_text(struct kc_result r, char *buf, size_t n)
{
    if (r.v == KC_OTHER || r.v == KC_CRASH)
        snprintf(buf, n, "%s(%d)", vnames[r.v], r.status);
    else
        snprintf(buf, n, "%s", vnames[r.v]);
    return buf;
}

bool kc_verdict_parse(const char *s, struct kc_result *r)
{
    memset(r, 0, sizeof(*r));
    if (!strncmp(s, "OTHER(", 6) || !strncmp(s, "CRASH(", 6)) {
        r->v = s[0] == 'O' ? KC_OTHER : KC_CRASH;
        r->status = atoi(s + 6);
        return true;
    }
    for (int v = 0; v < 6; v++)
        if (!strcmp(s, vnames[v])) {
            r->v = (enum kc_verdict)v;
            return true;
        }
    return false;
}
