/*
 * keel conform — collectives, on all tested devices of the plugin in one
 * process (one rank per device), driven by one thread with group_start /
 * group_end, and (full level) by one thread per rank.
 *
 * Values are small integers, so every dtype and reduction has an exact
 * expected result (AVG only for float dtypes; bool only for collectives
 * that move data without reducing).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "conform.h"

#define COL (cf_env.api->collective)
#define MEM (cf_env.api->memory)

enum ckind {
    C_ALL_REDUCE,
    C_BROADCAST,
    C_REDUCE,
    C_ALL_GATHER,
    C_REDUCE_SCATTER,
    C_ALL_TO_ALL
};

static const char *const kind_names[] = {"all_reduce", "broadcast",
                                         "reduce", "all_gather",
                                         "reduce_scatter", "all_to_all"};
static const char *const op_names[] = {"sum", "prod", "max", "min", "avg"};

struct coll {
    int n;
    keel_comm comm[CF_MAX_DEVICES];
    keel_stream s[CF_MAX_DEVICES];
};

static bool have_collectives(void)
{
    if (!COL) {
        cf_skip("the collective group is not provided");
        return false;
    }
    return true;
}

static const uint32_t kind_bits[] = {
    KEEL_COLL_ALL_REDUCE, KEEL_COLL_BROADCAST,      KEEL_COLL_REDUCE,
    KEEL_COLL_ALL_GATHER, KEEL_COLL_REDUCE_SCATTER, KEEL_COLL_ALL_TO_ALL};

/* Whether a collective is to be tested: with a declaration (ABI 1.2
 * get_caps), exactly what is declared; without one, everything. */
static bool declared_kind(uint32_t bit)
{
    return !cf_env.coll_declared || (cf_env.coll_caps.collectives & bit);
}

static bool declared_combo(int dt, int op)
{
    if (!cf_env.coll_declared)
        return true;
    return (cf_env.coll_caps.dtype_mask & KEEL_DTYPE_BIT(dt)) &&
           (op < 0 || (cf_env.coll_caps.reduce_ops & KEEL_REDUCE_OP_BIT(op)));
}

/* Skip a test that needs all_reduce(float32, sum) when it is not declared. */
static bool need_all_reduce_f32_sum(void)
{
    if (declared_kind(KEEL_COLL_ALL_REDUCE) &&
        declared_combo(KEEL_F32, KEEL_REDUCE_SUM))
        return true;
    cf_skip("not declared: collective.get_caps does not list all_reduce "
            "with float32 and sum, which this test uses");
    return false;
}

/* NOT_SUPPORTED from a call: allowed when nothing is declared (a note),
 * a failure when the declaration covers the call. */
static void unsupported(const char *what)
{
    if (cf_env.coll_declared)
        CF_FAIL("%s returned NOT_SUPPORTED, but collective.get_caps "
                "declares it",
                what);
    else
        cf_note("%s: NOT_SUPPORTED (allowed: the plugin declares no "
                "collective capabilities, ABI 1.2 collective.get_caps)",
                what);
}

/* The id size the plugin states (ABI 1.3), 128 without a statement. */
static uint32_t id_bytes(void)
{
    return cf_env.coll_declared && cf_env.coll_caps.id_bytes
               ? cf_env.coll_caps.id_bytes
               : KEEL_COMM_ID_BYTES;
}

/* A new id of id_bytes() bytes in `buf`, through whichever call the size
 * needs; and a join with one. */
static keel_status id_new(uint8_t *buf)
{
    uint32_t nb = id_bytes();

    if (nb > KEEL_COMM_ID_BYTES)
        return COL->get_unique_id_bytes
                   ? COL->get_unique_id_bytes(buf, nb)
                   : KEEL_STATUS_NOT_SUPPORTED;
    return COL->get_unique_id((keel_comm_id *)(void *)buf);
}

static keel_status id_join(int32_t d, int32_t n, const uint8_t *id,
                           int32_t r, keel_comm *m)
{
    uint32_t nb = id_bytes();

    if (nb > KEEL_COMM_ID_BYTES)
        return COL->comm_init_rank_bytes
                   ? COL->comm_init_rank_bytes(d, n, id, nb, r, m)
                   : KEEL_STATUS_NOT_SUPPORTED;
    return COL->comm_init_rank(d, n, (const keel_comm_id *)(const void *)id,
                               r, m);
}

static bool coll_init(struct coll *c)
{
    keel_comm_id id;
    uint32_t nb = id_bytes();
    uint8_t *big = NULL;
    bool ok = true;

    memset(c, 0, sizeof(*c));
    c->n = cf_env.ndev;
    /* A plugin with larger ids is driven through the _bytes calls. */
    if (nb > KEEL_COMM_ID_BYTES) {
        if (!CF_CHECK(COL->get_unique_id_bytes && COL->comm_init_rank_bytes,
                      "get_caps states %u-byte ids but the plugin lacks "
                      "get_unique_id_bytes or comm_init_rank_bytes",
                      (unsigned)nb) ||
            !CF_CHECK((big = malloc(nb)) != NULL, "out of host memory"))
            return false;
        if (!CF_OK(COL->get_unique_id_bytes(big, nb),
                   "collective.get_unique_id_bytes(%u bytes)", (unsigned)nb)) {
            free(big);
            return false;
        }
    } else if (!CF_OK(COL->get_unique_id(&id), "collective.get_unique_id")) {
        return false;
    }
    if (!CF_OK(COL->group_start(), "collective.group_start")) {
        free(big);
        return false;
    }
    for (int r = 0; r < c->n; r++)
        ok = CF_OK(big ? COL->comm_init_rank_bytes(cf_env.dev[r], c->n, big,
                                                   nb, r, &c->comm[r])
                       : COL->comm_init_rank(cf_env.dev[r], c->n, &id, r,
                                             &c->comm[r]),
                   "collective.comm_init_rank%s(device %d, %d ranks, rank %d)",
                   big ? "_bytes" : "", (int)cf_env.dev[r], c->n, r) &&
             ok;
    free(big);
    ok = CF_OK(COL->group_end(), "collective.group_end after comm_init_rank") &&
         ok;
    for (int r = 0; r < c->n && ok; r++)
        ok = cf_stream_new(cf_env.dev[r], &c->s[r]);
    return ok;
}

