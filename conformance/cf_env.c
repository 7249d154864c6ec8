/*
 * keel conform — a child's environment and the helpers tests share.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conform.h"

struct cf_env cf_env;
struct cf_test *cf_current;
void (*cf_fail_hook)(const char *msg);

/* ---- per-test state: skip reason and notes ------------------------------ */

static char skip_reason[CF_MSG_MAX];
static bool skip_set;
static char notes[4 * CF_MSG_MAX];
static bool metric_set;
static double metric_nmse, metric_tol;

void cf_test_state_reset(void)
{
    metric_set = false;
    metric_nmse = metric_tol = 0;
    skip_set = false;
    skip_reason[0] = '\0';
    notes[0] = '\0';
}

void cf_skip(const char *fmt, ...)
{
    va_list ap;

    if (skip_set)
        return;
    skip_set = true;
    va_start(ap, fmt);
    vsnprintf(skip_reason, sizeof(skip_reason), fmt, ap);
    va_end(ap);
}

bool cf_skipped(void)
{
    return skip_set;
}

const char *cf_skip_reason(void)
{
    return skip_reason;
}

void cf_note(const char *fmt, ...)
{
    size_t n = strlen(notes);
    va_list ap;

    if (n + 4 >= sizeof(notes))
        return;
    if (n)
        notes[n++] = ';', notes[n++] = ' ', notes[n] = '\0';
    va_start(ap, fmt);
    vsnprintf(notes + n, sizeof(notes) - n, fmt, ap);
    va_end(ap);
}

const char *cf_notes(void)
{
    return notes;
}

/* The worst comparison of the test: largest NMSE relative to its bound
 * (or largest NMSE where the bound is 0). */
void cf_metric_nmse(double nmse, double tol)
{
    double r = tol > 0 ? nmse / tol : nmse;
    double w = metric_tol > 0 ? metric_nmse / metric_tol : metric_nmse;

    /* Only an op's own kernel test reports a figure: other tests compare
     * results on purpose-made inputs (bad descriptors, for one) where a
     * mismatch is what they look for. */
    if (!cf_current || cf_current->op < 0)
        return;
    if (isnan(nmse))
        r = INFINITY;
    if (!metric_set || r > w) {
        metric_nmse = nmse;
        metric_tol = tol;
        metric_set = true;
    }
}

bool cf_metric_get(double *nmse, double *tol)
{
    if (metric_set) {
        *nmse = metric_nmse;
        *tol = metric_tol;
    }
    return metric_set;
}

/* ---- checks ----------------------------------------------------------------- */

void cf_fail_at(const char *file, int line, const char *fmt, ...)
{
    char msg[CF_MSG_MAX];
    const char *base = strrchr(file, '/');
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    CU_assertImplementation(CU_FALSE, (unsigned)line, msg,
                            base ? base + 1 : file, "", CU_FALSE);
    if (cf_fail_hook)
        cf_fail_hook(msg);
}

bool cf_expect_at(const char *file, int line, keel_status got,
                  keel_status want, const char *fmt, ...)
{
    char what[CF_MSG_MAX / 2];
    va_list ap;

    if (got == want)
        return true;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    cf_fail_at(file, line, "%s: returned %s, expected %s", what,
               keel_status_name(got), keel_status_name(want));
    return false;
}

/* ---- time ---------------------------------------------------------------------- */

double cf_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cf_sleep_ms(double ms)
{
    struct timespec ts;

    if (ms <= 0)
        return;
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1000) * 1e6);
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* ---- dtypes ----------------------------------------------------------------------- */

const char *cf_dtype_name(int dtype)
{
    return keel_dtype_name((keel_dtype)dtype);
}

bool cf_dtype_is_float(int dtype)
{
    return dtype == KEEL_F32 || dtype == KEEL_F64 || dtype == KEEL_F16 ||
           dtype == KEEL_BF16;
}

