/*
 * The npu plugin without CANN and over the stand-in ACL (meson tests
 * npu-*, plugins/npu/tests/meson.build):
 *
 *   test_npu_plugin absent TEXT   no usable libascendcl.so (or one with no
 *                                 device): the plugin loads, reports 0
 *                                 devices with a reason containing TEXT,
 *                                 and answers calls with a status;
 *   test_npu_plugin errors        over the stand-in (KEEL_NPU_ACL_LIBRARY):
 *                                 an ACL failure injected into one call
 *                                 reaches the keel caller as the mapped
 *                                 keel_status, with the ACL function, the
 *                                 error's name and ACL's own message in
 *                                 keel_last_error(); and (strict mode, with
 *                                 the stand-in as libopapi.so too) the
 *                                 aclnn kernels compute, and their
 *                                 failures are reported the same way;
 *                                 with the stand-in as libhccl.so, HCCL's
 *                                 4,108-byte ids reach HCCL whole and its
 *                                 failures are mapped and named;
 *   test_npu_plugin visible       over the stand-in with
 *                                 KEEL_VISIBLE_DEVICES=npu:1: one device,
 *                                 ACL device 1, and ACL device 0 untouched.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>
#include <keel/ops.h>
#include <keel/runtime.h>
#include <keel/tensor.h>

static const char *want_reason;

/* The npu plugin's index, its description in *info; -1 when absent. */
static int npu_index(keel_plugin_info *info)
{
    int n = keel_plugin_count(), i = 0;

    while (i < n && (keel_plugin_get_info(i, info) != KEEL_STATUS_OK ||
                     !info->name || strcmp(info->name, "npu") != 0))
        i++;
    return i < n ? i : -1;
}

/* ---- absent ------------------------------------------------------------- */

