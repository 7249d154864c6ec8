/*
 * Deliberately broken plugins for testing `keel conform` itself.
 *
 * One source, one defect per build (-D BP_<DEFECT>). Each build is a proxy:
 * it dlopens the real CPU plugin (BP_REAL, the path of libkeel-cpu.so in
 * the build tree), forwards every call to it through copies of its tables,
 * and replaces the one or two entries that carry its defect. Each variant
 * has its own plugin name and device type (BP_NAME).
 *
 *   BP_WRONG_RESULT   exp (float32) corrupts one output element
 *   BP_OOB_WRITE      sigmoid (float32) writes 4 bytes past its output
 *   BP_KERNEL_CRASH   cos (float32) raises SIGSEGV
 *   BP_IGNORE_ORDER   copy_h2d_async is deferred to the next synchronize,
 *                     so later work on the stream overtakes it
 *   BP_EVENT_NEVER    a recorded event never completes
 *   BP_COLL_DROP      all_reduce drops the last rank's contribution
 *   BP_LYING_SIZE     the stream table claims ABI 1.1 with 16 bytes too many
 *   BP_MATMUL_TRANSPOSED  matmul (float32) reads an operand stored
 *                     transposed (column-major matrix part, the core's
 *                     transpose_x/transpose_y) as if it were row-major
 *   BP_MATMUL_RETRANSPOSE matmul (float32) applies transpose_x/transpose_y
 *                     again to operands the core already resolved
 *   BP_DENSE_AS_CONTIGUOUS multiply (float32) treats any dense tensor as
 *                     row-major, so a transposed view is read in the wrong
 *                     order
 *   BP_COLL_PARTIAL   declares (ABI 1.2 get_caps) all_reduce and broadcast
 *                     in float32 with sum only, and refuses everything
 *                     else with NOT_SUPPORTED: a correct partial plugin
 *   BP_COLL_UNDECLARED an ABI 1.1 collective table (no get_caps) whose
 *                     send and recv return NOT_SUPPORTED: allowed
 *   BP_COLL_LIES      declares every collective but send and recv return
 *                     NOT_SUPPORTED: a broken declaration
 *   BP_LATE_ARGS      provides only add, multiply, relu and matmul (float32),
 *                     like a new port; add reads its descriptors only when
 *                     the stream reaches it, after the launch returned
 *   BP_EXIT_AT_END    once tanh (float32) has run, finalize ends the process
 *                     with status 66, as a sanitizer does at exit after it
 *                     reported an error: every test passes, the suite's
 *                     process does not end cleanly
 *
 * The CPU plugin shares its state with the copy the core loaded itself
 * (same file, same handle); that is fine for these tests.
 */
#include <dlfcn.h>
#include <stddef.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <keel/device_api.h>

#ifndef BP_NAME
#error "BP_NAME must name the variant"
#endif
#ifndef BP_REAL
#error "BP_REAL must be the path of libkeel-cpu.so"
#endif

static const keel_plugin_api *real;
static keel_plugin_api api;
static keel_device_ops dev_ops;
static keel_memory_ops mem_ops;
static keel_stream_ops str_ops;
static keel_kernel_ops ker_ops;
static keel_collective_ops col_ops;

/* ---- helpers --------------------------------------------------------------- */

#if defined(BP_WRONG_RESULT) || defined(BP_OOB_WRITE) ||                      \
    defined(BP_KERNEL_CRASH)
static keel_kernel saved;

/* Byte offset of flat element k of a descriptor. */
static int64_t elem_offset(const keel_tensor_desc *d, int64_t k)
{
    int64_t off = 0;

    for (int i = d->ndim - 1; i >= 0; i--) {
        off += (k % d->shape[i]) * d->strides[i];
        k /= d->shape[i];
    }
    return off * (int64_t)keel_dtype_size(d->dtype);
}

static int64_t numel(const keel_tensor_desc *d)
{
    int64_t n = 1;

    for (int i = 0; i < d->ndim; i++)
        n *= d->shape[i];
    return n;
}

