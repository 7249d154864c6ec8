/*
 * keel conform — identity and negotiation.
 *
 * Suite "identity" runs without the libkeel runtime: the child dlopens the
 * plugin itself, calls the entry point once with this core's ABI version
 * and a host table of its own, and inspects the raw tables the plugin
 * returns (the loader's copies are normalised and would hide a lie).
 * Suite "loader" checks what the core made of the plugin.
 */
#include <ctype.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "conform.h"

static struct {
    const struct cf_config *cfg;
    void *handle;
    char dlerr[512];
    keel_plugin_get_api_fn entry;
    const keel_plugin_api *api;
    keel_status host_status;
    char host_msg[512];
    bool inited;
} raw;

static void host_set_error(keel_status status, const char *message)
{
    raw.host_status = status;
    snprintf(raw.host_msg, sizeof(raw.host_msg), "%s",
             message ? message : "");
}

static void host_log(keel_log_level level, const char *message)
{
    (void)level;
    (void)message;
}

static const char *host_get_env(const char *name)
{
    return getenv(name);
}

static const keel_host_api host_api = {
    .header = KEEL_TABLE_HEADER(keel_host_api),
    .set_error = host_set_error,
    .log = host_log,
    .get_env = host_get_env,
};

int cf_identity_setup(const struct cf_config *cfg,
                      const struct cf_options *opt, const char *path,
                      char *why, size_t whysz)
{
    const char *e;

    memset(&raw, 0, sizeof(raw));
    memset(&cf_env, 0, sizeof(cf_env));
    raw.cfg = cfg;
    cf_env.cfg = cfg;
    cf_env.opt = opt;
    cf_env.level = opt->level;
    cf_env.plugin_path = path;
    (void)why;
    (void)whysz;
    dlerror();
    raw.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!raw.handle) {
        e = dlerror();
        snprintf(raw.dlerr, sizeof(raw.dlerr), "%s", e ? e : "?");
        return 0;
    }
    *(void **)&raw.entry = dlsym(raw.handle, KEEL_PLUGIN_ENTRY_SYMBOL);
    if (raw.entry)
        raw.api = raw.entry(KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
                            &host_api);
    return 0;
}

void cf_identity_teardown(void)
{
    if (raw.inited && raw.api && raw.api->device && raw.api->device->finalize)
        raw.api->device->finalize();
    /* The plugin stays mapped: its threads may still be winding down. */
}

static bool need_api(void)
{
    if (!raw.handle) {
        CF_FAIL("dlopen failed: %s", raw.dlerr);
        return false;
    }
    if (!raw.entry) {
        CF_FAIL("the plugin does not export %s", KEEL_PLUGIN_ENTRY_SYMBOL);
        return false;
    }
    if (!raw.api) {
        CF_FAIL("%s(%d, %d, host) returned NULL: %s", KEEL_PLUGIN_ENTRY_SYMBOL,
                KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
                raw.host_msg[0] ? raw.host_msg : "(no message)");
        return false;
    }
    return true;
}

static void t_entry_symbol(void)
{
    need_api();
}

/* ---- table headers ---------------------------------------------------------- */

struct table_size {
    const char *name;
    uint32_t size[KEEL_ABI_VERSION_MINOR + 1]; /* by minor */
};

static const struct table_size sizes_plugin = {
    "plugin_api", {offsetof(keel_plugin_api, profiler),
                   sizeof(keel_plugin_api), sizeof(keel_plugin_api),
                   sizeof(keel_plugin_api), sizeof(keel_plugin_api)}};
static const struct table_size sizes_device = {
    "device", {offsetof(keel_device_ops, set_visible_devices),
               offsetof(keel_device_ops, set_visible_devices),
               offsetof(keel_device_ops, set_visible_devices),
               sizeof(keel_device_ops), sizeof(keel_device_ops)}};
