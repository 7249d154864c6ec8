/*
 * IDX files, datasets and the loader: IDX round trips (every element type,
 * gzip'd and plain, plus files written here byte by byte, gzip'd with a
 * stored-block encoder of our own so zlib's writer is not the only
 * witness), corrupt IDX files, the MNIST convenience, and the loader:
 * coverage, shuffle determinism, drop_last, epochs, prefetch, teardown
 * mid-epoch, collation shapes and device placement, error propagation,
 * and sharding an epoch across data-parallel ranks as Paddle's
 * DistributedBatchSampler does (against orders worked out here, by hand
 * and from Philox, not by the library).
 *
 * When /usr/share/datasets/fashion-mnist exists (Debian's
 * dataset-fashion-mnist), one more test checks the real training set;
 * otherwise it is reported as skipped and not counted.
 *
 * Runs with KEEL_CPU_DEVICES=2 (cpu:0 and cpu:1).
 */
#include <dirent.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include <keel/data.h>
#include <keel/ops.h>
#include <keel/philox.h>

#include "check.h"

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

/* ---- helpers ------------------------------------------------------------ */

static char tmpdir[256];

static char *tmp_path(const char *name)
{
    static char buf[4][512];
    static int next;
    char *p = buf[next++ % 4];

    snprintf(p, sizeof(buf[0]), "%s/%s", tmpdir, name);
    return p;
}

static void write_all(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fwrite(buf, 1, len, f), len);
    fclose(f);
}

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf;
    long n;

    *len = 0;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = buf ? (size_t)n : 0;
    return buf;
}

static bool on_device(const keel_tensor *t, const char *name)
{
    char buf[64];

    keel_place_name(keel_tensor_place(t), buf, sizeof(buf));
    return !strcmp(buf, name);
}

/* ---- a gzip writer of our own (stored deflate blocks) ------------------- */

static uint32_t crc32_of(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;

    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
    }
    return ~c;
}

/* gzip of `in`, uncompressed (stored) blocks; *len set. */
static unsigned char *gzip_stored(const unsigned char *in, size_t n,
                                  size_t *len)
{
    size_t blocks = n / 65535 + 1, cap = 18 + n + 5 * blocks, o = 0, done = 0;
    unsigned char *out = malloc(cap);
    static const unsigned char head[10] = {0x1f, 0x8b, 8, 0, 0, 0,
                                           0,    0,    0, 3};
    uint32_t crc = crc32_of(in, n);

    memcpy(out, head, 10);
    o = 10;
    do {
        size_t b = n - done < 65535 ? n - done : 65535;

        out[o++] = done + b == n ? 1 : 0; /* BFINAL, BTYPE 00 */
        out[o++] = (unsigned char)b;
        out[o++] = (unsigned char)(b >> 8);
        out[o++] = (unsigned char)~b;
        out[o++] = (unsigned char)(~b >> 8);
        memcpy(out + o, in + done, b);
        o += b;
        done += b;
    } while (done < n);
    for (int i = 0; i < 4; i++)
        out[o++] = (unsigned char)(crc >> (8 * i));
    for (int i = 0; i < 4; i++)
        out[o++] = (unsigned char)((uint32_t)n >> (8 * i));
    *len = o;
    return out;
}

/* IDX bytes: magic (type, ndim), dims, then `payload` as given. */
static unsigned char *idx_bytes(unsigned type, int ndim, const uint32_t *dims,
                                const void *payload, size_t plen, size_t *len)
{
    unsigned char *b = malloc(4 + 4 * (size_t)ndim + plen + 1);

    b[0] = b[1] = 0;
    b[2] = (unsigned char)type;
    b[3] = (unsigned char)ndim;
    for (int i = 0; i < ndim; i++)
        for (int k = 0; k < 4; k++)
            b[4 + 4 * i + k] = (unsigned char)(dims[i] >> (24 - 8 * k));
    memcpy(b + 4 + 4 * ndim, payload, plen);
    *len = 4 + 4 * (size_t)ndim + plen;
    return b;
}

static void write_idx(const char *path, unsigned type, int ndim,
                      const uint32_t *dims, const void *payload, size_t plen,
                      bool gz)
{
    size_t len, glen;
    unsigned char *b = idx_bytes(type, ndim, dims, payload, plen, &len);

    if (gz) {
        unsigned char *g = gzip_stored(b, len, &glen);

        write_all(path, g, glen);
        free(g);
    } else {
        write_all(path, b, len);
    }
    free(b);
}

/* ---- IDX ---------------------------------------------------------------- */

static void test_idx_round_trip(void)
{
    static const keel_idx_type types[6] = {KEEL_IDX_U8,  KEEL_IDX_I8,
                                           KEEL_IDX_I16, KEEL_IDX_I32,
                                           KEEL_IDX_F32, KEEL_IDX_F64};
    static const keel_dtype dtypes[6] = {KEEL_U8,  KEEL_I8,  KEEL_I32,
                                         KEEL_I32, KEEL_F32, KEEL_F64};
    static const size_t csize[6] = {1, 1, 2, 4, 4, 8};
    int64_t dims[3] = {3, 5, 7};
    const int n = 105;

    for (int t = 0; t < 6; t++)
        for (int gz = 0; gz < 2; gz++) {
            unsigned char src[105 * 8];
            keel_idx_array a;
            const char *path = tmp_path(gz ? "rt.idx.gz" : "rt.idx");

            for (int i = 0; i < n; i++) {
                switch (types[t]) {
                case KEEL_IDX_U8:
                    src[i] = (unsigned char)(i * 37);
                    break;
                case KEEL_IDX_I8:
                    ((int8_t *)src)[i] = (int8_t)(i * 37 - 128);
                    break;
                case KEEL_IDX_I16:
                    ((int16_t *)src)[i] = (int16_t)(i * 613 - 32768);
                    break;
                case KEEL_IDX_I32:
                    ((int32_t *)src)[i] =
                        (int32_t)((int64_t)i * 20000003 - 1000000000);
                    break;
                case KEEL_IDX_F32:
                    ((float *)src)[i] = i == 3 ? -0.0f : (float)i / 7.0f;
                    break;
                case KEEL_IDX_F64:
                    ((double *)src)[i] = (double)i * M_PI - 1e200;
                    break;
                }
            }
            OK(keel_idx_save(path, types[t], 3, dims, src, gz));
            OK(keel_idx_load(path, &a));
            CU_ASSERT_EQUAL(a.type, types[t]);
            CU_ASSERT_EQUAL(a.dtype, dtypes[t]);
            CU_ASSERT_EQUAL(a.ndim, 3);
            CU_ASSERT(a.dims[0] == 3 && a.dims[1] == 5 && a.dims[2] == 7);
            CU_ASSERT_EQUAL(a.numel, n);
            CU_ASSERT_EQUAL(a.nbytes, (size_t)n * keel_dtype_size(dtypes[t]));
            if (types[t] == KEEL_IDX_I16) {
                for (int i = 0; i < n; i++)
                    CU_ASSERT_EQUAL(((int32_t *)a.data)[i],
                                    ((int16_t *)src)[i]);
            } else {
                CU_ASSERT(!memcmp(a.data, src, (size_t)n * csize[t]));
            }
            /* As a tensor. */
            {
                keel_tensor *x;
                double v;

                OK(keel_idx_to_tensor(&a, "cpu:1", &x));
                CU_ASSERT_EQUAL(keel_tensor_dtype(x), dtypes[t]);
                CU_ASSERT_EQUAL(keel_tensor_ndim(x), 3);
                CU_ASSERT(on_device(x, "cpu:1"));
                OK(keel_tensor_item(x, 104, &v));
                if (types[t] == KEEL_IDX_I16)
                    CU_ASSERT_EQUAL(v, ((int16_t *)src)[104]);
                keel_tensor_free(x);
            }
            keel_idx_array_free(&a);
            CU_ASSERT_PTR_NULL(a.data);
        }
    keel_idx_array_free(NULL);
}

/* Files built byte by byte: big-endian values, our own gzip. */
static void test_idx_handmade(void)
{
    uint32_t dims[2] = {2, 3};
    static const unsigned char be[24] = {
        0x01, 0x02, 0x03, 0x04, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 0,
        0x7f, 0xff, 0xff, 0xff, 0x80, 0, 0, 0, 0, 0, 0x01, 0x00};
    static const int32_t want[6] = {0x01020304, -2, 0, INT32_MAX, INT32_MIN,
                                    256};
    keel_idx_array a;

    for (int gz = 0; gz < 2; gz++) {
        const char *path = tmp_path(gz ? "hand.gz" : "hand");

        write_idx(path, 0x0C, 2, dims, be, sizeof(be), gz);
        OK(keel_idx_load(path, &a));
        CU_ASSERT_EQUAL(a.dtype, KEEL_I32);
        CU_ASSERT(!memcmp(a.data, want, sizeof(want)));
        keel_idx_array_free(&a);
    }
    /* A large stored gzip (several 64 KiB blocks) of uint8. */
    {
        uint32_t d[3] = {100, 28, 28};
        size_t n = 100 * 28 * 28;
        unsigned char *px = malloc(n);

        for (size_t i = 0; i < n; i++)
            px[i] = (unsigned char)(i * 131 + 7);
        write_idx(tmp_path("big.gz"), 0x08, 3, d, px, n, true);
        OK(keel_idx_load(tmp_path("big.gz"), &a));
        CU_ASSERT_EQUAL(a.numel, (int64_t)n);
        CU_ASSERT(!memcmp(a.data, px, n));
        keel_idx_array_free(&a);
        free(px);
    }
}

