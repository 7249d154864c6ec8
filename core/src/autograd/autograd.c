/*
 * Autograd: grad mode, recording, the backward engine and the public API
 * of keel/autograd.h. The backward rules live in autograd_rules.c.
 *
 * Recording. dispatch.c calls keel__ag_record after a successful launch
 * when some input requires a gradient and grad mode is on; tensor.c calls
 * keel__ag_record_view for its views. A node keeps
 *
 *   - the rule (from the op's GRAD token) and the op's resolved
 *     attributes, deep-copied;
 *   - dtype and shape of every input and output (to reduce broadcast
 *     gradients and to make zeros for outputs that got none);
 *   - the tensors its rule needs, as aliases without graph (so a node
 *     that saves its own output does not own itself), with the version
 *     of their storage at that moment;
 *   - one edge per input: to the producing node, to a leaf, or nowhere.
 *
 * Ownership runs one way, from outputs towards leaves: tensor -> grad_fn
 * node -> next nodes, leaves and saved aliases. Nothing points back, so
 * reference counts free every graph; a long chain is freed iteratively.
 *
 * The engine. keel_backward and keel_grad start from root nodes, find
 * every node reachable through edges (marking them with a fresh epoch and
 * counting, per node, the edges that lead into it), check before anything
 * is written that no node was freed by an earlier backward and that no
 * saved tensor changed since it was saved, then run the rules in
 * topological order (a node runs once all its consumers delivered),
 * summing the gradients that reach one output from several consumers.
 * Rules run as ordinary ops with grad mode off. A leaf adds what reaches
 * it into its .grad; keel_grad captures instead.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_internal.h"

/* ---- how the layers below reach autograd ---------------------------------- */

/* Dispatch and the tensor layer do not call autograd: it hands them a
 * recorder and a release hook before the first tensor requires a gradient
 * (which is what every graph starts from). Installing twice is harmless. */
static const struct keel_recorder recorder = {
    .enabled = keel__grad_enabled,
    .differentiable = keel__op_differentiable,
    .record = keel__ag_record,
    .record_view = keel__ag_record_view,
};

static void install_hooks(void)
{
    keel__tensor_set_release_hook(keel__ag_tensor_release);
    keel__dispatch_set_recorder(&recorder);
}

/* ---- grad mode ----------------------------------------------------------- */

static _Thread_local int no_grad_depth;
/* keel_enable_grad_begin's saved depths. */
#define ENABLE_GRAD_MAX 32
static _Thread_local int enable_saved[ENABLE_GRAD_MAX];
static _Thread_local int enable_depth;

bool keel__grad_enabled(void)
{
    return no_grad_depth == 0;
}

void keel_no_grad_begin(void)
{
    no_grad_depth++;
}

void keel_no_grad_end(void)
{
    if (no_grad_depth > 0)
        no_grad_depth--;
}

bool keel_is_grad_enabled(void)
{
    return no_grad_depth == 0;
}

keel_status keel_enable_grad_begin(void)
{
    if (enable_depth == ENABLE_GRAD_MAX)
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "keel_enable_grad_begin: nested more than %d "
                           "deep", ENABLE_GRAD_MAX);
    enable_saved[enable_depth++] = no_grad_depth;
    no_grad_depth = 0;
    return KEEL_STATUS_OK;
}

void keel_enable_grad_end(void)
{
    if (enable_depth > 0)
        no_grad_depth = enable_saved[--enable_depth];
}

/* ---- helpers ------------------------------------------------------------- */

static bool is_float(keel_dtype dt)
{
    return dt == KEEL_F32 || dt == KEEL_F64 || dt == KEEL_F16 ||
           dt == KEEL_BF16;
}

static void meta_of(const keel_tensor *t, struct ag_meta *m)
{
    m->dtype = t->dtype;
    m->ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++)
        m->shape[i] = t->shape[i];
}

static bool meta_matches(const struct ag_meta *m, const keel_tensor *t)
{
    if (m->ndim != t->ndim)
        return false;
    for (int i = 0; i < m->ndim; i++)
        if (m->shape[i] != t->shape[i])
            return false;
    return true;
}

static const char *meta_str(const struct ag_meta *m, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "%s[", keel_dtype_name(m->dtype));

    for (int i = 0; i < m->ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "",
                              (long long)m->shape[i]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
    return buf;
}

keel_status keel__ag_full(keel_place place, keel_dtype dtype, int ndim,
                          const int64_t *shape, double value,
                          keel_tensor **out)
{
    keel_attr a[3] = {keel_attr_ints("shape", shape, ndim),
                      keel_attr_dtype("dtype", dtype),
                      keel_attr_float("value", value)};

    return keel__run_create(KEEL_OP_FULL, place, a, 3, out);
}

/* An alias of t: same storage and geometry, no graph. */
static keel_status alias_of(const keel_tensor *t, keel_tensor **out)
{
    return keel__tensor_view(t, t->ndim, t->shape, t->strides, t->offset,
                             out);
}

/* ---- node lifetime ------------------------------------------------------- */

static void node_free_saved(struct keel_grad_node *n)
{
    for (int i = 0; i < AG_SAVE_IN; i++) {
        keel_tensor_free(n->saved_in[i]);
        n->saved_in[i] = NULL;
    }
    for (int j = 0; j < AG_SAVE_OUT; j++) {
        keel_tensor_free(n->saved_out[j]);
        n->saved_out[j] = NULL;
    }
}

/* Free n (whose count reached 0) and every node that dies with it,
 * without recursion. */
