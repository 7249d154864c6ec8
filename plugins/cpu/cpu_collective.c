/*
 * keel CPU reference plugin — in-process collectives across the virtual
 * devices.
 *
 * Communicators. comm_init_rank looks the 128-byte id up among the cliques
 * still joining; the first rank creates the clique. A clique is complete
 * when all nranks have joined; an ungrouped comm_init_rank blocks until
 * then, bounded by KEEL_CPU_COLL_TIMEOUT_MS (default 60000) -> TIMEOUT.
 * Inside group_start/group_end the wait happens at the outermost
 * group_end.
 *
 * Collectives are two-phase. Every call gets, at issue time, a sequence
 * number from its communicator (send/recv: a per-peer counter per
 * direction). "Arrive" deposits this rank's buffers (host addresses) into
 * the clique's round for that sequence number; it never blocks. The last
 * party to arrive checks that the parties agree (kind, count, dtype, op,
 * root), runs the whole operation for every rank — all virtual devices are
 * host memory — through a staging buffer (so in-place and aliased buffers
 * are safe), and marks the round done. "Wait" blocks until the round is
 * done or the deadline passes; a timed-out round is marked failed, so late
 * parties fail at once instead of writing into buffers nobody waits for.
 * send/recv use a two-party round keyed by (src, dst, sequence).
 *
 * The computation runs under the one collective lock, so rounds complete
 * in the order their last party arrived; this keeps back-to-back
 * collectives on the same buffers ordered.
 *
 * Who arrives and waits:
 *   inline mode, ungrouped   the calling thread (arrive + wait)
 *   inline mode, grouped     group_end: arrive all deferred ops, wait all
 *   async mode               a work item on the stream; its worker does
 *                            arrive + wait. A group becomes one item per
 *                            stream at group_end (arrive all, wait all).
 * As with NCCL, one thread driving several ranks in inline mode without a
 * group blocks in the first call until the timeout: that is a usage error.
 * In async mode it works, because each stream has its own worker.
 *
 * count == 0 is validated and then completes at once without a rendezvous
 * (all ranks are expected to pass the same count).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "cpu_coll_mpi.h"
#include "cpu_internal.h"

static const char *const cpu_coll_names[] = {
	"all_reduce", "broadcast", "reduce", "all_gather",
	"reduce_scatter", "all_to_all", "send", "recv", "all_to_allv",
};

struct cpu_round;
struct cpu_clique;

struct cpu_comm {
	struct cpu_clique *clique;
	int32_t rank;
	int32_t nranks;
	int32_t device;
	uint64_t seq;       /* collectives issued                     */
	uint64_t *send_seq; /* sends issued, per peer                 */
	uint64_t *recv_seq; /* receives issued, per peer              */
	int pending;        /* ops issued and not finished            */
	bool attached;      /* holds its rank slot in the clique      */
	bool broken;        /* its join failed in group_end           */
	struct cpu_mpi_comm *mpi; /* ranks in other processes (MPI)  */
};

struct cpu_clique {
	struct cpu_clique *next; /* in cpu_joining while !complete */
	keel_comm_id id;
	int32_t nranks;
	int32_t joined;
	int32_t refs;
	bool complete;
	struct cpu_comm **ranks;
	struct cpu_round *rounds;
};

struct cpu_coll_op {
	struct cpu_comm *comm;
	enum cpu_coll_kind kind;
	void *send; /* host addresses; NULL where unused */
	void *recv;
	uint64_t count;
	keel_dtype dtype;
	keel_reduce_op op;
	int32_t root;
	int32_t peer;
	uint64_t seq;
	struct cpu_round *round;
	int party;
	/* all_to_allv: 4 x nranks element counts (send counts, send
	 * displacements, recv counts, recv displacements), owned by the op
	 * (freed where the op ends: its batch, or cpu_coll_op_drop); `send`
	 * and `recv` then point at element soff / roff of the buffers. */
	uint64_t *v;
	uint64_t soff, roff;
};

struct cpu_coll_batch {
	size_t n;
	struct cpu_coll_op ops[];
};

struct cpu_round {
	struct cpu_round *next;
	bool p2p;
	uint64_t seq;
	int32_t src; /* p2p only */
	int32_t dst;
	int nparties;
	int arrived;
	int departed;
	bool done;
	bool failed;
	keel_status status;
	char msg[CPU_MSG_MAX];
	struct cpu_coll_op party[]; /* comm == NULL until that party arrives */
};

/* An op deferred by group_start, with the stream it goes to. */
struct cpu_deferred {
	struct cpu_coll_op op;
	struct cpu_stream *stream;
};

struct cpu_group {
	int depth;
	struct cpu_deferred *ops;
	size_t nops;
	size_t ops_cap;
	struct cpu_comm **inits;
	size_t ninits;
	size_t inits_cap;
};

static _Thread_local struct cpu_group cpu_tls_group;

static pthread_mutex_t cpu_coll_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cpu_coll_cond;
static pthread_once_t cpu_coll_once = PTHREAD_ONCE_INIT;
static struct cpu_clique *cpu_joining;
static atomic_uint_fast64_t cpu_id_counter;

static void cpu_coll_init_once(void)
{
	pthread_condattr_t attr;

	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&cpu_coll_cond, &attr);
	pthread_condattr_destroy(&attr);
}

static void cpu_coll_lock_acquire(void)
{
	pthread_once(&cpu_coll_once, cpu_coll_init_once);
	pthread_mutex_lock(&cpu_coll_lock);
}

static void cpu_coll_lock_release(void)
{
	pthread_mutex_unlock(&cpu_coll_lock);
}

/* Wait on the collective condition; returns true when the deadline passed. */
static bool cpu_coll_timedwait(const struct timespec *deadline)
{
	return pthread_cond_timedwait(&cpu_coll_cond, &cpu_coll_lock,
				      deadline) == ETIMEDOUT;
}

/* ------------------------------------------------------------------------ */
/* Cliques and communicators (callers hold cpu_coll_lock)                   */
/* ------------------------------------------------------------------------ */

static void cpu_clique_unlist(struct cpu_clique *q)
{
	struct cpu_clique **pp;

	for (pp = &cpu_joining; *pp; pp = &(*pp)->next) {
		if (*pp == q) {
			*pp = q->next;
			break;
		}
	}
	q->next = NULL;
}

static void cpu_clique_free(struct cpu_clique *q)
{
	while (q->rounds) {
		struct cpu_round *r = q->rounds;

		q->rounds = r->next;
		free(r);
	}
	free(q->ranks);
	free(q);
}

static struct cpu_clique *cpu_clique_find(const keel_comm_id *id)
{
	struct cpu_clique *q;

	for (q = cpu_joining; q; q = q->next)
		if (!memcmp(q->id.bytes, id->bytes, sizeof(id->bytes)))
			return q;
	return NULL;
}

static struct cpu_clique *cpu_clique_new(const keel_comm_id *id,
					 int32_t nranks)
{
	struct cpu_clique *q = calloc(1, sizeof(*q));

	if (!q)
		return NULL;
	q->ranks = calloc((size_t)nranks, sizeof(*q->ranks));
	if (!q->ranks) {
		free(q);
		return NULL;
	}
	q->id = *id;
	q->nranks = nranks;
	q->next = cpu_joining;
	cpu_joining = q;
	return q;
}

static void cpu_comm_attach(struct cpu_comm *c, struct cpu_clique *q)
{
	c->clique = q;
	c->attached = true;
	q->ranks[c->rank] = c;
	q->joined++;
	q->refs++;
	if (q->joined == q->nranks) {
		q->complete = true;
		cpu_clique_unlist(q);
		pthread_cond_broadcast(&cpu_coll_cond);
	}
}

static void cpu_comm_detach(struct cpu_comm *c)
{
	struct cpu_clique *q = c->clique;

	if (!c->attached)
		return;
	c->attached = false;
	q->ranks[c->rank] = NULL;
	if (!q->complete)
		q->joined--;
	if (--q->refs == 0) {
		if (!q->complete)
			cpu_clique_unlist(q);
		cpu_clique_free(q);
	}
	c->clique = NULL;
}

