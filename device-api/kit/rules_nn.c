/*
 * keel kernel kit — checks of the nn shape rules (see docs/ops.md,
 * "What a kernel receives", for what each promises a kernel).
 */
#include "kit_internal.h"

keel_status kit_rule_batch_norm(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_batch_norm_grad(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_layer_norm(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_layer_norm_grad(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_group_norm(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_group_norm_grad(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_cross_entropy(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_cross_entropy_grad(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_loss(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_nll_loss(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_embedding(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_embedding_grad(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_one_hot(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_optimizer(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}


keel_status kit_rule_dropout(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}