static void node_destroy(struct keel_grad_node *n)
{
    n->dead_next = NULL;
    while (n) {
        struct keel_grad_node *next = n->dead_next;

        for (int i = 0; i < n->nin; i++) {
            struct ag_edge *e = &n->next[i];
            if (e->node && atomic_fetch_sub(&e->node->refcount, 1) == 1) {
                e->node->dead_next = next;
                next = e->node;
            }
            /* A leaf has no node, so freeing it never recurses. */
            keel_tensor_free(e->leaf);
        }
        node_free_saved(n);
        if (n->grads) {
            for (int j = 0; j < n->nout; j++)
                keel_tensor_free(n->grads[j]);
            free(n->grads);
        }
        free(n->attr_mem);
        if (n->custom) {
            if (n->custom->ctx_free)
                n->custom->ctx_free(n->custom->ctx);
            free(n->custom);
        }
        free(n);
        n = next;
    }
}

static void node_unref(struct keel_grad_node *n)
{
    if (n && atomic_fetch_sub(&n->refcount, 1) == 1)
        node_destroy(n);
}

/* The grad-ready hooks of one leaf. */
struct ag_hook {
    keel_grad_ready_hook fn;
    void *ctx;
};
struct ag_hooks {
    int n, cap;
    struct ag_hook h[];
};

void keel__ag_tensor_release(keel_tensor *t)
{
    free(t->hooks);
    t->hooks = NULL;
    node_unref(t->grad_fn);
    t->grad_fn = NULL;
    keel_tensor_free(t->grad);
    t->grad = NULL;
}

/* One allocation: the node, then its edges and metadata. */
static struct keel_grad_node *node_new(int nin, int nout)
{
    size_t edges = sizeof(struct ag_edge) * (size_t)nin;
    size_t ins = sizeof(struct ag_meta) * (size_t)nin;
    size_t outs = sizeof(struct ag_meta) * (size_t)nout;
    struct keel_grad_node *n = calloc(1, sizeof(*n) + edges + ins + outs);
    char *p;

    if (!n)
        return NULL;
    p = (char *)(n + 1);
    atomic_init(&n->refcount, 1);
    n->view = -1;
    n->nin = nin;
    n->nout = nout;
    n->next = (struct ag_edge *)(void *)p;
    n->in_meta = (struct ag_meta *)(void *)(p + edges);
    n->out_meta = (struct ag_meta *)(void *)(p + edges + ins);
    return n;
}

/* The edge for an input that requires a gradient. */
static void edge_to(struct ag_edge *e, const keel_tensor *t)
{
    if (t->grad_fn) {
        atomic_fetch_add(&t->grad_fn->refcount, 1);
        e->node = t->grad_fn;
        e->slot = t->grad_slot;
    } else {
        e->leaf = keel_tensor_ref((keel_tensor *)t);
    }
}

/* Deep copy of the resolved attributes (strings and arrays). */
static keel_status copy_attrs(struct keel_grad_node *n,
                              const struct keel_op_call *c)
{
    size_t bytes = 0, used = 0;
    int na = c->def->nattrs;
    char *mem;

    for (int k = 0; k < na; k++) {
        const keel_attr *a = &c->attrs[k];
        if (a->type == KEEL_ATTR_STRING && a->v.s)
            bytes += strlen(a->v.s) + 1;
        else if (a->type == KEEL_ATTR_INTS)
            bytes += sizeof(int64_t) * (size_t)a->v.ints.count;
        else if (a->type == KEEL_ATTR_FLOATS)
            bytes += sizeof(double) * (size_t)a->v.floats.count;
        bytes = (bytes + 7) & ~(size_t)7;
    }
    mem = bytes ? malloc(bytes) : NULL;
    if (bytes && !mem)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "autograd: out of host memory for attributes");
    n->attr_mem = mem;
    n->nattrs = na;
    for (int k = 0; k < na; k++) {
        keel_attr *a = &n->attrs[k];
        size_t len = 0;

        *a = c->attrs[k];
        if (a->type == KEEL_ATTR_STRING && a->v.s) {
            len = strlen(a->v.s) + 1;
            memcpy(mem + used, a->v.s, len);
            a->v.s = mem + used;
        } else if (a->type == KEEL_ATTR_INTS && a->v.ints.count > 0) {
            len = sizeof(int64_t) * (size_t)a->v.ints.count;
            memcpy(mem + used, a->v.ints.data, len);
            a->v.ints.data = (const int64_t *)(void *)(mem + used);
        } else if (a->type == KEEL_ATTR_FLOATS && a->v.floats.count > 0) {
            len = sizeof(double) * (size_t)a->v.floats.count;
            memcpy(mem + used, a->v.floats.data, len);
            a->v.floats.data = (const double *)(void *)(mem + used);
        }
        used = (used + len + 7) & ~(size_t)7;
    }
    return KEEL_STATUS_OK;
}

static keel_status save(keel_tensor **slot, unsigned *ver,
                        const keel_tensor *t)
{
    keel_status st = alias_of(t, slot);

    if (st == KEEL_STATUS_OK)
        *ver = atomic_load(&t->storage->version);
    return st;
}

/* Make the outputs of n point at it. Consumes the caller's reference. */
static void attach_outputs(struct keel_grad_node *n, keel_tensor **outs)
{
    for (int j = 0; j < n->nout; j++) {
        if (!(n->out_diff & (1ull << j)))
            continue;
        atomic_fetch_add(&n->refcount, 1);
        outs[j]->requires_grad = true;
        outs[j]->grad_fn = n;
        outs[j]->grad_slot = j;
    }
    node_unref(n);
}

