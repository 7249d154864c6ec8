/*
 * The io layer's private declarations, for itself and the layers above.
 */
#ifndef KEEL_IO_INTERNAL_H
#define KEEL_IO_INTERNAL_H

#include <stdio.h>

#include <keel/io.h>

#include "autograd/autograd_internal.h"

/**
 * Write `path` atomically, as keel_save does: body(f, ctx, tmp, path)
 * writes the bytes into the temporary "<path>.tmp.<pid>.XXXXXX"; it is
 * flushed, synced and renamed over `path` only when everything
 * succeeded, so on any error the previous file is unchanged. Temporaries
 * of writers that died are removed. Messages start with `who`; the
 * KEEL_TEST_FAIL_SAVE_AT steps of keel_save apply (body's own steps
 * report through keel__write_atomic_error).
 */
keel_status keel__write_atomic(const char *path, const char *who,
                               keel_status (*body)(FILE *f, void *ctx,
                                                   const char *tmp,
                                                   const char *path),
                               void *ctx);
/** Whether KEEL_TEST_FAIL_SAVE_AT names `step` (then errno is EIO): a
 *  body's own steps ("header", "data") fail there in tests. */
bool keel__save_fault(const char *step);
/** The IO_ERROR of a failed step inside a body, errno naming the cause. */
keel_status keel__write_atomic_error(const char *step, const char *tmp,
                                     const char *path);

#endif /* KEEL_IO_INTERNAL_H */
