/*
 * The Predictor: a config, a loaded and optimised graph shared by clones,
 * named input and output handles, runs, and what a run cost in memory.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keel/amp.h>

#include "inference/inference_internal.h"

#define MAX_PASSES 16

struct keel_inference_config {
    char *prefix;
    char *device;
    int threads;
    keel_dtype precision;
    bool ir_optim, memory_optim;
    bool disabled[MAX_PASSES];
};

/* What clones share. */
struct shared {
    atomic_int refs;
    keel_graph *g;
    char *device;
    keel_dtype precision;
    bool memory_optim;
    int nodes_before;
    int threads;
    bool threads_applied;
    char passes[512];
};

struct keel_io_handle {
    char *name;
    int index;
    bool output;
    keel_tensor *t;
    keel_predictor *p;
};

struct keel_predictor {
    struct shared *sh;
    keel_io_handle *in, *out;
    uint64_t *value_bytes;  /* the last completed run's, per value */
    uint64_t *run_bytes;    /* the run in progress writes here */
    uint64_t run_peak_bytes; /* the last run's */
    bool ran;
};

static keel_status oom(void)
{
    return keel__error(KEEL_STATUS_OUT_OF_MEMORY, "predictor: out of memory");
}

#define NEED(cond, ...)                                                     \
    do {                                                                    \
        if (!(cond))                                                        \
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT, __VA_ARGS__);  \
    } while (0)

/* ---- config -------------------------------------------------------------- */

keel_status keel_inference_config_create(const char *prefix,
                                         keel_inference_config **out)
{
    keel_inference_config *c;

    NEED(prefix && *prefix && out,
         "keel_inference_config_create: %s", out ? "no model path prefix"
                                                 : "out is NULL");
    c = calloc(1, sizeof(*c));
    if (!c || !(c->prefix = strdup(prefix))) {
        free(c);
        return oom();
    }
    c->precision = KEEL_F32;
    c->ir_optim = true;
    c->memory_optim = true;
    *out = c;
    return KEEL_STATUS_OK;
}

void keel_inference_config_free(keel_inference_config *c)
{
    if (!c)
        return;
    free(c->prefix);
    free(c->device);
    free(c);
}

keel_status keel_inference_config_set_device(keel_inference_config *c,
                                             const char *device)
{
    char *d;

    NEED(c && device && *device,
         "keel_inference_config_set_device: NULL argument");
    d = strdup(device);
    if (!d)
        return oom();
    free(c->device);
    c->device = d;
    return KEEL_STATUS_OK;
}

keel_status keel_inference_config_set_threads(keel_inference_config *c,
                                              int threads)
{
    NEED(c && threads >= 0 && threads <= 4096,
         "keel_inference_config_set_threads: %d threads (0 to 4096)",
         threads);
    c->threads = threads;
    return KEEL_STATUS_OK;
}

keel_status keel_inference_config_set_precision(keel_inference_config *c,
                                                keel_dtype precision)
{
    NEED(c && (precision == KEEL_F32 || precision == KEEL_F16 ||
               precision == KEEL_BF16),
         "keel_inference_config_set_precision: %s is not float32, float16 "
         "or bfloat16",
         c ? keel_dtype_name(precision) : "(no config)");
    c->precision = precision;
    return KEEL_STATUS_OK;
}

keel_status keel_inference_config_switch_ir_optim(keel_inference_config *c,
                                                  bool on)
{
    NEED(c, "keel_inference_config_switch_ir_optim: config is NULL");
    c->ir_optim = on;
    return KEEL_STATUS_OK;
}

keel_status keel_inference_config_enable_memory_optim(
    keel_inference_config *c, bool on)
{
    NEED(c, "keel_inference_config_enable_memory_optim: config is NULL");
    c->memory_optim = on;
    return KEEL_STATUS_OK;
}

keel_status keel_inference_config_delete_pass(keel_inference_config *c,
                                              const char *pass)
{
    NEED(c && pass, "keel_inference_config_delete_pass: NULL argument");
    for (int i = 0; i < keel_inference_num_passes(); i++)
        if (!strcmp(keel_inference_pass_name(i), pass)) {
            c->disabled[i] = true;
            return KEEL_STATUS_OK;
        }
    return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                       "keel_inference_config_delete_pass: no pass named "
                       "'%s' (keel_inference_pass_name lists them)",
                       pass);
}

