/*
 * keel dist layer: the launcher, process groups and the collectives on
 * tensors (keel/dist.h).
 *
 * Bootstrap. Under Open MPI's mpirun the OMPI_COMM_WORLD_* variables give
 * rank, size and local rank; MPI itself (initialised here unless the
 * application did it) carries the one thing the plugins cannot exchange
 * alone: a communicator's unique id, made by the group's first rank and
 * broadcast over MPI_COMM_WORLD. new_group is called by every rank, so
 * that broadcast always has every process in it. The data itself never
 * goes through this layer's MPI: the plugin's communicator carries it
 * (the cpu plugin happens to use MPI for that too, see cpu_coll_mpi.c).
 *
 * Collectives run on the device's default stream, the stream every
 * kernel runs on, so they follow the ops that produced their inputs; each
 * call then waits for the stream, so a tensor is ready (and a failure
 * known) when the call returns.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef KEEL_HAVE_MPI
#include <mpi.h>
#endif

#include "dist/dist_internal.h"

struct keel_dist_group {
    int32_t nranks;
    int32_t rank;    /* this process's rank in the group, -1: none */
    int32_t *global; /* global rank of each group rank */
    keel_place place;
    keel_communicator *comm; /* NULL for a non-member */
    struct keel_dist_group *next;
};

/* What a process started without a launcher is. */
static const keel_dist_env single_process = {0, 1, 0, 1, "none"};

static struct {
    bool initialized;
    bool mpi_started; /* MPI_Init came from here */
    /* A collective failed with TIMEOUT: a peer is gone or hung, and MPI
     * may still own that collective's buffers; finalize must not wait. */
    bool peer_lost;
    char lost[256];
    keel_dist_env env;
    keel_dist_group *world;
    keel_dist_group *groups; /* every group, world included */
} dist_g = {.env = {0, 1, 0, 1, "none"}}; /* single_process */

static pthread_mutex_t dist_lock = PTHREAD_MUTEX_INITIALIZER;

/* An integer environment variable: *value when set and valid. */
static keel_status env_int(const char *name, int32_t lo, int32_t hi,
                           bool *found, int32_t *value)
{
    const char *s = getenv(name);
    char *end;
    long v;

    *found = false;
    if (!s || !*s)
        return KEEL_STATUS_OK;
    v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi)
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "keel_dist_init: %s=\"%s\" is not an integer in "
                           "[%d, %d]", name, s, (int)lo, (int)hi);
    *found = true;
    *value = (int32_t)v;
    return KEEL_STATUS_OK;
}

/* The launcher's variables, checked against each other. */
static keel_status read_env(keel_dist_env *env)
{
    bool fr, fs, flr, fls;
    keel_status st;

    *env = single_process;
    st = env_int("OMPI_COMM_WORLD_SIZE", 1, 1 << 24, &fs, &env->world_size);
    if (!st)
        st = env_int("OMPI_COMM_WORLD_RANK", 0, 1 << 24, &fr, &env->rank);
    if (!st)
        st = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0, 1 << 24, &flr,
                     &env->local_rank);
    if (!st)
        st = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, 1 << 24, &fls,
                     &env->local_size);
    if (st)
        return st;
    if (fs || fr) {
        if (!fs || !fr || env->rank >= env->world_size)
            return keel__error(KEEL_STATUS_INVALID_STATE,
                               "keel_dist_init: Open MPI's variables "
                               "disagree: OMPI_COMM_WORLD_RANK=%s, "
                               "OMPI_COMM_WORLD_SIZE=%s",
                               fr ? getenv("OMPI_COMM_WORLD_RANK") : "unset",
                               fs ? getenv("OMPI_COMM_WORLD_SIZE") : "unset");
        env->launcher = "mpirun";
        if (!flr)
            env->local_rank = env->rank;
        if (!fls)
            env->local_size = env->world_size;
        return KEEL_STATUS_OK;
    }
    /* paddle.distributed.launch sets these; its id exchange goes through
     * its own TCP store, which keel does not speak: say so, rather than
     * running every process as a world of one. */
    st = env_int("PADDLE_TRAINERS_NUM", 1, 1 << 24, &fs, &env->world_size);
    if (st)
        return st;
    if (fs && env->world_size > 1)
        return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                           "keel_dist_init: PADDLE_TRAINERS_NUM=%d says "
                           "paddle.distributed.launch started this job; "
                           "keel exchanges communicator ids through MPI: "
                           "start the job with `mpirun -np %d ...` instead",
                           (int)env->world_size, (int)env->world_size);
    env->world_size = 1;
    return KEEL_STATUS_OK;
}

