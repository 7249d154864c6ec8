/*
 * What the CNNL half of the stand-in shares between its files
 * (cnnl_standin.c and the operator files cnnl_standin_nn.c and
 * cnnl_standin_train.c). Test code only.
 */
#ifndef KEEL_CNNL_STANDIN_H
#define KEEL_CNNL_STANDIN_H

#include <stdbool.h>
#include <stddef.h>

#include "standin.h"

struct cnnlContext {
    cnrtQueue_t q;
};

struct cnnlTensorStruct {
    bool set;
    cnnlDataType_t dt;
    int rank;
    int dims[8];
    int strides[8];
    bool nhwc; /* set NHWC by cnnlSetTensorDescriptor (the conv and
                  batch-norm calls insist on it); the Ex form clears it */
};

/* cnnlSetTransposeDescriptor's permutation (cnnl_standin_nn.c). */
struct cnnlTransposeStruct {
    bool set;
    int rank;
    int perm[8];
};

/* Return the armed failure of this call of `name`, if any. */
#define NN_ARMED(name)                    \
    do {                                  \
        int nn_code_ = si_injected(name); \
        if (nn_code_)                     \
            return nn_code_;              \
    } while (0)

/* Bytes of one element of dt. */
size_t nn_dt_bytes(cnnlDataType_t dt);
/* Elements of a descriptor's view, and its byte span in *span. */
size_t nn_numel(const struct cnnlTensorStruct *t, size_t *span);
/* Byte offset of the k-th element in row-major order. */
size_t nn_offset(const struct cnnlTensorStruct *t, size_t k);
/* One element at p, through double. */
double nn_load(const struct cnnlTensorStruct *t, const char *p);
void nn_store(const struct cnnlTensorStruct *t, char *p, double v);

#endif /* KEEL_CNNL_STANDIN_H */
