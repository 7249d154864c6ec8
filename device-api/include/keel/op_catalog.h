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

#include <keel/device_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Bumped whenever ops.def gains an entry (never on a change of meaning:
 *  meanings do not change). */
#define KEEL_OP_CATALOG_VERSION 2

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