static void cpu_comm_free(struct cpu_comm *c)
{
	cpu_mpi_comm_free(c->mpi);
	free(c->send_seq);
	free(c->recv_seq);
	free(c);
}

static keel_status cpu_comm_join_wait(struct cpu_comm *c,
				      const struct timespec *deadline,
				      char *msg, size_t n)
{
	struct cpu_clique *q = c->clique;

	while (!q->complete) {
		if (cpu_coll_timedwait(deadline) && !q->complete) {
			snprintf(msg, n,
				 "comm_init_rank: rank %d of %d on cpu:%d timed out after %u ms with %d of %d ranks joined (KEEL_CPU_COLL_TIMEOUT_MS)",
				 (int)c->rank, (int)c->nranks, (int)c->device,
				 cpu_g.cfg.coll_timeout_ms, (int)q->joined,
				 (int)q->nranks);
			return KEEL_STATUS_TIMEOUT;
		}
	}
	return KEEL_STATUS_OK;
}

/* Resolve a comm handle. */
static keel_status cpu_comm_get(keel_comm handle, const char *call,
				struct cpu_comm **out)
{
	if (!cpu_g.initialized)
		return cpu_err(KEEL_STATUS_NOT_INITIALIZED,
			       "%s: the cpu plugin is not initialised", call);
	if (!handle)
		return cpu_err(KEEL_STATUS_INVALID_HANDLE, "%s: comm is NULL",
			       call);
	if (!cpu_handle_find(handle, CPU_HANDLE_COMM, NULL))
		return cpu_err(KEEL_STATUS_INVALID_HANDLE,
			       "%s: %p is not a live communicator of the cpu plugin",
			       call, (void *)handle);
	*out = (struct cpu_comm *)handle;
	return KEEL_STATUS_OK;
}

/* ------------------------------------------------------------------------ */
/* Rounds (callers hold cpu_coll_lock)                                      */
/* ------------------------------------------------------------------------ */

static struct cpu_round *cpu_round_get(struct cpu_clique *q, bool p2p,
				       uint64_t seq, int32_t src, int32_t dst,
				       int nparties)
{
	struct cpu_round *r;

	for (r = q->rounds; r; r = r->next)
		if (r->p2p == p2p && r->seq == seq && r->src == src &&
		    r->dst == dst)
			return r;
	r = calloc(1, sizeof(*r) + (size_t)nparties * sizeof(r->party[0]));
	if (!r)
		return NULL;
	r->p2p = p2p;
	r->seq = seq;
	r->src = src;
	r->dst = dst;
	r->nparties = nparties;
	r->next = q->rounds;
	q->rounds = r;
	return r;
}

static void cpu_round_unlink(struct cpu_clique *q, struct cpu_round *r)
{
	struct cpu_round **pp;

	for (pp = &q->rounds; *pp; pp = &(*pp)->next) {
		if (*pp == r) {
			*pp = r->next;
			return;
		}
	}
}

static bool cpu_coll_is_reduction(enum cpu_coll_kind k)
{
	return k == CPU_COLL_ALL_REDUCE || k == CPU_COLL_REDUCE ||
	       k == CPU_COLL_REDUCE_SCATTER;
}

static bool cpu_coll_is_rooted(enum cpu_coll_kind k)
{
	return k == CPU_COLL_BROADCAST || k == CPU_COLL_REDUCE;
}

/* all_to_allv: every party is one, of one dtype, and rank i's send count
 * for j is rank j's recv count for i. */
static keel_status cpu_round_check_v(struct cpu_round *r)
{
	int n = r->nparties;

	for (int i = 0; i < n; i++) {
		const struct cpu_coll_op *a = &r->party[i];

		if (a->kind != CPU_COLL_ALL_TO_ALLV ||
		    a->dtype != r->party[0].dtype) {
			snprintf(r->msg, sizeof(r->msg),
				 "all_to_allv: rank %d called %s(%s) where rank 0 called all_to_allv(%s), collective #%" PRIu64,
				 i, cpu_coll_names[a->kind],
				 cpu_dtype_name(a->dtype),
				 cpu_dtype_name(r->party[0].dtype), r->seq);
			return KEEL_STATUS_INVALID_ARGUMENT;
		}
	}
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			uint64_t sc = r->party[i].v[j];
			uint64_t rc = r->party[j].v[2 * (size_t)n + (size_t)i];

			if (sc == rc)
				continue;
			snprintf(r->msg, sizeof(r->msg),
				 "all_to_allv: rank %d sends %" PRIu64
				 " elements to rank %d, which expects %" PRIu64
				 " from it (collective #%" PRIu64 ")",
				 i, sc, j, rc, r->seq);
			return KEEL_STATUS_INVALID_ARGUMENT;
		}
	return KEEL_STATUS_OK;
}

/* all_to_allv, staged: every block is read before any is written. */
static keel_status cpu_round_exec_v(struct cpu_round *r)
{
	size_t n = (size_t)r->nparties;
	size_t es = keel_dtype_size(r->party[0].dtype), total = 0, at = 0;
	uint8_t *tmp;

	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < n; j++)
			total += (size_t)r->party[i].v[j] * es;
	tmp = malloc(total ? total : 1);
	if (!tmp) {
		snprintf(r->msg, sizeof(r->msg),
			 "all_to_allv: out of host memory for a %zu-byte staging buffer",
			 total);
		return KEEL_STATUS_OUT_OF_MEMORY;
	}
	for (size_t i = 0; i < n; i++) {
		const struct cpu_coll_op *a = &r->party[i];

		for (size_t j = 0; j < n; j++) {
			size_t b = (size_t)a->v[j] * es;

			if (b)
				memcpy(tmp + at, (const uint8_t *)a->send +
					       (a->v[n + j] - a->soff) * es, b);
			at += b;
		}
	}
	at = 0;
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < n; j++) {
			const struct cpu_coll_op *d = &r->party[j];
			size_t b = (size_t)r->party[i].v[j] * es;

			if (b)
				memcpy((uint8_t *)d->recv +
					       (d->v[3 * n + i] - d->roff) * es,
				       tmp + at, b);
			at += b;
		}
	free(tmp);
	return KEEL_STATUS_OK;
}

/* Check that every party of a collective round agrees with party 0. */
static keel_status cpu_round_check(struct cpu_round *r)
{
	const struct cpu_coll_op *a = &r->party[0];
	const char *name = cpu_coll_names[a->kind];
	int i;

	if (r->p2p) {
		const struct cpu_coll_op *s = &r->party[0], *d = &r->party[1];
		uint64_t sb = s->count * keel_dtype_size(s->dtype);
		uint64_t db = d->count * keel_dtype_size(d->dtype);

		if (s->count == d->count && s->dtype == d->dtype)
			return KEEL_STATUS_OK;
		snprintf(r->msg, sizeof(r->msg),
			 "send/recv: rank %d sends %" PRIu64 " x %s (%" PRIu64
			 " bytes) to rank %d, which receives %" PRIu64
			 " x %s (%" PRIu64 " bytes)",
			 (int)r->src, s->count, cpu_dtype_name(s->dtype), sb,
			 (int)r->dst, d->count, cpu_dtype_name(d->dtype), db);
		return KEEL_STATUS_INVALID_ARGUMENT;
	}
	if (a->kind == CPU_COLL_ALL_TO_ALLV)
		return cpu_round_check_v(r);
	for (i = 1; i < r->nparties; i++) {
		const struct cpu_coll_op *b = &r->party[i];
		const char *what = NULL;

		if (b->kind != a->kind)
			what = "operation";
		else if (b->count != a->count)
			what = "count";
		else if (b->dtype != a->dtype)
			what = "dtype";
		else if (cpu_coll_is_reduction(a->kind) && b->op != a->op)
			what = "reduce op";
		else if (cpu_coll_is_rooted(a->kind) && b->root != a->root)
			what = "root";
		if (!what)
			continue;
		snprintf(r->msg, sizeof(r->msg),
			 "%s: ranks disagree on the %s of collective #%" PRIu64
			 ": rank 0 called %s(count %" PRIu64
			 ", %s, op %s, root %d), rank %d called %s(count %" PRIu64
			 ", %s, op %s, root %d)",
			 name, what, r->seq, name, a->count,
			 cpu_dtype_name(a->dtype), cpu_reduce_op_name(a->op),
			 (int)a->root, i, cpu_coll_names[b->kind], b->count,
			 cpu_dtype_name(b->dtype), cpu_reduce_op_name(b->op),
			 (int)b->root);
		return KEEL_STATUS_INVALID_ARGUMENT;
	}
	return KEEL_STATUS_OK;
}

