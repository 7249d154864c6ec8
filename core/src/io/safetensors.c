/*
 * safetensors files: keel_save (atomic) and keel_load (fully validated).
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON (an
 * object mapping tensor names to {"dtype", "shape", "data_offsets"} plus an
 * optional "__metadata__" object of strings), then the data buffer. jansson
 * builds and parses the JSON. The header is padded with spaces to a
 * multiple of 8 bytes, as the reference writer does.
 *
 * keel_save writes "<path>.tmp.<pid>.XXXXXX" next to the target, holds an
 * flock on it while writing, and renames it over the target only after
 * the bytes are on disk. A writer killed on the way leaves its temporary
 * behind; the next save of the same target removes those whose writer is
 * provably gone: its pid does not exist (kill(pid, 0) gives ESRCH), no one
 * holds its lock, it is a regular file owned by this user, and it is still
 * the file that was checked when it is unlinked. For tests, the
 * environment variable KEEL_TEST_FAIL_SAVE_AT=<step> makes the step of
 * that name fail as if its system call had returned EIO; the steps are
 * create, header, data, flush, fsync, close, dirsync, rename.
 *
 * keel_load checks the whole file before it creates any tensor, so a bad
 * file costs no device memory and returns nothing half-built.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include <keel/io.h>

#include "io/io_internal.h"

/* Larger headers are taken as corruption (the reference uses 100 MB). */
#define HEADER_LIMIT 100000000ull
#define METADATA_KEY "__metadata__"

static const struct {
    keel_dtype dtype;
    const char *name;
} st_dtypes[] = {
    {KEEL_F32, "F32"}, {KEEL_F64, "F64"}, {KEEL_F16, "F16"},
    {KEEL_BF16, "BF16"}, {KEEL_I8, "I8"}, {KEEL_U8, "U8"},
    {KEEL_I32, "I32"}, {KEEL_I64, "I64"}, {KEEL_BOOL, "BOOL"},
};

#define NUM_DTYPES (sizeof(st_dtypes) / sizeof(st_dtypes[0]))

static const char *dtype_code(keel_dtype dt)
{
    for (size_t i = 0; i < NUM_DTYPES; i++)
        if (st_dtypes[i].dtype == dt)
            return st_dtypes[i].name;
    return NULL;
}

static bool dtype_from_code(const char *s, keel_dtype *dt)
{
    for (size_t i = 0; i < NUM_DTYPES; i++)
        if (!strcmp(st_dtypes[i].name, s)) {
            *dt = st_dtypes[i].dtype;
            return true;
        }
    return false;
}

/* Swap element bytes in place on a big-endian host (files are LE). */
static void to_little_endian(void *buf, uint64_t bytes, size_t es)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    unsigned char *p = buf;

    for (uint64_t i = 0; es > 1 && i + es <= bytes; i += es)
        for (size_t a = 0, b = es - 1; a < b; a++, b--) {
            unsigned char t = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = t;
        }
#else
    (void)buf;
    (void)bytes;
    (void)es;
#endif
}

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a real number";
    case JSON_TRUE:
        return "true";
    case JSON_FALSE:
        return "false";
    default:
        return "null";
    }
}

/* ==== saving ============================================================= */

static bool fault(const char *step)
{
    const char *at = getenv("KEEL_TEST_FAIL_SAVE_AT");

    if (at && !strcmp(at, step)) {
        errno = EIO;
        return true;
    }
    return false;
}