static keel_status bad_kernel(void *data, const keel_kernel_args *a)
{
    keel_status st;

    (void)data;
#ifdef BP_KERNEL_CRASH
    raise(SIGSEGV);
#endif
    st = saved.fn(saved.kernel_data, a);
    if (st != KEEL_STATUS_OK || a->num_outputs < 1 ||
        numel(&a->outputs[0]) == 0)
        return st;
#ifdef BP_WRONG_RESULT
    /* element numel/2 becomes 3.0039 */
    return real->memory->memset_async(
        a->device, a->stream,
        a->outputs[0].data +
            (keel_dptr)elem_offset(&a->outputs[0], numel(&a->outputs[0]) / 2),
        0x40, 4);
#else
    /* 4 bytes just past the last element */
    (void)real->memory->memset_async(
        a->device, a->stream,
        a->outputs[0].data +
            (keel_dptr)elem_offset(&a->outputs[0], numel(&a->outputs[0]) - 1) +
            keel_dtype_size(a->outputs[0].dtype),
        0x5a, 4);
    return st;
#endif
}

#if defined(BP_WRONG_RESULT)
#define BAD_OP "exp"
#elif defined(BP_OOB_WRITE)
#define BAD_OP "sigmoid"
#else
#define BAD_OP "cos"
#endif

static keel_status bad_lookup(int32_t device, const char *op, keel_dtype dt,
                              keel_kernel *k)
{
    keel_status st = real->kernel->lookup(device, op, dt, k);

    if (st == KEEL_STATUS_OK && op && !strcmp(op, BAD_OP) && dt == KEEL_F32) {
        saved = *k;
        k->fn = bad_kernel;
        k->kernel_data = NULL;
    }
    return st;
}
#endif

/* ---- deferred host-to-device copies --------------------------------------- */

#ifdef BP_IGNORE_ORDER
/* Deferred copies are kept per (device, stream) and run when that stream,
 * or its whole device, is synchronized: after work enqueued behind them. */
struct deferred {
    struct deferred *next;
    int32_t device;
    keel_stream stream;
    keel_dptr dst;
    void *data;
    uint64_t size;
};

static pthread_mutex_t dlock = PTHREAD_MUTEX_INITIALIZER;
static struct deferred *dhead;

static void flush(int32_t device, keel_stream stream, bool whole_device)
{
    struct deferred *mine = NULL, **pp;

    pthread_mutex_lock(&dlock);
    pp = &dhead;
    while (*pp) {
        struct deferred *d = *pp;
        if (d->device == device && (whole_device || d->stream == stream)) {
            *pp = d->next;
            d->next = mine;
            mine = d;
        } else {
            pp = &d->next;
        }
    }
    pthread_mutex_unlock(&dlock);
    while (mine) {
        struct deferred *n = mine->next;
        real->memory->copy_h2d(mine->device, mine->dst, mine->data,
                               mine->size);
        free(mine->data);
        free(mine);
        mine = n;
    }
}

static keel_status late_h2d_async(int32_t device, keel_stream s, keel_dptr dst,
                                  const void *src, uint64_t size)
{
    struct deferred *d;

    if (!src || size == 0)
        return real->memory->copy_h2d_async(device, s, dst, src, size);
    d = calloc(1, sizeof(*d));
    if (!d || !(d->data = malloc(size))) {
        free(d);
        return KEEL_STATUS_OUT_OF_MEMORY;
    }
    memcpy(d->data, src, size);
    d->device = device;
    d->stream = s;
    d->dst = dst;
    d->size = size;
    pthread_mutex_lock(&dlock);
    d->next = dhead;
    dhead = d;
    pthread_mutex_unlock(&dlock);
    return KEEL_STATUS_OK;
}

static keel_status late_stream_sync(int32_t device, keel_stream s)
{
    keel_status st = real->stream->stream_synchronize(device, s);

    flush(device, s, false);
    return st;
}

static keel_status late_stream_destroy(int32_t device, keel_stream s)
{
    flush(device, s, false);
    return real->stream->stream_destroy(device, s);
}

static keel_status late_device_sync(int32_t device)
{
    keel_status st = real->device->synchronize(device);

    flush(device, NULL, true);
    return st;
}
#endif

/* ---- events that never complete ---------------------------------------------- */

#ifdef BP_EVENT_NEVER
static pthread_mutex_t elock = PTHREAD_MUTEX_INITIALIZER;
static keel_event recorded[4096];
static int nrecorded;

