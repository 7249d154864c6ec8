/*
 * keel CPU reference plugin — entry point, settings, error reporting, the
 * handle registry and the device group. See cpu_internal.h for the design.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "cpu_internal.h"
#include "kernels/kblas.h"
#include "kernels/kern.h"

struct cpu_state cpu_g = {
	.reg_lock = PTHREAD_MUTEX_INITIALIZER,
};

/* ------------------------------------------------------------------------ */
/* Host services                                                            */
/* ------------------------------------------------------------------------ */

/* true when the host table provides member m (inside struct_size, non-NULL) */
#define CPU_HOST_HAS(m)                                                     \
	(cpu_g.host &&                                                      \
	 cpu_g.host->header.struct_size >=                                  \
		 offsetof(keel_host_api, m) + sizeof(cpu_g.host->m) &&      \
	 cpu_g.host->m)

void cpu_report_msg(keel_status status, const char *msg)
{
	if (CPU_HOST_HAS(set_error))
		cpu_g.host->set_error(status, msg);
}

void cpu_report(keel_status status, const char *fmt, ...)
{
	char msg[CPU_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	cpu_report_msg(status, msg);
}

void cpu_log(keel_log_level level, const char *fmt, ...)
{
	char msg[CPU_MSG_MAX];
	va_list ap;

	if (!CPU_HOST_HAS(log))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	cpu_g.host->log(level, msg);
}

const char *cpu_getenv(const char *name)
{
	if (CPU_HOST_HAS(get_env))
		return cpu_g.host->get_env(name);
	return getenv(name);
}

/* ------------------------------------------------------------------------ */
/* Time                                                                     */
/* ------------------------------------------------------------------------ */

struct timespec cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts;
}

struct timespec cpu_deadline_ms(uint32_t ms)
{
	struct timespec ts = cpu_now();

	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

double cpu_ts_ms(struct timespec a, struct timespec b)
{
	return (double)(b.tv_sec - a.tv_sec) * 1e3 +
	       (double)(b.tv_nsec - a.tv_nsec) / 1e6;
}

/* ------------------------------------------------------------------------ */
/* Settings                                                                 */
/* ------------------------------------------------------------------------ */

static bool cpu_blank(const char *s)
{
	while (*s && isspace((unsigned char)*s))
		s++;
	return *s == '\0';
}

static keel_status cpu_parse_int(const char *name, long lo, long hi, long def,
				 long *out, char *msg, size_t msg_size)
{
	const char *s = cpu_getenv(name);
	char *end;
	long v;

	if (!s || cpu_blank(s)) {
		*out = def;
		return KEEL_STATUS_OK;
	}
	errno = 0;
	v = strtol(s, &end, 10);
	while (*end && isspace((unsigned char)*end))
		end++;
	if (errno || end == s || *end || v < lo || v > hi) {
		snprintf(msg, msg_size,
			 "%s='%s' is invalid: expected an integer in %ld..%ld",
			 name, s, lo, hi);
		return KEEL_STATUS_INVALID_ARGUMENT;
	}
	*out = v;
	return KEEL_STATUS_OK;
}

static keel_status cpu_parse_bool(const char *name, bool *out, char *msg,
				  size_t msg_size)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off" };
	const char *s = cpu_getenv(name);
	size_t i;

	*out = false;
	if (!s || cpu_blank(s))
		return KEEL_STATUS_OK;
	for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return KEEL_STATUS_OK;
		}
		if (!strcasecmp(s, no[i]))
			return KEEL_STATUS_OK;
	}
	snprintf(msg, msg_size,
		 "%s='%s' is invalid: expected 0/1 (or true/false, yes/no, on/off)",
		 name, s);
	return KEEL_STATUS_INVALID_ARGUMENT;
}

/* "4096", "64K", "64M", "1G", "2T" (powers of 1024); "0" means no limit. */
static keel_status cpu_parse_size(const char *name, uint64_t *out, char *msg,
				  size_t msg_size)
{
	const char *s = cpu_getenv(name);
	unsigned long long v;
	unsigned shift = 0;
	char *end;

	*out = 0;
	if (!s || cpu_blank(s))
		return KEEL_STATUS_OK;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || !isdigit((unsigned char)*s))
		goto invalid;
	switch (toupper((unsigned char)*end)) {
	case 'K': shift = 10; end++; break;
	case 'M': shift = 20; end++; break;
	case 'G': shift = 30; end++; break;
	case 'T': shift = 40; end++; break;
	default: break;
	}
	if (shift && toupper((unsigned char)*end) == 'I')
		end++;
	if (toupper((unsigned char)*end) == 'B')
		end++;
	if (*end)
		goto invalid;
	if (shift && v > (UINT64_MAX >> shift))
		goto invalid;
	*out = (uint64_t)v << shift;
	return KEEL_STATUS_OK;
