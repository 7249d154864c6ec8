/*
 * Plugin discovery, loading and ABI negotiation.
 *
 * Each candidate file goes through the checks below, in order; the first
 * that fails skips the plugin and records its name and a precise reason.
 *
 *   dlopen            the path does not resolve (realpath), or
 *                     dlopen(RTLD_NOW | RTLD_LOCAL) of the resolved
 *                     absolute path failed (dlerror text)
 *   file              the resolved path is not a regular file (a FIFO would
 *                     block dlopen)
 *   permissions       the file or its folder can be changed by another user
 *                     (writable by everyone, or owned by a user that is
 *                     neither this one nor root) and strict permissions are
 *                     on (KEEL_PLUGIN_STRICT_PERMS=1, or a setuid/setgid
 *                     process); otherwise this is a warning on stderr
 *   entry-symbol      keel_plugin_get_api is not exported
 *   get-api           the entry returned NULL (plugin's own message)
 *   abi-major         a table's ABI major differs from the core's
 *   table-size        a table is smaller than its claimed minor requires
 *   required-function a required function pointer is NULL
 *   identity          name / device type / version missing or malformed
 *   duplicate-name    another loaded plugin already has this name
 *   init              device.init failed (UNAVAILABLE is not a failure:
 *                     the plugin stays loaded with 0 devices)
 *   device-count      device.get_device_count failed, gave < 0, or gave
 *                     more than KEEL_MAX_DEVICES_PER_PLUGIN
 *
 * Every path is resolved to an absolute path once (realpath), and that
 * exact file is what is checked and what dlopen opens: a bare file name
 * never reaches dlopen's library search.
 *
 * The plugin's own code (constructors, entry, init, get_device_count,
 * finalize, destructors) runs inside keel__plugin_code_begin/end, so a
 * call back into libkeel from it is refused instead of deadlocking on the
 * registry lock this thread holds.
 *
 * Tables are copied into zeroed core-sized structs, at most struct_size
 * bytes, so members the plugin does not have read as NULL afterwards.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <dlfcn.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/runtime_internal.h"
#include "keel_config.h"

/* Minimum table sizes for each minor this core knows. A table claiming a
 * newer minor must be at least as large as the newest size known here. */
#define MINORS (KEEL_ABI_VERSION_MINOR + 1)

struct table_rule {
    const char *name;
    uint32_t min_size[MINORS];
};

static const struct table_rule rule_plugin = {
    "plugin_api",
    {offsetof(keel_plugin_api, profiler), sizeof(keel_plugin_api),
     sizeof(keel_plugin_api), sizeof(keel_plugin_api),
     sizeof(keel_plugin_api)}};
static const struct table_rule rule_device = {
    "device", {offsetof(keel_device_ops, set_visible_devices),
               offsetof(keel_device_ops, set_visible_devices),
               offsetof(keel_device_ops, set_visible_devices),
               sizeof(keel_device_ops), sizeof(keel_device_ops)}};
static const struct table_rule rule_memory = {
    "memory",
    {offsetof(keel_memory_ops, copy_peer_async),
     offsetof(keel_memory_ops, register_host),
     offsetof(keel_memory_ops, register_host),
     offsetof(keel_memory_ops, register_host), sizeof(keel_memory_ops)}};
static const struct table_rule rule_stream = {
    "stream", {sizeof(keel_stream_ops), sizeof(keel_stream_ops),
               sizeof(keel_stream_ops), sizeof(keel_stream_ops),
               sizeof(keel_stream_ops)}};
static const struct table_rule rule_kernel = {
    "kernel", {sizeof(keel_kernel_ops), sizeof(keel_kernel_ops),
               sizeof(keel_kernel_ops), sizeof(keel_kernel_ops),
               sizeof(keel_kernel_ops)}};
static const struct table_rule rule_collective = {
    "collective", {offsetof(keel_collective_ops, get_caps),
                   offsetof(keel_collective_ops, get_caps),
                   offsetof(keel_collective_ops, get_unique_id_bytes),
                   sizeof(keel_collective_ops), sizeof(keel_collective_ops)}};