static bool was_recorded(keel_event e)
{
    bool found = false;

    pthread_mutex_lock(&elock);
    for (int i = 0; i < nrecorded && !found; i++)
        found = recorded[i] == e;
    pthread_mutex_unlock(&elock);
    return found;
}

static keel_status never_record(int32_t device, keel_event e, keel_stream s)
{
    keel_status st = real->stream->stream_query(device, s);

    if (st != KEEL_STATUS_OK && st != KEEL_STATUS_NOT_READY)
        return st;
    if (!was_recorded(e)) {
        pthread_mutex_lock(&elock);
        if (nrecorded < 4096)
            recorded[nrecorded++] = e;
        pthread_mutex_unlock(&elock);
    }
    return KEEL_STATUS_OK;
}

static keel_status never_query(int32_t device, keel_event e)
{
    return was_recorded(e) ? KEEL_STATUS_NOT_READY
                           : real->stream->event_query(device, e);
}

static keel_status never_sync(int32_t device, keel_event e)
{
    while (was_recorded(e))
        sleep(1);
    return real->stream->event_synchronize(device, e);
}

static keel_status never_elapsed(int32_t device, keel_event a, keel_event b,
                                 float *ms)
{
    if (was_recorded(a) || was_recorded(b))
        return KEEL_STATUS_NOT_READY;
    return real->stream->event_elapsed_ms(device, a, b, ms);
}
#endif

/* ---- all_reduce without the last rank ------------------------------------------ */

#ifdef BP_COLL_DROP
static pthread_mutex_t clock_ = PTHREAD_MUTEX_INITIALIZER;
static struct {
    keel_comm comm;
    int32_t device;
} comms[256];

static keel_status drop_init(int32_t device, int32_t nranks,
                             const keel_comm_id *id, int32_t rank,
                             keel_comm *comm)
{
    keel_status st = real->collective->comm_init_rank(device, nranks, id, rank,
                                                      comm);

    if (st == KEEL_STATUS_OK && comm) {
        pthread_mutex_lock(&clock_);
        for (int i = 0; i < 256; i++)
            if (!comms[i].comm || comms[i].comm == *comm) {
                comms[i].comm = *comm;
                comms[i].device = device;
                break;
            }
        pthread_mutex_unlock(&clock_);
    }
    return st;
}

static int32_t device_of(keel_comm c)
{
    int32_t d = -1;

    pthread_mutex_lock(&clock_);
    for (int i = 0; i < 256 && d < 0; i++)
        if (comms[i].comm == c)
            d = comms[i].device;
    pthread_mutex_unlock(&clock_);
    return d;
}

static keel_status drop_all_reduce(keel_comm comm, keel_stream s,
                                   keel_dptr send, keel_dptr recv,
                                   uint64_t count, keel_dtype dt,
                                   keel_reduce_op op)
{
    int32_t rank = -1, n = 0, d = device_of(comm);

    if (real->collective->comm_rank(comm, &rank, &n) == KEEL_STATUS_OK &&
        n > 1 && rank == n - 1 && count > 0 && d >= 0 &&
        keel_dtype_size(dt) > 0)
        real->memory->memset_async(d, s, send, 0,
                                   count * keel_dtype_size(dt));
    return real->collective->all_reduce(comm, s, send, recv, count, dt, op);
}
#endif

/* ---- layout bugs: kernels that misread the core's descriptors ------------------- */

#if defined(BP_MATMUL_TRANSPOSED) || defined(BP_MATMUL_RETRANSPOSE) ||        \
    defined(BP_DENSE_AS_CONTIGUOUS)
#if defined(BP_DENSE_AS_CONTIGUOUS)
#define LAYOUT_OP "multiply"
#else
#define LAYOUT_OP "matmul"
#endif
static keel_kernel layout_real;

static inline void row_major(keel_tensor_desc *d, int from)
{
    int64_t s = 1;

    for (int k = d->ndim - 1; k >= from; k--) {
        d->strides[k] = s;
        s *= d->shape[k] > 0 ? d->shape[k] : 1;
    }
}

static inline bool attr_true(const keel_kernel_args *a, const char *name)
{
    for (int32_t i = 0; i < a->num_attrs; i++)
        if (a->attrs[i].name && !strcmp(a->attrs[i].name, name))
            return a->attrs[i].v.i != 0;
    return false;
}

