/*
 * The stand-in's internals shared by its source files (acl_standin.c and
 * the operator files acl_standin_nn.c and acl_standin_train.c). Test code
 * only; nothing here is exported from the library.
 */
#ifndef KEEL_ACL_STANDIN_INTERNAL_H
#define KEEL_ACL_STANDIN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "acl_api.h"

#define API __attribute__((visibility("default")))

/* The stand-in's view of a tensor: checked at creation against the live
 * device memory of the current device. */
struct aclTensor {
    aclDataType dt;
    int ndim;
    int64_t dims[8], strides[8];
    char *base; /* element [0, ..., 0] */
};

struct aclScalar {
    aclDataType dt;
    double f;
    int64_t i;
};

struct aclIntArray { uint64_t n; int64_t v[64]; };
struct aclBoolArray { uint64_t n; bool v[64]; };
struct aclFloatArray { uint64_t n; float v[64]; };

/* Records the error (aclGetRecentErrMsg) and returns code. */
aclError err(aclError code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A fault armed for `name` (ACL_STANDIN_FAIL / acl_standin_fail_next):
 * its code, once; 0 otherwise. */
aclError injected(const char *name);
/* The calling thread's current device, or -1 with the error recorded. */
int here(const char *call);
/* [p, p + n) inside one live allocation of device dev; an ACL error
 * naming `call` and `which` otherwise. */
aclError want_device(const void *p, size_t n, int dev, const char *call,
                     const char *which);

/* Bytes of one element, 0 for a dtype the stand-in does not compute. */
size_t dt_size(aclDataType dt);
bool dt_float(aclDataType dt);
/* Load / store one element at p of t's dtype, through double (floats)
 * or int64_t (integers). */
double ld_f(const struct aclTensor *t, const char *p);
void st_f(const struct aclTensor *t, char *p, double v);
int64_t ld_i(const struct aclTensor *t, const char *p);
void st_i(const struct aclTensor *t, char *p, int64_t v);

/* Phase 1 of an operator computed by host(priv, workspace) on the
 * stream's thread: an executor asking for `ws` bytes of workspace. drop
 * (may be NULL) frees priv once the executor is used up or never runs;
 * it is called on failure too. */
aclnnStatus standin_host_plan(const char *call, uint64_t ws,
                              void (*host)(void *priv, void *workspace),
                              void (*drop)(void *priv), void *priv,
                              uint64_t *wsOut, aclOpExecutor **ex);
/* Phase 2 of every operator: checks the workspace (device memory of the
 * size asked for) and the stream, then queues the executor. */
aclnnStatus op_launch(void *workspace, uint64_t wsSize, aclOpExecutor *ex,
                      aclrtStream stream, const char *call);

/* ACL_STANDIN_FAULT=conv_wrong: every aclnnConvolution result gets 1 too
 * much in its first element (acl_standin_nn.c). */
bool standin_conv_wrong(void);
/* acl_standin_train.c: arm its planted bugs from ACL_STANDIN_FAULT's
 * value (NULL when unset): addcdiv_wrong. */
void standin_train_fault(const char *fault);

#endif
