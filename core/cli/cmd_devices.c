/*
 * keel devices — list the plugins the runtime found and the devices they
 * serve, as text or as one JSON document.
 *
 * The command only reads: it initialises the runtime (discovery runs then),
 * walks keel_plugin_get_info() and the devices of every loaded plugin, and
 * shuts the runtime down. A failing query is reported and the listing goes
 * on; the exit status then says that something failed.
 */
#include "cli.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/*
 * --fallbacks: kernel coverage per plugin (which catalog (op, dtype) pairs
 * its kernels serve, and which would run on the CPU plugin instead), and
 * the fallbacks recorded in this process (keel_fallback_count_dtype). A
 * fresh `keel devices` runs no ops, so the second part is always empty
 * here; the text says where a workload's counts come from.
 */
struct coverage {
    int have, total;
    uint32_t has[KEEL_OP_COUNT];     /* dtype bits with a kernel      */
    uint32_t missing[KEEL_OP_COUNT]; /* dtype bits without one        */
};

static const char fallback_note[] =
    "keel devices runs no ops, so this process records no fallbacks; a "
    "workload prints a one-line summary of its fallbacks to stderr at exit "
    "(KEEL_FALLBACK_REPORT=0 silences it), and with KEEL_STRICT=report one "
    "line per (op, dtype) that fell back";

static void coverage_visit(keel_op_id op, keel_dtype dt, bool has, void *p)
{
    struct coverage *c = p;

    c->total++;
    if (has) {
        c->have++;
        c->has[op] |= KEEL_DTYPE_BIT(dt);
    } else {
        c->missing[op] |= KEEL_DTYPE_BIT(dt);
    }
}

static bool coverage_of(int plugin, struct coverage *c)
{
    memset(c, 0, sizeof(*c));
    return keel_kernel_coverage(plugin, coverage_visit, c) == KEEL_STATUS_OK;
}

static bool is_cpu_plugin(const keel_plugin_info *info)
{
    return info->name && !strcmp(info->name, "cpu");
}

static const char *dtype_label(int dt)
{
    const char *n = keel_cli_dtype_name((keel_dtype)dt);
    return n ? n : "?";
}

/* "op(dt dt) op(dt) ..." for the ops with bits in masks[], wrapped. */
static void print_pairs(const char *label, const uint32_t *masks)
{
    int col = printf("    %-13s", label), start = col;

    for (int op = 0; op < KEEL_OP_COUNT; op++) {
        char item[256];
        size_t n;

        if (!masks[op])
            continue;
        n = (size_t)snprintf(item, sizeof item, "%s(",
                             keel_op_get_info((keel_op_id)op)->name);
        for (int dt = 0; dt < KEEL_DTYPE_COUNT_ && n < sizeof item; dt++)
            if (masks[op] & KEEL_DTYPE_BIT(dt))
                n += (size_t)snprintf(item + n, sizeof item - n, "%s%s",
                                      item[n - 1] == '(' ? "" : " ",
                                      dtype_label(dt));
        if (n < sizeof item - 1)
            strcat(item, ")");
        if (col > start && col + 1 + (int)strlen(item) > 100) {
            printf("\n%*s", start, "");
            col = start;
        }
        col += printf("%s%s", col > start ? " " : "", item);
    }
    printf("\n");
}

