/*
 * keel OpenCL plugin — the OpenCL backend of the shared kernel host code
 * (plugins/clkernels/host/ok.h): the program per device, its on-disk
 * binary cache, kernel objects, launches, scratch buffers and CLBlast.
 *
 * PROGRAM. The sources of plugins/clkernels/ (embedded at build time by
 * tools/embed_sources.py) are built into ONE program per device, on the
 * first launch there, with -cl-std=CL1.2 and -DKEEL_HAS_FP64 /
 * -DKEEL_HAS_FP16 when the device reports cl_khr_fp64 / cl_khr_fp16.
 *
 * CACHE. The built binary (clGetProgramInfo(CL_PROGRAM_BINARIES)) is kept
 * in $KEEL_OPENCL_CACHE_DIR, else $XDG_CACHE_HOME/keel/opencl, else
 * $HOME/.cache/keel/opencl, as <sha256>.bin where the SHA-256 covers the
 * sources, the build options, and the device's name, version and driver
 * version and the platform's name: any change to either side makes a new
 * key. A file is written under a temporary name and renamed, so a reader
 * never sees half of one. A file the driver refuses (corrupt, or built by
 * another driver build under the same version strings) is rebuilt from
 * source and replaced. KEEL_OPENCL_CACHE=0 turns the cache off, =1 on;
 * unset, it is on except on PoCL, which caches compiled kernels itself
 * (platform_caches_itself).
 *
 * KERNELS. Each cl_kernel is created on first use and kept per device in a
 * small hash table. Setting arguments and enqueueing happen under the
 * device's mutex: a cl_kernel's arguments are shared state, and
 * clSetKernelArg is not safe against another thread using the same
 * kernel.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "ok.h"

#ifdef KEEL_OCL_HAVE_CLBLAST
#include <clblast_c.h>
#endif

/* The embedded sources (generated clkernels_src.c). */
extern const char *const keel_clkernels_src[];
extern const char *const keel_clkernels_src_names[];

#define OK_KTAB 512 /* kernel hash slots per device (power of 2) */

struct ok_kslot {
    char *name;
    cl_kernel k;
};

struct ok_program {
    cl_program prog;
    struct ok_kslot kt[OK_KTAB];
    double build_ms;
    bool from_cache;
    bool cpu; /* CL_DEVICE_TYPE_CPU */
};

/* ---- errors ---------------------------------------------------------------- */

keel_status ok_fail(keel_status st, const char *fmt, ...)
{
    char buf[768];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return ocl_fail(st, "%s", buf);
}

/* ---- dtypes and devices -------------------------------------------------- */

uint32_t ok_device_dtype_mask(int32_t device)
{
    uint32_t m = KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_BF16) |
                 KEEL_DTYPE_BIT(KEEL_I8) | KEEL_DTYPE_BIT(KEEL_U8) |
                 KEEL_DTYPE_BIT(KEEL_I32) | KEEL_DTYPE_BIT(KEEL_I64) |
                 KEEL_DTYPE_BIT(KEEL_BOOL);

    if (device < 0 || device >= ocl_g.ndev)
        return 0;
    if (ocl_g.dev[device].fp64)
        m |= KEEL_DTYPE_BIT(KEEL_F64);
    if (ocl_g.dev[device].fp16)
        m |= KEEL_DTYPE_BIT(KEEL_F16);
    return m;
}

uint32_t ok_backend_dtype_mask(int32_t device)
{
    return ok_device_dtype_mask(device);
}

int32_t ok_backend_device_count(void)
{
    return ocl_g.ndev;
}

const keel_kernel_ops ocl_kernel_ops = {
    .header = KEEL_TABLE_HEADER(keel_kernel_ops),
    .lookup = ok_kernel_lookup,
};

/* ---- the binary cache ------------------------------------------------------ */

static const char *env(const char *name)
{
    const keel_host_api *h = ocl_g.host;
    if (h && h->header.struct_size >=
                 offsetof(keel_host_api, get_env) + sizeof(h->get_env) &&
        h->get_env)
        return h->get_env(name);
    return getenv(name);
}

