/*
 * auto_cast: the AMP step of dispatch (keel/amp.h, docs/amp.md).
 *
 * A thread's scopes form a stack; the innermost decides. Opening the first
 * scope installs this file's two hooks in dispatch, and keel__amp_on tells
 * dispatch whether this thread's innermost scope casts at all, so calls
 * outside auto_cast pay one thread-local load.
 *
 * The step (amp_cast) picks the op's compute dtype from its class, the
 * level and the dtypes of its floating inputs (amp_decide, Paddle's
 * GetAmpDestDtype), lowers it to float32 where the device has no kernel
 * for the amp dtype, and casts the inputs that differ, through the cast
 * op so that autograd sees the casts. Casts of leaves come from a small
 * per-thread cache while scopes are open.
 *
 * The replace hook (amp_replace) runs linear and conv2d whose bias is not
 * in the amp dtype as Paddle composes them: the op without the bias in the
 * amp dtype, then an add of the bias, which promotes to float32.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <keel/amp.h>

#include "amp/amp_internal.h"

enum { CUSTOM_NONE = 0, CUSTOM_WHITE = 1, CUSTOM_BLACK = 2 };

struct amp_scope {
    bool enable;
    keel_amp_level level;
    keel_dtype dtype;
    bool use_promote;
    uint8_t custom[KEEL_OP_COUNT];
};

static _Thread_local struct amp_scope *scopes[KEEL_AMP_MAX_DEPTH];
static _Thread_local int depth;
static atomic_int last_dtype = KEEL_F32;
static atomic_uint_fast64_t fallbacks[KEEL_OP_COUNT];
static atomic_uint fallback_logged[KEEL_OP_COUNT];

/* ---- the cast cache ----------------------------------------------------- */

#define CACHE_SLOTS 128

struct cache_entry {
    keel_tensor *src;  /* referenced while cached */
    keel_tensor *cast; /* the cast of src */
    unsigned version;
    keel_dtype dtype;
    bool recorded;
};

static _Thread_local struct cache_entry cache[CACHE_SLOTS];
static _Thread_local int cache_used;

static void cache_drop(struct cache_entry *e)
{
    keel_tensor_free(e->src);
    keel_tensor_free(e->cast);
    memset(e, 0, sizeof(*e));
}

static void cache_clear(void)
{
    for (int i = 0; i < cache_used; i++)
        cache_drop(&cache[i]);
    cache_used = 0;
}

/* The backward-pass count the entries belong to: cast_one always looks
 * up before it stores, and the look-up empties the cache when a backward
 * pass has run since. */
static _Thread_local unsigned cache_epoch;

static keel_tensor *cache_find(const keel_tensor *src, keel_dtype dt,
                               bool recorded)
{
    unsigned ver = atomic_load_explicit(&src->storage->version,
                                        memory_order_relaxed);
    unsigned epoch = keel__amp_epoch();

    if (epoch != cache_epoch) { /* a backward pass ran: all entries die */
        cache_clear();
        cache_epoch = epoch;
        return NULL;
    }
    for (int i = 0; i < cache_used; i++) {
        struct cache_entry *e = &cache[i];

        if (e->src != src || e->dtype != dt || e->recorded != recorded)
            continue;
        if (e->version == ver && (!recorded || src->requires_grad))
            return e->cast;
        cache_drop(e); /* stale: the tensor was written in place */
        *e = cache[--cache_used];
        memset(&cache[cache_used], 0, sizeof(cache[0]));
        return NULL;
    }
    return NULL;
}

static void cache_put(keel_tensor *src, keel_tensor *cast, keel_dtype dt,
                      bool recorded)
{
    struct cache_entry *e;

    if (cache_used == CACHE_SLOTS)
        return;
    e = &cache[cache_used++];
    e->src = keel_tensor_ref(src);
    e->cast = keel_tensor_ref(cast);
    e->version = atomic_load_explicit(&src->storage->version,
                                      memory_order_relaxed);
    e->dtype = dt;
    e->recorded = recorded;
}

/* ---- the decision --------------------------------------------------------- */

