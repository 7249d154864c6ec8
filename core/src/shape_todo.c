/*
 * Weak placeholders for shape rules not written yet. A real rule defined
 * elsewhere in libkeel replaces its placeholder at link time; until then the
 * op fails with a clear NOT_SUPPORTED error.
 */
#include "tensor_internal.h"

#define KEEL_SHAPE_TODO(rule)                                              \
    __attribute__((weak)) keel_status keel__shape_##rule(                  \
        struct keel_op_call *c)                                           \
    {                                                                     \
        return keel__op_error(c, KEEL_STATUS_NOT_SUPPORTED,               \
                              "not implemented yet in this build (shape " \
                              "rule '" #rule "')");                       \
    }

KEEL_SHAPE_TODO(reduce)
KEEL_SHAPE_TODO(reduce_arg)
KEEL_SHAPE_TODO(reduce_bool)
KEEL_SHAPE_TODO(cumsum)
KEEL_SHAPE_TODO(matmul)
KEEL_SHAPE_TODO(linear)
KEEL_SHAPE_TODO(conv2d)
KEEL_SHAPE_TODO(conv2d_grad)
KEEL_SHAPE_TODO(conv2d_transpose)
KEEL_SHAPE_TODO(conv2d_transpose_grad)
KEEL_SHAPE_TODO(pool2d)
KEEL_SHAPE_TODO(pool2d_grad)
KEEL_SHAPE_TODO(adaptive_pool2d)
KEEL_SHAPE_TODO(batch_norm)
KEEL_SHAPE_TODO(batch_norm_grad)
KEEL_SHAPE_TODO(layer_norm)
KEEL_SHAPE_TODO(layer_norm_grad)
KEEL_SHAPE_TODO(group_norm)
KEEL_SHAPE_TODO(group_norm_grad)
KEEL_SHAPE_TODO(same_axis)
KEEL_SHAPE_TODO(same_axis_grad)
KEEL_SHAPE_TODO(cross_entropy)
KEEL_SHAPE_TODO(cross_entropy_grad)
KEEL_SHAPE_TODO(loss)
KEEL_SHAPE_TODO(nll_loss)
KEEL_SHAPE_TODO(embedding)
KEEL_SHAPE_TODO(embedding_grad)
KEEL_SHAPE_TODO(dropout)
KEEL_SHAPE_TODO(one_hot)
KEEL_SHAPE_TODO(concat)
KEEL_SHAPE_TODO(stack)
KEEL_SHAPE_TODO(split)
KEEL_SHAPE_TODO(gather)
KEEL_SHAPE_TODO(scatter)
KEEL_SHAPE_TODO(take_along_axis)
KEEL_SHAPE_TODO(tile)
KEEL_SHAPE_TODO(pad)
KEEL_SHAPE_TODO(topk)
KEEL_SHAPE_TODO(sort)
KEEL_SHAPE_TODO(argsort)
KEEL_SHAPE_TODO(optimizer)