static void print_fallbacks_text(int nplugins)
{
    keel_plugin_info info;
    struct coverage *c = malloc(sizeof(*c));
    uint64_t total = 0;

    printf("\nKernel coverage (catalog (op, dtype) pairs, for the dtypes each "
           "device computes with):\n");
    for (int i = 0; c && i < nplugins; i++) {
        if (keel_plugin_get_info(i, &info) != KEEL_STATUS_OK ||
            !info.loaded || info.device_count == 0)
            continue;
        if (!coverage_of(i, c)) {
            printf("  %s: %s\n", info.name, keel_last_error());
            continue;
        }
        printf("  %s: kernels for %d of %d pairs", info.name, c->have,
               c->total);
        if (c->have == c->total) {
            printf("\n");
            continue;
        }
        if (is_cpu_plugin(&info))
            printf("; the other %d fail (the CPU plugin has no fallback)\n",
                   c->total - c->have);
        else
            printf("; the other %d run on the CPU plugin (counted; an "
                   "error with KEEL_STRICT=1)\n",
                   c->total - c->have);
        if (c->have > 0 && c->have <= c->total - c->have)
            print_pairs("kernels", c->has);
        print_pairs(is_cpu_plugin(&info) ? "no kernel" : "CPU fallback",
                    c->missing);
    }
    if (!c)
        printf("  out of memory\n");
    free(c);
    printf("\nRecorded fallbacks (this process):");
    for (int op = 0; op < KEEL_OP_COUNT; op++)
        for (int dt = 0; dt < KEEL_DTYPE_COUNT_; dt++) {
            uint64_t n = keel_fallback_count_dtype((keel_op_id)op,
                                                   (keel_dtype)dt);
            if (!n)
                continue;
            printf("%s %s.%s x%llu", total ? "," : "",
                   keel_op_get_info((keel_op_id)op)->name, dtype_label(dt),
                   (unsigned long long)n);
            total += n;
        }
    printf("%s\n", total ? "" : " none");
    printf("  keel devices runs no ops, so it records none itself. A "
           "workload prints a\n  one-line summary of its fallbacks at exit "
           "(KEEL_FALLBACK_REPORT=0 silences it);\n  KEEL_STRICT=report "
           "lists every (op, dtype) that fell back.\n");
}

typedef struct devices_opts {
    bool json;
    bool fallbacks;
} devices_opts;

/* ---- helpers shared by both output formats ------------------------------ */

/* "1.1", or "?" when the plugin's ABI version is unknown (0.0). */
static void format_abi(const keel_plugin_info *info, char *buf, size_t size)
{
    if (info->abi_major == 0 && info->abi_minor == 0)
        snprintf(buf, size, "?");
    else
        snprintf(buf, size, "%u.%u", (unsigned)info->abi_major,
                 (unsigned)info->abi_minor);
}

/* The one-line status of a plugin, as the text listing prints it. */
static void format_status(const keel_plugin_info *info, char *buf, size_t size)
{
    if (!info->loaded)
        snprintf(buf, size, "skipped [%s]: %s",
                 info->failed_check ? info->failed_check : "?",
                 info->reason ? info->reason : keel_status_name(info->status));
    else if (info->device_count == 0)
        snprintf(buf, size, "loaded, 0 devices%s%s",
                 info->reason ? ": " : "", info->reason ? info->reason : "");
    else
        snprintf(buf, size, "loaded");
}

/* Canonical name of a place; "<plugin>:<device>" if the runtime fails. */
static void place_name(keel_place place, char *buf, size_t size)
{
    if (keel_place_name(place, buf, size) != KEEL_STATUS_OK) {
        snprintf(buf, size, "plugin%d:%d", (int)place.plugin,
                 (int)place.device);
        keel_clear_error();
    }
}

/* true when the place is the runtime's current device. */
static bool place_is_current(keel_place place, bool have_current,
                             keel_place current)
{
    return have_current && current.plugin == place.plugin &&
           current.device == place.device;
}

/*
 * true when plugin `index` is the first loaded plugin with this device type
 * (case-insensitive), so that each type is listed once.
 */
static bool first_of_type(int index, const char *type)
{
    keel_plugin_info other;
    int i;

    for (i = 0; i < index; i++) {
        if (keel_plugin_get_info(i, &other) != KEEL_STATUS_OK) {
            keel_clear_error();
            continue;
        }
        if (other.loaded && other.device_type &&
            strcasecmp(other.device_type, type) == 0)
            return false;
    }
    return true;
}

/* ---- text output ---------------------------------------------------------- */

static void print_field(const char *label, const char *value, size_t len)
{
    if (len == 0)
        printf("      %-14s -\n", label);
    else
        printf("      %-14s %.*s\n", label, (int)len, value);
}

