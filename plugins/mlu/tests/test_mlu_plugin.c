/*
 * The mlu plugin without Neuware and over the stand-in (meson tests mlu-*,
 * plugins/mlu/tests/meson.build).
 *
 *   test_mlu_plugin none TEXT   libcnrt.so missing, or a stand-in with no
 *                               device: the plugin loads, has 0 devices, a
 *                               reason containing TEXT, and every call
 *                               answers with the ABI's status.
 *   test_mlu_plugin standin     over the stand-in: a CNRT failure injected
 *                               into one call comes back as the mapped
 *                               keel_status, naming the CNRT function and
 *                               the error; the CNNL kernels compute (strict
 *                               mode: no CPU fallback), their workspace
 *                               comes from the core, and visible devices
 *                               are refused after init.
 *   test_mlu_plugin partial     over a stand-in built without cnnlExp_v2:
 *                               exp is not offered, the rest still is.
 *   test_mlu_plugin visible     over the stand-in's 2 devices with
 *                               KEEL_VISIBLE_DEVICES=mlu:1: one device,
 *                               CNRT's device 1, and it works.
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

#include "cnrt_api.h"

static const char *reason_text;

static const keel_plugin_api *mlu_table(keel_plugin_info *info)
{
    keel_plugin_info tmp;

    if (!info)
        info = &tmp;
    for (int i = 0; i < keel_plugin_count(); i++)
        if (keel_plugin_get_info(i, info) == KEEL_STATUS_OK && info->name &&
            !strcmp(info->name, "mlu"))
            return keel_plugin_table(i);
    return NULL;
}

/* ---- without a usable runtime -------------------------------------------- */

static void t_loaded(void)
{
    keel_plugin_info info;
    const keel_plugin_api *api = mlu_table(&info);
    keel_kernel k = {0};

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_TRUE(info.loaded);
    CU_ASSERT_STRING_EQUAL(info.device_type, "mlu");
    CU_ASSERT_EQUAL(info.abi_major, KEEL_ABI_VERSION_MAJOR);
    CU_ASSERT_PTR_NOT_NULL(api->collective); /* the in-process engine */
    CU_ASSERT_PTR_NOT_NULL(api->device->set_visible_devices);
    CU_ASSERT_NOT_EQUAL(api->kernel->lookup(0, "add", KEEL_F32, &k),
                        KEEL_STATUS_OK);
    CU_ASSERT_PTR_NULL(k.fn);
}

static void t_reason(void)
{
    keel_plugin_info info;
    keel_place pl;

    CU_ASSERT_PTR_NOT_NULL_FATAL(mlu_table(&info));
    CU_ASSERT_EQUAL(info.device_count, 0);
    CU_ASSERT_EQUAL(keel_device_count("mlu"), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(info.reason);
    printf("\n    reason: %s\n", info.reason);
    CU_ASSERT_PTR_NOT_NULL(strstr(info.reason, reason_text));
    CU_ASSERT_PTR_NOT_NULL(strstr(info.reason, "libcnrt.so"));
    CU_ASSERT_EQUAL(keel_place_parse("mlu:0", &pl), KEEL_STATUS_INVALID_DEVICE);
}

static void t_statuses(void)
{
    const keel_plugin_api *api = mlu_table(NULL);
    keel_device_props props = {.struct_size = sizeof(props)};
    keel_stream s = NULL;
    keel_event e = NULL;
    keel_dptr d = 7;
    int32_t n = -1, one = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    struct {
        const char *what;
        keel_status got, want;
    } rows[] = {
        {"count", api->device->get_device_count(&n), KEEL_STATUS_OK},
        {"count NULL", api->device->get_device_count(NULL),
         KEEL_STATUS_INVALID_ARGUMENT},
        {"props", api->device->get_device_props(0, &props),
         KEEL_STATUS_INVALID_DEVICE},
        {"visible", api->device->set_visible_devices(&one, 1),
         KEEL_STATUS_INVALID_ARGUMENT},
        {"init", api->device->init(), KEEL_STATUS_UNAVAILABLE},
        {"alloc", api->memory->alloc(0, 64, &d), KEEL_STATUS_NOT_INITIALIZED},
        {"stream", api->stream->stream_create(0, 0, &s),
         KEEL_STATUS_NOT_INITIALIZED},
        {"event", api->stream->event_create(0, &e),
         KEEL_STATUS_NOT_INITIALIZED},
        {"sync", api->device->synchronize(0), KEEL_STATUS_NOT_INITIALIZED},
        {"finalize", api->device->finalize(), KEEL_STATUS_OK},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        if (rows[i].got != rows[i].want)
            printf("\n    %s: %d, want %d", rows[i].what, (int)rows[i].got,
                   (int)rows[i].want);
        CU_ASSERT_EQUAL(rows[i].got, rows[i].want);
    }
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(d, 0);
}

/* ---- over the stand-in ------------------------------------------------------ */

static void (*arm)(const char *name, int code);
static keel_place mlu0;

static int standin_setup(void)
{
    const char *lib = getenv("KEEL_MLU_CNRT_LIBRARY");
    void *h;

    if (!lib || keel_place_parse("mlu:0", &mlu0) != KEEL_STATUS_OK)
        return -1;
    if (!(h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD)))
        return -1;
    *(void **)&arm = dlsym(h, "cnrt_standin_fail_next");
    dlclose(h);
    return arm ? 0 : -1;
}

