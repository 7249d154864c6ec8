/*
 * The CUDA driver of the before/after test: the CUDA plugin's kernel entry
 * points called on a machine without a GPU. This file is linked with the
 * plugin's own sources and nvcc objects and with
 *
 *     -Wl,--wrap=cuda_enter -Wl,--wrap=cuda_stream_resolve
 *
 * so that ck_begin (plugins/gpu/kernels/cuda_kernels.c) finds "device 0,
 * the default stream" without a device: the argument checks run, and a
 * launch that passes them fails at its first CUDA call for lack of a
 * device (a status other than OK, INVALID_ARGUMENT and NOT_SUPPORTED:
 * PASSED-CHECKS). Descriptors point at fake device addresses, which no
 * check dereferences on the host. The kernel tables (ck.h) are read
 * directly: the plugin's lookup wants an initialised device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc.h"

/* As in plugins/gpu/kernels/ck.h (unchanged since before the kit). */
struct ck_entry {
    const char *op;
    uint32_t dtypes;
    keel_kernel_fn fn;
};

extern const struct ck_entry ck_kernels_core[];
extern const struct ck_entry ck_kernels_elementwise[];
extern const struct ck_entry ck_kernels_reduce[];
extern const struct ck_entry ck_kernels_linalg[];
extern const struct ck_entry ck_kernels_conv[];
extern const struct ck_entry ck_kernels_nn[];
extern const struct ck_entry ck_kernels_manip[];

keel_status __wrap_cuda_enter(int32_t device, const char *call);
keel_status __wrap_cuda_stream_resolve(int32_t device, keel_stream stream,
                                       const char *call, void **out);

keel_status __wrap_cuda_enter(int32_t device, const char *call)
{
    return device == 0 ? KEEL_STATUS_OK : KEEL_STATUS_INVALID_DEVICE;
}

keel_status __wrap_cuda_stream_resolve(int32_t device, keel_stream stream,
                                       const char *call, void **out)
{
    *out = NULL; /* the legacy default stream */
    return KEEL_STATUS_OK;
}

/* The plugin's entry point sets its host table (messages go there). */
const keel_plugin_api *keel_plugin_get_api(uint32_t major, uint32_t minor,
                                           const keel_host_api *h);

static void host_set_error(keel_status status, const char *message)
{
    if (getenv("KC_VERBOSE"))
        fprintf(stderr, "  cuda: %s\n", message);
}

static void host_log(keel_log_level level, const char *message)
{
}

static const char *host_get_env(const char *name)
{
    return getenv(name);
}

static const keel_host_api host = {
    KEEL_TABLE_HEADER(keel_host_api), host_set_error, host_log, host_get_env};

static int cuda_setup(const char *arg, char *err, size_t errsz)
{
    if (!keel_plugin_get_api(KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
                             &host)) {
        snprintf(err, errsz, "cuda: keel_plugin_get_api returned NULL");
        return -1;
    }
    return 0;
}

static keel_dptr next_fake = 0x7f0000000000ull;

static int cuda_prepare(struct kc_case *c)
{
    for (int i = 0; i < c->args.num_inputs; i++) {
        c->in[i].data = next_fake;
        next_fake += 1ull << 30;
    }
    for (int i = 0; i < c->args.num_outputs; i++) {
        c->out[i].data = next_fake;
        next_fake += 1ull << 30;
    }
    return 0;
}

static struct kc_result cuda_run(const struct kc_case *c,
                                 const keel_kernel_args *a)
{
    static const struct ck_entry *const tables[] = {
        ck_kernels_core,   ck_kernels_elementwise, ck_kernels_reduce,
        ck_kernels_linalg, ck_kernels_conv,        ck_kernels_nn,
        ck_kernels_manip,
    };
    const char *name = keel_kit_op_info(c->op)->name;
    keel_dtype dt = kc_key_dtype(c);
    keel_status st;

    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
        for (const struct ck_entry *e = tables[t]; e->op; e++)
            if (!strcmp(e->op, name) && (e->dtypes & KEEL_DTYPE_BIT(dt))) {
                st = e->fn(NULL, a);
                if (st == KEEL_STATUS_OK)
                    return (struct kc_result){KC_ACCEPTED, 0};
                if (st == KEEL_STATUS_INVALID_ARGUMENT ||
                    st == KEEL_STATUS_NOT_SUPPORTED)
                    return (struct kc_result){KC_REJECTED, (int)st};
                return (struct kc_result){KC_PASSED, (int)st};
            }
    return (struct kc_result){KC_NONE, KEEL_STATUS_NOT_FOUND};
}

static void cuda_release(struct kc_case *c)
{
}

const struct kc_driver kc_driver_cuda = {"cuda", true, cuda_setup, cuda_prepare,
                                         cuda_run, cuda_release};
const bool kc_have_cuda = true;
