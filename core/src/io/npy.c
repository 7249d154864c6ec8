/*
 * .npy files (NumPy's array format): keel_npy_save (atomic) and
 * keel_npy_load (fully validated).
 *
 * Layout (numpy/lib/format.py):
 *   6 bytes   the magic "\x93NUMPY"
 *   2 bytes   the format version, major and minor: 1.0, 2.0 or 3.0
 *   2 bytes   (1.0) or 4 bytes (2.0, 3.0): H, the header length, unsigned
 *             little-endian
 *   H bytes   the header, a Python dict literal such as
 *               {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 *             padded with spaces and ended by '\n' so that the data starts
 *             at a multiple of 64 bytes (16 in files of older NumPy);
 *             latin-1 text in 1.0 and 2.0, UTF-8 in 3.0
 *   the rest  the elements, in the byte order of descr, in C order, or in
 *             Fortran order when fortran_order is True
 *
 * keel_npy_save writes what np.save writes for the same array, byte for
 * byte: version 1.0 (2.0 only for a header over 65535 bytes, which keel's
 * shapes never reach), the keys in sorted order, the spare spaces NumPy
 * leaves after the dict so that the first axis can grow in place, 64-byte
 * alignment, little-endian C-order data. The write is atomic as keel_save's
 * is: "<path>.tmp.<pid>.XXXXXX" in the target's folder, flock held while
 * writing, fflush, fsync, folder fsync, rename, folder fsync. The test
 * hook KEEL_TEST_FAIL_SAVE_AT=<step> (create, header, data, flush, fsync,
 * close, dirsync, rename) fails that step as if its call gave EIO.
 *
 * keel_npy_load reads the prefix and the header, parses the dict with a
 * small parser of exactly the Python literal syntax NumPy writes (strings
 * in either quote, True/False, tuples of decimal integers, an optional
 * trailing comma; the 'L' suffix of Python 2 longs in 1.0 and 2.0 files,
 * which NumPy also accepts), checks the sizes against the file, and only
 * then reads the data and makes the tensor. The data is converted on the
 * host: byte-swapped when its order is not the host's, int16 widened to
 * int32 (keel has no int16), Fortran order transposed into C order, bools
 * checked to be 0 or 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <keel/io.h>

#include "io/io_internal.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_ALIGN 64
/* NumPy's GROWTH_AXIS_MAX_DIGITS: room left after the dict for a longer
 * first (C order) axis. */
#define NPY_GROWTH_DIGITS 21
/* The header of a file keel reads holds three short keys; a longer one is
 * not a file of the dtypes keel supports (NumPy caps it at 10000 bytes
 * unless told otherwise). */
#define NPY_HEADER_LIMIT (1u << 20)

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define HOST_BIG_ENDIAN 1
#else
#define HOST_BIG_ENDIAN 0
#endif

/* The element types keel reads: kind letter and size as in descr. */
static const struct npy_type {
    char kind;
    unsigned size;     /* bytes per element in the file */
    keel_dtype dtype;  /* in memory */
    const char *descr; /* what keel_npy_save writes */
} npy_types[] = {
    {'f', 2, KEEL_F16, "<f2"}, {'f', 4, KEEL_F32, "<f4"},
    {'f', 8, KEEL_F64, "<f8"}, {'i', 1, KEEL_I8, "|i1"},
    {'i', 2, KEEL_I32, NULL},  {'i', 4, KEEL_I32, "<i4"},
    {'i', 8, KEEL_I64, "<i8"}, {'u', 1, KEEL_U8, "|u1"},
    {'b', 1, KEEL_BOOL, "|b1"},
};

#define NUM_TYPES (sizeof(npy_types) / sizeof(npy_types[0]))

static const char accepted_descrs[] =
    "<f2, <f4, <f8, |i1, <i2, <i4, <i8, |u1 and |b1, the '>' forms of "
    "these and '<' or '>' for the one-byte types";

static const char *save_descr(keel_dtype dt)
{
    for (size_t i = 0; i < NUM_TYPES; i++)
        if (npy_types[i].descr && npy_types[i].dtype == dt)
            return npy_types[i].descr;
    return NULL;
}