static void ok_log(keel_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void ok_log(keel_log_level lvl, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;

    if (!ocl_g.host || !ocl_g.host->log)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    ocl_g.host->log(lvl, buf);
}

/* Is the platform PoCL? It keeps its own cache of compiled kernels
 * (POCL_CACHE_DIR, default ~/.cache/pocl), and its program binary holds
 * only the program's bitcode: fetching it compiles every kernel of the
 * program first (66 s for this program on 2 cores, against 2 s for the
 * build and the kernels compiled lazily as they are launched), and loading
 * it saves only the 2 s build. So the cache is off there by default. */
static bool platform_caches_itself(const struct ocl_device *d)
{
    return strstr(d->platform_name, "Portable Computing Language") != NULL;
}

/* The cache folder, made if missing; false when the cache is off or no
 * folder can be made. */
static bool cache_dir(const struct ocl_device *d, char *out, size_t size)
{
    const char *v = env("KEEL_OPENCL_CACHE");
    const char *dir = env("KEEL_OPENCL_CACHE_DIR");
    char tmp[4096];
    int n;

    if (v && !strcmp(v, "0"))
        return false;
    if (!(v && !strcmp(v, "1")) && platform_caches_itself(d))
        return false;
    if (dir && *dir)
        n = snprintf(tmp, sizeof(tmp), "%s", dir);
    else if ((dir = env("XDG_CACHE_HOME")) && *dir)
        n = snprintf(tmp, sizeof(tmp), "%s/keel/opencl", dir);
    else if ((dir = env("HOME")) && *dir)
        n = snprintf(tmp, sizeof(tmp), "%s/.cache/keel/opencl", dir);
    else
        return false;
    if (n <= 0 || (size_t)n >= sizeof(tmp) || (size_t)n >= size)
        return false;
    /* mkdir -p */
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return false;
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return false;
    memcpy(out, tmp, (size_t)n + 1);
    return true;
}

static void cache_key(const struct ocl_device *d, const char *opts,
                      char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    const char *parts[] = {opts, d->name, d->version, d->driver,
                           d->platform_name};

    hex[0] = '\0';
    if (!c)
        return;
    if (EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1)
        goto out;
    for (int i = 0; keel_clkernels_src[i]; i++)
        EVP_DigestUpdate(c, keel_clkernels_src[i],
                         strlen(keel_clkernels_src[i]) + 1);
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
        EVP_DigestUpdate(c, parts[i], strlen(parts[i]) + 1);
    if (EVP_DigestFinal_ex(c, md, &len) != 1 || len < 32)
        goto out;
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
out:
    EVP_MD_CTX_free(c);
}

static unsigned char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long n;

    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) <= 0 ||
        n > (long)(1L << 30) || fseek(f, 0, SEEK_SET) != 0)
        goto out;
    buf = malloc((size_t)n);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    *size = (size_t)n;
out:
    fclose(f);
    return buf;
}

static void write_cache(const char *path, cl_program prog, cl_device_id dev)
{
    size_t size = 0, n = 0;
    unsigned char *bin;
    char tmp[4200];
    FILE *f;

    (void)dev;
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size,
                         &n) != CL_SUCCESS ||
        n != sizeof(size) || size == 0)
        return;
    bin = malloc(size);
    if (!bin)
        return;
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof(bin), &bin,
                         NULL) != CL_SUCCESS)
        goto out;
    snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
    f = fopen(tmp, "wb");
    if (!f)
        goto out;
    if (fwrite(bin, 1, size, f) != size) {
        fclose(f);
        unlink(tmp);
        goto out;
    }
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        unlink(tmp);
out:
    free(bin);
}

/* ---- building ------------------------------------------------------------------ */