keel_status keel__ag_record(const struct keel_op_call *c, keel_tensor **outs)
{
    const struct ag_rule *rule = keel__ag_op_rule(c->op);
    struct keel_grad_node *n;
    bool any = false;
    keel_status st;

    if (!rule || !rule->fn)
        return KEEL_STATUS_OK;
    n = node_new(c->nin, c->nout);
    if (!n)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "autograd: out of host memory recording %s",
                           c->def->info->name);
    n->rule = rule;
    n->def = c->def;
    n->place = c->place;
    for (int i = 0; i < c->nin; i++) {
        const keel_tensor *t = c->in[i];
        meta_of(t, &n->in_meta[i]);
        if (t->requires_grad && is_float(t->dtype) &&
            keel__ag_input_diff(c->op, i)) {
            edge_to(&n->next[i], t);
            any = true;
        }
    }
    for (int j = 0; j < c->nout; j++) {
        meta_of(outs[j], &n->out_meta[j]);
        if (j < 64 && is_float(outs[j]->dtype) &&
            keel__ag_output_diff(c->op, j))
            n->out_diff |= 1ull << j;
    }
    if (!any || !n->out_diff) {
        node_unref(n);
        return KEEL_STATUS_OK;
    }
    st = copy_attrs(n, c);
    for (int i = 0; st == KEEL_STATUS_OK && i < c->nin && i < AG_SAVE_IN;
         i++)
        if (rule->save_in & (1u << i))
            st = save(&n->saved_in[i], &n->saved_in_ver[i], c->in[i]);
    for (int j = 0; st == KEEL_STATUS_OK && j < c->nout && j < AG_SAVE_OUT;
         j++)
        if (rule->save_out & (1u << j))
            st = save(&n->saved_out[j], &n->saved_out_ver[j], outs[j]);
    if (st != KEEL_STATUS_OK) {
        node_unref(n);
        return st;
    }
    attach_outputs(n, outs);
    return KEEL_STATUS_OK;
}

keel_status keel__ag_record_view(enum keel_ag_view kind, const keel_tensor *x,
                                 keel_tensor *out, const int64_t *params,
                                 int nparams)
{
    struct keel_grad_node *n;

    if (!is_float(x->dtype))
        return KEEL_STATUS_OK;
    n = node_new(1, 1);
    if (!n)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "autograd: out of host memory recording a view");
    n->rule = keel__ag_view_rule(kind);
    n->view = (int)kind;
    n->place = out->storage->place;
    meta_of(x, &n->in_meta[0]);
    meta_of(out, &n->out_meta[0]);
    n->out_diff = 1;
    edge_to(&n->next[0], x);
    if (kind == KEEL_AG_VIEW_TO) {
        /* The gradient goes back to x's device. */
        n->vp[0] = x->storage->place.plugin;
        n->vp[1] = x->storage->place.device;
        n->nvp = 2;
    }
    for (int i = 0; i < nparams && i < AG_VIEW_PARAMS; i++)
        n->vp[n->nvp++] = params[i];
    attach_outputs(n, &out);
    return KEEL_STATUS_OK;
}

/* ---- public per-tensor API ----------------------------------------------- */

#define NEED(cond, ...)                                                      \
    do {                                                                     \
        if (!(cond))                                                         \
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT, __VA_ARGS__);   \
    } while (0)

keel_status keel_tensor_set_stop_gradient(keel_tensor *t, bool stop_gradient)
{
    NEED(t, "keel_tensor_set_stop_gradient: tensor is NULL");
    if (!stop_gradient && !is_float(t->dtype)) {
        char a[128];
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_tensor_set_stop_gradient: %s: only "
                           "floating-point tensors can take part in "
                           "differentiation",
                           keel__tensor_str(t, a, sizeof(a)));
    }
    if (!stop_gradient)
        install_hooks();
    t->requires_grad = !stop_gradient;
    return KEEL_STATUS_OK;
}

bool keel_tensor_stop_gradient(const keel_tensor *t)
{
    return !t || !t->requires_grad;
}

bool keel_tensor_is_leaf(const keel_tensor *t)
{
    return t && !t->grad_fn;
}

static const char *node_name(const struct keel_grad_node *n);

const char *keel_tensor_grad_fn_name(const keel_tensor *t)
{
    return t && t->grad_fn ? node_name(t->grad_fn) : NULL;
}

keel_tensor *keel_tensor_grad(const keel_tensor *t)
{
    return t && t->grad ? keel_tensor_ref(t->grad) : NULL;
}

/* A gradient for t: g itself when nobody else can see its storage,
 * else a contiguous copy; cast to t's dtype. */
static keel_status own_grad(const struct ag_meta *m, keel_tensor *g,
                            keel_tensor **out)
{
    keel_status st;

    *out = NULL;
    if (g->dtype != m->dtype)
        return keel_cast(g, m->dtype, out);
    if (atomic_load(&g->refcount) == 1 &&
        atomic_load(&g->storage->refcount) == 1 &&
        keel_tensor_is_contiguous(g) && !g->grad_fn) {
        *out = keel_tensor_ref(g);
        return KEEL_STATUS_OK;
    }
    st = keel__run1(KEEL_OP_COPY, (const keel_tensor *const[]){g}, 1, NULL,
                    0, out);
    return st;
}