static void cpu_exec_reduce_to(struct cpu_round *r, const void **srcs,
			       size_t offset, void *dst)
{
	const struct cpu_coll_op *a = &r->party[0];
	int i;

	for (i = 0; i < r->nparties; i++)
		srcs[i] = (const uint8_t *)r->party[i].send + offset;
	cpu_reduce(a->dtype, a->op, r->nparties, srcs, dst, a->count);
}

/* Staging bytes a round needs (0: it copies directly). */
static size_t cpu_round_tmp_size(const struct cpu_round *r, size_t bytes)
{
	size_t n = (size_t)r->nparties;

	switch (r->party[0].kind) {
	case CPU_COLL_ALL_REDUCE:
	case CPU_COLL_REDUCE:
		return bytes;
	case CPU_COLL_ALL_GATHER:
	case CPU_COLL_REDUCE_SCATTER:
		return n * bytes;
	case CPU_COLL_ALL_TO_ALL:
		return n * n * bytes;
	default:
		return 0;
	}
}

/* Copies that need no staging: send/recv and broadcast. */
static void cpu_exec_direct(struct cpu_round *r, size_t bytes)
{
	const struct cpu_coll_op *a = &r->party[0];
	const void *src;
	size_t i;

	if (a->kind != CPU_COLL_BROADCAST) {
		memmove(r->party[1].recv, r->party[0].send, bytes);
		return;
	}
	src = r->party[a->root].send;
	for (i = 0; i < (size_t)r->nparties; i++)
		if ((int32_t)i != a->root)
			memmove(r->party[i].recv, src, bytes);
	memmove(r->party[a->root].recv, src, bytes);
}

/*
 * Everything else goes through tmp: all results are computed from the
 * send buffers before any recv buffer is written, so in-place and aliased
 * buffers are safe.
 */
static void cpu_exec_staged(struct cpu_round *r, size_t bytes, uint8_t *tmp,
			    const void **srcs)
{
	const struct cpu_coll_op *a = &r->party[0];
	size_t i, j, n = (size_t)r->nparties;

	switch (a->kind) {
	case CPU_COLL_ALL_REDUCE:
		cpu_exec_reduce_to(r, srcs, 0, tmp);
		for (i = 0; i < n; i++)
			memcpy(r->party[i].recv, tmp, bytes);
		break;
	case CPU_COLL_REDUCE:
		cpu_exec_reduce_to(r, srcs, 0, tmp);
		memcpy(r->party[a->root].recv, tmp, bytes);
		break;
	case CPU_COLL_ALL_GATHER:
		for (i = 0; i < n; i++)
			memcpy(tmp + i * bytes, r->party[i].send, bytes);
		for (i = 0; i < n; i++)
			memcpy(r->party[i].recv, tmp, n * bytes);
		break;
	case CPU_COLL_REDUCE_SCATTER:
		for (i = 0; i < n; i++)
			cpu_exec_reduce_to(r, srcs, i * bytes, tmp + i * bytes);
		for (i = 0; i < n; i++)
			memcpy(r->party[i].recv, tmp + i * bytes, bytes);
		break;
	case CPU_COLL_ALL_TO_ALL:
		/* block j of rank i's send -> block i of rank j's recv */
		for (i = 0; i < n; i++)
			for (j = 0; j < n; j++)
				memcpy(tmp + (j * n + i) * bytes,
				       (const uint8_t *)r->party[i].send +
					       j * bytes,
				       bytes);
		for (j = 0; j < n; j++)
			memcpy(r->party[j].recv, tmp + j * n * bytes,
			       n * bytes);
		break;
	default:
		break;
	}
}

/* Run a complete, consistent round. All buffers are host addresses. */
static keel_status cpu_round_exec(struct cpu_round *r)
{
	const struct cpu_coll_op *a = &r->party[0];
	size_t bytes = (size_t)a->count * keel_dtype_size(a->dtype);
	size_t tmp_size = cpu_round_tmp_size(r, bytes);
	const void **srcs;
	uint8_t *tmp;

	if (a->kind == CPU_COLL_ALL_TO_ALLV)
		return cpu_round_exec_v(r);
	if (!tmp_size) {
		cpu_exec_direct(r, bytes);
		return KEEL_STATUS_OK;
	}
	tmp = malloc(tmp_size);
	srcs = malloc((size_t)r->nparties * sizeof(*srcs));
	if (!tmp || !srcs) {
		free(tmp);
		free(srcs);
		snprintf(r->msg, sizeof(r->msg),
			 "%s: out of host memory for a %zu-byte staging buffer",
			 cpu_coll_names[a->kind], tmp_size);
		return KEEL_STATUS_OUT_OF_MEMORY;
	}
	cpu_exec_staged(r, bytes, tmp, srcs);
	free(srcs);
	free(tmp);
	return KEEL_STATUS_OK;
}

static void cpu_round_complete(struct cpu_round *r)
{
	r->status = cpu_round_check(r);
	if (!r->status)
		r->status = cpu_round_exec(r);
	r->done = true;
	pthread_cond_broadcast(&cpu_coll_cond);
}

/* Deposit one op; the last party runs the round. Never blocks. */
static keel_status cpu_round_arrive(struct cpu_coll_op *op, char *msg,
				    size_t n)
{
	struct cpu_comm *c = op->comm;
	bool p2p = op->kind == CPU_COLL_SEND || op->kind == CPU_COLL_RECV;
	int32_t src = 0, dst = 0;
	struct cpu_round *r;

	op->round = NULL;
	if (c->broken || !c->attached) {
		snprintf(msg, n,
			 "%s: rank %d of this communicator never finished comm_init_rank",
			 cpu_coll_names[op->kind], (int)c->rank);
		return KEEL_STATUS_INVALID_STATE;
	}
	if (p2p) {
		src = op->kind == CPU_COLL_SEND ? c->rank : op->peer;
		dst = op->kind == CPU_COLL_SEND ? op->peer : c->rank;
	}
	r = cpu_round_get(c->clique, p2p, op->seq, src, dst,
			  p2p ? 2 : c->nranks);
	if (!r) {
		snprintf(msg, n, "%s: out of host memory for a rendezvous",
			 cpu_coll_names[op->kind]);
		return KEEL_STATUS_OUT_OF_MEMORY;
	}
	op->round = r;
	op->party = p2p ? (op->kind == CPU_COLL_SEND ? 0 : 1) : c->rank;
	if (r->failed)
		return KEEL_STATUS_OK; /* wait reports the failure */
	r->party[op->party] = *op;
	if (++r->arrived == r->nparties)
		cpu_round_complete(r);
	return KEEL_STATUS_OK;
}

static void cpu_round_timeout(struct cpu_round *r,
			      const struct cpu_coll_op *op)
{
	const char *name = cpu_coll_names[op->kind];

	r->failed = true;
	r->status = KEEL_STATUS_TIMEOUT;
	if (r->p2p)
		snprintf(r->msg, sizeof(r->msg),
			 "%s: rank %d timed out after %u ms waiting for the matching %s of rank %d (KEEL_CPU_COLL_TIMEOUT_MS); one thread driving several ranks must use group_start/group_end",
			 name, (int)op->comm->rank, cpu_g.cfg.coll_timeout_ms,
			 op->kind == CPU_COLL_SEND ? "recv" : "send",
			 (int)op->peer);
	else
		snprintf(r->msg, sizeof(r->msg),
			 "%s: rank %d of %d timed out after %u ms: %d of %d ranks arrived at collective #%" PRIu64
			 " (KEEL_CPU_COLL_TIMEOUT_MS); one thread driving several ranks must use group_start/group_end",
			 name, (int)op->comm->rank, (int)op->comm->nranks,
			 cpu_g.cfg.coll_timeout_ms, r->arrived, r->nparties,
			 r->seq);
	pthread_cond_broadcast(&cpu_coll_cond);
}

