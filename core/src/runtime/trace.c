/*
 * keel — Chrome trace-event recording (keel_trace_*, KEEL_TRACE=FILE).
 *
 * While on, the dispatcher reports every op call (keel__trace_op) and the
 * runtime's wrappers every host<->device copy (keel__trace_copy) and every
 * device, stream or event synchronize (keel__trace_sync). Events are kept
 * in one growable array behind a mutex, up to TRACE_MAX_EVENTS; later ones
 * are only counted. keel_trace_stop (or the process exit, for KEEL_TRACE)
 * writes them as a trace-event JSON object, through FILE.tmp.<pid>,
 * fsync and rename so that a reader never sees half a file.
 *
 * Tracks: ops run on "host thread N" (one per calling thread, numbered in
 * order of their first event); copies and synchronizes on
 * "<device> stream N", stream 0 being the default stream, which is also
 * where device-wide synchronizes and event waits are drawn. Every time is
 * the host's CLOCK_MONOTONIC, relative to keel_trace_start: the device
 * ABI's profiler group has no clock to read, so device time is not
 * recorded (a synchronize shows how long the host waited for it).
 *
 * Off, the cost is the dispatcher's one relaxed load of keel__prof_state,
 * which this file owns because it is the lowest layer that needs it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <keel/ops.h>

#include "runtime/runtime_internal.h"
#include "keel_config.h"

#define TRACE_MAX_EVENTS (UINT32_C(4) << 20)
#define TRACE_FIRST_CAP 4096u
#define TRACE_MAX_PLACES 64
#define TRACE_MAX_TRACKS 256
#define TRACE_DEVICE_TID 1000u /* device tracks are numbered from here */

atomic_int keel__prof_state;

enum { CAT_OP, CAT_COPY, CAT_SYNC };

struct trace_event {
    uint64_t ts, dur; /* ns since the trace started */
    uint64_t bytes;   /* copies */
    const char *name; /* a static string */
    const char *dtype;
    int64_t shape[KEEL__TRACE_SHAPE];
    uint32_t tid;
    uint16_t place; /* index into places[], UINT16_MAX when none */
    uint8_t cat;
    int8_t ndim; /* -1 when no shape */
    uint32_t host_tid; /* copies and syncs: the thread that asked */
};

struct trace_place {
    keel_place place;
    char name[48];
};

struct trace_track {
    uint16_t place;
    uint16_t stream_no;
    keel_stream stream;
};

static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static struct trace_event *events;
static uint32_t nevents, cap_events;
static uint64_t dropped;
static uint64_t t_start;
static char *trace_path;
static bool tracing;
static struct trace_place places[TRACE_MAX_PLACES];
static int nplaces;
static struct trace_track tracks[TRACE_MAX_TRACKS];
static int ntracks;
static atomic_uint host_threads;
static _Thread_local uint32_t tl_tid;
static atomic_int env_checked;
static atomic_int exit_hooked;

uint64_t keel__trace_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint32_t host_tid(void)
{
    if (!tl_tid)
        tl_tid = atomic_fetch_add(&host_threads, 1) + 1;
    return tl_tid;
}

/* The index of `pl` in places[] (added when new), or UINT16_MAX. The
 * device's name is asked outside trace_lock: keel_place_name takes the
 * registry's lock, which callers of the hooks may hold. */
static uint16_t place_index(keel_place pl)
{
    char name[48];
    int i;

    pthread_mutex_lock(&trace_lock);
    for (i = 0; i < nplaces; i++)
        if (places[i].place.plugin == pl.plugin &&
            places[i].place.device == pl.device)
            break;
    pthread_mutex_unlock(&trace_lock);
    if (i < nplaces)
        return (uint16_t)i;
    if (keel_place_name(pl, name, sizeof(name)) != KEEL_STATUS_OK)
        snprintf(name, sizeof(name), "plugin#%d:%d", (int)pl.plugin,
                 (int)pl.device);
    pthread_mutex_lock(&trace_lock);
    for (i = 0; i < nplaces; i++)
        if (places[i].place.plugin == pl.plugin &&
            places[i].place.device == pl.device)
            break;
    if (i == nplaces && nplaces < TRACE_MAX_PLACES) {
        places[i].place = pl;
        memcpy(places[i].name, name, sizeof(name));
        nplaces++;
    }
    pthread_mutex_unlock(&trace_lock);
    return i < TRACE_MAX_PLACES ? (uint16_t)i : UINT16_MAX;
}

