/*
 * Autograd internals shared by autograd.c (recording, the engine, the
 * public API) and autograd_rules.c (one backward function per GRAD token
 * of ops.def, plus the views).
 */
#ifndef KEEL_AUTOGRAD_INTERNAL_H
#define KEEL_AUTOGRAD_INTERNAL_H

#include <keel/autograd.h>

#include "dispatch/dispatch_internal.h"

/* ---- what the layers above see (autograd.c) ------------------------------ */

/* The recorder dispatch calls (installed on first use, see
 * dispatch_internal.h) is built from the first three. */

/** Whether this thread records graphs (no no_grad scope is open). */
bool keel__grad_enabled(void);

/** Whether op `op` has a backward rule in the catalog. */
bool keel__op_differentiable(keel_op_id op);

/** Record a graph node for a call that just ran: inputs c->in, outputs
 *  outs[c->nout]. Called by dispatch only when some input requires a
 *  gradient and grad mode is on. */
keel_status keel__ag_record(const struct keel_op_call *c, keel_tensor **outs);

/** Record view `kind` of x as out (x requires a gradient, grad mode on):
 *  the recorder's record_view. */
keel_status keel__ag_record_view(enum keel_ag_view kind, const keel_tensor *x,
                                 keel_tensor *out, const int64_t *params,
                                 int nparams);

/** Drop a tensor's graph references (its grad_fn and grad). */
void keel__ag_tensor_release(keel_tensor *t);


/* Room for saved tensors: inputs 0..7 and outputs 0..3 of an op. */
#define AG_SAVE_IN 8
#define AG_SAVE_OUT 4
/* View parameters (a permutation, or a slice, or a device). */
#define AG_VIEW_PARAMS KEEL_MAX_DIMS

/* Dtype and shape of a node's input or output. */
struct ag_meta {
    keel_dtype dtype;
    int ndim;
    int64_t shape[KEEL_MAX_DIMS];
};

/* Where the gradient of one input goes: the node that produced the input
 * (output `slot` of it), or the leaf tensor that accumulates it, or
 * nowhere (both NULL: the input does not require a gradient). */
struct ag_edge {
    struct keel_grad_node *node;
    int slot;
    keel_tensor *leaf;
};

struct ag_ctx;
typedef keel_status (*ag_rule_fn)(struct ag_ctx *c);

/* A backward rule: the function and which tensors it needs saved. */
struct ag_rule {
    const char *name;
    ag_rule_fn fn;
    uint32_t save_in;  /* bit i: input i */
    uint32_t save_out; /* bit j: output j */
};

struct keel_grad_node {
    atomic_int refcount;
    const struct ag_rule *rule;
    const struct keel_op_def *def; /* the op (NULL for a view) */
    int view;                      /* enum keel_ag_view, or -1 for an op */
    keel_place place;              /* where the output gradients live */
    int nin, nout;
    struct ag_edge *next;     /* [nin] */
    struct ag_meta *in_meta;  /* [nin] */
    struct ag_meta *out_meta; /* [nout] */
    uint64_t out_diff;        /* bit j: output j carries a gradient */
    keel_tensor *saved_in[AG_SAVE_IN];
    keel_tensor *saved_out[AG_SAVE_OUT];
    unsigned saved_in_ver[AG_SAVE_IN];
    unsigned saved_out_ver[AG_SAVE_OUT];
    bool released; /* saved tensors freed by a backward */
    /* Attributes of the call, deep-copied (strings and arrays point into
     * attr_mem). */
    int nattrs;
    keel_attr attrs[KEEL_MAX_OP_ATTRS];
    void *attr_mem;
    int64_t vp[AG_VIEW_PARAMS]; /* view parameters */
    int nvp;
    /* State of the backward that is running (see autograd.c). */
    uint64_t epoch;
    int deps;
    keel_tensor **grads; /* [nout] */
    struct keel_grad_node *dead_next;
    /* A node made by keel_autograd_attach: its backward is the caller's
     * function (rule is keel__ag_custom_rule). */
    struct ag_custom *custom;
};

struct ag_custom {
    keel_custom_backward fn;
    void *ctx;
    void (*ctx_free)(void *ctx);
    char name[48];
};

/* What a rule sees: the node, the gradients of its outputs (NULL for
 * outputs that carry none), and where to put the input gradients. Rules
 * build their results from keel ops; the helpers in autograd_rules.c keep
 * every temporary in `tmp` and stop at the first error (kept in `st`). */
struct ag_ctx {
    struct keel_grad_node *n;
    keel_tensor *const *gout;
    keel_tensor **gin;
    keel_status st;
    keel_tensor **tmp;
    int ntmp, captmp;
};

/** The rule of a catalog op (fn NULL when GRAD is NONE). */
const struct ag_rule *keel__ag_op_rule(keel_op_id op);

/** The rule of a recorded view. */
const struct ag_rule *keel__ag_view_rule(enum keel_ag_view v);

/** Free the temporaries of a rule context. */
void keel__ag_ctx_release(struct ag_ctx *c);

/** Whether input i / output j of `op` can carry a gradient at all (the
 *  dtype is checked separately). */
bool keel__ag_input_diff(keel_op_id op, int i);
bool keel__ag_output_diff(keel_op_id op, int j);

/** New contiguous tensor filled with `value` on a place. */
keel_status keel__ag_full(keel_place place, keel_dtype dtype, int ndim,
                          const int64_t *shape, double value,
                          keel_tensor **out);

#endif /* KEEL_AUTOGRAD_INTERNAL_H */
