/*
 * State dicts and safetensors files: the dict's map operations, save/load
 * round trips (every dtype, scalars, empty and non-contiguous tensors,
 * metadata, other devices), the file's exact bytes, a table of corrupt
 * files each rejected with its own message, load_into's checks, and the
 * atomic save under injected faults (KEEL_TEST_FAIL_SAVE_AT).
 *
 * Runs with KEEL_CPU_DEVICES=2 (cpu:0 and cpu:1) and KEEL_TEST_DATA_DIR
 * pointing at core/tests/data (reference.safetensors, written by the
 * reference Python implementation; see make_reference.py there).
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include <keel/autograd.h>
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

/* A tensor whose bytes are a pattern of `seed` (bool: 0/1). */
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

static bool on_device(const keel_tensor *t, const char *name)
{
    char buf[64];

    keel_place_name(keel_tensor_place(t), buf, sizeof(buf));
    return !strcmp(buf, name);
}

/* ---- state dict basics -------------------------------------------------- */

static void test_dict_basics(void)
{
    keel_state_dict *sd;
    keel_tensor *a, *b, *c, *t;
    const char *name;
    int64_t shape[1] = {3};

    OK(keel_state_dict_create(&sd));
    CU_ASSERT_EQUAL(keel_state_dict_count(sd), 0);
    OK(keel_zeros(1, shape, KEEL_F32, "cpu:0", &a));
    OK(keel_ones(1, shape, KEEL_F32, "cpu:0", &b));
    OK(keel_full(1, shape, KEEL_F32, 7.0, "cpu:0", &c));
    OK(keel_state_dict_set(sd, "fc1.weight", a));
    OK(keel_state_dict_set(sd, "fc1.bias", b));
    OK(keel_state_dict_set(sd, "fc2.weight", c));
    CU_ASSERT_EQUAL(keel_state_dict_count(sd), 3);
    CU_ASSERT_PTR_EQUAL(keel_state_dict_get(sd, "fc1.bias"), b);
    CU_ASSERT_PTR_NULL(keel_state_dict_get(sd, "fc1"));
    CU_ASSERT(keel_state_dict_contains(sd, "fc2.weight"));
    CU_ASSERT(!keel_state_dict_contains(sd, "fc2.bias"));
    CU_ASSERT_STRING_EQUAL(keel_state_dict_name(sd, 0), "fc1.weight");
    CU_ASSERT_STRING_EQUAL(keel_state_dict_name(sd, 2), "fc2.weight");
    CU_ASSERT_PTR_NULL(keel_state_dict_name(sd, 3));
    CU_ASSERT_PTR_NULL(keel_state_dict_name(sd, -1));
    OK(keel_state_dict_at(sd, 1, &name, &t));
    CU_ASSERT_STRING_EQUAL(name, "fc1.bias");
    CU_ASSERT_PTR_EQUAL(t, b);
    ERR(keel_state_dict_at(sd, 3, &name, &t), KEEL_STATUS_INVALID_ARGUMENT,
        "index 3 is outside [0, 3)");

    /* Replacing keeps the position; the dict holds its own references. */
    OK(keel_state_dict_set(sd, "fc1.weight", c));
    CU_ASSERT_STRING_EQUAL(keel_state_dict_name(sd, 0), "fc1.weight");
    CU_ASSERT_PTR_EQUAL(keel_state_dict_get(sd, "fc1.weight"), c);
    keel_tensor_free(a);
    keel_tensor_free(b);
    keel_tensor_free(c);
    {
        double v;

        OK(keel_tensor_item(keel_state_dict_get(sd, "fc1.bias"), 2, &v));
        CU_ASSERT_EQUAL(v, 1.0);
    }

    /* Removing shifts the later entries up. */
    OK(keel_state_dict_remove(sd, "fc1.weight"));
    CU_ASSERT_EQUAL(keel_state_dict_count(sd), 2);
    CU_ASSERT_STRING_EQUAL(keel_state_dict_name(sd, 0), "fc1.bias");
    CU_ASSERT_STRING_EQUAL(keel_state_dict_name(sd, 1), "fc2.weight");
    CU_ASSERT(keel_state_dict_contains(sd, "fc2.weight"));
    ERR(keel_state_dict_remove(sd, "fc1.weight"), KEEL_STATUS_NOT_FOUND,
        "no entry named 'fc1.weight'");

    /* Names the file format cannot carry. */
    t = keel_state_dict_get(sd, "fc1.bias");
    ERR(keel_state_dict_set(sd, "", t), KEEL_STATUS_INVALID_ARGUMENT,
        "the name is empty");
    ERR(keel_state_dict_set(sd, "__metadata__", t),
        KEEL_STATUS_INVALID_ARGUMENT, "reserved");
    ERR(keel_state_dict_set(sd, "bad\xff", t), KEEL_STATUS_INVALID_ARGUMENT,
        "not valid UTF-8");
    ERR(keel_state_dict_set(sd, "x", NULL), KEEL_STATUS_INVALID_ARGUMENT,
        "tensor is NULL");
    ERR(keel_state_dict_set(NULL, "x", t), KEEL_STATUS_INVALID_ARGUMENT,
        "state dict is NULL");
    {
        char *longname = malloc(KEEL_STATE_DICT_NAME_MAX + 2);

        memset(longname, 'n', KEEL_STATE_DICT_NAME_MAX + 1);
        longname[KEEL_STATE_DICT_NAME_MAX + 1] = '\0';
        ERR(keel_state_dict_set(sd, longname, t),
            KEEL_STATUS_INVALID_ARGUMENT, "the limit is 4095");
        longname[KEEL_STATE_DICT_NAME_MAX] = '\0';
        OK(keel_state_dict_set(sd, longname, t));
        OK(keel_state_dict_remove(sd, longname));
        free(longname);
    }
    OK(keel_state_dict_set(sd, "caf\xc3\xa9.w", t));
    CU_ASSERT_EQUAL(keel_state_dict_count(sd), 3);
    CU_ASSERT_EQUAL(keel_state_dict_count(NULL), 0);
    keel_state_dict_free(sd);
    keel_state_dict_free(NULL);
}

static void test_dict_many(void)
{
    keel_state_dict *sd;
    keel_tensor *t;
    int64_t shape[1] = {1};
    char name[64];

    OK(keel_state_dict_create(&sd));
    OK(keel_zeros(1, shape, KEEL_I32, "cpu:0", &t));
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof(name), "layer%d.sub%d.weight", i / 7, i);
        OK(keel_state_dict_set(sd, name, t));
    }
    CU_ASSERT_EQUAL(keel_state_dict_count(sd), 5000);
    for (int i = 0; i < 5000; i += 2) {
        snprintf(name, sizeof(name), "layer%d.sub%d.weight", i / 7, i);
        OK(keel_state_dict_remove(sd, name));
    }
    CU_ASSERT_EQUAL(keel_state_dict_count(sd), 2500);
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof(name), "layer%d.sub%d.weight", i / 7, i);
        CU_ASSERT_EQUAL(keel_state_dict_contains(sd, name), i % 2 == 1);
    }
    snprintf(name, sizeof(name), "layer%d.sub%d.weight", 1 / 7, 1);
    CU_ASSERT_STRING_EQUAL(keel_state_dict_name(sd, 0), name);
    keel_tensor_free(t);
    keel_state_dict_free(sd);
}