/* Wait for an arrived op's round; release the round when all have left. */
static keel_status cpu_round_wait(struct cpu_coll_op *op,
				  const struct timespec *deadline, char *msg,
				  size_t n)
{
	struct cpu_round *r = op->round;
	struct cpu_clique *q = op->comm->clique;
	keel_status st;

	while (!r->done && !r->failed) {
		if (cpu_coll_timedwait(deadline) && !r->done && !r->failed)
			cpu_round_timeout(r, op);
	}
	st = r->status;
	if (st)
		snprintf(msg, n, "%s", r->msg);
	if (++r->departed == r->nparties) {
		cpu_round_unlink(q, r);
		free(r);
	}
	op->round = NULL;
	return st;
}

/* ------------------------------------------------------------------------ */
/* Batches                                                                  */
/* ------------------------------------------------------------------------ */

static struct cpu_coll_batch *cpu_coll_batch_new(size_t n)
{
	struct cpu_coll_batch *b;

	b = calloc(1, sizeof(*b) + n * sizeof(b->ops[0]));
	if (b)
		b->n = n;
	return b;
}

/* An op that will never run: release its hold on the communicator. */
static void cpu_coll_op_drop(struct cpu_coll_op *op)
{
	free(op->v);
	op->v = NULL;
	cpu_coll_lock_acquire();
	op->comm->pending--;
	pthread_cond_broadcast(&cpu_coll_cond);
	cpu_coll_lock_release();
}

void cpu_coll_batch_free(struct cpu_coll_batch *b)
{
	size_t i;

	if (!b)
		return;
	cpu_coll_lock_acquire();
	for (i = 0; i < b->n; i++)
		b->ops[i].comm->pending--;
	pthread_cond_broadcast(&cpu_coll_cond);
	cpu_coll_lock_release();
	for (i = 0; i < b->n; i++)
		free(b->ops[i].v);
	free(b);
}

/* A batch on a cross-process communicator (never grouped, so one op):
 * MPI runs it, outside the collective lock. */
static keel_status cpu_coll_batch_run_mpi(struct cpu_coll_batch *b, char *msg,
					  size_t msg_size)
{
	for (size_t i = 0; i < b->n; i++) {
		const struct cpu_coll_op *op = &b->ops[i];
		struct cpu_mpi_call a = {
			.kind = op->kind, .name = cpu_coll_names[op->kind],
			.send = op->send, .recv = op->recv, .count = op->count,
			.dtype = op->dtype, .op = op->op, .root = op->root,
			.peer = op->peer,
		};
		keel_status st = cpu_mpi_run(op->comm->mpi, &a, msg, msg_size);

		if (st)
			return st;
	}
	return KEEL_STATUS_OK;
}

keel_status cpu_coll_batch_run(struct cpu_coll_batch *b, char *msg,
			       size_t msg_size)
{
	struct timespec deadline = cpu_deadline_ms(cpu_g.cfg.coll_timeout_ms);
	keel_status first = KEEL_STATUS_OK, st;
	char m[CPU_MSG_MAX];
	size_t i;

	if (b->n && b->ops[0].comm->mpi)
		return cpu_coll_batch_run_mpi(b, msg, msg_size);
	cpu_coll_lock_acquire();
	for (i = 0; i < b->n; i++) {
		st = cpu_round_arrive(&b->ops[i], m, sizeof(m));
		if (st && !first) {
			first = st;
			snprintf(msg, msg_size, "%s", m);
		}
	}
	for (i = 0; i < b->n; i++) {
		if (!b->ops[i].round)
			continue;
		st = cpu_round_wait(&b->ops[i], &deadline, m, sizeof(m));
		if (st && !first) {
			first = st;
			snprintf(msg, msg_size, "%s", m);
		}
	}
	cpu_coll_lock_release();
	return first;
}

/* ------------------------------------------------------------------------ */
/* Issuing                                                                  */
/* ------------------------------------------------------------------------ */

/* What a call passes, before validation. */
struct cpu_coll_call {
	enum cpu_coll_kind kind;
	keel_dptr send;
	keel_dptr recv;
	uint64_t count;
	keel_dtype dtype;
	keel_reduce_op op;
	int32_t root;
	int32_t peer;
	/* all_to_allv: the caller's four arrays */
	const uint64_t *vc[4];
};

static keel_status cpu_coll_check_args(const struct cpu_coll_call *a,
				       const struct cpu_comm *c,
				       const char *call)
{
	keel_status st;

	if (!keel_dtype_size(a->dtype))
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "%s: dtype %d is not a keel_dtype", call,
			       (int)a->dtype);
	if (cpu_coll_is_reduction(a->kind)) {
		st = cpu_reduce_check(a->dtype, a->op, call);
		if (st)
			return st;
	}
	if (cpu_coll_is_rooted(a->kind) &&
	    (a->root < 0 || a->root >= c->nranks))
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "%s: root %d is outside [0, %d)", call,
			       (int)a->root, (int)c->nranks);
	if ((a->kind == CPU_COLL_SEND || a->kind == CPU_COLL_RECV) &&
	    (a->peer < 0 || a->peer >= c->nranks))
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "%s: peer %d is outside [0, %d)", call,
			       (int)a->peer, (int)c->nranks);
	return KEEL_STATUS_OK;
}

/* Bytes of the send and recv buffers this rank passes (0 = unused). */
static keel_status cpu_coll_sizes(const struct cpu_coll_call *a,
				  const struct cpu_comm *c, const char *call,
				  uint64_t *send_bytes, uint64_t *recv_bytes)
{
	uint64_t one, all;
	bool root = c->rank == a->root;

	if (__builtin_mul_overflow(a->count, keel_dtype_size(a->dtype), &one) ||
	    __builtin_mul_overflow(one, (uint64_t)c->nranks, &all) ||
	    all > SIZE_MAX / (uint64_t)c->nranks)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "%s: count %" PRIu64 " of %s overflows for %d ranks",
			       call, a->count, cpu_dtype_name(a->dtype),
			       (int)c->nranks);
	*send_bytes = *recv_bytes = one;
	switch (a->kind) {
	case CPU_COLL_BROADCAST: *send_bytes = root ? one : 0; break;
	case CPU_COLL_REDUCE: *recv_bytes = root ? one : 0; break;
	case CPU_COLL_ALL_GATHER: *recv_bytes = all; break;
	case CPU_COLL_REDUCE_SCATTER: *send_bytes = all; break;
	case CPU_COLL_ALL_TO_ALL: *send_bytes = *recv_bytes = all; break;
	case CPU_COLL_SEND: *recv_bytes = 0; break;
	case CPU_COLL_RECV: *send_bytes = 0; break;
	default: break;
	}
	return KEEL_STATUS_OK;
}

static keel_status cpu_coll_buffers(const struct cpu_coll_call *a,
				    struct cpu_comm *c, struct cpu_device *dev,
				    const char *call, struct cpu_coll_op *op)
{
	uint64_t sb, rb;
	char what[64];
	keel_status st;

	st = cpu_coll_sizes(a, c, call, &sb, &rb);
	if (st)
		return st;
	if (sb) {
		snprintf(what, sizeof(what), "%s: %s", call,
			 a->kind == CPU_COLL_SEND ? "buf" : "send");
		st = cpu_mem_range(dev, a->send, sb, what, &op->send);
		if (st)
			return st;
	}
	if (rb) {
		snprintf(what, sizeof(what), "%s: %s", call,
			 a->kind == CPU_COLL_RECV ? "buf" : "recv");
		st = cpu_mem_range(dev, a->recv, rb, what, &op->recv);
	}
	return st;
}

/*
 * all_to_allv: copy the four arrays into the op and check every block; the
 * op's send/recv point at the lowest element any block uses.
 */