static keel_status build_error(struct ocl_device *d, int32_t device,
                               cl_program prog, cl_int err)
{
    size_t n = 0;
    char *log = NULL;

    if (clGetProgramBuildInfo(prog, d->id, CL_PROGRAM_BUILD_LOG, 0, NULL,
                              &n) == CL_SUCCESS &&
        n > 0 && (log = malloc(n + 1))) {
        if (clGetProgramBuildInfo(prog, d->id, CL_PROGRAM_BUILD_LOG, n, log,
                                  NULL) != CL_SUCCESS)
            log[0] = '\0';
        log[n] = '\0';
        ok_log(KEEL_LOG_ERROR, "opencl:%d: kernel program build log:\n%s",
               (int)device, log);
    }
    keel_status st = ocl_fail(KEEL_STATUS_DEVICE_ERROR,
                              "building the kernel program for opencl:%d "
                              "(%s) failed: %s; build log: %.600s",
                              (int)device, d->name, ocl_err_name(err),
                              log ? log : "(none)");
    free(log);
    return st;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Build (or load) the device's program. Called with d->mu held. */
static keel_status program_make(struct ocl_device *d, int32_t device)
{
    char opts[256], dir[4096], path[4200], key[65];
    bool cached = false;
    cl_program prog = NULL;
    cl_int err = CL_SUCCESS;
    double t0 = now_ms();
    struct ok_program *p;
    int nsrc = 0;

    snprintf(opts, sizeof(opts), "-cl-std=CL1.2%s%s",
             d->fp64 ? " -DKEEL_HAS_FP64" : "",
             d->fp16 ? " -DKEEL_HAS_FP16" : "");
    path[0] = '\0';
    if (cache_dir(d, dir, sizeof(dir))) {
        cache_key(d, opts, key);
        if (key[0])
            snprintf(path, sizeof(path), "%s/%s.bin", dir, key);
    }
    if (path[0]) {
        size_t size = 0;
        unsigned char *bin = read_file(path, &size);
        if (bin) {
            const unsigned char *bins[1] = {bin};
            cl_int bst = CL_SUCCESS;
            prog = clCreateProgramWithBinary(d->ctx, 1, &d->id, &size, bins,
                                             &bst, &err);
            free(bin);
            if (prog && err == CL_SUCCESS && bst == CL_SUCCESS &&
                clBuildProgram(prog, 1, &d->id, opts, NULL, NULL) ==
                    CL_SUCCESS) {
                cached = true;
            } else {
                ok_log(KEEL_LOG_WARN,
                       "opencl:%d: cached kernel binary %s refused (%s); "
                       "rebuilding from source",
                       (int)device, path, ocl_err_name(err ? err : bst));
                if (prog)
                    clReleaseProgram(prog);
                prog = NULL;
            }
        }
    }
    if (!prog) {
        while (keel_clkernels_src[nsrc])
            nsrc++;
        prog = clCreateProgramWithSource(d->ctx, (cl_uint)nsrc,
                                         (const char **)keel_clkernels_src,
                                         NULL, &err);
        if (!prog || err != CL_SUCCESS)
            return ocl_check(err, device, "clCreateProgramWithSource");
        err = clBuildProgram(prog, 1, &d->id, opts, NULL, NULL);
        if (err != CL_SUCCESS) {
            keel_status st = build_error(d, device, prog, err);
            clReleaseProgram(prog);
            return st;
        }
        if (path[0])
            write_cache(path, prog, d->id);
    }
    p = calloc(1, sizeof(*p));
    if (!p) {
        clReleaseProgram(prog);
        return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                        "opencl:%d: no memory for the program state",
                        (int)device);
    }
    p->prog = prog;
    p->from_cache = cached;
    {
        cl_device_type t = 0;
        p->cpu = clGetDeviceInfo(d->id, CL_DEVICE_TYPE, sizeof(t), &t,
                                 NULL) == CL_SUCCESS &&
                 (t & CL_DEVICE_TYPE_CPU);
    }
    p->build_ms = now_ms() - t0;
    ok_log(KEEL_LOG_INFO, "opencl:%d: kernel program %s in %.0f ms",
           (int)device, cached ? "loaded from the cache" : "built",
           p->build_ms);
    d->prog = p;
    return KEEL_STATUS_OK;
}

