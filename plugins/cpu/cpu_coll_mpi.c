/*
 * keel CPU reference plugin — communicators whose ranks are processes,
 * over Open MPI.
 *
 * When the process belongs to an MPI job of more than one process (MPI
 * initialised by the application or by keel's dist layer, and
 * MPI_COMM_WORLD larger than 1), get_unique_id hands out ids marked as
 * cross-process: a magic string, the world rank of the process that made
 * the id and a unique tag. comm_init_rank with such an id joins an MPI
 * communicator instead of an in-process clique:
 *
 *   1. every rank but the id's maker sends (rank, nranks) to the maker's
 *      world rank, tagged with the id's tag; the maker collects them and
 *      sends the list of world ranks, in communicator-rank order, back;
 *   2. every member calls MPI_Comm_create_group on that list.
 *
 * The maker must be a member (the usual case: rank 0 makes the id and the
 * launcher passes it on). One rank per process: a second rank of the same
 * communicator in one process is refused.
 *
 * Collectives run as MPI's non-blocking collectives, waited for by polling
 * against KEEL_CPU_COLL_TIMEOUT_MS, so a peer that hangs or died makes
 * this rank fail with TIMEOUT naming the collective, instead of waiting
 * forever. Reductions go through MPI user operations over byte-typed
 * datatypes, one per keel dtype, which call cpu_reduce: the same
 * arithmetic (float16/bfloat16 and integer rules) as the in-process
 * engine. avg is a sum followed by a division by nranks here.
 *
 * Calls run where the in-process collectives run (the stream's work, in
 * stream order), so they follow the kernels enqueued before them.
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "cpu_coll_mpi.h"

#define CPU_MPI_MAGIC "keel-cpu-mpi/1"
#define CPU_MPI_MAGIC_LEN 14
/* Id layout: magic, then int32 maker world rank, int32 world size, uint32
 * tag, then the caller's random filler (left as get_unique_id wrote it). */
#define CPU_MPI_OFF_RANK 16
#define CPU_MPI_OFF_SIZE 20
#define CPU_MPI_OFF_TAG 24

struct cpu_mpi_comm {
	MPI_Comm comm;
	int rank;
	int nranks;
	uint64_t seq;
	/* A collective timed out: MPI still owns its request (MPI cannot
	 * cancel a collective), so the communicator is never used or freed
	 * again, and the process should end (docs/distributed.md). */
	bool failed;
	char failure[160];
};

static pthread_once_t cpu_mpi_once = PTHREAD_ONCE_INIT;
static bool cpu_mpi_types_ok;
static MPI_Datatype cpu_mpi_type[KEEL_DTYPE_COUNT_];
static MPI_Op cpu_mpi_op[KEEL_REDUCE_OP_COUNT_];
static atomic_uint cpu_mpi_tag_counter;

bool cpu_mpi_job(int *world_rank, int *world_size)
{
	int init = 0, fin = 0, r = 0, n = 1;

	if (MPI_Initialized(&init) != MPI_SUCCESS || !init)
		return false;
	if (MPI_Finalized(&fin) != MPI_SUCCESS || fin)
		return false;
	if (MPI_Comm_size(MPI_COMM_WORLD, &n) != MPI_SUCCESS ||
	    MPI_Comm_rank(MPI_COMM_WORLD, &r) != MPI_SUCCESS)
		return false;
	if (world_rank)
		*world_rank = r;
	if (world_size)
		*world_size = n;
	return n > 1;
}

static keel_dtype cpu_mpi_dtype_of(MPI_Datatype t)
{
	for (int d = 0; d < KEEL_DTYPE_COUNT_; d++)
		if (cpu_mpi_type[d] == t)
			return (keel_dtype)d;
	return KEEL_DTYPE_COUNT_;
}