static keel_status cpu_coll_buffers_v(const struct cpu_coll_call *a,
				      struct cpu_comm *c,
				      struct cpu_device *dev,
				      const char *call, struct cpu_coll_op *op)
{
	static const char *const names[4] = {"send_counts", "send_displs",
					      "recv_counts", "recv_displs"};
	size_t n = (size_t)c->nranks, es = keel_dtype_size(a->dtype);
	uint64_t lo[2] = {UINT64_MAX, UINT64_MAX}, hi[2] = {0, 0};
	char what[64];
	keel_status st = KEEL_STATUS_OK;

	for (int k = 0; k < 4; k++)
		if (!a->vc[k])
			return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
				       "%s: %s is NULL", call, names[k]);
	op->v = malloc(4 * n * sizeof(*op->v));
	if (!op->v)
		return cpu_err(KEEL_STATUS_OUT_OF_MEMORY,
			       "%s: out of host memory", call);
	for (int k = 0; k < 4; k++)
		memcpy(op->v + (size_t)k * n, a->vc[k], n * sizeof(*op->v));
	for (int side = 0; side < 2; side++)
		for (size_t j = 0; j < n; j++) {
			uint64_t cnt = op->v[(size_t)(2 * side) * n + j];
			uint64_t dsp = op->v[(size_t)(2 * side + 1) * n + j];
			uint64_t end;

			if (cnt == 0)
				continue;
			if (__builtin_add_overflow(cnt, dsp, &end) ||
			    end > SIZE_MAX / es) {
				free(op->v);
				op->v = NULL;
				return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
					       "%s: %s[%zu] + %s[%zu] = %" PRIu64
					       " + %" PRIu64 " elements overflows",
					       call, names[2 * side], j,
					       names[2 * side + 1], j, cnt, dsp);
			}
			lo[side] = dsp < lo[side] ? dsp : lo[side];
			hi[side] = end > hi[side] ? end : hi[side];
		}
	for (int side = 0; side < 2 && !st; side++) {
		keel_dptr base = side ? a->recv : a->send;
		void **host = side ? &op->recv : &op->send;

		if (hi[side] == 0)
			continue;
		if (lo[side] * es > UINT64_MAX - base) {
			st = cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
				     "%s: %s + %" PRIu64 " elements overflows",
				     call, side ? "recv" : "send", lo[side]);
			break;
		}
		snprintf(what, sizeof(what), "%s: %s", call,
			 side ? "recv" : "send");
		st = cpu_mem_range(dev, base + lo[side] * es,
				   (hi[side] - lo[side]) * es, what, host);
		if (side)
			op->roff = lo[side];
		else
			op->soff = lo[side];
	}
	if (st) {
		free(op->v);
		op->v = NULL;
	}
	return st;
}

/* Assign the op its sequence number and count it pending. */
static void cpu_coll_sequence(struct cpu_coll_op *op)
{
	struct cpu_comm *c = op->comm;

	cpu_coll_lock_acquire();
	if (op->kind == CPU_COLL_SEND)
		op->seq = c->send_seq[op->peer]++;
	else if (op->kind == CPU_COLL_RECV)
		op->seq = c->recv_seq[op->peer]++;
	else
		op->seq = c->seq++;
	c->pending++;
	cpu_coll_lock_release();
}

static keel_status cpu_group_defer(struct cpu_coll_op *op,
				   struct cpu_stream *s, const char *call)
{
	struct cpu_group *g = &cpu_tls_group;

	if (g->nops == g->ops_cap) {
		size_t cap = g->ops_cap ? g->ops_cap * 2 : 16;
		struct cpu_deferred *v = realloc(g->ops, cap * sizeof(*v));

		if (!v) {
			cpu_coll_op_drop(op);
			return cpu_err(KEEL_STATUS_OUT_OF_MEMORY,
				       "%s: out of host memory deferring the call to group_end",
				       call);
		}
		g->ops = v;
		g->ops_cap = cap;
	}
	g->ops[g->nops].op = *op;
	g->ops[g->nops].stream = s;
	g->nops++;
	return KEEL_STATUS_OK;
}

static keel_status cpu_coll_launch(struct cpu_coll_op *op,
				   struct cpu_stream *s, const char *call)
{
	struct cpu_work w = { .kind = CPU_WORK_COLL };

	if (cpu_tls_group.depth > 0)
		return cpu_group_defer(op, s, call);
	w.u.coll = cpu_coll_batch_new(1);
	if (!w.u.coll) {
		cpu_coll_op_drop(op);
		return cpu_err(KEEL_STATUS_OUT_OF_MEMORY,
			       "%s: out of host memory", call);
	}
	w.u.coll->ops[0] = *op;
	return cpu_stream_submit(s, &w, call);
}

static keel_status cpu_coll_issue(keel_comm handle, keel_stream stream,
				  const struct cpu_coll_call *a)
{
	const char *call = cpu_coll_names[a->kind];
	struct cpu_coll_op op = { 0 };
	struct cpu_device *dev;
	struct cpu_stream *s;
	struct cpu_comm *c;
	keel_status st;

	st = cpu_comm_get(handle, call, &c);
	if (st)
		return st;
	if (c->broken)
		return cpu_err(KEEL_STATUS_INVALID_STATE,
			       "%s: rank %d never finished comm_init_rank (its group_end failed); destroy the communicator",
			       call, (int)c->rank);
	if (c->mpi && cpu_tls_group.depth > 0)
		return cpu_err(KEEL_STATUS_NOT_SUPPORTED,
			       "%s: rank %d's communicator spans processes (MPI); group_start/group_end is not provided for such communicators",
			       call, (int)c->rank);
	if (c->mpi && a->kind == CPU_COLL_ALL_TO_ALLV)
		return cpu_err(KEEL_STATUS_NOT_SUPPORTED,
			       "%s: not provided on communicators that span processes (MPI)",
			       call);
	st = cpu_dev_get(c->device, call, &dev);
	if (st)
		return st;
	st = cpu_stream_get(dev, stream, call, &s);
	if (st)
		return st;
	st = cpu_coll_check_args(a, c, call);
	if (st)
		return st;
	if (a->kind == CPU_COLL_ALL_TO_ALLV)
		st = cpu_coll_buffers_v(a, c, dev, call, &op);
	else if (a->count == 0)
		return KEEL_STATUS_OK;
	else
		st = cpu_coll_buffers(a, c, dev, call, &op);
	if (st)
		return st;
	op.comm = c;
	op.kind = a->kind;
	op.count = a->count;
	op.dtype = a->dtype;
	op.op = a->op;
	op.root = a->root;
	op.peer = a->peer;
	cpu_coll_sequence(&op);
	return cpu_coll_launch(&op, s, call);
}

/* ------------------------------------------------------------------------ */
/* Groups                                                                   */
/* ------------------------------------------------------------------------ */

static keel_status cpu_group_start(void)
{
	cpu_tls_group.depth++;
	return KEEL_STATUS_OK;
}

static void cpu_group_reset(struct cpu_group *g)
{
	free(g->ops);
	free(g->inits);
	memset(g, 0, sizeof(*g));
}

/* Keep the first error and its message. */
static void cpu_first_error(keel_status *first, char *msg, size_t n,
			    keel_status st, const char *m)
{
	if (!st || *first)
		return;
	*first = st;
	snprintf(msg, n, "%s", m);
}

/* Wait for every comm_init_rank deferred to this group_end. */
static void cpu_group_join(struct cpu_group *g, keel_status *first,
			   char *msg, size_t n)
{
	struct timespec deadline = cpu_deadline_ms(cpu_g.cfg.coll_timeout_ms);
	char m[CPU_MSG_MAX];
	keel_status st;
	size_t i;

	cpu_coll_lock_acquire();
	for (i = 0; i < g->ninits; i++) {
		struct cpu_comm *c = g->inits[i];

		st = cpu_comm_join_wait(c, &deadline, m, sizeof(m));
		if (!st)
			continue;
		cpu_comm_detach(c);
		c->broken = true;
		cpu_first_error(first, msg, n, st, m);
	}
	cpu_coll_lock_release();
}

