/*
 * Op dispatch: one path for every op.
 *
 *   keel_op_run
 *     -> validate inputs (count, devices) and resolve attributes against
 *        the catalog spec (defaults filled in, types checked)
 *     -> AMP cast step, inside an enabled auto_cast scope (amp/amp.c)
 *     -> shape rule: output shapes/dtypes, promotion, broadcast descriptors
 *     -> allocate outputs (caching allocator)
 *     -> kernel for (op, plugin, dtype): looked up once, then cached
 *     -> call it on the device's default stream
 *     -> no kernel: visible CPU fallback (counted), or an error when strict
 *     -> bump the version of inputs written in place
 *     -> autograd: when grad mode is on, the op has a backward rule and an
 *        input requires a gradient, record a graph node (autograd.c). With
 *        no input requiring a gradient this costs one flag test per input.
 */
#define KEEL_OP_CATALOG_DEFINE_TABLE
#include <keel/op_catalog.h>
#undef KEEL_OP_CATALOG_DEFINE_TABLE

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/dispatch_internal.h"

static struct keel_op_def op_defs[KEEL_OP_COUNT];
static pthread_once_t defs_once = PTHREAD_ONCE_INIT;
static keel_status defs_status;
static char defs_error[256];

static const keel_kernel *find_kernel(keel_place place, keel_op_id op,
                                      keel_dtype dt);

static atomic_int strict_mode; /* a keel_strict_mode */

/* The autograd layer's recorder (NULL until a tensor first requires a
 * gradient), and this thread's depth of calls made for dispatch's own
 * purposes, which record nothing. */
static _Atomic(const struct keel_recorder *) recorder;
static _Thread_local int no_record_depth;

_Thread_local const struct keel_capture *keel__capture;

keel_status keel__capture_view(const char *kind, const keel_tensor *x,
                               const keel_tensor *out, const int64_t *params,
                               int nparams)
{
    const struct keel_capture *cap = keel__capture;

    if (!cap || no_record_depth)
        return KEEL_STATUS_OK;
    return cap->view(cap->ctx, kind, x, out, params, nparams);
}

void keel__dispatch_set_recorder(const struct keel_recorder *r)
{
    atomic_store_explicit(&recorder, r, memory_order_release);
}

void keel__no_record_begin(void)
{
    no_record_depth++;
}

void keel__no_record_end(void)
{
    no_record_depth--;
}

bool keel__view_wants_record(const keel_tensor *x)
{
    const struct keel_recorder *r;

    if (!x->requires_grad || no_record_depth)
        return false;
    r = atomic_load_explicit(&recorder, memory_order_acquire);
    return r && r->enabled();
}

keel_status keel__view_record(enum keel_ag_view kind, const keel_tensor *x,
                              keel_tensor *out, const int64_t *params,
                              int nparams)
{
    return atomic_load_explicit(&recorder, memory_order_acquire)
        ->record_view(kind, x, out, params, nparams);
}
static atomic_bool strict_env_read;

/* ---- the AMP hooks (amp/ installs them) ------------------------------------ */

static _Atomic(keel_amp_replace_fn) amp_replace;
static _Atomic(keel_amp_cast_fn) amp_cast;
_Thread_local int keel__amp_on;
static _Thread_local int amp_pause;
static atomic_uint amp_epoch;

void keel__dispatch_set_amp(keel_amp_replace_fn replace, keel_amp_cast_fn cast)
{
    atomic_store_explicit(&amp_replace, replace, memory_order_release);
    atomic_store_explicit(&amp_cast, cast, memory_order_release);
}

void keel__amp_pause_begin(void)
{
    if (amp_pause++ == 0)
        atomic_fetch_add_explicit(&amp_epoch, 1, memory_order_relaxed);
}

void keel__amp_pause_end(void)
{
    amp_pause--;
}

int keel__amp_pause_lift(void)
{
    int n = amp_pause;

    amp_pause = 0;
    return n;
}

void keel__amp_pause_restore(int pauses)
{
    amp_pause = pauses;
}

unsigned keel__amp_epoch(void)
{
    return atomic_load_explicit(&amp_epoch, memory_order_relaxed);
}

/* Whether this call takes the AMP step: inside an enabled scope, outside
 * backward passes and the core's own calls. */
static inline bool amp_wanted(void)
{
    return keel__amp_on && !amp_pause && !no_record_depth;
}

/* ---- operator statistics ------------------------------------------------------ */

static atomic_bool op_stats_on;
static atomic_uint_fast64_t op_stats[KEEL_OP_COUNT][KEEL_DTYPE_COUNT_];

void keel__op_stats_enable(bool on)
{
    atomic_store(&op_stats_on, on);
}

void keel__op_stats_reset(void)
{
    for (int o = 0; o < KEEL_OP_COUNT; o++)
        for (int d = 0; d < KEEL_DTYPE_COUNT_; d++)
            atomic_store_explicit(&op_stats[o][d], 0, memory_order_relaxed);
}

uint64_t keel__op_stats_get(keel_op_id op, keel_dtype dtype)
{
    if ((unsigned)op >= KEEL_OP_COUNT || (unsigned)dtype >= KEEL_DTYPE_COUNT_)
        return 0;
    return atomic_load_explicit(&op_stats[op][dtype], memory_order_relaxed);
}

/* ---- catalog attribute specs ----------------------------------------------- */