static void swap_elements(unsigned char *p, uint64_t bytes, unsigned es)
{
    for (uint64_t i = 0; es > 1 && i + es <= bytes; i += es)
        for (unsigned a = 0, b = es - 1; a < b; a++, b--) {
            unsigned char t = p[i + a];

            p[i + a] = p[i + b];
            p[i + b] = t;
        }
}

/* ==== saving ============================================================= */

/*
 * The prefix and header NumPy writes for (descr, C order, shape): the
 * dict with its keys sorted, the spare spaces, padding to NPY_ALIGN and a
 * final '\n'; version 1.0 unless the header needs more than 16 bits.
 */
static keel_status build_header(const char *descr, int ndim,
                                const int64_t *shape, unsigned char **out,
                                size_t *out_len)
{
    char dict[64 + KEEL_MAX_DIMS * 24 + NPY_GROWTH_DIGITS];
    size_t n, pre, hlen, pad, total;
    unsigned char *buf;
    int major = 1;

    n = (size_t)snprintf(dict, sizeof(dict),
                         "{'descr': '%s', 'fortran_order': False, "
                         "'shape': (", descr);
    for (int d = 0; d < ndim; d++)
        n += (size_t)snprintf(dict + n, sizeof(dict) - n, "%s%lld",
                              d ? ", " : "", (long long)shape[d]);
    n += (size_t)snprintf(dict + n, sizeof(dict) - n, "%s), }",
                          ndim == 1 ? "," : "");
    if (ndim > 0) {
        int digits = snprintf(NULL, 0, "%lld", (long long)shape[0]);

        for (int i = digits; i < NPY_GROWTH_DIGITS; i++)
            dict[n++] = ' ';
    }
    hlen = n + 1; /* the '\n' */
    pre = NPY_MAGIC_LEN + 2 + 2;
    pad = NPY_ALIGN - (pre + hlen) % NPY_ALIGN;
    if (hlen + pad > 65535) {
        major = 2;
        pre = NPY_MAGIC_LEN + 2 + 4;
        pad = NPY_ALIGN - (pre + hlen) % NPY_ALIGN;
    }
    total = pre + hlen + pad;
    buf = malloc(total);
    if (!buf)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_npy_save: out of host memory");
    memcpy(buf, NPY_MAGIC, NPY_MAGIC_LEN);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    for (size_t i = 0; i < pre - 8; i++)
        buf[8 + i] = (unsigned char)((uint64_t)(hlen + pad) >> (8 * i));
    memcpy(buf + pre, dict, n);
    memset(buf + pre + n, ' ', pad);
    buf[total - 1] = '\n';
    *out = buf;
    *out_len = total;
    return KEEL_STATUS_OK;
}

/* What keel_npy_save writes into the temporary file. */
struct npy_body {
    const void *header, *data;
    size_t header_len, data_len;
};

static keel_status write_body(FILE *f, void *ctx, const char *tmp,
                              const char *path)
{
    const struct npy_body *b = ctx;

    if (fwrite(b->header, 1, b->header_len, f) != b->header_len ||
        keel__save_fault("header"))
        return keel__write_atomic_error("fwrite (header)", tmp, path);
    if ((b->data_len && fwrite(b->data, 1, b->data_len, f) != b->data_len) ||
        keel__save_fault("data"))
        return keel__write_atomic_error("fwrite (data)", tmp, path);
    return KEEL_STATUS_OK;
}