static void test_metadata(void)
{
    keel_state_dict *sd;
    const char *k, *v;

    OK(keel_state_dict_create(&sd));
    OK(keel_state_dict_set_metadata(sd, "format", "pt"));
    OK(keel_state_dict_set_metadata(sd, "epoch", "3"));
    OK(keel_state_dict_set_metadata(sd, "format", "keel"));
    OK(keel_state_dict_set_metadata(sd, "empty", ""));
    CU_ASSERT_EQUAL(keel_state_dict_metadata_count(sd), 3);
    CU_ASSERT_STRING_EQUAL(keel_state_dict_get_metadata(sd, "format"),
                           "keel");
    CU_ASSERT_PTR_NULL(keel_state_dict_get_metadata(sd, "missing"));
    OK(keel_state_dict_metadata_at(sd, 1, &k, &v));
    CU_ASSERT_STRING_EQUAL(k, "epoch");
    CU_ASSERT_STRING_EQUAL(v, "3");
    ERR(keel_state_dict_metadata_at(sd, 3, &k, &v),
        KEEL_STATUS_INVALID_ARGUMENT, "outside [0, 3)");
    ERR(keel_state_dict_set_metadata(sd, "", "x"),
        KEEL_STATUS_INVALID_ARGUMENT, "the key is empty");
    ERR(keel_state_dict_set_metadata(sd, "k", "\xc0\x80"),
        KEEL_STATUS_INVALID_ARGUMENT, "value of metadata 'k' is not valid");
    ERR(keel_state_dict_set_metadata(sd, "k", NULL),
        KEEL_STATUS_INVALID_ARGUMENT, "value is NULL");
    keel_state_dict_free(sd);
}

/* ---- round trips -------------------------------------------------------- */

static const keel_dtype all_dtypes[9] = {KEEL_F32, KEEL_F64, KEEL_F16,
                                         KEEL_BF16, KEEL_I8,  KEEL_U8,
                                         KEEL_I32, KEEL_I64, KEEL_BOOL};

/* A dict of every dtype, a scalar, empty tensors and non-contiguous views,
 * spread over both devices. */
static keel_state_dict *rich_dict(void)
{
    keel_state_dict *sd;
    keel_tensor *t, *v;
    int64_t s23[2] = {2, 3}, s0[2] = {0, 4}, s30[2] = {3, 0}, s45[2] = {4, 5};
    char name[64];

    if (keel_state_dict_create(&sd))
        return NULL;
    for (int i = 0; i < 9; i++) {
        snprintf(name, sizeof(name), "block.%s.weight",
                 keel_dtype_name(all_dtypes[i]));
        t = pattern(all_dtypes[i], 2, s23, i % 2 ? "cpu:1" : "cpu:0",
                    100u + (unsigned)i);
        keel_state_dict_set(sd, name, t);
        keel_tensor_free(t);
        snprintf(name, sizeof(name), "scalar.%s",
                 keel_dtype_name(all_dtypes[i]));
        t = pattern(all_dtypes[i], 0, NULL, "cpu:0", 200u + (unsigned)i);
        keel_state_dict_set(sd, name, t);
        keel_tensor_free(t);
    }
    t = pattern(KEEL_F32, 2, s0, "cpu:0", 1);
    keel_state_dict_set(sd, "empty.rows", t);
    keel_tensor_free(t);
    t = pattern(KEEL_BF16, 2, s30, "cpu:1", 1);
    keel_state_dict_set(sd, "empty.cols", t);
    keel_tensor_free(t);
    /* Non-contiguous: a transpose and a strided slice. */
    t = pattern(KEEL_F16, 2, s45, "cpu:0", 7);
    keel_transpose(t, 0, 1, &v);
    keel_state_dict_set(sd, "view.transposed", v);
    keel_tensor_free(v);
    keel_slice(t, 1, 4, 0, -2, &v);
    keel_state_dict_set(sd, "view.reversed_step", v);
    keel_tensor_free(v);
    keel_tensor_free(t);
    keel_state_dict_set_metadata(sd, "format", "keel");
    keel_state_dict_set_metadata(sd, "note", "r\xc3\xa9sum\xc3\xa9 \"quoted\"");
    return sd;
}

static void check_same_dict(const keel_state_dict *a,
                            const keel_state_dict *b, const char *device)
{
    CU_ASSERT_EQUAL_FATAL(keel_state_dict_count(a), keel_state_dict_count(b));
    for (int64_t i = 0; i < keel_state_dict_count(a); i++) {
        const char *na, *nb;
        keel_tensor *ta, *tb;

        keel_state_dict_at(a, i, &na, &ta);
        keel_state_dict_at(b, i, &nb, &tb);
        CU_ASSERT_STRING_EQUAL(na, nb);
        if (!same_tensor(ta, tb))
            fprintf(stderr, "\n  '%s' differs after the round trip\n", na);
        CU_ASSERT(same_tensor(ta, tb));
        if (device)
            CU_ASSERT(on_device(tb, device));
    }
    CU_ASSERT_EQUAL(keel_state_dict_metadata_count(a),
                    keel_state_dict_metadata_count(b));
    for (int64_t i = 0; i < keel_state_dict_metadata_count(a); i++) {
        const char *k, *v;

        keel_state_dict_metadata_at(a, i, &k, &v);
        CU_ASSERT_PTR_NOT_NULL(keel_state_dict_get_metadata(b, k));
        if (keel_state_dict_get_metadata(b, k))
            CU_ASSERT_STRING_EQUAL(keel_state_dict_get_metadata(b, k), v);
    }
}

static void test_round_trip(void)
{
    keel_state_dict *sd = rich_dict(), *back;
    const char *path = tmp_path("rich.safetensors");

    CU_ASSERT_PTR_NOT_NULL_FATAL(sd);
    CU_ASSERT_EQUAL(keel_state_dict_count(sd), 22);
    OK(keel_save(path, sd));
    OK(keel_load(path, "cpu:0", &back));
    check_same_dict(sd, back, "cpu:0");
    keel_state_dict_free(back);
    OK(keel_load(path, "cpu:1", &back));
    check_same_dict(sd, back, "cpu:1");
    /* Save what was loaded: the same bytes again. */
    {
        size_t l1, l2;
        unsigned char *b1, *b2;
        const char *path2 = tmp_path("rich2.safetensors");

        OK(keel_save(path2, back));
        b1 = read_all(path, &l1);
        b2 = read_all(path2, &l2);
        CU_ASSERT(b1 && b2 && l1 == l2 && !memcmp(b1, b2, l1));
        free(b1);
        free(b2);
        unlink(path2);
    }
    keel_state_dict_free(back);
    keel_state_dict_free(sd);
    CU_ASSERT_EQUAL(count_temp_files(), 0);
}