static const struct table_size sizes_memory = {
    "memory", {offsetof(keel_memory_ops, copy_peer_async),
               offsetof(keel_memory_ops, register_host),
               offsetof(keel_memory_ops, register_host),
               offsetof(keel_memory_ops, register_host),
               sizeof(keel_memory_ops)}};
static const struct table_size sizes_stream = {
    "stream", {sizeof(keel_stream_ops), sizeof(keel_stream_ops),
               sizeof(keel_stream_ops), sizeof(keel_stream_ops),
               sizeof(keel_stream_ops)}};
static const struct table_size sizes_kernel = {
    "kernel", {sizeof(keel_kernel_ops), sizeof(keel_kernel_ops),
               sizeof(keel_kernel_ops), sizeof(keel_kernel_ops),
               sizeof(keel_kernel_ops)}};
static const struct table_size sizes_collective = {
    "collective", {offsetof(keel_collective_ops, get_caps),
                   offsetof(keel_collective_ops, get_caps),
                   offsetof(keel_collective_ops, get_unique_id_bytes),
                   sizeof(keel_collective_ops), sizeof(keel_collective_ops)}};
static const struct table_size sizes_profiler = {
    "profiler", {sizeof(keel_profiler_ops), sizeof(keel_profiler_ops),
                 sizeof(keel_profiler_ops), sizeof(keel_profiler_ops),
                 sizeof(keel_profiler_ops)}};

/* Each row must name every minor this header knows. */
_Static_assert(KEEL_ABI_VERSION_MINOR == 4,
               "a new ABI minor: add its table sizes above");

static void check_header(const struct table_size *ts, const void *table)
{
    const keel_table_header *h = table;
    uint32_t want;

    if (!CF_CHECK(h->abi_major == KEEL_ABI_VERSION_MAJOR,
                  "table '%s': ABI major %u, this core speaks %d", ts->name,
                  h->abi_major, KEEL_ABI_VERSION_MAJOR))
        return;
    if (h->abi_minor > KEEL_ABI_VERSION_MINOR) {
        CF_CHECK(h->struct_size >= ts->size[KEEL_ABI_VERSION_MINOR],
                 "table '%s' claims ABI %u.%u (newer than this core's %d.%d) "
                 "but its struct_size %u is smaller than ABI %d.%d's %u bytes",
                 ts->name, h->abi_major, h->abi_minor, KEEL_ABI_VERSION_MAJOR,
                 KEEL_ABI_VERSION_MINOR, h->struct_size,
                 KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
                 ts->size[KEEL_ABI_VERSION_MINOR]);
        return;
    }
    want = ts->size[h->abi_minor];
    CF_CHECK(h->struct_size == want,
             "table '%s' claims ABI %u.%u, whose struct_size is exactly %u "
             "bytes, but it says %u",
             ts->name, h->abi_major, h->abi_minor, want, h->struct_size);
}

static const keel_profiler_ops *raw_profiler(void)
{
    const keel_table_header *h = &raw.api->header;

    if (h->abi_minor < 1 ||
        h->struct_size < offsetof(keel_plugin_api, profiler) +
                             sizeof(raw.api->profiler))
        return NULL;
    return raw.api->profiler;
}

static void t_table_headers(void)
{
    if (!need_api())
        return;
    check_header(&sizes_plugin, raw.api);
    if (raw.api->header.abi_major != KEEL_ABI_VERSION_MAJOR ||
        raw.api->header.struct_size < offsetof(keel_plugin_api, kernel))
        return;
    if (CF_CHECK(raw.api->device, "the device table is NULL"))
        check_header(&sizes_device, raw.api->device);
    if (CF_CHECK(raw.api->memory, "the memory table is NULL"))
        check_header(&sizes_memory, raw.api->memory);
    if (CF_CHECK(raw.api->stream, "the stream table is NULL"))
        check_header(&sizes_stream, raw.api->stream);
    if (raw.api->kernel)
        check_header(&sizes_kernel, raw.api->kernel);
    if (raw.api->collective)
        check_header(&sizes_collective, raw.api->collective);
    if (raw_profiler())
        check_header(&sizes_profiler, raw_profiler());
}

