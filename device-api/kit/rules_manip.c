/*
 * keel kernel kit — checks of the manip shape rules (see docs/ops.md,
 * "What a kernel receives", for what each promises a kernel).
 */
#include "kit_internal.h"

keel_status kit_rule_concat(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_stack(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_split(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_gather(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_scatter(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_take_along_axis(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_tile(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_pad(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