/* Inline mode: the whole group is one batch run by this thread. */
static keel_status cpu_group_run_inline(struct cpu_group *g, char *msg,
					size_t n)
{
	struct cpu_coll_batch *b = cpu_coll_batch_new(g->nops);
	keel_status st;
	size_t i;

	if (!b) {
		for (i = 0; i < g->nops; i++)
			cpu_coll_op_drop(&g->ops[i].op);
		snprintf(msg, n, "group_end: out of host memory");
		return KEEL_STATUS_OUT_OF_MEMORY;
	}
	for (i = 0; i < g->nops; i++)
		b->ops[i] = g->ops[i].op;
	st = cpu_coll_batch_run(b, msg, n);
	cpu_coll_batch_free(b);
	return st;
}

/* Async mode: one batch per stream, in first-use order. */
static keel_status cpu_group_run_async(struct cpu_group *g)
{
	keel_status first = KEEL_STATUS_OK, st;
	size_t i, j, k, cnt;

	for (i = 0; i < g->nops; i++) {
		struct cpu_stream *s = g->ops[i].stream;
		struct cpu_work w = { .kind = CPU_WORK_COLL };

		if (!s)
			continue; /* already queued with an earlier op */
		for (cnt = 0, j = i; j < g->nops; j++)
			cnt += g->ops[j].stream == s;
		w.u.coll = cpu_coll_batch_new(cnt);
		for (k = 0, j = i; j < g->nops; j++) {
			if (g->ops[j].stream != s)
				continue;
			if (w.u.coll)
				w.u.coll->ops[k++] = g->ops[j].op;
			else
				cpu_coll_op_drop(&g->ops[j].op);
			g->ops[j].stream = NULL;
		}
		if (!w.u.coll) {
			if (!first)
				first = cpu_err(KEEL_STATUS_OUT_OF_MEMORY,
						"group_end: out of host memory");
			continue;
		}
		st = cpu_stream_submit(s, &w, "group_end");
		if (st && !first)
			first = st;
	}
	return first;
}

static keel_status cpu_group_end(void)
{
	struct cpu_group g = cpu_tls_group;
	keel_status first = KEEL_STATUS_OK, st;
	char msg[CPU_MSG_MAX] = "";

	if (g.depth <= 0)
		return cpu_err(KEEL_STATUS_INVALID_STATE,
			       "group_end: no matching group_start on this thread");
	if (--cpu_tls_group.depth > 0)
		return KEEL_STATUS_OK;
	memset(&cpu_tls_group, 0, sizeof(cpu_tls_group));
	if (g.ninits)
		cpu_group_join(&g, &first, msg, sizeof(msg));
	if (g.nops && !cpu_g.cfg.async) {
		char m[CPU_MSG_MAX] = "";

		st = cpu_group_run_inline(&g, m, sizeof(m));
		cpu_first_error(&first, msg, sizeof(msg), st, m);
	} else if (g.nops) {
		/* errors here were reported by set_error already */
		st = cpu_group_run_async(&g);
		if (st && !first) {
			cpu_group_reset(&g);
			return st;
		}
	}
	cpu_group_reset(&g);
	if (first)
		return cpu_err_msg(first, msg);
	return KEEL_STATUS_OK;
}

/* true when this thread's open group still holds work for c. */
static bool cpu_group_holds(const struct cpu_comm *c)
{
	const struct cpu_group *g = &cpu_tls_group;
	size_t i;

	for (i = 0; i < g->nops; i++)
		if (g->ops[i].op.comm == c)
			return true;
	for (i = 0; i < g->ninits; i++)
		if (g->inits[i] == c)
			return true;
	return false;
}

/* ------------------------------------------------------------------------ */
/* Collective group                                                         */
/* ------------------------------------------------------------------------ */

static void cpu_random_bytes(uint8_t *p, size_t n)
{
	size_t got = 0;
	ssize_t r;
	int fd;

	while (got < n) {
		r = getrandom(p + got, n - got, 0);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	if (got == n)
		return;
	fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	while (fd >= 0 && got < n) {
		r = read(fd, p + got, n - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	if (fd >= 0)
		close(fd);
	/* last resort: time-based filler; the counter keeps ids unique */
	for (; got < n; got++) {
		struct timespec ts = cpu_now();

		p[got] = (uint8_t)(ts.tv_nsec ^ (ts.tv_nsec >> 8) ^ (long)got);
	}
}

/* The id size in force: KEEL_CPU_COMM_ID_BYTES as last read. */
static uint32_t cpu_id_bytes(void)
{
	return cpu_g.cfg_valid && cpu_g.cfg.comm_id_bytes ? cpu_g.cfg.comm_id_bytes
							  : KEEL_COMM_ID_BYTES;
}

/* A new id: random bytes, plus a process counter and the pid so that two
 * ids of one process never collide; inside an MPI job of several
 * processes, marked as an id for a communicator across those processes
 * (cpu_coll_mpi.c). */
static void cpu_id_fill(keel_comm_id *id)
{
	uint64_t counter = atomic_fetch_add(&cpu_id_counter, 1) + 1;
	uint32_t pid = (uint32_t)getpid();

	cpu_random_bytes(id->bytes, sizeof(id->bytes));
	memcpy(id->bytes, &counter, sizeof(counter));
	memcpy(id->bytes + sizeof(counter), &pid, sizeof(pid));
	(void)cpu_mpi_unique_id(id); /* NOT_FOUND outside such a job */
}

static keel_status cpu_get_unique_id(keel_comm_id *id)
{
	if (!id)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "get_unique_id: id is NULL");
	if (cpu_id_bytes() > KEEL_COMM_ID_BYTES)
		return cpu_err(KEEL_STATUS_NOT_SUPPORTED,
			       "get_unique_id: this plugin's ids have %u bytes (KEEL_CPU_COMM_ID_BYTES): use get_unique_id_bytes",
			       (unsigned)cpu_id_bytes());
	cpu_id_fill(id);
	return KEEL_STATUS_OK;
}

#if KEEL_ABI_VERSION_MINOR >= 3 /* built against an older header: no _bytes calls */
/*
 * Ids of KEEL_CPU_COMM_ID_BYTES bytes (ABI 1.3): the first 128 are a
 * fixed-size id, and byte k beyond them is byte k % 128 xor k / 128, so
 * that comm_init_rank_bytes can tell an id cut short or damaged on its way
 * to another rank, which is what this mode exists to catch.
 */
static keel_status cpu_id_size_ok(uint32_t size, const char *call)
{
	if (size == cpu_id_bytes())
		return KEEL_STATUS_OK;
	return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
		       "%s: an id of %u bytes, but this plugin's ids have %u (collective.get_caps id_bytes)",
		       call, (unsigned)size, (unsigned)cpu_id_bytes());
}

static keel_status cpu_get_unique_id_bytes(uint8_t *id, uint32_t size)
{
	keel_comm_id head;
	keel_status st;

	if (!id)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "get_unique_id_bytes: id is NULL");
	st = cpu_id_size_ok(size, "get_unique_id_bytes");
	if (st)
		return st;
	cpu_id_fill(&head);
	memcpy(id, head.bytes, sizeof(head.bytes));
	for (uint32_t k = KEEL_COMM_ID_BYTES; k < size; k++)
		id[k] = head.bytes[k % KEEL_COMM_ID_BYTES] ^
			(uint8_t)(k / KEEL_COMM_ID_BYTES);
	return KEEL_STATUS_OK;
}

static keel_status cpu_comm_init_rank_checked(int32_t device, int32_t nranks,
					      const keel_comm_id *id,
					      int32_t rank, keel_comm *comm);

static keel_status cpu_comm_init_rank_bytes(int32_t device, int32_t nranks,
					    const uint8_t *id, uint32_t size,
					    int32_t rank, keel_comm *comm)
{
	keel_comm_id head;
	keel_status st;

	if (!id || !comm)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "comm_init_rank_bytes: %s is NULL",
			       !id ? "id" : "comm");
	st = cpu_id_size_ok(size, "comm_init_rank_bytes");
	if (st)
		return st;
	for (uint32_t k = KEEL_COMM_ID_BYTES; k < size; k++)
		if (id[k] != (id[k % KEEL_COMM_ID_BYTES] ^
			      (uint8_t)(k / KEEL_COMM_ID_BYTES)))
			return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
				       "comm_init_rank_bytes: byte %u of the %u-byte id is not what get_unique_id_bytes wrote: the id was cut short or damaged on its way to rank %d",
				       (unsigned)k, (unsigned)size, (int)rank);
	memcpy(head.bytes, id, sizeof(head.bytes));
	return cpu_comm_init_rank_checked(device, nranks, &head, rank, comm);
}