static const struct {
    const char *name;
    keel_attr_type type;
} attr_types[] = {
    {"int", KEEL_ATTR_INT},       {"float", KEEL_ATTR_FLOAT},
    {"bool", KEEL_ATTR_BOOL},     {"str", KEEL_ATTR_STRING},
    {"ints", KEEL_ATTR_INTS},     {"floats", KEEL_ATTR_FLOATS},
    {"dtype", KEEL_ATTR_DTYPE},
};

static int parse_default(struct keel_attr_spec *a, const char *v)
{
    char *end;

    switch (a->type) {
    case KEEL_ATTR_INT:
    case KEEL_ATTR_BOOL:
        a->def.v.i = strtoll(v, &end, 10);
        return *end ? -1 : 0;
    case KEEL_ATTR_FLOAT:
        if (!strcmp(v, "inf"))
            a->def_float = INFINITY;
        else if (!strcmp(v, "-inf"))
            a->def_float = -INFINITY;
        else {
            a->def_float = strtod(v, &end);
            if (*end)
                return -1;
        }
        a->def.v.f = a->def_float;
        return 0;
    case KEEL_ATTR_STRING:
        /* Points into the catalog string's copy held by the spec. */
        return 0;
    case KEEL_ATTR_INTS: {
        int n = 0;
        while (*v) {
            if (n >= 8)
                return -1;
            a->def_ints[n++] = strtoll(v, &end, 10);
            if (end == v)
                return -1;
            v = *end == ',' ? end + 1 : end;
        }
        a->def.v.ints.data = a->def_ints;
        a->def.v.ints.count = n;
        return 0;
    }
    default:
        return *v ? -1 : 0;
    }
}

/* "name:type=default;..." -> specs. String defaults are stored in a
 * static arena so that they outlive the parse. */
static char str_arena[4096];
static size_t str_used;

static int parse_spec(struct keel_op_def *d)
{
    const char *s = d->info->attrs;

    while (*s) {
        struct keel_attr_spec *a;
        const char *colon = strchr(s, ':');
        const char *semi = strchr(s, ';');
        const char *eq;
        char type[16], val[128];
        size_t tl, vl;

        if (!semi)
            semi = s + strlen(s);
        if (!colon || colon > semi || d->nattrs >= KEEL_MAX_OP_ATTRS ||
            (size_t)(colon - s) >= sizeof(a->name))
            return -1;
        a = &d->attrs[d->nattrs++];
        memcpy(a->name, s, (size_t)(colon - s));
        a->name[colon - s] = '\0';
        eq = memchr(colon, '=', (size_t)(semi - colon));
        tl = (size_t)((eq ? eq : semi) - colon - 1);
        if (tl >= sizeof(type))
            return -1;
        memcpy(type, colon + 1, tl);
        type[tl] = '\0';
        a->type = (keel_attr_type)-1;
        for (size_t i = 0; i < sizeof(attr_types) / sizeof(attr_types[0]);
             i++)
            if (!strcmp(type, attr_types[i].name))
                a->type = attr_types[i].type;
        if ((int)a->type < 0)
            return -1;
        a->def.name = a->name;
        a->def.type = a->type;
        a->required = !eq;
        if (eq) {
            vl = (size_t)(semi - eq - 1);
            if (vl >= sizeof(val))
                return -1;
            memcpy(val, eq + 1, vl);
            val[vl] = '\0';
            if (a->type == KEEL_ATTR_STRING) {
                if (str_used + vl + 1 > sizeof(str_arena))
                    return -1;
                memcpy(str_arena + str_used, val, vl + 1);
                a->def.v.s = str_arena + str_used;
                str_used += vl + 1;
            } else if (parse_default(a, val)) {
                return -1;
            }
        }
        s = *semi ? semi + 1 : semi;
    }
    return 0;
}