/* The tid of (place, stream)'s track; trace_lock held. 0 when the table
 * is full (the event then goes to the host thread's track). */
static uint32_t track_tid_locked(uint16_t place, keel_stream stream)
{
    uint16_t no = stream ? 1 : 0;
    int i;

    for (i = 0; i < ntracks; i++) {
        if (tracks[i].place != place)
            continue;
        if (tracks[i].stream == stream)
            return TRACE_DEVICE_TID + (uint32_t)i;
        if (stream && tracks[i].stream_no >= no)
            no = (uint16_t)(tracks[i].stream_no + 1);
    }
    if (ntracks == TRACE_MAX_TRACKS)
        return 0;
    tracks[ntracks].place = place;
    tracks[ntracks].stream = stream;
    tracks[ntracks].stream_no = no;
    return TRACE_DEVICE_TID + (uint32_t)ntracks++;
}

/* Room for one more event; trace_lock held. NULL (and counted) when the
 * cap is reached or memory ran out. */
static struct trace_event *next_event_locked(void)
{
    if (nevents == cap_events) {
        uint32_t cap = cap_events ? cap_events : TRACE_FIRST_CAP / 2;
        struct trace_event *e;

        if (cap >= TRACE_MAX_EVENTS / 2 ||
            (size_t)cap * 2 > SIZE_MAX / sizeof(*events)) {
            dropped++;
            return NULL;
        }
        cap *= 2;
        e = realloc(events, (size_t)cap * sizeof(*events));
        if (!e) {
            dropped++;
            return NULL;
        }
        events = e;
        cap_events = cap;
    }
    return &events[nevents++];
}

/* t0 and t1 as times since the start; false when the trace is off. */
static bool span_locked(uint64_t t0, uint64_t t1, uint64_t *ts,
                        uint64_t *dur)
{
    if (!tracing)
        return false;
    if (t0 < t_start)
        t0 = t_start;
    if (t1 < t0)
        t1 = t0;
    *ts = t0 - t_start;
    *dur = t1 - t0;
    return true;
}

void keel__trace_op(const char *name, const keel__trace_args *a, uint64_t t0,
                    uint64_t t1)
{
    uint16_t pl = UINT16_MAX;
    uint32_t tid = host_tid();
    struct trace_event *e;
    uint64_t ts, dur;

    if (a && a->have_place)
        pl = place_index(a->place);
    pthread_mutex_lock(&trace_lock);
    if (span_locked(t0, t1, &ts, &dur) && (e = next_event_locked())) {
        memset(e, 0, sizeof(*e));
        e->ts = ts;
        e->dur = dur;
        e->name = name ? name : "op";
        e->cat = CAT_OP;
        e->tid = tid;
        e->host_tid = tid;
        e->place = pl;
        e->ndim = -1;
        if (a) {
            e->dtype = a->dtype;
            if (a->ndim >= 0) {
                e->ndim = (int8_t)(a->ndim > 127 ? 127 : a->ndim);
                for (int i = 0; i < a->ndim && i < KEEL__TRACE_SHAPE; i++)
                    e->shape[i] = a->shape[i];
            }
        }
    }
    pthread_mutex_unlock(&trace_lock);
}

static void device_event(uint8_t cat, const char *name, keel_place place,
                         keel_stream stream, uint64_t bytes, uint64_t t0)
{
    uint64_t t1 = keel__trace_now(), ts, dur;
    uint32_t tid = host_tid();
    uint16_t pl = place_index(place);
    struct trace_event *e;

    pthread_mutex_lock(&trace_lock);
    if (span_locked(t0, t1, &ts, &dur) && (e = next_event_locked())) {
        uint32_t track = pl == UINT16_MAX ? 0 : track_tid_locked(pl, stream);

        memset(e, 0, sizeof(*e));
        e->ts = ts;
        e->dur = dur;
        e->bytes = bytes;
        e->name = name;
        e->cat = cat;
        e->tid = track ? track : tid;
        e->host_tid = tid;
        e->place = pl;
        e->ndim = -1;
    }
    pthread_mutex_unlock(&trace_lock);
}

void keel__trace_copy(const char *name, keel_place place, keel_stream stream,
                      uint64_t bytes, uint64_t t0)
{
    device_event(CAT_COPY, name, place, stream, bytes, t0);
}