static void coll_fini(struct coll *c)
{
    for (int r = 0; r < c->n; r++) {
        if (c->comm[r])
            CF_OK(COL->comm_destroy(c->comm[r]), "collective.comm_destroy");
        cf_stream_del(cf_env.dev[r], c->s[r]);
    }
}

/* ---- values and expectations ------------------------------------------------ */

static double value(int dt, int op, int r, uint64_t i)
{
    struct cf_rng g;
    int64_t lo = -3, hi = 3;

    cf_rng_seed(&g, ((uint64_t)r << 32) ^ i ^ ((uint64_t)op << 56));
    if (op == KEEL_REDUCE_PROD) {
        static const int vals[] = {1, 2, -1, 1};
        int v = vals[cf_rng_int(&g, 0, 3)];
        return dt == KEEL_U8 || dt == KEEL_BOOL ? (v < 0 ? 1 : v) : v;
    }
    if (op == KEEL_REDUCE_MAX || op == KEEL_REDUCE_MIN) {
        lo = -8;
        hi = 8;
    }
    if (dt == KEEL_U8)
        lo = 0;
    if (dt == KEEL_BOOL) {
        lo = 0;
        hi = 1;
    }
    return (double)cf_rng_int(&g, lo, hi);
}

static double reduce_over(int dt, int op, int n, const double *v)
{
    double acc = v[0];

    for (int q = 1; q < n; q++) {
        switch (op) {
        case KEEL_REDUCE_PROD:
            acc *= v[q];
            break;
        case KEEL_REDUCE_MAX:
            acc = v[q] > acc ? v[q] : acc;
            break;
        case KEEL_REDUCE_MIN:
            acc = v[q] < acc ? v[q] : acc;
            break;
        default:
            acc += v[q];
        }
    }
    if (op == KEEL_REDUCE_AVG)
        acc /= n;
    return cf_quantize(dt, acc);
}

static bool close_enough(int dt, double got, double want)
{
    double tol;

    if (!cf_dtype_is_float(dt))
        return got == want;
    tol = dt == KEEL_F16 || dt == KEEL_BF16 ? 1e-2 : 1e-6;
    return got == want ||
           (got - want) * (got - want) <= tol * tol * (want * want + 1e-6);
}

static bool reducing(enum ckind k)
{
    return k == C_ALL_REDUCE || k == C_REDUCE || k == C_REDUCE_SCATTER;
}

/* ---- one collective call over all ranks -------------------------------------- */

struct cbuf {
    keel_dptr send, recv;
    unsigned char *host;     /* staging                              */
    double *sendv;           /* values each rank sent                */
    uint64_t nsend, nrecv;
};

static uint64_t send_elems(enum ckind k, int n, uint64_t count)
{
    return k == C_REDUCE_SCATTER || k == C_ALL_TO_ALL ? count * (uint64_t)n
                                                       : count;
}

static uint64_t recv_elems(enum ckind k, int n, uint64_t count)
{
    return k == C_ALL_GATHER || k == C_ALL_TO_ALL ? count * (uint64_t)n : count;
}

static keel_status issue(struct coll *c, int r, enum ckind k,
                         const struct cbuf *b, uint64_t count, int dt, int op,
                         int root)
{
    keel_comm m = c->comm[r];
    keel_stream s = c->s[r];

    switch (k) {
    case C_ALL_REDUCE:
        return COL->all_reduce(m, s, b->send, b->recv, count, (keel_dtype)dt,
                               (keel_reduce_op)op);
    case C_BROADCAST:
        return COL->broadcast(m, s, b->send, b->recv, count, (keel_dtype)dt,
                              root);
    case C_REDUCE:
        return COL->reduce(m, s, b->send, b->recv, count, (keel_dtype)dt,
                           (keel_reduce_op)op, root);
    case C_ALL_GATHER:
        return COL->all_gather(m, s, b->send, b->recv, count, (keel_dtype)dt);
    case C_REDUCE_SCATTER:
        return COL->reduce_scatter(m, s, b->send, b->recv, count,
                                   (keel_dtype)dt, (keel_reduce_op)op);
    default:
        return COL->all_to_all(m, s, b->send, b->recv, count, (keel_dtype)dt);
    }
}

static double expected(enum ckind k, int n, struct cbuf *b, int r, uint64_t j,
                       uint64_t count, int dt, int op, int root, double old)
{
    double v[CF_MAX_DEVICES];

    switch (k) {
    case C_ALL_REDUCE:
        for (int q = 0; q < n; q++)
            v[q] = b[q].sendv[j];
        return reduce_over(dt, op, n, v);
    case C_BROADCAST:
        return b[root].sendv[j];
    case C_REDUCE:
        if (r != root)
            return old;
        for (int q = 0; q < n; q++)
            v[q] = b[q].sendv[j];
        return reduce_over(dt, op, n, v);
    case C_ALL_GATHER:
        return b[j / count].sendv[j % count];
    case C_REDUCE_SCATTER:
        for (int q = 0; q < n; q++)
            v[q] = b[q].sendv[(uint64_t)r * count + j];
        return reduce_over(dt, op, n, v);
    default:
        return b[j / count].sendv[(uint64_t)r * count + j % count];
    }
}

/* Sentinel in recv buffers before the call (what "untouched" means). */
static double sentinel(int dt)
{
    return dt == KEEL_BOOL ? 1 : (dt == KEEL_U8 ? 77 : -77);
}

