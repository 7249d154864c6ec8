/*
 * keel op catalog — C view of ops.def.
 *
 * The catalog is part of the contract between the core and plugins: a
 * plugin's kernel.lookup receives the op names listed in ops.def, and the
 * meaning of each name is the SEMANTICS column there. This header turns the
 * list into an enum (KEEL_OP_ADD, ...) and a compile-time name table that
 * plugins may use to register their kernels.
 */
#ifndef KEEL_OP_CATALOG_H
#define KEEL_OP_CATALOG_H

#include <string.h>

#include <keel/device_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Bumped whenever ops.def gains an entry (never on a change of meaning:
 *  meanings do not change). */
#define KEEL_OP_CATALOG_VERSION 3

/* Dtype masks used in ops.def. */
#define KEEL_DT_FLOAT                                                       \
    (KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F64) |                  \
     KEEL_DTYPE_BIT(KEEL_F16) | KEEL_DTYPE_BIT(KEEL_BF16))
#define KEEL_DT_INT                                                         \
    (KEEL_DTYPE_BIT(KEEL_I8) | KEEL_DTYPE_BIT(KEEL_U8) |                    \
     KEEL_DTYPE_BIT(KEEL_I32) | KEEL_DTYPE_BIT(KEEL_I64))
#define KEEL_DT_SIGNED                                                      \
    (KEEL_DT_FLOAT | KEEL_DTYPE_BIT(KEEL_I8) | KEEL_DTYPE_BIT(KEEL_I32) |   \
     KEEL_DTYPE_BIT(KEEL_I64))
#define KEEL_DT_NUMERIC (KEEL_DT_FLOAT | KEEL_DT_INT)
#define KEEL_DT_ALL (KEEL_DT_NUMERIC | KEEL_DTYPE_BIT(KEEL_BOOL))

/** How an op behaves under automatic mixed precision. */
typedef enum keel_amp_class {
    KEEL_AMP_NONE = 0,    /* not a floating computation: untouched     */
    KEEL_AMP_WHITE = 1,   /* runs in float16/bfloat16 under auto_cast   */
    KEEL_AMP_BLACK = 2,   /* kept in float32 under auto_cast            */
    KEEL_AMP_PROMOTE = 3, /* follows the widest floating input          */
    KEEL_AMP_FP32 = 4     /* kept in float32 at every level, O2 too     */
} keel_amp_class;

/** The class's name as ops.def's AMP column spells it, lower case
 *  ("white", "black", "promote", "fp32", "none"); "unknown" otherwise. */
static inline const char *keel_amp_class_name(keel_amp_class a)
{
    switch (a) {
    case KEEL_AMP_NONE:
        return "none";
    case KEEL_AMP_WHITE:
        return "white";
    case KEEL_AMP_BLACK:
        return "black";
    case KEEL_AMP_PROMOTE:
        return "promote";
    case KEEL_AMP_FP32:
        return "fp32";
    }
    return "unknown";
}

/**
 * The activations of the fused inference ops (fused_linear, fused_conv2d:
 * their `activation` attribute), in the order of this list, which only
 * grows at the end. Each means exactly the catalog op of the same name:
 * relu, relu6, gelu (exact: gelu with approximate = 0), gelu_tanh (gelu
 * with approximate = 1), silu, sigmoid, tanh, leaky_relu (negative_slope
 * = the op's `alpha`) and hardswish; none leaves the values as they are.
 * (Not keel/nn.h's keel_activation, the activation layers' kinds.)
 */
typedef enum keel_fused_act {
    KEEL_FUSED_ACT_NONE = 0,
    KEEL_FUSED_ACT_RELU = 1,
    KEEL_FUSED_ACT_RELU6 = 2,
    KEEL_FUSED_ACT_GELU = 3,
    KEEL_FUSED_ACT_GELU_TANH = 4,
    KEEL_FUSED_ACT_SILU = 5,
    KEEL_FUSED_ACT_SIGMOID = 6,
    KEEL_FUSED_ACT_TANH = 7,
    KEEL_FUSED_ACT_LEAKY_RELU = 8,
    KEEL_FUSED_ACT_HARDSWISH = 9,
    KEEL_FUSED_ACT_COUNT_
} keel_fused_act;

/** The names the `activation` attribute takes, as one line for messages. */
#define KEEL_FUSED_ACT_NAMES                                                \
    "none, relu, relu6, gelu, gelu_tanh, silu, sigmoid, tanh, leaky_relu, " \
    "hardswish"

/** The activation's attribute value ("gelu_tanh"); "unknown" otherwise. */
static inline const char *keel_fused_act_name(keel_fused_act a)
{
    static const char *const names[KEEL_FUSED_ACT_COUNT_] = {
        "none", "relu",    "relu6", "gelu",       "gelu_tanh",
        "silu", "sigmoid", "tanh",  "leaky_relu", "hardswish"};

    return (unsigned)a < KEEL_FUSED_ACT_COUNT_ ? names[a] : "unknown";
}

/** The activation named `name` (exact, lower case), or -1 for NULL or a
 *  name not in the list. */
static inline int keel_fused_act_from_name(const char *name)
{
    for (int a = 0; name && a < KEEL_FUSED_ACT_COUNT_; a++)
        if (!strcmp(name, keel_fused_act_name((keel_fused_act)a)))
            return a;
    return -1;
}

/** Op identifiers, in catalog order. */
typedef enum keel_op_id {
#define KEEL_OP(ID, NAME, NIN, NOUT, DTYPES, SHAPE, GRAD, AMP, ATTRS, SEM)  \
    KEEL_OP_##ID,
#include <keel/ops.def>
#undef KEEL_OP
    KEEL_OP_COUNT
} keel_op_id;

/** Static facts about one op, straight from ops.def. */
typedef struct keel_op_info {
    const char *name;
    int32_t num_inputs;  /* maximum; -1 variadic */
    int32_t num_outputs; /* -1: decided by an attribute */
    uint32_t dtype_mask;
    keel_amp_class amp;
    const char *attrs;     /* "name:type=default;..." */
    const char *semantics; /* float64 reference meaning */
    const char *shape_rule;
    const char *grad_rule; /* "NONE" when not differentiable */
} keel_op_info;

#ifdef KEEL_OP_CATALOG_DEFINE_TABLE
/* Define this macro in exactly one translation unit to get the table. */
const keel_op_info keel_op_table[KEEL_OP_COUNT] = {
#define KEEL_OP(ID, NAME, NIN, NOUT, DTYPES, SHAPE, GRAD, AMP, ATTRS, SEM)  \
    [KEEL_OP_##ID] = {NAME, NIN, NOUT, DTYPES, KEEL_AMP_##AMP, ATTRS, SEM,  \
                      #SHAPE, #GRAD},
#include <keel/ops.def>
#undef KEEL_OP
};
#endif

#ifdef __cplusplus
}
#endif

#endif /* KEEL_OP_CATALOG_H */
