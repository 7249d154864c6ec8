/*
 * The stand-in's aclnn operators for the plugin's npu_kernels_train.c,
 * computed on the host (see acl_standin_internal.h for the shared parts).
 *
 * Not written yet.
 */
#include "acl_standin_internal.h"

typedef int acl_standin_train_empty; /* ISO C wants a declaration */