static bool prepare(struct cbuf *b, int r, enum ckind k, int n,
                    uint64_t count, int dt, int op, bool inplace)
{
    int32_t d = cf_env.dev[r];
    size_t es = cf_dtype_size(dt);
    uint64_t ns = send_elems(k, n, count), nr = recv_elems(k, n, count);
    uint64_t big = ns > nr ? ns : nr;

    memset(b, 0, sizeof(*b));
    b->nsend = ns;
    b->nrecv = nr;
    b->host = malloc((size_t)(big ? big : 1) * es);
    b->sendv = malloc((size_t)(ns ? ns : 1) * sizeof(double));
    if (!CF_CHECK(b->host && b->sendv, "out of host memory"))
        return false;
    if (!cf_alloc(d, ns * es > 64 ? ns * es : 64, &b->send))
        return false;
    if (inplace)
        b->recv = b->send;
    else if (!cf_alloc(d, nr * es > 64 ? nr * es : 64, &b->recv))
        return false;
    for (uint64_t i = 0; i < ns; i++) {
        b->sendv[i] = value(dt, op, r, i);
        cf_store(dt, b->host, (int64_t)i, b->sendv[i]);
    }
    if (ns && !cf_upload(d, b->send, b->host, ns * es))
        return false;
    if (!inplace) {
        for (uint64_t i = 0; i < nr; i++)
            cf_store(dt, b->host, (int64_t)i, sentinel(dt));
        if (nr && !cf_upload(d, b->recv, b->host, nr * es))
            return false;
    }
    return true;
}

static void release(struct cbuf *b, int r)
{
    if (b->recv != b->send)
        cf_free(cf_env.dev[r], b->recv);
    cf_free(cf_env.dev[r], b->send);
    free(b->host);
    free(b->sendv);
}

enum run_result { RUN_FAILED = 0, RUN_OK = 1, RUN_UNSUPPORTED = 2 };

/* Run one collective on every rank and check every element. */
static enum run_result run_one(struct coll *c, enum ckind k, int dt, int op,
                               uint64_t count, int root, bool inplace)
{
    struct cbuf b[CF_MAX_DEVICES];
    int n = c->n;
    size_t es = cf_dtype_size(dt);
    bool ok = true, prepared = true, declined = false;
    char what[160];
    keel_status st;

    snprintf(what, sizeof(what), "%s(%s%s%s, count %llu, %d rank%s%s%s%s)",
             kind_names[k], reducing(k) ? op_names[op] : "",
             reducing(k) ? ", " : "", cf_dtype_name(dt),
             (unsigned long long)count, n, n == 1 ? "" : "s",
             k == C_BROADCAST || k == C_REDUCE ? ", root " : "",
             k == C_BROADCAST || k == C_REDUCE ? (root ? "last" : "0") : "",
             inplace ? ", in place" : "");
    memset(b, 0, sizeof(b));
    for (int r = 0; r < n; r++)
        prepared = prepare(&b[r], r, k, n, count, dt, op, inplace) && prepared;
    if (!prepared) {
        ok = false;
        goto out;
    }
    if (!CF_OK(COL->group_start(), "group_start")) {
        ok = false;
        goto out;
    }
    for (int r = 0; r < n; r++) {
        st = issue(c, r, k, &b[r], count, dt, op, root);
        if (st == KEEL_STATUS_NOT_SUPPORTED) {
            unsupported(what);
            COL->group_end();
            for (int q = 0; q < n; q++)
                cf_env.api->stream->stream_synchronize(cf_env.dev[q],
                                                       c->s[q]);
            declined = !cf_env.coll_declared;
            ok = false;
            goto out;
        }
        ok = CF_OK(st, "%s on rank %d", what, r) && ok;
    }
    ok = CF_OK(COL->group_end(), "group_end after %s", what) && ok;
    for (int r = 0; r < n; r++)
        ok = CF_OK(cf_env.api->stream->stream_synchronize(cf_env.dev[r],
                                                          c->s[r]),
                   "stream_synchronize of rank %d after %s", r, what) &&
             ok;
    if (!ok)
        goto out;
    for (int r = 0; r < n && ok; r++) {
        uint64_t nr = b[r].nrecv;
        if (nr && !cf_download(cf_env.dev[r], b[r].host, b[r].recv, nr * es)) {
            ok = false;
            break;
        }
        for (uint64_t j = 0; j < nr; j++) {
            double got = cf_load(dt, b[r].host, (int64_t)j);
            double old = inplace ? b[r].sendv[j] : sentinel(dt);
            double want = expected(k, n, b, r, j, count, dt, op, root, old);
            if (!close_enough(dt, got, want)) {
                CF_FAIL("%s: rank %d (device %d) element %llu is %g, "
                        "expected %g",
                        what, r, (int)cf_env.dev[r], (unsigned long long)j,
                        got, want);
                ok = false;
                break;
            }
        }
    }
out:
    for (int r = 0; r < n; r++)
        release(&b[r], r);
    return declined ? RUN_UNSUPPORTED : ok ? RUN_OK : RUN_FAILED;
}

/* ---- the matrix -------------------------------------------------------------------- */

