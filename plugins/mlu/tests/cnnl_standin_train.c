/*
 * The stand-in's CNNL operators for the plugin's mlu_kernels_train.c,
 * computed on the host (shared parts: cnnl_standin.h, standin.h).
 *
 * Not written yet.
 */
#include "cnnl_standin.h"

typedef int cnnl_standin_train_empty; /* ISO C wants a declaration */