/* MPI user operations: inout = inout op in, element by element. */
#define CPU_MPI_USER_OP(NAME, OP)                                            \
	static void NAME(void *in, void *inout, int *len, MPI_Datatype *dt) \
	{                                                                    \
		keel_dtype d = cpu_mpi_dtype_of(*dt);                        \
		const void *srcs[2] = { inout, in };                         \
                                                                             \
		if (d == KEEL_DTYPE_COUNT_ || *len <= 0)                     \
			return;                                              \
		cpu_reduce(d, OP, 2, srcs, inout, (uint64_t)*len);           \
	}
CPU_MPI_USER_OP(cpu_mpi_sum, KEEL_REDUCE_SUM)
CPU_MPI_USER_OP(cpu_mpi_prod, KEEL_REDUCE_PROD)
CPU_MPI_USER_OP(cpu_mpi_max, KEEL_REDUCE_MAX)
CPU_MPI_USER_OP(cpu_mpi_min, KEEL_REDUCE_MIN)

static void cpu_mpi_setup(void)
{
	MPI_User_function *fn[4] = { cpu_mpi_sum, cpu_mpi_prod, cpu_mpi_max,
				     cpu_mpi_min };

	for (int d = 0; d < KEEL_DTYPE_COUNT_; d++) {
		size_t bytes = keel_dtype_size((keel_dtype)d);

		if (MPI_Type_contiguous((int)bytes, MPI_BYTE,
					&cpu_mpi_type[d]) != MPI_SUCCESS ||
		    MPI_Type_commit(&cpu_mpi_type[d]) != MPI_SUCCESS)
			return;
	}
	for (int o = 0; o < 4; o++)
		if (MPI_Op_create(fn[o], 1, &cpu_mpi_op[o]) != MPI_SUCCESS)
			return;
	/* avg: summed, then divided (cpu_mpi_divide). */
	cpu_mpi_op[KEEL_REDUCE_AVG] = cpu_mpi_op[KEEL_REDUCE_SUM];
	cpu_mpi_types_ok = true;
}

bool cpu_mpi_id_is(const keel_comm_id *id)
{
	return memcmp(id->bytes, CPU_MPI_MAGIC, CPU_MPI_MAGIC_LEN) == 0;
}

keel_status cpu_mpi_unique_id(keel_comm_id *id)
{
	int wr = 0, ws = 1, ub_flag = 0;
	int *ub = NULL;
	uint32_t tag, max_tag = 32767;
	int32_t v;

	if (!cpu_mpi_job(&wr, &ws))
		return KEEL_STATUS_NOT_FOUND;
	if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &ub_flag) ==
		    MPI_SUCCESS && ub_flag && ub && *ub > 1024)
		max_tag = (uint32_t)*ub;
	/* Tags 1..max_tag-1; distinct per maker for the first max_tag ids,
	 * and the maker's rank makes them distinct between makers. */
	tag = 1 + (atomic_fetch_add(&cpu_mpi_tag_counter, 1) +
		   (uint32_t)wr * 7919u) % (max_tag - 1);
	memcpy(id->bytes, CPU_MPI_MAGIC, CPU_MPI_MAGIC_LEN);
	id->bytes[CPU_MPI_MAGIC_LEN] = 0;
	id->bytes[CPU_MPI_MAGIC_LEN + 1] = 0;
	v = wr;
	memcpy(id->bytes + CPU_MPI_OFF_RANK, &v, sizeof(v));
	v = ws;
	memcpy(id->bytes + CPU_MPI_OFF_SIZE, &v, sizeof(v));
	memcpy(id->bytes + CPU_MPI_OFF_TAG, &tag, sizeof(tag));
	return KEEL_STATUS_OK;
}

/* Poll `req` until it completes (its status into *status when not NULL)
 * or the deadline passes. */
