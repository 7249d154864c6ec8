/* keel OpenCL plugin — program build and cache, launches (ok.h). */
#include "ok.h"

void ok_device_release(struct ocl_device *d)
{
    (void)d;
}