/* `memory` is the preformatted memory-use line (used/free or an error). */
static void print_props_text(const keel_device_props *p, const char *memory)
{
    char buf[64];
    unsigned bit;
    bool any;

    print_field("name", p->name, keel_cli_field_len(p->name, sizeof p->name));
    print_field("vendor", p->vendor,
                keel_cli_field_len(p->vendor, sizeof p->vendor));
    print_field("arch", p->arch, keel_cli_field_len(p->arch, sizeof p->arch));
    print_field("driver", p->driver_version,
                keel_cli_field_len(p->driver_version,
                                   sizeof p->driver_version));
    print_field("bus id", p->bus_id,
                keel_cli_field_len(p->bus_id, sizeof p->bus_id));
    keel_cli_format_bytes(p->total_memory, buf, sizeof buf);
    printf("      %-14s %s\n", "total memory", buf);
    printf("      %-14s %s\n", "memory", memory);
    printf("      %-14s %u\n", "compute units", (unsigned)p->compute_units);
    keel_cli_format_clock(p->clock_khz, buf, sizeof buf);
    printf("      %-14s %s\n", "clock", buf);

    printf("      %-14s", "dtypes");
    any = false;
    for (bit = 0; bit < 32; bit++) {
        const char *name;

        if (!(p->dtype_mask & (UINT32_C(1) << bit)))
            continue;
        name = keel_cli_dtype_name((keel_dtype)bit);
        if (name)
            printf(" %s", name);
        else
            printf(" dtype%u", bit);
        any = true;
    }
    printf("%s\n", any ? "" : " none");

    printf("      %-14s", "features");
    any = false;
    for (bit = 0; bit < 32; bit++) {
        const char *name;

        if (!(p->features & (UINT32_C(1) << bit)))
            continue;
        name = keel_cli_feature_name(bit);
        if (name)
            printf(" %s", name);
        else
            printf(" bit%u", bit);
        any = true;
    }
    printf("%s\n", any ? "" : " none");

    keel_cli_format_bytes(p->alloc_alignment, buf, sizeof buf);
    printf("      %-14s %s\n", "alignment", buf);
    printf("      %-14s %d\n", "stream prios", (int)p->stream_priorities);
}

/* Print one device; returns the number of failed queries. */
static int print_device_text(keel_place place, bool current)
{
    keel_device_props props;
    keel_memory_info mem;
    keel_status st;
    char name[64], used[32], free_b[32], memory[1024];
    int errors = 0;

    place_name(place, name, sizeof name);
    printf("  %s%s\n", name, current ? "  (current)" : "");

    memset(&mem, 0, sizeof mem);
    st = keel_mem_get_info(place, &mem);
    if (st == KEEL_STATUS_OK) {
        keel_cli_format_bytes(mem.used, used, sizeof used);
        keel_cli_format_bytes(mem.free, free_b, sizeof free_b);
        snprintf(memory, sizeof memory, "%s used, %s free", used, free_b);
    } else {
        snprintf(memory, sizeof memory, "error: %s: %s",
                 keel_status_name(st), keel_last_error());
        errors++;
    }

    memset(&props, 0, sizeof props);
    st = keel_device_get_props(place, &props);
    if (st == KEEL_STATUS_OK) {
        print_props_text(&props, memory);
    } else {
        printf("      %-14s error: %s: %s\n", "properties",
               keel_status_name(st), keel_last_error());
        printf("      %-14s %s\n", "memory", memory);
        errors++;
    }
    return errors;
}

/* One line per device type served by a loaded plugin: what "<type>" means. */
static void print_types_text(int nplugins)
{
    keel_plugin_info info, other;
    keel_place place;
    const char *sep;
    char name[64];
    bool header = false;
    int i, j;

    for (i = 0; i < nplugins; i++) {
        if (keel_plugin_get_info(i, &info) != KEEL_STATUS_OK) {
            keel_clear_error();
            continue;
        }
        if (!info.loaded || !info.device_type ||
            !first_of_type(i, info.device_type))
            continue;
        if (!header) {
            printf("\nDevice types (what a bare type name selects):\n");
            header = true;
        }
        if (keel_place_parse(info.device_type, &place) == KEEL_STATUS_OK) {
            place_name(place, name, sizeof name);
            printf("  %-8s -> %s  (served by", info.device_type, name);
        } else {
            keel_clear_error();
            printf("  %-8s -> no device  (served by", info.device_type);
        }
        sep = " ";
        for (j = i; j < nplugins; j++) {
            if (keel_plugin_get_info(j, &other) != KEEL_STATUS_OK) {
                keel_clear_error();
                continue;
            }
            if (other.loaded && other.device_type &&
                strcasecmp(other.device_type, info.device_type) == 0) {
                printf("%s%s", sep, other.name ? other.name : "?");
                sep = ", ";
            }
        }
        printf(")\n");
    }
}