static bool cpu_mpi_wait(MPI_Request *req, const struct timespec *deadline,
			 MPI_Status *status)
{
	int done = 0;
	unsigned spins = 0;

	for (;;) {
		if (MPI_Test(req, &done,
			     status ? status : MPI_STATUS_IGNORE) != MPI_SUCCESS)
			return false;
		if (done)
			return true;
		if (++spins < 256)
			continue;
		if (cpu_ts_ms(cpu_now(), *deadline) <= 0)
			return false;
		/* Back off: other threads of this process (the kernels'
		 * pool) need the cores while a peer catches up. */
		struct timespec nap = { 0, 20000 };

		nanosleep(&nap, NULL);
	}
}

static bool cpu_mpi_wait_all(MPI_Request *req, int n,
			     const struct timespec *deadline)
{
	for (int i = 0; i < n; i++)
		if (!cpu_mpi_wait(&req[i], deadline, NULL))
			return false;
	return true;
}

/* The id's maker: collect every other member's (rank, nranks), tagged
 * `tag`, into world[] (world rank of each communicator rank), then send
 * the list back to each. */
static keel_status cpu_mpi_gather_members(int32_t nranks, int32_t rank,
					  int wr, uint32_t tag, int *world,
					  const struct timespec *deadline)
{
	MPI_Request *reqs;
	int nreq = 0;
	bool ok;

	world[rank] = wr;
	for (int got = 1; got < nranks; got++) {
		int32_t msg[2];
		MPI_Status status;
		MPI_Request req;

		if (MPI_Irecv(msg, 2, MPI_INT32_T, MPI_ANY_SOURCE, (int)tag,
			      MPI_COMM_WORLD, &req) != MPI_SUCCESS)
			return cpu_err(KEEL_STATUS_DEVICE_ERROR,
				       "comm_init_rank: MPI_Irecv failed on rank %d of %d (MPI rank %d)",
				       (int)rank, (int)nranks, wr);
		if (!cpu_mpi_wait(&req, deadline, &status)) {
			MPI_Cancel(&req);
			MPI_Request_free(&req);
			return cpu_err(KEEL_STATUS_TIMEOUT,
				       "comm_init_rank: rank %d of %d (MPI rank %d, the id's maker) timed out after %u ms with %d of %d ranks joined (KEEL_CPU_COLL_TIMEOUT_MS)",
				       (int)rank, (int)nranks, wr,
				       cpu_g.cfg.coll_timeout_ms, got,
				       (int)nranks);
		}
		if (msg[1] != nranks || msg[0] < 0 || msg[0] >= nranks ||
		    world[msg[0]] >= 0)
			return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
				       "comm_init_rank: MPI rank %d joined as rank %d of %d, but this communicator has %d ranks%s",
				       status.MPI_SOURCE, (int)msg[0],
				       (int)msg[1], (int)nranks,
				       msg[0] >= 0 && msg[0] < nranks &&
						       world[msg[0]] >= 0
					       ? " and that rank has already joined"
					       : "");
		world[msg[0]] = status.MPI_SOURCE;
	}
	reqs = calloc((size_t)nranks, sizeof(*reqs));
	if (!reqs)
		return cpu_err(KEEL_STATUS_OUT_OF_MEMORY,
			       "comm_init_rank: out of host memory");
	for (int i = 0; i < nranks; i++)
		if (i != rank)
			MPI_Isend(world, nranks, MPI_INT, world[i], (int)tag,
				  MPI_COMM_WORLD, &reqs[nreq++]);
	ok = cpu_mpi_wait_all(reqs, nreq, deadline);
	free(reqs);
	if (!ok)
		return cpu_err(KEEL_STATUS_TIMEOUT,
			       "comm_init_rank: rank %d of %d (MPI rank %d) could not hand the member list to every rank within %u ms",
			       (int)rank, (int)nranks, wr,
			       cpu_g.cfg.coll_timeout_ms);
	return KEEL_STATUS_OK;
}

