/*
 * The kit and CPU drivers of the before/after test.
 *
 * cpu: the CPU plugin loaded with dlopen, as the core would load it, its
 * kernels looked up and called directly. Every tensor of the valid launch
 * gets its own plugin allocation, zero-filled and large enough for every
 * mutant (kc_buffer_bytes), so that an accepted mutant computes on valid
 * memory (zeros: index inputs 0, so that data-dependent checks pass) and
 * the plugin's own extent checks see live allocations.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc.h"

static struct kc_result verdict(keel_status st)
{
    struct kc_result r = {KC_OTHER, (int)st};

    if (st == KEEL_STATUS_OK)
        r.v = KC_ACCEPTED;
    else if (st == KEEL_STATUS_INVALID_ARGUMENT ||
             st == KEEL_STATUS_NOT_SUPPORTED)
        r.v = KC_REJECTED;
    return r;
}

/* ---- kit ------------------------------------------------------------------ */

static int kit_setup(const char *arg, char *err, size_t errsz)
{
    return 0;
}

static int kit_prepare(struct kc_case *c)
{
    return 0;
}

static struct kc_result kit_run(const struct kc_case *c,
                                const keel_kernel_args *a)
{
    return verdict(keel_kit_check(c->op, a, NULL));
}

static void kit_release(struct kc_case *c)
{
}

const struct kc_driver kc_driver_kit = {"kit", false, kit_setup, kit_prepare,
                                        kit_run, kit_release};

/* ---- cpu ------------------------------------------------------------------ */

static const keel_plugin_api *cpu;

static void host_set_error(keel_status status, const char *message)
{
    if (getenv("KC_VERBOSE"))
        fprintf(stderr, "  plugin: %s\n", message);
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

static int cpu_setup(const char *path, char *err, size_t errsz)
{
    keel_plugin_get_api_fn get;
    void *h;

    if (!path) {
        snprintf(err, errsz, "cpu: no plugin path given");
        return -1;
    }
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(err, errsz, "cpu: dlopen(%s): %s", path, dlerror());
        return -1;
    }
    {
        /* ISO C has no object-to-function pointer conversion: copy it */
        void *sym = dlsym(h, "keel_plugin_get_api");
        memcpy(&get, &sym, sizeof(get));
    }
    if (!get) {
        snprintf(err, errsz, "cpu: %s has no keel_plugin_get_api", path);
        return -1;
    }
    cpu = get(KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, &host);
    if (!cpu || !cpu->kernel || cpu->device->init() != KEEL_STATUS_OK) {
        snprintf(err, errsz, "cpu: %s: no table, no kernels or init failed",
                 path);
        return -1;
    }
    return 0;
}

static int cpu_alloc(keel_tensor_desc *d)
{
    uint64_t n = kc_buffer_bytes(d);
    keel_dptr p = 0;

    if (cpu->memory->alloc(0, n, &p) != KEEL_STATUS_OK ||
        cpu->memory->memset(0, p, 0, n) != KEEL_STATUS_OK)
        return -1;
    /* start in the middle, so that a stride the mutation left pointing
     * "before" the data still lands in the allocation */
    d->data = p;
    return 0;
}

static int cpu_prepare(struct kc_case *c)
{
    for (int i = 0; i < c->args.num_inputs; i++)
        if (cpu_alloc(&c->in[i]))
            return -1;
    for (int i = 0; i < c->args.num_outputs; i++)
        if (cpu_alloc(&c->out[i]))
            return -1;
    return 0;
}

static struct kc_result cpu_run(const struct kc_case *c,
                                const keel_kernel_args *a)
{
    keel_kernel k;
    keel_status st;
    struct kc_result r;

    memset(&k, 0, sizeof(k));
    st = cpu->kernel->lookup(0, keel_kit_op_info(c->op)->name,
                             kc_key_dtype(c), &k);
    if (st != KEEL_STATUS_OK || !k.fn)
        return (struct kc_result){KC_NONE, (int)st};
    r = verdict(k.fn(k.kernel_data, a));
    if (r.v == KC_ACCEPTED) {
        st = cpu->stream->stream_synchronize(0, NULL);
        if (st != KEEL_STATUS_OK)
            r = (struct kc_result){KC_OTHER, (int)st};
    }
    return r;
}

static void cpu_release(struct kc_case *c)
{
    for (int i = 0; i < c->args.num_inputs; i++)
        if (c->in[i].data)
            cpu->memory->free(0, c->in[i].data);
    for (int i = 0; i < c->args.num_outputs; i++)
        if (c->out[i].data)
            cpu->memory->free(0, c->out[i].data);
}

const struct kc_driver kc_driver_cpu = {"cpu", true, cpu_setup, cpu_prepare,
                                        cpu_run, cpu_release};