/* ---- predictor --------------------------------------------------------------- */

static void shared_free(struct shared *s)
{
    if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    keel_graph_free(s->g);
    free(s->device);
    free(s);
}

static keel_status make_handles(keel_predictor *p)
{
    const keel_graph *g = p->sh->g;

    p->in = calloc((size_t)(g->nin ? g->nin : 1), sizeof(*p->in));
    p->out = calloc((size_t)(g->nout ? g->nout : 1), sizeof(*p->out));
    p->value_bytes = calloc((size_t)(g->nval ? g->nval : 1),
                            sizeof(uint64_t));
    p->run_bytes = calloc((size_t)(g->nval ? g->nval : 1), sizeof(uint64_t));
    if (!p->in || !p->out || !p->value_bytes || !p->run_bytes)
        return oom();
    for (int i = 0; i < g->nin; i++) {
        p->in[i].index = i;
        p->in[i].p = p;
        if (!(p->in[i].name = strdup(g->val[g->in[i]].name)))
            return oom();
    }
    for (int i = 0; i < g->nout; i++) {
        p->out[i].index = i;
        p->out[i].output = true;
        p->out[i].p = p;
        if (!(p->out[i].name = strdup(g->out_name[i])))
            return oom();
    }
    return KEEL_STATUS_OK;
}

void keel_predictor_free(keel_predictor *p)
{
    if (!p)
        return;
    if (p->sh) {
        for (int i = 0; p->in && i < p->sh->g->nin; i++) {
            free(p->in[i].name);
            keel_tensor_free(p->in[i].t);
        }
        for (int i = 0; p->out && i < p->sh->g->nout; i++) {
            free(p->out[i].name);
            keel_tensor_free(p->out[i].t);
        }
    }
    free(p->in);
    free(p->out);
    free(p->value_bytes);
    free(p->run_bytes);
    shared_free(p->sh);
    free(p);
}

/* Threads of the CPU plugin's pool: only before it starts (it reads
 * KEEL_CPU_THREADS once), and never over the user's own setting. */
static bool apply_threads(int threads)
{
    char buf[16];

    if (threads <= 0 || getenv("KEEL_CPU_THREADS"))
        return false;
    snprintf(buf, sizeof(buf), "%d", threads);
    return setenv("KEEL_CPU_THREADS", buf, 0) == 0;
}

keel_status keel_predictor_create(const keel_inference_config *c,
                                  keel_predictor **out)
{
    keel_predictor *p;
    struct shared *s;
    keel_graph *loaded = NULL;
    int changed[MAX_PASSES];
    keel_status st;

    NEED(c && out, "keel_predictor_create: %s is NULL",
         c ? "out" : "config");
    *out = NULL;
    p = calloc(1, sizeof(*p));
    s = calloc(1, sizeof(*s));
    if (!p || !s) {
        free(p);
        free(s);
        return oom();
    }
    atomic_init(&s->refs, 1);
    p->sh = s;
    s->precision = c->precision;
    s->memory_optim = c->memory_optim;
    s->threads = c->threads;
    s->threads_applied = apply_threads(c->threads);
    s->device = strdup(c->device ? c->device : keel_get_device());
    if (!s->device) {
        st = oom();
        goto fail;
    }
    st = keel_jit_load(c->prefix, s->device, &loaded);
    if (st != KEEL_STATUS_OK)
        goto fail;
    s->nodes_before = loaded->nnode;
    if (c->ir_optim) {
        st = keel__passes_run(loaded, c->disabled, c->precision, &s->g,
                              changed, s->passes, sizeof(s->passes));
        keel_graph_free(loaded);
        if (st != KEEL_STATUS_OK)
            goto fail;
    } else {
        s->g = loaded;
        snprintf(s->passes, sizeof(s->passes), "off");
    }
    st = make_handles(p);
    if (st != KEEL_STATUS_OK)
        goto fail;
    *out = p;
    return KEEL_STATUS_OK;
fail:
    keel_predictor_free(p);
    return st;
}

