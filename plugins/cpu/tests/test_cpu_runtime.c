/*
 * CUnit tests of the CPU reference plugin's runtime, driven only through
 * the core API (keel/runtime.h).
 *
 * The same binary runs in four modes chosen by the environment (see
 * meson.build): inline or async (KEEL_CPU_ASYNC), host-addressable or
 * discrete (KEEL_CPU_DISCRETE), always with KEEL_CPU_DEVICES=4 and
 * KEEL_CPU_MEM_LIMIT=256M. Mode-dependent expectations are explicit: for
 * example a stream running a slow host function is NOT_READY in async mode
 * and already idle in inline mode, and a device pointer faults on host
 * dereference only in discrete mode.
 *
 * Collectives are checked element by element against a reference computed
 * here, on 1, 2, 3 and 4 virtual devices, driven both by one thread with
 * group_start/group_end and by one thread per rank.
 *
 * The last suite ("lifecycle") re-initialises the runtime with changed
 * settings (short collective timeout, invalid values) and restores them.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include <keel/runtime.h>

#define NDEV 4
#define MEM_LIMIT (UINT64_C(256) << 20)
#define BUF_BYTES 4096

static keel_place P[NDEV];
static int g_plugin = -1;
static bool g_async;
static bool g_discrete;

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static keel_status check_status(keel_status got, keel_status want,
				const char *expr, const char *file, int line)
{
	if (got != want)
		fprintf(stderr, "\n  %s:%d: %s returned %s, expected %s: %s\n",
			file, line, expr, keel_status_name(got),
			keel_status_name(want), keel_last_error());
	return got;
}

#define EXPECT(expr, want)                                                 \
	CU_ASSERT_EQUAL(check_status((expr), (want), #expr, __FILE__,      \
				     __LINE__),                            \
			(want))
#define OK(expr) EXPECT(expr, KEEL_STATUS_OK)
#define OK_FATAL(expr)                                                     \
	CU_ASSERT_EQUAL_FATAL(check_status((expr), KEEL_STATUS_OK, #expr,  \
					   __FILE__, __LINE__),            \
			      KEEL_STATUS_OK)

static bool msg_has(const char *needle, const char *file, int line)
{
	const char *m = keel_last_error();

	if (m && strstr(m, needle))
		return true;
	fprintf(stderr, "\n  %s:%d: last error \"%s\" does not mention \"%s\"\n",
		file, line, m ? m : "(null)", needle);
	return false;
}

#define MSG_HAS(s) CU_ASSERT_TRUE(msg_has((s), __FILE__, __LINE__))

static bool env_on(const char *name)
{
	const char *s = getenv(name);

	return s && (!strcmp(s, "1") || !strcasecmp(s, "true") ||
		     !strcasecmp(s, "yes") || !strcasecmp(s, "on"));
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void hf_sleep(void *arg)
{
	sleep_ms((long)(intptr_t)arg);
}

struct flag_after {
	long ms;
	atomic_int flag;
};

static void hf_sleep_then_flag(void *arg)
{
	struct flag_after *f = arg;

	sleep_ms(f->ms);
	atomic_store(&f->flag, 1);
}

static int resolve_places(void)
{
	char name[16];
	int i;

	for (i = 0; i < NDEV; i++) {
		snprintf(name, sizeof(name), "cpu:%d", i);
		if (keel_place_parse(name, &P[i]) != KEEL_STATUS_OK) {
			fprintf(stderr, "cannot resolve %s: %s\n", name,
				keel_last_error());
			return -1;
		}
	}
	g_plugin = P[0].plugin;
	return 0;
}

static const keel_plugin_api *raw_api(void)
{
	return keel_plugin_table(g_plugin);
}

/* ------------------------------------------------------------------------ */
/* Suite: memory                                                            */
/* ------------------------------------------------------------------------ */

/* Every suite starts here: the runtime is up and P[] resolved. */
static int common_suite_init(void)
{
	const char *devs = getenv("KEEL_CPU_DEVICES");

	if (!devs || strcmp(devs, "4") ||
	    !getenv("KEEL_CPU_MEM_LIMIT") ||
	    strcmp(getenv("KEEL_CPU_MEM_LIMIT"), "256M")) {
		fprintf(stderr,
			"run through meson test: needs KEEL_CPU_DEVICES=4 KEEL_CPU_MEM_LIMIT=256M\n");
		return -1;
	}
	g_async = env_on("KEEL_CPU_ASYNC");
	g_discrete = env_on("KEEL_CPU_DISCRETE");
	if (keel_init() != KEEL_STATUS_OK)
		return -1;
	return resolve_places();
}

static void test_plugin_identity(void)
{
	keel_plugin_info info;

	CU_ASSERT_EQUAL(keel_device_count("cpu"), NDEV);
	OK_FATAL(keel_plugin_get_info(g_plugin, &info));
	CU_ASSERT_TRUE(info.loaded);
	CU_ASSERT_STRING_EQUAL(info.name, "cpu");
	CU_ASSERT_STRING_EQUAL(info.version, "0.1.0");
	CU_ASSERT_STRING_EQUAL(info.device_type, "cpu");
	CU_ASSERT_EQUAL(info.device_count, NDEV);
	CU_ASSERT_EQUAL(info.abi_major, KEEL_ABI_VERSION_MAJOR);
	CU_ASSERT_EQUAL(info.abi_minor, KEEL_ABI_VERSION_MINOR);
	CU_ASSERT_PTR_NOT_NULL(
		strstr(info.description, g_async ? "async" : "inline"));
	CU_ASSERT_PTR_NOT_NULL(strstr(
		info.description,
		g_discrete ? "discrete" : "host-addressable"));
	/* kernels (kernels/cpu_kernels.c), no profiler */
	CU_ASSERT_PTR_NOT_NULL(raw_api()->kernel);
	CU_ASSERT_PTR_NULL(raw_api()->profiler);
	CU_ASSERT_PTR_NOT_NULL(raw_api()->collective);
	CU_ASSERT_PTR_NOT_NULL(raw_api()->memory->copy_peer_async);
}

static void test_device_props(void)
{
	const uint32_t want = KEEL_FEATURE_PINNED_HOST |
			      KEEL_FEATURE_UNIFIED_MEMORY |
			      KEEL_FEATURE_PEER_ACCESS |
			      KEEL_FEATURE_COLLECTIVES |
			      KEEL_FEATURE_EVENT_TIMING |
			      KEEL_FEATURE_HOST_CALLBACK;
	keel_device_props p;
	struct utsname u;
	char name[32];
	int d;

	CU_ASSERT_EQUAL_FATAL(uname(&u), 0);
	for (d = 0; d < NDEV; d++) {
		OK_FATAL(keel_device_get_props(P[d], &p));
		snprintf(name, sizeof(name), "keel CPU %d", d);
		CU_ASSERT_STRING_EQUAL(p.name, name);
		CU_ASSERT_TRUE(strlen(p.vendor) > 0);
		CU_ASSERT_STRING_EQUAL(p.arch, u.machine);
		CU_ASSERT_EQUAL(p.compute_units,
				(uint32_t)sysconf(_SC_NPROCESSORS_ONLN));
		CU_ASSERT_EQUAL(p.total_memory, MEM_LIMIT);
		CU_ASSERT_EQUAL(p.dtype_mask,
				(UINT32_C(1) << KEEL_DTYPE_COUNT_) - 1);
		CU_ASSERT_EQUAL(p.features & want, want);
		CU_ASSERT_EQUAL((p.features & KEEL_FEATURE_ASYNC_COPY) != 0,
				g_async);
		CU_ASSERT_EQUAL(p.features & KEEL_FEATURE_KERNELS,
				KEEL_FEATURE_KERNELS);
		CU_ASSERT_EQUAL(p.alloc_alignment, 64);
		CU_ASSERT_EQUAL(p.stream_priorities, 1);
	}
}

/* get_device_props fills at most struct_size bytes and writes back. */
static void test_device_props_struct_size(void)
{
	const keel_plugin_api *api = raw_api();
	union {
		keel_device_props p;
		unsigned char b[sizeof(keel_device_props) + 32];
	} u;
	uint32_t small = (uint32_t)offsetof(keel_device_props, vendor);
	size_t i, spoiled = 0;

	memset(&u, 0xCC, sizeof(u));
	u.p.struct_size = small;
	OK_FATAL(api->device->get_device_props(1, &u.p));
	CU_ASSERT_EQUAL(u.p.struct_size, small);
	CU_ASSERT_STRING_EQUAL(u.p.name, "keel CPU 1");
	for (i = small; i < sizeof(u.b); i++)
		spoiled += u.b[i] != 0xCC;
	CU_ASSERT_EQUAL(spoiled, 0);

	memset(&u, 0xCC, sizeof(u));
	u.p.struct_size = (uint32_t)sizeof(u.b);
	OK(api->device->get_device_props(2, &u.p));
	CU_ASSERT_EQUAL(u.p.struct_size, sizeof(keel_device_props));
	CU_ASSERT_EQUAL(u.p.alloc_alignment, 64);
	for (spoiled = 0, i = sizeof(keel_device_props); i < sizeof(u.b); i++)
		spoiled += u.b[i] != 0xCC;
	CU_ASSERT_EQUAL(spoiled, 0);

	u.p.struct_size = 2;
	CU_ASSERT_EQUAL(api->device->get_device_props(0, &u.p),
			KEEL_STATUS_INVALID_ARGUMENT);
	u.p.struct_size = sizeof(keel_device_props);
	CU_ASSERT_EQUAL(api->device->get_device_props(NDEV, &u.p),
			KEEL_STATUS_INVALID_DEVICE);
	CU_ASSERT_EQUAL(api->device->get_device_props(-1, &u.p),
			KEEL_STATUS_INVALID_DEVICE);
	CU_ASSERT_EQUAL(api->device->get_device_props(0, NULL),
			KEEL_STATUS_INVALID_ARGUMENT);
}

static void test_alloc_zero(void)
{
	keel_dptr d = 1234;
	void *h = &d;
	uint8_t byte = 7;

	OK(keel_mem_alloc(P[0], 0, &d));
	CU_ASSERT_EQUAL(d, 0);
	OK(keel_mem_free(P[0], 0));
	OK(keel_mem_host_alloc(P[0], 0, &h));
	CU_ASSERT_PTR_NULL(h);
	OK(keel_mem_host_free(P[0], NULL));
	d = 1234;
	h = &d;
	OK(keel_mem_unified_alloc(P[0], 0, &d, &h));
	CU_ASSERT_EQUAL(d, 0);
	CU_ASSERT_PTR_NULL(h);
	OK(keel_mem_unified_free(P[0], 0));
	/* zero-byte transfers are no-ops, even at address 0 */
	OK(keel_mem_copy_h2d(P[0], 0, &byte, 0));
	OK(keel_mem_copy_d2h(P[0], &byte, 0, 0));
	OK(keel_mem_copy_d2d(P[0], 0, 0, 0));
	OK(keel_mem_set(P[0], 0, 1, 0));
	OK(keel_mem_set_async(P[0], NULL, 0, 1, 0));
	CU_ASSERT_EQUAL(byte, 7);
}

static void fill_pattern(uint8_t *p, size_t n, unsigned seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (uint8_t)((i * 131u + seed * 17u + (i >> 8)) & 0xff);
}

static void test_alloc_sizes_alignment(void)
{
	static const uint64_t sizes[] = { 1, 3, 64, 4097, (1u << 20) + 7 };
	size_t k;

	for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		uint64_t n = sizes[k];
		uint8_t *in = malloc(n), *out = malloc(n + 1);
		keel_dptr d = 0;
		int dev = (int)(k % NDEV);

		CU_ASSERT_FATAL(in && out);
		fill_pattern(in, n, (unsigned)k);
		memset(out, 0, n + 1);
		OK(keel_mem_alloc(P[dev], n, &d));
		CU_ASSERT_NOT_EQUAL(d, 0);
		CU_ASSERT_EQUAL(d % 64, 0);
		OK(keel_mem_copy_h2d(P[dev], d, in, n));
		OK(keel_mem_copy_d2h(P[dev], out, d, n));
		CU_ASSERT_EQUAL(memcmp(in, out, n), 0);
		/* exactly the allocated size is addressable, one more is not */
		OK(keel_mem_copy_d2h(P[dev], out, d + n - 1, 1));
		CU_ASSERT_EQUAL(out[0], in[n - 1]);
		EXPECT(keel_mem_copy_d2h(P[dev], out, d, n + 1),
		       KEEL_STATUS_INVALID_ARGUMENT);
		OK(keel_mem_free(P[dev], d));
		free(in);
		free(out);
	}
}

