/*
 * Loading a GPU plugin must not map its heavy parts. The plugin file
 * discovery loads is a small front (plugins/gpu/front/gpu_front.c); the
 * backend (runtime, kernels, the CUDA runtime or libamdhip64) is loaded by
 * the front only when the driver reports a device, or with
 * KEEL_GPU_BACKEND=always. Inside the backend, NCCL / RCCL are dlopened
 * by the first collective call and cuBLAS / rocBLAS by the first GEMM.
 * Everything is read from /proc/self/maps after discovery has loaded and
 * initialised the plugin. One program, four modes (meson tests
 * cuda-lazy-* and hip-lazy-*):
 *
 *   (no argument)   the default setting. Without a device: the plugin is
 *                   listed with 0 devices and a reason, neither the
 *                   backend nor the vendor runtime is mapped, and the
 *                   front's own table answers every call with the status
 *                   the backend gives without a device. With a device: the
 *                   backend is mapped, and the first collective call loads
 *                   NCCL.
 *   --backend       run with KEEL_GPU_BACKEND=always: the backend is
 *                   mapped (so the check above can fail), still without
 *                   NCCL or cuBLAS; without a device it reports 0 devices
 *                   itself and a collective call is refused.
 *   --missing FRONT a copy of the front file alone in a temporary folder,
 *                   KEEL_GPU_BACKEND=always: the backend file is not
 *                   there, and the plugin must still load with 0 devices
 *                   and a reason naming it.
 *   --corrupt FRONT the same, with a backend file that is not a shared
 *                   library.
 *   --mock-device   LD_LIBRARY_PATH holds a mock driver (CUDA only:
 *                   mockdriver/mock_libcuda.c, its path in
 *                   KEEL_TEST_MOCK_DRIVER) that reports a device: the
 *                   front must open that driver and load the backend (which
 *                   then finds the mock is no driver and reports 0 devices
 *                   itself). This is the one way to reach the front's
 *                   "device present" path without a GPU.
 *   --mock-front WHY the mock driver set to report no device (or the
 *                   backend switched off): the front answers, the backend
 *                   is not mapped, and the reason contains WHY.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/Basic.h>
#include <keel/runtime.h>

/* The same test serves the HIP plugin (plugins/hip/tests). */
#ifndef GPU_PLUGIN
#define GPU_PLUGIN "cuda"                  /* name, and file libkeel-NAME */
#define GPU_API "CUDA"                     /* the runtime named in reasons */
#define GPU_BACKEND "keel-cuda-backend.so" /* the backend's file name */
#define GPU_RUNTIME_LIB "libcudart"        /* a shared vendor runtime */
#define GPU_RUNTIME_NEEDED 0 /* 1: the backend always maps GPU_RUNTIME_LIB */
#define GPU_COLL_LIB "libnccl"
#define GPU_BLAS_LIB "libcublas"
#endif

enum mode {
    MODE_DEFAULT,
    MODE_BACKEND,
    MODE_MISSING,
    MODE_CORRUPT,
    MODE_MOCK_DEVICE,
    MODE_MOCK_FRONT
};

static enum mode mode = MODE_DEFAULT;
static const char *mock_why = "";
static char tmp_dir[] = "/tmp/keel-lazy-XXXXXX";
static char tmp_front[sizeof(tmp_dir) + 64];
static char tmp_backend[sizeof(tmp_dir) + 64];

static bool mapped(const char *name)
{
    char line[512];
    bool found = false;
    FILE *f = fopen("/proc/self/maps", "r");

    while (f && !found && fgets(line, sizeof(line), f))
        found = strstr(line, name) != NULL;
    if (f)
        fclose(f);
    return found;
}

static int gpu_index(keel_plugin_info *info)
{
    for (int i = 0; i < keel_plugin_count(); i++)
        if (keel_plugin_get_info(i, info) == KEEL_STATUS_OK && info->name &&
            !strcmp(info->name, GPU_PLUGIN))
            return i;
    return -1;
}

