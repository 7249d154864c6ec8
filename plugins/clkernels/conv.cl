/* keel OpenCL C kernels: conv family (see common.cl). */