keel_status keel_tensor_set_grad(keel_tensor *t, const keel_tensor *grad)
{
    struct ag_meta m;
    keel_tensor *g = NULL;
    keel_status st;
    char a[128], b[128];

    NEED(t, "keel_tensor_set_grad: tensor is NULL");
    if (!grad) {
        keel_tensor_free(t->grad);
        t->grad = NULL;
        return KEEL_STATUS_OK;
    }
    meta_of(t, &m);
    NEED(meta_matches(&m, grad) &&
             grad->storage->place.plugin == t->storage->place.plugin &&
             grad->storage->place.device == t->storage->place.device,
         "keel_tensor_set_grad: the gradient %s must have the shape and "
         "device of the tensor %s",
         keel__tensor_str(grad, b, sizeof(b)),
         keel__tensor_str(t, a, sizeof(a)));
    NEED(is_float(grad->dtype),
         "keel_tensor_set_grad: the gradient must be floating-point, got %s",
         keel_dtype_name(grad->dtype));
    keel_no_grad_begin();
    st = keel_cast(grad, t->dtype, &g);
    if (st == KEEL_STATUS_OK && !keel_tensor_is_contiguous(g)) {
        keel_tensor *c = NULL;
        st = keel_contiguous(g, &c);
        keel_tensor_free(g);
        g = c;
    }
    keel_no_grad_end();
    if (st != KEEL_STATUS_OK)
        return st;
    if (g->grad_fn || g->requires_grad) {
        keel_tensor *d = NULL;
        st = keel_detach(g, &d);
        keel_tensor_free(g);
        if (st != KEEL_STATUS_OK)
            return st;
        g = d;
    }
    install_hooks();
    keel_tensor_free(t->grad);
    t->grad = g;
    return KEEL_STATUS_OK;
}

keel_status keel_tensor_clear_grad(keel_tensor *t)
{
    keel_tensor *z = NULL;
    keel_status st;

    NEED(t, "keel_tensor_clear_grad: tensor is NULL");
    if (!t->grad)
        return KEEL_STATUS_OK;
    st = keel__ag_full(t->grad->storage->place, t->grad->dtype, t->grad->ndim,
                       t->grad->shape, 0.0, &z);
    if (st != KEEL_STATUS_OK)
        return st;
    keel_tensor_free(t->grad);
    t->grad = z;
    return KEEL_STATUS_OK;
}

keel_status keel_detach(const keel_tensor *t, keel_tensor **out)
{
    NEED(t && out, "keel_detach: %s is NULL", t ? "out" : "tensor");
    *out = NULL;
    return alias_of(t, out);
}

keel_status keel_tensor_add_grad_ready_hook(keel_tensor *t,
                                            keel_grad_ready_hook fn,
                                            void *ctx)
{
    struct ag_hooks *h;
    char a[128];

    NEED(t && fn, "keel_tensor_add_grad_ready_hook: %s is NULL",
         t ? "fn" : "tensor");
    NEED(!t->grad_fn,
         "keel_tensor_add_grad_ready_hook: %s is not a leaf (it was "
         "computed by '%s'); hooks go on parameters and other leaves",
         keel__tensor_str(t, a, sizeof(a)), node_name(t->grad_fn));
    h = t->hooks;
    if (!h || h->n == h->cap) {
        int cap = h ? h->cap * 2 : 2;
        struct ag_hooks *v = realloc(h, sizeof(*h) +
                                            sizeof(h->h[0]) * (size_t)cap);
        if (!v)
            return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                               "keel_tensor_add_grad_ready_hook: out of host "
                               "memory");
        if (!h)
            v->n = 0;
        v->cap = cap;
        h = t->hooks = v;
    }
    install_hooks(); /* keel_tensor_free must release the list */
    h->h[h->n].fn = fn;
    h->h[h->n].ctx = ctx;
    h->n++;
    return KEEL_STATUS_OK;
}

void keel_tensor_remove_grad_ready_hook(keel_tensor *t,
                                        keel_grad_ready_hook fn, void *ctx)
{
    struct ag_hooks *h = t ? t->hooks : NULL;

    for (int i = 0; h && i < h->n; i++)
        if (h->h[i].fn == fn && h->h[i].ctx == ctx) {
            memmove(&h->h[i], &h->h[i + 1],
                    sizeof(h->h[0]) * (size_t)(h->n - i - 1));
            h->n--;
            return;
        }
}

/* ---- the engine ---------------------------------------------------------- */

/* A gradient the caller wants back (keel_grad): of a leaf, or of output
 * `slot` of a node. */
struct capture {
    const keel_tensor *leaf;
    struct keel_grad_node *node;
    int slot;
    struct ag_meta meta;
    bool reached;
    keel_tensor *grad;
};

struct engine {
    uint64_t epoch;
    bool retain;
    bool accumulate; /* add into leaves' .grad (keel_backward) */
    const char *api;
    struct keel_grad_node **all; /* every reachable node */
    int nall, capall;
    struct keel_grad_node **stack; /* discovery, then the ready list */
    int nstack, capstack;
    struct capture *caps;
    int ncaps;
};

static _Atomic uint64_t engine_epoch;

static keel_status push(struct keel_grad_node ***arr, int *n, int *cap,
                        struct keel_grad_node *v)
{
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 64;
        struct keel_grad_node **p = realloc(*arr, sizeof(**arr) * (size_t)nc);
        if (!p)
            return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                               "autograd: out of host memory in backward");
        *arr = p;
        *cap = nc;
    }
    (*arr)[(*n)++] = v;
    return KEEL_STATUS_OK;
}