static void test_alloc_limit(void)
{
	keel_dptr big = 0, a = 0, b = 0, c = 0;
	keel_memory_info info;
	uint8_t v = 0x42, r = 0;

	/* more than the limit at once */
	EXPECT(keel_mem_alloc(P[1], MEM_LIMIT + 1, &big),
	       KEEL_STATUS_OUT_OF_MEMORY);
	MSG_HAS("268435457");
	MSG_HAS("limit 268435456");
	CU_ASSERT_EQUAL(big, 0);
	/* within the limit, then past it with what is in use */
	OK_FATAL(keel_mem_alloc(P[1], UINT64_C(160) << 20, &a));
	EXPECT(keel_mem_alloc(P[1], UINT64_C(100) << 20, &b),
	       KEEL_STATUS_OUT_OF_MEMORY);
	MSG_HAS("104857600 bytes");
	MSG_HAS("167772160 bytes in use");
	MSG_HAS("268435456");
	/* the device keeps working */
	OK(keel_mem_alloc(P[1], 64, &c));
	OK(keel_mem_copy_h2d(P[1], c, &v, 1));
	OK(keel_mem_copy_d2h(P[1], &r, c, 1));
	CU_ASSERT_EQUAL(r, 0x42);
	OK(keel_mem_get_info(P[1], &info));
	CU_ASSERT_EQUAL(info.total, MEM_LIMIT);
	CU_ASSERT_TRUE(info.used >= (UINT64_C(160) << 20) + 64);
	OK(keel_mem_free(P[1], a));
	OK(keel_mem_alloc(P[1], UINT64_C(100) << 20, &b));
	OK(keel_mem_free(P[1], b));
	OK(keel_mem_free(P[1], c));
	/* the limit is per device: other devices are unaffected */
	OK(keel_mem_alloc(P[2], UINT64_C(200) << 20, &a));
	OK(keel_mem_alloc(P[3], UINT64_C(200) << 20, &b));
	OK(keel_mem_free(P[2], a));
	OK(keel_mem_free(P[3], b));
}

static void test_free_unknown(void)
{
	keel_dptr d = 0, u = 0;
	void *h = NULL, *uh = NULL;
	uint8_t v = 9, r = 0;

	OK_FATAL(keel_mem_alloc(P[0], 256, &d));
	EXPECT(keel_mem_free(P[0], d + 64), KEEL_STATUS_INVALID_ARGUMENT);
	MSG_HAS("bytes into a block");
	EXPECT(keel_mem_free(P[0], (keel_dptr)0x1000), KEEL_STATUS_INVALID_ARGUMENT);
	MSG_HAS("not a live");
	/* a pointer of cpu:0 is unknown to cpu:1 */
	EXPECT(keel_mem_free(P[1], d), KEEL_STATUS_INVALID_ARGUMENT);
	MSG_HAS("cpu:1");
	OK(keel_mem_free(P[0], d));
	EXPECT(keel_mem_free(P[0], d), KEEL_STATUS_INVALID_ARGUMENT);
	/* freed memory is no longer a valid copy target */
	EXPECT(keel_mem_copy_h2d(P[0], d, &v, 1), KEEL_STATUS_INVALID_ARGUMENT);

	OK_FATAL(keel_mem_host_alloc(P[0], 100, &h));
	EXPECT(keel_mem_host_free(P[0], (char *)h + 1),
	       KEEL_STATUS_INVALID_ARGUMENT);
	EXPECT(keel_mem_host_free(P[0], &v), KEEL_STATUS_INVALID_ARGUMENT);
	OK(keel_mem_host_free(P[0], h));
	EXPECT(keel_mem_host_free(P[0], h), KEEL_STATUS_INVALID_ARGUMENT);

	/* kinds must match: unified memory is freed with unified_free */
	OK_FATAL(keel_mem_unified_alloc(P[0], 128, &u, &uh));
	EXPECT(keel_mem_free(P[0], u), KEEL_STATUS_INVALID_ARGUMENT);
	MSG_HAS("unified_alloc");
	OK_FATAL(keel_mem_alloc(P[0], 128, &d));
	EXPECT(keel_mem_unified_free(P[0], d), KEEL_STATUS_INVALID_ARGUMENT);
	OK(keel_mem_unified_free(P[0], u));
	/* and the device still works */
	OK(keel_mem_copy_h2d(P[0], d, &v, 1));
	OK(keel_mem_copy_d2h(P[0], &r, d, 1));
	CU_ASSERT_EQUAL(r, 9);
	OK(keel_mem_free(P[0], d));
}

static void test_copy_out_of_range(void)
{
	keel_dptr a = 0, b = 0, o = 0;
	uint8_t buf[256] = { 0 };
	keel_stream s = NULL;

	OK_FATAL(keel_mem_alloc(P[0], 100, &a));
	OK_FATAL(keel_mem_alloc(P[0], 100, &b));
	OK_FATAL(keel_mem_alloc(P[1], 100, &o));
	OK_FATAL(keel_stream_create(P[0], 0, &s));

	EXPECT(keel_mem_copy_d2h(P[0], buf, a, 101), KEEL_STATUS_INVALID_ARGUMENT);
	MSG_HAS("copy_d2h: range [");
	MSG_HAS("not inside a live allocation of cpu:0");
	EXPECT(keel_mem_copy_d2h(P[0], buf, a + 50, 51), KEEL_STATUS_INVALID_ARGUMENT);
	OK(keel_mem_copy_d2h(P[0], buf, a + 50, 50));
	EXPECT(keel_mem_copy_h2d(P[0], a + 99, buf, 2), KEEL_STATUS_INVALID_ARGUMENT);
	EXPECT(keel_mem_copy_h2d(P[0], a - 1, buf, 1), KEEL_STATUS_INVALID_ARGUMENT);
	EXPECT(keel_mem_copy_d2d(P[0], b, a, 101), KEEL_STATUS_INVALID_ARGUMENT);
	/* overlapping d2d is refused */
	EXPECT(keel_mem_copy_d2d(P[0], a + 10, a, 20), KEEL_STATUS_INVALID_ARGUMENT);
	MSG_HAS("overlap");
	EXPECT(keel_mem_set(P[0], a, 0, 200), KEEL_STATUS_INVALID_ARGUMENT);
	EXPECT(keel_mem_set_async(P[0], s, a + 1, 0, 100), KEEL_STATUS_INVALID_ARGUMENT);
	EXPECT(keel_mem_copy_h2d_async(P[0], s, a, buf, 101), KEEL_STATUS_INVALID_ARGUMENT);
	EXPECT(keel_mem_copy_d2h_async(P[0], s, buf, a, 101), KEEL_STATUS_INVALID_ARGUMENT);
	EXPECT(keel_mem_copy_d2d_async(P[0], s, b, a, 101), KEEL_STATUS_INVALID_ARGUMENT);
	/* a pointer of cpu:1 is not memory of cpu:0 */
	EXPECT(keel_mem_copy_d2h(P[0], buf, o, 10), KEEL_STATUS_INVALID_ARGUMENT);
	EXPECT(keel_mem_copy_peer(P[1], o, P[0], a, 101), KEEL_STATUS_INVALID_ARGUMENT);
	EXPECT(keel_mem_copy_peer(P[1], o + 1, P[0], a, 100), KEEL_STATUS_INVALID_ARGUMENT);
	/* an unknown device */
	EXPECT(raw_api()->memory->copy_d2h(NDEV, buf, a, 1), KEEL_STATUS_INVALID_DEVICE);
	EXPECT(raw_api()->memory->copy_h2d(0, a, NULL, 1), KEEL_STATUS_INVALID_ARGUMENT);
	OK(keel_stream_synchronize(P[0], s));
	OK(keel_stream_destroy(P[0], s));
	OK(keel_mem_free(P[0], a));
	OK(keel_mem_free(P[0], b));
	OK(keel_mem_free(P[1], o));
}

static void test_copies_sync(void)
{
	enum { N = 1000 };
	uint8_t in[N], out[N], want[N];
	keel_dptr a = 0, b = 0, c = 0;

	fill_pattern(in, N, 3);
	OK_FATAL(keel_mem_alloc(P[0], N, &a));
	OK_FATAL(keel_mem_alloc(P[0], N, &b));
	OK_FATAL(keel_mem_alloc(P[3], N, &c));
	OK(keel_mem_copy_h2d(P[0], a, in, N));
	OK(keel_mem_copy_d2d(P[0], b, a, N));
	OK(keel_mem_copy_peer(P[3], c, P[0], b, N));
	memset(out, 0, N);
	OK(keel_mem_copy_d2h(P[3], out, c, N));
	CU_ASSERT_EQUAL(memcmp(out, in, N), 0);
	/* memset a window, then peer back the other way */
	OK(keel_mem_set(P[3], c + 100, 0xAB, 300));
	OK(keel_mem_copy_peer(P[0], a, P[3], c, N));
	memcpy(want, in, N);
	memset(want + 100, 0xAB, 300);
	OK(keel_mem_copy_d2h(P[0], out, a, N));
	CU_ASSERT_EQUAL(memcmp(out, want, N), 0);
	/* partial copies at offsets */
	OK(keel_mem_copy_d2d(P[0], b + 500, a + 100, 50));
	OK(keel_mem_copy_d2h(P[0], out, b + 500, 50));
	CU_ASSERT_EQUAL(memcmp(out, want + 100, 50), 0);
	OK(keel_mem_free(P[0], a));
	OK(keel_mem_free(P[0], b));
	OK(keel_mem_free(P[3], c));
}

static void test_copies_async(void)
{
	enum { N = 4096 };
	const keel_plugin_api *api = raw_api();
	uint8_t *in = malloc(N), *out = malloc(N), *want = malloc(N);
	keel_dptr a = 0, b = 0, c = 0;
	keel_stream s0 = NULL, s2 = NULL;

	CU_ASSERT_FATAL(in && out && want);
	fill_pattern(in, N, 5);
	OK_FATAL(keel_stream_create(P[0], 0, &s0));
	OK_FATAL(keel_stream_create(P[2], 0, &s2));
	OK_FATAL(keel_mem_alloc(P[0], N, &a));
	OK_FATAL(keel_mem_alloc(P[0], N, &b));
	OK_FATAL(keel_mem_alloc(P[2], N, &c));
	/* slow start so that async work really queues up behind it */
	OK(keel_stream_launch_host_func(P[0], s0, hf_sleep, (void *)(intptr_t)10));
	OK(keel_mem_copy_h2d_async(P[0], s0, a, in, N));
	OK(keel_mem_copy_d2d_async(P[0], s0, b, a, N));
	OK(keel_mem_set_async(P[0], s0, b + 10, 0x77, 20));
	OK(api->memory->copy_peer_async(2, c, 0, b, N, s0));
	memset(out, 0, N);
	OK(keel_stream_synchronize(P[0], s0));
	OK(keel_mem_copy_d2h_async(P[2], s2, out, c, N));
	OK(keel_stream_synchronize(P[2], s2));
	memcpy(want, in, N);
	memset(want + 10, 0x77, 20);
	CU_ASSERT_EQUAL(memcmp(out, want, N), 0);
	/* the default stream (NULL) works as well */
	memset(out, 0, N);
	OK(keel_mem_set_async(P[2], NULL, c, 0x01, N));
	OK(keel_mem_copy_d2h_async(P[2], NULL, out, c, 16));
	OK(keel_stream_synchronize(P[2], NULL));
	CU_ASSERT_EQUAL(out[0], 0x01);
	CU_ASSERT_EQUAL(out[15], 0x01);
	/* copy_peer_async validates the stream's device (it is src's) */
	EXPECT(api->memory->copy_peer_async(2, c, 0, b, N, s2),
	       KEEL_STATUS_INVALID_HANDLE);
	OK(keel_stream_destroy(P[0], s0));
	OK(keel_stream_destroy(P[2], s2));
	OK(keel_mem_free(P[0], a));
	OK(keel_mem_free(P[0], b));
	OK(keel_mem_free(P[2], c));
	free(in);
	free(out);
	free(want);
}

/* A synchronous call first waits for the device's queued work. */
static void test_sync_calls_wait(void)
{
	enum { N = 512 };
	uint8_t in[N], out[N];
	struct flag_after f = { .ms = 30 };
	keel_stream s = NULL;
	keel_dptr a = 0;

	fill_pattern(in, N, 11);
	OK_FATAL(keel_stream_create(P[2], 0, &s));
	OK_FATAL(keel_mem_alloc(P[2], N, &a));
	OK(keel_mem_set(P[2], a, 0, N));
	OK(keel_stream_launch_host_func(P[2], s, hf_sleep, (void *)(intptr_t)20));
	OK(keel_mem_copy_h2d_async(P[2], s, a, in, N));
	memset(out, 0, N);
	OK(keel_mem_copy_d2h(P[2], out, a, N));
	CU_ASSERT_EQUAL(memcmp(out, in, N), 0);
	/* sync memset lands after queued async memset */
	OK(keel_stream_launch_host_func(P[2], s, hf_sleep, (void *)(intptr_t)20));
	OK(keel_mem_set_async(P[2], s, a, 0x11, N));
	OK(keel_mem_set(P[2], a, 0x22, N / 2));
	OK(keel_mem_copy_d2h(P[2], out, a, N));
	CU_ASSERT_EQUAL(out[0], 0x22);
	CU_ASSERT_EQUAL(out[N / 2 - 1], 0x22);
	CU_ASSERT_EQUAL(out[N / 2], 0x11);
	/* device synchronize waits for every stream */
	OK(keel_stream_launch_host_func(P[2], s, hf_sleep_then_flag, &f));
	OK(keel_device_synchronize(P[2]));
	CU_ASSERT_EQUAL(atomic_load(&f.flag), 1);
	OK(keel_stream_destroy(P[2], s));
	OK(keel_mem_free(P[2], a));
}