static const struct table_rule rule_profiler = {
    "profiler", {sizeof(keel_profiler_ops), sizeof(keel_profiler_ops),
                 sizeof(keel_profiler_ops), sizeof(keel_profiler_ops),
                 sizeof(keel_profiler_ops)}};

/* ---- skip bookkeeping ---------------------------------------------------- */

static int skip(struct keel_plugin *p, const char *check, keel_status status,
                const char *fmt, ...) KEEL_PRINTF(4, 5);

static int skip(struct keel_plugin *p, const char *check, keel_status status,
                const char *fmt, ...)
{
    va_list ap;
    char *msg = NULL;

    va_start(ap, fmt);
    if (vasprintf(&msg, fmt, ap) < 0)
        msg = NULL;
    va_end(ap);
    free(p->reason);
    p->reason = msg;
    p->failed_check = check;
    p->status = status;
    p->loaded = false;
    keel__log(KEEL_LOG_INFO, "skipped plugin %s [%s]: %s", p->path, check,
              msg ? msg : "(no memory for the message)");
    return -1;
}

/* ---- table negotiation --------------------------------------------------- */

/* Check one table's header and copy it into `dst` (zeroed, dst_size bytes).
 * A NULL table is allowed when !required. Returns 0 or -1 (skipped). */
static int take_table(struct keel_plugin *p, const struct table_rule *rule,
                      const void *table, void *dst, size_t dst_size,
                      bool required)
{
    const keel_table_header *h = table;
    uint32_t need;

    memset(dst, 0, dst_size);
    if (!table) {
        if (!required)
            return 0;
        return skip(p, "required-function", KEEL_STATUS_ABI_MISMATCH,
                    "required table '%s' is NULL", rule->name);
    }
    if (h->abi_major != KEEL_ABI_VERSION_MAJOR)
        return skip(p, "abi-major", KEEL_STATUS_ABI_MISMATCH,
                    "table '%s' was built for ABI %u.%u; this core speaks "
                    "ABI %d.x (expected major %d, found %u)",
                    rule->name, h->abi_major, h->abi_minor,
                    KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MAJOR,
                    h->abi_major);
    need = h->abi_minor < MINORS ? rule->min_size[h->abi_minor]
                                 : rule->min_size[MINORS - 1];
    if (h->struct_size < need)
        return skip(p, "table-size", KEEL_STATUS_ABI_MISMATCH,
                    "table '%s' claims ABI %u.%u but its struct_size is %u "
                    "bytes; ABI %u.%u needs at least %u",
                    rule->name, h->abi_major, h->abi_minor, h->struct_size,
                    h->abi_major, h->abi_minor, need);
    memcpy(dst, table, h->struct_size < dst_size ? h->struct_size : dst_size);
    /* The header now describes what we copied, in our terms. */
    ((keel_table_header *)dst)->struct_size = (uint32_t)dst_size;
    return 0;
}

