/*
 * .npy files: save/load round trips (every dtype, 0-d, empty, 4-d and
 * 8-d tensors, views, two devices) compared bit for bit; the exact bytes
 * np.save writes; files in the layouts NumPy writes (format 1.0, 2.0 and
 * 3.0, Fortran order, big-endian, Python 2 longs, old 16-byte alignment),
 * written here byte by byte from the format description; a corpus of
 * corrupt files, each refused with its own message; and saves that fail
 * (a missing folder, bfloat16, every step of the atomic write through
 * KEEL_TEST_FAIL_SAVE_AT) leaving the previous file byte-identical.
 *
 * Runs with KEEL_CPU_DEVICES=2 (cpu:0 and cpu:1).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include <keel/io.h>
#include <keel/ops.h>

#include "check.h"

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

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long n;

    *len = 0;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf)
        *len = (size_t)n;
    return buf;
}

static void write_all(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fwrite(buf, 1, len, f), len);
    fclose(f);
}

/* The file at `path` holds exactly buf[0..len). */
static bool file_is(const char *path, const void *buf, size_t len)
{
    size_t n;
    unsigned char *got = read_all(path, &n);
    bool same = got && n == len && !memcmp(got, buf, len);

    free(got);
    return same;
}

/* Entries of tmpdir whose name contains ".tmp.". */
static int count_temp_files(void)
{
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    int n = 0;

    if (!d)
        return -1;
    while ((e = readdir(d)))
        n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

/* A tensor whose bytes are a pseudo-random pattern of `seed` (bool: 0 or
 * 1; floats get arbitrary bit patterns, NaN payloads included). */
static keel_tensor *pattern(keel_dtype dt, int ndim, const int64_t *shape,
                            const char *device, unsigned seed)
{
    int64_t n = 1;
    size_t es = keel_dtype_size(dt), bytes;
    unsigned char *buf;
    keel_tensor *t = NULL;

    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    bytes = (size_t)n * es;
    buf = malloc(bytes + 1);
    for (size_t i = 0; i < bytes; i++) {
        seed = seed * 1103515245u + 12345u;
        buf[i] = (unsigned char)(seed >> 16);
        if (dt == KEEL_BOOL)
            buf[i] &= 1;
    }
    if (keel_tensor_from_host(buf, dt, ndim, shape, device, &t))
        fprintf(stderr, "\n  pattern: %s\n", keel_last_error());
    free(buf);
    return t;
}

/* Row-major bytes of a tensor (malloc'd). */
static unsigned char *bytes_of(const keel_tensor *t, size_t *len)
{
    size_t n = (size_t)keel_tensor_numel(t) *
               keel_dtype_size(keel_tensor_dtype(t));
    unsigned char *buf = malloc(n + 1);

    *len = n;
    if (keel_tensor_to_host(t, buf, n)) {
        fprintf(stderr, "\n  bytes_of: %s\n", keel_last_error());
        free(buf);
        return NULL;
    }
    return buf;
}

/* Same dtype, shape and bytes. */
static bool same_tensor(const keel_tensor *a, const keel_tensor *b)
{
    size_t la, lb;
    unsigned char *ba, *bb;
    bool same;

    if (!a || !b || keel_tensor_dtype(a) != keel_tensor_dtype(b) ||
        keel_tensor_ndim(a) != keel_tensor_ndim(b))
        return false;
    for (int i = 0; i < keel_tensor_ndim(a); i++)
        if (keel_tensor_shape(a)[i] != keel_tensor_shape(b)[i])
            return false;
    ba = bytes_of(a, &la);
    bb = bytes_of(b, &lb);
    same = ba && bb && la == lb && !memcmp(ba, bb, la);
    free(ba);
    free(bb);
    return same;
}

/* t has this dtype, shape and row-major host bytes. */
static bool tensor_is(const keel_tensor *t, keel_dtype dt, int ndim,
                      const int64_t *shape, const void *data, size_t len)
{
    size_t n;
    unsigned char *got;
    bool same;

    if (!t || keel_tensor_dtype(t) != dt || keel_tensor_ndim(t) != ndim) {
        fprintf(stderr, "\n  tensor_is: dtype or rank differs\n");
        return false;
    }
    for (int i = 0; i < ndim; i++)
        if (keel_tensor_shape(t)[i] != shape[i]) {
            fprintf(stderr, "\n  tensor_is: shape[%d] is %lld, wanted %lld\n",
                    i, (long long)keel_tensor_shape(t)[i],
                    (long long)shape[i]);
            return false;
        }
    got = bytes_of(t, &n);
    same = got && n == len && !memcmp(got, data, len);
    if (!same)
        fprintf(stderr, "\n  tensor_is: the elements differ\n");
    free(got);
    return same;
}

static bool on_device(const keel_tensor *t, const char *name)
{
    char buf[64];

    keel_place_name(keel_tensor_place(t), buf, sizeof(buf));
    return !strcmp(buf, name);
}

/* Load `bytes` written to a file; NULL (with the error printed) on failure. */
static keel_tensor *load_bytes(const char *name, const void *bytes,
                               size_t len)
{
    keel_tensor *t = NULL;
    keel_status st;

    write_all(tmp_path(name), bytes, len);
    st = keel_npy_load(tmp_path(name), NULL, &t);
    if (st != KEEL_STATUS_OK)
        fprintf(stderr, "\n  loading %s: %s: %s\n", name,
                keel_status_name(st), keel_last_error());
    return t;
}

/*
 * A file of format `major`.`minor` with header text `hdr` (taken as is:
 * no padding, which readers do not need) and `n` data bytes: the magic,
 * the two version bytes, the header length (2 bytes little-endian for
 * 1.0, 4 bytes for 2.0 and 3.0), the header, the data. Returns the size.
 */
static size_t make_file(unsigned char *out, unsigned major, unsigned minor,
                        const char *hdr, const void *data, size_t n)
{
    size_t h = strlen(hdr), lb = major == 1 ? 2 : 4, o = 0;

    memcpy(out, "\x93NUMPY", 6);
    out[6] = (unsigned char)major;
    out[7] = (unsigned char)minor;
    for (size_t i = 0; i < lb; i++)
        out[8 + i] = (unsigned char)(h >> (8 * i));
    o = 8 + lb;
    memcpy(out + o, hdr, h);
    o += h;
    if (n)
        memcpy(out + o, data, n);
    return o + n;
}

/* ---- what NumPy writes -------------------------------------------------- */

#define SP10 "          "

/*
 * np.save(f, np.arange(6, dtype='<f4').reshape(2, 3)), NumPy >= 1.23:
 * 10-byte prefix (magic, version 1.0, header length 118 = 0x76), the
 * 59-character dict, 20 spare spaces (NumPy leaves 21 minus the digits
 * of shape[0]), 38 spaces of padding so that the data starts at byte
 * 128, '\n', then 0.0f .. 5.0f little-endian.
 */
static const char np_f32[] =
    "\x93NUMPY\x01\x00\x76\x00"
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
    SP10 SP10 SP10 SP10 SP10 "        " "\n"
    "\x00\x00\x00\x00" "\x00\x00\x80\x3f" "\x00\x00\x00\x40"
    "\x00\x00\x40\x40" "\x00\x00\x80\x40" "\x00\x00\xa0\x40";

/* np.save(f, np.int8(-5)): a 0-d array gets no spare spaces (55-char
 * dict + 62 spaces + '\n' = 118), then the one byte 0xfb. */
static const char np_i8_scalar[] =
    "\x93NUMPY\x01\x00\x76\x00"
    "{'descr': '|i1', 'fortran_order': False, 'shape': (), }"
    SP10 SP10 SP10 SP10 SP10 SP10 "  " "\n"
    "\xfb";

/* np.save(f, np.zeros((0, 3), bool)): no data at all. */
static const char np_bool_empty[] =
    "\x93NUMPY\x01\x00\x76\x00"
    "{'descr': '|b1', 'fortran_order': False, 'shape': (0, 3), }"
    SP10 SP10 SP10 SP10 SP10 "        " "\n";

/*
 * [[0, 1, 2], [3, 4, 5]] as '<i2' in Fortran order, laid out as NumPy
 * before 1.23 did (16-byte alignment, no spare spaces: 58-char dict +
 * 11 spaces + '\n' = 70 = 0x46 header bytes, data at 80): column by
 * column, 0 3 1 4 2 5.
 */
static const char np_i2_fortran[] =
    "\x93NUMPY\x01\x00\x46\x00"
    "{'descr': '<i2', 'fortran_order': True, 'shape': (2, 3), }"
    SP10 " " "\n"
    "\x00\x00" "\x03\x00" "\x01\x00" "\x04\x00" "\x02\x00" "\x05\x00";

/* [[1, -2, 3], [0x01020304, INT32_MIN, 7]] as big-endian '>i4' (59-char
 * dict + 10 spaces + '\n' = 70). */
static const char np_i4_big[] =
    "\x93NUMPY\x01\x00\x46\x00"
    "{'descr': '>i4', 'fortran_order': False, 'shape': (2, 3), }"
    SP10 "\n"
    "\x00\x00\x00\x01" "\xff\xff\xff\xfe" "\x00\x00\x00\x03"
    "\x01\x02\x03\x04" "\x80\x00\x00\x00" "\x00\x00\x00\x07";

/* Format 2.0 (4-byte header length): [1, -1, 2^40] as '<i8' (57-char
 * dict + 6 spaces + '\n' = 64 = 0x40; data at 76). */
static const char np_v2_i8[] =
    "\x93NUMPY\x02\x00\x40\x00\x00\x00"
    "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }"
    "      " "\n"
    "\x01\x00\x00\x00\x00\x00\x00\x00" "\xff\xff\xff\xff\xff\xff\xff\xff"
    "\x00\x00\x00\x00\x00\x01\x00\x00";

/* Format 3.0 (UTF-8 header): [[1, 2], [3, 255]] as '|u1' (59-char dict
 * + 8 spaces + '\n' = 68 = 0x44; data at 80). */
static const char np_v3_u1[] =
    "\x93NUMPY\x03\x00\x44\x00\x00\x00"
    "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }"
    "        " "\n"
    "\x01\x02\x03\xff";

/* A Python 2 NumPy file: the shape's ints are longs, written "2L"
 * (58-char dict + 11 spaces + '\n' = 70): [1.5, -0.25] as '<f8'. */
static const char np_py2_f8[] =
    "\x93NUMPY\x01\x00\x46\x00"
    "{'descr': '<f8', 'fortran_order': False, 'shape': (2L,), }"
    SP10 " " "\n"
    "\x00\x00\x00\x00\x00\x00\xf8\x3f" "\x00\x00\x00\x00\x00\x00\xd0\xbf";

/* Big-endian '>f8' [1.0, -2.5] and '>f2' [1.0, -2.0, 65504]. */
static const char np_f8_big[] =
    "\x93NUMPY\x01\x00\x46\x00"
    "{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }"
    SP10 "  " "\n"
    "\x3f\xf0\x00\x00\x00\x00\x00\x00" "\xc0\x04\x00\x00\x00\x00\x00\x00";
static const char np_f2_big[] =
    "\x93NUMPY\x01\x00\x46\x00"
    "{'descr': '>f2', 'fortran_order': False, 'shape': (3,), }"
    SP10 "  " "\n"
    "\x3c\x00" "\xc0\x00" "\x7b\xff";

#define FIXTURE(a) (a), (sizeof(a) - 1)

/* ---- round trips -------------------------------------------------------- */

static const keel_dtype all_dtypes[] = {
    KEEL_F16, KEEL_F32, KEEL_F64, KEEL_I8,
    KEEL_U8,  KEEL_I32, KEEL_I64, KEEL_BOOL,
};
#define NUM_DTYPES (sizeof(all_dtypes) / sizeof(all_dtypes[0]))

static void test_round_trip(void)
{
    static const struct {
        int ndim;
        int64_t shape[8];
    } shapes[] = {
        {2, {2, 3}},          {0, {0}},       {1, {7}},
        {2, {0, 3}},          {3, {3, 0, 2}}, {4, {2, 3, 4, 5}},
        {8, {1, 2, 1, 2, 1, 2, 1, 3}},
    };
    char *path = tmp_path("rt.npy");
    unsigned seed = 1;

    for (size_t d = 0; d < NUM_DTYPES; d++)
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
            keel_tensor *t, *back0, *back1;
            unsigned char *file;
            size_t len, hlen;

            t = pattern(all_dtypes[d], shapes[s].ndim, shapes[s].shape,
                        "cpu:0", seed++);
            CU_ASSERT_PTR_NOT_NULL_FATAL(t);
            OK(keel_npy_save(path, t));
            /* The prefix NumPy writes: version 1.0, data 64-aligned,
             * the header ending in '\n', the data right after it. */
            file = read_all(path, &len);
            CU_ASSERT_PTR_NOT_NULL_FATAL(file);
            CU_ASSERT(len >= 10 && !memcmp(file, "\x93NUMPY\x01\x00", 8));
            hlen = (size_t)file[8] | (size_t)file[9] << 8;
            CU_ASSERT_EQUAL((10 + hlen) % 64, 0);
            CU_ASSERT_EQUAL(file[10 + hlen - 1], '\n');
            CU_ASSERT_EQUAL(len - 10 - hlen,
                            (size_t)keel_tensor_numel(t) *
                                keel_dtype_size(all_dtypes[d]));
            free(file);

            back0 = back1 = NULL;
            OK(keel_npy_load(path, NULL, &back0));
            OK(keel_npy_load(path, "cpu:1", &back1));
            CU_ASSERT(same_tensor(t, back0));
            CU_ASSERT(same_tensor(t, back1));
            CU_ASSERT(on_device(back0, "cpu:0"));
            CU_ASSERT(on_device(back1, "cpu:1"));
            keel_tensor_free(back0);
            keel_tensor_free(back1);
            keel_tensor_free(t);
        }
    unlink(path);
    CU_ASSERT_EQUAL(count_temp_files(), 0);
}