static void init_defs(void)
{
    keel__at_shutdown(keel__dispatch_shutdown);
    static const keel_shape_fn shapes[KEEL_OP_COUNT] = {
#define KEEL_OP(ID, NAME, NIN, NOUT, DTYPES, SHAPE, GRAD, AMP, ATTRS, SEM)  \
    [KEEL_OP_##ID] = keel__shape_##SHAPE,
#include <keel/ops.def>
#undef KEEL_OP
    };

    for (int i = 0; i < KEEL_OP_COUNT; i++) {
        op_defs[i].info = &keel_op_table[i];
        op_defs[i].shape = shapes[i];
        if (parse_spec(&op_defs[i])) {
            defs_status = KEEL_STATUS_INTERNAL;
            snprintf(defs_error, sizeof(defs_error),
                     "op catalog: cannot parse the attributes of '%s': "
                     "\"%s\"",
                     keel_op_table[i].name, keel_op_table[i].attrs);
            return;
        }
    }
}

const struct keel_op_def *keel__op_def(keel_op_id op)
{
    pthread_once(&defs_once, init_defs);
    if ((unsigned)op >= KEEL_OP_COUNT || defs_status != KEEL_STATUS_OK)
        return NULL;
    return &op_defs[op];
}

const keel_op_info *keel_op_get_info(keel_op_id op)
{
    return (unsigned)op < KEEL_OP_COUNT ? &keel_op_table[op] : NULL;
}

keel_status keel_kernel_coverage(int plugin,
                                 void (*visit)(keel_op_id, keel_dtype, bool,
                                               void *),
                                 void *ctx)
{
    keel_device_props props;
    keel_place place = {plugin, 0};
    keel_status st;

    if (!visit)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_kernel_coverage: visit is NULL");
    st = keel_device_get_props(place, &props);
    if (st != KEEL_STATUS_OK)
        return st;
    for (int op = 0; op < KEEL_OP_COUNT; op++)
        for (int dt = 0; dt < KEEL_DTYPE_COUNT_; dt++) {
            uint32_t bit = KEEL_DTYPE_BIT(dt);
            if (!(keel_op_table[op].dtype_mask & bit) ||
                !(props.dtype_mask & bit))
                continue;
            visit((keel_op_id)op, (keel_dtype)dt,
                  find_kernel(place, (keel_op_id)op, (keel_dtype)dt) != NULL,
                  ctx);
        }
    return KEEL_STATUS_OK;
}

keel_status keel_op_find(const char *name, keel_op_id *op)
{
    if (!name || !op)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_op_find: %s is NULL", name ? "op" : "name");
    for (int i = 0; i < KEEL_OP_COUNT; i++)
        if (!strcmp(keel_op_table[i].name, name)) {
            *op = (keel_op_id)i;
            return KEEL_STATUS_OK;
        }
    return keel__error(KEEL_STATUS_NOT_FOUND,
                       "no op named '%s' in the catalog", name);
}

/* ---- attributes of a call ---------------------------------------------------- */

const keel_attr *keel__attr(const struct keel_op_call *c, const char *name)
{
    for (int i = 0; i < c->def->nattrs; i++)
        if (!strcmp(c->def->attrs[i].name, name))
            return &c->attrs[i];
    return NULL;
}

int64_t keel__attr_i(const struct keel_op_call *c, const char *name)
{
    const keel_attr *a = keel__attr(c, name);
    return a ? a->v.i : 0;
}

double keel__attr_f(const struct keel_op_call *c, const char *name)
{
    const keel_attr *a = keel__attr(c, name);
    return a ? a->v.f : 0.0;
}

const char *keel__attr_s(const struct keel_op_call *c, const char *name)
{
    const keel_attr *a = keel__attr(c, name);
    return a && a->type == KEEL_ATTR_STRING && a->v.s ? a->v.s : "";
}

static const char *type_name(keel_attr_type t)
{
    for (size_t i = 0; i < sizeof(attr_types) / sizeof(attr_types[0]); i++)
        if (attr_types[i].type == t)
            return attr_types[i].name;
    return "?";
}

static keel_status resolve_attrs(struct keel_op_call *c, const keel_attr *given,
                                 int ngiven)
{
    const struct keel_op_def *d = c->def;
    bool set[KEEL_MAX_OP_ATTRS] = {false};

    if (ngiven > 0 && !given)
        return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                              "attrs is NULL with %d attributes", ngiven);
    for (int i = 0; i < ngiven; i++) {
        const keel_attr *g = &given[i];
        int k = -1;
        if (!g->name)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "attribute %d has no name", i);
        for (int j = 0; j < d->nattrs; j++)
            if (!strcmp(d->attrs[j].name, g->name))
                k = j;
        if (k < 0)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "unknown attribute '%s' (the op takes: "
                                  "%s)",
                                  g->name,
                                  *d->info->attrs ? d->info->attrs : "none");
        c->attrs[k] = *g;
        c->attrs[k].name = d->attrs[k].name;
        if (g->type != d->attrs[k].type) {
            /* Lossless conveniences: int for float, int for bool. */
            if (d->attrs[k].type == KEEL_ATTR_FLOAT &&
                g->type == KEEL_ATTR_INT) {
                c->attrs[k].type = KEEL_ATTR_FLOAT;
                c->attrs[k].v.f = (double)g->v.i;
            } else if (d->attrs[k].type == KEEL_ATTR_BOOL &&
                       g->type == KEEL_ATTR_INT) {
                c->attrs[k].type = KEEL_ATTR_BOOL;
                c->attrs[k].v.i = g->v.i != 0;
            } else {
                return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                      "attribute '%s' must be %s, got %s",
                                      g->name, type_name(d->attrs[k].type),
                                      type_name(g->type));
            }
        }
        if ((g->type == KEEL_ATTR_INTS && g->v.ints.count < 0) ||
            (g->type == KEEL_ATTR_FLOATS && g->v.floats.count < 0))
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "attribute '%s' has a negative length",
                                  g->name);
        if ((g->type == KEEL_ATTR_INTS && g->v.ints.count > 0 &&
             !g->v.ints.data) ||
            (g->type == KEEL_ATTR_FLOATS && g->v.floats.count > 0 &&
             !g->v.floats.data) ||
            (g->type == KEEL_ATTR_STRING && !g->v.s))
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "attribute '%s' has a NULL payload",
                                  g->name);
        if (g->type == KEEL_ATTR_DTYPE &&
            (uint64_t)g->v.i >= KEEL_DTYPE_COUNT_)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "attribute '%s' = %lld is not a dtype",
                                  g->name, (long long)g->v.i);
        set[k] = true;
    }
    for (int j = 0; j < d->nattrs; j++) {
        if (set[j])
            continue;
        if (d->attrs[j].required)
            return keel__op_error(c, KEEL_STATUS_INVALID_ARGUMENT,
                                  "required attribute '%s' (%s) is missing",
                                  d->attrs[j].name,
                                  type_name(d->attrs[j].type));
        c->attrs[j] = d->attrs[j].def;
    }
    return KEEL_STATUS_OK;
}

/* ---- errors ------------------------------------------------------------------- */

