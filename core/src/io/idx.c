/*
 * IDX files (the MNIST format), gzip'd or plain, read through zlib.
 *
 * Layout, all big-endian:
 *   bytes 0-1  zero
 *   byte  2    element type: 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32,
 *              0x0D f32, 0x0E f64
 *   byte  3    number of dimensions
 *   then       one u32 size per dimension, then the elements row-major.
 *
 * gzread reads plain files unchanged, so one path serves both. For a plain
 * file the length is checked against the dims before any allocation; for
 * a gzip'd one the buffer grows with the data actually decompressed, so a
 * header that lies about its size fails with "truncated" rather than with
 * a huge allocation. Reading one byte past the data proves there is no
 * trailing data and makes zlib verify the gzip trailer's CRC.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include <keel/data.h>

#include "tensor/tensor_internal.h"

/* Largest single gzread request. */
#define READ_CHUNK (1u << 26)
/* First buffer for a gzip'd payload before it grows with the data. */
#define FIRST_CAP ((size_t)1 << 20)

struct idx_type_info {
    keel_idx_type type;
    const char *name;
    size_t file_size; /* bytes per element in the file */
    keel_dtype dtype; /* in memory */
};

static const struct idx_type_info idx_types[] = {
    {KEEL_IDX_U8, "uint8", 1, KEEL_U8},  {KEEL_IDX_I8, "int8", 1, KEEL_I8},
    {KEEL_IDX_I16, "int16", 2, KEEL_I32}, {KEEL_IDX_I32, "int32", 4, KEEL_I32},
    {KEEL_IDX_F32, "float32", 4, KEEL_F32},
    {KEEL_IDX_F64, "float64", 8, KEEL_F64},
};

static const struct idx_type_info *type_info(unsigned code)
{
    for (size_t i = 0; i < sizeof(idx_types) / sizeof(idx_types[0]); i++)
        if ((unsigned)idx_types[i].type == code)
            return &idx_types[i];
    return NULL;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

/* "[60000, 28, 28]" into buf. */
static const char *dims_str(int ndim, const int64_t *dims, char *buf,
                            size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "[");

    for (int i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "",
                              (long long)dims[i]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
    return buf;
}

static keel_status idx_corrupt(const char *path, const char *fmt, ...)
    KEEL_PRINTF(2, 3);

static keel_status idx_corrupt(const char *path, const char *fmt, ...)
{
    char detail[768];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    return keel__error(KEEL_STATUS_CORRUPT, "keel_idx_load: '%s': %s", path,
                       detail);
}

/* Read up to n bytes; *got says how many came. A zlib or system error is
 * reported; a short read is not (the caller knows what it expected). */
static keel_status gz_read(gzFile g, const char *path, void *buf, size_t n,
                           size_t *got, uint64_t at)
{
    unsigned char *p = buf;

    *got = 0;
    while (*got < n) {
        size_t want = n - *got < READ_CHUNK ? n - *got : READ_CHUNK;
        int r = gzread(g, p + *got, (unsigned)want);

        if (r < 0) {
            int err;
            const char *msg = gzerror(g, &err);

            if (err == Z_ERRNO)
                return keel__error(KEEL_STATUS_IO_ERROR,
                                   "keel_idx_load: '%s': read failed near "
                                   "byte %llu: %s", path,
                                   (unsigned long long)(at + *got),
                                   strerror(errno));
            return idx_corrupt(path, "the gzip stream is damaged near "
                               "decompressed byte %llu: %s",
                               (unsigned long long)(at + *got), msg);
        }
        if (r == 0)
            break;
        *got += (size_t)r;
    }
    /* A stream cut short ends the reads without a negative return. */
    if (*got < n) {
        int err;
        const char *msg = gzerror(g, &err);

        if (err != Z_OK && err != Z_STREAM_END)
            return idx_corrupt(path, "the gzip stream is damaged near "
                               "decompressed byte %llu: %s",
                               (unsigned long long)(at + *got), msg);
    }
    return KEEL_STATUS_OK;
}

/* The payload of a gzip'd file: grow with the data, up to `need` bytes. */
static keel_status read_payload_gz(gzFile g, const char *path, size_t need,
                                   uint64_t at, unsigned char **out,
                                   size_t *got)
{
    unsigned char *buf = NULL;
    size_t cap = 0, have = 0;
    keel_status st = KEEL_STATUS_OK;

    *out = NULL;
    *got = 0;
    while (have < need) {
        size_t n;

        if (have == cap) {
            size_t next = cap ? 2 * cap : FIRST_CAP;
            unsigned char *grown;

            if (next > need || next < cap)
                next = need;
            grown = realloc(buf, next);
            if (!grown) {
                st = keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                                 "keel_idx_load: '%s': out of host memory "
                                 "at %zu bytes", path, next);
                goto fail;
            }
            buf = grown;
            cap = next;
        }
        st = gz_read(g, path, buf + have, cap - have, &n, at + have);
        if (st != KEEL_STATUS_OK)
            goto fail;
        have += n;
        if (have < cap)
            break; /* end of stream */
    }
    *out = buf;
    *got = have;
    return KEEL_STATUS_OK;
fail:
    free(buf);
    return st;
}

