/* keel OpenCL C kernels: nn family (see common.cl). */