keel_status keel__op_error(const struct keel_op_call *c, keel_status st,
                           const char *fmt, ...)
{
    char msg[768], where[96], t[128];
    size_t n = 0;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    char full[1600];
    n = (size_t)snprintf(full, sizeof(full), "%s(", c->def->info->name);
    for (int i = 0; i < c->nin && n < sizeof(full); i++)
        n += (size_t)snprintf(full + n, sizeof(full) - n, "%s%s",
                              i ? ", " : "",
                              c->in[i] ? keel__tensor_str(c->in[i], t,
                                                          sizeof(t))
                                       : "NULL");
    keel__lock();
    keel__place_str(c->place, where, sizeof(where));
    keel__unlock();
    if (n < sizeof(full))
        snprintf(full + n, sizeof(full) - n, ") on %s: %s", where, msg);
    return keel__error(st, "%s", full);
}

/* ---- kernel cache -------------------------------------------------------------- */

enum { K_UNKNOWN = 0, K_FOUND = 1, K_MISSING = 2 };

struct kslot {
    _Atomic int state;
    keel_kernel kernel;
};

#define MAX_PLUGINS 64
static struct kslot *_Atomic kcache[MAX_PLUGINS];
static pthread_mutex_t kcache_lock = PTHREAD_MUTEX_INITIALIZER;

static struct kslot *slot_for(int plugin, keel_op_id op, keel_dtype dt)
{
    struct kslot *arr;

    if (plugin < 0 || plugin >= MAX_PLUGINS)
        return NULL;
    arr = atomic_load_explicit(&kcache[plugin], memory_order_acquire);
    if (!arr) {
        pthread_mutex_lock(&kcache_lock);
        arr = atomic_load(&kcache[plugin]);
        if (!arr) {
            arr = calloc((size_t)KEEL_OP_COUNT * KEEL_DTYPE_COUNT_,
                         sizeof(*arr));
            atomic_store_explicit(&kcache[plugin], arr,
                                  memory_order_release);
        }
        pthread_mutex_unlock(&kcache_lock);
        if (!arr)
            return NULL;
    }
    return &arr[(size_t)op * KEEL_DTYPE_COUNT_ + (size_t)dt];
}

/* The kernel for (op, dtype) on the plugin of `place`, or NULL. */
static const keel_kernel *find_kernel(keel_place place, keel_op_id op,
                                      keel_dtype dt)
{
    struct kslot *s = slot_for(place.plugin, op, dt);
    const keel_plugin_api *api;
    keel_kernel k;
    int state;

    if (!s)
        return NULL;
    state = atomic_load_explicit(&s->state, memory_order_acquire);
    if (state == K_FOUND)
        return &s->kernel;
    if (state == K_MISSING)
        return NULL;
    api = keel_plugin_table(place.plugin);
    memset(&k, 0, sizeof(k));
    if (api && api->kernel && api->kernel->lookup) {
        keel__plugin_msg_clear();
        if (api->kernel->lookup(place.device, keel_op_table[op].name, dt,
                                &k) != KEEL_STATUS_OK ||
            !k.fn)
            k.fn = NULL;
    }
    pthread_mutex_lock(&kcache_lock);
    if (atomic_load(&s->state) == K_UNKNOWN) {
        s->kernel = k;
        atomic_store_explicit(&s->state, k.fn ? K_FOUND : K_MISSING,
                              memory_order_release);
    }
    pthread_mutex_unlock(&kcache_lock);
    return atomic_load(&s->state) == K_FOUND ? &s->kernel : NULL;
}

void keel__dispatch_shutdown(void)
{
    pthread_mutex_lock(&kcache_lock);
    for (int i = 0; i < MAX_PLUGINS; i++) {
        free(atomic_load(&kcache[i]));
        atomic_store(&kcache[i], NULL);
    }
    pthread_mutex_unlock(&kcache_lock);
}

/* ---- strict mode and fallback counts -------------------------------------------- */

void keel_set_strict_mode(keel_strict_mode mode)
{
    if (mode != KEEL_STRICT_OFF && mode != KEEL_STRICT_ON &&
        mode != KEEL_STRICT_REPORT)
        mode = KEEL_STRICT_ON;
    atomic_store(&strict_env_read, true);
    atomic_store(&strict_mode, (int)mode);
}

void keel_set_strict(bool strict)
{
    keel_set_strict_mode(strict ? KEEL_STRICT_ON : KEEL_STRICT_OFF);
}

/* KEEL_STRICT: unset, empty or "0" off; "report" report; anything else on. */
keel_strict_mode keel_get_strict_mode(void)
{
    if (!atomic_load(&strict_env_read)) {
        const char *e = getenv("KEEL_STRICT");
        keel_strict_mode m = KEEL_STRICT_OFF;
        if (e && !strcmp(e, "report"))
            m = KEEL_STRICT_REPORT;
        else if (e && *e && strcmp(e, "0") != 0)
            m = KEEL_STRICT_ON;
        atomic_store(&strict_mode, (int)m);
        atomic_store(&strict_env_read, true);
    }
    return (keel_strict_mode)atomic_load(&strict_mode);
}

bool keel_get_strict(void)
{
    return keel_get_strict_mode() == KEEL_STRICT_ON;
}

/* Inputs that ops update in place (their semantics in ops.def say so); a
 * CPU fallback copies them back. */
static uint32_t mutated_inputs(keel_op_id op)
{
    switch (op) {
    case KEEL_OP_SGD_UPDATE:
        return 1u << 0;
    case KEEL_OP_MOMENTUM_UPDATE:
        return (1u << 0) | (1u << 2);
    case KEEL_OP_ADAM_UPDATE:
    case KEEL_OP_ADAMW_UPDATE:
        return (1u << 0) | (1u << 2) | (1u << 3);
    case KEEL_OP_BATCH_NORM:
        return (1u << 3) | (1u << 4);
    case KEEL_OP_CHECK_FINITE_AND_UNSCALE:
        return (1u << 0) | (1u << 2);
    default:
        return 0;
    }
}