invalid:
	snprintf(msg, msg_size,
		 "%s='%s' is invalid: expected a byte count with an optional K, M, G or T suffix (e.g. 64M)",
		 name, s);
	return KEEL_STATUS_INVALID_ARGUMENT;
}

static keel_status cpu_config_read(struct cpu_config *cfg, char *msg,
				   size_t msg_size)
{
	keel_status st;
	long v;

	st = cpu_parse_int("KEEL_CPU_DEVICES", 1, CPU_MAX_DEVICES, 1, &v, msg,
			   msg_size);
	if (st)
		return st;
	cfg->ndevices = (int32_t)v;
	st = cpu_parse_size("KEEL_CPU_MEM_LIMIT", &cfg->mem_limit, msg,
			    msg_size);
	if (st)
		return st;
	st = cpu_parse_bool("KEEL_CPU_ASYNC", &cfg->async, msg, msg_size);
	if (st)
		return st;
	st = cpu_parse_bool("KEEL_CPU_DISCRETE", &cfg->discrete, msg,
			    msg_size);
	if (st)
		return st;
	st = cpu_parse_int("KEEL_CPU_COLL_TIMEOUT_MS", 1,
			   CPU_MAX_COLL_TIMEOUT_MS, CPU_DEFAULT_COLL_TIMEOUT_MS,
			   &v, msg, msg_size);
	if (st)
		return st;
	cfg->coll_timeout_ms = (uint32_t)v;
#if KEEL_ABI_VERSION_MINOR >= 3
	/* The unique id's size (ABI 1.3): above 128 the plugin behaves like
	 * one whose library needs a bigger id (HCCL's is 4,108 bytes). */
	st = cpu_parse_int("KEEL_CPU_COMM_ID_BYTES", KEEL_COMM_ID_BYTES,
			   KEEL_COMM_ID_MAX_BYTES, KEEL_COMM_ID_BYTES, &v, msg,
			   msg_size);
	if (st)
		return st;
	cfg->comm_id_bytes = (uint32_t)v;
#else
	cfg->comm_id_bytes = KEEL_COMM_ID_BYTES;
#endif
	return KEEL_STATUS_OK;
}

/* ------------------------------------------------------------------------ */
/* System probing                                                           */
/* ------------------------------------------------------------------------ */

static void cpu_probe_vendor(char *out, size_t size)
{
	char line[256];
	FILE *f;

	snprintf(out, size, "unknown");
	f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *colon, *v;
		size_t len;

		if (strncmp(line, "vendor_id", 9) != 0)
			continue;
		colon = strchr(line, ':');
		if (!colon)
			break;
		v = colon + 1;
		while (*v == ' ' || *v == '\t')
			v++;
		len = strcspn(v, "\r\n");
		if (len)
			snprintf(out, size, "%.*s", (int)len, v);
		break;
	}
	fclose(f);
}

static void cpu_probe_system(void)
{
	struct utsname u;
	long n, pages, page_size;

	cpu_probe_vendor(cpu_g.vendor, sizeof(cpu_g.vendor));
	if (uname(&u) == 0)
		snprintf(cpu_g.arch, sizeof(cpu_g.arch), "%.31s", u.machine);
	else
		snprintf(cpu_g.arch, sizeof(cpu_g.arch), "unknown");
	n = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_g.compute_units = n > 0 ? (uint32_t)n : 1;
	pages = sysconf(_SC_PHYS_PAGES);
	page_size = sysconf(_SC_PAGESIZE);
	if (pages > 0 && page_size > 0)
		cpu_g.phys_mem = (uint64_t)pages * (uint64_t)page_size;
	else
		cpu_g.phys_mem = UINT64_C(1) << 30;
}

/* ------------------------------------------------------------------------ */
/* Handle registry                                                          */
/* ------------------------------------------------------------------------ */

