/*
 * keel CPU reference plugin — communicators across processes over Open MPI
 * (cpu_coll_mpi.c). Built when meson finds MPI (KEEL_CPU_HAVE_MPI); without
 * it the functions below are stubs that say no MPI job is running, and
 * every communicator stays inside the process.
 */
#ifndef KEEL_CPU_COLL_MPI_H
#define KEEL_CPU_COLL_MPI_H

#include <stdbool.h>
#include <stddef.h>

#include "cpu_internal.h"

/* One collective on host addresses, already validated. */
struct cpu_mpi_call {
	enum cpu_coll_kind kind; /* CPU_COLL_ALL_TO_ALLV: not provided */
	const char *name;
	void *send;
	void *recv;
	uint64_t count;
	keel_dtype dtype;
	keel_reduce_op op;
	int32_t root;
	int32_t peer;
};

struct cpu_mpi_comm;

#ifdef KEEL_CPU_HAVE_MPI
/* True when MPI is initialised, not finalised, and the world has more than
 * one process; *world_rank / *world_size (may be NULL) receive them. */
bool cpu_mpi_job(int *world_rank, int *world_size);
/* Whether `id` is a cross-process id (made by cpu_mpi_unique_id). */
bool cpu_mpi_id_is(const keel_comm_id *id);
/* Mark `id` (already filled with random bytes) as a cross-process id of
 * this job. NOT_FOUND when no MPI job of more than one process runs. */
keel_status cpu_mpi_unique_id(keel_comm_id *id);
/* Join the cross-process communicator of `id` (reports its failures). */
keel_status cpu_mpi_comm_init(const keel_comm_id *id, int32_t nranks,
			      int32_t rank, struct cpu_mpi_comm **out);
void cpu_mpi_comm_free(struct cpu_mpi_comm *c);
/* Run one call to completion; on failure, msg says why. */
keel_status cpu_mpi_run(struct cpu_mpi_comm *c, const struct cpu_mpi_call *a,
			char *msg, size_t msg_size);
#else
static inline bool cpu_mpi_job(int *world_rank, int *world_size)
{
	(void)world_rank;
	(void)world_size;
	return false;
}
static inline bool cpu_mpi_id_is(const keel_comm_id *id)
{
	(void)id;
	return false;
}
static inline keel_status cpu_mpi_unique_id(keel_comm_id *id)
{
	(void)id;
	return KEEL_STATUS_NOT_FOUND;
}
static inline keel_status cpu_mpi_comm_init(const keel_comm_id *id,
					    int32_t nranks, int32_t rank,
					    struct cpu_mpi_comm **out)
{
	(void)id;
	(void)nranks;
	(void)rank;
	(void)out;
	return KEEL_STATUS_NOT_SUPPORTED;
}
static inline void cpu_mpi_comm_free(struct cpu_mpi_comm *c)
{
	(void)c;
}
static inline keel_status cpu_mpi_run(struct cpu_mpi_comm *c,
				      const struct cpu_mpi_call *a, char *msg,
				      size_t msg_size)
{
	(void)c;
	(void)a;
	(void)msg;
	(void)msg_size;
	return KEEL_STATUS_NOT_SUPPORTED;
}
#endif

#endif /* KEEL_CPU_COLL_MPI_H */
