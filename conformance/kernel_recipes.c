/*
 * keel conform — the kernel area's input recipes, in one table.
 *
 * Elementwise, reduction and shape ops share a default per shape rule (the
 * catalog's SHAPE column); an op gets its own entry when its inputs need a
 * domain (log of positives), a relation between shapes (conv weights, pool
 * indices) or attributes. See kernel_recipes.h for the notation.
 */
#include <stdlib.h>
#include <string.h>

#include "conform.h"
#include "kernel_recipes.h"

struct recipe {
    const char *op;
    const char *cases[KR_MAX_CASES];
};

/* Defaults by shape rule. */
static const struct recipe rule_defaults[] = {
    {"broadcast",
     {"T[3,5,7] T[3,5,7]", "T[3,5,7] T[5,1]", "T[4,3] T[]", "T[0,5] T[0,5]"}},
    {"compare",
     {"T[3,5,7](-2,2){-2,2}z T[3,5,7](-2,2){-2,2}z",
      "T[3,5,7](-2,2){-2,2}z T[5,1](-2,2){-2,2}z"}},
    {"logical",
     {"T[3,5,7](-1,1){-1,1}z T[3,5,7](-1,1){-1,1}z",
      "T[3,5,7](-1,1){-1,1}z T[7](-1,1){-1,1}z"}},
    {"logical_unary", {"T[4,33](-1,1){-1,1}z"}},
    {"where", {"B[3,5,7] T[3,5,7] T[3,5,7]", "B[5,7] T[3,1,7] T[3,5,7]"}},
    {"same", {"T[4,33]", "T[]", "T[0,5]"}},
    {"reduce",
     {"T[4,6,5] | axis=1", "T[4,6,5] | axis=", "T[4,6,5] | axis=0,2;keepdim=1"}},
    {"reduce_arg",
     {"T[4,6,5] | axis=1", "T[4,6,5] | axis=", "T[4,6,5] | axis=2;keepdim=1"}},
    {"reduce_bool",
     {"T[4,6,5](-1,1){0,2}z | axis=2", "T[4,6,5](-1,1){0,2}z | axis="}},
    {"cumsum", {"T[4,7] | axis=1", "T[4,7] | axis="}},
    {"same_axis", {"T[5,9]", "T[5,9] | axis=0", "T[2,3,4] | axis=1"}},
    {NULL, {NULL}},
};

