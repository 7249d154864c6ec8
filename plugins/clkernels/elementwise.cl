/* keel OpenCL C kernels: elementwise family (see common.cl). */