/* The JSON header, space-padded to a multiple of 8 bytes. */
static keel_status build_header(const keel_state_dict *sd, char **out,
                                size_t *out_len)
{
    static const char what[] = "keel_save";
    json_t *root = json_object(), *meta = NULL;
    keel_status st = KEEL_STATUS_OK;
    uint64_t offset = 0;
    char *text = NULL, *padded;
    size_t len, plen;

    *out = NULL;
    if (!root)
        goto oom;
    if (keel_state_dict_metadata_count(sd) > 0) {
        meta = json_object();
        if (!meta || json_object_set_new(root, METADATA_KEY, meta))
            goto oom;
        for (int64_t i = 0; i < keel_state_dict_metadata_count(sd); i++) {
            const char *k, *v;

            keel_state_dict_metadata_at(sd, i, &k, &v);
            if (json_object_set_new(meta, k, json_string(v)))
                goto oom;
        }
    }
    for (int64_t i = 0; i < keel_state_dict_count(sd); i++) {
        const char *name;
        keel_tensor *t;
        json_t *shape, *entry;
        uint64_t bytes;

        keel_state_dict_at(sd, i, &name, &t);
        bytes = (uint64_t)keel_tensor_numel(t) * keel_dtype_size(t->dtype);
        if (!dtype_code(t->dtype)) {
            st = keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                             "%s: tensor '%s' has dtype %s, which safetensors "
                             "cannot store", what, name,
                             keel_dtype_name(t->dtype));
            goto out;
        }
        if (offset + bytes < offset || offset + bytes > INT64_MAX) {
            st = keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                             "%s: the tensors add up to more than 2^63 "
                             "bytes at '%s'", what, name);
            goto out;
        }
        shape = json_array();
        if (!shape)
            goto oom;
        for (int d = 0; d < t->ndim; d++)
            if (json_array_append_new(shape, json_integer(t->shape[d]))) {
                json_decref(shape);
                goto oom;
            }
        /* dtype, shape, data_offsets: the reference writer's key order. */
        entry = json_pack("{s:s, s:o, s:[I, I]}", "dtype",
                          dtype_code(t->dtype), "shape", shape,
                          "data_offsets", (json_int_t)offset,
                          (json_int_t)(offset + bytes));
        if (!entry || json_object_set_new(root, name, entry))
            goto oom;
        offset += bytes;
    }
    text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!text)
        goto oom;
    len = strlen(text);
    plen = (len + 7) & ~(size_t)7;
    padded = malloc(plen + 1);
    if (!padded)
        goto oom;
    memcpy(padded, text, len);
    memset(padded + len, ' ', plen - len);
    padded[plen] = '\0';
    *out = padded;
    *out_len = plen;
    goto out;
oom:
    st = keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                     "%s: out of host memory building the header", what);
out:
    free(text);
    json_decref(root);
    return st;
}

/* Folder part of a path ("." when it has none), new string. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');

    if (!slash)
        return keel__strdup(".");
    if (slash == path)
        return keel__strdup("/");
    return keel__asprintf("%.*s", (int)(slash - path), path);
}

static int fsync_dir(const char *dir)
{
    int fd, rc;

    if (fault("dirsync"))
        return -1;
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    rc = fsync(fd);
    if (rc && (errno == EINVAL || errno == ENOTSUP))
        rc = 0; /* file systems that cannot sync a folder */
    close(fd);
    return rc;
}

/* The permission bits a new file would get: 0666 less the umask. */
static mode_t new_file_mode(const char *path)
{
    struct stat sb;
    FILE *f;
    char line[128];
    unsigned mask = 022;

    if (!stat(path, &sb))
        return sb.st_mode & 07777;
    f = fopen("/proc/self/status", "r");
    if (f) {
        while (fgets(line, sizeof(line), f))
            if (sscanf(line, "Umask: %o", &mask) == 1)
                break;
        fclose(f);
    }
    return 0666 & ~(mode_t)mask;
}

/* The function whose save is running, for messages (this thread). */
static _Thread_local const char *saver = "keel_save";

static keel_status sys_error(const char *step, const char *target,
                             const char *path)
{
    int e = errno;

    return keel__error(KEEL_STATUS_IO_ERROR,
                       "%s: saving '%s' failed at %s of '%s': %s; "
                       "the previous file, if any, is unchanged",
                       saver, path, step, target, strerror(e));
}

bool keel__save_fault(const char *step)
{
    return fault(step);
}

keel_status keel__write_atomic_error(const char *step, const char *tmp,
                                     const char *path)
{
    return sys_error(step, tmp, path);
}