static const struct amp_scope *top(void)
{
    return depth ? scopes[depth - 1] : NULL;
}

static bool castable(keel_dtype dt)
{
    return dt == KEEL_F32 || dt == KEEL_F16 || dt == KEEL_BF16;
}

/* Paddle's white and black lists at the scope's level, with the custom
 * lists applied (_update_list). */
static bool in_white(const struct amp_scope *s, keel_op_id op)
{
    if (s->custom[op] == CUSTOM_WHITE)
        return true;
    return s->custom[op] != CUSTOM_BLACK &&
           keel_op_get_info((keel_op_id)op)->amp == KEEL_AMP_WHITE;
}

static bool in_black(const struct amp_scope *s, keel_op_id op)
{
    keel_amp_class k = keel_op_get_info((keel_op_id)op)->amp;

    if (s->custom[op] == CUSTOM_BLACK)
        return true;
    if (s->custom[op] == CUSTOM_WHITE || s->level == KEEL_AMP_OD)
        return false;
    return k == KEEL_AMP_FP32 ||
           (k == KEEL_AMP_BLACK && s->level == KEEL_AMP_O1);
}

/* The compute dtype of op under s for floating input dtypes in[0..n). */
static keel_dtype amp_decide(const struct amp_scope *s, keel_op_id op,
                             const keel_dtype *in, int n)
{
    if (s->level == KEEL_AMP_O2 && !s->use_promote)
        return in_black(s, op) ? KEEL_F32 : s->dtype;
    if (in_white(s, op))
        return s->dtype;
    if (in_black(s, op) || s->level == KEEL_AMP_OD)
        return KEEL_F32;
    for (int i = 0; i < n; i++)
        if (in[i] == KEEL_F32)
            return KEEL_F32;
    return s->dtype;
}

static bool active(const struct amp_scope *s)
{
    return s && s->enable && s->level != KEEL_AMP_O0;
}

/* The compute dtype of a prepared call, lowered to float32 where the
 * device lacks the kernel. *any is false when no input is castable. */
static keel_dtype call_dtype(const struct amp_scope *s, keel_op_id op,
                             keel_place place, keel_tensor *const *in,
                             int nin, bool *any)
{
    keel_dtype dts[KEEL_MAX_OP_INPUTS], dst;
    int n = 0;

    for (int i = 0; i < nin; i++)
        if (in[i] && castable(in[i]->dtype))
            dts[n++] = in[i]->dtype;
    *any = n > 0;
    if (!n)
        return KEEL_F32;
    dst = amp_decide(s, op, dts, n);
    if (dst != KEEL_F32 && !keel__has_kernel(place, op, dst)) {
        atomic_fetch_add_explicit(&fallbacks[op], 1, memory_order_relaxed);
        if (!atomic_exchange(&fallback_logged[op], 1))
            keel__log(KEEL_LOG_WARN,
                      "auto_cast: the device has no %s kernel for %s; "
                      "running it in float32 (keel_amp_fallback_count)",
                      keel_op_get_info((keel_op_id)op)->name, keel_dtype_name(dst));
        dst = KEEL_F32;
    }
    return dst;
}

/* Cast input i of c to dt, through the cache for leaves. */
static keel_status cast_one(struct keel_op_call *c, int i, keel_dtype dt)
{
    keel_tensor *src = c->in[i], *hit;
    /* Parameters only: leaves that take part in differentiation. Inputs
     * of each step are new tensors, and caching them would only hold
     * memory. */
    bool leaf = src->grad_fn == NULL && src->requires_grad;
    bool recorded = keel__view_wants_record(src);
    keel_status st;

    if (leaf && (hit = cache_find(src, dt, recorded))) {
        keel__call_set_input(c, i, hit);
        return KEEL_STATUS_OK;
    }
    src = keel_tensor_ref(src);
    st = keel__cast_input(c, i, dt);
    if (st == KEEL_STATUS_OK && leaf)
        cache_put(src, c->in[i], dt, recorded);
    keel_tensor_free(src);
    return st;
}