/* A transposed view on another device is written in its own C order. */
static void test_round_trip_view(void)
{
    int64_t shape[2] = {3, 4};
    keel_tensor *t, *tt, *c, *back = NULL;
    char *path = tmp_path("view.npy");

    t = pattern(KEEL_I32, 2, shape, "cpu:1", 77);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    OK(keel_transpose(t, 0, 1, &tt));
    CU_ASSERT_FALSE(keel_tensor_is_contiguous(tt));
    OK(keel_contiguous(tt, &c));
    OK(keel_npy_save(path, tt));
    OK(keel_npy_load(path, "cpu:0", &back));
    CU_ASSERT_EQUAL(keel_tensor_shape(back)[0], 4);
    CU_ASSERT_EQUAL(keel_tensor_shape(back)[1], 3);
    CU_ASSERT(same_tensor(c, back));
    keel_tensor_free(back);
    keel_tensor_free(c);
    keel_tensor_free(tt);
    keel_tensor_free(t);
    unlink(path);
}

/* keel_npy_save writes np.save's bytes. */
static void test_save_matches_numpy(void)
{
    static const float f[6] = {0, 1, 2, 3, 4, 5};
    static const int8_t i8 = -5;
    int64_t shape[2] = {2, 3}, empty[2] = {0, 3};
    keel_tensor *t;
    char *path = tmp_path("np.npy");

    OK(keel_tensor_from_host(f, KEEL_F32, 2, shape, NULL, &t));
    OK(keel_npy_save(path, t));
    CU_ASSERT(file_is(path, FIXTURE(np_f32)));
    keel_tensor_free(t);

    OK(keel_tensor_from_host(&i8, KEEL_I8, 0, NULL, NULL, &t));
    OK(keel_npy_save(path, t));
    CU_ASSERT(file_is(path, FIXTURE(np_i8_scalar)));
    keel_tensor_free(t);

    OK(keel_tensor_from_host(NULL, KEEL_BOOL, 2, empty, NULL, &t));
    OK(keel_npy_save(path, t));
    CU_ASSERT(file_is(path, FIXTURE(np_bool_empty)));
    keel_tensor_free(t);
    unlink(path);
}

