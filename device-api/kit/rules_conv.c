/*
 * keel kernel kit — checks of the conv shape rules (see docs/ops.md,
 * "What a kernel receives", for what each promises a kernel).
 */
#include "kit_internal.h"

keel_status kit_rule_conv2d(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_conv2d_transpose(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_conv2d_grad(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_conv2d_transpose_grad(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_pool2d(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_pool2d_grad(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_adaptive_pool2d(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status keel_kit_conv_geometry(const keel_kernel_args *a, bool transpose,
                                   const keel_tensor_desc *big,
                                   const keel_tensor_desc *weight,
                                   const keel_tensor_desc *small,
                                   keel_kit_conv *g, keel_kit_msg *msg)
{
    (void)a; (void)transpose; (void)big; (void)weight; (void)small; (void)g;
    return kit_bad_msg(msg, "KIT-TODO");
}

keel_status keel_kit_pool_geometry(const keel_kernel_args *a, int kind,
                                   const keel_tensor_desc *x,
                                   const keel_tensor_desc *out,
                                   keel_kit_pool *g, keel_kit_msg *msg)
{
    (void)a; (void)kind; (void)x; (void)out; (void)g;
    return kit_bad_msg(msg, "KIT-TODO");
}