keel_status keel_npy_save(const char *path, const keel_tensor *t)
{
    const char *descr;
    unsigned char *header = NULL, *data = NULL;
    size_t header_len = 0;
    uint64_t bytes;
    keel_status st;

    if (!path || !t)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_npy_save: %s is NULL",
                           path ? "tensor" : "path");
    if (!*path)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_npy_save: the path is empty");
    descr = save_descr(t->dtype);
    if (!descr)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_npy_save: '%s': a %s tensor cannot be "
                           "stored in a .npy file (NumPy has no %s dtype; "
                           "cast it to float32 first)",
                           path, keel_dtype_name(t->dtype),
                           keel_dtype_name(t->dtype));
    bytes = (uint64_t)keel_tensor_numel(t) * keel_dtype_size(t->dtype);
    data = malloc(bytes ? bytes : 1);
    if (!data)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_npy_save: '%s': out of host memory staging "
                           "%llu bytes", path, (unsigned long long)bytes);
    /* Read the tensor first: a device failure leaves the disk alone. */
    st = keel_tensor_to_host(t, data, bytes);
    if (st != KEEL_STATUS_OK) {
        char cause[512];

        snprintf(cause, sizeof(cause), "%s", keel_last_error());
        st = keel__error(st, "keel_npy_save: '%s': reading the tensor "
                         "failed: %s", path, cause);
        goto out;
    }
    if (HOST_BIG_ENDIAN)
        swap_elements(data, bytes, keel_dtype_size(t->dtype));
    st = build_header(descr, t->ndim, t->shape, &header, &header_len);
    if (st == KEEL_STATUS_OK) {
        struct npy_body body = {header, data, header_len, (size_t)bytes};

        st = keel__write_atomic(path, "keel_npy_save", write_body, &body);
    }
out:
    free(header);
    free(data);
    return st;
}

/* ==== loading ============================================================ */

struct npy_reader {
    const char *path;
    int fd;
    uint64_t file_size;
    unsigned major;
    /* the header text */
    const char *text;
    size_t len, pos;
    /* what it says */
    bool seen_descr, seen_fortran, seen_shape;
    const struct npy_type *type;
    bool swap;    /* the file's byte order is not the host's */
    char order;   /* '<', '>' or '|' */
    bool fortran;
    int ndim;
    int64_t shape[KEEL_MAX_DIMS];
};

static keel_status corrupt(const struct npy_reader *r, const char *fmt, ...)
    KEEL_PRINTF(2, 3);

static keel_status corrupt(const struct npy_reader *r, const char *fmt, ...)
{
    char detail[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    return keel__error(KEEL_STATUS_CORRUPT, "keel_npy_load: '%s': %s",
                       r->path, detail);
}

/* Read exactly n bytes at pos; a short read is corruption (the file
 * shrank after its size was taken), a failed one an IO_ERROR. */
static keel_status read_at(const struct npy_reader *r, uint64_t pos,
                           void *buf, uint64_t n, const char *what)
{
    unsigned char *p = buf;

    while (n) {
        size_t want = n > ((size_t)1 << 30) ? (size_t)1 << 30 : (size_t)n;
        ssize_t got = pread(r->fd, p, want, (off_t)pos);

        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return keel__error(KEEL_STATUS_IO_ERROR,
                               "keel_npy_load: '%s': %s: %s", r->path, what,
                               strerror(errno));
        if (got == 0)
            return corrupt(r, "%s: unexpected end of file at byte %llu (the "
                           "file changed while it was read?)", what,
                           (unsigned long long)pos);
        p += got;
        pos += (uint64_t)got;
        n -= (uint64_t)got;
    }
    return KEEL_STATUS_OK;
}

/* ---- the header's Python literal ---------------------------------------- */

/* Python's whitespace between tokens (inside brackets, newlines too). */
static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
           c == '\v';
}

/* `s[0..n)` quoted for a message: printable ASCII as is, other bytes as
 * \xNN, cut after 40 characters. */
static const char *quoted(const char *s, size_t n, char *buf, size_t size)
{
    size_t o = 0;

    for (size_t i = 0; i < n && o + 8 < size; i++) {
        unsigned char c = (unsigned char)s[i];

        if (i == 40) {
            o += (size_t)snprintf(buf + o, size - o, "...");
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '\\')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, size - o, "\\x%02x", c);
    }
    buf[o] = '\0';
    return buf;
}

/* What stands at the parser's position, for a message. */
static const char *found(const struct npy_reader *r, char *buf, size_t size)
{
    size_t n = 0;
    char q[64];

    if (r->pos >= r->len)
        return "the end of the header";
    /* One punctuation character, or a word up to the next one. */
    if (strchr(",:(){}[]", r->text[r->pos]) && r->text[r->pos])
        n = 1;
    else
        while (r->pos + n < r->len && n < 12 &&
               (n == 0 || (!is_space(r->text[r->pos + n]) &&
                           !strchr(",:(){}[]", r->text[r->pos + n]))))
            n++;
    quoted(r->text + r->pos, n, q, sizeof(q));
    snprintf(buf, size, "'%s'", q);
    return buf;
}