/* The norm ops decide from x alone and keep float32 parameters, as
 * Paddle's do (its kernels read a low-precision x with float32 scale,
 * bias and statistics, and so do keel's: see the shape rules). */
static bool decides_on_x(keel_op_id op)
{
    return op == KEEL_OP_BATCH_NORM || op == KEEL_OP_LAYER_NORM ||
           op == KEEL_OP_GROUP_NORM;
}

static keel_status amp_cast(struct keel_op_call *c)
{
    const struct amp_scope *s = top();
    bool xonly = decides_on_x(c->op);
    keel_dtype dst;
    bool any;

    if (!active(s))
        return KEEL_STATUS_OK;
    dst = call_dtype(s, c->op, c->place, c->in, xonly ? 1 : c->nin, &any);
    if (!any)
        return KEEL_STATUS_OK;
    for (int i = 0; i < c->nin; i++) {
        keel_dtype dt = c->in[i]->dtype;
        keel_status st;

        if (!castable(dt) || dt == dst || keel__input_written(c->op, i))
            continue;
        /* a norm's float32 parameters stay; others follow x */
        if (xonly && i > 0 && dt == KEEL_F32)
            continue;
        st = cast_one(c, i, dst);
        if (st != KEEL_STATUS_OK)
            return st;
    }
    return KEEL_STATUS_OK;
}

/* ---- linear / conv2d with a float32 bias ------------------------------------ */

/* b [C] as [C, 1, 1] for an NCHW add (a recorded view). */
static keel_status bias_view(const keel_tensor *b, keel_tensor **out)
{
    int64_t shape[3] = {b->shape[0], 1, 1};
    int64_t strides[3] = {b->strides[0], 0, 0};
    keel_status st;

    st = keel__tensor_view(b, 3, shape, strides, b->offset, out);
    if (st == KEEL_STATUS_OK && keel__view_wants_record(b)) {
        st = keel__view_record(KEEL_AG_VIEW_RESHAPE, b, *out, NULL, 0);
        if (st != KEEL_STATUS_OK) {
            keel_tensor_free(*out);
            *out = NULL;
        }
    }
    return st;
}

static bool amp_replace(keel_op_id op, keel_tensor *const *in, int nin,
                        const keel_attr *attrs, int nattrs, keel_tensor **outs,
                        int max_outputs, int *num_outputs, keel_status *st)
{
    const struct amp_scope *s = top();
    keel_tensor *y = NULL, *bv = NULL, *xy[2];
    keel_place place;
    keel_dtype dst;
    bool any;
    int n = 0;

    if ((op != KEEL_OP_LINEAR && op != KEEL_OP_CONV2D) || nin != 3 ||
        !in || !in[0] || !in[1] || !in[2] || !active(s) || max_outputs < 1 ||
        !outs)
        return false;
    if (!castable(in[2]->dtype) || in[2]->dtype == s->dtype)
        return false;
    if (op == KEEL_OP_CONV2D && in[2]->ndim != 1)
        return false; /* the shape rule reports it */
    place = in[0]->storage->place;
    dst = call_dtype(s, op, place, in, nin, &any);
    if (!any || dst == KEEL_F32)
        return false;
    xy[0] = in[0];
    xy[1] = in[1];
    *st = keel_op_run(op, xy, 2, attrs, nattrs, &y, 1, &n);
    if (*st == KEEL_STATUS_OK && op == KEEL_OP_CONV2D)
        *st = bias_view(in[2], &bv);
    if (*st == KEEL_STATUS_OK) {
        const keel_tensor *ab[2] = {y, bv ? bv : in[2]};

        *st = keel__run1(KEEL_OP_ADD, ab, 2, NULL, 0, &outs[0]);
    }
    keel_tensor_free(y);
    keel_tensor_free(bv);
    if (num_outputs)
        *num_outputs = *st == KEEL_STATUS_OK ? 1 : 0;
    return true;
}

/* ---- scopes ----------------------------------------------------------------- */

keel_amp_options keel_amp_default_options(void)
{
    keel_amp_options o;

    memset(&o, 0, sizeof(o));
    o.enable = true;
    o.level = KEEL_AMP_O1;
    o.dtype = KEEL_F16;
    o.use_promote = true;
    return o;
}