static void test_round_trip_empty_and_many(void)
{
    keel_state_dict *sd, *back;
    const char *path = tmp_path("many.safetensors");
    int64_t shape[1] = {3};
    char name[32];

    /* No tensors at all: "{}" padded to 8 bytes, no data. */
    OK(keel_state_dict_create(&sd));
    OK(keel_save(path, sd));
    {
        size_t len;
        unsigned char *b = read_all(path, &len);

        CU_ASSERT_EQUAL(len, 16);
        CU_ASSERT(b && b[0] == 8 && !memcmp(b + 8, "{}      ", 8));
        free(b);
    }
    OK(keel_load(path, NULL, &back));
    CU_ASSERT_EQUAL(keel_state_dict_count(back), 0);
    keel_state_dict_free(back);

    /* 1000 tensors come back in dict order. */
    for (int i = 999; i >= 0; i--) {
        keel_tensor *t = pattern(KEEL_I32, 1, shape, "cpu:0",
                                 (unsigned)i);

        snprintf(name, sizeof(name), "p%03d", i);
        keel_state_dict_set(sd, name, t);
        keel_tensor_free(t);
    }
    OK(keel_save(path, sd));
    OK(keel_load(path, "cpu:0", &back));
    check_same_dict(sd, back, NULL);
    CU_ASSERT_STRING_EQUAL(keel_state_dict_name(back, 0), "p999");
    keel_state_dict_free(back);
    keel_state_dict_free(sd);
}