/* Per-op recipes. */
static const struct recipe recipes[] = {
    /* elementwise binary */
    {"divide", {"T[3,5,7] T[3,5,7]n", "T[3,5,7] T[5,1]n"}},
    {"pow",
     {"T[3,5,7](0.5,2){-3,3} T[3,5,7](-2,2){0,3}",
      "T[3,5,7](0.5,2){-3,3} T[7](-2,2){0,3}"}},
    {"floor_divide",
     {"T[3,5,7](-8,8){-8,8}z T[3,5,7](-4,4){-4,4}zn",
      "T[3,5,7](-8,8){-8,8}z T[5,1](-4,4){-4,4}zn"}},
    {"remainder",
     {"T[3,5,7](-8,8){-8,8}z T[3,5,7](-4,4){-4,4}zn",
      "T[3,5,7](-8,8){-8,8}z T[5,1](-4,4){-4,4}zn"}},
    /* elementwise unary with a domain or attributes */
    {"log", {"T[4,33](0.1,4)"}},
    {"log1p", {"T[4,33](-0.5,3)"}},
    {"sqrt", {"T[4,33](0.1,4)"}},
    {"rsqrt", {"T[4,33](0.1,4)"}},
    {"relu6", {"T[4,33](-2,8)"}},
    {"leaky_relu", {"T[4,33]", "T[4,33] | negative_slope=0.2"}},
    {"elu", {"T[4,33]", "T[4,33] | alpha=0.7"}},
    {"gelu", {"T[4,33]", "T[4,33] | approximate=1"}},
    {"softplus", {"T[4,33](-5,5)", "T[4,33](-5,5) | beta=2;threshold=4"}},
    {"hardswish", {"T[4,33](-5,5)"}},
    {"clip", {"T[4,33] | min=-2;max=3", "T[4,33] | min=-1"}},
    {"flip", {"T[3,5] | axis=0", "T[2,3,4] | axis=0,2"}},
    {"cast", {"T[4,33](0,100){0,100}", "T[5,7](-100,100){-100,100}"}},
    /* creation */
    {"full", {" | shape=3,5;dtype=T;value=3", " | shape=4;dtype=T;value=0"}},
    {"arange", {" | shape=7;dtype=T;start=2;step=3"}},
    {"linspace",
     {" | shape=9;dtype=T;start=-1;stop=2", " | shape=1;dtype=T;start=2;stop=5"}},
    {"eye", {" | shape=4,6;dtype=T", " | shape=3,3;dtype=T"}},
    {"uniform", {" | shape=5,7;dtype=T;low=-1;high=2;seed=42;offset=3"}},
    {"normal", {" | shape=5,7;dtype=T;mean=0.5;std=2;seed=42;offset=3"}},
    {"randint", {" | shape=5,7;dtype=T;low=0;high=9;seed=42;offset=0"}},
    {"bernoulli", {"T[5,7](0,1) | seed=42;offset=5"}},
    /* reductions */
    {"prod", {"T[4,6,5](0.7,1.4){-1,2} | axis=1", "T[3,4](0.7,1.4){-1,1} | axis="}},
    {"var",
     {"T[4,6,5] | axis=1", "T[4,6,5] | axis=0,2;keepdim=1;unbiased=0"}},
    {"std",
     {"T[4,6,5] | axis=1", "T[4,6,5] | axis=0,2;keepdim=1;unbiased=0"}},
    /* linear algebra */
    /* matmul: the layouts the core hands a kernel (core/src/shape_linalg.c,
     * docs/device-abi.md): a transposed operand arrives as swapped strides
     * of the stored tensor, batch dims broadcast with stride 0, a 1-D
     * operand as a matrix with a stride-0 dim and the output's rank
     * reduced. The flags are passed too and must not be applied again. */
    {"matmul",
     {"T[3,16,24](-1,1) T[3,24,20](-1,1)", "T[17,33](-1,1) T[33,9](-1,1)",
      "T[3,24,16](-1,1) T[3,24,20](-1,1) | transpose_x=1",
      "T[17,33](-1,1) T[9,33](-1,1) | transpose_y=1",
      "T[2,24,16](-1,1) T[2,20,24](-1,1) | transpose_x=1;transpose_y=1",
      "T[2,1,16,24](-1,1) T[3,24,20](-1,1)",
      "T[5,24,16](-1,1) T[20,24](-1,1) | transpose_x=1;transpose_y=1",
      "T[33](-1,1) T[33,9](-1,1)", "T[3,16,24](-1,1) T[24](-1,1)",
      "T[40](-1,1) T[40](-1,1)"}},
    {"linear",
     {"T[8,24](-1,1) T[24,12](-1,1) T[12]", "T[2,5,24](-1,1) T[24,12](-1,1)"}},
    /* fused inference ops: each activation once (leaky_relu with its
     * alpha), with and without bias, batched and 1-D x, and for conv2d its
     * geometries (groups, stride, dilation, SAME, 1x1); the reference is
     * linear / conv2d followed by the activation op (t_kernel.c) */
    {"fused_linear",
     {"T[8,24](-1,1) T[24,12](-1,1) T[12] | activation=none",
      "T[2,5,24](-1,1) T[24,12](-1,1) | activation=relu",
      "T[8,24](-2,2) T[24,12](-2,2) T[12](-3,3) | activation=relu6",
      "T[8,24](-1,1) T[24,12](-1,1) T[12] | activation=gelu",
      "T[2,5,24](-1,1) T[24,12](-1,1) T[12] | activation=gelu_tanh",
      "T[8,24](-1,1) T[24,12](-1,1) | activation=silu",
      "T[8,24](-1,1) T[24,12](-1,1) T[12] | activation=sigmoid",
      "T[24](-1,1) T[24,12](-1,1) T[12] | activation=tanh",
      "T[8,24](-1,1) T[24,12](-1,1) T[12] | activation=leaky_relu;alpha=0.1",
      "T[8,24](-2,2) T[24,12](-1,1) T[12](-2,2) | activation=hardswish"}},
    /* convolution and pooling */
    {"conv2d",
     {"T[2,3,9,9](-1,1) T[4,3,3,3](-1,1) T[4] | padding=1,1",
      "T[2,4,8,8](-1,1) T[6,2,3,3](-1,1) | stride=2,2;groups=2",
      "T[1,2,7,7](-1,1) T[3,2,3,3](-1,1) T[3] | dilation=2,2;padding=2,2"}},
    {"fused_conv2d",
     {"T[2,3,9,9](-1,1) T[4,3,3,3](-1,1) T[4] | padding=1,1;activation=none",
      "T[2,4,8,8](-1,1) T[6,2,3,3](-1,1) | stride=2,2;groups=2;"
      "activation=relu",
      "T[1,2,7,7](-1,1) T[3,2,3,3](-1,1) T[3] | dilation=2,2;padding=2,2;"
      "activation=relu6",
      "T[2,3,9,9](-1,1) T[4,3,3,3](-1,1) T[4] | padding=1,1;activation=gelu",
      "T[2,3,9,9](-1,1) T[4,3,3,3](-1,1) | activation=gelu_tanh",
      "T[2,4,8,8](-1,1) T[6,2,3,3](-1,1) T[6] | stride=2,2;groups=2;"
      "activation=silu",
      "T[2,3,9,9](-1,1) T[4,3,1,1](-1,1) T[4] | activation=sigmoid",
      "T[1,3,9,9](-1,1) T[4,3,3,3](-1,1) T[4] | "
      "padding_algorithm=SAME;stride=2,2;activation=tanh",
      "T[2,3,9,9](-1,1) T[4,3,3,3](-1,1) T[4] | padding=1,1;"
      "activation=leaky_relu;alpha=0.2",
      "T[2,3,9,9](-1,1) T[4,3,3,3](-1,1) T[4] | padding=1,1;"
      "activation=hardswish"}},
    {"conv2d_grad",
     {"T[2,3,9,9](-1,1) T[4,3,3,3](-1,1) T[2,4,9,9](-1,1) | padding=1,1",
      "T[2,4,8,8](-1,1) T[6,2,3,3](-1,1) T[2,6,3,3](-1,1) | "
      "stride=2,2;groups=2;has_bias=0"}},
    {"conv2d_transpose",
     {"T[2,4,5,5](-1,1) T[4,3,3,3](-1,1) T[3] | stride=2,2;padding=1,1",
      "T[1,4,4,4](-1,1) T[4,3,3,3](-1,1) | "
      "stride=2,2;padding=1,1;output_padding=1,1"}},
    {"conv2d_transpose_grad",
     {"T[2,4,5,5](-1,1) T[4,3,3,3](-1,1) T[2,3,9,9](-1,1) | "
      "stride=2,2;padding=1,1"}},
    {"max_pool2d",
     {"T[2,3,8,8] | kernel_size=2,2",
      "T[2,3,9,9] | kernel_size=3,3;stride=2,2;padding=1,1",
      "T[1,2,7,7] | kernel_size=2,2;ceil_mode=1"}},
    {"max_pool2d_grad", {"T[2,3,8,8] L[2,3,4,4]w T[2,3,4,4]"}},
    {"avg_pool2d",
     {"T[2,3,9,9] | kernel_size=3,3;stride=2,2;padding=1,1",
      "T[2,3,9,9] | kernel_size=3,3;stride=2,2;padding=1,1;exclusive=0",
      "T[2,3,8,8] | kernel_size=2,2"}},
    {"avg_pool2d_grad",
     {"T[2,3,9,9] T[2,3,5,5] | kernel_size=3,3;stride=2,2;padding=1,1",
      "T[2,3,9,9] T[2,3,5,5] | "
      "kernel_size=3,3;stride=2,2;padding=1,1;exclusive=0"}},
    {"adaptive_avg_pool2d", {"T[2,3,9,7] | output_size=4,3"}},
    {"adaptive_avg_pool2d_grad",
     {"T[2,3,9,7] T[2,3,4,3] | output_size=4,3"}},
    /* normalisation */
    {"batch_norm",
     {"T[4,3,5,5] T[3] T[3] T[3] T[3](0.5,2) | training=1",
      "T[4,3,5,5] T[3] T[3] T[3] T[3](0.5,2) | training=0"}},
    {"batch_norm_grad",
     {"T[4,3,5,5] T[3] T[3] T[3](0.5,2) T[4,3,5,5]",
      "T[4,3,5,5] T[3] T[3] T[3](0.5,2) T[4,3,5,5] | training=0"}},
    {"layer_norm", {"T[4,6,8] T[8] T[8]", "T[4,6,8] | begin_norm_axis=1"}},
    {"layer_norm_grad", {"T[4,6,8] T[8] T[4,6] T[4,6](0.5,2) T[4,6,8]"}},
    {"group_norm", {"T[2,6,4,4] T[6] T[6] | groups=3", "T[2,6,4,4] | groups=2"}},
    {"group_norm_grad",
     {"T[2,6,4,4] T[6] T[2,3] T[2,3](0.5,2) T[2,6,4,4] | groups=3"}},
    /* softmax and losses */
    {"softmax_grad", {"T[5,9](0,1) T[5,9]", "T[5,9](0,1) T[5,9] | axis=0"}},
    {"log_softmax_grad", {"T[5,9](-3,0) T[5,9]"}},
    {"cross_entropy",
     {"T[6,5] L[6]{0,4}", "T[6,5] T[6,5]p | soft_label=1",
      "T[6,5] L[6]{0,4} T[5](0.5,2) | reduction=sum"}},
    {"cross_entropy_grad",
     {"T[6,5]p L[6]{0,4} T[]", "T[6,5]p L[6]{0,4} T[6] | reduction=none"}},
    {"mse_loss",
     {"T[4,7] T[4,7]", "T[4,7] T[4,7] | reduction=none",
      "T[4,7] T[4,7] | reduction=sum"}},
    {"bce_with_logits",
     {"T[4,7] T[4,7](0,1)", "T[4,7] T[4,7](0,1) T[7](0.5,2) | reduction=sum"}},
    {"nll_loss",
     {"T[6,5](-3,0) L[6]{0,4}",
      "T[6,5](-3,0) L[6]{0,4} T[5](0.5,2) | reduction=sum"}},
    {"embedding", {"L[3,4]{0,9} T[10,8]", "L[3,4]{0,9} T[10,8] | padding_idx=2"}},
    {"embedding_grad",
     {"L[3,4]{0,9} T[3,4,8] | num_embeddings=10",
      "L[3,4]{0,9} T[3,4,8] | num_embeddings=10;padding_idx=2"}},
    {"dropout",
     {"T[4,33] | p=0.3;seed=7;offset=0",
      "T[4,33] | p=0.3;mode=downscale_in_infer;training=0;seed=7;offset=0"}},
    {"one_hot", {"T[5]{0,3} | num_classes=4", "T[2,3]{0,4} | num_classes=5"}},
    /* shape and indexing */
    {"concat", {"T[2,3] T[2,5] T[2,1] | axis=1", "T[2,3] T[4,3] | axis=0"}},
    {"stack", {"T[2,3] T[2,3] T[2,3] | axis=1", "T[4] T[4] | axis=0"}},
    {"split",
     {"T[7,4] | sections=2,2,3;axis=0", "T[3,8] | sections=3,-1;axis=1"}},
    {"gather", {"T[5,4] L[3]{0,4} | axis=0", "T[5,4] L[6]{0,3} | axis=1"}},
    {"index_select",
     {"T[5,4] L[3]{0,4} | axis=0", "T[5,4] L[6]{0,3} | axis=1"}},
    {"scatter",
     {"T[5,4] L[3]{0,4}u T[3,4] | overwrite=1",
      "T[5,4] L[4]{0,4} T[4,4] | overwrite=0"}},
    {"take_along_axis",
     {"T[4,5] L[4,3]{0,4} | axis=1", "T[4,5] L[2,5]{0,3} | axis=0"}},
    {"tile", {"T[2,3] | repeat_times=2,1", "T[3] | repeat_times=2,3"}},
    {"pad",
     {"T[3,4] | pad=1,2,0,1;mode=constant;value=2",
      "T[3,4] | pad=1,1,2,2;mode=reflect",
      "T[3,4] | pad=2,1,0,3;mode=replicate"}},
    {"topk", {"T[4,9] | k=3", "T[4,9] | k=2;largest=0;axis=0"}},
    {"sort", {"T[4,9]", "T[4,9] | descending=1;axis=0"}},
    {"argsort", {"T[4,9]", "T[4,9] | descending=1;axis=0"}},
    /* optimizer updates (in place) */
    {"sgd_update", {"T[4,9] T[4,9] | lr=0.1;weight_decay=0.01"}},
    {"momentum_update",
     {"T[4,9] T[4,9] T[4,9] | lr=0.1;mu=0.9",
      "T[4,9] T[4,9] T[4,9] | lr=0.1;use_nesterov=1;weight_decay=0.01"}},
    {"adam_update",
     {"T[4,9] T[4,9] T[4,9] T[4,9](0,1) | "
      "lr=0.01;beta1_pow=0.9;beta2_pow=0.999"}},
    {"adamw_update",
     {"T[4,9] T[4,9] T[4,9] T[4,9](0,1) | "
      "lr=0.01;beta1_pow=0.9;beta2_pow=0.999;coeff=0.01"}},
    /* mixed precision (in place on x and found_inf): all finite with
     * found_inf false (stays false); inf and NaN in x (found_inf becomes
     * true, x still scaled); a GradScaler-sized scale; 0-d scale and
     * found_inf already true; an empty x */
    {"check_finite_and_unscale",
     {"T[4,9] F[1](0.5,4) B[1]{0,0}", "T[4,9]i F[1](0.5,4) B[1]{0,0}",
      "T[3,5,7](-1000,1000) F[1](256,1024) B[1]{0,0}",
      "T[3,5] F[](0.5,4) B[]{1,1}", "T[0,5] F[1](0.5,4) B[1]{0,0}"}},
    {NULL, {NULL}},
};

