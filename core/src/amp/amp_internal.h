/*
 * auto_cast internals for the layers above (dist/recompute.c): a copy of
 * the innermost scope, to re-open the same scope later on this or another
 * pass (recompute runs a layer's forward again inside backward and must
 * cast exactly as the first forward did).
 */
#ifndef KEEL_AMP_INTERNAL_H
#define KEEL_AMP_INTERNAL_H

#include <keel/amp.h>

#include "dispatch/dispatch_internal.h"

struct amp_scope;

/** A heap copy of this thread's innermost enabled scope, or NULL when no
 *  scope casts (none open, or enable = false). Free with
 *  keel__amp_scope_free. */
struct amp_scope *keel__amp_scope_save(void);
void keel__amp_scope_free(struct amp_scope *s);
/** Open a scope equal to `s` (copied; close it with keel_amp_end), with
 *  the AMP step on even inside a backward pass: the pause autograd holds
 *  is lifted until the matching keel__amp_scope_close. */
keel_status keel__amp_scope_open(const struct amp_scope *s);
void keel__amp_scope_close(void);

#endif /* KEEL_AMP_INTERNAL_H */