static void print_search_path(void)
{
    const char *path = getenv("KEEL_PLUGIN_PATH");
    const char *defaults = getenv("KEEL_PLUGIN_DEFAULT_PATHS");

    printf("KEEL_PLUGIN_PATH=%s\n", path && path[0] ? path : "(unset)");
    if (defaults)
        printf("KEEL_PLUGIN_DEFAULT_PATHS=%s\n", defaults);
}

/* Text listing. Sets *ndevices; returns the number of failed queries. */
static int devices_text(const devices_opts *opts, int *ndevices)
{
    keel_plugin_info info;
    keel_place current, place;
    keel_status st;
    bool have_current;
    char abi[16], status[1024];
    const char *cur;
    int nplugins, nloaded = 0, errors = 0, i, d;

    nplugins = keel_plugin_count();
    have_current = keel_current_place(&current) == KEEL_STATUS_OK;
    if (!have_current)
        keel_clear_error();

    printf("keel %s, device ABI %d.%d\n", keel_version(),
           KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR);
    print_search_path();

    for (i = 0; i < nplugins; i++) {
        if (keel_plugin_get_info(i, &info) == KEEL_STATUS_OK && info.loaded)
            nloaded++;
        keel_clear_error();
    }
    printf("\nPlugins: %d found, %d loaded, %d skipped\n", nplugins, nloaded,
           nplugins - nloaded);

    *ndevices = 0;
    for (i = 0; i < nplugins; i++) {
        st = keel_plugin_get_info(i, &info);
        if (st != KEEL_STATUS_OK) {
            printf("  [%d] error: %s: %s\n", i, keel_status_name(st),
                   keel_last_error());
            errors++;
            continue;
        }
        format_abi(&info, abi, sizeof abi);
        format_status(&info, status, sizeof status);
        printf("  [%d] %s\n", i, info.name ? info.name : "(unknown)");
        printf("      %-14s %s\n", "path", info.path ? info.path : "?");
        printf("      %-14s %s\n", "version",
               info.version ? info.version : "?");
        printf("      %-14s %s\n", "ABI", abi);
        if (info.device_type)
            printf("      %-14s %s\n", "device type", info.device_type);
        if (info.description)
            printf("      %-14s %s\n", "description", info.description);
        printf("      %-14s %s\n", "status", status);
        if (info.loaded)
            *ndevices += info.device_count;
    }

    printf("\nDevices: %d\n", *ndevices);
    for (i = 0; i < nplugins; i++) {
        if (keel_plugin_get_info(i, &info) != KEEL_STATUS_OK) {
            keel_clear_error();
            continue;
        }
        if (!info.loaded)
            continue;
        for (d = 0; d < info.device_count; d++) {
            place.plugin = i;
            place.device = d;
            errors += print_device_text(
                place, place_is_current(place, have_current, current));
        }
    }

    print_types_text(nplugins);

    cur = keel_get_device();
    printf("\nCurrent device: %s\n", cur && cur[0] ? cur : "none");

    if (opts->fallbacks)
        print_fallbacks_text(nplugins);
    return errors;
}

/* ---- JSON output -------------------------------------------------------- */

/*
 * JSON building. jansson returns NULL when out of memory and json_string()
 * returns NULL for text that is not UTF-8; both are handled here so that the
 * builders below stay flat. `ok` turns false on the first failure.
 */
typedef struct json_ctx {
    bool ok;
} json_ctx;

/* A JSON string from `len` bytes; NULL text gives JSON null. Bytes that do
 * not form UTF-8 are replaced by '?'. */