static void test_memory_info(void)
{
	keel_memory_info before, mid, after;
	keel_dptr a = 0, b = 0, c = 0, u = 0;
	void *h = NULL, *uh = NULL;

	OK_FATAL(keel_mem_get_info(P[3], &before));
	CU_ASSERT_EQUAL(before.total, MEM_LIMIT);
	CU_ASSERT_EQUAL(before.free, before.total - before.used);
	OK(keel_mem_alloc(P[3], 1000, &a));
	OK(keel_mem_alloc(P[3], 4096, &b));
	OK(keel_mem_alloc(P[3], (1u << 20) + 7, &c));
	OK(keel_mem_unified_alloc(P[3], 333, &u, &uh));
	OK(keel_mem_host_alloc(P[3], 5000, &h)); /* host memory: not counted */
	OK(keel_mem_get_info(P[3], &mid));
	CU_ASSERT_EQUAL(mid.used - before.used,
			1000 + 4096 + (1u << 20) + 7 + 333);
	CU_ASSERT_EQUAL(mid.total, MEM_LIMIT);
	CU_ASSERT_EQUAL(mid.free, mid.total - mid.used);
	OK(keel_mem_free(P[3], b));
	OK(keel_mem_get_info(P[3], &after));
	CU_ASSERT_EQUAL(mid.used - after.used, 4096);
	OK(keel_mem_free(P[3], a));
	OK(keel_mem_free(P[3], c));
	OK(keel_mem_unified_free(P[3], u));
	OK(keel_mem_host_free(P[3], h));
	OK(keel_mem_get_info(P[3], &after));
	CU_ASSERT_EQUAL(after.used, before.used);
	CU_ASSERT_EQUAL(after.free, before.free);
}

static void test_host_and_unified(void)
{
	enum { N = 777 };
	uint8_t *h = NULL, *uh = NULL, out[N];
	keel_dptr d = 0, u = 0;
	keel_stream s = NULL;
	int i, bad = 0;

	OK_FATAL(keel_stream_create(P[1], 0, &s));
	OK_FATAL(keel_mem_host_alloc(P[1], N, (void **)&h));
	CU_ASSERT_EQUAL((uintptr_t)h % 64, 0);
	OK_FATAL(keel_mem_alloc(P[1], N, &d));
	fill_pattern(h, N, 21);
	/* pinned memory as the source and target of async copies */
	OK(keel_mem_copy_h2d_async(P[1], s, d, h, N));
	OK(keel_mem_set_async(P[1], s, d, 0x5C, 7));
	OK(keel_mem_copy_d2h_async(P[1], s, out, d, N));
	OK(keel_stream_synchronize(P[1], s));
	for (i = 0; i < N; i++)
		bad += out[i] != (i < 7 ? 0x5C : h[i]);
	CU_ASSERT_EQUAL(bad, 0);

	/* unified memory: host writes are visible to device copies and back */
	OK_FATAL(keel_mem_unified_alloc(P[1], N, &u, (void **)&uh));
	CU_ASSERT_PTR_NOT_NULL_FATAL(uh);
	CU_ASSERT_EQUAL(u % 64, 0);
	CU_ASSERT_EQUAL((uintptr_t)uh % 64, 0);
	CU_ASSERT_EQUAL(u == (keel_dptr)(uintptr_t)uh, !g_discrete);
	memset(uh, 0x31, N);
	OK(keel_mem_copy_d2h(P[1], out, u, N));
	CU_ASSERT_EQUAL(out[0], 0x31);
	CU_ASSERT_EQUAL(out[N - 1], 0x31);
	OK(keel_mem_copy_d2d(P[1], u, d, N));
	OK(keel_device_synchronize(P[1]));
	for (bad = 0, i = 0; i < N; i++)
		bad += uh[i] != (i < 7 ? 0x5C : h[i]);
	CU_ASSERT_EQUAL(bad, 0);
	OK(keel_mem_unified_free(P[1], u));
	OK(keel_mem_host_free(P[1], h));
	OK(keel_mem_free(P[1], d));
	OK(keel_stream_destroy(P[1], s));
}

/*
 * In discrete mode a device pointer must fault when the host dereferences
 * it; otherwise it is the host address. The dereference runs in a child.
 */
static void test_device_pointer_deref(void)
{
	uint8_t v[64];
	keel_dptr d = 0;
	int status = 0;
	pid_t pid;

	memset(v, 0x5A, sizeof(v));
	OK_FATAL(keel_mem_alloc(P[0], sizeof(v), &d));
	OK_FATAL(keel_mem_copy_h2d(P[0], d, v, sizeof(v)));
	if (!g_discrete)
		CU_ASSERT_EQUAL(*(volatile uint8_t *)(uintptr_t)d, 0x5A);
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		struct rlimit no_core = { 0, 0 };
		volatile uint8_t x;

		setrlimit(RLIMIT_CORE, &no_core);
		signal(SIGSEGV, SIG_DFL);
		signal(SIGBUS, SIG_DFL);
		x = *(volatile uint8_t *)(uintptr_t)d;
		_exit(x == 0x5A ? 0 : 3);
	}
	CU_ASSERT_EQUAL_FATAL(waitpid(pid, &status, 0), pid);
	if (g_discrete) {
		CU_ASSERT_TRUE(WIFSIGNALED(status));
		CU_ASSERT_TRUE(WIFSIGNALED(status) &&
			       (WTERMSIG(status) == SIGSEGV ||
				WTERMSIG(status) == SIGBUS));
	} else {
		CU_ASSERT_TRUE(WIFEXITED(status));
		CU_ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	OK(keel_mem_free(P[0], d));
}

/* ------------------------------------------------------------------------ */
/* Suite: streams and events                                                */
/* ------------------------------------------------------------------------ */

/*
 * Stream A: slow host function, then memset and copy; record an event.
 * Stream B waits for the event, then copies. B must see A's data.
 */
static void test_event_orders_streams(void)
{
	enum { N = 256 };
	uint8_t pat[128], out[N], want[N];
	keel_stream a = NULL, b = NULL;
	keel_event e = NULL;
	keel_dptr x = 0, y = 0;

	fill_pattern(pat, sizeof(pat), 8);
	OK_FATAL(keel_stream_create(P[1], 0, &a));
	OK_FATAL(keel_stream_create(P[1], 0, &b));
	OK_FATAL(keel_event_create(P[1], &e));
	OK_FATAL(keel_mem_alloc(P[1], N, &x));
	OK_FATAL(keel_mem_alloc(P[1], N, &y));
	OK(keel_mem_set(P[1], x, 0x00, N));
	OK(keel_mem_set(P[1], y, 0x11, N));

	OK(keel_stream_launch_host_func(P[1], a, hf_sleep, (void *)(intptr_t)100));
	OK(keel_mem_set_async(P[1], a, x, 0xA5, N));
	OK(keel_mem_copy_h2d_async(P[1], a, x + 64, pat, sizeof(pat)));
	OK(keel_event_record(P[1], e, a));
	if (g_async) {
		EXPECT(keel_stream_query(P[1], a), KEEL_STATUS_NOT_READY);
		EXPECT(keel_event_query(P[1], e), KEEL_STATUS_NOT_READY);
	} else {
		OK(keel_stream_query(P[1], a));
		OK(keel_event_query(P[1], e));
	}
	OK(keel_stream_wait_event(P[1], b, e));
	OK(keel_mem_copy_d2d_async(P[1], b, y, x, N));
	OK(keel_mem_copy_d2h_async(P[1], b, out, y, N));
	OK(keel_stream_synchronize(P[1], b));
	memset(want, 0xA5, N);
	memcpy(want + 64, pat, sizeof(pat));
	CU_ASSERT_EQUAL(memcmp(out, want, N), 0);
	OK(keel_event_query(P[1], e));
	OK(keel_stream_query(P[1], a));

	OK(keel_event_destroy(P[1], e));
	OK(keel_stream_destroy(P[1], a));
	OK(keel_stream_destroy(P[1], b));
	OK(keel_mem_free(P[1], x));
	OK(keel_mem_free(P[1], y));
}

/* Waiting on an event recorded on another device's stream. */
struct observe {
	struct flag_after *watched;
	int seen;
};

static void hf_observe(void *arg)
{
	struct observe *o = arg;

	o->seen = atomic_load(&o->watched->flag);
}

static void test_event_cross_device(void)
{
	struct flag_after f = { .ms = 30 };
	struct observe o = { &f, -1 };
	keel_stream a = NULL, b = NULL;
	keel_event e = NULL;

	OK_FATAL(keel_stream_create(P[0], 0, &a));
	OK_FATAL(keel_stream_create(P[3], 0, &b));
	OK_FATAL(keel_event_create(P[0], &e));
	OK(keel_stream_launch_host_func(P[0], a, hf_sleep_then_flag, &f));
	OK(keel_event_record(P[0], e, a));
	OK(keel_stream_wait_event(P[3], b, e));
	OK(keel_stream_launch_host_func(P[3], b, hf_observe, &o));
	OK(keel_stream_synchronize(P[3], b));
	CU_ASSERT_EQUAL(o.seen, 1);
	OK(keel_event_destroy(P[0], e));
	OK(keel_stream_destroy(P[0], a));
	OK(keel_stream_destroy(P[3], b));
}

static void test_stream_query(void)
{
	keel_stream s = NULL;
	keel_event e = NULL;

	OK_FATAL(keel_stream_create(P[0], 0, &s));
	OK_FATAL(keel_event_create(P[0], &e));
	OK(keel_stream_query(P[0], s));
	OK(keel_stream_launch_host_func(P[0], s, hf_sleep, (void *)(intptr_t)100));
	OK(keel_event_record(P[0], e, s));
	if (g_async) {
		EXPECT(keel_stream_query(P[0], s), KEEL_STATUS_NOT_READY);
		EXPECT(keel_event_query(P[0], e), KEEL_STATUS_NOT_READY);
	} else {
		OK(keel_stream_query(P[0], s));
		OK(keel_event_query(P[0], e));
	}
	OK(keel_event_synchronize(P[0], e));
	OK(keel_event_query(P[0], e));
	OK(keel_stream_synchronize(P[0], s));
	OK(keel_stream_query(P[0], s));
	/* the default stream too */
	OK(keel_stream_launch_host_func(P[0], NULL, hf_sleep, (void *)(intptr_t)100));
	EXPECT(keel_stream_query(P[0], NULL),
	       g_async ? KEEL_STATUS_NOT_READY : KEEL_STATUS_OK);
	OK(keel_device_synchronize(P[0]));
	OK(keel_stream_query(P[0], NULL));
	OK(keel_event_destroy(P[0], e));
	OK(keel_stream_destroy(P[0], s));
}

struct cb_log {
	atomic_int n;
	int order[128];
	int runs[128];
};

struct cb_item {
	struct cb_log *log;
	int id;
};

static void hf_log(void *arg)
{
	struct cb_item *it = arg;
	int k = atomic_fetch_add(&it->log->n, 1);

	if (k < 128)
		it->log->order[k] = it->id;
	it->log->runs[it->id]++;
}

static void test_callbacks_once_in_order(void)
{
	enum { N = 100 };
	static struct cb_log log1, log2;
	static struct cb_item it1[N], it2[N];
	keel_stream s1 = NULL, s2 = NULL;
	keel_dptr d = 0;
	int i, bad_order = 0, bad_runs = 0;

	memset(&log1, 0, sizeof(log1));
	memset(&log2, 0, sizeof(log2));
	OK_FATAL(keel_stream_create(P[2], 0, &s1));
	OK_FATAL(keel_stream_create(P[2], -3, &s2)); /* priority clamped */
	OK_FATAL(keel_mem_alloc(P[2], 64, &d));
	for (i = 0; i < N; i++) {
		it1[i] = (struct cb_item){ &log1, i };
		it2[i] = (struct cb_item){ &log2, i };
		OK(keel_stream_launch_host_func(P[2], s1, hf_log, &it1[i]));
		if (i % 10 == 0) {
			OK(keel_mem_set_async(P[2], s1, d, (uint8_t)i, 64));
			OK(keel_stream_launch_host_func(P[2], s2, hf_sleep,
							(void *)(intptr_t)1));
		}
		OK(keel_stream_launch_host_func(P[2], s2, hf_log, &it2[i]));
	}
	OK(keel_stream_synchronize(P[2], s1));
	OK(keel_stream_synchronize(P[2], s2));
	CU_ASSERT_EQUAL(atomic_load(&log1.n), N);
	CU_ASSERT_EQUAL(atomic_load(&log2.n), N);
	for (i = 0; i < N; i++) {
		bad_order += log1.order[i] != i || log2.order[i] != i;
		bad_runs += log1.runs[i] != 1 || log2.runs[i] != 1;
	}
	CU_ASSERT_EQUAL(bad_order, 0);
	CU_ASSERT_EQUAL(bad_runs, 0);
	/* synchronizing again runs nothing twice */
	OK(keel_device_synchronize(P[2]));
	CU_ASSERT_EQUAL(atomic_load(&log1.n), N);
	OK(keel_stream_destroy(P[2], s1));
	OK(keel_stream_destroy(P[2], s2));
	OK(keel_mem_free(P[2], d));
}