void ok_device_release(struct ocl_device *d)
{
    struct ok_program *p = d->prog;

    if (p) {
        for (int i = 0; i < OK_KTAB; i++) {
            if (p->kt[i].k)
                clReleaseKernel(p->kt[i].k);
            free(p->kt[i].name);
        }
        clReleaseProgram(p->prog);
        free(p);
        d->prog = NULL;
    }
    /* d->dummy belongs to the runtime (made by init, released by
     * finalize). */
}

keel_status ok_backend_begin(const keel_kernel_args *a, struct ok_launch *l)
{
    struct ocl_device *d;
    cl_command_queue q = NULL;
    keel_status st = ocl_device_ok(a->device);

    if (st)
        return st;
    st = ocl_queue(a->device, a->stream, &q);
    if (st)
        return st;
    d = &ocl_g.dev[a->device];
    pthread_mutex_lock(&d->mu);
    if (!d->prog)
        st = program_make(d, a->device);
    pthread_mutex_unlock(&d->mu);
    if (st)
        return st;
    l->queue = q;
    l->dev = d;
    l->fp64 = d->fp64;
    l->cpu = d->prog->cpu;
    return KEEL_STATUS_OK;
}

/* ---- launches ------------------------------------------------------------------ */

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u;
    while (*s)
        h = (h ^ (uint8_t)*s++) * 16777619u;
    return h;
}

/* The kernel `name` of the device's program. Called with d->mu held. */
static keel_status get_kernel(struct ocl_device *d, int32_t device,
                              const char *name, cl_kernel *out)
{
    struct ok_program *p = d->prog;
    uint32_t h = name_hash(name) & (OK_KTAB - 1);
    cl_int err = CL_SUCCESS;

    for (int probe = 0; probe < OK_KTAB; probe++) {
        struct ok_kslot *s = &p->kt[(h + (uint32_t)probe) & (OK_KTAB - 1)];
        if (s->name && !strcmp(s->name, name)) {
            *out = s->k;
            return KEEL_STATUS_OK;
        }
        if (s->name)
            continue;
        cl_kernel k = clCreateKernel(p->prog, name, &err);
        if (!k || err != CL_SUCCESS)
            return ocl_fail(err == CL_INVALID_KERNEL_NAME
                                ? KEEL_STATUS_INTERNAL
                                : KEEL_STATUS_DEVICE_ERROR,
                            "opencl:%d: kernel '%s' of the program: %s",
                            (int)device, name, ocl_err_name(err));
        s->name = strdup(name);
        if (!s->name) {
            clReleaseKernel(k);
            return ocl_fail(KEEL_STATUS_OUT_OF_MEMORY,
                            "opencl:%d: no memory", (int)device);
        }
        s->k = k;
        *out = k;
        return KEEL_STATUS_OK;
    }
    return ocl_fail(KEEL_STATUS_INTERNAL,
                    "opencl:%d: more than %d kernels in use", (int)device,
                    OK_KTAB);
}

