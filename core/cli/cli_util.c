/*
 * keel CLI — small formatting and parsing helpers shared by the subcommands.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *keel_cli_dtype_name(keel_dtype dtype)
{
    switch (dtype) {
    case KEEL_F32:
        return "float32";
    case KEEL_F64:
        return "float64";
    case KEEL_F16:
        return "float16";
    case KEEL_BF16:
        return "bfloat16";
    case KEEL_I8:
        return "int8";
    case KEEL_U8:
        return "uint8";
    case KEEL_I32:
        return "int32";
    case KEEL_I64:
        return "int64";
    case KEEL_BOOL:
        return "bool";
    default:
        return NULL;
    }
}

/* Indexed by bit number; follows the KEEL_FEATURE_* enum in device_api.h. */
static const char *const feature_names[] = {
    "async_copy",      /* KEEL_FEATURE_ASYNC_COPY      */
    "pinned_host",     /* KEEL_FEATURE_PINNED_HOST     */
    "unified_memory",  /* KEEL_FEATURE_UNIFIED_MEMORY  */
    "peer_access",     /* KEEL_FEATURE_PEER_ACCESS     */
    "collectives",     /* KEEL_FEATURE_COLLECTIVES     */
    "event_timing",    /* KEEL_FEATURE_EVENT_TIMING    */
    "host_callback",   /* KEEL_FEATURE_HOST_CALLBACK   */
    "kernels",         /* KEEL_FEATURE_KERNELS         */
    "stream_priority", /* KEEL_FEATURE_STREAM_PRIORITY */
    "host_addresses",  /* KEEL_FEATURE_HOST_ADDRESSES  */
};

const char *keel_cli_feature_name(unsigned bit)
{
    if (bit >= sizeof feature_names / sizeof feature_names[0])
        return NULL;
    return feature_names[bit];
}

void keel_cli_format_bytes(uint64_t bytes, char *buf, size_t size)
{
    static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB",
                                         "EiB" };
    double value = (double)bytes;
    size_t unit = 0;

    if (bytes < 1024) {
        snprintf(buf, size, "%llu B", (unsigned long long)bytes);
        return;
    }
    value /= 1024.0;
    while (value >= 1024.0 && unit + 1 < sizeof units / sizeof units[0]) {
        value /= 1024.0;
        unit++;
    }
    snprintf(buf, size, "%.1f %s", value, units[unit]);
}

void keel_cli_format_clock(uint32_t khz, char *buf, size_t size)
{
    if (khz == 0)
        snprintf(buf, size, "unknown");
    else if (khz >= 1000000)
        snprintf(buf, size, "%.2f GHz", (double)khz / 1e6);
    else if (khz >= 1000)
        snprintf(buf, size, "%.0f MHz", (double)khz / 1e3);
    else
        snprintf(buf, size, "%u kHz", (unsigned)khz);
}

size_t keel_cli_field_len(const char *field, size_t capacity)
{
    const char *nul = memchr(field, '\0', capacity);

    return nul ? (size_t)(nul - field) : capacity;
}

bool keel_cli_parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}