static void test_identity(void)
{
    keel_plugin_info info;
    const keel_plugin_api *api;
    int idx = npu_index(&info);

    CU_ASSERT_FATAL(idx >= 0);
    CU_ASSERT_TRUE_FATAL(info.loaded);
    CU_ASSERT_EQUAL(info.abi_major, KEEL_ABI_VERSION_MAJOR);
    CU_ASSERT_STRING_EQUAL(info.device_type, "npu");
    CU_ASSERT_STRING_EQUAL(info.name, "npu");
    api = keel_plugin_table(idx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_PTR_NOT_NULL_FATAL(api->kernel);
    /* the group is always there; libhccl.so is opened on first use */
    CU_ASSERT_PTR_NOT_NULL_FATAL(api->collective);
    CU_ASSERT_PTR_NOT_NULL(api->collective->get_unique_id_bytes);
    CU_ASSERT_PTR_NOT_NULL(api->collective->comm_init_rank_bytes);
    CU_ASSERT_PTR_NOT_NULL(api->collective->all_to_allv);
    {
        /* without devices, lookup answers with a status, never a kernel */
        keel_kernel k = {0};
        CU_ASSERT_NOT_EQUAL(api->kernel->lookup(0, "add", KEEL_F32, &k),
                            KEEL_STATUS_OK);
        CU_ASSERT_PTR_NULL(k.fn);
        CU_ASSERT_EQUAL(api->kernel->lookup(0, NULL, KEEL_F32, &k),
                        KEEL_STATUS_INVALID_ARGUMENT);
    }
    CU_ASSERT_PTR_NOT_NULL(api->memory->host_alloc);
    CU_ASSERT_PTR_NOT_NULL(api->stream->event_elapsed_ms);
}

static void test_reason(void)
{
    keel_plugin_info info;
    keel_place pl;
    int idx = npu_index(&info);

    CU_ASSERT_FATAL(idx >= 0);
    CU_ASSERT_EQUAL(info.device_count, 0);
    CU_ASSERT_EQUAL(keel_device_count("npu"), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(info.reason);
    printf("\n    reason: %s\n", info.reason);
    CU_ASSERT_PTR_NOT_NULL(strstr(info.reason, want_reason));
    CU_ASSERT_EQUAL(keel_place_parse("npu:0", &pl),
                    KEEL_STATUS_INVALID_DEVICE);
    CU_ASSERT_PTR_NOT_NULL(strstr(keel_last_error(), info.reason));
}

/* Without a device every call still answers, with the status the ABI
 * gives that situation. */
static void test_calls_answer(void)
{
    keel_plugin_info info;
    const keel_plugin_api *api = keel_plugin_table(npu_index(&info));
    keel_device_props props = {.struct_size = sizeof(props)};
    keel_stream s = NULL;
    keel_dptr d = 1;
    void *h = NULL;
    int32_t n = -1;
    keel_collective_caps caps = {.struct_size = sizeof(caps)};
    keel_comm_id id = {{0}};
    keel_comm m = NULL;
    static uint8_t big[4108]; /* HCCL's root info size */

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_PTR_NOT_NULL_FATAL(api->collective);
    const struct {
        const char *call;
        keel_status got, want;
    } c[] = {
        {"get_device_count(&n)", api->device->get_device_count(&n),
         KEEL_STATUS_OK},
        {"get_device_count(NULL)", api->device->get_device_count(NULL),
         KEEL_STATUS_INVALID_ARGUMENT},
        {"get_device_props(0)", api->device->get_device_props(0, &props),
         KEEL_STATUS_INVALID_DEVICE},
        {"alloc(0, 16)", api->memory->alloc(0, 16, &d),
         KEEL_STATUS_NOT_INITIALIZED},
        {"alloc(0, 16, NULL)", api->memory->alloc(0, 16, NULL),
         KEEL_STATUS_INVALID_ARGUMENT},
        {"synchronize(0)", api->device->synchronize(0),
         KEEL_STATUS_NOT_INITIALIZED},
        {"stream_create(0)", api->stream->stream_create(0, 0, &s),
         KEEL_STATUS_NOT_INITIALIZED},
        {"host_alloc(0, 16)", api->memory->host_alloc(0, 16, &h),
         KEEL_STATUS_NOT_INITIALIZED},
        {"collective.get_caps(0)", api->collective->get_caps(0, &caps),
         KEEL_STATUS_INVALID_DEVICE},
        {"collective.get_unique_id", api->collective->get_unique_id(&id),
         KEEL_STATUS_NOT_SUPPORTED},
        {"collective.comm_init_rank_bytes(0)",
         api->collective->comm_init_rank_bytes(0, 1, big, sizeof(big), 0, &m),
         KEEL_STATUS_NOT_INITIALIZED},
        {"collective.comm_init_rank_bytes(128 bytes)",
         api->collective->comm_init_rank_bytes(0, 1, big, 128, 0, &m),
         KEEL_STATUS_INVALID_ARGUMENT},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        if (c[i].got != c[i].want)
            printf("\n    %s: status %d, want %d", c[i].call, (int)c[i].got,
                   (int)c[i].want);
        CU_ASSERT_EQUAL(c[i].got, c[i].want);
    }
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(d, 0); /* a failed alloc leaves 0 */
    /* finalize and init again: still no library, still unavailable */
    CU_ASSERT_EQUAL(api->device->finalize(), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(api->device->init(), KEEL_STATUS_UNAVAILABLE);
}

/* ---- errors ------------------------------------------------------------- */

typedef void (*fail_next_fn)(const char *name, int code);
static fail_next_fn fail_next;
static keel_place npu0;

/* The stand-in is already mapped by the plugin: find its arming call. */
static int errors_init(void)
{
    const char *lib = getenv("KEEL_NPU_ACL_LIBRARY");
    void *h;

    /* first use loads the plugins, and the plugin loads the stand-in */
    if (!lib || keel_place_parse("npu:0", &npu0) != KEEL_STATUS_OK)
        return -1;
    h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return -1;
    *(void **)&fail_next = dlsym(h, "acl_standin_fail_next");
    dlclose(h);
    return fail_next ? 0 : -1;
}

static void expect_msg(const char *a, const char *b, const char *c)
{
    const char *m = keel_last_error();

    printf("\n    %s\n", m);
    CU_ASSERT_PTR_NOT_NULL(strstr(m, a));
    CU_ASSERT_PTR_NOT_NULL(strstr(m, b));
    if (c)
        CU_ASSERT_PTR_NOT_NULL(strstr(m, c));
}

static void test_alloc_bad_alloc(void)
{
    keel_dptr p = 0;

    fail_next("aclrtMalloc", 200000);
    CU_ASSERT_EQUAL(keel_mem_alloc(npu0, 4096, &p), KEEL_STATUS_OUT_OF_MEMORY);
    CU_ASSERT_EQUAL(p, 0);
    expect_msg("aclrtMalloc", "ACL_ERROR_BAD_ALLOC (200000)",
               "injected failure of aclrtMalloc");
    /* one failure only: the next allocation works */
    CU_ASSERT_EQUAL(keel_mem_alloc(npu0, 4096, &p), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_mem_free(npu0, p), KEEL_STATUS_OK);
}

static void test_copy_invalid_param(void)
{
    unsigned char buf[64] = {0};
    keel_dptr p = 0;

    CU_ASSERT_EQUAL_FATAL(keel_mem_alloc(npu0, sizeof(buf), &p),
                          KEEL_STATUS_OK);
    fail_next("aclrtMemcpy", 100000);
    CU_ASSERT_EQUAL(keel_mem_copy_h2d(npu0, p, buf, sizeof(buf)),
                    KEEL_STATUS_INVALID_ARGUMENT);
    expect_msg("aclrtMemcpy", "ACL_ERROR_INVALID_PARAM (100000)",
               "HOST_TO_DEVICE");
    CU_ASSERT_EQUAL(keel_mem_copy_h2d(npu0, p, buf, sizeof(buf)),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_mem_free(npu0, p), KEEL_STATUS_OK);
}

static void test_stream_sync_device_error(void)
{
    keel_stream s = NULL;

    CU_ASSERT_EQUAL_FATAL(keel_stream_create(npu0, 0, &s), KEEL_STATUS_OK);
    fail_next("aclrtSynchronizeStream", 507053);
    CU_ASSERT_EQUAL(keel_stream_synchronize(npu0, s),
                    KEEL_STATUS_DEVICE_ERROR);
    expect_msg("aclrtSynchronizeStream", "ACL_ERROR_RT_DEVICE_MEM_ERROR",
               "npu:0");
    CU_ASSERT_EQUAL(keel_stream_destroy(npu0, s), KEEL_STATUS_OK);
}

static void test_unknown_code(void)
{
    keel_event e = NULL;

    fail_next("aclrtCreateEvent", 123456);
    CU_ASSERT_EQUAL(keel_event_create(npu0, &e), KEEL_STATUS_DEVICE_ERROR);
    CU_ASSERT_PTR_NULL(e);
    expect_msg("aclrtCreateEvent", "(123456)", NULL);
}

static void test_invalid_device_code(void)
{
    keel_stream s = NULL;

    fail_next("aclrtCreateStream", 200002);
    CU_ASSERT_EQUAL(keel_stream_create(npu0, 0, &s),
                    KEEL_STATUS_INVALID_DEVICE);
    expect_msg("aclrtCreateStream", "ACL_ERROR_INVALID_DEVICE", NULL);
}

/* Two float32 [5] tensors on npu:0 and x op y (or relu x). */
static keel_status kernel_case(int which, float *got)
{
    static const float xs[5] = {1.5f, -2.0f, 0.25f, 3.0f, -0.5f};
    static const float ys[5] = {2.0f, 4.0f, -8.0f, 0.5f, 1.0f};
    int64_t shape[1] = {5};
    keel_tensor *x = NULL, *y = NULL, *z = NULL;
    keel_status st;

    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_floats(xs, 1, shape, KEEL_F32,
                                                  "npu:0", &x),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_floats(ys, 1, shape, KEEL_F32,
                                                  "npu:0", &y),
                          KEEL_STATUS_OK);
    st = which == 0   ? keel_add(x, y, &z)
         : which == 1 ? keel_multiply(x, y, &z)
                      : keel_relu(x, &z);
    if (st == KEEL_STATUS_OK)
        CU_ASSERT_EQUAL(keel_tensor_to_host(z, got, 5 * sizeof(float)),
                        KEEL_STATUS_OK);
    keel_tensor_free(x);
    keel_tensor_free(y);
    keel_tensor_free(z);
    return st;
}

static void test_kernels_compute(void)
{
    float got[5];

    CU_ASSERT_EQUAL_FATAL(kernel_case(0, got), KEEL_STATUS_OK);
    CU_ASSERT(got[0] == 3.5f && got[1] == 2.0f && got[2] == -7.75f &&
              got[3] == 3.5f && got[4] == 0.5f);
    CU_ASSERT_EQUAL_FATAL(kernel_case(1, got), KEEL_STATUS_OK);
    CU_ASSERT(got[0] == 3.0f && got[1] == -8.0f && got[2] == -2.0f &&
              got[3] == 1.5f && got[4] == -0.5f);
    CU_ASSERT_EQUAL_FATAL(kernel_case(2, got), KEEL_STATUS_OK);
    CU_ASSERT(got[0] == 1.5f && got[1] == 0.0f && got[2] == 0.25f &&
              got[3] == 3.0f && got[4] == 0.0f);
}

static void test_kernel_launch_error(void)
{
    float got[5];

    fail_next("aclnnAdd", 561000);
    CU_ASSERT_EQUAL(kernel_case(0, got), KEEL_STATUS_DEVICE_ERROR);
    expect_msg("aclnnAdd", "aclnnStatus 561000", "injected failure");
}

static void test_kernel_refusal(void)
{
    float got[5];

    /* phase 1 refuses: NOT_SUPPORTED (strict mode: no CPU fallback) */
    fail_next("aclnnMulGetWorkspaceSize", 161002);
    CU_ASSERT_EQUAL(kernel_case(1, got), KEEL_STATUS_NOT_SUPPORTED);
    expect_msg("aclnnMulGetWorkspaceSize", "aclnnStatus 161002", NULL);
}

/* The elementwise set over the stand-in: [5] float32 operands on npu:0
 * (x and y as in kernel_case; z positive, for log and sqrt). */
enum ew_case { EW_SUB, EW_DIV, EW_NEG, EW_ABS, EW_EXP, EW_LOG, EW_SQRT,
               EW_SIGMOID, EW_TANH, EW_SILU, EW_GELU, EW_GELU_TANH, EW_N };

static keel_status ew_case(enum ew_case which, float *got)
{
    static const float xs[5] = {1.5f, -2.0f, 0.25f, 3.0f, -0.5f};
    static const float ys[5] = {2.0f, 4.0f, -8.0f, 0.5f, 1.0f};
    static const float zs[5] = {1.0f, 4.0f, 0.25f, 2.0f, 9.0f};
    int64_t shape[1] = {5};
    keel_tensor *x = NULL, *y = NULL, *u = NULL, *z = NULL;
    keel_status st;

    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_floats(xs, 1, shape, KEEL_F32,
                                                  "npu:0", &x),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_floats(ys, 1, shape, KEEL_F32,
                                                  "npu:0", &y),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_floats(zs, 1, shape, KEEL_F32,
                                                  "npu:0", &u),
                          KEEL_STATUS_OK);
    switch (which) {
    case EW_SUB: st = keel_subtract(x, y, &z); break;
    case EW_DIV: st = keel_divide(x, y, &z); break;
    case EW_NEG: st = keel_neg(x, &z); break;
    case EW_ABS: st = keel_abs(x, &z); break;
    case EW_EXP: st = keel_exp(x, &z); break;
    case EW_LOG: st = keel_log(u, &z); break;
    case EW_SQRT: st = keel_sqrt(u, &z); break;
    case EW_SIGMOID: st = keel_sigmoid(x, &z); break;
    case EW_TANH: st = keel_tanh(x, &z); break;
    case EW_SILU: st = keel_silu(x, &z); break;
    case EW_GELU: st = keel_gelu(x, false, &z); break;
    default: st = keel_gelu(x, true, &z); break;
    }
    if (st == KEEL_STATUS_OK)
        CU_ASSERT_EQUAL(keel_tensor_to_host(z, got, 5 * sizeof(float)),
                        KEEL_STATUS_OK);
    keel_tensor_free(x);
    keel_tensor_free(y);
    keel_tensor_free(u);
    keel_tensor_free(z);
    return st;
}

static bool near(float got, double want)
{
    double d = (double)got - want, m = want < 0 ? -want : want;
    return (d < 0 ? -d : d) <= 1e-6 * (m > 1 ? m : 1);
}

static void test_ew_compute(void)
{
    /* the first two results of each op, worked out to 10 digits */
    static const double want[EW_N][2] = {
        [EW_SUB] = {-0.5, -6.0},
        [EW_DIV] = {0.75, -0.5},
        [EW_NEG] = {-1.5, 2.0},
        [EW_ABS] = {1.5, 2.0},
        [EW_EXP] = {4.4816890703, 0.1353352832},
        [EW_LOG] = {0.0, 1.3862943611},
        [EW_SQRT] = {1.0, 2.0},
        [EW_SIGMOID] = {0.8175744762, 0.1192029220},
        [EW_TANH] = {0.9051482536, -0.9640275801},
        [EW_SILU] = {1.2263617143, -0.2384058440},
        [EW_GELU] = {1.3997891981, -0.0455002639},
        [EW_GELU_TANH] = {1.3995715770, -0.0454023059},
    };
    float got[5];

    for (int i = 0; i < EW_N; i++) {
        CU_ASSERT_EQUAL_FATAL(ew_case((enum ew_case)i, got), KEEL_STATUS_OK);
        CU_ASSERT(near(got[0], want[i][0]) && near(got[1], want[i][1]));
    }
    /* the rest of subtract and divide: exact in float32 */
    CU_ASSERT_EQUAL_FATAL(ew_case(EW_SUB, got), KEEL_STATUS_OK);
    CU_ASSERT(got[2] == 8.25f && got[3] == 2.5f && got[4] == -1.5f);
    CU_ASSERT_EQUAL_FATAL(ew_case(EW_DIV, got), KEEL_STATUS_OK);
    CU_ASSERT(got[2] == -0.03125f && got[3] == 6.0f && got[4] == -0.5f);
}

/* maximum / minimum on int32 (aclnn), and copy of a transposed view. */
static void test_ew_int_and_copy(void)
{
    static const int32_t xs[4] = {3, -7, 0, 5}, ys[4] = {-1, 2, 0, 9};
    static const float ms[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[1] = {4}, shape2[2] = {2, 3};
    keel_tensor *x = NULL, *y = NULL, *z = NULL, *m = NULL, *t = NULL;
    int32_t got[4];
    float cg[6];

    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_host(xs, KEEL_I32, 1, shape,
                                                "npu:0", &x),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_host(ys, KEEL_I32, 1, shape,
                                                "npu:0", &y),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_maximum(x, y, &z), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_to_host(z, got, sizeof(got)), KEEL_STATUS_OK);
    CU_ASSERT(got[0] == 3 && got[1] == 2 && got[2] == 0 && got[3] == 9);
    keel_tensor_free(z);
    z = NULL;
    CU_ASSERT_EQUAL_FATAL(keel_minimum(x, y, &z), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_to_host(z, got, sizeof(got)), KEEL_STATUS_OK);
    CU_ASSERT(got[0] == -1 && got[1] == -7 && got[2] == 0 && got[3] == 5);
    keel_tensor_free(z);
    z = NULL;
    /* [[1, 2, 3], [4, 5, 6]] transposed, made contiguous: aclnnInplaceCopy */
    CU_ASSERT_EQUAL_FATAL(keel_tensor_from_floats(ms, 2, shape2, KEEL_F32,
                                                  "npu:0", &m),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_transpose(m, 0, 1, &t), KEEL_STATUS_OK);
    fail_next("aclnnInplaceCopy", 561000);
    CU_ASSERT_EQUAL(keel_contiguous(t, &z), KEEL_STATUS_DEVICE_ERROR);
    expect_msg("aclnnInplaceCopy", "aclnnStatus 561000", "injected failure");
    z = NULL;
    CU_ASSERT_EQUAL_FATAL(keel_contiguous(t, &z), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_tensor_to_host(z, cg, sizeof(cg)), KEEL_STATUS_OK);
    CU_ASSERT(cg[0] == 1 && cg[1] == 4 && cg[2] == 2 && cg[3] == 5 &&
              cg[4] == 3 && cg[5] == 6);
    keel_tensor_free(x);
    keel_tensor_free(y);
    keel_tensor_free(z);
    keel_tensor_free(m);
    keel_tensor_free(t);
}

static void test_ew_errors(void)
{
    keel_plugin_info info;
    const keel_plugin_api *api = keel_plugin_table(npu_index(&info));
    keel_kernel k;
    float got[5];

    /* maximum / minimum: integers only (aclnn's NaN rule is unknown) */
    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_EQUAL(api->kernel->lookup(0, "maximum", KEEL_I32, &k),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(api->kernel->lookup(0, "maximum", KEEL_F32, &k),
                    KEEL_STATUS_NOT_FOUND);
    CU_ASSERT_EQUAL(api->kernel->lookup(0, "minimum", KEEL_F16, &k),
                    KEEL_STATUS_NOT_FOUND);
    CU_ASSERT_EQUAL(api->kernel->lookup(0, "divide", KEEL_I32, &k),
                    KEEL_STATUS_NOT_FOUND);

    /* phase 1 refuses: NOT_SUPPORTED (strict mode: no CPU fallback) */
    fail_next("aclnnSubGetWorkspaceSize", 161002);
    CU_ASSERT_EQUAL(ew_case(EW_SUB, got), KEEL_STATUS_NOT_SUPPORTED);
    expect_msg("aclnnSubGetWorkspaceSize", "aclnnStatus 161002", NULL);
    fail_next("aclnnGeluV2", 561000);
    CU_ASSERT_EQUAL(ew_case(EW_GELU, got), KEEL_STATUS_DEVICE_ERROR);
    expect_msg("aclnnGeluV2", "aclnnStatus 561000", "injected failure");
}

/* The workspace add asks for comes from the core (ABI 1.3): each add
 * takes two blocks from the caching allocator (its output and the
 * workspace) and keeps only the output. */
static void test_workspace_from_core(void)
{
    keel_memory_stats s0, s1;
    float got[5];

    CU_ASSERT_EQUAL(keel_memory_stats_get("npu:0", &s0), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(kernel_case(0, got), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(got[0], 3.5f);
    CU_ASSERT_EQUAL(keel_memory_stats_get("npu:0", &s1), KEEL_STATUS_OK);
    /* x, y, the output and the workspace; all four given back */
    CU_ASSERT_EQUAL(s1.alloc_count - s0.alloc_count, 4);
    CU_ASSERT_EQUAL(s1.allocated, s0.allocated);
}

/*
 * Under a core older than 1.3 (kernel args of KEEL_KERNEL_ARGS_MIN_SIZE,
 * no workspace call) the kernel allocates its workspace itself with
 * aclrtMalloc: it computes, and a failed allocation is OUT_OF_MEMORY.
 */
static void test_workspace_older_core(void)
{
    const keel_plugin_api *api = NULL;
    static const float xs[5] = {1, 2, 3, 4, 5}, ys[5] = {10, 20, 30, 40, 50};
    float got[5] = {0};
    keel_dptr d[3] = {0, 0, 0};
    keel_tensor_desc td[3];
    keel_kernel k;
    keel_kernel_args a;

    for (int i = 0; i < keel_plugin_count() && !api; i++) {
        keel_plugin_info info;
        if (keel_plugin_get_info(i, &info) == KEEL_STATUS_OK &&
            !strcmp(info.name, "npu"))
            api = keel_plugin_table(i);
    }
    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_EQUAL_FATAL(api->kernel->lookup(0, "add", KEEL_F32, &k),
                          KEEL_STATUS_OK);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL_FATAL(keel_mem_alloc(npu0, sizeof(xs), &d[i]),
                              KEEL_STATUS_OK);
        memset(&td[i], 0, sizeof(td[i]));
        td[i].data = d[i];
        td[i].dtype = KEEL_F32;
        td[i].ndim = 1;
        td[i].shape[0] = 5;
        td[i].strides[0] = 1;
    }
    keel_mem_copy_h2d(npu0, d[0], xs, sizeof(xs));
    keel_mem_copy_h2d(npu0, d[1], ys, sizeof(ys));
    memset(&a, 0, sizeof(a));
    a.struct_size = (uint32_t)KEEL_KERNEL_ARGS_MIN_SIZE;
    a.device = 0;
    a.inputs = td;
    a.num_inputs = 2;
    a.outputs = &td[2];
    a.num_outputs = 1;
    CU_ASSERT_EQUAL(k.fn(k.kernel_data, &a), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_stream_synchronize(npu0, NULL), KEEL_STATUS_OK);
    keel_mem_copy_d2h(npu0, got, d[2], sizeof(got));
    CU_ASSERT(got[0] == 11 && got[4] == 55);
    fail_next("aclrtMalloc", 200000);
    CU_ASSERT_EQUAL(k.fn(k.kernel_data, &a), KEEL_STATUS_OUT_OF_MEMORY);
    for (int i = 0; i < 3; i++)
        keel_mem_free(npu0, d[i]);
}

/* ---- HCCL over the stand-in ------------------------------------------------ */

static const keel_plugin_api *npu_api(void)
{
    keel_plugin_info info;
    int idx = npu_index(&info);

    return idx >= 0 ? keel_plugin_table(idx) : NULL;
}

/* Ids are HCCL's 4,108-byte root info, and all of it reaches
 * HcclCommInitRootInfo: a one-rank communicator works with the whole id
 * and is refused (by the stand-in) with only its first 128 bytes. */
static void test_hccl_ids(void)
{
    const keel_plugin_api *api = npu_api();
    const keel_collective_ops *c;
    keel_collective_caps caps = {.struct_size = sizeof(caps)};
    static uint8_t id[4108], cut[4108];
    keel_comm_id small;
    keel_comm m = NULL;
    keel_communicator *kc = NULL;
    int32_t r = -1, n = -1;

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    c = api->collective;
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL_FATAL(c->get_caps(0, &caps), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(caps.id_bytes, 4108);
    CU_ASSERT_TRUE(caps.collectives & KEEL_COLL_ALL_REDUCE);
    CU_ASSERT_FALSE(caps.reduce_ops & KEEL_REDUCE_OP_BIT(KEEL_REDUCE_AVG));
    CU_ASSERT_EQUAL(c->get_unique_id(&small), KEEL_STATUS_NOT_SUPPORTED);
    CU_ASSERT_EQUAL(c->get_unique_id_bytes(id, 128),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL_FATAL(c->get_unique_id_bytes(id, sizeof(id)),
                          KEEL_STATUS_OK);
    memcpy(cut, id, 128);
    CU_ASSERT_EQUAL(keel_comm_init_rank_bytes(npu0, 1, cut, sizeof(cut), 0,
                                              &kc),
                    KEEL_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NULL(kc);
    expect_msg("HcclCommInitRootInfo", "HCCL_E_PARA (1)", "npu:0");
    CU_ASSERT_EQUAL_FATAL(c->comm_init_rank_bytes(1, 1, id, sizeof(id), 0,
                                                  &m),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(c->comm_rank(m, &r, &n), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(r, 0);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(c->comm_destroy(m), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(c->comm_rank(m, &r, &n), KEEL_STATUS_INVALID_HANDLE);
}

/* A communicator the caller never destroys: the plugin's finalize (at
 * keel_shutdown) destroys it, so LeakSanitizer in the sanitizer build sees
 * no communicator left behind. It must be the last test that makes one. */
static void test_comm_left_alive(void)
{
    const keel_plugin_api *api = npu_api();
    static uint8_t id[4108];
    keel_comm m = NULL;
    int32_t r = -1, n = -1;

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_EQUAL_FATAL(api->collective->get_unique_id_bytes(id, sizeof(id)),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(api->collective->comm_init_rank_bytes(
                              0, 1, id, sizeof(id), 0, &m),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(api->collective->comm_rank(m, &r, &n), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(n, 1);
}

/* An HCCL failure is mapped and named; what HCCL lacks (average, int64
 * reductions) is NOT_SUPPORTED before HCCL is called; a one-rank
 * all_reduce computes; broadcast copies send to recv on the root; a group
 * in which one call was refused runs none of its calls. */
static void test_hccl_errors(void)
{
    const keel_plugin_api *api = npu_api();
    const keel_collective_ops *c;
    static uint8_t id[4108];
    const float x[4] = {1, 2, 3, 4};
    float y[4] = {0};
    keel_dptr a = 0, b = 0;
    keel_comm m = NULL;
    keel_communicator *kc = NULL;

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    c = api->collective;
    CU_ASSERT_EQUAL_FATAL(c->get_unique_id_bytes(id, sizeof(id)),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(c->comm_init_rank_bytes(0, 1, id, sizeof(id), 0,
                                                  &m),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_mem_alloc(npu0, sizeof(x), &a), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_mem_alloc(npu0, sizeof(x), &b), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_mem_copy_h2d(npu0, a, x, sizeof(x)), KEEL_STATUS_OK);
    /* through the core, which attaches the plugin's message */
    CU_ASSERT_EQUAL_FATAL(c->get_unique_id_bytes(id, sizeof(id)),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_comm_init_rank_bytes(npu0, 1, id, sizeof(id),
                                                    0, &kc),
                          KEEL_STATUS_OK);
    fail_next("HcclAllReduce", 9); /* HCCL_E_TIMEOUT */
    CU_ASSERT_EQUAL(keel_all_reduce(kc, NULL, a, b, 4, KEEL_F32,
                                    KEEL_REDUCE_SUM),
                    KEEL_STATUS_TIMEOUT);
    expect_msg("HcclAllReduce", "HCCL_E_TIMEOUT (9)", "npu:0");
    CU_ASSERT_EQUAL(keel_comm_destroy(kc), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(c->all_reduce(m, NULL, a, b, 4, KEEL_F32,
                                  KEEL_REDUCE_AVG),
                    KEEL_STATUS_NOT_SUPPORTED);
    CU_ASSERT_EQUAL(c->all_reduce(m, NULL, a, b, 2, KEEL_I64,
                                  KEEL_REDUCE_SUM),
                    KEEL_STATUS_NOT_SUPPORTED);
    CU_ASSERT_EQUAL(c->all_reduce(m, NULL, a, b, 4, KEEL_F32,
                                  KEEL_REDUCE_MAX),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_mem_copy_d2h(npu0, y, b, sizeof(y)), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(memcmp(x, y, sizeof(x)), 0);
    CU_ASSERT_EQUAL(keel_mem_set(npu0, b, 0, sizeof(y)), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(c->broadcast(m, NULL, a, b, 4, KEEL_F32, 0),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_mem_copy_d2h(npu0, y, b, sizeof(y)), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(memcmp(x, y, sizeof(x)), 0);
    CU_ASSERT_EQUAL(c->send(m, NULL, a, 4, KEEL_F32, 0),
                    KEEL_STATUS_INVALID_ARGUMENT); /* to itself */
    /* a group with a refused call runs none of its calls */
    CU_ASSERT_EQUAL(keel_mem_set(npu0, b, 0, sizeof(y)), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(c->group_start(), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(c->all_reduce(m, NULL, a, b, 4, KEEL_F32,
                                  KEEL_REDUCE_SUM),
                    KEEL_STATUS_OK); /* queued */
    CU_ASSERT_EQUAL(c->all_reduce(m, NULL, a, b, 4, KEEL_F32,
                                  KEEL_REDUCE_AVG),
                    KEEL_STATUS_NOT_SUPPORTED);
    CU_ASSERT_EQUAL(c->group_end(), KEEL_STATUS_NOT_SUPPORTED);
    CU_ASSERT_EQUAL(keel_mem_copy_d2h(npu0, y, b, sizeof(y)), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(y[0], 0.0f);
    CU_ASSERT_EQUAL(y[3], 0.0f);
    /* and the next group works */
    CU_ASSERT_EQUAL(c->group_start(), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(c->all_reduce(m, NULL, a, b, 4, KEEL_F32,
                                  KEEL_REDUCE_SUM),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(c->group_end(), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_mem_copy_d2h(npu0, y, b, sizeof(y)), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(memcmp(x, y, sizeof(x)), 0);
    CU_ASSERT_EQUAL(c->group_end(), KEEL_STATUS_INVALID_STATE);
    CU_ASSERT_EQUAL(c->comm_destroy(m), KEEL_STATUS_OK);
    keel_mem_free(npu0, a);
    keel_mem_free(npu0, b);
}

/* ---- visible devices -------------------------------------------------------- */

/* KEEL_VISIBLE_DEVICES=npu:1 over the stand-in's 2 devices: one device,
 * ACL device 1, and ACL device 0 is never set. */
static void test_visible(void)
{
    const char *lib = getenv("KEEL_NPU_ACL_LIBRARY");
    const keel_plugin_api *api;
    keel_device_props props = {.struct_size = sizeof(props)};
    int (*sets)(int), (*owner)(const void *);
    keel_place pl;
    keel_dptr p = 0;
    void *h;

    CU_ASSERT_EQUAL_FATAL(keel_device_count("npu"), 1);
    api = npu_api();
    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_EQUAL(api->device->get_device_props(0, &props), KEEL_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(props.bus_id, "acl:1");
    /* too late now: the plugin has probed */
    CU_ASSERT_EQUAL(api->device->set_visible_devices((const int32_t[]){0}, 1),
                    KEEL_STATUS_INVALID_STATE);
    h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    *(void **)&sets = dlsym(h, "acl_standin_device_sets");
    *(void **)&owner = dlsym(h, "acl_standin_device_of");
    dlclose(h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sets);
    CU_ASSERT_PTR_NOT_NULL_FATAL(owner);
    CU_ASSERT_EQUAL(sets(0), 0);
    CU_ASSERT_EQUAL(sets(1), 1);
    CU_ASSERT_EQUAL_FATAL(keel_place_parse("npu:0", &pl), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_mem_alloc(pl, 256, &p), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(owner((const void *)(uintptr_t)p), 1);
    CU_ASSERT_EQUAL(keel_mem_free(pl, p), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_place_parse("npu:1", &pl),
                    KEEL_STATUS_INVALID_DEVICE);
}

int main(int argc, char **argv)
{
    CU_pSuite suite;
    bool errors = argc >= 2 && !strcmp(argv[1], "errors");
    bool visible = argc >= 2 && !strcmp(argv[1], "visible");
    unsigned failed;

    if (!errors && !visible && (argc < 3 || strcmp(argv[1], "absent"))) {
        fprintf(stderr, "usage: %s absent TEXT | errors | visible\n",
                argv[0]);
        return 2;
    }
    want_reason = errors || visible ? NULL : argv[2];
    if (!errors && !visible && !getenv("KEEL_NPU_ACL_LIBRARY") &&
        keel_device_count("npu") > 0) {
        printf("SKIP: a libascendcl.so with devices is on the library path; "
               "this test is for machines without one\n");
        keel_shutdown();
        return 77;
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    if (visible) {
        suite = CU_add_suite("npu over the stand-in: visible devices", NULL,
                             NULL);
        CU_add_test(suite, "KEEL_VISIBLE_DEVICES=npu:1", test_visible);
    } else if (errors) {
        suite = CU_add_suite("npu over the stand-in: ACL errors", errors_init,
                             NULL);
        CU_add_test(suite, "aclrtMalloc BAD_ALLOC -> OUT_OF_MEMORY",
                    test_alloc_bad_alloc);
        CU_add_test(suite, "aclrtMemcpy INVALID_PARAM -> INVALID_ARGUMENT",
                    test_copy_invalid_param);
        CU_add_test(suite, "aclrtSynchronizeStream device error",
                    test_stream_sync_device_error);
        CU_add_test(suite, "unknown aclError -> DEVICE_ERROR",
                    test_unknown_code);
        CU_add_test(suite, "ACL_ERROR_INVALID_DEVICE -> INVALID_DEVICE",
                    test_invalid_device_code);
        CU_add_test(suite, "aclnn add, multiply, relu compute",
                    test_kernels_compute);
        CU_add_test(suite, "aclnnAdd fails -> DEVICE_ERROR",
                    test_kernel_launch_error);
        CU_add_test(suite, "aclnnMulGetWorkspaceSize refuses -> NOT_SUPPORTED",
                    test_kernel_refusal);
        CU_add_test(suite, "aclnn elementwise ops compute", test_ew_compute);
        CU_add_test(suite, "aclnn maximum, minimum (int32), copy; "
                    "aclnnInplaceCopy fails -> DEVICE_ERROR",
                    test_ew_int_and_copy);
        CU_add_test(suite, "float maximum not offered; aclnnSub refuses -> "
                    "NOT_SUPPORTED; aclnnGeluV2 fails -> DEVICE_ERROR",
                    test_ew_errors);
        CU_add_test(suite, "the workspace comes from the core",
                    test_workspace_from_core);
        CU_add_test(suite, "older core: own workspace; aclrtMalloc fails -> "
                           "OUT_OF_MEMORY",
                    test_workspace_older_core);
        CU_add_test(suite, "HCCL ids are 4108 bytes and arrive whole",
                    test_hccl_ids);
        CU_add_test(suite, "HCCL errors mapped; AVG and int64 sums refused",
                    test_hccl_errors);
        CU_add_test(suite, "a communicator left alive is destroyed at "
                           "finalize",
                    test_comm_left_alive);
    } else {
        suite = CU_add_suite("npu without a usable ACL", NULL, NULL);
        CU_add_test(suite, "identity", test_identity);
        CU_add_test(suite, "0 devices and the reason", test_reason);
        CU_add_test(suite, "calls answer with a status", test_calls_answer);
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_suites_failed() +
             CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return failed ? 1 : 0;
}