/* ---- identity strings --------------------------------------------------------- */

static bool valid_ident(const char *s)
{
    size_t n;

    if (!s || !*s || isdigit((unsigned char)s[0]))
        return false;
    for (n = 0; s[n]; n++)
        if (!(islower((unsigned char)s[n]) || isdigit((unsigned char)s[n]) ||
              s[n] == '_'))
            return false;
    return n <= 32;
}

static void t_identity_strings(void)
{
    if (!need_api())
        return;
    CF_CHECK(valid_ident(raw.api->name),
             "name %s%s%s is not a lower-case identifier "
             "([a-z_][a-z0-9_]{0,31})",
             raw.api->name ? "'" : "", raw.api->name ? raw.api->name : "NULL",
             raw.api->name ? "'" : "");
    CF_CHECK(valid_ident(raw.api->device_type),
             "device_type %s%s%s is not a lower-case identifier",
             raw.api->device_type ? "'" : "",
             raw.api->device_type ? raw.api->device_type : "NULL",
             raw.api->device_type ? "'" : "");
    CF_CHECK(raw.api->version && raw.api->version[0],
             "the plugin has no version string");
    CF_CHECK(raw.api->description && raw.api->description[0],
             "the plugin has no description (one line for humans)");
}

/* ---- required functions ---------------------------------------------------------- */