static keel_status fill_custom(struct amp_scope *s, const char *const *names,
                               int n, int kind, const char *what)
{
    if (n < 0 || n > KEEL_AMP_MAX_CUSTOM || (n > 0 && !names))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "auto_cast: %s has %d entries (0 to %d, and not "
                           "NULL when there are any)",
                           what, n, KEEL_AMP_MAX_CUSTOM);
    for (int i = 0; i < n; i++) {
        keel_op_id op;

        if (!names[i] || keel_op_find(names[i], &op) != KEEL_STATUS_OK)
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "auto_cast: %s entry %d ('%s') is not an op "
                               "of the catalog (docs/ops.md)",
                               what, i, names[i] ? names[i] : "(null)");
        if (keel_op_get_info((keel_op_id)op)->amp == KEEL_AMP_NONE)
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "auto_cast: %s entry '%s' is not a floating "
                               "computation (amp class none): it is never "
                               "cast",
                               what, names[i]);
        if (s->custom[op] && s->custom[op] != kind)
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "auto_cast: '%s' is in both the custom white "
                               "list and the custom black list",
                               names[i]);
        s->custom[op] = (uint8_t)kind;
    }
    return KEEL_STATUS_OK;
}

static void set_on(void)
{
    keel__amp_on = active(top());
}

static keel_status room_for_scope(void)
{
    if (depth == KEEL_AMP_MAX_DEPTH)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "auto_cast: scopes nest at most %d deep",
                           KEEL_AMP_MAX_DEPTH);
    return KEEL_STATUS_OK;
}

/* Make s (heap, owned from here) the innermost scope of this thread. */
static void push_scope(struct amp_scope *s)
{
    keel__dispatch_set_amp(amp_replace, amp_cast);
    scopes[depth++] = s;
    set_on();
}

keel_status keel_amp_begin(const keel_amp_options *options)
{
    keel_amp_options o = options ? *options : keel_amp_default_options();
    struct amp_scope *s;
    keel_status st;

    if ((unsigned)o.level > KEEL_AMP_OD)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "auto_cast: level %d is not O0, O1, O2 or OD",
                           (int)o.level);
    if (o.enable && o.dtype != KEEL_F16 && o.dtype != KEEL_BF16)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "auto_cast: dtype must be float16 or bfloat16, "
                           "got %s",
                           (unsigned)o.dtype < KEEL_DTYPE_COUNT_
                               ? keel_dtype_name(o.dtype)
                               : "an unknown dtype");
    st = room_for_scope();
    if (st != KEEL_STATUS_OK)
        return st;
    s = calloc(1, sizeof(*s));
    if (!s)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "auto_cast: out of host memory");
    s->enable = o.enable;
    s->level = o.level;
    s->dtype = o.dtype;
    s->use_promote = o.level == KEEL_AMP_O2 ? o.use_promote : true;
    st = fill_custom(s, o.custom_white_list, o.num_custom_white, CUSTOM_WHITE,
                     "custom_white_list");
    if (st == KEEL_STATUS_OK)
        st = fill_custom(s, o.custom_black_list, o.num_custom_black,
                         CUSTOM_BLACK, "custom_black_list");
    if (st != KEEL_STATUS_OK) {
        free(s);
        return st;
    }
    /* Paddle sets amp_global_state().amp_dtype before it looks at enable. */
    if (o.dtype == KEEL_F16 || o.dtype == KEEL_BF16)
        atomic_store(&last_dtype, (int)o.dtype);
    push_scope(s);
    return KEEL_STATUS_OK;
}

keel_status keel_amp_end(void)
{
    if (!depth)
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "auto_cast: keel_amp_end without an open scope");
    free(scopes[--depth]);
    scopes[depth] = NULL;
    if (!depth)
        cache_clear();
    set_on();
    return KEEL_STATUS_OK;
}

struct amp_scope *keel__amp_scope_save(void)
{
    const struct amp_scope *t = top();
    struct amp_scope *c;