void keel__trace_sync(const char *name, keel_place place, keel_stream stream,
                      uint64_t t0)
{
    device_event(CAT_SYNC, name, place, stream, 0, t0);
}

/* ---- writing ------------------------------------------------------------ */

/* By track, then begin time; a longer event first at the same time so
 * that a parent precedes the calls nested in it. */
static int by_track_time(const void *pa, const void *pb)
{
    const struct trace_event *a = pa, *b = pb;

    if (a->tid != b->tid)
        return a->tid < b->tid ? -1 : 1;
    if (a->ts != b->ts)
        return a->ts < b->ts ? -1 : 1;
    if (a->dur != b->dur)
        return a->dur > b->dur ? -1 : 1;
    return 0;
}

static void put_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static const char *const cat_names[] = {"op", "copy", "sync"};

static void put_event(FILE *f, const struct trace_event *e, long pid)
{
    fputs(",\n{\"name\":", f);
    put_json_str(f, e->name);
    fprintf(f,
            ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%" PRIu64 ".%03u,"
            "\"dur\":%" PRIu64 ".%03u,\"pid\":%ld,\"tid\":%" PRIu32
            ",\"args\":{",
            cat_names[e->cat], e->ts / 1000, (unsigned)(e->ts % 1000),
            e->dur / 1000, (unsigned)(e->dur % 1000), pid, e->tid);
    if (e->place != UINT16_MAX && e->place < nplaces) {
        fputs("\"device\":", f);
        put_json_str(f, places[e->place].name);
    } else {
        fputs("\"device\":null", f);
    }
    if (e->dtype) {
        fputs(",\"dtype\":", f);
        put_json_str(f, e->dtype);
    }
    if (e->ndim >= 0) {
        fputs(",\"shape\":\"[", f);
        for (int i = 0; i < e->ndim && i < KEEL__TRACE_SHAPE; i++)
            fprintf(f, "%s%" PRId64, i ? "," : "", e->shape[i]);
        fputs(e->ndim > KEEL__TRACE_SHAPE ? ",...]\"" : "]\"", f);
    }
    if (e->cat == CAT_COPY)
        fprintf(f, ",\"bytes\":%" PRIu64, e->bytes);
    if (e->cat != CAT_OP)
        fprintf(f, ",\"host_thread\":%" PRIu32, e->host_tid);
    fputs("}}", f);
}

static void put_meta(FILE *f, long pid, uint32_t tid, const char *what,
                     const char *name, uint32_t sort)
{
    fprintf(f, ",\n{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%ld,\"tid\":%" PRIu32
               ",\"args\":{\"name\":",
            what, pid, tid);
    put_json_str(f, name);
    fputs("}}", f);
    fprintf(f, ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%ld,"
               "\"tid\":%" PRIu32 ",\"args\":{\"sort_index\":%" PRIu32 "}}",
            pid, tid, sort);
}

/* The whole document to f; trace_lock held. */
static void put_trace_locked(FILE *f)
{
    long pid = (long)getpid();
    uint32_t nhost = atomic_load(&host_threads);
    char name[96];

    qsort(events, nevents, sizeof(*events), by_track_time);
    fprintf(f, "{\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\","
               "\"pid\":%ld,\"tid\":0,\"args\":{\"name\":\"keel (pid %ld)\"}}",
            pid, pid);
    for (uint32_t t = 1; t <= nhost; t++) {
        snprintf(name, sizeof(name), "host thread %" PRIu32, t);
        put_meta(f, pid, t, "thread_name", name, t);
    }
    for (int i = 0; i < ntracks; i++) {
        snprintf(name, sizeof(name), "%s stream %u%s",
                 places[tracks[i].place].name, (unsigned)tracks[i].stream_no,
                 tracks[i].stream ? "" : " (default)");
        put_meta(f, pid, TRACE_DEVICE_TID + (uint32_t)i, "thread_name", name,
                 TRACE_DEVICE_TID + (uint32_t)i);
    }
    for (uint32_t i = 0; i < nevents; i++)
        put_event(f, &events[i], pid);
    fprintf(f, "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{"
               "\"keel_version\":\"%s\",\"clock\":\"host CLOCK_MONOTONIC, "
               "microseconds since keel_trace_start\",\"device_timestamps\":"
               "false,\"events\":%" PRIu32 ",\"dropped_events\":%" PRIu64
               ",\"max_events\":%" PRIu32 "}}\n",
            KEEL_VERSION, nevents, dropped, TRACE_MAX_EVENTS);
}