/* Any other member: send (rank, nranks) to the maker and receive world[]. */
static keel_status cpu_mpi_join_maker(int32_t nranks, int32_t rank, int wr,
				      int32_t maker, uint32_t tag, int *world,
				      const struct timespec *deadline)
{
	int32_t msg[2] = { rank, nranks };
	MPI_Request req[2];

	if (MPI_Isend(msg, 2, MPI_INT32_T, maker, (int)tag, MPI_COMM_WORLD,
		      &req[0]) != MPI_SUCCESS ||
	    MPI_Irecv(world, nranks, MPI_INT, maker, (int)tag, MPI_COMM_WORLD,
		      &req[1]) != MPI_SUCCESS)
		return cpu_err(KEEL_STATUS_DEVICE_ERROR,
			       "comm_init_rank: MPI_Isend/MPI_Irecv failed on rank %d of %d (MPI rank %d)",
			       (int)rank, (int)nranks, wr);
	if (!cpu_mpi_wait_all(req, 2, deadline))
		return cpu_err(KEEL_STATUS_TIMEOUT,
			       "comm_init_rank: rank %d of %d (MPI rank %d) got no answer from MPI rank %d, the id's maker, within %u ms (KEEL_CPU_COLL_TIMEOUT_MS)",
			       (int)rank, (int)nranks, wr, (int)maker,
			       cpu_g.cfg.coll_timeout_ms);
	if (world[rank] != wr)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "comm_init_rank: the id's maker placed rank %d on MPI rank %d, not on this process (MPI rank %d)",
			       (int)rank, world[rank], wr);
	return KEEL_STATUS_OK;
}

keel_status cpu_mpi_comm_init(const keel_comm_id *id, int32_t nranks,
			      int32_t rank, struct cpu_mpi_comm **out)
{
	struct timespec deadline = cpu_deadline_ms(cpu_g.cfg.coll_timeout_ms);
	int32_t maker, size;
	uint32_t tag;
	int wr = 0, ws = 1;
	int *world = NULL;
	MPI_Group wgroup = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
	struct cpu_mpi_comm *c = NULL;
	keel_status st = KEEL_STATUS_OK;

	memcpy(&maker, id->bytes + CPU_MPI_OFF_RANK, sizeof(maker));
	memcpy(&size, id->bytes + CPU_MPI_OFF_SIZE, sizeof(size));
	memcpy(&tag, id->bytes + CPU_MPI_OFF_TAG, sizeof(tag));
	if (!cpu_mpi_job(&wr, &ws))
		return cpu_err(KEEL_STATUS_INVALID_STATE,
			       "comm_init_rank: the id was made for an MPI job of %d processes, but this process is not in a running MPI job of more than one",
			       (int)size);
	if (size != ws || maker < 0 || maker >= ws || tag == 0)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "comm_init_rank: the cross-process id names maker rank %d of an MPI job of %d, but this job has %d processes: the id is damaged or from another job",
			       (int)maker, (int)size, ws);
	if (nranks > ws)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "comm_init_rank: %d ranks across processes, but the MPI job has %d processes (one rank per process)",
			       (int)nranks, ws);
	pthread_once(&cpu_mpi_once, cpu_mpi_setup);
	if (!cpu_mpi_types_ok)
		return cpu_err(KEEL_STATUS_INTERNAL,
			       "comm_init_rank: MPI refused to create the datatypes and reduce operations the cpu plugin needs");
	world = malloc((size_t)nranks * sizeof(*world));
	c = calloc(1, sizeof(*c));
	if (!world || !c) {
		st = cpu_err(KEEL_STATUS_OUT_OF_MEMORY,
			     "comm_init_rank: out of host memory");
		goto out;
	}
	for (int i = 0; i < nranks; i++)
		world[i] = -1;
	st = wr == maker ? cpu_mpi_gather_members(nranks, rank, wr, tag, world,
						  &deadline)
			 : cpu_mpi_join_maker(nranks, rank, wr, maker, tag,
					      world, &deadline);
	if (st)
		goto out;
	if (MPI_Comm_group(MPI_COMM_WORLD, &wgroup) != MPI_SUCCESS ||
	    MPI_Group_incl(wgroup, nranks, world, &group) != MPI_SUCCESS ||
	    MPI_Comm_create_group(MPI_COMM_WORLD, group, (int)tag,
				  &c->comm) != MPI_SUCCESS) {
		st = cpu_err(KEEL_STATUS_DEVICE_ERROR,
			     "comm_init_rank: MPI could not create the communicator of rank %d of %d (MPI rank %d)",
			     (int)rank, (int)nranks, wr);
		goto out;
	}
	MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
	c->rank = rank;
	c->nranks = nranks;
	*out = c;
	c = NULL;