static void matrix(enum ckind k)
{
    struct coll c;
    bool full = cf_env.level >= CF_LEVEL_FULL;
    uint64_t counts[4];
    int ncounts, ran = 0, declined = 0;

    if (!have_collectives())
        return;
    if (!declared_kind(kind_bits[k])) {
        cf_skip("not declared: collective.get_caps does not list %s",
                kind_names[k]);
        return;
    }
    if (!coll_init(&c))
        goto out;
    counts[0] = (uint64_t)c.n * 3 + 1;
    counts[1] = 0;
    counts[2] = 1;
    counts[3] = 1000 + (uint64_t)c.n - 1;
    ncounts = full ? 4 : 1;
    for (int dt = 0; dt < KEEL_DTYPE_COUNT_; dt++) {
        if (!(cf_env.props[0].dtype_mask & KEEL_DTYPE_BIT(dt)))
            continue;
        if (!full && dt != KEEL_F32)
            continue;
        if (dt == KEEL_BOOL && reducing(k))
            continue;
        for (int op = 0; op < (reducing(k) ? KEEL_REDUCE_OP_COUNT_ : 1); op++) {
            enum run_result rr = RUN_OK;

            if (!full && op != KEEL_REDUCE_SUM)
                continue;
            if (op == KEEL_REDUCE_AVG && !cf_dtype_is_float(dt))
                continue;
            if (!declared_combo(dt, reducing(k) ? op : -1))
                continue;
            for (int ci = 0; ci < ncounts && rr == RUN_OK; ci++) {
                int roots = k == C_BROADCAST || k == C_REDUCE ? 2 : 1;
                for (int rt = 0; rt < roots && rr == RUN_OK; rt++)
                    rr = run_one(&c, k, dt, op, counts[ci],
                                 rt ? c.n - 1 : 0, false);
            }
            if (rr == RUN_OK && k == C_ALL_REDUCE)
                rr = run_one(&c, k, dt, op, counts[0], 0, true);
            if (rr == RUN_FAILED)
                goto out;
            /* Undeclared and refused: go on with the next combination. */
            if (rr == RUN_UNSUPPORTED)
                declined++;
            else
                ran++;
        }
    }
    if (ran == 0 && declined > 0)
        cf_skip("%s returned NOT_SUPPORTED for every dtype and op tried "
                "(allowed without a declaration; declare what works with "
                "collective.get_caps, ABI 1.2)",
                kind_names[k]);
    else if (ran == 0 && cf_env.coll_declared)
        cf_skip("not declared: collective.get_caps lists no dtype and op "
                "this level tests for %s",
                kind_names[k]);
out:
    coll_fini(&c);
}

static void t_all_reduce(void)
{
    matrix(C_ALL_REDUCE);
}
static void t_broadcast(void)
{
    matrix(C_BROADCAST);
}
static void t_reduce(void)
{
    matrix(C_REDUCE);
}
static void t_all_gather(void)
{
    matrix(C_ALL_GATHER);
}
static void t_reduce_scatter(void)
{
    matrix(C_REDUCE_SCATTER);
}
static void t_all_to_all(void)
{
    matrix(C_ALL_TO_ALL);
}

static void t_unique_id(void)
{
    uint32_t nb = id_bytes();
    uint8_t *a = malloc(nb), *b = malloc(nb);

    if (!CF_CHECK(a && b, "out of host memory") || !have_collectives())
        goto out;
    if (CF_OK(id_new(a), "get_unique_id (%u bytes)", (unsigned)nb) &&
        CF_OK(id_new(b), "get_unique_id (%u bytes)", (unsigned)nb))
        CF_CHECK(memcmp(a, b, nb) != 0,
                 "two get_unique_id calls gave the same id");
    {
        keel_status st = COL->get_unique_id(NULL);
        CF_CHECK(st == KEEL_STATUS_INVALID_ARGUMENT ||
                     (nb > KEEL_COMM_ID_BYTES &&
                      st == KEEL_STATUS_NOT_SUPPORTED),
                 "get_unique_id(NULL) returned %s", keel_status_name(st));
    }
out:
    free(a);
    free(b);
}

static bool one_of(keel_status st, keel_status a, keel_status b)
{
    return st == a || st == b;
}

static void t_comm_init(void)
{
    struct coll c;
    uint8_t *id;
    keel_comm m = NULL;
    int32_t d = cf_env.dev[0], rank = -1, nranks = -1;
    keel_status st;

    if (!have_collectives())
        return;
    if (coll_init(&c)) {
        for (int r = 0; r < c.n; r++)
            if (CF_OK(COL->comm_rank(c.comm[r], &rank, &nranks), "comm_rank"))
                CF_CHECK(rank == r && nranks == c.n,
                         "comm_rank of rank %d says rank %d of %d", r,
                         (int)rank, (int)nranks);
        CF_EXPECT(COL->comm_rank(c.comm[0], NULL, NULL),
                  KEEL_STATUS_INVALID_ARGUMENT, "comm_rank(comm, NULL, NULL)");
    }
    coll_fini(&c);
    id = malloc(id_bytes());
    if (!CF_CHECK(id != NULL, "out of host memory") ||
        !CF_OK(id_new(id), "get_unique_id")) {
        free(id);
        return;
    }
    CF_EXPECT(id_join(d, 2, id, 2, &m), KEEL_STATUS_INVALID_ARGUMENT,
              "comm_init_rank(rank 2 of 2)");
    CF_EXPECT(id_join(d, 0, id, 0, &m), KEEL_STATUS_INVALID_ARGUMENT,
              "comm_init_rank(0 ranks)");
    CF_EXPECT(id_join(d, 1, id, 0, NULL), KEEL_STATUS_INVALID_ARGUMENT,
              "comm_init_rank(comm NULL)");
    CF_EXPECT(id_join(d, 1, NULL, 0, &m), KEEL_STATUS_INVALID_ARGUMENT,
              "comm_init_rank(id NULL)");
    CF_EXPECT(id_join(cf_env.device_count, 1, id, 0, &m),
              KEEL_STATUS_INVALID_DEVICE, "comm_init_rank on device %d",
              (int)cf_env.device_count);
    free(id);
    st = COL->comm_rank(NULL, &rank, &nranks);
    CF_CHECK(one_of(st, KEEL_STATUS_INVALID_HANDLE,
                    KEEL_STATUS_INVALID_ARGUMENT),
             "comm_rank(NULL comm) returned %s", keel_status_name(st));
}