static void skip_space(struct npy_reader *r)
{
    while (r->pos < r->len && is_space(r->text[r->pos]))
        r->pos++;
}

static keel_status unterminated(const struct npy_reader *r)
{
    return corrupt(r, "the header dict is unterminated: the header ends at "
                   "byte %zu before its closing '}'", r->len);
}

/* A syntax error at the current position. */
static keel_status expected(const struct npy_reader *r, const char *what)
{
    char f[96];

    if (r->pos >= r->len)
        return unterminated(r);
    return corrupt(r, "the header is not a valid dict literal: expected %s "
                   "at header byte %zu, found %s", what, r->pos,
                   found(r, f, sizeof(f)));
}

/* A quoted string (no escapes); *s and *n are its contents. */
static keel_status parse_string(struct npy_reader *r, const char **s,
                                size_t *n, const char *what)
{
    char quote;
    size_t start;

    if (r->pos >= r->len ||
        (r->text[r->pos] != '\'' && r->text[r->pos] != '"'))
        return expected(r, what);
    quote = r->text[r->pos++];
    start = r->pos;
    while (r->pos < r->len && r->text[r->pos] != quote) {
        char c = r->text[r->pos];

        if (c == '\\')
            return corrupt(r, "the header has an escape sequence in a string "
                           "at header byte %zu (never part of a key or "
                           "descr keel reads)", r->pos);
        if (c == '\n' || c == '\r')
            break;
        r->pos++;
    }
    if (r->pos >= r->len || r->text[r->pos] != quote)
        return corrupt(r, "the header has an unterminated string starting "
                       "at header byte %zu", start - 1);
    *s = r->text + start;
    *n = r->pos - start;
    r->pos++;
    return KEEL_STATUS_OK;
}

static bool is_ident(char c, bool first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           (!first && c >= '0' && c <= '9');
}

static keel_status parse_descr(struct npy_reader *r)
{
    const char *s;
    size_t n;
    char q[200];
    keel_status st;

    if (r->pos < r->len && r->text[r->pos] == '[')
        return corrupt(r, "descr is a list: structured dtypes are not "
                       "supported (keel reads %s)", accepted_descrs);
    if (r->pos < r->len && r->text[r->pos] != '\'' &&
        r->text[r->pos] != '"') {
        char f[96];

        return corrupt(r, "descr is %s, expected a string such as '<f4'",
                       found(r, f, sizeof(f)));
    }
    st = parse_string(r, &s, &n, "a string for descr");
    if (st != KEEL_STATUS_OK)
        return st;
    quoted(s, n, q, sizeof(q));
    r->type = NULL;
    if (n >= 3 && (s[0] == '<' || s[0] == '>' || s[0] == '|')) {
        unsigned size = 0;
        size_t i;

        for (i = 2; i < n && s[i] >= '0' && s[i] <= '9' && size < 1000; i++)
            size = size * 10 + (unsigned)(s[i] - '0');
        if (i == n && s[2] != '0')
            for (size_t k = 0; k < NUM_TYPES; k++)
                if (npy_types[k].kind == s[1] && npy_types[k].size == size)
                    r->type = &npy_types[k];
    }
    if (!r->type)
        return corrupt(r, "unsupported descr '%s' (keel reads %s)", q,
                       accepted_descrs);
    if (s[0] == '|' && r->type->size > 1)
        return corrupt(r, "descr '%s' gives byte order '|' (not applicable) "
                       "to a %u-byte type; NumPy writes '<' or '>'", q,
                       r->type->size);
    r->order = s[0];
    r->swap = r->type->size > 1 &&
              (s[0] == '>') != (bool)HOST_BIG_ENDIAN;
    return KEEL_STATUS_OK;
}

static keel_status parse_fortran(struct npy_reader *r)
{
    size_t start = r->pos, n;
    char f[96];

    while (r->pos < r->len && is_ident(r->text[r->pos], r->pos == start))
        r->pos++;
    n = r->pos - start;
    if (n == 4 && !memcmp(r->text + start, "True", 4))
        r->fortran = true;
    else if (n == 5 && !memcmp(r->text + start, "False", 5))
        r->fortran = false;
    else {
        r->pos = start;
        if (start >= r->len)
            return unterminated(r);
        return corrupt(r, "fortran_order is %s, expected True or False",
                       found(r, f, sizeof(f)));
    }
    return KEEL_STATUS_OK;
}