keel_status keel_predictor_clone(const keel_predictor *src,
                                 keel_predictor **out)
{
    keel_predictor *p;
    keel_status st;

    NEED(src && out, "keel_predictor_clone: NULL argument");
    p = calloc(1, sizeof(*p));
    if (!p)
        return oom();
    atomic_fetch_add(&src->sh->refs, 1);
    p->sh = src->sh;
    st = make_handles(p);
    if (st != KEEL_STATUS_OK) {
        keel_predictor_free(p);
        return st;
    }
    *out = p;
    return KEEL_STATUS_OK;
}

int keel_predictor_num_inputs(const keel_predictor *p)
{
    return p ? p->sh->g->nin : 0;
}

int keel_predictor_num_outputs(const keel_predictor *p)
{
    return p ? p->sh->g->nout : 0;
}

const char *keel_predictor_input_name(const keel_predictor *p, int i)
{
    return p && i >= 0 && i < p->sh->g->nin ? p->in[i].name : NULL;
}

const char *keel_predictor_output_name(const keel_predictor *p, int i)
{
    return p && i >= 0 && i < p->sh->g->nout ? p->out[i].name : NULL;
}

static keel_io_handle *find(keel_io_handle *h, int n, const char *name,
                            const char *what)
{
    for (int i = 0; name && i < n; i++)
        if (!strcmp(h[i].name, name))
            return &h[i];
    keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                "keel_predictor_%s_handle: the model has no %s named '%s'",
                what, what, name ? name : "(null)");
    return NULL;
}

keel_io_handle *keel_predictor_input_handle(keel_predictor *p,
                                            const char *name)
{
    return p ? find(p->in, p->sh->g->nin, name, "input") : NULL;
}

keel_io_handle *keel_predictor_output_handle(keel_predictor *p,
                                             const char *name)
{
    return p ? find(p->out, p->sh->g->nout, name, "output") : NULL;
}

const keel_graph *keel_predictor_graph(const keel_predictor *p)
{
    return p ? p->sh->g : NULL;
}

/* The static plan: each node's outputs take the best-fitting free block
 * of a 64-byte-aligned arena when they are made and give it back after
 * the last reader of the value or of any view of it; the arena's
 * high-water mark is the planned peak. */
struct block {
    uint64_t off, size;
};

static uint64_t plan_peak(const keel_graph *g, const uint64_t *bytes)
{
    struct block *fr = NULL, *live = NULL;
    int *root = NULL, *end = NULL;
    size_t nfr = 0, nv = (size_t)(g->nval ? g->nval : 1);
    uint64_t top = 0;

    live = calloc(nv, sizeof(*live));
    fr = calloc(nv * 2 + 2, sizeof(*fr));
    root = malloc(nv * sizeof(int));
    end = malloc(nv * sizeof(int));
    if (!live || !fr || !root || !end)
        goto out;
    /* A view's storage is its base's: the base lives as long as its last
     * view is read. */
    for (int v = 0; v < g->nval; v++) {
        root[v] = v;
        end[v] = g->last_use[v];
    }
    for (int n = 0; n < g->nnode; n++) {
        const struct jit_node *nd = &g->node[n];
        if (nd->kind != JIT_OP && nd->nin &&
            bytes[nd->out[0]] == UINT64_MAX)
            root[nd->out[0]] = root[nd->in[0]];
    }
    for (int v = 0; v < g->nval; v++)
        if (root[v] != v && end[v] > end[root[v]])
            end[root[v]] = end[v];
    for (int n = 0; n < g->nnode; n++) {
        const struct jit_node *nd = &g->node[n];

        for (int j = 0; j < nd->nout; j++) {
            uint64_t sz;
            size_t best = nfr;

            if (bytes[nd->out[j]] == UINT64_MAX)
                continue;
            sz = (bytes[nd->out[j]] + 63) & ~(uint64_t)63;
            for (size_t f = 0; f < nfr; f++)
                if (fr[f].size >= sz &&
                    (best == nfr || fr[f].size < fr[best].size))
                    best = f;
            if (best < nfr) {
                live[nd->out[j]].off = fr[best].off;
                live[nd->out[j]].size = sz;
                fr[best].off += sz;
                fr[best].size -= sz;
            } else {
                live[nd->out[j]].off = top;
                live[nd->out[j]].size = sz;
                top += sz;
            }
        }
        /* Storage whose last reader was this node, or that nothing reads,
         * is free again. */
        for (int j = 0; j < nd->nin + nd->nout; j++) {
            int v = j < nd->nin ? nd->in[j] : nd->out[j - nd->nin];
            int r = root[v];

            if (g->val[r].kind != JIT_NODE || !live[r].size ||
                !(end[r] == n || end[r] < 0))
                continue;
            fr[nfr++] = live[r];
            live[r].size = 0;
        }
        /* Merge neighbouring free blocks (keeps the list short). */
        for (size_t a = 0; a < nfr; a++)
            for (size_t b = 0; b < nfr; b++)
                if (a != b && fr[a].size && fr[b].size &&
                    fr[a].off + fr[a].size == fr[b].off) {
                    fr[a].size += fr[b].size;
                    fr[b].size = 0;
                }
        {
            size_t k = 0;
            for (size_t f = 0; f < nfr; f++)
                if (fr[f].size)
                    fr[k++] = fr[f];
            nfr = k;
        }
    }
out:
    free(live);
    free(fr);
    free(root);
    free(end);
    return top;
}

