/*
 * The registry's lifetime, device names and the current device.
 */
#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "runtime/runtime_internal.h"

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct keel_registry registry;

/*
 * Plugin code that runs while this thread holds the registry lock (a
 * plugin's constructors, entry point, init, get_device_count, finalize and
 * destructors, during discovery, keel_plugin_load or keel_shutdown). A call
 * back into libkeel from there would wait on the lock its own thread
 * holds. Instead, keel_init() refuses it with INVALID_STATE, so every
 * public entry point does, and the core's internal lock calls made on the
 * way see the lock as already theirs.
 */
static _Thread_local const char *tl_plugin_code;
static _Thread_local int tl_nested_locks;

void keel__plugin_code_begin(const char *path)
{
    tl_plugin_code = path ? path : "(unknown plugin)";
}

void keel__plugin_code_end(void)
{
    tl_plugin_code = NULL;
    tl_nested_locks = 0;
}

static keel_status refuse_reentry(const char *what)
{
    return keel__error(KEEL_STATUS_INVALID_STATE,
                       "%s: called from inside plugin %s while keel is "
                       "loading or unloading it (its constructor, entry "
                       "point, init, get_device_count or finalize); a "
                       "plugin must not call back into libkeel from there, "
                       "only into the host table it was given",
                       what, tl_plugin_code);
}

struct keel_registry *keel__registry(void)
{
    return &registry;
}

void keel__lock(void)
{
    if (tl_plugin_code) {
        tl_nested_locks++;
        return;
    }
    pthread_mutex_lock(&reg_lock);
}

void keel__unlock(void)
{
    if (tl_plugin_code) {
        if (tl_nested_locks > 0)
            tl_nested_locks--;
        return;
    }
    pthread_mutex_unlock(&reg_lock);
}

static void ensure_init_locked(void)
{
    if (registry.initialized)
        return;
    registry.initialized = true;
    keel__discover(&registry);
    keel__trace_env();
}

keel_status keel_init(void)
{
    if (tl_plugin_code)
        return refuse_reentry("keel_init");
    keel__lock();
    ensure_init_locked();
    keel__unlock();
    return KEEL_STATUS_OK;
}

/* Up to this many layers cache plugin objects (the allocator, dispatch's
 * kernel cache, and room for more). */
#define MAX_SHUTDOWN_FNS 8
static _Atomic(keel_shutdown_fn) shutdown_fns[MAX_SHUTDOWN_FNS];

void keel__at_shutdown(keel_shutdown_fn fn)
{
    for (int i = 0; i < MAX_SHUTDOWN_FNS; i++) {
        keel_shutdown_fn cur = NULL;
        if (atomic_compare_exchange_strong(&shutdown_fns[i], &cur, fn) ||
            cur == fn)
            return;
    }
    /* More layers than slots is a build of the core gone wrong. */
    keel__log(KEEL_LOG_ERROR, "keel__at_shutdown: no free slot");
}

void keel_shutdown(void)
{
    if (tl_plugin_code) {
        refuse_reentry("keel_shutdown");
        return;
    }
    /* Cached device memory goes back to the plugins while they are still
     * loaded; kernel caches hold plugin pointers. */
    for (int i = MAX_SHUTDOWN_FNS - 1; i >= 0; i--) {
        keel_shutdown_fn fn = atomic_load(&shutdown_fns[i]);
        if (fn)
            fn();
    }
    keel__lock();
    if (registry.initialized)
        keel__unload_all(&registry);
    registry.initialized = false;
    registry.have_current = false;
    keel__unlock();
}

/* ---- plugins ------------------------------------------------------------- */

int keel_plugin_count(void)
{
    int n;

    if (keel_init() != KEEL_STATUS_OK)
        return 0;
    keel__lock();
    n = registry.count;
    keel__unlock();
    return n;
}

keel_status keel_plugin_get_info(int index, keel_plugin_info *info)
{
    const struct keel_plugin *p;

    if (!info)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_plugin_get_info: info is NULL");
    if (keel_init() != KEEL_STATUS_OK)
        return keel_last_status();
    keel__lock();
    if (index < 0 || index >= registry.count) {
        int n = registry.count;
        keel__unlock();
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_plugin_get_info: index %d out of range "
                           "(%d plugins)",
                           index, n);
    }
    p = registry.plugins[index];
    *info = (keel_plugin_info){
        .path = p->path,
        .name = p->name,
        .version = p->version,
        .device_type = p->device_type,
        .description = p->description,
        .abi_major = p->abi_major,
        .abi_minor = p->abi_minor,
        .loaded = p->loaded,
        .device_count = p->loaded ? p->device_count : 0,
        .failed_check = p->failed_check,
        .status = p->status,
        .reason = p->reason,
    };
    keel__unlock();
    return KEEL_STATUS_OK;
}