struct idx_case {
    const char *what;
    unsigned char head[4];
    int ndim_written; /* dims actually written */
    uint32_t dims[3];
    size_t payload; /* bytes actually written */
    bool gz;
    const char *part;
};

static void test_idx_corrupt(void)
{
    static const struct idx_case cases[] = {
        {"bad magic", {1, 0, 8, 1}, 1, {4}, 4, false,
         "bad magic 0x01000801: its first two bytes must be zero"},
        {"unknown type code", {0, 0, 0x0A, 1}, 1, {4}, 4, false,
         "unknown element type code 0x0a in magic 0x00000a01"},
        {"zero dimensions", {0, 0, 8, 0}, 0, {0}, 4, false,
         "magic 0x00000800 gives 0 dimensions"},
        {"nine dimensions", {0, 0, 8, 9}, 1, {1}, 0, false,
         "gives 9 dimensions; keel reads 1 to 8"},
        {"dims cut short", {0, 0, 8, 3}, 1, {60000}, 0, false,
         "truncated in the dimension sizes: 3 dimensions need 12 bytes"},
        {"data cut short", {0, 0, 8, 2}, 2, {2, 5}, 7, false,
         "truncated: dims [2, 5] of uint8 need 10 bytes of data, the file "
         "has 7"},
        {"trailing data", {0, 0, 8, 1}, 1, {3}, 5, false,
         "2 bytes of trailing data after the 3 bytes that dims [3] of "
         "uint8 describe"},
        {"gz: data cut short", {0, 0, 0x0D, 1}, 1, {4}, 10, true,
         "dims [4] of float32 need 16 bytes of data, the decompressed "
         "stream has 10"},
        {"gz: trailing data", {0, 0, 8, 1}, 1, {3}, 5, true,
         "trailing data after the 3 bytes that dims [3] of uint8"},
        {"gz: lying dims do not allocate", {0, 0, 8, 1}, 1, {400000000}, 10,
         true, "need 400000000 bytes of data, the decompressed stream has "
         "10"},
        {"dims beyond memory", {0, 0, 0x0E, 3}, 3,
         {4000000000u, 4000000000u, 4000000000u}, 0, false,
         "describe more data than this machine can address"},
        /* 0 elements, but the other dims' strides would overflow. */
        {"zero dim beside huge dims", {0, 0, 8, 3}, 3,
         {0, 4000000000u, 4000000000u}, 0, false,
         "dims [0, 4000000000, 4000000000] of uint8 describe more data "
         "than this machine can address"},
    };
    unsigned char payload[64] = {0};
    keel_idx_array a;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct idx_case *c = &cases[i];
        unsigned char file[256];
        size_t len = 4;
        const char *path = tmp_path("bad.idx");
        keel_status st;

        memcpy(file, c->head, 4);
        for (int d = 0; d < c->ndim_written; d++)
            for (int k = 0; k < 4; k++)
                file[len++] = (unsigned char)(c->dims[d] >> (24 - 8 * k));
        memcpy(file + len, payload, c->payload);
        len += c->payload;
        if (c->gz) {
            size_t glen;
            unsigned char *g = gzip_stored(file, len, &glen);

            write_all(path, g, glen);
            free(g);
        } else {
            write_all(path, file, len);
        }
        memset(&a, 0x55, sizeof(a));
        st = keel_idx_load(path, &a);
        if (st != KEEL_STATUS_CORRUPT || !strstr(keel_last_error(), c->part))
            fprintf(stderr, "\n  '%s': got %s '%s', wanted '%s'\n", c->what,
                    keel_status_name(st), keel_last_error(), c->part);
        CU_ASSERT_EQUAL(st, KEEL_STATUS_CORRUPT);
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), c->part));
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), path));
        CU_ASSERT_PTR_NULL(a.data);
    }

    /* Too short for the magic. */
    write_all(tmp_path("short.idx"), "\0\0", 2);
    ERR(keel_idx_load(tmp_path("short.idx"), &a), KEEL_STATUS_CORRUPT,
        "the file holds 2 bytes, too short for the 4-byte magic");
    /* A damaged gzip trailer (CRC) and a gzip stream cut in the middle. */
    {
        uint32_t d[1] = {300};
        unsigned char px[300];
        size_t glen, blen;
        unsigned char *b, *g;

        for (int i = 0; i < 300; i++)
            px[i] = (unsigned char)i;
        b = idx_bytes(0x08, 1, d, px, sizeof(px), &blen);
        g = gzip_stored(b, blen, &glen);
        g[glen - 8] ^= 0xff;
        write_all(tmp_path("crc.gz"), g, glen);
        ERR(keel_idx_load(tmp_path("crc.gz"), &a), KEEL_STATUS_CORRUPT,
            "the gzip stream is damaged");
        g[glen - 8] ^= 0xff;
        write_all(tmp_path("cut.gz"), g, glen / 2);
        ERR(keel_idx_load(tmp_path("cut.gz"), &a), KEEL_STATUS_CORRUPT,
            "damaged near decompressed byte");
        free(g);
        free(b);
    }
    /* A zlib-compressed stream cut in the middle. */
    {
        int64_t d[1] = {5000};
        unsigned char px[5000];
        size_t len;
        unsigned char *g;

        for (int i = 0; i < 5000; i++)
            px[i] = (unsigned char)(i * i);
        OK(keel_idx_save(tmp_path("z.gz"), KEEL_IDX_U8, 1, d, px, true));
        g = read_all(tmp_path("z.gz"), &len);
        write_all(tmp_path("z.gz"), g, len / 2);
        ERR(keel_idx_load(tmp_path("z.gz"), &a), KEEL_STATUS_CORRUPT,
            "damaged");
        free(g);
    }
    ERR(keel_idx_load(tmp_path("missing.idx"), &a), KEEL_STATUS_NOT_FOUND,
        "missing.idx");
    ERR(keel_idx_load(tmpdir, &a), KEEL_STATUS_IO_ERROR,
        "is not a regular file (it is a directory)");
    /* FIFOs, plain and gzip'd names: refused without waiting for a writer
     * (the alarm ends the run if an open blocks). */
    CU_ASSERT_EQUAL_FATAL(mkfifo(tmp_path("fifo-idx1-ubyte"), 0600), 0);
    CU_ASSERT_EQUAL_FATAL(mkfifo(tmp_path("fifo-idx1-ubyte.gz"), 0600), 0);
    alarm(20);
    ERR(keel_idx_load(tmp_path("fifo-idx1-ubyte"), &a), KEEL_STATUS_IO_ERROR,
        "is not a regular file (it is a FIFO");
    ERR(keel_idx_load(tmp_path("fifo-idx1-ubyte.gz"), &a),
        KEEL_STATUS_IO_ERROR, "is not a regular file (it is a FIFO");
    alarm(0);
    unlink(tmp_path("fifo-idx1-ubyte"));
    unlink(tmp_path("fifo-idx1-ubyte.gz"));
    ERR(keel_idx_load(NULL, &a), KEEL_STATUS_INVALID_ARGUMENT,
        "path is NULL");
    {
        int64_t d[1] = {-1};

        ERR(keel_idx_save(tmp_path("x"), KEEL_IDX_U8, 1, d, payload, false),
            KEEL_STATUS_INVALID_ARGUMENT, "dims[0] = -1 is outside");
        ERR(keel_idx_save(tmp_path("x"), (keel_idx_type)3, 1, d, payload,
                          false),
            KEEL_STATUS_INVALID_ARGUMENT, "0x03 is not an IDX type code");
    }
}

/* Small MNIST-shaped files, the names of the distribution. */
static void write_mnist(const char *split, int n, bool gz, int labels_n)
{
    char name[128];
    uint32_t di[3] = {(uint32_t)n, 28, 28}, dl[1] = {(uint32_t)labels_n};
    unsigned char *px = malloc((size_t)n * 784), lab[64];

    for (int i = 0; i < n * 784; i++)
        px[i] = (unsigned char)(i * 7);
    for (int i = 0; i < labels_n; i++)
        lab[i] = (unsigned char)(i % 10);
    snprintf(name, sizeof(name), "%s-images-idx3-ubyte%s", split,
             gz ? ".gz" : "");
    write_idx(tmp_path(name), 0x08, 3, di, px, (size_t)n * 784, gz);
    snprintf(name, sizeof(name), "%s-labels-idx1-ubyte%s", split,
             gz ? ".gz" : "");
    write_idx(tmp_path(name), 0x08, 1, dl, lab, (size_t)labels_n, gz);
    free(px);
}