/* Sum g into *slot (which takes a reference). */
static keel_status accumulate(keel_tensor **slot, keel_tensor *g)
{
    keel_tensor *s = NULL;
    keel_status st;

    if (!*slot) {
        *slot = keel_tensor_ref(g);
        return KEEL_STATUS_OK;
    }
    st = keel_add(*slot, g, &s);
    if (st != KEEL_STATUS_OK)
        return st;
    keel_tensor_free(*slot);
    *slot = s;
    return KEEL_STATUS_OK;
}

static const char *node_name(const struct keel_grad_node *n)
{
    return n->custom ? n->custom->name : n->rule->name;
}

/* The checks made before anything is written. */
static keel_status check_node(struct engine *E, struct keel_grad_node *n)
{
    char a[128];

    if (n->released)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: the graph through '%s' was already freed by "
                           "an earlier backward with retain_graph = false; "
                           "pass retain_graph = true to the earlier call to "
                           "run backward through it again",
                           E->api, node_name(n));
    for (int i = 0; i < AG_SAVE_IN; i++) {
        const keel_tensor *s = n->saved_in[i];
        unsigned v;
        if (!s)
            continue;
        v = atomic_load(&s->storage->version);
        if (v != n->saved_in_ver[i])
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "%s: input %d of '%s' (%s) was saved for "
                               "backward and then modified in place "
                               "(version %u, now %u), e.g. by an optimizer "
                               "update; recompute the forward pass after "
                               "updating",
                               E->api, i, node_name(n),
                               keel__tensor_str(s, a, sizeof(a)),
                               n->saved_in_ver[i], v);
    }
    for (int j = 0; j < AG_SAVE_OUT; j++) {
        const keel_tensor *s = n->saved_out[j];
        unsigned v;
        if (!s)
            continue;
        v = atomic_load(&s->storage->version);
        if (v != n->saved_out_ver[j])
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "%s: output %d of '%s' (%s) was saved for "
                               "backward and then modified in place "
                               "(version %u, now %u)",
                               E->api, j, node_name(n),
                               keel__tensor_str(s, a, sizeof(a)),
                               n->saved_out_ver[j], v);
    }
    return KEEL_STATUS_OK;
}

static void mark_leaf_captures(struct engine *E, const keel_tensor *leaf)
{
    for (int k = 0; k < E->ncaps; k++)
        if (E->caps[k].leaf == leaf)
            E->caps[k].reached = true;
}

/* One more edge of this backward leads to `leaf` (leaves with grad-ready
 * hooks only, and only when .grad is written). */
static void count_hooked_edge(struct engine *E, keel_tensor *leaf)
{
    if (!E->accumulate || !leaf->hooks || !leaf->hooks->n)
        return;
    if (leaf->hook_epoch != E->epoch) {
        leaf->hook_epoch = E->epoch;
        leaf->hook_pending = 0;
    }
    leaf->hook_pending++;
}

/* An edge into `leaf` has delivered; the last one runs its hooks. */
static keel_status edge_delivered(struct engine *E, keel_tensor *leaf)
{
    struct ag_hooks *h = leaf->hooks;
    keel_status st = KEEL_STATUS_OK;

    if (!E->accumulate || !h || leaf->hook_epoch != E->epoch ||
        --leaf->hook_pending != 0)
        return KEEL_STATUS_OK;
    for (int k = 0; k < h->n && st == KEEL_STATUS_OK; k++) {
        st = h->h[k].fn(leaf, h->h[k].ctx);
        if (st != KEEL_STATUS_OK) {
            char msg[1024];

            snprintf(msg, sizeof(msg), "%s", keel_last_error());
            st = keel__error(st, "%s: a grad-ready hook failed: %s", E->api,
                             msg);
        }
    }
    return st;
}

/* Find every node reachable from the roots already on E->stack. */
static keel_status discover(struct engine *E)
{
    keel_status st = KEEL_STATUS_OK;

    while (E->nstack > 0 && st == KEEL_STATUS_OK) {
        struct keel_grad_node *n = E->stack[--E->nstack];

        st = check_node(E, n);
        for (int i = 0; st == KEEL_STATUS_OK && i < n->nin; i++) {
            struct keel_grad_node *m = n->next[i].node;
            if (n->next[i].leaf) {
                mark_leaf_captures(E, n->next[i].leaf);
                count_hooked_edge(E, n->next[i].leaf);
            }
            if (!m)
                continue;
            if (m->epoch != E->epoch) {
                m->epoch = E->epoch;
                m->deps = 0;
                m->grads = NULL;
                st = push(&E->all, &E->nall, &E->capall, m);
                if (st == KEEL_STATUS_OK)
                    st = push(&E->stack, &E->nstack, &E->capstack, m);
            }
            m->deps++;
        }
    }
    for (int k = 0; k < E->ncaps; k++)
        if (E->caps[k].node && E->caps[k].node->epoch == E->epoch)
            E->caps[k].reached = true;
    return st;
}

static keel_status node_grads(struct keel_grad_node *n)
{
    if (!n->grads) {
        n->grads = calloc((size_t)n->nout, sizeof(*n->grads));
        if (!n->grads)
            return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                               "autograd: out of host memory in backward");
    }
    return KEEL_STATUS_OK;
}

