/* keel OpenCL C kernels: linalg family (see common.cl). */