    if (!active(t))
        return NULL;
    c = malloc(sizeof(*c));
    if (c)
        *c = *t;
    return c;
}

void keel__amp_scope_free(struct amp_scope *s)
{
    free(s);
}

static _Thread_local int lifted[KEEL_AMP_MAX_DEPTH];

keel_status keel__amp_scope_open(const struct amp_scope *s)
{
    struct amp_scope *c;
    keel_status st = room_for_scope();

    if (st != KEEL_STATUS_OK)
        return st;
    c = malloc(sizeof(*c));
    if (!c)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "auto_cast: out of host memory");
    *c = *s;
    lifted[depth] = keel__amp_pause_lift();
    push_scope(c);
    return KEEL_STATUS_OK;
}

void keel__amp_scope_close(void)
{
    if (!depth)
        return;
    keel_amp_end();
    keel__amp_pause_restore(lifted[depth]);
}

bool keel_amp_is_enabled(void)
{
    return active(top());
}

keel_amp_level keel_amp_current_level(void)
{
    return active(top()) ? top()->level : KEEL_AMP_O0;
}

keel_dtype keel_amp_current_dtype(void)
{
    return active(top()) ? top()->dtype : KEEL_F32;
}

keel_dtype keel_amp_last_dtype(void)
{
    return (keel_dtype)atomic_load(&last_dtype);
}

keel_status keel_amp_op_dtype(keel_op_id op, const keel_dtype *in_dtypes,
                              int n, keel_dtype *out)
{
    keel_dtype dts[KEEL_MAX_OP_INPUTS];
    int m = 0;

    if ((unsigned)op >= KEEL_OP_COUNT || !out || n < 0 ||
        n > KEEL_MAX_OP_INPUTS || (n > 0 && !in_dtypes))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_amp_op_dtype: bad op, count or pointer");
    *out = KEEL_F32;
    for (int i = 0; i < n; i++)
        if (castable(in_dtypes[i]))
            dts[m++] = in_dtypes[i];
    if (active(top()) && keel_op_get_info((keel_op_id)op)->amp != KEEL_AMP_NONE && m)
        *out = amp_decide(top(), op, dts, m);
    else if (m)
        *out = dts[0];
    return KEEL_STATUS_OK;
}

uint64_t keel_amp_fallback_count(keel_op_id op)
{
    if ((unsigned)op >= KEEL_OP_COUNT)
        return 0;
    return atomic_load_explicit(&fallbacks[op], memory_order_relaxed);
}

void keel_amp_fallback_reset(void)
{
    for (int i = 0; i < KEEL_OP_COUNT; i++) {
        atomic_store(&fallbacks[i], 0);
        atomic_store(&fallback_logged[i], 0);
    }
}

/* ---- operator statistics ------------------------------------------------------ */

void keel_amp_op_stats_enable(bool on)
{
    keel__op_stats_enable(on);
}

void keel_amp_op_stats_reset(void)
{
    keel__op_stats_reset();
}

uint64_t keel_amp_op_stats_get(keel_op_id op, keel_dtype dtype)
{
    return keel__op_stats_get(op, dtype);
}

void keel_amp_op_stats_print(FILE *f)
{
    if (!f)
        return;
    for (int op = 0; op < KEEL_OP_COUNT; op++) {
        uint64_t n[KEEL_DTYPE_COUNT_], other = 0, total = 0;

        for (int d = 0; d < KEEL_DTYPE_COUNT_; d++) {
            n[d] = keel__op_stats_get((keel_op_id)op, (keel_dtype)d);
            total += n[d];
            if (d != KEEL_F32 && d != KEEL_F16 && d != KEEL_BF16)
                other += n[d];
        }
        if (!total)
            continue;
        fprintf(f, "%-26s float32 %-8llu float16 %-8llu bfloat16 %-8llu "
                   "other %llu\n",
                keel_op_get_info((keel_op_id)op)->name, (unsigned long long)n[KEEL_F32],
                (unsigned long long)n[KEEL_F16],
                (unsigned long long)n[KEEL_BF16], (unsigned long long)other);
    }
}