const char *cpu_handle_kind_name(enum cpu_handle_kind kind)
{
	switch (kind) {
	case CPU_HANDLE_STREAM: return "stream";
	case CPU_HANDLE_EVENT: return "event";
	case CPU_HANDLE_COMM: return "communicator";
	}
	return "handle";
}

/* Index of the first handle with key >= k. Caller holds reg_lock. */
static size_t cpu_handle_lower(uintptr_t k)
{
	size_t lo = 0, hi = cpu_g.nhandles;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (cpu_g.handles[mid].key < k)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int cpu_handle_add(const void *p, enum cpu_handle_kind kind, int32_t device)
{
	uintptr_t k = (uintptr_t)p;
	size_t i;
	int ret = 0;

	pthread_mutex_lock(&cpu_g.reg_lock);
	if (cpu_g.nhandles == cpu_g.handle_cap) {
		size_t cap = cpu_g.handle_cap ? cpu_g.handle_cap * 2 : 32;
		struct cpu_handle *v;

		v = realloc(cpu_g.handles, cap * sizeof(*v));
		if (!v) {
			ret = -ENOMEM;
			goto out;
		}
		cpu_g.handles = v;
		cpu_g.handle_cap = cap;
	}
	i = cpu_handle_lower(k);
	memmove(&cpu_g.handles[i + 1], &cpu_g.handles[i],
		(cpu_g.nhandles - i) * sizeof(cpu_g.handles[0]));
	cpu_g.handles[i] = (struct cpu_handle){ k, kind, device };
	cpu_g.nhandles++;
out:
	pthread_mutex_unlock(&cpu_g.reg_lock);
	return ret;
}

void cpu_handle_remove(const void *p)
{
	uintptr_t k = (uintptr_t)p;
	size_t i;

	pthread_mutex_lock(&cpu_g.reg_lock);
	i = cpu_handle_lower(k);
	if (i < cpu_g.nhandles && cpu_g.handles[i].key == k) {
		memmove(&cpu_g.handles[i], &cpu_g.handles[i + 1],
			(cpu_g.nhandles - i - 1) * sizeof(cpu_g.handles[0]));
		cpu_g.nhandles--;
	}
	pthread_mutex_unlock(&cpu_g.reg_lock);
}

bool cpu_handle_find(const void *p, enum cpu_handle_kind kind,
		     int32_t *device)
{
	uintptr_t k = (uintptr_t)p;
	bool found = false;
	size_t i;

	pthread_mutex_lock(&cpu_g.reg_lock);
	i = cpu_handle_lower(k);
	if (i < cpu_g.nhandles && cpu_g.handles[i].key == k &&
	    cpu_g.handles[i].kind == kind) {
		found = true;
		if (device)
			*device = cpu_g.handles[i].device;
	}
	pthread_mutex_unlock(&cpu_g.reg_lock);
	return found;
}

void **cpu_handle_list(enum cpu_handle_kind kind, size_t *n)
{
	void **out = NULL;
	size_t i;

	*n = 0;
	pthread_mutex_lock(&cpu_g.reg_lock);
	if (cpu_g.nhandles)
		out = malloc(cpu_g.nhandles * sizeof(*out));
	for (i = 0; out && i < cpu_g.nhandles; i++)
		if (cpu_g.handles[i].kind == kind)
			out[(*n)++] = (void *)cpu_g.handles[i].key;
	pthread_mutex_unlock(&cpu_g.reg_lock);
	return out;
}

/* ------------------------------------------------------------------------ */
/* Device group                                                             */
/* ------------------------------------------------------------------------ */

keel_status cpu_dev_get(int32_t device, const char *call,
			struct cpu_device **dev)
{
	if (!cpu_g.initialized)
		return cpu_err(KEEL_STATUS_NOT_INITIALIZED,
			       "%s: the cpu plugin is not initialised (call init first)",
			       call);
	if (device < 0 || device >= cpu_g.ndevs)
		return cpu_err(KEEL_STATUS_INVALID_DEVICE,
			       "%s: device %d does not exist (the cpu plugin has %d device%s, KEEL_CPU_DEVICES)",
			       call, (int)device, (int)cpu_g.ndevs,
			       cpu_g.ndevs == 1 ? "" : "s");
	*dev = &cpu_g.devs[device];
	return KEEL_STATUS_OK;
}

/* The plugin's description (keel devices): the runtime mode, then which
 * implementation each op class uses (cpu_kernels_describe). */
static char cpu_description[512];

static const char *cpu_describe(const struct cpu_config *cfg)
{
	size_t n;

	n = (size_t)snprintf(cpu_description, sizeof(cpu_description),
			     "Reference CPU backend (%s, %s)",
			     cfg->async ? "async" : "inline",
			     cfg->discrete ? "discrete" : "host-addressable");
	if (n < sizeof(cpu_description))
		cpu_kernels_describe(cpu_description + n,
				     sizeof(cpu_description) - n);
	return cpu_description;
}

static keel_plugin_api cpu_plugin_api;

static void cpu_devices_release(void)
{
	int32_t i;

	/* Workers first: queued work may reference comms, events, memory. */
	for (i = 0; i < cpu_g.ndevs; i++)
		cpu_stream_device_release(&cpu_g.devs[i]);
	cpu_coll_release_all();
	cpu_event_release_all();
	for (i = 0; i < cpu_g.ndevs; i++)
		cpu_mem_device_release(&cpu_g.devs[i]);
	free(cpu_g.devs);
	cpu_g.devs = NULL;
	cpu_g.ndevs = 0;
	pthread_mutex_lock(&cpu_g.reg_lock);
	free(cpu_g.handles);
	cpu_g.handles = NULL;
	cpu_g.nhandles = 0;
	cpu_g.handle_cap = 0;
	pthread_mutex_unlock(&cpu_g.reg_lock);
}

static keel_status cpu_init(void)
{
	char msg[CPU_MSG_MAX] = "";
	struct cpu_config cfg = { 0 };
	keel_status st;
	int32_t i;

	if (cpu_g.initialized)
		return KEEL_STATUS_OK;
	st = cpu_config_read(&cfg, msg, sizeof(msg));
	if (st) {
		cpu_g.cfg_valid = false;
		cpu_log(KEEL_LOG_ERROR, "cpu plugin: init: %s", msg);
		return cpu_err(st, "init: %s", msg);
	}
	for (i = 0; i < cpu_g.nvisible; i++)
		if (cpu_g.visible[i] >= cfg.ndevices) {
			cpu_g.cfg_valid = false;
			return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
				       "init: visible device %d does not exist (KEEL_CPU_DEVICES gives %d)",
				       (int)cpu_g.visible[i], (int)cfg.ndevices);
		}
	if (cpu_g.nvisible)
		cfg.ndevices = cpu_g.nvisible;
	cpu_g.cfg = cfg;
	cpu_g.cfg_valid = true;
	st = cpu_isa_configure(msg, sizeof(msg));
	if (st) {
		cpu_g.cfg_valid = false;
		cpu_log(KEEL_LOG_ERROR, "cpu plugin: init: %s", msg);
		return cpu_err(st, "init: %s", msg);
	}
	st = cpu_blas_load(msg, sizeof(msg));
	if (st) {
		cpu_log(KEEL_LOG_ERROR, "cpu plugin: init: %s", msg);
		return cpu_err(st, "init: %s", msg);
	}
	cpu_plugin_api.description = cpu_describe(&cfg);

	cpu_g.devs = calloc((size_t)cfg.ndevices, sizeof(*cpu_g.devs));
	if (!cpu_g.devs)
		return cpu_err(KEEL_STATUS_DEVICE_ERROR,
			       "init: out of host memory for %d devices",
			       (int)cfg.ndevices);
	for (i = 0; i < cfg.ndevices; i++) {
		struct cpu_device *dev = &cpu_g.devs[i];

		dev->index = i;
		cpu_mem_device_init(dev);
		cpu_g.ndevs = i + 1;
		st = cpu_stream_device_init(dev);
		if (st)
			goto fail;
	}
	cpu_g.initialized = true;
	cpu_log(KEEL_LOG_INFO,
		"cpu plugin: %d device%s, %s, %s, memory limit %llu bytes, collective timeout %u ms",
		(int)cfg.ndevices, cfg.ndevices == 1 ? "" : "s",
		cfg.async ? "async" : "inline",
		cfg.discrete ? "discrete" : "host-addressable",
		(unsigned long long)cfg.mem_limit, cfg.coll_timeout_ms);
	return KEEL_STATUS_OK;
fail:
	cpu_devices_release();
	return cpu_err(KEEL_STATUS_DEVICE_ERROR,
		       "init: out of host memory while creating device %d",
		       (int)i);
}