/* ---- reading NumPy's layouts ---------------------------------------------- */

static void test_read_numpy_files(void)
{
    keel_tensor *t;

    CU_ASSERT_EQUAL(sizeof(np_f32) - 1, 152);
    t = load_bytes("f32.npy", FIXTURE(np_f32));
    {
        static const float want[6] = {0, 1, 2, 3, 4, 5};
        int64_t shape[2] = {2, 3};

        CU_ASSERT(tensor_is(t, KEEL_F32, 2, shape, want, sizeof(want)));
    }
    keel_tensor_free(t);

    t = load_bytes("i8.npy", FIXTURE(np_i8_scalar));
    {
        int8_t want = -5;

        CU_ASSERT(tensor_is(t, KEEL_I8, 0, NULL, &want, 1));
    }
    keel_tensor_free(t);

    t = load_bytes("b1.npy", FIXTURE(np_bool_empty));
    {
        int64_t shape[2] = {0, 3};

        CU_ASSERT(tensor_is(t, KEEL_BOOL, 2, shape, "", 0));
    }
    keel_tensor_free(t);

    /* Fortran order, and int16 widened to int32. */
    CU_ASSERT_EQUAL(sizeof(np_i2_fortran) - 1, 92);
    t = load_bytes("i2f.npy", FIXTURE(np_i2_fortran));
    {
        static const int32_t want[6] = {0, 1, 2, 3, 4, 5};
        int64_t shape[2] = {2, 3};

        CU_ASSERT(tensor_is(t, KEEL_I32, 2, shape, want, sizeof(want)));
    }
    keel_tensor_free(t);

    t = load_bytes("i4be.npy", FIXTURE(np_i4_big));
    {
        static const int32_t want[6] = {1, -2, 3, 0x01020304, INT32_MIN, 7};
        int64_t shape[2] = {2, 3};

        CU_ASSERT(tensor_is(t, KEEL_I32, 2, shape, want, sizeof(want)));
    }
    keel_tensor_free(t);

    CU_ASSERT_EQUAL(sizeof(np_v2_i8) - 1, 76 + 24);
    t = load_bytes("v2.npy", FIXTURE(np_v2_i8));
    {
        static const int64_t want[3] = {1, -1, INT64_C(1) << 40};
        int64_t shape[1] = {3};

        CU_ASSERT(tensor_is(t, KEEL_I64, 1, shape, want, sizeof(want)));
    }
    keel_tensor_free(t);

    CU_ASSERT_EQUAL(sizeof(np_v3_u1) - 1, 84);
    t = load_bytes("v3.npy", FIXTURE(np_v3_u1));
    {
        static const uint8_t want[4] = {1, 2, 3, 255};
        int64_t shape[2] = {2, 2};

        CU_ASSERT(tensor_is(t, KEEL_U8, 2, shape, want, sizeof(want)));
    }
    keel_tensor_free(t);

    t = load_bytes("py2.npy", FIXTURE(np_py2_f8));
    {
        static const double want[2] = {1.5, -0.25};
        int64_t shape[1] = {2};

        CU_ASSERT(tensor_is(t, KEEL_F64, 1, shape, want, sizeof(want)));
    }
    keel_tensor_free(t);

    t = load_bytes("f8be.npy", FIXTURE(np_f8_big));
    {
        static const double want[2] = {1.0, -2.5};
        int64_t shape[1] = {2};

        CU_ASSERT(tensor_is(t, KEEL_F64, 1, shape, want, sizeof(want)));
    }
    keel_tensor_free(t);

    /* float16 bits 0x3c00 (1.0), 0xc000 (-2.0), 0x7bff (65504). */
    t = load_bytes("f2be.npy", FIXTURE(np_f2_big));
    {
        static const uint16_t want[3] = {0x3c00, 0xc000, 0x7bff};
        int64_t shape[1] = {3};

        CU_ASSERT(tensor_is(t, KEEL_F16, 1, shape, want, sizeof(want)));
    }
    keel_tensor_free(t);
}