/* Append every tensor's bytes, in dict order. */
static keel_status write_data(FILE *f, const keel_state_dict *sd,
                              const char *tmp, const char *path)
{
    unsigned char *buf = NULL;
    uint64_t cap = 0;
    keel_status st = KEEL_STATUS_OK;

    for (int64_t i = 0; i < keel_state_dict_count(sd); i++) {
        const char *name;
        keel_tensor *t;
        uint64_t bytes;

        keel_state_dict_at(sd, i, &name, &t);
        bytes = (uint64_t)keel_tensor_numel(t) * keel_dtype_size(t->dtype);
        if (!bytes)
            continue;
        if (bytes > cap) {
            free(buf);
            buf = malloc(bytes);
            cap = buf ? bytes : 0;
            if (!buf) {
                st = keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                                 "keel_save: out of host memory staging "
                                 "'%s' (%llu bytes)",
                                 name, (unsigned long long)bytes);
                break;
            }
        }
        st = keel_tensor_to_host(t, buf, bytes);
        if (st != KEEL_STATUS_OK) {
            char cause[512];

            snprintf(cause, sizeof(cause), "%s", keel_last_error());
            st = keel__error(st, "keel_save: reading tensor '%s' failed: %s",
                             name, cause);
            break;
        }
        to_little_endian(buf, bytes, keel_dtype_size(t->dtype));
        if (fwrite(buf, 1, bytes, f) != bytes) {
            st = sys_error("fwrite (data)", tmp, path);
            break;
        }
    }
    if (st == KEEL_STATUS_OK && fault("data"))
        st = sys_error("fwrite (data)", tmp, path);
    free(buf);
    return st;
}

/* The pid in "<base>.tmp.<pid>.XXXXXX", or 0 when `name` is not a
 * temporary of `base` in that form. */
static pid_t temp_writer(const char *name, const char *base)
{
    size_t bl = strlen(base);
    const char *p;
    long pid = 0;
    int digits = 0;

    if (strncmp(name, base, bl) || strncmp(name + bl, ".tmp.", 5))
        return 0;
    for (p = name + bl + 5; *p >= '0' && *p <= '9' && digits < 10;
         p++, digits++)
        pid = pid * 10 + (*p - '0');
    if (!digits || *p != '.' || strlen(p + 1) != 6 || pid <= 0 ||
        pid > INT32_MAX)
        return 0;
    for (const char *c = p + 1; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
              (*c >= '0' && *c <= '9')))
            return 0;
    return (pid_t)pid;
}

/* Remove one stale temporary if its writer is provably gone. */
static void remove_if_stale(int dfd, const char *name, pid_t pid)
{
    struct stat a, b;
    int fd;

    if (pid == getpid() || !kill(pid, 0) || errno != ESRCH)
        return; /* this process, a live one, or one we may not signal */
    fd = openat(dfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    /* A writer holds the lock until it closes the file; the pid check
     * covers the moments before it takes it and after it lets go. */
    if (!fstat(fd, &a) && S_ISREG(a.st_mode) && a.st_uid == geteuid() &&
        !flock(fd, LOCK_EX | LOCK_NB) &&
        !fstatat(dfd, name, &b, AT_SYMLINK_NOFOLLOW) &&
        a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
        if (!unlinkat(dfd, name, 0))
            keel__log(KEEL_LOG_INFO, "keel_save: removed '%s', left behind "
                      "by process %ld, which no longer exists", name,
                      (long)pid);
    }
    close(fd);
}

/* Best effort: failures here never fail the save. */
static void remove_stale_temps(const char *dir, const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    struct dirent *e;
    DIR *d;

    if (!*base)
        return;
    d = opendir(dir);
    if (!d)
        return;
    while ((e = readdir(d))) {
        pid_t pid = temp_writer(e->d_name, base);

        if (pid)
            remove_if_stale(dirfd(d), e->d_name, pid);
    }
    closedir(d);
}

/* What keel_save writes after the temporary file is open. */
struct st_body {
    const keel_state_dict *sd;
    const char *header;
    size_t header_len;
};

static keel_status write_body(FILE *f, void *ctx, const char *tmp,
                              const char *path)
{
    const struct st_body *b = ctx;
    unsigned char len_bytes[8];

    for (int i = 0; i < 8; i++)
        len_bytes[i] = (unsigned char)((uint64_t)b->header_len >> (8 * i));
    if (fwrite(len_bytes, 1, 8, f) != 8 ||
        fwrite(b->header, 1, b->header_len, f) != b->header_len ||
        fault("header"))
        return sys_error("fwrite (header)", tmp, path);
    return write_data(f, b->sd, tmp, path);
}

keel_status keel_save(const char *path, const keel_state_dict *sd)
{
    struct st_body b = {sd, NULL, 0};
    char *header = NULL;
    keel_status st;

    if (!path || !sd)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_save: %s is NULL", path ? "state dict" :
                           "path");
    if (!*path)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_save: the path is empty");
    st = build_header(sd, &header, &b.header_len);
    if (st != KEEL_STATUS_OK)
        return st;
    b.header = header;
    st = keel__write_atomic(path, "keel_save", write_body, &b);
    free(header);
    return st;
}