#ifdef KEEL_HAVE_MPI
static keel_status mpi_start(const keel_dist_env *env)
{
    int init = 0, fin = 0, provided = 0, size = 0, rank = 0;

    MPI_Finalized(&fin);
    if (fin)
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "keel_dist_init: MPI was finalized in this "
                           "process and cannot start again");
    MPI_Initialized(&init);
    if (!init) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) !=
            MPI_SUCCESS)
            return keel__error(KEEL_STATUS_DEVICE_ERROR,
                               "keel_dist_init: MPI_Init_thread failed");
        dist_g.mpi_started = true;
        if (provided < MPI_THREAD_MULTIPLE)
            keel__log(KEEL_LOG_WARN,
                      "keel_dist_init: MPI gives thread level %d, not "
                      "MPI_THREAD_MULTIPLE; collectives on streams with "
                      "their own threads may not be safe", provided);
    }
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (size != env->world_size || rank != env->rank)
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "keel_dist_init: the launcher says rank %d of "
                           "%d, MPI says rank %d of %d",
                           (int)env->rank, (int)env->world_size, rank, size);
    return KEEL_STATUS_OK;
}

/* Global rank `root`'s `bytes` bytes to every process. */
static keel_status boot_bcast(void *buf, uint32_t bytes, int32_t root)
{
    if (dist_g.env.world_size == 1)
        return KEEL_STATUS_OK;
    if (MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD) !=
        MPI_SUCCESS)
        return keel__error(KEEL_STATUS_DEVICE_ERROR,
                           "keel_dist: broadcasting a communicator id from "
                           "rank %d over MPI failed", (int)root);
    return KEEL_STATUS_OK;
}
#else
static keel_status mpi_start(const keel_dist_env *env)
{
    return keel__error(KEEL_STATUS_NOT_SUPPORTED,
                       "keel_dist_init: this is rank %d of a %d-process job, "
                       "but keel was built without MPI (install "
                       "libopenmpi-dev and openmpi-bin, then rebuild)",
                       (int)env->rank, (int)env->world_size);
}

static keel_status boot_bcast(void *buf, uint32_t bytes, int32_t root)
{
    (void)buf;
    (void)bytes;
    (void)root;
    return KEEL_STATUS_OK;
}
#endif

static void group_free(keel_dist_group *g)
{
    if (!g)
        return;
    keel_comm_destroy(g->comm);
    free(g->global);
    free(g);
}

/* Create a group over global ranks `ranks` (all ranks call this). */
static keel_status group_create(const int32_t *ranks, int n,
                                keel_dist_group **out)
{
    keel_dist_group *g = calloc(1, sizeof(*g));
    uint32_t id_bytes = 0;
    uint8_t *id = NULL;
    keel_status st;

    if (!g || !(g->global = malloc((size_t)n * sizeof(*g->global)))) {
        free(g);
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_dist_new_group: out of host memory");
    }
    g->nranks = n;
    g->rank = -1;
    for (int i = 0; i < n; i++) {
        g->global[i] = ranks[i];
        if (ranks[i] == dist_g.env.rank)
            g->rank = i;
    }
    st = keel_current_place(&g->place);
    if (!st)
        st = keel_comm_id_bytes(g->place, &id_bytes);
    if (st)
        goto fail;
    id = calloc(1, id_bytes);
    if (!id) {
        st = keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                         "keel_dist_new_group: out of host memory for a "
                         "%u-byte id", (unsigned)id_bytes);
        goto fail;
    }
    /* The group's rank 0 makes the id; every process takes part in the
     * broadcast, members or not. */
    if (g->rank == 0)
        st = keel_comm_get_unique_id_bytes(g->place, id, id_bytes);
    /* A failure on the maker must not leave the others waiting in the
     * broadcast: a flag saying whether the id was made goes out first,
     * and the id only when it was. */
    {
        int32_t ok = st == KEEL_STATUS_OK;
        keel_status bs = boot_bcast(&ok, sizeof(ok), ranks[0]);

        if (!bs && !st && !ok)
            st = keel__error(KEEL_STATUS_INVALID_STATE,
                             "keel_dist_new_group: rank %d, the group's "
                             "first rank, could not make a communicator id",
                             (int)ranks[0]);
        if (bs)
            st = bs;
    }
    if (!st)
        st = boot_bcast(id, id_bytes, ranks[0]);
    if (!st && g->rank >= 0)
        st = keel_comm_init_rank_bytes(g->place, n, id, id_bytes, g->rank,
                                       &g->comm);
    free(id);
    if (st)
        goto fail;
    *out = g;
    return KEEL_STATUS_OK;