/* One shape entry: a decimal integer, sign allowed (so that a negative
 * one is reported as such), 'L' suffix allowed in versions 1.0 and 2.0. */
static keel_status parse_dim(struct npy_reader *r, int index)
{
    bool neg = false;
    size_t start;
    uint64_t v = 0;
    bool over = false;
    char q[64];

    if (r->pos < r->len && (r->text[r->pos] == '-' || r->text[r->pos] == '+')) {
        neg = r->text[r->pos] == '-';
        r->pos++;
        skip_space(r);
    }
    start = r->pos;
    while (r->pos < r->len && r->text[r->pos] >= '0' &&
           r->text[r->pos] <= '9') {
        unsigned d = (unsigned)(r->text[r->pos] - '0');

        if (v > (UINT64_MAX - d) / 10)
            over = true;
        else
            v = v * 10 + d;
        r->pos++;
    }
    if (r->pos == start)
        return expected(r, "an integer in the shape");
    if (r->pos - start > 1 && r->text[start] == '0')
        return corrupt(r, "shape[%d] = %s has a leading zero, which is not "
                       "a Python integer", index,
                       quoted(r->text + start, r->pos - start, q, sizeof(q)));
    if (r->pos < r->len && (r->text[r->pos] == 'L' || r->text[r->pos] == 'l')) {
        if (r->major >= 3)
            return corrupt(r, "shape[%d] has a Python 2 'L' suffix, which "
                           "format version 3.0 does not allow", index);
        r->pos++;
    }
    if (r->pos < r->len && is_ident(r->text[r->pos], false))
        return expected(r, "',' or ')' after a shape entry");
    if (neg && (v || over))
        return corrupt(r, "shape[%d] is -%s: a dimension cannot be negative",
                       index,
                       quoted(r->text + start, r->pos - start, q, sizeof(q)));
    if (over || v > (uint64_t)INT64_MAX)
        return corrupt(r, "shape[%d] = %s does not fit in 64 bits", index,
                       quoted(r->text + start, r->pos - start, q, sizeof(q)));
    if (index >= KEEL_MAX_DIMS)
        return corrupt(r, "the shape has more than %d dimensions, keel "
                       "supports at most %d", KEEL_MAX_DIMS, KEEL_MAX_DIMS);
    r->shape[index] = (int64_t)v;
    return KEEL_STATUS_OK;
}

static keel_status parse_shape(struct npy_reader *r)
{
    bool comma = false;
    keel_status st;
    char f[96];

    r->ndim = 0;
    if (r->pos < r->len && r->text[r->pos] != '(')
        return corrupt(r, "shape is %s, expected a tuple of integers such "
                       "as (2, 3)", found(r, f, sizeof(f)));
    if (r->pos >= r->len)
        return unterminated(r);
    r->pos++;
    skip_space(r);
    if (r->pos < r->len && r->text[r->pos] == ')') {
        r->pos++;
        return KEEL_STATUS_OK;
    }
    for (;;) {
        st = parse_dim(r, r->ndim);
        if (st != KEEL_STATUS_OK)
            return st;
        r->ndim++;
        skip_space(r);
        if (r->pos < r->len && r->text[r->pos] == ',') {
            comma = true;
            r->pos++;
            skip_space(r);
            if (r->pos < r->len && r->text[r->pos] == ')')
                break;
            continue;
        }
        if (r->pos < r->len && r->text[r->pos] == ')')
            break;
        return expected(r, "',' or ')' in the shape");
    }
    r->pos++;
    if (r->ndim == 1 && !comma)
        return corrupt(r, "shape is (%lld), an integer in parentheses, not "
                       "a tuple; a 1-d shape is written (%lld,)",
                       (long long)r->shape[0], (long long)r->shape[0]);
    return KEEL_STATUS_OK;
}

/* The whole header: {'descr': ..., 'fortran_order': ..., 'shape': ...}
 * in any order, each key once, nothing else but spaces around it. */
