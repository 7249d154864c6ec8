/*
 * keel autograd — reverse-mode differentiation with PaddlePaddle 3.x
 * (dygraph) semantics.
 *
 * Every tensor carries a stop_gradient flag. Tensors a user creates
 * (keel_tensor_from_host, keel_zeros, keel_randn, ...) start with
 * stop_gradient = true, as in Paddle; parameters set it to false. When an
 * op of the catalog with a backward rule (ops.def, GRAD != NONE) runs in
 * grad mode and any input has stop_gradient = false, the core records a
 * graph node: the op, its attributes, the tensors its backward rule needs,
 * and edges to the nodes that produced its inputs. Its floating-point
 * outputs get stop_gradient = false; integer outputs (indices, masks) and
 * the statistics outputs of the norm ops never carry gradients. The view
 * functions of tensor.h (reshape, permute, transpose, slice, expand,
 * squeeze, unsqueeze, flatten) and keel_tensor_to are recorded as well.
 *
 * A tensor with stop_gradient = false and no producing node is a leaf:
 * keel_backward adds the gradient into its .grad, and gradients add up
 * across backward calls until cleared. Gradients of intermediate tensors
 * are not kept. Backward runs every rule as ordinary keel ops on the
 * device the forward ran on.
 *
 * Ownership: a tensor owns its producing node; a node owns the tensors it
 * saved and references to the nodes (or leaves) its inputs came from. The
 * graph is freed when the last tensor referring to it is freed, and its
 * saved tensors already after a backward with retain_graph = false.
 *
 * Grad mode is per thread. One backward at a time may run through a given
 * graph; separate graphs may be differentiated on separate threads.
 * docs/autograd.md lists every backward rule and its conventions.
 */
#ifndef KEEL_AUTOGRAD_H
#define KEEL_AUTOGRAD_H

#include <stdbool.h>

#include <keel/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- per-tensor state ---------------------------------------------------- */

/**
 * Set Paddle's stop_gradient flag. false makes t take part in
 * differentiation: a tensor without a producing node becomes a leaf that
 * accumulates .grad. true makes later ops treat t as a constant (an
 * existing graph behind t is kept but no longer reached through t).
 * Only floating-point tensors can have stop_gradient = false: for other
 * dtypes that is INVALID_ARGUMENT. Returns OK or INVALID_ARGUMENT.
 */
KEEL_API keel_status keel_tensor_set_stop_gradient(keel_tensor *t,
                                                   bool stop_gradient);

/** Paddle's stop_gradient: true unless t takes part in differentiation
 *  (also true for NULL). */
KEEL_API bool keel_tensor_stop_gradient(const keel_tensor *t);

/** true when t has no producing node (user tensors, parameters, detached
 *  tensors, and every result computed without recording). */
KEEL_API bool keel_tensor_is_leaf(const keel_tensor *t);

/** Name of the backward rule of t's producing node ("matmul",
 *  "reshape", ..., or the name given to keel_autograd_attach), or NULL
 *  for a leaf. Valid while t lives. */
KEEL_API const char *keel_tensor_grad_fn_name(const keel_tensor *t);

/** The accumulated gradient of a leaf: a new reference (free it), or NULL
 *  when none has been computed (or t is NULL or not a leaf). The gradient
 *  has t's shape, dtype and device and is never part of a graph. */
KEEL_API keel_tensor *keel_tensor_grad(const keel_tensor *t);

/**
 * Replace t's gradient with `grad` (NULL: drop it), for optimizers,
 * gradient clipping and data-parallel all-reduce. grad must be
 * floating-point with t's shape and device; it is cast to t's dtype (and
 * made contiguous) when needed and stored without its graph, sharing
 * storage with `grad` otherwise. Returns OK or INVALID_ARGUMENT.
 */
KEEL_API keel_status keel_tensor_set_grad(keel_tensor *t,
                                          const keel_tensor *grad);

/**
 * Paddle's Tensor.clear_grad() (set_to_zero = True): a gradient that
 * exists becomes zeros of the same shape; without one nothing happens.
 * The zeros are a new tensor: a reference obtained earlier from
 * keel_tensor_grad keeps the old values. Use keel_tensor_set_grad(t, NULL)
 * to drop the gradient instead (Paddle's set_to_zero = False).
 */
KEEL_API keel_status keel_tensor_clear_grad(keel_tensor *t);