static keel_status cpu_finalize(void)
{
	if (!cpu_g.initialized)
		return KEEL_STATUS_OK;
	cpu_devices_release();
	cpu_pool_shutdown();
	cpu_blas_unload();
	cpu_g.initialized = false;
	return KEEL_STATUS_OK;
}

static int32_t cpu_visible_devices(void)
{
	if (cpu_g.initialized)
		return cpu_g.ndevs;
	return cpu_g.cfg_valid ? cpu_g.cfg.ndevices : 0;
}

static keel_status cpu_get_device_count(int32_t *count)
{
	if (!count)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "get_device_count: count is NULL");
	*count = cpu_visible_devices();
	return KEEL_STATUS_OK;
}

static uint32_t cpu_features(const struct cpu_config *cfg)
{
	uint32_t f = KEEL_FEATURE_PINNED_HOST | KEEL_FEATURE_UNIFIED_MEMORY |
		     KEEL_FEATURE_PEER_ACCESS | KEEL_FEATURE_COLLECTIVES |
		     KEEL_FEATURE_EVENT_TIMING | KEEL_FEATURE_HOST_CALLBACK |
		     KEEL_FEATURE_KERNELS;

	if (cfg->async)
		f |= KEEL_FEATURE_ASYNC_COPY;
#if KEEL_ABI_VERSION_MINOR >= 4
	/* Discrete mode biases every address to catch a core that reads
	 * device memory directly; its addresses are not the host's. */
	if (!cfg->discrete)
		f |= KEEL_FEATURE_HOST_ADDRESSES;
#endif
	return f;
}