/* Deliver g (may be NULL) for a leaf. */
static keel_status to_leaf(struct engine *E, keel_tensor *leaf,
                           keel_tensor *g)
{
    struct ag_meta m;
    keel_tensor *own = NULL;
    keel_status st;

    if (!g)
        return KEEL_STATUS_OK;
    for (int k = 0; k < E->ncaps; k++)
        if (E->caps[k].leaf == leaf)
            return accumulate(&E->caps[k].grad, g);
    if (!E->accumulate)
        return KEEL_STATUS_OK;
    if (leaf->grad)
        return accumulate(&leaf->grad, g);
    meta_of(leaf, &m);
    st = own_grad(&m, g, &own);
    if (st == KEEL_STATUS_OK)
        leaf->grad = own;
    return st;
}

/* Re-set the last error as "<api>: backward of '<rule>': <message>". */
static keel_status rule_error(struct engine *E, struct keel_grad_node *n,
                              keel_status st)
{
    char msg[1024];

    snprintf(msg, sizeof(msg), "%s", keel_last_error());
    return keel__error(st, "%s: backward of '%s': %s", E->api, node_name(n),
                       msg);
}

/* Check (and fix the dtype of) the gradient a rule made for input i. */
static keel_status check_gin(struct engine *E, struct keel_grad_node *n,
                             int i, keel_tensor **g)
{
    const struct ag_meta *m = &n->in_meta[i];
    keel_tensor *c = NULL;
    char a[128], b[128];
    keel_status st;

    if (!meta_matches(m, *g))
        return keel__error(KEEL_STATUS_INTERNAL,
                           "%s: backward of '%s' gave %s for input %d of "
                           "shape %s",
                           E->api, node_name(n),
                           keel__tensor_str(*g, a, sizeof(a)), i,
                           meta_str(m, b, sizeof(b)));
    if ((*g)->dtype == m->dtype)
        return KEEL_STATUS_OK;
    st = keel_cast(*g, m->dtype, &c);
    if (st != KEEL_STATUS_OK)
        return st;
    keel_tensor_free(*g);
    *g = c;
    return KEEL_STATUS_OK;
}

/* Run node n: its rule, then hand the input gradients on. */
static keel_status run_node(struct engine *E, struct keel_grad_node *n)
{
    keel_tensor **gin = NULL;
    struct ag_ctx c;
    keel_status st = KEEL_STATUS_OK;
    bool any = false;

    for (int k = 0; k < E->ncaps; k++)
        if (E->caps[k].node == n && n->grads && n->grads[E->caps[k].slot])
            E->caps[k].grad = keel_tensor_ref(n->grads[E->caps[k].slot]);
    for (int j = 0; n->grads && j < n->nout; j++)
        any = any || n->grads[j];
    if (any) {
        /* Outputs that got nothing count as zeros. */
        for (int j = 0; j < n->nout && st == KEEL_STATUS_OK; j++)
            if ((n->out_diff & (1ull << j)) && !n->grads[j])
                st = keel__ag_full(n->place, n->out_meta[j].dtype,
                                   n->out_meta[j].ndim, n->out_meta[j].shape,
                                   0.0, &n->grads[j]);
        if (st != KEEL_STATUS_OK)
            return st;
        gin = calloc((size_t)(n->nin ? n->nin : 1), sizeof(*gin));
        if (!gin)
            return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                               "autograd: out of host memory in backward");
        memset(&c, 0, sizeof(c));
        c.n = n;
        c.gout = n->grads;
        c.gin = gin;
        st = n->rule->fn(&c);
        if (st == KEEL_STATUS_OK)
            st = c.st;
        keel__ag_ctx_release(&c);
        if (st != KEEL_STATUS_OK)
            st = rule_error(E, n, st);
    }
    if (n->grads) {
        for (int j = 0; j < n->nout; j++)
            keel_tensor_free(n->grads[j]);
        free(n->grads);
        n->grads = NULL;
    }
    for (int i = 0; i < n->nin; i++) {
        struct ag_edge *e = &n->next[i];
        keel_tensor *g = gin ? gin[i] : NULL;

        if (st == KEEL_STATUS_OK && g && (e->node || e->leaf))
            st = check_gin(E, n, i, &g);
        if (gin)
            gin[i] = g;
        if (st != KEEL_STATUS_OK)
            continue;
        if (e->leaf) {
            st = to_leaf(E, e->leaf, g);
            if (st == KEEL_STATUS_OK)
                st = edge_delivered(E, e->leaf);
        } else if (e->node) {
            if (g && (st = node_grads(e->node)) == KEEL_STATUS_OK)
                st = accumulate(&e->node->grads[e->slot], g);
            if (--e->node->deps == 0 && st == KEEL_STATUS_OK)
                st = push(&E->stack, &E->nstack, &E->capstack, e->node);
        }
    }
    for (int i = 0; gin && i < n->nin; i++)
        keel_tensor_free(gin[i]);
    free(gin);
    if (!E->retain) {
        node_free_saved(n);
        n->released = true;
    }
    return st;
}

/* One starting point of a backward: a tensor and its gradient. */
struct root {
    keel_tensor *t;
    keel_tensor *grad; /* owned */
};

static keel_status root_grad(struct engine *E, keel_tensor *t,
                             const keel_tensor *given, keel_tensor **out)
{
    struct ag_meta m;
    char a[128], b[128];

    *out = NULL;
    meta_of(t, &m);
    if (!given)
        return keel__ag_full(t->storage->place, t->dtype, t->ndim, t->shape,
                             1.0, out);
    if (!meta_matches(&m, given) ||
        given->storage->place.plugin != t->storage->place.plugin ||
        given->storage->place.device != t->storage->place.device ||
        !is_float(given->dtype))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: the output gradient %s must be floating-point "
                           "with the shape and device of the output %s",
                           E->api, keel__tensor_str(given, b, sizeof(b)),
                           keel__tensor_str(t, a, sizeof(a)));
    return keel_cast(given, t->dtype, out);
}