fail:
    group_free(g);
    return st;
}

keel_status keel_dist_init(void)
{
    keel_dist_env env;
    keel_dist_group *world = NULL;
    int32_t *all = NULL;
    keel_status st;

    pthread_mutex_lock(&dist_lock);
    if (dist_g.initialized) {
        pthread_mutex_unlock(&dist_lock);
        return KEEL_STATUS_OK;
    }
    st = keel_init();
    if (!st)
        st = read_env(&env);
    if (!st && env.world_size > 1) /* refuses an MPI already finalized */
        st = mpi_start(&env);
    if (st)
        goto out;
    dist_g.env = env;
    all = malloc((size_t)env.world_size * sizeof(*all));
    if (!all) {
        st = keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                         "keel_dist_init: out of host memory");
        goto out;
    }
    for (int32_t i = 0; i < env.world_size; i++)
        all[i] = i;
    st = group_create(all, env.world_size, &world);
    free(all);
    if (st)
        goto out;
    dist_g.world = world;
    world->next = dist_g.groups;
    dist_g.groups = world;
    dist_g.initialized = true;
out:
    if (st)
        dist_g.env = single_process;
    pthread_mutex_unlock(&dist_lock);
    return st;
}

bool keel_dist_is_initialized(void)
{
    return dist_g.initialized;
}

keel_status keel_dist_get_env(keel_dist_env *env)
{
    if (!env)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_dist_get_env: env is NULL");
    *env = dist_g.env;
    return KEEL_STATUS_OK;
}

int32_t keel_dist_get_rank(void)
{
    return dist_g.env.rank;
}

int32_t keel_dist_get_world_size(void)
{
    return dist_g.env.world_size;
}

keel_status keel_dist_finalize(void)
{
    keel_status st = KEEL_STATUS_OK;

    keel__fleet_reset();
    pthread_mutex_lock(&dist_lock);
    while (dist_g.groups) {
        keel_dist_group *g = dist_g.groups;

        dist_g.groups = g->next;
        group_free(g);
    }
    dist_g.world = NULL;
#ifdef KEEL_HAVE_MPI
    if (dist_g.mpi_started && dist_g.peer_lost) {
        /* MPI_Finalize would wait for the rank that never came. */
        st = keel__error(KEEL_STATUS_INVALID_STATE,
                         "keel_dist_finalize: MPI is left running because "
                         "%s; end the process (the launcher then ends the "
                         "job)", dist_g.lost);
    } else if (dist_g.mpi_started) {
        int fin = 0;

        MPI_Finalized(&fin);
        if (!fin && MPI_Finalize() != MPI_SUCCESS)
            st = keel__error(KEEL_STATUS_DEVICE_ERROR,
                             "keel_dist_finalize: MPI_Finalize failed");
        dist_g.mpi_started = false;
    }
#endif
    dist_g.initialized = false;
    dist_g.env = single_process;
    pthread_mutex_unlock(&dist_lock);
    return st;
}

keel_dist_group *keel_dist_world_group(void)
{
    return dist_g.world;
}

keel_status keel_dist_new_group(const int32_t *ranks, int nranks,
                                keel_dist_group **out)
{
    keel_dist_group *g = NULL;
    keel_status st;

    if (!out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_dist_new_group: out is NULL");
    *out = NULL;
    if (!dist_g.initialized)
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "keel_dist_new_group: call keel_dist_init first");
    /* Distinct ranks of the job (checked below) are also at most
     * world_size of them. */
    if (!ranks || nranks < 1)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_dist_new_group: %d ranks%s (the job has "
                           "%d)", nranks, ranks ? "" : " and no list",
                           (int)dist_g.env.world_size);
    for (int i = 0; i < nranks; i++) {
        if (ranks[i] < 0 || ranks[i] >= dist_g.env.world_size)
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "keel_dist_new_group: ranks[%d] = %d is not "
                               "a rank of this %d-process job", i,
                               (int)ranks[i], (int)dist_g.env.world_size);
        for (int j = 0; j < i; j++)
            if (ranks[j] == ranks[i])
                return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                                   "keel_dist_new_group: rank %d is listed "
                                   "twice (ranks[%d] and ranks[%d])",
                                   (int)ranks[i], j, i);
    }
    pthread_mutex_lock(&dist_lock);
    st = group_create(ranks, nranks, &g);
    if (!st) {
        g->next = dist_g.groups;
        dist_g.groups = g;
        *out = g;
    }
    pthread_mutex_unlock(&dist_lock);
    return st;
}