keel_status keel_plugin_load(const char *path, int *index)
{
    int idx;
    keel_status st;
    const struct keel_plugin *p;

    if (!path || !*path)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_plugin_load: path is %s",
                           path ? "empty" : "NULL");
    if (keel_init() != KEEL_STATUS_OK)
        return keel_last_status();
    keel__lock();
    idx = keel__load_plugin_file(&registry, path);
    if (idx < 0) {
        keel__unlock();
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_plugin_load: out of host memory loading "
                           "'%s'",
                           path);
    }
    p = registry.plugins[idx];
    if (index)
        *index = idx;
    if (p->loaded) {
        keel__unlock();
        return KEEL_STATUS_OK;
    }
    st = p->status;
    keel__error(st, "plugin %s skipped [%s]: %s", p->path, p->failed_check,
                p->reason ? p->reason : "");
    keel__unlock();
    return st;
}

const keel_plugin_api *keel_plugin_table(int index)
{
    const keel_plugin_api *api = NULL;

    if (keel_init() != KEEL_STATUS_OK)
        return NULL;
    keel__lock();
    if (index >= 0 && index < registry.count &&
        registry.plugins[index]->loaded)
        api = &registry.plugins[index]->api;
    keel__unlock();
    return api;
}

/* ---- resolution ---------------------------------------------------------- */

int keel__type_default_plugin(const struct keel_registry *reg,
                              const char *type)
{
    int first = -1;

    for (int i = 0; i < reg->count; i++) {
        const struct keel_plugin *p = reg->plugins[i];
        if (!p->loaded || strcasecmp(p->device_type, type))
            continue;
        if (p->device_count > 0)
            return i;
        if (first < 0)
            first = i;
    }
    return first;
}

static int find_plugin_by_name(const struct keel_registry *reg,
                               const char *name)
{
    for (int i = 0; i < reg->count; i++) {
        const struct keel_plugin *p = reg->plugins[i];
        if (p->loaded && !strcasecmp(p->name, name))
            return i;
    }
    return -1;
}

const char *keel__place_str(keel_place place, char *buf, size_t size)
{
    const struct keel_plugin *p;

    if (place.plugin < 0 || place.plugin >= registry.count) {
        snprintf(buf, size, "plugin#%d:%d", place.plugin, place.device);
        return buf;
    }
    p = registry.plugins[place.plugin];
    if (!p->loaded) {
        snprintf(buf, size, "plugin#%d:%d", place.plugin, place.device);
        return buf;
    }
    if (keel__type_default_plugin(&registry, p->device_type) == place.plugin)
        snprintf(buf, size, "%s:%d", p->device_type, place.device);
    else
        snprintf(buf, size, "%s:%d", p->name, place.device);
    return buf;
}

keel_status keel_place_name(keel_place place, char *buf, size_t size)
{
    keel_status st = KEEL_STATUS_OK;

    if (!buf || size == 0)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_place_name: buffer is %s",
                           buf ? "empty" : "NULL");
    if (keel_init() != KEEL_STATUS_OK)
        return keel_last_status();
    keel__lock();
    if (place.plugin < 0 || place.plugin >= registry.count ||
        !registry.plugins[place.plugin]->loaded)
        st = keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                         "keel_place_name: plugin index %d is not a loaded "
                         "plugin",
                         place.plugin);
    keel__place_str(place, buf, size);
    keel__unlock();
    return st;
}

/* Append "text" to a growing message buffer. */
struct msgbuf {
    char text[1536];
    size_t len;
};

static void msg_add(struct msgbuf *m, const char *fmt, ...) KEEL_PRINTF(2, 3);