static const struct recipe *find(const struct recipe *table, const char *key)
{
    for (; table->op; table++)
        if (!strcmp(table->op, key))
            return table;
    return NULL;
}

static const struct recipe *recipe_of(int op)
{
    const keel_op_info *info = keel_op_get_info((keel_op_id)op);
    const struct recipe *r = find(recipes, info->name);

    if (!r)
        r = find(rule_defaults, info->shape_rule);
    return r;
}

int kr_case_count(int op)
{
    const struct recipe *r = recipe_of(op);
    int n = 0;

    while (r && n < KR_MAX_CASES && r->cases[n])
        n++;
    return n;
}

/* ---- parsing --------------------------------------------------------------- */

static int parse_input(const char **ps, struct kr_input *in, char *err,
                       size_t errsz)
{
    const char *s = *ps;
    char *end;

    memset(in, 0, sizeof(*in));
    if (!strchr("TLBUF", *s) || s[1] != '[') {
        snprintf(err, errsz, "bad input at '%s'", s);
        return -1;
    }
    in->role = *s;
    s += 2;
    while (*s != ']') {
        if (in->ndim >= KEEL_MAX_DIMS) {
            snprintf(err, errsz, "too many dims");
            return -1;
        }
        in->shape[in->ndim++] = strtoll(s, &end, 10);
        if (end == s) {
            snprintf(err, errsz, "bad dims at '%s'", s);
            return -1;
        }
        s = *end == ',' ? end + 1 : end;
    }
    s++;
    for (;;) {
        if (*s == '(') {
            in->lo = strtod(s + 1, &end);
            in->hi = strtod(end + 1, &end);
            in->has_range = true;
            s = end + 1;
        } else if (*s == '{') {
            in->ilo = strtoll(s + 1, &end, 10);
            in->ihi = strtoll(end + 1, &end, 10);
            in->has_irange = true;
            s = end + 1;
        } else if (*s == 'z') {
            in->intval = true, s++;
        } else if (*s == 'n') {
            in->nonzero = true, s++;
        } else if (*s == 'u') {
            in->unique = true, s++;
        } else if (*s == 'p') {
            in->rowsum = true, s++;
        } else if (*s == 'w') {
            in->window = true, s++;
        } else if (*s == 'i') {
            in->nonfinite = true, s++;
        } else {
            break;
        }
    }
    *ps = s;
    return 0;
}