static keel_status layout_bug(void *data, const keel_kernel_args *a)
{
    keel_tensor_desc in[8];
    keel_kernel_args b = *a;

    (void)data;
    if (a->num_inputs > 8)
        return KEEL_STATUS_NOT_SUPPORTED;
    for (int32_t q = 0; q < a->num_inputs; q++)
        in[q] = a->inputs[q];
#if defined(BP_MATMUL_TRANSPOSED)
    /* A column-major matrix part (strides [.., 1, rows]) read with
     * row-major strides: the same bytes, the wrong element order. */
    for (int32_t q = 0; q < a->num_inputs && q < 2; q++) {
        keel_tensor_desc *d = &in[q];
        int nd = d->ndim;
        if (nd >= 2 && d->strides[nd - 2] == 1 && d->strides[nd - 1] != 1 &&
            d->shape[nd - 2] > 1 && d->shape[nd - 1] > 1)
            row_major(d, nd - 2);
    }
#elif defined(BP_MATMUL_RETRANSPOSE)
    /* The flags applied once more to operands already resolved. */
    for (int32_t q = 0; q < a->num_inputs && q < 2; q++) {
        keel_tensor_desc *d = &in[q];
        int nd = d->ndim;
        if (nd >= 2 && attr_true(a, q == 0 ? "transpose_x" : "transpose_y")) {
            int64_t t = d->shape[nd - 2];
            d->shape[nd - 2] = d->shape[nd - 1];
            d->shape[nd - 1] = t;
            t = d->strides[nd - 2];
            d->strides[nd - 2] = d->strides[nd - 1];
            d->strides[nd - 1] = t;
        }
    }
#else
    /* "Dense means contiguous": no gap and no stride 0, so the kernel
     * takes its flat path, which is wrong for a permuted layout. */
    for (int32_t q = 0; q < a->num_inputs; q++) {
        keel_tensor_desc *d = &in[q];
        int64_t last = 0, n = 1;
        bool positive = true;
        for (int k = 0; k < d->ndim; k++) {
            positive = positive && d->strides[k] > 0;
            last += (d->shape[k] - 1) * d->strides[k];
            n *= d->shape[k];
        }
        if (positive && n > 0 && last + 1 == n)
            row_major(d, 0);
    }
#endif
    b.inputs = in;
    return layout_real.fn(layout_real.kernel_data, &b);
}

static keel_status layout_lookup(int32_t device, const char *op,
                                 keel_dtype dt, keel_kernel *k)
{
    keel_status st = real->kernel->lookup(device, op, dt, k);

    if (st == KEEL_STATUS_OK && op && !strcmp(op, LAYOUT_OP) &&
        dt == KEEL_F32) {
        layout_real = *k;
        k->fn = layout_bug;
        k->kernel_data = NULL;
    }
    return st;
}
#endif

/* ---- collectives that support less ----------------------------------------------- */

#if defined(BP_COLL_PARTIAL) || defined(BP_COLL_UNDECLARED) ||                \
    defined(BP_COLL_LIES)
static keel_status refuse(const char *what)
{
    (void)what;
    return KEEL_STATUS_NOT_SUPPORTED;
}

static keel_status no_send(keel_comm comm, keel_stream s, keel_dptr buf,
                           uint64_t count, keel_dtype dt, int32_t peer)
{
    (void)comm, (void)s, (void)buf, (void)count, (void)dt, (void)peer;
    return refuse("send/recv");
}
#endif

#ifdef BP_COLL_PARTIAL
static bool partial_ok(keel_dtype dt, int op)
{
    return dt == KEEL_F32 && (op < 0 || op == KEEL_REDUCE_SUM);
}

static keel_status partial_caps(int32_t device, keel_collective_caps *caps)
{
    keel_status st = real->collective->get_caps(device, caps);

    if (st == KEEL_STATUS_OK && caps->struct_size >= sizeof(*caps)) {
        caps->collectives = KEEL_COLL_ALL_REDUCE | KEEL_COLL_BROADCAST;
        caps->dtype_mask = KEEL_DTYPE_BIT(KEEL_F32);
        caps->reduce_ops = KEEL_REDUCE_OP_BIT(KEEL_REDUCE_SUM);
    }
    return st;
}