/* Big-endian file elements -> host values of the in-memory dtype. */
static void convert(const struct idx_type_info *ti, const unsigned char *src,
                    void *dst, int64_t numel)
{
    for (int64_t i = 0; i < numel; i++) {
        const unsigned char *p = src + i * (int64_t)ti->file_size;

        switch (ti->type) {
        case KEEL_IDX_U8:
        case KEEL_IDX_I8:
            ((unsigned char *)dst)[i] = p[0];
            break;
        case KEEL_IDX_I16:
            ((int32_t *)dst)[i] = (int16_t)(uint16_t)(p[0] << 8 | p[1]);
            break;
        case KEEL_IDX_I32:
            ((int32_t *)dst)[i] = (int32_t)be32(p);
            break;
        case KEEL_IDX_F32: {
            uint32_t u = be32(p);
            float f;

            memcpy(&f, &u, 4);
            ((float *)dst)[i] = f;
            break;
        }
        case KEEL_IDX_F64: {
            uint64_t u = (uint64_t)be32(p) << 32 | be32(p + 4);
            double d;

            memcpy(&d, &u, 8);
            ((double *)dst)[i] = d;
            break;
        }
        }
    }
}

/* Magic and dims; fills a's geometry and the payload size. */
static keel_status read_head(gzFile g, const char *path, keel_idx_array *a,
                             const struct idx_type_info **tip,
                             uint64_t *payload)
{
    unsigned char head[4 + 4 * 255];
    const struct idx_type_info *ti;
    uint32_t magic;
    uint64_t numel = 1, span, bytes;
    size_t got;
    char ds[256];
    keel_status st;

    st = gz_read(g, path, head, 4, &got, 0);
    if (st != KEEL_STATUS_OK)
        return st;
    if (got < 4)
        return idx_corrupt(path, "the file holds %zu bytes, too short for "
                           "the 4-byte magic", got);
    magic = be32(head);
    if (head[0] || head[1])
        return idx_corrupt(path, "bad magic 0x%08x: its first two bytes must "
                           "be zero (not an IDX file?)", magic);
    ti = type_info(head[2]);
    if (!ti)
        return idx_corrupt(path, "unknown element type code 0x%02x in magic "
                           "0x%08x (expected 0x08 uint8, 0x09 int8, 0x0B "
                           "int16, 0x0C int32, 0x0D float32 or 0x0E "
                           "float64)", head[2], magic);
    if (head[3] < 1 || head[3] > KEEL_MAX_DIMS)
        return idx_corrupt(path, "magic 0x%08x gives %u dimensions; keel "
                           "reads 1 to %d", magic, head[3], KEEL_MAX_DIMS);
    a->ndim = head[3];
    st = gz_read(g, path, head + 4, 4 * (size_t)a->ndim, &got, 4);
    if (st != KEEL_STATUS_OK)
        return st;
    if (got < 4 * (size_t)a->ndim)
        return idx_corrupt(path, "truncated in the dimension sizes: %d "
                           "dimensions need %d bytes after the magic, the "
                           "file has %zu", a->ndim, 4 * a->ndim, got);
    /* The product of the non-zero dims bounds the strides even when a
     * zero dim makes the element count 0, so it is checked too: both in
     * bytes of the in-memory dtype (8 at most) must fit in int64_t. */
    span = 8;
    for (int i = 0; i < a->ndim; i++) {
        a->dims[i] = be32(head + 4 + 4 * i);
        if (__builtin_mul_overflow(numel, (uint64_t)a->dims[i], &numel))
            numel = UINT64_MAX;
        if (a->dims[i] &&
            __builtin_mul_overflow(span, (uint64_t)a->dims[i], &span))
            span = UINT64_MAX;
    }
    if (numel > (uint64_t)INT64_MAX / 8 || span > (uint64_t)INT64_MAX ||
        __builtin_mul_overflow(numel, (uint64_t)ti->file_size, &bytes) ||
        bytes > SIZE_MAX / 2)
        return idx_corrupt(path, "dims %s of %s describe more data than "
                           "this machine can address (the product of the "
                           "non-zero dims times 8 bytes must fit in 63 "
                           "bits)",
                           dims_str(a->ndim, a->dims, ds, sizeof(ds)),
                           ti->name);
    a->type = ti->type;
    a->dtype = ti->dtype;
    a->numel = (int64_t)numel;
    *tip = ti;
    *payload = bytes;
    return KEEL_STATUS_OK;
}