static void test_nothing_heavy_mapped_at_load(void)
{
    keel_plugin_info info;
    int idx = gpu_index(&info);

    CU_ASSERT_FATAL(idx >= 0);
    CU_ASSERT_TRUE_FATAL(info.loaded);
    CU_ASSERT_TRUE(mapped("libkeel-" GPU_PLUGIN));
    CU_ASSERT_FALSE(mapped(GPU_COLL_LIB));
    CU_ASSERT_FALSE(mapped(GPU_BLAS_LIB));
}

/* Default setting: the backend is mapped exactly when there is a device. */
static void test_backend_only_with_a_device(void)
{
    keel_plugin_info info;
    int idx = gpu_index(&info);

    CU_ASSERT_FATAL(idx >= 0);
    if (info.device_count > 0) {
        CU_ASSERT_TRUE(mapped(GPU_BACKEND));
        return;
    }
    CU_ASSERT_FALSE(mapped(GPU_BACKEND));
    CU_ASSERT_FALSE(mapped(GPU_RUNTIME_LIB));
    CU_ASSERT_EQUAL(info.device_count, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(info.reason);
    CU_ASSERT_PTR_NOT_NULL(strstr(info.reason, GPU_API));
    CU_ASSERT_PTR_NOT_NULL_FATAL(info.description);
    CU_ASSERT_PTR_NOT_NULL(strstr(info.description, "not loaded"));
    printf("\n    reason: %s\n    ", info.reason);
}

/* Default setting, no device: the front's own table. Every call answers as
 * the backend does without a device (test_cuda_plugin.c asserts the same
 * of the backend). */
static void test_front_table_answers(void)
{
    keel_plugin_info info;
    int idx = gpu_index(&info);
    const keel_plugin_api *api;
    keel_device_props props;
    keel_memory_info mi;
    keel_dptr d = 1;
    keel_stream s = (keel_stream)&d;
    keel_event ev = (keel_event)&d;
    keel_place pl;
    int32_t n = -1;

    CU_ASSERT_FATAL(idx >= 0);
    if (info.device_count > 0) {
        printf("SKIPPED (not counted): a device is present, so the backend "
               "answers\n");
        return;
    }
    api = keel_plugin_table(idx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_STRING_EQUAL(api->name, GPU_PLUGIN);
    CU_ASSERT_STRING_EQUAL(api->device_type, "gpu");
    CU_ASSERT_STRING_EQUAL(api->version, "0.1.0");
    CU_ASSERT_PTR_NULL(api->kernel);
    CU_ASSERT_PTR_NULL(api->collective);
    CU_ASSERT_PTR_NULL(api->profiler);
    CU_ASSERT_EQUAL(keel_device_count(GPU_PLUGIN), 0);
    CU_ASSERT_EQUAL(keel_place_parse(GPU_PLUGIN ":0", &pl),
                    KEEL_STATUS_INVALID_DEVICE);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), info.reason));

    CU_ASSERT_EQUAL(api->device->get_device_count(&n), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(api->device->get_device_count(NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    props.struct_size = sizeof(props);
    CU_ASSERT_EQUAL(api->device->get_device_props(0, &props),
                    KEEL_STATUS_INVALID_DEVICE);
    CU_ASSERT_EQUAL(api->device->get_device_props(0, NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    props.struct_size = 0;
    CU_ASSERT_EQUAL(api->device->get_device_props(0, &props),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(api->device->synchronize(0), KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->memory->alloc(0, 16, &d),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(d, 0);
    CU_ASSERT_EQUAL(api->memory->alloc(0, 16, NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(api->memory->free(0, 64), KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->memory->memset(0, 64, 0, 16),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->memory->memset_async(0, NULL, 64, 0, 16),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->memory->copy_h2d(0, 64, &n, sizeof(n)),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->memory->copy_d2h(0, &n, 64, sizeof(n)),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->memory->copy_d2d(0, 64, 128, 16),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->memory->copy_h2d_async(0, NULL, 64, &n, sizeof(n)),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->memory->copy_d2h_async(0, NULL, &n, 64, sizeof(n)),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->memory->copy_d2d_async(0, NULL, 64, 128, 16),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->memory->get_memory_info(0, &mi),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->memory->get_memory_info(0, NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(api->stream->stream_create(0, 0, &s),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT_EQUAL(api->stream->stream_create(0, 0, NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(api->stream->stream_destroy(0, NULL),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->stream->stream_synchronize(0, NULL),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->stream->stream_query(0, NULL),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->stream->stream_wait_event(0, NULL, NULL),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->stream->event_create(0, &ev),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_PTR_NULL(ev);
    CU_ASSERT_EQUAL(api->stream->event_create(0, NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(api->stream->event_destroy(0, NULL),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->stream->event_record(0, NULL, NULL),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->stream->event_query(0, NULL),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->stream->event_synchronize(0, NULL),
                    KEEL_STATUS_NOT_INITIALIZED);
    /* finalize + init again: still unavailable, still no device, still
     * nothing heavy mapped. */
    CU_ASSERT_EQUAL(api->device->finalize(), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(api->device->init(), KEEL_STATUS_UNAVAILABLE);
    CU_ASSERT_EQUAL(api->device->get_device_count(&n), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_FALSE(mapped(GPU_BACKEND));
    CU_ASSERT_FALSE(mapped(GPU_RUNTIME_LIB));
}

/* KEEL_GPU_BACKEND=always: the backend is there (as the plugin was before
 * the split), and reports on its own. */
static void test_backend_mapped_when_asked(void)
{
    keel_plugin_info info;
    int idx = gpu_index(&info);

    CU_ASSERT_FATAL(idx >= 0);
    CU_ASSERT_TRUE_FATAL(info.loaded);
    CU_ASSERT_TRUE(mapped(GPU_BACKEND));
#if GPU_RUNTIME_NEEDED
    CU_ASSERT_TRUE(mapped(GPU_RUNTIME_LIB));
#endif
    CU_ASSERT_PTR_NOT_NULL_FATAL(info.description);
    CU_ASSERT_PTR_NULL(strstr(info.description, "not loaded"));
    if (info.device_count == 0) {
        CU_ASSERT_PTR_NOT_NULL_FATAL(info.reason);
        CU_ASSERT_PTR_NOT_NULL(strstr(info.reason, GPU_API));
        printf("\n    reason: %s\n    ", info.reason);
    }
}

static void test_first_collective_loads_nccl(void)
{
    keel_plugin_info info;
    const keel_plugin_api *api;
    keel_comm_id id;
    keel_place pl;
    int idx = gpu_index(&info);

    CU_ASSERT_FATAL(idx >= 0);
    api = keel_plugin_table(idx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    if (!api->collective) {
        printf("SKIPPED (not counted): no collective group (built without "
               "NCCL, or the backend is not loaded)\n");
        return;
    }
    if (info.device_count == 0) {
        /* No device: refused before NCCL is needed. */
        CU_ASSERT_NOT_EQUAL(api->collective->get_unique_id(&id),
                            KEEL_STATUS_OK);
        CU_ASSERT_NOT_EQUAL(api->collective->group_start(), KEEL_STATUS_OK);
        CU_ASSERT_FALSE(mapped(GPU_COLL_LIB));
        printf("SKIPPED (not counted): no GPU, so the first collective "
               "call loading " GPU_COLL_LIB " is not exercised\n");
        return;
    }
    CU_ASSERT_EQUAL_FATAL(keel_place_parse(GPU_PLUGIN ":0", &pl),
                          KEEL_STATUS_OK);
    if (keel_comm_get_unique_id(pl, &id) != KEEL_STATUS_OK)
        fprintf(stderr, "\n  %s\n", keel_last_error());
    CU_ASSERT_EQUAL(keel_comm_get_unique_id(pl, &id), KEEL_STATUS_OK);
    CU_ASSERT_TRUE(mapped(GPU_COLL_LIB));
}

/* --missing / --corrupt: a backend that does not load gives 0 devices and
 * a reason, never a crash. */
static void test_broken_backend(void)
{
    keel_plugin_info info;
    int idx = gpu_index(&info);

    CU_ASSERT_FATAL(idx >= 0);
    CU_ASSERT_TRUE_FATAL(info.loaded);
    CU_ASSERT_PTR_NOT_NULL(strstr(info.path, tmp_dir));
    CU_ASSERT_EQUAL(info.device_count, 0);
    CU_ASSERT_EQUAL(keel_device_count(GPU_PLUGIN), 0);
    CU_ASSERT_FALSE(mapped(GPU_BACKEND));
    CU_ASSERT_PTR_NOT_NULL_FATAL(info.reason);
    CU_ASSERT_PTR_NOT_NULL(strstr(info.reason, GPU_API));
    CU_ASSERT_PTR_NOT_NULL(strstr(info.reason, "KEEL_GPU_BACKEND=always"));
    CU_ASSERT_PTR_NOT_NULL(strstr(info.reason, GPU_BACKEND));
    if (mode == MODE_MISSING)
        CU_ASSERT_PTR_NOT_NULL(strstr(info.reason, "No such file"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(info.description);
    CU_ASSERT_PTR_NOT_NULL(strstr(info.description, "not loaded"));
    printf("\n    reason: %s\n    ", info.reason);
}

/* --mock-device: the driver the front opened is the mock (its file is
 * KEEL_TEST_MOCK_DRIVER), and a device there means the backend is loaded. */
static void test_mock_device_loads_backend(void)
{
    const char *mock_driver = getenv("KEEL_TEST_MOCK_DRIVER");
    keel_plugin_info info;
    int idx = gpu_index(&info);

    CU_ASSERT_FATAL(idx >= 0);
    CU_ASSERT_TRUE_FATAL(info.loaded);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mock_driver);
    CU_ASSERT_TRUE(mapped(mock_driver));
    CU_ASSERT_TRUE(mapped(GPU_BACKEND));
    CU_ASSERT_FALSE(mapped(GPU_COLL_LIB));
    CU_ASSERT_FALSE(mapped(GPU_BLAS_LIB));
    CU_ASSERT_PTR_NOT_NULL_FATAL(info.description);
    CU_ASSERT_PTR_NULL(strstr(info.description, "not loaded"));
    /* The backend's own probe does not take the mock for a driver. */
    if (info.device_count == 0) {
        CU_ASSERT_PTR_NOT_NULL_FATAL(info.reason);
        CU_ASSERT_PTR_NOT_NULL(strstr(info.reason, GPU_API));
        printf("\n    reason (the backend's): %s\n    ", info.reason);
    }
}

/* --mock-front WHY: the front answers, with WHY in its reason. */
static void test_mock_front_answers(void)
{
    keel_plugin_info info;
    int idx = gpu_index(&info);

    CU_ASSERT_FATAL(idx >= 0);
    CU_ASSERT_TRUE_FATAL(info.loaded);
    CU_ASSERT_EQUAL(info.device_count, 0);
    CU_ASSERT_FALSE(mapped(GPU_BACKEND));
    CU_ASSERT_PTR_NOT_NULL_FATAL(info.reason);
    CU_ASSERT_PTR_NOT_NULL(strstr(info.reason, GPU_API));
    CU_ASSERT_PTR_NOT_NULL(strstr(info.reason, mock_why));
    CU_ASSERT_PTR_NOT_NULL_FATAL(info.description);
    CU_ASSERT_PTR_NOT_NULL(strstr(info.description, "not loaded"));
    CU_ASSERT_PTR_NULL(keel_plugin_table(idx)->kernel);
    printf("\n    reason: %s\n    ", info.reason);
}

static int copy_file(const char *from, const char *to)
{
    char buf[65536];
    ssize_t n = 0;
    int in = open(from, O_RDONLY), out;

    if (in < 0)
        return -1;
    out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    if (out < 0) {
        close(in);
        return -1;
    }
    while ((n = read(in, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)n) != n) {
            n = -1;
            break;
        }
    close(in);
    if (close(out) != 0)
        n = -1;
    return n < 0 ? -1 : 0;
}

/* The front alone in a fresh folder (plus, for --corrupt, a backend file
 * of text), and discovery pointed at that folder only. */
static int setup_broken(const char *front_path)
{
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return -1;
    }
    snprintf(tmp_front, sizeof(tmp_front), "%s/libkeel-%s.so", tmp_dir,
             GPU_PLUGIN);
    snprintf(tmp_backend, sizeof(tmp_backend), "%s/%s", tmp_dir,
             GPU_BACKEND);
    if (copy_file(front_path, tmp_front)) {
        fprintf(stderr, "cannot copy %s to %s: %s\n", front_path, tmp_front,
                strerror(errno));
        return -1;
    }
    if (mode == MODE_CORRUPT) {
        FILE *f = fopen(tmp_backend, "w");
        if (!f || fputs("this is not a shared library\n", f) < 0 ||
            fclose(f)) {
            perror(tmp_backend);
            return -1;
        }
    }
    setenv("KEEL_PLUGIN_PATH", tmp_dir, 1);
    setenv("KEEL_PLUGIN_DEFAULT_PATHS", "0", 1);
    setenv("KEEL_GPU_BACKEND", "always", 1);
    return 0;
}

static void cleanup_broken(void)
{
    unlink(tmp_backend);
    unlink(tmp_front);
    rmdir(tmp_dir);
}

int main(int argc, char **argv)
{
    CU_pSuite suite;
    unsigned failed;

    if (argc == 2 && !strcmp(argv[1], "--backend"))
        mode = MODE_BACKEND;
    else if (argc == 3 && !strcmp(argv[1], "--missing"))
        mode = MODE_MISSING;
    else if (argc == 3 && !strcmp(argv[1], "--corrupt"))
        mode = MODE_CORRUPT;
    else if (argc == 2 && !strcmp(argv[1], "--mock-device"))
        mode = MODE_MOCK_DEVICE;
    else if (argc == 3 && !strcmp(argv[1], "--mock-front")) {
        mode = MODE_MOCK_FRONT;
        mock_why = argv[2];
    } else if (argc != 1) {
        fprintf(stderr, "usage: %s [--backend | --missing FRONT | "
                "--corrupt FRONT | --mock-device | --mock-front WHY]\n",
                argv[0]);
        return 2;
    }
    if (mode == MODE_BACKEND) {
        const char *v = getenv("KEEL_GPU_BACKEND");
        if (!v || strcmp(v, "always")) {
            fprintf(stderr, "--backend needs KEEL_GPU_BACKEND=always\n");
            return 2;
        }
    }
    if ((mode == MODE_MISSING || mode == MODE_CORRUPT) &&
        setup_broken(argv[2])) {
        cleanup_broken();
        return 2;
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    suite = CU_add_suite(GPU_PLUGIN "-lazy", NULL, NULL);
    switch (mode) {
    case MODE_DEFAULT:
        CU_add_test(suite, "nothing heavy mapped at load",
                    test_nothing_heavy_mapped_at_load);
        CU_add_test(suite, "the backend is mapped only with a device",
                    test_backend_only_with_a_device);
        CU_add_test(suite, "the front's table answers with a status",
                    test_front_table_answers);
        CU_add_test(suite, "the first collective call loads NCCL",
                    test_first_collective_loads_nccl);
        break;
    case MODE_BACKEND:
        CU_add_test(suite, "nothing heavy mapped at load",
                    test_nothing_heavy_mapped_at_load);
        CU_add_test(suite, "KEEL_GPU_BACKEND=always maps the backend",
                    test_backend_mapped_when_asked);
        CU_add_test(suite, "the first collective call loads NCCL",
                    test_first_collective_loads_nccl);
        break;
    case MODE_MOCK_DEVICE:
        CU_add_test(suite, "a device reported: the backend is loaded",
                    test_mock_device_loads_backend);
        break;
    case MODE_MOCK_FRONT:
        CU_add_test(suite, "no device reported: the front answers",
                    test_mock_front_answers);
        break;
    case MODE_MISSING:
    case MODE_CORRUPT:
        CU_add_test(suite, mode == MODE_MISSING
                               ? "a missing backend: 0 devices, a reason"
                               : "a corrupt backend: 0 devices, a reason",
                    test_broken_backend);
        break;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    if (mode == MODE_MISSING || mode == MODE_CORRUPT)
        cleanup_broken();
    return failed ? 1 : 0;
}