static void test_event_timing(void)
{
	keel_event e0 = NULL, e1 = NULL, e2 = NULL;
	keel_stream s = NULL;
	float ms = -1, ms01 = -1, ms12 = -1, ms02 = -1;

	OK_FATAL(keel_stream_create(P[0], 0, &s));
	OK_FATAL(keel_event_create(P[0], &e0));
	OK_FATAL(keel_event_create(P[0], &e1));
	OK_FATAL(keel_event_create(P[0], &e2));
	/* never recorded: query and synchronize are OK, elapsed is not */
	OK(keel_event_query(P[0], e0));
	OK(keel_event_synchronize(P[0], e0));
	EXPECT(keel_event_elapsed_ms(P[0], e0, e1, &ms), KEEL_STATUS_INVALID_STATE);
	MSG_HAS("never recorded");

	OK(keel_event_record(P[0], e0, s));
	OK(keel_stream_launch_host_func(P[0], s, hf_sleep, (void *)(intptr_t)60));
	OK(keel_event_record(P[0], e1, s));
	if (g_async)
		EXPECT(keel_event_elapsed_ms(P[0], e0, e1, &ms),
		       KEEL_STATUS_NOT_READY);
	OK(keel_event_synchronize(P[0], e1));
	OK(keel_event_elapsed_ms(P[0], e0, e1, &ms));
	CU_ASSERT_TRUE(ms >= 59.9f && ms < 10000.0f);
	OK(keel_event_elapsed_ms(P[0], e1, e0, &ms));
	CU_ASSERT_TRUE(ms <= -59.9f);
	EXPECT(keel_event_elapsed_ms(P[0], e0, e2, &ms), KEEL_STATUS_INVALID_STATE);

	/* re-recording replaces the record */
	OK(keel_event_record(P[0], e0, s));
	OK(keel_stream_synchronize(P[0], s));
	OK(keel_event_elapsed_ms(P[0], e1, e0, &ms));
	CU_ASSERT_TRUE(ms >= 0.0f && ms < 10000.0f);

	/* monotonic and additive along one stream */
	OK(keel_event_record(P[0], e0, s));
	OK(keel_stream_launch_host_func(P[0], s, hf_sleep, (void *)(intptr_t)5));
	OK(keel_event_record(P[0], e1, s));
	OK(keel_stream_launch_host_func(P[0], s, hf_sleep, (void *)(intptr_t)5));
	OK(keel_event_record(P[0], e2, s));
	OK(keel_stream_synchronize(P[0], s));
	OK(keel_event_elapsed_ms(P[0], e0, e1, &ms01));
	OK(keel_event_elapsed_ms(P[0], e1, e2, &ms12));
	OK(keel_event_elapsed_ms(P[0], e0, e2, &ms02));
	CU_ASSERT_TRUE(ms01 >= 4.9f);
	CU_ASSERT_TRUE(ms12 >= 4.9f);
	CU_ASSERT_TRUE(fabsf(ms02 - (ms01 + ms12)) < 0.01f);

	/* events of another device are refused */
	EXPECT(keel_event_record(P[1], e0, NULL), KEEL_STATUS_INVALID_HANDLE);
	EXPECT(keel_event_elapsed_ms(P[1], e0, e1, &ms), KEEL_STATUS_INVALID_HANDLE);
	OK(keel_event_destroy(P[0], e0));
	OK(keel_event_destroy(P[0], e1));
	OK(keel_event_destroy(P[0], e2));
	OK(keel_stream_destroy(P[0], s));
}

/* Destroying an event with a pending record, or a busy stream, is safe. */
static void test_destroy_pending(void)
{
	struct flag_after f = { .ms = 30 };
	keel_stream s = NULL;
	keel_event e = NULL;

	OK_FATAL(keel_stream_create(P[3], 0, &s));
	OK_FATAL(keel_event_create(P[3], &e));
	OK(keel_stream_launch_host_func(P[3], s, hf_sleep_then_flag, &f));
	OK(keel_event_record(P[3], e, s));
	OK(keel_event_destroy(P[3], e));
	OK(keel_stream_destroy(P[3], s)); /* waits for the host function */
	CU_ASSERT_EQUAL(atomic_load(&f.flag), 1);
}

static void test_stream_errors(void)
{
	keel_stream s0 = NULL, s1 = NULL, dead = NULL;
	keel_event e = NULL;
	keel_dptr d = 0;

	OK_FATAL(keel_stream_create(P[0], 0, &s0));
	OK_FATAL(keel_stream_create(P[1], 7, &s1));
	OK_FATAL(keel_stream_create(P[0], 0, &dead));
	OK_FATAL(keel_event_create(P[0], &e));
	OK_FATAL(keel_mem_alloc(P[0], 16, &d));
	OK(keel_stream_destroy(P[0], dead));

	EXPECT(keel_stream_synchronize(P[0], s1), KEEL_STATUS_INVALID_HANDLE);
	MSG_HAS("belongs to cpu:1");
	EXPECT(keel_mem_set_async(P[0], s1, d, 0, 16), KEEL_STATUS_INVALID_HANDLE);
	EXPECT(keel_stream_query(P[0], dead), KEEL_STATUS_INVALID_HANDLE);
	EXPECT(keel_stream_destroy(P[0], dead), KEEL_STATUS_INVALID_HANDLE);
	EXPECT(keel_stream_synchronize(P[0], (keel_stream)(uintptr_t)0x1230),
	       KEEL_STATUS_INVALID_HANDLE);
	EXPECT(keel_stream_destroy(P[0], NULL), KEEL_STATUS_INVALID_HANDLE);
	MSG_HAS("default stream");
	EXPECT(keel_event_record(P[0], e, s1), KEEL_STATUS_INVALID_HANDLE);
	EXPECT(keel_stream_wait_event(P[0], s0, (keel_event)(uintptr_t)0x4560),
	       KEEL_STATUS_INVALID_HANDLE);
	EXPECT(keel_event_query(P[0], (keel_event)(uintptr_t)s0),
	       KEEL_STATUS_INVALID_HANDLE);
	EXPECT(raw_api()->stream->launch_host_func(0, s0, NULL, NULL),
	       KEEL_STATUS_INVALID_ARGUMENT);
	EXPECT(raw_api()->stream->stream_create(NDEV, 0, &dead),
	       KEEL_STATUS_INVALID_DEVICE);
	EXPECT(raw_api()->stream->stream_create(0, 0, NULL),
	       KEEL_STATUS_INVALID_ARGUMENT);
	/* the good handles still work */
	OK(keel_mem_set_async(P[0], s0, d, 1, 16));
	OK(keel_stream_synchronize(P[0], s0));
	OK(keel_event_destroy(P[0], e));
	OK(keel_stream_destroy(P[0], s0));
	OK(keel_stream_destroy(P[1], s1));
	OK(keel_mem_free(P[0], d));
}

/* ------------------------------------------------------------------------ */
/* Collective reference                                                     */
/* ------------------------------------------------------------------------ */

/* float -> IEEE half, round to nearest even (finite inputs). */
static uint16_t ref_f16(float f)
{
	uint16_t sign = signbit(f) ? 0x8000 : 0;
	float a = fabsf(f), q;
	int e;

	if (a == 0.0f)
		return sign;
	if (a >= 65520.0f)
		return sign | 0x7c00;
	frexpf(a, &e);
	e -= 1; /* a = 1.m * 2^e */
	if (e < -14)
		return sign | (uint16_t)nearbyintf(a * 0x1p24f);
	q = nearbyintf(ldexpf(a, 10 - e)); /* in [1024, 2048] */
	if (q == 2048.0f) {
		q = 1024.0f;
		e++;
	}
	if (e > 15)
		return sign | 0x7c00;
	return sign | (uint16_t)((e + 15) << 10) | (uint16_t)(q - 1024.0f);
}

static uint16_t ref_bf16(float f)
{
	uint32_t x, lower, upper;

	memcpy(&x, &f, sizeof(x));
	lower = x & 0xffff;
	upper = x >> 16;
	if (lower > 0x8000 || (lower == 0x8000 && (upper & 1)))
		upper++;
	return (uint16_t)upper;
}

static float ref_f16_value(uint16_t h)
{
	int e = (h >> 10) & 0x1f;
	float m = (float)(h & 0x3ff), v;

	if (e == 0)
		v = ldexpf(m, -24);
	else
		v = ldexpf(m + 1024.0f, e - 25);
	return (h & 0x8000) ? -v : v;
}

static float ref_bf16_value(uint16_t h)
{
	uint32_t x = (uint32_t)h << 16;
	float f;

	memcpy(&f, &x, sizeof(f));
	return f;
}

/* Element idx of rank r's send buffer, as an integer. */
static int64_t gen_int(keel_dtype dt, int r, uint64_t idx)
{
	int64_t small = (int64_t)((r * 7 + idx * 3) % 11) - 5;

	switch (dt) {
	case KEEL_F32:
	case KEEL_F64:
	case KEEL_F16:
	case KEEL_BF16:
		/* every 4th element is large, so sums land between f16/bf16
		 * neighbours and exercise round-to-nearest-even */
		if (idx % 4 == 3)
			return 1020 + 13 * r + 3 * (int64_t)idx;
		return (int64_t)((r * 5 + idx * 3 + 1) % 7) - 3;
	case KEEL_I8:
		return small;
	case KEEL_U8:
		return (int64_t)((r * 37 + idx * 11) % 256);
	case KEEL_I32:
		return small * 1000003;
	case KEEL_I64:
		return small * INT64_C(1000000007);
	case KEEL_BOOL:
		/* all false, all true, or mixed; true is 1 or 7 */
		if (idx % 3 == 0)
			return 0;
		if (idx % 3 == 1 || (idx + (uint64_t)r) % 2)
			return r == 1 ? 7 : 1;
		return 0;
	default:
		return 0;
	}
}

static void store_float(keel_dtype dt, void *p, double v)
{
	float f = (float)v;
	uint16_t h;

	switch (dt) {
	case KEEL_F32: memcpy(p, &f, 4); break;
	case KEEL_F64: memcpy(p, &v, 8); break;
	case KEEL_F16: h = ref_f16(f); memcpy(p, &h, 2); break;
	case KEEL_BF16: h = ref_bf16(f); memcpy(p, &h, 2); break;
	default: break;
	}
}

static void store_int(keel_dtype dt, void *p, int64_t v)
{
	int8_t i8 = (int8_t)v;
	uint8_t u8 = (uint8_t)v;
	int32_t i32 = (int32_t)v;

	switch (dt) {
	case KEEL_I8: memcpy(p, &i8, 1); break;
	case KEEL_U8: memcpy(p, &u8, 1); break;
	case KEEL_I32: memcpy(p, &i32, 4); break;
	case KEEL_I64: memcpy(p, &v, 8); break;
	case KEEL_BOOL: u8 = (uint8_t)v; memcpy(p, &u8, 1); break;
	default: break;
	}
}

static bool is_float(keel_dtype dt)
{
	return dt == KEEL_F32 || dt == KEEL_F64 || dt == KEEL_F16 ||
	       dt == KEEL_BF16;
}

/* Write element idx of rank r's send data at p. */
static void gen_store(keel_dtype dt, int r, uint64_t idx, void *p)
{
	if (is_float(dt))
		store_float(dt, p, (double)gen_int(dt, r, idx));
	else
		store_int(dt, p, gen_int(dt, r, idx));
}

/* The value of a float-typed send element as stored (after rounding). */
static float gen_float(keel_dtype dt, int r, uint64_t idx)
{
	float f = (float)gen_int(dt, r, idx);

	if (dt == KEEL_F16)
		return ref_f16_value(ref_f16(f));
	if (dt == KEEL_BF16)
		return ref_bf16_value(ref_bf16(f));
	return f;
}

static float ref_apply_f(keel_reduce_op op, float a, float b)
{
	switch (op) {
	case KEEL_REDUCE_PROD: return a * b;
	case KEEL_REDUCE_MAX: return fmaxf(a, b);
	case KEEL_REDUCE_MIN: return fminf(a, b);
	default: return a + b;
	}
}

static double ref_apply_d(keel_reduce_op op, double a, double b)
{
	switch (op) {
	case KEEL_REDUCE_PROD: return a * b;
	case KEEL_REDUCE_MAX: return fmax(a, b);
	case KEEL_REDUCE_MIN: return fmin(a, b);
	default: return a + b;
	}
}

static int64_t ref_apply_i(keel_reduce_op op, int64_t a, int64_t b)
{
	switch (op) {
	case KEEL_REDUCE_PROD: return (int64_t)((uint64_t)a * (uint64_t)b);
	case KEEL_REDUCE_MAX: return a > b ? a : b;
	case KEEL_REDUCE_MIN: return a < b ? a : b;
	default: return (int64_t)((uint64_t)a + (uint64_t)b);
	}
}

/* Reduction over ranks 0..n-1 of element idx, stored at p. */
static void ref_reduce(keel_dtype dt, keel_reduce_op op, int n, uint64_t idx,
		       void *p)
{
	int r;

	if (dt == KEEL_F64) {
		double acc = (double)gen_int(dt, 0, idx);

		for (r = 1; r < n; r++)
			acc = ref_apply_d(op, acc, (double)gen_int(dt, r, idx));
		if (op == KEEL_REDUCE_AVG)
			acc /= (double)n;
		store_float(dt, p, acc);
	} else if (is_float(dt)) {
		float acc = gen_float(dt, 0, idx);

		for (r = 1; r < n; r++)
			acc = ref_apply_f(op, acc, gen_float(dt, r, idx));
		if (op == KEEL_REDUCE_AVG)
			acc /= (float)n;
		store_float(dt, p, acc);
	} else if (dt == KEEL_BOOL) {
		bool any = op == KEEL_REDUCE_SUM || op == KEEL_REDUCE_MAX;
		bool acc = gen_int(dt, 0, idx) != 0;

		for (r = 1; r < n; r++)
			acc = any ? acc || gen_int(dt, r, idx)
				  : acc && gen_int(dt, r, idx);
		store_int(dt, p, acc);
	} else {
		int64_t acc = gen_int(dt, 0, idx);

		for (r = 1; r < n; r++)
			acc = ref_apply_i(op, acc, gen_int(dt, r, idx));
		if (op == KEEL_REDUCE_AVG)
			acc /= n;
		store_int(dt, p, acc);
	}
}