static keel_status parse_header(struct npy_reader *r)
{
    keel_status st;

    r->pos = 0;
    skip_space(r);
    if (r->pos >= r->len)
        return corrupt(r, "the header is empty (expected a dict literal)");
    if (r->text[r->pos] != '{')
        return expected(r, "'{' (the header is a Python dict literal)");
    r->pos++;
    for (;;) {
        const char *key;
        size_t n;
        bool *seen;
        char q[200];

        skip_space(r);
        if (r->pos < r->len && r->text[r->pos] == '}')
            break;
        st = parse_string(r, &key, &n, "a quoted key or '}'");
        if (st != KEEL_STATUS_OK)
            return st;
        quoted(key, n, q, sizeof(q));
        if (n == 5 && !memcmp(key, "descr", 5))
            seen = &r->seen_descr;
        else if (n == 13 && !memcmp(key, "fortran_order", 13))
            seen = &r->seen_fortran;
        else if (n == 5 && !memcmp(key, "shape", 5))
            seen = &r->seen_shape;
        else
            return corrupt(r, "the header has an unexpected key '%s' (a .npy "
                           "header has exactly descr, fortran_order and "
                           "shape)", q);
        if (*seen)
            return corrupt(r, "the header has a duplicate key '%s'", q);
        *seen = true;
        skip_space(r);
        if (r->pos >= r->len || r->text[r->pos] != ':')
            return expected(r, "':' after a key");
        r->pos++;
        skip_space(r);
        if (r->pos >= r->len)
            return unterminated(r);
        st = seen == &r->seen_descr     ? parse_descr(r) :
             seen == &r->seen_fortran ? parse_fortran(r) :
                                          parse_shape(r);
        if (st != KEEL_STATUS_OK)
            return st;
        skip_space(r);
        if (r->pos < r->len && r->text[r->pos] == ',') {
            r->pos++;
            continue;
        }
        if (r->pos < r->len && r->text[r->pos] == '}')
            break;
        return expected(r, "',' or '}' after a value");
    }
    r->pos++;
    skip_space(r);
    if (r->pos < r->len) {
        char f[96];

        return corrupt(r, "the header has text after the dict at header byte "
                       "%zu: %s", r->pos, found(r, f, sizeof(f)));
    }
    if (!r->seen_descr || !r->seen_fortran || !r->seen_shape)
        return corrupt(r, "the header is missing key '%s'",
                       !r->seen_descr ? "descr" :
                       !r->seen_fortran ? "fortran_order" : "shape");
    return KEEL_STATUS_OK;
}

/* ---- prefix, sizes and data ---------------------------------------------- */

static const char *shape_text(const struct npy_reader *r, char *buf,
                              size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "(");

    for (int d = 0; d < r->ndim && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? ", " : "",
                              (long long)r->shape[d]);
    if (n < size)
        snprintf(buf + n, size - n, "%s)", r->ndim == 1 ? "," : "");
    return buf;
}

