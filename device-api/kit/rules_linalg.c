/*
 * keel kernel kit — checks of the linalg shape rules (see docs/ops.md,
 * "What a kernel receives", for what each promises a kernel).
 */
#include "kit_internal.h"

keel_status kit_rule_matmul(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

keel_status kit_rule_linear(const struct kit_ctx *c)
{
    (void)c;
    return KEEL_STATUS_OK; /* KIT-TODO */
}

