/*
 * keel GPU anchors: what the CUDA libraries do on their own, measured in
 * the same run as keel bench (bench/gpu/run.sh). Needs only the CUDA
 * toolkit (cudart, cuBLAS), so it builds on a bare GPU machine:
 *
 *   nvcc -O3 -std=c++17 -o cuda_ref bench/gpu/cuda_ref.cu -lcublas
 *   ./cuda_ref [out.json]
 *
 * Measures, with CUDA events, median of repeated timed loops:
 *   gemm f32  (CUBLAS_COMPUTE_32F, no TF32) and bf16 (CUDA_R_16BF in and
 *   out, float accumulation, tensor cores), row-major n x n x n through
 *   cublasGemmEx, n = 4096 and 8192: TFLOP/s = 2 n^3 / time;
 *   d2d: cudaMemcpyAsync of 1 GiB device to device: bytes copied per
 *   second and memory traffic (read + write) per second;
 *   add: a plain float32 c = a + b over 64M elements (float4 loads), the
 *   bandwidth a simple elementwise kernel reaches: traffic (3 x 256 MiB)
 *   per second.
 * Prints a table and writes JSON (default cuda_ref.json).
 */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#define CHECK(x)                                                             \
    do {                                                                     \
        cudaError_t e_ = (x);                                                \
        if (e_ != cudaSuccess) {                                             \
            fprintf(stderr, "cuda_ref: %s: %s\n", #x,                        \
                    cudaGetErrorString(e_));                                 \
            exit(1);                                                         \
        }                                                                    \
    } while (0)
#define CHECK_BLAS(x)                                                        \
    do {                                                                     \
        cublasStatus_t s_ = (x);                                             \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                   \
            fprintf(stderr, "cuda_ref: %s: %s\n", #x,                        \
                    cublasGetStatusName(s_));                                \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

struct result {
    char name[64];
    double ms;    /* median per call */
    double value; /* TFLOP/s or GB/s */
    const char *unit;
    double traffic_gbs; /* read + write, for memory-bound entries */
};

static std::vector<result> results;

/* Median over `reps` timed loops of `iters` calls each, ms per call. */
template <class F> static double time_ms(F f, int iters, int reps)
{
    cudaEvent_t a, b;
    std::vector<double> v;

    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    f(); /* warm up */
    CHECK(cudaDeviceSynchronize());
    for (int r = 0; r < reps; r++) {
        float ms = 0;
        CHECK(cudaEventRecord(a));
        for (int i = 0; i < iters; i++)
            f();
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        CHECK(cudaEventElapsedTime(&ms, a, b));
        v.push_back(ms / iters);
    }
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

__global__ void fill(float *p, size_t n, float v)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = v + (float)(i % 7);
}

__global__ void fill_bf16(__nv_bfloat16 *p, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16(0.01f * (float)(i % 13) - 0.05f);
}

__global__ void add4(const float4 *a, const float4 *b, float4 *c, size_t n4)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x) {
        float4 x = a[i], y = b[i];
        c[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
}

static void gemm(cublasHandle_t h, int n, bool bf16)
{
    size_t es = bf16 ? 2 : 4, bytes = (size_t)n * n * es;
    void *a, *b, *c;
    float one = 1.0f, zero = 0.0f;
    cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    result r;

    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMalloc(&b, bytes));
    CHECK(cudaMalloc(&c, bytes));
    if (bf16) {
        fill_bf16<<<1024, 256>>>((__nv_bfloat16 *)a, (size_t)n * n);
        fill_bf16<<<1024, 256>>>((__nv_bfloat16 *)b, (size_t)n * n);
    } else {
        fill<<<1024, 256>>>((float *)a, (size_t)n * n, 0.5f);
        fill<<<1024, 256>>>((float *)b, (size_t)n * n, 0.25f);
    }
    CHECK(cudaGetLastError());
    /* Row-major C = A B is column-major C^T = B^T A^T. */
    auto call = [&] {
        CHECK_BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one,
                                b, t, n, a, t, n, &zero, c, t, n,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    int iters = n >= 8192 ? (bf16 ? 10 : 3) : (bf16 ? 40 : 10);
    r.ms = time_ms(call, iters, 5);
    snprintf(r.name, sizeof(r.name), "gemm/%s/%d", bf16 ? "bf16" : "f32", n);
    r.value = 2.0 * n * (double)n * n / (r.ms * 1e-3) / 1e12;
    r.unit = "TFLOP/s";
    r.traffic_gbs = 0;
    results.push_back(r);
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(c));
}