static void t_send_recv_ring(void)
{
    struct coll c;
    enum { COUNT = 1031 };
    float *h = malloc(COUNT * sizeof(float));
    keel_dptr sb[CF_MAX_DEVICES] = {0}, rb[CF_MAX_DEVICES] = {0};

    if (!CF_CHECK(h, "out of host memory") || !have_collectives())
        goto out_free;
    if (!declared_kind(KEEL_COLL_SEND_RECV) ||
        !declared_combo(KEEL_F32, -1)) {
        cf_skip("not declared: collective.get_caps does not list send/recv "
                "with float32");
        goto out_free;
    }
    if (!coll_init(&c))
        goto out;
    if (c.n < 2) {
        cf_skip("one device: no ring");
        goto out;
    }
    for (int r = 0; r < c.n; r++) {
        if (!cf_alloc(cf_env.dev[r], COUNT * 4, &sb[r]) ||
            !cf_alloc(cf_env.dev[r], COUNT * 4, &rb[r]))
            goto out;
        for (int i = 0; i < COUNT; i++)
            h[i] = (float)(r * 10000 + i);
        cf_upload(cf_env.dev[r], sb[r], h, COUNT * 4);
    }
    for (int round = 0; round < 2; round++) {
        if (!CF_OK(COL->group_start(), "group_start"))
            goto out;
        for (int r = 0; r < c.n; r++) {
            int next = (r + 1) % c.n, prev = (r + c.n - 1) % c.n;
            keel_status st;
            char what[64];

            st = COL->send(c.comm[r], c.s[r], sb[r], COUNT, KEEL_F32, next);
            if (st == KEEL_STATUS_OK)
                st = COL->recv(c.comm[r], c.s[r], rb[r], COUNT, KEEL_F32,
                               prev);
            if (st == KEEL_STATUS_NOT_SUPPORTED) {
                /* The ABI allows it; without a declaration it is a skip. */
                snprintf(what, sizeof(what), "send/recv (float32) on rank %d",
                         r);
                COL->group_end();
                for (int q = 0; q < c.n; q++)
                    cf_env.api->stream->stream_synchronize(cf_env.dev[q],
                                                           c.s[q]);
                unsupported(what);
                if (!cf_env.coll_declared)
                    cf_skip("send/recv returned NOT_SUPPORTED (allowed; "
                            "the plugin declares no collective "
                            "capabilities, ABI 1.2 collective.get_caps)");
                goto out;
            }
            CF_OK(st, "send/recv rank %d -> %d, <- %d", r, next, prev);
        }
        CF_OK(COL->group_end(), "group_end after send/recv");
        for (int r = 0; r < c.n; r++) {
            int prev = (r + c.n - 1) % c.n;
            if (!cf_sync(cf_env.dev[r], c.s[r]) ||
                !cf_download(cf_env.dev[r], h, rb[r], COUNT * 4))
                goto out;
            for (int i = 0; i < COUNT; i++)
                if (!CF_CHECK(h[i] == (float)(prev * 10000 + i),
                              "ring round %d: rank %d received %g at %d from "
                              "rank %d, expected %g",
                              round, r, h[i], i, prev,
                              (double)(prev * 10000 + i)))
                    goto out;
        }
    }
out:
    for (int r = 0; r < cf_env.ndev; r++) {
        cf_free(cf_env.dev[r], sb[r]);
        cf_free(cf_env.dev[r], rb[r]);
    }
    coll_fini(&c);
out_free:
    free(h);
}

static void t_group_nesting(void)
{
    struct coll c;

    if (!have_collectives() || !need_all_reduce_f32_sum())
        return;
    if (!coll_init(&c))
        goto out;
    if (CF_OK(COL->group_start(), "outer group_start")) {
        /* run_one brackets its calls; an outer group nests around it only
         * for issuing, so check nesting with a bare bracket pair first. */
        CF_OK(COL->group_start(), "inner group_start");
        CF_OK(COL->group_end(), "inner group_end");
        CF_OK(COL->group_end(), "outer group_end");
    }
    run_one(&c, C_ALL_REDUCE, KEEL_F32, KEEL_REDUCE_SUM, 17, 0, false);
out:
    coll_fini(&c);
}

static void t_errors(void)
{
    struct coll c;
    keel_dptr p = 0;
    keel_status st;
    int32_t d = cf_env.dev[0];

    if (!have_collectives() || !need_all_reduce_f32_sum())
        return;
    if (!coll_init(&c) || !cf_alloc(d, 256, &p))
        goto out;
    /* An undeclared collective may refuse before it looks at the root. */
    st = COL->broadcast(c.comm[0], c.s[0], p, p, 4, KEEL_F32, c.n);
    CF_CHECK(st == KEEL_STATUS_INVALID_ARGUMENT ||
                 (st == KEEL_STATUS_NOT_SUPPORTED &&
                  (!cf_env.coll_declared ||
                   !declared_kind(KEEL_COLL_BROADCAST))),
             "broadcast with root %d of %d returned %s", c.n, c.n,
             keel_status_name(st));
    st = COL->reduce(c.comm[0], c.s[0], p, p, 4, KEEL_F32, KEEL_REDUCE_SUM,
                     -1);
    CF_CHECK(st == KEEL_STATUS_INVALID_ARGUMENT ||
                 (st == KEEL_STATUS_NOT_SUPPORTED &&
                  (!cf_env.coll_declared ||
                   !declared_kind(KEEL_COLL_REDUCE))),
             "reduce with root -1 returned %s", keel_status_name(st));
    st = COL->all_reduce(c.comm[0], c.s[0], p, p, 4, (keel_dtype)99,
                         KEEL_REDUCE_SUM);
    CF_CHECK(one_of(st, KEEL_STATUS_INVALID_ARGUMENT,
                    KEEL_STATUS_NOT_SUPPORTED),
             "all_reduce with dtype 99 returned %s", keel_status_name(st));
    st = COL->all_reduce(c.comm[0], c.s[0], p, p, 4, KEEL_F32,
                         (keel_reduce_op)99);
    CF_CHECK(one_of(st, KEEL_STATUS_INVALID_ARGUMENT,
                    KEEL_STATUS_NOT_SUPPORTED),
             "all_reduce with reduce op 99 returned %s", keel_status_name(st));
    st = COL->all_reduce(NULL, NULL, p, p, 4, KEEL_F32, KEEL_REDUCE_SUM);
    CF_CHECK(one_of(st, KEEL_STATUS_INVALID_HANDLE,
                    KEEL_STATUS_INVALID_ARGUMENT),
             "all_reduce on a NULL communicator returned %s",
             keel_status_name(st));
    cf_free(d, p);
    p = 0;
    /* The communicator still works after the rejected calls. */
    run_one(&c, C_ALL_REDUCE, KEEL_F32, KEEL_REDUCE_SUM, 5, 0, false);
out:
    cf_free(d, p);
    coll_fini(&c);
}