keel_status keel__write_atomic(const char *path, const char *who,
                               keel_status (*body)(FILE *f, void *ctx,
                                                   const char *tmp,
                                                   const char *path),
                               void *ctx)
{
    char *tmp = NULL, *dir = NULL;
    const char *outer = saver;
    FILE *f = NULL;
    int fd = -1;
    keel_status st;

    saver = who;
    tmp = keel__asprintf("%s.tmp.%ld.XXXXXX", path, (long)getpid());
    dir = dir_of(path);
    if (!tmp || !dir) {
        st = keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                         "%s: out of host memory", who);
        goto fail;
    }
    remove_stale_temps(dir, path);
    fd = fault("create") ? -1 : mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        st = sys_error("creating the temporary file", tmp, path);
        goto fail;
    }
    /* Held until the file is closed: proof to other savers that this
     * temporary is in use (remove_if_stale). A file system without locks
     * leaves the pid check alone to decide, so a failure is not fatal. */
    (void)flock(fd, LOCK_EX);
    if (fchmod(fd, new_file_mode(path))) {
        st = sys_error("fchmod", tmp, path);
        goto fail;
    }
    f = fdopen(fd, "wb");
    if (!f) {
        st = sys_error("fdopen", tmp, path);
        goto fail;
    }
    fd = -1; /* owned by f now */
    st = body(f, ctx, tmp, path);
    if (st != KEEL_STATUS_OK)
        goto fail;
    if (fflush(f) || fault("flush")) {
        st = sys_error("fflush", tmp, path);
        goto fail;
    }
    if (fsync(fileno(f)) || fault("fsync")) {
        st = sys_error("fsync", tmp, path);
        goto fail;
    }
    if (fclose(f) || fault("close")) {
        f = NULL;
        st = sys_error("fclose", tmp, path);
        goto fail;
    }
    f = NULL;
    /* The temporary file's entry is durable before it replaces the old. */
    if (fsync_dir(dir)) {
        st = sys_error("fsync of the folder", dir, path);
        goto fail;
    }
    if (fault("rename") || rename(tmp, path)) {
        st = sys_error("rename", tmp, path);
        goto fail;
    }
    /* Make the rename itself durable. The new file is in place already. */
    if (fsync_dir(dir)) {
        int e = errno;

        st = keel__error(KEEL_STATUS_IO_ERROR,
                         "%s: '%s' was written and renamed into "
                         "place, but the fsync of its folder '%s' failed "
                         "(%s): after a crash the old file could reappear",
                         who, path, dir, strerror(e));
    }
    goto out;
fail:
    if (f)
        fclose(f);
    if (fd >= 0)
        close(fd);
    if (tmp)
        unlink(tmp);
out:
    free(tmp);
    free(dir);
    saver = outer;
    return st;
}

/* ==== loading ============================================================ */

struct st_entry {
    const char *name; /* borrowed from the parsed header */
    keel_dtype dtype;
    int ndim;
    int64_t shape[KEEL_MAX_DIMS];
    uint64_t begin, end;
    size_t order; /* position in the header, a tie-breaker */
};

struct loader {
    const char *path;
    FILE *f;
    uint64_t file_size;
    uint64_t header_len;
    uint64_t data_size; /* bytes after the header */
    json_t *root;
    const json_t *meta;
    struct st_entry *entries;
    size_t count;
};

static keel_status corrupt(const struct loader *ld, const char *fmt, ...)
    KEEL_PRINTF(2, 3);