#define REQUIRE(p, tbl, member)                                              \
    do {                                                                     \
        if (!(tbl).member)                                                   \
            return skip(p, "required-function", KEEL_STATUS_ABI_MISMATCH,   \
                        "required function '%s' is NULL", #tbl "." #member); \
    } while (0)

static int check_required(struct keel_plugin *p)
{
    keel_device_ops device = p->device;
    keel_memory_ops memory = p->memory;
    keel_stream_ops stream = p->stream;

    REQUIRE(p, device, init);
    REQUIRE(p, device, finalize);
    REQUIRE(p, device, get_device_count);
    REQUIRE(p, device, get_device_props);
    REQUIRE(p, device, synchronize);
    REQUIRE(p, memory, alloc);
    REQUIRE(p, memory, free);
    REQUIRE(p, memory, memset);
    REQUIRE(p, memory, memset_async);
    REQUIRE(p, memory, copy_h2d);
    REQUIRE(p, memory, copy_d2h);
    REQUIRE(p, memory, copy_d2d);
    REQUIRE(p, memory, copy_h2d_async);
    REQUIRE(p, memory, copy_d2h_async);
    REQUIRE(p, memory, copy_d2d_async);
    REQUIRE(p, memory, get_memory_info);
    REQUIRE(p, stream, stream_create);
    REQUIRE(p, stream, stream_destroy);
    REQUIRE(p, stream, stream_synchronize);
    REQUIRE(p, stream, stream_query);
    REQUIRE(p, stream, stream_wait_event);
    REQUIRE(p, stream, event_create);
    REQUIRE(p, stream, event_destroy);
    REQUIRE(p, stream, event_record);
    REQUIRE(p, stream, event_query);
    REQUIRE(p, stream, event_synchronize);
    return 0;
}

static int check_optional_groups(struct keel_plugin *p)
{
    const keel_plugin_api *api = &p->api;

    if (api->kernel) {
        keel_kernel_ops kernel = p->kernel;
        REQUIRE(p, kernel, lookup);
    }
    if (api->collective) {
        keel_collective_ops collective = p->collective;
        REQUIRE(p, collective, get_unique_id);
        REQUIRE(p, collective, comm_init_rank);
        REQUIRE(p, collective, comm_destroy);
        REQUIRE(p, collective, comm_rank);
        REQUIRE(p, collective, all_reduce);
        REQUIRE(p, collective, broadcast);
        REQUIRE(p, collective, reduce);
        REQUIRE(p, collective, all_gather);
        REQUIRE(p, collective, reduce_scatter);
        REQUIRE(p, collective, all_to_all);
        REQUIRE(p, collective, send);
        REQUIRE(p, collective, recv);
        REQUIRE(p, collective, group_start);
        REQUIRE(p, collective, group_end);
    }
    if (api->profiler) {
        keel_profiler_ops profiler = p->profiler;
        REQUIRE(p, profiler, start);
        REQUIRE(p, profiler, stop);
        REQUIRE(p, profiler, range_push);
        REQUIRE(p, profiler, range_pop);
    }
    return 0;
}

static bool valid_ident(const char *s)
{
    size_t n = 0;

    if (!s || !*s)
        return false;
    for (; s[n]; n++) {
        unsigned char c = (unsigned char)s[n];
        if (!(islower(c) || isdigit(c) || c == '_'))
            return false;
    }
    return n <= 32 && !isdigit((unsigned char)s[0]);
}

static int check_identity(struct keel_plugin *p, const keel_plugin_api *raw)
{
    if (!valid_ident(raw->name))
        return skip(p, "identity", KEEL_STATUS_ABI_MISMATCH,
                    "plugin name %s%s%s is not a lower-case identifier "
                    "([a-z_][a-z0-9_]{0,31})",
                    raw->name ? "'" : "", raw->name ? raw->name : "NULL",
                    raw->name ? "'" : "");
    if (!valid_ident(raw->device_type))
        return skip(p, "identity", KEEL_STATUS_ABI_MISMATCH,
                    "device type %s%s%s of plugin '%s' is not a lower-case "
                    "identifier",
                    raw->device_type ? "'" : "",
                    raw->device_type ? raw->device_type : "NULL",
                    raw->device_type ? "'" : "", raw->name);
    if (!raw->version || !*raw->version)
        return skip(p, "identity", KEEL_STATUS_ABI_MISMATCH,
                    "plugin '%s' has no version string", raw->name);
    return 0;
}

static int negotiate(struct keel_plugin *p, const keel_plugin_api *raw)
{
    const keel_plugin_api *api;

    p->abi_major = raw->header.abi_major;
    p->abi_minor = raw->header.abi_minor;
    /* Same major: the identity strings sit where this core expects them,
     * so a plugin failing a later check can still be named. */
    if (raw->header.abi_major == KEEL_ABI_VERSION_MAJOR &&
        raw->header.struct_size >= offsetof(keel_plugin_api, device) &&
        valid_ident(raw->name))
        p->name = keel__strdup(raw->name);
    if (take_table(p, &rule_plugin, raw, &p->api, sizeof(p->api), true))
        return -1;
    api = &p->api;
    if (take_table(p, &rule_device, api->device, &p->device, sizeof(p->device),
                   true) ||
        take_table(p, &rule_memory, api->memory, &p->memory, sizeof(p->memory),
                   true) ||
        take_table(p, &rule_stream, api->stream, &p->stream, sizeof(p->stream),
                   true) ||
        take_table(p, &rule_kernel, api->kernel, &p->kernel, sizeof(p->kernel),
                   false) ||
        take_table(p, &rule_collective, api->collective, &p->collective,
                   sizeof(p->collective), false) ||
        take_table(p, &rule_profiler, api->profiler, &p->profiler,
                   sizeof(p->profiler), false))
        return -1;
    if (check_required(p) || check_optional_groups(p) ||
        check_identity(p, raw))
        return -1;
    if (!p->name)
        p->name = keel__strdup(raw->name);
    p->version = keel__strdup(raw->version);
    p->device_type = keel__strdup(raw->device_type);
    p->description = keel__strdup(raw->description);
    if (!p->name || !p->version || !p->device_type ||
        (raw->description && !p->description))
        return skip(p, "identity", KEEL_STATUS_OUT_OF_MEMORY,
                    "out of host memory copying the plugin's identity");
    /* Point the normalised table at the normalised groups. */
    p->api.name = p->name;
    p->api.version = p->version;
    p->api.device_type = p->device_type;
    p->api.description = p->description;
    p->api.device = &p->device;
    p->api.memory = &p->memory;
    p->api.stream = &p->stream;
    p->api.kernel = api->kernel ? &p->kernel : NULL;
    p->api.collective = api->collective ? &p->collective : NULL;
    p->api.profiler = api->profiler ? &p->profiler : NULL;
    return 0;
}

/* ---- loading ------------------------------------------------------------- */

static const char *plugin_msg_or(const char *fallback)
{
    const char *m = keel__plugin_msg();
    return m ? m : fallback;
}

/*
 * KEEL_VISIBLE_DEVICES (ABI 1.3): "<plugin or type>:<list>[;...]", a list
 * of device indices and ranges ("cpu:1,3", "npu:0-3;gpu:1"), the plugin's
 * own numbering. The first entry naming the plugin (by name, else by
 * device type) applies: the plugin gets it through
 * device.set_visible_devices before init, and its devices are then those,
 * in that order. A plugin that cannot be restricted is skipped rather
 * than shown whole: the setting asked to hide devices.
 * Returns 0, or -1 after skip().
 */
#define VIS_MAX 4096
static int apply_visible(struct keel_plugin *p)
{
    const char *env = getenv("KEEL_VISIBLE_DEVICES");
    const char *list = NULL, *end, *q;
    int32_t dev[VIS_MAX];
    int32_t n = 0;
    keel_status st;

    for (int pass = 0; env && *env && pass < 2 && !list; pass++) {
        const char *want = pass ? p->device_type : p->name;
        size_t wl = strlen(want);
        for (q = env; q && *q; q = strchr(q, ';') ? strchr(q, ';') + 1 : NULL)
            if (!strncmp(q, want, wl) && q[wl] == ':') {
                list = q + wl + 1;
                break;
            }
    }
    if (!list)
        return 0;
    end = strchr(list, ';');
    if (!end)
        end = list + strlen(list);
    for (q = list; q < end;) {
        char *e;
        long a, b;

        errno = 0;
        a = strtol(q, &e, 10);
        b = a;
        if (e > q && *e == '-' && e + 1 < end) {
            q = e + 1;
            b = strtol(q, &e, 10);
        }
        if (e == q || errno || a < 0 || b < a || b >= VIS_MAX ||
            (e < end && *e != ','))
            return skip(p, "visible-devices", KEEL_STATUS_INVALID_ARGUMENT,
                        "KEEL_VISIBLE_DEVICES: '%.*s' for plugin %s is not "
                        "a list of device indices and ranges (\"0,2\", "
                        "\"1-3\")",
                        (int)(end - list), list, p->name);
        for (long d = a; d <= b; d++) {
            for (int32_t i = 0; i < n; i++)
                if (dev[i] == d)
                    return skip(p, "visible-devices",
                                KEEL_STATUS_INVALID_ARGUMENT,
                                "KEEL_VISIBLE_DEVICES: device %ld is listed "
                                "twice for plugin %s",
                                d, p->name);
            if (n == VIS_MAX)
                return skip(p, "visible-devices",
                            KEEL_STATUS_INVALID_ARGUMENT,
                            "KEEL_VISIBLE_DEVICES: more than %d devices "
                            "for plugin %s",
                            VIS_MAX, p->name);
            dev[n++] = (int32_t)d;
        }
        q = e < end ? e + 1 : end;
    }
    if (n == 0)
        return skip(p, "visible-devices", KEEL_STATUS_INVALID_ARGUMENT,
                    "KEEL_VISIBLE_DEVICES names plugin %s with no device",
                    p->name);
    if (!p->device.set_visible_devices)
        return skip(p, "visible-devices", KEEL_STATUS_NOT_SUPPORTED,
                    "KEEL_VISIBLE_DEVICES names plugin %s, which cannot "
                    "hide devices (no device.set_visible_devices, ABI 1.3); "
                    "skipped rather than shown whole. Use the vendor's own "
                    "variable (CUDA_VISIBLE_DEVICES, ...) instead",
                    p->name);
    keel__plugin_msg_clear();
    st = p->device.set_visible_devices(dev, n);
    if (st != KEEL_STATUS_OK)
        return skip(p, "visible-devices", st,
                    "device.set_visible_devices(%d devices) returned %s: %s",
                    (int)n, keel_status_name(st),
                    plugin_msg_or("(no message from the plugin)"));
    keel__log(KEEL_LOG_INFO, "plugin %s: %d visible device%s "
              "(KEEL_VISIBLE_DEVICES)", p->name, (int)n, n == 1 ? "" : "s");
    return 0;
}

static int start_plugin(struct keel_registry *reg, struct keel_plugin *p)
{
    keel_status st;
    int32_t count = 0;

    for (int i = 0; i < reg->count; i++) {
        const struct keel_plugin *o = reg->plugins[i];
        if (o->loaded && !strcmp(o->name, p->name))
            return skip(p, "duplicate-name", KEEL_STATUS_ABI_MISMATCH,
                        "plugin name '%s' is already provided by %s",
                        p->name, o->path);
    }
    if (apply_visible(p))
        return -1;
    keel__plugin_msg_clear();
    st = p->device.init();
    if (st == KEEL_STATUS_UNAVAILABLE) {
        /* No driver: keep the plugin, with no devices, and say why. */
        p->loaded = true;
        p->initialized = false;
        p->device_count = 0;
        p->status = KEEL_STATUS_OK;
        p->reason = keel__strdup(plugin_msg_or("driver unavailable"));
        return 0;
    }
    if (st != KEEL_STATUS_OK)
        return skip(p, "init", st, "device.init returned %s: %s",
                    keel_status_name(st),
                    plugin_msg_or("(no message from the plugin)"));
    p->initialized = true;
    keel__plugin_msg_clear();
    st = p->device.get_device_count(&count);
    if (st != KEEL_STATUS_OK || count < 0) {
        p->device.finalize();
        p->initialized = false;
        if (st == KEEL_STATUS_OK)
            return skip(p, "device-count", KEEL_STATUS_DEVICE_ERROR,
                        "device.get_device_count gave %d devices", count);
        return skip(p, "device-count", st,
                    "device.get_device_count returned %s: %s",
                    keel_status_name(st),
                    plugin_msg_or("(no message from the plugin)"));
    }
    if (count > KEEL_MAX_DEVICES_PER_PLUGIN) {
        p->device.finalize();
        p->initialized = false;
        return skip(p, "device-count", KEEL_STATUS_DEVICE_ERROR,
                    "device.get_device_count gave %d devices; keel accepts "
                    "at most %d per plugin (KEEL_MAX_DEVICES_PER_PLUGIN), "
                    "so the count is taken as wrong rather than listed",
                    count, KEEL_MAX_DEVICES_PER_PLUGIN);
    }
    p->device_count = count;
    p->loaded = true;
    p->status = KEEL_STATUS_OK;
    if (count == 0)
        p->reason = keel__strdup(plugin_msg_or("the plugin found no device"));
    return 0;
}

static int open_plugin(struct keel_registry *reg, struct keel_plugin *p)
{
    keel_plugin_get_api_fn entry;
    const keel_plugin_api *raw;
    const char *err;

    dlerror();
    p->handle = dlopen(p->realpath, RTLD_NOW | RTLD_LOCAL);
    if (!p->handle) {
        err = dlerror();
        return skip(p, "dlopen", KEEL_STATUS_NOT_FOUND, "dlopen failed: %s",
                    err ? err : "(no dlerror text)");
    }
    dlerror();
    *(void **)(&entry) = dlsym(p->handle, KEEL_PLUGIN_ENTRY_SYMBOL);
    if (!entry) {
        err = dlerror();
        return skip(p, "entry-symbol", KEEL_STATUS_ABI_MISMATCH,
                    "not a keel plugin: it does not export '%s' (%s)",
                    KEEL_PLUGIN_ENTRY_SYMBOL, err ? err : "symbol is NULL");
    }
    keel__plugin_msg_clear();
    raw = entry(KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
                keel__host_api());
    if (!raw)
        return skip(p, "get-api", KEEL_STATUS_ABI_MISMATCH,
                    "%s returned NULL: %s", KEEL_PLUGIN_ENTRY_SYMBOL,
                    plugin_msg_or("(no message from the plugin)"));
    if (negotiate(p, raw))
        return -1;
    return start_plugin(reg, p);
}

static int append(struct keel_registry *reg, struct keel_plugin *p)
{
    if (reg->count == reg->capacity) {
        int cap = reg->capacity ? reg->capacity * 2 : 8;
        struct keel_plugin **np =
            realloc(reg->plugins, (size_t)cap * sizeof(*np));
        if (!np)
            return -1;
        reg->plugins = np;
        reg->capacity = cap;
    }
    reg->plugins[reg->count++] = p;
    return reg->count - 1;
}

static void free_plugin(struct keel_plugin *p)
{
    if (!p)
        return;
    free(p->path);
    free(p->realpath);
    free(p->name);
    free(p->version);
    free(p->device_type);
    free(p->description);
    free(p->reason);
    free(p);
}

/* ---- file checks --------------------------------------------------------- */

/* The path as given, made absolute against the current directory (symbolic
 * links kept, so the name shown is the one the user wrote). */
static char *absolute_path(const char *path)
{
    char cwd[PATH_MAX];

    if (path[0] == '/' || !getcwd(cwd, sizeof(cwd)))
        return keel__strdup(path);
    while (path[0] == '.' && path[1] == '/')
        path += 2;
    return keel__asprintf("%s/%s", strcmp(cwd, "/") ? cwd : "", path);
}

/* Strict permissions: KEEL_PLUGIN_STRICT_PERMS=1, or always in a process
 * running with more privileges than its user (setuid, setgid, file
 * capabilities), as the dynamic loader is careful there. */
static bool strict_perms(void)
{
    const char *v = getenv("KEEL_PLUGIN_STRICT_PERMS");

    return (v && !strcmp(v, "1")) || getauxval(AT_SECURE);
}

/* Why another user could change what this plugin runs, or "" when no one
 * can: the file or its folder writable by everyone (a folder with the
 * sticky bit, like /tmp, protects files owned by others), or owned by a
 * user that is neither this one nor root. */
static void unsafe_reason(const char *file, const struct stat *fs, char *buf,
                          size_t size)
{
    const char *slash = strrchr(file, '/');
    uid_t me = geteuid();
    char dir[PATH_MAX];
    struct stat ds;
    size_t n = 0;

    buf[0] = '\0';
    if (fs->st_mode & S_IWOTH)
        n += (size_t)snprintf(buf + n, size - n, "the file is writable by "
                              "every user (mode %04o)",
                              (unsigned)(fs->st_mode & 07777));
    if (n < size && fs->st_uid != 0 && fs->st_uid != me)
        n += (size_t)snprintf(buf + n, size - n, "%sthe file is owned by "
                              "uid %u, which is neither this user (uid %u) "
                              "nor root", n ? "; " : "",
                              (unsigned)fs->st_uid, (unsigned)me);
    snprintf(dir, sizeof(dir), "%.*s",
             slash ? (slash == file ? 1 : (int)(slash - file)) : 1,
             slash ? file : ".");
    if (n >= size || stat(dir, &ds))
        return;
    if ((ds.st_mode & S_IWOTH) && !(ds.st_mode & S_ISVTX))
        n += (size_t)snprintf(buf + n, size - n, "%sits folder %s is "
                              "writable by every user (mode %04o), so anyone "
                              "can replace it", n ? "; " : "", dir,
                              (unsigned)(ds.st_mode & 07777));
    if (n < size && ds.st_uid != 0 && ds.st_uid != me)
        snprintf(buf + n, size - n, "%sits folder %s is owned by uid %u, "
                 "which is neither this user (uid %u) nor root",
                 n ? "; " : "", dir, (unsigned)ds.st_uid, (unsigned)me);
}

/* The checks made on the resolved file before dlopen runs any of it. */
static int check_file(struct keel_plugin *p)
{
    struct stat fs;
    char why[3 * PATH_MAX];

    if (stat(p->realpath, &fs))
        return skip(p, "dlopen", KEEL_STATUS_NOT_FOUND,
                    "cannot stat '%s': %s", p->realpath, strerror(errno));
    if (!S_ISREG(fs.st_mode))
        return skip(p, "file", KEEL_STATUS_IO_ERROR,
                    "'%s' is not a regular file (mode %06o); nothing was "
                    "loaded", p->realpath, (unsigned)fs.st_mode);
    unsafe_reason(p->realpath, &fs, why, sizeof(why));
    if (!why[0])
        return 0;
    if (strict_perms())
        return skip(p, "permissions", KEEL_STATUS_INVALID_STATE,
                    "refused under strict plugin permissions "
                    "(KEEL_PLUGIN_STRICT_PERMS=1 or a setuid/setgid "
                    "process): %s; nothing was loaded", why);
    keel__log(KEEL_LOG_WARN, "plugin %s: %s; loading it anyway (set "
              "KEEL_PLUGIN_STRICT_PERMS=1 to refuse such plugins)",
              p->path, why);
    return 0;
}

int keel__load_plugin_file(struct keel_registry *reg, const char *path)
{
    struct keel_plugin *p;
    char resolved[PATH_MAX];
    int idx, e = 0;

    if (realpath(path, resolved)) {
        for (int i = 0; i < reg->count; i++)
            if (reg->plugins[i]->realpath &&
                !strcmp(reg->plugins[i]->realpath, resolved))
                return i; /* same file found twice: keep the first */
    } else {
        e = errno;
        resolved[0] = '\0';
    }
    p = calloc(1, sizeof(*p));
    if (!p)
        return -1;
    p->path = absolute_path(path);
    p->realpath = resolved[0] ? keel__strdup(resolved) : NULL;
    if (!p->path || (resolved[0] && !p->realpath)) {
        free_plugin(p);
        return -1;
    }
    idx = append(reg, p);
    if (idx < 0) {
        free_plugin(p);
        return -1;
    }
    if (!resolved[0]) {
        skip(p, "dlopen", e == ENOENT ? KEEL_STATUS_NOT_FOUND :
             KEEL_STATUS_IO_ERROR, "cannot resolve the path '%s': %s; "
             "nothing was loaded", path, strerror(e));
        return idx;
    }
    if (check_file(p))
        return idx;
    keel__plugin_code_begin(p->path);
    if (open_plugin(reg, p) && p->handle) {
        dlclose(p->handle);
        p->handle = NULL;
    }
    keel__plugin_code_end();
    return idx;
}

/* ---- discovery ----------------------------------------------------------- */

static bool is_plugin_name(const char *fname)
{
    size_t n = strlen(fname);
    return n > 11 && !strncmp(fname, "libkeel-", 8) &&
           !strcmp(fname + n - 3, ".so");
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Load every libkeel-*.so in `dir`, sorted by file name. */
static void load_dir(struct keel_registry *reg, const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char **names = NULL;
    size_t n = 0, cap = 0;

    if (!d)
        return;
    while ((e = readdir(d))) {
        if (!is_plugin_name(e->d_name))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **nn = realloc(names, nc * sizeof(*nn));
            if (!nn)
                break;
            names = nn;
            cap = nc;
        }
        names[n] = keel__asprintf("%s/%s", dir, e->d_name);
        if (names[n])
            n++;
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof(*names), cmp_str);
    for (size_t i = 0; i < n; i++) {
        keel__load_plugin_file(reg, names[i]);
        free(names[i]);
    }
    free(names);
}

static void load_path_entry(struct keel_registry *reg, const char *entry)
{
    struct stat st;

    if (!*entry)
        return;
    if (stat(entry, &st) != 0) {
        keel__log(KEEL_LOG_WARN, "KEEL_PLUGIN_PATH entry '%s' does not exist",
                  entry);
        return;
    }
    if (S_ISDIR(st.st_mode))
        load_dir(reg, entry);
    else
        keel__load_plugin_file(reg, entry);
}

static void load_env_path(struct keel_registry *reg)
{
    const char *env = getenv("KEEL_PLUGIN_PATH");
    char *copy, *save = NULL, *tok;

    if (!env || !*env)
        return;
    copy = strdup(env);
    if (!copy)
        return;
    for (tok = strtok_r(copy, ":", &save); tok;
         tok = strtok_r(NULL, ":", &save))
        load_path_entry(reg, tok);
    free(copy);
}

/* Any object inside libkeel, for dladdr. */
static const char own_marker = 1;

/* The folder holding this libkeel, or "" when unknown. */
static void own_dir(char *buf, size_t size)
{
    Dl_info info;
    char tmp[PATH_MAX];
    char *slash;

    buf[0] = '\0';
    if (!dladdr(&own_marker, &info) || !info.dli_fname)
        return;
    if (!realpath(info.dli_fname, tmp))
        return;
    slash = strrchr(tmp, '/');
    if (!slash)
        return;
    *slash = '\0';
    snprintf(buf, size, "%s", tmp);
}

static bool same_dir(const char *a, const char *b)
{
    char ra[PATH_MAX], rb[PATH_MAX];
    return realpath(a, ra) && realpath(b, rb) && !strcmp(ra, rb);
}

/* Build tree: build/plugins/<name>/libkeel-<name>.so for every plugin. */
static void load_build_tree(struct keel_registry *reg)
{
    DIR *d = opendir(KEEL_BUILD_PLUGIN_ROOT);
    struct dirent *e;
    char **subs = NULL;
    size_t n = 0, cap = 0;

    if (!d)
        return;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            char **ns = realloc(subs, nc * sizeof(*ns));
            if (!ns)
                break;
            subs = ns;
            cap = nc;
        }
        subs[n] = keel__asprintf("%s/%s", KEEL_BUILD_PLUGIN_ROOT, e->d_name);
        if (subs[n])
            n++;
    }
    closedir(d);
    if (n)
        qsort(subs, n, sizeof(*subs), cmp_str);
    for (size_t i = 0; i < n; i++) {
        load_dir(reg, subs[i]);
        free(subs[i]);
    }
    free(subs);
}