static json_t *jstrn(const char *s, size_t len)
{
    json_t *v;
    char *copy;
    size_t i;

    if (!s)
        return json_null();
    v = json_stringn(s, len);
    if (v)
        return v;
    copy = malloc(len + 1);
    if (!copy)
        return NULL;
    for (i = 0; i < len; i++)
        copy[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
    copy[len] = '\0';
    v = json_stringn(copy, len);
    free(copy);
    return v;
}

static json_t *jstr(const char *s)
{
    return jstrn(s, s ? strlen(s) : 0);
}

/* Set obj[key] = value, taking ownership of value. */
static void jset(json_ctx *ctx, json_t *obj, const char *key, json_t *value)
{
    if (!value || json_object_set_new(obj, key, value) != 0)
        ctx->ok = false;
}

static void jappend(json_ctx *ctx, json_t *arr, json_t *value)
{
    if (!value || json_array_append_new(arr, value) != 0)
        ctx->ok = false;
}

static json_t *jobject(json_ctx *ctx)
{
    json_t *obj = json_object();

    if (!obj)
        ctx->ok = false;
    return obj;
}

static json_t *jarray(json_ctx *ctx)
{
    json_t *arr = json_array();

    if (!arr)
        ctx->ok = false;
    return arr;
}

#define JFIELD(p, field) jstrn((p)->field, keel_cli_field_len((p)->field, \
                                                           sizeof (p)->field))

static json_t *props_json(json_ctx *ctx, const keel_device_props *p)
{
    json_t *obj = jobject(ctx), *dtypes, *features;
    char other[16];
    unsigned bit;

    if (!obj)
        return NULL;
    jset(ctx, obj, "name", JFIELD(p, name));
    jset(ctx, obj, "vendor", JFIELD(p, vendor));
    jset(ctx, obj, "arch", JFIELD(p, arch));
    jset(ctx, obj, "driver_version", JFIELD(p, driver_version));
    jset(ctx, obj, "bus_id", JFIELD(p, bus_id));
    jset(ctx, obj, "total_memory", json_integer((json_int_t)p->total_memory));
    jset(ctx, obj, "compute_units", json_integer(p->compute_units));
    jset(ctx, obj, "clock_khz", json_integer(p->clock_khz));

    dtypes = jarray(ctx);
    features = jarray(ctx);
    for (bit = 0; bit < 32 && dtypes && features; bit++) {
        const char *name;

        if (p->dtype_mask & (UINT32_C(1) << bit)) {
            name = keel_cli_dtype_name((keel_dtype)bit);
            snprintf(other, sizeof other, "dtype%u", bit);
            jappend(ctx, dtypes, jstr(name ? name : other));
        }
        if (p->features & (UINT32_C(1) << bit)) {
            name = keel_cli_feature_name(bit);
            snprintf(other, sizeof other, "bit%u", bit);
            jappend(ctx, features, jstr(name ? name : other));
        }
    }
    jset(ctx, obj, "dtypes", dtypes);
    jset(ctx, obj, "features", features);
    jset(ctx, obj, "alloc_alignment", json_integer(p->alloc_alignment));
    jset(ctx, obj, "stream_priorities", json_integer(p->stream_priorities));
    return obj;
}

/* Append "<prefix>: <status>: <message>" to the device's "errors" list. */
static void device_error(json_ctx *ctx, json_t *errs, const char *what,
                         keel_status st)
{
    char msg[1024];

    snprintf(msg, sizeof msg, "%s: %s: %s", what, keel_status_name(st),
             keel_last_error());
    jappend(ctx, errs, jstr(msg));
}

/* One device object; *errors counts failed queries. */
static json_t *device_json(json_ctx *ctx, keel_place place,
                           const keel_plugin_info *plugin, bool current,
                           int *errors)
{
    keel_device_props props;
    keel_memory_info mem;
    keel_status st;
    json_t *obj = jobject(ctx), *errs = jarray(ctx), *m;
    char name[64];

    if (!obj || !errs) {
        json_decref(obj);
        json_decref(errs);
        return NULL;
    }
    place_name(place, name, sizeof name);
    jset(ctx, obj, "name", jstr(name));
    jset(ctx, obj, "plugin", jstr(plugin->name));
    jset(ctx, obj, "index", json_integer(place.device));
    jset(ctx, obj, "current", json_boolean(current));

    memset(&props, 0, sizeof props);
    st = keel_device_get_props(place, &props);
    if (st == KEEL_STATUS_OK) {
        jset(ctx, obj, "props", props_json(ctx, &props));
    } else {
        jset(ctx, obj, "props", json_null());
        device_error(ctx, errs, "properties", st);
        (*errors)++;
    }

    memset(&mem, 0, sizeof mem);
    st = keel_mem_get_info(place, &mem);
    if (st == KEEL_STATUS_OK) {
        m = jobject(ctx);
        if (m) {
            jset(ctx, m, "total", json_integer((json_int_t)mem.total));
            jset(ctx, m, "free", json_integer((json_int_t)mem.free));
            jset(ctx, m, "used", json_integer((json_int_t)mem.used));
        }
        jset(ctx, obj, "memory", m);
    } else {
        jset(ctx, obj, "memory", json_null());
        device_error(ctx, errs, "memory", st);
        (*errors)++;
    }

    if (json_array_size(errs) > 0)
        jset(ctx, obj, "errors", errs);
    else
        json_decref(errs);
    return obj;
}