static keel_status partial_all_reduce(keel_comm comm, keel_stream s,
                                      keel_dptr send, keel_dptr recv,
                                      uint64_t count, keel_dtype dt,
                                      keel_reduce_op op)
{
    if (!partial_ok(dt, (int)op))
        return refuse("all_reduce");
    return real->collective->all_reduce(comm, s, send, recv, count, dt, op);
}

static keel_status partial_broadcast(keel_comm comm, keel_stream s,
                                     keel_dptr send, keel_dptr recv,
                                     uint64_t count, keel_dtype dt,
                                     int32_t root)
{
    if (!partial_ok(dt, -1))
        return refuse("broadcast");
    return real->collective->broadcast(comm, s, send, recv, count, dt, root);
}

static keel_status no_reduce(keel_comm comm, keel_stream s, keel_dptr send,
                             keel_dptr recv, uint64_t count, keel_dtype dt,
                             keel_reduce_op op, int32_t root)
{
    (void)comm, (void)s, (void)send, (void)recv, (void)count, (void)dt;
    (void)op, (void)root;
    return refuse("reduce");
}

static keel_status no_gather(keel_comm comm, keel_stream s, keel_dptr send,
                             keel_dptr recv, uint64_t count, keel_dtype dt)
{
    (void)comm, (void)s, (void)send, (void)recv, (void)count, (void)dt;
    return refuse("all_gather/all_to_all");
}

static keel_status no_reduce_scatter(keel_comm comm, keel_stream s,
                                     keel_dptr send, keel_dptr recv,
                                     uint64_t count, keel_dtype dt,
                                     keel_reduce_op op)
{
    (void)comm, (void)s, (void)send, (void)recv, (void)count, (void)dt;
    (void)op;
    return refuse("reduce_scatter");
}
#endif

/* ---- a partial plugin whose add reads its arguments late ---------------------------- */

#ifdef BP_LATE_ARGS
struct late {
    keel_kernel real;
    const keel_kernel_args *args; /* the caller's: read when the work runs */
};

static keel_kernel late_add_real;

static void late_run(void *arg)
{
    struct late *l = arg;
    const keel_kernel_args *a = l->args;
    keel_kernel_args b;

    usleep(50 * 1000); /* run well after the launch has returned */
    /* What the caller left there by now; skip what no longer looks like
     * a float32 add (the output then keeps its old contents). */
    if (a->num_inputs == 2 && a->num_outputs == 1 &&
        a->inputs[0].dtype == KEEL_F32 && a->outputs[0].dtype == KEEL_F32) {
        b = *a;
        b.stream = NULL;
        l->real.fn(l->real.kernel_data, &b);
    }
    free(l);
}

static keel_status late_add(void *data, const keel_kernel_args *a)
{
    struct late *l = malloc(sizeof(*l));
    keel_status st;

    (void)data;
    if (!l)
        return KEEL_STATUS_OUT_OF_MEMORY;
    l->real = late_add_real;
    l->args = a;
    st = real->stream->launch_host_func(a->device, a->stream, late_run, l);
    if (st != KEEL_STATUS_OK)
        free(l);
    return st;
}

static keel_status partial_lookup(int32_t device, const char *op,
                                  keel_dtype dt, keel_kernel *k)
{
    keel_status st;

    if (!op || dt != KEEL_F32 ||
        (strcmp(op, "add") && strcmp(op, "multiply") && strcmp(op, "relu") &&
         strcmp(op, "matmul")))
        return k ? KEEL_STATUS_NOT_FOUND : KEEL_STATUS_INVALID_ARGUMENT;
    st = real->kernel->lookup(device, op, dt, k);
    if (st == KEEL_STATUS_OK && !strcmp(op, "add")) {
        late_add_real = *k;
        k->fn = late_add;
        k->kernel_data = NULL;
    }
    return st;
}
#endif

/* ---- a clean run that ends badly ------------------------------------------- */

#ifdef BP_EXIT_AT_END
static keel_kernel tanh_real;
static volatile sig_atomic_t tanh_ran;

static keel_status tanh_marking(void *data, const keel_kernel_args *a)
{
    (void)data;
    tanh_ran = 1;
    return tanh_real.fn(tanh_real.kernel_data, a);
}