bool keel__input_written(keel_op_id op, int i)
{
    return i >= 0 && i < 32 && (mutated_inputs(op) >> i) & 1u;
}

/* ---- the call ---------------------------------------------------------------------- */

static void call_release(struct keel_op_call *c)
{
    for (int i = 0; i < c->nin; i++)
        keel_tensor_free(c->in[i]);
    c->nin = 0;
}

void keel__call_set_input(struct keel_op_call *c, int i, keel_tensor *t)
{
    keel_tensor *old = c->in[i];

    c->in[i] = keel_tensor_ref(t);
    keel_tensor_free(old);
    keel__desc(c->in[i], &c->in_desc[i]);
}

keel_status keel__cast_input(struct keel_op_call *c, int i, keel_dtype dtype)
{
    keel_tensor *t;
    keel_status st;

    keel_attr a = keel_attr_dtype("dtype", dtype);

    if (c->in[i]->dtype == dtype)
        return KEEL_STATUS_OK;
    /* Through dispatch again, so that autograd sees the cast. */
    st = keel__run1(KEEL_OP_CAST, (const keel_tensor *const *)&c->in[i], 1,
                    &a, 1, &t);
    if (st != KEEL_STATUS_OK)
        return st;
    keel__call_set_input(c, i, t);
    keel_tensor_free(t);
    return KEEL_STATUS_OK;
}

static keel_status run_on_cpu(struct keel_op_call *c, keel_tensor **outs);
static keel_status run(keel_op_id op, const keel_place *place_hint,
                       keel_tensor *const *inputs, int num_inputs,
                       const keel_attr *attrs, int num_attrs,
                       keel_tensor **outputs, int max_outputs,
                       int *num_outputs);

/* ---- kernel workspaces (ABI 1.3) ------------------------------------------ */

/*
 * The blocks a kernel asked for during one launch. They come from the
 * caching allocator and go back to it when the kernel returns: the core
 * launches every kernel on the device's default stream, and the allocator
 * hands a block out again only to work enqueued later on that stream, so
 * the launch's own work may still be using it (stream order).
 */
#define WS_MAX 16
struct launch_ws {
    const keel_kernel_args *args;
    keel_place place;
    int n;
    struct keel_block *blocks[WS_MAX];
};

static keel_status core_workspace(const keel_kernel_args *a, uint64_t bytes,
                                  keel_dptr *ptr)
{
    struct launch_ws *w = a ? a->core_data : NULL;
    struct keel_block *b;
    keel_status st;

    if (!ptr || !w || w->args != a)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "workspace: %s", !ptr ? "ptr is NULL"
                           : "the args are not those of the running launch");
    *ptr = 0;
    if (bytes == 0)
        return KEEL_STATUS_OK;
    if (w->n == WS_MAX)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "workspace: a launch may hold at most %d "
                           "workspaces", WS_MAX);
    st = keel__alloc(w->place, bytes, &b, ptr);
    if (st != KEEL_STATUS_OK)
        return st;
    w->blocks[w->n++] = b;
    return KEEL_STATUS_OK;
}

static void workspace_release(struct launch_ws *w)
{
    for (int i = 0; i < w->n; i++)
        keel__alloc_release(w->blocks[i]);
    w->n = 0;
}

bool keel__has_kernel(keel_place place, keel_op_id op, keel_dtype dtype)
{
    return find_kernel(place, op, dtype) != NULL;
}

static keel_status launch(struct keel_op_call *c, keel_tensor **outs)
{
    struct launch_ws ws = {.n = 0};
    keel_tensor_desc od[KEEL_MAX_OP_OUTPUTS];
    const keel_kernel *k;
    keel_kernel_args args;
    keel_status st;
    struct keel_plugin *p;

    if (atomic_load_explicit(&op_stats_on, memory_order_relaxed) &&
        !no_record_depth)
        atomic_fetch_add_explicit(&op_stats[c->op][c->key_dtype], 1,
                                  memory_order_relaxed);
    k = find_kernel(c->place, c->op, c->key_dtype);
    if (!k) {
        if (keel_get_strict())
            return keel__op_error(c, KEEL_STATUS_NOT_SUPPORTED,
                                  "the plugin has no %s kernel for %s, and "
                                  "strict mode forbids the CPU fallback",
                                  c->def->info->name,
                                  keel_dtype_name(c->key_dtype));
        return run_on_cpu(c, outs);
    }
    for (int i = 0; i < c->nout; i++)
        keel__desc(outs[i], &od[i]);
    args = (keel_kernel_args){
        .struct_size = sizeof(args),
        .device = c->place.device,
        .stream = NULL,
        .inputs = c->in_desc,
        .num_inputs = c->nin,
        .outputs = od,
        .num_outputs = c->nout,
        .attrs = c->attrs,
        .num_attrs = c->def->nattrs,
        .workspace = core_workspace,
        .core_data = &ws,
    };
    ws.args = &args;
    ws.place = c->place;
    keel__plugin_msg_clear();
    st = k->fn(k->kernel_data, &args);
    workspace_release(&ws);
    if (st == KEEL_STATUS_NOT_SUPPORTED && !keel_get_strict())
        return run_on_cpu(c, outs);
    if (st != KEEL_STATUS_OK) {
        const char *m = keel__plugin_msg();
        return keel__op_error(c, st, "kernel failed: %s",
                              m ? m : keel_status_name(st));
    }
    (void)p;
    return KEEL_STATUS_OK;
}

