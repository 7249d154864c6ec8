/*
 * keel kernel kit — checks of the reduce shape rules (see docs/ops.md,
 * "What a kernel receives", for what each promises a kernel).
 */
#include "kit_internal.h"

keel_status kit_rule_reduce(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_reduce_bool(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_reduce_arg(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_cumsum(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_same_axis(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_same_axis_grad(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_sort(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_argsort(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_topk(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