/* Layouts built with make_file: other spellings of the same dict, a 3-d
 * big-endian Fortran array, one-byte types with '<' and '>'. */
static void test_read_variants(void)
{
    unsigned char buf[4096];
    size_t n;
    keel_tensor *t;

    /* Double quotes, other key order, no trailing comma, newlines and
     * tabs between tokens: all one Python dict literal. */
    {
        static const int32_t v[2] = {-7, 9};
        int64_t shape[1] = {2};

        n = make_file(buf, 1, 0,
                      "\t{\"shape\": (2,),\n \"fortran_order\" :False,"
                      "\"descr\":\"<i4\"}  \n", v, sizeof(v));
        t = load_bytes("quotes.npy", buf, n);
        CU_ASSERT(tensor_is(t, KEEL_I32, 1, shape, v, sizeof(v)));
        keel_tensor_free(t);
    }
    /* (2, 3, 4) '>f4' in Fortran order: element [i][j][k] = 12i + 4j + k
     * sits at position i + 2j + 6k, big-endian. */
    {
        float want[24];
        unsigned char data[96];
        int64_t shape[3] = {2, 3, 4};

        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                for (int k = 0; k < 4; k++) {
                    float v = (float)(12 * i + 4 * j + k);
                    uint32_t u;
                    int at = i + 2 * j + 6 * k;

                    want[12 * i + 4 * j + k] = v;
                    memcpy(&u, &v, 4);
                    data[4 * at + 0] = (unsigned char)(u >> 24);
                    data[4 * at + 1] = (unsigned char)(u >> 16);
                    data[4 * at + 2] = (unsigned char)(u >> 8);
                    data[4 * at + 3] = (unsigned char)u;
                }
        n = make_file(buf, 1, 0,
                      "{'descr': '>f4', 'fortran_order': True, "
                      "'shape': (2, 3, 4), }\n", data, sizeof(data));
        t = load_bytes("f4bef.npy", buf, n);
        CU_ASSERT(tensor_is(t, KEEL_F32, 3, shape, want, sizeof(want)));
        keel_tensor_free(t);
    }
    /* Fortran order of a 1-d, an empty and a 0-d array is C order. */
    {
        static const int64_t v[3] = {5, 6, 7};
        int64_t s1[1] = {3}, s0[3] = {2, 0, 3};

        n = make_file(buf, 1, 0,
                      "{'descr': '<i8', 'fortran_order': True, "
                      "'shape': (3,), }\n", v, sizeof(v));
        t = load_bytes("f1d.npy", buf, n);
        CU_ASSERT(tensor_is(t, KEEL_I64, 1, s1, v, sizeof(v)));
        keel_tensor_free(t);
        n = make_file(buf, 1, 0,
                      "{'descr': '<i8', 'fortran_order': True, "
                      "'shape': (2, 0, 3), }\n", NULL, 0);
        t = load_bytes("fempty.npy", buf, n);
        CU_ASSERT(tensor_is(t, KEEL_I64, 3, s0, "", 0));
        keel_tensor_free(t);
        n = make_file(buf, 1, 0,
                      "{'descr': '<i8', 'fortran_order': True, "
                      "'shape': (), }\n", v, 8);
        t = load_bytes("f0d.npy", buf, n);
        CU_ASSERT(tensor_is(t, KEEL_I64, 0, NULL, v, 8));
        keel_tensor_free(t);
    }
    /* One-byte types with an explicit byte order; bool 0/1. */
    {
        static const unsigned char v[3] = {0x80, 0x01, 0x7f};
        static const unsigned char b[3] = {1, 0, 1};
        int64_t shape[1] = {3};

        n = make_file(buf, 1, 0, "{'descr': '<i1', 'fortran_order': False, "
                      "'shape': (3,), }\n", v, 3);
        t = load_bytes("i1.npy", buf, n);
        CU_ASSERT(tensor_is(t, KEEL_I8, 1, shape, v, 3));
        keel_tensor_free(t);
        n = make_file(buf, 1, 0, "{'descr': '>u1', 'fortran_order': False, "
                      "'shape': (3,), }\n", v, 3);
        t = load_bytes("u1.npy", buf, n);
        CU_ASSERT(tensor_is(t, KEEL_U8, 1, shape, v, 3));
        keel_tensor_free(t);
        n = make_file(buf, 3, 0, "{'descr': '|b1', 'fortran_order': False, "
                      "'shape': (3,), }\n", b, 3);
        t = load_bytes("b1v3.npy", buf, n);
        CU_ASSERT(tensor_is(t, KEEL_BOOL, 1, shape, b, 3));
        keel_tensor_free(t);
    }
}