static json_t *plugin_json(json_ctx *ctx, int index,
                           const keel_plugin_info *info)
{
    json_t *obj = jobject(ctx);
    char abi[16];

    if (!obj)
        return NULL;
    jset(ctx, obj, "index", json_integer(index));
    jset(ctx, obj, "path", jstr(info->path));
    jset(ctx, obj, "name", jstr(info->name));
    jset(ctx, obj, "version", jstr(info->version));
    jset(ctx, obj, "device_type", jstr(info->device_type));
    jset(ctx, obj, "description", jstr(info->description));
    format_abi(info, abi, sizeof abi);
    jset(ctx, obj, "abi_version", abi[0] == '?' ? json_null() : jstr(abi));
    jset(ctx, obj, "loaded", json_boolean(info->loaded));
    jset(ctx, obj, "device_count", json_integer(info->device_count));
    jset(ctx, obj, "failed_check", jstr(info->failed_check));
    jset(ctx, obj, "status", jstr(keel_status_name(info->status)));
    jset(ctx, obj, "reason", jstr(info->reason));
    return obj;
}

/* [{type, resolves_to, plugins:[...]}] for every type a loaded plugin serves. */
static json_t *types_json(json_ctx *ctx, int nplugins)
{
    keel_plugin_info info, other;
    keel_place place;
    json_t *arr = jarray(ctx), *obj, *names;
    char name[64];
    int i, j;

    for (i = 0; arr && i < nplugins; i++) {
        if (keel_plugin_get_info(i, &info) != KEEL_STATUS_OK) {
            keel_clear_error();
            continue;
        }
        if (!info.loaded || !info.device_type ||
            !first_of_type(i, info.device_type))
            continue;
        obj = jobject(ctx);
        names = jarray(ctx);
        if (!obj || !names) {
            json_decref(obj);
            json_decref(names);
            break;
        }
        jset(ctx, obj, "type", jstr(info.device_type));
        if (keel_place_parse(info.device_type, &place) == KEEL_STATUS_OK) {
            place_name(place, name, sizeof name);
            jset(ctx, obj, "resolves_to", jstr(name));
        } else {
            keel_clear_error();
            jset(ctx, obj, "resolves_to", json_null());
        }
        for (j = i; j < nplugins; j++) {
            if (keel_plugin_get_info(j, &other) != KEEL_STATUS_OK) {
                keel_clear_error();
                continue;
            }
            if (other.loaded && other.device_type &&
                strcasecmp(other.device_type, info.device_type) == 0)
                jappend(ctx, names, jstr(other.name));
        }
        jset(ctx, obj, "plugins", names);
        jappend(ctx, arr, obj);
    }
    return arr;
}

/* {op: [dtype, ...], ...} for the ops with bits in masks[]. */
static json_t *pairs_json(json_ctx *ctx, const uint32_t *masks)
{
    json_t *obj = jobject(ctx);

    for (int op = 0; obj && op < KEEL_OP_COUNT; op++) {
        json_t *dts;
        if (!masks[op])
            continue;
        dts = jarray(ctx);
        if (!dts)
            break;
        for (int dt = 0; dt < KEEL_DTYPE_COUNT_; dt++)
            if (masks[op] & KEEL_DTYPE_BIT(dt))
                jappend(ctx, dts, jstr(dtype_label(dt)));
        jset(ctx, obj, keel_op_get_info((keel_op_id)op)->name, dts);
    }
    return obj;
}