static void t_timeout(void)
{
    uint32_t bound = cf_collective_timeout_ms();
    struct coll c;
    keel_dptr p = 0;
    keel_status st;
    double t0, dt;

    if (!have_collectives() || !need_all_reduce_f32_sum())
        return;
    if (!bound) {
        cf_skip("no bound on collective waits: the plugin declares "
                "timeout_ms 0 or nothing (collective.get_caps) and "
                "timeouts.collective_ms is not set");
        return;
    }
    if (cf_env.ndev < 2) {
        cf_skip("one device: every rank is always present");
        return;
    }
    if (!coll_init(&c) || !cf_alloc(cf_env.dev[0], 64, &p))
        goto out;
    t0 = cf_now();
    st = COL->all_reduce(c.comm[0], c.s[0], p, p, 4, KEEL_F32,
                         KEEL_REDUCE_SUM);
    if (st == KEEL_STATUS_OK)
        st = cf_env.api->stream->stream_synchronize(cf_env.dev[0], c.s[0]);
    dt = cf_now() - t0;
    CF_EXPECT(st, KEEL_STATUS_TIMEOUT,
              "all_reduce issued by rank 0 only (the other ranks never "
              "arrive)");
    CF_CHECK(dt <= 3.0 * bound / 1e3 + 2.0,
             "the lone all_reduce took %.1f s to fail; the bound is %u ms",
             dt, bound);
out:
    cf_free(cf_env.dev[0], p);
    coll_fini(&c);
}

struct rank_thread {
    int r, n;
    const uint8_t *id; /* id_bytes() bytes, shared, read only */
    keel_status st[3];
    float got;
};

static void *rank_main(void *arg)
{
    struct rank_thread *t = arg;
    int32_t d = cf_env.dev[t->r];
    keel_comm m = NULL;
    keel_dptr p = 0;
    float v = (float)(t->r + 1);

    t->st[0] = id_join(d, t->n, t->id, t->r, &m);
    if (t->st[0] != KEEL_STATUS_OK)
        return NULL;
    t->st[1] = MEM->alloc(d, 64, &p);
    if (t->st[1] == KEEL_STATUS_OK) {
        MEM->copy_h2d(d, p, &v, 4);
        t->st[1] = COL->all_reduce(m, NULL, p, p, 1, KEEL_F32,
                                   KEEL_REDUCE_SUM);
        if (t->st[1] == KEEL_STATUS_OK)
            t->st[1] = cf_env.api->stream->stream_synchronize(d, NULL);
        MEM->copy_d2h(d, &t->got, p, 4);
        MEM->free(d, p);
    }
    t->st[2] = COL->comm_destroy(m);
    return NULL;
}

static void t_threads_per_rank(void)
{
    struct rank_thread t[CF_MAX_DEVICES];
    pthread_t th[CF_MAX_DEVICES];
    uint8_t *id = NULL;
    int n = cf_env.ndev, started = 0;

    if (!have_collectives() || !need_all_reduce_f32_sum() ||
        !CF_CHECK((id = malloc(id_bytes())) != NULL, "out of host memory") ||
        !CF_OK(id_new(id), "get_unique_id")) {
        free(id);
        return;
    }
    for (int r = 0; r < n; r++) {
        memset(&t[r], 0, sizeof(t[r]));
        t[r].r = r;
        t[r].n = n;
        t[r].id = id;
        if (pthread_create(&th[r], NULL, rank_main, &t[r]) != 0)
            break;
        started++;
    }
    for (int r = 0; r < started; r++)
        pthread_join(th[r], NULL);
    free(id);
    if (!CF_CHECK(started == n, "could not start %d threads", n))
        return;
    for (int r = 0; r < n; r++) {
        CF_OK(t[r].st[0], "comm_init_rank in rank %d's own thread", r);
        CF_OK(t[r].st[1], "all_reduce in rank %d's own thread", r);
        CF_OK(t[r].st[2], "comm_destroy in rank %d's own thread", r);
        CF_CHECK(t[r].got == (float)(n * (n + 1) / 2),
                 "thread-per-rank all_reduce: rank %d got %g, expected %d", r,
                 t[r].got, n * (n + 1) / 2);
    }
}

/*
 * all_to_allv (ABI 1.3): rank i sends (i * 3 + j * 5) % 7 elements to rank
 * j (some blocks empty). Send blocks lie in peer order with a gap of 2
 * elements before each; receive blocks in reverse peer order with gaps of
 * 3, so displacements matter. Gaps must keep their sentinel.
 */
#define V_COUNT(i, j) ((uint64_t)(((i) * 3 + (j) * 5) % 7))
#define V_VALUE(i, j, k) ((float)((i) * 10000 + (j) * 100 + (k)))