/* Magic, version, header length and the header text (into *text). */
static keel_status read_prefix(struct npy_reader *r, char **text,
                               uint64_t *data_at)
{
    unsigned char pre[12];
    uint64_t hlen = 0;
    size_t len_bytes;
    keel_status st;

    *text = NULL;
    if (r->file_size < 10)
        return corrupt(r, "the file is %llu bytes long, too short for the "
                       "10-byte .npy prefix (magic, version, header "
                       "length)", (unsigned long long)r->file_size);
    st = read_at(r, 0, pre, 10, "reading the prefix");
    if (st != KEEL_STATUS_OK)
        return st;
    if (memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN)) {
        char q[64];

        return corrupt(r, "not a .npy file: bad magic %s (expected "
                       "\\x93NUMPY)",
                       quoted((const char *)pre, NPY_MAGIC_LEN, q,
                              sizeof(q)));
    }
    r->major = pre[6];
    if (pre[7] != 0 || pre[6] < 1 || pre[6] > 3)
        return corrupt(r, "unsupported format version %u.%u (keel reads "
                       "1.0, 2.0 and 3.0)", pre[6], pre[7]);
    len_bytes = r->major == 1 ? 2 : 4;
    if (len_bytes == 4) {
        if (r->file_size < 12)
            return corrupt(r, "the file is %llu bytes long, too short for "
                           "the 12-byte prefix of format version %u.0",
                           (unsigned long long)r->file_size, r->major);
        st = read_at(r, 10, pre + 10, 2, "reading the prefix");
        if (st != KEEL_STATUS_OK)
            return st;
    }
    for (size_t i = 0; i < len_bytes; i++)
        hlen |= (uint64_t)pre[8 + i] << (8 * i);
    *data_at = 8 + len_bytes + hlen;
    if (*data_at > r->file_size)
        return corrupt(r, "the header length %llu runs past the end of the "
                       "file (only %llu bytes follow the prefix; "
                       "truncated?)", (unsigned long long)hlen,
                       (unsigned long long)(r->file_size - 8 - len_bytes));
    if (hlen > NPY_HEADER_LIMIT)
        return corrupt(r, "the header length %llu exceeds the limit of %u "
                       "bytes", (unsigned long long)hlen, NPY_HEADER_LIMIT);
    *text = malloc(hlen + 1);
    if (!*text)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_npy_load: '%s': out of host memory",
                           r->path);
    st = read_at(r, 8 + len_bytes, *text, hlen, "reading the header");
    (*text)[hlen] = '\0';
    r->text = *text;
    r->len = (size_t)hlen;
    return st;
}

/* Element count and byte sizes, overflow-checked, and keel's own limit
 * for the in-memory dtype (int16 is held as int32). */
static keel_status check_sizes(const struct npy_reader *r, int64_t *numel,
                               uint64_t *file_bytes)
{
    int64_t count = 1;
    uint64_t bytes;
    bool empty = false;
    char s[KEEL_MAX_DIMS * 24 + 8];

    for (int d = 0; d < r->ndim; d++) {
        if (!r->shape[d])
            empty = true;
        else if (__builtin_mul_overflow(count, r->shape[d], &count))
            return corrupt(r, "shape %s is too large: the product of its "
                           "non-zero dimensions overflows int64",
                           shape_text(r, s, sizeof(s)));
    }
    if (__builtin_mul_overflow((uint64_t)count, (uint64_t)r->type->size,
                               &bytes) ||
        bytes > (uint64_t)INT64_MAX)
        return corrupt(r, "shape %s is too large: its byte size at %u "
                       "bytes per element overflows int64",
                       shape_text(r, s, sizeof(s)), r->type->size);
    if (!keel__shape_size(r->ndim, r->shape, keel_dtype_size(r->type->dtype),
                          NULL, NULL))
        return corrupt(r, "shape %s is too large for a %s tensor",
                       shape_text(r, s, sizeof(s)),
                       keel_dtype_name(r->type->dtype));
    *numel = empty ? 0 : count;
    *file_bytes = empty ? 0 : bytes;
    return KEEL_STATUS_OK;
}

/* Fortran-order elements into C order (ndim >= 2). */
static void fortran_to_c(const unsigned char *src, unsigned char *dst,
                         int ndim, const int64_t *shape, int64_t numel,
                         size_t es)
{
    int64_t fstride[KEEL_MAX_DIMS], idx[KEEL_MAX_DIMS] = {0}, off = 0;

    fstride[0] = 1;
    for (int d = 1; d < ndim; d++)
        fstride[d] = fstride[d - 1] * shape[d - 1];
    for (int64_t i = 0; i < numel; i++) {
        memcpy(dst + (size_t)i * es, src + (size_t)off * es, es);
        for (int d = ndim - 1; d >= 0; d--) {
            off += fstride[d];
            if (++idx[d] < shape[d])
                break;
            off -= fstride[d] * shape[d];
            idx[d] = 0;
        }
    }
}

/* Read, check and convert the data into host memory of the tensor's
 * dtype, C order (*out, malloc'd). */