static keel_status write_trace_locked(const char *path)
{
    char *tmp = keel__asprintf("%s.tmp.%ld", path, (long)getpid());
    keel_status st = KEEL_STATUS_OK;
    const char *step = NULL;
    FILE *f;
    int err = 0;

    if (!tmp)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_trace_stop: out of host memory");
    f = fopen(tmp, "wb");
    if (!f) {
        step = "create";
        err = errno;
        goto out;
    }
    put_trace_locked(f);
    if (ferror(f) || fflush(f)) {
        step = "write";
        err = errno;
    } else if (fsync(fileno(f))) {
        step = "fsync";
        err = errno;
    }
    if (fclose(f) && !step) {
        step = "close";
        err = errno;
    }
    if (!step && rename(tmp, path)) {
        step = "rename";
        err = errno;
    }
    if (step)
        remove(tmp);
out:
    if (step)
        st = keel__error(KEEL_STATUS_IO_ERROR,
                         "keel_trace_stop: could not %s '%s' for the trace "
                         "'%s': %s",
                         step, tmp, path, err ? strerror(err) : "I/O error");
    free(tmp);
    return st;
}

/* ---- the switch ----------------------------------------------------------- */

static void reset_locked(void)
{
    free(events);
    events = NULL;
    nevents = cap_events = 0;
    dropped = 0;
    nplaces = ntracks = 0;
    free(trace_path);
    trace_path = NULL;
}

keel_status keel_trace_start(const char *path)
{
    char *copy;

    atomic_store(&env_checked, 1);
    if (!path || !*path)
        return keel__error(KEEL_STATUS_INVALID_ARGUMENT,
                           "keel_trace_start: the path is %s",
                           path ? "empty" : "NULL");
    copy = keel__strdup(path);
    if (!copy)
        return keel__error(KEEL_STATUS_OUT_OF_MEMORY,
                           "keel_trace_start: out of host memory");
    pthread_mutex_lock(&trace_lock);
    if (tracing) {
        keel_status st = keel__error(
            KEEL_STATUS_INVALID_STATE,
            "keel_trace_start: a trace to '%s' is already recording; "
            "keel_trace_stop it first",
            trace_path);

        pthread_mutex_unlock(&trace_lock);
        free(copy);
        return st;
    }
    reset_locked();
    trace_path = copy;
    t_start = keel__trace_now();
    tracing = true;
    atomic_fetch_or(&keel__prof_state, KEEL__PROF_TRACE);
    pthread_mutex_unlock(&trace_lock);
    return KEEL_STATUS_OK;
}

keel_status keel_trace_stop(void)
{
    keel_status st;

    pthread_mutex_lock(&trace_lock);
    if (!tracing) {
        pthread_mutex_unlock(&trace_lock);
        return keel__error(KEEL_STATUS_INVALID_STATE,
                           "keel_trace_stop: no trace is recording");
    }
    atomic_fetch_and(&keel__prof_state, ~KEEL__PROF_TRACE);
    tracing = false;
    st = write_trace_locked(trace_path);
    reset_locked();
    pthread_mutex_unlock(&trace_lock);
    return st;
}

static void stop_at_exit(void)
{
    bool on;

    pthread_mutex_lock(&trace_lock);
    on = tracing;
    pthread_mutex_unlock(&trace_lock);
    if (on && keel_trace_stop() != KEEL_STATUS_OK)
        fprintf(stderr, "keel: KEEL_TRACE: %s\n", keel_last_error());
}

void keel__trace_env(void)
{
    const char *e;

    if (atomic_exchange(&env_checked, 1))
        return;
    e = getenv("KEEL_TRACE");
    if (!e || !*e) {
        /* KEEL_PROFILE=trace:FILE is the same request, spelled with the
         * profiler's variable. */
        e = getenv("KEEL_PROFILE");
        if (!e || strncmp(e, "trace:", 6) || !e[6])
            return;
        e += 6;
    }
    if (keel_trace_start(e) != KEEL_STATUS_OK) {
        keel__log(KEEL_LOG_WARN, "KEEL_TRACE: %s", keel_last_error());
        return;
    }
    if (!atomic_exchange(&exit_hooked, 1))
        atexit(stop_at_exit);
}