/* The virtual device behind index `device` (set_visible_devices). */
static int32_t cpu_physical(int32_t device)
{
	return cpu_g.nvisible ? cpu_g.visible[device] : device;
}

static void cpu_props_fill(int32_t device, keel_device_props *p)
{
	const struct cpu_config *cfg = &cpu_g.cfg;

	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "keel CPU %d", (int)cpu_physical(device));
	snprintf(p->vendor, sizeof(p->vendor), "%s", cpu_g.vendor);
	snprintf(p->arch, sizeof(p->arch), "%s", cpu_g.arch);
	snprintf(p->driver_version, sizeof(p->driver_version),
		 "keel-cpu " CPU_PLUGIN_VERSION);
	snprintf(p->bus_id, sizeof(p->bus_id), "virtual:%d",
		 (int)cpu_physical(device));
	p->total_memory = cfg->mem_limit ? cfg->mem_limit : cpu_g.phys_mem;
	p->compute_units = cpu_g.compute_units;
	p->clock_khz = 0;
	p->dtype_mask = KEEL_DTYPE_BIT(KEEL_F32) | KEEL_DTYPE_BIT(KEEL_F64) |
			KEEL_DTYPE_BIT(KEEL_F16) | KEEL_DTYPE_BIT(KEEL_BF16) |
			KEEL_DTYPE_BIT(KEEL_I8) | KEEL_DTYPE_BIT(KEEL_U8) |
			KEEL_DTYPE_BIT(KEEL_I32) | KEEL_DTYPE_BIT(KEEL_I64) |
			KEEL_DTYPE_BIT(KEEL_BOOL);
	p->features = cpu_features(cfg);
	p->alloc_alignment = CPU_ALIGNMENT;
	p->stream_priorities = 1;
}

static keel_status cpu_get_device_props(int32_t device,
					keel_device_props *props)
{
	keel_device_props full;
	uint32_t n;

	if (!props)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "get_device_props: props is NULL");
	if (props->struct_size < sizeof(props->struct_size))
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "get_device_props: props->struct_size is %u, smaller than the struct_size member itself",
			       (unsigned)props->struct_size);
	if (device < 0 || device >= cpu_visible_devices())
		return cpu_err(KEEL_STATUS_INVALID_DEVICE,
			       "get_device_props: device %d does not exist (the cpu plugin has %d)",
			       (int)device, (int)cpu_visible_devices());
	n = props->struct_size;
	if (n > sizeof(full))
		n = sizeof(full);
	cpu_props_fill(device, &full);
	full.struct_size = n;
	memcpy(props, &full, n);
	return KEEL_STATUS_OK;
}

static keel_status cpu_synchronize(int32_t device)
{
	struct cpu_device *dev;
	keel_status st;

	st = cpu_dev_get(device, "synchronize", &dev);
	if (st)
		return st;
	return cpu_device_sync(dev);
}