keel_status keel_idx_load(const char *path, keel_idx_array *out)
{
    const struct idx_type_info *ti = NULL;
    keel_idx_array a;
    unsigned char *raw = NULL, extra;
    uint64_t payload = 0, head_len;
    size_t got = 0;
    struct stat sb;
    gzFile g = NULL;
    char ds[256];
    keel_status st;
    int fd;

    if (!path || !out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_idx_load: %s is NULL", path ? "out" : "path");
    memset(out, 0, sizeof(*out));
    memset(&a, 0, sizeof(a));
    st = keel__open_regular("keel_idx_load", path, &fd, &sb);
    if (st != KEEL_STATUS_OK)
        return st;
    /* The descriptor was checked to be a regular file: read exactly it. */
    g = gzdopen(fd, "rb");
    if (!g) {
        close(fd);
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_idx_load: cannot open '%s': out of memory",
                           path);
    }
    gzbuffer(g, 1u << 17);
    st = read_head(g, path, &a, &ti, &payload);
    if (st != KEEL_STATUS_OK)
        goto out;
    head_len = 4 + 4 * (uint64_t)a.ndim;
    dims_str(a.ndim, a.dims, ds, sizeof(ds));
    /* A plain file: check its length before allocating anything. */
    if (gzdirect(g) && (uint64_t)sb.st_size != head_len + payload) {
        uint64_t have = (uint64_t)sb.st_size - head_len;

        if (have < payload)
            st = idx_corrupt(path, "truncated: dims %s of %s need %llu "
                             "bytes of data, the file has %llu", ds,
                             ti->name, (unsigned long long)payload,
                             (unsigned long long)have);
        else
            st = idx_corrupt(path, "%llu bytes of trailing data after the "
                             "%llu bytes that dims %s of %s describe",
                             (unsigned long long)(have - payload),
                             (unsigned long long)payload, ds, ti->name);
        goto out;
    }
    st = read_payload_gz(g, path, (size_t)payload, head_len, &raw, &got);
    if (st != KEEL_STATUS_OK)
        goto out;
    if (got < payload) {
        st = idx_corrupt(path, "truncated: dims %s of %s need %llu bytes of "
                         "data, the %s has %zu", ds, ti->name,
                         (unsigned long long)payload,
                         gzdirect(g) ? "file" : "decompressed stream", got);
        goto out;
    }
    st = gz_read(g, path, &extra, 1, &got, head_len + payload);
    if (st != KEEL_STATUS_OK)
        goto out;
    if (got) {
        st = idx_corrupt(path, "trailing data after the %llu bytes that "
                         "dims %s of %s describe",
                         (unsigned long long)payload, ds, ti->name);
        goto out;
    }
    a.nbytes = (size_t)a.numel * keel_dtype_size(a.dtype);
    if (a.nbytes && ti->file_size == 1) {
        /* Bytes need no conversion: keep the buffer. */
        a.data = raw;
        raw = NULL;
    } else if (a.nbytes) {
        a.data = malloc(a.nbytes);
        if (!a.data) {
            st = keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                             "keel_idx_load: '%s': out of host memory for "
                             "%zu bytes", path, a.nbytes);
            goto out;
        }
        convert(ti, raw, a.data, a.numel);
    }
    *out = a;
    a.data = NULL;