/* ------------------------------------------------------------------------ */
/* Collective cases                                                         */
/* ------------------------------------------------------------------------ */

enum coll_kind {
	K_ALL_REDUCE,
	K_BROADCAST,
	K_REDUCE,
	K_ALL_GATHER,
	K_REDUCE_SCATTER,
	K_ALL_TO_ALL,
	K_RING, /* send to rank+1, recv from rank-1, in a group */
};

static const char *const kind_names[] = {
	"all_reduce", "broadcast", "reduce", "all_gather",
	"reduce_scatter", "all_to_all", "send/recv ring",
};

struct ccase {
	enum coll_kind kind;
	keel_dtype dt;
	keel_reduce_op op;
	int root;
	uint64_t count;
	bool in_place;
};

/* One rank's view: its communicator, stream and two device buffers. */
struct rank_ctx {
	int n, r;
	keel_place place;
	keel_communicator *comm;
	keel_stream stream;
	keel_dptr send, recv; /* BUF_BYTES each */
};

static uint64_t send_elems(const struct ccase *k, int n)
{
	if (k->kind == K_REDUCE_SCATTER || k->kind == K_ALL_TO_ALL)
		return (uint64_t)n * k->count;
	return k->count;
}

/* Where the result lands: in-place reduce_scatter writes into send. */
static bool result_in_send(const struct ccase *k)
{
	return k->in_place && k->kind == K_REDUCE_SCATTER;
}

/* Byte offset of this rank's send data inside the buffer it lives in. */
static uint64_t send_offset(const struct ccase *k, const struct rank_ctx *c)
{
	if (k->in_place && k->kind == K_ALL_GATHER)
		return (uint64_t)c->r * k->count * keel_dtype_size(k->dt);
	return 0;
}

/* Buffer holding the send data: the recv buffer for in-place cases. */
static keel_dptr send_buffer(const struct ccase *k, const struct rank_ctx *c)
{
	if (k->in_place && k->kind != K_REDUCE_SCATTER)
		return c->recv;
	return c->send;
}

/* Fill both buffers with 0xEE, then write this rank's send data. */
static keel_status rank_setup(const struct ccase *k, struct rank_ctx *c)
{
	size_t es = keel_dtype_size(k->dt);
	uint8_t buf[BUF_BYTES];
	uint64_t i, ns = send_elems(k, c->n), off = send_offset(k, c);
	keel_status st;

	memset(buf, 0xEE, sizeof(buf));
	st = keel_mem_copy_h2d(c->place, c->send, buf, BUF_BYTES);
	if (st == KEEL_STATUS_OK)
		st = keel_mem_copy_h2d(c->place, c->recv, buf, BUF_BYTES);
	if (st != KEEL_STATUS_OK || ns == 0)
		return st;
	for (i = 0; i < ns; i++)
		gen_store(k->dt, c->r, i, buf + off + i * es);
	return keel_mem_copy_h2d(c->place, send_buffer(k, c), buf,
				 BUF_BYTES);
}

static keel_status rank_issue(const struct ccase *k, struct rank_ctx *c)
{
	size_t es = keel_dtype_size(k->dt);
	keel_dptr s = send_buffer(k, c) + send_offset(k, c), r = c->recv;
	int n = c->n;

	if (result_in_send(k))
		r = c->send + (uint64_t)c->r * k->count * es;
	switch (k->kind) {
	case K_ALL_REDUCE:
		return keel_all_reduce(c->comm, c->stream, s, r, k->count,
				       k->dt, k->op);
	case K_BROADCAST:
		return keel_broadcast(c->comm, c->stream, s, r, k->count,
				      k->dt, k->root);
	case K_REDUCE:
		return keel_reduce(c->comm, c->stream, s, r, k->count, k->dt,
				   k->op, k->root);
	case K_ALL_GATHER:
		return keel_all_gather(c->comm, c->stream, s, r, k->count,
				       k->dt);
	case K_REDUCE_SCATTER:
		return keel_reduce_scatter(c->comm, c->stream, s, r, k->count,
					   k->dt, k->op);
	case K_ALL_TO_ALL:
		return keel_all_to_all(c->comm, c->stream, s, r, k->count,
				       k->dt);
	case K_RING: {
		keel_status st;

		st = keel_send(c->comm, c->stream, s, k->count, k->dt,
			       (c->r + 1) % n);
		if (st != KEEL_STATUS_OK)
			return st;
		return keel_recv(c->comm, c->stream, r, k->count, k->dt,
				 (c->r + n - 1) % n);
	}
	}
	return KEEL_STATUS_INTERNAL;
}

/* The whole buffer (BUF_BYTES) that rank r must hold afterwards. */
static void rank_expect(const struct ccase *k, int n, int r, uint8_t *out)
{
	size_t es = keel_dtype_size(k->dt);
	uint64_t i, j, cnt = k->count;

	memset(out, 0xEE, BUF_BYTES);
	switch (k->kind) {
	case K_ALL_REDUCE:
		for (i = 0; i < cnt; i++)
			ref_reduce(k->dt, k->op, n, i, out + i * es);
		break;
	case K_BROADCAST:
		for (i = 0; i < cnt; i++)
			gen_store(k->dt, k->root, i, out + i * es);
		break;
	case K_REDUCE:
		for (i = 0; r == k->root && i < cnt; i++)
			ref_reduce(k->dt, k->op, n, i, out + i * es);
		break;
	case K_ALL_GATHER:
		for (j = 0; j < (uint64_t)n; j++)
			for (i = 0; i < cnt; i++)
				gen_store(k->dt, (int)j, i,
					  out + (j * cnt + i) * es);
		break;
	case K_REDUCE_SCATTER: {
		uint64_t base = result_in_send(k) ? (uint64_t)r * cnt : 0;

		if (result_in_send(k)) /* the rest of send is unchanged */
			for (i = 0; i < (uint64_t)n * cnt; i++)
				gen_store(k->dt, r, i, out + i * es);
		for (i = 0; i < cnt; i++)
			ref_reduce(k->dt, k->op, n, (uint64_t)r * cnt + i,
				   out + (base + i) * es);
		break;
	}
	case K_ALL_TO_ALL:
		/* block j of recv = block r of rank j's send */
		for (j = 0; j < (uint64_t)n; j++)
			for (i = 0; i < cnt; i++)
				gen_store(k->dt, (int)j, (uint64_t)r * cnt + i,
					  out + (j * cnt + i) * es);
		break;
	case K_RING:
		for (i = 0; i < cnt; i++)
			gen_store(k->dt, (r + n - 1) % n, i, out + i * es);
		break;
	}
}

static void describe_case(const struct ccase *k, int n, char *buf,
			  size_t size)
{
	snprintf(buf, size, "%s n=%d dtype=%d op=%d root=%d count=%" PRIu64 "%s",
		 kind_names[k->kind], n, (int)k->dt, (int)k->op, k->root,
		 k->count, k->in_place ? " in-place" : "");
}

/* Read back and compare; prints the first difference. */
static bool rank_check(const struct ccase *k, const struct rank_ctx *c)
{
	uint8_t got[BUF_BYTES], want[BUF_BYTES];
	keel_dptr src = result_in_send(k) ? c->send : c->recv;
	char what[128];
	size_t i;

	if (keel_mem_copy_d2h(c->place, got, src, BUF_BYTES) !=
	    KEEL_STATUS_OK) {
		fprintf(stderr, "\n  d2h failed: %s\n", keel_last_error());
		return false;
	}
	rank_expect(k, c->n, c->r, want);
	if (!memcmp(got, want, BUF_BYTES))
		return true;
	for (i = 0; i < BUF_BYTES && got[i] == want[i]; i++)
		;
	describe_case(k, c->n, what, sizeof(what));
	fprintf(stderr,
		"\n  %s: rank %d differs at byte %zu (element %zu): got 0x%02x want 0x%02x\n",
		what, c->r, i, i / keel_dtype_size(k->dt), got[i], want[i]);
	return false;
}

/* ---- one thread, group_start/group_end ---------------------------------- */

static struct rank_ctx g_ranks[NDEV + 1][NDEV]; /* [n][rank] */

static int coll_suite_init(void)
{
	keel_comm_id id;
	int n, r;

	if (common_suite_init())
		return -1;
	for (n = 1; n <= NDEV; n++) {
		if (keel_comm_get_unique_id(P[0], &id) != KEEL_STATUS_OK ||
		    keel_group_start(P[0]) != KEEL_STATUS_OK)
			return -1;
		for (r = 0; r < n; r++) {
			struct rank_ctx *c = &g_ranks[n][r];

			*c = (struct rank_ctx){ .n = n, .r = r, .place = P[r] };
			if (keel_comm_init_rank(P[r], n, &id, r, &c->comm) ||
			    keel_mem_alloc(P[r], BUF_BYTES, &c->send) ||
			    keel_mem_alloc(P[r], BUF_BYTES, &c->recv)) {
				fprintf(stderr, "coll setup: %s\n",
					keel_last_error());
				return -1;
			}
		}
		if (keel_group_end(P[0]) != KEEL_STATUS_OK) {
			fprintf(stderr, "coll setup: %s\n", keel_last_error());
			return -1;
		}
	}
	return 0;
}

static int coll_suite_cleanup(void)
{
	int n, r, bad = 0;

	for (n = 1; n <= NDEV; n++) {
		for (r = 0; r < n; r++) {
			struct rank_ctx *c = &g_ranks[n][r];

			bad |= keel_comm_destroy(c->comm) != KEEL_STATUS_OK;
			bad |= keel_mem_free(c->place, c->send) != KEEL_STATUS_OK;
			bad |= keel_mem_free(c->place, c->recv) != KEEL_STATUS_OK;
			c->comm = NULL;
		}
	}
	return bad ? -1 : 0;
}

static int g_cases_run;

/* Run one case on n ranks from this thread; returns failing ranks. */
static int run_grouped(int n, const struct ccase *k)
{
	keel_status st;
	int r, failures = 0;

	for (r = 0; r < n; r++)
		OK(rank_setup(k, &g_ranks[n][r]));
	OK(keel_group_start(P[0]));
	for (r = 0; r < n; r++)
		OK(rank_issue(k, &g_ranks[n][r]));
	OK(keel_group_end(P[0]));
	for (r = 0; r < n; r++) {
		st = keel_stream_synchronize(P[r], NULL);
		OK(st);
		if (!rank_check(k, &g_ranks[n][r]))
			failures++;
	}
	CU_ASSERT_EQUAL(failures, 0);
	g_cases_run++;
	return failures;
}

static const uint64_t counts[] = { 0, 1, 7, 13 };
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

static void test_comm_rank(void)
{
	int32_t rank = -1, nranks = -1;
	int n, r;

	for (n = 1; n <= NDEV; n++) {
		for (r = 0; r < n; r++) {
			keel_place pl = keel_comm_place(g_ranks[n][r].comm);

			OK(keel_comm_rank(g_ranks[n][r].comm, &rank, &nranks));
			CU_ASSERT_EQUAL(rank, r);
			CU_ASSERT_EQUAL(nranks, n);
			CU_ASSERT_EQUAL(pl.device, P[r].device);
		}
	}
}

static void test_unique_id(void)
{
	keel_comm_id a, b;

	OK(keel_comm_get_unique_id(P[0], &a));
	OK(keel_comm_get_unique_id(P[1], &b));
	CU_ASSERT_NOT_EQUAL(memcmp(a.bytes, b.bytes, sizeof(a.bytes)), 0);
}

/* Every dtype x every op x counts on 1..4 ranks. */
static void test_all_reduce_matrix(void)
{
	int n, dt, op, fails = 0, before = g_cases_run;
	size_t ci;

	for (n = 1; n <= NDEV; n++) {
		for (dt = 0; dt < KEEL_DTYPE_COUNT_; dt++) {
			for (op = 0; op < KEEL_REDUCE_OP_COUNT_; op++) {
				if (dt == KEEL_BOOL && op == KEEL_REDUCE_AVG)
					continue;
				for (ci = 0; ci < NCOUNTS; ci++) {
					struct ccase k = {
						K_ALL_REDUCE, (keel_dtype)dt,
						(keel_reduce_op)op, 0,
						counts[ci], false
					};

					fails += run_grouped(n, &k);
				}
			}
		}
	}
	CU_ASSERT_EQUAL(fails, 0);
	CU_ASSERT_EQUAL(g_cases_run - before,
			NDEV * (KEEL_DTYPE_COUNT_ * KEEL_REDUCE_OP_COUNT_ - 1) *
				(int)NCOUNTS);
}

static void test_all_reduce_in_place(void)
{
	static const struct ccase cases[] = {
		{ K_ALL_REDUCE, KEEL_F32, KEEL_REDUCE_SUM, 0, 13, true },
		{ K_ALL_REDUCE, KEEL_BF16, KEEL_REDUCE_MAX, 0, 7, true },
		{ K_ALL_REDUCE, KEEL_I64, KEEL_REDUCE_PROD, 0, 13, true },
		{ K_ALL_REDUCE, KEEL_F16, KEEL_REDUCE_AVG, 0, 7, true },
	};
	size_t i;
	int n;

	for (n = 1; n <= NDEV; n++)
		for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
			run_grouped(n, &cases[i]);
}

static void test_all_reduce_bool_avg(void)
{
	struct rank_ctx *c = &g_ranks[2][0];

	EXPECT(keel_all_reduce(c->comm, NULL, c->send, c->recv, 4, KEEL_BOOL,
			       KEEL_REDUCE_AVG),
	       KEEL_STATUS_NOT_SUPPORTED);
	MSG_HAS("bool");
}