static keel_status corrupt(const struct loader *ld, const char *fmt, ...)
{
    char detail[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    return keel__error(KEEL_STATUS_CORRUPT, "keel_load: '%s': %s", ld->path,
                       detail);
}

static keel_status io_error(const struct loader *ld, const char *what)
{
    int e = errno;

    if (!e)
        return corrupt(ld, "%s: unexpected end of file (the file changed "
                       "while it was read?)", what);
    return keel__error(KEEL_STATUS_IO_ERROR, "keel_load: '%s': %s: %s",
                       ld->path, what, strerror(e));
}

static keel_status read_at(const struct loader *ld, uint64_t pos, void *buf,
                           uint64_t n, const char *what)
{
    errno = 0;
    if (fseeko(ld->f, (off_t)pos, SEEK_SET))
        return io_error(ld, what);
    if (n && fread(buf, 1, n, ld->f) != n)
        return io_error(ld, what);
    return KEEL_STATUS_OK;
}

/* Open the file and read and parse the header. */
static keel_status read_header(struct loader *ld)
{
    unsigned char lb[8];
    struct stat sb;
    json_error_t jerr;
    char *text = NULL;
    keel_status st;
    int fd;

    st = keel__open_regular("keel_load", ld->path, &fd, &sb);
    if (st != KEEL_STATUS_OK)
        return st;
    ld->f = fdopen(fd, "rb");
    if (!ld->f) {
        int e = errno;

        close(fd);
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_load: cannot open '%s': %s", ld->path,
                           strerror(e));
    }
    ld->file_size = (uint64_t)sb.st_size;
    if (ld->file_size < 8)
        return corrupt(ld, "the file is %llu bytes long, too short for the "
                       "8-byte header length",
                       (unsigned long long)ld->file_size);
    st = read_at(ld, 0, lb, 8, "reading the header length");
    if (st != KEEL_STATUS_OK)
        return st;
    ld->header_len = 0;
    for (int i = 7; i >= 0; i--)
        ld->header_len = (ld->header_len << 8) | lb[i];
    if (ld->header_len > HEADER_LIMIT)
        return corrupt(ld, "the header length %llu exceeds the limit of "
                       "%llu bytes (not a safetensors file, or corrupt)",
                       (unsigned long long)ld->header_len, HEADER_LIMIT);
    if (ld->header_len > ld->file_size - 8)
        return corrupt(ld, "the header length %llu runs past the end of the "
                       "file (only %llu bytes follow the length; truncated?)",
                       (unsigned long long)ld->header_len,
                       (unsigned long long)(ld->file_size - 8));
    ld->data_size = ld->file_size - 8 - ld->header_len;
    text = malloc(ld->header_len + 1);
    if (!text)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_load: '%s': out of host memory for a %llu "
                           "byte header",
                           ld->path, (unsigned long long)ld->header_len);
    st = read_at(ld, 8, text, ld->header_len, "reading the header");
    if (st != KEEL_STATUS_OK)
        goto out;
    ld->root = json_loadb(text, ld->header_len, JSON_REJECT_DUPLICATES,
                          &jerr);
    if (!ld->root) {
        if (json_error_code(&jerr) == json_error_duplicate_key)
            st = corrupt(ld, "the header has a duplicate key: %s (header "
                         "byte %d)", jerr.text, jerr.position);
        else
            st = corrupt(ld, "the header is not valid JSON: %s (header "
                         "byte %d)", jerr.text, jerr.position);
        goto out;
    }
    if (!json_is_object(ld->root))
        st = corrupt(ld, "the header is %s, expected a JSON object",
                     json_type_name(ld->root));
out:
    free(text);
    return st;
}

static keel_status check_metadata(struct loader *ld, const json_t *meta)
{
    const char *key;
    json_t *v;

    if (!json_is_object(meta))
        return corrupt(ld, "\"%s\" is %s, expected an object of strings",
                       METADATA_KEY, json_type_name(meta));
    json_object_foreach((json_t *)meta, key, v) {
        if (!*key)
            return corrupt(ld, "\"%s\" has an empty key", METADATA_KEY);
        if (!json_is_string(v))
            return corrupt(ld, "\"%s\": the value of '%s' is %s, expected a "
                           "string", METADATA_KEY, key, json_type_name(v));
    }
    ld->meta = meta;
    return KEEL_STATUS_OK;
}