out:
    free(a.data);
    free(raw);
    if (g) {
        int rc = gzclose_r(g);

        if (st == KEEL_STATUS_OK && rc != Z_OK) {
            keel_idx_array_free(out);
            st = keel__error(KEEL_STATUS_IO_ERROR,
                             "keel_idx_load: '%s': closing failed (zlib "
                             "error %d)", path, rc);
        }
    }
    return st;
}

void keel_idx_array_free(keel_idx_array *a)
{
    if (!a)
        return;
    free(a->data);
    memset(a, 0, sizeof(*a));
}

/* ---- writing ------------------------------------------------------------ */

/* Host values of the type -> big-endian file bytes. */
static void to_file_bytes(const struct idx_type_info *ti, const void *src,
                          unsigned char *dst, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        unsigned char *p = dst + i * ti->file_size;
        uint64_t u = 0;

        switch (ti->type) {
        case KEEL_IDX_U8:
        case KEEL_IDX_I8:
            p[0] = ((const unsigned char *)src)[i];
            continue;
        case KEEL_IDX_I16:
            u = (uint16_t)((const int16_t *)src)[i];
            break;
        case KEEL_IDX_I32:
            u = (uint32_t)((const int32_t *)src)[i];
            break;
        case KEEL_IDX_F32: {
            uint32_t w;

            memcpy(&w, (const float *)src + i, 4);
            u = w;
            break;
        }
        case KEEL_IDX_F64:
            memcpy(&u, (const double *)src + i, 8);
            break;
        }
        for (size_t b = 0; b < ti->file_size; b++)
            p[b] = (unsigned char)(u >> (8 * (ti->file_size - 1 - b)));
    }
}

/* One writer for gzip and plain files. */
struct sink {
    gzFile g;
    FILE *f;
};

static bool sink_write(struct sink *s, const void *buf, size_t n)
{
    if (!n)
        return true;
    if (s->g)
        return gzwrite(s->g, buf, (unsigned)n) == (int)n;
    return fwrite(buf, 1, n, s->f) == n;
}