uint32_t cf_dtype_size(int dtype)
{
    return keel_dtype_size((keel_dtype)dtype);
}

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    float f;

    if (exp == 0) {
        /* zero or subnormal: man * 2^-24 */
        f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    if (exp == 31)
        bits = sign | 0x7f800000u | (man << 13);
    else
        bits = sign | ((exp + 112) << 23) | (man << 13);
    memcpy(&f, &bits, sizeof(f));
    return f;
}

static uint16_t float_to_half(float f)
{
    uint32_t x, sign, mag;

    memcpy(&x, &f, sizeof(x));
    sign = (x >> 16) & 0x8000u;
    mag = x & 0x7fffffffu;
    if (mag > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00u);
    if (mag >= 0x477ff000u) /* rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (mag < 0x38800000u) {
        /* subnormal half: round mag * 2^24 to an integer, ties to even */
        float a = fabsf(f) * 16777216.0f;
        float r = nearbyintf(a);
        return (uint16_t)(sign | (uint16_t)r);
    }
    /* normal: rebias and round the 13 dropped bits to nearest even */
    mag += 0xc8000000u; /* (15 - 127) << 23 */
    mag += 0x0fffu + ((mag >> 13) & 1u);
    return (uint16_t)(sign | (mag >> 13));
}

static float bf16_to_float(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;

    memcpy(&f, &bits, sizeof(f));
    return f;
}

