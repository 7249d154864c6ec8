/* keel OpenCL plugin — collectives (placeholder). */
#include "ocl_internal.h"

const keel_collective_ops ocl_collective_ops = {
    .header = KEEL_TABLE_HEADER(keel_collective_ops),
};

void ocl_coll_finalize(void)
{
}