/* The exact bytes of a tiny file, header written by hand. */
static void test_file_layout(void)
{
    static const char header[] =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[2],"
        "\"data_offsets\":[0,8]},"
        "\"fc.bias\":{\"dtype\":\"U8\",\"shape\":[3],"
        "\"data_offsets\":[8,11]},"
        "\"step\":{\"dtype\":\"I64\",\"shape\":[],"
        "\"data_offsets\":[11,19]}}";
    static const unsigned char data[19] = {
        0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0, /* 1.0f, -2.0f */
        0x01, 0x02, 0xff,                               /* 1, 2, 255 */
        0x2a, 0, 0, 0, 0, 0, 0, 0,                      /* 42 */
    };
    float w[2] = {1.0f, -2.0f};
    uint8_t b[3] = {1, 2, 255};
    int64_t step = 42, s2[1] = {2}, s3[1] = {3};
    size_t hlen = strlen(header), plen = (hlen + 7) / 8 * 8, len;
    keel_state_dict *sd;
    keel_tensor *t;
    unsigned char *file;
    const char *path = tmp_path("tiny.safetensors");

    OK(keel_state_dict_create(&sd));
    OK(keel_state_dict_set_metadata(sd, "format", "pt"));
    OK(keel_tensor_from_host(w, KEEL_F32, 1, s2, "cpu:1", &t));
    OK(keel_state_dict_set(sd, "fc.weight", t));
    keel_tensor_free(t);
    OK(keel_tensor_from_host(b, KEEL_U8, 1, s3, "cpu:0", &t));
    OK(keel_state_dict_set(sd, "fc.bias", t));
    keel_tensor_free(t);
    OK(keel_tensor_from_host(&step, KEEL_I64, 0, NULL, "cpu:0", &t));
    OK(keel_state_dict_set(sd, "step", t));
    keel_tensor_free(t);
    OK(keel_save(path, sd));
    keel_state_dict_free(sd);

    file = read_all(path, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(file);
    CU_ASSERT_EQUAL(len, 8 + plen + sizeof(data));
    for (int i = 0; i < 8; i++)
        CU_ASSERT_EQUAL(file[i], (unsigned char)(plen >> (8 * i)));
    CU_ASSERT_EQUAL(plen % 8, 0);
    CU_ASSERT(!memcmp(file + 8, header, hlen));
    for (size_t i = hlen; i < plen; i++)
        CU_ASSERT_EQUAL(file[8 + i], ' ');
    CU_ASSERT(!memcmp(file + 8 + plen, data, sizeof(data)));
    free(file);
}

/* A file written by the reference (Python) implementation. */
static void test_reference_file(void)
{
    const char *dir = getenv("KEEL_TEST_DATA_DIR");
    char path[512];
    keel_state_dict *sd;
    static const char *order[] = {"steps", "d",     "empty", "fc1.weight",
                                  "ids",   "fc1.bias", "small", "u",
                                  "mask"};
    double v;

    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    snprintf(path, sizeof(path), "%s/reference.safetensors", dir);
    OK(keel_load(path, "cpu:1", &sd));
    CU_ASSERT_EQUAL_FATAL(keel_state_dict_count(sd), 9);
    /* Entries come in the order of their bytes in the file. */
    for (int i = 0; i < 9; i++)
        CU_ASSERT_STRING_EQUAL(keel_state_dict_name(sd, i), order[i]);
    CU_ASSERT_STRING_EQUAL(keel_state_dict_get_metadata(sd, "format"), "np");
    CU_ASSERT_STRING_EQUAL(keel_state_dict_get_metadata(sd, "note"),
                           "keel fixture");
    OK(keel_tensor_item(keel_state_dict_get(sd, "fc1.weight"), 5, &v));
    CU_ASSERT_EQUAL(v, 1.5);
    CU_ASSERT_EQUAL(keel_tensor_shape(keel_state_dict_get(sd, "fc1.weight"))[1],
                    3);
    OK(keel_tensor_item(keel_state_dict_get(sd, "fc1.bias"), 2, &v));
    CU_ASSERT_EQUAL(v, 65504.0);
    OK(keel_tensor_item(keel_state_dict_get(sd, "d"), 0, &v));
    CU_ASSERT_EQUAL(v, M_PI);
    OK(keel_tensor_item(keel_state_dict_get(sd, "steps"), 0, &v));
    CU_ASSERT_EQUAL(v, 42.0);
    CU_ASSERT_EQUAL(keel_tensor_ndim(keel_state_dict_get(sd, "steps")), 0);
    OK(keel_tensor_item(keel_state_dict_get(sd, "ids"), 3, &v));
    CU_ASSERT_EQUAL(v, -2147483648.0);
    OK(keel_tensor_item(keel_state_dict_get(sd, "small"), 0, &v));
    CU_ASSERT_EQUAL(v, -128.0);
    OK(keel_tensor_item(keel_state_dict_get(sd, "u"), 4, &v));
    CU_ASSERT_EQUAL(v, 254.0);
    OK(keel_tensor_item(keel_state_dict_get(sd, "mask"), 3, &v));
    CU_ASSERT_EQUAL(v, 1.0);
    CU_ASSERT_EQUAL(keel_tensor_dtype(keel_state_dict_get(sd, "mask")),
                    KEEL_BOOL);
    CU_ASSERT_EQUAL(keel_tensor_numel(keel_state_dict_get(sd, "empty")), 0);
    CU_ASSERT(on_device(keel_state_dict_get(sd, "ids"), "cpu:1"));
    keel_state_dict_free(sd);
}

/* ---- corrupt files ------------------------------------------------------ */

/* The good file the corruptions start from: w F32[2, 2] then b I64[2]. */
#define GOOD_W                                                               \
    "\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}"
#define GOOD_B                                                               \
    "\"b\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[16,32]}"
#define GOOD_HEADER "{" GOOD_W "," GOOD_B "}"

struct corruption {
    const char *what;
    /* Header text (NULL: the good one), the length to declare (0: the
     * text's), data bytes (0: 32), and the file size to cut to (0: none). */
    const char *header;
    uint64_t declared;
    size_t data_len;
    size_t cut;
    /* A byte of the data to set to 7 (for BOOL), or -1. */
    int poke;
    keel_status want;
    const char *part;
};

static const struct corruption corruptions[] = {
    {"file shorter than the length field", NULL, 0, 0, 5, -1,
     KEEL_STATUS_CORRUPT, "too short for the 8-byte header length"},
    {"cut inside the header", NULL, 0, 0, 40, -1, KEEL_STATUS_CORRUPT,
     "runs past the end of the file"},
    {"cut inside the data", NULL, 0, 0, 8 + sizeof(GOOD_HEADER) - 1 + 20, -1,
     KEEL_STATUS_CORRUPT, "lie outside the data buffer of 20 bytes"},
    {"absurd header length", NULL, UINT64_C(1) << 40, 0, 0, -1,
     KEEL_STATUS_CORRUPT, "exceeds the limit of 100000000 bytes"},
    {"header length too small (JSON cut short)", NULL, 60, 0, 0, -1,
     KEEL_STATUS_CORRUPT, "not valid JSON"},
    {"bad JSON", "{\"w\":{\"dtype\":\"F32\",}", 0, 0, 0, -1,
     KEEL_STATUS_CORRUPT, "the header is not valid JSON"},
    {"header not an object", "[1, 2, 3]", 0, 0, 0, -1, KEEL_STATUS_CORRUPT,
     "the header is an array, expected a JSON object"},
    {"entry not an object", "{\"w\":5}", 0, 0, 0, -1, KEEL_STATUS_CORRUPT,
     "tensor 'w': the entry is an integer"},
    {"missing dtype",
     "{\"w\":{\"shape\":[2,2],\"data_offsets\":[0,16]}," GOOD_B "}", 0, 0, 0,
     -1, KEEL_STATUS_CORRUPT, "tensor 'w': the entry is missing \"dtype\""},
    {"missing data_offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2]},"
     GOOD_B "}", 0, 0, 0, -1, KEEL_STATUS_CORRUPT,
     "missing \"data_offsets\""},
    {"dtype not a string",
     "{\"w\":{\"dtype\":4,\"shape\":[2,2],\"data_offsets\":[0,16]}," GOOD_B
     "}", 0, 0, 0, -1, KEEL_STATUS_CORRUPT,
     "\"dtype\" is an integer, expected a string"},
    {"unknown dtype",
     "{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
     GOOD_B "}", 0, 0, 0, -1, KEEL_STATUS_CORRUPT,
     "unknown dtype 'F8_E4M3'"},
    {"shape not an array",
     "{\"w\":{\"dtype\":\"F32\",\"shape\":\"2x2\",\"data_offsets\":[0,16]},"
     GOOD_B "}", 0, 0, 0, -1, KEEL_STATUS_CORRUPT,
     "\"shape\" is a string, expected an array"},
    {"negative dim",
     "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2,-2],\"data_offsets\":[0,16]},"
     GOOD_B "}", 0, 0, 0, -1, KEEL_STATUS_CORRUPT,
     "shape[0] = -2 is negative"},
    {"non-integer dim",
     "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2.0],\"data_offsets\":[0,16]},"
     GOOD_B "}", 0, 0, 0, -1, KEEL_STATUS_CORRUPT,
     "shape[1] is a real number, expected a non-negative integer"},
    {"too many dims",
     "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,4],"
     "\"data_offsets\":[0,16]}," GOOD_B "}", 0, 0, 0, -1,
     KEEL_STATUS_CORRUPT, "the shape has 9 dimensions"},
    /* A zero dim makes the element count 0 but not the other dims'
     * strides: the product of the non-zero dims is still checked. */
    {"zero dim beside huge dims",
     "{\"z\":{\"dtype\":\"F32\",\"shape\":[0,4611686018427387904,"
     "4611686018427387904],\"data_offsets\":[0,0]}," GOOD_W "," GOOD_B "}",
     0, 0, 0, -1, KEEL_STATUS_CORRUPT, "tensor 'z': shape [0, "
     "4611686018427387904, 4611686018427387904] of F32 is too large"},
    {"element count overflows",
     "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
     "\"data_offsets\":[0,16]}," GOOD_B "}", 0, 0, 0, -1,
     KEEL_STATUS_CORRUPT, "shape [4294967296, 4294967296] of F32 is too "
     "large"},
    {"byte size overflows",
     "{\"w\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],"
     "\"data_offsets\":[0,16]}," GOOD_B "}", 0, 0, 0, -1,
     KEEL_STATUS_CORRUPT, "times the 8-byte element does not fit in 63 "
     "bits"},
    {"data_offsets of one number",
     "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0]},"
     GOOD_B "}", 0, 0, 0, -1, KEEL_STATUS_CORRUPT,
     "\"data_offsets\" is an array of the wrong length"},
    {"offsets out of range",
     "{" GOOD_W ",\"b\":{\"dtype\":\"I64\",\"shape\":[2],"
     "\"data_offsets\":[24,40]}}", 0, 0, 0, -1, KEEL_STATUS_CORRUPT,
     "data_offsets [24, 40] lie outside the data buffer of 32 bytes"},
    {"end before begin",
     "{" GOOD_W ",\"b\":{\"dtype\":\"I64\",\"shape\":[2],"
     "\"data_offsets\":[32,16]}}", 0, 0, 0, -1, KEEL_STATUS_CORRUPT,
     "data_offsets [32, 16] ends before it begins"},
    {"wrong byte count",
     "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,16]},"
     GOOD_B "}", 0, 0, 0, -1, KEEL_STATUS_CORRUPT,
     "hold 16 bytes, but F32 with 6 elements needs 24"},
    {"overlapping offsets",
     "{" GOOD_W ",\"b\":{\"dtype\":\"I64\",\"shape\":[2],"
     "\"data_offsets\":[8,24]}}", 0, 0, 0, -1, KEEL_STATUS_CORRUPT,
     "tensors 'w' [0, 16) and 'b' [8, 24) overlap"},
    {"hole in coverage",
     "{" GOOD_W ",\"b\":{\"dtype\":\"I64\",\"shape\":[2],"
     "\"data_offsets\":[20,36]}}", 0, 36, 0, -1, KEEL_STATUS_CORRUPT,
     "bytes [16, 20) of the data buffer belong to no tensor"},
    {"trailing bytes", NULL, 0, 40, 0, -1, KEEL_STATUS_CORRUPT,
     "8 trailing bytes after the last tensor"},
    {"duplicate key", "{" GOOD_W "," GOOD_B "," GOOD_W "}", 0, 0, 0, -1,
     KEEL_STATUS_CORRUPT, "duplicate key: duplicate object key near '\"w\"'"},
    {"metadata not an object", "{\"__metadata__\":\"x\"," GOOD_W "," GOOD_B
     "}", 0, 0, 0, -1, KEEL_STATUS_CORRUPT,
     "\"__metadata__\" is a string, expected an object of strings"},
    {"metadata value not a string",
     "{\"__metadata__\":{\"epoch\":3}," GOOD_W "," GOOD_B "}", 0, 0, 0, -1,
     KEEL_STATUS_CORRUPT, "the value of 'epoch' is an integer"},
    {"BOOL byte not 0 or 1",
     "{" GOOD_W ",\"b\":{\"dtype\":\"BOOL\",\"shape\":[16],"
     "\"data_offsets\":[16,32]}}", 0, 0, 0, 21, KEEL_STATUS_CORRUPT,
     "BOOL element 5 is 7, expected 0 or 1"},
};

#define NUM_CORRUPTIONS (sizeof(corruptions) / sizeof(corruptions[0]))

static void write_corrupt(const char *path, const struct corruption *c)
{
    const char *h = c->header ? c->header : GOOD_HEADER;
    size_t hl = strlen(h), dl = c->data_len ? c->data_len : 32;
    uint64_t declared = c->declared ? c->declared : hl;
    size_t len = 8 + hl + dl;
    unsigned char *buf = calloc(1, len);

    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(declared >> (8 * i));
    memcpy(buf + 8, h, hl);
    for (size_t i = 0; i < dl; i++)
        buf[8 + hl + i] = (unsigned char)(i & 1); /* valid BOOL bytes too */
    if (c->poke >= 0)
        buf[8 + hl + (size_t)c->poke] = 7;
    write_all(path, buf, c->cut ? c->cut : len);
    free(buf);
}

/* A model-like destination: w F32[2, 2], b I64[2]. */
static keel_state_dict *model_dict(void)
{
    keel_state_dict *sd;
    int64_t s22[2] = {2, 2}, s2[1] = {2};
    keel_tensor *t;

    if (keel_state_dict_create(&sd))
        return NULL;
    t = pattern(KEEL_F32, 2, s22, "cpu:0", 11);
    keel_state_dict_set(sd, "w", t);
    keel_tensor_free(t);
    t = pattern(KEEL_I64, 1, s2, "cpu:1", 12);
    keel_state_dict_set(sd, "b", t);
    keel_tensor_free(t);
    return sd;
}

/* Host copies of every tensor of a dict, concatenated. */
static unsigned char *snapshot(const keel_state_dict *sd, size_t *len)
{
    unsigned char *all = NULL;

    *len = 0;
    for (int64_t i = 0; i < keel_state_dict_count(sd); i++) {
        keel_tensor *t;
        size_t n;
        unsigned char *b;

        keel_state_dict_at(sd, i, NULL, &t);
        b = bytes_of(t, &n);
        all = realloc(all, *len + n + 1);
        memcpy(all + *len, b, n);
        *len += n;
        free(b);
    }
    return all;
}

static void test_good_file_loads(void)
{
    static const struct corruption good = {"good", NULL, 0, 0, 0, -1,
                                           KEEL_STATUS_OK, ""};
    const char *path = tmp_path("good.safetensors");
    keel_state_dict *sd, *model = model_dict();

    /* The corruptions' starting point is itself valid. */
    write_corrupt(path, &good);
    OK(keel_load(path, "cpu:0", &sd));
    CU_ASSERT_EQUAL(keel_state_dict_count(sd), 2);
    OK(keel_state_dict_load_into(model, sd, true));
    CU_ASSERT(same_tensor(keel_state_dict_get(model, "w"),
                          keel_state_dict_get(sd, "w")));
    keel_state_dict_free(sd);
    keel_state_dict_free(model);
}

static void test_corruptions(void)
{
    const char *path = tmp_path("corrupt.safetensors");
    char messages[NUM_CORRUPTIONS][1024];
    keel_memory_stats before, after;

    CU_ASSERT(NUM_CORRUPTIONS >= 12);
    OK(keel_memory_stats_get("cpu:0", &before));
    for (size_t i = 0; i < NUM_CORRUPTIONS; i++) {
        const struct corruption *c = &corruptions[i];
        keel_state_dict *model = model_dict(), *loaded = (void *)1;
        size_t l1, l2;
        unsigned char *s1 = snapshot(model, &l1), *s2;
        keel_status st;
        bool good;

        write_corrupt(path, c);
        st = keel_load(path, "cpu:0", &loaded);
        good = st == c->want && strstr(keel_last_error(), c->part) &&
               strstr(keel_last_error(), path);
        if (!good)
            fprintf(stderr, "\n  corruption '%s': got %s '%s', wanted '%s'\n",
                    c->what, keel_status_name(st), keel_last_error(),
                    c->part);
        CU_ASSERT(good);
        CU_ASSERT_PTR_NULL(loaded);
        snprintf(messages[i], sizeof(messages[i]), "%s", keel_last_error());
        if (getenv("KEEL_TEST_VERBOSE"))
            printf("\n    %-42s -> %s", c->what, messages[i]);
        /* What a model's loader does: load, then load_into; the model is
         * untouched because nothing came back. */
        if (st == KEEL_STATUS_OK) {
            keel_state_dict_load_into(model, loaded, true);
            keel_state_dict_free(loaded);
        }
        s2 = snapshot(model, &l2);
        CU_ASSERT(l1 == l2 && !memcmp(s1, s2, l1));
        free(s1);
        free(s2);
        keel_state_dict_free(model);
    }
    /* Every corruption has its own message. */
    for (size_t i = 0; i < NUM_CORRUPTIONS; i++)
        for (size_t j = i + 1; j < NUM_CORRUPTIONS; j++)
            if (!strcmp(messages[i], messages[j])) {
                fprintf(stderr, "\n  '%s' and '%s' share the message '%s'\n",
                        corruptions[i].what, corruptions[j].what,
                        messages[i]);
                CU_FAIL("two corruptions share a message");
            }
    /* Nothing half-loaded stays on the device. */
    OK(keel_memory_stats_get("cpu:0", &after));
    CU_ASSERT_EQUAL(after.allocated, before.allocated);
    printf("(%zu corruptions) ", NUM_CORRUPTIONS);
}

static void test_load_errors(void)
{
    keel_state_dict *sd = (void *)1;

    ERR(keel_load(tmp_path("does-not-exist"), NULL, &sd),
        KEEL_STATUS_NOT_FOUND, "does-not-exist");
    CU_ASSERT_PTR_NULL(sd);
    ERR(keel_load(tmpdir, NULL, &sd), KEEL_STATUS_IO_ERROR,
        "is not a regular file (it is a directory)");
    /* A FIFO with no writer: refused at once, never waited on (the alarm
     * ends the test run if the open blocks). */
    CU_ASSERT_EQUAL_FATAL(mkfifo(tmp_path("fifo.safetensors"), 0600), 0);
    alarm(20);
    ERR(keel_load(tmp_path("fifo.safetensors"), NULL, &sd),
        KEEL_STATUS_IO_ERROR, "is not a regular file (it is a FIFO");
    alarm(0);
    CU_ASSERT_PTR_NULL(sd);
    unlink(tmp_path("fifo.safetensors"));
    ERR(keel_load("/dev/null", NULL, &sd), KEEL_STATUS_IO_ERROR,
        "(it is a character device)");
    ERR(keel_load(NULL, NULL, &sd), KEEL_STATUS_INVALID_ARGUMENT,
        "path is NULL");
    ERR(keel_load(tmp_path("x"), "nosuchdevice", &sd),
        KEEL_STATUS_NOT_FOUND, "nosuchdevice");
    ERR(keel_save(tmpdir, NULL), KEEL_STATUS_INVALID_ARGUMENT,
        "state dict is NULL");
}

/* ---- load_into ---------------------------------------------------------- */

static void test_load_into(void)
{
    keel_state_dict *model = model_dict(), *src;
    keel_tensor *w_before = keel_tensor_ref(keel_state_dict_get(model, "w"));
    int64_t s22[2] = {2, 2}, s2[1] = {2};
    keel_tensor *t;

    OK(keel_state_dict_create(&src));
    t = pattern(KEEL_F32, 2, s22, "cpu:1", 99);
    keel_state_dict_set(src, "w", t);
    keel_tensor_free(t);
    t = pattern(KEEL_I64, 1, s2, "cpu:0", 98);
    keel_state_dict_set(src, "b", t);
    keel_tensor_free(t);

    OK(keel_state_dict_load_into(model, src, true));
    /* Same tensor objects, same devices, new values. */
    CU_ASSERT_PTR_EQUAL(keel_state_dict_get(model, "w"), w_before);
    CU_ASSERT(on_device(keel_state_dict_get(model, "w"), "cpu:0"));
    CU_ASSERT(on_device(keel_state_dict_get(model, "b"), "cpu:1"));
    CU_ASSERT(same_tensor(keel_state_dict_get(model, "w"),
                          keel_state_dict_get(src, "w")));
    CU_ASSERT(same_tensor(keel_state_dict_get(model, "b"),
                          keel_state_dict_get(src, "b")));
    keel_tensor_free(w_before);
    keel_state_dict_free(src);
    keel_state_dict_free(model);
}

/* Every check happens before the first write. */
static void test_load_into_errors(void)
{
    keel_state_dict *model = model_dict(), *src;
    int64_t s22[2] = {2, 2}, s2[1] = {2}, s3[1] = {3}, s1[1] = {1};
    keel_tensor *t, *e;
    size_t l1, l2;
    unsigned char *s_before = snapshot(model, &l1), *s_after;

    OK(keel_state_dict_create(&src));
    /* "w" is fine and comes first: it must not be written either. */
    t = pattern(KEEL_F32, 2, s22, "cpu:0", 55);
    keel_state_dict_set(src, "w", t);
    keel_tensor_free(t);
    t = pattern(KEEL_I32, 1, s2, "cpu:0", 56);
    keel_state_dict_set(src, "b", t);
    keel_tensor_free(t);
    ERR(keel_state_dict_load_into(model, src, true),
        KEEL_STATUS_INVALID_ARGUMENT,
        "dtype mismatch for 'b': destination int64[2], source int32[2]");
    t = pattern(KEEL_I64, 1, s3, "cpu:0", 57);
    keel_state_dict_set(src, "b", t);
    keel_tensor_free(t);
    ERR(keel_state_dict_load_into(model, src, false),
        KEEL_STATUS_INVALID_ARGUMENT,
        "shape mismatch for 'b': destination int64[2], source int64[3]");
    t = pattern(KEEL_I64, 1, s2, "cpu:0", 58);
    keel_state_dict_set(src, "b", t);
    keel_tensor_free(t);
    keel_state_dict_set(src, "extra.weight", t);
    ERR(keel_state_dict_load_into(model, src, true),
        KEEL_STATUS_INVALID_ARGUMENT,
        "1 unexpected key (in the source, not in the destination): "
        "'extra.weight'");
    OK(keel_state_dict_remove(src, "extra.weight"));
    OK(keel_state_dict_remove(src, "b"));
    ERR(keel_state_dict_load_into(model, src, true),
        KEEL_STATUS_INVALID_ARGUMENT,
        "1 missing key (in the destination, not in the source): 'b'");
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "nothing was copied"));
    s_after = snapshot(model, &l2);
    CU_ASSERT(l1 == l2 && !memcmp(s_before, s_after, l1));
    free(s_after);

    /* An expanded destination cannot be written. */
    t = pattern(KEEL_F32, 1, s1, "cpu:0", 3);
    OK(keel_expand(t, 1, s3, &e));
    keel_tensor_free(t);
    OK(keel_state_dict_set(model, "expanded", e));
    keel_tensor_free(e);
    t = pattern(KEEL_F32, 1, s3, "cpu:0", 4);
    keel_state_dict_set(src, "expanded", t);
    keel_tensor_free(t);
    ERR(keel_state_dict_load_into(model, src, false),
        KEEL_STATUS_INVALID_ARGUMENT, "has overlapping elements");
    OK(keel_state_dict_remove(model, "expanded"));
    OK(keel_state_dict_remove(src, "expanded"));

    /* Not strict: "b" (missing from src) is skipped, "w" copied. */
    OK(keel_state_dict_load_into(model, src, false));
    CU_ASSERT(same_tensor(keel_state_dict_get(model, "w"),
                          keel_state_dict_get(src, "w")));
    s_after = snapshot(model, &l2);
    CU_ASSERT(!memcmp(s_before + 16, s_after + 16, 16)); /* b unchanged */
    free(s_after);
    ERR(keel_state_dict_load_into(NULL, src, false),
        KEEL_STATUS_INVALID_ARGUMENT, "destination is NULL");
    free(s_before);
    keel_state_dict_free(src);
    keel_state_dict_free(model);
}

