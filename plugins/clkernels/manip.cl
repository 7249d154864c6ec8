/* keel OpenCL C kernels: manip family (see common.cl). */