/* The "fallbacks" object of --fallbacks (docs/cli.md). */
static json_t *fallbacks_json(json_ctx *ctx, int nplugins)
{
    json_t *fb = jobject(ctx), *cov = jarray(ctx), *rec = jobject(ctx);
    json_t *ops = jobject(ctx);
    struct coverage *c = malloc(sizeof(*c));
    uint64_t total = 0;

    if (!fb || !cov || !rec || !ops || !c) {
        ctx->ok = false;
        json_decref(fb);
        json_decref(cov);
        json_decref(rec);
        json_decref(ops);
        free(c);
        return NULL;
    }
    for (int i = 0; i < nplugins; i++) {
        keel_plugin_info pi;
        json_t *e;
        if (keel_plugin_get_info(i, &pi) != KEEL_STATUS_OK || !pi.loaded ||
            pi.device_count == 0 || !coverage_of(i, c))
            continue;
        e = jobject(ctx);
        if (!e)
            break;
        jset(ctx, e, "plugin", jstr(pi.name));
        jset(ctx, e, "pairs", json_integer(c->total));
        jset(ctx, e, "kernels", json_integer(c->have));
        jset(ctx, e, "falls_back_to_cpu", json_boolean(!is_cpu_plugin(&pi)));
        jset(ctx, e, "missing", pairs_json(ctx, c->missing));
        jappend(ctx, cov, e);
    }
    free(c);
    for (int op = 0; op < KEEL_OP_COUNT; op++)
        for (int dt = 0; dt < KEEL_DTYPE_COUNT_; dt++) {
            uint64_t n = keel_fallback_count_dtype((keel_op_id)op,
                                                   (keel_dtype)dt);
            char key[96];
            if (!n)
                continue;
            snprintf(key, sizeof key, "%s.%s",
                     keel_op_get_info((keel_op_id)op)->name, dtype_label(dt));
            jset(ctx, ops, key, json_integer((json_int_t)n));
            total += n;
        }
    jset(ctx, rec, "total", json_integer((json_int_t)total));
    jset(ctx, rec, "ops", ops);
    jset(ctx, fb, "coverage", cov);
    jset(ctx, fb, "recorded", rec);
    jset(ctx, fb, "note", jstr(fallback_note));
    return fb;
}

/* JSON document. Sets *ndevices; returns the number of failed queries, or
 * -1 when the document could not be built (out of memory). */
static int devices_json(const devices_opts *opts, int *ndevices)
{
    json_ctx ctx = { true };
    keel_plugin_info info;
    keel_place current, place;
    keel_status st;
    json_t *root, *plugins, *devices;
    bool have_current;
    char abi[16];
    const char *cur;
    int nplugins, errors = 0, i, d;

    nplugins = keel_plugin_count();
    have_current = keel_current_place(&current) == KEEL_STATUS_OK;
    if (!have_current)
        keel_clear_error();
    cur = keel_get_device();

    root = jobject(&ctx);
    plugins = jarray(&ctx);
    devices = jarray(&ctx);
    if (!root || !plugins || !devices) {
        json_decref(root);
        json_decref(plugins);
        json_decref(devices);
        return -1;
    }
    snprintf(abi, sizeof abi, "%d.%d", KEEL_ABI_VERSION_MAJOR,
             KEEL_ABI_VERSION_MINOR);
    jset(&ctx, root, "keel_version", jstr(keel_version()));
    jset(&ctx, root, "abi_version", jstr(abi));
    jset(&ctx, root, "current_device", cur && cur[0] ? jstr(cur) : json_null());

    *ndevices = 0;
    for (i = 0; i < nplugins; i++) {
        st = keel_plugin_get_info(i, &info);
        if (st != KEEL_STATUS_OK) {
            fprintf(stderr, "keel devices: plugin %d: %s: %s\n", i,
                    keel_status_name(st), keel_last_error());
            errors++;
            continue;
        }
        jappend(&ctx, plugins, plugin_json(&ctx, i, &info));
        if (!info.loaded)
            continue;
        for (d = 0; d < info.device_count; d++) {
            place.plugin = i;
            place.device = d;
            jappend(&ctx, devices,
                    device_json(&ctx, place, &info,
                                place_is_current(place, have_current, current),
                                &errors));
            (*ndevices)++;
        }
    }
    jset(&ctx, root, "plugins", plugins);
    jset(&ctx, root, "devices", devices);
    jset(&ctx, root, "device_types", types_json(&ctx, nplugins));

    if (opts->fallbacks)
        jset(&ctx, root, "fallbacks", fallbacks_json(&ctx, nplugins));

    if (!ctx.ok) {
        json_decref(root);
        return -1;
    }
    if (json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0)
        errors++;
    fputc('\n', stdout);
    json_decref(root);
    return errors;
}