int32_t keel_dist_group_rank(const keel_dist_group *group)
{
    const keel_dist_group *g = group ? group : dist_g.world;

    return g ? g->rank : 0;
}

int32_t keel_dist_group_size(const keel_dist_group *group)
{
    const keel_dist_group *g = group ? group : dist_g.world;

    return g ? g->nranks : 1;
}

int32_t keel_dist_group_global_rank(const keel_dist_group *group,
                                    int32_t group_rank)
{
    const keel_dist_group *g = group ? group : dist_g.world;

    if (!g || group_rank < 0 || group_rank >= g->nranks)
        return -1;
    return g->global[group_rank];
}

/* ---- collectives on tensors ---------------------------------------------- */

/* The group a call runs on, with this process a member. */
static keel_status member_of(keel_dist_group *group, const char *call,
                             keel_dist_group **out)
{
    keel_dist_group *g = group ? group : dist_g.world;

    if (!g)
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "%s: call keel_dist_init first", call);
    if (g->rank < 0)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: rank %d is not a member of this group of "
                           "%d ranks", call, (int)dist_g.env.rank,
                           (int)g->nranks);
    *out = g;
    return KEEL_STATUS_OK;
}

/* A tensor a collective can use: contiguous, on the group's device. */
static keel_status usable(const keel_tensor *t, const keel_dist_group *g,
                          const char *call, const char *what)
{
    keel_place p;

    if (!t)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: %s is NULL",
                           call, what);
    if (!keel_tensor_is_contiguous(t))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: %s is not contiguous (use keel_contiguous)",
                           call, what);
    p = keel_tensor_place(t);
    if (p.plugin != g->place.plugin || p.device != g->place.device) {
        char a[64] = "?", b[64] = "?";

        keel_place_name(p, a, sizeof(a));
        keel_place_name(g->place, b, sizeof(b));
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: %s is on %s, the group's device is %s", call,
                           what, a, b);
    }
    return KEEL_STATUS_OK;
}

/* Global rank -> group rank, or an error naming the call. */
static keel_status group_rank_of(const keel_dist_group *g, int32_t global,
                                 const char *call, const char *what,
                                 int32_t *out)
{
    for (int32_t i = 0; i < g->nranks; i++)
        if (g->global[i] == global) {
            *out = i;
            return KEEL_STATUS_OK;
        }
    return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                       "%s: %s %d is not a rank of this group", call, what,
                       (int)global);
}

/* Wait for the collective's stream, and name the call in a failure. */
static keel_status finish_on(keel_status st, const keel_dist_group *g,
                             keel_stream stream, const char *call)
{
    if (!st)
        st = keel_stream_synchronize(g->place, stream);
    if (st) {
        char cause[768];

        snprintf(cause, sizeof(cause), "%s", keel_last_error());
        if (st == KEEL_STATUS_TIMEOUT && !dist_g.peer_lost) {
            dist_g.peer_lost = true;
            snprintf(dist_g.lost, sizeof(dist_g.lost),
                     "%s timed out on rank %d", call, (int)dist_g.env.rank);
        }
        return keel__error(st, "%s on rank %d (rank %d of the group's %d): "
                           "%s", call, (int)dist_g.env.rank, (int)g->rank,
                           (int)g->nranks, cause);
    }
    return KEEL_STATUS_OK;
}

static keel_status finish(keel_status st, const keel_dist_group *g,
                          const char *call)
{
    return finish_on(st, g, NULL, call);
}

