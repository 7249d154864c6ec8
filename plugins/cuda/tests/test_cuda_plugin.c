/*
 * The CUDA plugin, two ways (meson tests cuda-plugin and cuda-gpu-vs-cpu):
 *
 *   test_cuda_plugin        without a GPU or driver (CI, developer
 *                           machines) the plugin must load, report 0
 *                           devices with the reason, and answer every call
 *                           with a status instead of crashing; with a GPU,
 *                           the same calls must work on the devices found.
 *   test_cuda_plugin --gpu  runs kernels on gpu:0 and the same ops on the
 *                           CPU plugin, from the same inputs, and compares
 *                           them (strict mode: a missing CUDA kernel is an
 *                           error, never a silent CPU fallback). Without a
 *                           GPU, or without the CUDA kernels built, it
 *                           exits 77 (SKIP) and says why.
 *
 * Both run with KEEL_GPU_BACKEND=always (meson.build), so what answers is
 * the plugin's backend, keel-cuda-backend.so, even without a device; the
 * front's own answers are checked by test_cuda_lazy.c.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>
#include <keel/ops.h>
#include <keel/runtime.h>
#include <keel/tensor.h>

/* The same test serves the HIP plugin (plugins/hip/tests), built from the
 * same sources: these name the plugin under test. */
#ifndef GPU_PLUGIN
#define GPU_PLUGIN "cuda"        /* plugin name, and its file libkeel-NAME */
#define GPU_API "CUDA"           /* the runtime named in its reasons */
#define GPU_ARCH_PREFIX "sm_"    /* device props arch */
#define GPU_BLAS_LIB "libcublas" /* must not be mapped before a GEMM */
#define GPU_VENDOR_HW "an NVIDIA GPU and its driver"
#endif

static int cuda_index(keel_plugin_info *info)
{
    for (int i = 0; i < keel_plugin_count(); i++)
        if (keel_plugin_get_info(i, info) == KEEL_STATUS_OK && info->name &&
            !strcmp(info->name, GPU_PLUGIN))
            return i;
    return -1;
}