/* A non-negative integer member of an array, or an error. */
static keel_status array_uint(struct loader *ld, const char *name,
                              const char *field, const json_t *arr,
                              size_t i, int64_t *value)
{
    const json_t *v = json_array_get(arr, i);

    if (!json_is_integer(v))
        return corrupt(ld, "tensor '%s': %s[%zu] is %s, expected a "
                       "non-negative integer", name, field, i,
                       json_type_name(v));
    *value = (int64_t)json_integer_value(v);
    if (*value < 0)
        return corrupt(ld, "tensor '%s': %s[%zu] = %lld is negative", name,
                       field, i, (long long)*value);
    return KEEL_STATUS_OK;
}

/*
 * The shape must describe a size keel can index: the product of every
 * non-zero dimension, times the element size, fits in int64_t. A zero
 * dimension makes the element count 0 but not the strides of the other
 * dimensions, so it is skipped in the product rather than ending it.
 */
static keel_status check_shape_size(struct loader *ld, const char *name,
                                    const struct st_entry *e)
{
    uint64_t span = keel_dtype_size(e->dtype);
    char dims[KEEL_MAX_DIMS * 21 + 3];
    size_t n = 0;
    bool over = false;

    for (int d = 0; d < e->ndim; d++)
        if (e->shape[d] &&
            (__builtin_mul_overflow(span, (uint64_t)e->shape[d], &span) ||
             span > (uint64_t)INT64_MAX))
            over = true;
    if (!over)
        return KEEL_STATUS_OK;
    n += (size_t)snprintf(dims + n, sizeof(dims) - n, "[");
    for (int d = 0; d < e->ndim && n < sizeof(dims); d++)
        n += (size_t)snprintf(dims + n, sizeof(dims) - n, "%s%lld",
                              d ? ", " : "", (long long)e->shape[d]);
    if (n < sizeof(dims))
        snprintf(dims + n, sizeof(dims) - n, "]");
    return corrupt(ld, "tensor '%s': shape %s of %s is too large: the "
                   "product of its non-zero dimensions times the %zu-byte "
                   "element does not fit in 63 bits, so its strides and "
                   "byte offsets cannot be represented", name, dims,
                   dtype_code(e->dtype), (size_t)keel_dtype_size(e->dtype));
}