out:
	if (group != MPI_GROUP_NULL)
		MPI_Group_free(&group);
	if (wgroup != MPI_GROUP_NULL)
		MPI_Group_free(&wgroup);
	free(world);
	free(c);
	return st;
}

void cpu_mpi_comm_free(struct cpu_mpi_comm *c)
{
	int fin = 0;

	if (!c)
		return;
	MPI_Finalized(&fin);
	if (!fin && !c->failed && c->comm != MPI_COMM_NULL)
		MPI_Comm_free(&c->comm);
	free(c);
}

/* buf[i] /= n for i < count, after a sum (avg): floats in their own
 * arithmetic (float16/bfloat16 through float32), integers truncated
 * toward zero as the in-process engine does. */
#define CPU_MPI_DIV(T, D)                                                    \
	for (uint64_t i = 0; i < count; i++)                                 \
		((T *)buf)[i] = (T)(((T *)buf)[i] / (D))
#define CPU_MPI_DIV_HALF(TO_F32, FROM_F32)                                   \
	for (uint64_t i = 0; i < count; i++)                                 \
		((uint16_t *)buf)[i] =                                       \
			FROM_F32(TO_F32(((uint16_t *)buf)[i]) / (float)n)

static void cpu_mpi_divide(void *buf, uint64_t count, keel_dtype dt, int n)
{
	switch (dt) {
	case KEEL_F32: CPU_MPI_DIV(float, (float)n); break;
	case KEEL_F64: CPU_MPI_DIV(double, (double)n); break;
	case KEEL_F16: CPU_MPI_DIV_HALF(cpu_f16_to_f32, cpu_f32_to_f16); break;
	case KEEL_BF16: CPU_MPI_DIV_HALF(cpu_bf16_to_f32, cpu_f32_to_bf16); break;
	case KEEL_I8: CPU_MPI_DIV(int8_t, n); break;
	case KEEL_U8: CPU_MPI_DIV(uint8_t, n); break;
	case KEEL_I32: CPU_MPI_DIV(int32_t, n); break;
	case KEEL_I64: CPU_MPI_DIV(int64_t, n); break;
	default: break; /* bool: avg refused before */
	}
}
#undef CPU_MPI_DIV
#undef CPU_MPI_DIV_HALF

/* Largest element count one MPI call takes for this op. */
static bool cpu_mpi_fits(uint64_t count, int n)
{
	return count <= (uint64_t)INT_MAX / (uint64_t)(n > 0 ? n : 1);
}