static void msg_add(struct msgbuf *m, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (m->len >= sizeof(m->text) - 1)
        return;
    va_start(ap, fmt);
    n = vsnprintf(m->text + m->len, sizeof(m->text) - m->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        m->len += (size_t)n;
    if (m->len >= sizeof(m->text))
        m->len = sizeof(m->text) - 1;
}

/* "Available: cpu:0..cpu:3 (plugin cpu), ..." */
static void describe_available(struct msgbuf *m)
{
    int shown = 0;

    msg_add(m, " Available:");
    for (int i = 0; i < registry.count; i++) {
        const struct keel_plugin *p = registry.plugins[i];
        if (!p->loaded)
            continue;
        if (p->device_count == 0)
            msg_add(m, "%s %s (plugin %s, 0 devices%s%s)", shown ? "," : "",
                    p->device_type, p->name, p->reason ? ": " : "",
                    p->reason ? p->reason : "");
        else if (p->device_count == 1)
            msg_add(m, "%s %s:0 (plugin %s)", shown ? "," : "",
                    p->device_type, p->name);
        else
            msg_add(m, "%s %s:0..%d (plugin %s)", shown ? "," : "",
                    p->device_type, p->device_count - 1, p->name);
        shown++;
    }
    if (!shown)
        msg_add(m, " no device (no plugin loaded; set KEEL_PLUGIN_PATH)");
    msg_add(m, ".");
}

/* Mention skipped plugins that might have served `what`. */
static void describe_skipped(struct msgbuf *m, const char *what)
{
    char needle[80];

    /* libkeel-<what>.so, or any libkeel-...-<what>.so */
    snprintf(needle, sizeof(needle), "-%s.so", what);
    for (int i = 0; i < registry.count; i++) {
        const struct keel_plugin *p = registry.plugins[i];
        bool match;
        if (p->loaded)
            continue;
        size_t lp = strlen(p->path), ln = strlen(needle);
        match = (p->name && !strcasecmp(p->name, what)) ||
                (p->device_type && !strcasecmp(p->device_type, what)) ||
                (lp >= ln && !strcasecmp(p->path + lp - ln, needle));
        if (match)
            msg_add(m, " Plugin %s was skipped [%s]: %s.", p->path,
                    p->failed_check, p->reason ? p->reason : "");
    }
}

static bool valid_name_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '-';
}

/* Split "name[:index]". Returns 0, or -1 with a message. */
static int split_name(const char *name, char *base, size_t base_size,
                      int32_t *index)
{
    const char *colon = strchr(name, ':');
    size_t blen = colon ? (size_t)(colon - name) : strlen(name);
    long v = 0;

    if (blen == 0)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "malformed device name '%s': the device type is "
                           "empty (expected e.g. 'cpu', 'gpu:1')",
                           name),
               -1;
    if (blen >= base_size)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "malformed device name '%s': the device type is "
                           "longer than %zu characters",
                           name, base_size - 1),
               -1;
    for (size_t i = 0; i < blen; i++)
        if (!valid_name_char(name[i]))
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "malformed device name '%s': character '%c' "
                               "is not allowed in a device type",
                               name, name[i]),
                   -1;
    memcpy(base, name, blen);
    base[blen] = '\0';
    *index = 0;
    if (!colon)
        return 0;
    if (strchr(colon + 1, ':'))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "malformed device name '%s': more than one ':' "
                           "(expected '<type>:<index>')",
                           name),
               -1;
    if (!colon[1])
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "malformed device name '%s': no index after ':'",
                           name),
               -1;
    for (const char *c = colon + 1; *c; c++) {
        if (!isdigit((unsigned char)*c))
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "malformed device name '%s': the index '%s' "
                               "is not a non-negative decimal number",
                               name, colon + 1),
                   -1;
        v = v * 10 + (*c - '0');
        if (v > 1000000)
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "malformed device name '%s': the index is "
                               "too large",
                               name),
                   -1;
    }
    *index = (int32_t)v;
    return 0;
}

static keel_status parse_locked(const char *name, keel_place *place)
{
    char base[64];
    int32_t index;
    int pi;
    const struct keel_plugin *p;
    struct msgbuf m = {.len = 0};

    if (split_name(name, base, sizeof(base), &index))
        return keel_last_status();
    pi = find_plugin_by_name(&registry, base);
    if (pi < 0)
        pi = keel__type_default_plugin(&registry, base);
    if (pi < 0) {
        msg_add(&m, "unknown device '%s': no loaded plugin serves the type "
                    "or plugin name '%s'.",
                name, base);
        describe_available(&m);
        describe_skipped(&m, base);
        return keel__error(KEEL_STATUS_NOT_FOUND, "%s", m.text);
    }
    p = registry.plugins[pi];
    if (index >= p->device_count) {
        if (p->device_count == 0)
            msg_add(&m, "device '%s' is not available: plugin %s (%s) has "
                        "no device%s%s.",
                    name, p->name, p->path, p->reason ? ": " : "",
                    p->reason ? p->reason : "");
        else
            msg_add(&m, "device '%s' does not exist: plugin %s has %d "
                        "device%s (%s:0..%s:%d).",
                    name, p->name, p->device_count,
                    p->device_count == 1 ? "" : "s", base, base,
                    p->device_count - 1);
        describe_available(&m);
        return keel__error(KEEL_STATUS_INVALID_DEVICE, "%s", m.text);
    }
    place->plugin = pi;
    place->device = index;
    return KEEL_STATUS_OK;
}