static keel_status parse_entry(struct loader *ld, const char *name,
                               const json_t *obj, struct st_entry *e)
{
    const json_t *dtype, *shape, *offs;
    uint64_t numel = 1, need;
    int64_t b, en;
    keel_status st;

    e->name = name;
    if (!json_is_object(obj))
        return corrupt(ld, "tensor '%s': the entry is %s, expected an object "
                       "with dtype, shape and data_offsets", name,
                       json_type_name(obj));
    dtype = json_object_get(obj, "dtype");
    shape = json_object_get(obj, "shape");
    offs = json_object_get(obj, "data_offsets");
    if (!dtype || !shape || !offs)
        return corrupt(ld, "tensor '%s': the entry is missing \"%s\"", name,
                       !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
    if (!json_is_string(dtype))
        return corrupt(ld, "tensor '%s': \"dtype\" is %s, expected a string",
                       name, json_type_name(dtype));
    if (!dtype_from_code(json_string_value(dtype), &e->dtype))
        return corrupt(ld, "tensor '%s': unknown dtype '%s' (keel reads F32, "
                       "F64, F16, BF16, I8, U8, I32, I64 and BOOL)", name,
                       json_string_value(dtype));
    if (!json_is_array(shape))
        return corrupt(ld, "tensor '%s': \"shape\" is %s, expected an array "
                       "of integers", name, json_type_name(shape));
    if (json_array_size(shape) > KEEL_MAX_DIMS)
        return corrupt(ld, "tensor '%s': the shape has %zu dimensions, keel "
                       "supports at most %d", name, json_array_size(shape),
                       KEEL_MAX_DIMS);
    e->ndim = (int)json_array_size(shape);
    for (int d = 0; d < e->ndim; d++) {
        st = array_uint(ld, name, "shape", shape, (size_t)d, &e->shape[d]);
        if (st != KEEL_STATUS_OK)
            return st;
    }
    st = check_shape_size(ld, name, e);
    if (st != KEEL_STATUS_OK)
        return st;
    for (int d = 0; d < e->ndim; d++)
        numel *= (uint64_t)e->shape[d];
    if (!json_is_array(offs) || json_array_size(offs) != 2)
        return corrupt(ld, "tensor '%s': \"data_offsets\" is %s%s, expected "
                       "an array [begin, end]", name, json_type_name(offs),
                       json_is_array(offs) ? " of the wrong length" : "");
    st = array_uint(ld, name, "data_offsets", offs, 0, &b);
    if (st == KEEL_STATUS_OK)
        st = array_uint(ld, name, "data_offsets", offs, 1, &en);
    if (st != KEEL_STATUS_OK)
        return st;
    e->begin = (uint64_t)b;
    e->end = (uint64_t)en;
    if (e->end < e->begin)
        return corrupt(ld, "tensor '%s': data_offsets [%llu, %llu] ends "
                       "before it begins", name,
                       (unsigned long long)e->begin,
                       (unsigned long long)e->end);
    if (e->end > ld->data_size)
        return corrupt(ld, "tensor '%s': data_offsets [%llu, %llu] lie "
                       "outside the data buffer of %llu bytes (truncated "
                       "file?)", name, (unsigned long long)e->begin,
                       (unsigned long long)e->end,
                       (unsigned long long)ld->data_size);
    if (__builtin_mul_overflow(numel, (uint64_t)keel_dtype_size(e->dtype),
                               &need) ||
        need != e->end - e->begin)
        return corrupt(ld, "tensor '%s': data_offsets [%llu, %llu] hold "
                       "%llu bytes, but %s with %llu elements needs %llu",
                       name, (unsigned long long)e->begin,
                       (unsigned long long)e->end,
                       (unsigned long long)(e->end - e->begin),
                       json_string_value(dtype), (unsigned long long)numel,
                       (unsigned long long)need);
    return KEEL_STATUS_OK;
}

static int cmp_range(const void *pa, const void *pb)
{
    const struct st_entry *a = pa, *b = pb;

    if (a->begin != b->begin)
        return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end)
        return a->end < b->end ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

/* The byte ranges, sorted, must tile the data buffer exactly. */
static keel_status check_coverage(struct loader *ld)
{
    uint64_t pos = 0;
    const struct st_entry *prev = NULL;

    qsort(ld->entries, ld->count, sizeof(ld->entries[0]), cmp_range);
    for (size_t i = 0; i < ld->count; i++) {
        const struct st_entry *e = &ld->entries[i];

        if (e->begin < pos)
            return corrupt(ld, "tensors '%s' [%llu, %llu) and '%s' [%llu, "
                           "%llu) overlap in the data buffer", prev->name,
                           (unsigned long long)prev->begin,
                           (unsigned long long)prev->end, e->name,
                           (unsigned long long)e->begin,
                           (unsigned long long)e->end);
        if (e->begin > pos)
            return corrupt(ld, "bytes [%llu, %llu) of the data buffer belong "
                           "to no tensor (a hole before '%s')",
                           (unsigned long long)pos,
                           (unsigned long long)e->begin, e->name);
        pos = e->end;
        prev = e;
    }
    if (pos != ld->data_size)
        return corrupt(ld, "%llu trailing bytes after the last tensor (the "
                       "tensors end at byte %llu of a %llu-byte data "
                       "buffer)", (unsigned long long)(ld->data_size - pos),
                       (unsigned long long)pos,
                       (unsigned long long)ld->data_size);
    return KEEL_STATUS_OK;
}

static keel_status parse_entries(struct loader *ld)
{
    const char *key;
    json_t *v;
    keel_status st;

    ld->entries = calloc(json_object_size(ld->root) + 1,
                         sizeof(ld->entries[0]));
    if (!ld->entries)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_load: '%s': out of host memory", ld->path);
    json_object_foreach(ld->root, key, v) {
        if (!strcmp(key, METADATA_KEY)) {
            st = check_metadata(ld, v);
        } else {
            if (!*key)
                return corrupt(ld, "a tensor has an empty name");
            if (strlen(key) > KEEL_STATE_DICT_NAME_MAX)
                return corrupt(ld, "tensor '%.40s...': the name is %zu bytes "
                               "long, keel's limit is %d", key, strlen(key),
                               KEEL_STATE_DICT_NAME_MAX);
            ld->entries[ld->count].order = ld->count;
            st = parse_entry(ld, key, v, &ld->entries[ld->count]);
            ld->count++;
        }
        if (st != KEEL_STATUS_OK)
            return st;
    }
    return check_coverage(ld);
}

/* Read one tensor's bytes and make it on `device`. */
static keel_status load_tensor(struct loader *ld, const struct st_entry *e,
                               const char *device, keel_tensor **out)
{
    uint64_t bytes = e->end - e->begin;
    unsigned char *buf;
    keel_status st;

    *out = NULL;
    buf = malloc(bytes ? bytes : 1);
    if (!buf)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_load: '%s': out of host memory for tensor "
                           "'%s' (%llu bytes)", ld->path, e->name,
                           (unsigned long long)bytes);
    st = read_at(ld, 8 + ld->header_len + e->begin, buf, bytes,
                 "reading tensor data");
    if (st != KEEL_STATUS_OK)
        goto out;
    if (e->dtype == KEEL_BOOL)
        for (uint64_t i = 0; i < bytes; i++)
            if (buf[i] > 1) {
                st = corrupt(ld, "tensor '%s': BOOL element %llu is %u, "
                             "expected 0 or 1", e->name,
                             (unsigned long long)i, buf[i]);
                goto out;
            }
    to_little_endian(buf, bytes, keel_dtype_size(e->dtype));
    st = keel_tensor_from_host(buf, e->dtype, e->ndim, e->shape, device, out);
out:
    free(buf);
    return st;
}