static keel_status engine_run(struct engine *E, struct root *roots,
                              int nroots)
{
    keel_status st = KEEL_STATUS_OK;

    E->epoch = atomic_fetch_add(&engine_epoch, 1) + 1;
    for (int r = 0; r < nroots && st == KEEL_STATUS_OK; r++) {
        struct keel_grad_node *n = roots[r].t->grad_fn;
        if (!n) {
            mark_leaf_captures(E, roots[r].t);
            continue;
        }
        if (n->epoch == E->epoch)
            continue;
        n->epoch = E->epoch;
        n->deps = 0;
        n->grads = NULL;
        st = push(&E->all, &E->nall, &E->capall, n);
        if (st == KEEL_STATUS_OK)
            st = push(&E->stack, &E->nstack, &E->capstack, n);
    }
    if (st == KEEL_STATUS_OK)
        st = discover(E);
    /* Seed the roots. */
    for (int r = 0; r < nroots && st == KEEL_STATUS_OK; r++) {
        keel_tensor *t = roots[r].t;
        if (!t->grad_fn) {
            count_hooked_edge(E, t);
            st = to_leaf(E, t, roots[r].grad);
            if (st == KEEL_STATUS_OK)
                st = edge_delivered(E, t);
            continue;
        }
        st = node_grads(t->grad_fn);
        if (st == KEEL_STATUS_OK)
            st = accumulate(&t->grad_fn->grads[t->grad_slot], roots[r].grad);
    }
    E->nstack = 0;
    for (int r = 0; r < nroots && st == KEEL_STATUS_OK; r++) {
        struct keel_grad_node *n = roots[r].t->grad_fn;
        if (n && n->deps == 0) {
            n->deps = -1; /* queued once even when it is several roots */
            st = push(&E->stack, &E->nstack, &E->capstack, n);
        }
    }
    while (st == KEEL_STATUS_OK && E->nstack > 0)
        st = run_node(E, E->stack[--E->nstack]);
    /* After an error some nodes may still hold gradients. */
    for (int k = 0; k < E->nall; k++) {
        struct keel_grad_node *n = E->all[k];
        if (n->grads) {
            for (int j = 0; j < n->nout; j++)
                keel_tensor_free(n->grads[j]);
            free(n->grads);
            n->grads = NULL;
        }
    }
    return st;
}

static void engine_free(struct engine *E)
{
    free(E->all);
    free(E->stack);
}

keel_status keel_backward(keel_tensor *loss, const keel_tensor *grad_output,
                          bool retain_graph)
{
    struct engine E;
    struct root r = {loss, NULL};
    keel_status st;
    char a[128];

    NEED(loss, "keel_backward: loss is NULL");
    NEED(loss->requires_grad,
         "keel_backward: %s has stop_gradient = true: nothing to "
         "differentiate (it depends on no tensor with stop_gradient = "
         "false, or was computed under no_grad)",
         keel__tensor_str(loss, a, sizeof(a)));
    memset(&E, 0, sizeof(E));
    E.retain = retain_graph;
    E.accumulate = true;
    E.api = "keel_backward";
    keel_no_grad_begin();
    keel__amp_pause_begin(); /* gradients keep the forward's dtypes */
    st = root_grad(&E, loss, grad_output, &r.grad);
    if (st == KEEL_STATUS_OK)
        st = engine_run(&E, &r, 1);
    keel__amp_pause_end();
    keel_no_grad_end();
    keel_tensor_free(r.grad);
    engine_free(&E);
    return st;
}

