/*
 * The jit layer's private declarations: a graph in memory. Values are
 * numbered; each is defined once, as an input, a constant or a node's
 * output, and nodes come in an order where every input is defined before
 * its use. The graph never changes after it is built.
 */
#ifndef KEEL_JIT_INTERNAL_H
#define KEEL_JIT_INTERNAL_H

#include <stdatomic.h>

#include <keel/jit.h>

#include "dispatch/dispatch_internal.h"

#define KEEL_JIT_MAX_SYMBOLS 16

/* One dimension: static (sym == JIT_STATIC, size mul), mul times symbol
 * `sym`, or dynamic with no known expression (JIT_ANY). */
#define JIT_STATIC (-1)
#define JIT_ANY (-2)
struct jit_dim {
    int sym;
    int64_t mul;
};

enum jit_value_kind { JIT_INPUT, JIT_CONST, JIT_NODE };

struct jit_value {
    enum jit_value_kind kind;
    keel_dtype dtype;
    int ndim;
    struct jit_dim dim[KEEL_MAX_DIMS];
    char *name;        /* inputs and constants */
    keel_tensor *data; /* constants */
};

enum jit_node_kind {
    JIT_OP,      /* a catalog op                                       */
    JIT_RESHAPE, /* p: the new shape, one jit_dim each (JIT_ANY: -1)   */
    JIT_PERMUTE, /* p: perm                                            */
    JIT_SLICE,   /* p: axis, start, stop, step                         */
    JIT_EXPAND,  /* p: the new shape (JIT_ANY: keep the input's size)  */
};

struct jit_node {
    enum jit_node_kind kind;
    keel_op_id op;
    int nin, nout;
    int *in, *out;
    int nattrs;
    keel_attr attrs[KEEL_MAX_OP_ATTRS]; /* payloads owned by the node */
    int np;
    int64_t p[KEEL_MAX_DIMS];
    struct jit_dim pd[KEEL_MAX_DIMS]; /* RESHAPE / EXPAND */
};

struct keel_graph {
    atomic_int refs;
    int nsym;
    char *sym[KEEL_JIT_MAX_SYMBOLS];
    int nval, nnode, nin, nout, nconst;
    struct jit_value *val;
    struct jit_node *node;
    int *in, *out; /* value ids */
    char **out_name;
    int *last_use; /* per value: the last node reading it, -1 none */
};

/* graph.c */
keel_status keel__graph_new(keel_graph **out);
/** Append a value; returns its id or -1 (out of memory, error set). */
int keel__graph_add_value(keel_graph *g, enum jit_value_kind kind,
                          keel_dtype dtype, int ndim,
                          const struct jit_dim *dim);
/** Append a node (in/out copied); returns its index or -1. */
int keel__graph_add_node(keel_graph *g, enum jit_node_kind kind,
                         keel_op_id op, const int *in, int nin,
                         const int *out, int nout);
/** Free node n's attribute payloads and leave it with none. */
void keel__graph_clear_attrs(struct jit_node *n);
/** Copy attribute a into node n (payload copied); OK or OUT_OF_MEMORY. */
keel_status keel__graph_set_attr(struct jit_node *n, int k, const keel_attr *a);
/** Add a graph input or output (value id; output name copied). */
keel_status keel__graph_add_input(keel_graph *g, int value);
keel_status keel__graph_add_output(keel_graph *g, int value, const char *name);
/** Add a symbol; returns its index or -1. */
int keel__graph_add_symbol(keel_graph *g, const char *name);
/** Compute last uses and count constants; call once the graph is whole. */
keel_status keel__graph_finish(keel_graph *g);
/** The view op names, by node kind ("keel.reshape", ...). */
const char *keel__graph_kind_name(enum jit_node_kind k);
/** "[batch, 3, 2*seq, ?]" into buf. */
const char *keel__graph_shape_str(const keel_graph *g,
                                  const struct jit_value *v, char *buf,
                                  size_t size);

/* Running, for the layers above (inference/). */
#define KEEL__RUN_KEEP_ALL 1u  /* no value is freed before the run ends  */
#define KEEL__RUN_ANY_FLOAT 2u /* a float value may come in another float
                                * dtype (a run inside auto_cast)        */
/** keel_graph_run with flags; value_bytes (nval entries, or NULL)
 *  receives each node output's byte size (0 for inputs and constants,
 *  UINT64_MAX for a view sharing its input's storage). */
keel_status keel__graph_run_ex(const keel_graph *g, keel_tensor *const *inputs,
                               int num_inputs, keel_tensor **outputs,
                               int max_outputs, int *num_outputs,
                               unsigned flags, uint64_t *value_bytes);
/** Run one node on vals (indexed by value id) with symbols bound. */
keel_status keel__graph_run_node(const keel_graph *g, const struct jit_node *n,
                                 keel_tensor **vals, const int64_t *sym,
                                 keel_tensor **outs, int *nout);
/** Append a copy of node a (kind, op, view parameters, attributes) to c,
 *  reading values `in` and making `out` (a->nin and a->nout of them). */
keel_status keel__graph_copy_node(keel_graph *c, const struct jit_node *a,
                                  const int *in, const int *out);
/** A deep copy sharing the constants' tensors. */
keel_status keel__graph_clone(const keel_graph *g, keel_graph **out);
/** One more reference (keel_graph_free drops one). */
void keel__graph_ref(keel_graph *g);

#endif /* KEEL_JIT_INTERNAL_H */