/* A destination that is a non-contiguous view writes through to its base. */
/* load_into is an in-place write: a graph that saved the old values then
 * refuses backward, as after an optimizer step. */
static void test_load_into_versions(void)
{
    int64_t shape[1] = {3};
    float v[3] = {1, 2, 3}, w[3] = {4, 5, 6};
    keel_tensor *x = NULL, *src = NULL, *sq = NULL, *y = NULL;
    keel_state_dict *dst = NULL, *from = NULL;

    OK(keel_tensor_from_host(v, KEEL_F32, 1, shape, "cpu", &x));
    OK(keel_tensor_set_stop_gradient(x, false));
    OK(keel_tensor_from_host(w, KEEL_F32, 1, shape, "cpu", &src));
    OK(keel_multiply(x, x, &sq)); /* saves x */
    OK(keel_sum(sq, 0, NULL, false, &y));
    OK(keel_state_dict_create(&dst));
    OK(keel_state_dict_create(&from));
    OK(keel_state_dict_set(dst, "x", x));
    OK(keel_state_dict_set(from, "x", src));
    OK(keel_state_dict_load_into(dst, from, true));
    CU_ASSERT_EQUAL(keel_backward(y, NULL, false),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "modified in place"));
    keel_state_dict_free(dst);
    keel_state_dict_free(from);
    keel_tensor_free(y);
    keel_tensor_free(sq);
    keel_tensor_free(src);
    keel_tensor_free(x);
}