keel_status keel_dist_barrier(keel_dist_group *group)
{
    static const char call[] = "keel_dist_barrier";
    keel_dist_group *g = NULL;
    keel_tensor *one = NULL;
    int64_t shape[1] = {1};
    keel_status st;

    st = member_of(group, call, &g);
    if (!st)
        st = keel__tensor_new(g->place, KEEL_I32, 1, shape, &one);
    if (!st)
        st = keel_mem_set(g->place, keel__tensor_dptr(one), 0, 4);
    if (!st)
        st = finish(keel_all_reduce(g->comm, NULL, keel__tensor_dptr(one),
                                    keel__tensor_dptr(one), 1, KEEL_I32,
                                    KEEL_REDUCE_SUM), g, call);
    keel_tensor_free(one);
    return st;
}

/* The three collectives that work in place on t, enqueued on `stream`
 * (NULL: the default stream) and waited for there. */
enum inplace_kind { INPLACE_ALL_REDUCE, INPLACE_BROADCAST, INPLACE_REDUCE };

static keel_status in_place(enum inplace_kind kind, keel_tensor *t,
                            int32_t peer, keel_reduce_op op,
                            keel_dist_group *group, keel_stream stream)
{
    static const char *const calls[] = {"keel_dist_all_reduce",
                                        "keel_dist_broadcast",
                                        "keel_dist_reduce"};
    const char *call = calls[kind];
    keel_dist_group *g = NULL;
    int32_t root = 0;
    keel_dptr p;
    uint64_t n;
    keel_status st;

    st = member_of(group, call, &g);
    if (!st)
        st = usable(t, g, call, "tensor");
    if (!st && kind != INPLACE_ALL_REDUCE)
        st = group_rank_of(g, peer, call,
                           kind == INPLACE_BROADCAST ? "src" : "dst", &root);
    if (st)
        return st;
    p = keel__tensor_dptr(t);
    n = (uint64_t)keel_tensor_numel(t);
    return finish_on(kind == INPLACE_ALL_REDUCE
                         ? keel_all_reduce(g->comm, stream, p, p, n, t->dtype,
                                           op)
                     : kind == INPLACE_BROADCAST
                         ? keel_broadcast(g->comm, stream, p, p, n, t->dtype,
                                          root)
                         : keel_reduce(g->comm, stream, p, p, n, t->dtype, op,
                                       root),
                     g, stream, call);
}

keel_status keel_dist_all_reduce(keel_tensor *t, keel_reduce_op op,
                                 keel_dist_group *group)
{
    return in_place(INPLACE_ALL_REDUCE, t, 0, op, group, NULL);
}

keel_status keel__dist_all_reduce_on(keel_tensor *t, keel_reduce_op op,
                                     keel_dist_group *group,
                                     keel_stream stream)
{
    return in_place(INPLACE_ALL_REDUCE, t, 0, op, group, stream);
}

keel_status keel_dist_broadcast(keel_tensor *t, int32_t src,
                                keel_dist_group *group)
{
    return in_place(INPLACE_BROADCAST, t, src, KEEL_REDUCE_SUM, group, NULL);
}

keel_status keel_dist_reduce(keel_tensor *t, int32_t dst, keel_reduce_op op,
                             keel_dist_group *group)
{
    return in_place(INPLACE_REDUCE, t, dst, op, group, NULL);
}

/* A new contiguous tensor like t with its first dimension replaced (or a
 * new leading dimension when `lead` is true). */
static keel_status like(const keel_tensor *t, bool lead, int64_t first,
                        const char *call, keel_tensor **out)
{
    int64_t shape[KEEL_MAX_DIMS];
    int nd = t->ndim;

    if (lead) {
        if (nd + 1 > KEEL_MAX_DIMS)
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "%s: the result would have %d dimensions "
                               "(at most %d)", call, nd + 1, KEEL_MAX_DIMS);
        shape[0] = first;
        memcpy(shape + 1, t->shape, (size_t)nd * sizeof(*shape));
        nd++;
    } else {
        memcpy(shape, t->shape, (size_t)nd * sizeof(*shape));
        shape[0] = first;
    }
    return keel__tensor_new(t->storage->place, t->dtype, nd, shape, out);
}

/* Check that t's first dimension splits into the group's ranks. */
static keel_status split_first(const keel_tensor *t, const keel_dist_group *g,
                               const char *call, int64_t *k)
{
    if (t->ndim < 1 || t->shape[0] % g->nranks)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "%s: the first dimension (%lld) must be a "
                           "multiple of the group's %d ranks", call,
                           t->ndim ? (long long)t->shape[0] : 0LL,
                           (int)g->nranks);
    *k = t->shape[0] / g->nranks;
    return KEEL_STATUS_OK;
}