void keel__discover(struct keel_registry *reg)
{
    const char *defaults = getenv("KEEL_PLUGIN_DEFAULT_PATHS");
    char dir[PATH_MAX];
    char *rel;

    load_env_path(reg);
    if (defaults && !strcmp(defaults, "0"))
        return;
    own_dir(dir, sizeof(dir));
    if (dir[0] && same_dir(dir, KEEL_BUILD_CORE_DIR)) {
        load_build_tree(reg);
        return;
    }
    /* Installed: next to this library first (relocatable prefix), then the
     * configured install directory. */
    if (dir[0]) {
        rel = keel__asprintf("%s/keel/plugins", dir);
        if (rel) {
            load_dir(reg, rel);
            free(rel);
        }
    }
    load_dir(reg, KEEL_INSTALL_PLUGIN_DIR);
}

void keel__unload_all(struct keel_registry *reg)
{
    for (int i = reg->count - 1; i >= 0; i--) {
        struct keel_plugin *p = reg->plugins[i];

        keel__plugin_code_begin(p->path);
        if (p->initialized && p->device.finalize)
            p->device.finalize();
        if (p->handle)
            dlclose(p->handle);
        keel__plugin_code_end();
        free_plugin(p);
    }
    free(reg->plugins);
    reg->plugins = NULL;
    reg->count = 0;
    reg->capacity = 0;
}