static void test_load_into_strided(void)
{
    int64_t s34[2] = {3, 4}, s43[2] = {4, 3};
    keel_tensor *base, *view, *t;
    keel_state_dict *dst, *src;
    float host[12], want[12];

    OK(keel_zeros(2, s34, KEEL_F32, "cpu:1", &base));
    OK(keel_transpose(base, 0, 1, &view));
    OK(keel_state_dict_create(&dst));
    OK(keel_state_dict_create(&src));
    OK(keel_state_dict_set(dst, "w", view));
    for (int i = 0; i < 12; i++)
        host[i] = (float)i + 0.25f; /* [4, 3] row-major */
    OK(keel_tensor_from_host(host, KEEL_F32, 2, s43, "cpu:0", &t));
    OK(keel_state_dict_set(src, "w", t));
    OK(keel_state_dict_load_into(dst, src, true));
    OK(keel_tensor_to_host(base, want, sizeof(want)));
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++)
            CU_ASSERT_EQUAL(want[r * 4 + c], host[c * 3 + r]);
    keel_tensor_free(t);
    keel_tensor_free(view);
    keel_tensor_free(base);
    keel_state_dict_free(dst);
    keel_state_dict_free(src);
}

/* Temporaries named "<name>.tmp.*" in tmpdir. */
static int count_temps_of(const char *name)
{
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    size_t nl = strlen(name);
    int n = 0;

    if (!d)
        return -1;
    while ((e = readdir(d)))
        n += !strncmp(e->d_name, name, nl) &&
             !strncmp(e->d_name + nl, ".tmp.", 5);
    closedir(d);
    return n;
}