int main(int argc, char **argv)
{
    const char *out = argc > 1 ? argv[1] : "cuda_ref.json";
    cudaDeviceProp p;
    cublasHandle_t h;
    int drv = 0, rt = 0;

    CHECK(cudaGetDeviceProperties(&p, 0));
    CHECK(cudaDriverGetVersion(&drv));
    CHECK(cudaRuntimeGetVersion(&rt));
    CHECK_BLAS(cublasCreate(&h));
    /* Keep float32 GEMMs in full float32 (cuBLAS's default math mode). */
    CHECK_BLAS(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));

    for (int n = 4096; n <= 8192; n *= 2) {
        gemm(h, n, false);
        gemm(h, n, true);
    }

    /* d2d copy, 1 GiB */
    {
        size_t bytes = (size_t)1 << 30;
        void *a, *b;
        result r;
        CHECK(cudaMalloc(&a, bytes));
        CHECK(cudaMalloc(&b, bytes));
        CHECK(cudaMemset(a, 1, bytes));
        r.ms = time_ms([&] {
            CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
        }, 10, 5);
        snprintf(r.name, sizeof(r.name), "d2d/1GiB");
        r.value = bytes / (r.ms * 1e-3) / 1e9;
        r.unit = "GB/s copied";
        r.traffic_gbs = 2.0 * r.value;
        results.push_back(r);
        CHECK(cudaFree(a));
        CHECK(cudaFree(b));
    }

    /* add, f32, 64M elements */
    {
        size_t n = (size_t)1 << 26, bytes = n * 4;
        float *a, *b, *c;
        result r;
        CHECK(cudaMalloc(&a, bytes));
        CHECK(cudaMalloc(&b, bytes));
        CHECK(cudaMalloc(&c, bytes));
        fill<<<1024, 256>>>(a, n, 1.0f);
        fill<<<1024, 256>>>(b, n, 2.0f);
        int blocks = p.multiProcessorCount * 8;
        r.ms = time_ms([&] {
            add4<<<blocks, 256>>>((const float4 *)a, (const float4 *)b,
                                  (float4 *)c, n / 4);
        }, 20, 5);
        CHECK(cudaGetLastError());
        snprintf(r.name, sizeof(r.name), "add/f32/64M");
        r.value = 3.0 * bytes / (r.ms * 1e-3) / 1e9;
        r.unit = "GB/s traffic";
        r.traffic_gbs = r.value;
        results.push_back(r);
        CHECK(cudaFree(a));
        CHECK(cudaFree(b));
        CHECK(cudaFree(c));
    }

    printf("%s (sm_%d%d, %d SMs), driver %d, runtime %d\n", p.name, p.major,
           p.minor, p.multiProcessorCount, drv, rt);
    for (const result &r : results)
        printf("  %-16s %10.3f ms  %10.1f %s\n", r.name, r.ms, r.value,
               r.unit);

    FILE *f = fopen(out, "w");
    if (!f) {
        perror(out);
        return 1;
    }
    fprintf(f, "{\n \"device\": \"%s\",\n \"sm\": \"%d%d\",\n"
               " \"driver\": %d,\n \"runtime\": %d,\n \"results\": [\n",
            p.name, p.major, p.minor, drv, rt);
    for (size_t i = 0; i < results.size(); i++) {
        const result &r = results[i];
        fprintf(f, "  {\"name\": \"%s\", \"ms\": %.6f, \"value\": %.3f, "
                   "\"unit\": \"%s\", \"traffic_gbs\": %.3f}%s\n",
                r.name, r.ms, r.value, r.unit, r.traffic_gbs,
                i + 1 < results.size() ? "," : "");
    }
    fprintf(f, " ]\n}\n");
    fclose(f);
    cublasDestroy(h);
    return 0;
}