/** A new tensor sharing t's storage with stop_gradient = true and no
 *  graph (Paddle's Tensor.detach()). In-place updates of one are seen by
 *  the other. */
KEEL_API keel_status keel_detach(const keel_tensor *t, keel_tensor **out);

/**
 * Called by keel_backward once the gradient of leaf `leaf` is final for
 * that backward pass: every edge of the graph that leads to the leaf has
 * delivered its part into leaf's .grad (Paddle's reducer hook on a
 * parameter, PyTorch's post-accumulate-grad hook). keel_tensor_grad(leaf)
 * may be NULL when no gradient flowed (every path gave none). The hook
 * runs on the thread running backward, with no_grad on; an error it
 * returns stops the backward pass and becomes keel_backward's result.
 * keel_grad never calls hooks (it writes no .grad).
 */
typedef keel_status (*keel_grad_ready_hook)(keel_tensor *leaf, void *ctx);

/**
 * Add a grad-ready hook to leaf t (a tensor with no producing node);
 * hooks run in the order added. The pair (fn, ctx) identifies the hook
 * for keel_tensor_remove_grad_ready_hook; ctx must outlive it. Returns
 * OK, INVALID_ARGUMENT (NULL, or t not a leaf) or OUT_OF_MEMORY.
 */
KEEL_API keel_status keel_tensor_add_grad_ready_hook(keel_tensor *t,
                                                     keel_grad_ready_hook fn,
                                                     void *ctx);
/** Remove the first hook (fn, ctx) of t; no-op when there is none. */
KEEL_API void keel_tensor_remove_grad_ready_hook(keel_tensor *t,
                                                 keel_grad_ready_hook fn,
                                                 void *ctx);

/* ---- backward ------------------------------------------------------------ */

/**
 * Differentiate `loss` and add the gradients into the .grad of every leaf
 * it depends on (Paddle's Tensor.backward). grad_output is the gradient
 * of the loss (loss's shape; cast to loss's dtype when needed); NULL means
 * ones, for a loss of any shape, as in Paddle (PyTorch requires a scalar
 * there). With retain_graph = false the tensors the graph saved are freed
 * afterwards, and a later backward through any part of it fails with
 * INVALID_ARGUMENT. A saved tensor that an in-place op (an optimizer
 * update, batch_norm's running statistics) changed after it was saved is
 * an INVALID_ARGUMENT error naming the op, found before any gradient is
 * written. A loss with stop_gradient = true is INVALID_ARGUMENT.
 */
KEEL_API keel_status keel_backward(keel_tensor *loss,
                                   const keel_tensor *grad_output,
                                   bool retain_graph);

/**
 * Gradients of `outputs` with respect to `inputs` (Paddle's paddle.grad
 * without create_graph): grads[i] receives a new tensor with inputs[i]'s
 * shape, or NULL when inputs[i] does not influence the outputs and
 * allow_unused is true (otherwise that is INVALID_ARGUMENT). Inputs may
 * be leaves or intermediate tensors. Nothing is added to any .grad.
 * grad_outputs may be NULL, or hold NULL entries, for ones. On failure
 * every grads[i] is NULL.
 */
KEEL_API keel_status keel_grad(keel_tensor *const *outputs, int num_outputs,
                               keel_tensor *const *grad_outputs,
                               keel_tensor *const *inputs, int num_inputs,
                               bool retain_graph, bool allow_unused,
                               keel_tensor **grads);

/* ---- grad mode ----------------------------------------------------------- */

/** Open a no-grad scope on this thread (Paddle's paddle.no_grad()):
 *  nothing is recorded until the matching keel_no_grad_end. Scopes nest. */
KEEL_API void keel_no_grad_begin(void);

/** Close the innermost no-grad scope of this thread (no-op when none is
 *  open). */
KEEL_API void keel_no_grad_end(void);

/** true when this thread records graphs (no no-grad scope is open). */
KEEL_API bool keel_is_grad_enabled(void);

/**
 * Paddle's paddle.enable_grad(): record gradients again inside a no_grad
 * region (or inside a backward pass, for a custom backward that has to
 * run a forward, as recompute does), until the matching
 * keel_enable_grad_end restores the previous mode. Nests up to 32 deep
 * per thread; deeper is INVALID_STATE.
 */
KEEL_API keel_status keel_enable_grad_begin(void);
KEEL_API void keel_enable_grad_end(void);