/* A pid that existed and is gone now (a reaped child). */
static pid_t dead_pid(void)
{
    pid_t pid = fork();

    if (pid == 0)
        _exit(0);
    waitpid(pid, NULL, 0);
    return pid;
}

static bool exists(const char *path)
{
    struct stat sb;

    return !lstat(path, &sb);
}

/* Planted temporaries: only this target's, of a writer that is gone. */
static void test_stale_temps_removed(void)
{
    keel_state_dict *sd = model_dict();
    pid_t gone = dead_pid();
    char stale[600], live[600], other[600], odd[600], locked[600];
    int fd;

    snprintf(stale, sizeof(stale), "%s.tmp.%ld.aB3xYz",
             tmp_path("stale.safetensors"), (long)gone);
    /* pid 1 always exists. */
    snprintf(live, sizeof(live), "%s.tmp.1.aB3xYz",
             tmp_path("stale.safetensors"));
    snprintf(other, sizeof(other), "%s.tmp.%ld.aB3xYz",
             tmp_path("other.safetensors"), (long)gone);
    snprintf(odd, sizeof(odd), "%s.tmp.%ld.seven77",
             tmp_path("stale.safetensors"), (long)gone);
    snprintf(locked, sizeof(locked), "%s.tmp.%ld.Qq9Qq9",
             tmp_path("stale.safetensors"), (long)gone);
    write_all(stale, "x", 1);
    write_all(live, "x", 1);
    write_all(other, "x", 1);
    write_all(odd, "x", 1);
    write_all(locked, "x", 1);
    /* Someone still holds this one's lock (a writer in another pid
     * namespace, say): it must stay although its pid is unknown here. */
    fd = open(locked, O_RDONLY);
    CU_ASSERT_FATAL(fd >= 0 && !flock(fd, LOCK_EX));
    CU_ASSERT_EQUAL(count_temps_of("stale.safetensors"), 4);

    OK(keel_save(tmp_path("stale.safetensors"), sd));
    CU_ASSERT_FALSE(exists(stale));
    CU_ASSERT_TRUE(exists(live));
    CU_ASSERT_TRUE(exists(other));
    CU_ASSERT_TRUE(exists(odd));
    CU_ASSERT_TRUE(exists(locked));
    CU_ASSERT_EQUAL(count_temps_of("stale.safetensors"), 3);
    close(fd);
    unlink(live);
    unlink(other);
    unlink(odd);
    unlink(locked);
    unlink(tmp_path("stale.safetensors"));
    keel_state_dict_free(sd);
}

/* A save SIGKILLed mid-write leaves its temporary; the next save of the
 * same target removes it. The child saves a 32 MiB dict in a loop and is
 * killed as soon as one of its temporaries exists. */
static void test_killed_save_cleaned_up(void)
{
    int64_t big[1] = {8 << 20};
    keel_state_dict *sd;
    keel_tensor *t;
    int left = 0;

    OK(keel_state_dict_create(&sd));
    OK(keel_zeros(1, big, KEEL_F32, "cpu:0", &t));
    OK(keel_state_dict_set(sd, "w", t));
    keel_tensor_free(t);
    for (int attempt = 0; attempt < 20 && !left; attempt++) {
        pid_t child = fork();

        CU_ASSERT_FATAL(child >= 0);
        if (child == 0) {
            for (;;)
                keel_save(tmp_path("killed.safetensors"), sd);
        }
        for (int i = 0; i < 20000 && !count_temps_of("killed.safetensors");
             i++)
            usleep(100);
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        left = count_temps_of("killed.safetensors");
    }
    CU_ASSERT_FATAL(left == 1);
    OK(keel_save(tmp_path("killed.safetensors"), sd));
    CU_ASSERT_EQUAL(count_temps_of("killed.safetensors"), 0);
    unlink(tmp_path("killed.safetensors"));
    keel_state_dict_free(sd);
}

/*
 * Out of device memory while staging a later entry: every entry, including
 * the ones before it, keeps its old bytes. cpu:0 gets a memory limit and is
 * then filled with raw allocations, so that making the non-contiguous
 * source of "b" readable (a 256 KiB copy) cannot succeed; "a" comes first
 * and needs no memory at all, so a load that wrote as it went would have
 * overwritten it. Runs last: it restarts the runtime under the limit.
 */
static void test_load_into_oom_leaves_model(void)
{
    int64_t s16[2] = {16, 16}, s256[2] = {256, 256}, s8[1] = {8};
    keel_tensor *t, *base, *view;
    keel_state_dict *dst, *src;
    unsigned char *before, *after;
    size_t l1, l2;
    keel_dptr chunk[256];
    keel_place cpu0;
    int nchunks = 0;

    keel_shutdown();
    setenv("KEEL_CPU_MEM_LIMIT", "2M", 1);
    OK(keel_place_parse("cpu:0", &cpu0));
    OK(keel_state_dict_create(&dst));
    OK(keel_state_dict_create(&src));
    /* dst: a contiguous, b a transposed view, c contiguous. */
    t = pattern(KEEL_F32, 2, s16, "cpu:0", 1);
    OK(keel_state_dict_set(dst, "a", t));
    keel_tensor_free(t);
    base = pattern(KEEL_F32, 2, s256, "cpu:0", 2);
    OK(keel_transpose(base, 0, 1, &view));
    OK(keel_state_dict_set(dst, "b", view));
    keel_tensor_free(view);
    keel_tensor_free(base);
    t = pattern(KEEL_I64, 1, s8, "cpu:0", 3);
    OK(keel_state_dict_set(dst, "c", t));
    keel_tensor_free(t);
    /* src: same names and shapes, other bytes; b is non-contiguous. */
    t = pattern(KEEL_F32, 2, s16, "cpu:0", 4);
    OK(keel_state_dict_set(src, "a", t));
    keel_tensor_free(t);
    base = pattern(KEEL_F32, 2, s256, "cpu:0", 5);
    OK(keel_transpose(base, 0, 1, &view));
    OK(keel_state_dict_set(src, "b", view));
    keel_tensor_free(view);
    keel_tensor_free(base);
    t = pattern(KEEL_I64, 1, s8, "cpu:0", 6);
    OK(keel_state_dict_set(src, "c", t));
    keel_tensor_free(t);
    before = snapshot(dst, &l1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(before);

    /* Fill cpu:0 to within 64 KiB of its limit. */
    OK(keel_memory_empty_cache("cpu:0"));
    while (nchunks < 256 &&
           keel_mem_alloc(cpu0, 64 << 10, &chunk[nchunks]) == KEEL_STATUS_OK)
        nchunks++;
    CU_ASSERT_FATAL(nchunks > 0 && nchunks < 256);
    ERR(keel_state_dict_load_into(dst, src, true), KEEL_STATUS_OUT_OF_MEMORY,
        "staging 'b'");
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), "nothing was copied"));
    while (nchunks > 0)
        keel_mem_free(cpu0, chunk[--nchunks]);
    after = snapshot(dst, &l2);
    CU_ASSERT_FATAL(after != NULL && l1 == l2);
    CU_ASSERT(!memcmp(before, after, l1));
    free(after);

    /* With the memory back, the same load succeeds: the setup above was
     * a real load, failed only by the memory. */
    OK(keel_state_dict_load_into(dst, src, true));
    for (int i = 0; i < 3; i++) {
        const char *n = i == 0 ? "a" : i == 1 ? "b" : "c";

        CU_ASSERT(same_tensor(keel_state_dict_get(dst, n),
                              keel_state_dict_get(src, n)));
    }
    free(before);
    keel_state_dict_free(dst);
    keel_state_dict_free(src);
    keel_shutdown();
    unsetenv("KEEL_CPU_MEM_LIMIT");
}

