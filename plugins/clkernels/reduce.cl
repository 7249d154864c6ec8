/* keel OpenCL C kernels: reduce family (see common.cl). */