static keel_status set_args(struct ocl_device *d, const struct ok_launch *l,
                            cl_kernel k, const char *name,
                            const struct ok_arg *args, int nargs)
{
    cl_uint idx = 0;
    cl_int err = CL_SUCCESS;
    keel_status st;

    for (int i = 0; i < nargs && err == CL_SUCCESS; i++) {
        const struct ok_arg *g = &args[i];
        switch (g->kind) {
        case OK_A_BUF: {
            cl_mem m = d->dummy;
            size_t off = 0;
            cl_ulong off64;
            if (g->bytes > 0) {
                st = ocl_resolve(l->device, g->ptr, g->bytes, &m, &off);
                if (st)
                    return st;
            }
            off64 = (cl_ulong)off;
            err = clSetKernelArg(k, idx++, sizeof(cl_mem), &m);
            if (err == CL_SUCCESS)
                err = clSetKernelArg(k, idx++, sizeof(off64), &off64);
            break;
        }
        case OK_A_MEM: {
            cl_mem m = g->mem ? (cl_mem)g->mem : d->dummy;
            cl_ulong zero = 0;
            err = clSetKernelArg(k, idx++, sizeof(cl_mem), &m);
            if (err == CL_SUCCESS)
                err = clSetKernelArg(k, idx++, sizeof(zero), &zero);
            break;
        }
        case OK_A_I32: {
            cl_int v = (cl_int)g->i;
            err = clSetKernelArg(k, idx++, sizeof(v), &v);
            break;
        }
        case OK_A_I64:
        case OK_A_U64: {
            cl_long v = (cl_long)g->i;
            err = clSetKernelArg(k, idx++, sizeof(v), &v);
            break;
        }
        case OK_A_F32: {
            cl_float v = (cl_float)g->f;
            err = clSetKernelArg(k, idx++, sizeof(v), &v);
            break;
        }
        case OK_A_F64: {
            cl_double v = g->f;
            err = clSetKernelArg(k, idx++, sizeof(v), &v);
            break;
        }
        case OK_A_DESC:
            err = clSetKernelArg(k, idx++, sizeof(struct ok_kdesc), g->desc);
            break;
        case OK_A_LOCAL:
            err = clSetKernelArg(k, idx++, (size_t)g->bytes, NULL);
            break;
        }
    }
    if (err != CL_SUCCESS)
        return ocl_fail(KEEL_STATUS_INTERNAL,
                        "%s: argument %u of kernel %s: %s", l->op,
                        (unsigned)(idx ? idx - 1 : 0), name,
                        ocl_err_name(err));
    return KEEL_STATUS_OK;
}

keel_status ok_run_nd(const struct ok_launch *l, const char *name, int dims,
                      const size_t *global, const size_t *local,
                      const struct ok_arg *args, int nargs)
{
    struct ocl_device *d = l->dev;
    size_t g[3];
    cl_kernel k = NULL;
    cl_int err;
    keel_status st;

    if (dims < 1 || dims > 3)
        return ok_fail(KEEL_STATUS_INTERNAL, "%s: %d launch dimensions",
                       l->op, dims);
    for (int i = 0; i < dims; i++) {
        if (global[i] == 0)
            return KEEL_STATUS_OK;
        g[i] = global[i];
        if (local) {
            if (local[i] == 0)
                return ok_fail(KEEL_STATUS_INTERNAL,
                               "%s: work-group size 0", l->op);
            g[i] = (global[i] + local[i] - 1) / local[i] * local[i];
        }
    }
    pthread_mutex_lock(&d->mu);
    st = get_kernel(d, l->device, name, &k);
    if (!st)
        st = set_args(d, l, k, name, args, nargs);
    if (!st) {
        err = clEnqueueNDRangeKernel((cl_command_queue)l->queue, k,
                                     (cl_uint)dims, NULL, g, local, 0, NULL,
                                     NULL);
        if (err != CL_SUCCESS)
            st = ocl_fail(err == CL_OUT_OF_RESOURCES ||
                                  err == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
                                  err == CL_OUT_OF_HOST_MEMORY
                              ? KEEL_STATUS_OUT_OF_MEMORY
                              : KEEL_STATUS_DEVICE_ERROR,
                          "%s: enqueueing kernel %s on opencl:%d: %s", l->op,
                          name, (int)l->device, ocl_err_name(err));
    }
    pthread_mutex_unlock(&d->mu);
    return st;
}