static void test_identity(void)
{
    keel_plugin_info info;
    int idx = cuda_index(&info);
    const keel_plugin_api *api;

    CU_ASSERT_FATAL(idx >= 0);
    CU_ASSERT_TRUE_FATAL(info.loaded);
    CU_ASSERT_STRING_EQUAL(info.device_type, "gpu");
    CU_ASSERT_STRING_EQUAL(info.version, "0.1.0");
    CU_ASSERT_EQUAL(info.abi_major, KEEL_ABI_VERSION_MAJOR);
    api = keel_plugin_table(idx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
#ifdef KEEL_CUDA_HAVE_KERNELS
    CU_ASSERT_PTR_NOT_NULL_FATAL(api->kernel);
    {
        /* Without a device, lookup answers with a status, never a kernel. */
        keel_kernel k = {0};
        keel_status st = api->kernel->lookup(0, "add", KEEL_F32, &k);
        CU_ASSERT_NOT_EQUAL(st, KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(api->kernel->lookup(0, NULL, KEEL_F32, &k),
                        KEEL_STATUS_INVALID_ARGUMENT);
    }
#else
    CU_ASSERT_PTR_NULL(api->kernel); /* built without nvcc */
#endif
    CU_ASSERT_PTR_NULL(api->profiler);
    CU_ASSERT_PTR_NOT_NULL(api->memory->copy_peer_async);
    CU_ASSERT_TRUE(keel_is_compiled_with(GPU_PLUGIN));
    CU_ASSERT_TRUE(keel_is_compiled_with("gpu"));
}

static void test_no_driver_or_devices(void)
{
    keel_plugin_info info;
    keel_place pl;
    int idx = cuda_index(&info);

    CU_ASSERT_FATAL(idx >= 0);
    if (info.device_count > 0) {
        keel_device_props props;
        /* A GPU is present: its properties must be sane. */
        CU_ASSERT_EQUAL_FATAL(keel_place_parse("gpu:0", &pl),
                              KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(keel_device_get_props(pl, &props), KEEL_STATUS_OK);
        CU_ASSERT(props.total_memory > 0 && props.compute_units > 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(props.arch, GPU_ARCH_PREFIX));
        return;
    }
    CU_ASSERT_EQUAL(keel_device_count("gpu"), 0);
    CU_ASSERT_EQUAL(keel_device_count(GPU_PLUGIN), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(info.reason);
    /* "no CUDA driver (...)", "no CUDA device (...)", "no HIP device". */
    CU_ASSERT_PTR_NOT_NULL(strstr(info.reason, GPU_API));
    CU_ASSERT_EQUAL(keel_place_parse("gpu:0", &pl),
                    KEEL_STATUS_INVALID_DEVICE);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), info.reason));
}

static void test_raw_calls_answer_with_status(void)
{
    keel_plugin_info info;
    int idx = cuda_index(&info);
    const keel_plugin_api *api = keel_plugin_table(idx);
    keel_device_props props;
    keel_dptr d = 1;
    keel_stream s = NULL;
    int32_t n = -1;

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    if (info.device_count > 0) {
        /* A GPU is present: the same calls work, and bad arguments still
         * get a status. */
        CU_ASSERT_EQUAL(api->device->get_device_count(&n), KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(n, info.device_count);
        CU_ASSERT_EQUAL(api->device->get_device_count(NULL),
                        KEEL_STATUS_INVALID_ARGUMENT);
        props.struct_size = sizeof(props);
        CU_ASSERT_EQUAL(api->device->get_device_props(0, &props),
                        KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(api->device->get_device_props(n, &props),
                        KEEL_STATUS_INVALID_DEVICE);
        CU_ASSERT_EQUAL(api->memory->alloc(0, 16, NULL),
                        KEEL_STATUS_INVALID_ARGUMENT);
        d = 0;
        CU_ASSERT_EQUAL(api->memory->alloc(0, 16, &d), KEEL_STATUS_OK);
        CU_ASSERT_NOT_EQUAL(d, 0);
        if (d)
            CU_ASSERT_EQUAL(api->memory->free(0, d), KEEL_STATUS_OK);
        CU_ASSERT_EQUAL(api->device->synchronize(0), KEEL_STATUS_OK);
        return;
    }
    CU_ASSERT_EQUAL(api->device->get_device_count(&n), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(api->device->get_device_count(NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    props.struct_size = sizeof(props);
    CU_ASSERT_EQUAL(api->device->get_device_props(0, &props),
                    KEEL_STATUS_INVALID_DEVICE);
    CU_ASSERT_EQUAL(api->device->get_device_props(0, NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(api->memory->alloc(0, 16, &d),
                    KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(d, 0);
    CU_ASSERT_EQUAL(api->memory->alloc(0, 16, NULL),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(api->device->synchronize(0), KEEL_STATUS_NOT_INITIALIZED);
    CU_ASSERT_EQUAL(api->stream->stream_create(0, 0, &s),
                    KEEL_STATUS_NOT_INITIALIZED);
    if (api->collective) {
        keel_comm_id id;
        CU_ASSERT_EQUAL(api->collective->get_unique_id(&id),
                        KEEL_STATUS_NOT_INITIALIZED);
    }
    /* finalize + init again: still unavailable, still no device. */
    CU_ASSERT_EQUAL(api->device->finalize(), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(api->device->init(), KEEL_STATUS_UNAVAILABLE);
    CU_ASSERT_EQUAL(api->device->get_device_count(&n), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(n, 0);
}

/* Loading and initialising the plugin must not load cuBLAS: it is
 * dlopened on the first GEMM (k_linalg.cu), since mapping it costs about
 * 150 MB of resident memory in every process, GPU or not. */
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

static void test_cublas_not_loaded_at_init(void)
{
    keel_plugin_info info;
    int idx = cuda_index(&info);

    CU_ASSERT_TRUE_FATAL(idx >= 0);
    CU_ASSERT_TRUE(mapped("libkeel-" GPU_PLUGIN));
    /* No test before this one runs a GEMM, with or without a GPU. */
    CU_ASSERT_FALSE(mapped(GPU_BLAS_LIB));
}

/* ---- --gpu: kernels on gpu:0 against the CPU plugin ------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float frand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* One float32 input, the same values on both devices. */
struct pair {
    keel_tensor *gpu, *cpu;
};

static struct pair make_input(int ndim, const int64_t *shape, bool positive)
{
    struct pair p = {NULL, NULL};
    int64_t n = 1;
    float *buf;

    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    buf = malloc((size_t)n * sizeof(float));
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    for (int64_t i = 0; i < n; i++)
        buf[i] = positive ? 0.05f + fabsf(frand()) : frand();
    CU_ASSERT_EQUAL(keel_tensor_from_host(buf, KEEL_F32, ndim, shape,
                                          "gpu:0", &p.gpu),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_from_host(buf, KEEL_F32, ndim, shape,
                                          "cpu:0", &p.cpu),
                    KEEL_STATUS_OK);
    free(buf);
    return p;
}

static void free_pair(struct pair *p)
{
    keel_tensor_free(p->gpu);
    keel_tensor_free(p->cpu);
    p->gpu = p->cpu = NULL;
}

/* The GPU result `g` against the CPU plugin's `c`: same shape, every value
 * within rtol * max(|c|) + rtol * |c| (float32 results of sums, whose
 * order differs between the devices). */
static void compare(const char *what, keel_status sg, keel_tensor *g,
                    keel_status sc, keel_tensor *c, double rtol)
{
    int64_t n;
    float *a, *b;
    double scale = 0, worst = 0;
    int64_t bad = 0, first = -1;

    CU_ASSERT_EQUAL(sg, KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(sc, KEEL_STATUS_OK);
    if (sg || sc || !g || !c) {
        fprintf(stderr, "\n  %s: gpu %d, cpu %d: %s", what, sg, sc,
                keel_last_error());
        keel_tensor_free(g);
        keel_tensor_free(c);
        return;
    }
    n = keel_tensor_numel(c);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_numel(g), n);
    a = malloc((size_t)(n ? n : 1) * sizeof(float));
    b = malloc((size_t)(n ? n : 1) * sizeof(float));
    CU_ASSERT_FATAL(a && b);
    CU_ASSERT_EQUAL(keel_tensor_to_host(g, a, (size_t)n * sizeof(float)),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_to_host(c, b, (size_t)n * sizeof(float)),
                    KEEL_STATUS_OK);
    for (int64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(b[i]));
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);

        worst = fmax(worst, d / (scale ? scale : 1));
        if (!(d <= rtol * scale + rtol * fabs(b[i]))) {
            if (first < 0)
                first = i;
            bad++;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    printf("\n    %-28s %8lld values, max diff %.3g of max|cpu|%s", what,
           (long long)n, worst, bad ? "  MISMATCH" : "");
    if (bad)
        fprintf(stderr, "\n  %s: %lld values differ, first [%lld]: gpu %.9g, "
                "cpu %.9g", what, (long long)bad, (long long)first,
                a[first], b[first]);
    free(a);
    free(b);
    keel_tensor_free(g);
    keel_tensor_free(c);
}

#define BOTH(what, rtol, call_g, call_c)                                          do {                                                                              keel_tensor *og_ = NULL, *oc_ = NULL;                                         keel_status sg_ = (call_g), sc_ = (call_c);                                   compare(what, sg_, og_, sc_, oc_, rtol);                                  } while (0)

static void test_gpu_elementwise(void)
{
    int64_t sh[2] = {37, 129};
    struct pair x = make_input(2, sh, false), y = make_input(2, sh, false);
    struct pair pos = make_input(2, sh, true);

    BOTH("add", 1e-6, keel_add(x.gpu, y.gpu, &og_),
         keel_add(x.cpu, y.cpu, &oc_));
    BOTH("multiply", 1e-6, keel_multiply(x.gpu, y.gpu, &og_),
         keel_multiply(x.cpu, y.cpu, &oc_));
    BOTH("divide", 1e-6, keel_divide(x.gpu, pos.gpu, &og_),
         keel_divide(x.cpu, pos.cpu, &oc_));
    BOTH("relu", 0, keel_relu(x.gpu, &og_), keel_relu(x.cpu, &oc_));
    BOTH("exp", 1e-6, keel_exp(x.gpu, &og_), keel_exp(x.cpu, &oc_));
    BOTH("log", 1e-6, keel_log(pos.gpu, &og_), keel_log(pos.cpu, &oc_));
    BOTH("tanh", 1e-6, keel_tanh(x.gpu, &og_), keel_tanh(x.cpu, &oc_));
    BOTH("sigmoid", 1e-6, keel_sigmoid(x.gpu, &og_),
         keel_sigmoid(x.cpu, &oc_));
    BOTH("gelu", 1e-5, keel_gelu(x.gpu, false, &og_),
         keel_gelu(x.cpu, false, &oc_));
    free_pair(&x);
    free_pair(&y);
    free_pair(&pos);
}

static void test_gpu_reduce_softmax(void)
{
    int64_t sh[2] = {33, 257};
    struct pair x = make_input(2, sh, false);
    int ax1[1] = {1}, ax0[1] = {0};

    BOTH("sum (all)", 1e-5, keel_sum(x.gpu, 0, NULL, false, &og_),
         keel_sum(x.cpu, 0, NULL, false, &oc_));
    BOTH("sum (rows)", 1e-5, keel_sum(x.gpu, 1, ax1, false, &og_),
         keel_sum(x.cpu, 1, ax1, false, &oc_));
    BOTH("max (columns)", 0, keel_max(x.gpu, 1, ax0, true, &og_),
         keel_max(x.cpu, 1, ax0, true, &oc_));
    BOTH("mean (rows)", 1e-5, keel_mean(x.gpu, 1, ax1, false, &og_),
         keel_mean(x.cpu, 1, ax1, false, &oc_));
    BOTH("softmax (last axis)", 1e-5, keel_softmax(x.gpu, -1, &og_),
         keel_softmax(x.cpu, -1, &oc_));
    free_pair(&x);
}

static void test_gpu_matmul_conv(void)
{
    int64_t sa[2] = {65, 130}, sb[2] = {130, 47}, sbt[2] = {47, 130};
    int64_t sat[2] = {130, 65}, sx[4] = {3, 4, 14, 14}, sw[4] = {6, 4, 5, 5};
    int64_t sbias[1] = {6};
    struct pair a = make_input(2, sa, false), b = make_input(2, sb, false);
    struct pair bt = make_input(2, sbt, false), at = make_input(2, sat, false);
    struct pair x = make_input(4, sx, false), w = make_input(4, sw, false);
    struct pair bias = make_input(1, sbias, false);
    keel_conv2d_params cp = keel_conv2d_default_params();

    BOTH("matmul", 1e-5, keel_matmul(a.gpu, b.gpu, false, false, &og_),
         keel_matmul(a.cpu, b.cpu, false, false, &oc_));
    BOTH("matmul, y transposed", 1e-5,
         keel_matmul(a.gpu, bt.gpu, false, true, &og_),
         keel_matmul(a.cpu, bt.cpu, false, true, &oc_));
    BOTH("matmul, x transposed", 1e-5,
         keel_matmul(at.gpu, b.gpu, true, false, &og_),
         keel_matmul(at.cpu, b.cpu, true, false, &oc_));
    cp.padding[0] = cp.padding[1] = 2;
    cp.npadding = 2;
    BOTH("conv2d 5x5, pad 2", 1e-5,
         keel_conv2d(x.gpu, w.gpu, bias.gpu, &cp, &og_),
         keel_conv2d(x.cpu, w.cpu, bias.cpu, &cp, &oc_));
    free_pair(&a);
    free_pair(&b);
    free_pair(&bt);
    free_pair(&at);
    free_pair(&x);
    free_pair(&w);
    free_pair(&bias);
}

/* 77 (SKIP) with the reason when there is nothing to compare, else the
 * CUnit run's verdict. */
static int run_gpu_vs_cpu(void)
{
    keel_plugin_info info;
    CU_pSuite suite;
    unsigned failed;

#ifndef KEEL_CUDA_HAVE_KERNELS
    printf(GPU_PLUGIN "-gpu-vs-cpu: SKIP: the " GPU_API " plugin was built "
           "without its kernels (no nvcc/hipcc, or -Dplugin_" GPU_PLUGIN
           "_kernels=disabled); build them and run this on a machine with "
           GPU_VENDOR_HW "\n");
    return 77;
#endif
    if (cuda_index(&info) < 0 || !info.loaded || info.device_count <= 0) {
        printf(GPU_PLUGIN "-gpu-vs-cpu: SKIP: no " GPU_API " device here "
               "(%s): the GPU kernels were NOT run or compared; run this "
               "test on a machine with " GPU_VENDOR_HW "\n",
               info.reason ? info.reason : "the plugin reports 0 devices");
        return 77;
    }
    if (keel_device_count("cpu") <= 0) {
        printf(GPU_PLUGIN "-gpu-vs-cpu: FAIL: the CPU plugin, the reference, is "
               "not loaded\n");
        return 1;
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    suite = CU_add_suite(GPU_PLUGIN " gpu:0 vs cpu:0", NULL, NULL);
    CU_add_test(suite, "elementwise", test_gpu_elementwise);
    CU_add_test(suite, "reductions and softmax", test_gpu_reduce_softmax);
    CU_add_test(suite, "matmul and conv2d", test_gpu_matmul_conv);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
    CU_pSuite suite;
    unsigned failed;

    if (argc == 2 && !strcmp(argv[1], "--gpu"))
        return run_gpu_vs_cpu();
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    suite = CU_add_suite(GPU_PLUGIN, NULL, NULL);
    CU_add_test(suite, "identity", test_identity);
    CU_add_test(suite, "no driver or devices", test_no_driver_or_devices);
    CU_add_test(suite, "raw calls answer with a status",
                test_raw_calls_answer_with_status);
    CU_add_test(suite, "cuBLAS not loaded at init",
                test_cublas_not_loaded_at_init);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return failed ? 1 : 0;
}