static void run_rooted(enum coll_kind kind, const keel_dtype *dts, size_t ndt,
		       const keel_reduce_op *ops, size_t nops)
{
	size_t d, o, ci;
	int n, root;

	for (n = 1; n <= NDEV; n++)
		for (d = 0; d < ndt; d++)
			for (o = 0; o < nops; o++)
				for (root = 0; root < n; root++)
					for (ci = 0; ci < NCOUNTS; ci++) {
						struct ccase k = {
							kind, dts[d], ops[o],
							root, counts[ci],
							false
						};

						run_grouped(n, &k);
					}
}

static void test_broadcast(void)
{
	static const keel_dtype dts[] = { KEEL_F32, KEEL_F16, KEEL_I64,
					  KEEL_U8, KEEL_BOOL };
	static const keel_reduce_op none[] = { KEEL_REDUCE_SUM };
	int n, root;

	run_rooted(K_BROADCAST, dts, 5, none, 1);
	for (n = 1; n <= NDEV; n++)
		for (root = 0; root < n; root++) {
			struct ccase k = { K_BROADCAST, KEEL_F64,
					   KEEL_REDUCE_SUM, root, 13, true };

			run_grouped(n, &k);
		}
}

static void test_reduce(void)
{
	static const keel_dtype dts[] = { KEEL_F64, KEEL_BF16, KEEL_I32 };
	static const keel_reduce_op ops[] = { KEEL_REDUCE_SUM,
					      KEEL_REDUCE_PROD,
					      KEEL_REDUCE_MAX,
					      KEEL_REDUCE_MIN,
					      KEEL_REDUCE_AVG };

	run_rooted(K_REDUCE, dts, 3, ops, 5);
}

static void run_unrooted(enum coll_kind kind, const keel_dtype *dts,
			 size_t ndt, const keel_reduce_op *ops, size_t nops,
			 bool also_in_place)
{
	size_t d, o, ci;
	int n, ip;

	for (n = 1; n <= NDEV; n++)
		for (d = 0; d < ndt; d++)
			for (o = 0; o < nops; o++)
				for (ci = 0; ci < NCOUNTS; ci++)
					for (ip = 0; ip <= (int)also_in_place;
					     ip++) {
						struct ccase k = {
							kind, dts[d], ops[o],
							0, counts[ci], ip != 0
						};

						run_grouped(n, &k);
					}
}

static void test_all_gather(void)
{
	static const keel_dtype dts[] = { KEEL_F32, KEEL_I8, KEEL_BOOL,
					  KEEL_F16 };
	static const keel_reduce_op none[] = { KEEL_REDUCE_SUM };

	run_unrooted(K_ALL_GATHER, dts, 4, none, 1, true);
}

static void test_reduce_scatter(void)
{
	static const keel_dtype dts[] = { KEEL_F32, KEEL_I32, KEEL_BF16,
					  KEEL_U8 };
	static const keel_reduce_op ops[] = { KEEL_REDUCE_SUM,
					      KEEL_REDUCE_PROD,
					      KEEL_REDUCE_MAX,
					      KEEL_REDUCE_AVG };

	run_unrooted(K_REDUCE_SCATTER, dts, 4, ops, 4, true);
}

static void test_all_to_all(void)
{
	static const keel_dtype dts[] = { KEEL_F64, KEEL_I64, KEEL_U8,
					  KEEL_F16 };
	static const keel_reduce_op none[] = { KEEL_REDUCE_SUM };

	run_unrooted(K_ALL_TO_ALL, dts, 4, none, 1, false);
}

static void test_send_recv_ring(void)
{
	static const keel_dtype dts[] = { KEEL_F32, KEEL_I64, KEEL_BOOL };
	static const keel_reduce_op none[] = { KEEL_REDUCE_SUM };

	run_unrooted(K_RING, dts, 3, none, 1, false);
}

/* Groups nest: only the outermost group_end launches the calls. */
static void test_nested_groups(void)
{
	struct ccase k = { K_ALL_REDUCE, KEEL_I64, KEEL_REDUCE_SUM, 0, 7,
			   false };
	uint8_t untouched[BUF_BYTES], got[BUF_BYTES];
	int n = 3, r, bad = 0;

	memset(untouched, 0xEE, sizeof(untouched));
	for (r = 0; r < n; r++)
		OK(rank_setup(&k, &g_ranks[n][r]));
	OK(keel_group_start(P[0]));
	OK(keel_group_start(P[1]));
	for (r = 0; r < n; r++)
		OK(rank_issue(&k, &g_ranks[n][r]));
	OK(keel_group_end(P[1]));
	for (r = 0; r < n; r++) {
		OK(keel_stream_synchronize(P[r], NULL));
		OK(keel_mem_copy_d2h(P[r], got, g_ranks[n][r].recv, BUF_BYTES));
		bad += memcmp(got, untouched, BUF_BYTES) != 0;
	}
	CU_ASSERT_EQUAL(bad, 0); /* nothing ran at the inner group_end */
	OK(keel_group_end(P[0]));
	for (r = 0; r < n; r++) {
		OK(keel_stream_synchronize(P[r], NULL));
		CU_ASSERT_TRUE(rank_check(&k, &g_ranks[n][r]));
	}
}

/* ---- one thread per rank ------------------------------------------------ */

static const struct ccase thread_cases[] = {
	{ K_ALL_REDUCE, KEEL_F32, KEEL_REDUCE_SUM, 0, 13, false },
	{ K_ALL_REDUCE, KEEL_BF16, KEEL_REDUCE_MAX, 0, 7, true },
	{ K_ALL_REDUCE, KEEL_I8, KEEL_REDUCE_AVG, 0, 1, false },
	{ K_ALL_REDUCE, KEEL_BOOL, KEEL_REDUCE_MIN, 0, 0, false },
	{ K_BROADCAST, KEEL_I64, KEEL_REDUCE_SUM, -1, 7, false },
	{ K_REDUCE, KEEL_F64, KEEL_REDUCE_AVG, 0, 13, false },
	{ K_ALL_GATHER, KEEL_F16, KEEL_REDUCE_SUM, 0, 7, false },
	{ K_REDUCE_SCATTER, KEEL_I32, KEEL_REDUCE_SUM, 0, 13, false },
	{ K_ALL_TO_ALL, KEEL_U8, KEEL_REDUCE_SUM, 0, 7, false },
	{ K_RING, KEEL_F32, KEEL_REDUCE_SUM, 0, 13, false },
};
#define NTHREAD_CASES (sizeof(thread_cases) / sizeof(thread_cases[0]))

struct rank_thread {
	struct rank_ctx c;
	const keel_comm_id *id;
	int passed;  /* cases whose result matched */
	int errors;  /* failing calls */
	char first_error[512];
};

static void rank_thread_fail(struct rank_thread *t, const char *what)
{
	if (!t->errors++)
		snprintf(t->first_error, sizeof(t->first_error),
			 "rank %d of %d: %s: %s", t->c.r, t->c.n, what,
			 keel_last_error());
}

static void rank_thread_case(struct rank_thread *t, const struct ccase *k0)
{
	struct rank_ctx *c = &t->c;
	struct ccase k = *k0;
	const char *what;
	keel_status st;

	if (k.root < 0) /* last rank */
		k.root = c->n - 1;
	what = "setup";
	if (rank_setup(&k, c) != KEEL_STATUS_OK)
		goto fail;
	what = "group_start";
	if (k.kind == K_RING && keel_group_start(c->place) != KEEL_STATUS_OK)
		goto fail;
	st = rank_issue(&k, c);
	what = "group_end";
	if (k.kind == K_RING && keel_group_end(c->place) != KEEL_STATUS_OK)
		goto fail;
	what = kind_names[k.kind];
	if (st != KEEL_STATUS_OK)
		goto fail;
	what = "stream_synchronize";
	if (keel_stream_synchronize(c->place, c->stream) != KEEL_STATUS_OK)
		goto fail;
	if (rank_check(&k, c))
		t->passed++;
	return;
fail:
	rank_thread_fail(t, what);
}

static void *rank_thread_main(void *arg)
{
	struct rank_thread *t = arg;
	struct rank_ctx *c = &t->c;
	size_t i;

	if (keel_comm_init_rank(c->place, c->n, t->id, c->r, &c->comm) !=
	    KEEL_STATUS_OK) {
		rank_thread_fail(t, "comm_init_rank");
		return NULL;
	}
	if (keel_stream_create(c->place, 0, &c->stream) != KEEL_STATUS_OK ||
	    keel_mem_alloc(c->place, BUF_BYTES, &c->send) != KEEL_STATUS_OK ||
	    keel_mem_alloc(c->place, BUF_BYTES, &c->recv) != KEEL_STATUS_OK) {
		rank_thread_fail(t, "setup");
		return NULL;
	}
	for (i = 0; i < NTHREAD_CASES; i++)
		rank_thread_case(t, &thread_cases[i]);
	if (keel_comm_destroy(c->comm) != KEEL_STATUS_OK)
		rank_thread_fail(t, "comm_destroy");
	if (keel_mem_free(c->place, c->send) != KEEL_STATUS_OK ||
	    keel_mem_free(c->place, c->recv) != KEEL_STATUS_OK ||
	    keel_stream_destroy(c->place, c->stream) != KEEL_STATUS_OK)
		rank_thread_fail(t, "teardown");
	return NULL;
}

static void test_collectives_thread_per_rank(void)
{
	struct rank_thread t[NDEV];
	pthread_t th[NDEV];
	keel_comm_id id;
	int n, r;

	for (n = 1; n <= NDEV; n++) {
		OK_FATAL(keel_comm_get_unique_id(P[0], &id));
		for (r = 0; r < n; r++) {
			memset(&t[r], 0, sizeof(t[r]));
			t[r].c = (struct rank_ctx){ .n = n, .r = r,
						    .place = P[r] };
			t[r].id = &id;
			CU_ASSERT_EQUAL_FATAL(pthread_create(&th[r], NULL,
							     rank_thread_main,
							     &t[r]),
					      0);
		}
		for (r = 0; r < n; r++) {
			pthread_join(th[r], NULL);
			if (t[r].errors)
				fprintf(stderr, "\n  %s\n", t[r].first_error);
			CU_ASSERT_EQUAL(t[r].errors, 0);
			CU_ASSERT_EQUAL(t[r].passed, (int)NTHREAD_CASES);
		}
	}
}

/* ---- errors --------------------------------------------------------------- */

static void test_coll_errors(void)
{
	struct rank_ctx *c0 = &g_ranks[2][0], *c1 = &g_ranks[2][1];
	keel_communicator *x0 = NULL, *x1 = NULL, *dup = NULL;
	keel_stream other = NULL;
	keel_comm_id id;

	EXPECT(keel_broadcast(c0->comm, NULL, c0->send, c0->recv, 4, KEEL_F32, 2),
	       KEEL_STATUS_INVALID_ARGUMENT);
	MSG_HAS("root 2");
	EXPECT(keel_send(c0->comm, NULL, c0->send, 4, KEEL_F32, -1),
	       KEEL_STATUS_INVALID_ARGUMENT);
	EXPECT(keel_all_reduce(c0->comm, NULL, c0->send, c0->recv, BUF_BYTES,
			       KEEL_F32, KEEL_REDUCE_SUM),
	       KEEL_STATUS_INVALID_ARGUMENT);
	MSG_HAS("not inside a live allocation");
	EXPECT(keel_all_gather(c0->comm, NULL, c0->send, c0->recv,
			       BUF_BYTES / 4 / 2 + 1, KEEL_F32),
	       KEEL_STATUS_INVALID_ARGUMENT);
	OK_FATAL(keel_stream_create(P[1], 0, &other));
	EXPECT(keel_all_reduce(c0->comm, other, c0->send, c0->recv, 4,
			       KEEL_F32, KEEL_REDUCE_SUM),
	       KEEL_STATUS_INVALID_HANDLE);
	OK(keel_stream_destroy(P[1], other));
	EXPECT(keel_group_end(P[0]), KEEL_STATUS_INVALID_STATE);

	/* ranks disagree on the count: both ranks get the error */
	OK(keel_group_start(P[0]));
	OK(keel_all_reduce(c0->comm, NULL, c0->send, c0->recv, 4, KEEL_F32,
			   KEEL_REDUCE_SUM));
	OK(keel_all_reduce(c1->comm, NULL, c1->send, c1->recv, 5, KEEL_F32,
			   KEEL_REDUCE_SUM));
	if (g_async) {
		OK(keel_group_end(P[0]));
		EXPECT(keel_stream_synchronize(P[0], NULL),
		       KEEL_STATUS_INVALID_ARGUMENT);
		MSG_HAS("disagree");
		OK(keel_stream_synchronize(P[0], NULL)); /* reported once */
		EXPECT(keel_device_synchronize(P[1]),
		       KEEL_STATUS_INVALID_ARGUMENT);
		MSG_HAS("count");
		OK(keel_device_synchronize(P[1]));
	} else {
		EXPECT(keel_group_end(P[0]), KEEL_STATUS_INVALID_ARGUMENT);
		MSG_HAS("disagree");
	}
	/* the communicator keeps working */
	{
		struct ccase k = { K_ALL_REDUCE, KEEL_I32, KEEL_REDUCE_SUM, 0,
				   7, false };

		run_grouped(2, &k);
	}

	/* a rank joining twice, and a wrong nranks */
	OK(keel_comm_get_unique_id(P[0], &id));
	OK(keel_group_start(P[0]));
	OK(keel_comm_init_rank(P[0], 2, &id, 0, &x0));
	EXPECT(keel_comm_init_rank(P[2], 2, &id, 0, &dup),
	       KEEL_STATUS_INVALID_ARGUMENT);
	MSG_HAS("already joined");
	EXPECT(keel_comm_init_rank(P[2], 3, &id, 1, &dup),
	       KEEL_STATUS_INVALID_ARGUMENT);
	OK(keel_comm_init_rank(P[1], 2, &id, 1, &x1));
	OK(keel_group_end(P[0]));
	CU_ASSERT_PTR_NULL(dup);
	OK(keel_comm_destroy(x0));
	OK(keel_comm_destroy(x1));
}