static void saw(const char *a, const char *b)
{
    const char *m = keel_last_error();

    printf("\n    %s\n", m);
    CU_ASSERT_PTR_NOT_NULL(strstr(m, a));
    if (b)
        CU_ASSERT_PTR_NOT_NULL(strstr(m, b));
}

/* One injected CNRT failure per row: the call, the code, what keel says. */
static void t_translation(void)
{
    unsigned char buf[32] = {0};
    keel_dptr p = 0;
    keel_stream s = NULL;
    keel_event e = NULL;

    CU_ASSERT_EQUAL_FATAL(keel_mem_alloc(mlu0, sizeof(buf), &p),
                          KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(keel_stream_create(mlu0, 0, &s), KEEL_STATUS_OK);

    arm("cnrtMalloc", cnrtErrorNoMem);
    keel_dptr q = 0;
    CU_ASSERT_EQUAL(keel_mem_alloc(mlu0, 4096, &q), KEEL_STATUS_OUT_OF_MEMORY);
    CU_ASSERT_EQUAL(q, 0);
    saw("cnrtMalloc", "cnrtErrorNoMem (100100)");

    arm("cnrtMemcpy", cnrtErrorArgsInvalid);
    CU_ASSERT_EQUAL(keel_mem_copy_h2d(mlu0, p, buf, sizeof(buf)),
                    KEEL_STATUS_INVALID_ARGUMENT);
    saw("cnrtMemcpyHostToDev", "cnrtErrorArgsInvalid (100006)");
    CU_ASSERT_EQUAL(keel_mem_copy_h2d(mlu0, p, buf, sizeof(buf)),
                    KEEL_STATUS_OK); /* once only */

    arm("cnrtQueueSync", cnrtErrorCndrvFuncCall);
    CU_ASSERT_EQUAL(keel_stream_synchronize(mlu0, s), KEEL_STATUS_DEVICE_ERROR);
    saw("cnrtQueueSync", "injected failure");

    arm("cnrtNotifierCreate", 424242);
    CU_ASSERT_EQUAL(keel_event_create(mlu0, &e), KEEL_STATUS_DEVICE_ERROR);
    CU_ASSERT_PTR_NULL(e);
    saw("cnrtNotifierCreate", "(424242)");

    arm("cnrtQueueCreate", cnrtErrorDeviceInvalid);
    keel_stream s2 = NULL;
    CU_ASSERT_EQUAL(keel_stream_create(mlu0, 0, &s2),
                    KEEL_STATUS_INVALID_DEVICE);
    saw("cnrtQueueCreate", "cnrtErrorDeviceInvalid");

    arm("cnrtSetDevice", cnrtErrorNoCnrtContext);
    CU_ASSERT_EQUAL(keel_mem_copy_h2d(mlu0, p, buf, sizeof(buf)),
                    KEEL_STATUS_NOT_INITIALIZED);
    saw("cnrtSetDevice", "cnrtErrorNoCnrtContext");

    CU_ASSERT_EQUAL(keel_stream_destroy(mlu0, s), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_mem_free(mlu0, p), KEEL_STATUS_OK);
}

/* A 2x3 float32 operation on mlu:0: 'a' add, 'm' multiply, 'r' relu,
 * 's' subtract, 'd' divide. */
static const float lhs[6] = {1.5f, -2.0f, 0.25f, 3.0f, -0.5f, 0.0f};
static const float rhs[6] = {2.0f, 4.0f, -8.0f, 0.5f, 1.0f, -3.0f};

static keel_status run_op(char op, float out[6])
{
    const int64_t dims[2] = {2, 3};
    keel_tensor *in[2] = {NULL, NULL}, *res = NULL;
    const float *src[2] = {lhs, rhs};
    keel_status st = KEEL_STATUS_OK;

    for (int i = 0; i < 2 && !st; i++)
        st = keel_tensor_from_floats(src[i], 2, dims, KEEL_F32, "mlu:0",
                                     &in[i]);
    CU_ASSERT_EQUAL_FATAL(st, KEEL_STATUS_OK);
    switch (op) {
    case 'a': st = keel_add(in[0], in[1], &res); break;
    case 'm': st = keel_multiply(in[0], in[1], &res); break;
    case 's': st = keel_subtract(in[0], in[1], &res); break;
    case 'd': st = keel_divide(in[0], in[1], &res); break;
    default: st = keel_relu(in[0], &res); break;
    }
    if (st == KEEL_STATUS_OK)
        st = keel_tensor_to_host(res, out, 6 * sizeof(float));
    keel_tensor_free(res);
    for (int i = 0; i < 2; i++)
        keel_tensor_free(in[i]);
    return st;
}

static void t_kernels(void)
{
    const char ops[5] = {'a', 'm', 'r', 's', 'd'};
    /* lhs / rhs, worked out by hand (all exact in float32) */
    static const float quot[6] = {0.75f, -0.5f, -0.03125f, 6.0f, -0.5f,
                                  -0.0f};
    float got[6];

    for (int o = 0; o < 5; o++) {
        CU_ASSERT_EQUAL_FATAL(run_op(ops[o], got), KEEL_STATUS_OK);
        for (int i = 0; i < 6; i++) {
            float want = ops[o] == 'a'   ? lhs[i] + rhs[i]
                         : ops[o] == 'm' ? lhs[i] * rhs[i]
                         : ops[o] == 's' ? lhs[i] - rhs[i]
                         : ops[o] == 'd' ? quot[i]
                                         : (lhs[i] > 0 ? lhs[i] : 0.0f);
            CU_ASSERT_EQUAL(got[i], want);
        }
    }
}

/* The one-input ops on six float32 values each, against results worked
 * out by hand (to 10 digits where they are not exact). */
static const struct unary_case {
    const char *name;
    keel_status (*fn)(const keel_tensor *, keel_tensor **);
    const char *cnnl; /* the CNNL call behind it */
    float in[6], want[6];
} unary_cases[] = {
    {"sqrt", keel_sqrt, "cnnlSqrt_v2",
     {4.0f, 0.25f, 1.0f, 9.0f, 0.0f, 2.25f},
     {2.0f, 0.5f, 1.0f, 3.0f, 0.0f, 1.5f}},
    {"exp", keel_exp, "cnnlExp_v2",
     {0.0f, 1.0f, -1.0f, 2.0f, 0.5f, -0.5f},
     {1.0f, 2.718281828f, 0.3678794412f, 7.389056099f, 1.648721271f,
      0.6065306597f}},
    {"log", keel_log, "cnnlLog_v2",
     {1.0f, 0.5f, 4.0f, 10.0f, 0.25f, 2.0f},
     {0.0f, -0.6931471806f, 1.386294361f, 2.302585093f, -1.386294361f,
      0.6931471806f}},
    {"neg", keel_neg, "cnnlNegTensor",
     {1.5f, -2.0f, 0.25f, 3.0f, -0.5f, 0.0f},
     {-1.5f, 2.0f, -0.25f, -3.0f, 0.5f, -0.0f}},
    {"abs", keel_abs, "cnnlAbs",
     {1.5f, -2.0f, 0.25f, 3.0f, -0.5f, -0.0f},
     {1.5f, 2.0f, 0.25f, 3.0f, 0.5f, 0.0f}},
    {"sigmoid", keel_sigmoid, "cnnlActivationForward",
     {0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 0.5f},
     {0.5f, 0.7310585786f, 0.2689414214f, 0.8807970780f, 0.1192029220f,
      0.6224593312f}},
    {"tanh", keel_tanh, "cnnlActivationForward",
     {0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 0.5f},
     {0.0f, 0.7615941560f, -0.7615941560f, 0.9640275801f, -0.9640275801f,
      0.4621171573f}},
};
#define NUNARY (sizeof(unary_cases) / sizeof(unary_cases[0]))

static keel_status run_unary(const struct unary_case *c, float out[6])
{
    const int64_t dims[2] = {2, 3};
    keel_tensor *in = NULL, *res = NULL;
    keel_status st = keel_tensor_from_floats(c->in, 2, dims, KEEL_F32,
                                             "mlu:0", &in);

    CU_ASSERT_EQUAL_FATAL(st, KEEL_STATUS_OK);
    st = c->fn(in, &res);
    if (st == KEEL_STATUS_OK)
        st = keel_tensor_to_host(res, out, 6 * sizeof(float));
    keel_tensor_free(res);
    keel_tensor_free(in);
    return st;
}

static void t_unary_kernels(void)
{
    float got[6];

    for (size_t c = 0; c < NUNARY; c++) {
        printf("\n    %s", unary_cases[c].name);
        CU_ASSERT_EQUAL_FATAL(run_unary(&unary_cases[c], got),
                              KEEL_STATUS_OK);
        for (int i = 0; i < 6; i++) {
            float d = got[i] - unary_cases[c].want[i];
            CU_ASSERT(d < 1e-6f && d > -1e-6f);
        }
    }
}

/* copy: the transpose of lhs (a strided view) made contiguous. */
static keel_status run_copy(float out[6])
{
    const int64_t dims[2] = {2, 3};
    keel_tensor *in = NULL, *t = NULL, *res = NULL;
    keel_status st = keel_tensor_from_floats(lhs, 2, dims, KEEL_F32, "mlu:0",
                                             &in);

    CU_ASSERT_EQUAL_FATAL(st, KEEL_STATUS_OK);
    st = keel_transpose(in, 0, 1, &t);
    if (st == KEEL_STATUS_OK)
        st = keel_contiguous(t, &res);
    if (st == KEEL_STATUS_OK)
        st = keel_tensor_to_host(res, out, 6 * sizeof(float));
    keel_tensor_free(res);
    keel_tensor_free(t);
    keel_tensor_free(in);
    return st;
}

static void t_copy_kernel(void)
{
    static const float want[6] = {1.5f, 3.0f, -2.0f, -0.5f, 0.25f, 0.0f};
    uint64_t before = keel_fallback_count(KEEL_OP_COPY);
    float got[6];

    CU_ASSERT_EQUAL_FATAL(run_copy(got), KEEL_STATUS_OK);
    for (int i = 0; i < 6; i++)
        CU_ASSERT_EQUAL(got[i], want[i]);
    CU_ASSERT_EQUAL(keel_fallback_count(KEEL_OP_COPY), before);
}

static void t_kernel_failures(void)
{
    float got[6];

    arm("cnnlOpTensor", CNNL_STATUS_EXECUTION_FAILED);
    CU_ASSERT_EQUAL(run_op('a', got), KEEL_STATUS_DEVICE_ERROR);
    saw("cnnlOpTensor", "CNNL_STATUS_EXECUTION_FAILED");

    /* a refusal is NOT_SUPPORTED (strict mode: no fallback to hide it) */
    arm("cnnlActivationForward", CNNL_STATUS_BAD_PARAM);
    CU_ASSERT_EQUAL(run_op('r', got), KEEL_STATUS_NOT_SUPPORTED);
    saw("cnnlActivationForward", "CNNL_STATUS_BAD_PARAM");

    /* each new op's CNNL call, failing, is named in the error */
    arm("cnnlOpTensor", CNNL_STATUS_EXECUTION_FAILED);
    CU_ASSERT_EQUAL(run_op('s', got), KEEL_STATUS_DEVICE_ERROR);
    saw("cnnlOpTensor", "CNNL_STATUS_EXECUTION_FAILED");
    arm("cnnlDiv_v2", CNNL_STATUS_EXECUTION_FAILED);
    CU_ASSERT_EQUAL(run_op('d', got), KEEL_STATUS_DEVICE_ERROR);
    saw("cnnlDiv_v2", "CNNL_STATUS_EXECUTION_FAILED");
    for (size_t c = 0; c < NUNARY; c++) {
        arm(unary_cases[c].cnnl, CNNL_STATUS_EXECUTION_FAILED);
        CU_ASSERT_EQUAL(run_unary(&unary_cases[c], got),
                        KEEL_STATUS_DEVICE_ERROR);
        saw(unary_cases[c].cnnl, "CNNL_STATUS_EXECUTION_FAILED");
    }
    arm("cnnlCopy", CNNL_STATUS_EXECUTION_FAILED);
    CU_ASSERT_EQUAL(run_copy(got), KEEL_STATUS_DEVICE_ERROR);
    saw("cnnlCopy", "CNNL_STATUS_EXECUTION_FAILED");
}

/* What the new kernels refuse at phase 1, called directly (so the status
 * is the kernel's own, with no dispatch around it): a view with a
 * negative stride and one of 2^31 elements (no CNNL descriptor says
 * them). */
static void t_kernel_refusals(void)
{
    const keel_plugin_api *api = mlu_table(NULL);
    keel_dptr d[3] = {0};
    keel_tensor_desc td[3];
    keel_kernel_args a;
    keel_kernel k;
    keel_status st;

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    memset(td, 0, sizeof(td));
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL_FATAL(keel_mem_alloc(mlu0, 64, &d[i]),
                              KEEL_STATUS_OK);
        td[i] = (keel_tensor_desc){.data = d[i], .dtype = KEEL_F32, .ndim = 1};
        td[i].shape[0] = 4;
        td[i].strides[0] = 1;
    }
    memset(&a, 0, sizeof(a));
    a.struct_size = (uint32_t)KEEL_KERNEL_ARGS_MIN_SIZE;
    a.outputs = &td[2];
    a.num_outputs = 1;

    /* copy of x[::-1]: its data points at the last element */
    CU_ASSERT_EQUAL_FATAL(api->kernel->lookup(0, "copy", KEEL_F32, &k),
                          KEEL_STATUS_OK);
    td[0].data = d[0] + 3 * sizeof(float);
    td[0].strides[0] = -1;
    a.inputs = td;
    a.num_inputs = 1;
    st = k.fn(k.kernel_data, &a);
    printf("\n    copy of a reversed view: %s", keel_status_name(st));
    CU_ASSERT_EQUAL(st, KEEL_STATUS_NOT_SUPPORTED);
    td[0].data = d[0];
    td[0].strides[0] = 1;

    /* divide of 2^31 elements: a size past INT_MAX (never touched) */
    CU_ASSERT_EQUAL_FATAL(api->kernel->lookup(0, "divide", KEEL_F32, &k),
                          KEEL_STATUS_OK);
    for (int i = 0; i < 3; i++)
        td[i].shape[0] = (int64_t)1 << 31;
    a.num_inputs = 2;
    st = k.fn(k.kernel_data, &a);
    printf("\n    divide of 2^31 elements: %s", keel_status_name(st));
    CU_ASSERT_EQUAL(st, KEEL_STATUS_NOT_SUPPORTED);
    for (int i = 0; i < 3; i++)
        keel_mem_free(mlu0, d[i]);
}