keel_status cpu_mpi_run(struct cpu_mpi_comm *c, const struct cpu_mpi_call *a,
			char *msg, size_t msg_size)
{
	struct timespec deadline = cpu_deadline_ms(cpu_g.cfg.coll_timeout_ms);
	MPI_Datatype t = cpu_mpi_type[a->dtype];
	MPI_Op op = cpu_mpi_op[a->op < KEEL_REDUCE_OP_COUNT_ ? a->op : 0];
	size_t es = keel_dtype_size(a->dtype);
	uint64_t seq = c->seq++;
	MPI_Request req[2] = { MPI_REQUEST_NULL, MPI_REQUEST_NULL };
	int nreq = 1, rc = MPI_SUCCESS;
	int count = (int)a->count;
	bool in_place = a->send == a->recv;

	if (c->failed) {
		snprintf(msg, msg_size,
			 "%s: this communicator is unusable since %s; end the process",
			 a->name, c->failure);
		return KEEL_STATUS_INVALID_STATE;
	}
	if (!cpu_mpi_fits(a->count, c->nranks)) {
		snprintf(msg, msg_size,
			 "%s: %llu elements on %d ranks is more than one MPI call carries (INT_MAX in all)",
			 a->name, (unsigned long long)a->count, c->nranks);
		return KEEL_STATUS_NOT_SUPPORTED;
	}
	switch (a->kind) {
	case CPU_COLL_ALL_REDUCE:
		rc = MPI_Iallreduce(in_place ? MPI_IN_PLACE : a->send, a->recv,
				    count, t, op, c->comm, &req[0]);
		break;
	case CPU_COLL_BROADCAST:
		if (c->rank == a->root && !in_place)
			memmove(a->recv, a->send, a->count * es);
		rc = MPI_Ibcast(a->recv, count, t, a->root, c->comm, &req[0]);
		break;
	case CPU_COLL_REDUCE:
		rc = MPI_Ireduce(in_place && c->rank == a->root ? MPI_IN_PLACE
								 : a->send,
				 c->rank == a->root ? a->recv : NULL, count, t,
				 op, a->root, c->comm, &req[0]);
		break;
	case CPU_COLL_ALL_GATHER:
		rc = MPI_Iallgather(a->send == (char *)a->recv + (size_t)c->rank *
							       a->count * es
					    ? MPI_IN_PLACE
					    : a->send,
				    count, t, a->recv, count, t, c->comm,
				    &req[0]);
		break;
	case CPU_COLL_REDUCE_SCATTER:
		rc = MPI_Ireduce_scatter_block(in_place ? MPI_IN_PLACE : a->send,
					       a->recv, count, t, op, c->comm,
					       &req[0]);
		break;
	case CPU_COLL_ALL_TO_ALL:
		rc = MPI_Ialltoall(in_place ? MPI_IN_PLACE : a->send, count, t,
				   a->recv, count, t, c->comm, &req[0]);
		break;
	case CPU_COLL_SEND:
		rc = MPI_Isend(a->send, count, t, a->peer, 0, c->comm, &req[0]);
		break;
	case CPU_COLL_RECV:
		rc = MPI_Irecv(a->recv, count, t, a->peer, 0, c->comm, &req[0]);
		break;
	default:
		snprintf(msg, msg_size,
			 "%s: not provided on communicators across processes",
			 a->name);
		return KEEL_STATUS_NOT_SUPPORTED;
	}
	if (rc != MPI_SUCCESS) {
		char text[MPI_MAX_ERROR_STRING];
		int len = 0;

		MPI_Error_string(rc, text, &len);
		snprintf(msg, msg_size, "%s: MPI failed on rank %d of %d: %s",
			 a->name, c->rank, c->nranks, text);
		return KEEL_STATUS_DEVICE_ERROR;
	}
	if (!cpu_mpi_wait_all(req, nreq, &deadline)) {
		snprintf(msg, msg_size,
			 "%s (collective #%llu of this communicator) on rank %d of %d did not complete within %u ms (KEEL_CPU_COLL_TIMEOUT_MS): a peer rank is missing, hung or dead",
			 a->name, (unsigned long long)seq, c->rank, c->nranks,
			 cpu_g.cfg.coll_timeout_ms);
		c->failed = true;
		snprintf(c->failure, sizeof(c->failure),
			 "%s #%llu timed out on rank %d", a->name,
			 (unsigned long long)seq, c->rank);
		return KEEL_STATUS_TIMEOUT;
	}
	if (a->op == KEEL_REDUCE_AVG &&
	    (a->kind == CPU_COLL_ALL_REDUCE || a->kind == CPU_COLL_REDUCE_SCATTER ||
	     (a->kind == CPU_COLL_REDUCE && c->rank == a->root)))
		cpu_mpi_divide(a->recv, a->count, a->dtype, c->nranks);
	return KEEL_STATUS_OK;
}