keel_status keel_predictor_run(keel_predictor *p)
{
    const keel_graph *g;
    keel_tensor *ins[64], *outs[64];
    keel_memory_stats before, after;
    unsigned flags = 0;
    int got = 0;
    bool amp = false;
    keel_status st;

    NEED(p, "keel_predictor_run: predictor is NULL");
    g = p->sh->g;
    if (g->nin > 64 || g->nout > 64)
        return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                           "keel_predictor_run: more than 64 inputs or "
                           "outputs");
    for (int i = 0; i < g->nin; i++) {
        NEED(p->in[i].t, "keel_predictor_run: input '%s' is not set",
             p->in[i].name);
        ins[i] = p->in[i].t;
    }
    if (!p->sh->memory_optim)
        flags |= KEEL__RUN_KEEP_ALL;
    if (keel_memory_stats_get(p->sh->device, &before) != KEEL_STATUS_OK ||
        keel_memory_reset_peak(p->sh->device) != KEEL_STATUS_OK)
        memset(&before, 0, sizeof(before));
    if (p->sh->precision != KEEL_F32) {
        keel_amp_options o = keel_amp_default_options();

        o.enable = true;
        o.level = KEEL_AMP_O1;
        o.dtype = p->sh->precision;
        st = keel_amp_begin(&o);
        if (st != KEEL_STATUS_OK)
            return st;
        amp = true;
        flags |= KEEL__RUN_ANY_FLOAT;
    }
    st = keel__graph_run_ex(g, ins, g->nin, outs, 64, &got, flags,
                            p->run_bytes);
    if (amp)
        (void)keel_amp_end();
    if (st != KEEL_STATUS_OK)
        return st;
    for (int i = 0; i < got; i++) {
        keel_dtype want = g->val[g->out[i]].dtype;
        keel_tensor *t = outs[i];

        if (st == KEEL_STATUS_OK && t->dtype != want) {
            keel_tensor *c = NULL;
            st = keel_cast(t, want, &c);
            keel_tensor_free(t);
            t = c;
        }
        keel_tensor_free(p->out[i].t);
        p->out[i].t = t;
    }
    if (st != KEEL_STATUS_OK)
        return st;
    if (keel_memory_stats_get(p->sh->device, &after) == KEEL_STATUS_OK)
        p->run_peak_bytes = after.peak_allocated > before.allocated
                                ? after.peak_allocated - before.allocated
                                : 0;
    {
        uint64_t *t = p->value_bytes;
        p->value_bytes = p->run_bytes;
        p->run_bytes = t;
    }
    p->ran = true;
    return KEEL_STATUS_OK;
}

/* The last run's figures; the plan is worked out from its value sizes
 * when asked for, not on every run. All zero before a run. */
static keel_predictor_memory_info memory_info(const keel_predictor *p)
{
    const keel_graph *g = p->sh->g;
    keel_predictor_memory_info m = {0};

    if (!p->ran)
        return m;
    m.run_peak_bytes = p->run_peak_bytes;
    m.planned_peak_bytes = plan_peak(g, p->value_bytes);
    for (int v = 0; v < g->nval; v++)
        if (p->value_bytes[v] != UINT64_MAX)
            m.unplanned_bytes += (p->value_bytes[v] + 63) & ~(uint64_t)63;
    return m;
}