/* ---- corrupt files ------------------------------------------------------- */

static void test_corrupt_files(void)
{
    static const char good[] =
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n";
    static const struct {
        const char *name;
        unsigned major, minor;
        const char *header;
        int data; /* bytes of data; -1: the 24 that fit */
        const char *message;
    } cases[] = {
        {"version 9", 9, 0, good, -1, "unsupported format version 9.0"},
        {"version 1.1", 1, 1, good, -1, "unsupported format version 1.1"},
        {"version 0", 0, 0, good, -1, "unsupported format version 0.0"},
        {"unterminated dict", 1, 0,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), ", -1,
         "unterminated"},
        {"unterminated shape", 1, 0,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3", -1,
         "unterminated"},
        {"empty header", 1, 0, "", 24, "the header is empty"},
        {"not a dict", 1, 0, "[1, 2]\n", 24, "expected '{'"},
        {"complex descr", 1, 0,
         "{'descr': '<c8', 'fortran_order': False, 'shape': (2, 3), }", -1,
         "unsupported descr '<c8'"},
        {"object descr", 1, 0,
         "{'descr': '|O', 'fortran_order': False, 'shape': (2, 3), }", -1,
         "unsupported descr '|O'"},
        {"uint16 descr", 1, 0,
         "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 3), }", -1,
         "unsupported descr '<u2'"},
        {"native order", 1, 0,
         "{'descr': '=f4', 'fortran_order': False, 'shape': (2, 3), }", -1,
         "unsupported descr '=f4'"},
        {"'|' on 4 bytes", 1, 0,
         "{'descr': '|f4', 'fortran_order': False, 'shape': (2, 3), }", -1,
         "byte order '|'"},
        {"structured descr", 1, 0,
         "{'descr': [('a', '<f4')], 'fortran_order': False, "
         "'shape': (2, 3), }", -1, "structured dtypes"},
        {"descr not a string", 1, 0,
         "{'descr': 4, 'fortran_order': False, 'shape': (2, 3), }", -1,
         "descr is '4', expected a string"},
        {"negative shape", 1, 0,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", -1,
         "shape[1] is -3: a dimension cannot be negative"},
        {"element count overflows", 1, 0,
         "{'descr': '<f4', 'fortran_order': False, "
         "'shape': (4611686018427387904, 4), }", 0,
         "the product of its non-zero dimensions overflows int64"},
        {"byte size overflows", 1, 0,
         "{'descr': '<f8', 'fortran_order': False, "
         "'shape': (1152921504606846976, 2), }", 0,
         "byte size at 8 bytes per element overflows int64"},
        {"entry beyond 64 bits", 1, 0,
         "{'descr': '<f4', 'fortran_order': False, "
         "'shape': (99999999999999999999,), }", 0,
         "shape[0] = 99999999999999999999 does not fit in 64 bits"},
        {"nine dimensions", 1, 0,
         "{'descr': '<f4', 'fortran_order': False, "
         "'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }", 4, "at most 8"},
        {"data too short", 1, 0, good, 23,
         "the data is 1 bytes short"},
        {"no data", 1, 0, good, 0, "the data is 24 bytes short"},
        {"data too long", 1, 0, good, 25, "1 trailing bytes after the data"},
        {"missing key", 1, 0, "{'descr': '<f4', 'fortran_order': False, }",
         -1, "missing key 'shape'"},
        {"duplicate key", 1, 0,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), "
         "'descr': '<f4', }", -1, "duplicate key 'descr'"},
        {"unexpected key", 1, 0,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), "
         "'extra': 1, }", -1, "unexpected key 'extra'"},
        {"fortran_order 1", 1, 0,
         "{'descr': '<f4', 'fortran_order': 1, 'shape': (2, 3), }", -1,
         "fortran_order is '1', expected True or False"},
        {"fortran_order 'True'", 1, 0,
         "{'descr': '<f4', 'fortran_order': 'True', 'shape': (2, 3), }", -1,
         "fortran_order is ''True'', expected True or False"},
        {"fortran_order true", 1, 0,
         "{'descr': '<f4', 'fortran_order': true, 'shape': (2, 3), }", -1,
         "fortran_order is 'true'"},
        {"shape not a tuple", 1, 0,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", -1,
         "not a tuple"},
        {"shape a list", 1, 0,
         "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }", -1,
         "shape is '[', expected a tuple"},
        {"float in shape", 1, 0,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (2.0, 3), }", -1,
         "expected ',' or ')' in the shape"},
        {"leading zero", 1, 0,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (02, 3), }", -1,
         "leading zero"},
        {"'L' in 3.0", 3, 0,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }", -1,
         "'L' suffix"},
        {"text after the dict", 1, 0,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } x", -1,
         "text after the dict"},
        {"missing colon", 1, 0,
         "{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3), }", -1,
         "expected ':' after a key"},
        {"missing comma", 1, 0,
         "{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3), }", -1,
         "expected ',' or '}' after a value"},
        {"string cut by a newline", 1, 0,
         "{'descr': '<f4\n', 'fortran_order': False, 'shape': (2, 3), }",
         -1, "unterminated string starting at header byte 10"},
        {"string cut by the end", 1, 0, "{'descr': '<f4", -1,
         "unterminated string starting at header byte 10"},
        {"escape in a string", 1, 0,
         "{'descr': '<\\f4', 'fortran_order': False, "
         "'shape': (2, 3), }", -1, "escape sequence"},
        {"bare key", 1, 0,
         "{descr: '<f4', 'fortran_order': False, 'shape': (2, 3), }", -1,
         "expected a quoted key or '}' at header byte 1, found 'descr'"},
    };
    unsigned char buf[4096], data[64];
    char *path = tmp_path("bad.npy");

    memset(data, 0, sizeof(data));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t n = make_file(buf, cases[i].major, cases[i].minor,
                             cases[i].header, data,
                             cases[i].data < 0 ? 24 : (size_t)cases[i].data);
        keel_tensor *t = (keel_tensor *)&t; /* not NULL */
        keel_status st;

        write_all(path, buf, n);
        st = keel_npy_load(path, NULL, &t);
        if (!err_(st, KEEL_STATUS_CORRUPT, cases[i].message, cases[i].name))
            CU_FAIL("corrupt file accepted or wrong message");
        CU_ASSERT_PTR_NULL(t);
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), path));
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "keel_npy_load"));
    }

    /* Damage to the prefix, which make_file cannot express. */
    {
        keel_tensor *t = NULL;
        unsigned char raw[sizeof(np_f32)];
        size_t n;

        memcpy(raw, np_f32, sizeof(np_f32) - 1);
        raw[5] = 'Z';
        write_all(path, raw, sizeof(np_f32) - 1);
        ERR(keel_npy_load(path, NULL, &t), KEEL_STATUS_CORRUPT,
            "not a .npy file: bad magic \\x93NUMPZ");
        CU_ASSERT_PTR_NULL(t);

        /* The header length says 4096 bytes; 142 follow. */
        memcpy(raw, np_f32, sizeof(np_f32) - 1);
        raw[8] = 0x00;
        raw[9] = 0x10;
        write_all(path, raw, sizeof(np_f32) - 1);
        ERR(keel_npy_load(path, NULL, &t), KEEL_STATUS_CORRUPT,
            "the header length 4096 runs past the end of the file (only "
            "142 bytes follow");

        /* A 2.0 header length of 2^32 - 1. */
        n = make_file(buf, 2, 0, good, data, 24);
        buf[8] = buf[9] = buf[10] = buf[11] = 0xff;
        write_all(path, buf, n);
        ERR(keel_npy_load(path, NULL, &t), KEEL_STATUS_CORRUPT,
            "the header length 4294967295 runs past the end");

        write_all(path, "\x93NUMPY\x01", 7);
        ERR(keel_npy_load(path, NULL, &t), KEEL_STATUS_CORRUPT,
            "the file is 7 bytes long, too short");
        write_all(path, "\x93NUMPY\x02\x00\x10\x00\x00", 11);
        ERR(keel_npy_load(path, NULL, &t), KEEL_STATUS_CORRUPT,
            "too short for the 12-byte prefix of format version 2.0");
        write_all(path, "", 0);
        ERR(keel_npy_load(path, NULL, &t), KEEL_STATUS_CORRUPT,
            "the file is 0 bytes long");

        /* A NUL in the header is shown, not taken as its end. */
        n = make_file(buf, 1, 0, "{'descr'", NULL, 0);
        buf[n++] = '\0';
        memcpy(buf + n, ": '<f4', }", 10);
        n += 10;
        buf[8] = (unsigned char)(n - 10);
        write_all(path, buf, n);
        ERR(keel_npy_load(path, NULL, &t), KEEL_STATUS_CORRUPT,
            "expected ':' after a key at header byte 8, found '\\x00'");

        /* A bool byte other than 0 or 1. */
        n = make_file(buf, 1, 0, "{'descr': '|b1', 'fortran_order': False, "
                      "'shape': (3,), }", "\x01\x02\x00", 3);
        write_all(path, buf, n);
        ERR(keel_npy_load(path, NULL, &t), KEEL_STATUS_CORRUPT,
            "bool element 1 (in file order) is 2, expected 0 or 1");
        CU_ASSERT_PTR_NULL(t);
    }
    unlink(path);
}