#define NEED(tbl, member)                                                    \
    CF_CHECK((tbl)->member, "required function %s.%s is NULL", #tbl, #member)

static void t_required_functions(void)
{
    const keel_device_ops *device;
    const keel_memory_ops *memory;
    const keel_stream_ops *stream;
    const keel_collective_ops *collective;
    const keel_profiler_ops *profiler;

    if (!need_api() || !raw.api->device || !raw.api->memory ||
        !raw.api->stream) {
        CF_CHECK(!raw.api || (raw.api->device && raw.api->memory &&
                              raw.api->stream),
                 "a required table (device, memory, stream) is NULL");
        return;
    }
    device = raw.api->device;
    memory = raw.api->memory;
    stream = raw.api->stream;
    NEED(device, init);
    NEED(device, finalize);
    NEED(device, get_device_count);
    NEED(device, get_device_props);
    NEED(device, synchronize);
    NEED(memory, alloc);
    NEED(memory, free);
    NEED(memory, memset);
    NEED(memory, memset_async);
    NEED(memory, copy_h2d);
    NEED(memory, copy_d2h);
    NEED(memory, copy_d2d);
    NEED(memory, copy_h2d_async);
    NEED(memory, copy_d2h_async);
    NEED(memory, copy_d2d_async);
    NEED(memory, get_memory_info);
    NEED(stream, stream_create);
    NEED(stream, stream_destroy);
    NEED(stream, stream_synchronize);
    NEED(stream, stream_query);
    NEED(stream, stream_wait_event);
    NEED(stream, event_create);
    NEED(stream, event_destroy);
    NEED(stream, event_record);
    NEED(stream, event_query);
    NEED(stream, event_synchronize);
    CF_CHECK(!!memory->host_alloc == !!memory->host_free,
             "memory.host_alloc and memory.host_free must come together");
    CF_CHECK(!!memory->unified_alloc == !!memory->unified_free,
             "memory.unified_alloc and memory.unified_free must come "
             "together");
    if (raw.api->kernel)
        CF_CHECK(raw.api->kernel->lookup,
                 "the kernel group is provided but kernel.lookup is NULL");
    collective = raw.api->collective;
    if (collective) {
        NEED(collective, get_unique_id);
        NEED(collective, comm_init_rank);
        NEED(collective, comm_destroy);
        NEED(collective, comm_rank);
        NEED(collective, all_reduce);
        NEED(collective, broadcast);
        NEED(collective, reduce);
        NEED(collective, all_gather);
        NEED(collective, reduce_scatter);
        NEED(collective, all_to_all);
        NEED(collective, send);
        NEED(collective, recv);
        NEED(collective, group_start);
        NEED(collective, group_end);
    }
    profiler = raw_profiler();
    if (profiler) {
        NEED(profiler, start);
        NEED(profiler, stop);
        NEED(profiler, range_push);
        NEED(profiler, range_pop);
    }
}

/* ---- before init: count and props, features vs tables ----------------------------- */

static bool raw_count(int32_t *n)
{
    *n = -1;
    if (!need_api() || !raw.api->device || !raw.api->device->get_device_count)
        return false;
    if (!CF_OK(raw.api->device->get_device_count(n),
               "device.get_device_count before init"))
        return false;
    return CF_CHECK(*n >= 0, "device.get_device_count gave %d", (int)*n);
}

static void t_count_before_init(void)
{
    int32_t n, n2;

    if (!raw_count(&n))
        return;
    CF_EXPECT(raw.api->device->get_device_count(NULL),
              KEEL_STATUS_INVALID_ARGUMENT, "device.get_device_count(NULL)");
    if (CF_OK(raw.api->device->get_device_count(&n2),
              "device.get_device_count (second call)"))
        CF_CHECK(n == n2, "the device count changed from %d to %d between "
                          "two calls",
                 (int)n, (int)n2);
}

static void check_features(int32_t d, const keel_device_props *p)
{
    const keel_memory_ops *m = raw.api->memory;
    const keel_stream_ops *s = raw.api->stream;
    uint32_t f = p->features, known;

    CF_CHECK(!(f & KEEL_FEATURE_PINNED_HOST) == !m->host_alloc,
             "device %d: pinned_host is %s but memory.host_alloc is %s "
             "(NULL exactly when the feature is off)",
             (int)d, f & KEEL_FEATURE_PINNED_HOST ? "on" : "off",
             m->host_alloc ? "provided" : "NULL");
    CF_CHECK(!(f & KEEL_FEATURE_UNIFIED_MEMORY) || m->unified_alloc,
             "device %d claims unified_memory without memory.unified_alloc",
             (int)d);
    CF_CHECK(!(f & KEEL_FEATURE_PEER_ACCESS) || m->copy_peer,
             "device %d claims peer_access without memory.copy_peer", (int)d);
    CF_CHECK(!(f & KEEL_FEATURE_COLLECTIVES) == !raw.api->collective,
             "device %d: collectives is %s but the collective group is %s",
             (int)d, f & KEEL_FEATURE_COLLECTIVES ? "on" : "off",
             raw.api->collective ? "provided" : "NULL");
    CF_CHECK(!(f & KEEL_FEATURE_EVENT_TIMING) || s->event_elapsed_ms,
             "device %d claims event_timing without stream.event_elapsed_ms",
             (int)d);
    CF_CHECK(!(f & KEEL_FEATURE_HOST_CALLBACK) || s->launch_host_func,
             "device %d claims host_callback without stream.launch_host_func",
             (int)d);
    CF_CHECK(!(f & KEEL_FEATURE_KERNELS) == !raw.api->kernel,
             "device %d: kernels is %s but the kernel group is %s", (int)d,
             f & KEEL_FEATURE_KERNELS ? "on" : "off",
             raw.api->kernel ? "provided" : "NULL");
    /* Bits up to the minor the plugin claims: host_addresses is 1.4. */
    known = raw.api->header.abi_minor >= 4
                ? (KEEL_FEATURE_HOST_ADDRESSES << 1) - 1
                : (KEEL_FEATURE_STREAM_PRIORITY << 1) - 1;
    CF_CHECK(!(f & ~known),
             "device %d sets unknown feature bits %#x (ABI %u.%u)", (int)d,
             f & ~known, raw.api->header.abi_major,
             raw.api->header.abi_minor);
    CF_CHECK(!(p->dtype_mask & ~((1u << KEEL_DTYPE_COUNT_) - 1)),
             "device %d sets unknown dtype bits %#x", (int)d,
             p->dtype_mask & ~((1u << KEEL_DTYPE_COUNT_) - 1));
}

static void t_props_before_init(void)
{
    int32_t n;

    if (!raw_count(&n))
        return;
    if (n == 0)
        cf_skip("the plugin reports no device before init");
    for (int32_t d = 0; d < n && d < CF_MAX_DEVICES; d++) {
        keel_device_props p;

        memset(&p, 0, sizeof(p));
        p.struct_size = sizeof(p);
        if (!CF_OK(raw.api->device->get_device_props(d, &p),
                   "device.get_device_props(%d) before init", (int)d))
            continue;
        check_features(d, &p);
    }
}

/* The configuration's claims against what every device reports. */
static void t_claims(void)
{
    const struct cf_config *cfg = raw.cfg;
    int32_t n;

    if (!cfg->dtypes_claimed && !cfg->feature_given) {
        cf_skip("the configuration claims no dtypes or features");
        return;
    }
    if (!raw_count(&n))
        return;
    for (int32_t d = 0; d < n && d < CF_MAX_DEVICES; d++) {
        keel_device_props p;
        uint32_t diff;

        memset(&p, 0, sizeof(p));
        p.struct_size = sizeof(p);
        if (!CF_OK(raw.api->device->get_device_props(d, &p),
                   "device.get_device_props(%d)", (int)d))
            continue;
        diff = cfg->dtypes_claimed ? (p.dtype_mask ^ cfg->claimed_dtypes) : 0;
        for (int dt = 0; dt < KEEL_DTYPE_COUNT_; dt++)
            if (diff & KEEL_DTYPE_BIT(dt))
                CF_FAIL("device %d: the configuration %s dtype %s, the "
                        "plugin %s it",
                        (int)d,
                        cfg->claimed_dtypes & KEEL_DTYPE_BIT(dt)
                            ? "claims"
                            : "does not claim",
                        cf_dtype_name(dt),
                        p.dtype_mask & KEEL_DTYPE_BIT(dt) ? "reports"
                                                          : "does not report");
        diff = (p.features ^ cfg->feature_value) & cfg->feature_given;
        for (uint32_t b = 0; b < 32; b++)
            if (diff & (1u << b))
                CF_FAIL("device %d: the configuration says %s: %s, the "
                        "plugin reports it %s",
                        (int)d, cf_feature_name(1u << b),
                        cfg->feature_value & (1u << b) ? "true" : "false",
                        p.features & (1u << b) ? "on" : "off");
    }
}

static void t_init_count_finalize(void)
{
    int32_t before, after;
    keel_status st;

    if (!raw_count(&before))
        return;
    raw.host_msg[0] = '\0';
    st = raw.api->device->init();
    if (st == KEEL_STATUS_UNAVAILABLE) {
        cf_skip("device.init returned UNAVAILABLE (no driver): %s",
                raw.host_msg);
        return;
    }
    if (!CF_OK(st, "device.init (%s)", raw.host_msg))
        return;
    raw.inited = true;
    if (CF_OK(raw.api->device->get_device_count(&after),
              "device.get_device_count after init"))
        CF_CHECK(after == before,
                 "device count %d before init but %d after", (int)before,
                 (int)after);
    CF_OK(raw.api->device->finalize(), "device.finalize");
    raw.inited = false;
}

/* ---- loader suite (core context) -------------------------------------------------- */

static void t_core_accepts(void)
{
    keel_plugin_info info;

    if (!CF_OK(keel_plugin_get_info(cf_env.plugin, &info),
               "keel_plugin_get_info"))
        return;
    CF_CHECK(info.loaded && info.status == KEEL_STATUS_OK,
             "the core did not load the plugin [%s]: %s",
             info.failed_check ? info.failed_check : "?",
             info.reason ? info.reason : "");
    CF_CHECK(info.device_count > 0, "the plugin has no device: %s",
             info.reason ? info.reason : "(no reason given)");
    CF_CHECK(info.abi_major == KEEL_ABI_VERSION_MAJOR,
             "ABI major %u, this core speaks %d", info.abi_major,
             KEEL_ABI_VERSION_MAJOR);
}

static void t_props_struct_size(void)
{
    for (int i = 0; i < cf_env.ndev; i++) {
        int32_t d = cf_env.dev[i];
        unsigned char big[sizeof(keel_device_props) + 64];
        keel_device_props small;
        uint32_t cut = (uint32_t)offsetof(keel_device_props, total_memory);
        uint32_t n;

        /* An older caller: a shorter struct. */
        memset(&small, 0xA5, sizeof(small));
        small.struct_size = cut;
        if (CF_OK(cf_env.api->device->get_device_props(d, &small),
                  "device.get_device_props(%d) with struct_size %u",
                  (int)d, cut)) {
            const unsigned char *b = (const unsigned char *)&small;
            CF_CHECK(small.struct_size <= cut,
                     "device %d: asked for %u bytes of props, the plugin "
                     "says it wrote %u",
                     (int)d, cut, small.struct_size);
            for (size_t k = cut; k < sizeof(small); k++)
                if (!CF_CHECK(b[k] == 0xA5,
                              "device %d: struct_size was %u but the plugin "
                              "wrote byte %zu of keel_device_props",
                              (int)d, cut, k))
                    break;
            CF_CHECK(!strncmp(small.name, cf_env.props[i].name,
                              sizeof(small.name)),
                     "device %d: the name read with a short struct differs",
                     (int)d);
        }
        /* A newer caller: a longer struct. */
        memset(big, 0xA5, sizeof(big));
        n = sizeof(big);
        memcpy(big, &n, sizeof(n));
        if (CF_OK(cf_env.api->device->get_device_props(
                      d, (keel_device_props *)(void *)big),
                  "device.get_device_props(%d) with struct_size %u", (int)d,
                  n)) {
            memcpy(&n, big, sizeof(n));
            CF_CHECK(n <= sizeof(big) && n >= sizeof(uint32_t),
                     "device %d: the plugin wrote back struct_size %u for a "
                     "%zu-byte struct",
                     (int)d, n, sizeof(big));
            for (size_t k = n; k < sizeof(big) && n <= sizeof(big); k++)
                if (!CF_CHECK(big[k] == 0xA5,
                              "device %d: the plugin says it filled %u bytes "
                              "but wrote byte %zu",
                              (int)d, n, k))
                    break;
        }
    }
}

const struct cf_test_spec cf_identity_tests[] = {
    {"identity", "entry_symbol", CF_LEVEL_SMOKE, t_entry_symbol,
     "dlopen works and keel_plugin_get_api returns a table for this ABI"},
    {"identity", "table_headers", CF_LEVEL_SMOKE, t_table_headers,
     "every table has ABI major 1 and the exact struct_size of its minor"},
    {"identity", "identity_strings", CF_LEVEL_SMOKE, t_identity_strings,
     "name and device type are identifiers; version and description set"},
    {"identity", "required_functions", CF_LEVEL_SMOKE, t_required_functions,
     "required functions present; optional groups complete"},
    {"identity", "count_before_init", CF_LEVEL_SMOKE, t_count_before_init,
     "get_device_count works before init and rejects NULL"},
    {"identity", "props_before_init", CF_LEVEL_SMOKE, t_props_before_init,
     "props work before init; feature bits match the tables"},
    {"identity", "config_claims", CF_LEVEL_SMOKE, t_claims,
     "dtypes and features claimed in the configuration are reported"},
    {"identity", "init_count_finalize", CF_LEVEL_SMOKE, t_init_count_finalize,
     "init, same device count, finalize"},
    {"loader", "core_accepts", CF_LEVEL_SMOKE, t_core_accepts,
     "the core's loader accepts the plugin and finds devices"},
    {"loader", "props_struct_size", CF_LEVEL_SMOKE, t_props_struct_size,
     "get_device_props honours a shorter and a longer struct_size"},
    {NULL, NULL, 0, NULL, NULL},
};