static keel_status load_data(const struct npy_reader *r, uint64_t data_at,
                             int64_t numel, uint64_t file_bytes,
                             unsigned char **out)
{
    const struct npy_type *ty = r->type;
    size_t es = keel_dtype_size(ty->dtype);
    unsigned char *raw, *conv = NULL;
    keel_status st;

    *out = NULL;
    raw = malloc(file_bytes ? file_bytes : 1);
    if (!raw)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_npy_load: '%s': out of host memory for "
                           "%llu bytes of data", r->path,
                           (unsigned long long)file_bytes);
    st = read_at(r, data_at, raw, file_bytes, "reading the data");
    if (st != KEEL_STATUS_OK)
        goto fail;
    if (r->swap)
        swap_elements(raw, file_bytes, ty->size);
    if (ty->dtype == KEEL_BOOL)
        for (uint64_t i = 0; i < file_bytes; i++)
            if (raw[i] > 1) {
                st = corrupt(r, "bool element %llu (in file order) is %u, "
                             "expected 0 or 1", (unsigned long long)i,
                             raw[i]);
                goto fail;
            }
    if (ty->size != es) { /* int16 -> int32 */
        conv = malloc(numel ? (size_t)numel * es : 1);
        if (!conv)
            goto oom;
        for (int64_t i = 0; i < numel; i++) {
            int16_t v;
            int32_t w;

            memcpy(&v, raw + 2 * i, 2);
            w = v;
            memcpy(conv + 4 * i, &w, 4);
        }
        free(raw);
        raw = conv;
        conv = NULL;
    }
    if (r->fortran && r->ndim >= 2 && numel > 1) {
        conv = malloc((size_t)numel * es);
        if (!conv)
            goto oom;
        fortran_to_c(raw, conv, r->ndim, r->shape, numel, es);
        free(raw);
        raw = conv;
    }
    *out = raw;
    return KEEL_STATUS_OK;
oom:
    st = keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                     "keel_npy_load: '%s': out of host memory converting "
                     "%lld elements", r->path, (long long)numel);
fail:
    free(raw);
    return st;
}

keel_status keel_npy_load(const char *path, const char *device,
                          keel_tensor **out)
{
    struct npy_reader r = {.path = path, .fd = -1};
    struct stat sb;
    keel_place place;
    char *text = NULL;
    unsigned char *data = NULL;
    uint64_t data_at = 0, file_bytes = 0, have;
    int64_t numel = 0;
    keel_status st;

    if (!path || !out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_npy_load: %s is NULL", path ? "out" : "path");
    *out = NULL;
    st = keel__place_of(device, &place);
    if (st != KEEL_STATUS_OK)
        return st;
    st = keel__open_regular("keel_npy_load", path, &r.fd, &sb);
    if (st != KEEL_STATUS_OK)
        return st;
    r.file_size = (uint64_t)sb.st_size;
    st = read_prefix(&r, &text, &data_at);
    if (st == KEEL_STATUS_OK)
        st = parse_header(&r);
    if (st == KEEL_STATUS_OK)
        st = check_sizes(&r, &numel, &file_bytes);
    if (st != KEEL_STATUS_OK)
        goto out;
    have = r.file_size - data_at;
    if (have != file_bytes) {
        char s[KEEL_MAX_DIMS * 24 + 8];
        char q[8];

        snprintf(q, sizeof(q), "%c%c%u", r.order, r.type->kind,
                 r.type->size);
        shape_text(&r, s, sizeof(s));
        if (have < file_bytes)
            st = corrupt(&r, "the data is %llu bytes short: descr '%s' with "
                         "shape %s needs %llu bytes after the header at "
                         "byte %llu, the file has %llu (truncated?)",
                         (unsigned long long)(file_bytes - have), q, s,
                         (unsigned long long)file_bytes,
                         (unsigned long long)data_at,
                         (unsigned long long)have);
        else
            st = corrupt(&r, "%llu trailing bytes after the data: descr '%s' "
                         "with shape %s needs %llu bytes after the header, "
                         "the file has %llu",
                         (unsigned long long)(have - file_bytes), q, s,
                         (unsigned long long)file_bytes,
                         (unsigned long long)have);
        goto out;
    }
    st = load_data(&r, data_at, numel, file_bytes, &data);
    if (st == KEEL_STATUS_OK)
        st = keel_tensor_from_host(data, r.type->dtype, r.ndim, r.shape,
                                   device, out);
out:
    free(data);
    free(text);
    close(r.fd);
    return st;
}
