/*
 * keel kernel kit — checks of the elementwise shape rules (see docs/ops.md,
 * "What a kernel receives", for what each promises a kernel).
 */
#include "kit_internal.h"

keel_status kit_rule_broadcast(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_compare(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_logical(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_logical_unary(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_where(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_same(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_cast(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_creation(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

