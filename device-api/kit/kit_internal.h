/*
 * keel kernel kit — private declarations shared by the kit's files.
 *
 * One check per shape rule of ops.def, named kit_rule_<SHAPE>. The table in
 * kit.c is built from ops.def, so a rule named there without a definition
 * here does not link. A rule runs after the generic checks (arity within
 * the catalog's maximum, every descriptor sane, every output row-major
 * contiguous, attributes typed as the catalog says and required ones
 * present), and checks what is particular to the rule: the exact arity,
 * the key dtype in the op's set (kit_key_dtype: only the rule knows which
 * operand keys the look-up), dtypes, shapes and attribute ranges.
 */
#ifndef KEEL_KIT_INTERNAL_H
#define KEEL_KIT_INTERNAL_H

#include <keel/kit.h>

/* What a rule is given: the launch, the op's catalog entry, where to
 * explain a refusal. */
struct kit_ctx {
    const keel_kernel_args *a;
    int op;
    const keel_op_info *info;
    keel_kit_msg *msg;
};

typedef keel_status (*kit_rule_fn)(const struct kit_ctx *c);

#define KEEL_OP(ID, NAME, NIN, NOUT, DTYPES, SHAPE, GRAD, AMP, ATTRS, SEM)  \
    keel_status kit_rule_##SHAPE(const struct kit_ctx *c);
#include <keel/ops.def>
#undef KEEL_OP

/* INVALID_ARGUMENT with "<op>: <message>" in c->msg. */
keel_status kit_bad(const struct kit_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Same, with another status. */
keel_status kit_fail(const struct kit_ctx *c, keel_status st,
                     const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same for the geometry entry points, which have no kit_ctx. */
keel_status kit_bad_msg(keel_kit_msg *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Shorthands over c->a. */
#define KIN(c, i) (&(c)->a->inputs[i])
#define KOUT(c, i) (&(c)->a->outputs[i])
#define KNIN(c) ((c)->a->num_inputs)
#define KNOUT(c) ((c)->a->num_outputs)

/* Exactly nin inputs (-1: any) and nout outputs (-1: any). */
keel_status kit_arity(const struct kit_ctx *c, int nin, int nout);
/* Input count in [lo, hi]. */
keel_status kit_inputs_between(const struct kit_ctx *c, int lo, int hi);
/* Output k has exactly the given dtype, ndim and shape. */
keel_status kit_out_is(const struct kit_ctx *c, int k, keel_dtype dt,
                       int ndim, const int64_t *shape);
/* Output k has the dtype and shape of descriptor d. */
keel_status kit_out_like(const struct kit_ctx *c, int k,
                         const keel_tensor_desc *d, keel_dtype dt);
/* All of inputs in mask (bit i = input i) share input `ref`'s dtype. */
keel_status kit_same_dtype(const struct kit_ctx *c, uint32_t mask, int ref);
/* dt, the key dtype the rule picked, is in the op's catalog set. */
keel_status kit_key_dtype(const struct kit_ctx *c, keel_dtype dt);
/* Input i is a floating dtype. */
keel_status kit_need_float(const struct kit_ctx *c, int i);
/* fused_linear / fused_conv2d: the `activation` attribute is one of
 * KEEL_FUSED_ACT_NAMES (absent: "none"). */
keel_status kit_activation(const struct kit_ctx *c);
/* "[2, 3, 4]" into buf. */
const char *kit_shape_str(char *buf, size_t n, int ndim,
                          const int64_t *shape);

#endif /* KEEL_KIT_INTERNAL_H */