static void test_load_errors(void)
{
    keel_tensor *t = NULL;
    char *path = tmp_path("f32.npy");

    write_all(path, FIXTURE(np_f32));
    ERR(keel_npy_load(NULL, NULL, &t), KEEL_STATUS_INVALID_ARGUMENT,
        "path is NULL");
    ERR(keel_npy_load(path, NULL, NULL), KEEL_STATUS_INVALID_ARGUMENT,
        "out is NULL");
    ERR(keel_npy_load(tmp_path("absent.npy"), NULL, &t),
        KEEL_STATUS_NOT_FOUND, "absent.npy");
    CU_ASSERT_PTR_NULL(t);
    ERR(keel_npy_load(tmpdir, NULL, &t), KEEL_STATUS_IO_ERROR,
        "not a regular file");
    CU_ASSERT_PTR_NULL(t);
    CU_ASSERT_NOT_EQUAL(keel_npy_load(path, "cpu:9", &t), KEEL_STATUS_OK);
    CU_ASSERT_PTR_NULL(t);
    unlink(path);
}

/* ---- saves that fail ------------------------------------------------------ */

static void test_save_errors(void)
{
    int64_t shape[2] = {2, 3};
    keel_tensor *t, *bf;
    char *path = tmp_path("keep.npy");
    struct stat sb;

    t = pattern(KEEL_F32, 2, shape, NULL, 3);
    bf = pattern(KEEL_BF16, 2, shape, NULL, 4);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bf);

    ERR(keel_npy_save(NULL, t), KEEL_STATUS_INVALID_ARGUMENT,
        "path is NULL");
    ERR(keel_npy_save(path, NULL), KEEL_STATUS_INVALID_ARGUMENT,
        "tensor is NULL");
    ERR(keel_npy_save("", t), KEEL_STATUS_INVALID_ARGUMENT,
        "the path is empty");

    /* A folder that does not exist: nothing is created. */
    ERR(keel_npy_save(tmp_path("no/such/dir/x.npy"), t),
        KEEL_STATUS_IO_ERROR, "creating the temporary file");
    CU_ASSERT(strstr(keel_last_error(), "no/such/dir/x.npy") != NULL);
    CU_ASSERT_NOT_EQUAL(stat(tmp_path("no"), &sb), 0);

    /* bfloat16 over an existing file: refused before the disk is touched. */
    write_all(path, FIXTURE(np_f32));
    ERR(keel_npy_save(path, bf), KEEL_STATUS_INVALID_ARGUMENT,
        "a bfloat16 tensor cannot be stored in a .npy file (NumPy has no "
        "bfloat16 dtype");
    CU_ASSERT(file_is(path, FIXTURE(np_f32)));
    CU_ASSERT_EQUAL(count_temp_files(), 0);

    keel_tensor_free(bf);
    keel_tensor_free(t);
    unlink(path);
}