/**
 * The backward of a node made by keel_autograd_attach: grad_outputs[j] is
 * the gradient of output j (zeros when nothing flowed into it); set
 * grad_inputs[i] to a new tensor with input i's shape and dtype, or leave
 * it NULL (no gradient). It runs inside the backward pass (no_grad on;
 * keel_enable_grad_begin turns recording back on).
 */
typedef keel_status (*keel_custom_backward)(void *ctx,
                                            keel_tensor *const *grad_outputs,
                                            int num_outputs,
                                            keel_tensor **grad_inputs,
                                            int num_inputs);

/**
 * Paddle's PyLayer in C: make `outputs`, computed from `inputs` without
 * recording (under no_grad), differentiable through `backward`. The
 * outputs get one node, named `name` in errors, whose backward calls
 * backward(ctx, ...); ctx is freed with ctx_free (may be NULL) when the
 * node dies. On OK the node owns ctx (when no input requires a gradient
 * there is no node, and ctx_free runs at once); on an error the caller
 * keeps it. Returns OK or INVALID_ARGUMENT (an output already in a graph,
 * or none floating point), OUT_OF_MEMORY.
 */
KEEL_API keel_status keel_autograd_attach(keel_tensor *const *inputs,
                                          int num_inputs,
                                          keel_tensor *const *outputs,
                                          int num_outputs, const char *name,
                                          keel_custom_backward backward,
                                          void *ctx,
                                          void (*ctx_free)(void *ctx));

/*
 * Scoped no-grad, the C form of Python's `with paddle.no_grad():`.
 *
 *   KEEL_NO_GRAD {
 *       keel_layer_call(model, x, &logits);   // nothing is recorded
 *       if (bad) return KEEL_STATUS_...;       // the scope still closes
 *   }
 *
 *   static keel_status evaluate(...)
 *   {
 *       KEEL_NO_GRAD_SCOPE;    // no-grad until this function returns
 *       ...
 *   }
 *
 * With GCC and clang both are built on __attribute__((cleanup)): the scope
 * closes however control leaves the block (its end, break, continue,
 * return, goto), so an early return cannot leave the thread in no-grad
 * mode. Limits:
 *   - inside KEEL_NO_GRAD { }, break and continue leave the KEEL_NO_GRAD
 *     block itself (it is a one-pass for-loop), not an enclosing loop;
 *   - longjmp() and thread cancellation run no cleanup: the scope stays
 *     open (call keel_no_grad_end yourself);
 *   - two KEEL_NO_GRAD or KEEL_NO_GRAD_SCOPE on one source line clash
 *     (their hidden variables are named after the line).
 * With other compilers KEEL_NO_GRAD is a plain one-pass loop that closes
 * the scope only when control reaches the end of its block (break, return
 * and goto out of it leave no-grad on: use keel_no_grad_begin/end there),
 * and KEEL_NO_GRAD_SCOPE is not defined.
 */
#define KEEL__NG_CAT2(a, b) a##b
#define KEEL__NG_CAT(a, b) KEEL__NG_CAT2(a, b)

#if defined(__GNUC__) || defined(__clang__)
static inline void keel__no_grad_cleanup(int *scope)
{
    (void)scope;
    keel_no_grad_end();
}

#define KEEL_NO_GRAD                                                       \
    for (int KEEL__NG_CAT(keel__ng_scope_, __LINE__)                        \
             __attribute__((cleanup(keel__no_grad_cleanup))) =              \
                 (keel_no_grad_begin(), 1);                                 \
         KEEL__NG_CAT(keel__ng_scope_, __LINE__);                           \
         KEEL__NG_CAT(keel__ng_scope_, __LINE__) = 0)

#define KEEL_NO_GRAD_SCOPE                                                 \
    int KEEL__NG_CAT(keel__ng_guard_, __LINE__)                             \
        __attribute__((cleanup(keel__no_grad_cleanup), unused)) =           \
            (keel_no_grad_begin(), 0)
#else
#define KEEL_NO_GRAD                                                       \
    for (int KEEL__NG_CAT(keel__ng_scope_, __LINE__) =                      \
             (keel_no_grad_begin(), 1);                                     \
         KEEL__NG_CAT(keel__ng_scope_, __LINE__);                           \
         KEEL__NG_CAT(keel__ng_scope_, __LINE__) = 0, keel_no_grad_end())
#endif

#ifdef __cplusplus
}
#endif

#endif /* KEEL_AUTOGRAD_H */