static void t_all_to_allv(void)
{
    struct coll c;
    uint64_t sc[CF_MAX_DEVICES][CF_MAX_DEVICES], sd[CF_MAX_DEVICES][CF_MAX_DEVICES];
    uint64_t rc[CF_MAX_DEVICES][CF_MAX_DEVICES], rd[CF_MAX_DEVICES][CF_MAX_DEVICES];
    uint64_t slen[CF_MAX_DEVICES], rlen[CF_MAX_DEVICES];
    keel_dptr sb[CF_MAX_DEVICES] = {0}, rb[CF_MAX_DEVICES] = {0};
    float *h = NULL;
    int n;

    if (!have_collectives())
        return;
    if (!COL->all_to_allv || !declared_kind(KEEL_COLL_ALL_TO_ALLV) ||
        !declared_combo(KEEL_F32, -1)) {
        cf_skip("not provided: the plugin has no collective.all_to_allv "
                "(ABI 1.3) declared for float32; the core composes it "
                "from send/recv");
        return;
    }
    if (!coll_init(&c))
        goto out;
    n = c.n;
    for (int i = 0; i < n; i++) {
        uint64_t at = 0;
        for (int j = 0; j < n; j++) {
            sc[i][j] = V_COUNT(i, j);
            at += 2;
            sd[i][j] = at;
            at += sc[i][j];
        }
        slen[i] = at + 1;
        at = 0;
        for (int j = n - 1; j >= 0; j--) {
            rc[i][j] = V_COUNT(j, i);
            at += 3;
            rd[i][j] = at;
            at += rc[i][j];
        }
        rlen[i] = at + 3;
    }
    if (!CF_CHECK((h = malloc(4096 * sizeof(float))) != NULL,
                  "out of host memory"))
        goto out;
    for (int i = 0; i < n; i++) {
        if (!cf_alloc(cf_env.dev[i], slen[i] * 4, &sb[i]) ||
            !cf_alloc(cf_env.dev[i], rlen[i] * 4, &rb[i]))
            goto out;
        for (uint64_t k = 0; k < slen[i]; k++)
            h[k] = -1.0f;
        for (int j = 0; j < n; j++)
            for (uint64_t k = 0; k < sc[i][j]; k++)
                h[sd[i][j] + k] = V_VALUE(i, j, (int)k);
        if (!cf_upload(cf_env.dev[i], sb[i], h, slen[i] * 4))
            goto out;
        for (uint64_t k = 0; k < rlen[i]; k++)
            h[k] = -7.0f;
        if (!cf_upload(cf_env.dev[i], rb[i], h, rlen[i] * 4))
            goto out;
    }
    if (!CF_OK(COL->group_start(), "group_start"))
        goto out;
    for (int i = 0; i < n; i++) {
        keel_status st = COL->all_to_allv(c.comm[i], c.s[i], sb[i], sc[i],
                                          sd[i], rb[i], rc[i], rd[i],
                                          KEEL_F32);
        if (st == KEEL_STATUS_NOT_SUPPORTED)
            unsupported("all_to_allv (float32)");
        else
            CF_OK(st, "all_to_allv on rank %d", i);
    }
    CF_OK(COL->group_end(), "group_end after all_to_allv");
    for (int i = 0; i < n; i++) {
        uint64_t k = 0;
        if (!cf_sync(cf_env.dev[i], c.s[i]) ||
            !cf_download(cf_env.dev[i], h, rb[i], rlen[i] * 4))
            goto out;
        for (int j = n - 1; j >= 0; j--) {
            for (; k < rd[i][j]; k++)
                if (!CF_CHECK(h[k] == -7.0f,
                              "all_to_allv: rank %d's gap element %llu was "
                              "written (%g)",
                              i, (unsigned long long)k, h[k]))
                    goto out;
            for (uint64_t e = 0; e < rc[i][j]; e++, k++)
                if (!CF_CHECK(h[k] == V_VALUE(j, i, (int)e),
                              "all_to_allv: rank %d, element %llu of the "
                              "block from rank %d is %g, expected %g",
                              i, (unsigned long long)e, j, h[k],
                              (double)V_VALUE(j, i, (int)e)))
                    goto out;
        }
        for (; k < rlen[i]; k++)
            if (!CF_CHECK(h[k] == -7.0f,
                          "all_to_allv: rank %d's tail element %llu was "
                          "written (%g)",
                          i, (unsigned long long)k, h[k]))
                goto out;
    }
out:
    for (int r = 0; r < cf_env.ndev; r++) {
        cf_free(cf_env.dev[r], sb[r]);
        cf_free(cf_env.dev[r], rb[r]);
    }
    coll_fini(&c);
    free(h);
}

/*
 * Ids of the plugin's size (ABI 1.3). Stated above 128 bytes: the fixed
 * calls refuse, the _bytes calls refuse another size, and a whole run of
 * the suite goes through the _bytes calls (coll_init). Provided at 128:
 * the _bytes calls agree with the fixed ones.
 */
static void t_id_bytes(void)
{
    uint32_t nb = id_bytes();
    keel_comm_id id;
    keel_comm m = NULL;
    uint8_t *buf;
    struct coll c;

    if (!have_collectives())
        return;
    if (nb == KEEL_COMM_ID_BYTES && !COL->get_unique_id_bytes) {
        cf_skip("not provided: 128-byte ids and no get_unique_id_bytes "
                "(ABI 1.3)");
        return;
    }
    if (!CF_CHECK(COL->get_unique_id_bytes && COL->comm_init_rank_bytes,
                  "the plugin has only one of get_unique_id_bytes and "
                  "comm_init_rank_bytes"))
        return;
    buf = malloc((size_t)nb + 1);
    if (!CF_CHECK(buf != NULL, "out of host memory"))
        return;
    CF_EXPECT(COL->get_unique_id_bytes(buf, nb + 1),
              KEEL_STATUS_INVALID_ARGUMENT,
              "get_unique_id_bytes with %u bytes (the plugin's are %u)",
              (unsigned)nb + 1, (unsigned)nb);
    CF_EXPECT(COL->get_unique_id_bytes(NULL, nb),
              KEEL_STATUS_INVALID_ARGUMENT, "get_unique_id_bytes(NULL)");
    if (CF_OK(COL->get_unique_id_bytes(buf, nb), "get_unique_id_bytes"))
        CF_EXPECT(COL->comm_init_rank_bytes(cf_env.dev[0], 1, buf, nb - 1, 0,
                                            &m),
                  KEEL_STATUS_INVALID_ARGUMENT,
                  "comm_init_rank_bytes with a %u-byte id (the plugin's are "
                  "%u)",
                  (unsigned)nb - 1, (unsigned)nb);
    if (nb > KEEL_COMM_ID_BYTES) {
        CF_EXPECT(COL->get_unique_id(&id), KEEL_STATUS_NOT_SUPPORTED,
                  "get_unique_id with %u-byte ids stated", (unsigned)nb);
    }
    free(buf);
    /* a communicator made through whichever calls coll_init picks */
    if (need_all_reduce_f32_sum() && coll_init(&c))
        run_one(&c, C_ALL_REDUCE, KEEL_F32, KEEL_REDUCE_SUM, 5, 0, false);
    else
        memset(&c, 0, sizeof(c));
    coll_fini(&c);
}