/* The three collectives that return a new tensor. */
enum fresh_kind { FRESH_ALL_GATHER, FRESH_REDUCE_SCATTER, FRESH_ALL_TO_ALL };

static keel_status fresh(enum fresh_kind kind, const keel_tensor *t,
                         keel_reduce_op op, keel_dist_group *group,
                         keel_tensor **out)
{
    static const char *const calls[] = {"keel_dist_all_gather",
                                        "keel_dist_reduce_scatter",
                                        "keel_dist_all_to_all"};
    const char *call = calls[kind];
    keel_dist_group *g = NULL;
    keel_tensor *r = NULL;
    int64_t k = 0;
    keel_status st;

    if (!out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT, "%s: out is NULL",
                           call);
    *out = NULL;
    st = member_of(group, call, &g);
    if (!st)
        st = usable(t, g, call, "tensor");
    if (!st && kind != FRESH_ALL_GATHER)
        st = split_first(t, g, call, &k);
    if (!st) /* [n, t...], [k, ...] or t's shape */
        st = kind == FRESH_ALL_GATHER ? like(t, true, g->nranks, call, &r)
             : kind == FRESH_REDUCE_SCATTER ? like(t, false, k, call, &r)
                                            : like(t, false, t->shape[0],
                                                   call, &r);
    if (!st) {
        keel_dptr src = keel__tensor_dptr(t), dst = keel__tensor_dptr(r);
        uint64_t n = (uint64_t)keel_tensor_numel(t);

        st = finish(kind == FRESH_ALL_GATHER
                        ? keel_all_gather(g->comm, NULL, src, dst, n,
                                          t->dtype)
                    : kind == FRESH_REDUCE_SCATTER
                        ? keel_reduce_scatter(g->comm, NULL, src, dst,
                                              n / (uint64_t)g->nranks,
                                              t->dtype, op)
                        : keel_all_to_all(g->comm, NULL, src, dst,
                                          n / (uint64_t)g->nranks, t->dtype),
                    g, call);
    }
    if (st) {
        keel_tensor_free(r);
        return st;
    }
    *out = r;
    return KEEL_STATUS_OK;
}

keel_status keel_dist_all_gather(const keel_tensor *t, keel_dist_group *group,
                                 keel_tensor **out)
{
    return fresh(FRESH_ALL_GATHER, t, KEEL_REDUCE_SUM, group, out);
}

keel_status keel_dist_reduce_scatter(const keel_tensor *t, keel_reduce_op op,
                                     keel_dist_group *group,
                                     keel_tensor **out)
{
    return fresh(FRESH_REDUCE_SCATTER, t, op, group, out);
}

keel_status keel_dist_all_to_all(const keel_tensor *t, keel_dist_group *group,
                                 keel_tensor **out)
{
    return fresh(FRESH_ALL_TO_ALL, t, KEEL_REDUCE_SUM, group, out);
}

static keel_status p2p(keel_tensor *t, int32_t peer, keel_dist_group *group,
                       bool send)
{
    const char *call = send ? "keel_dist_send" : "keel_dist_recv";
    keel_dist_group *g = NULL;
    int32_t r = 0;
    keel_status st;

    st = member_of(group, call, &g);
    if (!st)
        st = usable(t, g, call, "tensor");
    if (!st)
        st = group_rank_of(g, peer, call, send ? "dst" : "src", &r);
    if (!st && r == g->rank)
        st = keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                         "%s: rank %d cannot %s itself", call,
                         (int)dist_g.env.rank, send ? "send to" :
                         "receive from");
    if (st)
        return st;
    return finish(send ? keel_send(g->comm, NULL, keel__tensor_dptr(t),
                                   (uint64_t)keel_tensor_numel(t), t->dtype,
                                   r)
                       : keel_recv(g->comm, NULL, keel__tensor_dptr(t),
                                   (uint64_t)keel_tensor_numel(t), t->dtype,
                                   r),
                  g, call);
}

keel_status keel_dist_send(const keel_tensor *t, int32_t dst,
                           keel_dist_group *group)
{
    return p2p((keel_tensor *)t, dst, group, true);
}

keel_status keel_dist_recv(keel_tensor *t, int32_t src,
                           keel_dist_group *group)
{
    return p2p(t, src, group, false);
}
