/*
 * What the two halves of the stand-in Neuware (cnrt_standin.c and
 * cnnl_standin.c, one library) share. Test code only.
 */
#ifndef KEEL_MLU_STANDIN_H
#define KEEL_MLU_STANDIN_H

#include <stdbool.h>
#include <stddef.h>

#include "cnrt_api.h"

#define SI_API __attribute__((visibility("default")))

/* The calling thread's current device, or -1 (cnrtSetDevice never ran). */
int si_current(void);
/* [p, p + n) lies in one live cnrtMalloc block of device dev. */
bool si_device_mem(const void *p, size_t n, int dev);
/* The device a queue belongs to, or -1 for a handle that is no queue. */
int si_queue_device(cnrtQueue_t q);
/* Append fn(arg) to the queue's work (arg is freed after it ran). */
cnrtRet_t si_enqueue(cnrtQueue_t q, void (*fn)(void *arg), void *arg);
/* The armed failure for this call of `name`, or 0. */
int si_injected(const char *name);
/* The planted fault CNRT_STANDIN_FAULT names is `name`. */
bool si_fault(const char *name);

#endif /* KEEL_MLU_STANDIN_H */