static void test_mnist(void)
{
    keel_tensor *img, *lab;
    double v;

    write_mnist("train", 5, true, 5);
    OK(keel_mnist_load_dir(tmpdir, "train", "cpu:1", &img, &lab));
    CU_ASSERT_EQUAL(keel_tensor_dtype(img), KEEL_F32);
    CU_ASSERT_EQUAL(keel_tensor_ndim(img), 4);
    CU_ASSERT(keel_tensor_shape(img)[0] == 5 &&
              keel_tensor_shape(img)[1] == 1 &&
              keel_tensor_shape(img)[2] == 28 &&
              keel_tensor_shape(img)[3] == 28);
    CU_ASSERT(on_device(img, "cpu:1") && on_device(lab, "cpu:1"));
    OK(keel_tensor_item(img, 1000, &v));
    CU_ASSERT_DOUBLE_EQUAL(v, (double)(unsigned char)(1000 * 7) / 255.0,
                           1e-7);
    CU_ASSERT_EQUAL(keel_tensor_dtype(lab), KEEL_I64);
    CU_ASSERT_EQUAL(keel_tensor_shape(lab)[0], 5);
    OK(keel_tensor_item(lab, 4, &v));
    CU_ASSERT_EQUAL(v, 4.0);
    keel_tensor_free(img);
    keel_tensor_free(lab);

    /* Plain files under the names without ".gz"; labels only. */
    write_mnist("t10k", 3, false, 3);
    OK(keel_mnist_load_dir(tmpdir, "t10k", NULL, NULL, &lab));
    CU_ASSERT_EQUAL(keel_tensor_numel(lab), 3);
    keel_tensor_free(lab);

    /* Counts that disagree, a wrong rank, a missing split. */
    write_mnist("odd", 5, true, 4);
    ERR(keel_mnist_load_dir(tmpdir, "odd", NULL, &img, &lab),
        KEEL_STATUS_CORRUPT, "has 5 images but");
    CU_ASSERT_PTR_NULL(img);
    CU_ASSERT_PTR_NULL(lab);
    ERR(keel_mnist_load(tmp_path("odd-labels-idx1-ubyte.gz"), NULL, NULL,
                        &img, NULL),
        KEEL_STATUS_CORRUPT, "MNIST images must be uint8 [N, H, W]");
    ERR(keel_mnist_load_dir(tmpdir, "nope", NULL, &img, &lab),
        KEEL_STATUS_NOT_FOUND, "nope-images-idx3-ubyte.gz");
    ERR(keel_mnist_load(NULL, NULL, NULL, NULL, NULL),
        KEEL_STATUS_INVALID_ARGUMENT, "both outputs are NULL");
}