#endif

static keel_status cpu_comm_new(int32_t device, int32_t nranks, int32_t rank,
				struct cpu_comm **out)
{
	struct cpu_comm *c = calloc(1, sizeof(*c));

	if (!c)
		goto oom;
	c->send_seq = calloc((size_t)nranks, sizeof(*c->send_seq));
	c->recv_seq = calloc((size_t)nranks, sizeof(*c->recv_seq));
	if (!c->send_seq || !c->recv_seq)
		goto oom;
	c->device = device;
	c->nranks = nranks;
	c->rank = rank;
	*out = c;
	return KEEL_STATUS_OK;
oom:
	if (c)
		cpu_comm_free(c);
	return cpu_err(KEEL_STATUS_OUT_OF_MEMORY,
		       "comm_init_rank: out of host memory for rank %d of %d",
		       (int)rank, (int)nranks);
}

/* Find or create the clique and take the rank's slot. */
static keel_status cpu_comm_join(struct cpu_comm *c, const keel_comm_id *id)
{
	keel_status st = KEEL_STATUS_OK;
	struct cpu_clique *q;

	cpu_coll_lock_acquire();
	q = cpu_clique_find(id);
	if (q && q->nranks != c->nranks) {
		st = cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			     "comm_init_rank: rank %d passes nranks %d, but ranks already joined with this id passed %d",
			     (int)c->rank, (int)c->nranks, (int)q->nranks);
		goto out;
	}
	if (q && q->ranks[c->rank]) {
		st = cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			     "comm_init_rank: rank %d of %d has already joined this id (on cpu:%d)",
			     (int)c->rank, (int)c->nranks,
			     (int)q->ranks[c->rank]->device);
		goto out;
	}
	if (!q)
		q = cpu_clique_new(id, c->nranks);
	if (!q) {
		st = cpu_err(KEEL_STATUS_OUT_OF_MEMORY,
			     "comm_init_rank: out of host memory for a %d-rank communicator",
			     (int)c->nranks);
		goto out;
	}
	cpu_comm_attach(c, q);
out:
	cpu_coll_lock_release();
	return st;
}

static void cpu_comm_abandon(struct cpu_comm *c)
{
	cpu_coll_lock_acquire();
	cpu_comm_detach(c);
	cpu_coll_lock_release();
	cpu_handle_remove(c);
	cpu_comm_free(c);
}

static keel_status cpu_group_defer_init(struct cpu_comm *c)
{
	struct cpu_group *g = &cpu_tls_group;

	if (g->ninits == g->inits_cap) {
		size_t cap = g->inits_cap ? g->inits_cap * 2 : 8;
		struct cpu_comm **v = realloc(g->inits, cap * sizeof(*v));

		if (!v)
			return KEEL_STATUS_OUT_OF_MEMORY;
		g->inits = v;
		g->inits_cap = cap;
	}
	g->inits[g->ninits++] = c;
	return KEEL_STATUS_OK;
}

/* A rank of a communicator across processes (an id from
 * cpu_mpi_unique_id). */
static keel_status cpu_comm_init_mpi(int32_t device, int32_t nranks,
				     const keel_comm_id *id, int32_t rank,
				     keel_comm *comm)
{
	struct cpu_comm *c;
	keel_status st;

	if (cpu_tls_group.depth > 0)
		return cpu_err(KEEL_STATUS_NOT_SUPPORTED,
			       "comm_init_rank: the id is for a communicator across processes (MPI); joining one inside group_start/group_end is not provided");
	st = cpu_comm_new(device, nranks, rank, &c);
	if (st)
		return st;
	st = cpu_mpi_comm_init(id, nranks, rank, &c->mpi);
	if (st) {
		cpu_comm_free(c);
		return st;
	}
	if (cpu_handle_add(c, CPU_HANDLE_COMM, device)) {
		cpu_comm_free(c);
		return cpu_err(KEEL_STATUS_OUT_OF_MEMORY,
			       "comm_init_rank: out of host memory for rank %d of %d",
			       (int)rank, (int)nranks);
	}
	*comm = (keel_comm)c;
	return KEEL_STATUS_OK;
}

static keel_status cpu_comm_init_rank_checked(int32_t device, int32_t nranks,
					      const keel_comm_id *id,
					      int32_t rank, keel_comm *comm)
{
	struct timespec deadline;
	char msg[CPU_MSG_MAX];
	struct cpu_device *dev;
	struct cpu_comm *c;
	keel_status st;

	st = cpu_dev_get(device, "comm_init_rank", &dev);
	if (st)
		return st;
	if (!id || !comm)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "comm_init_rank: %s is NULL", !id ? "id" : "comm");
	if (nranks < 1 || rank < 0 || rank >= nranks)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "comm_init_rank: rank %d of nranks %d is invalid (need nranks >= 1 and 0 <= rank < nranks)",
			       (int)rank, (int)nranks);
	if (cpu_mpi_id_is(id))
		return cpu_comm_init_mpi(device, nranks, id, rank, comm);
	st = cpu_comm_new(device, nranks, rank, &c);
	if (st)
		return st;
	st = cpu_comm_join(c, id);
	if (st) {
		cpu_comm_free(c);
		return st;
	}
	if (cpu_handle_add(c, CPU_HANDLE_COMM, device))
		goto oom;
	if (cpu_tls_group.depth > 0) {
		if (cpu_group_defer_init(c))
			goto oom;
		*comm = (keel_comm)c;
		return KEEL_STATUS_OK;
	}
	deadline = cpu_deadline_ms(cpu_g.cfg.coll_timeout_ms);
	cpu_coll_lock_acquire();
	st = cpu_comm_join_wait(c, &deadline, msg, sizeof(msg));
	cpu_coll_lock_release();
	if (st) {
		cpu_comm_abandon(c);
		return cpu_err_msg(st, msg);
	}
	*comm = (keel_comm)c;
	return KEEL_STATUS_OK;
oom:
	cpu_comm_abandon(c);
	return cpu_err(KEEL_STATUS_OUT_OF_MEMORY,
		       "comm_init_rank: out of host memory for rank %d of %d",
		       (int)rank, (int)nranks);
}

static keel_status cpu_comm_init_rank(int32_t device, int32_t nranks,
				      const keel_comm_id *id, int32_t rank,
				      keel_comm *comm)
{
	if (cpu_id_bytes() > KEEL_COMM_ID_BYTES)
		return cpu_err(KEEL_STATUS_NOT_SUPPORTED,
			       "comm_init_rank: this plugin's ids have %u bytes (KEEL_CPU_COMM_ID_BYTES): use comm_init_rank_bytes",
			       (unsigned)cpu_id_bytes());
	return cpu_comm_init_rank_checked(device, nranks, id, rank, comm);
}

static keel_status cpu_comm_destroy(keel_comm handle)
{
	struct timespec deadline;
	struct cpu_comm *c;
	keel_status st;
	int pending;

	st = cpu_comm_get(handle, "comm_destroy", &c);
	if (st)
		return st;
	if (cpu_group_holds(c))
		return cpu_err(KEEL_STATUS_INVALID_STATE,
			       "comm_destroy: rank %d still has calls deferred in this thread's open group (call group_end first)",
			       (int)c->rank);
	deadline = cpu_deadline_ms(cpu_g.cfg.coll_timeout_ms);
	cpu_coll_lock_acquire();
	while (c->pending > 0)
		if (cpu_coll_timedwait(&deadline))
			break;
	pending = c->pending;
	if (pending == 0)
		cpu_comm_detach(c);
	cpu_coll_lock_release();
	if (pending)
		return cpu_err(KEEL_STATUS_TIMEOUT,
			       "comm_destroy: rank %d still has %d pending operations after %u ms",
			       (int)c->rank, pending, cpu_g.cfg.coll_timeout_ms);
	cpu_handle_remove(c);
	cpu_comm_free(c);
	return KEEL_STATUS_OK;
}