/* The place the fallback runs on: cpu:0, resolved without touching the
 * caller's error state. */
static keel_status cpu_place(keel_place *pl)
{
    keel_status saved = keel_last_status();
    keel_status st;
    char msg[2048];

    snprintf(msg, sizeof(msg), "%s", keel_last_error());
    st = keel_place_parse("cpu:0", pl);
    keel__error(saved, "%s", msg);
    return st;
}

/* The element range a view reaches: [lo, lo + span) relative to its
 * offset, span 0 for an empty view. Strides may be negative (a slice with
 * a negative step) or 0 (broadcast). */
static int64_t view_span(const keel_tensor *t, int64_t *lo)
{
    int64_t hi = 0;

    *lo = 0;
    for (int i = 0; i < t->ndim; i++) {
        int64_t reach;
        if (t->shape[i] == 0)
            return 0;
        reach = (t->shape[i] - 1) * t->strides[i];
        if (reach < 0)
            *lo += reach;
        else
            hi += reach;
    }
    return hi - *lo + 1;
}

/* The bytes of x's view, copied to `cpu` as a view of the same geometry:
 * no op runs, so a plugin without a copy kernel cannot send the fallback
 * back into dispatch. */
static keel_status to_cpu_raw(const keel_tensor *x, keel_place cpu,
                              keel_tensor **out)
{
    int64_t lo, span = view_span(x, &lo);
    size_t es = keel_dtype_size(x->dtype);
    keel_tensor *buf = NULL;
    keel_tensor_desc d;
    keel_status st;

    st = keel__tensor_new(cpu, x->dtype, 1, (int64_t[]){span}, &buf);
    if (st == KEEL_STATUS_OK && span > 0) {
        keel__desc(x, &d);
        st = keel_mem_copy_peer(cpu, buf->storage->data, x->storage->place,
                                d.data + (keel_dptr)(lo * (int64_t)es),
                                (uint64_t)span * es);
    }
    if (st == KEEL_STATUS_OK)
        st = keel__tensor_view(buf, x->ndim, x->shape, x->strides, -lo, out);
    keel_tensor_free(buf);
    return st;
}

/*
 * Run the op on cpu:0 and copy outputs (and inputs updated in place) back.
 * Nothing here may re-enter dispatch on the plugin's device: inputs travel
 * as raw bytes (to_cpu_raw), the op runs with the CPU place named (ops
 * without tensor inputs would otherwise land on the current device again),
 * and results come back by memory copies.
 */
static keel_status run_on_cpu(struct keel_op_call *c, keel_tensor **outs)
{
    keel_tensor *cin[KEEL_MAX_OP_INPUTS] = {0};
    keel_tensor *cout[KEEL_MAX_OP_OUTPUTS] = {0};
    uint32_t mutated = mutated_inputs(c->op);
    keel_place cpu;
    int nout = 0;
    keel_status st;

    if (cpu_place(&cpu) != KEEL_STATUS_OK || cpu.plugin == c->place.plugin)
        return keel__op_error(c, KEEL_STATUS_NOT_SUPPORTED,
                              "no %s kernel for %s on this device, and no "
                              "CPU plugin to fall back to",
                              c->def->info->name,
                              keel_dtype_name(c->key_dtype));
    keel__fallback_note(c->op, c->key_dtype, c->place.plugin);
    /* The copies are part of this op: the caller records one node. */
    no_record_depth++;
    keel__log(KEEL_LOG_DEBUG, "op %s (%s): CPU fallback", c->def->info->name,
              keel_dtype_name(c->key_dtype));
    st = KEEL_STATUS_OK;
    for (int i = 0; i < c->nin && st == KEEL_STATUS_OK; i++)
        st = to_cpu_raw(c->in[i], cpu, &cin[i]);
    if (st == KEEL_STATUS_OK)
        st = run(c->op, &cpu, cin, c->nin, c->attrs, c->def->nattrs, cout,
                 KEEL_MAX_OP_OUTPUTS, &nout);
    if (st == KEEL_STATUS_OK && nout != c->nout)
        st = keel__op_error(c, KEEL_STATUS_INTERNAL,
                            "the CPU fallback produced %d outputs, expected %d",
                            nout, c->nout);
    for (int i = 0; i < nout && st == KEEL_STATUS_OK; i++) {
        keel_tensor_desc od, cd;
        keel__desc(outs[i], &od);
        keel__desc(cout[i], &cd);
        st = keel_mem_copy_peer(c->place, od.data, cpu, cd.data,
                                (uint64_t)keel__numel(outs[i]->ndim,
                                                      outs[i]->shape) *
                                    keel_dtype_size(outs[i]->dtype));
    }
    /* An input updated in place: its whole span goes back, which is exact
     * for any strides since the span came from the device unchanged. */
    for (int i = 0; i < c->nin && st == KEEL_STATUS_OK; i++) {
        int64_t lo, span = view_span(c->in[i], &lo);
        keel_tensor_desc d;
        if (!(mutated & (1u << i)) || span == 0)
            continue;
        keel__desc(c->in[i], &d);
        d.data += (keel_dptr)(lo * (int64_t)keel_dtype_size(c->in[i]->dtype));
        st = keel_mem_copy_peer(c->place, d.data, cpu,
                                cin[i]->storage->data,
                                (uint64_t)span *
                                    keel_dtype_size(c->in[i]->dtype));
    }
    for (int i = 0; i < c->nin; i++)
        keel_tensor_free(cin[i]);
    for (int i = 0; i < nout; i++)
        keel_tensor_free(cout[i]);
    no_record_depth--;
    return st;
}

