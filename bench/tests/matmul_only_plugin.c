/*
 * A partial plugin for the %peak test: a proxy over the CPU plugin
 * (MO_REAL, the path of libkeel-cpu.so in the build tree) whose kernel
 * lookup finds float32 matmul and nothing else, the way a new port starts.
 * In strict mode every other op is refused, so the peak probe must get its
 * inputs onto the device without the device's own `uniform` kernel.
 *
 * Built with -DMO_NO_HALF it is instead the CPU plugin without any
 * float16 or bfloat16 kernel (plugin and type "nohalf"): the device that
 * core/tests/test_amp.c runs auto_cast on to see it fall back to float32.
 */
#include <dlfcn.h>
#include <string.h>

#include <keel/device_api.h>

#ifndef MO_REAL
#error "MO_REAL must be the path of libkeel-cpu.so"
#endif

static const keel_plugin_api *real;
static keel_plugin_api api;
static keel_kernel_ops ker_ops;

static keel_status only_matmul(int32_t device, const char *op, keel_dtype dt,
                               keel_kernel *k)
{
#ifdef MO_NO_HALF
    if (dt == KEEL_F16 || dt == KEEL_BF16)
        return KEEL_STATUS_NOT_FOUND;
#else
    if (strcmp(op, "matmul") != 0 || dt != KEEL_F32)
        return KEEL_STATUS_NOT_FOUND;
#endif
    return real->kernel->lookup(device, op, dt, k);
}

KEEL_PLUGIN_EXPORT const keel_plugin_api *keel_plugin_get_api(
    uint32_t major, uint32_t minor, const keel_host_api *host)
{
    keel_plugin_get_api_fn entry;
    void *h = dlopen(MO_REAL, RTLD_NOW | RTLD_LOCAL);

    if (!h) {
        if (host && host->set_error)
            host->set_error(KEEL_STATUS_UNAVAILABLE, dlerror());
        return NULL;
    }
    *(void **)&entry = dlsym(h, KEEL_PLUGIN_ENTRY_SYMBOL);
    real = entry ? entry(major, minor, host) : NULL;
    if (!real || !real->kernel)
        return NULL;
    api = *real;
    ker_ops = *real->kernel;
    ker_ops.lookup = only_matmul;
    api.kernel = &ker_ops;
    api.collective = NULL;
#ifdef MO_NO_HALF
    api.name = "nohalf";
    api.device_type = "nohalf";
    api.version = "0.0.1";
    api.description = "keel test plugin: the CPU plugin without float16 "
                      "and bfloat16 kernels";
#else
    api.name = "matmul_only";
    api.device_type = "matmul_only";
    api.version = "0.0.1";
    api.description = "keel bench test plugin: float32 matmul kernels only";
#endif
    return &api;
}