/* add's workspace is a block of the core's caching allocator: x, y, the
 * output and the workspace, all given back. */
static void t_workspace(void)
{
    keel_memory_stats a, b;
    float got[6];

    CU_ASSERT_EQUAL(keel_memory_stats_get("mlu:0", &a), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(run_op('m', got), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_memory_stats_get("mlu:0", &b), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(b.alloc_count - a.alloc_count, 4);
    CU_ASSERT_EQUAL(b.allocated, a.allocated);
}

/* An older core's launch (no workspace call): cnrtMalloc'd workspace. */
static void t_workspace_older_core(void)
{
    const keel_plugin_api *api = mlu_table(NULL);
    static const float xs[4] = {1, 2, 3, 4}, ys[4] = {10, 20, 30, 40};
    float got[4] = {0};
    keel_dptr d[3] = {0};
    keel_tensor_desc td[3];
    keel_kernel_args a;
    keel_kernel k;

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_EQUAL_FATAL(api->kernel->lookup(0, "add", KEEL_F32, &k),
                          KEEL_STATUS_OK);
    memset(td, 0, sizeof(td));
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL_FATAL(keel_mem_alloc(mlu0, sizeof(xs), &d[i]),
                              KEEL_STATUS_OK);
        td[i] = (keel_tensor_desc){.data = d[i], .dtype = KEEL_F32, .ndim = 1};
        td[i].shape[0] = 4;
        td[i].strides[0] = 1;
    }
    CU_ASSERT_EQUAL(keel_mem_copy_h2d(mlu0, d[0], xs, sizeof(xs)), 0);
    CU_ASSERT_EQUAL(keel_mem_copy_h2d(mlu0, d[1], ys, sizeof(ys)), 0);
    memset(&a, 0, sizeof(a));
    a.struct_size = (uint32_t)KEEL_KERNEL_ARGS_MIN_SIZE;
    a.inputs = td;
    a.num_inputs = 2;
    a.outputs = &td[2];
    a.num_outputs = 1;
    CU_ASSERT_EQUAL(k.fn(k.kernel_data, &a), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_mem_copy_d2h(mlu0, got, d[2], sizeof(got)), 0);
    CU_ASSERT(got[0] == 11 && got[3] == 44);
    arm("cnrtMalloc", cnrtErrorNoMem);
    CU_ASSERT_EQUAL(k.fn(k.kernel_data, &a), KEEL_STATUS_OUT_OF_MEMORY);
    for (int i = 0; i < 3; i++)
        keel_mem_free(mlu0, d[i]);
}

static void t_visible_after_init(void)
{
    const keel_plugin_api *api = mlu_table(NULL);
    int32_t one = 1;

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_EQUAL(api->device->set_visible_devices(&one, 1),
                    KEEL_STATUS_INVALID_STATE);
}

/* KEEL_VISIBLE_DEVICES=mlu:1 reached set_visible_devices: mlu:0 is CNRT's
 * device 1, and memory on it round-trips. */
static void t_visible(void)
{
    keel_device_props props = {.struct_size = sizeof(props)};
    unsigned char in[64], out[64];
    keel_place pl;
    keel_dptr p = 0;

    for (int i = 0; i < 64; i++)
        in[i] = (unsigned char)(i * 7 + 1);
    CU_ASSERT_EQUAL(keel_device_count("mlu"), 1);
    CU_ASSERT_EQUAL_FATAL(keel_place_parse("mlu:0", &pl), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_place_parse("mlu:1", &(keel_place){0}),
                    KEEL_STATUS_INVALID_DEVICE);
    CU_ASSERT_EQUAL_FATAL(keel_device_get_props(pl, &props), KEEL_STATUS_OK);
    printf("\n    mlu:0 is %s\n", props.name);
    CU_ASSERT_PTR_NOT_NULL(strstr(props.name, "cnrt device 1"));
    CU_ASSERT_EQUAL_FATAL(keel_mem_alloc(pl, sizeof(in), &p), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_mem_copy_h2d(pl, p, in, sizeof(in)), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(keel_mem_copy_d2h(pl, out, p, sizeof(out)), KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(memcmp(in, out, sizeof(in)), 0);
    CU_ASSERT_EQUAL(keel_mem_free(pl, p), KEEL_STATUS_OK);
}

/* Over the partial stand-in (no cnnlExp_v2): exp is not offered, so in
 * strict mode it fails instead of falling back, while sqrt and log, whose
 * entry points are there, still compute. */
static void t_partial(void)
{
    const keel_plugin_api *api = mlu_table(NULL);
    keel_kernel k;
    float got[6];

    CU_ASSERT_PTR_NOT_NULL_FATAL(api);
    CU_ASSERT_EQUAL(api->kernel->lookup(0, "exp", KEEL_F32, &k),
                    KEEL_STATUS_NOT_FOUND);
    CU_ASSERT_EQUAL(api->kernel->lookup(0, "sqrt", KEEL_F32, &k),
                    KEEL_STATUS_OK);
    CU_ASSERT_EQUAL(api->kernel->lookup(0, "add", KEEL_F32, &k),
                    KEEL_STATUS_OK);
    for (size_t c = 0; c < NUNARY; c++) {
        keel_status st = run_unary(&unary_cases[c], got);
        if (!strcmp(unary_cases[c].name, "exp")) {
            CU_ASSERT_NOT_EQUAL(st, KEEL_STATUS_OK);
            continue;
        }
        if (strcmp(unary_cases[c].name, "sqrt") &&
            strcmp(unary_cases[c].name, "log"))
            continue;
        CU_ASSERT_EQUAL_FATAL(st, KEEL_STATUS_OK);
        for (int i = 0; i < 6; i++) {
            float d = got[i] - unary_cases[c].want[i];
            CU_ASSERT(d < 1e-6f && d > -1e-6f);
        }
    }
}

int main(int argc, char **argv)
{
    bool standin = argc >= 2 && !strcmp(argv[1], "standin");
    bool visible = argc >= 2 && !strcmp(argv[1], "visible");
    bool partial = argc >= 2 && !strcmp(argv[1], "partial");
    CU_pSuite s;
    unsigned bad;

    if (!standin && !visible && !partial &&
        (argc < 3 || strcmp(argv[1], "none"))) {
        fprintf(stderr, "usage: %s none TEXT | standin | visible | partial\n",
                argv[0]);
        return 2;
    }
    reason_text = standin || visible || partial ? "" : argv[2];
    if (!standin && !visible && !partial && !getenv("KEEL_MLU_CNRT_LIBRARY") &&
        keel_device_count("mlu") > 0) {
        printf("SKIP: a libcnrt.so with devices is on the library path\n");
        keel_shutdown();
        return 77;
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    if (partial) {
        s = CU_add_suite("mlu over a stand-in without cnnlExp_v2",
                         standin_setup, NULL);
        CU_add_test(s, "exp falls back, the others stay", t_partial);
    } else if (visible) {
        s = CU_add_suite("mlu with KEEL_VISIBLE_DEVICES", NULL, NULL);
        CU_add_test(s, "mlu:1 only", t_visible);
    } else if (standin) {
        s = CU_add_suite("mlu over the stand-in Neuware", standin_setup, NULL);
        CU_add_test(s, "CNRT failures map to keel statuses", t_translation);
        CU_add_test(s, "CNNL add, multiply, relu compute", t_kernels);
        CU_add_test(s, "CNNL sqrt, exp, log, neg, abs, sigmoid, tanh",
                    t_unary_kernels);
        CU_add_test(s, "CNNL copy of a strided view", t_copy_kernel);
        CU_add_test(s, "CNNL failures and refusals", t_kernel_failures);
        CU_add_test(s, "phase-1 refusals", t_kernel_refusals);
        CU_add_test(s, "the workspace comes from the core", t_workspace);
        CU_add_test(s, "older core: cnrtMalloc workspace",
                    t_workspace_older_core);
        CU_add_test(s, "set_visible_devices after init", t_visible_after_init);
    } else {
        s = CU_add_suite("mlu without a usable CNRT", NULL, NULL);
        CU_add_test(s, "the plugin loads", t_loaded);
        CU_add_test(s, "0 devices and the reason", t_reason);
        CU_add_test(s, "calls answer with a status", t_statuses);
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    bad = CU_get_number_of_failures() + CU_get_number_of_suites_failed() +
          CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    keel_shutdown();
    return bad ? 1 : 0;
}