static keel_status cpu_comm_rank(keel_comm handle, int32_t *rank,
				 int32_t *nranks)
{
	struct cpu_comm *c;
	keel_status st;

	st = cpu_comm_get(handle, "comm_rank", &c);
	if (st)
		return st;
	if (!rank || !nranks)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "comm_rank: %s is NULL", !rank ? "rank" : "nranks");
	*rank = c->rank;
	*nranks = c->nranks;
	return KEEL_STATUS_OK;
}

void cpu_coll_release_all(void)
{
	void **list;
	size_t i, n;

	cpu_group_reset(&cpu_tls_group);
	list = cpu_handle_list(CPU_HANDLE_COMM, &n);
	for (i = 0; i < n; i++)
		cpu_comm_abandon(list[i]);
	free(list);
}

static keel_status cpu_all_reduce(keel_comm comm, keel_stream stream,
				  keel_dptr send, keel_dptr recv,
				  uint64_t count, keel_dtype dtype,
				  keel_reduce_op op)
{
	struct cpu_coll_call a = { .kind = CPU_COLL_ALL_REDUCE, .send = send,
				   .recv = recv, .count = count,
				   .dtype = dtype, .op = op };

	return cpu_coll_issue(comm, stream, &a);
}

static keel_status cpu_broadcast(keel_comm comm, keel_stream stream,
				 keel_dptr send, keel_dptr recv, uint64_t count,
				 keel_dtype dtype, int32_t root)
{
	struct cpu_coll_call a = { .kind = CPU_COLL_BROADCAST, .send = send,
				   .recv = recv, .count = count,
				   .dtype = dtype, .root = root };

	return cpu_coll_issue(comm, stream, &a);
}

static keel_status cpu_reduce_call(keel_comm comm, keel_stream stream,
				   keel_dptr send, keel_dptr recv,
				   uint64_t count, keel_dtype dtype,
				   keel_reduce_op op, int32_t root)
{
	struct cpu_coll_call a = { .kind = CPU_COLL_REDUCE, .send = send,
				   .recv = recv, .count = count,
				   .dtype = dtype, .op = op, .root = root };

	return cpu_coll_issue(comm, stream, &a);
}

static keel_status cpu_all_gather(keel_comm comm, keel_stream stream,
				  keel_dptr send, keel_dptr recv,
				  uint64_t count, keel_dtype dtype)
{
	struct cpu_coll_call a = { .kind = CPU_COLL_ALL_GATHER, .send = send,
				   .recv = recv, .count = count,
				   .dtype = dtype };

	return cpu_coll_issue(comm, stream, &a);
}

static keel_status cpu_reduce_scatter(keel_comm comm, keel_stream stream,
				      keel_dptr send, keel_dptr recv,
				      uint64_t count, keel_dtype dtype,
				      keel_reduce_op op)
{
	struct cpu_coll_call a = { .kind = CPU_COLL_REDUCE_SCATTER,
				   .send = send, .recv = recv, .count = count,
				   .dtype = dtype, .op = op };

	return cpu_coll_issue(comm, stream, &a);
}

static keel_status cpu_all_to_all(keel_comm comm, keel_stream stream,
				  keel_dptr send, keel_dptr recv,
				  uint64_t count, keel_dtype dtype)
{
	struct cpu_coll_call a = { .kind = CPU_COLL_ALL_TO_ALL, .send = send,
				   .recv = recv, .count = count,
				   .dtype = dtype };

	return cpu_coll_issue(comm, stream, &a);
}

#if KEEL_ABI_VERSION_MINOR >= 3
static keel_status cpu_all_to_allv(keel_comm comm, keel_stream stream,
				   keel_dptr send, const uint64_t *send_counts,
				   const uint64_t *send_displs, keel_dptr recv,
				   const uint64_t *recv_counts,
				   const uint64_t *recv_displs, keel_dtype dtype)
{
	struct cpu_coll_call a = { .kind = CPU_COLL_ALL_TO_ALLV, .send = send,
				   .recv = recv, .dtype = dtype,
				   .vc = { send_counts, send_displs,
					   recv_counts, recv_displs } };

	return cpu_coll_issue(comm, stream, &a);
}

#endif

static keel_status cpu_send(keel_comm comm, keel_stream stream, keel_dptr buf,
			    uint64_t count, keel_dtype dtype, int32_t peer)
{
	struct cpu_coll_call a = { .kind = CPU_COLL_SEND, .send = buf,
				   .count = count, .dtype = dtype,
				   .peer = peer };

	return cpu_coll_issue(comm, stream, &a);
}

static keel_status cpu_recv(keel_comm comm, keel_stream stream, keel_dptr buf,
			    uint64_t count, keel_dtype dtype, int32_t peer)
{
	struct cpu_coll_call a = { .kind = CPU_COLL_RECV, .recv = buf,
				   .count = count, .dtype = dtype,
				   .peer = peer };

	return cpu_coll_issue(comm, stream, &a);
}

#if KEEL_ABI_VERSION_MINOR >= 2
/* Every collective, every dtype (bool for the data-moving ones only) and
 * every reduce op; waits bounded by KEEL_CPU_COLL_TIMEOUT_MS. */
static keel_status cpu_coll_get_caps(int32_t device, keel_collective_caps *caps)
{
	keel_collective_caps full;
	int32_t ndev = cpu_g.initialized ? cpu_g.ndevs
			 : cpu_g.cfg_valid ? cpu_g.cfg.ndevices : 0;
	uint32_t n;

	if (!caps || caps->struct_size < sizeof(uint32_t))
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "collective.get_caps: caps is NULL or its struct_size is below 4");
	if (device < 0 || device >= ndev)
		return cpu_err(KEEL_STATUS_INVALID_DEVICE,
			       "collective.get_caps: device %d does not exist (the cpu plugin has %d)",
			       (int)device, (int)ndev);
	memset(&full, 0, sizeof(full));
	full.collectives = KEEL_COLL_ALL_REDUCE | KEEL_COLL_BROADCAST |
			   KEEL_COLL_REDUCE | KEEL_COLL_ALL_GATHER |
			   KEEL_COLL_REDUCE_SCATTER | KEEL_COLL_ALL_TO_ALL |
			   KEEL_COLL_SEND_RECV | KEEL_COLL_ALL_TO_ALLV;
	for (int dt = 0; dt < KEEL_DTYPE_COUNT_; dt++)
		full.dtype_mask |= KEEL_DTYPE_BIT(dt);
	for (int op = 0; op < KEEL_REDUCE_OP_COUNT_; op++)
		full.reduce_ops |= KEEL_REDUCE_OP_BIT(op);
	full.timeout_ms = cpu_g.cfg.coll_timeout_ms;
#if KEEL_ABI_VERSION_MINOR >= 3
	full.id_bytes = cpu_id_bytes();
#endif
	n = caps->struct_size < sizeof(full) ? caps->struct_size
					     : (uint32_t)sizeof(full);
	full.struct_size = n;
	memcpy(caps, &full, n);
	return KEEL_STATUS_OK;
}

#endif

const keel_collective_ops cpu_collective_ops = {
	.header = KEEL_TABLE_HEADER(keel_collective_ops),
	.get_unique_id = cpu_get_unique_id,
	.comm_init_rank = cpu_comm_init_rank,
	.comm_destroy = cpu_comm_destroy,
	.comm_rank = cpu_comm_rank,
	.all_reduce = cpu_all_reduce,
	.broadcast = cpu_broadcast,
	.reduce = cpu_reduce_call,
	.all_gather = cpu_all_gather,
	.reduce_scatter = cpu_reduce_scatter,
	.all_to_all = cpu_all_to_all,
	.send = cpu_send,
	.recv = cpu_recv,
	.group_start = cpu_group_start,
	.group_end = cpu_group_end,
#if KEEL_ABI_VERSION_MINOR >= 2
	.get_caps = cpu_coll_get_caps,
#endif
#if KEEL_ABI_VERSION_MINOR >= 3
	.all_to_allv = cpu_all_to_allv,
	.get_unique_id_bytes = cpu_get_unique_id_bytes,
	.comm_init_rank_bytes = cpu_comm_init_rank_bytes,
#endif
};
