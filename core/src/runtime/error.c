/*
 * Thread-local error state, the host table handed to plugins, logging,
 * small string helpers and the one way the core opens a file to read.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/runtime_internal.h"
#include "keel_config.h"

#define KEEL_MSG_MAX 2048

static _Thread_local keel_status tl_status;
static _Thread_local char tl_msg[KEEL_MSG_MAX];
static _Thread_local bool tl_plugin_set;
static _Thread_local keel_status tl_plugin_status;
static _Thread_local char tl_plugin_msg[KEEL_MSG_MAX];

const char *keel_version(void)
{
    return KEEL_VERSION;
}

const char *keel_status_name(keel_status status)
{
    static const char *const names[] = {
        [KEEL_STATUS_OK] = "KEEL_STATUS_OK",
        [KEEL_STATUS_INVALID_ARGUMENT] = "KEEL_STATUS_INVALID_ARGUMENT",
        [KEEL_STATUS_INVALID_DEVICE] = "KEEL_STATUS_INVALID_DEVICE",
        [KEEL_STATUS_INVALID_HANDLE] = "KEEL_STATUS_INVALID_HANDLE",
        [KEEL_STATUS_OUT_OF_MEMORY] = "KEEL_STATUS_OUT_OF_MEMORY",
        [KEEL_STATUS_NOT_SUPPORTED] = "KEEL_STATUS_NOT_SUPPORTED",
        [KEEL_STATUS_NOT_READY] = "KEEL_STATUS_NOT_READY",
        [KEEL_STATUS_TIMEOUT] = "KEEL_STATUS_TIMEOUT",
        [KEEL_STATUS_DEVICE_ERROR] = "KEEL_STATUS_DEVICE_ERROR",
        [KEEL_STATUS_NOT_INITIALIZED] = "KEEL_STATUS_NOT_INITIALIZED",
        [KEEL_STATUS_UNAVAILABLE] = "KEEL_STATUS_UNAVAILABLE",
        [KEEL_STATUS_NOT_FOUND] = "KEEL_STATUS_NOT_FOUND",
        [KEEL_STATUS_ABI_MISMATCH] = "KEEL_STATUS_ABI_MISMATCH",
        [KEEL_STATUS_IO_ERROR] = "KEEL_STATUS_IO_ERROR",
        [KEEL_STATUS_INTERNAL] = "KEEL_STATUS_INTERNAL",
        [KEEL_STATUS_CORRUPT] = "KEEL_STATUS_CORRUPT",
        [KEEL_STATUS_INVALID_STATE] = "KEEL_STATUS_INVALID_STATE",
    };
    if ((unsigned)status >= sizeof(names) / sizeof(names[0]) ||
        !names[status])
        return "KEEL_STATUS_UNKNOWN";
    return names[status];
}

const char *keel_last_error(void)
{
    return tl_msg;
}

keel_status keel_last_status(void)
{
    return tl_status;
}

void keel_clear_error(void)
{
    tl_status = KEEL_STATUS_OK;
    tl_msg[0] = '\0';
}

keel_status keel__error(keel_status status, const char *fmt, ...)
{
    va_list ap;

    tl_status = status;
    va_start(ap, fmt);
    vsnprintf(tl_msg, sizeof(tl_msg), fmt, ap);
    va_end(ap);
    return status;
}

/* ---- host table ---------------------------------------------------------- */

static void host_set_error(keel_status status, const char *message)
{
    tl_plugin_set = true;
    tl_plugin_status = status;
    snprintf(tl_plugin_msg, sizeof(tl_plugin_msg), "%s",
             message ? message : "");
}

static void host_log(keel_log_level level, const char *message)
{
    keel__log(level, "plugin: %s", message ? message : "(null)");
}

static const char *host_get_env(const char *name)
{
    return name ? getenv(name) : NULL;
}

static const keel_host_api host_api = {
    .header = KEEL_TABLE_HEADER(keel_host_api),
    .set_error = host_set_error,
    .log = host_log,
    .get_env = host_get_env,
};

const keel_host_api *keel__host_api(void)
{
    return &host_api;
}

void keel__plugin_msg_clear(void)
{
    tl_plugin_set = false;
    tl_plugin_msg[0] = '\0';
}

const char *keel__plugin_msg(void)
{
    return tl_plugin_set && tl_plugin_msg[0] ? tl_plugin_msg : NULL;
}

/* ---- logging ------------------------------------------------------------- */

static int log_threshold(void)
{
    const char *v = getenv("KEEL_LOG_LEVEL");

    if (!v || !*v)
        return KEEL_LOG_WARN;
    if (!strcasecmp(v, "error"))
        return KEEL_LOG_ERROR;
    if (!strcasecmp(v, "info"))
        return KEEL_LOG_INFO;
    if (!strcasecmp(v, "debug"))
        return KEEL_LOG_DEBUG;
    return KEEL_LOG_WARN;
}

void keel__log(keel_log_level level, const char *fmt, ...)
{
    static const char *const tags[] = {"error", "warn", "info", "debug"};
    char line[KEEL_MSG_MAX];
    va_list ap;

    if ((int)level > log_threshold())
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "keel %s: %s\n",
            (unsigned)level < 4 ? tags[level] : "log", line);
}

/* ---- strings ------------------------------------------------------------- */

char *keel__strdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

char *keel__asprintf(const char *fmt, ...)
{
    va_list ap;
    char *out = NULL;
    int n;

    va_start(ap, fmt);
    n = vasprintf(&out, fmt, ap);
    va_end(ap);
    return n < 0 ? NULL : out;
}

/* ---- opening files to read ---------------------------------------------- */

static const char *file_kind(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "of an unknown type";
}

keel_status keel__open_regular(const char *what, const char *path, int *fd,
                               struct stat *sb)
{
    struct stat local;
    int f, flags, e;

    *fd = -1;
    if (!sb)
        sb = &local;
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
     * writer before the type can be checked. */
    f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (f < 0) {
        e = errno;
        return keel__error(e == ENOENT ? KEEL_STATUS_NOT_FOUND :
                           KEEL_STATUS_IO_ERROR,
                           "%s: cannot open '%s': %s", what, path,
                           strerror(e));
    }
    if (fstat(f, sb)) {
        e = errno;
        close(f);
        return keel__error(KEEL_STATUS_IO_ERROR, "%s: cannot fstat '%s': %s",
                           what, path, strerror(e));
    }
    if (!S_ISREG(sb->st_mode)) {
        close(f);
        return keel__error(KEEL_STATUS_IO_ERROR,
                           "%s: '%s' is not a regular file (it is %s); "
                           "only regular files are read", what, path,
                           file_kind(sb->st_mode));
    }
    flags = fcntl(f, F_GETFL);
    if (flags < 0 || fcntl(f, F_SETFL, flags & ~O_NONBLOCK)) {
        e = errno;
        close(f);
        return keel__error(KEEL_STATUS_IO_ERROR,
                           "%s: cannot make '%s' blocking again: %s", what,
                           path, strerror(e));
    }
    *fd = f;
    return KEEL_STATUS_OK;
}