/* Whether the call must be recorded for autograd. The common case (no
 * input requires a gradient) is one load and branch per input. */
static inline bool wants_grad(const struct keel_op_call *c)
{
    for (int i = 0; i < c->nin; i++)
        if (c->in[i]->requires_grad) {
            const struct keel_recorder *r = atomic_load_explicit(
                &recorder, memory_order_acquire);
            return r && !no_record_depth && r->differentiable(c->op) &&
                   r->enabled();
        }
    return false;
}

/* Inputs written in place get a new version (autograd checks it). */
static void bump_versions(const struct keel_op_call *c, uint32_t mutated)
{
    for (int i = 0; i < c->nin; i++)
        if (mutated & (1u << i))
            atomic_fetch_add_explicit(&c->in[i]->storage->version, 1,
                                      memory_order_relaxed);
}

static keel_status run_op(keel_op_id op, const keel_place *place_hint,
                          keel_tensor *const *inputs, int num_inputs,
                          const keel_attr *attrs, int num_attrs,
                          keel_tensor **outputs, int max_outputs,
                          int *num_outputs);

/* What a trace event shows of a call: its first input's device, dtype
 * and shape, else the hinted place. */
static void trace_args(const keel_place *place_hint,
                       keel_tensor *const *inputs, int num_inputs,
                       keel__trace_args *a)
{
    a->have_place = false;
    a->dtype = NULL;
    a->ndim = -1;
    if (num_inputs > 0 && inputs && inputs[0]) {
        const keel_tensor *t = inputs[0];

        a->have_place = true;
        a->place = t->storage->place;
        a->dtype = keel_dtype_name(t->dtype);
        a->ndim = t->ndim;
        for (int i = 0; i < t->ndim && i < KEEL__TRACE_SHAPE; i++)
            a->shape[i] = t->shape[i];
    } else if (place_hint) {
        a->have_place = true;
        a->place = *place_hint;
    }
}

/* The profiler's and the trace's wrapper (profile.c, runtime/trace.c):
 * one relaxed load when both are off. */
static keel_status run(keel_op_id op, const keel_place *place_hint,
                       keel_tensor *const *inputs, int num_inputs,
                       const keel_attr *attrs, int num_attrs,
                       keel_tensor **outputs, int max_outputs,
                       int *num_outputs)
{
    static atomic_int env_once;
    int state, d;
    uint64_t t0, t1;
    keel_status st;
    keel__trace_args ta;

    if (!atomic_load_explicit(&env_once, memory_order_relaxed)) {
        atomic_store(&env_once, 1);
        keel__prof_env();
    }
    state = atomic_load_explicit(&keel__prof_state, memory_order_relaxed);
    if (!state)
        return run_op(op, place_hint, inputs, num_inputs, attrs, num_attrs,
                      outputs, max_outputs, num_outputs);
    /* Taken before the call: an in-place op may change its input. */
    if (state & KEEL__PROF_TRACE)
        trace_args(place_hint, inputs, num_inputs, &ta);
    d = keel__prof_enter();
    t0 = keel__trace_now();
    st = run_op(op, place_hint, inputs, num_inputs, attrs, num_attrs,
                outputs, max_outputs, num_outputs);
    if ((state & KEEL__PROF_SYNC) && st == KEEL_STATUS_OK && d == 0) {
        keel_place pl;

        if (num_inputs > 0 && inputs && inputs[0])
            pl = inputs[0]->storage->place;
        else if (place_hint)
            pl = *place_hint;
        else if (keel_current_place(&pl) != KEEL_STATUS_OK)
            pl.plugin = -1;
        if (pl.plugin >= 0)
            (void)keel_device_synchronize(pl);
    }
    t1 = keel__trace_now();
    keel__prof_leave(op, d, t1 - t0, (state & KEEL__PROF_COUNT) != 0);
    if ((state & KEEL__PROF_TRACE) && (unsigned)op < KEEL_OP_COUNT)
        keel__trace_op(keel_op_get_info(op)->name, &ta, t0, t1);
    return st;
}