static uint16_t float_to_bf16(float f)
{
    uint32_t x;

    memcpy(&x, &f, sizeof(x));
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

double cf_load(int dtype, const void *buf, int64_t i)
{
    const char *p = buf;

    switch (dtype) {
    case KEEL_F32: {
        float v;
        memcpy(&v, p + i * 4, 4);
        return v;
    }
    case KEEL_F64: {
        double v;
        memcpy(&v, p + i * 8, 8);
        return v;
    }
    case KEEL_F16: {
        uint16_t v;
        memcpy(&v, p + i * 2, 2);
        return half_to_float(v);
    }
    case KEEL_BF16: {
        uint16_t v;
        memcpy(&v, p + i * 2, 2);
        return bf16_to_float(v);
    }
    case KEEL_I8:
        return ((const int8_t *)buf)[i];
    case KEEL_U8:
    case KEEL_BOOL:
        return ((const uint8_t *)buf)[i];
    case KEEL_I32: {
        int32_t v;
        memcpy(&v, p + i * 4, 4);
        return v;
    }
    case KEEL_I64: {
        int64_t v;
        memcpy(&v, p + i * 8, 8);
        return (double)v;
    }
    default:
        return NAN;
    }
}

void cf_store(int dtype, void *buf, int64_t i, double v)
{
    char *p = buf;

    switch (dtype) {
    case KEEL_F32: {
        float f = (float)v;
        memcpy(p + i * 4, &f, 4);
        break;
    }
    case KEEL_F64:
        memcpy(p + i * 8, &v, 8);
        break;
    case KEEL_F16: {
        uint16_t h = float_to_half((float)v);
        memcpy(p + i * 2, &h, 2);
        break;
    }
    case KEEL_BF16: {
        uint16_t h = float_to_bf16((float)v);
        memcpy(p + i * 2, &h, 2);
        break;
    }
    case KEEL_I8:
        ((int8_t *)buf)[i] = (int8_t)llrint(v);
        break;
    case KEEL_U8:
        ((uint8_t *)buf)[i] = (uint8_t)llrint(v);
        break;
    case KEEL_BOOL:
        ((uint8_t *)buf)[i] = v != 0;
        break;
    case KEEL_I32: {
        int32_t x = (int32_t)llrint(v);
        memcpy(p + i * 4, &x, 4);
        break;
    }
    case KEEL_I64: {
        int64_t x = (int64_t)llrint(v);
        memcpy(p + i * 8, &x, 8);
        break;
    }
    default:
        break;
    }
}

double cf_quantize(int dtype, double v)
{
    unsigned char tmp[8];

    cf_store(dtype, tmp, 0, v);
    return cf_load(dtype, tmp, 0);
}

/* ---- random numbers and patterns ------------------------------------------------ */

void cf_rng_seed(struct cf_rng *r, uint64_t seed)
{
    r->s = seed ^ UINT64_C(0x9e3779b97f4a7c15);
}

uint64_t cf_rng_next(struct cf_rng *r)
{
    uint64_t z = (r->s += UINT64_C(0x9e3779b97f4a7c15));

    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

double cf_rng_uniform(struct cf_rng *r, double lo, double hi)
{
    double u = (double)(cf_rng_next(r) >> 11) * 0x1.0p-53;

    return lo + (hi - lo) * u;
}

int64_t cf_rng_int(struct cf_rng *r, int64_t lo, int64_t hi)
{
    uint64_t span = (uint64_t)(hi - lo) + 1;

    return lo + (int64_t)(span ? cf_rng_next(r) % span : cf_rng_next(r));
}

uint64_t cf_hash(const char *s, uint64_t h)
{
    h ^= UINT64_C(0xcbf29ce484222325);
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * UINT64_C(0x100000001b3);
    return h;
}

static uint8_t pattern_byte(uint32_t seed, size_t i)
{
    uint32_t x = (uint32_t)i * 2654435761u + seed * 40503u + 0x5bd1e995u;

    x ^= x >> 15;
    x *= 0x2c1b3c6du;
    x ^= x >> 12;
    return (uint8_t)(x ^ (x >> 8));
}

void cf_pattern(void *buf, size_t size, uint32_t seed)
{
    uint8_t *p = buf;

    for (size_t i = 0; i < size; i++)
        p[i] = pattern_byte(seed, i);
}

int64_t cf_pattern_check(const void *buf, size_t size, uint32_t seed)
{
    const uint8_t *p = buf;

    for (size_t i = 0; i < size; i++)
        if (p[i] != pattern_byte(seed, i))
            return (int64_t)i;
    return -1;
}

/* ---- plugin helpers ---------------------------------------------------------------- */

bool cf_alloc(int32_t dev, uint64_t size, keel_dptr *ptr)
{
    *ptr = 0;
    return CF_OK(cf_env.api->memory->alloc(dev, size, ptr),
                 "memory.alloc(device %d, %llu bytes)", (int)dev,
                 (unsigned long long)size);
}

void cf_free(int32_t dev, keel_dptr ptr)
{
    if (ptr)
        CF_OK(cf_env.api->memory->free(dev, ptr), "memory.free(device %d)",
              (int)dev);
}

bool cf_upload(int32_t dev, keel_dptr dst, const void *src, uint64_t size)
{
    return CF_OK(cf_env.api->memory->copy_h2d(dev, dst, src, size),
                 "memory.copy_h2d(device %d, %llu bytes)", (int)dev,
                 (unsigned long long)size);
}

bool cf_download(int32_t dev, void *dst, keel_dptr src, uint64_t size)
{
    return CF_OK(cf_env.api->memory->copy_d2h(dev, dst, src, size),
                 "memory.copy_d2h(device %d, %llu bytes)", (int)dev,
                 (unsigned long long)size);
}

bool cf_stream_new(int32_t dev, keel_stream *s)
{
    *s = NULL;
    return CF_OK(cf_env.api->stream->stream_create(dev, 0, s),
                 "stream.stream_create(device %d)", (int)dev);
}

void cf_stream_del(int32_t dev, keel_stream s)
{
    if (s)
        CF_OK(cf_env.api->stream->stream_destroy(dev, s),
              "stream.stream_destroy(device %d)", (int)dev);
}

bool cf_sync(int32_t dev, keel_stream s)
{
    return CF_OK(cf_env.api->stream->stream_synchronize(dev, s),
                 "stream.stream_synchronize(device %d, %s stream)", (int)dev,
                 s ? "a created" : "the default");
}

keel_status cf_event_wait(int32_t dev, keel_event e, double seconds)
{
    double end = cf_now() + seconds;
    keel_status st;

    for (;;) {
        st = cf_env.api->stream->event_query(dev, e);
        if (st != KEEL_STATUS_NOT_READY || cf_now() > end)
            return st;
        cf_sleep_ms(1);
    }
}

keel_status cf_stream_wait(int32_t dev, keel_stream s, double seconds)
{
    double end = cf_now() + seconds;
    keel_status st;

    for (;;) {
        st = cf_env.api->stream->stream_query(dev, s);
        if (st != KEEL_STATUS_NOT_READY || cf_now() > end)
            return st;
        cf_sleep_ms(1);
    }
}

bool cf_has_feature(int i, uint32_t feature)
{
    return (cf_env.props[i].features & feature) != 0;
}

int cf_dev_index(int32_t dev)
{
    for (int i = 0; i < cf_env.ndev; i++)
        if (cf_env.dev[i] == dev)
            return i;
    return -1;
}

void cf_gate_init(struct cf_gate *g, double limit_s)
{
    atomic_init(&g->open, 0);
    atomic_init(&g->ran, 0);
    atomic_init(&g->entered, 0);
    g->limit_s = limit_s;
}

void cf_gate_fn(void *arg)
{
    struct cf_gate *g = arg;
    double end = cf_now() + g->limit_s;

    atomic_store(&g->entered, 1);
    while (!atomic_load(&g->open) && cf_now() < end)
        cf_sleep_ms(0.2);
    atomic_fetch_add(&g->ran, 1);
}

/* ---- setup of a core-context child ----------------------------------------------- */

static int find_reference(void)
{
    keel_plugin_info info;
    keel_place ref;

    cf_env.have_ref = false;
    if (keel_place_parse("cpu:0", &ref) != KEEL_STATUS_OK ||
        keel_plugin_get_info(ref.plugin, &info) != KEEL_STATUS_OK ||
        !info.name || strcmp(info.name, "cpu") != 0) {
        snprintf(cf_env.ref_reason, sizeof(cf_env.ref_reason),
                 "the CPU reference plugin (libkeel-cpu.so) is not "
                 "available: %s",
                 keel_last_error()[0] ? keel_last_error() : "not found");
        keel_clear_error();
        return 0;
    }
    cf_env.have_ref = true;
    keel_set_device("cpu:0");
    return 0;
}

static int select_devices(char *why, size_t whysz)
{
    const struct cf_config *cfg = cf_env.cfg;

    cf_env.ndev = 0;
    if (cfg->all_devices) {
        for (int32_t d = 0; d < cf_env.device_count && d < CF_MAX_DEVICES;
             d++)
            cf_env.dev[cf_env.ndev++] = d;
    } else {
        for (int i = 0; i < cfg->ndevices; i++) {
            if (cfg->devices[i] >= cf_env.device_count) {
                snprintf(why, whysz,
                         "the configuration selects device %d, but the "
                         "plugin has %d",
                         (int)cfg->devices[i], (int)cf_env.device_count);
                return -1;
            }
            cf_env.dev[cf_env.ndev++] = cfg->devices[i];
        }
    }
    if (cf_env.ndev == 0) {
        snprintf(why, whysz, "the plugin has no device");
        return -1;
    }
    return 0;
}

static int read_props(char *why, size_t whysz)
{
    for (int i = 0; i < cf_env.ndev; i++) {
        keel_device_props *p = &cf_env.props[i];
        keel_place pl = {cf_env.plugin, cf_env.dev[i]};
        keel_status st;

        memset(p, 0, sizeof(*p));
        p->struct_size = sizeof(*p);
        st = cf_env.api->device->get_device_props(cf_env.dev[i], p);
        if (st != KEEL_STATUS_OK) {
            snprintf(why, whysz, "device.get_device_props(%d) returned %s",
                     (int)cf_env.dev[i], keel_status_name(st));
            return -1;
        }
        if (keel_place_name(pl, cf_env.place[i], sizeof(cf_env.place[i])))
            snprintf(cf_env.place[i], sizeof(cf_env.place[i]), "%d",
                     (int)cf_env.dev[i]);
    }
    return 0;
}

int cf_coll_caps_query(const keel_collective_ops *col, int32_t dev,
                       keel_collective_caps *caps, char *why, size_t whysz)
{
    keel_status st;

    memset(caps, 0, sizeof(*caps));
    if (!col || !col->get_caps)
        return 0;
    caps->struct_size = sizeof(*caps);
    st = col->get_caps(dev, caps);
    if (st != KEEL_STATUS_OK) {
        snprintf(why, whysz, "collective.get_caps(%d) returned %s",
                 (int)dev, keel_status_name(st));
        memset(caps, 0, sizeof(*caps));
        return -1;
    }
    return 1;
}

uint32_t cf_collective_timeout_ms(void)
{
    if (cf_env.cfg->collective_timeout_ms)
        return cf_env.cfg->collective_timeout_ms;
    return cf_env.coll_declared ? cf_env.coll_caps.timeout_ms : 0;
}

/* The declaration the collective tests follow: every tested device must
 * declare, and what is tested is what all of them declare. A failing
 * get_caps counts as not declared here; collectives/caps reports it. */
static void read_coll_caps(void)
{
    const keel_collective_ops *col = cf_env.api->collective;
    keel_collective_caps all, c;
    char why[160];

    cf_env.coll_declared = false;
    memset(&all, 0, sizeof(all));
    all.collectives = all.dtype_mask = all.reduce_ops = ~0u;
    for (int i = 0; i < cf_env.ndev; i++) {
        if (cf_coll_caps_query(col, cf_env.dev[i], &c, why, sizeof(why)) != 1)
            return;
        all.collectives &= c.collectives;
        all.dtype_mask &= c.dtype_mask;
        all.reduce_ops &= c.reduce_ops;
        if (c.timeout_ms > all.timeout_ms)
            all.timeout_ms = c.timeout_ms;
        if (c.id_bytes > all.id_bytes)
            all.id_bytes = c.id_bytes;
    }
    all.struct_size = sizeof(all);
    cf_env.coll_caps = all;
    cf_env.coll_declared = cf_env.ndev > 0;
}

int cf_env_core_setup(const struct cf_config *cfg,
                      const struct cf_options *opt, const char *plugin_path,
                      char *why, size_t whysz)
{
    keel_plugin_info info;
    keel_status st;
    int idx = -1;

    memset(&cf_env, 0, sizeof(cf_env));
    cf_env.cfg = cfg;
    cf_env.opt = opt;
    cf_env.level = opt->level;
    cf_env.plugin_path = plugin_path;
    keel_init();
    st = keel_plugin_load(plugin_path, &idx);
    if (idx < 0 || keel_plugin_get_info(idx, &info) != KEEL_STATUS_OK) {
        snprintf(why, whysz, "keel_plugin_load(%s) failed: %s: %s",
                 plugin_path, keel_status_name(st), keel_last_error());
        return -1;
    }
    if (!info.loaded) {
        snprintf(why, whysz, "the core refused the plugin [%s]: %s",
                 info.failed_check ? info.failed_check : "?",
                 info.reason ? info.reason : "(no reason)");
        return -1;
    }
    cf_env.plugin = idx;
    cf_env.api = keel_plugin_table(idx);
    cf_env.device_count = info.device_count;
    if (!cf_env.api) {
        snprintf(why, whysz, "keel_plugin_table(%d) is NULL", idx);
        return -1;
    }
    if (select_devices(why, whysz) || read_props(why, whysz))
        return -1;
    read_coll_caps();
    return find_reference();
}

void cf_env_core_teardown(void)
{
    keel_shutdown();
}