static keel_status exit_lookup(int32_t device, const char *op, keel_dtype dt,
                               keel_kernel *k)
{
    keel_status st = real->kernel->lookup(device, op, dt, k);

    if (st == KEEL_STATUS_OK && op && !strcmp(op, "tanh") && dt == KEEL_F32) {
        tanh_real = *k;
        k->fn = tanh_marking;
        k->kernel_data = NULL;
    }
    return st;
}

static keel_status exit_finalize(void)
{
    keel_status st = real->device->finalize();

    if (tanh_ran)
        _exit(66);
    return st;
}
#endif

/* ---- the entry point -------------------------------------------------------------- */

static void install_defect(void)
{
#if defined(BP_WRONG_RESULT) || defined(BP_OOB_WRITE) ||                      \
    defined(BP_KERNEL_CRASH)
    ker_ops.lookup = bad_lookup;
#endif
#ifdef BP_IGNORE_ORDER
    mem_ops.copy_h2d_async = late_h2d_async;
    str_ops.stream_synchronize = late_stream_sync;
    str_ops.stream_destroy = late_stream_destroy;
    dev_ops.synchronize = late_device_sync;
#endif
#ifdef BP_EVENT_NEVER
    str_ops.event_record = never_record;
    str_ops.event_query = never_query;
    str_ops.event_synchronize = never_sync;
    str_ops.event_elapsed_ms = never_elapsed;
#endif
#ifdef BP_COLL_DROP
    col_ops.comm_init_rank = drop_init;
    col_ops.all_reduce = drop_all_reduce;
#endif
#if defined(BP_MATMUL_TRANSPOSED) || defined(BP_MATMUL_RETRANSPOSE) ||        \
    defined(BP_DENSE_AS_CONTIGUOUS)
    ker_ops.lookup = layout_lookup;
#endif
#ifdef BP_COLL_PARTIAL
    col_ops.get_caps = partial_caps;
    col_ops.all_reduce = partial_all_reduce;
    col_ops.broadcast = partial_broadcast;
    col_ops.reduce = no_reduce;
    col_ops.all_gather = no_gather;
    col_ops.all_to_all = no_gather;
    col_ops.reduce_scatter = no_reduce_scatter;
    col_ops.send = no_send;
    col_ops.recv = no_send;
#endif
#ifdef BP_COLL_UNDECLARED
    /* An ABI 1.1 table: it ends before get_caps. */
    col_ops.header.abi_minor = 1;
    col_ops.header.struct_size =
        (uint32_t)offsetof(keel_collective_ops, get_caps);
    col_ops.get_caps = NULL;
    col_ops.send = no_send;
    col_ops.recv = no_send;
#endif
#ifdef BP_COLL_LIES
    col_ops.send = no_send;
    col_ops.recv = no_send;
#endif
#ifdef BP_LATE_ARGS
    ker_ops.lookup = partial_lookup;
#endif
#ifdef BP_EXIT_AT_END
    ker_ops.lookup = exit_lookup;
    dev_ops.finalize = exit_finalize;
#endif
#ifdef BP_LYING_SIZE
    str_ops.header.struct_size = (uint32_t)sizeof(keel_stream_ops) + 16;
#endif
}

KEEL_PLUGIN_EXPORT const keel_plugin_api *keel_plugin_get_api(
    uint32_t major, uint32_t minor, const keel_host_api *host)
{
    keel_plugin_get_api_fn entry;
    void *h;

    h = dlopen(BP_REAL, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        if (host && host->set_error)
            host->set_error(KEEL_STATUS_UNAVAILABLE, dlerror());
        return NULL;
    }
    *(void **)&entry = dlsym(h, KEEL_PLUGIN_ENTRY_SYMBOL);
    real = entry ? entry(major, minor, host) : NULL;
    if (!real)
        return NULL;
    api = *real;
    dev_ops = *real->device;
    mem_ops = *real->memory;
    str_ops = *real->stream;
    api.device = &dev_ops;
    api.memory = &mem_ops;
    api.stream = &str_ops;
    if (real->kernel) {
        ker_ops = *real->kernel;
        api.kernel = &ker_ops;
    }
    if (real->collective) {
        col_ops = *real->collective;
        api.collective = &col_ops;
    }
    api.name = BP_NAME;
    api.device_type = BP_NAME;
    api.version = "0.0.1";
    api.description = "keel conform test plugin (deliberately broken): "
                      BP_NAME;
    install_defect();
    return &api;
}