/* The declaration itself (ABI 1.2): answers for every tested device,
 * errors for bad arguments, and claims nothing the devices lack. */
static void t_caps(void)
{
    keel_collective_caps c;
    char why[160];
    int r;

    if (!have_collectives())
        return;
    if (!COL->get_caps) {
        cf_skip("not declared: the plugin has no collective.get_caps (ABI "
                "1.2); every collective, dtype and reduce op is tried and "
                "NOT_SUPPORTED is accepted");
        return;
    }
    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];

        r = cf_coll_caps_query(COL, d, &c, why, sizeof(why));
        if (!CF_CHECK(r == 1, "%s", why))
            continue;
        CF_CHECK(c.struct_size >= 4 && c.struct_size <= sizeof(c),
                 "get_caps(%d) wrote back struct_size %u (asked for %zu)",
                 (int)d, c.struct_size, sizeof(c));
        CF_CHECK(c.collectives != 0,
                 "device %d has KEEL_FEATURE_COLLECTIVES and a collective "
                 "group but get_caps declares no collective",
                 (int)d);
        CF_CHECK((c.dtype_mask & ~cf_env.props[i].dtype_mask) == 0,
                 "get_caps(%d) declares dtypes (mask %#x) the device's "
                 "dtype_mask %#x lacks",
                 (int)d, c.dtype_mask, cf_env.props[i].dtype_mask);
        CF_CHECK((c.reduce_ops >> KEEL_REDUCE_OP_COUNT_) == 0,
                 "get_caps(%d) declares unknown reduce ops (mask %#x)",
                 (int)d, c.reduce_ops);
        CF_CHECK((c.collectives & ~0xffu) == 0,
                 "get_caps(%d) declares unknown collectives (mask %#x)",
                 (int)d, c.collectives);
        CF_CHECK(c.struct_size < offsetof(keel_collective_caps, id_bytes) +
                                         sizeof(c.id_bytes) ||
                     c.id_bytes == 0 ||
                     (c.id_bytes >= KEEL_COMM_ID_BYTES &&
                      c.id_bytes <= KEEL_COMM_ID_MAX_BYTES),
                 "get_caps(%d) states %u-byte ids; the ABI allows %d to %d",
                 (int)d, (unsigned)c.id_bytes, KEEL_COMM_ID_BYTES,
                 KEEL_COMM_ID_MAX_BYTES);
        CF_CHECK(!(c.collectives & KEEL_COLL_ALL_TO_ALLV) || COL->all_to_allv,
                 "get_caps(%d) declares all_to_allv but the table has no "
                 "all_to_allv",
                 (int)d);
    }
    c.struct_size = sizeof(c);
    CF_EXPECT(COL->get_caps(cf_env.device_count, &c),
              KEEL_STATUS_INVALID_DEVICE, "collective.get_caps(%d)",
              (int)cf_env.device_count);
    CF_EXPECT(COL->get_caps(cf_env.dev[0], NULL),
              KEEL_STATUS_INVALID_ARGUMENT, "collective.get_caps(caps NULL)");
}

const struct cf_test_spec cf_collective_tests[] = {
    {"collectives", "caps", CF_LEVEL_SMOKE, t_caps,
     "the ABI 1.2 declaration of collectives, dtypes, reduce ops and "
     "timeout; the other collective tests test exactly what it declares"},
    {"collectives", "unique_id", CF_LEVEL_SMOKE, t_unique_id,
     "ids differ; NULL rejected"},
    {"collectives", "comm_init", CF_LEVEL_SMOKE, t_comm_init,
     "communicators on every device; comm_rank; bad arguments"},
    {"collectives", "all_reduce", CF_LEVEL_SMOKE, t_all_reduce,
     "every dtype x reduce op x count (0, 1, non-multiples), in place"},
    {"collectives", "broadcast", CF_LEVEL_SMOKE, t_broadcast,
     "every dtype x count, first and last root"},
    {"collectives", "reduce", CF_LEVEL_SMOKE, t_reduce,
     "only the root's buffer changes"},
    {"collectives", "all_gather", CF_LEVEL_SMOKE, t_all_gather,
     "blocks land in rank order"},
    {"collectives", "reduce_scatter", CF_LEVEL_SMOKE, t_reduce_scatter,
     "rank r receives the reduction of block r"},
    {"collectives", "all_to_all", CF_LEVEL_SMOKE, t_all_to_all,
     "block j of rank i lands in block i of rank j"},
    {"collectives", "send_recv_ring", CF_LEVEL_SMOKE, t_send_recv_ring,
     "every rank sends to the next and receives from the previous"},
    {"collectives", "all_to_allv", CF_LEVEL_SMOKE, t_all_to_allv,
     "per-peer counts and displacements (ABI 1.3); gaps stay untouched"},
    {"collectives", "id_bytes", CF_LEVEL_SMOKE, t_id_bytes,
     "ids of the size get_caps states (ABI 1.3); wrong sizes refused"},
    {"collectives", "group_nesting", CF_LEVEL_SMOKE, t_group_nesting,
     "nested group_start/group_end"},
    {"collectives", "errors", CF_LEVEL_SMOKE, t_errors,
     "bad roots, dtypes, ops and communicators are rejected"},
    {"collectives", "threads_per_rank", CF_LEVEL_FULL, t_threads_per_rank,
     "one host thread per rank, blocking calls, no groups"},
    {"collectives", "timeout", CF_LEVEL_FULL, t_timeout,
     "a rank that never arrives gives TIMEOUT within the bound"},
    {NULL, NULL, 0, NULL, NULL},
};