/* Each step of the atomic write failing leaves the old file as it was and
 * no temporary behind; the permissions of a replaced file are kept. */
static void test_atomic_save(void)
{
    static const char *steps[] = {"create", "header", "data",    "flush",
                                  "fsync",  "close",  "dirsync", "rename"};
    int64_t shape[2] = {4, 5};
    keel_tensor *t, *back = NULL;
    char *path = tmp_path("atomic.npy");
    struct stat sb;

    t = pattern(KEEL_F64, 2, shape, "cpu:1", 9);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    write_all(path, FIXTURE(np_f32));
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        setenv("KEEL_TEST_FAIL_SAVE_AT", steps[i], 1);
        if (!err_(keel_npy_save(path, t), KEEL_STATUS_IO_ERROR,
                  "the previous file, if any, is unchanged", steps[i]))
            CU_FAIL("an injected failure was not reported");
        unsetenv("KEEL_TEST_FAIL_SAVE_AT");
        CU_ASSERT(file_is(path, FIXTURE(np_f32)));
        CU_ASSERT_EQUAL(count_temp_files(), 0);
    }
    CU_ASSERT_FATAL(chmod(path, 0640) == 0);
    OK(keel_npy_save(path, t));
    CU_ASSERT(stat(path, &sb) == 0 && (sb.st_mode & 07777) == 0640);
    OK(keel_npy_load(path, NULL, &back));
    CU_ASSERT(same_tensor(t, back));
    CU_ASSERT_EQUAL(count_temp_files(), 0);
    keel_tensor_free(back);
    keel_tensor_free(t);
    unlink(path);
}

/* ---- main --------------------------------------------------------------- */

static int suite_init(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "%s/keel_npy_XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(tmpdir) ? 0 : 1;
}

static int suite_clean(void)
{
    DIR *d = opendir(tmpdir);
    struct dirent *e;

    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.')
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
        {"round trip: every dtype, 0-d, empty, 4-d, 8-d, two devices",
         test_round_trip},
        {"round trip: a transposed view", test_round_trip_view},
        {"save writes np.save's bytes", test_save_matches_numpy},
        {"reads NumPy's files: 1.0, 2.0, 3.0, Fortran, big-endian",
         test_read_numpy_files},
        {"reads other spellings of the header", test_read_variants},
        {"corrupt files refused, each with its message", test_corrupt_files},
        {"load errors", test_load_errors},
        {"save errors leave the old file", test_save_errors},
        {"atomic save under injected faults", test_atomic_save},
    };
    CU_pSuite suite;
    unsigned failed;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    suite = CU_add_suite("npy", suite_init, suite_clean);
    for (size_t i = 0; suite && i < sizeof(tests) / sizeof(tests[0]); i++)
        CU_add_test(suite, tests[i].name, tests[i].fn);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed() +
             CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return failed ? 1 : 0;
}