keel_status keel_idx_save(const char *path, keel_idx_type type, int ndim,
                          const int64_t *dims, const void *data, bool gzip)
{
    const struct idx_type_info *ti = type_info((unsigned)type);
    unsigned char head[4 + 4 * KEEL_MAX_DIMS], chunk[1 << 16];
    struct sink s = {NULL, NULL};
    uint64_t numel = 1;
    size_t per_chunk, done = 0;
    bool ok;
    int e;

    if (!path || (ndim > 0 && !dims))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_idx_save: %s is NULL", path ? "dims" :
                           "path");
    if (!ti)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_idx_save: 0x%02x is not an IDX type code",
                           (unsigned)type);
    if (ndim < 1 || ndim > KEEL_MAX_DIMS)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_idx_save: ndim %d is outside [1, %d]", ndim,
                           KEEL_MAX_DIMS);
    head[0] = head[1] = 0;
    head[2] = (unsigned char)ti->type;
    head[3] = (unsigned char)ndim;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0 || dims[i] > UINT32_MAX)
            return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                               "keel_idx_save: dims[%d] = %lld is outside "
                               "[0, 2^32)", i, (long long)dims[i]);
        for (int b = 0; b < 4; b++)
            head[4 + 4 * i + b] = (unsigned char)(dims[i] >> (24 - 8 * b));
        numel *= (uint64_t)dims[i];
    }
    if (numel && !data)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_idx_save: data is NULL");
    if (gzip)
        s.g = gzopen(path, "wb6");
    else
        s.f = fopen(path, "wb");
    if (!s.g && !s.f) {
        e = errno;
        return keel__error(KEEL_STATUS_IO_ERROR,
                           "keel_idx_save: cannot create '%s': %s", path,
                           strerror(e));
    }
    ok = sink_write(&s, head, 4 + 4 * (size_t)ndim);
    per_chunk = sizeof(chunk) / ti->file_size;
    while (ok && done < numel) {
        size_t n = numel - done < per_chunk ? numel - done : per_chunk;

        /* The C value of each type is as wide as its file element. */
        to_file_bytes(ti, (const unsigned char *)data + done * ti->file_size,
                      chunk, n);
        ok = sink_write(&s, chunk, n * ti->file_size);
        done += n;
    }
    e = errno;
    if (s.g)
        ok = (gzclose_w(s.g) == Z_OK) && ok;
    else
        ok = !fclose(s.f) && ok;
    if (!ok) {
        unlink(path);
        return keel__error(KEEL_STATUS_IO_ERROR,
                           "keel_idx_save: writing '%s' failed: %s", path,
                           e ? strerror(e) : "zlib error");
    }
    return KEEL_STATUS_OK;
}

/* ---- tensors ------------------------------------------------------------ */

keel_status keel_idx_to_tensor(const keel_idx_array *a, const char *device,
                               keel_tensor **out)
{
    if (!a || !out)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_idx_to_tensor: %s is NULL",
                           a ? "out" : "array");
    return keel_tensor_from_host(a->data, a->dtype, a->ndim, a->dims, device,
                                 out);
}

/* Pixels per conversion block of mnist_images (1 MiB of float32). */
#define MNIST_BLOCK ((int64_t)1 << 18)

/* uint8 pixels -> float32 in [0, 1], converted and copied to the device in
 * blocks, so that the host never holds a float copy of the whole set (for
 * Fashion-MNIST's training images that copy alone was 188 MB of peak
 * memory). */
static keel_status mnist_images(const char *path, const char *device,
                                keel_idx_array *a, keel_tensor **out)
{
    const unsigned char *px = a->data;
    int64_t shape[4];
    keel_tensor *t = NULL;
    keel_place place;
    keel_status st;
    float *f;

    if (a->type != KEEL_IDX_U8 || a->ndim != 3)
        return idx_corrupt(path, "MNIST images must be uint8 [N, H, W]; the "
                           "file holds %s with %d dimensions",
                           type_info(a->type)->name, a->ndim);
    shape[0] = a->dims[0];
    shape[1] = 1;
    shape[2] = a->dims[1];
    shape[3] = a->dims[2];
    if ((st = keel__place_of(device, &place)) ||
        (st = keel__tensor_new(place, KEEL_F32, 4, shape, &t)))
        return st;
    f = malloc((size_t)(a->numel < MNIST_BLOCK ? a->numel + 1 : MNIST_BLOCK) *
               sizeof(float));
    if (!f) {
        keel_tensor_free(t);
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_mnist_load: out of host memory for a block "
                           "of %lld pixels", (long long)MNIST_BLOCK);
    }
    for (int64_t i0 = 0; i0 < a->numel && !st; i0 += MNIST_BLOCK) {
        int64_t n = a->numel - i0 < MNIST_BLOCK ? a->numel - i0 : MNIST_BLOCK;
        for (int64_t i = 0; i < n; i++)
            f[i] = (float)px[i0 + i] / 255.0f;
        st = keel_mem_copy_h2d(place,
                               t->storage->data +
                                   (keel_dptr)i0 * sizeof(float),
                               f, (uint64_t)n * sizeof(float));
    }
    free(f);
    if (st) {
        keel_tensor_free(t);
        return st;
    }
    *out = t;
    return KEEL_STATUS_OK;
}