/* Only registered when the Debian package is installed. */
static void test_fashion_mnist_real(void)
{
    keel_tensor *img, *lab;
    int64_t *l, counts[10] = {0};
    double v, lo = 1, hi = 0;

    OK(keel_mnist_load_dir(FASHION_DIR, "train", "cpu:0", &img, &lab));
    CU_ASSERT_EQUAL(keel_tensor_ndim(img), 4);
    CU_ASSERT(keel_tensor_shape(img)[0] == 60000 &&
              keel_tensor_shape(img)[1] == 1 &&
              keel_tensor_shape(img)[2] == 28 &&
              keel_tensor_shape(img)[3] == 28);
    CU_ASSERT_EQUAL(keel_tensor_numel(lab), 60000);
    l = malloc(60000 * sizeof(*l));
    OK(keel_tensor_to_host(lab, l, 60000 * sizeof(*l)));
    for (int i = 0; i < 60000; i++) {
        CU_ASSERT_FATAL(l[i] >= 0 && l[i] <= 9);
        counts[l[i]]++;
    }
    for (int c = 0; c < 10; c++)
        CU_ASSERT_EQUAL(counts[c], 6000); /* the set is balanced */
    for (int64_t i = 0; i < 60000 * 784; i += 7919) {
        OK(keel_tensor_item(img, i, &v));
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    CU_ASSERT(lo >= 0.0 && lo < 0.01 && hi <= 1.0 && hi > 0.99);
    free(l);
    keel_tensor_free(img);
    keel_tensor_free(lab);
}

/* ---- datasets ----------------------------------------------------------- */

/* A dataset of (index as int64 scalar, index * 10 as float32 [2]) with
 * knobs for slowness and failure. */
struct toy {
    int64_t n;
    int64_t fail_at;   /* get fails for this index (-1: never) */
    int64_t odd_shape; /* this index returns a [3] second field (-1) */
    int64_t null_at;   /* this index leaves field 1 NULL (-1) */
    int sleep_us;
    const char *device;
    atomic_int gets;
    atomic_int *destroyed;
};

static int64_t toy_length(void *ctx)
{
    return ((struct toy *)ctx)->n;
}

static keel_status toy_get(void *ctx, int64_t i, keel_tensor **f)
{
    struct toy *t = ctx;
    float v[3] = {(float)i * 10, (float)i * 10 + 1, 0};
    int64_t s[1] = {i == t->odd_shape ? 3 : 2};
    keel_status st;

    atomic_fetch_add(&t->gets, 1);
    if (t->sleep_us) {
        struct timespec ts = {0, t->sleep_us * 1000L};

        nanosleep(&ts, NULL);
    }
    if (i == t->fail_at) {
        keel_clear_error();
        return KEEL_STATUS_IO_ERROR; /* no message: the core adds one */
    }
    st = keel_tensor_from_host(&i, KEEL_I64, 0, NULL, t->device, &f[0]);
    if (st == KEEL_STATUS_OK && i != t->null_at)
        st = keel_tensor_from_host(v, KEEL_F32, 1, s, t->device, &f[1]);
    return st;
}

static void toy_destroy(void *ctx)
{
    struct toy *t = ctx;

    if (t->destroyed)
        atomic_fetch_add(t->destroyed, 1);
    free(t);
}

static keel_dataset *toy_dataset(int64_t n, atomic_int *destroyed,
                                 struct toy **out)
{
    static const keel_dataset_ops ops = {
        .struct_size = sizeof(keel_dataset_ops),
        .length = toy_length,
        .get = toy_get,
        .destroy = toy_destroy,
    };
    struct toy *t = calloc(1, sizeof(*t));
    keel_dataset *ds = NULL;

    t->n = n;
    t->fail_at = t->odd_shape = t->null_at = -1;
    t->device = "cpu:0";
    t->destroyed = destroyed;
    if (keel_dataset_create(&ops, 2, t, &ds)) {
        fprintf(stderr, "\n  toy_dataset: %s\n", keel_last_error());
        free(t);
        return NULL;
    }
    if (out)
        *out = t;
    return ds;
}

static void test_dataset_api(void)
{
    atomic_int destroyed = 0;
    keel_dataset *ds = toy_dataset(4, &destroyed, NULL), *bad;
    keel_tensor *f[KEEL_DATASET_MAX_FIELDS];
    keel_dataset_ops ops = {.struct_size = sizeof(ops)};
    double v;

    CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
    CU_ASSERT_EQUAL(keel_dataset_length(ds), 4);
    CU_ASSERT_EQUAL(keel_dataset_num_fields(ds), 2);
    OK(keel_dataset_get(ds, 3, f));
    OK(keel_tensor_item(f[1], 1, &v));
    CU_ASSERT_EQUAL(v, 31.0);
    keel_tensor_free(f[0]);
    keel_tensor_free(f[1]);
    ERR(keel_dataset_get(ds, 4, f), KEEL_STATUS_INVALID_ARGUMENT,
        "index 4 is outside [0, 4)");
    ERR(keel_dataset_get(ds, -1, f), KEEL_STATUS_INVALID_ARGUMENT,
        "index -1 is outside");
    ERR(keel_dataset_create(&ops, 1, NULL, &bad),
        KEEL_STATUS_INVALID_ARGUMENT, "ops->length is NULL");
    ops.length = toy_length;
    ops.get = toy_get;
    ERR(keel_dataset_create(&ops, 0, NULL, &bad),
        KEEL_STATUS_INVALID_ARGUMENT, "num_fields 0 is outside [1, 8]");
    ops.struct_size = 4;
    ERR(keel_dataset_create(&ops, 1, NULL, &bad),
        KEEL_STATUS_INVALID_ARGUMENT, "struct_size 4 is too small");
    /* References: destroy runs once, with the last one. */
    CU_ASSERT_PTR_EQUAL(keel_dataset_ref(ds), ds);
    keel_dataset_free(ds);
    CU_ASSERT_EQUAL(destroyed, 0);
    keel_dataset_free(ds);
    CU_ASSERT_EQUAL(destroyed, 1);
    keel_dataset_free(NULL);
}

static void test_tensor_dataset(void)
{
    int64_t s32[2] = {3, 2}, s4[1] = {4};
    keel_tensor *x, *y, *xt, *f[2], *ts[2];
    keel_dataset *ds;
    double v;

    OK(keel_arange(0, 6, 1, KEEL_F32, "cpu:0", &x));
    OK(keel_reshape(x, 2, s32, &y));
    keel_tensor_free(x);
    OK(keel_transpose(y, 0, 1, &xt)); /* [2, 3], non-contiguous */
    ts[0] = y;
    ts[1] = xt;
    ERR(keel_tensor_dataset_create(ts, 2, &ds), KEEL_STATUS_INVALID_ARGUMENT,
        "differ in their leading size");
    OK(keel_arange(0, 3, 1, KEEL_I64, "cpu:1", &x));
    ts[1] = x;
    OK(keel_tensor_dataset_create(ts, 2, &ds));
    keel_tensor_free(x);
    CU_ASSERT_EQUAL(keel_dataset_length(ds), 3);
    OK(keel_dataset_get(ds, 2, f));
    CU_ASSERT_EQUAL(keel_tensor_ndim(f[0]), 1);
    CU_ASSERT_EQUAL(keel_tensor_shape(f[0])[0], 2);
    CU_ASSERT(keel_tensor_shares_storage(f[0], y)); /* a view */
    OK(keel_tensor_item(f[0], 1, &v));
    CU_ASSERT_EQUAL(v, 5.0);
    CU_ASSERT_EQUAL(keel_tensor_ndim(f[1]), 0);
    OK(keel_tensor_item(f[1], 0, &v));
    CU_ASSERT_EQUAL(v, 2.0);
    keel_tensor_free(f[0]);
    keel_tensor_free(f[1]);
    /* Rows of the transposed view. */
    keel_dataset_free(ds);
    ts[0] = xt;
    OK(keel_tensor_dataset_create(ts, 1, &ds));
    OK(keel_dataset_get(ds, 1, f));
    OK(keel_tensor_item(f[0], 2, &v));
    CU_ASSERT_EQUAL(v, 5.0);
    keel_tensor_free(f[0]);
    keel_dataset_free(ds);
    OK(keel_zeros(0, s4, KEEL_F32, "cpu:0", &x));
    ts[0] = x;
    ERR(keel_tensor_dataset_create(ts, 1, &ds), KEEL_STATUS_INVALID_ARGUMENT,
        "is a scalar");
    ERR(keel_tensor_dataset_create(ts, 9, &ds), KEEL_STATUS_INVALID_ARGUMENT,
        "9 tensors; expected 1 to 8");
    keel_tensor_free(x);
    keel_tensor_free(xt);
    keel_tensor_free(y);
}

/* ---- the loader --------------------------------------------------------- */

/* A tensor dataset of (i as int64, [i, -i] as float32) for i < n. */
static keel_dataset *index_dataset(int64_t n)
{
    int64_t *idx = malloc((size_t)(n ? n : 1) * sizeof(*idx));
    float *pairs = malloc((size_t)(n ? n : 1) * 2 * sizeof(*pairs));
    int64_t s1[1] = {n}, s2[2] = {n, 2};
    keel_tensor *t[2] = {NULL, NULL};
    keel_dataset *ds = NULL;

    for (int64_t i = 0; i < n; i++) {
        idx[i] = i;
        pairs[2 * i] = (float)i;
        pairs[2 * i + 1] = -(float)i;
    }
    if (!keel_tensor_from_host(idx, KEEL_I64, 1, s1, "cpu:0", &t[0]) &&
        !keel_tensor_from_host(pairs, KEEL_F32, 2, s2, "cpu:0", &t[1]))
        keel_tensor_dataset_create(t, 2, &ds);
    keel_tensor_free(t[0]);
    keel_tensor_free(t[1]);
    free(idx);
    free(pairs);
    return ds;
}

static keel_dataloader *make_loader(keel_dataset *ds, int64_t bs,
                                    bool shuffle, uint64_t seed,
                                    bool drop_last, int prefetch,
                                    const char *device)
{
    keel_dataloader_config cfg;
    keel_dataloader *dl = NULL;

    keel_dataloader_config_init(&cfg);
    cfg.batch_size = bs;
    cfg.shuffle = shuffle;
    cfg.seed = seed;
    cfg.drop_last = drop_last;
    cfg.prefetch = prefetch;
    cfg.device = device;
    if (keel_dataloader_create(ds, &cfg, &dl))
        fprintf(stderr, "\n  make_loader: %s\n", keel_last_error());
    return dl;
}

/* Run one epoch to its end: the sample indices (field 0) in order, the
 * number of batches, and each batch's size. Returns the sample count. */
static int64_t run_epoch(keel_dataloader *dl, int64_t *order,
                         int64_t *nbatches, int64_t *sizes)
{
    int64_t got = 0, nb = 0;

    for (;;) {
        keel_batch b;
        bool end;

        if (!ok_(keel_dataloader_next(dl, &b, &end), "next"))
            return -1;
        if (end) {
            CU_ASSERT_EQUAL(b.num_fields, 0);
            break;
        }
        CU_ASSERT_EQUAL(b.index, nb);
        CU_ASSERT_EQUAL(b.epoch, keel_dataloader_epoch(dl));
        CU_ASSERT_EQUAL(keel_tensor_shape(b.fields[0])[0], b.size);
        if (order)
            keel_tensor_to_host(b.fields[0], order + got,
                                (size_t)b.size * sizeof(int64_t));
        if (sizes)
            sizes[nb] = b.size;
        got += b.size;
        nb++;
        keel_batch_release(&b);
    }
    if (nbatches)
        *nbatches = nb;
    return got;
}

static bool is_permutation(const int64_t *v, int64_t n, int64_t of)
{
    char *seen = calloc((size_t)of + 1, 1);
    bool ok = true;

    for (int64_t i = 0; i < n && ok; i++) {
        ok = v[i] >= 0 && v[i] < of && !seen[v[i]];
        if (ok)
            seen[v[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_loader_sequential(void)
{
    keel_dataset *ds = index_dataset(103);
    keel_dataloader *dl = make_loader(ds, 10, false, 0, false, 2, "cpu:0");
    int64_t order[103], sizes[20], nb;
    keel_batch b;
    bool end;

    CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
    CU_ASSERT_EQUAL(keel_dataloader_num_batches(dl), 11);
    CU_ASSERT_EQUAL(run_epoch(dl, order, &nb, sizes), 103);
    CU_ASSERT_EQUAL(nb, 11);
    for (int i = 0; i < 10; i++)
        CU_ASSERT_EQUAL(sizes[i], 10);
    CU_ASSERT_EQUAL(sizes[10], 3);
    for (int i = 0; i < 103; i++)
        CU_ASSERT_EQUAL(order[i], i);
    /* The call after the end begins epoch 1. */
    OK(keel_dataloader_next(dl, &b, &end));
    CU_ASSERT(!end);
    CU_ASSERT_EQUAL(b.epoch, 1);
    CU_ASSERT_EQUAL(b.index, 0);
    CU_ASSERT_EQUAL(keel_dataloader_epoch(dl), 1);
    keel_batch_release(&b);
    keel_dataloader_free(dl);
    keel_dataset_free(ds);
}

static void test_loader_shuffle_covers(void)
{
    keel_dataset *ds = index_dataset(103);
    keel_dataloader *dl = make_loader(ds, 8, true, 7, false, 3, "cpu:0");
    int64_t order[103], want[103];
    bool identity = true;

    CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
    for (int epoch = 0; epoch < 3; epoch++) {
        CU_ASSERT_EQUAL(run_epoch(dl, order, NULL, NULL), 103);
        CU_ASSERT(is_permutation(order, 103, 103));
        OK(keel_dataloader_epoch_order(dl, (uint64_t)epoch, want, 103));
        CU_ASSERT(!memcmp(order, want, sizeof(order)));
        for (int i = 0; i < 103; i++)
            identity = identity && order[i] == i;
    }
    CU_ASSERT(!identity);
    ERR(keel_dataloader_epoch_order(dl, 0, want, 5),
        KEEL_STATUS_INVALID_ARGUMENT, "room for 5 indices");
    keel_dataloader_free(dl);
    keel_dataset_free(ds);
}

static void test_loader_drop_last(void)
{
    keel_dataset *ds = index_dataset(103);
    keel_dataloader *dl;
    int64_t order[103], sizes[20], nb;

    for (int drop = 0; drop < 2; drop++) {
        dl = make_loader(ds, 10, true, 3, drop, 2, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
        CU_ASSERT_EQUAL(keel_dataloader_num_batches(dl), drop ? 10 : 11);
        CU_ASSERT_EQUAL(run_epoch(dl, order, &nb, sizes), drop ? 100 : 103);
        CU_ASSERT_EQUAL(nb, drop ? 10 : 11);
        CU_ASSERT(is_permutation(order, drop ? 100 : 103, 103));
        for (int64_t i = 0; i < nb; i++)
            CU_ASSERT_EQUAL(sizes[i], i < 10 ? 10 : 3);
        keel_dataloader_free(dl);
    }
    /* Fewer samples than a batch: drop_last gives an empty epoch. */
    dl = make_loader(ds, 200, false, 0, true, 1, NULL);
    CU_ASSERT_EQUAL(keel_dataloader_num_batches(dl), 0);
    CU_ASSERT_EQUAL(run_epoch(dl, NULL, &nb, NULL), 0);
    CU_ASSERT_EQUAL(nb, 0);
    keel_dataloader_free(dl);
    dl = make_loader(ds, 200, false, 0, false, 1, NULL);
    CU_ASSERT_EQUAL(run_epoch(dl, NULL, &nb, sizes), 103);
    CU_ASSERT(nb == 1 && sizes[0] == 103);
    keel_dataloader_free(dl);
    /* An empty dataset: every epoch ends at once. */
    keel_dataset_free(ds);
    ds = index_dataset(0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
    dl = make_loader(ds, 4, true, 0, false, 2, NULL);
    for (int e = 0; e < 2; e++) {
        CU_ASSERT_EQUAL(run_epoch(dl, NULL, &nb, NULL), 0);
        CU_ASSERT_EQUAL(nb, 0);
    }
    keel_dataloader_free(dl);
    /* Exactly divisible: the same either way. */
    keel_dataset_free(ds);
    ds = index_dataset(40);
    for (int drop = 0; drop < 2; drop++) {
        dl = make_loader(ds, 10, false, 0, drop, 2, NULL);
        CU_ASSERT_EQUAL(run_epoch(dl, NULL, &nb, NULL), 40);
        CU_ASSERT_EQUAL(nb, 4);
        keel_dataloader_free(dl);
    }
    keel_dataset_free(ds);
}

static void test_loader_determinism(void)
{
    keel_dataset *ds = index_dataset(64);
    keel_dataloader *a = make_loader(ds, 5, true, 42, false, 2, NULL);
    keel_dataloader *b = make_loader(ds, 7, true, 42, false, 0, NULL);
    keel_dataloader *c = make_loader(ds, 5, true, 43, false, 8, NULL);
    int64_t a0[64], a1[64], b0[64], b1[64], c0[64], again[64];

    CU_ASSERT_FATAL(a && b && c);
    /* Same seed: same order, whatever the batch size or prefetch. */
    run_epoch(a, a0, NULL, NULL);
    run_epoch(a, a1, NULL, NULL);
    run_epoch(b, b0, NULL, NULL);
    run_epoch(b, b1, NULL, NULL);
    run_epoch(c, c0, NULL, NULL);
    CU_ASSERT(!memcmp(a0, b0, sizeof(a0)));
    CU_ASSERT(!memcmp(a1, b1, sizeof(a1)));
    /* A new epoch, or another seed: another order. */
    CU_ASSERT(memcmp(a0, a1, sizeof(a0)) != 0);
    CU_ASSERT(memcmp(a0, c0, sizeof(a0)) != 0);
    CU_ASSERT(is_permutation(a1, 64, 64) && is_permutation(c0, 64, 64));
    /* set_epoch replays an epoch exactly. */
    OK(keel_dataloader_set_epoch(c, 1));
    keel_dataloader_free(c);
    c = make_loader(ds, 5, true, 42, false, 2, NULL);
    OK(keel_dataloader_set_epoch(c, 1));
    CU_ASSERT_EQUAL(keel_dataloader_epoch(c), 1);
    run_epoch(c, again, NULL, NULL);
    CU_ASSERT(!memcmp(again, a1, sizeof(a1)));
    OK(keel_dataloader_set_epoch(c, 0));
    run_epoch(c, again, NULL, NULL);
    CU_ASSERT(!memcmp(again, a0, sizeof(a0)));
    keel_dataloader_free(a);
    keel_dataloader_free(b);
    keel_dataloader_free(c);
    keel_dataset_free(ds);
}

static void test_loader_reset_mid_epoch(void)
{
    keel_dataset *ds = index_dataset(50);
    keel_dataloader *dl = make_loader(ds, 4, true, 9, false, 4, "cpu:1");
    int64_t order[50], want[50];
    keel_batch b;
    bool end;

    CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
    for (int i = 0; i < 3; i++) {
        OK(keel_dataloader_next(dl, &b, &end));
        CU_ASSERT(!end && b.index == i);
        keel_batch_release(&b);
    }
    OK(keel_dataloader_reset(dl));
    CU_ASSERT_EQUAL(keel_dataloader_epoch(dl), 1);
    CU_ASSERT_EQUAL(run_epoch(dl, order, NULL, NULL), 50);
    OK(keel_dataloader_epoch_order(dl, 1, want, 50));
    CU_ASSERT(!memcmp(order, want, sizeof(order)));
    /* set_epoch in the middle, too. */
    OK(keel_dataloader_next(dl, &b, &end)); /* begins epoch 2 */
    CU_ASSERT_EQUAL(b.epoch, 2);
    keel_batch_release(&b);
    OK(keel_dataloader_set_epoch(dl, 7));
    CU_ASSERT_EQUAL(run_epoch(dl, order, NULL, NULL), 50);
    OK(keel_dataloader_epoch_order(dl, 7, want, 50));
    CU_ASSERT(!memcmp(order, want, sizeof(order)));
    keel_dataloader_free(dl);
    keel_dataset_free(ds);
}

/* Tear down while the prefetch thread is busy in a slow dataset. */
static void test_loader_destroy_mid_epoch(void)
{
    atomic_int destroyed = 0;
    struct toy *t;
    keel_dataset *ds = toy_dataset(200, &destroyed, &t);
    keel_dataloader *dl;
    keel_batch b;
    bool end;

    CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
    t->sleep_us = 2000;
    /* Freed at once, before any batch was taken. */
    dl = make_loader(ds, 4, true, 1, false, 4, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
    keel_dataloader_free(dl);
    /* Freed after one batch, with more in flight. */
    dl = make_loader(ds, 4, true, 1, false, 4, NULL);
    OK(keel_dataloader_next(dl, &b, &end));
    CU_ASSERT(!end && b.size == 4);
    keel_batch_release(&b);
    keel_dataloader_free(dl);
    /* The prefetch thread read ahead but stopped well before the end. */
    CU_ASSERT(atomic_load(&t->gets) < 200);
    CU_ASSERT_EQUAL(destroyed, 0); /* the loaders held references */
    keel_dataset_free(ds);
    CU_ASSERT_EQUAL(destroyed, 1);
    keel_dataloader_free(NULL);
}

static void test_loader_prefetch_variants(void)
{
    keel_dataset *ds = index_dataset(37);
    int64_t ref[37], got[37];

    for (int p = 0; p <= 8; p += (p < 2 ? 1 : 3)) {
        keel_dataloader *dl = make_loader(ds, 3, true, 5, false, p, NULL);

        CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
        CU_ASSERT_EQUAL(run_epoch(dl, p ? got : ref, NULL, NULL), 37);
        if (p)
            CU_ASSERT(!memcmp(ref, got, sizeof(ref)));
        keel_dataloader_free(dl);
    }
    keel_dataset_free(ds);
}

/* Batches are stacked samples, on the loader's device. */
static void test_loader_collation(void)
{
    static const char *devices[2] = {"cpu:0", "cpu:1"};
    int64_t n = 10, simg[4] = {10, 1, 4, 4}, slab[1] = {10};
    float px[160];
    int64_t lab[10];
    keel_tensor *t[2];
    keel_dataset *ds;

    for (int i = 0; i < 160; i++)
        px[i] = (float)i * 0.5f;
    for (int i = 0; i < 10; i++)
        lab[i] = 100 + i;
    OK(keel_tensor_from_host(px, KEEL_F32, 4, simg, "cpu:0", &t[0]));
    OK(keel_tensor_from_host(lab, KEEL_I64, 1, slab, "cpu:0", &t[1]));
    OK(keel_tensor_dataset_create(t, 2, &ds));
    keel_tensor_free(t[0]);
    keel_tensor_free(t[1]);
    for (int d = 0; d < 2; d++) {
        keel_dataloader *dl = make_loader(ds, 4, true, 11, false, 2,
                                          devices[d]);
        int64_t seen = 0;

        for (;;) {
            keel_batch b;
            bool end;
            float bpx[64];
            int64_t blab[4];
            const int64_t *s;

            OK(keel_dataloader_next(dl, &b, &end));
            if (end)
                break;
            CU_ASSERT_EQUAL(b.num_fields, 2);
            s = keel_tensor_shape(b.fields[0]);
            CU_ASSERT_EQUAL(keel_tensor_ndim(b.fields[0]), 4);
            CU_ASSERT(s[0] == b.size && s[1] == 1 && s[2] == 4 && s[3] == 4);
            CU_ASSERT_EQUAL(keel_tensor_dtype(b.fields[0]), KEEL_F32);
            CU_ASSERT_EQUAL(keel_tensor_ndim(b.fields[1]), 1);
            CU_ASSERT_EQUAL(keel_tensor_dtype(b.fields[1]), KEEL_I64);
            CU_ASSERT(on_device(b.fields[0], devices[d]));
            CU_ASSERT(on_device(b.fields[1], devices[d]));
            CU_ASSERT(keel_tensor_is_contiguous(b.fields[0]));
            OK(keel_tensor_to_host(b.fields[0], bpx,
                                   (size_t)b.size * 16 * sizeof(float)));
            OK(keel_tensor_to_host(b.fields[1], blab,
                                   (size_t)b.size * sizeof(int64_t)));
            for (int64_t i = 0; i < b.size; i++) {
                int64_t sample = blab[i] - 100;

                CU_ASSERT_FATAL(sample >= 0 && sample < n);
                CU_ASSERT(!memcmp(bpx + i * 16, px + sample * 16,
                                  16 * sizeof(float)));
            }
            seen += b.size;
            keel_batch_release(&b);
        }
        CU_ASSERT_EQUAL(seen, n);
        keel_dataloader_free(dl);
    }
    keel_dataset_free(ds);

    /* Samples made on cpu:1, batches wanted on cpu:0. */
    {
        struct toy *toy;
        keel_dataloader *dl;
        keel_batch b;
        bool end;
        double v;

        ds = toy_dataset(6, NULL, &toy);
        toy->device = "cpu:1";
        dl = make_loader(ds, 6, false, 0, false, 1, "cpu:0");
        OK(keel_dataloader_next(dl, &b, &end));
        CU_ASSERT(on_device(b.fields[0], "cpu:0"));
        CU_ASSERT_EQUAL(keel_tensor_ndim(b.fields[0]), 1); /* scalars -> [6] */
        CU_ASSERT_EQUAL(keel_tensor_shape(b.fields[1])[1], 2);
        OK(keel_tensor_item(b.fields[1], 11, &v));
        CU_ASSERT_EQUAL(v, 51.0);
        keel_batch_release(&b);
        keel_dataloader_free(dl);
        keel_dataset_free(ds);
    }
}

/* A failing sample comes back as an error naming it; the loader goes on. */
static void test_loader_errors(void)
{
    struct toy *toy;
    keel_dataset *ds = toy_dataset(12, NULL, &toy);
    keel_dataloader *dl;
    keel_dataloader_config cfg;
    keel_batch b;
    bool end;
    int64_t nb = 0;

    toy->fail_at = 7;
    for (int p = 0; p < 2; p++) {
        int errors = 0;

        dl = make_loader(ds, 4, false, 0, false, p ? 2 : 0, NULL);
        nb = 0;
        for (;;) {
            keel_status st = keel_dataloader_next(dl, &b, &end);

            if (st != KEEL_STATUS_OK) {
                CU_ASSERT_EQUAL(st, KEEL_STATUS_IO_ERROR);
                CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(),
                                              "sample 7 (batch 1 of epoch "
                                              "0)"));
                CU_ASSERT_PTR_NULL(b.fields[0]);
                errors++;
                continue;
            }
            if (end)
                break;
            nb++;
            keel_batch_release(&b);
        }
        CU_ASSERT_EQUAL(errors, 1);
        CU_ASSERT_EQUAL(nb, 2); /* batches 0 and 2 */
        keel_dataloader_free(dl);
    }
    toy->fail_at = -1;
    toy->odd_shape = 2;
    dl = make_loader(ds, 4, false, 0, false, 2, NULL);
    ERR(keel_dataloader_next(dl, &b, &end), KEEL_STATUS_INVALID_ARGUMENT,
        "collate: field 1 of batch sample 2 is float32[3] but sample 0 is "
        "float32[2]");
    keel_dataloader_free(dl);
    toy->odd_shape = -1;
    toy->null_at = 0;
    dl = make_loader(ds, 4, false, 0, false, 0, NULL);
    ERR(keel_dataloader_next(dl, &b, &end), KEEL_STATUS_INTERNAL,
        "left field 1 NULL");
    keel_dataloader_free(dl);

    /* Configuration errors. */
    keel_dataloader_config_init(&cfg);
    cfg.batch_size = 0;
    ERR(keel_dataloader_create(ds, &cfg, &dl), KEEL_STATUS_INVALID_ARGUMENT,
        "batch_size 0 must be at least 1");
    cfg.batch_size = 2;
    cfg.prefetch = 65;
    ERR(keel_dataloader_create(ds, &cfg, &dl), KEEL_STATUS_INVALID_ARGUMENT,
        "prefetch 65 is outside [0, 64]");
    cfg.prefetch = 1;
    cfg.device = "cpu:9";
    CU_ASSERT_NOT_EQUAL(keel_dataloader_create(ds, &cfg, &dl),
                        KEEL_STATUS_OK);
    CU_ASSERT_PTR_NULL(dl);
    cfg.device = NULL;
    cfg.struct_size = 3;
    ERR(keel_dataloader_create(ds, &cfg, &dl), KEEL_STATUS_INVALID_ARGUMENT,
        "struct_size 3 is wrong");
    ERR(keel_dataloader_create(NULL, &cfg, &dl), KEEL_STATUS_INVALID_ARGUMENT,
        "dataset is NULL");
    ERR(keel_dataloader_next(NULL, &b, &end), KEEL_STATUS_INVALID_ARGUMENT,
        "loader is NULL");
    keel_dataset_free(ds);
}

/* ---- sharding across ranks ---------------------------------------------- */

/* A loader for rank `rank` of `replicas`. */
static keel_dataloader *shard_loader(keel_dataset *ds, int64_t bs,
                                     bool shuffle, uint64_t seed,
                                     bool drop_last, int32_t replicas,
                                     int32_t rank, int prefetch)
{
    keel_dataloader_config cfg;
    keel_dataloader *dl = NULL;

    keel_dataloader_config_init(&cfg);
    cfg.batch_size = bs;
    cfg.shuffle = shuffle;
    cfg.seed = seed;
    cfg.drop_last = drop_last;
    cfg.prefetch = prefetch;
    cfg.num_replicas = replicas;
    cfg.rank = rank;
    if (keel_dataloader_create(ds, &cfg, &dl))
        fprintf(stderr, "\n  shard_loader: %s\n", keel_last_error());
    return dl;
}

/* The single-replica order as docs/data.md writes it, computed here again
 * from Philox so that the library is not its own witness: 0 .. n-1, then
 * (with shuffle) Fisher-Yates from the top, j = 64 Philox bits of
 * counter (i, epoch) under key seed, mod i + 1. */
static void documented_order(bool shuffle, uint64_t seed, uint64_t epoch,
                             int64_t *order, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    for (int64_t i = n - 1; shuffle && i > 0; i--) {
        uint32_t c[4] = {(uint32_t)i, (uint32_t)((uint64_t)i >> 32),
                         (uint32_t)epoch, (uint32_t)(epoch >> 32)};
        uint64_t r;
        int64_t j, t;

        keel_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
        r = (uint64_t)c[1] << 32 | c[0];
        j = (int64_t)(r % (uint64_t)(i + 1));
        t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* Paddle's padded epoch: 0 .. n-1 followed by 0, 1, ... up to `total`
 * entries, shuffled by the permutation of length `total`. */
static void padded_order(bool shuffle, uint64_t seed, uint64_t epoch,
                         int64_t n, int64_t total, int64_t *out)
{
    documented_order(shuffle, seed, epoch, out, total);
    for (int64_t j = 0; j < total; j++)
        out[j] %= n;
}

/* (a) One replica — by default, explicitly, as 0, or through a config of
 * the size older callers pass — serves what loaders always served. */
static void test_shard_one_replica(void)
{
    enum { N = 67 };
    keel_dataset *ds = index_dataset(N);
    int64_t want[N], got[N], ran[N];

    CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        for (int how = 0; how < 5; how++) {
            keel_dataloader_config cfg;
            keel_dataloader *dl = NULL;

            keel_dataloader_config_init(&cfg);
            CU_ASSERT_EQUAL(cfg.num_replicas, 1);
            CU_ASSERT_EQUAL(cfg.rank, 0);
            cfg.batch_size = 4;
            cfg.shuffle = shuffle;
            cfg.seed = 21;
            cfg.prefetch = how % 2 ? 0 : 2;
            if (how == 1) {
                cfg.num_replicas = 0; /* a zeroed field means 1 */
            } else if (how == 2) {
                cfg.num_replicas = 1;
            } else {
                /* The config as it was before num_replicas and rank: what
                 * lies past its end is not read. Its sizeof (how 4) took
                 * in the tail padding where num_replicas now lives. */
                cfg.struct_size = how == 3 ?
                    (uint32_t)offsetof(keel_dataloader_config,
                                       num_replicas) :
                    (uint32_t)offsetof(keel_dataloader_config, rank);
                cfg.num_replicas = 5;
                cfg.rank = 4;
            }
            OK(keel_dataloader_create(ds, &cfg, &dl));
            CU_ASSERT_EQUAL(keel_dataloader_num_batches(dl), 17);
            for (uint64_t e = 0; e < 3; e++) {
                documented_order(shuffle, 21, e, want, N);
                OK(keel_dataloader_rank_order(dl, e, got, N));
                CU_ASSERT(!memcmp(got, want, sizeof(want)));
                OK(keel_dataloader_epoch_order(dl, e, got, N));
                CU_ASSERT(!memcmp(got, want, sizeof(want)));
                CU_ASSERT_EQUAL(run_epoch(dl, ran, NULL, NULL), N);
                CU_ASSERT(!memcmp(ran, want, sizeof(want)));
            }
            keel_dataloader_free(dl);
        }
    }
    keel_dataset_free(ds);
}

/* Every rank's order for one configuration: orders[r][0 .. per_rank). */
static bool rank_orders(keel_dataset *ds, int64_t bs, bool shuffle,
                        int32_t replicas, uint64_t epoch, int64_t per_rank,
                        int64_t **orders)
{
    bool good = true;

    for (int32_t r = 0; r < replicas; r++) {
        keel_dataloader *dl = shard_loader(ds, bs, shuffle, 99, false,
                                           replicas, r, 0);

        orders[r] = malloc((size_t)per_rank * sizeof(int64_t));
        if (!dl || !orders[r]) {
            keel_dataloader_free(dl);
            return false;
        }
        good = good && ok_(keel_dataloader_rank_order(dl, epoch, orders[r],
                                                      per_rank),
                           "rank_order");
        /* Exactly per_rank samples: one less does not fit. */
        good = good && keel_dataloader_rank_order(dl, epoch, orders[r],
                                                  per_rank - 1) ==
                           KEEL_STATUS_INVALID_ARGUMENT;
        good = good && keel_dataloader_num_batches(dl) ==
                           (per_rank + bs - 1) / bs;
        keel_dataloader_free(dl);
    }
    return good;
}

/* Calls check(...) for every configuration of (b) and (d). */
typedef void (*shard_check)(int64_t n, int64_t bs, int32_t replicas,
                            int64_t per_rank, const int64_t *padded,
                            int64_t *const *orders);

static void shard_grid(shard_check check)
{
    static const int64_t ns[] = {10, 11, 64, 67}, bss[] = {1, 3, 4};
    static const int32_t reps[] = {2, 3};

    for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++) {
        int64_t n = ns[a];
        keel_dataset *ds = index_dataset(n);

        CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
        for (size_t b = 0; b < sizeof(bss) / sizeof(bss[0]); b++)
            for (size_t c = 0; c < sizeof(reps) / sizeof(reps[0]); c++)
                for (int shuffle = 0; shuffle < 2; shuffle++)
                    for (uint64_t epoch = 0; epoch < 4; epoch += 3) {
                        int32_t rp = reps[c];
                        int64_t per_rank = (n + rp - 1) / rp;
                        int64_t total = per_rank * rp;
                        int64_t *padded = malloc((size_t)total * 8);
                        int64_t *orders[3] = {NULL, NULL, NULL};

                        CU_ASSERT_FATAL(padded != NULL);
                        padded_order(shuffle, 99, epoch, n, total, padded);
                        CU_ASSERT(rank_orders(ds, bss[b], shuffle, rp, epoch,
                                              per_rank, orders));
                        if (orders[rp - 1])
                            check(n, bss[b], rp, per_rank, padded, orders);
                        for (int r = 0; r < 3; r++)
                            free(orders[r]);
                        free(padded);
                    }
        keel_dataset_free(ds);
    }
}

/* (b): the ranks together hold the padded list as a multiset — each
 * sample once, the first total - n twice — and nothing else. */
static void check_cover(int64_t n, int64_t bs, int32_t replicas,
                        int64_t per_rank, const int64_t *padded,
                        int64_t *const *orders)
{
    int64_t total = per_rank * replicas, *count = calloc((size_t)n, 8);
    bool good = true;

    (void)bs;
    (void)padded;
    CU_ASSERT_FATAL(count != NULL);
    for (int32_t r = 0; r < replicas; r++)
        for (int64_t i = 0; i < per_rank; i++) {
            int64_t s = orders[r][i];

            if (s < 0 || s >= n)
                good = false;
            else
                count[s]++;
        }
    for (int64_t s = 0; s < n; s++)
        good = good && count[s] == (s < total - n ? 2 : 1);
    if (!good)
        fprintf(stderr, "\n  cover: n %lld bs %lld replicas %d\n",
                (long long)n, (long long)bs, (int)replicas);
    CU_ASSERT(good);
    free(count);
}

static void test_shard_covers_padded_list(void)
{
    shard_grid(check_cover);
}

/* (d): step k of data-parallel training — rank 0's batch k, rank 1's
 * batch k, ... side by side — is the slice [k*B*R, (k+1)*B*R) of the
 * padded epoch; the short last batches together are its tail. */
static void check_steps(int64_t n, int64_t bs, int32_t replicas,
                        int64_t per_rank, const int64_t *padded,
                        int64_t *const *orders)
{
    int64_t full = per_rank / bs, last = per_rank % bs, at = 0;
    bool good = true;

    for (int64_t k = 0; k < full; k++)
        for (int32_t r = 0; r < replicas; r++) {
            CU_ASSERT_EQUAL(at, k * bs * replicas + r * bs);
            good = good && !memcmp(orders[r] + k * bs, padded + at,
                                   (size_t)bs * 8);
            at += bs;
        }
    for (int32_t r = 0; r < replicas; r++) {
        good = good && !memcmp(orders[r] + full * bs, padded + at,
                               (size_t)last * 8);
        at += last;
    }
    CU_ASSERT_EQUAL(at, per_rank * replicas);
    if (!good)
        fprintf(stderr, "\n  steps: n %lld bs %lld replicas %d\n",
                (long long)n, (long long)bs, (int)replicas);
    CU_ASSERT(good);
}

static void test_shard_steps_interleave(void)
{
    shard_grid(check_steps);
}

/* (c) Worked by hand from Paddle's algorithm, without the library.
 *
 * n = 10, num_replicas = 3, batch_size = 2, no shuffle:
 *   num_samples = ceil(10 / 3) = 4, total_size = 4 * 3 = 12;
 *   padded = 0 1 2 3 4 5 6 7 8 9 | 0 1 (the first 12 - 10 = 2 again);
 *   last_batch_size = 12 % (2 * 3) = 0, last_local = 0;
 *   rank r reads [i, i+2) for i = 2r, 2r + 6 (while i < 12):
 *     rank 0: i = 0, 6  -> 0 1 6 7
 *     rank 1: i = 2, 8  -> 2 3 8 9
 *     rank 2: i = 4, 10 -> 4 5 0 1
 *   and each rank has 2 batches of 2.
 *
 * n = 7, num_replicas = 2, batch_size = 3, no shuffle:
 *   num_samples = ceil(7 / 2) = 4, total_size = 8;
 *   padded = 0 1 2 3 4 5 6 | 0;
 *   last_batch_size = 8 % (3 * 2) = 2, last_local = 2 / 2 = 1;
 *   rank r reads [i, i+3) for i = 3r while i < 8 - 2 = 6 (step 6):
 *     rank 0: i = 0 -> 0 1 2;  rank 1: i = 3 -> 3 4 5;
 *   then the tail padded[6 .. 8) = 6 0, one each:
 *     rank 0: + [0, 1) of it -> 6;  rank 1: + [1, 2) of it -> 0;
 *   so rank 0 = 0 1 2 6 and rank 1 = 3 4 5 0: batches [0 1 2] [6] and
 *   [3 4 5] [0]; with drop_last only [0 1 2] and [3 4 5].
 *
 * num_replicas = 1 << 20, batch_size 1, n = 10: num_samples = 1 and the
 * last rank, 1048575, reads padded[1048575] = 1048575 mod 10 = 5. */
static void test_shard_by_hand(void)
{
    static const int64_t ten[3][4] = {{0, 1, 6, 7}, {2, 3, 8, 9},
                                      {4, 5, 0, 1}};
    static const int64_t seven[2][4] = {{0, 1, 2, 6}, {3, 4, 5, 0}};
    keel_dataset *ds = index_dataset(10);
    int64_t got[4], ran[4], sizes[4], nb;

    CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
    for (int32_t r = 0; r < 3; r++) {
        keel_dataloader *dl = shard_loader(ds, 2, false, 0, false, 3, r, 2);

        CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
        OK(keel_dataloader_rank_order(dl, 0, got, 4));
        CU_ASSERT(!memcmp(got, ten[r], sizeof(got)));
        CU_ASSERT_EQUAL(keel_dataloader_num_batches(dl), 2);
        CU_ASSERT_EQUAL(run_epoch(dl, ran, &nb, sizes), 4);
        CU_ASSERT(nb == 2 && sizes[0] == 2 && sizes[1] == 2);
        CU_ASSERT(!memcmp(ran, ten[r], sizeof(ran)));
        keel_dataloader_free(dl);
    }
    keel_dataset_free(ds);

    ds = index_dataset(7);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
    for (int32_t r = 0; r < 2; r++)
        for (int drop = 0; drop < 2; drop++) {
            keel_dataloader *dl = shard_loader(ds, 3, false, 0, drop, 2, r,
                                               drop ? 0 : 1);

            CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
            OK(keel_dataloader_rank_order(dl, 0, got, 4));
            CU_ASSERT(!memcmp(got, seven[r], sizeof(got)));
            CU_ASSERT_EQUAL(keel_dataloader_num_batches(dl), drop ? 1 : 2);
            CU_ASSERT_EQUAL(run_epoch(dl, ran, &nb, sizes), drop ? 3 : 4);
            CU_ASSERT_EQUAL(nb, drop ? 1 : 2);
            CU_ASSERT_EQUAL(sizes[0], 3);
            if (!drop)
                CU_ASSERT_EQUAL(sizes[1], 1);
            CU_ASSERT(!memcmp(ran, seven[r], (size_t)(drop ? 3 : 4) * 8));
            keel_dataloader_free(dl);
        }
    keel_dataset_free(ds);

    ds = index_dataset(10);
    {
        keel_dataloader *dl = shard_loader(ds, 1, false, 0, false, 1 << 20,
                                           (1 << 20) - 1, 0);

        CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
        OK(keel_dataloader_rank_order(dl, 0, got, 1));
        CU_ASSERT_EQUAL(got[0], 5);
        CU_ASSERT_EQUAL(keel_dataloader_num_batches(dl), 1);
        keel_dataloader_free(dl);
    }
    keel_dataset_free(ds);
}

/* (e) Bad values are refused with messages that name them. */
static void test_shard_errors(void)
{
    keel_dataset *ds = index_dataset(10);
    keel_dataset *huge = toy_dataset(INT64_MAX - 5, NULL, NULL);
    keel_dataloader_config cfg;
    keel_dataloader *dl = NULL;
    int64_t order[4];

    CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
    CU_ASSERT_PTR_NOT_NULL_FATAL(huge);
    keel_dataloader_config_init(&cfg);
    cfg.prefetch = 0;
    cfg.num_replicas = -1;
    ERR(keel_dataloader_create(ds, &cfg, &dl), KEEL_STATUS_INVALID_ARGUMENT,
        "num_replicas -1 is outside [1, 1048576]");
    CU_ASSERT_PTR_NULL(dl);
    cfg.num_replicas = (1 << 20) + 1;
    ERR(keel_dataloader_create(ds, &cfg, &dl), KEEL_STATUS_INVALID_ARGUMENT,
        "num_replicas 1048577 is outside [1, 1048576]");
    cfg.num_replicas = INT32_MIN;
    ERR(keel_dataloader_create(ds, &cfg, &dl), KEEL_STATUS_INVALID_ARGUMENT,
        "num_replicas -2147483648 is outside");
    cfg.num_replicas = 3;
    cfg.rank = 3;
    ERR(keel_dataloader_create(ds, &cfg, &dl), KEEL_STATUS_INVALID_ARGUMENT,
        "rank 3 is outside [0, 3) for num_replicas 3");
    cfg.rank = -1;
    ERR(keel_dataloader_create(ds, &cfg, &dl), KEEL_STATUS_INVALID_ARGUMENT,
        "rank -1 is outside [0, 3)");
    cfg.num_replicas = 0; /* means 1, so only rank 0 exists */
    cfg.rank = 1;
    ERR(keel_dataloader_create(ds, &cfg, &dl), KEEL_STATUS_INVALID_ARGUMENT,
        "rank 1 is outside [0, 1) for num_replicas 1");
    CU_ASSERT_PTR_NULL(dl);

    /* Padding a near-2^63 dataset to a multiple of 16 overflows; a 2^62
     * one on one rank cannot be indexed in memory. */
    cfg.num_replicas = 16;
    cfg.rank = 0;
    ERR(keel_dataloader_create(huge, &cfg, &dl), KEEL_STATUS_INVALID_ARGUMENT,
        "for 16 replicas need more indices than this machine can address");
    CU_ASSERT_PTR_NULL(dl);
    keel_dataset_free(huge);
    huge = toy_dataset((int64_t)1 << 62, NULL, NULL);
    cfg.num_replicas = 1;
    ERR(keel_dataloader_create(huge, &cfg, &dl), KEEL_STATUS_INVALID_ARGUMENT,
        "more indices than this machine can address");
    keel_dataset_free(huge);

    /* rank_order's arguments. */
    cfg.num_replicas = 3;
    cfg.rank = 2;
    OK(keel_dataloader_create(ds, &cfg, &dl));
    ERR(keel_dataloader_rank_order(dl, 0, order, 3),
        KEEL_STATUS_INVALID_ARGUMENT,
        "room for 3 indices, rank 2 of 3 has 4 samples");
    ERR(keel_dataloader_rank_order(dl, 0, NULL, 4),
        KEEL_STATUS_INVALID_ARGUMENT, "order is NULL");
    ERR(keel_dataloader_rank_order(NULL, 0, order, 4),
        KEEL_STATUS_INVALID_ARGUMENT, "loader is NULL");
    OK(keel_dataloader_rank_order(dl, 0, order, 4));
    keel_dataloader_free(dl);
    keel_dataset_free(ds);
}

/* (f) The batches carry the samples rank_order names, epoch after epoch,
 * through reset and set_epoch, with and without the prefetch thread. */
static void test_shard_batches_follow_rank_order(void)
{
    enum { N = 67, S = 23 }; /* S = ceil(67 / 3) */
    keel_dataset *ds = index_dataset(N);
    int64_t want[S], got[S], sizes[8], nb;

    CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
    for (int32_t r = 0; r < 3; r++)
        for (int drop = 0; drop < 2; drop++) {
            keel_dataloader *dl = shard_loader(ds, 4, true, 5, drop, 3, r,
                                               drop ? 3 : 0);
            int64_t len = drop ? 20 : S;

            CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
            CU_ASSERT_EQUAL(keel_dataloader_num_batches(dl), drop ? 5 : 6);
            for (uint64_t e = 0; e < 2; e++) {
                OK(keel_dataloader_rank_order(dl, e, want, S));
                CU_ASSERT_EQUAL(run_epoch(dl, got, &nb, sizes), len);
                CU_ASSERT_EQUAL(nb, drop ? 5 : 6);
                for (int64_t i = 0; i < nb; i++)
                    CU_ASSERT_EQUAL(sizes[i], i < 5 ? 4 : 3);
                CU_ASSERT(!memcmp(got, want, (size_t)len * 8));
            }
            /* The next call begins epoch 2; reset abandons it for 3. */
            {
                keel_batch b;
                bool end;

                OK(keel_dataloader_next(dl, &b, &end));
                CU_ASSERT(!end && b.epoch == 2);
                keel_batch_release(&b);
            }
            OK(keel_dataloader_reset(dl));
            OK(keel_dataloader_rank_order(dl, 3, want, S));
            CU_ASSERT_EQUAL(run_epoch(dl, got, NULL, NULL), len);
            CU_ASSERT(!memcmp(got, want, (size_t)len * 8));
            OK(keel_dataloader_set_epoch(dl, 11));
            OK(keel_dataloader_rank_order(dl, 11, want, S));
            CU_ASSERT_EQUAL(run_epoch(dl, got, NULL, NULL), len);
            CU_ASSERT(!memcmp(got, want, (size_t)len * 8));
            keel_dataloader_free(dl);
        }
    keel_dataset_free(ds);
}

/* An MNIST-style pipeline end to end: files -> tensors -> loader. */
static void test_mnist_pipeline(void)
{
    keel_tensor *t[2];
    keel_dataset *ds;
    keel_dataloader *dl;
    int64_t nb;

    write_mnist("pipe", 50, true, 50);
    OK(keel_mnist_load_dir(tmpdir, "pipe", "cpu:0", &t[0], &t[1]));
    OK(keel_tensor_dataset_create(t, 2, &ds));
    keel_tensor_free(t[0]);
    keel_tensor_free(t[1]);
    dl = make_loader(ds, 16, true, 1, true, 2, "cpu:1");
    CU_ASSERT_EQUAL(run_epoch(dl, NULL, &nb, NULL), 48);
    CU_ASSERT_EQUAL(nb, 3);
    keel_dataloader_free(dl);
    keel_dataset_free(ds);
}

/* ---- main --------------------------------------------------------------- */

static int suite_init(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/keel-test-data-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : 1;
}

static int suite_clean(void)
{
    DIR *d = opendir(tmpdir);
    struct dirent *e;

    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            unlink(tmp_path(e->d_name));
    if (d)
        closedir(d);
    return rmdir(tmpdir) ? 1 : 0;
}

int main(void)
{
    static const struct {
        const char *name;
        CU_TestFunc fn;
    } tests[] = {
        {"idx: round trip, every type, gzip and plain", test_idx_round_trip},
        {"idx: hand-made files and our own gzip", test_idx_handmade},
        {"idx: corrupt files", test_idx_corrupt},
        {"mnist: load and validate", test_mnist},
        {"dataset: api and references", test_dataset_api},
        {"dataset: tensor rows", test_tensor_dataset},
        {"loader: sequential batches and epochs", test_loader_sequential},
        {"loader: shuffle covers each sample once", test_loader_shuffle_covers},
        {"loader: drop_last both ways", test_loader_drop_last},
        {"loader: shuffle is deterministic", test_loader_determinism},
        {"loader: reset and set_epoch mid-epoch", test_loader_reset_mid_epoch},
        {"loader: destroy mid-epoch", test_loader_destroy_mid_epoch},
        {"loader: prefetch depth does not matter",
         test_loader_prefetch_variants},
        {"loader: collation shapes and devices", test_loader_collation},
        {"loader: errors", test_loader_errors},
        {"shard: one replica serves the old order",
         test_shard_one_replica},
        {"shard: ranks cover the padded epoch", test_shard_covers_padded_list},
        {"shard: ranks' batches interleave into the epoch",
         test_shard_steps_interleave},
        {"shard: worked examples", test_shard_by_hand},
        {"shard: bad values", test_shard_errors},
        {"shard: batches follow rank_order",
         test_shard_batches_follow_rank_order},
        {"mnist files through a loader", test_mnist_pipeline},
    };
    CU_pSuite suite;
    struct stat sb;
    unsigned failed;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    suite = CU_add_suite("data", suite_init, suite_clean);
    for (size_t i = 0; suite && i < sizeof(tests) / sizeof(tests[0]); i++)
        CU_add_test(suite, tests[i].name, tests[i].fn);
    if (suite && !stat(FASHION_DIR, &sb) && S_ISDIR(sb.st_mode))
        CU_add_test(suite, "fashion-mnist: the real training set",
                    test_fashion_mnist_real);
    else
        printf("SKIPPED (not counted): fashion-mnist: the real training "
               "set, because %s does not exist\n", FASHION_DIR);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed() +
             CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return failed ? 1 : 0;
}