keel_status keel_load(const char *path, const char *device,
                      keel_state_dict **out)
{
    struct loader ld = {.path = path};
    keel_state_dict *sd = NULL;
    keel_place place;
    keel_status st;

    if (!path || !out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_load: %s is NULL", path ? "out" : "path");
    *out = NULL;
    st = keel__place_of(device, &place);
    if (st != KEEL_STATUS_OK)
        return st;
    st = read_header(&ld);
    if (st == KEEL_STATUS_OK)
        st = parse_entries(&ld);
    if (st == KEEL_STATUS_OK)
        st = keel_state_dict_create(&sd);
    if (st != KEEL_STATUS_OK)
        goto out;
    if (ld.meta) {
        const char *key;
        json_t *v;

        json_object_foreach((json_t *)ld.meta, key, v) {
            st = keel_state_dict_set_metadata(sd, key, json_string_value(v));
            if (st != KEEL_STATUS_OK)
                goto out;
        }
    }
    for (size_t i = 0; i < ld.count; i++) {
        keel_tensor *t;

        st = load_tensor(&ld, &ld.entries[i], device, &t);
        if (st != KEEL_STATUS_OK)
            goto out;
        st = keel_state_dict_set(sd, ld.entries[i].name, t);
        keel_tensor_free(t);
        if (st != KEEL_STATUS_OK) {
            char cause[512];

            snprintf(cause, sizeof(cause), "%s", keel_last_error());
            /* A name the dict refuses is the file's fault; running out of
             * memory is not, and keeps its status. */
            if (st == KEEL_STATUS_INVALID_ARGUMENT)
                st = corrupt(&ld, "tensor '%s' cannot be stored: %s",
                             ld.entries[i].name, cause);
            else
                st = keel__error(st, "keel_load: '%s': tensor '%s' cannot "
                                     "be stored: %s", ld.path,
                                 ld.entries[i].name, cause);
            goto out;
        }
    }
    *out = sd;
    sd = NULL;
out:
    keel_state_dict_free(sd);
    free(ld.entries);
    json_decref(ld.root);
    if (ld.f)
        fclose(ld.f);
    return st;
}