static keel_status mnist_labels(const char *path, const char *device,
                                keel_idx_array *a, keel_tensor **out)
{
    int64_t *l;
    keel_status st;

    if (a->type != KEEL_IDX_U8 || a->ndim != 1)
        return idx_corrupt(path, "MNIST labels must be uint8 [N]; the file "
                           "holds %s with %d dimensions",
                           type_info(a->type)->name, a->ndim);
    l = malloc(a->numel ? (size_t)a->numel * sizeof(int64_t) : 1);
    if (!l)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_mnist_load: out of host memory for %lld "
                           "labels", (long long)a->numel);
    for (int64_t i = 0; i < a->numel; i++)
        l[i] = ((const unsigned char *)a->data)[i];
    st = keel_tensor_from_host(l, KEEL_I64, 1, a->dims, device, out);
    free(l);
    return st;
}

keel_status keel_mnist_load(const char *images_path, const char *labels_path,
                            const char *device, keel_tensor **images,
                            keel_tensor **labels)
{
    keel_idx_array ia, la;
    keel_tensor *ti = NULL, *tl = NULL;
    keel_status st = KEEL_STATUS_OK;

    memset(&ia, 0, sizeof(ia));
    memset(&la, 0, sizeof(la));
    if ((!images && !labels) || (images && !images_path) ||
        (labels && !labels_path))
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_mnist_load: %s",
                           !images && !labels ? "both outputs are NULL" :
                           "a path is NULL for a requested output");
    if (images)
        *images = NULL;
    if (labels)
        *labels = NULL;
    if (images)
        st = keel_idx_load(images_path, &ia);
    if (st == KEEL_STATUS_OK && labels)
        st = keel_idx_load(labels_path, &la);
    if (st != KEEL_STATUS_OK)
        goto out;
    if (images && labels && ia.ndim >= 1 && la.ndim >= 1 &&
        ia.dims[0] != la.dims[0]) {
        st = keel__error(KEEL_STATUS_CORRUPT,
                         "keel_mnist_load: '%s' has %lld images but '%s' has "
                         "%lld labels", images_path, (long long)ia.dims[0],
                         labels_path, (long long)la.dims[0]);
        goto out;
    }
    if (images)
        st = mnist_images(images_path, device, &ia, &ti);
    if (st == KEEL_STATUS_OK && labels)
        st = mnist_labels(labels_path, device, &la, &tl);
    if (st != KEEL_STATUS_OK)
        goto out;
    if (images)
        *images = ti;
    if (labels)
        *labels = tl;
    ti = tl = NULL;
out:
    keel_tensor_free(ti);
    keel_tensor_free(tl);
    keel_idx_array_free(&ia);
    keel_idx_array_free(&la);
    return st;
}

/* "<dir>/<split>-<kind>-idx<n>-ubyte.gz", or without ".gz" when only that
 * exists; NULL on allocation failure. */
static char *mnist_path(const char *dir, const char *split, const char *kind,
                        int n)
{
    char *p = keel__asprintf("%s/%s-%s-idx%d-ubyte.gz", dir, split, kind, n);

    if (p && access(p, F_OK)) {
        char *plain = keel__asprintf("%s/%s-%s-idx%d-ubyte", dir, split,
                                     kind, n);

        if (plain && !access(plain, F_OK)) {
            free(p);
            return plain;
        }
        free(plain);
    }
    return p;
}

keel_status keel_mnist_load_dir(const char *dir, const char *split,
                                const char *device, keel_tensor **images,
                                keel_tensor **labels)
{
    char *ip, *lp;
    keel_status st;

    if (!dir || !split)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_mnist_load_dir: %s is NULL",
                           dir ? "split" : "dir");
    ip = mnist_path(dir, split, "images", 3);
    lp = mnist_path(dir, split, "labels", 1);
    if (!ip || !lp)
        st = keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                         "keel_mnist_load_dir: out of host memory");
    else
        st = keel_mnist_load(ip, lp, device, images, labels);
    free(ip);
    free(lp);
    return st;
}