/* ------------------------------------------------------------------------ */
/* Suite: lifecycle (runs last; re-initialises the runtime)                 */
/* ------------------------------------------------------------------------ */

/* OPENBLAS_CORETYPE is not among them: no test changes it here. */
#define N_SAVED_ENV 7
static char *g_saved_env[N_SAVED_ENV];
static const char *const g_env_names[N_SAVED_ENV] = {
	"KEEL_CPU_DEVICES", "KEEL_CPU_MEM_LIMIT", "KEEL_CPU_ASYNC",
	"KEEL_CPU_DISCRETE", "KEEL_CPU_COLL_TIMEOUT_MS", "KEEL_CPU_BLAS",
	"KEEL_CPU_BLAS_CORETYPE",
};

static int lifecycle_suite_init(void)
{
	int i;

	if (common_suite_init())
		return -1;
	for (i = 0; i < N_SAVED_ENV; i++) {
		const char *v = getenv(g_env_names[i]);

		g_saved_env[i] = v ? strdup(v) : NULL;
	}
	return 0;
}

static void restore_env(void)
{
	int i;

	for (i = 0; i < N_SAVED_ENV; i++) {
		if (g_saved_env[i])
			setenv(g_env_names[i], g_saved_env[i], 1);
		else
			unsetenv(g_env_names[i]);
	}
}

static int lifecycle_suite_cleanup(void)
{
	int i;

	restore_env();
	for (i = 0; i < N_SAVED_ENV; i++)
		free(g_saved_env[i]);
	return 0;
}

static keel_status reinit(void)
{
	keel_shutdown();
	return keel_init();
}

/* The plugin's entry in the plugin list (loaded or skipped). */
static bool find_cpu_plugin(keel_plugin_info *info)
{
	int i;

	for (i = 0; i < keel_plugin_count(); i++) {
		if (keel_plugin_get_info(i, info) != KEEL_STATUS_OK)
			continue;
		if (info->path && strstr(info->path, "libkeel-cpu"))
			return true;
	}
	return false;
}

static void test_collective_timeout(void)
{
	keel_communicator *a = NULL, *b = NULL, *lone = NULL;
	keel_dptr da = 0, db = 0;
	keel_comm_id id;
	double t0, dt;

	setenv("KEEL_CPU_COLL_TIMEOUT_MS", "300", 1);
	OK_FATAL(reinit());
	CU_ASSERT_EQUAL_FATAL(resolve_places(), 0);

	/* a rank whose peers never join */
	OK(keel_comm_get_unique_id(P[0], &id));
	t0 = now_ms();
	EXPECT(keel_comm_init_rank(P[0], 2, &id, 0, &lone), KEEL_STATUS_TIMEOUT);
	dt = now_ms() - t0;
	MSG_HAS("KEEL_CPU_COLL_TIMEOUT_MS");
	CU_ASSERT_TRUE(dt >= 290.0 && dt < 10000.0);
	CU_ASSERT_PTR_NULL(lone);

	/* one thread driving two ranks without a group */
	OK(keel_comm_get_unique_id(P[0], &id));
	OK(keel_group_start(P[0]));
	OK(keel_comm_init_rank(P[0], 2, &id, 0, &a));
	OK(keel_comm_init_rank(P[1], 2, &id, 1, &b));
	OK(keel_group_end(P[0]));
	OK_FATAL(keel_mem_alloc(P[0], 64, &da));
	OK_FATAL(keel_mem_alloc(P[1], 64, &db));
	if (!g_async) {
		t0 = now_ms();
		EXPECT(keel_all_reduce(a, NULL, da, da, 4, KEEL_F32,
				       KEEL_REDUCE_SUM),
		       KEEL_STATUS_TIMEOUT);
		dt = now_ms() - t0;
		MSG_HAS("group_start");
		CU_ASSERT_TRUE(dt >= 290.0);
		/* the late rank fails at once instead of waiting again */
		t0 = now_ms();
		EXPECT(keel_all_reduce(b, NULL, db, db, 4, KEEL_F32,
				       KEEL_REDUCE_SUM),
		       KEEL_STATUS_TIMEOUT);
		CU_ASSERT_TRUE(now_ms() - t0 < 250.0);
	} else {
		/* async: each stream's worker waits, so this works */
		OK(keel_all_reduce(a, NULL, da, da, 4, KEEL_F32,
				   KEEL_REDUCE_SUM));
		OK(keel_all_reduce(b, NULL, db, db, 4, KEEL_F32,
				   KEEL_REDUCE_SUM));
		OK(keel_stream_synchronize(P[0], NULL));
		OK(keel_stream_synchronize(P[1], NULL));
		/* a lonely send times out on the stream */
		OK(keel_send(a, NULL, da, 4, KEEL_F32, 1));
		EXPECT(keel_stream_synchronize(P[0], NULL), KEEL_STATUS_TIMEOUT);
		MSG_HAS("recv");
	}
	OK(keel_comm_destroy(a));
	OK(keel_comm_destroy(b));
	OK(keel_mem_free(P[0], da));
	OK(keel_mem_free(P[1], db));
	restore_env();
}

static void test_settings_reread(void)
{
	keel_plugin_info info;
	keel_device_props p;
	keel_place pl;
	keel_dptr d = 0;

	/* finalize + init picks up a new device count */
	setenv("KEEL_CPU_DEVICES", "2", 1);
	OK_FATAL(reinit());
	CU_ASSERT_EQUAL(keel_device_count("cpu"), 2);
	EXPECT(keel_place_parse("cpu:2", &pl), KEEL_STATUS_INVALID_DEVICE);

	/* invalid settings: the plugin is skipped with the reason */
	setenv("KEEL_CPU_DEVICES", "65", 1);
	OK(reinit());
	CU_ASSERT_EQUAL(keel_device_count("cpu"), 0);
	CU_ASSERT_TRUE_FATAL(find_cpu_plugin(&info));
	CU_ASSERT_FALSE(info.loaded);
	CU_ASSERT_PTR_NOT_NULL(info.reason);
	CU_ASSERT_TRUE(info.reason && strstr(info.reason, "KEEL_CPU_DEVICES='65'"));
	setenv("KEEL_CPU_DEVICES", "zero", 1);
	OK(reinit());
	CU_ASSERT_EQUAL(keel_device_count("cpu"), 0);
	restore_env();

	setenv("KEEL_CPU_MEM_LIMIT", "12Q", 1);
	OK(reinit());
	CU_ASSERT_EQUAL(keel_device_count("cpu"), 0);
	CU_ASSERT_TRUE_FATAL(find_cpu_plugin(&info));
	CU_ASSERT_TRUE(info.reason && strstr(info.reason, "KEEL_CPU_MEM_LIMIT"));
	restore_env();

	setenv("KEEL_CPU_ASYNC", "maybe", 1);
	OK(reinit());
	CU_ASSERT_EQUAL(keel_device_count("cpu"), 0);
	CU_ASSERT_TRUE_FATAL(find_cpu_plugin(&info));
	CU_ASSERT_TRUE(info.reason && strstr(info.reason, "KEEL_CPU_ASYNC"));
	restore_env();

	/* a 1K limit with a suffix */
	setenv("KEEL_CPU_MEM_LIMIT", "1K", 1);
	OK_FATAL(reinit());
	CU_ASSERT_EQUAL_FATAL(resolve_places(), 0);
	OK(keel_device_get_props(P[3], &p));
	CU_ASSERT_EQUAL(p.total_memory, 1024);
	EXPECT(keel_mem_alloc(P[3], 1025, &d), KEEL_STATUS_OUT_OF_MEMORY);
	OK(keel_mem_alloc(P[3], 1024, &d));
	OK(keel_mem_free(P[3], d));
	restore_env();

	/* back to the test's settings */
	OK_FATAL(reinit());
	CU_ASSERT_EQUAL_FATAL(resolve_places(), 0);
	CU_ASSERT_EQUAL(keel_device_count("cpu"), NDEV);
	OK(keel_device_get_props(P[3], &p));
	CU_ASSERT_EQUAL(p.total_memory, MEM_LIMIT);
}

/* Lines of the fake BLAS's load trace (see fake_blas.c), joined by ','. */
static void read_trace(const char *path, char *out, size_t cap)
{
	char line[64];
	FILE *f = fopen(path, "r");

	out[0] = '\0';
	while (f && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (out[0])
			strncat(out, ",", cap - strlen(out) - 1);
		strncat(out, line, cap - strlen(out) - 1);
	}
	if (f)
		fclose(f);
	remove(path);
}

/* ---- BLAS loading ------------------------------------------------------- */

/* The CPU's feature flags as the kernel reports them (/proc/cpuinfo), a
 * source independent of the plugin's CPUID code. Empty when unknown. */
static void cpu_flags(char *out, size_t cap)
{
	char line[8192];
	FILE *f = fopen("/proc/cpuinfo", "r");

	out[0] = '\0';
	while (f && fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "flags", 5) && strchr(line, ':')) {
			snprintf(out, cap, " %s", strchr(line, ':') + 1);
			out[strcspn(out, "\n")] = ' ';
			break;
		}
	}
	if (f)
		fclose(f);
}

static bool has_flag(const char *flags, const char *flag)
{
	char word[64];

	snprintf(word, sizeof(word), " %s ", flag);
	return strstr(flags, word) != NULL;
}

static bool has_avx512(const char *f)
{
	return has_flag(f, "avx512f") && has_flag(f, "avx512cd") &&
	       has_flag(f, "avx512bw") && has_flag(f, "avx512dq") &&
	       has_flag(f, "avx512vl");
}

/* The kernel set the plugin must end up with on this CPU when the BLAS
 * first picks Prescott, from docs/cpu-plugin.md's table and the kernel's
 * flags: Cooperlake with AVX-512 and AVX512_BF16, SkylakeX with AVX-512,
 * Haswell with AVX2 and FMA, else none (NULL). */
static const char *expected_core(const char *f)
{
	if (!has_flag(f, "avx2") || !has_flag(f, "fma"))
		return NULL;
	if (has_avx512(f))
		return has_flag(f, "avx512_bf16") ? "Cooperlake" : "SkylakeX";
	return "Haswell";
}

/* An OpenBLAS kernel set this CPU cannot run, by the kernel's flags, or
 * NULL when it runs all the ones tried. */
static const char *core_this_cpu_lacks(const char *f)
{
	if (!has_flag(f, "avx2") || !has_flag(f, "fma"))
		return "Haswell";
	if (!has_avx512(f))
		return "SkylakeX";
	if (!has_flag(f, "avx512_bf16"))
		return "Cooperlake";
	if (!has_flag(f, "amx_bf16"))
		return "SapphireRapids";
	return NULL;
}

/* What one start of the plugin in a child process did with the fake BLAS
 * (fake_blas.c): the kernel sets it loaded the library with, the child's
 * OPENBLAS_CORETYPE after init, and its log. */
struct blas_run {
	char trace[256];
	char env_after[64];
	char log[8192];
	int devices;
};

extern char **environ;

/* Child side (argv[1] == "--blas-child"): start keel, report. */
static int blas_child(void)
{
	const char *v;
	int n;

	if (keel_init() != KEEL_STATUS_OK)
		return 3;
	n = keel_device_count("cpu");
	v = getenv("OPENBLAS_CORETYPE");
	printf("devices=%d\nenv=%s\n", n, v ? v : "(unset)");
	fflush(stdout);
	keel_shutdown();
	return 0;
}

/* Runs this program with --blas-child and the test's environment, in
 * which OPENBLAS_CORETYPE is `core` (NULL: absent) and
 * KEEL_CPU_BLAS_CORETYPE is `keep` (NULL: absent). The test process's own
 * environment is never changed: only the child's copy differs. */
static bool run_blas_child(const char *fake, const char *trace,
			   const char *core, const char *keep,
			   struct blas_run *out)
{
	char **env, self[4096], *p, buf[1024];
	char e_core[128], e_keep[128], e_blas[4200], e_trace[300];
	int pipefd[2], status = 0, n = 0, i;
	size_t len = 0;
	ssize_t got;
	pid_t pid;