keel_status ok_scratch(const struct ok_launch *l, size_t bytes, ok_mem *m)
{
    struct ocl_device *d = l->dev;
    cl_int err = CL_SUCCESS;
    cl_mem b;

    *m = NULL;
    if (bytes == 0)
        bytes = 1;
    if ((uint64_t)bytes > d->max_alloc)
        return ok_fail(KEEL_STATUS_OUT_OF_MEMORY,
                       "%s: %zu bytes of scratch exceed the device's largest "
                       "buffer (%" PRIu64 " bytes) on opencl:%d",
                       l->op, bytes, d->max_alloc, (int)l->device);
    b = clCreateBuffer(d->ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (!b || err != CL_SUCCESS)
        return ok_fail(KEEL_STATUS_OUT_OF_MEMORY,
                       "%s: %zu bytes of scratch on opencl:%d: %s", l->op,
                       bytes, (int)l->device, ocl_err_name(err));
    *m = (ok_mem)b;
    return KEEL_STATUS_OK;
}

void ok_scratch_release(const struct ok_launch *l, ok_mem m)
{
    (void)l;
    if (m)
        clReleaseMemObject((cl_mem)m);
}

keel_status ok_scratch_upload(const struct ok_launch *l, const void *src,
                              size_t bytes, ok_mem *m)
{
    struct ocl_device *d = l->dev;
    cl_int err = CL_SUCCESS;
    cl_mem b;

    *m = NULL;
    if (bytes == 0)
        return ok_scratch(l, 1, m);
    b = clCreateBuffer(d->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes,
                       (void *)src, &err);
    if (!b || err != CL_SUCCESS)
        return ok_fail(KEEL_STATUS_OUT_OF_MEMORY,
                       "%s: %zu bytes of table on opencl:%d: %s", l->op, bytes,
                       (int)l->device, ocl_err_name(err));
    *m = (ok_mem)b;
    return KEEL_STATUS_OK;
}

/* ---- CLBlast --------------------------------------------------------------- */

const char *ok_backend_blas_name(void)
{
#ifdef KEEL_OCL_HAVE_CLBLAST
    return "CLBlast";
#else
    return "";
#endif
}

#ifdef KEEL_OCL_HAVE_CLBLAST
/* Bytes a row-major matrix operand spans over all batches. */
static bool gemm_span(int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                      int64_t stride, uint32_t es, uint64_t *bytes)
{
    int64_t a, b, last;

    if (rows <= 0 || cols <= 0 || batch <= 0 || ld < 0 || stride < 0)
        return false;
    if (__builtin_mul_overflow(batch - 1, stride, &a) ||
        __builtin_mul_overflow(rows - 1, ld, &b) ||
        __builtin_add_overflow(a, b, &last) ||
        __builtin_add_overflow(last, cols, &last) ||
        __builtin_mul_overflow((uint64_t)last, (uint64_t)es, bytes))
        return false;
    return true;
}

static keel_status gemm_operand(const struct ok_launch *l, keel_dptr p,
                                int64_t rows, int64_t cols, int64_t ld,
                                int64_t batch, int64_t stride, uint32_t es,
                                cl_mem *m, size_t *off_elems)
{
    uint64_t bytes;
    size_t off = 0;
    keel_status st;

    if (!gemm_span(rows, cols, ld, batch, stride, es, &bytes))
        return KEEL_STATUS_NOT_SUPPORTED;
    st = ocl_resolve(l->device, p, bytes, m, &off);
    if (st)
        return st;
    if (off % es)
        return KEEL_STATUS_NOT_SUPPORTED;
    *off_elems = off / es;
    return KEEL_STATUS_OK;
}
#endif

keel_status ok_backend_gemm(const struct ok_launch *l, const struct ok_gemm *g)
{
#ifdef KEEL_OCL_HAVE_CLBLAST
    struct ocl_device *d = l->dev;
    cl_command_queue q = (cl_command_queue)l->queue;
    uint32_t es = keel_dtype_size(g->dtype);
    cl_mem am, bm, cm;
    size_t ao, bo, co;
    CLBlastStatusCode rc;
    keel_status st;

    if (g->m <= 0 || g->n <= 0 || g->batch <= 0)
        return KEEL_STATUS_NOT_SUPPORTED;
    if (g->dtype != KEEL_F32 && !(g->dtype == KEEL_F64 && d->fp64))
        return KEEL_STATUS_NOT_SUPPORTED;
    if (g->k <= 0)
        return KEEL_STATUS_NOT_SUPPORTED; /* C = beta*C: the caller's kernel */
    st = gemm_operand(l, g->a, g->trans_a ? g->k : g->m,
                      g->trans_a ? g->m : g->k, g->lda, g->batch, g->stride_a,
                      es, &am, &ao);
    if (!st)
        st = gemm_operand(l, g->b, g->trans_b ? g->n : g->k,
                          g->trans_b ? g->k : g->n, g->ldb, g->batch,
                          g->stride_b, es, &bm, &bo);
    if (!st)
        st = gemm_operand(l, g->c, g->m, g->n, g->ldc, g->batch, g->stride_c,
                          es, &cm, &co);
    if (st)
        return st;
    const CLBlastTranspose ta = g->trans_a ? CLBlastTransposeYes
                                           : CLBlastTransposeNo;
    const CLBlastTranspose tb = g->trans_b ? CLBlastTransposeYes
                                           : CLBlastTransposeNo;
    pthread_mutex_lock(&d->mu);
    if (g->dtype == KEEL_F32) {
        if (g->batch == 1)
            rc = CLBlastSgemm(CLBlastLayoutRowMajor, ta, tb, (size_t)g->m,
                              (size_t)g->n, (size_t)g->k, (float)g->alpha, am,
                              ao, (size_t)g->lda, bm, bo, (size_t)g->ldb,
                              (float)g->beta, cm, co, (size_t)g->ldc, &q,
                              NULL);
        else
            rc = CLBlastSgemmStridedBatched(
                CLBlastLayoutRowMajor, ta, tb, (size_t)g->m, (size_t)g->n,
                (size_t)g->k, (float)g->alpha, am, ao, (size_t)g->lda,
                (size_t)g->stride_a, bm, bo, (size_t)g->ldb,
                (size_t)g->stride_b, (float)g->beta, cm, co, (size_t)g->ldc,
                (size_t)g->stride_c, (size_t)g->batch, &q, NULL);
    } else {
        if (g->batch == 1)
            rc = CLBlastDgemm(CLBlastLayoutRowMajor, ta, tb, (size_t)g->m,
                              (size_t)g->n, (size_t)g->k, g->alpha, am, ao,
                              (size_t)g->lda, bm, bo, (size_t)g->ldb, g->beta,
                              cm, co, (size_t)g->ldc, &q, NULL);
        else
            rc = CLBlastDgemmStridedBatched(
                CLBlastLayoutRowMajor, ta, tb, (size_t)g->m, (size_t)g->n,
                (size_t)g->k, g->alpha, am, ao, (size_t)g->lda,
                (size_t)g->stride_a, bm, bo, (size_t)g->ldb,
                (size_t)g->stride_b, g->beta, cm, co, (size_t)g->ldc,
                (size_t)g->stride_c, (size_t)g->batch, &q, NULL);
    }
    pthread_mutex_unlock(&d->mu);
    if (rc == CLBlastSuccess)
        return KEEL_STATUS_OK;
    if (rc == CLBlastNotImplemented ||
        rc == CLBlastNoDoublePrecision || rc == CLBlastNoHalfPrecision)
        return KEEL_STATUS_NOT_SUPPORTED;
    return ok_fail(KEEL_STATUS_DEVICE_ERROR,
                   "%s: CLBlast GEMM (%" PRId64 "x%" PRId64 "x%" PRId64
                   ", batch %" PRId64 ") on opencl:%d failed with status %d",
                   l->op, g->m, g->n, g->k, g->batch, (int)l->device,
                   (int)rc);
#else
    (void)l;
    (void)g;
    return KEEL_STATUS_NOT_SUPPORTED;
#endif
}