static keel_status run_op(keel_op_id op, const keel_place *place_hint,
                          keel_tensor *const *inputs, int num_inputs,
                          const keel_attr *attrs, int num_attrs,
                          keel_tensor **outputs, int max_outputs,
                          int *num_outputs)
{
    struct keel_op_call c;
    keel_tensor *outs[KEEL_MAX_OP_OUTPUTS] = {0};
    keel_status st;
    int i;

    if (num_outputs)
        *num_outputs = 0;
    if (amp_wanted()) {
        keel_amp_replace_fn rep =
            atomic_load_explicit(&amp_replace, memory_order_acquire);

        if (rep && (unsigned)op < KEEL_OP_COUNT &&
            rep(op, inputs, num_inputs, attrs, num_attrs, outputs,
                max_outputs, num_outputs, &st))
            return st;
    }
    c.def = keel__op_def(op);
    if (!c.def) {
        if (defs_status != KEEL_STATUS_OK)
            return keel__error(defs_status, "%s", defs_error);
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_op_run: %d is not an op of the catalog",
                           (int)op);
    }
    c.op = op;
    c.nin = 0;
    c.nout = 0;
    if (num_inputs < 0 || num_inputs > KEEL_MAX_OP_INPUTS ||
        (num_inputs > 0 && !inputs))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: bad input list (%d inputs)",
                           c.def->info->name, num_inputs);
    for (i = 0; i < num_inputs; i++)
        if (!inputs[i])
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "%s: input %d is NULL", c.def->info->name, i);
    if (num_inputs > 0) {
        c.place = inputs[0]->storage->place;
    } else if (place_hint) {
        c.place = *place_hint;
    } else {
        st = keel_current_place(&c.place);
        if (st != KEEL_STATUS_OK)
            return st;
    }
    for (i = 0; i < num_inputs; i++) {
        c.in[i] = keel_tensor_ref(inputs[i]);
        keel__desc(c.in[i], &c.in_desc[i]);
        c.nin++;
    }
    for (i = 1; i < num_inputs; i++) {
        keel_place p = inputs[i]->storage->place;
        if (p.plugin != c.place.plugin || p.device != c.place.device) {
            char a[96], b[96];
            keel__lock();
            keel__place_str(c.place, a, sizeof(a));
            keel__place_str(p, b, sizeof(b));
            keel__unlock();
            st = keel__op_error(&c, KEEL_STATUS_INVALID_ARGUMENT,
                                "mismatched devices: input 0 is on %s, "
                                "input %d on %s",
                                a, i, b);
            goto out;
        }
    }
    if (c.def->info->num_inputs >= 0 && num_inputs > c.def->info->num_inputs) {
        st = keel__op_error(&c, KEEL_STATUS_INVALID_ARGUMENT,
                            "takes at most %d inputs, got %d",
                            c.def->info->num_inputs, num_inputs);
        goto out;
    }
    st = resolve_attrs(&c, attrs, num_attrs);
    if (st != KEEL_STATUS_OK)
        goto out;
    if (num_inputs && amp_wanted() &&
        c.def->info->amp != KEEL_AMP_NONE) {
        keel_amp_cast_fn cast =
            atomic_load_explicit(&amp_cast, memory_order_acquire);

        if (cast && (st = cast(&c)) != KEEL_STATUS_OK)
            goto out;
    }
    c.key_dtype = num_inputs ? c.in[0]->dtype : KEEL_F32;
    st = c.def->shape(&c);
    if (st != KEEL_STATUS_OK)
        goto out;
    if (!(c.def->info->dtype_mask & KEEL_DTYPE_BIT(c.key_dtype))) {
        st = keel__op_error(&c, KEEL_STATUS_NOT_SUPPORTED,
                            "dtype %s is not supported by this op",
                            keel_dtype_name(c.key_dtype));
        goto out;
    }
    if (c.nout > max_outputs || (c.nout > 0 && !outputs)) {
        st = keel__op_error(&c, KEEL_STATUS_INVALID_ARGUMENT,
                            "has %d outputs, room for %d", c.nout,
                            max_outputs);
        goto out;
    }
    for (i = 0; i < c.nout; i++) {
        st = keel__tensor_new(c.place, c.out_dtype[i], c.out_ndim[i],
                              c.out_shape[i], &outs[i]);
        if (st != KEEL_STATUS_OK)
            goto out;
    }
    st = launch(&c, outs);
    if (st != KEEL_STATUS_OK)
        goto out;
    if (mutated_inputs(op) &&
        (op != KEEL_OP_BATCH_NORM || keel__attr_i(&c, "training")))
        bump_versions(&c, mutated_inputs(op));
    if (wants_grad(&c)) {
        st = atomic_load_explicit(&recorder, memory_order_relaxed)
                 ->record(&c, outs);
        if (st != KEEL_STATUS_OK)
            goto out;
    }
    if (keel__capture && !no_record_depth) {
        st = keel__capture->call(keel__capture->ctx, &c, outs);
        if (st != KEEL_STATUS_OK)
            goto out;
    }
    for (i = 0; i < c.nout; i++) {
        outputs[i] = outs[i];
        outs[i] = NULL;
    }
    if (num_outputs)
        *num_outputs = c.nout;
out:
    for (i = 0; i < c.nout; i++)
        keel_tensor_free(outs[i]);
    call_release(&c);
    return st;
}

keel_status keel_op_run(keel_op_id op, keel_tensor *const *inputs,
                        int num_inputs, const keel_attr *attrs, int num_attrs,
                        keel_tensor **outputs, int max_outputs,
                        int *num_outputs)
{
    return run(op, NULL, inputs, num_inputs, attrs, num_attrs, outputs,
               max_outputs, num_outputs);
}

keel_status keel__run1(keel_op_id op, const keel_tensor *const *in, int nin,
                       const keel_attr *attrs, int nattrs, keel_tensor **out)
{
    int n = 0;
    keel_status st;

    if (!out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: out is NULL", keel_op_table[op].name);
    *out = NULL;
    st = run(op, NULL, (keel_tensor *const *)in, nin, attrs, nattrs, out, 1,
             &n);
    if (st == KEEL_STATUS_OK && n != 1) {
        for (int i = 0; i < n; i++)
            keel_tensor_free(out[i]);
        *out = NULL;
        return keel__error(KEEL_STATUS_INTERNAL,
                           "%s produced %d outputs, expected 1",
                           keel_op_table[op].name, n);
    }
    return st;
}

keel_status keel__run_create(keel_op_id op, keel_place place,
                             const keel_attr *attrs, int nattrs,
                             keel_tensor **out)
{
    int n = 0;

    *out = NULL;
    return run(op, &place, NULL, 0, attrs, nattrs, out, 1, &n);
}