	memset(out, 0, sizeof(*out));
	out->devices = -1;
	got = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (got <= 0)
		return false;
	self[got] = '\0';
	for (i = 0; environ[i]; i++)
		n++;
	env = calloc((size_t)n + 8, sizeof(*env));
	if (!env)
		return false;
	n = 0;
	for (i = 0; environ[i]; i++)
		if (strncmp(environ[i], "OPENBLAS_CORETYPE=", 18) &&
		    strncmp(environ[i], "KEEL_CPU_BLAS_CORETYPE=", 23) &&
		    strncmp(environ[i], "KEEL_CPU_BLAS=", 14) &&
		    strncmp(environ[i], "FAKE_BLAS_TRACE=", 16) &&
		    strncmp(environ[i], "KEEL_LOG_LEVEL=", 15))
			env[n++] = environ[i];
	snprintf(e_blas, sizeof(e_blas), "KEEL_CPU_BLAS=%s", fake);
	snprintf(e_trace, sizeof(e_trace), "FAKE_BLAS_TRACE=%s", trace);
	env[n++] = e_blas;
	env[n++] = e_trace;
	env[n++] = "KEEL_LOG_LEVEL=info";
	if (core) {
		snprintf(e_core, sizeof(e_core), "OPENBLAS_CORETYPE=%s", core);
		env[n++] = e_core;
	}
	if (keep) {
		snprintf(e_keep, sizeof(e_keep), "KEEL_CPU_BLAS_CORETYPE=%s",
			 keep);
		env[n++] = e_keep;
	}
	env[n] = NULL;
	remove(trace);
	if (pipe(pipefd)) {
		free(env);
		return false;
	}
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		dup2(pipefd[1], 1);
		dup2(pipefd[1], 2);
		close(pipefd[0]);
		close(pipefd[1]);
		execve(self, (char *[]){ self, "--blas-child", NULL }, env);
		_exit(127);
	}
	free(env);
	close(pipefd[1]);
	if (pid < 0) {
		close(pipefd[0]);
		return false;
	}
	while ((got = read(pipefd[0], buf, sizeof(buf))) > 0) {
		size_t room = sizeof(out->log) - 1 - len;
		size_t take = (size_t)got < room ? (size_t)got : room;

		memcpy(out->log + len, buf, take);
		len += take;
	}
	out->log[len] = '\0';
	close(pipefd[0]);
	waitpid(pid, &status, 0);
	if ((p = strstr(out->log, "devices=")))
		out->devices = atoi(p + 8);
	if ((p = strstr(out->log, "\nenv=")))
		sscanf(p + 5, "%63[^\n]", out->env_after);
	read_trace(trace, out->trace, sizeof(out->trace));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "\n  blas child exited %d:\n%s", status,
			out->log);
		return false;
	}
	return true;
}

#define BLAS_EXPECT(what, cond)                                              \
	do {                                                                 \
		CU_ASSERT_TRUE(cond);                                        \
		if (!(cond))                                                 \
			fprintf(stderr, "\n  %s: trace '%s', env '%s', log:\n%s", \
				what, r.trace, r.env_after, r.log);          \
	} while (0)

/* KEEL_CPU_BLAS: a library that cannot be loaded or lacks CBLAS leaves the
 * plugin unloaded with the reason; a DYNAMIC_ARCH BLAS that chose a kernel
 * set below the CPU is loaded again with the right one, unless the user
 * chose (OPENBLAS_CORETYPE) or said keep; a user's choice the CPU cannot
 * run is left out of the load with a warning that names it. The cases
 * with an OPENBLAS_CORETYPE run in child processes: this process never
 * changes the variable, which some machines set on purpose. */
static void test_blas_loader(void)
{
	const char *fake = getenv("KEEL_TEST_FAKE_BLAS");
	const char *user = getenv("OPENBLAS_CORETYPE");
	char flags[8192], trace[256], want[128], user_before[128];
	const char *best, *lacking;
	keel_plugin_info info;
	struct blas_run r;

	snprintf(user_before, sizeof(user_before), "%s", user ? user : "");
	cpu_flags(flags, sizeof(flags));
	CU_ASSERT_TRUE_FATAL(flags[0] != '\0');
	best = expected_core(flags);
	lacking = core_this_cpu_lacks(flags);
	snprintf(trace, sizeof(trace), "/tmp/keel-fake-blas-%d.trace",
		 (int)getpid());
	setenv("KEEL_CPU_BLAS", "/nonexistent/libnoblas.so", 1);
	OK(reinit());
	CU_ASSERT_EQUAL(keel_device_count("cpu"), 0);
	CU_ASSERT_TRUE_FATAL(find_cpu_plugin(&info));
	CU_ASSERT_TRUE(info.reason &&
		       strstr(info.reason, "/nonexistent/libnoblas.so") &&
		       strstr(info.reason, "KEEL_CPU_BLAS"));
	/* a library without cblas_sgemm (zlib: any plain shared library) */
	setenv("KEEL_CPU_BLAS", "libz.so.1", 1);
	OK(reinit());
	CU_ASSERT_EQUAL(keel_device_count("cpu"), 0);
	CU_ASSERT_TRUE_FATAL(find_cpu_plugin(&info));
	CU_ASSERT_TRUE(info.reason && strstr(info.reason, "lacks cblas_sgemm"));
	restore_env();
	CU_ASSERT_PTR_NOT_NULL_FATAL(fake);

	/* no choice: OpenBLAS's Prescott is corrected to the CPU's best */
	CU_ASSERT_TRUE_FATAL(run_blas_child(fake, trace, NULL, NULL, &r));
	snprintf(want, sizeof(want), best ? "-,%s" : "-", best);
	BLAS_EXPECT("no OPENBLAS_CORETYPE", !strcmp(r.trace, want));
	BLAS_EXPECT("no OPENBLAS_CORETYPE: env", !strcmp(r.env_after, "(unset)"));
	CU_ASSERT_EQUAL(r.devices, NDEV);
	BLAS_EXPECT("the chosen kernels are logged",
		    strstr(r.log, best ? best : "Prescott") != NULL);

	/* a choice the CPU can run is honoured, and said so */
	CU_ASSERT_TRUE_FATAL(run_blas_child(fake, trace, "Prescott", NULL, &r));
	BLAS_EXPECT("Prescott", !strcmp(r.trace, "Prescott"));
	BLAS_EXPECT("Prescott: env", !strcmp(r.env_after, "Prescott"));
	BLAS_EXPECT("Prescott: log",
		    strstr(r.log, "OPENBLAS_CORETYPE=Prescott") &&
		    strstr(r.log, "honoured"));
	if (best) {
		CU_ASSERT_TRUE_FATAL(run_blas_child(fake, trace, best, NULL,
						    &r));
		BLAS_EXPECT("best", !strcmp(r.trace, best));
	}

	/* a choice the CPU cannot run: not passed to the library, a
	 * warning names the missing instructions, the variable is back */
	if (lacking) {
		CU_ASSERT_TRUE_FATAL(run_blas_child(fake, trace, lacking, NULL,
						    &r));
		BLAS_EXPECT("lacking: loaded without it",
			    !strcmp(r.trace, want));
		BLAS_EXPECT("lacking: env restored",
			    !strcmp(r.env_after, lacking));
		BLAS_EXPECT("lacking: warning",
			    strstr(r.log, "keel warn") &&
			    strstr(r.log, "ignored") && strstr(r.log, lacking) &&
			    strstr(r.log, "lacks"));
		CU_ASSERT_EQUAL(r.devices, NDEV);
		/* the same, spelled in lower case */
		snprintf(want, sizeof(want), "%s", lacking);
		for (char *c = want; *c; c++)
			*c = (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
		CU_ASSERT_TRUE_FATAL(run_blas_child(fake, trace, want, NULL,
						    &r));
		BLAS_EXPECT("lacking, lower case: not loaded with it",
			    strstr(r.trace, want) == NULL);
	} else {
		printf("\n  (this CPU runs every kernel set the test knows: "
		       "the unsupported-choice case was not exercised)");
	}

	/* a name the plugin cannot check is passed on, and said so */
	CU_ASSERT_TRUE_FATAL(run_blas_child(fake, trace, "FutureCore", NULL,
					    &r));
	BLAS_EXPECT("unknown", !strcmp(r.trace, "FutureCore"));
	BLAS_EXPECT("unknown: log", strstr(r.log, "unchecked") != NULL);

	/* keep: OpenBLAS's own choice stays */
	CU_ASSERT_TRUE_FATAL(run_blas_child(fake, trace, NULL, "keep", &r));
	BLAS_EXPECT("keep", !strcmp(r.trace, "-"));

	/* this process's OPENBLAS_CORETYPE is as it was */
	user = getenv("OPENBLAS_CORETYPE");
	CU_ASSERT_STRING_EQUAL(user ? user : "", user_before);
	restore_env();
	OK_FATAL(reinit());
	CU_ASSERT_EQUAL_FATAL(resolve_places(), 0);
	CU_ASSERT_EQUAL(keel_device_count("cpu"), NDEV);
}

/* finalize frees what the user leaked, including busy streams. */
static void test_finalize_releases_everything(void)
{
	struct flag_after f = { .ms = 20 };
	keel_stream s = NULL;
	keel_event e = NULL;
	keel_dptr d = 0;
	void *h = NULL;
	uint8_t v = 1;

	OK_FATAL(keel_stream_create(P[1], 0, &s));
	OK_FATAL(keel_event_create(P[1], &e));
	OK_FATAL(keel_mem_alloc(P[1], 1000, &d));
	OK_FATAL(keel_mem_host_alloc(P[1], 1000, &h));
	OK(keel_stream_launch_host_func(P[1], s, hf_sleep_then_flag, &f));
	OK(keel_event_record(P[1], e, s));
	OK(keel_mem_copy_h2d_async(P[1], s, d, &v, 1));
	keel_shutdown(); /* drains and joins the worker */
	CU_ASSERT_EQUAL(atomic_load(&f.flag), 1);
	OK_FATAL(keel_init());
	CU_ASSERT_EQUAL_FATAL(resolve_places(), 0);
	CU_ASSERT_EQUAL(keel_device_count("cpu"), NDEV);
	OK(keel_mem_alloc(P[1], 1000, &d));
	OK(keel_mem_free(P[1], d));
}

/* ------------------------------------------------------------------------ */
/* Registry                                                                 */
/* ------------------------------------------------------------------------ */

struct test_entry {
	const char *name;
	CU_TestFunc fn;
};

static int add_suite(const char *name, CU_InitializeFunc init,
		     CU_CleanupFunc cleanup, const struct test_entry *tests,
		     size_t n)
{
	CU_pSuite s = CU_add_suite(name, init, cleanup);
	size_t i;

	if (!s)
		return -1;
	for (i = 0; i < n; i++)
		if (!CU_add_test(s, tests[i].name, tests[i].fn))
			return -1;
	return 0;
}

#define ADD_SUITE(name, init, cleanup, tests)                               \
	add_suite(name, init, cleanup, tests, sizeof(tests) / sizeof(tests[0]))

static const struct test_entry memory_tests[] = {
	{ "plugin identity", test_plugin_identity },
	{ "device props", test_device_props },
	{ "device props respect struct_size", test_device_props_struct_size },
	{ "zero-byte allocations and copies", test_alloc_zero },
	{ "odd sizes and 64-byte alignment", test_alloc_sizes_alignment },
	{ "memory limit gives OUT_OF_MEMORY", test_alloc_limit },
	{ "free of unknown pointers", test_free_unknown },
	{ "copies out of range", test_copy_out_of_range },
	{ "sync copies h2d d2d d2h peer", test_copies_sync },
	{ "async copies and peer copies", test_copies_async },
	{ "sync calls wait for queued work", test_sync_calls_wait },
	{ "memory info", test_memory_info },
	{ "pinned host and unified memory", test_host_and_unified },
	{ "device pointer dereference", test_device_pointer_deref },
};

static const struct test_entry stream_tests[] = {
	{ "event orders two streams", test_event_orders_streams },
	{ "event across devices", test_event_cross_device },
	{ "stream query", test_stream_query },
	{ "host callbacks once and in order", test_callbacks_once_in_order },
	{ "event timing", test_event_timing },
	{ "destroy with pending work", test_destroy_pending },
	{ "invalid handles", test_stream_errors },
};

static const struct test_entry coll_tests[] = {
	{ "unique ids", test_unique_id },
	{ "comm rank", test_comm_rank },
	{ "all_reduce: every dtype x op x count, 1-4 ranks",
	  test_all_reduce_matrix },
	{ "all_reduce in place", test_all_reduce_in_place },
	{ "all_reduce bool avg unsupported", test_all_reduce_bool_avg },
	{ "broadcast", test_broadcast },
	{ "reduce", test_reduce },
	{ "all_gather", test_all_gather },
	{ "reduce_scatter", test_reduce_scatter },
	{ "all_to_all", test_all_to_all },
	{ "send/recv ring", test_send_recv_ring },
	{ "nested groups", test_nested_groups },
	{ "one thread per rank", test_collectives_thread_per_rank },
	{ "errors", test_coll_errors },
};

static const struct test_entry lifecycle_tests[] = {
	{ "collective timeout", test_collective_timeout },
	{ "settings re-read at init", test_settings_reread },
	{ "BLAS library and kernel set (KEEL_CPU_BLAS)", test_blas_loader },
	{ "finalize releases everything", test_finalize_releases_everything },
};

int main(int argc, char **argv)
{
	unsigned failures;

	if (argc == 2 && !strcmp(argv[1], "--blas-child"))
		return blas_child();
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 2;
	if (ADD_SUITE("memory", common_suite_init, NULL, memory_tests) ||
	    ADD_SUITE("streams", common_suite_init, NULL, stream_tests) ||
	    ADD_SUITE("collectives", coll_suite_init, coll_suite_cleanup,
		      coll_tests) ||
	    ADD_SUITE("lifecycle", lifecycle_suite_init,
		      lifecycle_suite_cleanup, lifecycle_tests)) {
		CU_cleanup_registry();
		return 2;
	}
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	failures = CU_get_number_of_failures() +
		   CU_get_number_of_suites_failed() +
		   CU_get_number_of_tests_failed();
	CU_cleanup_registry();
	keel_shutdown();
	return failures ? 1 : 0;
}