/* ---- atomic save -------------------------------------------------------- */

static void test_atomic_save(void)
{
    static const struct {
        const char *step;
        const char *part;
    } steps[] = {
        {"create", "creating the temporary file"},
        {"header", "fwrite (header)"},
        {"data", "fwrite (data)"},
        {"flush", "fflush"},
        {"fsync", "at fsync of"},
        {"close", "fclose"},
        {"dirsync", "fsync of the folder"},
        {"rename", "rename"},
    };
    const char *path = tmp_path("model.safetensors");
    keel_state_dict *old = model_dict(), *fresh = rich_dict(), *back;
    unsigned char *before, *now;
    size_t lb, ln;

    OK(keel_save(path, old));
    before = read_all(path, &lb);
    CU_ASSERT_PTR_NOT_NULL_FATAL(before);
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        setenv("KEEL_TEST_FAIL_SAVE_AT", steps[i].step, 1);
        ERR(keel_save(path, fresh), KEEL_STATUS_IO_ERROR, steps[i].part);
        CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(),
                                      "the previous file, if any, is "
                                      "unchanged"));
        unsetenv("KEEL_TEST_FAIL_SAVE_AT");
        now = read_all(path, &ln);
        CU_ASSERT(now && ln == lb && !memcmp(before, now, lb));
        free(now);
        CU_ASSERT_EQUAL(count_temp_files(), 0);
    }
    /* The old file still loads as it was. */
    OK(keel_load(path, "cpu:0", &back));
    check_same_dict(old, back, NULL);
    keel_state_dict_free(back);

    /* Without a fault the new contents replace the old. */
    OK(keel_save(path, fresh));
    CU_ASSERT_EQUAL(count_temp_files(), 0);
    OK(keel_load(path, "cpu:0", &back));
    check_same_dict(fresh, back, NULL);
    keel_state_dict_free(back);

    /* No folder: nothing is created. */
    ERR(keel_save(tmp_path("no/such/dir/m.safetensors"), fresh),
        KEEL_STATUS_IO_ERROR, "No such file or directory");
    /* The target is a folder: rename fails, the temp file goes. */
    mkdir(tmp_path("adir"), 0755);
    ERR(keel_save(tmp_path("adir"), fresh), KEEL_STATUS_IO_ERROR, "rename");
    CU_ASSERT_EQUAL(count_temp_files(), 0);
    rmdir(tmp_path("adir"));

    free(before);
    keel_state_dict_free(old);
    keel_state_dict_free(fresh);
}

static void test_save_permissions(void)
{
    const char *path = tmp_path("perm.safetensors");
    keel_state_dict *sd = model_dict();
    struct stat sb;
    mode_t mask = umask(022);

    unlink(path);
    OK(keel_save(path, sd));
    CU_ASSERT(!stat(path, &sb) && (sb.st_mode & 0777) == 0644);
    /* An existing file keeps its mode. */
    chmod(path, 0600);
    OK(keel_save(path, sd));
    CU_ASSERT(!stat(path, &sb) && (sb.st_mode & 0777) == 0600);
    umask(mask);
    keel_state_dict_free(sd);
}

static void test_unwritable_dir(void)
{
    char dir[512];
    keel_state_dict *sd = model_dict();

    snprintf(dir, sizeof(dir), "%s/ro", tmpdir);
    mkdir(dir, 0755);
    strcat(dir, "/m.safetensors");
    OK(keel_save(dir, sd));
    *strrchr(dir, '/') = '\0';
    chmod(dir, 0555);
    strcat(dir, "/m.safetensors");
    ERR(keel_save(dir, sd), KEEL_STATUS_IO_ERROR, "Permission denied");
    unlink(dir);
    *strrchr(dir, '/') = '\0';
    chmod(dir, 0755);
    strcat(dir, "/m.safetensors");
    unlink(dir);
    *strrchr(dir, '/') = '\0';
    rmdir(dir);
    keel_state_dict_free(sd);
}

/* ---- main --------------------------------------------------------------- */

static int suite_init(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/keel-test-io-XXXXXX");
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
        {"dict: set/get/remove/order", test_dict_basics},
        {"dict: 5000 names", test_dict_many},
        {"dict: metadata", test_metadata},
        {"round trip: every dtype, 0-d, empty, views, devices",
         test_round_trip},
        {"round trip: empty dict and 1000 tensors",
         test_round_trip_empty_and_many},
        {"file layout byte by byte", test_file_layout},
        {"reads the reference writer's file", test_reference_file},
        {"the corruption base file loads", test_good_file_loads},
        {"corrupt files rejected, each with its message", test_corruptions},
        {"load errors", test_load_errors},
        {"load_into copies in place", test_load_into},
        {"load_into checks before writing", test_load_into_errors},
        {"load_into a strided destination", test_load_into_strided},
        {"load_into advances the version (autograd sees it)",
         test_load_into_versions},
        {"atomic save under injected faults", test_atomic_save},
        {"save keeps permissions", test_save_permissions},
        {"stale temporaries of the target are removed",
         test_stale_temps_removed},
        {"a SIGKILLed save's temporary is removed by the next",
         test_killed_save_cleaned_up},
        {"load_into out of memory leaves the model unchanged",
         test_load_into_oom_leaves_model},
    };
    CU_pSuite suite;
    unsigned failed;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    suite = CU_add_suite("io", suite_init, suite_clean);
    for (size_t i = 0; suite && i < sizeof(tests) / sizeof(tests[0]); i++)
        CU_add_test(suite, tests[i].name, tests[i].fn);
    /* root writes into any folder: the check would prove nothing (the
     * injected faults cover the failure path), so it is not run. */
    if (suite && geteuid() != 0)
        CU_add_test(suite, "save into an unwritable folder",
                    test_unwritable_dir);
    else
        printf("SKIPPED (not counted): save into an unwritable folder, "
               "because the tests run as root\n");
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed() +
             CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return failed ? 1 : 0;
}