keel_status keel_predictor_memory(const keel_predictor *p,
                                  keel_predictor_memory_info *out)
{
    NEED(p && out, "keel_predictor_memory: NULL argument");
    NEED(p->ran, "keel_predictor_memory: the predictor has not run yet");
    *out = memory_info(p);
    return KEEL_STATUS_OK;
}

int keel_predictor_summary(const keel_predictor *p, char *buf, size_t size)
{
    const struct shared *s;
    keel_predictor_memory_info m;

    if (!p)
        return snprintf(buf, size, "(no predictor)");
    s = p->sh;
    m = memory_info(p);
    return snprintf(
        buf, size,
        "device %s, precision %s, %d nodes -> %d after passes (%s), memory "
        "optimisation %s, threads %s%s; last run: peak %" PRIu64
        " bytes, plan %" PRIu64 " bytes, unplanned %" PRIu64 " bytes",
        s->device, keel_dtype_name(s->precision), s->nodes_before,
        s->g->nnode, s->passes, s->memory_optim ? "on" : "off",
        s->threads ? (s->threads_applied ? "set" : "not applied")
                   : "default",
        s->threads && !s->threads_applied
            ? " (KEEL_CPU_THREADS was set by the user)"
            : "",
        m.run_peak_bytes, m.planned_peak_bytes, m.unplanned_bytes);
}

/* ---- handles ------------------------------------------------------------------- */

const char *keel_io_handle_name(const keel_io_handle *h)
{
    return h ? h->name : NULL;
}

keel_tensor *keel_io_handle_tensor(const keel_io_handle *h)
{
    return h ? h->t : NULL;
}

static keel_status check_input(const keel_io_handle *h, keel_dtype dtype,
                               int ndim)
{
    const keel_graph *g = h->p->sh->g;
    const struct jit_value *v = &g->val[g->in[h->index]];

    NEED(!h->output, "predictor: '%s' is an output; it cannot be set",
         h->name);
    NEED(dtype == v->dtype && ndim == v->ndim,
         "predictor: input '%s' takes %s with %d dimensions, got %s with %d",
         h->name, keel_dtype_name(v->dtype), v->ndim, keel_dtype_name(dtype),
         ndim);
    return KEEL_STATUS_OK;
}

keel_status keel_io_handle_copy_from_host(keel_io_handle *h, const void *data,
                                          keel_dtype dtype, int ndim,
                                          const int64_t *shape)
{
    keel_tensor *t;
    keel_status st;

    NEED(h, "keel_io_handle_copy_from_host: handle is NULL");
    if ((st = check_input(h, dtype, ndim)) != KEEL_STATUS_OK)
        return st;
    st = keel_tensor_from_host(data, dtype, ndim, shape, h->p->sh->device,
                               &t);
    if (st != KEEL_STATUS_OK)
        return st;
    keel_tensor_free(h->t);
    h->t = t;
    return KEEL_STATUS_OK;
}

keel_status keel_io_handle_share(keel_io_handle *h, keel_tensor *t)
{
    keel_status st;

    NEED(h && t, "keel_io_handle_share: NULL argument");
    if ((st = check_input(h, t->dtype, t->ndim)) != KEEL_STATUS_OK)
        return st;
    keel_tensor_ref(t);
    keel_tensor_free(h->t);
    h->t = t;
    return KEEL_STATUS_OK;
}

keel_status keel_io_handle_shape(const keel_io_handle *h, keel_dtype *dtype,
                                 int *ndim, int64_t *shape)
{
    NEED(h && dtype && ndim && shape, "keel_io_handle_shape: NULL argument");
    if (h->t) {
        *dtype = h->t->dtype;
        *ndim = h->t->ndim;
        memcpy(shape, h->t->shape, sizeof(int64_t) * (size_t)h->t->ndim);
        return KEEL_STATUS_OK;
    }
    return keel_graph_value_info(h->p->sh->g, h->output, h->index, dtype,
                                 ndim, shape);
}

keel_status keel_io_handle_copy_to_host(const keel_io_handle *h, void *dst,
                                        size_t size)
{
    NEED(h, "keel_io_handle_copy_to_host: handle is NULL");
    NEED(h->t, "keel_io_handle_copy_to_host: '%s' holds no tensor yet%s",
         h->name, h->output ? " (run the predictor first)" : "");
    return keel_tensor_to_host(h->t, dst, size);
}