static int parse_attrs(const char *s, struct kr_case *c, char *err,
                       size_t errsz)
{
    while (*s) {
        const char *eq = strchr(s, '='), *semi = strchr(s, ';');
        size_t nl, vl;

        if (!semi)
            semi = s + strlen(s);
        if (!eq || eq > semi || c->nattr >= KR_MAX_ATTR) {
            snprintf(err, errsz, "bad attribute at '%s'", s);
            return -1;
        }
        nl = (size_t)(eq - s);
        vl = (size_t)(semi - eq - 1);
        if (nl >= sizeof(c->attr_name[0]) || vl >= sizeof(c->attr_val[0])) {
            snprintf(err, errsz, "attribute too long at '%s'", s);
            return -1;
        }
        memcpy(c->attr_name[c->nattr], s, nl);
        c->attr_name[c->nattr][nl] = '\0';
        memcpy(c->attr_val[c->nattr], eq + 1, vl);
        c->attr_val[c->nattr][vl] = '\0';
        c->nattr++;
        s = *semi ? semi + 1 : semi;
    }
    return 0;
}

int kr_case_parse(int op, int k, struct kr_case *c, char *err, size_t errsz)
{
    const struct recipe *r = recipe_of(op);
    const char *s;

    memset(c, 0, sizeof(*c));
    if (!r || k < 0 || k >= kr_case_count(op)) {
        snprintf(err, errsz, "no recipe for op %s (shape rule %s)",
                 keel_op_get_info((keel_op_id)op)->name,
                 keel_op_get_info((keel_op_id)op)->shape_rule);
        return -1;
    }
    c->text = r->cases[k];
    s = c->text;
    for (;;) {
        while (*s == ' ')
            s++;
        if (!*s)
            return 0;
        if (*s == '|')
            break;
        if (c->nin >= KR_MAX_IN) {
            snprintf(err, errsz, "too many inputs");
            return -1;
        }
        if (parse_input(&s, &c->in[c->nin++], err, errsz))
            return -1;
    }
    s++;
    while (*s == ' ')
        s++;
    return parse_attrs(s, c, err, errsz);
}

uint32_t kr_mutated_inputs(int op, const struct kr_case *c)
{
    const char *name = keel_op_get_info((keel_op_id)op)->name;

    if (!strcmp(name, "sgd_update"))
        return 1u << 0;
    if (!strcmp(name, "momentum_update"))
        return (1u << 0) | (1u << 2);
    if (!strcmp(name, "adam_update") || !strcmp(name, "adamw_update"))
        return (1u << 0) | (1u << 2) | (1u << 3);
    if (!strcmp(name, "check_finite_and_unscale"))
        return (1u << 0) | (1u << 2);
    if (!strcmp(name, "batch_norm")) {
        for (int i = 0; i < c->nattr; i++)
            if (!strcmp(c->attr_name[i], "training") &&
                !strcmp(c->attr_val[i], "0"))
                return 0;
        return (1u << 3) | (1u << 4);
    }
    return 0;
}

int kr_broadcast_kind(int op)
{
    const char *rule = keel_op_get_info((keel_op_id)op)->shape_rule;

    if (!strcmp(rule, "broadcast") || !strcmp(rule, "compare") ||
        !strcmp(rule, "logical") || !strcmp(rule, "where"))
        return 1;
    if (!strcmp(rule, "loss"))
        return 2;
    return 0;
}
