/*
 * A stand-in for the CUDA driver, libcuda.so.1, for the front's tests
 * (test_cuda_lazy.c --mock-device / --mock-no-device). It has only what
 * the front calls: cuInit, cuDeviceGetCount, cuGetErrorName and
 * cuGetErrorString, answering as the environment says:
 *
 *   KEEL_MOCK_CUDA_INIT   the CUresult cuInit returns (default 0)
 *   KEEL_MOCK_CUDA_COUNT  the device count (default 1)
 *
 * It is not a driver: the backend's CUDA runtime finds none of the entry
 * points it needs in it and reports no driver, which is what lets the
 * tests reach the front's "a device is present" path on a machine with no
 * GPU. Loaded through LD_LIBRARY_PATH, so only by the tests that set it.
 */
#include <stdlib.h>

#define MOCK_EXPORT __attribute__((visibility("default")))

MOCK_EXPORT int cuInit(unsigned int flags);
MOCK_EXPORT int cuDeviceGetCount(int *count);
MOCK_EXPORT int cuGetErrorName(int err, const char **name);
MOCK_EXPORT int cuGetErrorString(int err, const char **text);

static int env_int(const char *name, int fallback)
{
    const char *v = getenv(name);

    return v && *v ? atoi(v) : fallback;
}

int cuInit(unsigned int flags)
{
    (void)flags;
    return env_int("KEEL_MOCK_CUDA_INIT", 0);
}

int cuDeviceGetCount(int *count)
{
    if (!count)
        return 1; /* CUDA_ERROR_INVALID_VALUE */
    *count = env_int("KEEL_MOCK_CUDA_COUNT", 1);
    return 0;
}

int cuGetErrorName(int err, const char **name)
{
    if (!name)
        return 1;
    *name = err == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
    return 0;
}

int cuGetErrorString(int err, const char **text)
{
    if (!text)
        return 1;
    *text = err == 100 ? "no CUDA-capable device is detected (mock driver)"
                       : "unknown error (mock driver)";
    return 0;
}