keel_status keel_grad(keel_tensor *const *outputs, int num_outputs,
                      keel_tensor *const *grad_outputs,
                      keel_tensor *const *inputs, int num_inputs,
                      bool retain_graph, bool allow_unused,
                      keel_tensor **grads)
{
    struct engine E;
    struct root *roots = NULL;
    keel_status st = KEEL_STATUS_OK;
    char a[128];

    NEED(outputs && num_outputs > 0 && inputs && num_inputs > 0 && grads,
         "keel_grad: need outputs, inputs and grads (%d outputs, %d "
         "inputs)",
         num_outputs, num_inputs);
    for (int i = 0; i < num_inputs; i++)
        grads[i] = NULL;
    for (int r = 0; r < num_outputs; r++) {
        NEED(outputs[r], "keel_grad: output %d is NULL", r);
        NEED(outputs[r]->requires_grad,
             "keel_grad: output %d (%s) has stop_gradient = true", r,
             keel__tensor_str(outputs[r], a, sizeof(a)));
    }
    for (int i = 0; i < num_inputs; i++) {
        NEED(inputs[i], "keel_grad: input %d is NULL", i);
        NEED(inputs[i]->requires_grad,
             "keel_grad: input %d (%s) has stop_gradient = true", i,
             keel__tensor_str(inputs[i], a, sizeof(a)));
    }
    memset(&E, 0, sizeof(E));
    E.retain = retain_graph;
    E.api = "keel_grad";
    roots = calloc((size_t)num_outputs, sizeof(*roots));
    E.caps = calloc((size_t)num_inputs, sizeof(*E.caps));
    if (!roots || !E.caps) {
        st = keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                         "keel_grad: out of host memory");
        goto out;
    }
    E.ncaps = num_inputs;
    for (int i = 0; i < num_inputs; i++) {
        struct capture *cp = &E.caps[i];
        meta_of(inputs[i], &cp->meta);
        if (inputs[i]->grad_fn) {
            cp->node = inputs[i]->grad_fn;
            cp->slot = inputs[i]->grad_slot;
        } else {
            cp->leaf = inputs[i];
        }
    }
    keel_no_grad_begin();
    keel__amp_pause_begin();
    for (int r = 0; r < num_outputs && st == KEEL_STATUS_OK; r++) {
        roots[r].t = outputs[r];
        st = root_grad(&E, outputs[r], grad_outputs ? grad_outputs[r] : NULL,
                       &roots[r].grad);
    }
    if (st == KEEL_STATUS_OK)
        st = engine_run(&E, roots, num_outputs);
    for (int i = 0; i < num_inputs && st == KEEL_STATUS_OK; i++) {
        struct capture *cp = &E.caps[i];
        if (!cp->reached) {
            if (!allow_unused)
                st = keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                                 "keel_grad: input %d (%s) does not "
                                 "influence the outputs (pass allow_unused "
                                 "to get NULL for it)",
                                 i,
                                 keel__tensor_str(inputs[i], a, sizeof(a)));
            continue;
        }
        if (!cp->grad)
            st = keel__ag_full(inputs[i]->storage->place, cp->meta.dtype,
                               cp->meta.ndim, cp->meta.shape, 0.0,
                               &grads[i]);
        else
            st = own_grad(&cp->meta, cp->grad, &grads[i]);
    }
    keel__amp_pause_end();
    keel_no_grad_end();
out:
    for (int i = 0; i < num_inputs; i++) {
        if (E.caps)
            keel_tensor_free(E.caps[i].grad);
        if (st != KEEL_STATUS_OK) {
            keel_tensor_free(grads[i]);
            grads[i] = NULL;
        }
    }
    for (int r = 0; roots && r < num_outputs; r++)
        keel_tensor_free(roots[r].grad);
    free(roots);
    free(E.caps);
    engine_free(&E);
    return st;
}

/* ---- nodes with the caller's backward (Paddle's PyLayer) ----------------- */

static keel_status custom_rule_fn(struct ag_ctx *c)
{
    struct keel_grad_node *n = c->n;

    return n->custom->fn(n->custom->ctx, c->gout, n->nout, c->gin, n->nin);
}

static const struct ag_rule custom_rule = {"custom", custom_rule_fn, 0, 0};

keel_status keel_autograd_attach(keel_tensor *const *inputs, int num_inputs,
                                 keel_tensor *const *outputs, int num_outputs,
                                 const char *name,
                                 keel_custom_backward backward, void *ctx,
                                 void (*ctx_free)(void *ctx))
{
    struct keel_grad_node *n;
    bool any = false;

    if (!outputs || num_outputs < 1 || num_outputs > 64 || num_inputs < 0 ||
        (num_inputs && !inputs) || !backward || num_inputs > 4096)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_autograd_attach: %s",
                           !backward ? "backward is NULL"
                           : !outputs || num_outputs < 1 || num_outputs > 64
                               ? "need 1 to 64 outputs"
                               : "inputs are NULL or more than 4096");
    for (int j = 0; j < num_outputs; j++) {
        if (!outputs[j])
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "keel_autograd_attach: outputs[%d] is NULL",
                               j);
        if (outputs[j]->grad_fn || outputs[j]->requires_grad)
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "keel_autograd_attach: outputs[%d] is already "
                               "part of a graph (compute the outputs under "
                               "no_grad)", j);
    }
    for (int i = 0; i < num_inputs; i++) {
        if (!inputs[i])
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "keel_autograd_attach: inputs[%d] is NULL",
                               i);
        any = any || (inputs[i]->requires_grad &&
                      is_float(inputs[i]->dtype));
    }
    if (!any) { /* nothing to differentiate: the outputs stay constants */
        if (ctx_free)
            ctx_free(ctx);
        return KEEL_STATUS_OK;
    }
    n = node_new(num_inputs, num_outputs);
    if (n)
        n->custom = calloc(1, sizeof(*n->custom));
    if (!n || !n->custom) {
        free(n);
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_autograd_attach: out of host memory");
    }
    install_hooks();
    n->rule = &custom_rule;
    n->place = outputs[0]->storage->place;
    n->custom->fn = backward;
    n->custom->ctx = ctx;
    n->custom->ctx_free = ctx_free;
    snprintf(n->custom->name, sizeof(n->custom->name), "%s",
             name && *name ? name : "custom");
    for (int i = 0; i < num_inputs; i++) {
        meta_of(inputs[i], &n->in_meta[i]);
        if (inputs[i]->requires_grad && is_float(inputs[i]->dtype))
            edge_to(&n->next[i], inputs[i]);
    }
    for (int j = 0; j < num_outputs; j++) {
        meta_of(outputs[j], &n->out_meta[j]);
        if (is_float(outputs[j]->dtype))
            n->out_diff |= 1ull << j;
    }
    if (!n->out_diff) {
        n->custom->ctx_free = NULL; /* the caller keeps ctx on failure */
        node_unref(n);
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_autograd_attach: no output is floating "
                           "point");
    }
    attach_outputs(n, (keel_tensor **)outputs);
    return KEEL_STATUS_OK;
}