#if KEEL_ABI_VERSION_MINOR >= 3
/* Before init only; indices are checked against KEEL_CPU_DEVICES there. */
static keel_status cpu_set_visible_devices(const int32_t *devices,
					   int32_t count)
{
	if (cpu_g.initialized)
		return cpu_err(KEEL_STATUS_INVALID_STATE,
			       "set_visible_devices: the plugin is initialised already");
	if (!devices || count < 1 || count > CPU_MAX_DEVICES)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "set_visible_devices: %d devices (1 to %d, list not NULL)",
			       (int)count, CPU_MAX_DEVICES);
	for (int32_t i = 0; i < count; i++) {
		if (devices[i] < 0 || devices[i] >= CPU_MAX_DEVICES)
			return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
				       "set_visible_devices: device %d is out of range",
				       (int)devices[i]);
		for (int32_t j = 0; j < i; j++)
			if (devices[j] == devices[i])
				return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
					       "set_visible_devices: device %d is listed twice",
					       (int)devices[i]);
	}
	memcpy(cpu_g.visible, devices, (size_t)count * sizeof(*devices));
	cpu_g.nvisible = count;
	return KEEL_STATUS_OK;
}

#endif

const keel_device_ops cpu_device_ops = {
	.header = KEEL_TABLE_HEADER(keel_device_ops),
	.init = cpu_init,
	.finalize = cpu_finalize,
	.get_device_count = cpu_get_device_count,
	.get_device_props = cpu_get_device_props,
	.synchronize = cpu_synchronize,
#if KEEL_ABI_VERSION_MINOR >= 3
	.set_visible_devices = cpu_set_visible_devices,
#endif
};

static keel_plugin_api cpu_plugin_api = {
	.header = KEEL_TABLE_HEADER(keel_plugin_api),
	.name = CPU_PLUGIN_NAME,
	.version = CPU_PLUGIN_VERSION,
	.device_type = CPU_PLUGIN_DEVICE_TYPE,
	.description = "Reference CPU backend (inline, host-addressable)",
	.device = &cpu_device_ops,
	.memory = &cpu_memory_ops,
	.stream = &cpu_stream_ops,
	.kernel = &cpu_kernel_ops,
	.collective = &cpu_collective_ops,
	.profiler = NULL,
};

/* ------------------------------------------------------------------------ */
/* Entry point                                                              */
/* ------------------------------------------------------------------------ */

KEEL_PLUGIN_EXPORT const keel_plugin_api *keel_plugin_get_api(
	uint32_t core_abi_major, uint32_t core_abi_minor,
	const keel_host_api *host)
{
	char msg[CPU_MSG_MAX] = "";
	struct cpu_config cfg = { 0 };
	keel_status st;

	if (host && host->header.struct_size < sizeof(keel_table_header))
		host = NULL;
	cpu_g.host = host;
	if (core_abi_major != KEEL_ABI_VERSION_MAJOR) {
		cpu_report(KEEL_STATUS_ABI_MISMATCH,
			"get_api: the cpu plugin implements keel ABI %d.%d, the core speaks %u.%u (major versions differ)",
			KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
			(unsigned)core_abi_major, (unsigned)core_abi_minor);
		return NULL;
	}
	st = cpu_config_read(&cfg, msg, sizeof(msg));
	if (st) {
		cpu_g.cfg_valid = false;
		cpu_log(KEEL_LOG_ERROR, "cpu plugin: get_api: %s", msg);
		cpu_report(st, "get_api: %s", msg);
		return NULL;
	}
	if (!cpu_g.initialized) {
		cpu_g.cfg = cfg;
		cpu_g.cfg_valid = true;
		/* The description names the SIMD level and the BLAS the kernels
		 * will use: both are settled here (init keeps them), since the
		 * core copies the description from this table. */
		st = cpu_isa_configure(msg, sizeof(msg));
		if (st) {
			cpu_g.cfg_valid = false;
			cpu_log(KEEL_LOG_ERROR, "cpu plugin: get_api: %s", msg);
			cpu_report(st, "get_api: %s", msg);
			return NULL;
		}
		/* A BLAS that does not load is init's error to report. */
		(void)cpu_blas_load(msg, sizeof(msg));
		cpu_plugin_api.description = cpu_describe(&cfg);
	}
	cpu_probe_system();
	return &cpu_plugin_api;
}