/* ---- the command -------------------------------------------------------- */

static int parse_args(int argc, char **argv, devices_opts *opts)
{
    int i;

    memset(opts, 0, sizeof *opts);
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            opts->json = true;
        else if (strcmp(argv[i], "--fallbacks") == 0)
            opts->fallbacks = true;
        else if (argv[i][0] == '-')
            return keel_cli_usage_error(&keel_cmd_devices,
                                        "unknown option '%s'", argv[i]);
        else
            return keel_cli_usage_error(&keel_cmd_devices,
                                        "unexpected argument '%s'", argv[i]);
    }
    return KEEL_EXIT_OK;
}

static int cmd_devices_run(int argc, char **argv)
{
    devices_opts opts;
    keel_status st;
    int rc, errors, ndevices = 0;

    rc = parse_args(argc, argv, &opts);
    if (rc != KEEL_EXIT_OK)
        return rc;

    st = keel_init();
    if (st != KEEL_STATUS_OK)
        return keel_cli_runtime_error(&keel_cmd_devices,
                                      "initialising the runtime", st);

    errors = opts.json ? devices_json(&opts, &ndevices)
                       : devices_text(&opts, &ndevices);
    if (errors < 0) {
        fprintf(stderr, "keel devices: out of memory building the JSON "
                        "document\n");
        rc = KEEL_EXIT_ERROR;
    } else if (errors > 0) {
        fprintf(stderr, "keel devices: %d quer%s failed (see %s)\n", errors,
                errors == 1 ? "y" : "ies",
                opts.json ? "\"errors\" in the output" : "above");
        rc = KEEL_EXIT_ERROR;
    } else if (ndevices == 0) {
        fprintf(stderr,
                "keel devices: no device found.\n"
                "  Set KEEL_PLUGIN_PATH to a plugin file or to a folder of "
                "libkeel-*.so plugins\n"
                "  (colon-separated), or install plugins into "
                "<libdir>/keel/plugins.\n"
                "  A skipped plugin's status says which check it "
                "failed.\n");
        rc = KEEL_EXIT_NO_DEVICE;
    } else {
        rc = KEEL_EXIT_OK;
    }

    /* Flush before the plugins are unloaded: nothing printed may be lost. */
    fflush(stdout);
    keel_shutdown();
    return rc;
}

const keel_cli_command keel_cmd_devices = {
    .name = "devices",
    .synopsis = "[--json] [--fallbacks]",
    .summary = "list the plugins found and the devices they serve",
    .help =
        "List every plugin the runtime found -- loaded, loaded with no\n"
        "device, or skipped with the check it failed and why -- then every\n"
        "device of the loaded plugins with its canonical name, properties\n"
        "and memory use, what each bare device type selects, and the\n"
        "current device.\n"
        "\n"
        "options:\n"
        "  --json       print one JSON document instead (see docs/cli.md)\n"
        "  --fallbacks  also report each plugin's kernel coverage: how many\n"
        "               catalog (op, dtype) pairs it has kernels for, and\n"
        "               which would run on the CPU plugin instead; and the\n"
        "               fallbacks recorded in this process (none: keel devices\n"
        "               runs no ops). A workload prints its own fallback\n"
        "               summary at exit (KEEL_FALLBACK_REPORT=0: off);\n"
        "               KEEL_STRICT=report lists every (op, dtype) in it\n"
        "  -h, --help   show this help\n"
        "\n"
        "environment:\n"
        "  KEEL_PLUGIN_PATH           colon-separated plugin files/folders\n"
        "  KEEL_PLUGIN_DEFAULT_PATHS  0 = search only KEEL_PLUGIN_PATH\n"
        "  KEEL_DEVICE                the default current device (\"gpu:1\")\n"
        "  KEEL_LOG_LEVEL             error, warn, info (logs each skip), debug\n"
        "\n"
        "exit status: 0 at least one device, 1 a runtime error,\n"
        "             2 bad usage, 3 no device found\n",
    .run = cmd_devices_run,
};