keel_status keel_place_parse(const char *name, keel_place *place)
{
    keel_status st;

    if (!name)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "device name is NULL");
    if (!place)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_place_parse: place is NULL");
    if (!*name)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "device name is empty (expected e.g. 'cpu', "
                           "'gpu:1', 'npu:0')");
    if (keel_init() != KEEL_STATUS_OK)
        return keel_last_status();
    keel__lock();
    st = parse_locked(name, place);
    keel__unlock();
    return st;
}

keel_status keel__resolve(keel_place place, struct keel_plugin **plugin,
                          const char *what)
{
    struct keel_plugin *p;
    keel_status st = KEEL_STATUS_OK;

    if (keel_init() != KEEL_STATUS_OK)
        return keel_last_status();
    keel__lock();
    if (place.plugin < 0 || place.plugin >= registry.count ||
        !registry.plugins[place.plugin]->loaded) {
        st = keel__error(KEEL_STATUS_INVALID_DEVICE,
                         "%s: place {plugin %d, device %d} does not name a "
                         "loaded plugin",
                         what, place.plugin, place.device);
        goto out;
    }
    p = registry.plugins[place.plugin];
    if (place.device < 0 || place.device >= p->device_count) {
        st = keel__error(KEEL_STATUS_INVALID_DEVICE,
                         "%s: device %d of plugin %s does not exist (it has "
                         "%d)",
                         what, place.device, p->name, p->device_count);
        goto out;
    }
    *plugin = p;
out:
    keel__unlock();
    return st;
}

/* ---- current device ------------------------------------------------------ */

static int default_place_locked(keel_place *out)
{
    const char *env = getenv("KEEL_DEVICE");
    int pi;

    if (env && *env && parse_locked(env, out) == KEEL_STATUS_OK)
        return 0;
    pi = keel__type_default_plugin(&registry, "cpu");
    if (pi >= 0 && registry.plugins[pi]->device_count > 0) {
        *out = (keel_place){pi, 0};
        return 0;
    }
    for (int i = 0; i < registry.count; i++) {
        if (registry.plugins[i]->loaded &&
            registry.plugins[i]->device_count > 0) {
            *out = (keel_place){i, 0};
            return 0;
        }
    }
    return -1;
}

keel_status keel_set_device(const char *name)
{
    keel_place pl;
    keel_status st = keel_place_parse(name, &pl);

    if (st != KEEL_STATUS_OK)
        return st;
    keel__lock();
    registry.current = pl;
    registry.have_current = true;
    keel__unlock();
    return KEEL_STATUS_OK;
}

keel_status keel_current_place(keel_place *place)
{
    keel_status st = KEEL_STATUS_OK;

    if (!place)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_current_place: place is NULL");
    if (keel_init() != KEEL_STATUS_OK)
        return keel_last_status();
    keel__lock();
    if (!registry.have_current) {
        if (default_place_locked(&registry.current) == 0)
            registry.have_current = true;
    }
    if (registry.have_current)
        *place = registry.current;
    else
        st = keel__error(KEEL_STATUS_NOT_FOUND,
                         "no device is available: no plugin with a device "
                         "was loaded (see 'keel devices')");
    keel__unlock();
    return st;
}

const char *keel_get_device(void)
{
    static _Thread_local char buf[96];
    keel_place pl;

    buf[0] = '\0';
    if (keel_current_place(&pl) != KEEL_STATUS_OK)
        return buf;
    keel__lock();
    keel__place_str(pl, buf, sizeof(buf));
    keel__unlock();
    return buf;
}

int keel_device_count(const char *type_or_plugin)
{
    int n = 0, pi;

    if (!type_or_plugin || keel_init() != KEEL_STATUS_OK)
        return 0;
    keel__lock();
    pi = find_plugin_by_name(&registry, type_or_plugin);
    if (pi < 0)
        pi = keel__type_default_plugin(&registry, type_or_plugin);
    if (pi >= 0)
        n = registry.plugins[pi]->device_count;
    keel__unlock();
    return n;
}

bool keel_is_compiled_with(const char *type_or_plugin)
{
    bool found;

    if (!type_or_plugin || keel_init() != KEEL_STATUS_OK)
        return false;
    keel__lock();
    found = find_plugin_by_name(&registry, type_or_plugin) >= 0 ||
            keel__type_default_plugin(&registry, type_or_plugin) >= 0;
    keel__unlock();
    return found;
}

bool keel_is_available(const char *type_or_plugin)
{
    return keel_device_count(type_or_plugin) > 0;
}
